//! Latency recording and statistics.
//!
//! Each device keeps one HDR histogram per direction (3 significant digits, 1 ns to one hour),
//! plus exact min, max, sum and sum of squares, so that min, max, mean and standard deviation are
//! exact and percentiles are within 0.1% and never above the true max (fio's midpoint buckets can
//! report a percentile above the max). Recording is a histogram increment and four integer
//! updates: no allocation, no formatting, no locks.

use std::fmt;

use hdrhistogram::Histogram;
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::op::Op;
use crate::units::percentile_key;

/// The longest latency tracked exactly: one hour. Longer ones are recorded as one hour and
/// counted in [`DirRecorder::saturated`].
pub const LATENCY_NS_MAX_TRACKABLE: u64 = 3_600_000_000_000;

/// Significant decimal digits kept by every latency histogram (0.1% resolution).
pub const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 3;

/// A latency histogram covering 1 ns to one hour with 3 significant digits.
pub fn new_latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_NS_MAX_TRACKABLE, HISTOGRAM_SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid")
}

/// One direction's recorder.
#[derive(Clone, Debug)]
pub struct DirRecorder {
    pub hist: Histogram<u64>,
    pub ios: u64,
    pub bytes: u64,
    /// Latencies above [`LATENCY_NS_MAX_TRACKABLE`], recorded as that value.
    pub saturated: u64,
    /// Exact smallest latency (u64::MAX when empty).
    pub latency_ns_min: u64,
    /// Exact largest latency (0 when empty).
    pub latency_ns_max: u64,
    pub latency_ns_sum: u128,
    pub latency_ns_sum_squares: u128,
}

impl Default for DirRecorder {
    fn default() -> Self {
        Self::new()
    }
}

impl DirRecorder {
    pub fn new() -> Self {
        DirRecorder {
            hist: new_latency_histogram(),
            ios: 0,
            bytes: 0,
            saturated: 0,
            latency_ns_min: u64::MAX,
            latency_ns_max: 0,
            latency_ns_sum: 0,
            latency_ns_sum_squares: 0,
        }
    }

    #[inline]
    pub fn record(&mut self, latency_ns: u64, len_bytes: u32) {
        // Zero cannot be recorded in a histogram whose lowest value is 1 ns; a clock this coarse
        // would be a bug elsewhere, but it must not lose the sample.
        let v = latency_ns.max(1);
        if v > LATENCY_NS_MAX_TRACKABLE {
            self.saturated += 1;
        }
        self.hist.saturating_record(v);
        self.ios += 1;
        self.bytes += u64::from(len_bytes);
        self.latency_ns_min = self.latency_ns_min.min(v);
        self.latency_ns_max = self.latency_ns_max.max(v);
        self.latency_ns_sum += u128::from(v);
        self.latency_ns_sum_squares += u128::from(v) * u128::from(v);
    }

    pub fn merge_from(&mut self, other: &DirRecorder) {
        self.hist.add(&other.hist).expect("histograms share bounds");
        self.ios += other.ios;
        self.bytes += other.bytes;
        self.saturated += other.saturated;
        self.latency_ns_min = self.latency_ns_min.min(other.latency_ns_min);
        self.latency_ns_max = self.latency_ns_max.max(other.latency_ns_max);
        self.latency_ns_sum += other.latency_ns_sum;
        self.latency_ns_sum_squares += other.latency_ns_sum_squares;
    }

    pub fn reset(&mut self) {
        self.hist.reset();
        self.ios = 0;
        self.bytes = 0;
        self.saturated = 0;
        self.latency_ns_min = u64::MAX;
        self.latency_ns_max = 0;
        self.latency_ns_sum = 0;
        self.latency_ns_sum_squares = 0;
    }

