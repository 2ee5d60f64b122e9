//! The real driver: runs a workload on open targets with worker threads and an engine per worker,
//! and returns, per target (a device, or an array volume over several devices), its recorders,
//! plus what each worker cost.
//!
//! Layout (the paper's Fig. 5): the workload's targets are volumes (each independent device is a
//! volume of one member; `--layout raid0` makes one volume of all of them). Volumes are assigned
//! round-robin over the chosen CPUs. With an asynchronous engine there is one worker thread per
//! CPU used, and it drives every member of its volumes through one engine (one ring or AIO
//! context), so a volume's policy sees each member complete; with psync there is one thread per
//! volume, pinned to its CPU. The main thread only collects: interval histograms for the
//! HdrHistogram log and the progress line, and at the end the workers' recorders.
//!
//! The worker loop (`worker::run`) is the hot path: per I/O it reads CLOCK_MONOTONIC once when
//! submitting and once when reaping, records one histogram value, and optionally appends one
//! 24-byte record to a preallocated log buffer. Nothing is allocated, formatted or locked there.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use nines_array::{LayoutSpec, Volume, VolumeParams};
use nines_core::hdrlog::IntervalLog;
use nines_core::job::{JobSpec, validate_jobs};
use nines_core::latlog::{self, LatLogHeader, RECORD_BYTES};
use nines_core::op::Op;
use nines_core::stats::DeviceRecorder;
use nines_core::workload::WorkloadSpec;
use nines_trace::{Trace, TraceReplay};

use crate::clock;
use crate::engine::{EngineKind, EngineOptions};
use crate::latlog_sink::{LatLogLane, LatLogSink};
pub use crate::plan::DriverError;
use crate::plan::{
    IntervalMsg, MemberPlan, Published, RunShared, VolumePlan, VolumeResult, WorkerPlan,
    WorkerResult,
};
use crate::sched::{self, ThreadUsage};
use crate::worker;

/// One open target as the driver sees it. The caller keeps the file descriptor open for the run.
#[derive(Clone, Debug)]
pub struct DriverTarget {
    pub name: String,
    pub fd: RawFd,
    pub size_bytes: u64,
    pub logical_block_bytes: u32,
    /// A block device (trim is a discard ioctl) rather than a regular file (a punched hole).
    pub block_device: bool,
    /// An emulated SSD (`emu:`; `fd` is -1): the worker drives its model instead of the engine.
    pub emu: Option<crate::emu::EmuHandle>,
    /// A host-managed zoned block device: its zones when opened. The worker orders its zone
    /// writes and carries out zone commands (crate::zoned).
    pub zoned: Option<Arc<crate::zoned::ZonedDevice>>,
}

/// How to run.
#[derive(Debug)]
pub struct DriverConfig {
    /// The workload; with `jobs` empty it is the one job ("job0"), otherwise the jobs replace it.
    /// Its runtime and ramp are the run's.
    pub spec: WorkloadSpec,
    pub jobs: Vec<JobSpec>,
    /// How targets form volumes.
    pub layout: LayoutSpec,
    /// A trace to replay instead of the jobs, already fitted to the volumes (one device id per
    /// volume, offsets inside it).
    pub trace: Option<Trace>,
    /// Most trace requests in flight per volume.
    pub trace_depth: u32,
    /// Check every read against the pattern writes carry (`--verify`).
    pub verify: bool,
    /// Targets (indices) whose volume gets a worker of its own.
    pub isolate: Vec<u32>,
    pub engine: EngineKind,
    pub engine_options: EngineOptions,
    /// CPUs for the workers; volumes go round-robin over them. Must not be empty.
    pub cpus: Vec<usize>,
    /// SCHED_FIFO priority of the workers.
    pub rt_priority: Option<u32>,
    /// Lock all memory (mlockall) for the run.
    pub mlock: bool,
    /// Per-I/O log, already created (the driver writes the header).
    pub lat_log: Option<File>,
    /// Interval histogram log, already created.
    pub hdr_log: Option<File>,
    /// fio's text logs (lat/clat/slat, bw, iops, clat_hist), opened at the start.
    pub fio_log: Option<crate::fiolog_sink::FioLogOut>,
    /// Length of one interval of the HdrHistogram log and of the progress line.
    pub interval_ns: u64,
    /// Print a live status line on stderr.
    pub progress: bool,
    /// fio's `zonemode=zbd` over host-managed zoned targets (`--zonemode zbd`): each such
    /// independent target is a [`nines_array::Zbd`] volume.
    pub zbd: Option<nines_core::zbd::ZbdOptions>,
}

impl DriverConfig {
    /// A configuration with defaults for everything but the workload and the engine: one job,
    /// independent targets, every allowed CPU, no logs.
    pub fn new(spec: WorkloadSpec, engine: EngineKind) -> DriverConfig {
        DriverConfig {
            spec,
            jobs: Vec::new(),
            layout: LayoutSpec::Independent,
            trace: None,
            trace_depth: 1024,
            verify: false,
            isolate: Vec::new(),
            engine,
            engine_options: EngineOptions::default(),
            cpus: sched::allowed_cpus(),
            rt_priority: None,
            mlock: false,
            lat_log: None,
            hdr_log: None,
            fio_log: None,
            interval_ns: 1_000_000_000,
            progress: false,
            zbd: None,
        }
    }

