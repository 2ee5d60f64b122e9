//! doctor and tune on the interrupts of the kernel's nvme driver: the per-queue `nvmeXqY`
//! vectors, their (kernel-managed) affinity, and a plan that applies and reverts exactly.

use std::collections::BTreeMap;

use crate::guest::{in_guest, nines, nines_ok, read, report};

/// Every IRQ's smp_affinity_list and the nvme namespaces' queue settings: what tune may change.
fn snapshot() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for e in std::fs::read_dir("/proc/irq").unwrap() {
        let p = e.unwrap().path().join("smp_affinity_list");
        if p.exists() {
            m.insert(p.display().to_string(), read(&p));
        }
    }
    for e in std::fs::read_dir("/sys/block").unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if name.starts_with("nvme") {
            for f in ["nomerges", "rq_affinity", "iostats", "scheduler"] {
                let p = format!("/sys/block/{name}/queue/{f}");
                m.insert(p.clone(), read(&p));
            }
        }
    }
    m
}

/// IRQ number of the vector named `name` (nvme0q1) in /proc/interrupts.
fn irq_of(name: &str) -> u32 {
    read("/proc/interrupts")
        .lines()
        .find(|l| l.split_whitespace().last() == Some(name))
        .and_then(|l| l.split(':').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no vector {name} in /proc/interrupts"))
}

#[test]
#[ignore = "runs inside the NVMe guest (boot_mixed_controllers)"]
fn guest_doctor_finds_the_nvme_queue_vectors_and_settings() {
    in_guest();
    let out = nines_ok(&["doctor", "--json", "-"]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let findings = r["findings"].as_array().unwrap();
    let of = |id: &str, subject: &str| {
        findings
            .iter()
            .find(|f| f["id"] == id && f["subject"] == subject)
            .unwrap_or_else(|| panic!("no {id} finding for {subject}: {r}"))
    };
    // The I/O queue vectors of controller 0, with their affinity read from /proc/irq.
    let aff = of("irq.affinity", "nvme0n1");
    let ev = aff["evidence"].to_string();
    assert!(ev.contains("nvme0q1"), "{ev}");
    assert!(ev.contains("/proc/irq/"), "{ev}");
    // Each namespace's scheduler, merges, completion affinity: the zoned one on mq-deadline.
    for id in ["block.nomerges", "block.rq_affinity", "block.iostats"] {
        of(id, "nvme0n1");
    }
    // The guest boots with nvme.poll_queues=1 and the kernel's APST default.
    let poll = of("block.poll_queues", "nvme0n1");
    assert!(
        poll["title"].as_str().unwrap().contains("1 poll queue(s)"),
        "{poll}"
    );
    // Each controller's identity and APST state; QEMU 7.2's controller has no APST.
    let ctrl = of("block.nvme", "nvme0");
    assert!(
        ctrl["title"].as_str().unwrap().contains("QEMU NVMe Ctrl"),
        "{ctrl}"
    );
    assert_eq!(ctrl["severity"], "info", "{ctrl}");
    // Each namespace's scheduler as sysfs has it: doctor speaks of those not on `none`.
    for dev in ["nvme0n1", "nvme1n1", "nvme1n2"] {
        let s = read(format!("/sys/block/{dev}/queue/scheduler"));
        let active = s
            .split('[')
            .nth(1)
            .and_then(|x| x.split(']').next())
            .unwrap();
        let f = findings
            .iter()
            .find(|f| f["id"] == "block.scheduler" && f["subject"] == dev);
        assert_eq!(f.is_some(), active != "none", "{dev}: {s}: {f:?}");
    }
    let text = String::from_utf8_lossy(&nines_ok(&["doctor"]).stdout).to_string();
    assert!(text.contains("nvme0n1"), "{text}");
}

#[test]
#[ignore = "runs inside the NVMe guest (boot_mixed_controllers)"]
fn guest_tune_plan_applies_on_managed_queue_interrupts_and_reverts_exactly() {
    in_guest();
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    let state = dir.path().join("state.json");
    let (plan_s, state_s) = (plan.to_str().unwrap(), state.to_str().unwrap());
    let before = snapshot();
    nines_ok(&[
        "tune",
        "--plan",
        "/dev/nvme0n1",
        "/dev/nvme1n1",
        "-o",
        plan_s,
    ]);
    let p = report(&plan);
    // The nvme driver's queue interrupts are kernel-managed, one queue per CPU, each already
    // on the CPU its queue serves: the plan moves none of them, so it applies without
    // --skip-refused-irqs.
    let changes = p["changes"].as_array().unwrap();
    assert!(
        changes.iter().all(|c| c["kind"] != "irq_affinity"),
        "{changes:?}"
    );
    nines_ok(&["tune", "--apply", plan_s, "--state", state_s]);
    for c in changes {
        let got = read(c["path"].as_str().unwrap());
        let want = c["value"].as_str().unwrap();
        // The scheduler file lists every scheduler, the active one in brackets.
        assert!(
            got == want || got.contains(&format!("[{want}]")),
            "{}: {got} after applying {want}",
            c["path"]
        );
    }
    // After tune, each device's I/O from its planned CPU completes on that CPU: doctor checks the
    // plan against the live interrupts and finds nothing to say about them.
    let out = nines_ok(&["doctor", "--plan", plan_s, "--json", "-"]);
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let irq: Vec<_> = d["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == "plan.irq")
        .collect();
    assert!(irq.is_empty(), "{irq:?}");
    nines_ok(&["tune", "--revert", state_s]);
    assert_eq!(snapshot(), before, "revert restores every value exactly");
}

#[test]
#[ignore = "runs inside the NVMe guest (boot_mixed_controllers)"]
fn guest_tune_moves_a_movable_nvme_vector_and_reverts_it_and_refuses_a_managed_one() {
    in_guest();
    let dir = tempfile::tempdir().unwrap();
    let (plan, state) = (dir.path().join("p.json"), dir.path().join("s.json"));
    let (plan_s, state_s) = (plan.to_str().unwrap(), state.to_str().unwrap());
    // The admin queue's vector is not managed: a plan may move it.
    let admin = irq_of("nvme0q0");
    let path = format!("/proc/irq/{admin}/smp_affinity_list");
    let before = read(&path);
    let mut p = serde_json::json!({
        "schema": "nines-plan", "schema_version": 1, "io_cpus": [1], "housekeeping_cpus": [0],
        "boot_params": "", "devices": [], "notes": [],
        "changes": [{"kind": "irq_affinity", "path": path, "value": "1", "current": before}],
    });
    std::fs::write(&plan, p.to_string()).unwrap();
    nines_ok(&["tune", "--apply", plan_s, "--state", state_s]);
    assert_eq!(read(&path), "1");
    // (Its effective affinity follows at its next interrupt: x86 moves a vector lazily, and the
    // admin queue interrupts rarely; so the set affinity is what is read back.)
    nines_ok(&["tune", "--revert", state_s]);
    assert_eq!(read(&path), before);
    // A queue vector is managed: the kernel refuses, tune says so in one line and changes nothing.
    let q1 = irq_of("nvme0q1");
    let qpath = format!("/proc/irq/{q1}/smp_affinity_list");
    let qbefore = read(&qpath);
    let other = if qbefore == "0" { "1" } else { "0" };
    p["changes"] = serde_json::json!([
        {"kind": "irq_affinity", "path": path, "value": "1", "current": before},
        {"kind": "irq_affinity", "path": qpath, "value": other, "current": qbefore},
    ]);
    std::fs::write(&plan, p.to_string()).unwrap();
    let out = nines(&["tune", "--apply", plan_s, "--state", state_s]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("kernel-managed"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(read(&path), before, "the earlier change was rolled back");
    assert_eq!(read(&qpath), qbefore);
}

#[test]
#[ignore = "runs inside the NVMe guest (boot_mixed_controllers)"]
fn guest_profile_attributes_interrupts_to_the_submitting_cpu() {
    in_guest();
    let dir = tempfile::tempdir().unwrap();
    for cpu in ["0", "1"] {
        let json = dir.path().join(format!("r{cpu}.json"));
        nines_ok(&[
            "profile",
            "/dev/nvme0n1",
            "--rw",
            "randread",
            "--ios",
            "2000",
            "--iodepth",
            "4",
            "--engine",
            "io_uring",
            "--cpus",
            cpu,
            "--json",
            json.to_str().unwrap(),
        ]);
        let r = report(&json);
        let i = &r["devices"][0]["interrupts"];
        assert_eq!(i["submit_cpu"].to_string(), cpu, "{i}");
        // Every completion interrupt of the run came on the worker's CPU: the queue its CPU maps
        // to has its (managed) vector there.
        assert!(i["total"].as_u64().unwrap() >= 500, "{i}");
        assert_eq!(i["off_cpu_count"], 0, "{i}");
        let irqs = i["irqs"].as_array().unwrap();
        assert!(irqs.len() >= 2, "{i}");
    }
}
