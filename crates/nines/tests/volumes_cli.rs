//! Volumes and the run engine from the command line: the same spec through the real driver (null
//! engine) and the simulator (zero-latency devices) issues the same requests; raid0 over real
//! zram devices stores and returns real data; several jobs in both drivers; trace replay on real
//! targets in every trace format.

use std::collections::BTreeMap;
use std::path::Path;

use nines_core::latlog::LatLogReader;
use nines_core::op::Op;
use nines_core::report::Report;

mod common;
use common::{Zram, disk_dir, make_file, ok, run as nines, s};

fn report(path: &Path) -> Report {
    Report::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Per target: the (op, offset) of every logged I/O in log order.
fn streams(lat: &Path) -> BTreeMap<u16, Vec<(Op, u64)>> {
    let mut m: BTreeMap<u16, Vec<(Op, u64)>> = BTreeMap::new();
    for r in LatLogReader::new(std::fs::File::open(lat).unwrap()).unwrap() {
        let r = r.unwrap();
        m.entry(r.device).or_default().push((r.op, r.offset_bytes));
    }
    m
}

#[test]
fn real_null_engine_and_simulated_null_devices_issue_the_same_requests() {
    let dir = disk_dir();
    let files: Vec<_> = (0..3)
        .map(|i| make_file(dir.path(), &format!("f{i}"), 8 << 20))
        .collect();
    for layout in [
        &["--layout", "independent"][..],
        &["--layout", "raid0", "--stripe", "64k"],
    ] {
        let workload = [
            "--rw",
            "randrw",
            "--mix",
            "60",
            "--bs",
            "16k",
            "--iodepth",
            "4",
            "--ios",
            "3000",
            "--ramp",
            "0s",
            "--seed",
            "7",
        ];
        let (real_lat, real_json) = (dir.path().join("real.lat"), dir.path().join("real.json"));
        let mut args = vec![
            "profile",
            "--quiet",
            "--engine",
            "null",
            "--lat-log",
            s(&real_lat),
        ];
        args.extend(["--json", s(&real_json)]);
        args.extend(workload);
        args.extend(layout);
        args.extend(files.iter().map(|f| s(f)));
        ok(nines(&args), "profile --engine null");
        let (sim_lat, sim_json) = (dir.path().join("sim.lat"), dir.path().join("sim.json"));
        let mut args = vec![
            "sim",
            "--quiet",
            "--device",
            "null:8m",
            "--devices",
            "3",
            "--completion",
            "none",
        ];
        args.extend(["--lat-log", s(&sim_lat), "--json", s(&sim_json)]);
        args.extend(workload);
        args.extend(layout);
        ok(nines(&args), "sim --device null");

        let (real, sim) = (streams(&real_lat), streams(&sim_lat));
        assert_eq!(real.len(), if layout.len() == 2 { 3 } else { 1 });
        assert_eq!(
            real, sim,
            "{layout:?}: the same requests, target by target, in order"
        );
        let (rr, sr) = (report(&real_json), report(&sim_json));
        for (a, b) in rr.devices.iter().zip(&sr.devices) {
            assert_eq!((a.read.ios, a.write.ios), (b.read.ios, b.write.ios));
            assert_eq!(a.read.ios + a.write.ios, 3000, "--ios is exact");
            assert_eq!(a.size_bytes, b.size_bytes, "the same volume size");
        }
        if let Some(v) = &rr.devices[0].volume {
            let cmds: u64 = v.members.iter().map(|m| m.commands).sum();
            let sim_cmds: u64 = sr.devices[0]
                .volume
                .as_ref()
                .unwrap()
                .members
                .iter()
                .map(|m| m.commands)
                .sum();
            assert_eq!(cmds, sim_cmds, "the same member commands");
            assert_eq!(
                cmds, 3000,
                "aligned 16 KiB requests never span two 64 KiB units"
            );
        }
    }
}

#[test]
fn raid0_over_zram_stores_real_data_where_the_layout_says_and_verifies() {
    let z: Vec<Zram> = (0..3).map(|_| Zram::new("16M")).collect();
    let paths: Vec<String> = z.iter().map(Zram::path).collect();
    let p: Vec<&str> = paths.iter().map(String::as_str).collect();
    // Fill the whole volume sequentially with the verification pattern (3 x 16 MiB / 64 KiB).
    let mut args = vec![
        "profile",
        "--quiet",
        "--layout",
        "raid0",
        "--stripe",
        "16k",
        "--rw",
        "write",
        "--bs",
        "64k",
        "--iodepth",
        "4",
        "--ios",
        "768",
        "--verify",
        "--allow-writes",
        "--seed",
        "3",
    ];
    args.extend(&p);
    ok(nines(&args), "raid0 write");
    // Read it back at random through the volume: every byte is checked.
    let mut args = vec![
        "profile",
        "--quiet",
        "--layout",
        "raid0",
        "--stripe",
        "16k",
        "--rw",
        "randread",
        "--bs",
        "8k",
        "--iodepth",
        "8",
        "--ios",
        "20000",
        "--verify",
        "--seed",
        "3",
    ];
    args.extend(&p);
    ok(nines(&args), "raid0 verified read");
    // The bytes are on the members exactly where raid0 maps them.
    let r = nines_array::Raid0::new(16 << 10, &[16 << 20; 3], 4096, 1, 4096).unwrap();
    let members: Vec<Vec<u8>> = paths.iter().map(|d| std::fs::read(d).unwrap()).collect();
    let mut expected = vec![0u8; 4096];
    for vol_off in (0..3 * (16u64 << 20)).step_by(1 << 20 | 4096) {
        nines_io::fill_pattern(&mut expected, vol_off, 3);
        let (m, off) = r.locate(vol_off);
        assert_eq!(
            &members[m as usize][off as usize..off as usize + 4096],
            &expected[..],
            "volume offset {vol_off} on member {m} at {off}"
        );
    }
    // Damage one member: the verified read must fail and say where.
    std::fs::write(&paths[1], vec![0u8; 1 << 20]).unwrap();
    let mut args = vec![
        "profile", "--quiet", "--layout", "raid0", "--stripe", "16k", "--rw", "read", "--bs",
        "64k", "--ios", "768", "--verify", "--seed", "3",
    ];
    args.extend(&p);
    let out = nines(&args);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("--verify") && e.contains("offset"), "{e}");
}

