//! Issue 39 item 3: the hostile matrix, generated from the clap definitions. The binary lists
//! every argument of every subcommand that takes a value (`NINES_CLI_SPEC=1`, walking
//! `Cli::command()`); each one that takes a path is given every hostile destination (block
//! devices with and without a filesystem, links, a directory, a FIFO, a socket, a character
//! device, a /proc file, a read-only directory, the run's own input, a trailing slash, an
//! over-long name, nothing), each one that takes a number every extreme. A new flag is covered
//! without anyone listing it.
//!
//! The oracle, per case: nothing not named on the command line changes (the fixture tree and the
//! zram devices are hashed before and after), no panic (exit 101, "panicked"), no hang (killed
//! after a bound: a failure), the exit status is 0, 1, 2 or 130, and an error is one line that
//! starts with "nines".
//!
//! CI runs a deterministic sample (`hostile_matrix_sample`, 500 cases, about 20 s on 2 CPUs); `NINES_HOSTILE_ALL=1`
//! runs every case and `NINES_HOSTILE_CASES=N` the first N of the same shuffled order
//! (`NINES_HOSTILE_SERIAL=1`: one case at a time, `NINES_HOSTILE_VERBOSE=1`: every case's
//! status and stderr)
//! (bench/hostile.sh's matrix mode). `NINES=PATH` tests a prebuilt binary. The test prints
//! `hostile matrix: runs=N failures=M` and every failure on one line each.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn bin() -> PathBuf {
    match std::env::var_os("NINES") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_nines")),
    }
}

/// One argument that takes a value, as the binary lists it.
#[derive(Clone, Debug)]
struct Spec {
    verb: Vec<String>,
    long: String,
    kind: String,
}

fn spec() -> Vec<Spec> {
    let o = Command::new(bin())
        .env("NINES_CLI_SPEC", "1")
        .output()
        .unwrap();
    assert!(o.status.success());
    let text = String::from_utf8(o.stdout).unwrap();
    let v: Vec<Spec> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Spec {
                verb: f[0].split(' ').map(String::from).collect(),
                long: f[2].to_string(),
                kind: f[3].to_string(),
            }
        })
        // Strings parsed later ("--scale", "--cpus", lists) get the numeric extremes too.
        .filter(|s| ["path", "number", "other"].contains(&s.kind.as_str()))
        .collect();
    assert!(v.len() > 100, "the spec lists too few arguments: {text}");
    v
}

/// The base command of a verb: valid on its own, with `{P}` where its positional goes (the
/// default in `base_positional`), outputs named `o_*` (they may change) in the case's directory.
fn base(verb: &[String]) -> Option<(Vec<String>, Option<String>)> {
    let f = |n: &str| n.to_string();
    let v: Vec<&str> = verb.iter().map(String::as_str).collect();
    let (args, pos): (Vec<String>, Option<String>) = match v.as_slice() {
        ["profile"] => (
            sv(&["profile", "--quiet", "--ios", "50", "--size", "1m", "{P}"]),
            Some("o_t.dat".into()),
        ),
        ["log"] => (sv(&["log", "{P}"]), Some(f("s.lat"))),
        ["sim"] => (
            sv(&["sim", "--quiet", "--ios", "200", "--precondition", "none"]),
            None,
        ),
        ["doctor"] => (sv(&["doctor", "--json", "o_doctor.json"]), None),
        ["tune"] => (
            sv(&["tune", "--plan", "--output", "o_plan.json", "{P}"]),
            Some("loop0".into()),
        ),
        ["report"] => (
            sv(&["report", "{P}", "--output", "o_r.html"]),
            Some(f("s.json")),
        ),
        ["compare"] => (
            vec![
                "compare".into(),
                "{P}".into(),
                f("s.json"),
                "--output".into(),
                "o_c.html".into(),
            ],
            Some(f("s.json")),
        ),
        ["sweep"] => (
            sv(&[
                "sweep",
                "--sim",
                "afa-m2-2018",
                "--qd",
                "1",
                "--output",
                "o_sw",
                "--",
                "--ios",
                "100",
                "--precondition",
                "none",
            ]),
            None,
        ),
        ["merge"] => (
            sv(&["merge", "{P}", "--output", "o_m.json"]),
            Some(f("s.json")),
        ),
        ["fleet"] => (
            sv(&[
                "fleet",
                "--tasks",
                "1",
                "--out",
                "o_fl",
                "--",
                "sim",
                "--ios",
                "100",
                "--precondition",
                "none",
            ]),
            None,
        ),
        ["fleet", sub] => (
            vec!["fleet".into(), sub.to_string(), "{P}".into()],
            Some(f("o_flin")),
        ),
        ["serve"] => (
            sv(&["serve", "--size", "1m", "--socket", "o_nbd.sock", "{P}"]),
            Some("o_member.img".into()),
        ),
        ["rebuild"] => (
            sv(&["rebuild", "--member", "1", "a.img", "{P}", "c.img"]),
            Some("o_b.img".into()),
        ),
        ["check"] => (
            sv(&["check", "--quiet", "a.img", "{P}", "c.img"]),
            Some("o_b.img".into()),
        ),
        _ => return None,
    };
    Some((args, pos))
}

