//! Issue 39: the safety of everything nines writes, removes and opens. The built binary on
//! temporary files, nodes and loop devices this test creates and removes: the pid file serve
//! removes at exit, members that reach the same bytes through a loop device, option values that
//! panicked or allocated without bound, outputs nobody named, streams, and outputs checked only
//! after the work.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::serving::Serving;
use common::{Loop, disk_dir, make_file, nines, s};

const BIN: &str = env!("CARGO_BIN_EXE_nines");

fn refused(out: &Output, want: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "expected a refusal: {err}");
    assert!(err.contains(want), "expected `{want}` in: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    err
}

/// Runs nines in `dir`, killed after 60 s (a serve that should have been refused but serves
/// fails the test instead of hanging it).
fn nines_bounded(args: &[&str], dir: &Path) -> Output {
    let mut c = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run nines");
    let t0 = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = c.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.wait_with_output().unwrap()
}

/// The names in `dir` (to show that nothing else was created or removed).
fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn file_type(p: &Path) -> std::fs::FileType {
    std::fs::symlink_metadata(p).unwrap().file_type()
}

/// The pid a serve wrote to `path` (it is written once the socket listens): waits at most 30 s.
fn wait_for_pid(path: &Path) -> u32 {
    let t0 = Instant::now();
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.strip_suffix('\n')?.parse().ok())
        {
            return pid;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{} never held a pid",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Item 1: `serve --pidfile` refuses a path that is a node other than a regular file before it
/// serves (a fresh character device, a FIFO, a socket, a directory), keeps a symlink and
/// removes only the file it created, leaves a file that replaced its own, and removes nothing
/// when it fails at start-up. Before: all of them were unlinked at exit (or written in place).
#[test]
fn serve_removes_only_the_pidfile_it_created() {
    use std::os::unix::fs::FileTypeExt;
    let dir = disk_dir();
    let d = dir.path();
    make_file(d, "m.img", 1 << 20);
    let mk = Command::new("mknod")
        .arg(d.join("chr"))
        .args(["c", "1", "3"])
        .status()
        .unwrap();
    assert!(mk.success(), "mknod");
    let mk = Command::new("mkfifo").arg(d.join("fifo")).status().unwrap();
    assert!(mk.success(), "mkfifo");
    let _sock = std::os::unix::net::UnixListener::bind(d.join("sock")).unwrap();
    std::fs::create_dir(d.join("dir")).unwrap();
    let listen = s(&d.join("nbd.sock")).to_string();
    for (node, kind) in [
        ("chr", "is a character device"),
        ("fifo", "is a FIFO"),
        ("sock", "is a socket"),
        ("dir", "is a directory"),
    ] {
        let before = names(d);
        let out = nines_bounded(
            &["serve", "--socket", &listen, "--pidfile", node, "m.img"],
            d,
        );
        let err = refused(&out, &format!("--pidfile {node}: {kind}"));
        assert!(!err.contains("serving"), "refused before serving: {err}");
        assert_eq!(
            names(d),
            before,
            "--pidfile {node}: nothing created or removed"
        );
    }
    assert!(file_type(&d.join("chr")).is_char_device());
    assert!(file_type(&d.join("fifo")).is_fifo());
    assert!(file_type(&d.join("sock")).is_socket());

    // A symlink is followed: the file it names holds the pid; at exit that file (ours) goes,
    // the link stays.
    std::fs::write(d.join("real.pid"), b"user\n").unwrap();
    std::os::unix::fs::symlink("real.pid", d.join("link.pid")).unwrap();
    let before = names(d);
    let srv = Serving::start(d, &["--pidfile", "link.pid", "m.img"]);
    let pid = wait_for_pid(&d.join("real.pid"));
    assert!(pid > 0);
    assert!(file_type(&d.join("link.pid")).is_symlink());
    srv.stop_ok();
    assert!(file_type(&d.join("link.pid")).is_symlink(), "the link kept");
    let mut want = before.clone();
    want.remove("real.pid");
    want.remove("serve.err");
    let mut now = names(d);
    now.remove("serve.err");
    assert_eq!(now, want, "only the pid file nines wrote was removed");

    // A regular file the user had: replaced while serving (the rule of every output), and
    // the pid file that replaced it removed at exit; nothing else touched.
    std::fs::write(d.join("had.pid"), b"user\n").unwrap();
    let before = names(d);
    let srv = Serving::start(d, &["--pidfile", "had.pid", "m.img"]);
    wait_for_pid(&d.join("had.pid"));
    srv.stop_ok();
    let mut want = before.clone();
    want.remove("had.pid");
    want.insert("serve.err".into());
    assert_eq!(names(d), want, "only the pid file nines wrote was removed");

    // A file that replaced ours while serving is not ours: kept.
    let srv = Serving::start(d, &["--pidfile", "own.pid", "m.img"]);
    wait_for_pid(&d.join("own.pid"));
    std::fs::write(d.join("other"), b"another server's\n").unwrap();
    std::fs::rename(d.join("other"), d.join("own.pid")).unwrap();
    srv.stop_ok();
    assert_eq!(
        std::fs::read(d.join("own.pid")).unwrap(),
        b"another server's\n",
        "a file nines did not create is never removed"
    );

    // Serve failing at start-up (its --lat-log header cannot be written): the user's file at
    // the pid file's path, and everything else, is left as it was.
    std::fs::write(d.join("user.pid"), b"user\n").unwrap();
    let before = names(d);
    let out = nines_bounded(
        &[
            "serve",
            "--socket",
            &listen,
            "--pidfile",
            "user.pid",
            "--lat-log",
            "/dev/full",
            "m.img",
        ],
        d,
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(d.join("user.pid")).unwrap(), b"user\n");
    assert_eq!(names(d), before, "nothing created or removed");
}

/// Item 2: a loop device over a member's file is the same member. Every verb that takes
/// members, targets or a buffer refuses the pair in one line naming both (and the file both
/// reach), before anything is written; an output on the loop's backing file is refused; loops
/// over disjoint ranges of one file are distinct, overlapping ones are not. Before: the loop
/// device was a different inode, and a.img was rewritten as a rebuild source.
#[test]
fn a_loop_device_over_a_member_file_is_the_same_member() {
    let dir = disk_dir();
    let d = dir.path();
    let a = make_file(d, "a.img", 8 << 20);
    make_file(d, "b.img", 8 << 20);
    make_file(d, "c.img", 8 << 20);
    let real_a = std::fs::canonicalize(&a).unwrap();
    let before = std::fs::read(&a).unwrap();
    let l = Loop::new(&a, &[]);
    let dev = l.path();
    let both = format!("(both reach the bytes of {})", real_a.display());
    let prof = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = ["profile", "--quiet", "--ios", "50", "--allow-writes"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    for (args, names) in [
        (
            [
                "rebuild",
                "--member",
                "2",
                "a.img",
                "b.img",
                dev,
                "--allow-writes",
            ]
            .map(String::from)
            .to_vec(),
            format!("member 0 (a.img) and member 2 ({dev}) are the same file {both}"),
        ),
        (
            ["check", "--repair", "--allow-writes", "a.img", "b.img", dev]
                .map(String::from)
                .to_vec(),
            format!("member 0 (a.img) and member 2 ({dev}) are the same file {both}"),
        ),
        (
            prof(&["--rw", "randwrite", "--layout", "raid0", dev, "a.img"]),
            format!("target 1 ({dev}) and target 2 (a.img) are the same file {both}"),
        ),
        (
            prof(&[
                "--rw",
                "randwrite",
                "--layout",
                "raid5",
                "a.img",
                "b.img",
                dev,
            ]),
            format!("target 1 (a.img) and target 3 ({dev})"),
        ),
        (
            prof(&[
                "--rw",
                "randwrite",
                "--layout",
                "serial",
                "a.img",
                "b.img",
                dev,
            ]),
            format!("target 1 (a.img) and target 3 ({dev})"),
        ),
        (
            prof(&["--rw", "randwrite", "a.img", dev]),
            format!("target 1 (a.img) and target 2 ({dev})"),
        ),
        (
            prof(&[
                "--rw",
                "randwrite",
                "--layout",
                "raid0",
                "--buffer",
                dev,
                "a.img",
                "b.img",
            ]),
            format!("target 1 (a.img) and --buffer ({dev})"),
        ),
        (
            [
                "serve",
                "--create",
                "--allow-writes",
                "--layout",
                "raid5",
                "a.img",
                "b.img",
                dev,
            ]
            .map(String::from)
            .to_vec(),
            format!("member 0 (a.img) and member 2 ({dev})"),
        ),
        (
            prof(&["--rw", "randread", dev, "--json", "a.img"]),
            format!("--json a.img: is also the run's target ({dev}) {both}"),
        ),
        (
            ["serve", "--json", "a.img", dev].map(String::from).to_vec(),
            format!("--json a.img: is also the run's member ({dev}) {both}"),
        ),
        (
            ["check", "--json", "a.img", dev, "b.img", "c.img"]
                .map(String::from)
                .to_vec(),
            format!("--json a.img: is also the run's member ({dev}) {both}"),
        ),
    ] {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = nines_bounded(&argv, d);
        refused(&out, &names);
        assert!(
            std::fs::read(&a).unwrap() == before,
            "{argv:?} changed a.img"
        );
    }
    // Two loops over one file: disjoint ranges are two members, overlapping ones are refused.
    let c = d.join("c.img");
    let low = Loop::new(&c, &["--offset", "0", "--sizelimit", "4194304"]);
    let high = Loop::new(&c, &["--offset", "4194304", "--sizelimit", "4194304"]);
    let mid = Loop::new(&c, &["--offset", "2097152", "--sizelimit", "4194304"]);
    common::ok(
        nines_bounded(
            &[
                "profile",
                "--quiet",
                "--ios",
                "50",
                "--layout",
                "raid0",
                low.path(),
                high.path(),
            ],
            d,
        ),
        "raid0 over disjoint loops of one file",
    );
    refused(
        &nines_bounded(
            &[
                "profile",
                "--quiet",
                "--ios",
                "50",
                "--layout",
                "raid0",
                low.path(),
                mid.path(),
            ],
            d,
        ),
        &format!("target 1 ({}) and target 2 ({})", low.path(), mid.path()),
    );
}

/// A bad option value clap parses: exit 2 (bad usage), one message naming the option, no panic.
fn usage(out: &Output, want: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "expected bad usage: {err}");
    assert!(err.contains(want), "expected `{want}` in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Item 3: option values that panicked (a zero chunk divided by, a huge one overflowed a
/// capacity) or were taken although no raid5 can have them (1 byte, 1 GiB), and a GC depth
/// that allocated 16 GiB: refused as bad usage (exit 2) with the bound; a GC's buffers over
/// their bound refused in one line; `log --sort` of a log too large to sort in memory refused
/// at once, naming the bound and what to do.
#[test]
fn option_values_that_panicked_or_allocated_without_bound_are_refused() {
    let dir = disk_dir();
    let d = dir.path();
    for m in ["m0", "m1", "m2"] {
        make_file(d, m, 1 << 20);
    }
    for verb in [&["check"][..], &["rebuild", "--member", "1"][..]] {
        for (chunk, want) in [
            ("0", "must be positive"),
            ("18446744073709551615", "over the bound of 16 MiB"),
            ("1", "not a multiple of 512"),
            ("1g", "over the bound of 16 MiB"),
        ] {
            let args: Vec<&str> = [verb, &["--chunk", chunk, "m0", "m1", "m2"][..]].concat();
            let out = nines_bounded(&args, d);
            usage(&out, "--chunk <CHUNK>");
            usage(&out, want);
        }
    }
    let sim = |extra: &[&str]| {
        let args: Vec<&str> = [&["sim", "--quiet", "--ios", "10"][..], extra].concat();
        nines_bounded(&args, d)
    };
    usage(
        &sim(&["--layout", "raid5", "--devices", "3", "--chunk", "0"]),
        "must be positive",
    );
    usage(
        &sim(&[
            "--layout",
            "serial",
            "--devices",
            "3",
            "--gc-depth",
            "65536",
        ]),
        "must be 1 to 4096",
    );
    refused(
        &sim(&[
            "--layout",
            "serial",
            "--devices",
            "3",
            "--gc-depth",
            "4096",
            "--gc-move",
            "1m",
        ]),
        "--gc-depth 4096 x --gc-move 1048576 needs more than the 1024 MiB",
    );
    // log --sort of a log over the bound (a real log's header, then 2 GiB of records: sparse).
    common::ok(
        nines(&["sim", "--quiet", "--ios", "50", "--lat-log", "r.lat"], d),
        "sim --lat-log",
    );
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("r.lat"))
        .unwrap();
    f.set_len(2 << 30).unwrap();
    drop(f);
    let out = nines_bounded(&["log", "--sort", "r.lat", "-o", "r.csv"], d);
    refused(
        &out,
        "--sort holds at most 33554432 records (1 GiB) in memory",
    );
    assert!(!d.join("r.csv").exists());
}

/// Item 4: outputs nobody named follow the rules named ones do. merge's interval log beside
/// -o (out.hlog) replaces an existing file as -o does, is never written through a symlink
/// there, and never onto -o itself; `report` of a stream (`/dev/stdin`) needs -o instead
/// of deriving `/dev/stdin.html`. Before: out.hlog was replaced, the link's file overwritten,
/// both outputs went to one path, and a file appeared in /dev.
#[test]
fn derived_outputs_follow_the_rules_of_named_ones() {
    let dir = disk_dir();
    let d = dir.path();
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
    std::fs::write(d.join("out.hlog"), b"the user's").unwrap();
    std::fs::write(d.join("victim"), b"the victim").unwrap();
    std::os::unix::fs::symlink("victim", d.join("link.hlog")).unwrap();
    let before = names(d);
    refused(
        &nines(&["merge", "--quiet", "h.json", "-o", "link.json"], d),
        "link.hlog is a symbolic link (where the merged interval log beside -o goes)",
    );
    refused(
        &nines(
            &["merge", "--quiet", "h.json", "-o", "m.hlog", "--replace"],
            d,
        ),
        "-o and -o (its interval log) both name m.hlog",
    );
    assert_eq!(names(d), before, "nothing written");
    assert_eq!(std::fs::read(d.join("out.hlog")).unwrap(), b"the user's");
    assert_eq!(std::fs::read(d.join("victim")).unwrap(), b"the victim");
    // An existing regular file there is replaced, as -o is (with or without the old
    // --replace).
    common::ok(
        nines(&["merge", "--quiet", "h.json", "-o", "out.json"], d),
        "merge over an existing log",
    );
    assert_ne!(std::fs::read(d.join("out.hlog")).unwrap(), b"the user's");

    // report of a stream: -o is needed; nothing appears in /dev.
    let _ = std::fs::remove_file("/dev/stdin.html");
    let report_stdin = |extra: &[&str]| {
        Command::new(BIN)
            .args(["report", "/dev/stdin"])
            .args(extra)
            .current_dir(d)
            .stdin(std::fs::File::open(d.join("h.json")).unwrap())
            .output()
            .unwrap()
    };
    let out = report_stdin(&[]);
    let gone = !Path::new("/dev/stdin.html").exists();
    let _ = std::fs::remove_file("/dev/stdin.html");
    refused(&out, "report: /dev/stdin is not a regular file");
    refused(&out, "give -o FILE for the page");
    assert!(gone, "report wrote /dev/stdin.html");
    common::ok(report_stdin(&["-o", "page.html"]), "report /dev/stdin -o");
    assert!(d.join("page.html").exists());
}

/// Item 5: streams. A per-I/O log on /dev/null or a pipe is written without the fdatasync
/// that only a regular file has (profile and serve failed after the run with EINVAL, blaming
/// free space, and discarded every output); two outputs on one stream are refused before any
/// work; `sweep --json -` derives no `-.points` folder; `report --lat-log` of a pipe reads it
/// once (it read it twice: "bad magic").
#[test]
fn streams_are_written_once_each_and_never_fsynced() {
    let dir = disk_dir();
    let d = dir.path();
    make_file(d, "m.img", 4 << 20);
    let prof = ["profile", "--quiet", "--ios", "200", "--json", "p.json"];
    common::ok(
        nines(
            &[&prof[..], &["--lat-log", "/dev/null", "m.img"]].concat(),
            d,
        ),
        "profile --lat-log /dev/null",
    );
    assert!(d.join("p.json").exists(), "the run's other outputs kept");
    let out = common::ok(
        nines(&[&prof[..], &["--lat-log", "-", "m.img"]].concat(), d),
        "profile --lat-log - into a pipe",
    );
    assert!(out.stdout.len() > 200 * 24, "the log went to the pipe");
    let srv = Serving::start(d, &["--lat-log", "/dev/null", "m.img"]);
    srv.stop_ok();

    // Two outputs on one stream: refused before the run, nothing written.
    std::fs::remove_file(d.join("p.json")).unwrap();
    for args in [
        vec![
            "sim",
            "--quiet",
            "--ios",
            "50",
            "--json",
            "-",
            "--lat-log",
            "-",
        ],
        vec![
            "sim",
            "--quiet",
            "--ios",
            "50",
            "--json",
            "/dev/stdout",
            "--hdr-log",
            "-",
        ],
        vec![
            "profile",
            "--quiet",
            "--ios",
            "50",
            "--json",
            "-",
            "--lat-log",
            "-",
            "m.img",
        ],
    ] {
        let out = nines(&args, d);
        refused(&out, "one stream, where their bytes would interleave");
        assert!(out.stdout.is_empty(), "{args:?} wrote before refusing");
    }
    // A sweep's points go beside a file: not `-.points`.
    let before = names(d);
    let out = nines(
        &[
            "sweep", "--qd", "1,2", "--json", "-", "--", "m.img", "--ios", "20",
        ],
        d,
    );
    refused(&out, "--json -: is not a regular file");
    assert_eq!(names(d), before, "no -.points folder");

    // report --lat-log of a pipe: read once, the same page as from the file.
    common::ok(
        nines(
            &[
                "sim",
                "--quiet",
                "--ios",
                "2000",
                "--json",
                "r.json",
                "--lat-log",
                "r.lat",
            ],
            d,
        ),
        "sim with a per-I/O log",
    );
    common::ok(
        nines(
            &["report", "r.json", "--lat-log", "r.lat", "-o", "file.html"],
            d,
        ),
        "report from the file",
    );
    let piped = Command::new(BIN)
        .args([
            "report",
            "r.json",
            "--lat-log",
            "/dev/stdin",
            "-o",
            "pipe.html",
        ])
        .current_dir(d)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = std::fs::read(d.join("r.lat")).unwrap();
    let mut stdin = piped.stdin.as_ref().unwrap();
    std::io::Write::write_all(&mut stdin, &log).unwrap();
    let mut piped = piped;
    drop(piped.stdin.take());
    common::ok(
        piped.wait_with_output().unwrap(),
        "report --lat-log from a pipe",
    );
    let page = |n: &str| std::fs::read_to_string(d.join(n)).unwrap();
    assert_eq!(
        page("pipe.html").replace("/dev/stdin", "r.lat"),
        page("file.html"),
        "the pipe's page is the file's"
    );
}

/// Item 6: every output, and the temporary name it is written under, is checked before any
/// work: --json in /proc, in a read-only directory, on a socket, with a name too long once
/// made temporary, or ending in / is refused by rebuild, check and serve before a member is
/// read or written (rebuild rewrote the replaced member, check read every row, then both
/// failed); the trailing slash for every verb with outputs.
#[test]
fn outputs_that_cannot_be_created_are_refused_before_the_work() {
    let dir = disk_dir();
    let d = dir.path();
    for (i, m) in ["m0", "m1", "m2"].iter().enumerate() {
        let data: Vec<u8> = (0..1usize << 20)
            .map(|j| (j.wrapping_mul(31 + i) >> 3) as u8)
            .collect();
        std::fs::write(d.join(m), data).unwrap();
    }
    let before = std::fs::read(d.join("m2")).unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(d.join("a.sock")).unwrap();
    let long = format!("{}.json", "x".repeat(240));
    let listen = s(&d.join("nbd.sock")).to_string();
    for (json, want) in [
        (
            "/proc/x.json",
            "--json /proc/x.json: cannot create a file in /proc",
        ),
        ("a.sock", "--json a.sock: is a socket"),
        (long.as_str(), "the name is too long once made temporary"),
        ("out.json/", "--json out.json/: ends in /"),
    ] {
        for verb in [
            vec!["rebuild", "--member", "2"],
            vec!["check"],
            vec!["serve", "--socket", &listen],
        ] {
            let args: Vec<&str> = [&verb[..], &["--json", json, "m0", "m1", "m2"][..]].concat();
            let out = nines_bounded(&args, d);
            let err = refused(&out, want);
            assert!(
                !err.contains("checked") && !err.contains("serving"),
                "{err}"
            );
            assert!(
                std::fs::read(d.join("m2")).unwrap() == before,
                "{args:?} wrote m2"
            );
        }
    }
    assert!(!d.join(&long).exists() && !d.join("nbd.sock").exists());
    // A read-only directory (a read-only bind mount in a private mount namespace, gone with
    // the command).
    std::fs::create_dir(d.join("ro")).unwrap();
    for verb in [
        "rebuild --member 2",
        "check",
        &format!("serve --socket {listen}"),
    ] {
        let out = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(format!(
                "mount --bind '{ro}' '{ro}' && mount -o remount,bind,ro '{ro}' && cd '{d}' && \
                 exec timeout 60 {BIN} {verb} --json ro/r.json m0 m1 m2",
                ro = d.join("ro").display(),
                d = d.display()
            ))
            .output()
            .expect("unshare (util-linux) runs");
        let err = refused(&out, "--json ro/r.json: cannot create a file in ro");
        assert!(
            !err.contains("checked") && !err.contains("serving"),
            "{err}"
        );
        assert!(
            std::fs::read(d.join("m2")).unwrap() == before,
            "{verb} wrote m2"
        );
    }
    // A trailing slash, for the other verbs' outputs.
    common::ok(
        nines(&["sim", "--quiet", "--ios", "50", "--json", "s.json"], d),
        "sim",
    );
    for args in [
        vec!["sim", "--quiet", "--ios", "50", "--json", "o.json/"],
        vec![
            "profile",
            "--quiet",
            "--ios",
            "50",
            "--lat-log",
            "o.lat/",
            "m0",
        ],
        vec!["report", "s.json", "-o", "o.html/"],
        vec!["compare", "s.json", "s.json", "-o", "o.html/"],
        vec!["merge", "s.json", "-o", "o.json/"],
        vec!["log", "o.lat", "-o", "o.csv/"],
        vec!["doctor", "--json", "o.json/"],
    ] {
        refused(&nines(&args, d), "ends in /, which names a directory");
    }
}

/// Item 2, partitions: a loop device over a file holding an MBR with two partitions
/// (`losetup -P`, `partx -a`): a partition and its disk, a partition and the file below both,
/// or an output on that file are refused naming what they share; the two partitions are
/// distinct members.
#[test]
fn a_partition_reaches_its_disk_and_the_file_below_it() {
    let dir = disk_dir();
    let d = dir.path();
    let img = make_file(d, "p.img", 16 << 20);
    // An MBR: partition 1 at sector 2048, partition 2 at 10240, 8192 sectors each.
    let mut mbr = [0u8; 512];
    for (i, start) in [2048u32, 10240].into_iter().enumerate() {
        let e = 446 + 16 * i;
        mbr[e + 4] = 0x83;
        mbr[e + 8..e + 12].copy_from_slice(&start.to_le_bytes());
        mbr[e + 12..e + 16].copy_from_slice(&8192u32.to_le_bytes());
    }
    mbr[510] = 0x55;
    mbr[511] = 0xaa;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
        f.write_all_at(&mbr, 0).unwrap();
    }
    let l = Loop::new(&img, &["-P"]);
    let disk = l.path().to_string();
    let (p1, p2) = (format!("{disk}p1"), format!("{disk}p2"));
    let t0 = Instant::now();
    while !(Path::new(&p1).exists() && Path::new(&p2).exists()) {
        // Without udev the kernel's scan may need asking.
        let _ = Command::new("partx").args(["-a", &disk]).output();
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{p1} and {p2} never appeared"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let real = std::fs::canonicalize(&img).unwrap();
    let prof = ["profile", "--quiet", "--ios", "50", "--layout", "raid0"];
    let run = |extra: &[&str]| nines_bounded(&[&prof[..], extra].concat(), d);
    refused(
        &run(&[&p1, &disk]),
        &format!(
            "target 1 ({p1}) and target 2 ({disk}) are the same file (both reach the bytes of {disk})"
        ),
    );
    refused(
        &run(&[&p2, "p.img"]),
        &format!(
            "target 1 ({p2}) and target 2 (p.img) are the same file (both reach the bytes of {})",
            real.display()
        ),
    );
    refused(
        &run(&[&p1, &p2, "--json", "p.img"]),
        "--json p.img: is also the run's target",
    );
    common::ok(run(&[&p1, &p2]), "raid0 over the two partitions");
}

/// Without libblkid (NINES_NO_LIBBLKID=1) the built-in probe refuses every format the safety
/// tests put on a device, those at its end included, and fails closed on data it does not
/// recognise: only a blank device, or `--force`, is written. Each device is unchanged after a
/// refusal.
#[test]
fn without_libblkid_the_built_in_probe_fails_closed() {
    use std::os::unix::fs::FileExt;
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("data"), b"precious").unwrap();
    let src = s(&src).to_string();
    let sh = |cmd: &str| {
        let st = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
        assert!(st.success(), "{cmd} failed: run `bash scripts/setup.sh`");
    };
    let write = |dev: &str, force: bool| {
        let mut args = vec![
            "profile",
            "--quiet",
            "--rw",
            "randwrite",
            "--allow-writes",
            "--ios",
            "10",
        ];
        if force {
            args.push("--force");
        }
        args.push(dev);
        Command::new(BIN)
            .env("NINES_NO_LIBBLKID", "1")
            .args(&args)
            .output()
            .unwrap()
    };
    let poke = |dev: &str, off: u64, bytes: &[u8]| {
        let f = std::fs::OpenOptions::new().write(true).open(dev).unwrap();
        f.write_all_at(bytes, off).unwrap();
        f.sync_all().unwrap();
    };
    const SIZE: u64 = 16 << 20;
    let md = 0xa92b_4efcu32.to_le_bytes();
    // (what the refusal names, an image made by the format's own tool, or bytes put by hand)
    enum Put {
        Image(String),
        Bytes(u64, Vec<u8>),
    }
    let img = |name: &str| s(&tmp.path().join(name)).to_string();
    let cases = [
        (
            "squashfs",
            Put::Image(format!(
                "mksquashfs {src} {} -noappend -quiet -no-progress >/dev/null",
                img("sq")
            )),
        ),
        (
            "minix",
            Put::Image(format!(
                "truncate -s 8M {0} && mkfs.minix {0} >/dev/null",
                img("minix")
            )),
        ),
        (
            "cramfs",
            Put::Image(format!("mkfs.cramfs {src} {} >/dev/null", img("cramfs"))),
        ),
        (
            "bfs",
            Put::Image(format!(
                "truncate -s 8M {0} && mkfs.bfs {0} >/dev/null 2>&1",
                img("bfs")
            )),
        ),
        (
            "iso9660",
            Put::Image(format!(
                "genisoimage -quiet -o {} {src} 2>/dev/null",
                img("iso")
            )),
        ),
        // romfs: "-rom1fs-" at byte 0, then the image size, big-endian (Linux
        // Documentation/filesystems/romfs.rst).
        (
            "romfs",
            Put::Bytes(
                0,
                [&b"-rom1fs-"[..], &4096u32.to_be_bytes(), b"\0\0\0\0rom\0"].concat(),
            ),
        ),
        // md 1.0: the superblock 8 KiB before the end, rounded down to 4 KiB (drivers/md/md.c,
        // super_1_load), magic then major_version 1, little-endian.
        (
            "metadata 1.0",
            Put::Bytes(
                ((SIZE / 512 - 16) & !7) * 512,
                [&md[..], &1u32.to_le_bytes()].concat(),
            ),
        ),
        // md 0.90: 64 KiB before the end rounded down to 64 KiB (md_p.h, MD_NEW_SIZE_SECTORS).
        (
            "metadata 0.90",
            Put::Bytes(
                (SIZE & !65535) - 65536,
                [&md[..], &0u32.to_le_bytes()].concat(),
            ),
        ),
        // GPT's backup header at the last LBA (zram's logical blocks are 4 KiB).
        (
            "backup header",
            Put::Bytes(SIZE - 4096, b"EFI PART\0\0\x01\0".to_vec()),
        ),
    ];
    for (want, put) in cases {
        let z = common::Zram::new("16M");
        let dev = z.path();
        match put {
            Put::Image(mk) => {
                sh(&mk);
                let file = mk
                    .split_whitespace()
                    .find(|w| w.starts_with(s(tmp.path())) && !w.ends_with("src"))
                    .unwrap()
                    .to_string();
                sh(&format!(
                    "dd if={file} of={dev} bs=1M conv=fsync status=none"
                ));
            }
            Put::Bytes(off, b) => poke(&dev, off, &b),
        }
        let before = std::fs::read(&dev).unwrap();
        let e = refused(&write(&dev, false), want);
        assert!(
            e.contains("built-in probe (libblkid not loaded)") && e.contains("--force"),
            "{want}: {e}"
        );
        assert!(
            std::fs::read(&dev).unwrap() == before,
            "{want}: the device changed"
        );
    }

    // Data no probe names: refused, saying libblkid is off, what was read, and --force.
    let z = common::Zram::new("16M");
    let dev = z.path();
    assert!(
        write(&dev, false).status.success(),
        "a blank device is written"
    );
    let z = common::Zram::new("16M");
    let dev = z.path();
    poke(&dev, 3 << 20, &[0x5a; 4096]);
    poke(&dev, SIZE - 8192, b"a vendor's metadata");
    let before = std::fs::read(&dev).unwrap();
    let e = refused(&write(&dev, false), "does not recognise the data");
    for w in [
        "NINES_NO_LIBBLKID is set",
        "first 68 KiB",
        "last 128 KiB",
        "--force",
    ] {
        assert!(e.contains(w), "`{w}` in: {e}");
    }
    assert!(std::fs::read(&dev).unwrap() == before, "the device changed");
    let o = write(&dev, true);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Starts nines in `dir`, sends `sig` after `delay` (it must still be running then), and waits
/// up to `bound` for it to end (killed and failed past it). Returns its exit code and stderr.
fn signalled(
    args: &[&str],
    dir: &Path,
    delay: Duration,
    sig: libc::c_int,
    bound: Duration,
) -> (Option<i32>, String, Vec<u32>) {
    let mut c = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(delay);
    assert!(
        c.try_wait().unwrap().is_none(),
        "{args:?} ended before the signal: the test needs a longer run"
    );
    let children = children_of(c.id());
    // SAFETY: a signal to our own child, not yet reaped.
    unsafe { libc::kill(c.id() as libc::pid_t, sig) };
    let t0 = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > bound {
            let _ = c.kill();
            let o = c.wait_with_output().unwrap();
            panic!(
                "{args:?}: still running {bound:?} after signal {sig}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = c.wait_with_output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        children,
    )
}

/// The pids whose parent is `pid` (from /proc).
fn children_of(pid: u32) -> Vec<u32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(n) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{n}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": the fields after the last ')'.
        let rest = &stat[stat.rfind(')').unwrap_or(0) + 1..];
        if rest.split_whitespace().nth(1) == Some(&pid.to_string()) {
            v.push(n);
        }
    }
    v
}

/// Whether `pid` still runs (exists and is not a zombie waiting to be reaped).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        let rest = &s[s.rfind(')').unwrap_or(0) + 1..];
        rest.split_whitespace().next() != Some("Z")
    })
}

