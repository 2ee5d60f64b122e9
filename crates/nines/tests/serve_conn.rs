//! `nines serve`'s connection lifecycle (issue 30): credits come back on every exit path, so a
//! client that leaves with requests outstanding locks nothing, SIGTERM ends the server within a
//! bounded time whatever clients do, idle sockets are closed by the handshake timeout, the
//! connection limit refuses (and logs) what is over it, many clients are served at once, and a
//! socket-activated server ends with its last client. Raw clients over Unix sockets, so each
//! test does exactly what a misbehaving client does.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::serving::Serving;

const BIN: &str = env!("CARGO_BIN_EXE_nines");

const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

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
    b[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    b[6..8].copy_from_slice(&kind.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..24].copy_from_slice(&offset_bytes.to_be_bytes());
    b[24..28].copy_from_slice(&len_bytes.to_be_bytes());
    b
}

/// Connects and negotiates with OPT_EXPORT_NAME (simple replies): the export's size.
fn handshake(socket: &Path) -> std::io::Result<(UnixStream, u64)> {
    let mut c = UnixStream::connect(socket)?;
    c.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut g = [0u8; 18];
    c.read_exact(&mut g)?;
    assert_eq!(&g[..16], b"NBDMAGICIHAVEOPT");
    // FIXED_NEWSTYLE | NO_ZEROES, then OPT_EXPORT_NAME "".
    c.write_all(&3u32.to_be_bytes())?;
    c.write_all(b"IHAVEOPT")?;
    c.write_all(&1u32.to_be_bytes())?;
    c.write_all(&0u32.to_be_bytes())?;
    let mut r = [0u8; 10];
    c.read_exact(&mut r)?;
    Ok((c, u64::from_be_bytes(r[..8].try_into().unwrap())))
}

/// A simple reply's (error, cookie).
fn simple_reply(c: &mut UnixStream) -> std::io::Result<(u32, u64)> {
    let mut r = [0u8; 16];
    c.read_exact(&mut r)?;
    assert_eq!(&r[..4], &SIMPLE_REPLY_MAGIC.to_be_bytes());
    Ok((
        u32::from_be_bytes(r[4..8].try_into().unwrap()),
        u64::from_be_bytes(r[8..].try_into().unwrap()),
    ))
}

/// One client's whole life: write a pattern at `offset`, read it back, disconnect.
fn write_read_back(socket: &Path, offset_bytes: u64, seed: u8) -> std::io::Result<()> {
    let (mut c, _) = handshake(socket)?;
    let data: Vec<u8> = (0..4096u32).map(|i| (i as u8) ^ seed).collect();
    c.write_all(&request(1, 1, offset_bytes, 4096))?;
    c.write_all(&data)?;
    assert_eq!(simple_reply(&mut c)?, (0, 1));
    c.write_all(&request(0, 2, offset_bytes, 4096))?;
    assert_eq!(simple_reply(&mut c)?, (0, 2));
    let mut back = vec![0u8; 4096];
    c.read_exact(&mut back)?;
    assert!(back == data, "offset {offset_bytes}: read back differs");
    c.write_all(&request(2, 3, 0, 0))?;
    Ok(())
}

