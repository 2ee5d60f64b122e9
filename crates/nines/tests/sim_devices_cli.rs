//! `nines sim --list-devices` and `--ideal`: the presets' variance is visible, and the clean
//! model stays one option away.

use std::path::Path;

mod common;
use common::{assert_success, run as nines};

#[test]
fn list_devices_names_every_preset_with_its_sources() {
    let o = nines(&["sim", "--list-devices"]);
    assert_success(&o);
    let text = String::from_utf8_lossy(&o.stdout);
    for name in nines_flash::preset_names() {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} missing:\n{text}"));
        let d = nines_flash::DeviceConfig::preset(name).unwrap();
        assert!(line.contains(&d.class), "{line}");
        for m in d.mechanisms() {
            assert!(line.contains(m), "{name}: {m} missing in {line}");
        }
    }
    assert!(text.contains("femu-ioda") && text.contains("client-nvme"));
    // Sources are named as a reader outside the team's workspace can find them (authors, venue,
    // year), never by the workspace's paper numbers.
    assert!(!text.to_lowercase().contains("paper 0"), "{text}");
    assert!(text.contains("Jin et al., ISPASS'18"), "{text}");
}

fn percentiles(p: &Path) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    v["aggregate"]["read"]["lat_ns"].clone()
}

#[test]
fn default_device_has_a_tail_and_ideal_has_none() {
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str], name: &str| {
        let path = dir.path().join(name);
        let mut args = vec![
            "sim",
            "--quiet",
            "--rw",
            "randread",
            "--iodepth",
            "1",
            "--ios",
            "200000",
            "--json",
            path.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        assert_success(&nines(&args));
        percentiles(&path)
    };
    let real = run(&[], "real.json");
    let ideal = run(&["--ideal"], "ideal.json");
    let named = run(&["--device", "afa-m2-2018-ideal"], "named.json");
    let p = |v: &serde_json::Value, q: &str| v["percentiles"][q].as_f64().unwrap();
    // The clean model: every read the same (the "p50 = max" of the old default).
    assert_eq!(p(&ideal, "50"), p(&ideal, "99.99"));
    assert_eq!(ideal["percentiles"], named["percentiles"]);
    // The default device: page types and firmware jitter give it a tail.
    assert!(
        p(&real, "99.99") >= 1.5 * p(&real, "50"),
        "p50 {} p99.99 {}",
        p(&real, "50"),
        p(&real, "99.99")
    );
    assert!(p(&real, "50") < 1.2 * p(&ideal, "50"));
}
