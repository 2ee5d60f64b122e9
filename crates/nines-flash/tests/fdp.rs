//! Flexible Data Placement (TP4146) in the model: each reclaim unit handle has its own open
//! block per die, GC keeps the handles apart, and the per-handle counters add up.

use nines_core::op::Op;
use nines_flash::config::Isolation;
use nines_flash::{DeviceConfig, FdpConfig, Ftl, GC_RESERVE_BLOCKS, GcWork, Ssd};

/// 4 dies of 64 blocks of 16 one-unit pages, 25% spare; `[fdp]` as given.
fn tiny(fdp: Option<(u32, Isolation)>) -> DeviceConfig {
    let text = r#"
name = "tiny"
[geometry]
channels = 2
chips_per_channel = 1
dies_per_chip = 2
planes_per_die = 1
blocks_per_plane = 64
pages_per_block = 16
page_size_bytes = 4096
map_unit_bytes = 4096
[timing]
read_ns = 50_000
program_ns = 500_000
erase_ns = 2_000_000
channel_bytes_per_s = 400_000_000
[ftl]
over_provisioning = 0.25
gc_soft_threshold = 0.2
gc_hard_threshold = 0.1
[controller]
overhead_ns = 3_000
read_bytes_per_s = 2_000_000_000
write_bytes_per_s = 1_000_000_000
[buffer]
write_buffer_bytes = 262_144
"#;
    let mut cfg = DeviceConfig::from_toml(text, "tiny").unwrap();
    cfg.fdp = fdp.map(|(handles, isolation)| FdpConfig {
        reclaim_groups: 1,
        handles,
        reclaim_unit_bytes: None,
        isolation,
    });
    cfg.validate().unwrap();
    cfg
}

/// Two sequential writers interleaved unit by unit: a hot one rewriting a small region over
/// and over, a cold one going once through a large region, then again. Returns the FTL.
fn two_streams(cfg: &DeviceConfig, hot_handle: u32, cold_handle: u32) -> Ftl {
    let mut ftl = Ftl::new(cfg);
    let n = ftl.logical_units();
    let hot = n / 8;
    let cold = n - hot;
    let mut gc = GcWork::default();
    let (mut h, mut c) = (0u32, 0u32);
    // Seven hot units per cold one: the hot region is rewritten ~once per cold eighth.
    for _ in 0..3 * cold {
        ftl.write_unit_placed(hot + c % cold, cold_handle, &mut gc, GC_RESERVE_BLOCKS + 1);
        c += 1;
        for _ in 0..7 {
            ftl.write_unit_placed(h % hot, hot_handle, &mut gc, GC_RESERVE_BLOCKS + 1);
            h += 1;
        }
    }
    ftl.check_consistency().unwrap();
    ftl
}

/// The streams in handles of their own move nothing: every block holds one stream's data,
/// written in order and overwritten in order, so a victim has no valid unit left. Mixed in
/// one handle (or on a device without FDP), GC moves the cold stream's units out of blocks
/// the hot one invalidated: WAF above 1.
#[test]
fn two_streams_kept_apart_move_nothing_and_mixed_they_do() {
    let fdp = tiny(Some((2, Isolation::Persistently)));
    let apart = two_streams(&fdp, 0, 1);
    let s = apart.stats();
    let f = apart.fdp_stats().unwrap();
    let n = apart.logical_units() as u64;
    let (hot, cold) = (n / 8, n - n / 8);
    assert_eq!(s.units_moved, 0, "kept apart: {s:?}");
    assert!(s.victims > 0, "GC did run: {s:?}");
    assert_eq!(s.write_amplification(), 1.0);
    assert_eq!(f.host_units[0], 3 * cold * 7);
    assert_eq!(f.host_units[1], 3 * cold);
    assert_eq!(f.host_units[0] + f.host_units[1], s.host_units);
    assert_eq!(f.units_moved[..2], [0, 0]);
    assert_eq!(f.write_amplification(0), 1.0);
    assert_eq!(f.victims[0] + f.victims[1] + f.victims_shared, s.victims);
    assert_eq!(
        f.victims_shared, 0,
        "persistently isolated: no shared GC frontier"
    );
    let _ = hot;

    let mixed = two_streams(&fdp, 0, 0);
    let m = mixed.stats();
    assert!(m.write_amplification() > 1.2, "mixed: {m:?}");
    let mf = mixed.fdp_stats().unwrap();
    assert_eq!(mf.units_moved[0], m.units_moved, "all moves are handle 0's");

    let conv = two_streams(&tiny(None), 0, 0);
    assert!(conv.fdp_stats().is_none());
    // A conventional device mixes them the same way (its GC differs a little: the FDP
    // device's second handle holds an open host block and a GC frontier per die).
    let c = conv.stats();
    assert_eq!(c.host_units, m.host_units);
    assert!(c.write_amplification() > 1.2, "conventional: {c:?}");
}