    /// The summary with exact min, max, mean and standard deviation (population), and
    /// percentiles from the histogram clamped to the exact [min, max].
    pub fn summary(&self, percentiles: &[f64]) -> LatencySummary {
        if self.ios == 0 {
            return LatencySummary::empty(percentiles);
        }
        let n = self.ios as f64;
        let mean = self.latency_ns_sum as f64 / n;
        // Var = E[x^2] - E[x]^2, computed in integers first to avoid cancellation.
        // Beyond 128 bits (huge merged counts), in floating point instead of wrapping.
        let n128 = u128::from(self.ios);
        let variance = match (
            self.latency_ns_sum_squares.checked_mul(n128),
            self.latency_ns_sum.checked_mul(self.latency_ns_sum),
        ) {
            (Some(a), Some(b)) => a.saturating_sub(b) as f64 / (n * n),
            _ => (self.latency_ns_sum_squares as f64 / n - mean * mean).max(0.0),
        };
        let mut s = summarize_hist(
            &self.hist,
            percentiles,
            self.latency_ns_min,
            self.latency_ns_max,
        );
        s.mean_ns = mean;
        s.stddev_ns = variance.sqrt();
        s
    }
}

/// A [`DirRecorder`] as a report carries it, so runs from many hosts merge exactly
/// (`nines merge`): the HDR histogram in the HdrHistogram V2 deflate encoding, base64 (as in
/// HDR interval logs), and the exact counters. Sums are decimal strings: they are 128-bit and
/// JSON readers lose precision above 2^53.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedRecorder {
    /// HdrHistogram V2 deflate, base64; bounds 1 ns .. 1 h, 3 significant digits.
    pub hist: String,
    pub ios: u64,
    pub bytes: u64,
    #[serde(default)]
    pub saturated: u64,
    pub latency_ns_min: u64,
    pub latency_ns_max: u64,
    pub latency_ns_sum: String,
    pub latency_ns_sum_squares: String,
}

impl DirRecorder {
    /// The form a report carries (see [`SavedRecorder`]).
    pub fn save(&self) -> SavedRecorder {
        use base64::Engine as _;
        use hdrhistogram::serialization::{Serializer as _, V2DeflateSerializer};
        let mut bytes = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&self.hist, &mut bytes)
            .expect("serializing a histogram into memory cannot fail");
        SavedRecorder {
            hist: base64::engine::general_purpose::STANDARD.encode(bytes),
            ios: self.ios,
            bytes: self.bytes,
            saturated: self.saturated,
            latency_ns_min: self.latency_ns_min,
            latency_ns_max: self.latency_ns_max,
            latency_ns_sum: self.latency_ns_sum.to_string(),
            latency_ns_sum_squares: self.latency_ns_sum_squares.to_string(),
        }
    }
}

/// Why a saved recorder cannot be restored.
#[derive(Debug, thiserror::Error)]
pub enum SavedRecorderError {
    #[error("histogram: {0}")]
    Histogram(String),
    #[error(
        "histogram bounds {low}..{high} ns with {digits} significant digits differ from nines' \
         1..{LATENCY_NS_MAX_TRACKABLE} ns with {HISTOGRAM_SIGNIFICANT_DIGITS}: it cannot be merged exactly"
    )]
    Bounds { low: u64, high: u64, digits: u8 },
    #[error("{field} is not a decimal integer: {value:?}")]
    Number { field: &'static str, value: String },
    #[error("the histogram holds {hist} samples but the counters say {ios} I/Os")]
    Count { hist: u64, ios: u64 },
}

impl SavedRecorder {
    /// The recorder back, checked: nines' histogram configuration, sums that parse, and a
    /// histogram whose count matches the I/O count.
    pub fn restore(&self) -> Result<DirRecorder, SavedRecorderError> {
        let decoded =
            crate::hdrlog::decode_histogram(&self.hist).map_err(SavedRecorderError::Histogram)?;
        let mut hist = new_latency_histogram();
        if decoded.low() != hist.low()
            || decoded.high() < LATENCY_NS_MAX_TRACKABLE
            || decoded.sigfig() != hist.sigfig()
        {
            return Err(SavedRecorderError::Bounds {
                low: decoded.low(),
                high: decoded.high(),
                digits: decoded.sigfig(),
            });
        }
        hist.add(&decoded)
            .map_err(|e| SavedRecorderError::Histogram(e.to_string()))?;
        if hist.len() != self.ios {
            return Err(SavedRecorderError::Count {
                hist: hist.len(),
                ios: self.ios,
            });
        }
        let num = |field: &'static str, value: &str| {
            value
                .parse::<u128>()
                .map_err(|_| SavedRecorderError::Number {
                    field,
                    value: value.to_string(),
                })
        };
        Ok(DirRecorder {
            hist,
            ios: self.ios,
            bytes: self.bytes,
            saturated: self.saturated,
            latency_ns_min: self.latency_ns_min,
            latency_ns_max: self.latency_ns_max,
            latency_ns_sum: num("latency_ns_sum", &self.latency_ns_sum)?,
            latency_ns_sum_squares: num("latency_ns_sum_squares", &self.latency_ns_sum_squares)?,
        })
    }
}

