//! Robustness and safety of every verb (issue 15): what hostile runs found, kept fixed. Outputs
//! that are not regular files, libblkid refusals and exclusive opens on zram devices the tests
//! create, one output policy for every verb.

mod common;

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_nines");

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn fails(o: std::process::Output) -> String {
    assert!(
        !o.status.success(),
        "expected a failure; stdout: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    let e = stderr(&o);
    assert!(!e.contains("panicked"), "{e}");
    e
}

/// A private character device node (like /dev/null or /dev/full) in `dir`, so that a bug that
/// renames over it damages only the test's own node.
fn char_node(dir: &Path, name: &str, minor: u32) -> PathBuf {
    let p = dir.join(name);
    let st = Command::new("mknod")
        .arg(&p)
        .args(["c", "1", &minor.to_string()])
        .status()
        .expect("mknod");
    assert!(st.success(), "mknod needs root");
    p
}

fn is_char_device(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_char_device())
}

/// A small simulated run's JSON and per-I/O log in `dir`.
fn sim_run(dir: &Path) -> (PathBuf, PathBuf) {
    let json = dir.join("s.json");
    let lat = dir.join("s.lat");
    ok(
        nines(
            &[
                "sim",
                "--quiet",
                "--ios",
                "2000",
                "--json",
                s(&json),
                "--lat-log",
                s(&lat),
            ],
            dir,
        ),
        "sim",
    );
    (json, lat)
}

#[test]
fn non_regular_outputs_are_written_in_place_and_never_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let (json, lat) = sim_run(dir.path());
    let full = char_node(dir.path(), "full", 7);
    let null = char_node(dir.path(), "null", 3);

    // log -o to a full device: a clear error, and the node is still a device.
    let e = fails(nines(&["log", s(&lat), "-o", s(&full)], dir.path()));
    assert!(e.contains("No space left on device"), "{e}");
    assert!(is_char_device(&full), "log -o replaced the device node");
    ok(nines(&["log", s(&lat), "-o", s(&null)], dir.path()), "log");
    assert!(is_char_device(&null));

    // report, compare, doctor --json/--capture, sim outputs, merge -o: the same.
    for args in [
        vec!["report", s(&json), "-o", s(&full)],
        vec!["compare", s(&json), s(&json), "-o", s(&full)],
        vec!["doctor", "--json", s(&full)],
        vec!["doctor", "--capture", s(&full)],
        vec!["sim", "--quiet", "--ios", "100", "--json", s(&full)],
        vec!["merge", s(&json), "-o", s(&full)],
    ] {
        let o = nines(&args, dir.path());
        let e = fails(o);
        assert!(
            e.contains("No space left") || e.contains("full"),
            "{args:?}: {e}"
        );
        assert!(is_char_device(&full), "{args:?} replaced the device node");
    }
    for args in [
        vec!["report", s(&json), "-o", s(&null)],
        vec!["doctor", "--capture", s(&null)],
        vec![
            "sim",
            "--quiet",
            "--ios",
            "100",
            "--json",
            s(&null),
            "--lat-log",
            s(&null),
        ],
    ] {
        ok(nines(&args, dir.path()), &format!("{args:?}"));
        assert!(is_char_device(&null), "{args:?} replaced the device node");
    }
    // Nothing half-written is left beside them.
    let partial: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("nines-partial"))
        .collect();
    assert!(partial.is_empty(), "{partial:?}");
}

#[test]
fn no_html_is_left_when_the_pngs_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let (json, _) = sim_run(dir.path());
    // --png names a regular file, so its directory cannot be created.
    let blocker = dir.path().join("blocker");
    std::fs::write(&blocker, b"").unwrap();
    let html = dir.path().join("r.html");
    let e = fails(nines(
        &["report", s(&json), "-o", s(&html), "--png", s(&blocker)],
        dir.path(),
    ));
    assert!(e.contains("--png"), "{e}");
    assert!(!html.exists(), "report left its HTML behind");
    let e = fails(nines(
        &[
            "compare",
            s(&json),
            s(&json),
            "-o",
            s(&html),
            "--png",
            s(&blocker),
        ],
        dir.path(),
    ));
    assert!(e.contains("--png"), "{e}");
    assert!(!html.exists(), "compare left its HTML behind");
}

