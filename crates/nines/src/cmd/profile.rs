//! `nines profile`: measure every target's latency distribution in parallel with the real driver
//! (nines-io), then print the table and write the requested outputs.
//!
//! Order matters for "nothing written on a failure": parse and validate every option, open every
//! target (the safety checks run there), check every region, and create the output files under
//! temporary names in their final directories; only a run that succeeded renames them into place.

use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use nines_array::LayoutSpec;
use nines_core::op::Op;
use nines_core::report::{
    DeviceMeta, ReportBuilder, RunConfig, RunKind, VolumeReport, WorkerReport,
};
use nines_core::units::{parse_cpu_list, parse_duration_ns};
use nines_io::driver::{self, DriverConfig, DriverTarget};
use nines_io::engine::{EngineKind, EngineOptions};
use nines_io::scratch::ScratchFiles;
use nines_io::target::{Target, TargetOptions, check_region};
use nines_report::fio::{FioFlavor, FioSource};
use serde_json::{Map, json};

use super::fio_export::FioArgs;
use super::workload_args::{EmuArgs, JobArgs, TraceArgs, VolumeArgs, WorkloadArgs};
use nines_core::jobfile::JobFile;

/// Files and size of the embedded default (no TARGET given).
const DEFAULT_FILES: usize = 4;
const DEFAULT_FILE_BYTES: u64 = 64 << 20;
/// Measured time of the embedded default unless --runtime or --ios is given: with the files'
/// creation, a complete report in about ten seconds.
const DEFAULT_RUNTIME_NS: u64 = 8_000_000_000;

#[derive(clap::Args, Debug)]
#[command(mut_arg("runtime", |a| a.help(
    "Measured time (10s, 500ms, 2m ...), after the ramp [default: 10s unless --ios is given; \
     8s for the embedded default (no TARGET)]"
)))]
pub struct Args {
    /// Block devices, regular files or emulated SSDs (emu:PRESET[:SIZE], e.g.
    /// emu:afa-m2-2018:4g: the simulator's model in real time, with real data) to measure at the
    /// same time. None: profile temporary files that nines creates and removes (the embedded
    /// default).
    #[arg(value_name = "TARGET")]
    pub targets: Vec<PathBuf>,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub jobs: JobArgs,
    #[command(flatten)]
    pub volume: VolumeArgs,
    #[command(flatten)]
    pub trace: TraceArgs,
    #[command(flatten)]
    pub emu: EmuArgs,
    /// Writes carry a pattern of their offset and the seed, and every read is checked against
    /// it (a region written with --verify reads back byte for byte, through any layout).
    #[arg(help_heading = "Workload")]
    #[arg(long)]
    pub verify: bool,
    /// Give these targets (comma-separated, as named on the command line) a worker of their own,
    /// so their slow submissions cannot delay the devices that would share their worker; on a
    /// CPU of their own when --cpus has one to spare (the last CPUs of the list)
    #[arg(help_heading = "Host: engine, CPUs, scheduling")]
    #[arg(long, value_name = "TARGETS", value_delimiter = ',')]
    pub isolate: Vec<PathBuf>,
    /// I/O engine: psync, libaio (the default), io_uring, io_uring-poll or null (no I/O: the
    /// driver's own cost).
    #[arg(help_heading = "Host: engine, CPUs, scheduling")]
    #[arg(long = "engine", value_name = "ENGINE", value_parser = parse_engine)]
    pub engine_arg: Option<EngineKind>,
    /// The engine the run uses: --engine, else a job file's ioengine, else libaio.
    #[arg(skip = EngineKind::Libaio)]
    pub engine: EngineKind,
    /// io_uring: a kernel thread polls the submission queue (IORING_SETUP_SQPOLL).
    #[arg(help_heading = "Host: engine, CPUs, scheduling")]
    #[arg(long)]
    pub sqpoll: bool,
    /// CPUs for the workers, e.g. 4-19,24-39; devices are assigned round-robin over them.
    /// Default: every CPU this process may use.
    #[arg(help_heading = "Host: engine, CPUs, scheduling")]
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// Place each target's worker on the CPU a placement plan gives it (from
    /// `nines tune --plan ... -o FILE`); instead of --cpus.
    #[arg(help_heading = "Host: engine, CPUs, scheduling")]
    #[arg(long, value_name = "FILE", conflicts_with = "cpus")]
    pub plan: Option<PathBuf>,
    /// Run the workers under SCHED_FIFO at this priority (1-99; needs root or CAP_SYS_NICE).
    #[arg(help_heading = "Host: engine, CPUs, scheduling")]
    #[arg(long, value_name = "N")]
    pub rt_priority: Option<u32>,
    /// Do not lock memory (mlockall); use when RLIMIT_MEMLOCK is small and you cannot raise it.
    #[arg(help_heading = "Host: engine, CPUs, scheduling")]
    #[arg(long)]
    pub no_mlock: bool,
    /// Allow writes to block devices (never needed for regular files).
    #[arg(help_heading = "Targets: writes and safety")]
    #[arg(long)]
    pub allow_writes: bool,
    /// With --allow-writes: write even to a device that is mounted or holds a filesystem or
    /// partition-table signature. Destroys its data.
    #[arg(help_heading = "Targets: writes and safety")]
    #[arg(long)]
    pub force: bool,
    /// No O_DIRECT: go through the page cache (measures the cache, not the device).
    #[arg(help_heading = "Targets: writes and safety")]
    #[arg(long)]
    pub buffered: bool,
    /// Write the report as JSON (schema: docs/report-schema.md).
    #[arg(help_heading = "Outputs")]
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    #[command(flatten)]
    pub fio: FioArgs,
    /// Write interval histograms in the HdrHistogram log format, one tag per device and direction.
    #[arg(help_heading = "Outputs")]
    #[arg(long, value_name = "FILE")]
    pub hdr_log: Option<PathBuf>,
    /// Interval of --hdr-log.
    #[arg(help_heading = "Outputs")]
    #[arg(long, default_value = "1s", value_name = "DURATION", value_parser = parse_duration)]
    pub hdr_interval: u64,
    /// Log every I/O in nines' compact binary format (decode with `nines log FILE`).
    #[arg(help_heading = "Outputs")]
    #[arg(long, value_name = "FILE")]
    pub lat_log: Option<PathBuf>,
    /// Print nothing but errors and warnings: no table or summary on stdout, no live status or
    /// progress on stderr (which is drawn only on a terminal anyway).
    #[arg(help_heading = "Outputs")]
    #[arg(long, short)]
    pub quiet: bool,
}

