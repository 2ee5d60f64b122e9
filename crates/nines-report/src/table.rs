//! The readable table printed on stdout by `nines profile` and `nines sim`: one row per device
//! and direction, then the merged distribution over all devices and, for each percentile, its mean
//! and standard deviation across devices (the paper's Fig. 12 and 14), then the workers' CPU cost.

use std::fmt::Write as _;

use nines_core::op::Op;
use nines_core::report::{DirectionStats, Report, RunKind};
use nines_core::units::format_cpu_list;

/// Formats nanoseconds with a unit chosen for 3-4 significant digits: `812ns`, `25.1us`, `1.20ms`,
/// `2.50s`. ASCII `us`, so the table aligns in every terminal.
pub fn format_ns(ns: f64) -> String {
    let (v, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "us")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    if unit == "ns" {
        format!("{v:.0}{unit}")
    } else if v < 10.0 {
        format!("{v:.2}{unit}")
    } else if v < 100.0 {
        format!("{v:.1}{unit}")
    } else {
        format!("{v:.0}{unit}")
    }
}

/// Formats a count per second compactly: `812`, `25.1k`, `1.20M`.
pub fn format_rate(x: f64) -> String {
    if x < 1e3 {
        format!("{x:.0}")
    } else if x < 1e6 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{:.2}M", x / 1e6)
    }
}

fn format_bytes(b: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
        ("B", 1),
    ];
    for (name, size) in UNITS {
        if b >= size && b.is_multiple_of(size) {
            return format!("{}{name}", b / size);
        }
    }
    format!("{b}B")
}

struct Table {
    rows: Vec<Vec<String>>,
    /// Columns aligned left (the rest align right).
    left: usize,
}

