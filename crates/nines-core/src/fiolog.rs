//! fio's text logs (`write_lat_log`, `write_bw_log`, `write_iops_log`, `write_hist_log`), in
//! fio 3.33's formats and file names, from per-I/O records the workers hand over (sans-IO: the
//! caller owns the files; see nines-io's `fiolog_sink`).
//!
//! What fio writes (iolog.c `flush_samples`, `flush_hist_samples`; stat.c `add_log_sample`,
//! `__add_samples`, `add_clat_sample`), one file per fio job and log, `PREFIX_KIND.N.log` with N
//! the fio job's number (1 for the first):
//! - `lat`, `clat`, `slat`: `msec, nsec, ddir, bs, prio` per I/O (with `log_offset`, the offset
//!   before `prio`); with `log_avg_msec` one line per direction and window, the window's mean
//!   (`log_max_value`: its maximum), `bs` and offset 0. No `slat` lines for psync, which has no
//!   submission latency of its own (fio writes its slat log empty for sync engines).
//! - `bw` (KiB/s) and `iops`: per I/O `bytes * 10^6 / clat_ns` and 1; with `log_avg_msec` the
//!   rate over each window of that length from the start, written at the window's end (fio writes
//!   it when its timer fires, a millisecond or so later), a direction without I/O in a window left
//!   out, the last partial window too (as fio, whose timer does not fire for it).
//! - `clat_hist`: every `log_hist_msec`, at the first completion after the window ended, the
//!   window's clat counts per fio bucket (`FIO_IO_U_PLAT_NR` = 1856 of them, summed in groups of
//!   2^`log_hist_coarseness`): `msec, ddir, bs, count, count, ...`; the last partial window is not
//!   written, as in fio.
//!
//! Times are milliseconds from the end of the ramp (fio resets its epoch there); `prio` is 0
//! (nines sets no I/O priority); `ddir` 0 is read, 1 write.

use std::fmt::Write as _;

use crate::op::Op;

/// fio's `FIO_IO_U_PLAT_NR`: buckets of fio's latency histogram.
pub const FIO_PLAT_NR: usize = 29 * 64;
/// Bytes of one encoded [`FioRecord`].
pub const FIO_RECORD_BYTES: usize = 48;
/// `slat_ns` of a record without a submission latency (psync).
const NO_SLAT: u64 = u64::MAX;

/// fio's `plat_val_to_idx`: the bucket of a latency in fio's histogram (64 buckets per power of
/// two, values below 128 exact).
pub fn fio_plat_idx(val: u64) -> usize {
    let msb = if val == 0 {
        0
    } else {
        63 - val.leading_zeros()
    };
    if msb <= 6 {
        return val as usize;
    }
    let error_bits = msb - 6;
    let base = u64::from(error_bits + 1) << 6;
    let offset = 63 & (val >> error_bits);
    (base + offset).min(FIO_PLAT_NR as u64 - 1) as usize
}

/// fio's `plat_idx_to_val`: the value fio writes for a bucket (the middle of its range).
pub fn fio_plat_val(idx: usize) -> u64 {
    if idx < 128 {
        return idx as u64;
    }
    let error_bits = (idx >> 6) as u32 - 1;
    let base = 1u64 << (error_bits + 6);
    let k = (idx % 64) as f64;
    base + ((k + 0.5) * f64::from(1u32 << error_bits)) as u64
}

/// One measured volume I/O as fio logs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FioRecord {
    /// Completion, nanoseconds from the end of the ramp.
    pub completion_ns: u64,
    pub lat_ns: u64,
    /// None: the engine did the I/O inside its submit call (psync).
    pub slat_ns: Option<u64>,
    pub clat_ns: u64,
    pub offset_bytes: u64,
    pub len_bytes: u32,
    /// Index of the fio job (0-based, in the order of the fio JSON export).
    pub job: u32,
    pub op: Op,
}

impl FioRecord {
    #[inline]
    pub fn encode(&self, out: &mut [u8; FIO_RECORD_BYTES]) {
        out[0..8].copy_from_slice(&self.completion_ns.to_le_bytes());
        out[8..16].copy_from_slice(&self.lat_ns.to_le_bytes());
        out[16..24].copy_from_slice(&self.slat_ns.unwrap_or(NO_SLAT).to_le_bytes());
        out[24..32].copy_from_slice(&self.clat_ns.to_le_bytes());
        out[32..40].copy_from_slice(&self.offset_bytes.to_le_bytes());
        out[40..44].copy_from_slice(&self.len_bytes.to_le_bytes());
        out[44..47].copy_from_slice(&self.job.to_le_bytes()[..3]);
        out[47] = self.op.index() as u8;
    }

