//! The real driver: runs a workload on open targets with worker threads and an engine per worker,
//! and returns one latency recorder per target plus what each worker cost.
//!
//! Layout (the paper's Fig. 5): devices are assigned round-robin over the chosen CPUs. With an
//! asynchronous engine there is one worker thread per CPU used, and it drives all its devices
//! through one engine (one ring or AIO context); with psync there is one thread per device, pinned
//! to the device's CPU. The main thread only collects: interval histograms for the HdrHistogram log
//! and the progress line, and at the end the workers' recorders.
//!
//! The worker loop (`worker::run`) is the hot path: per I/O it reads CLOCK_MONOTONIC once when
//! submitting and once when reaping, records one histogram value, and optionally appends one
//! 24-byte record to a preallocated log buffer. Nothing is allocated, formatted or locked there.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use nines_core::latlog::{self, LatLogHeader, RECORD_BYTES};
use nines_core::op::Op;
use nines_core::stats::DeviceRecorder;
use nines_core::workload::{RwMode, WorkloadError, WorkloadSpec};

use crate::clock;
use crate::engine::{EngineError, EngineKind, EngineOptions};
use crate::latlog_sink::{LatLogLane, LatLogSink};
use crate::sched::{self, SchedError, ThreadUsage};
use crate::worker;

/// One open target as the driver sees it. The caller keeps the file descriptor open for the run.
#[derive(Clone, Debug)]
pub struct DriverTarget {
    pub name: String,
    pub fd: RawFd,
    pub size_bytes: u64,
    pub logical_block_bytes: u32,
}

/// How to run.
#[derive(Debug)]
pub struct DriverConfig {
    pub spec: WorkloadSpec,
    pub engine: EngineKind,
    pub engine_options: EngineOptions,
    /// CPUs for the workers; devices go round-robin over them. Must not be empty.
    pub cpus: Vec<usize>,
    /// SCHED_FIFO priority of the workers.
    pub rt_priority: Option<u32>,
    /// Lock all memory (mlockall) for the run.
    pub mlock: bool,
    /// Per-I/O log, already created (the driver writes the header).
    pub lat_log: Option<File>,
    /// Interval histogram log, already created.
    pub hdr_log: Option<File>,
    /// Length of one interval of the HdrHistogram log and of the progress line.
    pub interval_ns: u64,
    /// Print a live status line on stderr.
    pub progress: bool,
}

/// What one device measured.
#[derive(Debug)]
pub struct DeviceOutcome {
    pub recorder: DeviceRecorder,
    pub cpu: usize,
    /// I/Os executed, including those of the ramp.
    pub ios_executed: u64,
}

/// What one worker thread cost.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerOutcome {
    pub index: u32,
    pub cpu: usize,
    pub devices: Vec<u32>,
    pub usage: ThreadUsage,
}

/// The result of a run.
#[derive(Debug)]
pub struct DriverOutcome {
    pub devices: Vec<DeviceOutcome>,
    pub workers: Vec<WorkerOutcome>,
    /// From the end of the ramp to the last completion.
    pub measured_ns: u64,
    pub start_unix_ns: u64,
    pub warnings: Vec<String>,
    /// Set when SIGINT/SIGTERM stopped the run ([`sched::interrupted`]): nanoseconds from the
    /// time origin to when the collector saw it. What was measured until then is in `devices`.
    pub interrupted_ns: Option<u64>,
}

/// Why a run failed; one line each, naming the device and what to do.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("{device}: {error}")]
    Workload {
        device: String,
        error: WorkloadError,
    },
    #[error(transparent)]
    Sched(#[from] SchedError),
    #[error("{device}: {error}")]
    Engine { device: String, error: EngineError },
    #[error("{device}: {op} of {len_bytes} bytes at offset {offset_bytes} failed: {error}")]
    Io {
        device: String,
        op: Op,
        offset_bytes: u64,
        len_bytes: u32,
        error: io::Error,
    },
    #[error(
        "{device}: short {op} at offset {offset_bytes}: {done_bytes} of {len_bytes} bytes \
         (the region runs past the end of the target?)"
    )]
    Short {
        device: String,
        op: Op,
        offset_bytes: u64,
        len_bytes: u32,
        done_bytes: u64,
    },
    #[error("cannot write the {what}: {error}")]
    Log {
        what: &'static str,
        error: io::Error,
    },
    #[error("no targets to run on")]
    NoTargets,
    #[error("{0} targets are more than the per-I/O log can name (65536)")]
    TooManyTargets(usize),
    #[error("a worker thread panicked: {0}")]
    Panic(String),
}