/// The case: a client pipelines 256 reads of 1 MiB (four times its credits) and
/// disconnects without reading a reply; another does the same and stays connected, reading
/// nothing. The server still serves a new client, and SIGTERM ends it within 2 s with the
/// --json report written. Before the fix the first connection's threads waited for ever for
/// credits the exited writer never returned, and SIGTERM did nothing.
#[test]
fn a_client_leaving_256_requests_unread_locks_nothing_and_sigterm_ends_within_2s() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = file(d, "m0", 256 << 20);
    let json = d.join("report.json");
    let s = Serving::start(d, &["--json", json.to_str().unwrap(), m.to_str().unwrap()]);
    let pipeline = |c: &mut UnixStream| {
        let mut reqs = Vec::new();
        for i in 0..256u64 {
            reqs.extend_from_slice(&request(0, i, i << 20, 1 << 20));
        }
        c.write_all(&reqs).unwrap();
    };
    let (mut gone, _) = handshake(&s.socket).unwrap();
    pipeline(&mut gone);
    let (mut stays, _) = handshake(&s.socket).unwrap();
    pipeline(&mut stays);
    // Let the server fill both sockets and run out of credits.
    std::thread::sleep(Duration::from_millis(500));
    drop(gone);
    std::thread::sleep(Duration::from_millis(300));
    // A new client is served meanwhile.
    write_read_back(&s.socket, 0, 0x5a).unwrap();
    let (status, took) = s
        .sigterm_within(Duration::from_secs(10))
        .expect("nines serve did not exit within 10 s of SIGTERM");
    assert!(status.success(), "nines serve failed: {status}");
    assert!(
        took <= Duration::from_secs(2),
        "SIGTERM took {took:?} (goal: 2 s)"
    );
    drop(stays);
    let j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).expect("--json written")).unwrap();
    let r = &j["nines_serve"];
    assert_eq!(r["connections"], 3);
    assert_eq!(r["write"]["ios"], 1);
    assert!(r["read"]["ios"].as_u64().unwrap() >= 1);
}

/// 100 idle sockets (connected, never a byte) and 200 clients at once: all 200 are served
/// (before: 64 connections in all, idle ones held them for ever, 62 of 200 served).
#[test]
fn two_hundred_clients_beside_a_hundred_idle_sockets_are_all_served() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = file(d, "m0", 4 << 20);
    let s = Serving::start(d, &[m.to_str().unwrap()]);
    let idle: Vec<UnixStream> = (0..100)
        .map(|_| UnixStream::connect(&s.socket).unwrap())
        .collect();
    let t0 = Instant::now();
    let clients: Vec<_> = (0..200u64)
        .map(|i| {
            let socket = s.socket.clone();
            std::thread::spawn(move || write_read_back(&socket, i * 4096, i as u8))
        })
        .collect();
    let served = clients
        .into_iter()
        .map(|c| c.join().expect("client thread"))
        .filter(Result::is_ok)
        .count();
    assert_eq!(served, 200, "clients served of 200");
    eprintln!("200 clients served in {:?}", t0.elapsed());
    // Every write landed where it was sent.
    let bytes = std::fs::read(&m).unwrap();
    for i in 0..200usize {
        assert_eq!(bytes[i * 4096 + 1], 1 ^ i as u8, "block {i}");
    }
    drop(idle);
    assert!(s.sigterm_within(Duration::from_secs(10)).is_some());
}

/// An idle socket is closed once the handshake timeout passes (it gets the greeting, then EOF);
/// a connection over --max-connections is closed before the greeting and the refusal is logged;
/// once a slot frees, a client is served again.
#[test]
fn handshake_timeout_closes_idle_sockets_and_refusals_over_the_limit_are_logged() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = file(d, "m0", 1 << 20);
    let json = d.join("report.json");
    let s = Serving::start(
        d,
        &[
            "--max-connections",
            "2",
            "--handshake-timeout",
            "700ms",
            "--json",
            json.to_str().unwrap(),
            m.to_str().unwrap(),
        ],
    );
    let t0 = Instant::now();
    let mut a = UnixStream::connect(&s.socket).unwrap();
    let mut b = UnixStream::connect(&s.socket).unwrap();
    // Both get the greeting (they are served), then nothing.
    let mut g = [0u8; 18];
    a.read_exact(&mut g).unwrap();
    b.read_exact(&mut g).unwrap();
    let mut c = UnixStream::connect(&s.socket).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut rest = Vec::new();
    assert_eq!(
        c.read_to_end(&mut rest).unwrap(),
        0,
        "over the limit: closed before the greeting"
    );
    // The idle ones are closed by the timeout, not before it.
    a.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(a.read_to_end(&mut rest).unwrap(), 0);
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(600) && waited < Duration::from_secs(4),
        "idle socket closed after {waited:?} (timeout 700 ms)"
    );
    // A slot is free again once the idle sockets are closed. A try between the first idle
    // socket's close and the second's is refused too (and counted): the report must say so.
    let t1 = Instant::now();
    let mut refused_retries = 0u64;
    loop {
        match write_read_back(&s.socket, 0, 7) {
            Ok(()) => break,
            Err(_) if t1.elapsed() < Duration::from_secs(5) => {
                refused_retries += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("no client served after the idle ones were closed: {e}"),
        }
    }
    let err = s.stderr();
    assert!(
        err.contains("refused 1 connection") && err.contains("--max-connections 2"),
        "refusal not logged: {err}"
    );
    let (st, _) = s.sigterm_within(Duration::from_secs(10)).unwrap();
    assert!(st.success());
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(
        j["nines_serve"]["connections_refused"],
        1 + refused_retries,
        "the one over the limit, and the retries refused while an idle socket was still open"
    );
}

