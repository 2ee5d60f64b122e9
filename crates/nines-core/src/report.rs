//! The report: one versioned JSON schema for every run, real or simulated, documented in
//! docs/report-schema.md. Everything that reads runs (`report`, `compare`, `sweep`, fio-style
//! export) reads this, so a simulated run and a measured one are interchangeable.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use crate::nvme::NvmeReport;
use crate::op::Op;
use crate::stats::{DeviceRecorder, DirRecorder, LatencySummary, SavedRecorder};
use crate::units::percentile_key;
use crate::workload::WorkloadSpec;

pub const SCHEMA_NAME: &str = "nines-report";
/// Bumped on any change that an older reader would misread; additions of optional fields keep it.
pub const SCHEMA_VERSION: u32 = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunKind {
    Profile,
    Sim,
}

/// A whole run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema: String,
    pub schema_version: u32,
    pub nines_version: String,
    pub kind: RunKind,
    pub config: RunConfig,
    pub devices: Vec<DeviceReport>,
    pub aggregate: Aggregate,
    /// Each job's statistics (a run has one job unless `--job` gave several).
    #[serde(default)]
    pub jobs: Vec<JobReport>,
    #[serde(default)]
    pub workers: Vec<WorkerReport>,
    /// Host conditions under which the run was taken (a summary of `nines doctor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<Value>,
    #[serde(default)]
    pub warnings: Vec<String>,
    /// A merged run (`nines merge`): the runs it was made of, each with its identity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceRun>,
}

/// One run a merged report was made of.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceRun {
    /// The label its devices are prefixed with (`label:device`): its host name, else its file's
    /// name.
    pub label: String,
    /// The report file it was read from.
    pub file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub kind: RunKind,
    pub nines_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_unix_ns: Option<u64>,
    pub measured_ns: u64,
    /// Indices of its devices in the merged report.
    pub devices: Vec<u32>,
    /// Its own aggregate figures (per-host distributions).
    pub read: DirectionStats,
    pub write: DirectionStats,
}

/// How the run was configured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    pub workload: WorkloadSpec,
    /// "psync", "libaio", "io_uring", "io_uring-poll" or "sim".
    pub engine: String,
    pub percentiles: Vec<f64>,
    /// Time the statistics cover (ramp excluded).
    pub measured_ns: u64,
    /// Wall-clock start of a real run; absent for simulated runs so they are byte-reproducible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_unix_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat_log: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hdr_log: Option<String>,
    /// Driver-specific settings: CPUs, sqpoll, plan (profile); preset, scale, layout (sim).
    #[serde(default)]
    pub extra: Map<String, Value>,
}

/// One device (or file) of the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    pub index: u32,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    pub size_bytes: u64,
    /// The CPU whose worker drove this device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<usize>,
    pub read: DirectionStats,
    pub write: DirectionStats,
    /// Which CPUs served this device's interrupts during the run (profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupts: Option<Value>,
    /// Simulated device internals: GC, write amplification, suspensions, busy fractions (sim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internals: Option<Value>,
    /// Set when this target is an array volume: its layout and every member's figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<VolumeReport>,
    /// I/Os in flight on average over the measured time (Little's law: each direction's IOPS
    /// times its mean latency, summed). A device that completes inside the submit call keeps
    /// about one in flight whatever `--iodepth` says. Absent in reports of older nines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth_mean: Option<f64>,
    /// An NVMe device's identify data and its SMART log before and after the run (profile);
    /// absent for anything that is not NVMe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvme: Option<NvmeReport>,
}

/// An array volume: the layout, its options, the policy's counters, and each member.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VolumeReport {
    pub layout: String,
    /// The layout's options (`stripe_bytes`, ...).
    pub options: Value,
    /// The policy's own counters (fan-out, rebuilt reads, buffer occupancy ...).
    #[serde(default)]
    pub stats: Value,
    pub members: Vec<MemberReport>,
}

/// One member of a volume: latencies of the member commands the volume sent it (from when the
/// command was sent to when it completed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemberReport {
    pub index: u32,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    pub size_bytes: u64,
    /// Member commands completed (all kinds, measured ones).
    pub commands: u64,
    /// Of those, failed.
    pub errors: u64,
    /// Absent when the volume has more members than distributions are kept for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<DirectionStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<DirectionStats>,
    /// Simulated device internals of this member (sim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internals: Option<Value>,
    /// Which CPUs served this member's interrupts during the run (profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupts: Option<Value>,
    /// An NVMe member's identify data and SMART log before and after the run (profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvme: Option<NvmeReport>,
}

