//! The report of one run: figures, tables and a short summary, assembled into one HTML page.
//!
//! Data flow: the binary reads the run JSON ([`Report`]), and when the run wrote them, the
//! per-I/O log (two passes through [`LatPass1`] and [`LatPass2`], so memory stays bounded
//! however long the log) and the interval histograms ([`crate::intervals`]). Everything here is
//! sans-IO: plain data in, [`Figure`]s, text and HTML out.

use crate::axis::log_range;
use hdrhistogram::Histogram;
use nines_core::latlog::LatRecord;
use nines_core::op::Op;
use nines_core::report::{DeviceReport, DirectionStats, PercentileSpread, Report};
use nines_core::units::percentile_key;

use crate::axis::{
    Axis, LabelFormat, format_bytes_per_s, format_ns, format_percentile, format_plain, nines_max_x,
    nines_x,
};
use crate::decimate::{Decimated, TimeDecimator};
use crate::html::{Figure, Page, flatten_json};
use crate::intervals::IntervalSeries;
use crate::plot::{Band, Plot, PlotError, Series, SeriesStyle, Span, palette};
use crate::spikes::{SpikeAnalysis, SpikeDetector, SpikeParams};

/// Pixel columns of the latency-over-time figure.
pub const TIME_COLUMNS: usize = 900;
/// Individually kept I/Os in the latency-over-time figure.
pub const OUTLIERS_MAX: usize = 20_000;
/// Devices drawn with their own colour (and legend) before they are lumped together.
pub const DEVICES_COLOURED_MAX: usize = 12;

/// First pass over a per-I/O log: the latency distribution and the time span.
pub struct LatPass1 {
    hist: Histogram<u64>,
    /// Per device (index = device, up to [`DEVICES_TRACKED_MAX`]): a coarse histogram (2
    /// significant digits) for the device's own median and p99.99.
    device_hists: Vec<Option<Histogram<u64>>>,
    t_min_ns: u64,
    t_max_ns: u64,
}

/// Devices whose own latency distribution is tracked (the rest are judged against the run's).
pub const DEVICES_TRACKED_MAX: usize = 1024;

#[derive(Debug, Clone, PartialEq)]
pub struct LatPass1Summary {
    pub ios: u64,
    pub median_ns: u64,
    pub p9999_ns: u64,
    /// Per device (index = device): its median and p99.99, 0 when it logged nothing.
    pub device_median_ns: Vec<u64>,
    pub device_p9999_ns: Vec<u64>,
    pub t_min_ns: u64,
    pub t_max_ns: u64,
}

impl Default for LatPass1 {
    fn default() -> Self {
        Self::new()
    }
}

impl LatPass1 {
    pub fn new() -> LatPass1 {
        LatPass1 {
            hist: nines_core::stats::new_latency_histogram(),
            device_hists: Vec::new(),
            t_min_ns: u64::MAX,
            t_max_ns: 0,
        }
    }

    #[inline]
    pub fn push(&mut self, r: &LatRecord) {
        let v = r
            .latency_ns
            .clamp(1, nines_core::stats::LATENCY_NS_MAX_TRACKABLE);
        self.hist.saturating_record(v);
        let d = usize::from(r.device);
        if d < DEVICES_TRACKED_MAX {
            if self.device_hists.len() <= d {
                self.device_hists.resize_with(d + 1, || None);
            }
            self.device_hists[d]
                .get_or_insert_with(|| {
                    Histogram::new_with_bounds(1, nines_core::stats::LATENCY_NS_MAX_TRACKABLE, 2)
                        .expect("valid histogram bounds")
                })
                .saturating_record(v);
        }
        self.t_min_ns = self.t_min_ns.min(r.completion_ns);
        self.t_max_ns = self.t_max_ns.max(r.completion_ns);
    }

    pub fn finish(&self) -> LatPass1Summary {
        let empty = self.hist.is_empty();
        let per_device = |q: f64| -> Vec<u64> {
            self.device_hists
                .iter()
                // The bucket's lowest value, so that the I/O at the quantile itself counts.
                .map(|h| {
                    h.as_ref()
                        .map_or(0, |h| h.lowest_equivalent(h.value_at_quantile(q)).max(1))
                })
                .collect()
        };
        LatPass1Summary {
            device_median_ns: per_device(0.5),
            device_p9999_ns: per_device(0.9999),
            ios: self.hist.len(),
            median_ns: if empty {
                0
            } else {
                self.hist.value_at_quantile(0.5)
            },
            p9999_ns: if empty {
                0
            } else {
                self.hist.value_at_quantile(0.9999)
            },
            t_min_ns: if empty { 0 } else { self.t_min_ns },
            t_max_ns: self.t_max_ns,
        }
    }
}

/// Second pass: decimation for the picture and spike detection.
pub struct LatPass2 {
    dec: TimeDecimator,
    det: SpikeDetector,
    device_median_ns: Vec<u64>,
}

/// What the per-I/O log contributes to a report.
#[derive(Debug, Clone, PartialEq)]
pub struct LatView {
    pub devices: Vec<String>,
    pub decimated: Decimated,
    pub spikes: SpikeAnalysis,
    pub median_ns: u64,
    /// Per device (index = device): its median latency, 0 when it logged nothing.
    pub device_median_ns: Vec<u64>,
}

impl LatPass2 {
    pub fn new(p1: &LatPass1Summary, params: SpikeParams) -> LatPass2 {
        // Slowness is judged per device, against its own median: a device that is steadily
        // slower than the others is an outlier device, not one spike as long as the run.
        let det = if p1.device_median_ns.is_empty() {
            SpikeDetector::new(params, p1.median_ns)
        } else {
            SpikeDetector::per_device(params, &p1.device_median_ns)
        };
        let outlier_ns = p1.p9999_ns.min(det.threshold_ns()).max(1);
        let device_outlier_ns: Vec<u64> = p1
            .device_p9999_ns
            .iter()
            .enumerate()
            .map(|(d, &p)| {
                let t = det.device_threshold_ns(d as u16);
                if p == 0 { t } else { p.min(t) }
            })
            .collect();
        LatPass2 {
            dec: TimeDecimator::new(
                p1.t_min_ns,
                p1.t_max_ns + 1,
                TIME_COLUMNS,
                outlier_ns,
                OUTLIERS_MAX,
            )
            .with_device_thresholds(device_outlier_ns),
            det,
            device_median_ns: p1.device_median_ns.clone(),
        }
    }

    #[inline]
    pub fn push(&mut self, r: &LatRecord) {
        self.dec.push(r.completion_ns, r.latency_ns, r.device);
        self.det.push(r.device, r.completion_ns, r.latency_ns);
    }

    pub fn finish(self, devices: Vec<String>, median_ns: u64) -> LatView {
        LatView {
            devices,
            decimated: self.dec.finish(),
            spikes: self.det.finish(),
            median_ns,
            device_median_ns: self.device_median_ns,
        }
    }
}

/// Spike detection from interval histograms, for runs with `--hdr-log` but no per-I/O log.
/// Devices are numbered in the order of `names` (a tag's device not among them is skipped).
pub fn spikes_from_intervals(
    series: &[IntervalSeries],
    names: &[String],
    params: SpikeParams,
) -> Option<SpikeAnalysis> {
    let mut p50s: Vec<u64> = series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|p| p.ios > 0)
        .map(|p| p.p50_ns)
        .collect();
    if p50s.is_empty() {
        return None;
    }
    p50s.sort_unstable();
    // Each device against its own typical interval median (the median of its p50s).
    let mut device_median_ns = vec![0u64; names.len()];
    for (d, m) in device_median_ns.iter_mut().enumerate() {
        let mut v: Vec<u64> = series
            .iter()
            .filter(|s| device_index(names, &s.device) == Some(d as u16))
            .flat_map(|s| s.points.iter())
            .filter(|p| p.ios > 0)
            .map(|p| p.p50_ns)
            .collect();
        if !v.is_empty() {
            v.sort_unstable();
            *m = v[v.len() / 2];
        }
    }
    let mut det = if device_median_ns.iter().any(|&m| m > 0) {
        SpikeDetector::per_device(params, &device_median_ns)
    } else {
        SpikeDetector::new(params, p50s[p50s.len() / 2])
    };
    for s in series {
        let Some(dev) = device_index(names, &s.device) else {
            continue;
        };
        for p in s.points.iter().filter(|p| p.ios > 0) {
            let start = (p.start_s * 1e9) as u64;
            det.push_interval(dev, start, start + (p.duration_s * 1e9) as u64, p.max_ns);
        }
    }
    Some(det.finish())
}

/// A tag's device name (commas and whitespace were replaced by `_` when written) to its index.
fn device_index(names: &[String], tag_device: &str) -> Option<u16> {
    names
        .iter()
        .position(|n| nines_core::stats::hdr_tag_device(n) == tag_device)
        .map(|i| i as u16)
}

/// The percentiles of a report that can go on the nines axis (below 100), ascending.
fn plotted_percentiles(report: &Report) -> Vec<f64> {
    let mut p: Vec<f64> = report
        .config
        .percentiles
        .iter()
        .copied()
        .filter(|p| *p > 0.0 && *p < 100.0)
        .collect();
    p.sort_by(f64::total_cmp);
    p.dedup();
    p
}

/// One device's curve: (nines x, latency) for each percentile, then max.
pub fn device_curve(d: &DeviceReport, op: Op, percentiles: &[f64]) -> Vec<(f64, f64)> {
    let s = &d.dir(op).lat_ns;
    let mut pts: Vec<(f64, f64)> = percentiles
        .iter()
        .filter_map(|&p| Some((nines_x(p), s.percentiles.get(&percentile_key(p))? as f64)))
        .collect();
    if let Some(&p_max) = percentiles.last() {
        pts.push((nines_max_x(p_max), s.max_ns as f64));
    }
    pts
}

/// One device's curve as drawn: only the percentiles its I/Os resolve (the ones the tables do
/// not mark n/r), then max; when any were left out, a break (a NaN point) before max, so the
/// line does not run through percentiles the sample cannot tell apart from the max.
pub fn resolved_curve(d: &DeviceReport, op: Op, percentiles: &[f64]) -> Vec<(f64, f64)> {
    let ios = d.dir(op).ios;
    let kept: Vec<f64> = percentiles
        .iter()
        .copied()
        .filter(|&p| resolves(ios, p))
        .collect();
    let mut pts = device_curve(d, op, &kept);
    // device_curve put max after the last kept percentile; it belongs after the last one.
    let max = pts.pop();
    if let (Some(max), Some(&p_max)) = (max, percentiles.last()) {
        let x = nines_max_x(p_max);
        if kept.len() < percentiles.len() {
            pts.push((x, f64::NAN));
        }
        pts.push((x, max.1));
    }
    pts
}

