//! `--fio-log` and a job file's `write_lat_log`/`write_bw_log`/`write_iops_log`/
//! `write_hist_log`: fio's own text logs, read by fio's own tools unpatched (Debian's fio ships
//! `fiologparser_hist.py` and `fio-histo-log-pctiles.py` gzipped under /usr/share/doc/fio; the
//! tests unpack them into a temporary directory as they are) and by fio-plot's `-g`, with the
//! numbers of nines' own fio JSON; and the same file set and line shapes as real fio writes for
//! the same job on the same file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{disk_dir, make_file, nines, ok, s, system_tool, venv_bin};

/// One of fio's tools from Debian's package, unpacked unmodified into `dir`.
fn fio_doc_tool(dir: &Path, name: &str) -> PathBuf {
    let gz = system_tool(&format!("/usr/share/doc/fio/{name}.gz"));
    let out = Command::new("gzip").arg("-dc").arg(&gz).output().unwrap();
    assert!(out.status.success(), "gzip -dc {}", gz.display());
    let p = dir.join(name);
    std::fs::write(&p, out.stdout).unwrap();
    p
}

/// Each line of a log as its comma-separated numbers.
fn rows(path: &Path) -> Vec<Vec<u64>> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| l.split(',').map(|c| c.trim().parse().unwrap()).collect())
        .collect()
}

/// The log files in `dir` whose names start with `prefix`, by what follows it.
fn logs(dir: &Path, prefix: &str) -> BTreeMap<String, PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let n = p.file_name()?.to_str()?.to_string();
            n.strip_prefix(prefix)
                .map(|rest| (rest.to_string(), p.clone()))
        })
        .collect()
}