impl Table {
    fn render(&self, out: &mut String) {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut width = vec![0usize; cols];
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                width[i] = width[i].max(c.chars().count());
            }
        }
        for r in &self.rows {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                if i < self.left {
                    let _ = write!(line, "{c:<w$}", w = width[i]);
                } else {
                    let _ = write!(line, "{c:>w$}", w = width[i]);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
}

fn pct_header(key: &str) -> String {
    format!("p{key}")
}

fn stats_cells(s: &DirectionStats, keys: &[String]) -> Vec<String> {
    let mut cells = vec![
        s.ios.to_string(),
        format_rate(s.iops),
        format!("{:.1}", s.bw_bytes / 1e6),
        format_ns(s.lat_ns.min_ns as f64),
        format_ns(s.lat_ns.mean_ns),
        format_ns(s.lat_ns.stddev_ns),
    ];
    for k in keys {
        cells.push(
            s.lat_ns
                .percentiles
                .get(k)
                .map_or_else(|| "-".into(), |v| format_ns(v as f64)),
        );
    }
    cells.push(format_ns(s.lat_ns.max_ns as f64));
    cells
}

/// `trace FILE (FORMAT, N requests, R% reads, mostly BS, up to Q in flight simulated)` from
/// the `config.extra.trace` object that `nines sim --trace` records (Q is the replay's, as the
/// trace records arrivals only; with `--runtime` it says how many requests ran).
fn trace_summary(t: &serde_json::Value) -> String {
    let file = t.get("file").and_then(|v| v.as_str()).unwrap_or("?");
    let file = std::path::Path::new(file)
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or(file);
    let format = t.get("format").and_then(|v| v.as_str()).unwrap_or("?");
    let n = |k: &str| t.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    let requests = n("requests");
    let reads_pct = if requests > 0 {
        n("reads") as f64 * 100.0 / requests as f64
    } else {
        0.0
    };
    let replayed = match t.get("requests_replayed").and_then(|v| v.as_u64()) {
        Some(r) if r < requests => format!(", {r} replayed before --runtime ended"),
        _ => String::new(),
    };
    let mostly = match t.get("block_size_bytes_mode").and_then(|v| v.as_u64()) {
        Some(bs) => format!(", mostly {}", format_bytes(bs)),
        None => String::new(),
    };
    let in_flight = match t.get("in_flight_max").and_then(|v| v.as_u64()) {
        Some(q) => format!(", up to {q} in flight simulated"),
        None => String::new(),
    };
    format!(
        "trace {file} ({format}, {requests} requests{replayed}, {reads_pct:.0}% reads{mostly}{in_flight})"
    )
}

/// `NAME: randread 4KiB QD10` (and a thinktime or rate when set).
fn job_summary(name: &str, w: &nines_core::workload::WorkloadSpec) -> String {
    let mut s = format!(
        "{name}: {} {} QD{}",
        w.rw,
        format_bytes(w.block_size_bytes),
        w.iodepth
    );
    if w.thinktime_ns > 0 {
        let _ = write!(s, " think {}", format_ns(w.thinktime_ns as f64));
    }
    if let Some(r) = w.rate_iops {
        let _ = write!(s, " {r} IOPS");
    }
    s
}

/// The whole table, ending with a newline.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let c = &report.config;
    let w = &c.workload;
    let kind = match report.kind {
        RunKind::Profile => "profile",
        RunKind::Sim => "sim",
    };
    let mix = if w.rw == nines_core::workload::RwMode::RandRw {
        format!(" {}% reads", w.read_mix_pct)
    } else {
        String::new()
    };
    let rate = w
        .rate_iops
        .map(|r| format!(", {r} IOPS/target {}", w.arrival))
        .unwrap_or_default();
    // A trace replay has no queue depth or pattern of its own: describe the trace instead.
    let what = match c.extra.get("trace") {
        Some(t) => trace_summary(t),
        None if report.jobs.len() > 1 => {
            let jobs: Vec<String> = report
                .jobs
                .iter()
                .map(|j| job_summary(&j.name, &j.workload))
                .collect();
            format!("{} jobs ({})", jobs.len(), jobs.join("; "))
        }
        None => format!(
            "{}{mix} {} QD{}{rate}",
            w.rw,
            format_bytes(w.block_size_bytes),
            w.iodepth
        ),
    };
    let plural = |n: usize, what: &str| {
        if n == 1 {
            format!("1 {what}")
        } else {
            format!("{n} {what}s")
        }
    };
    let targets = match report.devices.iter().find_map(|d| d.volume.as_ref()) {
        Some(v) => format!(
            "{} ({} of {})",
            plural(report.devices.len(), "volume"),
            v.layout,
            plural(v.members.len(), "device")
        ),
        None => plural(report.devices.len(), "device"),
    };
    let _ = writeln!(
        out,
        "nines {kind}: {what}, engine {}, {targets}, {:.2} s measured",
        c.engine,
        c.measured_ns as f64 / 1e9,
    );
    let keys: Vec<String> = c
        .percentiles
        .iter()
        .map(|&p| nines_core::units::percentile_key(p))
        .collect();
    let mut header: Vec<String> = [
        "device", "cpu", "dir", "ios", "IOPS", "MB/s", "min", "mean", "stdev",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    header.extend(keys.iter().map(|k| pct_header(k)));
    header.push("max".into());
    let mut t = Table {
        rows: vec![header],
        left: 3,
    };
    for op in Op::ALL {
        if !report.has(op) {
            continue;
        }
        for d in &report.devices {
            let s = d.dir(op);
            if s.ios == 0 {
                continue;
            }
            let mut row = vec![
                d.name.clone(),
                d.cpu.map_or_else(|| "-".into(), |c| c.to_string()),
                op.to_string(),
            ];
            row.extend(stats_cells(s, &keys));
            t.rows.push(row);
            // A volume's members: latencies of the commands it sent them.
            for m in d.volume.iter().flat_map(|v| &v.members) {
                let Some(ms) = (match op {
                    Op::Read => m.read.as_ref(),
                    Op::Write => m.write.as_ref(),
                }) else {
                    continue;
                };
                if ms.ios == 0 {
                    continue;
                }
                let mut row = vec![format!("  {}", m.name), String::new(), op.to_string()];
                row.extend(stats_cells(ms, &keys));
                t.rows.push(row);
            }
        }
        if report.devices.len() > 1 {
            let mut row = vec!["all (merged)".to_string(), String::new(), op.to_string()];
            row.extend(stats_cells(report.aggregate.dir(op), &keys));
            t.rows.push(row);
            let spread = report.aggregate.across_devices.dir(op);
            for (label, pick) in [("mean over devices", 0), ("stdev over devices", 1)] {
                let mut row = vec![label.to_string(), String::new(), op.to_string()];
                row.extend(std::iter::repeat_n(String::new(), 6));
                for k in &keys {
                    let v = spread
                        .iter()
                        .find(|s| &s.percentile == k)
                        .map(|s| if pick == 0 { s.mean_ns } else { s.stddev_ns });
                    row.push(v.map_or_else(|| "-".into(), format_ns));
                }
                row.push(String::new());
                t.rows.push(row);
            }
        }
    }
    out.push('\n');
    t.render(&mut out);
    if report.jobs.len() > 1 {
        out.push('\n');
        let mut header: Vec<String> = ["job", "dir", "ios", "IOPS", "MB/s", "min", "mean", "stdev"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        header.extend(keys.iter().map(|k| pct_header(k)));
        header.push("max".into());
        let mut jt = Table {
            rows: vec![header],
            left: 2,
        };
        for j in &report.jobs {
            for op in Op::ALL {
                let s = j.dir(op);
                if s.ios == 0 {
                    continue;
                }
                let mut row = vec![j.name.clone(), op.to_string()];
                row.extend(stats_cells(s, &keys));
                jt.rows.push(row);
            }
        }
        jt.render(&mut out);
    }
    if !report.workers.is_empty() {
        out.push('\n');
        let mut wt = Table {
            rows: vec![
                [
                    "worker",
                    "cpu",
                    "devices",
                    "usr s",
                    "sys s",
                    "ctx vol",
                    "ctx invol",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            ],
            left: 3,
        };
        for wr in &report.workers {
            let devs: Vec<usize> = wr.devices.iter().map(|&d| d as usize).collect();
            wt.rows.push(vec![
                wr.index.to_string(),
                wr.cpu.map_or_else(|| "-".into(), |c| c.to_string()),
                format_cpu_list(&devs),
                format!("{:.2}", wr.usr_cpu_s),
                format!("{:.2}", wr.sys_cpu_s),
                wr.ctx_voluntary.to_string(),
                wr.ctx_involuntary.to_string(),
            ]);
        }
        wt.render(&mut out);
    }
    for w in &report.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nines_core::report::{DeviceMeta, ReportBuilder, RunConfig, WorkerReport};
    use nines_core::stats::DeviceRecorder;
    use nines_core::units::DEFAULT_PERCENTILES;
    use nines_core::workload::WorkloadSpec;

    pub(crate) fn sample_report() -> Report {
        let config = RunConfig {
            workload: WorkloadSpec::default(),
            engine: "io_uring".into(),
            percentiles: DEFAULT_PERCENTILES.to_vec(),
            measured_ns: 1_000_000_000,
            start_unix_ns: Some(1),
            lat_log: None,
            hdr_log: None,
            extra: Default::default(),
        };
        let mut b = ReportBuilder::new(RunKind::Profile, config);
        for i in 0..3u64 {
            let mut r = DeviceRecorder::new();
            for k in 0..10_000u64 {
                r.record(Op::Read, 20_000 + i * 1000 + k, 4096);
            }
            b.device(
                DeviceMeta {
                    name: format!("zram{i}"),
                    path: Some(format!("/dev/zram{i}")),
                    size_bytes: 1 << 28,
                    cpu: Some(i as usize % 2),
                },
                &r,
            );
        }
        b.worker(WorkerReport {
            index: 0,
            cpu: Some(0),
            devices: vec![0, 2],
            usr_cpu_s: 0.2,
            sys_cpu_s: 0.5,
            ctx_voluntary: 10,
            ctx_involuntary: 2,
        });
        b.warn("test warning");
        b.finish()
    }

    #[test]
    fn formats() {
        assert_eq!(format_ns(812.0), "812ns");
        assert_eq!(format_ns(25_100.0), "25.1us");
        assert_eq!(format_ns(1_204_000.0), "1.20ms");
        assert_eq!(format_ns(250_000_000.0), "250ms");
        assert_eq!(format_ns(2.5e9), "2.50s");
        assert_eq!(format_rate(25_100.0), "25.1k");
        assert_eq!(format_rate(1_200_000.0), "1.20M");
        assert_eq!(format_bytes(4096), "4KiB");
        assert_eq!(format_bytes(1536), "1536B");
    }

    #[test]
    fn a_trace_replay_is_described_by_its_trace() {
        let mut r = sample_report();
        r.config.extra.insert(
            "trace".into(),
            serde_json::json!({"file": "/x/mqsim-tpcc-small.trace", "format": "mqsim", "requests": 6999,
                "reads": 4381, "writes": 2618, "block_size_bytes_mode": 8192, "in_flight_max": 33}),
        );
        let first = render(&r).lines().next().unwrap().to_string();
        assert!(
            first.starts_with(
                "nines profile: trace mqsim-tpcc-small.trace (mqsim, 6999 requests, 63% reads, mostly 8KiB, up to 33 in flight simulated), engine"
            ),
            "{first}"
        );
        assert!(!first.contains("QD"), "{first}");
        // Cut short by --runtime: how many ran.
        r.config.extra.insert(
            "trace".into(),
            serde_json::json!({"file": "t", "format": "mqsim", "requests": 6999, "requests_replayed": 2401,
                "reads": 4381, "writes": 2618, "block_size_bytes_mode": 8192, "in_flight_max": 22}),
        );
        let first = render(&r).lines().next().unwrap().to_string();
        assert!(
            first
                .contains("(mqsim, 6999 requests, 2401 replayed before --runtime ended, 63% reads"),
            "{first}"
        );
        // A real replay (nines profile) records no simulated in-flight figure: none is shown.
        r.config.extra.insert(
            "trace".into(),
            serde_json::json!({"file": "t", "format": "mqsim", "requests": 10, "reads": 5, "writes": 5}),
        );
        let first = render(&r).lines().next().unwrap().to_string();
        assert!(
            first.starts_with("nines profile: trace t (mqsim, 10 requests, 50% reads), engine"),
            "{first}"
        );
    }

    #[test]
    fn table_has_a_row_per_device_and_the_aggregates() {
        let r = sample_report();
        let text = render(&r);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("nines profile: randread 4KiB QD1, engine io_uring, 3 devices"),
            "{}",
            lines[0]
        );
        let header = lines.iter().find(|l| l.starts_with("device")).unwrap();
        for col in ["p50", "p99.9999", "max", "IOPS"] {
            assert!(header.split_whitespace().any(|c| c == col), "{header}");
        }
        let dev_rows: Vec<&&str> = lines.iter().filter(|l| l.starts_with("zram")).collect();
        assert_eq!(dev_rows.len(), 3);
        assert!(
            dev_rows[0].contains("10000") && dev_rows[0].contains("10.0k"),
            "{}",
            dev_rows[0]
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("all (merged)") && l.contains("30000"))
        );
        assert!(lines.iter().any(|l| l.starts_with("mean over devices")));
        assert!(lines.iter().any(|l| l.starts_with("stdev over devices")));
        assert!(lines.iter().any(|l| l.starts_with("worker")));
        assert!(text.contains("\nwarning: test warning\n"), "{text}");
        // 10,000 I/Os per device cannot resolve p99.99 and above: the report says so.
        assert!(
            text.contains("too few for p99.99, p99.999, p99.9999"),
            "{text}"
        );
        // Rows align: every device row is as wide as the header or narrower.
        let width = header.len();
        assert!(dev_rows.iter().all(|l| l.len() <= width + 2));
    }
}
