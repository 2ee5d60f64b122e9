//! `nines sim`: run a workload (or replay a trace) on simulated SSDs and arrays and print the
//! same table, and write the same JSON, as `nines profile`.
//!
//! Preconditioning (`--precondition auto`, the default): a workload that writes starts from
//! greedy GC's steady state (the device filled, then randomly overwritten once over), because a
//! fresh device hides GC and write interference; a read-only workload starts from a sequential
//! fill, so that every read touches flash. `none`, `fill` and `steady` force one.

use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use nines_core::units::{parse_duration_ns, parse_size_bytes};
use nines_flash::{DeviceConfig, Precondition};
use nines_sim::apst::ApstPolicy;
use nines_sim::{
    Background, CompletionMode, HostConfig, LogNames, Logs, RunSpec, ServiceDist, SimError,
    SimHandle, SimSpec, SimulateError, TraceSpec, simulate,
};
use nines_trace::TraceError;

use super::workload_args::{JobArgs, TraceArgs, VolumeArgs, WorkloadArgs};
use nines_core::jobfile::JobFile;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Device model: a preset (afa-m2-2018, intel-750, z-ssd, mqsim-default, mqsim-compatible,
    /// ttflash-fast17, p4600, femu-ioda, client-nvme, zn540 (zoned: --layout serial); NAME-ideal:
    /// its clean model; see --list-devices), a TOML file, or null:SIZE (zero-latency devices of SIZE, e.g. null:1g: the loop and the
    /// policies without any model).
    #[arg(help_heading = "Simulated devices")]
    #[arg(long, default_value = "afa-m2-2018")]
    pub device: String,
    /// Number of simulated devices (1 to 1000; with a job file, default one per file of its
    /// filename=).
    #[arg(help_heading = "Simulated devices")]
    #[arg(long, default_value_t = 1)]
    pub devices: u32,
    #[command(flatten)]
    pub volume: VolumeArgs,
    #[command(flatten)]
    pub jobs: JobArgs,
    /// Blocks-per-plane scale in (0, 1], or auto (the largest that keeps each device's model
    /// under 32 MiB and all of them under --memory-budget).
    #[arg(help_heading = "Simulated devices")]
    #[arg(long, default_value = "auto")]
    pub scale: String,
    /// auto (steady when the workload writes, fill when it only reads), none, fill or steady
    /// (fill, one capacity of random overwrites, GC settled).
    #[arg(help_heading = "Simulated devices")]
    #[arg(long, default_value = "auto")]
    pub precondition: String,
    /// How completions reach the host: interrupt, polled or none (no host costs)
    /// [default: the mode a calibrated --device was fitted with, else interrupt].
    #[arg(help_heading = "Simulated host")]
    #[arg(long, value_parser = parse_completion)]
    pub completion: Option<CompletionMode>,
    /// Host CPUs the I/O workers share [default: one per worker].
    #[arg(help_heading = "Simulated host")]
    #[arg(long)]
    pub host_cpus: Option<u32>,
    /// CPU time to submit one I/O [default: 1.5us].
    #[arg(help_heading = "Simulated host")]
    #[arg(long, value_parser = parse_duration)]
    pub submit_cost: Option<u64>,
    /// CPU time to complete one I/O [default: 2.5us interrupt, 1.4us polled].
    #[arg(help_heading = "Simulated host")]
    #[arg(long, value_parser = parse_duration)]
    pub complete_cost: Option<u64>,
    /// The host's APST policy, which programs a device's power-state descriptors (a preset or
    /// file with [[power.descriptors]], e.g. client-nvme): linux (today's kernels' rules), legacy
    /// (each state after 50 x (entry + exit latency): kernels before 2021), off (servers), host
    /// (this machine's nvme_core parameters), RUN.json (the policy of the host a `nines profile`
    /// report was taken on), or NAME=VALUE,... with nvme_core's parameter names over linux's
    /// [default: linux].
    #[arg(help_heading = "Simulated host")]
    #[arg(long, value_name = "POLICY")]
    pub apst: Option<String>,
    /// Background tasks per second on every host CPU (Poisson), delaying I/O workers.
    #[arg(help_heading = "Simulated host")]
    #[arg(long)]
    pub bg_rate: Option<f64>,
    /// Mean service time of a background task.
    #[arg(help_heading = "Simulated host")]
    #[arg(long, default_value = "100us", value_parser = parse_duration)]
    pub bg_service: u64,
    /// Service-time distribution of background tasks: fixed or exponential.
    #[arg(help_heading = "Simulated host")]
    #[arg(long, default_value = "exponential", value_parser = parse_service)]
    pub bg_dist: ServiceDist,
    /// Memory for all device models together [default: 8g, or less where the host has less: half
    /// its memory, or what is available]; refused above the memory available now.
    #[arg(help_heading = "Simulated devices")]
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub memory_budget: Option<u64>,
    #[command(flatten)]
    pub trace: TraceArgs,
    /// How a --trace replay finds the devices: awake (the default) or asleep, in their deepest
    /// idle power state, so the first request pays that state's exit latency (a device with
    /// power states: [[power.descriptors]] under --apst, or [[power.states]]; a real capture
    /// often starts after a long idle).
    #[arg(help_heading = "Trace replay")]
    #[arg(long, requires = "trace", value_name = "awake|asleep", value_parser = ["awake", "asleep"])]
    pub trace_start: Option<String>,
    /// Write the report (nines JSON schema) to this file.
    #[arg(help_heading = "Outputs")]
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write every measured I/O to this per-I/O log (virtual completion time, latency, offset,
    /// device, direction; read it with `nines log` or `nines report`).
    #[arg(help_heading = "Outputs")]
    #[arg(long, value_name = "FILE")]
    pub lat_log: Option<PathBuf>,
    /// Write interval latency histograms (HdrHistogram interval log, one tag per device and
    /// direction) to this file.
    #[arg(help_heading = "Outputs")]
    #[arg(long, value_name = "FILE")]
    pub hdr_log: Option<PathBuf>,
    /// Interval of --hdr-log, in simulated time.
    #[arg(help_heading = "Outputs")]
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub hdr_interval: u64,
    #[command(flatten)]
    pub fio: super::fio_export::FioArgs,
    /// Print nothing but errors and warnings: no table or summary on stdout, no live status or
    /// progress on stderr (which is drawn only on a terminal anyway).
    #[arg(help_heading = "Outputs")]
    #[arg(long, short)]
    pub quiet: bool,
    /// Calibrate instead of simulating: fit --device (the starting description) to this
    /// measured run of one real device (`nines profile --json`); give it again for a deeper run
    /// (e.g. QD1 and QD16). Fits the floor, the firmware jitter and the controller's serial time,
    /// prints the fit error per percentile and writes the description to --calibrate-out.
    #[arg(help_heading = "Calibration (fit a device to your profiles)")]
    #[arg(long, value_name = "RUN.json")]
    pub calibrate: Vec<PathBuf>,
    /// Where --calibrate writes the fitted device TOML (then: --device FILE.toml).
    #[arg(help_heading = "Calibration (fit a device to your profiles)")]
    #[arg(long, value_name = "FILE.toml")]
    pub calibrate_out: Option<PathBuf>,
    /// Simulated I/Os per run and fitting round of --calibrate.
    #[arg(help_heading = "Calibration (fit a device to your profiles)")]
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    pub calibrate_ios: u64,
    /// Give the fitted description a real NVMe device's power states: its device node
    /// (/dev/nvme0n1, /dev/nvme0, /dev/ng0n1; NVMe admin passthrough, as root) or a `nines
    /// profile --json` report of one. Its non-operational states become [[power.states]] as
    /// Linux's APST would program them (replacing --device's; docs/arch-sim.md).
    #[arg(help_heading = "Calibration (fit a device to your profiles)")]
    #[arg(long, requires = "calibrate", value_name = "DEVICE|RUN.json")]
    pub power_states_from: Option<PathBuf>,
    /// Run even when the estimate made up front says the run takes over an hour of wall time or
    /// its --lat-log does not fit on its disk (both are upper bounds).
    #[arg(help_heading = "Simulated devices")]
    #[arg(long)]
    pub allow_long: bool,
    /// Renamed --allow-long (--force only ever means writing over a device's data); refused
    /// with that advice.
    #[arg(long, hide = true)]
    pub force: bool,
    /// Print the shipped device presets (name, capacity, class, the variance sources and GC
    /// mode each turns on, what it models) and exit.
    #[arg(long)]
    pub list_devices: bool,
    /// Simulate --device's clean model: every variance source off (page-type times, firmware
    /// jitter, read retries, power states, housekeeping, mapping cache, volatile cache) and GC
    /// in preempt mode; the same as the preset NAME-ideal.
    #[arg(long)]
    pub ideal: bool,
}

/// Runs estimated to take longer than this in wall time are refused without --allow-long.
const WALL_S_MAX: f64 = 3600.0;

/// The estimate is printed when the run is expected to take at least this long.
const WALL_S_SHOW: f64 = 10.0;

/// Estimates the run (see sim_estimate.rs), says it when it is long, and refuses runs that never
/// end, and (without --allow-long) runs of over an hour or whose --lat-log the disk cannot hold.
fn check_estimate(args: &Args, e: &super::sim_estimate::Estimate) -> Result<()> {
    use super::sim_estimate::{count, wall};
    let (Some(ios), Some(events), Some(wall_s)) = (e.ios, e.events, e.wall_s) else {
        bail!(
            "this run never ends: zero-latency devices (--device null:SIZE) with --completion none \
             take no simulated time, so a --runtime is never reached; give --ios"
        );
    };
    let lat = match (&args.lat_log, e.lat_log_bytes) {
        (Some(path), Some(bytes)) => Some((path, bytes)),
        _ => None,
    };
    let lat_text = lat.map_or(String::new(), |(_, b)| {
        format!("; --lat-log at most {} MiB", b.div_ceil(1 << 20))
    });
    let text = format!(
        "at most {} I/Os ({} events), about {} of wall time{lat_text}",
        count(ios),
        count(events),
        wall(wall_s)
    );
    if wall_s > WALL_S_MAX && !args.allow_long {
        bail!(
            "this run would simulate {text}: more than an hour; give a smaller --ios or --runtime \
             (or fewer devices), or --allow-long to run it anyway"
        );
    }
    if let Some((path, bytes)) = lat {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let regular = std::fs::metadata(path).map_or(true, |m| m.is_file());
        if regular
            && !args.allow_long
            && let Some(free) = nines_io::scratch::free_bytes(&dir)
            && bytes > free
        {
            bail!(
                "--lat-log {}: the log may grow to {} MiB but only {} MiB are free on its disk; \
                 give a smaller --ios or --runtime, another directory, or --allow-long ({text})",
                path.display(),
                bytes.div_ceil(1 << 20),
                free >> 20
            );
        }
    }
    if wall_s >= WALL_S_SHOW || args.allow_long {
        eprintln!("nines sim: estimate: {text}");
    }
    Ok(())
}

fn parse_size(s: &str) -> Result<u64, String> {
    parse_size_bytes(s).map_err(|e| e.to_string())
}
fn parse_duration(s: &str) -> Result<u64, String> {
    parse_duration_ns(s).map_err(|e| e.to_string())
}
fn parse_completion(s: &str) -> Result<CompletionMode, String> {
    s.parse()
}
fn parse_service(s: &str) -> Result<ServiceDist, String> {
    s.parse()
}

/// Runs `work`, and while it runs (when `live`) rewrites one status line on stderr twice a
/// second with `text(wall seconds so far)` (nothing while it gives None); the line is erased
/// when `work` returns. With `stop`, the same thread turns SIGINT/SIGTERM (nines_io::sched's
/// flag) into the simulation's stop request, and the wall clock restarts, with a line at once,
/// when the simulation moves from preconditioning to the run.
fn ticking<T>(
    live: bool,
    stop: Option<&SimHandle>,
    text: impl Fn(f64) -> Option<String> + Sync,
    work: impl FnOnce() -> T,
) -> T {
    use std::sync::atomic::{AtomicBool, Ordering};
    if !live && stop.is_none() {
        return work();
    }
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut shown = false;
            let (mut start, mut running) = (Instant::now(), false);
            // The first line at once, then twice a second.
            let mut last: Option<Instant> = None;
            while !done.load(Ordering::Relaxed) {
                if let Some(h) = stop
                    && h.running() != running
                {
                    (start, running, last) = (Instant::now(), h.running(), None);
                }
                if live
                    && last.is_none_or(|l| l.elapsed().as_millis() >= 500)
                    && let Some(line) = text(start.elapsed().as_secs_f64())
                {
                    last = Some(Instant::now());
                    eprint!("\r\x1b[2Knines sim: {line}");
                    let _ = std::io::stderr().flush();
                    shown = true;
                }
                if let Some(h) = stop
                    && nines_io::sched::interrupted()
                {
                    h.stop();
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            if shown {
                let mut e = std::io::stderr().lock();
                let _ = write!(e, "\r\x1b[2K");
                let _ = e.flush();
            }
        });
        let r = work();
        done.store(true, Ordering::Relaxed);
        r
    })
}

