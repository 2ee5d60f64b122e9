//! The zoned device (issue 33): write pointer rules, append, reset, finish, the open and active
//! limits, and no device GC, with exact counts.

use nines_flash::zoned::{EINVAL, ENOSPC, EOVERFLOW, ETOOMANYREFS};
use nines_flash::{DeviceConfig, ZoneError, ZoneState, ZonedConfig, ZonedSsd};

const MIB: u64 = 1 << 20;

/// The zn540 preset shrunk: 64 dies, 16 KiB pages, 8-page blocks: an 8 MiB zone capacity (one
/// block on every die) in 16 MiB zones, 16 zones; at most 3 open and 4 active.
fn small() -> DeviceConfig {
    let mut c = DeviceConfig::load("zn540").unwrap();
    c.geometry.pages_per_block = 8;
    c.geometry.blocks_per_plane = 8;
    c.ftl.over_provisioning = 0.5;
    c.zoned = Some(ZonedConfig {
        zone_size_bytes: 16 * MIB,
        zone_capacity_bytes: 8 * MIB,
        max_open_zones: 3,
        max_active_zones: 4,
    });
    c.validate().unwrap();
    c
}

fn dev() -> ZonedSsd {
    ZonedSsd::new(&small(), 1).unwrap()
}

#[test]
fn geometry_is_whole_blocks_on_every_die() {
    let c = small();
    let z = c.zoned.clone().unwrap();
    assert_eq!(z.blocks_per_zone(&c), 1);
    assert_eq!(z.zones(&c), 16);
    let d = dev();
    assert_eq!(d.logical_bytes(), 16 * 16 * MIB);
    assert_eq!(d.zones().len(), 16);
}

#[test]
fn a_write_off_the_write_pointer_is_refused() {
    let mut d = dev();
    let ok = d.write(0, 0, 128 << 10, false);
    assert_eq!(ok.result, Ok(0));
    assert!(ok.done_ns > 0);
    // Behind, ahead of, and past the capacity.
    for off in [0, 64 << 10, 256 << 10] {
        let r = d.write(ok.done_ns, off, 4096, false);
        assert_eq!(r.result, Err(ZoneError::InvalidWrite), "at {off}");
        assert_eq!(ZoneError::InvalidWrite.errno(), EINVAL);
    }
    let r = d.write(ok.done_ns, 16 * MIB + 8 * MIB - 4096, 8192, false);
    assert_eq!(r.result, Err(ZoneError::InvalidWrite));
    assert_eq!(d.stats().invalid_writes, 4);
    assert_eq!(d.zones()[0].wp_bytes, 128 << 10);
    // At the pointer it goes on.
    assert_eq!(
        d.write(ok.done_ns, 128 << 10, 4096, false).result,
        Ok(128 << 10)
    );
}

#[test]
fn append_returns_the_write_pointer_and_fills_the_zone() {
    let mut d = dev();
    let zone = 16 * MIB; // zone 1
    let mut t = 0;
    let mut expect = zone;
    for _ in 0..(8 * MIB / (256 << 10)) {
        let r = d.append(t, zone, 256 << 10, false);
        assert_eq!(r.result, Ok(expect));
        expect += 256 << 10;
        t = r.done_ns;
    }
    assert_eq!(d.zones()[1].state, ZoneState::Full);
    assert_eq!(d.open_zones(), 0);
    let r = d.append(t, zone, 4096, false);
    assert_eq!(r.result, Err(ZoneError::ZoneFull));
    assert_eq!(ZoneError::ZoneFull.errno(), ENOSPC);
    // Not a zone start.
    assert_eq!(
        d.append(t, zone + 4096, 4096, false).result,
        Err(ZoneError::NotZoneAligned)
    );
    assert_eq!(d.stats().zone_appends, 32);
    assert_eq!(d.stats().host_write_bytes, 8 * MIB);
    assert_eq!(d.stats().media_write_bytes, 8 * MIB);
}

