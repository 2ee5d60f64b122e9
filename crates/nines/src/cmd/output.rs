//! The one output policy every verb follows: validate everything first, write each output file
//! under a temporary name in its final directory, rename it into place only when the verb
//! succeeded; a failure or an interrupt removes the temporary file.
//!
//! Paths that are not regular files (/dev/null, /dev/stdout, a FIFO, a terminal, /dev/full) are
//! written in place and never renamed over: a rename would turn the device node or pipe into a
//! regular file. Temporary names carry the writer's pid (`.NAME.nines-partial-PID`), so a later
//! run removes the ones a dead nines left behind (kill -9, a second Ctrl-C).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

const PARTIAL: &str = ".nines-partial-";

/// An output file being written; see the module comment.
pub struct PendingOutput {
    option: String,
    path: PathBuf,
    /// The temporary name; None when written in place (not a regular file).
    tmp: Option<PathBuf>,
    committed: bool,
}

/// Checks that `path` can be an output before any work starts: not a directory, in an existing
/// directory. `option` names the flag in messages ("--json").
pub fn check_path(option: &str, path: &Path) -> Result<()> {
    if path.as_os_str().is_empty() {
        bail!("{option}: the file name is empty");
    }
    if path.is_dir() {
        bail!(
            "{option} {}: is a directory; give a file name",
            path.display()
        );
    }
    if let Ok(md) = std::fs::metadata(path)
        && !md.is_file()
    {
        return Ok(());
    }
    let dir = parent_dir(path);
    if !dir.is_dir() {
        bail!(
            "{option} {}: directory {} does not exist; create it first",
            path.display(),
            dir.display()
        );
    }
    Ok(())
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
    let mut seen: Vec<(&str, PathBuf)> = Vec::new();
    for (option, path) in outputs {
        let Some(path) = path else { continue };
        let key = canonical_guess(path);
        // Several outputs may all go to /dev/null; only regular files clash.
        if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
            continue;
        }
        if let Some((other, _)) = seen.iter().find(|(_, k)| *k == key) {
            bail!(
                "{other} and {option} both name {}; give each output its own file",
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

impl PendingOutput {
    /// Opens `path` for writing under the policy above.
    pub fn create(option: &str, path: &Path) -> Result<(PendingOutput, File)> {
        check_path(option, path)?;
        // Not a regular file: written in place.
        if let Ok(md) = std::fs::metadata(path)
            && !md.is_file()
        {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .with_context(|| format!("{option} {}: cannot open", path.display()))?;
            return Ok((
                PendingOutput {
                    option: option.to_string(),
                    path: path.to_path_buf(),
                    tmp: None,
                    committed: true,
                },
                file,
            ));
        }
        let dir = parent_dir(path);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        remove_stale_partials(&dir, &name);
        let tmp = dir.join(format!(".{name}{PARTIAL}{}", std::process::id()));
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
                tmp: Some(tmp),
                committed: false,
            },
            file,
        ))
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The option that named it ("--json").
    pub fn option(&self) -> &str {
        &self.option
    }

    /// Where the data is now: the temporary name until committed (to read back what was written).
    pub fn written_path(&self) -> &Path {
        self.tmp.as_deref().unwrap_or(&self.path)
    }

    /// Moves the finished file into place (nothing to do for one written in place).
    pub fn commit(mut self) -> Result<()> {
        if let Some(tmp) = &self.tmp
            && !self.committed
        {
            // Re-checked now: something not a regular file may have appeared at the path
            // while the verb ran; it is never renamed over.
            if let Ok(md) = std::fs::symlink_metadata(&self.path)
                && !md.is_file()
                && !md.file_type().is_symlink()
            {
                bail!(
                    "{} {}: it is no longer a regular file; not replacing it (the output is lost)",
                    self.option,
                    self.path.display()
                );
            }
            std::fs::rename(tmp, &self.path).with_context(|| {
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
            && let Some(tmp) = &self.tmp
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
}
