//! Structure of the run report's figures and page, on reports built from known latencies.

use nines_core::latlog::LatRecord;
use nines_core::op::Op;
use nines_core::report::{DeviceMeta, Report, ReportBuilder, RunConfig, RunKind};
use nines_core::stats::DeviceRecorder;
use nines_core::units::DEFAULT_PERCENTILES;
use nines_core::workload::WorkloadSpec;
use nines_report::axis::{Scale, nines_x};
use nines_report::plot::{DEFAULT_SIZE, hex, inspect_svg, legend_entries, palette, render_svg};
use nines_report::run::{
    LatPass1, LatPass2, RunInputs, divergence, figures, outlying_devices, percentile_figure,
    render_html, spread_figure, summary, time_figure,
};
use nines_report::spikes::SpikeParams;

/// Deterministic latencies: a smooth body from `base` up, with `tail` slow I/Os at `tail_ns`.
fn device_latencies(base: u64, n: u64, tail: u64, tail_ns: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n)
        .map(|i| base + (i * 7919 % 1000) * base / 1000)
        .collect();
    for i in 0..tail {
        v[(i * 97 % n) as usize] = tail_ns + i;
    }
    v
}

fn config() -> RunConfig {
    RunConfig {
        workload: WorkloadSpec::default(),
        engine: "io_uring".into(),
        percentiles: DEFAULT_PERCENTILES.to_vec(),
        measured_ns: 10_000_000_000,
        start_unix_ns: None,
        lat_log: None,
        hdr_log: None,
        extra: Default::default(),
    }
}

/// Eight devices; device 5 has a heavy tail (10 in 100k I/Os at 5 ms).
fn report() -> Report {
    report_n(100_000)
}

/// Eight devices of `n` reads; device 5 has a heavy tail (its 10 slowest at 5 ms).
fn report_n(n: u64) -> Report {
    let mut b = ReportBuilder::new(RunKind::Profile, config());
    for d in 0..8u64 {
        let mut rec = DeviceRecorder::new();
        let tail = if d == 5 { 10 } else { 1 };
        let tail_ns = if d == 5 {
            5_000_000
        } else {
            300_000 + d * 1000
        };
        for l in device_latencies(80_000 + d * 1000, n, tail, tail_ns) {
            rec.record(Op::Read, l, 4096);
        }
        b.device(
            DeviceMeta {
                name: format!("nvme{d}"),
                path: Some(format!("/dev/nvme{d}n1")),
                size_bytes: 1 << 30,
                cpu: Some(d as usize),
            },
            &rec,
        );
    }
    b.host(serde_json::json!({"cpu": {"governor": "performance"}}));
    b.finish()
}

#[test]
fn percentile_curves_one_line_per_device_and_the_outlier_named() {
    let r = report();
    let f = percentile_figure(&r, Op::Read).unwrap();
    assert_eq!(f.plot.series.len(), 8);
    assert!(
        percentile_figure(&r, Op::Write).is_none(),
        "no writes, no write figure"
    );
    assert_eq!(f.plot.x.scale, Scale::Nines);
    assert_eq!(f.plot.y.scale, Scale::Log10);
    // Each series: the five percentiles 100k I/Os resolve (p99.999 needs 100,001), a break,
    // then max, at the nines positions.
    let s = &f.plot.series[5];
    assert_eq!(s.points.len(), 7);
    assert!((s.points[3].0 - nines_x(99.9)).abs() < 1e-9);
    assert!(s.points[5].1.is_nan());
    assert_eq!(s.points[6].0, 7.0);
    assert_eq!(s.points[6].1, r.devices[5].read.lat_ns.max_ns as f64);
    // y axis covers every value.
    for s in &f.plot.series {
        for p in s.points.iter().filter(|p| !p.1.is_nan()) {
            assert!(p.1 >= f.plot.y.min && p.1 <= f.plot.y.max);
        }
    }
    // Only the heavy-tailed device is labelled.
    let labelled: Vec<_> = f
        .plot
        .series
        .iter()
        .filter_map(|s| s.end_label.clone())
        .collect();
    assert_eq!(labelled, ["nvme5"]);
    let out = outlying_devices(&r, Op::Read, 1.5, 5);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, 5);
    assert!(f.caption.contains("nvme5"));

    let svg = inspect_svg(&render_svg(&f.plot, DEFAULT_SIZE).unwrap());
    let legend: Vec<String> = legend_entries(&f.plot)
        .into_iter()
        .map(|e| e.name)
        .collect();
    for d in 0..8 {
        let n = svg
            .polyline_strokes
            .iter()
            .filter(|c| **c == hex(palette(d)))
            .count();
        // Its line, and a legend sample unless its curve lies under another's (then that
        // entry names it: "nvme0 = nvme1").
        let named = legend
            .iter()
            .any(|e| e.split(" = ").any(|n| n == format!("nvme{d}")));
        assert!(named, "device {d} in no legend entry: {legend:?}");
        assert!((1..=2).contains(&n), "device {d}: {n} lines");
    }
    assert!(
        legend.iter().any(|e| e == "nvme5"),
        "the outlier keeps its own entry: {legend:?}"
    );
    for label in ["50", "99.9999", "max", "percentile", "latency", "nvme5"] {
        assert!(svg.texts.iter().any(|t| t == label), "missing {label}");
    }
}

#[test]
fn spread_figure_matches_the_aggregate() {
    let r = report();
    let f = spread_figure(&r, Op::Read).unwrap();
    assert_eq!(f.plot.bands.len(), 1);
    let names: Vec<_> = f.plot.series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["mean", "fastest device", "slowest device"]);
    let mean = &f.plot.series[0];
    // The percentiles every device's 100k I/Os resolve (up to p99.99), then a break and max.
    let resolved: Vec<_> = r
        .aggregate
        .across_devices
        .read
        .iter()
        .filter(|s| s.percentile.parse::<f64>().unwrap() <= 99.99)
        .collect();
    assert_eq!(resolved.len(), 5);
    assert_eq!(mean.points.len(), 7);
    for (i, s) in resolved.iter().enumerate() {
        assert_eq!(mean.points[i].1, s.mean_ns);
        assert_eq!(f.plot.series[2].points[i].1, s.max_ns as f64);
    }
    assert!(mean.points[5].1.is_nan());
    // The last point is max: mean of the devices' maxima.
    let maxes: Vec<f64> = r
        .devices
        .iter()
        .map(|d| d.read.lat_ns.max_ns as f64)
        .collect();
    let m = maxes.iter().sum::<f64>() / 8.0;
    assert!((mean.points.last().unwrap().1 - m).abs() < 1e-6);
}

