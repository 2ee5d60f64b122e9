//! What SIGINT and SIGTERM do before a verb takes them over: the process ends at once, with
//! the status README gives (130; serve 0), after removing the temporary names it has made
//! (outputs under `.NAME.nines-partial-PID`, and the probes that check an output can be
//! created before any work: `output.rs`). A verb with work to stop installs its own handler
//! (`nines_io::sched::install_interrupt_handler`, which replaces this one and only sets a flag
//! the verb polls); the short verbs (report, merge, log, ...) keep this one to their end.
//!
//! Hand-written because it must be async-signal-safe: the handler reads a fixed table of
//! C strings with atomic loads and calls only `unlink`, `write` and `_exit`. Registered names are
//! never freed (a handler may be reading one): a run registers a few per output, so the leak is
//! bounded by its outputs.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};

/// Temporary names registered at once, at most (more are not removed by a signal, only by
/// the next run: `output::remove_stale_partials`).
const SLOTS: usize = 64;

static TEMPS: [AtomicPtr<libc::c_char>; SLOTS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS];
static EXIT_STATUS: AtomicI32 = AtomicI32::new(super::EXIT_INTERRUPTED);

extern "C" fn on_signal(_signal: libc::c_int) {
    for slot in &TEMPS {
        let p = slot.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: a NUL-terminated string that is never freed; unlink is async-signal-safe.
            unsafe { libc::unlink(p) };
        }
    }
    const LINE: &[u8] = b"nines: interrupted (SIGINT/SIGTERM): outputs not finished were removed\n";
    // SAFETY: write(2) is async-signal-safe; a failed write changes nothing.
    unsafe { libc::write(2, LINE.as_ptr().cast(), LINE.len()) };
    // SAFETY: _exit is async-signal-safe and ends the process without running anything else.
    unsafe { libc::_exit(EXIT_STATUS.load(Ordering::Relaxed)) };
}

/// Installs the handler for SIGINT and SIGTERM; a signal then ends the process with
/// `exit_status`.
pub fn install(exit_status: i32) -> std::io::Result<()> {
    EXIT_STATUS.store(exit_status, Ordering::Relaxed);
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler does only async-signal-safe work.
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A temporary name the handler removes while this lives.
#[derive(Debug)]
pub struct Registered(Option<usize>);

/// Registers `path` for removal by a signal (before it is created: a signal between the two
/// finds nothing to remove).
pub fn register(path: &Path) -> Registered {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return Registered(None);
    };
    let p = CString::into_raw(c);
    for (i, slot) in TEMPS.iter().enumerate() {
        if slot
            .compare_exchange(std::ptr::null_mut(), p, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return Registered(Some(i));
        }
    }
    // Every slot taken: the string was never published, so it can be freed.
    // SAFETY: `p` came from CString::into_raw just above and was not shared.
    drop(unsafe { CString::from_raw(p) });
    Registered(None)
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            // The string is left allocated: a handler running now may be reading it.
            TEMPS[i].store(std::ptr::null_mut(), Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_name_is_published_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".out.json.nines-partial-1");
        let r = register(&path);
        let i = r.0.expect("a free slot");
        let p = TEMPS[i].load(Ordering::Acquire);
        // SAFETY: published strings are never freed.
        let got = unsafe { std::ffi::CStr::from_ptr(p) };
        assert_eq!(got.to_bytes(), path.as_os_str().as_bytes());
        drop(r);
        assert_ne!(TEMPS[i].load(Ordering::Acquire), p);
    }
}
