//! Pins the SSD model to known truths.

mod common;

use common::small;
use nines_core::op::Op;
use nines_flash::{DeviceConfig, FlashError, Precondition, Ssd, preset_names};

#[test]
fn every_preset_loads_scales_and_runs() {
    for name in preset_names() {
        let cfg = DeviceConfig::preset(name).unwrap();
        let scaled = cfg.scaled(cfg.scale_for_budget(8 << 20)).unwrap();
        // Within the budget, or at the smallest scale GC can work at (per-plane pools, as in
        // mqsim-compatible, need more blocks per plane than per-die pools).
        let min_bpp = cfg
            .scaled(cfg.min_scale())
            .unwrap()
            .geometry
            .blocks_per_plane;
        assert!(
            scaled.model_bytes() <= 8 << 20
                || scaled.geometry.blocks_per_plane < 64
                || scaled.geometry.blocks_per_plane == min_bpp,
            "{name}"
        );
        let mut ssd = Ssd::new(&scaled, 1);
        ssd.precondition(Precondition::Steady, 7);
        ssd.ftl().check_consistency().unwrap();
        let mut t = 0;
        for i in 0..2000u64 {
            let off = (i * 7919 * 4096) % (ssd.logical_bytes() - 4096);
            let op = if i % 3 == 0 { Op::Write } else { Op::Read };
            let done = ssd.submit(t, op, off / 4096 * 4096, 4096);
            assert!(done > t, "{name}");
            t = done;
        }
        ssd.ftl().check_consistency().unwrap();
    }
}

#[test]
fn idle_read_is_tr_plus_transfers_plus_overhead_exactly() {
    let cfg = small(2, 2, 0.2);
    let mut ssd = Ssd::new(&cfg, 1);
    ssd.precondition(Precondition::Fill, 1);
    // 4 KiB: tR 50 us + 4096 B over 400 MB/s (10240 ns) + over 2 GB/s (2048 ns) + 3 us.
    let mut t = 1_000_000_000;
    for i in 0..100u64 {
        let done = ssd.submit(t, Op::Read, (i * 37 % 1000) * 4096, 4096);
        assert_eq!(done - t, 50_000 + 10_240 + 2_048 + 3_000);
        t = done + 10_000_000;
    }
    // 8 KiB spanning two pages on two dies on two channels: both in parallel, then 8 KiB link.
    let done = ssd.submit(t, Op::Read, 0, 8192);
    assert_eq!(done - t, 3_000 + 50_000 + 10_240 + 4_096);
    // With both pages on the same channel (dies 0 and 2 of a 2-channel device share channel 0),
    // the second transfer waits for the first.
    let t = done + 10_000_000;
    let done_a = ssd.submit(t, Op::Read, 0, 4096);
    let done_b = ssd.submit(t, Op::Read, 2 * 4096, 4096);
    assert_eq!(done_a - t, 65_288);
    assert_eq!(done_b - t, 65_288 + 10_240);
}

#[test]
fn idle_write_completes_in_the_buffer() {
    let cfg = small(1, 1, 0.2);
    let mut ssd = Ssd::new(&cfg, 1);
    let t = 5_000;
    let done = ssd.submit(t, Op::Write, 40960, 4096);
    assert_eq!(done - t, 3_000 + 4_096);
}

/// Exponential gaps from a splitmix64 stream (the test's own; independent of the model).
struct Exp(u64);
impl Exp {
    fn next(&mut self, mean_ns: f64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let u = ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        (-u.ln() * mean_ns) as u64
    }
}