#[test]
fn divergence_found_where_the_tail_device_departs() {
    // Device 5 has 10 in 100,001 I/Os at 5 ms, ranks 99,992..100,001: p99.99 (rank 99,991) is
    // still in its body, p99.999 (rank 100,000, resolved from 100,001 I/Os) is in the tail.
    let (at, ratio) = divergence(&report_n(100_001), Op::Read, 2.0).unwrap();
    assert_eq!(at, "p99.999");
    assert!(ratio > 10.0);
    // With 100,000 I/Os p99.999 is not resolved (n/r in the tables): not where it diverges.
    let r = report();
    let (at, _) = divergence(&r, Op::Read, 2.0).unwrap();
    assert_eq!(at, "max");
    let s = summary(&r, None, None);
    // Ranked at the highest percentile every device resolves (p99.99 with 100k I/Os), where
    // nvme5 is still in its body: no device is named worst by an unresolved percentile.
    assert!(
        s.iter()
            .any(|l| l.starts_with("No read device stands out at p99.99:")),
        "{s:#?}"
    );
    assert!(
        s[1].contains("p99.999 "),
        "the 800k merged reads resolve p99.999: {s:#?}"
    );
    assert!(
        s.iter()
            .any(|l| l.contains("diverges across devices from max on")),
        "{s:#?}"
    );
    let s = summary(&report_n(100_001), None, None);
    assert!(
        s.iter()
            .any(|l| l.contains("diverges across devices from p99.999 on")),
        "{s:#?}"
    );
    assert!(s.iter().any(|l| l.contains("--lat-log")));
}

/// Per-I/O records: 4 devices at QD1, 100 µs, all stalling 20 ms every 1.5 s.
fn periodic_log() -> Vec<LatRecord> {
    let mut out = Vec::new();
    for dev in 0..4u16 {
        let mut t = 0u64;
        while t < 9_000_000_000 {
            let mut done = t + 100_000 + u64::from(dev) * 1000;
            let k = done / 1_500_000_000;
            let s = k * 1_500_000_000 + 400_000_000;
            if done > s && t < s + 20_000_000 {
                done = s + 20_000_000 + 100_000;
            }
            out.push(LatRecord {
                completion_ns: done,
                latency_ns: done - t,
                offset_bytes: 0,
                device: dev,
                op: Op::Read,
            });
            t = done;
        }
    }
    out
}

#[test]
fn latency_over_time_marks_the_planted_spikes() {
    let log = periodic_log();
    let mut p1 = LatPass1::new();
    log.iter().for_each(|r| p1.push(r));
    let s1 = p1.finish();
    let mut p2 = LatPass2::new(&s1, SpikeParams::default());
    log.iter().for_each(|r| p2.push(r));
    let names: Vec<String> = (0..4).map(|d| format!("zram{d}")).collect();
    let view = p2.finish(names, s1.median_ns);
    assert_eq!(view.spikes.periodic.len(), 1);
    let per = &view.spikes.periodic[0];
    assert!((per.period_ns as f64 - 1.5e9).abs() / 1.5e9 < 0.05);
    assert!(
        (per.duration_ns as f64 - 2e7).abs() / 2e7 < 0.05,
        "{}",
        per.duration_ns
    );
    assert!(per.together);
    let f = time_figure(&view).unwrap();
    assert_eq!(f.plot.spans.len(), 6, "one shaded span per stall");
    assert_eq!(f.plot.x.scale, Scale::Linear);
    assert_eq!(f.plot.y.scale, Scale::Log10);
    // One outlier series per device, then the p50 and p99 lines over them.
    let names: Vec<_> = f.plot.series.iter().map(|s| s.name.clone()).collect();
    assert_eq!(names.len(), 6, "{names:?}");
    assert!(names[0].starts_with("zram0 ≥"));
    assert_eq!(names[4..], ["p50", "p99"]);
    // Every stall's I/O is kept as a point.
    let points: usize = f.plot.series[..4].iter().map(|s| s.points.len()).sum();
    assert!(points >= 24, "{points}");
    assert!(f.plot.x.max >= 8.9 && f.plot.x.min <= 0.1);
    // Each 20 ms stall of every device leaves empty 10 ms columns: six gaps, which the band
    // and both lines break at (a NaN point each) instead of ramping across.
    assert_eq!(view.decimated.stretches.len(), 7);
    let breaks = |pts: &[(f64, f64)]| pts.iter().filter(|p| p.1.is_nan()).count();
    assert_eq!(breaks(&f.plot.series[4].points), 6);
    assert_eq!(breaks(&f.plot.series[5].points), 6);
    let band = &f.plot.bands[0].points;
    assert_eq!(band.iter().filter(|p| p.1.is_nan()).count(), 6);
    let svg = nines_report::plot::inspect_svg(
        &nines_report::plot::render_svg(&f.plot, nines_report::plot::DEFAULT_SIZE).unwrap(),
    );
    assert_eq!(svg.polygons, 7, "one band polygon per stretch");
    assert!(
        f.caption.contains("6 stretches without completions"),
        "{}",
        f.caption
    );

    let r = report();
    let lines = summary(&r, Some(&view), None);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("Periodic latency spikes") && l.contains("together")),
        "{lines:#?}"
    );
}

#[test]
fn spikes_from_interval_histograms_when_there_is_no_per_io_log() {
    use nines_report::intervals::{IntervalPoint, IntervalSeries};
    use nines_report::run::spikes_from_intervals;
    // 100 ms intervals over 12 s; nvme1's max jumps to 40 ms in every 15th interval (1.5 s).
    let series: Vec<IntervalSeries> = (0..3)
        .map(|d| IntervalSeries {
            device: format!("nvme{d}"),
            op: Op::Read,
            points: (0..120)
                .map(|i| IntervalPoint {
                    start_s: i as f64 * 0.1,
                    duration_s: 0.1,
                    ios: 1000,
                    p50_ns: 80_000,
                    p99_ns: 150_000,
                    max_ns: if d == 1 && i % 15 == 4 {
                        40_000_000
                    } else {
                        300_000
                    },
                })
                .collect(),
        })
        .collect();
    let r = report();
    let names: Vec<String> = r.devices.iter().map(|d| d.name.clone()).collect();
    let a = spikes_from_intervals(&series, &names, SpikeParams::default()).unwrap();
    assert_eq!(a.spikes.len(), 8);
    assert!(a.spikes.iter().all(|s| s.devices == [1]));
    assert_eq!(a.periodic.len(), 1);
    assert_eq!(a.periodic[0].period_ns, 1_500_000_000);
    let lines = summary(&r, None, Some(&a));
    assert!(
        lines.iter().any(|l| l
            .starts_with("Periodic latency spikes (interval histograms): every 1.5 s")
            && l.contains("on nvme1;")),
        "{lines:#?}"
    );
}

#[test]
fn html_page_is_self_contained_with_every_figure() {
    let r = report();
    let inp = RunInputs {
        report: &r,
        title: "nines report: test".into(),
        lat: None,
        intervals: None,
    };
    let figs = figures(&inp);
    let ids: Vec<_> = figs.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(ids, ["percentiles-read", "spread-read", "stddev-read"]);
    let html = render_html(&inp, &figs).unwrap();
    assert_eq!(html.matches("<svg").count(), 3);
    // With 100k reads each device resolves p99.99 at most; there nvme5's ten 5 ms reads are
    // beyond the rank, and the devices are alike: it is not named worst by its max.
    assert!(
        html.contains("No read device stands out at p99.99"),
        "{html}"
    );
    assert!(html.contains("governor"));
    assert!(!html.contains("<script"));
    assert!(!html.contains("src=\"http"));
}

