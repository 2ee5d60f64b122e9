//! The discrete-event loop: virtual nanoseconds, one queue of small copyable events, the
//! run controller ([`nines_core::run::Controller`]) deciding what each stream issues, array
//! volumes ([`nines_array`]) turning volume I/Os into member commands, SSD models as members and
//! a [`Host`] for CPU costs.
//!
//! Data flow per I/O:
//!
//! ```text
//! poll(stream) ─► Issue ─► Host::submit (CPU) ─► Volume::submit ─► member commands
//!   ─► SimMember::send (each returns its completion time) ─► CMD_DONE(t) per command
//!   ─► Volume::member_done ─► volume done ─► Host::complete (CPU) ─► COMPLETE(t')
//!   ─► Controller::complete (latency t' - intended, measured or not) ─► logs ─► poll(stream)
//! ```
//!
//! A device computes a command's completion time when the command is sent (its resources are
//! timelines), so there is one event per member command, not per flash operation; a policy sees
//! every member complete. Events are ordered by (time, sequence number) in a radix heap
//! ([`crate::queue`]): the same inputs give the same order, the same latencies and
//! byte-identical JSON. The queue and every table are sized
//! before the loop, which allocates nothing in steady state.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};

use nines_array::{
    CmdDone, CmdResult, FoldedIo, IoResult, NoData, Output, VolIo, VolOp, Volume, VolumeHost,
    VolumeParams,
};
use nines_core::hdrlog::IntervalLog;
use nines_core::latlog::{LatLogHeader, LatRecord, write_header};
use nines_core::op::Op;
use nines_core::run::{Controller, Poll, RunTiming, StreamSpec};
use nines_core::source::Source;
use nines_core::stats::DeviceRecorder;
use nines_core::workload::Generator;
use nines_trace::{Trace, TraceReplay};

use crate::config::{LOGICAL_BLOCK_BYTES, Prepared, SimError};
use crate::host::Host;
use crate::member::SimMember;
use crate::queue::{Keyed, RadixQueue};
use crate::report::build_report;
use crate::sinks::{HdrSink, LAT_LOG_BUFFER_BYTES, LatSink, Logs};

const WAKE: u8 = 0;
const CMD_DONE: u8 = 1;
const VOL_TIMER: u8 = 2;
const COMPLETE: u8 = 3;
/// Every member command of one volume I/O sent by [`VolumeHost::submit_folded`], at the last
/// one's completion.
const CMD_BATCH: u8 = 4;
const KIND_BITS: u32 = 3;

/// How often (in events) the loop publishes progress and checks the stop flag.
const PROGRESS_EVERY_EVENTS: u64 = 1 << 14;

/// Progress of a running simulation, published every few thousand events, and a stop flag the
/// caller may set (Ctrl-C): the loop then stops issuing, lets what is in flight complete in
/// virtual time, and reports what was simulated. Read it from another thread.
#[derive(Debug, Default)]
pub struct SimProgress {
    /// Virtual time reached.
    pub sim_ns: AtomicU64,
    pub events: AtomicU64,
    /// Volume I/Os issued.
    pub ios: AtomicU64,
    /// Set by the caller to stop the run early.
    pub stop: AtomicBool,
    /// Set by the loop when it stopped because of `stop`.
    pub stopped: AtomicBool,
}

/// 24 bytes: the heap moves these around, so they are kept small.
#[derive(Clone, Copy, Debug)]
struct Event {
    time_ns: u64,
    /// Sequence number << KIND_BITS | kind: ties in time go in the order the events were made.
    key: u64,
    /// WAKE: stream; CMD_DONE and VOL_TIMER: volume; COMPLETE: slot.
    a: u32,
    /// CMD_DONE: command id, with [`NOT_OK`] set when its result is in the volume's table;
    /// COMPLETE: 1 when the volume I/O failed.
    b: u32,
}

impl Event {
    #[inline]
    fn kind(&self) -> u8 {
        (self.key & ((1 << KIND_BITS) - 1)) as u8
    }
}

