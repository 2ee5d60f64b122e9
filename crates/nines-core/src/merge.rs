//! Merging runs exactly (`nines merge`): reports from many hosts (real or simulated) become one
//! report whose distributions are the sums of the sources' HDR histograms, never averages of
//! their percentiles (the mean of per-host p99s is not the fleet's p99).
//!
//! Every source device keeps its identity (`label:device`, `sources[]` with host, time and its
//! own aggregate), so a report shows per-host and fleet-wide distributions. Sources ran at the
//! same time on different hosts: the merged IOPS and bandwidth are the sums of theirs, and the
//! merged measured time is the longest. Jobs of the same name are merged into one job.

use std::collections::BTreeMap;

use crate::op::Op;
use crate::report::{
    DeviceReport, DirectionStats, JobDeviceStats, JobReport, Report, ReportBuilder, RunConfig,
    SourceRun, WorkerReport,
};
use crate::stats::{DeviceRecorder, DirRecorder, SavedRecorderError};

/// One run to merge.
pub struct MergeInput {
    /// Where it came from (shown in errors and `sources[].file`).
    pub file: String,
    pub report: Report,
}

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("nothing to merge: give at least one run")]
    NoRuns,
    #[error(
        "{file}: {what} has no histogram (written by nines before histograms were kept in \
         reports, or by another tool); rerun it with this nines"
    )]
    NoHistogram { file: String, what: String },
    #[error("{file}: {what}: {error}")]
    Histogram {
        file: String,
        what: String,
        error: SavedRecorderError,
    },
    #[error("{file}: {what} cannot be merged: {detail}")]
    Mismatch {
        file: String,
        what: String,
        detail: String,
    },
}

/// The most I/Os one merged histogram may count: HdrHistogram's serialized counts are signed
/// 64-bit, and the report's counters must not wrap.
pub const MERGED_IOS_MAX: u64 = i64::MAX as u64;

/// Running totals of one direction over everything merged, checked so that no counter of the
/// merged report (I/Os, bytes, latency sums) can wrap.
#[derive(Default, Clone, Copy)]
struct Totals {
    ios: u64,
    bytes: u64,
    sum: u128,
    squares: u128,
}

impl Totals {
    fn add(&mut self, r: &DirRecorder) -> Result<(), String> {
        let ios = self
            .ios
            .checked_add(r.ios)
            .filter(|&n| n <= MERGED_IOS_MAX)
            .ok_or("its I/O count added to the others' is more than a merged histogram can count (2^63 - 1)")?;
        let bytes = self
            .bytes
            .checked_add(r.bytes)
            .ok_or("its byte count added to the others' overflows 64 bits")?;
        let sum = self
            .sum
            .checked_add(r.latency_ns_sum)
            .ok_or("its latency sum added to the others' overflows 128 bits")?;
        let squares = self
            .squares
            .checked_add(r.latency_ns_sum_squares)
            .ok_or("its latency sum of squares added to the others' overflows 128 bits")?;
        *self = Totals {
            ios,
            bytes,
            sum,
            squares,
        };
        Ok(())
    }
}

fn restore(
    file: &str,
    what: impl Fn() -> String,
    d: &DirectionStats,
) -> Result<DirRecorder, MergeError> {
    if d.ios == 0 {
        return Ok(DirRecorder::new());
    }
    let saved = d.recorder.as_ref().ok_or_else(|| MergeError::NoHistogram {
        file: file.to_string(),
        what: what(),
    })?;
    saved.restore().map_err(|error| MergeError::Histogram {
        file: file.to_string(),
        what: what(),
        error,
    })
}

/// The host a report was taken on, when it says (profile runs record it).
pub fn host_of(r: &Report) -> Option<String> {
    r.config
        .extra
        .get("hostname")
        .and_then(|v| v.as_str())
        .map(str::to_string)
}

/// Unique labels: the host, else the file's stem; repeated ones get `#2`, `#3`, ...
fn labels(inputs: &[MergeInput]) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    inputs
        .iter()
        .map(|i| {
            let base = host_of(&i.report).unwrap_or_else(|| {
                std::path::Path::new(&i.file)
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_else(|| i.file.clone())
            });
            let n = seen.entry(base.clone()).or_insert(0);
            *n += 1;
            if *n == 1 { base } else { format!("{base}#{n}") }
        })
        .collect()
}

