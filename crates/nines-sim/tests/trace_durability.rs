//! A blkparse replay carries what the device saw: FUA writes pay the model's FUA cost, flush
//! requests reach the model as flushes (and pay a power-state exit when they are the first
//! command after an idle gap, instead of the read after them, which waits only for the rest of
//! that wake-up), and `--trace-start asleep` makes
//! the first request pay the deepest state's exit. Exact times on a one-die device without any
//! variance source.

use nines_core::latlog::LatLogReader;
use nines_core::op::Op;
use nines_core::workload::WorkloadSpec;
use nines_flash::{DeviceConfig, Precondition};
use nines_sim::{CompletionMode, HostConfig, SimConfig, prepare, run_logged};
use nines_trace::{FitPolicy, TraceFormat, TraceOptions, read_trace};

const FLUSH_NS: u64 = 40_000;
const IDLE_NS: u64 = 5_000_000;
const EXIT_NS: u64 = 1_000_000;
/// An idle 4 KiB read of an unwritten unit: controller 3 us + tR 50 us + 4096 B over the
/// channel at 400 MB/s (10,240 ns) + over the link at 2 GB/s (2,048 ns); as in sim_driver.rs.
const READ_NS: u64 = 3_000 + 50_000 + 10_240 + 2_048;
/// A 4 KiB write into the power-loss-protected buffer: controller 3 us + 4096 B over the link
/// at 1 GB/s.
const WRITE_NS: u64 = 3_000 + 4_096;

fn device(volatile: bool) -> DeviceConfig {
    let text = format!(
        r#"
name = "one-die"
[geometry]
channels = 1
chips_per_channel = 1
dies_per_chip = 1
planes_per_die = 1
blocks_per_plane = 512
pages_per_block = 64
page_size_bytes = 4096
[timing]
read_ns = 50_000
program_ns = 500_000
erase_ns = 2_000_000
channel_bytes_per_s = 400_000_000
[ftl]
over_provisioning = 0.2
gc_soft_threshold = 0.02
gc_hard_threshold = 0.01
[controller]
overhead_ns = 3_000
read_bytes_per_s = 2_000_000_000
write_bytes_per_s = 1_000_000_000
[durability]
volatile_write_cache = {volatile}
flush_ns = {FLUSH_NS}
[[power.states]]
idle_ns = {IDLE_NS}
exit_ns = {EXIT_NS}
"#
    );
    DeviceConfig::from_toml(&text, "one-die").unwrap()
}

/// Replays `text` (blkparse) on one device; returns (offset, op, latency) of every measured
/// request in completion order, and the device's internals from the report.
fn replay(text: &str, volatile: bool, asleep: bool) -> (Vec<(u64, Op, u64)>, serde_json::Value) {
    let mut trace = read_trace(
        text.as_bytes(),
        TraceFormat::Blkparse,
        &TraceOptions::default(),
    )
    .unwrap();
    let cfg = SimConfig {
        scale: Some(1.0),
        precondition: Some(Precondition::None),
        host: HostConfig::new(CompletionMode::None),
        ..SimConfig::new(device(volatile), 1, WorkloadSpec::default())
    };
    let mut prep = prepare(&cfg, true).unwrap();
    trace
        .fit(prep.target_size_bytes(), prep.targets(), FitPolicy::Error)
        .unwrap();
    if asleep {
        assert!(prep.sleep_members());
    }
    let mut lat = Vec::new();
    let out = run_logged(
        &mut prep,
        Some(&trace),
        nines_sim::Logs {
            lat: Some(&mut lat),
            hdr: None,
        },
        None,
    )
    .unwrap();
    let got = LatLogReader::new(&lat[..])
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (r.offset_bytes, r.op, r.latency_ns)
        })
        .collect();
    let json: serde_json::Value = serde_json::from_str(&out.report.to_json()).unwrap();
    let info = serde_json::json!({
        "internals": json["devices"][0]["internals"],
        "trace": out.report.config.extra["trace"],
    });
    (got, info)
}

const TRACE: &str = "\
  259,0  0  1  0.000000000  10  D   W 0 + 8 [app]
  259,0  0  2  0.001000000  10  D WFS 8 + 8 [app]
  259,0  0  3  0.002000000  10  D  FN [kworker]
  259,0  0  4  0.003000000  10  D   R 64 + 8 [app]
  259,0  0  5  0.020000000  10  D  FN [kworker]
  259,0  0  6  0.020100000  10  D   R 128 + 8 [app]
";

#[test]
fn fua_writes_and_flushes_reach_the_model_with_their_exact_costs() {
    let (got, info) = replay(TRACE, false, false);
    // Power-loss protection: the FUA write costs flush_ns more than the plain one; the read after
    // 17 ms of idle does not pay a power-state exit of its own: the flush 100 us before it
    // woke the device, and the read waits for the rest of that wake-up (no I/O command is
    // processed until the controller is operational: 1 ms from the flush, 900 us from it).
    assert_eq!(
        got,
        vec![
            (0, Op::Write, WRITE_NS),
            (4096, Op::Write, WRITE_NS + FLUSH_NS),
            (64 * 512, Op::Read, READ_NS),
            (128 * 512, Op::Read, READ_NS + EXIT_NS - 100_000),
        ]
    );
    let i = &info["internals"];
    assert_eq!(i["fua_writes"], 1, "{info}");
    assert_eq!(i["flushes"], 2, "{info}");
    assert_eq!(i["power_exits"], 1, "{info}");
    let t = &info["trace"];
    assert_eq!(
        (&t["reads"], &t["writes"], &t["fua_writes"], &t["flushes"]),
        (&2.into(), &2.into(), &1.into(), &2.into()),
        "{t}"
    );
    assert_eq!(t["block_size_bytes_mode"], 4096);

    // Without the flush lines (what the reader did before), the read pays the exit instead.
    let no_flush: String = TRACE
        .lines()
        .filter(|l| !l.contains(" FN "))
        .map(|l| format!("{l}\n"))
        .collect();
    let (got, _) = replay(&no_flush, false, false);
    assert_eq!(got[3], (128 * 512, Op::Read, READ_NS + EXIT_NS));
}

#[test]
fn on_a_volatile_cache_a_fua_write_waits_for_its_program() {
    let (got, info) = replay(TRACE, true, false);
    // The plain write completes from the cache. The FUA write's page is padded and programmed
    // at once: it completes after its channel transfer (10,240 ns) and tPROG, then flush_ns.
    assert_eq!(got[0], (0, Op::Write, WRITE_NS));
    assert_eq!(
        got[1],
        (4096, Op::Write, WRITE_NS + 10_240 + 500_000 + FLUSH_NS)
    );
    assert_eq!(info["internals"]["fua_writes"], 1);
}

#[test]
fn a_replay_started_asleep_pays_the_deepest_exit_on_its_first_request() {
    let (got, info) = replay(TRACE, false, true);
    assert_eq!(got[0], (0, Op::Write, WRITE_NS + EXIT_NS));
    // Then as awake.
    assert_eq!(got[1], (4096, Op::Write, WRITE_NS + FLUSH_NS));
    assert_eq!(info["internals"]["power_exits"], 2);
    let (awake, _) = replay(TRACE, false, false);
    assert_eq!(awake[0], (0, Op::Write, WRITE_NS));
}
