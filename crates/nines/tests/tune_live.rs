//! `nines tune --apply` / `--revert` on this machine's real kernel: the block-queue settings of a
//! zram and a loop device the test creates, a real interrupt's affinity, and the refused
//! virtio-blk queue interrupt (kernel-managed) that must roll back everything applied before it.

use std::path::{Path, PathBuf};
use std::process::Command;

use nines_host::plan::Plan;

mod common;
use common::{assert_success, run as nines};

fn read(p: &str) -> String {
    std::fs::read_to_string(p).unwrap().trim().to_string()
}

fn active_scheduler(dev: &str) -> String {
    nines_host::plan::normalize_value(
        "/scheduler",
        &read(&format!("/sys/block/{dev}/queue/scheduler")),
    )
}

/// A zram device created for the test and removed on drop.
struct Zram(u32);
impl Zram {
    fn new() -> Zram {
        let n: u32 = read("/sys/class/zram-control/hot_add").parse().unwrap();
        std::fs::write(format!("/sys/block/zram{n}/disksize"), "64M").unwrap();
        Zram(n)
    }
    fn name(&self) -> String {
        format!("zram{}", self.0)
    }
}
impl Drop for Zram {
    fn drop(&mut self) {
        let _ = std::fs::write("/sys/class/zram-control/hot_remove", self.0.to_string());
    }
}

/// A loop device over a temporary file, detached on drop.
struct Loop(String, #[allow(dead_code)] tempfile::NamedTempFile);
impl Loop {
    fn new() -> Loop {
        let f = tempfile::NamedTempFile::new().unwrap();
        f.as_file().set_len(16 << 20).unwrap();
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(f.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "losetup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Loop(String::from_utf8(out.stdout).unwrap().trim().to_string(), f)
    }
    fn name(&self) -> String {
        self.0.trim_start_matches("/dev/").to_string()
    }
}
impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

const FILES: [&str; 4] = ["scheduler", "nomerges", "rq_affinity", "iostats"];

fn queue_values(dev: &str) -> Vec<Option<String>> {
    FILES
        .iter()
        .map(|f| {
            let p = format!("/sys/block/{dev}/queue/{f}");
            Path::new(&p).exists().then(|| {
                if *f == "scheduler" {
                    active_scheduler(dev)
                } else {
                    read(&p)
                }
            })
        })
        .collect()
}

#[test]
fn apply_then_revert_zram_and_loop_queue_settings() {
    let z = Zram::new();
    let l = Loop::new();
    let (zn, ln) = (z.name(), l.name());
    // Start from untuned values so the plan has something to change on each device.
    std::fs::write(format!("/sys/block/{zn}/queue/iostats"), "1").unwrap();
    std::fs::write(format!("/sys/block/{ln}/queue/scheduler"), "mq-deadline").unwrap();
    let zram_before = queue_values(&zn);
    let loop_before = queue_values(&ln);
    assert_eq!(
        zram_before,
        vec![None, Some("0".into()), None, Some("1".into())]
    );
    assert_eq!(loop_before[0].as_deref(), Some("mq-deadline"));

    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("plan.json");
    let state_path = dir.path().join("state.json");
    let out = nines(&[
        "tune",
        "--plan",
        "--cpus",
        "1",
        "--housekeeping",
        "0",
        "-o",
        plan_path.to_str().unwrap(),
        &format!("/dev/{zn}"),
        &l.0,
    ]);
    assert_success(&out);
    let plan = Plan::load(&plan_path).unwrap();
    assert_eq!(plan.cpu_for(&format!("/dev/{zn}")), Some(1));
    assert_eq!(plan.cpu_for(&l.0), Some(1));
    // zram has only nomerges and iostats of the four; loop has all four.
    assert_eq!(
        plan.changes.iter().filter(|c| c.path.contains(&zn)).count(),
        2
    );
    assert_eq!(
        plan.changes
            .iter()
            .filter(|c| c.path.contains(&format!("/{ln}/")))
            .count(),
        4
    );

    let out = nines(&[
        "tune",
        "--apply",
        plan_path.to_str().unwrap(),
        "--state",
        state_path.to_str().unwrap(),
    ]);
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("echo 2 > /sys/block/{zn}/queue/nomerges")),
        "{text}"
    );
    assert_eq!(
        queue_values(&zn),
        vec![None, Some("2".into()), None, Some("0".into())]
    );
    assert_eq!(
        queue_values(&ln),
        vec![
            Some("none".into()),
            Some("2".into()),
            Some("2".into()),
            Some("0".into())
        ]
    );

    let out = nines(&["tune", "--revert", state_path.to_str().unwrap()]);
    assert_success(&out);
    assert_eq!(queue_values(&zn), zram_before);
    assert_eq!(queue_values(&ln), loop_before);
}

fn plan_json(changes: &[(&str, &str, &str)]) -> String {
    let changes: Vec<serde_json::Value> = changes
        .iter()
        .map(|(k, p, v)| serde_json::json!({"kind": k, "path": p, "value": v, "current": null}))
        .collect();
    serde_json::json!({
        "schema": "nines-plan", "schema_version": 1, "io_cpus": [1], "housekeeping_cpus": [0],
        "boot_params": "", "devices": [], "changes": changes, "notes": [],
    })
    .to_string()
}

