//! The readable table printed on stdout by `nines profile` and `nines sim`: one row per device
//! and direction, then the merged distribution over all devices and, for each percentile, its mean
//! and standard deviation across devices (the paper's Fig. 12 and 14), then the workers' CPU cost.

use std::fmt::Write as _;

use nines_core::op::Op;
use nines_core::report::{DeviceReport, DirectionStats, NvmeReport, Report, RunKind};
use nines_core::units::format_cpu_list;

/// Formats nanoseconds with a unit chosen for 3-4 significant digits: `812ns`, `25.1µs`, `1.20ms`,
/// `2.50s`: the unit written as everywhere else (`µs`, which the table counts as one column),
/// without the space prose puts before it, so that every cell stays one word.
pub fn format_ns(ns: f64) -> String {
    let (v, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "µs")
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

/// How long the run measured: `10 s measured`; for a merged run of different durations, each
/// run's (`10 s, 3 s and 3 s measured (3 runs merged)`), not the longest alone.
pub fn measured_phrase(report: &Report) -> String {
    let f = |ns: u64| crate::axis::format_ns(ns as f64);
    let times: Vec<u64> = report.sources.iter().map(|s| s.measured_ns).collect();
    match times.as_slice() {
        [] => format!("{} measured", f(report.config.measured_ns)),
        [one] => format!("{} measured", f(*one)),
        [first, ..] if times.iter().all(|t| t == first) => {
            format!(
                "{} measured by each of {} merged runs",
                f(*first),
                times.len()
            )
        }
        [init @ .., last] => format!(
            "{} and {} measured ({} runs merged)",
            init.iter().map(|&t| f(t)).collect::<Vec<_>>().join(", "),
            f(*last),
            times.len()
        ),
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// What the run addressed: `3 devices`, or `1 volume (raid5 of 4 devices)` for an array.
pub fn targets_phrase(report: &Report) -> String {
    let volumes: Vec<_> = report
        .devices
        .iter()
        .filter_map(|d| d.volume.as_ref())
        .collect();
    let Some(v) = volumes.first() else {
        return plural(report.devices.len(), "device");
    };
    let vols = format!(
        "{} ({} of {})",
        plural(volumes.len(), "volume"),
        v.layout,
        plural(v.members.len(), "device")
    );
    match report.devices.len() - volumes.len() {
        // A merged report may hold plain devices beside a volume.
        0 => vols,
        n => format!("{} and {vols}", plural(n, "device")),
    }
}

/// Whether a direction's latencies are one value: min and max within 0.1% (the histogram's own
/// precision), so p50 equals max and the standard deviation is nil. Such a distribution has no
/// tail at all, and its percentiles must not be read as one.
pub fn is_constant(s: &DirectionStats) -> bool {
    s.ios >= 2 && (s.lat_ns.max_ns - s.lat_ns.min_ns.min(s.lat_ns.max_ns)) * 1000 <= s.lat_ns.max_ns
}

/// One sentence per direction in which a target's latencies are constant ([`is_constant`]): a
/// simulated one says the model has no variance for this workload; a measured one, that nothing
/// varied. Empty when every distribution varies.
/// Targets of a closed-loop run that kept far fewer I/Os in flight than `--iodepth` asked
/// (their latencies are those of the depth achieved, not the one asked for): one line each, at
/// most 8, then a count.
pub fn shallow_depth(report: &Report) -> Vec<String> {
    let w = &report.config.workload;
    let asked = w.iodepth;
    if asked < 4 || w.rate_iops.is_some() || w.thinktime_ns > 0 {
        return Vec::new();
    }
    let shallow: Vec<(&str, f64)> = report
        .devices
        .iter()
        .filter(|d| d.read.ios + d.write.ios > 0)
        .filter_map(|d| {
            let depth = d.depth_mean.unwrap_or_else(|| d.depth_in_flight());
            (depth < f64::from(asked) / 2.0).then_some((d.name.as_str(), depth))
        })
        .collect();
    let mut out: Vec<String> = shallow
        .iter()
        .take(8)
        .map(|(name, depth)| {
            format!(
                "{name} kept {depth:.2} I/Os in flight on average (IOPS x mean latency) where \
                 --iodepth asked for {asked}: its latencies are those of a queue depth of about \
                 {:.0}; a device that completes inside the submit call (zram, a page-cache hit) \
                 or a synchronous engine cannot keep more in flight",
                depth.max(1.0)
            )
        })
        .collect();
    if shallow.len() > 8 {
        out.push(format!(
            "{} more targets kept under half of --iodepth {asked} in flight",
            shallow.len() - 8
        ));
    }
    out
}

pub fn constant_distributions(report: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for op in Op::ALL {
        let active: Vec<_> = report
            .devices
            .iter()
            .filter(|d| d.dir(op).ios > 0)
            .collect();
        let constant: Vec<_> = active.iter().filter(|d| is_constant(d.dir(op))).collect();
        let Some(first) = constant.first() else {
            continue;
        };
        let lat = crate::axis::format_ns(first.dir(op).lat_ns.max_ns as f64);
        let same = constant
            .iter()
            .all(|d| d.dir(op).lat_ns.max_ns == first.dir(op).lat_ns.max_ns);
        let who = if constant.len() == active.len() && active.len() > 1 {
            format!("every {op} on all {} targets", active.len())
        } else if constant.len() == 1 {
            format!("every {op} on {}", first.name)
        } else {
            format!(
                "every {op} on {} of {} targets",
                constant.len(),
                active.len()
            )
        };
        let took = if same {
            format!("took {lat}")
        } else {
            "took one fixed time per target".to_string()
        };
        let why = match report.kind {
            RunKind::Sim => {
                "the model has no variance for this workload, so its percentiles are one \
                 service time, not a tail (variance comes from writes and garbage collection, \
                 --bg-rate, or a device description with firmware jitter)"
            }
            RunKind::Profile => {
                "nothing varied, so its percentiles are not a measured tail (a target that does \
                 no I/O, or a clock too coarse to tell the I/Os apart?)"
            }
        };
        out.push(format!(
            "constant latency: {who} {took} (p50 = max, stdev 0): {why}"
        ));
    }
    out
}

/// A RAID5 rebuild's progress, one sentence per volume rebuilding a member: rows rebuilt of
/// the total, what it wrote and read, and whether it finished, stopped or was still going when
/// the run ended.
pub fn rebuild_progress(report: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for d in &report.devices {
        let Some(v) = &d.volume else { continue };
        let Some(rb) = v.stats.get("rebuild").filter(|r| r.is_object()) else {
            continue;
        };
        let n = |k: &str| rb.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
        let member = n("member");
        let name = v
            .members
            .get(member as usize)
            .map_or_else(|| format!("member {member}"), |m| m.name.clone());
        let (done, total) = (n("rows_rebuilt"), n("rows_total"));
        let pct = if total > 0 {
            done as f64 * 100.0 / total as f64
        } else {
            0.0
        };
        let state = match (
            rb.get("aborted").and_then(serde_json::Value::as_str),
            rb.get("done_ns").and_then(serde_json::Value::as_u64),
        ) {
            (Some(why), _) => format!("stopped: {why}"),
            (None, Some(ns)) => format!("finished at {}", crate::axis::format_ns(ns as f64)),
            (None, None) => "still going when the run ended".to_string(),
        };
        out.push(format!(
            "rebuild of {name} on {}: {done} of {total} rows ({pct:.1}%), {} rebuild writes ({:.1} MB), \
             {} reads of the other members; {state}",
            d.name,
            done,
            n("bytes_written") as f64 / 1e6,
            n("member_reads"),
        ));
    }
    out
}

/// Zoned members (issue 33), one sentence per device or volume whose internals carry a
/// `zoned` summary: zone resets, appends, what the host wrote, the device's write amplification,
/// the open and active zone peaks, and any zone errors.
pub fn zoned_summary(report: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for d in &report.devices {
        let Some(i) = d.internals.as_ref() else {
            continue;
        };
        let Some(z) = i.get("zoned").filter(|z| z.is_object()) else {
            continue;
        };
        let n = |k: &str| z.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
        let errors = n("invalid_writes")
            + n("zone_full_errors")
            + n("too_many_open_errors")
            + n("too_many_active_errors");
        let waf = i
            .get("write_amplification")
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(1.0);
        out.push(format!(
            "zoned {}: {} zone resets (at most {} of one zone), {} zone appends, {:.1} MB \
             written by the host, device write amplification {waf:.3}, device GC moves {}, \
             open/active zones peak {}/{}, {errors} zone errors",
            d.name,
            n("zone_resets"),
            n("zone_resets_max"),
            n("zone_appends"),
            n("host_write_bytes") as f64 / 1e6,
            i.get("gc_units_moved")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0),
            n("open_zones_peak"),
            n("active_zones_peak"),
        ));
    }
    out
}

/// Every NVMe device and member of the run with its identify and SMART data (profile on
/// NVMe), in report order: (name, data).
pub fn nvme_devices(report: &Report) -> Vec<(&str, &NvmeReport)> {
    let mut out = Vec::new();
    for d in &report.devices {
        if let Some(n) = &d.nvme {
            out.push((d.name.as_str(), n));
        }
        for m in d.volume.iter().flat_map(|v| &v.members) {
            if let Some(n) = &m.nvme {
                out.push((m.name.as_str(), n));
            }
        }
    }
    out
}

/// What the SMART log counted during the run, in words (None without a delta).
pub fn smart_delta_text(n: &NvmeReport) -> Option<String> {
    let d = n.smart_delta.as_ref()?;
    let mut s = format!(
        "{} host write and {} host read commands, {:.1} MB written and {:.1} MB read (in \
         512,000-byte data units), {} media errors, {} new error log entries",
        d.host_write_commands,
        d.host_read_commands,
        d.written_bytes as f64 / 1e6,
        d.read_bytes as f64 / 1e6,
        d.media_errors,
        d.error_log_entries,
    );
    if let Some(a) = &n.smart_after {
        let _ = write!(
            s,
            "; after it {} C, spare {}%, endurance used {}%",
            a.temperature_c_composite, a.available_spare_pct, a.endurance_used_pct
        );
    }
    Some(s)
}

/// NVMe devices (profile), two lines each: the controller (model, firmware, serial, volatile
/// write cache, APST, power states) and what the SMART log counted during the run, then any
/// admin command that failed.
pub fn nvme_summary(report: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for (name, n) in nvme_devices(report) {
        out.push(format!("nvme {name}: {}", n.summary()));
        match smart_delta_text(n) {
            Some(t) => out.push(format!("nvme {name}: SMART during the run: {t}")),
            None => out.push(format!(
                "nvme {name}: SMART during the run: not known (no SMART log before and after it)"
            )),
        }
        for note in &n.notes {
            out.push(format!("nvme {name}: {note}"));
        }
    }
    out
}

/// Warnings from NVMe SMART logs: a critical warning after the run, and media or data
/// integrity errors during it.
pub fn nvme_warnings(report: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for (name, n) in nvme_devices(report) {
        if let Some(a) = n.smart_after.as_ref().filter(|a| a.critical_warning != 0) {
            out.push(format!(
                "{name} ({}) reports a SMART critical warning after the run: {}",
                n.controller.model,
                a.critical_warnings.join(", ")
            ));
        }
        if let Some(d) = n.smart_delta.as_ref().filter(|d| d.media_errors > 0) {
            out.push(format!(
                "{name} counted {} media and data integrity errors during the run",
                d.media_errors
            ));
        }
    }
    out
}

/// The rebuild's writes to its replacement member as a table row's counts (I/Os = rows
/// written, one chunk each), when the volume is rebuilding that member.
pub fn rebuild_writes(d: &nines_core::report::DeviceReport, member: u32) -> Option<(u64, u64)> {
    let rb = d.volume.as_ref()?.stats.get("rebuild")?;
    if rb.get("member")?.as_u64()? != u64::from(member) {
        return None;
    }
    Some((
        rb.get("rows_rebuilt")?.as_u64()?,
        rb.get("bytes_written")?.as_u64()?,
    ))
}

/// The whole table, ending with a newline.
/// Per reclaim unit handle of each FDP device (simulated or emulated internals): device,
/// handle, host MB, media MB, write amplification, GC victims. Empty without FDP.
pub fn fdp_rows(report: &Report) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for d in &report.devices {
        let Some(f) = d.internals.as_ref().and_then(|i| i.get("fdp")) else {
            continue;
        };
        let Some(handles) = f["by_handle"].as_array() else {
            continue;
        };
        for h in handles {
            let n = |k: &str| h[k].as_u64().unwrap_or(0);
            rows.push(vec![
                d.name.clone(),
                n("handle").to_string(),
                format!("{:.1}", n("host_bytes_written") as f64 / 1e6),
                format!("{:.1}", n("media_bytes_written") as f64 / 1e6),
                format!("{:.3}", h["write_amplification"].as_f64().unwrap_or(1.0)),
                n("gc_victims").to_string(),
            ]);
        }
    }
    rows
}

/// The header of [`fdp_rows`].
pub const FDP_HEADER: [&str; 6] = [
    "device",
    "handle",
    "host MB",
    "media MB",
    "WAF",
    "GC victims",
];

pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", headline(report));
    let keys: Vec<String> = report
        .config
        .percentiles
        .iter()
        .map(|&p| nines_core::units::percentile_key(p))
        .collect();
    out.push('\n');
    device_table(report, &keys).render(&mut out);
    if report.jobs.len() > 1 {
        out.push('\n');
        job_table(report, &keys).render(&mut out);
    }
    let fdp = fdp_rows(report);
    if !fdp.is_empty() {
        out.push('\n');
        let mut ft = Table {
            rows: vec![FDP_HEADER.iter().map(|s| s.to_string()).collect()],
            left: 2,
        };
        ft.rows.extend(fdp);
        ft.render(&mut out);
    }
    if !report.workers.is_empty() {
        out.push('\n');
        worker_table(report).render(&mut out);
    }
    for line in rebuild_progress(report)
        .into_iter()
        .chain(zoned_summary(report))
        .chain(nvme_summary(report))
    {
        let _ = writeln!(out, "{line}");
    }
    for w in &report.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    for w in constant_distributions(report)
        .into_iter()
        .chain(shallow_depth(report))
        .chain(nvme_warnings(report))
        .chain(crate::run::emulation_overhead(report))
    {
        let _ = writeln!(out, "warning: {w}");
    }
    out
}