fn sv(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// The hostile destinations, by name: the path given, and whether the case may change it (an
/// input of the run may never change).
fn destinations(fx: &Path, z: &Zrams) -> Vec<(&'static str, String, bool)> {
    let f = |n: &str| fx.join(n).display().to_string();
    vec![
        ("blank block device", z.blank.clone(), true),
        ("block device with ext4", z.ext4.clone(), true),
        ("symlink", f("link"), true),
        ("dangling link", f("dangling"), true),
        ("directory", f("dir"), true),
        ("FIFO", f("fifo"), true),
        ("socket", f("sock"), true),
        ("character device", f("null"), true),
        ("/proc file", "/proc/version".into(), false),
        ("read-only directory", f("rodir/new.out"), true),
        ("trailing slash", f("file.dat/"), true),
        ("over-long name", f(&"x".repeat(300)), true),
        ("empty", String::new(), true),
        // The same bytes as file.dat through another name (same inode).
        ("hard link", f("hard"), true),
        // A fresh node of /dev/full's numbers: every write fails with ENOSPC.
        ("full device", f("full"), true),
        ("name with a newline", f("new\nline.out"), true),
        ("the root directory", "/".into(), false),
    ]
}

const NUMBERS: [&str; 14] = [
    "0",
    "-1",
    "18446744073709551616",
    "1e308",
    "99999999999999999999g",
    "nan",
    "1",
    "4294967296",
    "9223372036854775807",
    "1.5",
    "inf",
    "1e-9",
    "0x10",
    "-0",
];

struct Zrams {
    blank: String,
    ext4: String,
    _devs: Vec<common::Zram>,
}

#[derive(Clone, Debug)]
struct Case {
    args: Vec<String>,
    what: String,
    /// Paths the case names (may change), beyond the case directory's `o_*`.
    named: Vec<String>,
    /// zram devices the case names (hashed before and after).
    devices: Vec<String>,
    /// A file of the case's directory the run reads, given as this case's value: it must not
    /// change, whatever its name.
    protected: Option<String>,
    serve: bool,
}

fn cases(fx: &Path, z: &Zrams) -> Vec<Case> {
    let mut out = Vec::new();
    for s in spec() {
        let Some((args, pos)) = base(&s.verb) else {
            continue;
        };
        let values: Vec<(String, String, bool)> = if s.kind == "path" {
            let mut v: Vec<(String, String, bool)> = destinations(fx, z)
                .into_iter()
                .map(|(n, p, w)| (n.to_string(), p, w))
                .collect();
            // The run's own input: what its base command reads, in the case's directory.
            if let Some(input) = own_input(&s.verb) {
                v.push(("the run's own input".into(), input.into(), false));
            }
            v
        } else {
            NUMBERS
                .iter()
                .map(|n| (n.to_string(), n.to_string(), false))
                .collect()
        };
        for (name, value, may_change) in values {
            let mut a: Vec<String> = Vec::new();
            if s.long.is_empty() {
                // The positional, replaced.
                if pos.is_none() {
                    continue;
                }
                for x in &args {
                    a.push(if x == "{P}" { value.clone() } else { x.clone() });
                }
            } else {
                // `--flag=VALUE`, so that "-1" and "" reach the value parser; a flag the base
                // already gives has its value replaced.
                let flag = format!("--{}", s.long);
                let given = args[..args.iter().position(|x| x == "--").unwrap_or(args.len())]
                    .iter()
                    .position(|x| *x == flag);
                let at = s.verb.len();
                let mut skip = false;
                for (i, x) in args.iter().enumerate() {
                    if skip {
                        skip = false;
                        continue;
                    }
                    if given == Some(i) {
                        skip = true;
                        continue;
                    }
                    if i == at {
                        a.push(format!("{flag}={value}"));
                    }
                    a.push(if x == "{P}" {
                        pos.clone().unwrap()
                    } else {
                        x.clone()
                    });
                }
                if args.len() == at {
                    a.push(format!("{flag}={value}"));
                }
            }
            let arg = if s.long.is_empty() {
                "<positional>".to_string()
            } else {
                format!("--{}", s.long)
            };
            let devices = if value.starts_with("/dev/zram") {
                vec![value.clone()]
            } else {
                Vec::new()
            };
            out.push(Case {
                protected: (name == "the run's own input").then(|| value.clone()),
                what: format!("{} {arg} = {name}", s.verb.join(" ")),
                named: match (may_change, name.as_str()) {
                    // Named through another name: the same file.
                    (true, "hard link") => vec![value, fx.join("file.dat").display().to_string()],
                    (true, _) => vec![value],
                    (false, _) => Vec::new(),
                },
                devices,
                serve: s.verb == ["serve"],
                args: a,
            });
        }
    }
    out
}

/// The file a verb's base command reads (an input, a target, a member), if any.
fn own_input(verb: &[String]) -> Option<&'static str> {
    Some(match verb.first()?.as_str() {
        "profile" => "o_t.dat",
        "log" => "s.lat",
        "report" | "compare" | "merge" => "s.json",
        "serve" => "o_member.img",
        "rebuild" | "check" => "a.img",
        _ => return None,
    })
}

