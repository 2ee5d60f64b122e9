//! `nines merge` from the command line: runs merged exactly (the merged percentiles are those of
//! every run's samples put together, checked against the per-I/O logs), fio json+ results join,
//! and bad inputs are refused with one line and no output file.

mod common;

use std::path::Path;

use common::{assert_success, disk_dir, run, s};
use nines_core::report::Report;
use nines_core::stats::DirRecorder;

fn report(path: &Path) -> Report {
    Report::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every measured I/O's latency from a per-I/O log, through `nines log`.
fn log_latencies(lat: &Path) -> Vec<u64> {
    let out = run(&["log", s(lat)]);
    assert_success(&out);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.rsplit(',').next().unwrap().parse().unwrap())
        .collect()
}

fn fails(args: &[&str]) -> String {
    let out = run(args);
    assert!(!out.status.success(), "{args:?} should fail");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}

#[test]
fn merged_runs_equal_their_samples_put_together() {
    let dir = disk_dir();
    let d = dir.path();
    // Two "hosts" with different distributions: a steady-state mixed run (GC tails) and reads.
    let runs = [
        (
            "h1",
            vec![
                "--devices",
                "2",
                "--rw",
                "randrw",
                "--mix",
                "70",
                "--seed",
                "3",
            ],
        ),
        (
            "h2",
            vec!["--devices", "1", "--rw", "randread", "--iodepth", "4"],
        ),
    ];
    let mut all = Vec::new();
    let mut inputs = Vec::new();
    for (name, extra) in &runs {
        let json = d.join(format!("{name}.json"));
        let lat = d.join(format!("{name}.lat"));
        let hlog = d.join(format!("{name}.hlog"));
        let mut args = vec![
            "sim",
            "--quiet",
            "--runtime",
            "300ms",
            "--json",
            s(&json),
            "--lat-log",
            s(&lat),
            "--hdr-log",
            s(&hlog),
            "--hdr-interval",
            "50ms",
        ];
        args.extend(extra.iter().copied());
        assert_success(&run(&args));
        all.extend(log_latencies(&lat));
        inputs.push(json);
    }
    let merged = d.join("merged.json");
    let out = run(&["merge", s(&inputs[0]), s(&inputs[1]), "-o", s(&merged)]);
    assert_success(&out);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("merged 2 runs (3 devices)"), "{stdout}");
    let m = report(&merged);
    let mut expect = DirRecorder::new();
    for &v in &all {
        expect.record(v, 4096);
    }
    let pcts = &m.config.percentiles;
    let want = expect.summary(pcts);
    let got = &m.aggregate.read.lat_ns;
    let mut got_all = DirRecorder::new();
    for d in &m.devices {
        got_all.merge_from(
            &d.read
                .recorder
                .as_ref()
                .map(|r| r.restore().unwrap())
                .unwrap_or_default(),
        );
        got_all.merge_from(
            &d.write
                .recorder
                .as_ref()
                .map(|r| r.restore().unwrap())
                .unwrap_or_default(),
        );
    }
    assert_eq!(
        got_all.ios,
        all.len() as u64,
        "every logged I/O is in the merge"
    );
    assert_eq!(
        got_all.summary(pcts).percentiles,
        want.percentiles,
        "both directions together"
    );
    // Reads alone: the merged read distribution is exactly the sum of the runs' reads.
    let h1 = report(&inputs[0]);
    let h2 = report(&inputs[1]);
    assert_eq!(
        m.aggregate.read.ios,
        h1.aggregate.read.ios + h2.aggregate.read.ios
    );
    assert!(
        got.max_ns
            == h1
                .aggregate
                .read
                .lat_ns
                .max_ns
                .max(h2.aggregate.read.lat_ns.max_ns)
    );
    assert_eq!(m.devices[2].name, format!("h2:{}", h2.devices[0].name));
    assert_eq!(m.sources.len(), 2);
    assert_eq!(m.sources[0].devices, [0, 1]);
    assert_eq!(
        m.sources[1].read, h2.aggregate.read,
        "each host's own distribution kept"
    );
    // Rates add up over hosts that ran at the same time.
    let iops = h1.aggregate.read.iops + h2.aggregate.read.iops;
    assert!((m.aggregate.read.iops - iops).abs() < 1e-6);
    // The interval logs are merged too: every interval of both runs, under the merged names.
    assert_eq!(m.config.hdr_log.as_deref(), Some("merged.hlog"));
    let series =
        nines_report::intervals::parse_interval_log(&std::fs::read(d.join("merged.hlog")).unwrap())
            .unwrap();
    let logged: u64 = series.iter().flat_map(|s| &s.points).map(|p| p.ios).sum();
    assert_eq!(
        logged,
        all.len() as u64,
        "every measured I/O in the merged interval log"
    );
    assert!(
        series.iter().any(|s| s.device.starts_with("h2:")),
        "tags carry the run"
    );
    // A merged report merges again, and `nines report` reads it.
    let again = d.join("again.json");
    assert_success(&run(&[
        "merge",
        s(&merged),
        s(&inputs[0]),
        "-o",
        s(&again),
        "-q",
    ]));
    assert_eq!(
        report(&again).aggregate.read.ios,
        m.aggregate.read.ios + h1.aggregate.read.ios
    );
    let html = d.join("merged.html");
    assert_success(&run(&["report", s(&merged), "-o", s(&html)]));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("Runs merged (per host)") && page.contains("<td>h2</td>"),
        "the page shows each run's own distribution"
    );
}