/// Merges the runs; see the module documentation.
pub fn merge(inputs: Vec<MergeInput>) -> Result<Report, MergeError> {
    let first = inputs.first().ok_or(MergeError::NoRuns)?;
    let labels = labels(&inputs);
    assert_eq!(labels.len(), inputs.len(), "a label per run");
    let mut percentiles: Vec<f64> = inputs
        .iter()
        .flat_map(|i| i.report.config.percentiles.iter().copied())
        .collect();
    percentiles.sort_by(f64::total_cmp);
    percentiles.dedup();
    let config = merged_config(&inputs, &labels, &percentiles);
    let mut b = ReportBuilder::new(first.report.kind, config);
    let mut m = Merging::default();
    for (input, label) in inputs.iter().zip(&labels) {
        let r = &input.report;
        let base = m.carried.len() as u32;
        let indices = m.devices(&mut b, input, label)?;
        assert_eq!(
            indices.len(),
            r.devices.len(),
            "every device of a run is merged"
        );
        for w in &r.workers {
            m.workers.push(WorkerReport {
                index: m.workers.len() as u32,
                devices: w.devices.iter().map(|&i| base + i).collect(),
                ..w.clone()
            });
        }
        for j in &r.jobs {
            m.job(input, label, j, base)?;
        }
        for (k, x) in [
            r.aggregate.read.iops,
            r.aggregate.read.bw_bytes,
            r.aggregate.write.iops,
            r.aggregate.write.bw_bytes,
        ]
        .into_iter()
        .enumerate()
        {
            m.agg_rates[k] += x;
        }
        // The sources' own warnings, by source (the builder's per-device ones would repeat them).
        m.warnings
            .extend(r.warnings.iter().map(|w| format!("{label}: {w}")));
        m.sources.push(SourceRun {
            label: label.clone(),
            file: input.file.clone(),
            host: host_of(r),
            kind: r.kind,
            nines_version: r.nines_version.clone(),
            start_unix_ns: r.config.start_unix_ns,
            measured_ns: r.config.measured_ns,
            devices: indices,
            read: r.aggregate.read.clone(),
            write: r.aggregate.write.clone(),
        });
    }
    Ok(m.finish(b, &percentiles))
}

/// The merged run's configuration: the first run's, with every run's percentiles, the longest
/// measured time, the earliest start, and every run's device models.
fn merged_config(inputs: &[MergeInput], labels: &[String], percentiles: &[f64]) -> RunConfig {
    let mut config = inputs[0].report.config.clone();
    config.percentiles = percentiles.to_vec();
    config.measured_ns = inputs
        .iter()
        .map(|i| i.report.config.measured_ns)
        .max()
        .unwrap_or(0);
    config.start_unix_ns = inputs
        .iter()
        .filter_map(|i| i.report.config.start_unix_ns)
        .min();
    config.lat_log = None;
    config.hdr_log = None;
    config
        .extra
        .insert("merged_runs".into(), serde_json::json!(inputs.len()));
    config.extra.remove("hostname");
    let models = device_models(inputs, labels);
    if models.is_empty() {
        config.extra.remove("device_models");
    } else {
        config
            .extra
            .insert("device_models".into(), serde_json::Value::Object(models));
    }
    config
}

/// Every run's device models under the merged device names, not the first run's alone (the
/// header listed only one host's devices).
fn device_models(
    inputs: &[MergeInput],
    labels: &[String],
) -> serde_json::Map<String, serde_json::Value> {
    let mut models = serde_json::Map::new();
    for (input, label) in inputs.iter().zip(labels) {
        let extra = &input.report.config.extra;
        match extra.get("device_models").and_then(|m| m.as_object()) {
            Some(m) => {
                for (dev, model) in m {
                    models.insert(format!("{label}:{dev}"), model.clone());
                }
            }
            None => {
                let sim = extra
                    .get("device_name")
                    .or(extra.get("device"))
                    .and_then(|v| v.as_str());
                if let Some(name) = sim {
                    for d in &input.report.devices {
                        models.insert(
                            format!("{label}:{}", d.name),
                            serde_json::json!(format!("simulated {name}")),
                        );
                    }
                }
            }
        }
    }
    models
}