/// The percentiles (of `percentiles`) that every device active in `op` resolves: the ones a
/// statistic across devices can be drawn at.
pub fn resolved_by_all(report: &Report, op: Op, percentiles: &[f64]) -> Vec<f64> {
    let fewest = report
        .devices
        .iter()
        .map(|d| d.dir(op).ios)
        .filter(|&n| n > 0)
        .min()
        .unwrap_or(0);
    percentiles
        .iter()
        .copied()
        .filter(|&p| resolves(fewest, p))
        .collect()
}

/// Devices that stand out: at some percentile (or max) at least `factor` x the median device.
/// Returns (device index, worst ratio, where), worst first, at most `limit`.
pub fn outlying_devices(
    report: &Report,
    op: Op,
    factor: f64,
    limit: usize,
) -> Vec<(usize, f64, String)> {
    // Only percentiles every device resolves: an unresolved one is a device's max by another
    // name, and would rank devices by their maxima twice.
    let percentiles = resolved_by_all(report, op, &plotted_percentiles(report));
    let active: Vec<(usize, Vec<(f64, f64)>)> = report
        .devices
        .iter()
        .enumerate()
        .filter(|(_, d)| d.dir(op).ios > 0)
        .map(|(i, d)| (i, device_curve(d, op, &percentiles)))
        .collect();
    if active.len() < 3 {
        return Vec::new();
    }
    let n_points = active.iter().map(|(_, c)| c.len()).min().unwrap_or(0);
    let mut medians = Vec::with_capacity(n_points);
    for k in 0..n_points {
        let mut v: Vec<f64> = active.iter().map(|(_, c)| c[k].1).collect();
        v.sort_by(f64::total_cmp);
        medians.push(v[v.len() / 2]);
    }
    let labels: Vec<String> = percentiles
        .iter()
        .map(|p| format!("p{}", format_percentile(*p)))
        .chain(std::iter::once("max".to_string()))
        .collect();
    let mut out: Vec<(usize, f64, String)> = active
        .iter()
        .filter_map(|(i, c)| {
            let (k, ratio) = (0..n_points)
                .map(|k| (k, c[k].1 / medians[k].max(1.0)))
                .max_by(|a, b| a.1.total_cmp(&b.1))?;
            (ratio >= factor).then(|| (*i, ratio, labels[k].clone()))
        })
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out.truncate(limit);
    out
}

/// Groups of curves (indices) that coincide: every point within `tol` (relative) of the
/// group's first curve. Groups keep the order of their first member.
pub fn same_curves(curves: &[Vec<(f64, f64)>], tol: f64) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (k, c) in curves.iter().enumerate() {
        let same = |g: &Vec<usize>| {
            let r = &curves[g[0]];
            r.len() == c.len()
                && r.iter().zip(c).all(|(a, b)| {
                    a.0 == b.0
                        && ((a.1.is_nan() && b.1.is_nan())
                            || (a.1 - b.1).abs() <= tol * a.1.abs().max(b.1.abs()))
                })
        };
        match groups.iter_mut().find(|g| same(g)) {
            Some(g) => g.push(k),
            None => groups.push(vec![k]),
        }
    }
    groups
}

/// Figure: latency percentile curves, one line per device (or per group of devices with the
/// same curve), outlying devices named.
pub fn percentile_figure(report: &Report, op: Op) -> Option<Figure> {
    let percentiles = plotted_percentiles(report);
    let (&p_lo, &p_hi) = (percentiles.first()?, percentiles.last()?);
    let devices: Vec<(usize, &DeviceReport)> = report
        .devices
        .iter()
        .enumerate()
        .filter(|(_, d)| d.dir(op).ios > 0)
        .collect();
    if devices.is_empty() {
        return None;
    }
    let curves: Vec<Vec<(f64, f64)>> = devices
        .iter()
        .map(|(_, d)| resolved_curve(d, op, &percentiles))
        .collect();
    let cut = curves.iter().any(|c| c.iter().any(|p| p.1.is_nan()));
    let (lo, hi) = log_range(curves.iter().flatten().map(|p| p.1));
    let mut plot = Plot::new(
        format!("{} latency by percentile, per device", op.name()),
        Axis::nines("percentile", p_lo, p_hi, true),
        Axis::log("latency", lo, hi, LabelFormat::Nanoseconds),
    );
    let outliers = outlying_devices(report, op, 1.5, 5);
    // Devices whose curves coincide (within 1% at every point: less than a pixel on the log
    // axis) are one line, named for all of them; drawn apart, the last would hide the others.
    let groups = same_curves(&curves, 0.01);
    plot.legend = groups.len() <= DEVICES_COLOURED_MAX;
    for g in &groups {
        let (i, d) = devices[g[0]];
        let names: Vec<&str> = g.iter().map(|&k| devices[k].1.name.as_str()).collect();
        let label = match names.len() {
            1 => d.name.clone(),
            2 | 3 => names.join(", "),
            n => format!("{} … {} ({n} devices)", names[0], names[n - 1]),
        };
        let mut s = Series::new(label, SeriesStyle::LinePoints, palette(i));
        s.points = curves[g[0]].clone();
        if let Some(&k) = g
            .iter()
            .find(|&&k| outliers.iter().any(|o| o.0 == devices[k].0))
        {
            s.end_label = Some(devices[k].1.name.clone());
            s.bold = true;
        }
        plot.series.push(s);
    }
    let mut caption = format!(
        "Latency at each percentile (x on a nines scale: each step is ten times rarer) for {}.",
        if report.devices.iter().any(|d| d.volume.is_some()) {
            count(devices.len(), "volume", "volumes")
        } else {
            count(devices.len(), "device", "devices")
        }
    );
    if cut {
        caption.push_str(&format!(
            " A line stops at the highest percentile its device's I/Os resolve ({} in the tables) and its max stands alone.",
            crate::html::UNRESOLVED
        ));
    }
    let shared = groups.iter().filter(|g| g.len() > 1).count();
    if shared > 0 {
        caption.push_str(&format!(
            " Devices with the same curve (within 1%) are one line named for all of them ({}).",
            count(shared, "such line", "such lines")
        ));
    }
    if !outliers.is_empty() {
        let named: Vec<String> = outliers
            .iter()
            .map(|(i, r, at)| {
                format!(
                    "{} ({r:.1}x the median device at {at})",
                    report.devices[*i].name
                )
            })
            .collect();
        caption.push_str(&format!(" Outlying: {}.", named.join(", ")));
    }
    Some(Figure {
        id: format!("percentiles-{}", op.name()),
        caption,
        plot,
    })
}

/// The per-percentile spread of a direction and the devices it is over, when at least two
/// devices did I/O in that direction (a spread over one device says nothing).
fn spread_over_devices(report: &Report, op: Op) -> Option<SpreadOver<'_>> {
    let all = report.aggregate.across_devices.dir(op);
    let active: Vec<&DeviceReport> = report
        .devices
        .iter()
        .filter(|d| d.dir(op).ios > 0)
        .collect();
    if all.is_empty() || active.len() < 2 {
        return None;
    }
    let plotted: Vec<f64> = all
        .iter()
        .filter_map(|s| s.percentile.parse::<f64>().ok())
        .filter(|p| *p > 0.0 && *p < 100.0)
        .collect();
    let p_lo = plotted.iter().copied().fold(f64::INFINITY, f64::min);
    let p_hi = plotted.iter().copied().fold(0.0, f64::max);
    if plotted.is_empty() {
        return None;
    }
    // Only the percentiles every device resolves: at the others some devices' values are
    // only their maxima (n/r in the tables).
    let fewest = active.iter().map(|d| d.dir(op).ios).min().unwrap_or(0);
    let rows: Vec<(f64, &PercentileSpread)> = all
        .iter()
        .filter_map(|s| Some((s.percentile.parse::<f64>().ok()?, s)))
        .filter(|(p, _)| *p > 0.0 && *p < 100.0 && resolves(fewest, *p))
        .collect();
    let cut = rows.len() < plotted.len();
    Some(SpreadOver {
        rows,
        active,
        p_lo,
        p_hi,
        cut,
    })
}

/// A direction's spread across devices, as the figures draw it.
struct SpreadOver<'a> {
    /// (percentile, spread) for each percentile every device resolves.
    rows: Vec<(f64, &'a PercentileSpread)>,
    active: Vec<&'a DeviceReport>,
    /// The range of the configured percentiles (the axis), resolved or not.
    p_lo: f64,
    p_hi: f64,
    /// Whether some percentiles were left out as unresolved.
    cut: bool,
}

/// The sentence figures across devices add when they left unresolved percentiles out.
fn cut_sentence(fewest: u64) -> String {
    format!(
        " Percentiles that the device with the fewest I/Os ({}) cannot resolve ({} in the tables) are left out; max stands alone.",
        format_plain(fewest as f64),
        crate::html::UNRESOLVED
    )
}

/// Figure: mean and standard deviation of each percentile across devices (paper 000, Fig. 12).
pub fn spread_figure(report: &Report, op: Op) -> Option<Figure> {
    let sp = spread_over_devices(report, op)?;
    let active = &sp.active;
    let mut rows: Vec<(f64, f64, f64, f64, f64)> = sp
        .rows
        .iter()
        .map(|&(p, s)| (p, s.mean_ns, s.stddev_ns, s.min_ns as f64, s.max_ns as f64))
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (p_lo, p_hi) = (sp.p_lo, sp.p_hi);
    // "max" across devices, computed from the devices' maxima.
    let maxes: Vec<f64> = active
        .iter()
        .map(|d| d.dir(op).lat_ns.max_ns as f64)
        .collect();
    let (m_mean, m_sd) = mean_sd(&maxes);
    let m_min = maxes.iter().copied().fold(f64::INFINITY, f64::min);
    let m_max = maxes.iter().copied().fold(0.0, f64::max);
    let mut pts: Vec<(f64, f64, f64, f64, f64)> = rows
        .iter()
        .map(|r| (nines_x(r.0), r.1, r.2, r.3, r.4))
        .collect();
    let x_max = nines_max_x(p_hi);
    if sp.cut {
        // Nothing drawn between the last resolved percentile and max.
        pts.push((x_max, f64::NAN, f64::NAN, f64::NAN, f64::NAN));
    }
    pts.push((x_max, m_mean, m_sd, m_min, m_max));
    let (lo, hi) = log_range(pts.iter().flat_map(|r| [r.3, r.4, r.1]));
    let mut plot = Plot::new(
        format!(
            "{} latency across {} devices: mean ± stddev",
            op.name(),
            active.len()
        ),
        Axis::nines("percentile", p_lo, p_hi, true),
        Axis::log("latency", lo, hi, LabelFormat::Nanoseconds),
    );
    plot.bands.push(Band {
        name: "mean ± stddev".into(),
        color: palette(0),
        points: pts
            .iter()
            .map(|r| (r.0, (r.1 - r.2).max(r.3).max(1.0), r.1 + r.2))
            .collect(),
    });
    let mut mean = Series::new("mean", SeriesStyle::LinePoints, palette(0));
    mean.bold = true;
    mean.points = pts.iter().map(|r| (r.0, r.1)).collect();
    let mut min = Series::new("fastest device", SeriesStyle::Line, palette(2));
    min.points = pts.iter().map(|r| (r.0, r.3)).collect();
    let mut max = Series::new("slowest device", SeriesStyle::Line, palette(3));
    max.points = pts.iter().map(|r| (r.0, r.4)).collect();
    plot.series.extend([mean, min, max]);

    let mut caption = String::from(
        "Mean of each percentile over the devices, the band one standard deviation either side, \
         and the fastest and slowest device at that percentile.",
    );
    if sp.cut {
        caption.push_str(&cut_sentence(
            active.iter().map(|d| d.dir(op).ios).min().unwrap_or(0),
        ));
    }
    Some(Figure {
        id: format!("spread-{}", op.name()),
        caption,
        plot,
    })
}