/// One job: its workload and its figures, merged over targets and per target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobReport {
    pub name: String,
    pub workload: WorkloadSpec,
    pub read: DirectionStats,
    pub write: DirectionStats,
    /// Per target (device or volume index), in target order.
    pub devices: Vec<JobDeviceStats>,
}

impl JobReport {
    pub fn dir(&self, op: Op) -> &DirectionStats {
        match op {
            Op::Read => &self.read,
            Op::Write => &self.write,
        }
    }
}

/// One job's figures on one target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobDeviceStats {
    pub index: u32,
    pub read: DirectionStats,
    pub write: DirectionStats,
}

impl DeviceReport {
    /// I/Os in flight on average (see [`DeviceReport::depth_mean`]).
    pub fn depth_in_flight(&self) -> f64 {
        [&self.read, &self.write]
            .iter()
            .map(|s| s.iops * s.lat_ns.mean_ns / 1e9)
            .sum()
    }

    pub fn dir(&self, op: Op) -> &DirectionStats {
        match op {
            Op::Read => &self.read,
            Op::Write => &self.write,
        }
    }
}

/// One direction's figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DirectionStats {
    pub ios: u64,
    pub bytes: u64,
    pub iops: f64,
    /// Bytes per second.
    pub bw_bytes: f64,
    /// Total latency: from when the I/O was due (issued, or its paced/replayed time) to when its
    /// completion was seen.
    pub lat_ns: LatencySummary,
    /// Submission latency: the submit call (real devices, asynchronous engines; fio's slat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slat_ns: Option<LatencySummary>,
    /// Completion latency: from the submit call's return until the completion was seen (real
    /// devices; psync: the whole call; fio's clat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clat_ns: Option<LatencySummary>,
    /// The total latency's recorder (HDR histogram and exact counters), so reports from many
    /// hosts merge exactly (`nines merge`). Absent in reports of older nines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorder: Option<SavedRecorder>,
}

impl DirectionStats {
    pub fn from_recorder(rec: &DirRecorder, percentiles: &[f64], measured_ns: u64) -> Self {
        let secs = measured_ns as f64 / 1e9;
        let per_s = |x: u64| if secs > 0.0 { x as f64 / secs } else { 0.0 };
        DirectionStats {
            ios: rec.ios,
            bytes: rec.bytes,
            iops: per_s(rec.ios),
            bw_bytes: per_s(rec.bytes),
            lat_ns: rec.summary(percentiles),
            slat_ns: None,
            clat_ns: None,
            recorder: (rec.ios > 0).then(|| rec.save()),
        }
    }
}

/// Across all devices: the merged distribution, and the spread of each percentile over devices.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Aggregate {
    pub read: DirectionStats,
    pub write: DirectionStats,
    pub across_devices: AcrossDevices,
}

impl Aggregate {
    pub fn dir(&self, op: Op) -> &DirectionStats {
        match op {
            Op::Read => &self.read,
            Op::Write => &self.write,
        }
    }
}

/// For each percentile, its mean and standard deviation over the devices that did I/O in that
/// direction (the paper's Fig. 12 and 14).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AcrossDevices {
    pub read: Vec<PercentileSpread>,
    pub write: Vec<PercentileSpread>,
}

impl AcrossDevices {
    pub fn dir(&self, op: Op) -> &[PercentileSpread] {
        match op {
            Op::Read => &self.read,
            Op::Write => &self.write,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PercentileSpread {
    pub percentile: String,
    pub mean_ns: f64,
    pub stddev_ns: f64,
    pub min_ns: u64,
    pub max_ns: u64,
}

/// A worker thread's cost and interference.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerReport {
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<usize>,
    pub devices: Vec<u32>,
    pub usr_cpu_s: f64,
    pub sys_cpu_s: f64,
    pub ctx_voluntary: u64,
    pub ctx_involuntary: u64,
}

/// What a driver knows of a device besides its latencies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceMeta {
    pub name: String,
    pub path: Option<String>,
    pub size_bytes: u64,
    pub cpu: Option<usize>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("not a nines report: {0}")]
    Json(#[from] serde_json::Error),
    #[error("not a nines report (schema is '{0}', expected '{SCHEMA_NAME}')")]
    Schema(String),
    #[error(
        "report schema version {0} is newer than this nines reads ({SCHEMA_VERSION}); upgrade nines"
    )]
    Version(u32),
}

