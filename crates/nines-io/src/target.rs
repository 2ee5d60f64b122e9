//! Targets: the regular files and block devices nines measures.
//!
//! `Target::open` is the only way to get a target, and it runs the write-safety checks of
//! `safety` for block devices before it opens anything writable, so no caller can skip them.
//! Every failure is a `TargetError` whose one-line message says what to do.
//!
//! A path `emu:PRESET[:SIZE]` is an emulated SSD (crate::emu): no file, no safety checks (it is
//! not a device of the host, so writing needs no `--allow-writes`), 4 KiB logical blocks.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use crate::emu::{EmuContext, EmuError, EmuHandle, EmuSpec};
use crate::safety::{self, SafetyError};
use crate::zoned::ZonedDevice;

/// How to open a target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetOptions {
    /// The workload writes to the target.
    pub write: bool,
    /// `--allow-writes`: writing to block devices is allowed at all.
    pub allow_writes: bool,
    /// `--force`: write even to a block device that is mounted, in use or holds data signatures.
    pub force: bool,
    /// `--buffered`: no O_DIRECT (goes through the page cache).
    pub buffered: bool,
    /// Bytes the workload needs (region offset + size). Regular files are created or extended to
    /// this size when writing; a read workload refuses a file smaller than this.
    pub create_size_bytes: Option<u64>,
}

