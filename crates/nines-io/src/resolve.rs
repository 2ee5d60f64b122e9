//! What a layout learns from its members before it is built, for every driver of real members
//! (`nines profile` and `nines serve`; the simulator asks its device models the same two
//! questions): the zone geometry of zoned members, `emu:` models and host-managed zoned block
//! devices alike ([`LayoutSpec::resolve_zones`]), and the FDP reclaim unit handles of its data
//! members ([`LayoutSpec::resolve_placement`]). Files have neither; block devices have no
//! handles here.

use crate::emu::EmuInfo;
use crate::target::Target;
use crate::zoned::ZoneCond;
use crate::zoned::ZonedDevice;
use nines_array::LayoutSpec;
use nines_core::zbd::ZbdOptions;

/// What one member says of itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct Member<'a> {
    /// As named on the command line.
    pub name: &'a str,
    /// An emulated device's description.
    pub emu: Option<&'a EmuInfo>,
    /// A host-managed zoned block device's zones.
    pub zoned: Option<&'a ZonedDevice>,
    /// Opened through the page cache (`--buffered`).
    pub buffered: bool,
}

impl<'a> Member<'a> {
    pub fn of(t: &'a Target) -> Member<'a> {
        Member {
            name: t.name(),
            emu: t.emu().map(|e| e.info()),
            zoned: t.zoned().map(|z| &**z),
            buffered: t.options().buffered,
        }
    }

    /// (zone size, zone capacity) of a zoned member.
    fn zone(&self) -> Option<(u64, u64)> {
        self.emu.and_then(|e| e.zone).or_else(|| {
            self.zoned
                .map(|z| (z.geometry.zone_size_bytes, z.geometry.zone_capacity_bytes))
        })
    }
}

/// [`from_members`] over opened targets.
pub fn from_targets(
    layout: &mut LayoutSpec,
    targets: &[&Target],
    writes: bool,
) -> Result<(), String> {
    let members: Vec<Member> = targets.iter().map(|t| Member::of(t)).collect();
    from_members(layout, &members, writes)
}

/// [`from_members_zbd`] over opened targets.
pub fn from_targets_zbd(
    layout: &mut LayoutSpec,
    targets: &[&Target],
    writes: bool,
    zbd: Option<&ZbdOptions>,
) -> Result<(), String> {
    let members: Vec<Member> = targets.iter().map(|t| Member::of(t)).collect();
    from_members_zbd(layout, &members, writes, zbd)
}

/// [`from_members`] for a run with fio's `zonemode=zbd` (`zbd`: `--zonemode zbd`): each target
/// on its own (`--layout independent`) and every one a host-managed zoned block device, of the
/// zone size and capacity the options name (if they do), with no more open zones asked for than
/// it allows; then writes to them run (nines_array::zbd places them at write pointers).
pub fn from_members_zbd(
    layout: &mut LayoutSpec,
    members: &[Member],
    writes: bool,
    zbd: Option<&ZbdOptions>,
) -> Result<(), String> {
    let Some(z) = zbd else {
        return from_members(layout, members, writes);
    };
    if !matches!(layout, LayoutSpec::Independent) {
        return Err(format!(
            "--zonemode zbd writes each zoned target on its own (--layout independent); \
             --layout {} places its own writes (serial writes zoned members itself): drop \
             --zonemode",
            layout.name()
        ));
    }
    for m in members {
        let Some(dev) = m.zoned else {
            return Err(format!(
                "--zonemode zbd: {} is not a host-managed zoned block device (zones emulated over \
                 a conventional target or file, fio's zonesize= there, are not built); give a \
                 zoned device or drop --zonemode",
                m.name
            ));
        };
        let g = &dev.geometry;
        let check = |what: &str, given: Option<u64>, has: u64| match given {
            Some(v) if v != has => Err(format!(
                "--zonemode zbd: {what} {} but {} has zones of {} ({} writable); give {} or leave \
                 it out (the device's is used)",
                crate::zoned::size_arg(v),
                m.name,
                crate::zoned::size_text(g.zone_size_bytes),
                crate::zoned::size_text(g.zone_capacity_bytes),
                crate::zoned::size_arg(has)
            )),
            _ => Ok(()),
        };
        check("zonesize", z.zone_size_bytes, g.zone_size_bytes)?;
        check("zonecapacity", z.zone_capacity_bytes, g.zone_capacity_bytes)?;
        if let Some(n) = z.max_open_zones
            && g.max_open_zones > 0
            && n > g.max_open_zones
        {
            return Err(format!(
                "--max-open-zones {n}: {} allows at most {} open zones (max_open_zones); give {} \
                 or less, or leave it out (the device's limit is used)",
                m.name, g.max_open_zones, g.max_open_zones
            ));
        }
    }
    // The independent layout's rules for reads and writes alike, with writes allowed.
    let mut base = LayoutSpec::Independent;
    from_members(&mut base, members, false)?;
    if writes {
        block_write_rules(members, true)?;
    }
    Ok(())
}

/// Zones a run with `zbd` keeps open at once on `dev` at most: `max_open_zones` when given,
/// else the device's open limit, else its active limit (0: no limit), never above the active
/// limit.
pub fn zbd_open_zones(dev: &ZonedDevice, zbd: &ZbdOptions) -> u32 {
    let g = &dev.geometry;
    let limits = [
        zbd.max_open_zones.unwrap_or(g.max_open_zones),
        g.max_active_zones,
    ];
    limits.into_iter().filter(|&n| n > 0).min().unwrap_or(0)
}

/// Fills in `layout`'s zone geometry and placement handles from `members` (in layout order),
/// or says in one line why this layout cannot run over them; `writes`: the run writes them.
///
/// Zoned members: the serial layout is told their geometry, as the simulator does
/// (docs/arch-zoned.md); a mix of zoned and conventional members, or zoned members of other
/// geometries, is refused. Over a host-managed zoned block device any other layout is refused
/// when it would write (random and in-place writes fail there I/O by I/O; the message says
/// what to use instead) and runs when it only reads; zoned `emu:` models refuse it either way,
/// as they always did.
pub fn from_members(
    layout: &mut LayoutSpec,
    members: &[Member],
    writes: bool,
) -> Result<(), String> {
    let zones: Vec<Option<(u64, u64)>> = members.iter().map(Member::zone).collect();
    if let Some(first) = members.iter().position(|m| m.zoned.is_some()) {
        resolve_block_zones(layout, members, &zones, first, writes)?;
    } else if let Some(&Some(zone)) = zones.iter().find(|z| z.is_some()) {
        if zones.iter().any(|z| *z != Some(zone)) {
            return Err(
                "zoned emu: targets must all be of one zoned description; give every target the same"
                    .into(),
            );
        }
        layout
            .resolve_zones(Some(zone))
            .map_err(|e| format!("the emu: targets are {e}"))?;
    }
    // Placement tags the data members' writes (a write buffer device, the layout's extra
    // member, takes none).
    let data = members
        .len()
        .saturating_sub(layout.extra_members() as usize);
    let handles: Vec<u32> = members[..data]
        .iter()
        .map(|m| m.emu.map_or(0, |e| e.fdp_handles))
        .collect();
    layout
        .resolve_placement(&handles)
        .map_err(|e| e.to_string())
}

/// Zoned block devices among the members (`first` is one): the rules above.
fn resolve_block_zones(
    layout: &mut LayoutSpec,
    members: &[Member],
    zones: &[Option<(u64, u64)>],
    first: usize,
    writes: bool,
) -> Result<(), String> {
    let dev = members[first].zoned.expect("a zoned member");
    let name = members[first].name;
    let zone = zones[first].expect("zoned");
    let what = format!("{name} is {}", dev.describe());
    if let Some(k) = zones.iter().position(|z| *z != Some(zone)) {
        let other = match (zones[k], members[k].emu.is_some()) {
            (None, _) => "a conventional device".to_string(),
            (Some(_), true) => "an emulated zoned device".to_string(),
            (Some((s, c)), false) => format!(
                "zoned with {} zones ({} writable)",
                crate::zoned::size_text(s),
                crate::zoned::size_text(c)
            ),
        };
        return Err(format!(
            "{what} but {} is {other}: a volume's zoned members must all have one zone size \
             and capacity; give members alike",
            members[k].name
        ));
    }
    let base_in_place = matches!(layout, LayoutSpec::Independent);
    if base_in_place && !writes {
        // Reads go anywhere below the write pointers (and read zeros above them).
        return Ok(());
    }
    block_write_rules(members, writes)?;
    if base_in_place {
        return Err(format!(
            "{what}: writes there must go at each zone's write pointer, which random and \
             in-place writes do not; read it (--rw read or randread), write it as fio's \
             zonemode=zbd does with --zonemode zbd (each write at a zone's write pointer, full \
             zones reset), or write it through --layout serial --segment {} (one zone's \
             capacity per member of a column) over zoned members",
            crate::zoned::size_arg(zone.1)
        ));
    }
    layout.resolve_zones(Some(zone)).map_err(|e| {
        let e = e.to_string();
        let rest = e.strip_prefix("zoned ").unwrap_or(&e);
        format!("{what} {rest}")
    })?;
    if let LayoutSpec::Serial(s) = layout.base() {
        serial_zone_limits(s, members, writes)?;
    }
    // A member command is at most a stripe unit (xGC's moves stay inside one): it must reach
    // the device as one request, or its pieces may land out of order in the zone.
    let max = members
        .iter()
        .filter_map(|m| m.zoned.map(|z| (m.name, z.geometry.max_write_bytes)))
        .filter(|&(_, b)| b > 0)
        .min_by_key(|&(_, b)| b);
    if let (Some((mname, max)), LayoutSpec::Serial(s)) = (max, layout.base())
        && s.stripe_bytes > max
    {
        let fit = 1u64 << (63 - max.leading_zeros());
        return Err(format!(
            "--stripe {}: {mname} takes writes of at most {} as one request (queue/max_sectors_kb \
             and max_segments), and a larger one is split into requests nothing keeps in order in \
             a zone; use --stripe {} or less",
            crate::zoned::size_arg(s.stripe_bytes),
            crate::zoned::size_text(max),
            crate::zoned::size_arg(fit)
        ));
    }
    Ok(())
}

/// Open zones serial keeps on each member at once: a column's one open segment (the
/// front-end's, or xGC's on a back-end), and the next one while the last writes of the one
/// before complete (docs/arch-zoned.md, "Zone limits").
pub const SERIAL_OPEN_ZONES: u32 = 2;

/// Whether the members allow the open and active zones serial needs (`writes`: partly written
/// zones past the volume's, which it never resets, hold some of them): one line naming the
/// numbers and what to change, before any I/O.
fn serial_zone_limits(
    s: &nines_array::SerialSpec,
    members: &[Member],
    writes: bool,
) -> Result<(), String> {
    let columns = members.len() as u32 / s.column_members.max(1);
    for m in members {
        let Some(dev) = m.zoned else { continue };
        let g = &dev.geometry;
        let member_bytes = dev.zones.last().map_or(0, |z| z.start_bytes + z.len_bytes);
        let used = s.segments_per_column(member_bytes, columns);
        let (mut open_past, mut active_past) = (0u32, 0u32);
        if writes {
            for z in dev.zones.iter().skip(used as usize) {
                match z.cond {
                    ZoneCond::ImplicitOpen | ZoneCond::ExplicitOpen => {
                        open_past += 1;
                        active_past += 1;
                    }
                    ZoneCond::Closed => active_past += 1,
                    _ => {}
                }
            }
        }
        let need_open = SERIAL_OPEN_ZONES + open_past;
        let need_active = SERIAL_OPEN_ZONES + active_past;
        let short_open = g.max_open_zones > 0 && need_open > g.max_open_zones;
        let short_active = g.max_active_zones > 0 && need_active > g.max_active_zones;
        if !(short_open || short_active) {
            continue;
        }
        let limit = |n: u32| {
            if n == 0 {
                "no limit on".to_string()
            } else {
                format!("at most {n}")
            }
        };
        let past = if active_past > 0 {
            format!(
                ", and {active_past} zones past the volume's {used} (zone {used} on) are open or \
                 closed ({open_past} open) and hold theirs"
            )
        } else {
            String::new()
        };
        let fix = if active_past > 0 {
            format!(
                "reset the zones from {used} on (blkzone reset -o {} {}) or give devices that \
                 allow more",
                used * g.zone_size_bytes / crate::zoned::SECTOR_BYTES,
                m.name
            )
        } else {
            format!(
                "give zoned devices that allow at least {SERIAL_OPEN_ZONES} open and \
                 {SERIAL_OPEN_ZONES} active zones (max_open_zones, max_active_zones)"
            )
        };
        return Err(format!(
            "--layout serial needs {SERIAL_OPEN_ZONES} open and {SERIAL_OPEN_ZONES} active zones \
             on each member (a column's open segment, and the next while the last writes of the \
             one before complete){past}: {need_open} open and {need_active} active on {}, which \
             allows {} open and {} active zones; {fix}",
            m.name,
            limit(g.max_open_zones),
            limit(g.max_active_zones)
        ));
    }
    Ok(())
}

/// What refuses writes to zoned block devices whatever the layout: the page cache, and
/// conventional, offline or read-only zones.
fn block_write_rules(members: &[Member], writes: bool) -> Result<(), String> {
    if let Some(m) = members
        .iter()
        .find(|m| writes && m.zoned.is_some() && m.buffered)
    {
        return Err(format!(
            "--buffered: the page cache writes {} back in any order, and a zoned device takes \
             writes only at each zone's write pointer; drop --buffered",
            m.name
        ));
    }
    if let Some(m) = members.iter().find(|m| {
        m.zoned
            .is_some_and(|z| z.geometry.conventional_zones + z.geometry.unwritable_zones > 0)
    }) {
        let g = &m.zoned.expect("found zoned").geometry;
        return Err(format!(
            "{} has {} conventional and {} offline or read-only zones: nines writes zoned \
             devices whose zones are all sequential and writable; give another device, or read \
             it (--rw read or randread)",
            m.name, g.conventional_zones, g.unwritable_zones
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zoned::{Zone, ZoneCond, ZoneGeometry, ZoneType};
    use nines_array::SerialSpec;

    fn dev(size: u64, cap: u64, zones: u64) -> ZonedDevice {
        ZonedDevice {
            geometry: ZoneGeometry {
                zone_size_bytes: size,
                zone_capacity_bytes: cap,
                zones,
                conventional_zones: 0,
                unwritable_zones: 0,
                max_open_zones: 4,
                max_active_zones: 6,
                max_write_bytes: 0,
            },
            zones: (0..zones)
                .map(|i| Zone {
                    start_bytes: i * size,
                    len_bytes: size,
                    capacity_bytes: cap,
                    wp_bytes: i * size,
                    kind: ZoneType::SeqWriteRequired,
                    cond: ZoneCond::Empty,
                    reset_recommended: false,
                    non_seq: false,
                })
                .collect(),
        }
    }

    #[test]
    fn serial_learns_real_zones_and_in_place_writes_are_refused_in_one_line() {
        let d = dev(64 << 20, 48 << 20, 4);
        let m = |name| Member {
            name,
            emu: None,
            zoned: Some(&d),
            buffered: false,
        };
        let mut serial = LayoutSpec::Serial(SerialSpec::default());
        from_members(&mut serial, &[m("nvme0n1"), m("nvme0n2")], true).unwrap();
        let LayoutSpec::Serial(s) = &serial else {
            unreachable!()
        };
        assert_eq!(
            (s.zone_size_bytes, s.zone_capacity_bytes),
            (64 << 20, 48 << 20)
        );
        // Independent: reads run, writes are refused before any I/O.
        let mut ind = LayoutSpec::Independent;
        from_members(&mut ind, &[m("nvme0n1")], false).unwrap();
        let e = from_members(&mut ind, &[m("nvme0n1")], true).unwrap_err();
        assert_eq!(
            e,
            "nvme0n1 is host-managed zoned, 4 zones of 64 MiB (48 MiB writable), at most 4 open \
             and at most 6 active zones: writes there must go at each zone's write pointer, \
             which random and in-place writes do not; read it (--rw read or randread), write \
             it as fio's zonemode=zbd does with --zonemode zbd (each write at a zone's write \
             pointer, full zones reset), or write it through --layout serial --segment 48m \
             (one zone's capacity per member of a column) over zoned members"
        );
        assert!(!e.contains('\n'));
        let mut raid0 = LayoutSpec::Raid0 { stripe_bytes: 4096 };
        let e = from_members(&mut raid0, &[m("a"), m("b")], true).unwrap_err();
        assert!(
            e.starts_with("a is host-managed zoned")
                && e.contains("--layout raid0 writes in place; use --layout serial --segment"),
            "{e}"
        );
        // Through the page cache: refused for writes.
        let b = Member {
            buffered: true,
            ..m("nvme0n1")
        };
        let mut serial = LayoutSpec::Serial(SerialSpec::default());
        let e = from_members(&mut serial, &[b, b], true).unwrap_err();
        assert!(
            e.starts_with("--buffered: the page cache writes nvme0n1"),
            "{e}"
        );
        from_members(&mut LayoutSpec::Independent, &[b], false).unwrap();
        // Mixed members.
        let other = dev(32 << 20, 32 << 20, 8);
        let plain = Member {
            name: "nvme1n1",
            ..Member::default()
        };
        let mut serial = LayoutSpec::Serial(SerialSpec::default());
        let e = from_members(&mut serial, &[m("nvme0n1"), plain], true).unwrap_err();
        assert!(e.contains("but nvme1n1 is a conventional device"), "{e}");
        let o = Member {
            name: "nvme2n1",
            zoned: Some(&other),
            ..Member::default()
        };
        let e = from_members(&mut serial, &[m("nvme0n1"), o], true).unwrap_err();
        assert!(
            e.contains("but nvme2n1 is zoned with 32 MiB zones (32 MiB writable)"),
            "{e}"
        );
        // A stripe unit the block layer would split (max_sectors_kb, max_segments).
        let mut small = dev(64 << 20, 48 << 20, 4);
        small.geometry.max_write_bytes = 127 * 4096;
        let sm = Member {
            name: "nvme3n1",
            zoned: Some(&small),
            ..Member::default()
        };
        let mut serial = LayoutSpec::Serial(SerialSpec {
            stripe_bytes: 1 << 20,
            ..SerialSpec::default()
        });
        let e = from_members(&mut serial, &[sm, sm], true).unwrap_err();
        assert_eq!(
            e,
            "--stripe 1m: nvme3n1 takes writes of at most 508 KiB as one request \
             (queue/max_sectors_kb and max_segments), and a larger one is split into requests \
             nothing keeps in order in a zone; use --stripe 256k or less"
        );
        let mut serial = LayoutSpec::Serial(SerialSpec {
            stripe_bytes: 256 << 10,
            ..SerialSpec::default()
        });
        from_members(&mut serial, &[sm, sm], true).unwrap();
        // Conventional zones (an SMR disk's) are refused for writes, fine for reads.
        let mut smr = dev(256 << 20, 256 << 20, 4);
        smr.geometry.conventional_zones = 1;
        let s = Member {
            name: "sdb",
            zoned: Some(&smr),
            ..Member::default()
        };
        let e = from_members(&mut serial, &[s], true).unwrap_err();
        assert!(e.contains("sdb has 1 conventional"), "{e}");
        from_members(&mut LayoutSpec::Independent, &[s], false).unwrap();
    }

    #[test]
    fn zonemode_zbd_lets_independent_writes_run_on_zoned_devices_only() {
        let d = dev(64 << 20, 48 << 20, 4);
        let m = |name| Member {
            name,
            zoned: Some(&d),
            ..Member::default()
        };
        let z = ZbdOptions::default();
        let mut ind = LayoutSpec::Independent;
        from_members_zbd(&mut ind, &[m("nvme0n1"), m("nvme0n2")], true, Some(&z)).unwrap();
        assert_eq!(ind, LayoutSpec::Independent);
        // Without it, the refusal names it.
        let e = from_members_zbd(&mut ind, &[m("nvme0n1")], true, None).unwrap_err();
        assert!(e.contains("--zonemode zbd"), "{e}");
        // A conventional target, another layout, other zones, too many open zones: one line.
        let plain = Member {
            name: "sda",
            ..Member::default()
        };
        let e = from_members_zbd(&mut ind, &[plain], true, Some(&z)).unwrap_err();
        assert!(
            e.starts_with("--zonemode zbd: sda is not a host-managed zoned block device"),
            "{e}"
        );
        let mut raid0 = LayoutSpec::Raid0 { stripe_bytes: 4096 };
        let e = from_members_zbd(&mut raid0, &[m("a"), m("b")], true, Some(&z)).unwrap_err();
        assert!(e.contains("--layout raid0 places its own writes"), "{e}");
        let sized = ZbdOptions {
            zone_size_bytes: Some(32 << 20),
            ..ZbdOptions::default()
        };
        let e = from_members_zbd(&mut ind, &[m("nvme0n1")], true, Some(&sized)).unwrap_err();
        assert_eq!(
            e,
            "--zonemode zbd: zonesize 32m but nvme0n1 has zones of 64 MiB (48 MiB writable); \
             give 64m or leave it out (the device's is used)"
        );
        let capped = ZbdOptions {
            zone_size_bytes: Some(64 << 20),
            zone_capacity_bytes: Some(48 << 20),
            ..ZbdOptions::default()
        };
        from_members_zbd(&mut ind, &[m("nvme0n1")], true, Some(&capped)).unwrap();
        let many = ZbdOptions {
            max_open_zones: Some(5),
            ..ZbdOptions::default()
        };
        let e = from_members_zbd(&mut ind, &[m("nvme0n1")], true, Some(&many)).unwrap_err();
        assert_eq!(
            e,
            "--max-open-zones 5: nvme0n1 allows at most 4 open zones (max_open_zones); give 4 \
             or less, or leave it out (the device's limit is used)"
        );
        let b = Member {
            buffered: true,
            ..m("nvme0n1")
        };
        let e = from_members_zbd(&mut ind, &[b], true, Some(&z)).unwrap_err();
        assert!(e.starts_with("--buffered"), "{e}");
        // The limit a run keeps: the option, else the device's open limit, never above active.
        assert_eq!(zbd_open_zones(&d, &z), 4);
        assert_eq!(
            zbd_open_zones(
                &d,
                &ZbdOptions {
                    max_open_zones: Some(2),
                    ..z.clone()
                }
            ),
            2
        );
        let mut only_active = dev(64 << 20, 48 << 20, 4);
        only_active.geometry.max_open_zones = 0;
        assert_eq!(zbd_open_zones(&only_active, &z), 6);
        only_active.geometry.max_active_zones = 0;
        assert_eq!(zbd_open_zones(&only_active, &z), 0);
    }

    #[test]
    fn serial_is_refused_where_the_zone_limits_are_below_its_needs() {
        let mut one = dev(64 << 20, 48 << 20, 8);
        one.geometry.max_open_zones = 1;
        one.geometry.max_active_zones = 1;
        let m = |name, d| Member {
            name,
            zoned: Some(d),
            ..Member::default()
        };
        let spec = SerialSpec {
            segment_bytes: 48 << 20,
            stripe_bytes: 256 << 10,
            rotate_free: 1,
            gc_start: 2,
            gc_stop: 3,
            ..SerialSpec::default()
        };
        let mut serial = LayoutSpec::Serial(spec);
        let e =
            from_members(&mut serial, &[m("nvme0n1", &one), m("nvme0n2", &one)], true).unwrap_err();
        assert_eq!(
            e,
            "--layout serial needs 2 open and 2 active zones on each member (a column's open \
             segment, and the next while the last writes of the one before complete): 2 open \
             and 2 active on nvme0n1, which allows at most 1 open and at most 1 active zones; \
             give zoned devices that allow at least 2 open and 2 active zones \
             (max_open_zones, max_active_zones)"
        );
        // A read-only check is refused alike (the volume could not have run there).
        let mut serial = LayoutSpec::Serial(spec);
        assert!(from_members(&mut serial, &[m("a", &one), m("b", &one)], false).is_err());
        // Two of each, or no limit, is enough.
        let mut two = one.clone();
        two.geometry.max_open_zones = 2;
        two.geometry.max_active_zones = 2;
        let mut serial = LayoutSpec::Serial(spec);
        from_members(&mut serial, &[m("a", &two), m("b", &two)], true).unwrap();
        let mut free = one.clone();
        free.geometry.max_open_zones = 0;
        free.geometry.max_active_zones = 0;
        let mut serial = LayoutSpec::Serial(spec);
        from_members(&mut serial, &[m("a", &free), m("b", &free)], true).unwrap();
        // Zones past the volume's left open or closed hold their share: 10 zones of 64 MiB and
        // a smaller last one, which the volume never uses (nor resets), closed.
        let mut big = dev(64 << 20, 48 << 20, 10);
        big.geometry.max_open_zones = 2;
        big.geometry.max_active_zones = 2;
        let mut serial = LayoutSpec::Serial(spec);
        from_members(&mut serial, &[m("a", &big), m("b", &big)], true).unwrap();
        let mut big = big.clone();
        big.zones.push(Zone {
            start_bytes: 10 * (64 << 20),
            len_bytes: 32 << 20,
            capacity_bytes: 32 << 20,
            wp_bytes: 10 * (64 << 20) + 4096,
            kind: ZoneType::SeqWriteRequired,
            cond: ZoneCond::Closed,
            reset_recommended: false,
            non_seq: false,
        });
        // 10 whole zones and a small last one: the volume uses the 10, the last is past it.
        let mut serial = LayoutSpec::Serial(spec);
        let e = from_members(&mut serial, &[m("a", &big), m("b", &big)], true).unwrap_err();
        assert!(
            e.contains("and 1 zones past the volume's 10 (zone 10 on) are open or closed (0 open)")
                && e.contains(
                    "2 open and 3 active on a, which allows at most 2 open and at most 2"
                )
                && e.contains("blkzone reset -o 1310720 a"),
            "{e}"
        );
        // A read-only check does not count them (its audit names them).
        let mut serial = LayoutSpec::Serial(spec);
        from_members(&mut serial, &[m("a", &big), m("b", &big)], false).unwrap();
    }
}
