//! The run controller: the one place that decides, for both drivers, when each stream issues,
//! what each I/O's latency is, whether it is measured, and when the run ends. Sans-IO, shaped like
//! quinn-proto's `Connection`: the driver passes `now`, asks what to issue ([`Controller::poll`]),
//! reports completions ([`Controller::complete`]) and is told when to come back
//! ([`Poll::WaitUntil`]). The real driver calls it from its worker threads with CLOCK_MONOTONIC
//! nanoseconds; the simulator calls it from its event loop with virtual nanoseconds.
//!
//! One meaning for every run (docs/arch-run.md):
//! - **Ramp**: an I/O is a ramp I/O iff its intended time (issue time, or due time when paced or
//!   replayed) is before `start + ramp`. Ramp I/Os are in no statistic and no log.
//! - **`--ios N`**: exactly N measured I/Os are issued per stream; the stream ends when they have
//!   completed.
//! - **`--runtime T`**: nothing is issued at or after `start + ramp + T` (the end); I/Os in flight
//!   then complete and count. A thinktime or pacing wait that would reach past the end ends the
//!   stream instead of waiting.
//! - **Measured time**: from the end of the ramp to the last measured completion, but never more
//!   than `--runtime` ([`Controller::measured_ns`]).
//! - **Latency**: completion time minus intended time (open loop: a stall counts in every I/O it
//!   delayed).
//! - **Flushes** (a replayed trace's data-less flush requests, [`Request::flush`]) take a slot
//!   and reach the device, but are never measured: no statistic, log or `--ios` count has them.
//!
//! Slots: each stream has `iodepth` slots; a slot is the unit of buffers and of thinktime (after a
//! completion the slot rests `thinktime` before it issues again). Slot numbers are global over
//! the controller, so a driver can use them directly as buffer indices and completion tags.
//! - **Bursts** (`thinktime_blocks` B > 0, fio's option): the stream issues B I/Os (as many at
//!   once as its slots allow), then waits for all of them to complete (fio's `io_u_quiesce`),
//!   rests `thinktime` from the last completion, and starts the next burst. fio checks its count
//!   of completed I/Os after each issue, so its bursts vary by up to the depth around B; here
//!   each burst is exactly B issues, the same number of rests per I/O.

use std::collections::VecDeque;

use crate::op::Op;
use crate::source::Source;
use crate::stats::DeviceRecorder;
use crate::workload::Request;

/// A stream's `rest_until_ns` while a finished burst's I/Os are in flight.
const DRAINING: u64 = u64::MAX;

/// The most slots one controller holds (over all its streams).
pub const SLOTS_MAX: usize = 1 << 24;

/// One stream: a source of requests against one target, with its own depth and thinktime.
pub struct StreamSpec {
    /// Index of the job this stream belongs to (for per-job statistics).
    pub job: u32,
    /// Index of the target (device or volume) the stream's requests go to.
    pub target: u32,
    /// Slots: most I/Os of this stream in flight at once.
    pub iodepth: u32,
    /// Rest of a slot after its I/O completes; with `thinktime_blocks`, of the stream after
    /// each burst.
    pub thinktime_ns: u64,
    /// fio's `thinktime_blocks`: the stream issues bursts of this many I/Os; after each burst it
    /// issues nothing until all of them completed and `thinktime_ns` passed since the last one
    /// did. 0: each slot rests on its own (nines' default).
    pub thinktime_blocks: u32,
    /// Measured I/Os to issue; `None`: until the end (or until the source is exhausted).
    pub ios_max: Option<u64>,
    pub source: Source,
}

/// When a run starts and ends, in the driver's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunTiming {
    /// The time origin.
    pub start_ns: u64,
    /// Time from the start excluded from the statistics.
    pub ramp_ns: u64,
    /// Measured time after the ramp; `None`: until every stream is done.
    pub runtime_ns: Option<u64>,
}

impl RunTiming {
    pub fn ramp_end_ns(&self) -> u64 {
        self.start_ns.saturating_add(self.ramp_ns)
    }