/// CMD_DONE's flag for a result other than Ok (kept in [`Vol::results`]).
const NOT_OK: u32 = 1 << 31;

impl Keyed for Event {
    #[inline]
    fn time_ns(&self) -> u64 {
        self.time_ns
    }
    #[inline]
    fn key(&self) -> u64 {
        self.key
    }
}

/// Counters of a run (for the report and the benchmark).
#[derive(Clone, Copy, Debug, Default)]
pub struct RunStats {
    pub events: u64,
    /// Volume I/Os issued (ramp included).
    pub ios: u64,
    /// Member commands sent.
    pub chunks: u64,
    pub sim_end_ns: u64,
    /// Most volume I/Os in flight at once, over all targets.
    pub in_flight_max: u64,
    /// Volume I/Os that completed with an error.
    pub io_errors: u64,
}

struct Vol {
    host: VolumeHost,
    /// Global index of the volume's first member (its members are contiguous).
    first_member: u32,
    cpu: u32,
    /// When a VOL_TIMER event is pending (u64::MAX: none).
    timer_at_ns: u64,
    /// Results other than Ok of commands in flight, by command id (rare: errors, busy).
    results: Vec<CmdResult>,
    /// The volume says which members it keeps free of device GC (a serial array's front-end):
    /// the GC that happens on them anyway is counted.
    gc_watch: bool,
    /// Whether the volume folds completions ([`Volume::folds_completions`]).
    fold: bool,
}

struct Loop<'a, 'w> {
    lat: Option<LatSink<'w>>,
    hdr: Option<HdrSink<'w>>,
    members: &'a mut [SimMember],
    /// Each member's last send time: commands reach a device in non-decreasing time.
    member_last_ns: Vec<u64>,
    vols: Vec<Vol>,
    ctl: Controller,
    host: Host,
    heap: RadixQueue<Event>,
    seq: u64,
    /// Pending WAKE time per stream (u64::MAX: none).
    wake_at_ns: Vec<u64>,
    /// Per slot: its volume I/O when sent by [`VolumeHost::submit_folded`] (raid0).
    folds: Vec<FoldedIo>,
    in_flight: u64,
    stats: RunStats,
    progress: Option<&'a SimProgress>,
    /// Per member of a watched volume: the model's GC units moved when last looked at, whether
    /// the member was to be GC-free since, and the units moved while it was.
    gc_last: Vec<u64>,
    gc_was_free: Vec<bool>,
    gc_free_moved: Vec<u64>,
    /// GC is counted from here (the end of the ramp).
    gc_from_ns: u64,
}

impl Loop<'_, '_> {
    /// Counts the GC units member `g` (member `m` of volume `v`) moved since last looked at
    /// against the role it had; `after` a command, takes its role from the volume now.
    #[inline]
    fn gc_account(&mut self, v: usize, g: usize, m: u32, after: bool) {
        let moved = self.members[g]
            .ssd()
            .map_or(0, |s| s.ftl_stats().units_moved);
        let d = moved.saturating_sub(self.gc_last[g]);
        if self.gc_was_free[g] && self.member_last_ns[g] >= self.gc_from_ns {
            self.gc_free_moved[g] += d;
        }
        self.gc_last[g] = moved;
        if after {
            self.gc_was_free[g] = self.vols[v]
                .host
                .volume()
                .gc_free_members()
                .is_some_and(|r| r.contains(&m));
        }
    }

    #[inline]
    fn push(&mut self, time_ns: u64, kind: u8, a: u32, b: u32) {
        let key = self.seq << KIND_BITS | u64::from(kind);
        self.seq += 1;
        self.heap.push(Event { time_ns, key, a, b });
    }