/// A job being merged: its report, its directions' recorders and its summed rates (read IOPS,
/// read bytes/s, write IOPS, write bytes/s).
type MergedJob = (JobReport, [DirRecorder; 2], [f64; 4]);

/// What the merge has gathered from the runs so far.
#[derive(Default)]
struct Merging {
    /// Per merged device: its source's figures to carry over (rates, slat/clat).
    carried: Vec<(DirectionStats, DirectionStats)>,
    sources: Vec<SourceRun>,
    workers: Vec<WorkerReport>,
    jobs: Vec<MergedJob>,
    agg_rates: [f64; 4],
    warnings: Vec<String>,
    /// Per direction: the devices' totals (the aggregate's) and the jobs' (by name).
    device_totals: [Totals; 2],
    job_totals: BTreeMap<String, [Totals; 2]>,
}

fn too_large(file: &str, what: String, detail: String) -> MergeError {
    MergeError::Mismatch {
        file: file.to_string(),
        what,
        detail,
    }
}

impl Merging {
    /// Adds a run's devices to the builder under `label:`; returns their merged indices.
    fn devices(
        &mut self,
        b: &mut ReportBuilder,
        input: &MergeInput,
        label: &str,
    ) -> Result<Vec<u32>, MergeError> {
        let r = &input.report;
        let file = input.file.as_str();
        let base = self.carried.len() as u32;
        let mut indices = Vec::with_capacity(r.devices.len());
        for d in &r.devices {
            let mut rec = DeviceRecorder::new();
            for op in Op::ALL {
                rec.dirs[op.index()] = restore(
                    file,
                    || format!("device {} {}", d.name, op.name()),
                    d.dir(op),
                )?;
                self.device_totals[op.index()]
                    .add(&rec.dirs[op.index()])
                    .map_err(|e| too_large(file, format!("device {} {}", d.name, op.name()), e))?;
            }
            b.device(
                crate::report::DeviceMeta {
                    name: format!("{label}:{}", d.name),
                    path: d.path.clone(),
                    size_bytes: d.size_bytes,
                    cpu: d.cpu,
                },
                &rec,
            );
            b.device_extra(d.interrupts.clone(), d.internals.clone());
            b.device_nvme(d.nvme.clone());
            if let Some(v) = &d.volume {
                b.device_volume(v.clone());
            }
            indices.push(base + indices.len() as u32);
            self.carried.push((d.read.clone(), d.write.clone()));
        }
        Ok(indices)
    }

    /// Adds a run's job: into the job of the same name and pattern, else as a job of its own
    /// (named by source when the name is taken).
    fn job(
        &mut self,
        input: &MergeInput,
        label: &str,
        j: &JobReport,
        base: u32,
    ) -> Result<(), MergeError> {
        let file = input.file.as_str();
        let mut recs = [DirRecorder::new(), DirRecorder::new()];
        for op in Op::ALL {
            recs[op.index()] =
                restore(file, || format!("job {} {}", j.name, op.name()), j.dir(op))?;
            self.job_totals.entry(j.name.clone()).or_default()[op.index()]
                .add(&recs[op.index()])
                .map_err(|e| too_large(file, format!("job {} {}", j.name, op.name()), e))?;
        }
        let rates = [j.read.iops, j.read.bw_bytes, j.write.iops, j.write.bw_bytes];
        let per_target = j.devices.iter().map(|s| JobDeviceStats {
            index: base + s.index,
            ..s.clone()
        });
        // Same name and same pattern: one job over every host. Same name, different
        // pattern (e.g. the default job of unrelated runs): kept apart, named by source.
        let same = |jr: &JobReport| {
            jr.name == j.name
                && jr.workload.rw == j.workload.rw
                && jr.workload.block_size_bytes == j.workload.block_size_bytes
        };
        if let Some((jr, acc, sum)) = self.jobs.iter_mut().find(|(jr, _, _)| same(jr)) {
            for op in Op::ALL {
                acc[op.index()].merge_from(&recs[op.index()]);
            }
            for k in 0..4 {
                sum[k] += rates[k];
            }
            jr.devices.extend(per_target);
        } else {
            let mut jr = j.clone();
            if self.jobs.iter().any(|(other, _, _)| other.name == j.name) {
                jr.name = format!("{label}:{}", j.name);
            }
            jr.devices = per_target.collect();
            self.jobs.push((jr, recs, rates));
        }
        Ok(())
    }

