//! Calibration (`nines sim --calibrate RUN.json`): fit a device description to measured runs of
//! one real device, so that the simulated QD1 and QDn latency distributions match them.
//!
//! What is fitted, in order (docs/arch-sim.md, "Calibration"):
//!
//! 1. **Floor.** When the measured low end (the 0.1th percentile) of a QD1 run is below the
//!    simulated one, every device-side time of the description is scaled down by one factor
//!    ([`DeviceConfig::time_scaled`]): the host model's costs stay, the device's proportions stay.
//! 2. **Firmware jitter** (`[firmware_jitter]`, per direction): a quantile function with a point
//!    wherever the measured one bends ([`measured_grid`]), fitted by quantile matching: each
//!    round simulates the QD1 runs and moves every point by the measured minus the simulated
//!    latency at its quantile (kept non-negative and non-decreasing). With a deterministic model
//!    underneath, one round is exact; the rounds absorb the spread of the model's own variance
//!    sources, and the best round is kept.
//! 3. **Serial controller time** (`controller.command_ns`), from the deepest run: bisection until
//!    the simulated mean latency at that depth is the measured one. It is capped at the QD1
//!    run's floor less the host's costs: at QD1 a command arrives only after the previous one
//!    completed, so a longer serial time would make the fastest QD1 commands queue. A device
//!    slower per command at depth than that (zram under io_uring on a busy host, where the host's
//!    CPUs are the bottleneck) keeps the cap, and the fit says so. The jitter is fitted again
//!    after it.
//!
//! Every simulation is a short run of the measured workload (same direction mix, block size,
//! depth, rate, think time and distribution) on one device, with the given host model.

use nines_core::op::Op;
use nines_core::report::Report;
use nines_core::stats::DirRecorder;
use nines_core::workload::WorkloadSpec;
use nines_flash::{DeviceConfig, Precondition};

use crate::{HostConfig, SimConfig, SimError, prepare, run};

/// The percentiles a fit is judged at (the p50..p99.99).
pub const FIT_PERCENTILES: [f64; 5] = [50.0, 90.0, 99.0, 99.9, 99.99];

/// The quantile that stands for a run's floor (its minimum is one sample and often an outlier).
const FLOOR_QUANTILE: f64 = 0.001;

/// Jitter rounds stop once every fit percentile of every QD1 run is within this share.
const JITTER_TOLERANCE: f64 = 0.01;

/// Bisection steps for `command_ns` (each halves the interval: 2^-12 of the cap).
const COMMAND_NS_STEPS: u32 = 12;

/// The fewest I/Os of a measured direction: the fit is judged up to p99.99, which needs 10,000
/// samples to hold one.
pub const MEASURED_IOS_MIN: u64 = 10_000;

/// One measured run of one device: its workload and the latency recorder of each direction
/// that did I/O.
#[derive(Clone, Debug)]
pub struct Measured {
    /// Where it came from (a file name), for the fit table.
    pub label: String,
    pub workload: WorkloadSpec,
    /// Indexed by [`Op::index`]; `None` for a direction without I/O.
    pub dirs: [Option<DirRecorder>; 2],
    /// The measured device's size.
    pub size_bytes: u64,
}

