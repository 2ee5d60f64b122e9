//! RAID5 (`--layout raid5 --chunk 64k [--failed N]`): striping with one rotating parity chunk
//! per row, real XOR parity over real bytes (through the driver's [`crate::api::DataPlane`]).
//!
//! Layout (left-symmetric, as Linux md's default): `n` members, chunk `C`; row `r` holds `n - 1`
//! data chunks and the parity chunk on member `p(r) = n - 1 - r % n`; data chunk `j` of the row
//! is on member `(p(r) + 1 + j) % n`, at member offset `r * C`. Capacity: `(n - 1)` times the
//! smallest member rounded down to whole chunks.
//!
//! A request is carried out row by row (a row is locked while a request works on it, so two
//! writes never race on one parity; a request that finds its row locked waits, bounded by the
//! tags). In each row:
//! - read: one command per data piece; a piece on a failed member (or one the policy avoids) is
//!   rebuilt from the same range of every other member, XORed into the client's buffer;
//! - write of whole row: parity is the XOR of the new data, no reads;
//! - partial write: read-modify-write (old data of the written pieces and old parity: new parity
//!   = old parity ^ old data ^ new data) or reconstruct-write (the row's data over the written
//!   range, the new data laid over it, parity the XOR of it), whichever reads fewer member
//!   ranges, as md chooses; degraded, whichever is possible (a written piece on the failed
//!   member forces reconstruct-write, with the failed member's old data rebuilt from parity);
//!   with the parity member failed only the data is written;
//! - flush: to every working member.
//!
//! A member that answers an I/O error is failed (counted, reported) and the row is redone
//! degraded; a second failure fails the request with EIO. TRIM and WRITE_ZEROES are refused
//! (EOPNOTSUPP): dropping data under a parity chunk would make the parity wrong.
//! Known limit: no write-hole protection (a crash between a row's data and parity writes leaves
//! that row's parity stale), as md without a journal or bitmap.

use std::collections::VecDeque;

use crate::ArrayError;
use crate::api::{
    BufRef, CmdDone, CmdOp, CmdResult, Cx, IoResult, MemberCmd, VolIo, VolOp, Volume,
};

const EIO: i32 = 5;
const EOPNOTSUPP: i32 = 95;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Not in flight.
    Idle,
    /// Waiting for its row's lock.
    Waiting,
    /// Reads of the row out.
    Read,
    /// Writes of the row out.
    Write,
    /// Flushes out.
    Flush,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    /// Reads; `rebuild` = the data index rebuilt from the others, if any.
    Read {
        rebuild: Option<u32>,
    },
    Full,
    Rmw,
    Rcw,
    /// The parity member is failed: data only.
    DataOnly,
}

/// One piece of a request in a row: data index, in-chunk range, offset in the client buffer.
#[derive(Clone, Copy, Debug, Default)]
struct Piece {
    j: u32,
    a: u32,
    b: u32,
    client: u32,
}

#[derive(Clone, Debug)]
struct Req {
    io: VolIo,
    phase: Phase,
    row: u64,
    row_last: u64,
    pending: u32,
    result: IoResult,
    plan: Plan,
    /// The row's pieces (at most n - 1), and the union of their in-chunk ranges.
    pieces: Vec<Piece>,
    lo: u32,
    hi: u32,
    /// A member failed while this row was out: redo it when its commands are back.
    redo: bool,
}

