//! `nines fleet` for real: the local engine, and a single-node Slurm cluster started by the test
//! from Debian's slurm-wlm and munge (installed by scripts/setup.sh): munged, slurmctld -D and
//! slurmd -D in the foreground with a minimal slurm.conf written here, every daemon stopped by a
//! guard even when the test fails. A fleet of 4 simulated tasks and one of 2 real-device tasks on
//! zram run through sbatch job arrays and a merge job, and the merged reports are checked.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Zram, assert_success, disk_dir, run, s};
use nines_core::report::Report;

fn report(path: &Path) -> Report {
    Report::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn local_fleet_runs_a_parameter_study_and_merges_it() {
    let dir = disk_dir();
    let out = dir.path().join("study");
    let o = run(&[
        "fleet",
        "--engine",
        "local",
        "--param",
        "n=1,3",
        "--param",
        "seed=1,2",
        "--parallel",
        "2",
        "--out",
        s(&out),
        "--",
        "sim",
        "--devices",
        "{n}",
        "--seed",
        "{seed}",
        "--runtime",
        "100ms",
    ]);
    assert_success(&o);
    assert!(stdout(&o).contains("4 tasks done"), "{}", stdout(&o));
    let m = report(&out.join("merged.json"));
    assert_eq!(m.sources.len(), 4);
    assert_eq!(m.devices.len(), 1 + 1 + 3 + 3, "devices of every task");
    let tasks: u64 = (0..4)
        .map(|i| {
            report(&out.join(format!("task-{i}.json")))
                .aggregate
                .read
                .ios
        })
        .sum();
    assert_eq!(m.aggregate.read.ios, tasks);
    // Task 2 is n=3, seed=1 (last parameter fastest).
    let t2 = report(&out.join("task-2.json"));
    assert_eq!(t2.devices.len(), 3);
    assert_eq!(t2.config.workload.seed, 1);
    let st = run(&["fleet", "status", s(&out)]);
    assert_success(&st);
    assert!(
        stdout(&st).contains("4 of 4 tasks have reports") && stdout(&st).contains("merged.json")
    );
    // The same directory again is refused; a failing task fails the fleet with its message.
    let again = run(&["fleet", "--tasks", "1", "--out", s(&out), "--", "sim"]);
    assert!(!again.status.success());
    let bad = dir.path().join("bad");
    let o = run(&[
        "fleet",
        "--tasks",
        "2",
        "--out",
        s(&bad),
        "--",
        "sim",
        "--devices",
        "0",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("2 of 2 tasks failed") && err.contains("task-0.log"),
        "{err}"
    );
    assert!(!bad.join("merged.json").exists());
    for (args, msg) in [
        (
            vec!["fleet", "--tasks", "1", "--", "doctor"],
            "verb that writes --json",
        ),
        (
            vec!["fleet", "--tasks", "1", "--", "sim", "--json", "x"],
            "leave --json out",
        ),
        (
            vec!["fleet", "--param", "n=1", "--", "sim", "--devices", "{m}"],
            "{m} is not a parameter",
        ),
    ] {
        let o = run(&args);
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(msg), "{args:?}: {err}");
    }
}

/// A single-node Slurm cluster in a temporary directory; dropped = every daemon stopped.
struct Slurm {
    dir: tempfile::TempDir,
    daemons: Vec<Child>,
}

impl Slurm {
    fn start() -> Slurm {
        for tool in [
            "munged",
            "mungekey",
            "slurmctld",
            "slurmd",
            "sbatch",
            "squeue",
            "sinfo",
        ] {
            assert!(
                which(tool),
                "{tool} is missing: run `bash scripts/setup.sh` (it installs slurm-wlm and munge)"
            );
        }
        let dir = tempfile::Builder::new()
            .prefix("nines-slurm")
            .tempdir()
            .unwrap();
        let d = dir.path().to_path_buf();
        // munged wants its socket's directory reachable by everyone.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut slurm = Slurm {
            dir,
            daemons: Vec::new(),
        };
        let key = d.join("munge.key");
        assert!(
            Command::new("mungekey")
                .arg("-c")
                .arg("-k")
                .arg(&key)
                .status()
                .unwrap()
                .success()
        );
        slurm.spawn(
            Command::new("munged")
                .args(["-F", "--force", "--key-file"])
                .arg(&key)
                .arg("--socket")
                .arg(d.join("munge.sock"))
                .arg("--pid-file")
                .arg(d.join("munged.pid"))
                .arg("--log-file")
                .arg(d.join("munged.log"))
                .arg("--seed-file")
                .arg(d.join("munge.seed")),
            "munged.out",
        );
        wait_for(|| d.join("munge.sock").exists(), "munged's socket");
        let host = String::from_utf8(Command::new("hostname").arg("-s").output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_string();
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        // Ports of our own, away from a real cluster's 6817/6818.
        let port = 27000 + (std::process::id() % 2000) * 2;
        for sub in ["state", "spool"] {
            std::fs::create_dir(d.join(sub)).unwrap();
        }
        let p = |f: &str| d.join(f).display().to_string();
        let conf = format!(
            "ClusterName=ninestest\nSlurmctldHost={host}(127.0.0.1)\nSlurmUser=root\nSlurmdUser=root\n\
             AuthType=auth/munge\nAuthInfo=socket={sock}\nCredType=cred/munge\n\
             StateSaveLocation={state}\nSlurmdSpoolDir={spool}\nSlurmctldPidFile={cpid}\nSlurmdPidFile={dpid}\n\
             SlurmctldPort={port}\nSlurmdPort={dport}\nProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nReturnToService=2\nMpiDefault=none\n\
             SwitchType=switch/none\nSlurmctldLogFile={clog}\nSlurmdLogFile={dlog}\n\
             NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN\n\
             PartitionName=nines Nodes={host} Default=YES MaxTime=INFINITE State=UP\n",
            sock = p("munge.sock"),
            state = p("state"),
            spool = p("spool"),
            cpid = p("ctld.pid"),
            dpid = p("d.pid"),
            dport = port + 1,
            clog = p("ctld.log"),
            dlog = p("d.log"),
        );
        std::fs::write(d.join("slurm.conf"), conf).unwrap();
        let conf = d.join("slurm.conf");
        slurm.spawn(
            Command::new("slurmctld").arg("-D").arg("-f").arg(&conf),
            "ctld.out",
        );
        slurm.spawn(
            Command::new("slurmd").arg("-D").arg("-f").arg(&conf),
            "d.out",
        );
        wait_for(
            || {
                Command::new("sinfo")
                    .args(["-h", "-o", "%T"])
                    .env("SLURM_CONF", &conf)
                    .output()
                    .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
            },
            "the Slurm node to be idle",
        );
        slurm
    }

    fn spawn(&mut self, cmd: &mut Command, log: &str) {
        let f = std::fs::File::create(self.dir.path().join(log)).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap();
        self.daemons.push(child);
    }

    fn conf(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }

    fn nines(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_nines"))
            .args(args)
            .env("SLURM_CONF", self.conf())
            .output()
            .unwrap()
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        // Daemons in reverse order of start: slurmd, slurmctld, munged.
        for c in self.daemons.iter_mut().rev() {
            // SAFETY: kill with a pid we own.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(10) {
                if c.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn which(tool: &str) -> bool {
    ["/usr/bin", "/usr/sbin", "/bin", "/sbin"]
        .iter()
        .any(|d| Path::new(d).join(tool).exists())
}

fn wait_for(mut ok: impl FnMut() -> bool, what: &str) {
    let t = Instant::now();
    while !ok() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn slurm_fleet_of_simulations_and_zram_profiles() {
    let slurm = Slurm::start();
    let work = disk_dir();
    // 4 simulated tasks: a device-count study.
    let sims = work.path().join("sims");
    let o = slurm.nines(&[
        "fleet",
        "--engine",
        "slurm",
        "--param",
        "n=1,2,3,4",
        "--out",
        s(&sims),
        "--",
        "sim",
        "--devices",
        "{n}",
        "--runtime",
        "100ms",
    ]);
    assert!(
        o.status.success(),
        "{}{}",
        stdout(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    let m = report(&sims.join("merged.json"));
    assert_eq!(m.sources.len(), 4);
    assert_eq!(m.devices.len(), 10);
    let f: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sims.join("fleet.json")).unwrap()).unwrap();
    assert!(f["array_job"].as_str().is_some() && f["merge_job"].as_str().is_some());
    // 2 real-device tasks, one zram device each, detached and then followed with status.
    let z: Vec<Zram> = (0..2).map(|_| Zram::new("16M")).collect();
    let devs = format!("{},{}", z[0].path(), z[1].path());
    let real = work.path().join("real");
    let o = slurm.nines(&[
        "fleet",
        "--engine",
        "slurm",
        "--detach",
        "--param",
        &format!("dev={devs}"),
        "--out",
        s(&real),
        "--",
        "profile",
        "--runtime",
        "300ms",
        "{dev}",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout(&o).contains("nines fleet status"));
    wait_for(|| real.join("merged.json").exists(), "the merge job");
    let st = slurm.nines(&["fleet", "status", s(&real)]);
    assert_success(&st);
    assert!(
        stdout(&st).contains("2 of 2 tasks have reports"),
        "{}",
        stdout(&st)
    );
    let m = report(&real.join("merged.json"));
    assert_eq!(m.sources.len(), 2);
    let names: Vec<&str> = m.devices.iter().map(|d| d.name.as_str()).collect();
    assert!(
        names[0].ends_with(&z[0].path().trim_start_matches("/dev/").to_string()),
        "{names:?}"
    );
    assert!(m.devices.iter().all(|d| d.read.ios > 0));
    // A failing array fails the fleet with the task's message, and nothing is merged.
    let bad = work.path().join("bad");
    let o = slurm.nines(&[
        "fleet",
        "--engine",
        "slurm",
        "--tasks",
        "1",
        "--wait",
        "2m",
        "--out",
        s(&bad),
        "--",
        "sim",
        "--devices",
        "0",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("task 0 failed"), "{err}");
    assert!(!bad.join("merged.json").exists());
}

/// A folder of stand-ins for Slurm's commands, put first on PATH: `sbatch` answers job ids from
/// `ok_submissions` and then fails as sbatch does on a machine with no cluster configuration;
/// `scancel` records what it cancelled.
fn fake_slurm(dir: &Path, ok_submissions: u32) -> String {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = |name: &str, body: String| {
        let p = bin.join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    let count = dir.join("sbatch-calls");
    script(
        "sbatch",
        format!(
            "#!/bin/sh\nn=$(cat '{c}' 2>/dev/null || echo 0)\necho $((n + 1)) > '{c}'\n\
             if [ \"$n\" -lt {ok_submissions} ]; then echo $((4100 + n)); exit 0; fi\n\
             echo 'sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host' >&2\n\
             echo 'sbatch: error: fetch_config: DNS SRV lookup failed' >&2\n\
             echo 'sbatch: fatal: Could not establish a configuration source' >&2\nexit 1\n",
            c = count.display()
        ),
    );
    script(
        "scancel",
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\n",
            dir.join("cancelled").display()
        ),
    );
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// `fleet --engine slurm` where sbatch cannot submit: one line that says what failed and what
/// to do, nothing left behind (a job array already submitted is cancelled when the merge job
/// cannot be), and the same --out works again with --engine local (issue 31 item 10).
#[test]
fn a_slurm_fleet_that_cannot_be_submitted_leaves_nothing_and_says_what_to_do() {
    let dir = disk_dir();
    for (ok_submissions, cancelled) in [(0, None), (1, Some("4100"))] {
        let tools = dir.path().join(format!("tools-{ok_submissions}"));
        let path = fake_slurm(&tools, ok_submissions);
        let out = dir.path().join("study");
        let o = Command::new(env!("CARGO_BIN_EXE_nines"))
            .env("PATH", &path)
            .args([
                "fleet",
                "--engine",
                "slurm",
                "--tasks",
                "3",
                "--out",
                s(&out),
            ])
            .args(["--", "sim", "--ios", "1000"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(
            err.contains("Could not establish a configuration source")
                && !err.contains("DNS SRV")
                && err.contains("--engine local")
                && err.contains("nothing was left in"),
            "{err}"
        );
        assert!(!out.exists(), "the folder this run made is gone");
        let recorded = std::fs::read_to_string(tools.join("cancelled")).ok();
        assert_eq!(recorded.as_deref().map(str::trim), cancelled, "{err}");
        if let Some(job) = cancelled {
            assert!(
                err.contains(&format!("job array {job} was cancelled")),
                "{err}"
            );
        }
        let again = run(&[
            "fleet",
            "--engine",
            "local",
            "--tasks",
            "1",
            "--out",
            s(&out),
            "--",
            "sim",
            "--ios",
            "1000",
        ]);
        assert_success(&again);
        std::fs::remove_dir_all(&out).unwrap();
    }
}

/// Every file a fleet writes into its folder goes through the output layer: a task's log, the
/// fleet record and the merged report that are symlinks to a block device are refused before
/// anything reaches the device (the log used to be opened with File::create, following the
/// link, and the task's output written onto the device). The device's bytes are unchanged.
#[test]
fn a_fleet_never_writes_through_a_symlink_to_a_block_device() {
    let zram = Zram::new("4M");
    let marker: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(zram.path())
            .unwrap();
        f.write_all(&marker).unwrap();
        f.sync_all().unwrap();
    }
    for name in ["task-0.log", "merged.json"] {
        let dir = disk_dir();
        let out = dir.path().join("study");
        std::fs::create_dir(&out).unwrap();
        std::os::unix::fs::symlink(zram.path(), out.join(name)).unwrap();
        let o = run(&[
            "fleet",
            "--engine",
            "local",
            "--tasks",
            "1",
            "-o",
            s(&out),
            "--",
            "sim",
            "--ios",
            "1000",
        ]);
        assert!(!o.status.success(), "{name}: the fleet must refuse");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("is a block device"), "{name}: {err}");
        let mut head = vec![0u8; 4096];
        {
            use std::io::Read;
            std::fs::File::open(zram.path())
                .unwrap()
                .read_exact(&mut head)
                .unwrap();
        }
        assert!(head == marker, "{name}: the device was written");
    }
}