fn parse_engine(s: &str) -> Result<EngineKind, String> {
    s.parse::<EngineKind>().map_err(|e| e.to_string())
}

fn parse_duration(s: &str) -> Result<u64, String> {
    match parse_duration_ns(s) {
        Ok(0) => Err("must be longer than 0".into()),
        Ok(v) => Ok(v),
        Err(e) => Err(e.to_string()),
    }
}

use super::output::PendingOutput;

/// A job file's run-wide settings, used where the command line gave none (its targets, end and
/// size replace the file's; its other workload options are defaults the file overrides).
fn apply_job_file(args: &mut Args, f: JobFile) -> Result<()> {
    let file = args.jobs.jobs.first().cloned().unwrap_or_default();
    if args.targets.is_empty() {
        args.targets = f.targets.iter().map(PathBuf::from).collect();
    } else if !f.targets.is_empty() {
        eprintln!("nines: the targets on the command line replace filename= of {file}");
    }
    if args.engine_arg.is_none()
        && let Some(e) = &f.engine
    {
        args.engine_arg = Some(
            e.parse()
                .map_err(|e| anyhow::anyhow!("--job {file}: {e}"))?,
        );
    }
    args.buffered |= f.buffered;
    if args.cpus.is_none() && args.plan.is_none() {
        args.cpus = f.cpus.clone();
    }
    super::workload_args::job_file_outputs(
        &f,
        &mut args.workload.percentiles,
        &mut args.lat_log,
        &mut args.hdr_log,
        &mut args.hdr_interval,
    );
    Ok(())
}

