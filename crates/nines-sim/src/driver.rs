//! The discrete-event loop: virtual nanoseconds, one binary heap of small copyable events,
//! SSD models ([`nines_flash::Ssd`]) instead of devices and a [`Host`] instead of CPUs.
//!
//! Data flow per I/O (closed loop; open loop and trace replay differ only in when they issue):
//!
//! ```text
//! Issue(t) ─► Generator::next_request ─► Host::submit (CPU) ─► Ssd::submit (or raid0 chunks,
//!   the slowest decides) ─► DeviceDone(c) ─► Host::complete (CPU) ─► Complete(c') ─► record
//!   latency c' - intended into the target's DeviceRecorder ─► issue the next one
//! ```
//!
//! The device computes its completion time when the command is submitted (its resources are
//! timelines), so there is no per-flash-operation event; the heap only holds one or two events
//! per I/O in flight. Events are ordered by (time, sequence number): the same inputs give the
//! same order, the same latencies and byte-identical JSON. The heap is sized once for the
//! largest number of events in flight, so the loop allocates nothing in steady state.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::io::{self, Write};

use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use nines_core::latlog::{LatLogHeader, LatRecord, RECORD_BYTES, write_header};
use nines_core::op::Op;
use nines_core::report::{DeviceMeta, Report, ReportBuilder, RunConfig, RunKind};
use nines_core::stats::DeviceRecorder;
use nines_core::workload::{Generator, RwMode, WorkloadError, WorkloadSpec};
use nines_flash::{DeviceConfig, FlashError, Precondition, Ssd};
use serde_json::{Map, Value, json};

use crate::host::{Host, HostConfig};
use crate::trace::Trace;

/// The logical block of every simulated device: offsets and sizes are multiples of it.
pub const LOGICAL_BLOCK_BYTES: u32 = 4096;
/// Most devices one simulation drives.
pub const DEVICES_MAX: u32 = 1000;
/// The model memory one device uses at most at the default scale (issue 3 allows 64 MiB; half
/// of it keeps preconditioning of the largest presets to a few seconds and leaves room in
/// cache, and GC still has hundreds of blocks per die).
pub const DEVICE_MODEL_BYTES_MAX: u64 = 32 << 20;
/// Default budget for all device models together.
pub const MEMORY_BUDGET_BYTES: u64 = 8 << 30;

/// How devices are presented to the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One workload stream per device.
    Independent,
    /// One volume striped over all devices; a request completes when its slowest chunk does.
    Raid0 { stripe_bytes: u64 },
}

impl Layout {
    pub fn name(&self) -> &'static str {
        match self {
            Layout::Independent => "independent",
            Layout::Raid0 { .. } => "raid0",
        }
    }
}