/// Records per buffer of the per-I/O log and buffers per worker: 4 x 1.5 MiB per worker holds
/// about 260 000 I/Os, a quarter second of a busy worker, which rides out writer hiccups.
const LATLOG_RECORDS_PER_BUFFER: usize = 64 * 1024;
const LATLOG_BUFFERS_PER_WORKER: usize = 4;

/// A finished interval of one device, on its way from a worker to the collector.
pub(crate) struct IntervalMsg {
    pub worker: usize,
    pub device: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub rec: Box<DeviceRecorder>,
}

/// Counters a worker publishes for the progress line (one cache line each: no false sharing).
#[repr(align(64))]
#[derive(Default)]
pub(crate) struct Published {
    pub completed: AtomicU64,
}

/// Shared by all workers of one run.
pub(crate) struct RunShared {
    pub abort: AtomicBool,
    pub published: Vec<Published>,
    /// Passed twice by every worker and the driver: once when the workers are set up, once when
    /// the driver has chosen `start_ns` and put the log lanes in `lanes`.
    pub gate: Barrier,
    pub start_ns: AtomicU64,
    pub lanes: Mutex<Vec<Option<LatLogLane>>>,
}

/// What a worker needs; built on the main thread, moved into the worker thread.
pub(crate) struct WorkerPlan {
    pub index: usize,
    pub cpu: usize,
    pub devices: Vec<worker::DevPlan>,
    pub spec: WorkloadSpec,
    pub engine: EngineKind,
    pub engine_options: EngineOptions,
    pub iodepth: u32,
    pub rt_priority: Option<u32>,
    pub start_ns: u64,
    pub interval_ns: u64,
    pub intervals: Option<(SyncSender<IntervalMsg>, Receiver<Box<DeviceRecorder>>)>,
    pub lat_log: Option<LatLogLane>,
    pub shared: Arc<RunShared>,
}

/// What a worker returns.
pub(crate) struct WorkerResult {
    pub devices: Vec<(u32, DeviceRecorder, u64)>,
    pub usage: ThreadUsage,
    pub last_completion_ns: u64,
    pub latlog_stalls: u64,
    pub interval_misses: u64,
}

fn ops_of(spec: &WorkloadSpec) -> Vec<Op> {
    match spec.rw {
        RwMode::Read | RwMode::RandRead => vec![Op::Read],
        RwMode::Write | RwMode::RandWrite => vec![Op::Write],
        RwMode::RandRw => {
            let mut ops = Vec::new();
            if spec.read_mix_pct > 0 {
                ops.push(Op::Read);
            }
            if spec.read_mix_pct < 100 {
                ops.push(Op::Write);
            }
            ops
        }
    }
}

/// Interval-log tags are shared with the simulator: one definition in nines-core.
pub use nines_core::stats::hdr_tag;

/// Checks what can be checked before any thread or file exists: placement, priority, and each
/// target's fit for the workload (region, block alignment).
pub fn validate(targets: &[DriverTarget], cfg: &DriverConfig) -> Result<(), DriverError> {
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
    for (i, t) in targets.iter().enumerate() {
        nines_core::workload::Generator::new(
            &cfg.spec,
            t.size_bytes,
            t.logical_block_bytes,
            i as u32,
            0,
        )
        .map_err(|source| DriverError::Workload {
            device: t.name.clone(),
            error: source,
        })?;
    }
    Ok(())
}