pub fn run(mut args: Args) -> Result<()> {
    // 1. Options, a job file's among them.
    let base = args.workload.to_spec()?;
    if let Some(f) = args.jobs.load_file(&base, &args.workload.replace())? {
        apply_job_file(&mut args, f)?;
    }
    args.engine = args.engine_arg.unwrap_or(EngineKind::Libaio);
    let mut spec = args.workload.to_spec()?;
    let percentiles = args.workload.percentiles()?;
    args.volume.check()?;
    let layout = args.volume.spec();
    let trace = args.trace.load()?;
    let plan = match &args.plan {
        Some(path) => Some(nines_host::plan::Plan::load(path)?),
        None => None,
    };
    let mut cpus = match &args.cpus {
        Some(list) => parse_cpu_list(list).map_err(|e| anyhow::anyhow!("--cpus: {e}"))?,
        None => nines_io::sched::allowed_cpus(),
    };
    if let Some(plan) = &plan {
        if args.targets.is_empty() {
            bail!(
                "--plan places named targets: give the plan's block devices as targets (the embedded default has none)"
            );
        }
        // One CPU per target, in target order: the driver's round-robin then gives target i
        // the plan's CPU for it.
        cpus = args
            .targets
            .iter()
            .map(|t| {
                let text = t.to_string_lossy();
                plan.cpu_for(&text).with_context(|| {
                    format!(
                        "--plan {}: no CPU for {text}; plan it too (`nines tune --plan ... {text} -o PLAN`)",
                        args.plan.as_deref().unwrap_or(Path::new("")).display()
                    )
                })
            })
            .collect::<Result<_>>()?;
    }
    nines_io::sched::check_cpus(&cpus)?;
    if let Some(p) = args.rt_priority {
        nines_io::sched::probe_rt_priority(p)?;
    }
    if args.force && !args.allow_writes {
        bail!("--force only applies with --allow-writes; add --allow-writes or drop --force");
    }
    if args.sqpoll && !matches!(args.engine, EngineKind::IoUring | EngineKind::IoUringPoll) {
        bail!("--sqpoll applies only to --engine io_uring or io_uring-poll");
    }

    // Targets, members and inputs: each a different file, and none of them an output; the
    // outputs checked now, before a file is created or a byte written.
    let buffer_device = layout
        .shaping()
        .and_then(|s| s.buffer.as_ref())
        .map(|b| PathBuf::from(&b.device));
    let mut named: Vec<(String, &Path)> = args
        .targets
        .iter()
        .enumerate()
        .map(|(i, p)| (format!("target {}", i + 1), p.as_path()))
        .collect();
    if let Some(b) = &buffer_device {
        named.push(("--buffer".into(), b.as_path()));
    }
    super::output::check_distinct_inputs(&named)?;
    super::output::note_inputs("target", args.targets.iter().map(PathBuf::as_path));
    super::output::note_inputs("--buffer device", buffer_device.as_deref());
    super::output::note_inputs("--plan", args.plan.as_deref());
    let outputs = [
        ("--json", args.json.as_deref()),
        ("--fio-json", args.fio.fio_json.as_deref()),
        ("--fio-json-plus", args.fio.fio_json_plus.as_deref()),
        ("--hdr-log", args.hdr_log.as_deref()),
        ("--lat-log", args.lat_log.as_deref()),
    ];
    super::output::check_outputs(&outputs)?;
    let volumes = if args.targets.is_empty() {
        DEFAULT_FILES
    } else {
        layout.group(args.targets.len() as u32).len()
    };
    check_buffer_memory(
        &args
            .jobs
            .jobs_for(&spec, trace.is_some(), args.workload.runtime.is_some())?,
        volumes as u64,
        super::hostmem::host_memory(),
    )?;

    // From here on SIGINT/SIGTERM only set a flag: the run stops, reports what it measured and
    // removes the embedded default's temporary files.
    nines_io::sched::install_interrupt_handler()
        .context("cannot install the SIGINT/SIGTERM handler")?;

    // 2. Targets: the embedded default, or the user's, opened with the safety checks.
    let scratch = if args.targets.is_empty() {
        let needed = spec.region_offset_bytes + spec.region_size_bytes.unwrap_or(0);
        let size = DEFAULT_FILE_BYTES.max(needed);
        if args.workload.runtime.is_none() && args.workload.ios.is_none() && trace.is_none() {
            spec.runtime_ns = Some(DEFAULT_RUNTIME_NS);
        }
        let runtime = match spec.runtime_ns {
            Some(ns) => nines_report::axis::format_ns(ns as f64),
            None => format!("{} I/Os per file", spec.ios_max.unwrap_or(0)),
        };
        eprintln!(
            "nines: no target given: profiling the embedded default, {DEFAULT_FILES} temporary files of {} MiB for {runtime} (created now, removed afterwards); name block devices or files to measure them",
            size >> 20
        );
        let created = ScratchFiles::create(DEFAULT_FILES, size);
        if nines_io::sched::interrupted() {
            drop(created);
            eprintln!(
                "nines: interrupted while creating the temporary files; they were removed and nothing was measured"
            );
            std::process::exit(super::EXIT_INTERRUPTED);
        }
        Some(created?)
    } else {
        None
    };
    let jobs = args
        .jobs
        .jobs_for(&spec, trace.is_some(), args.workload.runtime.is_some())?;
    spec = jobs[0].workload.clone();
    let buffer = layout.shaping().and_then(|s| s.buffer.as_ref());
    // A write buffer writes its device, and flushes what it holds to the members even when the
    // workload only reads (after a restart); a rebuild writes its replacement.
    let workload_writes = match &trace {
        // A flush counts: it is an fdatasync of the target, so a replay with flushes asks for
        // --allow-writes on a block device like one with writes (the cautious side).
        Some(t) => t.records.iter().any(|r| r.op == nines_core::op::Op::Write),
        None => jobs.iter().any(|j| j.workload.writes()),
    };
    // Named files are written by a write workload without --allow-writes (as fio does), but a
    // workload that only reads must not change the user's files behind their back: a layout
    // that writes its members on its own (a persisted serial volume formats members without
    // its superblock, a rebuild, a write buffer's flushes) needs the explicit permission.
    if layout.writes_members() && !workload_writes && !args.allow_writes && scratch.is_none() {
        bail!(
            "this layout writes its members on its own although the workload only reads \
             (--persist formats members that hold no serial volume, --rebuild writes the \
             replacement, --buffer flushes); pass --allow-writes to let it write {}",
            args.targets
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let writes = layout.writes_members() || workload_writes;
    let mut paths: Vec<PathBuf> = match &scratch {
        Some(s) => s.paths().to_vec(),
        None => args.targets.clone(),
    };
    if let Some(b) = buffer {
        // The buffer device is the volume's last member.
        paths.push(PathBuf::from(&b.device));
    }
    let open_limit = nines_io::sched::open_files_limit();
    // Each target takes a descriptor; keep room for the logs, the engines and the standard ones.
    if paths.len() as u64 + 32 > open_limit {
        bail!(
            "{} targets are more than this process may open (open-file limit {open_limit}); raise it with `ulimit -n {}` or pass fewer targets",
            paths.len(),
            paths.len() + 64
        );
    }
    let topts = TargetOptions {
        write: writes,
        allow_writes: args.allow_writes,
        force: args.force,
        buffered: args.buffered,
        create_size_bytes: member_bytes_needed(
            &layout,
            &jobs,
            paths.len() as u64 - u64::from(layout.extra_members()),
        ),
    };
    let emu = args.emu.context(spec.seed)?;
    // Target files this run creates go again if it fails before the run completes (a later
    // check such as alignment, a failed start): a refused run leaves nothing behind. Target::open
    // removes what it created when the open itself fails.
    let mut created = CreatedFiles(
        paths
            .iter()
            .filter(|p| {
                p.to_str().and_then(nines_io::emu::EmuSpec::parse).is_none()
                    && std::fs::symlink_metadata(p).is_err()
            })
            .cloned()
            .collect(),
    );
    let mut targets = Vec::with_capacity(paths.len());
    for p in &paths {
        targets.push(Target::open_with(p, &topts, &emu)?);
    }
    if *layout.base() == LayoutSpec::Independent && layout.extra_members() == 0 && trace.is_none() {
        // Each target is the volume: the target's own messages name the fix.
        for t in &targets {
            for j in &jobs {
                let w = &j.workload;
                let size = w
                    .region_size_bytes
                    .unwrap_or_else(|| t.size_bytes().saturating_sub(w.region_offset_bytes));
                check_region(t, w.region_offset_bytes, size, w.block_size_bytes)?;
            }
        }
    }
    let names = unique_names(&targets, scratch.is_some());
    let sparse = super::sparse::sparse_read_warnings(
        &targets,
        &names,
        &jobs,
        trace
            .as_ref()
            .map(|t| t.records.iter().any(|r| r.op == nines_core::op::Op::Read)),
        *layout.base() != LayoutSpec::Independent || layout.extra_members() > 0,
    );

    // 3. Outputs, under temporary names until the run succeeds.
    let mut pending = Vec::new();
    let mut open_output = |option: &'static str, p: &Option<PathBuf>| -> Result<Option<File>> {
        match p {
            Some(path) => {
                let (out, file) = PendingOutput::create(option, path)?;
                pending.push(out);
                Ok(Some(file))
            }
            None => Ok(None),
        }
    };
    let json_file = open_output("--json", &args.json)?;
    let fio_file = open_output("--fio-json", &args.fio.fio_json)?;
    let fio_plus_file = open_output("--fio-json-plus", &args.fio.fio_json_plus)?;
    let hdr_file = open_output("--hdr-log", &args.hdr_log)?;
    let lat_file = open_output("--lat-log", &args.lat_log)?;

    let dtargets: Vec<DriverTarget> = targets
        .iter()
        .zip(&names)
        .map(|(t, name)| DriverTarget {
            name: name.clone(),
            fd: t.fd(),
            size_bytes: t.size_bytes(),
            logical_block_bytes: t.logical_block_bytes(),
            block_device: t.is_block_device(),
            emu: t.emu().cloned(),
        })
        .collect();
    let mut cfg = DriverConfig {
        spec: spec.clone(),
        jobs: jobs.clone(),
        layout: layout.clone(),
        trace: None,
        trace_depth: args.trace.trace_depth,
        verify: args.verify,
        isolate: isolate_indices(&args.isolate, &paths)?,
        engine: args.engine,
        engine_options: EngineOptions {
            sqpoll: args.sqpoll,
            sqpoll_cpu: None,
        },
        cpus: cpus.clone(),
        rt_priority: args.rt_priority,
        // Locked here instead (below), before anything is printed.
        mlock: false,
        lat_log: lat_file,
        hdr_log: hdr_file,
        interval_ns: args.hdr_interval,
        progress: !args.quiet && std::io::stderr().is_terminal(),
    };
    // A replay is validated as one (its job carries no pattern), then fitted to the volumes.
    cfg.trace = trace;
    let volumes = driver::validate(&dtargets, &cfg)?;
    if let Some(mut t) = cfg.trace.take() {
        // Fit the trace's devices onto the volumes and its offsets into the smallest.
        let size = volumes.iter().map(|v| v.size_bytes).min().unwrap_or(0);
        let policy = args.trace.fit_policy()?;
        let fit = t
            .fit(size, volumes.len() as u32, policy)
            .with_context(|| trace_context(&args))?;
        if fit.out_of_range > 0 {
            eprintln!(
                "nines: {} trace requests ended beyond the {size}-byte target; moved them ({policy})",
                fit.out_of_range
            );
        }
        cfg.trace = Some(t);
    }
    let volume_names: Vec<String> = volumes.iter().map(|v| v.name.clone()).collect();
    if let Some(path) = &args.lat_log
        && !args.quiet
    {
        let workloads: Vec<_> = jobs.iter().map(|j| j.workload.clone()).collect();
        let dir = super::latlog_estimate::dir_of(path);
        let free = nines_io::scratch::free_bytes(&dir);
        eprintln!(
            "nines: {}",
            super::latlog_estimate::note(path, &workloads, volume_names.len(), free)
        );
    }
    let mut run_warnings = Vec::new();
    // Printed once, with the table's other warnings, and kept in the report.
    run_warnings.extend(sparse);
    let _mlock = if args.no_mlock {
        None
    } else {
        match nines_io::sched::lock_memory() {
            Ok(()) => Some(MemoryLock),
            // Unlocked is still a useful measurement: say what it risks, once, and go on.
            Err(e) => {
                let w = mlock_warning(&e);
                eprintln!("nines: warning: {w}");
                run_warnings.push(w);
                None
            }
        }
    };
    if !args.quiet {
        println!(
            "{}",
            placement_line(
                args.engine,
                &volume_names,
                &cpus,
                &isolated_volumes(&volumes, &cfg.isolate)
            )
        );
    }

    let trace_shape = cfg.trace.as_ref().map(|t| t.shape());
    let cfg_trace_info = cfg.trace.as_ref().map(|t| {
        let ts = t.stats();
        json!({
            "format": t.format.to_string(),
            "requests": t.records.len(),
            "reads": ts.reads,
            "writes": ts.writes,
            "fua_writes": ts.fua_writes,
            "flushes": ts.flushes,
            "bytes": ts.bytes,
            "duration_ns": ts.duration_ns,
            "replay": "open loop: each request is issued at its arrival time relative to the first, latency counts from it",
        })
    });

    // 4. The run, with the interrupt counters read before and after it (never during).
    let irq_before = nines_host::IrqSnapshot::read(Path::new("/"));
    let outcome = driver::run(&dtargets, cfg).map_err(|e| {
        // The driver writes the logs through descriptors: the message gets their option and path.
        let log = match &e {
            nines_io::driver::DriverError::Log { what, .. } if *what == "latency log" => {
                Some(("--lat-log", args.lat_log.as_deref()))
            }
            nines_io::driver::DriverError::Log { .. } => {
                Some(("--hdr-log", args.hdr_log.as_deref()))
            }
            _ => None,
        };
        match log {
            Some((option, Some(path))) => anyhow::Error::new(e).context(format!(
                "{option} {} (free space there, or give a path on another filesystem)",
                path.display()
            )),
            _ => anyhow::Error::new(e),
        }
    })?;
    // The run happened: the files it created hold its data and stay, as fio's do.
    created.0.clear();
    let irq_delta = match (irq_before, nines_host::IrqSnapshot::read(Path::new("/"))) {
        (Ok(before), Ok(after)) => Some(before.delta(&after)),
        (Err(e), _) | (_, Err(e)) => {
            run_warnings.push(format!("per-device interrupts not reported: {e}"));
            None
        }
    };
    if let Some(ns) = outcome.interrupted_ns {
        let w = format!(
            "interrupted after {:.1} s: the report covers what was measured until then",
            ns as f64 * 1e-9
        );
        eprintln!("nines: {w}");
        run_warnings.push(w);
    }

    // 5. The report.
    let mut extra = Map::new();
    extra.insert("cpus".into(), json!(cpus));
    // Which host measured this, so merged fleet reports keep each run's identity.
    if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        extra.insert("hostname".into(), json!(h.trim()));
    }
    if let Ok(k) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        extra.insert("kernel".into(), json!(k.trim()));
    }
    // Each target's device model (a file: the disk holding it), for the report's reader.
    let mut models = Map::new();
    for (t, name) in targets.iter().zip(&names) {
        if let Some(h) = t.emu() {
            models.insert(name.clone(), json!(format!("emulated {}", h.info().preset)));
            continue;
        }
        let disk = irq_device(t);
        let disk = disk.rsplit('/').next().unwrap_or(&disk).to_string();
        if let Some(m) = disk_model(&disk) {
            let m = if t.is_block_device() {
                m
            } else {
                format!("{m}, a file on {disk}")
            };
            models.insert(name.clone(), json!(m));
        }
    }
    if !models.is_empty() {
        extra.insert("device_models".into(), serde_json::Value::Object(models));
    }
    extra.insert("sqpoll".into(), json!(args.sqpoll));
    extra.insert("rt_priority".into(), json!(args.rt_priority));
    extra.insert("mlock".into(), json!(!args.no_mlock));
    extra.insert("buffered".into(), json!(args.buffered));
    extra.insert("embedded_default".into(), json!(scratch.is_some()));
    extra.insert(
        "plan".into(),
        json!(args.plan.as_ref().map(|p| p.display().to_string())),
    );
    extra.insert(
        "interrupted".into(),
        json!(outcome.interrupted_ns.is_some()),
    );
    let executed: Vec<u64> = outcome.devices.iter().map(|d| d.ios_executed).collect();
    extra.insert("ios_executed".into(), json!(executed));
    extra.insert("layout".into(), json!(layout.name()));
    if let LayoutSpec::Raid0 { stripe_bytes } = *layout.base() {
        extra.insert("stripe_bytes".into(), json!(stripe_bytes));
    }
    extra.insert("verify".into(), json!(args.verify));
    let emu_lines = emu_report(&targets, &names);
    if !emu_lines.is_empty() {
        extra.insert(
            "emu".into(),
            json!({
                "memory_budget_bytes": emu.budget_bytes(),
                "charged_bytes": emu.used_bytes(),
                "devices": emu_lines.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(),
            }),
        );
    }
    if let (Some(path), Some(t)) = (&args.trace.trace, &cfg_trace_info) {
        let mut t = t.clone();
        t["file"] = json!(path.display().to_string());
        extra.insert("trace".into(), t);
    }
    // A replay's workload is what the trace held (as `nines sim` reports it), not the workload
    // options' defaults (randread, 50% reads): its direction and read share, its most common
    // request size, and as iodepth the most requests in flight per target (--trace-depth).
    if let Some(shape) = trace_shape {
        spec.rw = shape.rw;
        spec.read_mix_pct = shape.read_mix_pct;
        spec.block_size_bytes = shape.block_size_bytes_mode;
        spec.iodepth = args.trace.trace_depth;
        spec.ios_max = None;
        spec.rate_iops = None;
        spec.thinktime_ns = 0;
    }
    let spec_for_jobs = spec.clone();
    let config = RunConfig {
        workload: spec,
        engine: args.engine.to_string(),
        percentiles,
        measured_ns: outcome.measured_ns,
        start_unix_ns: Some(outcome.start_unix_ns),
        lat_log: args
            .lat_log
            .as_ref()
            .map(|p| recorded_log_path(p, args.json.as_deref())),
        hdr_log: args
            .hdr_log
            .as_ref()
            .map(|p| recorded_log_path(p, args.json.as_deref())),
        extra,
    };
    let mut b = ReportBuilder::new(RunKind::Profile, config);
    let interrupts_of = |t: &Target, cpu: usize| {
        irq_delta
            .as_ref()
            .map(|delta| nines_host::device_irq_report(&irq_device(t), Some(cpu), delta))
    };
    // (disk, submitting CPU, targets on it, its interrupt report) served off that CPU.
    let mut off_cpu: Vec<(String, usize, Vec<String>, serde_json::Value)> = Vec::new();
    for d in &outcome.devices {
        // A shaped single device still reports its policy's counters as a volume.
        let single = d.members.len() == 1 && layout.shaping().is_none();
        let first = &targets[d.members[0] as usize];
        let meta = DeviceMeta {
            name: d.name.clone(),
            path: single.then(|| first.path().display().to_string()),
            size_bytes: d.size_bytes,
            cpu: Some(d.cpu),
        };
        b.device(meta, &d.recorder);
        if single {
            b.device_latency_parts(&d.member_slat[0], &d.member_clat[0]);
        }
        let mut member_reports = Vec::new();
        for (k, &m) in d.members.iter().enumerate() {
            let t = &targets[m as usize];
            let name = &names[m as usize];
            let interrupts = interrupts_of(t, d.cpu);
            if let Some(v) = &interrupts
                && v["off_cpu"] == json!(true)
            {
                // One warning per disk and CPU, however many targets (files) it holds.
                let disk = v["device"].as_str().unwrap_or(name).to_string();
                match off_cpu
                    .iter_mut()
                    .find(|(dk, c, _, _)| *dk == disk && *c == d.cpu)
                {
                    Some((_, _, names, _)) => names.push(name.clone()),
                    None => off_cpu.push((disk, d.cpu, vec![name.clone()], v.clone())),
                }
            }
            if single {
                b.device_extra(interrupts, None);
                continue;
            }
            let mut mr = b.member(
                k as u32,
                DeviceMeta {
                    name: name.clone(),
                    path: Some(t.path().display().to_string()),
                    size_bytes: t.size_bytes(),
                    cpu: Some(d.cpu),
                },
                (d.member_commands[k], d.member_errors[k]),
                d.member_recs.get(k),
                None,
            );
            mr.interrupts = interrupts;
            for (op, st) in [(Op::Read, &mut mr.read), (Op::Write, &mut mr.write)] {
                if let Some(st) = st.as_mut() {
                    b.latency_parts(st, op, &d.member_slat[k], &d.member_clat[k]);
                }
            }
            member_reports.push(mr);
        }
        if !single {
            b.device_volume(VolumeReport {
                layout: d.layout.to_string(),
                options: layout.options(),
                stats: d.stats.clone(),
                members: member_reports,
            });
        }
    }
    for (j, job) in jobs.iter().enumerate() {
        let per_target: Vec<_> = outcome
            .devices
            .iter()
            .map(|d| d.per_job.get(j).cloned().unwrap_or_default())
            .collect();
        let name = if cfg_trace_info.is_some() {
            "trace"
        } else {
            job.name.as_str()
        };
        // A replay's one job is the trace, described as config.workload describes it.
        let workload = if trace_shape.is_some() {
            &spec_for_jobs
        } else {
            &job.workload
        };
        b.job(name, workload, &per_target);
        if cfg_trace_info.is_some() {
            break;
        }
    }
    for (disk, cpu, on, v) in &off_cpu {
        let served: Vec<String> = v["served_by_cpu"]
            .as_object()
            .map(|m| m.iter().map(|(c, n)| format!("CPU {c}: {n}")).collect())
            .unwrap_or_default();
        let holding = if on.len() == 1 && on[0] == *disk {
            String::new()
        } else {
            format!(" (holding {})", on.join(", "))
        };
        b.warn(format!(
            "{disk}{holding}: {} of its {} interrupts were served off the submitting CPU {cpu} ({}); steer them with `nines tune --plan`/`--apply`",
            v["off_cpu_count"], v["total"], served.join(", ")
        ));
    }
    // Printed once, with the table's other warnings (it was on stderr as well).
    for w in blocking_warnings(&outcome, &names, &paths) {
        b.warn(w);
    }
    b.host(nines_host::doctor_summary(Path::new("/")));
    for w in &outcome.workers {
        b.worker(WorkerReport {
            index: w.index,
            cpu: Some(w.cpu),
            devices: w.devices.clone(),
            usr_cpu_s: w.usage.usr_cpu_s,
            sys_cpu_s: w.usage.sys_cpu_s,
            ctx_voluntary: w.usage.ctx_voluntary,
            ctx_involuntary: w.usage.ctx_involuntary,
        });
    }
    for warning in outcome.warnings.iter().chain(&run_warnings) {
        b.warn(warning.clone());
    }
    let report = b.finish();
    if !args.quiet {
        print!("{}", nines_report::table::render(&report));
        for (line, _) in &emu_lines {
            println!("{line}");
        }
    }

    if let Some(mut f) = json_file {
        f.write_all(report.to_json().as_bytes())
            .context("--json: write failed")?;
    }
    if fio_file.is_some() || fio_plus_file.is_some() {
        // With the recorders: fio's default percentiles, buckets and bins, not only ours; with
        // the interval log (complete, still under its temporary name): bw/iops samples.
        let recorders: Vec<_> = outcome.devices.iter().map(|d| d.recorder.clone()).collect();
        let per_job: Vec<Vec<_>> = (0..report.jobs.len())
            .map(|j| {
                outcome
                    .devices
                    .iter()
                    .map(|d| d.per_job.get(j).cloned().unwrap_or_default())
                    .collect()
            })
            .collect();
        let intervals = match pending.iter().find(|p| p.option() == "--hdr-log") {
            Some(p) => super::fio_export::read_intervals(p.written_path()),
            None => Vec::new(),
        };
        for (file, option, flavor) in [
            (fio_file, "--fio-json", FioFlavor::Json),
            (fio_plus_file, "--fio-json-plus", FioFlavor::JsonPlus),
        ] {
            if let Some(f) = file {
                super::fio_export::write(
                    f,
                    option,
                    flavor,
                    &FioSource {
                        report: &report,
                        recorders: Some(&recorders),
                        job_recorders: Some(&per_job),
                        intervals: &intervals,
                        group_reporting: args.fio.fio_group_reporting,
                    },
                )?;
            }
        }
    }
    for out in pending {
        out.commit()?;
    }
    if args.json.is_none() && !args.quiet {
        // A first run writes nothing: say how to keep it and look at it (a new user's next step).
        eprintln!(
            "next: add --json run.json to keep this run, then `nines report run.json -o run.html` \
             for its plots, or `nines compare` two runs"
        );
    }
    drop(targets);
    drop(scratch);
    if outcome.interrupted_ns.is_some() {
        // Everything is written and the temporary files are gone; say "interrupted" to the shell.
        crate::stdio::flush_out();
        std::process::exit(super::EXIT_INTERRUPTED);
    }
    Ok(())
}

