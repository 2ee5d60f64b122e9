//! Decimating millions of per-I/O latencies for a latency-over-time picture.
//!
//! A scatter of every I/O (paper 000, Fig. 10) is unreadable and enormous at millions of points.
//! Instead the run is cut into one column per horizontal pixel; each column keeps a coarse
//! latency histogram (min, p50, p99, max survive), and every I/O at or above an outlier
//! threshold is kept as its own point so that no stall disappears into a bucket. Memory is
//! bounded: `columns` small histograms plus at most `outliers_max` points (when more arrive, the
//! threshold rises to keep the highest).

use hdrhistogram::Histogram;

/// One pixel column of the run.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnStats {
    /// The column's position among all columns (empty ones included), from 0.
    pub index: usize,
    /// Middle of the column, ns since run start.
    pub t_ns: u64,
    pub ios: u64,
    pub min_ns: u64,
    pub max_ns: u64,
}

/// One percentile over time: a point per window of adjacent columns holding enough I/Os to
/// resolve it, in stretches that never cross a gap.
#[derive(Debug, Clone, PartialEq)]
pub struct PercentileLine {
    pub percentile: f64,
    /// The fewest I/Os a window holds (ten times what resolves the percentile).
    pub window_ios_min: u64,
    /// Per stretch between gaps, per window: (start ns, end ns, the percentile in ns). A
    /// stretch with too few I/Os for one window has none.
    pub stretches: Vec<Vec<(u64, u64, u64)>>,
}

/// I/Os a stretch without completions must have been expected to hold, at the run's mean rate,
/// to be a gap rather than chance (a Poisson stream leaves so long an empty stretch with
/// probability e^-20, about 2e-9).
pub const GAP_EXPECTED_IOS: f64 = 20.0;

/// An I/O kept individually.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outlier {
    pub completion_ns: u64,
    pub latency_ns: u64,
    pub device: u16,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decimated {
    /// Columns that saw at least one I/O.
    pub columns: Vec<ColumnStats>,
    /// Start of the first column, end of the last and width of each, ns.
    pub t_start_ns: u64,
    pub t_end_ns: u64,
    pub column_ns: f64,
    /// Runs of adjacent columns (indices into `columns`) separated by gaps: stretches without a
    /// completion long enough that the run's mean rate expected [`GAP_EXPECTED_IOS`] in them.
    /// Nothing is drawn across a gap.
    pub stretches: Vec<std::ops::Range<usize>>,
    /// p50 and p99 over time (I/Os of every device pooled per window).
    pub lines: Vec<PercentileLine>,
    pub outliers: Vec<Outlier>,
    /// The latency at and above which I/Os were kept individually (it rises if too many are);
    /// with per-device thresholds, the lowest of them.
    pub outlier_threshold_ns: u64,
    /// Per-device thresholds actually applied (index = device), empty when one served all.
    pub device_threshold_ns: Vec<u64>,
    /// I/Os seen in total.
    pub ios: u64,
    /// I/Os outside [t_start, t_end).
    pub out_of_range: u64,
}

pub struct TimeDecimator {
    t_start_ns: u64,
    t_end_ns: u64,
    hists: Vec<Histogram<u32>>,
    /// Exact extremes per column (the histograms are coarse).
    extremes: Vec<(u64, u64)>,
    outliers: Vec<Outlier>,
    outliers_max: usize,
    threshold_ns: u64,
    device_threshold_ns: Vec<u64>,
    /// Kept when latency / the device's threshold >= bar; the bar rises from 1 when too many
    /// are kept, evenly for every device so that a steadily slow device cannot crowd out the
    /// others' outliers.
    bar: f64,
    ios: u64,
    out_of_range: u64,
}

