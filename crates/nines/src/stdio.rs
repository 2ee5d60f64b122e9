//! Standard output and error that never panic. std's `print!`/`eprint!` panic when the stream is
//! a closed pipe (`nines profile | head -1` died with exit 101 and lost its measurement); main.rs
//! shadows those macros with these functions for the whole binary. A closed pipe (EPIPE) ends
//! that stream's output quietly and the verb goes on: it still writes its requested files and
//! exits with its own status. Any other error on stdout (a full disk behind a redirection) is said
//! once on stderr.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_GONE: AtomicBool = AtomicBool::new(false);
static STDERR_GONE: AtomicBool = AtomicBool::new(false);

/// `print!` for the binary.
pub fn out(args: std::fmt::Arguments<'_>) {
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_fmt(args) {
        gone_out(e);
    }
}

/// Flushes stdout under the same rules (before a long run, so the table's head is seen).
pub fn flush_out() {
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return;
    }
    if let Err(e) = std::io::stdout().flush() {
        gone_out(e);
    }
}

fn gone_out(e: std::io::Error) {
    STDOUT_GONE.store(true, Ordering::Relaxed);
    if e.kind() != std::io::ErrorKind::BrokenPipe {
        err(format_args!(
            "nines: warning: writing to standard output failed ({e}); output stopped, the run goes on\n"
        ));
    }
}

/// `eprint!` for the binary: a closed or broken stderr is ignored.
pub fn err(args: std::fmt::Arguments<'_>) {
    if STDERR_GONE.load(Ordering::Relaxed) {
        return;
    }
    if std::io::stderr().lock().write_fmt(args).is_err() {
        STDERR_GONE.store(true, Ordering::Relaxed);
    }
}