/// A job file's settings that the simulator uses where the command line gave none: one device
/// per file of filename= (unless --devices says otherwise), percentiles and logs. The host is
/// modelled, so ioengine, direct and cpus_allowed are not used (and said so).
fn apply_job_file(args: &mut Args, f: JobFile) {
    let file = args.jobs.jobs.first().cloned().unwrap_or_default();
    if !f.targets.is_empty() && args.devices == 1 {
        args.devices = u32::try_from(f.targets.len()).unwrap_or(u32::MAX);
    }
    let unused: Vec<&str> = [
        (f.engine.is_some(), "ioengine"),
        (f.buffered, "direct=0"),
        (f.cpus.is_some(), "cpus_allowed"),
        (
            f.fio_logs.any(),
            "fio's text logs (write_*_log: `nines profile` writes them)",
        ),
    ]
    .iter()
    .filter(|(set, _)| *set)
    .map(|(_, k)| *k)
    .collect();
    if !unused.is_empty() {
        eprintln!(
            "nines: {file}: the simulator models its host; {} not used",
            unused.join(", ")
        );
    }
    super::workload_args::job_file_outputs(
        &f,
        &mut args.workload.percentiles,
        &mut args.lat_log,
        &mut args.hdr_log,
        &mut args.hdr_interval,
    );
}