#[test]
fn poisson_reads_to_one_die_match_pollaczek_khinchine() {
    let cfg = small(1, 1, 0.2);
    // Service on the die: tR + channel transfer, deterministic (M/D/1).
    let s = 50_000.0 + 10_240.0;
    let fixed = 3_000.0 + 2_048.0;
    for rho in [0.3f64, 0.6, 0.8] {
        let mut ssd = Ssd::new(&cfg, 1);
        ssd.precondition(Precondition::Fill, 1);
        let mut arrivals = Exp(rho.to_bits());
        let mut t = 0u64;
        let mut sum = 0.0;
        let n = 400_000;
        for i in 0..n {
            t += arrivals.next(s / rho);
            let off = (i as u64 * 104_729 % 10_000) * 4096;
            sum += (ssd.submit(t, Op::Read, off, 4096) - t) as f64;
        }
        let mean = sum / n as f64;
        // P-K: W = lambda E[S^2] / (2 (1 - rho)); deterministic S: E[S^2] = S^2.
        let lambda = rho / s;
        let pk = fixed + s + lambda * s * s / (2.0 * (1.0 - rho));
        let err = (mean - pk).abs() / pk;
        assert!(
            err < 0.02,
            "rho {rho}: mean {mean:.0} ns vs P-K {pk:.0} ns ({:.2}%)",
            err * 100.0
        );
    }
}

/// Write amplification of greedy GC under uniform random writes, analytically: in the limit of
/// many pages per block, greedy cleaning under uniform traffic picks the oldest block, so it
/// behaves like LRU/FIFO cleaning (Van Houdt, SIGMETRICS 2013), whose steady state Desnoyers
/// derived (SYSTOR 2012, Section 4): the valid share X of a cleaned block satisfies
/// X = exp(-alpha (1 - X)) with alpha = physical / logical, and WA = 1 / (1 - X).
fn desnoyers_lru_wa(alpha: f64) -> f64 {
    let mut x = 0.0f64;
    for _ in 0..10_000 {
        x = (-alpha * (1.0 - x)).exp();
    }
    1.0 / (1.0 - x)
}

#[test]
fn steady_state_write_amplification_matches_the_analytical_model() {
    for op in [0.1, 0.2, 0.3] {
        let cfg = small(1, 4, op);
        let mut ssd = Ssd::new(&cfg, 1);
        ssd.precondition(Precondition::Steady, 3);
        let units = ssd.ftl().logical_units() as u64;
        ssd.ftl_mut().random_overwrite(3 * units, 99);
        let wa = ssd.ftl_stats().write_amplification();
        // Actual alpha: physical units over logical units.
        let physical = cfg.physical_bytes() as f64 / 4096.0;
        let alpha = physical / units as f64;
        let model = desnoyers_lru_wa(alpha);
        let err = (wa - model).abs() / model;
        eprintln!("op {op}: WA {wa:.3} model {model:.3} ({:.1}%)", err * 100.0);
        assert!(err < 0.10, "op {op}: WA {wa:.3} vs model {model:.3}");
        ssd.ftl().check_consistency().unwrap();
    }
}

#[test]
fn trim_frees_space_and_cuts_write_amplification() {
    let cfg = small(1, 4, 0.1);
    let mut a = Ssd::new(&cfg, 1);
    a.precondition(Precondition::Steady, 3);
    let mut b = a.clone();
    let half = a.logical_bytes() / 2 / 4096 * 4096;
    b.trim(0, half, a.logical_bytes() - half);
    b.ftl().check_consistency().unwrap();
    assert_eq!(
        b.ftl_stats().trimmed_units,
        (a.logical_bytes() - half) / 4096
    );
    let mut t = 0;
    let mut x = 1u64;
    for _ in 0..20_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let off = (x >> 20) % (half / 4096) * 4096;
        t = a
            .submit(t, Op::Write, off, 4096)
            .max(b.submit(t, Op::Write, off, 4096));
    }
    let (wa_a, wa_b) = (
        a.ftl_stats().write_amplification(),
        b.ftl_stats().write_amplification(),
    );
    assert!(wa_b < wa_a * 0.8, "trimmed {wa_b} vs untrimmed {wa_a}");
}

fn mixed_run(cfg: &DeviceConfig) -> (Ssd, u64) {
    let mut ssd = Ssd::new(cfg, 1);
    ssd.precondition(Precondition::Steady, 3);
    let mut x = 7u64;
    let mut t = 0;
    let mut worst = 0;
    let span = ssd.logical_bytes() / 4096;
    for i in 0..40_000u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let off = (x >> 20) % span * 4096;
        let op = if i % 10 < 3 { Op::Write } else { Op::Read };
        t += 20_000;
        let done = ssd.submit(t, op, off, 4096);
        if op == Op::Read {
            worst = worst.max(done - t);
        }
    }
    (ssd, worst)
}

