//! Latency spike detection, sans-IO: feed it completions (or interval maxima), get back the
//! spikes and whether they repeat with a period.
//!
//! This is the product itself (paper 000, Fig. 10: periodic SMART housekeeping stalls showed up
//! only as a scatter of every I/O over time), so it is written here rather than taken from a
//! crate.
//!
//! Method:
//! 1. An I/O is *slow* when its latency is at least `height_factor` times its device's median
//!    (or the run's median when no per-device medians are given): a device that is steadily
//!    slower than the others is an outlier device, not one run-long spike.
//!    Each slow I/O covers the time it was outstanding, `[completion - latency, completion]`.
//!    Slow I/Os are kept (bounded by `slow_max`); everything else is only counted.
//! 2. Per device, slow I/Os whose intervals overlap or lie within `merge_gap_ns` of each other
//!    form one *spike*: start, end, duration, height (largest latency), number of slow I/Os.
//!    Across devices, spikes that overlap in time are merged into the reported list so that a
//!    spike that hits several devices at once is one entry naming them all.
//! 3. Per device, the spike start times are tested for a period: every gap between a spike and
//!    its next few neighbours is a candidate period P; each candidate is scored by the number of
//!    spikes that fall within `phase_tolerance * P` of one grid `t0 + kP` (a circular phase
//!    histogram), and accepted when at least `min_occurrences` spikes fit and they fill at least
//!    `coverage_min` of the grid points inside the run (which rejects P/2, P/3 and chance
//!    alignments of a few random stalls). The best grid is refined by least squares.
//! 4. Devices with the same period (within `phase_tolerance`) are reported together; they
//!    "spike together" when most of their periodic spikes overlap a spike of another device.

use std::collections::BTreeMap;

/// Tuning of the detector. The defaults suit per-I/O logs.
#[derive(Debug, Clone, PartialEq)]
pub struct SpikeParams {
    /// A slow I/O has latency >= height_factor x the median latency.
    pub height_factor: f64,
    /// Slow intervals closer than this merge into one spike; 0 = twice the slow threshold.
    pub merge_gap_ns: u64,
    /// Half-width of the phase window around the grid, as a fraction of the period.
    pub phase_tolerance: f64,
    /// A period needs at least this many spikes on its grid.
    pub min_occurrences: usize,
    /// ... and must fill at least this fraction of the grid points inside the run.
    pub coverage_min: f64,
    /// At most this many slow samples are kept (the rest are counted in `slow_dropped`).
    pub slow_max: usize,
    /// At most this many spikes per device are tested for a period (the highest).
    pub spikes_per_device_max: usize,
}

impl Default for SpikeParams {
    fn default() -> Self {
        SpikeParams {
            height_factor: 8.0,
            merge_gap_ns: 0,
            phase_tolerance: 0.03,
            min_occurrences: 4,
            coverage_min: 0.7,
            slow_max: 1_000_000,
            spikes_per_device_max: 4_000,
        }
    }
}

/// One latency spike: a stretch of time in which some device(s) served I/O far slower than usual.
#[derive(Debug, Clone, PartialEq)]
pub struct Spike {
    pub start_ns: u64,
    pub end_ns: u64,
    /// The largest latency seen in the spike.
    pub height_ns: u64,
    /// Slow I/Os (or slow intervals) in the spike.
    pub slow_ios: u64,
    /// The devices affected, ascending.
    pub devices: Vec<u16>,
}

impl Spike {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }
}