/// The most host CPUs the host model simulates (each has its own queue and background state).
const HOST_CPUS_MAX: u32 = 65_536;

/// The smallest --memory-budget that can hold any device model.
const MEMORY_BUDGET_MIN_BYTES: u64 = 1 << 20;

/// --memory-budget is what the device models may allocate: more than the host has available
/// would abort the process on allocation instead of failing with a message, and less than a MiB
/// holds nothing. Without the option: 8 GiB, or less where the host has less (half its memory,
/// or what is available).
fn memory_budget(given: Option<u64>, host: Option<super::hostmem::HostMemory>) -> Result<u64> {
    const DEFAULT_BYTES: u64 = 8 << 30;
    let Some(budget_bytes) = given else {
        return Ok(super::hostmem::default_budget(DEFAULT_BYTES, host).max(MEMORY_BUDGET_MIN_BYTES));
    };
    if budget_bytes < MEMORY_BUDGET_MIN_BYTES {
        bail!(
            "--memory-budget {budget_bytes} bytes: too small for any device model; give at least 1m (the default is 8g)"
        );
    }
    super::hostmem::check_budget("--memory-budget", budget_bytes, host)?;
    Ok(budget_bytes)
}

/// The host model the command line describes.
fn host_config(args: &Args) -> Result<HostConfig> {
    let mut host = HostConfig::new(args.completion.unwrap_or(CompletionMode::Interrupt));
    // A CPU cost is microseconds; more than a second per I/O is no host, and the sums of
    // such costs over a run would overflow the simulated clock.
    for (flag, cost) in [
        ("--submit-cost", args.submit_cost),
        ("--complete-cost", args.complete_cost),
    ] {
        if let Some(c) = cost
            && c > 1_000_000_000
        {
            bail!(
                "{flag} {}: give at most 1s of CPU time per I/O (with its unit, e.g. 2us)",
                nines_core::progress::short_ns(c)
            );
        }
    }
    if let Some(c) = args.submit_cost {
        host.submit_ns = c;
    }
    if let Some(c) = args.complete_cost {
        host.complete_ns = c;
    }
    if args.host_cpus == Some(0) {
        bail!("--host-cpus 0: give at least 1");
    }
    // The host model keeps per-CPU state: an absurd count would abort on allocation.
    if let Some(c) = args.host_cpus
        && c > HOST_CPUS_MAX
    {
        bail!("--host-cpus {c}: give at most {HOST_CPUS_MAX} simulated host CPUs");
    }
    host.cpus = args.host_cpus;
    host.apst = apst_policy(args.apst.as_deref())?;
    if let Some(rate) = args.bg_rate {
        if !(rate.is_finite() && (0.0..=1e7).contains(&rate)) {
            bail!("--bg-rate {rate}: give 0 to 10000000 tasks per second per CPU");
        }
        // At or past one CPU's worth of background work the queue of tasks grows without end
        // and each completion waits behind more of them than the last: the simulation never
        // ends (`--bg-rate 1000 --bg-service 1s` ran until killed).
        let busy = rate * args.bg_service as f64 / 1e9;
        if busy >= 1.0 {
            bail!(
                "--bg-rate {rate} with --bg-service {}: background tasks alone would take {busy:.3} times \
                 the time of each host CPU, so no I/O would ever complete; give a rate times \
                 mean service under 1 (e.g. --bg-rate {rate} --bg-service {})",
                nines_core::progress::short_ns(args.bg_service),
                nines_core::progress::short_ns((5e8 / rate.max(1e-9)) as u64)
            );
        }
        host.background = Some(Background {
            rate_per_s: rate,
            service_ns: args.bg_service,
            dist: args.bg_dist,
        });
    }
    Ok(host)
}