    /// The first instant at which nothing may be issued any more (`u64::MAX`: none).
    pub fn end_ns(&self) -> u64 {
        self.runtime_ns
            .map_or(u64::MAX, |r| self.ramp_end_ns().saturating_add(r))
    }
}

/// What a stream does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Poll {
    /// Issue this I/O now.
    Issue(Issue),
    /// Nothing before this time (a thinktime or a due time); poll again then.
    WaitUntil(u64),
    /// Nothing until one of the stream's I/Os completes.
    Busy,
    /// Nothing in flight and nothing more to issue.
    Done,
}

/// An I/O to issue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Issue {
    /// Global slot number: the I/O's tag until [`Controller::complete`].
    pub slot: u32,
    /// The request; `intended_ns` is never after the time it was issued.
    pub req: Request,
    /// Whether its completion will be measured (not a ramp I/O).
    pub measured: bool,
}

/// A completed I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completed {
    pub stream: u32,
    pub target: u32,
    pub req: Request,
    pub latency_ns: u64,
    pub measured: bool,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    stream: u32,
    /// Earliest time the slot may issue again.
    ready_ns: u64,
    busy: bool,
    measured: bool,
    req: Request,
}

struct Stream {
    job: u32,
    target: u32,
    thinktime_ns: u64,
    /// A slot's rest after its completion: the thinktime, or 0 with bursts.
    slot_rest_ns: u64,
    /// Burst length (0: per-slot thinktime).
    burst_ios: u32,
    /// I/Os issued in the current burst.
    burst_issued: u32,
    /// Nothing issues before then: the rest after the last burst, or [`DRAINING`] while a
    /// finished burst's I/Os are in flight (one field, so the hot path reads one word).
    rest_until_ns: u64,
    ios_max: u64,
    source: Source,
    /// Free slots in the order they became free (so their readiness is in order).
    free: VecDeque<u32>,
    inflight: u32,
    issued: u64,
    measured_issued: u64,
    /// Set once the stream will never issue again.
    closed: bool,
}

/// Errors building a controller: they come from a driver's setup, not from user input that was
/// validated, so they name the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    #[error("a stream needs an iodepth of at least 1")]
    ZeroDepth,
    #[error(
        "{0} I/O slots in one run are more than nines supports ({SLOTS_MAX}); lower --iodepth or the number of targets per worker"
    )]
    TooManySlots(usize),
}

/// The run controller of one worker (real driver) or of a whole simulation.
pub struct Controller {
    timing: RunTiming,
    ramp_end_ns: u64,
    end_ns: u64,
    streams: Vec<Stream>,
    /// Each stream's statistics (apart from the streams: the hot loop reads those often).
    recs: Vec<DeviceRecorder>,
    slots: Vec<Slot>,
    /// Streams not yet done.
    open: usize,
    last_measured_completion_ns: Option<u64>,
}

impl Controller {
    pub fn new(timing: RunTiming, specs: Vec<StreamSpec>) -> Result<Controller, RunError> {
        let total: usize = specs.iter().map(|s| s.iodepth as usize).sum();
        if total > SLOTS_MAX {
            return Err(RunError::TooManySlots(total));
        }
        let mut slots = Vec::with_capacity(total);
        let mut streams = Vec::with_capacity(specs.len());
        for (i, s) in specs.into_iter().enumerate() {
            if s.iodepth == 0 {
                return Err(RunError::ZeroDepth);
            }
            let mut free = VecDeque::with_capacity(s.iodepth as usize);
            for _ in 0..s.iodepth {
                free.push_back(slots.len() as u32);
                slots.push(Slot {
                    stream: i as u32,
                    ready_ns: 0,
                    busy: false,
                    measured: false,
                    req: Request {
                        op: Op::Read,
                        offset_bytes: 0,
                        len_bytes: 0,
                        intended_ns: 0,
                        fua: false,
                        flush: false,
                    },
                });
            }
            let burst_ios = if s.thinktime_ns > 0 {
                s.thinktime_blocks
            } else {
                0
            };
            streams.push(Stream {
                job: s.job,
                target: s.target,
                thinktime_ns: s.thinktime_ns,
                slot_rest_ns: if burst_ios > 0 { 0 } else { s.thinktime_ns },
                burst_ios,
                burst_issued: 0,
                rest_until_ns: 0,
                ios_max: s.ios_max.unwrap_or(u64::MAX),
                source: s.source,
                free,
                inflight: 0,
                issued: 0,
                measured_issued: 0,
                closed: false,
            });
        }
        let open = streams.len();
        let recs = streams.iter().map(|_| DeviceRecorder::new()).collect();
        Ok(Controller {
            recs,
            timing,
            ramp_end_ns: timing.ramp_end_ns(),
            end_ns: timing.end_ns(),
            streams,
            slots,
            open,
            last_measured_completion_ns: None,
        })
    }