impl TimeDecimator {
    /// Columns cover [t_start_ns, t_end_ns) evenly.
    pub fn new(
        t_start_ns: u64,
        t_end_ns: u64,
        columns: usize,
        outlier_threshold_ns: u64,
        outliers_max: usize,
    ) -> TimeDecimator {
        assert!(columns > 0 && columns <= 100_000, "columns out of range");
        assert!(outliers_max >= 2);
        let t_end_ns = t_end_ns.max(t_start_ns + 1);
        // 1 significant digit: about 6% resolution, enough for a picture; ~2.5 KB a column.
        let hists = (0..columns)
            .map(|_| {
                Histogram::new_with_bounds(1, nines_core::stats::LATENCY_NS_MAX_TRACKABLE, 1)
                    .expect("valid histogram bounds")
            })
            .collect();
        TimeDecimator {
            t_start_ns,
            t_end_ns,
            extremes: vec![(u64::MAX, 0); columns],
            hists,
            outliers: Vec::new(),
            outliers_max,
            threshold_ns: outlier_threshold_ns.max(1),
            device_threshold_ns: Vec::new(),
            bar: 1.0,
            ios: 0,
            out_of_range: 0,
        }
    }

    /// Per-device outlier thresholds (index = device; a device past the end uses the one given
    /// to [`TimeDecimator::new`]).
    pub fn with_device_thresholds(mut self, device_threshold_ns: Vec<u64>) -> TimeDecimator {
        self.device_threshold_ns = device_threshold_ns.into_iter().map(|t| t.max(1)).collect();
        self
    }

    #[inline]
    fn device_threshold_ns(&self, device: u16) -> u64 {
        self.device_threshold_ns
            .get(usize::from(device))
            .copied()
            .unwrap_or(self.threshold_ns)
    }

    #[inline]
    pub fn push(&mut self, completion_ns: u64, latency_ns: u64, device: u16) {
        self.ios += 1;
        if completion_ns < self.t_start_ns || completion_ns >= self.t_end_ns {
            self.out_of_range += 1;
            return;
        }
        let n = self.hists.len() as u128;
        let col = ((completion_ns - self.t_start_ns) as u128 * n
            / (self.t_end_ns - self.t_start_ns) as u128) as usize;
        let v = latency_ns.clamp(1, nines_core::stats::LATENCY_NS_MAX_TRACKABLE);
        self.hists[col].saturating_record(v);
        let e = &mut self.extremes[col];
        *e = (e.0.min(latency_ns), e.1.max(latency_ns));
        let score = latency_ns as f64 / self.device_threshold_ns(device) as f64;
        if score >= self.bar {
            if self.outliers.len() >= self.outliers_max {
                // Keep the higher half (relative to each device's threshold) and raise the bar
                // just above the lowest kept.
                let mut scored: Vec<(f64, Outlier)> = self
                    .outliers
                    .iter()
                    .map(|o| {
                        let t = self.device_threshold_ns(o.device) as f64;
                        (o.latency_ns as f64 / t, *o)
                    })
                    .collect();
                scored.sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
                scored.truncate(self.outliers_max / 2);
                self.bar = scored.last().map_or(self.bar, |s| s.0 * (1.0 + 1e-9));
                self.outliers = scored.into_iter().map(|s| s.1).collect();
                if score < self.bar {
                    return;
                }
            }
            self.outliers.push(Outlier {
                completion_ns,
                latency_ns,
                device,
            });
        }
    }