/// `--apst POLICY` (see the option's help).
fn apst_policy(text: Option<&str>) -> Result<ApstPolicy> {
    let Some(text) = text else {
        return Ok(ApstPolicy::default());
    };
    if text == "host" {
        let dir = Path::new("/sys/module/nvme_core/parameters");
        if !dir.is_dir() {
            bail!(
                "--apst host: this machine has no nvme driver loaded (no {}); give linux, \
                 legacy, off or NAME=VALUE,...",
                dir.display()
            );
        }
        return Ok(ApstPolicy::from_parameters(|name| {
            std::fs::read_to_string(dir.join(name)).ok()
        }));
    }
    let path = Path::new(text);
    if text.ends_with(".json") || path.is_file() {
        super::output::note_inputs("--apst", [path]);
        let body = std::fs::read_to_string(path)
            .with_context(|| format!("--apst {text}: give a nines profile report"))?;
        let v: serde_json::Value = serde_json::from_str(&body)
            .with_context(|| format!("--apst {text}: not JSON; give a nines profile report"))?;
        let params = v["host"]["apst"].as_object().filter(|m| !m.is_empty());
        let Some(params) = params else {
            bail!(
                "--apst {text}: the report records no APST policy (its host had no nvme driver, \
                 or nines before this version took it); give linux, legacy, off or NAME=VALUE,..."
            );
        };
        let list: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        return list
            .join(",")
            .parse::<ApstPolicy>()
            .with_context(|| format!("--apst {text}: the report's APST parameters"));
    }
    text.parse::<ApstPolicy>()
        .map_err(|e| anyhow::anyhow!("--apst: {e}"))
}

fn parse_precondition(s: &str) -> Result<Option<Precondition>> {
    Ok(match s {
        "auto" => None,
        s => Some(
            s.parse::<Precondition>()
                .map_err(anyhow::Error::msg)
                .context("--precondition: auto is also accepted")?,
        ),
    })
}

/// The measured runs --calibrate fits to (`nines profile --json` reports).
fn measured_runs(paths: &[PathBuf]) -> Result<Vec<nines_sim::calibrate::Measured>> {
    let mut runs = Vec::new();
    for path in paths {
        let label = path.display().to_string();
        let text = nines_core::input::read_to_string(path, nines_core::input::REPORT_MAX_BYTES)
            .with_context(|| format!("--calibrate {label}: cannot read it"))?;
        let report = nines_core::report::Report::from_json(&text)
            .with_context(|| format!("--calibrate {label}"))?;
        let run = nines_sim::calibrate::Measured::from_report(&label, &report);
        runs.push(run.context("--calibrate")?);
    }
    Ok(runs)
}