#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The full-scale description (a preset or a user's file).
    pub device: DeviceConfig,
    /// How the user named it: a preset name or a path.
    pub device_label: String,
    pub devices: u32,
    pub layout: Layout,
    /// Blocks-per-plane scale in (0, 1]; None: the largest that fits the memory budget.
    pub scale: Option<f64>,
    /// None: steady state when the workload writes, a sequential fill otherwise.
    pub precondition: Option<Precondition>,
    pub host: HostConfig,
    pub workload: WorkloadSpec,
    pub percentiles: Vec<f64>,
    pub memory_budget_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Flash(#[from] FlashError),
    #[error("invalid workload for the simulated devices: {0}")]
    Workload(#[from] WorkloadError),
    #[error("{0}")]
    Config(String),
    #[error("per-I/O log: {0}; check that its disk has room and is writable")]
    LatLog(io::Error),
    #[error("interval log: {0}; check that its disk has room and is writable")]
    HdrLog(io::Error),
}

/// Devices scaled, preconditioned and ready to run.
pub struct Prepared {
    pub cfg: SimConfig,
    /// The description actually simulated (after scaling).
    pub scaled: DeviceConfig,
    pub scale: f64,
    pub precondition: Precondition,
    pub ssds: Vec<Ssd>,
    /// Bytes of model state that exist (maps shared by devices that have not written count once).
    pub model_bytes_per_device: u64,
}

impl Prepared {
    /// Targets the workload sees: one per device, or one volume.
    pub fn targets(&self) -> u32 {
        match self.cfg.layout {
            Layout::Independent => self.cfg.devices,
            Layout::Raid0 { .. } => 1,
        }
    }

    /// Size of each target.
    pub fn target_size_bytes(&self) -> u64 {
        let dev = self.ssds[0].logical_bytes();
        match self.cfg.layout {
            Layout::Independent => dev,
            Layout::Raid0 { stripe_bytes } => {
                (dev / stripe_bytes) * stripe_bytes * self.cfg.devices as u64
            }
        }
    }
}

/// Scale and precondition the devices. Preconditioning runs once on one device (mapping and GC
/// only, no timing) and the result is shared by all devices until each first writes.
pub fn prepare(cfg: &SimConfig, writes: bool) -> Result<Prepared, SimError> {
    if cfg.devices == 0 || cfg.devices > DEVICES_MAX {
        return Err(SimError::Config(format!(
            "--devices {} is out of range; give 1 to {DEVICES_MAX}",
            cfg.devices
        )));
    }
    if let Layout::Raid0 { stripe_bytes } = cfg.layout
        && (stripe_bytes == 0 || !stripe_bytes.is_multiple_of(LOGICAL_BLOCK_BYTES as u64))
    {
        return Err(SimError::Config(format!(
            "--stripe {stripe_bytes} must be a positive multiple of {LOGICAL_BLOCK_BYTES} bytes"
        )));
    }
    // Devices that write each own a copy of the maps; read-only runs share one.
    let copies = if writes { cfg.devices as u64 } else { 1 };
    let per_device = DEVICE_MODEL_BYTES_MAX.min(cfg.memory_budget_bytes / copies);
    let want = match cfg.scale {
        Some(s) => s,
        None => cfg.device.scale_for_budget(per_device),
    };
    let scaled = cfg.device.scaled(want)?;
    let model = scaled.model_bytes();
    if model.saturating_mul(copies) > cfg.memory_budget_bytes {
        return Err(SimError::Config(format!(
            "{} devices of {} need {} MiB of model state at scale {:.5}; the budget \
             (--memory-budget) is {} MiB: use fewer devices, a smaller --scale, a read-only \
             workload or a larger budget",
            cfg.devices,
            cfg.device_label,
            model.saturating_mul(copies) >> 20,
            scaled.geometry.blocks_per_plane as f64 / cfg.device.geometry.blocks_per_plane as f64,
            cfg.memory_budget_bytes >> 20
        )));
    }
    let scale =
        scaled.geometry.blocks_per_plane as f64 / cfg.device.geometry.blocks_per_plane as f64;
    let precondition = cfg.precondition.unwrap_or(if writes {
        Precondition::Steady
    } else {
        Precondition::Fill
    });
    let seed = cfg.workload.seed;
    let mut first = Ssd::new(&scaled, seed);
    first.precondition(precondition, seed ^ 0x9e37_79b9_7f4a_7c15);
    let shared = first.shared_ftl();
    let mut ssds = Vec::with_capacity(cfg.devices as usize);
    for i in 0..cfg.devices {
        let dev_seed = seed
            .wrapping_mul(0x2545_f491_4f6c_dd1d)
            .wrapping_add(i as u64 + 1);
        let mut ssd = Ssd::with_ftl(&scaled, shared.clone(), dev_seed);
        if writes && i > 0 {
            // Each writing device needs its own maps: copy them now, as part of preparation,
            // rather than on the first write in the middle of the timed loop.
            ssd.ftl_mut();
        }
        ssds.push(ssd);
    }
    drop(first);
    Ok(Prepared {
        cfg: cfg.clone(),
        scaled,
        scale,
        precondition,
        ssds,
        model_bytes_per_device: model,
    })
}

const ISSUE: u8 = 0;
const DEVICE_DONE: u8 = 1;
const COMPLETE: u8 = 2;
const TRACE: u8 = 3;

#[derive(Clone, Copy, Debug)]
struct Event {
    time_ns: u64,
    seq: u64,
    intended_ns: u64,
    /// The I/O's offset in its target (for the per-I/O log).
    offset_bytes: u64,
    target: u32,
    len_bytes: u32,
    kind: u8,
    op: Op,
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        self.time_ns == o.time_ns && self.seq == o.seq
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    /// Reversed: BinaryHeap is a max-heap and we want the earliest (then lowest seq) first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.time_ns, o.seq).cmp(&(self.time_ns, self.seq))
    }
}

struct Target {
    generator: Option<Generator>,
    cpu: u32,
    outstanding: u32,
    /// Open loop: an I/O is due but every slot is busy.
    waiting: bool,
    measured_issued: u64,
    rec: DeviceRecorder,
}

/// Counters of a run (for the report and the benchmark).
#[derive(Clone, Copy, Debug, Default)]
pub struct RunStats {
    pub events: u64,
    pub ios: u64,
    pub chunks: u64,
    pub sim_end_ns: u64,
    /// Most I/Os in flight at once, over all targets.
    pub in_flight_max: u64,
}

/// Bytes of per-I/O log records buffered before one write (43,690 records).
pub const LAT_LOG_BUFFER_BYTES: usize = (1 << 20) / RECORD_BYTES * RECORD_BYTES;

