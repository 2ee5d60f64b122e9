//! Several runs side by side: a table of every percentile with ratios to the first run (marked
//! better or worse), overlaid percentile curves, and the across-device mean and spread per run.
//! Runs that differ in one setting compare as its effect; in several, with a warning.

use crate::axis::log_range;
use nines_core::op::Op;
use nines_core::report::{PercentileSpread, Report};
use nines_core::units::percentile_key;

use crate::axis::{
    Axis, LabelFormat, format_ns, format_percentile, format_plain, nines_max_x, nines_x,
};
use crate::html::{Figure, Page};
use crate::plot::{Plot, PlotError, Series, SeriesStyle, palette};

/// One run and the name it goes by in tables and legends.
pub struct Run {
    pub label: String,
    pub report: Report,
}

/// How a line of [`differences`] about a single difference ends.
pub const SHOWS_ITS_EFFECT: &str = "the comparison shows its effect.";

/// What differs between each run and the first, one line per run that differs.
pub fn differences(runs: &[Run]) -> Vec<String> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    let a = &first.report;
    let mut out = Vec::new();
    for r in &runs[1..] {
        let b = &r.report;
        let mut d: Vec<String> = Vec::new();
        let names = |x: &Report| x.devices.iter().map(|d| d.name.clone()).collect::<Vec<_>>();
        let (na, nb) = (names(a), names(b));
        if na != nb {
            d.push(format!("devices ({} vs {})", list(&na), list(&nb)));
        }
        if a.kind != b.kind {
            d.push(format!("kind ({:?} vs {:?})", a.kind, b.kind).to_lowercase());
        }
        if a.config.engine != b.config.engine {
            d.push(format!(
                "engine ({} vs {})",
                a.config.engine, b.config.engine
            ));
        }
        let (wa, wb) = (&a.config.workload, &b.config.workload);
        if wa.rw != wb.rw {
            d.push(format!("rw ({} vs {})", wa.rw, wb.rw));
        }
        if wa.rw == nines_core::workload::RwMode::RandRw && wa.read_mix_pct != wb.read_mix_pct {
            d.push(format!(
                "read share ({}% vs {}%)",
                wa.read_mix_pct, wb.read_mix_pct
            ));
        }
        if wa.block_size_bytes != wb.block_size_bytes {
            d.push(format!(
                "block size ({} vs {})",
                wa.block_size_bytes, wb.block_size_bytes
            ));
        }
        if wa.iodepth != wb.iodepth {
            d.push(format!("iodepth ({} vs {})", wa.iodepth, wb.iodepth));
        }
        if wa.rate_iops != wb.rate_iops {
            d.push(format!("rate ({:?} vs {:?})", wa.rate_iops, wb.rate_iops));
        }
        if wa.distribution != wb.distribution {
            d.push(format!(
                "distribution ({} vs {})",
                wa.distribution, wb.distribution
            ));
        }
        if a.config.percentiles != b.config.percentiles {
            d.push("percentiles requested".into());
        }
        // Every other setting the JSON records, generically: what is not in the list above
        // (real-time priority, a rebuild, SQPOLL, the layout's options ...) is named too.
        let (sa, sb) = (settings(a), settings(b));
        let keys: std::collections::BTreeSet<&String> = sa.keys().chain(sb.keys()).collect();
        // A setting that follows the number of devices (the simulated host's CPUs, one per
        // device by default) is that difference again, already named with the devices.
        let per_device = |va: Option<&String>, vb: Option<&String>| {
            na.len() != nb.len()
                && va.is_some_and(|v| *v == na.len().to_string())
                && vb.is_some_and(|v| *v == nb.len().to_string())
        };
        for k in keys {
            let (va, vb) = (sa.get(k), sb.get(k));
            if va != vb && !per_device(va, vb) {
                let show = |v: Option<&String>| {
                    v.map_or_else(|| "unset".to_string(), |v| crate::run::readable_value(k, v))
                };
                // The unit is in the values: `thinktime (0 ns vs 100 µs)`.
                let label = ["_ns", "_bytes", "_pct"]
                    .iter()
                    .find_map(|u| k.strip_suffix(u))
                    .unwrap_or(k);
                d.push(format!(
                    "{} ({} vs {})",
                    label.replace(['_', '.'], " "),
                    show(va),
                    show(vb)
                ));
            }
        }
        let (ta, tb) = (a.config.measured_ns as f64, b.config.measured_ns as f64);
        if ta > 0.0 && (tb / ta > 1.25 || ta / tb > 1.25) {
            d.push(format!(
                "measured time ({} vs {})",
                format_ns(ta),
                format_ns(tb)
            ));
        }
        match d.len() {
            0 => {}
            // One difference is what the comparison is about, not a caveat.
            1 => out.push(format!(
                "{} differs from {} in {} only: {SHOWS_ITS_EFFECT}",
                r.label, first.label, d[0]
            )),
            _ => out.push(format!(
                "{} differs from {} in {}; compare with care.",
                r.label,
                first.label,
                d.join(", ")
            )),
        }
    }
    out
}