/// `--calibrate RUN.json ... --calibrate-out FILE.toml`: fit --device to measured runs.
fn calibrate(mut args: Args) -> Result<()> {
    use nines_sim::calibrate::CalibrateOptions;
    let Some(out) = args.calibrate_out.clone() else {
        bail!("--calibrate: give --calibrate-out FILE.toml for the fitted device description");
    };
    let out = out.as_path();
    super::output::note_inputs(
        "--calibrate input",
        args.calibrate.iter().map(PathBuf::as_path),
    );
    if DeviceConfig::is_file_spec(&args.device) {
        super::output::note_inputs("--device", [Path::new(&args.device)]);
    }
    super::output::note_inputs("--power-states-from", args.power_states_from.as_deref());
    super::output::check_outputs(&[("--calibrate-out", Some(out))])?;
    if args.device.starts_with("null:") {
        bail!(
            "--calibrate fits a device model; --device {} has none",
            args.device
        );
    }
    let base =
        DeviceConfig::load(&args.device).with_context(|| format!("--device {}", args.device))?;
    apply_fitted_completion(&mut args, &base)?;
    let args = &args;
    if args.calibrate_ios == 0 {
        bail!("--calibrate-ios 0: give a positive number of I/Os, e.g. 200000");
    }
    let runs = measured_runs(&args.calibrate)?;
    // Read before the fit, so a device that cannot give them fails the run at once.
    let power = args
        .power_states_from
        .as_deref()
        .map(super::sim_power::read)
        .transpose()?;
    let opts = CalibrateOptions {
        host: host_config(args)?,
        precondition: parse_precondition(&args.precondition)?,
        ios: args.calibrate_ios,
        seed: args.workload.seed,
        memory_budget_bytes: memory_budget(args.memory_budget, super::hostmem::host_memory())?
            .min(64 << 20),
        ..CalibrateOptions::default()
    };
    // SIGINT/SIGTERM: nothing is written until the fit is done, so a watcher ends the process
    // at once (130) while the fit runs, and stops watching before the description is written.
    nines_io::sched::install_interrupt_handler()
        .context("cannot install the SIGINT/SIGTERM handler")?;
    let fitting = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    {
        let fitting = fitting.clone();
        std::thread::spawn(move || {
            use std::sync::atomic::Ordering;
            while fitting.load(Ordering::Relaxed) {
                if nines_io::sched::interrupted() && fitting.load(Ordering::Relaxed) {
                    eprintln!("nines sim: interrupted while calibrating; nothing was written");
                    std::process::exit(super::EXIT_INTERRUPTED);
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        });
    }
    let wall = Instant::now();
    let live = !args.quiet && std::io::stderr().is_terminal();
    let mut cal = ticking(
        live,
        None,
        |wall_s| {
            Some(format!(
                "calibrating {}: {}",
                base.name,
                nines_core::progress::short_s(wall_s)
            ))
        },
        || nines_sim::calibrate::calibrate(&base, &runs, &opts),
    )
    .context("--calibrate")?;
    // A fit that could not reproduce a percentile at all (a simulated or measured 0) is no
    // description: refuse rather than write one that prints -100% errors.
    if let Some(f) = cal.fits.iter().find(|f| {
        f.percentiles
            .iter()
            .any(|p| p.simulated_ns == 0 || p.measured_ns == 0)
    }) {
        bail!(
            "--calibrate: the fit does not reproduce {} ({} at QD{}): a percentile is 0; check \
             that it is a run of a generated workload on one device; nothing was written",
            f.label,
            f.op.name(),
            f.iodepth
        );
    }
    let table = calibration_table(&args.device, &cal);
    let table = with_power_states(&mut cal, power, table)?;
    let (toml, host_note) = fitted_toml(args, &cal, &table)?;
    fitting.store(false, std::sync::atomic::Ordering::Relaxed);
    let (pending, mut file) = super::output::PendingOutput::create("--calibrate-out", out)?;
    file.write_all(toml.as_bytes())
        .with_context(|| format!("--calibrate-out {}: write failed", out.display()))?;
    pending.commit()?;
    if !args.quiet {
        print!("{table}");
    }
    let (op, base_op) = (
        cal.device.effective_over_provisioning(),
        base.effective_over_provisioning(),
    );
    if op > base_op + 0.05 {
        eprintln!(
            "warning: the measured device is smaller than {}'s geometry can be made ({} blocks \
             per plane at the least): the fitted description is {:.1}% spare where {} is \
             {:.1}%, so its writes meet GC far later than the device's; its read latencies are \
             fitted, its write and GC behaviour is not (profile a larger device for that)",
            base.name,
            cal.device.geometry.blocks_per_plane,
            op * 100.0,
            base.name,
            base_op * 100.0
        );
    }
    eprintln!(
        "nines sim: calibrated {} in {:.1} s ({} simulations); wrote {} (use --device {}; \
         {host_note})",
        base.name,
        wall.elapsed().as_secs_f64(),
        cal.simulations,
        out.display(),
        out.display()
    );
    Ok(())
}

/// The fitted description as TOML, the fit's table and the host model it holds for in comments
/// at its head; and that host note.
fn fitted_toml(
    args: &Args,
    cal: &nines_sim::calibrate::Calibration,
    table: &str,
) -> Result<(String, String)> {
    // The fit holds for the host model it was made with: say which, in the file and the message.
    let completion = args.completion.unwrap_or(CompletionMode::Interrupt).name();
    let host_note = format!(
        "fitted with --completion {completion}: simulate it with --completion {completion}{}",
        if completion == "none" {
            " (the device's latencies alone)"
        } else {
            " and the same --submit-cost/--complete-cost"
        }
    );
    let mut toml = String::new();
    for line in table.lines().chain(std::iter::once(host_note.as_str())) {
        toml.push_str("# ");
        toml.push_str(line);
        toml.push('\n');
    }
    let mut fitted = cal.device.clone();
    fitted.fitted_completion = Some(completion.to_string());
    toml.push_str(&fitted.to_toml().context("--calibrate-out")?);
    Ok((toml, host_note))
}

/// `--power-states-from`: the device's power states replace the fitted description's (after the
/// fit: measured runs without idle gaps say nothing of them, and the fit's time factor must not
/// scale a device's own latencies); the table says where they came from, then the fit.
fn with_power_states(
    cal: &mut nines_sim::calibrate::Calibration,
    power: Option<super::sim_power::PowerSource>,
    table: String,
) -> Result<String> {
    let Some(p) = power else {
        return Ok(table);
    };
    let replaced = cal.device.power.states.len() + cal.device.power.descriptors.len();
    cal.device.power.states = p.mapped.states;
    cal.device.power.descriptors.clear();
    cal.device
        .validate()
        .context("--power-states-from: the device's power states make no valid description")?;
    let mut lines = p.lines;
    if replaced > 0 {
        lines.push(format!(
            "  they replace the {replaced} power states (or descriptors) of --device"
        ));
    }
    Ok(lines.join("\n") + "\n" + &table)
}

/// The fit: what was changed, then per run and direction the measured and simulated latency
/// at p50..p99.99 and the error.
fn calibration_table(device: &str, cal: &nines_sim::calibrate::Calibration) -> String {
    use nines_report::table::format_ns;
    use std::fmt::Write as _;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "calibrated from --device {device}: device times x{:.4}, controller.command_ns {}{}, \
         firmware_jitter read {} points, write {} points",
        cal.time_scale,
        cal.device.controller.command_ns,
        match (cal.command_ns, cal.command_ns_capped) {
            (None, _) => " (no deeper run: kept)",
            (Some(_), true) => {
                " (capped at the QD1 floor: the device is slower per command at depth than a serial controller explains)"
            }
            (Some(_), false) => " (fitted to the deepest run's mean)",
        },
        cal.device.firmware_jitter.read.len(),
        cal.device.firmware_jitter.write.len(),
    );
    let _ = writeln!(
        t,
        "{:<28} {:<5} {:>4} {:>8} {:>10} {:>10} {:>8}",
        "run", "dir", "QD", "pct", "measured", "simulated", "error"
    );
    for f in &cal.fits {
        let label = if f.label.len() > 28 {
            &f.label[f.label.len() - 28..]
        } else {
            &f.label
        };
        let rows = f
            .percentiles
            .iter()
            .map(|p| {
                (
                    format!("p{}", p.percentile),
                    p.measured_ns as f64,
                    p.simulated_ns as f64,
                )
            })
            .chain(std::iter::once((
                "mean".to_string(),
                f.measured_mean_ns,
                f.simulated_mean_ns,
            )));
        for (name, m, s) in rows {
            let _ = writeln!(
                t,
                "{:<28} {:<5} {:>4} {:>8} {:>10} {:>10} {:>+7.1}%",
                label,
                f.op.name(),
                f.iodepth,
                name,
                format_ns(m),
                format_ns(s),
                (s / m.max(1.0) - 1.0) * 100.0
            );
        }
    }
    t
}

/// A description fitted by `--calibrate` holds under the host model it was fitted with: a run
/// that names no `--completion` takes the description's, and says so (issue 31 item 9: a fit
/// made with `--completion none` simulated under interrupts gave p50 4.72 µs for a measured
/// 719 ns).
fn apply_fitted_completion(args: &mut Args, device: &DeviceConfig) -> Result<()> {
    let Some(fitted) = device.fitted_completion.as_deref() else {
        return Ok(());
    };
    let fitted_mode: CompletionMode = fitted
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--device {}: fitted_completion: {e}", args.device))?;
    match args.completion {
        None => {
            args.completion = Some(fitted_mode);
            if !args.quiet {
                eprintln!(
                    "nines sim: --device {} was fitted with --completion {fitted}: simulating with \
                     it (give --completion to choose another)",
                    args.device
                );
            }
        }
        Some(m) if m != fitted_mode => eprintln!(
            "nines sim: warning: --device {} was fitted with --completion {fitted}; its \
             latencies do not hold under --completion {}",
            args.device,
            m.name()
        ),
        Some(_) => {}
    }
    Ok(())
}

/// sim's old --force ran past the estimate's limits: refused, naming what it became, since
/// --force only ever means writing over a device's data (issue 31 item 20).
fn refuse_renamed_force(args: &Args) -> Result<()> {
    if args.force {
        bail!(
            "sim --force is now --allow-long (run past the estimate's limits); --force only ever \
             means writing over a device's data"
        );
    }
    Ok(())
}

pub fn run(mut args: Args) -> Result<()> {
    refuse_renamed_force(&args)?;
    if args.list_devices {
        return super::sim_devices::list(&mut std::io::stdout().lock());
    }
    if !args.calibrate.is_empty() {
        return calibrate(args);
    }
    // 1. The arguments, down into the run and the simulated devices, checked.
    let (run, sim) = specs(&mut args)?;
    let estimate = super::sim_estimate::estimate(&super::sim_estimate::Inputs {
        device: &sim.device,
        null_device: sim.null_device_bytes.is_some(),
        devices: sim.devices,
        layout: &run.layout,
        host: &sim.host,
        jobs: &run.jobs,
        trace_requests: run.trace.as_ref().map(|t| t.trace.records.len() as u64),
    });
    // A device count out of range is refused by prepare, with its own message.
    if (1..=nines_sim::DEVICES_MAX).contains(&sim.devices) {
        check_estimate(&args, &estimate)?;
    }
    // From here on SIGINT/SIGTERM only set a flag, before the first output is opened (waiting
    // for a FIFO's reader watches it): during preconditioning nothing is written; during the
    // run it stops at the next progress check and reports what was simulated. A second one
    // kills (its temporary files are removed by the next run, by pid).
    nines_io::sched::install_interrupt_handler()
        .context("cannot install the SIGINT/SIGTERM handler")?;
    // 2. Outputs: checked, then created under temporary names only after every option was
    // validated, moved into place only when the run succeeded (cmd/output.rs).
    let mut outputs = super::output::RunOutputs::create(&super::output::RunOutputPaths {
        json: args.json.as_deref(),
        fio_json: args.fio.fio_json.as_deref(),
        fio_json_plus: args.fio.fio_json_plus.as_deref(),
        hdr_log: args.hdr_log.as_deref(),
        lat_log: args.lat_log.as_deref(),
    })?;
    let mut lat_file = outputs.lat_log.take();
    let mut hdr_file = outputs.hdr_log.take().map(BufWriter::new);
    // 3. The run.
    let logs = Logs {
        lat: lat_file.as_mut().map(|f| f as &mut dyn Write),
        hdr: hdr_file
            .as_mut()
            .map(|f| (f as &mut dyn Write, args.hdr_interval)),
    };
    let handle = SimHandle::default();
    // On a terminal, a live line: preconditioning can take a minute, and the simulation longer.
    let live = !args.quiet && std::io::stderr().is_terminal();
    let text = progress_text(&args, &sim, run.workload(), &handle);
    let trace_file = run.trace.as_ref().map(|t| t.file.clone());
    let done = ticking(live, Some(&handle), text, || {
        simulate(run, &sim, logs, &handle, &mut |note| {
            eprintln!("nines sim: {note}")
        })
    });
    let done = match done {
        Ok(done) => done,
        Err(SimulateError::Interrupted) => {
            drop(outputs);
            eprintln!(
                "nines sim: interrupted while preconditioning; nothing was simulated and no file was written"
            );
            std::process::exit(super::EXIT_INTERRUPTED);
        }
        Err(e) => return Err(run_error(e, &args, &sim, trace_file.as_deref())),
    };
    // 4. Print, then write the outputs.
    if done.interrupted
        && let Some(w) = done.report.warnings.last()
    {
        eprintln!("nines sim: {w}");
    }
    eprintln!("nines sim: {}", summary(&sim, &done));
    if !args.quiet {
        print!("{}", nines_report::table::render(&done.report));
    }
    drop(lat_file);
    if let Some(mut f) = hdr_file.take() {
        // The interval log is complete once the run returns; the fio exports read it back.
        f.flush()
            .with_context(|| format!("--hdr-log {}: write failed", display(&args.hdr_log)))?;
    }
    outputs.write_report(
        &done.report,
        &super::fio_export::FioRun {
            recorders: &done.recorders,
            job_recorders: None,
            parts: None,
            depth: None,
            group_reporting: args.fio.fio_group_reporting,
            percentiles: args.fio.fio_percentiles,
        },
    )?;
    outputs.commit()?;
    if done.interrupted {
        // Everything is written; say "interrupted" to the shell.
        let _ = std::io::stdout().flush();
        std::process::exit(super::EXIT_INTERRUPTED);
    }
    Ok(())
}

/// The line every simulation ends with: what was simulated, how it was prepared, how fast.
fn summary(sim: &SimSpec, done: &nines_sim::Simulation) -> String {
    format!(
        "{} x {} at scale {:.4} ({} blocks/plane), precondition {} in {:.2} s; \
         {} I/Os ({} device commands, {} events) in {:.2} s = {:.0} sim I/O/s",
        sim.devices,
        sim.device_name(),
        done.scale,
        done.blocks_per_plane,
        done.precondition.name(),
        done.prepare_s,
        done.stats.ios,
        done.stats.chunks,
        done.stats.events,
        done.run_s,
        done.stats.ios as f64 / done.run_s.max(1e-9)
    )
}

/// An optional path as messages show it.
fn display(path: &Option<PathBuf>) -> std::path::Display<'_> {
    path.as_deref().unwrap_or(Path::new("")).display()
}

