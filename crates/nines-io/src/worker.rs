//! One worker thread: pins itself, optionally goes SCHED_FIFO, builds its engine, its volumes and
//! its run controller, and runs the I/O loop until the run ends.
//!
//! A worker drives whole volumes: every member of a volume is a target of the worker's one
//! engine, so the volume's policy sees every member completion. The loop, per turn: read the
//! clock; swap interval histograms if an interval ended; for every stream, issue what the run
//! controller allows (each volume I/O goes through its volume, whose member commands go to the
//! engine); run due volume timers; commit; reap (blocking only when nothing is timed); read the
//! clock once for the reaped batch; hand each completion to its volume; complete, verify, record
//! and log the volume I/Os that finished. Everything it touches was allocated before the first
//! I/O. Flush, trim and write-zeroes member commands are carried out synchronously by the worker
//! (fdatasync, discard, zero-range): they are rare and no engine here queues them.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc::TryRecvError;

use nines_array::{
    AnyVolume, CmdDone, CmdOp, CmdResult, IoResult, LayoutSpec, MemberCmd, Output, VolIo, Volume,
    VolumeHost, VolumeParams,
};
use nines_core::fiolog::{FIO_RECORD_BYTES, FioRecord};
use nines_core::latlog::{LatRecord, RECORD_BYTES};
use nines_core::op::Op;
use nines_core::run::{Controller, Poll, RunTiming, StreamSpec};
use nines_core::source::Source;
use nines_core::stats::{DeviceRecorder, IoDepthCounts};
use nines_core::workload::Generator;

use crate::buf::AlignedBuf;
use crate::clock;
use crate::data::{PtrData, check_pattern, fill_pattern};
use crate::emu::EmuLease;
use crate::engine::{self, Completion, Engine, IoDesc};
use crate::plan::{
    DriverError, IntervalMsg, MemberPlan, VolumePlan, VolumeResult, WorkerPlan, WorkerResult,
};
use crate::sched::{self, ThreadUsage};
use crate::zoned::{Dispatch, ZoneMgmt, ZoneSeq};

/// Most synchronous member completions handled in one turn before the loop checks the clock
/// again (a bound on a policy that answers synchronous commands with more of them).
const SYNC_TURN_MAX: usize = 1 << 20;

/// Member command timings waiting to be recorded (see [`PartTiming`]).
const PARTS_BUF: usize = 256;

/// One member command's submission and completion latency, recorded into the member's slat and
/// clat histograms later, in batches of [`PARTS_BUF`]: a histogram cell is usually a cache miss
/// (zram's page copies evict them between I/Os), and a tight loop over independent records
/// overlaps those misses where one record per I/O between syscalls waits for each.
#[derive(Clone, Copy)]
struct PartTiming {
    vol: u32,
    member: u32,
    op: Op,
    len_bytes: u32,
    /// `None`: the engine did the I/O inside its call (psync): no submission latency of its own.
    slat_ns: Option<u64>,
    clat_ns: u64,
}

/// The last failed member command of a volume, to name it if the volume fails the I/O.
#[derive(Clone, Copy)]
struct MemberFailure {
    member: u32,
    op: Op,
    offset_bytes: u64,
    len_bytes: u32,
    /// Negative errno, or the bytes done of a short transfer.
    result: i64,
}

struct Vol {
    index: u32,
    name: String,
    /// The policy places its I/Os itself (`Volume::place`: `--zonemode zbd`).
    places: bool,
    host: VolumeHost,
    members: Vec<MemberPlan>,
    /// Engine slot of each member.
    slots: Vec<usize>,
    /// Bytes expected of each command in flight (by id), its op and offset.
    cmd_len: Vec<u32>,
    cmd_op: Vec<Op>,
    cmd_off: Vec<u64>,
    cmd_member: Vec<u32>,
    /// When each command's submit call began and returned.
    cmd_t0: Vec<u64>,
    cmd_t1: Vec<u64>,
    /// Per command sent to an emulated member: the model's completion time (CLOCK_MONOTONIC)
    /// and result; `cmd_emu` says which commands those are, `cmd_data` which carry data.
    cmd_emu: Vec<bool>,
    cmd_data: Vec<bool>,
    cmd_done_ns: Vec<u64>,
    cmd_res: Vec<CmdResult>,
    /// The emulated device of each member (None: a real one, driven by the engine).
    emu: Vec<Option<EmuLease>>,
    /// The zone write ordering of each host-managed zoned block device member (crate::zoned):
    /// its zone writes, appends, resets and finishes go through it.
    zseq: Vec<Option<ZoneSeq>>,
    /// Per member: submission latency (the submit call), completion latency (from the call's
    /// return until the completion was seen), time spent in submit calls and how many.
    slat: Vec<DeviceRecorder>,
    clat: Vec<DeviceRecorder>,
    submit_ns: Vec<u64>,
    submit_calls: Vec<u64>,
    /// Owns the memory `scratch_ptrs` points into.
    _scratch: Vec<AlignedBuf>,
    scratch_ptrs: Vec<(*mut u8, usize)>,
    failure: Option<MemberFailure>,
    interval: Option<Box<DeviceRecorder>>,
    /// fio's queue-depth counts, kept together (one or two cache lines touched per I/O).
    depth: DepthState,
}

/// A volume's fio queue-depth counts (`iodepth_level`, `iodepth_complete`; `iodepth_submit` is
/// derived from the submit calls at the end: each carries one command) and what they need.
#[repr(C)]
#[derive(Default)]
struct DepthState {
    /// Volume I/Os in flight (issued, not yet finished).
    inflight_ios: u64,
    /// Scratch: this volume's completions in the reap being counted (0 between reaps).
    reaped: u64,
    counts: IoDepthCounts,
}

struct Worker {
    engine: Box<dyn Engine>,
    ctl: Controller,
    vols: Vec<Vol>,
    /// Client buffer of each controller slot.
    client: Vec<(*mut u8, usize)>,
    /// Per slot: the offset its I/O went to, and whether a read there is verified (a placing
    /// policy may move it: `Volume::place`).
    slot_off: Vec<u64>,
    slot_verify: Vec<bool>,
    _client_bufs: Vec<AlignedBuf>,
    completions: Vec<Completion>,
    /// Synchronous member completions waiting to be handed to their volume.
    sync_done: VecDeque<(usize, CmdDone)>,
    /// Volume I/Os done by the last call, waiting to be completed.
    vol_done: VecDeque<(usize, u32, IoResult)>,
    /// Completions seen (by the check after a submission, or by a reap) with the time they were
    /// seen, not yet handed to their volume.
    seen: VecDeque<(Completion, u64)>,
    /// Scratch for the check after each submission.
    peek: Vec<Completion>,
    /// Member command timings not yet recorded (capacity `PARTS_BUF`, never exceeded).
    parts: Vec<PartTiming>,
    /// The clock read the controller issued the current volume I/O at, for the first member
    /// command it sends (taken by `send`, so follow-up commands read the clock themselves).
    issue_clock_ns: Option<u64>,
    /// `--fio-log` is on: the per-slot stamps below are kept.
    fio_log_on: bool,
    /// The controller slot of the volume I/O being issued.
    issue_slot: u32,
    /// Per controller slot, for fio's per-I/O logs (`--fio-log`): when its I/O was issued, when
    /// the submit call of its first member command returned, and whether that call did the I/O
    /// (psync: no slat of its own).
    slot_t0: Vec<u64>,
    slot_t1: Vec<u64>,
    slot_sync: Vec<bool>,
    /// Commands to emulated members, by completion time (CLOCK_MONOTONIC ns) and user data;
    /// at most the volumes' commands in flight (allocated for that many).
    emu_pending: BinaryHeap<Reverse<(u64, u64)>>,
    /// The time of the last volume call: volumes see time in order.
    vnow: u64,
    /// Member commands sent at or after this time are measured (the end of the ramp).
    record_from_ns: u64,
    /// The engine performs each I/O inside its submit call (psync): no separate slat.
    sync_engine: bool,
    /// Commands the engine holds (emulated members' are in `emu_pending`).
    inflight_cmds: u32,
    /// End-of-run FLUSHes of write-back volumes still out.
    final_flushes: u32,
    verify_seed: Option<u64>,
    start_ns: u64,
    record: [u8; RECORD_BYTES],
    fio_record: [u8; FIO_RECORD_BYTES],
    completed: u64,
    /// Start of the current interval of the interval log.
    interval_start: u64,
}

