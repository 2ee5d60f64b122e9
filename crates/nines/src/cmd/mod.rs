//! One module per verb. Each exposes `Args` (clap) and `run(Args) -> anyhow::Result<()>`.

pub mod check;
pub mod compare;
pub mod doctor;
pub mod fio_export;
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
pub mod sweep;
pub mod tune;
pub mod workload_args;

/// Exit status of a run stopped by SIGINT/SIGTERM (128 + SIGINT, as shells and fio report it);
/// every verb reports what it measured, simulated or finished, then exits with it (serve, whose
/// normal end is a signal, exits 0).
pub const EXIT_INTERRUPTED: i32 = 130;

/// Starts `cmd` in its own process group, so that a terminal's Ctrl-C reaches only this nines,
/// which forwards it once ([`wait_forwarding`]); the child would die of a second signal.
pub fn spawn_own_group(cmd: &mut std::process::Command) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
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