#[test]
fn outputs_are_validated_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let same = dir.path().join("same.json");
    // The same file for two outputs would interleave: refused up front.
    let e = fails(nines(
        &[
            "sim",
            "--quiet",
            "--ios",
            "100",
            "--json",
            s(&same),
            "--fio-json",
            s(&same),
        ],
        dir.path(),
    ));
    assert!(e.contains("--json and --fio-json both name"), "{e}");
    assert!(!same.exists());
    let e = fails(nines(
        &[
            "profile",
            "--quiet",
            "--ios",
            "10",
            "--json",
            s(&same),
            "--fio-json",
            s(&same),
        ],
        dir.path(),
    ));
    assert!(e.contains("--json and --fio-json both name"), "{e}");
    assert!(!same.exists());
    // A sim whose trace cannot be read creates none of its outputs.
    let json = dir.path().join("t.json");
    let hdr = dir.path().join("t.hlog");
    let junk = dir.path().join("junk.trace");
    std::fs::write(&junk, b"not a trace\n").unwrap();
    fails(nines(
        &[
            "sim",
            "--quiet",
            "--trace",
            s(&junk),
            "--trace-format",
            "mqsim",
            "--json",
            s(&json),
            "--hdr-log",
            s(&hdr),
        ],
        dir.path(),
    ));
    assert!(!json.exists() && !hdr.exists());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "only the junk trace: {leftovers:?}");
}

#[test]
fn stale_partial_files_of_dead_runs_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    // What a kill -9 leaves: a partial file named for a pid that no longer runs.
    let stale = dir.path().join(".s.json.nines-partial-2147483646");
    std::fs::write(&stale, b"{ half").unwrap();
    sim_run(dir.path());
    assert!(
        !stale.exists(),
        "the dead run's partial file is still there"
    );
}

#[test]
fn nines_log_on_a_directory_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let e = fails(nines(&["log", s(dir.path())], dir.path()));
    assert!(e.contains("is a directory"), "{e}");
    assert!(!e.contains("magic"), "{e}");
}

/// Formats nines' own probe does not know are refused through libblkid, and the refusal says
/// which probe ran; with libblkid disabled the built-in probe still refuses what it knows and
/// says that it ran.
#[test]
fn the_refusal_names_the_probe_that_ran() {
    let z = Zram::new("16M");
    let dev = z.path();
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("minix.img");
    let mk = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "truncate -s 8M {0} && mkfs.minix {0} >/dev/null && dd if={0} of={dev} bs=1M conv=fsync status=none",
            img.display()
        ))
        .status()
        .unwrap();
    assert!(mk.success());
    let before = std::fs::read(&dev).unwrap();
    let write = [
        "profile",
        "--quiet",
        "--rw",
        "randwrite",
        "--allow-writes",
        "--ios",
        "10",
        &dev,
    ];
    let e = fails(run(&write));
    assert!(e.contains("minix") && e.contains("libblkid 2."), "{e}");
    assert!(std::fs::read(&dev).unwrap() == before, "the device changed");

    // ext4, with libblkid switched off: the built-in probe refuses it and says it ran.
    let mk = Command::new("mkfs.ext4")
        .args(["-q", "-F", &dev])
        .status()
        .unwrap();
    assert!(mk.success());
    let o = Command::new(BIN)
        .env("NINES_NO_LIBBLKID", "1")
        .args(write)
        .output()
        .unwrap();
    let e = fails(o);
    assert!(
        e.contains("ext2/ext3/ext4") && e.contains("built-in probe (libblkid not loaded)"),
        "{e}"
    );
}

