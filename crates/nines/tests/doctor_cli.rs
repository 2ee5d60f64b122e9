//! `nines doctor` from the command line: the live host, its capture replayed with --root, the
//! paper-000 AFA fixture, malformed input, and `nines tune --plan` on the fixture.

use std::process::Command;

use nines_host::plan::Plan;
use nines_host::testbed::{AfaOptions, fig5_cpu, write_afa_host};

mod common;
use common::{assert_success, run as nines};

fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn capture_extract_root_gives_the_live_findings() {
    let d = tempfile::tempdir().unwrap();
    let live_json = d.path().join("live.json");
    let cap = d.path().join("host.tar.gz");
    let out = nines(&[
        "doctor",
        "--json",
        live_json.to_str().unwrap(),
        "--capture",
        cap.to_str().unwrap(),
    ]);
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("nines doctor (/):"), "{text}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("captured"));
    let tree = d.path().join("tree");
    std::fs::create_dir(&tree).unwrap();
    let st = Command::new("tar")
        .arg("xzf")
        .arg(&cap)
        .arg("-C")
        .arg(&tree)
        .status()
        .unwrap();
    assert!(st.success());
    let replay_json = d.path().join("replay.json");
    let out = nines(&[
        "doctor",
        "--root",
        tree.to_str().unwrap(),
        "--json",
        replay_json.to_str().unwrap(),
    ]);
    assert_success(&out);
    let (a, b) = (json(&live_json), json(&replay_json));
    assert_eq!(a["schema"], "nines-doctor");
    assert_eq!(a["schema_version"], 1);
    assert_eq!(a["findings"], b["findings"]);
    assert_eq!(a["counts"], b["counts"]);
    assert_eq!(a["missing"], b["missing"]);
    // This machine: the virtio-blk queue interrupt and RT throttling are found.
    let ids: Vec<&str> = a["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"irq.affinity") && ids.contains(&"proc.sched_fifo"),
        "{ids:?}"
    );
}

#[test]
fn afa_fixture_text_and_plan() {
    // In RAM when possible: the fixture has about 9,000 files.
    let d = if std::path::Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let root = d.path().join("afa");
    write_afa_host(&root, AfaOptions { tuned: false }).unwrap();
    let r = root.to_str().unwrap();
    let out = nines(&["doctor", "--root", r]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(": 2 critical,"), "{}", &text[..200]);
    assert!(text.contains(
        "[CRITICAL] housekeeping.smartd (pid 655): smartd polls device health every 600 s"
    ));
    assert!(text.contains("evidence: /proc/640/comm = irqbalance"));
    assert!(text.contains("fix: echo none > /sys/block/nvme0n1/queue/scheduler\n    same for 63 more: nvme1n1, nvme2n1, nvme3n1"));
    let plan_path = d.path().join("plan.json");
    let out = nines(&[
        "tune",
        "--plan",
        "--root",
        r,
        "--cpus",
        "4-19,24-39",
        "-o",
        plan_path.to_str().unwrap(),
    ]);
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("  4  nvme0n1 (node0, 40 irqs), nvme32n1 (node0, 40 irqs)"),
        "{text}"
    );
    assert!(text.contains("isolcpus=4-19,24-39 nohz_full=4-19,24-39 rcu_nocbs=4-19,24-39 processor.max_cstate=1 idle=poll"));
    let plan = Plan::load(&plan_path).unwrap();
    let out = nines(&["doctor", "--root", r, "--plan", plan_path.to_str().unwrap()]);
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("[WARN] plan.irq (nvme0n1): nvme0n1's interrupts are served on CPUs 15 but the plan submits its I/O on CPU 4"), "{text}");
    // It says it checked the plan, and how many devices came out well.
    assert!(
        text.contains(
            "[INFO] plan.checked (plan): the plan's 64 device(s) checked against this host"
        ),
        "{text}"
    );
    let alone = nines(&["doctor", "--root", r]);
    assert_ne!(
        alone.stdout, out.stdout,
        "doctor --plan prints what doctor alone prints"
    );
    for n in 0..64 {
        assert_eq!(plan.cpu_for(&format!("/dev/nvme{n}n1")), Some(fig5_cpu(n)));
    }
    // The tuned fixture: no warnings left.
    let tuned = d.path().join("tuned");
    write_afa_host(&tuned, AfaOptions { tuned: true }).unwrap();
    let j = d.path().join("tuned.json");
    assert!(
        nines(&[
            "doctor",
            "--root",
            tuned.to_str().unwrap(),
            "--json",
            j.to_str().unwrap()
        ])
        .status
        .success()
    );
    let v = json(&j);
    assert_eq!(
        (
            v["counts"]["critical"].as_u64(),
            v["counts"]["warn"].as_u64()
        ),
        (Some(0), Some(0)),
        "{v}"
    );
}

#[test]
fn malformed_and_missing_input() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../nines-host/tests/fixtures/malformed"
    );
    let out = nines(&["doctor", "--root", fixture]);
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("[WARN] input.unreadable (/proc/interrupts)"),
        "{text}"
    );
    let empty = tempfile::tempdir().unwrap();
    let out = nines(&[
        "doctor",
        "--root",
        empty.path().to_str().unwrap(),
        "--json",
        "-",
    ]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["missing"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m == "/proc/interrupts")
    );
    let out = nines(&["doctor", "--root", "/nonexistent/capture"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1);
    assert!(err.contains("not a directory"), "{err}");
    let out = nines(&["tune", "--plan", "--cpus", "4-x"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--cpus 4-x") && err.trim().lines().count() == 1,
        "{err}"
    );
}

/// With no targets, a plan covers NVMe devices only: on a host without NVMe (this test machine)
/// it asks for targets instead of planning changes to the system disk.
#[test]
fn tune_plan_without_targets_never_picks_non_nvme_disks() {
    let has_nvme = std::fs::read_dir("/sys/block")
        .map(|rd| {
            rd.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("nvme"))
        })
        .unwrap_or(false);
    if has_nvme {
        eprintln!("skipped: this host has NVMe devices, so a default plan is expected to succeed");
        return;
    }
    let out = nines(&["tune", "--plan"]);
    let err = String::from_utf8_lossy(&out.stderr);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "planned without NVMe: {text}");
    assert!(
        err.contains("no NVMe devices") && err.trim().lines().count() == 1,
        "{err}"
    );
    assert!(!text.contains("/sys/block/vda"), "{text}");
}
