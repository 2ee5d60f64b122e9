//! A measured distribution, given by points of its quantile function and sampled by inverse
//! transform with linear interpolation between the points.
//!
//! Written by hand: it is a dozen lines on the simulator's per-command path, and the crates that
//! offer empirical distributions (rand_distr has none) either allocate per sample or want raw
//! samples rather than the percentile points a latency report holds.

use std::sync::Arc;

/// Points (quantile, value) of a quantile function: quantiles from 0 to 1, both coordinates
/// non-decreasing. `sample(u)` for `u` uniform in [0, 1) follows the distribution whose
/// quantile function is the piecewise-linear curve through the points.
///
/// A draw costs a table look-up and a search of the few points in one 1/1024th of the quantile
/// range ([`QuantileDist::at`]), not a binary search of every point: a calibrated jitter has
/// hundreds of points, and this is on every simulated command. Each point's quantile and value
/// lie side by side, so the two points of a draw are one cache line (or two), not four lines
/// of two arrays; the devices of one description share one copy ([`crate::Ssd::share_tables_from`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QuantileDist {
    /// (quantile, value) of each point. Shared: devices of one description draw from one copy
    /// (a per-device 4 KiB table, 64 devices, was a cache miss on most draws).
    pts: Arc<[(f64, f64)]>,
    /// `first[b]`: the first point at or above quantile b / BUCKETS (b in 0..=BUCKETS).
    first: Arc<[u32]>,
}

/// Buckets of the look-up table (a power of two, so b / BUCKETS is exact in floating point).
const BUCKETS: usize = 1024;

impl QuantileDist {
    /// Check and build. An empty list is the distribution that is always 0.
    pub fn new(points: &[(f64, u64)]) -> Result<QuantileDist, String> {
        if points.is_empty() {
            return Ok(QuantileDist::default());
        }
        if points.len() < 2 {
            return Err("needs at least two points, from quantile 0 to quantile 1".into());
        }
        let (q0, _) = points[0];
        let (q1, _) = points[points.len() - 1];
        if q0 != 0.0 || q1 != 1.0 {
            return Err(format!(
                "the first point must be at quantile 0 and the last at quantile 1 (got {q0} and {q1})"
            ));
        }
        for w in points.windows(2) {
            let ((qa, va), (qb, vb)) = (w[0], w[1]);
            if qa.is_nan() || qb.is_nan() || qb <= qa || vb < va {
                return Err(format!(
                    "points must increase in quantile and not decrease in value: \
                     ({qa}, {va}) then ({qb}, {vb})"
                ));
            }
        }
        let pts: Arc<[(f64, f64)]> = points.iter().map(|&(q, v)| (q, v as f64)).collect();
        let first = (0..=BUCKETS)
            .map(|b| {
                let at = b as f64 / BUCKETS as f64;
                pts.partition_point(|p| p.0 < at) as u32
            })
            .collect();
        Ok(QuantileDist { pts, first })
    }

    pub fn is_empty(&self) -> bool {
        self.pts.is_empty()
    }

    /// The value at quantile `u` in [0, 1].
    #[inline]
    pub fn at(&self, u: f64) -> u64 {
        if self.pts.is_empty() {
            return 0;
        }
        // The first point at or above u: between the first points at or above the bucket's
        // bounds (b / BUCKETS <= u < (b + 1) / BUCKETS, exact for a power-of-two BUCKETS).
        let b = ((u * BUCKETS as f64) as usize).min(BUCKETS - 1);
        let (lo, hi) = (self.first[b] as usize, self.first[b + 1] as usize);
        let i = (lo + self.pts[lo..hi].partition_point(|p| p.0 < u)).clamp(1, self.pts.len() - 1);
        let ((qa, va), (qb, vb)) = (self.pts[i - 1], self.pts[i]);
        let f = ((u - qa) / (qb - qa)).clamp(0.0, 1.0);
        round_non_negative(va + f * (vb - va))
    }

    /// A draw from 64 uniform random bits.
    #[inline]
    pub fn sample(&self, bits: u64) -> u64 {
        self.at((bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64))
    }

    /// The mean of the distribution (exact for the piecewise-linear quantile function).
    pub fn mean(&self) -> f64 {
        self.pts
            .windows(2)
            .map(|w| (w[1].0 - w[0].0) * (w[0].1 + w[1].1) / 2.0)
            .sum()
    }
}

/// `x.round() as u64` (half away from zero, saturating) for `x >= 0`, without the libm call
/// `f64::round` is on x86-64 without SSE4.1. Exact: below 2^53 the fraction `x - trunc(x)` is
/// representable, and from there on `x` is an integer.
#[inline]
fn round_non_negative(x: f64) -> u64 {
    let t = x as u64;
    t.saturating_add(u64::from(x - t as f64 >= 0.5))
}

