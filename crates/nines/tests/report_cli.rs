//! `nines report` end to end: a real profile of zram devices with both logs, and a simulated
//! run, turned into HTML and PNGs.

use std::path::Path;

mod common;
use common::{Zram, nines, ok};

fn is_png(p: &Path) -> bool {
    std::fs::read(p).is_ok_and(|b| b.len() > 10_000 && &b[1..4] == b"PNG")
}

#[test]
fn report_of_a_profiled_zram_run_with_both_logs() {
    let z: Vec<Zram> = (0..2).map(|_| Zram::new("64M")).collect();
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["profile", "--quiet", "--rw", "randread", "--runtime", "1s"];
    args.extend(["--json", "run.json", "--lat-log", "run.lat"]);
    args.extend(["--hdr-log", "run.hlog", "--hdr-interval", "100ms"]);
    let paths: Vec<String> = z.iter().map(Zram::path).collect();
    args.extend(paths.iter().map(String::as_str));
    ok(nines(&args, dir.path()), "profile");

    // The logs are found through the run's JSON (paths relative to it).
    let out = ok(
        nines(&["report", "run.json", "--png", "png"], dir.path()),
        "report",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("6 figures"), "{err}");
    let html = std::fs::read_to_string(dir.path().join("run.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 6);
    for id in [
        "percentiles-read",
        "spread-read",
        "stddev-read",
        "latency-over-time",
        "iops-over-time",
        "bandwidth-over-time",
    ] {
        assert!(html.contains(&format!("<figure id=\"{id}\"")), "{id}");
        assert!(
            is_png(&dir.path().join("png").join(format!("{id}.png"))),
            "{id}.png"
        );
    }
    let name = |p: &str| p.trim_start_matches("/dev/").to_string();
    assert!(html.contains(&name(&paths[0])) && html.contains(&name(&paths[1])));
    assert!(html.contains("Measured run of 2 devices: randread 4 KiB QD1"));
    // The spike line is always there: found, or explicitly none.
    assert!(html.contains("per-I/O log)"), "no spike summary");
    assert!(!html.contains("<script"));
}

#[test]
fn report_of_a_simulated_run_and_explicit_output() {
    let dir = tempfile::tempdir().unwrap();
    ok(
        nines(
            &[
                "sim",
                "--quiet",
                "--ideal",
                "--devices",
                "5",
                "--runtime",
                "200ms",
                "--json",
                "sim.json",
            ],
            dir.path(),
        ),
        "sim",
    );
    ok(
        nines(&["report", "sim.json", "-o", "out.html"], dir.path()),
        "report",
    );
    let html = std::fs::read_to_string(dir.path().join("out.html")).unwrap();
    assert!(html.contains("Simulated run of 5 devices"));
    // Identical simulated devices: their standard deviation is zero at every percentile, so
    // that figure is left out and the page says why.
    assert_eq!(
        html.matches("<svg").count(),
        2,
        "no logs, identical devices: percentiles and spread only"
    );
    assert!(
        html.contains("No read standard-deviation figure: every device had the same latency"),
        "says why the stddev figure is missing"
    );
    assert!(html.contains("--lat-log"), "says how to get spike analysis");
}

/// A per-I/O log with QD1 devices that all stall for 30 ms every 700 ms (paper 000, Fig. 10).
fn write_periodic_lat_log(path: &Path, devices: &[String]) {
    use nines_core::latlog::{LatLogHeader, LatRecord, RECORD_BYTES, write_header};
    use std::io::Write;
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    write_header(
        &mut w,
        &LatLogHeader {
            devices: devices.to_vec(),
            start_unix_ns: 0,
        },
    )
    .unwrap();
    let mut buf = [0u8; RECORD_BYTES];
    for (dev, _) in devices.iter().enumerate() {
        let mut t = 0u64;
        let mut i = 0u64;
        while t < 5_000_000_000 {
            let mut done = t + 90_000 + (i * 7919 % 23) * 1000;
            let s = 200_000_000 + (done.saturating_sub(200_000_000) / 700_000_000) * 700_000_000;
            if done > s && t < s + 30_000_000 {
                done = s + 30_000_000 + 90_000;
            }
            LatRecord {
                completion_ns: done,
                latency_ns: done - t,
                offset_bytes: (i % 1000) * 4096,
                device: dev as u16,
                op: nines_core::op::Op::Read,
            }
            .encode(&mut buf);
            w.write_all(&buf).unwrap();
            t = done;
            i += 1;
        }
    }
    w.flush().unwrap();
}

#[test]
fn periodic_stalls_in_a_lat_log_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    ok(
        nines(
            &[
                "sim",
                "--quiet",
                "--devices",
                "3",
                "--runtime",
                "100ms",
                "--json",
                "s.json",
            ],
            dir.path(),
        ),
        "sim",
    );
    let r = nines_core::report::Report::from_json(
        &std::fs::read_to_string(dir.path().join("s.json")).unwrap(),
    )
    .unwrap();
    let names: Vec<String> = r.devices.iter().map(|d| d.name.clone()).collect();
    write_periodic_lat_log(&dir.path().join("stalls.lat"), &names);
    let png = std::env::var("NINES_REPORT_PNG_DIR").unwrap_or_else(|_| "png".into());
    ok(
        nines(
            &["report", "s.json", "--lat-log", "stalls.lat", "--png", &png],
            dir.path(),
        ),
        "report",
    );
    let html = std::fs::read_to_string(dir.path().join("s.html")).unwrap();
    assert!(
        html.contains("Periodic latency spikes (per-I/O log): every 700 ms, a stall of about 30")
            || html
                .contains("Periodic latency spikes (per-I/O log): every 700 ms, slow for about 30"),
        "{}",
        &html[html.find("<ul").unwrap()..html.find("</ul>").unwrap()]
    );
    assert!(html.contains(", together;"));
    assert!(html.contains("<figure id=\"latency-over-time\""));
    assert!(html.contains("Shaded: 7 of 7 detected spikes"));
}

#[test]
fn recorded_logs_are_found_when_moved_and_missing_ones_are_said() {
    let dir = tempfile::tempdir().unwrap();
    ok(
        nines(
            &[
                "sim",
                "--quiet",
                "--devices",
                "2",
                "--runtime",
                "50ms",
                "--json",
                "s.json",
            ],
            dir.path(),
        ),
        "sim",
    );
    let text = std::fs::read_to_string(dir.path().join("s.json")).unwrap();
    let r = nines_core::report::Report::from_json(&text).unwrap();
    let names: Vec<String> = r.devices.iter().map(|d| d.name.clone()).collect();
    // The run recorded its log somewhere else; the file now sits beside the JSON.
    std::fs::create_dir(dir.path().join("moved")).unwrap();
    write_periodic_lat_log(&dir.path().join("moved/stalls.lat"), &names);
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["config"]["lat_log"] = "/somewhere/else/stalls.lat".into();
    v["config"]["hdr_log"] = "gone.hlog".into();
    std::fs::write(dir.path().join("moved/s.json"), v.to_string()).unwrap();
    let out = ok(nines(&["report", "moved/s.json"], dir.path()), "report");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("interval log gone.hlog was not found"),
        "{err}"
    );
    assert!(err.contains("--hdr-log FILE"), "{err}");
    let html = std::fs::read_to_string(dir.path().join("moved/s.html")).unwrap();
    assert!(html.contains("Periodic latency spikes (per-I/O log)"));
}

