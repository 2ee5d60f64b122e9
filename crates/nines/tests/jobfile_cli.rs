//! `nines profile --job FILE.fio` and `nines sim --job FILE.fio`: every example job file of
//! Debian's fio package (installed by scripts/setup.sh as fio-examples) either runs or is refused
//! with one error that names, by line, each option nines does not run.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

mod common;
use common::{disk_dir, make_file, nines, s};

const EXAMPLES: &str = "/usr/share/doc/fio/examples";

/// The options the issue asks `--job` to run (fio's latency subset), with fio's other names for
/// them and the ones nines takes besides. Anything else in a file must be named in its refusal.
const SUBSET: &[&str] = &[
    "filename",
    "rw",
    "readwrite",
    "rwmixread",
    "rwmixwrite",
    "bs",
    "blocksize",
    "bsrange",
    "blocksize_range",
    "iodepth",
    "ioengine",
    "direct",
    "buffered",
    "runtime",
    "timeout",
    "time_based",
    "ramp_time",
    "size",
    "io_size",
    "io_limit",
    "number_ios",
    "offset",
    "numjobs",
    "cpus_allowed",
    "rate_iops",
    "rate_process",
    "thinktime",
    "percentile_list",
    "write_lat_log",
    "write_hist_log",
    "write_bw_log",
    "write_iops_log",
    "log_avg_msec",
    "log_hist_msec",
    "log_hist_coarseness",
    "log_max_value",
    "log_offset",
    "random_distribution",
    "randseed",
    "group_reporting",
    "name",
    "description",
    "thread",
    "threads",
    "thinktime_blocks",
    "norandommap",
    "zonemode",
    "zonesize",
    "zonecapacity",
    "max_open_zones",
    "zone_reset_threshold",
    "zone_reset_frequency",
    "read_beyond_wp",
];

/// One option line of a job file as fio reads it: (line number, key, the option as written).
fn options(text: &str) -> Vec<(usize, String, String)> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        // fio ends a line at `;` or `#` after white space.
        let mut end = raw.len();
        for (k, c) in raw.char_indices().skip(1) {
            if (c == ';' || c == '#')
                && raw[..k]
                    .chars()
                    .last()
                    .is_some_and(|p| p.is_ascii_whitespace())
            {
                end = k;
                break;
            }
        }
        let t = raw[..end].trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with(';') || t.starts_with('[') {
            continue;
        }
        let key = t.split('=').next().unwrap().trim().to_ascii_lowercase();
        let written = match t.split_once('=') {
            Some((k, v)) => format!("{}={}", k.trim().to_ascii_lowercase(), v.trim()),
            None => key.clone(),
        };
        out.push((i + 1, key, written));
    }
    out
}

/// The job sections of a file, in order.
fn sections(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix('['))
        .filter_map(|l| l.strip_suffix(']'))
        .filter(|n| *n != "global")
        .map(str::to_string)
        .collect()
}

/// `line N `opt`` pairs named in a refusal.
fn named(err: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut rest = err;
    while let Some(i) = rest.find("line ") {
        rest = &rest[i + 5..];
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        let Ok(n) = digits.parse::<usize>() else {
            continue;
        };
        let after = &rest[digits.len()..];
        if let Some(a) = after.strip_prefix(" `")
            && let Some(end) = a.find('`')
        {
            out.push((n, a[..end].to_string()));
        }
    }
    out
}

fn examples() -> Vec<PathBuf> {
    let dir = Path::new(EXAMPLES);
    assert!(
        dir.is_dir(),
        "{EXAMPLES} is missing: run `bash scripts/setup.sh` (it installs fio-examples)"
    );
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "fio"))
        .collect();
    v.sort();
    assert!(v.len() >= 50, "only {} example job files", v.len());
    v
}

