//! The vocabulary of nines, free of I/O: operations, units and their parsers, the workload
//! specification and its deterministic request generator, the latency recorder and statistics,
//! the per-I/O log format, and the versioned report schema. Both drivers (real and simulated)
//! build on this crate, so nothing here reads a clock, sleeps, spawns or touches a file, except
//! [`input`], the bounded reader every parser of user files shares.

pub mod fiolog;
pub mod hdrlog;
pub mod input;
pub mod job;
pub mod jobfile;
pub mod latlog;
pub mod merge;
pub mod nvme;
pub mod op;
pub mod progress;
pub mod report;
pub mod run;
pub mod source;
pub mod stats;
pub mod units;
pub mod workload;
pub mod zbd;