/// Persistently isolated handles keep GC apart too: a random writer's victims are moved into
/// its own GC frontier and never into a block of the sequential writer, whose blocks are
/// then always wholly invalid (it moves nothing). Initially isolated handles share one GC
/// frontier per die: moved data of both meet there (victims of shared blocks are counted).
#[test]
fn persistent_isolation_keeps_gc_frontiers_apart_and_initial_shares_them() {
    for iso in [Isolation::Persistently, Isolation::Initially] {
        let cfg = tiny(Some((2, iso)));
        let mut ftl = Ftl::new(&cfg);
        let n = ftl.logical_units();
        let seq = n / 2;
        let mut gc = GcWork::default();
        let mut x = 12345u64;
        for i in 0..(6 * n as u64) {
            ftl.write_unit_placed((i % seq as u64) as u32, 0, &mut gc, GC_RESERVE_BLOCKS + 1);
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = seq + ((x >> 33) % (n - seq) as u64) as u32;
            ftl.write_unit_placed(r, 1, &mut gc, GC_RESERVE_BLOCKS + 1);
        }
        ftl.check_consistency().unwrap();
        let f = ftl.fdp_stats().unwrap();
        let s = ftl.stats();
        assert_eq!(f.units_moved[0] + f.units_moved[1], s.units_moved);
        assert!(f.units_moved[1] > 0, "{iso:?}: random data is moved");
        assert!(f.write_amplification(1) > 1.0);
        match iso {
            Isolation::Persistently => {
                assert_eq!(f.units_moved[0], 0, "sequential data never moved");
                assert_eq!(f.victims_shared, 0);
                assert!(f.victims[0] > 0 && f.victims[1] > 0);
            }
            Isolation::Initially => assert!(f.victims_shared > 0, "{f:?}"),
        }
    }
}

/// Placed writes through the timed model: handle counters, open pages per handle (a read of
/// a unit still in an open page of any handle is a buffer hit), and a flush programs every
/// handle's open page. Reset clears the FDP counters.
#[test]
fn the_timed_model_places_writes_and_flushes_every_handle() {
    let mut cfg = tiny(Some((4, Isolation::Initially)));
    cfg.durability.volatile_write_cache = true;
    let mut ssd = Ssd::new(&cfg, 1);
    assert_eq!(ssd.fdp_handles(), 4);
    let mut t = 0;
    for h in 0..4u32 {
        t = ssd.submit_placed(t, Op::Write, u64::from(h) * 8192, 4096, false, h);
    }
    let f = ssd.fdp_stats().unwrap();
    assert_eq!(f.host_units[..4], [1, 1, 1, 1]);
    // One-unit pages: every write filled (and programmed) its page. A flush has nothing left.
    let done = ssd.flush(t);
    assert!(done >= t);
    ssd.reset_counters();
    assert_eq!(ssd.fdp_stats().unwrap().host_units[..4], [0, 0, 0, 0]);
    // A conventional model has no FDP counters and one handle.
    let conv = Ssd::new(&tiny(None), 1);
    assert!(conv.fdp_stats().is_none());
    assert_eq!(conv.fdp_handles(), 1);
}

/// `[fdp]` is validated with the field and what to do.
#[test]
fn fdp_sections_are_validated() {
    let mut cfg = tiny(Some((2, Isolation::Persistently)));
    cfg.fdp.as_mut().unwrap().reclaim_groups = 2;
    let e = cfg.validate().unwrap_err().to_string();
    assert!(
        e.contains("fdp.reclaim_groups") && e.contains("set 1"),
        "{e}"
    );
    let mut cfg = tiny(Some((2, Isolation::Persistently)));
    cfg.fdp.as_mut().unwrap().handles = 0;
    assert!(
        cfg.validate()
            .unwrap_err()
            .to_string()
            .contains("fdp.handles")
    );
    cfg.fdp.as_mut().unwrap().handles = 17;
    assert!(cfg.validate().unwrap_err().to_string().contains("1 to 16"));
    let mut cfg = tiny(Some((2, Isolation::Persistently)));
    cfg.fdp.as_mut().unwrap().reclaim_unit_bytes = Some(1 << 20);
    let e = cfg.validate().unwrap_err().to_string();
    // 4 pools x 16 pages x 4 KiB.
    assert!(e.contains("262144"), "{e}");
    cfg.fdp.as_mut().unwrap().reclaim_unit_bytes = Some(262_144);
    cfg.validate().unwrap();
    // Every open block of the handles needs a spare block: 16 persistently isolated handles
    // (32 open blocks per die) do not fit 16 spare blocks.
    let mut cfg = tiny(Some((2, Isolation::Persistently)));
    cfg.fdp.as_mut().unwrap().handles = 16;
    let e = cfg.validate().unwrap_err().to_string();
    assert!(e.contains("open blocks of the FDP handles"), "{e}");
    // The TOML names: unknown fields refused, isolation by name.
    let text = DeviceConfig::preset("afa-m2-2018-fdp")
        .unwrap()
        .to_toml()
        .unwrap();
    assert!(text.contains("isolation = \"persistently\""), "{text}");
    let bad = text.replace("isolation = \"persistently\"", "isolation = \"sometimes\"");
    assert!(DeviceConfig::from_toml(&bad, "x").is_err());
    // The conventional preset's TOML has no [fdp] (absent = conventional).
    let conv = DeviceConfig::preset("afa-m2-2018").unwrap();
    assert!(conv.fdp.is_none());
    assert!(!conv.to_toml().unwrap().contains("[fdp]"));
}