pub struct Raid5 {
    n: u32,
    chunk: u64,
    size_bytes: u64,
    block_bytes: u32,
    tags: u32,
    /// Member command ids of tag t: t * per_tag + k, k < per_tag.
    per_tag: u32,
    cmd_member: Vec<u32>,
    reqs: Vec<Req>,
    waiting: VecDeque<u32>,
    failed: Option<u32>,
    /// A member reads avoid while it works (the D/ND policy's non-deterministic member).
    avoid: Option<u32>,
    stats: Stats,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
struct Stats {
    member_reads: u64,
    member_writes: u64,
    volume_reads: u64,
    rebuilt_pieces: u64,
    full_rows: u64,
    rmw_rows: u64,
    rcw_rows: u64,
    degraded_rows: u64,
    members_failed_on_error: u64,
    row_lock_waits: u64,
}

impl Raid5 {
    pub fn new(
        chunk_bytes: u64,
        member_sizes_bytes: &[u64],
        block_bytes: u32,
        tags: u32,
        failed: Option<u32>,
    ) -> Result<Raid5, ArrayError> {
        let n = member_sizes_bytes.len();
        if n < 3 {
            return Err(ArrayError::TooFewMembers {
                layout: "raid5",
                min: 3,
            });
        }
        let bb = u64::from(block_bytes.max(1));
        if chunk_bytes == 0 || !chunk_bytes.is_multiple_of(bb) || chunk_bytes > 16 << 20 {
            return Err(ArrayError::Invalid(format!(
                "raid5 chunk {chunk_bytes} bytes must be a multiple of the members' {block_bytes}-byte block and at most 16 MiB"
            )));
        }
        let smallest = member_sizes_bytes.iter().copied().min().unwrap_or(0);
        if smallest < chunk_bytes {
            return Err(ArrayError::StripeTooLarge {
                stripe_bytes: chunk_bytes,
                member_bytes: smallest,
            });
        }
        if let Some(f) = failed
            && f as usize >= n
        {
            return Err(ArrayError::Invalid(format!(
                "--failed {f}: the volume has members 0 to {}",
                n - 1
            )));
        }
        let tags = tags.max(1);
        let scratch_bytes = u64::from(tags) * n as u64 * chunk_bytes;
        if scratch_bytes > 1 << 30 {
            return Err(ArrayError::Invalid(format!(
                "raid5 would need {} MiB of parity buffers ({tags} I/Os x {n} members x {chunk_bytes}-byte chunks); use a smaller --chunk or --iodepth",
                scratch_bytes >> 20
            )));
        }
        let rows = smallest / chunk_bytes;
        // A row's phase sends at most: a read with a rebuilt piece, n - 1 rebuild reads and
        // n - 2 other pieces; a write, n - 1 data and the parity; a flush, n.
        let per_tag = 2 * n as u32;
        Ok(Raid5 {
            n: n as u32,
            chunk: chunk_bytes,
            size_bytes: rows * chunk_bytes * (n as u64 - 1),
            block_bytes,
            tags,
            per_tag,
            cmd_member: vec![0; (tags * per_tag) as usize],
            reqs: (0..tags)
                .map(|_| Req {
                    io: VolIo {
                        tag: 0,
                        op: VolOp::Read,
                        offset_bytes: 0,
                        len_bytes: 0,
                        fua: false,
                    },
                    phase: Phase::Idle,
                    row: 0,
                    row_last: 0,
                    pending: 0,
                    result: IoResult::Ok,
                    plan: Plan::Full,
                    pieces: Vec::with_capacity(n),
                    lo: 0,
                    hi: 0,
                    redo: false,
                })
                .collect(),
            waiting: VecDeque::with_capacity(tags as usize),
            failed,
            avoid: None,
            stats: Stats::default(),
        })
    }

    /// The parity member of row `r`.
    #[inline]
    pub fn parity_member(&self, r: u64) -> u32 {
        self.n - 1 - (r % u64::from(self.n)) as u32
    }

    /// The member holding data chunk `j` of row `r`.
    #[inline]
    pub fn data_member(&self, r: u64, j: u32) -> u32 {
        (self.parity_member(r) + 1 + j) % self.n
    }

    /// Where volume byte `x` lives: (member, member offset).
    pub fn locate(&self, x: u64) -> (u32, u64) {
        let u = x / self.chunk;
        let d = u64::from(self.n - 1);
        let (r, j) = (u / d, (u % d) as u32);
        (self.data_member(r, j), r * self.chunk + x % self.chunk)
    }

    /// The failed member, if any.
    pub fn failed(&self) -> Option<u32> {
        self.failed
    }

    /// Makes reads avoid `member` (rebuilt from the others) while it is set; at most one member,
    /// and never while another member is failed (the parity covers one).
    pub fn set_avoid(&mut self, member: Option<u32>) {
        if let Some(m) = member {
            assert!(m < self.n, "avoid member {m} of {}", self.n);
        }
        self.avoid = member;
    }

