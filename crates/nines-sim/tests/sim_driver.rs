//! The simulated driver against known truths: exact idle latency, queueing theory, the
//! probability of a slow striped request, determinism, every preset.

use nines_core::op::Op;
use nines_core::workload::{Arrival, RwMode, WorkloadSpec};
use nines_flash::{DeviceConfig, Precondition, preset_names};
use nines_sim::{
    Background, CompletionMode, HostConfig, Layout, ServiceDist, SimConfig, SimOutput, prepare, run,
};

fn one_die(extra: &str) -> DeviceConfig {
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
{extra}
"#
    );
    DeviceConfig::from_toml(&text, "one-die").unwrap()
}

fn config(device: DeviceConfig, devices: u32, workload: WorkloadSpec) -> SimConfig {
    SimConfig {
        scale: Some(1.0),
        host: HostConfig::new(CompletionMode::None),
        ..SimConfig::new(device, devices, workload)
    }
}

fn simulate(cfg: &SimConfig) -> SimOutput {
    let mut prep = prepare(cfg, cfg.workload.writes()).unwrap();
    run(&mut prep, None).unwrap()
}

fn reads(ios: u64) -> WorkloadSpec {
    WorkloadSpec {
        runtime_ns: None,
        ios_max: Some(ios),
        ..WorkloadSpec::default()
    }
}

#[test]
fn idle_read_latency_is_device_time_plus_host_costs_exactly() {
    let mut cfg = config(one_die(""), 1, reads(1000));
    // Device: 3 us + tR 50 us + 4096 B at 400 MB/s (10240 ns) + at 2 GB/s (2048 ns).
    let device_ns = 3_000 + 50_000 + 10_240 + 2_048;
    for (mode, host_ns) in [
        (CompletionMode::None, 0),
        (CompletionMode::Interrupt, 1_500 + 2_500),
        (CompletionMode::Polled, 1_500 + 1_400),
    ] {
        cfg.host = HostConfig::new(mode);
        let out = simulate(&cfg);
        let lat = &out.report.devices[0].read.lat_ns;
        assert_eq!(out.report.devices[0].read.ios, 1000);
        // The histogram keeps 3 significant digits: min and max bracket the exact value.
        let exact = device_ns + host_ns;
        let h = &out.recorders[0].dir(Op::Read).hist;
        assert_eq!(h.count_between(exact, exact), 1000, "{mode:?}: {lat:?}");
    }
}

#[test]
fn z_ssd_reproduces_paper_002_interrupt_and_polled_read_latency() {
    let dev = DeviceConfig::preset("z-ssd").unwrap();
    for (mode, want) in [
        (CompletionMode::Interrupt, 14_700),
        (CompletionMode::Polled, 13_600),
    ] {
        let mut cfg = config(dev.clone(), 1, reads(2000));
        cfg.scale = None;
        cfg.host = HostConfig::new(mode);
        let out = simulate(&cfg);
        let h = &out.recorders[0].dir(Op::Read).hist;
        assert_eq!(h.count_between(want, want), 2000, "{mode:?}");
    }
}

#[test]
fn poisson_arrivals_to_one_die_match_pollaczek_khinchine() {
    // Service on the die: tR + channel transfer, deterministic: M/D/1.
    let s = 50_000.0 + 10_240.0;
    let fixed = 3_000.0 + 2_048.0;
    for rho in [0.5, 0.8] {
        let rate = (rho / s * 1e9) as u64;
        let rho = rate as f64 * s / 1e9;
        let spec = WorkloadSpec {
            rate_iops: Some(rate),
            arrival: Arrival::Poisson,
            iodepth: 4096,
            seed: 11,
            ..reads(300_000)
        };
        let out = simulate(&config(one_die(""), 1, spec));
        let mean = out.recorders[0].dir(Op::Read).hist.mean();
        let lambda = rate as f64 / 1e9;
        let pk = fixed + s + lambda * s * s / (2.0 * (1.0 - rho));
        let err = (mean - pk).abs() / pk;
        assert!(
            err < 0.02,
            "rho {rho}: mean {mean:.0} vs P-K {pk:.0} ({:.2}%)",
            err * 100.0
        );
    }
}

