//! fio-compatible JSON (`--fio-json`): fio's `--output-format=json` layout with one job per
//! device, so fio-plot and other fio tooling read nines results.
//!
//! Mapping (documented in docs/report-schema.md):
//! - `jobs[i]` is device i; `jobname` is its name, `job options.filename` its path.
//! - `read`/`write`: `io_bytes`, `io_kbytes`, `bw_bytes`, `bw` (KiB/s), `iops`, `runtime` (ms),
//!   `total_ios`; `clat_ns` and `lat_ns` both hold nines' latency (submission to completion, or
//!   due time to completion under --rate-iops); `slat_ns` is zero (nines does not split it).
//!   `clat_ns.percentile` keys use fio's `%f` text (`"99.999900"`).
//! - `usr_cpu`/`sys_cpu` (% of the run) and `ctx`: nines' workers drive several devices each, so a
//!   worker's CPU time and context switches are shared among its devices by their I/O counts.
//! - With the recorders ([`to_fio_json_with_recorders`]), fio's default percentile list is added to
//!   the requested ones, and `latency_ns`/`latency_us`/`latency_ms` (percent of I/Os per bucket)
//!   are computed exactly from the histograms; from a report alone they are absent rather than
//!   invented.

use serde_json::{Map, Value, json};

use nines_core::op::Op;
use nines_core::report::{DeviceReport, DirectionStats, Report};
use nines_core::stats::DeviceRecorder;
use nines_core::units::percentile_key;

/// fio's default `percentile_list`.
pub const FIO_DEFAULT_PERCENTILES: [f64; 17] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95,
    99.99,
];

/// fio's percentile key text: `%f` of the percentile (`99.999900`).
pub fn fio_percentile_key(p: f64) -> String {
    format!("{p:.6}")
}

fn empty_lat() -> Value {
    json!({"min": 0, "max": 0, "mean": 0.0, "stddev": 0.0, "N": 0})
}

fn dir_json(s: &DirectionStats, runtime_ms: u64, extra_percentiles: &[(f64, u64)]) -> Value {
    let l = &s.lat_ns;
    let mut pct = Map::new();
    let mut all: Vec<(f64, u64)> = extra_percentiles.to_vec();
    for (k, v) in l.percentiles.iter() {
        if let Ok(p) = k.parse::<f64>() {
            all.push((p, v));
        }
    }
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    all.dedup_by(|a, b| a.0 == b.0);
    if s.ios > 0 {
        for (p, v) in all {
            pct.insert(fio_percentile_key(p), json!(v));
        }
    }
    let lat = json!({"min": l.min_ns, "max": l.max_ns, "mean": l.mean_ns, "stddev": l.stddev_ns, "N": s.ios});
    let mut clat = lat.clone();
    clat["percentile"] = Value::Object(pct);
    json!({
        "io_bytes": s.bytes,
        "io_kbytes": s.bytes / 1024,
        "bw_bytes": s.bw_bytes.round() as u64,
        "bw": (s.bw_bytes / 1024.0).round() as u64,
        "iops": s.iops,
        "runtime": runtime_ms,
        "total_ios": s.ios,
        "short_ios": 0,
        "drop_ios": 0,
        "slat_ns": empty_lat(),
        "clat_ns": clat,
        "lat_ns": lat,
    })
}

/// fio's latency bucket maps (percent of I/Os), computed from the merged histogram of both
/// directions, as fio does.
fn latency_buckets(rec: &DeviceRecorder) -> (Value, Value, Value) {
    let mut merged = rec.dir(Op::Read).hist.clone();
    merged.add(&rec.dir(Op::Write).hist).expect("same bounds");
    let total = merged.len();
    let bounds = [2u64, 4, 10, 20, 50, 100, 250, 500, 750, 1000];
    // Count of values < x ns.
    let below = |x: u64| -> u64 {
        if x == 0 {
            return 0;
        }
        merged
            .iter_recorded()
            .filter(|v| v.value_iterated_to() < x)
            .map(|v| v.count_at_value())
            .sum()
    };
    let pct = |lo: u64, hi: u64| -> f64 {
        if total == 0 {
            0.0
        } else {
            (below(hi) - below(lo)) as f64 * 100.0 / total as f64
        }
    };
    let mut maps = Vec::new();
    for scale in [1u64, 1_000, 1_000_000] {
        let mut m = Map::new();
        // fio's maps tile the axis: latency_ns covers [0, 1 us), latency_us [1 us, 1 ms),
        // latency_ms from 1 ms up; so the first micro- and millisecond bucket starts at 1.
        let mut lo = if scale == 1 { 0 } else { 1 };
        for b in bounds {
            m.insert(b.to_string(), json!(pct(lo * scale, b * scale)));
            lo = b;
        }
        if scale == 1_000_000 {
            m.insert("2000".into(), json!(pct(1000 * scale, 2000 * scale)));
            m.insert(">=2000".into(), json!(pct(2000 * scale, u64::MAX)));
        }
        maps.push(Value::Object(m));
    }
    let ms = maps.pop().expect("3");
    let us = maps.pop().expect("3");
    let ns = maps.pop().expect("3");
    (ns, us, ms)
}