    /// The scratch slot `s` (0..n) of tag `t`.
    #[inline]
    fn slot(&self, t: u32, s: u32, offset: u32) -> BufRef {
        BufRef::Scratch {
            index: t * self.n + s,
            offset,
        }
    }

    #[inline]
    fn client(t: u32, offset: u32) -> BufRef {
        BufRef::Client { tag: t, offset }
    }

    #[allow(clippy::too_many_arguments)]
    fn send(
        &mut self,
        t: u32,
        member: u32,
        op: CmdOp,
        off: u64,
        len: u32,
        buf: BufRef,
        cx: &mut Cx,
    ) {
        let r = &mut self.reqs[t as usize];
        let k = r.pending;
        assert!(
            k < self.per_tag,
            "raid5 sent more commands for one row than its bound"
        );
        r.pending += 1;
        let id = t * self.per_tag + k;
        self.cmd_member[id as usize] = member;
        match op {
            CmdOp::Read | CmdOp::FastFailRead { .. } => self.stats.member_reads += 1,
            CmdOp::Write => self.stats.member_writes += 1,
            _ => {}
        }
        cx.out.cmd(MemberCmd {
            id,
            member,
            op,
            offset_bytes: off,
            len_bytes: len,
            buf,
            fua: self.reqs[t as usize].io.fua,
        });
    }

    fn row_locked(&self, t: u32, row: u64) -> bool {
        self.reqs.iter().enumerate().any(|(i, q)| {
            i as u32 != t && q.row == row && matches!(q.phase, Phase::Read | Phase::Write)
        })
    }

    /// Starts request `t` on its current row, or queues it behind the row's lock.
    fn start_row(&mut self, t: u32, cx: &mut Cx) {
        let row = self.reqs[t as usize].row;
        if self.row_locked(t, row) {
            self.stats.row_lock_waits += 1;
            self.reqs[t as usize].phase = Phase::Waiting;
            assert!(
                self.waiting.len() < self.tags as usize,
                "more waiters than tags"
            );
            self.waiting.push_back(t);
            return;
        }
        self.plan_row(t, cx);
    }