    pub fn timing(&self) -> RunTiming {
        self.timing
    }

    pub fn streams(&self) -> usize {
        self.streams.len()
    }

    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The stream a slot belongs to.
    #[inline]
    pub fn stream_of(&self, slot: u32) -> u32 {
        self.slots[slot as usize].stream
    }

    /// The target a stream's requests go to.
    #[inline]
    pub fn target_of(&self, stream: u32) -> u32 {
        self.streams[stream as usize].target
    }

    /// Where stream `stream`'s next request will go, when its source can say (see
    /// [`Source::peek_offset_bytes`]): a hint for warming caches, never an issue.
    #[inline]
    pub fn peek_offset_bytes(&mut self, stream: u32) -> Option<u64> {
        self.streams[stream as usize].source.peek_offset_bytes()
    }

    pub fn job_of(&self, stream: u32) -> u32 {
        self.streams[stream as usize].job
    }

    /// The largest request of every stream, for sizing each slot's buffer.
    pub fn len_bytes_max(&self, stream: u32) -> u32 {
        self.streams[stream as usize].source.len_bytes_max()
    }

    /// The global slot numbers of a stream: they are consecutive.
    pub fn slot_range(&self, stream: u32) -> std::ops::Range<u32> {
        let first = self
            .slots
            .iter()
            .position(|s| s.stream == stream)
            .expect("every stream has a slot") as u32;
        let n = self.slots[first as usize..]
            .iter()
            .take_while(|s| s.stream == stream)
            .count() as u32;
        first..first + n
    }

    /// Whether every stream is done (nothing in flight, nothing more to issue).
    #[inline]
    pub fn finished(&self) -> bool {
        self.open == 0
    }

    /// Stops issuing from `now` on (an interrupt, or another worker's failure): in-flight I/Os
    /// still complete.
    pub fn stop(&mut self, now_ns: u64) {
        self.end_ns = self.end_ns.min(now_ns);
    }

    fn close(&mut self, i: usize) -> Poll {
        let s = &mut self.streams[i];
        s.closed = true;
        if s.inflight == 0 {
            Poll::Done
        } else {
            Poll::Busy
        }
    }

