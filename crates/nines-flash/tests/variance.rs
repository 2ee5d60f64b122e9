//! The variance sources (issue 17 item 1), each checked against its definition on an idle
//! device where the exact latency is known: 4 KiB read = 3 us controller + tR 50 us + 4096 B
//! over a 400 MB/s channel (10 240 ns) + over the 2 GB/s link (2 048 ns) = 65 288 ns.

mod common;

use common::{Lcg, small};
use nines_core::op::Op;
use nines_flash::{DeviceConfig, Precondition, Ssd};

const IDLE_READ_NS: u64 = 65_288;

fn filled(cfg: &DeviceConfig) -> Ssd {
    cfg.validate().unwrap();
    let mut ssd = Ssd::new(cfg, 1);
    ssd.precondition(Precondition::Fill, 1);
    ssd
}

/// Idle 4 KiB reads 10 ms apart; returns each one's latency.
fn idle_reads(ssd: &mut Ssd, n: u64) -> Vec<u64> {
    let mut rng = Lcg(9);
    let mut t = 1_000_000_000;
    let mut lat = Vec::new();
    for _ in 0..n {
        let done = ssd.submit(t, Op::Read, rng.offset_4k(ssd.logical_bytes()), 4096);
        lat.push(done - t);
        t = done + 10_000_000;
    }
    lat
}

#[test]
fn read_retry_adds_its_steps_to_the_reads_it_hits() {
    let mut cfg = small(2, 2, 0.2);
    cfg.read_retry.probability = 1.0;
    cfg.read_retry.steps = 2;
    cfg.read_retry.step_overhead_ns = 5_000;
    let mut ssd = filled(&cfg);
    // Every read retries twice: tR + 2 * (tR + 5 us).
    for lat in idle_reads(&mut ssd, 50) {
        assert_eq!(lat, IDLE_READ_NS + 2 * (50_000 + 5_000));
    }
    assert_eq!(ssd.counters().read_retries, 50);

    // A quarter of the reads retry: each latency is one of the two, the share near 1/4.
    cfg.read_retry.probability = 0.25;
    let mut ssd = filled(&cfg);
    let lat = idle_reads(&mut ssd, 4000);
    let slow = lat.iter().filter(|&&l| l != IDLE_READ_NS).count();
    assert!(
        lat.iter()
            .all(|&l| l == IDLE_READ_NS || l == IDLE_READ_NS + 110_000)
    );
    assert_eq!(slow as u64, ssd.counters().read_retries);
    assert!((850..1150).contains(&slow), "{slow} of 4000 retried");
}

#[test]
fn power_states_add_their_exit_latency_after_idle() {
    let mut cfg = small(2, 2, 0.2);
    cfg.power.states = vec![
        nines_flash::config::PowerState {
            idle_ns: 1_000_000,
            exit_ns: 100_000,
            entry_ns: 0,
        },
        nines_flash::config::PowerState {
            idle_ns: 100_000_000,
            exit_ns: 5_000_000,
            entry_ns: 0,
        },
    ];
    let mut ssd = filled(&cfg);
    let t = 1_000_000_000;
    // Idle for a second: the deepest state's exit.
    let d = ssd.submit(t, Op::Read, 0, 4096);
    assert_eq!(d - t, 5_000_000 + IDLE_READ_NS);
    // Right behind it: awake.
    let e = ssd.submit(d, Op::Read, 4096, 4096);
    assert_eq!(e - d, IDLE_READ_NS);
    // 2 ms idle: the shallow state.
    let t = e + 2_000_000;
    let f = ssd.submit(t, Op::Read, 8192, 4096);
    assert_eq!(f - t, 100_000 + IDLE_READ_NS);
    // Below the first state's idle time: nothing.
    let t = f + 500_000;
    let g = ssd.submit(t, Op::Read, 8192, 4096);
    assert_eq!(g - t, IDLE_READ_NS);
    assert_eq!(ssd.counters().power_exits, 2);
}