/// Why a target cannot be used; every message is one line that says what to do.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("{path}: no such file or device; check the path{hint}")]
    Missing { path: PathBuf, hint: &'static str },
    #[error(
        "{path}: permission denied opening it for {access}; run as root or choose a target you may {access}"
    )]
    PermissionDenied { path: PathBuf, access: &'static str },
    #[error(
        "{path}: the filesystem refused O_DIRECT; pass --buffered to use the page cache (this then measures the cache, not the device)"
    )]
    DirectRefused { path: PathBuf },
    #[error(
        "{path}: too many open files (limit {limit}); raise it with `ulimit -n` or pass fewer targets"
    )]
    TooManyOpenFiles { path: PathBuf, limit: u64 },
    #[error(
        "{path} is a {kind}, not a regular file or block device; give a file or a block device such as /dev/nvme0n1"
    )]
    NotFileOrBlock { path: PathBuf, kind: &'static str },
    #[error(
        "{path}: read-only filesystem; write workloads need a writable target, or use a read workload"
    )]
    ReadOnly { path: PathBuf },
    #[error(
        "{path} holds {size_bytes} bytes but the workload needs {needed_bytes}; pass a smaller --size/--offset, or create the file first (a write run with --size creates it)"
    )]
    TooSmall {
        path: PathBuf,
        size_bytes: u64,
        needed_bytes: u64,
    },
    #[error("{path}: cannot grow the file to {needed_bytes} bytes: {error}; {hint}")]
    Grow {
        path: PathBuf,
        needed_bytes: u64,
        error: std::io::Error,
        hint: &'static str,
    },
    #[error(
        "{path}: growing it to {needed_bytes} bytes needs {more_bytes} more bytes but its filesystem has {free_bytes} free; pass a smaller --size or free space first"
    )]
    NoSpace {
        path: PathBuf,
        needed_bytes: u64,
        more_bytes: u64,
        free_bytes: u64,
    },
    #[error(
        "block size {block_size_bytes} bytes is not a multiple of {name}'s logical block size {logical_block_bytes} bytes; use --bs {suggest_bytes} or another multiple"
    )]
    BlockSizeNotMultiple {
        name: String,
        block_size_bytes: u64,
        logical_block_bytes: u32,
        suggest_bytes: u64,
    },
    #[error(
        "offset {offset_bytes} bytes is not a multiple of {name}'s logical block size {logical_block_bytes} bytes; pass an aligned --offset"
    )]
    OffsetNotAligned {
        name: String,
        offset_bytes: u64,
        logical_block_bytes: u32,
    },
    #[error(
        "offset {offset_bytes} bytes is beyond the end of {name} ({target_size_bytes} bytes); reduce --offset to less than the device size"
    )]
    OffsetBeyondEnd {
        name: String,
        offset_bytes: u64,
        target_size_bytes: u64,
    },
    #[error(
        "region of {size_bytes} bytes at offset {offset_bytes} is larger than {name} ({target_size_bytes} bytes); pass a smaller --size or --offset"
    )]
    RegionTooLarge {
        name: String,
        offset_bytes: u64,
        size_bytes: u64,
        target_size_bytes: u64,
    },
    #[error(
        "region of {size_bytes} bytes on {name} is smaller than one block of {block_size_bytes} bytes; pass a larger --size or a smaller --bs"
    )]
    RegionTooSmall {
        name: String,
        size_bytes: u64,
        block_size_bytes: u64,
    },
    #[error(
        "{path} is busy: it is open exclusively by {holders}; nines opens block devices it writes exclusively so that two writers never share one; stop the other user first"
    )]
    Busy { path: PathBuf, holders: String },
    #[error(transparent)]
    Unsafe(#[from] SafetyError),
    #[error(transparent)]
    Emu(#[from] EmuError),
    #[error("{path}: cannot read its zones: {error}")]
    Zoned {
        path: PathBuf,
        error: crate::zoned::ZonedError,
    },
    #[error("{path}: {what}: {error}")]
    Io {
        path: PathBuf,
        what: &'static str,
        error: std::io::Error,
    },
}

/// An open target.
#[derive(Debug)]
pub struct Target {
    /// None for an emulated device.
    file: Option<File>,
    emu: Option<EmuHandle>,
    path: PathBuf,
    name: String,
    size_bytes: u64,
    logical_block_bytes: u32,
    block: bool,
    dev: Option<(u32, u32)>,
    /// A host-managed zoned block device: its zones when opened (crate::zoned).
    zoned: Option<Arc<ZonedDevice>>,
    options: TargetOptions,
    /// This open created the file (`--size` over a path that did not exist).
    created: bool,
    /// An NVMe generic device (`/dev/ngXnY`, for the passthrough engine): its namespace, and the
    /// namespace's block device held open (exclusively when writing) for as long as the target.
    generic: Option<(crate::engine::uring_cmd::GenericNamespace, Box<Target>)>,
}

impl Target {
    /// Opens `path` as `opts` says: O_DIRECT unless buffered, read-write when the workload
    /// writes. Block devices that would be written go through `safety::check_writable` first,
    /// on a read-only descriptor; regular files are created or extended when writing.
    pub fn open(path: &Path, opts: &TargetOptions) -> Result<Target, TargetError> {
        Target::open_with(path, opts, &EmuContext::default())
    }

    /// [`Target::open`], with emulated devices (`emu:...`) built in `emu`'s memory budget.
    pub fn open_with(
        path: &Path,
        opts: &TargetOptions,
        emu: &EmuContext,
    ) -> Result<Target, TargetError> {
        if let Some(text) = path.to_str()
            && let Some(spec) = EmuSpec::parse(text)
        {
            return Target::open_emu(path, text, &spec?, opts, emu);
        }
        let meta = match std::fs::metadata(path) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(classify(path, e, opts.write, false)),
        };
        let (block, exists) = match &meta {
            None => (false, false),
            Some(m) => {
                let ft = m.file_type();
                if ft.is_block_device() {
                    (true, true)
                } else if ft.is_file() {
                    (false, true)
                } else {
                    if ft.is_char_device() {
                        return Target::open_generic(path, opts);
                    }
                    let kind = if ft.is_dir() {
                        "directory"
                    } else if ft.is_char_device() {
                        "character device"
                    } else if ft.is_fifo() {
                        "FIFO"
                    } else if ft.is_socket() {
                        "socket"
                    } else {
                        "special file"
                    };
                    return Err(TargetError::NotFileOrBlock {
                        path: path.to_path_buf(),
                        kind,
                    });
                }
            }
        };
        if !exists {
            let can_create = opts.write && opts.create_size_bytes.is_some_and(|n| n > 0);
            if !can_create {
                let hint = if opts.write {
                    " (pass --size to create a file of that size)"
                } else {
                    " (read workloads need an existing file or block device)"
                };
                return Err(TargetError::Missing {
                    path: path.to_path_buf(),
                    hint,
                });
            }
        }

        let opened = Target::open_file(path, opts, block, !exists);
        if opened.is_err() && !exists {
            // Nothing of a failed run stays behind: the file this call created goes (an O_DIRECT
            // refusal on tmpfs, a failed grow, a size check).
            let _ = std::fs::remove_file(path);
        }
        opened.map(|t| Target {
            created: !exists,
            ..t
        })
    }

    /// [`Target::open_with`] for a file or block device whose kind is known. `new`: the path
    /// did not exist when looked at, so it is created exclusively (O_EXCL): a file that someone
    /// else creates there meanwhile is never taken over, nor removed when this open fails.
    fn open_file(
        path: &Path,
        opts: &TargetOptions,
        block: bool,
        new: bool,
    ) -> Result<Target, TargetError> {
        let (file, direct) = if block && opts.write {
            // Check on a read-only descriptor first: nothing is opened for writing unless the
            // safety checks pass.
            let (ro, direct) = open_fd(path, false, false, opts.buffered, false)?;
            let probe = Target::describe(ro, path, true, direct, opts)?;
            safety::check_writable(&probe, opts.force)?;
            let dev = probe.dev_t();
            drop(probe);
            // O_EXCL on a block device: the kernel refuses it while another exclusive opener
            // (a mount, md/dm, another nines or mkfs) holds it, so two writers never share one.
            match open_fd(path, true, false, opts.buffered, true) {
                Err(TargetError::Io { error, .. }) if error.raw_os_error() == Some(libc::EBUSY) => {
                    let (major, minor) = dev.unwrap_or((0, 0));
                    return Err(TargetError::Busy {
                        path: path.to_path_buf(),
                        holders: safety::describe_holders(major, minor),
                    });
                }
                r => r?,
            }
        } else {
            let create = opts.write && !block;
            open_fd(path, opts.write, create, opts.buffered, create && new)?
        };
        let mut t = Target::describe(file, path, block, direct, opts)?;
        if !block
            && let Some(needed_bytes) = opts.create_size_bytes
            && t.size_bytes < needed_bytes
        {
            if !opts.write {
                return Err(TargetError::TooSmall {
                    path: path.to_path_buf(),
                    size_bytes: t.size_bytes,
                    needed_bytes,
                });
            }
            let file = t.file.as_ref().expect("opened above");
            check_free_space(file, path, needed_bytes)?;
            grow(file, needed_bytes).map_err(|source| TargetError::Grow {
                path: path.to_path_buf(),
                needed_bytes,
                hint: grow_hint(&source),
                error: source,
            })?;
            t.size_bytes = needed_bytes;
        }
        if !block && t.size_bytes == 0 {
            return Err(TargetError::TooSmall {
                path: path.to_path_buf(),
                size_bytes: 0,
                needed_bytes: 1,
            });
        }
        Ok(t)
    }

    /// An NVMe generic character device (`/dev/ngXnY`): I/O goes to it as NVMe commands (the
    /// `io_uring-cmd` engine), but the namespace is the same as its block device's, so the block
    /// device is opened first exactly as a block target would be: the write-safety checks
    /// (`--allow-writes`, mounts, signatures) and the exclusive open when writing, held for the
    /// target's life. Size and LBA size are the block device's. Any other character device is
    /// refused as before.
    fn open_generic(path: &Path, opts: &TargetOptions) -> Result<Target, TargetError> {
        use crate::engine::uring_cmd::{generic_namespace, namespace_id};
        let not_generic = || TargetError::NotFileOrBlock {
            path: path.to_path_buf(),
            kind: "character device that is not an NVMe generic device (/dev/ngXnY)",
        };
        // Nothing is opened that sysfs does not name an NVMe generic device: opening some
        // character devices has effects of its own (a watchdog starts counting, a tty hangs up).
        let rdev = std::fs::metadata(path)
            .map(|m| std::os::unix::fs::MetadataExt::rdev(&m))
            .map_err(|e| classify(path, e, opts.write, false))?;
        let sys = format!("/sys/dev/char/{}:{}", libc::major(rdev), libc::minor(rdev));
        let named = std::fs::canonicalize(&sys).ok().is_some_and(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(crate::engine::uring_cmd::is_generic_name)
        });
        if !named {
            return Err(not_generic());
        }
        // Read-only until the namespace's block device has passed the write-safety checks.
        let file = open_raw(path, libc::O_RDONLY).map_err(|e| classify(path, e, false, true))?;
        let fd = file.as_raw_fd();
        // SAFETY: fstat fills st.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(TargetError::Io {
                path: path.to_path_buf(),
                what: "fstat",
                error: std::io::Error::last_os_error(),
            });
        }
        let nsid = namespace_id(fd).map_err(|_| not_generic())?;
        let ns = generic_namespace(st.st_rdev, nsid).map_err(|e| match e {
            crate::engine::uring_cmd::GenericError::NotGeneric { .. } => not_generic(),
            other => TargetError::Io {
                path: path.to_path_buf(),
                what: "its namespace",
                error: std::io::Error::other(other.to_string()),
            },
        })?;
        let block = Target::open_file(&ns.block_path, opts, true, false)?;
        let file = if opts.write {
            open_raw(path, libc::O_RDWR).map_err(|e| classify(path, e, true, true))?
        } else {
            file
        };
        Ok(Target {
            file: Some(file),
            emu: None,
            path: path.to_path_buf(),
            name: ns.name.clone(),
            size_bytes: block.size_bytes,
            logical_block_bytes: block.logical_block_bytes.max(ns.lba_bytes),
            block: false,
            dev: None,
            // A zoned namespace's zones are its block device's: the same refusals apply.
            zoned: block.zoned.clone(),
            options: opts.clone(),
            created: false,
            generic: Some((ns, Box::new(block))),
        })
    }

    /// The namespace of an NVMe generic device target (`/dev/ngXnY`), and its block device.
    pub fn generic(&self) -> Option<(&crate::engine::uring_cmd::GenericNamespace, &Target)> {
        self.generic.as_ref().map(|(n, b)| (n, b.as_ref()))
    }

    fn open_emu(
        path: &Path,
        text: &str,
        spec: &EmuSpec,
        opts: &TargetOptions,
        ctx: &EmuContext,
    ) -> Result<Target, TargetError> {
        let handle = ctx.open(text, spec, opts.write, opts.create_size_bytes)?;
        let size_bytes = handle.info().size_bytes;
        if let Some(needed_bytes) = opts.create_size_bytes
            && needed_bytes > size_bytes
        {
            return Err(TargetError::TooSmall {
                path: path.to_path_buf(),
                size_bytes,
                needed_bytes,
            });
        }
        Ok(Target {
            file: None,
            emu: Some(handle),
            path: path.to_path_buf(),
            name: text.to_string(),
            size_bytes,
            logical_block_bytes: crate::emu::BLOCK_BYTES,
            block: false,
            dev: None,
            zoned: None,
            options: opts.clone(),
            created: false,
            generic: None,
        })
    }

    fn describe(
        file: File,
        path: &Path,
        block: bool,
        direct: bool,
        opts: &TargetOptions,
    ) -> Result<Target, TargetError> {
        let fd = file.as_raw_fd();
        let io_err = |what: &'static str| TargetError::Io {
            path: path.to_path_buf(),
            what,
            error: std::io::Error::last_os_error(),
        };
        // SAFETY: fstat fills st.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(io_err("fstat"));
        }
        let (size_bytes, logical_block_bytes, dev) = if block {
            // SAFETY: lseek on an owned descriptor.
            let end = unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
            if end < 0 {
                return Err(io_err("size (lseek)"));
            }
            let mut lbs: libc::c_int = 0;
            // SAFETY: BLKSSZGET writes one int.
            if unsafe { libc::ioctl(fd, libc::BLKSSZGET, &mut lbs) } != 0 || lbs <= 0 {
                return Err(io_err("logical block size (BLKSSZGET)"));
            }
            let rdev = st.st_rdev;
            (
                end as u64,
                lbs as u32,
                Some((libc::major(rdev), libc::minor(rdev))),
            )
        } else {
            (st.st_size as u64, file_dio_align(fd, direct), None)
        };
        let name = if block {
            std::fs::canonicalize(path)
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_owned()))
        } else {
            path.file_name().map(|n| n.to_owned())
        }
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
        // A host-managed zoned device: its geometry and write pointers (sysfs, BLKREPORTZONE).
        let zoned = match dev {
            Some(d) if block => crate::zoned::probe(fd, d, size_bytes)
                .map_err(|error| TargetError::Zoned {
                    path: path.to_path_buf(),
                    error,
                })?
                .map(Arc::new),
            _ => None,
        };
        Ok(Target {
            file: Some(file),
            emu: None,
            path: path.to_path_buf(),
            name,
            size_bytes,
            logical_block_bytes,
            block,
            dev,
            zoned,
            options: opts.clone(),
            created: false,
            generic: None,
        })
    }

    /// The descriptor; -1 for an emulated device.
    pub fn fd(&self) -> RawFd {
        self.file.as_ref().map_or(-1, |f| f.as_raw_fd())
    }

    /// The emulated device behind an `emu:` target.
    pub fn emu(&self) -> Option<&EmuHandle> {
        self.emu.as_ref()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Short name for reports: the kernel's device name ("zram3", "nvme0n1") or the file name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Whether this open created the file (it held nothing before).
    pub fn created(&self) -> bool {
        self.created
    }

    /// A member that is not there: raid5's `--failed N` member, which nothing reads or
    /// writes (no descriptor, size 0; the array's geometry comes from the other members).
    pub fn absent(path: &Path) -> Target {
        Target {
            file: None,
            emu: None,
            path: path.to_path_buf(),
            name: path.display().to_string(),
            size_bytes: 0,
            logical_block_bytes: 512,
            block: false,
            dev: None,
            zoned: None,
            options: TargetOptions::default(),
            created: false,
            generic: None,
        }
    }

    /// Whether this is [`Target::absent`]'s placeholder.
    pub fn is_absent(&self) -> bool {
        self.file.is_none() && self.emu.is_none()
    }

    /// Offsets and sizes of every I/O must be multiples of this.
    pub fn logical_block_bytes(&self) -> u32 {
        self.logical_block_bytes
    }

    pub fn is_block_device(&self) -> bool {
        self.block
    }

    /// (major, minor) of a block device.
    pub fn dev_t(&self) -> Option<(u32, u32)> {
        self.dev
    }

    /// A host-managed zoned block device's geometry and zones (as opened).
    pub fn zoned(&self) -> Option<&Arc<ZonedDevice>> {
        self.zoned.as_ref()
    }

    pub fn options(&self) -> &TargetOptions {
        &self.options
    }

    /// The open file; None for an emulated device.
    pub fn file(&self) -> Option<&File> {
        self.file.as_ref()
    }

    /// Bytes of `[offset_bytes, offset_bytes + len_bytes)` that are holes of a regular file
    /// (SEEK_DATA/SEEK_HOLE): reads of a hole never reach storage, so a read workload over one
    /// measures the filesystem, not the device. Some(0) for a block device or an emulated one;
    /// None when the filesystem cannot say. At most `EXTENTS_MAX` extents are walked (a bound
    /// on a file fragmented into millions of pieces); the count is a lower bound past that.
    pub fn hole_bytes(&self, offset_bytes: u64, len_bytes: u64) -> Option<u64> {
        const EXTENTS_MAX: u32 = 1 << 16;
        let Some(f) = self
            .file
            .as_ref()
            .filter(|_| !self.block && self.generic.is_none())
        else {
            return Some(0);
        };
        let fd = f.as_raw_fd();
        let end = offset_bytes.saturating_add(len_bytes).min(self.size_bytes);
        let mut pos = offset_bytes;
        let mut holes = 0u64;
        for _ in 0..EXTENTS_MAX {
            if pos >= end {
                break;
            }
            let off = i64::try_from(pos).ok()?;
            // SAFETY: lseek on a descriptor this target owns; it only moves the file offset,
            // which no I/O of nines uses (every I/O is positioned).
            let data = unsafe { libc::lseek(fd, off, libc::SEEK_DATA) };
            if data < 0 {
                match std::io::Error::last_os_error().raw_os_error() {
                    // No data at or after pos: the rest is a hole.
                    Some(libc::ENXIO) => return Some(holes + (end - pos)),
                    _ => return None,
                }
            }
            let data = (data as u64).min(end);
            holes += data - pos;
            if data >= end {
                break;
            }
            // SAFETY: as above.
            let hole = unsafe { libc::lseek(fd, data as i64, libc::SEEK_HOLE) };
            if hole < 0 {
                return None;
            }
            pos = hole as u64;
        }
        Some(holes)
    }
}