/// The per-I/O log of a run: records are encoded into a buffer allocated once and written in
/// blocks of [`LAT_LOG_BUFFER_BYTES`], so the event loop allocates and formats nothing per I/O.
/// The first write error stops logging and is returned when the run ends.
struct LatSink<'w> {
    out: &'w mut dyn Write,
    buf: Vec<u8>,
    records: u64,
    error: Option<io::Error>,
}

impl LatSink<'_> {
    #[inline]
    fn push(&mut self, r: &LatRecord) {
        if self.buf.len() + RECORD_BYTES > self.buf.capacity() {
            self.flush();
        }
        let mut b = [0u8; RECORD_BYTES];
        r.encode(&mut b);
        self.buf.extend_from_slice(&b);
        self.records += 1;
    }

    fn flush(&mut self) {
        if self.error.is_none()
            && let Err(e) = self.out.write_all(&self.buf)
        {
            self.error = Some(e);
        }
        self.buf.clear();
    }
}

/// Where a run writes its logs (see [`run_logged`]).
#[derive(Default)]
pub struct Logs<'w> {
    /// The per-I/O log (`nines_core::latlog` format).
    pub lat: Option<&'w mut dyn Write>,
    /// The HdrHistogram interval log, and its interval in virtual ns.
    pub hdr: Option<(&'w mut dyn Write, u64)>,
}

/// Interval-log tags are shared with the simulator: one definition in nines-core.
pub use nines_core::stats::hdr_tag;

/// The interval log of a run: each target's latencies go into a second recorder that is
/// written (one histogram per target and direction) and reset at every interval boundary of
/// virtual time. Serialising happens once per interval, not per I/O; intervals in which no
/// target completed anything are skipped.
struct HdrSink<'w> {
    out: &'w mut dyn Write,
    serializer: V2DeflateSerializer,
    interval_ns: u64,
    /// End of the current interval.
    next_ns: u64,
    recs: Vec<DeviceRecorder>,
    tags: Vec<[String; 2]>,
    ops: Vec<Op>,
    error: Option<io::Error>,
}

impl HdrSink<'_> {
    /// Close the intervals that end at or before `now`.
    #[inline]
    fn roll(&mut self, now: u64) {
        if now < self.next_ns {
            return;
        }
        let from = self.next_ns - self.interval_ns;
        self.write_interval(from, self.interval_ns);
        // Skip empty intervals in one step.
        self.next_ns = (now / self.interval_ns + 1).saturating_mul(self.interval_ns);
    }

    fn write_interval(&mut self, from_ns: u64, len_ns: u64) {
        let empty = self
            .recs
            .iter()
            .all(|r| r.dirs.iter().all(|d| d.hist.is_empty()));
        if empty || self.error.is_some() {
            return;
        }
        let result = (|| -> io::Result<()> {
            let mut w = IntervalLogWriterBuilder::new()
                .begin_log_with(&mut self.out, &mut self.serializer)?;
            let from = std::time::Duration::from_nanos(from_ns);
            let len = std::time::Duration::from_nanos(len_ns);
            for (rec, tags) in self.recs.iter().zip(&self.tags) {
                for &op in &self.ops {
                    w.write_histogram(
                        &rec.dirs[op.index()].hist,
                        from,
                        len,
                        Tag::new(&tags[op.index()]),
                    )
                    .map_err(|e| io::Error::other(format!("{e:?}")))?;
                }
            }
            Ok(())
        })();
        if let Err(e) = result {
            self.error = Some(e);
        }
        for r in &mut self.recs {
            r.reset();
        }
    }
}

struct Loop<'a, 'w> {
    lat: Option<LatSink<'w>>,
    hdr: Option<HdrSink<'w>>,
    prep: &'a mut Prepared,
    host: Host,
    targets: Vec<Target>,
    heap: BinaryHeap<Event>,
    seq: u64,
    ramp_ns: u64,
    end_ns: u64,
    ios_max: Option<u64>,
    iodepth: u32,
    paced: bool,
    /// I/Os in flight over all targets.
    in_flight: u64,
    stats: RunStats,
}

impl Loop<'_, '_> {
    #[inline]
    fn push(&mut self, mut e: Event) {
        e.seq = self.seq;
        self.seq += 1;
        self.heap.push(e);
    }

    /// Whether target `i` may issue another I/O at `now`.
    #[inline]
    fn may_issue(&self, i: usize, now: u64) -> bool {
        if now >= self.end_ns {
            return false;
        }
        match self.ios_max {
            Some(m) => now < self.ramp_ns || self.targets[i].measured_issued < m,
            None => true,
        }
    }

