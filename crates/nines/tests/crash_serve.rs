//! The real-process kill -9 harness (issue 38): a raw NBD client writes random 4-64 KiB runs of
//! blocks with known generations at QD16 (10% FUA, 5% WRITE_ZEROES, a FLUSH every 8-64
//! writes, sent among the writes), while busy loops load the host; `nines serve` is killed at a
//! random moment (kill -9 while it serves, kill -9 during its start-up, or SIGTERM then SIGKILL
//! during its shutdown), restarted, and every block is read back. The oracle: a block reads
//! back the value of its last write acknowledged before a completed FLUSH was sent (or a FUA
//! write's), or of a write after that; an older generation is *lost*, anything else *wrong*; a
//! restart that does not serve is a *lockout*.
//!
//! Each layout is a test; `NINES_CRASH_ROUNDS` sets the kill rounds (CI: a few), `NINES_CRASH_HOGS`
//! the busy loops (3), `NINES_CRASH_PLAIN=1` sends plain writes and flushes only, `NINES` the
//! binary served (bench/crash-serve.sh runs a release build).
//! Each test prints `crash-serve LAYOUT: RESULT rounds=... acked_writes=... lost=... wrong=...
//! lockouts=...`.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::nbd::{self, BLOCK, Conn, block};
use common::serving::Serving;

const QD: usize = 16;
/// A generation whose bytes are unknown (read back wrong once): anything matches it.
const UNKNOWN: u64 = u64::MAX;
/// Not acknowledged (yet).
const IN_FLIGHT: u64 = u64::MAX;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The generation block `b`'s bytes are (0: zeros), if they are any generation's.
fn generation_of(b: u64, bytes: &[u8]) -> Option<u64> {
    if bytes.iter().all(|&x| x == 0) {
        return Some(0);
    }
    let tag = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let g = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    (tag == b + 1 && block(b, g) == bytes).then_some(g)
}

/// What each block may hold: its values in the order sent, each with the acknowledgement
/// number it got (`IN_FLIGHT` until then); the first is the guaranteed one.
struct Model {
    hist: Vec<Vec<(u64, u64)>>,
    /// Blocks with more than one value.
    touched: Vec<u32>,
    next_gen: u64,
}

impl Model {
    fn new(blocks: u64) -> Model {
        Model {
            hist: vec![vec![(0, 0)]; blocks as usize],
            touched: Vec::new(),
            next_gen: 0,
        }
    }

    fn push(&mut self, b: u64, g: u64) {
        let h = &mut self.hist[b as usize];
        if h.len() == 1 {
            self.touched.push(b as u32);
        }
        h.push((g, IN_FLIGHT));
    }

    /// Block `b`'s value acknowledged with number `ack` becomes its guaranteed one (a FUA
    /// write), or the last value acknowledged at or before `ack` (a FLUSH sent then).
    fn settle(&mut self, b: u64, ack: u64) {
        let h = &mut self.hist[b as usize];
        if let Some(i) = h.iter().rposition(|&(_, a)| a <= ack) {
            h.drain(..i);
        }
    }

