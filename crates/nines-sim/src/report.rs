//! The report of a simulation: the same schema as `nines profile`, with each device's (or
//! member's) internals — GC, write amplification, suspensions, busy fractions — and, for a
//! volume, its layout, policy counters and members.

use nines_array::{Volume, VolumeHost};
use nines_core::job::JobSpec;
use nines_core::report::{DeviceMeta, Report, ReportBuilder, RunConfig, RunKind, VolumeReport};
use nines_core::stats::DeviceRecorder;
use nines_core::workload::WorkloadSpec;
use nines_flash::{READ_WAIT_CAUSES, READ_WAIT_SLOW_NS, ReadWaitCause, ReadWaits, Ssd};
use nines_trace::Trace;
use serde_json::{Map, Value, json};

use crate::config::{Layout, Prepared, SimConfig};
use crate::event_loop::{RunStats, target_names};
use crate::host::Host;

pub(crate) fn device_internals(ssd: &Ssd, span_ns: u64) -> Map<String, Value> {
    let c = ssd.counters();
    let f = ssd.ftl_stats();
    let span = span_ns.max(1) as f64;
    let mut m = Map::new();
    m.insert("gc_runs".into(), json!(f.victims));
    m.insert("gc_hard_episodes".into(), json!(c.gc_hard_episodes));
    m.insert("gc_soft_episodes".into(), json!(c.gc_soft_episodes));
    m.insert("gc_units_moved".into(), json!(f.units_moved));
    m.insert("erases".into(), json!(f.erases));
    m.insert("host_units_written".into(), json!(f.host_units));
    m.insert(
        "write_amplification".into(),
        json!(round6(f.write_amplification())),
    );
    m.insert("suspensions".into(), json!(c.suspensions));
    m.insert("gc_preemptions".into(), json!(c.gc_preemptions));
    m.insert("read_buffer_hits".into(), json!(c.read_buffer_hits));
    m.insert("buffer_full_waits".into(), json!(c.buffer_full_waits));
    m.insert("housekeeping_stalls".into(), json!(c.housekeeping_stalls));
    m.insert("slow_ios".into(), json!(c.slow_ios));
    m.insert(
        "die_busy_fraction".into(),
        json!(round6(c.die_busy_ns as f64 / (ssd.dies() as f64 * span))),
    );
    m.insert(
        "channel_busy_fraction".into(),
        json!(round6(
            c.channel_busy_ns as f64 / (ssd.channels() as f64 * span)
        )),
    );
    m.insert("window_violations".into(), json!(c.window_violations));
    m.insert("gc_now_victims".into(), json!(c.gc_now_victims));
    // What the model's optional mechanisms did (docs/arch-sim.md: variance sources, MQSim
    // options): each 0 when its mechanism is off.
    for (key, n) in mechanism_counters(&c) {
        m.insert(key.into(), json!(n));
    }
    m.insert("read_waits".into(), read_waits_json(&c.read_waits));
    if let Some(fdp) = ssd.fdp_stats() {
        m.insert("fdp".into(), fdp_json(&fdp, ssd.unit_bytes()));
    }
    m
}

/// A zoned member's internals (docs/report-schema.md, `zoned`): its own write amplification
/// (programmed over host bytes; the FTL's counters are those of a device that never used it),
/// erases by resets, and the zones summarised.
fn zoned_internals(z: &nines_flash::ZonedSsd, m: &mut Map<String, Value>) {
    let st = z.stats();
    let host = st.host_write_bytes;
    m.insert("host_units_written".into(), json!(host / 4096));
    m.insert("erases".into(), json!(st.blocks_erased));
    m.insert(
        "write_amplification".into(),
        json!(round6(if host == 0 {
            1.0
        } else {
            st.media_write_bytes as f64 / host as f64
        })),
    );
    let zones = z.zones();
    let mut v = serde_json::to_value(st).unwrap_or_default();
    let o = v.as_object_mut().expect("stats serialise to an object");
    let cfg = z.config();
    o.insert("zones".into(), json!(zones.len()));
    o.insert("zone_size_bytes".into(), json!(cfg.zone_size_bytes));
    o.insert("zone_capacity_bytes".into(), json!(cfg.zone_capacity_bytes));
    o.insert(
        "zones_written".into(),
        json!(zones.iter().filter(|x| x.written_bytes > 0).count()),
    );
    o.insert(
        "zone_resets_max".into(),
        json!(zones.iter().map(|x| x.resets).max().unwrap_or(0)),
    );
    o.insert(
        "zone_written_bytes_max".into(),
        json!(zones.iter().map(|x| x.written_bytes).max().unwrap_or(0)),
    );
    m.insert("zoned".into(), v);
}