#[test]
fn striped_requests_are_slow_with_probability_one_minus_q_to_the_n() {
    let p = 0.001f64;
    let dev = one_die(&format!(
        "[slow_io]\nprobability = {p}\nextra_ns = 1_000_000"
    ));
    for (n, requests) in [(1u32, 1_000_000u64), (100, 200_000), (1000, 40_000)] {
        let spec = WorkloadSpec {
            block_size_bytes: 4096 * n as u64,
            seed: n as u64,
            ..reads(requests)
        };
        let mut cfg = config(dev.clone(), n, spec);
        cfg.layout = Layout::Raid0 { stripe_bytes: 4096 };
        cfg.scale = None;
        let out = simulate(&cfg);
        let h = &out.recorders[0].dir(Op::Read).hist;
        assert_eq!(h.len(), requests);
        // Fast requests take ~65 us + transfer of the whole request; slow ones 1 ms more.
        let slow = h.count_between(900_000 + 65_288, u64::MAX) as f64 / requests as f64;
        let want = 1.0 - (1.0 - p).powi(n as i32);
        let sigma = (want * (1.0 - want) / requests as f64).sqrt();
        eprintln!("N={n}: slow {slow:.5}, 1-(1-p)^N = {want:.5}, sigma {sigma:.5}");
        assert!((slow - want).abs() <= 0.01, "N={n}: {slow} vs {want}");
        assert!(
            (slow - want).abs() <= 4.0 * sigma,
            "N={n}: {slow} vs {want} (4 sigma)"
        );
    }
}

fn busy_config() -> SimConfig {
    let mut dev = DeviceConfig::preset("mqsim-default").unwrap();
    dev.housekeeping.period_ns = 20_000_000;
    dev.housekeeping.duration_ns = 2_000_000;
    let spec = WorkloadSpec {
        rw: RwMode::RandRw,
        read_mix_pct: 30,
        iodepth: 32,
        runtime_ns: Some(500_000_000),
        seed: 5,
        ..WorkloadSpec::default()
    };
    let mut cfg = config(dev, 4, spec);
    cfg.scale = Some(0.01);
    cfg.host = HostConfig::new(CompletionMode::Interrupt);
    cfg.host.cpus = Some(2);
    cfg.host.background = Some(Background {
        rate_per_s: 2000.0,
        service_ns: 50_000,
        dist: ServiceDist::Exponential,
    });
    cfg
}

#[test]
fn same_inputs_give_byte_identical_json() {
    let cfg = busy_config();
    let a = simulate(&cfg).report.to_json();
    let b = simulate(&cfg).report.to_json();
    assert_eq!(a, b);
    // And the run did exercise GC, the host's background tasks and housekeeping.
    let v: serde_json::Value = serde_json::from_str(&a).unwrap();
    let internals = &v["devices"][0]["internals"];
    assert!(internals["gc_runs"].as_u64().unwrap() > 0, "{internals}");
    assert!(internals["housekeeping_stalls"].as_u64().unwrap() > 0);
    assert!(
        v["config"]["extra"]["host_model"]["background_tasks"]
            .as_u64()
            .unwrap()
            > 0
    );
    // A different seed changes the result.
    let mut other = cfg.clone();
    other.workload.seed = 6;
    assert_ne!(simulate(&other).report.to_json(), a);
}

