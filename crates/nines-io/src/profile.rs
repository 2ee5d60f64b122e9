//! A profile as a library call (issue 32): [`profile`] takes a run ([`RunSpec`], shared with the
//! simulator) and what only the real driver has ([`ProfileSpec`]: the targets to open, the
//! engine, CPUs and scheduling, write permissions) and returns the report `nines profile`
//! prints. It prints nothing: notes, the placement line and host facts go through
//! [`ProfileEvents`]; the run stops early, and reports what it measured, once the process's
//! interrupt flag is set (by SIGINT/SIGTERM after `sched::install_interrupt_handler`, or by
//! [`crate::sched::interrupt`] from another thread).
//!
//! Order matters for "nothing written on a failure": every target is opened (the safety checks
//! run there) and every region checked before the run; target files this run creates are
//! removed again when it fails before it completes.
//!
//! ```
//! use nines_core::workload::WorkloadSpec;
//! use nines_io::profile::{ProfileSpec, profile};
//! use nines_spec::RunSpec;
//!
//! // 2000 4 KiB random reads at QD1 from a temporary 16 MiB file, with psync.
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("data.img");
//! std::fs::write(&path, vec![7u8; 16 << 20]).unwrap();
//! let workload = WorkloadSpec { ios_max: Some(2000), runtime_ns: None, ..Default::default() };
//! let mut spec = ProfileSpec::new(vec![path]);
//! spec.engine = nines_io::engine::EngineKind::Psync;
//! spec.mlock = false;
//! let done = profile(RunSpec::new(workload), spec, &mut ()).unwrap();
//! let read = &done.report.aggregate.read;
//! println!("p99 {} ns over {} reads", read.lat_ns.percentiles.get("99").unwrap(), read.ios);
//! assert_eq!(read.ios, 2000);
//! assert!(read.lat_ns.min_ns > 0 && read.lat_ns.min_ns <= read.lat_ns.max_ns);
//! ```

use std::fs::File;
use std::path::{Path, PathBuf};

use nines_array::LayoutSpec;
use nines_core::op::Op;
use nines_core::report::{
    DeviceMeta, NvmeReport, Report, ReportBuilder, RunConfig, RunKind, VolumeReport, WorkerReport,
};
use nines_core::stats::{DeviceRecorder, IoDepthCounts, LatencyParts};
use nines_core::units::format_ns;
use nines_spec::RunSpec;
use serde_json::{Map, json};

use crate::driver::{self, DriverConfig, DriverError, DriverOutcome, DriverTarget};
use crate::emu::EmuContext;
use crate::engine::{EngineKind, EngineOptions};
use crate::target::{Target, TargetError, TargetOptions, check_region};

/// What only a real run has: the targets and how to drive them.
#[derive(Debug)]
pub struct ProfileSpec {
    /// Files, block devices or `emu:` devices, as given (a write buffer's device is added).
    pub targets: Vec<PathBuf>,
    /// The targets are the embedded default's temporary files (named as created; a layout
    /// may write them without `allow_writes`).
    pub embedded: bool,
    pub engine: EngineKind,
    /// io_uring's SQPOLL.
    pub sqpoll: bool,
    /// CPUs the workers run on, assigned round-robin.
    pub cpus: Vec<usize>,
    /// Targets given a worker of their own (`--isolate`), as named in `targets`.
    pub isolate: Vec<PathBuf>,
    pub rt_priority: Option<u32>,
    /// Lock memory for the run (a failure is a warning).
    pub mlock: bool,
    /// Check the data read (`--verify`).
    pub verify: bool,
    pub allow_writes: bool,
    pub force: bool,
    /// Through the page cache (no O_DIRECT).
    pub buffered: bool,
    /// The budget and settings of emulated devices.
    pub emu: EmuContext,
    /// The logs, opened by the caller: per-I/O and interval histograms.
    pub lat_log: Option<File>,
    pub hdr_log: Option<File>,
    /// fio's text logs (`--fio-log`), their files opened at the start through the caller.
    pub fio_log: Option<crate::fiolog_sink::FioLogOut>,
    /// Interval of `hdr_log`.
    pub interval_ns: u64,
    /// A live progress line on stderr.
    pub progress: bool,
    /// The placement plan used, as the report names it.
    pub plan: Option<String>,
    /// What the caller wants said in the report's warnings (e.g. which of fio's defaults a
    /// job file got).
    pub notes: Vec<String>,
    /// fio's `zonemode=zbd` (`--zonemode zbd`): writes to host-managed zoned targets go at the
    /// write pointers of zones the run picks, reads stay in written data (nines_array::zbd).
    pub zbd: Option<nines_core::zbd::ZbdOptions>,
}