    /// The jobs that run: the given ones, or the workload as one job.
    pub fn effective_jobs(&self) -> Vec<JobSpec> {
        if self.jobs.is_empty() {
            vec![JobSpec {
                name: "job0".into(),
                workload: self.spec.clone(),
            }]
        } else {
            self.jobs.clone()
        }
    }
}

/// What one target (a device, or a volume) measured.
#[derive(Debug, Clone)]
pub struct DeviceOutcome {
    pub name: String,
    /// Indices (into the driver's targets) of its member devices.
    pub members: Vec<u32>,
    /// Capacity offered to the workload.
    pub size_bytes: u64,
    /// Merged over jobs.
    pub recorder: DeviceRecorder,
    /// Per job, job order (one entry for a trace replay).
    pub per_job: Vec<DeviceRecorder>,
    pub cpu: usize,
    /// I/Os executed, including those of the ramp.
    pub ios_executed: u64,
    pub layout: &'static str,
    /// The volume policy's counters.
    pub stats: serde_json::Value,
    /// Each member's command latencies (empty for a single device, or too many members).
    pub member_recs: Vec<DeviceRecorder>,
    pub member_commands: Vec<u64>,
    pub member_errors: Vec<u64>,
    /// Per member: what a zoned block device's write ordering counted (None: not zoned).
    pub member_zoned: Vec<Option<crate::zoned::ZoneSeqStats>>,
    /// Per member: submission latency (the submit call; empty for psync, whose I/O happens in
    /// the call), completion latency (from the call's return until the completion was seen;
    /// psync: the whole call), time spent inside submit calls and how many there were.
    pub member_slat: Vec<DeviceRecorder>,
    pub member_clat: Vec<DeviceRecorder>,
    pub member_submit_ns: Vec<u64>,
    pub member_submit_calls: Vec<u64>,
    /// fio's queue-depth distributions (`iodepth_level/submit/complete`), measured time.
    pub depth: nines_core::stats::IoDepthCounts,
}

/// What one worker thread cost.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerOutcome {
    pub index: u32,
    pub cpu: usize,
    /// Indices of the targets (volumes) it drove.
    pub devices: Vec<u32>,
    pub usage: ThreadUsage,
}

/// The result of a run.
#[derive(Debug)]
pub struct DriverOutcome {
    /// One per target: a device, or a volume.
    pub devices: Vec<DeviceOutcome>,
    pub workers: Vec<WorkerOutcome>,
    /// From the end of the ramp to the last measured completion, at most the runtime.
    pub measured_ns: u64,
    pub start_unix_ns: u64,
    pub warnings: Vec<String>,
    /// Set when SIGINT/SIGTERM stopped the run ([`sched::interrupted`]): nanoseconds from the
    /// time origin to when the collector saw it. What was measured until then is in `devices`.
    pub interrupted_ns: Option<u64>,
}

/// Records per buffer of the per-I/O log and buffers per worker: 4 x 1.5 MiB per worker holds
/// about 260 000 I/Os, a quarter second of a busy worker, which rides out writer hiccups.
const LATLOG_RECORDS_PER_BUFFER: usize = 64 * 1024;
const LATLOG_BUFFERS_PER_WORKER: usize = 4;

/// The directions any job of the run does.
fn ops_of(jobs: &[JobSpec], trace: Option<&Trace>) -> Vec<Op> {
    let (reads, writes) = match trace {
        Some(t) => {
            let ts = t.stats();
            (ts.reads > 0, ts.writes > 0)
        }
        None => (
            jobs.iter()
                .any(|j| j.workload.rw.reads(j.workload.read_mix_pct)),
            jobs.iter().any(|j| j.workload.writes()),
        ),
    };
    Op::ALL
        .into_iter()
        .filter(|op| match op {
            Op::Read => reads,
            Op::Write => writes,
        })
        .collect()
}

/// A volume's name: the device's for a single member, else the layout and its members.
pub fn volume_name(layout: &LayoutSpec, members: &[&str]) -> String {
    if members.len() == 1 {
        return members[0].to_string();
    }
    let joined = members.join("+");
    if joined.len() <= 48 {
        format!("{}({joined})", layout.name())
    } else {
        format!("{}({} devices)", layout.name(), members.len())
    }
}

/// Groups volumes into workers: one per CPU used (asynchronous engines), one per volume (psync),
/// and one of its own for each isolated volume (`--isolate`: a device whose slow submissions
/// would delay the others on its worker). Returns (cpu, volumes) per worker.
pub fn worker_groups(
    cpu_of_volume: &[usize],
    engine: EngineKind,
    isolated: &[bool],
) -> Vec<(usize, Vec<u32>)> {
    let mut groups: Vec<(usize, Vec<u32>, bool)> = Vec::new();
    for (d, &cpu) in cpu_of_volume.iter().enumerate() {
        let alone = engine == EngineKind::Psync || isolated.get(d).copied().unwrap_or(false);
        let existing = if alone {
            None
        } else {
            groups.iter_mut().find(|(c, _, solo)| *c == cpu && !*solo)
        };
        match existing {
            Some((_, devs, _)) => devs.push(d as u32),
            None => groups.push((cpu, vec![d as u32], alone)),
        }
    }
    groups.into_iter().map(|(c, d, _)| (c, d)).collect()
}

