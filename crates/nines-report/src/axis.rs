//! Axes: scales, tick positions and labels, and the "nines" percentile scale.
//!
//! Plot values are stored in data units (nanoseconds, seconds, IOPS, or "nines" for the
//! percentile axis); an [`Axis`] says how they map to the page (linear or log10) and where the
//! labelled ticks go. Ticks are computed here rather than left to the plotting crate so that they
//! can be tested and so that log and percentile axes get ticks a reader expects (decades, 99.9).

/// How data values map to the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Linear,
    /// log10 of the value; values <= 0 cannot be shown.
    Log10,
    /// The percentile axis: the value is already `nines_x(p)` = -log10(1 - p/100), plotted
    /// linearly, labelled as percentiles (and "max" one step beyond the last percentile).
    Nines,
}

/// How tick values are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelFormat {
    Plain,
    Nanoseconds,
    Seconds,
    BytesPerSecond,
    Percent,
}

/// One labelled tick at a data value.
#[derive(Debug, Clone, PartialEq)]
pub struct Tick {
    pub value: f64,
    pub label: String,
}

/// An axis: label, scale, data range and ticks.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    pub label: String,
    pub scale: Scale,
    pub min: f64,
    pub max: f64,
    pub ticks: Vec<Tick>,
}

/// The position of percentile `p` (0 < p < 100) on the nines scale: 90 -> 1, 99 -> 2, 99.9 -> 3.
/// The positive range of some values, for a log axis; (1, 10) when there is none.
pub fn log_range(vals: impl Iterator<Item = f64>) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for v in vals.filter(|v| v.is_finite() && *v > 0.0) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo.is_infinite() {
        (1.0, 10.0)
    } else {
        (lo, hi.max(lo * 1.0001))
    }
}

pub fn nines_x(p: f64) -> f64 {
    -(1.0 - p / 100.0).log10()
}

/// The inverse of [`nines_x`].
pub fn nines_p(x: f64) -> f64 {
    100.0 * (1.0 - 10f64.powf(-x))
}

/// Where "max" goes on a nines axis whose highest percentile is `p_max`: one step past it,
/// at the next whole number of nines.
pub fn nines_max_x(p_max: f64) -> f64 {
    (nines_x(p_max) + 1e-9).floor() + 1.0
}