/// The members' `zoned` summaries summed (peaks and maxima: the largest), if any is zoned.
fn zoned_sum(members: &[Map<String, Value>]) -> Option<Value> {
    let zs: Vec<&Map<String, Value>> = members
        .iter()
        .filter_map(|m| m.get("zoned").and_then(Value::as_object))
        .collect();
    let first = zs.first()?;
    let mut out = Map::new();
    for (k, _) in first.iter() {
        let vals = zs.iter().map(|z| z[k].as_u64().unwrap_or(0));
        let v = if k.ends_with("_peak")
            || k.ends_with("_max")
            || k.starts_with("zone_size")
            || k.starts_with("zone_capacity")
        {
            vals.max().unwrap_or(0)
        } else {
            vals.sum()
        };
        out.insert(k.clone(), json!(v));
    }
    Some(Value::Object(out))
}

/// A device's FDP statistics (NVMe's FDP Statistics log page has host and media bytes
/// written per endurance group; the model gives them per reclaim unit handle): per handle,
/// host bytes, media bytes (host + GC moves of the handle's data), their ratio and the
/// victims GC reclaimed from the handle's blocks.
fn fdp_json(f: &nines_flash::FdpStats, unit_bytes: u64) -> Value {
    let handles: Vec<Value> = (0..f.handles as usize)
        .map(|h| {
            json!({
                "handle": h,
                "host_bytes_written": f.host_units[h] * unit_bytes,
                "media_bytes_written": (f.host_units[h] + f.units_moved[h]) * unit_bytes,
                "write_amplification": round6(f.write_amplification(h)),
                "gc_units_moved": f.units_moved[h],
                "gc_victims": f.victims[h],
            })
        })
        .collect();
    json!({
        "handles": f.handles,
        "by_handle": handles,
        "gc_victims_shared": f.victims_shared,
    })
}

/// The members' FDP statistics summed per handle (None when no member has FDP).
fn volume_fdp(members: &[Map<String, Value>]) -> Option<Value> {
    let fdps: Vec<&Value> = members.iter().filter_map(|x| x.get("fdp")).collect();
    let first = fdps.first()?;
    let handles = first["handles"].as_u64().unwrap_or(0) as usize;
    let sum = |h: usize, k: &str| -> u64 {
        fdps.iter()
            .map(|f| f["by_handle"][h][k].as_u64().unwrap_or(0))
            .sum()
    };
    let by_handle: Vec<Value> = (0..handles)
        .map(|h| {
            let host = sum(h, "host_bytes_written");
            let media = sum(h, "media_bytes_written");
            json!({
                "handle": h,
                "host_bytes_written": host,
                "media_bytes_written": media,
                "write_amplification": round6(if host == 0 { 1.0 } else { media as f64 / host as f64 }),
                "gc_units_moved": sum(h, "gc_units_moved"),
                "gc_victims": sum(h, "gc_victims"),
            })
        })
        .collect();
    let shared: u64 = fdps
        .iter()
        .map(|f| f["gc_victims_shared"].as_u64().unwrap_or(0))
        .sum();
    Some(json!({
        "handles": handles,
        "by_handle": by_handle,
        "gc_victims_shared": shared,
    }))
}

