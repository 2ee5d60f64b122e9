//! The one input layer: every file nines parses (run JSON, device TOML, job files, plans, HDR
//! and per-I/O logs, traces) is opened here. What is not a regular file or a pipe (a block or
//! character device such as /dev/zero, a directory, a socket) is refused by its kind before a
//! byte is read, and a whole-file read is bounded by a size suited to the kind of file, so an
//! endless or huge input is refused in one line instead of growing until the OOM killer.
//!
//! The errors are `std::io::Error`s of kind `InvalidInput` whose message says what is wrong
//! ("is a character device, not a file"); callers add the path and the option as they do for
//! any other read error.

use std::fs::File;
use std::io::{Error, ErrorKind, Read};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// Bound for small text settings files (device TOML, job files, tuning plans and records).
pub const SETTINGS_MAX_BYTES: u64 = 16 << 20;
/// Bound for run reports (JSON), whose histograms grow with targets and jobs.
pub const REPORT_MAX_BYTES: u64 = 1 << 30;
/// Bound for an HDR histogram interval log read whole.
pub const HDR_LOG_MAX_BYTES: u64 = 4 << 30;

fn kind_name(ft: &std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Opens `path` for reading if it is a regular file or a pipe (a FIFO, `<(...)`); refuses any
/// other kind before reading. Streaming readers (per-I/O logs, traces) use this.
pub fn open(path: &Path) -> Result<File, Error> {
    let md = std::fs::metadata(path)?;
    let ft = md.file_type();
    if !ft.is_file() && !ft.is_fifo() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "is {}, not a file nines can read; give a file",
                kind_name(&ft)
            ),
        ));
    }
    let file = File::open(path)?;
    // Checked again on the open descriptor: the path may have changed in between.
    let ft = file.metadata()?.file_type();
    if !ft.is_file() && !ft.is_fifo() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "is {}, not a file nines can read; give a file",
                kind_name(&ft)
            ),
        ));
    }
    Ok(file)
}

/// Reads all of `path` ([`open`]'s kinds only), refusing more than `max_bytes`: a regular file
/// by its size before reading, a pipe as soon as it has sent more.
pub fn read(path: &Path, max_bytes: u64) -> Result<Vec<u8>, Error> {
    let file = open(path)?;
    let md = file.metadata()?;
    let too_big = || {
        Error::new(
            ErrorKind::InvalidInput,
            format!(
                "is larger than {}, the most nines reads for a file of this kind; \
                 is it the right file?",
                if max_bytes >= 1 << 20 {
                    format!("{} MiB", max_bytes >> 20)
                } else {
                    format!("{max_bytes} bytes")
                }
            ),
        )
    };
    if md.file_type().is_file() && md.len() > max_bytes {
        return Err(too_big());
    }
    let mut bytes = Vec::with_capacity(md.len().min(max_bytes) as usize);
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_big());
    }
    Ok(bytes)
}

/// [`read`] as UTF-8 text.
pub fn read_to_string(path: &Path, max_bytes: u64) -> Result<String, Error> {
    String::from_utf8(read(path, max_bytes)?)
        .map_err(|_| Error::new(ErrorKind::InvalidData, "is not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_directories_are_refused_by_kind_and_sizes_are_bounded() {
        for (p, kind) in [
            ("/dev/zero", "a character device"),
            ("/dev/null", "a character device"),
            ("/", "a directory"),
        ] {
            let e = read(Path::new(p), 1 << 20).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{p}");
            assert!(e.to_string().contains(kind), "{p}: {e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.json");
        std::fs::write(&f, vec![b'x'; 4096]).unwrap();
        assert_eq!(read(&f, 4096).unwrap().len(), 4096);
        let e = read(&f, 4095).unwrap_err();
        assert!(e.to_string().contains("larger than"), "{e}");
        std::fs::write(&f, [0xff, 0xfe]).unwrap();
        assert!(read_to_string(&f, 10).is_err());
        // A pipe is bounded while it is read.
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo on a path in our temporary directory.
        assert_eq!(unsafe { libc_mkfifo(c.as_ptr(), 0o600) }, 0);
        let w = fifo.clone();
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().write(true).open(w).unwrap();
            let _ = f.write_all(&[b'y'; 1 << 16]);
        });
        let e = read(&fifo, 1000).unwrap_err();
        assert!(e.to_string().contains("larger than"), "{e}");
        drop(writer.join());
    }

    unsafe extern "C" {
        #[link_name = "mkfifo"]
        fn libc_mkfifo(path: *const std::ffi::c_char, mode: u32) -> i32;
    }
}
