//! `nines check --layout serial` (issue 30): a stopped `--persist` serial volume's mapping table
//! and superblock verified, damage reported (and the volume, which refuses to open over a
//! corrupt table, served again after `--repair`).

use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_nines");
const GEOMETRY: [&str; 8] = [
    "--segment",
    "1m",
    "--stripe",
    "64k",
    "--map-unit",
    "4k",
    "--rotate-free",
    "1",
];

fn file(dir: &Path, name: &str, size_bytes: u64) -> PathBuf {
    let p = dir.join(name);
    std::fs::File::create(&p)
        .unwrap()
        .set_len(size_bytes)
        .unwrap();
    p
}

fn request(kind: u16, cookie: u64, offset_bytes: u64, len_bytes: u32) -> [u8; 28] {
    let mut b = [0u8; 28];
    b[..4].copy_from_slice(&0x2560_9513u32.to_be_bytes());
    b[6..8].copy_from_slice(&kind.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..24].copy_from_slice(&offset_bytes.to_be_bytes());
    b[24..28].copy_from_slice(&len_bytes.to_be_bytes());
    b
}

/// Serves the volume on a Unix socket: the child and a connected client (EXPORT_NAME).
fn serve(dir: &Path, members: &[PathBuf]) -> (Child, UnixStream) {
    let socket = dir.join("nbd.sock");
    let _ = std::fs::remove_file(&socket);
    let child = Command::new(BIN)
        .args(["serve", "--layout", "serial", "--persist"])
        .args(GEOMETRY)
        .arg("--socket")
        .arg(&socket)
        .args(members)
        .stderr(std::fs::File::create(dir.join("serve.err")).unwrap())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !socket.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "serve never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut c = UnixStream::connect(&socket).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut g = [0u8; 18];
    c.read_exact(&mut g).unwrap();
    c.write_all(&3u32.to_be_bytes()).unwrap();
    c.write_all(b"IHAVEOPT").unwrap();
    c.write_all(&1u32.to_be_bytes()).unwrap();
    c.write_all(&0u32.to_be_bytes()).unwrap();
    let mut r = [0u8; 10];
    c.read_exact(&mut r).unwrap();
    (child, c)
}

/// A simple reply's error (after checking its cookie).
fn reply(c: &mut UnixStream, cookie: u64) -> u32 {
    let mut r = [0u8; 16];
    c.read_exact(&mut r).unwrap();
    assert_eq!(u64::from_be_bytes(r[8..].try_into().unwrap()), cookie);
    u32::from_be_bytes(r[4..8].try_into().unwrap())
}

fn stop(mut child: Child) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success(), "serve failed");
}

fn check(members: &[PathBuf], json: &Path, repair: bool) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(["check", "--layout", "serial", "--quiet"])
        .args(GEOMETRY)
        .arg("--json")
        .arg(json)
        .args(members);
    if repair {
        cmd.arg("--repair");
    }
    cmd.output().unwrap()
}

