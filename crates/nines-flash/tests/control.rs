//! The SSD model's control surface: Predictable Latency Mode windows, GC now, TRIM, the busy
//! queries and the fast-fail read. Each test drives a small device whose costs are known
//! exactly (`common::small`: tR 50 us, 4 KiB pages at 400 MB/s = 10,240 ns, link 2,048 ns,
//! controller 3 us), so an idle 4 KiB read takes exactly 65,288 ns.

mod common;

use common::{Lcg, small};
use nines_core::op::Op;
use nines_flash::{
    DeviceConfig, GC_RESERVE_BLOCKS, GcGoal, GcWork, PlmWindow, Precondition, ReadOutcome,
    ReadWaitCause, Ssd, SsdCounters,
};

const IDLE_READ_NS: u64 = 3_000 + 50_000 + 10_240 + 2_048;

/// Four dies on two channels, preconditioned to greedy GC's steady state: every die sits at
/// the soft threshold, so the next writes need GC.
fn steady_device() -> (DeviceConfig, Ssd) {
    let cfg = small(2, 2, 0.2);
    let mut ssd = Ssd::new(&cfg, 1);
    ssd.precondition(Precondition::Steady, 3);
    (cfg, ssd)
}

/// `n` random 4 KiB writes from `t`, 20 us apart; returns the time after the last.
fn write_random(ssd: &mut Ssd, rng: &mut Lcg, t: u64, n: u64) -> u64 {
    let mut t = t;
    for _ in 0..n {
        let off = rng.offset_4k(ssd.logical_bytes());
        ssd.submit(t, Op::Write, off, 4096);
        t += 20_000;
    }
    t
}

#[test]
fn deterministic_window_defers_gc_until_free_blocks_would_run_out() {
    let (_, mut ssd) = steady_device();
    let mut plain = ssd.clone();
    let t0 = 1_000_000_000;
    ssd.select_window(t0, PlmWindow::Deterministic);
    let st = ssd.plm_status(t0);
    assert_eq!(st.window, PlmWindow::Deterministic);
    assert_eq!(st.window_since_ns, t0);
    assert_eq!(st.dtwin_reserve_blocks, GC_RESERVE_BLOCKS);
    assert_eq!(st.dtwin_read_estimate, None);
    let budget_units = st.dtwin_write_bytes_estimate / 4096;
    assert!(budget_units > 1000, "{st:?}");

    // Exactly the estimate: no page moved, no GC at all, no violation, however the writes fall.
    let mut rng = Lcg(11);
    let t = write_random(&mut ssd, &mut rng, t0, budget_units);
    assert_eq!(ssd.ftl_stats().units_moved, 0);
    assert_eq!(ssd.ftl_stats().gc_runs, 0);
    assert_eq!(ssd.counters().window_violations, 0);
    let st = ssd.plm_status(t);
    assert_eq!(st.dtwin_write_bytes_estimate, 0);
    assert!(st.gc_debt_blocks > 0, "{st:?}");
    assert!(st.free_blocks_min <= GC_RESERVE_BLOCKS + 1, "{st:?}");

    // Without a window the same writes run GC (soft and hard) all along.
    let mut rng = Lcg(11);
    write_random(&mut plain, &mut rng, t0, budget_units);
    assert!(plain.ftl_stats().units_moved > 0);
    assert!(plain.counters().gc_soft_episodes + plain.counters().gc_hard_episodes > 0);

    // One page more: the die would run out, so GC is forced, and counted as a violation.
    let t = write_random(&mut ssd, &mut rng, t, 1);
    assert_eq!(ssd.counters().window_violations, 1);
    assert!(ssd.ftl_stats().gc_runs > 0);
    assert_eq!(ssd.counters().gc_soft_episodes, 0);
    // Forced GC reclaims only what keeps the die working, so further writes keep going.
    write_random(&mut ssd, &mut rng, t, 5_000);
    let st = ssd.plm_status(t + 100_000_000);
    assert_eq!(st.window_violations, ssd.counters().window_violations);
    assert!(st.free_blocks_min >= GC_RESERVE_BLOCKS, "{st:?}");
    assert_eq!(ssd.counters().gc_soft_episodes, 0);
    ssd.ftl().check_consistency().unwrap();
}

