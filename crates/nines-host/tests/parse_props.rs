//! Every parser: arbitrary content never panics; valid content (rendered in the kernel's format)
//! parses back exactly.

use std::collections::BTreeSet;

use nines_host::parse::*;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,300}") {
        let _ = parse_cpulist(&s);
        let _ = parse_interrupts(&s);
        let _ = parse_cmdline(&s);
        let _ = parse_limits(&s);
        let _ = parse_status_caps(&s, "CapEff");
        let _ = parse_scheduler(&s);
        let _ = parse_i64(&s, "x");
        let _ = smartd_interval_s(&s);
        let _ = strip_comments(&s);
    }

    #[test]
    fn kernel_like_text_never_panics(s in "[0-9A-Za-z:,\\- \\n\\[\\]/]{0,300}") {
        let _ = parse_cpulist(&s);
        let _ = parse_interrupts(&format!("           CPU0       CPU1\n{s}"));
        let _ = parse_limits(&format!("Limit                     Soft Limit           Hard Limit           Units\n{s}"));
        let _ = parse_status_caps(&format!("CapEff:\t{s}"), "CapEff");
    }

    #[test]
    fn cpulist_round_trip(set in proptest::collection::btree_set(0usize..600, 0..80)) {
        let v: Vec<usize> = set.iter().copied().collect();
        let text = format_cpulist(&v);
        prop_assert_eq!(parse_cpulist(&text).unwrap(), v.clone());
        prop_assert_eq!(parse_cpulist(&format!("{text}\n")).unwrap(), v);
    }

    #[test]
    fn interrupts_round_trip(
        ncpu in 1usize..12,
        rows in proptest::collection::vec((0u32..5000, proptest::collection::vec(0u64..1_000_000_000_000, 12), 0usize..40, 0usize..4), 0..30),
    ) {
        let mut text = String::from("    ");
        for c in 0..ncpu {
            text.push_str(&format!("       CPU{c}"));
        }
        text.push('\n');
        let mut seen = BTreeSet::new();
        let mut want = Vec::new();
        for (irq, counts, q, n) in rows {
            if !seen.insert(irq) {
                continue;
            }
            let name = format!("nvme{n}q{q}");
            text.push_str(&format!("{irq:>4}: "));
            for c in &counts[..ncpu] {
                text.push_str(&format!("{c:>10} "));
            }
            text.push_str(&format!(" IR-PCI-MSI {}-edge      {name}\n", 524288 + q));
            want.push((irq, counts[..ncpu].to_vec(), name));
        }
        text.push_str(&format!("NMI:{}   Non-maskable interrupts\nERR:          0\n", "          7".repeat(ncpu)));
        let parsed = parse_interrupts(&text).unwrap();
        prop_assert_eq!(parsed.cpus, (0..ncpu).collect::<Vec<_>>());
        let numbered: Vec<_> = parsed.rows.iter().filter(|r| r.irq.is_some()).collect();
        prop_assert_eq!(numbered.len(), want.len());
        for (r, (irq, counts, name)) in numbered.iter().zip(&want) {
            prop_assert_eq!(r.irq, Some(*irq));
            prop_assert_eq!(&r.counts, counts);
            prop_assert_eq!(&r.actions, &vec![name.clone()]);
        }
        let nmi = parsed.rows.iter().find(|r| r.id == "NMI").unwrap();
        prop_assert_eq!(&nmi.counts, &vec![7u64; ncpu]);
    }

    #[test]
    fn limits_round_trip(rt in proptest::option::of(0u64..100), ml in proptest::option::of(0u64..1 << 40)) {
        let s = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "unlimited".into());
        let text = nines_host::testbed::limits_text(&s(rt), &s(ml));
        let l = parse_limits(&text).unwrap();
        prop_assert_eq!(l["Max realtime priority"], Limit { soft: rt, hard: rt });
        prop_assert_eq!(l["Max locked memory"], Limit { soft: ml, hard: ml });
        prop_assert_eq!(l.len(), 16);
    }

    #[test]
    fn caps_round_trip(c in any::<u64>()) {
        let text = format!("Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t{c:016x}\nCapBnd:\t000001ffffffffff\n");
        prop_assert_eq!(parse_status_caps(&text, "CapEff").unwrap(), c);
    }

    #[test]
    fn scheduler_round_trip(names in proptest::collection::btree_set("[a-z][a-z-]{0,10}", 1..5), pick in 0usize..5) {
        let names: Vec<String> = names.into_iter().collect();
        let active = &names[pick % names.len()];
        let text: Vec<String> = names.iter().map(|n| if n == active { format!("[{n}]") } else { n.clone() }).collect();
        let (a, avail) = parse_scheduler(&format!("{}\n", text.join(" ")));
        prop_assert_eq!(a.as_ref(), Some(active));
        prop_assert_eq!(avail, names);
    }

    #[test]
    fn cmdline_round_trip(params in proptest::collection::vec(("[a-z_.]{1,12}", proptest::option::of("[a-z0-9,\\-]{1,12}")), 0..20)) {
        let text: Vec<String> = params.iter().map(|(k, v)| match v { Some(v) => format!("{k}={v}"), None => k.clone() }).collect();
        let parsed = parse_cmdline(&format!("{} -- --init-arg=1\n", text.join(" ")));
        let want: Vec<(String, Option<String>)> = params.clone();
        prop_assert_eq!(parsed, want);
    }
}

