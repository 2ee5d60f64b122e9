//! What a serve reports: a nines report (docs/report-schema.md: `kind` "profile", engine
//! "serve", a device per export, a volume's members inside it) that `report`, `compare` and
//! `merge` read, plus the server's own counters under `nines_serve`. The workload is what the
//! clients sent: the directions seen, the read share and the mean request size; the clients'
//! queue depth is not known (`iodepth` 1).

use nines_array::LayoutSpec;
use nines_core::op::Op;
use nines_core::report::{
    DeviceMeta, MemberReport, ReportBuilder, RunConfig, RunKind, VolumeReport,
};
use nines_core::stats::DeviceRecorder;
use nines_core::workload::{RwMode, WorkloadSpec};
use serde_json::{Map, Value, json};

use super::{ExportInfo, Exports, ServeError, ServeSpec, Served};
use crate::serve::ServeOutcome;

/// When and how long it served, and what for.
pub(super) struct At<'a> {
    pub spec: &'a ServeSpec,
    /// The layout served (with the superblocks' bitmap).
    pub layout: &'a LayoutSpec,
    pub measured_ns: u64,
    pub start_unix_ns: u64,
    pub connections_refused: u64,
}

/// The report and counters of a finished serve.
pub(super) fn served(
    at: &At,
    infos: &[ExportInfo],
    meta_report: Value,
    mut outcomes: Vec<ServeOutcome>,
) -> Result<Served, ServeError> {
    let (report, nines_serve) = match at.spec.exports {
        Exports::Volume { .. } => {
            let block = volume_block(at, &infos[0], &outcomes[0], meta_report);
            one_volume(at, &infos[0], &outcomes[0], block)
        }
        Exports::PerFile => per_file(at, infos, &outcomes),
    };
    let sum = |f: fn(&ServeOutcome) -> u64| outcomes.iter().map(f).sum::<u64>();
    let (reads, writes) = (
        sum(|o| o.recorder.dir(Op::Read).ios),
        sum(|o| o.recorder.dir(Op::Write).ios),
    );
    let (flushes, connections) = (sum(|o| o.flushes), sum(|o| o.connections));
    let first = &mut outcomes[0];
    Ok(Served {
        report,
        nines_serve,
        reads,
        writes,
        flushes,
        connections,
        exports: infos.len(),
        hdr_log_error: first.hdr_log_error.take(),
        lat_log_error: first.lat_log_error.take(),
        lat_log_stalls: first.lat_log_stalls,
    })
}

/// The workload a server saw, as a report states it: the directions seen, the read share and
/// the mean request size (the clients' queue depth is not known).
fn served_workload(rec: &DeviceRecorder, measured_ns: u64) -> WorkloadSpec {
    let (r, w) = (rec.dir(Op::Read), rec.dir(Op::Write));
    let ios = r.ios + w.ios;
    WorkloadSpec {
        rw: match (r.ios, w.ios) {
            (_, 0) => RwMode::RandRead,
            (0, _) => RwMode::RandWrite,
            _ => RwMode::RandRw,
        },
        read_mix_pct: (r.ios * 100).checked_div(ios).unwrap_or(100) as u8,
        block_size_bytes: (r.bytes + w.bytes).checked_div(ios).unwrap_or(0),
        runtime_ns: Some(measured_ns),
        ..WorkloadSpec::default()
    }
}

/// A serve report's `extra` start: host, kernel, verb.
fn served_extra() -> Map<String, Value> {
    let mut extra = Map::new();
    if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        extra.insert("hostname".into(), json!(h.trim()));
    }
    if let Ok(k) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        extra.insert("kernel".into(), json!(k.trim()));
    }
    extra.insert("verb".into(), json!("serve"));
    extra
}

fn config(at: &At, rec: &DeviceRecorder, extra: Map<String, Value>) -> RunConfig {
    RunConfig {
        workload: served_workload(rec, at.measured_ns),
        engine: "serve".into(),
        percentiles: at.spec.percentiles.clone(),
        measured_ns: at.measured_ns,
        start_unix_ns: Some(at.start_unix_ns),
        lat_log: at.spec.lat_log.clone(),
        hdr_log: at.spec.hdr_log.clone(),
        extra,
    }
}

/// One direction's counts and latency summary.
fn direction(at: &At, o: &ServeOutcome, op: Op) -> Value {
    let d = o.recorder.dir(op);
    json!({
        "ios": d.ios,
        "bytes": d.bytes,
        "latency_ns": d.summary(&at.spec.percentiles),
    })
}