/// Devices whose submit calls block long enough to delay the others on their worker: their p99
/// submit call is over 10 us and longer than the typical I/O of a device sharing the worker.
/// One warning each, with the figure and the fix (`--isolate`).
fn blocking_warnings(
    outcome: &nines_io::driver::DriverOutcome,
    names: &[String],
    paths: &[PathBuf],
) -> Vec<String> {
    const BLOCKING_NS_MIN: u64 = 10_000;
    let mut warnings = Vec::new();
    for w in &outcome.workers {
        // (volume, target index, submit-call p99, I/O p50, share of the run in submit calls)
        let mut members = Vec::new();
        for &v in &w.devices {
            let d = &outcome.devices[v as usize];
            for (k, &m) in d.members.iter().enumerate() {
                let mut slat = d.member_slat[k].dirs[0].clone();
                slat.merge_from(&d.member_slat[k].dirs[1]);
                let mut clat = d.member_clat[k].dirs[0].clone();
                clat.merge_from(&d.member_clat[k].dirs[1]);
                if slat.ios == 0 && clat.ios == 0 {
                    continue;
                }
                let p99 = if slat.ios > 0 {
                    slat.hist.value_at_quantile(0.99)
                } else {
                    0
                };
                let p50 = slat.hist.value_at_quantile(0.5) + clat.hist.value_at_quantile(0.5);
                let share = d.member_submit_ns[k] as f64 / outcome.measured_ns.max(1) as f64;
                members.push((v, m as usize, p99, p50, share));
            }
        }
        // Only other targets' devices are delayed in a way --isolate can help: a volume's own
        // members share its worker by design (its policy must see every completion).
        for &(v, m, p99, _, share) in &members {
            let others: Vec<_> = members.iter().filter(|o| o.0 != v).collect();
            let Some(typical) = others.iter().map(|o| o.3).min() else {
                continue;
            };
            if p99 >= BLOCKING_NS_MIN && p99 > typical {
                warnings.push(format!(
                    "{}: its submissions blocked for {} at p99 ({:.1}% of the run inside submit calls), and the {} of other targets on its worker (CPU {}) wait behind them; give it a worker of its own with --isolate {}",
                    names[m],
                    nines_report::axis::format_ns(p99 as f64),
                    share * 100.0,
                    match others.len() {
                        1 => "1 device".to_string(),
                        k => format!("{k} devices"),
                    },
                    w.cpu,
                    paths[m].display()
                ));
            }
        }
    }
    warnings
}