proptest! {
    #[test]
    fn integer_round_trip(v in any::<i64>(), pad in "[ \t]{0,3}") {
        prop_assert_eq!(parse_i64(&format!("{pad}{v}\n"), "x").unwrap(), v);
    }

    #[test]
    fn smartd_interval_round_trip(
        n in 1u64..1_000_000,
        before in proptest::collection::vec("-[a-hj-z]|/dev/nvme[0-9]|DEVICESCAN", 0..4),
        after in proptest::collection::vec("-[a-hj-z]|standby|root", 0..4),
        form in 0usize..3,
    ) {
        let opt = match form { 0 => format!("-i {n}"), 1 => format!("--interval={n}"), _ => format!("-i{n}") };
        let line = format!("{} {opt} {}", before.join(" "), after.join(" "));
        prop_assert_eq!(smartd_interval_s(&line), Some(n));
        // The same line commented out sets nothing.
        prop_assert_eq!(smartd_interval_s(&strip_comments(&format!("# {line}"))), None);
    }
}

#[test]
fn cpulist_forms() {
    assert_eq!(
        parse_cpulist("0-3,8,10-11\n").unwrap(),
        vec![0, 1, 2, 3, 8, 10, 11]
    );
    assert_eq!(parse_cpulist("").unwrap(), Vec::<usize>::new());
    assert_eq!(parse_cpulist("(null)\n").unwrap(), Vec::<usize>::new());
    assert_eq!(
        parse_cpulist("0-15:2/4").unwrap(),
        vec![0, 1, 4, 5, 8, 9, 12, 13]
    );
    for bad in ["3-1", "a", "1,,2", "0-99999", "1-", "0-3:5/4"] {
        let e = parse_cpulist(bad).unwrap_err().to_string();
        assert!(
            e.starts_with("cpu list:") && !e.contains('\n'),
            "{bad}: {e}"
        );
    }
    assert_eq!(format_cpulist(&[4, 5, 6, 7, 0, 24, 25]), "0,4-7,24-25");
}

#[test]
fn interrupts_of_this_machines_format() {
    // Verbatim from this machine's /proc/interrupts (2-CPU VM, virtio-blk, Linux 6.x).
    let text = "           CPU0       CPU1       \n 24:          1          0  IO-APIC   5-edge      ACPI:Ged\n 35:          0          1 PCI-MSIX-0000:00:02.0   0-edge      virtio1-config\n 36:          0      16905 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0\nNMI:          0          0   Non-maskable interrupts\nLOC:      42077      45027   Local timer interrupts\nERR:          0\nMIS:          0\n";
    let i = parse_interrupts(text).unwrap();
    assert_eq!(i.cpus, vec![0, 1]);
    let r = i.row(36).unwrap();
    assert_eq!(r.counts, vec![0, 16905]);
    assert_eq!(r.actions, vec!["virtio1-req.0".to_string()]);
    assert_eq!(
        i.rows.iter().find(|r| r.id == "ERR").unwrap().counts,
        vec![0]
    );
    // Older format with the trigger glued to the chip, and shared handlers.
    let old = "           CPU0       CPU1\n 45:        10          0   PCI-MSI-edge      nvme0q1\n 16:         1          2   IO-APIC-fasteoi   ehci_hcd:usb1, nvme1q0\n";
    let i = parse_interrupts(old).unwrap();
    assert_eq!(i.row(45).unwrap().actions, vec!["nvme0q1".to_string()]);
    assert_eq!(
        i.row(16).unwrap().actions,
        vec!["ehci_hcd:usb1".to_string(), "nvme1q0".to_string()]
    );
    let e = parse_interrupts("           CPU0       CPU1\n 45:        10\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("has 1 counts for 2 CPUs"), "{e}");
    assert!(
        parse_interrupts("")
            .unwrap_err()
            .to_string()
            .contains("empty")
    );
}

#[test]
fn smartd_intervals() {
    assert_eq!(smartd_interval_s("/usr/sbin/smartd -n -i 600"), Some(600));
    assert_eq!(smartd_interval_s("smartd --interval=3600"), Some(3600));
    assert_eq!(smartd_interval_s("smartd -i120"), Some(120));
    assert_eq!(smartd_interval_s("/usr/sbin/smartd -n"), None);
    assert_eq!(
        smartd_interval_s(&strip_comments("# -i 5\nDEVICESCAN -a")),
        None
    );
}