/// Checks a workload region against a target: block size and offset aligned to the logical
/// block size, region inside the target and at least one block long.
pub fn check_region(
    target: &Target,
    offset_bytes: u64,
    size_bytes: u64,
    block_size_bytes: u64,
) -> Result<(), TargetError> {
    let lbs = target.logical_block_bytes();
    let name = || target.name().to_string();
    if block_size_bytes == 0 || !block_size_bytes.is_multiple_of(lbs as u64) {
        return Err(TargetError::BlockSizeNotMultiple {
            name: name(),
            block_size_bytes,
            logical_block_bytes: lbs,
            suggest_bytes: block_size_bytes.max(1).next_multiple_of(lbs as u64),
        });
    }
    if !offset_bytes.is_multiple_of(lbs as u64) {
        return Err(TargetError::OffsetNotAligned {
            name: name(),
            offset_bytes,
            logical_block_bytes: lbs,
        });
    }
    // An offset past the end is its own mistake (the region's size is then meaningless); an
    // offset+size that overflows stays "region too large".
    if offset_bytes >= target.size_bytes() && offset_bytes.checked_add(size_bytes).is_some() {
        return Err(TargetError::OffsetBeyondEnd {
            name: name(),
            offset_bytes,
            target_size_bytes: target.size_bytes(),
        });
    }
    let end = offset_bytes.checked_add(size_bytes);
    if end.is_none_or(|e| e > target.size_bytes()) {
        return Err(TargetError::RegionTooLarge {
            name: name(),
            offset_bytes,
            size_bytes,
            target_size_bytes: target.size_bytes(),
        });
    }
    if size_bytes < block_size_bytes {
        return Err(TargetError::RegionTooSmall {
            name: name(),
            size_bytes,
            block_size_bytes,
        });
    }
    Ok(())
}