/// Item 2, sim: a background load that can never be served is refused instead of running
/// forever; SIGINT during preconditioning and during --calibrate ends the run at once with 130.
#[test]
fn sim_ends_promptly_on_a_signal_and_refuses_an_endless_background() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = nines_bounded(
        &[
            "sim",
            "--quiet",
            "--bg-rate",
            "1000",
            "--bg-service",
            "1s",
            "--ios",
            "100000",
        ],
        d,
    );
    refused(&o, "no I/O would ever complete");
    // Preconditioning a full-scale device takes minutes: SIGINT ends it within milliseconds once
    // it has begun. Before it, the device's mapping tables (1.9 GB at scale 1) are allocated and
    // written, about 5 s of page faults on an idle 2-CPU host that no flag interrupts, and
    // several times that on a loaded one: hence a bound of 30 s from the signal at 3 s.
    let (code, err, _) = signalled(
        &[
            "sim",
            "--quiet",
            "--scale",
            "1",
            "--precondition",
            "steady",
            "--rw",
            "randwrite",
            "--ios",
            "1000",
            "--json",
            "out.json",
        ],
        d,
        Duration::from_secs(3),
        libc::SIGINT,
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("interrupted while preconditioning"), "{err}");
    assert!(!d.join("out.json").exists());
    // --calibrate, from a simulated run: nothing is written, 130.
    let o = nines(
        &[
            "sim", "--quiet", "--ios", "20000", "--rw", "randread", "--json", "run.json",
        ],
        d,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (code, err, _) = signalled(
        &[
            "sim",
            "--quiet",
            "--calibrate",
            "run.json",
            "--calibrate-ios",
            "20000000",
            "--calibrate-out",
            "fit.toml",
        ],
        d,
        Duration::from_secs(2),
        libc::SIGINT,
        Duration::from_secs(5),
    );
    assert_eq!(code, Some(130), "{err}");
    assert!(!d.join("fit.toml").exists());
}

