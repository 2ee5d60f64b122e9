//! The one output policy every verb follows: validate everything first, write each output file
//! under a temporary name in its final directory, rename it into place only when the verb
//! succeeded; a failure or an interrupt removes the temporary file.
//!
//! An output path is resolved before anything runs ([`check_path`]):
//! - a symlink is followed (never replaced): the temporary file is made beside the file the link
//!   names and renamed onto that file, so the link keeps pointing at the new contents;
//! - `-`, `/dev/stdout`, `/dev/stderr`, `/dev/fd/N` and `/proc/self/fd/N` stream into that open
//!   descriptor (whatever the shell redirected it to);
//! - other paths that are not regular files (/dev/null, a FIFO, a terminal, /dev/full) are
//!   written in place and never renamed over: a rename would turn the node into a regular file;
//! - a block device, a directory, a socket, a path ending in `/`, and any file the run also
//!   reads or writes as an input, target or member (the same bytes after symlinks, loop devices
//!   and partitions: `nines_io::identity`, see [`note_inputs`]) are refused in one line, before
//!   any work starts; so is a regular file whose temporary name cannot be created now (a
//!   read-only directory, /proc, a name too long), and two outputs on one file or one stream;
//! - an output nobody named, derived from another path (RUN.html beside RUN.json), exists only
//!   beside a regular file and never in /dev ([`derived_output`]).
//!
//! Temporary names carry the writer's pid (`.NAME.nines-partial-PID`), so a later run removes
//! the ones a dead nines left behind (kill -9, a second Ctrl-C).

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result, bail};
use nines_io::identity::Identity;

const PARTIAL: &str = ".nines-partial-";

/// Where an output's bytes go, decided once by [`resolve`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Dest {
    /// An open descriptor of this process (`-`, /dev/stdout, /dev/fd/N): written through a dup.
    Stream(RawFd),
    /// An existing node that is not a regular file (character device, FIFO, socket).
    InPlace(PathBuf),
    /// A regular file (existing or not), symlinks resolved: temporary name, then rename.
    Renamed(PathBuf),
}

/// How a file is known: the bytes it reaches when it exists (its device and inode, and for a
/// block device what it sits on: a loop device's backing file, a partition's disk, see
/// `nines_io::identity`), else its absolute path (a file the run will create).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    Bytes(Identity),
    Path(PathBuf),
    /// A stream other than a regular file (a pipe, a socket, a terminal): its device and inode.
    Stream(u64, u64),
}

impl Key {
    /// Whether the two share bytes; with the object they share when it is not `self` or
    /// `other` itself (a loop device's backing file).
    fn clash(&self, other: &Key) -> Option<Option<PathBuf>> {
        match (self, other) {
            (Key::Bytes(a), Key::Bytes(b)) => {
                let shared = a.shared(b)?;
                Some((!a.same_top(b)).then(|| shared.shown.clone()))
            }
            (Key::Path(a), Key::Path(b)) => (a == b).then_some(None),
            (Key::Stream(a, b), Key::Stream(c, d)) => ((a, b) == (c, d)).then_some(None),
            _ => None,
        }
    }
}

/// ", both reach the bytes of X" when two paths clash below what they name.
fn through(shared: &Option<PathBuf>) -> String {
    shared
        .as_ref()
        .map(|p| format!(" (both reach the bytes of {})", p.display()))
        .unwrap_or_default()
}

/// A file the run reads or writes as an input, target or member.
struct Noted {
    role: String,
    shown: PathBuf,
    key: Key,
}

static INPUTS: Mutex<Vec<Noted>> = Mutex::new(Vec::new());

fn key_of(path: &Path) -> Key {
    match Identity::of(path) {
        Ok(id) => Key::Bytes(id),
        Err(_) => Key::Path(canonical_guess(path)),
    }
}

/// Emulated and null targets (`emu:...`, `null:...`) name no file.
fn names_no_file(path: &Path) -> bool {
    let Some(text) = path.to_str() else {
        return false;
    };
    (text.starts_with("null:") || nines_io::emu::EmuSpec::parse(text).is_some())
        && std::fs::symlink_metadata(path).is_err()
}

