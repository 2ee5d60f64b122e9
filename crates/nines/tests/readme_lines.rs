//! Issue 44: every command line README.md gives a user (its build-and-run line and each line of
//! "Using it") runs to completion within 2 GiB of memory and 2 minutes, adapted to what a test
//! may touch: the NVMe devices become zram devices this test creates, `m0.img`... files it
//! creates, the socket and port its own, `--runtime 60s` 3 s, `--cpus` the CPUs this host has,
//! Slurm the local engine (`fleet_cli` runs the Slurm engine on its own test cluster).
//!
//! Memory is the peak resident set of the line's process and every child it waited for
//! (`wait4`'s `ru_maxrss`); `serve` lines are stopped with SIGTERM once they listen (their
//! normal end) and must exit 0. A README line this test does not know fails it: a new example
//! gets its adaptation here, so none goes unrun. The one line that needs hardware no test host
//! has, a zoned namespace, is run by `nvme_guest`'s zoned test (checked below by name).
//!
//! Prints one line per README line: seconds and peak MiB (the figures of issue 44's goal row).

mod common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_nines");
const MEMORY_BYTES_MAX: u64 = 2 << 30;
const TIME_MAX: Duration = Duration::from_secs(120);

/// The command lines README.md gives: the build-and-run line, then "Using it"'s lines with
/// continuations joined and comments cut.
fn readme_lines() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let text = std::fs::read_to_string(&path).expect("README.md");
    let mut out = Vec::new();
    assert!(
        text.contains("\n    cargo run --release -p nines -- profile\n"),
        "README's build-and-run line changed: update this test"
    );
    out.push("nines profile".to_string());
    let using = text
        .split("\n## Using it\n")
        .nth(1)
        .expect("README has a \"## Using it\" section");
    let using = using.split("\n## ").next().unwrap();
    let mut joined = String::new();
    for l in using.lines() {
        let Some(code) = l.strip_prefix("    ") else {
            continue;
        };
        let code = match code.find("  #") {
            Some(i) => &code[..i],
            None => code,
        }
        .trim();
        if code.is_empty() || code.starts_with('#') {
            continue;
        }
        if let Some(head) = code.strip_suffix('\\') {
            joined.push_str(head);
            continue;
        }
        joined.push_str(code);
        let line = std::mem::take(&mut joined);
        if line.starts_with("nines ") || line.contains("[ nines ") {
            out.push(line);
        }
    }
    assert!(out.len() > 15, "too few README lines found: {out:?}");
    out
}

/// How a line is run.
enum Run {
    /// To its end.
    Foreground(Vec<String>),
    /// Until it listens on this socket or port, then SIGTERM; it must exit 0.
    Serve(Vec<String>, Ready),
    /// Not here: why, and the test that runs it.
    Elsewhere(&'static str, &'static str),
}

enum Ready {
    Socket(PathBuf),
    Port(u16),
}

struct Env {
    dir: PathBuf,
    /// A directory holding a stopped `--persist` serial volume's m0.img and m1.img.
    serial: PathBuf,
    zram: [String; 2],
    port: u16,
}

fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(String::from).collect()
}

