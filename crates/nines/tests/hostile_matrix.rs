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
        // Absolute: cases run in their own directories.
        Some(p) if !p.is_empty() => std::path::absolute(PathBuf::from(p)).unwrap(),
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
        .filter(|s| ["path", "number", "other", "choice"].contains(&s.kind.as_str()))
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
        // Streams by name: standard output is /dev/null here, which must stay what it is.
        ("standard output (-)", "-".into(), true),
        ("/dev/stdout", "/dev/stdout".into(), true),
        // A new name through a symbolic link to a directory.
        ("through a directory link", f("dirlink/new.out"), true),
        // A name under a regular file (ENOTDIR).
        ("under a regular file", f("file.dat/new.out"), true),
        // A new name on a full filesystem (ENOSPC on the first block) and on a read-only one.
        ("full filesystem", f("fullfs/new.out"), true),
        ("read-only filesystem", f("rofs/new.out"), true),
    ]
}

const NUMBERS: [&str; 32] = [
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
    "18446744073709551615",
    "-9223372036854775808",
    " 1",
    "+1",
    "1k",
    "1t",
    "1e3",
    "0.0",
    "1e-308",
    "-inf",
    "4096",
    "65536",
    "-1k",
    "1e19",
    "1_000",
    "0.5",
    "1E3",
    "1 ",
];

/// Values for arguments that are strings or choices parsed later (lists, CPU sets, job names,
/// policies): empty, blank, very long, not UTF-8-clean, separators only, a traversal, a format
/// string.
fn strings() -> Vec<(String, String)> {
    vec![
        ("empty string".into(), String::new()),
        ("a blank".into(), " ".into()),
        ("100,000 characters".into(), "x".repeat(100_000)),
        ("a replacement character".into(), "\u{fffd}\u{202e}".into()),
        ("separators only".into(), ",,:,".into()),
        ("a list with an empty item".into(), "1,,2".into()),
        ("a double dash".into(), "--".into()),
        ("a traversal".into(), "../../../../etc/passwd".into()),
        ("a format string".into(), "%s%n%x{}".into()),
    ]
}

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
    /// A file of the case's directory a loop device is set up over for the run; the device's
    /// path replaces [`LOOP`] in `args`.
    loop_over: Option<String>,
    /// A signal sent this long after the start (if the run is still going then).
    signal: Option<(libc::c_int, Duration)>,
    serve: bool,
}

/// Stands for the loop device of [`Case::loop_over`] in a case's arguments.
const LOOP: &str = "{LOOP}";

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
            // The run's own input: what its base command reads, in the case's directory, by
            // its name and through a loop device over it (the same bytes by another path).
            if let Some(input) = own_input(&s.verb) {
                v.push(("the run's own input".into(), input.into(), false));
                v.push((
                    "a loop device over the run's own input".into(),
                    LOOP.into(),
                    false,
                ));
            }
            v
        } else {
            let numbers = NUMBERS
                .iter()
                .map(|n| (n.to_string(), n.to_string(), false));
            let strings = strings().into_iter().map(|(n, v)| (n, v, false));
            match s.kind.as_str() {
                "number" => numbers.collect(),
                "other" => numbers.chain(strings).collect(),
                _ => strings.collect(),
            }
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
                protected: match name.as_str() {
                    "the run's own input" => Some(value.clone()),
                    "a loop device over the run's own input" => {
                        own_input(&s.verb).map(String::from)
                    }
                    _ => None,
                },
                loop_over: (value == LOOP)
                    .then(|| own_input(&s.verb).map(String::from))
                    .flatten(),
                signal: None,
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

/// A base command of a verb that runs for seconds, so that a signal finds it at work: a timed
/// profile, a long simulation, a sweep, a fleet, a paced rebuild and check.
fn long_base(verb: &[String]) -> Option<Vec<String>> {
    let v: Vec<&str> = verb.iter().map(String::as_str).collect();
    Some(sv(match v.as_slice() {
        ["profile"] => &[
            "profile",
            "--quiet",
            "--runtime",
            "30s",
            "--size",
            "1m",
            "--json",
            "o_p.json",
            "--lat-log",
            "o_p.lat",
            "o_t.dat",
        ],
        ["sim"] => &[
            "sim",
            "--quiet",
            "--runtime",
            "3000s",
            "--precondition",
            "none",
            "--json",
            "o_s.json",
            "--lat-log",
            "o_s.lat",
        ],
        ["sweep"] => &[
            "sweep",
            "--sim",
            "afa-m2-2018",
            "--qd",
            "1,4,16",
            "--output",
            "o_sw",
            "--",
            "--runtime",
            "60s",
            "--precondition",
            "none",
        ],
        ["fleet"] => &[
            "fleet",
            "--tasks",
            "2",
            "--out",
            "o_fl",
            "--",
            "sim",
            "--runtime",
            "3000s",
            "--precondition",
            "none",
        ],
        ["rebuild"] => &[
            "rebuild",
            "--member",
            "1",
            "--rate",
            "256k",
            "--json",
            "o_rb.json",
            "a.img",
            "o_b.img",
            "c.img",
        ],
        ["check"] => &[
            "check",
            "--quiet",
            "--rate",
            "256k",
            "--json",
            "o_ck.json",
            "a.img",
            "o_b.img",
            "c.img",
        ],
        _ => return None,
    }))
}

/// The signals a run may get, and when (ms after its start): from before `main` to well into
/// the work, start-up, the first writes and the end of short verbs among them.
const SIGNALS: [libc::c_int; 5] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGKILL,
    libc::SIGHUP,
    libc::SIGQUIT,
];
const MOMENTS_MS: [u64; 19] = [
    0, 1, 2, 3, 6, 10, 16, 25, 40, 60, 90, 130, 200, 300, 450, 700, 1000, 1500, 2500,
];