/// The counters of the model's optional mechanisms, by their report names.
fn mechanism_counters(c: &nines_flash::SsdCounters) -> [(&'static str, u64); 12] {
    [
        ("read_retries", c.read_retries),
        ("map_misses", c.map_misses),
        ("map_writebacks", c.map_writebacks),
        ("map_shared_reads", c.map_shared_reads),
        ("rmw_reads", c.rmw_reads),
        ("read_priority_jumps", c.read_priority_jumps),
        ("multi_plane_programs", c.multi_plane_programs),
        ("power_exits", c.power_exits),
        ("flushes", c.flushes),
        ("fua_writes", c.fua_writes),
        ("trims", c.trims),
        ("fast_fail_busy", c.fast_fail_busy),
    ]
}

/// The per-cause read waits of a device (or their sums over a volume's members).
fn read_waits_json(w: &[ReadWaits; READ_WAIT_CAUSES]) -> Value {
    let mut m = Map::new();
    m.insert("slow_wait_ns".into(), json!(READ_WAIT_SLOW_NS));
    for cause in ReadWaitCause::ALL {
        let x = &w[cause as usize];
        m.insert(
            cause.name().into(),
            json!({
                "reads": x.reads,
                "slow_reads": x.slow_reads,
                "wait_ns_total": x.wait_ns_total,
                "wait_ns_max": x.wait_ns_max,
            }),
        );
    }
    Value::Object(m)
}

/// JSON floats rounded so that reports stay short and stable.
fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// What a replayed trace did, for `config.extra.trace`, and the workload that describes it
/// honestly in the schema's terms: randrw with the trace's read share (randread or randwrite if
/// it has one direction), the most common request size (the smallest of equals), and as
/// iodepth the most requests the open-loop replay had in flight; no I/O count or rate, and a
/// runtime only when `--runtime` cut the replay short (`requests_replayed` says how many ran).
pub(crate) fn trace_workload(
    t: &Trace,
    spec: &WorkloadSpec,
    stats: &RunStats,
) -> (Value, WorkloadSpec) {
    let ts = t.stats();
    let shape = t.shape();
    let mode = shape.block_size_bytes_mode;
    let mut w = spec.clone();
    w.rw = shape.rw;
    w.read_mix_pct = shape.read_mix_pct;
    w.block_size_bytes = mode;
    w.iodepth = stats.in_flight_max.clamp(1, u32::MAX as u64) as u32;
    // Kept when --runtime cut the replay short; None when the replay ran to the trace's end.
    w.ios_max = None;
    w.rate_iops = None;
    w.thinktime_ns = 0;
    let info = json!({
        "format": t.format.to_string(),
        "requests": t.records.len(),
        "reads": ts.reads,
        "writes": ts.writes,
        "fua_writes": ts.fua_writes,
        "flushes": ts.flushes,
        "bytes": ts.bytes,
        "duration_ns": ts.duration_ns,
        "block_size_bytes_mode": mode,
        "in_flight_max": stats.in_flight_max,
        "in_flight_max_source": "simulation: the most requests the replay had in flight at once (the trace records arrivals only)",
        "requests_replayed": stats.ios,
        "runtime_ns": spec.runtime_ns,
        "replay": "open loop: each request is issued at its arrival time, latency counts from it",
    });
    (info, w)
}

/// Sums and spreads of member internals: what a volume's device row shows.
fn volume_internals(members: &[Map<String, Value>]) -> Map<String, Value> {
    let mut m = Map::new();
    for key in [
        "gc_runs",
        "gc_hard_episodes",
        "gc_soft_episodes",
        "gc_units_moved",
        "erases",
        "host_units_written",
        "suspensions",
        "gc_preemptions",
        "read_buffer_hits",
        "buffer_full_waits",
        "housekeeping_stalls",
        "slow_ios",
        "window_violations",
        "gc_now_victims",
    ]
    .into_iter()
    .chain(mechanism_counters(&Default::default()).map(|(k, _)| k))
    {
        let sum: u64 = members.iter().map(|x| x[key].as_u64().unwrap_or(0)).sum();
        m.insert(key.into(), json!(sum));
    }
    let host_units = m["host_units_written"].as_u64().unwrap_or(0);
    let moved = m["gc_units_moved"].as_u64().unwrap_or(0);
    let wa = if host_units == 0 {
        1.0
    } else {
        (host_units + moved) as f64 / host_units as f64
    };
    m.insert("write_amplification".into(), json!(round6(wa)));
    let mut waits = [ReadWaits::default(); READ_WAIT_CAUSES];
    for x in members {
        for cause in ReadWaitCause::ALL {
            let c = &x["read_waits"][cause.name()];
            let w = &mut waits[cause as usize];
            w.reads += c["reads"].as_u64().unwrap_or(0);
            w.slow_reads += c["slow_reads"].as_u64().unwrap_or(0);
            w.wait_ns_total += c["wait_ns_total"].as_u64().unwrap_or(0);
            w.wait_ns_max = w.wait_ns_max.max(c["wait_ns_max"].as_u64().unwrap_or(0));
        }
    }
    m.insert("read_waits".into(), read_waits_json(&waits));
    if let Some(fdp) = volume_fdp(members) {
        m.insert("fdp".into(), fdp);
    }
    for key in ["die_busy_fraction", "channel_busy_fraction"] {
        let v: Vec<f64> = members
            .iter()
            .map(|x| x[key].as_f64().unwrap_or(0.0))
            .collect();
        let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
        let max = v.iter().cloned().fold(0.0, f64::max);
        m.insert(format!("{key}_mean"), json!(round6(mean)));
        m.insert(format!("{key}_max"), json!(round6(max)));
    }
    m
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn build_report(
    prep: &Prepared,
    cfg: &SimConfig,
    jobs: &[JobSpec],
    per_target: &[DeviceRecorder],
    per_job: &[&[DeviceRecorder]],
    vols: &[&VolumeHost],
    host: &Host,
    stats: &RunStats,
    gc_free_moved: &[u64],
    measured_ns: u64,
    trace: Option<&Trace>,
) -> Report {
    let mut extra = run_extra(prep, cfg, host, stats);
    let mut workload = jobs[0].workload.clone();
    if let Some(t) = trace {
        let (info, w) = trace_workload(t, &workload, stats);
        extra.insert("trace".into(), info);
        workload = w;
    }
    let run_cfg = RunConfig {
        workload: workload.clone(),
        engine: "sim".into(),
        percentiles: cfg.percentiles.clone(),
        measured_ns,
        start_unix_ns: None,
        lat_log: None,
        hdr_log: None,
        extra,
    };
    let mut b = ReportBuilder::new(RunKind::Sim, run_cfg);
    let names = target_names(cfg);
    let size = prep.target_size_bytes();
    let groups = cfg.layout.group(cfg.members());
    assert!(
        per_target.len() >= groups.len(),
        "a recorder for every target"
    );
    let host_cpus = host.cpus();
    let internals = Internals {
        prep,
        gc_free_moved,
        gc_free_any: vols.iter().any(|v| v.volume().gc_free_members().is_some()),
        span_ns: stats.sim_end_ns,
    };
    for (i, (g, vh)) in groups.iter().zip(vols).enumerate() {
        b.device(
            DeviceMeta {
                name: names[i].clone(),
                path: None,
                size_bytes: size,
                cpu: Some((i as u32 % host_cpus) as usize),
            },
            &per_target[i],
        );
        if g.len() == 1 && cfg.layout.shaping().is_none() {
            b.device_extra(None, internals.of(g.start).map(Value::Object));
            continue;
        }
        let vm = volume_extra(&internals, cfg, g, vh, stats);
        b.device_extra(None, Some(Value::Object(vm)));
        let members = volume_members(&b, &internals, cfg, g, vh);
        for w in vh.volume().warnings() {
            b.warn(format!("{}: {w}", names[i]));
        }
        b.device_volume(VolumeReport {
            layout: vh.volume().layout().to_string(),
            options: cfg.layout.options(),
            stats: vh.volume().stats(),
            members,
        });
    }
    if trace.is_some() {
        b.job("trace", &workload, per_job[0]);
    } else {
        for (j, job) in jobs.iter().enumerate() {
            b.job(&job.name, &job.workload, per_job[j]);
        }
    }
    if let Some(w) = scale_warning(prep, cfg) {
        b.warn(w);
    }
    b.finish()
}

/// The run's `config.extra`: the device and its scaling, the layout, the host model and the
/// event loop's counters (the trace, when replayed, is added by the caller).
fn run_extra(
    prep: &Prepared,
    cfg: &SimConfig,
    host: &Host,
    stats: &RunStats,
) -> Map<String, Value> {
    let mut extra = Map::new();
    extra.insert("device".into(), json!(cfg.device_label));
    extra.insert("device_name".into(), json!(cfg.device_name()));
    extra.insert("scale".into(), json!(round6(prep.scale)));
    extra.insert(
        "blocks_per_plane".into(),
        json!(prep.scaled.geometry.blocks_per_plane),
    );
    extra.insert("devices".into(), json!(cfg.devices));
    extra.insert("layout".into(), json!(cfg.layout.name()));
    if let Layout::Raid0 { stripe_bytes } = *cfg.layout.base() {
        extra.insert("stripe_bytes".into(), json!(stripe_bytes));
    }
    extra.insert("precondition".into(), json!(prep.precondition.name()));
    extra.insert(
        "over_provisioning".into(),
        json!(round6(cfg.device.effective_over_provisioning())),
    );
    // Raised at small scales by the share whole-block GC room takes (see DeviceConfig::scaled).
    extra.insert(
        "over_provisioning_simulated".into(),
        json!(round6(prep.scaled.effective_over_provisioning())),
    );
    extra.insert(
        "device_logical_bytes".into(),
        json!(prep.device_size_bytes()),
    );
    extra.insert(
        "model_bytes_per_device".into(),
        json!(prep.model_bytes_per_device),
    );
    extra.insert(
        "host_model".into(),
        json!({
            "completion": cfg.host.completion.name(),
            "cpus": host.cpus(),
            "submit_ns": cfg.host.submit_ns,
            "complete_ns": cfg.host.complete_ns,
            "background": cfg.host.background,
            "background_tasks": host.bg_tasks,
            "background_busy_ns": host.bg_busy_ns,
            "cpu_waits": host.cpu_waits,
            "cpu_wait_ns": host.cpu_wait_ns,
        }),
    );
    if !prep.power_notes.is_empty() {
        // Only for descriptions whose power states the host programs: others' reports stay
        // byte for byte what they were.
        extra["host_model"]["apst"] = json!({
            "policy": cfg.host.apst,
            "states": prep.scaled.power.states,
            "notes": prep.power_notes,
        });
    }
    extra.insert("events".into(), json!(stats.events));
    extra.insert("sim_end_ns".into(), json!(stats.sim_end_ns));
    if stats.io_errors > 0 {
        extra.insert("io_errors".into(), json!(stats.io_errors));
    }
    extra
}

/// What a member device's internals are built from.
struct Internals<'a> {
    prep: &'a Prepared,
    gc_free_moved: &'a [u64],
    /// Some volume wants members free of GC (a serial array's front-end).
    gc_free_any: bool,
    span_ns: u64,
}

impl Internals<'_> {
    /// Member `m`'s internals ([`device_internals`]), None when it is no simulated SSD.
    fn of(&self, m: u32) -> Option<Map<String, Value>> {
        self.prep.members[m as usize].ssd().map(|s| {
            let mut i = device_internals(s, self.span_ns);
            if let Some(z) = self.prep.members[m as usize].zoned() {
                zoned_internals(z, &mut i);
            }
            if self.gc_free_any {
                // GC the device did while its volume wanted it free of GC (a serial array's
                // front-end), counted around each command sent to it.
                i.insert(
                    "gc_units_moved_while_gc_free".into(),
                    json!(self.gc_free_moved_of(m)),
                );
            }
            i
        })
    }

    fn gc_free_moved_of(&self, m: u32) -> u64 {
        self.gc_free_moved.get(m as usize).copied().unwrap_or(0)
    }
}