/// `nines_serve` of one volume: the server's counters, the superblocks, emulated members.
fn volume_block(at: &At, info: &ExportInfo, o: &ServeOutcome, meta_report: Value) -> Value {
    json!({
        "export": info.export.name,
        "layout": info.layout,
        "layout_options": at.layout.options(),
        "size_bytes": info.export.size_bytes,
        "targets": info.paths,
        "connections": o.connections,
        "connections_refused": at.connections_refused,
        "read": direction(at, o, Op::Read),
        "write": direction(at, o, Op::Write),
        "flushes": o.flushes,
        "trims": o.trims,
        "write_zeroes": o.write_zeroes,
        "refused": o.refused,
        "cache_and_block_status": o.answered_by_reader,
        "member_cmds": o.member_cmds,
        "member_cmds_inline": o.member_cmds_inline,
        "member_errors": o.member_errors,
        "member_zoned": o.member_zoned,
        "member_failures": o
            .member_failures
            .iter()
            .map(|f| json!({
                "member": f.member,
                "target": f.name,
                "errno": f.errno,
                "at_s": f.at_s,
                "released": f.released,
            }))
            .collect::<Vec<_>>(),
        "volume": o.volume_stats,
        "superblocks": meta_report,
        "emu": info.emu.iter().flatten().map(|h| {
            let i = h.info();
            let ov = h.overhead();
            json!({
                "spec": i.spec,
                "preset": i.preset,
                "scale": i.scale,
                "size_bytes": i.size_bytes,
                "precondition": i.precondition,
                "overhead_ns": {
                    "count": ov.count,
                    "p50": ov.p50_ns,
                    "p99": ov.p99_ns,
                    "p99.99": ov.p9999_ns,
                    "max": ov.max_ns,
                },
            })
        }).collect::<Vec<_>>(),
    })
}

/// The report of one volume: one device (the export) with the volume's members.
fn one_volume(
    at: &At,
    info: &ExportInfo,
    o: &ServeOutcome,
    block: Value,
) -> (nines_core::report::Report, Value) {
    let mut extra = served_extra();
    extra.insert("export".into(), json!(info.export.name));
    extra.insert("layout".into(), json!(info.layout));
    extra.insert("connections".into(), json!(o.connections));
    extra.insert("flushes".into(), json!(o.flushes));
    extra.insert("trims".into(), json!(o.trims));
    extra.insert("refused".into(), json!(o.refused));
    if let Some(emu) = block
        .get("emu")
        .filter(|e| e.as_array().is_some_and(|a| !a.is_empty()))
    {
        extra.insert("emu".into(), json!({ "devices": emu }));
    }
    let mut b = ReportBuilder::new(RunKind::Profile, config(at, &o.recorder, extra));
    b.device(
        DeviceMeta {
            name: info.export.name.clone(),
            path: None,
            size_bytes: info.export.size_bytes,
            cpu: None,
        },
        &o.recorder,
    );
    if info.paths.len() > 1 {
        let members = info
            .paths
            .iter()
            .enumerate()
            .map(|(i, t)| MemberReport {
                index: i as u32,
                name: t.display().to_string(),
                path: Some(t.display().to_string()),
                size_bytes: 0,
                commands: o.member_cmds.get(i).copied().unwrap_or(0),
                errors: o.member_errors.get(i).copied().unwrap_or(0),
                read: None,
                write: None,
                internals: None,
                interrupts: None,
                nvme: None,
            })
            .collect();
        b.device_volume(VolumeReport {
            layout: info.layout.to_string(),
            options: at.layout.options(),
            stats: o.volume_stats.clone(),
            members,
        });
    }
    (b.finish(), block)
}

/// The report of several exports: a device per export, and the server's counters per export
/// under `nines_serve.exports`.
fn per_file(
    at: &At,
    infos: &[ExportInfo],
    outcomes: &[ServeOutcome],
) -> (nines_core::report::Report, Value) {
    let mut all = DeviceRecorder::new();
    for o in outcomes {
        all.merge_from(&o.recorder);
    }
    let names: Vec<&str> = infos.iter().map(|i| i.export.name.as_str()).collect();
    let mut extra = served_extra();
    extra.insert("exports".into(), json!(names));
    let mut b = ReportBuilder::new(RunKind::Profile, config(at, &all, extra));
    let mut blocks = Vec::with_capacity(outcomes.len());
    for (info, o) in infos.iter().zip(outcomes) {
        b.device(
            DeviceMeta {
                name: info.export.name.clone(),
                path: Some(info.paths[0].display().to_string()),
                size_bytes: info.export.size_bytes,
                cpu: None,
            },
            &o.recorder,
        );
        blocks.push(json!({
            "export": info.export.name,
            "target": info.paths[0],
            "size_bytes": info.export.size_bytes,
            "connections": o.connections,
            "read": direction(at, o, Op::Read),
            "write": direction(at, o, Op::Write),
            "flushes": o.flushes,
            "trims": o.trims,
            "write_zeroes": o.write_zeroes,
            "refused": o.refused,
            "member_cmds": o.member_cmds,
            "member_errors": o.member_errors,
        }));
    }
    let block = json!({
        "exports": blocks,
        "connections_refused": at.connections_refused,
    });
    (b.finish(), block)
}
