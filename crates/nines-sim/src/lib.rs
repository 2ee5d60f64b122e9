//! The simulated driver: a discrete-event loop in virtual nanoseconds that drives SSD models
//! (nines-flash) with the same workload generator and recorder as the real driver, plus a host
//! model and trace replay.
//!
//! - [`driver`]: scaling and preconditioning ([`prepare`]), the event loop and the report
//!   ([`run`]).
//! - [`host`]: CPU costs of submission and completion, interrupt vs polled, background tasks.
//! - [`trace`]: block-I/O trace readers and fitting for replay.

pub mod driver;
pub mod host;
pub mod trace;

pub use driver::{
    DEVICES_MAX, LOGICAL_BLOCK_BYTES, Layout, Logs, MEMORY_BUDGET_BYTES, Prepared, RunStats,
    SimConfig, SimError, SimOutput, hdr_tag, prepare, run, run_logged, target_names,
};
pub use host::{Background, CompletionMode, Host, HostConfig, ServiceDist};
