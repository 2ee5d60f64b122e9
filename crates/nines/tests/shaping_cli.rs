//! Write shaping from the command line (paper 004): the same options on `sim` and `profile`,
//! over a single device and over raid0, with the policies' counters in the report and real
//! bytes verified on zram.

use std::path::Path;

use nines_core::report::Report;
use serde_json::Value;

mod common;
use common::{Zram, disk_dir, ok, run as nines, s};

fn report(path: &Path) -> Report {
    Report::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn stats(r: &Report) -> &Value {
    &r.devices[0]
        .volume
        .as_ref()
        .expect("a shaped target reports its volume")
        .stats
}

#[test]
fn sim_throttle_holds_writes_to_the_rate_and_reports_its_delays() {
    let dir = disk_dir();
    let json = dir.path().join("t.json");
    let out = nines(&[
        "sim",
        "--quiet",
        "--device",
        "null:1g",
        "--rw",
        "randwrite",
        "--bs",
        "64k",
        "--iodepth",
        "8",
        "--runtime",
        "4s",
        "--ramp",
        "0s",
        "--throttle",
        "8m,1m",
        "--json",
        s(&json),
    ]);
    ok(out, "sim --throttle");
    let r = report(&json);
    let t = &stats(&r)["throttle"];
    // Over 4 s the bucket admits at most 1 MiB + 4 s x 8 MiB/s; the (at most 8) requests held
    // when the runtime ends still drain at the rate and count.
    let written = r.devices[0].write.bytes;
    assert!(
        written <= (1 << 20) + 4 * (8 << 20) + 8 * (64 << 10),
        "{written}"
    );
    assert!(
        written >= 3 * (8 << 20),
        "the rate is used, not starved: {written}"
    );
    assert_eq!(t["rate_bytes_per_s"], 8 << 20);
    assert_eq!(t["burst_bytes"], 1 << 20);
    assert!(t["delayed_ios"].as_u64().unwrap() > 0);
    assert!(t["delay_ns_max"].as_u64().unwrap() > 0);
}

#[test]
fn sim_chop_splits_every_large_write_over_raid0() {
    let dir = disk_dir();
    let json = dir.path().join("c.json");
    let out = nines(&[
        "sim",
        "--quiet",
        "--device",
        "null:256m",
        "--devices",
        "2",
        "--layout",
        "raid0",
        "--stripe",
        "64k",
        "--rw",
        "randwrite",
        "--bs",
        "128k",
        "--iodepth",
        "4",
        "--ios",
        "500",
        "--ramp",
        "0s",
        "--chop",
        "16k",
        "--json",
        s(&json),
    ]);
    ok(out, "sim --chop");
    let r = report(&json);
    let c = &stats(&r)["chop"];
    assert_eq!(c["chopped_writes"], 500);
    assert_eq!(c["pieces"], 500 * 8);
    // Every 16 KiB piece lies inside one 64 KiB stripe unit: one member command each.
    let v = r.devices[0].volume.as_ref().unwrap();
    assert_eq!(v.members.iter().map(|m| m.commands).sum::<u64>(), 4000);
}

#[test]
fn chopped_throttled_writes_on_zram_store_the_verified_pattern() {
    let z = Zram::new("32M");
    let dev = z.path();
    let json = std::env::temp_dir().join(format!("shaping-{}.json", std::process::id()));
    // Write the whole device through chop + throttle, with the verification pattern.
    let out = nines(&[
        "profile",
        "--quiet",
        "--rw",
        "write",
        "--bs",
        "256k",
        "--iodepth",
        "4",
        "--ios",
        "128",
        "--verify",
        "--allow-writes",
        "--seed",
        "5",
        "--chop",
        "16k",
        "--throttle",
        "256m,1m",
        "--json",
        s(&json),
        &dev,
    ]);
    ok(out, "profile --chop --throttle");
    let r = report(&json);
    let _ = std::fs::remove_file(&json);
    let st = stats(&r);
    assert_eq!(st["chop"]["chopped_writes"], 128);
    assert_eq!(st["chop"]["pieces"], 128 * 16);
    assert!(st["throttle"]["admitted_cost_bytes"].as_u64().unwrap() == 32 << 20);
    // Read it back without any shaping: every byte is where the plain device has it.
    ok(
        nines(&[
            "profile", "--quiet", "--rw", "randread", "--bs", "4k", "--ios", "8192", "--verify",
            "--seed", "5", &dev,
        ]),
        "verified read",
    );
    let bytes = std::fs::read(&dev).unwrap();
    let mut expected = vec![0u8; 4096];
    for off in (0..32u64 << 20).step_by(1 << 20 | 4096) {
        nines_io::fill_pattern(&mut expected, off, 5);
        assert_eq!(
            &bytes[off as usize..off as usize + 4096],
            &expected[..],
            "offset {off}"
        );
    }
}

#[test]
fn bad_shaping_options_are_refused_with_the_option_named() {
    for (args, want) in [
        (&["--throttle", "0"][..], "--throttle"),
        (&["--throttle", "1m,4k"], "burst"),
        (&["--chop", "1000"], "--chop"),
    ] {
        let mut a = vec![
            "sim",
            "--quiet",
            "--device",
            "null:64m",
            "--rw",
            "randwrite",
            "--bs",
            "64k",
            "--ios",
            "10",
        ];
        a.extend(args);
        let out = nines(&a);
        assert!(!out.status.success(), "{args:?}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains(want) && e.lines().count() <= 3, "{args:?}: {e}");
    }
}
