//! Zoned namespaces (NVMe ZNS) through the kernel's zoned block API, in the guest of
//! `boot_mixed_controllers`: its zoned namespaces are QEMU's
//! `zoned=true,zoned.zone_size=64M,zoned.zone_capacity=48M,zoned.max_open=6,zoned.max_active=8`
//! namespaces of 512 MiB ([`ZNS`]), one beside a conventional namespace on controller 1 and
//! two on controller 2. What is checked (docs/arch-zoned.md, "Real zoned block devices"):
//! nines reads the geometry QEMU was given, and the zones `blkzone report` sees; resets,
//! finishes, opens and closes move the write pointers; writes in place are refused in one line
//! before any I/O, reads run; `--layout serial` over the three zoned namespaces through `nines
//! profile` (with xGC's appends) and `nines serve` (what nbdcopy wrote reads back after xGC),
//! with no write-pointer error, no device GC, and `nines check` finding every zone one the
//! volume could leave; fio's `zonemode=zbd` (`nines profile --zonemode zbd`) with every engine,
//! sequential and random, each zone's write pointer moved by exactly the bytes nines wrote
//! there.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nines_io::target::{Target, TargetOptions};
use nines_io::zoned::{self, ZoneCond, ZoneMgmt, ZonedModel};

use crate::guest::{block_ios, in_guest, nines, nines_ok, report};

/// What `MIXED`'s `zns:512M:64M:48M:6:8` namespaces are (main.rs).
const ZNS: Zns = Zns {
    size_bytes: 512 << 20,
    zone_bytes: 64 << 20,
    cap_bytes: 48 << 20,
    max_open: 6,
    max_active: 8,
    count: 3,
};

struct Zns {
    size_bytes: u64,
    zone_bytes: u64,
    cap_bytes: u64,
    max_open: u32,
    max_active: u32,
    /// Zoned namespaces in the guest.
    count: usize,
}

/// Serial over the zoned namespaces: segments of one zone's capacity; the front-end rotating
/// with 2 of its 8 segments free, and GC as soon as that first rotation leaves fewer than 11
/// free outside the front-end (3 columns x (2 + 1) + 11 in reserve: 4 segments, a 192 MiB
/// volume), so about 300 MiB of writes make xGC move data by appends and reset zones; stripe
/// units of 256 KiB, which the namespaces take as one request (at most 127 pages:
/// max_segments).
const SERIAL: &[&str] = &[
    "--layout",
    "serial",
    "--segment",
    "48m",
    "--stripe",
    "256k",
    "--rotate-free",
    "2",
    "--gc-start",
    "11",
    "--gc-stop",
    "11",
    "--gc-depth",
    "8",
];
const VOLUME_BYTES: u64 = 4 * (48 << 20);

/// The guest's host-managed zoned block devices (/dev/nvmeXnY), in name order.
fn zoned_devices() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/sys/block")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("nvme"))
        .filter(|n| {
            std::fs::read_to_string(format!("/sys/block/{n}/queue/zoned"))
                .is_ok_and(|z| z.trim() == "host-managed")
        })
        .map(|n| format!("/dev/{n}"))
        .collect();
    v.sort();
    assert_eq!(
        v.len(),
        ZNS.count,
        "the guest's zoned namespaces: {v:?} (boot_mixed_controllers gives {})",
        ZNS.count
    );
    v
}

/// A conventional namespace on a controller that also has a zoned one.
fn conventional_beside_zoned() -> String {
    let z = zoned_devices();
    let ctrl = z[0]
        .trim_start_matches("/dev/nvme")
        .split('n')
        .next()
        .unwrap()
        .to_string();
    let name = format!("nvme{ctrl}n1");
    assert_eq!(
        std::fs::read_to_string(format!("/sys/block/{name}/queue/zoned"))
            .unwrap()
            .trim(),
        "none",
        "{name} is the conventional namespace beside {}",
        z[0]
    );
    format!("/dev/{name}")
}