/// The line with the test's devices, files and limits put in, and how to run it.
fn adapt(line: &str, e: &Env) -> Result<Run, String> {
    let sock = e.dir.join("nbd.sock");
    let mut w: Vec<String> = words(line)
        .into_iter()
        .map(|x| match x.as_str() {
            "/dev/nvme0n1" => e.zram[0].clone(),
            "/dev/nvme1n1" => e.zram[1].clone(),
            "/tmp/nbd.sock" => sock.display().to_string(),
            "0.0.0.0:10809" => format!("127.0.0.1:{}", e.port),
            "60s" => "3s".into(),
            "2-3" => "0-1".into(),
            "slurm" => "local".into(),
            "nines" => BIN.into(),
            _ => x,
        })
        .collect();
    let verb = w.get(1).cloned().unwrap_or_default();
    Ok(match verb.as_str() {
        _ if w[0] == "nbdinfo" => Run::Foreground(w),
        "profile" if line.contains("--zonemode zbd") => Run::Elsewhere(
            "a zoned namespace",
            "guest_zoned_zbd_writes_at_the_write_pointers_with_every_engine",
        ),
        "tune" => {
            // The plan is for the host's devices: here the zram devices, on CPU 1 (CPU 0 keeps
            // the housekeeping).
            let at = w.iter().position(|x| x == "2-19").ok_or("tune's --cpus")?;
            w[at] = "1".into();
            w.push(e.zram[0].clone());
            Run::Foreground(w)
        }
        "check" if line.contains("--layout serial") => {
            // Run in the directory of the serial volume (set by the caller).
            Run::Foreground(w)
        }
        "serve" if line.contains("--listen") => Run::Serve(w, Ready::Port(e.port)),
        "serve" => Run::Serve(w, Ready::Socket(sock.clone())),
        "profile" | "log" | "sim" | "doctor" | "report" | "compare" | "merge" | "fleet"
        | "rebuild" | "check" => Run::Foreground(w),
        _ => return Err(format!("a README line this test does not know: {line:?}")),
    })
}