    /// Issues what stream `s` may issue at `now`, and schedules its next wake.
    #[inline]
    fn pump(&mut self, s: u32, now: u64) {
        // Bounded: each Issue takes a free slot; a stream has iodepth slots.
        loop {
            match self.ctl.poll(s, now) {
                Poll::Issue(is) => {
                    let v = self.ctl.target_of(s) as usize;
                    // The stream's next request is known now (the generator draws it ahead):
                    // warm its member's mapping entry, a cache miss that would otherwise stall
                    // when it is sent a device latency from now.
                    if let Some(off) = self.ctl.peek_offset_bytes(s)
                        && let Some((m, at)) = self.vols[v].host.member_at(off)
                    {
                        self.members[(self.vols[v].first_member + m) as usize].prefetch(at);
                    }
                    let cpu = self.vols[v].cpu;
                    let at_device = self.host.submit(cpu, now);
                    self.stats.ios += 1;
                    self.in_flight += 1;
                    self.stats.in_flight_max = self.stats.in_flight_max.max(self.in_flight);
                    let io = VolIo {
                        tag: is.slot,
                        op: if is.req.flush {
                            VolOp::Flush
                        } else {
                            is.req.op.into()
                        },
                        offset_bytes: is.req.offset_bytes,
                        len_bytes: is.req.len_bytes,
                        fua: is.req.fua,
                    };
                    if self.vols[v].fold {
                        // raid0: every member command sent here, its outcome known at once.
                        let first = self.vols[v].first_member as usize;
                        let (members, last_ns, chunks) = (
                            &mut *self.members,
                            &mut self.member_last_ns,
                            &mut self.stats.chunks,
                        );
                        let folded = self.vols[v].host.submit_folded(now, io, |c| {
                            let g = first + c.member as usize;
                            let at = at_device.max(last_ns[g]);
                            last_ns[g] = at;
                            let oc = members[g].send(at, c);
                            *chunks += 1;
                            (at, oc.done_ns, oc.result)
                        });
                        if let Some(f) = folded {
                            self.folds[is.slot as usize] = f;
                            self.push(f.done_ns_max, CMD_BATCH, v as u32, is.slot);
                            self.schedule_timer(v, now);
                            self.host.hold_until(cpu, f.done_ns_max);
                            continue;
                        }
                    }
                    self.vols[v].host.submit(now, io, &mut NoData);
                    let done_max = self.drain(v, now, at_device);
                    self.host.hold_until(cpu, done_max);
                }
                Poll::WaitUntil(t) => {
                    if t < self.wake_at_ns[s as usize] {
                        self.wake_at_ns[s as usize] = t;
                        self.push(t, WAKE, s, 0);
                    }
                    return;
                }
                Poll::Busy | Poll::Done => return,
            }
        }
    }

    /// Carries out volume `v`'s outputs: member commands are sent at `send_ns` or later;
    /// completed volume I/Os go to the host. Returns the latest member completion scheduled.
    #[inline]
    fn drain(&mut self, v: usize, now: u64, send_ns: u64) -> u64 {
        let mut done_max = send_ns;
        // Read in place (copying whole outputs out of the queue stalls on store forwarding).
        let out = self.vols[v].host.take_outputs();
        for o in out.as_slice() {
            match o {
                Output::Cmd(c) => {
                    let g = (self.vols[v].first_member + c.member) as usize;
                    let at = send_ns.max(self.member_last_ns[g]);
                    self.member_last_ns[g] = at;
                    let watch = self.vols[v].gc_watch;
                    if watch {
                        self.gc_account(v, g, c.member, false);
                    }
                    let oc = self.members[g].send(at, c);
                    if watch {
                        self.gc_account(v, g, c.member, true);
                    }
                    done_max = done_max.max(oc.done_ns);
                    self.stats.chunks += 1;
                    self.vols[v].host.sent(c, at);
                    let b = if oc.result == CmdResult::Ok {
                        c.id
                    } else {
                        self.vols[v].results[c.id as usize] = oc.result;
                        c.id | NOT_OK
                    };
                    self.push(oc.done_ns, CMD_DONE, v as u32, b);
                }
                Output::Done(d) => {
                    let cpu = self.vols[v].cpu;
                    let t = self.host.complete(cpu, now);
                    let failed = u32::from(d.result != IoResult::Ok);
                    self.push(t, COMPLETE, d.tag, failed);
                }
            }
        }
        self.vols[v].host.put_outputs(out);
        self.schedule_timer(v, now);
        done_max
    }