/// Per verb, its base command and its long one (where it has one), each signalled with every
/// signal at every moment.
fn signal_cases() -> Vec<Case> {
    let verbs: BTreeSet<Vec<String>> = spec().into_iter().map(|s| s.verb).collect();
    let mut out = Vec::new();
    for verb in verbs {
        let Some((args, pos)) = base(&verb) else {
            continue;
        };
        let short: Vec<String> = args
            .iter()
            .map(|x| {
                if x == "{P}" {
                    pos.clone().unwrap()
                } else {
                    x.clone()
                }
            })
            .collect();
        let mut variants = vec![("base", short)];
        if let Some(l) = long_base(&verb) {
            variants.push(("long", l));
        }
        for (variant, a) in variants {
            for sig in SIGNALS {
                for ms in MOMENTS_MS {
                    out.push(Case {
                        what: format!("{} ({variant}) signal {sig} at {ms} ms", verb.join(" ")),
                        args: a.clone(),
                        named: Vec::new(),
                        devices: Vec::new(),
                        protected: None,
                        loop_over: None,
                        signal: Some((sig, Duration::from_millis(ms))),
                        serve: verb == ["serve"],
                    });
                }
            }
        }
    }
    out
}

/// How long a run may take to act on a signal: 2 s, longer in proportion on a host loaded past
/// its CPUs (a signal is acted on when the process next runs).
fn signal_bound() -> Duration {
    let load: f64 = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    Duration::from_secs_f64(2.0 * (load / cpus).max(1.0))
}

/// Processes whose working directory is `dir` or under it (what a run started there, and its
/// children, which inherit it), with their names.
fn processes_in(dir: &Path) -> Vec<(u32, String)> {
    let mut v = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return v;
    };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cwd) = std::fs::read_link(e.path().join("cwd")) else {
            continue;
        };
        if cwd.starts_with(dir) {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // A zombie waits only for its parent to reap it: it runs nothing.
            let rest = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
            if rest.split_whitespace().next() == Some("Z") {
                continue;
            }
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            v.push((pid, comm.trim().to_string()));
        }
    }
    v
}

/// Every entry under `dir` (depth first), for the partial-file and whole-JSON checks.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
                stack.push(p.clone());
            }
            v.push(p);
        }
    }
    v
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