/// A deterministic shuffle (xorshift), so any prefix is a spread sample of the whole matrix.
fn shuffle(v: &mut [Case]) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

/// What a tree holds: every entry's type, size, content hash (regular files) or link target.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut m = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(md) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            let t = md.file_type();
            let v = if t.is_symlink() {
                format!("link {:?}", std::fs::read_link(&p).ok())
            } else if t.is_dir() {
                stack.push(p.clone());
                format!("dir {:o}", md.permissions().mode())
            } else if t.is_file() {
                format!("file {} {:x}", md.len(), hash_file(&p))
            } else {
                format!("node {:?} {:o}", t, md.permissions().mode())
            };
            m.insert(p, v);
        }
    }
    m
}

fn hash_file(p: &Path) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    if let Ok(mut f) = std::fs::File::open(p) {
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n) = f.read(&mut buf) {
            if n == 0 {
                break;
            }
            buf[..n].hash(&mut h);
        }
    }
    h.finish()
}

/// Keeps a FIFO usable both ways while a case runs: a reader drains what nines writes, and a
/// writer that opens and closes lets a read of it reach end of file.
fn fifo_keeper(path: PathBuf, stop: &AtomicBool) {
    let Ok(mut r) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
    else {
        return;
    };
    let mut buf = vec![0u8; 1 << 16];
    while !stop.load(Ordering::Relaxed) {
        while matches!(r.read(&mut buf), Ok(n) if n > 0) {}
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Exit statuses seen, for the summary line.
static CODES: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

const BOUND: Duration = Duration::from_secs(40);
/// How long a run may take to stop after the SIGINT it gets past [`BOUND`].
const INTERRUPT_BOUND: Duration = Duration::from_secs(5);

/// Runs one case in a fresh directory; None when it passed, else why it failed.
fn run_case(c: &Case, fx: &Path, work: &Path, n: usize, fx_lock: &Mutex<()>) -> Option<String> {
    let dir = work.join(format!("case{n}"));
    std::fs::create_dir(&dir).unwrap();
    for (name, bytes) in [
        ("o_t.dat", 1u64 << 20),
        ("a.img", 1 << 20),
        ("o_b.img", 1 << 20),
        ("c.img", 1 << 20),
        ("o_member.img", 1 << 20),
    ] {
        std::fs::File::create(dir.join(name))
            .unwrap()
            .set_len(bytes)
            .unwrap();
    }
    for name in ["s.json", "s.lat", "s.hlog"] {
        std::fs::copy(fx.join(name), dir.join(name)).unwrap();
    }
    let st = Command::new("cp")
        .arg("-r")
        .arg(fx.join("fl"))
        .arg(dir.join("o_flin"))
        .status()
        .unwrap();
    assert!(st.success());
    // Cases that name a fixture run one at a time (the fixture is shared); the others in
    // parallel.
    let shared = c.args.iter().any(|a| a.contains(&*fx.to_string_lossy()))
        || !c.devices.is_empty()
        || c.args.iter().any(|a| a.contains("/proc"));
    let _guard = shared.then(|| fx_lock.lock().unwrap_or_else(|e| e.into_inner()));
    let before = shared.then(|| snapshot(fx));
    let dev_before: Vec<u64> = c.devices.iter().map(|d| hash_file(Path::new(d))).collect();
    let local_before = snapshot(&dir);
    let stop = AtomicBool::new(false);
    let uses_fifo = c.args.iter().any(|a| a.ends_with("/fifo"));
    let result = std::thread::scope(|s| {
        if uses_fifo {
            s.spawn(|| fifo_keeper(fx.join("fifo"), &stop));
        }
        let mut child = Command::new(bin())
            .args(&c.args)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = child.stderr.take().unwrap();
        let reader = s.spawn(move || {
            let mut v = Vec::new();
            let _ = err.read_to_end(&mut v);
            v
        });
        let t0 = Instant::now();
        let mut signalled = false;
        let mut interrupted = false;
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break Some(st);
            }
            if c.serve
                && !signalled
                && (dir.join("o_nbd.sock").exists() || t0.elapsed() > Duration::from_secs(5))
            {
                // A serve that started: stopped as a supervisor would.
                // SAFETY: a signal to our own child, not yet reaped.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
                signalled = true;
            }
            if t0.elapsed() > BOUND && !interrupted {
                // Still going: a long run that was asked for (--rate-iops 1 --ios 50) is no
                // hang, so long as it stops when told. SIGINT, as a user would.
                // SAFETY: a signal to our own child, not yet reaped.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
                interrupted = true;
            }
            if t0.elapsed() > BOUND + INTERRUPT_BOUND {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        stop.store(true, Ordering::Relaxed);
        let err = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
        (status, err)
    });
    let (status, err) = result;
    *CODES
        .lock()
        .unwrap()
        .entry(format!("{:?}", status.map(|s| s.code())))
        .or_default() += 1;
    if std::env::var_os("NINES_HOSTILE_VERBOSE").is_some() {
        eprintln!(
            "{:?} {}: {}",
            status.map(|s| s.code()),
            c.what,
            err.trim_end()
        );
    }
    let mut why = Vec::new();
    let last = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    match status.map(|s| s.code()) {
        None => why.push(format!(
            "no end within {BOUND:?}, nor {INTERRUPT_BOUND:?} after a SIGINT"
        )),
        Some(None) => why.push("killed by a signal".to_string()),
        Some(Some(101)) => why.push("exit 101".to_string()),
        Some(Some(code)) if ![0, 1, 2, 130].contains(&code) => why.push(format!("exit {code}")),
        Some(Some(code)) if code != 0 && !last.starts_with("nines") => {
            why.push(format!("exit {code} without a one-line error: {last:?}"))
        }
        _ => {}
    }
    if err.contains("panicked") {
        why.push("panicked".into());
    }
    if err.contains("Error {") || err.contains("Os {") {
        why.push("a Rust debug structure on stderr".into());
    }
    if let Some(before) = before {
        let after = snapshot(fx);
        let named: Vec<PathBuf> = c.named.iter().map(PathBuf::from).collect();
        let allowed = |p: &Path| {
            named.iter().any(|n| {
                p.starts_with(n)
                    // A derived output beside a named one (merge -o M.json writes M.hlog).
                    || (p.parent() == n.parent() && p.file_stem() == n.file_stem())
                    || std::fs::read_link(n).is_ok_and(|t| p == fx.join(&t) || p == t)
                    || n.parent() == Some(p)
            })
        };
        // file.dat and its hard link are one file: named through either, both may change.
        let (file, hard) = (fx.join("file.dat"), fx.join("hard"));
        let allowed = |p: &Path| {
            allowed(p)
                || (p == hard.as_path() && allowed(&file))
                || (p == file.as_path() && allowed(&hard))
        };
        let keys: BTreeSet<&PathBuf> = before.keys().chain(after.keys()).collect();
        let kind = |v: Option<&String>| v.and_then(|v| v.split(' ').next().map(String::from));
        for k in keys {
            let (b, a) = (before.get(k), after.get(k));
            // Even a named destination keeps its kind: a file never becomes a directory.
            let replaced = b.is_some() && a.is_some() && kind(b) != kind(a);
            if b != a && (replaced || !allowed(k)) {
                why.push(format!(
                    "{} changed ({:?} -> {:?})",
                    k.display(),
                    before.get(k),
                    after.get(k)
                ));
            }
        }
    }
    if shared {
        reset_fixtures(fx);
    }
    for (d, h) in c.devices.iter().zip(dev_before) {
        if hash_file(Path::new(d)) != h {
            why.push(format!("{d} was written"));
        }
    }
    let local_after = snapshot(&dir);
    for (k, v) in &local_before {
        let name = k.file_name().unwrap().to_string_lossy();
        let protected = c.protected.as_deref() == Some(&*name);
        if (protected || !name.starts_with("o_")) && local_after.get(k) != Some(v) {
            why.push(format!("{name} (an input) changed"));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if why.is_empty() {
        None
    } else {
        Some(format!(
            "{}: {} [nines {}] stderr: {}",
            c.what,
            why.join("; "),
            c.args.join(" "),
            last
        ))
    }
}

/// Puts back what a case was allowed to change (a named destination), so that every case
/// starts from the same fixture tree: whatever the order, a case sees the destinations it is
/// told it gets.
fn reset_fixtures(fx: &Path) {
    let keep = [
        "s.json", "s.lat", "s.hlog", "fl", "file.dat", "link", "dangling", "dir", "rodir", "fifo",
        "null", "sock", "hard", "full",
    ];
    for e in std::fs::read_dir(fx).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !keep.contains(&name.as_str()) {
            let _ = std::fs::remove_dir_all(e.path()).or_else(|_| std::fs::remove_file(e.path()));
        }
    }
    let file = fx.join("file.dat");
    let want = vec![7u8; 65536];
    if std::fs::symlink_metadata(&file).map_or(true, |m| !m.is_file())
        || std::fs::read(&file).ok().as_deref() != Some(&want[..])
    {
        let _ = std::fs::remove_dir_all(&file).or_else(|_| std::fs::remove_file(&file));
        std::fs::write(&file, &want).unwrap();
    }
    for (link, to) in [
        ("link", fx.join("file.dat")),
        ("dangling", fx.join("nowhere")),
    ] {
        let l = fx.join(link);
        if std::fs::read_link(&l).ok().as_deref() != Some(&to) {
            let _ = std::fs::remove_dir_all(&l).or_else(|_| std::fs::remove_file(&l));
            std::os::unix::fs::symlink(&to, &l).unwrap();
        }
    }
    // The hard link names file.dat's inode, whatever a case did to either name.
    let hard = fx.join("hard");
    let same = |a: &Path, b: &Path| {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::symlink_metadata(a), std::fs::symlink_metadata(b)) {
            (Ok(x), Ok(y)) => x.ino() == y.ino() && x.dev() == y.dev(),
            _ => false,
        }
    };
    if !same(&hard, &file) {
        let _ = std::fs::remove_dir_all(&hard).or_else(|_| std::fs::remove_file(&hard));
        std::fs::hard_link(&file, &hard).unwrap();
    }
    let full = fx.join("full");
    if !std::fs::symlink_metadata(&full).is_ok_and(|m| m.file_type().is_char_device()) {
        let _ = std::fs::remove_dir_all(&full).or_else(|_| std::fs::remove_file(&full));
        mknod_char(&full, 1, 7);
    }
    for d in ["dir", "rodir"] {
        let d = fx.join(d);
        if !d.is_dir() {
            let _ = std::fs::remove_file(&d);
            std::fs::create_dir(&d).unwrap();
        }
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let _ = std::fs::remove_dir_all(e.path()).or_else(|_| std::fs::remove_file(e.path()));
        }
    }
    let _ = std::fs::set_permissions(fx.join("rodir"), std::fs::Permissions::from_mode(0o555));
}

fn fixtures(fx: &Path) {
    let b = bin();
    let ok = |args: &[&str]| {
        let o = Command::new(&b)
            .args(args)
            .current_dir(fx)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    ok(&[
        "sim",
        "--quiet",
        "--ios",
        "2000",
        "--json",
        "s.json",
        "--lat-log",
        "s.lat",
        "--hdr-log",
        "s.hlog",
    ]);
    ok(&[
        "fleet",
        "--tasks",
        "1",
        "--out",
        "fl",
        "--",
        "sim",
        "--ios",
        "100",
        "--precondition",
        "none",
    ]);
    std::fs::write(fx.join("file.dat"), vec![7u8; 65536]).unwrap();
    std::os::unix::fs::symlink(fx.join("file.dat"), fx.join("link")).unwrap();
    std::os::unix::fs::symlink(fx.join("nowhere"), fx.join("dangling")).unwrap();
    std::fs::create_dir(fx.join("dir")).unwrap();
    std::fs::create_dir(fx.join("rodir")).unwrap();
    std::fs::set_permissions(fx.join("rodir"), std::fs::Permissions::from_mode(0o555)).unwrap();
    assert!(
        Command::new("mkfifo")
            .arg(fx.join("fifo"))
            .status()
            .unwrap()
            .success()
    );
    // Fresh nodes of the null and full devices' numbers, never /dev/null itself.
    mknod_char(&fx.join("null"), 1, 3);
    mknod_char(&fx.join("full"), 1, 7);
    std::fs::hard_link(fx.join("file.dat"), fx.join("hard")).unwrap();
    assert!(
        std::fs::metadata(fx.join("null"))
            .unwrap()
            .file_type()
            .is_char_device()
    );
}

fn mknod_char(path: &Path, major: u32, minor: u32) {
    assert!(
        Command::new("mknod")
            .arg(path)
            .args(["c", &major.to_string(), &minor.to_string()])
            .status()
            .unwrap()
            .success()
    );
}

fn zrams() -> Zrams {
    let blank = common::Zram::new("4M");
    let ext4 = common::Zram::new("4M");
    let st = Command::new("mkfs.ext4")
        .args(["-q", "-F", &ext4.path()])
        .status()
        .unwrap();
    assert!(st.success(), "mkfs.ext4: run `bash scripts/setup.sh`");
    Zrams {
        blank: blank.path(),
        ext4: ext4.path(),
        _devs: vec![blank, ext4],
    }
}

fn matrix(limit: Option<usize>) {
    let root = common::disk_dir();
    let fx = root.path().join("fx");
    let work = root.path().join("work");
    std::fs::create_dir(&fx).unwrap();
    std::fs::create_dir(&work).unwrap();
    fixtures(&fx);
    let z = zrams();
    let _sock = std::os::unix::net::UnixListener::bind(fx.join("sock")).unwrap();
    let mut all = cases(&fx, &z);
    let total = all.len();
    shuffle(&mut all);
    if let Some(n) = limit {
        all.truncate(n);
    }
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let fx_lock = Mutex::new(());
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let workers = if std::env::var_os("NINES_HOSTILE_SERIAL").is_some() {
            1
        } else {
            2
        };
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(c) = all.get(i) else { break };
                    if let Some(f) = run_case(c, &fx, &work, i, &fx_lock) {
                        eprintln!("hostile matrix: FAIL {f}");
                        failures.lock().unwrap().push(f);
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    // The read-only directory goes back to writable, for the temporary directory's removal.
    let _ = std::fs::set_permissions(fx.join("rodir"), std::fs::Permissions::from_mode(0o755));
    println!(
        "hostile matrix: runs={} failures={} (of {total} cases, {:.0} s; exit statuses {:?})",
        all.len(),
        failures.len(),
        t0.elapsed().as_secs_f64(),
        CODES.lock().unwrap()
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}

/// The deterministic sample CI runs; `NINES_HOSTILE_ALL=1` or `NINES_HOSTILE_CASES=N` widen it.
#[test]
fn hostile_matrix_sample() {
    let limit = if std::env::var_os("NINES_HOSTILE_ALL").is_some_and(|v| v == "1") {
        None
    } else {
        Some(
            std::env::var("NINES_HOSTILE_CASES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(500),
        )
    };
    matrix(limit);
}