    /// What stream `stream` does at `now`. Call repeatedly while it returns [`Poll::Issue`].
    #[inline]
    pub fn poll(&mut self, stream: u32, now_ns: u64) -> Poll {
        let i = stream as usize;
        let end = self.end_ns;
        let ramp_end = self.ramp_end_ns;
        let s = &mut self.streams[i];
        if s.closed {
            return if s.inflight == 0 {
                Poll::Done
            } else {
                Poll::Busy
            };
        }
        if now_ns >= end || s.source.exhausted() {
            return self.close_once(i);
        }
        let Some(&slot) = s.free.front() else {
            return Poll::Busy;
        };
        let ready = self.slots[slot as usize].ready_ns.max(s.rest_until_ns);
        let due = s.source.next_due_ns();
        // The earliest time this I/O may go: its slot rested and the request due.
        let at = ready.max(due.unwrap_or(0));
        if at >= end {
            if s.rest_until_ns == DRAINING {
                // A burst's I/Os are in flight: its rest is not known yet.
                return Poll::Busy;
            }
            return self.close_once(i);
        }
        // Whether it would be measured: by its intended time (the due time when paced, else when
        // it can go).
        let intended = due.unwrap_or(now_ns.max(at));
        if intended >= ramp_end && s.measured_issued >= s.ios_max {
            return self.close_once(i);
        }
        if at > now_ns {
            return Poll::WaitUntil(at);
        }
        let Some(mut req) = s.source.next_request(now_ns) else {
            return self.close_once(i);
        };
        req.intended_ns = req.intended_ns.min(now_ns);
        // A flush moves no data: it is sent (the device pays for it) but is in no statistic.
        let measured = req.intended_ns >= ramp_end && !req.flush;
        s.free.pop_front();
        s.inflight += 1;
        s.issued += 1;
        if s.burst_ios > 0 {
            s.burst_issued += 1;
            if s.burst_issued == s.burst_ios {
                s.burst_issued = 0;
                s.rest_until_ns = DRAINING;
            }
        }
        if measured {
            s.measured_issued += 1;
        }
        let sl = &mut self.slots[slot as usize];
        debug_assert!(!sl.busy, "a free slot is not busy");
        sl.busy = true;
        sl.measured = measured;
        sl.req = req;
        Poll::Issue(Issue {
            slot,
            req,
            measured,
        })
    }

    fn close_once(&mut self, i: usize) -> Poll {
        let was_closed = self.streams[i].closed;
        let p = self.close(i);
        if !was_closed && p == Poll::Done {
            self.open -= 1;
        }
        p
    }

    /// Reports that the I/O in `slot` completed at `now`; records it when measured.
    #[inline]
    pub fn complete(&mut self, slot: u32, now_ns: u64) -> Completed {
        let sl = &mut self.slots[slot as usize];
        assert!(
            sl.busy,
            "completion for slot {slot}, which has no I/O in flight"
        );
        sl.busy = false;
        let stream = sl.stream;
        let s = &mut self.streams[stream as usize];
        let req = sl.req;
        let measured = sl.measured;
        let latency_ns = now_ns.saturating_sub(req.intended_ns);
        s.inflight -= 1;
        sl.ready_ns = now_ns.saturating_add(s.slot_rest_ns);
        if s.inflight == 0 && s.rest_until_ns == DRAINING {
            s.rest_until_ns = now_ns.saturating_add(s.thinktime_ns);
        }
        s.free.push_back(slot);
        if measured {
            self.recs[stream as usize].record(req.op, latency_ns, req.len_bytes);
            self.last_measured_completion_ns = Some(
                self.last_measured_completion_ns
                    .map_or(now_ns, |t| t.max(now_ns)),
            );
        }
        if s.closed && s.inflight == 0 {
            self.open -= 1;
        }
        Completed {
            stream,
            target: s.target,
            req,
            latency_ns,
            measured,
        }
    }

    /// I/Os issued by a stream, ramp included.
    pub fn issued(&self, stream: u32) -> u64 {
        self.streams[stream as usize].issued
    }

    /// I/Os of a stream in flight.
    pub fn inflight(&self, stream: u32) -> u32 {
        self.streams[stream as usize].inflight
    }

    /// The statistics of a stream (measured I/Os only).
    pub fn recorder(&self, stream: u32) -> &DeviceRecorder {
        &self.recs[stream as usize]
    }

    /// The time the statistics cover: from the end of the ramp to the last measured completion,
    /// never more than the runtime (I/Os in flight at the end complete after it), at least 1 ns.
    pub fn measured_ns(&self) -> u64 {
        let span = self
            .last_measured_completion_ns
            .map_or(0, |t| t.saturating_sub(self.ramp_end_ns));
        let span = match self.timing.runtime_ns {
            Some(r) => span.min(r),
            None => span,
        };
        span.max(1)
    }

    /// The last measured completion, if any.
    pub fn last_measured_completion_ns(&self) -> Option<u64> {
        self.last_measured_completion_ns
    }

