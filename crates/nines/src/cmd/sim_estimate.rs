//! `nines sim`'s estimate, made before anything is prepared: how many I/Os, device commands and
//! events the run will simulate at most, how long that takes in wall time, and how large its
//! per-I/O log grows. Runs that would take hours, never end, or fill the disk are refused up
//! front (issue 15: `--ios 10^12`, `--runtime 1000000s` ran silently for days).
//!
//! The I/O count is an upper bound: each target completes at most `iodepth` I/Os per shortest
//! possible latency (the controller's overhead, the host's submission and completion costs, the
//! flash read for read-only jobs, plus the think time), at most `--rate-iops`, and its devices
//! at most one command per `command_ns` each.

use nines_core::job::JobSpec;
use nines_core::workload::RwMode;
use nines_flash::DeviceConfig;
use nines_sim::{CompletionMode, HostConfig, Layout};

/// Device commands the simulator completes per wall second, a conservative figure from
/// docs/arch-sim.md's speed table (0.45-4 M on the 2-CPU VM); debug builds are ~10x slower.
pub const COMMANDS_PER_WALL_S: f64 = if cfg!(debug_assertions) { 1.0e5 } else { 1.0e6 };

/// Events per device command (a submission and a completion; measured 2.0 on every preset).
const EVENTS_PER_COMMAND: f64 = 2.0;

/// Bytes of one per-I/O log record (nines_core::latlog), and a generous header.
const LAT_RECORD_BYTES: f64 = nines_core::latlog::RECORD_BYTES as f64;
const LAT_HEADER_BYTES: f64 = 64.0 * 1024.0;

/// What the estimate is made from.
pub struct Inputs<'a> {
    pub device: &'a DeviceConfig,
    /// `--device null:SIZE`: zero-latency members.
    pub null_device: bool,
    pub devices: u32,
    pub layout: &'a Layout,
    pub host: &'a HostConfig,
    pub jobs: &'a [JobSpec],
    /// A replayed trace's request count (it replaces the jobs' I/O count).
    pub trace_requests: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    /// Volume I/Os at most; None: unbounded (the run never ends).
    pub ios: Option<u64>,
    /// Of which measured (after the ramp): the per-I/O log's records.
    pub measured_ios: Option<u64>,
    pub commands: Option<u64>,
    pub events: Option<u64>,
    pub wall_s: Option<f64>,
    pub lat_log_bytes: Option<u64>,
}

fn to_count(x: f64) -> Option<u64> {
    (x.is_finite() && x >= 0.0).then(|| x.min(u64::MAX as f64) as u64)
}

pub fn estimate(i: &Inputs<'_>) -> Estimate {
    let members = i.devices + i.layout.extra_members();
    let targets = i.layout.group(members).len().max(1) as f64;
    let members_per_target = f64::from(i.devices) / targets;
    let c = &i.device.controller;
    let mut r = job_rates(i);
    if !i.null_device && c.command_ns > 0 {
        r.rate_per_target = r
            .rate_per_target
            .min(members_per_target * 1e9 / c.command_ns as f64);
    }
    let (ios, measured) = match i.trace_requests {
        Some(n) => (n as f64, n as f64),
        None => r.ios(targets),
    };
    let commands = ios * r.commands_per_io;
    Estimate {
        ios: to_count(ios),
        measured_ios: to_count(measured),
        commands: to_count(commands),
        events: to_count(commands * EVENTS_PER_COMMAND),
        wall_s: commands
            .is_finite()
            .then_some(commands / COMMANDS_PER_WALL_S),
        lat_log_bytes: to_count(measured * LAT_RECORD_BYTES + LAT_HEADER_BYTES),
    }
}

/// What the jobs together ask of one target: their rate, their --ios, how long they run.
struct JobRates {
    rate_per_target: f64,
    ios_cap: f64,
    /// The longest job's runtime with its ramp (u64::MAX: unbounded), and the longest ramp.
    time_ns: u64,
    ramp_ns: u64,
    commands_per_io: f64,
    all_have_ios: bool,
}