/// Runs the workload on `targets` and returns what was measured.
pub fn run(targets: &[DriverTarget], mut cfg: DriverConfig) -> Result<DriverOutcome, DriverError> {
    validate(targets, &cfg)?;
    let mut warnings = Vec::new();
    let iodepth = if cfg.engine == EngineKind::Psync && cfg.spec.iodepth > 1 {
        warnings.push(format!(
            "psync performs one I/O at a time per device: --iodepth {} ran as 1; use libaio or io_uring for deeper queues",
            cfg.spec.iodepth
        ));
        1
    } else {
        cfg.spec.iodepth
    };
    let cpu_of_device = sched::assign_round_robin(targets.len(), &cfg.cpus);

    // Group devices into workers: one per CPU used (async engines) or one per device (psync).
    let mut groups: Vec<(usize, Vec<u32>)> = Vec::new();
    for (d, &cpu) in cpu_of_device.iter().enumerate() {
        let existing = if cfg.engine == EngineKind::Psync {
            None
        } else {
            groups.iter_mut().find(|(c, _)| *c == cpu)
        };
        match existing {
            Some((_, devs)) => devs.push(d as u32),
            None => groups.push((cpu, vec![d as u32])),
        }
    }

    if cfg.mlock {
        sched::lock_memory()?;
    }
    let result = run_locked(
        targets,
        &mut cfg,
        iodepth,
        &cpu_of_device,
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

fn run_locked(
    targets: &[DriverTarget],
    cfg: &mut DriverConfig,
    iodepth: u32,
    cpu_of_device: &[usize],
    groups: &[(usize, Vec<u32>)],
    warnings: &mut Vec<String>,
) -> Result<RunParts, DriverError> {
    let names: Vec<String> = targets.iter().map(|t| t.name.clone()).collect();
    let want_intervals = cfg.hdr_log.is_some() || cfg.progress;
    let shared = Arc::new(RunShared {
        abort: AtomicBool::new(false),
        published: groups.iter().map(|_| Published::default()).collect(),
        gate: Barrier::new(groups.len() + 1),
        start_ns: AtomicU64::new(0),
        lanes: Mutex::new(groups.iter().map(|_| None).collect()),
    });
    let (ival_tx, ival_rx) = mpsc::sync_channel::<IntervalMsg>(targets.len() * 4 + 4);
    let mut spare_txs = Vec::new();
    let mut plans = Vec::new();
    for (w, (cpu, devs)) in groups.iter().enumerate() {
        let intervals = if want_intervals {
            // Two spares per device: one in the collector's hands, one ready for the next swap.
            let (spare_tx, spare_rx) = mpsc::sync_channel(devs.len() * 3);
            for _ in 0..devs.len() * 2 {
                spare_tx
                    .send(Box::new(DeviceRecorder::new()))
                    .expect("receiver alive");
            }
            spare_txs.push(Some(spare_tx));
            Some((ival_tx.clone(), spare_rx))
        } else {
            spare_txs.push(None);
            None
        };
        let dev_plans = devs
            .iter()
            .map(|&d| {
                let t = &targets[d as usize];
                worker::DevPlan {
                    index: d,
                    name: t.name.clone(),
                    fd: t.fd,
                    size_bytes: t.size_bytes,
                    logical_block_bytes: t.logical_block_bytes,
                }
            })
            .collect();
        plans.push(WorkerPlan {
            index: w,
            cpu: *cpu,
            devices: dev_plans,
            spec: cfg.spec.clone(),
            engine: cfg.engine,
            engine_options: cfg.engine_options,
            iodepth,
            rt_priority: cfg.rt_priority,
            // Both set at the gate, once every worker is set up.
            start_ns: 0,
            interval_ns: cfg.interval_ns.max(1_000_000),
            intervals,
            lat_log: None,
            shared: shared.clone(),
        });
    }
    drop(ival_tx);

    let handles: Vec<_> = plans
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
        .map_err(|e| DriverError::Panic(format!("cannot start a worker thread: {e}")))?;

    // Every worker is set up (engine, buffers): choose the common time origin, a little ahead so
    // each has passed the gate before the first I/O is due; the wall-clock start is shifted by
    // the same amount so log timestamps line up.
    shared.gate.wait();
    let setup_ns = 5_000_000;
    let start_ns = clock::now_ns() + setup_ns;
    let start_unix_ns = clock::unix_now_ns() + setup_ns;
    let opened = open_logs(cfg, &names, groups.len(), start_unix_ns);
    let (sink, mut hdr, mut collect_error) = match opened {
        Ok((sink, lanes, hdr)) => {
            *shared.lanes.lock().expect("no worker holds the lanes yet") = lanes;
            (sink, hdr, None)
        }
        Err(e) => {
            shared.abort.store(true, Ordering::Relaxed);
            (None, None, Some(e))
        }
    };
    shared.start_ns.store(start_ns, Ordering::Relaxed);
    shared.gate.wait();

    // Collect intervals (and watch for SIGINT/SIGTERM) until every worker has finished.
    let mut progress = cfg
        .progress
        .then(|| Progress::new(start_ns, cfg.spec.ramp_ns));
    let mut interrupted_ns = None;
    loop {
        if interrupted_ns.is_none() && sched::interrupted() {
            // SIGINT/SIGTERM: stop the workers; they drain what is in flight and return what
            // they measured, which is reported like a run that ended.
            interrupted_ns = Some(clock::now_ns().saturating_sub(start_ns));
            shared.abort.store(true, Ordering::Relaxed);
        }
        match ival_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(mut msg) => {
                if let Some(h) = hdr.as_mut()
                    && collect_error.is_none()
                    && let Err(e) = h.write(&msg, start_ns)
                {
                    collect_error = Some(e);
                    shared.abort.store(true, Ordering::Relaxed);
                }
                if let Some(p) = progress.as_mut() {
                    p.so_far.merge_from(&msg.rec);
                }
                msg.rec.reset();
                if let Some(tx) = &spare_txs[msg.worker] {
                    let _ = tx.try_send(msg.rec);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            // Without interval histograms there is no sender at all: keep polling for an
            // interrupt until the workers are done.
            Err(RecvTimeoutError::Disconnected) => {
                if handles.iter().all(|h| h.is_finished()) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        if let Some(p) = progress.as_mut() {
            p.tick(&shared);
        }
    }
    if let Some(p) = progress.as_mut() {
        p.clear();
    }

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
    if let Some(e) = first_error.or(collect_error) {
        return Err(e);
    }

    let mut devices: Vec<Option<DeviceOutcome>> = targets.iter().map(|_| None).collect();
    let mut workers = Vec::new();
    let mut last_ns = start_ns;
    for (w, r) in results.into_iter().enumerate() {
        last_ns = last_ns.max(r.last_completion_ns);
        if r.latlog_stalls > 0 {
            warnings.push(format!(
                "worker {w} waited {} times for the per-I/O log writer (the log's disk is slower than the I/O rate); those waits delayed I/O",
                r.latlog_stalls
            ));
        }
        if r.interval_misses > 0 {
            warnings.push(format!(
                "worker {w}: {} interval histograms were merged into the next interval because the collector lagged",
                r.interval_misses
            ));
        }
        let mut devs = Vec::new();
        for (d, rec, executed) in r.devices {
            devs.push(d);
            devices[d as usize] = Some(DeviceOutcome {
                recorder: rec,
                cpu: cpu_of_device[d as usize],
                ios_executed: executed,
            });
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
        .map(|d| d.expect("every device belongs to one worker"))
        .collect();
    let measure_from_ns = start_ns + cfg.spec.ramp_ns;
    let measured_ns = last_ns.saturating_sub(measure_from_ns);
    Ok((devices, workers, measured_ns, start_unix_ns, interrupted_ns))
}

type OpenedLogs = (Option<LatLogSink>, Vec<Option<LatLogLane>>, Option<HdrLog>);

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
        Some(f) => Some(HdrLog::new(f, start_unix_ns, names, &ops_of(&cfg.spec))?),
        None => None,
    };
    Ok((sink, lanes, hdr))
}

/// The HdrHistogram interval log, written by the collector (main thread), off the hot path.
struct HdrLog {
    out: io::BufWriter<File>,
    serializer: V2DeflateSerializer,
    tags: Vec<[String; 2]>,
    ops: Vec<Op>,
    start_unix_ns: u64,
}

impl HdrLog {
    fn new(
        file: File,
        start_unix_ns: u64,
        names: &[String],
        ops: &[Op],
    ) -> Result<Self, DriverError> {
        let mut out = io::BufWriter::new(file);
        let start = std::time::UNIX_EPOCH + Duration::from_nanos(start_unix_ns);
        let mut serializer = V2DeflateSerializer::new();
        IntervalLogWriterBuilder::new()
            .add_comment("nines profile: interval latency histograms in nanoseconds, one tag per device and direction")
            .with_start_time(start)
            .with_base_time(start)
            .begin_log_with(&mut out, &mut serializer)
            .map_err(|source| DriverError::Log { what: "HdrHistogram log", error: source })?;
        let tags = names
            .iter()
            .map(|n| [hdr_tag(n, Op::Read), hdr_tag(n, Op::Write)])
            .collect();
        Ok(HdrLog {
            out,
            serializer,
            tags,
            ops: ops.to_vec(),
            start_unix_ns,
        })
    }

    fn write(&mut self, msg: &IntervalMsg, start_ns: u64) -> Result<(), DriverError> {
        let mut w = IntervalLogWriterBuilder::new()
            .begin_log_with(&mut self.out, &mut self.serializer)
            .map_err(|source| DriverError::Log {
                what: "HdrHistogram log",
                error: source,
            })?;
        let from = Duration::from_nanos(msg.start_ns.saturating_sub(start_ns));
        let len = Duration::from_nanos(msg.end_ns.saturating_sub(msg.start_ns));
        for &op in &self.ops {
            let tag = &self.tags[msg.device as usize][op.index()];
            w.write_histogram(&msg.rec.dirs[op.index()].hist, from, len, Tag::new(tag))
                .map_err(|e| DriverError::Log {
                    what: "HdrHistogram log",
                    error: io::Error::other(e.to_string()),
                })?;
        }
        let _ = self.start_unix_ns;
        Ok(())
    }

    fn finish(mut self) -> Result<(), DriverError> {
        self.out.flush().map_err(|source| DriverError::Log {
            what: "HdrHistogram log",
            error: source,
        })
    }
}

/// The live status line on stderr, fed by the interval histograms and the published counters.
struct Progress {
    start_ns: u64,
    ramp_ns: u64,
    so_far: DeviceRecorder,
    last_print_ns: u64,
    last_completed: u64,
    shown: bool,
}

impl Progress {
    fn new(start_ns: u64, ramp_ns: u64) -> Self {
        Progress {
            start_ns,
            ramp_ns,
            so_far: DeviceRecorder::new(),
            last_print_ns: start_ns,
            last_completed: 0,
            shown: false,
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
        let elapsed_s = now.saturating_sub(self.start_ns) as f64 * 1e-9;
        let mut merged = self.so_far.dirs[0].hist.clone();
        let _ = merged.add(&self.so_far.dirs[1].hist);
        let p99 = if merged.is_empty() {
            "-".to_string()
        } else {
            format!("{:.1} us", merged.value_at_quantile(0.99) as f64 / 1000.0)
        };
        let phase = if now < self.start_ns + self.ramp_ns {
            " (ramp)"
        } else {
            ""
        };
        eprint!("\r\x1b[2K{elapsed_s:6.1} s{phase}  {iops:>10.0} IOPS  p99 {p99}");
        let _ = io::stderr().flush();
        self.shown = true;
    }

    fn clear(&mut self) {
        if self.shown {
            eprint!("\r\x1b[2K");
            let _ = io::stderr().flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn tags_are_valid_hdr_tags() {
        assert_eq!(hdr_tag("zram3", Op::Read), "zram3.read");
        let t = hdr_tag("my file,x", Op::Write);
        assert_eq!(t, "my_file_x.write");
        assert!(Tag::new(&t).is_some());
    }
}