/// Wake-ups as the NVMe base specification describes non-operational states: no I/O command is
/// processed until the controller is operational again, a doorbell write starts the exit, and
/// then every queued command is processed. So a command that arrives during an entry waits for
/// the entry and then the exit (ENLAT + EXLAT at most); commands that arrive while it wakes wait
/// for that one wake-up (none pays its own exit); the device is busy until its last completion.
#[test]
fn wake_ups_are_one_per_exit_and_an_entry_is_finished_first() {
    let mut cfg = small(2, 2, 0.2);
    // PS3: enters after 100 ms idle, 2 ms entry (in it at 102 ms), 8 ms exit.
    cfg.power.states = vec![nines_flash::config::PowerState {
        idle_ns: 102_000_000,
        exit_ns: 8_000_000,
        entry_ns: 2_000_000,
    }];
    // No controller occupancy: only the power state orders the commands.
    cfg.controller.command_ns = 0;
    let mut ssd = filled(&cfg);
    let t0 = 1_000_000_000;
    let a = ssd.submit(t0, Op::Read, 0, 4096);
    assert_eq!(
        a - t0,
        8_000_000 + IDLE_READ_NS,
        "after a long idle: the exit"
    );
    // Two more commands while it wakes: both wait for the same wake-up (they start with the
    // first once it is awake, so they may queue behind it on the flash, never for an exit).
    let b = ssd.submit(t0 + 1_000_000, Op::Read, 1 << 20, 4096);
    let c = ssd.submit(t0 + 7_999_000, Op::Read, 2 << 20, 4096);
    for x in [b, c] {
        assert!(
            (8_000_000 + IDLE_READ_NS..8_000_000 + 3 * IDLE_READ_NS).contains(&(x - t0)),
            "{}",
            x - t0
        );
    }
    assert_eq!(ssd.counters().power_exits, 1, "one wake-up for the three");
    // Idle 101 ms after the last completion: in the middle of the entry. The command waits
    // the entry's last 1 ms, then the exit.
    let t = c + 101_000_000;
    let d = ssd.submit(t, Op::Read, 0, 4096);
    assert_eq!(d - t, 1_000_000 + 8_000_000 + IDLE_READ_NS);
    // Before the entry starts (99.9 ms idle): awake.
    let t = d + 99_900_000;
    let e = ssd.submit(t, Op::Read, 0, 4096);
    assert_eq!(e - t, IDLE_READ_NS);
    assert_eq!(ssd.counters().power_exits, 2);
}

#[test]
fn fua_waits_for_the_program_on_a_volatile_cache_and_costs_flush_ns_otherwise() {
    // One unit per page here, so a 4 KiB write fills its page and starts its program at once:
    // controller 3 us, link 4096 ns, channel 10 240 ns, tPROG 500 us.
    let mut cfg = small(1, 1, 0.2);
    cfg.durability.volatile_write_cache = true;
    let mut ssd = filled(&cfg);
    let t = 1_000_000_000;
    let w = ssd.submit(t, Op::Write, 0, 4096);
    assert_eq!(
        w - t,
        3_000 + 4_096,
        "a plain write completes in the buffer"
    );
    let t = w + 10_000_000;
    let f = ssd.submit_with(t, Op::Write, 4096, 4096, true);
    assert_eq!(f - t, 3_000 + 4_096 + 10_240 + 500_000);
    assert_eq!(ssd.counters().fua_writes, 1);

    // With power-loss protection FUA costs only flush_ns.
    cfg.durability.volatile_write_cache = false;
    cfg.durability.flush_ns = 20_000;
    let mut ssd = filled(&cfg);
    let t = 1_000_000_000;
    let f = ssd.submit_with(t, Op::Write, 4096, 4096, true);
    assert_eq!(f - t, 3_000 + 4_096 + 20_000);
    let t = f + 10_000_000;
    let fl = ssd.flush(t);
    assert_eq!(fl - t, 3_000 + 20_000);
    assert_eq!(ssd.counters().flushes, 1);
}

#[test]
fn a_mapping_cache_miss_costs_a_translation_read_and_a_hit_nothing() {
    let mut cfg = small(2, 2, 0.2);
    cfg.mapping.cache_bytes = 64 * cfg.mapping.entry_bytes as u64;
    let mut ssd = filled(&cfg);
    let t = 1_000_000_000;
    let off = 500 * 4096;
    let miss = ssd.submit(t, Op::Read, off, 4096) - t;
    // The translation page is read first: at least one more tR.
    assert!(miss >= IDLE_READ_NS + 50_000, "{miss}");
    assert_eq!(ssd.counters().map_misses, 1);
    let t = t + 10_000_000;
    let hit = ssd.submit(t, Op::Read, off, 4096) - t;
    assert_eq!(hit, IDLE_READ_NS);
    assert_eq!(ssd.counters().map_misses, 1);

    // With the whole map in DRAM (cache_bytes = 0, the default) there are no misses.
    cfg.mapping.cache_bytes = 0;
    let mut ssd = filled(&cfg);
    assert!(idle_reads(&mut ssd, 100).iter().all(|&l| l == IDLE_READ_NS));
    assert_eq!(ssd.counters().map_misses, 0);
}

#[test]
fn a_write_miss_reads_its_translation_page_unless_told_not_to() {
    // How long the flash stays busy after one write whose entry is not cached: its page's
    // program (a page is one unit here), after the translation read when a write miss reads.
    let busy = |reads: bool| {
        let mut cfg = small(2, 2, 0.2);
        cfg.mapping.cache_bytes = 64 * cfg.mapping.entry_bytes as u64;
        cfg.mapping.write_miss_reads = reads;
        let mut ssd = filled(&cfg);
        let t = 1_000_000_000;
        ssd.submit(t, Op::Write, 700 * 4096, 4096);
        assert_eq!(ssd.counters().map_misses, 1);
        ssd.busy_remaining_ns(t)
    };
    let (with_read, without) = (busy(true), busy(false));
    // The program waits for the read (tR 50 us) instead of only for the data to cross the
    // host link (a few us), so it ends at least 40 us later.
    assert!(
        with_read >= without + 40_000,
        "the program waits for the translation read: {with_read} vs {without}"
    );
}