/// raid5 over zram: a verified pattern written through the volume reads back, the parity on
/// the members is the XOR of the data, and with a member wiped and declared failed (`--failed`)
/// every byte still reads back, rebuilt from the others.
#[test]
fn raid5_over_zram_keeps_parity_and_rebuilds_a_lost_member() {
    let z: Vec<Zram> = (0..3).map(|_| Zram::new("16M")).collect();
    let paths: Vec<String> = z.iter().map(Zram::path).collect();
    let p: Vec<&str> = paths.iter().map(String::as_str).collect();
    let run = |extra: &[&str], what: &str| {
        let mut args = vec![
            "profile", "--quiet", "--layout", "raid5", "--chunk", "16k", "--seed", "5",
        ];
        args.extend(extra);
        args.extend(&p);
        ok(nines(&args), what)
    };
    // 2 x 16 MiB of data: sequential 40 KiB writes over all of it (whole rows and parts of
    // rows), then random 4 KiB overwrites of parts of rows (read-modify-write), all with the
    // pattern.
    run(
        &[
            "--rw",
            "write",
            "--bs",
            "32k",
            "--iodepth",
            "4",
            "--ios",
            "1024",
            "--verify",
            "--allow-writes",
        ],
        "raid5 write",
    );
    run(
        &[
            "--rw",
            "randwrite",
            "--bs",
            "4k",
            "--iodepth",
            "8",
            "--ios",
            "3000",
            "--verify",
            "--allow-writes",
        ],
        "raid5 partial writes",
    );
    run(
        &[
            "--rw",
            "randread",
            "--bs",
            "8k",
            "--iodepth",
            "8",
            "--ios",
            "8000",
            "--verify",
        ],
        "raid5 verified read",
    );
    let members: Vec<Vec<u8>> = paths.iter().map(|d| std::fs::read(d).unwrap()).collect();
    let len = 16usize << 20;
    for i in (0..len).step_by(4099) {
        assert_eq!(
            members[0][i] ^ members[1][i] ^ members[2][i],
            0,
            "parity at member offset {i}"
        );
    }
    // Lose member 1 entirely; degraded reads rebuild it.
    std::fs::write(&paths[1], vec![0u8; len]).unwrap();
    let out = run(
        &[
            "--rw", "read", "--bs", "64k", "--ios", "512", "--verify", "--failed", "1",
        ],
        "raid5 degraded read",
    );
    let _ = out;
    // Without --failed, the wiped member's data is wrong and --verify says so.
    let mut args = vec![
        "profile", "--quiet", "--layout", "raid5", "--chunk", "16k", "--seed", "5", "--rw", "read",
        "--bs", "64k", "--ios", "512", "--verify",
    ];
    args.extend(&p);
    let out = nines(&args);
    assert!(!out.status.success(), "a wiped member must not verify");
    // A replacement for member 1 (the wiped one), rebuilt under load: verified random reads and
    // writes while a rate-limited rebuild gets part of the way, then `nines rebuild` to the end.
    let rb_json = tempfile::NamedTempFile::new().unwrap();
    run(
        &[
            "--rebuild",
            "1",
            // 16 MiB at 2 MiB/s: 8 s, far beyond the 0.5 s run even on a loaded host (at 8m
            // the rebuild finished before a run slowed by four parallel builds ended).
            "--rebuild-rate",
            "2m",
            "--rw",
            "randrw",
            "--bs",
            "8k",
            "--iodepth",
            "4",
            "--runtime",
            "500ms",
            "--verify",
            "--allow-writes",
            "--json",
            rb_json.path().to_str().unwrap(),
        ],
        "raid5 verified randrw during a rebuild",
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(rb_json.path()).unwrap()).unwrap();
    let rb = &r["devices"][0]["volume"]["stats"]["rebuild"];
    let (done, total) = (
        rb["rows_rebuilt"].as_u64().unwrap(),
        rb["rows_total"].as_u64().unwrap(),
    );
    assert_eq!(total, 1024, "16 MiB members in 16 KiB chunks: {rb}");
    assert!(
        done > 0 && done < total,
        "the run saw part of the rebuild: {rb}"
    );
    let mut args = vec!["rebuild", "--member", "1", "--chunk", "16k"];
    args.extend(&p);
    let out = nines(&args);
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--allow-writes"),
        "a rebuild writes a block device only when allowed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rb_json = tempfile::NamedTempFile::new().unwrap();
    let mut args = vec![
        "rebuild",
        "--member",
        "1",
        "--chunk",
        "16k",
        "--allow-writes",
        "--json",
        rb_json.path().to_str().unwrap(),
    ];
    args.extend(&p);
    let out = ok(nines(&args), "nines rebuild");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("rebuilt member 1"), "{said}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(rb_json.path()).unwrap()).unwrap();
    assert_eq!(r["rebuild"]["rows_rebuilt"], 1024, "{r}");
    // Rebuilt: every byte verifies with no member failed, and the parity holds again.
    run(
        &["--rw", "read", "--bs", "64k", "--ios", "512", "--verify"],
        "raid5 read after the rebuild",
    );
    let members: Vec<Vec<u8>> = paths.iter().map(|d| std::fs::read(d).unwrap()).collect();
    for i in (0..len).step_by(4099) {
        assert_eq!(
            members[0][i] ^ members[1][i] ^ members[2][i],
            0,
            "parity at member offset {i} after the rebuild"
        );
    }
    // D/ND on real devices: random writes wait in the write-back buffer for their member's turn
    // (10 ms turns), verified reads go around the member whose turn it is, and the run flushes
    // the buffer before it ends: a plain raid5 read afterwards finds every byte on the members.
    let json = tempfile::NamedTempFile::new().unwrap();
    run(
        &[
            "--policy",
            "dnd",
            "--window",
            "10ms",
            "--write-back",
            "4m",
            "--rw",
            "randrw",
            "--bs",
            "8k",
            "--iodepth",
            "8",
            "--runtime",
            "400ms",
            "--verify",
            "--allow-writes",
            "--json",
            json.path().to_str().unwrap(),
        ],
        "raid5 dnd verified randrw",
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json.path()).unwrap()).unwrap();
    let st = &r["devices"][0]["volume"]["stats"];
    assert_eq!(st["policy"], "dnd", "{st}");
    assert!(st["dnd"]["buffered_writes"].as_u64().unwrap() > 0, "{st}");
    assert!(st["dnd"]["window_switches"].as_u64().unwrap() > 5, "{st}");
    assert!(
        st["rebuilt_pieces"].as_u64().unwrap() > 0,
        "reads went around the turn: {st}"
    );
    assert!(
        st["dnd"]["window_controls_unsupported"].as_u64().unwrap() > 0,
        "zram has no PLM: {st}"
    );
    // The HTML report shows the volume's members and the policy's counters.
    let html_dir = tempfile::tempdir().unwrap();
    let html = html_dir.path().join("raid5.html");
    ok(
        nines(&[
            "report",
            json.path().to_str().unwrap(),
            "-o",
            html.to_str().unwrap(),
        ]),
        "report of a raid5 run",
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        // Counters are labelled for people (no underscores).
        page.contains("Volume raid5(") && page.contains("rebuilt pieces"),
        "volume section"
    );
    run(
        &["--rw", "read", "--bs", "64k", "--ios", "512", "--verify"],
        "raid5 read after dnd",
    );
    // A whole new pattern (another seed) written through D/ND, read back without it: the
    // buffer's last writes reached the members before the run ended.
    let mut args = vec![
        "profile",
        "--quiet",
        "--layout",
        "raid5",
        "--chunk",
        "16k",
        "--seed",
        "9",
        "--policy",
        "dnd",
        "--window",
        "10ms",
        "--write-back",
        "4m",
        "--rw",
        "write",
        "--bs",
        "64k",
        "--iodepth",
        "4",
        "--ios",
        "512",
        "--verify",
        "--allow-writes",
    ];
    args.extend(&p);
    ok(nines(&args), "raid5 dnd seed 9 write");
    let mut args = vec![
        "profile", "--quiet", "--layout", "raid5", "--chunk", "16k", "--seed", "9", "--rw", "read",
        "--bs", "64k", "--ios", "512", "--verify",
    ];
    args.extend(&p);
    ok(nines(&args), "raid5 plain read of the dnd-written pattern");
    let members: Vec<Vec<u8>> = paths.iter().map(|d| std::fs::read(d).unwrap()).collect();
    for i in (0..len).step_by(4099) {
        assert_eq!(
            members[0][i] ^ members[1][i] ^ members[2][i],
            0,
            "parity after dnd at {i}"
        );
    }
    // --failed is raid5's option only.
    let out = nines(&[
        "profile", "--quiet", "--failed", "1", "--ios", "1", &paths[0],
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--failed applies to --layout raid5"));
}

#[test]
fn several_jobs_have_their_own_statistics_in_both_drivers() {
    let dir = disk_dir();
    let f = make_file(dir.path(), "j", 16 << 20);
    let jobs = [
        "--job",
        "reads:rw=randread,bs=4k,iodepth=4,ios=2000",
        "--job",
        "burst:rw=randwrite,bs=64k,thinktime=2ms,ios=20",
    ];
    let json = dir.path().join("p.json");
    let mut args = vec!["profile", "--quiet", "--json", s(&json), s(&f)];
    args.extend(jobs);
    ok(nines(&args), "profile with jobs");
    let sim_json = dir.path().join("s.json");
    let mut args = vec![
        "sim",
        "--quiet",
        "--json",
        s(&sim_json),
        "--device",
        "z-ssd",
    ];
    args.extend(jobs);
    ok(nines(&args), "sim with jobs");
    for r in [report(&json), report(&sim_json)] {
        let names: Vec<&str> = r.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["reads", "burst"]);
        assert_eq!((r.jobs[0].read.ios, r.jobs[0].write.ios), (2000, 0));
        assert_eq!((r.jobs[1].read.ios, r.jobs[1].write.ios), (0, 20));
        assert_eq!(r.jobs[1].workload.thinktime_ns, 2_000_000);
        // The device's figures are the jobs' together.
        assert_eq!((r.devices[0].read.ios, r.devices[0].write.ios), (2000, 20));
        // The bursts wait 2 ms between writes: at least 19 gaps.
        assert!(
            r.config.measured_ns >= 19 * 2_000_000,
            "{}",
            r.config.measured_ns
        );
    }
    let out = nines(&["profile", "--quiet", "--job", "x:runtime=1s", s(&f)]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("whole run"));
}