/// Which targets `--isolate` names (by the path as given, or its canonical form).
fn isolate_indices(isolate: &[PathBuf], paths: &[PathBuf]) -> Result<Vec<u32>> {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    isolate
        .iter()
        .map(|want| {
            paths
                .iter()
                .position(|p| p == want || canon(p) == canon(want))
                .map(|i| i as u32)
                .with_context(|| {
                    format!(
                        "--isolate {}: not one of the targets; name it as on the command line",
                        want.display()
                    )
                })
        })
        .collect()
}

fn isolated_volumes(volumes: &[driver::VolumeGeometry], isolate: &[u32]) -> Vec<bool> {
    volumes
        .iter()
        .map(|v| v.members.iter().any(|m| isolate.contains(m)))
        .collect()
}

/// The bytes each member must hold for the jobs' regions (files are created or extended to it
/// when writing): the region's end, spread over the members by the layout.
fn member_bytes_needed(
    layout: &LayoutSpec,
    jobs: &[nines_core::job::JobSpec],
    members: u64,
) -> Option<u64> {
    let end = jobs
        .iter()
        .filter_map(|j| {
            j.workload
                .region_size_bytes
                .map(|s| j.workload.region_offset_bytes.saturating_add(s))
        })
        .max()?;
    Some(layout.member_bytes_for(end, members))
}