impl Measured {
    /// From a report (`nines profile --json`, or `nines sim --json`) of one target and one job,
    /// whose directions carry their histograms (`recorder`).
    pub fn from_report(label: &str, report: &Report) -> Result<Measured, CalibrateError> {
        let bad = |why: String| CalibrateError::Input(format!("{label}: {why}"));
        if report.devices.len() != 1 {
            return Err(bad(format!(
                "a calibration run is a run of one device; this one has {} targets (profile \
                 the device on its own)",
                report.devices.len()
            )));
        }
        if report.jobs.len() > 1 {
            return Err(bad(format!(
                "a calibration run has one job; this one has {}",
                report.jobs.len()
            )));
        }
        // A replay's requests, sizes and arrival times are the trace's: the fit simulates the
        // run's workload, which a replay does not have (its JSON's workload only summarises it).
        if let Some(t) = report.config.extra.get("trace") {
            return Err(bad(format!(
                "it is a replay of {} ({}), which calibration cannot fit: it simulates the \
                 measured workload; profile the device with a generated workload (e.g. \
                 --rw randread --iodepth 1 --runtime 30s)",
                t["file"].as_str().unwrap_or("a trace"),
                t["format"].as_str().unwrap_or("unknown format")
            )));
        }
        if report.aggregate.read.ios > 0 && report.aggregate.write.ios > 0 {
            return Err(bad(format!(
                "it mixes reads and writes ({} and {}), which calibration cannot fit: each \
                 direction's latencies are fitted from a run of that direction alone; profile \
                 --rw randread and --rw randwrite as separate runs",
                report.aggregate.read.ios, report.aggregate.write.ios
            )));
        }
        let mut dirs = [None, None];
        for op in [Op::Read, Op::Write] {
            let stats = match op {
                Op::Read => &report.aggregate.read,
                Op::Write => &report.aggregate.write,
            };
            if stats.ios == 0 {
                continue;
            }
            if stats.ios < MEASURED_IOS_MIN {
                return Err(bad(format!(
                    "it has {} {}s, too few to fit: the fit is judged up to p99.99, which needs \
                     at least {MEASURED_IOS_MIN}; profile longer (--runtime or --ios)",
                    stats.ios,
                    op.name()
                )));
            }
            let Some(saved) = &stats.recorder else {
                return Err(bad(format!(
                    "its {} latencies have no histogram (`recorder`); profile again with this \
                     version of nines",
                    op.name()
                )));
            };
            let rec = saved
                .restore()
                .map_err(|e| bad(format!("its {} histogram: {e}", op.name())))?;
            dirs[op.index()] = Some(rec);
        }
        if dirs.iter().all(Option::is_none) {
            return Err(bad("it did no I/O".into()));
        }
        Ok(Measured {
            label: label.to_string(),
            workload: report.config.workload.clone(),
            dirs,
            size_bytes: report.devices[0].size_bytes,
        })
    }

    fn dir(&self, op: Op) -> Option<&DirRecorder> {
        self.dirs[op.index()].as_ref()
    }

    /// The direction a depth fit matches: reads when the run has them.
    fn primary(&self) -> Op {
        if self.dirs[Op::Read.index()].is_some() {
            Op::Read
        } else {
            Op::Write
        }
    }
}

/// How the calibration simulates.
#[derive(Clone, Debug)]
pub struct CalibrateOptions {
    /// The host model the measured runs are matched with (its costs are not fitted).
    pub host: HostConfig,
    /// None: as `nines sim` (fill for reads, steady state when the workload writes).
    pub precondition: Option<Precondition>,
    /// Simulated I/Os per run and round (p99.99 needs 10,000; the default 1,000,000 keeps 100
    /// samples above it, so a steep measured tail is matched, not the simulation's own noise).
    pub ios: u64,
    /// Most jitter rounds per fit.
    pub rounds: u32,
    pub seed: u64,
    /// Memory for the one simulated device's model (the scale follows, as in `nines sim`).
    pub memory_budget_bytes: u64,
}

impl Default for CalibrateOptions {
    fn default() -> Self {
        CalibrateOptions {
            host: HostConfig::default(),
            precondition: None,
            ios: 1_000_000,
            rounds: 12,
            seed: 1,
            memory_budget_bytes: 64 << 20,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error("{0}")]
    Input(String),
    #[error(
        "{label}: its {op} latencies start at {measured_ns} ns (0.1th percentile), at or below the \
         host model's own cost of {host_ns} ns per I/O: give --completion none (the device only) \
         or smaller --submit-cost/--complete-cost"
    )]
    Floor {
        label: String,
        op: &'static str,
        measured_ns: u64,
        host_ns: u64,
    },
}

/// A measured against a simulated latency at one percentile.
#[derive(Clone, Debug, PartialEq)]
pub struct PercentileFit {
    pub percentile: f64,
    pub measured_ns: u64,
    pub simulated_ns: u64,
}

