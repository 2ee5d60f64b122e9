//! Emulated SSDs (`emu:`) through the real driver: data written through every layout reads back
//! byte for byte (one process, two runs on the same opened devices), and an I/O completes no
//! earlier than the model says.

use std::path::Path;

use nines_array::LayoutSpec;
use nines_core::op::Op;
use nines_core::workload::{RwMode, WorkloadSpec};
use nines_io::driver::{self, DriverConfig, DriverTarget};
use nines_io::emu::EmuContext;
use nines_io::engine::EngineKind;
use nines_io::target::{Target, TargetOptions};

/// A small afa-m2-2018 (4 dies of 256 blocks of 512 KiB): preconditioned in well under a second.
pub const TINY_TOML: &str = r#"
name = "tiny"
description = "4 dies of 256 blocks of 512 KiB: a small afa-m2-2018 for fast tests"
[geometry]
channels = 2
chips_per_channel = 1
dies_per_chip = 2
planes_per_die = 1
blocks_per_plane = 256
pages_per_block = 32
page_size_bytes = 16384
map_unit_bytes = 4096
[timing]
read_ns = 14_000
program_ns = 1_400_000
erase_ns = 3_500_000
channel_bytes_per_s = 1_200_000_000
[ftl]
over_provisioning = 0.07
gc_soft_threshold = 0.05
gc_hard_threshold = 0.02
[controller]
overhead_ns = 2_000
command_ns = 6_250
read_bytes_per_s = 1_700_000_000
write_bytes_per_s = 750_000_000
[buffer]
write_buffer_bytes = 1_048_576
"#;

const MEMBER_BYTES: u64 = 16 << 20;

fn open(dir: &Path, n: usize, ctx: &EmuContext) -> Vec<Target> {
    let toml = dir.join("tiny.toml");
    std::fs::write(&toml, TINY_TOML).unwrap();
    let spec = format!("emu:{}:16m", toml.display());
    let opts = TargetOptions {
        write: true,
        ..TargetOptions::default()
    };
    (0..n)
        .map(|_| Target::open_with(Path::new(&spec), &opts, ctx).unwrap())
        .collect()
}

fn dtargets(ts: &[Target]) -> Vec<DriverTarget> {
    ts.iter()
        .enumerate()
        .map(|(i, t)| DriverTarget {
            name: format!("emu{i}"),
            fd: t.fd(),
            size_bytes: t.size_bytes(),
            logical_block_bytes: t.logical_block_bytes(),
            block_device: false,
            emu: t.emu().cloned(),
            zoned: None,
        })
        .collect()
}

fn run(ts: &[Target], layout: &LayoutSpec, spec: WorkloadSpec) -> driver::DriverOutcome {
    let mut cfg = DriverConfig::new(spec, EngineKind::Libaio);
    cfg.layout = layout.clone();
    cfg.verify = true;
    driver::run(&dtargets(ts), cfg).unwrap_or_else(|e| panic!("{}: {e}", layout.name()))
}

/// Fill the whole volume sequentially with the pattern, then read it back at random.
fn round_trip(layout: LayoutSpec, members: usize, volume_bytes: u64) {
    let dir = tempfile::tempdir().unwrap();
    let ctx = EmuContext::new(1 << 30, None, 3);
    let ts = open(dir.path(), members, &ctx);
    assert!(
        ts.iter()
            .all(|t| t.fd() == -1 && t.size_bytes() == MEMBER_BYTES)
    );
    let bs = 64u64 << 10;
    let write = WorkloadSpec {
        rw: RwMode::Write,
        block_size_bytes: bs,
        iodepth: 4,
        ios_max: Some(volume_bytes / bs),
        runtime_ns: None,
        seed: 3,
        ..WorkloadSpec::default()
    };
    let out = run(&ts, &layout, write);
    assert_eq!(
        out.devices[0].recorder.dir(Op::Write).ios,
        volume_bytes / bs
    );
    let read = WorkloadSpec {
        rw: RwMode::RandRead,
        block_size_bytes: 8 << 10,
        iodepth: 8,
        ios_max: Some(3000),
        runtime_ns: None,
        seed: 3,
        ..WorkloadSpec::default()
    };
    let out = run(&ts, &layout, read);
    assert_eq!(out.devices[0].recorder.dir(Op::Read).ios, 3000);
    // Every emulated member did work, and the emulation saw each I/O complete no earlier than
    // the model's completion time (overhead is never negative; it is measured per device).
    for t in &ts {
        let h = t.emu().unwrap();
        let o = h.overhead();
        assert!(o.count > 0, "{}: no I/O reached the model", h.info().spec);
        let stored = h.with_device(|d| d.stored_blocks()).unwrap();
        assert!(stored > 0, "data kept");
    }
    // A different seed's pattern is not what was written: verification really reads the data.
    let mut cfg = DriverConfig::new(
        WorkloadSpec {
            rw: RwMode::RandRead,
            block_size_bytes: 8 << 10,
            ios_max: Some(100),
            runtime_ns: None,
            seed: 4,
            ..WorkloadSpec::default()
        },
        EngineKind::Libaio,
    );
    cfg.layout = layout.clone();
    cfg.verify = true;
    let e = driver::run(&dtargets(&ts), cfg).unwrap_err();
    assert!(e.to_string().contains("--verify"), "{e}");
}

#[test]
fn data_round_trips_on_one_emulated_device() {
    round_trip(LayoutSpec::Independent, 1, MEMBER_BYTES);
}

#[test]
fn data_round_trips_through_raid0_of_emulated_devices() {
    round_trip(
        LayoutSpec::Raid0 {
            stripe_bytes: 16 << 10,
        },
        3,
        3 * MEMBER_BYTES,
    );
}

#[test]
fn data_round_trips_through_raid5_of_emulated_devices() {
    round_trip(
        LayoutSpec::Raid5 {
            chunk_bytes: 16 << 10,
            failed: None,
            dnd: None,
            rebuild: None,
            fast_fail_ns: None,
            bitmap_region_rows: None,
        },
        4,
        3 * MEMBER_BYTES,
    );
}

/// Reads of a preconditioned device take the model's time, and store no data.
#[test]
fn reads_take_the_models_time_and_store_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = EmuContext::new(1 << 30, None, 3);
    let ts = open(dir.path(), 1, &ctx);
    let mut cfg = DriverConfig::new(
        WorkloadSpec {
            rw: RwMode::RandRead,
            ios_max: Some(10),
            runtime_ns: None,
            ..WorkloadSpec::default()
        },
        EngineKind::Libaio,
    );
    cfg.verify = false;
    let out = driver::run(&dtargets(&ts), cfg).unwrap();
    assert_eq!(out.devices[0].recorder.dir(Op::Read).ios, 10);
    // Reads at QD1 on a device filled by preconditioning: each costs at least the model's
    // flash read (14 us) plus its controller overhead; the real clock honours it.
    let min_ns = out.devices[0].recorder.dir(Op::Read).hist.min();
    assert!(
        min_ns >= 16_000,
        "a read completed in {min_ns} ns, before the model's time"
    );
    assert_eq!(
        ts[0].emu().unwrap().with_device(|d| d.stored_blocks()),
        Some(0)
    );
}