/// A percentile written with no trailing zeros: 99.9990 -> "99.999", 50 -> "50".
pub fn format_percentile(p: f64) -> String {
    let s = format!("{p:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// A latency in nanoseconds with a readable unit (one definition, in nines-core).
pub use nines_core::units::format_ns;
use nines_core::units::sig3;

/// Bytes per second in decimal units: "512 B/s", "1.5 MB/s".
pub fn format_bytes_per_s(b: f64) -> String {
    // Decimal units, as the terminal table's MB/s (and fio's MB/s).
    const UNITS: [&str; 5] = ["B/s", "kB/s", "MB/s", "GB/s", "TB/s"];
    let mut v = b;
    let mut i = 0;
    while v.abs() >= 1000.0 && i + 1 < UNITS.len() {
        v /= 1000.0;
        i += 1;
    }
    format!("{} {}", sig3(v), UNITS[i])
}

/// A plain number with SI suffix for large values: 1200 -> "1.2k", 2500000 -> "2.5M".
pub fn format_plain(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{}G", sig3(v / 1e9))
    } else if a >= 1e6 {
        format!("{}M", sig3(v / 1e6))
    } else if a >= 1e4 {
        format!("{}k", sig3(v / 1e3))
    } else {
        sig3(v)
    }
}

/// Three significant digits without trailing zeros.
pub fn format_value(v: f64, f: LabelFormat) -> String {
    match f {
        LabelFormat::Plain => format_plain(v),
        LabelFormat::Nanoseconds => format_ns(v),
        LabelFormat::Seconds => format!("{} s", sig3(v)),
        LabelFormat::BytesPerSecond => format_bytes_per_s(v),
        LabelFormat::Percent => format!("{}%", sig3(v)),
    }
}

impl Axis {
    /// The percentile axis from the lowest to the highest percentile plotted, with "max" one
    /// step beyond when `with_max`. Ticks at 50, 90, 99, 99.9, ... up to the highest.
    pub fn nines(label: &str, p_min: f64, p_max: f64, with_max: bool) -> Axis {
        assert!(p_min > 0.0 && p_max < 100.0 && p_min <= p_max);
        let x_lo = nines_x(p_min).min(nines_x(50.0));
        let x_top = if with_max {
            nines_max_x(p_max)
        } else {
            nines_x(p_max)
        };
        let mut ticks = Vec::new();
        if p_min <= 50.0 + 1e-9 {
            ticks.push(Tick {
                value: nines_x(50.0),
                label: "50".into(),
            });
        }
        let mut k = 1.0;
        while k <= nines_x(p_max) + 1e-9 {
            ticks.push(Tick {
                value: k,
                label: format_percentile(nines_p(k)),
            });
            k += 1.0;
        }
        if with_max {
            ticks.push(Tick {
                value: x_top,
                label: "max".into(),
            });
        }
        let pad = 0.15;
        Axis {
            label: label.into(),
            scale: Scale::Nines,
            min: x_lo - pad,
            max: x_top + pad,
            ticks,
        }
    }

    /// A log10 axis covering [lo, hi] (both > 0), widened to whole decades when that costs
    /// less than one decade, with ticks at each decade (and 2x, 5x when there are few decades).
    pub fn log(label: &str, lo: f64, hi: f64, format: LabelFormat) -> Axis {
        let (lo, hi) = sanitize_log_range(lo, hi);
        let d_lo = lo.log10().floor();
        let d_hi = hi.log10().ceil();
        let min = 10f64.powf(d_lo);
        let max = 10f64.powf(d_hi);
        let decades = (d_hi - d_lo) as i32;
        let mut ticks = Vec::new();
        let mults: &[f64] = if decades <= 2 {
            &[1.0, 2.0, 5.0]
        } else {
            &[1.0]
        };
        let mut d = d_lo;
        while d <= d_hi + 1e-9 {
            for m in mults {
                let v = m * 10f64.powf(d);
                if v >= min * (1.0 - 1e-9) && v <= max * (1.0 + 1e-9) {
                    ticks.push(Tick {
                        value: v,
                        label: format_value(v, format),
                    });
                }
            }
            d += 1.0;
        }
        Axis {
            label: label.into(),
            scale: Scale::Log10,
            min,
            max,
            ticks,
        }
    }

    /// A log axis for powers of two (queue depths): ticks at each power of two in range.
    pub fn log2(label: &str, lo: f64, hi: f64) -> Axis {
        let (lo, hi) = sanitize_log_range(lo, hi);
        let e_lo = lo.log2().floor();
        let e_hi = hi.log2().ceil().max(e_lo + 1.0);
        let step = ((e_hi - e_lo) / 10.0).ceil().max(1.0);
        let mut ticks = Vec::new();
        let mut e = e_lo;
        while e <= e_hi + 1e-9 {
            let v = 2f64.powf(e);
            ticks.push(Tick {
                value: v,
                label: format_plain(v),
            });
            e += step;
        }
        // Margins so that the end points are not on the frame.
        Axis {
            label: label.into(),
            scale: Scale::Log10,
            min: 2f64.powf(e_lo - 0.25),
            max: 2f64.powf(e_hi + 0.25),
            ticks,
        }
    }

    /// A categorical axis: category i sits at x = i, labelled with its name.
    pub fn categories(label: &str, names: &[String]) -> Axis {
        Axis {
            label: label.into(),
            scale: Scale::Linear,
            min: -0.5,
            max: names.len().max(1) as f64 - 0.5,
            ticks: names
                .iter()
                .enumerate()
                .map(|(i, n)| Tick {
                    value: i as f64,
                    label: n.clone(),
                })
                .collect(),
        }
    }

    /// A linear axis covering [lo, hi] with about six "nice" ticks (1, 2, 5 x 10^k steps).
    pub fn linear(label: &str, lo: f64, hi: f64, format: LabelFormat) -> Axis {
        let (lo, hi) = if !(lo.is_finite() && hi.is_finite()) {
            (0.0, 1.0)
        } else if hi - lo <= 0.0 {
            let w = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            (lo - w, hi + w)
        } else {
            (lo, hi)
        };
        // Byte rates get steps that are round in their (decimal) unit: 250 MB/s.
        let unit = if format == LabelFormat::BytesPerSecond {
            let mut u = 1.0;
            while hi.abs().max(lo.abs()) / u >= 1000.0 && u < 1e12 {
                u *= 1000.0;
            }
            u
        } else {
            1.0
        };
        // The finest round step (1, 2, 2.5, 5 x 10^k in the unit) giving at most 8 intervals,
        // so the axis ends close to the data.
        let range = (hi - lo) / unit;
        let mag = 10f64.powf(range.log10().floor() - 1.0);
        let step = [1.0, 2.0, 2.5, 5.0, 10.0, 20.0, 25.0, 50.0, 100.0]
            .iter()
            .map(|m| m * mag * unit)
            .find(|s| (hi / s).ceil() - (lo / s).floor() <= 8.0)
            .unwrap_or(100.0 * mag * unit);
        let min = (lo / step).floor() * step;
        let max = (hi / step).ceil() * step;
        let mut ticks = Vec::new();
        let n = ((max - min) / step).round() as i64;
        for i in 0..=n.min(100) {
            let v = min + i as f64 * step;
            let v = if v.abs() < step * 1e-9 { 0.0 } else { v };
            ticks.push(Tick {
                value: v,
                label: format_value(v, format),
            });
        }
        Axis {
            label: label.into(),
            scale: Scale::Linear,
            min,
            max,
            ticks,
        }
    }

    /// A linear axis that ends exactly at `hi` (a time axis ending at the run's end): the ticks
    /// of [`Axis::linear`] up to `hi`, without the round step past it.
    pub fn linear_to_end(label: &str, lo: f64, hi: f64, format: LabelFormat) -> Axis {
        let mut a = Axis::linear(label, lo, hi, format);
        if hi.is_finite() && hi > a.min {
            a.max = hi;
            let eps = (hi - a.min) * 1e-9;
            a.ticks.retain(|t| t.value <= hi + eps);
        }
        a
    }

    /// The position of a data value on the drawing coordinate (log10 for log axes).
    pub fn to_coord(&self, v: f64) -> Option<f64> {
        match self.scale {
            Scale::Linear | Scale::Nines => v.is_finite().then_some(v),
            Scale::Log10 => (v > 0.0 && v.is_finite()).then(|| v.log10()),
        }
    }

    /// The drawing-coordinate range.
    pub fn coord_range(&self) -> (f64, f64) {
        match self.scale {
            Scale::Linear | Scale::Nines => (self.min, self.max),
            Scale::Log10 => (self.min.log10(), self.max.log10()),
        }
    }
}

fn sanitize_log_range(lo: f64, hi: f64) -> (f64, f64) {
    let lo = if lo.is_finite() && lo > 0.0 { lo } else { 1.0 };
    let hi = if hi.is_finite() && hi > lo {
        hi
    } else {
        lo * 10.0
    };
    (lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nines_scale_places_each_nine_one_step_apart() {
        assert!((nines_x(90.0) - 1.0).abs() < 1e-12);
        assert!((nines_x(99.9999) - 6.0).abs() < 1e-9);
        assert!((nines_p(3.0) - 99.9).abs() < 1e-9);
        assert_eq!(nines_max_x(99.9999), 7.0);
        assert_eq!(nines_max_x(99.0), 3.0);
    }

    #[test]
    fn nines_axis_ticks() {
        let a = Axis::nines("percentile", 50.0, 99.9999, true);
        let labels: Vec<_> = a.ticks.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "50", "90", "99", "99.9", "99.99", "99.999", "99.9999", "max"
            ]
        );
        assert!(a.min < nines_x(50.0) && a.max > 7.0);
    }

    #[test]
    fn log_axis_decades() {
        let a = Axis::log("latency", 12_000.0, 3_400_000.0, LabelFormat::Nanoseconds);
        assert_eq!(a.min, 10_000.0);
        assert_eq!(a.max, 10_000_000.0);
        let labels: Vec<_> = a.ticks.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(labels, ["10 µs", "100 µs", "1 ms", "10 ms"]);
        let b = Axis::log("latency", 20.0, 70.0, LabelFormat::Plain);
        assert_eq!(b.ticks.len(), 4, "{:?}", b.ticks); // 10 20 50 100
    }

    #[test]
    fn log2_and_category_axes() {
        let a = Axis::log2("QD", 1.0, 256.0);
        let labels: Vec<_> = a.ticks.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(labels, ["1", "2", "4", "8", "16", "32", "64", "128", "256"]);
        assert!(a.min < 1.0 && a.max > 256.0);
        let c = Axis::categories("engine", &["io_uring".into(), "io_uring-poll".into()]);
        assert_eq!(c.ticks[1].value, 1.0);
        assert_eq!((c.min, c.max), (-0.5, 1.5));
    }

    #[test]
    fn linear_axis_nice_steps() {
        let a = Axis::linear("t", 0.0, 9.3, LabelFormat::Seconds);
        assert_eq!(a.min, 0.0);
        assert_eq!(a.max, 10.0);
        assert_eq!(a.ticks[1].value, 2.0);
        assert_eq!(a.ticks.last().unwrap().label, "10 s");
        let b = Axis::linear("t", 0.0, 160.0, LabelFormat::Seconds);
        assert_eq!((b.min, b.max, b.ticks[1].value), (0.0, 160.0, 20.0));
        let c = Axis::linear("t", 0.0, 3.01, LabelFormat::Seconds);
        assert_eq!(c.max, 3.5);
    }

    #[test]
    fn an_axis_to_the_end_stops_at_it() {
        let a = Axis::linear_to_end("t", 0.0, 3.0017, LabelFormat::Seconds);
        assert_eq!((a.min, a.max), (0.0, 3.0017));
        assert_eq!(a.ticks.last().unwrap().label, "3 s");
        assert_eq!(a.ticks.len(), 7);
    }

    #[test]
    fn byte_rate_ticks_are_round_in_decimal_units() {
        let a = Axis::linear("bw", 0.0, 1.8e9, LabelFormat::BytesPerSecond);
        let labels: Vec<_> = a.ticks.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "0 B/s",
                "250 MB/s",
                "500 MB/s",
                "750 MB/s",
                "1 GB/s",
                "1.25 GB/s",
                "1.5 GB/s",
                "1.75 GB/s",
                "2 GB/s"
            ]
        );
    }

    #[test]
    fn formats() {
        assert_eq!(format_ns(812.0), "812 ns");
        assert_eq!(format_ns(12_345.0), "12.3 µs");
        assert_eq!(format_ns(4_100_000.0), "4.1 ms");
        assert_eq!(format_bytes_per_s(1.5e6), "1.5 MB/s");
        assert_eq!(format_percentile(99.999), "99.999");
        assert_eq!(format_plain(25_000.0), "25k");
    }
}