/// Runs `args` in `dir` to its end (or, for a serve, to its SIGTERM): exit status, seconds,
/// peak resident MiB, stderr.
fn measure(args: &[String], dir: &Path, ready: Option<&Ready>) -> (i32, f64, f64, String) {
    let err_path = dir.join(".readme-line.err");
    let mut cmd = Command::new(&args[0]);
    cmd.args(&args[1..])
        .current_dir(dir)
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin:/usr/sbin:/sbin", bin_dir()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap());
    // SAFETY: setrlimit only, in the child before exec: a line that tries to take more than
    // the bound fails there instead of taking the host's memory.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 4 * MEMORY_BYTES_MAX,
                rlim_max: 4 * MEMORY_BYTES_MAX,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let t0 = Instant::now();
    let mut termed = false;
    let (status, ru) = loop {
        let mut st = 0;
        // SAFETY: plain data for wait4 to fill.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: our own child; WNOHANG.
        let r = unsafe { libc::wait4(pid, &mut st, libc::WNOHANG, &mut ru) };
        if r == pid {
            break (st, ru);
        }
        assert!(r == 0, "wait4: {}", std::io::Error::last_os_error());
        if let Some(ready) = ready
            && !termed
            && match ready {
                Ready::Socket(p) => p.exists(),
                Ready::Port(port) => std::net::TcpStream::connect(("127.0.0.1", *port)).is_ok(),
            }
        {
            std::thread::sleep(Duration::from_millis(500));
            // SAFETY: a signal to our own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            termed = true;
        }
        if t0.elapsed() > TIME_MAX {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let mut st = 0;
            // SAFETY: reaps it.
            unsafe { libc::waitpid(pid, &mut st, 0) };
            panic!(
                "{args:?} ran past {TIME_MAX:?}: {}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::mem::forget(child);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    let _ = std::fs::remove_file(&err_path);
    (
        code,
        t0.elapsed().as_secs_f64(),
        ru.ru_maxrss as f64 / 1024.0,
        err,
    )
}

fn bin_dir() -> String {
    Path::new(BIN).parent().unwrap().display().to_string()
}

fn ok(args: &[&str], dir: &Path) {
    let o = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The inputs README's lines read, made by nines and fio here.
fn prepare(e: &Env) {
    let d = &e.dir;
    for name in [
        "m0.img", "m1.img", "m2.img", "new1.img", "a.img", "b.img", "disk.img",
    ] {
        std::fs::File::create(d.join(name))
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
    }
    // Two profiles of one device for --calibrate, at the depths the names say: an emulated SSD
    // (zram answers faster than the host model's own cost per I/O, which calibration refuses).
    for (qd, name) in [("1", "qd1.json"), ("16", "qd16.json")] {
        ok(
            &[
                "profile",
                "--quiet",
                "--rw",
                "randread",
                "--iodepth",
                qd,
                "--runtime",
                "2s",
                "--json",
                name,
                "emu:client-nvme:256m",
            ],
            d,
        );
    }
    for (seed, name) in [
        ("1", "before.json"),
        ("2", "after.json"),
        ("3", "host1.json"),
        ("4", "host2.json"),
    ] {
        ok(
            &[
                "sim",
                "--quiet",
                "--runtime",
                "1s",
                "--seed",
                seed,
                "--json",
                name,
            ],
            d,
        );
    }
    let fio = Command::new("fio")
        .args([
            "--name=host3",
            "--filename=fio.dat",
            "--size=8m",
            "--rw=randread",
            "--bs=4k",
            "--ioengine=psync",
            "--runtime=1",
            "--time_based",
            "--output-format=json+",
            "--output=fio+.json",
        ])
        .current_dir(d)
        .output()
        .expect("fio: run `bash scripts/setup.sh`");
    assert!(
        fio.status.success(),
        "fio: {}",
        String::from_utf8_lossy(&fio.stderr)
    );
    // A psktool-format key file (user:hex key).
    std::fs::write(d.join("keys.psk"), format!("alice:{}\n", "5a".repeat(32))).unwrap();
    // A stopped --persist serial volume, as the serial check line reads it.
    for name in ["m0.img", "m1.img"] {
        std::fs::File::create(e.serial.join(name))
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
    }
    let sock = e.serial.join("s.sock");
    let args: Vec<String> = [
        BIN,
        "serve",
        "--layout",
        "serial",
        "--persist",
        "--segment",
        "1m",
        "--socket",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([sock.display().to_string(), "m0.img".into(), "m1.img".into()])
    .collect();
    let (code, _, _, err) = measure(&args, &e.serial, Some(&Ready::Socket(sock)));
    assert_eq!(code, 0, "serving the serial volume: {err}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn every_readme_line_runs_within_two_gib_and_two_minutes() {
    let root = common::disk_dir();
    let dir = root.path().join("main");
    let serial = root.path().join("serial");
    std::fs::create_dir(&dir).unwrap();
    std::fs::create_dir(&serial).unwrap();
    let z = [common::Zram::new("256M"), common::Zram::new("256M")];
    let e = Env {
        dir: dir.clone(),
        serial: serial.clone(),
        zram: [z[0].path(), z[1].path()],
        port: free_port(),
    };
    prepare(&e);
    let guest = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nvme_guest/zoned.rs"),
    )
    .unwrap_or_default();
    let mut failures = Vec::new();
    let mut ran = 0;
    for line in readme_lines() {
        let run = match adapt(&line, &e) {
            Ok(r) => r,
            Err(why) => {
                failures.push(why);
                continue;
            }
        };
        let in_dir = if line.contains("--layout serial") {
            &serial
        } else {
            &dir
        };
        let (args, ready) = match run {
            Run::Foreground(a) => (a, None),
            Run::Serve(a, r) => (a, Some(r)),
            Run::Elsewhere(what, test) => {
                assert!(
                    guest.contains(&format!("fn {test}")),
                    "{line:?} needs {what}: the test said to run it ({test}) is gone"
                );
                println!("readme line: {line}: needs {what}, run by nvme_guest::{test}");
                continue;
            }
        };
        let (code, secs, mib, err) = measure(&args, in_dir, ready.as_ref());
        println!("readme line: {line}: exit {code}, {secs:.1} s, peak {mib:.0} MiB");
        ran += 1;
        let last = err.lines().last().unwrap_or("");
        if code != 0 {
            failures.push(format!("{line:?}: exit {code}: {last}"));
        }
        if mib * 1024.0 * 1024.0 > MEMORY_BYTES_MAX as f64 {
            failures.push(format!("{line:?}: peak {mib:.0} MiB, over 2 GiB"));
        }
    }
    println!("readme lines: {ran} run");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