/// Records files the run reads or writes besides its outputs (`role` names them in messages:
/// "target", "input", "member 2", "--job"); [`check_path`] refuses an output that is one of them.
pub fn note_inputs<'a>(role: &str, paths: impl IntoIterator<Item = &'a Path>) {
    let mut v = INPUTS.lock().unwrap_or_else(|e| e.into_inner());
    for p in paths {
        if p.as_os_str().is_empty() || names_no_file(p) {
            continue;
        }
        v.push(Noted {
            role: role.to_string(),
            shown: p.to_path_buf(),
            key: key_of(p),
        });
    }
}

/// A volume's members (`member 0`, `member 1`, ...): refused when one file or device is given
/// twice ([`check_distinct_inputs`]), then recorded as inputs ([`note_inputs`]) so no output can
/// name one. Every verb that takes a volume's members calls this before its outputs are checked.
pub fn note_members(members: &[std::path::PathBuf]) -> Result<()> {
    let named: Vec<(String, &Path)> = members
        .iter()
        .enumerate()
        .map(|(i, p)| (format!("member {i}"), p.as_path()))
        .collect();
    check_distinct_inputs(&named)?;
    note_inputs("member", members.iter().map(|p| p.as_path()));
    Ok(())
}

/// Refuses a file or device given twice among the members or inputs of one volume (`items`:
/// how each is named in messages, and its path): two paths reaching the same bytes after
/// symlinks (one file, one device, a loop device and its backing file, a partition and its
/// disk), or the same path for files not yet created. Writing one file as two members
/// corrupts the data.
pub fn check_distinct_inputs(items: &[(String, &Path)]) -> Result<()> {
    let mut seen: Vec<(&str, &Path, Key)> = Vec::with_capacity(items.len());
    for (name, path) in items {
        if names_no_file(path) {
            continue;
        }
        let key = key_of(path);
        if let Some((other, other_path, shared)) = seen
            .iter()
            .find_map(|(n, p, k)| k.clash(&key).map(|sh| (n, p, sh)))
        {
            bail!(
                "{other} ({}) and {name} ({}) are the same file{}; give each target or member a \
                 different file or device (one file twice would be written as two)",
                other_path.display(),
                path.display(),
                through(&shared)
            );
        }
        seen.push((name, path, key));
    }
    Ok(())
}

/// The descriptor a path names lexically (`-`, /dev/stdout, /dev/stderr, /dev/fd/N,
/// /proc/self/fd/N, /proc/PID/fd/N for this process).
fn stream_fd(path: &Path) -> Option<RawFd> {
    let text = path.to_str()?;
    match text {
        "-" | "/dev/stdout" => return Some(1),
        "/dev/stderr" => return Some(2),
        "/dev/stdin" => return Some(0),
        _ => {}
    }
    let own = format!("/proc/{}/fd/", std::process::id());
    let n = text
        .strip_prefix("/dev/fd/")
        .or_else(|| text.strip_prefix("/proc/self/fd/"))
        .or_else(|| text.strip_prefix("/proc/thread-self/fd/"))
        .or_else(|| text.strip_prefix(own.as_str()))?;
    n.parse::<RawFd>().ok()
}

