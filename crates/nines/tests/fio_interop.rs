//! nines' fio-format exports read by the fio ecosystem's own tools: the key structure diffed
//! against real fio 3.33 output of the same job, fio-plot drawing `--fio-json`, and fio's
//! `fio_jsonplus_clat2csv` turning `--fio-json-plus` bins into CSV. The tools come from
//! scripts/setup.sh (fio from Debian, the Python ones pinned in a venv); a missing tool fails.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

mod common;
use common::{disk_dir, make_file, nines, ok, s, system_tool, venv_bin};
use nines_core::report::Report;

/// `path -> keys` of a fio-format file, from tests/fio_keys.py (Python keeps the file's order).
fn key_structure(file: &Path) -> BTreeMap<String, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fio_keys.py");
    let out = Command::new(venv_bin("python"))
        .arg(&script)
        .arg(file)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "fio_keys.py {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(p, k)| (p.to_string(), k.to_string()))
        .collect()
}

/// The job both fio and nines run: options in the order nines writes them, so the job options
/// must come out identical too.
const SIZE: &str = "16777216";

#[test]
fn fio_json_plus_has_fio_3_33s_keys_in_fios_order() {
    let fio = system_tool("/usr/bin/fio");
    let dir = disk_dir();
    let target = make_file(dir.path(), "t.dat", 16 << 20);
    let fio_out = dir.path().join("fio.json");
    let o = Command::new(fio)
        .args([
            "--name=t.dat",
            &format!("--filename={}", s(&target)),
            &format!("--size={SIZE}"),
            "--rw=randrw",
            "--rwmixread=70",
            "--bs=4096",
            "--iodepth=4",
            "--ioengine=libaio",
            "--direct=1",
            "--runtime=1",
            "--time_based=1",
            "--numjobs=1",
            "--slat_percentiles=0",
            "--clat_percentiles=1",
            "--lat_percentiles=0",
            "--percentile_list=1:5:10:20:30:40:50:60:70:80:90:95:99:99.5:99.9:99.95:99.99:99.999:99.9999",
            "--output-format=json+",
            &format!("--output={}", s(&fio_out)),
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "fio: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let plus = dir.path().join("nines.jsonplus");
    ok(
        nines(
            &[
                "profile",
                s(&target),
                "--size",
                SIZE,
                "--rw",
                "randrw",
                "--mix",
                "70",
                "--bs",
                "4k",
                "--iodepth",
                "4",
                "--engine",
                "libaio",
                "--runtime",
                "1s",
                "--quiet",
                "--fio-json-plus",
                s(&plus),
            ],
            dir.path(),
        ),
        "nines profile",
    );
    let theirs = key_structure(&fio_out);
    let ours = key_structure(&plus);
    // Every object fio writes, nines writes with the same keys in the same order: the queue
    // depth distributions and fio's default percentiles under clat_ns included.
    let mut compared = 0;
    for (path, keys) in &theirs {
        if path.starts_with("/disk_util") {
            continue;
        }
        let expected: Vec<&str> = keys.split(',').collect();
        let got = ours
            .get(path)
            .unwrap_or_else(|| panic!("nines lacks {path} ({keys})"));
        // Job options included: values differ in spelling (fio keeps what it was given), keys
        // and their order must not.
        assert_eq!(got.split(',').collect::<Vec<_>>(), expected, "{path}");
        compared += 1;
    }
    assert!(
        compared >= 20,
        "only {compared} objects compared: {theirs:?}"
    );
    // Percentiles and bins are in numeric order, where nines has them (the directions with I/O).
    for (path, keys) in &ours {
        if path.ends_with("/percentile") || path.ends_with("/bins") {
            assert_eq!(keys, "#numeric", "{path}");
        }
    }
    assert!(ours.contains_key("/jobs[0]/read/clat_ns/bins"), "{ours:?}");
    assert!(ours.contains_key("/jobs[0]/write/clat_ns/percentile"));
    assert!(!ours.contains_key("/jobs[0]/read/lat_ns/percentile"));
    assert!(theirs.contains_key("/jobs[0]/read/clat_ns/bins"));
    assert!(ours.contains_key("/jobs[0]/iodepth_level"));
}

/// The fio JSON of one profile run: `--fio-json-plus` and nines' own `--json` report.
fn profile_fio(dir: &Path, target: &str, extra: &[&str]) -> (serde_json::Value, Report) {
    let plus = dir.join("run.jsonplus");
    let json = dir.join("run.json");
    let mut args = vec![
        "profile",
        target,
        "--quiet",
        "--fio-json-plus",
        s(&plus),
        "--json",
        s(&json),
    ];
    args.extend_from_slice(extra);
    ok(nines(&args, dir), "nines profile");
    let v = serde_json::from_str(&std::fs::read_to_string(&plus).unwrap()).unwrap();
    let r = Report::from_json(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (v, r)
}

/// A script written for fio's default output reads `clat_ns.percentile["99.000000"]`: it finds
/// it, with the value nines' own report has for clat p99; slat, clat and lat are fio's on zram
/// (libaio: zram completes inside io_submit, so slat holds the I/O and clat the reap that found
/// it, never a constant 1 ns) and psync (no slat, as fio writes for its sync engines).
#[test]
fn a_fio_script_reads_clat_percentiles_as_fio_defines_clat() {
    let dir = disk_dir();
    let zram = common::Zram::new("64M");
    let script = "import json,sys\n\
                  j=json.load(open(sys.argv[1]))['jobs'][0]\n\
                  print(j['read']['clat_ns']['percentile']['99.000000'])\n";
    for engine in ["libaio", "psync"] {
        let (v, r) = profile_fio(
            dir.path(),
            &zram.path(),
            &[
                "--rw",
                "randread",
                "--iodepth",
                "2",
                "--engine",
                engine,
                "--runtime",
                "400ms",
            ],
        );
        let path = dir.path().join("run.jsonplus");
        let o = Command::new(venv_bin("python"))
            .args(["-c", script, s(&path)])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let p99: u64 = String::from_utf8(o.stdout).unwrap().trim().parse().unwrap();
        let d = &r.devices[0].read;
        let clat = d.clat_ns.as_ref().expect("clat measured");
        assert_eq!(p99, clat.percentiles.get("99").unwrap(), "{engine}");
        let j = &v["jobs"][0];
        let rd = &j["read"];
        assert_eq!(rd["clat_ns"]["N"], d.ios, "{engine}: every I/O has a clat");
        assert_eq!(rd["clat_ns"]["min"], clat.min_ns);
        assert!(
            rd["lat_ns"].get("percentile").is_none(),
            "fio's default: lat_percentiles=0"
        );
        assert!(rd["slat_ns"].get("percentile").is_none());
        let bins: u64 = rd["clat_ns"]["bins"]
            .as_object()
            .unwrap()
            .values()
            .map(|c| c.as_u64().unwrap())
            .sum();
        assert_eq!(bins, d.ios, "{engine}: json+ bins hold every clat");
        let clat_max = rd["clat_ns"]["max"].as_u64().unwrap();
        let clat_min = rd["clat_ns"]["min"].as_u64().unwrap();
        assert!(
            clat_min >= 1 && clat_max > clat_min,
            "{engine}: clat {clat_min}..{clat_max}"
        );
        assert_eq!(j["job options"]["clat_percentiles"], "1");
        assert_eq!(j["job options"]["time_based"], "1");
        // One I/O in flight at a time per submission, two at most: fio's depth buckets.
        let level = j["iodepth_level"].as_object().unwrap();
        let sum: f64 = level.values().map(|x| x.as_f64().unwrap()).sum();
        assert!((sum - 100.0).abs() < 0.2, "{engine}: {level:?}");
        assert_eq!(
            level["4"], 0.0,
            "{engine}: never more than 2 in flight: {level:?}"
        );
        assert_eq!(
            j["iodepth_submit"]["4"], 100.0,
            "each submit carries one I/O"
        );
        let clat_mean = rd["clat_ns"]["mean"].as_f64().unwrap();
        let lat_mean = rd["lat_ns"]["mean"].as_f64().unwrap();
        if engine == "psync" {
            assert_eq!(rd["slat_ns"]["N"], 0, "psync: no slat, as fio");
            assert_eq!(level["1"], 100.0, "psync: one I/O at a time");
            assert!(clat_mean <= lat_mean && clat_mean > 0.9 * lat_mean);
        } else {
            assert_eq!(rd["slat_ns"]["N"], d.ios);
            let slat_mean = rd["slat_ns"]["mean"].as_f64().unwrap();
            // Per I/O slat + clat = lat (no --rate-iops): the means agree.
            assert!(
                (slat_mean + clat_mean - lat_mean).abs() <= 1.0 + lat_mean * 1e-9,
                "slat {slat_mean} + clat {clat_mean} vs lat {lat_mean}"
            );
        }
    }
    // Asked for, lat and slat carry percentiles too (fio's lat_percentiles, slat_percentiles).
    let (v, _) = profile_fio(
        dir.path(),
        &zram.path(),
        &[
            "--rw",
            "randread",
            "--runtime",
            "200ms",
            "--fio-percentiles",
            "slat,lat",
        ],
    );
    let rd = &v["jobs"][0]["read"];
    assert!(rd["lat_ns"]["percentile"]["99.000000"].is_u64());
    assert!(rd["slat_ns"]["percentile"]["99.000000"].is_u64());
    assert!(rd["clat_ns"].get("percentile").is_none());
    let e = nines(
        &[
            "profile",
            &zram.path(),
            "--runtime",
            "100ms",
            "--fio-percentiles",
            "tail",
        ],
        dir.path(),
    );
    assert!(!e.status.success());
    assert!(String::from_utf8_lossy(&e.stderr).contains("give slat, clat, lat"));
}

/// A PNG's width and height from its IHDR chunk, checking the signature.
fn png_size(path: &Path) -> (u32, u32) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        &b[..8],
        b"\x89PNG\r\n\x1a\n",
        "{} is no PNG",
        path.display()
    );
    let be = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    (be(16), be(20))
}

fn fio_plot(input: &Path, out: &Path, graph: &str, rw: &str, depths: &[&str]) {
    let o = Command::new(venv_bin("fio-plot"))
        .env("MPLBACKEND", "Agg")
        .args([
            "-i",
            s(input),
            "-T",
            "nines",
            graph,
            "-r",
            rw,
            "-n",
            "1",
            "-d",
        ])
        .args(depths)
        .args(["-f", "read", "-o", s(out)])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "fio-plot {graph}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let (w, h) = png_size(out);
    assert!(w >= 1000 && h >= 600, "{w}x{h}");
    // A drawn chart, not an empty canvas: tens of kilobytes of compressed pixels.
    let len = std::fs::metadata(out).unwrap().len();
    assert!(len > 20_000, "{} is only {len} bytes", out.display());
}

#[test]
fn fio_plot_draws_nines_fio_json_from_profile_and_sim() {
    let dir = disk_dir();
    let target = make_file(dir.path(), "t.dat", 8 << 20);
    // Two queue depths in one directory: fio-plot's QD chart picks each by its job options.
    let runs = dir.path().join("runs");
    std::fs::create_dir(&runs).unwrap();
    for qd in ["1", "4"] {
        let out = runs.join(format!("qd{qd}.json"));
        ok(
            nines(
                &[
                    "profile",
                    s(&target),
                    "--rw",
                    "randread",
                    "--iodepth",
                    qd,
                    "--runtime",
                    "500ms",
                    "--quiet",
                    "--fio-json",
                    s(&out),
                ],
                dir.path(),
            ),
            "nines profile",
        );
    }
    fio_plot(
        &runs,
        &dir.path().join("qd.png"),
        "-l",
        "randread",
        &["1", "4"],
    );
    fio_plot(
        &runs,
        &dir.path().join("hist.png"),
        "-H",
        "randread",
        &["4"],
    );

    // Two simulated devices at 70/30, per target and then under --fio-group-reporting (the two
    // devices one fio job carrying the run's I/O-weighted mean, which fio-plot's -l draws).
    let sim_run = |extra: &[&str], what: &str| {
        let mut args = vec![
            "sim",
            "--devices",
            "2",
            "--rw",
            "randrw",
            "--mix",
            "70",
            "--iodepth",
            "2",
            "--runtime",
            "50ms",
            "--quiet",
        ];
        args.extend_from_slice(extra);
        ok(nines(&args, dir.path()), what);
    };
    let sim = dir.path().join("sim");
    std::fs::create_dir(&sim).unwrap();
    sim_run(&["--fio-json", s(&sim.join("sim.json"))], "nines sim");
    fio_plot(&sim, &dir.path().join("sim.png"), "-l", "randrw", &["2"]);

    let grouped = dir.path().join("grouped");
    std::fs::create_dir(&grouped).unwrap();
    let nines_json = dir.path().join("grouped-nines.json");
    let fio_path = grouped.join("sim.json");
    sim_run(
        &[
            "--fio-group-reporting",
            "--json",
            s(&nines_json),
            "--fio-json",
            s(&fio_path),
        ],
        "nines sim --fio-group-reporting",
    );
    let fio: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&fio_path).unwrap()).unwrap();
    let own: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&nines_json).unwrap()).unwrap();
    assert_eq!(fio["jobs"].as_array().unwrap().len(), 1);
    for op in ["read", "write"] {
        let a = fio["jobs"][0][op]["lat_ns"]["mean"].as_f64().unwrap();
        let b = own["aggregate"][op]["lat_ns"]["mean_ns"].as_f64().unwrap();
        assert!(
            (a - b).abs() <= 1e-6 * b.max(1.0),
            "{op}: fio {a} vs nines {b}"
        );
    }
    fio_plot(
        &grouped,
        &dir.path().join("grouped.png"),
        "-l",
        "randrw",
        &["2"],
    );
}