    /// Send one I/O to the devices at `t`; returns when the devices finish it.
    #[inline]
    fn send_to_devices(&mut self, target: usize, t: u64, op: Op, off: u64, len: u64) -> u64 {
        match self.prep.cfg.layout {
            Layout::Independent => {
                self.stats.chunks += 1;
                self.prep.ssds[target].submit(t, op, off, len)
            }
            Layout::Raid0 { stripe_bytes } => {
                let n = self.prep.cfg.devices as u64;
                let end = off + len;
                let mut pos = off;
                let mut done = t;
                // Bounded by the request's stripes.
                while pos < end {
                    let stripe = pos / stripe_bytes;
                    let inner = pos % stripe_bytes;
                    let dev = (stripe % n) as usize;
                    let dev_off = (stripe / n) * stripe_bytes + inner;
                    let chunk = (stripe_bytes - inner).min(end - pos);
                    done = done.max(self.prep.ssds[dev].submit(t, op, dev_off, chunk));
                    self.stats.chunks += 1;
                    pos += chunk;
                }
                done
            }
        }
    }

    #[inline]
    fn submit(&mut self, target: usize, now: u64, op: Op, off: u64, len: u32, intended: u64) {
        let cpu = self.targets[target].cpu;
        let at_device = self.host.submit(cpu, now);
        let done = self.send_to_devices(target, at_device, op, off, len as u64);
        self.host.hold_until(cpu, done);
        self.targets[target].outstanding += 1;
        self.in_flight += 1;
        self.stats.in_flight_max = self.stats.in_flight_max.max(self.in_flight);
        if now >= self.ramp_ns {
            self.targets[target].measured_issued += 1;
        }
        self.stats.ios += 1;
        self.push(Event {
            time_ns: done,
            seq: 0,
            offset_bytes: off,
            intended_ns: intended,
            target: target as u32,
            len_bytes: len,
            kind: DEVICE_DONE,
            op,
        });
    }

    /// Generate and submit target `i`'s next request at `now`.
    #[inline]
    fn issue(&mut self, i: usize, now: u64) {
        let generator = self.targets[i]
            .generator
            .as_mut()
            .expect("workload targets have generators");
        let req = generator.next_request(now);
        self.submit(
            i,
            now,
            req.op,
            req.offset_bytes,
            req.len_bytes,
            req.intended_ns,
        );
        if self.paced {
            self.schedule_paced(i, now);
        }
    }

    /// Queue target `i`'s next paced issue (never in the past: an overdue one goes now).
    fn schedule_paced(&mut self, i: usize, now: u64) {
        if let Some(due) = self.targets[i]
            .generator
            .as_ref()
            .and_then(Generator::next_due_ns)
        {
            self.push(Event {
                time_ns: due.max(now),
                seq: 0,
                offset_bytes: 0,
                intended_ns: due,
                target: i as u32,
                len_bytes: 0,
                kind: ISSUE,
                op: Op::Read,
            });
        }
    }

    fn run(&mut self, trace: Option<&Trace>) {
        while let Some(e) = self.heap.pop() {
            self.stats.events += 1;
            let now = e.time_ns;
            self.stats.sim_end_ns = self.stats.sim_end_ns.max(now);
            let i = e.target as usize;
            match e.kind {
                ISSUE => {
                    if !self.may_issue(i, now) {
                        continue;
                    }
                    if self.paced && self.targets[i].outstanding >= self.iodepth {
                        // Every slot busy: the due I/O goes out when one frees (its latency
                        // still counts from when it was due).
                        self.targets[i].waiting = true;
                        continue;
                    }
                    self.issue(i, now);
                }
                DEVICE_DONE => {
                    let cpu = self.targets[i].cpu;
                    let t = self.host.complete(cpu, now);
                    self.push(Event {
                        time_ns: t,
                        kind: COMPLETE,
                        ..e
                    });
                }
                COMPLETE => {
                    let tg = &mut self.targets[i];
                    tg.outstanding -= 1;
                    self.in_flight -= 1;
                    if e.intended_ns >= self.ramp_ns {
                        tg.rec.record(e.op, now - e.intended_ns, e.len_bytes);
                        if let Some(h) = self.hdr.as_mut() {
                            h.roll(now);
                            h.recs[i].record(e.op, now - e.intended_ns, e.len_bytes);
                        }
                        if let Some(sink) = self.lat.as_mut() {
                            sink.push(&LatRecord {
                                completion_ns: now,
                                latency_ns: now - e.intended_ns,
                                offset_bytes: e.offset_bytes,
                                // Targets are at most DEVICES_MAX (1000), so this never truncates.
                                device: e.target as u16,
                                op: e.op,
                            });
                        }
                    }
                    if trace.is_some() {
                        continue;
                    }
                    if self.paced {
                        if self.targets[i].waiting {
                            self.targets[i].waiting = false;
                            if self.may_issue(i, now) {
                                // Submit the overdue one without rescheduling the pacer (it was
                                // consumed by next_request; the pacer keeps its own schedule).
                                let generator =
                                    self.targets[i].generator.as_mut().expect("generator");
                                let req = generator.next_request(now);
                                self.submit(
                                    i,
                                    now,
                                    req.op,
                                    req.offset_bytes,
                                    req.len_bytes,
                                    req.intended_ns,
                                );
                                self.schedule_paced(i, now);
                            }
                        }
                    } else {
                        let think = self.prep.cfg.workload.thinktime_ns;
                        if think > 0 {
                            self.push(Event {
                                time_ns: now + think,
                                kind: ISSUE,
                                ..e
                            });
                        } else if self.may_issue(i, now) {
                            self.issue(i, now);
                        }
                    }
                }
                TRACE => {
                    let trace = trace.expect("trace events only with a trace");
                    let idx = e.intended_ns as usize;
                    let r = trace.records[idx];
                    let target = match self.prep.cfg.layout {
                        Layout::Independent => r.device as usize,
                        Layout::Raid0 { .. } => 0,
                    };
                    self.submit(target, now, r.op, r.offset_bytes, r.len_bytes as u32, now);
                    if let Some(next) = trace.records.get(idx + 1) {
                        self.push(Event {
                            time_ns: next.arrival_ns.max(now),
                            seq: 0,
                            offset_bytes: 0,
                            intended_ns: idx as u64 + 1,
                            target: 0,
                            len_bytes: 0,
                            kind: TRACE,
                            op: Op::Read,
                        });
                    }
                }
                _ => unreachable!("unknown event kind"),
            }
        }
    }
}