fn open_raw(path: &Path, flags: libc::c_int) -> Result<File, std::io::Error> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: c is a valid NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0o644 as libc::c_uint) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Opens with the flags asked for (`excl`: O_EXCL, which on a block device means an exclusive
/// open); returns the file and whether it is O_DIRECT.
fn open_fd(
    path: &Path,
    write: bool,
    create: bool,
    buffered: bool,
    excl: bool,
) -> Result<(File, bool), TargetError> {
    let mut flags = if write { libc::O_RDWR } else { libc::O_RDONLY };
    if create {
        flags |= libc::O_CREAT;
    }
    if excl {
        flags |= libc::O_EXCL;
    }
    let direct = !buffered;
    let with_direct = if direct {
        flags | libc::O_DIRECT
    } else {
        flags
    };
    match open_raw(path, with_direct) {
        Ok(f) => Ok((f, direct)),
        Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) => {
            // EINVAL is what open returns when the filesystem cannot do O_DIRECT; confirm by
            // opening without it before blaming O_DIRECT.
            // Without O_EXCL: the refused O_DIRECT open may itself have created the file.
            match open_raw(path, flags & !(libc::O_EXCL * i32::from(create))) {
                Ok(_) => Err(TargetError::DirectRefused {
                    path: path.to_path_buf(),
                }),
                Err(e2) => Err(classify(path, e2, write, true)),
            }
        }
        Err(e) => Err(classify(path, e, write, true)),
    }
}