pub(crate) fn run(plan: WorkerPlan) -> Result<WorkerResult, DriverError> {
    let shared = plan.shared.clone();
    let mut at_gate = false;
    let r = run_inner(plan, &mut at_gate);
    if r.is_err() {
        shared.abort.store(true, Ordering::Relaxed);
    }
    if !at_gate {
        // Setup failed before the gate: still pass it (twice, like the others), or the driver
        // and the other workers would wait for this one forever.
        shared.gate.wait();
        shared.gate.wait();
    }
    r
}

fn fill_random(buf: &mut AlignedBuf, seed: u64) {
    // Incompressible bytes, so writes are real data (zram would shortcut zero pages).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ seed;
    for chunk in buf.as_mut_slice().chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

fn run_inner(mut plan: WorkerPlan, at_gate: &mut bool) -> Result<WorkerResult, DriverError> {
    sched::pin_current_thread(plan.cpu)?;
    if let Some(p) = plan.rt_priority {
        sched::set_fifo_current_thread(p)?;
    }
    let usage_start = ThreadUsage::current_thread();
    let first_name = plan.volumes[0].name.clone();

    // The slow part of the setup that needs no time origin is done before the gate; the
    // controller, sources and volumes are built after it (generators pace from the origin).
    *at_gate = true;
    plan.shared.gate.wait();
    plan.shared.gate.wait();
    plan.start_ns = plan.shared.start_ns.load(Ordering::Relaxed);
    plan.lat_log = plan
        .shared
        .lanes
        .lock()
        .map_err(|_| DriverError::Panic("the driver panicked while starting".into()))?[plan.index]
        .take();
    plan.fio_log = plan
        .shared
        .fio_lanes
        .lock()
        .map_err(|_| DriverError::Panic("the driver panicked while starting".into()))?[plan.index]
        .take();
    let mut w = build(&mut plan, &first_name)?;

    // Wait for the common start so all workers begin together.
    clock::sleep_until_ns(plan.start_ns);
    let r = w.run_loop(&mut plan);
    if r.is_err() {
        w.drain_engine();
    }
    let mut interval_misses = r?;
    w.record_parts();

    // Flush the last, partial interval.
    if plan.intervals.is_some() {
        let from = w.interval_start;
        interval_misses += w.swap_intervals(&mut plan, from, clock::now_ns(), true);
    }
    let usage = ThreadUsage::current_thread().since(&usage_start);
    let latlog_stalls = plan.lat_log.take().map_or(0, |lane| lane.finish())
        + plan.fio_log.take().map_or(0, |lane| lane.finish());
    let last = w.ctl.last_measured_completion_ns();
    let njobs = if plan.volumes.iter().any(|v| v.trace.is_some()) {
        1
    } else {
        plan.jobs.len()
    };
    let nv = w.vols.len();
    let recs = w.ctl.take_recorders();
    let mut issued = vec![0u64; nv];
    for s in 0..w.ctl.streams() as u32 {
        issued[w.ctl.target_of(s) as usize] += w.ctl.issued(s);
    }
    let volumes = w
        .vols
        .iter()
        .enumerate()
        .map(|(v, vol)| {
            let (cmds, errs) = vol.host.member_counts();
            VolumeResult {
                index: vol.index,
                // Streams are job-major: stream j * nv + v.
                per_job: (0..njobs).map(|j| recs[j * nv + v].clone()).collect(),
                issued: issued[v],
                layout: vol.host.volume().layout(),
                stats: vol.host.volume().stats(),
                warnings: vol.host.volume().warnings(),
                member_recs: vol.host.member_recorders().to_vec(),
                member_slat: vol.slat.clone(),
                member_clat: vol.clat.clone(),
                member_submit_ns: vol.submit_ns.clone(),
                member_submit_calls: vol.submit_calls.clone(),
                depth: {
                    // Every submit call carries one command: fio's io_u_mark_submit(td, 1).
                    let mut d = vol.depth.counts;
                    d.submit = [0, vol.submit_calls.iter().sum(), 0, 0, 0, 0, 0];
                    d
                },
                member_commands: cmds.to_vec(),
                member_errors: errs.to_vec(),
                member_zoned: vol
                    .zseq
                    .iter()
                    .map(|z| z.as_ref().map(ZoneSeq::stats))
                    .collect(),
            }
        })
        .collect();
    drop(w);
    Ok(WorkerResult {
        volumes,
        usage,
        last_measured_completion_ns: last,
        latlog_stalls,
        interval_misses,
    })
}

/// Builds the controller (one stream per job and volume, job-major), the volumes, the engine
/// and every buffer.
fn build(plan: &mut WorkerPlan, first_name: &str) -> Result<Worker, DriverError> {
    let start_ns = plan.start_ns;
    let timing = RunTiming {
        start_ns,
        ramp_ns: plan.jobs[0].workload.ramp_ns,
        runtime_ns: plan.jobs[0].workload.runtime_ns,
    };
    // Volume geometry first: sources need the volume's size.
    let geometry = volume_geometry(plan)?;
    let specs = stream_specs(plan, &geometry)?;
    let ctl = Controller::new(timing, specs).map_err(|e| DriverError::Engine {
        device: first_name.to_string(),
        error: engine::EngineError::Unsupported {
            engine: plan.engine.name(),
            detail: e.to_string(),
        },
    })?;
    let tags = ctl.slots() as u32;
    let (client, client_bufs, len_max) = client_buffers(&ctl, plan.jobs[0].workload.seed);
    debug_assert_eq!(client.len(), ctl.slots(), "a client buffer per slot");

    // Volumes and the engine over all their members.
    let mut vols = Vec::with_capacity(plan.volumes.len());
    let mut depth_max = 0u64;
    let mut emu_cmds = 0usize;
    let mut sync_max = 0usize;
    for (v, vp) in std::mem::take(&mut plan.volumes).into_iter().enumerate() {
        let (sizes, block, _) = &geometry[v];
        let params = VolumeParams {
            member_sizes_bytes: sizes,
            block_bytes: *block,
            tags,
            len_bytes_max: len_max,
        };
        let zbd = zbd_volume(plan, &vp, &params);
        let vol = build_vol(&plan.layout, &params, vp, timing.ramp_end_ns(), zbd)?;
        let cmds = vol.cmd_len.len();
        depth_max += cmds as u64;
        sync_max += cmds;
        if vol.emu.iter().any(Option::is_some) {
            emu_cmds += cmds;
        }
        vols.push(vol);
    }
    let depth_max = depth_max.min(u64::from(engine::DEPTH_MAX_LIMIT)) as u32;
    let mut engine =
        engine::build(plan.engine, depth_max.max(1), plan.engine_options).map_err(|source| {
            DriverError::Engine {
                device: first_name.to_string(),
                error: source,
            }
        })?;
    attach(&mut *engine, &mut vols, &client, plan, first_name)?;
    let slots = ctl.slots();
    Ok(Worker {
        engine,
        ctl,
        vols,
        slot_off: vec![0; client.len()],
        slot_verify: vec![true; client.len()],
        client,
        _client_bufs: client_bufs,
        completions: vec![Completion::default(); depth_max.max(1) as usize],
        // Every command of every volume may complete synchronously at once (zone answers).
        sync_done: VecDeque::with_capacity(sync_max.max(1024)),
        vol_done: VecDeque::with_capacity(tags as usize + 16),
        seen: VecDeque::with_capacity(depth_max.max(1) as usize + emu_cmds),
        peek: vec![Completion::default(); depth_max.max(1) as usize],
        parts: Vec::with_capacity(PARTS_BUF),
        issue_clock_ns: None,
        fio_log_on: plan.fio_log.is_some(),
        issue_slot: 0,
        slot_t0: vec![0; slots],
        slot_t1: vec![0; slots],
        slot_sync: vec![false; slots],
        emu_pending: BinaryHeap::with_capacity(emu_cmds),
        vnow: 0,
        record_from_ns: timing.ramp_end_ns(),
        sync_engine: !plan.engine.is_async(),
        inflight_cmds: 0,
        final_flushes: 0,
        verify_seed: plan.verify_seed,
        start_ns,
        record: [0u8; RECORD_BYTES],
        fio_record: [0u8; FIO_RECORD_BYTES],
        completed: 0,
        interval_start: 0,
    })
}

/// `--zonemode zbd` over an independent zoned block device: its volume (nines_array::zbd),
/// with the region's whole zones, the jobs' randomness and the open-zone limit of
/// `resolve::zbd_open_zones`. None: not such a volume.
fn zbd_volume(
    plan: &WorkerPlan,
    vp: &VolumePlan,
    params: &VolumeParams,
) -> Option<Result<nines_array::Zbd, nines_array::ArrayError>> {
    let opts = plan.zbd.as_ref()?;
    if !matches!(plan.layout, LayoutSpec::Independent) || vp.members.len() != 1 {
        return None;
    }
    let m = &vp.members[0];
    let dev = m.zoned.as_ref()?;
    let g = &dev.geometry;
    let zs = g.zone_size_bytes.max(1);
    let trace = vp.trace.is_some();
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    let (mut random_writes, mut random_reads) = (trace, trace);
    for j in &plan.jobs {
        let w = &j.workload;
        lo = lo.min(w.region_offset_bytes);
        let end = w
            .region_size_bytes
            .map_or(m.size_bytes, |s| w.region_offset_bytes.saturating_add(s));
        hi = hi.max(end.min(m.size_bytes));
        random_writes |= w.rw.is_random() && w.writes();
        random_reads |= w.rw.is_random() && w.rw.reads(w.read_mix_pct);
    }
    if trace || plan.jobs.is_empty() {
        (lo, hi) = (0, m.size_bytes);
    }
    let n = dev.zones.len() as u64;
    let first = lo.div_ceil(zs).min(n);
    let last = (hi / zs).min(n).max(first);
    Some(nines_array::Zbd::new(nines_array::ZbdParams {
        zone_size_bytes: g.zone_size_bytes,
        zone_capacity_bytes: g.zone_capacity_bytes,
        written_bytes: dev.zones.iter().map(|z| z.written_bytes()).collect(),
        zones: first as u32..last as u32,
        open_zones_max: crate::resolve::zbd_open_zones(dev, opts),
        active_zones_max: g.max_active_zones,
        reset_threshold: opts.zone_reset_threshold,
        reset_frequency: opts.zone_reset_frequency,
        read_beyond_wp: opts.read_beyond_wp,
        // What is there carries no pattern of this run (fio resets with verify too).
        reset_first: plan.verify_seed.is_some(),
        random_writes,
        random_reads,
        block_bytes: params.block_bytes,
        tags: params.tags,
        len_bytes_max: params.len_bytes_max,
        max_write_bytes: g.max_write_bytes,
    }))
}

/// Each volume's member sizes, block size and volume size (from a probe volume of one tag).
type Geometry = (Vec<u64>, u32, u64);

/// The geometry of each of the plan's volumes.
fn volume_geometry(plan: &WorkerPlan) -> Result<Vec<Geometry>, DriverError> {
    let mut geometry = Vec::with_capacity(plan.volumes.len());
    for vp in &plan.volumes {
        let sizes: Vec<u64> = vp.members.iter().map(|m| m.size_bytes).collect();
        let block = vp
            .members
            .iter()
            .map(|m| m.logical_block_bytes)
            .max()
            .unwrap_or(512);
        let probe = nines_array::build(
            &plan.layout,
            &VolumeParams {
                member_sizes_bytes: &sizes,
                block_bytes: block,
                tags: 1,
                len_bytes_max: block,
            },
        )
        .map_err(|error| DriverError::Volume {
            volume: vp.name.clone(),
            error,
        })?;
        geometry.push((sizes, block, probe.size_bytes()));
    }
    Ok(geometry)
}

/// The controller's streams: one per volume replaying its part of a trace (the replays taken
/// from the plan), else one per job and volume, job-major.
fn stream_specs(
    plan: &mut WorkerPlan,
    geometry: &[Geometry],
) -> Result<Vec<StreamSpec>, DriverError> {
    assert_eq!(geometry.len(), plan.volumes.len(), "a geometry per volume");
    let start_ns = plan.start_ns;
    let mut specs = Vec::new();
    let tracing = plan.volumes.iter().any(|v| v.trace.is_some());
    if tracing {
        for (v, vp) in plan.volumes.iter_mut().enumerate() {
            let replay = vp
                .trace
                .take()
                .ok_or_else(|| DriverError::Trace("every volume replays its part".into()))?
                .starting_at(start_ns);
            specs.push(StreamSpec {
                job: 0,
                target: v as u32,
                iodepth: plan.trace_depth.min(plan.iodepth_max).max(1),
                thinktime_ns: 0,
                thinktime_blocks: 0,
                ios_max: None,
                source: Source::other(replay),
            });
        }
        return Ok(specs);
    }
    for (j, job) in plan.jobs.iter().enumerate() {
        for (v, vp) in plan.volumes.iter().enumerate() {
            let (_, block, size) = geometry[v];
            let g = Generator::new(&job.workload, size, block, vp.index, start_ns).map_err(
                |error| DriverError::Workload {
                    device: vp.name.clone(),
                    error,
                },
            )?;
            specs.push(StreamSpec {
                job: j as u32,
                target: v as u32,
                iodepth: job.workload.iodepth.min(plan.iodepth_max).max(1),
                thinktime_ns: job.workload.thinktime_ns,
                thinktime_blocks: job.workload.thinktime_blocks,
                ios_max: job.workload.ios_max,
                source: g.into(),
            });
        }
    }
    Ok(specs)
}

/// Client buffers: each stream's slots get buffers of its largest request, filled with random
/// data from `seed`. Returns each slot's buffer, the buffers, and the largest request.
#[allow(clippy::type_complexity)]
fn client_buffers(ctl: &Controller, seed: u64) -> (Vec<(*mut u8, usize)>, Vec<AlignedBuf>, u32) {
    let mut client = vec![(std::ptr::null_mut(), 0usize); ctl.slots()];
    let mut client_bufs = Vec::with_capacity(ctl.slots());
    let mut len_max = 512u32;
    for s in 0..ctl.streams() as u32 {
        let len = ctl.len_bytes_max(s).max(512);
        len_max = len_max.max(len);
        for slot in ctl.slot_range(s) {
            let mut b = AlignedBuf::new(len as usize);
            fill_random(&mut b, seed ^ u64::from(slot));
            client[slot as usize] = (b.as_mut_ptr(), len as usize);
            client_bufs.push(b);
        }
    }
    (client, client_bufs, len_max)
}

/// One volume: the policy, its scratch buffers, its members' emulated-device leases and the
/// per-command arrays, sized once here (the I/O loop allocates nothing).
fn build_vol(
    layout: &LayoutSpec,
    params: &VolumeParams,
    vp: VolumePlan,
    ramp_end_ns: u64,
    zbd: Option<Result<nines_array::Zbd, nines_array::ArrayError>>,
) -> Result<Vol, DriverError> {
    let places = zbd.is_some();
    let vol: AnyVolume = match zbd {
        Some(z) => z.map(|z| AnyVolume::Other(Box::new(z))),
        None => nines_array::build(layout, params),
    }
    .map_err(|error| DriverError::Volume {
        volume: vp.name.clone(),
        error,
    })?;
    let cmds = vol.cmds_max() as usize;
    let (ns, sz) = vol.scratch();
    let mut scratch: Vec<AlignedBuf> = (0..ns).map(|_| AlignedBuf::new(sz as usize)).collect();
    let scratch_ptrs = scratch
        .iter_mut()
        .map(|b| (b.as_mut_ptr(), b.len()))
        .collect();
    let record_members = vp.members.len() > 1;
    let nm = vp.members.len();
    let zseq = vp
        .members
        .iter()
        .map(|m| {
            m.zoned
                .as_ref()
                .map(|z| ZoneSeq::new(&z.geometry, &z.zones, cmds as u32))
        })
        .collect();
    let mut emu = Vec::with_capacity(nm);
    for m in &vp.members {
        emu.push(match &m.emu {
            None => None,
            Some(h) => Some(h.lease().ok_or_else(|| {
                DriverError::Panic(format!(
                    "{}: the emulated device is already in use by another run",
                    m.name
                ))
            })?),
        });
    }
    Ok(Vol {
        index: vp.index,
        name: vp.name,
        places,
        host: VolumeHost::new(vol, ramp_end_ns, record_members),
        members: vp.members,
        slots: Vec::new(),
        cmd_len: vec![0; cmds],
        cmd_op: vec![Op::Read; cmds],
        cmd_off: vec![0; cmds],
        cmd_member: vec![0; cmds],
        cmd_t0: vec![0; cmds],
        cmd_t1: vec![0; cmds],
        cmd_emu: vec![false; cmds],
        cmd_data: vec![false; cmds],
        cmd_done_ns: vec![0; cmds],
        cmd_res: vec![CmdResult::Ok; cmds],
        emu,
        zseq,
        slat: (0..nm).map(|_| DeviceRecorder::new()).collect(),
        clat: (0..nm).map(|_| DeviceRecorder::new()).collect(),
        submit_ns: vec![0; nm],
        submit_calls: vec![0; nm],
        _scratch: scratch,
        scratch_ptrs,
        failure: None,
        interval: None,
        depth: DepthState::default(),
    })
}

/// Registers every buffer with the engine, adds each real member as an engine target (an
/// emulated one is driven by the worker) and gives each volume its first interval recorder.
fn attach(
    engine: &mut dyn Engine,
    vols: &mut [Vol],
    client: &[(*mut u8, usize)],
    plan: &WorkerPlan,
    first_name: &str,
) -> Result<(), DriverError> {
    // io_uring: fixed buffers save pinning the pages on every I/O. Other engines, or a kernel
    // that refuses (RLIMIT_MEMLOCK), return Ok(false) and use plain buffers.
    let mut regions: Vec<(*mut u8, usize)> = client.to_vec();
    for vol in vols.iter() {
        regions.extend(vol.scratch_ptrs.iter().copied());
    }
    engine
        .register_buffers(&regions)
        .map_err(|source| DriverError::Engine {
            device: first_name.to_string(),
            error: source,
        })?;
    for vol in vols.iter_mut() {
        for (k, m) in vol.members.iter().enumerate() {
            if vol.emu[k].is_some() {
                // Driven by the worker, never by the engine.
                vol.slots.push(usize::MAX);
                continue;
            }
            let slot = engine
                .add_target(m.fd)
                .map_err(|source| DriverError::Engine {
                    device: m.name.clone(),
                    error: source,
                })?;
            vol.slots.push(slot);
        }
        assert_eq!(vol.slots.len(), vol.members.len(), "a slot per member");
        if let Some((_, spare_rx)) = plan.intervals.as_ref() {
            vol.interval = Some(
                spare_rx
                    .recv()
                    .map_err(|_| DriverError::Panic("the interval collector went away".into()))?,
            );
        }
    }
    Ok(())
}

fn cmd_result(expected: u32, result: i64) -> CmdResult {
    if result == i64::from(expected) {
        CmdResult::Ok
    } else if result < 0 {
        CmdResult::Err((-result) as i32)
    } else {
        // A short transfer: the run reports it with the bytes done.
        CmdResult::Err(libc::EIO)
    }
}

impl Worker {
    /// The time for a volume call at a moment measured as `t`: never before the previous call,
    /// so volumes see time in order even when completions seen earlier are handed over after a
    /// later submission.
    #[inline]
    fn vtime(&mut self, t: u64) -> u64 {
        self.vnow = self.vnow.max(t);
        self.vnow
    }

    /// The main loop; returns the interval misses. Bounded: every turn issues, reaps, or waits
    /// for a timed event; the controller ends the run, and `abort` stops it early.
    ///
    /// Timing is per I/O: every member command is submitted on its own, its start read just
    /// before the submit call (for an I/O's first command: the clock read the controller issued
    /// it at, so slat + clat = lat) and its end just after, and the completion ring is checked at once
    /// (a device that completes inside the call, like zram or the page cache, is timed by the
    /// call); completions found by a reap share that reap's clock read. So a device's latency
    /// does not include its siblings' submissions or completions (issue 14).
    fn run_loop(&mut self, plan: &mut WorkerPlan) -> Result<u64, DriverError> {
        let shared = plan.shared.clone();
        let abort = &shared.abort;
        let published = &shared.published[plan.index];
        let ramp_end_ns = self.ctl.timing().ramp_end_ns();
        let interval_ns = plan.interval_ns;
        // Intervals are aligned to the end of the ramp, so the first logged interval starts there.
        self.interval_start = ramp_end_ns;
        let mut next_interval_ns = ramp_end_ns + interval_ns;
        let mut interval_misses = 0u64;
        let mut stopped = false;
        let streams = self.ctl.streams() as u32;
        loop {
            if !stopped && abort.load(Ordering::Relaxed) {
                self.ctl.stop(clock::now_ns());
                stopped = true;
            }
            let now = clock::now_ns();
            if now >= next_interval_ns && plan.intervals.is_some() {
                let from = self.interval_start;
                interval_misses += self.swap_intervals(plan, from, now, false);
                self.interval_start = now;
                next_interval_ns = now + interval_ns;
            }
            let mut next_event_ns = u64::MAX;
            for s in 0..streams {
                self.pump(s, &mut next_event_ns, plan)?;
            }
            for v in 0..self.vols.len() {
                if let Some(t) = self.vols[v].host.next_timer_ns() {
                    let now = clock::now_ns();
                    if t <= now {
                        self.fire_timer(v, now, plan)?;
                        if let Some(t) = self.vols[v].host.next_timer_ns() {
                            next_event_ns = next_event_ns.min(t.max(now + 1));
                        }
                    } else {
                        next_event_ns = next_event_ns.min(t);
                    }
                }
            }
            published.completed.store(self.completed, Ordering::Relaxed);
            if self.ctl.finished() && self.inflight_cmds == 0 && self.emu_pending.is_empty() {
                break;
            }
            // An emulated member's next completion is a timed event like the others.
            if let Some(Reverse((t, _))) = self.emu_pending.peek() {
                next_event_ns = next_event_ns.min(*t);
            }
            if self.inflight_cmds == 0 {
                if next_event_ns == u64::MAX {
                    if self.ctl.finished() {
                        break;
                    }
                    // Streams are waiting for completions but nothing is in flight: only a
                    // stop can lead here (poll again to close the streams).
                    if stopped {
                        continue;
                    }
                    return Err(DriverError::Panic(
                        "the worker has nothing in flight and nothing to wait for, yet the run has not ended".into(),
                    ));
                }
                // Precise: sleep to just before the event, then spin on the clock, so thinktime
                // and rate-paced due times are kept to about a microsecond. (A stream that ran
                // out of turns asks for 0: go round again at once.)
                if next_event_ns > 0 {
                    clock::wait_until_ns(next_event_ns, abort);
                }
                self.harvest_emu(plan)?;
                continue;
            }
            let min = if next_event_ns == u64::MAX { 1 } else { 0 };
            let n = self
                .engine
                .reap(min, &mut self.completions)
                .map_err(|source| DriverError::Engine {
                    device: self.vols[0].name.clone(),
                    error: source,
                })?;
            if n == 0 {
                self.harvest_emu(plan)?;
                continue;
            }
            let t = clock::now_ns();
            if t >= self.record_from_ns {
                mark_reaped(&mut self.vols, &self.completions[..n]);
            }
            for i in 0..n {
                self.seen.push_back((self.completions[i], t));
            }
            self.handle_seen(plan)?;
            self.harvest_emu(plan)?;
        }
        self.final_flush(plan)?;
        Ok(interval_misses)
    }

    /// Runs volume `v`'s due timer at `now` and carries out what it asks.
    fn fire_timer(&mut self, v: usize, now: u64, plan: &mut WorkerPlan) -> Result<(), DriverError> {
        let vt = self.vtime(now);
        let vol = &mut self.vols[v];
        let mut data = PtrData {
            client: &self.client,
            scratch: &vol.scratch_ptrs,
        };
        vol.host.on_timer(vt, &mut data);
        self.drain(v, vt, plan)?;
        self.handle_seen(plan)
    }

    /// Volumes that hold acknowledged writes in a buffer of their own (a D/ND write-back
    /// buffer) are flushed before the worker ends, so the run leaves every write it completed
    /// on the members: a FLUSH through each (tag 0: the controller's slots are all free now),
    /// driven to completion with its timers. Bounded by a minute.
    fn final_flush(&mut self, plan: &mut WorkerPlan) -> Result<(), DriverError> {
        let vols: Vec<usize> = (0..self.vols.len())
            .filter(|&v| self.vols[v].host.volume().write_back())
            .collect();
        if vols.is_empty() {
            return Ok(());
        }
        self.final_flushes = vols.len() as u32;
        for &v in &vols {
            let now = self.vtime(clock::now_ns());
            let vol = &mut self.vols[v];
            let mut data = PtrData {
                client: &self.client,
                scratch: &vol.scratch_ptrs,
            };
            let io = VolIo {
                tag: 0,
                op: nines_array::VolOp::Flush,
                offset_bytes: 0,
                len_bytes: 0,
                fua: false,
            };
            vol.host.submit(now, io, &mut data);
            self.drain(v, now, plan)?;
            self.handle_seen(plan)?;
        }
        let deadline = clock::now_ns() + 60_000_000_000;
        while self.final_flushes > 0 {
            let now = clock::now_ns();
            if now > deadline {
                return Err(DriverError::Panic(
                    "a volume's write-back buffer did not drain within a minute at the end of the run".into(),
                ));
            }
            for v in 0..self.vols.len() {
                if self.vols[v].host.next_timer_ns().is_some_and(|t| t <= now) {
                    self.fire_timer(v, now, plan)?;
                }
            }
            self.harvest_emu(plan)?;
            if self.inflight_cmds == 0 {
                std::hint::spin_loop();
                continue;
            }
            let n = self
                .engine
                .reap(0, &mut self.completions)
                .map_err(|source| DriverError::Engine {
                    device: self.vols[0].name.clone(),
                    error: source,
                })?;
            let t = clock::now_ns();
            for i in 0..n {
                self.seen.push_back((self.completions[i], t));
            }
            self.handle_seen(plan)?;
        }
        Ok(())
    }

    /// Hands every seen completion to its volume, in the order seen, with the time it was seen;
    /// completions seen while doing so (follow-up commands) are handled too. Bounded by the
    /// commands in flight plus those the volumes send meanwhile.
    fn handle_seen(&mut self, plan: &mut WorkerPlan) -> Result<(), DriverError> {
        let mut turns = 0usize;
        while let Some((c, t)) = self.seen.pop_front() {
            turns += 1;
            assert!(
                turns <= SYNC_TURN_MAX,
                "volumes kept completing commands without end"
            );
            if self.parts.len() == PARTS_BUF {
                self.record_parts();
            }
            let v = (c.user_data >> 32) as usize;
            let id = c.user_data as u32;
            assert!(
                v < self.vols.len() && (id as usize) < self.vols[v].cmd_len.len(),
                "engine returned unknown user_data {:#x}",
                c.user_data
            );
            let vt = self.vtime(t);
            let record_from = self.record_from_ns;
            let sync_engine = self.sync_engine;
            let vol = &mut self.vols[v];
            let i = id as usize;
            let emulated = vol.cmd_emu[i];
            let result = if emulated {
                vol.cmd_emu[i] = false;
                let m = vol.cmd_member[i] as usize;
                if vol.cmd_t0[i] >= record_from
                    && vol.cmd_data[i]
                    && let Some(dev) = vol.emu[m].as_mut()
                {
                    dev.record_overhead(vol.cmd_done_ns[i], t);
                }
                vol.cmd_res[i]
            } else {
                self.inflight_cmds -= 1;
                cmd_result(vol.cmd_len[i], c.result)
            };
            // A zoned member's zone write: its zone's next command goes now; an append says
            // where it went.
            let m = vol.cmd_member[i] as usize;
            let mut pump = None;
            let result = match vol.zseq[m].as_mut() {
                Some(seq) if !emulated => match seq.complete(id, result) {
                    Some((r, zone)) => {
                        if seq.stale(zone) {
                            let start = seq.zone_start_bytes(zone);
                            let found = crate::zoned::report_zone(vol.members[m].fd, start).ok();
                            seq.refresh(zone, found.as_ref());
                        }
                        pump = Some(zone);
                        r
                    }
                    None => result,
                },
                _ => result,
            };
            // (An emulated member's Busy is an answer to a fast-fail read or a query.)
            let failed_result = match result {
                CmdResult::Ok | CmdResult::Busy { .. } | CmdResult::Appended { .. } if emulated => {
                    None
                }
                CmdResult::Err(e) if emulated => Some(-i64::from(e)),
                // (An append of a zoned member, written by the engine at its write pointer.)
                CmdResult::Ok | CmdResult::Appended { .. } => None,
                _ => Some(c.result),
            };
            if let Some(r) = failed_result {
                vol.failure = Some(MemberFailure {
                    member: vol.cmd_member[i],
                    op: vol.cmd_op[i],
                    offset_bytes: vol.cmd_off[i],
                    len_bytes: vol.cmd_len[i],
                    result: r,
                });
            }
            let emu_nodata = emulated && !vol.cmd_data[i];
            let (t0, t1) = (vol.cmd_t0[i], vol.cmd_t1[i]);
            if t0 >= record_from && !emu_nodata {
                let (slat_ns, clat_ns) = if sync_engine && !emulated {
                    // The I/O happened inside the call: all of it is completion latency.
                    (None, t1 - t0)
                } else {
                    (Some(t1 - t0), t.saturating_sub(t1))
                };
                // Never beyond PARTS_BUF: recorded above when full.
                self.parts.push(PartTiming {
                    vol: v as u32,
                    member: vol.cmd_member[i],
                    op: vol.cmd_op[i],
                    len_bytes: vol.cmd_len[i],
                    slat_ns,
                    clat_ns,
                });
            }
            if let Some(zone) = pump {
                self.zone_run(v, m, None, zone, None)?;
            }
            let vol = &mut self.vols[v];
            let mut data = PtrData {
                client: &self.client,
                scratch: &vol.scratch_ptrs,
            };
            vol.host.member_done(vt, CmdDone { id, result }, &mut data);
            self.drain(v, vt, plan)?;
        }
        Ok(())
    }

    /// Records the buffered member command timings into their members' slat and clat
    /// histograms (bounded by `PARTS_BUF`).
    fn record_parts(&mut self) {
        for p in &self.parts {
            let vol = &mut self.vols[p.vol as usize];
            let m = p.member as usize;
            if let Some(slat_ns) = p.slat_ns {
                vol.slat[m].record(p.op, slat_ns, p.len_bytes);
            }
            vol.clat[m].record(p.op, p.clat_ns, p.len_bytes);
        }
        self.parts.clear();
    }

    /// Issues what stream `s` may issue at `now`; folds its next due time into `next_event_ns`.
    #[inline]
    fn pump(
        &mut self,
        s: u32,
        next_event_ns: &mut u64,
        plan: &mut WorkerPlan,
    ) -> Result<(), DriverError> {
        // Bounded: at most the stream's depth per call. A slot can free again inside this loop
        // (a device that completes inside its submit call is seen at once), so without the
        // bound one such stream would keep issuing and starve the worker's other streams.
        let depth = self.ctl.slot_range(s).len();
        for _ in 0..depth {
            // Each I/O is issued at its own time, not at the turn's.
            let clock_ns = clock::now_ns();
            let now = self.vtime(clock_ns);
            match self.ctl.poll(s, now) {
                Poll::Issue(is) => {
                    let v = self.ctl.target_of(s) as usize;
                    let mut req = is.req;
                    let mut verify = true;
                    if self.vols[v].places && !req.flush {
                        // The policy chooses where (--zonemode zbd): the I/O, its pattern and
                        // its check are of that place.
                        let asked = VolIo {
                            tag: is.slot,
                            op: req.op.into(),
                            offset_bytes: req.offset_bytes,
                            len_bytes: req.len_bytes,
                            fua: req.fua,
                        };
                        if let Some(p) = self.vols[v].host.place(&asked) {
                            req.offset_bytes = p.offset_bytes;
                            verify = p.verify;
                        }
                    }
                    self.slot_off[is.slot as usize] = req.offset_bytes;
                    self.slot_verify[is.slot as usize] = verify;
                    if let (Some(seed), Op::Write) = (self.verify_seed, req.op) {
                        let (ptr, _) = self.client[is.slot as usize];
                        // SAFETY: the slot's buffer holds the stream's largest request and no
                        // engine holds it (its I/O completed before the slot was free again).
                        let buf =
                            unsafe { std::slice::from_raw_parts_mut(ptr, req.len_bytes as usize) };
                        fill_pattern(buf, req.offset_bytes, seed);
                    }
                    // A replayed flush reaches the members as a flush (fdatasync); a FUA
                    // write's bit travels with it (the engines write it as any other).
                    let io = VolIo {
                        tag: is.slot,
                        op: if req.flush {
                            nines_array::VolOp::Flush
                        } else {
                            req.op.into()
                        },
                        offset_bytes: req.offset_bytes,
                        len_bytes: req.len_bytes,
                        fua: req.fua,
                    };
                    let vol = &mut self.vols[v];
                    let mut data = PtrData {
                        client: &self.client,
                        scratch: &vol.scratch_ptrs,
                    };
                    // The I/O's first member command starts when the controller issued it (the
                    // clock read its latency counts from), so slat + clat = lat.
                    self.issue_clock_ns = Some(clock_ns);
                    if self.fio_log_on {
                        self.issue_slot = is.slot;
                        let slot = is.slot as usize;
                        self.slot_t0[slot] = clock_ns;
                        self.slot_t1[slot] = clock_ns;
                        self.slot_sync[slot] = false;
                    }
                    // fio's io_u_mark_depth: the depth in flight once this I/O is.
                    let d = &mut vol.depth;
                    d.inflight_ios += 1;
                    if clock_ns >= self.record_from_ns {
                        d.counts.mark_depth(d.inflight_ios, 1);
                    }
                    vol.host.submit(now, io, &mut data);
                    let r = self.drain(v, now, plan);
                    self.issue_clock_ns = None;
                    r?;
                    self.handle_seen(plan)?;
                    self.harvest_emu(plan)?;
                }
                Poll::WaitUntil(t) => {
                    *next_event_ns = (*next_event_ns).min(t);
                    return Ok(());
                }
                Poll::Busy | Poll::Done => return Ok(()),
            }
        }
        // Out of turns, not out of work: the loop comes back without waiting.
        *next_event_ns = 0;
        Ok(())
    }

    /// Carries out volume `v`'s outputs: data commands go to the engine, others are done here;
    /// finished volume I/Os are completed. Synchronous completions are handed back until none
    /// is left (bounded).
    fn drain(&mut self, v: usize, now: u64, plan: &mut WorkerPlan) -> Result<(), DriverError> {
        self.drain_one(v, now)?;
        let mut turns = 0usize;
        while let Some((v, done)) = self.sync_done.pop_front() {
            turns += 1;
            assert!(
                turns <= SYNC_TURN_MAX,
                "a volume kept answering synchronous commands with more of them"
            );
            let vol = &mut self.vols[v];
            let mut data = PtrData {
                client: &self.client,
                scratch: &vol.scratch_ptrs,
            };
            vol.host.member_done(now, done, &mut data);
            self.drain_one(v, now)?;
        }
        while let Some((v, tag, result)) = self.vol_done.pop_front() {
            if self.final_flushes > 0 {
                // The end-of-run FLUSH (see `final_flush`): no controller slot behind it.
                if let IoResult::Err(errno) = result {
                    return Err(DriverError::Panic(format!(
                        "{}: flushing its write-back buffer at the end of the run failed (errno {errno})",
                        self.vols[v].name
                    )));
                }
                let _ = tag;
                self.final_flushes -= 1;
                continue;
            }
            self.finish_io(v, tag, result, now, plan)?;
        }
        Ok(())
    }

    fn drain_one(&mut self, v: usize, now: u64) -> Result<(), DriverError> {
        let out = self.vols[v].host.take_outputs();
        let mut result = Ok(());
        for o in out.as_slice() {
            match o {
                Output::Cmd(c) => {
                    if let Err(e) = self.send(v, c, now) {
                        result = Err(e);
                        break;
                    }
                }
                Output::Done(d) => self.vol_done.push_back((v, d.tag, d.result)),
            }
        }
        self.vols[v].host.put_outputs(out);
        result
    }

    /// Sends one member command.
    #[inline]
    fn send(&mut self, v: usize, c: &MemberCmd, now: u64) -> Result<(), DriverError> {
        // The first member command of a freshly issued I/O starts at the issue's clock read.
        let issue_clock_ns = self.issue_clock_ns.take();
        let vol = &mut self.vols[v];
        let m = c.member as usize;
        assert!(
            m < vol.members.len(),
            "command for member {m} of a volume of {}",
            vol.members.len()
        );
        vol.host.sent(c, now);
        if vol.emu[m].is_some() {
            let r = self.send_emu(v, c);
            if self.fio_log_on && issue_clock_ns.is_some() {
                self.slot_t1[self.issue_slot as usize] = self.vols[v].cmd_t1[c.id as usize];
            }
            return r;
        }
        if let Some(seq) = vol.zseq[m].as_mut()
            && ZoneSeq::sequenced(c.op)
        {
            // In send order, one in flight per zone (crate::zoned): now, or when the zone's
            // command before it completes.
            return match seq.submit(c) {
                None => Ok(()),
                Some(d) => self.zone_run(v, m, Some(d), u32::MAX, issue_clock_ns),
            };
        }
        let op = match c.op {
            CmdOp::Read | CmdOp::FastFailRead { .. } => Op::Read,
            // A file or block device has no FDP: a placed write is a write.
            CmdOp::Write | CmdOp::PlacedWrite { .. } => Op::Write,
            other => {
                let result = sync_command(&vol.members[m], other, c.offset_bytes, c.len_bytes);
                if let CmdResult::Err(e) = result {
                    vol.failure = Some(MemberFailure {
                        member: c.member,
                        op: Op::Write,
                        offset_bytes: c.offset_bytes,
                        len_bytes: c.len_bytes,
                        result: -i64::from(e),
                    });
                }
                self.sync_done.push_back((v, CmdDone { id: c.id, result }));
                return Ok(());
            }
        };
        self.submit_engine(v, c, op, c.offset_bytes, issue_clock_ns)
    }

    /// Submits member command `c` of volume `v` to the engine as `op` at `offset_bytes`.
    #[inline]
    fn submit_engine(
        &mut self,
        v: usize,
        c: &MemberCmd,
        op: Op,
        offset_bytes: u64,
        issue_clock_ns: Option<u64>,
    ) -> Result<(), DriverError> {
        let vol = &mut self.vols[v];
        let m = c.member as usize;
        let id = c.id as usize;
        vol.cmd_len[id] = c.len_bytes;
        vol.cmd_op[id] = op;
        vol.cmd_off[id] = offset_bytes;
        vol.cmd_member[id] = c.member;
        let mut data = PtrData {
            client: &self.client,
            scratch: &vol.scratch_ptrs,
        };
        let buf = data.ptr(c.buf, c.len_bytes);
        let target = vol.slots[m];
        let engine_error = |source| DriverError::Engine {
            device: vol.members[m].name.clone(),
            error: source,
        };
        // Submitted on its own and timed by its own call (psync performs the I/O in it). Its
        // start: the issue's clock read for an I/O's first command, else a fresh one.
        let t0 = issue_clock_ns.unwrap_or_else(clock::now_ns);
        self.engine
            .submit_one(IoDesc {
                target,
                op,
                offset_bytes,
                len_bytes: c.len_bytes,
                buf,
                user_data: (v as u64) << 32 | u64::from(c.id),
            })
            .map_err(engine_error)?;
        let t1 = clock::now_ns();
        vol.cmd_t0[id] = t0;
        vol.cmd_t1[id] = t1;
        if self.fio_log_on && issue_clock_ns.is_some() {
            // The I/O's first command: its submit call ends the I/O's fio slat.
            let slot = self.issue_slot as usize;
            self.slot_t1[slot] = t1;
            self.slot_sync[slot] = self.sync_engine;
        }
        let measured = t0 >= self.record_from_ns;
        if measured {
            vol.submit_ns[m] += t1 - t0;
            vol.submit_calls[m] += 1;
        }
        self.inflight_cmds += 1;
        // Whatever completed meanwhile (this I/O inside the call, others since the last look) is
        // seen now: the user-space completion ring makes this nearly free.
        let n = self
            .engine
            .reap(0, &mut self.peek)
            .map_err(|source| DriverError::Engine {
                device: self.vols[v].members[m].name.clone(),
                error: source,
            })?;
        if n > 0 {
            // An asynchronous engine's completions are seen after this reap, as fio stamps a
            // completion after its getevents: so a device that completed inside the submit call
            // has the reap as its completion latency (fio's clat), not zero. psync's I/O ended
            // with its call, which `t1` stamps already (fio stamps it there too).
            let t2 = if self.sync_engine {
                t1
            } else {
                clock::now_ns()
            };
            if measured {
                mark_reaped(&mut self.vols, &self.peek[..n]);
            }
            for k in 0..n {
                self.seen.push_back((self.peek[k], t2));
            }
        }
        Ok(())
    }

    /// Carries out what a zoned member's ordering lets go: `first`, then the commands waiting
    /// in its zone (`zone`, or the zone `first` names) until one is in flight on the engine or
    /// none waits. Resets and finishes are their ioctls, done here; answers and their results
    /// are synchronous completions. Bounded by the commands the ordering holds.
    fn zone_run(
        &mut self,
        v: usize,
        m: usize,
        mut first: Option<Dispatch>,
        mut zone: u32,
        mut issue_clock_ns: Option<u64>,
    ) -> Result<(), DriverError> {
        let turns = self.vols[v].cmd_len.len() + 1;
        for _ in 0..turns {
            let next = match first.take() {
                Some(d) => Some(d),
                None => self.vols[v].zseq[m].as_mut().and_then(|s| s.next(zone)),
            };
            let Some(d) = next else { return Ok(()) };
            match d {
                Dispatch::Write {
                    cmd, offset_bytes, ..
                } => {
                    let t = issue_clock_ns.take();
                    return self.submit_engine(v, &cmd, Op::Write, offset_bytes, t);
                }
                Dispatch::Answer {
                    zone: z,
                    id,
                    result,
                } => {
                    self.zone_answer(v, m, id, result);
                    zone = z;
                }
                Dispatch::Manage { zone: z, cmd } => {
                    let vol = &mut self.vols[v];
                    let mp = &vol.members[m];
                    let (op, len) = match cmd.op {
                        CmdOp::ZoneReset => (ZoneMgmt::Reset, u64::from(cmd.len_bytes)),
                        _ => (
                            ZoneMgmt::Finish,
                            mp.zoned.as_ref().map_or(0, |g| g.geometry.zone_size_bytes),
                        ),
                    };
                    let r = match crate::zoned::zone_mgmt(mp.fd, op, cmd.offset_bytes, len) {
                        Ok(()) => CmdResult::Ok,
                        Err(e) => CmdResult::Err(e.raw_os_error().unwrap_or(libc::EIO)),
                    };
                    let seq = vol.zseq[m].as_mut().expect("a zoned member");
                    let (result, _) = seq.complete(cmd.id, r).expect("the command in flight");
                    if seq.stale(z) {
                        let found = crate::zoned::report_zone(mp.fd, cmd.offset_bytes).ok();
                        seq.refresh(z, found.as_ref());
                    }
                    self.zone_answer(v, m, cmd.id, result);
                    zone = z;
                }
            }
        }
        unreachable!("a zone's queue holds at most the volume's commands")
    }

    /// A zoned member's command completed without the engine: handed to the volume with the
    /// other synchronous completions.
    fn zone_answer(&mut self, v: usize, m: usize, id: u32, result: CmdResult) {
        if let CmdResult::Err(e) = result {
            let vol = &mut self.vols[v];
            let c = vol.zseq[m].as_ref().and_then(|s| s.command(id));
            vol.failure = Some(MemberFailure {
                member: m as u32,
                op: Op::Write,
                offset_bytes: c.map_or(0, |c| c.offset_bytes),
                len_bytes: c.map_or(0, |c| c.len_bytes),
                result: -i64::from(e),
            });
        }
        self.sync_done.push_back((v, CmdDone { id, result }));
    }

    /// Sends one member command to an emulated member: the model says when it completes (its
    /// data moves now); it is seen complete once the clock reaches that time.
    #[inline]
    fn send_emu(&mut self, v: usize, c: &MemberCmd) -> Result<(), DriverError> {
        let vol = &mut self.vols[v];
        let m = c.member as usize;
        let (op, data) = match c.op {
            CmdOp::Read | CmdOp::FastFailRead { .. } => (Op::Read, true),
            CmdOp::Write | CmdOp::PlacedWrite { .. } | CmdOp::ZoneAppend => (Op::Write, true),
            _ => (Op::Write, false),
        };
        let buf = if data {
            let mut d = PtrData {
                client: &self.client,
                scratch: &vol.scratch_ptrs,
            };
            d.ptr(c.buf, c.len_bytes)
        } else {
            std::ptr::null_mut()
        };
        let dev = vol.emu[m].as_mut().expect("checked by the caller");
        let t0 = clock::now_ns();
        let (done_ns, result) = dev.send(t0, c, buf);
        let t1 = clock::now_ns();
        let id = c.id as usize;
        vol.cmd_len[id] = c.len_bytes;
        vol.cmd_op[id] = op;
        vol.cmd_off[id] = c.offset_bytes;
        vol.cmd_member[id] = c.member;
        vol.cmd_t0[id] = t0;
        vol.cmd_t1[id] = t1;
        vol.cmd_emu[id] = true;
        vol.cmd_data[id] = data;
        vol.cmd_done_ns[id] = done_ns;
        vol.cmd_res[id] = result;
        if data && t0 >= self.record_from_ns {
            vol.submit_ns[m] += t1 - t0;
            vol.submit_calls[m] += 1;
        }
        // Never beyond the capacity it was allocated with: a volume has at most its cmds_max
        // commands out, and ids are below it.
        debug_assert!(self.emu_pending.len() < self.emu_pending.capacity());
        self.emu_pending
            .push(Reverse((done_ns, (v as u64) << 32 | u64::from(c.id))));
        Ok(())
    }

    /// Hands every emulated command whose completion time has come to its volume, seen now.
    #[inline]
    fn harvest_emu(&mut self, plan: &mut WorkerPlan) -> Result<(), DriverError> {
        let Some(Reverse((first, _))) = self.emu_pending.peek() else {
            return Ok(());
        };
        let t = clock::now_ns();
        if *first > t {
            return Ok(());
        }
        let measured = t >= self.record_from_ns;
        while let Some(Reverse((done, ud))) = self.emu_pending.peek().copied() {
            if done > t {
                break;
            }
            self.emu_pending.pop();
            if measured {
                self.vols[(ud >> 32) as usize].depth.reaped += 1;
            }
            self.seen.push_back((
                Completion {
                    user_data: ud,
                    result: 0,
                },
                t,
            ));
        }
        if measured {
            for v in &mut self.vols {
                let d = &mut v.depth;
                if d.reaped > 0 {
                    d.counts.mark_complete(d.reaped);
                    d.reaped = 0;
                }
            }
        }
        self.handle_seen(plan)
    }

    /// A volume I/O finished: verify, complete it in the controller, record and log it.
    fn finish_io(
        &mut self,
        v: usize,
        slot: u32,
        result: IoResult,
        now: u64,
        plan: &mut WorkerPlan,
    ) -> Result<(), DriverError> {
        if let IoResult::Err(errno) = result {
            return Err(self.io_error(v, slot, errno));
        }
        let c = self.ctl.complete(slot, now);
        self.completed += 1;
        let d = &mut self.vols[v].depth;
        d.inflight_ios = d.inflight_ios.saturating_sub(1);
        // Where the I/O went (a placing policy's offset, else the request's).
        let offset_bytes = self.slot_off[slot as usize];
        if let (Some(seed), Op::Read, true) =
            (self.verify_seed, c.req.op, self.slot_verify[slot as usize])
        {
            let (ptr, _) = self.client[slot as usize];
            // SAFETY: the read completed; its buffer holds len_bytes bytes.
            let buf = unsafe { std::slice::from_raw_parts(ptr, c.req.len_bytes as usize) };
            if let Some(bad) = check_pattern(buf, offset_bytes, seed) {
                return Err(DriverError::Verify {
                    volume: self.vols[v].name.clone(),
                    offset_bytes,
                    len_bytes: c.req.len_bytes,
                    bad_offset_bytes: bad,
                });
            }
        }
        if c.measured {
            let nv = self.vols.len() as u32;
            let vol = &mut self.vols[v];
            if let Some(iv) = vol.interval.as_mut() {
                iv.record(c.req.op, c.latency_ns, c.req.len_bytes);
            }
            if let Some(lane) = plan.fio_log.as_mut() {
                let s = slot as usize;
                let (t0, t1) = (self.slot_t0[s], self.slot_t1[s]);
                let (slat_ns, clat_ns) = if self.slot_sync[s] {
                    (None, now.saturating_sub(t0))
                } else {
                    (Some(t1.saturating_sub(t0)), now.saturating_sub(t1))
                };
                let job = c.stream / nv;
                FioRecord {
                    completion_ns: now.saturating_sub(self.record_from_ns),
                    lat_ns: c.latency_ns,
                    slat_ns,
                    clat_ns,
                    offset_bytes,
                    len_bytes: c.req.len_bytes,
                    job: job * plan.targets + vol.index,
                    op: c.req.op,
                }
                .encode(&mut self.fio_record);
                lane.push(&self.fio_record);
            }
            if let Some(lane) = plan.lat_log.as_mut() {
                LatRecord {
                    completion_ns: now - self.start_ns,
                    latency_ns: c.latency_ns,
                    offset_bytes,
                    device: vol.index as u16,
                    op: c.req.op,
                }
                .encode(&mut self.record);
                lane.push(&self.record);
            }
        }
        Ok(())
    }

    #[cold]
    fn io_error(&self, v: usize, slot: u32, errno: i32) -> DriverError {
        let vol = &self.vols[v];
        if let Some(f) = vol.failure {
            let device = vol.members[f.member as usize].name.clone();
            return if f.result < 0 {
                DriverError::Io {
                    device,
                    op: f.op,
                    offset_bytes: f.offset_bytes,
                    len_bytes: f.len_bytes,
                    error: io::Error::from_raw_os_error((-f.result) as i32),
                }
            } else {
                DriverError::Short {
                    device,
                    op: f.op,
                    offset_bytes: f.offset_bytes,
                    len_bytes: f.len_bytes,
                    done_bytes: f.result as u64,
                }
            };
        }
        let _ = slot;
        DriverError::VolumeIo {
            volume: vol.name.clone(),
            op: "I/O",
            offset_bytes: 0,
            error: io::Error::from_raw_os_error(errno),
        }
    }

    /// After a failure: wait for what the engine still holds, so buffers are not freed under
    /// the kernel.
    fn drain_engine(&mut self) {
        // Emulated commands hold no buffer (their data moved when they were sent).
        self.emu_pending.clear();
        let mut turns = 0u32;
        while self.inflight_cmds > 0 && turns < 1_000_000 {
            let n = self
                .engine
                .reap(1, &mut self.completions)
                .unwrap_or(self.inflight_cmds as usize);
            self.inflight_cmds = self.inflight_cmds.saturating_sub(n as u32);
            turns += 1;
        }
    }

    /// Hands every volume's interval recorder to the collector and continues in a spare. Without
    /// a spare (the collector lags) the volume keeps its recorder, so the interval merges into
    /// the next; returns how many volumes did so. The final swap (`last`) sends the recorders
    /// themselves: the run is over, and no interval may be lost.
    fn swap_intervals(
        &mut self,
        plan: &mut WorkerPlan,
        start_ns: u64,
        end_ns: u64,
        last: bool,
    ) -> u64 {
        let Some((tx, spare_rx)) = plan.intervals.as_ref() else {
            return 0;
        };
        let mut misses = 0;
        for vol in self.vols.iter_mut() {
            if last {
                // An empty last interval (the run ended just after a boundary) is not worth a line.
                if let Some(rec) = vol.interval.take().filter(|r| r.ios() > 0) {
                    let msg = IntervalMsg {
                        worker: plan.index,
                        device: vol.index,
                        start_ns,
                        end_ns,
                        rec,
                    };
                    // Fails only when the collector is gone, and then nobody wants the interval.
                    let _ = tx.send(msg);
                }
                continue;
            }
            let spare = match spare_rx.try_recv() {
                Ok(s) => s,
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => {
                    misses += 1;
                    continue;
                }
            };
            let full = vol
                .interval
                .replace(spare)
                .expect("interval recorder present");
            let msg = IntervalMsg {
                worker: plan.index,
                device: vol.index,
                start_ns,
                end_ns,
                rec: full,
            };
            if let Err(e) = tx.try_send(msg) {
                // Collector full or gone: keep recording into the same recorder; nothing is lost.
                let msg = match e {
                    std::sync::mpsc::TrySendError::Full(m)
                    | std::sync::mpsc::TrySendError::Disconnected(m) => m,
                };
                // The unused spare is dropped: a rare, cold path.
                drop(vol.interval.replace(msg.rec));
                misses += 1;
            }
        }
        misses
    }
}

/// A member command no engine queues here: flush, trim, write zeroes, device control.
#[cold]
/// Counts one reap in fio's `iodepth_complete` of each volume it returned completions of (a
/// worker's reap serves all its volumes; a reap that returned none of a volume's is not one of
/// its reaps). A worker of one volume adds one count; others go through [`mark_reaped_many`].
#[inline(always)]
fn mark_reaped(vols: &mut [Vol], done: &[Completion]) {
    match vols {
        [v] => v.depth.counts.mark_complete(done.len() as u64),
        _ => mark_reaped_many(vols, done),
    }
}

/// [`mark_reaped`] for a worker of several volumes: two passes over the completions.
#[inline(never)]
fn mark_reaped_many(vols: &mut [Vol], done: &[Completion]) {
    let vol_of = |c: &Completion| (c.user_data >> 32) as usize;
    for c in done {
        if let Some(v) = vols.get_mut(vol_of(c)) {
            v.depth.reaped += 1;
        }
    }
    for c in done {
        if let Some(v) = vols.get_mut(vol_of(c))
            && v.depth.reaped > 0
        {
            v.depth.counts.mark_complete(v.depth.reaped);
            v.depth.reaped = 0;
        }
    }
}

fn sync_command(m: &MemberPlan, op: CmdOp, offset_bytes: u64, len_bytes: u32) -> CmdResult {
    let fd: RawFd = m.fd;
    let ok = |rc: libc::c_int| {
        if rc == 0 {
            CmdResult::Ok
        } else {
            CmdResult::Err(
                io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO),
            )
        }
    };
    let range = [offset_bytes, u64::from(len_bytes)];
    // A zoned member takes no discard or zeroes in place (its emulated twin refuses them too);
    // its zone commands go through its ordering (`Worker::zone_run`).
    if m.zoned.is_some() && matches!(op, CmdOp::Trim | CmdOp::WriteZeroes) {
        return CmdResult::Err(libc::EOPNOTSUPP);
    }
    match op {
        // SAFETY: plain syscalls on a descriptor the driver keeps open; `range` outlives them.
        CmdOp::Flush => ok(unsafe { libc::fdatasync(fd) }),
        CmdOp::Trim if m.block_device => ok(unsafe { libc::ioctl(fd, BLKDISCARD, range.as_ptr()) }),
        CmdOp::Trim => ok(unsafe {
            libc::fallocate(
                fd,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset_bytes as libc::off_t,
                libc::off_t::from(len_bytes),
            )
        }),
        CmdOp::WriteZeroes if m.block_device => {
            ok(unsafe { libc::ioctl(fd, BLKZEROOUT, range.as_ptr()) })
        }
        CmdOp::WriteZeroes => ok(unsafe {
            libc::fallocate(
                fd,
                libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
                offset_bytes as libc::off_t,
                libc::off_t::from(len_bytes),
            )
        }),
        // Real devices here have no PLM windows, GC control or busy queries (emulated SSDs do).
        CmdOp::Control(_) => CmdResult::Err(libc::EOPNOTSUPP),
        // Files and conventional block devices have no zones (a zoned block device's zone
        // commands never reach here).
        CmdOp::ZoneAppend | CmdOp::ZoneReset | CmdOp::ZoneFinish => {
            CmdResult::Err(libc::EOPNOTSUPP)
        }
        CmdOp::Read | CmdOp::Write | CmdOp::PlacedWrite { .. } | CmdOp::FastFailRead { .. } => {
            unreachable!("data commands go to the engine")
        }
    }
}

/// `_IO(0x12, 119)` and `_IO(0x12, 127)` from linux/fs.h.
const BLKDISCARD: libc::c_ulong = 0x1277;
const BLKZEROOUT: libc::c_ulong = 0x127f;
