use super::*;
use nines_array::BufRef;
use proptest::prelude::*;
use std::collections::HashMap;

/// A `struct blk_zone_report` as the kernel writes it (native byte order).
fn encode_report(zones: &[Zone], flags: u32) -> Vec<u8> {
    let mut b = vec![0u8; REPORT_HEADER_BYTES + zones.len() * ZONE_RECORD_BYTES];
    let first = zones.first().map_or(0, |z| z.start_bytes / SECTOR_BYTES);
    b[..8].copy_from_slice(&first.to_ne_bytes());
    b[8..12].copy_from_slice(&(zones.len() as u32).to_ne_bytes());
    b[12..16].copy_from_slice(&flags.to_ne_bytes());
    for (i, z) in zones.iter().enumerate() {
        let r = &mut b[REPORT_HEADER_BYTES + i * ZONE_RECORD_BYTES..][..ZONE_RECORD_BYTES];
        r[0..8].copy_from_slice(&(z.start_bytes / SECTOR_BYTES).to_ne_bytes());
        r[8..16].copy_from_slice(&(z.len_bytes / SECTOR_BYTES).to_ne_bytes());
        r[16..24].copy_from_slice(&(z.wp_bytes / SECTOR_BYTES).to_ne_bytes());
        r[24] = match z.kind {
            ZoneType::Conventional => 1,
            ZoneType::SeqWriteRequired => 2,
            ZoneType::SeqWritePreferred => 3,
        };
        r[25] = match z.cond {
            ZoneCond::NotWp => 0,
            ZoneCond::Empty => 1,
            ZoneCond::ImplicitOpen => 2,
            ZoneCond::ExplicitOpen => 3,
            ZoneCond::Closed => 4,
            ZoneCond::ReadOnly => 0xD,
            ZoneCond::Full => 0xE,
            ZoneCond::Offline => 0xF,
        };
        r[26] = u8::from(z.non_seq);
        r[27] = u8::from(z.reset_recommended);
        r[32..40].copy_from_slice(&(z.capacity_bytes / SECTOR_BYTES).to_ne_bytes());
    }
    b
}

const MIB: u64 = 1 << 20;

fn seq_zone(i: u64, size: u64, cap: u64, cond: ZoneCond, written: u64) -> Zone {
    Zone {
        start_bytes: i * size,
        len_bytes: size,
        capacity_bytes: cap,
        wp_bytes: if cond == ZoneCond::Full {
            i * size + size
        } else {
            i * size + written
        },
        kind: ZoneType::SeqWriteRequired,
        cond,
        reset_recommended: false,
        non_seq: false,
    }
}

/// The QEMU 7.2 ZNS namespace `zoned.zone_size=64M,zoned.zone_capacity=48M,zoned.max_open=4,
/// zoned.max_active=6` of 256 MiB, as Debian's 6.1 kernel showed it in the guest (`blkzone
/// report`: start 0x0/0x20000/..., len 0x20000, cap 0x18000, wptr 0, em, SEQ_WRITE_REQUIRED;
/// queue/chunk_sectors 131072, nr_zones 4, max_open_zones 4, max_active_zones 6).
fn qemu_zns() -> (QueueLimits, Vec<Zone>) {
    let q = QueueLimits {
        model: ZonedModel::HostManaged,
        chunk_sectors: 131072,
        nr_zones: 4,
        max_open_zones: 4,
        max_active_zones: 6,
        max_sectors_kb: 512,
        max_segments: 127,
    };
    let zones = (0..4)
        .map(|i| seq_zone(i, 64 * MIB, 48 * MIB, ZoneCond::Empty, 0))
        .collect();
    (q, zones)
}

#[test]
fn the_qemu_zns_namespace_reads_as_configured() {
    let (q, zones) = qemu_zns();
    let bytes = encode_report(&zones, REPORT_FLAG_CAPACITY);
    // The captured layout: header, then 64-byte records; zone 1 starts at sector 0x20000 and
    // its capacity is 0x18000 sectors.
    assert_eq!(&bytes[80..88], &0x20000u64.to_ne_bytes());
    assert_eq!(&bytes[80 + 32..80 + 40], &0x18000u64.to_ne_bytes());
    let mut parsed = Vec::new();
    assert_eq!(parse_report(&bytes, 0, &mut parsed).unwrap(), 4);
    assert_eq!(parsed, zones);
    let g = geometry(&q, &parsed, 256 * MIB).unwrap();
    assert_eq!(
        g,
        ZoneGeometry {
            zone_size_bytes: 64 * MIB,
            zone_capacity_bytes: 48 * MIB,
            zones: 4,
            conventional_zones: 0,
            unwritable_zones: 0,
            max_open_zones: 4,
            max_active_zones: 6,
            // 127 pages of 4 KiB: below max_sectors_kb's 512 KiB.
            max_write_bytes: 127 * 4096,
        }
    );
    let d = ZonedDevice {
        geometry: g,
        zones: parsed,
    };
    assert_eq!(
        d.describe(),
        "host-managed zoned, 4 zones of 64 MiB (48 MiB writable), at most 4 open and at most 6 \
         active zones"
    );
    // Without BLK_ZONE_REP_CAPACITY (kernels before 5.9) the capacity is the length.
    let mut old = Vec::new();
    parse_report(&encode_report(&d.zones, 0), 0, &mut old).unwrap();
    assert!(old.iter().all(|z| z.capacity_bytes == 64 * MIB));
}