#[test]
fn a_writeback_programs_its_translation_page_unless_told_not_to() {
    // A 4-entry cache, 1024 entries per translation page (4096 B / 4 B): writes to units 0..4
    // (one translation page) fill it dirty; a read of unit 2048 (another page) evicts unit 0,
    // whose page goes back: one translation read, and with programs a translation program on
    // the same pool, which the next write's program there queues behind.
    let run = |programs: bool| {
        let mut cfg = small(1, 1, 0.2);
        cfg.mapping.cache_bytes = 4 * cfg.mapping.entry_bytes as u64;
        cfg.mapping.write_miss_reads = false;
        cfg.mapping.writeback_programs = programs;
        let mut ssd = filled(&cfg);
        let mut t = 1_000_000_000;
        for u in 0..4 {
            ssd.submit(t, Op::Write, u * 4096, 4096);
            t += 10_000_000;
        }
        ssd.submit(t, Op::Read, 2048 * 4096, 4096);
        assert_eq!(ssd.counters().map_writebacks, 1);
        ssd.busy_remaining_ns(t)
    };
    let (with, without) = (run(true), run(false));
    // One die: the translation program (500 us tPROG) keeps it busy after the reads end.
    assert!(
        with >= without + 500_000,
        "the translation program takes the die: {with} vs {without}"
    );
    assert!(
        without < 500_000,
        "no program is left after the reads: {without}"
    );
}

#[test]
fn a_miss_on_a_translation_page_being_read_waits_for_that_read_when_shared() {
    // Two reads at once of units 500 and 501 (one translation page: 1024 entries of 4 B),
    // neither cached: without sharing each reads the translation page (on the same die, one
    // after the other); shared, the second waits for the first one's read.
    let second = |shared: bool| {
        let mut cfg = small(2, 2, 0.2);
        cfg.mapping.cache_bytes = 64 * cfg.mapping.entry_bytes as u64;
        cfg.mapping.shared_reads = shared;
        let mut ssd = filled(&cfg);
        let t = 1_000_000_000;
        ssd.submit(t, Op::Read, 500 * 4096, 4096);
        let done = ssd.submit(t, Op::Read, 501 * 4096, 4096);
        assert_eq!(ssd.counters().map_misses, 2);
        (done - t, ssd.counters().map_shared_reads)
    };
    let (alone, none) = second(false);
    let (shared, one) = second(true);
    assert_eq!((none, one), (0, 1));
    // Not shared, the second translation read queues behind the first: one tR (50 us) more.
    assert!(
        alone >= shared + 50_000,
        "the second miss waits for the first read: {alone} vs {shared}"
    );
}

#[test]
fn firmware_jitter_follows_its_measured_distribution() {
    let mut cfg = small(2, 2, 0.2);
    // Half the reads get no jitter; the other half between 0 and 40 us, uniformly.
    cfg.firmware_jitter.read = vec![(0.0, 0), (0.5, 0), (1.0, 40_000)];
    let mut ssd = filled(&cfg);
    let mut extra: Vec<u64> = idle_reads(&mut ssd, 4000)
        .iter()
        .map(|&l| l - IDLE_READ_NS)
        .collect();
    extra.sort_unstable();
    assert!(extra[..1800].iter().all(|&e| e == 0));
    assert!(*extra.last().unwrap() <= 40_000);
    // Quantile 0.75 is 20 us and 0.95 is 36 us (wide margins: 4000 draws).
    let q75 = extra[3000] as f64;
    let q95 = extra[3800] as f64;
    assert!((17_000.0..23_000.0).contains(&q75), "{q75}");
    assert!((33_000.0..39_000.0).contains(&q95), "{q95}");
    // Writes have their own distribution (empty here: none).
    let t = 100_000_000_000;
    let w = ssd.submit(t, Op::Write, 0, 4096);
    assert_eq!(w - t, 3_000 + 4_096);
}

#[test]
fn variance_sources_off_change_nothing() {
    // Every source present but off (zero probability, no states, no jitter) gives the
    // default's latencies exactly.
    let base = small(2, 2, 0.2);
    let mut off = base.clone();
    off.read_retry.steps = 3;
    off.durability.flush_ns = 0;
    let mut a = filled(&base);
    let mut b = filled(&off);
    let mut rng = Lcg(3);
    let mut t = 1_000_000_000;
    for i in 0..3000u64 {
        let o = rng.offset_4k(a.logical_bytes());
        let op = if i % 3 == 0 { Op::Write } else { Op::Read };
        let da = a.submit(t, op, o, 4096);
        let db = b.submit(t, op, o, 4096);
        assert_eq!(da, db, "I/O {i}");
        t += 20_000;
    }
}
