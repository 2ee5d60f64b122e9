//! doctor's NVMe controller lines from sysfs: model, firmware, the namespaces' write cache and
//! the APST state, on small fixture trees.

use std::path::Path;

use nines_host::doctor::{Severity, analyze};
use nines_host::fs::HostFs;
use nines_host::host::Host;

fn w(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel.trim_start_matches('/'));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

#[test]
fn each_controller_is_listed_with_its_write_cache_and_apst_state() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    w(
        r,
        "/sys/module/nvme_core/parameters/default_ps_max_latency_us",
        "100000\n",
    );
    // nvme0: APST enabled by the driver (the tolerance file exists), a write-back cache.
    w(
        r,
        "/sys/class/nvme/nvme0/model",
        "Samsung SSD 970 EVO Plus 1TB            \n",
    );
    w(r, "/sys/class/nvme/nvme0/firmware_rev", "2B2QEXM7\n");
    w(r, "/sys/class/nvme/nvme0/serial", "S1\n");
    w(
        r,
        "/sys/class/nvme/nvme0/power/pm_qos_latency_tolerance_us",
        "100000\n",
    );
    w(r, "/sys/block/nvme0n1/queue/write_cache", "write back\n");
    // nvme1: no APST (no tolerance file), write through.
    w(r, "/sys/class/nvme/nvme1/model", "QEMU NVMe Ctrl\n");
    w(r, "/sys/class/nvme/nvme1/firmware_rev", "7.2.22\n");
    w(r, "/sys/class/nvme/nvme1/serial", "nines1\n");
    w(r, "/sys/block/nvme1n1/queue/write_cache", "write through\n");
    // nvme2: APST turned off for this controller.
    w(r, "/sys/class/nvme/nvme2/model", "M\n");
    w(r, "/sys/class/nvme/nvme2/firmware_rev", "F\n");
    w(
        r,
        "/sys/class/nvme/nvme2/power/pm_qos_latency_tolerance_us",
        "0\n",
    );
    // Not controllers.
    w(r, "/sys/class/nvme/nvme-fabrics/dev", "10:123\n");
    let h = Host::read(&HostFs::new(r));
    assert_eq!(h.apst_max_latency_us, Some(100_000));
    let names: Vec<&str> = h.nvme_controllers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["nvme0", "nvme1", "nvme2"]);
    let lines: Vec<_> = analyze(&h)
        .into_iter()
        .filter(|f| f.id == "block.nvme")
        .collect();
    assert_eq!(lines.len(), 3);
    // A controller doing APST is a warning (the next I/O after an idle gap pays its exit
    // latency); one with APST off is not.
    assert_eq!(lines[0].severity, Severity::Warn);
    for f in &lines[1..] {
        assert_eq!(f.severity, Severity::Info, "{}", f.title);
    }
    assert_eq!(
        lines[0].title,
        "nvme0: Samsung SSD 970 EVO Plus 1TB, firmware 2B2QEXM7; volatile write cache: write \
         back (nvme0n1); APST on: idle power states with an exit latency up to 100000 µs \
         (latency tolerance 100000)"
    );
    assert!(
        lines[0]
            .fix
            .starts_with("echo 0 > /sys/class/nvme/nvme0/power/pm_qos_latency_tolerance_us")
    );
    assert_eq!(
        lines[1].title,
        "nvme1: QEMU NVMe Ctrl, firmware 7.2.22; volatile write cache: write through \
         (nvme1n1); APST not in use (the controller does not support it, or the driver left \
         it off)"
    );
    assert!(lines[1].fix.is_empty());
    assert!(
        lines[2]
            .title
            .ends_with("APST off (its latency tolerance is 0)")
    );
    // A host without the nvme driver: no line, nothing missing.
    let empty = tempfile::tempdir().unwrap();
    let h = Host::read(&HostFs::new(empty.path()));
    assert!(h.nvme_controllers.is_empty());
    assert!(
        !h.missing.iter().any(|m| m.contains("nvme")),
        "{:?}",
        h.missing
    );
    assert!(!analyze(&h).iter().any(|f| f.id == "block.nvme"));
}

/// The nvme driver's APST policy, once: today's kernels' five parameters and the rule they
/// make, the older kernels' one (50 x the latencies), and off; the run report's host summary
/// carries the parameters for a replay (`nines sim --apst RUN.json`).
#[test]
fn the_apst_policy_is_reported_with_its_rule() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    let params = [
        ("default_ps_max_latency_us", "100000"),
        ("apst_primary_timeout_ms", "100"),
        ("apst_primary_latency_tol_us", "15000"),
        ("apst_secondary_timeout_ms", "2000"),
        ("apst_secondary_latency_tol_us", "100000"),
    ];
    for (n, v) in params {
        w(
            r,
            &format!("/sys/module/nvme_core/parameters/{n}"),
            &format!("{v}\n"),
        );
    }
    let policy = |r: &Path| {
        let h = Host::read(&HostFs::new(r));
        analyze(&h)
            .into_iter()
            .find(|f| f.id == "host.apst")
            .map(|f| (f.severity, f.title, f.evidence.len()))
    };
    let (sev, title, evidence) = policy(r).unwrap();
    assert_eq!((sev, evidence), (Severity::Info, 5));
    assert!(
        title.contains("the deepest state within 15000 µs of entry + exit after 100 ms idle")
            && title.contains("within 100000 µs after 2000 ms more")
            && title.contains("apst_secondary_timeout_ms=2000"),
        "{title}"
    );
    let summary = nines_host::doctor_summary(r);
    assert_eq!(summary["apst"]["apst_primary_timeout_ms"], 100, "{summary}");
    // An older kernel: only the exit-latency bound.
    for (n, _) in &params[1..] {
        std::fs::remove_file(r.join(format!("sys/module/nvme_core/parameters/{n}"))).unwrap();
    }
    assert!(policy(r).unwrap().1.contains("before the 2021 rework"));
    w(
        r,
        "/sys/module/nvme_core/parameters/default_ps_max_latency_us",
        "0\n",
    );
    assert!(policy(r).unwrap().1.contains("APST off"));
    // No nvme driver: nothing said.
    std::fs::remove_dir_all(r.join("sys/module/nvme_core")).unwrap();
    assert!(policy(r).is_none());
}