fn open(path: &str, write: bool) -> Target {
    Target::open(
        Path::new(path),
        &TargetOptions {
            write,
            allow_writes: write,
            ..TargetOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("open {path}: {e}"))
}

/// `blkzone report`'s zones: start, length, capacity and write pointer (from the zone's start)
/// in sectors, and the condition number.
fn blkzone(dev: &str) -> Vec<(u64, u64, u64, u64, u8)> {
    let out = Command::new("blkzone")
        .args(["report", dev])
        .output()
        .expect("blkzone (util-linux) runs in the guest");
    assert!(out.status.success(), "blkzone report {dev}: {out:?}");
    let hex = |s: &str| u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let field = |k: &str| {
                let rest = &l[l.find(k).unwrap_or_else(|| panic!("{k} in {l:?}")) + k.len()..];
                rest.split([',', ' '])
                    .find(|s| !s.is_empty())
                    .unwrap()
                    .to_string()
            };
            let cond = field("zcond:");
            let cond: u8 = cond[..cond.find('(').unwrap()].parse().unwrap();
            (
                hex(&field("start:")),
                hex(&field("len")),
                hex(&field("cap")),
                hex(&field("wptr")),
                cond,
            )
        })
        .collect()
}

fn cond_code(c: ZoneCond) -> u8 {
    match c {
        ZoneCond::NotWp => 0,
        ZoneCond::Empty => 1,
        ZoneCond::ImplicitOpen => 2,
        ZoneCond::ExplicitOpen => 3,
        ZoneCond::Closed => 4,
        ZoneCond::ReadOnly => 13,
        ZoneCond::Full => 14,
        ZoneCond::Offline => 15,
    }
}

#[test]
#[ignore = "runs inside the NVMe guest (boot_mixed_controllers)"]
fn guest_zoned_geometry_matches_the_qemu_namespaces() {
    in_guest();
    for dev in zoned_devices() {
        let t = open(&dev, false);
        let name = t.name().to_string();
        let (major, minor) = t.dev_t().unwrap();
        let q = zoned::read_queue(Path::new("/sys"), major, minor).unwrap();
        assert_eq!(q.model, ZonedModel::HostManaged);
        assert_eq!(q.chunk_sectors, ZNS.zone_bytes / 512, "{name}");
        assert_eq!(q.nr_zones, ZNS.size_bytes / ZNS.zone_bytes, "{name}");
        let z = t.zoned().unwrap_or_else(|| panic!("{name} read as zoned"));
        let g = &z.geometry;
        assert_eq!(
            (g.zone_size_bytes, g.zone_capacity_bytes, g.zones),
            (
                ZNS.zone_bytes,
                ZNS.cap_bytes,
                ZNS.size_bytes / ZNS.zone_bytes
            ),
            "{name}"
        );
        assert_eq!(
            (g.max_open_zones, g.max_active_zones),
            (ZNS.max_open, ZNS.max_active)
        );
        assert_eq!((g.conventional_zones, g.unwritable_zones), (0, 0));
        // Zone by zone as util-linux reads the same ioctl.
        let fd = t.file().unwrap().as_raw_fd();
        let zones = zoned::report_zones(fd, t.size_bytes()).unwrap();
        let theirs = blkzone(&dev);
        assert_eq!(zones.len(), theirs.len(), "{name}");
        for (a, b) in zones.iter().zip(&theirs) {
            // blkzone prints the write pointer from the zone's start.
            let wp = (a.wp_bytes - a.start_bytes) / 512;
            assert_eq!(
                (
                    a.start_bytes / 512,
                    a.len_bytes / 512,
                    a.capacity_bytes / 512,
                    wp
                ),
                (b.0, b.1, b.2, b.3),
                "{name}: {a:?} against blkzone's {b:?}"
            );
            assert_eq!(cond_code(a.cond), b.4, "{name}: {a:?}");
        }
    }
    // A conventional namespace reads as not zoned.
    assert!(open(&conventional_beside_zoned(), false).zoned().is_none());
}