    #[inline(always)]
    fn schedule_timer(&mut self, v: usize, now: u64) {
        if let Some(t) = self.vols[v].host.next_timer_ns() {
            let t = t.max(now);
            if t < self.vols[v].timer_at_ns {
                self.vols[v].timer_at_ns = t;
                self.push(t, VOL_TIMER, v as u32, 0);
            }
        }
    }

    fn run(&mut self) {
        for s in 0..self.ctl.streams() as u32 {
            self.pump(s, 0);
        }
        // Bounded: every event is a completion, a timer or a wake of a finite run; the run ends
        // when every stream is done (a volume's own timers do not keep it alive).
        while let Some(e) = self.heap.pop() {
            if self.ctl.finished() {
                break;
            }
            self.stats.events += 1;
            let now = e.time_ns;
            self.stats.sim_end_ns = self.stats.sim_end_ns.max(now);
            if self.stats.events.is_multiple_of(PROGRESS_EVERY_EVENTS) {
                self.publish(now);
            }
            match e.kind() {
                WAKE => {
                    let s = e.a;
                    if self.wake_at_ns[s as usize] == now {
                        self.wake_at_ns[s as usize] = u64::MAX;
                    }
                    self.pump(s, now);
                }
                CMD_DONE => {
                    let v = e.a as usize;
                    let id = e.b & !NOT_OK;
                    let result = if e.b & NOT_OK == 0 {
                        CmdResult::Ok
                    } else {
                        self.vols[v].results[id as usize]
                    };
                    let done = CmdDone { id, result };
                    self.vols[v].host.member_done(now, done, &mut NoData);
                    self.drain(v, now, now);
                }
                CMD_BATCH => {
                    let (v, tag) = (e.a as usize, e.b as usize);
                    let f = self.folds[tag];
                    let d = self.vols[v].host.complete_folded(now, tag as u32, f);
                    // As drain carries out an Output::Done.
                    let cpu = self.vols[v].cpu;
                    let t = self.host.complete(cpu, now);
                    let failed = u32::from(d.result != IoResult::Ok);
                    self.push(t, COMPLETE, d.tag, failed);
                    self.schedule_timer(v, now);
                }
                VOL_TIMER => {
                    let v = e.a as usize;
                    // A timer superseded by an earlier one stays in the queue: when it comes
                    // up, the volume's pending timer is another, so it is dropped (else every
                    // superseded timer would schedule one more, and they would pile up).
                    if self.vols[v].timer_at_ns != now {
                        continue;
                    }
                    self.vols[v].timer_at_ns = u64::MAX;
                    if self.vols[v].host.next_timer_ns().is_some_and(|t| t <= now) {
                        self.vols[v].host.on_timer(now, &mut NoData);
                    }
                    self.drain(v, now, now);
                }
                COMPLETE => {
                    let slot = e.a;
                    self.in_flight -= 1;
                    self.stats.io_errors += u64::from(e.b);
                    let c = self.ctl.complete(slot, now);
                    if c.measured {
                        let t = c.target as usize;
                        if let Some(h) = self.hdr.as_mut() {
                            h.roll(now);
                            h.recs[t].record(c.req.op, c.latency_ns, c.req.len_bytes);
                        }
                        if let Some(sink) = self.lat.as_mut() {
                            sink.push(&LatRecord {
                                completion_ns: now,
                                latency_ns: c.latency_ns,
                                offset_bytes: c.req.offset_bytes,
                                // Targets are at most DEVICES_MAX (1000): never truncates.
                                device: c.target as u16,
                                op: c.req.op,
                            });
                        }
                    }
                    self.pump(c.stream, now);
                }
                _ => unreachable!("unknown event kind"),
            }
        }
        if let Some(p) = self.progress {
            self.publish(self.stats.sim_end_ns);
            p.sim_ns
                .store(self.stats.sim_end_ns, AtomicOrdering::Relaxed);
        }
    }