/// Shares of each worker's CPU time and context switches per device, by I/O counts.
fn device_cpu_shares(report: &Report) -> Vec<(f64, f64, u64)> {
    let mut out = vec![(0.0, 0.0, 0u64); report.devices.len()];
    for w in &report.workers {
        let ios: Vec<(usize, u64)> = w
            .devices
            .iter()
            .filter_map(|&d| {
                report
                    .devices
                    .get(d as usize)
                    .map(|dev| (d as usize, dev.read.ios + dev.write.ios))
            })
            .collect();
        let total: u64 = ios.iter().map(|x| x.1).sum();
        for &(d, n) in &ios {
            let share = if total > 0 {
                n as f64 / total as f64
            } else {
                1.0 / ios.len() as f64
            };
            out[d].0 += w.usr_cpu_s * share;
            out[d].1 += w.sys_cpu_s * share;
            out[d].2 += ((w.ctx_voluntary + w.ctx_involuntary) as f64 * share).round() as u64;
        }
    }
    out
}

fn job_json(
    report: &Report,
    d: &DeviceReport,
    cpu: (f64, f64, u64),
    rec: Option<&DeviceRecorder>,
) -> Value {
    let runtime_ms = report.config.measured_ns / 1_000_000;
    let runtime_s = report.config.measured_ns as f64 / 1e9;
    let w = &report.config.workload;
    let extra = |op: Op| -> Vec<(f64, u64)> {
        match rec {
            Some(r) if r.dir(op).ios > 0 => {
                let s = r.dir(op).summary(&FIO_DEFAULT_PERCENTILES);
                FIO_DEFAULT_PERCENTILES
                    .iter()
                    .map(|&p| (p, s.percentiles.get(&percentile_key(p)).unwrap_or(0)))
                    .collect()
            }
            _ => Vec::new(),
        }
    };
    let pct_of_run = |s: f64| {
        if runtime_s > 0.0 {
            s * 100.0 / runtime_s
        } else {
            0.0
        }
    };
    let mut job = json!({
        "jobname": d.name,
        "groupid": 0,
        "error": 0,
        "eta": 0,
        "elapsed": runtime_s.round() as u64,
        "job options": {
            "name": d.name,
            "filename": d.path.clone().unwrap_or_else(|| d.name.clone()),
            "rw": w.rw.to_string(),
            "bs": w.block_size_bytes.to_string(),
            "iodepth": w.iodepth.to_string(),
            "ioengine": report.config.engine,
        },
        "read": dir_json(&d.read, runtime_ms, &extra(Op::Read)),
        "write": dir_json(&d.write, runtime_ms, &extra(Op::Write)),
        "trim": dir_json(&DirectionStats::default(), runtime_ms, &[]),
        "sync": {"total_ios": 0, "lat_ns": empty_lat()},
        "job_runtime": runtime_ms,
        "usr_cpu": pct_of_run(cpu.0),
        "sys_cpu": pct_of_run(cpu.1),
        "ctx": cpu.2,
        "majf": 0,
        "minf": 0,
    });
    if let Some(r) = rec {
        let (ns, us, ms) = latency_buckets(r);
        job["latency_ns"] = ns;
        job["latency_us"] = us;
        job["latency_ms"] = ms;
    }
    job
}

fn envelope(report: &Report, jobs: Vec<Value>) -> Value {
    let start_ms = report.config.start_unix_ns.unwrap_or(0) / 1_000_000;
    json!({
        "fio version": format!("nines-{}", report.nines_version),
        "timestamp": start_ms / 1000,
        "timestamp_ms": start_ms,
        "time": "",
        "global options": {
            "ioengine": report.config.engine,
            "rw": report.config.workload.rw.to_string(),
            "bs": report.config.workload.block_size_bytes.to_string(),
            "iodepth": report.config.workload.iodepth.to_string(),
        },
        "jobs": jobs,
        "disk_util": [],
    })
}