/// Two writers on one device: the second is refused and told who holds it.
#[test]
fn a_second_writer_on_a_device_is_refused_naming_the_first() {
    use std::io::{BufRead, BufReader};
    let z = Zram::new("32M");
    let dev = z.path();
    let mut first = Command::new(BIN)
        .args([
            "profile",
            "--rw",
            "randwrite",
            "--allow-writes",
            "--runtime",
            "20s",
            &dev,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The placement line is printed once the targets are open.
    let mut line = String::new();
    BufReader::new(first.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("placement:"), "{line}");
    let o = run(&[
        "profile",
        "--quiet",
        "--rw",
        "randwrite",
        "--allow-writes",
        "--ios",
        "10",
        &dev,
    ]);
    // SAFETY: plain kill(2) of our own child.
    unsafe { libc::kill(first.id() as libc::pid_t, libc::SIGINT) };
    let _ = first.wait();
    let e = fails(o);
    assert!(
        e.contains("busy") && e.contains(&format!("pid {} (nines)", first.id())),
        "{e}"
    );
}

/// The write end of a pipe whose read end is already closed: every write to it fails with EPIPE,
/// as `nines X | head -1` sees once head has exited.
fn closed_pipe() -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe fills two descriptors; the read end is closed at once, the write end owned.
    unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        libc::close(fds[0]);
        std::os::fd::OwnedFd::from_raw_fd(fds[1])
    }
}

/// Every verb with its stdout (and then also its stderr) on a closed pipe: it ends quietly with
/// its own exit status (0 here), never a panic (101) or SIGPIPE, and still writes its files
/// (profile, sim, log, report, compare, doctor, merge, sweep, tune, rebuild, fleet and serve).
#[test]
fn every_verb_into_a_closed_pipe_finishes_and_writes_its_files() {
    let dir = disk_dir();
    let d = dir.path();
    let (json, lat) = sim_run(d);
    let plan_root = d.join("root");
    std::fs::create_dir(&plan_root).unwrap();
    nines_host::testbed::write_afa_host(
        &plan_root,
        nines_host::testbed::AfaOptions { tuned: false },
    )
    .unwrap();
    for m in ["m0", "m1", "m2"] {
        std::fs::File::create(d.join(m))
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
    }
    // (verb's arguments, the files it must write)
    let cases: Vec<(Vec<String>, Vec<&str>)> = vec![
        (
            vec![
                "profile",
                "--ios",
                "3000",
                "--json",
                "p.json",
                "--hdr-log",
                "p.hlog",
            ],
            vec!["p.json", "p.hlog"],
        ),
        (
            vec![
                "sim",
                "--ios",
                "3000",
                "--json",
                "s2.json",
                "--fio-json",
                "s2.fio",
            ],
            vec!["s2.json", "s2.fio"],
        ),
        (vec!["log", s(&lat)], vec![]),
        (vec!["log", s(&lat), "-o", "l.csv"], vec!["l.csv"]),
        (vec!["report", s(&json), "-o", "r.html"], vec!["r.html"]),
        (
            vec!["compare", s(&json), s(&json), "-o", "c.html"],
            vec!["c.html"],
        ),
        (
            vec!["doctor", "--json", "d.json", "--capture", "d.tar"],
            vec!["d.json", "d.tar"],
        ),
        (vec!["merge", s(&json), "-o", "m.json"], vec!["m.json"]),
        (
            vec![
                "sweep",
                "--sim",
                "afa-m2-2018",
                "--qd",
                "1,2",
                "-o",
                "sw",
                "--",
                "--ios",
                "200",
                "--precondition",
                "none",
            ],
            vec!["sw/sweep.json", "sw/sweep.html"],
        ),
        (
            vec!["tune", "--root", s(&plan_root), "--plan", "-o", "t.json"],
            vec!["t.json"],
        ),
        (
            vec![
                "rebuild", "m0", "m1", "m2", "--member", "1", "--json", "rb.json",
            ],
            vec!["rb.json"],
        ),
        (
            vec![
                "fleet",
                "--engine",
                "local",
                "--tasks",
                "2",
                "-o",
                "fl",
                "--",
                "sim",
                "--ios",
                "200",
                "--precondition",
                "none",
            ],
            vec!["fl/fleet.json", "fl/merged.json"],
        ),
    ]
    .into_iter()
    .map(|(a, f)| (a.into_iter().map(String::from).collect(), f))
    .collect();
    for close_stderr in [false, true] {
        for (args, files) in &cases {
            for f in files {
                let p = d.join(f);
                let _ = std::fs::remove_file(&p);
            }
            // A fleet's output directory must not hold an earlier fleet.
            let _ = std::fs::remove_dir_all(d.join("fl"));
            let mut cmd = Command::new(BIN);
            cmd.args(args)
                .current_dir(d)
                .env("TMPDIR", d)
                .stdin(std::process::Stdio::null())
                .stdout(closed_pipe());
            if close_stderr {
                cmd.stderr(closed_pipe());
            } else {
                cmd.stderr(std::process::Stdio::piped());
            }
            let o = cmd.output().unwrap();
            let err = stderr(&o);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{args:?} (stderr closed: {close_stderr}): {:?} {err}",
                o.status
            );
            assert!(
                !err.contains("panicked") && !err.contains("Broken pipe"),
                "{args:?}: {err}"
            );
            for f in files {
                assert!(d.join(f).exists(), "{args:?}: {f} was not written");
            }
        }
        // serve runs until it is told to stop: up, its socket there, then SIGTERM; it ends
        // cleanly (0) and writes its report.
        let sock = d.join("n.sock");
        let _ = std::fs::remove_file(d.join("sv.json"));
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "m0", "--socket", s(&sock), "--json", "sv.json"])
            .current_dir(d)
            .stdin(std::process::Stdio::null())
            .stdout(closed_pipe());
        if close_stderr {
            cmd.stderr(closed_pipe());
        } else {
            cmd.stderr(std::process::Stdio::piped());
        }
        let child = cmd.spawn().unwrap();
        let t0 = std::time::Instant::now();
        while !sock.exists() && t0.elapsed() < std::time::Duration::from_secs(30) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(
            sock.exists(),
            "serve never listened (stderr closed: {close_stderr})"
        );
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let o = child.wait_with_output().unwrap();
        let err = stderr(&o);
        assert_eq!(
            o.status.code(),
            Some(0),
            "serve (stderr closed: {close_stderr}): {:?} {err}",
            o.status
        );
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "serve: {err}"
        );
        assert!(d.join("sv.json").exists(), "serve: sv.json was not written");
    }
}

