//! Emulated SSDs (`emu:PRESET[:SIZE]`, issue 12) from the command line: GC stalls of an aged
//! device found by `nines report`, the report naming the preset, scale and the emulation's
//! overhead, writes without --allow-writes, the memory budget's refusal, device control from a
//! raid5 D/ND volume reaching the models, and sweeps over emulated devices.

use std::path::Path;

use serde_json::Value;

mod common;
use common::{nines, ok};

/// A small afa-m2-2018 (4 dies of 256 blocks of 512 KiB, a 1 MiB write buffer): preconditioned
/// in well under a second, and its GC runs within a second of random writes.
const TINY_TOML: &str = r#"
name = "tiny"
description = "4 dies of 256 blocks of 512 KiB: a small afa-m2-2018 for fast tests"
[geometry]
channels = 2
chips_per_channel = 1
dies_per_chip = 2
planes_per_die = 1
blocks_per_plane = 256
pages_per_block = 32
page_size_bytes = 16384
map_unit_bytes = 4096
[timing]
read_ns = 14_000
program_ns = 1_400_000
erase_ns = 3_500_000
channel_bytes_per_s = 1_200_000_000
[ftl]
over_provisioning = 0.07
gc_soft_threshold = 0.05
gc_hard_threshold = 0.02
[controller]
overhead_ns = 2_000
command_ns = 6_250
read_bytes_per_s = 1_700_000_000
write_bytes_per_s = 750_000_000
[buffer]
write_buffer_bytes = 1_048_576
"#;

fn tiny(dir: &Path) {
    std::fs::write(dir.join("tiny.toml"), TINY_TOML).unwrap();
}

fn json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// The done-when of issue 12 on a device small enough for a test: an aged (steady-state)
/// emulated device under 70/30 random I/O at QD1 garbage-collects, the stalls are in the per-I/O log and
/// `nines report` finds them as spikes; the report names the preset, the scale and the
/// emulation's overhead; no --allow-writes was needed.
#[test]
fn an_aged_emulated_device_shows_gc_stalls_in_its_report() {
    let dir = tempfile::tempdir().unwrap();
    tiny(dir.path());
    let out = ok(
        nines(
            &[
                "profile",
                "--rw",
                "randrw",
                "--mix",
                "70",
                "--runtime",
                "2s",
                "--json",
                "run.json",
                "--lat-log",
                "run.lat",
                "emu:tiny.toml:128m",
            ],
            dir.path(),
        ),
        "profile emu:",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("emulated emu:tiny.toml:128m: the tiny model at scale 0.3")
            && stdout.contains("precondition steady; emulation overhead p50"),
        "{stdout}"
    );
    let r = json(&dir.path().join("run.json"));
    let emu = &r["config"]["extra"]["emu"];
    let d = &emu["devices"][0];
    assert_eq!(d["preset"], "tiny");
    assert_eq!(d["size_bytes"], 128u64 << 20);
    let scale = d["scale"].as_f64().unwrap();
    assert!(scale > 0.0 && scale < 1.0, "{scale}");
    assert!(d["model_logical_bytes"].as_u64().unwrap() >= 128 << 20);
    let m = &d["model"];
    assert!(m["gc_episodes"].as_u64().unwrap() > 0, "no GC: {m}");
    // Every measured I/O was one command to the model, and each was timed for overhead (and
    // the few still in flight when the measured time ended).
    let dev = &r["devices"][0];
    let ios = dev["read"]["ios"].as_u64().unwrap() + dev["write"]["ios"].as_u64().unwrap();
    let timed = d["overhead_ns"]["count"].as_u64().unwrap();
    assert!(
        timed >= ios && timed <= ios + 1,
        "{timed} timed, {ios} measured"
    );
    assert!(m["reads"].as_u64().unwrap() + m["writes"].as_u64().unwrap() >= ios);
    // A GC stall holds reads for whole programs and erases (1.4 ms and 3.5 ms here).
    assert!(
        dev["read"]["lat_ns"]["max_ns"].as_u64().unwrap() > 1_400_000,
        "{}",
        dev["read"]
    );

    let out = ok(nines(&["report", "run.json"], dir.path()), "report");
    let _ = out;
    let html = std::fs::read_to_string(dir.path().join("run.html")).unwrap();
    assert!(
        html.contains("latency spikes of at least"),
        "no spikes found in the report"
    );
}

#[test]
fn the_memory_budget_refuses_a_run_that_would_not_fit_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    tiny(dir.path());
    let args = |rw: &'static str| {
        [
            "profile",
            "--quiet",
            "--rw",
            rw,
            "--ios",
            "200",
            "--memory-budget",
            "64m",
            "--json",
            "run.json",
            "emu:tiny.toml:128m",
        ]
    };
    let out = nines(&args("randwrite"), dir.path());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("emu:tiny.toml:128m: needs")
            && err.contains("128 MiB for the data the workload may write")
            && err.contains("--memory-budget 64 MiB"),
        "{err}"
    );
    assert!(!dir.path().join("run.json").exists(), "nothing written");
    // Reads store nothing: the same device fits.
    ok(nines(&args("randread"), dir.path()), "read-only run");
    // A region that fits the budget is accepted for writing.
    let mut a = args("randwrite").to_vec();
    a.splice(1..1, ["--size", "16m"]);
    ok(nines(&a, dir.path()), "a 16 MiB region");
}