/// Each volume's members and capacity, and what the workload needs of it, checked.
pub struct VolumeGeometry {
    pub members: Vec<u32>,
    pub name: String,
    pub size_bytes: u64,
    pub block_bytes: u32,
}

/// Interval-log tags are shared with the simulator: one definition in nines-core.
pub use nines_core::stats::hdr_tag;

/// Checks what can be checked before any thread or file exists: placement, priority, the jobs,
/// each volume's layout over its members, and each job's fit on each volume (region, block
/// alignment). Returns the volumes.
pub fn validate(
    targets: &[DriverTarget],
    cfg: &DriverConfig,
) -> Result<Vec<VolumeGeometry>, DriverError> {
    if targets.is_empty() {
        return Err(DriverError::NoTargets);
    }
    if targets.len() > latlog::DEVICES_MAX {
        return Err(DriverError::TooManyTargets(targets.len()));
    }
    sched::check_cpus(&cfg.cpus)?;
    if let Some(p) = cfg.rt_priority {
        sched::probe_rt_priority(p)?;
    }
    let jobs = cfg.effective_jobs();
    if cfg.trace.is_none() {
        validate_jobs(&jobs)?;
    }
    let mut volumes = Vec::new();
    for group in cfg.layout.group(targets.len() as u32) {
        let members: Vec<&DriverTarget> = group.clone().map(|i| &targets[i as usize]).collect();
        let names: Vec<&str> = members.iter().map(|t| t.name.as_str()).collect();
        let name = volume_name(&cfg.layout, &names);
        let sizes: Vec<u64> = members.iter().map(|t| t.size_bytes).collect();
        let block_bytes = members
            .iter()
            .map(|t| t.logical_block_bytes)
            .max()
            .unwrap_or(512);
        let vol = nines_array::build(
            &cfg.layout,
            &VolumeParams {
                member_sizes_bytes: &sizes,
                block_bytes,
                tags: 1,
                len_bytes_max: block_bytes,
            },
        )
        .map_err(|error| DriverError::Volume {
            volume: name.clone(),
            error,
        })?;
        let size_bytes = vol.size_bytes();
        if cfg.trace.is_none() {
            for job in &jobs {
                nines_core::workload::Generator::new(
                    &job.workload,
                    size_bytes,
                    block_bytes,
                    volumes.len() as u32,
                    0,
                )
                .map_err(|source| DriverError::Workload {
                    device: if jobs.len() > 1 {
                        format!("{name} (job {})", job.name)
                    } else {
                        name.clone()
                    },
                    error: source,
                })?;
            }
        }
        volumes.push(VolumeGeometry {
            members: group.collect(),
            name,
            size_bytes,
            block_bytes,
        });
    }
    if volumes.len() > latlog::DEVICES_MAX {
        return Err(DriverError::TooManyTargets(volumes.len()));
    }
    Ok(volumes)
}

/// Runs the workload on `targets` and returns what was measured.
pub fn run(targets: &[DriverTarget], mut cfg: DriverConfig) -> Result<DriverOutcome, DriverError> {
    let volumes = validate(targets, &cfg)?;
    let jobs = cfg.effective_jobs();
    let mut warnings = Vec::new();
    let deepest = jobs.iter().map(|j| j.workload.iodepth).max().unwrap_or(1);
    let iodepth_max = if cfg.engine == EngineKind::Psync {
        if deepest > 1 || cfg.trace.is_some() {
            warnings.push(format!(
                "psync performs one I/O at a time per device: --iodepth {deepest} ran as 1; use libaio or io_uring for deeper queues",
            ));
        }
        1
    } else {
        u32::MAX
    };
    let isolated: Vec<bool> = volumes
        .iter()
        .map(|v| v.members.iter().any(|m| cfg.isolate.contains(m)))
        .collect();
    let cpu_of_volume = sched::assign_isolating(&cfg.cpus, &isolated);
    let groups = worker_groups(&cpu_of_volume, cfg.engine, &isolated);
    // A trace is split by volume now (its device ids are volume indices after fitting).
    let mut replays: Vec<Option<TraceReplay>> = match &cfg.trace {
        Some(t) => {
            let block = volumes.iter().map(|v| v.block_bytes).max().unwrap_or(512);
            TraceReplay::per_target(t, volumes.len() as u32, block, 0)
                .map_err(|e| DriverError::Trace(e.to_string()))?
                .into_iter()
                .map(Some)
                .collect()
        }
        None => volumes.iter().map(|_| None).collect(),
    };

    if cfg.mlock {
        sched::lock_memory()?;
    }
    let result = run_locked(
        targets,
        &volumes,
        &mut replays,
        &jobs,
        &mut cfg,
        iodepth_max,
        &cpu_of_volume,
        &groups,
        &mut warnings,
    );
    if cfg.mlock {
        sched::unlock_memory();
    }
    let (devices, workers, measured_ns, start_unix_ns, interrupted_ns) = result?;
    Ok(DriverOutcome {
        devices,
        workers,
        measured_ns,
        start_unix_ns,
        warnings,
        interrupted_ns,
    })
}