/// Sizes that used to abort on allocation or fill the disk are refused up front, with messages
/// that say what to give instead; ambiguous input is not silently reinterpreted.
#[test]
fn absurd_sizes_are_refused_up_front_with_clear_messages() {
    let dir = disk_dir();
    let d = dir.path();
    let cases: [(&[&str], &str); 5] = [
        (
            &["sim", "--quiet", "--ios", "10", "--host-cpus", "4294967295"],
            "give at most 65536",
        ),
        (
            &["sim", "--quiet", "--ios", "10", "--memory-budget", "1p"],
            "more than this host's available memory",
        ),
        (
            &["sim", "--quiet", "--ios", "10", "--memory-budget", "1k"],
            "1024 bytes: too small",
        ),
        (
            &["profile", "--quiet", "--ios", "10", "--cpus", "1,000"],
            "leading zero",
        ),
        (
            &["profile", "--quiet", "--ios", "10", "--size", "1p"],
            "pass a smaller --size",
        ),
    ];
    for (args, want) in cases {
        let o = Command::new(BIN)
            .args(args)
            .current_dir(d)
            .env("TMPDIR", d)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains(want), "{args:?}: {e}");
        // No size rounded down to nothing ("1024 bytes" said as "0 MiB"); "21040 MiB" is fine.
        assert!(
            !e.contains(" 0 MiB") && !e.contains("(0 MiB"),
            "{args:?}: {e}"
        );
    }
    // Nothing was created in the temporary directory by the refused --size.
    let left: Vec<_> = std::fs::read_dir(d).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    // Durations are printed as people write them.
    let o = Command::new(BIN)
        .args(["profile", "--quiet", "--runtime", "300ms"])
        .env("TMPDIR", d)
        .output()
        .unwrap();
    let e = stderr(&o);
    assert!(e.contains("for 300 ms"), "{e}");
    assert!(!e.contains("0.3000000"), "{e}");
}