    fn flushed(&mut self, acks_at_send: u64) {
        let touched = std::mem::take(&mut self.touched);
        for b in touched {
            self.settle(u64::from(b), acks_at_send);
            if self.hist[b as usize].len() > 1 {
                self.touched.push(b);
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Req {
    Data { first: u64, n: u64, fua: bool },
    Flush { acks_at_send: u64 },
}

struct Shared {
    model: Model,
    out: std::collections::HashMap<u64, Req>,
    busy: Vec<bool>,
    acks: u64,
    acked_writes: u64,
    failed: u64,
    dead: bool,
}

/// Writes until the connection dies (the server was killed); returns the writes acknowledged.
fn write_until_killed(
    conn: Conn,
    model: Model,
    rng: &mut Rng,
    flushed: Arc<AtomicBool>,
) -> (Model, u64) {
    let blocks = model.hist.len() as u64;
    // NINES_CRASH_PLAIN=1: plain writes and flushes only (no FUA, no zeroing).
    let plain = std::env::var_os("NINES_CRASH_PLAIN").is_some();
    let can_fua = !plain && conn.flags & nbd::TX_SEND_FUA != 0;
    let can_zero = !plain && conn.flags & nbd::TX_SEND_WRITE_ZEROES != 0;
    assert!(conn.flags & nbd::TX_SEND_FLUSH != 0, "FLUSH not advertised");
    let mut rx = conn.stream.try_clone().unwrap();
    let mut tx = conn.stream;
    let shared = Arc::new((
        Mutex::new(Shared {
            model,
            out: Default::default(),
            busy: vec![false; blocks as usize],
            acks: 0,
            acked_writes: 0,
            failed: 0,
            dead: false,
        }),
        Condvar::new(),
    ));
    let sh = Arc::clone(&shared);
    let receiver = std::thread::spawn(move || {
        loop {
            let r = nbd::reply(&mut rx);
            let (m, cv) = &*sh;
            let mut st = m.lock().unwrap();
            let Some((errno, cookie)) = r else {
                st.dead = true;
                cv.notify_all();
                return;
            };
            let req = st.out.remove(&cookie).expect("a reply to a request sent");
            if errno != 0 {
                st.failed += 1;
            }
            st.acks += 1;
            let ack = st.acks;
            match req {
                Req::Data { first, n, fua } => {
                    st.acked_writes += 1;
                    for b in first..first + n {
                        st.busy[b as usize] = false;
                        if errno == 0 {
                            let h = st.model.hist[b as usize].last_mut().unwrap();
                            h.1 = ack;
                            if fua {
                                st.model.settle(b, ack);
                            }
                        }
                    }
                }
                Req::Flush { acks_at_send } => {
                    if errno == 0 {
                        st.model.flushed(acks_at_send);
                        flushed.store(true, Ordering::Release);
                    }
                }
            }
            cv.notify_all();
        }
    });
    let mut cookie = 0u64;
    let mut until_flush = 8 + rng.below(57);
    'send: loop {
        let (m, cv) = &*shared;
        let mut st = m.lock().unwrap();
        while st.out.len() >= QD && !st.dead {
            st = cv.wait(st).unwrap();
        }
        if st.dead {
            break;
        }
        cookie += 1;
        let mut msg;
        if until_flush == 0 {
            until_flush = 8 + rng.below(57);
            let acks_at_send = st.acks;
            st.out.insert(cookie, Req::Flush { acks_at_send });
            msg = nbd::header(nbd::CMD_FLUSH, 0, cookie, 0, 0).to_vec();
        } else {
            until_flush -= 1;
            let n = 1 + rng.below(16);
            let (first, n) = loop {
                let first = rng.below(blocks - n + 1);
                if !(first..first + n).any(|b| st.busy[b as usize]) {
                    break (first, n);
                }
                if st.dead {
                    break 'send;
                }
            };
            let zero = can_zero && rng.below(20) == 0;
            let fua = can_fua && rng.below(10) == 0;
            st.model.next_gen += 1;
            let g = if zero { 0 } else { st.model.next_gen };
            for b in first..first + n {
                st.busy[b as usize] = true;
                st.model.push(b, g);
            }
            st.out.insert(cookie, Req::Data { first, n, fua });
            let flags = if fua { nbd::FLAG_FUA } else { 0 };
            let len = (n as usize * BLOCK) as u32;
            if zero {
                msg = nbd::header(
                    nbd::CMD_WRITE_ZEROES,
                    flags,
                    cookie,
                    first * BLOCK as u64,
                    len,
                )
                .to_vec();
            } else {
                msg =
                    nbd::header(nbd::CMD_WRITE, flags, cookie, first * BLOCK as u64, len).to_vec();
                for b in first..first + n {
                    msg.extend_from_slice(&block(b, g));
                }
            }
        }
        drop(st);
        use std::io::Write;
        if tx.write_all(&msg).is_err() {
            break;
        }
    }
    let _ = tx.shutdown(std::net::Shutdown::Both);
    receiver.join().unwrap();
    let st = Arc::try_unwrap(shared)
        .ok()
        .expect("the receiver ended")
        .0
        .into_inner()
        .unwrap();
    assert_eq!(st.failed, 0, "requests failed before the kill");
    (st.model, st.acked_writes)
}

#[derive(Default, Debug)]
struct Tally {
    rounds: u64,
    acked_writes: u64,
    lost: u64,
    wrong: u64,
    lockouts: u64,
}

/// Reads every block back and checks it; what it holds becomes its guaranteed value.
fn verify(conn: &mut Conn, model: &mut Model, tally: &mut Tally, what: &str) {
    let blocks = model.hist.len() as u64;
    let per = 64u64;
    let mut buf = vec![0u8; per as usize * BLOCK];
    for first in (0..blocks).step_by(per as usize) {
        let k = per.min(blocks - first);
        let errno = nbd::read_at(
            &mut conn.stream,
            first * BLOCK as u64,
            &mut buf[..k as usize * BLOCK],
        )
        .expect("the server hung up during the read-back");
        assert_eq!(errno, 0, "{what}: read of blocks {first}.. failed");
        for b in first..first + k {
            let got = &buf[(b - first) as usize * BLOCK..(b - first + 1) as usize * BLOCK];
            let g = generation_of(b, got);
            let h = &mut model.hist[b as usize];
            let ok = h.iter().any(|&(v, _)| v == UNKNOWN || Some(v) == g);
            if !ok {
                // This block's own bytes that are not allowed are an older generation (or
                // the data a zeroing replaced): lost; anything else is wrong.
                if g.is_some() {
                    tally.lost += 1;
                } else {
                    tally.wrong += 1;
                }
                if tally.lost + tally.wrong <= 8 {
                    eprintln!(
                        "{what}: block {b} reads generation {g:?}; it may hold {:?} (the first \
                         guaranteed)",
                        h.iter().map(|x| x.0).collect::<Vec<_>>()
                    );
                }
            }
            *h = vec![(g.unwrap_or(UNKNOWN), 0)];
        }
    }
    model.touched.clear();
}

/// Busy loops on the host while the guard lives.
struct Hogs(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>);
impl Hogs {
    fn start(n: u64) -> Hogs {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let s = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut x = 1u64;
                    while !s.load(Ordering::Relaxed) {
                        for _ in 0..10_000 {
                            x = std::hint::black_box(
                                x.wrapping_mul(6364136223846793005).wrapping_add(1),
                            );
                        }
                    }
                })
            })
            .collect();
        Hogs(stop, threads)
    }
}
impl Drop for Hogs {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for t in self.1.drain(..) {
            let _ = t.join();
        }
    }
}