type RunParts = (
    Vec<DeviceOutcome>,
    Vec<WorkerOutcome>,
    u64,
    u64,
    Option<u64>,
);

#[allow(clippy::too_many_arguments)]
fn run_locked(
    targets: &[DriverTarget],
    volumes: &[VolumeGeometry],
    replays: &mut [Option<TraceReplay>],
    jobs: &[JobSpec],
    cfg: &mut DriverConfig,
    iodepth_max: u32,
    cpu_of_volume: &[usize],
    groups: &[(usize, Vec<u32>)],
    warnings: &mut Vec<String>,
) -> Result<RunParts, DriverError> {
    let names: Vec<String> = volumes.iter().map(|v| v.name.clone()).collect();
    let want_intervals = cfg.hdr_log.is_some() || cfg.progress;
    let shared = Arc::new(RunShared {
        abort: AtomicBool::new(false),
        published: groups.iter().map(|_| Published::default()).collect(),
        gate: Barrier::new(groups.len() + 1),
        start_ns: AtomicU64::new(0),
        lanes: Mutex::new(groups.iter().map(|_| None).collect()),
        fio_lanes: Mutex::new(groups.iter().map(|_| None).collect()),
    });
    let (ival_tx, ival_rx) = mpsc::sync_channel::<IntervalMsg>(volumes.len() * 4 + 4);
    let mut spare_txs = Vec::new();
    let mut plans = Vec::new();
    for (w, (cpu, vols)) in groups.iter().enumerate() {
        let intervals = if want_intervals {
            let (spare_tx, spare_rx) = spare_recorders(vols.len());
            spare_txs.push(Some(spare_tx));
            Some((ival_tx.clone(), spare_rx))
        } else {
            spare_txs.push(None);
            None
        };
        plans.push(WorkerPlan {
            index: w,
            cpu: *cpu,
            volumes: volume_plans(targets, volumes, replays, vols),
            layout: cfg.layout.clone(),
            jobs: jobs.to_vec(),
            trace_depth: cfg.trace_depth,
            engine: cfg.engine,
            engine_options: cfg.engine_options,
            iodepth_max,
            rt_priority: cfg.rt_priority,
            verify_seed: cfg.verify.then_some(jobs[0].workload.seed),
            zbd: cfg.zbd.clone(),
            // Both set at the gate, once every worker is set up.
            start_ns: 0,
            interval_ns: cfg.interval_ns.max(1_000_000),
            intervals,
            lat_log: None,
            fio_log: None,
            targets: volumes.len() as u32,
            shared: shared.clone(),
        });
    }
    drop(ival_tx);
    assert_eq!(plans.len(), groups.len(), "one plan per worker");
    let handles = spawn_workers(plans)?;
    let started = start_at_gate(cfg, &names, groups.len(), &shared);
    let (start_ns, start_unix_ns) = (started.start_ns, started.start_unix_ns);
    let mut progress = cfg.progress.then(|| {
        let w = &jobs[0].workload;
        Progress::new(
            start_ns,
            w.ramp_ns,
            w.runtime_ns.map(|r| r + w.ramp_ns),
            names.clone(),
        )
    });
    let Started {
        sink,
        mut hdr,
        fio,
        mut collect_error,
        ..
    } = started;
    let interrupted_ns = collect(
        &Collector {
            shared: &shared,
            handles: &handles,
            ival_rx: &ival_rx,
            spare_txs: &spare_txs,
            start_ns,
        },
        &mut hdr,
        &mut collect_error,
        &mut progress,
    );
    let (results, first_error) = join_workers(handles);
    let first_error = finish_logs(sink, hdr, fio, first_error);
    if let Some(e) = first_error.or(collect_error) {
        return Err(e);
    }
    assert_eq!(results.len(), groups.len(), "every worker returned");
    let (devices, workers, last_ns) = outcomes(results, volumes, cpu_of_volume, groups, warnings);
    let measured_ns = measured_span_ns(&jobs[0].workload, start_ns, last_ns, interrupted_ns);
    Ok((devices, workers, measured_ns, start_unix_ns, interrupted_ns))
}

/// A channel of spare interval recorders for a worker of `vols` volumes, filled: two per volume,
/// one in the collector's hands, one ready for the next swap.
fn spare_recorders(
    vols: usize,
) -> (
    mpsc::SyncSender<Box<DeviceRecorder>>,
    mpsc::Receiver<Box<DeviceRecorder>>,
) {
    // Two spares per volume: one in the collector's hands, one ready for the next swap.
    let (spare_tx, spare_rx) = mpsc::sync_channel(vols * 3);
    for _ in 0..vols * 2 {
        spare_tx
            .send(Box::new(DeviceRecorder::new()))
            .expect("receiver alive");
    }
    (spare_tx, spare_rx)
}