#[test]
#[ignore = "runs inside the NVMe guest (boot_mixed_controllers)"]
fn guest_zoned_reset_finish_open_close_move_the_write_pointers() {
    in_guest();
    let dev = zoned_devices().pop().unwrap();
    let (zs, cap) = (ZNS.zone_bytes, ZNS.cap_bytes);
    // Without write permission the kernel refuses zone management (EBADF).
    let ro = open(&dev, false);
    let e = zoned::zone_mgmt(ro.file().unwrap().as_raw_fd(), ZoneMgmt::Reset, 0, zs).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EBADF), "{e}");
    drop(ro);
    let t = open(&dev, true);
    let fd = t.file().unwrap().as_raw_fd();
    let zone = |z: u64| zoned::report_zone(fd, z * zs).unwrap();
    zoned::zone_mgmt(fd, ZoneMgmt::Reset, 0, ZNS.size_bytes).unwrap();
    assert!((0..8).all(|z| zone(z).cond == ZoneCond::Empty));
    // 1 MiB at zone 1's write pointer (O_DIRECT, an aligned buffer).
    let mut buf = nines_io::buf::AlignedBuf::new(1 << 20);
    buf.as_mut_slice().fill(0x5a);
    // SAFETY: the buffer holds 1 MiB and outlives the call.
    let n = unsafe { libc::pwrite(fd, buf.as_mut_ptr().cast(), 1 << 20, zs as i64) };
    assert_eq!(n, 1 << 20, "{}", std::io::Error::last_os_error());
    let z1 = zone(1);
    assert_eq!(
        (z1.cond, z1.written_bytes()),
        (ZoneCond::ImplicitOpen, 1 << 20)
    );
    // Off the write pointer: the device refuses it.
    // SAFETY: as above.
    let n = unsafe { libc::pwrite(fd, buf.as_mut_ptr().cast(), 4096, zs as i64 + (2 << 20)) };
    assert!(n < 0, "a write off the pointer was taken");
    zoned::zone_mgmt(fd, ZoneMgmt::Finish, zs, zs).unwrap();
    let z1 = zone(1);
    assert_eq!((z1.cond, z1.written_bytes()), (ZoneCond::Full, cap));
    zoned::zone_mgmt(fd, ZoneMgmt::Reset, zs, zs).unwrap();
    assert_eq!(zone(1).cond, ZoneCond::Empty);
    zoned::zone_mgmt(fd, ZoneMgmt::Open, 2 * zs, zs).unwrap();
    assert_eq!(zone(2).cond, ZoneCond::ExplicitOpen);
    zoned::zone_mgmt(fd, ZoneMgmt::Close, 2 * zs, zs).unwrap();
    let c = zone(2).cond;
    assert!(
        matches!(c, ZoneCond::Empty | ZoneCond::Closed),
        "closed, not open: {c:?}"
    );
    // A reset that is not of whole zones is refused by the kernel.
    assert!(zoned::zone_mgmt(fd, ZoneMgmt::Reset, 4096, zs).is_err());
}

