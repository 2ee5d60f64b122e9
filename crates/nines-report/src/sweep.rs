//! Sweeps: one JSON with every point of a characterisation over one parameter (queue depth,
//! write share, engine), its figures (paper 002, Fig. 2-5 and 8) and HTML page. The binary runs
//! the points; this module only describes and draws them.

use crate::axis::log_range;
use nines_core::op::Op;
use nines_core::report::Report;
use serde::{Deserialize, Serialize};

use crate::axis::{
    Axis, LabelFormat, format_bytes_per_s, format_ns, format_percentile, format_plain,
};
use crate::html::{Figure, Page};
use crate::plot::{Plot, PlotError, Series, SeriesStyle, palette};
use nines_core::units::percentile_key;

pub const SWEEP_SCHEMA_NAME: &str = "nines-sweep";
pub const SWEEP_SCHEMA_VERSION: u32 = 1;

/// The percentile the sweeps plot as "the tail" (paper 002 uses five nines).
pub const TAIL_PERCENTILE: &str = "99.999";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SweepParam {
    Qd,
    WriteFraction,
    Engine,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sweep {
    pub schema: String,
    pub schema_version: u32,
    pub parameter: SweepParam,
    /// "profile" or "sim --device PRESET".
    pub driver: String,
    /// The options passed through to every point.
    pub args: Vec<String>,
    pub points: Vec<SweepPoint>,
    /// Things the reader should know (points skipped and why).
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    pub rw: String,
    pub iodepth: u32,
    /// Share of writes in percent (write-fraction sweeps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_pct: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// Why the point has no result (e.g. polling not available).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<PointMetrics>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<Report>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirMetrics {
    pub ios: u64,
    pub iops: f64,
    pub bw_bytes: f64,
    pub mean_ns: f64,
    /// The tail percentile's key ("99.999", or the highest the run recorded if not that).
    pub tail_percentile: String,
    pub tail_ns: u64,
    pub max_ns: u64,
}

impl DirMetrics {
    /// The tail latency, or NaN when the point's I/Os cannot resolve its percentile (it would
    /// only be the max): figures leave NaN undrawn, the table shows n/r.
    pub fn tail_or_nan(&self) -> f64 {
        let resolved = self
            .tail_percentile
            .parse::<f64>()
            .is_ok_and(|p| crate::run::resolves(self.ios, p));
        if resolved {
            self.tail_ns as f64
        } else {
            f64::NAN
        }
    }
}

/// The sentence a figure with a tail adds when some points could not resolve it.
fn unresolved_tail_sentence(points: &[&SweepPoint], tail: &str) -> &'static str {
    let any = points.iter().any(|p| {
        Op::ALL.iter().any(|&op| {
            p.metrics
                .as_ref()
                .and_then(|m| m.dir(op))
                .is_some_and(|d| d.ios > 0 && tail_value(p, op, tail).is_nan())
        })
    });
    if any {
        " Tail points whose run had too few I/Os to resolve the percentile (n/r in the table: it would only be the max) are not drawn."
    } else {
        ""
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointMetrics {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<DirMetrics>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<DirMetrics>,
    /// User + system CPU seconds of the I/O workers, when the run recorded them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_s: Option<f64>,
    /// CPU time per I/O.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_per_io_ns: Option<f64>,
}

impl PointMetrics {
    pub fn dir(&self, op: Op) -> Option<&DirMetrics> {
        match op {
            Op::Read => self.read.as_ref(),
            Op::Write => self.write.as_ref(),
        }
    }
}

/// The numbers a sweep plots, from one point's report.
pub fn metrics(r: &Report) -> PointMetrics {
    let dir = |op: Op| -> Option<DirMetrics> {
        let a = r.aggregate.dir(op);
        if a.ios == 0 {
            return None;
        }
        let p = &a.lat_ns.percentiles;
        let (key, v) = match p.get(TAIL_PERCENTILE) {
            Some(v) => (TAIL_PERCENTILE.to_string(), v),
            None => p
                .iter()
                .last()
                .map(|(k, v)| (k.to_string(), v))
                .unwrap_or(("max".into(), a.lat_ns.max_ns)),
        };
        Some(DirMetrics {
            ios: a.ios,
            iops: a.iops,
            bw_bytes: a.bw_bytes,
            mean_ns: a.lat_ns.mean_ns,
            tail_percentile: key,
            tail_ns: v,
            max_ns: a.lat_ns.max_ns,
        })
    };
    let ios = r.aggregate.read.ios + r.aggregate.write.ios;
    let cpu_s = (!r.workers.is_empty()).then(|| {
        r.workers
            .iter()
            .map(|w| w.usr_cpu_s + w.sys_cpu_s)
            .sum::<f64>()
    });
    PointMetrics {
        read: dir(Op::Read),
        write: dir(Op::Write),
        cpu_s,
        cpu_per_io_ns: cpu_s.filter(|_| ios > 0).map(|c| c * 1e9 / ios as f64),
    }
}

/// The tail percentile the figures and the table show: the points' own (99.999) when every
/// point resolves it, else the highest recorded percentile, up to it, that every point's I/Os
/// resolve (short points at a few thousand IOPS resolve p99.9, not p99.999), so that the tail
/// figure is not empty. Points whose run JSON is not in the sweep keep their own.
fn tail_label(points: &[&SweepPoint]) -> String {
    let own = points
        .iter()
        .filter_map(|p| p.metrics.as_ref())
        .flat_map(|m| [m.read.as_ref(), m.write.as_ref()])
        .flatten()
        .map(|d| d.tail_percentile.clone())
        .next()
        .unwrap_or_else(|| TAIL_PERCENTILE.into());
    let Ok(own_p) = own.parse::<f64>() else {
        return own;
    };
    let fewest = points
        .iter()
        .filter_map(|p| p.metrics.as_ref())
        .flat_map(|m| [m.read.as_ref(), m.write.as_ref()])
        .flatten()
        .map(|d| d.ios)
        .filter(|&n| n > 0)
        .min()
        .unwrap_or(0);
    if crate::run::resolves(fewest, own_p) || points.iter().any(|p| p.report.is_none()) {
        return own;
    }
    points
        .iter()
        .find_map(|p| p.report.as_ref())
        .map(|r| r.config.percentiles.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|&p| p < 100.0 && p <= own_p && crate::run::resolves(fewest, p))
        .max_by(f64::total_cmp)
        .map(format_percentile)
        .unwrap_or(own)
}

/// A point's tail latency at `tail` (a key of [`tail_label`]) in direction `op`: from its
/// metrics when they hold that percentile, else from its run JSON; NaN when the point's I/Os
/// cannot resolve it or it was not recorded (figures leave NaN undrawn, the table shows n/r).
fn tail_value(p: &SweepPoint, op: Op, tail: &str) -> f64 {
    let Some(d) = p.metrics.as_ref().and_then(|m| m.dir(op)) else {
        return f64::NAN;
    };
    if d.tail_percentile == tail {
        return d.tail_or_nan();
    }
    let Ok(pct) = tail.parse::<f64>() else {
        return f64::NAN;
    };
    p.report
        .as_ref()
        .and_then(|r| {
            let a = r.aggregate.dir(op);
            crate::run::resolves(a.ios, pct)
                .then(|| a.lat_ns.percentiles.get(&percentile_key(pct)))
                .flatten()
        })
        .map_or(f64::NAN, |v| v as f64)
}

/// The direction a point's workload is about: writes for write-only workloads, else reads.
fn main_op(rw: &str) -> Op {
    if rw == "write" || rw == "randwrite" {
        Op::Write
    } else {
        Op::Read
    }
}

/// The sweep's figures.
pub fn figures(s: &Sweep) -> Vec<Figure> {
    let ok: Vec<&SweepPoint> = s.points.iter().filter(|p| p.metrics.is_some()).collect();
    if ok.is_empty() {
        return Vec::new();
    }
    let tail = tail_label(&ok);
    match s.parameter {
        SweepParam::Qd => qd_figures(&ok, &tail),
        SweepParam::WriteFraction => write_fraction_figures(&ok, &tail),
        SweepParam::Engine => engine_figures(&s.points.iter().collect::<Vec<_>>(), &tail),
    }
}

fn qd_figures(ok: &[&SweepPoint], tail: &str) -> Vec<Figure> {
    let mut rws: Vec<&str> = Vec::new();
    for p in ok {
        if !rws.contains(&p.rw.as_str()) {
            rws.push(&p.rw);
        }
    }
    let qd_lo = ok.iter().map(|p| p.iodepth).min().unwrap_or(1) as f64;
    let qd_hi = ok.iter().map(|p| p.iodepth).max().unwrap_or(1) as f64;
    type Pick = fn(&SweepPoint, &DirMetrics, Op, &str) -> f64;
    let specs: [(&str, String, Pick, bool); 3] = [
        (
            "qd-mean",
            "average latency".into(),
            |_, d, _, _| d.mean_ns,
            true,
        ),
        (
            "qd-tail",
            format!("{tail}% latency"),
            |p, _, op, tail| tail_value(p, op, tail),
            true,
        ),
        (
            "qd-bandwidth",
            "bandwidth".into(),
            |_, d, _, _| d.bw_bytes,
            false,
        ),
    ];
    let mut figs = Vec::new();
    for (id, what, pick, is_latency) in specs {
        let mut series = Vec::new();
        for (i, rw) in rws.iter().enumerate() {
            let op = main_op(rw);
            let mut line = Series::new(*rw, SeriesStyle::LinePoints, palette(i));
            let mut pts: Vec<(f64, f64)> = ok
                .iter()
                .filter(|p| p.rw == *rw)
                .filter_map(|p| {
                    let d = p.metrics.as_ref()?.dir(op)?;
                    Some((p.iodepth as f64, pick(p, d, op, tail)))
                })
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            line.points = pts;
            series.push(line);
        }
        let (lo, hi) = log_range(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
        let y = if is_latency {
            Axis::log(&what, lo, hi, LabelFormat::Nanoseconds)
        } else {
            Axis::linear(&what, 0.0, hi, LabelFormat::BytesPerSecond)
        };
        let mut plot = Plot::new(
            format!("{what} vs queue depth"),
            Axis::log2("queue depth", qd_lo, qd_hi),
            y,
        );
        plot.series = series;
        figs.push(Figure {
            id: id.into(),
            caption: format!(
                "{} of each workload against queue depth: {}.{}",
                capitalise(&what),
                if is_latency {
                    "where deeper queues start to cost latency"
                } else {
                    "where deeper queues stop adding throughput"
                },
                if id == "qd-tail" {
                    unresolved_tail_sentence(ok, tail)
                } else {
                    ""
                }
            ),
            plot,
        });
    }
    figs
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

fn write_fraction_figures(ok: &[&SweepPoint], tail: &str) -> Vec<Figure> {
    let mut pts: Vec<(f64, &SweepPoint, &PointMetrics)> = ok
        .iter()
        .filter_map(|p| Some((p.write_pct? as f64, *p, p.metrics.as_ref()?)))
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    if pts.is_empty() {
        return Vec::new();
    }
    // Reads and writes, each with its average and tail; a direction a point did not issue (no
    // writes at 0%, no reads at 100%) has no point there.
    let mut series = Vec::new();
    for (name, dir, colours) in [("read", 0usize, (0usize, 3usize)), ("write", 1, (1, 2))] {
        let of = |p: &SweepPoint, m: &PointMetrics| -> Option<(f64, f64)> {
            let (d, op) = if dir == 0 {
                (m.read.as_ref(), Op::Read)
            } else {
                (m.write.as_ref(), Op::Write)
            };
            let d = d?;
            (d.ios > 0).then(|| (d.mean_ns, tail_value(p, op, tail)))
        };
        let pts: Vec<(f64, (f64, f64))> = pts
            .iter()
            .filter_map(|(w, p, m)| Some((*w, of(p, m)?)))
            .collect();
        if pts.is_empty() {
            continue;
        }
        let mut mean = Series::new(
            format!("{name} average"),
            SeriesStyle::LinePoints,
            palette(colours.0),
        );
        mean.points = pts.iter().map(|(w, (m, _))| (*w, *m)).collect();
        let mut t = Series::new(
            format!("{name} {tail}%"),
            SeriesStyle::LinePoints,
            palette(colours.1),
        );
        t.points = pts.iter().map(|(w, (_, t))| (*w, *t)).collect();
        series.push(mean);
        series.push(t);
    }
    let (lo, hi) = log_range(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
    let w_hi = pts.last().map_or(100.0, |p| p.0).max(1.0);
    let mut x = Axis::linear("writes in the mix", 0.0, w_hi, LabelFormat::Percent);
    let pad = (x.max - x.min) * 0.04;
    x.min -= pad;
    x.max += pad;
    let mut plot = Plot::new(
        "latency vs share of writes",
        x,
        Axis::log("latency", lo, hi, LabelFormat::Nanoseconds),
    );
    plot.series = series;
    vec![Figure {
        id: "write-fraction".into(),
        caption: format!(
            "Read and write latency, average and tail, as the share of writes in the mix grows: how much interleaved writes cost the reads.{}",
            unresolved_tail_sentence(ok, tail)
        ),
        plot,
    }]
}

fn engine_figures(all: &[&SweepPoint], tail: &str) -> Vec<Figure> {
    let names: Vec<String> = all
        .iter()
        .map(|p| {
            let e = p.engine.clone().unwrap_or_else(|| "?".into());
            if p.metrics.is_some() {
                e
            } else {
                format!("{e} (n/a)")
            }
        })
        .collect();
    let ok = all;
    let mut figs = Vec::new();
    let mut lat = Vec::new();
    for (k, op) in Op::ALL.iter().enumerate() {
        let mut mean = Series::new(
            format!("{} average", op.name()),
            SeriesStyle::LinePoints,
            palette(2 * k),
        );
        let mut t = Series::new(
            format!("{} {tail}%", op.name()),
            SeriesStyle::LinePoints,
            palette(2 * k + 1),
        );
        for (i, p) in ok.iter().enumerate() {
            if let Some(d) = p.metrics.as_ref().and_then(|m| m.dir(*op)) {
                mean.points.push((i as f64, d.mean_ns));
                t.points.push((i as f64, tail_value(p, *op, tail)));
            }
        }
        if !mean.points.is_empty() {
            lat.push(mean);
            lat.push(t);
        }
    }
    let (lo, hi) = log_range(lat.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
    let mut plot = Plot::new(
        "latency by completion method",
        Axis::categories("engine", &names),
        Axis::log("latency", lo, hi, LabelFormat::Nanoseconds),
    );
    plot.series = lat;
    figs.push(Figure {
        id: "engines-latency".into(),
        caption: format!(
            "Average and tail latency with each engine: what the I/O interface itself adds.{}",
            unresolved_tail_sentence(all, tail)
        ),
        plot,
    });
    let cpu: Vec<(f64, f64)> = ok
        .iter()
        .enumerate()
        .filter_map(|(i, p)| Some((i as f64, p.metrics.as_ref()?.cpu_per_io_ns?)))
        .collect();
    if !cpu.is_empty() {
        let hi = cpu.iter().map(|p| p.1).fold(0.0, f64::max);
        let mut plot = Plot::new(
            "CPU time per I/O by completion method",
            Axis::categories("engine", &names),
            Axis::linear(
                "CPU per I/O (usr + sys)",
                0.0,
                hi * 1.1,
                LabelFormat::Nanoseconds,
            ),
        );
        let mut s = Series::new("CPU per I/O", SeriesStyle::Points, palette(4));
        s.points = cpu;
        plot.series.push(s);
        plot.legend = false;
        figs.push(Figure {
            id: "engines-cpu".into(),
            caption:
                "Worker CPU time (user + system) per I/O with each engine: what each interface costs the host."
                    .into(),
            plot,
        });
    }
    figs
}

/// The points as table rows.
pub fn table(s: &Sweep) -> (Vec<String>, Vec<Vec<String>>) {
    let ok: Vec<&SweepPoint> = s.points.iter().filter(|p| p.metrics.is_some()).collect();
    let tail = tail_label(&ok);
    let header: Vec<String> = [
        "rw",
        "QD",
        "writes",
        "engine",
        "op",
        "IOPS",
        "bandwidth",
        "average",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        TAIL_COLUMN.into(),
        "max".into(),
        "CPU/I/O".into(),
        "note".into(),
    ])
    .collect();
    let mut rows = Vec::new();
    for p in &s.points {
        let lead = vec![
            p.rw.clone(),
            p.iodepth.to_string(),
            p.write_pct.map(|w| format!("{w}%")).unwrap_or_default(),
            p.engine.clone().unwrap_or_default(),
        ];
        match &p.metrics {
            None => {
                let mut r = lead;
                r.extend(std::iter::repeat_n(String::new(), 7));
                r.push(p.error.clone().unwrap_or_default());
                rows.push(r);
            }
            Some(m) => {
                for op in Op::ALL {
                    let Some(d) = m.dir(op) else { continue };
                    let mut r = lead.clone();
                    r.extend([
                        op.name().to_string(),
                        format_plain(d.iops),
                        format_bytes_per_s(d.bw_bytes),
                        format_ns(d.mean_ns),
                        match tail_value(p, op, &tail) {
                            v if v.is_nan() => crate::html::UNRESOLVED.to_string(),
                            v => format_ns(v),
                        },
                        format_ns(d.max_ns as f64),
                        m.cpu_per_io_ns.map(format_ns).unwrap_or_default(),
                        String::new(),
                    ]);
                    rows.push(r);
                }
            }
        }
    }
    drop_empty_columns(header, rows)
}

/// The tail column's one name in every sweep (profile or sim); [`tail_note`] says which
/// percentile it holds.
pub const TAIL_COLUMN: &str = "tail latency";

/// Which percentile the [`TAIL_COLUMN`] holds and why.
pub fn tail_note(s: &Sweep) -> String {
    let ok: Vec<&SweepPoint> = s.points.iter().filter(|p| p.metrics.is_some()).collect();
    let tail = tail_label(&ok);
    if tail == TAIL_PERCENTILE {
        format!("{TAIL_COLUMN}: p{tail}.")
    } else {
        format!(
            "{TAIL_COLUMN}: p{tail}, the highest percentile up to p{TAIL_PERCENTILE} that every point's I/Os resolve."
        )
    }
}

/// The table without the columns no row fills (the write share of a QD sweep, the engine of
/// a profile sweep over QD, notes when nothing failed).
fn drop_empty_columns(
    header: Vec<String>,
    rows: Vec<Vec<String>>,
) -> (Vec<String>, Vec<Vec<String>>) {
    let keep: Vec<bool> = (0..header.len())
        .map(|i| rows.iter().any(|r| r.get(i).is_some_and(|c| !c.is_empty())))
        .collect();
    let pick = |v: Vec<String>| -> Vec<String> {
        v.into_iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(c, _)| c)
            .collect()
    };
    (pick(header), rows.into_iter().map(pick).collect())
}

/// Aligned text of [`table`] for the terminal.
pub fn text_table(s: &Sweep) -> String {
    let (h, rows) = table(s);
    let mut widths: Vec<usize> = h.iter().map(|c| c.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in std::iter::once(&h).chain(rows.iter()) {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            line.push_str(c);
            line.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.push_str(&tail_note(s));
    out.push('\n');
    out
}

pub fn render_html(s: &Sweep, figs: &[Figure]) -> Result<String, PlotError> {
    let what = match s.parameter {
        SweepParam::Qd => "queue depth",
        SweepParam::WriteFraction => "write share",
        SweepParam::Engine => "engine",
    };
    let title = format!("nines sweep over {what} ({})", s.driver);
    let mut page = Page::new(&title);
    for n in &s.notes {
        page.warning(n);
    }
    page.p(&format!(
        "Options passed to every point: {}",
        s.args.join(" ")
    ));
    for f in figs {
        page.figure(f)?;
    }
    page.h2("Points");
    let (h, rows) = table(s);
    page.table(&h, &rows);
    page.p(&tail_note(s));
    if rows.iter().flatten().any(|c| c == crate::html::UNRESOLVED) {
        page.p(&format!(
            "{}: not resolved, too few I/Os at that point for the tail percentile (with fewer it is only the max).",
            crate::html::UNRESOLVED
        ));
    }
    Ok(page.finish(&title))
}

impl Sweep {
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("sweeps serialise");
        s.push('\n');
        s
    }

    pub fn from_json(s: &str) -> Result<Sweep, String> {
        let v: serde_json::Value = serde_json::from_str(s).map_err(|e| e.to_string())?;
        if v.get("schema").and_then(|x| x.as_str()) != Some(SWEEP_SCHEMA_NAME) {
            return Err("not a nines sweep file (schema is not \"nines-sweep\")".into());
        }
        serde_json::from_value(v).map_err(|e| e.to_string())
    }
}