#[test]
fn suspend_preset_suspends_under_a_mixed_workload_and_cuts_read_tails() {
    let cfg = DeviceConfig::preset("z-ssd")
        .unwrap()
        .scaled(0.002)
        .unwrap();
    assert!(cfg.suspend.enabled);
    let (ssd, worst_suspend) = mixed_run(&cfg);
    assert!(ssd.counters().suspensions > 0);
    let mut off = cfg.clone();
    off.suspend.enabled = false;
    let (ssd_off, worst_off) = mixed_run(&off);
    assert_eq!(ssd_off.counters().suspensions, 0);
    assert!(worst_suspend < worst_off, "{worst_suspend} vs {worst_off}");
}

#[test]
fn reads_wait_for_a_busy_die_without_suspend() {
    let cfg = small(1, 1, 0.2);
    let mut ssd = Ssd::new(&cfg, 1);
    ssd.precondition(Precondition::Fill, 1);
    // Fill one page (one 4 KiB write = one page here): programmed at once.
    let t0 = 1_000_000;
    let w = ssd.submit(t0, Op::Write, 0, 4096);
    let program_end = w + 10_240 + 500_000;
    let r = ssd.submit(w, Op::Read, 8192, 4096);
    assert_eq!(r, program_end + 50_000 + 10_240 + 2_048);
}

#[test]
fn housekeeping_stalls_a_known_share_of_reads() {
    let mut cfg = small(1, 1, 0.2);
    cfg.housekeeping.period_ns = 1_000_000;
    cfg.housekeeping.duration_ns = 100_000;
    let mut ssd = Ssd::new(&cfg, 1);
    let mut t = 0;
    let n = 100_000u64;
    for _ in 0..n {
        t += 618_034; // about the golden ratio of the period: spreads over all phases
        ssd.submit(t, Op::Read, 0, 4096);
    }
    let share = ssd.counters().housekeeping_stalls as f64 / n as f64;
    assert!((share - 0.1).abs() < 0.002, "{share}");
}

fn broken(edit: impl Fn(&mut String)) -> FlashError {
    let mut text = include_str!("../presets/mqsim-default.toml").to_string();
    edit(&mut text);
    DeviceConfig::from_toml(&text, "x.toml").unwrap_err()
}

#[test]
fn bad_descriptions_name_the_field_and_the_rule() {
    let e = broken(|t| *t = t.replace("channels = 8", "channels = 0")).to_string();
    assert!(
        e.contains("geometry.channels") && e.contains("at least 1"),
        "{e}"
    );
    let e = broken(|t| *t = t.replace("over_provisioning = 0.07", "over_provisioning = 1.0"))
        .to_string();
    assert!(
        e.contains("ftl.over_provisioning") && e.contains("below 1"),
        "{e}"
    );
    let e =
        broken(|t| *t = t.replace("page_size_bytes = 8192", "page_size_bytes = 8000")).to_string();
    assert!(
        e.contains("geometry.page_size_bytes") && e.contains("multiple of 512"),
        "{e}"
    );
    let e = broken(|t| t.insert_str(0, "capacity_bytes = 600_000_000_000\n")).to_string();
    assert!(
        e.contains("capacity_bytes") && e.contains("does not fit"),
        "{e}"
    );
    let e = broken(|t| *t = t.replace("read_ns = 75_000", "raed_ns = 75_000")).to_string();
    assert!(e.contains("raed_ns") && e.contains("line"), "{e}");
    // A buffer larger than the flash used to pass and abort on allocation (issue 15).
    let e = broken(|t| {
        *t = t.replace(
            "write_buffer_bytes = 268_435_456",
            "write_buffer_bytes = 18_000_000_000_000_000_000",
        )
    })
    .to_string();
    assert!(
        e.contains("buffer.write_buffer_bytes") && e.contains("must not exceed the flash"),
        "{e}"
    );
    let e = DeviceConfig::preset("nope").unwrap_err().to_string();
    for name in preset_names() {
        assert!(e.contains(name), "{e}");
    }
    for e in [
        broken(|t| *t = t.replace("channels = 8", "channels = 0")).to_string(),
        DeviceConfig::load("/nonexistent/dev.toml")
            .unwrap_err()
            .to_string(),
    ] {
        assert!(!e.contains('\n'), "one line: {e}");
    }
}