    /// The merged report: the builder's, with each source's own rates carried over (the builder
    /// computed them over the merged, longest, time), the jobs, sources and warnings.
    fn finish(self, mut b: ReportBuilder, percentiles: &[f64]) -> Report {
        for w in self.workers {
            b.worker(w);
        }
        let mut out = b.finish();
        assert_eq!(
            out.devices.len(),
            self.carried.len(),
            "a carried pair per device"
        );
        // The builder computed rates over the merged (longest) time; each source's own are right.
        for (d, (read, write)) in out.devices.iter_mut().zip(self.carried) {
            carry_rates(d, &read, &write);
        }
        set_rates(
            &mut out.aggregate.read,
            self.agg_rates[0],
            self.agg_rates[1],
        );
        set_rates(
            &mut out.aggregate.write,
            self.agg_rates[2],
            self.agg_rates[3],
        );
        let t = out.config.measured_ns;
        out.jobs = self
            .jobs
            .into_iter()
            .map(|(mut jr, recs, rates)| {
                jr.read = DirectionStats::from_recorder(&recs[0], percentiles, t);
                jr.write = DirectionStats::from_recorder(&recs[1], percentiles, t);
                set_rates(&mut jr.read, rates[0], rates[1]);
                set_rates(&mut jr.write, rates[2], rates[3]);
                jr
            })
            .collect();
        out.sources = self.sources;
        out.warnings = self.warnings;
        out
    }
}

fn set_rates(d: &mut DirectionStats, iops: f64, bw_bytes: f64) {
    d.iops = iops;
    d.bw_bytes = bw_bytes;
}

fn carry_rates(d: &mut DeviceReport, read: &DirectionStats, write: &DirectionStats) {
    for (mine, theirs) in [(&mut d.read, read), (&mut d.write, write)] {
        set_rates(mine, theirs.iops, theirs.bw_bytes);
        mine.slat_ns = theirs.slat_ns.clone();
        mine.clat_ns = theirs.clat_ns.clone();
    }
}

/// fio's json+ histogram as nines reads it: the bins of one direction's latency.
fn fio_recorder(dir: &serde_json::Value) -> Option<(DirRecorder, &'static str)> {
    // With lat_percentiles=1 fio puts the bins under lat_ns (total latency, nines' meaning);
    // by default under clat_ns (completion latency only).
    let (key, lat) = ["lat_ns", "clat_ns"].into_iter().find_map(|k| {
        dir.get(k)
            .filter(|l| l.get("bins").is_some())
            .map(|l| (k, l))
    })?;
    let bins = lat.get("bins")?.as_object()?;
    let mut r = DirRecorder::new();
    let mut n = 0u64;
    for (value, count) in bins {
        let (Ok(v), Some(c)) = (value.parse::<u64>(), count.as_u64()) else {
            continue;
        };
        if c == 0 {
            continue;
        }
        // More than a histogram can count: refused by the caller (an empty recorder with the
        // count that does not fit).
        match n.checked_add(c).filter(|&t| t <= MERGED_IOS_MAX) {
            Some(t) => n = t,
            None => {
                let mut over = DirRecorder::new();
                over.ios = u64::MAX;
                return Some((over, key));
            }
        }
        r.hist.saturating_record_n(v.max(1), c);
    }
    if n == 0 {
        return None;
    }
    let get = |k: &str| {
        lat.get(k)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0)
    };
    let (mean, sd) = (get("mean"), get("stddev"));
    r.ios = n;
    r.bytes = dir
        .get("io_bytes")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    r.latency_ns_min = get("min") as u64;
    r.latency_ns_max = get("max") as u64;
    // fio keeps mean and deviation, not sums: these are exact to its float precision.
    r.latency_ns_sum = (mean * n as f64).round() as u128;
    r.latency_ns_sum_squares = ((sd * sd + mean * mean) * n as f64).round() as u128;
    Some((r, key))
}