    #[inline]
    pub fn decode(b: &[u8; FIO_RECORD_BYTES]) -> FioRecord {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let slat = u64_at(16);
        FioRecord {
            completion_ns: u64_at(0),
            lat_ns: u64_at(8),
            slat_ns: (slat != NO_SLAT).then_some(slat),
            clat_ns: u64_at(24),
            offset_bytes: u64_at(32),
            len_bytes: u32::from_le_bytes(b[40..44].try_into().expect("4 bytes")),
            job: u32::from_le_bytes([b[44], b[45], b[46], 0]),
            op: if b[47] & 1 == 0 { Op::Read } else { Op::Write },
        }
    }
}

/// One of fio's log files of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FioLogKind {
    Lat,
    Clat,
    Slat,
    Bw,
    Iops,
    ClatHist,
}

impl FioLogKind {
    pub const ALL: [FioLogKind; 6] = [
        FioLogKind::Lat,
        FioLogKind::Clat,
        FioLogKind::Slat,
        FioLogKind::Bw,
        FioLogKind::Iops,
        FioLogKind::ClatHist,
    ];

    /// fio's log type in the file name.
    pub fn suffix(self) -> &'static str {
        match self {
            FioLogKind::Lat => "lat",
            FioLogKind::Clat => "clat",
            FioLogKind::Slat => "slat",
            FioLogKind::Bw => "bw",
            FioLogKind::Iops => "iops",
            FioLogKind::ClatHist => "clat_hist",
        }
    }
}

/// fio's log file name (init.c `gen_log_name`, `per_job_logs=1`): `PREFIX_KIND.N.log`.
pub fn fio_log_name(prefix: &str, kind: FioLogKind, job_number: u32) -> String {
    format!("{prefix}_{}.{job_number}.log", kind.suffix())
}

/// Which logs, with which of fio's log options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FioLogSpec {
    /// `write_lat_log`: the lat, clat and slat logs, under this prefix.
    pub lat: Option<String>,
    /// `write_bw_log`.
    pub bw: Option<String>,
    /// `write_iops_log`.
    pub iops: Option<String>,
    /// `write_hist_log`.
    pub hist: Option<String>,
    /// `log_avg_msec` (0: every I/O).
    pub avg_msec: u64,
    /// `log_hist_msec`.
    pub hist_msec: u64,
    /// `log_hist_coarseness` (0 to 6).
    pub hist_coarseness: u32,
    /// `log_max_value`: a window's maximum instead of its mean.
    pub log_max: bool,
    /// `log_offset`: each per-I/O line carries the I/O's offset.
    pub log_offset: bool,
}

impl FioLogSpec {
    /// No log asked.
    pub fn new() -> FioLogSpec {
        FioLogSpec {
            lat: None,
            bw: None,
            iops: None,
            hist: None,
            avg_msec: 0,
            hist_msec: 1000,
            hist_coarseness: 0,
            log_max: false,
            log_offset: false,
        }
    }

    pub fn any(&self) -> bool {
        self.lat.is_some() || self.bw.is_some() || self.iops.is_some() || self.hist.is_some()
    }

    /// The prefix of a kind's file, if that log is asked.
    pub fn prefix(&self, kind: FioLogKind) -> Option<&str> {
        match kind {
            FioLogKind::Lat | FioLogKind::Clat | FioLogKind::Slat => self.lat.as_deref(),
            FioLogKind::Bw => self.bw.as_deref(),
            FioLogKind::Iops => self.iops.as_deref(),
            FioLogKind::ClatHist => self.hist.as_deref(),
        }
    }

    /// Every file of `jobs` fio jobs: (job index, kind, file name).
    pub fn files(&self, jobs: u32) -> Vec<(u32, FioLogKind, String)> {
        let mut out = Vec::new();
        for j in 0..jobs {
            for kind in FioLogKind::ALL {
                if let Some(p) = self.prefix(kind) {
                    out.push((j, kind, fio_log_name(p, kind, j + 1)));
                }
            }
        }
        out
    }
}