/// What a run produced.
pub struct SimOutput {
    pub report: Report,
    pub stats: RunStats,
    /// Each target's recorder (a device, or the raid0 volume), in report order.
    pub recorders: Vec<DeviceRecorder>,
}

/// Run the workload (or replay `trace`, already fitted to [`Prepared::targets`] targets of
/// [`Prepared::target_size_bytes`]) and build the report.
pub fn run(prep: &mut Prepared, trace: Option<&Trace>) -> Result<SimOutput, SimError> {
    run_logged(prep, trace, Logs::default())
}

/// The name of each target as the report and the per-I/O log call it.
pub fn target_names(cfg: &SimConfig) -> Vec<String> {
    match cfg.layout {
        Layout::Independent => (0..cfg.devices)
            .map(|i| format!("{}#{i}", cfg.device.name))
            .collect(),
        Layout::Raid0 { .. } => vec![format!("raid0({}x{})", cfg.devices, cfg.device.name)],
    }
}

/// [`run`], also writing every measured I/O to `lat_log` in the `nines_core::latlog` format:
/// a header with the target names and start time 0, then one record per I/O with its virtual
/// completion time (ns since the simulation started), latency, offset in its target, target
/// index and direction, in completion order. With `logs.hdr`, every interval of virtual time
/// (from 0) gets one HdrHistogram per target and direction, tagged `<target>.<read|write>`, in
/// the HdrHistogram interval log format (V2 deflate), timestamps in seconds since the
/// simulation started. Same inputs give the same bytes.
pub fn run_logged(
    prep: &mut Prepared,
    trace: Option<&Trace>,
    logs: Logs<'_>,
) -> Result<SimOutput, SimError> {
    let lat_log = logs.lat;
    let cfg = prep.cfg.clone();
    let spec = &cfg.workload;
    let n_targets = prep.targets();
    let target_size = prep.target_size_bytes();
    let host_cpus = cfg.host.cpus.unwrap_or(n_targets).max(1);
    let host = Host::new(&cfg.host, host_cpus, spec.seed);
    let mut targets = Vec::with_capacity(n_targets as usize);
    for i in 0..n_targets {
        let generator = match trace {
            Some(_) => None,
            None => Some(Generator::new(
                spec,
                target_size,
                LOGICAL_BLOCK_BYTES,
                i,
                0,
            )?),
        };
        targets.push(Target {
            generator,
            cpu: i % host_cpus,
            outstanding: 0,
            waiting: false,
            measured_issued: 0,
            rec: DeviceRecorder::new(),
        });
    }
    if let Some(t) = trace
        && let Some(bad) = t.records.iter().position(|r| {
            r.device >= n_targets || r.end_bytes() > target_size || r.len_bytes > u32::MAX as u64
        })
    {
        return Err(SimError::Config(format!(
            "trace record {} ({}) does not fit the simulated targets; fit the trace first",
            bad,
            t.location(bad)
        )));
    }
    let paced = trace.is_none() && spec.rate_iops.is_some();
    let in_flight = (n_targets as usize) * (spec.iodepth as usize) * 2 + n_targets as usize + 16;
    let lat = match lat_log {
        Some(mut out) => {
            let header = LatLogHeader {
                devices: target_names(&cfg),
                start_unix_ns: 0,
            };
            write_header(&mut out, &header).map_err(SimError::LatLog)?;
            Some(LatSink {
                out,
                buf: Vec::with_capacity(LAT_LOG_BUFFER_BYTES),
                records: 0,
                error: None,
            })
        }
        None => None,
    };
    let hdr = match logs.hdr {
        Some((mut out, interval_ns)) => {
            if interval_ns == 0 {
                return Err(SimError::Config(
                    "--hdr-interval 0: give a positive interval, e.g. 1s".into(),
                ));
            }
            let mut serializer = V2DeflateSerializer::new();
            let origin = std::time::UNIX_EPOCH;
            IntervalLogWriterBuilder::new()
                .add_comment("nines sim: interval latency histograms in nanoseconds of virtual time, one tag per device and direction")
                .with_start_time(origin)
                .with_base_time(origin)
                .begin_log_with(&mut out, &mut serializer)
                .map_err(SimError::HdrLog)?;
            let (reads, writes) = match trace {
                Some(t) => {
                    let ts = t.stats();
                    (ts.reads > 0, ts.writes > 0)
                }
                None => (
                    spec.rw.reads(spec.read_mix_pct),
                    spec.rw.writes(spec.read_mix_pct),
                ),
            };
            let ops: Vec<Op> = Op::ALL
                .into_iter()
                .filter(|op| match op {
                    Op::Read => reads,
                    Op::Write => writes,
                })
                .collect();
            let names = target_names(&cfg);
            Some(HdrSink {
                out,
                serializer,
                interval_ns,
                next_ns: interval_ns,
                recs: (0..n_targets).map(|_| DeviceRecorder::new()).collect(),
                tags: names
                    .iter()
                    .map(|n| [hdr_tag(n, Op::Read), hdr_tag(n, Op::Write)])
                    .collect(),
                ops,
                error: None,
            })
        }
        None => None,
    };
    let mut lp = Loop {
        hdr,
        lat,
        prep,
        host,
        targets,
        heap: BinaryHeap::with_capacity(in_flight),
        seq: 0,
        ramp_ns: spec.ramp_ns,
        end_ns: spec
            .runtime_ns
            .map_or(u64::MAX, |r| spec.ramp_ns.saturating_add(r)),
        ios_max: spec.ios_max,
        iodepth: spec.iodepth,
        paced,
        in_flight: 0,
        stats: RunStats::default(),
    };
    match trace {
        Some(t) => {
            lp.end_ns = u64::MAX;
            lp.ios_max = None;
            if let Some(first) = t.records.first() {
                lp.push(Event {
                    time_ns: first.arrival_ns,
                    seq: 0,
                    offset_bytes: 0,
                    intended_ns: 0,
                    target: 0,
                    len_bytes: 0,
                    kind: TRACE,
                    op: Op::Read,
                });
            }
        }
        None => {
            for i in 0..n_targets as usize {
                if paced {
                    lp.schedule_paced(i, 0);
                } else {
                    for _ in 0..spec.iodepth {
                        lp.push(Event {
                            time_ns: 0,
                            seq: 0,
                            offset_bytes: 0,
                            intended_ns: 0,
                            target: i as u32,
                            len_bytes: 0,
                            kind: ISSUE,
                            op: Op::Read,
                        });
                    }
                }
            }
        }
    }
    lp.run(trace);
    if let Some(mut sink) = lp.lat.take() {
        sink.flush();
        if let Some(e) = sink.error.take() {
            return Err(SimError::LatLog(e));
        }
        sink.out.flush().map_err(SimError::LatLog)?;
    }
    if let Some(mut h) = lp.hdr.take() {
        let from = h.next_ns - h.interval_ns;
        let len = lp.stats.sim_end_ns.saturating_sub(from).max(1);
        h.write_interval(from, len);
        if let Some(e) = h.error.take() {
            return Err(SimError::HdrLog(e));
        }
        h.out.flush().map_err(SimError::HdrLog)?;
    }
    let stats = lp.stats;
    let host = lp.host;
    let targets = lp.targets;
    let measured_ns = match (trace, spec.runtime_ns) {
        (None, Some(r)) => r,
        _ => stats.sim_end_ns.saturating_sub(spec.ramp_ns).max(1),
    };
    let report = build_report(prep, &cfg, &targets, &host, &stats, measured_ns, trace);
    Ok(SimOutput {
        report,
        stats,
        recorders: targets.into_iter().map(|t| t.rec).collect(),
    })
}

