//! libblkid, loaded at run time: the signature probe the whole Linux ecosystem (mkfs, wipefs,
//! udev, mount) uses, so nines refuses to overwrite everything those tools recognise (squashfs,
//! minix, cramfs, bfs, ZFS, bcache, ... not only the formats `safety`'s built-in probe knows).
//!
//! A thin FFI through `dlopen("libblkid.so.1")` rather than a link-time dependency: a host without
//! the library still builds and runs nines, and then `safety` falls back to its built-in probe and
//! says so. `NINES_NO_LIBBLKID=1` forces that fallback (tests and comparisons use it).

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

type Probe = *mut c_void;

/// The libblkid functions nines calls, resolved once.
struct Lib {
    version: String,
    new_probe_from_filename: unsafe extern "C" fn(*const c_char) -> Probe,
    free_probe: unsafe extern "C" fn(Probe),
    enable_superblocks: unsafe extern "C" fn(Probe, c_int) -> c_int,
    set_superblocks_flags: unsafe extern "C" fn(Probe, c_int) -> c_int,
    enable_partitions: unsafe extern "C" fn(Probe, c_int) -> c_int,
    set_partitions_flags: unsafe extern "C" fn(Probe, c_int) -> c_int,
    do_safeprobe: unsafe extern "C" fn(Probe) -> c_int,
    lookup_value:
        unsafe extern "C" fn(Probe, *const c_char, *mut *const c_char, *mut usize) -> c_int,
}

// SAFETY: the struct holds only function pointers into a library that is never unloaded, and
// a String; libblkid's probe functions are reentrant on distinct probes.
unsafe impl Send for Lib {}
unsafe impl Sync for Lib {}

const BLKID_SUBLKS_TYPE: c_int = 1 << 5;
const BLKID_SUBLKS_USAGE: c_int = 1 << 7;
const BLKID_SUBLKS_MAGIC: c_int = 1 << 9;
const BLKID_PARTS_MAGIC: c_int = 1 << 3;

/// Whether `NINES_NO_LIBBLKID` switches libblkid off (set, not empty, not "0").
pub fn disabled_by_env() -> bool {
    std::env::var_os("NINES_NO_LIBBLKID").is_some_and(|v| !v.is_empty() && v != "0")
}

fn lib() -> Option<&'static Lib> {
    static LIB: OnceLock<Option<Lib>> = OnceLock::new();
    LIB.get_or_init(|| {
        if disabled_by_env() {
            return None;
        }
        load()
    })
    .as_ref()
}

fn load() -> Option<Lib> {
    // SAFETY: dlopen with a constant name; the handle is never closed (the functions live on).
    let handle = unsafe { libc::dlopen(c"libblkid.so.1".as_ptr(), libc::RTLD_NOW) };
    if handle.is_null() {
        return None;
    }
    let sym = |name: &CStr| -> Option<*mut c_void> {
        // SAFETY: handle is a live library handle and name a NUL-terminated symbol name.
        let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    // SAFETY (every `cast` below): each symbol is the libblkid function of that name, whose C
    // prototype (blkid.h) matches the Rust function pointer type it is read as.
    unsafe fn cast<F: Copy>(p: *mut c_void) -> F {
        const { assert!(size_of::<F>() == size_of::<*mut c_void>()) };
        // SAFETY: sizes are equal (checked above); the caller names the right type.
        unsafe { std::mem::transmute_copy(&p) }
    }
    unsafe {
        let get_version: unsafe extern "C" fn(*mut *const c_char, *mut *const c_char) -> c_int =
            cast(sym(c"blkid_get_library_version")?);
        let mut ver: *const c_char = std::ptr::null();
        let mut date: *const c_char = std::ptr::null();
        get_version(&mut ver, &mut date);
        let version = if ver.is_null() {
            "unknown".to_string()
        } else {
            CStr::from_ptr(ver).to_string_lossy().into_owned()
        };
        Some(Lib {
            version,
            new_probe_from_filename: cast(sym(c"blkid_new_probe_from_filename")?),
            free_probe: cast(sym(c"blkid_free_probe")?),
            enable_superblocks: cast(sym(c"blkid_probe_enable_superblocks")?),
            set_superblocks_flags: cast(sym(c"blkid_probe_set_superblocks_flags")?),
            enable_partitions: cast(sym(c"blkid_probe_enable_partitions")?),
            set_partitions_flags: cast(sym(c"blkid_probe_set_partitions_flags")?),
            do_safeprobe: cast(sym(c"blkid_do_safeprobe")?),
            lookup_value: cast(sym(c"blkid_probe_lookup_value")?),
        })
    }
}

/// libblkid's version when it can be loaded ("2.38.1"), else None (the built-in probe runs).
pub fn version() -> Option<&'static str> {
    lib().map(|l| l.version.as_str())
}