/// Configuration keys (flattened, as [`settings`] names them; each a prefix) that are not
/// settings to name: what the run measured or derived (events, simulated end, I/Os issued, the
/// model's scale), where its logs went, and what the hand-written comparisons in
/// [`differences`] already name.
const NOT_SETTINGS: [&str; 29] = [
    // The device list is compared by name above; the seed picks the sample, not the setup
    // (two seeds of one setup show run-to-run variation).
    "devices",
    "seed",
    "engine",
    "percentiles",
    "measured_ns",
    "start_unix_ns",
    "lat_log",
    "hdr_log",
    "rw",
    "read_mix_pct",
    "block_size_bytes",
    "iodepth",
    "rate_iops",
    "distribution",
    "runtime_ns",
    "events",
    "sim_end_ns",
    "ios_executed",
    "io_errors",
    "interrupted",
    "merged_runs",
    "scale",
    "blocks_per_plane",
    "model_bytes_per_device",
    "over_provisioning_simulated",
    "device_logical_bytes",
    "device_models",
    "host_model.background_busy_ns",
    "host_model.cpu_wait",
];

/// A run's settings as flat `key -> value`: the workload, the driver's settings
/// (`config.extra`) and the first volume's layout options (`volume.*`), without
/// [`NOT_SETTINGS`] and without anything measured (emulation overheads and model counters, a
/// trace's replay counts).
fn settings(r: &Report) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    let mut add = |prefix: &str, v: &serde_json::Value| {
        for (k, v) in crate::html::flatten_json(v) {
            let skip = NOT_SETTINGS.iter().any(|n| k.starts_with(n))
                || k.contains("overhead_ns")
                || k.contains(".model.")
                || k.starts_with("emu.charged")
                || k.starts_with("host_model.background_tasks")
                || k.starts_with("trace.requests_replayed")
                || k.starts_with("trace.in_flight_max");
            if !skip && v != "null" {
                out.insert(format!("{prefix}{k}"), v);
            }
        }
    };
    if let Ok(w) = serde_json::to_value(&r.config.workload) {
        add("", &w);
    }
    add("", &serde_json::Value::Object(r.config.extra.clone()));
    if let Some(v) = r.devices.iter().find_map(|d| d.volume.as_ref()) {
        add("volume.", &v.options);
    }
    out
}

fn list(v: &[String]) -> String {
    if v.len() <= 4 {
        v.join(", ")
    } else {
        format!(
            "{}, {}, ... {} ({} devices)",
            v[0],
            v[1],
            v[v.len() - 1],
            v.len()
        )
    }
}

/// The percentiles of all runs, ascending, deduplicated by key.
fn all_percentiles(runs: &[Run]) -> Vec<f64> {
    let mut p: Vec<f64> = runs
        .iter()
        .flat_map(|r| r.report.config.percentiles.iter().copied())
        .filter(|p| *p > 0.0 && *p < 100.0)
        .collect();
    p.sort_by(f64::total_cmp);
    p.dedup_by(|a, b| percentile_key(*a) == percentile_key(*b));
    p
}

