//! Calibration fits a description back: runs simulated from a known description (faster
//! device times, a heavy-tailed firmware jitter, a longer serial controller time) are given to
//! `calibrate` as JSON reports, starting from the unchanged preset; the fitted description must
//! reproduce them within 10% at p50..p99.99, at QD1 and QD16, and find the known parameters.

use nines_core::op::Op;
use nines_core::report::Report;
use nines_core::workload::{RwMode, WorkloadSpec};
use nines_flash::DeviceConfig;
use nines_sim::calibrate::{CalibrateOptions, Measured, calibrate, quantile_ns};
use nines_sim::{SimConfig, prepare, run};

fn truth() -> DeviceConfig {
    let mut d = DeviceConfig::preset("afa-m2-2018-ideal")
        .unwrap()
        .time_scaled(0.8);
    d.name = "truth".into();
    d.controller.command_ns = 9_000;
    d.firmware_jitter.read = vec![
        (0.0, 0),
        (0.5, 2_000),
        (0.9, 6_000),
        (0.99, 20_000),
        (0.999, 80_000),
        (0.9999, 300_000),
        (1.0, 1_000_000),
    ];
    d.validate().unwrap();
    d
}

/// A run of `device` as `nines sim --json` writes it, read back as `--calibrate` reads it.
fn measured(device: &DeviceConfig, iodepth: u32, ios: u64, seed: u64) -> Measured {
    let w = WorkloadSpec {
        rw: RwMode::RandRead,
        iodepth,
        runtime_ns: None,
        ios_max: Some(ios),
        seed,
        ..WorkloadSpec::default()
    };
    let mut cfg = SimConfig::new(device.clone(), 1, w);
    cfg.memory_budget_bytes = 64 << 20;
    let mut prep = prepare(&cfg, false).unwrap();
    let json = run(&mut prep, None).unwrap().report.to_json();
    let report = Report::from_json(&json).unwrap();
    Measured::from_report(&format!("truth-qd{iodepth}.json"), &report).unwrap()
}

#[test]
fn a_simulated_device_is_fitted_back_within_ten_percent() {
    let t = truth();
    // Other seeds than the fit's: the fit never sees the same random draws.
    let runs = [measured(&t, 1, 200_000, 7), measured(&t, 16, 200_000, 8)];
    let base = DeviceConfig::preset("afa-m2-2018-ideal").unwrap();
    let opts = CalibrateOptions {
        ios: 200_000,
        memory_budget_bytes: 64 << 20,
        ..CalibrateOptions::default()
    };
    let cal = calibrate(&base, &runs, &opts).unwrap();
    assert_eq!(cal.fits.len(), 2);
    // The description is the fitted device's own, with the measured capacity, not the preset's
    // "960 GB M.2".
    assert_eq!(cal.device.capacity_bytes, Some(runs[0].size_bytes));
    let d = &cal.device.description;
    assert!(
        d.contains("truth-qd1.json, truth-qd16.json")
            && d.contains("as measured")
            && !d.contains("960 GB"),
        "{d}"
    );
    for f in &cal.fits {
        assert_eq!(f.op, Op::Read);
        for p in &f.percentiles {
            assert!(
                p.error().abs() <= 0.10,
                "QD{} p{}: measured {} simulated {}",
                f.iodepth,
                p.percentile,
                p.measured_ns,
                p.simulated_ns
            );
        }
        assert!(f.mean_error().abs() <= 0.10, "QD{} mean: {f:?}", f.iodepth);
    }
    // The known parameters come back: the floor's scale and the serial time.
    assert!(
        (cal.time_scale - 0.8).abs() < 0.04,
        "time scale {}",
        cal.time_scale
    );
    let c = cal.command_ns.expect("a QD16 run was given");
    assert!(!cal.command_ns_capped);
    assert!((8_100..=9_900).contains(&c), "command_ns {c}");
    // The jitter's median and tail are the truth's within the fit's tolerance.
    let j = nines_flash::dist::QuantileDist::new(&cal.device.firmware_jitter.read).unwrap();
    for (q, want) in [(0.5, 2_000.0), (0.99, 20_000.0), (0.9999, 300_000.0)] {
        let got = j.at(q) as f64;
        assert!(
            (got - want).abs() <= 0.15 * want + 500.0,
            "jitter at {q}: {got} vs {want}"
        );
    }
    // The description written out reads back as the same description.
    let text = cal.device.to_toml().unwrap();
    let back = DeviceConfig::from_toml(&text, "calibrated").unwrap();
    assert_eq!(back, cal.device);
    // And it reproduces a fresh run of the truth (another seed again) at QD1, where a run's
    // percentiles are stable: the truth's p99.99 lies on a slope of 7 ms per unit of quantile,
    // so with 200,000 samples its standard deviation between runs is about 150 us (40%), and
    // p99.9 sits on a kink (about 20%); the fit itself matched those of the run it was given.
    let fresh = measured(&t, 1, 1_000_000, 11);
    let again = measured(&back, 1, 1_000_000, 11);
    for p in [0.5, 0.9, 0.99] {
        let (m, s) = (
            quantile_ns(fresh.dirs[0].as_ref().unwrap(), p) as f64,
            quantile_ns(again.dirs[0].as_ref().unwrap(), p) as f64,
        );
        assert!((s / m - 1.0).abs() <= 0.10, "fresh run q{p}: {m} vs {s}");
    }
}

