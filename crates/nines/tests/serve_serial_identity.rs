//! Member identity of a persisted serial volume (issue 38): members reordered, blank, from
//! another volume, missing or truncated are refused by `nines serve` (and `nines check`) in one
//! line naming the member, before anything is served or written; the members given as they
//! were serve the data again.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::nbd;
use common::serving::Serving;

const BIN: &str = env!("CARGO_BIN_EXE_nines");
const GEOMETRY: [&str; 11] = [
    "--persist",
    "--segment",
    "1m",
    "--stripe",
    "64k",
    "--map-unit",
    "4k",
    "--rotate-free",
    "1",
    "--gc-stop",
    "2",
];
const MEMBER_BYTES: u64 = 8 << 20;

fn files(dir: &Path, prefix: &str, n: usize) -> Vec<PathBuf> {
    common::sized_files(dir, prefix, n, MEMBER_BYTES)
}

fn args(members: &[PathBuf]) -> Vec<String> {
    let mut a: Vec<String> = ["--layout", "serial"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend(GEOMETRY.iter().map(|s| s.to_string()));
    a.extend(["--gc-start".to_string(), "2".to_string()]);
    a.extend(members.iter().map(|p| p.to_str().unwrap().to_string()));
    a
}

/// Serves the members, writes one block of `byte` at every MiB, FLUSHes, stops.
fn fill(dir: &Path, members: &[PathBuf], byte: u8) {
    let a = args(members);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let s = Serving::start(dir, &a);
    let mut c = nbd::connect(&s.socket).expect("handshake");
    for (i, off) in (0..4u64).map(|i| (i, i << 20)) {
        let mut msg = nbd::header(nbd::CMD_WRITE, 0, i, off, 4096).to_vec();
        msg.extend_from_slice(&[byte; 4096]);
        c.stream.write_all(&msg).unwrap();
        assert_eq!(nbd::reply(&mut c.stream).unwrap().0, 0);
    }
    c.stream
        .write_all(&nbd::header(nbd::CMD_FLUSH, 0, 9, 0, 0))
        .unwrap();
    assert_eq!(nbd::reply(&mut c.stream).unwrap().0, 0);
    drop(c);
    s.stop_ok();
}

/// Serve must refuse (within a bound: a serve that listens instead is killed and fails the
/// test): its one line.
fn refused(dir: &Path, members: &[PathBuf]) -> String {
    let socket = dir.join("refused.sock");
    let err_path = dir.join("refused.err");
    let mut child = Command::new(BIN)
        .arg("serve")
        .arg("--socket")
        .arg(&socket)
        .args(args(members))
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let status = common::wait_bounded(
        &mut child,
        std::time::Duration::from_secs(30),
        &format!("nines serve {members:?} (it served instead of refusing)"),
    );
    let err = std::fs::read_to_string(&err_path).unwrap();
    assert!(!status.success(), "served {members:?}: {err}");
    assert!(!socket.exists(), "it listened before refusing");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    err
}

fn sums(members: &[PathBuf]) -> Vec<Vec<u8>> {
    members.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

#[test]
fn serial_misassemblies_are_refused_in_one_line_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = files(d, "m", 3);
    fill(d, &m, 0x5a);
    let other = files(d, "o", 3);
    fill(d, &other, 0x6b);
    let before = sums(&m);

    // Reordered.
    let e = refused(d, &[m[0].clone(), m[2].clone(), m[1].clone()]);
    assert!(e.contains("member 1") && e.contains("in order"), "{e}");
    // A blank member (replaced), at 0 and elsewhere.
    let blank = files(d, "b", 1).remove(0);
    let e = refused(d, &[blank.clone(), m[1].clone(), m[2].clone()]);
    assert!(e.contains("member 0") && e.contains("blank"), "{e}");
    assert!(
        std::fs::read(&blank).unwrap().iter().all(|&b| b == 0),
        "the blank member was written"
    );
    let e = refused(d, &[m[0].clone(), m[1].clone(), blank.clone()]);
    assert!(e.contains("member 2") && e.contains("no identity"), "{e}");
    // Another volume's member.
    let e = refused(d, &[m[0].clone(), other[1].clone(), m[2].clone()]);
    assert!(
        e.contains("member 1") && e.contains("another serial volume"),
        "{e}"
    );
    // A member missing.
    let e = refused(d, &m[..2]);
    assert!(e.contains("member 0"), "{e}");
    // A member truncated (its region moves with its size).
    let short = d.join("short.img");
    std::fs::copy(&m[2], &short).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&short)
        .unwrap()
        .set_len(MEMBER_BYTES - (1 << 20))
        .unwrap();
    let e = refused(d, &[m[0].clone(), m[1].clone(), short]);
    assert!(e.contains("member"), "{e}");
    assert_eq!(sums(&m), before, "a refused serve changed a member");

    // `nines check` refuses the same misassembly, and passes the volume as it is.
    let out = Command::new(BIN)
        .args(["check", "--layout", "serial", "--quiet"])
        .args(&GEOMETRY[1..])
        .args([&m[0], &m[2], &m[1]])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("in order"), "{err}");
    let out = Command::new(BIN)
        .args(["check", "--layout", "serial", "--quiet"])
        .args(&GEOMETRY[1..])
        .args(&m)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Given as they were, the data is served again.
    let a = args(&m);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let s = Serving::start(d, &a);
    let mut c = nbd::connect(&s.socket).expect("handshake");
    let mut buf = vec![0u8; 4096];
    for i in 0..4u64 {
        assert_eq!(nbd::read_at(&mut c.stream, i << 20, &mut buf), Some(0));
        assert!(buf.iter().all(|&b| b == 0x5a), "block {i} read back wrong");
    }
    drop(c);
    s.stop_ok();
}