/// The first `n` requests of the real tpcc trace, written in `format` into `dir`.
fn trace_in(
    dir: &Path,
    format: nines_trace::TraceFormat,
    n: usize,
) -> (std::path::PathBuf, u64, u64) {
    use nines_trace::{TraceOptions, read_trace};
    let src = common::traces_dir().join("mqsim-tpcc-small.trace");
    let mut t = read_trace(
        std::io::BufReader::new(std::fs::File::open(src).unwrap()),
        nines_trace::TraceFormat::Mqsim,
        &TraceOptions::default(),
    )
    .unwrap();
    t.records.truncate(n);
    // Byte offsets 4 KiB-aligned, so the trace suits direct I/O on zram too.
    for r in &mut t.records {
        r.offset_bytes &= !4095;
        r.len_bytes = r.len_bytes.next_multiple_of(4096);
    }
    let stats = nines_trace::Trace::from_records(t.records.clone(), format).stats();
    let path = dir.join(format!("t.{format}"));
    let mut f = std::fs::File::create(&path).unwrap();
    nines_trace::write_trace(&mut f, &t.records, format, nines_trace::TraceUnit::Bytes).unwrap();
    (path, stats.reads, stats.writes)
}

#[test]
fn profile_replays_every_trace_format_on_files_and_zram() {
    let dir = disk_dir();
    let file = make_file(dir.path(), "target", 64 << 20);
    let z = Zram::new("64M");
    for format in nines_trace::TraceFormat::ALL {
        let (trace, reads, writes) = trace_in(dir.path(), format, 400);
        for target in [s(&file).to_string(), z.path()] {
            let json = dir.path().join("trace.json");
            let out = ok(
                nines(&[
                    "profile",
                    "--quiet",
                    "--trace",
                    s(&trace),
                    "--trace-format",
                    format.name(),
                    "--trace-fit",
                    "wrap",
                    "--trace-time-scale",
                    "0.5",
                    "--allow-writes",
                    "--json",
                    s(&json),
                    &target,
                ]),
                "profile --trace",
            );
            let _ = out;
            let r = report(&json);
            let d = &r.devices[0];
            assert_eq!(
                (d.read.ios, d.write.ios),
                (reads, writes),
                "{format} on {target}"
            );
            assert_eq!(r.config.extra["trace"]["requests"], 400);
            assert_eq!(r.jobs[0].name, "trace");
        }
    }
}