impl ProfileSpec {
    /// `targets` driven with libaio from the CPUs this process may use, memory locked, logs off.
    pub fn new(targets: Vec<PathBuf>) -> ProfileSpec {
        ProfileSpec {
            targets,
            embedded: false,
            engine: EngineKind::Libaio,
            sqpoll: false,
            cpus: crate::sched::allowed_cpus(),
            isolate: Vec::new(),
            rt_priority: None,
            mlock: true,
            verify: false,
            allow_writes: false,
            force: false,
            buffered: false,
            emu: EmuContext::default(),
            lat_log: None,
            hdr_log: None,
            fio_log: None,
            interval_ns: 1_000_000_000,
            progress: false,
            plan: None,
            notes: Vec::new(),
            zbd: None,
        }
    }
}

/// What a profile tells its caller while it runs (all optional).
pub trait ProfileEvents {
    /// A note for the user ("warning: ..." for warnings), also kept in the report when it is one.
    fn note(&mut self, _text: &str) {}
    /// Which worker on which CPU drives which targets, once, before the run.
    fn placement(&mut self, _line: &str) {}
    /// Called right before and right after the run (the caller's host snapshots); a warning
    /// returned is kept in the report.
    fn around_run(&mut self, _after: bool) -> Option<String> {
        None
    }
    /// What the report says of the interrupts a target's disk raised during the run, for a
    /// target on `cpu` (see `nines_host::device_irq_report`), and the host summary.
    fn interrupts(&mut self, _irq_device: &str, _cpu: usize) -> Option<serde_json::Value> {
        None
    }
    fn host(&mut self) -> Option<serde_json::Value> {
        None
    }
}

impl ProfileEvents for () {}

/// A finished profile: the report, and what the fio exports and the table's emu lines need.
#[derive(Debug)]
pub struct Profile {
    pub report: Report,
    /// Each target's recorder, and per job.
    pub recorders: Vec<DeviceRecorder>,
    pub job_recorders: Vec<Vec<DeviceRecorder>>,
    /// Each target's latency split as fio splits it (slat, clat), where a volume I/O is one
    /// member command (a single unshaped device); None for other volumes.
    pub parts: Vec<Option<LatencyParts>>,
    /// Each target's queue-depth distributions, as fio's `iodepth_*`.
    pub depth: Vec<IoDepthCounts>,
    /// One line per emulated device (preset, scale, the emulation's own overhead).
    pub emu_lines: Vec<String>,
    /// Stopped by SIGINT/SIGTERM: the report covers what was measured.
    pub interrupted: bool,
}

/// Why a profile did not run to a report.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The trace does not fit the volumes (the caller names its file).
    #[error(transparent)]
    Trace(#[from] nines_trace::TraceError),
    /// A combination refused before anything was written; the message says what to do.
    #[error("{0}")]
    Refused(String),
}

