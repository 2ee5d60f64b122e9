//! Spike detection on a simulated run: the SSD model of nines-flash with periodic housekeeping
//! (paper 000's SMART stalls) driven at QD1 by random reads, every completion fed to the
//! detector exactly as the per-I/O log would be.

use nines_core::op::Op;
use nines_flash::config::DeviceConfig;
use nines_flash::ssd::{Precondition, Ssd};
use nines_report::spikes::{SpikeDetector, SpikeParams};

fn run(devices: u16, period_ns: u64, duration_ns: u64, run_ns: u64) -> Vec<(u16, u64, u64)> {
    let mut cfg = DeviceConfig::preset("afa-m2-2018")
        .unwrap()
        .scaled(0.03)
        .unwrap();
    cfg.housekeeping.period_ns = period_ns;
    cfg.housekeeping.duration_ns = duration_ns;
    let mut out = Vec::new();
    for dev in 0..devices {
        let mut ssd = Ssd::new(&cfg, 100 + u64::from(dev));
        ssd.precondition(Precondition::Fill, 7);
        let units = ssd.logical_bytes() / 4096;
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(dev);
        let mut t = 0u64;
        while t < run_ns {
            // xorshift: a deterministic random offset without a dependency.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let done = ssd.submit(t, Op::Read, (x % units) * 4096, 4096);
            out.push((dev, done, done - t));
            t = done;
        }
    }
    out
}

#[test]
fn simulated_housekeeping_is_found_periodic() {
    let (period, dur) = (400_000_000u64, 1_000_000u64);
    let recs = run(3, period, dur, 4_000_000_000);
    let mut lats: Vec<u64> = recs.iter().map(|r| r.2).collect();
    lats.sort_unstable();
    let mut det = SpikeDetector::new(SpikeParams::default(), lats[lats.len() / 2]);
    for &(d, c, l) in &recs {
        det.push(d, c, l);
    }
    let a = det.finish();
    // Every device has the same period (each its own phase): one finding naming all three.
    assert_eq!(a.periodic.len(), 1, "{:#?}", a.periodic);
    let p = &a.periodic[0];
    assert_eq!(p.devices, [0, 1, 2]);
    let rel = |x: u64, y: u64| (x as f64 - y as f64).abs() / y as f64;
    assert!(rel(p.period_ns, period) < 0.05, "period {}", p.period_ns);
    assert!(rel(p.duration_ns, dur) < 0.05, "duration {}", p.duration_ns);
    // Ten stalls per device in 4 s, minus at most one cut by the run's edges.
    assert!(
        p.occurrences >= 27 && p.occurrences <= 30,
        "{}",
        p.occurrences
    );
}

#[test]
fn simulated_run_without_housekeeping_has_no_periodic_spikes() {
    let recs = run(2, 0, 0, 2_000_000_000);
    let mut lats: Vec<u64> = recs.iter().map(|r| r.2).collect();
    lats.sort_unstable();
    let mut det = SpikeDetector::new(SpikeParams::default(), lats[lats.len() / 2]);
    for &(d, c, l) in &recs {
        det.push(d, c, l);
    }
    let a = det.finish();
    assert!(a.periodic.is_empty(), "{:#?}", a.periodic);
}