/// fio-style JSON from a report alone: the requested percentiles only, no bucket maps.
pub fn to_fio_json(report: &Report) -> Value {
    let shares = device_cpu_shares(report);
    let jobs = report
        .devices
        .iter()
        .zip(shares)
        .map(|(d, c)| job_json(report, d, c, None))
        .collect();
    envelope(report, jobs)
}

/// fio-style JSON with fio's default percentiles and latency buckets computed from the
/// per-device recorders (in device order).
pub fn to_fio_json_with_recorders(report: &Report, recorders: &[DeviceRecorder]) -> Value {
    assert_eq!(
        recorders.len(),
        report.devices.len(),
        "one recorder per device"
    );
    let shares = device_cpu_shares(report);
    let jobs = report
        .devices
        .iter()
        .zip(shares)
        .zip(recorders)
        .map(|((d, c), r)| job_json(report, d, c, Some(r)))
        .collect();
    envelope(report, jobs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nines_core::report::{DeviceMeta, ReportBuilder, RunConfig, RunKind, WorkerReport};
    use nines_core::units::DEFAULT_PERCENTILES;
    use nines_core::workload::WorkloadSpec;

    fn build() -> (Report, Vec<DeviceRecorder>) {
        let config = RunConfig {
            workload: WorkloadSpec::default(),
            engine: "libaio".into(),
            percentiles: DEFAULT_PERCENTILES.to_vec(),
            measured_ns: 2_000_000_000,
            start_unix_ns: Some(1_700_000_000_000_000_000),
            lat_log: None,
            hdr_log: None,
            extra: Default::default(),
        };
        let mut b = ReportBuilder::new(RunKind::Profile, config);
        let mut recs = Vec::new();
        for i in 0..2u64 {
            let mut r = DeviceRecorder::new();
            // 1000 I/Os: 900 at 1500 ns (bucket 1000-2000 ns is in latency_us "2"), 100 at 3 ms.
            for _ in 0..900 {
                r.record(Op::Read, 1500, 4096);
            }
            for _ in 0..100 {
                r.record(Op::Read, 3_000_000 + i, 4096);
            }
            b.device(
                DeviceMeta {
                    name: format!("d{i}"),
                    path: Some(format!("/dev/d{i}")),
                    size_bytes: 1 << 30,
                    cpu: Some(0),
                },
                &r,
            );
            recs.push(r);
        }
        b.worker(WorkerReport {
            index: 0,
            cpu: Some(0),
            devices: vec![0, 1],
            usr_cpu_s: 0.5,
            sys_cpu_s: 1.0,
            ctx_voluntary: 7,
            ctx_involuntary: 3,
        });
        (b.finish(), recs)
    }

    #[test]
    fn layout_matches_fio() {
        let (report, recs) = build();
        let v = to_fio_json_with_recorders(&report, &recs);
        let jobs = v["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 2);
        let r = &jobs[0]["read"];
        assert_eq!(r["total_ios"], 1000);
        assert_eq!(r["io_bytes"], 4_096_000);
        assert_eq!(r["iops"], 500.0);
        assert_eq!(r["bw_bytes"], 2_048_000);
        assert_eq!(r["bw"], 2000);
        assert_eq!(r["runtime"], 2000);
        let pct = r["clat_ns"]["percentile"].as_object().unwrap();
        assert_eq!(pct["99.999900"], 3_000_000);
        assert_eq!(pct["50.000000"], 1500);
        assert_eq!(
            pct["95.000000"], 3_000_000,
            "fio's default list is added from the histogram"
        );
        assert_eq!(r["lat_ns"]["N"], 1000);
        // Worker CPU is shared by I/O count: each device did half.
        assert_eq!(jobs[0]["usr_cpu"], 12.5);
        assert_eq!(jobs[0]["sys_cpu"], 25.0);
        assert_eq!(jobs[0]["ctx"], 5);
        assert_eq!(jobs[0]["latency_us"]["2"], 90.0);
        assert_eq!(jobs[0]["latency_ms"]["4"], 10.0);
        let sum: f64 = ["latency_ns", "latency_us", "latency_ms"]
            .iter()
            .flat_map(|k| {
                jobs[0][k]
                    .as_object()
                    .unwrap()
                    .values()
                    .map(|x| x.as_f64().unwrap())
            })
            .sum();
        assert!((sum - 100.0).abs() < 1e-9, "{sum}");
        assert_eq!(v["timestamp"], 1_700_000_000);
        // Without recorders: only the requested percentiles, and no invented buckets.
        let plain = to_fio_json(&report);
        assert!(plain["jobs"][0].get("latency_us").is_none());
        assert_eq!(
            plain["jobs"][0]["read"]["clat_ns"]["percentile"]
                .as_object()
                .unwrap()
                .len(),
            7
        );
    }
}
