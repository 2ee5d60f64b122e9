//! MQSim's mechanisms as model options (issue 17 item 4), each against its definition.

mod common;

use common::{Lcg, small};
use nines_core::op::Op;
use nines_flash::config::{Allocation, ParallelUnit};
use nines_flash::{Precondition, Ssd};

#[test]
fn a_chip_runs_one_flash_command_at_a_time_when_it_is_the_parallel_unit() {
    // One channel, one chip, two dies: a sequential fill puts unit 0 on die 0, unit 1 on die 1.
    let mut done_b = Vec::new();
    for unit in [ParallelUnit::Die, ParallelUnit::Chip] {
        let mut cfg = small(1, 2, 0.2);
        cfg.geometry.parallel_unit = unit;
        cfg.validate().unwrap();
        let mut ssd = Ssd::new(&cfg, 1);
        ssd.precondition(Precondition::Fill, 1);
        let t = 1_000_000_000;
        let a = ssd.submit(t, Op::Read, 0, 4096);
        let b = ssd.submit(t, Op::Read, 4096, 4096);
        assert_eq!(a - t, 3_000 + 50_000 + 10_240 + 2_048, "{unit:?}");
        done_b.push(b - t);
    }
    // Dies: both tR at once, the second transfer waits for the channel.
    assert_eq!(done_b[0], 3_000 + 50_000 + 2 * 10_240 + 2_048);
    // Chip: the second die waits until the first has read and drained its register.
    assert_eq!(done_b[1], 3_000 + 2 * (50_000 + 10_240) + 2_048);
}

#[test]
fn static_allocation_fixes_each_unit_to_its_pool_through_overwrites_and_gc() {
    let mut cfg = small(2, 2, 0.2);
    cfg.ftl.allocation = Allocation::Static;
    cfg.validate().unwrap();
    let mut ssd = Ssd::new(&cfg, 1);
    ssd.precondition(Precondition::Steady, 3);
    let mut rng = Lcg(5);
    let mut t = 1_000_000_000;
    for _ in 0..5000 {
        let o = rng.offset_4k(ssd.logical_bytes());
        t = ssd.submit(t, Op::Write, o, 4096).max(t + 1_000);
    }
    assert!(ssd.ftl_stats().write_amplification() > 1.0, "GC ran");
    let pools = ssd.ftl().pools();
    for lpn in 0..ssd.ftl().logical_units() {
        assert_eq!(ssd.ftl().locate(lpn).0, lpn % pools, "unit {lpn}");
    }
    ssd.ftl().check_consistency().unwrap();
}