/// The comparison table: a header and rows of (metric, value per run, ratio per later run).
pub fn table_rows(runs: &[Run]) -> (Vec<String>, Vec<Vec<String>>) {
    let mut header = vec!["metric".to_string()];
    for (i, r) in runs.iter().enumerate() {
        header.push(r.label.clone());
        if i > 0 {
            header.push(format!("/{}", runs[0].label));
        }
    }
    let percentiles = all_percentiles(runs);
    let mut rows = Vec::new();
    for op in Op::ALL {
        if !runs.iter().any(|r| r.report.has(op)) {
            continue;
        }
        // (name, value per run; None = not measured, whether latency)
        let mut metrics: Vec<(String, Vec<Option<f64>>, bool)> = Vec::new();
        // Per metric row, per run: the run's sample cannot resolve it (shown n/r, no ratio).
        let mut unresolved: Vec<Vec<bool>> = Vec::new();
        let get = |f: &dyn Fn(&Report) -> Option<f64>| -> Vec<Option<f64>> {
            runs.iter()
                .map(|r| if r.report.has(op) { f(&r.report) } else { None })
                .collect()
        };
        metrics.push((
            format!("{} IOPS", op.name()),
            get(&|r| Some(r.aggregate.dir(op).iops)),
            false,
        ));
        metrics.push((
            format!("{} mean", op.name()),
            get(&|r| Some(r.aggregate.dir(op).lat_ns.mean_ns)),
            true,
        ));
        unresolved.extend([vec![false; runs.len()], vec![false; runs.len()]]);
        for &p in &percentiles {
            let key = percentile_key(p);
            unresolved.push(
                runs.iter()
                    .map(|r| {
                        r.report.has(op) && !crate::run::resolves(r.report.aggregate.dir(op).ios, p)
                    })
                    .collect(),
            );
            metrics.push((
                format!("{} p{}", op.name(), format_percentile(p)),
                get(&|r| {
                    r.aggregate
                        .dir(op)
                        .lat_ns
                        .percentiles
                        .get(&key)
                        .map(|v| v as f64)
                }),
                true,
            ));
        }
        metrics.push((
            format!("{} max", op.name()),
            get(&|r| Some(r.aggregate.dir(op).lat_ns.max_ns as f64)),
            true,
        ));
        unresolved.push(vec![false; runs.len()]);
        for ((name, vals, is_ns), unres) in metrics.into_iter().zip(unresolved) {
            let mut row = vec![name];
            for (i, v) in vals.iter().enumerate() {
                row.push(match v {
                    _ if unres[i] => crate::html::UNRESOLVED.into(),
                    Some(x) if is_ns => format_ns(*x),
                    Some(x) => format_plain(*x),
                    None => "-".into(),
                });
                if i > 0 {
                    row.push(match (vals[0], v) {
                        _ if unres[0] || unres[i] => "-".into(),
                        (Some(a), Some(b)) if a > 0.0 => {
                            format!("{}x{}", crate::run::format_ratio(b / a), cue(b / a, is_ns))
                        }
                        _ => "-".into(),
                    });
                }
            }
            rows.push(row);
        }
    }
    (header, rows)
}

/// Whether a ratio to the first run is better or worse: lower latency and higher IOPS are
/// better; within 5% it is neither.
fn cue(ratio: f64, is_latency: bool) -> &'static str {
    if (0.95..=1.05).contains(&ratio) || !ratio.is_finite() {
        ""
    } else if (ratio > 1.0) == is_latency {
        " worse"
    } else {
        " better"
    }
}