#[test]
fn fio_jsonplus_clat2csv_reads_the_bins() {
    let tool = system_tool("/usr/bin/fio_jsonplus_clat2csv");
    let dir = disk_dir();
    let plus = dir.path().join("sim.jsonplus");
    let report = dir.path().join("sim.json");
    ok(
        nines(
            &[
                "sim",
                "--devices",
                "1",
                "--rw",
                "randrw",
                "--mix",
                "60",
                "--runtime",
                "50ms",
                "--quiet",
                "--fio-json-plus",
                s(&plus),
                "--json",
                s(&report),
            ],
            dir.path(),
        ),
        "nines sim",
    );
    let csv = dir.path().join("lat.csv");
    for validate in [false, true] {
        let mut cmd = Command::new(venv_bin("python"));
        cmd.arg(&tool).arg(&plus).arg(&csv);
        if validate {
            cmd.arg("--validate");
        }
        let o = cmd.output().unwrap();
        assert!(
            o.status.success(),
            "fio_jsonplus_clat2csv: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // One CSV per job: a header and a row per latency value, cumulative counts reaching N.
    let text = std::fs::read_to_string(dir.path().join("lat_job0.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .unwrap()
        .split(',')
        .map(|c| c.trim().to_string())
        .collect();
    let rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(|c| c.trim().to_string()).collect())
        .collect();
    assert!(rows.len() > 10, "only {} rows", rows.len());
    let r =
        nines_core::report::Report::from_json(&std::fs::read_to_string(&report).unwrap()).unwrap();
    for (dir_name, stats) in [("read", &r.devices[0].read), ("write", &r.devices[0].write)] {
        let col = header
            .iter()
            .position(|h| *h == format!("{dir_name}_lat_ns_cumulative"))
            .unwrap();
        let last = rows
            .iter()
            .filter_map(|row| row.get(col).and_then(|c| c.parse::<u64>().ok()))
            .max()
            .unwrap();
        assert!(stats.ios > 0);
        assert_eq!(last, stats.ios, "{dir_name}: cumulative count reaches N");
        let pct = header
            .iter()
            .position(|h| *h == format!("{dir_name}_lat_ns_percentile"))
            .unwrap();
        let top = rows
            .iter()
            .filter_map(|row| row.get(pct).and_then(|c| c.parse::<f64>().ok()))
            .fold(0.0, f64::max);
        // The script writes percentiles as fractions of 1.
        assert!((top - 1.0).abs() < 1e-9, "{dir_name}: top percentile {top}");
    }
    // A profile run: the bins are clat's (fio's default), in fio's buckets; the script's
    // cumulative clat count reaches the clat N of nines' own report, and each row's value is one
    // of fio's bucket values.
    let target = make_file(dir.path(), "t.dat", 8 << 20);
    let (_, r) = profile_fio(
        dir.path(),
        s(&target),
        &["--rw", "randread", "--iodepth", "4", "--runtime", "300ms"],
    );
    let plus = dir.path().join("run.jsonplus");
    let o = Command::new(venv_bin("python"))
        .arg(&tool)
        .arg(&plus)
        .arg(&csv)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(dir.path().join("lat_job0.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .unwrap()
        .split(',')
        .map(|c| c.trim().to_string())
        .collect();
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let (cum, nsec) = (col("read_clat_ns_cumulative"), col("nsec"));
    let rows: Vec<Vec<u64>> = lines
        .map(|l| {
            l.split(',')
                .map(|c| c.trim().parse::<f64>().map_or(0, |x| x as u64))
                .collect()
        })
        .collect();
    let clat = r.devices[0].read.clat_ns.as_ref().expect("clat measured");
    assert_eq!(
        rows.iter().map(|row| row[cum]).max().unwrap(),
        r.devices[0].read.ios
    );
    for row in &rows {
        let v = row[nsec];
        let fio_value = nines_report::fio::fio_plat_val(nines_report::fio::fio_plat_idx(v));
        assert_eq!(fio_value, v, "{v} is one of fio's bucket values");
    }
    assert!(rows.iter().map(|row| row[nsec]).max().unwrap() >= clat.max_ns / 2);
}
