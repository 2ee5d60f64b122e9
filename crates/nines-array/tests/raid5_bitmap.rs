//! The raid5 write-intent bitmap against crashes: a driver that keeps several writes in flight
//! and completes their member commands in random order; after every member write (a crash
//! right after it keeps exactly the writes before it, as kill -9 of the server does with the
//! page cache), every row whose parity disagrees with its data must lie in a region whose bit
//! is set in the bitmap page of some member. Then the lazy clearing: idle regions' bits go
//! (after a flush), and the page ends empty.

use std::collections::BTreeSet;

use nines_array::api::{
    BufRef, CmdDone, CmdOp, CmdResult, DataPlane, IoResult, MemberCmd, Output, VolIo, VolOp,
};
use nines_array::raid5::{BITMAP_PAGE_BYTES, parse_bitmap_page};
use nines_array::testing::MemData;
use nines_array::{LayoutSpec, Volume, VolumeHost, VolumeParams, build};

const N: u32 = 4;
const CHUNK: u64 = 4096;
const ROWS: u64 = 64;
const RR: u64 = 4;
const TAGS: u32 = 8;
const LEN_MAX: u32 = 16384;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

struct Crashy {
    host: VolumeHost,
    data: MemData,
    /// The members as a crash right now would leave them.
    mem: Vec<Vec<u8>>,
    pending: Vec<MemberCmd>,
    done: Vec<(u32, IoResult)>,
    trace: Vec<MemberCmd>,
    now: u64,
    /// Rows whose parity disagrees with their data.
    bad: BTreeSet<u64>,
    checks: u64,
}

impl Crashy {
    fn pump(&mut self) {
        while let Some(o) = self.host.pop() {
            match o {
                Output::Done(d) => self.done.push((d.tag, d.result)),
                Output::Cmd(c) => {
                    self.host.sent(&c, self.now);
                    self.pending.push(c);
                }
            }
        }
    }

    fn parity_ok(&self, row: u64) -> bool {
        let off = (row * CHUNK) as usize;
        (0..CHUNK as usize).all(|i| (0..N as usize).fold(0u8, |a, m| a ^ self.mem[m][off + i]) == 0)
    }

    fn bits(&self) -> Vec<bool> {
        let regions = ROWS.div_ceil(RR);
        let mut u = vec![false; regions as usize];
        let po = (ROWS * CHUNK) as usize;
        for m in 0..N as usize {
            if let Some(b) = parse_bitmap_page(
                &self.mem[m][po..po + BITMAP_PAGE_BYTES as usize],
                RR,
                regions,
            ) {
                for (x, y) in u.iter_mut().zip(b) {
                    *x |= y;
                }
            }
        }
        u
    }

    /// The crash invariant, after each member write.
    fn check(&mut self) {
        self.checks += 1;
        let bits = self.bits();
        for &row in &self.bad {
            assert!(
                bits[(row / RR) as usize],
                "a crash now would leave row {row}'s parity stale with its region's bit clear on every member"
            );
        }
    }

    /// Completes one pending command, chosen at random.
    fn step(&mut self, rng: &mut Rng) {
        let i = rng.below(self.pending.len() as u64) as usize;
        let c = self.pending.swap_remove(i);
        self.trace.push(c);
        let (m, off, len) = (
            c.member as usize,
            c.offset_bytes as usize,
            c.len_bytes as usize,
        );
        match c.op {
            CmdOp::Read => {
                let src = self.mem[m][off..off + len].to_vec();
                self.data.write_bytes(c.buf, &src);
            }
            CmdOp::Write => {
                let mut b = vec![0u8; len];
                self.data.read_bytes(c.buf, &mut b);
                self.mem[m][off..off + len].copy_from_slice(&b);
                if (off as u64) < ROWS * CHUNK {
                    for row in off as u64 / CHUNK..=(off + len - 1) as u64 / CHUNK {
                        if self.parity_ok(row) {
                            self.bad.remove(&row);
                        } else {
                            self.bad.insert(row);
                        }
                    }
                }
                self.check();
            }
            CmdOp::Flush => {}
            other => panic!("unexpected command {other:?}"),
        }
        self.host.member_done(
            self.now,
            CmdDone {
                id: c.id,
                result: CmdResult::Ok,
            },
            &mut self.data,
        );
        self.pump();
    }

    fn timers(&mut self) {
        while let Some(at) = self.host.next_timer_ns() {
            if at > self.now {
                break;
            }
            self.host.on_timer(self.now, &mut self.data);
            self.pump();
        }
    }
}

fn crashy(seed: u64) -> Crashy {
    let size = ROWS * CHUNK + u64::from(BITMAP_PAGE_BYTES);
    let sizes = vec![size; N as usize];
    let vol = build(
        &LayoutSpec::Raid5 {
            chunk_bytes: CHUNK,
            failed: None,
            dnd: None,
            rebuild: None,
            fast_fail_ns: None,
            bitmap_region_rows: Some(RR),
        },
        &VolumeParams {
            member_sizes_bytes: &sizes,
            block_bytes: 512,
            tags: TAGS,
            len_bytes_max: LEN_MAX,
        },
    )
    .unwrap();
    assert_eq!(vol.size_bytes(), ROWS * CHUNK * u64::from(N - 1));
    let data = MemData::new(TAGS, LEN_MAX, vol.scratch());
    let mut rng = Rng(seed);
    // Members start with consistent parity (zeros) under garbage-free pages.
    let mem = (0..N).map(|_| vec![0u8; size as usize]).collect();
    let _ = rng.next();
    Crashy {
        host: VolumeHost::new(vol, 0, false),
        data,
        mem,
        pending: Vec::new(),
        done: Vec::new(),
        trace: Vec::new(),
        now: 0,
        bad: BTreeSet::new(),
        checks: 0,
    }
}