/// Socket activation (`nbdinfo -- [ nines serve ... ]`): the server ends when its last client
/// leaves; `--pidfile` holds its pid while it runs and is removed at exit.
#[test]
fn a_socket_activated_server_ends_with_its_last_client_and_removes_its_pidfile() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = file(d, "m0", 8 << 20);
    let pidfile = d.join("serve.pid");
    let out = Command::new("nbdinfo")
        .args(["--size", "--", "[", BIN, "serve", "--pidfile"])
        .arg(&pidfile)
        .arg(&m)
        .arg("]")
        .output()
        .expect("nbdinfo (run scripts/setup.sh)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "8388608");
    let t0 = Instant::now();
    while pidfile.exists() {
        if t0.elapsed() > Duration::from_secs(5) {
            let pid: i32 = std::fs::read_to_string(&pidfile)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            // SAFETY: the orphaned server this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the socket-activated server outlived its client (pid {pid})");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_reply_data(c: &mut UnixStream, cookie: u64, len: usize) -> Vec<u8> {
    assert_eq!(simple_reply(c).unwrap(), (0, cookie));
    let mut d = vec![0u8; len];
    c.read_exact(&mut d).unwrap();
    d
}

/// nbd-tester-client's `-o` sequence, reproduced: a 1 MiB read, then offset 1 for 1 MiB + 14
/// and offset 2 for 2 MiB + 28 (unaligned: the spec's default minimum block is 1 byte, so
/// they are served, each with its data); then a write payload over the 64 MiB maximum, refused
/// EOVERFLOW with its payload read and dropped, and the connection still in step. Before: the
/// unaligned reads got EINVAL with no data (the tester, which reads the data anyway, hung) and
/// the oversized write closed the connection.
#[test]
fn unaligned_reads_are_served_and_oversized_writes_refused_in_step() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let size = 40u64 << 20;
    let m = d.join("m0");
    let content: Vec<u8> = (0..size).map(|i| (i * 7 + i / 4093) as u8).collect();
    std::fs::write(&m, &content).unwrap();
    let s = Serving::start(d, &[m.to_str().unwrap()]);
    let (mut c, export_size) = handshake(&s.socket).unwrap();
    assert_eq!(export_size, size);
    c.write_all(&request(0, 0, 0, 1 << 20)).unwrap();
    assert!(read_reply_data(&mut c, 0, 1 << 20) == content[..1 << 20]);
    let len = (1 << 20) + 14;
    c.write_all(&request(0, 1, 1, len as u32)).unwrap();
    assert!(read_reply_data(&mut c, 1, len) == content[1..1 + len]);
    let len = 2 * len;
    c.write_all(&request(0, 2, 2, len as u32)).unwrap();
    assert!(read_reply_data(&mut c, 2, len) == content[2..2 + len]);
    // A write of 64 MiB + 4 KiB, payload sent in full: refused, nothing written.
    let big = (64 << 20) + 4096;
    c.write_all(&request(1, 3, 0, big as u32)).unwrap();
    c.write_all(&vec![0xeeu8; big]).unwrap();
    assert_eq!(simple_reply(&mut c).unwrap(), (75, 3)); // EOVERFLOW
    c.write_all(&request(0, 4, 4096, 4096)).unwrap();
    assert!(read_reply_data(&mut c, 4, 4096) == content[4096..8192]);
    // An unaligned write is refused (no read-modify-write), still in step.
    c.write_all(&request(1, 5, 1, 512)).unwrap();
    c.write_all(&[0xeeu8; 512]).unwrap();
    assert_eq!(simple_reply(&mut c).unwrap(), (22, 5)); // EINVAL
    c.write_all(&request(2, 6, 0, 0)).unwrap();
    drop(c);
    assert!(
        std::fs::read(&m).unwrap() == content,
        "a refused write changed the data"
    );
    assert!(s.sigterm_within(Duration::from_secs(10)).is_some());
}

/// nbd-tester-client's integrityhuge mode, reproduced: an EXPORT_NAME client (it never sees
/// the advertised maximum) sends make-integrityhuge's requests, writes (some FUA), reads and
/// flushes of 1 KiB-aligned lengths up to 50 MB at 1 KiB-aligned offsets of a 50 MB range, two
/// at a time; every read must return what the model of the export says. Over a file and over
/// raid5 (4 KiB-aligned there, its block), whose volume I/Os are at most 32 MiB: larger
/// requests are served in pieces. Before: every request over 32 MiB was refused EOVERFLOW
/// ("Server errored a transaction").
#[test]
fn integrityhuge_requests_up_to_50_mb_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let span = 50_000_000u64;
    let m = file(d, "m0", 64 << 20);
    huge_transactions(d, &[m.to_str().unwrap()], span, 1024, 24);
    let r: Vec<PathBuf> = (0..3)
        .map(|i| file(d, &format!("r{i}"), 32 << 20))
        .collect();
    let mut args = vec!["--layout", "raid5", "--create"];
    args.extend(r.iter().map(|p| p.to_str().unwrap()));
    huge_transactions(d, &args, span.min(60 << 20), 4096, 12);
}