impl PercentileFit {
    /// simulated / measured − 1 (0.05: the simulation is 5% slower).
    pub fn error(&self) -> f64 {
        self.simulated_ns as f64 / self.measured_ns.max(1) as f64 - 1.0
    }
}

/// How one direction of one measured run is reproduced by the calibrated description.
#[derive(Clone, Debug)]
pub struct RunFit {
    pub label: String,
    pub op: Op,
    pub iodepth: u32,
    pub measured_mean_ns: f64,
    pub simulated_mean_ns: f64,
    pub percentiles: Vec<PercentileFit>,
}

impl RunFit {
    /// The largest absolute error over [`FIT_PERCENTILES`].
    pub fn worst_error(&self) -> f64 {
        self.percentiles
            .iter()
            .map(|p| p.error().abs())
            .fold(0.0, f64::max)
    }

    pub fn mean_error(&self) -> f64 {
        self.simulated_mean_ns / self.measured_mean_ns.max(1.0) - 1.0
    }
}

/// The fitted description and how well it reproduces each measured run.
#[derive(Clone, Debug)]
pub struct Calibration {
    pub device: DeviceConfig,
    /// The factor applied to every device-side time of the base description (1: none).
    pub time_scale: f64,
    /// The fitted serial controller time, when a deeper run was given.
    pub command_ns: Option<u64>,
    /// The depth fit stopped at its cap (the QD1 floor less the host's costs): the device is
    /// slower per command at depth than that, which a serial controller cannot reproduce.
    pub command_ns_capped: bool,
    pub fits: Vec<RunFit>,
    /// Simulations run.
    pub simulations: u32,
}

/// The latency at quantile `q` in [0, 1] of a recorder: the exact min and max at the ends,
/// the histogram (0.1% resolution) between, clamped to them.
pub fn quantile_ns(r: &DirRecorder, q: f64) -> u64 {
    if r.ios == 0 {
        return 0;
    }
    if q <= 0.0 {
        return r.latency_ns_min;
    }
    if q >= 1.0 {
        return r.latency_ns_max;
    }
    r.hist
        .value_at_quantile(q)
        .clamp(r.latency_ns_min, r.latency_ns_max)
}

fn mean_ns(r: &DirRecorder) -> f64 {
    r.latency_ns_sum as f64 / r.ios.max(1) as f64
}

struct Sim<'a> {
    opts: &'a CalibrateOptions,
    simulations: u32,
}

impl Sim<'_> {
    /// Run `m`'s workload on one `device`; the recorder of each direction.
    fn run(
        &mut self,
        device: &DeviceConfig,
        m: &Measured,
    ) -> Result<[DirRecorder; 2], CalibrateError> {
        let mut w = m.workload.clone();
        w.runtime_ns = None;
        w.ios_max = Some(self.opts.ios);
        w.ramp_ns = 0;
        w.region_offset_bytes = 0;
        w.region_size_bytes = None;
        w.seed = self.opts.seed;
        let writes = w.writes();
        let mut cfg = SimConfig::new(device.clone(), 1, w);
        cfg.host = self.opts.host.clone();
        cfg.precondition = self.opts.precondition;
        cfg.memory_budget_bytes = self.opts.memory_budget_bytes;
        let mut prep = prepare(&cfg, writes)?;
        let out = run(&mut prep, None)?;
        self.simulations += 1;
        let rec = out
            .recorders
            .into_iter()
            .next()
            .ok_or_else(|| SimError::Config("the simulation had no target".into()))?;
        Ok(rec.dirs)
    }
}

/// The run each direction's QD1 fit uses: the shallowest run with that direction.
fn shallowest(runs: &[Measured], op: Op) -> Option<usize> {
    (0..runs.len())
        .filter(|&i| runs[i].dir(op).is_some())
        .min_by_key(|&i| runs[i].workload.iodepth)
}