/// The table's first line: the kind of run, its workload, engine, targets and measured time.
fn headline(report: &Report) -> String {
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
    let targets = targets_phrase(report);
    let measured = if report.sources.is_empty() {
        format!("{:.2} s measured", c.measured_ns as f64 / 1e9)
    } else {
        measured_phrase(report)
    };
    format!(
        "nines {kind}: {what}, engine {}, {targets}, {measured}",
        c.engine,
    )
}

/// The latency columns' header after the first `lead` columns: min, mean, stdev, each
/// percentile, max.
fn stats_header(lead: &[&str], keys: &[String]) -> Vec<String> {
    let mut header: Vec<String> = lead
        .iter()
        .chain(&["ios", "IOPS", "MB/s", "min", "mean", "stdev"])
        .map(|s| s.to_string())
        .collect();
    header.extend(keys.iter().map(|k| pct_header(k)));
    header.push("max".into());
    header
}

/// One row per device and direction, its volume's members and rebuild writes under it, then
/// (with several devices) the merged distribution and the spread across devices.
fn device_table(report: &Report, keys: &[String]) -> Table {
    let mut t = Table {
        rows: vec![stats_header(&["device", "cpu", "dir"], keys)],
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
            row.extend(stats_cells(s, keys));
            t.rows.push(row);
            member_rows(&mut t, d, op, keys);
            // A rebuild's writes to its replacement: a row of their own, under the device's
            // last direction (a read-only workload showed none of them).
            let last_op = Op::ALL
                .into_iter()
                .rev()
                .find(|&o| report.has(o) && d.dir(o).ios > 0);
            if last_op == Some(op) {
                rebuild_rows(&mut t, d, report.config.measured_ns, keys);
            }
        }
        if report.devices.len() > 1 {
            merged_rows(&mut t, report, op, keys);
        }
    }
    assert!(
        t.rows.iter().all(|r| r.len() == t.rows[0].len()),
        "every device table row has one cell per column"
    );
    t
}