#[test]
fn scale_keeps_page_geometry_and_gc_behaviour() {
    let cfg = DeviceConfig::preset("afa-m2-2018").unwrap();
    let s = cfg.scaled(cfg.scale_for_budget(64 << 20)).unwrap();
    assert_eq!(s.geometry.page_size_bytes, cfg.geometry.page_size_bytes);
    assert_eq!(s.geometry.pages_per_block, cfg.geometry.pages_per_block);
    assert_eq!(s.dies(), cfg.dies());
    assert!(s.model_bytes() <= 64 << 20);
    // Write amplification at steady state is the same at two very different scales.
    let wa = |budget: u64| {
        let c = cfg.scaled(cfg.scale_for_budget(budget)).unwrap();
        let mut ssd = Ssd::new(&c, 1);
        ssd.precondition(Precondition::Steady, 1);
        let units = ssd.ftl().logical_units() as u64;
        ssd.ftl_mut().random_overwrite(units, 5);
        (
            c.geometry.blocks_per_plane,
            ssd.ftl_stats().write_amplification(),
        )
    };
    let (small_bpp, small) = wa(2 << 20);
    let (big_bpp, big) = wa(80 << 20);
    eprintln!("WA {small} at {small_bpp} blocks/plane vs {big} at {big_bpp}");
    assert!(big_bpp >= 2 * small_bpp, "{small_bpp} vs {big_bpp}");
    assert!(
        (small - big).abs() / big < 0.10,
        "WA {small} at {small_bpp} blocks/plane vs {big} at {big_bpp}"
    );
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Any numbers in a description give a valid model or one named, one-line error.
        #[test]
        fn any_geometry_validates_or_names_a_field(
            channels in 0u32..20, chips in 0u32..5, dies in 0u32..3, planes in 0u32..3,
            bpp in 0u32..300, ppb in 0u32..300, page in 0u32..40000, op in -0.5f64..1.5,
        ) {
            let text = include_str!("../presets/mqsim-default.toml")
                .replace("channels = 8", &format!("channels = {channels}"))
                .replace("chips_per_channel = 4", &format!("chips_per_channel = {chips}"))
                .replace("dies_per_chip = 2", &format!("dies_per_chip = {dies}"))
                .replace("planes_per_die = 2", &format!("planes_per_die = {planes}"))
                .replace("blocks_per_plane = 2048", &format!("blocks_per_plane = {bpp}"))
                .replace("pages_per_block = 256", &format!("pages_per_block = {ppb}"))
                .replace("page_size_bytes = 8192", &format!("page_size_bytes = {page}"))
                .replace("map_unit_bytes = 4096", "map_unit_bytes = 512")
                .replace("over_provisioning = 0.07", &format!("over_provisioning = {op}"));
            match DeviceConfig::from_toml(&text, "p.toml") {
                Ok(cfg) => {
                    // A valid description either builds a working model or says why not.
                    if cfg.check_gc_room().is_ok() && cfg.model_bytes() < 4 << 20 {
                        let mut ssd = Ssd::new(&cfg, 1);
                        let done = ssd.submit(0, Op::Read, 0, 512);
                        prop_assert!(done > 0);
                    }
                }
                Err(e) => {
                    let s = e.to_string();
                    prop_assert!(s.contains("invalid device description: ") && !s.contains('\n'), "{}", s);
                }
            }
        }
    }
}