fn trace_context(args: &Args) -> String {
    format!(
        "--trace {}",
        args.trace
            .trace
            .as_deref()
            .unwrap_or(Path::new(""))
            .display()
    )
}

/// The block device whose interrupts a target's I/O raises: the device itself, or for a file the
/// disk holding its filesystem (a partition's parent). Falls back to the target's path (tmpfs,
/// overlay: no disk, and the report then says there are no queue interrupts).
fn irq_device(t: &Target) -> String {
    use std::os::unix::fs::MetadataExt;
    let path = t.path().to_string_lossy().into_owned();
    if t.is_block_device() {
        return path;
    }
    let Some(Ok(meta)) = t.file().map(File::metadata) else {
        return path;
    };
    let dev = meta.dev();
    let sys = PathBuf::from(format!(
        "/sys/dev/block/{}:{}",
        libc::major(dev),
        libc::minor(dev)
    ));
    let Ok(real) = std::fs::canonicalize(&sys) else {
        return path;
    };
    let disk = if real.join("partition").exists() {
        real.parent().map(Path::to_path_buf).unwrap_or(real)
    } else {
        real
    };
    disk.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or(path)
}

/// What the report says of each emulated device: a line for the table and its JSON (preset,
/// scale, preconditioning, and the emulation's own overhead: the time an I/O was seen complete
/// minus the model's completion time).
fn emu_report(targets: &[Target], names: &[String]) -> Vec<(String, serde_json::Value)> {
    targets
        .iter()
        .zip(names)
        .filter_map(|(t, name)| {
            let h = t.emu()?;
            let i = h.info();
            let o = h.overhead();
            let (c, controls) = h
                .with_device(|d| (d.ssd().map(|s| s.counters()), d.controls()))
                .map(|(c, n)| (c.unwrap_or_default(), n))
                .unwrap_or_default();
            let us = |ns: u64| nines_report::axis::format_ns(ns as f64);
            let line = format!(
                "emulated {name}: the {} model at scale {:.5} ({} blocks/plane, {} MiB model capacity), {} MiB exported, precondition {}; emulation overhead p50 {}, p99.99 {}, max {} over {} I/Os",
                i.preset,
                i.scale,
                i.blocks_per_plane,
                i.model_logical_bytes >> 20,
                i.size_bytes >> 20,
                i.precondition,
                us(o.p50_ns),
                us(o.p9999_ns),
                us(o.max_ns),
                o.count
            );
            let v = json!({
                "name": name,
                "spec": i.spec,
                "preset": i.preset,
                "scale": i.scale,
                "blocks_per_plane": i.blocks_per_plane,
                "size_bytes": i.size_bytes,
                "model_logical_bytes": i.model_logical_bytes,
                "precondition": i.precondition,
                "charged_bytes": i.charged_bytes,
                "model": {
                    "reads": c.reads,
                    "writes": c.writes,
                    "gc_episodes": c.gc_hard_episodes + c.gc_soft_episodes,
                    "gc_preemptions": c.gc_preemptions,
                    "gc_now_victims": c.gc_now_victims,
                    "window_violations": c.window_violations,
                    "fast_fail_busy": c.fast_fail_busy,
                    "trims": c.trims,
                    "controls": controls,
                    "read_waits": nines_flash::ReadWaitCause::ALL
                        .iter()
                        .map(|&cause| {
                            let w = c.read_waits[cause as usize];
                            (
                                cause.name().to_string(),
                                json!({
                                    "reads": w.reads,
                                    "slow_reads": w.slow_reads,
                                    "wait_ns_total": w.wait_ns_total,
                                    "wait_ns_max": w.wait_ns_max,
                                }),
                            )
                        })
                        .collect::<Map<String, serde_json::Value>>(),
                },
                "overhead_ns": {
                    "count": o.count,
                    "p50": o.p50_ns,
                    "p99": o.p99_ns,
                    "p99.99": o.p9999_ns,
                    "max": o.max_ns,
                },
            });
            Some((line, v))
        })
        .collect()
}