#[test]
#[ignore = "runs inside the NVMe guest (boot_mixed_controllers)"]
fn guest_zoned_in_place_writes_are_refused_in_one_line_and_reads_run() {
    in_guest();
    let devs = zoned_devices();
    let dev = devs[0].as_str();
    let name = dev.trim_start_matches("/dev/");
    let writes_before = block_ios(name).1;
    for rw in ["randwrite", "write", "randrw"] {
        let out = nines(&[
            "profile",
            dev,
            "--rw",
            rw,
            "--ios",
            "100",
            "--allow-writes",
            "--quiet",
        ]);
        assert!(!out.status.success(), "--rw {rw} ran");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.contains(&format!(
                "{name} is host-managed zoned, 8 zones of 64 MiB (48 MiB writable)"
            )) && err.contains("read it (--rw read or randread)")
                && err.contains("--zonemode zbd")
                && err.contains("--layout serial --segment 48m"),
            "{err}"
        );
    }
    // Layouts that write in place, and zoned members beside a conventional one.
    let mut args = vec![
        "profile",
        "--layout",
        "raid0",
        "--rw",
        "randwrite",
        "--ios",
        "10",
    ];
    args.extend(["--allow-writes", "--quiet"]);
    args.extend(devs.iter().map(String::as_str));
    let err = String::from_utf8_lossy(&nines(&args).stderr).to_string();
    assert!(
        err.contains("--layout raid0 writes in place; use --layout serial"),
        "{err}"
    );
    let conv = conventional_beside_zoned();
    let mut args = vec![
        "profile",
        "--rw",
        "randwrite",
        "--ios",
        "10",
        "--allow-writes",
    ];
    args.extend(SERIAL);
    args.extend([devs[0].as_str(), devs[1].as_str(), conv.as_str()]);
    let err = String::from_utf8_lossy(&nines(&args).stderr).to_string();
    assert!(err.contains("is a conventional device"), "{err}");
    // Without --allow-writes the safety rule speaks first, as for any block device.
    let out = nines(&["profile", dev, "--rw", "randwrite", "--ios", "10"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-writes"));
    assert_eq!(block_ios(name).1, writes_before, "a refusal wrote nothing");
    // Reads go anywhere (zeros above the write pointers).
    let json = std::env::temp_dir().join("zoned-read.json");
    nines_ok(&[
        "profile",
        dev,
        "--rw",
        "randread",
        "--ios",
        "2000",
        "--iodepth",
        "8",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]);
    let r = report(&json);
    assert_eq!(r["devices"][0]["read"]["ios"], 2000);
    assert_eq!(
        r["devices"][0]["internals"]["zoned"]["zone_capacity_bytes"],
        48 << 20
    );
}

/// The members' part of a report: each member's zoned counters; asserts none failed.
fn members_clean(r: &serde_json::Value) -> (u64, u64, u64) {
    let mut sums = (0, 0, 0);
    for m in r["devices"][0]["volume"]["members"].as_array().unwrap() {
        let z = &m["internals"]["zoned"];
        assert_eq!(m["errors"], 0, "{m}");
        assert_eq!(z["write_pointer_errors"], 0, "{m}");
        assert_eq!(z["device_errors"], 0, "{m}");
        assert_eq!(m["internals"]["gc_units_moved"], 0, "no device GC: {m}");
        sums.0 += z["appends"].as_u64().unwrap();
        sums.1 += z["resets"].as_u64().unwrap();
        sums.2 += z["writes"].as_u64().unwrap();
    }
    sums
}

/// `nines check --layout serial` over the zoned namespaces: no zone a volume cannot leave.
fn check_clean(devs: &[String]) {
    let json = std::env::temp_dir().join("zoned-check.json");
    let mut args = vec!["check", "--layout", "serial", "--quiet"];
    args.extend([
        "--segment",
        "48m",
        "--stripe",
        "256k",
        "--rotate-free",
        "2",
        "--gc-stop",
        "11",
    ]);
    args.extend(["--json", json.to_str().unwrap()]);
    args.extend(devs.iter().map(String::as_str));
    nines_ok(&args);
    let c = report(&json);
    assert_eq!(
        (
            c["write_pointer_errors"].as_u64(),
            c["other_zone_errors"].as_u64()
        ),
        (Some(0), Some(0))
    );
    assert_eq!(c["zones"].as_array().unwrap().len(), devs.len());
}

#[test]
#[ignore = "runs inside the NVMe guest (boot_mixed_controllers)"]
fn guest_zoned_serial_profile_then_check() {
    in_guest();
    let devs = zoned_devices();
    for engine in ["io_uring", "libaio"] {
        // 350 MiB of verified random 256 KiB writes over the 192 MiB volume at depth 16: the
        // front-end rotates, xGC moves by appends, victims are reset.
        let json = std::env::temp_dir().join(format!("zoned-serial-{engine}.json"));
        let mut args = vec![
            "profile",
            "--rw",
            "randwrite",
            "--bs",
            "256k",
            "--iodepth",
            "16",
        ];
        args.extend([
            "--ios",
            "1400",
            "--verify",
            "--allow-writes",
            "--quiet",
            "--engine",
            engine,
        ]);
        args.extend(["--json", json.to_str().unwrap()]);
        args.extend(SERIAL);
        args.extend(devs.iter().map(String::as_str));
        nines_ok(&args);
        let r = report(&json);
        assert_eq!(r["devices"][0]["size_bytes"], VOLUME_BYTES);
        let st = &r["devices"][0]["volume"]["stats"];
        let n = |k: &str| st[k].as_u64().unwrap();
        assert_eq!(n("client_write_bytes"), 1400 << 18, "{st}");
        assert!(
            n("gc_victims") > 0 && n("gc_units_moved") > 0,
            "{engine}: xGC ran: {st}"
        );
        assert_eq!(
            n("gc_errors") + n("write_errors") + n("trim_errors"),
            0,
            "{st}"
        );
        let (appends, resets, writes) = members_clean(&r);
        assert!(appends > 0 && writes > 0, "{engine}: {appends} appends");
        assert_eq!(
            resets,
            n("segments_trimmed"),
            "every reset the volume sent was done"
        );
        check_clean(&devs);
    }
}

/// `bytes` pseudo-random bytes from `seed`, after its first `skip` MiB, a MiB at a time to
/// `out` (the guest's /tmp is memory: nothing of the volume's size is kept there).
fn stream(bytes: u64, seed: u64, skip: u64, out: &mut dyn FnMut(&[u8])) {
    let mut x = seed | 1;
    let mut chunk = vec![0u8; 1 << 20];
    for mib in 0..skip + (bytes >> 20) {
        for w in chunk.chunks_exact_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.copy_from_slice(&x.to_le_bytes());
        }
        if mib >= skip {
            out(&chunk);
        }
    }
}