/// Starts the server; None (a lockout) when it exits instead of listening.
fn start(dir: &Path, args: &[&str]) -> Option<Serving> {
    match Serving::try_start(dir, args) {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!("lockout: nines serve {args:?} {}", e.trim());
            None
        }
    }
}

/// The kill loop over one layout.
fn kill_loop(layout: &str, opts: &[&str], members: usize, member_bytes: u64, seed: u64) -> Tally {
    let rounds = env_u64("NINES_CRASH_ROUNDS", 6);
    let hogs = env_u64("NINES_CRASH_HOGS", 3);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m = common::sized_files(d, "m", members, member_bytes);
    let mut args = vec!["--layout", layout];
    args.extend(opts);
    args.extend(m.iter().map(|p| p.to_str().unwrap()));
    let mut rng = Rng(seed | 1);
    let mut tally = Tally::default();
    let mut model: Option<Model> = None;
    let t0 = Instant::now();
    for k in 0..rounds {
        let _load = Hogs::start(hogs);
        // A kill during start-up, every fourth round.
        if k % 4 == 3 {
            let s = Serving::spawn(d, &args);
            std::thread::sleep(Duration::from_millis(rng.below(60)));
            s.kill9();
        }
        let Some(s) = start(d, &args) else {
            tally.lockouts += 1;
            break;
        };
        let mut conn = nbd::connect(&s.socket).expect("handshake");
        let mdl = model.get_or_insert_with(|| Model::new(conn.size_bytes / BLOCK as u64));
        verify(&mut conn, mdl, &mut tally, &format!("{layout} round {k}"));
        drop(conn);
        let conn = nbd::connect(&s.socket).expect("handshake");
        let delay = Duration::from_millis(50 + rng.below(500));
        // Rounds 0, 4, ...: killed right after a FLUSH reply (where issue 38's losses were);
        // 1, 5, ...: SIGTERM, then SIGKILL during the shutdown; else at a random moment.
        let after_flush = k % 4 == 0;
        let graceful = k % 4 == 1;
        let term_after = Duration::from_millis(rng.below(40));
        let flushed = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&flushed);
        let killer = std::thread::spawn(move || {
            std::thread::sleep(delay);
            if after_flush {
                seen.store(false, Ordering::Release);
                let t0 = Instant::now();
                while !seen.load(Ordering::Acquire) && t0.elapsed() < Duration::from_secs(5) {
                    std::hint::spin_loop();
                }
            }
            if graceful {
                s.term_then_kill(term_after);
            } else {
                s.kill9();
            }
        });
        let (mdl, acked) = write_until_killed(conn, model.take().unwrap(), &mut rng, flushed);
        model = Some(mdl);
        tally.acked_writes += acked;
        killer.join().unwrap();
        tally.rounds += 1;
    }
    if tally.lockouts == 0 {
        let _load = Hogs::start(hogs);
        match start(d, &args) {
            Some(s) => {
                let mut conn = nbd::connect(&s.socket).expect("handshake");
                verify(
                    &mut conn,
                    model.as_mut().unwrap(),
                    &mut tally,
                    &format!("{layout} final"),
                );
                drop(conn);
                s.stop_ok();
            }
            None => tally.lockouts += 1,
        }
    }
    eprintln!(
        "crash-serve {layout}: RESULT rounds={} acked_writes={} lost={} wrong={} lockouts={} ({:.1} s)",
        tally.rounds,
        tally.acked_writes,
        tally.lost,
        tally.wrong,
        tally.lockouts,
        t0.elapsed().as_secs_f64()
    );
    tally
}