/// A disk's model as sysfs names it (`/sys/block/DISK/device/model`), else its driver (virtio_blk,
/// zram, loop, null_blk).
fn disk_model(disk: &str) -> Option<String> {
    let dir = Path::new("/sys/block").join(disk);
    if let Ok(m) = std::fs::read_to_string(dir.join("device/model")) {
        let m = m.trim();
        if !m.is_empty() {
            return Some(m.to_string());
        }
    }
    if let Ok(d) = std::fs::read_link(dir.join("device/driver"))
        && let Some(n) = d.file_name()
    {
        return Some(n.to_string_lossy().into_owned());
    }
    ["zram", "loop", "nullb", "ram"]
        .iter()
        .find(|p| disk.starts_with(*p) && dir.exists())
        .map(|p| p.to_string())
}

/// The one line printed (and kept in the report) when memory cannot be locked.
fn mlock_warning(e: &nines_io::sched::SchedError) -> String {
    match e {
        nines_io::sched::SchedError::Mlock { limit, error } => format!(
            "could not lock memory: {error} (RLIMIT_MEMLOCK {limit}); page faults may lengthen the tail; run as root or raise `ulimit -l`"
        ),
        other => format!(
            "could not lock memory: {other}; page faults may lengthen the tail; run as root or raise `ulimit -l`"
        ),
    }
}

/// Holds `mlockall` for the run; dropping it unlocks.
struct MemoryLock;

impl Drop for MemoryLock {
    fn drop(&mut self) {
        nines_io::sched::unlock_memory();
    }
}

/// Device names for tables, logs and tags: the target's name, with its index appended when two
/// targets share one (e.g. files of the same name in different directories).
fn unique_names(targets: &[Target], embedded: bool) -> Vec<String> {
    let base: Vec<String> = targets.iter().map(|t| t.name().to_string()).collect();
    base.iter()
        .enumerate()
        .map(|(i, n)| {
            if !embedded && base.iter().filter(|m| *m == n).count() > 1 {
                format!("{n}#{i}")
            } else {
                n.clone()
            }
        })
        .collect()
}

/// The placement, printed before the run: which worker on which CPU drives which targets.
fn placement_line(
    engine: EngineKind,
    names: &[String],
    cpus: &[usize],
    isolated: &[bool],
) -> String {
    let cpu_of = nines_io::sched::assign_isolating(cpus, isolated);
    let groups = driver::worker_groups(&cpu_of, engine, isolated);
    let per_worker: Vec<String> = groups
        .iter()
        .map(|(c, vols)| {
            let devs: Vec<&str> = vols.iter().map(|&v| names[v as usize].as_str()).collect();
            format!("CPU {c}: {}", devs.join(" "))
        })
        .collect();
    let workers = if engine == EngineKind::Psync {
        format!("{} (psync: one per device)", workers_text(groups.len()))
    } else if isolated.iter().any(|&x| x) {
        format!(
            "{} (one per CPU, isolated targets alone)",
            workers_text(groups.len())
        )
    } else {
        format!("{} (one per CPU)", workers_text(groups.len()))
    };
    format!(
        "placement: engine {engine}, {workers}; {}",
        per_worker.join("; ")
    )
}

fn workers_text(n: usize) -> String {
    if n == 1 {
        "1 worker".into()
    } else {
        format!("{n} workers")
    }
}

/// Refuses I/O buffers (each job's iodepth x block size, per volume) larger than the memory this
/// host has available: the allocation would abort the process (SIGABRT) instead of failing.
fn check_buffer_memory(
    jobs: &[nines_core::job::JobSpec],
    volumes: u64,
    host: Option<super::hostmem::HostMemory>,
) -> Result<()> {
    let per_volume: u128 = jobs
        .iter()
        .map(|j| u128::from(j.workload.iodepth) * u128::from(j.workload.block_size_bytes))
        .sum();
    let needed_bytes = per_volume * u128::from(volumes.max(1));
    if let Some(h) = host
        && needed_bytes > u128::from(h.available_bytes)
    {
        let w = &jobs[0].workload;
        bail!(
            "--iodepth {} x --bs {} x {volumes} volume(s) needs {} MiB of I/O buffers, more than this \
             host's available memory ({} MiB of {} MiB); lower --iodepth or --bs",
            w.iodepth,
            w.block_size_bytes,
            needed_bytes >> 20,
            h.available_bytes >> 20,
            h.total_bytes >> 20
        );
    }
    Ok(())
}