/// Follows `path`'s symlinks (at most 40, as the kernel does) to where its bytes would go.
fn resolve(option: &str, path: &Path) -> Result<Dest> {
    if path.as_os_str().is_empty() {
        bail!("{option}: the file name is empty");
    }
    if path.as_os_str().len() > 1 && path.as_os_str().as_encoded_bytes().ends_with(b"/") {
        bail!(
            "{option} {}: ends in /, which names a directory; give a file name",
            path.display()
        );
    }
    let mut cur = path.to_path_buf();
    for _ in 0..40 {
        if let Some(fd) = stream_fd(&cur) {
            return Ok(Dest::Stream(fd));
        }
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&cur).with_context(|| {
                    format!("{option} {}: cannot read the link", path.display())
                })?;
                cur = if target.is_absolute() {
                    target
                } else {
                    parent_dir(&cur).join(target)
                };
            }
            _ => break,
        }
    }
    match std::fs::metadata(&cur) {
        Ok(m) => {
            let ft = m.file_type();
            if ft.is_dir() {
                bail!(
                    "{option} {}: is a directory; give a file name",
                    path.display()
                );
            }
            if ft.is_block_device() {
                bail!(
                    "{option} {}: is a block device; nines writes its outputs only to files, pipes and \
                     character devices (a block device is written only as a target, with --allow-writes)",
                    path.display()
                );
            }
            if ft.is_file() {
                Ok(Dest::Renamed(cur))
            } else {
                Ok(Dest::InPlace(cur))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if std::fs::symlink_metadata(&cur).is_ok_and(|m| m.file_type().is_symlink()) {
                bail!(
                    "{option} {}: too many levels of symbolic links",
                    path.display()
                );
            }
            let dir = parent_dir(&cur);
            match std::fs::metadata(&dir) {
                Ok(m) if m.is_dir() => Ok(Dest::Renamed(cur)),
                Ok(_) => bail!(
                    "{option} {}: {} is not a directory; give a path in an existing directory",
                    path.display(),
                    dir.display()
                ),
                Err(_) => bail!(
                    "{option} {}: directory {} does not exist; create it first",
                    path.display(),
                    dir.display()
                ),
            }
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => bail!(
            "{option} {}: a directory in that path is a file; give a path in an existing directory",
            path.display()
        ),
        Err(e) => Err(anyhow::Error::new(e))
            .with_context(|| format!("{option} {}: cannot use it as an output", path.display())),
    }
}

/// The file behind an open descriptor, for the same checks as a path.
fn fd_key(option: &str, path: &Path, fd: RawFd) -> Result<Option<Key>> {
    // SAFETY: fstat writes into the zeroed struct; a bad descriptor returns -1.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        bail!(
            "{option} {}: descriptor {fd} is not open; redirect it, or give a file name",
            path.display()
        );
    }
    let fmt = st.st_mode & libc::S_IFMT;
    if fmt == libc::S_IFBLK {
        bail!(
            "{option} {}: descriptor {fd} is a block device; nines writes its outputs only to files, \
             pipes and character devices",
            path.display()
        );
    }
    if fmt == libc::S_IFDIR {
        bail!(
            "{option} {}: is a directory; give a file name",
            path.display()
        );
    }
    Ok(Some(if fmt == libc::S_IFREG {
        Key::Bytes(Identity::file(st.st_dev, st.st_ino, path))
    } else {
        Key::Stream(st.st_dev, st.st_ino)
    }))
}

/// The key under which `dest` clashes with inputs and other outputs: a regular file, or a
/// stream (a descriptor, a FIFO, a socket: two outputs on one would interleave); None for
/// character devices named by path (several outputs may all go to /dev/null).
fn dest_key(option: &str, path: &Path, dest: &Dest) -> Result<Option<Key>> {
    Ok(match dest {
        Dest::Stream(fd) => fd_key(option, path, *fd)?,
        Dest::InPlace(p) => std::fs::metadata(p).ok().and_then(|m| {
            let t = m.file_type();
            (t.is_fifo() || t.is_socket()).then(|| Key::Stream(m.dev(), m.ino()))
        }),
        Dest::Renamed(p) => Some(key_of(p)),
    })
}

/// Checks that `path` can be an output before any work starts (see the module comment).
/// `option` names the flag in messages ("--json").
pub fn check_path(option: &str, path: &Path) -> Result<()> {
    let dest = resolve(option, path)?;
    match &dest {
        Dest::Renamed(real) => probe_temporary(option, path, real)?,
        Dest::InPlace(p) if node_kind(p) == "a socket" => bail!(
            "{option} {}: is a socket, which cannot be opened as a file; give a file name",
            path.display()
        ),
        _ => {}
    }
    let Some(key) = dest_key(option, path, &dest)? else {
        return Ok(());
    };
    let inputs = INPUTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((n, shared)) = inputs
        .iter()
        .find_map(|n| key.clash(&n.key).map(|sh| (n, sh)))
    {
        bail!(
            "{option} {}: is also the run's {} ({}){}; writing it would destroy it, give the \
             output its own file",
            path.display(),
            n.role,
            n.shown.display(),
            through(&shared)
        );
    }
    Ok(())
}

/// The temporary name an output is written under (`.NAME.nines-partial-PID` beside `real`).
fn temporary_name(real: &Path) -> PathBuf {
    let name = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    parent_dir(real).join(format!(".{name}{PARTIAL}{}", std::process::id()))
}

