//! `--placement fdp` from the command line (issue 33): the lifetime classifier tags writes with
//! FDP handles in `nines sim` and through `nines profile` over emulated FDP devices (one
//! policy code), the per-handle statistics reach the JSON, and members without FDP are
//! refused with what to do.

use std::path::Path;

use serde_json::Value;

mod common;
use common::{nines, ok};

/// A small afa-m2-2018 (4 dies of 256 blocks of 512 KiB) with 4 persistently isolated
/// reclaim unit handles: preconditioned in well under a second.
const TINY_FDP: &str = r#"
name = "tiny-fdp"
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
[fdp]
handles = 4
isolation = "persistently"
"#;

fn devices(dir: &Path) {
    std::fs::write(dir.join("fdp.toml"), TINY_FDP).unwrap();
    let conv: String = TINY_FDP
        .split("[fdp]")
        .next()
        .unwrap()
        .replace("tiny-fdp", "tiny");
    std::fs::write(dir.join("conv.toml"), conv).unwrap();
}

fn json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Two writers of different speed over their own regions and a reader.
const JOBS: [&str; 6] = [
    "--job",
    "slow:rw=write,bs=64k,iodepth=1,rate-iops=20,offset=0,size=64m",
    "--job",
    "fast:rw=write,bs=64k,iodepth=1,rate-iops=1000,offset=128m,size=256m",
    "--job",
    "reads:rw=randread,bs=4k,iodepth=4,rate-iops=2000",
];

/// The volume's placement counters and the device's per-handle statistics agree with what
/// was written: every byte the clients wrote went through a handle, the fast writer's in the
/// top one, the slow one's below; handles' host bytes add up to the device's.
#[test]
fn sim_placement_tags_writes_by_lifetime_and_reports_each_handle() {
    let dir = tempfile::tempdir().unwrap();
    devices(dir.path());
    let mut a = vec![
        "sim",
        "--quiet",
        "--device",
        "fdp.toml",
        "--precondition",
        "fill",
        "--runtime",
        "3s",
        "--ramp",
        "0s",
        "--placement",
        "fdp",
        "--json",
        "p.json",
    ];
    a.extend(JOBS);
    ok(nines(&a, dir.path()), "sim --placement fdp");
    let r = json(&dir.path().join("p.json"));
    let d = &r["devices"][0];
    let pl = &d["volume"]["stats"]["placement"];
    assert_eq!(pl["handles"], 4, "{pl}");
    let bytes: Vec<u64> = (0..4)
        .map(|h| pl["bytes_by_handle"][h].as_u64().unwrap())
        .collect();
    let written = d["write"]["bytes"].as_u64().unwrap();
    assert_eq!(bytes.iter().sum::<u64>(), written, "{pl}");
    assert!(bytes[3] > bytes[1] + bytes[2], "fast writer on top: {pl}");
    assert_eq!(bytes[0], 0, "handle 0 is left to untagged data: {pl}");
    let slow = r["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "slow")
        .unwrap()["write"]["bytes"]
        .as_u64()
        .unwrap();
    assert!(slow > 0);
    let fdp = &d["internals"]["fdp"];
    assert_eq!(fdp["handles"], 4, "{fdp}");
    let host: Vec<u64> = (0..4)
        .map(|h| fdp["by_handle"][h]["host_bytes_written"].as_u64().unwrap())
        .collect();
    assert_eq!(host, bytes, "the device saw each handle's bytes");
    let units = d["internals"]["host_units_written"].as_u64().unwrap();
    assert_eq!(host.iter().sum::<u64>(), units * 4096);
    // Sequential writers in handles of their own over a filled device: GC finds victims
    // their overwrites emptied, and moves (next to) nothing.
    let waf = d["internals"]["write_amplification"].as_f64().unwrap();
    assert!((1.0..1.05).contains(&waf), "WAF {waf}");
    // `nines report` shows the handles: a table in the HTML page.
    ok(
        nines(&["report", "p.json", "-o", "p.html"], dir.path()),
        "report",
    );
    let html = std::fs::read_to_string(dir.path().join("p.html")).unwrap();
    assert!(html.contains("per reclaim unit handle"), "no FDP section");
    assert!(html.contains("GC victims"));
}

/// Members without FDP (a conventional model, a null device, a file) are refused with one
/// line saying what to do.
#[test]
fn placement_over_members_without_fdp_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    devices(dir.path());
    for device in ["conv.toml", "null:1g"] {
        let out = nines(
            &[
                "sim",
                "--quiet",
                "--device",
                device,
                "--rw",
                "randwrite",
                "--runtime",
                "100ms",
                "--placement",
                "fdp",
            ],
            dir.path(),
        );
        assert!(!out.status.success(), "{device}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(
            err.contains("--placement fdp needs members with Flexible Data Placement")
                && err.contains("drop --placement"),
            "{err}"
        );
    }
    std::fs::write(dir.path().join("f"), vec![0u8; 1 << 20]).unwrap();
    let out = nines(
        &[
            "profile",
            "--quiet",
            "--rw",
            "randwrite",
            "--size",
            "1m",
            "--runtime",
            "100ms",
            "--placement",
            "fdp",
            "f",
        ],
        dir.path(),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("member 0 has none"), "{err}");
    // With --buffer it is one or the other.
    let out = nines(
        &[
            "sim",
            "--quiet",
            "--device",
            "fdp.toml",
            "--rw",
            "randwrite",
            "--runtime",
            "100ms",
            "--placement",
            "fdp",
            "--buffer",
            "z-ssd",
        ],
        dir.path(),
    );
    assert!(!out.status.success());
}