/// The plans of one worker's volumes: each member's descriptor and the volume's trace replay
/// (taken: each replay goes to one worker).
fn volume_plans(
    targets: &[DriverTarget],
    volumes: &[VolumeGeometry],
    replays: &mut [Option<TraceReplay>],
    vols: &[u32],
) -> Vec<VolumePlan> {
    vols.iter()
        .map(|&v| {
            let g = &volumes[v as usize];
            VolumePlan {
                index: v,
                name: g.name.clone(),
                members: g
                    .members
                    .iter()
                    .map(|&m| {
                        let t = &targets[m as usize];
                        MemberPlan {
                            name: t.name.clone(),
                            fd: t.fd,
                            emu: t.emu.clone(),
                            zoned: t.zoned.clone(),
                            size_bytes: t.size_bytes,
                            logical_block_bytes: t.logical_block_bytes,
                            block_device: t.block_device,
                        }
                    })
                    .collect(),
                trace: replays[v as usize].take(),
            }
        })
        .collect()
}

type WorkerHandle = std::thread::JoinHandle<Result<WorkerResult, DriverError>>;

/// One thread per worker plan, named `nines-wN`.
fn spawn_workers(plans: Vec<WorkerPlan>) -> Result<Vec<WorkerHandle>, DriverError> {
    plans
        .into_iter()
        .map(|plan| {
            let name = format!("nines-w{}", plan.index);
            std::thread::Builder::new()
                .name(name)
                .spawn(move || worker::run(plan))
        })
        .collect::<Result<_, _>>()
        // Threads already started then wait at the gate for good; this only happens when the
        // system is out of threads, and the process ends with the error anyway.
        .map_err(|e| DriverError::Panic(format!("cannot start a worker thread: {e}")))
}

/// What the gate set up: the common time origin and the open logs (or why they did not open,
/// in which case the workers were told to abort).
struct Started {
    start_ns: u64,
    start_unix_ns: u64,
    sink: Option<LatLogSink>,
    hdr: Option<HdrLog>,
    fio: Option<LatLogSink>,
    collect_error: Option<DriverError>,
}

/// Waits until every worker is set up (engine, buffers), opens the logs, then releases the
/// workers with the common time origin.
fn start_at_gate(
    cfg: &mut DriverConfig,
    names: &[String],
    workers: usize,
    shared: &RunShared,
) -> Started {
    // Every worker is set up (engine, buffers): choose the common time origin, a little ahead so
    // each has passed the gate before the first I/O is due; the wall-clock start is shifted by
    // the same amount so log timestamps line up.
    shared.gate.wait();
    let setup_ns = 5_000_000;
    let start_ns = clock::now_ns() + setup_ns;
    let start_unix_ns = clock::unix_now_ns() + setup_ns;
    let opened = open_logs(cfg, names, workers, start_unix_ns).and_then(|(sink, lanes, hdr)| {
        let (fio, fio_lanes) = open_fio_logs(cfg, names.len(), workers)?;
        Ok((sink, lanes, hdr, fio, fio_lanes))
    });
    let (sink, hdr, fio, collect_error) = match opened {
        Ok((sink, lanes, hdr, fio, fio_lanes)) => {
            *shared.lanes.lock().expect("no worker holds the lanes yet") = lanes;
            *shared
                .fio_lanes
                .lock()
                .expect("no worker holds the lanes yet") = fio_lanes;
            (sink, hdr, fio, None)
        }
        Err(e) => {
            shared.abort.store(true, Ordering::Relaxed);
            (None, None, None, Some(e))
        }
    };
    shared.start_ns.store(start_ns, Ordering::Relaxed);
    shared.gate.wait();
    Started {
        start_ns,
        start_unix_ns,
        sink,
        hdr,
        fio,
        collect_error,
    }
}

/// What the collector reads while the workers run.
struct Collector<'a> {
    shared: &'a RunShared,
    handles: &'a [WorkerHandle],
    ival_rx: &'a mpsc::Receiver<IntervalMsg>,
    spare_txs: &'a [Option<mpsc::SyncSender<Box<DeviceRecorder>>>],
    start_ns: u64,
}