impl Default for FioLogSpec {
    fn default() -> Self {
        FioLogSpec::new()
    }
}

/// fio's `avg_window` of one direction: samples, their sum and maximum.
#[derive(Clone, Copy, Default)]
struct Window {
    samples: u64,
    sum: u128,
    max: u64,
}

impl Window {
    fn add(&mut self, v: u64) {
        self.samples += 1;
        self.sum += u128::from(v);
        self.max = self.max.max(v);
    }

    /// fio's logged value: the maximum, or the mean rounded half up.
    fn value(&self, log_max: bool) -> u64 {
        if log_max {
            self.max
        } else {
            (self.sum as f64 / self.samples as f64 + 0.5) as u64
        }
    }
}

/// An averaged per-I/O log (lat, clat, slat: fio's inline logs): per direction a window and the
/// time it started (`avg_last`).
#[derive(Clone, Copy, Default)]
struct AvgLog {
    win: [Window; 2],
    last_ms: [u64; 2],
}

/// bw and iops over `log_avg_msec` windows (fio's `__add_samples`).
#[derive(Clone, Copy, Default)]
struct RateLog {
    bytes: [u64; 2],
    ios: [u64; 2],
    /// Start of the current window.
    from_ms: u64,
}

/// fio's clat histogram log of one direction: this window's counts, and when it started.
struct HistLog {
    counts: Vec<u64>,
    last_ms: u64,
}

/// The lines of one fio job's logs, from its I/Os in completion order.
pub struct FioJobLog {
    spec: FioLogSpec,
    avg: [AvgLog; 3],
    rate: RateLog,
    hist: [HistLog; 2],
    line: String,
}

impl FioJobLog {
    pub fn new(spec: &FioLogSpec) -> FioJobLog {
        let hist = || HistLog {
            counts: vec![0; FIO_PLAT_NR],
            last_ms: 0,
        };
        FioJobLog {
            spec: spec.clone(),
            avg: [AvgLog::default(); 3],
            rate: RateLog::default(),
            hist: [hist(), hist()],
            line: String::with_capacity(16 * 1024),
        }
    }

    /// A per-I/O line: `msec, value, ddir, bs[, offset], prio`.
    fn unit_line(&mut self, t_ms: u64, v: u64, r: &FioRecord) -> &str {
        self.line.clear();
        let d = r.op.index();
        let _ = if self.spec.log_offset {
            writeln!(
                self.line,
                "{t_ms}, {v}, {d}, {}, {}, 0",
                r.len_bytes, r.offset_bytes
            )
        } else {
            writeln!(self.line, "{t_ms}, {v}, {d}, {}, 0", r.len_bytes)
        };
        &self.line
    }

    /// An averaged line: `msec, value, ddir, 0[, 0], 0` (fio's `__add_stat_to_log`).
    fn avg_line(line: &mut String, offset: bool, t_ms: u64, v: u64, d: usize) {
        line.clear();
        let _ = if offset {
            writeln!(line, "{t_ms}, {v}, {d}, 0, 0, 0")
        } else {
            writeln!(line, "{t_ms}, {v}, {d}, 0, 0")
        };
    }