#[test]
fn every_preset_loads_and_runs_reads_and_writes() {
    for name in preset_names() {
        let spec = WorkloadSpec {
            rw: RwMode::RandRw,
            read_mix_pct: 70,
            iodepth: 8,
            runtime_ns: Some(20_000_000),
            ..WorkloadSpec::default()
        };
        let mut cfg = config(DeviceConfig::preset(name).unwrap(), 2, spec);
        cfg.scale = None;
        cfg.memory_budget_bytes = 256 << 20;
        if cfg.device.fdp.is_some() {
            // An FDP drive's smallest scale is larger (each handle keeps open blocks on every
            // die: docs/arch-fdp.md): 340 MiB for two of afa-m2-2018-fdp.
            cfg.memory_budget_bytes = 1 << 30;
        }
        if cfg.device.zoned.is_some() {
            // Zoned presets take only the serial layout (crates/nines/tests/zoned_cli.rs).
            cfg.memory_budget_bytes = 1 << 30;
            let e = prepare(&cfg, true)
                .err()
                .expect("a zoned preset refused")
                .to_string();
            assert!(
                e.contains("is zoned") && e.contains("--layout serial"),
                "{e}"
            );
            continue;
        }
        let out = simulate(&cfg);
        let r = &out.report;
        assert!(
            r.aggregate.read.ios > 0 && r.aggregate.write.ios > 0,
            "{name}"
        );
        assert_eq!(r.config.engine, "sim");
        assert_eq!(r.config.extra["device"], name);
        assert!(r.config.extra["scale"].as_f64().unwrap() <= 1.0);
        let back = nines_core::report::Report::from_json(&r.to_json()).unwrap();
        assert_eq!(back.devices.len(), 2);
        assert_eq!(back.aggregate.read.ios, r.aggregate.read.ios);
        for d in &r.devices {
            let i = d.internals.as_ref().unwrap();
            assert!(i["write_amplification"].as_f64().unwrap() >= 1.0, "{name}");
            assert!(i["die_busy_fraction"].as_f64().unwrap() > 0.0, "{name}");
            // FDP statistics exactly when the preset has FDP; untagged writes go to handle 0.
            assert_eq!(i.get("fdp").is_some(), cfg.device.fdp.is_some(), "{name}");
            if let Some(f) = i.get("fdp") {
                assert!(f["by_handle"][0]["host_bytes_written"].as_u64().unwrap() > 0);
            }
        }
    }
}

#[test]
fn suspend_preset_counts_suspensions_under_a_mixed_workload() {
    let spec = WorkloadSpec {
        rw: RwMode::RandRw,
        read_mix_pct: 50,
        iodepth: 16,
        runtime_ns: Some(50_000_000),
        ..WorkloadSpec::default()
    };
    let mut cfg = config(DeviceConfig::preset("z-ssd").unwrap(), 1, spec);
    cfg.scale = None;
    let out = simulate(&cfg);
    let s = out.report.devices[0].internals.as_ref().unwrap()["suspensions"]
        .as_u64()
        .unwrap();
    assert!(s > 0);
}

#[test]
fn raid0_request_completes_with_its_slowest_chunk() {
    // Device 1 of 2 stalls for housekeeping at a known time; a request striped over both waits.
    let dev = one_die("");
    let spec = WorkloadSpec {
        block_size_bytes: 8192,
        ..reads(10_000)
    };
    let mut cfg = config(dev, 2, spec);
    cfg.layout = Layout::Raid0 { stripe_bytes: 4096 };
    let out = simulate(&cfg);
    let h = &out.recorders[0].dir(Op::Read).hist;
    // Both chunks in parallel on separate devices: one chunk's time plus the 4 KiB link each.
    assert_eq!(h.count_between(65_288, 65_288), 10_000);
    assert_eq!(out.stats.chunks, 20_000);
}