    /// Lays out request `t`'s pieces in its current row and sends the row's first phase.
    fn plan_row(&mut self, t: u32, cx: &mut Cx) {
        let n = self.n;
        let c = self.chunk;
        let row_bytes = c * u64::from(n - 1);
        let (io, row) = {
            let q = &self.reqs[t as usize];
            (q.io, q.row)
        };
        let start = (row * row_bytes).max(io.offset_bytes);
        let end = ((row + 1) * row_bytes).min(io.offset_bytes + u64::from(io.len_bytes));
        let mut pieces = std::mem::take(&mut self.reqs[t as usize].pieces);
        pieces.clear();
        let mut pos = start;
        // Bounded: at most n - 1 chunks per row.
        while pos < end {
            let in_row = pos - row * row_bytes;
            let j = (in_row / c) as u32;
            let a = (in_row % c) as u32;
            let b = ((c - u64::from(a)).min(end - pos) + u64::from(a)) as u32;
            pieces.push(Piece {
                j,
                a,
                b,
                client: (pos - io.offset_bytes) as u32,
            });
            pos += u64::from(b - a);
        }
        let lo = pieces.iter().map(|p| p.a).min().unwrap_or(0);
        let hi = pieces.iter().map(|p| p.b).max().unwrap_or(0);
        let p_member = self.parity_member(row);
        let base = row * c;
        let failed = self.failed;
        {
            let q = &mut self.reqs[t as usize];
            q.pieces = pieces;
            q.lo = lo;
            q.hi = hi;
            q.pending = 0;
            q.redo = false;
        }
        if failed.is_some() {
            self.stats.degraded_rows += 1;
        }
        // Taken out while commands are sent (no allocation), put back below.
        let pieces = std::mem::take(&mut self.reqs[t as usize].pieces);
        match io.op {
            VolOp::Read => {
                self.reqs[t as usize].phase = Phase::Read;
                let gone = failed.or(self.avoid);
                let mut rebuild = None;
                for p in &pieces {
                    let m = self.data_member(row, p.j);
                    if Some(m) == gone {
                        rebuild = Some(p.j);
                        // Every other member's same range, into slots by member index.
                        for k in 0..n {
                            if k != m {
                                let slot = self.slot(t, k, 0);
                                self.send(
                                    t,
                                    k,
                                    CmdOp::Read,
                                    base + u64::from(p.a),
                                    p.b - p.a,
                                    slot,
                                    cx,
                                );
                            }
                        }
                        self.stats.rebuilt_pieces += 1;
                    } else {
                        self.send(
                            t,
                            m,
                            CmdOp::Read,
                            base + u64::from(p.a),
                            p.b - p.a,
                            Self::client(t, p.client),
                            cx,
                        );
                    }
                }
                self.reqs[t as usize].plan = Plan::Read { rebuild };
            }
            VolOp::Write => {
                let full = pieces.len() as u32 == n - 1
                    && pieces.iter().all(|p| p.a == 0 && u64::from(p.b) == c);
                let touched_failed =
                    failed.is_some_and(|f| pieces.iter().any(|p| self.data_member(row, p.j) == f));
                let plan = if failed == Some(p_member) {
                    Plan::DataOnly
                } else if full {
                    Plan::Full
                } else if touched_failed {
                    Plan::Rcw
                } else {
                    // Reads each way: RMW the written pieces and the parity; RCW every data
                    // chunk over the written range (the written ones too, unless they cover
                    // it), plus parity when a data member is failed.
                    let rmw = pieces.len() as u32 + 1;
                    let rcw = (n - 1) + u32::from(failed.is_some());
                    if rmw <= rcw { Plan::Rmw } else { Plan::Rcw }
                };
                self.reqs[t as usize].plan = plan;
                match plan {
                    Plan::Full | Plan::DataOnly => {
                        self.reqs[t as usize].pieces = pieces;
                        self.write_phase(t, cx);
                        return;
                    }
                    Plan::Rmw => {
                        self.reqs[t as usize].phase = Phase::Read;
                        self.stats.rmw_rows += 1;
                        for p in &pieces {
                            let m = self.data_member(row, p.j);
                            let slot = self.slot(t, p.j, 0);
                            self.send(
                                t,
                                m,
                                CmdOp::Read,
                                base + u64::from(p.a),
                                p.b - p.a,
                                slot,
                                cx,
                            );
                        }
                        let slot = self.slot(t, n - 1, 0);
                        self.send(
                            t,
                            p_member,
                            CmdOp::Read,
                            base + u64::from(lo),
                            hi - lo,
                            slot,
                            cx,
                        );
                    }
                    Plan::Rcw => {
                        self.reqs[t as usize].phase = Phase::Read;
                        self.stats.rcw_rows += 1;
                        for j in 0..n - 1 {
                            let m = self.data_member(row, j);
                            if Some(m) != failed {
                                let slot = self.slot(t, j, 0);
                                self.send(
                                    t,
                                    m,
                                    CmdOp::Read,
                                    base + u64::from(lo),
                                    hi - lo,
                                    slot,
                                    cx,
                                );
                            }
                        }
                        if failed.is_some() {
                            let slot = self.slot(t, n - 1, 0);
                            self.send(
                                t,
                                p_member,
                                CmdOp::Read,
                                base + u64::from(lo),
                                hi - lo,
                                slot,
                                cx,
                            );
                        }
                    }
                    Plan::Read { .. } => unreachable!(),
                }
            }
            VolOp::Flush | VolOp::Trim | VolOp::WriteZeroes => unreachable!("handled in submit"),
        }
        self.reqs[t as usize].pieces = pieces;
    }