fn device_internals(ssd: &Ssd, span_ns: u64) -> Map<String, Value> {
    let c = ssd.counters();
    let f = ssd.ftl_stats();
    let span = span_ns.max(1) as f64;
    let mut m = Map::new();
    m.insert("gc_runs".into(), json!(f.victims));
    m.insert("gc_hard_episodes".into(), json!(c.gc_hard_episodes));
    m.insert("gc_soft_episodes".into(), json!(c.gc_soft_episodes));
    m.insert("gc_units_moved".into(), json!(f.units_moved));
    m.insert("erases".into(), json!(f.erases));
    m.insert("host_units_written".into(), json!(f.host_units));
    m.insert(
        "write_amplification".into(),
        json!(round6(f.write_amplification())),
    );
    m.insert("suspensions".into(), json!(c.suspensions));
    m.insert("gc_preemptions".into(), json!(c.gc_preemptions));
    m.insert("read_buffer_hits".into(), json!(c.read_buffer_hits));
    m.insert("buffer_full_waits".into(), json!(c.buffer_full_waits));
    m.insert("housekeeping_stalls".into(), json!(c.housekeeping_stalls));
    m.insert("slow_ios".into(), json!(c.slow_ios));
    m.insert(
        "die_busy_fraction".into(),
        json!(round6(c.die_busy_ns as f64 / (ssd.dies() as f64 * span))),
    );
    m.insert(
        "channel_busy_fraction".into(),
        json!(round6(
            c.channel_busy_ns as f64 / (ssd.channels() as f64 * span)
        )),
    );
    m
}