/// QA case: zram4, zram5 at ~20 us and a file f1 100x slower (2 ms) throughout, no stalls, with
/// a few ordinary jitter I/Os at 2x. The whole run used to be one spike on every device.
fn steadily_slow_log() -> Vec<LatRecord> {
    let mut out = Vec::new();
    for dev in 0..3u16 {
        let base = if dev == 2 { 2_000_000 } else { 20_000 };
        let mut t = 0u64;
        let mut i = 0u64;
        while t < 3_000_000_000 {
            // +-10% body; jitter far below 8x the device's median: zram4 every 997th I/O 2x, zram5
            // every 97th 2x, f1 every 3rd 3x (so f1 has more points than zram4, fewer than zram5).
            let lat = if i.is_multiple_of([997, 97, 3][usize::from(dev)]) {
                base * if dev == 2 { 3 } else { 2 }
            } else {
                base - base / 10 + (i * 7919 % 100) * base / 500
            };
            t += lat;
            out.push(LatRecord {
                completion_ns: t,
                latency_ns: lat,
                offset_bytes: 0,
                device: dev,
                op: Op::Read,
            });
            i += 1;
        }
    }
    out.sort_by_key(|r| r.completion_ns);
    out
}

#[test]
fn a_steadily_slow_device_is_an_outlier_device_not_a_spike() {
    let log = steadily_slow_log();
    let mut p1 = LatPass1::new();
    log.iter().for_each(|r| p1.push(r));
    let s1 = p1.finish();
    let mut p2 = LatPass2::new(&s1, SpikeParams::default());
    log.iter().for_each(|r| p2.push(r));
    let names: Vec<String> = ["zram4", "zram5", "f1"].map(String::from).to_vec();
    let view = p2.finish(names, s1.median_ns);
    assert!(
        view.spikes.spikes.is_empty(),
        "no spike: {:?}",
        &view.spikes.spikes[..view.spikes.spikes.len().min(3)]
    );
    assert!(view.spikes.periodic.is_empty());
    let f = time_figure(&view).unwrap();
    assert!(f.plot.spans.is_empty(), "nothing shaded");
    let r = report();
    let lines = summary(&r, Some(&view), None);
    let slowest: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("Slowest device"))
        .collect();
    assert_eq!(slowest.len(), 1, "{lines:#?}");
    assert!(
        slowest[0].contains("f1, median 2") && slowest[0].contains("105x"),
        "{}",
        slowest[0]
    );
    assert!(
        !lines.iter().any(|l| l.contains("zram4, median")),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("No latency spikes")),
        "{lines:#?}"
    );
}

#[test]
fn the_densest_device_is_drawn_under_the_others() {
    // f1 (device 2) 100x slower with 3 planted stalls on zram4 (device 0): the stalls are
    // spikes, f1 is not, and zram4's few points are drawn after (over) f1's many.
    let mut log = steadily_slow_log();
    for k in 0..3u64 {
        let t = 500_000_000 + k * 900_000_000;
        log.push(LatRecord {
            completion_ns: t,
            latency_ns: 5_000_000,
            offset_bytes: 0,
            device: 0,
            op: Op::Read,
        });
    }
    log.sort_by_key(|r| r.completion_ns);
    let mut p1 = LatPass1::new();
    log.iter().for_each(|r| p1.push(r));
    let s1 = p1.finish();
    let mut p2 = LatPass2::new(&s1, SpikeParams::default());
    log.iter().for_each(|r| p2.push(r));
    let names: Vec<String> = ["zram4", "zram5", "f1"].map(String::from).to_vec();
    let view = p2.finish(names, s1.median_ns);
    assert_eq!(view.spikes.spikes.len(), 3, "{:?}", view.spikes.spikes);
    assert!(view.spikes.spikes.iter().all(|s| s.devices == [0]));
    let f = time_figure(&view).unwrap();
    assert_eq!(f.plot.spans.len(), 3);
    let pts: Vec<(&str, usize)> = f
        .plot
        .series
        .iter()
        .filter(|s| s.style == nines_report::plot::SeriesStyle::Points)
        .map(|s| (s.name.as_str(), s.points.len()))
        .collect();
    assert!(pts.windows(2).all(|w| w[0].1 >= w[1].1), "{pts:?}");
    let last = pts.last().unwrap();
    assert!(last.0.starts_with("zram4") && last.1 >= 3, "{pts:?}");
    assert!(
        pts.iter().any(|p| p.0.starts_with("f1") && p.1 > last.1),
        "{pts:?}"
    );
}

/// An interval log as `profile --hdr-log` writes it: 1 s intervals of 1000 I/Os each (one of
/// 2 s with 2000), then the sliver after the last full interval (`5.000,0.000`, 1 I/O) that used
/// to show as a drop to 0 IOPS.
fn interval_log_with_a_sliver() -> Vec<u8> {
    use hdrhistogram::serialization::V2DeflateSerializer;
    use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
    use std::time::Duration;
    let mut out = Vec::new();
    let mut ser = V2DeflateSerializer::new();
    let mut w = IntervalLogWriterBuilder::new()
        .with_base_time(std::time::UNIX_EPOCH)
        .begin_log_with(&mut out, &mut ser)
        .unwrap();
    let mut put = |start_ms: u64, len_us: u64, ios: u64| {
        let mut h = nines_core::stats::new_latency_histogram();
        for k in 0..ios {
            h.record(20_000 + k).unwrap();
        }
        w.write_histogram(
            &h,
            Duration::from_millis(start_ms),
            Duration::from_micros(len_us),
            Tag::new("f1.write"),
        )
        .unwrap();
    };
    put(0, 1_000_000, 1000);
    put(1000, 2_000_000, 2000);
    put(3000, 1_000_000, 1000);
    put(4000, 1_000_000, 1000);
    put(5000, 300, 1);
    drop(w);
    out
}

#[test]
fn a_sliver_interval_at_the_end_is_no_false_drop() {
    use nines_report::intervals::parse_interval_log;
    use nines_report::run::throughput_figures;
    let series = parse_interval_log(&interval_log_with_a_sliver()).unwrap();
    assert_eq!(series[0].points.len(), 5);
    let figs = throughput_figures(&series, 4096);
    assert_eq!(figs.len(), 2);
    for (f, per_io) in figs.iter().zip([1.0, 4096.0]) {
        let pts = &f.plot.series[0].points;
        assert_eq!(pts.len(), 4, "the sliver is left out: {pts:?}");
        for &(_, v) in pts {
            assert!((v - 1000.0 * per_io).abs() < 1e-6, "{pts:?}");
        }
        // Middles of the intervals: 0.5, 2, 3.5, 4.5 s.
        let xs: Vec<f64> = pts.iter().map(|p| p.0).collect();
        assert_eq!(xs, [0.5, 2.0, 3.5, 4.5]);
        // The time axis reaches the end of the run (the sliver ends at 5.0003 s), not the
        // middle of the last interval drawn.
        assert_eq!(f.plot.x.max, 5.0, "to the run's end, no further");
        assert!(
            f.caption
                .contains("Left out: 1 interval at the start or end"),
            "{}",
            f.caption
        );
    }
}