#[test]
fn non_deterministic_window_pays_the_gc_debt_at_once() {
    let (_, mut ssd) = steady_device();
    let t0 = 1_000_000_000;
    ssd.select_window(t0, PlmWindow::Deterministic);
    let units = ssd.plm_status(t0).dtwin_write_bytes_estimate / 4096;
    let mut rng = Lcg(5);
    // Then long enough for the programs queued in the write buffer to finish.
    let t = write_random(&mut ssd, &mut rng, t0, units) + 1_000_000_000;
    let before = ssd.plm_status(t);
    assert!(before.gc_debt_blocks > 0);
    assert_eq!(ssd.busy_remaining_ns(t), 0, "idle before NDWIN");

    let gc = ssd.select_window(t, PlmWindow::NonDeterministic);
    let after = ssd.plm_status(t);
    assert_eq!(after.window, PlmWindow::NonDeterministic);
    assert_eq!(after.gc_debt_blocks, 0, "{after:?}");
    assert!(after.free_blocks_min >= after.gc_soft_blocks);
    assert!(gc.victims >= before.gc_debt_blocks, "{gc:?} {before:?}");
    assert_eq!(ssd.counters().gc_now_victims, gc.victims);
    // The GC occupies the dies from `t`: the device is busy until the last die finishes.
    assert!(gc.until_ns > t);
    assert_eq!(ssd.busy_remaining_ns(t), gc.until_ns - t);
    // A read now waits behind a page copy: a preemption, not the whole episode.
    let off = 4096;
    let wait = ssd.read_wait_ns(t, off, 4096);
    assert!(wait > 0 && wait < gc.until_ns - t, "{wait}");
    assert_eq!(ssd.submit(t, Op::Read, off, 4096) - t, IDLE_READ_NS + wait);
    assert_eq!(ssd.counters().gc_preemptions, 1);
    ssd.ftl().check_consistency().unwrap();
}

#[test]
fn gc_now_reaches_its_target_and_stays_within_its_budget() {
    let (cfg, ssd) = steady_device();
    let t = 1_000_000_000;
    let (soft, _) = cfg.gc_thresholds_blocks();
    let target = soft + 8;

    let mut a = ssd.clone();
    let done = a.gc_now(
        t,
        GcGoal {
            free_blocks_per_die: Some(target),
            budget_ns: None,
        },
    );
    assert!(done.victims >= 8 * 4, "{done:?}");
    assert!(a.plm_status(t).free_blocks_min >= target);
    assert_eq!(a.busy_remaining_ns(t), done.until_ns - t);
    assert_eq!(a.ftl_stats().units_moved, done.units_moved);

    // A budget of a fifth of that: every die's GC ends inside it, and it did something.
    let budget = (done.until_ns - t) / 5;
    let mut b = ssd.clone();
    let part = b.gc_now(
        t,
        GcGoal {
            free_blocks_per_die: Some(target),
            budget_ns: Some(budget),
        },
    );
    assert!(part.victims > 0 && part.victims < done.victims, "{part:?}");
    assert!(part.until_ns <= t + budget);
    assert!(b.busy_remaining_ns(t) <= budget);
    // A budget shorter than one victim runs nothing.
    let mut c = ssd.clone();
    let none = c.gc_now(
        t,
        GcGoal {
            free_blocks_per_die: Some(target),
            budget_ns: Some(1_000),
        },
    );
    assert_eq!((none.victims, none.until_ns), (0, t));
    assert_eq!(c.busy_remaining_ns(t), 0);
    for s in [&a, &b, &c] {
        s.ftl().check_consistency().unwrap();
    }
}

/// Die time of GC work on `common::small` (no copy-back: every moved page crosses the channel
/// twice at 10,240 ns).
fn small_gc_ns(w: &GcWork) -> u64 {
    w.page_reads as u64 * 50_000
        + w.page_programs as u64 * 500_000
        + w.erases as u64 * 2_000_000
        + (w.page_reads + w.page_programs) as u64 * 10_240
}

