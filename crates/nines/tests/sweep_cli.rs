//! `nines sweep` end to end: queue depth and engines on zram devices, write share on the
//! simulator, and the options the sweep owns.

use std::path::Path;

use nines_report::sweep::{Sweep, SweepParam};

mod common;
use common::{Zram, nines, ok};

fn read_sweep(p: &Path) -> Sweep {
    Sweep::from_json(&std::fs::read_to_string(p).unwrap()).unwrap()
}

#[test]
fn queue_depth_sweep_on_zram() {
    let z = Zram::new("64M");
    let dir = tempfile::tempdir().unwrap();
    let dev = z.path();
    let args = [
        "sweep",
        "--qd",
        "1,4",
        "--rws",
        "randread,randwrite",
        "-o",
        "out",
        "--",
        &dev,
        "--runtime",
        "300ms",
        "--allow-writes",
    ];
    let out = ok(nines(&args, dir.path()), "sweep");
    let s = read_sweep(&dir.path().join("out/sweep.json"));
    assert_eq!(s.parameter, SweepParam::Qd);
    assert_eq!(s.points.len(), 4);
    let got: Vec<(String, u32)> = s.points.iter().map(|p| (p.rw.clone(), p.iodepth)).collect();
    assert_eq!(
        got,
        [
            ("randread".into(), 1),
            ("randread".into(), 4),
            ("randwrite".into(), 1),
            ("randwrite".into(), 4)
        ]
    );
    for p in &s.points {
        let r = p.report.as_ref().expect("every point ran");
        // The point really ran with the sweep's settings.
        assert_eq!(r.config.workload.iodepth, p.iodepth);
        assert_eq!(r.config.workload.rw.to_string(), p.rw);
        let m = p.metrics.as_ref().unwrap();
        let d = if p.rw == "randread" {
            assert!(m.write.is_none());
            m.read.as_ref().unwrap()
        } else {
            assert!(m.read.is_none());
            m.write.as_ref().unwrap()
        };
        assert_eq!(d.tail_percentile, "99.999");
        assert!(d.iops > 1000.0 && d.mean_ns > 0.0 && d.tail_ns >= d.mean_ns as u64);
        assert!(m.cpu_per_io_ns.is_some());
    }
    // Each point's run JSON is kept, so points can be compared or reported on.
    assert_eq!(
        std::fs::read_dir(dir.path().join("out/points"))
            .unwrap()
            .count(),
        4
    );
    let html = std::fs::read_to_string(dir.path().join("out/sweep.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 3);
    assert!(html.contains("vs queue depth"));
    let table = String::from_utf8_lossy(&out.stdout);
    // A header, four points, and the line that says which percentile the tail column holds.
    assert_eq!(table.lines().count(), 6, "{table}");
    assert!(
        table
            .lines()
            .last()
            .unwrap()
            .starts_with("tail latency: p99"),
        "{table}"
    );
}

#[test]
fn engine_sweep_says_when_polling_is_unavailable() {
    let z = Zram::new("64M");
    let dir = tempfile::tempdir().unwrap();
    let dev = z.path();
    let args = [
        "sweep",
        "--engines",
        "io_uring,io_uring-poll",
        "--json",
        "e.json",
        "--html",
        "e.html",
        "--",
        &dev,
        "--runtime",
        "200ms",
    ];
    let out = ok(nines(&args, dir.path()), "sweep");
    let err = String::from_utf8_lossy(&out.stderr);
    let s = read_sweep(&dir.path().join("e.json"));
    assert_eq!(s.points.len(), 2);
    assert!(s.points[0].metrics.is_some(), "io_uring ran");
    // zram has no poll queues: the point is kept, with the reason, and the sweep said so.
    let poll = &s.points[1];
    assert_eq!(poll.engine.as_deref(), Some("io_uring-poll"));
    assert!(poll.metrics.is_none());
    assert!(poll.error.as_deref().unwrap().contains("poll"), "{poll:?}");
    assert!(err.contains("io_uring-poll is not available here"), "{err}");
    assert_eq!(s.notes.len(), 1);
    let html = std::fs::read_to_string(dir.path().join("e.html")).unwrap();
    assert!(html.contains("io_uring-poll (n/a)"));
    assert!(dir.path().join("e.json.points").is_dir());
}

#[test]
fn write_fraction_sweep_on_the_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "sweep",
        "--sim",
        "afa-m2-2018",
        "--write-fraction",
        "0,50",
        "-o",
        "wf",
        "--",
        "--runtime",
        "200ms",
        "--iodepth",
        "2",
    ];
    ok(nines(&args, dir.path()), "sweep");
    let s = read_sweep(&dir.path().join("wf/sweep.json"));
    assert_eq!(s.driver, "sim --device afa-m2-2018");
    assert_eq!(s.points.len(), 2);
    let (p0, p50) = (&s.points[0], &s.points[1]);
    assert_eq!((p0.write_pct, p50.write_pct), (Some(0), Some(50)));
    assert_eq!(
        p0.report.as_ref().unwrap().config.workload.read_mix_pct,
        100
    );
    assert_eq!(
        p50.report.as_ref().unwrap().config.workload.read_mix_pct,
        50
    );
    assert_eq!(p50.iodepth, 2, "passed-through --iodepth is recorded");
    assert!(p0.metrics.as_ref().unwrap().write.is_none());
    let w = p50.metrics.as_ref().unwrap().write.as_ref().unwrap();
    let r = p50.metrics.as_ref().unwrap().read.as_ref().unwrap();
    // Half the I/Os are writes, within sampling noise.
    let share = w.ios as f64 / (w.ios + r.ios) as f64;
    assert!((share - 0.5).abs() < 0.05, "{share}");
    let html = std::fs::read_to_string(dir.path().join("wf/sweep.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 1);
    // A point's run JSON reports like any run; the sweep file itself is pointed to its page.
    let point = dir.path().join("wf/points/01-writes0.json");
    ok(
        nines(&["report", point.to_str().unwrap()], dir.path()),
        "report on a point",
    );
    let out = nines(&["report", "wf/sweep.json"], dir.path());
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is a sweep, not a run"));
}

#[test]
fn sweep_refuses_options_it_sets_and_needs_one_parameter() {
    let dir = tempfile::tempdir().unwrap();
    let out = nines(
        &[
            "sweep",
            "--qd",
            "1,2",
            "-o",
            "x",
            "--",
            "/dev/null",
            "--rw",
            "read",
        ],
        dir.path(),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--rw is set by the sweep"), "{err}");
    let out = nines(&["sweep", "-o", "x"], dir.path());
    assert!(String::from_utf8_lossy(&out.stderr).contains("exactly one of --qd"));
    let out = nines(
        &["sweep", "--qd", "1", "--engines", "psync", "-o", "x"],
        dir.path(),
    );
    assert!(!out.status.success());
    let out = nines(&["sweep", "--qd", "0", "-o", "x"], dir.path());
    assert!(String::from_utf8_lossy(&out.stderr).contains("from 1 to 4096"));
    // Above the points' --iodepth limit: refused up front, no folder made (issue 29).
    let out = nines(&["sweep", "--qd", "1,5000", "-o", "qd5000"], dir.path());
    assert!(String::from_utf8_lossy(&out.stderr).contains("from 1 to 4096"));
    assert!(!dir.path().join("qd5000").exists());
    let out = nines(&["sweep", "--qd", "1"], dir.path());
    assert!(String::from_utf8_lossy(&out.stderr).contains("-o DIR"));
    // Every point failing is an error, and writes no sweep.json/html (issue 15: a failed run
    // leaves no outputs; the error says what the points said).
    let out = nines(
        &[
            "sweep",
            "--qd",
            "1",
            "--rws",
            "randread",
            "-o",
            "bad",
            "--",
            "/nonexistent/dev",
        ],
        dir.path(),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("every point of the sweep failed"));
    assert!(!dir.path().join("bad/sweep.json").exists());
    assert!(!dir.path().join("bad/sweep.html").exists());
    // ... and leaves no folders it made (issue 29).
    assert!(!dir.path().join("bad").exists());
}

#[test]
fn writes_to_a_block_device_without_allow_writes_are_refused_up_front() {
    let z = Zram::new("64M");
    let dir = tempfile::tempdir().unwrap();
    let dev = z.path();
    // The default --rws includes writes.
    let out = nines(
        &[
            "sweep",
            "--qd",
            "1,4",
            "-o",
            "x",
            "--",
            &dev,
            "--runtime",
            "100ms",
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("4 of the sweep's points write")
            && err.contains(&dev)
            && err.contains("add --allow-writes after --")
            && err.contains("--rws read,randread"),
        "{err}"
    );
    assert!(!dir.path().join("x").exists(), "nothing ran");
    // Reads only run.
    ok(
        nines(
            &[
                "sweep",
                "--qd",
                "1",
                "--rws",
                "randread",
                "-o",
                "y",
                "--",
                &dev,
                "--runtime",
                "100ms",
            ],
            dir.path(),
        ),
        "read-only sweep",
    );
}

#[test]
fn a_failed_point_makes_the_sweep_fail_after_writing_the_rest() {
    let z = Zram::new("64M");
    let dir = tempfile::tempdir().unwrap();
    let dev = z.path();
    let out = nines(
        &[
            "sweep",
            "--engines",
            "io_uring,nosuch",
            "--json",
            "e.json",
            "--",
            &dev,
            "--runtime",
            "100ms",
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("nines: 1 of 2 points failed: engine-nosuch ("),
        "{err}"
    );
    let s = read_sweep(&dir.path().join("e.json"));
    assert!(
        s.points[0].metrics.is_some(),
        "io_uring ran and was written"
    );
    assert!(s.points[1].error.is_some());
}

#[test]
fn per_point_options_inline_and_sweep_options_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let target = common::make_file(dir.path(), "t.dat", 4 << 20);
    // No `--`: the target and per-point options follow the sweep's own, and a sweep option
    // written after them (--qd) still belongs to the sweep.
    let args = [
        "sweep",
        "--rws",
        "randread",
        "--json",
        "s.json",
        target.to_str().unwrap(),
        "--runtime",
        "100ms",
        "--bs",
        "8k",
        "--qd",
        "1,2",
    ];
    ok(nines(&args, dir.path()), "sweep");
    let s = read_sweep(&dir.path().join("s.json"));
    assert_eq!(s.parameter, SweepParam::Qd);
    let depths: Vec<u32> = s.points.iter().map(|p| p.iodepth).collect();
    assert_eq!(depths, [1, 2]);
    for p in &s.points {
        let r = p.report.as_ref().expect("the point ran");
        assert_eq!(
            r.config.workload.block_size_bytes, 8192,
            "--bs reached the point"
        );
        assert_eq!(r.config.workload.runtime_ns, Some(100_000_000));
        assert_eq!(r.config.workload.iodepth, p.iodepth);
    }
}

#[test]
fn an_unknown_sim_preset_is_refused_before_any_point_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = nines(
        &[
            "sweep",
            "--qd",
            "1,2",
            "--sim",
            "no-such-ssd",
            "-o",
            "out",
            "--runtime",
            "10ms",
        ],
        dir.path(),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--sim no-such-ssd") && err.contains("available presets"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        !dir.path().join("out").exists(),
        "nothing was created or run"
    );
}
