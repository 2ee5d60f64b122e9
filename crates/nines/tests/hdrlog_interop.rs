//! `--hdr-log` read by HdrHistogram's own tools: the Python `hdrh` reader and the reference (Java)
//! `HistogramLogProcessor` (Debian's libhdrhistogram-java), on logs from `profile` and `sim`. Each
//! must see every measured I/O, no empty interval and no trailing sliver, and interval maxima in
//! the reference writer's unit (ms). The tools come from scripts/setup.sh; a missing one fails.

use std::path::Path;
use std::process::Command;

mod common;
use common::{disk_dir, make_file, nines, ok, s, system_tool, venv_bin};

use nines_core::report::Report;

/// Per tag, from the Python reader: (tag, intervals, I/Os, shortest and longest interval in ms),
/// after checking each entry's max field against its histogram's max.
const READ_WITH_HDRH: &str = r#"
import sys
from hdrh.log import HistogramLogReader
from hdrh.histogram import HdrHistogram
path = sys.argv[1]
maxima = [float(l.split(",")[3]) for l in open(path) if l.startswith("Tag=")]
r = HistogramLogReader(path, HdrHistogram(1, 3600 * 10**9, 3))
tags = {}
i = 0
while True:
    h = r.get_next_interval_histogram()
    if h is None:
        break
    length = h.get_end_time_stamp() - h.get_start_time_stamp()
    count = h.get_total_count()
    # The max field is in ms (written to 3 decimals): the histogram's max in ns / 1e6.
    assert abs(maxima[i] - h.get_max_value() / 1e6) <= 0.0005 + 0.001 * maxima[i], (maxima[i], h.get_max_value())
    i += 1
    t = tags.setdefault(h.get_tag(), [0, 0, 1e18, 0])
    t[0] += 1
    t[1] += count
    t[2] = min(t[2], length)
    t[3] = max(t[3], length)
    assert count > 0, "empty interval for " + h.get_tag()
assert i == len(maxima)
for tag, (n, count, lo, hi) in sorted(tags.items()):
    print(tag, n, count, lo, hi)
"#;

struct TagSummary {
    tag: String,
    intervals: u64,
    ios: u64,
    shortest_ms: f64,
    longest_ms: f64,
}

fn read_with_hdrh(log: &Path) -> Vec<TagSummary> {
    let o = Command::new(venv_bin("python"))
        .args(["-c", READ_WITH_HDRH, s(log)])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "hdrh: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            TagSummary {
                tag: f[0].to_string(),
                intervals: f[1].parse().unwrap(),
                ios: f[2].parse().unwrap(),
                shortest_ms: f[3].parse().unwrap(),
                longest_ms: f[4].parse().unwrap(),
            }
        })
        .collect()
}

/// Total count of one tag per the reference HistogramLogProcessor's percentile output.
fn java_total_count(log: &Path, tag: &str, out: &Path) -> u64 {
    let jar = system_tool("/usr/share/java/hdrhistogram.jar");
    let o = Command::new(system_tool("/usr/bin/java"))
        .arg("-cp")
        .arg(&jar)
        .args([
            "org.HdrHistogram.HistogramLogProcessor",
            "-i",
            s(log),
            "-o",
            s(out),
        ])
        .args(["-tag", tag])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "HistogramLogProcessor: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let hgrm = std::fs::read_to_string(out.with_extension("hgrm")).unwrap();
    // "#[Max     =        1.439, Total count    =        24650]"
    let line = hgrm
        .lines()
        .find(|l| l.contains("Total count"))
        .unwrap_or_else(|| panic!("no total in {hgrm}"));
    line.rsplit('=')
        .next()
        .unwrap()
        .trim_end_matches(']')
        .trim()
        .parse()
        .unwrap()
}

/// Both readers see every measured I/O of every device and direction, nothing empty or short.
fn check(log: &Path, report: &Path, interval_ms: f64, dir: &Path) {
    let r = Report::from_json(&std::fs::read_to_string(report).unwrap()).unwrap();
    let tags = read_with_hdrh(log);
    let mut checked = 0;
    for d in &r.devices {
        for (op, stats) in [("read", &d.read), ("write", &d.write)] {
            if stats.ios == 0 {
                continue;
            }
            let tag = nines_core::stats::hdr_tag(
                &d.name,
                nines_core::op::Op::ALL[usize::from(op == "write")],
            );
            let t = tags
                .iter()
                .find(|t| t.tag == tag)
                .unwrap_or_else(|| panic!("no {tag} in the log"));
            assert_eq!(t.ios, stats.ios, "{tag}: hdrh counts every measured I/O");
            assert!(t.intervals >= 2, "{tag}: {} intervals", t.intervals);
            assert!(
                t.shortest_ms >= interval_ms / 2.0,
                "{tag}: a {} ms sliver was written",
                t.shortest_ms
            );
            assert!(
                t.longest_ms < interval_ms * 1.5 + 1.0,
                "{tag}: {}",
                t.longest_ms
            );
            let out = dir.join(format!("java-{checked}"));
            assert_eq!(
                java_total_count(log, &tag, &out),
                stats.ios,
                "{tag}: HistogramLogProcessor counts every measured I/O"
            );
            checked += 1;
        }
    }
    assert!(checked >= 2, "{checked} tags checked");
}

#[test]
fn profile_hdr_log_reads_in_hdrh_and_the_reference_processor() {
    let dir = disk_dir();
    let a = make_file(dir.path(), "a.dat", 8 << 20);
    let b = make_file(dir.path(), "b.dat", 8 << 20);
    let log = dir.path().join("p.hlog");
    let report = dir.path().join("p.json");
    // 1.05 s in 200 ms intervals: the last 50 ms are a sliver that must join the interval before.
    ok(
        nines(
            &[
                "profile",
                s(&a),
                s(&b),
                "--rw",
                "randread",
                "--runtime",
                "1050ms",
                "--hdr-interval",
                "200ms",
                "--hdr-log",
                s(&log),
                "--json",
                s(&report),
                "--quiet",
            ],
            dir.path(),
        ),
        "nines profile",
    );
    check(&log, &report, 200.0, dir.path());
}

#[test]
fn sim_hdr_log_reads_in_hdrh_and_the_reference_processor() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("s.hlog");
    let report = dir.path().join("s.json");
    ok(
        nines(
            &[
                "sim",
                "--devices",
                "2",
                "--rw",
                "randrw",
                "--mix",
                "70",
                "--runtime",
                "520ms",
                "--hdr-interval",
                "100ms",
                "--hdr-log",
                s(&log),
                "--json",
                s(&report),
                "--quiet",
            ],
            dir.path(),
        ),
        "nines sim",
    );
    check(&log, &report, 100.0, dir.path());
}