/// `profile --trace` records the run as a replay of that trace: `config.extra.trace` names the
/// file and format, and `config.workload` (and the one job, "trace") says what the trace held, a
/// write-only trace as randwrite with 0% reads and its request size (not the workload options'
/// randread at 50%); its flush request is sent (fdatasync) but measured nowhere.
#[test]
fn profile_records_a_write_only_blkparse_replay_as_what_it_held() {
    use nines_core::workload::RwMode;
    let dir = disk_dir();
    let file = make_file(dir.path(), "target", 16 << 20);
    let trace = dir.path().join("w.blkparse");
    std::fs::write(
        &trace,
        "259,0 0 1 0.000000000 10 D W 0 + 16 [app]\n\
         259,0 0 2 0.000100000 10 D WFS 16 + 16 [app]\n\
         259,0 0 3 0.000200000 10 D FN [kworker]\n\
         259,0 0 4 0.000300000 10 D WS 64 + 8 [app]\n",
    )
    .unwrap();
    let json = dir.path().join("replay.json");
    ok(
        nines(&[
            "profile",
            "--quiet",
            "--trace",
            s(&trace),
            "--trace-format",
            "blkparse",
            "--trace-depth",
            "4",
            "--json",
            s(&json),
            s(&file),
        ]),
        "profile --trace blkparse",
    );
    let r = report(&json);
    let t = &r.config.extra["trace"];
    assert_eq!(t["file"], s(&trace));
    assert_eq!(t["format"], "blkparse");
    assert_eq!((&t["reads"], &t["writes"]), (&0.into(), &3.into()), "{t}");
    assert_eq!(
        (&t["fua_writes"], &t["flushes"]),
        (&1.into(), &1.into()),
        "{t}"
    );
    for w in [&r.config.workload, &r.jobs[0].workload] {
        assert_eq!(w.rw, RwMode::RandWrite);
        assert_eq!(w.read_mix_pct, 0);
        assert_eq!(w.block_size_bytes, 8192);
        assert_eq!(w.iodepth, 4);
    }
    assert_eq!(r.jobs[0].name, "trace");
    let d = &r.devices[0];
    assert_eq!((d.read.ios, d.write.ios), (0, 3));
}