/// What libblkid found on a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// Nothing it recognises.
    Nothing,
    /// One format: a filesystem/RAID/crypto TYPE ("squashfs", "minix") or a partition table
    /// PTTYPE ("gpt", "dos").
    Format(String),
    /// Several signatures that contradict each other (libblkid's "ambivalent" result).
    Ambivalent,
}

/// Why libblkid could not answer.
#[derive(Debug, thiserror::Error)]
pub enum BlkidError {
    #[error("libblkid cannot open the device: {0}")]
    Open(std::io::Error),
    #[error("libblkid failed to probe the device")]
    Probe,
}

/// Probes `path` with libblkid (superblocks with their magic, and partition tables), as
/// `blkid -p` does. None when libblkid is not available.
pub fn probe(path: &Path) -> Option<Result<Found, BlkidError>> {
    let lib = lib()?;
    Some(probe_with(lib, path))
}

fn probe_with(lib: &Lib, path: &Path) -> Result<Found, BlkidError> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| BlkidError::Open(std::io::Error::from_raw_os_error(libc::EINVAL)))?;
    // SAFETY: c is a valid C string; the probe is freed below on every path.
    let pr = unsafe { (lib.new_probe_from_filename)(c.as_ptr()) };
    if pr.is_null() {
        return Err(BlkidError::Open(std::io::Error::last_os_error()));
    }
    struct Guard<'a>(&'a Lib, Probe);
    impl Drop for Guard<'_> {
        fn drop(&mut self) {
            // SAFETY: the probe was created by this library and is freed once.
            unsafe { (self.0.free_probe)(self.1) }
        }
    }
    let _guard = Guard(lib, pr);
    // SAFETY: pr is a live probe.
    let rc = unsafe {
        (lib.enable_superblocks)(pr, 1);
        (lib.set_superblocks_flags)(
            pr,
            BLKID_SUBLKS_TYPE | BLKID_SUBLKS_USAGE | BLKID_SUBLKS_MAGIC,
        );
        (lib.enable_partitions)(pr, 1);
        (lib.set_partitions_flags)(pr, BLKID_PARTS_MAGIC);
        (lib.do_safeprobe)(pr)
    };
    match rc {
        0 => {
            for key in [c"TYPE", c"PTTYPE"] {
                let mut data: *const c_char = std::ptr::null();
                let mut len = 0usize;
                // SAFETY: pr is live; data points into the probe's storage until it is freed,
                // and is copied out before that.
                let found = unsafe { (lib.lookup_value)(pr, key.as_ptr(), &mut data, &mut len) };
                if found == 0 && !data.is_null() {
                    // SAFETY: libblkid returns NUL-terminated values.
                    let v = unsafe { CStr::from_ptr(data) }
                        .to_string_lossy()
                        .into_owned();
                    return Ok(Found::Format(v));
                }
            }
            Ok(Found::Format("an unnamed signature".to_string()))
        }
        1 => Ok(Found::Nothing),
        -2 => Ok(Found::Ambivalent),
        _ => Err(BlkidError::Probe),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The library loads and answers: nothing on a blank file, an open error for a missing one.
    #[test]
    fn probes_files_when_the_library_is_present() {
        let v = version().expect("libblkid.so.1 is missing: run `bash scripts/setup.sh`");
        assert!(v.chars().next().is_some_and(|c| c.is_ascii_digit()), "{v}");
        let dir = tempfile::tempdir().unwrap();
        let blank = dir.path().join("blank");
        std::fs::write(&blank, vec![0u8; 1 << 20]).unwrap();
        assert_eq!(probe(&blank).unwrap().unwrap(), Found::Nothing);
        let missing = dir.path().join("missing");
        assert!(matches!(probe(&missing).unwrap(), Err(BlkidError::Open(_))));
    }
}