/// A time budget shorter than any whole victim still collects garbage: the victims are moved a
/// few page copies per call, each call ending inside its budget, and later calls finish them
/// (IODA's GC windows need this: with whole victims only, a 50 ms window on a TLC drive never
/// started one and all GC was forced into deterministic windows).
#[test]
fn gc_now_budget_shorter_than_a_victim_moves_it_page_by_page() {
    let (cfg, ssd) = steady_device();
    let (soft, _) = cfg.gc_thresholds_blocks();
    let target = soft + 2;
    let pools = ssd.ftl().pools();
    // An erase and three page copies: shorter than any victim of this steady state.
    let budget = 2_000_000
        + 3 * small_gc_ns(&GcWork {
            page_reads: 1,
            page_programs: 1,
            ..GcWork::default()
        });
    for p in 0..pools {
        let whole = ssd.ftl().gc_once_work(p);
        assert!(small_gc_ns(&whole) > budget, "pool {p}: {whole:?}");
    }
    let mut s = ssd.clone();
    let mut t = 1_000_000_000;
    let first = s.gc_now(
        t,
        GcGoal {
            free_blocks_per_die: Some(target),
            budget_ns: Some(budget),
        },
    );
    assert_eq!(first.victims, 0, "{first:?}");
    assert!(first.units_moved > 0, "{first:?}");
    assert!(first.until_ns <= t + budget && s.busy_remaining_ns(t) <= budget);
    s.ftl().check_consistency().unwrap();
    let mut calls = 1;
    while s.plm_status(t).free_blocks_min < target {
        t += 10_000_000;
        let d = s.gc_now(
            t,
            GcGoal {
                free_blocks_per_die: Some(target),
                budget_ns: Some(budget),
            },
        );
        assert!(d.until_ns <= t + budget, "call {calls}: {d:?}");
        assert!(s.busy_remaining_ns(t) <= budget);
        s.ftl().check_consistency().unwrap();
        calls += 1;
        assert!(calls < 1000, "partial GC never reached the target");
    }
    assert!(s.counters().gc_now_victims >= 2 * pools as u64);
    // The same garbage as whole-victim GC collects, to within the victims the two picked.
    let mut whole = ssd.clone();
    whole.gc_now(
        t,
        GcGoal {
            free_blocks_per_die: Some(target),
            budget_ns: None,
        },
    );
    assert!(whole.plm_status(t).free_blocks_min >= target);
    // Host writes after partial GC (a victim may be half moved) keep the maps consistent.
    let mut rng = Lcg(11);
    write_random(&mut s, &mut rng, t + 1_000_000_000, 20_000);
    s.ftl().check_consistency().unwrap();
}

/// Each read that waits for its die is counted under what it waited behind.
#[test]
fn read_waits_are_counted_by_cause() {
    let (_, ssd) = steady_device();
    let t = 1_000_000_000;
    // An idle device: no wait.
    let mut a = ssd.clone();
    assert_eq!(a.submit(t, Op::Read, 0, 4096), t + IDLE_READ_NS);
    assert!(a.counters().read_waits.iter().all(|w| w.reads == 0));
    // GC the host asked for: a read waits for the page copy in progress.
    let mut b = ssd.clone();
    let gc = b.gc_now(
        t,
        GcGoal {
            free_blocks_per_die: Some(ssd.plm_status(t).gc_soft_blocks + 1),
            budget_ns: None,
        },
    );
    assert!(gc.victims > 0);
    let done = b.submit(t + 1_000, Op::Read, 0, 4096);
    let w = b.counters().read_waits[ReadWaitCause::GcRequested as usize];
    assert_eq!(w.reads, 1);
    assert_eq!(w.wait_ns_total, done - (t + 1_000) - IDLE_READ_NS);
    assert!(w.wait_ns_total > 0 && w.wait_ns_max == w.wait_ns_total);
    assert_eq!(
        b.counters().read_waits.iter().map(|w| w.reads).sum::<u64>(),
        1
    );
    // A program: writes fill pages on every die; a read right after waits behind a program.
    let mut c = ssd.clone();
    c.select_window(t, PlmWindow::Deterministic);
    let mut rng = Lcg(5);
    let end = write_random(&mut c, &mut rng, t, 64);
    let before = c.counters().read_waits;
    let mut off = 0;
    let mut waited = false;
    while off < c.logical_bytes() && !waited {
        let now = end + off / 4096;
        let d = c.submit(now, Op::Read, off, 4096);
        waited = d > now + IDLE_READ_NS;
        off += 4096;
    }
    assert!(waited, "no read found a busy die");
    let after = c.counters().read_waits;
    let p = ReadWaitCause::Programs as usize;
    assert_eq!(after[p].reads, before[p].reads + 1, "{after:?}");
    assert_eq!(after[ReadWaitCause::GcRequested as usize].reads, 0);
}