#[cfg(test)]
mod tests {
    use super::QuantileDist;

    #[test]
    fn interpolates_between_points_and_checks_them() {
        let d = QuantileDist::new(&[(0.0, 0), (0.5, 100), (0.99, 1000), (1.0, 5000)]).unwrap();
        assert_eq!(d.at(0.0), 0);
        assert_eq!(d.at(0.25), 50);
        assert_eq!(d.at(0.5), 100);
        assert_eq!(d.at(0.745), 550);
        assert_eq!(d.at(0.995), 3000);
        assert_eq!(d.at(1.0), 5000);
        assert!((d.mean() - (0.5 * 50.0 + 0.49 * 550.0 + 0.01 * 3000.0)).abs() < 1e-9);
        assert!(QuantileDist::new(&[]).unwrap().is_empty());
        for bad in [
            vec![(0.0, 1)],
            vec![(0.1, 1), (1.0, 2)],
            vec![(0.0, 1), (0.9, 2)],
            vec![(0.0, 5), (1.0, 2)],
            vec![(0.0, 1), (0.5, 2), (0.5, 3), (1.0, 4)],
        ] {
            assert!(QuantileDist::new(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_lookup_table_finds_the_points_a_full_search_finds() {
        // Dense points in the tail (as a calibrated jitter has), sparse ones in the body, and
        // points exactly on bucket bounds.
        let mut pts = vec![(0.0, 0), (0.25, 10), (0.5, 20), (0.75, 30)];
        pts.extend((1..200).map(|k| (0.999 + k as f64 * 5e-6, 1_000 + k * 100)));
        pts.push((1.0, 1_000_000));
        let d = QuantileDist::new(&pts).unwrap();
        let (q, v): (Vec<f64>, Vec<f64>) = d.pts.iter().copied().unzip();
        let full = |u: f64| {
            let i = q.partition_point(|&x| x < u).clamp(1, q.len() - 1);
            let f = ((u - q[i - 1]) / (q[i] - q[i - 1])).clamp(0.0, 1.0);
            (v[i - 1] + f * (v[i] - v[i - 1])).round() as u64
        };
        let mut x = 7u64;
        for k in 0..200_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = if k % 2 == 0 {
                (x >> 11) as f64 / (1u64 << 53) as f64
            } else {
                // the tail, and bucket bounds
                0.999 + (x >> 11) as f64 / (1u64 << 53) as f64 * 0.001
            };
            assert_eq!(d.at(u), full(u), "u = {u}");
        }
        for b in 0..=1024 {
            let u = b as f64 / 1024.0;
            assert_eq!(d.at(u), full(u), "u = {u}");
        }
    }

    #[test]
    fn rounding_is_f64_round() {
        let mut x = 3u64;
        let mut cases = vec![
            0.0,
            0.49999999999999994,
            0.5,
            1.5,
            2.5,
            2.4999999999999996,
            4503599627370495.5,
            4503599627370496.0,
            9007199254740993.0,
            1.8446744073709552e19,
        ];
        for _ in 0..100_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let m = (x >> 11) as f64 / (1u64 << 53) as f64;
            cases.push(m * 10f64.powi((x % 20) as i32));
            // Halves and their neighbours.
            let h = (x >> 40) as f64 + 0.5;
            cases.extend([
                h,
                f64::from_bits(h.to_bits() - 1),
                f64::from_bits(h.to_bits() + 1),
            ]);
        }
        for c in cases {
            assert_eq!(super::round_non_negative(c), c.round() as u64, "{c:e}");
        }
    }

    #[test]
    fn samples_follow_the_quantile_function() {
        let d =
            QuantileDist::new(&[(0.0, 1000), (0.9, 2000), (0.999, 50_000), (1.0, 90_000)]).unwrap();
        let mut x = 1u64;
        let mut s: Vec<u64> = (0..1_000_000)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                d.sample(x)
            })
            .collect();
        s.sort_unstable();
        for (q, want) in [(0.45, 1500.0), (0.9, 2000.0), (0.9495, 26_000.0)] {
            let got = s[(q * s.len() as f64) as usize] as f64;
            assert!((got - want).abs() / want < 0.01, "q{q}: {got} vs {want}");
        }
        let mean = s.iter().sum::<u64>() as f64 / s.len() as f64;
        assert!(
            (mean - d.mean()).abs() / d.mean() < 0.01,
            "{mean} vs {}",
            d.mean()
        );
    }
}
