//! The shipped presets: each real device turns on the variance sources of its class, `-ideal`
//! names give the clean model, and the femu-ioda preset is the geometry IODA ran on.

use nines_flash::config::GcMode;
use nines_flash::{DeviceConfig, preset_names};

#[test]
fn ideal_names_give_the_clean_model_of_every_preset() {
    for name in preset_names() {
        let real = DeviceConfig::preset(name).unwrap();
        let ideal = DeviceConfig::preset(&format!("{name}-ideal")).unwrap();
        assert_eq!(ideal, real.ideal(), "{name}");
        assert_eq!(ideal.name, format!("{name}-ideal"));
        ideal.validate().unwrap();
        // Only z-ssd's suspend (what that device is) stays: no variance source, preempt GC.
        let left: Vec<_> = ideal
            .mechanisms()
            .into_iter()
            .filter(|m| *m != "suspend")
            .collect();
        assert!(left.is_empty(), "{name}-ideal keeps {left:?}");
        assert_eq!(ideal.ftl.gc_mode, GcMode::Preempt);
        // Same device otherwise: geometry, mean times, FTL thresholds, controller.
        assert_eq!(ideal.geometry, real.geometry);
        assert_eq!(ideal.timing.read_ns, real.timing.read_ns);
        assert_eq!(ideal.controller, real.controller);
        assert_eq!(ideal.logical_bytes(), real.logical_bytes());
    }
    assert!(DeviceConfig::preset("nonsense-ideal").is_err());
}

#[test]
fn page_type_means_are_the_ideal_times() {
    // --ideal keeps timing.read_ns / program_ns: each preset's page types average to them.
    for name in preset_names() {
        let d = DeviceConfig::preset(name).unwrap();
        for (types, mean) in [
            (&d.timing.read_ns_by_page_type, d.timing.read_ns),
            (&d.timing.program_ns_by_page_type, d.timing.program_ns),
        ] {
            if !types.is_empty() {
                assert_eq!(
                    types.iter().sum::<u64>() / types.len() as u64,
                    mean,
                    "{name}"
                );
            }
        }
    }
}

#[test]
fn real_devices_turn_on_the_sources_of_their_class() {
    let has = |name: &str, want: &[&str]| {
        let m = DeviceConfig::preset(name).unwrap().mechanisms();
        for w in want {
            assert!(m.contains(w), "{name}: {m:?} lacks {w}");
        }
    };
    has("afa-m2-2018", &["page-types", "firmware-jitter"]);
    has("intel-750", &["page-types", "gc-foreground"]);
    has("p4600", &["page-types"]);
    has(
        "client-nvme",
        &[
            "page-types",
            "power-states",
            "volatile-cache",
            "gc-foreground",
        ],
    );
    has("femu-ioda", &["gc-blocking"]);
    // The emulator and the simulators' presets have no variance of their own.
    for name in ["femu-ioda", "mqsim-default", "ttflash-fast17"] {
        let m = DeviceConfig::preset(name).unwrap().mechanisms();
        assert!(
            m.iter().all(|s| s.starts_with("gc-")),
            "{name} has variance sources {m:?}"
        );
    }
    // client-nvme gives its id-ctrl table's non-operational states; the host's APST policy
    // (nines_sim::apst) decides which it enters and when.
    let c = DeviceConfig::preset("client-nvme").unwrap();
    assert!(c.power.states.is_empty());
    let d: Vec<_> = c
        .power
        .descriptors
        .iter()
        .map(|p| (p.index, p.operational, p.entry_us, p.exit_us))
        .collect();
    assert_eq!(d, vec![(3, false, 210, 1_200), (4, false, 2_000, 8_000)]);
    // Both ways of giving power states at once are refused.
    let mut both = c.clone();
    both.power.states = vec![nines_flash::config::PowerState {
        idle_ns: 1,
        exit_ns: 1,
        entry_ns: 0,
    }];
    assert!(
        both.validate()
            .unwrap_err()
            .to_string()
            .contains("not both")
    );
    for d in preset_names() {
        assert!(!DeviceConfig::preset(d).unwrap().class.is_empty(), "{d}");
    }
}

#[test]
fn femu_ioda_is_the_geometry_ioda_ran_on() {
    let d = DeviceConfig::preset("femu-ioda").unwrap();
    let g = &d.geometry;
    assert_eq!(
        (
            g.channels,
            g.chips_per_channel * g.dies_per_chip,
            g.planes_per_die,
            g.page_size_bytes,
            g.pages_per_block,
            g.blocks_per_plane
        ),
        (8, 8, 1, 4096, 256, 256)
    );
    assert_eq!(
        (d.timing.read_ns, d.timing.program_ns, d.timing.erase_ns),
        (40_000, 200_000, 2_000_000)
    );
    assert_eq!(d.ftl.gc_mode, GcMode::Blocking);
    // GC at 90% full: the soft threshold is 10% of a LUN's 256 blocks.
    let (soft, _) = d.gc_thresholds_blocks();
    assert_eq!(soft, 26);
    assert_eq!(d.physical_bytes(), 16 << 30);
}

/// A calibrated description names the host model it was fitted with; it survives the TOML round
/// trip, no preset has one, and a mode that does not exist is refused naming the field.
#[test]
fn fitted_completion_round_trips_and_is_checked() {
    for name in preset_names() {
        assert_eq!(DeviceConfig::preset(name).unwrap().fitted_completion, None);
    }
    let mut d = DeviceConfig::preset("afa-m2-2018").unwrap();
    d.fitted_completion = Some("none".into());
    let text = d.to_toml().unwrap();
    assert!(text.contains("fitted_completion = \"none\""), "{text}");
    let back = DeviceConfig::from_toml(&text, "fitted.toml").unwrap();
    assert_eq!(back, d);
    let bad = text.replace(
        "fitted_completion = \"none\"",
        "fitted_completion = \"irq\"",
    );
    let err = DeviceConfig::from_toml(&bad, "bad.toml")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("fitted_completion") && err.contains("interrupt, polled or none"),
        "{err}"
    );
}
