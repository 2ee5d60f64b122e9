//! The crash simulator (nines_array::crashsim) over every layout it covers: bounded seeds here
//! (at least 10,000 crash points per layout); bench/crash-sim.sh explores many more. `NINES_CRASH_SIM_SEEDS` and `NINES_CRASH_SIM_POINTS`
//! set the seeds per configuration and crashes per seed; `NINES_CRASH_SIM_SEED` replays one seed.
//! Every violation prints its seed: keep it as a regression case in `REGRESSIONS` below.
//! raid0 and raid5 as `nines serve` runs them (superblocks; raid5's bitmap, resync, D/ND,
//! rebuild, degraded) are explored in nines-io's tests/crash_sim_meta.rs, whose recovery is the
//! server's start-up.

use nines_array::crashsim::{CrashConfig, Fault, Outcome, explore};
use nines_array::{LayoutSpec, SerialSpec};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small persisted serial array: members of 8 segments of 16 KiB plus the metadata region,
/// so the front-end rotates and xGC cleans segments between most crashes.
fn serial(fault: Fault, members: usize, column_members: u32) -> CrashConfig {
    let spec = SerialSpec {
        column_members,
        stripe_bytes: 8192,
        segment_bytes: 16 * 1024 * u64::from(column_members),
        unit_bytes: 4096,
        rotate_free: 1,
        gc_start: 2,
        gc_stop: 3,
        gc_depth: 2,
        move_bytes: 8192,
        start_full_bytes: 0,
        persist: true,
        zone_size_bytes: 0,
        zone_capacity_bytes: 0,
    };
    CrashConfig {
        spec: LayoutSpec::Serial(spec),
        member_sizes_bytes: vec![8 * 16 * 1024 + 2 * 4096; members],
        unit_bytes: 4096,
        tags: 6,
        units_max: 8,
        fault,
        commands_per_crash: 200,
        region_units: 0,
        zeroes: true,
        recovery: None,
    }
}

/// A persisted serial array whose mapping table spans several pages (units of 512 bytes), so
/// commits write runs of pages, several at once.
fn serial_big_table(fault: Fault) -> CrashConfig {
    let mut c = serial(fault, 4, 1);
    let LayoutSpec::Serial(s) = &mut c.spec else {
        unreachable!()
    };
    s.unit_bytes = 512;
    s.segment_bytes = 64 * 1024;
    s.stripe_bytes = 16 * 1024;
    s.move_bytes = 8192;
    c.unit_bytes = 512;
    c.units_max = 64;
    c.member_sizes_bytes = vec![16 * 64 * 1024 + 4 * 4096; 4];
    c.commands_per_crash = 400;
    c
}

fn raid0(fault: Fault) -> CrashConfig {
    CrashConfig {
        spec: LayoutSpec::Raid0 { stripe_bytes: 8192 },
        member_sizes_bytes: vec![256 * 1024; 3],
        unit_bytes: 4096,
        tags: 6,
        units_max: 8,
        fault,
        commands_per_crash: 200,
        region_units: 0,
        zeroes: true,
        recovery: None,
    }
}

fn raid5(fault: Fault) -> CrashConfig {
    CrashConfig {
        spec: LayoutSpec::Raid5 {
            chunk_bytes: 8192,
            failed: None,
            dnd: None,
            rebuild: None,
            fast_fail_ns: None,
            bitmap_region_rows: None,
        },
        member_sizes_bytes: vec![256 * 1024; 3],
        unit_bytes: 4096,
        tags: 6,
        units_max: 8,
        fault,
        commands_per_crash: 200,
        region_units: 0,
        zeroes: true,
        recovery: None,
    }
}

/// Seeds that once broke an invariant; each runs on every test run.
/// Serial's write hang after restarts (issue 38): writes waited with free space only in the
/// front-end's reserve and nothing in flight.
const REGRESSIONS: &[(&str, u64)] = &[
    ("serial-striped-power", 1_592_590_340),
    ("serial-striped-power", 1_592_590_344),
    ("serial-bigtable-kill", 1_592_590_336),
    ("serial-bigtable-kill", 1_592_590_339),
];

/// Crash points per seed by default: every layout gets at least 10,000 crash points in a test
/// run (serial's four configurations share them).
const POINTS_RAID: u64 = 1250;
const POINTS_SERIAL: u64 = 320;

fn run(name: &str, cfg: &CrashConfig) -> Outcome {
    let seeds = env_u64("NINES_CRASH_SIM_SEEDS", 8);
    let default_points = if name.starts_with("serial") {
        POINTS_SERIAL
    } else {
        POINTS_RAID
    };
    let points = env_u64("NINES_CRASH_SIM_POINTS", default_points);
    let one = std::env::var("NINES_CRASH_SIM_SEED")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    let mut total = Outcome::default();
    let mut list: Vec<u64> = match one {
        Some(s) => vec![s],
        None => (0..seeds).map(|i| 0x5eed_0000 + i).collect(),
    };
    list.extend(REGRESSIONS.iter().filter(|r| r.0 == name).map(|r| r.1));
    for seed in list {
        let o = explore(cfg, seed, points);
        total.crash_points += o.crash_points;
        total.member_commands += o.member_commands;
        total.acked_writes += o.acked_writes;
        total.flushes += o.flushes;
        total.violations.extend(o.violations);
    }
    eprintln!(
        "crash-sim {name}: {} crash points, {} member commands, {} acknowledged writes, {} \
         flushes, {} violations",
        total.crash_points,
        total.member_commands,
        total.acked_writes,
        total.flushes,
        total.violations.len()
    );
    for v in total.violations.iter().take(5) {
        eprintln!(
            "crash-sim {name}: seed {} crash {}: {}",
            v.seed, v.crash_point, v.what
        );
    }
    total
}

fn assert_none(name: &str, o: &Outcome) {
    assert!(
        o.acked_writes > 0 && o.flushes > 0,
        "{name}: nothing was exercised"
    );
    assert!(
        o.violations.is_empty(),
        "{name}: {} violations; first: seed {} crash {}: {} (replay with NINES_CRASH_SIM_SEED={})",
        o.violations.len(),
        o.violations[0].seed,
        o.violations[0].crash_point,
        o.violations[0].what,
        o.violations[0].seed
    );
}

#[test]
fn serial_persist_survives_process_kills_at_any_command() {
    let o = run("serial-kill", &serial(Fault::ProcessKill, 4, 1));
    assert_none("serial-kill", &o);
}

#[test]
fn serial_persist_survives_power_loss_at_any_command() {
    let o = run("serial-power", &serial(Fault::PowerLoss, 4, 1));
    assert_none("serial-power", &o);
}

#[test]
fn serial_persist_with_striped_columns_survives_power_loss() {
    let o = run("serial-striped-power", &serial(Fault::PowerLoss, 4, 2));
    assert_none("serial-striped-power", &o);
}

#[test]
fn serial_persist_with_a_table_of_several_pages_survives_process_kills() {
    let o = run(
        "serial-bigtable-kill",
        &serial_big_table(Fault::ProcessKill),
    );
    assert_none("serial-bigtable-kill", &o);
}

#[test]
fn raid0_survives_power_loss_at_any_command() {
    let o = run("raid0-power", &raid0(Fault::PowerLoss));
    assert_none("raid0-power", &o);
}

#[test]
fn raid5_survives_process_kills_at_any_command() {
    let o = run("raid5-kill", &raid5(Fault::ProcessKill));
    assert_none("raid5-kill", &o);
}