    pub fn finish(self) -> Decimated {
        let n = self.hists.len() as u64;
        let width = self.t_end_ns - self.t_start_ns;
        // Where column i starts (i = n: where the last one ends), and its middle.
        let edge_ns = |i: usize| self.t_start_ns + (i as u128 * width as u128 / n as u128) as u64;
        let mid_ns = |i: usize| {
            self.t_start_ns + ((2 * i as u64 + 1) as u128 * width as u128 / (2 * n) as u128) as u64
        };
        let columns: Vec<ColumnStats> = self
            .hists
            .iter()
            .enumerate()
            .filter(|(_, h)| !h.is_empty())
            .map(|(i, h)| ColumnStats {
                index: i,
                t_ns: mid_ns(i),
                ios: h.len(),
                min_ns: self.extremes[i].0,
                max_ns: self.extremes[i].1,
            })
            .collect();
        let stretches = stretches(&columns, self.hists.len());
        let lines = [50.0, 99.0]
            .into_iter()
            .map(|p| percentile_line(&self.hists, &columns, &stretches, p, &edge_ns))
            .collect();
        let bar = self.bar;
        let applied = |t: u64| (t as f64 * bar).ceil() as u64;
        let device_threshold_ns: Vec<u64> = self
            .device_threshold_ns
            .iter()
            .map(|&t| applied(t))
            .collect();
        let outlier_threshold_ns = device_threshold_ns
            .iter()
            .copied()
            .min()
            .unwrap_or_else(|| applied(self.threshold_ns));
        let mut outliers = self.outliers;
        outliers.sort_unstable_by_key(|o| o.completion_ns);
        Decimated {
            columns,
            t_start_ns: self.t_start_ns,
            t_end_ns: self.t_end_ns,
            column_ns: width as f64 / n as f64,
            stretches,
            lines,
            outliers,
            outlier_threshold_ns,
            device_threshold_ns,
            ios: self.ios,
            out_of_range: self.out_of_range,
        }
    }
}

/// Split the non-empty columns into stretches at gaps: runs of empty columns in which the run's
/// mean rate (I/Os per column, over all `n_columns`) expected at least [`GAP_EXPECTED_IOS`].
fn stretches(columns: &[ColumnStats], n_columns: usize) -> Vec<std::ops::Range<usize>> {
    let ios: u64 = columns.iter().map(|c| c.ios).sum();
    let per_column = ios as f64 / n_columns.max(1) as f64;
    let mut out = Vec::new();
    let mut start = 0;
    for k in 1..columns.len() {
        let empty = columns[k].index - columns[k - 1].index - 1;
        if empty > 0 && empty as f64 * per_column >= GAP_EXPECTED_IOS {
            out.push(start..k);
            start = k;
        }
    }
    if !columns.is_empty() {
        out.push(start..columns.len());
    }
    out
}