#[test]
fn background_tasks_on_shared_cpus_lengthen_the_tail() {
    let spec = reads(100_000);
    let mut quiet = config(one_die(""), 4, spec);
    quiet.host = HostConfig::new(CompletionMode::Interrupt);
    quiet.host.cpus = Some(1);
    let mut noisy = quiet.clone();
    noisy.host.background = Some(Background {
        rate_per_s: 500.0,
        service_ns: 200_000,
        dist: ServiceDist::Fixed,
    });
    let q = simulate(&quiet);
    let n = simulate(&noisy);
    let p999 = |o: &SimOutput| o.report.aggregate.read.lat_ns.percentiles.at(99.9).unwrap();
    assert!(p999(&n) > p999(&q) + 50_000, "{} vs {}", p999(&n), p999(&q));
}

#[test]
fn rate_paced_writes_reach_steady_state_gc() {
    let spec = WorkloadSpec {
        rw: RwMode::RandWrite,
        rate_iops: Some(1000),
        iodepth: 64,
        runtime_ns: Some(2_000_000_000),
        ..WorkloadSpec::default()
    };
    let mut cfg = config(one_die(""), 1, spec);
    cfg.precondition = Some(Precondition::Steady);
    let out = simulate(&cfg);
    let i = out.report.devices[0].internals.as_ref().unwrap();
    assert!(i["write_amplification"].as_f64().unwrap() > 1.5, "{i}");
    assert_eq!(out.report.devices[0].write.ios, 2000);
}

#[test]
fn logs_record_every_io_of_a_raid0_volume_without_changing_the_run() {
    use nines_core::latlog::LatLogReader;
    let mut cfg = config(
        one_die(""),
        4,
        WorkloadSpec {
            rw: RwMode::RandRw,
            read_mix_pct: 70,
            block_size_bytes: 64 << 10,
            iodepth: 8,
            ramp_ns: 1_000_000,
            ..reads(3000)
        },
    );
    cfg.layout = Layout::Raid0 {
        stripe_bytes: 16 << 10,
    };
    let plain = simulate(&cfg);
    let mut prep = prepare(&cfg, true).unwrap();
    let (mut lat, mut hdr) = (Vec::new(), Vec::new());
    let logged = nines_sim::run_logged(
        &mut prep,
        None,
        nines_sim::Logs {
            lat: Some(&mut lat),
            hdr: Some((&mut hdr, 5_000_000)),
        },
        None,
    )
    .unwrap();
    // Logging does not perturb the simulation.
    assert_eq!(plain.report.to_json(), logged.report.to_json());

    let r = &logged.report.devices[0];
    let mut reader = LatLogReader::new(&lat[..]).unwrap();
    assert_eq!(
        reader.header().devices,
        vec!["raid0(4xone-die)".to_string()]
    );
    let (mut n, mut reads, mut lat_max) = ([0u64; 2], 0u64, 0u64);
    for rec in &mut reader {
        let rec = rec.unwrap();
        assert_eq!(rec.device, 0);
        // Measured I/Os only: intended (completion - latency) at or after the ramp.
        assert!(rec.completion_ns - rec.latency_ns >= 1_000_000);
        assert!(rec.offset_bytes % 4096 == 0 && rec.offset_bytes < r.size_bytes);
        n[rec.op.index()] += 1;
        reads += u64::from(rec.op == Op::Read);
        lat_max = lat_max.max(rec.latency_ns);
    }
    assert_eq!(n, [r.read.ios, r.write.ios]);
    assert!(reads > 0 && n[1] > 0);
    assert_eq!(lat_max, r.read.lat_ns.max_ns.max(r.write.lat_ns.max_ns));

    let text = String::from_utf8(hdr).unwrap();
    let tagged = |t: &str| text.lines().filter(|l| l.starts_with(t)).count();
    assert!(tagged("Tag=raid0(4xone-die).read,") > 0);
    assert!(tagged("Tag=raid0(4xone-die).write,") > 0);
}