/// Serves `args` and runs `count` integrityhuge transactions (see above) over `span` bytes,
/// with lengths and offsets multiples of `align`, two in flight at once.
fn huge_transactions(d: &Path, args: &[&str], span: u64, align: u64, count: u32) {
    let s = Serving::start(d, args);
    let (mut c, size) = handshake(&s.socket).unwrap();
    let span = span.min(size);
    let mut model = vec![0u8; span as usize];
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut largest = 0;
    let mut i = 0u64;
    while i < u64::from(count) {
        // Two requests that do not overlap (as the tester never has two overlapping in
        // flight): a pair over 32 MiB together, each up to span / 2, or one up to span.
        let mut pair = Vec::new();
        // The first is a write of the whole span (over 32 MiB: the pieces' case).
        let halves = i > 0 && next() % 2 == 0;
        for h in 0..if halves { 2 } else { 1 } {
            let (lo, room) = if halves {
                (h * (span / 2 / align * align), span / 2 / align * align)
            } else {
                (0, span)
            };
            let len = if i == 0 {
                room / align * align
            } else {
                (next() % (room - align)) / align * align + align
            };
            let off = lo + (next() % (room - len + 1)) / align * align;
            let kind = match if i == 0 { 4 } else { next() % 8 } {
                0 => 3u16,  // flush
                1..=3 => 0, // read
                _ => 1,     // write
            };
            let fua = kind == 1 && next() % 4 == 0;
            pair.push((i, kind, fua, off, len));
            i += 1;
        }
        for &(cookie, kind, fua, off, len) in &pair {
            let (off, len) = if kind == 3 { (0, 0) } else { (off, len) };
            let mut req = request(kind, cookie, off, len as u32);
            if fua {
                req[4..6].copy_from_slice(&1u16.to_be_bytes());
            }
            c.write_all(&req).unwrap();
            if kind == 1 {
                let data: Vec<u8> = (0..len)
                    .map(|b| ((off + b) as u8) ^ (cookie as u8).wrapping_mul(31))
                    .collect();
                c.write_all(&data).unwrap();
                model[off as usize..(off + len) as usize].copy_from_slice(&data);
            }
            largest = largest.max(len);
        }
        for _ in &pair {
            let (err, got) = simple_reply(&mut c).unwrap();
            // Replies may come in any order: find the transaction answered.
            let &(_, kind, _, off, len) = pair.iter().find(|t| t.0 == got).unwrap();
            assert_eq!(
                err, 0,
                "transaction {got}: {kind} of {len} bytes at {off} errored"
            );
            if kind == 0 {
                let mut back = vec![0u8; len as usize];
                c.read_exact(&mut back).unwrap();
                assert!(
                    back == model[off as usize..(off + len) as usize],
                    "transaction {got}: read of {len} bytes at {off} differs from what was written"
                );
            }
        }
    }
    c.write_all(&request(2, u64::MAX, 0, 0)).unwrap();
    assert!(largest > 32 << 20, "no transaction over 32 MiB ({largest})");
    assert!(s.sigterm_within(Duration::from_secs(10)).is_some());
}

