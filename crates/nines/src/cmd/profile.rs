//! `nines profile`: measure every target's latency distribution in parallel with the real driver
//! (nines-io), then print the table and write the requested outputs.
//!
//! Order matters for "nothing written on a failure": parse and validate every option, open every
//! target (the safety checks run there), check every region, and create the output files under
//! temporary names in their final directories; only a run that succeeded renames them into place.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use nines_array::LayoutSpec;
use nines_core::units::{parse_cpu_list, parse_duration_ns};
use nines_core::workload::WorkloadSpec;
use nines_io::driver::DriverError;
use nines_io::engine::EngineKind;
use nines_io::profile::{ProfileError, ProfileEvents, ProfileSpec, profile};
use nines_io::scratch::ScratchFiles;
use nines_spec::{LogNames, RunSpec, TraceSpec};

use super::fio_export::FioArgs;
use super::workload_args::{EmuArgs, JobArgs, TraceArgs, VolumeArgs, WorkloadArgs};
use nines_core::jobfile::JobFile;
use nines_core::zbd::ZoneMode;

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
    /// I/O engine: psync, libaio (the default), io_uring, io_uring-poll, io_uring-cmd (NVMe
    /// passthrough on /dev/ngXnY, no block layer), io_uring-cmd-poll (the same, polled) or null
    /// (no I/O: the driver's own cost).
    #[arg(help_heading = "Host: engine, CPUs, scheduling")]
    #[arg(long = "engine", value_name = "ENGINE", value_parser = parse_engine)]
    pub engine_arg: Option<EngineKind>,
    /// A job file's zonemode=zbd options (the command line's replace them one by one).
    #[arg(skip)]
    pub job_zbd: Option<nines_core::zbd::ZbdOptions>,
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
    /// How offsets meet zones: none (as generated) or zbd (fio's zonemode=zbd, on host-managed
    /// zoned block devices: each write at the write pointer of a zone the run picks, sequential
    /// or random as --rw says, a full zone reset before it is written again, reads below the
    /// write pointers). Writing a zoned device alone needs zbd
    #[arg(help_heading = "Zoned devices (fio's zonemode=zbd)")]
    #[arg(long, value_name = "MODE", value_parser = parse_zonemode)]
    pub zonemode: Option<ZoneMode>,
    /// Zones written at once at most [default: the device's max_open_zones, else its
    /// max_active_zones]
    #[arg(help_heading = "Zoned devices (fio's zonemode=zbd)")]
    #[arg(long, value_name = "N", value_parser = parse_open_zones_arg)]
    pub max_open_zones: Option<u32>,
    /// Once the region's zones hold this share of its bytes (0 to 1), reset zones as
    /// --zone-reset-frequency says
    #[arg(help_heading = "Zoned devices (fio's zonemode=zbd)")]
    #[arg(long, value_name = "SHARE", value_parser = |s: &str| nines_core::zbd::parse_ratio("--zone-reset-threshold", s).map_err(|e| e.to_string()))]
    pub zone_reset_threshold: Option<f64>,
    /// Past the threshold, reset the zone written first once every 1/SHARE writes (0: never)
    #[arg(help_heading = "Zoned devices (fio's zonemode=zbd)")]
    #[arg(long, value_name = "SHARE", value_parser = |s: &str| nines_core::zbd::parse_ratio("--zone-reset-frequency", s).map_err(|e| e.to_string()))]
    pub zone_reset_frequency: Option<f64>,
    /// Reads go where generated, above the write pointers too (zeros there, no flash read)
    #[arg(help_heading = "Zoned devices (fio's zonemode=zbd)")]
    #[arg(long)]
    pub read_beyond_wp: bool,
    /// No O_DIRECT: go through the page cache (measures the cache, not the device).
    #[arg(help_heading = "Targets: writes and safety")]
    #[arg(long, conflicts_with = "direct")]
    pub buffered: bool,
    /// fio's direct: 1 (O_DIRECT, nines' default) or 0 (as --buffered); replaces a job file's
    /// direct= and the fio default (0) a job file without it gets.
    #[arg(help_heading = "Targets: writes and safety")]
    #[arg(long, value_name = "0|1", num_args = 0..=1, default_missing_value = "1",
          value_parser = ["0", "1"])]
    pub direct: Option<String>,
    /// fio's filename: the targets, `:`-separated (the same as giving them as arguments).
    #[arg(help_heading = "Targets: writes and safety")]
    #[arg(long, value_name = "A:B:...")]
    pub filename: Option<String>,
    /// Notes for the report (which of fio's defaults a job file got).
    #[arg(skip)]
    pub notes: Vec<String>,
    /// Write the report as JSON (schema: docs/report-schema.md).
    #[arg(help_heading = "Outputs")]
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    #[command(flatten)]
    pub fio: FioArgs,
    #[command(flatten)]
    pub fio_log: super::fio_log::FioLogArgs,
    /// A job file's fio text logs (write_lat_log, write_bw_log, ...), used without --fio-log.
    #[arg(skip)]
    pub job_fio_logs: nines_core::fiolog::FioLogSpec,
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

