//! `ftl.gc_mode`: how GC shares a die with host commands, in exact times on a one-die device
//! (`common::small`: tR 50 us, 4 KiB pages at 400 MB/s = 10,240 ns, link 2,048 ns, controller
//! 3 us, tPROG 500 us, tBERS 2 ms, copy-back GC).

mod common;

use common::{Lcg, small};
use nines_core::op::Op;
use nines_flash::config::GcMode;
use nines_flash::{DeviceConfig, GcGoal, Precondition, Ssd};

const TR: u64 = 50_000;
const XFER: u64 = 10_240;
const LINK: u64 = 2_048;
const CTRL: u64 = 3_000;

/// One die, preconditioned to greedy GC's steady state, in `mode`.
fn one_die(mode: GcMode) -> (DeviceConfig, Ssd) {
    let mut cfg = small(1, 1, 0.2);
    cfg.ftl.gc_mode = mode;
    if mode == GcMode::Foreground {
        cfg.ftl.gc_batch_blocks = 3;
    }
    cfg.validate().unwrap();
    let mut ssd = Ssd::new(&cfg, 1);
    ssd.precondition(Precondition::Steady, 3);
    (cfg, ssd)
}

/// Starts a GC episode of at least two victims on the idle die at `t`; returns its end.
fn start_gc(ssd: &mut Ssd, t: u64) -> u64 {
    let want = ssd.plm_status(t).free_blocks_min + 2;
    let done = ssd.gc_now(
        t,
        GcGoal {
            free_blocks_per_die: Some(want),
            budget_ns: None,
        },
    );
    assert!(done.victims >= 2 && done.units_moved > 0, "{done:?}");
    // A victim's copies and its erases: far longer than a read.
    assert!(done.until_ns > t + 2 * 2_000_000, "{done:?}");
    done.until_ns
}

#[test]
fn read_behind_a_blocking_victim_waits_for_the_whole_victim() {
    let t = 1_000_000_000;
    let (_, mut ssd) = one_die(GcMode::Blocking);
    let gc_end = start_gc(&mut ssd, t);
    let at = t + 1_000;
    let done = ssd.submit(at, Op::Read, 0, 4096);
    // The read's tR starts when the die is released: after the last erase of the episode.
    assert_eq!(done, gc_end + TR + XFER + LINK);
    assert_eq!(ssd.counters().gc_preemptions, 0);
    // The read-wait query (fast-fail's) predicted the same.
    let (_, mut again) = one_die(GcMode::Blocking);
    start_gc(&mut again, t);
    assert_eq!(
        again.read_wait_ns(at, 0, 4096),
        gc_end - (at + CTRL),
        "the query must say what the read will wait"
    );
}

#[test]
fn read_behind_preempt_gc_waits_for_one_page_copy_only() {
    let t = 1_000_000_000;
    let (_, mut ssd) = one_die(GcMode::Preempt);
    let gc_end = start_gc(&mut ssd, t);
    let at = t + 1_000;
    let done = ssd.submit(at, Op::Read, 0, 4096);
    // GC started at t; the read goes in at the first page-copy boundary (copy-back: tR + tPROG).
    let step = TR + 500_000;
    assert_eq!(done, t + step + TR + XFER + LINK);
    assert!(done < gc_end);
    assert_eq!(ssd.counters().gc_preemptions, 1);
}

#[test]
fn preempt_read_behind_programs_queued_before_gc_waits_for_them_not_for_the_gc() {
    let t = 1_000_000_000;
    let (_, mut ssd) = one_die(GcMode::Preempt);
    // A page program queued on the die, then a GC episode queued behind it.
    ssd.submit(t, Op::Write, 7 * 4096, 4096);
    assert_eq!(
        ssd.counters().gc_soft_episodes,
        0,
        "the write started no GC"
    );
    let program_end = t + 1 + ssd.busy_remaining_ns(t + 1);
    let gc_end = start_gc(&mut ssd, t + 1);
    assert!(gc_end > program_end + 2 * 2_000_000);
    let done = ssd.submit(t + 2, Op::Read, 0, 4096);
    // The read waits for the program, then goes before the GC's first page copy (it used to
    // wait for the whole episode: reads behind a die's queue of programs waited for a victim).
    assert_eq!(done, program_end + TR + XFER + LINK);
    assert_eq!(ssd.counters().gc_preemptions, 1);
}