#[test]
fn many_devices_over_time_are_three_labelled_lines_per_direction() {
    use nines_report::intervals::{IntervalPoint, IntervalSeries};
    use nines_report::run::throughput_figures;
    // 64 devices, reads and writes: 128 unlabelled lines before. Device d does 100 + d reads
    // and 200 + d writes in each 100 ms interval.
    let series: Vec<IntervalSeries> = (0..64u64)
        .flat_map(|d| {
            Op::ALL.into_iter().map(move |op| IntervalSeries {
                device: format!("afa#{d}"),
                op,
                points: (0..3)
                    .map(|i| IntervalPoint {
                        start_s: i as f64 * 0.1,
                        duration_s: 0.1,
                        ios: if op == Op::Read { 100 + d } else { 200 + d },
                        p50_ns: 1000,
                        p99_ns: 2000,
                        max_ns: 3000,
                    })
                    .collect(),
            })
        })
        .collect();
    let figs = throughput_figures(&series, 4096);
    let f = figs.iter().find(|f| f.id == "iops-over-time").unwrap();
    assert_eq!(f.plot.series.len(), 6);
    assert!(f.plot.legend);
    let line = |name: &str| {
        f.plot
            .series
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("{name}"))
            .points
            .iter()
            .map(|p| p.1)
            .collect::<Vec<f64>>()
    };
    assert_eq!(line("read lowest device"), [1000.0; 3]);
    assert_eq!(line("read highest device"), [1630.0; 3]);
    let mean = line("write mean of 64 devices");
    assert!(mean.iter().all(|v| (v - 2315.0).abs() < 1e-9), "{mean:?}");
    // Every legend entry is a line of its own colour.
    let legend = nines_report::plot::legend_entries(&f.plot);
    assert_eq!(legend.len(), 6);
    let colours: std::collections::HashSet<_> = legend.iter().map(|e| e.color).collect();
    assert_eq!(colours.len(), 6);
}

/// One device, every read at `latency_ns`.
fn constant_report(latency_ns: u64) -> Report {
    let mut b = ReportBuilder::new(RunKind::Profile, config());
    let mut rec = DeviceRecorder::new();
    for _ in 0..1000 {
        rec.record(Op::Read, latency_ns, 4096);
    }
    b.device(
        DeviceMeta {
            name: "zram0".into(),
            path: None,
            size_bytes: 1 << 30,
            cpu: None,
        },
        &rec,
    );
    b.finish()
}

#[test]
fn compare_ratios_keep_significant_digits() {
    use nines_report::compare::{Run, table_rows};
    use nines_report::run::format_ratio;
    assert_eq!(format_ratio(25.8e3 / 20.1e6), "0.0013");
    assert_eq!(format_ratio(20.1e6 / 25.8e3), "779");
    assert_eq!(format_ratio(1.0), "1.0");
    assert_eq!(format_ratio(0.25), "0.25");
    assert_eq!(format_ratio(12.4), "12");
    let run = |label: &str, ns| Run {
        label: label.into(),
        report: constant_report(ns),
    };
    let runs = [
        run("slow", 20_100_000),
        run("fast", 25_800),
        run("slower", 20_100_000_000),
    ];
    let (_, rows) = table_rows(&runs);
    let p50 = rows.iter().find(|r| r[0] == "read p50").unwrap();
    // metric, slow, fast, /slow, slower, /slow
    assert_eq!(p50[3], "0.0013x better", "{p50:?}");
    assert_eq!(p50[5], "1000x worse", "{p50:?}");
    // Higher IOPS is better; the same within 5% carries no cue.
    let iops = rows.iter().find(|r| r[0] == "read IOPS").unwrap();
    assert_eq!(
        (iops[3].as_str(), iops[5].as_str()),
        ("1.0x", "1.0x"),
        "{iops:?}"
    );
    // One setting that differs is what is compared; several are a caveat.
    use nines_report::compare::differences;
    let mut qd8 = constant_report(25_800);
    qd8.config.workload.iodepth = 8;
    let mut other = constant_report(25_800);
    other.config.workload.iodepth = 8;
    other.config.engine = "psync".into();
    let d = differences(&[
        run("qd1", 25_800),
        Run {
            label: "qd8".into(),
            report: qd8,
        },
        Run {
            label: "x".into(),
            report: other,
        },
    ]);
    assert_eq!(
        d,
        [
            "qd8 differs from qd1 in iodepth (1 vs 8) only: the comparison shows its effect.",
            "x differs from qd1 in engine (io_uring vs psync), iodepth (1 vs 8); compare with care."
        ]
    );
    // Every setting the JSON holds is compared, not a hand list: the real-time priority beside
    // the engine ("differs in engine only" hid it), a rebuild in the volume's options, the
    // thinktime; what a run measured (simulator events) is not a setting.
    let mut rt = constant_report(25_800);
    rt.config.engine = "psync".into();
    rt.config
        .extra
        .insert("rt_priority".into(), serde_json::json!(50));
    rt.config
        .extra
        .insert("events".into(), serde_json::json!(9));
    rt.config.workload.thinktime_ns = 100_000;
    let mut rebuild = constant_report(25_800);
    let mut base = constant_report(25_800);
    for (r, opts) in [
        (
            &mut base,
            serde_json::json!({"layout": "raid5", "chunk_bytes": 65536}),
        ),
        (
            &mut rebuild,
            serde_json::json!({"layout": "raid5", "chunk_bytes": 65536, "rebuild": {"member": 1}}),
        ),
    ] {
        r.devices[0].volume = Some(nines_core::report::VolumeReport {
            layout: "raid5".into(),
            options: opts,
            stats: serde_json::json!({}),
            members: Vec::new(),
        });
    }
    let d = differences(&[
        Run {
            label: "a".into(),
            report: base,
        },
        Run {
            label: "rt".into(),
            report: {
                rt.devices[0].volume = None;
                rt
            },
        },
        Run {
            label: "rebuild".into(),
            report: rebuild,
        },
    ]);
    assert_eq!(
        d,
        [
            "rt differs from a in engine (io_uring vs psync), rt priority (unset vs 50), thinktime (0 ns vs 100 µs), volume chunk (64 KiB vs unset), volume layout (raid5 vs unset); compare with care.",
            "rebuild differs from a in volume rebuild member (unset vs 1) only: the comparison shows its effect."
        ]
    );
}

#[test]
fn interval_spikes_are_judged_per_device_too() {
    use nines_report::intervals::{IntervalPoint, IntervalSeries};
    use nines_report::run::spikes_from_intervals;
    // nvme2 is 100x slower in every interval (p50 8 ms, max 30 ms): no spike; nvme0 has one
    // 40 ms interval: one spike.
    let series: Vec<IntervalSeries> = (0..3)
        .map(|d| IntervalSeries {
            device: format!("nvme{d}"),
            op: Op::Read,
            points: (0..50)
                .map(|i| {
                    let k = if d == 2 { 100 } else { 1 };
                    IntervalPoint {
                        start_s: i as f64 * 0.1,
                        duration_s: 0.1,
                        ios: 1000,
                        p50_ns: 80_000 * k,
                        p99_ns: 150_000 * k,
                        max_ns: if d == 0 && i == 20 {
                            40_000_000
                        } else {
                            300_000 * k
                        },
                    }
                })
                .collect(),
        })
        .collect();
    let r = report();
    let names: Vec<String> = r.devices.iter().map(|d| d.name.clone()).collect();
    let a = spikes_from_intervals(&series, &names, SpikeParams::default()).unwrap();
    assert_eq!(a.spikes.len(), 1, "{:?}", a.spikes);
    assert_eq!(a.spikes[0].devices, [0]);
    assert_eq!(a.spikes[0].height_ns, 40_000_000);
}