#[test]
fn bad_inputs_get_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out = nines(&["report", "missing.json"], dir.path());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("nines profile --json"), "{err}");

    std::fs::write(
        dir.path().join("other.json"),
        r#"{"schema": "something-else"}"#,
    )
    .unwrap();
    let out = nines(&["report", "other.json"], dir.path());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    std::fs::write(dir.path().join("junk.lat"), b"not a log").unwrap();
    ok(
        nines(
            &["sim", "--quiet", "--runtime", "50ms", "--json", "s.json"],
            dir.path(),
        ),
        "sim",
    );
    let out = nines(&["report", "s.json", "--lat-log", "junk.lat"], dir.path());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nines profile --lat-log"), "{err}");
}

#[test]
fn logs_are_recorded_relative_to_the_json_and_found_from_anywhere() {
    let z = Zram::new("64M");
    let top = tempfile::tempdir().unwrap();
    for d in ["b", "c", "logs"] {
        std::fs::create_dir(top.path().join(d)).unwrap();
    }
    let dev = z.path();
    // Profile from the top, the JSON in b/, the logs in logs/ (typed as logs/run.lat, which is
    // not where they are seen from b/ or c/).
    let args = [
        "profile",
        "--quiet",
        "--runtime",
        "300ms",
        "--json",
        "b/run.json",
        "--lat-log",
        "logs/run.lat",
        "--hdr-log",
        "logs/run.hlog",
        "--hdr-interval",
        "100ms",
        &dev,
    ];
    ok(nines(&args, top.path()), "profile");
    let text = std::fs::read_to_string(top.path().join("b/run.json")).unwrap();
    let r = nines_core::report::Report::from_json(&text).unwrap();
    assert_eq!(r.config.lat_log.as_deref(), Some("../logs/run.lat"));
    assert_eq!(r.config.hdr_log.as_deref(), Some("../logs/run.hlog"));
    // Reported from c/, both logs are found.
    let out = ok(
        nines(&["report", "../b/run.json"], &top.path().join("c")),
        "report",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("not found"), "{err}");
    let html = std::fs::read_to_string(top.path().join("b/run.html")).unwrap();
    assert!(html.contains("<figure id=\"latency-over-time\""));
    assert!(html.contains("<figure id=\"iops-over-time\""));
}
