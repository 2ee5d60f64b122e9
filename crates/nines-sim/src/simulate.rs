//! A simulation as a library call (issue 32): [`simulate`] takes a run ([`RunSpec`], shared with
//! the real driver) and what only a simulation has ([`SimSpec`]: the device model, how many,
//! scale, preconditioning, the host model) and returns the report `nines sim` prints. It
//! prints nothing: progress and the stop request go through a [`SimHandle`] another thread may
//! read and set, notes (a trace moved to fit, targets left idle) through a callback.
//!
//! ```
//! use nines_core::workload::WorkloadSpec;
//! use nines_sim::{RunSpec, SimHandle, SimSpec, simulate};
//!
//! // 8 simulated afa-m2-2018 SSDs, 4 KiB random reads at QD1, 5000 I/Os each.
//! let workload = WorkloadSpec { ios_max: Some(5000), runtime_ns: None, ..Default::default() };
//! let sim = SimSpec::preset("afa-m2-2018", 8).unwrap();
//! let done = simulate(RunSpec::new(workload), &sim, Default::default(), &SimHandle::default(),
//!     &mut |_| {}).unwrap();
//! let read = &done.report.aggregate.read;
//! let p9999_ns = read.lat_ns.percentiles.get("99.99").unwrap();
//! println!("p99.99 over 8 devices: {p9999_ns} ns");
//! assert!(p9999_ns > 0 && p9999_ns <= read.lat_ns.max_ns);
//! assert_eq!(done.report.devices.len(), 8);
//! assert_eq!(read.ios, 8 * 5000);
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use nines_core::report::Report;
use nines_core::stats::DeviceRecorder;
use nines_flash::{DeviceConfig, FlashError, Precondition};
pub use nines_spec::{LogNames, RunSpec, TraceSpec};
use nines_trace::TraceError;
use serde_json::Value;

use crate::config::{MEMORY_BUDGET_BYTES, SimConfig, SimError};
use crate::event_loop::{RunStats, SimProgress, run_logged};
use crate::host::HostConfig;
use crate::sinks::Logs;

/// What only a simulation has: the devices it models and the host it models them on.
#[derive(Clone, Debug)]
pub struct SimSpec {
    /// The full-scale description (a preset or a user's file).
    pub device: DeviceConfig,
    /// How the report names it (a preset name or a path, `--ideal` when cleaned).
    pub device_label: String,
    /// `Some(size)`: zero-latency members of that size instead of the model.
    pub null_device_bytes: Option<u64>,
    pub devices: u32,
    /// Blocks-per-plane scale in (0, 1]; None: the largest that fits the memory budget.
    pub scale: Option<f64>,
    /// None: steady state when the run writes, a sequential fill otherwise.
    pub precondition: Option<Precondition>,
    pub host: HostConfig,
    pub memory_budget_bytes: u64,
    /// A replay finds every device asleep in its deepest power state (`--trace-start asleep`).
    pub start_asleep: bool,
}

impl SimSpec {
    /// `devices` of a preset (or a TOML file), with every other setting at its default.
    pub fn preset(device: &str, devices: u32) -> Result<SimSpec, FlashError> {
        let device = DeviceConfig::load(device)?;
        Ok(SimSpec {
            device_label: device.name.clone(),
            device,
            null_device_bytes: None,
            devices,
            scale: None,
            precondition: None,
            host: HostConfig::default(),
            memory_budget_bytes: MEMORY_BUDGET_BYTES,
            start_asleep: false,
        })
    }

    /// The model's name ("null" for zero-latency devices).
    pub fn device_name(&self) -> &str {
        match self.null_device_bytes {
            Some(_) => "null",
            None => &self.device.name,
        }
    }

    /// The simulator's configuration for `run` on these devices.
    pub fn config(&self, run: &RunSpec) -> SimConfig {
        SimConfig {
            device: self.device.clone(),
            device_label: self.device_label.clone(),
            null_device_bytes: self.null_device_bytes,
            devices: self.devices,
            layout: run.layout.clone(),
            scale: self.scale,
            precondition: self.precondition,
            host: self.host.clone(),
            workload: run.workload().clone(),
            jobs: run.jobs.clone(),
            percentiles: run.percentiles.clone(),
            memory_budget_bytes: self.memory_budget_bytes,
            trace_depth: run
                .trace
                .as_ref()
                .map_or(crate::TRACE_DEPTH_DEFAULT, |t| t.depth),
            fold_completions: true,
        }
    }
}

/// Progress of a [`simulate`] call and its stop request, shared with another thread.
#[derive(Debug, Default)]
pub struct SimHandle {
    /// Virtual time, events and I/Os of the run (zero while preconditioning); its `stop` flag
    /// ends the run early, as [`SimHandle::stop`] does.
    pub progress: SimProgress,
    running: AtomicBool,
}

impl SimHandle {
    /// Asks the simulation to stop: during preconditioning, nothing is simulated
    /// ([`SimulateError::Interrupted`]); during the run, it stops issuing and reports what was
    /// simulated.
    pub fn stop(&self) {
        self.progress.stop.store(true, Ordering::Relaxed);
    }

    /// Whether preconditioning is over and the run itself is being simulated.
    pub fn running(&self) -> bool {
        self.running.load(Ordering::Relaxed)
    }
}