impl Report {
    /// Pretty JSON. Deterministic: the same report gives the same bytes.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("reports serialise");
        s.push('\n');
        s
    }

    pub fn from_json(s: &str) -> Result<Report, ReportError> {
        // Check the envelope first so a wrong file gets the right message, not a missing field.
        let v: Value = serde_json::from_str(s)?;
        match v.get("schema").and_then(Value::as_str) {
            Some(SCHEMA_NAME) => {}
            Some(other) => return Err(ReportError::Schema(other.to_owned())),
            None => return Err(ReportError::Schema(String::new())),
        }
        if let Some(ver) = v.get("schema_version").and_then(Value::as_u64)
            && ver > u64::from(SCHEMA_VERSION)
        {
            return Err(ReportError::Version(ver as u32));
        }
        Ok(serde_json::from_value(v)?)
    }

    /// Whether any device did I/O in this direction.
    pub fn has(&self, op: Op) -> bool {
        self.aggregate.dir(op).ios > 0
    }
}

/// Builds a [`Report`] from recorders, computing the aggregate as devices are added.
pub struct ReportBuilder {
    kind: RunKind,
    config: RunConfig,
    devices: Vec<DeviceReport>,
    merged: DeviceRecorder,
    jobs: Vec<JobReport>,
    workers: Vec<WorkerReport>,
    host: Option<Value>,
    warnings: Vec<String>,
}

impl ReportBuilder {
    pub fn new(kind: RunKind, config: RunConfig) -> Self {
        ReportBuilder {
            kind,
            config,
            devices: Vec::new(),
            merged: DeviceRecorder::new(),
            jobs: Vec::new(),
            workers: Vec::new(),
            host: None,
            warnings: Vec::new(),
        }
    }

    pub fn device(&mut self, meta: DeviceMeta, rec: &DeviceRecorder) -> &mut Self {
        let p = &self.config.percentiles;
        let t = self.config.measured_ns;
        self.devices.push(DeviceReport {
            index: self.devices.len() as u32,
            name: meta.name,
            path: meta.path,
            size_bytes: meta.size_bytes,
            cpu: meta.cpu,
            read: DirectionStats::from_recorder(rec.dir(Op::Read), p, t),
            write: DirectionStats::from_recorder(rec.dir(Op::Write), p, t),
            interrupts: None,
            internals: None,
            volume: None,
            depth_mean: None,
            nvme: None,
        });
        let d = self.devices.last_mut().expect("just pushed");
        d.depth_mean = Some(d.depth_in_flight());
        self.merged.merge_from(rec);
        self
    }

    /// Figures of one direction of `rec` over the run's measured time.
    pub fn dir_stats(&self, rec: &DeviceRecorder, op: Op) -> DirectionStats {
        DirectionStats::from_recorder(
            rec.dir(op),
            &self.config.percentiles,
            self.config.measured_ns,
        )
    }

    /// Attaches submission and completion latencies (`slat`, `clat`; an empty direction is
    /// left out) to `stats`.
    pub fn latency_parts(
        &self,
        stats: &mut DirectionStats,
        op: Op,
        slat: &DeviceRecorder,
        clat: &DeviceRecorder,
    ) {
        let p = &self.config.percentiles;
        if slat.dir(op).ios > 0 {
            stats.slat_ns = Some(slat.dir(op).summary(p));
        }
        if clat.dir(op).ios > 0 {
            stats.clat_ns = Some(clat.dir(op).summary(p));
        }
    }

    /// Attaches submission and completion latencies to the device added last.
    pub fn device_latency_parts(&mut self, slat: &DeviceRecorder, clat: &DeviceRecorder) {
        let mut d = self
            .devices
            .pop()
            .expect("device_latency_parts after device");
        self.latency_parts(&mut d.read, Op::Read, slat, clat);
        self.latency_parts(&mut d.write, Op::Write, slat, clat);
        self.devices.push(d);
    }