/// The arguments as a run ([`RunSpec`]: jobs or a trace, layout, percentiles, logs) and the
/// simulated devices and host ([`SimSpec`]), every option checked, in the order the user reads
/// them.
fn specs(args: &mut Args) -> Result<(RunSpec, SimSpec)> {
    let base = args.workload.to_spec()?;
    if let Some(f) = args.jobs.load_file(&base, &args.workload.replace())? {
        if f.zbd.is_some() {
            let file = args.jobs.jobs.first().cloned().unwrap_or_default();
            anyhow::bail!(
                "--job {file}: zonemode=zbd runs on host-managed zoned block devices (nines \
                 profile --zonemode zbd); the simulator's zoned model is written through \
                 --layout serial: drop zonemode"
            );
        }
        apply_job_file(args, f);
    }
    let spec = args.workload.to_spec()?;
    let percentiles = args.workload.percentiles()?;
    let jobs = args.jobs.jobs_for(
        &spec,
        args.trace.trace.is_some(),
        args.workload.runtime.is_some(),
    )?;
    let (device, null_device_bytes) = device_spec(args)?;
    apply_fitted_completion(args, &device)?;
    args.volume.check()?;
    let layout = args.volume.spec();
    let scale = match args.scale.as_str() {
        "auto" => None,
        s => {
            let v: f64 = s
                .parse()
                .ok()
                .filter(|v: &f64| *v > 0.0 && *v <= 1.0)
                .with_context(|| format!("--scale {s}: give a number in (0, 1] or auto"))?;
            Some(v)
        }
    };
    let precondition = parse_precondition(&args.precondition)?;
    let host = host_config(args)?;
    let memory_budget_bytes = memory_budget(args.memory_budget, super::hostmem::host_memory())?;
    let trace = match (args.trace.load()?, &args.trace.trace) {
        (Some(trace), Some(file)) => Some(TraceSpec {
            trace,
            file: file.clone(),
            fit: args.trace.fit_policy()?,
            depth: args.trace.trace_depth,
        }),
        _ => None,
    };
    if args.hdr_interval == 0 {
        bail!("--hdr-interval 0: give a positive interval, e.g. 1s or 100ms");
    }
    let logs = LogNames {
        lat_log: args.lat_log.as_ref().map(|p| p.display().to_string()),
        hdr_log: args.hdr_log.as_ref().map(|p| p.display().to_string()),
    };
    let device_label = match args.ideal {
        true => format!("{} --ideal", args.device),
        false => args.device.clone(),
    };
    let run = RunSpec {
        jobs,
        layout,
        trace,
        percentiles,
        logs,
    };
    let sim = SimSpec {
        device,
        device_label,
        null_device_bytes,
        devices: args.devices,
        scale,
        precondition,
        host,
        memory_budget_bytes,
        start_asleep: args.trace_start.as_deref() == Some("asleep"),
    };
    Ok((run, sim))
}