/// A volume target's internals: its members' summed up ([`volume_internals`]), its layout and
/// the GC its members did while it wanted them free of GC.
fn volume_extra(
    internals: &Internals,
    cfg: &SimConfig,
    g: &std::ops::Range<u32>,
    vh: &VolumeHost,
    stats: &RunStats,
) -> Map<String, Value> {
    let member_internals: Vec<Map<String, Value>> =
        g.clone().filter_map(|m| internals.of(m)).collect();
    let mut vm = if member_internals.is_empty() {
        Map::new()
    } else {
        volume_internals(&member_internals)
    };
    if let Some(z) = zoned_sum(&member_internals) {
        vm.insert("zoned".into(), z);
    }
    vm.insert("layout".into(), json!(cfg.layout.name()));
    vm.insert("members".into(), json!(g.len()));
    if let Layout::Raid0 { stripe_bytes } = *cfg.layout.base() {
        vm.insert("stripe_bytes".into(), json!(stripe_bytes));
    }
    vm.insert("chunks".into(), json!(stats.chunks));
    if vh.volume().gc_free_members().is_some() {
        let moved: u64 = g.clone().map(|m| internals.gc_free_moved_of(m)).sum();
        vm.insert("gc_units_moved_while_gc_free".into(), json!(moved));
    }
    vm
}