#[test]
fn malformed_and_unknown_devices_are_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    tiny(dir.path());
    for (spec, want) in [
        (
            "emu:no-such-preset",
            "unknown device preset `no-such-preset`",
        ),
        ("emu:tiny.toml:1t", "larger than tiny's capacity"),
        ("emu:", "give emu:PRESET or emu:PRESET:SIZE"),
    ] {
        let out = nines(&["profile", "--quiet", "--ios", "10", spec], dir.path());
        assert!(!out.status.success(), "{spec}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{spec}: {err}");
    }
}

/// raid5 with the D/ND policy over emulated members: its PLM-window and GC-now commands reach
/// the models (they have none on real devices), and the volume reports its members.
#[test]
fn raid5_dnd_over_emulated_members_drives_their_models() {
    let dir = tempfile::tempdir().unwrap();
    tiny(dir.path());
    let mut args = vec![
        "profile",
        "--quiet",
        "--layout",
        "raid5",
        "--policy",
        "dnd",
        "--window",
        "50ms",
        "--rw",
        "randrw",
        "--mix",
        "70",
        "--iodepth",
        "4",
        "--runtime",
        "1s",
        "--json",
        "run.json",
    ];
    args.extend(["emu:tiny.toml:32m"; 4]);
    ok(nines(&args, dir.path()), "raid5 dnd over emu");
    let r = json(&dir.path().join("run.json"));
    let devs = r["config"]["extra"]["emu"]["devices"].as_array().unwrap();
    assert_eq!(devs.len(), 4);
    for d in devs {
        assert!(
            d["model"]["controls"].as_u64().unwrap() > 0,
            "no device control reached {}",
            d["name"]
        );
        assert!(d["model"]["reads"].as_u64().unwrap() > 0);
    }
    assert_eq!(
        r["devices"][0]["volume"]["members"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
}

#[test]
fn a_sweep_over_an_emulated_device() {
    let dir = tempfile::tempdir().unwrap();
    tiny(dir.path());
    ok(
        nines(
            &[
                "sweep",
                "--qd",
                "1,8",
                "--rws",
                "randread",
                "-o",
                "out",
                "--",
                "emu:tiny.toml:64m",
                "--runtime",
                "300ms",
            ],
            dir.path(),
        ),
        "sweep",
    );
    let s = json(&dir.path().join("out/sweep.json"));
    let points = s["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    let iops: Vec<f64> = points
        .iter()
        .map(|p| p["report"]["devices"][0]["read"]["iops"].as_f64().unwrap())
        .collect();
    // Eight reads in flight spread over the model's four dies: more I/Os per second than one.
    assert!(iops[1] > 1.5 * iops[0], "{iops:?}");
}

/// `nines serve` over emulated members: nbdcopy writes a file into a raid5 of four emu devices
/// and reads it back from the same server (the data lives in the server's memory), byte for
/// byte; the server's report names the emulated members and their overhead.
#[test]
fn serve_round_trips_data_through_raid5_of_emulated_devices() {
    use std::os::unix::net::UnixStream;
    use std::process::Command;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    tiny(d);
    let have = Command::new("sh")
        .args(["-c", "command -v nbdcopy"])
        .output()
        .unwrap();
    assert!(
        have.status.success(),
        "nbdcopy is missing: run scripts/setup.sh (it installs the NBD clients the tests use)"
    );
    let src = d.join("src");
    let bytes: Vec<u8> = (0..(24u64 << 20))
        .map(|i| (i.wrapping_mul(0x9E37_79B9) >> 13) as u8)
        .collect();
    std::fs::write(&src, &bytes).unwrap();
    let socket = d.join("nbd.sock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_nines"))
        .args([
            "serve",
            "--layout",
            "raid5",
            "--json",
            "serve.json",
            "--socket",
        ])
        .arg(&socket)
        .args(["emu:tiny.toml:8m"; 4])
        .current_dir(d)
        .stderr(std::fs::File::create(d.join("serve.err")).unwrap())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while UnixStream::connect(&socket).is_err() {
        if t0.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!(
                "nines serve never listened: {}",
                std::fs::read_to_string(d.join("serve.err")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let uri = format!("nbd+unix:///nines?socket={}", socket.display());
    let copy = |from: &str, to: &str| {
        let out = Command::new("nbdcopy").args([from, to]).output().unwrap();
        assert!(
            out.status.success(),
            "nbdcopy {from} {to}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    copy(src.to_str().unwrap(), &uri);
    let back = d.join("back");
    copy(&uri, back.to_str().unwrap());
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    assert!(
        std::fs::read(&back).unwrap() == bytes,
        "raid5 over emu round trip"
    );
    let r = json(&d.join("serve.json"));
    let emu = r["nines_serve"]["emu"].as_array().unwrap();
    assert_eq!(emu.len(), 4);
    for e in emu {
        assert_eq!(e["preset"], "tiny");
        assert!(e["overhead_ns"]["count"].as_u64().unwrap() > 0, "{e}");
    }
}

/// The other layouts take emulated members too: a write buffer (`--buffer emu:...`) in front of
/// raid0 of emulated devices takes the writes, and a serial array's front-end column takes them.
#[test]
fn shaping_buffers_and_serial_arrays_take_emulated_members() {
    let dir = tempfile::tempdir().unwrap();
    tiny(dir.path());
    let model = |r: &Value, i: usize, what: &str| {
        r["config"]["extra"]["emu"]["devices"][i]["model"][what]
            .as_u64()
            .unwrap()
    };
    let mut args = vec![
        "profile",
        "--quiet",
        "--layout",
        "raid0",
        "--throttle",
        "20m",
        "--buffer",
        "emu:tiny.toml:32m",
        "--rw",
        "randwrite",
        "--iodepth",
        "4",
        "--ios",
        "500",
        "--json",
        "shaped.json",
    ];
    args.extend(["emu:tiny.toml:32m"; 2]);
    ok(
        nines(&args, dir.path()),
        "raid0 with an emulated write buffer",
    );
    let r = json(&dir.path().join("shaped.json"));
    // The buffer device is the volume's last member.
    assert!(model(&r, 2, "writes") >= 500, "the buffer took the writes");

    let mut args = vec![
        "profile",
        "--quiet",
        "--layout",
        "serial",
        "--segment",
        "4m",
        "--rw",
        "randwrite",
        "--iodepth",
        "4",
        "--ios",
        "500",
        "--json",
        "serial.json",
    ];
    args.extend(["emu:tiny.toml:256m"; 4]);
    ok(nines(&args, dir.path()), "serial over emulated devices");
    let r = json(&dir.path().join("serial.json"));
    let writes: u64 = (0..4).map(|i| model(&r, i, "writes")).sum();
    assert!(writes >= 500, "{writes} writes reached the models");
}

/// `nines serve --layout serial` over zoned emulated members (afa-m2-2018's flash with a
/// `[zoned]` section, shrunk: 32 MiB zones): the server tells the layout its members' zone
/// geometry as profile and sim do, so segments are zones, the first write resets them (no
/// TRIM, which a zoned member refuses) and the front-end writes at the write pointers; nbdcopy
/// reads back what it wrote and no member command failed. A layout that writes in place is
/// refused over the same members before anything is served.
#[test]
fn serve_runs_serial_over_zoned_emulated_members() {
    use common::serving::{Serving, tool};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    common::zoned_toml(d);
    let bytes: Vec<u8> = (0..(24u64 << 20))
        .map(|i| (i.wrapping_mul(0x9E37_79B9) >> 9) as u8)
        .collect();
    std::fs::write(d.join("src"), &bytes).unwrap();
    let members = ["emu:zoned.toml"; 3];
    let mut args = vec![
        "--layout",
        "serial",
        "--segment",
        "32m",
        "--stripe",
        "1m",
        "--json",
        "serve.json",
    ];
    args.extend(members);
    let s = Serving::start(d, &args);
    let uri = s.uri();
    for (from, to) in [
        (d.join("src").to_str().unwrap().to_string(), uri.clone()),
        (uri.clone(), d.join("back").to_str().unwrap().to_string()),
    ] {
        let out = tool("nbdcopy").args([&from, &to]).output().unwrap();
        assert!(
            out.status.success(),
            "nbdcopy {from} {to}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(s.stop().success());
    assert!(std::fs::read(d.join("back")).unwrap()[..bytes.len()] == bytes[..]);
    let r = json(&d.join("serve.json"));
    assert_eq!(
        r["nines_serve"]["member_errors"],
        serde_json::json!([0, 0, 0])
    );
    let st = &r["devices"][0]["volume"]["stats"];
    assert_eq!(st["spec"]["zone_size_bytes"], 33_554_432, "{st}");
    assert_eq!(st["write_errors"], 0, "{st}");
    assert_eq!(st["trim_errors"], 0, "{st}");
    assert_eq!(st["client_write_bytes"], 24 << 20, "{st}");
    // Independent (in place) over a zoned member: refused, nothing served.
    let out = nines(&["serve", "--socket", "x.sock", "emu:zoned.toml"], d);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("zoned") && err.contains("use --layout serial --segment"),
        "{err}"
    );
    assert!(!d.join("x.sock").exists());
}