/// Collects intervals (and watches for SIGINT/SIGTERM) until every worker has finished; returns
/// when, after the start, an interrupt stopped the run.
fn collect(
    c: &Collector,
    hdr: &mut Option<HdrLog>,
    collect_error: &mut Option<DriverError>,
    progress: &mut Option<Progress>,
) -> Option<u64> {
    let mut interrupted_ns = None;
    loop {
        if interrupted_ns.is_none() && sched::interrupted() {
            // SIGINT/SIGTERM: stop the workers; they drain what is in flight and return what
            // they measured, which is reported like a run that ended.
            interrupted_ns = Some(clock::now_ns().saturating_sub(c.start_ns));
            c.shared.abort.store(true, Ordering::Relaxed);
        }
        match c.ival_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(mut msg) => {
                if let Some(h) = hdr.as_mut()
                    && collect_error.is_none()
                    && let Err(e) = h.write(&msg, c.start_ns)
                {
                    *collect_error = Some(e);
                    c.shared.abort.store(true, Ordering::Relaxed);
                }
                if let Some(p) = progress.as_mut() {
                    p.add(msg.device, &msg.rec);
                }
                msg.rec.reset();
                if let Some(tx) = &c.spare_txs[msg.worker] {
                    let _ = tx.try_send(msg.rec);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            // Without interval histograms there is no sender at all: keep polling for an
            // interrupt until the workers are done.
            Err(RecvTimeoutError::Disconnected) => {
                if c.handles.iter().all(|h| h.is_finished()) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        if let Some(p) = progress.as_mut() {
            p.tick(c.shared);
        }
    }
    if let Some(p) = progress.as_mut() {
        p.clear();
    }
    interrupted_ns
}

/// Every worker's result, and the first error (a worker's, or its panic) if any.
fn join_workers(handles: Vec<WorkerHandle>) -> (Vec<WorkerResult>, Option<DriverError>) {
    let mut results = Vec::new();
    let mut first_error = None;
    for h in handles {
        match h.join() {
            Ok(Ok(r)) => results.push(r),
            Ok(Err(e)) => {
                if first_error.is_none() {
                    first_error = Some(e);
                }
            }
            Err(p) => {
                let what = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                first_error.get_or_insert(DriverError::Panic(what));
            }
        }
    }
    (results, first_error)
}

/// Finishes the per-I/O and HdrHistogram logs; the first error, the workers' first.
fn finish_logs(
    sink: Option<LatLogSink>,
    hdr: Option<HdrLog>,
    fio: Option<LatLogSink>,
    mut first_error: Option<DriverError>,
) -> Option<DriverError> {
    if let Some(fio) = fio
        && let Err(source) = fio.finish()
    {
        first_error.get_or_insert(DriverError::Log {
            what: "fio log",
            error: source,
        });
    }
    if let Some(sink) = sink {
        let r = sink.finish();
        if let Err(source) = r {
            first_error.get_or_insert(DriverError::Log {
                what: "latency log",
                error: source,
            });
        }
    }
    if let Some(h) = hdr
        && let Err(e) = h.finish()
    {
        first_error.get_or_insert(e);
    }
    first_error
}

/// Each target's and worker's outcome from the workers' results (warnings added to
/// `warnings`), and the last measured completion.
fn outcomes(
    results: Vec<WorkerResult>,
    volumes: &[VolumeGeometry],
    cpu_of_volume: &[usize],
    groups: &[(usize, Vec<u32>)],
    warnings: &mut Vec<String>,
) -> (Vec<DeviceOutcome>, Vec<WorkerOutcome>, Option<u64>) {
    let mut devices: Vec<Option<DeviceOutcome>> = volumes.iter().map(|_| None).collect();
    let mut workers = Vec::new();
    let mut last_ns: Option<u64> = None;
    for (w, r) in results.into_iter().enumerate() {
        if let Some(t) = r.last_measured_completion_ns {
            last_ns = Some(last_ns.map_or(t, |l| l.max(t)));
        }
        if r.latlog_stalls > 0 {
            warnings.push(format!(
                "worker {w} waited {} for the per-I/O log writer (the log's disk is slower than the I/O rate); those waits delayed I/O",
                nines_core::units::counted(r.latlog_stalls, "time", "times")
            ));
        }
        if r.interval_misses > 0 {
            warnings.push(format!(
                "worker {w}: {} interval histograms were merged into the next interval because the collector lagged",
                r.interval_misses
            ));
        }
        let mut devs = Vec::new();
        for v in r.volumes {
            devs.push(v.index);
            let g = &volumes[v.index as usize];
            warnings.extend(v.warnings.iter().map(|w| format!("{}: {w}", g.name)));
            let (index, cpu) = (v.index as usize, cpu_of_volume[v.index as usize]);
            devices[index] = Some(device_outcome(g, cpu, v));
        }
        workers.push(WorkerOutcome {
            index: w as u32,
            cpu: groups[w].0,
            devices: devs,
            usage: r.usage,
        });
    }
    let devices: Vec<DeviceOutcome> = devices
        .into_iter()
        .map(|d| d.expect("every volume belongs to one worker"))
        .collect();
    (devices, workers, last_ns)
}

/// One target's outcome: its jobs' recorders merged, its members' counters.
fn device_outcome(g: &VolumeGeometry, cpu: usize, v: VolumeResult) -> DeviceOutcome {
    let mut recorder = DeviceRecorder::new();
    for j in &v.per_job {
        recorder.merge_from(j);
    }
    DeviceOutcome {
        name: g.name.clone(),
        members: g.members.clone(),
        size_bytes: g.size_bytes,
        recorder,
        per_job: v.per_job,
        cpu,
        ios_executed: v.issued,
        layout: v.layout,
        stats: v.stats,
        member_recs: v.member_recs,
        member_commands: v.member_commands,
        member_errors: v.member_errors,
        member_zoned: v.member_zoned,
        member_slat: v.member_slat,
        member_clat: v.member_clat,
        member_submit_ns: v.member_submit_ns,
        member_submit_calls: v.member_submit_calls,
        depth: v.depth,
    }
}

/// The measured time: ramp end to the last measured completion, at most the runtime and the
/// time until an interrupt, at least 1 ns.
fn measured_span_ns(
    w: &WorkloadSpec,
    start_ns: u64,
    last_ns: Option<u64>,
    interrupted_ns: Option<u64>,
) -> u64 {
    let measure_from_ns = start_ns + w.ramp_ns;
    let mut measured_ns = last_ns.map_or(0, |t| t.saturating_sub(measure_from_ns));
    if let Some(r) = w.runtime_ns {
        measured_ns = measured_ns.min(r);
    }
    if let Some(i) = interrupted_ns {
        measured_ns = measured_ns.min(i.saturating_sub(w.ramp_ns));
    }
    measured_ns.max(1)
}

type OpenedLogs = (Option<LatLogSink>, Vec<Option<LatLogLane>>, Option<HdrLog>);

/// fio records per buffer of the fio text logs' lanes (48 bytes each: 3 MiB a buffer).
const FIOLOG_RECORDS_PER_BUFFER: usize = 64 * 1024;

/// Opens fio's text logs (one set per fio job: `jobs x targets`) and starts their writer.
fn open_fio_logs(
    cfg: &mut DriverConfig,
    targets: usize,
    workers: usize,
) -> Result<(Option<LatLogSink>, Vec<Option<LatLogLane>>), DriverError> {
    let Some(mut out) = cfg.fio_log.take().filter(|o| o.spec.any()) else {
        return Ok((None, (0..workers).map(|_| None).collect()));
    };
    let jobs = if cfg.trace.is_some() {
        1
    } else {
        cfg.effective_jobs().len()
    };
    let fio_error = |error: io::Error| DriverError::Log {
        what: "fio log",
        error,
    };
    let writer = crate::fiolog_sink::FioLogWriter::open(&mut out, (jobs * targets) as u32)
        .map_err(|e| fio_error(io::Error::other(e)))?;
    let (sink, lanes) = LatLogSink::start(
        writer,
        workers,
        LATLOG_BUFFERS_PER_WORKER,
        FIOLOG_RECORDS_PER_BUFFER,
        nines_core::fiolog::FIO_RECORD_BYTES,
        cfg.rt_priority,
    )
    .map_err(fio_error)?;
    Ok((Some(sink), lanes.into_iter().map(Some).collect()))
}

/// Writes the per-I/O log's header and starts its writer, and starts the HdrHistogram log.
fn open_logs(
    cfg: &mut DriverConfig,
    names: &[String],
    workers: usize,
    start_unix_ns: u64,
) -> Result<OpenedLogs, DriverError> {
    let (sink, lanes) = match cfg.lat_log.take() {
        Some(mut file) => {
            latlog::write_header(
                &mut file,
                &LatLogHeader {
                    devices: names.to_vec(),
                    start_unix_ns,
                },
            )
            .map_err(|source| DriverError::Log {
                what: "latency log",
                error: source,
            })?;
            let (sink, lanes) = LatLogSink::start(
                file,
                workers,
                LATLOG_BUFFERS_PER_WORKER,
                LATLOG_RECORDS_PER_BUFFER,
                RECORD_BYTES,
                cfg.rt_priority,
            )
            .map_err(|source| DriverError::Log {
                what: "latency log",
                error: source,
            })?;
            (Some(sink), lanes.into_iter().map(Some).collect())
        }
        None => (None, (0..workers).map(|_| None).collect()),
    };
    let hdr = match cfg.hdr_log.take() {
        Some(f) => Some(HdrLog::new(
            f,
            start_unix_ns,
            names,
            &ops_of(&cfg.effective_jobs(), cfg.trace.as_ref()),
        )?),
        None => None,
    };
    Ok((sink, lanes, hdr))
}

/// The HdrHistogram interval log, written by the collector (main thread), off the hot path,
/// through the one writer both drivers share ([`IntervalLog`]).
struct HdrLog(IntervalLog<io::BufWriter<File>>);

fn log_error(source: io::Error) -> DriverError {
    DriverError::Log {
        what: "HdrHistogram log",
        error: source,
    }
}

impl HdrLog {
    fn new(
        file: File,
        start_unix_ns: u64,
        names: &[String],
        ops: &[Op],
    ) -> Result<Self, DriverError> {
        IntervalLog::start(
            io::BufWriter::new(file),
            "nines profile: interval latency histograms in nanoseconds, one tag per device and direction",
            start_unix_ns,
            names,
            ops,
        )
        .map(HdrLog)
        .map_err(log_error)
    }

    fn write(&mut self, msg: &IntervalMsg, start_ns: u64) -> Result<(), DriverError> {
        self.0
            .write(
                msg.device as usize,
                &msg.rec,
                msg.start_ns.saturating_sub(start_ns),
                msg.end_ns.saturating_sub(msg.start_ns),
            )
            .map_err(log_error)
    }

    fn finish(self) -> Result<(), DriverError> {
        self.0.finish().map(drop).map_err(log_error)
    }
}

/// The live status line on stderr, fed by the interval histograms and the published counters.
struct Progress {
    start_ns: u64,
    ramp_ns: u64,
    /// Ramp plus measured time, when the run ends by time.
    total_ns: Option<u64>,
    so_far: DeviceRecorder,
    /// Per target (up to [`PROGRESS_DEVICES_MAX`]): a coarse histogram (2 significant digits,
    /// a few KiB) of everything so far, for the worst device's p99.99.
    names: Vec<String>,
    per_device: Vec<Option<hdrhistogram::Histogram<u64>>>,
    last_print_ns: u64,
    last_completed: u64,
    shown: bool,
}

/// Targets whose own tail the progress line tracks.
const PROGRESS_DEVICES_MAX: usize = 1024;

impl Progress {
    fn new(start_ns: u64, ramp_ns: u64, total_ns: Option<u64>, names: Vec<String>) -> Self {
        Progress {
            start_ns,
            ramp_ns,
            total_ns,
            so_far: DeviceRecorder::new(),
            per_device: (0..names.len().min(PROGRESS_DEVICES_MAX))
                .map(|_| None)
                .collect(),
            names,
            last_print_ns: start_ns,
            last_completed: 0,
            shown: false,
        }
    }

    /// One interval of one target.
    fn add(&mut self, device: u32, rec: &DeviceRecorder) {
        self.so_far.merge_from(rec);
        if let Some(slot) = self.per_device.get_mut(device as usize) {
            let h = slot.get_or_insert_with(|| {
                hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000_000, 2)
                    .expect("constant bounds")
            });
            for d in &rec.dirs {
                let _ = h.add(&d.hist);
            }
        }
    }

    fn tick(&mut self, shared: &RunShared) {
        let now = clock::now_ns();
        if now < self.last_print_ns + 1_000_000_000 {
            return;
        }
        let completed: u64 = shared
            .published
            .iter()
            .map(|p| p.completed.load(Ordering::Relaxed))
            .sum();
        let dt_s = (now - self.last_print_ns) as f64 * 1e-9;
        let iops = (completed - self.last_completed.min(completed)) as f64 / dt_s;
        self.last_print_ns = now;
        self.last_completed = completed;
        let elapsed_ns = now.saturating_sub(self.start_ns);
        let mut merged = self.so_far.dirs[0].hist.clone();
        let _ = merged.add(&self.so_far.dirs[1].hist);
        let p99_ns = (!merged.is_empty()).then(|| merged.value_at_quantile(0.99));
        let worst = self
            .per_device
            .iter()
            .enumerate()
            .filter_map(|(i, h)| {
                let h = h.as_ref().filter(|h| !h.is_empty())?;
                Some((i, h.value_at_quantile(0.9999)))
            })
            .max_by_key(|x| x.1);
        let line = nines_core::progress::line(&nines_core::progress::ProgressView {
            clock: "",
            elapsed_ns,
            total_ns: self.total_ns,
            ramp_ns: self.ramp_ns,
            wall_s: elapsed_ns as f64 * 1e-9,
            iops: Some(iops),
            ios: None,
            p99_ns,
            worst: worst.map(|(i, v)| (self.names[i].as_str(), v)),
        });
        // A status line that cannot be shown (terminal gone) is not worth a panic.
        let mut e = io::stderr().lock();
        let _ = write!(e, "\r\x1b[2K{line}");
        let _ = e.flush();
        self.shown = true;
    }

    fn clear(&mut self) {
        if self.shown {
            let mut e = io::stderr().lock();
            let _ = write!(e, "\r\x1b[2K");
            let _ = e.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineError;

    /// The message carries the cause, so no error of the driver also exposes it as `source()`:
    /// printed with its chain, a cause appears once.
    #[test]
    fn errors_say_their_cause_once() {
        let errors = [
            DriverError::Engine {
                device: "zram3".into(),
                error: EngineError::Sys {
                    engine: "libaio",
                    what: "io_setup",
                    error: io::Error::from_raw_os_error(libc::EAGAIN),
                },
            },
            DriverError::Io {
                device: "zram3".into(),
                op: Op::Read,
                offset_bytes: 4096,
                len_bytes: 4096,
                error: io::Error::from_raw_os_error(libc::EIO),
            },
            DriverError::Log {
                what: "latency log",
                error: io::Error::from_raw_os_error(libc::ENOSPC),
            },
        ];
        for e in &errors {
            let mut chain = e.to_string();
            let mut cause = std::error::Error::source(e);
            while let Some(c) = cause {
                chain.push_str(": ");
                chain.push_str(&c.to_string());
                cause = c.source();
            }
            let os = chain.matches("(os error").count();
            assert_eq!(os, 1, "{chain}");
        }
    }
}