/// CACHE is advertised and answered; a fast zero is served on a file (zeroes read back) and
/// refused at once with ENOTSUP, changing nothing, where zeroes are not fast (raid5).
#[test]
fn cache_and_fast_zero() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = d.join("m0");
    std::fs::write(&m, vec![0x33u8; 1 << 20]).unwrap();
    let s = Serving::start(d, &[m.to_str().unwrap()]);
    let mut c = UnixStream::connect(&s.socket).unwrap();
    let mut g = [0u8; 18];
    c.read_exact(&mut g).unwrap();
    c.write_all(&3u32.to_be_bytes()).unwrap();
    c.write_all(b"IHAVEOPT\0\0\0\x01\0\0\0\0").unwrap();
    let mut r = [0u8; 10];
    c.read_exact(&mut r).unwrap();
    let flags = u16::from_be_bytes([r[8], r[9]]);
    assert_ne!(flags & (1 << 10), 0, "SEND_CACHE");
    assert_ne!(flags & (1 << 11), 0, "SEND_FAST_ZERO");
    c.write_all(&request(5, 1, 0, 65536)).unwrap();
    assert_eq!(simple_reply(&mut c).unwrap(), (0, 1));
    let mut fz = request(6, 2, 8192, 8192);
    fz[4..6].copy_from_slice(&(1u16 << 4).to_be_bytes());
    c.write_all(&fz).unwrap();
    assert_eq!(simple_reply(&mut c).unwrap(), (0, 2));
    c.write_all(&request(0, 3, 4096, 16384)).unwrap();
    let data = read_reply_data(&mut c, 3, 16384);
    assert!(data[..4096].iter().all(|&b| b == 0x33));
    assert!(data[4096..12288].iter().all(|&b| b == 0));
    assert!(data[12288..].iter().all(|&b| b == 0x33));
    drop(c);
    drop(s);

    let members: Vec<PathBuf> = (0..3)
        .map(|i| {
            let p = d.join(format!("r{i}"));
            std::fs::write(&p, vec![0x44u8; 1 << 20]).unwrap();
            p
        })
        .collect();
    // Members holding data: --create keeps it and adds the array's superblocks.
    let mut args = vec!["--layout", "raid5", "--create"];
    args.extend(members.iter().map(|p| p.to_str().unwrap()));
    let s = Serving::start(d, &args);
    let (mut c, _) = handshake(&s.socket).unwrap();
    c.write_all(&fz).unwrap();
    assert_eq!(simple_reply(&mut c).unwrap(), (95, 2)); // ENOTSUP
    c.write_all(&request(0, 3, 8192, 8192)).unwrap();
    assert!(read_reply_data(&mut c, 3, 8192).iter().all(|&b| b == 0x44));
    drop(c);
    assert!(s.sigterm_within(Duration::from_secs(10)).is_some());
}

