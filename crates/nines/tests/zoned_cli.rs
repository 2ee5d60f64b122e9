//! `nines sim` over zoned members (issue 33): the serial layout runs over them with no device GC
//! and no front-end GC, resets zones, moves xGC's data by zone append; other layouts and
//! geometries that do not fit zones are refused in one line.

mod common;
use common::{assert_success, run as nines, zoned_toml};

#[test]
fn serial_over_zoned_members_collects_on_the_host_only() {
    let dir = tempfile::tempdir().unwrap();
    let dev = zoned_toml(dir.path());
    let json = dir.path().join("r.json");
    let o = nines(&[
        "sim",
        "--quiet",
        "--device",
        dev.to_str().unwrap(),
        "--scale",
        "1",
        "--devices",
        "4",
        "--layout",
        "serial",
        "--segment",
        "32m",
        "--stripe",
        "1m",
        "--gc-start",
        "3",
        "--gc-stop",
        "4",
        "--gc-depth",
        "8",
        "--gc-move",
        "1m",
        "--rw",
        "randwrite",
        "--bs",
        "256k",
        "--iodepth",
        "8",
        "--runtime",
        "12s",
        "--ramp",
        "0s",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_success(&o);
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let d = &r["devices"][0];
    let i = &d["internals"];
    let st = &d["volume"]["stats"];
    // xGC ran: victims cleaned, units moved (by zone append), zones reset.
    assert!(st["gc_victims"].as_u64().unwrap() > 0, "{st}");
    assert!(st["gc_units_moved"].as_u64().unwrap() > 0, "{st}");
    assert_eq!(st["gc_errors"], 0);
    assert_eq!(st["write_errors"], 0);
    assert_eq!(st["trim_errors"], 0);
    let z = &i["zoned"];
    assert!(z["zone_appends"].as_u64().unwrap() > 0, "{z}");
    // Every segment reset at the first write (4 x 40), then one per cleaned victim; the
    // policy counts a reset when it completes, the device when it is sent (at most the four
    // reset slots in flight at the end).
    let (resets, done) = (
        z["zone_resets"].as_u64().unwrap(),
        st["segments_trimmed"].as_u64().unwrap(),
    );
    assert!(
        resets <= 160 + st["gc_victims"].as_u64().unwrap(),
        "{z} {st}"
    );
    assert!((done..=done + 4).contains(&resets), "{z} {st}");
    assert!(resets > 160, "{z}");
    assert_eq!(z["invalid_writes"], 0);
    assert_eq!(z["zone_full_errors"], 0);
    assert_eq!(z["too_many_open_errors"], 0);
    assert_eq!(z["too_many_active_errors"], 0);
    assert!(z["open_zones_peak"].as_u64().unwrap() <= 4);
    // No device GC, none on the front-end; the device writes what it is given.
    assert_eq!(i["gc_units_moved"], 0);
    assert_eq!(i["gc_runs"], 0);
    assert_eq!(i["gc_units_moved_while_gc_free"], 0);
    assert_eq!(i["write_amplification"], 1.0);
    assert!(r["extra"]["io_errors"].is_null(), "{}", r["extra"]);
    // `nines report` shows the zoned summary (in its HTML page, beside the JSON).
    let o = nines(&["report", json.to_str().unwrap()]);
    assert_success(&o);
    let text = std::fs::read_to_string(json.with_extension("html")).unwrap();
    assert!(
        text.contains("zone resets") && text.contains("device GC moves 0"),
        "no zoned summary in the report page"
    );
}

#[test]
fn layouts_and_geometries_that_do_not_fit_zones_are_refused() {
    let refused = |args: &[&str], want: &str| {
        let mut a = vec!["sim", "--quiet", "--device", "zn540", "--devices", "2"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["--rw", "write", "--runtime", "10ms"]);
        let o = nines(&a);
        assert!(!o.status.success(), "{a:?} ran");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{a:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    };
    refused(&["--layout", "raid0"], "is zoned");
    refused(&[], "--layout serial");
    refused(
        &["--layout", "serial", "--segment", "128m"],
        "use --segment 1129316352",
    );
    refused(
        &["--layout", "serial", "--segment", "1129316352", "--persist"],
        "--persist",
    );
}