/// Figure: the standard deviation across devices of each percentile (Fig. 12, right).
pub fn stddev_figure(report: &Report, op: Op) -> Option<Figure> {
    let sp = spread_over_devices(report, op)?;
    let active = &sp.active;
    let mut rows: Vec<(f64, f64)> = sp.rows.iter().map(|&(p, s)| (p, s.stddev_ns)).collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (p_lo, p_hi) = (sp.p_lo, sp.p_hi);
    let maxes: Vec<f64> = active
        .iter()
        .map(|d| d.dir(op).lat_ns.max_ns as f64)
        .collect();
    let mut pts: Vec<(f64, f64)> = rows.iter().map(|r| (nines_x(r.0), r.1)).collect();
    // All devices equal everywhere: a deviation of zero has nothing to draw on a log scale.
    if pts.iter().all(|p| p.1 <= 0.0) && mean_sd(&maxes).1 <= 0.0 {
        return None;
    }
    if sp.cut {
        pts.push((nines_max_x(p_hi), f64::NAN));
    }
    pts.push((nines_max_x(p_hi), mean_sd(&maxes).1));
    let (lo, hi) = log_range(pts.iter().map(|p| p.1));
    let mut plot = Plot::new(
        format!("{} latency: standard deviation across devices", op.name()),
        Axis::nines("percentile", p_lo, p_hi, true),
        Axis::log("stddev", lo, hi, LabelFormat::Nanoseconds),
    );
    let mut s = Series::new("stddev", SeriesStyle::LinePoints, palette(4));
    s.points = pts;
    plot.series.push(s);
    plot.legend = false;
    Some(Figure {
        id: format!("stddev-{}", op.name()),
        caption: format!(
            "How far the devices disagree at each percentile (a deviation of zero, all devices \
             equal, cannot be drawn on the log scale and is left out).{}",
            if sp.cut {
                cut_sentence(active.iter().map(|d| d.dir(op).ios).min().unwrap_or(0))
            } else {
                String::new()
            }
        ),
        plot,
    })
}

/// Figure: latency of every I/O over time (decimated), detected spikes shaded.
///
/// Nothing is drawn across a gap (a stretch without completions that the run's rate says was
/// no accident, [`crate::decimate::Decimated::stretches`]): a stall is a hole in the band and
/// the lines, and its I/Os are the points where it ends, not a ramp. p50 and p99 pool, per
/// window of columns, the I/Os of every device that completed any there, each window holding
/// ten times the I/Os that resolve the percentile (so p99 is never a column's max under another
/// name, and a stalled device adds nothing rather than pulling the line down). The lines are
/// drawn over the points.
pub fn time_figure(view: &LatView) -> Option<Figure> {
    let d = &view.decimated;
    if d.columns.is_empty() {
        return None;
    }
    // The axis spans the columns, first completion to last: the whole measured run.
    let t_lo = secs(d.t_start_ns);
    let t_hi = secs(d.t_end_ns);
    let t_lo = if t_lo < 0.05 * (t_hi - t_lo) {
        0.0
    } else {
        t_lo
    };
    let (lo, hi) = log_range(
        d.columns
            .iter()
            .flat_map(|c| [c.min_ns as f64, c.max_ns as f64])
            .chain(d.outliers.iter().map(|o| o.latency_ns as f64)),
    );
    // The legend is under the figure, so the y axis needs no headroom: the decade above the max.
    let mut plot = Plot::new(
        "latency of every I/O over time",
        Axis::linear_to_end("time since start", t_lo, t_hi, LabelFormat::Seconds),
        Axis::log("latency", lo, hi, LabelFormat::Nanoseconds),
    );
    plot.bands.push(time_band(d));
    plot.series.extend(outlier_series(view));
    // The percentile lines last, over the points, so that no point hides p99.
    let (lines, missing) = percentile_lines(d);
    plot.series.extend(lines);
    plot.legend = plot.series.len() <= DEVICES_COLOURED_MAX + 2;
    let major = major_spikes(&view.spikes);
    let shaded_s: f64 = major
        .iter()
        .map(|sp| secs(sp.end_ns.saturating_sub(sp.start_ns)))
        .sum();
    // Shading most of the run says nothing about where the spikes are.
    let shade = shaded_s <= 0.5 * (t_hi - t_lo);
    if shade {
        for sp in &major {
            plot.spans.push(Span {
                x_start: secs(sp.start_ns),
                x_end: secs(sp.end_ns),
                color: [214, 39, 40],
            });
        }
    }
    let mut caption = time_caption(d, &missing);
    if !major.is_empty() {
        caption.push_str(&shading_caption(view, major.len(), shade, shaded_s));
    }
    Some(Figure {
        id: "latency-over-time".into(),
        caption,
        plot,
    })
}

/// Nanoseconds as the time axis's seconds.
fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The min..max band of the latency-over-time figure, broken (NaN) at each gap.
fn time_band(d: &Decimated) -> Band {
    let gap = f64::NAN;
    let mut band = Band {
        name: "min..max per column".into(),
        color: palette(7),
        points: Vec::with_capacity(d.columns.len() + d.stretches.len()),
    };
    for (k, r) in d.stretches.iter().enumerate() {
        if k > 0 {
            band.points.push((secs(d.columns[r.start].t_ns), gap, gap));
        }
        band.points.extend(
            d.columns[r.clone()]
                .iter()
                .map(|c| (secs(c.t_ns), c.min_ns as f64, c.max_ns as f64)),
        );
    }
    assert!(band.points.len() <= band.points.capacity());
    band
}

/// The outlier points of the latency-over-time figure: one series per device while few
/// devices, else one; densest first.
fn outlier_series(view: &LatView) -> Vec<Series> {
    let d = &view.decimated;
    // Outliers: one colour per device while few devices, else one series. Device colours are
    // none of the colours that already mean something here (p50, p99, the band, the shading),
    // so one colour never has two meanings.
    const POINT_COLOURS: [usize; 6] = [2, 4, 5, 6, 8, 9];
    let coloured = view.devices.len() <= POINT_COLOURS.len();
    let mut by_dev: std::collections::BTreeMap<u16, Series> = Default::default();
    for o in &d.outliers {
        let key = if coloured { o.device } else { 0 };
        let series = by_dev.entry(key).or_insert_with(|| {
            let name = if coloured {
                let dev = view
                    .devices
                    .get(usize::from(o.device))
                    .cloned()
                    .unwrap_or_else(|| format!("device {}", o.device));
                let t = d
                    .device_threshold_ns
                    .get(usize::from(o.device))
                    .copied()
                    .unwrap_or(d.outlier_threshold_ns);
                format!("{dev} ≥ {}", format_ns(t as f64))
            } else {
                format!("I/Os ≥ {}", format_ns(d.outlier_threshold_ns as f64))
            };
            Series::new(
                name,
                SeriesStyle::Points,
                palette(POINT_COLOURS[usize::from(key) % POINT_COLOURS.len()]),
            )
        });
        series
            .points
            .push((secs(o.completion_ns), o.latency_ns as f64));
    }
    // Densest first, so that a steadily slow device's many points lie under the few points of
    // the others instead of hiding them.
    let mut point_series: Vec<Series> = by_dev.into_values().collect();
    point_series.sort_by_key(|s| std::cmp::Reverse(s.points.len()));
    assert_eq!(
        point_series.iter().map(|s| s.points.len()).sum::<usize>(),
        d.outliers.len(),
        "every outlier is one point"
    );
    point_series
}

/// The p50 and p99 lines (broken at gaps), and a note for each that no stretch could hold.
fn percentile_lines(d: &Decimated) -> (Vec<Series>, Vec<String>) {
    let gap = f64::NAN;
    let mut lines = Vec::new();
    let mut missing = Vec::new();
    for (line, color) in d.lines.iter().zip([palette(0), palette(1)]) {
        let name = format!("p{}", format_percentile(line.percentile));
        let mut series = Series::new(name.clone(), SeriesStyle::Line, color);
        series.bold = true;
        for (k, st) in line.stretches.iter().enumerate() {
            if k > 0 && !series.points.is_empty() {
                series
                    .points
                    .push((series.points.last().map_or(0.0, |p| p.0), gap));
            }
            // A window of a column or two is a point at its middle; a wider one a step, its
            // value held from its start to its end.
            for &(a, b, v) in st {
                let v = v as f64;
                if (b - a) as f64 <= 2.0 * d.column_ns + 1.0 {
                    series.points.push((secs(a / 2 + b / 2), v));
                } else {
                    series.points.extend([(secs(a), v), (secs(b), v)]);
                }
            }
        }
        if line.stretches.iter().any(|st| !st.is_empty()) {
            lines.push(series);
        } else {
            missing.push(format!(
                "no {name} line: no stretch between gaps held {} I/Os",
                format_plain(line.window_ios_min as f64)
            ));
        }
    }
    assert!(lines.len() + missing.len() <= d.lines.len());
    (lines, missing)
}