/// `n` reads per device at latencies from `base` up (ten distinct values), three devices whose
/// latencies are `bases`.
fn small_report(bases: &[u64], n: u64, extra: serde_json::Value) -> Report {
    let mut cfg = config();
    if let serde_json::Value::Object(m) = extra {
        cfg.extra = m;
    }
    let mut b = ReportBuilder::new(RunKind::Profile, cfg);
    for (d, &base) in bases.iter().enumerate() {
        let mut rec = DeviceRecorder::new();
        for i in 0..n {
            rec.record(Op::Read, base + (i % 10) * base / 10, 4096);
        }
        b.device(
            DeviceMeta {
                name: format!("zram{d}"),
                path: Some(format!("/dev/zram{d}")),
                size_bytes: 1 << 30,
                cpu: Some(d),
            },
            &rec,
        );
    }
    b.host(serde_json::json!({
        "counts": {"critical": 0, "info": 3, "warn": 1},
        "findings": ["warn: no CPUs are isolated for I/O workers (host)"],
        "root": "/",
        "schema": "nines-doctor",
        "schema_version": 1
    }));
    b.warn("steer them with `nines tune --plan`/`--apply`".to_string());
    b.finish()
}

fn page(r: &Report) -> String {
    let inp = RunInputs {
        report: r,
        title: "t".into(),
        lat: None,
        intervals: None,
    };
    render_html(&inp, &figures(&inp)).unwrap()
}

/// The cells of the HTML table whose header row starts with `first`.
fn table(html: &str, first: &str) -> Vec<Vec<String>> {
    let start = html.find(&format!("<tr><th>{first}</th>")).expect("table");
    let end = start + html[start..].find("</table>").unwrap();
    html[start..end]
        .split("<tr>")
        .filter(|r| !r.is_empty())
        .map(|row| {
            row.split("</t")
                .filter_map(|c| c.rsplit_once('>').map(|(_, v)| v.trim().to_string()))
                .filter(|c| !c.is_empty())
                .collect::<Vec<String>>()
        })
        .filter(|r| !r.is_empty())
        .collect()
}

#[test]
fn device_table_has_every_percentile_and_mb_per_s_with_unresolved_ones_marked() {
    // 1000 reads: p50..p99 resolved, p99.9 and up (which need 1001 and more) not.
    let r = small_report(&[100_000, 100_000, 300_000], 1000, serde_json::json!({}));
    let html = page(&r);
    let t = table(&html, "device");
    let header = &t[0];
    let want: Vec<String> = [
        "device", "path", "cpu", "op", "I/Os", "IOPS", "MB/s", "mean",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(
        DEFAULT_PERCENTILES
            .iter()
            .map(|p| format!("p{}", nines_report::axis::format_percentile(*p))),
    )
    .chain(["max".to_string()])
    .collect();
    assert_eq!(header, &want);
    for row in &t[1..] {
        assert_eq!(row.len(), header.len(), "{row:?}");
        let unresolved = row.iter().filter(|c| *c == "n/r").count();
        assert_eq!(unresolved, 4, "p99.9 to p99.9999 are not resolved: {row:?}");
        // MB/s: 1000 reads of 4096 bytes over the 10 s measured.
        assert_eq!(row[6], format!("{:.1}", 1000.0 * 4096.0 / 10.0 / 1e6));
    }
    // The slowest device has p99 = 570 us (the 10th value of its ten): ranked there, not at an
    // unresolved percentile.
    assert!(
        html.contains("Worst read device at p99: zram2 (570 µs, 3.0x the median of the others"),
        "{html}"
    );
    assert!(!html.contains("p99.9999 5"), "{html}");
}

#[test]
fn identical_devices_are_not_called_worst() {
    let r = small_report(&[100_000; 3], 20_000, serde_json::json!({}));
    let s = summary(&r, None, None).join("\n");
    assert!(
        s.contains("No read device stands out at p99.99: the slowest, zram"),
        "{s}"
    );
    assert!(!s.contains("1.0x"), "{s}");
    // In the same units as the terminal's table.
    assert!(s.contains(" MB/s in total"), "{s}");
    assert!(!s.contains("MiB/s"), "{s}");
}

#[test]
fn configuration_host_and_warnings_read_as_text() {
    let r = small_report(
        &[100_000; 2],
        100,
        serde_json::json!({
            "hostname": "h1", "kernel": "6.1.0-18-amd64", "plan": null, "rt_priority": null,
            "embedded_default": false, "sqpoll": false, "ios_executed": [100, 100],
            "device_models": {"zram0": "zram", "zram1": "zram"}
        }),
    );
    let mut r = r;
    r.config.start_unix_ns = Some(1_700_000_000_000_000_000);
    let html = page(&r);
    assert!(
        html.contains(
            "Measured on h1 (Linux 6.1.0-18-amd64), started 2023-11-14 22:13:20 UTC, devices: zram (zram0, zram1)."
        ),
        "{html}"
    );
    let config = table(&html, "setting");
    let settings: Vec<&str> = config.iter().map(|r| r[0].as_str()).collect();
    for raw in [
        "plan",
        "rt_priority",
        "embedded_default",
        "ios_executed",
        "device_models.zram0",
    ] {
        assert!(!settings.contains(&raw), "{raw} in {settings:?}");
    }
    assert!(
        config.iter().all(|r| r[1] != "null" && r[1] != "false"),
        "{config:?}"
    );
    assert!(config.contains(&vec![
        "embedded default (temporary files)".to_string(),
        "no".into()
    ]));
    assert!(config.contains(&vec![
        "I/Os issued per target (ramp included)".to_string(),
        "100, 100".into()
    ]));
    let host = table(&html, "severity");
    assert_eq!(
        host[1..],
        [vec![
            "warn".to_string(),
            "no CPUs are isolated for I/O workers (host)".into()
        ]]
    );
    // Backticks quote commands: shown as code.
    assert!(html.contains("<code>nines tune --plan</code>/<code>--apply</code>"));
    assert!(!html.contains('`'));
    // Figures (their SVG has a viewBox) scale down with the window instead of being cut off.
    assert!(html.contains("viewBox=\"0 0 960 540\""));
    assert!(html.contains("svg{max-width:100%;height:auto}"));
}

#[test]
fn a_write_share_sweep_plots_writes_too_and_captions_cite_nothing() {
    use nines_report::sweep::{DirMetrics, PointMetrics, Sweep, SweepParam, SweepPoint};
    let dir = |mean_ns: f64, tail_ns: u64| DirMetrics {
        // Enough to resolve p99.999.
        ios: 200_000,
        iops: 100.0,
        bw_bytes: 409_600.0,
        mean_ns,
        tail_percentile: "99.999".into(),
        tail_ns,
        max_ns: tail_ns,
    };
    let point = |w: u8| SweepPoint {
        rw: "randrw".into(),
        iodepth: 1,
        write_pct: Some(w),
        engine: None,
        error: None,
        metrics: Some(PointMetrics {
            read: (w < 100).then(|| dir(100_000.0 + f64::from(w) * 1000.0, 900_000)),
            write: (w > 0).then(|| dir(300_000.0, 2_000_000 + u64::from(w))),
            cpu_s: None,
            cpu_per_io_ns: None,
        }),
        report: None,
    };
    let s = Sweep {
        schema: "nines-sweep".into(),
        schema_version: 1,
        parameter: SweepParam::WriteFraction,
        driver: "profile".into(),
        args: Vec::new(),
        points: vec![point(0), point(50), point(100)],
        notes: Vec::new(),
    };
    let figs = nines_report::sweep::figures(&s);
    let f = figs.iter().find(|f| f.id == "write-fraction").unwrap();
    let names: Vec<&str> = f.plot.series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "read average",
            "read 99.999%",
            "write average",
            "write 99.999%"
        ]
    );
    // Reads at 0% and 50% writes, writes at 50% and 100%: no point where a direction had no I/O.
    let xs = |i: usize| -> Vec<f64> { f.plot.series[i].points.iter().map(|p| p.0).collect() };
    assert_eq!(xs(0), [0.0, 50.0]);
    assert_eq!(xs(3), [50.0, 100.0]);
    assert_eq!(f.plot.series[3].points[1].1, 2_000_100.0);
    for f in &figs {
        assert!(!f.caption.contains("paper"), "{}", f.caption);
        assert!(!f.caption.contains("Fig."), "{}", f.caption);
    }
}