/// Steady preconditioning (fill + one capacity of random overwrites + GC settle) leaves the
/// device where three capacities of random overwrites would: the next writes see the same
/// write amplification.
#[test]
fn steady_preconditioning_reaches_steady_write_amplification() {
    let cfg = DeviceConfig::preset("afa-m2-2018").unwrap();
    let cfg = cfg.scaled(cfg.scale_for_budget(4 << 20)).unwrap();
    let mut a = Ssd::new(&cfg, 1);
    a.precondition(Precondition::Steady, 1);
    let mut b = Ssd::new(&cfg, 1);
    let units = b.ftl().logical_units() as u64;
    b.ftl_mut().fill();
    b.ftl_mut().random_overwrite(3 * units, 2);
    b.ftl_mut().settle_gc();
    let mut wa = [0.0; 2];
    for (k, ssd) in [&mut a, &mut b].into_iter().enumerate() {
        ssd.ftl_mut().reset_stats();
        ssd.ftl_mut().random_overwrite(units / 2, 100);
        wa[k] = ssd.ftl_stats().write_amplification();
    }
    assert!((wa[0] - wa[1]).abs() / wa[1] < 0.03, "{wa:?}");
}

#[test]
fn per_page_type_read_and_program_times_apply() {
    let mut cfg = small(1, 1, 0.2);
    cfg.timing.read_ns_by_page_type = vec![40_000, 60_000];
    cfg.timing.program_ns_by_page_type = vec![300_000, 900_000];
    cfg.validate().unwrap();
    let mut ssd = Ssd::new(&cfg, 1);
    ssd.precondition(Precondition::Fill, 1);
    // A sequential fill on one die puts unit i in page i of the block: even pages are type 0.
    let mut t = 1_000_000_000;
    for (lpn, tr) in [(0u64, 40_000), (1, 60_000), (2, 40_000), (7, 60_000)] {
        let done = ssd.submit(t, Op::Read, lpn * 4096, 4096);
        assert_eq!(done - t, 3_000 + tr + 10_240 + 2_048, "unit {lpn}");
        t = done + 10_000_000;
    }
    // One write programs the next page of the host block (one unit per page here); a read
    // right behind it waits for that program, whose time is its page type's.
    let page_type = (ssd.ftl().logical_units() % 64) as usize % 2;
    let tp = [300_000u64, 900_000][page_type];
    let w = ssd.submit(t, Op::Write, 0, 4096);
    assert_eq!(w - t, 3_000 + 4_096);
    let r = ssd.submit(w, Op::Read, 2 * 4096, 4096);
    // Program: channel 10240 + tPROG; then the read: tR (page 2: type 0) + 10240 + 2048.
    assert_eq!(r - w, 10_240 + tp + 40_000 + 10_240 + 2_048);
}

#[test]
fn page_types_up_to_the_inline_maximum_are_kept_and_more_are_refused() {
    use nines_flash::config::PAGE_TYPES_MAX;
    // The largest allowed list: every type's time is used (page i of a block is type i % n).
    let mut cfg = small(1, 1, 0.2);
    let times: Vec<u64> = (0..PAGE_TYPES_MAX as u64)
        .map(|i| 20_000 + 5_000 * i)
        .collect();
    cfg.timing.read_ns_by_page_type = times.clone();
    cfg.validate().unwrap();
    let mut ssd = Ssd::new(&cfg, 1);
    ssd.precondition(Precondition::Fill, 1);
    let mut t = 1_000_000_000;
    for lpn in 0..PAGE_TYPES_MAX as u64 + 2 {
        let done = ssd.submit(t, Op::Read, lpn * 4096, 4096);
        let tr = times[lpn as usize % PAGE_TYPES_MAX];
        assert_eq!(done - t, 3_000 + tr + 10_240 + 2_048, "unit {lpn}");
        t = done + 10_000_000;
    }
    // One more type is a clear error naming the field and the limit, for reads and programs.
    for program in [false, true] {
        let mut cfg = small(1, 1, 0.2);
        let list = vec![100_000; PAGE_TYPES_MAX + 1];
        if program {
            cfg.timing.program_ns_by_page_type = list;
        } else {
            cfg.timing.read_ns_by_page_type = list;
        }
        let e = cfg.validate().unwrap_err().to_string();
        let field = if program {
            "program_ns_by_page_type"
        } else {
            "read_ns_by_page_type"
        };
        assert!(
            e.contains(field) && e.contains(&format!("at most {PAGE_TYPES_MAX}")),
            "{e}"
        );
    }
}