/// The latency-over-time caption: the band, the points, the lines and the gaps.
fn time_caption(d: &Decimated, missing: &[String]) -> String {
    let mut caption = format!(
        "{} I/Os in {} columns: the band spans each column's fastest to slowest I/O; every I/O of at least {} is drawn as a point{}.",
        format_plain(d.ios as f64),
        d.columns.len(),
        format_ns(d.outlier_threshold_ns as f64),
        if d.device_threshold_ns
            .iter()
            .any(|&t| t != d.outlier_threshold_ns)
        {
            " (each device against its own p99.99 or 8x its median, whichever is lower; the densest device is drawn first, under the others)"
        } else {
            ""
        }
    );
    let windows: Vec<String> = d
        .lines
        .iter()
        .map(|l| {
            format!(
                "p{} over windows of at least {} I/Os",
                format_percentile(l.percentile),
                format_plain(l.window_ios_min as f64)
            )
        })
        .collect();
    caption.push_str(&format!(
        " Lines: {}, each held over its window, pooling the I/Os of every device that completed any in the window (a stalled device adds nothing, it does not pull the line down).",
        windows.join(", ")
    ));
    if !missing.is_empty() {
        caption.push_str(&format!(" There is {}.", missing.join("; ")));
    }
    let gaps = d.stretches.len().saturating_sub(1);
    if gaps > 0 {
        caption.push_str(&format!(
            " {} without completions (longer than chance at the run's rate) {} left blank: the I/Os that waited through them are the points where they end.",
            count(gaps, "stretch", "stretches"),
            if gaps == 1 { "is" } else { "are" }
        ));
    }
    caption
}

/// The caption's sentence on the shaded (major) spikes, or why none are shaded.
fn shading_caption(view: &LatView, majors: usize, shade: bool, shaded_s: f64) -> String {
    assert!(
        majors > 0,
        "only a figure with major spikes says how they are shaded"
    );
    if shade {
        format!(
            " Shaded: {} of {}, those reaching {} or more.",
            majors,
            count(
                view.spikes.spikes.len(),
                "detected spike",
                "detected spikes"
            ),
            format_ns(major_floor_ns(&view.spikes) as f64)
        )
    } else {
        format!(
            " Not shaded: slow I/Os of {} or more overlap through most of the run ({} covering {} of it), so there is no isolated spike to mark.",
            format_ns(major_floor_ns(&view.spikes) as f64),
            count(majors, "stretch", "stretches"),
            format_ns(shaded_s * 1e9),
        )
    }
}

/// Spikes shaded in pictures: the ones at least a tenth as tall as the tallest (at most
/// [`SPANS_MAX`], tallest first), so that scheduler noise just above the threshold does not
/// paint the whole run.
pub fn major_spikes(a: &SpikeAnalysis) -> Vec<crate::spikes::Spike> {
    let floor = major_floor_ns(a);
    let mut v: Vec<_> = a
        .spikes
        .iter()
        .filter(|s| s.height_ns >= floor)
        .cloned()
        .collect();
    v.sort_by_key(|s| std::cmp::Reverse(s.height_ns));
    v.truncate(SPANS_MAX);
    v.sort_by_key(|s| s.start_ns);
    v
}

/// Spans drawn at most.
pub const SPANS_MAX: usize = 200;

fn major_floor_ns(a: &SpikeAnalysis) -> u64 {
    let tallest = a.spikes.iter().map(|s| s.height_ns).max().unwrap_or(0);
    (tallest / 10).max(a.threshold_ns)
}

/// One interval's rate sample: (middle of the interval, seconds since the first interval; I/Os
/// per second over the interval's real length).
pub type RatePoint = (f64, f64);

/// The rate samples of one interval series and how many edge intervals were left out.
///
/// Each rate is the interval's I/Os over its own written length (not the nominal one). The
/// nominal length is the median; a first or last interval shorter than half of it (a sliver,
/// such as the few I/Os completed after the last full interval) is left out, because its rate
/// rests on a handful of I/Os and a length rounded to milliseconds and would show as a false
/// drop. Intervals of zero length (a sliver under 0.5 ms) are always left out.
pub fn interval_rates(s: &IntervalSeries, t0_s: f64) -> (Vec<RatePoint>, usize) {
    let pts = &s.points;
    let lens: Vec<f64> = pts.iter().map(|p| p.duration_s).collect();
    let mut sorted: Vec<f64> = lens.iter().copied().filter(|l| *l > 0.0).collect();
    sorted.sort_by(f64::total_cmp);
    let nominal = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
    let n = pts.len();
    let mut dropped = 0;
    let mut out = Vec::with_capacity(n);
    for (i, (p, &len)) in pts.iter().zip(&lens).enumerate() {
        let edge = i == 0 || i + 1 == n;
        if len <= 0.0 || (edge && n > 1 && len < nominal / 2.0) {
            dropped += 1;
            continue;
        }
        out.push((p.start_s - t0_s + len / 2.0, p.ios as f64 / len));
    }
    (out, dropped)
}

/// Figures: IOPS and bandwidth over time per device and direction, from interval histograms.
pub fn throughput_figures(series: &[IntervalSeries], block_size_bytes: u64) -> Vec<Figure> {
    let active: Vec<&IntervalSeries> = series
        .iter()
        .filter(|s| s.points.iter().any(|p| p.ios > 0))
        .collect();
    if active.is_empty() {
        return Vec::new();
    }
    let t0 = active
        .iter()
        .flat_map(|s| s.points.iter())
        .map(|p| p.start_s)
        .fold(f64::INFINITY, f64::min);
    let rates: Vec<(Vec<RatePoint>, usize)> =
        active.iter().map(|s| interval_rates(s, t0)).collect();
    let dropped: usize = rates.iter().map(|r| r.1).sum();
    // One rate per device is a single dot: nothing over time to show.
    if rates.iter().all(|r| r.0.len() < 2) {
        return Vec::new();
    }
    // The axis runs to the end of the last interval (the run's end), not to its middle; in
    // whole milliseconds, so a sliver of the drain (1.0003 s) does not stretch it to 1.2 s.
    let t_hi = active
        .iter()
        .flat_map(|s| s.points.iter())
        .map(|p| p.start_s + p.duration_s - t0)
        .fold(0.0, f64::max);
    let t_hi = (t_hi * 1000.0).round() / 1000.0;
    let v_hi = rates
        .iter()
        .flat_map(|r| r.0.iter())
        .map(|p| p.1)
        .fold(0.0, f64::max);
    let mut out = Vec::new();
    for (id, title, scale, fmt) in [
        ("iops-over-time", "IOPS over time", 1.0, LabelFormat::Plain),
        (
            "bandwidth-over-time",
            "bandwidth over time",
            block_size_bytes as f64,
            LabelFormat::BytesPerSecond,
        ),
    ] {
        let mut plot = Plot::new(
            format!("{title}, per device"),
            Axis::linear_to_end(
                "time since start",
                0.0,
                t_hi.max(1e-3),
                LabelFormat::Seconds,
            ),
            // The legend is under the figure: no headroom needed above the data.
            Axis::linear(
                if scale == 1.0 { "IOPS" } else { "bandwidth" },
                0.0,
                (v_hi * scale).max(1.0),
                fmt,
            ),
        );
        if active.len() <= DEVICES_COLOURED_MAX {
            for (i, (s, r)) in active.iter().zip(&rates).enumerate() {
                let mut line = Series::new(
                    format!("{} {}", s.device, s.op.name()),
                    SeriesStyle::Line,
                    palette(i),
                );
                line.points = r.0.iter().map(|&(t, v)| (t, v * scale)).collect();
                plot.series.push(line);
            }
        } else {
            // Many devices (64 drew 128 unlabelled lines): per direction, the mean over the
            // devices and the lowest and highest device in each interval, with a legend.
            plot.title = format!("{title}: mean, lowest and highest device");
            plot.series
                .extend(device_rate_summary(&active, &rates, scale));
        }
        plot.legend = true;
        let mut caption = format!(
            "From the interval histograms, each interval's I/Os over its length{}.",
            if scale == 1.0 {
                String::new()
            } else {
                format!(" (IOPS x {} blocks)", format_block(block_size_bytes))
            }
        );
        if dropped > 0 {
            caption.push_str(&format!(
                " Left out: {} at the start or end shorter than half the usual interval (too few I/Os for a rate).",
                count(dropped, "interval", "intervals")
            ));
        }
        out.push(Figure {
            id: id.into(),
            caption,
            plot,
        });
    }
    out
}

/// Per direction, three lines over the devices' interval rates (aligned by interval start):
/// the mean over the devices, the lowest device and the highest device in each interval.
fn device_rate_summary(
    active: &[&IntervalSeries],
    rates: &[(Vec<RatePoint>, usize)],
    scale: f64,
) -> Vec<Series> {
    let mut out = Vec::new();
    for (k, op) in Op::ALL.into_iter().enumerate() {
        let mut by_t: std::collections::BTreeMap<i64, (f64, Vec<f64>)> = Default::default();
        let mut devices = 0;
        for (s, r) in active.iter().zip(rates) {
            if s.op != op {
                continue;
            }
            devices += 1;
            for &(t, v) in &r.0 {
                let e = by_t
                    .entry((t * 1e6).round() as i64)
                    .or_insert((t, Vec::new()));
                e.1.push(v * scale);
            }
        }
        if devices == 0 {
            continue;
        }
        let line = |name: String, c: usize, f: &dyn Fn(&[f64]) -> f64| {
            let mut l = Series::new(name, SeriesStyle::Line, palette(c));
            l.points = by_t.values().map(|(t, v)| (*t, f(v))).collect();
            l
        };
        let mut mean = line(
            format!("{} mean of {devices} devices", op.name()),
            3 * k,
            &|v| v.iter().sum::<f64>() / v.len() as f64,
        );
        mean.bold = true;
        out.push(line(
            format!("{} lowest device", op.name()),
            3 * k + 1,
            &|v| v.iter().copied().fold(f64::INFINITY, f64::min),
        ));
        out.push(line(
            format!("{} highest device", op.name()),
            3 * k + 2,
            &|v| v.iter().copied().fold(0.0, f64::max),
        ));
        out.push(mean);
    }
    out
}

