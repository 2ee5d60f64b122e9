//! One module per verb. Each exposes `Args` (clap) and `run(Args) -> anyhow::Result<()>`.

pub mod array_meta;
pub mod check;
pub mod compare;
pub mod doctor;
pub mod fio_export;
pub mod fleet;
pub mod hostmem;
pub mod log;
pub mod merge;
pub mod output;
pub mod profile;
pub mod rebuild;
pub mod report;
pub mod serve;
pub mod sim;
pub mod sim_devices;
pub mod sim_estimate;
pub mod sparse;
pub mod sweep;
pub mod tune;
pub mod workload_args;

/// Exit status of a run stopped by SIGINT/SIGTERM (128 + SIGINT, as shells and fio report it);
/// `profile` and `sim` report what they measured or simulated, then exit with it.
pub const EXIT_INTERRUPTED: i32 = 130;
