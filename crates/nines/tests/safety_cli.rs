//! Issue 29: nothing nines writes can destroy what the user did not name for writing. The
//! built binary on temporary files and zram devices this test creates: outputs that are block
//! devices, symlinks, inputs or targets; members given twice; inputs that are devices; sizes and
//! arithmetic that used to panic, wrap or abort. Every refusal is one line, exit 1, nothing
//! changed.

mod common;

use std::path::Path;
use std::process::Output;

use common::{Zram, disk_dir, make_file, nines, s};

fn refused(out: &Output, want: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "expected a refusal: {err}");
    assert!(err.contains(want), "expected `{want}` in: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

fn sha(path: &Path) -> Vec<u8> {
    // The whole content (test files and devices are small).
    std::fs::read(path).unwrap()
}

fn sim_json(dir: &Path, name: &str) {
    common::ok(
        nines(&["sim", "--quiet", "--ios", "300", "--json", name], dir),
        "sim",
    );
}

#[test]
fn outputs_never_write_block_devices_and_merge_makes_no_sibling() {
    let dir = disk_dir();
    let d = dir.path();
    sim_json(d, "s.json");
    common::ok(
        nines(
            &[
                "sim",
                "--quiet",
                "--ios",
                "300",
                "--json",
                "h.json",
                "--hdr-log",
                "h.hlog",
            ],
            d,
        ),
        "sim with a log",
    );
    let z = Zram::new("16M");
    let dev = z.path();
    // A filesystem on it, as a user's would be.
    let mk = std::process::Command::new("mkfs.ext4")
        .args(["-q", "-F", &dev])
        .output()
        .unwrap();
    assert!(
        mk.status.success(),
        "{}",
        String::from_utf8_lossy(&mk.stderr)
    );
    let before = sha(Path::new(&dev));
    // A symlink to the device is no way around it either.
    std::os::unix::fs::symlink(&dev, d.join("dev.link")).unwrap();
    for args in [
        vec!["sim", "--quiet", "--ios", "100", "--json", &dev],
        vec!["sim", "--quiet", "--ios", "100", "--lat-log", &dev],
        vec!["sim", "--quiet", "--ios", "100", "--hdr-log", "dev.link"],
        vec!["sim", "--quiet", "--ios", "100", "--fio-json", &dev],
        vec!["report", "s.json", "-o", &dev],
        vec!["compare", "s.json", "s.json", "-o", &dev],
        vec!["doctor", "--json", &dev],
        vec!["merge", "h.json", "-o", &dev, "--replace"],
        vec!["profile", "--quiet", "--ios", "100", "--json", "dev.link"],
    ] {
        let out = nines(&args, d);
        refused(&out, "is a block device");
        assert_eq!(sha(Path::new(&dev)), before, "{args:?} wrote the device");
    }
    assert!(!Path::new(&format!("{dev}.hlog")).exists());
    // A character device output gets no sibling interval log either.
    common::ok(
        nines(&["merge", "h.json", "-o", "/dev/null"], d),
        "merge -o /dev/null",
    );
    assert!(!Path::new("/dev/null.hlog").exists());
}

#[test]
fn symlinked_outputs_are_followed_and_stdout_is_streamed() {
    let dir = disk_dir();
    let d = dir.path();
    std::fs::write(d.join("real.json"), b"old").unwrap();
    std::os::unix::fs::symlink("real.json", d.join("out.json")).unwrap();
    common::ok(
        nines(&["sim", "--quiet", "--ios", "100", "--json", "out.json"], d),
        "sim --json link",
    );
    let meta = std::fs::symlink_metadata(d.join("out.json")).unwrap();
    assert!(meta.file_type().is_symlink(), "the link was replaced");
    let text = std::fs::read_to_string(d.join("real.json")).unwrap();
    assert!(text.starts_with('{'), "the link's file holds the report");
    // A dangling link: the file it names is created.
    std::os::unix::fs::symlink("new.json", d.join("dangling.json")).unwrap();
    common::ok(
        nines(
            &["sim", "--quiet", "--ios", "100", "--json", "dangling.json"],
            d,
        ),
        "sim --json dangling link",
    );
    assert!(
        std::fs::symlink_metadata(d.join("dangling.json"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(d.join("new.json").is_file());
    // /dev/stdout redirected to a file: the report lands in the file.
    let f = std::fs::File::create(d.join("o.txt")).unwrap();
    let st = std::process::Command::new(env!("CARGO_BIN_EXE_nines"))
        .args(["sim", "--quiet", "--ios", "100", "--json", "/dev/stdout"])
        .current_dir(d)
        .stdout(f)
        .status()
        .unwrap();
    assert!(st.success());
    let o = std::fs::read_to_string(d.join("o.txt")).unwrap();
    let kept = std::fs::symlink_metadata("/dev/stdout")
        .unwrap()
        .file_type()
        .is_symlink();
    if !kept {
        // Put the system's link back before failing (a broken build replaced it).
        let tmp = Path::new("/dev/.stdout.nines-test");
        let _ = std::fs::remove_file(tmp);
        std::os::unix::fs::symlink("/proc/self/fd/1", tmp).unwrap();
        std::fs::rename(tmp, "/dev/stdout").unwrap();
    }
    assert!(kept, "/dev/stdout was replaced by a file");
    assert!(o.contains("\"schema\""), "stdout got no report: {o:.200}");
    // `-` is stdout too.
    let out = nines(&["sim", "--quiet", "--ios", "100", "--json", "-"], d);
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"schema\""));
    assert!(!d.join("-").exists());
    // A path through a file: said plainly.
    let out = nines(
        &[
            "sim",
            "--quiet",
            "--ios",
            "10",
            "--json",
            "real.json/x.json",
        ],
        d,
    );
    refused(&out, "is a file");
}

#[test]
fn an_output_naming_an_input_or_a_target_is_refused_before_anything_runs() {
    let dir = disk_dir();
    let d = dir.path();
    let t = make_file(d, "t.img", 16 << 20);
    let before = sha(&t);
    for opt in ["--json", "--hdr-log", "--lat-log", "--fio-json"] {
        let out = nines(
            &["profile", "--quiet", "--ios", "100", opt, "t.img", "t.img"],
            d,
        );
        refused(&out, "is also the run's target");
        assert_eq!(sha(&t), before, "{opt} t.img t.img changed the target");
    }
    // Through a symlink to the target.
    std::os::unix::fs::symlink("t.img", d.join("t.link")).unwrap();
    let out = nines(
        &[
            "profile", "--quiet", "--ios", "100", "--json", "t.link", "t.img",
        ],
        d,
    );
    refused(&out, "is also the run's target");
    let out = nines(&["serve", "--json", "t.img", "t.img"], d);
    refused(&out, "is also the run's member");
    assert_eq!(sha(&t), before);

    common::ok(
        nines(
            &[
                "sim",
                "--quiet",
                "--ios",
                "300",
                "--json",
                "v.json",
                "--lat-log",
                "v.lat",
            ],
            d,
        ),
        "sim",
    );
    sim_json(d, "w.json");
    let v = sha(&d.join("v.json"));
    let lat = sha(&d.join("v.lat"));
    for args in [
        vec!["report", "v.json", "-o", "v.json"],
        vec!["report", "v.json", "-o", "v.lat"],
        vec!["compare", "v.json", "w.json", "-o", "v.json"],
        vec!["log", "v.lat", "-o", "v.lat"],
        vec!["merge", "v.json", "w.json", "-o", "v.json", "--replace"],
    ] {
        let out = nines(&args, d);
        refused(&out, "is also the run's");
        assert_eq!(sha(&d.join("v.json")), v, "{args:?}");
        assert_eq!(sha(&d.join("v.lat")), lat, "{args:?}");
    }
}

#[test]
fn the_same_file_twice_in_a_volume_is_refused_naming_both() {
    let dir = disk_dir();
    let d = dir.path();
    let a = make_file(d, "a.img", 8 << 20);
    make_file(d, "b.img", 8 << 20);
    let before = sha(&a);
    std::os::unix::fs::symlink("a.img", d.join("a.link")).unwrap();
    for (args, names) in [
        (
            vec![
                "profile", "--quiet", "--ios", "50", "--layout", "raid0", "a.img", "./a.img",
            ],
            "target 1 (a.img) and target 2 (./a.img)",
        ),
        (
            vec![
                "profile",
                "--quiet",
                "--ios",
                "50",
                "--rw",
                "randwrite",
                "--layout",
                "raid5",
                "a.img",
                "a.link",
                "b.img",
            ],
            "target 1 (a.img) and target 2 (a.link)",
        ),
        (
            vec!["serve", "--layout", "raid5", "a.img", "a.img", "b.img"],
            "member 0 (a.img) and member 1 (a.img)",
        ),
        (
            vec!["rebuild", "--member", "2", "a.img", "b.img", "a.link"],
            "member 0 (a.img) and member 2 (a.link)",
        ),
        (
            vec![
                "profile",
                "--quiet",
                "--ios",
                "50",
                "--rw",
                "randwrite",
                "--layout",
                "raid0",
                "--buffer",
                "a.img",
                "a.img",
                "b.img",
            ],
            "target 1 (a.img) and --buffer (a.img)",
        ),
    ] {
        let out = nines(&args, d);
        refused(&out, names);
        assert_eq!(sha(&a), before, "{args:?}");
    }
    // The same zram device twice: both named, no "another user" (it was our own open).
    let z = Zram::new("8M");
    let dev = z.path();
    let out = nines(
        &[
            "profile",
            "--quiet",
            "--ios",
            "50",
            "--rw",
            "randwrite",
            "--allow-writes",
            "--layout",
            "raid0",
            &dev,
            &dev,
        ],
        d,
    );
    let err = refused(&out, &format!("target 1 ({dev}) and target 2 ({dev})"));
    assert!(!err.contains("in use by"), "{err}");
}

#[test]
fn inputs_are_refused_by_kind_and_bounded() {
    let dir = disk_dir();
    let d = dir.path();
    sim_json(d, "s.json");
    for args in [
        vec!["report", "/dev/zero"],
        vec!["compare", "s.json", "/dev/zero"],
        vec!["merge", "s.json", "/dev/zero", "-o", "m.json"],
        vec!["log", "/dev/zero"],
        vec!["sim", "--quiet", "--ios", "10", "--device", "/dev/zero"],
        vec!["sim", "--quiet", "--ios", "10", "--job", "/dev/zero"],
        vec!["profile", "--quiet", "--ios", "10", "--job", "/dev/zero"],
        vec![
            "profile",
            "--quiet",
            "--ios",
            "10",
            "--plan",
            "/dev/zero",
            "x.img",
        ],
        vec![
            "sim",
            "--calibrate",
            "/dev/zero",
            "--calibrate-out",
            "c.toml",
        ],
        vec![
            "tune",
            "--root",
            ".",
            "--apply",
            "/dev/zero",
            "--state",
            "st.json",
        ],
        vec!["report", "s.json", "--hdr-log", "/dev/zero", "-o", "r.html"],
    ] {
        let t = std::time::Instant::now();
        let out = nines(&args, d);
        refused(&out, "character device");
        assert!(t.elapsed().as_secs() < 30, "{args:?} read on");
        assert!(!d.join("m.json").exists() && !d.join("r.html").exists());
    }
    // A file over the bound of its kind: a job file of 2 MiB.
    std::fs::write(d.join("big.fio"), vec![b'#'; 2 << 20]).unwrap();
    refused(
        &nines(&["sim", "--quiet", "--job", "big.fio"], d),
        "big.fio",
    );
}

#[test]
fn zero_sizes_huge_times_and_huge_buffers_are_refused_not_crashed() {
    let dir = disk_dir();
    let d = dir.path();
    // A zero chunk is a bad option value: usage (exit 2, issue 39).
    let out = nines(
        &[
            "sim",
            "--quiet",
            "--ios",
            "10",
            "--layout",
            "raid5",
            "--devices",
            "3",
            "--chunk",
            "0",
        ],
        d,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--chunk") && !err.contains("panicked"),
        "{err}"
    );
    refused(
        &nines(
            &[
                "sim",
                "--quiet",
                "--ios",
                "10",
                "--layout",
                "raid0",
                "--devices",
                "2",
                "--stripe",
                "0",
            ],
            d,
        ),
        "--stripe 0",
    );
    let preset = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../nines-flash/presets/afa-m2-2018.toml"
    );
    let text = std::fs::read_to_string(preset).unwrap();
    for field in ["read_ns", "program_ns"] {
        let bad: String = text
            .lines()
            .map(|l| {
                if l.starts_with(&format!("{field} =")) {
                    format!("{field} = 18446744073709551615")
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(d.join("bad.toml"), bad).unwrap();
        refused(
            &nines(
                &["sim", "--quiet", "--ios", "10", "--device", "bad.toml"],
                d,
            ),
            &format!("timing.{field}"),
        );
        refused(
            &nines(
                &[
                    "profile",
                    "--quiet",
                    "--ios",
                    "10",
                    &format!("emu:{}:64m", s(&d.join("bad.toml"))),
                ],
                d,
            ),
            &format!("timing.{field}"),
        );
    }
    // 1024 x 64 MiB of buffers: refused before a byte is allocated (was SIGABRT, rc 134).
    make_file(d, "t.img", 1 << 20);
    refused(
        &nines(
            &[
                "profile",
                "--quiet",
                "--ios",
                "10",
                "--iodepth",
                "1024",
                "--bs",
                "64m",
                "t.img",
            ],
            d,
        ),
        "of I/O buffers",
    );
}

#[test]
fn merge_refuses_the_same_run_twice_unless_asked() {
    let dir = disk_dir();
    let d = dir.path();
    sim_json(d, "s1.json");
    std::fs::copy(d.join("s1.json"), d.join("copy.json")).unwrap();
    refused(
        &nines(&["merge", "s1.json", "s1.json", "-o", "m.json"], d),
        "s1.json and s1.json are the same run",
    );
    refused(
        &nines(&["merge", "s1.json", "copy.json", "-o", "m.json"], d),
        "same run",
    );
    assert!(!d.join("m.json").exists());
    common::ok(
        nines(
            &[
                "merge",
                "s1.json",
                "s1.json",
                "-o",
                "m.json",
                "--allow-duplicates",
                "--quiet",
            ],
            d,
        ),
        "merge --allow-duplicates",
    );
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("m.json")).unwrap()).unwrap();
    assert_eq!(m["aggregate"]["read"]["ios"], 600);
}

#[test]
fn failed_target_creation_leaves_no_file_and_space_is_checked_first() {
    let dir = disk_dir();
    let d = dir.path();
    // More than the filesystem has: refused before growing, and the new file is removed.
    let out = nines(
        &[
            "profile",
            "--quiet",
            "--ios",
            "10",
            "--rw",
            "randwrite",
            "--size",
            "100t",
            "big.img",
        ],
        d,
    );
    let err = refused(&out, "big.img");
    assert!(
        err.contains("free") && !err.contains("os error"),
        "the message names the free space: {err}"
    );
    assert!(!d.join("big.img").exists(), "the created file was left");
    // A check after the open (an unaligned --offset) refuses the run: the file it created goes.
    let out = nines(
        &[
            "profile",
            "--quiet",
            "--ios",
            "10",
            "--rw",
            "randwrite",
            "--size",
            "1m",
            "--offset",
            "100",
            "new.img",
        ],
        d,
    );
    refused(&out, "--offset");
    assert!(!d.join("new.img").exists(), "the created file was left");
    // Where tmpfs refuses O_DIRECT (kernels before 6.6), the file the open created is removed
    // too; where it accepts it, the run succeeds.
    if Path::new("/dev/shm").is_dir() {
        let shm = tempfile::tempdir_in("/dev/shm").unwrap();
        let out = nines(
            &[
                "profile",
                "--quiet",
                "--ios",
                "10",
                "--rw",
                "randwrite",
                "--size",
                "1m",
                "x.img",
            ],
            shm.path(),
        );
        if !out.status.success() {
            refused(&out, "x.img");
            assert!(
                !shm.path().join("x.img").exists(),
                "a 0-byte file was left on tmpfs"
            );
        }
    }
}

#[test]
fn messages_name_what_failed_and_only_options_the_verb_has() {
    let dir = disk_dir();
    let d = dir.path();
    make_file(d, "a.img", 1 << 20);
    make_file(d, "b.img", 1 << 20);
    // rebuild has no --size: its missing replacement says how to make one.
    let err = refused(
        &nines(
            &["rebuild", "--member", "2", "a.img", "b.img", "new.img"],
            d,
        ),
        "new.img",
    );
    assert!(!err.contains("--size"), "{err}");
    // serve and profile have no --devices.
    let err = refused(
        &nines(
            &[
                "serve", "--socket", "x.sock", "--layout", "raid5", "a.img", "b.img",
            ],
            d,
        ),
        "at least 3",
    );
    assert!(!err.contains("or --devices"), "{err}");
    refused(
        &nines(
            &[
                "sim",
                "--quiet",
                "--ios",
                "10",
                "--layout",
                "serial",
                "--devices",
                "2",
                "--segment",
                "0",
            ],
            d,
        ),
        "--segment 0",
    );
    let preset = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../nines-flash/presets/afa-m2-2018.toml"
    );
    let text = std::fs::read_to_string(preset).unwrap();
    let cap: String = text
        .lines()
        .map(|l| {
            if l.starts_with("capacity_bytes =") {
                "capacity_bytes = 12345".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(cap.contains("capacity_bytes = 12345"));
    std::fs::write(d.join("cap.toml"), cap).unwrap();
    let err = refused(
        &nines(
            &["sim", "--quiet", "--ios", "10", "--device", "cap.toml"],
            d,
        ),
        "capacity_bytes",
    );
    assert!(!err.contains("--offset"), "{err}");
    // A per-I/O log that cannot be written (disk full): the option and the path are named.
    let err = refused(
        &nines(
            &[
                "profile",
                "--quiet",
                "--ios",
                "20000",
                "--lat-log",
                "/dev/full",
                "a.img",
            ],
            d,
        ),
        "--lat-log /dev/full",
    );
    assert!(err.contains("No space"), "{err}");
}

#[test]
fn refused_fleets_and_sweeps_leave_no_folders() {
    let dir = disk_dir();
    let d = dir.path();
    // A task command naming an unknown parameter: refused before --out is made.
    let out = nines(
        &[
            "fleet",
            "--engine",
            "local",
            "--tasks",
            "2",
            "--out",
            "flx",
            "--",
            "sim",
            "--devices",
            "{n}",
        ],
        d,
    );
    refused(&out, "{n} is not a parameter");
    assert!(!d.join("flx").exists(), "a refused fleet left its --out");
    // A queue depth above the points' limit: refused before a folder or point exists.
    let out = nines(
        &[
            "sweep",
            "--sim",
            "afa-m2-2018",
            "--qd",
            "1,5000",
            "-o",
            "swx",
            "--",
            "--ios",
            "10",
        ],
        d,
    );
    refused(&out, "from 1 to 4096");
    assert!(!d.join("swx").exists());
}

/// A member on a read-only filesystem: serve's advice is its own `--read-only` (not the
/// workload advice profile gives), and with `--read-only` the same member is served (issue 29
/// case 15). The read-only mount is a bind mount in a private mount namespace (`unshare`, as
/// root), so nothing outside the test sees it and it goes away with the command.
#[test]
fn serve_on_a_read_only_filesystem_advises_read_only() {
    let dir = disk_dir();
    let d = dir.path();
    make_file(d, "m.img", 1 << 20);
    let bin = env!("CARGO_BIN_EXE_nines");
    let in_ro = |serve_args: &str| -> Output {
        std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(format!(
                "mount --bind '{d}' '{d}' && mount -o remount,bind,ro '{d}' && \
                 {bin} serve '{d}/m.img' {serve_args}",
                d = d.display()
            ))
            .output()
            .expect("unshare (util-linux) runs")
    };
    let out = in_ro(&format!(
        "--socket /tmp/nines-ro-{}.sock",
        std::process::id()
    ));
    let err = refused(&out, "read-only filesystem");
    assert!(
        err.contains("pass --read-only to serve it without writing") && !err.contains("workload"),
        "{err}"
    );
    // With --read-only the same member is served: the socket appears, and SIGTERM from the same
    // shell ends the server cleanly.
    let sock = format!("/tmp/nines-ro-ok-{}.sock", std::process::id());
    let out = in_ro(&format!(
        "--read-only --socket {sock} & pid=$!; for i in $(seq 100); do [ -S {sock} ] && break; \
         sleep 0.05; done; [ -S {sock} ] || exit 9; kill -TERM $pid; wait $pid"
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