/// The lowest percentile at which the slowest device is at least `ratio` x the fastest, if any.
pub fn divergence(report: &Report, op: Op, ratio: f64) -> Option<(String, f64)> {
    let spread = report.aggregate.across_devices.dir(op);
    let active: Vec<&DeviceReport> = report
        .devices
        .iter()
        .filter(|d| d.dir(op).ios > 0)
        .collect();
    if active.len() < 2 {
        return None;
    }
    let fewest = active.iter().map(|d| d.dir(op).ios).min().unwrap_or(0);
    let mut rows: Vec<(f64, String, f64)> = spread
        .iter()
        .filter_map(|s| {
            let p: f64 = s.percentile.parse().ok()?;
            // Where some device cannot resolve it, its value is only that device's max.
            resolves(fewest, p).then_some(())?;
            Some((
                p,
                format!("p{}", s.percentile),
                s.max_ns as f64 / (s.min_ns.max(1)) as f64,
            ))
        })
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let maxes: Vec<u64> = active.iter().map(|d| d.dir(op).lat_ns.max_ns).collect();
    let mx = *maxes.iter().max()? as f64 / (*maxes.iter().min()?).max(1) as f64;
    rows.push((100.0, "max".into(), mx));
    rows.into_iter().find(|r| r.2 >= ratio).map(|r| (r.1, r.2))
}

/// The summary: what stands out in this run, one sentence each.
pub fn summary(
    report: &Report,
    lat: Option<&LatView>,
    interval_spikes: Option<&SpikeAnalysis>,
) -> Vec<String> {
    let mut out = vec![summary_headline(report)];
    let percentiles = plotted_percentiles(report);
    for op in Op::ALL {
        if report.aggregate.dir(op).ios == 0 {
            continue;
        }
        out.push(summary_aggregate(report, op, &percentiles));
        // Worst device by its highest percentile, then max.
        let active: Vec<&DeviceReport> = report
            .devices
            .iter()
            .filter(|d| d.dir(op).ios > 0)
            .collect();
        if active.len() >= 2 {
            out.extend(worst_device(&active, op, &percentiles));
            out.push(divergence_line(report, op));
        }
    }
    if let Some(l) = lat {
        out.extend(steadily_slow_devices(l));
    }
    let names: Vec<&str> = report.devices.iter().map(|d| d.name.as_str()).collect();
    let measured_ns = report.config.measured_ns;
    match (lat, interval_spikes) {
        (Some(l), _) => out.extend(spike_text(&l.spikes, "per-I/O log", &names, measured_ns)),
        (None, Some(a)) => out.extend(spike_text(a, "interval histograms", &names, measured_ns)),
        (None, None) => out.push(
            "No per-I/O or interval log: run `nines profile` with --lat-log or --hdr-log to look for spikes over time."
                .into(),
        ),
    }
    out
}

/// The summary's first sentence: what ran, on what, for how long.
fn summary_headline(report: &Report) -> String {
    let w = &report.config.workload;
    format!(
        "{} run of {}: {} {} QD{} on {}, {}.",
        match report.kind {
            nines_core::report::RunKind::Profile => "Measured",
            nines_core::report::RunKind::Sim => "Simulated",
        },
        crate::table::targets_phrase(report),
        w.rw,
        format_block(w.block_size_bytes),
        w.iodepth,
        report.config.engine,
        crate::table::measured_phrase(report)
    )
}

/// One direction of the merged sample: IOPS, bandwidth and its latency up to the highest
/// percentile it resolves.
fn summary_aggregate(report: &Report, op: Op, percentiles: &[f64]) -> String {
    let a = report.aggregate.dir(op);
    assert!(a.ios > 0, "only directions that did I/O are summarised");
    // The highest percentile the merged sample resolves (above it, only the max).
    let top = percentiles
        .iter()
        .rev()
        .find(|&&p| resolves(a.ios, p))
        .map(|p| {
            format!(
                ", p{} {}",
                format_percentile(*p),
                format_ns(a.lat_ns.percentiles.get(&percentile_key(*p)).unwrap_or(0) as f64)
            )
        });
    format!(
        "{}: {} IOPS, {} in total; mean {}, p50 {}{}, max {}.",
        op.name(),
        format_plain(a.iops),
        format_bytes_per_s(a.bw_bytes),
        format_ns(a.lat_ns.mean_ns),
        format_ns(a.lat_ns.percentiles.at(50.0).unwrap_or(0) as f64),
        top.unwrap_or_default(),
        format_ns(a.lat_ns.max_ns as f64)
    )
}

/// The slowest of two or more devices that did `op`, against the median of the others (with
/// two, the other one), or that none stands out.
fn worst_device(active: &[&DeviceReport], op: Op, percentiles: &[f64]) -> Option<String> {
    assert!(
        active.len() >= 2,
        "a worst device needs another to compare with"
    );
    // Rank by the highest percentile every device resolves: an unresolved one is only
    // each device's max, and ranking by it would rank by one I/O.
    let fewest = active.iter().map(|d| d.dir(op).ios).min().unwrap_or(0);
    let rank_p = percentiles
        .iter()
        .rev()
        .copied()
        .find(|&p| resolves(fewest, p));
    let key = |d: &DeviceReport| {
        let s = &d.dir(op).lat_ns;
        rank_p.and_then(|p| s.percentiles.at(p)).unwrap_or(s.max_ns)
    };
    let at = rank_p.map_or("max".to_string(), |p| format!("p{}", format_percentile(p)));
    let worst = active.iter().max_by_key(|d| key(d))?;
    let top = key(worst);
    let max = worst.dir(op).lat_ns.max_ns;
    let mut others: Vec<u64> = active
        .iter()
        .filter(|d| !std::ptr::eq(**d, *worst))
        .map(|d| key(d))
        .collect();
    others.sort_unstable();
    // Against the median of the other devices (with two, the other one).
    let median = others[others.len() / 2].max(1);
    let ratio = top as f64 / median as f64;
    let than = if others.len() == 1 {
        "the other device"
    } else {
        "the median of the others"
    };
    Some(if ratio < 1.1 {
        format!(
            "No {op} device stands out at {at}: the slowest, {} ({}), is within 10% of {than}.",
            worst.name,
            format_ns(top as f64),
            op = op.name(),
        )
    } else {
        format!(
            "Worst {op} device at {at}: {} ({}, {}x {than}; max {}).",
            worst.name,
            format_ns(top as f64),
            format_ratio(ratio),
            format_ns(max as f64),
            op = op.name(),
        )
    })
}

/// Where the devices' latency of `op` parts by 2x, or that it never does.
fn divergence_line(report: &Report, op: Op) -> String {
    match divergence(report, op, 2.0) {
        Some((at, r)) => format!(
            "{} latency diverges across devices from {at} on: the slowest device is {r:.1}x the fastest there.",
            op.name()
        ),
        None => format!(
            "{} latency of all devices stays within 2x of each other up to max.",
            op.name()
        ),
    }
}

/// What the spike analysis found (`source`: the log it came from): periodic spikes, else
/// isolated ones or none, and slow I/Os left out.
fn spike_text(a: &SpikeAnalysis, source: &str, names: &[&str], measured_ns: u64) -> Vec<String> {
    let mut v: Vec<String> = a
        .periodic
        .iter()
        .map(|p| periodic_line(p, source, names))
        .collect();
    if a.periodic.is_empty() {
        v.push(aperiodic_line(a, source, measured_ns));
    }
    if a.slow_dropped > 0 {
        v.push(format!(
            "Spike analysis kept the first slow I/Os only; {} more were not analysed.",
            a.slow_dropped
        ));
    }
    v
}

/// One periodic spike train: its period, shape and devices.
fn periodic_line(p: &crate::spikes::Periodic, source: &str, names: &[&str]) -> String {
    let devs: Vec<&str> = p
        .devices
        .iter()
        .map(|&d| names.get(usize::from(d)).copied().unwrap_or("?"))
        .collect();
    // A stall that every waiting I/O sat through lasts as long as its slowest I/O took:
    // one figure then, not a duration and a height that read as two findings.
    let shape = if p.duration_ns.abs_diff(p.height_ns) * 20 <= p.height_ns.max(1) {
        format!(
            "a stall of about {} each time",
            format_ns(p.height_ns as f64)
        )
    } else {
        format!(
            "slow for about {} each time, I/Os taking up to {}",
            format_ns(p.duration_ns as f64),
            format_ns(p.height_ns as f64)
        )
    };
    format!(
        "Periodic latency spikes ({source}): every {}, {shape} (the tallest {}), on {}{}; {} of {} expected occurrences seen.",
        format_ns(p.period_ns as f64),
        format_ns(p.height_ns_max as f64),
        devs.join(", "),
        if p.devices.len() > 1 {
            if p.together {
                ", together"
            } else {
                ", at different times"
            }
        } else {
            ""
        },
        p.occurrences,
        p.expected
    )
}

/// Spikes that are not periodic: none, slow I/Os overlapping through most of the run, or a
/// count of isolated spikes and how tall.
fn aperiodic_line(a: &SpikeAnalysis, source: &str, measured_ns: u64) -> String {
    let per_device = a.device_threshold_ns.iter().any(|&t| t != a.threshold_ns);
    let basis = if per_device {
        format!(
            "8x its device's median, {} on the fastest",
            format_ns(a.threshold_ns as f64)
        )
    } else {
        format!("{}, 8x the median", format_ns(a.threshold_ns as f64))
    };
    if a.spikes.is_empty() {
        return format!("No latency spikes ({source}): no I/O took {basis} or longer.");
    }
    let worst = a.spikes.iter().map(|s| s.height_ns).max().unwrap_or(0);
    let floor = major_floor_ns(a);
    let major = a.spikes.iter().filter(|s| s.height_ns >= floor).count();
    let longest = a.spikes.iter().map(|s| s.duration_ns()).max().unwrap_or(0);
    if longest.saturating_mul(2) > measured_ns.max(1) {
        // Slow I/Os on many devices overlap into one stretch: not "1 spike".
        let slow: u64 = a.spikes.iter().map(|s| s.slow_ios).sum();
        let mut devs: Vec<u16> = a
            .spikes
            .iter()
            .flat_map(|s| s.devices.iter().copied())
            .collect();
        devs.sort_unstable();
        devs.dedup();
        format!(
            "No isolated latency spikes ({source}): {} of at least {basis} on {} overlap through most of the run, the worst {}.",
            count(slow as usize, "slow I/O", "slow I/Os"),
            count(devs.len(), "device", "devices"),
            format_ns(worst as f64)
        )
    } else {
        format!(
            "{} of at least {basis} ({source}), {major} of them reaching {} or more, the worst {}; not periodic.",
            count(a.spikes.len(), "latency spike", "latency spikes"),
            format_ns(floor as f64),
            format_ns(worst as f64)
        )
    }
}

/// "1 thing", "2 things".
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A device at least this many times slower (by its median) than the other devices' median is
/// named as steadily slow.
pub const SLOW_DEVICE_FACTOR: f64 = 4.0;