/// Item 2, FIFOs: an output FIFO nobody reads is waited for without swallowing SIGINT or
/// SIGTERM (130, nothing written); --fio-json with --hdr-log on a FIFO does not read the FIFO
/// back (it hung) and finishes.
#[test]
fn output_fifos_neither_swallow_signals_nor_are_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fifo = d.join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for (verb, sig) in [
        ("sim", libc::SIGINT),
        ("sim", libc::SIGTERM),
        ("profile", libc::SIGTERM),
    ] {
        let mut args = vec![verb, "--quiet", "--ios", "100", "--json", "fifo"];
        if verb == "profile" {
            args.extend(["--size", "4m"]);
        }
        let (code, err, _) = signalled(
            &args,
            d,
            Duration::from_secs(2),
            sig,
            Duration::from_secs(5),
        );
        assert_eq!(code, Some(130), "{verb} {sig}: {err}");
        assert!(err.contains("waiting for a reader"), "{err}");
    }
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let o = nines_bounded(
        &[
            "sim",
            "--quiet",
            "--ios",
            "2000",
            "--hdr-log",
            "fifo",
            "--fio-json",
            "fio.json",
        ],
        d,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        !reader.join().unwrap().is_empty(),
        "the FIFO's reader got the log"
    );
    assert!(d.join("fio.json").exists());
}