/// Before every read of a mixed workload, ask how long it would wait; then submit it: the
/// answer is exactly the extra latency, whatever the die is doing (programs, hard and soft
/// GC, GC started by the read's own arrival, suspensions, housekeeping, controller queue).
/// Returns the counters, and how many reads waited behind GC their own arrival started.
fn read_wait_is_the_actual_wait(cfg: &DeviceConfig, gap_ns_max: u64) -> (SsdCounters, u64) {
    let mut ssd = Ssd::new(cfg, 1);
    ssd.precondition(Precondition::Steady, 3);
    let mut rng = Lcg(21);
    let mut t = 0u64;
    let mut waited = 0;
    let mut behind_own_gc = 0;
    for i in 0..40_000u64 {
        t += rng.next() % gap_ns_max;
        let off = rng.offset_4k(ssd.logical_bytes());
        if i % 3 == 0 {
            ssd.submit(t, Op::Write, off, 4096);
            continue;
        }
        let predicted = ssd.read_wait_ns(t, off, 4096);
        let busy = ssd.range_busy_remaining_ns(t, off, 4096);
        let before = ssd.counters();
        let latency = ssd.submit(t, Op::Read, off, 4096) - t;
        assert_eq!(
            latency,
            IDLE_READ_NS + predicted,
            "read {i} at {t} ns, offset {off}"
        );
        let after = ssd.counters();
        // The dies' reservation bounds the wait (counted from the controller's latency on),
        // unless the read got ahead of it (suspend, GC preemption).
        if !cfg.suspend.enabled && after.gc_preemptions == before.gc_preemptions {
            assert!(busy <= predicted + 3_000, "busy {busy} > wait {predicted}");
        }
        waited += u64::from(predicted > 0);
        if busy == 0 && after.gc_soft_episodes > before.gc_soft_episodes && predicted > 0 {
            behind_own_gc += 1;
        }
    }
    assert!(waited > 1_000, "{waited} reads waited");
    (ssd.counters(), behind_own_gc)
}

#[test]
fn read_wait_query_equals_the_actual_wait() {
    // Light load: soft GC on idle dies, reads preempting GC, and reads that wait behind the
    // GC their own arrival starts.
    let (cfg, _) = steady_device();
    let (c, own) = read_wait_is_the_actual_wait(&cfg, 400_000);
    assert!(c.gc_soft_episodes > 100 && c.gc_preemptions > 100, "{c:?}");
    assert!(own > 10, "{own} reads behind their own soft GC");
    // Heavy load with suspend, housekeeping and a controller that caps the command rate: the
    // channel timelines fill up and merge.
    let mut cfg = small(2, 2, 0.2);
    cfg.suspend.enabled = true;
    cfg.suspend.resume_overhead_ns = 5_000;
    cfg.housekeeping.period_ns = 3_000_000;
    cfg.housekeeping.duration_ns = 200_000;
    cfg.controller.command_ns = 15_000;
    let (c, _) = read_wait_is_the_actual_wait(&cfg, 40_000);
    assert!(c.suspensions > 100 && c.housekeeping_stalls > 100, "{c:?}");
    assert!(c.gc_hard_episodes > 10, "{c:?}");
}

