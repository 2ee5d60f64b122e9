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
    /// Middle of the column, ns since run start.
    pub t_ns: u64,
    pub ios: u64,
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

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
        let columns = self
            .hists
            .iter()
            .enumerate()
            .filter(|(_, h)| !h.is_empty())
            .map(|(i, h)| ColumnStats {
                t_ns: self.t_start_ns
                    + ((2 * i as u64 + 1) as u128 * width as u128 / (2 * n) as u128) as u64,
                ios: h.len(),
                min_ns: self.extremes[i].0,
                p50_ns: h.value_at_quantile(0.5),
                p99_ns: h.value_at_quantile(0.99),
                max_ns: self.extremes[i].1,
            })
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
            outliers,
            outlier_threshold_ns,
            device_threshold_ns,
            ios: self.ios,
            out_of_range: self.out_of_range,
        }
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
        let p50 = r.columns[0].p50_ns;
        assert!((1_400..=1_560).contains(&p50), "{p50}");
        assert_eq!(r.outliers.len(), 1);
        assert_eq!(r.outliers[0].completion_ns, 555_500);
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
