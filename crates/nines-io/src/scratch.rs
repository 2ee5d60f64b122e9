//! The embedded default of `nines profile`: temporary files, filled with data so reads are real,
//! on a filesystem that accepts O_DIRECT, removed when dropped.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Temporary files that exist until this is dropped.
#[derive(Debug)]
pub struct ScratchFiles {
    dir: tempfile::TempDir,
    paths: Vec<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
#[error(
    "cannot create the default temporary files ({detail}); give a target (a file or block device) or set TMPDIR to a disk-backed directory"
)]
pub struct ScratchError {
    detail: String,
}

impl ScratchFiles {
    /// Creates `count` files of `size_bytes` each in the first of $TMPDIR, /var/tmp and the current
    /// directory whose filesystem accepts O_DIRECT (tmpfs does not).
    pub fn create(count: usize, size_bytes: u64) -> Result<ScratchFiles, ScratchError> {
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(t) = std::env::var_os("TMPDIR") {
            candidates.push(PathBuf::from(t));
        }
        candidates.push(PathBuf::from("/var/tmp"));
        candidates.push(std::env::temp_dir());
        candidates.push(PathBuf::from("."));
        // $TMPDIR is often /var/tmp or temp_dir(): try each directory once.
        let mut seen = Vec::new();
        candidates.retain(|c| {
            let key = std::fs::canonicalize(c).unwrap_or_else(|_| c.clone());
            let new = !seen.contains(&key);
            seen.push(key);
            new
        });
        let mut reasons = Vec::new();
        for base in candidates {
            remove_stale(&base);
            match Self::create_in(&base, count, size_bytes) {
                Ok(s) => return Ok(s),
                Err(e) => reasons.push(format!("{}: {e}", base.display())),
            }
            if crate::sched::interrupted() {
                break;
            }
        }
        Err(ScratchError {
            detail: reasons.join("; "),
        })
    }

    fn create_in(base: &Path, count: usize, size_bytes: u64) -> io::Result<ScratchFiles> {
        // Never fill a filesystem: the files are written in full (reads must be real).
        let need = size_bytes.saturating_mul(count as u64);
        if let Some(free) = free_bytes(base)
            && need > free
        {
            return Err(io::Error::other(format!(
                "{count} files of {size_bytes} bytes need {need} bytes but only {free} are free there; pass a smaller --size"
            )));
        }
        // The pid in the name lets a later run remove what a killed one left ([`remove_stale`]).
        let dir = tempfile::Builder::new()
            .prefix(&format!("{STALE_PREFIX}{}-", std::process::id()))
            .tempdir_in(base)?;
        // Probe O_DIRECT before writing anything large.
        let probe = dir.path().join("probe");
        File::create(&probe)?;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&probe)?;
        std::fs::remove_file(&probe)?;
        let chunk_bytes = 1 << 20;
        let mut chunk = vec![0u8; chunk_bytes];
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut paths = Vec::new();
        for i in 0..count {
            let path = dir.path().join(format!("default{i}"));
            let mut f = File::create(&path)?;
            let mut left = size_bytes;
            while left > 0 {
                // Ctrl-C while filling: stop; the directory is removed as `dir` drops.
                if crate::sched::interrupted() {
                    return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
                }
                for w in chunk.chunks_mut(8) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    w.copy_from_slice(&x.to_le_bytes()[..w.len()]);
                }
                let n = left.min(chunk_bytes as u64) as usize;
                f.write_all(&chunk[..n])?;
                left -= n as u64;
            }
            f.sync_all()?;
            paths.push(path);
        }
        Ok(ScratchFiles { dir, paths })
    }

    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

const STALE_PREFIX: &str = "nines-default-";

/// Removes in `base` the embedded default's directories (`nines-default-PID-XXXXXX`) of runs
/// that are gone (SIGKILL, a crash): their pid no longer runs, and they hold nothing but
/// `defaultN` and `probe` files. Anything else is left alone.
pub fn remove_stale(base: &Path) {
    let Ok(rd) = std::fs::read_dir(base) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(STALE_PREFIX)) else {
            continue;
        };
        let Some(pid) = rest
            .split_once('-')
            .and_then(|(p, _)| p.parse::<i32>().ok())
        else {
            continue;
        };
        if pid <= 0 || pid as u32 == std::process::id() {
            continue;
        }
        // SAFETY: kill with signal 0 only checks whether the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
        if alive || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let dir = e.path();
        let ours = std::fs::read_dir(&dir).is_ok_and(|files| {
            files.flatten().all(|f| {
                let n = f.file_name();
                let n = n.to_string_lossy();
                f.file_type().is_ok_and(|t| t.is_file())
                    && (n == "probe"
                        || n.strip_prefix("default").is_some_and(|d| {
                            !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())
                        }))
            })
        });
        if ours {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// Bytes an unprivileged user may still write on the filesystem holding `dir` (statvfs), or None
/// when it cannot be asked.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills st from a valid C path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_created_filled_and_removed() {
        let s = ScratchFiles::create(2, 3 << 20).unwrap();
        let dir = s.dir().to_path_buf();
        for p in s.paths() {
            let data = std::fs::read(p).unwrap();
            assert_eq!(data.len(), 3 << 20);
            assert!(data.iter().filter(|&&b| b == 0).count() < data.len() / 100);
        }
        drop(s);
        assert!(!dir.exists());
    }

    #[test]
    fn a_killed_runs_directory_is_removed_by_the_next_and_nothing_else() {
        let base = tempfile::tempdir().unwrap();
        // A pid above the kernel's pid_max: never running.
        let dead = base.path().join("nines-default-2147483646-abc123");
        std::fs::create_dir(&dead).unwrap();
        std::fs::write(dead.join("default0"), b"x").unwrap();
        std::fs::write(dead.join("default1"), b"x").unwrap();
        // A dead pid's directory holding something else: kept.
        let foreign = base.path().join("nines-default-2147483646-zzz");
        std::fs::create_dir(&foreign).unwrap();
        std::fs::write(foreign.join("notes.txt"), b"mine").unwrap();
        // A live process's (our parent's): kept.
        let live = base.path().join(format!(
            "nines-default-{}-q",
            std::os::unix::process::parent_id()
        ));
        std::fs::create_dir(&live).unwrap();
        std::fs::write(live.join("default0"), b"x").unwrap();
        remove_stale(base.path());
        assert!(!dead.exists());
        assert!(foreign.join("notes.txt").exists());
        assert!(live.exists());
    }
}