    /// Computes the row's parity (by its plan) and sends the row's writes.
    fn write_phase(&mut self, t: u32, cx: &mut Cx) {
        let n = self.n;
        let (row, plan, lo, hi) = {
            let q = &self.reqs[t as usize];
            (q.row, q.plan, q.lo, q.hi)
        };
        let pieces = std::mem::take(&mut self.reqs[t as usize].pieces);
        let failed = self.failed;
        let p_member = self.parity_member(row);
        let base = row * self.chunk;
        let pslot = |s: &Self, off: u32| s.slot(t, n - 1, off);
        let len = hi - lo;
        match plan {
            Plan::Full => {
                self.stats.full_rows += 1;
                cx.data.zero(pslot(self, 0), len);
                for p in &pieces {
                    cx.data.xor(pslot(self, 0), Self::client(t, p.client), len);
                }
            }
            Plan::Rmw => {
                for p in &pieces {
                    let at = pslot(self, p.a - lo);
                    cx.data.xor(at, self.slot(t, p.j, 0), p.b - p.a);
                    cx.data.xor(at, Self::client(t, p.client), p.b - p.a);
                }
            }
            Plan::Rcw => {
                // The failed data member's old bytes, rebuilt: parity ^ every other data chunk.
                if let Some(f) = failed
                    && let Some(jf) = (0..n - 1).find(|&j| self.data_member(row, j) == f)
                {
                    cx.data.copy(self.slot(t, jf, 0), pslot(self, 0), len);
                    for j in 0..n - 1 {
                        if j != jf {
                            cx.data.xor(self.slot(t, jf, 0), self.slot(t, j, 0), len);
                        }
                    }
                }
                for p in &pieces {
                    cx.data.copy(
                        self.slot(t, p.j, p.a - lo),
                        Self::client(t, p.client),
                        p.b - p.a,
                    );
                }
                cx.data.zero(pslot(self, 0), len);
                for j in 0..n - 1 {
                    cx.data.xor(pslot(self, 0), self.slot(t, j, 0), len);
                }
            }
            Plan::DataOnly | Plan::Read { .. } => {}
        }
        self.reqs[t as usize].phase = Phase::Write;
        self.reqs[t as usize].pending = 0;
        for p in &pieces {
            let m = self.data_member(row, p.j);
            if Some(m) != failed {
                self.send(
                    t,
                    m,
                    CmdOp::Write,
                    base + u64::from(p.a),
                    p.b - p.a,
                    Self::client(t, p.client),
                    cx,
                );
            }
        }
        if plan != Plan::DataOnly && failed != Some(p_member) {
            let buf = pslot(self, 0);
            self.send(
                t,
                p_member,
                CmdOp::Write,
                base + u64::from(lo),
                len,
                buf,
                cx,
            );
        }
        self.reqs[t as usize].pieces = pieces;
        if self.reqs[t as usize].pending == 0 {
            self.row_done(t, cx);
        }
    }

    /// Request `t`'s row is finished: next row, or done; then waiters may go.
    fn row_done(&mut self, t: u32, cx: &mut Cx) {
        let q = &mut self.reqs[t as usize];
        if q.row < q.row_last && q.result == IoResult::Ok {
            q.row += 1;
            q.phase = Phase::Idle;
            self.start_row(t, cx);
        } else {
            q.phase = Phase::Idle;
            let result = q.result;
            cx.out.done(t, result);
        }
        self.wake_waiters(cx);
    }

    fn wake_waiters(&mut self, cx: &mut Cx) {
        // Bounded: each waiter is tried once per wake; one that is still blocked queues again.
        for _ in 0..self.waiting.len() {
            let Some(w) = self.waiting.pop_front() else {
                break;
            };
            if self.reqs[w as usize].phase == Phase::Waiting {
                self.start_row(w, cx);
            }
        }
    }

    /// The row's reads are back: finish a read, or go on to the writes.
    fn reads_done(&mut self, t: u32, cx: &mut Cx) {
        let plan = self.reqs[t as usize].plan;
        match plan {
            Plan::Read { rebuild } => {
                if let Some(j) = rebuild {
                    let row = self.reqs[t as usize].row;
                    let m = self.data_member(row, j);
                    let p = *self.reqs[t as usize]
                        .pieces
                        .iter()
                        .find(|p| p.j == j)
                        .expect("rebuilt piece");
                    let dst = Self::client(t, p.client);
                    cx.data.zero(dst, p.b - p.a);
                    for k in 0..self.n {
                        if k != m {
                            cx.data.xor(dst, self.slot(t, k, 0), p.b - p.a);
                        }
                    }
                }
                self.row_done(t, cx);
            }
            _ => self.write_phase(t, cx),
        }
    }