    #[cold]
    fn publish(&mut self, now: u64) {
        let Some(p) = self.progress else {
            return;
        };
        p.sim_ns.store(now, AtomicOrdering::Relaxed);
        p.events.store(self.stats.events, AtomicOrdering::Relaxed);
        p.ios.store(self.stats.ios, AtomicOrdering::Relaxed);
        if p.stop.load(AtomicOrdering::Relaxed) && !p.stopped.load(AtomicOrdering::Relaxed) {
            p.stopped.store(true, AtomicOrdering::Relaxed);
            self.ctl.stop(now);
            for s in 0..self.ctl.streams() as u32 {
                self.pump(s, now);
            }
        }
    }
}

/// What a run produced.
pub struct SimOutput {
    pub report: nines_core::report::Report,
    pub stats: RunStats,
    /// Each target's recorder (a device, or a volume), merged over jobs, in report order.
    pub recorders: Vec<DeviceRecorder>,
}

/// Run the workload (or replay `trace`, already fitted to [`Prepared::targets`] targets of
/// [`Prepared::target_size_bytes`]) and build the report.
pub fn run(prep: &mut Prepared, trace: Option<&Trace>) -> Result<SimOutput, SimError> {
    run_logged(prep, trace, Logs::default(), None)
}

/// The name of each target as the report and the per-I/O log call it.
pub fn target_names(cfg: &crate::SimConfig) -> Vec<String> {
    let name = cfg.device_name();
    match cfg.layout.base() {
        crate::Layout::Independent => (0..cfg.devices).map(|i| format!("{name}#{i}")).collect(),
        l => vec![format!("{}({}x{name})", l.name(), cfg.devices)],
    }
}

/// [`run`], also writing every measured I/O to `logs.lat` in the `nines_core::latlog` format:
/// a header with the target names and start time 0, then one record per measured I/O with its
/// virtual completion time (ns since the simulation started), latency, offset in its target,
/// target index and direction, in completion order. With `logs.hdr`, every interval of virtual
/// time from the end of the ramp gets one HdrHistogram per target and direction, tagged
/// `<target>.<read|write>`, in the HdrHistogram interval log format (V2 deflate), timestamps in
/// seconds since the simulation started. Same inputs give the same bytes. `progress`, when
/// given, is updated as the run goes and its stop flag honoured.
pub fn run_logged(
    prep: &mut Prepared,
    trace: Option<&Trace>,
    logs: Logs<'_>,
    progress: Option<&SimProgress>,
) -> Result<SimOutput, SimError> {
    let cfg = prep.cfg.clone();
    let jobs = cfg.effective_jobs();
    if trace.is_none() {
        nines_core::job::validate_jobs(&jobs)?;
    }
    let base = &jobs[0].workload;
    let groups = cfg.layout.group(cfg.members());
    let n_targets = groups.len() as u32;
    let target_size = prep.target_size_bytes();
    let timing = RunTiming {
        start_ns: 0,
        ramp_ns: base.ramp_ns,
        runtime_ns: base.runtime_ns,
    };

    // Streams: one per job and target; a trace replaces the jobs with one stream per target.
    let specs = match trace {
        Some(t) => trace_streams(t, &cfg, n_targets, target_size)?,
        None => job_streams(&jobs, n_targets, target_size)?,
    };
    assert!(
        specs.len().is_multiple_of(n_targets as usize),
        "streams are job-major, one per target"
    );
    let len_max = specs
        .iter()
        .map(|s| s.source.len_bytes_max())
        .max()
        .unwrap_or(LOGICAL_BLOCK_BYTES);
    let n_streams = specs.len();
    let ctl = Controller::new(timing, specs).map_err(|e| SimError::Config(e.to_string()))?;
    let tags = ctl.slots() as u32;

    let host_cpus = cfg.host.cpus.unwrap_or(n_targets).max(1);
    let host = Host::new(&cfg.host, host_cpus, base.seed);
    let shape = VolShape {
        tags,
        len_max,
        ramp_end_ns: timing.ramp_end_ns(),
        host_cpus,
    };
    let (vols, cmds_total) = build_vols(prep, &cfg, &groups, shape)?;
    let lat = match logs.lat {
        Some(out) => Some(lat_sink(out, &cfg)?),
        None => None,
    };
    let hdr = match logs.hdr {
        Some((out, interval_ns)) => Some(hdr_sink(
            out,
            interval_ns,
            &cfg,
            &jobs,
            trace,
            n_targets,
            timing.ramp_end_ns(),
        )?),
        None => None,
    };
    let heap_cap = tags as usize + cmds_total + n_streams + groups.len() + 16;
    let mut lp = Loop::new(
        &mut prep.members,
        (lat, hdr),
        vols,
        ctl,
        host,
        progress,
        heap_cap,
        timing.ramp_end_ns(),
    );
    lp.run();
    lp.finish_logs()?;
    let done = lp.finish();
    Ok(sim_output(prep, &cfg, &jobs, trace, n_targets, done))
}