/// `nbdinfo --map`'s extents (offset, length, type) of what `target` names: a command between
/// `[ ]` (socket activation) or an NBD URI.
fn nbdinfo_map(target: &[&str]) -> Vec<(u64, u64, u32)> {
    let out = Command::new("nbdinfo")
        .arg("--map")
        .args(target)
        .output()
        .expect("nbdinfo (run scripts/setup.sh)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect()
}

/// `nbdinfo --map` of `nines serve ARGS`, started by nbdinfo itself.
fn map_of_serve(args: &[&str]) -> Vec<(u64, u64, u32)> {
    let mut a = vec!["--", "[", BIN, "serve"];
    a.extend_from_slice(args);
    a.push("]");
    nbdinfo_map(&a)
}

/// Extents (offset, length, type 3 = hole|zero, 0 = data) of an export of `size` whose data
/// is exactly `data` (sorted, disjoint, merged ranges).
fn expected_map(size: u64, data: &[(u64, u64)]) -> Vec<(u64, u64, u32)> {
    let mut v = Vec::new();
    let mut pos = 0;
    for &(off, len) in data {
        if off > pos {
            v.push((pos, off - pos, 3));
        }
        v.push((off, len, 0));
        pos = off + len;
    }
    if pos < size {
        v.push((pos, size - pos, 3));
    }
    v
}

/// Writes `len` bytes of `byte` at each offset over a raw connection (simple replies), trims
/// each of `trims`, and disconnects.
fn write_and_trim(socket: &Path, writes: &[(u64, u32)], trims: &[(u64, u32)]) {
    let (mut c, _) = handshake(socket).unwrap();
    for (i, &(off, len)) in writes.iter().enumerate() {
        c.write_all(&request(1, i as u64, off, len)).unwrap();
        c.write_all(&vec![0x5au8; len as usize]).unwrap();
        assert_eq!(
            simple_reply(&mut c).unwrap(),
            (0, i as u64),
            "write at {off}"
        );
    }
    for (i, &(off, len)) in trims.iter().enumerate() {
        let cookie = 1000 + i as u64;
        c.write_all(&request(4, cookie, off, len)).unwrap();
        assert_eq!(simple_reply(&mut c).unwrap(), (0, cookie), "trim at {off}");
    }
    c.write_all(&request(2, 9999, 0, 0)).unwrap();
}

/// `nbdinfo --map` (base:allocation block status) on a sparse file member: its holes and
/// data as the file system has them; on raid0 the members' holes where its stripe units put
/// them (before: raid0 was reported allocated throughout).
#[test]
fn nbdinfo_map_reports_the_holes_of_a_sparse_member() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = file(d, "m0", 8 << 20);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&m).unwrap();
        f.write_all_at(&[1u8; 64 << 10], 1 << 20).unwrap();
        f.write_all_at(&[2u8; 4096], 5 << 20).unwrap();
        f.sync_all().unwrap();
    }
    let got = map_of_serve(&[m.to_str().unwrap()]);
    assert_eq!(
        got,
        vec![
            (0, 1 << 20, 3),
            (1 << 20, 64 << 10, 0),
            ((1 << 20) + (64 << 10), (4 << 20) - (64 << 10), 3),
            (5 << 20, 4096, 0),
            ((5 << 20) + 4096, (3 << 20) - 4096, 3),
        ],
        "extents (offset, length, type) of the sparse member"
    );
    let m1 = file(d, "m1", 8 << 20);
    // m holds data: --create adds the array's superblocks (the export loses each member's last
    // 8 KiB, rounded down to whole stripes: 8 MiB - 64 KiB of each). Member 0's data at 1 MiB
    // is its stripe unit 16, the volume's unit 32 (2 MiB); at 5 MiB unit 80, the volume's 160
    // (10 MiB).
    let got = map_of_serve(&[
        "--layout",
        "raid0",
        "--stripe",
        "64k",
        "--create",
        m.to_str().unwrap(),
        m1.to_str().unwrap(),
    ]);
    let size = 2 * ((8 << 20) - (64 << 10));
    assert_eq!(
        got,
        expected_map(size, &[(2 << 20, 64 << 10), (10 << 20, 4096)]),
        "raid0 over the sparse member and an empty one"
    );
    // Through a wrapper that holds no data (--chop splits writes, --throttle delays): the
    // same holes (a write-back --buffer would report allocated), and now the raid0
    // superblock --create wrote in the member's last 4 KiB.
    let got = map_of_serve(&["--chop", "64k", "--throttle", "1g", m.to_str().unwrap()]);
    assert_eq!(
        got,
        vec![
            (0, 1 << 20, 3),
            (1 << 20, 64 << 10, 0),
            ((1 << 20) + (64 << 10), (4 << 20) - (64 << 10), 3),
            (5 << 20, 4096, 0),
            ((5 << 20) + 4096, (3 << 20) - 8192, 3),
            ((8 << 20) - 4096, 4096, 0),
        ],
        "extents of the sparse member through --chop and --throttle"
    );
}

