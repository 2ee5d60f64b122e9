//! One module per verb. Each exposes `Args` (clap) and `run(Args) -> anyhow::Result<()>`.

pub mod check;
pub mod compare;
pub mod doctor;
pub mod early_signal;
pub mod fio_export;
pub mod fio_log;
pub mod fleet;
pub mod hostmem;
pub mod latlog_estimate;
pub mod log;
pub mod merge;
pub mod output;
pub mod profile;
pub mod rebuild;
pub mod report;
pub mod serve;
pub mod serve_tls;
pub mod sim;
pub mod sim_devices;
pub mod sim_estimate;
pub mod sim_power;
pub mod sweep;
pub mod tune;
pub mod workload_args;

/// Exit status of a run stopped by SIGINT/SIGTERM (128 + SIGINT, as shells and fio report it);
/// every verb reports what it measured, simulated or finished, then exits with it (serve, whose
/// normal end is a signal, exits 0).
pub const EXIT_INTERRUPTED: i32 = 130;

/// An error that ends a verb because SIGINT/SIGTERM arrived (waiting for a FIFO's reader, say):
/// `main` prints it and exits [`EXIT_INTERRUPTED`], as a run stopped mid-way does.
#[derive(Debug)]
pub struct Interrupted(pub String);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Interrupted {}

/// Starts `cmd` in its own process group, so that a terminal's Ctrl-C reaches only this nines,
/// which forwards it once ([`wait_forwarding`]); the child would die of a second signal.
///
/// The child also dies with this process (PR_SET_PDEATHSIG, SIGTERM: it stops and reports like
/// after a Ctrl-C): a sweep or fleet killed by SIGKILL, or by a SIGHUP or SIGQUIT it does not
/// handle, left its children running, writing devices nobody watched. The signal follows the
/// thread that spawned, so spawn from the thread that waits (the main thread, in sweep and
/// fleet).
pub fn spawn_own_group(cmd: &mut std::process::Command) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the child between fork and exec and calls only prctl and
    // getppid, both async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGTERM as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before prctl: then nobody would ever send the signal.
            if libc::getppid() != parent {
                return Err(std::io::Error::other("the parent nines has exited"));
            }
            Ok(())
        });
    }
    cmd.process_group(0).spawn()
}

/// Waits for `child`; once this process is interrupted (SIGINT/SIGTERM, see
/// `nines_io::sched::install_interrupt_handler`) forwards SIGTERM to it, so that it stops and
/// reports, and kills it if it has not ended 30 s later. Returns its status and whether it was
/// stopped by an interrupt.
pub fn wait_forwarding(
    child: &mut std::process::Child,
) -> std::io::Result<(std::process::ExitStatus, bool)> {
    let mut forwarded: Option<std::time::Instant> = None;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok((status, forwarded.is_some()));
        }
        match forwarded {
            None if nines_io::sched::interrupted() => {
                // SAFETY: a signal to our own child, whose pid is not reaped yet.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
                forwarded = Some(std::time::Instant::now());
            }
            Some(t) if t.elapsed() > std::time::Duration::from_secs(30) => {
                let _ = child.kill();
            }
            _ => {}
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