fn classify(path: &Path, e: std::io::Error, write: bool, opening: bool) -> TargetError {
    let path = path.to_path_buf();
    match e.raw_os_error() {
        Some(libc::ENOENT) => TargetError::Missing { path, hint: "" },
        Some(libc::EACCES) | Some(libc::EPERM) => TargetError::PermissionDenied {
            path,
            access: if write { "write" } else { "read" },
        },
        Some(libc::EROFS) => TargetError::ReadOnly { path },
        Some(libc::EMFILE) | Some(libc::ENFILE) => TargetError::TooManyOpenFiles {
            path,
            limit: nofile_limit(),
        },
        _ => TargetError::Io {
            path,
            what: if opening { "open" } else { "stat" },
            error: e,
        },
    }
}

fn nofile_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills r.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0 {
        r.rlim_cur
    } else {
        0
    }
}

/// The alignment O_DIRECT needs on a regular file: statx's STATX_DIOALIGN when the kernel and
/// filesystem report it, else 4096 (safe everywhere); 512 for buffered I/O.
fn file_dio_align(fd: RawFd, direct: bool) -> u32 {
    if !direct {
        return 512;
    }
    // SAFETY: statx fills stx; the empty path with AT_EMPTY_PATH refers to fd itself.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let ret = unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if ret == 0 && stx.stx_mask & libc::STATX_DIOALIGN != 0 && stx.stx_dio_offset_align > 0 {
        stx.stx_dio_offset_align.max(512)
    } else {
        4096
    }
}