/// Sizes inside files and layouts that used to abort (SIGABRT on allocation) or blame the wrong
/// option: a device description whose write buffer is larger than its flash, an emulated
/// device's budget beyond the host's available memory, a stripe larger than a device.
#[test]
fn allocations_are_checked_before_they_are_made() {
    let dir = disk_dir();
    let d = dir.path();
    let preset = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../nines-flash/presets/afa-m2-2018.toml"),
    )
    .unwrap();
    let huge = preset.replace(
        "write_buffer_bytes = 33_554_432",
        "write_buffer_bytes = 18_000_000_000_000_000_000",
    );
    assert_ne!(huge, preset, "the preset's write buffer line moved");
    std::fs::write(d.join("huge-buffer.toml"), huge).unwrap();
    let cases: [(&[&str], &[&str]); 3] = [
        (
            &[
                "sim",
                "--quiet",
                "--ios",
                "10",
                "--device",
                "huge-buffer.toml",
            ],
            &["buffer.write_buffer_bytes", "must not exceed the flash"],
        ),
        (
            &[
                "profile",
                "--quiet",
                "--ios",
                "10",
                "--memory-budget",
                "1p",
                "emu:afa-m2-2018:64m",
            ],
            &["--memory-budget", "available memory"],
        ),
        (
            &[
                "sim",
                "--quiet",
                "--ios",
                "10",
                "--device",
                "null:64k",
                "--devices",
                "2",
                "--layout",
                "raid0",
                "--stripe",
                "1m",
            ],
            &["--stripe 1048576 bytes is larger than each device (65536 bytes)"],
        ),
    ];
    for (args, want) in cases {
        let o = Command::new(BIN)
            .args(args)
            .current_dir(d)
            .env("TMPDIR", d)
            .output()
            .unwrap();
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
        for w in want {
            assert!(e.contains(w), "{args:?}: {e}");
        }
        assert!(!e.contains("--offset"), "{args:?}: {e}");
    }
}

/// A corrupt interval log is described in words, not as Rust debug structures.
#[test]
fn a_corrupt_hdr_log_gets_a_message_not_a_debug_dump() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let json = d.join("h.json");
    let hlog = d.join("h.hlog");
    ok(
        nines(
            &[
                "sim",
                "--quiet",
                "--ios",
                "200",
                "--json",
                s(&json),
                "--hdr-log",
                s(&hlog),
            ],
            d,
        ),
        "sim",
    );
    let junk = d.join("junk.hlog");
    std::fs::write(&junk, b"garbage\n").unwrap();
    let e = fails(nines(
        &["report", s(&json), "--hdr-log", s(&junk), "-o", "r.html"],
        d,
    ));
    assert!(e.contains("not an HdrHistogram interval-log line"), "{e}");
    assert!(
        !e.contains("ParseError {") && !e.contains("Custom {"),
        "{e}"
    );
    assert!(!d.join("r.html").exists());
}