/// Opens the targets (with the safety checks), checks every region, runs and reports.
pub fn profile(
    mut run: RunSpec,
    mut spec: ProfileSpec,
    events: &mut dyn ProfileEvents,
) -> Result<Profile, ProfileError> {
    let opened = open_targets(&run, &spec)?;
    // The trace moves into the driver (no copy of its records); the spec keeps its settings.
    let records = run.trace.as_mut().map(|t| {
        let empty = nines_trace::Trace::from_records(Vec::new(), t.trace.format);
        std::mem::replace(&mut t.trace, empty)
    });
    let mut cfg = driver_config(&run, records, &mut spec, &opened.paths)?;
    // Zone geometry (zoned emu: models and block devices) and FDP handles from the members;
    // writes a zoned device cannot take are refused here, before any I/O.
    let targets: Vec<&Target> = opened.targets.iter().collect();
    crate::resolve::from_targets_zbd(&mut cfg.layout, &targets, opened.writes, spec.zbd.as_ref())
        .map_err(ProfileError::Refused)?;
    if spec.zbd.as_ref().is_some_and(|z| z.read_beyond_wp) && spec.verify {
        return Err(ProfileError::Refused(
            "--read-beyond-wp reads above the write pointers, where a zoned device returns \
             zeros, so --verify would fail there; drop one of them"
                .into(),
        ));
    }
    let volumes = driver::validate(&opened.driver_targets, &cfg)?;
    if let (Some(mut trace), Some(t)) = (cfg.trace.take(), run.trace.as_ref()) {
        // Fit the trace's devices onto the volumes and its offsets into the smallest.
        let size = volumes.iter().map(|v| v.size_bytes).min().unwrap_or(0);
        let fit = trace.fit(size, volumes.len() as u32, t.fit)?;
        if fit.out_of_range > 0 {
            events.note(&format!(
                "{} trace requests ended beyond the {size}-byte target; moved them ({})",
                fit.out_of_range, t.fit
            ));
        }
        cfg.trace = Some(trace);
    }
    let names: Vec<String> = volumes.iter().map(|v| v.name.clone()).collect();
    let mut warnings = opened.sparse.clone();
    warnings.extend(spec.notes.iter().cloned());
    let _mlock = match spec.mlock {
        false => None,
        true => match crate::sched::lock_memory() {
            Ok(()) => Some(MemoryLock),
            // Unlocked is still a useful measurement: say what it risks, once, and go on.
            Err(e) => {
                let w = mlock_warning(&e);
                events.note(&format!("warning: {w}"));
                warnings.push(w);
                None
            }
        },
    };
    let isolated = isolated_volumes(&volumes, &cfg.isolate);
    events.placement(&placement_line(spec.engine, &names, &spec.cpus, &isolated));
    let trace = cfg
        .trace
        .as_ref()
        .map(|t| (t.shape(), t.stats(), t.format, t.records.len()));
    // Identify and the first SMART read before the host snapshot, the last after it: their
    // admin queue interrupts stay out of the run's.
    let mut opened = opened;
    opened.nvme = nvme_before(&opened.targets, &opened.names, &mut warnings);
    events.around_run(false);
    let outcome = driver::run(&opened.driver_targets, cfg)?;
    warnings.extend(events.around_run(true));
    nvme_after(&opened.targets, &mut opened.nvme);
    // The run happened: the files it created hold its data and stay, as fio's do.
    opened.created.0.clear();
    if let Some(ns) = outcome.interrupted_ns {
        let w = format!(
            "interrupted after {:.1} s: the report covers what was measured until then",
            ns as f64 * 1e-9
        );
        events.note(&w);
        warnings.push(w);
    }
    let report = build_report(&run, &spec, &opened, &outcome, trace, warnings, events);
    let recorders = outcome.devices.iter().map(|d| d.recorder.clone()).collect();
    let job_recorders = (0..report.jobs.len())
        .map(|j| {
            outcome
                .devices
                .iter()
                .map(|d| d.per_job.get(j).cloned().unwrap_or_default())
                .collect()
        })
        .collect();
    let emu_lines = emu_report(&opened.targets, &opened.names)
        .into_iter()
        .map(|(line, _)| line)
        .collect();
    let parts = outcome
        .devices
        .iter()
        .map(|d| {
            (d.members.len() == 1 && run.layout.shaping().is_none()).then(|| LatencyParts {
                slat: d.member_slat[0].clone(),
                clat: d.member_clat[0].clone(),
            })
        })
        .collect();
    let depth = outcome.devices.iter().map(|d| d.depth).collect();
    Ok(Profile {
        report,
        recorders,
        job_recorders,
        parts,
        depth,
        emu_lines,
        interrupted: outcome.interrupted_ns.is_some(),
    })
}

/// The targets of a run, opened.
struct Opened {
    /// As given, with a write buffer's device last.
    paths: Vec<PathBuf>,
    targets: Vec<Target>,
    names: Vec<String>,
    driver_targets: Vec<DriverTarget>,
    /// Reads of holes in sparse files, one warning each.
    sparse: Vec<String>,
    created: CreatedFiles,
    /// The run writes the targets (the workload or the layout).
    writes: bool,
    /// Per target: its NVMe identify data and SMART logs (None: not an NVMe device).
    nvme: Vec<Option<NvmeReport>>,
}