/// --device (a preset, a file or null:SIZE) and --ideal; --trace-start asleep needs a model with
/// power states.
fn device_spec(args: &Args) -> Result<(DeviceConfig, Option<u64>)> {
    let (device, null_device_bytes) = match args.device.strip_prefix("null:") {
        Some(size) => (
            DeviceConfig::preset("afa-m2-2018").context("the default preset")?,
            Some(parse_size_bytes(size).with_context(|| {
                format!("--device {}: give null:SIZE, e.g. null:1g", args.device)
            })?),
        ),
        None => (
            DeviceConfig::load(&args.device)
                .with_context(|| format!("--device {}", args.device))?,
            None,
        ),
    };
    let device = if args.ideal { device.ideal() } else { device };
    let asleep = args.trace_start.as_deref() == Some("asleep");
    if asleep {
        // The states the host's APST policy programs (descriptors) or the description's own.
        let mut programmed = device.clone();
        nines_sim::apst::program(&mut programmed, &apst_policy(args.apst.as_deref())?);
        if null_device_bytes.is_some() || programmed.power.states.is_empty() {
            bail!(
                "--trace-start asleep: --device {} has no power states to sleep in under \
                 --apst {}; give a device whose description has [[power.descriptors]] or \
                 [[power.states]] (e.g. client-nvme) and an APST policy that uses them, or drop \
                 --trace-start",
                args.device,
                args.apst.as_deref().unwrap_or("linux")
            );
        }
    }
    if DeviceConfig::is_file_spec(&args.device) {
        super::output::note_inputs("--device", [Path::new(&args.device)]);
    }
    Ok((device, null_device_bytes))
}