/// Devices steadily slower than the others, from the per-I/O log: their median is at least
/// [`SLOW_DEVICE_FACTOR`] x the median of the other devices' medians. Spikes are judged per
/// device, so such a device is an outlier device, not a run-long spike; this says so.
pub fn steadily_slow_devices(l: &LatView) -> Vec<String> {
    let known: Vec<(usize, u64)> = l
        .device_median_ns
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, m)| m > 0)
        .collect();
    if known.len() < 2 {
        return Vec::new();
    }
    let mut slow: Vec<(usize, u64, f64)> = Vec::new();
    for &(d, m) in &known {
        let mut others: Vec<u64> = known
            .iter()
            .filter(|&&(o, _)| o != d)
            .map(|&(_, m)| m)
            .collect();
        others.sort_unstable();
        let typical = others[(others.len() - 1) / 2].max(1);
        let r = m as f64 / typical as f64;
        if r >= SLOW_DEVICE_FACTOR {
            slow.push((d, m, r));
        }
    }
    slow.sort_by(|a, b| b.2.total_cmp(&a.2));
    slow.iter()
        .enumerate()
        .map(|(i, &(d, m, r))| {
            let name = l
                .devices
                .get(d)
                .cloned()
                .unwrap_or_else(|| format!("device {d}"));
            format!(
                "{} (per-I/O log): {name}, median {}, {}x the other devices' median throughout; an outlier device (its spikes are judged against its own median), not a spike.",
                if i == 0 { "Slowest device" } else { "Also steadily slow" },
                format_ns(m as f64),
                format_ratio(r)
            )
        })
        .collect()
}

/// A ratio with 2 significant digits below 10 (0.0013, 0.25, 1.3) and whole above (25, 779):
/// never rounded to 0.
pub fn format_ratio(r: f64) -> String {
    if !r.is_finite() || r <= 0.0 {
        return format!("{r}");
    }
    let mag = r.log10().floor() as i32;
    let decimals = (1 - mag).max(0) as usize;
    format!("{r:.decimals$}")
}

/// Everything a run report draws on.
pub struct RunInputs<'a> {
    pub report: &'a Report,
    pub title: String,
    pub lat: Option<LatView>,
    pub intervals: Option<Vec<IntervalSeries>>,
}

/// All the figures of a run report, in page order.
pub fn figures(inp: &RunInputs) -> Vec<Figure> {
    let mut figs = Vec::new();
    for op in Op::ALL {
        figs.extend(percentile_figure(inp.report, op));
        figs.extend(spread_figure(inp.report, op));
        figs.extend(stddev_figure(inp.report, op));
    }
    if let Some(l) = &inp.lat {
        figs.extend(time_figure(l));
    }
    if let Some(iv) = &inp.intervals {
        figs.extend(throughput_figures(
            iv,
            inp.report.config.workload.block_size_bytes,
        ));
    }
    figs
}

/// Figures left out because they would carry no information, one sentence each saying why.
pub fn omitted_figures(inp: &RunInputs) -> Vec<String> {
    let mut out = Vec::new();
    for op in Op::ALL {
        if spread_over_devices(inp.report, op).is_some() && stddev_figure(inp.report, op).is_none()
        {
            out.push(format!(
                "No {} standard-deviation figure: every device had the same latency at every percentile, a deviation of zero.",
                op.name()
            ));
        }
    }
    if let Some(iv) = &inp.intervals
        && iv.iter().any(|s| s.points.iter().any(|p| p.ios > 0))
        && throughput_figures(iv, inp.report.config.workload.block_size_bytes).is_empty()
    {
        out.push(
            "No IOPS or bandwidth over time: the interval log holds one interval per device; give a shorter --hdr-interval to see the rate change over the run.".into(),
        );
    }
    out
}

/// The configuration as (key, value) rows.
pub fn config_rows(report: &Report) -> Vec<Vec<String>> {
    let c = &report.config;
    let w = &c.workload;
    let mut rows = vec![
        vec!["kind".into(), format!("{:?}", report.kind).to_lowercase()],
        vec!["nines version".into(), report.nines_version.clone()],
        vec!["engine".into(), c.engine.clone()],
        vec!["rw".into(), w.rw.to_string()],
        vec!["block size".into(), format_block(w.block_size_bytes)],
        vec!["iodepth".into(), w.iodepth.to_string()],
        vec!["measured".into(), format_ns(c.measured_ns as f64)],
        vec!["ramp".into(), format_ns(w.ramp_ns as f64)],
        vec!["distribution".into(), w.distribution.to_string()],
        vec!["seed".into(), w.seed.to_string()],
        vec![
            "percentiles".into(),
            c.percentiles
                .iter()
                .map(|p| format_percentile(*p))
                .collect::<Vec<_>>()
                .join(", "),
        ],
    ];
    if w.rw == nines_core::workload::RwMode::RandRw {
        rows.push(vec!["read share".into(), format!("{}%", w.read_mix_pct)]);
    }
    if let Some(r) = w.rate_iops {
        rows.push(vec![
            "rate".into(),
            format!("{r} IOPS per target ({})", w.arrival),
        ]);
    }
    if let Some(n) = w.ios_max {
        rows.push(vec!["I/Os per target".into(), n.to_string()]);
    }
    let mut extra = c.extra.clone();
    // Emulated devices: one readable row each and one for the emulation's overhead, not every
    // counter under its JSON path (`emu devices[0] overhead ns p99 99 3080191`).
    if let Some(emu) = extra.remove("emu") {
        rows.extend(emu_rows(&emu));
    }
    for (k, v) in flatten_json(&serde_json::Value::Object(extra)) {
        if let Some(row) = extra_row(&k, &v) {
            rows.push(row);
        }
    }
    rows
}

/// The configuration rows of `config.extra.emu` (profile's `emu:` targets).
fn emu_rows(emu: &serde_json::Value) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let n = |v: &serde_json::Value, k: &str| v.get(k).and_then(serde_json::Value::as_u64);
    let s = |v: &serde_json::Value, k: &str| {
        v.get(k)
            .and_then(serde_json::Value::as_str)
            .unwrap_or("?")
            .to_string()
    };
    let devices = emu
        .get("devices")
        .and_then(serde_json::Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, d) in devices.iter().enumerate() {
        let name = d
            .get("name")
            .and_then(serde_json::Value::as_str)
            .map_or_else(|| format!("#{i}"), str::to_string);
        rows.push(vec![
            format!("emulated {name}"),
            format!(
                "{} at scale {}, {} exported, preconditioning {}",
                s(d, "preset"),
                d.get("scale")
                    .and_then(serde_json::Value::as_f64)
                    .map_or("?".into(), format_plain),
                readable_value("size_bytes", &n(d, "size_bytes").unwrap_or(0).to_string()),
                s(d, "precondition"),
            ),
        ]);
        if let Some(o) = d.get("overhead_ns") {
            let at = |k: &str| n(o, k).map_or("?".into(), |v| format_ns(v as f64));
            rows.push(vec![
                format!("emulation overhead, {name}"),
                format!(
                    "p50 {}, p99 {}, p99.99 {}, max {} over {} I/Os",
                    at("p50"),
                    at("p99"),
                    at("p99.99"),
                    at("max"),
                    n(o, "count").unwrap_or(0)
                ),
            ]);
        }
    }
    if let (Some(used), Some(budget)) = (n(emu, "charged_bytes"), n(emu, "memory_budget_bytes")) {
        rows.push(vec![
            "emulation memory".into(),
            format!(
                "{} of {}",
                readable_value("x_bytes", &used.to_string()),
                readable_value("x_bytes", &budget.to_string())
            ),
        ]);
    }
    rows
}

/// A volume's policy counters as people read them: labels without underscores, times with
/// units, byte counts in MB, shares in percent, ratios to 3 significant digits, nothing for unset
/// (`null`) values, and no write amplification for a run that wrote nothing (it is 0/0).
pub fn policy_counter_rows(stats: &serde_json::Value) -> Vec<Vec<String>> {
    let wrote = stats
        .get("client_write_bytes")
        .and_then(serde_json::Value::as_u64)
        .is_none_or(|b| b > 0);
    flatten_json(stats)
        .into_iter()
        .filter(|(k, v)| v != "null" && (wrote || !k.ends_with("write_amplification")))
        .map(|(k, v)| {
            let value = readable_value(&k, &v);
            vec![k.replace(['_', '.'], " "), value]
        })
        .collect()
}

/// A JSON scalar under `key` as people read it (see [`policy_counter_rows`]).
pub fn readable_value(key: &str, v: &str) -> String {
    let Ok(x) = v.parse::<f64>() else {
        return match v {
            "true" => "yes".into(),
            "false" => "no".into(),
            v => v.to_string(),
        };
    };
    let last = key.rsplit(['.', '_']).next().unwrap_or("");
    let leaf = key.rsplit('.').next().unwrap_or(key);
    if key.ends_with("_ns") || key.contains("_ns.") || key.contains("overhead_ns") {
        format_ns(x)
    } else if key.ends_with("_bytes_per_s") {
        if x == 0.0 {
            // md's convention as nines': 0 is no limit.
            "unlimited".into()
        } else {
            format_bytes_per_s(x)
        }
    } else if leaf.ends_with("_bytes") || leaf.starts_with("bytes") {
        if x >= 1e6 {
            format!("{} MB", format_plain(x / 1e6))
        } else {
            format_block(x as u64)
        }
    } else if matches!(last, "share" | "fraction" | "provisioning" | "simulated")
        || key.contains("fraction_")
        || key.starts_with("over_provisioning")
    {
        format!("{}%", format_plain(x * 100.0))
    } else if x.fract() != 0.0 {
        format_plain(x)
    } else {
        v.to_string()
    }
}

/// The emulation's own overhead (`emu:` targets: the model driven at the real clock) when it is
/// a large share of the measured tail: at p99.99 (or the highest it recorded) at least a quarter
/// of the run's own latency there, the tail is partly the emulator's.
pub fn emulation_overhead(r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    let Some(emu) = r.config.extra.get("emu") else {
        return out;
    };
    let devices: Vec<&serde_json::Value> = match emu {
        serde_json::Value::Object(m) => match m.get("devices") {
            Some(serde_json::Value::Array(a)) => a.iter().collect(),
            _ => vec![emu],
        },
        serde_json::Value::Array(a) => a.iter().collect(),
        _ => Vec::new(),
    };
    let tail = [Op::Read, Op::Write]
        .iter()
        .filter_map(|&op| {
            let a = r.aggregate.dir(op);
            (a.ios > 0).then(|| a.lat_ns.percentiles.at(99.99).unwrap_or(a.lat_ns.max_ns))
        })
        .max()
        .unwrap_or(0);
    for (i, d) in devices.iter().enumerate() {
        let Some(o) = d.get("overhead_ns") else {
            continue;
        };
        let name = d
            .get("name")
            .and_then(serde_json::Value::as_str)
            .map_or_else(|| format!("emulated device {i}"), str::to_string);
        let at = ["p99.99", "p99", "max"].iter().find_map(|k| {
            o.get(*k)
                .and_then(serde_json::Value::as_u64)
                .map(|v| (*k, v))
        });
        let Some((at, ns)) = at else { continue };
        if tail > 0 && ns * 4 >= tail {
            out.push(format!(
                "the emulation's own overhead on {name} is {} at {at}, {}% of the run's p99.99 latency ({}): that much of the tail is the emulator, not the model",
                format_ns(ns as f64),
                format_plain(ns as f64 * 100.0 / tail as f64),
                format_ns(tail as f64)
            ));
        }
    }
    out
}