/// Spikes that repeat with a period on one or more devices.
#[derive(Debug, Clone, PartialEq)]
pub struct Periodic {
    pub period_ns: u64,
    /// Time of the first grid point (t0 of t0 + kP).
    pub phase_ns: u64,
    /// Spikes on the grid, summed over the devices.
    pub occurrences: usize,
    /// Grid points inside the run, summed over the devices.
    pub expected: usize,
    /// Median duration and height of the spikes on the grid.
    pub duration_ns: u64,
    pub height_ns: u64,
    pub height_ns_max: u64,
    pub devices: Vec<u16>,
    /// Most spikes on the grid overlap a spike on another device of this finding.
    pub together: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SpikeAnalysis {
    /// Latency at and above which an I/O counted as slow (with per-device thresholds, the
    /// lowest of them).
    pub threshold_ns: u64,
    /// Per-device thresholds (index = device), empty when one threshold served every device.
    pub device_threshold_ns: Vec<u64>,
    pub spikes: Vec<Spike>,
    pub periodic: Vec<Periodic>,
    /// Slow samples not kept because `slow_max` was reached (the analysis then covers the first
    /// `slow_max` only).
    pub slow_dropped: u64,
    /// Time covered by the input.
    pub span_ns: (u64, u64),
}

/// A slow sample: the time it covered and its latency.
#[derive(Debug, Clone, Copy)]
struct Slow {
    device: u16,
    start_ns: u64,
    end_ns: u64,
    latency_ns: u64,
}

/// Collects slow samples; `finish` does the analysis. Allocation is bounded by `slow_max`.
#[derive(Debug)]
pub struct SpikeDetector {
    params: SpikeParams,
    threshold_ns: u64,
    device_threshold_ns: Vec<u64>,
    slow: Vec<Slow>,
    slow_dropped: u64,
    t_min_ns: u64,
    t_max_ns: u64,
}

impl SpikeDetector {
    /// `median_ns`: the run's median latency (the baseline spikes are measured against).
    pub fn new(params: SpikeParams, median_ns: u64) -> SpikeDetector {
        assert!(params.height_factor > 1.0, "height_factor must exceed 1");
        assert!(params.phase_tolerance > 0.0 && params.phase_tolerance < 0.25);
        let threshold_ns = ((median_ns.max(1) as f64) * params.height_factor).ceil() as u64;
        SpikeDetector {
            params,
            threshold_ns,
            device_threshold_ns: Vec::new(),
            slow: Vec::new(),
            slow_dropped: 0,
            t_min_ns: u64::MAX,
            t_max_ns: 0,
        }
    }

    /// Slowness measured per device: `device_median_ns[d]` is device d's median latency (0 =
    /// unknown, then the median of the known ones serves). A device steadily slower than the
    /// others then has its own, higher threshold instead of being one run-long spike.
    pub fn per_device(params: SpikeParams, device_median_ns: &[u64]) -> SpikeDetector {
        let mut known: Vec<u64> = device_median_ns
            .iter()
            .copied()
            .filter(|&m| m > 0)
            .collect();
        known.sort_unstable();
        let fallback = known.get(known.len() / 2).copied().unwrap_or(1);
        let mut d = SpikeDetector::new(params, fallback);
        let f = d.params.height_factor;
        d.device_threshold_ns = device_median_ns
            .iter()
            .map(|&m| {
                let m = if m == 0 { fallback } else { m };
                ((m.max(1) as f64) * f).ceil() as u64
            })
            .collect();
        if let Some(&lo) = d.device_threshold_ns.iter().min() {
            d.threshold_ns = lo;
        }
        d
    }

    /// The lowest threshold (the only one without per-device medians).
    pub fn threshold_ns(&self) -> u64 {
        self.threshold_ns
    }

    /// The threshold of one device.
    #[inline]
    pub fn device_threshold_ns(&self, device: u16) -> u64 {
        self.device_threshold_ns
            .get(usize::from(device))
            .copied()
            .unwrap_or(self.threshold_ns)
    }

    /// One completed I/O (completion time since run start).
    #[inline]
    pub fn push(&mut self, device: u16, completion_ns: u64, latency_ns: u64) {
        let start_ns = completion_ns.saturating_sub(latency_ns);
        self.t_min_ns = self.t_min_ns.min(start_ns);
        self.t_max_ns = self.t_max_ns.max(completion_ns);
        if latency_ns >= self.device_threshold_ns(device) {
            self.keep(Slow {
                device,
                start_ns,
                end_ns: completion_ns,
                latency_ns,
            });
        }
    }