#[test]
fn a_crash_after_any_member_write_leaves_every_stale_row_in_a_set_region() {
    let vol_bytes = ROWS * CHUNK * u64::from(N - 1);
    for seed in [0x9e37_79b9_7f4a_7c15u64, 0x2545_f491_4f6c_dd1d, 77] {
        let mut d = crashy(seed);
        let mut rng = Rng(seed);
        let mut free: Vec<u32> = (0..TAGS).collect();
        let mut issued = 0;
        while issued < 600 || !d.pending.is_empty() || free.len() < TAGS as usize {
            for (t, _) in d.done.drain(..) {
                free.push(t);
            }
            if issued < 600 && !free.is_empty() && rng.below(3) > 0 {
                let t = free.pop().unwrap();
                let len = (1 + rng.below(u64::from(LEN_MAX) / 512)) * 512;
                let off = rng.below((vol_bytes - len) / 512 + 1) * 512;
                let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                d.data
                    .write_bytes(BufRef::Client { tag: t, offset: 0 }, &bytes);
                // Writes in a few hot regions and now and then elsewhere, so regions go
                // idle and are cleared while others are written.
                let off = if rng.below(4) > 0 {
                    off % (vol_bytes / 4)
                } else {
                    off
                };
                let off = off.min(vol_bytes - len);
                d.host.submit(
                    d.now,
                    VolIo {
                        tag: t,
                        op: VolOp::Write,
                        offset_bytes: off,
                        len_bytes: len as u32,
                        fua: false,
                    },
                    &mut d.data,
                );
                d.pump();
                issued += 1;
            }
            if !d.pending.is_empty() {
                d.step(&mut rng);
            }
            d.now += rng.below(5_000_000);
            d.timers();
        }
        for (t, r) in d.done.drain(..) {
            assert_eq!(r, IoResult::Ok, "tag {t}");
        }
        assert!(d.checks > 1000, "{} member writes checked", d.checks);
        let st = d.host.volume().stats();
        assert!(st["bitmap"]["clear_writes"].as_u64().unwrap() > 0, "{st}");
        assert!(st["bitmap"]["set_writes"].as_u64().unwrap() > 1, "{st}");
        // Idle: two passes later every bit is cleared on the members, after a flush.
        let flushes_before = d.trace.iter().filter(|c| c.op == CmdOp::Flush).count();
        for _ in 0..4 {
            d.now += 600_000_000;
            d.timers();
            while !d.pending.is_empty() {
                d.step(&mut rng);
            }
        }
        assert!(d.bad.is_empty(), "every write completed: parity consistent");
        assert!(
            d.bits().iter().all(|&b| !b),
            "idle regions' bits are cleared on the members"
        );
        assert_eq!(d.host.volume().stats()["bitmap"]["dirty_regions"], 0);
        let last_flush = d.trace.iter().rposition(|c| c.op == CmdOp::Flush).unwrap();
        let last_page = d.trace.iter().rposition(|c| c.op == CmdOp::Write).unwrap();
        assert!(flushes_before < d.trace.iter().filter(|c| c.op == CmdOp::Flush).count());
        assert!(
            last_flush < last_page,
            "the members are flushed before bits are cleared"
        );
    }
}

#[test]
fn a_write_waits_for_its_regions_bit_on_every_member() {
    let mut d = crashy(5);
    let mut rng = Rng(5);
    let bytes = vec![0xabu8; 4096];
    d.data
        .write_bytes(BufRef::Client { tag: 0, offset: 0 }, &bytes);
    // Row 9 (region 2): data chunk 0 of row 9.
    let off = 9 * CHUNK * u64::from(N - 1);
    d.host.submit(
        0,
        VolIo {
            tag: 0,
            op: VolOp::Write,
            offset_bytes: off,
            len_bytes: 4096,
            fua: false,
        },
        &mut d.data,
    );
    d.pump();
    // Only the page writes are out, FUA, one per member.
    assert_eq!(d.pending.len(), N as usize);
    for c in &d.pending {
        assert_eq!(
            (c.op, c.offset_bytes, c.fua),
            (CmdOp::Write, ROWS * CHUNK, true)
        );
    }
    // Until every member has the page, nothing else is sent.
    for _ in 0..N - 1 {
        d.step(&mut rng);
        assert!(d.pending.iter().all(|c| c.offset_bytes == ROWS * CHUNK));
    }
    d.step(&mut rng);
    assert!(d.bits()[2] && d.bits().iter().filter(|&&b| b).count() == 1);
    assert!(
        d.pending.iter().all(|c| c.offset_bytes < ROWS * CHUNK),
        "{:?}",
        d.pending
    );
    while !d.pending.is_empty() {
        d.step(&mut rng);
    }
    assert_eq!(d.done, vec![(0, IoResult::Ok)]);
    // A second write to the same region goes at once.
    d.done.clear();
    d.host.submit(
        1,
        VolIo {
            tag: 0,
            op: VolOp::Write,
            offset_bytes: off + 4096,
            len_bytes: 4096,
            fua: false,
        },
        &mut d.data,
    );
    d.pump();
    assert!(d.pending.iter().all(|c| c.offset_bytes < ROWS * CHUNK));
    let _: &dyn DataPlane = &d.data;
}