/// The live line's text: preconditioning, then the simulated clock against the run's length.
fn progress_text<'a>(
    args: &'a Args,
    sim: &'a SimSpec,
    w: &nines_core::workload::WorkloadSpec,
    handle: &'a SimHandle,
) -> impl Fn(f64) -> Option<String> + Sync + 'a {
    let total_ns = w.runtime_ns.map(|r| r + w.ramp_ns);
    let ramp_ns = w.ramp_ns;
    let what = format!(
        "preconditioning {} x {} ({})",
        sim.devices,
        sim.device_name(),
        args.precondition
    );
    let prepares = args.precondition != "none";
    move |wall_s| {
        use std::sync::atomic::Ordering::Relaxed;
        if !handle.running() {
            let line = format!("{what}: {}", nines_core::progress::short_s(wall_s));
            return prepares.then_some(line);
        }
        let p = &handle.progress;
        Some(nines_core::progress::line(
            &nines_core::progress::ProgressView {
                clock: "simulated",
                elapsed_ns: p.sim_ns.load(Relaxed),
                total_ns,
                ramp_ns,
                wall_s,
                ios: Some(p.ios.load(Relaxed)),
                ..Default::default()
            },
        ))
    }
}

/// A failed simulation in the user's words: the option behind a log or a trace, and how to
/// make a trace fit.
fn run_error(e: SimulateError, args: &Args, sim: &SimSpec, trace: Option<&Path>) -> anyhow::Error {
    let trace = trace.unwrap_or(Path::new("")).display();
    match e {
        SimulateError::Sim(e @ SimError::LatLog(_)) => {
            anyhow::Error::new(e).context(format!("--lat-log {}", display(&args.lat_log)))
        }
        SimulateError::Sim(e @ SimError::HdrLog(_)) => {
            anyhow::Error::new(e).context(format!("--hdr-log {}", display(&args.hdr_log)))
        }
        SimulateError::TraceBeyond {
            error:
                TraceError::OutOfRange {
                    at,
                    end_bytes,
                    out_of_range,
                    max_end_bytes,
                    ..
                },
            target_size_bytes,
            scale,
        } => anyhow::anyhow!(
            "{}",
            beyond_message(
                &format!("--trace {trace}"),
                sim,
                &args.volume.spec(),
                (target_size_bytes, scale),
                &at,
                end_bytes,
                out_of_range,
                max_end_bytes
            )
        ),
        SimulateError::Trace(e) | SimulateError::TraceBeyond { error: e, .. } => {
            anyhow::Error::new(e).context(format!("--trace {trace}"))
        }
        e => anyhow::Error::new(e),
    }
}

/// A trace that does not fit: say how large the simulated target is and, when the device was
/// scaled down to fit the memory budget, that the full-size device may hold it.
#[allow(clippy::too_many_arguments)]
fn beyond_message(
    head: &str,
    sim: &SimSpec,
    layout: &nines_array::LayoutSpec,
    (size, scale): (u64, f64),
    at: &str,
    end_bytes: u64,
    out_of_range: u64,
    max_end_bytes: u64,
) -> String {
    let head = format!(
        "{head}: {out_of_range} requests end beyond the simulated target of {size} bytes \
         (the first at {at}, ending at {end_bytes}; the largest end is {max_end_bytes})"
    );
    if scale < 1.0 {
        let full = sim.device.logical_bytes();
        let full_target = layout.uniform_size_bytes(full, sim.devices);
        let fits = if max_end_bytes <= full_target {
            "which holds the whole trace"
        } else {
            "still too small for the trace"
        };
        // The cheap fix first: --scale 1 costs the full model's memory and preconditioning time
        // (231 s and 1.9 GB for a 119-request trace on one 960 GB device).
        let model_mib = (sim.device.model_bytes() * u64::from(sim.devices)).div_ceil(1 << 20);
        let budget = if model_mib > sim.memory_budget_bytes >> 20 {
            format!(" and --memory-budget {model_mib}m")
        } else {
            String::new()
        };
        format!(
            "{head}; the simulated capacity is scaled (scale {scale:.4} of {}'s {full} bytes per device, \
             to fit the memory budget): give --trace-fit wrap or --trace-fit scale to move the \
             requests onto the device (no extra cost), or --scale 1{budget} to simulate the full \
             size ({fits}; {model_mib} MiB of model, preconditioned at full size: minutes)",
            sim.device.name,
        )
    } else {
        format!(
            "{head}: give --trace-fit wrap or --trace-fit scale to move the requests onto the \
             device, or simulate a larger device (--device, --devices with --layout raid0)"
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn memory_budgets_are_checked_against_the_host() {
        use super::memory_budget;
        let host = super::super::hostmem::parse_meminfo(
            "MemTotal: 25165824 kB\nMemAvailable: 20971520 kB\n",
        );
        assert_eq!(memory_budget(None, host).unwrap(), 8 << 30);
        let small = super::super::hostmem::parse_meminfo(
            "MemTotal: 4194304 kB\nMemAvailable: 4194304 kB\n",
        );
        assert_eq!(memory_budget(None, small).unwrap(), 2 << 30);
        assert_eq!(memory_budget(None, None).unwrap(), 8 << 30);
        assert_eq!(memory_budget(Some(1 << 30), host).unwrap(), 1 << 30);
        let e = memory_budget(Some(1 << 50), host).unwrap_err().to_string();
        assert!(
            e.contains("available memory (20480 MiB available of 24576 MiB)"),
            "{e}"
        );
        let e = memory_budget(Some(1024), host).unwrap_err().to_string();
        assert!(
            e.contains("1024 bytes: too small") && !e.contains("0 MiB"),
            "{e}"
        );
    }
}
