//! The SSD model: geometry, timing, a page-mapping FTL with greedy GC, a DRAM write buffer,
//! read/write interference and program/erase suspend, housekeeping stalls, preconditioning and
//! a scale knob. Sans-IO: no clock, no thread, no file I/O in the model; the time is an argument.
//!
//! - [`DeviceConfig`]: the description (TOML presets in `presets/`, or a user's file), validated.
//! - [`ZonedSsd`]: a zoned device (NVMe ZNS): zones, write pointers, append, reset; no GC.
//! - [`Ftl`]: mapping and GC without time (also used for fast preconditioning).
//! - [`Ssd`]: the timed device: `submit(now_ns, op, offset, len) -> completion_ns`, and the
//!   control surface a host policy uses: Predictable Latency Mode windows, GC now, TRIM, busy
//!   queries and a fast-fail read (docs/arch-sim.md).

pub mod config;
pub mod control;
pub mod dist;
pub mod ftl;
pub mod mapcache;
pub mod ssd;
mod timeline;
pub mod zoned;

pub use config::{DeviceConfig, FDP_HANDLES_MAX, FdpConfig, Isolation, PRESETS, preset_names};
pub use control::{GcDone, GcGoal, PlmStatus, PlmWindow, ReadOutcome};
pub use ftl::{FdpStats, Ftl, FtlStats, GC_RESERVE_BLOCKS, GcWork};
pub use ssd::{
    Precondition, READ_WAIT_CAUSES, READ_WAIT_SLOW_NS, ReadWaitCause, ReadWaits, Ssd, SsdCounters,
};
pub use zoned::{Zone, ZoneDone, ZoneError, ZoneState, ZonedConfig, ZonedSsd, ZonedStats};

/// Errors from loading or validating a device description. One line each.
#[derive(Debug, thiserror::Error)]
pub enum FlashError {
    #[error("invalid device description: {field}: {rule}")]
    Invalid { field: &'static str, rule: String },
    #[error(
        "unknown device preset `{name}`; available presets: {available} (or give a path to a .toml file)"
    )]
    UnknownPreset { name: String, available: String },
    #[error("device description {origin}{}: {message}", line.map(|l| format!(" line {l}")).unwrap_or_default())]
    Toml {
        origin: String,
        message: String,
        line: Option<usize>,
    },
    #[error("cannot read device file {path}: {message}")]
    Io { path: String, message: String },
}
