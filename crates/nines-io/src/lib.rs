//! The real driver: I/O engines, targets (files and block devices, with safety checks), worker
//! threads with CPU placement and real-time priority, and the per-I/O and interval logs.

pub mod buf;
pub mod clock;
pub mod driver;
pub mod engine;
pub mod latlog_sink;
pub mod safety;
pub mod sched;
pub mod target;
mod worker;
