//! Trace replay as a request source: open loop at the recorded arrival times.
//!
//! A fitted trace ([`Trace::fit`]) is split by target; each target's requests become one
//! [`TraceReplay`] that the run controller drives like any other source. Times are replayed
//! relative to the trace's first arrival (the first request goes at the run's start, not after
//! whatever idle time preceded it in the recording), so the same trace starts at once on real
//! devices and in the simulator. Each request's latency counts from its arrival time: a request
//! that had to wait for a free slot still counts that wait.

use nines_core::op::Op;
use nines_core::source::RequestSource;
use nines_core::workload::Request;

use crate::{Trace, TraceError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rec {
    /// Arrival, relative to the trace's first arrival.
    at_ns: u64,
    offset_bytes: u64,
    len_bytes: u32,
    op: Op,
    fua: bool,
    flush: bool,
}

/// One target's share of a trace, replayed from `start_ns`.
#[derive(Clone, Debug)]
pub struct TraceReplay {
    recs: Vec<Rec>,
    next: usize,
    start_ns: u64,
    len_bytes_max: u32,
}

impl TraceReplay {
    /// Splits a fitted trace into one replay per target (`targets` of them, record `device`
    /// being the target index) starting at `start_ns`, and checks that every request suits a
    /// target whose offsets and sizes must be multiples of `logical_block_bytes` (real devices
    /// opened with O_DIRECT; the simulator passes its 512-byte sector).
    pub fn per_target(
        trace: &Trace,
        targets: u32,
        logical_block_bytes: u32,
        start_ns: u64,
    ) -> Result<Vec<TraceReplay>, TraceError> {
        let first = trace.records.first().map_or(0, |r| r.arrival_ns);
        let mut out: Vec<TraceReplay> = (0..targets)
            .map(|_| TraceReplay {
                recs: Vec::new(),
                next: 0,
                start_ns,
                len_bytes_max: 0,
            })
            .collect();
        let lbs = u64::from(logical_block_bytes.max(1));
        for (i, r) in trace.records.iter().enumerate() {
            if r.device >= targets {
                return Err(TraceError::InvalidOption(format!(
                    "trace {} goes to device {} but there are {targets} targets; fit the trace first",
                    trace.location(i),
                    r.device
                )));
            }
            let len = u32::try_from(r.len_bytes).map_err(|_| {
                TraceError::InvalidOption(format!(
                    "trace {}: a request of {} bytes is larger than nines issues (4 GiB - 1)",
                    trace.location(i),
                    r.len_bytes
                ))
            })?;
            if !r.offset_bytes.is_multiple_of(lbs) || !r.len_bytes.is_multiple_of(lbs) {
                return Err(TraceError::InvalidOption(format!(
                    "trace {}: offset {} and length {} must be multiples of the target's \
                     {logical_block_bytes}-byte logical block for direct I/O; replay it with \
                     --buffered, or on a target with smaller blocks",
                    trace.location(i),
                    r.offset_bytes,
                    r.len_bytes
                )));
            }
            let t = &mut out[r.device as usize];
            t.len_bytes_max = t.len_bytes_max.max(len);
            t.recs.push(Rec {
                at_ns: r.arrival_ns.saturating_sub(first),
                offset_bytes: r.offset_bytes,
                len_bytes: len,
                op: r.op,
                fua: r.fua,
                flush: r.flush,
            });
        }
        Ok(out)
    }

    /// The same replay starting at `start_ns` (a driver that learns its time origin late).
    pub fn starting_at(mut self, start_ns: u64) -> TraceReplay {
        self.start_ns = start_ns;
        self
    }

    /// Requests of this target.
    pub fn len(&self) -> usize {
        self.recs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.recs.is_empty()
    }
}

impl RequestSource for TraceReplay {
    #[inline]
    fn next_due_ns(&self) -> Option<u64> {
        // An exhausted replay is never due: the controller asks `exhausted` first.
        Some(
            self.recs
                .get(self.next)
                .map_or(u64::MAX, |r| self.start_ns.saturating_add(r.at_ns)),
        )
    }

    #[inline]
    fn next_request(&mut self, _now_ns: u64) -> Option<Request> {
        let r = self.recs.get(self.next)?;
        self.next += 1;
        Some(Request {
            op: r.op,
            offset_bytes: r.offset_bytes,
            len_bytes: r.len_bytes,
            intended_ns: self.start_ns.saturating_add(r.at_ns),
            fua: r.fua,
            flush: r.flush,
        })
    }

    #[inline]
    fn exhausted(&self) -> bool {
        self.next >= self.recs.len()
    }

    fn len_bytes_max(&self) -> u32 {
        self.len_bytes_max.max(512)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{TraceFormat, TraceRecord};

    fn rec(at: u64, dev: u32, off: u64, len: u64, op: Op) -> TraceRecord {
        TraceRecord::data(at, dev, off, len, op)
    }

    #[test]
    fn splits_by_target_relative_to_the_first_arrival() {
        let t = Trace::from_records(
            vec![
                rec(1_000, 0, 0, 4096, Op::Read),
                rec(1_500, 1, 8192, 4096, Op::Write),
                rec(3_000, 0, 4096, 8192, Op::Read),
            ],
            TraceFormat::Mqsim,
        );
        let mut r = TraceReplay::per_target(&t, 2, 4096, 100).unwrap();
        assert_eq!((r[0].len(), r[1].len()), (2, 1));
        assert_eq!(r[0].next_due_ns(), Some(100));
        let a = r[0].next_request(150).unwrap();
        assert_eq!((a.intended_ns, a.offset_bytes, a.op), (100, 0, Op::Read));
        assert_eq!(r[0].next_due_ns(), Some(2_100));
        assert_eq!(r[0].len_bytes_max(), 8192);
        r[0].next_request(2_100).unwrap();
        assert!(r[0].exhausted());
        assert_eq!(r[0].next_request(3_000), None);
        assert_eq!(r[1].next_due_ns(), Some(600));
    }

    #[test]
    fn refuses_unaligned_requests_and_unfitted_devices() {
        let t = Trace::from_records(vec![rec(0, 0, 512, 4096, Op::Read)], TraceFormat::Mqsim);
        let e = TraceReplay::per_target(&t, 1, 4096, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("multiples") && e.contains("--buffered"), "{e}");
        assert!(TraceReplay::per_target(&t, 1, 512, 0).is_ok());
        let t = Trace::from_records(vec![rec(0, 3, 0, 4096, Op::Read)], TraceFormat::Mqsim);
        let e = TraceReplay::per_target(&t, 2, 512, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("fit the trace"), "{e}");
    }
}