/// Item 2: check --repair stopped by SIGINT exits 130 as rebuild does; a sweep or fleet killed
/// by SIGKILL, SIGHUP or SIGQUIT leaves no child running.
#[test]
fn check_exits_130_and_sweep_and_fleet_children_die_with_them() {
    let dir = disk_dir();
    let d = dir.path();
    for m in ["a.img", "b.img", "c.img"] {
        std::fs::File::create(d.join(m))
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
    }
    let (code, err, _) = signalled(
        &[
            "check", "--repair", "--rate", "1m", "--quiet", "a.img", "b.img", "c.img",
        ],
        d,
        Duration::from_secs(2),
        libc::SIGINT,
        Duration::from_secs(5),
    );
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("interrupted after"), "{err}");

    std::fs::File::create(d.join("t.dat"))
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let cases: [(&[&str], libc::c_int); 4] = [
        (
            &[
                "sweep",
                "--qd",
                "1,2",
                "--rws",
                "randread",
                "-o",
                "sw",
                "t.dat",
                "--runtime",
                "60s",
            ],
            libc::SIGKILL,
        ),
        (
            &[
                "sweep",
                "--qd",
                "1,2",
                "--rws",
                "randread",
                "-o",
                "sw2",
                "t.dat",
                "--runtime",
                "60s",
            ],
            libc::SIGHUP,
        ),
        (
            &[
                "fleet",
                "--tasks",
                "2",
                "-o",
                "fl",
                "--",
                "profile",
                "t.dat",
                "--rw",
                "randread",
                "--runtime",
                "60s",
            ],
            libc::SIGKILL,
        ),
        (
            &[
                "fleet",
                "--tasks",
                "2",
                "-o",
                "fl2",
                "--",
                "profile",
                "t.dat",
                "--rw",
                "randread",
                "--runtime",
                "60s",
            ],
            libc::SIGQUIT,
        ),
    ];
    for (args, sig) in cases {
        let (_, err, children) = signalled(
            args,
            d,
            Duration::from_secs(4),
            sig,
            Duration::from_secs(10),
        );
        assert!(!children.is_empty(), "{args:?}: no child seen: {err}");
        let t0 = Instant::now();
        while children.iter().any(|&c| alive(c)) && t0.elapsed() < Duration::from_secs(15) {
            std::thread::sleep(Duration::from_millis(50));
        }
        for c in children {
            assert!(!alive(c), "{args:?} signal {sig}: child {c} still runs");
        }
    }
}