/// Creates and removes `real`'s temporary name now, so that an output that cannot be created
/// (a read-only directory, /proc, a name too long once made temporary) is refused before the
/// work, not after it.
fn probe_temporary(option: &str, path: &Path, real: &Path) -> Result<()> {
    let tmp = temporary_name(real);
    // A signal while the probe exists removes it (super::early_signal).
    let _registered = super::early_signal::register(&tmp);
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&tmp);
            Ok(())
        }
        // Ours from an earlier check of this run (or a crash of a process of our pid).
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENAMETOOLONG) => bail!(
            "{option} {}: the name is too long once made temporary ({}: over 255 bytes); give a \
             shorter name",
            path.display(),
            tmp.file_name().unwrap_or_default().len()
        ),
        Err(e) => Err(anyhow::Error::new(e)).with_context(|| {
            format!(
                "{option} {}: cannot create a file in {}; give a path in a writable directory",
                path.display(),
                parent_dir(real).display()
            )
        }),
    }
}

/// For outputs another crate writes by a rename of its own (tune's state record): the checked,
/// symlink-resolved path of a regular file; streams and nodes are refused (a rename would
/// replace them).
pub fn regular_file_destination(option: &str, path: &Path) -> Result<PathBuf> {
    check_path(option, path)?;
    match resolve(option, path)? {
        Dest::Renamed(p) => Ok(p),
        Dest::Stream(fd) => bail!(
            "{option} {}: is descriptor {fd}, a stream; it must be a regular file (written whole \
             and renamed into place), give a file name",
            path.display()
        ),
        Dest::InPlace(p) => bail!(
            "{option} {}: is {}; it must be a regular file (written whole and renamed into place), \
             give a file name",
            path.display(),
            node_kind(&p)
        ),
    }
}

/// What a node that is not a regular file is, in words ("a FIFO").
fn node_kind(path: &Path) -> &'static str {
    match std::fs::metadata(path).map(|m| m.file_type()) {
        Ok(t) if t.is_char_device() => "a character device",
        Ok(t) if t.is_fifo() => "a FIFO",
        Ok(t) if t.is_socket() => "a socket",
        Ok(t) if t.is_block_device() => "a block device",
        Ok(t) if t.is_dir() => "a directory",
        _ => "not a regular file",
    }
}

/// A regular file this process created at an output (`--pidfile`): where it is (symlinks
/// resolved) and its device and inode, so that it is removed later only while that path still
/// names this very file, never what replaced it or what was there before.
#[derive(Debug)]
pub struct CreatedFile {
    real: PathBuf,
    kind: std::fs::FileType,
    dev: u64,
    ino: u64,
}

impl CreatedFile {
    /// What this process just created at `path` itself (a socket it bound): None when the path
    /// names nothing now.
    pub fn record(path: &Path) -> Option<CreatedFile> {
        let m = std::fs::symlink_metadata(path).ok()?;
        Some(CreatedFile {
            real: path.to_path_buf(),
            kind: m.file_type(),
            dev: m.dev(),
            ino: m.ino(),
        })
    }

    /// Unlinks the file if the path still names the file we created (same kind, device and
    /// inode); anything else there is left alone.
    pub fn remove(self) {
        if let Ok(m) = std::fs::symlink_metadata(&self.real)
            && m.file_type() == self.kind
            && (m.dev(), m.ino()) == (self.dev, self.ino)
        {
            let _ = std::fs::remove_file(&self.real);
        }
    }
}

/// Writes `bytes` as a new regular file at `path` ([`write_all`]'s rules; a stream or a node
/// that is not a regular file refused): the file created, to be removed by
/// [`CreatedFile::remove`].
pub fn write_created(option: &str, path: &Path, bytes: &[u8]) -> Result<CreatedFile> {
    let real = regular_file_destination(option, path)?;
    let (out, mut file) = PendingOutput::create(option, path)?;
    if out.renamed.as_ref().is_none_or(|(r, _)| *r != real) {
        bail!(
            "{option} {}: changed while it was opened; give a regular file",
            path.display()
        );
    }
    file.write_all(bytes)
        .and_then(|()| file.flush())
        .with_context(|| format!("{option} {}: write failed", path.display()))?;
    let m = file
        .metadata()
        .with_context(|| format!("{option} {}: cannot stat what was written", path.display()))?;
    drop(file);
    out.commit()?;
    Ok(CreatedFile {
        real,
        kind: m.file_type(),
        dev: m.dev(),
        ino: m.ino(),
    })
}

