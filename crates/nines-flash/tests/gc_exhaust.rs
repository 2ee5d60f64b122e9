//! A pool full of valid data: the model must keep taking writes (GC elsewhere, host pages on
//! pools with room), never panic. Regression: "pool N has no free block" after ~3000 s of
//! bench/paper004-shaping.sh (c), where long-lived data piled up on some dies.

mod common;

use nines_core::op::Op;
use nines_flash::{DeviceConfig, Ftl, GcWork, Precondition, Ssd};

/// 4 dies of 32 blocks of 16 one-unit pages, 25% spare, a 256 KiB write buffer (the default
/// 16 MiB is more than this device's 8 MiB of flash, which validation refuses).
fn tiny() -> DeviceConfig {
    let text = r#"
name = "tiny"
[geometry]
channels = 2
chips_per_channel = 1
dies_per_chip = 2
planes_per_die = 1
blocks_per_plane = 32
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
    DeviceConfig::from_toml(text, "tiny").unwrap()
}

/// Valid units on `pool` (by looking every logical unit up).
fn valid_on(ftl: &Ftl, pool: u32) -> u32 {
    (0..ftl.logical_units())
        .filter(|&l| ftl.is_mapped(l) && ftl.locate(l).0 == pool)
        .count() as u32
}

/// The adversary: overwrite only units that do not live on pool 0, so every unit that lands on
/// pool 0 stays valid there for good. Pool 0 gets a quarter of the host pages, so without
/// redirection it fills up with valid data (the old model panicked within two capacities).
#[test]
fn a_pool_full_of_valid_data_takes_no_more_host_pages_and_nothing_panics() {
    let cfg = tiny();
    let mut ftl = Ftl::new(&cfg);
    ftl.fill();
    let n = ftl.logical_units();
    let pool_units = cfg.blocks_per_pool() * cfg.geometry.pages_per_block;
    let mut rng = common::Lcg(11);
    let mut gc = GcWork::default();
    let mut writes = 0u64;
    let mut full_seen = false;
    let mut on_full_pool = 0u32;
    while writes < 20 * n as u64 {
        let lpn = (rng.next() % n as u64) as u32;
        if ftl.locate(lpn).0 == 0 {
            continue;
        }
        full_seen |= ftl.free_blocks(0) <= 1;
        let place = ftl.write_unit(lpn, &mut gc);
        writes += 1;
        if full_seen && place.pool == 0 {
            on_full_pool += 1;
        }
        for p in 0..ftl.pools() {
            assert!(ftl.free_blocks(p) >= 1, "pool {p} lost its GC reserve");
        }
    }
    // Once pool 0 is down to its reserve it only finishes the host block it had open (its data
    // is never overwritten, so it cannot get room back).
    assert!(
        on_full_pool <= cfg.geometry.pages_per_block,
        "{on_full_pool} host units on the full pool"
    );
    assert!(full_seen, "the adversary never filled pool 0");
    // Pool 0 is (nearly) all valid data, more than its share of the logical space.
    let v0 = valid_on(&ftl, 0);
    assert!(
        v0 > n / 4 && v0 <= pool_units,
        "pool 0 holds {v0} of {pool_units}"
    );
    ftl.check_consistency().unwrap();
}

/// The same adversary through the timed model, with reads in between so that soft GC runs on
/// the full pool too (the original panic came from soft GC's frontier).
#[test]
fn the_timed_model_keeps_serving_when_a_pool_is_full_of_valid_data() {
    let cfg = tiny();
    let mut ssd = Ssd::new(&cfg, 5);
    ssd.precondition(Precondition::Fill, 5);
    let n = ssd.ftl().logical_units() as u64;
    let mut rng = common::Lcg(12);
    let mut t = 0u64;
    let mut writes = 0;
    let mut last_done = 0;
    while writes < 20 * n {
        let lpn = rng.next() % n;
        t += 20_000;
        if rng.next().is_multiple_of(2) {
            ssd.submit(t, Op::Read, lpn * 4096, 4096);
            continue;
        }
        if ssd.ftl().locate(lpn as u32).0 == 0 {
            continue;
        }
        last_done = ssd.submit(t, Op::Write, lpn * 4096, 4096);
        writes += 1;
    }
    assert!(ssd.ftl().free_blocks(0) <= 1, "pool 0 never filled");
    assert!(last_done > t, "writes still complete");
    assert!(ssd.ftl_stats().write_amplification() > 1.0);
    ssd.ftl().check_consistency().unwrap();
}
