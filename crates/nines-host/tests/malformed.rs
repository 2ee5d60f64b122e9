//! Missing and malformed files: a finding or a note, never a crash.

use std::path::Path;

use nines_host::doctor::{Severity, analyze};
use nines_host::fs::HostFs;
use nines_host::host::Host;
use nines_host::plan::Plan;

fn fixture() -> &'static Path {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/malformed"
    ))
}

#[test]
fn empty_root_reads_without_panicking() {
    let d = tempfile::tempdir().unwrap();
    let h = Host::read(&HostFs::new(d.path()));
    assert!(h.online.is_empty() && h.devices.is_empty());
    assert!(h.missing.iter().any(|m| m == "/proc/interrupts"));
    let f = analyze(&h);
    // Only informational or "could not use" findings: nothing made up.
    assert!(f.iter().all(|f| f.severity <= Severity::Warn));
    assert!(Plan::build(&h, None, None, &[]).is_err());
    let s = nines_host::doctor_summary(d.path());
    assert!(s["counts"].is_object());
}

#[test]
fn committed_malformed_tree() {
    let h = Host::read(&HostFs::new(fixture()));
    let bad: Vec<&str> = h.problems.iter().map(|p| p.path.as_str()).collect();
    for p in [
        "/proc/interrupts",
        "/proc/self/limits",
        "/proc/self/status",
        "/sys/devices/system/cpu/isolated",
        "/sys/block/nvme0n1/queue/nomerges",
        "/proc/sys/kernel/sched_rt_runtime_us",
    ] {
        assert!(bad.contains(&p), "{p} not reported in {bad:?}");
    }
    for p in &h.problems {
        assert!(!p.msg.contains('\n'), "{p:?}");
    }
    let f = analyze(&h);
    let unreadable = f.iter().filter(|f| f.id == "input.unreadable").count();
    assert_eq!(unreadable, h.problems.len());
    // What was readable is still used: the device, its scheduler, the online CPUs.
    let d = h.device("nvme0n1").unwrap();
    assert_eq!(d.queue.scheduler.as_deref(), Some("mq-deadline"));
    assert_eq!(d.queue.nomerges, None);
    assert_eq!(h.online, vec![0, 1, 2, 3]);
    assert!(f.iter().any(|f| f.id == "block.scheduler"));
}

#[test]
fn irq_snapshot_errors_are_one_line() {
    let e = nines_host::IrqSnapshot::read(fixture())
        .unwrap_err()
        .to_string();
    assert!(e.contains("/proc/interrupts") && !e.contains('\n'), "{e}");
    let d = tempfile::tempdir().unwrap();
    let e = nines_host::IrqSnapshot::read(d.path())
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot read /proc/interrupts"), "{e}");
}

mod arbitrary_files {
    use super::*;
    use proptest::prelude::*;

    const FILES: [&str; 12] = [
        "proc/interrupts",
        "proc/cmdline",
        "proc/self/limits",
        "proc/self/status",
        "proc/sys/kernel/sched_rt_runtime_us",
        "sys/devices/system/cpu/online",
        "sys/devices/system/cpu/isolated",
        "sys/devices/system/node/node0/cpulist",
        "sys/devices/system/cpu/cpu0/topology/thread_siblings_list",
        "sys/devices/system/cpu/cpu0/cpuidle/state0/latency",
        "sys/block/nvme0n1/queue/scheduler",
        "sys/block/nvme0n1/mq/0/cpu_list",
    ];

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Any content in any of the files doctor reads: reading, analysing and planning never panic.
        #[test]
        fn any_content_never_panics(contents in proptest::collection::vec("\\PC{0,80}|[0-9,\\-\\[\\] a-z\\n]{0,40}", FILES.len())) {
            let d = tempfile::tempdir().unwrap();
            for (f, c) in FILES.iter().zip(&contents) {
                let p = d.path().join(f);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, c).unwrap();
            }
            std::fs::create_dir_all(d.path().join("sys/block/nvme0n1/device")).unwrap();
            let h = Host::read(&HostFs::new(d.path()));
            let _ = analyze(&h);
            let _ = Plan::build(&h, None, None, &[]);
            let _ = Plan::build(&h, Some(&[0, 1]), None, &["nvme0n1".to_string()]);
            let _ = nines_host::IrqSnapshot::read(d.path());
        }
    }
}
