//! fio-compatible JSON (`--fio-json`, `--fio-json-plus`): fio 3.33's `--output-format=json` (and
//! `json+`) layout, key for key and in fio's order, so fio-plot, `fio_jsonplus_clat2csv` and
//! scripts written for fio read nines runs.
//!
//! Mapping (documented in docs/report-schema.md):
//! - one fio job per target (device, file or volume); with several `--job`s, one per job and
//!   target (`groupid` = the job's index). `jobname` is the target's name (`job@target` with several
//!   jobs); `job options` say what fio would need to run the same workload (`filename` lists a
//!   volume's members separated by `:`, as fio does).
//! - `slat_ns`, `clat_ns` and `lat_ns` are fio's: slat the submission (issue until the submit
//!   call returned; `N: 0` for psync, which does the I/O inside the call, as fio writes for its
//!   sync engines), clat from then until the completion was seen, lat the whole (from the due
//!   time under `--rate-iops`). Percentiles as fio 3.33 writes them by default: under `clat_ns`
//!   (`clat_percentiles=1`), and under `slat_ns`/`lat_ns` only when asked
//!   ([`FioPercentiles`]); json+ `bins` beside each percentile list, in fio's own bucket scheme
//!   (64 buckets per power of two: [`fio_plat_bins`]). Where nines did not split a job's latency
//!   (simulated runs, volumes of several members, a target shared by several jobs) `slat_ns` and
//!   `clat_ns` carry the report's moments or `N: 0`, and the percentiles go under `lat_ns`, as
//!   fio writes with `lat_percentiles=1, clat_percentiles=0` (which the job options then say).
//! - `bw_*`/`iops_*` sample statistics come from the interval histograms (`--hdr-log`), one
//!   sample per interval (a trailing sliver left out); without them `*_samples` is 0, as fio
//!   writes for a run shorter than one averaging period.
//! - fio's default `percentile_list` is merged with the requested percentiles when recorders are
//!   given (and the job options say so); from a report alone only the requested ones exist.
//! - `iodepth_level/submit/complete` are counted by the worker as fio counts them (the depth in
//!   flight at each submission, I/Os per submit call, completions per reap; [`IoDepthCounts`]);
//!   all zero, as fio writes a job it did not measure, for simulated runs. `latency_ns/us/ms`
//!   (percent of I/Os per bucket, both directions) are of clat, as fio's `io_u_mark_latency`
//!   (of lat where clat was not split), and need the recorders.
//! - `usr_cpu`/`sys_cpu` (% of the run) and `ctx`: a nines worker drives several targets, so its
//!   CPU time and context switches are shared among them by their I/O counts.

pub use nines_core::fiolog::{fio_plat_idx, fio_plat_val};
use nines_core::op::Op;
use nines_core::report::{DirectionStats, Report};
use nines_core::stats::{DeviceRecorder, DirRecorder, IoDepthCounts, LatencyParts};
use nines_core::units::percentile_key;
use nines_core::workload::{Distribution, RwMode, WorkloadSpec};

use crate::intervals::IntervalSeries;
use crate::ojson::Json;
use crate::time::ctime_utc;

/// fio's default `percentile_list`.
pub const FIO_DEFAULT_PERCENTILES: [f64; 17] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95,
    99.99,
];

/// Plain fio JSON or json+ (with per-bucket `bins`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FioFlavor {
    Json,
    JsonPlus,
}

/// What an export is made of: the report, and optionally what only the run itself has.
#[derive(Clone, Copy)]
pub struct FioSource<'a> {
    pub report: &'a Report,
    /// Each target's recorder in report order (merged over jobs).
    pub recorders: Option<&'a [DeviceRecorder]>,
    /// With several jobs: `[job][target]` recorders.
    pub job_recorders: Option<&'a [Vec<DeviceRecorder>]>,
    /// Interval series of the run (`--hdr-log`), for the bandwidth and IOPS samples.
    pub intervals: &'a [IntervalSeries],
    /// fio's `group_reporting`: one fio job per nines job with its targets merged (I/O-weighted
    /// statistics, merged histograms, summed rates), which is what fio-plot's `-l` expects;
    /// otherwise one fio job per target.
    pub group_reporting: bool,
    /// Each target's slat and clat in report order (None: not split, e.g. a volume of several
    /// members); absent for simulated runs.
    pub parts: Option<&'a [Option<LatencyParts>]>,
    /// Each target's queue-depth distributions in report order; absent for simulated runs.
    pub depth: Option<&'a [IoDepthCounts]>,
    /// Which latencies carry percentiles (fio's `*_percentiles` options).
    pub percentiles: FioPercentiles,
}

impl<'a> FioSource<'a> {
    pub fn new(report: &'a Report) -> Self {
        FioSource {
            report,
            recorders: None,
            job_recorders: None,
            intervals: &[],
            group_reporting: false,
            parts: None,
            depth: None,
            percentiles: FioPercentiles::default(),
        }
    }
}

/// fio's `slat_percentiles`, `clat_percentiles` and `lat_percentiles`: which latency objects
/// carry a `percentile` list (and, in json+, `bins`). fio's default is clat alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FioPercentiles {
    pub slat: bool,
    pub clat: bool,
    pub lat: bool,
}

impl Default for FioPercentiles {
    fn default() -> Self {
        FioPercentiles {
            slat: false,
            clat: true,
            lat: false,
        }
    }
}

impl FioPercentiles {
    /// Parses `slat,clat,lat` (any of them, comma-separated; `none` for no percentiles).
    pub fn parse(s: &str) -> Result<FioPercentiles, String> {
        let mut out = FioPercentiles {
            slat: false,
            clat: false,
            lat: false,
        };
        for k in s.split(',').map(str::trim) {
            match k {
                "slat" => out.slat = true,
                "clat" => out.clat = true,
                "lat" => out.lat = true,
                "none" => {}
                _ => {
                    return Err(format!(
                        "`{k}` is not a latency fio reports percentiles of: give slat, clat, lat (comma-separated) or none"
                    ));
                }
            }
        }
        Ok(out)
    }
}