/// Block status of an emulated member: blocks never written (or trimmed) are holes, written
/// ones data, exactly (before: the whole export was reported allocated).
#[test]
fn nbdinfo_map_reports_the_unwritten_blocks_of_an_emulated_member() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let json = d.join("serve.json");
    let s = Serving::start(
        d,
        &[
            "--precondition",
            "none",
            "--memory-budget",
            "256m",
            "--json",
            json.to_str().unwrap(),
            "emu:afa-m2-2018:64m",
        ],
    );
    write_and_trim(
        &s.socket,
        &[
            (0, 4096),
            (1 << 20, 64 << 10),
            (40 << 20, 8192),
            ((64 << 20) - 4096, 4096),
        ],
        &[((1 << 20) + (16 << 10), 8192)],
    );
    let uri = format!("nbd+unix:///?socket={}", s.socket.display());
    let got = nbdinfo_map(&[&uri]);
    assert_eq!(
        got,
        expected_map(
            64 << 20,
            &[
                (0, 4096),
                (1 << 20, 16 << 10),
                ((1 << 20) + (24 << 10), 40 << 10),
                (40 << 20, 8192),
                ((64 << 20) - 4096, 4096),
            ]
        ),
        "extents of the emulated member"
    );
    // nbdcopy skips the holes: it reads only around the data extents (the server's report),
    // and the copy holds the written bytes, little else allocated.
    let copy = d.join("copy.img");
    let out = Command::new("nbdcopy")
        .arg(&uri)
        .arg(&copy)
        .output()
        .expect("nbdcopy (run scripts/setup.sh)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&copy).unwrap();
    assert_eq!(bytes.len(), 64 << 20);
    assert!(bytes[..4096].iter().all(|&b| b == 0x5a));
    assert!(
        bytes[40 << 20..(40 << 20) + 8192]
            .iter()
            .all(|&b| b == 0x5a)
    );
    assert!(bytes[4096..1 << 20].iter().all(|&b| b == 0));
    use std::os::unix::fs::MetadataExt;
    let allocated = std::fs::metadata(&copy).unwrap().blocks() * 512;
    assert!(
        allocated <= 1 << 20,
        "the copy of 72 KiB of data allocates {allocated} bytes: holes were copied"
    );
    assert!(s.sigterm_within(Duration::from_secs(10)).is_some());
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let read = r["nines_serve"]["read"]["bytes"].as_u64().unwrap();
    // nbdcopy reads whole 256 KiB requests around data: the four touched are 1 MiB (before,
    // the export was all data and all 64 MiB were read).
    assert!(
        read <= 1 << 20,
        "nbdcopy read {read} bytes of 72 KiB of data: holes were read"
    );
}