fn assert_clean(t: &Tally) {
    assert!(
        t.acked_writes > 0,
        "no write was acknowledged: the loop showed nothing"
    );
    assert_eq!(
        (t.lost, t.wrong, t.lockouts),
        (0, 0, 0),
        "flushed blocks lost, wrong, or the volume locked out: {t:?}"
    );
}

#[test]
fn serial_persist_loses_no_flushed_block_across_kills_under_load() {
    let t = kill_loop(
        "serial",
        &[
            "--persist",
            "--segment",
            "1m",
            "--stripe",
            "64k",
            "--map-unit",
            "4k",
            "--rotate-free",
            "1",
            "--gc-start",
            "3",
            "--gc-stop",
            "4",
        ],
        4,
        (16 << 20) + (64 << 10),
        0x9e37_79b9_7f4a_7c15,
    );
    assert_clean(&t);
}

#[test]
fn raid5_loses_no_flushed_block_across_kills_under_load() {
    let t = kill_loop(
        "raid5",
        &["--chunk", "16k"],
        3,
        (8 << 20) + (16 << 10),
        0x2545_f491_4f6c_dd1d,
    );
    assert_clean(&t);
}

#[test]
fn raid0_loses_no_flushed_block_across_kills_under_load() {
    let t = kill_loop(
        "raid0",
        &["--stripe", "64k"],
        2,
        (8 << 20) + (64 << 10),
        0x1234_5678_9abc_def1,
    );
    assert_clean(&t);
}