#[test]
fn reset_erases_on_the_dies_frees_the_zone_and_reads_zeros() {
    let mut d = dev();
    let mut t = 0;
    for i in 0..32 {
        t = d.write(t, i * (256 << 10), 256 << 10, false).done_ns;
    }
    assert_eq!(d.zones()[0].state, ZoneState::Full);
    // Let the programs drain, then time a read of written data and one of the hole.
    t += 100_000_000;
    let flash_read = d.read(t, 0, 4096) - t;
    assert!(flash_read >= 60_000, "a flash read takes tR: {flash_read}");
    let r = d.reset(t + flash_read, 0, 16 * MIB);
    assert_eq!(r.result, Ok(0));
    // One 16.8 MiB... here 128 KiB block erased on each of 64 dies: 5 ms each, in parallel.
    let erase = r.done_ns - (t + flash_read);
    assert!(
        (5_000_000..6_000_000).contains(&erase),
        "reset took {erase} ns"
    );
    assert_eq!(d.stats().blocks_erased, 64);
    assert_eq!(d.zones()[0].state, ZoneState::Empty);
    assert_eq!(d.zones()[0].wp_bytes, 0);
    assert_eq!(d.zones()[0].resets, 1);
    // Reads of the reset zone are zeros: no flash read, only the controller and the link.
    let t2 = r.done_ns + 1_000_000;
    let zero_read = d.read(t2, 0, 4096) - t2;
    assert!(
        zero_read < 20_000,
        "a read of a reset zone touched flash: {zero_read}"
    );
    // A read right behind another reset waits for the erase on its die: the tail. Zones 1 and
    // 2 written; zone 1 reset (every die erases a block); a read of zone 2 waits.
    let mut t3 = t2;
    for zone in 1..3 {
        for i in 0..32 {
            t3 = d
                .write(t3, zone * 16 * MIB + i * (256 << 10), 256 << 10, false)
                .done_ns;
        }
    }
    t3 += 100_000_000;
    let r2 = d.reset(t3, 0, 32 * MIB); // zones 0 (empty: nothing to erase) and 1
    assert_eq!(d.stats().blocks_erased, 128);
    let behind = d.read(t3 + 20_000, 32 * MIB, 4096) - (t3 + 20_000);
    assert!(
        behind > 4_000_000,
        "a read behind a reset's erase waited only {behind} ns"
    );
    assert!(r2.done_ns > t3 + 5_000_000);
}

#[test]
fn open_and_active_limits_are_enforced() {
    let mut d = dev();
    let z = |i: u64| i * 16 * MIB;
    let mut t = 0;
    // Three implicitly open zones (the open limit).
    for i in 0..3 {
        t = d.write(t, z(i), 4096, false).done_ns;
    }
    assert_eq!((d.open_zones(), d.active_zones()), (3, 3));
    // A fourth: the zone opened first is closed implicitly; four active.
    t = d.write(t, z(3), 4096, false).done_ns;
    assert_eq!(d.zones()[0].state, ZoneState::Closed);
    assert_eq!((d.open_zones(), d.active_zones()), (3, 4));
    assert_eq!(d.stats().implicit_closes, 1);
    // A fifth zone would be a fifth active one.
    let r = d.write(t, z(4), 4096, false);
    assert_eq!(r.result, Err(ZoneError::TooManyActive));
    assert_eq!(ZoneError::TooManyActive.errno(), EOVERFLOW);
    // Writing the closed zone reopens it (closing another).
    assert_eq!(d.write(t, z(0) + 4096, 4096, false).result, Ok(4096));
    assert_eq!(d.zones()[0].state, ZoneState::ImplicitlyOpen);
    // Finish one: it is no longer active, so zone 4 can open.
    assert_eq!(d.finish(t, z(1)).result, Ok(0));
    assert_eq!(d.zones()[1].state, ZoneState::Full);
    assert_eq!(d.write(t, z(4), 4096, false).result, Ok(z(4)));
    // Every open zone opened explicitly: no implicit close possible.
    let mut d = dev();
    for i in 0..3 {
        assert_eq!(d.open_zone(0, z(i)).result, Ok(0));
    }
    let r = d.write(0, z(3), 4096, false);
    assert_eq!(r.result, Err(ZoneError::TooManyOpen));
    assert_eq!(ZoneError::TooManyOpen.errno(), ETOOMANYREFS);
    assert_eq!(d.close_zone(0, z(0)).result, Ok(0));
    assert_eq!(d.zones()[0].state, ZoneState::Empty);
    assert_eq!(d.write(0, z(3), 4096, false).result, Ok(z(3)));
    assert_eq!(d.stats().open_zones_peak, 3);
    assert_eq!(d.stats().too_many_open_errors, 1);
}