/// fio's percentile key text: `%f` of the percentile (`99.999900`).
pub fn fio_percentile_key(p: f64) -> String {
    format!("{p:.6}")
}

/// fio's time syntax for a duration: whole seconds bare (fio's default unit), else ms, us or ns.
fn fio_duration(ns: u64) -> String {
    if ns.is_multiple_of(1_000_000_000) {
        format!("{}", ns / 1_000_000_000)
    } else if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns.is_multiple_of(1_000) {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}

fn zero_lat() -> Json {
    let mut o = Json::obj();
    o.push("min", 0u64)
        .push("max", 0u64)
        .push("mean", 0.0)
        .push("stddev", 0.0)
        .push("N", 0u64);
    o
}

/// A latency part from the report alone (no recorder): its moments, no percentiles; `N: 0` when
/// it was not measured.
fn part_lat(part: Option<&nines_core::stats::LatencySummary>, ios: u64) -> Json {
    let Some(l) = part.filter(|_| ios > 0) else {
        return zero_lat();
    };
    let mut o = Json::obj();
    o.push("min", l.min_ns)
        .push("max", l.max_ns)
        .push("mean", l.mean_ns)
        .push("stddev", l.stddev_ns)
        .push("N", ios);
    o
}

/// A recorder's histogram in fio's bucket scheme, as json+ `bins` and fio's histogram logs carry
/// it: (fio's value of the bucket, count), ascending. Each 3-significant-digit bucket of the HDR
/// histogram goes to the fio bucket of its lowest value; an HDR bucket is at most 1/1024 of its
/// value wide and a fio bucket 1/64, so only values within that of a fio bucket's edge can land
/// one bucket low.
pub fn fio_plat_bins(rec: &DirRecorder) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    if rec.ios == 0 {
        return out;
    }
    let mut last_idx = usize::MAX;
    for v in rec.hist.iter_recorded() {
        let low = rec.hist.lowest_equivalent(v.value_iterated_to());
        let idx = fio_plat_idx(low);
        if idx == last_idx {
            out.last_mut().expect("pushed").1 += v.count_at_value();
        } else {
            out.push((fio_plat_val(idx), v.count_at_value()));
            last_idx = idx;
        }
    }
    out
}

/// fio's `add_ddir_lat_json`: moments of `rec`, and with `percentiles` its percentile list and
/// (json+) its bins. `N` is the recorder's count, as fio's is the samples it took.
fn rec_lat_json(
    rec: &DirRecorder,
    with_percentiles: bool,
    percentiles: &[f64],
    flavor: FioFlavor,
) -> Json {
    if rec.ios == 0 {
        return zero_lat();
    }
    let summary = rec.summary(if with_percentiles { percentiles } else { &[] });
    let mut o = Json::obj();
    o.push("min", summary.min_ns)
        .push("max", summary.max_ns)
        .push("mean", summary.mean_ns)
        .push("stddev", summary.stddev_ns)
        .push("N", rec.ios);
    if !with_percentiles {
        return o;
    }
    let mut pct = Json::obj();
    for (&p, (_, v)) in percentiles.iter().zip(summary.percentiles.iter()) {
        pct.push(fio_percentile_key(p), v);
    }
    o.push("percentile", pct);
    if flavor == FioFlavor::JsonPlus {
        let mut bins = Json::obj();
        for (value, count) in fio_plat_bins(rec) {
            bins.push(value.to_string(), count);
        }
        o.push("bins", bins);
    }
    o
}

/// One fio job being built: which statistics, recorder and options it takes.
struct JobIn<'a> {
    name: String,
    groupid: u32,
    workload: &'a WorkloadSpec,
    filename: String,
    /// The target's name, which tags its interval series.
    target: &'a str,
    read: &'a DirectionStats,
    write: &'a DirectionStats,
    rec: Option<&'a DeviceRecorder>,
    /// The job's slat and clat, where nines split its latency.
    parts: Option<&'a LatencyParts>,
    /// The job's queue-depth distributions, where measured.
    depth: Option<IoDepthCounts>,
    cpu: (f64, f64, u64),
    /// Share of the target's interval I/Os that belong to this job (1 with one job).
    interval_share: f64,
    /// A group_reporting job: every target's intervals, summed.
    group: bool,
}

/// Sample statistics of per-interval rates, as fio computes them (sample standard deviation).
struct Samples {
    min: f64,
    max: f64,
    mean: f64,
    dev: f64,
    n: u64,
}

