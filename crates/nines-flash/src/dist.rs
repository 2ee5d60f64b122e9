//! A measured distribution, given by points of its quantile function and sampled by inverse
//! transform with linear interpolation between the points.
//!
//! Written by hand: it is a dozen lines on the simulator's per-command path, and the crates that
//! offer empirical distributions (rand_distr has none) either allocate per sample or want raw
//! samples rather than the percentile points a latency report holds.

/// Points (quantile, value) of a quantile function: quantiles from 0 to 1, both coordinates
/// non-decreasing. `sample(u)` for `u` uniform in [0, 1) follows the distribution whose
/// quantile function is the piecewise-linear curve through the points.
///
/// A draw costs a table look-up and a search of the few points in one 1/1024th of the quantile
/// range ([`QuantileDist::at`]), not a binary search of every point: a calibrated jitter has
/// hundreds of points, and this is on every simulated command.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QuantileDist {
    q: Vec<f64>,
    v: Vec<f64>,
    /// `first[b]`: the first point at or above quantile b / BUCKETS (b in 0..=BUCKETS).
    first: Vec<u32>,
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
        let q: Vec<f64> = points.iter().map(|p| p.0).collect();
        let first = (0..=BUCKETS)
            .map(|b| {
                let at = b as f64 / BUCKETS as f64;
                q.partition_point(|&x| x < at) as u32
            })
            .collect();
        Ok(QuantileDist {
            q,
            v: points.iter().map(|p| p.1 as f64).collect(),
            first,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// The value at quantile `u` in [0, 1].
    #[inline]
    pub fn at(&self, u: f64) -> u64 {
        if self.q.is_empty() {
            return 0;
        }
        // The first point at or above u: between the first points at or above the bucket's
        // bounds (b / BUCKETS <= u < (b + 1) / BUCKETS, exact for a power-of-two BUCKETS).
        let b = ((u * BUCKETS as f64) as usize).min(BUCKETS - 1);
        let (lo, hi) = (self.first[b] as usize, self.first[b + 1] as usize);
        let i = (lo + self.q[lo..hi].partition_point(|&q| q < u)).clamp(1, self.q.len() - 1);
        let (qa, qb) = (self.q[i - 1], self.q[i]);
        let (va, vb) = (self.v[i - 1], self.v[i]);
        let f = ((u - qa) / (qb - qa)).clamp(0.0, 1.0);
        (va + f * (vb - va)).round() as u64
    }

    /// A draw from 64 uniform random bits.
    #[inline]
    pub fn sample(&self, bits: u64) -> u64 {
        self.at((bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64))
    }

    /// The mean of the distribution (exact for the piecewise-linear quantile function).
    pub fn mean(&self) -> f64 {
        self.q
            .windows(2)
            .zip(self.v.windows(2))
            .map(|(q, v)| (q[1] - q[0]) * (v[0] + v[1]) / 2.0)
            .sum()
    }
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
        let full = |u: f64| {
            let i = d.q.partition_point(|&q| q < u).clamp(1, d.q.len() - 1);
            let f = ((u - d.q[i - 1]) / (d.q[i] - d.q[i - 1])).clamp(0.0, 1.0);
            (d.v[i - 1] + f * (d.v[i] - d.v[i - 1])).round() as u64
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