#[test]
fn no_device_gc_ever() {
    // Every zone written and reset five times over: the wrapped model's GC never runs.
    let mut d = dev();
    let mut t = 0;
    for _round in 0..5 {
        for zone in 0..16u64 {
            for i in 0..8 {
                let r = d.write(t, zone * 16 * MIB + i * MIB, MIB, false);
                assert!(r.result.is_ok(), "{r:?}");
                t = r.done_ns;
            }
            t = d.reset(t, zone * 16 * MIB, 16 * MIB).done_ns;
        }
    }
    let s = d.stats();
    assert_eq!(s.zone_resets, 80);
    assert_eq!(s.blocks_erased, 80 * 64);
    assert_eq!(s.host_write_bytes, 80 * 8 * MIB);
    assert_eq!(s.media_write_bytes, s.host_write_bytes);
    let c = d.ssd().counters();
    assert_eq!(c.writes, 80 * 8);
    assert_eq!(
        (c.gc_hard_episodes, c.gc_soft_episodes, c.gc_now_victims),
        (0, 0, 0)
    );
    let f = d.ssd().ftl_stats();
    assert_eq!(f.units_moved, 0);
    assert_eq!((f.victims, f.erases, f.gc_runs), (0, 0, 0));
    assert_eq!(f.host_units, 0, "the FTL is never written");
}

#[test]
fn trim_and_unaligned_resets_are_refused() {
    let mut d = dev();
    assert_eq!(d.unsupported(0).result, Err(ZoneError::Unsupported));
    assert_eq!(
        d.reset(0, 4096, 16 * MIB).result,
        Err(ZoneError::NotZoneAligned)
    );
    assert_eq!(d.reset(0, 0, 4096).result, Err(ZoneError::NotZoneAligned));
}

#[test]
fn the_description_is_validated() {
    let mut c = small();
    c.zoned.as_mut().unwrap().zone_capacity_bytes = 8 * MIB + 4096;
    let e = c.validate().unwrap_err().to_string();
    assert!(
        e.contains("zone_capacity_bytes") && e.contains("multiple of"),
        "{e}"
    );
    let mut c = small();
    c.zoned.as_mut().unwrap().zone_size_bytes = 4 * MIB;
    assert!(
        c.validate()
            .unwrap_err()
            .to_string()
            .contains("zone_size_bytes")
    );
    let mut c = small();
    c.zoned.as_mut().unwrap().max_active_zones = 2;
    assert!(
        c.validate()
            .unwrap_err()
            .to_string()
            .contains("max_active_zones")
    );
    let mut c = small();
    c.zoned.as_mut().unwrap().zone_capacity_bytes = 64 * MIB * 16;
    c.zoned.as_mut().unwrap().zone_size_bytes = 64 * MIB * 16;
    assert!(
        c.validate()
            .unwrap_err()
            .to_string()
            .contains("blocks on each pool")
    );
    // A conventional description has no zoned device.
    let mut c = small();
    c.zoned = None;
    assert!(ZonedSsd::new(&c, 1).is_err());
    // The preset parses, validates and round-trips.
    let p = DeviceConfig::load("zn540").unwrap();
    let z = p.zoned.clone().unwrap();
    assert_eq!(z.zones(&p), 3688);
    assert_eq!(
        (z.zone_capacity_bytes >> 20, z.zone_size_bytes >> 20),
        (1077, 2048)
    );
    let back = DeviceConfig::from_toml(&p.to_toml().unwrap(), "round trip").unwrap();
    assert_eq!(back, p);
}