#[test]
fn fast_fail_read_reserves_nothing_and_otherwise_is_a_read() {
    let (_, mut ssd) = steady_device();
    let t = 1_000_000_000;
    let gc = ssd.gc_now(
        t,
        GcGoal {
            free_blocks_per_die: Some(ssd.plm_status(t).gc_soft_blocks + 4),
            budget_ns: None,
        },
    );
    assert!(gc.victims > 0);
    let t = t + 10_000;
    let off = 3 * 4096;
    let wait = ssd.read_wait_ns(t, off, 4096);
    assert!(wait > 100_000, "{wait}");

    // Busy: the refusal says how long, arrives after the controller's latency, and leaves the
    // device exactly as it was: a twin that never saw it behaves identically afterwards.
    let mut twin = ssd.clone();
    let r = ssd.read_fast_fail(t, off, 4096, 100_000);
    assert_eq!(
        r,
        ReadOutcome::Busy {
            remaining_ns: wait,
            completion_ns: t + 3_000
        }
    );
    assert_eq!(ssd.counters().fast_fail_busy, 1);
    let mut rng = Lcg(3);
    let mut u = t;
    for i in 0..5_000u64 {
        u += rng.next() % 30_000;
        let o = rng.offset_4k(ssd.logical_bytes());
        let op = if i % 4 == 0 { Op::Write } else { Op::Read };
        assert_eq!(
            ssd.submit(u, op, o, 4096),
            twin.submit(u, op, o, 4096),
            "{i}"
        );
    }
    let (mut a, mut b) = (ssd.counters(), twin.counters());
    a.fast_fail_busy = 0;
    b.fast_fail_busy = 0;
    assert_eq!(a, b);
    assert_eq!(ssd.ftl_stats(), twin.ftl_stats());

    // Under the threshold it is the normal read, to the nanosecond.
    let u = u + 1_000;
    let o = 5 * 4096;
    let w = ssd.read_wait_ns(u, o, 4096);
    let r = ssd.read_fast_fail(u, o, 4096, w);
    assert_eq!(
        r,
        ReadOutcome::Done {
            completion_ns: twin.submit(u, Op::Read, o, 4096)
        }
    );
    assert_eq!(ssd.counters().reads, twin.counters().reads);
}

#[test]
fn trim_takes_the_controller_and_unmaps() {
    let (_, mut ssd) = steady_device();
    let t = 1_000_000_000;
    let units = ssd.ftl().logical_units() as u64;
    let done = ssd.trim(t, 0, 1 << 20);
    assert_eq!(done, t + 3_000);
    assert_eq!(ssd.ftl_stats().trimmed_units, 256);
    assert_eq!(ssd.counters().trims, 1);
    // Partial units at the ends are kept.
    ssd.trim(done, (1 << 20) + 100, 8192);
    assert_eq!(ssd.ftl_stats().trimmed_units, 257);
    assert!(units > 257);
    ssd.ftl().check_consistency().unwrap();
}

/// Queries and a window of `Off` change nothing: a device asked everything before every
/// command gives exactly the completions and counters of one that was never asked.
#[test]
fn queries_and_an_unused_window_change_nothing() {
    let (_, base) = steady_device();
    let (mut asked, mut plain) = (base.clone(), base);
    let mut rng = Lcg(77);
    let mut t = 0u64;
    for i in 0..30_000u64 {
        t += rng.next() % 25_000;
        let off = rng.offset_4k(asked.logical_bytes());
        let op = if i % 3 == 0 { Op::Write } else { Op::Read };
        asked.read_wait_ns(t, off, 4096);
        asked.range_busy_remaining_ns(t, off, 4096);
        asked.busy_remaining_ns(t);
        asked.plm_status(t);
        if i % 1000 == 0 {
            asked.select_window(t, PlmWindow::Off);
        }
        assert_eq!(
            asked.submit(t, op, off, 4096),
            plain.submit(t, op, off, 4096)
        );
    }
    assert_eq!(asked.counters(), plain.counters());
    assert_eq!(asked.ftl_stats(), plain.ftl_stats());
    assert!(plain.ftl_stats().gc_runs > 0);
}

#[test]
#[should_panic(expected = "non-decreasing time")]
fn submit_asserts_monotone_time() {
    let (_, mut ssd) = steady_device();
    ssd.submit(1_000, Op::Read, 0, 4096);
    ssd.submit(999, Op::Read, 0, 4096);
}

#[test]
#[should_panic(expected = "non-decreasing time")]
fn control_calls_assert_monotone_time() {
    let (_, mut ssd) = steady_device();
    ssd.select_window(1_000, PlmWindow::Deterministic);
    ssd.plm_status(999);
}

#[test]
fn gc_once_work_predicts_gc_once() {
    let (_, mut ssd) = steady_device();
    let mut rng = Lcg(9);
    for round in 0..200 {
        let units = ssd.ftl().logical_units() as u64;
        for _ in 0..500 {
            let lpn = rng.next() % units;
            ssd.ftl_mut()
                .write_unit(lpn as u32, &mut nines_flash::GcWork::default());
        }
        let die = round % ssd.dies();
        let predicted = ssd.ftl().gc_once_work(die);
        let done = ssd.ftl_mut().gc_once(die);
        assert_eq!(predicted, done, "round {round}");
    }
    ssd.ftl().check_consistency().unwrap();
}