/// Every base command ends within a second or two; a case still running at this bound was asked
/// to be long (a tiny --rate, a huge --runtime) and is then interrupted as a user would.
const BOUND: Duration = Duration::from_secs(15);
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
    // A loop device over one of the case's files, standing for LOOP in its arguments.
    let lo = c.loop_over.as_ref().map(|name| {
        let o = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(dir.join(name))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "losetup: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap().trim().to_string()
    });
    let args: Vec<String> = c
        .args
        .iter()
        .map(|a| match &lo {
            Some(dev) => a.replace(LOOP, dev),
            None => a.clone(),
        })
        .collect();
    let mut signalled_at: Option<Instant> = None;
    let result = std::thread::scope(|s| {
        if uses_fifo {
            s.spawn(|| fifo_keeper(fx.join("fifo"), &stop));
        }
        let mut child = Command::new(bin())
            .args(&args)
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
        let bound = signal_bound();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break Some(st);
            }
            if let Some((sig, at)) = c.signal
                && signalled_at.is_none()
                && t0.elapsed() >= at
            {
                // SAFETY: a signal to our own child, not yet reaped.
                unsafe { libc::kill(child.id() as libc::pid_t, sig) };
                signalled_at = Some(Instant::now());
            }
            if signalled_at.is_some_and(|t| t.elapsed() > bound) {
                // Not acted on: a failure (below), and the run is ended.
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            if c.serve
                && c.signal.is_none()
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
            std::thread::sleep(match c.signal {
                Some((_, at)) if signalled_at.is_none() => at
                    .saturating_sub(t0.elapsed())
                    .min(Duration::from_millis(10)),
                _ => Duration::from_millis(10),
            });
        };
        stop.store(true, Ordering::Relaxed);
        let err = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
        (status, err)
    });
    let (status, err) = result;
    if let Some(dev) = &lo {
        let _ = Command::new("losetup").args(["-d", dev]).status();
    }
    // What the signal was, if one reached the run before its end.
    let sent = c
        .signal
        .filter(|_| signalled_at.is_some())
        .map(|(sig, _)| sig);
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
    use std::os::unix::process::ExitStatusExt;
    let local_new: Vec<String> = snapshot(&dir)
        .keys()
        .filter(|k| !local_before.contains_key(*k))
        .map(|k| k.display().to_string())
        .collect();
    // Whether the run died of the signal it was sent, and may have: SIGKILL always; SIGHUP and
    // SIGQUIT (no handler: their default is to die); SIGINT and SIGTERM only before the run
    // wrote anything (before its handlers were installed).
    let died_of = status.and_then(|s| s.signal());
    let may_die = match (sent, died_of) {
        (Some(s), Some(d)) if s == d => {
            [libc::SIGKILL, libc::SIGHUP, libc::SIGQUIT].contains(&s) || local_new.is_empty()
        }
        _ => false,
    };
    match status.map(|s| s.code()) {
        None if sent.is_some() => why.push(format!(
            "not ended within {:?} of signal {}",
            signal_bound(),
            sent.unwrap()
        )),
        None => why.push(format!(
            "no end within {BOUND:?}, nor {INTERRUPT_BOUND:?} after a SIGINT"
        )),
        Some(None) if may_die => {}
        Some(None) => why.push(format!(
            "killed by signal {:?} (sent {sent:?}) after writing {local_new:?}",
            died_of
        )),
        // serve's normal end is a signal: it exits 0 (README).
        Some(Some(130)) if c.serve => why.push("serve exited 130, not 0, on a signal".into()),
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
    // Children die with the run (README: even when it dies of SIGKILL, SIGHUP or SIGQUIT).
    let t_end = Instant::now();
    let mut left = processes_in(&dir);
    while !left.is_empty() && t_end.elapsed() < signal_bound() {
        std::thread::sleep(Duration::from_millis(20));
        left = processes_in(&dir);
    }
    if !left.is_empty() {
        why.push(format!("left processes running: {left:?}"));
        for (pid, _) in &left {
            // SAFETY: a process the run left behind, found by its working directory.
            unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
        }
    }
    // Outputs are whole or absent; temporary names go with the run unless it could not act
    // (SIGKILL and the default dispositions leave them for the next run to remove).
    let may_leave_partials = sent.is_some() && died_of.is_some();
    for p in entries(&dir) {
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if name.contains(".nines-partial-") && !may_leave_partials {
            why.push(format!("left a temporary file {name}"));
        }
        if name.starts_with("o_")
            && name.ends_with(".json")
            && std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file())
            && std::fs::read(&p)
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .is_none()
        {
            why.push(format!("{name} is not whole JSON"));
        }
    }
    // The host's nodes stay what they are.
    for (node, rdev) in [("/dev/null", (1, 3)), ("/dev/full", (1, 7))] {
        use std::os::unix::fs::MetadataExt;
        let ok = std::fs::symlink_metadata(node).is_ok_and(|m| {
            m.file_type().is_char_device() && (libc::major(m.rdev()), libc::minor(m.rdev())) == rdev
        });
        if !ok {
            why.push(format!("{node} is no longer the host's node"));
        }
    }
    if std::fs::read_link("/dev/stdout").is_err() {
        why.push("/dev/stdout is no longer a link".into());
    }
    if err.contains("Error {") || err.contains("Os {") {
        why.push("a Rust debug structure on stderr".into());
    }
    if let Some(before) = before {
        let after = snapshot(fx);
        let mut named: Vec<PathBuf> = c.named.iter().map(PathBuf::from).collect();
        // A new name through a link to a directory is that directory's (and so are the
        // outputs derived from it).
        for n in named.clone() {
            if let (Some(d), Some(name)) = (n.parent(), n.file_name())
                && let Ok(t) = std::fs::read_link(d)
            {
                named.push(d.parent().unwrap_or(d).join(t).join(name));
            }
        }
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
        // An output is an `o_*` entry of the case's directory, or anything under one.
        let output = k
            .strip_prefix(&dir)
            .ok()
            .and_then(|r| r.components().next())
            .is_some_and(|c| c.as_os_str().to_string_lossy().starts_with("o_"));
        if (protected || !output) && local_after.get(k) != Some(v) {
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
        "null", "sock", "hard", "full", "dirlink", "fullfs", "rofs",
    ];
    // What a case made on the full filesystem (nothing, if it is still full).
    if let Ok(rd) = std::fs::read_dir(fx.join("fullfs")) {
        for e in rd.flatten() {
            if e.file_name() != "filler" {
                let _ =
                    std::fs::remove_dir_all(e.path()).or_else(|_| std::fs::remove_file(e.path()));
            }
        }
    }
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
        ("dirlink", fx.join("dir")),
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
    std::os::unix::fs::symlink(fx.join("dir"), fx.join("dirlink")).unwrap();
    assert!(
        std::fs::metadata(fx.join("null"))
            .unwrap()
            .file_type()
            .is_char_device()
    );
}