/// Per-device recorder: one [`DirRecorder`] per direction, indexed by [`Op::index`].
#[derive(Clone, Debug, Default)]
pub struct DeviceRecorder {
    pub dirs: [DirRecorder; 2],
}

impl DeviceRecorder {
    pub fn new() -> Self {
        DeviceRecorder {
            dirs: [DirRecorder::new(), DirRecorder::new()],
        }
    }

    #[inline]
    pub fn record(&mut self, op: Op, latency_ns: u64, len_bytes: u32) {
        self.dirs[op.index()].record(latency_ns, len_bytes);
    }

    pub fn dir(&self, op: Op) -> &DirRecorder {
        &self.dirs[op.index()]
    }

    pub fn merge_from(&mut self, other: &DeviceRecorder) {
        for op in Op::ALL {
            self.dirs[op.index()].merge_from(&other.dirs[op.index()]);
        }
    }

    pub fn reset(&mut self) {
        for d in &mut self.dirs {
            d.reset();
        }
    }

    pub fn ios(&self) -> u64 {
        self.dirs[0].ios + self.dirs[1].ios
    }
}

/// Percentile values keyed by their plain decimal text, in the order requested. Serialises as a
/// JSON object (`{"50": 812, "99.9999": 9120}`), keeping that order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Percentiles(pub Vec<(String, u64)>);

impl Percentiles {
    /// The value for a key such as "99.99".
    pub fn get(&self, key: &str) -> Option<u64> {
        self.0.iter().find(|(k, _)| k == key).map(|&(_, v)| v)
    }

    /// The value for a percentile given as a number.
    pub fn at(&self, p: f64) -> Option<u64> {
        self.get(&percentile_key(p))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }
}