/// One driver-specific setting as a readable row: a label instead of the JSON key, yes/no
/// instead of true/false, nothing for a setting that is not set (`null`), and none of the
/// fields only tools read.
fn extra_row(key: &str, value: &str) -> Option<Vec<String>> {
    if value == "null" || value.is_empty() {
        return None;
    }
    let label = match key {
        "cpus" => "worker CPUs",
        "hostname" => "host",
        "kernel" => "kernel",
        "sqpoll" => "io_uring SQPOLL",
        "rt_priority" => "real-time priority",
        "mlock" => "memory locked",
        "buffered" => "buffered (page cache)",
        "embedded_default" => "embedded default (temporary files)",
        "plan" => "placement plan",
        "interrupted" => "interrupted",
        "ios_executed" => "I/Os issued per target (ramp included)",
        "layout" => "layout",
        "stripe_bytes" => "stripe",
        "verify" => "verify reads",
        "device" => "device model",
        "device_name" => "device model name",
        "devices" => "devices",
        "scale" => "model scale",
        "precondition" => "preconditioning",
        "events" => "simulator events",
        "sim_end_ns" => "simulated time",
        "io_errors" => "I/O errors",
        // The per-device models are shown in the line under the title.
        k if k.starts_with("device_models") => return None,
        _ => "",
    };
    let label = if label.is_empty() {
        key.replace(['_', '.'], " ")
    } else {
        label.to_string()
    };
    let value = match (key, value) {
        (_, "true") => "yes".to_string(),
        (_, "false") => "no".to_string(),
        ("stripe_bytes", v) => v.parse().map_or(v.to_string(), format_block),
        ("sim_end_ns", v) => v.parse::<f64>().map_or(v.to_string(), format_ns),
        (k, v) => readable_value(k, v),
    };
    Some(vec![label, value])
}

/// The host's findings from `nines doctor` (what may distort latency), one row each, without the
/// fields only tools read (schema, counts, root).
fn host_rows(h: &serde_json::Value) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    if let Some(findings) = h.get("findings").and_then(|f| f.as_array()) {
        for f in findings.iter().filter_map(|f| f.as_str()) {
            let (sev, text) = f.split_once(": ").unwrap_or(("", f));
            rows.push(vec![sev.to_string(), text.to_string()]);
        }
    }
    for (k, v) in flatten_json(h) {
        let internal = matches!(
            k.as_str(),
            "root" | "schema" | "schema_version" | "findings"
        ) || k.starts_with("counts");
        if !internal && v != "null" {
            rows.push(vec![k.replace(['_', '.'], " "), v]);
        }
    }
    rows
}

/// Where, when and on what the run was measured: host, kernel, start time (UTC) and the
/// devices' models, as far as the run recorded them.
pub fn run_meta(r: &Report) -> String {
    let extra = &r.config.extra;
    let s = |k: &str| extra.get(k).and_then(|v| v.as_str()).map(str::to_string);
    let mut parts = Vec::new();
    let sim = r.kind == nines_core::report::RunKind::Sim;
    let kind = if sim { "Simulated" } else { "Measured" };
    match (s("hostname"), s("kernel")) {
        (Some(h), Some(k)) => parts.push(format!("{kind} on {h} (Linux {k})")),
        (Some(h), None) => parts.push(format!("{kind} on {h}")),
        (None, Some(k)) => parts.push(format!("{kind} on Linux {k}")),
        (None, None) if sim => parts.push(kind.to_string()),
        (None, None) => parts.push(format!("{kind} on an unrecorded host")),
    }
    if !r.sources.is_empty() {
        // A merged run: every run's host, kind and own duration (the hostname above is gone).
        parts.clear();
        let runs: Vec<String> = r
            .sources
            .iter()
            .map(|s| {
                format!(
                    "{} ({}{}, {})",
                    s.label,
                    match s.kind {
                        nines_core::report::RunKind::Profile => "profile",
                        nines_core::report::RunKind::Sim => "sim",
                    },
                    s.host
                        .as_ref()
                        .filter(|h| **h != s.label)
                        .map(|h| format!(" on {h}"))
                        .unwrap_or_default(),
                    format_ns(s.measured_ns as f64)
                )
            })
            .collect();
        parts.push(format!(
            "Merged from {}: {}",
            count(r.sources.len(), "run", "runs"),
            runs.join(", ")
        ));
    }
    match r.config.start_unix_ns {
        Some(ns) => parts.push(format!(
            "started {}",
            crate::time::datetime_utc(ns / 1_000_000_000)
        )),
        None if sim => {}
        None => parts.push("start time not recorded".into()),
    }
    let mut models: Vec<String> = Vec::new();
    if let Some(m) = extra.get("device_models").and_then(|m| m.as_object()) {
        let mut by_model: Vec<(String, Vec<String>)> = Vec::new();
        for (dev, model) in m {
            let model = model.as_str().unwrap_or("?").to_string();
            match by_model.iter_mut().find(|(x, _)| *x == model) {
                Some((_, devs)) => devs.push(dev.clone()),
                None => by_model.push((model, vec![dev.clone()])),
            }
        }
        for (model, devs) in by_model {
            models.push(format!("{model} ({})", devs.join(", ")));
        }
    } else if let Some(d) = s("device_name").or(s("device")) {
        models.push(format!("simulated {d}"));
    }
    if models.is_empty() {
        parts.push("device models not recorded".into());
    } else {
        parts.push(format!("devices: {}", models.join("; ")));
    }
    format!("{}.", parts.join(", "))
}

/// The whole HTML page of a run.
pub fn render_html(inp: &RunInputs, figs: &[Figure]) -> Result<String, PlotError> {
    let r = inp.report;
    let interval_spikes = match (&inp.lat, &inp.intervals) {
        (None, Some(iv)) => {
            let names: Vec<String> = r.devices.iter().map(|d| d.name.clone()).collect();
            spikes_from_intervals(iv, &names, SpikeParams::default())
        }
        _ => None,
    };
    let mut page = Page::new(&inp.title);
    page.meta(&run_meta(r));
    html_summary(&mut page, inp, interval_spikes.as_ref());
    html_figures(&mut page, inp, figs)?;
    let percentiles = plotted_percentiles(r);
    html_devices(&mut page, r, &percentiles);
    html_fdp(&mut page, r);
    // Array volumes: each member's command latencies and the policy's counters.
    for d in &r.devices {
        html_volume(&mut page, d, &percentiles);
    }
    html_nvme(&mut page, r);
    html_sources(&mut page, r, &percentiles);
    let spikes = inp
        .lat
        .as_ref()
        .map(|l| &l.spikes)
        .or(interval_spikes.as_ref());
    if let Some(spikes) = spikes {
        html_spikes(&mut page, r, spikes);
    }
    page.h2("Configuration");
    page.table(&["setting".into(), "value".into()], &config_rows(r));
    html_workers(&mut page, r);
    html_host(&mut page, r);
    Ok(page.finish(&inp.title))
}

/// The page's summary list, then the rebuild's progress and every warning.
fn html_summary(page: &mut Page, inp: &RunInputs, interval_spikes: Option<&SpikeAnalysis>) {
    let r = inp.report;
    page.h2("Summary");
    page.list(&summary(r, inp.lat.as_ref(), interval_spikes));
    for line in crate::table::rebuild_progress(r)
        .into_iter()
        .chain(crate::table::zoned_summary(r))
    {
        assert!(
            !line.is_empty(),
            "a rebuild or zoned summary line is never empty"
        );
        page.p(&format!("{}{}.", line[..1].to_uppercase(), &line[1..]));
    }
    for w in &r.warnings {
        page.warning(&format!("Warning: {w}"));
    }
    for w in crate::table::constant_distributions(r) {
        page.warning(&format!("Warning: {w}."));
    }
    for w in emulation_overhead(r) {
        page.warning(&format!("Warning: {w}"));
    }
    for w in crate::table::nvme_warnings(r) {
        page.warning(&format!("Warning: {w}."));
    }
}

/// The figures, and why each missing one is missing; no section when there is neither.
fn html_figures(page: &mut Page, inp: &RunInputs, figs: &[Figure]) -> Result<(), PlotError> {
    let omitted = omitted_figures(inp);
    if figs.is_empty() && omitted.is_empty() {
        return Ok(());
    }
    page.h2("Figures");
    for f in figs {
        page.figure(f)?;
    }
    for why in &omitted {
        page.p(why);
    }
    Ok(())
}

/// One row per device and direction that did I/O.
fn html_devices(page: &mut Page, r: &Report, percentiles: &[f64]) {
    page.h2("Devices");
    // The path only when it says more than the name.
    let paths = r
        .devices
        .iter()
        .any(|d| d.path.as_ref().is_some_and(|p| *p != d.name));
    let mut header: Vec<String> = [
        "device", "path", "cpu", "op", "I/Os", "IOPS", "MB/s", "mean",
    ]
    .iter()
    .filter(|h| paths || **h != "path")
    .map(|s| s.to_string())
    .collect();
    header.extend(latency_header(percentiles));
    let mut unresolved = false;
    let mut rows = Vec::new();
    for d in &r.devices {
        for op in Op::ALL {
            let s = d.dir(op);
            if s.ios == 0 {
                continue;
            }
            let mut row = vec![d.name.clone()];
            if paths {
                row.push(d.path.clone().unwrap_or_default());
            }
            row.extend([
                d.cpu.map(|c| c.to_string()).unwrap_or_default(),
                op.name().into(),
                s.ios.to_string(),
                format_plain(s.iops),
                format!("{:.1}", s.bw_bytes / 1e6),
                format_ns(s.lat_ns.mean_ns),
            ]);
            row.extend(latency_cells(s, percentiles));
            assert_eq!(
                row.len(),
                header.len(),
                "a device row has one cell per column"
            );
            unresolved |= row.iter().any(|c| c == crate::html::UNRESOLVED);
            rows.push(row);
        }
    }
    page.table(&header, &rows);
    if unresolved {
        page.p(&format!(
            "{}: not resolved, too few I/Os for that percentile (pX needs more than 1/(1 - X/100) I/Os; with fewer it is only the max). MB/s: 10^6 bytes per second, as in the terminal table.",
            crate::html::UNRESOLVED
        ));
    }
}