    /// Logs one I/O; `out` takes each line with the log it belongs to.
    pub fn record(&mut self, r: &FioRecord, out: &mut dyn FnMut(FioLogKind, &str)) {
        let t_ms = r.completion_ns / 1_000_000;
        let d = r.op.index();
        if self.spec.lat.is_some() {
            let parts = [
                (FioLogKind::Lat, Some(r.lat_ns)),
                (FioLogKind::Clat, Some(r.clat_ns)),
                (FioLogKind::Slat, r.slat_ns),
            ];
            for (k, (kind, v)) in parts.into_iter().enumerate() {
                let Some(v) = v else { continue };
                if self.spec.avg_msec == 0 {
                    out(kind, self.unit_line(t_ms, v, r));
                    continue;
                }
                let a = &mut self.avg[k];
                a.win[d].add(v);
                if t_ms >= a.last_ms[d] && t_ms - a.last_ms[d] >= self.spec.avg_msec {
                    let value = a.win[d].value(self.spec.log_max);
                    a.win[d] = Window::default();
                    a.last_ms[d] = t_ms - t_ms % self.spec.avg_msec;
                    Self::avg_line(&mut self.line, self.spec.log_offset, t_ms, value, d);
                    out(kind, &self.line);
                }
            }
        }
        if self.spec.bw.is_some() || self.spec.iops.is_some() {
            if self.spec.avg_msec == 0 {
                if self.spec.bw.is_some() {
                    // fio: 0 for a clat of 0.
                    let bw = (u64::from(r.len_bytes) * 1_000_000)
                        .checked_div(r.clat_ns)
                        .unwrap_or(0);
                    out(FioLogKind::Bw, self.unit_line(t_ms, bw, r));
                }
                if self.spec.iops.is_some() {
                    out(FioLogKind::Iops, self.unit_line(t_ms, 1, r));
                }
            } else {
                self.rate_windows_until(t_ms, out);
                self.rate.bytes[d] += u64::from(r.len_bytes);
                self.rate.ios[d] += 1;
            }
        }
        if self.spec.hist.is_some() && self.spec.hist_msec > 0 {
            let h = &mut self.hist[d];
            h.counts[fio_plat_idx(r.clat_ns)] += 1;
            if h.last_ms == 0 {
                h.last_ms = t_ms;
            }
            let window = t_ms.saturating_sub(h.last_ms);
            if window >= self.spec.hist_msec {
                let stride = 1usize << self.spec.hist_coarseness.min(6);
                self.line.clear();
                let _ = write!(self.line, "{t_ms}, {d}, {}", r.len_bytes);
                for chunk in h.counts.chunks(stride) {
                    let _ = write!(self.line, ", {}", chunk.iter().sum::<u64>());
                }
                self.line.push('\n');
                h.counts.iter_mut().for_each(|c| *c = 0);
                h.last_ms = t_ms - (window - self.spec.hist_msec);
                out(FioLogKind::ClatHist, &self.line);
            }
        }
    }

    /// Writes the bw/iops lines of every `log_avg_msec` window that ended by `t_ms`.
    fn rate_windows_until(&mut self, t_ms: u64, out: &mut dyn FnMut(FioLogKind, &str)) {
        let avg = self.spec.avg_msec;
        while t_ms >= self.rate.from_ms + avg {
            let end = self.rate.from_ms + avg;
            for d in 0..2 {
                let (bytes, ios) = (self.rate.bytes[d], self.rate.ios[d]);
                if bytes == 0 {
                    continue;
                }
                if self.spec.bw.is_some() {
                    Self::avg_line(
                        &mut self.line,
                        self.spec.log_offset,
                        end,
                        bytes * 1000 / avg / 1024,
                        d,
                    );
                    out(FioLogKind::Bw, &self.line);
                }
                if self.spec.iops.is_some() {
                    Self::avg_line(
                        &mut self.line,
                        self.spec.log_offset,
                        end,
                        ios * 1000 / avg,
                        d,
                    );
                    out(FioLogKind::Iops, &self.line);
                }
            }
            self.rate = RateLog {
                from_ms: end,
                ..RateLog::default()
            };
        }
    }