    /// Attaches a volume's layout and members to the device added last.
    pub fn device_volume(&mut self, v: VolumeReport) -> &mut Self {
        let d = self.devices.last_mut().expect("device_volume after device");
        d.volume = Some(v);
        self
    }

    /// A member's report from its command recorder (None: not recorded).
    pub fn member(
        &self,
        index: u32,
        meta: DeviceMeta,
        counts: (u64, u64),
        rec: Option<&DeviceRecorder>,
        internals: Option<Value>,
    ) -> MemberReport {
        MemberReport {
            index,
            name: meta.name,
            path: meta.path,
            size_bytes: meta.size_bytes,
            commands: counts.0,
            errors: counts.1,
            read: rec.map(|r| self.dir_stats(r, Op::Read)),
            write: rec.map(|r| self.dir_stats(r, Op::Write)),
            internals,
            interrupts: None,
            nvme: None,
        }
    }

    /// Adds a job from its recorder on each target (target order).
    pub fn job(
        &mut self,
        name: &str,
        workload: &WorkloadSpec,
        per_target: &[DeviceRecorder],
    ) -> &mut Self {
        let mut merged = DeviceRecorder::new();
        let mut devices = Vec::with_capacity(per_target.len());
        for (i, r) in per_target.iter().enumerate() {
            merged.merge_from(r);
            devices.push(JobDeviceStats {
                index: i as u32,
                read: self.dir_stats(r, Op::Read),
                write: self.dir_stats(r, Op::Write),
            });
        }
        let job = JobReport {
            name: name.to_string(),
            workload: workload.clone(),
            read: self.dir_stats(&merged, Op::Read),
            write: self.dir_stats(&merged, Op::Write),
            devices,
        };
        self.jobs.push(job);
        self
    }

    /// Attaches interrupt and simulator details to the device added last.
    pub fn device_extra(
        &mut self,
        interrupts: Option<Value>,
        internals: Option<Value>,
    ) -> &mut Self {
        let d = self.devices.last_mut().expect("device_extra after device");
        d.interrupts = interrupts;
        d.internals = internals;
        self
    }

    /// Attaches an NVMe device's identify data and SMART logs to the device added last.
    pub fn device_nvme(&mut self, nvme: Option<NvmeReport>) -> &mut Self {
        let d = self.devices.last_mut().expect("device_nvme after device");
        d.nvme = nvme;
        self
    }

    pub fn worker(&mut self, w: WorkerReport) -> &mut Self {
        self.workers.push(w);
        self
    }

    pub fn host(&mut self, v: Value) -> &mut Self {
        self.host = Some(v);
        self
    }

    pub fn warn(&mut self, w: impl Into<String>) -> &mut Self {
        self.warnings.push(w.into());
        self
    }

    pub fn finish(self) -> Report {
        let p = &self.config.percentiles;
        let t = self.config.measured_ns;
        let spread = |op: Op| -> Vec<PercentileSpread> {
            let active: Vec<&DeviceReport> =
                self.devices.iter().filter(|d| d.dir(op).ios > 0).collect();
            if active.is_empty() {
                return Vec::new();
            }
            p.iter()
                .map(|&pct| {
                    let key = percentile_key(pct);
                    let vals: Vec<u64> = active
                        .iter()
                        .map(|d| d.dir(op).lat_ns.percentiles.get(&key).unwrap_or(0))
                        .collect();
                    let n = vals.len() as f64;
                    let mean = vals.iter().map(|&v| v as f64).sum::<f64>() / n;
                    let var = vals.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
                    PercentileSpread {
                        percentile: key,
                        mean_ns: mean,
                        stddev_ns: var.sqrt(),
                        min_ns: vals.iter().copied().min().unwrap_or(0),
                        max_ns: vals.iter().copied().max().unwrap_or(0),
                    }
                })
                .collect()
        };
        let mut warnings = self.warnings;
        for op in Op::ALL {
            if let Some(w) = too_few_samples(&self.devices, op, p) {
                warnings.push(w);
            }
        }
        let aggregate = Aggregate {
            read: DirectionStats::from_recorder(self.merged.dir(Op::Read), p, t),
            write: DirectionStats::from_recorder(self.merged.dir(Op::Write), p, t),
            across_devices: AcrossDevices {
                read: spread(Op::Read),
                write: spread(Op::Write),
            },
        };
        Report {
            schema: SCHEMA_NAME.to_owned(),
            schema_version: SCHEMA_VERSION,
            nines_version: env!("CARGO_PKG_VERSION").to_owned(),
            kind: self.kind,
            config: self.config,
            devices: self.devices,
            aggregate,
            jobs: self.jobs,
            workers: self.workers,
            host: self.host,
            warnings,
            sources: Vec::new(),
        }
    }
}

