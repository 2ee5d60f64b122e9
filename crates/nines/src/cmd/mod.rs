//! One module per verb. Each exposes `Args` (clap) and `run(Args) -> anyhow::Result<()>`.

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
pub mod sim_estimate;
pub mod sweep;
pub mod tune;
pub mod workload_args;