#[test]
fn inputs_it_cannot_fit_are_refused_with_a_reason() {
    let base = DeviceConfig::preset("afa-m2-2018-ideal").unwrap();
    let opts = CalibrateOptions {
        ios: 2_000,
        memory_budget_bytes: 64 << 20,
        ..CalibrateOptions::default()
    };
    let e = calibrate(&base, &[], &opts).unwrap_err().to_string();
    assert!(e.contains("no measured run"), "{e}");
    // A device faster than the host model's own costs (4 us per I/O with interrupts).
    let mut fast = DeviceConfig::preset("afa-m2-2018-ideal").unwrap();
    fast.controller.overhead_ns = 0;
    fast.controller.command_ns = 0;
    fast.timing.read_ns = 1;
    fast.timing.channel_bytes_per_s = 1 << 40;
    fast.controller.read_bytes_per_s = 1 << 40;
    let mut w = WorkloadSpec {
        ios_max: Some(10_000),
        runtime_ns: None,
        ..WorkloadSpec::default()
    };
    w.rw = RwMode::RandRead;
    let mut cfg = SimConfig::new(fast, 1, w);
    cfg.host = nines_sim::HostConfig::new(nines_sim::CompletionMode::None);
    cfg.memory_budget_bytes = 64 << 20;
    let mut prep = prepare(&cfg, false).unwrap();
    let report = run(&mut prep, None).unwrap().report;
    let m = Measured::from_report("fast.json", &report).unwrap();
    let e = calibrate(&base, &[m], &opts).unwrap_err().to_string();
    assert!(
        e.contains("fast.json") && e.contains("--completion none"),
        "{e}"
    );
    // A report of two targets is not a device's.
    let mut cfg = SimConfig::new(base.clone(), 2, WorkloadSpec::default());
    cfg.workload.runtime_ns = None;
    cfg.workload.ios_max = Some(100);
    cfg.memory_budget_bytes = 64 << 20;
    let mut prep = prepare(&cfg, false).unwrap();
    let report = run(&mut prep, None).unwrap().report;
    let e = Measured::from_report("two.json", &report)
        .unwrap_err()
        .to_string();
    assert!(e.contains("two.json") && e.contains("2 targets"), "{e}");
}