    /// One interval of an interval log: [start, end) and the largest latency seen in it.
    pub fn push_interval(&mut self, device: u16, start_ns: u64, end_ns: u64, max_ns: u64) {
        self.t_min_ns = self.t_min_ns.min(start_ns);
        self.t_max_ns = self.t_max_ns.max(end_ns);
        if max_ns >= self.device_threshold_ns(device) {
            self.keep(Slow {
                device,
                start_ns,
                end_ns,
                latency_ns: max_ns,
            });
        }
    }

    fn keep(&mut self, s: Slow) {
        if self.slow.len() < self.params.slow_max {
            self.slow.push(s);
        } else {
            self.slow_dropped += 1;
        }
    }

    pub fn finish(mut self) -> SpikeAnalysis {
        let span_ns = if self.t_min_ns <= self.t_max_ns {
            (self.t_min_ns, self.t_max_ns)
        } else {
            (0, 0)
        };
        self.slow
            .sort_unstable_by_key(|s| (s.device, s.start_ns, s.end_ns));
        let merge_gap_ns = self.params.merge_gap_ns;
        let gap_ns = |dev: u16| {
            if merge_gap_ns == 0 {
                self.device_threshold_ns(dev).saturating_mul(2)
            } else {
                merge_gap_ns
            }
        };
        // Per-device spikes.
        let mut per_device: BTreeMap<u16, Vec<Spike>> = BTreeMap::new();
        for s in &self.slow {
            let list = per_device.entry(s.device).or_default();
            match list.last_mut() {
                Some(last) if s.start_ns <= last.end_ns.saturating_add(gap_ns(s.device)) => {
                    last.end_ns = last.end_ns.max(s.end_ns);
                    last.height_ns = last.height_ns.max(s.latency_ns);
                    last.slow_ios += 1;
                }
                _ => list.push(Spike {
                    start_ns: s.start_ns,
                    end_ns: s.end_ns,
                    height_ns: s.latency_ns,
                    slow_ios: 1,
                    devices: vec![s.device],
                }),
            }
        }
        let spikes = merge_across_devices(&per_device);
        let periodic = find_periodic(&per_device, &self.params, span_ns);
        SpikeAnalysis {
            threshold_ns: self.threshold_ns,
            device_threshold_ns: self.device_threshold_ns,
            spikes,
            periodic,
            slow_dropped: self.slow_dropped,
            span_ns,
        }
    }
}

fn merge_across_devices(per_device: &BTreeMap<u16, Vec<Spike>>) -> Vec<Spike> {
    let mut all: Vec<Spike> = per_device.values().flatten().cloned().collect();
    all.sort_unstable_by_key(|s| (s.start_ns, s.end_ns));
    let mut out: Vec<Spike> = Vec::with_capacity(all.len());
    for s in all {
        match out.last_mut() {
            Some(last) if s.start_ns <= last.end_ns => {
                last.end_ns = last.end_ns.max(s.end_ns);
                last.height_ns = last.height_ns.max(s.height_ns);
                last.slow_ios += s.slow_ios;
                for d in s.devices {
                    if let Err(i) = last.devices.binary_search(&d) {
                        last.devices.insert(i, d);
                    }
                }
            }
            _ => out.push(s),
        }
    }
    out
}

/// A fitted grid t0 + kP over one device's spikes.
#[derive(Debug, Clone)]
struct Fit {
    period_ns: f64,
    phase_ns: f64,
    matched: Vec<usize>,
    expected: usize,
}

fn find_periodic(
    per_device: &BTreeMap<u16, Vec<Spike>>,
    params: &SpikeParams,
    span_ns: (u64, u64),
) -> Vec<Periodic> {
    let mut fits: Vec<(u16, Fit)> = Vec::new();
    for (&dev, spikes) in per_device {
        // Keep the highest spikes when there are too many to test.
        let mut chosen: Vec<&Spike> = spikes.iter().collect();
        if chosen.len() > params.spikes_per_device_max {
            chosen.sort_unstable_by_key(|s| std::cmp::Reverse(s.height_ns));
            chosen.truncate(params.spikes_per_device_max);
            chosen.sort_unstable_by_key(|s| s.start_ns);
        }
        let starts: Vec<f64> = chosen.iter().map(|s| s.start_ns as f64).collect();
        let mut durations: Vec<u64> = chosen.iter().map(|s| s.duration_ns()).collect();
        durations.sort_unstable();
        let duration_median = durations.get(durations.len() / 2).copied().unwrap_or(0);
        // Big stalls hidden among many small blips: if all spikes show no rhythm, try the
        // major ones alone (at least a tenth of the tallest).
        let mut fit = fit_period(&starts, duration_median as f64, params, span_ns);
        if fit.is_none() {
            let tallest = chosen.iter().map(|s| s.height_ns).max().unwrap_or(0);
            let major: Vec<&Spike> = chosen
                .iter()
                .copied()
                .filter(|s| s.height_ns >= tallest / 10)
                .collect();
            if major.len() < chosen.len() {
                let starts: Vec<f64> = major.iter().map(|s| s.start_ns as f64).collect();
                let mut d: Vec<u64> = major.iter().map(|s| s.duration_ns()).collect();
                d.sort_unstable();
                let dm = d.get(d.len() / 2).copied().unwrap_or(0);
                fit = fit_period(&starts, dm as f64, params, span_ns).map(|f| Fit {
                    // Back to indices into `chosen`.
                    matched: f
                        .matched
                        .iter()
                        .filter_map(|&i| {
                            chosen.iter().position(|c| c.start_ns == major[i].start_ns)
                        })
                        .collect(),
                    ..f
                });
            }
        }
        if let Some(fit) = fit {
            // Map matched indices back to the device's spike list.
            let matched = fit
                .matched
                .iter()
                .filter_map(|&i| spikes.iter().position(|s| s.start_ns == chosen[i].start_ns))
                .collect();
            fits.push((dev, Fit { matched, ..fit }));
        }
    }
    // Group devices with the same period.
    let mut groups: Vec<Vec<(u16, Fit)>> = Vec::new();
    for (dev, fit) in fits {
        match groups.iter_mut().find(|g| {
            let p = g[0].1.period_ns;
            (fit.period_ns - p).abs() <= params.phase_tolerance * p
        }) {
            Some(g) => g.push((dev, fit)),
            None => groups.push(vec![(dev, fit)]),
        }
    }
    let mut out = Vec::new();
    for g in groups {
        let mut durations = Vec::new();
        let mut heights = Vec::new();
        let mut overlapping = 0usize;
        let mut occurrences = 0usize;
        let mut expected = 0usize;
        let mut period_sum = 0.0;
        for (dev, fit) in &g {
            occurrences += fit.matched.len();
            expected += fit.expected;
            period_sum += fit.period_ns * fit.matched.len() as f64;
            for &i in &fit.matched {
                let s = &per_device[dev][i];
                durations.push(s.duration_ns());
                heights.push(s.height_ns);
                let overlaps_other = g.iter().any(|(other, ofit)| {
                    other != dev
                        && ofit.matched.iter().any(|&j| {
                            let o = &per_device[other][j];
                            o.start_ns <= s.end_ns && s.start_ns <= o.end_ns
                        })
                });
                overlapping += usize::from(overlaps_other);
            }
        }
        durations.sort_unstable();
        heights.sort_unstable();
        let phase = g
            .iter()
            .map(|(_, f)| f.phase_ns)
            .fold(f64::INFINITY, f64::min);
        out.push(Periodic {
            period_ns: (period_sum / occurrences as f64).round() as u64,
            phase_ns: phase.max(0.0).round() as u64,
            occurrences,
            expected,
            duration_ns: durations[durations.len() / 2],
            height_ns: heights[heights.len() / 2],
            height_ns_max: *heights.last().unwrap_or(&0),
            devices: g.iter().map(|(d, _)| *d).collect(),
            together: g.len() > 1 && overlapping * 2 > occurrences,
        });
    }
    out.sort_unstable_by_key(|p| std::cmp::Reverse(p.occurrences));
    out
}

/// The best period for sorted spike start times, or None.
fn fit_period(
    starts: &[f64],
    duration_median_ns: f64,
    params: &SpikeParams,
    span_ns: (u64, u64),
) -> Option<Fit> {
    let n = starts.len();
    if n < params.min_occurrences.max(2) {
        return None;
    }
    let (lo, hi) = (span_ns.0 as f64, span_ns.1 as f64);
    let p_max = (hi - lo) / (params.min_occurrences.max(2) - 1) as f64;
    // A period shorter than a few spike durations is one long episode, not a rhythm.
    let p_min = (duration_median_ns * 2.0).max(1.0);
    const NEIGHBOURS: usize = 4;
    let mut candidates: Vec<f64> = Vec::with_capacity(n * NEIGHBOURS);
    for i in 0..n {
        for j in (i + 1)..(i + 1 + NEIGHBOURS).min(n) {
            let d = starts[j] - starts[i];
            if d >= p_min && d <= p_max {
                candidates.push(d);
            }
        }
    }
    candidates.sort_unstable_by(f64::total_cmp);
    candidates.dedup_by(|a, b| (*a - *b).abs() <= *b * params.phase_tolerance * 0.2);
    let mut best: Option<Fit> = None;
    // Chance alignment: a random spike lands inside some grid window with probability
    // 2 x tolerance; with this many candidates tried, demand a tail probability (Bonferroni)
    // below 1e-3 so that a handful of unrelated stalls never reads as a rhythm.
    let p_hit = (2.0 * params.phase_tolerance).min(1.0);
    let alpha = 1e-3 / candidates.len().max(1) as f64;
    for &p in &candidates {
        let Some(fit) = score(starts, p, params, lo, hi) else {
            continue;
        };
        if binomial_tail(n, fit.matched.len(), p_hit) > alpha {
            continue;
        }
        let better = match &best {
            None => true,
            Some(b) => {
                fit.matched.len() > b.matched.len()
                    || (fit.matched.len() == b.matched.len() && fit.period_ns > b.period_ns)
            }
        };
        if better {
            best = Some(fit);
        }
    }
    best
}

/// P(X >= m) for X ~ Binomial(n, p), computed in log space (n is at most a few thousand).
fn binomial_tail(n: usize, m: usize, p: f64) -> f64 {
    if m == 0 {
        return 1.0;
    }
    if m > n {
        return 0.0;
    }
    let (lp, lq) = (p.ln(), (1.0 - p).ln());
    // ln C(n, m)
    let mut ln_c = 0.0;
    for i in 0..m {
        ln_c += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    let mut term = (ln_c + m as f64 * lp + (n - m) as f64 * lq).exp();
    let mut sum = 0.0;
    for k in m..=n {
        sum += term;
        if k < n {
            term *= (n - k) as f64 / (k + 1) as f64 * p / (1.0 - p);
        }
    }
    sum.min(1.0)
}

/// Fit a grid of period ~p: find the densest phase, refine (t0, P) by least squares over the
/// spikes near it, then count matches and grid points.
fn score(starts: &[f64], p: f64, params: &SpikeParams, lo: f64, hi: f64) -> Option<Fit> {
    let tol = params.phase_tolerance;
    let bins = (1.0 / tol).ceil() as usize;
    let mut hist = vec![0u32; bins];
    for &t in starts {
        let ph = ((t - lo) / p).fract();
        hist[((ph * bins as f64) as usize).min(bins - 1)] += 1;
    }
    // Densest window of two adjacent bins (wrapping).
    let (b, _) = (0..bins)
        .map(|b| (b, hist[b] + hist[(b + 1) % bins]))
        .max_by_key(|&(_, c)| c)?;
    let phase0 = ((b + 1) as f64 / bins as f64) * p; // centre of the window, relative to lo
    let mut fit_t0 = lo + phase0;
    let mut fit_p = p;
    let mut matched = Vec::new();
    // Two rounds: match with the coarse grid, refine, match again.
    for _ in 0..2 {
        matched.clear();
        // One spike per grid point: the nearest.
        let mut by_k: BTreeMap<i64, (usize, f64)> = BTreeMap::new();
        for (i, &t) in starts.iter().enumerate() {
            let k = ((t - fit_t0) / fit_p).round();
            let resid = (t - (fit_t0 + k * fit_p)).abs();
            if resid <= tol * fit_p {
                let e = by_k.entry(k as i64).or_insert((i, resid));
                if resid < e.1 {
                    *e = (i, resid);
                }
            }
        }
        let pts: Vec<(f64, f64)> = by_k
            .iter()
            .map(|(&k, &(i, _))| (k as f64, starts[i]))
            .collect();
        matched.extend(by_k.values().map(|&(i, _)| i));
        if pts.len() < 2 {
            return None;
        }
        // Least squares t = t0 + k P.
        let m = pts.len() as f64;
        let (sk, st) = pts.iter().fold((0.0, 0.0), |a, &(k, t)| (a.0 + k, a.1 + t));
        let (mk, mt) = (sk / m, st / m);
        let (mut sxx, mut sxy) = (0.0, 0.0);
        for &(k, t) in &pts {
            sxx += (k - mk) * (k - mk);
            sxy += (k - mk) * (t - mt);
        }
        if sxx > 0.0 {
            fit_p = sxy / sxx;
            fit_t0 = mt - fit_p * mk;
        }
        if !(fit_p.is_finite() && fit_p > 0.0) {
            return None;
        }
    }
    // Move t0 to the first grid point at or after the start of the run.
    let k0 = ((lo - fit_t0) / fit_p).ceil();
    let t_first = fit_t0 + k0 * fit_p;
    let expected = if t_first > hi {
        0
    } else {
        ((hi - t_first) / fit_p).floor() as usize + 1
    };
    let expected = expected.max(1);
    if matched.len() < params.min_occurrences
        || (matched.len() as f64) < params.coverage_min * expected as f64
    {
        return None;
    }
    Some(Fit {
        period_ns: fit_p,
        phase_ns: t_first,
        matched,
        expected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_core::{Rng, SeedableRng};
    use rand_xoshiro::Xoshiro256PlusPlus;

    fn uniform(rng: &mut Xoshiro256PlusPlus, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// A QD1 device with lognormal-ish service times around `base_ns` that stalls for
    /// `stall_ns` every `period_ns` (starting at `phase_ns`); I/Os issued during a stall
    /// complete when it ends, the way a firmware housekeeping stall behaves.
    fn qd1_device(
        rng: &mut Xoshiro256PlusPlus,
        dev: u16,
        run_ns: u64,
        base_ns: u64,
        stalls: &[(u64, u64)],
        out: &mut Vec<(u16, u64, u64)>,
    ) {
        let mut t = 0u64;
        while t < run_ns {
            let jitter = uniform(rng, 0.8, 1.3);
            let mut done = t + (base_ns as f64 * jitter) as u64;
            for &(s, d) in stalls {
                if done > s && t < s + d {
                    done = done.max(s + d) + base_ns;
                }
            }
            out.push((dev, done, done - t));
            t = done;
        }
    }

    fn analyse(records: &[(u16, u64, u64)], params: SpikeParams) -> SpikeAnalysis {
        let mut lats: Vec<u64> = records.iter().map(|r| r.2).collect();
        lats.sort_unstable();
        let mut d = SpikeDetector::new(params, lats[lats.len() / 2]);
        for &(dev, c, l) in records {
            d.push(dev, c, l);
        }
        d.finish()
    }

    #[test]
    fn planted_periodic_stalls_are_found_with_period_and_duration() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        let period = 700_000_000u64; // 0.7 s
        let dur = 30_000_000u64; // 30 ms
        let run = 10_000_000_000u64;
        let mut recs = Vec::new();
        for dev in 0..4u16 {
            // Devices 0..3 stall together; phase 0.25 s.
            let stalls: Vec<(u64, u64)> = (0..)
                .map(|k| 250_000_000 + k * period)
                .take_while(|s| *s < run)
                .map(|s| (s, dur))
                .collect();
            qd1_device(&mut rng, dev, run, 80_000, &stalls, &mut recs);
        }
        // Device 4: quiet.
        qd1_device(&mut rng, 4, run, 80_000, &[], &mut recs);
        let a = analyse(&recs, SpikeParams::default());
        assert_eq!(a.periodic.len(), 1, "{:?}", a.periodic);
        let p = &a.periodic[0];
        let rel = |x: u64, y: u64| (x as f64 - y as f64).abs() / y as f64;
        assert!(rel(p.period_ns, period) < 0.05, "period {}", p.period_ns);
        assert!(rel(p.duration_ns, dur) < 0.05, "duration {}", p.duration_ns);
        assert!(p.height_ns >= dur, "height {}", p.height_ns);
        assert_eq!(p.devices, [0, 1, 2, 3]);
        assert!(p.together);
        assert_eq!(p.occurrences, 4 * 14);
        // Every reported spike is one of the stalls and names the four devices.
        assert_eq!(a.spikes.len(), 14);
        assert!(a.spikes.iter().all(|s| s.devices == [0, 1, 2, 3]));
    }

    #[test]
    fn independent_devices_with_different_periods_and_noise() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(11);
        let run = 8_000_000_000u64;
        let mut recs = Vec::new();
        let p0 = 500_000_000u64;
        let p1 = 1_300_000_000u64;
        let mk = |phase: u64, p: u64, d: u64| -> Vec<(u64, u64)> {
            (0..)
                .map(|k| phase + k * p)
                .take_while(|s| *s < run)
                .map(|s| (s, d))
                .collect()
        };
        // Device 0: every 0.5 s for 10 ms, plus three random stalls that are not periodic.
        let mut s0 = mk(100_000_000, p0, 10_000_000);
        s0.extend([
            (1_234_000_000, 5_000_000),
            (4_321_000_000, 8_000_000),
            (6_050_000_000, 3_000_000),
        ]);
        qd1_device(&mut rng, 0, run, 50_000, &s0, &mut recs);
        // Device 1: every 1.3 s for 40 ms.
        qd1_device(
            &mut rng,
            1,
            run,
            50_000,
            &mk(700_000_000, p1, 40_000_000),
            &mut recs,
        );
        let a = analyse(&recs, SpikeParams::default());
        assert_eq!(a.periodic.len(), 2, "{:?}", a.periodic);
        let by_dev = |d: u16| a.periodic.iter().find(|p| p.devices == [d]).unwrap();
        let rel = |x: u64, y: u64| (x as f64 - y as f64).abs() / y as f64;
        assert!(rel(by_dev(0).period_ns, p0) < 0.05);
        assert!(rel(by_dev(0).duration_ns, 10_000_000) < 0.05);
        assert!(rel(by_dev(1).period_ns, p1) < 0.05);
        assert!(rel(by_dev(1).duration_ns, 40_000_000) < 0.05);
        assert!(!by_dev(0).together);
    }

    #[test]
    fn no_spikes_no_finding() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
        let mut recs = Vec::new();
        for dev in 0..8 {
            qd1_device(&mut rng, dev, 3_000_000_000, 90_000, &[], &mut recs);
        }
        assert!(recs.len() > 200_000);
        let a = analyse(&recs, SpikeParams::default());
        assert!(
            a.spikes.is_empty(),
            "{:?}",
            &a.spikes[..a.spikes.len().min(5)]
        );
        assert!(a.periodic.is_empty());
    }

    #[test]
    fn random_stalls_are_spikes_but_not_periodic() {
        for seed in 0..30 {
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
            let run = 10_000_000_000u64;
            let n = 5 + seed as usize * 2;
            let stalls: Vec<(u64, u64)> = (0..n)
                .map(|_| {
                    let s = uniform(&mut rng, 0.0, run as f64) as u64;
                    (s, uniform(&mut rng, 1e6, 2e7) as u64)
                })
                .collect();
            let mut recs = Vec::new();
            qd1_device(&mut rng, 0, run, 60_000, &stalls, &mut recs);
            let a = analyse(&recs, SpikeParams::default());
            assert!(a.spikes.len() >= n * 3 / 4, "{}", a.spikes.len());
            assert!(a.periodic.is_empty(), "seed {seed}: {:?}", a.periodic);
        }
    }

    #[test]
    fn big_periodic_stalls_among_many_small_random_blips() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(21);
        let run = 10_000_000_000u64;
        // 300 random 1-2 ms blips, plus a 200 ms stall every 2 s.
        let mut stalls: Vec<(u64, u64)> = (0..300)
            .map(|_| {
                let s = uniform(&mut rng, 0.0, run as f64) as u64;
                (s, uniform(&mut rng, 1e6, 2e6) as u64)
            })
            .collect();
        stalls.extend((0..5).map(|k| (500_000_000 + k * 2_000_000_000, 200_000_000)));
        let mut recs = Vec::new();
        qd1_device(&mut rng, 0, run, 60_000, &stalls, &mut recs);
        let a = analyse(&recs, SpikeParams::default());
        assert_eq!(a.periodic.len(), 1, "{:?}", a.periodic);
        let p = &a.periodic[0];
        assert!(
            (p.period_ns as f64 - 2e9).abs() / 2e9 < 0.05,
            "{}",
            p.period_ns
        );
        assert!(
            (p.duration_ns as f64 - 2e8).abs() / 2e8 < 0.05,
            "{}",
            p.duration_ns
        );
    }

    #[test]
    fn interval_maxima_work_too() {
        // 100 ms intervals; every 2 s one interval holds a 50 ms stall.
        let mut d = SpikeDetector::new(SpikeParams::default(), 100_000);
        for i in 0..200u64 {
            let start = i * 100_000_000;
            let max = if i % 20 == 7 { 50_000_000 } else { 400_000 };
            d.push_interval(0, start, start + 100_000_000, max);
        }
        let a = d.finish();
        assert_eq!(a.spikes.len(), 10);
        assert_eq!(a.periodic.len(), 1);
        assert_eq!(a.periodic[0].period_ns, 2_000_000_000);
    }

    #[test]
    fn binomial_tail_matches_exact_values() {
        // P(X >= 2), X ~ Bin(3, 0.5) = 4/8.
        assert!((binomial_tail(3, 2, 0.5) - 0.5).abs() < 1e-12);
        assert!((binomial_tail(10, 0, 0.1) - 1.0).abs() < 1e-12);
        assert!((binomial_tail(10, 10, 0.1) - 1e-10).abs() < 1e-20);
        assert_eq!(binomial_tail(3, 4, 0.5), 0.0);
    }

    #[test]
    fn bounded_memory() {
        let params = SpikeParams {
            slow_max: 10,
            ..SpikeParams::default()
        };
        let mut d = SpikeDetector::new(params, 1_000);
        for i in 0..100u64 {
            d.push(0, i * 1_000_000, 1_000_000);
        }
        let a = d.finish();
        assert_eq!(a.slow_dropped, 90);
    }
}