/// The same policy through `nines profile` over an emulated FDP device (raid0 of two, at the
/// real clock): every write placed, the handles' bytes adding up to what was written.
#[test]
fn profile_places_writes_on_emulated_fdp_members() {
    let dir = tempfile::tempdir().unwrap();
    devices(dir.path());
    let mut a = vec![
        "profile",
        "--quiet",
        "--runtime",
        "2s",
        "--ramp",
        "0s",
        "--layout",
        "raid0",
        "--placement",
        "fdp",
        "--json",
        "e.json",
    ];
    a.extend(JOBS);
    a.extend(["emu:fdp.toml:256m", "emu:fdp.toml:256m"]);
    ok(nines(&a, dir.path()), "profile --placement fdp over emu:");
    let r = json(&dir.path().join("e.json"));
    let d = &r["devices"][0];
    let pl = &d["volume"]["stats"]["placement"];
    assert_eq!(pl["handles"], 4, "{pl}");
    let bytes: u64 = (0..4)
        .map(|h| pl["bytes_by_handle"][h].as_u64().unwrap())
        .sum();
    assert_eq!(bytes, d["write"]["bytes"].as_u64().unwrap(), "{pl}");
    assert!(bytes > 0);
    assert!(pl["bytes_by_handle"][3].as_u64().unwrap() > 0, "{pl}");
}

/// `nines serve --placement fdp` over emulated FDP members (raid0 of two): the server asks its
/// members for their handles as profile and sim do, nbdcopy writes a file in and reads the same
/// bytes back, and every byte the client wrote went through a handle. Over files it is refused
/// with what to do, before anything is served.
#[test]
fn serve_places_writes_on_emulated_fdp_members() {
    use common::serving::{Serving, tool};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    devices(d);
    let bytes: Vec<u8> = (0..(8u64 << 20))
        .map(|i| (i.wrapping_mul(0x9E37_79B9) >> 11) as u8)
        .collect();
    std::fs::write(d.join("src"), &bytes).unwrap();
    let s = Serving::start(
        d,
        &[
            "--layout",
            "raid0",
            "--placement",
            "fdp",
            "--json",
            "serve.json",
            "emu:fdp.toml:64m",
            "emu:fdp.toml:64m",
        ],
    );
    let copy = |from: &str, to: &str| {
        let out = tool("nbdcopy").args([from, to]).output().unwrap();
        assert!(
            out.status.success(),
            "nbdcopy {from} {to}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let uri = s.uri();
    copy(d.join("src").to_str().unwrap(), &uri);
    copy(&uri, d.join("back").to_str().unwrap());
    assert!(s.stop().success());
    assert!(std::fs::read(d.join("back")).unwrap()[..bytes.len()] == bytes[..]);
    let r = json(&d.join("serve.json"));
    let pl = &r["devices"][0]["volume"]["stats"]["placement"];
    assert_eq!(pl["handles"], 4, "{pl}");
    let placed: u64 = (0..4)
        .map(|h| pl["bytes_by_handle"][h].as_u64().unwrap())
        .sum();
    assert_eq!(placed, 8 << 20, "every client byte through a handle: {pl}");
    // Files have no handles: refused in one line, nothing served.
    std::fs::write(d.join("f"), vec![0u8; 1 << 20]).unwrap();
    let out = nines(
        &["serve", "--placement", "fdp", "--socket", "x.sock", "f"],
        d,
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("--placement fdp needs members with Flexible Data Placement")
            && err.contains("member 0 has none"),
        "{err}"
    );
    assert!(!d.join("x.sock").exists());
}