/// The two small filesystems the matrix writes into: `fullfs` (tmpfs with no free block: its
/// `filler` took them) and `rofs` (tmpfs mounted read-only). Unmounted on drop.
struct Mounts(Vec<PathBuf>);

impl Mounts {
    fn new(fx: &Path) -> Mounts {
        let mut m = Mounts(Vec::new());
        for (name, opts) in [("fullfs", "size=64k,mode=0755"), ("rofs", "size=64k,ro")] {
            let at = fx.join(name);
            std::fs::create_dir(&at).unwrap();
            let st = Command::new("mount")
                .args(["-t", "tmpfs", "-o", opts, "nines-hostile"])
                .arg(&at)
                .status()
                .unwrap();
            assert!(
                st.success(),
                "mount -t tmpfs on {}: run as root",
                at.display()
            );
            m.0.push(at);
        }
        // Fill fullfs to its last block.
        let mut f = std::fs::File::create(fx.join("fullfs/filler")).unwrap();
        let block = vec![1u8; 4096];
        while std::io::Write::write_all(&mut f, &block).is_ok() {}
        let _ = f.sync_all();
        m
    }
}

impl Drop for Mounts {
    fn drop(&mut self) {
        for at in &self.0 {
            let _ = Command::new("umount").arg("-l").arg(at).status();
        }
    }
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
    let _mounts = Mounts::new(&fx);
    let _sock = std::os::unix::net::UnixListener::bind(fx.join("sock")).unwrap();
    let mut all = cases(&fx, &z);
    all.extend(signal_cases());
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
        // Four at a time: most cases wait (on a pace, a signal's moment, a bound), not compute.
        let workers = if std::env::var_os("NINES_HOSTILE_SERIAL").is_some() {
            1
        } else {
            4
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