#[test]
fn refused_virtio_blk_interrupt_rolls_back_earlier_changes() {
    let snap = nines_host::IrqSnapshot::read(Path::new("/")).unwrap();
    let Some(vda_irqs) = snap.device_irqs.get("vda") else {
        eprintln!("no virtio-blk vda on this machine: nothing to test");
        return;
    };
    let irq = vda_irqs[0];
    let aff_path = format!("/proc/irq/{irq}/smp_affinity_list");
    let aff_before = read(&aff_path);
    let want = if aff_before == "0" { "1" } else { "0" };
    let z = Zram::new();
    let zn = z.name();
    let nomerges = format!("/sys/block/{zn}/queue/nomerges");
    let before = read(&nomerges);
    let dir = tempfile::tempdir().unwrap();
    let plan_path: PathBuf = dir.path().join("plan.json");
    std::fs::write(
        &plan_path,
        plan_json(&[
            ("block_queue", &nomerges, "2"),
            ("irq_affinity", &aff_path, want),
        ]),
    )
    .unwrap();
    let out = nines(&[
        "tune",
        "--apply",
        plan_path.to_str().unwrap(),
        "--state",
        dir.path().join("s.json").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    // The kernel refuses to move a managed interrupt; the one earlier change is undone.
    assert!(
        err.contains(&aff_path) && err.contains("1 earlier change(s) rolled back"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(read(&nomerges), before);
    assert_eq!(read(&aff_path), aff_before);
}

#[test]
fn skip_refused_irqs_applies_the_rest() {
    let snap = nines_host::IrqSnapshot::read(Path::new("/")).unwrap();
    let Some(vda_irqs) = snap.device_irqs.get("vda") else {
        eprintln!("no virtio-blk vda on this machine: nothing to test");
        return;
    };
    let aff_path = format!("/proc/irq/{}/smp_affinity_list", vda_irqs[0]);
    let aff_before = read(&aff_path);
    let want = if aff_before == "0" { "1" } else { "0" };
    let z = Zram::new();
    let nomerges = format!("/sys/block/{}/queue/nomerges", z.name());
    let before = read(&nomerges);
    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("plan.json");
    let state_path = dir.path().join("s.json");
    std::fs::write(
        &plan_path,
        plan_json(&[
            ("irq_affinity", &aff_path, want),
            ("block_queue", &nomerges, "2"),
        ]),
    )
    .unwrap();
    let out = nines(&[
        "tune",
        "--apply",
        plan_path.to_str().unwrap(),
        "--state",
        state_path.to_str().unwrap(),
        "--skip-refused-irqs",
    ]);
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("skipped: {aff_path}")), "{text}");
    assert_eq!(read(&nomerges), "2");
    assert_eq!(read(&aff_path), aff_before);
    let out = nines(&["tune", "--revert", state_path.to_str().unwrap()]);
    assert_success(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("restored 1 of 1"));
    assert_eq!(read(&nomerges), before);
}

#[test]
fn apply_then_revert_a_real_interrupt_affinity() {
    // virtio-blk's queue interrupt cannot move (kernel-managed); its config interrupt can. Use it
    // to round-trip a real /proc/irq/N/smp_affinity_list through apply and revert.
    let ints = std::fs::read_to_string("/proc/interrupts").unwrap();
    let parsed = nines_host::parse::parse_interrupts(&ints).unwrap();
    let Some(row) = parsed.rows.iter().find(|r| {
        r.actions
            .iter()
            .any(|a| a.starts_with("virtio") && a.ends_with("-config"))
    }) else {
        eprintln!("no virtio config interrupt here: nothing to test");
        return;
    };
    let irq = row.irq.unwrap();
    let path = format!("/proc/irq/{irq}/smp_affinity_list");
    let before = read(&path);
    let want = if before == "0" { "1" } else { "0" };
    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("plan.json");
    let state_path = dir.path().join("state.json");
    std::fs::write(&plan_path, plan_json(&[("irq_affinity", &path, want)])).unwrap();
    let out = nines(&[
        "tune",
        "--apply",
        plan_path.to_str().unwrap(),
        "--state",
        state_path.to_str().unwrap(),
    ]);
    assert_success(&out);
    assert_eq!(read(&path), want);
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state_path).unwrap()).unwrap();
    assert_eq!(
        state["entries"][0]["previous"],
        nines_host::plan::normalize_value(&path, &before)
    );
    let out = nines(&["tune", "--revert", state_path.to_str().unwrap()]);
    assert_success(&out);
    assert_eq!(
        nines_host::plan::normalize_value(&path, &read(&path)),
        nines_host::plan::normalize_value(&path, &before)
    );
}

#[test]
fn refuses_without_root() {
    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("plan.json");
    std::fs::write(&plan_path, plan_json(&[])).unwrap();
    let mut perms = std::fs::metadata(dir.path()).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(dir.path(), perms).unwrap();
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            env!("CARGO_BIN_EXE_nines"),
            "tune",
            "--apply",
        ])
        .arg(&plan_path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("needs root"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

fn irqbalance_running() -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "irqbalance")
        })
}

#[test]
fn stop_irqbalance_then_revert_says_how_to_restart() {
    // A stand-in process named irqbalance (a copy of sleep); never run where a real one runs.
    if irqbalance_running() {
        eprintln!("a real irqbalance runs here: not touching it");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("irqbalance");
    std::fs::copy("/bin/sleep", &fake).unwrap();
    let mut child = Command::new(&fake).arg("300").spawn().unwrap();
    let comm = format!("/proc/{}/comm", child.id());
    for _ in 0..100 {
        if std::fs::read_to_string(&comm).is_ok_and(|c| c.trim() == "irqbalance") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let plan_path = dir.path().join("plan.json");
    let state_path = dir.path().join("s.json");
    std::fs::write(&plan_path, plan_json(&[])).unwrap();
    let out = nines(&[
        "tune",
        "--apply",
        plan_path.to_str().unwrap(),
        "--state",
        state_path.to_str().unwrap(),
        "--stop-irqbalance",
    ]);
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("stopped irqbalance (signal"), "{text}");
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGTERM)
    );
    let out = nines(&["tune", "--revert", state_path.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("restart it by hand: {} 300", fake.display())),
        "{err}"
    );
}
