//! The real driver: I/O engines, targets (files and block devices, with safety checks), worker
//! threads with CPU placement and real-time priority, and the per-I/O and interval logs.

pub mod engine;