/// One stream per target replaying its part of `t`; an error when a record ends beyond the
/// target.
fn trace_streams(
    t: &Trace,
    cfg: &crate::SimConfig,
    n_targets: u32,
    target_size: u64,
) -> Result<Vec<StreamSpec>, SimError> {
    let replays = TraceReplay::per_target(t, n_targets, 1, 0)
        .map_err(|e| SimError::Config(format!("{e}")))?;
    if let Some((i, r)) = t
        .records
        .iter()
        .enumerate()
        .find(|(_, r)| r.end_bytes() > target_size)
    {
        return Err(SimError::Config(format!(
            "trace record {} ({}) ends at {} beyond the {target_size}-byte target; fit the trace first",
            i,
            t.location(i),
            r.end_bytes()
        )));
    }
    Ok(replays
        .into_iter()
        .enumerate()
        .map(|(i, r)| StreamSpec {
            job: 0,
            target: i as u32,
            iodepth: cfg.trace_depth.max(1),
            thinktime_ns: 0,
            thinktime_blocks: 0,
            ios_max: None,
            source: Source::other(r),
        })
        .collect())
}

/// One stream per job and target, job-major.
fn job_streams(
    jobs: &[nines_core::job::JobSpec],
    n_targets: u32,
    target_size: u64,
) -> Result<Vec<StreamSpec>, SimError> {
    let mut specs = Vec::with_capacity(jobs.len() * n_targets as usize);
    for (j, job) in jobs.iter().enumerate() {
        for t in 0..n_targets {
            let g = Generator::new(&job.workload, target_size, LOGICAL_BLOCK_BYTES, t, 0)?;
            specs.push(StreamSpec {
                job: j as u32,
                target: t,
                iodepth: job.workload.iodepth,
                thinktime_ns: job.workload.thinktime_ns,
                thinktime_blocks: job.workload.thinktime_blocks,
                ios_max: job.workload.ios_max,
                source: g.into(),
            });
        }
    }
    Ok(specs)
}

/// What every volume is built for: the controller's tags, its largest request, the end of the
/// ramp and the host's CPUs.
#[derive(Clone, Copy)]
struct VolShape {
    tags: u32,
    len_max: u32,
    ramp_end_ns: u64,
    host_cpus: u32,
}