    /// The end of the run at `end_ns` (from the end of the ramp): the averaged lat logs' open
    /// windows are written (fio's `finalize_logs`), and the rate windows that ended by then.
    pub fn finish(&mut self, end_ns: u64, out: &mut dyn FnMut(FioLogKind, &str)) {
        let t_ms = end_ns / 1_000_000;
        if self.spec.avg_msec == 0 {
            return;
        }
        if self.spec.lat.is_some() {
            let kinds = [FioLogKind::Lat, FioLogKind::Clat, FioLogKind::Slat];
            for (k, kind) in kinds.into_iter().enumerate() {
                for d in 0..2 {
                    let w = self.avg[k].win[d];
                    if w.samples > 0 {
                        Self::avg_line(
                            &mut self.line,
                            self.spec.log_offset,
                            t_ms,
                            w.value(self.spec.log_max),
                            d,
                        );
                        out(kind, &self.line);
                    }
                    self.avg[k].win[d] = Window::default();
                }
            }
        }
        if self.spec.bw.is_some() || self.spec.iops.is_some() {
            self.rate_windows_until(t_ms, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rec(t_ms: u64, op: Op, lat: u64, slat: Option<u64>) -> FioRecord {
        FioRecord {
            completion_ns: t_ms * 1_000_000 + 17,
            lat_ns: lat,
            slat_ns: slat,
            clat_ns: lat - slat.unwrap_or(0),
            offset_bytes: 8192,
            len_bytes: 4096,
            job: 3,
            op,
        }
    }

    fn lines(spec: &FioLogSpec, recs: &[FioRecord], end_ms: u64) -> Vec<(FioLogKind, String)> {
        let mut log = FioJobLog::new(spec);
        let mut out = Vec::new();
        let mut take = |k: FioLogKind, l: &str| out.push((k, l.to_string()));
        for r in recs {
            log.record(r, &mut take);
        }
        log.finish(end_ms * 1_000_000, &mut take);
        out
    }

    fn of(all: &[(FioLogKind, String)], kind: FioLogKind) -> Vec<&str> {
        all.iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, l)| l.trim_end())
            .collect()
    }

    /// fio's buckets: the C code's results for values at and around its group edges.
    #[test]
    fn fio_buckets_match_fios_functions() {
        assert_eq!(fio_plat_idx(0), 0);
        assert_eq!(fio_plat_idx(127), 127);
        assert_eq!(fio_plat_idx(128), 128);
        assert_eq!(fio_plat_idx(129), 128);
        assert_eq!(fio_plat_idx(130), 129);
        assert_eq!(fio_plat_idx(256), 192);
        assert_eq!(fio_plat_idx(u64::MAX), FIO_PLAT_NR - 1);
        assert_eq!(fio_plat_val(128), 129);
        assert_eq!(fio_plat_val(192), 258);
        assert_eq!(fio_plat_val(100), 100);
        // Every bucket's value falls in that bucket.
        for idx in 0..FIO_PLAT_NR - 1 {
            assert_eq!(fio_plat_idx(fio_plat_val(idx)), idx, "{idx}");
        }
    }

    #[test]
    fn per_io_lines_are_fios() {
        let mut spec = FioLogSpec::new();
        spec.lat = Some("run".into());
        spec.bw = Some("run".into());
        spec.iops = Some("run".into());
        let recs = [
            rec(1, Op::Read, 263_945, Some(521)),
            rec(2, Op::Write, 10_000, None),
        ];
        let all = lines(&spec, &recs, 3);
        assert_eq!(
            of(&all, FioLogKind::Lat),
            ["1, 263945, 0, 4096, 0", "2, 10000, 1, 4096, 0"]
        );
        assert_eq!(
            of(&all, FioLogKind::Clat),
            ["1, 263424, 0, 4096, 0", "2, 10000, 1, 4096, 0"]
        );
        assert_eq!(of(&all, FioLogKind::Slat), ["1, 521, 0, 4096, 0"]);
        // fio's per-I/O bandwidth: bytes * 10^6 / clat ns (its own log: 15549 for 263424 ns).
        assert_eq!(
            of(&all, FioLogKind::Bw),
            ["1, 15549, 0, 4096, 0", "2, 409600, 1, 4096, 0"]
        );
        assert_eq!(
            of(&all, FioLogKind::Iops),
            ["1, 1, 0, 4096, 0", "2, 1, 1, 4096, 0"]
        );
        spec.log_offset = true;
        let all = lines(&spec, &recs[..1], 3);
        assert_eq!(of(&all, FioLogKind::Lat), ["1, 263945, 0, 4096, 8192, 0"]);
    }

    #[test]
    fn averaged_windows_are_fios() {
        let mut spec = FioLogSpec::new();
        spec.lat = Some("run".into());
        spec.bw = Some("run".into());
        spec.iops = Some("run".into());
        spec.avg_msec = 100;
        // Reads at 10, 50 and 120 ms; a write at 130 ms; the run ends at 250 ms.
        let recs = [
            rec(10, Op::Read, 100, Some(10)),
            rec(50, Op::Read, 201, Some(20)),
            rec(120, Op::Read, 400, Some(40)),
            rec(130, Op::Write, 1000, Some(1)),
        ];
        let all = lines(&spec, &recs, 250);
        // The window's mean, rounded half up, at the first read at or past 100 ms since the window
        // began (it includes that read: fio adds the sample first). The writes' window began at 0
        // too (fio's avg_last starts at 0 for a direction), so the write at 130 ms closes it.
        assert_eq!(
            of(&all, FioLogKind::Lat),
            ["120, 234, 0, 0, 0", "130, 1000, 1, 0, 0"]
        );
        // A window still open at the end is written then (fio's finalize_logs).
        let all = lines(&spec, &recs[..2], 250);
        assert_eq!(of(&all, FioLogKind::Slat), ["250, 15, 0, 0, 0"]);
        spec.log_max = true;
        let all = lines(&spec, &recs, 250);
        assert_eq!(
            of(&all, FioLogKind::Lat),
            ["120, 400, 0, 0, 0", "130, 1000, 1, 0, 0"]
        );
        // Rates over [0, 100) and [100, 200): KiB/s and I/Os per second; [200, 250) left out.
        assert_eq!(
            of(&all, FioLogKind::Bw),
            ["100, 80, 0, 0, 0", "200, 40, 0, 0, 0", "200, 40, 1, 0, 0"]
        );
        assert_eq!(
            of(&all, FioLogKind::Iops),
            ["100, 20, 0, 0, 0", "200, 10, 0, 0, 0", "200, 10, 1, 0, 0"]
        );
    }

    #[test]
    fn histogram_lines_are_fios() {
        let mut spec = FioLogSpec::new();
        spec.hist = Some("run".into());
        spec.hist_msec = 100;
        spec.hist_coarseness = 2;
        let recs = [
            rec(5, Op::Read, 100, Some(0)),
            rec(50, Op::Read, 1000, Some(0)),
            rec(105, Op::Read, 1000, Some(0)),
            rec(150, Op::Read, 100, Some(0)),
        ];
        let all = lines(&spec, &recs, 400);
        let h = of(&all, FioLogKind::ClatHist);
        // One window: first completion at 5 ms, written at 105 ms with its three I/Os; the last
        // window is partial and not written.
        assert_eq!(h.len(), 1);
        let cols: Vec<u64> = h[0].split(", ").map(|c| c.parse().unwrap()).collect();
        assert_eq!(&cols[..3], &[105, 0, 4096]);
        let bins = &cols[3..];
        assert_eq!(bins.len(), FIO_PLAT_NR / 4);
        assert_eq!(bins.iter().sum::<u64>(), 3);
        assert_eq!(bins[100 / 4], 1);
        assert_eq!(bins[fio_plat_idx(1000) / 4], 2);
    }

    proptest! {
        #[test]
        fn records_round_trip(
            completion_ns: u64, lat_ns: u64, slat in proptest::option::of(0u64..u64::MAX),
            clat_ns: u64, offset_bytes: u64, len_bytes: u32, job in 0u32..1 << 24, write: bool,
        ) {
            let r = FioRecord {
                completion_ns, lat_ns, slat_ns: slat, clat_ns, offset_bytes, len_bytes, job,
                op: if write { Op::Write } else { Op::Read },
            };
            let mut b = [0u8; FIO_RECORD_BYTES];
            r.encode(&mut b);
            prop_assert_eq!(FioRecord::decode(&b), r);
        }

        /// Any I/O sequence: the per-I/O logs have a line per I/O, and the histogram log's
        /// counts never exceed the I/Os.
        #[test]
        fn every_io_is_logged_once(ts in proptest::collection::vec((0u64..5_000, 1u64..10_000_000, any::<bool>()), 0..200)) {
            let mut ts = ts;
            ts.sort();
            let recs: Vec<FioRecord> = ts.iter().map(|&(t, lat, w)| rec(t, if w { Op::Write } else { Op::Read }, lat, None)).collect();
            let mut spec = FioLogSpec::new();
            spec.lat = Some("r".into());
            spec.hist = Some("r".into());
            spec.hist_msec = 250;
            let all = lines(&spec, &recs, 5_000);
            prop_assert_eq!(of(&all, FioLogKind::Lat).len(), recs.len());
            prop_assert_eq!(of(&all, FioLogKind::Slat).len(), 0);
            let hist: u64 = of(&all, FioLogKind::ClatHist).iter().map(|l| l.split(", ").skip(3).map(|c| c.parse::<u64>().unwrap()).sum::<u64>()).sum();
            prop_assert!(hist <= recs.len() as u64);
        }
    }
}