fn sample_stats(xs: &[f64]) -> Samples {
    if xs.is_empty() {
        return Samples {
            min: 0.0,
            max: 0.0,
            mean: 0.0,
            dev: 0.0,
            n: 0,
        };
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let dev = if xs.len() > 1 {
        (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    Samples {
        min: xs.iter().copied().fold(f64::INFINITY, f64::min),
        max: xs.iter().copied().fold(0.0, f64::max),
        mean,
        dev,
        n: xs.len() as u64,
    }
}

/// IOPS of each interval of `target` in direction `op`, leaving out a first or last interval
/// shorter than half the median (a sliver, whose rate means nothing).
fn interval_iops(intervals: &[IntervalSeries], target: &str, op: Op) -> Vec<f64> {
    let tag = nines_core::stats::hdr_tag_device(target);
    let Some(series) = intervals.iter().find(|s| s.device == tag && s.op == op) else {
        return Vec::new();
    };
    crate::run::interval_rates(series, 0.0)
        .0
        .into_iter()
        .map(|(_, iops)| iops)
        .collect()
}

/// IOPS of each interval summed over every target (cut to the shortest series), times `share`.
fn group_interval_iops(src: &FioSource, op: Op, share: f64) -> Vec<f64> {
    let per: Vec<Vec<f64>> = src
        .report
        .devices
        .iter()
        .map(|d| interval_iops(src.intervals, &d.name, op))
        .collect();
    let n = per.iter().map(Vec::len).min().unwrap_or(0);
    (0..n)
        .map(|i| per.iter().map(|v| v[i]).sum::<f64>() * share)
        .collect()
}

fn lat_json(
    s: &DirectionStats,
    rec: Option<&DirRecorder>,
    with_percentiles: bool,
    percentiles: &[f64],
    flavor: FioFlavor,
) -> Json {
    let l = &s.lat_ns;
    let mut o = Json::obj();
    o.push("min", l.min_ns)
        .push("max", l.max_ns)
        .push("mean", l.mean_ns)
        .push("stddev", l.stddev_ns)
        .push("N", s.ios);
    if s.ios == 0 || !with_percentiles {
        return o;
    }
    let mut pct = Json::obj();
    match rec {
        Some(r) => {
            let summary = r.summary(percentiles);
            for (&p, (_, v)) in percentiles.iter().zip(summary.percentiles.iter()) {
                pct.push(fio_percentile_key(p), v);
            }
        }
        None => {
            let mut all: Vec<(f64, u64)> = l
                .percentiles
                .iter()
                .filter_map(|(k, v)| k.parse::<f64>().ok().map(|p| (p, v)))
                .collect();
            all.sort_by(|a, b| a.0.total_cmp(&b.0));
            all.dedup_by(|a, b| a.0 == b.0);
            for (p, v) in all {
                pct.push(fio_percentile_key(p), v);
            }
        }
    }
    o.push("percentile", pct);
    if let (FioFlavor::JsonPlus, Some(r)) = (flavor, rec) {
        let mut bins = Json::obj();
        for (value, count) in fio_plat_bins(r) {
            bins.push(value.to_string(), count);
        }
        o.push("bins", bins);
    }
    o
}

/// Which of a job's latencies carry percentiles: the ones asked where nines split its latency,
/// else lat alone (fio's `lat_percentiles=1, clat_percentiles=0`).
fn job_kinds(job: &JobIn, src: &FioSource) -> FioPercentiles {
    if job.parts.is_some() {
        src.percentiles
    } else {
        FioPercentiles {
            slat: false,
            clat: false,
            lat: true,
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn dir_json(
    job: &JobIn,
    op: Op,
    src: &FioSource,
    runtime_ms: u64,
    percentiles: &[f64],
    agg_kib: f64,
    flavor: FioFlavor,
) -> Json {
    let s = match op {
        Op::Read => job.read,
        Op::Write => job.write,
    };
    let rec = job.rec.map(|r| r.dir(op));
    let kinds = job_kinds(job, src);
    let (slat, clat) = match job.parts {
        Some(p) => (
            rec_lat_json(p.slat.dir(op), kinds.slat, percentiles, flavor),
            rec_lat_json(p.clat.dir(op), kinds.clat, percentiles, flavor),
        ),
        None => (
            part_lat(s.slat_ns.as_ref(), s.ios),
            part_lat(s.clat_ns.as_ref(), s.ios),
        ),
    };
    let mut o = Json::obj();
    o.push("io_bytes", s.bytes)
        .push("io_kbytes", s.bytes / 1024)
        .push("bw_bytes", s.bw_bytes.round() as u64)
        .push("bw", (s.bw_bytes / 1024.0).round() as u64)
        .push("iops", s.iops)
        .push("runtime", if s.ios > 0 { runtime_ms } else { 0 })
        .push("total_ios", s.ios)
        .push("short_ios", 0u64)
        .push("drop_ios", 0u64)
        .push("slat_ns", slat)
        .push("clat_ns", clat)
        .push("lat_ns", lat_json(s, rec, kinds.lat, percentiles, flavor));
    let iops: Vec<f64> = if s.ios > 0 {
        if job.group {
            group_interval_iops(src, op, job.interval_share)
        } else {
            interval_iops(src.intervals, job.target, op)
                .into_iter()
                .map(|x| x * job.interval_share)
                .collect()
        }
    } else {
        Vec::new()
    };
    let bytes_per_io = if s.ios > 0 {
        s.bytes as f64 / s.ios as f64
    } else {
        0.0
    };
    let bw_kib: Vec<f64> = iops.iter().map(|x| x * bytes_per_io / 1024.0).collect();
    let bw = sample_stats(&bw_kib);
    let io = sample_stats(&iops);
    let agg = if agg_kib > 0.0 && bw.n > 0 {
        bw.mean * 100.0 / agg_kib
    } else {
        0.0
    };
    o.push("bw_min", bw.min.round() as u64)
        .push("bw_max", bw.max.round() as u64)
        .push("bw_agg", agg)
        .push("bw_mean", bw.mean)
        .push("bw_dev", bw.dev)
        .push("bw_samples", bw.n)
        .push("iops_min", io.min.round() as u64)
        .push("iops_max", io.max.round() as u64)
        .push("iops_mean", io.mean)
        .push("iops_stddev", io.dev)
        .push("iops_samples", io.n);
    o
}

/// fio's latency bucket maps (percent of I/Os, a bucket with any at least 0.01 as fio's
/// `stat_calc_lat` writes it), from the merged histogram of both directions, as fio does:
/// `latency_ns` covers [0, 1 us), `latency_us` [1 us, 1 ms), `latency_ms` the rest.
fn latency_buckets(rec: &DeviceRecorder) -> [Json; 3] {
    let mut merged = rec.dir(Op::Read).hist.clone();
    merged.add(&rec.dir(Op::Write).hist).expect("same bounds");
    let total = merged.len();
    let bounds = [2u64, 4, 10, 20, 50, 100, 250, 500, 750, 1000];
    // Count of values < x ns.
    let below = |x: u64| -> u64 {
        merged
            .iter_recorded()
            .filter(|v| v.value_iterated_to() < x)
            .map(|v| v.count_at_value())
            .sum()
    };
    let pct = |lo: u64, hi: u64| -> f64 {
        if total == 0 {
            return 0.0;
        }
        let n = below(hi) - below(lo);
        let p = n as f64 * 100.0 / total as f64;
        if n > 0 && p < 0.01 { 0.01 } else { p }
    };
    let mut maps = [Json::obj(), Json::obj(), Json::obj()];
    for (m, scale) in maps.iter_mut().zip([1u64, 1_000, 1_000_000]) {
        let mut lo = if scale == 1 { 0 } else { 1 };
        for b in bounds {
            m.push(b.to_string(), pct(lo * scale, b * scale));
            lo = b;
        }
        if scale == 1_000_000 {
            m.push("2000", pct(1000 * scale, 2000 * scale));
            m.push(">=2000", pct(2000 * scale, u64::MAX));
        }
    }
    maps
}

/// Shares of each worker's CPU time and context switches per target, by I/O counts.
fn target_cpu_shares(report: &Report) -> Vec<(f64, f64, u64)> {
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

/// The percentiles a job reports: fio's defaults merged with the requested ones (with
/// recorders), or the requested ones (without), in numeric order.
fn percentile_list(report: &Report, with_recorders: bool) -> Vec<f64> {
    let mut all = report.config.percentiles.clone();
    if with_recorders {
        all.extend_from_slice(&FIO_DEFAULT_PERCENTILES);
    }
    all.sort_by(f64::total_cmp);
    all.dedup();
    all
}

fn job_options(job: &JobIn, src: &FioSource, percentiles: &[f64]) -> Json {
    let report = src.report;
    let kinds = job_kinds(job, src);
    let w = job.workload;
    let buffered = report.config.extra.get("buffered") == Some(&serde_json::Value::Bool(true));
    let mut o = Json::obj();
    o.push("name", job.name.as_str())
        .push("filename", job.filename.as_str());
    if let Some(size) = w.region_size_bytes {
        o.push("size", size.to_string());
    }
    if w.region_offset_bytes > 0 {
        o.push("offset", w.region_offset_bytes.to_string());
    }
    o.push("rw", w.rw.to_string());
    if w.rw == RwMode::RandRw {
        o.push("rwmixread", w.read_mix_pct.to_string());
    }
    o.push("bs", w.block_size_bytes.to_string())
        .push("iodepth", w.iodepth.to_string())
        .push("ioengine", report.config.engine.as_str())
        .push("direct", if buffered { "0" } else { "1" });
    if let Some(r) = w.runtime_ns {
        // nines runs for the runtime, wrapping around the region: fio's time_based.
        o.push("runtime", fio_duration(r)).push("time_based", "1");
    }
    if let Some(n) = w.ios_max {
        o.push("number_ios", n.to_string());
    }
    if w.ramp_ns > 0 {
        o.push("ramp_time", fio_duration(w.ramp_ns));
    }
    o.push("numjobs", "1");
    if job.group {
        o.push("group_reporting", "");
    }
    if w.thinktime_ns > 0 {
        o.push("thinktime", fio_duration(w.thinktime_ns));
    }
    if let Some(r) = w.rate_iops {
        o.push("rate_iops", r.to_string());
        if w.arrival == nines_core::workload::Arrival::Poisson {
            o.push("rate_process", "poisson");
        }
    }
    if let Distribution::Zipf { .. } = w.distribution {
        o.push("random_distribution", w.distribution.to_string());
    }
    let list: Vec<String> = percentiles.iter().map(|p| percentile_key(*p)).collect();
    let flag = |b: bool| if b { "1" } else { "0" };
    o.push("slat_percentiles", flag(kinds.slat))
        .push("clat_percentiles", flag(kinds.clat))
        .push("lat_percentiles", flag(kinds.lat))
        .push("percentile_list", list.join(":"));
    o
}

/// The fio jobs of a report: one per target, or one per job and target with several jobs.
fn jobs_of<'a>(src: &FioSource<'a>) -> Vec<JobIn<'a>> {
    let report = src.report;
    let shares = target_cpu_shares(report);
    let filename = |t: usize| -> String {
        let d = &report.devices[t];
        match (&d.volume, &d.path) {
            (Some(v), _) => v
                .members
                .iter()
                .map(|m| m.path.clone().unwrap_or_else(|| m.name.clone()))
                .collect::<Vec<_>>()
                .join(":"),
            (None, Some(p)) => p.clone(),
            (None, None) => d.name.clone(),
        }
    };
    if report.jobs.len() <= 1 {
        return report
            .devices
            .iter()
            .enumerate()
            .map(|(t, d)| JobIn {
                name: d.name.clone(),
                groupid: 0,
                workload: report
                    .jobs
                    .first()
                    .map_or(&report.config.workload, |j| &j.workload),
                filename: filename(t),
                target: &d.name,
                read: &d.read,
                write: &d.write,
                rec: src.recorders.and_then(|r| r.get(t)),
                parts: src.parts.and_then(|p| p.get(t)?.as_ref()),
                depth: src.depth.and_then(|d| d.get(t).copied()),
                cpu: shares[t],
                interval_share: 1.0,
                group: false,
            })
            .collect();
    }
    let mut out = Vec::new();
    for (j, job) in report.jobs.iter().enumerate() {
        for (t, d) in report.devices.iter().enumerate() {
            let Some(stats) = job.devices.get(t) else {
                continue;
            };
            let ios = stats.read.ios + stats.write.ios;
            let target_ios = d.read.ios + d.write.ios;
            let alone = ios == target_ios;
            let share = if target_ios > 0 {
                ios as f64 / target_ios as f64
            } else {
                0.0
            };
            let c = shares[t];
            out.push(JobIn {
                name: format!("{}@{}", job.name, d.name),
                groupid: j as u32,
                workload: &job.workload,
                filename: filename(t),
                target: &d.name,
                read: &stats.read,
                write: &stats.write,
                rec: src.job_recorders.and_then(|r| r.get(j)?.get(t)),
                // The target's split and depths are this job's only when no other job used it.
                parts: alone
                    .then(|| src.parts.and_then(|p| p.get(t)?.as_ref()))
                    .flatten(),
                depth: alone
                    .then(|| src.depth.and_then(|d| d.get(t).copied()))
                    .flatten(),
                cpu: (
                    c.0 * share,
                    c.1 * share,
                    (c.2 as f64 * share).round() as u64,
                ),
                interval_share: share,
                group: false,
            });
        }
    }
    out
}

/// The fio jobs of a report under fio's `group_reporting`: one per nines job (one for a run
/// without `--job`s), over every target: the job's own I/O-weighted statistics, the targets'
/// recorders merged (`merged[j]`), CPU shared by I/O count, `filename` every target's.
fn groups_of<'a>(src: &FioSource<'a>, merged: &'a [GroupMerge]) -> Vec<JobIn<'a>> {
    let report = src.report;
    let shares = target_cpu_shares(report);
    let cpu_all = shares
        .iter()
        .fold((0.0, 0.0, 0u64), |a, c| (a.0 + c.0, a.1 + c.1, a.2 + c.2));
    let filename = report
        .devices
        .iter()
        .map(|d| d.path.clone().unwrap_or_else(|| d.name.clone()))
        .collect::<Vec<_>>()
        .join(":");
    let first = report.devices.first().map_or("", |d| d.name.as_str());
    let all_ios = (report.aggregate.read.ios + report.aggregate.write.ios).max(1) as f64;
    if report.jobs.len() <= 1 {
        return vec![JobIn {
            name: report
                .jobs
                .first()
                .map_or_else(|| first.to_string(), |j| j.name.clone()),
            groupid: 0,
            workload: report
                .jobs
                .first()
                .map_or(&report.config.workload, |j| &j.workload),
            filename,
            target: first,
            read: &report.aggregate.read,
            write: &report.aggregate.write,
            rec: merged.first().and_then(|m| m.rec.as_ref()),
            parts: merged.first().and_then(|m| m.parts.as_ref()),
            depth: merged.first().and_then(|m| m.depth),
            cpu: cpu_all,
            interval_share: 1.0,
            group: true,
        }];
    }
    report
        .jobs
        .iter()
        .enumerate()
        .map(|(j, job)| {
            let share = (job.read.ios + job.write.ios) as f64 / all_ios;
            JobIn {
                name: job.name.clone(),
                groupid: j as u32,
                workload: &job.workload,
                filename: filename.clone(),
                target: first,
                read: &job.read,
                write: &job.write,
                rec: merged.get(j).and_then(|m| m.rec.as_ref()),
                parts: merged.get(j).and_then(|m| m.parts.as_ref()),
                depth: merged.get(j).and_then(|m| m.depth),
                cpu: (
                    cpu_all.0 * share,
                    cpu_all.1 * share,
                    (cpu_all.2 as f64 * share).round() as u64,
                ),
                interval_share: share,
                group: true,
            }
        })
        .collect()
}

/// One group_reporting job's merged recorder, latency split and depths (see [`groups_of`]):
/// each None where a target's is missing (or, with several jobs, shared with another job).
struct GroupMerge {
    rec: Option<DeviceRecorder>,
    parts: Option<LatencyParts>,
    depth: Option<IoDepthCounts>,
}

/// Each group's merged recorder, split and depths (see [`groups_of`]).
fn group_recorders(src: &FioSource) -> Vec<GroupMerge> {
    let report = src.report;
    let targets = report.devices.len();
    let njobs = report.jobs.len().max(1);
    (0..njobs)
        .map(|j| {
            let mut rec = Some(DeviceRecorder::new());
            let mut parts = Some(LatencyParts::default());
            let mut depth = Some(IoDepthCounts::default());
            for t in 0..targets {
                let (r, alone) = if report.jobs.len() <= 1 {
                    (src.recorders.and_then(|r| r.get(t)), true)
                } else {
                    let d = &report.devices[t];
                    let mine = report.jobs[j]
                        .devices
                        .get(t)
                        .map_or(0, |s| s.read.ios + s.write.ios);
                    (
                        src.job_recorders.and_then(|r| r.get(j)?.get(t)),
                        mine == d.read.ios + d.write.ios,
                    )
                };
                match (rec.as_mut(), r) {
                    (Some(acc), Some(r)) => acc.merge_from(r),
                    _ => rec = None,
                }
                let p = src.parts.and_then(|p| p.get(t)?.as_ref()).filter(|_| alone);
                match (parts.as_mut(), p) {
                    (Some(acc), Some(p)) => acc.merge_from(p),
                    _ => parts = None,
                }
                let dp = src.depth.and_then(|d| d.get(t)).filter(|_| alone);
                match (depth.as_mut(), dp) {
                    (Some(acc), Some(d)) => acc.merge_from(d),
                    _ => depth = None,
                }
            }
            GroupMerge { rec, parts, depth }
        })
        .collect()
}

/// fio's `stat_calc_dist`: each bucket's percent of `total`, at least 0.1 where any.
fn depth_dist(map: &[u64; 7]) -> [f64; 7] {
    let total: u64 = map.iter().sum();
    let mut out = [0.0; 7];
    if total == 0 {
        return out;
    }
    for (o, &n) in out.iter_mut().zip(map) {
        let p = n as f64 * 100.0 / total as f64;
        *o = if n > 0 && p < 0.1 { 0.1 } else { p };
    }
    out
}

/// fio's `iodepth_level`, `iodepth_submit` and `iodepth_complete` objects, keyed as fio keys
/// them; all zero for a job whose depths were not measured, as fio writes them.
fn depth_json(d: Option<IoDepthCounts>) -> [Json; 3] {
    let d = d.unwrap_or_default();
    let level_keys = ["1", "2", "4", "8", "16", "32", ">=64"];
    let batch_keys = ["0", "4", "8", "16", "32", "64", ">=64"];
    let mut out = [Json::obj(), Json::obj(), Json::obj()];
    for (o, (map, keys)) in out.iter_mut().zip([
        (&d.level, level_keys),
        (&d.submit, batch_keys),
        (&d.complete, batch_keys),
    ]) {
        for (k, v) in keys.iter().zip(depth_dist(map)) {
            o.push(*k, v);
        }
    }
    out
}

/// The fio-format document.
pub fn export(src: &FioSource, flavor: FioFlavor) -> Json {
    let report = src.report;
    let merged = if src.group_reporting {
        group_recorders(src)
    } else {
        Vec::new()
    };
    let jobs = if src.group_reporting {
        groups_of(src, &merged)
    } else {
        jobs_of(src)
    };
    let with_recorders = jobs.iter().all(|j| j.rec.is_some()) && !jobs.is_empty();
    let percentiles = percentile_list(report, with_recorders);
    let runtime_ms = report.config.measured_ns / 1_000_000;
    let runtime_s = report.config.measured_ns as f64 / 1e9;
    let elapsed_s = (report.config.measured_ns + report.config.workload.ramp_ns) as f64 / 1e9;
    // fio's bw_agg is a job's mean bandwidth as a share of its group's total.
    let agg_kib = |op: Op, group: u32| -> f64 {
        jobs.iter()
            .filter(|j| j.groupid == group)
            .map(|j| match op {
                Op::Read => j.read.bw_bytes,
                Op::Write => j.write.bw_bytes,
            })
            .sum::<f64>()
            / 1024.0
    };
    let pct_of_run = |s: f64| {
        if runtime_s > 0.0 {
            s * 100.0 / runtime_s
        } else {
            0.0
        }
    };
    let mut out = Vec::with_capacity(jobs.len());
    for job in &jobs {
        let mut o = Json::obj();
        o.push("jobname", job.name.as_str())
            .push("groupid", job.groupid)
            .push("error", 0u64)
            .push("eta", 0u64)
            .push("elapsed", elapsed_s.round() as u64)
            .push("job options", job_options(job, src, &percentiles));
        for op in Op::ALL {
            let d = dir_json(
                job,
                op,
                src,
                runtime_ms,
                &percentiles,
                agg_kib(op, job.groupid),
                flavor,
            );
            o.push(op.name(), d);
        }
        let trim = dir_json(
            &JobIn {
                read: &EMPTY,
                write: &EMPTY,
                rec: None,
                parts: None,
                ..clone_job(job)
            },
            Op::Read,
            src,
            runtime_ms,
            &percentiles,
            0.0,
            flavor,
        );
        o.push("trim", trim);
        let mut sync = Json::obj();
        sync.push("total_ios", 0u64).push("lat_ns", zero_lat());
        o.push("sync", sync)
            .push("job_runtime", runtime_ms)
            .push("usr_cpu", pct_of_run(job.cpu.0))
            .push("sys_cpu", pct_of_run(job.cpu.1))
            .push("ctx", job.cpu.2)
            .push("majf", 0u64)
            .push("minf", 0u64);
        let [level, submit, complete] = depth_json(job.depth);
        o.push("iodepth_level", level)
            .push("iodepth_submit", submit)
            .push("iodepth_complete", complete);
        // fio's io_u_mark_latency counts clat; lat where nines did not split it.
        let bucket_rec = job.parts.map(|p| &p.clat).or(job.rec);
        if let Some(r) = bucket_rec {
            let [ns, us, ms] = latency_buckets(r);
            o.push("latency_ns", ns)
                .push("latency_us", us)
                .push("latency_ms", ms);
        }
        o.push("latency_depth", job.workload.iodepth)
            .push("latency_target", 0u64)
            .push("latency_percentile", 100.0)
            .push("latency_window", 0u64);
        out.push(o);
    }
    let start_s = report.config.start_unix_ns.unwrap_or(0) / 1_000_000_000;
    let start_ms = report.config.start_unix_ns.unwrap_or(0) / 1_000_000;
    let mut doc = Json::obj();
    doc.push("fio version", format!("nines-{}", report.nines_version))
        .push("timestamp", start_s)
        .push("timestamp_ms", start_ms)
        .push("time", ctime_utc(start_s))
        .push("jobs", Json::Arr(out))
        .push("disk_util", Json::Arr(Vec::new()));
    doc
}

static EMPTY: DirectionStats = DirectionStats {
    ios: 0,
    bytes: 0,
    iops: 0.0,
    bw_bytes: 0.0,
    lat_ns: nines_core::stats::LatencySummary {
        min_ns: 0,
        max_ns: 0,
        mean_ns: 0.0,
        stddev_ns: 0.0,
        percentiles: nines_core::stats::Percentiles(Vec::new()),
    },
    slat_ns: None,
    clat_ns: None,
    recorder: None,
};

fn clone_job<'a>(j: &JobIn<'a>) -> JobIn<'a> {
    JobIn {
        name: j.name.clone(),
        filename: j.filename.clone(),
        ..*j
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nines_core::report::{DeviceMeta, ReportBuilder, RunConfig, RunKind, WorkerReport};
    use nines_core::units::DEFAULT_PERCENTILES;

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

    /// Two targets of different speeds and I/O counts: fio-plot's `-l` averages jobs
    /// unweighted, so per-target jobs show a mean that is not the run's; under group_reporting
    /// the one job carries the run's I/O-weighted mean, every I/O in its histogram and both
    /// files in `filename`.
    #[test]
    fn group_reporting_gives_one_job_with_the_runs_weighted_mean() {
        let config = RunConfig {
            workload: WorkloadSpec::default(),
            engine: "psync".into(),
            percentiles: DEFAULT_PERCENTILES.to_vec(),
            measured_ns: 1_000_000_000,
            start_unix_ns: None,
            lat_log: None,
            hdr_log: None,
            extra: Default::default(),
        };
        let mut b = ReportBuilder::new(RunKind::Profile, config);
        let mut recs = Vec::new();
        // d0: 3000 I/Os at 2 us; d1: 1000 I/Os at 30 us. Weighted mean 9 us; unweighted 16 us.
        for (i, (n, ns)) in [(3000u64, 2_000u64), (1000, 30_000)]
            .into_iter()
            .enumerate()
        {
            let mut r = DeviceRecorder::new();
            for _ in 0..n {
                r.record(Op::Read, ns, 4096);
            }
            b.device(
                DeviceMeta {
                    name: format!("f{i}"),
                    path: Some(format!("/data/f{i}")),
                    size_bytes: 1 << 30,
                    cpu: Some(0),
                },
                &r,
            );
            recs.push(r);
        }
        let report = b.finish();
        let per_target = FioSource {
            recorders: Some(&recs),
            ..FioSource::new(&report)
        };
        let v = export(&per_target, FioFlavor::Json).to_value();
        let means: Vec<f64> = v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["read"]["lat_ns"]["mean"].as_f64().unwrap())
            .collect();
        assert_eq!(means.len(), 2);
        let unweighted = means.iter().sum::<f64>() / 2.0;
        let grouped = FioSource {
            group_reporting: true,
            ..per_target
        };
        let v = export(&grouped, FioFlavor::JsonPlus).to_value();
        let jobs = v["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 1);
        let r = &jobs[0]["read"];
        let mean = r["lat_ns"]["mean"].as_f64().unwrap();
        let want = report.aggregate.read.lat_ns.mean_ns;
        assert!((mean - want).abs() < 1e-6, "{mean} vs {want}");
        assert!((mean - 9_000.0).abs() / 9_000.0 < 0.01, "{mean}");
        assert!(
            (unweighted - 16_000.0).abs() / 16_000.0 < 0.01,
            "{unweighted}"
        );
        assert_eq!(r["total_ios"], 4000);
        let bins: u64 = r["lat_ns"]["bins"]
            .as_object()
            .unwrap()
            .values()
            .map(|c| c.as_u64().unwrap())
            .sum();
        assert_eq!(bins, 4000, "every target's I/Os in the merged histogram");
        let o = &jobs[0]["job options"];
        assert_eq!(o["filename"], "/data/f0:/data/f1");
        assert_eq!(o["group_reporting"], "");
    }

    /// With the run's slat/clat split and depth counts: percentiles and fio-scheme bins under
    /// clat_ns only (fio's default), the buckets of clat, the depth distributions as fio's
    /// stat_calc_dist writes them, and lat/slat percentiles only when asked.
    #[test]
    fn split_latency_goes_where_fio_puts_it() {
        let (report, recs) = build();
        let parts: Vec<Option<LatencyParts>> = (0..2)
            .map(|i| {
                let mut p = LatencyParts::default();
                for k in 0..1000u64 {
                    p.slat.record(Op::Read, 500, 4096);
                    // 900 at 1000 ns, 100 at 2 ms: latency_us "2" and latency_ms "4".
                    p.clat
                        .record(Op::Read, if k < 900 { 1000 } else { 2_000_000 + i }, 4096);
                }
                (i == 0).then_some(p)
            })
            .collect();
        let mut d = IoDepthCounts::default();
        for _ in 0..999 {
            d.mark_depth(4, 1);
            d.mark_submit(1);
            d.mark_complete(1);
        }
        d.mark_depth(1, 1);
        let depth = [d, d];
        let src = FioSource {
            recorders: Some(&recs),
            parts: Some(&parts),
            depth: Some(&depth),
            ..FioSource::new(&report)
        };
        let v = export(&src, FioFlavor::JsonPlus).to_value();
        let j = &v["jobs"][0];
        let r = &j["read"];
        assert_eq!(r["clat_ns"]["N"], 1000);
        assert_eq!(r["clat_ns"]["min"], 1000);
        assert_eq!(r["clat_ns"]["percentile"]["50.000000"], 1000);
        assert_eq!(r["clat_ns"]["percentile"]["99.000000"], 2_000_000);
        assert!(r["lat_ns"].get("percentile").is_none());
        assert!(r["slat_ns"].get("percentile").is_none());
        assert_eq!(r["slat_ns"]["mean"], 500.0);
        // fio's buckets, one per value recorded.
        let bins = r["clat_ns"]["bins"].as_object().unwrap();
        assert_eq!(bins.len(), 2, "{bins:?}");
        assert_eq!(bins[&fio_plat_val(fio_plat_idx(1000)).to_string()], 900);
        assert_eq!(
            bins[&fio_plat_val(fio_plat_idx(2_000_000)).to_string()],
            100
        );
        assert_eq!(j["latency_us"]["2"], 90.0);
        assert_eq!(j["latency_ms"]["4"], 10.0);
        // 999 of 1000 at depth 4, one at 1: fio writes 0.1 for a bucket under it.
        assert_eq!(j["iodepth_level"]["4"], 99.9);
        assert_eq!(j["iodepth_level"]["1"], 0.1);
        assert_eq!(j["iodepth_submit"]["4"], 100.0);
        assert_eq!(j["iodepth_complete"]["0"], 0.0);
        let o = &j["job options"];
        assert_eq!(o["slat_percentiles"], "0");
        assert_eq!(o["clat_percentiles"], "1");
        assert_eq!(o["lat_percentiles"], "0");
        // The other target was not split: lat carries its percentiles, and its options say so.
        let j1 = &v["jobs"][1];
        assert!(j1["read"]["lat_ns"]["percentile"].is_object());
        assert!(j1["read"]["clat_ns"].get("percentile").is_none());
        assert_eq!(j1["job options"]["lat_percentiles"], "1");
        // Asked: slat and lat too.
        let all = FioSource {
            percentiles: FioPercentiles::parse("slat,clat,lat").unwrap(),
            ..src
        };
        let v = export(&all, FioFlavor::Json).to_value();
        let r = &v["jobs"][0]["read"];
        for k in ["slat_ns", "clat_ns", "lat_ns"] {
            assert!(r[k]["percentile"]["99.000000"].is_u64(), "{k}");
            assert!(r[k].get("bins").is_none(), "{k}: plain json has no bins");
        }
        assert!(FioPercentiles::parse("clat,p99").is_err());
    }

    #[test]
    fn measured_slat_and_clat_fill_fio_parts() {
        let (mut report, recs) = build();
        let mut parts = DeviceRecorder::new();
        parts.record(Op::Read, 700, 4096);
        parts.record(Op::Read, 900, 4096);
        let slat = parts.dir(Op::Read).summary(&[]);
        report.devices[0].read.slat_ns = Some(slat);
        let src = FioSource {
            recorders: Some(&recs),
            ..FioSource::new(&report)
        };
        let v = export(&src, FioFlavor::Json).to_value();
        let r = &v["jobs"][0]["read"];
        assert_eq!(r["slat_ns"]["N"], 1000, "every I/O has a submission part");
        assert_eq!(r["slat_ns"]["min"], 700);
        assert!(r["slat_ns"].get("percentile").is_none());
        assert_eq!(r["clat_ns"]["N"], 0, "not measured, as fio writes it");
        assert_eq!(v["jobs"][1]["read"]["slat_ns"]["N"], 0);
    }

    #[test]
    fn layout_matches_fio() {
        let (report, recs) = build();
        let src = FioSource {
            recorders: Some(&recs),
            ..FioSource::new(&report)
        };
        let doc = export(&src, FioFlavor::JsonPlus);
        assert_eq!(
            doc.keys(),
            [
                "fio version",
                "timestamp",
                "timestamp_ms",
                "time",
                "jobs",
                "disk_util"
            ]
        );
        let v = doc.to_value();
        let jobs = v["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 2);
        let r = &jobs[0]["read"];
        assert_eq!(r["total_ios"], 1000);
        assert_eq!(r["io_bytes"], 4_096_000);
        assert_eq!(r["iops"], 500.0);
        assert_eq!(r["bw_bytes"], 2_048_000);
        assert_eq!(r["bw"], 2000);
        assert_eq!(r["runtime"], 2000);
        assert_eq!(jobs[0]["write"]["runtime"], 0, "fio: no I/O, no runtime");
        // Total latency is fio's `lat`; slat and clat are not collected (N = 0).
        assert_eq!(r["clat_ns"]["N"], 0);
        assert!(r["clat_ns"].get("percentile").is_none());
        let pct = r["lat_ns"]["percentile"].as_object().unwrap();
        assert_eq!(pct["99.999900"], 3_000_000);
        assert_eq!(pct["50.000000"], 1500);
        assert_eq!(
            pct["95.000000"], 3_000_000,
            "fio's default list is added from the histogram"
        );
        assert_eq!(r["lat_ns"]["N"], 1000);
        // Percentile keys in numeric order, as fio writes them.
        let Some(Json::Arr(js)) = doc.get("jobs") else {
            panic!()
        };
        let keys = js[0].get("read").unwrap().get("lat_ns").unwrap();
        let pkeys: Vec<f64> = keys
            .get("percentile")
            .unwrap()
            .keys()
            .iter()
            .map(|k| k.parse().unwrap())
            .collect();
        assert!(pkeys.windows(2).all(|w| w[0] < w[1]), "{pkeys:?}");
        // json+ bins: counts add up to N, values ascend, none above the max.
        let bins = keys.get("bins").unwrap();
        let values: Vec<u64> = bins.keys().iter().map(|k| k.parse().unwrap()).collect();
        assert!(values.windows(2).all(|w| w[0] < w[1]));
        assert!(*values.last().unwrap() <= 3_000_000);
        let total: u64 = bins
            .to_value()
            .as_object()
            .unwrap()
            .values()
            .map(|c| c.as_u64().unwrap())
            .sum();
        assert_eq!(total, 1000);
        assert_eq!(
            jobs[0]["job options"]["percentile_list"],
            "1:5:10:20:30:40:50:60:70:80:90:95:99:99.5:99.9:99.95:99.99:99.999:99.9999"
        );
        assert_eq!(jobs[0]["job options"]["numjobs"], "1");
        assert_eq!(jobs[0]["job options"]["runtime"], "10");
        // Worker CPU is shared by I/O count: each device did half.
        assert_eq!(jobs[0]["usr_cpu"], 12.5);
        assert_eq!(jobs[0]["sys_cpu"], 25.0);
        assert_eq!(jobs[0]["ctx"], 5);
        assert_eq!(jobs[0]["latency_us"]["2"], 90.0);
        assert_eq!(jobs[0]["latency_ms"]["4"], 10.0);
        assert_eq!(jobs[0]["latency_depth"], 1);
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
        assert_eq!(v["time"], "Tue Nov 14 22:13:20 2023");
        // No interval log: no samples, as fio writes for a run shorter than one period.
        assert_eq!(r["iops_samples"], 0);
        // Plain JSON has no bins.
        let plain = export(&src, FioFlavor::Json).to_value();
        assert!(plain["jobs"][0]["read"]["lat_ns"].get("bins").is_none());
        // Without recorders: only the requested percentiles, and no invented buckets.
        let alone = export(&FioSource::new(&report), FioFlavor::JsonPlus).to_value();
        assert!(alone["jobs"][0].get("latency_us").is_none());
        assert!(alone["jobs"][0]["read"]["lat_ns"].get("bins").is_none());
        assert_eq!(
            alone["jobs"][0]["read"]["lat_ns"]["percentile"]
                .as_object()
                .unwrap()
                .len(),
            7
        );
    }

    #[test]
    fn interval_samples_give_iops_and_bandwidth_statistics() {
        use crate::intervals::IntervalPoint;
        let (report, recs) = build();
        let point = |start_s: f64, duration_s: f64, ios: u64| IntervalPoint {
            start_s,
            duration_s,
            ios,
            p50_ns: 1,
            p99_ns: 1,
            max_ns: 1,
        };
        // 400 and 600 I/Os in two 1 s intervals, then a 1 ms sliver that is left out.
        let series = vec![IntervalSeries {
            device: "d0".into(),
            op: Op::Read,
            points: vec![
                point(0.0, 1.0, 400),
                point(1.0, 1.0, 600),
                point(2.0, 0.001, 1),
            ],
        }];
        let src = FioSource {
            recorders: Some(&recs),
            intervals: &series,
            ..FioSource::new(&report)
        };
        let v = export(&src, FioFlavor::Json).to_value();
        let r = &v["jobs"][0]["read"];
        assert_eq!(r["iops_samples"], 2);
        assert_eq!(r["iops_min"], 400);
        assert_eq!(r["iops_max"], 600);
        assert_eq!(r["iops_mean"], 500.0);
        // Sample standard deviation of 400 and 600.
        assert!((r["iops_stddev"].as_f64().unwrap() - 141.421356).abs() < 1e-3);
        assert_eq!(r["bw_min"], 1600, "400 I/Os of 4 KiB a second");
        assert_eq!(r["bw_mean"], 2000.0);
        // Half the group's 4000 KiB/s.
        assert_eq!(r["bw_agg"], 50.0);
        assert_eq!(v["jobs"][1]["read"]["iops_samples"], 0);
    }
}