#[test]
fn identical_devices_are_one_line_named_for_all() {
    // Three devices with the same latencies and one twice as slow.
    let r = small_report(
        &[100_000, 100_000, 100_000, 200_000],
        20_000,
        serde_json::json!({}),
    );
    let f = percentile_figure(&r, Op::Read).unwrap();
    let names: Vec<&str> = f.plot.series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["zram0, zram1, zram2", "zram3"]);
    assert!(f.caption.contains("same curve"), "{}", f.caption);
    // Two data lines drawn, in two colours: no line hides another.
    let svg = inspect_svg(&render_svg(&f.plot, DEFAULT_SIZE).unwrap());
    for (k, s) in f.plot.series.iter().enumerate() {
        let c = hex(s.color);
        let n = svg.polyline_strokes.iter().filter(|x| **x == c).count();
        assert!(n >= 1, "series {k} ({c}) not drawn");
    }
    // Many identical devices: one legend entry naming the first and last.
    let r = small_report(&[100_000; 8], 20_000, serde_json::json!({}));
    let f = percentile_figure(&r, Op::Read).unwrap();
    assert_eq!(f.plot.series.len(), 1);
    assert_eq!(f.plot.series[0].name, "zram0 … zram7 (8 devices)");
}

#[test]
fn figures_without_information_are_left_out_with_the_reason() {
    use nines_report::intervals::parse_interval_log;
    use nines_report::run::{omitted_figures, throughput_figures};
    // Identical devices: the standard deviation across them is zero everywhere.
    let r = small_report(&[100_000; 3], 20_000, serde_json::json!({}));
    let ids: Vec<String> = {
        let inp = RunInputs {
            report: &r,
            title: "t".into(),
            lat: None,
            intervals: None,
        };
        figures(&inp).into_iter().map(|f| f.id).collect()
    };
    assert_eq!(ids, ["percentiles-read", "spread-read"]);
    let html = page(&r);
    assert!(
        html.contains("No read standard-deviation figure: every device had the same latency"),
        "{html}"
    );
    // One interval per device: a rate over time would be one dot.
    let one: Vec<u8> = {
        use hdrhistogram::serialization::V2DeflateSerializer;
        use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
        use std::time::Duration;
        let mut out = Vec::new();
        let mut ser = V2DeflateSerializer::new();
        let mut w = IntervalLogWriterBuilder::new()
            .with_base_time(std::time::UNIX_EPOCH)
            .begin_log_with(&mut out, &mut ser)
            .unwrap();
        let mut h = nines_core::stats::new_latency_histogram();
        h.record(20_000).unwrap();
        w.write_histogram(
            &h,
            Duration::ZERO,
            Duration::from_secs(1),
            Tag::new("zram0.read"),
        )
        .unwrap();
        drop(w);
        out
    };
    let series = parse_interval_log(&one).unwrap();
    assert!(throughput_figures(&series, 4096).is_empty());
    let inp = RunInputs {
        report: &r,
        title: "t".into(),
        lat: None,
        intervals: Some(series),
    };
    let why = omitted_figures(&inp);
    assert!(
        why.iter().any(|w| w
            .starts_with("No IOPS or bandwidth over time: the interval log holds one interval")),
        "{why:?}"
    );
}

#[test]
fn latency_over_time_gives_each_colour_one_meaning() {
    use nines_report::plot::{Series, SeriesStyle};
    // Eight devices, every one with slow I/Os: more than there are free colours, so one series.
    let mut recs = Vec::new();
    for d in 0..8u16 {
        for i in 0..2000u64 {
            let lat = if i % 500 == 7 {
                5_000_000
            } else {
                20_000 + u64::from(d)
            };
            recs.push(LatRecord {
                completion_ns: i * 1_000_000 + u64::from(d),
                latency_ns: lat,
                offset_bytes: 0,
                device: d,
                op: Op::Read,
            });
        }
    }
    for n_dev in [3usize, 8] {
        let recs: Vec<&LatRecord> = recs
            .iter()
            .filter(|r| usize::from(r.device) < n_dev)
            .collect();
        let mut p1 = LatPass1::new();
        for r in &recs {
            p1.push(r);
        }
        let s1 = p1.finish();
        let mut p2 = LatPass2::new(&s1, SpikeParams::default());
        for r in &recs {
            p2.push(r);
        }
        let names: Vec<String> = (0..n_dev).map(|d| format!("dev{d}")).collect();
        let view = p2.finish(names, s1.median_ns);
        let f = time_figure(&view).unwrap();
        let lines: Vec<&Series> = f
            .plot
            .series
            .iter()
            .filter(|s| s.style == SeriesStyle::Line)
            .collect();
        assert_eq!(
            lines.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["p50", "p99"]
        );
        let mut taken: Vec<[u8; 3]> = lines.iter().map(|s| s.color).collect();
        taken.extend(f.plot.bands.iter().map(|b| b.color));
        taken.extend(f.plot.spans.iter().map(|s| s.color));
        let points: Vec<&Series> = f
            .plot
            .series
            .iter()
            .filter(|s| s.style == SeriesStyle::Points)
            .collect();
        assert_eq!(points.len(), if n_dev <= 6 { n_dev } else { 1 }, "{n_dev}");
        for s in &points {
            assert!(!taken.contains(&s.color), "{} reuses a colour", s.name);
        }
        let mut colours: Vec<[u8; 3]> = points.iter().map(|s| s.color).collect();
        colours.dedup();
        assert_eq!(colours.len(), points.len(), "one colour per device");
    }
}