#[test]
#[ignore = "runs inside the NVMe guest (boot_mixed_controllers)"]
fn guest_zoned_serial_serve_reads_back_what_it_wrote_after_gc() {
    in_guest();
    let devs = zoned_devices();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sock = d.join("nbd.sock");
    let json = d.join("serve.json");
    let mut args = vec![
        "serve",
        "--socket",
        sock.to_str().unwrap(),
        "--allow-writes",
    ];
    args.extend(["--json", json.to_str().unwrap()]);
    args.extend(SERIAL);
    args.extend(devs.iter().map(String::as_str));
    let mut child = Command::new(env!("CARGO_BIN_EXE_nines"))
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !sock.exists() {
        assert!(Instant::now() < deadline, "nines serve did not listen");
        assert!(
            child.try_wait().unwrap().is_none(),
            "nines serve ended: {:?}",
            child.wait_with_output()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    // The whole volume (seed 1), then its first half twice over (seeds 2 and 3): 384 MiB over
    // 192, so xGC moves what is still valid by appends and resets its victims. From a file,
    // nbdcopy copies with several threads and connections at once, so the writes of distant
    // ranges interleave in the log and the victims keep valid data for xGC to move (one file
    // at a time: the guest's /tmp is memory).
    const HALF: u64 = VOLUME_BYTES / 2;
    let src = d.join("src");
    for seed in 1..=3u64 {
        let bytes = if seed == 1 { VOLUME_BYTES } else { HALF };
        let mut f = std::fs::File::create(&src).unwrap();
        stream(bytes, seed, 0, &mut |b| f.write_all(b).unwrap());
        drop(f);
        let out = Command::new("nbdcopy")
            .arg(&src)
            .arg(&uri)
            .output()
            .expect("nbdcopy");
        assert!(out.status.success(), "nbdcopy in ({seed}): {out:?}");
        std::fs::remove_file(&src).unwrap();
    }
    // The first half reads back as the last copy, the second as the first, byte for byte.
    let mut cp = Command::new("nbdcopy")
        .args([&uri, "-"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = cp.stdout.take().unwrap();
    let mut got = vec![0u8; 1 << 20];
    let mut at = 0u64;
    let mut check = |want: &[u8]| {
        stdout.read_exact(&mut got).unwrap();
        assert!(
            got == want,
            "the volume read back other data in MiB {}",
            at >> 20
        );
        at += want.len() as u64;
    };
    stream(HALF, 3, 0, &mut check);
    stream(HALF, 1, HALF >> 20, &mut check);
    std::io::copy(&mut stdout, &mut std::io::sink()).unwrap();
    assert!(cp.wait().unwrap().success(), "nbdcopy out");
    // SAFETY: a plain signal to the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = report(&json);
    let s = &r["nines_serve"];
    assert_eq!(s["member_errors"], serde_json::json!([0, 0, 0]), "{s}");
    let st = &s["volume"];
    assert!(st["gc_victims"].as_u64().unwrap() > 0, "xGC ran: {st}");
    assert_eq!(st["gc_errors"], 0, "{st}");
    for z in s["member_zoned"].as_array().unwrap() {
        assert_eq!(
            (
                z["write_pointer_errors"].as_u64(),
                z["device_errors"].as_u64()
            ),
            (Some(0), Some(0)),
            "{z}"
        );
    }
    assert!(
        s["member_zoned"]
            .as_array()
            .unwrap()
            .iter()
            .any(|z| z["appends"].as_u64().unwrap() > 0),
        "{s}"
    );
    check_clean(&devs);
}

/// Each zone's write pointer (bytes from its start; the capacity when full), from `blkzone`.
fn write_pointers(dev: &str) -> Vec<u64> {
    blkzone(dev)
        .iter()
        .map(|&(_, _, cap, wp, cond)| if cond == 14 { cap * 512 } else { wp * 512 })
        .collect()
}

/// `nines profile --zonemode zbd` over one namespace with `args`: returns the report's zoned
/// internals, after checking zone by zone that the device's write pointers moved exactly by the
/// bytes nines says it wrote there (less a capacity per reset: resets are of full zones), and
/// nowhere else; no write-pointer or device error.
fn zbd_run(dev: &str, tag: &str, args: &[&str]) -> serde_json::Value {
    let before = write_pointers(dev);
    let json = std::env::temp_dir().join(format!("zbd-{tag}.json"));
    let mut a = vec![
        "profile",
        dev,
        "--zonemode",
        "zbd",
        "--allow-writes",
        "--quiet",
    ];
    a.extend(args);
    a.extend(["--json", json.to_str().unwrap()]);
    nines_ok(&a);
    let after = write_pointers(dev);
    let r = report(&json);
    let z = r["devices"][0]["internals"]["zoned"].clone();
    assert_eq!(z["write_pointer_errors"], 0, "{tag}: {z}");
    assert_eq!(z["device_errors"], 0, "{tag}: {z}");
    let zbd = &z["zbd"];
    let cap = ZNS.cap_bytes;
    let mut written = 0;
    for k in 0..before.len() {
        let e = zbd["zones"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["zone"] == k);
        let Some(e) = e else {
            assert_eq!(
                after[k], before[k],
                "{tag}: zone {k} untouched by nines moved"
            );
            continue;
        };
        let n = |f: &str| e[f].as_u64().unwrap();
        assert_eq!(n("write_pointer_bytes"), after[k], "{tag}: zone {k}: {e}");
        // A reset before the first I/O (--verify) drops what was there; every other reset is
        // of a full zone.
        let at_start = e["reset_at_start"] == true;
        let kept = if at_start { 0 } else { before[k] };
        assert_eq!(
            n("bytes_written") + kept,
            after[k] + (n("resets") - u64::from(at_start)) * cap,
            "{tag}: zone {k} before {} after {}: {e}",
            before[k],
            after[k]
        );
        written += n("bytes_written");
    }
    assert_eq!(zbd["write_bytes"], written, "{tag}: {zbd}");
    assert_eq!(
        r["devices"][0]["write"]["ios"].as_u64().unwrap_or(0),
        zbd["writes"].as_u64().unwrap(),
        "{tag}"
    );
    z
}

#[test]
#[ignore = "runs inside the NVMe guest (boot_mixed_controllers)"]
fn guest_zoned_zbd_writes_at_the_write_pointers_with_every_engine() {
    in_guest();
    let dev = zoned_devices()[0].clone();
    {
        let t = open(&dev, true);
        zoned::zone_mgmt(
            t.file().unwrap().as_raw_fd(),
            ZoneMgmt::Reset,
            0,
            ZNS.size_bytes,
        )
        .unwrap();
    }
    let cap = ZNS.cap_bytes;
    for (i, engine) in ["psync", "libaio", "io_uring", "io_uring-poll"]
        .into_iter()
        .enumerate()
    {
        // Two zones each: sequential 256 KiB writes (the most the namespaces take as one
        // request) fill both (their 16 MiB tails never written) and come back to the first,
        // full: reset, then written from its start.
        let off = format!("{}m", i * 128);
        let region = [
            "--offset",
            off.as_str(),
            "--size",
            "128m",
            "--engine",
            engine,
        ];
        let mut args = vec![
            "--rw",
            "write",
            "--bs",
            "256k",
            "--iodepth",
            "4",
            "--ios",
            "400",
        ];
        args.extend(region);
        let z = zbd_run(&dev, &format!("{engine}-write"), &args);
        let zbd = &z["zbd"];
        assert_eq!(zbd["resets_full"], 1, "{engine}: {zbd}");
        assert_eq!(zbd["finishes"], 0, "{engine}: {zbd}");
        let wp = write_pointers(&dev);
        assert_eq!(
            (wp[2 * i], wp[2 * i + 1]),
            (4 << 20, cap),
            "{engine}: 100 MiB = 48 + 48 + 4"
        );
        // Random writes over them, two zones open at most: the full one is reset when chosen.
        let mut args = vec![
            "--rw",
            "randwrite",
            "--bs",
            "256k",
            "--iodepth",
            "8",
            "--ios",
            "160",
        ];
        args.extend(["--max-open-zones", "2"]);
        args.extend(region);
        let z = zbd_run(&dev, &format!("{engine}-randwrite"), &args);
        let zbd = &z["zbd"];
        assert!(zbd["open_zones_peak"].as_u64().unwrap() <= 2, "{zbd}");
        assert!(zbd["resets_full"].as_u64().unwrap() >= 1, "{engine}: {zbd}");
    }
    // Verified random reads and writes: reads only of written data, across resets.
    let z = zbd_run(
        &dev,
        "randrw-verify",
        &[
            "--rw",
            "randrw",
            "--bs",
            "256k",
            "--iodepth",
            "8",
            "--ios",
            "400",
            "--size",
            "128m",
            "--verify",
        ],
    );
    // The region was reset first (its old data carries no pattern of this run): reads issued
    // before the first write completed find nothing written (at most the depth of them).
    assert!(z["zbd"]["reads_beyond_wp"].as_u64().unwrap() <= 8, "{z}");
    assert_eq!(z["zbd"]["resets_start"], 2, "{z}");
    assert!(z["zbd"]["reads"].as_u64().unwrap() > 100, "{z}");
    // Refusals, one line each, nothing written.
    let name = dev.trim_start_matches("/dev/");
    let writes_before = block_ios(name).1;
    let conv = conventional_beside_zoned();
    for (args, want) in [
        (
            vec![dev.as_str(), "--max-open-zones", "7"],
            "allows at most 6 open zones",
        ),
        (vec![dev.as_str(), "--bs", "1m"], "use --bs 256k or less"),
        (
            vec![dev.as_str(), "--read-beyond-wp", "--verify"],
            "--read-beyond-wp reads above the write pointers",
        ),
        (
            vec![conv.as_str()],
            "is not a host-managed zoned block device",
        ),
    ] {
        let mut a = vec![
            "profile",
            "--zonemode",
            "zbd",
            "--rw",
            "write",
            "--ios",
            "10",
        ];
        a.extend(["--allow-writes", "--quiet"]);
        a.extend(args);
        let out = nines(&a);
        assert!(!out.status.success(), "{a:?} ran");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(want) && err.lines().count() == 1,
            "{a:?}: {err}"
        );
    }
    assert_eq!(block_ios(name).1, writes_before, "a refusal wrote nothing");
}
