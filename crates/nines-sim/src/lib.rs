//! The simulated driver: a discrete-event loop in virtual nanoseconds that moves the same run
//! controller, request sources and array volumes as the real driver, with SSD models
//! (nines-flash) as members and a host model for CPU costs.
//!
//! - [`config`]: what a simulation is given, scaling and preconditioning ([`prepare`]).
//! - [`simulate`]: a run as a library call: a [`RunSpec`] (shared with the real driver) and a
//!   [`SimSpec`] in, the report out, progress and stop through a [`SimHandle`].
//! - [`calibrate`]: fit a device description to measured runs (`nines sim --calibrate`).
//! - [`event_loop`]: the loop ([`run`], [`run_logged`]) and its progress hook ([`SimProgress`]).
//! - [`member`]: a member device: an SSD model or a zero-latency device (the nines-member
//!   crate, below both drivers; re-exported here).
//! - [`host`]: CPU costs of submission and completion, interrupt vs polled, background tasks.
//! - `report`, `sinks`: the report and the per-I/O and interval logs.
//!
//! Trace readers live in the nines-trace crate (both drivers replay traces).

pub mod apst;
pub mod calibrate;
pub mod config;
pub mod event_loop;
pub mod host;
pub use nines_member as member;
mod queue;
mod report;
pub mod simulate;
mod sinks;

pub use config::{
    DEVICES_MAX, LOGICAL_BLOCK_BYTES, Layout, MEMORY_BUDGET_BYTES, Prepared, SimConfig, SimError,
    TRACE_DEPTH_DEFAULT, prepare, prepare_until,
};
pub use event_loop::{RunStats, SimOutput, SimProgress, run, run_logged, target_names};
pub use host::{Background, CompletionMode, Host, HostConfig, ServiceDist};
pub use nines_core::stats::hdr_tag;
pub use simulate::{
    LogNames, RunSpec, SimHandle, SimSpec, SimulateError, Simulation, TraceSpec, simulate,
};
pub use sinks::{LAT_LOG_BUFFER_BYTES, Logs};