    fn fail_member(&mut self, m: u32) -> bool {
        match self.failed {
            None => {
                self.failed = Some(m);
                if self.avoid == Some(m) {
                    self.avoid = None;
                }
                self.stats.members_failed_on_error += 1;
                true
            }
            Some(f) => f == m,
        }
    }
}

impl Volume for Raid5 {
    fn layout(&self) -> &'static str {
        "raid5"
    }
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    fn members(&self) -> u32 {
        self.n
    }
    fn block_bytes(&self) -> u32 {
        self.block_bytes
    }
    fn scratch(&self) -> (u32, u32) {
        (self.tags * self.n, self.chunk as u32)
    }
    fn cmds_max(&self) -> u32 {
        self.tags * self.per_tag
    }
    fn outputs_max(&self) -> usize {
        // A call may finish one row, start the next, and let every waiter start its row.
        (self.tags as usize + 1) * (self.per_tag as usize + 1)
    }

    fn submit(&mut self, _now_ns: u64, io: VolIo, cx: &mut Cx) {
        let t = io.tag;
        assert!(t < self.tags, "tag {t} beyond {}", self.tags);
        assert!(
            self.reqs[t as usize].phase == Phase::Idle,
            "tag {t} submitted while in flight"
        );
        match io.op {
            VolOp::Trim | VolOp::WriteZeroes => {
                cx.out.done(t, IoResult::Err(EOPNOTSUPP));
                return;
            }
            VolOp::Flush => {
                let q = &mut self.reqs[t as usize];
                q.io = io;
                q.result = IoResult::Ok;
                q.pending = 0;
                q.phase = Phase::Flush;
                for m in 0..self.n {
                    if Some(m) != self.failed {
                        self.send(t, m, CmdOp::Flush, 0, 0, BufRef::None, cx);
                    }
                }
                return;
            }
            VolOp::Read => self.stats.volume_reads += 1,
            VolOp::Write => {}
        }
        if io.len_bytes == 0 {
            cx.out.done(t, IoResult::Ok);
            return;
        }
        let row_bytes = self.chunk * u64::from(self.n - 1);
        let end = io.offset_bytes + u64::from(io.len_bytes);
        let q = &mut self.reqs[t as usize];
        q.io = io;
        q.result = IoResult::Ok;
        q.row = io.offset_bytes / row_bytes;
        q.row_last = (end - 1) / row_bytes;
        self.start_row(t, cx);
    }

    fn member_done(&mut self, _now_ns: u64, done: CmdDone, cx: &mut Cx) {
        let t = done.id / self.per_tag;
        let m = self.cmd_member[done.id as usize];
        let phase = self.reqs[t as usize].phase;
        assert!(
            matches!(phase, Phase::Read | Phase::Write | Phase::Flush)
                && self.reqs[t as usize].pending > 0,
            "completion of command {} of a request not in flight",
            done.id
        );
        if let CmdResult::Err(_) | CmdResult::Busy { .. } = done.result {
            // A failing member is failed (once); the row is redone around it. A second
            // failing member is more than the parity covers.
            if self.fail_member(m) {
                self.reqs[t as usize].redo = phase == Phase::Read;
            } else {
                self.reqs[t as usize].result = IoResult::Err(EIO);
            }
        }
        let q = &mut self.reqs[t as usize];
        q.pending -= 1;
        if q.pending > 0 {
            return;
        }
        match phase {
            Phase::Flush => {
                q.phase = Phase::Idle;
                let r = q.result;
                cx.out.done(t, r);
            }
            Phase::Read if q.result != IoResult::Ok => self.row_done(t, cx),
            Phase::Read if q.redo => self.plan_row(t, cx),
            Phase::Read => self.reads_done(t, cx),
            Phase::Write => self.row_done(t, cx),
            Phase::Idle | Phase::Waiting => unreachable!(),
        }
    }

    fn stats(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(&self.stats).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("chunk_bytes".into(), self.chunk.into());
            o.insert("failed_member".into(), serde_json::json!(self.failed));
            o.insert(
                "parity_capacity_share".into(),
                (1.0 / f64::from(self.n)).into(),
            );
            let fan_out = if self.stats.volume_reads > 0 {
                self.stats.member_reads as f64 / self.stats.volume_reads as f64
            } else {
                0.0
            };
            o.insert("read_fan_out".into(), fan_out.into());
        }
        v
    }
}