/// A volume's members: latencies of the commands it sent them in direction `op`.
fn member_rows(t: &mut Table, d: &DeviceReport, op: Op, keys: &[String]) {
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
        row.extend(stats_cells(ms, keys));
        t.rows.push(row);
    }
}

/// A rebuild's writes to its replacement member, one row each.
fn rebuild_rows(t: &mut Table, d: &DeviceReport, measured_ns: u64, keys: &[String]) {
    let Some(v) = &d.volume else { return };
    for m in &v.members {
        let Some((ios, bytes)) = rebuild_writes(d, m.index) else {
            continue;
        };
        let secs = (measured_ns as f64 / 1e9).max(1e-9);
        let mut row = vec![
            format!("  {} rebuild", m.name),
            String::new(),
            "write".into(),
            ios.to_string(),
            format_rate(ios as f64 / secs),
            format!("{:.1}", bytes as f64 / 1e6 / secs),
        ];
        row.extend(std::iter::repeat_n("-".to_string(), keys.len() + 4));
        t.rows.push(row);
    }
}

/// The merged distribution of direction `op`, then each percentile's mean and standard
/// deviation across devices.
fn merged_rows(t: &mut Table, report: &Report, op: Op, keys: &[String]) {
    let mut row = vec!["all (merged)".to_string(), String::new(), op.to_string()];
    row.extend(stats_cells(report.aggregate.dir(op), keys));
    t.rows.push(row);
    let spread = report.aggregate.across_devices.dir(op);
    for (label, pick) in [("mean over devices", 0), ("stdev over devices", 1)] {
        let mut row = vec![label.to_string(), String::new(), op.to_string()];
        row.extend(std::iter::repeat_n(String::new(), 6));
        for k in keys {
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

/// One row per job and direction (runs of several jobs).
fn job_table(report: &Report, keys: &[String]) -> Table {
    let mut jt = Table {
        rows: vec![stats_header(&["job", "dir"], keys)],
        left: 2,
    };
    for j in &report.jobs {
        for op in Op::ALL {
            let s = j.dir(op);
            if s.ios == 0 {
                continue;
            }
            let mut row = vec![j.name.clone(), op.to_string()];
            row.extend(stats_cells(s, keys));
            jt.rows.push(row);
        }
    }
    assert!(jt.rows.iter().all(|r| r.len() == jt.rows[0].len()));
    jt
}

/// Each worker's CPU, devices, CPU time and context switches.
fn worker_table(report: &Report) -> Table {
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
    wt
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
        assert_eq!(format_ns(25_100.0), "25.1µs");
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
        let width = header.chars().count();
        assert!(dev_rows.iter().all(|l| l.chars().count() <= width + 2));
        // Units as everywhere else: µs, not us.
        assert!(
            dev_rows[0].contains("µs") && !text.contains("us "),
            "{text}"
        );
        // The latencies vary: nothing is flagged constant.
        assert!(constant_distributions(&r).is_empty());
    }

    /// An NVMe device's report section as `nines profile` writes it, for report tests.
    pub(crate) fn nvme_report(host_writes: u64, critical_warning: u8) -> NvmeReport {
        use nines_core::nvme::*;
        let smart = |writes: u64, warn: u8| SmartLog {
            critical_warning: warn,
            critical_warnings: critical_warning_names(warn),
            temperature_c_composite: 37,
            available_spare_pct: 100,
            available_spare_pct_threshold: 10,
            endurance_used_pct: 1,
            data_units_read: 10,
            data_units_written: 100 + writes / 125,
            host_read_commands: 1000,
            host_write_commands: 5000 + writes,
            controller_busy_min: 0,
            power_cycles: 3,
            power_on_hours: 10,
            unsafe_shutdowns: 0,
            media_errors: 0,
            error_log_entries: 0,
            temperature_warning_min: 0,
            temperature_critical_min: 0,
        };
        let (before, after) = (smart(0, 0), smart(host_writes, critical_warning));
        NvmeReport {
            device: "/dev/nvme0n1".into(),
            controller: IdentifyController {
                vendor_id: 0x1b36,
                subsystem_vendor_id: 0x1af4,
                serial: "nines0".into(),
                model: "QEMU NVMe Ctrl".into(),
                firmware: "7.2.0".into(),
                controller_id: 0,
                version: Some("1.4.0".into()),
                namespaces_max: 256,
                volatile_write_cache: true,
                apst_supported: false,
                temperature_c_warning: None,
                temperature_c_critical: None,
                capacity_bytes_total: None,
                power_states: vec![PowerStateDescriptor {
                    index: 0,
                    power_uw_max: 25_000_000,
                    operational: true,
                    latency_us_entry: 16,
                    latency_us_exit: 4,
                    power_uw_idle: None,
                    power_uw_active: None,
                }],
            },
            nsid: Some(1),
            namespace: None,
            active_namespaces: Some(vec![1]),
            smart_delta: before.delta(&after),
            smart_before: Some(before),
            smart_after: Some(after),
            notes: vec![],
        }
    }

    #[test]
    fn nvme_devices_show_identify_and_smart_and_others_nothing() {
        let mut r = sample_report();
        assert!(nvme_summary(&r).is_empty() && !render(&r).contains("nvme"));
        r.devices[1].nvme = Some(nvme_report(2500, 0));
        let text = render(&r);
        assert!(
            text.contains(
                "nvme zram1: /dev/nvme0n1: QEMU NVMe Ctrl (firmware 7.2.0, serial nines0), \
                 volatile write cache yes, APST not supported; power states: PS0 25.00 W, entry \
                 16 µs, exit 4 µs\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "nvme zram1: SMART during the run: 2500 host write and 0 host read commands, \
                 10.2 MB written and 0.0 MB read (in 512,000-byte data units), 0 media errors, 0 \
                 new error log entries; after it 37 C, spare 100%, endurance used 1%\n"
            ),
            "{text}"
        );
        assert!(!text.contains("warning: zram1"), "{text}");
        // A critical warning after the run and media errors during it are warnings.
        let mut n = nvme_report(8, 0b100);
        n.smart_delta.as_mut().unwrap().media_errors = 2;
        n.notes.push("after the run: it went away".into());
        r.devices[1].nvme = Some(n);
        let text = render(&r);
        assert!(text.contains(
            "warning: zram1 (QEMU NVMe Ctrl) reports a SMART critical warning after the run: \
             reliability degraded by media or internal errors\n"
        ));
        assert!(text.contains("warning: zram1 counted 2 media and data integrity errors"));
        assert!(text.contains("nvme zram1: after the run: it went away\n"));
        // Without a delta the table says so.
        r.devices[1].nvme.as_mut().unwrap().smart_delta = None;
        assert!(render(&r).contains("nvme zram1: SMART during the run: not known"));
    }

    fn constant_report(kind: RunKind, devices: usize) -> Report {
        let config = RunConfig {
            workload: WorkloadSpec::default(),
            engine: "sim".into(),
            percentiles: DEFAULT_PERCENTILES.to_vec(),
            measured_ns: 1_000_000_000,
            start_unix_ns: None,
            lat_log: None,
            hdr_log: None,
            extra: Default::default(),
        };
        let mut b = ReportBuilder::new(kind, config);
        for i in 0..devices {
            let mut r = DeviceRecorder::new();
            for _ in 0..50_000 {
                r.record(Op::Read, 25_824, 4096);
            }
            b.device(
                DeviceMeta {
                    name: format!("afa#{i}"),
                    ..Default::default()
                },
                &r,
            );
        }
        b.finish()
    }

    #[test]
    fn a_constant_distribution_is_flagged_not_shown_as_a_tail() {
        // The default sim: every percentile 25.8 µs on 64 devices, shown as if it were a tail.
        let r = constant_report(RunKind::Sim, 64);
        let w = constant_distributions(&r);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("constant latency: every read on all 64 targets took 25.8 µs (p50 = max, stdev 0): the model has no variance for this workload"),
            "{w:?}"
        );
        let text = render(&r);
        assert_eq!(text.matches("constant latency").count(), 1, "{text}");
        // A measured run says nothing varied, not that a model did not.
        let r = constant_report(RunKind::Profile, 1);
        let w = constant_distributions(&r);
        assert!(
            w[0].starts_with("constant latency: every read on afa#0 took 25.8 µs")
                && w[0].contains("nothing varied")
                && !w[0].contains("model"),
            "{w:?}"
        );
        // One slow I/O among them is a tail: not flagged.
        let mut r = constant_report(RunKind::Sim, 1);
        r.devices[0].read.lat_ns.max_ns = 900_000;
        assert!(constant_distributions(&r).is_empty());
    }

    #[test]
    fn a_rebuild_has_its_row_and_its_progress() {
        // raid5 --rebuild 1: the JSON had rows_rebuilt 63311 of 290055; the table showed
        // neither the rebuild's writes nor its progress.
        let mut r = sample_report();
        let member = |i: u32| nines_core::report::MemberReport {
            index: i,
            name: format!("m{i}"),
            path: None,
            size_bytes: 1 << 30,
            commands: 71_141,
            errors: 0,
            read: Some(r.devices[0].read.clone()),
            write: None,
            internals: None,
            interrupts: None,
            nvme: None,
        };
        let members = (0..3).map(member).collect();
        r.devices[0].volume = Some(nines_core::report::VolumeReport {
            layout: "raid5".into(),
            options: serde_json::json!({}),
            stats: serde_json::json!({"rebuild": {"member": 1, "rows_total": 290_055,
                "rows_rebuilt": 63_311, "bytes_written": 4_149_149_696u64, "member_reads": 126_622,
                "done_ns": null, "aborted": null}}),
            members,
        });
        let text = render(&r);
        assert!(
            text.lines()
                .any(|l| l.starts_with("  m1 rebuild")
                    && l.split_whitespace().nth(3) == Some("63311")),
            "{text}"
        );
        assert!(
            text.contains("rebuild of m1 on zram0: 63311 of 290055 rows (21.8%), 63311 rebuild writes (4149.1 MB), 126622 reads of the other members; still going when the run ended"),
            "{text}"
        );
        assert!(
            text.starts_with(
                "nines profile: randread 4KiB QD1, engine io_uring, 2 devices and 1 volume (raid5 of 3 devices)"
            ),
            "{text}"
        );
    }

    #[test]
    fn merged_runs_of_different_lengths_say_each() {
        let mut r = sample_report();
        assert_eq!(measured_phrase(&r), "1 s measured");
        let src = |ns: u64| nines_core::report::SourceRun {
            label: "h".into(),
            file: "f".into(),
            host: None,
            kind: RunKind::Profile,
            nines_version: "0".into(),
            start_unix_ns: None,
            measured_ns: ns,
            devices: vec![],
            read: r.devices[0].read.clone(),
            write: r.devices[0].write.clone(),
        };
        r.sources = vec![src(10_000_000_000), src(3_000_000_000), src(3_000_000_000)];
        assert_eq!(
            measured_phrase(&r),
            "10 s, 3 s and 3 s measured (3 runs merged)"
        );
        assert!(
            render(&r)
                .lines()
                .next()
                .unwrap()
                .ends_with("3 devices, 10 s, 3 s and 3 s measured (3 runs merged)"),
            "{}",
            render(&r)
        );
        r.sources.truncate(2);
        r.sources[0].measured_ns = 3_000_000_000;
        assert_eq!(measured_phrase(&r), "3 s measured by each of 2 merged runs");
    }
}
