//! The real driver: I/O engines, targets (files and block devices, with safety checks), worker
//! threads with CPU placement and real-time priority, and the per-I/O and interval logs.

pub mod array_meta;
pub mod blkid;
pub mod buf;
pub mod clock;
mod data;
pub mod driver;
pub mod emu;
pub mod engine;
pub mod fiolog_sink;
pub mod identity;
pub mod latlog_sink;
pub mod nvme;
mod plan;
pub mod profile;
pub mod resolve;
pub mod safety;
pub mod sched;
pub mod scratch;
pub mod serial_meta;
pub mod serve;
pub mod sparse;
pub mod target;
mod worker;
pub mod zoned;

pub use data::{check_pattern, fill_pattern};

/// Re-exported so the binary and its tests read interval logs with the same crate version.
pub use hdrhistogram;