/// A QD1 tail that is a cliff (host noise on a loaded machine: p99 3 us, p99.9 10 us, p99.99
/// 280 us; the zram profile of sim_cli's calibration test on a loaded host looked like this):
/// the fit must land every fit percentile within 10%, p99.99 included, wherever the cliff
/// falls around it (before, p99.99 stayed 35% off when the cliff straddled it).
#[test]
fn a_cliff_in_the_tail_is_fitted_at_every_percentile() {
    for (below, above) in [(0.99985, 0.99995), (0.99989, 0.99991), (0.99992, 0.99994)] {
        let mut t = DeviceConfig::preset("afa-m2-2018-ideal")
            .unwrap()
            .time_scaled(0.05);
        t.name = "cliff".into();
        t.firmware_jitter.read = vec![
            (0.0, 0),
            (0.5, 300),
            (0.99, 1_200),
            (0.999, 8_000),
            (below, 12_000),
            (above, 300_000),
            (1.0, 400_000),
        ];
        t.validate().unwrap();
        let runs = [measured(&t, 1, 800_000, 7)];
        let base = DeviceConfig::preset("afa-m2-2018-ideal").unwrap();
        let opts = CalibrateOptions {
            memory_budget_bytes: 64 << 20,
            ..CalibrateOptions::default()
        };
        let cal = calibrate(&base, &runs, &opts).unwrap();
        for f in &cal.fits {
            for p in &f.percentiles {
                assert!(
                    p.error().abs() <= 0.10,
                    "cliff {below}..{above} p{}: measured {} simulated {}",
                    p.percentile,
                    p.measured_ns,
                    p.simulated_ns
                );
            }
        }
    }
}

/// A report of `device` running `w` (or replaying `trace`), as `--calibrate` reads it.
fn report_of(w: WorkloadSpec, trace: Option<&nines_trace::Trace>) -> Report {
    let mut cfg = SimConfig::new(DeviceConfig::preset("afa-m2-2018").unwrap(), 1, w);
    cfg.memory_budget_bytes = 64 << 20;
    let mut prep = prepare(&cfg, true).unwrap();
    let mut trace = trace.cloned();
    if let Some(t) = trace.as_mut() {
        t.fit(prep.target_size_bytes(), 1, nines_trace::FitPolicy::Wrap)
            .unwrap();
    }
    let json = run(&mut prep, trace.as_ref()).unwrap().report.to_json();
    Report::from_json(&json).unwrap()
}

/// What calibration cannot fit is refused with the reason and what to do: a replay (its JSON's
/// workload only summarises the trace), a mix of reads and writes, too few I/Os for p99.99. A
/// run it can fit names the measured capacity in the fitted description.
#[test]
fn replays_mixes_and_short_runs_are_refused() {
    let records: Vec<nines_trace::TraceRecord> = (0..12_000u64)
        .map(|i| nines_trace::TraceRecord::data(i * 100_000, 0, (i % 1000) * 4096, 4096, Op::Write))
        .collect();
    let trace = nines_trace::Trace::from_records(records, nines_trace::TraceFormat::Mqsim);
    let replay = report_of(WorkloadSpec::default(), Some(&trace));
    let e = Measured::from_report("replay.json", &replay)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("replay.json: it is a replay of a trace (mqsim)")
            && e.contains("--rw randread"),
        "{e}"
    );
    let mix = report_of(
        WorkloadSpec {
            rw: RwMode::RandRw,
            read_mix_pct: 70,
            runtime_ns: None,
            ios_max: Some(20_000),
            ..WorkloadSpec::default()
        },
        None,
    );
    let e = Measured::from_report("mix.json", &mix)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("mix.json: it mixes reads and writes"), "{e}");
    let short = report_of(
        WorkloadSpec {
            runtime_ns: None,
            ios_max: Some(9_999),
            ..WorkloadSpec::default()
        },
        None,
    );
    let e = Measured::from_report("short.json", &short)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "short.json: it has 9999 reads, too few to fit: the fit is judged up to p99.99, which \
         needs at least 10000; profile longer (--runtime or --ios)"
    );
}