/// Extends a regular file to `needed_bytes` with allocated blocks (so writes measure the device,
/// not block allocation); filesystems without fallocate get a plain size change.
/// What to do when growing a file failed, by the error: only a full filesystem is about space.
fn grow_hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => "free space or pass a smaller --size",
        Some(libc::EFBIG) | Some(libc::EINVAL) => {
            "this filesystem cannot hold a file of that size; pass a smaller --size"
        }
        _ => "pass a smaller --size, or create the file first",
    }
}

/// Refuses to grow `file` to `needed_bytes` when its filesystem has less free space (for an
/// unprivileged user) than the blocks still to allocate: growing would fill the filesystem.
fn check_free_space(file: &File, path: &Path, needed_bytes: u64) -> Result<(), TargetError> {
    // SAFETY: fstat/fstatvfs write into zeroed structs on an owned descriptor.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(file.as_raw_fd(), &mut st) } != 0
        || unsafe { libc::fstatvfs(file.as_raw_fd(), &mut vfs) } != 0
    {
        // Not knowable here: the grow itself reports what fails.
        return Ok(());
    }
    let allocated_bytes = (st.st_blocks as u64).saturating_mul(512);
    let more_bytes = needed_bytes.saturating_sub(allocated_bytes);
    let free_bytes = (vfs.f_bavail as u64).saturating_mul(vfs.f_frsize as u64);
    if more_bytes > free_bytes {
        return Err(TargetError::NoSpace {
            path: path.to_path_buf(),
            needed_bytes,
            more_bytes,
            free_bytes,
        });
    }
    Ok(())
}

fn grow(file: &File, needed_bytes: u64) -> Result<(), std::io::Error> {
    // SAFETY: fallocate on an owned descriptor.
    let ret = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, needed_bytes as libc::off_t) };
    if ret == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
        return file.set_len(needed_bytes);
    }
    Err(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path that did not exist when `open_with` looked but holds a file by the time it is
    /// created (another process made it meanwhile): the exclusive create refuses it, so the
    /// file is neither taken over nor removed by the failed open's cleanup.
    #[test]
    fn a_file_that_appears_after_the_look_is_not_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("raced");
        std::fs::write(&p, b"someone else's").unwrap();
        let opts = TargetOptions {
            write: true,
            buffered: true,
            create_size_bytes: Some(1 << 20),
            ..TargetOptions::default()
        };
        let e = Target::open_file(&p, &opts, false, true).unwrap_err();
        assert!(e.to_string().contains("exists"), "{e}");
        assert_eq!(std::fs::read(&p).unwrap(), b"someone else's");
        // Looked at and found, the same file is a target as before (grown to the size asked).
        let t = Target::open_file(&p, &opts, false, false).unwrap();
        assert_eq!(t.size_bytes(), 1 << 20);
    }
}
