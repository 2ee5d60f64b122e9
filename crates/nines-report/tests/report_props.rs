//! Properties: parsers of user files never panic, axes always cover their data, the spike
//! detector's output is well formed on any input.

use nines_report::axis::{Axis, LabelFormat};
use nines_report::intervals::parse_interval_log;
use nines_report::spikes::{SpikeDetector, SpikeParams};
use proptest::prelude::*;

proptest! {
    #[test]
    fn interval_log_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = parse_interval_log(&bytes);
    }

    #[test]
    fn interval_log_parser_on_text_like_input(s in "[0-9.,A-Za-z#:= \n/+]{0,300}") {
        if let Err(e) = parse_interval_log(s.as_bytes()) {
            let msg = e.to_string();
            prop_assert!(!msg.contains('\n'));
            prop_assert!(msg.contains("hdr-log"));
        }
    }

    #[test]
    fn log_axis_covers_its_data(lo in 1e-3f64..1e12, f in 1.0f64..1e6) {
        let hi = lo * f;
        let a = Axis::log("y", lo, hi, LabelFormat::Nanoseconds);
        prop_assert!(a.min <= lo && a.max >= hi);
        prop_assert!(!a.ticks.is_empty());
        for t in &a.ticks {
            prop_assert!(t.value >= a.min * 0.999 && t.value <= a.max * 1.001);
            prop_assert!(!t.label.is_empty());
        }
    }

    #[test]
    fn linear_axis_covers_its_data(lo in -1e9f64..1e9, w in 0.0f64..1e9) {
        let hi = lo + w;
        let a = Axis::linear("x", lo, hi, LabelFormat::Plain);
        prop_assert!(a.min <= lo && a.max >= hi && a.min < a.max);
        prop_assert!(a.ticks.len() >= 2 && a.ticks.len() <= 101);
    }

    #[test]
    fn spikes_are_well_formed(
        recs in proptest::collection::vec((0u16..4, 0u64..10_000_000_000, 1u64..100_000_000), 0..500),
        median in 1u64..1_000_000,
    ) {
        let mut d = SpikeDetector::new(SpikeParams::default(), median);
        for &(dev, c, l) in &recs {
            d.push(dev, c, l);
        }
        let a = d.finish();
        let slow = recs.iter().filter(|r| r.2 >= a.threshold_ns).count() as u64;
        prop_assert_eq!(a.spikes.iter().map(|s| s.slow_ios).sum::<u64>(), slow);
        for w in a.spikes.windows(2) {
            prop_assert!(w[0].end_ns < w[1].start_ns, "merged spikes do not overlap");
        }
        for s in &a.spikes {
            prop_assert!(s.start_ns <= s.end_ns && s.height_ns >= a.threshold_ns);
            prop_assert!(!s.devices.is_empty() && s.devices.windows(2).all(|w| w[0] < w[1]));
        }
        for p in &a.periodic {
            prop_assert!(p.occurrences >= 4 && p.period_ns > 0);
            prop_assert!(p.period_ns <= a.span_ns.1 - a.span_ns.0);
        }
    }
}