/// Two devices at QD1 and 100 µs for 3 s; device 1 stalls once for 473 ms at 1.2 s.
fn one_device_stalls_log() -> Vec<LatRecord> {
    let mut out = Vec::new();
    for dev in 0..2u16 {
        let mut t = u64::from(dev) * 37_000;
        while t < 3_000_000_000 {
            let lat = if dev == 1 && (1_200_000_000..1_200_200_000).contains(&t) {
                473_000_000
            } else {
                100_000 + (t / 1000) % 7 * 1000
            };
            out.push(LatRecord {
                completion_ns: t + lat,
                latency_ns: lat,
                offset_bytes: 0,
                device: dev,
                op: Op::Read,
            });
            t += lat;
        }
    }
    out.sort_by_key(|r| r.completion_ns);
    out
}

fn view_of(log: &[LatRecord], names: &[&str]) -> nines_report::run::LatView {
    let mut p1 = LatPass1::new();
    log.iter().for_each(|r| p1.push(r));
    let s1 = p1.finish();
    let mut p2 = LatPass2::new(&s1, SpikeParams::default());
    log.iter().for_each(|r| p2.push(r));
    p2.finish(names.iter().map(|n| n.to_string()).collect(), s1.median_ns)
}

#[test]
fn one_stalled_device_neither_dips_p50_nor_breaks_the_lines_nor_stretches_the_axis() {
    let view = view_of(&one_device_stalls_log(), &["nvme0", "nvme1"]);
    let f = time_figure(&view).unwrap();
    // nvme0 completes throughout: no gap, and the pooled p50 stays at the devices' median
    // (100-106 µs, within the coarse histogram's 6%) while nvme1 stalls.
    assert_eq!(view.decimated.stretches.len(), 1);
    let p50 = f.plot.series.iter().find(|s| s.name == "p50").unwrap();
    assert!(p50.points.len() > 100, "{}", p50.points.len());
    for &(t, v) in &p50.points {
        assert!((95_000.0..=115_000.0).contains(&v), "p50 {v} ns at {t} s");
    }
    // The stalled I/O is a point of nvme1, at 473 ms.
    let stalled = f
        .plot
        .series
        .iter()
        .filter(|s| s.name.starts_with("nvme1"))
        .flat_map(|s| s.points.iter())
        .any(|p| p.1 == 473_000_000.0);
    assert!(stalled);
    // The y axis ends at the decade above the max (1 s), not a decade beyond it; the x axis at
    // the last completion (3 s and a little), with no tick past it.
    assert_eq!(f.plot.y.max, 1e9);
    assert_eq!(f.plot.y.ticks.last().unwrap().label, "1 s");
    assert!(
        f.plot.x.max < 3.01 && f.plot.x.max > 2.99,
        "{}",
        f.plot.x.max
    );
    assert!(f.plot.x.ticks.iter().all(|t| t.value <= f.plot.x.max));
    // p99 over windows of at least 1010 I/Os, so never a lone column's max.
    let p99 = f.plot.series.iter().find(|s| s.name == "p99").unwrap();
    assert!(p99.points.len() >= 10);
    assert!(
        f.caption.contains("p99 over windows of at least 1010 I/Os"),
        "{}",
        f.caption
    );
    // The legend names only what is drawn, and sits under the figure: every series shows.
    let legend = nines_report::plot::legend_entries(&f.plot);
    let names: Vec<&str> = legend.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names.len(), 1 + f.plot.series.len(), "{names:?}");
}

#[test]
fn a_run_too_short_for_a_p99_line_draws_none_and_says_so() {
    // 400 I/Os in all: p50 windows of 30 I/Os, but not one window of 1010 for p99.
    let log: Vec<LatRecord> = (0..400u64)
        .map(|i| LatRecord {
            completion_ns: (i + 1) * 1_000_000,
            latency_ns: 50_000 + i % 5 * 1000,
            offset_bytes: 0,
            device: 0,
            op: Op::Read,
        })
        .collect();
    let view = view_of(&log, &["sda"]);
    let f = time_figure(&view).unwrap();
    let names: Vec<&str> = f.plot.series.iter().map(|s| s.name.as_str()).collect();
    assert!(
        names.contains(&"p50") && !names.contains(&"p99"),
        "{names:?}"
    );
    assert!(
        f.caption
            .contains("no p99 line: no stretch between gaps held 1010 I/Os"),
        "{}",
        f.caption
    );
}

#[test]
fn unresolved_percentiles_are_not_drawn_as_flat_lines() {
    use nines_report::run::{resolved_curve, stddev_figure};
    // 1000 reads a device: p50..p99 resolve, p99.9 and up (n/r in the tables) do not.
    let r = small_report(&[100_000, 100_000, 300_000], 1000, serde_json::json!({}));
    let f = percentile_figure(&r, Op::Read).unwrap();
    let x_max = nines_report::axis::nines_max_x(99.9999);
    for s in &f.plot.series {
        // p50, p90, p99, a break, max: nothing at p99.9 .. p99.9999.
        let xs: Vec<f64> = s.points.iter().map(|p| p.0).collect();
        assert_eq!(
            xs,
            [nines_x(50.0), nines_x(90.0), nines_x(99.0), x_max, x_max],
            "{}",
            s.name
        );
        assert!(s.points[3].1.is_nan() && s.points[4].1 > 0.0);
    }
    assert!(
        f.caption
            .contains("stops at the highest percentile its device's I/Os resolve (n/r"),
        "{}",
        f.caption
    );
    // Rendered: each line is one polyline up to p99 and max a lone marker, so every device
    // group has one polyline of its colour plus its legend sample, and 4 markers.
    let svg = inspect_svg(&render_svg(&f.plot, DEFAULT_SIZE).unwrap());
    assert_eq!(svg.circles, 4 * f.plot.series.len(), "{svg:?}");
    for s in &f.plot.series {
        let n = svg
            .polyline_strokes
            .iter()
            .filter(|c| **c == hex(s.color))
            .count();
        assert_eq!(n, 2, "{}: line + legend", s.name);
    }
    // Across devices: the same percentiles, and the caption says why the rest are missing.
    let sp = spread_figure(&r, Op::Read).unwrap();
    let mean = sp.plot.series.iter().find(|s| s.name == "mean").unwrap();
    assert_eq!(mean.points.len(), 5);
    assert!(mean.points[3].1.is_nan());
    assert!(
        sp.caption.contains("fewest I/Os (1000) cannot resolve"),
        "{}",
        sp.caption
    );
    let sd = stddev_figure(&r, Op::Read).unwrap();
    assert_eq!(sd.plot.series[0].points.len(), 5);
    assert!(sd.caption.contains("cannot resolve"), "{}", sd.caption);
    // With enough I/Os (200 000: up to p99.999) only p99.9999 is cut.
    let r = small_report(&[100_000, 300_000, 900_000], 200_000, serde_json::json!({}));
    let c = resolved_curve(&r.devices[0], Op::Read, &DEFAULT_PERCENTILES);
    assert_eq!(c.len(), DEFAULT_PERCENTILES.len() + 1);
    assert!(c[DEFAULT_PERCENTILES.len() - 1].1.is_nan());
}

