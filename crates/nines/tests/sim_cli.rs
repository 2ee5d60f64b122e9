//! `nines sim` from the command line: determinism, trace replay, outputs and bad input.

use std::path::Path;
use std::process::Output;

mod common;
use common::run as nines;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn same_command_gives_byte_identical_json() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str| {
        let path = dir.path().join(name);
        let o = nines(&[
            "sim",
            "--quiet",
            "--devices",
            "3",
            "--rw",
            "randrw",
            "--mix",
            "70",
            "--iodepth",
            "4",
            "--runtime",
            "100ms",
            "--device",
            "mqsim-default",
            "--bg-rate",
            "1000",
            "--host-cpus",
            "2",
            "--json",
            path.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        std::fs::read(path).unwrap()
    };
    let a = run("a.json");
    assert_eq!(a, run("b.json"));
    let report = nines_core::report::Report::from_json(std::str::from_utf8(&a).unwrap()).unwrap();
    assert_eq!(report.devices.len(), 3);
    assert_eq!(report.config.engine, "sim");
    assert!(report.devices[0].internals.as_ref().unwrap()["gc_runs"].is_u64());
}

#[test]
fn default_run_prints_the_profile_table_and_fio_json() {
    let dir = tempfile::tempdir().unwrap();
    let fio = dir.path().join("fio.json");
    let o = nines(&[
        "sim",
        "--runtime",
        "200ms",
        "--fio-json",
        fio.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains("afa-m2-2018#0") && table.contains("p99.9999"),
        "{table}"
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(fio).unwrap()).unwrap();
    assert!(v["jobs"].is_array(), "{v}");
}

#[test]
fn replays_a_real_mqsim_trace() {
    let src = common::traces_dir().join("mqsim-tpcc-small.trace");
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("tpcc.trace");
    std::fs::copy(&src, &trace).unwrap();
    let json = dir.path().join("r.json");
    let o = nines(&[
        "sim",
        "--device",
        "mqsim-default",
        "--devices",
        "8",
        "--trace",
        trace.to_str().unwrap(),
        "--trace-format",
        "mqsim",
        "--trace-fit",
        "wrap",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r = nines_core::report::Report::from_json(&std::fs::read_to_string(json).unwrap()).unwrap();
    // The file's own counts (traces/README.md): 4,381 reads and 2,618 writes.
    assert_eq!(r.aggregate.read.ios, 4381);
    assert_eq!(r.aggregate.write.ios, 2618);
    // The report describes the replay, not the default workload: the trace's read share and
    // most common size (counted here from the file: column 4 is 512-byte sectors).
    let t = &r.config.extra["trace"];
    assert_eq!(t["requests"], 6999);
    assert_eq!(
        (t["reads"].as_u64(), t["writes"].as_u64()),
        (Some(4381), Some(2618))
    );
    assert_eq!(t["file"], trace.to_str().unwrap());
    assert_eq!(t["format"], "mqsim");
    let mut counts = std::collections::BTreeMap::new();
    for line in std::fs::read_to_string(src).unwrap().lines() {
        let sectors: u64 = line.split_whitespace().nth(3).unwrap().parse().unwrap();
        *counts.entry(sectors * 512).or_insert(0u64) += 1;
    }
    let (&mode, _) = counts
        .iter()
        .max_by_key(|&(k, n)| (*n, std::cmp::Reverse(*k)))
        .unwrap();
    let w = &r.config.workload;
    assert_eq!(w.rw, nines_core::workload::RwMode::RandRw);
    assert_eq!(w.read_mix_pct, 63); // 4381 / 6999 = 62.6%
    assert_eq!(w.block_size_bytes, mode);
    assert_eq!(w.runtime_ns, None);
    assert_eq!(u64::from(w.iodepth), t["in_flight_max"].as_u64().unwrap());
    // It ran to the trace's end, over every target (the trace has more devices than 8).
    assert_eq!(t["requests_replayed"], 6999);
    assert!(t["runtime_ns"].is_null());
    assert_eq!(
        (t["targets"].as_u64(), t["targets_used"].as_u64()),
        (Some(8), Some(8))
    );
    assert!(!stderr(&o).contains("idle"), "{}", stderr(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    let header = table.lines().next().unwrap();
    assert!(
        header.starts_with(&format!(
            "nines sim: trace tpcc.trace (mqsim, 6999 requests, 63% reads, mostly {}KiB, up to {} in flight simulated)",
            mode / 1024,
            w.iodepth
        )),
        "{header}"
    );
}

#[test]
fn a_trace_beyond_the_scaled_device_offers_full_scale_or_a_fit_policy() {
    let src = common::traces_dir().join("mqsim-tpcc-small.trace");
    let o = nines(&[
        "sim",
        "--quiet",
        "--device",
        "mqsim-default",
        "--trace",
        src.to_str().unwrap(),
        "--precondition",
        "none",
    ]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    for want in [
        "the simulated capacity is scaled (scale 0.",
        "--scale 1",
        "--trace-fit wrap",
        "--trace-fit scale",
        "which holds the whole trace",
        "MiB of model",
    ] {
        assert!(e.contains(want), "{want}: {e}");
    }
    // The cheap fix is offered first.
    assert!(
        e.find("--trace-fit wrap").unwrap() < e.find("--scale 1").unwrap(),
        "{e}"
    );
}

/// A one-device replayer trace in 512-byte sectors, 200 requests 1 ms apart: 4 KiB reads and
/// writes (8 sectors) over the first 8 MiB.
fn sector_trace(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("sectors.trace");
    let mut text = String::new();
    for i in 0..200u64 {
        let sector = (i * 7919 % 2048) * 8;
        text.push_str(&format!("{} 0 {sector} 8 {}\n", i, i % 2));
    }
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn replay_ergonomics_sector_sizes_idle_targets_and_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let trace = sector_trace(dir.path());
    let json = dir.path().join("r.json");
    let run = |extra: &[&str]| {
        let mut a = vec![
            "sim",
            "--devices",
            "4",
            "--precondition",
            "none",
            "--trace",
            trace.to_str().unwrap(),
            "--trace-format",
            "replayer",
            "--json",
            json.to_str().unwrap(),
        ];
        a.extend_from_slice(extra);
        let o = nines(&a);
        assert!(o.status.success(), "{}", stderr(&o));
        let r = nines_core::report::Report::from_json(&std::fs::read_to_string(&json).unwrap())
            .unwrap();
        (
            stderr(&o),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            r,
        )
    };
    // Read as bytes (the default unit), every size is 8 bytes: warned, naming the first line
    // and the fix; one trace device on four targets: the other three stay idle.
    let (e, _, r) = run(&[]);
    assert!(
        e.contains("200 of 200 requests are smaller than 512 bytes")
            && e.contains("line 1: 8 bytes")
            && e.contains("--trace-unit sectors"),
        "{e}"
    );
    assert!(
        e.contains("3 targets stay idle (targets #1 to #3)") && e.contains("--layout raid0"),
        "{e}"
    );
    let t = &r.config.extra["trace"];
    assert_eq!(
        (t["targets"].as_u64(), t["targets_used"].as_u64()),
        (Some(4), Some(1))
    );
    assert_eq!(r.devices[1].read.ios + r.devices[1].write.ios, 0);
    // In sectors: no size warning, 4 KiB requests.
    let (e, _, r) = run(&["--trace-unit", "sectors"]);
    assert!(!e.contains("512 bytes"), "{e}");
    assert_eq!(r.config.workload.block_size_bytes, 4096);
    // Striped over the four devices: nothing idle.
    let (e, _, r) = run(&["--trace-unit", "sectors", "--layout", "raid0"]);
    assert!(!e.contains("idle"), "{e}");
    assert_eq!(r.aggregate.read.ios + r.aggregate.write.ios, 200);
    // --runtime 50ms ends the replay after the requests that arrived in the first 50 ms
    // (arrivals 0..=49 ms, or 50 if the boundary is inclusive), and the report says so.
    let (_, table, r) = run(&["--trace-unit", "sectors", "--runtime", "50ms"]);
    let t = &r.config.extra["trace"];
    let replayed = t["requests_replayed"].as_u64().unwrap();
    assert!((50..=51).contains(&replayed), "{replayed}");
    assert_eq!(r.aggregate.read.ios + r.aggregate.write.ios, replayed);
    assert_eq!(t["requests"], 200);
    assert_eq!(r.config.workload.runtime_ns, Some(50_000_000));
    assert!(
        table.contains(&format!(
            "200 requests, {replayed} replayed before --runtime ended"
        )),
        "{table}"
    );
}

#[test]
fn a_malformed_trace_line_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("bad.trace");
    std::fs::write(&trace, "1000 0 8 8 1\n2000 0 x 8 1\n").unwrap();
    let o = nines(&[
        "sim",
        "--trace",
        trace.to_str().unwrap(),
        "--trace-format",
        "mqsim",
    ]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("line 2"), "{e}");
}

#[test]
fn bad_devices_get_one_line_naming_the_rule() {
    let o = nines(&["sim", "--device", "nope"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("afa-m2-2018") && e.contains("z-ssd") && e.contains("ttflash-fast17"),
        "{e}"
    );
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");

    let dir = tempfile::tempdir().unwrap();
    let text = include_str!("../../nines-flash/presets/mqsim-default.toml");
    for (from, to, want) in [
        ("channels = 8", "channels = 0", "geometry.channels"),
        (
            "over_provisioning = 0.07",
            "over_provisioning = 1.5",
            "ftl.over_provisioning",
        ),
        (
            "page_size_bytes = 8192",
            "page_size_bytes = 1000",
            "geometry.page_size_bytes",
        ),
        (
            "name = ",
            "capacity_bytes = 900_000_000_000\nname = ",
            "capacity_bytes",
        ),
    ] {
        let path = dir.path().join("dev.toml");
        std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
        let o = nines(&["sim", "--device", path.to_str().unwrap()]);
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(e.contains(want), "{want}: {e}");
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    }
    let o = nines(&["sim", "--devices", "1001"]);
    assert!(
        !o.status.success() && stderr(&o).contains("1 to 1000"),
        "{}",
        stderr(&o)
    );
}

/// A device TOML with periodic housekeeping stalls: every 200 ms the controller stalls 5 ms.
fn housekeeping_device(dir: &Path) -> std::path::PathBuf {
    let text = include_str!("../../nines-flash/presets/afa-m2-2018.toml")
        .replacen("period_ns = 0", "period_ns = 200_000_000", 1)
        .replacen("duration_ns = 0", "duration_ns = 5_000_000", 1)
        .replacen("name = \"afa-m2-2018\"", "name = \"hk-ssd\"", 1);
    assert!(text.contains("period_ns = 200_000_000") && text.contains("hk-ssd"));
    let path = dir.join("hk.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn lat_log_records_every_io_and_the_report_finds_the_housekeeping_period() {
    use nines_core::latlog::LatLogReader;
    use nines_report::spikes::{SpikeDetector, SpikeParams};

    let dir = tempfile::tempdir().unwrap();
    let dev = housekeeping_device(dir.path());
    let run = |lat: &Path, json: &Path| -> String {
        let o = nines(&[
            "sim",
            "--quiet",
            "--device",
            dev.to_str().unwrap(),
            "--devices",
            "2",
            "--runtime",
            "2s",
            "--lat-log",
            lat.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        stderr(&o)
    };
    let (lat, json) = (dir.path().join("lat.bin"), dir.path().join("run.json"));
    let e = run(&lat, &json);
    // The summary line names the device by its `name`, not by the TOML file.
    assert!(e.contains("nines sim: 2 x hk-ssd at scale"), "{e}");
    let (lat2, json2) = (dir.path().join("lat2.bin"), dir.path().join("run2.json"));
    run(&lat2, &json2);
    let bytes = std::fs::read(&lat).unwrap();
    assert_eq!(
        bytes,
        std::fs::read(&lat2).unwrap(),
        "same inputs, same log"
    );

    let report =
        nines_core::report::Report::from_json(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report.config.lat_log.as_deref(), lat.to_str());
    let ios = report.aggregate.read.ios + report.aggregate.write.ios;
    assert!(ios > 100_000, "{ios}");

    // Decode: the header names the report's devices, one record per measured I/O, each
    // device's count matches its own, completions in order within the 2 s run.
    let mut reader = LatLogReader::new(&bytes[..]).unwrap();
    let names: Vec<String> = report.devices.iter().map(|d| d.name.clone()).collect();
    assert_eq!(reader.header().devices, names);
    assert_eq!(reader.header().start_unix_ns, 0);
    let mut per_device = vec![Vec::new(); 2];
    let mut records = Vec::new();
    let mut last_ns = 0;
    for r in &mut reader {
        let r = r.unwrap();
        assert!(r.completion_ns >= last_ns && r.completion_ns <= 2_100_000_000);
        last_ns = r.completion_ns;
        assert!(r.latency_ns > 0 && r.offset_bytes % 4096 == 0);
        per_device[r.device as usize].push(r.latency_ns);
        records.push(r);
    }
    assert_eq!(records.len() as u64, ios);
    for (d, lats) in per_device.iter().enumerate() {
        assert_eq!(lats.len() as u64, report.devices[d].read.ios);
    }

    // The spike analysis of the report finds the 200 ms rhythm on both devices.
    let medians: Vec<u64> = per_device
        .iter_mut()
        .map(|l| {
            l.sort_unstable();
            l[l.len() / 2]
        })
        .collect();
    let mut det = SpikeDetector::per_device(SpikeParams::default(), &medians);
    for r in &records {
        det.push(r.device, r.completion_ns, r.latency_ns);
    }
    let a = det.finish();
    assert!(!a.periodic.is_empty(), "no periodic spike found");
    let p = a.periodic[0].period_ns as f64;
    assert!((p - 200e6).abs() <= 0.05 * 200e6, "period {p} ns");

    // `nines report` reads the log the run recorded and says so; `nines log` decodes it all.
    let html = dir.path().join("r.html");
    let o = nines(&[
        "report",
        json.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("Periodic latency spikes (per-I/O log): every 200 ms"),
        "no periodic spike in the report"
    );
    let o = nines(&["log", lat.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        csv.lines().count() as u64,
        ios + 1,
        "header + one line per I/O"
    );
}

#[test]
fn hdr_log_holds_every_io_in_intervals_and_shows_the_housekeeping_period() {
    use nines_report::intervals::parse_interval_log;
    use nines_report::run::spikes_from_intervals;
    use nines_report::spikes::SpikeParams;

    let dir = tempfile::tempdir().unwrap();
    let dev = housekeeping_device(dir.path());
    let run = |hdr: &Path, json: &Path| {
        let o = nines(&[
            "sim",
            "--quiet",
            "--device",
            dev.to_str().unwrap(),
            "--devices",
            "2",
            "--runtime",
            "2s",
            "--hdr-log",
            hdr.to_str().unwrap(),
            "--hdr-interval",
            "10ms",
            "--json",
            json.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    };
    let (hdr, json) = (dir.path().join("h.hlog"), dir.path().join("run.json"));
    run(&hdr, &json);
    let hdr2 = dir.path().join("h2.hlog");
    run(&hdr2, &dir.path().join("run2.json"));
    let bytes = std::fs::read(&hdr).unwrap();
    assert_eq!(
        bytes,
        std::fs::read(&hdr2).unwrap(),
        "same inputs, same log"
    );

    let report =
        nines_core::report::Report::from_json(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report.config.hdr_log.as_deref(), hdr.to_str());
    let series = parse_interval_log(&bytes).unwrap();
    // Reads only (randread): one series per device, tagged with the report's device names,
    // 10 ms intervals from 0 to 2 s, holding every measured I/O.
    let names: Vec<String> = report.devices.iter().map(|d| d.name.clone()).collect();
    assert_eq!(series.len(), 2);
    for (s, d) in series.iter().zip(&report.devices) {
        assert_eq!(s.device, d.name);
        assert_eq!(s.op, nines_core::op::Op::Read);
        assert_eq!(s.points.iter().map(|p| p.ios).sum::<u64>(), d.read.ios);
        assert!((199..=201).contains(&s.points.len()), "{}", s.points.len());
        assert!(
            s.points
                .iter()
                .all(|p| (p.duration_s - 0.01).abs() < 1e-6 || p.start_s > 1.98)
        );
    }
    let a = spikes_from_intervals(&series, &names, SpikeParams::default()).unwrap();
    assert!(!a.periodic.is_empty(), "no periodic spike found");
    let p = a.periodic[0].period_ns as f64;
    assert!((p - 200e6).abs() <= 0.05 * 200e6, "period {p} ns");
}

/// Workload options would be silently ignored by a replay, so giving them with --trace is refused.
#[test]
fn workload_options_cannot_be_combined_with_a_trace() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nines"))
        .args([
            "sim",
            "--trace",
            "whatever.trace",
            "--trace-format",
            "mqsim",
            "--bs",
            "64k",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--bs") && err.contains("--trace"), "{err}");
}

/// On a terminal (a pseudo-terminal from `script`), the simulation shows a live line with its
/// total: how far it is in simulated time, the time left and the I/Os so far; it is erased at
/// the end. Without a terminal nothing of it is printed.
#[test]
fn progress_on_a_terminal_shows_the_total() {
    let bin = env!("CARGO_BIN_EXE_nines");
    let script = std::process::Command::new("script")
        .args([
            "-qec",
            // Long enough in wall time (about a million simulated I/Os, the first half-second
            // of it in the ramp) that the line drawn at once falls inside the ramp however the
            // threads are scheduled; a 0.2 s run could end before the first line was drawn.
            &format!("{bin} sim --precondition none --devices 8 --runtime 2s --ramp 1500ms"),
            "/dev/null",
        ])
        .output()
        .expect("script (util-linux) runs the command on a pseudo-terminal");
    assert!(script.status.success());
    let out = String::from_utf8_lossy(&script.stdout);
    assert!(
        out.contains("\r\x1b[2Knines sim: ") && out.contains(" of 3.5 s simulated ("),
        "{out:?}"
    );
    assert!(out.contains("RAMP (not measured"), "{out:?}");
    assert!(out.contains(" I/Os"), "{out:?}");
    let o = nines(&["sim", "--precondition", "none", "--runtime", "100ms"]);
    assert!(o.status.success());
    assert!(!stderr(&o).contains('\r'), "{}", stderr(&o));
}

/// raid5 D/ND on TLC members (p4600: a victim of 100+ valid pages takes over 100 ms, longer
/// than the 50 ms GC budget of a 100 ms turn): garbage is collected in the owners' turns
/// (members move victims page by page within the budget), none is forced in a deterministic
/// window, and the read-wait breakdown shows no member read waiting behind any GC. Before
/// victims could be split, no GC-now victim was ever started (`gc_now_victims` 0) and all GC
/// was forced under reads.
#[test]
fn dnd_collects_garbage_in_the_owners_turns_and_no_read_waits_behind_gc() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dnd.json");
    let o = nines(&[
        "sim",
        "--quiet",
        "--device",
        "p4600",
        "--devices",
        "3",
        "--layout",
        "raid5",
        "--chunk",
        "64k",
        "--policy",
        "dnd",
        "--window",
        "100ms",
        "--runtime",
        "4s",
        "--job",
        "reads:rw=randread,bs=4k,iodepth=2",
        "--job",
        "w:rw=randwrite,bs=512k,rate-iops=480",
        "--json",
        path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let vol = &r["devices"][0]["volume"];
    let members = vol["members"].as_array().unwrap();
    assert_eq!(members.len(), 3);
    for (k, m) in members.iter().enumerate() {
        let i = &m["internals"];
        assert!(i["gc_now_victims"].as_u64().unwrap() > 0, "member {k}: {i}");
        assert_eq!(i["gc_now_victims"], i["gc_runs"], "member {k}: {i}");
        assert_eq!(i["window_violations"], 0, "member {k}: {i}");
        for cause in ["gc_forced", "gc_requested", "gc_idle"] {
            assert_eq!(
                i["read_waits"][cause]["reads"], 0,
                "member {k} {cause}: {i}"
            );
        }
    }
    // The device row sums the members' breakdown.
    let sum = &r["devices"][0]["internals"]["read_waits"]["reads"]["reads"];
    let each: u64 = members
        .iter()
        .map(|m| {
            m["internals"]["read_waits"]["reads"]["reads"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert_eq!(sum.as_u64().unwrap(), each);
    assert_eq!(vol["stats"]["policy"], "dnd");
}

/// `--calibrate` on a real device: a zram device this test creates is profiled at QD1, the
/// preset is fitted to the profile, and the written description, simulated at QD1, reproduces
/// the profile within 10% at p50..p99.99 (issue 17's goal).
#[test]
fn calibrates_a_zram_profile_to_within_ten_percent() {
    let z = common::Zram::new("64M");
    let zram = z.path();
    let dir = common::disk_dir();
    let s = common::s;
    // Written data first: zram reads of never-written pages cost nothing.
    common::ok(
        nines(&[
            "profile",
            "--quiet",
            "--rw",
            "write",
            "--bs",
            "1m",
            "--iodepth",
            "4",
            "--ios",
            "64",
            "--allow-writes",
            &zram,
        ]),
        "writing zram",
    );
    let qd1 = dir.path().join("qd1.json");
    common::ok(
        nines(&[
            "profile",
            "--quiet",
            "--rw",
            "randread",
            "--bs",
            "4k",
            "--iodepth",
            "1",
            "--runtime",
            "2s",
            "--json",
            s(&qd1),
            &zram,
        ]),
        "profiling zram",
    );
    let toml = dir.path().join("zram.toml");
    // The default host model alone costs more than a zram read: refused with what to do.
    let refused = nines(&["sim", "--calibrate", s(&qd1), "--calibrate-out", s(&toml)]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("--completion none"),
        "{}",
        stderr(&refused)
    );
    assert!(!toml.exists());
    let out = common::ok(
        nines(&[
            "sim",
            "--calibrate",
            s(&qd1),
            "--completion",
            "none",
            "--calibrate-out",
            s(&toml),
        ]),
        "calibrating",
    );
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        table.contains("p99.99") && table.contains("qd1.json"),
        "{table}"
    );
    let written = std::fs::read_to_string(&toml).unwrap();
    assert!(written.contains("[firmware_jitter]") && written.starts_with("# calibrated"));
    // It says which host model it holds for, and names its own capacity and description.
    assert!(
        written.contains("# fitted with --completion none: simulate it with --completion none"),
        "{written}"
    );
    assert!(written.contains("capacity_bytes = 67108864"), "{written}");
    assert!(!written.contains("960 GB"), "{written}");
    // The geometry is scaled down to the capacity (issue 44: a 64 MiB device on the 960 GB
    // geometry was 99.99% spare), as far as it goes, and what is left over is said.
    let fitted = nines_flash::DeviceConfig::load(s(&toml)).unwrap();
    let base = nines_flash::DeviceConfig::preset("afa-m2-2018").unwrap();
    assert!(
        fitted.geometry.blocks_per_plane < base.geometry.blocks_per_plane / 10,
        "{written}"
    );
    assert!(
        written.contains("the geometry scaled to")
            && written.contains("holds more than the device"),
        "{written}"
    );
    // The description carries its host model, so a run that names none simulates it as fitted
    // (issue 31 item 9), and says so.
    assert!(
        written.contains("fitted_completion = \"none\""),
        "{written}"
    );
    let sim = dir.path().join("sim.json");
    let simulated_run = common::ok(
        nines(&[
            "sim",
            "--device",
            s(&toml),
            "--rw",
            "randread",
            "--bs",
            "4k",
            "--iodepth",
            "1",
            "--ios",
            "1000000",
            "--json",
            s(&sim),
        ]),
        "simulating the calibrated device",
    );
    assert!(
        stderr(&simulated_run).contains("was fitted with --completion none: simulating with it"),
        "{}",
        stderr(&simulated_run)
    );
    let read = |p: &Path| -> serde_json::Value {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        v["aggregate"]["read"]["lat_ns"]["percentiles"].clone()
    };
    let (real, simulated) = (read(&qd1), read(&sim));
    for p in ["50", "90", "99", "99.9", "99.99"] {
        let (r, m) = (real[p].as_f64().unwrap(), simulated[p].as_f64().unwrap());
        assert!(
            (m / r - 1.0).abs() <= 0.10,
            "p{p}: zram {r} ns, calibrated simulation {m} ns\n{table}"
        );
    }
}

/// A raid5 D/ND write-back buffer holds one entry per row written, each with room for a whole
/// row: scattered 4 KiB writes run out of entries while most of the bytes are unused. The report
/// counts entries beside bytes and says what to change; with enough entries it says nothing.
#[test]
fn dnd_buffer_out_of_entries_is_reported_with_what_to_change() {
    let dir = tempfile::tempdir().unwrap();
    let run = |write_back: &str| {
        let path = dir.path().join(format!("wb-{write_back}.json"));
        let o = nines(&[
            "sim",
            "--quiet",
            "--devices",
            "4",
            "--layout",
            "raid5",
            "--policy",
            "dnd",
            "--write-back",
            write_back,
            "--rw",
            "randrw",
            "--mix",
            "70",
            "--iodepth",
            "16",
            "--runtime",
            "300ms",
            "--json",
            path.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        (
            r["devices"][0]["volume"]["stats"]["dnd"].clone(),
            r["warnings"].clone(),
        )
    };
    let (st, warnings) = run("64m");
    let entries = st["entries"].as_u64().unwrap();
    assert_eq!(st["entries_used_max"].as_u64().unwrap(), entries, "{st}");
    assert!(st["buffer_waits"].as_u64().unwrap() > 0, "{st}");
    assert!(
        st["occupancy_bytes_max"].as_u64().unwrap() * 2 < st["write_back_bytes"].as_u64().unwrap(),
        "{st}"
    );
    let w: Vec<&str> = warnings
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .filter(|w| w.contains("write-back buffer"))
        .collect();
    assert_eq!(w.len(), 1, "{warnings}");
    assert!(w[0].contains(&format!("all {entries} entries")), "{}", w[0]);
    assert!(w[0].contains("--write-back"), "{}", w[0]);

    // Room for every row the run writes (4 GiB: 16,384 entries for ~11,000 buffered writes;
    // no entry is freed before every member had its turn, 400 ms, longer than the run).
    let (st, warnings) = run("4g");
    assert!(
        st["entries_used_max"].as_u64().unwrap() < st["entries"].as_u64().unwrap(),
        "{st}"
    );
    assert!(
        !warnings.to_string().contains("write-back buffer"),
        "{warnings}"
    );
}

/// `--trace-start asleep` with FUA and flush lines in a blkparse trace: the first request pays
/// the deepest power state's exit, the JSON says how the replay started and what the trace held;
/// a device without power states is refused in one line and writes nothing.
#[test]
fn a_blkparse_replay_can_start_asleep_and_counts_fua_and_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("nvme.blkparse");
    std::fs::write(
        &trace,
        "259,0 0 1 0.000000000 10 D WFS 0 + 8 [app]\n\
         259,0 0 2 0.001000000 10 D FN [kworker]\n\
         259,0 0 3 0.002000000 10 D R 64 + 8 [app]\n",
    )
    .unwrap();
    // The preset's clean part (its jitter and page types would change the write's time between
    // the two runs, which differ by the exit alone), with one power state.
    let clean = include_str!("../../nines-flash/presets/afa-m2-2018.toml")
        .split("# --- variance sources")
        .next()
        .unwrap();
    let text = clean.replacen("name = \"afa-m2-2018\"", "name = \"apst-ssd\"", 1)
        + "\n[[power.states]]\nidle_ns = 10_000_000\nexit_ns = 8_000_000\n";
    let device = dir.path().join("apst.toml");
    std::fs::write(&device, text).unwrap();
    let run = |start: &str, device: &str, json: &Path| {
        nines(&[
            "sim",
            "--device",
            device,
            "--trace",
            trace.to_str().unwrap(),
            "--trace-format",
            "blkparse",
            "--trace-start",
            start,
            "--precondition",
            "none",
            "--quiet",
            "--json",
            json.to_str().unwrap(),
        ])
    };
    let report = |start: &str| {
        let json = dir.path().join(format!("{start}.json"));
        let o = run(start, device.to_str().unwrap(), &json);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        v
    };
    let (awake, asleep) = (report("awake"), report("asleep"));
    let t = &asleep["config"]["extra"]["trace"];
    assert_eq!(t["start"], "asleep", "{t}");
    assert_eq!(awake["config"]["extra"]["trace"]["start"], "awake");
    assert_eq!(
        (&t["reads"], &t["writes"], &t["fua_writes"], &t["flushes"]),
        (&1.into(), &1.into(), &1.into(), &1.into()),
        "{t}"
    );
    let max = |v: &serde_json::Value| {
        v["devices"][0]["write"]["lat_ns"]["max_ns"]
            .as_u64()
            .unwrap()
    };
    // The FUA write is the first request: asleep, it pays the 8 ms exit on top of what it costs
    // awake.
    assert_eq!(max(&asleep), max(&awake) + 8_000_000);
    let internals = &asleep["devices"][0]["internals"];
    assert_eq!(
        (&internals["fua_writes"], &internals["flushes"]),
        (&1.into(), &1.into())
    );

    let json = dir.path().join("refused.json");
    // A null device has no power states (a preset may gain some: not used here).
    let o = run("asleep", "null:1g", &json);
    let e = stderr(&o);
    assert!(!o.status.success());
    assert!(
        e.contains("--trace-start asleep") && e.contains("power states"),
        "{e}"
    );
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(!json.exists());
}

/// `--calibrate` refuses in one line what it cannot fit, exits non-zero and writes nothing: a
/// replay, a mix of reads and writes, a run too short for p99.99.
#[test]
fn calibrate_refuses_replays_mixes_and_short_runs_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("w.trace");
    // A write-only mqsim trace of 12,000 requests, 100 us apart.
    let text: String = (0..12_000u64)
        .map(|i| format!("{} 0 {} 8 0\n", i * 100_000, (i % 1000) * 8))
        .collect();
    std::fs::write(&trace, text).unwrap();
    let sim_json = |name: &str, extra: &[&str]| {
        let json = dir.path().join(name);
        let mut a = vec!["sim", "--quiet", "--json", json.to_str().unwrap()];
        a.extend_from_slice(extra);
        let o = nines(&a);
        assert!(o.status.success(), "{}", stderr(&o));
        json
    };
    let replay = sim_json("replay.json", &["--trace", trace.to_str().unwrap()]);
    let mix = sim_json("mix.json", &["--rw", "randrw", "--ios", "20000"]);
    let short = sim_json("short.json", &["--ios", "500"]);
    let toml = dir.path().join("fit.toml");
    for (json, want) in [
        (&replay, "it is a replay of "),
        (&mix, "it mixes reads and writes"),
        (&short, "it has 500 reads, too few to fit"),
    ] {
        let o = nines(&[
            "sim",
            "--calibrate",
            json.to_str().unwrap(),
            "--completion",
            "none",
            "--calibrate-out",
            toml.to_str().unwrap(),
        ]);
        let e = stderr(&o);
        assert!(!o.status.success(), "{e}");
        assert!(
            e.starts_with("nines: --calibrate: ") && e.contains(want),
            "{e}"
        );
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        assert!(!toml.exists());
    }
}

/// `--fast-fail` with `--policy dnd` works together (issue 28): reads to the turn's owner are
/// fast-fail reads, served when it is not busy and rebuilt when it is, so some are rebuilt and
/// far fewer than D/ND alone rebuilds up front (every read of the owner).
#[test]
fn dnd_with_fast_fail_rebuilds_only_the_busy_owners_reads() {
    let dir = tempfile::tempdir().unwrap();
    let run = |fast_fail: &[&str]| {
        let path = dir.path().join("dnd-ff.json");
        let mut a = vec![
            "sim",
            "--quiet",
            "--device",
            "p4600",
            "--devices",
            "3",
            "--layout",
            "raid5",
            "--chunk",
            "64k",
            "--policy",
            "dnd",
            "--window",
            "100ms",
            "--runtime",
            "1s",
            "--job",
            "reads:rw=randread,bs=4k,iodepth=2",
            "--job",
            "w:rw=randwrite,bs=512k,rate-iops=480",
            "--json",
            path.to_str().unwrap(),
        ];
        a.extend_from_slice(fast_fail);
        let o = nines(&a);
        assert!(o.status.success(), "{}", stderr(&o));
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let st = r["devices"][0]["volume"]["stats"].clone();
        (
            st["fast_fail_rebuilt"].as_u64().unwrap(),
            st["rebuilt_pieces"].as_u64().unwrap(),
        )
    };
    let (ff_rebuilt, ff_pieces) = run(&["--fast-fail", "100us"]);
    let (plain_ff, plain_pieces) = run(&[]);
    assert_eq!(plain_ff, 0);
    assert!(ff_rebuilt > 0, "{ff_rebuilt}");
    // Every rebuild is a fast-fail one (no member failed), and fewer than D/ND alone does.
    assert_eq!(ff_pieces, ff_rebuilt);
    assert!(ff_pieces < plain_pieces, "{ff_pieces} vs {plain_pieces}");
}

/// README's rebuild line (`nines sim --layout raid5 --devices 3 --rebuild 1 --rw randread`)
/// finishes within 2 GiB of address space and a bound on time: an unthrottled rebuild waiting
/// for a row a read held fired its timer again and again at one instant, and the event queue
/// grew to 23 GB (issue 44).
#[test]
fn the_readme_rebuild_line_finishes_in_bounded_memory_and_time() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("rb.json");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_nines"));
    cmd.args([
        "sim",
        "--layout",
        "raid5",
        "--devices",
        "3",
        "--rebuild",
        "1",
        "--rw",
        "randread",
        "--runtime",
        "3s",
        "--quiet",
        "--json",
    ])
    .arg(&json);
    // SAFETY: setrlimit only, in the child before exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 2 << 30,
                rlim_max: 2 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = common::wait_bounded(
        &mut child,
        std::time::Duration::from_secs(300),
        "the README rebuild line",
    );
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{status}: {err}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(
        v.to_string().contains("rebuild"),
        "the report says nothing of the rebuild"
    );
}

/// `--calibrate --power-states-from`: an NVMe device's power states (here from a report that
/// carries its identify data, as `nines profile` writes it on NVMe) become the fitted
/// description's `[[power.states]]` as Linux's APST programs them, said in the table and the
/// file; what has no NVMe power states is refused in one line and nothing is written.
#[test]
fn calibrate_takes_power_states_from_an_nvme_report() {
    let dir = tempfile::tempdir().unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let qd1 = dir.path().join("qd1.json");
    common::ok(
        nines(&[
            "sim",
            "--quiet",
            "--completion",
            "none",
            "--ios",
            "20000",
            "--json",
            &s(&qd1),
        ]),
        "a run to fit",
    );
    // The same run as if profiled on an NVMe drive with a client's table: ps3 210/1200 µs,
    // ps4 2000/8000 µs, APST supported.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&qd1).unwrap()).unwrap();
    let ps = |i: u32, op: bool, en: u32, ex: u32| {
        serde_json::json!({"index": i, "power_uw_max": 5000, "operational": op,
            "latency_us_entry": en, "latency_us_exit": ex})
    };
    v["devices"][0]["nvme"] = serde_json::json!({
        "device": "/dev/nvme0n1",
        "controller": {
            "vendor_id": 5197, "subsystem_vendor_id": 5197, "serial": "S1",
            "model": "Samsung SSD 970 EVO Plus 1TB", "firmware": "2B2QEXM7", "controller_id": 4,
            "namespaces_max": 1, "volatile_write_cache": true, "apst_supported": true,
            "power_states": [ps(0, true, 0, 0), ps(3, false, 210, 1200), ps(4, false, 2000, 8000)]
        }
    });
    let nvme = dir.path().join("nvme.json");
    std::fs::write(&nvme, serde_json::to_string(&v).unwrap()).unwrap();
    let toml = dir.path().join("fit.toml");
    let calibrate = |from: &str| {
        nines(&[
            "sim",
            "--calibrate",
            &s(&qd1),
            "--completion",
            "none",
            "--calibrate-ios",
            "20000",
            "--power-states-from",
            from,
            "--calibrate-out",
            &s(&toml),
        ])
    };
    let out = common::ok(calibrate(&s(&nvme)), "calibrating with power states");
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        table.starts_with(&format!(
            "power states from /dev/nvme0n1 as recorded in {}: Samsung SSD 970 EVO Plus 1TB",
            nvme.display()
        )),
        "{table}"
    );
    assert!(table.contains("PS4 (non-operational"), "{table}");
    let written = std::fs::read_to_string(&toml).unwrap();
    assert!(
        written.starts_with("# power states from /dev/nvme0n1"),
        "{written}"
    );
    let fitted = nines_flash::DeviceConfig::load(&s(&toml)).unwrap();
    assert_eq!(
        fitted.power.states,
        [nines_flash::config::PowerState {
            idle_ns: 102_000_000,
            exit_ns: 8_000_000,
            entry_ns: 2_000_000,
        }],
        "{written}"
    );
    // It loads as a device.
    common::ok(
        nines(&[
            "sim",
            "--quiet",
            "--device",
            &s(&toml),
            "--ios",
            "2000",
            "--completion",
            "none",
        ]),
        "simulating the fitted description",
    );
    std::fs::remove_file(&toml).unwrap();
    for (from, want) in [
        (s(&qd1), "the report has no NVMe device"),
        (
            "/dev/null".to_string(),
            "a character device that is not NVMe",
        ),
        (s(dir.path()), "is a directory, not an NVMe device"),
        (s(&dir.path().join("missing")), "cannot read it"),
    ] {
        let o = calibrate(&from);
        let e = stderr(&o);
        assert!(!o.status.success(), "{from}: {e}");
        assert!(
            e.starts_with("nines: --power-states-from ") && e.contains(want),
            "{from}: {e}"
        );
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        assert!(!toml.exists());
    }
    // Only with --calibrate.
    let o = nines(&["sim", "--power-states-from", &s(&nvme)]);
    assert!(!o.status.success());
}

/// fio's thinktime_blocks in a `--job`: bursts of 8 writes at QD4, each followed by 10 ms once
/// they completed, write twice what four slots resting 10 ms each do (a null device: the
/// bursts take microseconds, so 100 of them start within the second).
#[test]
fn thinktime_blocks_writes_bursts_then_rests() {
    let dir = tempfile::tempdir().unwrap();
    let writes = |extra: &str| {
        let path = dir.path().join("t.json");
        let job = format!("w:rw=randwrite,bs=4k,iodepth=4,thinktime=10ms{extra}");
        let o = nines(&[
            "sim",
            "--quiet",
            "--device",
            "null:1g",
            "--runtime",
            "1s",
            "--job",
            &job,
            "--json",
            path.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let r = nines_core::report::Report::from_json(&std::fs::read_to_string(&path).unwrap())
            .unwrap();
        (r.jobs[0].write.ios, r.jobs[0].workload.thinktime_blocks)
    };
    assert_eq!(writes(""), (400, 0), "each slot rests on its own");
    assert_eq!(writes(",thinktime-blocks=8"), (800, 8), "100 bursts of 8");
    let o = nines(&["sim", "--job", "w:thinktime=1ms,thinktime-blocks=0"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("thinktime-blocks"), "{}", stderr(&o));
}

/// `--apst`: the host's policy programs client-nvme's power-state descriptors. With 150 ms of
/// think time between reads, today's kernels (ps4 after 100 ms idle and 2 ms entry) make every
/// read after the first pay ps4's 8 ms exit; the pre-2021 rule enters ps3 after 70.5 ms, so
/// they pay its 1.2 ms; off, none. The report says which policy and states applied.
#[test]
fn apst_policy_decides_which_power_state_an_idle_gap_reaches() {
    let dir = tempfile::tempdir().unwrap();
    let run = |apst: &str| {
        let path = dir.path().join("apst.json");
        let o = nines(&[
            "sim",
            "--quiet",
            "--device",
            "client-nvme",
            "--apst",
            apst,
            "--ios",
            "10",
            "--job",
            "r:rw=randread,thinktime=150ms",
            "--json",
            path.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let d = &v["devices"][0];
        (
            d["internals"]["power_exits"].as_u64().unwrap(),
            d["read"]["lat_ns"]["max_ns"].as_u64().unwrap()
                - d["read"]["lat_ns"]["min_ns"].as_u64().unwrap(),
            v["config"]["extra"]["host_model"]["apst"]["states"].clone(),
        )
    };
    let (exits, spread, states) = run("linux");
    assert_eq!(exits, 9);
    assert!((8_000_000..8_100_000).contains(&spread), "{spread}");
    assert_eq!(states[0]["idle_ns"], 102_000_000, "{states}");
    let (exits, spread, states) = run("legacy");
    assert_eq!((exits, states.as_array().unwrap().len()), (9, 2));
    assert!((1_200_000..1_300_000).contains(&spread), "{spread}");
    assert_eq!(run("off").0, 0);
    // Kernel parameters by name: a primary timeout longer than the gaps, no state reached.
    assert_eq!(run("apst_primary_timeout_ms=200").0, 0);
    for bad in ["bogus", "apst_primary_timeout_ms=x", "nosuch_ms=1"] {
        let o = nines(&["sim", "--apst", bad, "--ios", "1"]);
        assert!(!o.status.success());
        let e = stderr(&o);
        assert!(
            e.contains("--apst") && e.trim_end().lines().count() == 1,
            "{e}"
        );
    }
    // A report that records no policy is refused in one line.
    let report = dir.path().join("apst.json");
    let o = nines(&["sim", "--apst", report.to_str().unwrap(), "--ios", "1"]);
    assert!(
        stderr(&o).contains("records no APST policy"),
        "{}",
        stderr(&o)
    );
}