/// Runs that would take days, never end, or fill the disk are refused up front with the estimate
/// (they used to run silently until killed), and nothing is written.
#[test]
fn sim_refuses_runs_it_estimates_to_be_absurd() {
    let dir = disk_dir();
    let d = dir.path();
    let cases: [(&[&str], &str); 3] = [
        (
            &["sim", "--ios", "1000000000000", "--json", "a.json"],
            "more than an hour; give a smaller --ios or --runtime",
        ),
        (
            &["sim", "--runtime", "1000000s", "--json", "a.json"],
            "more than an hour",
        ),
        (
            &[
                "sim",
                "--device",
                "null:1g",
                "--completion",
                "none",
                "--runtime",
                "10ms",
                "--json",
                "a.json",
            ],
            "this run never ends",
        ),
    ];
    for (args, want) in cases {
        let start = std::time::Instant::now();
        let o = Command::new(BIN)
            .args(args)
            .current_dir(d)
            .output()
            .unwrap();
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
        assert!(e.contains(want), "{args:?}: {e}");
        assert!(
            start.elapsed().as_secs() < 20,
            "{args:?} was not refused up front"
        );
        assert!(!d.join("a.json").exists());
    }
    // A per-I/O log larger than its disk: a 1 MiB tmpfs (root only) for 10 s of reads (about
    // 500,000 records of 24 bytes).
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let small = d.join("small");
    std::fs::create_dir(&small).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&small)
        .status()
        .unwrap();
    assert!(st.success(), "mount tmpfs");
    let o = Command::new(BIN)
        .args(["sim", "--quiet", "--runtime", "10s", "--lat-log"])
        .arg(small.join("x.lat"))
        .current_dir(d)
        .output()
        .unwrap();
    let left: Vec<_> = std::fs::read_dir(&small).unwrap().collect();
    let _ = Command::new("umount").arg(&small).status();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("the log may grow to") && e.contains("MiB are free on its disk"),
        "{e}"
    );
    assert!(left.is_empty(), "{left:?}");
}

/// Ctrl-C stops a simulation like a measurement: the report covers what was simulated, every
/// requested file is written, no temporary file is left, and the exit status is 130.
#[test]
fn sim_interrupted_reports_what_it_simulated_and_exits_130() {
    let dir = disk_dir();
    let d = dir.path();
    let child = Command::new(BIN)
        .args([
            "sim",
            "--quiet",
            "--precondition",
            "none",
            "--runtime",
            "1000s",
            "--json",
            "i.json",
            "--lat-log",
            "i.lat",
        ])
        .current_dir(d)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2500));
    // SAFETY: signals our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let o = child.wait_with_output().unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(130), "{e}");
    assert!(
        e.contains("interrupted after") && e.contains("simulated"),
        "{e}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("i.json")).unwrap()).unwrap();
    assert_eq!(
        json["config"]["extra"]["interrupted"],
        serde_json::Value::Bool(true)
    );
    assert!(
        json["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("interrupted after")),
        "{}",
        json["warnings"]
    );
    let lat = std::fs::metadata(d.join("i.lat")).unwrap().len();
    assert!(
        lat > 24 * 100,
        "the per-I/O log holds what was simulated: {lat} bytes"
    );
    let partial: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains("nines-partial"))
        .collect();
    assert!(partial.is_empty(), "{partial:?}");
}

/// A persisted serial volume over three small members: its policy formats members that hold no
/// serial volume, so it writes them on its own.
const SERIAL_PERSIST: &[&str] = &[
    "--layout",
    "serial",
    "--persist",
    "--segment",
    "1m",
    "--gc-start",
    "2",
    "--gc-stop",
    "3",
];

/// Writes 8 MiB of distinct non-zero data into each of `names` under `d`; returns the bytes.
fn data_members(d: &Path, names: &[&str]) -> Vec<Vec<u8>> {
    names
        .iter()
        .enumerate()
        .map(|(k, m)| {
            let bytes: Vec<u8> = (0..(8u32 << 20))
                .map(|i| (i * 7 + k as u32) as u8)
                .collect();
            std::fs::write(d.join(m), &bytes).unwrap();
            bytes
        })
        .collect()
}