/// The relative width of fio's histogram bins, found from the bins themselves: fio's log-linear
/// histogram has 2^bits bins per power of two (bits = 6 by default: 1/64, about 1.6%).
fn fio_bin_bits(dirs: &[&serde_json::Value]) -> Option<u32> {
    let mut values: Vec<u64> = dirs
        .iter()
        .filter_map(|d| {
            ["lat_ns", "clat_ns"]
                .into_iter()
                .find_map(|k| d.get(k)?.get("bins")?.as_object())
        })
        .flat_map(|b| b.keys().filter_map(|k| k.parse::<u64>().ok()))
        .filter(|&v| v >= 4096)
        .collect();
    values.sort_unstable();
    values.dedup();
    let gap = values
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64 / w[0] as f64)
        .fold(f64::INFINITY, f64::min);
    // The narrowest gap is at the top of a power of two, where a bin is half as wide relative
    // to its value as at the bottom: 2^(bits+1).
    gap.is_finite()
        .then(|| ((1.0 / gap).log2().round() as u32).saturating_sub(1))
}

/// A fio `--output-format=json+` result as a nines report, one device per fio job, so existing
/// fio results join a merge. Refused without bins (plain `json` has percentiles only, which
/// cannot be merged exactly).
pub fn from_fio_json(file: &str, v: &serde_json::Value) -> Result<Report, MergeError> {
    use crate::report::{DeviceMeta, RunConfig, RunKind};
    let mismatch = |detail: &str| MergeError::Mismatch {
        file: file.to_string(),
        what: "fio output".into(),
        detail: detail.to_string(),
    };
    let jobs = v
        .get("jobs")
        .and_then(serde_json::Value::as_array)
        .ok_or_else(|| mismatch("no \"jobs\" array"))?;
    let mut measured_ns = 0u64;
    let mut engine = String::from("fio");
    for j in jobs {
        if let Some(ms) = j.get("job_runtime").and_then(serde_json::Value::as_u64) {
            measured_ns = measured_ns.max(ms.saturating_mul(1_000_000));
        }
        if let Some(e) = j
            .pointer("/job options/ioengine")
            .and_then(serde_json::Value::as_str)
        {
            engine = format!("fio:{e}");
        }
    }
    let config = RunConfig {
        workload: crate::workload::WorkloadSpec::default(),
        engine,
        percentiles: vec![50.0, 90.0, 99.0, 99.9, 99.99, 99.999, 99.9999],
        measured_ns,
        start_unix_ns: v
            .get("timestamp_ms")
            .and_then(serde_json::Value::as_u64)
            .map(|ms| ms.saturating_mul(1_000_000)),
        lat_log: None,
        hdr_log: None,
        extra: Default::default(),
    };
    let mut b = ReportBuilder::new(RunKind::Profile, config);
    let mut dirs = Vec::new();
    let mut kinds = Vec::new();
    let mut rates = Vec::new();
    let mut totals = [Totals::default(); 2];
    for (i, j) in jobs.iter().enumerate() {
        let name = j
            .get("jobname")
            .and_then(serde_json::Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| format!("job{i}"));
        let mut rec = DeviceRecorder::new();
        let mut rate = [(0.0, 0.0); 2];
        for op in Op::ALL {
            let Some(d) = j.get(op.name()) else { continue };
            dirs.push(d);
            if d.get("total_ios")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0)
                == 0
            {
                continue;
            }
            let (r, kind) = fio_recorder(d).ok_or_else(|| {
                mismatch(&format!(
                    "job {name} {}: no histogram bins; run fio with --output-format=json+ (plain json has percentiles only, which cannot be merged exactly)",
                    op.name()
                ))
            })?;
            if r.ios == u64::MAX {
                return Err(mismatch(&format!(
                    "job {name} {}: its histogram bins count more I/Os than a histogram can hold (2^63 - 1)",
                    op.name()
                )));
            }
            totals[op.index()]
                .add(&r)
                .map_err(|e| mismatch(&format!("job {name} {}: {e}", op.name())))?;
            kinds.push(kind);
            rate[op.index()] = (
                d.get("iops")
                    .and_then(serde_json::Value::as_f64)
                    .unwrap_or(0.0),
                d.get("bw_bytes")
                    .and_then(serde_json::Value::as_f64)
                    .unwrap_or(0.0),
            );
            rec.dirs[op.index()] = r;
        }
        let filename = j
            .pointer("/job options/filename")
            .and_then(serde_json::Value::as_str)
            .map(str::to_string);
        b.device(
            DeviceMeta {
                name,
                path: filename,
                size_bytes: 0,
                cpu: None,
            },
            &rec,
        );
        rates.push(rate);
    }
    if jobs.is_empty() {
        return Err(mismatch("no jobs"));
    }
    if let Some(bits) = fio_bin_bits(&dirs) {
        b.warn(format!(
            "from fio json+: latency bins are up to 1/{} of their value wide ({bits} bits per power of two), so percentiles from them are within {:.1}% of fio's samples{}",
            1u64 << bits,
            100.0 / (1u64 << bits) as f64,
            if kinds.contains(&"clat_ns") {
                "; fio recorded completion latency only (clat: run fio with --lat_percentiles=1 for total latency, nines' meaning)"
            } else {
                ""
            }
        ));
    }
    let mut r = b.finish();
    let (mut sum_r, mut sum_w) = ((0.0, 0.0), (0.0, 0.0));
    for (d, rate) in r.devices.iter_mut().zip(rates) {
        set_rates(&mut d.read, rate[0].0, rate[0].1);
        set_rates(&mut d.write, rate[1].0, rate[1].1);
        sum_r = (sum_r.0 + rate[0].0, sum_r.1 + rate[0].1);
        sum_w = (sum_w.0 + rate[1].0, sum_w.1 + rate[1].1);
    }
    set_rates(&mut r.aggregate.read, sum_r.0, sum_r.1);
    set_rates(&mut r.aggregate.write, sum_w.0, sum_w.1);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{DeviceMeta, RunConfig, RunKind};
    use crate::stats::exact_percentile;
    use crate::workload::WorkloadSpec;
    use proptest::prelude::*;

    fn run(host: &str, samples: &[Vec<u64>]) -> Report {
        let mut config = RunConfig {
            workload: WorkloadSpec::default(),
            engine: "libaio".into(),
            percentiles: vec![50.0, 99.0, 99.9],
            measured_ns: 1_000_000_000,
            start_unix_ns: None,
            lat_log: None,
            hdr_log: None,
            extra: Default::default(),
        };
        config.extra.insert("hostname".into(), host.into());
        let mut b = ReportBuilder::new(RunKind::Profile, config);
        for (i, s) in samples.iter().enumerate() {
            let mut r = DeviceRecorder::new();
            for &v in s {
                r.record(Op::Read, v, 4096);
            }
            b.device(
                DeviceMeta {
                    name: format!("d{i}"),
                    path: None,
                    size_bytes: 1 << 30,
                    cpu: None,
                },
                &r,
            );
        }
        b.finish()
    }

    fn input(r: Report) -> MergeInput {
        MergeInput {
            file: "x.json".into(),
            report: r,
        }
    }

    /// The histogram nines would build from these samples, and its percentile.
    fn hdr_percentile(all: &[u64], p: f64) -> u64 {
        let mut r = DirRecorder::new();
        for &v in all {
            r.record(v, 4096);
        }
        r.summary(&[p]).percentiles.at(p).unwrap()
    }

    /// A run of one device with `ios` reads of 1 µs each (counted, not recorded one by one).
    fn huge_run(host: &str, ios: u64) -> Report {
        let mut config = run(host, &[]).config;
        config.extra.insert("hostname".into(), host.into());
        let mut b = ReportBuilder::new(RunKind::Profile, config);
        let mut r = DeviceRecorder::new();
        let d = &mut r.dirs[Op::Read.index()];
        d.hist.record_n(1000, ios).unwrap();
        d.ios = ios;
        d.bytes = ios;
        d.latency_ns_min = 1000;
        d.latency_ns_max = 1000;
        d.latency_ns_sum = 1000 * u128::from(ios);
        d.latency_ns_sum_squares = 1_000_000 * u128::from(ios);
        b.device(
            DeviceMeta {
                name: "d0".into(),
                path: None,
                size_bytes: 1 << 30,
                cpu: None,
            },
            &r,
        );
        b.finish()
    }

    #[test]
    fn merges_whose_counts_would_wrap_are_refused() {
        // Two of 2^62 fit (2^63 - 1 is the most), four do not: refused, not wrapped to 0.
        let two = merge(vec![
            input(huge_run("a", 1 << 62)),
            input(huge_run("b", (1 << 62) - 1)),
        ])
        .unwrap();
        assert_eq!(two.aggregate.read.ios, (1 << 63) - 1);
        let four = (0..4)
            .map(|i| input(huge_run(&format!("h{i}"), 1 << 62)))
            .collect();
        let e = merge(four).unwrap_err().to_string();
        assert!(e.contains("more than a merged histogram can count"), "{e}");
        // fio json+ bins near 2^64: refused, no panic.
        let fio = serde_json::json!({
            "fio version": "fio-3.36",
            "jobs": [{"jobname": "j", "read": {"total_ios": 5, "iops": 1.0, "bw_bytes": 1.0,
                "clat_ns": {"bins": {"1000": 18446744073709551000u64, "2000": 1000}}}}]
        });
        let e = from_fio_json("f.json", &fio).unwrap_err().to_string();
        assert!(e.contains("more I/Os than a histogram can hold"), "{e}");
        let fio2 = |n: u64| {
            serde_json::json!({"fio version": "fio-3.36", "jobs": [
                {"jobname": "a", "read": {"total_ios": n, "clat_ns": {"bins": {"1000": n}}}},
                {"jobname": "b", "read": {"total_ios": n, "clat_ns": {"bins": {"1000": n}}}}]})
        };
        assert!(from_fio_json("f.json", &fio2(1 << 61)).is_ok());
        let e = from_fio_json("f.json", &fio2(1 << 62))
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than a merged histogram"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Merged percentiles are the percentiles of the concatenated samples (the histogram
        /// of all samples at once), and min/max/mean are exact.
        #[test]
        fn merged_equals_concatenated(
            a in proptest::collection::vec(1u64..50_000_000, 1..400),
            b in proptest::collection::vec(1u64..50_000_000, 1..400),
            c in proptest::collection::vec(1u64..50_000_000, 0..50),
        ) {
            let m = merge(vec![input(run("h1", &[a.clone(), c.clone()])), input(run("h2", std::slice::from_ref(&b)))]).unwrap();
            let mut all: Vec<u64> = a.iter().chain(&b).chain(&c).copied().collect();
            all.sort_unstable();
            let agg = &m.aggregate.read;
            prop_assert_eq!(agg.ios, all.len() as u64);
            prop_assert_eq!(agg.lat_ns.min_ns, all[0]);
            prop_assert_eq!(agg.lat_ns.max_ns, *all.last().unwrap());
            let mean = all.iter().map(|&v| v as f64).sum::<f64>() / all.len() as f64;
            prop_assert!((agg.lat_ns.mean_ns - mean).abs() <= mean * 1e-12);
            for p in [50.0, 99.0, 99.9] {
                let merged = agg.lat_ns.percentiles.at(p).unwrap();
                prop_assert_eq!(merged, hdr_percentile(&all, p));
                // And within the histogram's 0.1% of the exact sample percentile.
                let exact = exact_percentile(&all, p);
                prop_assert!(merged.abs_diff(exact) as f64 <= exact as f64 * 0.001 + 1.0);
            }
            prop_assert_eq!(m.devices.len(), 3);
            prop_assert_eq!(&m.devices[2].name, "h2:d0");
            prop_assert_eq!(&m.sources[1].devices, &vec![2]);
        }
    }

    /// The mean of per-host p99s is not the fleet's p99: one slow host among fast ones.
    #[test]
    fn mean_of_host_p99s_is_not_the_fleet_p99() {
        let fast: Vec<u64> = (0..1000).map(|i| 10_000 + i).collect();
        let slow: Vec<u64> = (0..1000).map(|i| 1_000_000 + i * 100).collect();
        let hosts = [
            run("a", std::slice::from_ref(&fast)),
            run("b", std::slice::from_ref(&fast)),
            run("c", std::slice::from_ref(&slow)),
        ];
        let p99 = |r: &Report| r.aggregate.read.lat_ns.percentiles.at(99.0).unwrap();
        let mean_p99 = hosts.iter().map(p99).sum::<u64>() as f64 / 3.0;
        let m = merge(hosts.into_iter().map(input).collect()).unwrap();
        let merged = p99(&m);
        let mut all: Vec<u64> = fast.iter().chain(&fast).chain(&slow).copied().collect();
        all.sort_unstable();
        assert_eq!(merged, hdr_percentile(&all, 99.0));
        assert!(
            (merged as f64) > 2.5 * mean_p99,
            "merged p99 {merged} vs mean of host p99s {mean_p99}"
        );
        assert_eq!(
            m.sources
                .iter()
                .map(|s| s.label.as_str())
                .collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert_eq!(
            m.aggregate.read.iops,
            3.0 * 1000.0,
            "rates add up over hosts"
        );
    }

    #[test]
    fn every_runs_device_models_are_kept() {
        // The header listed only the first run's (zram) devices.
        let mut a = run("a", &[vec![5, 6, 7]]);
        a.config
            .extra
            .insert("device_models".into(), serde_json::json!({"d0": "zram"}));
        let mut b = run("b", &[vec![5, 6, 7], vec![8]]);
        b.config.extra.remove("hostname");
        b.config
            .extra
            .insert("device_name".into(), serde_json::json!("afa-m2-2018"));
        b.config.measured_ns = 3_000_000_000;
        let m = merge(vec![input(a), input(b)]).unwrap();
        assert_eq!(
            m.config.extra["device_models"],
            serde_json::json!({"a:d0": "zram", "x:d0": "simulated afa-m2-2018",
                "x:d1": "simulated afa-m2-2018"})
        );
        // Each run's own measured time stays in its source.
        assert_eq!(
            m.sources.iter().map(|s| s.measured_ns).collect::<Vec<_>>(),
            [1_000_000_000, 3_000_000_000]
        );
    }

    #[test]
    fn refuses_reports_without_histograms_and_corrupt_ones() {
        let mut r = run("a", &[vec![5, 6, 7]]);
        r.devices[0].read.recorder = None;
        let e = merge(vec![input(r)]).unwrap_err().to_string();
        assert!(e.contains("device d0 read has no histogram"), "{e}");
        let mut r = run("a", &[vec![5, 6, 7]]);
        r.devices[0].read.recorder.as_mut().unwrap().ios = 4;
        let e = merge(vec![input(r)]).unwrap_err().to_string();
        assert!(e.contains("3 samples but the counters say 4"), "{e}");
        let mut r = run("a", &[vec![5, 6, 7]]);
        r.devices[0].read.recorder.as_mut().unwrap().hist = "not base64!".into();
        assert!(merge(vec![input(r)]).is_err());
        assert!(matches!(merge(Vec::new()), Err(MergeError::NoRuns)));
    }

    #[test]
    fn other_histogram_bounds_are_refused() {
        use base64::Engine as _;
        use hdrhistogram::serialization::{Serializer as _, V2DeflateSerializer};
        let mut r = run("a", &[vec![5]]);
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 1_000_000, 2).unwrap();
        h.record(5).unwrap();
        let mut bytes = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&h, &mut bytes)
            .unwrap();
        r.devices[0].read.recorder.as_mut().unwrap().hist =
            base64::engine::general_purpose::STANDARD.encode(bytes);
        let e = merge(vec![input(r)]).unwrap_err().to_string();
        assert!(e.contains("cannot be merged exactly"), "{e}");
    }
}
