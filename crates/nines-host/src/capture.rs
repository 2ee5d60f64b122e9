//! `nines doctor --capture FILE`: the files doctor read, as one tar (or tar.gz) archive that
//! `nines doctor --root` of its extracted copy reads exactly as the live host was read.

use std::io::Write;
use std::path::Path;

use crate::fs::Recorded;

#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("cannot write capture {path}: {msg}")]
    Write { path: String, msg: String },
    #[error("cannot extract capture {path}: {msg}")]
    Extract { path: String, msg: String },
}

fn is_gz(path: &Path) -> bool {
    let s = path.to_string_lossy();
    s.ends_with(".gz") || s.ends_with(".tgz")
}

/// Writes the capture to an already open file (the caller decides where: nines writes under a
/// temporary name and renames on success). `gz` compresses; `out` names it in errors. Every
/// write error, including the gzip trailer's and the final flush's, is returned.
pub fn write_capture_to(
    rec: &Recorded,
    file: std::fs::File,
    gz: bool,
    out: &Path,
) -> Result<usize, CaptureError> {
    let werr = |e: std::io::Error| CaptureError::Write {
        path: out.display().to_string(),
        msg: e.to_string(),
    };
    let mut file = if gz {
        let enc = flate2::write::GzEncoder::new(file, flate2::Compression::default());
        let enc = archive(rec, enc).map_err(werr)?;
        enc.finish().map_err(werr)?
    } else {
        archive(rec, file).map_err(werr)?
    };
    file.flush().map_err(werr)?;
    Ok(rec.files.len())
}

/// Is the capture file name one to compress?
pub fn wants_gz(path: &Path) -> bool {
    is_gz(path)
}

fn archive<W: Write>(rec: &Recorded, sink: W) -> Result<W, std::io::Error> {
    let mut b = tar::Builder::new(sink);
    for d in &rec.dirs {
        let rel = d.trim_start_matches('/');
        if rel.is_empty() || rec.files.contains_key(d) {
            continue;
        }
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        h.set_mtime(0);
        b.append_data(&mut h, format!("{rel}/"), std::io::empty())?;
    }
    for (path, text) in &rec.files {
        let rel = path.trim_start_matches('/');
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o644);
        h.set_size(text.len() as u64);
        h.set_mtime(0);
        b.append_data(&mut h, rel, text.as_bytes())?;
    }
    b.into_inner()
}

/// Extracts a capture (tar or tar.gz) into `dir`.
pub fn extract(archive: &Path, dir: &Path) -> Result<(), CaptureError> {
    let xerr = |e: std::io::Error| CaptureError::Extract {
        path: archive.display().to_string(),
        msg: e.to_string(),
    };
    let file = std::fs::File::open(archive).map_err(xerr)?;
    let src: Box<dyn std::io::Read> = if is_gz(archive) {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    tar::Archive::new(src).unpack(dir).map_err(xerr)
}