impl Serialize for Percentiles {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Percentiles {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Percentiles;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of percentile keys to nanoseconds")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Percentiles, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, u64>()? {
                    out.push((k, v));
                }
                Ok(Percentiles(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// The latency distribution of one direction, as reported.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub min_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
    pub stddev_ns: f64,
    pub percentiles: Percentiles,
}

impl LatencySummary {
    /// No samples: zeros, with every requested key present so readers need no special case.
    pub fn empty(percentiles: &[f64]) -> Self {
        LatencySummary {
            percentiles: Percentiles(
                percentiles
                    .iter()
                    .map(|&p| (percentile_key(p), 0))
                    .collect(),
            ),
            ..LatencySummary::default()
        }
    }
}

fn summarize_hist(
    hist: &Histogram<u64>,
    percentiles: &[f64],
    min_ns: u64,
    max_ns: u64,
) -> LatencySummary {
    if hist.is_empty() {
        return LatencySummary::empty(percentiles);
    }
    let values = percentiles
        .iter()
        .map(|&p| {
            // The bucket's highest equivalent value is within 0.1% above the true sample, so
            // clamping to the exact range only ever moves it closer to the truth.
            let v = hist.value_at_quantile(p / 100.0).clamp(min_ns, max_ns);
            (percentile_key(p), v)
        })
        .collect();
    LatencySummary {
        min_ns,
        max_ns,
        mean_ns: hist.mean(),
        stddev_ns: hist.stdev(),
        percentiles: Percentiles(values),
    }
}

/// Summary of a bare histogram (e.g. a merged or interval one without exact extremes): min and
/// max are the histogram's, and percentiles never exceed the max.
pub fn summarize(hist: &Histogram<u64>, percentiles: &[f64]) -> LatencySummary {
    if hist.is_empty() {
        return LatencySummary::empty(percentiles);
    }
    summarize_hist(hist, percentiles, hist.min(), hist.max())
}

/// A tag of the HdrHistogram log: `<device>.<read|write>`, with characters the format forbids
/// (comma, whitespace) replaced by `_`.
pub fn hdr_tag(device: &str, op: Op) -> String {
    format!("{}.{}", hdr_tag_device(device), op.name())
}

/// The device part of an interval-log tag: the name with commas and whitespace replaced by `_`.
pub fn hdr_tag_device(device: &str) -> String {
    device
        .chars()
        .map(|c| {
            if c == ',' || c.is_whitespace() {
                '_'
            } else {
                c
            }
        })
        .collect()
}

/// The exact nearest-rank percentile of sorted samples: the value at rank ceil(q * n), the
/// definition HDR histograms and fio use. For tests and for checking other estimators.
pub fn exact_percentile(sorted: &[u64], p: f64) -> u64 {
    assert!(!sorted.is_empty(), "percentile of no samples");
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// A target's latency split as fio splits it, beside its total latency: fio's `slat` (the
/// submission: from when the I/O was issued until its submit call returned; empty for an engine
/// that does the I/O inside that call, as fio keeps no slat for its sync engines) and `clat`
/// (from the submit call's return until the completion was seen; the whole call for those).
#[derive(Clone, Debug, Default)]
pub struct LatencyParts {
    pub slat: DeviceRecorder,
    pub clat: DeviceRecorder,
}

impl LatencyParts {
    pub fn merge_from(&mut self, other: &LatencyParts) {
        self.slat.merge_from(&other.slat);
        self.clat.merge_from(&other.clat);
    }
}

/// Queue-depth distributions as fio samples them (`io_u_mark_depth`, `io_u_mark_submit`,
/// `io_u_mark_complete` in fio's io_u.c), for fio's `iodepth_level`, `iodepth_submit` and
/// `iodepth_complete`: seven buckets each, counted with no allocation (the worker's hot path).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoDepthCounts {
    /// I/Os submitted, by the depth in flight once each was (1, 2-3, 4-7, 8-15, 16-31, 32-63,
    /// 64 and over).
    pub level: [u64; 7],
    /// Submit calls by how many I/Os each carried (0, 1-4, 5-8, 9-16, 17-32, 33-64, over 64).
    pub submit: [u64; 7],
    /// Reaps by how many completions each returned (same buckets as `submit`).
    pub complete: [u64; 7],
}

impl IoDepthCounts {
    /// fio's `io_u_mark_depth`: `nr` I/Os submitted with `depth` in flight.
    #[inline]
    pub fn mark_depth(&mut self, depth: u64, nr: u64) {
        let idx = match depth {
            0..=1 => 0,
            2..=3 => 1,
            4..=7 => 2,
            8..=15 => 3,
            16..=31 => 4,
            32..=63 => 5,
            _ => 6,
        };
        self.level[idx] += nr;
    }

    /// fio's `__io_u_mark_map` bucket of a batch of `nr`.
    #[inline]
    fn batch_idx(nr: u64) -> usize {
        match nr {
            0 => 0,
            1..=4 => 1,
            5..=8 => 2,
            9..=16 => 3,
            17..=32 => 4,
            33..=64 => 5,
            _ => 6,
        }
    }

    /// fio's `io_u_mark_submit`: one submit call carrying `nr` I/Os.
    #[inline]
    pub fn mark_submit(&mut self, nr: u64) {
        self.submit[Self::batch_idx(nr)] += 1;
    }

    /// fio's `io_u_mark_complete`: one reap returning `nr` completions.
    #[inline]
    pub fn mark_complete(&mut self, nr: u64) {
        self.complete[Self::batch_idx(nr)] += 1;
    }

    pub fn merge_from(&mut self, other: &IoDepthCounts) {
        for (a, b) in [
            (&mut self.level, &other.level),
            (&mut self.submit, &other.submit),
            (&mut self.complete, &other.complete),
        ] {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::DEFAULT_PERCENTILES;
    use proptest::prelude::*;
    use rand_core::{Rng, SeedableRng};
    use rand_xoshiro::Xoshiro256PlusPlus;

    /// Log-uniform latencies from 1 µs to 100 ms with a heavy tail: the shape that matters.
    fn samples(seed: u64, n: usize) -> Vec<u64> {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        (0..n)
            .map(|_| {
                let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                (1_000.0 * 10f64.powf(5.0 * u * u * u)) as u64
            })
            .collect()
    }

    fn check_against_exact(data: &[u64]) {
        let mut rec = DirRecorder::new();
        for &v in data {
            rec.record(v, 4096);
        }
        let mut sorted = data.to_vec();
        sorted.sort_unstable();
        let s = rec.summary(&DEFAULT_PERCENTILES);
        assert_eq!(s.min_ns, sorted[0]);
        assert_eq!(s.max_ns, *sorted.last().unwrap());
        let n = data.len() as f64;
        let mean = data.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = data.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        assert!(
            (s.mean_ns - mean).abs() <= mean * 1e-9,
            "{} vs {mean}",
            s.mean_ns
        );
        assert!((s.stddev_ns - var.sqrt()).abs() <= var.sqrt() * 1e-6 + 1e-6);
        for &p in &DEFAULT_PERCENTILES {
            let exact = exact_percentile(&sorted, p);
            let got = s.percentiles.at(p).unwrap();
            assert!(got <= s.max_ns, "p{p} {got} above max {}", s.max_ns);
            // 3 significant digits: the bucket holding the exact value spans at most 0.1%.
            let tol = (exact as f64 * 0.001).ceil() as u64;
            assert!(
                got >= exact && got <= exact + tol,
                "p{p}: got {got}, exact {exact}"
            );
        }
    }

    #[test]
    fn percentiles_match_exact_computation_at_every_default_percentile() {
        check_against_exact(&samples(7, 2_000_000));
        check_against_exact(&samples(8, 1_000));
        check_against_exact(&[42]);
    }

    #[test]
    fn empty_and_saturated() {
        let rec = DirRecorder::new();
        let s = rec.summary(&[50.0, 99.0]);
        assert_eq!(s.percentiles.0.len(), 2);
        assert_eq!(s.max_ns, 0);
        let mut rec = DirRecorder::new();
        rec.record(LATENCY_NS_MAX_TRACKABLE * 2, 512);
        rec.record(0, 512);
        assert_eq!(rec.saturated, 1);
        let s = rec.summary(&[100.0]);
        assert_eq!(s.min_ns, 1);
        assert_eq!(s.max_ns, LATENCY_NS_MAX_TRACKABLE * 2);
    }

    #[test]
    fn merge_equals_recording_together() {
        let a = samples(1, 10_000);
        let b = samples(2, 10_000);
        let mut ra = DeviceRecorder::new();
        let mut rb = DeviceRecorder::new();
        let mut all = DeviceRecorder::new();
        for &v in &a {
            ra.record(Op::Read, v, 4096);
            all.record(Op::Read, v, 4096);
        }
        for &v in &b {
            rb.record(Op::Read, v, 4096);
            all.record(Op::Read, v, 4096);
        }
        ra.merge_from(&rb);
        assert_eq!(
            ra.dir(Op::Read).summary(&DEFAULT_PERCENTILES),
            all.dir(Op::Read).summary(&DEFAULT_PERCENTILES)
        );
        assert_eq!(ra.ios(), 20_000);
    }

    #[test]
    fn percentiles_serialise_in_order() {
        let p = Percentiles(vec![("99.9999".into(), 9), ("50".into(), 1)]);
        let j = serde_json::to_string(&p).unwrap();
        assert_eq!(j, r#"{"99.9999":9,"50":1}"#);
        let back: Percentiles = serde_json::from_str(&j).unwrap();
        assert_eq!(back, p);
    }

    proptest! {
        #[test]
        fn random_data_matches_exact(data in proptest::collection::vec(1u64..10_000_000_000, 1..3000)) {
            check_against_exact(&data);
        }
    }
}