/// JSON floats rounded so that reports stay short and stable.
fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// What a replayed trace did, for `config.extra.trace`, and the workload that describes it
/// honestly in the schema's terms: randrw with the trace's read share (randread or randwrite if
/// it has one direction), the most common request size (the smallest of equals), and as
/// iodepth the most requests the open-loop replay had in flight; no runtime, I/O count or rate.
fn trace_workload(t: &Trace, spec: &WorkloadSpec, stats: &RunStats) -> (Value, WorkloadSpec) {
    let ts = t.stats();
    let mut sizes: Vec<u64> = t.records.iter().map(|r| r.len_bytes).collect();
    sizes.sort_unstable();
    let (mut mode, mut mode_n, mut i) = (0u64, 0usize, 0usize);
    while i < sizes.len() {
        let j = sizes[i..].partition_point(|&x| x == sizes[i]) + i;
        if j - i > mode_n {
            (mode, mode_n) = (sizes[i], j - i);
        }
        i = j;
    }
    let total = ts.reads + ts.writes;
    let read_pct = (ts.reads * 100 + total / 2).checked_div(total).unwrap_or(0) as u8;
    let mut w = spec.clone();
    w.rw = match (ts.reads, ts.writes) {
        (_, 0) => RwMode::RandRead,
        (0, _) => RwMode::RandWrite,
        _ => RwMode::RandRw,
    };
    w.read_mix_pct = read_pct;
    w.block_size_bytes = mode;
    w.iodepth = stats.in_flight_max.clamp(1, u32::MAX as u64) as u32;
    w.runtime_ns = None;
    w.ios_max = None;
    w.rate_iops = None;
    w.thinktime_ns = 0;
    let info = json!({
        "format": t.format.to_string(),
        "requests": t.records.len(),
        "reads": ts.reads,
        "writes": ts.writes,
        "bytes": ts.bytes,
        "duration_ns": ts.duration_ns,
        "block_size_bytes_mode": mode,
        "in_flight_max": stats.in_flight_max,
        "replay": "open loop: each request is issued at its arrival time, latency counts from it",
    });
    (info, w)
}