fn json(p: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

#[test]
fn check_finds_a_corrupt_serial_table_and_repair_lets_the_volume_open_again() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let members: Vec<PathBuf> = (0..2)
        .map(|i| file(d, &format!("m{i}"), 32 << 20))
        .collect();
    let blocks: [(u64, u8); 3] = [(0, 0x11), (1 << 20, 0x22), (5 << 20, 0x33)];
    let (child, mut c) = serve(d, &members);
    for (i, &(off, byte)) in blocks.iter().enumerate() {
        c.write_all(&request(1, i as u64, off, 4096)).unwrap();
        c.write_all(&[byte; 4096]).unwrap();
        assert_eq!(reply(&mut c, i as u64), 0);
    }
    c.write_all(&request(3, 9, 0, 0)).unwrap();
    assert_eq!(reply(&mut c, 9), 0, "flush");
    c.write_all(&request(2, 10, 0, 0)).unwrap();
    drop(c);
    stop(child);

    let j = d.join("check.json");
    let out = check(&members, &j, false);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = json(&j);
    assert_eq!(
        (r["superblock"].as_str(), r["mapped"].as_u64()),
        (Some("ok"), Some(3))
    );
    assert_eq!(r["mismatches"], 0);

    // Corrupt the table: unit 100 names the place unit 0 has (a duplicate), unit 101 a place
    // past the members.
    let table = r["region_offset_bytes"].as_u64().unwrap() + 4096;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&members[0])
        .unwrap();
    let mut e0 = [0u8; 4];
    f.read_exact_at(&mut e0, table).unwrap();
    assert_ne!(e0, [0; 4], "unit 0 is mapped");
    f.write_all_at(&e0, table + 4 * 100).unwrap();
    f.write_all_at(&0xffff_fff0u32.to_le_bytes(), table + 4 * 101)
        .unwrap();
    drop(f);

    // The volume refuses to open over it: a read fails.
    let (child, mut c) = serve(d, &members);
    c.write_all(&request(0, 1, 0, 4096)).unwrap();
    assert_eq!(reply(&mut c, 1), 5, "EIO over a corrupt table");
    drop(c);
    stop(child);

    let out = check(&members, &j, false);
    assert!(!out.status.success(), "a corrupt table passed the check");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--repair"), "{err}");
    let r = json(&j);
    assert_eq!(r["mismatches"], 2);
    assert_eq!(r["mismatch_list"][0]["unit"], 100);
    assert_eq!(r["mismatch_list"][0]["why"], "duplicate");
    assert_eq!(r["mismatch_list"][1]["unit"], 101);
    assert_eq!(r["mismatch_list"][1]["why"], "out_of_range");

    let out = check(&members, &j, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json(&j)["repaired"], 2);
    let out = check(&members, &j, false);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json(&j)["mapped"], 3);

    // Served again: every block written before reads back.
    let (child, mut c) = serve(d, &members);
    for (i, &(off, byte)) in blocks.iter().enumerate() {
        c.write_all(&request(0, i as u64, off, 4096)).unwrap();
        assert_eq!(reply(&mut c, i as u64), 0);
        let mut back = [0u8; 4096];
        c.read_exact(&mut back).unwrap();
        assert!(
            back.iter().all(|&b| b == byte),
            "block at {off} after repair"
        );
    }
    // Block status of the reopened volume: its table read back, exactly the written units are
    // data (nbdinfo --map: offset, length, type; 0 data, 3 hole).
    let uri = format!("nbd+unix:///?socket={}", d.join("nbd.sock").display());
    let out = Command::new("nbdinfo")
        .args(["--map", &uri])
        .output()
        .expect("nbdinfo (run scripts/setup.sh)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data: Vec<(u64, u64)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .take(3)
                .map(|x| x.parse().unwrap())
                .collect();
            (f[2] == 0).then_some((f[0], f[1]))
        })
        .collect();
    assert_eq!(data, vec![(0, 4096), (1 << 20, 4096), (5 << 20, 4096)]);
    drop(c);
    stop(child);

    // A damaged superblock checksum is reported, and rewritten by --repair.
    let sb = r["region_offset_bytes"].as_u64().unwrap() + 70;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&members[0])
        .unwrap();
    f.write_all_at(&[0xa5], sb).unwrap();
    drop(f);
    let out = check(&members, &j, false);
    assert!(!out.status.success());
    assert_eq!(json(&j)["superblock"], "damaged");
    assert!(check(&members, &j, true).status.success());
    let out = check(&members, &j, false);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json(&j)["superblock"], "ok");
}

/// Issue 44: `check` without the options a volume was served with (here the default 128 MiB
/// segment over 8 MiB members) is told to give check those options, not how to build a volume
/// ("use a smaller --segment ... or larger members"), and nothing is written.
#[test]
fn check_without_the_volumes_options_asks_for_them() {
    let dir = tempfile::tempdir().unwrap();
    let members: Vec<PathBuf> = (0..4)
        .map(|i| file(dir.path(), &format!("m{i}.img"), 8 << 20))
        .collect();
    let mut args = vec!["check".to_string(), "--layout".into(), "serial".into()];
    args.extend(members.iter().map(|p| p.display().to_string()));
    let out = Command::new(BIN).args(&args).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("give check the --segment, --stripe, --column-members")
            && !err.contains("larger members"),
        "{err}"
    );
    for m in &members {
        assert!(
            std::fs::read(m).unwrap().iter().all(|b| *b == 0),
            "{} written",
            m.display()
        );
    }
}