fn parse_zonemode(s: &str) -> Result<ZoneMode, String> {
    nines_core::zbd::parse_zone_mode(s).map_err(|e| e.to_string())
}

fn parse_open_zones_arg(s: &str) -> Result<u32, String> {
    match nines_core::zbd::parse_open_zones(s) {
        Ok(Some(n)) => Ok(n),
        Ok(None) => Err("give 1 or more (leave it out for the device's limit)".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// `--zonemode` and its options (a job file's where the command line gives none): the run's
/// zbd options, or None; the options without `--zonemode zbd` are refused.
fn zbd_options(
    args: &Args,
    file: Option<&nines_core::zbd::ZbdOptions>,
) -> Result<Option<nines_core::zbd::ZbdOptions>> {
    let cli_mode = args.zonemode;
    let given = args.max_open_zones.is_some()
        || args.zone_reset_threshold.is_some()
        || args.zone_reset_frequency.is_some()
        || args.read_beyond_wp;
    let mut z = match (cli_mode, file) {
        (Some(ZoneMode::None), _) => {
            if given {
                bail!(
                    "--max-open-zones, --zone-reset-* and --read-beyond-wp apply with --zonemode zbd; drop them or give --zonemode zbd"
                );
            }
            return Ok(None);
        }
        (Some(ZoneMode::Zbd), f) => f.cloned().unwrap_or_default(),
        (None, Some(f)) => f.clone(),
        (None, None) => {
            if given {
                bail!(
                    "--max-open-zones, --zone-reset-* and --read-beyond-wp apply with --zonemode zbd; add --zonemode zbd"
                );
            }
            return Ok(None);
        }
    };
    if let Some(n) = args.max_open_zones {
        z.max_open_zones = Some(n);
    }
    if let Some(t) = args.zone_reset_threshold {
        z.zone_reset_threshold = t;
    }
    if let Some(f) = args.zone_reset_frequency {
        z.zone_reset_frequency = f;
    }
    z.read_beyond_wp |= args.read_beyond_wp;
    Ok(Some(z))
}

/// What the fio exports take from a finished profile beside its report.
fn fio_run<'a>(args: &Args, done: &'a nines_io::profile::Profile) -> super::fio_export::FioRun<'a> {
    super::fio_export::FioRun {
        recorders: &done.recorders,
        job_recorders: Some(&done.job_recorders),
        parts: Some(&done.parts),
        depth: Some(&done.depth),
        group_reporting: args.fio.fio_group_reporting,
        percentiles: args.fio.fio_percentiles,
    }
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

/// A job file's run-wide settings, used where the command line gave none (its targets, end and
/// size replace the file's; its other workload options are defaults the file overrides).
fn apply_job_file(args: &mut Args, f: JobFile) -> Result<()> {
    let file = args.jobs.jobs.first().cloned().unwrap_or_default();
    if args.targets.is_empty() {
        args.targets = f.targets.iter().map(PathBuf::from).collect();
    } else if !f.targets.is_empty() {
        eprintln!("nines: the targets on the command line replace filename= of {file}");
    }
    // fio's defaults where the file left them to fio and the command line did not say.
    let mut applied = Vec::new();
    if args.engine_arg.is_none()
        && let Some(e) = &f.engine
    {
        args.engine_arg = Some(
            e.parse()
                .map_err(|e| anyhow::anyhow!("--job {file}: {e}"))?,
        );
        applied.extend(f.fio_defaults.iter().filter(|d| d.starts_with("ioengine")));
    }
    if args.direct.is_none() {
        args.buffered |= f.buffered;
        applied.extend(f.fio_defaults.iter().filter(|d| d.starts_with("direct")));
    }
    if !applied.is_empty() {
        let list: Vec<&str> = applied.iter().map(|s| s.as_str()).collect();
        args.notes.push(format!(
            "job file {file}: fio's defaults applied where it gives none: {} (nines' own \
             command-line defaults are libaio and O_DIRECT; give ioengine=/direct= in the file, \
             or --engine/--direct, to choose)",
            list.join(", ")
        ));
    }
    args.job_zbd = f.zbd.clone();
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
    args.job_fio_logs = f.fio_logs;
    Ok(())
}

pub fn run(mut args: Args) -> Result<()> {
    // 1. Options, a job file's among them, down into the run and the driver's settings.
    let mut opts = options(&mut args)?;
    // From here on SIGINT/SIGTERM only set a flag: the run stops, reports what it measured and
    // removes the embedded default's temporary files.
    nines_io::sched::install_interrupt_handler()
        .context("cannot install the SIGINT/SIGTERM handler")?;
    // 2. Targets: the embedded default's temporary files, or the user's (opened by the run,
    // with the safety checks).
    let scratch = embedded_default(&args, &mut opts.workload, opts.trace.is_some())?;
    let jobs = args.jobs.jobs_for(
        &opts.workload,
        opts.trace.is_some(),
        args.workload.runtime.is_some(),
    )?;
    // 3. Outputs, under temporary names until the run succeeds (cmd/output.rs).
    let mut outputs = super::output::RunOutputs::create(&super::output::RunOutputPaths {
        json: args.json.as_deref(),
        fio_json: args.fio.fio_json.as_deref(),
        fio_json_plus: args.fio.fio_json_plus.as_deref(),
        hdr_log: args.hdr_log.as_deref(),
        lat_log: args.lat_log.as_deref(),
    })?;
    let (fio_logs, fio_log) =
        super::fio_log::FioLogFiles::asked(&args.fio_log, &args.job_fio_logs)?;
    let recorded = |p: &Option<PathBuf>| {
        p.as_deref()
            .map(|p| recorded_log_path(p, args.json.as_deref()))
    };
    say_lat_log_size(
        &args,
        &jobs,
        &opts.layout,
        scratch.as_ref().map(|s| s.paths().len()),
    );
    let run = RunSpec {
        jobs,
        layout: opts.layout,
        trace: opts.trace,
        percentiles: opts.percentiles,
        logs: LogNames {
            lat_log: recorded(&args.lat_log),
            hdr_log: recorded(&args.hdr_log),
        },
    };
    let spec = ProfileSpec {
        targets: match &scratch {
            Some(s) => s.paths().to_vec(),
            None => args.targets.clone(),
        },
        embedded: scratch.is_some(),
        engine: args.engine,
        sqpoll: args.sqpoll,
        cpus: opts.cpus,
        isolate: args.isolate.clone(),
        rt_priority: args.rt_priority,
        mlock: !args.no_mlock,
        verify: args.verify,
        allow_writes: args.allow_writes,
        force: args.force,
        buffered: args.buffered,
        emu: args.emu.context(opts.workload.seed)?,
        lat_log: outputs.lat_log.take(),
        hdr_log: outputs.hdr_log.take(),
        fio_log,
        interval_ns: args.hdr_interval,
        progress: !args.quiet && std::io::stderr().is_terminal(),
        plan: args.plan.as_ref().map(|p| p.display().to_string()),
        notes: args.notes.clone(),
        zbd: opts.zbd.clone(),
    };
    // 4. The run, with the interrupt counters read before and after it (never during).
    let mut events = HostEvents {
        quiet: args.quiet,
        ..HostEvents::default()
    };
    let done = profile(run, spec, &mut events).map_err(|e| run_error(e, &args))?;
    // 5. Print (unless --quiet), then write the outputs.
    print_table(&args, &done);
    outputs.write_report(&done.report, &fio_run(&args, &done))?;
    outputs.commit()?;
    fio_logs.map(|f| f.commit()).transpose()?;
    if args.json.is_none() && !args.quiet {
        // A first run writes nothing: say how to keep it and look at it (a new user's next step).
        eprintln!(
            "next: add --json run.json to keep this run, then `nines report run.json -o run.html` \
             for its plots, or `nines compare` two runs"
        );
    }
    drop(scratch);
    if done.interrupted {
        // Everything is written and the temporary files are gone; say "interrupted" to the shell.
        crate::stdio::flush_out();
        std::process::exit(super::EXIT_INTERRUPTED);
    }
    Ok(())
}

/// The run's table and emulated-device lines on stdout, unless --quiet.
fn print_table(args: &Args, done: &nines_io::profile::Profile) {
    if !args.quiet {
        print!("{}", nines_report::table::render(&done.report));
        for line in &done.emu_lines {
            println!("{line}");
        }
    }
}

/// How large the per-I/O log can grow, said before the run (issue 31 item 21): `targets_embedded`
/// is the embedded default's file count when it runs.
fn say_lat_log_size(
    args: &Args,
    jobs: &[nines_core::job::JobSpec],
    layout: &LayoutSpec,
    targets_embedded: Option<usize>,
) {
    let Some(path) = &args.lat_log else {
        return;
    };
    if args.quiet {
        return;
    }
    let workloads: Vec<_> = jobs.iter().map(|j| j.workload.clone()).collect();
    let targets = targets_embedded.unwrap_or(args.targets.len());
    let volumes = layout.group(targets as u32).len().max(1);
    let free = nines_io::scratch::free_bytes(&super::latlog_estimate::dir_of(path));
    eprintln!(
        "nines: {}",
        super::latlog_estimate::note(path, &workloads, volumes, free)
    );
}

/// The options, checked: what the run is, and where its workers go.
struct Options {
    workload: WorkloadSpec,
    percentiles: Vec<f64>,
    layout: LayoutSpec,
    trace: Option<TraceSpec>,
    cpus: Vec<usize>,
    zbd: Option<nines_core::zbd::ZbdOptions>,
}

/// Parses and checks every option before a file is created or a byte written: the job file's,
/// the workload, layout and trace, CPUs (from a plan), scheduling, targets, inputs and outputs.
fn options(args: &mut Args) -> Result<Options> {
    if let Some(list) = args.filename.take() {
        if !args.targets.is_empty() {
            anyhow::bail!(
                "--filename {list}: the targets are given twice (as arguments too); give them once"
            );
        }
        args.targets = list
            .split(':')
            .filter(|t| !t.is_empty())
            .map(PathBuf::from)
            .collect();
        if args.targets.is_empty() {
            anyhow::bail!(
                "--filename {list:?}: names no target; give e.g. --filename /dev/nvme0n1"
            );
        }
    }
    let base = args.workload.to_spec()?;
    if let Some(f) = args.jobs.load_file(&base, &args.workload.replace())? {
        apply_job_file(args, f)?;
    }
    if args.direct.as_deref() == Some("0") {
        args.buffered = true;
    }
    args.engine = args.engine_arg.unwrap_or(EngineKind::Libaio);
    let workload = args.workload.to_spec()?;
    let percentiles = args.workload.percentiles()?;
    args.volume.check()?;
    let layout = args.volume.spec();
    let trace = match (args.trace.load()?, &args.trace.trace) {
        (Some(trace), Some(file)) => Some(TraceSpec {
            trace,
            file: file.clone(),
            fit: args.trace.fit_policy()?,
            depth: args.trace.trace_depth,
        }),
        _ => None,
    };
    let cpus = cpus(args)?;
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
    check_files(args, &layout)?;
    let volumes = if args.targets.is_empty() {
        DEFAULT_FILES
    } else {
        layout.group(args.targets.len() as u32).len()
    };
    check_buffer_memory(
        &args
            .jobs
            .jobs_for(&workload, trace.is_some(), args.workload.runtime.is_some())?,
        volumes as u64,
        super::hostmem::host_memory(),
    )?;
    let zbd = zbd_options(args, args.job_zbd.as_ref())?;
    Ok(Options {
        workload,
        percentiles,
        layout,
        trace,
        cpus,
        zbd,
    })
}

/// --cpus, or one CPU per target from --plan (in target order: the driver's round-robin then
/// gives target i the plan's CPU for it), or every CPU this process may use.
fn cpus(args: &Args) -> Result<Vec<usize>> {
    if let Some(path) = &args.plan {
        let plan = nines_host::plan::Plan::load(path)?;
        if args.targets.is_empty() {
            bail!(
                "--plan places named targets: give the plan's block devices as targets (the embedded default has none)"
            );
        }
        return args
            .targets
            .iter()
            .map(|t| {
                let text = t.to_string_lossy();
                plan.cpu_for(&text).with_context(|| {
                    format!(
                        "--plan {}: no CPU for {text}; plan it too (`nines tune --plan ... {text} -o PLAN`)",
                        path.display()
                    )
                })
            })
            .collect();
    }
    match &args.cpus {
        Some(list) => parse_cpu_list(list).map_err(|e| anyhow::anyhow!("--cpus: {e}")),
        None => Ok(nines_io::sched::allowed_cpus()),
    }
}

/// Targets, members and inputs: each a different file, and none of them an output; the outputs
/// checked now, before a file is created or a byte written.
fn check_files(args: &Args, layout: &LayoutSpec) -> Result<()> {
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
    super::output::RunOutputPaths {
        json: args.json.as_deref(),
        fio_json: args.fio.fio_json.as_deref(),
        fio_json_plus: args.fio.fio_json_plus.as_deref(),
        hdr_log: args.hdr_log.as_deref(),
        lat_log: args.lat_log.as_deref(),
    }
    .check()
}

/// Without targets, the embedded default: DEFAULT_FILES temporary files (8 s unless a length is
/// given), created now and removed when dropped.
fn embedded_default(
    args: &Args,
    workload: &mut WorkloadSpec,
    replay: bool,
) -> Result<Option<ScratchFiles>> {
    if !args.targets.is_empty() {
        return Ok(None);
    }
    let needed = workload.region_offset_bytes + workload.region_size_bytes.unwrap_or(0);
    let size = DEFAULT_FILE_BYTES.max(needed);
    if args.workload.runtime.is_none() && args.workload.ios.is_none() && !replay {
        workload.runtime_ns = Some(DEFAULT_RUNTIME_NS);
    }
    let runtime = match workload.runtime_ns {
        Some(ns) => nines_report::axis::format_ns(ns as f64),
        None => format!("{} I/Os per file", workload.ios_max.unwrap_or(0)),
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
    Ok(Some(created?))
}

/// What the binary adds to a profile: its notes and placement printed, the interrupts each
/// disk raised during the run (snapshots of /proc/interrupts before and after) and the host
/// summary of `nines doctor`.
#[derive(Default)]
struct HostEvents {
    /// --quiet: the placement line is not printed.
    quiet: bool,
    before: Option<Result<nines_host::IrqSnapshot, String>>,
    delta: Option<nines_host::IrqDelta>,
}

impl ProfileEvents for HostEvents {
    fn note(&mut self, text: &str) {
        eprintln!("nines: {text}");
    }

    fn placement(&mut self, line: &str) {
        if !self.quiet {
            println!("{line}");
        }
    }

    fn around_run(&mut self, after: bool) -> Option<String> {
        let now = nines_host::IrqSnapshot::read(Path::new("/")).map_err(|e| e.to_string());
        if !after {
            self.before = Some(now);
            return None;
        }
        match (self.before.take()?, now) {
            (Ok(before), Ok(after)) => {
                self.delta = Some(before.delta(&after));
                None
            }
            (Err(e), _) | (_, Err(e)) => Some(format!("per-device interrupts not reported: {e}")),
        }
    }

    fn interrupts(&mut self, irq_device: &str, cpu: usize) -> Option<serde_json::Value> {
        let delta = self.delta.as_ref()?;
        Some(nines_host::device_irq_report(irq_device, Some(cpu), delta))
    }

    fn host(&mut self) -> Option<serde_json::Value> {
        Some(nines_host::doctor_summary(Path::new("/")))
    }
}

/// A failed run in the user's words: the option behind a log or a trace.
fn run_error(e: ProfileError, args: &Args) -> anyhow::Error {
    // The driver writes the logs through descriptors: the message gets their option and path.
    let log = match &e {
        ProfileError::Driver(DriverError::Log { what, .. }) if *what == "latency log" => {
            Some(("--lat-log", args.lat_log.as_deref()))
        }
        ProfileError::Driver(DriverError::Log { .. }) => {
            Some(("--hdr-log", args.hdr_log.as_deref()))
        }
        _ => None,
    };
    match (log, e) {
        (Some((option, Some(path))), e) => {
            // Free space is the advice only when space ran out.
            let full = matches!(
                &e,
                ProfileError::Driver(DriverError::Log { error, .. })
                    if matches!(error.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
            );
            let advice = if full {
                " (free space there, or give a path on another filesystem)"
            } else {
                ""
            };
            anyhow::Error::new(e).context(format!("{option} {}{advice}", path.display()))
        }
        (_, ProfileError::Trace(e)) => anyhow::Error::new(e).context(format!(
            "--trace {}",
            args.trace
                .trace
                .as_deref()
                .unwrap_or(Path::new(""))
                .display()
        )),
        (_, ProfileError::Refused(m))
            if m.starts_with("--zonemode zbd") && args.zonemode.is_none() =>
        {
            // The job file asked for it.
            let file = args.jobs.jobs.first().cloned().unwrap_or_default();
            anyhow::anyhow!("--job {file}: zonemode=zbd: {m}")
        }
        (_, e) => anyhow::Error::new(e),
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
