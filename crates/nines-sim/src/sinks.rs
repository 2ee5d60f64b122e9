//! The logs a simulation writes: every measured I/O (`--lat-log`, the `nines_core::latlog`
//! format) and interval histograms (`--hdr-log`, HdrHistogram interval log). Both are written
//! from preallocated buffers and recorders, so the event loop allocates and formats nothing per
//! I/O; same inputs give the same bytes.

use std::io::{self, Write};

use nines_core::hdrlog::IntervalLog;
use nines_core::latlog::{LatRecord, RECORD_BYTES};
use nines_core::stats::DeviceRecorder;

/// Bytes of per-I/O log records buffered before one write (43,690 records).
pub const LAT_LOG_BUFFER_BYTES: usize = (1 << 20) / RECORD_BYTES * RECORD_BYTES;

/// The per-I/O log of a run: records are encoded into a buffer allocated once and written in
/// blocks of [`LAT_LOG_BUFFER_BYTES`], so the event loop allocates and formats nothing per I/O.
/// The first write error stops logging and is returned when the run ends.
pub(crate) struct LatSink<'w> {
    pub(crate) out: &'w mut dyn Write,
    pub(crate) buf: Vec<u8>,
    pub(crate) records: u64,
    pub(crate) error: Option<io::Error>,
}

impl LatSink<'_> {
    #[inline]
    pub(crate) fn push(&mut self, r: &LatRecord) {
        if self.buf.len() + RECORD_BYTES > self.buf.capacity() {
            self.flush();
        }
        let mut b = [0u8; RECORD_BYTES];
        r.encode(&mut b);
        self.buf.extend_from_slice(&b);
        self.records += 1;
    }

    pub(crate) fn flush(&mut self) {
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

/// The interval log of a run: each target's latencies go into a second recorder that is
/// written (one histogram per target and direction) and reset at every interval boundary of
/// virtual time. Serialising happens once per interval, not per I/O; intervals in which no
/// target completed anything are skipped.
pub(crate) struct HdrSink<'w> {
    pub(crate) log: IntervalLog<&'w mut dyn Write>,
    pub(crate) interval_ns: u64,
    /// Where intervals start: the end of the ramp.
    pub(crate) origin_ns: u64,
    /// End of the current interval.
    pub(crate) next_ns: u64,
    pub(crate) recs: Vec<DeviceRecorder>,
    pub(crate) error: Option<io::Error>,
}

impl HdrSink<'_> {
    /// Close the intervals that end at or before `now`.
    #[inline]
    pub(crate) fn roll(&mut self, now: u64) {
        if now < self.next_ns {
            return;
        }
        let from = self.next_ns - self.interval_ns;
        self.write_interval(from, self.interval_ns);
        // Skip empty intervals in one step.
        self.next_ns = self.origin_ns
            + ((now - self.origin_ns) / self.interval_ns + 1).saturating_mul(self.interval_ns);
    }

    pub(crate) fn write_interval(&mut self, from_ns: u64, len_ns: u64) {
        let empty = self
            .recs
            .iter()
            .all(|r| r.dirs.iter().all(|d| d.hist.is_empty()));
        if empty || self.error.is_some() {
            return;
        }
        let result = (0..self.recs.len())
            .try_for_each(|t| self.log.write(t, &self.recs[t], from_ns, len_ns));
        if let Err(e) = result {
            self.error = Some(e);
        }
        for r in &mut self.recs {
            r.reset();
        }
    }
}