    /// Moves every stream's recorder out (stream order).
    pub fn take_recorders(&mut self) -> Vec<DeviceRecorder> {
        std::mem::take(&mut self.recs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Generator, RwMode, WorkloadSpec};

    fn gen_stream(spec: &WorkloadSpec, target: u32, start: u64) -> StreamSpec {
        StreamSpec {
            job: 0,
            target,
            iodepth: spec.iodepth,
            thinktime_ns: spec.thinktime_ns,
            thinktime_blocks: spec.thinktime_blocks,
            ios_max: spec.ios_max,
            source: Generator::new(spec, 1 << 30, 512, target, start)
                .unwrap()
                .into(),
        }
    }

    /// A controller of one stream of `spec` on target 0, from time 0, without a ramp.
    fn one_stream(spec: &WorkloadSpec) -> Controller {
        let t = RunTiming {
            start_ns: 0,
            ramp_ns: 0,
            runtime_ns: spec.runtime_ns,
        };
        Controller::new(t, vec![gen_stream(spec, 0, 0)]).unwrap()
    }

    /// A device that takes `service` ns per I/O, one at a time, in FIFO order: drives the
    /// controller like a driver would and returns (issue, completion) times of measured I/Os.
    fn drive(c: &mut Controller, service: u64, limit: usize) -> Vec<(u64, u64)> {
        let mut now = c.timing().start_ns;
        let mut inflight: VecDeque<(u32, u64)> = VecDeque::new();
        let mut out = Vec::new();
        let mut device_free = now;
        for _ in 0..limit {
            let mut wake = u64::MAX;
            loop {
                match c.poll(0, now) {
                    Poll::Issue(is) => {
                        let done = device_free.max(now) + service;
                        device_free = done;
                        inflight.push_back((is.slot, done));
                    }
                    Poll::WaitUntil(t) => {
                        wake = t;
                        break;
                    }
                    Poll::Busy | Poll::Done => break,
                }
            }
            if c.finished() {
                break;
            }
            let next_done = inflight.front().map_or(u64::MAX, |x| x.1);
            if next_done <= wake {
                let (slot, t) = inflight.pop_front().unwrap();
                now = t;
                let d = c.complete(slot, now);
                if d.measured {
                    out.push((d.req.intended_ns, now));
                }
            } else {
                assert!(wake != u64::MAX, "stalled");
                now = wake;
            }
        }
        out
    }

    fn spec() -> WorkloadSpec {
        WorkloadSpec {
            rw: RwMode::RandRead,
            runtime_ns: None,
            ios_max: Some(100),
            ..WorkloadSpec::default()
        }
    }

    #[test]
    fn ios_is_exactly_the_measured_count_and_ramp_ios_are_not_measured() {
        let s = WorkloadSpec {
            iodepth: 4,
            ramp_ns: 1_000,
            ..spec()
        };
        let t = RunTiming {
            start_ns: 500,
            ramp_ns: s.ramp_ns,
            runtime_ns: None,
        };
        let mut c = Controller::new(t, vec![gen_stream(&s, 0, 500)]).unwrap();
        let done = drive(&mut c, 100, 10_000);
        assert!(c.finished());
        assert_eq!(done.len(), 100);
        assert_eq!(c.recorder(0).ios(), 100);
        assert!(done.iter().all(|(i, _)| *i >= 1_500));
        // Ramp I/Os were issued too (4 slots over 1000 ns at 100 ns each).
        assert!(c.issued(0) > 100);
    }

    #[test]
    fn runtime_ends_issuing_and_in_flight_ios_count() {
        let s = WorkloadSpec {
            iodepth: 2,
            runtime_ns: Some(10_000),
            ios_max: None,
            ..spec()
        };
        let mut c = one_stream(&s);
        let done = drive(&mut c, 300, 100_000);
        assert!(c.finished());
        assert!(done.iter().all(|(i, _)| *i < 10_000));
        assert!(
            done.iter().any(|(_, d)| *d > 10_000),
            "in-flight I/Os complete"
        );
        assert_eq!(c.measured_ns(), 10_000);
    }

    #[test]
    fn thinktime_never_waits_past_the_end() {
        let s = WorkloadSpec {
            thinktime_ns: 3_600_000_000_000,
            runtime_ns: Some(300_000_000),
            ios_max: None,
            ..spec()
        };
        let mut c = one_stream(&s);
        let done = drive(&mut c, 1_000, 100);
        assert_eq!(done.len(), 1);
        assert!(c.finished(), "the stream ended instead of waiting an hour");
    }

    #[test]
    fn thinktime_blocks_issues_bursts_then_rests_after_the_last_completion() {
        let s = WorkloadSpec {
            iodepth: 4,
            thinktime_ns: 10_000,
            thinktime_blocks: 6,
            ios_max: Some(12),
            ..spec()
        };
        let mut c = one_stream(&s);
        // 1000 ns per I/O, one at a time: the first burst fills the 4 slots at 0 and issues its
        // 5th and 6th as slots free (1000, 2000); its last I/O completes at 6000, so the second
        // burst starts at 16000.
        let mut issued: Vec<u64> = drive(&mut c, 1_000, 1_000).iter().map(|d| d.0).collect();
        issued.sort_unstable();
        assert_eq!(
            issued,
            [
                0, 0, 0, 0, 1_000, 2_000, 16_000, 16_000, 16_000, 16_000, 17_000, 18_000
            ]
        );
    }

    #[test]
    fn thinktime_blocks_of_one_is_queue_depth_one_with_a_rest() {
        // fio's default (thinktime_blocks=1): at any iodepth, one I/O, its completion, the rest.
        let s = WorkloadSpec {
            iodepth: 8,
            thinktime_ns: 500,
            thinktime_blocks: 1,
            ios_max: Some(5),
            ..spec()
        };
        let mut c = one_stream(&s);
        let done = drive(&mut c, 1_000, 1_000);
        assert_eq!(
            done,
            [
                (0, 1_000),
                (1_500, 2_500),
                (3_000, 4_000),
                (4_500, 5_500),
                (6_000, 7_000)
            ]
        );
    }

    #[test]
    fn paced_io_latency_counts_from_its_due_time() {
        let s = WorkloadSpec {
            rate_iops: Some(1_000_000), // every 1000 ns
            ios_max: Some(10),
            ..spec()
        };
        let mut c = one_stream(&s);
        // 2500 ns per I/O at depth 1: I/Os fall behind; each one's latency includes its wait.
        let done = drive(&mut c, 2_500, 1_000);
        assert_eq!(done.len(), 10);
        for (k, (intended, _)) in done.iter().enumerate() {
            assert_eq!(*intended, k as u64 * 1_000);
        }
        let last = done[9];
        assert_eq!(last.1 - last.0, 25_000 - 9_000);
    }

    #[test]
    fn measured_time_without_runtime_is_ramp_end_to_last_completion() {
        let s = WorkloadSpec {
            ios_max: Some(5),
            ..spec()
        };
        let t = RunTiming {
            start_ns: 1_000,
            ramp_ns: 0,
            runtime_ns: None,
        };
        let mut c = Controller::new(t, vec![gen_stream(&s, 0, 1_000)]).unwrap();
        drive(&mut c, 100, 1_000);
        assert_eq!(c.measured_ns(), 500);
        assert_eq!(c.slot_range(0), 0..1);
    }

    #[test]
    fn stop_ends_issuing() {
        let s = WorkloadSpec {
            iodepth: 3,
            ios_max: None,
            runtime_ns: Some(1_000_000),
            ..spec()
        };
        let mut c = one_stream(&s);
        let mut slots = Vec::new();
        while let Poll::Issue(i) = c.poll(0, 10) {
            slots.push(i.slot);
        }
        assert_eq!(slots.len(), 3);
        c.stop(20);
        for s in slots {
            c.complete(s, 30);
        }
        assert_eq!(c.poll(0, 30), Poll::Done);
        assert!(c.finished());
    }
}