fn python(script: &Path, args: &[&str]) -> String {
    let o = Command::new(venv_bin("python"))
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}: {}{}",
        script.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn fio_logs_are_fios_and_fios_tools_read_them() {
    let dir = disk_dir();
    let d = dir.path();
    let target = make_file(d, "t.dat", 16 << 20);
    let plus = d.join("run.jsonplus");
    let prefix = d.join("randrw-iodepth-4-numjobs-1");
    ok(
        nines(
            &[
                "profile",
                s(&target),
                "--rw",
                "randrw",
                "--iodepth",
                "4",
                "--engine",
                "libaio",
                "--runtime",
                "1s",
                "--quiet",
                "--fio-json-plus",
                s(&plus),
                "--fio-log",
                s(&prefix),
                "--fio-log-hist-msec",
                "100",
            ],
            d,
        ),
        "nines profile --fio-log",
    );
    // Real fio on the same file with the same logs: the same files, lines of the same shape.
    let fio_prefix = d.join("fio");
    let o = Command::new(system_tool("/usr/bin/fio"))
        .args([
            "--name=t",
            &format!("--filename={}", s(&target)),
            "--rw=randrw",
            "--iodepth=4",
            "--ioengine=libaio",
            "--direct=1",
            "--runtime=1",
            "--time_based=1",
            &format!("--write_lat_log={}", s(&fio_prefix)),
            &format!("--write_bw_log={}", s(&fio_prefix)),
            &format!("--write_iops_log={}", s(&fio_prefix)),
            &format!("--write_hist_log={}", s(&fio_prefix)),
            "--log_hist_msec=100",
            "--output=/dev/null",
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "fio: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let ours = logs(d, "randrw-iodepth-4-numjobs-1");
    let theirs = logs(d, "fio");
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>()
    );
    assert_eq!(ours.len(), 6, "{ours:?}");
    for (name, path) in &ours {
        let width = |p: &Path| rows(p).first().map(Vec::len);
        assert_eq!(width(path), width(&theirs[name]), "{name}: columns");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plus).unwrap()).unwrap();
    let job = &v["jobs"][0];
    let n = |dir: &str, k: &str| job[dir][k]["N"].as_u64().unwrap();
    let total = n("read", "lat_ns") + n("write", "lat_ns");
    // A line per I/O in the lat, clat, slat, bw and iops logs, each direction's I/Os as fio's
    // JSON counts them, the min and max of lat as the JSON's.
    for kind in ["lat", "clat", "slat", "bw", "iops"] {
        let r = rows(&ours[&format!("_{kind}.1.log")]);
        assert_eq!(r.len() as u64, total, "{kind}");
        for (ddir, name) in [(0, "read"), (1, "write")] {
            let mine: Vec<&Vec<u64>> = r.iter().filter(|x| x[2] == ddir).collect();
            assert_eq!(mine.len() as u64, n(name, "lat_ns"), "{kind} {name}");
            assert!(mine.iter().all(|x| x[3] == 4096 && x[4] == 0));
            if kind == "lat" {
                let min = mine.iter().map(|x| x[1]).min().unwrap();
                let max = mine.iter().map(|x| x[1]).max().unwrap();
                assert_eq!(min, job[name]["lat_ns"]["min"].as_u64().unwrap());
                assert_eq!(max, job[name]["lat_ns"]["max"].as_u64().unwrap());
            }
            if kind == "clat" {
                let mean = mine.iter().map(|x| x[1] as f64).sum::<f64>() / mine.len() as f64;
                let json = job[name]["clat_ns"]["mean"].as_f64().unwrap();
                assert!(
                    (mean - json).abs() <= 0.01 * json,
                    "clat mean {mean} vs {json}"
                );
            }
        }
        let times: Vec<u64> = r.iter().map(|x| x[0]).collect();
        assert!(*times.last().unwrap() <= 1100, "times in ms from the start");
    }
    // The clat histogram log: fio's 1856 buckets; fio's own parser reads it unpatched and
    // counts the I/Os of its windows; fio-histo-log-pctiles.py too.
    let hist = &ours["_clat_hist.1.log"];
    let h = rows(hist);
    assert!(h.len() >= 10, "{} windows", h.len());
    assert!(h.iter().all(|l| l.len() == 3 + 1856));
    let logged: u64 = h.iter().map(|l| l[3..].iter().sum::<u64>()).sum();
    assert!(logged <= total && logged > total / 2, "{logged} of {total}");
    let parser = fio_doc_tool(d, "fiologparser_hist.py");
    let out = python(&parser, &["--noweight", "-i", "100", s(hist)]);
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').map(str::trim).collect();
    assert_eq!(header[1], "samples", "{out}");
    let samples: u64 = lines
        .map(|l| l.split(',').nth(1).unwrap().trim().parse::<u64>().unwrap())
        .sum();
    assert_eq!(
        samples, logged,
        "fiologparser_hist.py counts what the log holds"
    );
    let pctiles = fio_doc_tool(d, "fio-histo-log-pctiles.py");
    let out = python(&pctiles, &["--log-hist-msec", "100", s(hist)]);
    assert!(out.contains("buckets per interval = 1856"), "{out}");
    // fio-plot -g draws the logs by their fio names (it finds them by rw, depth and jobs).
    let png = d.join("g.png");
    let o = Command::new(venv_bin("fio-plot"))
        .args([
            "-i",
            s(d),
            "-g",
            "-t",
            "lat",
            "iops",
            "bw",
            "-r",
            "randrw",
            "-d",
            "4",
            "-n",
            "1",
            "-T",
            "nines",
            "-o",
            s(&png),
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "fio-plot -g: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(std::fs::metadata(&png).unwrap().len() > 10_000);
}

/// A job file's fio log options write fio's logs beside nines' binary ones, averaged as fio's
/// log_avg_msec averages, offsets in the lines with log_offset.
#[test]
fn a_job_files_log_options_write_fios_logs_beside_nines() {
    let dir = disk_dir();
    let d = dir.path();
    let target = make_file(d, "t.dat", 8 << 20);
    let job = d.join("j.fio");
    std::fs::write(
        &job,
        format!(
            "[global]\nfilename={}\nruntime=1\ntime_based\nwrite_lat_log=run\n\
             write_iops_log=run\nlog_avg_msec=100\nlog_offset=1\n[r]\nrw=randread\n",
            s(&target)
        ),
    )
    .unwrap();
    ok(
        nines(&["profile", "--job", s(&job), "--quiet"], d),
        "nines profile --job",
    );
    let found = logs(d, "run");
    assert_eq!(
        found.keys().collect::<Vec<_>>(),
        [
            ".lat",
            "_clat.1.log",
            "_iops.1.log",
            "_lat.1.log",
            "_slat.1.log"
        ],
        "nines' binary log beside fio's text logs"
    );
    let lat = rows(&found["_lat.1.log"]);
    // About ten 100 ms windows, each a mean with bs and offset 0, times 100 ms apart.
    assert!((8..=12).contains(&lat.len()), "{lat:?}");
    assert!(
        lat.iter()
            .all(|l| l.len() == 6 && l[2] == 0 && l[3] == 0 && l[4] == 0)
    );
    let iops = rows(&found["_iops.1.log"]);
    let times: Vec<u64> = iops.iter().map(|l| l[0]).collect();
    assert_eq!(
        times,
        (1..=times.len() as u64)
            .map(|k| k * 100)
            .collect::<Vec<_>>()
    );
    assert!(iops.iter().all(|l| l[1] > 0));
}

/// --fio-log's files follow the output policy: a derived name that is a symlink (or anything
/// not a regular file) is refused in one line before the run, as is a name that is the run's
/// own target; nothing is written.
#[test]
fn fio_log_refuses_what_nobody_named() {
    let dir = disk_dir();
    let d = dir.path();
    let target = make_file(d, "t.dat", 4 << 20);
    let keep = make_file(d, "keep.dat", 4096);
    std::os::unix::fs::symlink(&keep, d.join("p_lat.1.log")).unwrap();
    let before = std::fs::read(&keep).unwrap();
    let o = nines(
        &[
            "profile",
            s(&target),
            "--runtime",
            "100ms",
            "--quiet",
            "--fio-log",
            s(&d.join("p")),
        ],
        d,
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("is not a regular file") && err.lines().count() == 1,
        "{err}"
    );
    assert_eq!(std::fs::read(&keep).unwrap(), before);
    assert!(!d.join("p_clat.1.log").exists());
    // The target as a log: refused as the run's own target, the target untouched.
    let own = make_file(d, "t_lat.1.log", 4 << 20);
    let before = std::fs::read(&own).unwrap();
    let o = nines(
        &[
            "profile",
            s(&own),
            "--runtime",
            "100ms",
            "--quiet",
            "--fio-log",
            s(&d.join("t")),
        ],
        d,
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("target") && err.contains("t_lat.1.log"),
        "{err}"
    );
    assert_eq!(std::fs::read(&own).unwrap(), before);
    assert!(!d.join("t_clat.1.log").exists());
    let o = nines(
        &[
            "profile",
            s(&target),
            "--fio-log-kinds",
            "lat,tail",
            "--fio-log",
            "x",
        ],
        d,
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("lat,bw,iops,hist"));
}