/// Block status of a serial (log-structured) array: volume units never written or trimmed
/// are holes, whatever the members hold; and raid0 over emulated members finds each unit's
/// member's own unwritten blocks.
#[test]
fn nbdinfo_map_reports_the_unmapped_units_of_a_serial_array() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let members: Vec<PathBuf> = (0..4)
        .map(|i| file(d, &format!("s{i}"), 64 << 20))
        .collect();
    let mut args = vec![
        "--layout",
        "serial",
        "--column-members",
        "2",
        "--stripe",
        "64k",
        "--segment",
        "1m",
        "--map-unit",
        "4k",
    ];
    args.extend(members.iter().map(|p| p.to_str().unwrap()));
    let s = Serving::start(d, &args);
    let (c, size) = handshake(&s.socket).unwrap();
    drop(c);
    write_and_trim(
        &s.socket,
        &[(8192, 4096), (3 << 20, 128 << 10), (size - 8192, 8192)],
        &[((3 << 20) + (64 << 10), 4096)],
    );
    let uri = format!("nbd+unix:///?socket={}", s.socket.display());
    let got = nbdinfo_map(&[&uri]);
    assert_eq!(
        got,
        expected_map(
            size,
            &[
                (8192, 4096),
                (3 << 20, 64 << 10),
                ((3 << 20) + (68 << 10), 60 << 10),
                (size - 8192, 8192),
            ]
        ),
        "extents of the serial array (size {size})"
    );
    assert!(s.sigterm_within(Duration::from_secs(10)).is_some());

    // raid0 of two emulated members, 64 KiB stripes: volume [0, 192 KiB) written covers
    // units 0 to 2; a 4 KiB write at 1 MiB + 4 KiB lies inside unit 16 (member 0).
    let s = Serving::start(
        d,
        &[
            "--precondition",
            "none",
            "--memory-budget",
            "256m",
            "--layout",
            "raid0",
            "--stripe",
            "64k",
            "emu:afa-m2-2018:32m",
            "emu:afa-m2-2018:32m",
        ],
    );
    write_and_trim(&s.socket, &[(0, 192 << 10), ((1 << 20) + 4096, 4096)], &[]);
    let got = nbdinfo_map(&[&uri]);
    assert_eq!(
        got,
        expected_map(64 << 20, &[(0, 192 << 10), ((1 << 20) + 4096, 4096)]),
        "extents of raid0 over emulated members"
    );
    assert!(s.sigterm_within(Duration::from_secs(10)).is_some());
}

/// A raid0 member's error reaches the client (EIO) and is printed on stderr (before: nothing
/// was printed); a passthrough volume's report counts its member commands (before: `[0]`).
#[test]
fn raid0_member_errors_are_printed_and_passthrough_member_commands_counted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m0 = file(d, "m0", 4 << 20);
    let m1 = file(d, "m1", 4 << 20);
    let s = Serving::start(
        d,
        &[
            "--layout",
            "raid0",
            "--stripe",
            "64k",
            m0.to_str().unwrap(),
            m1.to_str().unwrap(),
        ],
    );
    // Member 1 loses its data under the server: reads of its stripes fail.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&m1)
        .unwrap()
        .set_len(0)
        .unwrap();
    let (mut c, _) = handshake(&s.socket).unwrap();
    c.write_all(&request(0, 1, 64 << 10, 4096)).unwrap();
    assert_eq!(simple_reply(&mut c).unwrap(), (5, 1)); // EIO
    c.write_all(&request(0, 2, 0, 4096)).unwrap();
    let _ = read_reply_data(&mut c, 2, 4096);
    drop(c);
    let err = s.stderr();
    assert!(
        err.contains("member 1 (") && err.contains("failed a command"),
        "member error not printed: {err}"
    );
    assert!(s.sigterm_within(Duration::from_secs(10)).is_some());

    let json = d.join("one.json");
    // m0 alone (a raid0 member, so --allow-writes --force: overwriting the array is meant).
    let s = Serving::start(
        d,
        &[
            "--allow-writes",
            "--force",
            "--json",
            json.to_str().unwrap(),
            m0.to_str().unwrap(),
        ],
    );
    for i in 0..4 {
        write_read_back(&s.socket, i * 4096, i as u8).unwrap();
    }
    assert!(s.sigterm_within(Duration::from_secs(10)).is_some());
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let cmds = j["nines_serve"]["member_cmds"][0].as_u64().unwrap();
    // 4 writes and 4 reads, and the final flush.
    assert!(cmds >= 8, "member_cmds {cmds}");
}