/// A read-only serve writes nothing: layouts whose policy writes its members on its own (a
/// persisted serial array formats member 0 when it finds no metadata; a rebuild; a write buffer)
/// are refused with --read-only before anything is opened. (A read-only serve of three files of
/// data with `--layout serial --persist` used to overwrite member 0's tail with a superblock.)
#[test]
fn read_only_serve_never_writes_its_members() {
    let dir = disk_dir();
    let d = dir.path();
    let before = data_members(d, &["r0", "r1", "r2"]);
    let sock = d.join("ro.sock");
    for extra in [SERIAL_PERSIST, &["--layout", "raid5", "--rebuild", "1"][..]] {
        let mut args = vec!["serve", "--read-only", "--socket", s(&sock)];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["r0", "r1", "r2"]);
        let mut child = Command::new(BIN)
            .args(&args)
            .current_dir(d)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Refused at once; one that serves is stopped after a while (and fails below).
        let t0 = std::time::Instant::now();
        while child.try_wait().unwrap().is_none()
            && t0.elapsed() < std::time::Duration::from_secs(20)
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if child.try_wait().unwrap().is_none() {
            // SAFETY: signalling our own child, still running (not reaped).
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        }
        let o = child.wait_with_output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {err}");
        assert!(
            err.contains("--read-only cannot be combined with") && err.trim().lines().count() == 1,
            "{extra:?}: {err}"
        );
        assert!(!sock.exists(), "{extra:?}: it listened");
        for (k, m) in ["r0", "r1", "r2"].iter().enumerate() {
            assert!(
                std::fs::read(d.join(m)).unwrap() == before[k],
                "{extra:?}: {m} changed"
            );
        }
    }
}

/// A SIGTERM sent the moment serve's socket appears (as a supervisor would) stops it cleanly:
/// exit 0, its report written, its socket removed. The handler used to be installed after the
/// socket was bound, so such a signal killed it (143) and left the socket behind.
#[test]
fn serve_signalled_as_soon_as_its_socket_appears_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for i in 0..5 {
        let sock = d.join(format!("s{i}.sock"));
        let json = d.join(format!("s{i}.json"));
        let child = Command::new(BIN)
            .args(["serve", "--size", "1m", "--json"])
            .arg(&json)
            .arg("--socket")
            .arg(&sock)
            .arg(d.join("member.img"))
            .current_dir(d)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = std::time::Instant::now();
        while std::fs::symlink_metadata(&sock).is_err() {
            assert!(t0.elapsed().as_secs() < 20, "serve never made its socket");
            std::hint::spin_loop();
        }
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{:?} {}", o.status, stderr(&o));
        assert!(json.exists(), "no report");
        assert!(!sock.exists(), "the socket was left behind");
    }
}

/// A workload that only reads never changes the user's files on its own: a layout whose policy
/// writes members (a persisted serial volume formats members without its superblock, a raid5
/// rebuild) needs --allow-writes, refused in one line with the files byte-identical; with the
/// permission it runs.
#[test]
fn read_only_profile_of_a_self_writing_layout_needs_allow_writes() {
    let dir = disk_dir();
    let d = dir.path();
    let before = data_members(d, &["p0", "p1", "p2"]);
    let serial = SERIAL_PERSIST;
    let raid5: &[&str] = &["--layout", "raid5", "--rebuild", "1"];
    let profile = |extra: &[&str], allow: bool| {
        let mut args = vec![
            "profile",
            "--rw",
            "randread",
            "--runtime",
            "200ms",
            "--quiet",
        ];
        if allow {
            args.push("--allow-writes");
        }
        args.extend_from_slice(extra);
        args.extend_from_slice(&["p0", "p1", "p2"]);
        Command::new(BIN)
            .current_dir(d)
            .args(&args)
            .output()
            .unwrap()
    };
    for extra in [serial, raid5] {
        let out = profile(extra, false);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {err}");
        assert!(
            err.contains("--allow-writes") && err.trim().lines().count() == 1,
            "{err}"
        );
        for (k, m) in ["p0", "p1", "p2"].iter().enumerate() {
            assert!(
                std::fs::read(d.join(m)).unwrap() == before[k],
                "{extra:?} changed {m}"
            );
        }
    }
    // With the permission the same command runs (and the persisted volume formats members).
    let out = profile(serial, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