/// A finished simulation: the report, and what the summary line and the fio exports need.
#[derive(Debug)]
pub struct Simulation {
    pub report: Report,
    /// Each target's recorder (a device, or a volume), merged over jobs, in report order.
    pub recorders: Vec<DeviceRecorder>,
    pub stats: RunStats,
    /// The scale simulated and the blocks per plane it gave.
    pub scale: f64,
    pub blocks_per_plane: u32,
    /// The preconditioning done (`auto` resolved).
    pub precondition: Precondition,
    /// Wall seconds of preconditioning and of the run.
    pub prepare_s: f64,
    pub run_s: f64,
    /// The run was stopped through the handle; the report covers what was simulated.
    pub interrupted: bool,
}

/// Why a simulation did not run to a report.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error(transparent)]
    Sim(#[from] SimError),
    /// The trace does not fit the simulated targets (`--trace-fit error`): the target's size
    /// and the scale simulated, for a message that says how to make it fit.
    #[error("{error}")]
    TraceBeyond {
        error: TraceError,
        target_size_bytes: u64,
        scale: f64,
    },
    #[error("{0}")]
    Trace(TraceError),
    /// Stopped while preconditioning: nothing was simulated.
    #[error("interrupted while preconditioning; nothing was simulated")]
    Interrupted,
}

/// Prepares the devices (scaled, preconditioned), fits a trace to them, runs and reports.
pub fn simulate(
    mut run: RunSpec,
    sim: &SimSpec,
    logs: Logs<'_>,
    handle: &SimHandle,
    note: &mut dyn FnMut(&str),
) -> Result<Simulation, SimulateError> {
    let cfg = sim.config(&run);
    let wall = Instant::now();
    let prep = crate::prepare_until(&cfg, run.writes_data(), &handle.progress.stop)?;
    let prepare_s = wall.elapsed().as_secs_f64();
    let Some(mut prep) = prep.filter(|_| !handle.progress.stop.load(Ordering::Relaxed)) else {
        return Err(SimulateError::Interrupted);
    };
    if let Some(t) = run.trace.as_mut() {
        let size = prep.target_size_bytes();
        let fit = t
            .trace
            .fit(size, prep.targets(), t.fit)
            .map_err(|error| match error {
                TraceError::OutOfRange { .. } => SimulateError::TraceBeyond {
                    error,
                    target_size_bytes: size,
                    scale: prep.scale,
                },
                e => SimulateError::Trace(e),
            })?;
        if fit.out_of_range > 0 {
            note(&format!(
                "{} trace requests ended beyond the {size}-byte target; moved them ({})",
                fit.out_of_range, t.fit
            ));
        }
        if let Some(msg) = idle_targets_warning(t.trace.devices.len() as u32, prep.targets()) {
            note(&format!("warning: {msg}"));
        }
    }
    // Sleeping needs power states: the caller checks the description before preconditioning.
    if sim.start_asleep && !prep.sleep_members() {
        return Err(SimError::Config(format!(
            "--trace-start asleep: --device {} has no power states to sleep in; give a \
             device whose description has [[power.states]], or drop --trace-start",
            sim.device_label
        ))
        .into());
    }
    let wall = Instant::now();
    handle.running.store(true, Ordering::Relaxed);
    let trace = run.trace.as_ref().map(|t| &t.trace);
    let out = run_logged(&mut prep, trace, logs, Some(&handle.progress));
    handle.running.store(false, Ordering::Relaxed);
    let out = out?;
    let run_s = wall.elapsed().as_secs_f64();
    let interrupted = handle.progress.stopped.load(Ordering::Relaxed);
    let mut report = out.report;
    if interrupted {
        report.warnings.push(format!(
            "interrupted after {} simulated: the report covers what was simulated until then",
            nines_core::progress::short_ns(handle.progress.sim_ns.load(Ordering::Relaxed))
        ));
        report
            .config
            .extra
            .insert("interrupted".into(), Value::from(true));
    }
    report.config.lat_log = run.logs.lat_log.clone();
    report.config.hdr_log = run.logs.hdr_log.clone();
    if let (Some(t), Some(Value::Object(extra))) =
        (&run.trace, report.config.extra.get_mut("trace"))
    {
        extra.insert("file".into(), Value::from(t.file.display().to_string()));
        let start = if sim.start_asleep { "asleep" } else { "awake" };
        extra.insert("start".into(), Value::from(start));
        extra.insert("targets".into(), Value::from(prep.targets()));
        let used = (t.trace.devices.len() as u32).min(prep.targets());
        extra.insert("targets_used".into(), Value::from(used));
    }
    Ok(Simulation {
        report,
        recorders: out.recorders,
        stats: out.stats,
        scale: prep.scale,
        blocks_per_plane: prep.scaled.geometry.blocks_per_plane,
        precondition: prep.precondition,
        prepare_s,
        run_s,
        interrupted,
    })
}

/// A trace with fewer devices than the simulation has targets leaves the rest idle: say so,
/// and how to spread it (a raid0 volume stripes one trace device over every member).
pub fn idle_targets_warning(trace_devices: u32, targets: u32) -> Option<String> {
    (trace_devices < targets).then(|| {
        let idle = targets - trace_devices;
        format!(
            "the trace has {trace_devices} device{} and the simulation {targets} targets: \
             {idle} target{} stay{} idle (targets #{trace_devices} to #{}); give --layout raid0 \
             to stripe it over all {targets} devices, or --devices {trace_devices}",
            if trace_devices == 1 { "" } else { "s" },
            if idle == 1 { "" } else { "s" },
            if idle == 1 { "s" } else { "" },
            targets - 1,
        )
    })
}