/// How the report records a log's path: relative to the JSON's directory when there is a JSON
/// (so the pair can be moved together and `nines report` run from anywhere), else absolute.
/// The files are only renamed into place at the end, but their directories exist, so those are
/// canonicalized; if that fails the path is kept as typed.
fn recorded_log_path(log: &Path, json: Option<&Path>) -> String {
    let canonical = |p: &Path| -> Option<PathBuf> {
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        Some(std::fs::canonicalize(dir).ok()?.join(p.file_name()?))
    };
    let Some(log_abs) = canonical(log) else {
        return log.display().to_string();
    };
    let json_dir = json
        .and_then(canonical)
        .and_then(|j| j.parent().map(Path::to_path_buf));
    let Some(dir) = json_dir else {
        return log_abs.display().to_string();
    };
    relative_to(&log_abs, &dir).display().to_string()
}

/// `path` relative to `dir`, both absolute and canonical: the common prefix is dropped and each
/// remaining component of `dir` becomes `..`.
fn relative_to(path: &Path, dir: &Path) -> PathBuf {
    let p: Vec<_> = path.components().collect();
    let d: Vec<_> = dir.components().collect();
    let common = p.iter().zip(&d).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..d.len() {
        out.push("..");
    }
    for c in &p[common..] {
        out.push(c.as_os_str());
    }
    out
}

/// Files a run created, removed when it is dropped before the run completes (see `run`).
struct CreatedFiles(Vec<PathBuf>);

impl Drop for CreatedFiles {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device whose submit calls take long is named, with the fix; fast siblings, a volume's
    /// own members and a device alone on its worker are not.
    #[test]
    fn blocking_submissions_are_named_with_the_fix() {
        use nines_core::stats::DeviceRecorder;
        use nines_io::driver::{DeviceOutcome, DriverOutcome, WorkerOutcome};
        let rec = |slat_ns: u64, clat_ns: u64| {
            let (mut s, mut c) = (DeviceRecorder::new(), DeviceRecorder::new());
            for _ in 0..1000 {
                s.record(Op::Read, slat_ns, 4096);
                c.record(Op::Read, clat_ns, 4096);
            }
            (s, c)
        };
        let dev = |name: &str, members: Vec<u32>, parts: Vec<(DeviceRecorder, DeviceRecorder)>| {
            let n = parts.len();
            DeviceOutcome {
                name: name.into(),
                members,
                size_bytes: 1 << 30,
                recorder: DeviceRecorder::new(),
                per_job: Vec::new(),
                cpu: 0,
                ios_executed: 1000,
                layout: "passthrough",
                stats: serde_json::Value::Null,
                member_recs: Vec::new(),
                member_commands: vec![1000; n],
                member_errors: vec![0; n],
                member_slat: parts.iter().map(|p| p.0.clone()).collect(),
                member_clat: parts.iter().map(|p| p.1.clone()).collect(),
                member_submit_ns: vec![50_000_000; n],
                member_submit_calls: vec![1000; n],
            }
        };
        let outcome = |devices: Vec<DeviceOutcome>, groups: Vec<Vec<u32>>| DriverOutcome {
            workers: groups
                .into_iter()
                .enumerate()
                .map(|(i, devices)| WorkerOutcome {
                    index: i as u32,
                    cpu: 0,
                    devices,
                    usage: Default::default(),
                })
                .collect(),
            devices,
            measured_ns: 1_000_000_000,
            start_unix_ns: 0,
            warnings: Vec::new(),
            interrupted_ns: None,
        };
        let names: Vec<String> = ["zram0", "slow", "zram1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let paths: Vec<PathBuf> = ["/dev/zram0", "/var/tmp/slow", "/dev/zram1"]
            .iter()
            .map(PathBuf::from)
            .collect();
        // A file whose submit calls take 60 us shares a worker with two 3 us zram devices.
        let o = outcome(
            vec![
                dev("zram0", vec![0], vec![rec(2_000, 1_000)]),
                dev("slow", vec![1], vec![rec(60_000, 5_000)]),
                dev("zram1", vec![2], vec![rec(2_000, 1_000)]),
            ],
            vec![vec![0, 1, 2]],
        );
        let w = blocking_warnings(&o, &names, &paths);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            // Prose writes µs with a space, as the report does (it read "60.0us").
            w[0].starts_with("slow: its submissions blocked for 60 µs at p99")
                && w[0].contains("the 2 devices of other targets")
                && w[0].contains("--isolate /var/tmp/slow"),
            "{w:?}"
        );
        // One sibling is one device.
        let o = outcome(
            vec![
                dev("zram0", vec![0], vec![rec(2_000, 1_000)]),
                dev("slow", vec![1], vec![rec(60_000, 5_000)]),
            ],
            vec![vec![0, 1]],
        );
        let w = blocking_warnings(&o, &names, &paths);
        assert!(w[0].contains("the 1 device of other targets"), "{w:?}");
        // Alone on its worker (isolated): nothing to warn about.
        let o = outcome(
            vec![
                dev("zram0", vec![0], vec![rec(2_000, 1_000)]),
                dev("slow", vec![1], vec![rec(60_000, 5_000)]),
                dev("zram1", vec![2], vec![rec(2_000, 1_000)]),
            ],
            vec![vec![0, 2], vec![1]],
        );
        assert!(blocking_warnings(&o, &names, &paths).is_empty());
        // Members of one volume share its worker by design.
        let o = outcome(
            vec![dev(
                "raid",
                vec![0, 1, 2],
                vec![rec(2_000, 1_000), rec(60_000, 5_000), rec(2_000, 1_000)],
            )],
            vec![vec![0]],
        );
        assert!(blocking_warnings(&o, &names, &paths).is_empty());
    }

    #[test]
    fn one_worker_is_singular() {
        let ab = ["a".to_string(), "b".to_string()];
        let line = placement_line(EngineKind::Libaio, &ab, &[0], &[false, false]);
        assert!(line.contains("1 worker (one per CPU)"), "{line}");
        let line = placement_line(EngineKind::Psync, &ab, &[0], &[false, false]);
        assert!(line.contains("2 workers (psync"), "{line}");
        let line = placement_line(EngineKind::Libaio, &ab, &[0], &[false, true]);
        assert!(
            line.contains("2 workers (one per CPU, isolated") && line.contains("CPU 0: b"),
            "{line}"
        );
        // With a CPU to spare, the isolated target takes it.
        let abc = ["a".to_string(), "b".to_string(), "c".to_string()];
        let line = placement_line(EngineKind::Libaio, &abc, &[0, 1], &[false, false, true]);
        assert!(line.ends_with("CPU 0: a b; CPU 1: c"), "{line}");
    }
}