/// Each member of a volume target: its commands, errors, latencies and internals.
fn volume_members(
    b: &ReportBuilder,
    internals: &Internals,
    cfg: &SimConfig,
    g: &std::ops::Range<u32>,
    vh: &VolumeHost,
) -> Vec<nines_core::report::MemberReport> {
    let (cmds, errs) = vh.member_counts();
    let recs = vh.member_recorders();
    assert!(
        cmds.len() >= g.len() && errs.len() >= g.len(),
        "the volume counts every member's commands"
    );
    g.clone()
        .enumerate()
        .map(|(k, m)| {
            b.member(
                k as u32,
                DeviceMeta {
                    name: match cfg.layout.shaping().and_then(|s| s.buffer.as_ref()) {
                        Some(buf) if m >= cfg.devices => format!("{}#buffer", buf.device),
                        _ => format!("{}#{m}", cfg.device_name()),
                    },
                    path: None,
                    size_bytes: internals.prep.members[m as usize].size_bytes(),
                    cpu: None,
                },
                (cmds[k], errs[k]),
                recs.get(k),
                internals.of(m).map(Value::Object),
            )
        })
        .collect()
}

/// The warning of a run whose devices were scaled down, None at full size (or when scaling
/// left the over-provisioning as it was: nothing to say).
fn scale_warning(prep: &Prepared, cfg: &SimConfig) -> Option<String> {
    let (scaled_op, full_op) = (
        prep.scaled.effective_over_provisioning(),
        cfg.device.effective_over_provisioning(),
    );
    (prep.scale < 1.0 && format!("{:.2}", scaled_op * 100.0) != format!("{:.2}", full_op * 100.0))
        .then(|| {
            format!(
                "simulated devices are scaled to {:.4} of {}'s blocks per plane ({} of {}); page \
             geometry is unchanged and over-provisioning is {:.2}% instead of {:.2}% so that GC \
             keeps the full-size device's effective spare",
                prep.scale,
                cfg.device.name,
                prep.scaled.geometry.blocks_per_plane,
                cfg.device.geometry.blocks_per_plane,
                prep.scaled.effective_over_provisioning() * 100.0,
                cfg.device.effective_over_provisioning() * 100.0
            )
        })
}