/// serial over zram: a sequential verified fill lands on the members exactly where the policy
/// (run again in memory over the same writes) puts it, format trims included; then random
/// overwrites of the whole volume make the front-end rotate and xGC move data and trim segments
/// through the real driver, which the report's `volume.stats` shows.
#[test]
fn serial_over_zram_writes_where_the_policy_says_and_collects() {
    use nines_array::testing::SyncDriver;
    use nines_array::{LayoutSpec, SerialSpec, Volume, VolumeParams, build};
    let z: Vec<Zram> = (0..4).map(|_| Zram::new("16M")).collect();
    let paths: Vec<String> = z.iter().map(Zram::path).collect();
    let p: Vec<&str> = paths.iter().map(String::as_str).collect();
    let opts = [
        "--layout",
        "serial",
        "--segment",
        "1m",
        "--stripe",
        "64k",
        "--gc-start",
        "2",
        "--gc-stop",
        "3",
    ];
    let spec = SerialSpec {
        column_members: 1,
        stripe_bytes: 64 << 10,
        segment_bytes: 1 << 20,
        unit_bytes: 4096,
        rotate_free: 1,
        gc_start: 2,
        gc_stop: 3,
        gc_depth: 4,
        move_bytes: 256 << 10,
        start_full_bytes: 0,
        persist: false,
        zone_size_bytes: 0,
        zone_capacity_bytes: 0,
    };
    // 4 columns of 16 segments, less 4 * 2 + 3 in reserve: 53 MiB.
    let size = 53u64 << 20;
    let dir = disk_dir();
    let json = dir.path().join("fill.json");
    let ios = (size / (64 << 10)).to_string();
    let mut args = vec![
        "profile",
        "--quiet",
        "--rw",
        "write",
        "--bs",
        "64k",
        "--iodepth",
        "4",
        "--ios",
        &ios,
        "--verify",
        "--allow-writes",
        "--seed",
        "11",
        "--json",
        s(&json),
    ];
    args.extend(opts);
    args.extend(&p);
    ok(nines(&args), "serial fill");
    let r = report(&json);
    assert_eq!(r.devices[0].size_bytes, size);
    // The same writes through the policy in memory, in the same (submission) order.
    let sizes = [16u64 << 20; 4];
    let v = build(
        &LayoutSpec::Serial(spec),
        &VolumeParams {
            member_sizes_bytes: &sizes,
            block_bytes: 4096,
            tags: 1,
            len_bytes_max: 64 << 10,
        },
    )
    .unwrap();
    assert_eq!(v.size_bytes(), size);
    let mut d = SyncDriver::new(v, &sizes, 1, 64 << 10);
    let mut buf = vec![0u8; 64 << 10];
    for off in (0..size).step_by(64 << 10) {
        nines_io::fill_pattern(&mut buf, off, 11);
        d.write(off, &buf).unwrap();
    }
    for (m, path) in paths.iter().enumerate() {
        let real = std::fs::read(path).unwrap();
        assert!(
            real == d.members().bytes(m as u32),
            "member {m} differs from the policy's placement"
        );
    }
    // Random overwrites, 4 volumes' worth: rotation, xGC and its trims on real devices.
    let json = dir.path().join("rand.json");
    let ios = (4 * size / (64 << 10)).to_string();
    let mut args = vec![
        "profile",
        "--quiet",
        "--rw",
        "randwrite",
        "--bs",
        "64k",
        "--iodepth",
        "8",
        "--ios",
        &ios,
        "--verify",
        "--allow-writes",
        "--seed",
        "12",
        "--json",
        s(&json),
    ];
    args.extend(opts);
    args.extend(&p);
    ok(nines(&args), "serial random overwrites");
    let r = report(&json);
    let st = &r.devices[0].volume.as_ref().unwrap().stats;
    let n = |k: &str| st[k].as_u64().unwrap();
    assert_eq!(n("client_write_bytes"), 4 * size, "{st}");
    assert!(n("rotations") >= 3, "{st}");
    assert!(n("gc_victims") > 0 && n("gc_units_moved") > 0, "{st}");
    assert!(
        n("segments_trimmed") > 64,
        "format trims and cleaned victims: {st}"
    );
    assert_eq!(
        n("gc_errors") + n("write_errors") + n("trim_errors"),
        0,
        "{st}"
    );
    assert!(
        st["array_write_amplification"].as_f64().unwrap() > 1.0,
        "{st}"
    );
}