/// One volume per group of members; returns them and the member commands they can have in
/// flight together.
fn build_vols(
    prep: &Prepared,
    cfg: &crate::SimConfig,
    groups: &[std::ops::Range<u32>],
    shape: VolShape,
) -> Result<(Vec<Vol>, usize), SimError> {
    let sizes: Vec<u64> = prep.members.iter().map(SimMember::size_bytes).collect();
    // --placement fdp tags with the handles the data members have (refused without FDP).
    let mut layout = cfg.layout.clone();
    let data_members = prep
        .members
        .len()
        .saturating_sub(layout.extra_members() as usize);
    let handles: Vec<u32> = prep.members[..data_members]
        .iter()
        .map(SimMember::fdp_handles)
        .collect();
    layout.resolve_placement(&handles)?;
    let mut vols = Vec::with_capacity(groups.len());
    let mut cmds_total = 0usize;
    for (i, g) in groups.iter().enumerate() {
        let member_sizes: Vec<u64> = g.clone().map(|m| sizes[m as usize]).collect();
        let vol = nines_array::build(
            &layout,
            &VolumeParams {
                member_sizes_bytes: &member_sizes,
                block_bytes: LOGICAL_BLOCK_BYTES,
                tags: shape.tags,
                len_bytes_max: shape.len_max,
            },
        )?;
        let cmds = vol.cmds_max() as usize;
        let vol_fold = vol.folds_completions();
        let gc_watch = vol.gc_free_members().is_some();
        if cmds >= NOT_OK as usize {
            return Err(SimError::Config(format!(
                "volume {i} needs {cmds} member commands in flight, more than the simulator tracks; lower --iodepth"
            )));
        }
        cmds_total += cmds;
        let record_members = g.len() > 1;
        vols.push(Vol {
            host: VolumeHost::new(vol, shape.ramp_end_ns, record_members),
            first_member: g.start,
            cpu: i as u32 % shape.host_cpus,
            timer_at_ns: u64::MAX,
            results: vec![CmdResult::Ok; cmds],
            gc_watch,
            fold: cfg.fold_completions && vol_fold,
        });
    }
    Ok((vols, cmds_total))
}

/// The per-I/O log's sink, its header (the target names, start time 0) written.
fn lat_sink<'w>(out: &'w mut dyn Write, cfg: &crate::SimConfig) -> Result<LatSink<'w>, SimError> {
    let header = LatLogHeader {
        devices: target_names(cfg),
        start_unix_ns: 0,
    };
    let mut out = out;
    write_header(&mut out, &header).map_err(SimError::LatLog)?;
    Ok(LatSink {
        out,
        buf: Vec::with_capacity(LAT_LOG_BUFFER_BYTES),
        records: 0,
        error: None,
    })
}

/// What a finished loop leaves for the report.
struct Finished {
    stats: RunStats,
    gc_free_moved: Vec<u64>,
    measured_ns: u64,
    /// Per stream (job-major), its recorder.
    stream_recs: Vec<DeviceRecorder>,
    vols: Vec<Vol>,
    host: Host,
}

impl<'a, 'w> Loop<'a, 'w> {
    /// A loop over `members` and `vols`, nothing in flight, its queues sized once (`heap_cap`
    /// events) so that the run allocates nothing; GC counted from `gc_from_ns`.
    #[allow(clippy::too_many_arguments)]
    fn new(
        members: &'a mut [SimMember],
        (lat, hdr): (Option<LatSink<'w>>, Option<HdrSink<'w>>),
        vols: Vec<Vol>,
        ctl: Controller,
        host: Host,
        progress: Option<&'a SimProgress>,
        heap_cap: usize,
        gc_from_ns: u64,
    ) -> Self {
        let n_members = members.len();
        let n_streams = ctl.streams();
        let tags = ctl.slots();
        let gc_last: Vec<u64> = members
            .iter()
            .map(|m| m.ssd().map_or(0, |s| s.ftl_stats().units_moved))
            .collect();
        Loop {
            lat,
            hdr,
            members,
            member_last_ns: vec![0; n_members],
            vols,
            ctl,
            host,
            heap: RadixQueue::with_capacity(heap_cap),
            seq: 0,
            wake_at_ns: vec![u64::MAX; n_streams],
            folds: vec![
                FoldedIo {
                    done_ns_max: 0,
                    first_err: None,
                };
                tags
            ],
            in_flight: 0,
            stats: RunStats::default(),
            progress,
            gc_last,
            gc_was_free: vec![false; n_members],
            gc_free_moved: vec![0; n_members],
            gc_from_ns,
        }
    }