#[test]
fn preempt_host_program_goes_between_gc_page_copies() {
    let t = 1_000_000_000;
    let step = TR + 500_000;
    let (_, mut ssd) = one_die(GcMode::Preempt);
    let gc_end = start_gc(&mut ssd, t);
    // A full page written while GC copies: its program goes in at the next page-copy boundary
    // (t + step) instead of after the episode.
    ssd.submit(t + 1_000, Op::Write, 7 * 4096, 4096);
    let program_end = t + step + XFER + 500_000;
    // A read arriving during that program goes right after it, before GC's next copy.
    let at = t + step + 1_000;
    let done = ssd.submit(at, Op::Read, 0, 4096);
    assert_eq!(done, program_end + TR + XFER + LINK);
    // The episode moved back by the program's and the read's die time.
    assert_eq!(
        ssd.busy_remaining_ns(done) + done,
        gc_end + XFER + 500_000 + TR + XFER
    );
}

#[test]
fn read_suspends_gc_in_suspend_mode_and_gc_resumes_later() {
    let t = 1_000_000_000;
    let resume = 7_000;
    let mut cfg = small(1, 1, 0.2);
    cfg.ftl.gc_mode = GcMode::Suspend;
    cfg.suspend.resume_overhead_ns = resume;
    let mut ssd = Ssd::new(&cfg, 1);
    ssd.precondition(Precondition::Steady, 3);
    let gc_end = start_gc(&mut ssd, t);
    let at = t + 1_000;
    let done = ssd.submit(at, Op::Read, 0, 4096);
    // At once, after the controller: no page-copy boundary to wait for.
    assert_eq!(done, at + CTRL + TR + XFER + LINK);
    assert_eq!(ssd.counters().suspensions, 1);
    // GC's end moved back by the read's die time and the resume cost.
    assert_eq!(
        ssd.busy_remaining_ns(done),
        gc_end + TR + XFER + resume - done
    );
}

/// `n` random 4 KiB writes from `t`, `gap` apart: each one's (latency, hard GC episodes it
/// caused, the fewest free blocks of any pool when it arrived).
fn writes(ssd: &mut Ssd, n: u64, gap: u64) -> Vec<(u64, u64, u32)> {
    let mut rng = Lcg(9);
    let mut t = 1_000_000_000;
    let mut out = Vec::new();
    for _ in 0..n {
        let off = rng.offset_4k(ssd.logical_bytes());
        let free_min = ssd.plm_status(t).free_blocks_min;
        let hard_before = ssd.counters().gc_hard_episodes;
        let done = ssd.submit(t, Op::Write, off, 4096);
        out.push((
            done - t,
            ssd.counters().gc_hard_episodes - hard_before,
            free_min,
        ));
        t += gap;
    }
    out
}

#[test]
fn foreground_gc_stalls_the_write_that_finds_free_blocks_below_the_threshold() {
    // Writes faster than the die programs and collects (write amplification included): the
    // die is never idle, so soft GC never runs and free blocks fall to the hard threshold;
    // the 16 MiB buffer still has room for the backlog of these writes.
    let n = 6_000;
    let gap = 600_000;
    let (cfg, mut fg) = one_die(GcMode::Foreground);
    let (_, hard) = cfg.gc_thresholds_blocks();
    let runs = writes(&mut fg, n, gap);
    let stalls: Vec<_> = runs.iter().filter(|r| r.1 > 0).collect();
    assert!(stalls.len() >= 3, "{} hard GC episodes", stalls.len());
    for &&(lat, _, free_min) in &stalls {
        // The pool was at or below the hard threshold, and the write waited for the batch:
        // three victims, each at least its erase.
        assert!(free_min <= hard, "free {free_min} > hard {hard}");
        assert!(lat >= 3 * 2_000_000, "stalled write took only {lat} ns");
    }
    // Every write arriving during a batch waits for it too: the write path does the GC.
    let first = runs.iter().position(|r| r.1 > 0).unwrap();
    let (lat, _, _) = runs[first];
    let next = runs[first + 1].0;
    assert!(
        next + gap + 10_000 >= lat && next > 1_000_000,
        "the write after a stall took {next} ns (stall {lat} ns)"
    );
    fg.ftl().check_consistency().unwrap();
    // The same writes in preempt mode: GC runs on the die, no write waits for it.
    let (_, mut pre) = one_die(GcMode::Preempt);
    let runs = writes(&mut pre, n, gap);
    let hard_runs: Vec<_> = runs.iter().filter(|r| r.1 > 0).collect();
    assert!(!hard_runs.is_empty());
    for &&(lat, _, _) in &hard_runs {
        assert!(lat < 100_000, "preempt write waited {lat} ns");
    }
}