/// The table as aligned text for a terminal.
pub fn text_table(runs: &[Run]) -> String {
    let (header, rows) = table_rows(runs);
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: &[String]| -> String {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = widths[i] - c.chars().count();
            if i == 0 {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str("  ");
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(&header);
    for r in &rows {
        out.push_str(&line(r));
    }
    out
}

fn spread(r: &Report, op: Op) -> &[PercentileSpread] {
    r.aggregate.across_devices.dir(op)
}

/// Figures: overlaid aggregate curves, and per-run across-device mean and stddev.
pub fn figures(runs: &[Run]) -> Vec<Figure> {
    let percentiles = all_percentiles(runs);
    let (Some(&p_lo), Some(&p_hi)) = (percentiles.first(), percentiles.last()) else {
        return Vec::new();
    };
    let mut figs = Vec::new();
    for op in Op::ALL {
        if !runs.iter().any(|r| r.report.has(op)) {
            continue;
        }
        // Overlaid curves of all I/Os of each run.
        let mut curves = Vec::new();
        let mut cut = false;
        for (i, r) in runs.iter().enumerate() {
            if !r.report.has(op) {
                continue;
            }
            let a = r.report.aggregate.dir(op);
            let s = &a.lat_ns;
            let mut line = Series::new(r.label.clone(), SeriesStyle::LinePoints, palette(i));
            for &p in &percentiles {
                if !crate::run::resolves(a.ios, p) {
                    cut = true;
                    continue;
                }
                if let Some(v) = s.percentiles.get(&percentile_key(p)) {
                    line.points.push((nines_x(p), v as f64));
                }
            }
            if line.points.len() < percentiles.len() {
                // Nothing drawn through the percentiles the run cannot resolve.
                line.points.push((nines_max_x(p_hi), f64::NAN));
            }
            line.points.push((nines_max_x(p_hi), s.max_ns as f64));
            curves.push(line);
        }
        let (lo, hi) = log_range(curves.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
        let mut plot = Plot::new(
            format!("{} latency by percentile, all devices merged", op.name()),
            Axis::nines("percentile", p_lo, p_hi, true),
            Axis::log("latency", lo, hi, LabelFormat::Nanoseconds),
        );
        plot.series = curves;
        figs.push(Figure {
            id: format!("compare-{}", op.name()),
            caption: format!(
                "Each run's latency distribution over all its I/Os.{}",
                if cut {
                    " A line stops at the highest percentile its run's I/Os resolve (n/r in the tables) and its max stands alone."
                } else {
                    ""
                }
            ),
            plot,
        });
        // Fig. 12: mean and standard deviation of each percentile across devices.
        for (what, id, pick) in [
            (
                "mean",
                "mean",
                (|s: &PercentileSpread| s.mean_ns) as fn(&PercentileSpread) -> f64,
            ),
            ("standard deviation", "stddev", |s| s.stddev_ns),
        ] {
            let mut lines = Vec::new();
            let mut cut = false;
            for (i, r) in runs.iter().enumerate() {
                let sp = spread(&r.report, op);
                let devs: Vec<f64> = r
                    .report
                    .devices
                    .iter()
                    .filter(|d| d.dir(op).ios > 0)
                    .map(|d| d.dir(op).lat_ns.max_ns as f64)
                    .collect();
                if sp.is_empty() || devs.is_empty() {
                    continue;
                }
                let mut line = Series::new(
                    format!("{} ({} dev)", r.label, devs.len()),
                    SeriesStyle::LinePoints,
                    palette(i),
                );
                // At a percentile some device cannot resolve, its value is only that device's
                // max: left out, as the tables mark it n/r.
                let fewest = r
                    .report
                    .devices
                    .iter()
                    .map(|d| d.dir(op).ios)
                    .filter(|&n| n > 0)
                    .min()
                    .unwrap_or(0);
                let mut left_out = false;
                for s in sp {
                    if let Ok(p) = s.percentile.parse::<f64>()
                        && p > 0.0
                        && p < 100.0
                    {
                        if crate::run::resolves(fewest, p) {
                            line.points.push((nines_x(p), pick(s)));
                        } else {
                            left_out = true;
                        }
                    }
                }
                if left_out {
                    cut = true;
                    line.points.push((nines_max_x(p_hi), f64::NAN));
                }
                let n = devs.len() as f64;
                let m = devs.iter().sum::<f64>() / n;
                let sd = (devs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n).sqrt();
                line.points
                    .push((nines_max_x(p_hi), if id == "mean" { m } else { sd }));
                lines.push(line);
            }
            if lines.is_empty() {
                continue;
            }
            let (lo, hi) = log_range(lines.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
            let mut plot = Plot::new(
                format!("{} latency: {what} across devices", op.name()),
                Axis::nines("percentile", p_lo, p_hi, true),
                Axis::log(what, lo, hi, LabelFormat::Nanoseconds),
            );
            plot.series = lines;
            figs.push(Figure {
                id: format!("compare-{id}-{}", op.name()),
                caption: format!(
                    "The {what} over the devices of each run at every percentile: how evenly each run's devices behave.{}{}",
                    if id == "stddev" {
                        " Where all devices agree exactly the deviation is zero, which a log scale cannot show: those points are left out."
                    } else {
                        ""
                    },
                    if cut {
                        " Percentiles that a run's device with the fewest I/Os cannot resolve (n/r in the tables) are left out; max stands alone."
                    } else {
                        ""
                    }
                ),
                plot,
            });
        }
    }
    figs
}

/// The comparison page.
pub fn render_html(runs: &[Run], figs: &[Figure]) -> Result<String, PlotError> {
    let title = format!(
        "nines compare: {}",
        runs.iter()
            .map(|r| r.label.as_str())
            .collect::<Vec<_>>()
            .join(" vs ")
    );
    let mut page = Page::new(&title);
    for w in differences(runs) {
        // A single difference is what the comparison is about: said, not warned about.
        if w.ends_with(SHOWS_ITS_EFFECT) {
            page.p(&w);
        } else {
            page.warning(&format!("Warning: {w}"));
        }
    }
    page.h2("Percentiles");
    let (h, rows) = table_rows(runs);
    page.table(&h, &rows);
    if rows.iter().flatten().any(|c| c == crate::html::UNRESOLVED) {
        page.p(&format!(
            "{}: not resolved, too few I/Os in that run for the percentile (with fewer it is only the max), so no ratio either.",
            crate::html::UNRESOLVED
        ));
    }
    page.h2("Figures");
    for f in figs {
        page.figure(f)?;
    }
    page.h2("Runs");
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let w = &r.report.config.workload;
            vec![
                r.label.clone(),
                format!("{:?}", r.report.kind).to_lowercase(),
                r.report.devices.len().to_string(),
                r.report.config.engine.clone(),
                w.rw.to_string(),
                crate::run::format_block(w.block_size_bytes),
                w.iodepth.to_string(),
                format_ns(r.report.config.measured_ns as f64),
            ]
        })
        .collect();
    page.table(
        &[
            "run", "kind", "devices", "engine", "rw", "bs", "QD", "measured",
        ]
        .map(String::from),
        &rows,
    );
    Ok(page.finish(&title))
}