#[test]
fn compare_marks_unresolved_percentiles_and_gives_them_no_ratio() {
    use nines_report::compare::{Run, figures as compare_figures, table_rows};
    let runs = [
        Run {
            label: "a".into(),
            report: small_report(&[100_000, 100_000], 1000, serde_json::json!({})),
        },
        Run {
            label: "b".into(),
            report: small_report(&[200_000, 200_000], 1000, serde_json::json!({})),
        },
    ];
    let (_, rows) = table_rows(&runs);
    let row = |name: &str| rows.iter().find(|r| r[0] == name).unwrap().clone();
    assert_eq!(row("read p99.99")[1..], ["n/r", "n/r", "-"]);
    assert_eq!(row("read p99")[3], "2.0x worse");
    assert_eq!(row("read max")[3], "2.0x worse");
    let figs = compare_figures(&runs);
    let merged = figs.iter().find(|f| f.id == "compare-read").unwrap();
    for s in &merged.plot.series {
        // 2000 I/Os: up to p99.9 (needs 1001), then a break and max.
        assert_eq!(s.points.len(), 6, "{}", s.name);
        assert!(s.points[4].1.is_nan());
    }
    assert!(merged.caption.contains("n/r"), "{}", merged.caption);
}

#[test]
fn a_sweep_of_short_points_plots_the_tail_they_resolve() {
    use nines_report::sweep::{Sweep, SweepParam, SweepPoint, figures, metrics, table};
    // 5000 reads a point: p99.9 resolves (1001), p99.999 (the sweep's own tail) does not.
    let point = |qd: u32, base: u64| {
        let r = small_report(&[base], 5000, serde_json::json!({}));
        SweepPoint {
            rw: "randread".into(),
            iodepth: qd,
            write_pct: None,
            engine: None,
            error: None,
            metrics: Some(metrics(&r)),
            report: Some(r),
        }
    };
    let s = Sweep {
        schema: "nines-sweep".into(),
        schema_version: 1,
        parameter: SweepParam::Qd,
        driver: "profile".into(),
        args: Vec::new(),
        points: vec![point(1, 100_000), point(4, 200_000)],
        notes: Vec::new(),
    };
    let figs = figures(&s);
    let f = figs.iter().find(|f| f.id == "qd-tail").unwrap();
    assert_eq!(f.plot.title, "99.9% latency vs queue depth");
    let pts = &f.plot.series[0].points;
    let want: Vec<f64> = s
        .points
        .iter()
        .map(|p| {
            p.report
                .as_ref()
                .unwrap()
                .aggregate
                .read
                .lat_ns
                .percentiles
                .get("99.9")
                .unwrap() as f64
        })
        .collect();
    assert_eq!(pts.iter().map(|p| p.1).collect::<Vec<_>>(), want);
    assert!(!f.caption.contains("not drawn"), "{}", f.caption);
    let (h, rows) = table(&s);
    // One name for the tail column in every sweep; the note says which percentile it is.
    let col = h
        .iter()
        .position(|c| c == "tail latency")
        .expect("tail column");
    assert_eq!(rows[0][col], nines_report::axis::format_ns(want[0]));
    assert!(
        nines_report::sweep::tail_note(&s).starts_with("tail latency: p99.9, the highest"),
        "{}",
        nines_report::sweep::tail_note(&s)
    );
    // No column that no point fills (write share, engine, CPU per I/O, note).
    assert_eq!(
        h,
        [
            "rw",
            "QD",
            "op",
            "IOPS",
            "bandwidth",
            "average",
            "tail latency",
            "max"
        ]
    );
    assert!(rows.iter().all(|r| r.len() == h.len()));
    // Without the run JSONs the points keep their own tail, which they cannot resolve: nothing
    // drawn, n/r in the table, and the caption says why.
    let mut bare = s.clone();
    bare.points.iter_mut().for_each(|p| p.report = None);
    let figs = figures(&bare);
    let f = figs.iter().find(|f| f.id == "qd-tail").unwrap();
    assert!(f.plot.series[0].points.iter().all(|p| p.1.is_nan()));
    assert!(f.caption.contains("are not drawn"), "{}", f.caption);
    let (h, rows) = table(&bare);
    let col = h.iter().position(|c| c == "tail latency").unwrap();
    assert_eq!(rows[0][col], "n/r");
    assert_eq!(
        nines_report::sweep::tail_note(&bare),
        "tail latency: p99.999."
    );
}

#[test]
fn html_page_shows_nvme_identify_power_states_and_smart_only_for_nvme() {
    let mut r = report();
    assert!(!page(&r).contains("NVMe devices"));
    let smart = |writes: u64| {
        serde_json::json!({
            "critical_warning": 0, "temperature_c_composite": 37, "available_spare_pct": 100,
            "available_spare_pct_threshold": 10, "endurance_used_pct": 0, "data_units_read": 0,
            "data_units_written": writes / 125, "host_read_commands": 0,
            "host_write_commands": writes, "controller_busy_min": 0, "power_cycles": 1,
            "power_on_hours": 1, "unsafe_shutdowns": 0, "media_errors": 0,
            "error_log_entries": 0, "temperature_warning_min": 0, "temperature_critical_min": 0
        })
    };
    let nvme = serde_json::json!({
        "device": "/dev/nvme0n1",
        "controller": {
            "vendor_id": 6966, "subsystem_vendor_id": 6900, "serial": "nines0",
            "model": "QEMU <NVMe> Ctrl", "firmware": "7.2.0", "controller_id": 0,
            "namespaces_max": 256, "volatile_write_cache": true, "apst_supported": false,
            "power_states": [
                {"index": 0, "power_uw_max": 25000000, "operational": true,
                 "latency_us_entry": 16, "latency_us_exit": 4},
                {"index": 1, "power_uw_max": 5000, "operational": false,
                 "latency_us_entry": 2000, "latency_us_exit": 8000}
            ]
        },
        "nsid": 1,
        "smart_before": smart(1000), "smart_after": smart(3500),
        "smart_delta": {"host_read_commands": 0, "host_write_commands": 2500,
            "data_units_read": 0, "data_units_written": 20, "read_bytes": 0,
            "written_bytes": 10240000, "controller_busy_min": 0, "media_errors": 0,
            "error_log_entries": 0, "unsafe_shutdowns": 0},
        "notes": ["after the run: a note"]
    });
    r.devices[2].nvme = Some(serde_json::from_value(nvme).unwrap());
    let html = page(&r);
    assert!(html.contains("<h2>NVMe devices</h2>"), "{html}");
    // Escaped like every other cell.
    assert!(html.contains("QEMU &lt;NVMe&gt; Ctrl") && !html.contains("<NVMe>"));
    assert!(html.contains("2500 host write and 0 host read commands, 10.2 MB written"));
    for cell in ["PS1", "0.0050", "2000", "8000", "after the run: a note"] {
        assert!(html.contains(cell), "{cell}");
    }
}