/// Opens every target with the safety checks (and the write permission the run needs) and
/// checks each job's region on each independent target.
fn open_targets(run: &RunSpec, spec: &ProfileSpec) -> Result<Opened, ProfileError> {
    let layout = &run.layout;
    let jobs = &run.jobs;
    // A write buffer writes its device, and flushes what it holds to the members even when the
    // workload only reads (after a restart); a rebuild writes its replacement.
    let workload_writes = match &run.trace {
        // A flush counts: it is an fdatasync of the target, so a replay with flushes asks for
        // allow_writes on a block device like one with writes (the cautious side).
        Some(t) => t.trace.records.iter().any(|r| r.op == Op::Write),
        None => jobs.iter().any(|j| j.workload.writes()),
    };
    // Named files are written by a write workload without allow_writes (as fio does), but a
    // workload that only reads must not change the user's files behind their back: a layout
    // that writes its members on its own (a persisted serial volume formats members without
    // its superblock, a rebuild, a write buffer's flushes) needs the explicit permission.
    if layout.writes_members() && !workload_writes && !spec.allow_writes && !spec.embedded {
        return Err(ProfileError::Refused(format!(
            "this layout writes its members on its own although the workload only reads \
             (--persist formats members that hold no serial volume, --rebuild writes the \
             replacement, --buffer flushes); pass --allow-writes to let it write {}",
            spec.targets
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let writes = layout.writes_members() || workload_writes;
    let mut paths = spec.targets.clone();
    if let Some(b) = layout.shaping().and_then(|s| s.buffer.as_ref()) {
        // The buffer device is the volume's last member.
        paths.push(PathBuf::from(&b.device));
    }
    let open_limit = crate::sched::open_files_limit();
    // Each target takes a descriptor; keep room for the logs, the engines and the standard ones.
    if paths.len() as u64 + 32 > open_limit {
        return Err(ProfileError::Refused(format!(
            "{} targets are more than this process may open (open-file limit {open_limit}); raise it with `ulimit -n {}` or pass fewer targets",
            paths.len(),
            paths.len() + 64
        )));
    }
    let topts = TargetOptions {
        write: writes,
        allow_writes: spec.allow_writes,
        force: spec.force,
        buffered: spec.buffered,
        create_size_bytes: member_bytes_needed(
            layout,
            jobs,
            paths.len() as u64 - u64::from(layout.extra_members()),
        ),
    };
    // Target files this run creates go again if it fails before the run completes (a later
    // check such as alignment, a failed start): a refused run leaves nothing behind.
    // Target::open removes what it created when the open itself fails.
    let mut created = CreatedFiles(
        paths
            .iter()
            .filter(|p| {
                p.to_str().and_then(crate::emu::EmuSpec::parse).is_none()
                    && std::fs::symlink_metadata(p).is_err()
            })
            .map(|p| (p.clone(), None))
            .collect(),
    );
    let mut targets = Vec::with_capacity(paths.len());
    for p in &paths {
        targets.push(Target::open_with(p, &topts, &spec.emu)?);
        created.opened(p);
    }
    check_passthrough(&targets, spec.engine, layout)?;
    if *layout.base() == LayoutSpec::Independent
        && layout.extra_members() == 0
        && run.trace.is_none()
    {
        // Each target is the volume: the target's own messages name the fix.
        for t in &targets {
            for j in jobs {
                let w = &j.workload;
                let size = w
                    .region_size_bytes
                    .unwrap_or_else(|| t.size_bytes().saturating_sub(w.region_offset_bytes));
                check_region(t, w.region_offset_bytes, size, w.block_size_bytes)?;
            }
        }
    }
    let names = unique_names(&targets, spec.embedded);
    let sparse = crate::sparse::sparse_read_warnings(
        &targets,
        &names,
        jobs,
        run.trace
            .as_ref()
            .map(|t| t.trace.records.iter().any(|r| r.op == Op::Read)),
        *layout.base() != LayoutSpec::Independent || layout.extra_members() > 0,
    );
    let driver_targets = targets
        .iter()
        .zip(&names)
        .map(|(t, name)| DriverTarget {
            name: name.clone(),
            fd: t.fd(),
            size_bytes: t.size_bytes(),
            logical_block_bytes: t.logical_block_bytes(),
            block_device: t.is_block_device(),
            emu: t.emu().cloned(),
            zoned: t.zoned().cloned(),
        })
        .collect();
    Ok(Opened {
        paths,
        targets,
        names,
        driver_targets,
        sparse,
        created,
        writes,
        nvme: Vec::new(),
    })
}

/// The driver's configuration; the logs move into it. A replay is validated as one (its job
/// carries no pattern), then fitted to the volumes.
fn driver_config(
    run: &RunSpec,
    trace: Option<nines_trace::Trace>,
    spec: &mut ProfileSpec,
    paths: &[PathBuf],
) -> Result<DriverConfig, ProfileError> {
    Ok(DriverConfig {
        spec: run.workload().clone(),
        jobs: run.jobs.clone(),
        layout: run.layout.clone(),
        trace,
        trace_depth: run
            .trace
            .as_ref()
            .map_or(nines_spec::TRACE_DEPTH_DEFAULT, |t| t.depth),
        verify: spec.verify,
        isolate: isolate_indices(&spec.isolate, paths)?,
        engine: spec.engine,
        engine_options: EngineOptions {
            sqpoll: spec.sqpoll,
            sqpoll_cpu: None,
        },
        cpus: spec.cpus.clone(),
        rt_priority: spec.rt_priority,
        // Locked by `profile` instead, before the placement is told.
        mlock: false,
        lat_log: spec.lat_log.take(),
        hdr_log: spec.hdr_log.take(),
        fio_log: spec.fio_log.take(),
        interval_ns: spec.interval_ns,
        progress: spec.progress,
        zbd: spec.zbd.clone(),
    })
}

/// The trace replayed, once fitted: its shape (the workload the report describes), totals,
/// format and requests.
type TraceFacts = (
    nines_trace::TraceShape,
    nines_trace::TraceStats,
    nines_trace::TraceFormat,
    usize,
);

/// The report of a finished run: the run's settings and host identity, each target (a volume
/// with its members, or one device), each job, the workers, and every warning.
fn build_report(
    run: &RunSpec,
    spec: &ProfileSpec,
    opened: &Opened,
    outcome: &DriverOutcome,
    trace: Option<TraceFacts>,
    warnings: Vec<String>,
    events: &mut dyn ProfileEvents,
) -> Report {
    let (targets, names) = (&opened.targets, &opened.names);
    let layout = &run.layout;
    let mut workload = run.workload().clone();
    // A replay's workload is what the trace held (as `nines sim` reports it), not the workload
    // options' defaults (randread, 50% reads): its direction and read share, its most common
    // request size, and as iodepth the most requests in flight per target (--trace-depth).
    if let (Some((shape, _, _, _)), Some(t)) = (&trace, &run.trace) {
        workload.rw = shape.rw;
        workload.read_mix_pct = shape.read_mix_pct;
        workload.block_size_bytes = shape.block_size_bytes_mode;
        workload.iodepth = t.depth;
        workload.ios_max = None;
        workload.rate_iops = None;
        workload.thinktime_ns = 0;
    }
    let config = RunConfig {
        workload: workload.clone(),
        engine: spec.engine.to_string(),
        percentiles: run.percentiles.clone(),
        measured_ns: outcome.measured_ns,
        start_unix_ns: Some(outcome.start_unix_ns),
        lat_log: run.logs.lat_log.clone(),
        hdr_log: run.logs.hdr_log.clone(),
        extra: report_extra(run, spec, opened, outcome, trace.as_ref()),
    };
    let mut b = ReportBuilder::new(RunKind::Profile, config);
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
            let interrupts = events.interrupts(&irq_device(t), d.cpu);
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
            let mut zoned = zoned_internals(t, d.member_zoned.get(k).copied().flatten());
            if single
                && d.layout == "zbd"
                && let Some(z) = zoned
                    .as_mut()
                    .and_then(|z| z.get_mut("zoned"))
                    .and_then(|z| z.as_object_mut())
            {
                // --zonemode zbd: what the placement did (resets, finishes, each zone's pointer).
                z.insert("zbd".into(), d.stats.clone());
            }
            let nvme = opened.nvme.get(m as usize).cloned().flatten();
            if single {
                b.device_extra(interrupts, zoned);
                b.device_nvme(nvme);
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
                zoned,
            );
            mr.interrupts = interrupts;
            mr.nvme = nvme;
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
    for (j, job) in run.jobs.iter().enumerate() {
        let per_target: Vec<_> = outcome
            .devices
            .iter()
            .map(|d| d.per_job.get(j).cloned().unwrap_or_default())
            .collect();
        // A replay's one job is the trace, described as config.workload describes it.
        if trace.is_some() {
            b.job("trace", &workload, &per_target);
            break;
        }
        b.job(job.name.as_str(), &job.workload, &per_target);
    }
    for w in off_cpu_warnings(&off_cpu) {
        b.warn(w);
    }
    // Printed once, with the table's other warnings (it was on stderr as well).
    for w in blocking_warnings(outcome, names, &opened.paths, spec.embedded) {
        b.warn(w);
    }
    if let Some(h) = events.host() {
        b.host(h);
    }
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
    for warning in outcome.warnings.iter().chain(&warnings) {
        b.warn(warning.clone());
    }
    b.finish()
}

/// A host-managed zoned block device's part of the report (`internals`): its zones and what
/// its write ordering counted. Such a device has no GC of its own (the host cleans zones), so
/// its GC units moved are 0 by construction, reported under the simulator's name.
pub fn zoned_internals(
    t: &Target,
    stats: Option<crate::zoned::ZoneSeqStats>,
) -> Option<serde_json::Value> {
    let z = t.zoned()?;
    let g = &z.geometry;
    let mut zoned = json!({
        "model": "host-managed",
        "zone_size_bytes": g.zone_size_bytes,
        "zone_capacity_bytes": g.zone_capacity_bytes,
        "zones": g.zones,
        "max_open_zones": g.max_open_zones,
        "max_active_zones": g.max_active_zones,
    });
    if let (Some(st), Some(o)) = (
        stats.and_then(|s| serde_json::to_value(s).ok()),
        zoned.as_object_mut(),
    ) && let Some(st) = st.as_object()
    {
        o.extend(st.clone());
    }
    Some(json!({
        "zoned": zoned,
        "gc_units_moved": 0,
        "gc_note": "a host-managed zoned device has no GC of its own: 0 by construction",
    }))
}

/// Each target's NVMe identify data and first SMART log, read before the run; `None` for a
/// target that is not an NVMe device (a file, zram, `emu:`). An NVMe device whose identify
/// fails is a warning, not a failed run.
fn nvme_before(
    targets: &[Target],
    names: &[String],
    warnings: &mut Vec<String>,
) -> Vec<Option<NvmeReport>> {
    use crate::nvme::{NvmeDevice, Probe};
    targets
        .iter()
        .zip(names)
        .map(|(t, name)| {
            if !t.is_block_device() {
                return None;
            }
            let read = NvmeDevice::open(t.path()).and_then(|p| match p {
                Probe::Nvme(dev) => dev.report().map(Some),
                Probe::NotNvme(_) => Ok(None),
            });
            read.unwrap_or_else(|e| {
                warnings.push(format!("{name}: no NVMe identify data in the report: {e}"));
                None
            })
        })
        .collect()
}

/// The SMART logs after the run, and what the run changed, for each NVMe target.
fn nvme_after(targets: &[Target], reports: &mut [Option<NvmeReport>]) {
    use crate::nvme::{NvmeDevice, Probe};
    for (t, r) in targets.iter().zip(reports.iter_mut()) {
        let Some(r) = r else { continue };
        match NvmeDevice::open(t.path()) {
            Ok(Probe::Nvme(dev)) => dev.finish_report(r),
            Ok(Probe::NotNvme(why)) => r.notes.push(format!("after the run: {why}")),
            Err(e) => r.notes.push(format!("after the run: {e}")),
        }
    }
}

/// One warning per disk and CPU whose interrupts were served off the submitting CPU.
fn off_cpu_warnings(off_cpu: &[(String, usize, Vec<String>, serde_json::Value)]) -> Vec<String> {
    off_cpu
        .iter()
        .map(|(disk, cpu, on, v)| {
            let served: Vec<String> = v["served_by_cpu"]
                .as_object()
                .map(|m| m.iter().map(|(c, n)| format!("CPU {c}: {n}")).collect())
                .unwrap_or_default();
            let holding = if on.len() == 1 && on[0] == *disk {
                String::new()
            } else {
                format!(" (holding {})", on.join(", "))
            };
            format!(
                "{disk}{holding}: {} of its {} interrupts were served off the submitting CPU {cpu} ({}); steer them with `nines tune --plan`/`--apply`",
                v["off_cpu_count"], v["total"], served.join(", ")
            )
        })
        .collect()
}

/// The report's `config.extra`: the host's identity, each target's device model, the run's
/// settings, the emulated devices and the trace.
fn report_extra(
    run: &RunSpec,
    spec: &ProfileSpec,
    opened: &Opened,
    outcome: &DriverOutcome,
    trace: Option<&TraceFacts>,
) -> Map<String, serde_json::Value> {
    let layout = &run.layout;
    let mut extra = Map::new();
    extra.insert("cpus".into(), json!(spec.cpus));
    // Which host measured this, so merged fleet reports keep each run's identity.
    if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        extra.insert("hostname".into(), json!(h.trim()));
    }
    if let Ok(k) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        extra.insert("kernel".into(), json!(k.trim()));
    }
    // Each target's device model (a file: the disk holding it), for the report's reader.
    let mut models = Map::new();
    for (t, name) in opened.targets.iter().zip(&opened.names) {
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
    extra.insert("sqpoll".into(), json!(spec.sqpoll));
    extra.insert("rt_priority".into(), json!(spec.rt_priority));
    extra.insert("mlock".into(), json!(spec.mlock));
    extra.insert("buffered".into(), json!(spec.buffered));
    extra.insert("embedded_default".into(), json!(spec.embedded));
    extra.insert("plan".into(), json!(spec.plan));
    if let Some(z) = &spec.zbd {
        extra.insert(
            "zonemode".into(),
            json!({
                "mode": "zbd",
                "max_open_zones": z.max_open_zones,
                "zone_reset_threshold": z.zone_reset_threshold,
                "zone_reset_frequency": z.zone_reset_frequency,
                "read_beyond_wp": z.read_beyond_wp,
            }),
        );
    }
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
    extra.insert("verify".into(), json!(spec.verify));
    let emu_lines = emu_report(&opened.targets, &opened.names);
    if !emu_lines.is_empty() {
        extra.insert(
            "emu".into(),
            json!({
                "memory_budget_bytes": spec.emu.budget_bytes(),
                "charged_bytes": spec.emu.used_bytes(),
                "devices": emu_lines.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>(),
            }),
        );
    }
    if let (Some(t), Some((_, ts, format, requests))) = (&run.trace, trace) {
        extra.insert(
            "trace".into(),
            json!({
                "format": format.to_string(),
                "requests": requests,
                "reads": ts.reads,
                "writes": ts.writes,
                "fua_writes": ts.fua_writes,
                "flushes": ts.flushes,
                "bytes": ts.bytes,
                "duration_ns": ts.duration_ns,
                "replay": "open loop: each request is issued at its arrival time relative to the first, latency counts from it",
                "file": t.file.display().to_string(),
            }),
        );
    }
    extra
}

/// Devices whose submit calls block long enough to delay the others on their worker: their p99
/// submit call is over 10 us and longer than the typical I/O of a device sharing the worker.
/// One warning each, with the figure and the fix (`--isolate`). The embedded default's targets
/// are temporary files, gone when the user reads the advice: it then names none.
fn blocking_warnings(
    outcome: &DriverOutcome,
    names: &[String],
    paths: &[PathBuf],
    embedded: bool,
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
                let fix = if embedded {
                    "on your own devices, give such a target a worker of its own with --isolate \
                     TARGET (the embedded default's files are temporary, removed after the run)"
                        .to_string()
                } else {
                    format!(
                        "give it a worker of its own with --isolate {}",
                        paths[m].display()
                    )
                };
                warnings.push(format!(
                    "{}: its submissions blocked for {} at p99 ({:.1}% of the run inside submit calls), and the {} of other targets on its worker (CPU {}) wait behind them; {fix}",
                    names[m],
                    format_ns(p99 as f64),
                    share * 100.0,
                    match others.len() {
                        1 => "1 device".to_string(),
                        k => format!("{k} devices"),
                    },
                    w.cpu,
                ));
            }
        }
    }
    warnings
}