/// Fit the description `base` to `runs` (see the module documentation).
pub fn calibrate(
    base: &DeviceConfig,
    runs: &[Measured],
    opts: &CalibrateOptions,
) -> Result<Calibration, CalibrateError> {
    if runs.is_empty() {
        return Err(CalibrateError::Input(
            "no measured run to calibrate from".into(),
        ));
    }
    if opts.ios == 0 {
        return Err(CalibrateError::Input(
            "simulated I/Os per round must be positive".into(),
        ));
    }
    let mut sim = Sim {
        opts,
        simulations: 0,
    };
    let qd1: Vec<(Op, usize)> = [Op::Read, Op::Write]
        .into_iter()
        .filter_map(|op| shallowest(runs, op).map(|i| (op, i)))
        .collect();
    let mut dev = starting_description(base, runs, &qd1);

    // 1. The floor.
    let host_ns = opts.host.submit_ns + opts.host.complete_ns;
    let time_scale = fit_floor(&mut sim, &dev, runs, &qd1, host_ns)?;
    assert!(
        time_scale > 0.0 && time_scale <= 1.0,
        "the floor only scales times down"
    );
    if time_scale < 1.0 {
        dev = dev.time_scaled(time_scale);
    }

    // 2. The jitter at QD1.
    fit_jitter(&mut sim, &mut dev, runs, &qd1, opts.rounds)?;

    // 3. The serial controller time, from the deepest run beyond QD1.
    let (command_ns, command_ns_capped) = fit_command(&mut sim, &mut dev, runs, &qd1, host_ns)?;
    dev.validate().map_err(SimError::from)?;

    // 4. How well every run is reproduced.
    let fits = run_fits(&mut sim, &dev, runs)?;
    Ok(Calibration {
        device: dev,
        time_scale,
        command_ns,
        command_ns_capped,
        fits,
        simulations: sim.simulations,
    })
}

/// The description fitting starts from: `base` without firmware jitter in the fitted
/// directions, named and described as fitted to `runs`, with their capacity when its geometry
/// holds it.
fn starting_description(
    base: &DeviceConfig,
    runs: &[Measured],
    qd1: &[(Op, usize)],
) -> DeviceConfig {
    let mut dev = base.clone();
    for &(op, _) in qd1 {
        *jitter_mut(&mut dev, op) = Vec::new();
    }
    dev.name = format!("{}-calibrated", base.name);
    // The description and capacity are the measured device's, not the base preset's: the
    // capacity when the base geometry holds it (else the geometry's own, and the description
    // says so).
    let size_bytes = runs[0].size_bytes;
    let labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
    // The geometry scaled to the measured capacity (fewer blocks per plane, the base's dies and
    // pages, so its parallelism and timings stay): a 1 GiB device on a 960 GB geometry would
    // otherwise be 99.9% spare and never collect garbage.
    let factor = size_bytes as f64 / base.logical_bytes().max(1) as f64;
    if size_bytes > 0
        && factor < 1.0
        && let Ok(scaled) = dev.scaled(factor)
    {
        dev = scaled;
    }
    let mut held = dev.clone();
    held.capacity_bytes = Some(size_bytes);
    let capacity = if size_bytes > 0
        && runs.iter().all(|r| r.size_bytes == size_bytes)
        && held.validate().is_ok()
    {
        dev.capacity_bytes = Some(size_bytes);
        let op = dev.effective_over_provisioning();
        let base_op = base.effective_over_provisioning();
        let note = if op > base_op + 0.05 {
            format!(
                "; the base geometry at its smallest ({} blocks per plane) holds more than the \
                 device, so over-provisioning is {:.1}% where the base's is {:.1}%",
                dev.geometry.blocks_per_plane,
                op * 100.0,
                base_op * 100.0
            )
        } else {
            String::new()
        };
        format!(
            "{size_bytes} bytes as measured, the geometry scaled to {} blocks per plane{note}",
            dev.geometry.blocks_per_plane
        )
    } else {
        dev.capacity_bytes = None;
        format!(
            "the base geometry's capacity (the measured {size_bytes} bytes do not fit it, or the runs differ)"
        )
    };
    dev.description = format!(
        "fitted by nines sim --calibrate to {} from --device {}: timings and geometry are the \
         base's, latencies fitted; capacity {capacity}",
        labels.join(", "),
        base.name
    );
    dev
}