    /// Flushes the per-I/O log and writes the HdrHistogram log's last (partial) interval.
    fn finish_logs(&mut self) -> Result<(), SimError> {
        if let Some(mut sink) = self.lat.take() {
            sink.flush();
            if let Some(e) = sink.error.take() {
                return Err(SimError::LatLog(e));
            }
            sink.out.flush().map_err(SimError::LatLog)?;
        }
        if let Some(mut h) = self.hdr.take() {
            let from = h.next_ns - h.interval_ns;
            let len = self.stats.sim_end_ns.saturating_sub(from).max(1);
            h.write_interval(from, len);
            if let Some(e) = h.error.take() {
                return Err(SimError::HdrLog(e));
            }
            h.log.finish().map_err(SimError::HdrLog)?;
        }
        Ok(())
    }

    /// What the report needs of the finished loop (releasing the members).
    fn finish(self) -> Finished {
        let measured_ns = self.ctl.measured_ns();
        let mut ctl = self.ctl;
        let stream_recs = ctl.take_recorders();
        Finished {
            stats: self.stats,
            gc_free_moved: self.gc_free_moved,
            measured_ns,
            stream_recs,
            vols: self.vols,
            host: self.host,
        }
    }
}

/// The run's output: per target its streams' recorders merged over jobs, per job its targets'
/// (in stream order, job-major), and the report.
fn sim_output(
    prep: &Prepared,
    cfg: &crate::SimConfig,
    jobs: &[nines_core::job::JobSpec],
    trace: Option<&Trace>,
    n_targets: u32,
    done: Finished,
) -> SimOutput {
    // Per job and target, in stream order (job-major), then per target merged over jobs.
    let n_jobs = if trace.is_some() { 1 } else { jobs.len() };
    assert_eq!(
        done.stream_recs.len(),
        n_jobs * n_targets as usize,
        "a recorder per job and target"
    );
    let mut per_target = vec![DeviceRecorder::new(); n_targets as usize];
    for (s, r) in done.stream_recs.iter().enumerate() {
        per_target[s % n_targets as usize].merge_from(r);
    }
    let per_job: Vec<&[DeviceRecorder]> = (0..n_jobs)
        .map(|j| &done.stream_recs[j * n_targets as usize..(j + 1) * n_targets as usize])
        .collect();
    let report = build_report(
        prep,
        cfg,
        jobs,
        &per_target,
        &per_job,
        &done.vols.iter().map(|v| &v.host).collect::<Vec<_>>(),
        &done.host,
        &done.stats,
        &done.gc_free_moved,
        done.measured_ns,
        trace,
    );
    SimOutput {
        report,
        stats: done.stats,
        recorders: per_target,
    }
}

fn hdr_sink<'w>(
    out: &'w mut dyn Write,
    interval_ns: u64,
    cfg: &crate::SimConfig,
    jobs: &[nines_core::job::JobSpec],
    trace: Option<&Trace>,
    n_targets: u32,
    origin_ns: u64,
) -> Result<HdrSink<'w>, SimError> {
    if interval_ns == 0 {
        return Err(SimError::Config(
            "--hdr-interval 0: give a positive interval, e.g. 1s".into(),
        ));
    }
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
    let ops: Vec<Op> = Op::ALL
        .into_iter()
        .filter(|op| match op {
            Op::Read => reads,
            Op::Write => writes,
        })
        .collect();
    let log = IntervalLog::start(
        out,
        "nines sim: interval latency histograms in nanoseconds of virtual time, one tag per device and direction",
        0,
        &target_names(cfg),
        &ops,
    )
    .map_err(SimError::HdrLog)?;
    Ok(HdrSink {
        log,
        interval_ns,
        origin_ns,
        next_ns: origin_ns + interval_ns,
        recs: (0..n_targets).map(|_| DeviceRecorder::new()).collect(),
        error: None,
    })
}
