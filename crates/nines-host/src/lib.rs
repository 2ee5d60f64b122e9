//! nines-host: `nines doctor` and `nines tune`.
//!
//! Data flow: [`fs::HostFs`] reads /proc and /sys under a root (live "/" or a captured tree) and
//! records what it read; [`host::Host::read`] gathers the facts in one pass; [`doctor::analyze`]
//! turns facts into findings; [`plan::Plan::build`] turns facts into a CPU-device placement;
//! [`apply`] writes a plan's runtime changes after saving the previous values, and reverts them;
//! [`capture`] archives exactly the files that were read; [`irq`] snapshots /proc/interrupts for
//! `nines profile`.

pub mod apply;
pub mod capture;
pub mod doctor;
pub mod fs;
pub mod host;
pub mod irq;
pub mod parse;
pub mod plan;
pub mod testbed;

pub use doctor::{DoctorReport, Finding, Severity, doctor_summary};
pub use irq::{IrqDelta, IrqSnapshot, device_irq_report};
pub use plan::{Plan, PlanError};