/// Samples needed before percentile `p` is more than the max: the rank ceil(p/100 N) must fall
/// below N, so N > 1 / (1 - p/100). Ten times that is the usual bar for a stable estimate.
pub fn samples_to_resolve(p: f64) -> u64 {
    if p >= 100.0 {
        return 1;
    }
    (1.0 / (1.0 - p / 100.0)).round() as u64 + 1
}

/// How many other short devices [`too_few_samples`] names before it counts the rest.
const SHORT_NAMED_MAX: usize = 4;

/// A warning naming the percentiles that the device with the fewest I/Os in this direction
/// cannot resolve (with too few samples they are simply its max, which users misread as a tail),
/// and every other device short of them too.
fn too_few_samples(devices: &[DeviceReport], op: Op, percentiles: &[f64]) -> Option<String> {
    let fewest = devices
        .iter()
        .filter(|d| d.dir(op).ios > 0)
        .min_by_key(|d| d.dir(op).ios)?;
    let ios = fewest.dir(op).ios;
    let unresolved: Vec<f64> = percentiles
        .iter()
        .copied()
        .filter(|&p| p < 100.0 && ios < samples_to_resolve(p))
        .collect();
    let first = *unresolved.first()?;
    let keys: Vec<String> = unresolved
        .iter()
        .map(|&p| format!("p{}", percentile_key(p)))
        .collect();
    // Every other device that cannot resolve the first of them either.
    let others: Vec<String> = devices
        .iter()
        .filter(|d| {
            !std::ptr::eq(*d, fewest)
                && d.dir(op).ios > 0
                && d.dir(op).ios < samples_to_resolve(first)
        })
        .map(|d| format!("{} ({})", d.name, d.dir(op).ios))
        .collect();
    // Named up to a few; past that, counted, so 64 devices do not make a 63-name paragraph.
    let also = match others.len() {
        0 => String::new(),
        n if n <= SHORT_NAMED_MAX => format!(
            "; also short of p{}: {}",
            percentile_key(first),
            others.join(", ")
        ),
        n => format!(
            "; also short of p{}: {} and {} more devices",
            percentile_key(first),
            others[..SHORT_NAMED_MAX - 1].join(", "),
            n - (SHORT_NAMED_MAX - 1)
        ),
    };
    Some(format!(
        "{} did {ios} {}s: too few for {} (p{} needs at least {} I/Os, ten times that to be stable), so those \
         equal its max{also}; run longer or use --ios",
        fewest.name,
        op,
        keys.join(", "),
        percentile_key(first),
        samples_to_resolve(first),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::DEFAULT_PERCENTILES;

    fn config() -> RunConfig {
        RunConfig {
            workload: WorkloadSpec::default(),
            engine: "sim".into(),
            percentiles: DEFAULT_PERCENTILES.to_vec(),
            measured_ns: 2_000_000_000,
            start_unix_ns: None,
            lat_log: None,
            hdr_log: None,
            extra: Map::new(),
        }
    }

    #[test]
    fn aggregate_and_spread() {
        let mut b = ReportBuilder::new(RunKind::Sim, config());
        for (i, base) in [1000u64, 3000].into_iter().enumerate() {
            let mut r = DeviceRecorder::new();
            for k in 0..1000 {
                r.record(Op::Read, base + k, 4096);
            }
            b.device(
                DeviceMeta {
                    name: format!("d{i}"),
                    size_bytes: 1 << 30,
                    ..Default::default()
                },
                &r,
            );
        }
        let rep = b.finish();
        assert_eq!(rep.aggregate.read.ios, 2000);
        assert_eq!(rep.aggregate.read.iops, 1000.0);
        assert_eq!(rep.aggregate.read.bw_bytes, 1000.0 * 4096.0);
        assert_eq!(rep.aggregate.read.lat_ns.min_ns, 1000);
        assert_eq!(rep.aggregate.read.lat_ns.max_ns, 3999);
        assert!(rep.aggregate.across_devices.write.is_empty());
        let p50 = &rep.aggregate.across_devices.read[0];
        assert_eq!(p50.percentile, "50");
        assert_eq!((p50.min_ns, p50.max_ns), (1499, 3499));
        assert_eq!(p50.mean_ns, 2499.0);
        assert_eq!(p50.stddev_ns, 1000.0);
        let json = rep.to_json();
        let back = Report::from_json(&json).unwrap();
        assert_eq!(back, rep);
        assert_eq!(back.to_json(), json);
        let v: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            v["devices"][0]["read"]["lat_ns"]["percentiles"]["99.9999"],
            1999
        );
        assert!(v["aggregate"]["read"]["lat_ns"]["percentiles"]["50"].is_u64());
    }

    #[test]
    fn warns_when_too_few_samples_for_a_percentile() {
        assert_eq!(samples_to_resolve(99.9999), 1_000_001);
        assert_eq!(samples_to_resolve(50.0), 3);
        let mut b = ReportBuilder::new(RunKind::Sim, config());
        let mut r = DeviceRecorder::new();
        for k in 0..5000 {
            r.record(Op::Read, 1000 + k, 4096);
        }
        b.device(
            DeviceMeta {
                name: "small".into(),
                ..Default::default()
            },
            &r,
        );
        let rep = b.finish();
        assert_eq!(rep.warnings.len(), 1, "{:?}", rep.warnings);
        let w = &rep.warnings[0];
        assert!(
            w.starts_with("small did 5000 reads: too few for p99.99, p99.999, p99.9999"),
            "{w}"
        );
        // p99.9 needs 1001 samples: 5000 resolve it, so it is not named.
        assert!(!w.contains("p99.9,"), "{w}");

        // Several short devices: every one is named.
        let mut b = ReportBuilder::new(RunKind::Sim, config());
        for (name, n) in [("a", 5000u64), ("b", 7000), ("c", 20_000_000)] {
            let mut r = DeviceRecorder::new();
            for k in 0..n.min(20_000) {
                r.record(Op::Read, 1000 + k, 4096);
            }
            r.dirs[0].ios = n;
            b.device(
                DeviceMeta {
                    name: name.into(),
                    ..Default::default()
                },
                &r,
            );
        }
        let w = &b.finish().warnings[0];
        assert!(w.starts_with("a did 5000 reads"), "{w}");
        assert!(
            w.contains("also short of p99.99: b (7000)") && !w.contains("c ("),
            "{w}"
        );
        // 64 short devices: four named, the rest counted (the whole list was a 63-name
        // paragraph).
        let mut b = ReportBuilder::new(RunKind::Sim, config());
        for i in 0..64u64 {
            let mut r = DeviceRecorder::new();
            for k in 0..(5000 + i) {
                r.record(Op::Read, 1000 + k, 4096);
            }
            b.device(
                DeviceMeta {
                    name: format!("d{i}"),
                    ..Default::default()
                },
                &r,
            );
        }
        let w = &b.finish().warnings[0];
        assert!(
            w.contains(
                "also short of p99.99: d1 (5001), d2 (5002), d3 (5003) and 60 more devices;"
            ),
            "{w}"
        );
        assert!(!w.contains("d4 ("), "{w}");
        // Enough samples: no warning.
        let mut b = ReportBuilder::new(
            RunKind::Sim,
            RunConfig {
                percentiles: vec![50.0, 99.0],
                ..config()
            },
        );
        b.device(DeviceMeta::default(), &r);
        assert!(b.finish().warnings.is_empty());
    }

    #[test]
    fn refuses_other_files() {
        assert!(matches!(
            Report::from_json("{}"),
            Err(ReportError::Schema(_))
        ));
        assert!(matches!(
            Report::from_json(r#"{"schema":"fio"}"#),
            Err(ReportError::Schema(_))
        ));
        assert!(matches!(
            Report::from_json(r#"{"schema":"nines-report","schema_version":99}"#),
            Err(ReportError::Version(99))
        ));
        assert!(matches!(
            Report::from_json("not json"),
            Err(ReportError::Json(_))
        ));
    }
}
