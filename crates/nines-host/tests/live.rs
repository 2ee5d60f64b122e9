//! On this machine: doctor's capture reproduces the live findings, and IRQ deltas see the
//! virtio-blk interrupts caused by the test's own O_DIRECT reads.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nines_host::capture::{extract, wants_gz, write_capture_to};
use nines_host::doctor::analyze;
use nines_host::fs::HostFs;
use nines_host::host::Host;
use nines_host::parse::parse_interrupts;
use nines_host::{IrqSnapshot, device_irq_report};

#[test]
fn capture_then_root_reproduces_live_findings() {
    for name in ["cap.tar", "cap.tar.gz"] {
        let fs = HostFs::live();
        let live = Host::read(&fs);
        let live_findings = analyze(&live);
        let d = tempfile::tempdir().unwrap();
        let archive = d.path().join(name);
        let file = std::fs::File::create(&archive).unwrap();
        let n = write_capture_to(&fs.recorded(), file, wants_gz(&archive), &archive).unwrap();
        assert!(n > 10, "{n} files");
        let tree = d.path().join("tree");
        std::fs::create_dir(&tree).unwrap();
        extract(&archive, &tree).unwrap();
        let replay = Host::read(&HostFs::new(&tree));
        assert_eq!(analyze(&replay), live_findings, "{name}");
        assert_eq!(replay.missing, live.missing);
        assert!(replay.problems.is_empty(), "{:?}", replay.problems);
        // Exactly what was read: the interrupts and limits, not unrelated /proc files.
        assert!(tree.join("proc/interrupts").is_file());
        assert!(tree.join("proc/self/limits").is_file());
        assert!(!tree.join("proc/meminfo").exists());
        assert!(!tree.join("proc/sys/vm").exists());
        assert!(!tree.join("proc/self/environ").exists());
    }
}

fn snap(text: &str, dev: &str, irqs: &[u32]) -> IrqSnapshot {
    IrqSnapshot {
        interrupts: parse_interrupts(text).unwrap(),
        device_irqs: BTreeMap::from([(dev.to_string(), irqs.to_vec())]),
    }
}

#[test]
fn delta_and_device_report_are_exact() {
    let a = snap(
        "     CPU0 CPU1 CPU2\n 101: 10 0 5 IR-PCI-MSI 1-edge nvme0q1\n 102: 0 0 0 IR-PCI-MSI 2-edge nvme0q2\n 7: 1 1 1 IO-APIC 7-edge other\n",
        "nvme0n1",
        &[101, 102],
    );
    let b = snap(
        "     CPU0 CPU1 CPU2\n 101: 13 0 9 IR-PCI-MSI 1-edge nvme0q1\n 102: 0 2 0 IR-PCI-MSI 2-edge nvme0q2\n 7: 1 1 1 IO-APIC 7-edge other\n",
        "nvme0n1",
        &[101, 102],
    );
    let d = a.delta(&b);
    assert_eq!(d.per_irq[&101], vec![(0, 3), (2, 4)]);
    assert_eq!(d.per_irq[&102], vec![(1, 2)]);
    assert!(d.per_irq[&7].is_empty());
    let r = device_irq_report("/dev/nvme0n1", Some(0), &d);
    assert_eq!(r["total"], 9);
    assert_eq!(r["off_cpu_count"], 6);
    assert_eq!(r["off_cpu"], true);
    assert_eq!(r["served_by_cpu"]["2"], 4);
    let only = snap(
        "     CPU0 CPU1 CPU2\n 101: 10 0 5 IR-PCI-MSI 1-edge nvme0q1\n",
        "nvme0n1",
        &[101],
    );
    let later = snap(
        "     CPU0 CPU1 CPU2\n 101: 12 0 5 IR-PCI-MSI 1-edge nvme0q1\n",
        "nvme0n1",
        &[101],
    );
    let r = device_irq_report("nvme0n1", Some(0), &only.delta(&later));
    assert_eq!(
        (r["total"].as_u64(), r["off_cpu"].as_bool()),
        (Some(2), Some(false))
    );
    let r = device_irq_report("zram3", Some(0), &d);
    assert_eq!(r["off_cpu"], false);
    assert!(r["note"].as_str().unwrap().contains("no queue interrupts"));
}

fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes within it; sched_setaffinity(0) pins this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
}

#[test]
fn live_virtio_blk_interrupts_are_seen() {
    let before = IrqSnapshot::read(Path::new("/")).unwrap();
    let Some(irqs) = before.device_irqs.get("vda").cloned() else {
        eprintln!("no virtio-blk vda here: nothing to test");
        return;
    };
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("data");
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&vec![7u8; 1 << 20]).unwrap();
    f.sync_all().unwrap();
    drop(f);
    pin_to(0);
    let before = IrqSnapshot::read(Path::new("/")).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .unwrap();
    let mut buf = vec![0u8; 8192];
    let off = buf.as_ptr().align_offset(4096);
    for i in 0..64u64 {
        f.seek(SeekFrom::Start((i * 4096 * 3) % (1 << 20))).unwrap();
        f.read_exact(&mut buf[off..off + 4096]).unwrap();
    }
    let after = IrqSnapshot::read(Path::new("/")).unwrap();
    let d = before.delta(&after);
    let r = device_irq_report("/dev/vda", Some(0), &d);
    assert_eq!(r["irqs"], serde_json::json!(irqs));
    assert_eq!(
        nines_host::irq::queue_irqs(Path::new("/"), "/dev/vda"),
        irqs
    );
    assert!(r["total"].as_u64().unwrap() > 0, "{r}");
    // The interrupts are served where the kernel's effective affinity says, whoever submitted.
    let eff = nines_host::parse::parse_cpulist(
        &std::fs::read_to_string(format!("/proc/irq/{}/effective_affinity_list", irqs[0])).unwrap(),
    )
    .unwrap();
    let served: Vec<usize> = r["served_by_cpu"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.parse().unwrap())
        .collect();
    assert!(
        served.iter().all(|c| eff.contains(c)),
        "served {served:?}, effective {eff:?}"
    );
    assert_eq!(r["off_cpu"], serde_json::json!(eff != vec![0]), "{r}");
}