/// Each job's rate: its queue depth over a command's cycle (device, host, thinktime; with
/// thinktime_blocks, each burst and its rest), capped
/// by --rate-iops.
fn job_rates(i: &Inputs<'_>) -> JobRates {
    let host_ns = if i.host.completion == CompletionMode::None {
        0
    } else {
        i.host.submit_ns + i.host.complete_ns
    };
    let c = &i.device.controller;
    let read_ns = i
        .device
        .timing
        .read_ns_by_page_type
        .iter()
        .copied()
        .min()
        .unwrap_or(i.device.timing.read_ns);
    // Device commands per volume I/O: a request larger than the stripe unit is split.
    let unit_bytes = match *i.layout.base() {
        Layout::Raid0 { stripe_bytes } => stripe_bytes,
        Layout::Raid5 { chunk_bytes, .. } => chunk_bytes,
        _ => u64::MAX,
    };
    let mut r = JobRates {
        rate_per_target: 0.0,
        ios_cap: 0.0,
        time_ns: 0,
        ramp_ns: 0,
        commands_per_io: 1.0,
        all_have_ios: true,
    };
    for j in i.jobs {
        let w = &j.workload;
        let reads_only = matches!(w.rw, RwMode::Read | RwMode::RandRead)
            || (w.rw == RwMode::RandRw && w.read_mix_pct == 100);
        // A command ends no earlier than its data crossed the host link (a device with no
        // per-command overhead, e.g. mqsim-compatible, still takes time per write).
        let link_ns = |bytes_per_s: u64| {
            if bytes_per_s == 0 {
                0
            } else {
                (u128::from(w.block_size_bytes) * 1_000_000_000 / u128::from(bytes_per_s)) as u64
            }
        };
        let device_ns = if i.null_device {
            0
        } else if reads_only {
            c.overhead_ns + read_ns + link_ns(c.read_bytes_per_s)
        } else {
            c.overhead_ns + link_ns(c.write_bytes_per_s)
        };
        let mut rate = if w.thinktime_blocks > 0 && w.thinktime_ns > 0 {
            // Bursts of B I/Os at the depth, then the rest: B I/Os per (B / depth cycles + rest).
            let b = f64::from(w.thinktime_blocks);
            let burst_ns = (b / f64::from(w.iodepth)).ceil() * (device_ns + host_ns) as f64;
            b * 1e9 / (burst_ns + w.thinktime_ns as f64)
        } else {
            let cycle_ns = (device_ns + host_ns + w.thinktime_ns) as f64;
            f64::from(w.iodepth) * 1e9 / cycle_ns
        };
        if let Some(cap) = w.rate_iops {
            rate = rate.min(cap as f64);
        }
        r.rate_per_target += rate;
        match w.ios_max {
            Some(n) => r.ios_cap += n as f64,
            None => r.all_have_ios = false,
        }
        r.time_ns = r.time_ns.max(
            w.runtime_ns
                .map_or(u64::MAX, |t| t.saturating_add(w.ramp_ns)),
        );
        r.ramp_ns = r.ramp_ns.max(w.ramp_ns);
        r.commands_per_io = r
            .commands_per_io
            .max(w.block_size_bytes.div_ceil(unit_bytes) as f64);
    }
    assert!(r.commands_per_io >= 1.0 && r.ramp_ns <= r.time_ns.max(r.ramp_ns));
    r
}

impl JobRates {
    /// The I/Os of all targets, and those measured (after the ramp).
    fn ios(&self, targets: f64) -> (f64, f64) {
        let (time_ns, ramp_ns) = (self.time_ns, self.ramp_ns);
        let by_time = if time_ns == u64::MAX {
            f64::INFINITY
        } else {
            self.rate_per_target * time_ns as f64 / 1e9
        };
        let per_target = if self.all_have_ios {
            // The ramp's I/Os come on top of --ios (none without a ramp: an infinite rate
            // times a zero ramp would be NaN, which min() below reads as unbounded).
            let ramp_ios = if ramp_ns == 0 {
                0.0
            } else {
                self.rate_per_target * ramp_ns as f64 / 1e9
            };
            self.ios_cap + ramp_ios
        } else {
            f64::INFINITY
        }
        .min(by_time);
        let measured_share = if time_ns == u64::MAX || time_ns == 0 || self.all_have_ios {
            1.0
        } else {
            1.0 - ramp_ns as f64 / time_ns as f64
        };
        let per_target_measured = if self.all_have_ios {
            self.ios_cap.min(by_time)
        } else {
            per_target * measured_share
        };
        (per_target * targets, per_target_measured * targets)
    }
}

/// "1.2 M", "340 k", "12".
pub fn count(n: u64) -> String {
    match n {
        0..10_000 => n.to_string(),
        10_000..10_000_000 => format!("{:.0} k", n as f64 / 1e3),
        10_000_000..10_000_000_000 => format!("{:.1} M", n as f64 / 1e6),
        _ => format!("{:.3e}", n as f64),
    }
}