#[test]
fn sysfs_queue_files_are_read_with_typed_errors() {
    let files = |pairs: &[(&'static str, &str)]| -> HashMap<&'static str, String> {
        pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
    };
    let run = |m: HashMap<&'static str, String>| parse_queue(&mut |f| m.get(f).cloned());
    // A kernel without queue/zoned, and a conventional device.
    assert_eq!(run(files(&[])).unwrap().model, ZonedModel::None);
    assert_eq!(
        run(files(&[("zoned", "none\n"), ("chunk_sectors", "0\n")]))
            .unwrap()
            .model,
        ZonedModel::None
    );
    let q = run(files(&[
        ("zoned", "host-managed\n"),
        ("chunk_sectors", "131072\n"),
        ("nr_zones", "4\n"),
        ("max_open_zones", "4\n"),
        ("max_active_zones", "6\n"),
        ("max_sectors_kb", "512\n"),
        ("max_segments", "127\n"),
    ]))
    .unwrap();
    assert_eq!(q, qemu_zns().0);
    // Before 5.9 there are no open/active limits: none.
    let q = run(files(&[
        ("zoned", "host-managed"),
        ("chunk_sectors", "65536"),
        ("nr_zones", "8"),
    ]))
    .unwrap();
    assert_eq!((q.max_open_zones, q.max_active_zones), (0, 0));
    assert_eq!((q.max_sectors_kb, q.max_segments), (0, 0));
    let e = run(files(&[("zoned", "host-managed"), ("nr_zones", "8")])).unwrap_err();
    assert!(
        matches!(
            e,
            ZonedError::Missing {
                file: "chunk_sectors"
            }
        ),
        "{e}"
    );
    let e = run(files(&[("zoned", "sideways")])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "sysfs queue/zoned reads \"sideways\"; expected none, host-aware or host-managed"
    );
    let e = run(files(&[
        ("zoned", "host-managed"),
        ("chunk_sectors", "-1"),
        ("nr_zones", "8"),
    ]))
    .unwrap_err();
    assert!(e.to_string().contains("queue/chunk_sectors"), "{e}");
    let e = run(files(&[
        ("zoned", "host-managed"),
        ("chunk_sectors", "8"),
        ("nr_zones", "8"),
        ("max_open_zones", "4294967296"),
    ]))
    .unwrap_err();
    assert!(e.to_string().contains("below 2^32"), "{e}");
}

#[test]
fn read_queue_finds_a_disk_and_a_partition_under_a_root() {
    let root = tempfile::tempdir().unwrap();
    let disk = root.path().join("devices/nvme0n1");
    std::fs::create_dir_all(disk.join("queue")).unwrap();
    std::fs::create_dir_all(disk.join("nvme0n1p1")).unwrap();
    for (f, v) in [
        ("zoned", "host-managed\n"),
        ("chunk_sectors", "131072\n"),
        ("nr_zones", "4\n"),
        ("max_open_zones", "4\n"),
        ("max_active_zones", "6\n"),
        ("max_sectors_kb", "512\n"),
        ("max_segments", "127\n"),
    ] {
        std::fs::write(disk.join("queue").join(f), v).unwrap();
    }
    let blk = root.path().join("dev/block");
    std::fs::create_dir_all(&blk).unwrap();
    std::os::unix::fs::symlink(&disk, blk.join("259:0")).unwrap();
    std::os::unix::fs::symlink(disk.join("nvme0n1p1"), blk.join("259:1")).unwrap();
    assert_eq!(read_queue(root.path(), 259, 0).unwrap(), qemu_zns().0);
    assert_eq!(read_queue(root.path(), 259, 1).unwrap(), qemu_zns().0);
    // A device sysfs does not know reads as conventional (no queue/zoned).
    assert_eq!(
        read_queue(root.path(), 8, 0).unwrap().model,
        ZonedModel::None
    );
}

#[test]
fn geometries_that_do_not_fit_are_refused_in_words() {
    let (q, zones) = qemu_zns();
    let check = |q: &QueueLimits, z: &[Zone], size: u64, want: &str| {
        let e = geometry(q, z, size).unwrap_err().to_string();
        assert!(e.contains(want), "{e} (wanted {want:?})");
    };
    check(&q, &zones, 255 * MIB, "the zones end at byte");
    check(
        &QueueLimits { nr_zones: 5, ..q },
        &zones,
        256 * MIB,
        "nr_zones says 5",
    );
    check(
        &QueueLimits {
            chunk_sectors: 0,
            ..q
        },
        &zones,
        256 * MIB,
        "chunk_sectors is 0",
    );
    check(
        &QueueLimits {
            model: ZonedModel::HostAware,
            ..q
        },
        &zones,
        256 * MIB,
        "not host-managed",
    );
    let mut gap = zones.clone();
    gap[2].start_bytes += 512;
    check(&q, &gap, 256 * MIB, "zone 2 starts at byte");
    let mut caps = zones.clone();
    caps[3].capacity_bytes = 32 * MIB;
    check(&q, &caps, 256 * MIB, "different capacities");
    check(&q, &[], 0, "the report holds 0 zones");
    // A smaller last zone is allowed (its capacity is its own); conventional and offline
    // zones are counted.
    let mut runt = zones.clone();
    runt[3].len_bytes = 16 * MIB;
    runt[3].capacity_bytes = 16 * MIB;
    runt[0].kind = ZoneType::Conventional;
    runt[0].cond = ZoneCond::NotWp;
    runt[1].cond = ZoneCond::Offline;
    let g = geometry(&q, &runt, 208 * MIB).unwrap();
    assert_eq!((g.conventional_zones, g.unwritable_zones), (1, 1));
    assert_eq!(g.zone_capacity_bytes, 48 * MIB);
}

#[test]
fn zone_records_are_checked() {
    let ok = seq_zone(1, 64 * MIB, 48 * MIB, ZoneCond::ImplicitOpen, 4 * MIB);
    let parse = |z: &Zone, f: u32| {
        let b = encode_report(std::slice::from_ref(z), f);
        let mut v = Vec::new();
        parse_report(&b, 7, &mut v).map(|_| v[0])
    };
    assert_eq!(parse(&ok, 1).unwrap(), ok);
    assert_eq!(parse(&ok, 1).unwrap().written_bytes(), 4 * MIB);
    let full = seq_zone(1, 64 * MIB, 48 * MIB, ZoneCond::Full, 0);
    assert_eq!(parse(&full, 1).unwrap().written_bytes(), 48 * MIB);
    for (z, want) in [
        (
            Zone {
                wp_bytes: ok.start_bytes + 49 * MIB,
                ..ok
            },
            "outside its writable range",
        ),
        (
            Zone {
                cond: ZoneCond::Empty,
                ..ok
            },
            "empty, but its write pointer",
        ),
        (
            Zone {
                capacity_bytes: 65 * MIB,
                ..ok
            },
            "exceeds its length",
        ),
        (
            Zone {
                kind: ZoneType::Conventional,
                ..ok
            },
            "a conventional zone in condition",
        ),
    ] {
        let e = parse(&z, 1).unwrap_err().to_string();
        assert!(
            e.starts_with("zone 7 of the report: ") && e.contains(want),
            "{e}"
        );
    }
    let mut b = encode_report(std::slice::from_ref(&ok), 1);
    b[16 + 24] = 9;
    let mut v = Vec::new();
    assert!(
        parse_report(&b, 0, &mut v)
            .unwrap_err()
            .to_string()
            .contains("unknown type 9")
    );
    b[16 + 24] = 2;
    b[16 + 25] = 7;
    assert!(
        parse_report(&b, 0, &mut v)
            .unwrap_err()
            .to_string()
            .contains("unknown condition 0x7")
    );
    // A header that claims more zones than the buffer holds.
    b[8..12].copy_from_slice(&2u32.to_ne_bytes());
    assert!(matches!(
        parse_report(&b, 0, &mut v),
        Err(ZonedError::ReportCount {
            claimed: 2,
            room: 1
        })
    ));
    assert!(matches!(
        parse_report(&b[..10], 0, &mut v),
        Err(ZonedError::ReportShort { len: 10, .. })
    ));
}

fn arb_zone() -> impl Strategy<Value = Zone> {
    (
        0u64..1 << 20,
        1u64..1 << 16,
        0u32..8,
        0u32..3,
        any::<bool>(),
        any::<bool>(),
        0u64..1 << 16,
        0u64..1 << 16,
    )
        .prop_map(|(start, len, cond, kind, r, ns, cap, wp)| {
            let cond = [
                ZoneCond::NotWp,
                ZoneCond::Empty,
                ZoneCond::ImplicitOpen,
                ZoneCond::ExplicitOpen,
                ZoneCond::Closed,
                ZoneCond::ReadOnly,
                ZoneCond::Full,
                ZoneCond::Offline,
            ][cond as usize];
            let cap = cap % len + 1;
            let tracked = matches!(
                cond,
                ZoneCond::Empty
                    | ZoneCond::ImplicitOpen
                    | ZoneCond::ExplicitOpen
                    | ZoneCond::Closed
            );
            let kind = if tracked {
                [ZoneType::SeqWriteRequired, ZoneType::SeqWritePreferred][kind as usize % 2]
            } else {
                [
                    ZoneType::Conventional,
                    ZoneType::SeqWriteRequired,
                    ZoneType::SeqWritePreferred,
                ][kind as usize]
            };
            let wp = match cond {
                ZoneCond::Empty => start,
                _ if tracked => start + wp % (cap + 1),
                _ => wp,
            };
            Zone {
                start_bytes: start * SECTOR_BYTES,
                len_bytes: len * SECTOR_BYTES,
                capacity_bytes: cap * SECTOR_BYTES,
                wp_bytes: wp * SECTOR_BYTES,
                kind,
                cond,
                reset_recommended: r,
                non_seq: ns,
            }
        })
}

proptest! {
    #[test]
    fn any_text_is_a_model_or_a_typed_error(text in "\\PC{0,80}") {
        match parse_model(&text) {
            Ok(_) => prop_assert!(
                ["none", "host-aware", "host-managed"].contains(&text.trim())
            ),
            Err(e) => {
                let m = e.to_string();
                prop_assert!(m.starts_with("sysfs queue/zoned reads "));
                prop_assert!(m.ends_with("expected none, host-aware or host-managed"));
            }
        }
    }

    #[test]
    fn any_text_is_a_count_or_a_typed_error(text in "[ 0-9a-z+\\-\\n]{0,30}") {
        match parse_count("nr_zones", &text) {
            Ok(n) => prop_assert_eq!(n, text.trim().parse::<u64>().unwrap()),
            Err(e) => prop_assert!(e.to_string().starts_with("sysfs queue/nr_zones reads ")),
        }
    }

    #[test]
    fn any_queue_files_give_limits_or_a_typed_error(
        vals in proptest::collection::vec(proptest::option::of("[a-z0-9\\- \\n]{0,24}"), 7),
    ) {
        let names = ["zoned", "chunk_sectors", "nr_zones", "max_open_zones", "max_active_zones",
            "max_sectors_kb", "max_segments"];
        let m: HashMap<&'static str, String> = names
            .iter()
            .zip(&vals)
            .filter_map(|(n, v)| v.clone().map(|v| (*n, v)))
            .collect();
        let _ = parse_queue(&mut |f| m.get(f).cloned());
    }

    /// Valid records round-trip through the kernel's layout.
    #[test]
    fn zone_records_round_trip(zones in proptest::collection::vec(arb_zone(), 0..20)) {
        let bytes = encode_report(&zones, REPORT_FLAG_CAPACITY);
        let mut back = Vec::new();
        prop_assert_eq!(parse_report(&bytes, 0, &mut back).unwrap() as usize, zones.len());
        prop_assert_eq!(back, zones);
    }

    /// Any bytes: zones, or a typed error; never a panic.
    #[test]
    fn any_report_bytes_parse_or_fail_in_words(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        nr in 0u32..12,
        flags in 0u32..4,
    ) {
        let mut b = bytes;
        if b.len() >= 16 {
            b[8..12].copy_from_slice(&nr.to_ne_bytes());
            b[12..16].copy_from_slice(&flags.to_ne_bytes());
        }
        let mut zones = Vec::new();
        match parse_report(&b, 0, &mut zones) {
            Ok(n) => {
                prop_assert_eq!(n as usize, zones.len());
                for z in &zones {
                    prop_assert!(z.capacity_bytes <= z.len_bytes && z.len_bytes > 0);
                    prop_assert!(z.written_bytes() <= z.capacity_bytes);
                }
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    /// Geometry over any (parsed) zones and limits: a geometry that holds together, or words.
    #[test]
    fn any_zones_give_a_consistent_geometry_or_words(
        zones in proptest::collection::vec(arb_zone(), 0..12),
        chunk in 0u64..1 << 16,
        nr in 0u64..14,
        size in 0u64..1 << 30,
    ) {
        let q = QueueLimits {
            model: ZonedModel::HostManaged,
            chunk_sectors: chunk,
            nr_zones: nr,
            max_open_zones: 0,
            max_active_zones: 0,
            max_sectors_kb: 0,
            max_segments: 0,
        };
        if let Ok(g) = geometry(&q, &zones, size) {
            prop_assert!(g.zone_capacity_bytes <= g.zone_size_bytes);
            prop_assert_eq!(g.zones, zones.len() as u64);
        }
    }
}

#[test]
fn audit_counts_zones_and_names_what_a_volume_cannot_leave() {
    let zs = 64 * MIB;
    let cap = 48 * MIB;
    let mut zones: Vec<Zone> = (0..6)
        .map(|i| seq_zone(i, zs, cap, ZoneCond::Empty, 0))
        .collect();
    zones[0] = seq_zone(0, zs, cap, ZoneCond::Full, 0);
    zones[1] = seq_zone(1, zs, cap, ZoneCond::ImplicitOpen, 8192);
    zones[2] = seq_zone(2, zs, cap, ZoneCond::Closed, 4096);
    let a = audit(&zones, 5, 4096);
    assert_eq!(
        (a.zones, a.empty, a.open, a.closed, a.full),
        (6, 3, 1, 1, 1)
    );
    assert_eq!(a.written_bytes, cap + 8192 + 4096);
    assert_eq!((a.write_pointer_errors, a.other_errors), (0, 0));
    assert!(a.problems.is_empty());
    zones[1] = seq_zone(1, zs, cap, ZoneCond::ImplicitOpen, 4608);
    zones[3].cond = ZoneCond::Offline;
    zones[5] = seq_zone(5, zs, cap, ZoneCond::Closed, 4096);
    let a = audit(&zones, 5, 4096);
    assert_eq!((a.write_pointer_errors, a.other_errors), (1, 2));
    assert_eq!(
        a.problems,
        [
            "zone 1 (byte 67108864): its write pointer is 4608 bytes in, not a multiple of the \
             4096-byte unit",
            "zone 3 (byte 201326592): offline",
            "zone 5 (byte 335544320): holds 4096 bytes but the volume uses zones 0..5 only",
        ]
    );
}

// ---- ZoneSeq ----

fn geo(zones: u64, size: u64, cap: u64) -> (ZoneGeometry, Vec<Zone>) {
    let z: Vec<Zone> = (0..zones)
        .map(|i| seq_zone(i, size, cap, ZoneCond::Empty, 0))
        .collect();
    let q = QueueLimits {
        model: ZonedModel::HostManaged,
        chunk_sectors: size / SECTOR_BYTES,
        nr_zones: zones,
        max_open_zones: 0,
        max_active_zones: 0,
        max_sectors_kb: 0,
        max_segments: 0,
    };
    (geometry(&q, &z, zones * size).unwrap(), z)
}

fn cmd(id: u32, op: CmdOp, offset_bytes: u64, len_bytes: u32) -> MemberCmd {
    MemberCmd {
        id,
        member: 0,
        op,
        offset_bytes,
        len_bytes,
        buf: BufRef::None,
        fua: false,
    }
}

#[test]
fn writes_go_at_the_write_pointer_one_per_zone_and_appends_say_where() {
    let (g, z) = geo(4, 1 << 20, 3 << 18);
    let mut s = ZoneSeq::new(&g, &z, 16);
    // A write at zone 1's pointer goes; the next to zone 1 waits; zone 2's goes.
    let a = s.submit(&cmd(0, CmdOp::Write, 1 << 20, 4096)).unwrap();
    assert_eq!(
        a,
        Dispatch::Write {
            zone: 1,
            cmd: cmd(0, CmdOp::Write, 1 << 20, 4096),
            offset_bytes: 1 << 20
        }
    );
    assert_eq!(s.submit(&cmd(1, CmdOp::ZoneAppend, 1 << 20, 8192)), None);
    assert_eq!(
        s.submit(&cmd(2, CmdOp::Write, (1 << 20) + 4096, 4096)),
        None
    );
    assert!(matches!(
        s.submit(&cmd(3, CmdOp::Write, 2 << 20, 4096)),
        Some(Dispatch::Write { zone: 2, .. })
    ));
    assert_eq!(s.next(1), None, "zone 1 is busy");
    // A read completing is not ours.
    assert_eq!(s.complete(9, CmdResult::Ok), None);
    assert_eq!(s.complete(0, CmdResult::Ok), Some((CmdResult::Ok, 1)));
    // The append goes at the pointer (4096), then the write it moved past is off it.
    assert!(matches!(
        s.next(1),
        Some(Dispatch::Write {
            offset_bytes,
            ..
        }) if offset_bytes == (1 << 20) + 4096
    ));
    assert_eq!(
        s.complete(1, CmdResult::Ok),
        Some((
            CmdResult::Appended {
                offset_bytes: (1 << 20) + 4096
            },
            1
        ))
    );
    assert_eq!(
        s.next(1),
        Some(Dispatch::Answer {
            zone: 1,
            id: 2,
            result: CmdResult::Err(libc::EINVAL)
        })
    );
    assert_eq!(s.next(1), None);
    assert_eq!(s.write_pointer(1), Some(12288));
    // Fill zone 2 to its capacity; the next write finds it full.
    assert!(s.complete(3, CmdResult::Ok).is_some());
    let cap = 3u64 << 18;
    let rest = (cap - 4096) as u32;
    assert!(matches!(
        s.submit(&cmd(4, CmdOp::Write, (2 << 20) + 4096, rest)),
        Some(Dispatch::Write { .. })
    ));
    s.complete(4, CmdResult::Ok).unwrap();
    assert_eq!(
        s.submit(&cmd(5, CmdOp::ZoneAppend, 2 << 20, 4096)),
        Some(Dispatch::Answer {
            zone: 2,
            id: 5,
            result: CmdResult::Err(libc::ENOSPC)
        })
    );
    // Past the capacity (not full yet), across the zone, off the zone start: EINVAL.
    for c in [
        cmd(6, CmdOp::Write, 12288 + (1 << 20), cap as u32),
        cmd(6, CmdOp::ZoneAppend, (1 << 20) + 512, 512),
        cmd(6, CmdOp::ZoneReset, 1 << 20, 4096),
        cmd(6, CmdOp::ZoneReset, 3 << 20, 2 << 20),
        cmd(6, CmdOp::ZoneFinish, 4096, 0),
        cmd(6, CmdOp::Write, 64 << 20, 4096),
    ] {
        assert!(
            matches!(
                s.submit(&c),
                Some(Dispatch::Answer {
                    result: CmdResult::Err(libc::EINVAL),
                    ..
                })
            ),
            "{c:?}"
        );
    }
    // Reset zones 1 and 2 (one command), finish zone 3.
    assert!(matches!(
        s.submit(&cmd(7, CmdOp::ZoneReset, 1 << 20, 2 << 20)),
        Some(Dispatch::Manage { zone: 1, .. })
    ));
    s.complete(7, CmdResult::Ok).unwrap();
    assert_eq!((s.write_pointer(1), s.write_pointer(2)), (Some(0), Some(0)));
    assert!(matches!(
        s.submit(&cmd(8, CmdOp::ZoneFinish, 3 << 20, 0)),
        Some(Dispatch::Manage { zone: 3, .. })
    ));
    s.complete(8, CmdResult::Ok).unwrap();
    assert_eq!(s.write_pointer(3), Some(cap));
    let st = s.stats();
    assert_eq!(
        (st.writes, st.appends, st.resets, st.finishes),
        (3, 1, 1, 1)
    );
    assert_eq!(st.write_pointer_errors, 8);
    assert_eq!((st.waits, st.queued_max), (2, 2));
    assert_eq!(s.queued(), 0);
}

#[test]
fn writes_the_kernel_would_split_are_refused() {
    let (mut g, z) = geo(2, 1 << 20, 1 << 20);
    g.max_write_bytes = 127 * 4096;
    let mut s = ZoneSeq::new(&g, &z, 4);
    assert_eq!(
        s.submit(&cmd(0, CmdOp::Write, 0, 128 * 4096)),
        Some(Dispatch::Answer {
            zone: 0,
            id: 0,
            result: CmdResult::Err(libc::EINVAL)
        })
    );
    assert!(matches!(
        s.submit(&cmd(1, CmdOp::ZoneAppend, 0, 127 * 4096)),
        Some(Dispatch::Write { .. })
    ));
    assert_eq!(
        (s.stats().oversized, s.stats().write_pointer_errors),
        (1, 0)
    );
}

#[test]
fn a_device_error_makes_the_zone_refused_until_learned_again_or_reset() {
    let (g, z) = geo(2, 1 << 20, 1 << 20);
    let mut s = ZoneSeq::new(&g, &z, 8);
    s.submit(&cmd(0, CmdOp::Write, 0, 4096)).unwrap();
    assert_eq!(s.submit(&cmd(1, CmdOp::Write, 4096, 4096)), None);
    assert_eq!(
        s.complete(0, CmdResult::Err(libc::EIO)),
        Some((CmdResult::Err(libc::EIO), 0))
    );
    assert!(s.stale(0));
    assert_eq!(
        s.next(0),
        Some(Dispatch::Answer {
            zone: 0,
            id: 1,
            result: CmdResult::Err(libc::EIO)
        })
    );
    // The device says 4096 bytes got there after all.
    let found = seq_zone(0, 1 << 20, 1 << 20, ZoneCond::ImplicitOpen, 4096);
    s.refresh(0, Some(&found));
    assert!(!s.stale(0));
    assert!(matches!(
        s.submit(&cmd(2, CmdOp::Write, 4096, 4096)),
        Some(Dispatch::Write { .. })
    ));
    s.complete(2, CmdResult::Ok).unwrap();
    assert_eq!(s.stats().device_errors, 1);
    // A zone learned as unknown stays refused until a reset.
    s.submit(&cmd(3, CmdOp::Write, 8192, 4096)).unwrap();
    s.complete(3, CmdResult::Err(libc::EIO)).unwrap();
    s.refresh(0, None);
    assert!(s.stale(0));
    s.submit(&cmd(4, CmdOp::ZoneReset, 0, 1 << 20)).unwrap();
    s.complete(4, CmdResult::Ok).unwrap();
    assert!(!s.stale(0));
    assert!(matches!(
        s.submit(&cmd(5, CmdOp::Write, 0, 4096)),
        Some(Dispatch::Write { .. })
    ));
}

/// A device that executes writes in the order it *completes* them (io-wq workers and several
/// hardware queues reorder what was submitted) and refuses any write off its write pointer, as
/// a ZNS namespace does.
struct ReorderingDevice {
    zone_bytes: u64,
    cap_bytes: u64,
    wp: Vec<u64>,
    data: HashMap<u64, u32>,
    wp_errors: u64,
}

impl ReorderingDevice {
    fn write(&mut self, offset: u64, len: u64, tag: u32) -> bool {
        let z = (offset / self.zone_bytes) as usize;
        let rel = offset % self.zone_bytes;
        if rel != self.wp[z] || rel + len > self.cap_bytes {
            self.wp_errors += 1;
            return false;
        }
        self.wp[z] += len;
        for u in 0..len / 4096 {
            self.data.insert(offset + u * 4096, tag);
        }
        true
    }
}

#[derive(Clone, Copy, Debug)]
enum Step {
    /// A front-end write of `units` to zone `zone % zones` (at the volume's own placement).
    Write { zone: u32, units: u32 },
    /// A GC move's append of `units` to zone `zone % zones`.
    Append { zone: u32, units: u32 },
    /// Complete the in-flight command `pick % inflight`.
    Complete { pick: u32 },
}

fn arb_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u32..4, 1u32..4).prop_map(|(zone, units)| Step::Write { zone, units }),
        (0u32..4, 1u32..4).prop_map(|(zone, units)| Step::Append { zone, units }),
        any::<u32>().prop_map(|pick| Step::Complete { pick }),
        any::<u32>().prop_map(|pick| Step::Complete { pick }),
    ]
}

/// Runs `steps` against a reordering device, through the sequencer (`seq`) or straight to
/// the device; returns the device's write-pointer errors, the appends' answers and what the
/// volume would read back.
/// What [`run_steps`] saw: the device's write-pointer errors, each append's (id, offset), the
/// device's data (4 KiB block offset -> the id that wrote it), and writes the device failed.
type StepsOutcome = (u64, Vec<(u32, u64)>, HashMap<u64, u32>, u64);

fn run_steps(steps: &[Step], seq: bool) -> StepsOutcome {
    const ZONE: u64 = 64 * 4096;
    const CMDS: u32 = 64;
    let (g, z) = geo(4, ZONE, ZONE);
    let mut s = ZoneSeq::new(&g, &z, CMDS);
    let mut dev = ReorderingDevice {
        zone_bytes: ZONE,
        cap_bytes: ZONE,
        wp: vec![0; 4],
        data: HashMap::new(),
        wp_errors: 0,
    };
    // The volume's own placement of front-end writes: where the next write of each zone goes.
    let mut placed = [0u64; 4];
    let mut free: Vec<u32> = (0..CMDS).rev().collect();
    // Dispatched to the device, in flight: (id, offset, len, append).
    let mut inflight: Vec<(u32, u64, u64)> = Vec::new();
    let mut appended = Vec::new();
    let mut answers_err = 0u64;
    let mut reserved = [0u64; 4];
    let out = |d: Dispatch, inflight: &mut Vec<(u32, u64, u64)>, free: &mut Vec<u32>| match d {
        Dispatch::Write {
            cmd, offset_bytes, ..
        } => inflight.push((cmd.id, offset_bytes, u64::from(cmd.len_bytes))),
        Dispatch::Answer { id, result, .. } => {
            assert!(result.is_ok());
            free.push(id);
        }
        Dispatch::Manage { .. } => unreachable!("no resets here"),
    };
    let mut ops: HashMap<u32, CmdOp> = HashMap::new();
    for st in steps {
        match *st {
            Step::Write { zone, units } | Step::Append { zone, units } => {
                let zi = (zone % 4) as usize;
                let len = u64::from(units) * 4096;
                // The volume never asks for more than a zone holds (it reserves first).
                if reserved[zi] + len > ZONE || free.is_empty() {
                    continue;
                }
                reserved[zi] += len;
                let id = free.pop().unwrap();
                let (op, off) = if matches!(st, Step::Write { .. }) {
                    let off = zi as u64 * ZONE + placed[zi];
                    placed[zi] += len;
                    (CmdOp::Write, off)
                } else {
                    // Appends take their place in the zone too (the volume accounts for them).
                    placed[zi] += len;
                    (CmdOp::ZoneAppend, zi as u64 * ZONE)
                };
                ops.insert(id, op);
                let c = cmd(id, op, off, len as u32);
                if seq {
                    if let Some(d) = s.submit(&c) {
                        out(d, &mut inflight, &mut free);
                    }
                } else {
                    // Without ordering: an append is a write where the host thinks the
                    // pointer will be when it is sent.
                    let at = if op == CmdOp::ZoneAppend {
                        off + placed[zi] - len
                    } else {
                        off
                    };
                    inflight.push((id, at, len));
                }
            }
            Step::Complete { pick } => {
                if inflight.is_empty() {
                    continue;
                }
                let (id, off, len) = inflight.swap_remove(pick as usize % inflight.len());
                let ok = dev.write(off, len, id);
                if !ok {
                    answers_err += 1;
                }
                if seq {
                    let r = if ok {
                        CmdResult::Ok
                    } else {
                        CmdResult::Err(libc::EIO)
                    };
                    let (res, zone) = s.complete(id, r).unwrap();
                    if let CmdResult::Appended { offset_bytes } = res {
                        appended.push((id, offset_bytes));
                    }
                    while let Some(d) = s.next(zone) {
                        out(d, &mut inflight, &mut free);
                    }
                }
                free.push(id);
                // At most one command in flight per zone, through the sequencer.
                if seq {
                    let mut per_zone = [0; 4];
                    for (_, o, _) in &inflight {
                        per_zone[(o / ZONE) as usize] += 1;
                    }
                    assert!(per_zone.iter().all(|&n| n <= 1), "{per_zone:?}");
                }
            }
        }
        assert!(s.queued() <= u64::from(CMDS));
    }
    // Drain.
    while let Some((id, off, len)) = inflight.pop() {
        let ok = dev.write(off, len, id);
        if !ok {
            answers_err += 1;
        }
        if seq {
            let (res, zone) = s
                .complete(
                    id,
                    if ok {
                        CmdResult::Ok
                    } else {
                        CmdResult::Err(libc::EIO)
                    },
                )
                .unwrap();
            if let CmdResult::Appended { offset_bytes } = res {
                appended.push((id, offset_bytes));
            }
            while let Some(d) = s.next(zone) {
                out(d, &mut inflight, &mut free);
            }
        }
    }
    let _ = ops;
    (dev.wp_errors, appended, dev.data, answers_err)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Writes and appends to four zones, completed by a device in random order: through the
    /// sequencer the device never sees a write off its write pointer, every append says where
    /// its bytes are (and they are there), and nothing is refused.
    #[test]
    fn reordered_completions_never_put_a_write_off_the_pointer(
        steps in proptest::collection::vec(arb_step(), 1..400),
    ) {
        let (wp_errors, appended, data, errs) = run_steps(&steps, true);
        prop_assert_eq!(wp_errors, 0);
        prop_assert_eq!(errs, 0);
        for (id, off) in appended {
            prop_assert_eq!(data.get(&off), Some(&id));
        }
    }
}

/// The same harness without the sequencer: reordering puts writes off the pointer (the test
/// above would see it).
#[test]
fn without_the_sequencer_the_reordering_device_refuses_writes() {
    let mut steps = Vec::new();
    for _ in 0..50 {
        steps.push(Step::Write { zone: 0, units: 1 });
        steps.push(Step::Write { zone: 0, units: 1 });
        steps.push(Step::Complete { pick: 1 });
        steps.push(Step::Complete { pick: 0 });
    }
    let (wp_errors, ..) = run_steps(&steps, false);
    assert!(wp_errors > 0);
    let (wp_errors, ..) = run_steps(&steps, true);
    assert_eq!(wp_errors, 0);
}