/// Whether `path` is (or will be) a regular file, not a stream or a node such as /dev/null
/// (checked like [`check_path`]).
pub fn is_regular_destination(option: &str, path: &Path) -> Result<bool> {
    check_path(option, path)?;
    Ok(matches!(resolve(option, path)?, Dest::Renamed(_)))
}

/// The output nobody named that a verb derives from `from` (`report RUN.json` writes RUN.html,
/// `merge -o M.json` its interval log M.hlog): `from` with extension `ext`, checked like a named
/// output ([`check_path`]). Only a regular file has a "beside": a stream, a pipe or a device
/// (`report /dev/stdin`) is refused, and so is a name in /dev, saying to name the output
/// (`give`: "give -o FILE for the page").
pub fn derived_output(option: &str, from: &Path, ext: &str, give: &str) -> Result<PathBuf> {
    let derived = from.with_extension(ext);
    let regular = matches!(resolve(option, from), Ok(Dest::Renamed(_)));
    let dir = std::fs::canonicalize(parent_dir(&derived)).unwrap_or_else(|_| parent_dir(&derived));
    if !regular || dir.starts_with("/dev") {
        bail!(
            "{option}: {} is not a regular file, so there is no file beside it to write {} to; {give}",
            from.display(),
            derived
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        );
    }
    check_path(option, &derived)?;
    Ok(derived)
}

/// Every output of a verb checked before any work starts: each path can be written
/// ([`check_path`]) and no file is given to two options ([`check_distinct`]).
pub fn check_outputs(outputs: &[(&str, Option<&Path>)]) -> Result<()> {
    for &(option, path) in outputs {
        if let Some(path) = path {
            check_path(option, path)?;
        }
    }
    check_distinct(outputs)
}

/// Refuses the same file given to two output options (their writes would interleave).
pub fn check_distinct(outputs: &[(&str, Option<&Path>)]) -> Result<()> {
    let mut seen: Vec<(&str, Key)> = Vec::new();
    for (option, path) in outputs {
        let Some(path) = path else { continue };
        let dest = resolve(option, path)?;
        // Several outputs may all go to /dev/null; only regular files clash.
        let Some(key) = dest_key(option, path, &dest)? else {
            continue;
        };
        if let Some((other, _)) = seen.iter().find(|(_, k)| k.clash(&key).is_some()) {
            let what = if matches!(key, Key::Stream(..)) {
                "one stream, where their bytes would interleave"
            } else {
                "one file"
            };
            bail!(
                "{other} and {option} both name {} ({what}); give each output its own file",
                path.display()
            );
        }
        seen.push((option, key));
    }
    Ok(())
}

