//! `nines compare` end to end on simulated runs (deterministic and fast).

use std::path::Path;

use nines_core::report::Report;

mod common;
use common::{nines, ok};

fn sim(dir: &Path, json: &str, extra: &[&str]) -> Report {
    let mut a = vec!["sim", "--quiet", "--runtime", "200ms", "--json", json];
    a.extend(extra);
    ok(nines(&a, dir), "sim");
    Report::from_json(&std::fs::read_to_string(dir.join(json)).unwrap()).unwrap()
}

#[test]
fn table_ratios_figures_and_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let a = sim(
        dir.path(),
        "qd1.json",
        &["--devices", "3", "--iodepth", "1"],
    );
    let b = sim(
        dir.path(),
        "qd8.json",
        &["--devices", "3", "--iodepth", "8"],
    );
    let c = sim(
        dir.path(),
        "four.json",
        &["--devices", "4", "--iodepth", "1"],
    );
    let out = ok(
        nines(
            &[
                "compare",
                "qd1.json",
                "qd8.json",
                "four.json",
                "-o",
                "cmp.html",
                "--png",
                "png",
            ],
            dir.path(),
        ),
        "compare",
    );
    let table = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    // Header: the baseline, then each run with its ratio column.
    let header = table.lines().next().unwrap();
    let cols: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(cols, ["metric", "qd1", "qd8", "/qd1", "four", "/qd1"]);
    // The p50 row's ratio is exactly the runs' ratio.
    let p50 = |r: &Report| r.aggregate.read.lat_ns.percentiles.get("50").unwrap() as f64;
    let row = table.lines().find(|l| l.starts_with("read p50 ")).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    let want = format!("{}x", nines_report::run::format_ratio(p50(&b) / p50(&a)));
    assert!(cells.contains(&want.as_str()), "{row} lacks {want}");
    let want = format!("{}x", nines_report::run::format_ratio(p50(&c) / p50(&a)));
    assert!(cells.contains(&want.as_str()), "{row} lacks {want}");
    for m in ["read IOPS", "read mean", "read p99.9999", "read max"] {
        assert!(table.lines().any(|l| l.starts_with(m)), "missing {m}");
    }
    // What differs is said.
    assert!(
        err.contains("qd8 differs from qd1 in iodepth (1 vs 8)"),
        "{err}"
    );
    assert!(err.contains("four differs from qd1 in devices"), "{err}");
    let html = std::fs::read_to_string(dir.path().join("cmp.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 3);
    // Each run differs from the first in one thing: what the comparison is about, not a caveat.
    assert!(html.contains("in iodepth (1 vs 8) only: the comparison shows its effect"));
    assert!(!html.contains("compare with care"));
    assert!(
        !html.contains("Warning: qd8 differs"),
        "a note, not a warning"
    );
    assert!(!err.contains("warning: qd8 differs"), "{err}");
    for id in ["compare-read", "compare-mean-read", "compare-stddev-read"] {
        assert!(
            dir.path().join("png").join(format!("{id}.png")).exists(),
            "{id}"
        );
    }
}

#[test]
fn same_setup_no_warning_and_labels() {
    let dir = tempfile::tempdir().unwrap();
    sim(dir.path(), "a.json", &["--devices", "2"]);
    sim(dir.path(), "b.json", &["--devices", "2", "--seed", "9"]);
    let out = ok(
        nines(
            &["compare", "a.json", "b.json", "--labels", "base,new"],
            dir.path(),
        ),
        "compare",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("differs"), "{err}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.lines().next().unwrap().contains("base"));
    let out = nines(
        &["compare", "a.json", "b.json", "--labels", "one"],
        dir.path(),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("one label per run"));
    let out = nines(&["compare", "a.json"], dir.path());
    assert!(!out.status.success(), "one run is not a comparison");
}