/// Step 1, the floor: the factor (at most 1) that brings the simulated QD1 floor of each
/// direction down to the measured one, host costs `host_ns` aside.
fn fit_floor(
    sim: &mut Sim,
    dev: &DeviceConfig,
    runs: &[Measured],
    qd1: &[(Op, usize)],
    host_ns: u64,
) -> Result<f64, CalibrateError> {
    let mut time_scale: f64 = 1.0;
    let sims = simulate_qd1(sim, dev, runs, qd1)?;
    for (k, &(op, i)) in qd1.iter().enumerate() {
        let measured = quantile_ns(runs[i].dir(op).expect("chosen for it"), FLOOR_QUANTILE);
        let simulated = quantile_ns(&sims[k], FLOOR_QUANTILE);
        if measured >= simulated {
            continue;
        }
        if measured <= host_ns || simulated <= host_ns {
            return Err(CalibrateError::Floor {
                label: runs[i].label.clone(),
                op: op.name(),
                measured_ns: measured,
                host_ns,
            });
        }
        time_scale = time_scale.min((measured - host_ns) as f64 / (simulated - host_ns) as f64);
    }
    Ok(time_scale)
}

/// Step 3, the serial controller time: bisected so that the deepest run's mean matches, capped
/// at the QD1 floor less the host's costs; the jitter refitted after. Returns the time (None
/// without a run deeper than QD1) and whether it stopped at the cap.
fn fit_command(
    sim: &mut Sim,
    dev: &mut DeviceConfig,
    runs: &[Measured],
    qd1: &[(Op, usize)],
    host_ns: u64,
) -> Result<(Option<u64>, bool), CalibrateError> {
    let Some(d) = (0..runs.len()).max_by_key(|&i| runs[i].workload.iodepth) else {
        return Ok((None, false));
    };
    let op = runs[d].primary();
    let shallow = qd1.iter().find(|(o, _)| *o == op).map(|&(_, i)| i);
    let Some(s) = shallow.filter(|&s| runs[d].workload.iodepth > runs[s].workload.iodepth) else {
        return Ok((None, false));
    };
    let target = mean_ns(runs[d].dir(op).expect("its primary direction"));
    // A command at QD1 arrives only after the previous one completed: its serial time
    // cannot exceed the fastest commands' device time, or QD1 would queue.
    let cap = quantile_ns(runs[s].dir(op).expect("chosen for it"), FLOOR_QUANTILE)
        .saturating_sub(host_ns);
    let at = |c: u64, sim: &mut Sim| -> Result<f64, CalibrateError> {
        let mut t = dev.clone();
        t.controller.command_ns = c;
        Ok(mean_ns(&sim.run(&t, &runs[d])?[op.index()]))
    };
    let mut capped = false;
    let c = if at(0, sim)? >= target {
        0
    } else if at(cap, sim)? <= target {
        capped = true;
        cap
    } else {
        let (mut lo, mut hi) = (0u64, cap);
        for _ in 0..COMMAND_NS_STEPS {
            if hi - lo <= 1 {
                break;
            }
            let mid = lo + (hi - lo) / 2;
            if at(mid, sim)? < target {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        (lo + hi) / 2
    };
    assert!(c <= cap, "the serial time stays under the QD1 floor");
    dev.controller.command_ns = c;
    fit_jitter(sim, dev, runs, qd1, sim.opts.rounds.div_ceil(2))?;
    Ok((Some(c), capped))
}

/// Step 4: each run and direction, measured against the fitted description simulated.
fn run_fits(
    sim: &mut Sim,
    dev: &DeviceConfig,
    runs: &[Measured],
) -> Result<Vec<RunFit>, CalibrateError> {
    let mut fits = Vec::new();
    for m in runs {
        let got = sim.run(dev, m)?;
        for op in [Op::Read, Op::Write] {
            let Some(r) = m.dir(op) else { continue };
            let s = &got[op.index()];
            fits.push(RunFit {
                label: m.label.clone(),
                op,
                iodepth: m.workload.iodepth,
                measured_mean_ns: mean_ns(r),
                simulated_mean_ns: mean_ns(s),
                percentiles: FIT_PERCENTILES
                    .iter()
                    .map(|&p| PercentileFit {
                        percentile: p,
                        measured_ns: quantile_ns(r, p / 100.0),
                        simulated_ns: quantile_ns(s, p / 100.0),
                    })
                    .collect(),
            });
        }
    }
    Ok(fits)
}

fn jitter_mut(dev: &mut DeviceConfig, op: Op) -> &mut Vec<(f64, u64)> {
    match op {
        Op::Read => &mut dev.firmware_jitter.read,
        Op::Write => &mut dev.firmware_jitter.write,
    }
}

/// Simulate each QD1 run once (a run that is the QD1 run of both directions, once); the
/// recorder of each entry of `qd1`.
fn simulate_qd1(
    sim: &mut Sim,
    dev: &DeviceConfig,
    runs: &[Measured],
    qd1: &[(Op, usize)],
) -> Result<Vec<DirRecorder>, CalibrateError> {
    let mut done: Vec<(usize, [DirRecorder; 2])> = Vec::new();
    let mut out = Vec::with_capacity(qd1.len());
    for &(op, i) in qd1 {
        if !done.iter().any(|(j, _)| *j == i) {
            let r = sim.run(dev, &runs[i])?;
            done.push((i, r));
        }
        let (_, r) = done.iter().find(|(j, _)| *j == i).expect("just run");
        out.push(r[op.index()].clone());
    }
    Ok(out)
}

/// The worst absolute error over [`FIT_PERCENTILES`] of the QD1 runs.
fn worst_qd1_error(runs: &[Measured], qd1: &[(Op, usize)], sims: &[DirRecorder]) -> f64 {
    qd1.iter()
        .zip(sims)
        .flat_map(|(&(op, i), s)| {
            let r = runs[i].dir(op).expect("chosen for it");
            FIT_PERCENTILES.iter().map(move |&p| {
                let m = quantile_ns(r, p / 100.0).max(1) as f64;
                (quantile_ns(s, p / 100.0) as f64 / m - 1.0).abs()
            })
        })
        .fold(0.0, f64::max)
}

/// Quantile matching of the firmware jitter of each QD1 direction (see the module
/// documentation) on the measured run's own grid ([`measured_grid`]); at most `rounds`
/// updates, fewer once every fit percentile is within [`JITTER_TOLERANCE`]. The best jitter
/// seen is kept (in a tail that jumps, a round can overshoot).
fn fit_jitter(
    sim: &mut Sim,
    dev: &mut DeviceConfig,
    runs: &[Measured],
    qd1: &[(Op, usize)],
    rounds: u32,
) -> Result<(), CalibrateError> {
    let grids: Vec<Vec<f64>> = qd1
        .iter()
        .map(|&(op, i)| fit_grid(runs[i].dir(op).expect("chosen for it")))
        .collect();
    let n_sim = sim.opts.ios.max(1) as f64;
    let mut best: Option<(f64, DeviceConfig)> = None;
    for round in 0..=rounds {
        let sims = simulate_qd1(sim, dev, runs, qd1)?;
        let worst = worst_qd1_error(runs, qd1, &sims);
        if best.as_ref().is_none_or(|(w, _)| worst < *w) {
            best = Some((worst, dev.clone()));
        }
        if worst <= JITTER_TOLERANCE || round == rounds {
            break;
        }
        for ((&(op, i), s), grid) in qd1.iter().zip(&sims).zip(&grids) {
            let r = runs[i].dir(op).expect("chosen for it");
            let old = jitter_mut(dev, op).clone();
            let mut points = Vec::with_capacity(grid.len());
            let mut floor = 0i64;
            for (k, &q) in grid.iter().enumerate() {
                let was = old.get(k).map_or(0, |p| p.1) as i64;
                // Below the floor quantile both ends are single samples (a simulated read that
                // hits the write buffer's open page costs a DRAM access only): matching them
                // would lift the whole body by the difference.
                let at = q.max(FLOOR_QUANTILE);
                let step = quantile_ns(r, at) as i64 - quantile_ns(s, at) as i64;
                // The first round is exact for a deterministic model; later ones correct a
                // simulated tail whose random draws fall a little above or below each
                // quantile, where a steep measured tail turns that into large errors: half
                // steps, which converge there instead of oscillating.
                let step = if round == 0 { step } else { step / 2 };
                // Near a fit percentile, the simulated value there comes from the jitter at
                // the rank its own draws put at that percentile, which is off by the sampling
                // noise of a quantile (sd sqrt(p(1-p)/n) in rank: 1e-5 at p99.99 of 1,000,000):
                // in a cliff, correcting each point by its own error moves the simulated
                // percentile a few percent a round. Every point within 4 sd of a percentile
                // that is off moves by that percentile's whole error instead.
                let step = FIT_PERCENTILES
                    .iter()
                    .map(|p| p / 100.0)
                    .find(|&p| (q - p).abs() <= 4.0 * (p * (1.0 - p) / n_sim).sqrt())
                    .map_or(step, |p| {
                        let m = quantile_ns(r, p) as i64;
                        let e = m - quantile_ns(s, p) as i64;
                        if e.abs() as f64 > JITTER_TOLERANCE * m.max(1) as f64 {
                            e
                        } else {
                            step
                        }
                    });
                let v = (was + step).max(floor).max(0);
                floor = v;
                points.push((q, v as u64));
            }
            *jitter_mut(dev, op) = points;
        }
    }
    if let Some((_, d)) = best {
        *dev = d;
    }
    Ok(())
}

/// The quantiles at which a fitted jitter has a point, from the measured distribution itself:
/// the middle of every histogram bucket in quantile, thinned to the points a straight line
/// cannot stand in for (within [`GRID_TOLERANCE`] of the value), plus 0 and 1. A measured tail
/// often jumps by orders of magnitude within a few parts in 10,000 of quantile; a fixed grid
/// would draw a line across the jump and put the simulated p99.9 far up it.
pub fn measured_grid(r: &DirRecorder) -> Vec<f64> {
    let n = r.hist.len().max(1) as f64;
    let mut pts: Vec<(f64, f64)> = vec![(0.0, r.latency_ns_min as f64)];
    let mut below = 0u64;
    for v in r.hist.iter_recorded() {
        let c = v.count_since_last_iteration();
        let q = (below as f64 + c as f64 / 2.0) / n;
        below += c;
        let value = r
            .hist
            .highest_equivalent(v.value_iterated_to())
            .clamp(r.latency_ns_min, r.latency_ns_max) as f64;
        if q > pts[pts.len() - 1].0 && q < 1.0 {
            pts.push((q, value));
        }
    }
    pts.push((1.0, r.latency_ns_max as f64));
    // Greedy thinning: from each kept point, the farthest next point such that the line to it
    // passes every point between within the tolerance.
    let mut keep = vec![0usize];
    let mut a = 0;
    while a < pts.len() - 1 {
        let mut b = a + 1;
        while b + 1 < pts.len() && line_holds(&pts, a, b + 1) {
            b += 1;
        }
        keep.push(b);
        a = b;
    }
    keep.into_iter().map(|k| pts[k].0).collect()
}

/// [`measured_grid`] with every fit percentile as a point of its own, so each round corrects
/// the jitter exactly where the fit is judged. In a tail that is a cliff (host noise: p99.9 at
/// 10 us, p99.99 at 280 us), the nearest grid points lie on either side of the cliff and the
/// line between them put the simulated p99.99 35% off however many rounds ran.
fn fit_grid(r: &DirRecorder) -> Vec<f64> {
    let mut grid = measured_grid(r);
    grid.extend(FIT_PERCENTILES.iter().map(|p| p / 100.0));
    grid.sort_by(f64::total_cmp);
    grid.dedup();
    grid
}

/// Relative value error a thinned grid allows between its points.
const GRID_TOLERANCE: f64 = 0.005;

fn line_holds(pts: &[(f64, f64)], a: usize, b: usize) -> bool {
    let ((qa, va), (qb, vb)) = (pts[a], pts[b]);
    pts[a + 1..b].iter().all(|&(q, v)| {
        let line = va + (vb - va) * (q - qa) / (qb - qa);
        (line - v).abs() <= GRID_TOLERANCE * v.max(1.0)
    })
}