fn canonical_guess(path: &Path) -> PathBuf {
    if let Ok(p) = std::fs::canonicalize(path) {
        return p;
    }
    let dir = std::fs::canonicalize(parent_dir(path)).unwrap_or_else(|_| parent_dir(path));
    match path.file_name() {
        Some(n) => dir.join(n),
        None => dir,
    }
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Opens a FIFO for writing without blocking in open(2) (which waits for a reader, and with
/// SA_RESTART would swallow SIGINT and SIGTERM): non-blocking attempts until a reader comes,
/// watching the interrupt flag; then the descriptor is made blocking again for the writes.
fn open_fifo(option: &str, shown: &Path, p: &Path) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut said = false;
    loop {
        match std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(p)
        {
            Ok(file) => {
                // SAFETY: fcntl on a descriptor this function owns.
                unsafe {
                    let fl = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
                    libc::fcntl(file.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
                }
                return Ok(file);
            }
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                if nines_io::sched::interrupted() {
                    return Err(anyhow::Error::new(super::Interrupted(format!(
                        "{option} {}: interrupted while waiting for a reader on the FIFO; nothing was written",
                        shown.display()
                    ))));
                }
                if !said {
                    eprintln!(
                        "nines: {option} {}: waiting for a reader on the FIFO",
                        shown.display()
                    );
                    said = true;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => {
                return Err(e)
                    .with_context(|| format!("{option} {}: cannot open", shown.display()));
            }
        }
    }
}

/// An output file being written; see the module comment.
pub struct PendingOutput {
    option: String,
    path: PathBuf,
    /// Where the finished file goes (symlinks resolved) and its temporary name; None when
    /// written in place or streamed.
    renamed: Option<(PathBuf, PathBuf)>,
    committed: bool,
    /// The temporary name, for removal by an early signal (super::early_signal).
    _registered: Option<super::early_signal::Registered>,
}

impl PendingOutput {
    /// Opens `path` for writing under the policy above.
    pub fn create(option: &str, path: &Path) -> Result<(PendingOutput, File)> {
        check_path(option, path)?;
        let in_place = |file: File| {
            (
                PendingOutput {
                    option: option.to_string(),
                    path: path.to_path_buf(),
                    renamed: None,
                    committed: true,
                    _registered: None,
                },
                file,
            )
        };
        match resolve(option, path)? {
            Dest::Stream(fd) => {
                // SAFETY: dup of a descriptor fstat just found open; the new one is ours.
                let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
                if new < 0 {
                    return Err(std::io::Error::last_os_error())
                        .with_context(|| format!("{option} {}: cannot open", path.display()));
                }
                // SAFETY: `new` is a fresh descriptor owned by nothing else.
                Ok(in_place(unsafe { File::from_raw_fd(new) }))
            }
            Dest::InPlace(p) => {
                let file = if std::fs::metadata(&p).is_ok_and(|m| m.file_type().is_fifo()) {
                    open_fifo(option, path, &p)?
                } else {
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open(&p)
                        .with_context(|| format!("{option} {}: cannot open", path.display()))?
                };
                Ok(in_place(file))
            }
            Dest::Renamed(real) => {
                let dir = parent_dir(&real);
                let name = real
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                remove_stale_partials(&dir, &name);
                let tmp = temporary_name(&real);
                let registered = super::early_signal::register(&tmp);
                let file = File::create(&tmp).with_context(|| {
                    format!(
                        "{option} {}: cannot create a file in {}",
                        path.display(),
                        dir.display()
                    )
                })?;
                Ok((
                    PendingOutput {
                        option: option.to_string(),
                        path: path.to_path_buf(),
                        renamed: Some((real, tmp)),
                        committed: false,
                        _registered: Some(registered),
                    },
                    file,
                ))
            }
        }
    }

    /// The final path, as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The option that named it ("--json").
    pub fn option(&self) -> &str {
        &self.option
    }

    /// Where the data is now: the temporary name until committed (to read back what was written).
    pub fn written_path(&self) -> &Path {
        match &self.renamed {
            Some((_, tmp)) => tmp,
            None => &self.path,
        }
    }

    /// Moves the finished file into place (nothing to do for one written in place).
    pub fn commit(mut self) -> Result<()> {
        if let Some((real, tmp)) = &self.renamed
            && !self.committed
        {
            // Re-checked now: something not a regular file may have appeared at the path
            // while the verb ran; it is never renamed over.
            if let Ok(md) = std::fs::symlink_metadata(real)
                && !md.is_file()
            {
                bail!(
                    "{} {}: it is no longer a regular file; not replacing it (the output is lost)",
                    self.option,
                    self.path.display()
                );
            }
            std::fs::rename(tmp, real).with_context(|| {
                format!(
                    "{} {}: cannot move the output into place",
                    self.option,
                    self.path.display()
                )
            })?;
        }
        self.committed = true;
        Ok(())
    }
}

impl Drop for PendingOutput {
    fn drop(&mut self) {
        if !self.committed
            && let Some((_, tmp)) = &self.renamed
        {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// Writes `bytes` to `path` under the policy: all or nothing for regular files, in place for
/// others. A write error (disk full, /dev/full) names the option and the path.
pub fn write_all(option: &str, path: &Path, bytes: &[u8]) -> Result<()> {
    let (out, mut file) = PendingOutput::create(option, path)?;
    file.write_all(bytes)
        .and_then(|()| file.flush())
        .with_context(|| format!("{option} {}: write failed", path.display()))?;
    drop(file);
    out.commit()
}

/// Removes `.NAME.nines-partial-PID` files in `dir` whose PID is no longer running: what a
/// killed nines left behind. Files of live processes (another nines writing now) are kept.
pub fn remove_stale_partials(dir: &Path, name: &str) {
    let prefix = format!(".{name}{PARTIAL}");
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let file_name = e.file_name();
        let Some(rest) = file_name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let Ok(pid) = rest.parse::<i32>() else {
            continue;
        };
        if pid <= 0 || pid as u32 == std::process::id() {
            continue;
        }
        // SAFETY: kill with signal 0 only checks whether the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
        if !alive {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The outputs of a run (`profile` and `sim`), by option, as given.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOutputPaths<'a> {
    pub json: Option<&'a Path>,
    pub fio_json: Option<&'a Path>,
    pub fio_json_plus: Option<&'a Path>,
    pub hdr_log: Option<&'a Path>,
    pub lat_log: Option<&'a Path>,
}

impl<'a> RunOutputPaths<'a> {
    fn by_option(&self) -> [(&'static str, Option<&'a Path>); 5] {
        [
            ("--json", self.json),
            ("--fio-json", self.fio_json),
            ("--fio-json-plus", self.fio_json_plus),
            ("--hdr-log", self.hdr_log),
            ("--lat-log", self.lat_log),
        ]
    }

    /// Checks them all ([`check_outputs`]) before any work starts.
    pub fn check(&self) -> Result<()> {
        check_outputs(&self.by_option())
    }
}

/// A run's outputs, created under temporary names once every option was validated
/// ([`PendingOutput`]): the logs are taken by the run as it writes them, the report and its fio
/// exports are written after it, and [`RunOutputs::commit`] moves everything into place only
/// when the run succeeded. Dropped uncommitted, nothing is left behind.
pub struct RunOutputs {
    pending: Vec<PendingOutput>,
    json: Option<File>,
    fio_json: Option<File>,
    fio_json_plus: Option<File>,
    /// The interval log, for the run to write (take it).
    pub hdr_log: Option<File>,
    /// The per-I/O log, for the run to write (take it).
    pub lat_log: Option<File>,
}

impl RunOutputs {
    /// Checks and creates every output given, in option order (a refusal of a later one
    /// removes the earlier ones).
    pub fn create(paths: &RunOutputPaths<'_>) -> Result<RunOutputs> {
        paths.check()?;
        let mut pending = Vec::new();
        let mut files: [Option<File>; 5] = Default::default();
        for (slot, (option, path)) in files.iter_mut().zip(paths.by_option()) {
            if let Some(path) = path {
                let (out, file) = PendingOutput::create(option, path)?;
                pending.push(out);
                *slot = Some(file);
            }
        }
        let [json, fio_json, fio_json_plus, hdr_log, lat_log] = files;
        Ok(RunOutputs {
            pending,
            json,
            fio_json,
            fio_json_plus,
            hdr_log,
            lat_log,
        })
    }

    /// Writes the report (`--json`) and its fio exports, with the run's recorders (fio's
    /// percentiles, buckets and bins, not only ours; per job when given) and the interval log
    /// read back from its temporary name for the bw/iops samples: the run must have finished
    /// writing it.
    pub fn write_report(
        &mut self,
        report: &nines_core::report::Report,
        fio: &super::fio_export::FioRun<'_>,
    ) -> Result<()> {
        if let Some(mut f) = self.json.take() {
            f.write_all(report.to_json().as_bytes())
                .context("--json: write failed")?;
        }
        if self.fio_json.is_none() && self.fio_json_plus.is_none() {
            return Ok(());
        }
        // Read back only from a file: a FIFO, a socket or a terminal would be read by the very
        // process that wrote it (it hung on a FIFO), and /dev/null gives nothing.
        let intervals = match self.pending.iter().find(|p| p.option() == "--hdr-log") {
            Some(p) if std::fs::metadata(p.written_path()).is_ok_and(|m| m.is_file()) => {
                super::fio_export::read_intervals(p.written_path())
            }
            _ => Vec::new(),
        };
        use nines_report::fio::FioFlavor;
        for (file, option, flavor) in [
            (self.fio_json.take(), "--fio-json", FioFlavor::Json),
            (
                self.fio_json_plus.take(),
                "--fio-json-plus",
                FioFlavor::JsonPlus,
            ),
        ] {
            if let Some(f) = file {
                super::fio_export::write(
                    f,
                    option,
                    flavor,
                    &nines_report::fio::FioSource {
                        report,
                        recorders: Some(fio.recorders),
                        job_recorders: fio.job_recorders,
                        intervals: &intervals,
                        group_reporting: fio.group_reporting,
                        parts: fio.parts,
                        depth: fio.depth,
                        percentiles: fio.percentiles,
                    },
                )?;
            }
        }
        Ok(())
    }

    /// Moves every output into place: the run succeeded.
    pub fn commit(self) -> Result<()> {
        for p in self.pending {
            p.commit()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_appear_only_on_commit_and_devices_are_written_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.json");
        let (out, mut f) = PendingOutput::create("--json", &p).unwrap();
        f.write_all(b"x").unwrap();
        assert!(!p.exists());
        out.commit().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"x");
        // Dropped uncommitted: nothing left, the old file kept.
        let (out, mut f) = PendingOutput::create("--json", &p).unwrap();
        f.write_all(b"yy").unwrap();
        drop(out);
        assert_eq!(std::fs::read(&p).unwrap(), b"x");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        // /dev/null stays a character device.
        write_all("-o", Path::new("/dev/null"), b"abc").unwrap();
        use std::os::unix::fs::FileTypeExt;
        assert!(
            std::fs::metadata("/dev/null")
                .unwrap()
                .file_type()
                .is_char_device()
        );
        // /dev/full: the error is reported, the node is kept.
        let e = write_all("-o", Path::new("/dev/full"), &[0u8; 1 << 16]).unwrap_err();
        assert!(
            format!("{e:#}").contains("-o /dev/full: write failed"),
            "{e:#}"
        );
        assert!(
            std::fs::metadata("/dev/full")
                .unwrap()
                .file_type()
                .is_char_device()
        );
    }

    #[test]
    fn stale_partials_of_dead_pids_are_removed_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        // A pid that cannot be running: above the kernel's pid_max.
        let dead = dir.path().join(".a.json.nines-partial-2147483646");
        let live = dir
            .path()
            .join(format!(".a.json.nines-partial-{}", std::process::id()));
        let parent = dir.path().join(format!(
            ".a.json.nines-partial-{}",
            std::os::unix::process::parent_id()
        ));
        let other = dir.path().join(".b.json.nines-partial-2147483646");
        for p in [&dead, &live, &parent, &other] {
            std::fs::write(p, b"").unwrap();
        }
        write_all("--json", &dir.path().join("a.json"), b"{}").unwrap();
        assert!(!dead.exists(), "a dead pid's partial file is removed");
        assert!(parent.exists(), "a live process's partial file is kept");
        assert!(
            other.exists(),
            "only partials of the same output are touched"
        );
        assert!(!live.exists(), "ours was renamed into place");
    }

    #[test]
    fn the_same_file_twice_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.json");
        let dotted = dir.path().join(".").join("a.json");
        let e = check_distinct(&[("--json", Some(&a)), ("--fio-json", Some(&dotted))]).unwrap_err();
        assert!(
            e.to_string().contains("--json and --fio-json both name"),
            "{e}"
        );
        let b = dir.path().join("b.json");
        check_distinct(&[
            ("--json", Some(&a)),
            ("--fio-json", Some(&b)),
            ("--x", None),
        ])
        .unwrap();
        let null = Path::new("/dev/null");
        check_distinct(&[("--json", Some(null)), ("--fio-json", Some(null))]).unwrap();
    }

    #[test]
    fn run_outputs_appear_together_on_commit_and_nothing_is_left_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("r.json");
        let lat = dir.path().join("r.lat");
        let paths = RunOutputPaths {
            json: Some(&json),
            lat_log: Some(&lat),
            ..Default::default()
        };
        // Two options naming one file: refused before anything is created.
        let twice = RunOutputPaths {
            hdr_log: Some(&json),
            ..paths
        };
        let e = RunOutputs::create(&twice).err().unwrap().to_string();
        assert!(e.contains("--json and --hdr-log both name"), "{e}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // Dropped uncommitted (a failed run): nothing left behind.
        let mut outs = RunOutputs::create(&paths).unwrap();
        outs.lat_log.take().unwrap().write_all(b"log").unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
        drop(outs);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // Committed: every output in place under its own name, and only those.
        let mut outs = RunOutputs::create(&paths).unwrap();
        outs.lat_log.take().unwrap().write_all(b"log").unwrap();
        assert!(outs.hdr_log.is_none());
        assert!(!lat.exists() && !json.exists());
        outs.commit().unwrap();
        assert_eq!(std::fs::read(&lat).unwrap(), b"log");
        assert!(json.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }
}