#[test]
fn gc_mode_is_read_from_toml_and_validated() {
    let base = small(1, 1, 0.2)
        .to_toml()
        .unwrap()
        .replace("gc_mode = \"preempt\"\n", "")
        .replace("gc_batch_blocks = 0\n", "");
    let with = |extra: &str| base.replace("[ftl]\n", &format!("[ftl]\n{extra}\n"));
    let c = DeviceConfig::from_toml(&with("gc_mode = \"blocking\""), "t").unwrap();
    assert_eq!(c.ftl.gc_mode, GcMode::Blocking);
    let e = DeviceConfig::from_toml(&with("gc_mode = \"sometimes\""), "t").unwrap_err();
    let e = e.to_string();
    assert!(e.contains("sometimes") && e.contains("foreground"), "{e}");
    let e = DeviceConfig::from_toml(&with("gc_mode = \"foreground\""), "t").unwrap_err();
    assert!(e.to_string().contains("gc_batch_blocks"), "{e}");
    let ok = with("gc_mode = \"foreground\"\ngc_batch_blocks = 4");
    assert_eq!(
        DeviceConfig::from_toml(&ok, "t")
            .unwrap()
            .ftl
            .gc_batch_blocks,
        4
    );
    let e = DeviceConfig::from_toml(&with("gc_batch_blocks = 100000"), "t").unwrap_err();
    assert!(e.to_string().contains("gc_batch_blocks"), "{e}");
    let e = DeviceConfig::from_toml(
        &base
            .replace("die_gaps = false", "die_gaps = true")
            .replace("[ftl]\n", "[ftl]\ngc_mode = \"blocking\"\n"),
        "t",
    )
    .unwrap_err();
    assert!(e.to_string().contains("gc_mode"), "{e}");
}

#[test]
fn foreground_gc_collects_on_every_die_short_of_free_blocks_in_parallel() {
    // Four dies written faster than they program and collect: when one die's pool reaches the
    // hard threshold, the others (written round robin) are short of free blocks too, and the
    // same stall collects on them as well (one episode per die, each queued on its own die at
    // the stall's start), each die at most its batch. Before, only the die that reached the
    // threshold collected, and the next die's stall followed it.
    let mut cfg = small(4, 1, 0.2);
    cfg.ftl.gc_mode = GcMode::Foreground;
    cfg.ftl.gc_batch_blocks = 2;
    cfg.validate().unwrap();
    let mut ssd = Ssd::new(&cfg, 1);
    ssd.precondition(Precondition::Steady, 3);
    let mut rng = Lcg(5);
    let mut t = 1_000_000_000;
    let mut parallel_stalls = 0;
    for _ in 0..40_000 {
        let off = rng.offset_4k(ssd.logical_bytes());
        let before = ssd.counters();
        let victims_before = ssd.ftl_stats().victims;
        let done = ssd.submit(t, Op::Write, off, 4096);
        let after = ssd.counters();
        let victims = ssd.ftl_stats().victims - victims_before;
        let episodes = after.gc_hard_episodes - before.gc_hard_episodes;
        if episodes >= 2 {
            // The write waited for the stall: at least one die's whole victim (its erase).
            assert!(done - t >= 2_000_000, "stalled write took {} ns", done - t);
            // Each die collected at most its batch (plus one soft GC victim the same command
            // may start on an idle die).
            assert!(
                victims <= episodes * 2 + 1,
                "{victims} victims in {episodes} episodes"
            );
            parallel_stalls += 1;
        }
        t += 150_000;
    }
    assert!(
        parallel_stalls >= 3,
        "{parallel_stalls} stalls over several dies"
    );
    ssd.ftl().check_consistency().unwrap();
}