#[test]
fn every_debian_fio_example_runs_or_is_refused_option_by_option() {
    let dir = disk_dir();
    // A file of real bytes replaces each example's filename= (block devices such as /dev/sda
    // must never be touched by a test), 1 MiB of it used, 200 ms measured.
    let target = make_file(dir.path(), "target", 2 << 20);
    let (mut ran, mut refused_by_option, mut refused_otherwise) = (0, 0, Vec::new());
    for path in examples() {
        let text = std::fs::read_to_string(&path).unwrap();
        let opts = options(&text);
        let out = nines(
            &[
                "profile",
                "--job",
                s(&path),
                "--runtime",
                "200ms",
                "--size",
                "1m",
                "--no-mlock",
                "-q",
                "--json",
                "r.json",
                s(&target),
            ],
            dir.path(),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        let name = path.file_name().unwrap().to_string_lossy();
        let outside: BTreeSet<(usize, String)> = opts
            .iter()
            .filter(|(_, k, _)| !SUBSET.contains(&k.as_str()))
            .map(|(l, _, w)| (*l, w.clone()))
            .collect();
        if out.status.success() {
            // Every job section ran and measured I/O (numjobs clones as NAME.k).
            assert!(outside.is_empty(), "{name} ran with {outside:?}");
            let json = dir.path().join("r.json");
            let r: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
            std::fs::remove_file(&json).unwrap();
            let jobs = r["jobs"].as_array().unwrap();
            for sec in sections(&text) {
                let job = sec.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_");
                let j = jobs.iter().find(|j| j["name"] == job.as_str());
                let Some(j) = j else {
                    panic!("{name}: job {job} missing from {jobs:?}")
                };
                let ios = j["read"]["ios"].as_u64().unwrap() + j["write"]["ios"].as_u64().unwrap();
                assert!(ios > 0, "{name}: job {job} did no I/O");
            }
            ran += 1;
            continue;
        }
        // The note that the test's target replaces the file's filename= comes first when the
        // file itself parsed and the run was refused (zonemode=zbd on a regular file).
        let err = stderr
            .lines()
            .filter(|l| !l.contains("the targets on the command line replace filename="))
            .collect::<Vec<_>>()
            .join("\n");
        let err = err.trim();
        assert_eq!(err.lines().count(), 1, "{name}: not one line: {err}");
        // A file that parsed may still not fit the test's 2 MiB stand-in (zbd-seq-read.fio's
        // offset is 131 GiB in); everything else names the file.
        assert!(
            err.contains(&format!("--job {}", path.display()))
                || (outside.is_empty() && err.contains("but the workload needs")),
            "{err}"
        );
        let listed: BTreeSet<(usize, String)> = named(err).into_iter().collect();
        if listed.is_empty() {
            // Refused as a whole (no end, jobs that disagree, an include): only when every
            // option is one nines runs.
            assert!(
                outside.is_empty(),
                "{name}: {outside:?} not named in: {err}"
            );
            refused_otherwise.push(format!("{name}: {err}"));
            continue;
        }
        // Each option outside the subset is named at its line, and everything named is an
        // option written at that line.
        for o in &outside {
            assert!(listed.contains(o), "{name}: {o:?} not named in: {err}");
        }
        for (line, opt) in &listed {
            assert!(
                opts.iter().any(|(l, _, w)| l == line && w == opt) || opt.starts_with("include"),
                "{name}: named line {line} `{opt}`, which the file does not hold: {err}"
            );
        }
        refused_by_option += 1;
    }
    eprintln!(
        "ran {ran}, refused option by option {refused_by_option}, refused as a whole {}:\n{}",
        refused_otherwise.len(),
        refused_otherwise.join("\n")
    );
    assert!(ran >= 5, "only {ran} examples ran");
    assert!(refused_by_option >= 40);
}

#[test]
fn a_job_file_sets_jobs_logs_percentiles_and_targets() {
    let dir = disk_dir();
    make_file(dir.path(), "a.dat", 1 << 20);
    make_file(dir.path(), "b.dat", 1 << 20);
    let job = dir.path().join("lat.fio");
    std::fs::write(
        &job,
        "; two devices, two jobs\n[global]\nfilename=a.dat:b.dat\nioengine=psync\ndirect=1\n\
         time_based\nruntime=1  ; replaced by --runtime\npercentile_list=50:99.5\n\
         write_hist_log=lat\nlog_hist_msec=100\n\n[reads]\nrw=randread\nbs=8k\n\
         [writes]\nrw=randwrite\nbs=4k\nrate_iops=200\n",
    )
    .unwrap();
    let out = nines(
        &[
            "profile",
            "--job",
            "lat.fio",
            "--runtime",
            "300ms",
            "--no-mlock",
            "--json",
            "r.json",
        ],
        dir.path(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("engine psync"), "{stdout}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap()).unwrap();
    let devices: Vec<&str> = r["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(devices, ["a.dat", "b.dat"]);
    assert_eq!(r["config"]["percentiles"], serde_json::json!([50.0, 99.5]));
    assert_eq!(r["config"]["workload"]["runtime_ns"], 300_000_000);
    let jobs: Vec<&str> = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(jobs, ["reads", "writes"]);
    // rate_iops=200 per target for 0.3 s: about 60 writes on each, far fewer than the reads.
    let writes = r["jobs"][1]["write"]["ios"].as_u64().unwrap();
    assert!((2 * 40..=2 * 80).contains(&writes), "{writes} writes");
    // The interval log, named by the file, in 100 ms intervals.
    let hlog = std::fs::read_to_string(dir.path().join("lat.hlog")).unwrap();
    let intervals = hlog
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('"') && l.contains(','))
        .filter(|l| l.starts_with("Tag="))
        .count();
    assert!(intervals >= 2 * 2, "{hlog}");
}

#[test]
fn sim_runs_a_job_file_with_one_device_per_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = nines(
        &[
            "sim",
            "--job",
            &format!("{EXAMPLES}/fio-rand-RW.fio"),
            "--runtime",
            "20ms",
            "--size",
            "64m",
            "--precondition",
            "none",
            "--json",
            "r.json",
        ],
        dir.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("ioengine, direct=0 not used"),
        "the simulator says what it does not use: {stderr}"
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap()).unwrap();
    let jobs: Vec<&str> = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(jobs, ["file1", "file1.1", "file1.2", "file1.3"]);
    assert_eq!(r["jobs"][0]["workload"]["read_mix_pct"], 60);
    assert_eq!(r["jobs"][0]["workload"]["iodepth"], 16);
    assert_eq!(r["devices"].as_array().unwrap().len(), 1);
    // A refused file refuses the simulated run the same way, before anything runs.
    let out = nines(
        &["sim", "--job", &format!("{EXAMPLES}/latency-profile.fio")],
        dir.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("line 14 `latency_target=500000`"),
        "{stderr}"
    );
}

#[test]
fn job_file_mistakes_are_one_line_each() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ok.fio"), "[a]\nruntime=1\n").unwrap();
    for (args, want) in [
        (&["--job", "missing.fio"][..], "missing.fio: cannot read"),
        (
            &["--job", "ok.fio", "--job", "b:rw=read"],
            "one job file and no other --job",
        ),
    ] {
        let mut a = vec!["profile"];
        a.extend_from_slice(args);
        let out = nines(&a, dir.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

/// One meaning for a think time: a fio job file's bare `thinktime=100` is 100 µs (fio's unit), and
/// the command line and `--job` refuse a bare number instead of reading it as 100 seconds.
#[test]
fn a_bare_thinktime_means_fio_microseconds_in_a_job_file_and_is_refused_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["sim", "--thinktime", "100", "--ios", "10"][..],
        &["sim", "--job", "j:rw=randread,thinktime=100", "--ios", "10"][..],
    ] {
        let out = nines(args, dir.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} ran: {stderr}");
        assert!(stderr.contains("give a unit"), "{args:?}: {stderr}");
    }
    std::fs::write(
        dir.path().join("t.fio"),
        "[global]\nrw=randread\nbs=4k\nnumber_ios=20\n[t]\nthinktime=100\n",
    )
    .unwrap();
    let out = nines(
        &[
            "sim",
            "--job",
            "t.fio",
            "--precondition",
            "none",
            "--quiet",
            "--json",
            "t.json",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("t.json")).unwrap()).unwrap();
    assert_eq!(r["jobs"][0]["workload"]["thinktime_ns"], 100_000);
    // With a unit, the command line means what it says.
    let out = nines(
        &[
            "sim",
            "--thinktime",
            "100us",
            "--ios",
            "20",
            "--precondition",
            "none",
            "--quiet",
            "--json",
            "c.json",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("c.json")).unwrap()).unwrap();
    assert_eq!(r["jobs"][0]["workload"]["thinktime_ns"], 100_000);
}

/// A job file that names no ioengine and no direct runs as fio would run it, psync through the
/// page cache, and the report says that fio's defaults applied; `--direct` (fio's name) replaces
/// the file's default, and `--filename` (fio's) names the targets.
#[test]
fn a_job_file_gets_fios_defaults_and_the_report_says_so() {
    let dir = disk_dir();
    let target = make_file(dir.path(), "t.img", 2 << 20);
    std::fs::write(
        dir.path().join("j.fio"),
        "[j]\nrw=randread\nruntime=100ms\ntime_based\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let mut a = vec![
            "profile",
            "--job",
            "j.fio",
            "--no-mlock",
            "-q",
            "--json",
            "r.json",
        ];
        a.extend_from_slice(extra);
        let out = nines(&a, dir.path());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap())
                .unwrap();
        let said: Vec<String> = r["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|w| {
                w.as_str()
                    .filter(|w| w.contains("fio's defaults"))
                    .map(String::from)
            })
            .collect();
        (r["config"]["engine"].as_str().unwrap().to_string(), said)
    };
    let (engine, said) = run(&[s(&target)]);
    assert_eq!(engine, "psync");
    assert!(
        said.len() == 1 && said[0].contains("ioengine=psync, direct=0 (buffered)"),
        "{said:?}"
    );
    let (engine, said) = run(&["--direct", "--engine", "libaio", "--filename", s(&target)]);
    assert_eq!((engine.as_str(), said.len()), ("libaio", 0), "{said:?}");
    let (_, said) = run(&["--direct=1", s(&target)]);
    assert!(said.len() == 1 && !said[0].contains("direct=0"), "{said:?}");
}