#[test]
fn fio_json_plus_results_join_a_merge() {
    let dir = disk_dir();
    let d = dir.path();
    let data = d.join("fio.data");
    let fio_json = d.join("fio.json");
    let out = std::process::Command::new("fio")
        .args([
            "--name=r",
            &format!("--filename={}", data.display()),
            "--size=8m",
            "--rw=randread",
            "--bs=4k",
            "--number_ios=3000",
            "--lat_percentiles=1",
            "--output-format=json+",
            &format!("--output={}", fio_json.display()),
        ])
        .output()
        .expect("fio is installed by scripts/setup.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let merged = d.join("m.json");
    assert_success(&run(&["merge", s(&fio_json), "-o", s(&merged), "-q"]));
    let m = report(&merged);
    let fio: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&fio_json).unwrap()).unwrap();
    let r = &fio["jobs"][0]["read"];
    assert_eq!(m.devices[0].read.ios, r["total_ios"].as_u64().unwrap());
    for (p, key) in [
        (50.0, "50.000000"),
        (99.0, "99.000000"),
        (99.9, "99.900000"),
    ] {
        let theirs = r["lat_ns"]["percentile"][key].as_u64().unwrap() as f64;
        let ours = m.devices[0].read.lat_ns.percentiles.at(p).unwrap() as f64;
        // fio reports a bin's value; nines' histogram holds it to 0.1%.
        assert!(
            (ours - theirs).abs() <= theirs * 0.001 + 1.0,
            "p{p}: {ours} vs fio {theirs}"
        );
    }
    assert!(
        m.warnings.iter().any(|w| w.contains("1/64")),
        "{:?}",
        m.warnings
    );
}

#[test]
fn bad_inputs_are_refused_and_write_nothing() {
    let dir = disk_dir();
    let d = dir.path();
    let json = d.join("a.json");
    assert_success(&run(&[
        "sim",
        "--quiet",
        "--runtime",
        "50ms",
        "--json",
        s(&json),
    ]));
    let out_path = d.join("out.json");
    // A report without histograms (an older nines).
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    v["devices"][0]["read"]
        .as_object_mut()
        .unwrap()
        .remove("recorder");
    let old = d.join("old.json");
    std::fs::write(&old, v.to_string()).unwrap();
    let err = fails(&["merge", s(&old), "-o", s(&out_path)]);
    assert!(
        err.contains("has no histogram") && err.contains("rerun"),
        "{err}"
    );
    // Not JSON, not a report, a missing file, plain fio json.
    let junk = d.join("junk.json");
    std::fs::write(&junk, "{ nope").unwrap();
    assert!(fails(&["merge", s(&junk), "-o", s(&out_path)]).contains("not JSON"));
    std::fs::write(&junk, "{\"a\": 1}").unwrap();
    assert!(fails(&["merge", s(&junk), "-o", s(&out_path)]).contains("not a nines report"));
    assert!(fails(&["merge", "/nonexistent.json", "-o", s(&out_path)]).contains("cannot read"));
    let fio_plain = d.join("plain.json");
    std::fs::write(
        &fio_plain,
        r#"{"fio version": "fio-3.33", "jobs": [{"jobname": "j", "read": {"total_ios": 5, "lat_ns": {"percentile": {"50.000000": 10}}}}]}"#,
    )
    .unwrap();
    assert!(fails(&["merge", s(&fio_plain), "-o", s(&out_path)]).contains("json+"));
    assert!(!out_path.exists(), "nothing written on refusal");
    // --force is refused and changes nothing (it only ever means writing over a device's
    // data); an existing output is replaced, as every verb's outputs are.
    std::fs::write(&out_path, "keep").unwrap();
    assert!(
        fails(&["merge", s(&json), "-o", s(&out_path), "--force"])
            .contains("replaces an existing -o file by itself")
    );
    assert_eq!(std::fs::read_to_string(&out_path).unwrap(), "keep");
    assert_success(&run(&["merge", s(&json), "-o", s(&out_path), "-q"]));
    assert!(report(&out_path).devices.len() == 1, "replaced");
    std::fs::write(&out_path, "keep").unwrap();
    assert!(
        fails(&["merge", s(&json), "-o", s(&json), "--replace"])
            .contains("is also the run's input")
    );
    let quiet = run(&["merge", s(&json), "-o", s(&out_path), "--replace", "-q"]);
    assert_success(&quiet);
    assert!(quiet.stdout.is_empty(), "-q prints no table");
    assert!(report(&out_path).devices.len() == 1);
}
