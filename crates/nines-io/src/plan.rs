//! What the driver hands each worker thread and what it gets back; shared by `driver` (which
//! builds plans and collects results) and `worker` (which runs them), so neither imports the
//! other's internals.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Barrier, Mutex};

use nines_array::{ArrayError, LayoutSpec};
use nines_core::job::{JobError, JobSpec};
use nines_core::op::Op;
use nines_core::stats::DeviceRecorder;
use nines_core::workload::WorkloadError;
use nines_trace::TraceReplay;

use crate::engine::{EngineError, EngineKind, EngineOptions};
use crate::latlog_sink::LatLogLane;
use crate::sched::{SchedError, ThreadUsage};

/// Why a run failed; one line each, naming the device (or volume) and what to do.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("{device}: {error}")]
    Workload {
        device: String,
        error: WorkloadError,
    },
    #[error(transparent)]
    Job(#[from] JobError),
    #[error("{volume}: {error}")]
    Volume { volume: String, error: ArrayError },
    #[error("--trace: {0}")]
    Trace(String),
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
    #[error(
        "{volume}: --verify: the read of {len_bytes} bytes at offset {offset_bytes} returned \
         other data at offset {bad_offset_bytes}; the region was not written with --verify \
         and the same seed, or the device returned wrong data"
    )]
    Verify {
        volume: String,
        offset_bytes: u64,
        len_bytes: u32,
        bad_offset_bytes: u64,
    },
    #[error("{volume}: {op} at offset {offset_bytes} failed: {error}")]
    VolumeIo {
        volume: String,
        op: &'static str,
        offset_bytes: u64,
        error: io::Error,
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

/// A finished interval of one volume, on its way from a worker to the collector.
pub(crate) struct IntervalMsg {
    pub worker: usize,
    /// Global volume (target) index.
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
    /// The fio text logs' lanes (`--fio-log`), handed over like `lanes`.
    pub fio_lanes: Mutex<Vec<Option<LatLogLane>>>,
}

/// One member device as a worker receives it.
pub(crate) struct MemberPlan {
    pub name: String,
    /// -1 for an emulated device.
    pub fd: RawFd,
    /// The emulated device (`emu:`), driven by the worker instead of the engine.
    pub emu: Option<crate::emu::EmuHandle>,
    /// A host-managed zoned block device's zones (crate::zoned).
    pub zoned: Option<Arc<crate::zoned::ZonedDevice>>,
    pub size_bytes: u64,
    pub logical_block_bytes: u32,
    pub block_device: bool,
}

/// One volume (a target of the workload) as a worker receives it.
pub(crate) struct VolumePlan {
    /// Global index: the target index of logs and the report.
    pub index: u32,
    pub name: String,
    pub members: Vec<MemberPlan>,
    /// Its share of a replayed trace (starting at 0; shifted to the run's start).
    pub trace: Option<TraceReplay>,
}

/// What a worker needs; built on the main thread, moved into the worker thread.
pub(crate) struct WorkerPlan {
    pub index: usize,
    pub cpu: usize,
    pub volumes: Vec<VolumePlan>,
    pub layout: LayoutSpec,
    /// The jobs (ignored when the volumes replay a trace).
    pub jobs: Vec<JobSpec>,
    pub trace_depth: u32,
    pub engine: EngineKind,
    pub engine_options: EngineOptions,
    /// psync performs one I/O at a time: every stream's depth is capped to this.
    pub iodepth_max: u32,
    pub rt_priority: Option<u32>,
    /// `--verify`: the seed of the write pattern.
    pub verify_seed: Option<u64>,
    /// `--zonemode zbd`: zoned members of independent volumes are `nines_array::Zbd` volumes.
    pub zbd: Option<nines_core::zbd::ZbdOptions>,
    pub start_ns: u64,
    pub interval_ns: u64,
    pub intervals: Option<(SyncSender<IntervalMsg>, Receiver<Box<DeviceRecorder>>)>,
    pub lat_log: Option<LatLogLane>,
    /// The fio text logs' lane (`--fio-log`): one [`nines_core::fiolog::FioRecord`] per
    /// measured volume I/O.
    pub fio_log: Option<LatLogLane>,
    /// Targets of the run: a record's fio job is `job * targets + target`.
    pub targets: u32,
    pub shared: Arc<RunShared>,
}

/// What a worker measured on one volume.
pub(crate) struct VolumeResult {
    pub index: u32,
    /// Per job (job order; one entry for a trace).
    pub per_job: Vec<DeviceRecorder>,
    /// Volume I/Os issued, ramp included.
    pub issued: u64,
    pub layout: &'static str,
    pub stats: serde_json::Value,
    /// What the policy's counters say the user should know (`Volume::warnings`).
    pub warnings: Vec<String>,
    pub member_recs: Vec<DeviceRecorder>,
    pub member_commands: Vec<u64>,
    pub member_errors: Vec<u64>,
    /// Per member: what a zoned block device's write ordering counted (None: not zoned).
    pub member_zoned: Vec<Option<crate::zoned::ZoneSeqStats>>,
    /// Per member: submission and completion latency, time in submit calls and their count.
    pub member_slat: Vec<DeviceRecorder>,
    pub member_clat: Vec<DeviceRecorder>,
    pub member_submit_ns: Vec<u64>,
    pub member_submit_calls: Vec<u64>,
    /// fio's queue-depth distributions of the volume (`iodepth_level/submit/complete`).
    pub depth: nines_core::stats::IoDepthCounts,
}

/// What a worker returns.
pub(crate) struct WorkerResult {
    pub volumes: Vec<VolumeResult>,
    pub usage: ThreadUsage,
    pub last_measured_completion_ns: Option<u64>,
    pub latlog_stalls: u64,
    pub interval_misses: u64,
}