fn build_report(
    prep: &Prepared,
    cfg: &SimConfig,
    targets: &[Target],
    host: &Host,
    stats: &RunStats,
    measured_ns: u64,
    trace: Option<&Trace>,
) -> Report {
    let mut extra = Map::new();
    extra.insert("device".into(), json!(cfg.device_label));
    extra.insert("device_name".into(), json!(cfg.device.name));
    extra.insert("scale".into(), json!(round6(prep.scale)));
    extra.insert(
        "blocks_per_plane".into(),
        json!(prep.scaled.geometry.blocks_per_plane),
    );
    extra.insert("devices".into(), json!(cfg.devices));
    extra.insert("layout".into(), json!(cfg.layout.name()));
    if let Layout::Raid0 { stripe_bytes } = cfg.layout {
        extra.insert("stripe_bytes".into(), json!(stripe_bytes));
    }
    extra.insert("precondition".into(), json!(prep.precondition.name()));
    extra.insert(
        "over_provisioning".into(),
        json!(round6(cfg.device.effective_over_provisioning())),
    );
    // Raised at small scales by the share whole-block GC room takes (see DeviceConfig::scaled).
    extra.insert(
        "over_provisioning_simulated".into(),
        json!(round6(prep.scaled.effective_over_provisioning())),
    );
    extra.insert(
        "device_logical_bytes".into(),
        json!(prep.ssds[0].logical_bytes()),
    );
    extra.insert(
        "model_bytes_per_device".into(),
        json!(prep.model_bytes_per_device),
    );
    extra.insert(
        "host_model".into(),
        json!({
            "completion": cfg.host.completion.name(),
            "cpus": host.cpus(),
            "submit_ns": cfg.host.submit_ns,
            "complete_ns": cfg.host.complete_ns,
            "background": cfg.host.background,
            "background_tasks": host.bg_tasks,
            "background_busy_ns": host.bg_busy_ns,
            "cpu_waits": host.cpu_waits,
            "cpu_wait_ns": host.cpu_wait_ns,
        }),
    );
    extra.insert("events".into(), json!(stats.events));
    extra.insert("sim_end_ns".into(), json!(stats.sim_end_ns));
    let mut workload = cfg.workload.clone();
    if let Some(t) = trace {
        let (info, w) = trace_workload(t, &workload, stats);
        extra.insert("trace".into(), info);
        workload = w;
    }
    let run_cfg = RunConfig {
        workload,
        engine: "sim".into(),
        percentiles: cfg.percentiles.clone(),
        measured_ns,
        start_unix_ns: None,
        lat_log: None,
        hdr_log: None,
        extra,
    };
    let mut b = ReportBuilder::new(RunKind::Sim, run_cfg);
    let names = target_names(cfg);
    let span = stats.sim_end_ns;
    let size = prep.target_size_bytes();
    match cfg.layout {
        Layout::Independent => {
            for (i, (t, ssd)) in targets.iter().zip(&prep.ssds).enumerate() {
                b.device(
                    DeviceMeta {
                        name: names[i].clone(),
                        path: None,
                        size_bytes: size,
                        cpu: Some(t.cpu as usize),
                    },
                    &t.rec,
                );
                b.device_extra(None, Some(Value::Object(device_internals(ssd, span))));
            }
        }
        Layout::Raid0 { stripe_bytes } => {
            let t = &targets[0];
            b.device(
                DeviceMeta {
                    name: names[0].clone(),
                    path: None,
                    size_bytes: size,
                    cpu: Some(t.cpu as usize),
                },
                &t.rec,
            );
            let members: Vec<Map<String, Value>> = prep
                .ssds
                .iter()
                .map(|s| device_internals(s, span))
                .collect();
            let mut m = Map::new();
            m.insert("layout".into(), json!("raid0"));
            m.insert("members".into(), json!(cfg.devices));
            m.insert("stripe_bytes".into(), json!(stripe_bytes));
            m.insert("chunks".into(), json!(stats.chunks));
            for key in [
                "gc_runs",
                "gc_hard_episodes",
                "gc_soft_episodes",
                "gc_units_moved",
                "erases",
                "host_units_written",
                "suspensions",
                "gc_preemptions",
                "read_buffer_hits",
                "buffer_full_waits",
                "housekeeping_stalls",
                "slow_ios",
            ] {
                let sum: u64 = members.iter().map(|x| x[key].as_u64().unwrap_or(0)).sum();
                m.insert(key.into(), json!(sum));
            }
            let host_units: u64 = members
                .iter()
                .map(|x| x["host_units_written"].as_u64().unwrap_or(0))
                .sum();
            let moved: u64 = members
                .iter()
                .map(|x| x["gc_units_moved"].as_u64().unwrap_or(0))
                .sum();
            let wa = if host_units == 0 {
                1.0
            } else {
                (host_units + moved) as f64 / host_units as f64
            };
            m.insert("write_amplification".into(), json!(round6(wa)));
            for key in ["die_busy_fraction", "channel_busy_fraction"] {
                let v: Vec<f64> = members
                    .iter()
                    .map(|x| x[key].as_f64().unwrap_or(0.0))
                    .collect();
                let mean = v.iter().sum::<f64>() / v.len() as f64;
                let max = v.iter().cloned().fold(0.0, f64::max);
                m.insert(format!("{key}_mean"), json!(round6(mean)));
                m.insert(format!("{key}_max"), json!(round6(max)));
            }
            if members.len() <= 64 {
                m.insert("member_internals".into(), json!(members));
            }
            b.device_extra(None, Some(Value::Object(m)));
        }
    }
    if prep.scale < 1.0 {
        b.warn(format!(
            "simulated devices are scaled to {:.4} of {}'s blocks per plane ({} of {}); page \
             geometry is unchanged and over-provisioning is {:.2}% instead of {:.2}% so that GC \
             keeps the full-size device's effective spare",
            prep.scale,
            cfg.device.name,
            prep.scaled.geometry.blocks_per_plane,
            cfg.device.geometry.blocks_per_plane,
            prep.scaled.effective_over_provisioning() * 100.0,
            cfg.device.effective_over_provisioning() * 100.0
        ));
    }
    b.finish()
}