/// Percentile `p` over windows of adjacent columns inside each stretch, each window holding at
/// least ten times the I/Os that resolve `p` (the I/Os of every device that completed any in it
/// pooled); a short remainder at a stretch's end joins the window before it.
fn percentile_line(
    hists: &[Histogram<u32>],
    columns: &[ColumnStats],
    stretches: &[std::ops::Range<usize>],
    p: f64,
    edge_ns: &dyn Fn(usize) -> u64,
) -> PercentileLine {
    let need = 10 * nines_core::report::samples_to_resolve(p);
    let mut out = Vec::with_capacity(stretches.len());
    for r in stretches {
        // Windows as (first column, last column) indices into `columns`.
        let mut windows: Vec<(usize, usize)> = Vec::new();
        let (mut first, mut n) = (r.start, 0u64);
        for k in r.clone() {
            n += columns[k].ios;
            if n >= need {
                windows.push((first, k));
                first = k + 1;
                n = 0;
            }
        }
        if n > 0
            && let Some(last) = windows.last_mut()
        {
            last.1 = r.end - 1;
        }
        let pts = windows
            .iter()
            .map(|&(a, b)| {
                let mut h = hists[columns[a].index].clone();
                for c in &columns[a + 1..=b] {
                    // Same bounds and precision, so adding cannot fail.
                    let _ = h.add(&hists[c.index]);
                }
                // The histogram's bucket may reach past the exact max; no percentile does.
                let max = columns[a..=b].iter().map(|c| c.max_ns).max().unwrap_or(0);
                (
                    edge_ns(columns[a].index),
                    edge_ns(columns[b].index + 1),
                    h.value_at_quantile(p / 100.0).min(max),
                )
            })
            .collect();
        out.push(pts);
    }
    PercentileLine {
        percentile: p,
        window_ios_min: need,
        stretches: out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_and_outliers() {
        let mut d = TimeDecimator::new(0, 1_000_000, 10, 50_000, 100);
        for i in 0..1_000_000u64 / 100 {
            let t = i * 100;
            let lat = if t == 555_500 {
                900_000
            } else {
                1_000 + (i % 10) * 100
            };
            d.push(t, lat, (i % 3) as u16);
        }
        d.push(2_000_000, 5, 0);
        let r = d.finish();
        assert_eq!(r.columns.len(), 10);
        assert_eq!(r.ios, 10_001);
        assert_eq!(r.out_of_range, 1);
        assert_eq!(r.columns[0].t_ns, 50_000);
        assert_eq!(r.columns[0].ios, 1000);
        assert_eq!(r.columns[0].min_ns, 1_000);
        assert_eq!(r.columns[5].max_ns, 900_000);
        // 1000 I/Os a column: p50 windows of 30 I/Os are single columns, p99 windows of 1010
        // I/Os two columns.
        let p50 = &r.lines[0];
        assert_eq!(p50.stretches.len(), 1);
        assert_eq!(p50.stretches[0].len(), 10);
        let (t0, t1, v) = p50.stretches[0][0];
        assert_eq!((t0, t1), (0, 100_000));
        assert!((1_400..=1_560).contains(&v), "{v}");
        let p99 = &r.lines[1];
        assert_eq!(p99.window_ios_min, 1010);
        assert_eq!(p99.stretches[0].len(), 5);
        assert_eq!(p99.stretches[0][0].1, 200_000);
        assert_eq!(p99.stretches[0][4].1, 1_000_000);
        // The stalled I/O at 900 µs is beyond the window's p99.
        assert!(
            p99.stretches[0].iter().all(|&(_, _, v)| v < 2_000),
            "{p99:?}"
        );
        assert_eq!(r.outliers.len(), 1);
        assert_eq!(r.outliers[0].completion_ns, 555_500);
    }

    #[test]
    fn a_stretch_without_completions_is_a_gap_and_lines_do_not_cross_it() {
        // 10 columns of 100 µs, an I/O every µs, none in columns 4-6 (a 300 µs stall; the
        // mean rate, 70 a column, expected 210 I/Os there).
        let mut d = TimeDecimator::new(0, 1_000_000, 10, 1_000_000, 100);
        for t in (0..1_000_000u64).step_by(1000) {
            if !(400_000..700_000).contains(&t) {
                d.push(t, 10_000, 0);
            }
        }
        let r = d.finish();
        assert_eq!(r.columns.len(), 7);
        assert_eq!(r.stretches, vec![0..4, 4..7]);
        let p50 = &r.lines[0];
        assert_eq!(p50.stretches.len(), 2);
        assert!(p50.stretches[0].iter().all(|&(_, t, _)| t <= 400_000));
        assert!(p50.stretches[1].iter().all(|&(t, _, _)| t >= 700_000));
        // One empty column at a low rate (about one I/O per column) is chance, not a gap.
        let mut d = TimeDecimator::new(0, 1_000_000, 100, 1_000_000, 100);
        for t in (0..1_000_000u64).step_by(10_000).filter(|t| *t != 500_000) {
            d.push(t, 10_000, 0);
        }
        assert_eq!(d.finish().stretches.len(), 1);
    }

    #[test]
    fn outliers_stay_bounded_and_keep_the_highest() {
        let mut d = TimeDecimator::new(0, 1_000, 4, 10, 8);
        for i in 0..1_000u64 {
            d.push(i, 10 + i, 0);
        }
        let r = d.finish();
        assert!(r.outliers.len() <= 8);
        assert!(r.outliers.iter().any(|o| o.latency_ns == 1_009));
        assert!(r.outlier_threshold_ns > 10);
    }
}
