//! Reading the host's /proc and /sys under a root directory, recording what was read.
//!
//! Every reader in this crate goes through [`HostFs`], so `--root DIR` (a captured tree) and the
//! live host are read the same way, and `--capture` can archive exactly the files that were read.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Files larger than this are refused: /proc/interrupts of a 2,560-queue host is about 1 MiB.
pub const FILE_BYTES_MAX: u64 = 16 << 20;
/// Directory listings longer than this are truncated (a bound on every loop over a listing).
pub const DIR_ENTRIES_MAX: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FsError {
    #[error("{path}: not found")]
    NotFound { path: String },
    #[error("{path}: {msg}")]
    Io { path: String, msg: String },
}

impl FsError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, FsError::NotFound { .. })
    }
}

/// What a [`HostFs`] read: files (with their content) and listed directories.
#[derive(Debug, Default, Clone)]
pub struct Recorded {
    /// Host path -> the exact text read (so a capture holds what doctor saw).
    pub files: BTreeMap<String, String>,
    pub dirs: BTreeSet<String>,
}

/// A view of a host's filesystem under `root` ("/" for the live host).
#[derive(Debug)]
pub struct HostFs {
    root: PathBuf,
    recorded: RefCell<Recorded>,
}

impl HostFs {
    pub fn new(root: &Path) -> Self {
        HostFs {
            root: root.to_path_buf(),
            recorded: RefCell::new(Recorded::default()),
        }
    }

    pub fn live() -> Self {
        HostFs::new(Path::new("/"))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn is_live(&self) -> bool {
        self.root == Path::new("/")
    }

    /// The real path of host path `abs` ("/proc/interrupts") under the root.
    pub fn resolve(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    /// Reads a whole text file (lossy UTF-8). Successful reads are recorded for `--capture`.
    pub fn read(&self, abs: &str) -> Result<String, FsError> {
        let path = self.resolve(abs);
        let file = std::fs::File::open(&path).map_err(|e| io_err(abs, &e))?;
        let mut bytes = Vec::new();
        file.take(FILE_BYTES_MAX + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| io_err(abs, &e))?;
        if bytes.len() as u64 > FILE_BYTES_MAX {
            return Err(FsError::Io {
                path: abs.to_string(),
                msg: format!("larger than {FILE_BYTES_MAX} bytes"),
            });
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        self.recorded
            .borrow_mut()
            .files
            .insert(abs.to_string(), text.clone());
        Ok(text)
    }

    /// Reads a one-value sysfs file, trimmed.
    pub fn read_value(&self, abs: &str) -> Result<String, FsError> {
        self.read(abs).map(|s| s.trim().to_string())
    }

    /// Reads an optional file: `Ok(None)` when it does not exist.
    pub fn read_opt(&self, abs: &str) -> Result<Option<String>, FsError> {
        match self.read(abs) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sorted names in a directory. Recorded (the directory and each entry) for `--capture`.
    pub fn list(&self, abs: &str) -> Result<Vec<String>, FsError> {
        self.list_matching(abs, |_| true)
    }

    /// Sorted names in a directory that match `keep`; only those are recorded (so listing /proc
    /// for process ids does not put every /proc file name in a capture).
    pub fn list_matching(
        &self,
        abs: &str,
        keep: impl Fn(&str) -> bool,
    ) -> Result<Vec<String>, FsError> {
        let path = self.resolve(abs);
        let rd = std::fs::read_dir(&path).map_err(|e| io_err(abs, &e))?;
        let mut names = Vec::new();
        for entry in rd.take(DIR_ENTRIES_MAX) {
            let entry = entry.map_err(|e| io_err(abs, &e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if keep(&name) {
                names.push(name);
            }
        }
        names.sort();
        let mut rec = self.recorded.borrow_mut();
        let base = abs.trim_end_matches('/');
        rec.dirs.insert(base.to_string());
        for n in &names {
            rec.dirs.insert(format!("{base}/{n}"));
        }
        Ok(names)
    }

    /// Whether a path exists; an existing directory is recorded for `--capture`.
    pub fn exists(&self, abs: &str) -> bool {
        let p = self.resolve(abs);
        if p.is_dir() {
            self.recorded
                .borrow_mut()
                .dirs
                .insert(abs.trim_end_matches('/').to_string());
        }
        p.exists()
    }

    pub fn recorded(&self) -> Recorded {
        self.recorded.borrow().clone()
    }
}

fn io_err(abs: &str, e: &std::io::Error) -> FsError {
    if e.kind() == std::io::ErrorKind::NotFound {
        FsError::NotFound {
            path: abs.to_string(),
        }
    } else {
        FsError::Io {
            path: abs.to_string(),
            msg: e.to_string(),
        }
    }
}