/// Which targets `--isolate` names (by the path as given, or its canonical form).
fn isolate_indices(isolate: &[PathBuf], paths: &[PathBuf]) -> Result<Vec<u32>, ProfileError> {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    isolate
        .iter()
        .map(|want| {
            paths
                .iter()
                .position(|p| p == want || canon(p) == canon(want))
                .map(|i| i as u32)
                .ok_or_else(|| {
                    ProfileError::Refused(format!(
                        "--isolate {}: not one of the targets; name it as on the command line",
                        want.display()
                    ))
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

/// NVMe generic devices (`/dev/ngXnY`) take NVMe commands only: the passthrough engine, and
/// only it, drives them, each target on its own (volumes issue flushes, trims and zone commands
/// that this engine does not carry yet).
fn check_passthrough(
    targets: &[Target],
    engine: crate::engine::EngineKind,
    layout: &LayoutSpec,
) -> Result<(), ProfileError> {
    let cmd = matches!(
        engine,
        crate::engine::EngineKind::IoUringCmd | crate::engine::EngineKind::IoUringCmdPoll
    );
    for t in targets {
        match (t.generic(), cmd) {
            (Some(_), false) => {
                return Err(ProfileError::Refused(format!(
                    "{} is an NVMe generic device: only --engine io_uring-cmd (NVMe passthrough) drives it; for --engine {engine} use its block device {}",
                    t.path().display(),
                    t.generic()
                        .map(|(n, _)| n.block_path.display().to_string())
                        .unwrap_or_default()
                )));
            }
            (None, true) if t.emu().is_none() => {
                return Err(ProfileError::Refused(format!(
                    "--engine io_uring-cmd sends NVMe commands to NVMe generic devices (/dev/ngXnY); {} is not one: give the namespace's /dev/ngXnY, or use --engine io_uring for files and block devices",
                    t.path().display()
                )));
            }
            (None, true) => {
                return Err(ProfileError::Refused(format!(
                    "--engine io_uring-cmd drives real NVMe generic devices (/dev/ngXnY), not emulated ones like {}",
                    t.path().display()
                )));
            }
            _ => {}
        }
    }
    if cmd && (*layout.base() != LayoutSpec::Independent || layout.extra_members() > 0) {
        return Err(ProfileError::Refused(
            "--engine io_uring-cmd runs each /dev/ngXnY on its own (--layout independent); volumes need flushes and trims it does not carry: use --engine io_uring over the block devices"
                .into(),
        ));
    }
    Ok(())
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
    if let Some((ns, _)) = t.generic() {
        // Passthrough commands complete on the namespace's controller queues.
        return ns.block_path.to_string_lossy().into_owned();
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
            let us = |ns: u64| format_ns(ns as f64);
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
fn mlock_warning(e: &crate::sched::SchedError) -> String {
    match e {
        crate::sched::SchedError::Mlock { limit, error } => format!(
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
        crate::sched::unlock_memory();
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
    let cpu_of = crate::sched::assign_isolating(cpus, isolated);
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

/// Files a run created, removed when it is dropped before the run completes (see `run`): each
/// with the device and inode it had once opened, so only the file this run made is removed
/// (not one that replaced it at the path since).
struct CreatedFiles(Vec<(PathBuf, Option<(u64, u64)>)>);

impl CreatedFiles {
    /// Target `p` is open: its identity, if this run created it.
    fn opened(&mut self, p: &std::path::Path) {
        use std::os::unix::fs::MetadataExt;
        for (q, id) in &mut self.0 {
            if q.as_path() == p {
                *id = std::fs::symlink_metadata(p)
                    .ok()
                    .filter(|m| m.file_type().is_file())
                    .map(|m| (m.dev(), m.ino()));
            }
        }
    }
}

impl Drop for CreatedFiles {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        for (p, id) in &self.0 {
            let same = std::fs::symlink_metadata(p)
                .is_ok_and(|m| m.file_type().is_file() && Some((m.dev(), m.ino())) == *id);
            if same {
                let _ = std::fs::remove_file(p);
            }
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
        use crate::driver::{DeviceOutcome, WorkerOutcome};
        use nines_core::stats::DeviceRecorder;
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
                member_zoned: vec![None; n],
                member_slat: parts.iter().map(|p| p.0.clone()).collect(),
                member_clat: parts.iter().map(|p| p.1.clone()).collect(),
                member_submit_ns: vec![50_000_000; n],
                member_submit_calls: vec![1000; n],
                depth: Default::default(),
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
        // The embedded default's files are gone by the time the advice is read: none is named.
        let e = blocking_warnings(&o, &names, &paths, true);
        assert!(
            !e[0].contains("/var/tmp/slow") && e[0].contains("--isolate TARGET"),
            "{e:?}"
        );
        let w = blocking_warnings(&o, &names, &paths, false);
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
        let w = blocking_warnings(&o, &names, &paths, false);
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
        assert!(blocking_warnings(&o, &names, &paths, false).is_empty());
        // Members of one volume share its worker by design.
        let o = outcome(
            vec![dev(
                "raid",
                vec![0, 1, 2],
                vec![rec(2_000, 1_000), rec(60_000, 5_000), rec(2_000, 1_000)],
            )],
            vec![vec![0]],
        );
        assert!(blocking_warnings(&o, &names, &paths, false).is_empty());
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