/// "45 s", "12 min", "3.4 h", "21 days".
pub fn wall(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else if s < 172_800.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.0} days", s / 86_400.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nines_core::workload::WorkloadSpec;

    fn job(w: WorkloadSpec) -> Vec<JobSpec> {
        vec![JobSpec {
            name: "job0".into(),
            workload: w,
        }]
    }

    fn est(w: WorkloadSpec, devices: u32, null: bool, host: &HostConfig) -> Estimate {
        // The clean model: the figures below count with its one 14 us read time (the preset's
        // page types would make the estimate take their fastest read).
        let device = DeviceConfig::preset("afa-m2-2018").unwrap().ideal();
        let jobs = job(w);
        estimate(&Inputs {
            device: &device,
            null_device: null,
            devices,
            layout: &Layout::Independent,
            host,
            jobs: &jobs,
            trace_requests: None,
        })
    }

    #[test]
    fn counts_follow_from_ios_latency_and_the_command_rate() {
        let host = HostConfig::new(CompletionMode::Interrupt);
        let host_ns = (host.submit_ns + host.complete_ns) as f64;
        let mut w = WorkloadSpec {
            ios_max: Some(1_000_000_000_000),
            runtime_ns: None,
            ..Default::default()
        };
        let e = est(w.clone(), 2, false, &host);
        assert_eq!(e.ios, Some(2_000_000_000_000));
        assert_eq!(e.events, Some(4_000_000_000_000));
        assert!(e.wall_s.unwrap() > 3600.0);
        assert_eq!(e.lat_log_bytes, Some(2_000_000_000_000 * 24 + 65_536));
        // 10 s of QD1 4 KiB random reads: 1 / (overhead 2 us + read 14 us + 4 KiB over the
        // 1.7 GB/s link + host) per second.
        w.ios_max = None;
        w.runtime_ns = Some(10_000_000_000);
        let e = est(w.clone(), 1, false, &host);
        let link_ns = (4096u64 * 1_000_000_000 / 1_700_000_000) as f64;
        let want = 10.0 * 1e9 / (2_000.0 + 14_000.0 + link_ns + host_ns);
        assert_eq!(e.ios, Some(want as u64));
        // QD 4096: capped by the controller's command rate (command_ns 6250: 160 k/s).
        w.iodepth = 4096;
        let e = est(w.clone(), 1, false, &host);
        assert_eq!(e.ios, Some(1_600_000));
        // A ramp is simulated but not logged.
        w.ramp_ns = 10_000_000_000;
        let e = est(w.clone(), 1, false, &host);
        assert_eq!((e.ios, e.measured_ios), (Some(3_200_000), Some(1_600_000)));
        // Zero-latency devices without host costs take no simulated time: never ends.
        w.ramp_ns = 0;
        let none = HostConfig::new(CompletionMode::None);
        let e = est(w.clone(), 1, true, &none);
        assert_eq!((e.ios, e.wall_s), (None, None));
        // ... unless --ios ends it (the volumes_cli null-device comparison runs so).
        w.ios_max = Some(3000);
        let e = est(w, 3, true, &none);
        assert_eq!((e.ios, e.measured_ios), (Some(9000), Some(9000)));
        assert!(e.wall_s.is_some());
    }

    #[test]
    fn writes_to_a_device_without_command_overhead_end() {
        // mqsim-compatible charges no per-command time (overhead_ns = 0): a write still takes
        // its link transfer, so a --runtime of writes with --completion none ends.
        let device = DeviceConfig::preset("mqsim-compatible").unwrap();
        assert_eq!(device.controller.overhead_ns, 0);
        let w = WorkloadSpec {
            rw: nines_core::workload::RwMode::RandWrite,
            iodepth: 8,
            ios_max: None,
            runtime_ns: Some(200_000_000),
            ..Default::default()
        };
        let jobs = job(w);
        let e = estimate(&Inputs {
            device: &device,
            null_device: false,
            devices: 1,
            layout: &Layout::Independent,
            host: &HostConfig::new(CompletionMode::None),
            jobs: &jobs,
            trace_requests: None,
        });
        // 8 x 0.2 s / (4 KiB over 4 GB/s = 1024 ns).
        assert_eq!(e.ios, Some(8 * 200_000_000 / 1024));
    }

    #[test]
    fn numbers_are_written_for_people() {
        assert_eq!(count(12), "12");
        assert_eq!(count(340_000), "340 k");
        assert_eq!(count(12_300_000), "12.3 M");
        assert_eq!(wall(45.2), "45 s");
        assert_eq!(wall(720.0), "12 min");
        assert_eq!(wall(12_240.0), "3.4 h");
        assert_eq!(wall(1_814_400.0), "21 days");
    }
}