/// Item 4: `fleet -- sim -q` runs (fleet's own --quiet is not added twice); merge takes a run
/// whose interval log was not copied with it, saying so; doctor refuses to write its capture
/// or report into the tree it reads.
#[test]
fn fleet_quiet_merge_without_its_log_and_doctor_outside_its_tree() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = nines_bounded(
        &[
            "fleet",
            "--tasks",
            "2",
            "--out",
            "fl",
            "--",
            "sim",
            "-q",
            "--ios",
            "100",
            "--precondition",
            "none",
        ],
        d,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(d.join("fl/merged.json").exists());

    let o = nines(
        &[
            "sim",
            "--quiet",
            "--ios",
            "500",
            "--json",
            "r.json",
            "--hdr-log",
            "r.hlog",
        ],
        d,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::create_dir(d.join("gathered")).unwrap();
    std::fs::copy(d.join("r.json"), d.join("gathered/r.json")).unwrap();
    let o = nines(&["merge", "gathered/r.json", "-o", "m.json"], d);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("warning") && err.contains("not there"),
        "{err}"
    );
    assert!(d.join("m.json").exists() && !d.join("m.hlog").exists());

    // A captured tree, and outputs into it: refused, the tree unchanged.
    let o = nines(&["doctor", "--capture", "cap.tar"], d);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::create_dir(d.join("root")).unwrap();
    assert!(
        Command::new("tar")
            .args(["xf", "cap.tar", "-C", "root"])
            .current_dir(d)
            .status()
            .unwrap()
            .success()
    );
    let file = walk_files(&d.join("root"))
        .into_iter()
        .next()
        .expect("a captured file");
    let before = std::fs::read(&file).unwrap();
    for option in ["--capture", "--json"] {
        let o = nines(&["doctor", "--root", "root", option, s(&file)], d);
        refused(&o, "inside the tree doctor reads");
        assert_eq!(std::fs::read(&file).unwrap(), before, "{option}");
    }
    let o = nines(&["doctor", "--capture", "/sys/kernel/nines.tar"], d);
    refused(&o, "inside the tree doctor reads");
}

fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// Item 4: a verb with no work loop of its own (report, merge, log, compare...) stopped by
/// SIGINT or SIGTERM exits 130 with one line, as the verbs with a loop do, instead of dying of
/// the signal; an output it had begun (its temporary name) is removed. Here report waits on
/// an input FIFO whose writer never writes.
#[test]
fn verbs_without_a_loop_exit_130_on_a_signal_and_leave_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fifo = d.join("in.json");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // A writer that holds the FIFO open and writes nothing: report blocks reading it.
        let holder = {
            let fifo = fifo.clone();
            std::thread::spawn(move || {
                let f = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
                std::thread::sleep(Duration::from_secs(4));
                drop(f);
            })
        };
        let (code, err, _) = signalled(
            &["report", "in.json", "--output", "out.html"],
            d,
            Duration::from_millis(800),
            sig,
            Duration::from_secs(5),
        );
        holder.join().unwrap();
        assert_eq!(code, Some(130), "signal {sig}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.starts_with("nines: interrupted"), "{err}");
        let left: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "in.json")
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}