#[test]
fn folding_raid0_completions_changes_nothing_but_the_event_count() {
    let mut cfg = config(
        one_die(""),
        6,
        WorkloadSpec {
            rw: RwMode::RandRw,
            read_mix_pct: 70,
            block_size_bytes: 96 << 10,
            iodepth: 8,
            ..reads(4000)
        },
    );
    cfg.layout = Layout::Raid0 {
        stripe_bytes: 16 << 10,
    };
    cfg.host = HostConfig::new(CompletionMode::Interrupt);
    let folded = simulate(&cfg);
    cfg.fold_completions = false;
    let each = simulate(&cfg);
    // Same latencies, member statistics and device internals; only the event count differs.
    let strip = |mut r: nines_core::report::Report| {
        r.config.extra.remove("events");
        r.to_json()
    };
    assert!(folded.stats.events < each.stats.events);
    assert_eq!(folded.stats.chunks, each.stats.chunks);
    assert_eq!(strip(folded.report), strip(each.report));
}

#[test]
fn folding_independent_devices_changes_nothing_at_all() {
    // One member per volume: the folded path replaces one completion event by another, so even
    // the event count is the same.
    let mut cfg = config(
        one_die(""),
        3,
        WorkloadSpec {
            rw: RwMode::RandRw,
            read_mix_pct: 60,
            block_size_bytes: 8 << 10,
            iodepth: 4,
            ..reads(3000)
        },
    );
    cfg.host = HostConfig::new(CompletionMode::Interrupt);
    let folded = simulate(&cfg);
    cfg.fold_completions = false;
    let each = simulate(&cfg);
    assert_eq!(folded.stats.events, each.stats.events);
    assert_eq!(folded.stats.chunks, each.stats.chunks);
    assert!(folded.report.to_json().to_string().contains("\"write\""));
    assert_eq!(folded.report.to_json(), each.report.to_json());
}

/// The report counts what the model's optional mechanisms did, per device and summed over a
/// volume's members: read retries, mapping-cache misses and power-state exits appear when their
/// sources are on and are 0 when off.
#[test]
fn the_report_counts_what_the_variance_sources_did() {
    let mut dev = DeviceConfig::preset("afa-m2-2018").unwrap();
    dev.read_retry.probability = 0.05;
    dev.read_retry.steps = 2;
    dev.mapping.cache_bytes = 1 << 20;
    dev.power.states = vec![nines_flash::config::PowerState {
        idle_ns: 100_000,
        exit_ns: 20_000,
        entry_ns: 0,
    }];
    // Think time longer than the idle entry: every read after the first wakes the device.
    let spec = WorkloadSpec {
        thinktime_ns: 300_000,
        ..reads(400)
    };
    let mut cfg = config(dev, 2, spec.clone());
    cfg.scale = None;
    let on = simulate(&cfg).report;
    for d in &on.devices {
        let i = d.internals.as_ref().unwrap();
        let n = |k: &str| i[k].as_u64().unwrap_or_else(|| panic!("{k} missing: {i}"));
        assert!(n("read_retries") > 0, "{i}");
        assert!(n("map_misses") > 0, "{i}");
        assert_eq!(n("power_exits"), 399, "{i}");
        assert_eq!(n("fua_writes"), 0, "{i}");
    }
    let mut off = config(DeviceConfig::preset("afa-m2-2018").unwrap(), 2, spec);
    off.scale = None;
    for d in &simulate(&off).report.devices {
        let i = d.internals.as_ref().unwrap();
        for k in ["read_retries", "map_misses", "power_exits"] {
            assert_eq!(i[k], 0, "{k}: {i}");
        }
    }
    // A volume's row sums its members'.
    cfg.layout = nines_sim::Layout::Raid0 { stripe_bytes: 4096 };
    let vol = simulate(&cfg).report;
    let members = &vol.devices[0].volume.as_ref().unwrap().members;
    let sum: u64 = members
        .iter()
        .map(|m| {
            m.internals.as_ref().unwrap()["map_misses"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert!(sum > 0);
    assert_eq!(
        vol.devices[0].internals.as_ref().unwrap()["map_misses"],
        sum
    );
}