/// FDP devices: host and media bytes per reclaim unit handle (docs/arch-fdp.md).
fn html_fdp(page: &mut Page, r: &Report) {
    let fdp = crate::table::fdp_rows(r);
    if fdp.is_empty() {
        return;
    }
    page.h2("Flexible Data Placement: per reclaim unit handle");
    let header: Vec<String> = crate::table::FDP_HEADER
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert!(fdp.iter().all(|row| row.len() == header.len()));
    page.table(&header, &fdp);
}

/// NVMe devices (profile on NVMe): one row per controller (model, firmware, serial, volatile
/// write cache, APST, what SMART counted during the run), then every power state. No section
/// when no device is NVMe.
fn html_nvme(page: &mut Page, r: &Report) {
    let devices = crate::table::nvme_devices(r);
    if devices.is_empty() {
        return;
    }
    page.h2("NVMe devices");
    let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
    let rows: Vec<Vec<String>> = devices
        .iter()
        .map(|(name, n)| {
            let c = &n.controller;
            vec![
                name.to_string(),
                c.model.clone(),
                c.firmware.clone(),
                c.serial.clone(),
                yes(c.volatile_write_cache),
                if c.apst_supported { "supported" } else { "no" }.into(),
                crate::table::smart_delta_text(n).unwrap_or_else(|| "not known".into()),
            ]
        })
        .collect();
    let header: Vec<String> = [
        "device",
        "model",
        "firmware",
        "serial",
        "volatile write cache",
        "APST",
        "SMART during the run",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    page.table(&header, &rows);
    let states: Vec<Vec<String>> = devices
        .iter()
        .flat_map(|(name, n)| {
            n.controller.power_states.iter().map(move |p| {
                vec![
                    name.to_string(),
                    format!("PS{}", p.index),
                    format!("{:.4}", p.power_uw_max as f64 * 1e-6),
                    yes(p.operational),
                    p.latency_us_entry.to_string(),
                    p.latency_us_exit.to_string(),
                ]
            })
        })
        .collect();
    let header: Vec<String> = [
        "device",
        "power state",
        "max W",
        "operational",
        "entry latency µs",
        "exit latency µs",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    page.table(&header, &states);
    for (name, n) in &devices {
        for note in &n.notes {
            page.p(&format!("{name}: {note}"));
        }
    }
}

/// An array volume's section: each member's command latencies and the policy's counters.
fn html_volume(page: &mut Page, d: &DeviceReport, percentiles: &[f64]) {
    let Some(v) = &d.volume else { return };
    page.h2(&format!(
        "Volume {}: {} of {} members",
        d.name,
        v.layout,
        v.members.len()
    ));
    let mut header: Vec<String> = ["member", "path", "op", "commands", "errors", "mean"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    header.extend(latency_header(percentiles));
    let mut rows = Vec::new();
    for m in &v.members {
        for (op, st) in [(Op::Read, &m.read), (Op::Write, &m.write)] {
            let Some(st) = st.as_ref().filter(|s| s.ios > 0) else {
                continue;
            };
            // This direction's own commands (the member's total was on both rows).
            let mut row = vec![
                m.name.clone(),
                m.path.clone().unwrap_or_default(),
                op.name().into(),
                st.ios.to_string(),
                m.errors.to_string(),
                format_ns(st.lat_ns.mean_ns),
            ];
            row.extend(latency_cells(st, percentiles));
            rows.push(row);
        }
        // The rebuild's writes to this member, when it is the replacement.
        if let Some((ios, _)) = crate::table::rebuild_writes(d, m.index) {
            let mut row = vec![
                m.name.clone(),
                m.path.clone().unwrap_or_default(),
                "rebuild writes".into(),
                ios.to_string(),
                String::new(),
                String::new(),
            ];
            row.extend(std::iter::repeat_n(String::new(), percentiles.len() + 1));
            rows.push(row);
        }
    }
    assert!(
        rows.iter().all(|row| row.len() == header.len()),
        "a member row has one cell per column"
    );
    if !v.members.iter().any(|m| m.path.is_some()) {
        // No member has a path (simulated): drop the empty column.
        header.remove(1);
        for row in &mut rows {
            row.remove(1);
        }
    }
    page.table(&header, &rows);
    let counters = policy_counter_rows(&v.stats);
    if !counters.is_empty() {
        page.table(&["policy counter".into(), "value".into()], &counters);
    }
}

/// A merged run (`nines merge`): each source run's own distribution beside the fleet's.
fn html_sources(page: &mut Page, r: &Report, percentiles: &[f64]) {
    if r.sources.is_empty() {
        return;
    }
    page.h2("Runs merged (per host)");
    let mut header: Vec<String> = ["run", "host", "kind", "devices", "op", "I/Os", "IOPS"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    header.extend(latency_header(percentiles));
    let mut rows = Vec::new();
    for src in &r.sources {
        for (op, st) in [(Op::Read, &src.read), (Op::Write, &src.write)] {
            if st.ios == 0 {
                continue;
            }
            let mut row = vec![
                src.label.clone(),
                src.host.clone().unwrap_or_default(),
                format!("{:?}", src.kind).to_lowercase(),
                src.devices.len().to_string(),
                op.name().into(),
                st.ios.to_string(),
                format_plain(st.iops),
            ];
            row.extend(latency_cells(st, percentiles));
            assert_eq!(
                row.len(),
                header.len(),
                "a source row has one cell per column"
            );
            rows.push(row);
        }
    }
    page.table(&header, &rows);
}

/// The tallest 50 latency spikes, in time order; no section when there are none.
fn html_spikes(page: &mut Page, r: &Report, spikes: &SpikeAnalysis) {
    if spikes.spikes.is_empty() {
        return;
    }
    page.h2("Latency spikes");
    let mut rows = Vec::new();
    // The tallest 50, in time order.
    let mut shown: Vec<&crate::spikes::Spike> = spikes.spikes.iter().collect();
    shown.sort_by_key(|s| std::cmp::Reverse(s.height_ns));
    shown.truncate(50);
    shown.sort_by_key(|s| s.start_ns);
    assert!(!shown.is_empty() && shown.len() <= spikes.spikes.len());
    if spikes.spikes.len() > shown.len() {
        let lo = shown.iter().map(|s| s.height_ns).min().unwrap_or(0);
        let hi = shown.iter().map(|s| s.height_ns).max().unwrap_or(0);
        page.p(&format!(
            "The {} tallest of {} spikes ({} to {} high; the other {} are lower), in time order.",
            shown.len(),
            spikes.spikes.len(),
            format_ns(lo as f64),
            format_ns(hi as f64),
            spikes.spikes.len() - shown.len()
        ));
    }
    for s in shown {
        let devs: Vec<String> = s
            .devices
            .iter()
            .map(|&d| {
                r.devices
                    .get(usize::from(d))
                    .map_or(format!("#{d}"), |x| x.name.clone())
            })
            .collect();
        rows.push(vec![
            format!("{:.3} s", s.start_ns as f64 / 1e9),
            format_ns(s.duration_ns() as f64),
            format_ns(s.height_ns as f64),
            s.slow_ios.to_string(),
            devs.join(", "),
        ]);
    }
    page.table(
        &["start", "duration", "height", "slow I/Os", "devices"].map(String::from),
        &rows,
    );
}

/// Each worker's CPU, devices and CPU time; no section for a run without workers (simulated).
fn html_workers(page: &mut Page, r: &Report) {
    if r.workers.is_empty() {
        return;
    }
    page.h2("Workers");
    let rows: Vec<Vec<String>> = r
        .workers
        .iter()
        .map(|w| {
            vec![
                w.index.to_string(),
                w.cpu.map(|c| c.to_string()).unwrap_or_default(),
                w.devices
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                format!("{:.3}", w.usr_cpu_s),
                format!("{:.3}", w.sys_cpu_s),
                w.ctx_voluntary.to_string(),
                w.ctx_involuntary.to_string(),
            ]
        })
        .collect();
    page.table(
        &[
            "worker",
            "cpu",
            "devices",
            "usr s",
            "sys s",
            "ctx vol",
            "ctx invol",
        ]
        .map(String::from),
        &rows,
    );
}

/// What `nines doctor` found on the host, or that it was not recorded.
fn html_host(page: &mut Page, r: &Report) {
    page.h2("Host conditions");
    match &r.host {
        Some(h) => {
            let rows = host_rows(h);
            if rows.is_empty() {
                page.p("nines doctor found nothing to report on this host.");
            } else {
                page.table(&["severity".into(), "finding (nines doctor)".into()], &rows);
            }
        }
        None => {
            page.p("Not recorded for this run.");
        }
    }
}

/// A block size as people write it: 4096 -> "4 KiB", 1536 -> "1536 B".
pub fn format_block(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else if b >= 1024 && b.is_multiple_of(1024) {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n;
    (m, var.sqrt())
}

/// Whether a sample of `ios` I/Os resolves percentile `p` (with fewer, the ceil-of-rank
/// percentile is simply the max).
pub fn resolves(ios: u64, p: f64) -> bool {
    p >= 100.0 || ios >= nines_core::report::samples_to_resolve(p)
}

/// The latency column titles every HTML table row ends with: each percentile, then max.
fn latency_header(percentiles: &[f64]) -> Vec<String> {
    let mut h: Vec<String> = percentiles
        .iter()
        .map(|p| format!("p{}", format_percentile(*p)))
        .collect();
    h.push("max".into());
    h
}

/// The latency cells every HTML table row ends with: each percentile (marked
/// [`crate::html::UNRESOLVED`] when the sample is too small to resolve it), then max.
fn latency_cells(st: &DirectionStats, percentiles: &[f64]) -> Vec<String> {
    let mut cells: Vec<String> = percentiles
        .iter()
        .map(|&p| {
            if resolves(st.ios, p) {
                format_ns(st.lat_ns.percentiles.at(p).unwrap_or(0) as f64)
            } else {
                crate::html::UNRESOLVED.to_string()
            }
        })
        .collect();
    cells.push(format_ns(st.lat_ns.max_ns as f64));
    cells
}