/// `idle-first` allocation: each handle still gives every pool one page per round, but a page
/// opening takes, of the round's unused pools, one where no other handle has a page open, then
/// the die free first. The plain round robin puts both handles' first pages on pool 0.
#[test]
fn idle_first_keeps_handles_pages_off_each_others_dies_in_rounds() {
    use nines_flash::config::Allocation;
    let mut cfg = tiny(Some((2, Isolation::Persistently)));
    let hard = GC_RESERVE_BLOCKS + 1;
    let mut gc = GcWork::default();
    // Round robin (the default): each handle's own pointer starts at pool 0.
    let mut rr = Ftl::new(&cfg);
    let busy = |p: u32| if p == 0 { 1_000_000 } else { 0 };
    assert_eq!(rr.write_unit_placed_by(0, 0, &mut gc, hard, busy).pool, 0);
    assert_eq!(rr.write_unit_placed_by(1, 1, &mut gc, hard, busy).pool, 0);

    cfg.ftl.allocation = Allocation::IdleFirst;
    cfg.validate().unwrap();
    let mut f = Ftl::new(&cfg);
    // One-unit pages: every write fills (and closes) its page. Handle 0 opens on pool 0; pool
    // 0's die is then busy, so handle 1 takes the next pool of its round, 1.
    assert_eq!(f.write_unit_placed_by(0, 0, &mut gc, hard, |_| 0).pool, 0);
    assert_eq!(f.write_unit_placed_by(1, 1, &mut gc, hard, busy).pool, 1);
    // Handle 1's round has pools 0, 2, 3 left: the die free first among them wins (3), then
    // the round-robin order breaks the tie between 0 and 2 from the pool after 3 (0).
    let times = |p: u32| [5, 9, 9, 1][p as usize];
    assert_eq!(f.write_unit_placed_by(2, 1, &mut gc, hard, times).pool, 3);
    assert_eq!(f.write_unit_placed_by(3, 1, &mut gc, hard, |_| 0).pool, 0);
    assert_eq!(f.write_unit_placed_by(4, 1, &mut gc, hard, |_| 0).pool, 2);
    // The round is used up: a new one starts, every pool free again (order from pool 3).
    assert_eq!(f.write_unit_placed_by(5, 1, &mut gc, hard, times).pool, 3);
    // Handle 0's round goes on without pool 0, in its own order: 1, 2, 3, then a new round.
    let pools: Vec<u32> = (6..10)
        .map(|l| f.write_unit_placed_by(l, 0, &mut gc, hard, |_| 0).pool)
        .collect();
    assert_eq!(pools, [1, 2, 3, 0]);
    f.check_consistency().unwrap();
}

/// A page another handle has open on a pool will be programmed there when it fills:
/// `idle-first` opens elsewhere even when every die is idle now.
#[test]
fn idle_first_avoids_pools_with_another_handles_open_page() {
    use nines_flash::config::Allocation;
    let mut cfg = tiny(Some((2, Isolation::Persistently)));
    cfg.geometry.page_size_bytes = 8192; // two units per page
    cfg.ftl.allocation = Allocation::IdleFirst;
    cfg.validate().unwrap();
    let hard = GC_RESERVE_BLOCKS + 1;
    let mut gc = GcWork::default();
    let mut f = Ftl::new(&cfg);
    let a = f.write_unit_placed_by(0, 0, &mut gc, hard, |_| 0);
    assert!(a.page_opened && !a.page_full);
    assert_eq!(a.pool, 0);
    // Handle 0's page on pool 0 is half full: handle 1 opens on pool 1, not 0.
    let b = f.write_unit_placed_by(2, 1, &mut gc, hard, |_| 0);
    assert_eq!((b.pool, b.page_opened), (1, true));
    // Handle 0 fills its own open page on pool 0.
    let c = f.write_unit_placed_by(1, 0, &mut gc, hard, |_| 0);
    assert_eq!((c.pool, c.page_full, c.page_opened), (0, true, false));
    f.check_consistency().unwrap();
}
