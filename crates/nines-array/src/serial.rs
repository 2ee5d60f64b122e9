//! A serial array with external GC (`--layout serial`, paper 003, SWAN at USENIX ATC'19): every
//! write goes to one *front-end* column, log-structured; when it fills, another column becomes
//! the front-end and the old one a *back-end*; the policy's own garbage collection (xGC) moves
//! valid data between back-ends and TRIMs the segments it empties, so the front-end's SSDs only
//! ever receive sequential writes into trimmed space and never need to collect garbage.
//!
//! Geometry: `n` members form `k = n / w` *columns* of `w` members striped together (stripe
//! `C`). Each column is cut into *segments* of `G` bytes (`G / w` on each member, contiguous
//! there; `G` a multiple of `w * C`). The volume is mapped in *units* of `U` bytes (a multiple of
//! the members' logical block; I/Os must be aligned to it, others answer EINVAL): a table maps
//! volume unit -> physical unit (global segment `col * S + s`, slot), and a reverse table maps
//! physical unit -> volume unit, so a segment's valid units are known and counted.
//! Physical unit `p`: segment `g = p / (G/U)`, column `g / S`, column offset
//! `(g % S) * G + (p % (G/U)) * U`; column offset `o` is on member `col * w + (o / C) % w` at
//! `(o / C / w) * C + o % C`. Capacity: `(k * S - reserve) * G` where the reserve is
//! `k * (rotate_free + 1) + gc_stop` segments (room for rotation and for GC to work).
//!
//! - **Writes** take the next units of the front-end's open segment (a request may span
//!   segments, and columns on a rotation); one member command per piece inside a stripe unit,
//!   from the client's buffer. The mapping changes when the whole request completes (so reads
//!   never see a location before its data is there); the old locations become invalid.
//! - **Reads** look every unit up and send one command per run of units contiguous on one
//!   member; units never written (or trimmed) read as zeros.
//! - **TRIM / WRITE_ZEROES** drop mapping entries (no member command; the space is reclaimed
//!   and trimmed on the members when GC cleans its segment).
//! - **Flush** goes to every member.
//! - **Rotation**: when the front-end needs a new segment and has only `rotate_free` free ones
//!   left, the back-end column with the most free segments (more than `rotate_free`) becomes the
//!   front-end; GC leaves that column first (its victim is given up, its open GC segment sealed)
//!   and writes wait until GC commands still in flight there complete, so GC never touches the
//!   front-end. Its `rotate_free` remaining segments are left for GC to write into.
//! - **xGC**: when fewer than `gc_start` segments are free outside the front-end (or writes
//!   wait for room), the policy picks a victim among the sealed back-end segments with no write
//!   in flight, greedily (fewest valid units), and moves its valid units, in runs of at most
//!   `move_bytes` inside one stripe unit, with a read into a scratch buffer and a write into an
//!   open GC segment of the back-end column with the fewest free segments (concentrating free
//!   space where the next front-end comes from), at most `gc_depth` moves in flight (the
//!   throttle). A move changes the mapping only for units still mapped where it read them (a
//!   client write that completed meanwhile wins). Once every unit is moved and no read is still
//!   in flight from it, the victim is TRIMmed on its members and becomes free. GC stops at
//!   `gc_stop` free segments outside the front-end.
//! - The first write queues a trim of every segment (the front-end's first), as creating an
//!   array discards its members, so the members' own GC never moves stale data; a read-only run
//!   writes nothing. A trim that fails (a member without discard) is counted and ignored: it
//!   only spares the device's own GC. Trims of a column count as GC work there (a rotation to
//!   it waits for them).
//!
//! The mapping lives in memory only: it is not persisted, so a volume reopened over the same
//! members starts empty (see docs/arch-array.md, "serial").

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::ArrayError;
use crate::api::{
    BufRef, CmdDone, CmdOp, CmdResult, Cx, IoResult, MemberCmd, VolIo, VolOp, Volume,
};

const EIO: i32 = 5;
const EINVAL: i32 = 22;
const ENOSPC: i32 = 28;
const NONE: u32 = u32::MAX;
/// Segments trimmed at once.
const TRIM_SLOTS: u32 = 4;
/// Role changes kept for the report (the first ones; later ones are counted).
const ROLE_LOG_MAX: usize = 4096;
/// Intervals of client write bytes kept for the report.
const INTERVALS_MAX: usize = 3600;

/// The options of `--layout serial`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SerialSpec {
    /// Members striped together in one column (`--column-members`).
    pub column_members: u32,
    /// Stripe unit inside a column (`--stripe`).
    pub stripe_bytes: u64,
    /// Segment size of one column, all its members together (`--segment`).
    pub segment_bytes: u64,
    /// Mapping unit (`--map-unit`): volume I/Os must be aligned to it.
    pub unit_bytes: u32,
    /// The front-end rotates when it has this many free segments left (`--rotate-free`).
    pub rotate_free: u32,
    /// xGC starts when fewer segments than this are free outside the front-end (`--gc-start`).
    pub gc_start: u32,
    /// xGC stops at this many free segments outside the front-end (`--gc-stop`).
    pub gc_stop: u32,
    /// xGC moves in flight at most (`--gc-depth`): its throttle.
    pub gc_depth: u32,
    /// Bytes one xGC move reads and writes at most (`--gc-move`).
    pub move_bytes: u32,
    /// Start as if the volume's first `start_full_bytes` had been written once, in order
    /// (`--start-full SIZE`): those units mapped, the columns filled from the first one on,
    /// the front-end the column with the most free segments. For aged simulated members (whose
    /// data is there); on real members the volume then reads whatever they hold. 0: empty.
    #[serde(default)]
    pub start_full_bytes: u64,
}

impl Default for SerialSpec {
    /// SWAN's defaults: 1 MiB stripe, 128 MiB segment groups, rotation at one free group, GC
    /// stopping at 15 free groups.
    fn default() -> SerialSpec {
        SerialSpec {
            column_members: 1,
            stripe_bytes: 1 << 20,
            segment_bytes: 128 << 20,
            unit_bytes: 4096,
            rotate_free: 1,
            gc_start: 15,
            gc_stop: 15,
            gc_depth: 4,
            move_bytes: 256 << 10,
            start_full_bytes: 0,
        }
    }
}

impl SerialSpec {
    /// The segments kept free of client data: room to rotate and for GC to work.
    pub fn reserve_segments(&self, columns: u32) -> u64 {
        u64::from(columns) * (u64::from(self.rotate_free) + 1) + u64::from(self.gc_stop)
    }

    /// Segments per column over members of `member_bytes`.
    pub fn segments_per_column(&self, member_bytes: u64) -> u64 {
        let per_member = self.segment_bytes / u64::from(self.column_members.max(1));
        member_bytes.checked_div(per_member).unwrap_or(0)
    }

    /// The capacity over `members` members of `member_bytes` each (0 when they are too small).
    pub fn size_bytes(&self, member_bytes: u64, members: u32) -> u64 {
        let k = members / self.column_members.max(1);
        let segs = self.segments_per_column(member_bytes) * u64::from(k);
        segs.saturating_sub(self.reserve_segments(k)) * self.segment_bytes
    }

    /// The bytes each of `members` members must hold for a volume of at least `end_bytes`.
    pub fn member_bytes_for(&self, end_bytes: u64, members: u32) -> u64 {
        let k = u64::from((members / self.column_members.max(1)).max(1));
        let segs = end_bytes.div_ceil(self.segment_bytes.max(1)) + self.reserve_segments(k as u32);
        segs.div_ceil(k) * (self.segment_bytes / u64::from(self.column_members.max(1)))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seg {
    /// Free, never trimmed by this volume.
    Free,
    /// Free, a trim in flight (or queued).
    Trimming,
    /// Free and trimmed: ready to write.
    Clean,
    /// The front-end's or GC's open segment.
    Open,
    /// Written; may hold valid units.
    Sealed,
    /// Being cleaned by GC.
    Victim,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Move {
    Idle,
    /// Reading `n` units at `src` into the slot's scratch buffer; they go to `dst`.
    Read {
        src: u32,
        dst: u32,
        n: u32,
    },
    /// Writing them at `dst`.
    Write {
        src: u32,
        dst: u32,
        n: u32,
    },
}

#[derive(Clone, Debug)]
struct Req {
    op: VolOp,
    /// Member commands out.
    pending: u32,
    /// Commands issued (the next id).
    issued: u32,
    result: IoResult,
    /// First volume unit, units.
    unit: u32,
    units: u32,
    /// Units given a place so far (writes).
    allocated: u32,
    fua: bool,
    /// Where the units went, in order: (physical start, units).
    runs: Vec<(u32, u32)>,
}

/// The policy's counters (`volume.stats`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct SerialStats {
    pub client_read_bytes: u64,
    pub client_write_bytes: u64,
    pub client_trim_bytes: u64,
    pub gc_read_bytes: u64,
    pub gc_write_bytes: u64,
    /// Units moved by GC whose data was still valid when the move wrote it.
    pub gc_units_moved: u64,
    pub gc_victims: u64,
    pub gc_errors: u64,
    pub rotations: u64,
    pub segments_trimmed: u64,
    pub trim_errors: u64,
    /// Client writes that waited for room (GC, a trim, or a rotation draining GC).
    pub write_waits: u64,
    pub write_errors: u64,
    pub unaligned_ios: u64,
}

/// The serial array.
pub struct Serial {
    spec: SerialSpec,
    n: u32,
    w: u32,
    k: u32,
    /// Segments per column, units per segment.
    s: u32,
    seg_units: u32,
    unit: u64,
    size_bytes: u64,
    per_io: u32,
    gc_base: u32,
    trim_base: u32,
    move_units: u32,

    map: Vec<u32>,
    rev: Vec<u32>,
    valid: Vec<u32>,
    state: Vec<Seg>,
    seg_writes: Vec<u32>,
    seg_reads: Vec<u32>,
    col_free: Vec<u32>,
    col_gc_inflight: Vec<u32>,
    front: u32,
    front_open: Option<(u32, u32)>,
    gc_open: Option<(u32, u32)>,
    rotate_to: Option<u32>,
    victim: Option<u32>,
    victim_cursor: u32,
    /// No eligible victim was found since the last change that could make one.
    victim_none: bool,
    gc_active: bool,
    gc_broken: bool,
    /// Every segment was queued for a trim (on the first write).
    formatted: bool,
    moves: Vec<Move>,
    trim_q: VecDeque<u32>,
    trims: Vec<Option<(u32, u32)>>,

    reqs: Vec<Req>,
    /// Segment of each client command (reads and writes), to count what is in flight there.
    cmd_seg: Vec<u32>,
    waitq: VecDeque<u32>,

    stats: SerialStats,
    origin_ns: Option<u64>,
    interval_ns: u64,
    write_bytes_per_interval: Vec<u64>,
    roles: Vec<(u64, u32)>,
    roles_dropped: u64,
    outputs_max: usize,
}

impl Serial {
    pub fn new(
        spec: SerialSpec,
        member_sizes_bytes: &[u64],
        block_bytes: u32,
        tags: u32,
        len_bytes_max: u32,
    ) -> Result<Serial, ArrayError> {
        let n = member_sizes_bytes.len() as u32;
        let w = spec.column_members;
        let bad = |m: String| Err(ArrayError::Invalid(m));
        if w == 0 {
            return bad("--column-members must be at least 1".into());
        }
        if n < 2 * w || !n.is_multiple_of(w) {
            return bad(format!(
                "serial needs at least two columns of --column-members {w} and a whole number of \
                 them; {n} members given"
            ));
        }
        let k = n / w;
        let unit = spec.unit_bytes;
        if unit == 0 || !unit.is_multiple_of(block_bytes.max(1)) {
            return bad(format!(
                "--map-unit {unit} must be a positive multiple of the members' {block_bytes}-byte \
                 logical block"
            ));
        }
        let c = spec.stripe_bytes;
        if c == 0 || !c.is_multiple_of(u64::from(unit)) {
            return bad(format!(
                "--stripe {c} must be a positive multiple of --map-unit {unit}"
            ));
        }
        if spec.segment_bytes == 0 || !spec.segment_bytes.is_multiple_of(c * u64::from(w)) {
            return bad(format!(
                "--segment {} must be a positive multiple of --stripe {c} times --column-members {w}",
                spec.segment_bytes
            ));
        }
        if spec.rotate_free == 0 {
            return bad(
                "--rotate-free must be at least 1 (GC writes into what rotation leaves)".into(),
            );
        }
        if spec.gc_start > spec.gc_stop {
            return bad(format!(
                "--gc-start {} must not exceed --gc-stop {}",
                spec.gc_start, spec.gc_stop
            ));
        }
        if spec.gc_depth == 0 || spec.move_bytes < unit || !spec.move_bytes.is_multiple_of(unit) {
            return bad(format!(
                "--gc-depth must be at least 1 and --gc-move a positive multiple of --map-unit {unit}"
            ));
        }
        let smallest = member_sizes_bytes.iter().copied().min().unwrap_or(0);
        let s = spec.segments_per_column(smallest);
        let size_bytes = spec.size_bytes(smallest, n);
        if size_bytes == 0 {
            return bad(format!(
                "serial over {k} columns of {smallest}-byte members has {s} segments of {} per \
                 column, not more than its reserve of {} (rotation and GC); use a smaller --segment, \
                 --gc-stop or --rotate-free, or larger members",
                spec.segment_bytes,
                spec.reserve_segments(k)
            ));
        }
        let seg_units = spec.segment_bytes / u64::from(unit);
        let total_units = seg_units * s * u64::from(k);
        if total_units >= u64::from(NONE) || seg_units > u64::from(u32::MAX / 2) {
            return bad(format!(
                "serial would map {total_units} units; use a larger --map-unit"
            ));
        }
        let per_io = (len_bytes_max / unit + 2).max(n);
        let cmds = u64::from(tags.max(1)) * u64::from(per_io)
            + u64::from(spec.gc_depth)
            + u64::from(TRIM_SLOTS * w);
        if cmds > u64::from(u32::MAX / 2) {
            return bad(
                "serial would need too many member commands in flight; use a smaller --iodepth"
                    .into(),
            );
        }
        let segs = (s * u64::from(k)) as usize;
        let vol_units = (size_bytes / u64::from(unit)) as usize;
        let tags = tags.max(1);
        let gc_base = tags * per_io;
        let mut v = Serial {
            spec,
            n,
            w,
            k,
            s: s as u32,
            seg_units: seg_units as u32,
            unit: u64::from(unit),
            size_bytes,
            per_io,
            gc_base,
            trim_base: gc_base + spec.gc_depth,
            move_units: spec.move_bytes / unit,
            map: vec![NONE; vol_units],
            rev: vec![NONE; total_units as usize],
            valid: vec![0; segs],
            state: vec![Seg::Free; segs],
            seg_writes: vec![0; segs],
            seg_reads: vec![0; segs],
            col_free: vec![s as u32; k as usize],
            col_gc_inflight: vec![0; k as usize],
            front: 0,
            front_open: None,
            gc_open: None,
            rotate_to: None,
            victim: None,
            victim_cursor: 0,
            victim_none: false,
            gc_active: false,
            gc_broken: false,
            formatted: false,
            moves: vec![Move::Idle; spec.gc_depth as usize],
            trim_q: VecDeque::with_capacity(segs),
            trims: vec![None; TRIM_SLOTS as usize],
            reqs: (0..tags)
                .map(|_| Req {
                    op: VolOp::Read,
                    pending: 0,
                    issued: 0,
                    result: IoResult::Ok,
                    unit: 0,
                    units: 0,
                    allocated: 0,
                    fua: false,
                    runs: Vec::with_capacity(per_io as usize),
                })
                .collect(),
            cmd_seg: vec![NONE; gc_base as usize],
            waitq: VecDeque::with_capacity(tags as usize),
            stats: SerialStats::default(),
            origin_ns: None,
            interval_ns: 1_000_000_000,
            write_bytes_per_interval: Vec::with_capacity(INTERVALS_MAX),
            roles: Vec::with_capacity(ROLE_LOG_MAX),
            roles_dropped: 0,
            // Every tag's commands (a completion can wake every waiting write), every GC move
            // and trim command, plus the completions.
            outputs_max: (tags * per_io) as usize
                + tags as usize
                + spec.gc_depth as usize
                + (TRIM_SLOTS * w) as usize
                + 1,
        };
        if spec.start_full_bytes > 0 {
            if spec.start_full_bytes > size_bytes {
                return bad(format!(
                    "--start-full {} is larger than the volume ({size_bytes} bytes)",
                    spec.start_full_bytes
                ));
            }
            v.fill_in_order(spec.start_full_bytes.div_ceil(u64::from(unit)) as u32);
        }
        Ok(v)
    }

    /// Maps every volume unit in order onto the columns' segments, leaving each column its last
    /// `rotate_free + 1` segments free (the room rotation leaves GC), the rest of the reserve
    /// at the end: the state a sequential fill leaves.
    fn fill_in_order(&mut self, units: u32) {
        let keep = (self.spec.rotate_free + 1).min(self.s);
        let mut u = 0u32;
        for c in 0..self.k {
            for sg in 0..self.s - keep {
                if u >= units {
                    break;
                }
                let g = c * self.s + sg;
                let n = self.seg_units.min(units - u);
                for i in 0..n {
                    let p = g * self.seg_units + i;
                    self.map[(u + i) as usize] = p;
                    self.rev[p as usize] = u + i;
                }
                self.valid[g as usize] = n;
                self.set_state(g, Seg::Sealed);
                u += n;
            }
        }
        debug_assert_eq!(u, units, "the reserve leaves room for every unit");
        let best = (0..self.k).max_by_key(|&c| (self.col_free[c as usize], c));
        self.front = best.unwrap_or(0);
    }

    /// The column whose members take the client's writes now.
    pub fn front(&self) -> u32 {
        self.front
    }

    /// Members of column `c`.
    fn col_members(&self, c: u32) -> std::ops::Range<u32> {
        c * self.w..(c + 1) * self.w
    }

    #[inline]
    fn seg_of(&self, p: u32) -> u32 {
        p / self.seg_units
    }

    #[inline]
    fn col_of_seg(&self, g: u32) -> u32 {
        g / self.s
    }

    /// Member and member offset of physical unit `p`.
    #[inline]
    fn locate(&self, p: u32) -> (u32, u64) {
        let g = self.seg_of(p);
        let col = self.col_of_seg(g);
        let o = u64::from(g % self.s) * self.spec.segment_bytes
            + u64::from(p % self.seg_units) * self.unit;
        let c = self.spec.stripe_bytes;
        let chunk = o / c;
        let member = col * self.w + (chunk % u64::from(self.w)) as u32;
        (member, (chunk / u64::from(self.w)) * c + o % c)
    }

    /// Units from physical unit `p` to the end of its stripe unit.
    #[inline]
    fn to_chunk_end(&self, p: u32) -> u32 {
        let cu = (self.spec.stripe_bytes / self.unit) as u32;
        cu - (p % self.seg_units) % cu
    }

    fn set_state(&mut self, g: u32, st: Seg) {
        let free = |s: Seg| matches!(s, Seg::Free | Seg::Trimming | Seg::Clean);
        let old = self.state[g as usize];
        let c = self.col_of_seg(g) as usize;
        match (free(old), free(st)) {
            (true, false) => self.col_free[c] -= 1,
            (false, true) => self.col_free[c] += 1,
            _ => {}
        }
        self.state[g as usize] = st;
    }

    /// A trimmed free segment of column `c` (lowest first), starting a trim of an untrimmed one
    /// when there is none. Also keeps one more trimmed ahead.
    fn clean_segment(&mut self, c: u32) -> Option<u32> {
        let range = c * self.s..(c + 1) * self.s;
        let found = range
            .clone()
            .find(|&g| self.state[g as usize] == Seg::Clean);
        let have_ahead = found.is_some_and(|f| {
            (f + 1..range.end).any(|g| matches!(self.state[g as usize], Seg::Clean | Seg::Trimming))
        });
        if !have_ahead
            && !range
                .clone()
                .any(|g| self.state[g as usize] == Seg::Trimming)
            && let Some(g) = range.clone().find(|&g| self.state[g as usize] == Seg::Free)
        {
            self.set_state(g, Seg::Trimming);
            self.queue_trim(g);
        }
        found
    }

    #[allow(clippy::too_many_arguments)]
    fn push_cmd(
        &mut self,
        cx: &mut Cx,
        id: u32,
        p: u32,
        n: u32,
        op: CmdOp,
        buf: BufRef,
        fua: bool,
    ) {
        let (member, off) = self.locate(p);
        cx.out.cmd(MemberCmd {
            id,
            member,
            op,
            offset_bytes: off,
            len_bytes: (u64::from(n) * self.unit) as u32,
            buf,
            fua,
        });
    }

    /// A client command of request `tag` on `n` units at `p` (inside one stripe unit).
    fn client_cmd(&mut self, cx: &mut Cx, tag: u32, p: u32, n: u32, op: CmdOp, buf_off: u32) {
        let r = &mut self.reqs[tag as usize];
        assert!(
            r.issued < self.per_io,
            "serial sent more commands for one request than its bound"
        );
        let id = tag * self.per_io + r.issued;
        r.issued += 1;
        r.pending += 1;
        let fua = r.fua;
        // Reads count per command; a write counts once per run, until the request finishes
        // (its units become valid only then, so its segments must not be cleaned before).
        debug_assert!(
            op != CmdOp::Write || self.col_of_seg(self.seg_of(p)) == self.front,
            "a client write off the front-end"
        );
        if op == CmdOp::Read {
            let g = self.seg_of(p);
            self.cmd_seg[id as usize] = g;
            self.seg_reads[g as usize] += 1;
        }
        self.push_cmd(
            cx,
            id,
            p,
            n,
            op,
            BufRef::Client {
                tag,
                offset: buf_off,
            },
            fua,
        );
    }

    fn note_role(&mut self, now_ns: u64) {
        if self.roles.len() < ROLE_LOG_MAX {
            self.roles.push((now_ns, self.front));
        } else {
            self.roles_dropped += 1;
        }
    }

    /// Opens the front-end's next segment, rotating when it is down to `rotate_free`. None
    /// when writes must wait (GC draining from the next front-end, a trim, or no room).
    fn open_front(&mut self, now_ns: u64) -> Option<u32> {
        for _ in 0..2 {
            if let Some(c) = self.rotate_to {
                if self.col_gc_inflight[c as usize] > 0 {
                    return None;
                }
                self.rotate_to = None;
                self.front = c;
                self.stats.rotations += 1;
                self.victim_none = false;
                self.note_role(now_ns);
            }
            let f = self.front;
            if self.col_free[f as usize] > self.spec.rotate_free {
                let g = self.clean_segment(f)?;
                self.set_state(g, Seg::Open);
                return Some(g);
            }
            // Rotate to the back-end column with the most free segments.
            let mut best: Option<u32> = None;
            for i in 1..self.k {
                let c = (f + i) % self.k;
                if self.col_free[c as usize] > self.spec.rotate_free
                    && best.is_none_or(|b| self.col_free[c as usize] > self.col_free[b as usize])
                {
                    best = Some(c);
                }
            }
            let c = best?;
            self.rotate_to = Some(c);
            // GC leaves the next front-end.
            if let Some(v) = self.victim
                && self.col_of_seg(v) == c
            {
                self.set_state(v, Seg::Sealed);
                self.victim = None;
            }
            if let Some((g, _)) = self.gc_open
                && self.col_of_seg(g) == c
            {
                self.set_state(g, Seg::Sealed);
                self.gc_open = None;
            }
        }
        None
    }

    /// Gives request `tag` places for its remaining units and sends them; false when it must
    /// wait for room.
    fn place_write(&mut self, now_ns: u64, tag: u32, cx: &mut Cx) -> bool {
        let t = tag as usize;
        while self.reqs[t].allocated < self.reqs[t].units {
            let (g, next) = match self.front_open {
                Some((g, next)) if next < self.seg_units => (g, next),
                other => {
                    if let Some((g, _)) = other {
                        self.set_state(g, Seg::Sealed);
                        self.victim_none = false;
                        self.front_open = None;
                    }
                    match self.open_front(now_ns) {
                        Some(g) => {
                            self.front_open = Some((g, 0));
                            (g, 0)
                        }
                        None => return false,
                    }
                }
            };
            let r = &self.reqs[t];
            let take = (self.seg_units - next).min(r.units - r.allocated);
            let p0 = g * self.seg_units + next;
            let mut done = 0;
            while done < take {
                let p = p0 + done;
                let m = self.to_chunk_end(p).min(take - done);
                let buf_off = ((u64::from(self.reqs[t].allocated + done)) * self.unit) as u32;
                self.client_cmd(cx, tag, p, m, CmdOp::Write, buf_off);
                done += m;
            }
            self.seg_writes[g as usize] += 1;
            let r = &mut self.reqs[t];
            r.runs.push((p0, take));
            r.allocated += take;
            self.front_open = Some((g, next + take));
        }
        true
    }

    /// Places waiting writes, in order, while there is room.
    fn wake_writes(&mut self, now_ns: u64, cx: &mut Cx) {
        while let Some(&tag) = self.waitq.front() {
            if !self.place_write(now_ns, tag, cx) {
                if self.gc_broken {
                    // Nothing will make room: fail what waits.
                    self.waitq.pop_front();
                    let r = &mut self.reqs[tag as usize];
                    r.result = IoResult::Err(ENOSPC);
                    r.units = r.allocated;
                    self.stats.write_errors += 1;
                    if r.pending == 0 {
                        self.finish(tag, cx);
                    }
                    continue;
                }
                return;
            }
            self.waitq.pop_front();
            if self.reqs[tag as usize].pending == 0 {
                self.finish(tag, cx);
            }
        }
    }

    /// Invalidates physical unit `p` (its volume unit moved or was dropped).
    #[inline]
    fn invalidate(&mut self, p: u32) {
        if p != NONE && self.rev[p as usize] != NONE {
            self.rev[p as usize] = NONE;
            let ix = self.seg_of(p) as usize;
            self.valid[ix] -= 1;
        }
    }

    /// Request `tag` is complete: apply a write's mapping and answer.
    fn finish(&mut self, tag: u32, cx: &mut Cx) {
        let t = tag as usize;
        if self.reqs[t].op == VolOp::Write {
            for i in 0..self.reqs[t].runs.len() {
                let g = self.seg_of(self.reqs[t].runs[i].0);
                self.seg_writes[g as usize] -= 1;
            }
        }
        if self.reqs[t].op == VolOp::Write && self.reqs[t].result == IoResult::Ok {
            let mut v = self.reqs[t].unit;
            for i in 0..self.reqs[t].runs.len() {
                let (p0, n) = self.reqs[t].runs[i];
                for p in p0..p0 + n {
                    let old = self.map[v as usize];
                    self.invalidate(old);
                    self.map[v as usize] = p;
                    self.rev[p as usize] = v;
                    let ix = self.seg_of(p) as usize;
                    self.valid[ix] += 1;
                    v += 1;
                }
            }
            self.victim_none = false;
        }
        let r = &mut self.reqs[t];
        r.runs.clear();
        r.issued = 0;
        cx.out.done(tag, r.result);
    }

    /// Free segments outside the front-end.
    fn backend_free(&self) -> u32 {
        self.col_free.iter().sum::<u32>() - self.col_free[self.front as usize]
    }

    fn gc_wanted(&mut self) -> bool {
        if self.gc_broken {
            return false;
        }
        let free = self.backend_free();
        if self.gc_active {
            if free >= self.spec.gc_stop && self.waitq.is_empty() {
                self.gc_active = false;
            }
        } else if free < self.spec.gc_start || !self.waitq.is_empty() {
            self.gc_active = true;
        }
        self.gc_active
    }

    /// Whether GC may touch column `c` now.
    #[inline]
    fn gc_may_use(&self, c: u32) -> bool {
        c != self.front && Some(c) != self.rotate_to
    }

    fn pick_victim(&mut self) -> Option<u32> {
        if self.victim_none {
            return None;
        }
        let mut best: Option<u32> = None;
        for g in 0..self.s * self.k {
            let gi = g as usize;
            if self.state[gi] == Seg::Sealed
                && self.seg_writes[gi] == 0
                && self.valid[gi] < self.seg_units
                && self.gc_may_use(self.col_of_seg(g))
                && best.is_none_or(|b| self.valid[gi] < self.valid[b as usize])
            {
                best = Some(g);
            }
        }
        self.victim_none = best.is_none();
        best
    }

    /// A GC destination with room: the open one, or a trimmed segment of the back-end column
    /// with the fewest free segments.
    fn gc_dest(&mut self) -> Option<(u32, u32)> {
        if let Some((g, next)) = self.gc_open {
            if next < self.seg_units && self.gc_may_use(self.col_of_seg(g)) {
                return Some((g, next));
            }
            self.set_state(g, Seg::Sealed);
            self.victim_none = false;
            self.gc_open = None;
        }
        let mut best: Option<u32> = None;
        for c in 0..self.k {
            let free = self.col_free[c as usize];
            if free > 0
                && self.gc_may_use(c)
                && best.is_none_or(|b| free < self.col_free[b as usize])
            {
                best = Some(c);
            }
        }
        let g = self.clean_segment(best?)?;
        self.set_state(g, Seg::Open);
        self.gc_open = Some((g, 0));
        Some((g, 0))
    }

    /// Starts GC moves while GC is wanted and slots are free; finishes the victim when done.
    fn gc_pump(&mut self, cx: &mut Cx) {
        self.gc_moves(cx);
        self.finish_victim();
        self.pump_trims(cx);
    }

    fn gc_moves(&mut self, cx: &mut Cx) {
        if !self.gc_wanted() && self.victim.is_none() {
            return;
        }
        for slot in 0..self.moves.len() {
            if self.moves[slot] != Move::Idle {
                continue;
            }
            let v = match self.victim {
                Some(v) => v,
                None => {
                    if !self.gc_wanted() {
                        break;
                    }
                    let Some(v) = self.pick_victim() else { break };
                    self.set_state(v, Seg::Victim);
                    self.victim = Some(v);
                    self.victim_cursor = 0;
                    self.stats.gc_victims += 1;
                    v
                }
            };
            // The next valid unit of the victim.
            let base = v * self.seg_units;
            while self.victim_cursor < self.seg_units
                && self.rev[(base + self.victim_cursor) as usize] == NONE
            {
                self.victim_cursor += 1;
            }
            if self.victim_cursor == self.seg_units {
                break;
            }
            let Some((dg, dnext)) = self.gc_dest() else {
                break;
            };
            let src = base + self.victim_cursor;
            let dst = dg * self.seg_units + dnext;
            let mut n = self
                .move_units
                .min(self.to_chunk_end(src))
                .min(self.to_chunk_end(dst))
                .min(self.seg_units - dnext);
            // Only the valid run (a gap ends the move).
            let run = (0..n)
                .take_while(|&i| self.rev[(src + i) as usize] != NONE)
                .count() as u32;
            n = run.max(1);
            self.victim_cursor += n;
            self.gc_open = Some((dg, dnext + n));
            self.seg_reads[v as usize] += 1;
            self.seg_writes[dg as usize] += 1;
            // Both columns count as GC's until the move ends (a rotation waits for them).
            let ix = self.col_of_seg(v) as usize;
            self.col_gc_inflight[ix] += 1;
            let ix = self.col_of_seg(dg) as usize;
            self.col_gc_inflight[ix] += 1;
            self.moves[slot] = Move::Read { src, dst, n };
            self.stats.gc_read_bytes += u64::from(n) * self.unit;
            let buf = BufRef::Scratch {
                index: slot as u32,
                offset: 0,
            };
            self.push_cmd(
                cx,
                self.gc_base + slot as u32,
                src,
                n,
                CmdOp::Read,
                buf,
                false,
            );
        }
    }

    /// The victim is empty and nothing reads it: trim it.
    fn finish_victim(&mut self) {
        let Some(v) = self.victim else { return };
        let vi = v as usize;
        if self.victim_cursor < self.seg_units
            || self.seg_reads[vi] > 0
            || self.moves.iter().any(|m| matches!(m, Move::Read { src, .. } | Move::Write { src, .. } if self.seg_of(*src) == v))
        {
            return;
        }
        if self.valid[vi] > 0 {
            // A move failed under it: keep the data.
            self.set_state(v, Seg::Sealed);
        } else {
            self.set_state(v, Seg::Trimming);
            self.queue_trim(v);
        }
        self.victim = None;
    }

    /// Queues segment `g`'s trim; it counts as GC work in its column until done (a rotation
    /// waits for it, so trims of cleaned segments never reach the front-end).
    fn queue_trim(&mut self, g: u32) {
        let c = self.col_of_seg(g) as usize;
        self.col_gc_inflight[c] += 1;
        self.trim_q.push_back(g);
    }

    fn pump_trims(&mut self, cx: &mut Cx) {
        for slot in 0..TRIM_SLOTS {
            if self.trims[slot as usize].is_some() {
                continue;
            }
            let Some(g) = self.trim_q.pop_front() else {
                return;
            };
            self.trims[slot as usize] = Some((g, self.w));
            let c = self.col_of_seg(g);
            let per_member = self.spec.segment_bytes / u64::from(self.w);
            for (i, m) in self.col_members(c).enumerate() {
                cx.out.cmd(MemberCmd {
                    id: self.trim_base + slot * self.w + i as u32,
                    member: m,
                    op: CmdOp::Trim,
                    offset_bytes: u64::from(g % self.s) * per_member,
                    len_bytes: per_member.min(u64::from(u32::MAX)) as u32,
                    buf: BufRef::None,
                    fua: false,
                });
            }
        }
    }

    fn gc_done(&mut self, now_ns: u64, slot: usize, result: CmdResult, cx: &mut Cx) {
        let ok = result == CmdResult::Ok;
        if !ok {
            self.stats.gc_errors += 1;
            self.gc_broken = true;
        }
        match self.moves[slot] {
            Move::Read { src, dst, n } => {
                let sg = self.seg_of(src);
                self.seg_reads[sg as usize] -= 1;
                let ix = self.col_of_seg(sg) as usize;
                self.col_gc_inflight[ix] -= 1;
                if ok {
                    // The destination's column stays counted from the read's issue on.
                    self.moves[slot] = Move::Write { src, dst, n };
                    self.stats.gc_write_bytes += u64::from(n) * self.unit;
                    let buf = BufRef::Scratch {
                        index: slot as u32,
                        offset: 0,
                    };
                    self.push_cmd(
                        cx,
                        self.gc_base + slot as u32,
                        dst,
                        n,
                        CmdOp::Write,
                        buf,
                        false,
                    );
                } else {
                    let ix = self.seg_of(dst) as usize;
                    self.seg_writes[ix] -= 1;
                    let ix = self.col_of_seg(self.seg_of(dst)) as usize;
                    self.col_gc_inflight[ix] -= 1;
                    self.moves[slot] = Move::Idle;
                }
            }
            Move::Write { src, dst, n } => {
                let dg = self.seg_of(dst);
                self.seg_writes[dg as usize] -= 1;
                let ix = self.col_of_seg(dg) as usize;
                self.col_gc_inflight[ix] -= 1;
                if ok {
                    for i in 0..n {
                        let v = self.rev[(src + i) as usize];
                        if v != NONE {
                            self.invalidate(src + i);
                            self.map[v as usize] = dst + i;
                            self.rev[(dst + i) as usize] = v;
                            self.valid[dg as usize] += 1;
                            self.stats.gc_units_moved += 1;
                        }
                    }
                }
                self.moves[slot] = Move::Idle;
            }
            Move::Idle => panic!("completion of a GC move not in flight"),
        }
        self.after_change(now_ns, cx);
    }

    /// Something completed: move GC and trims on, and place writes that wait.
    fn after_change(&mut self, now_ns: u64, cx: &mut Cx) {
        self.gc_pump(cx);
        if !self.waitq.is_empty() {
            self.wake_writes(now_ns, cx);
            self.gc_pump(cx);
        }
    }

    fn count_interval(&mut self, now_ns: u64, bytes: u64) {
        let origin = *self.origin_ns.get_or_insert(now_ns);
        let i = ((now_ns - origin) / self.interval_ns) as usize;
        if i < INTERVALS_MAX {
            if self.write_bytes_per_interval.len() <= i {
                self.write_bytes_per_interval.resize(i + 1, 0);
            }
            self.write_bytes_per_interval[i] += bytes;
        }
    }

    /// Members the front-end column holds now (the ones that must never collect garbage).
    pub fn front_members(&self) -> std::ops::Range<u32> {
        self.col_members(self.front)
    }
}

impl Volume for Serial {
    fn layout(&self) -> &'static str {
        "serial"
    }
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    fn members(&self) -> u32 {
        self.n
    }
    fn block_bytes(&self) -> u32 {
        self.unit as u32
    }
    fn scratch(&self) -> (u32, u32) {
        (self.spec.gc_depth, self.spec.move_bytes)
    }
    fn cmds_max(&self) -> u32 {
        self.trim_base + TRIM_SLOTS * self.w
    }
    fn outputs_max(&self) -> usize {
        self.outputs_max
    }
    fn gc_free_members(&self) -> Option<std::ops::Range<u32>> {
        Some(self.front_members())
    }

    fn submit(&mut self, now_ns: u64, io: VolIo, cx: &mut Cx) {
        let tag = io.tag;
        let t = tag as usize;
        assert!(
            self.reqs[t].pending == 0 && self.reqs[t].issued == 0,
            "tag {tag} submitted while in flight"
        );
        {
            let r = &mut self.reqs[t];
            r.op = io.op;
            r.result = IoResult::Ok;
            r.fua = io.fua;
            r.allocated = 0;
            r.runs.clear();
        }
        if io.op == VolOp::Flush {
            for m in 0..self.n {
                let r = &mut self.reqs[t];
                let id = tag * self.per_io + r.issued;
                r.issued += 1;
                r.pending += 1;
                self.cmd_seg[id as usize] = NONE;
                cx.out.cmd(MemberCmd {
                    id,
                    member: m,
                    op: CmdOp::Flush,
                    offset_bytes: 0,
                    len_bytes: 0,
                    buf: BufRef::None,
                    fua: false,
                });
            }
            return;
        }
        let end = io.offset_bytes + u64::from(io.len_bytes);
        if !io.offset_bytes.is_multiple_of(self.unit)
            || !u64::from(io.len_bytes).is_multiple_of(self.unit)
            || end > self.size_bytes
        {
            self.stats.unaligned_ios += 1;
            self.reqs[t].issued = 0;
            cx.out.done(tag, IoResult::Err(EINVAL));
            return;
        }
        let first = (io.offset_bytes / self.unit) as u32;
        let units = (u64::from(io.len_bytes) / self.unit) as u32;
        self.reqs[t].unit = first;
        self.reqs[t].units = units;
        match io.op {
            VolOp::Read => {
                self.stats.client_read_bytes += u64::from(io.len_bytes);
                self.reqs[t].allocated = units;
                let mut i = 0;
                while i < units {
                    let p = self.map[(first + i) as usize];
                    let buf_off = (u64::from(i) * self.unit) as u32;
                    if p == NONE {
                        // Unwritten: zeros, as far as the next written unit.
                        let mut j = i + 1;
                        while j < units && self.map[(first + j) as usize] == NONE {
                            j += 1;
                        }
                        if cx.data.has_data() {
                            cx.data.zero(
                                BufRef::Client {
                                    tag,
                                    offset: buf_off,
                                },
                                (u64::from(j - i) * self.unit) as u32,
                            );
                        }
                        i = j;
                        continue;
                    }
                    // A run contiguous on the member: physically consecutive, one stripe unit.
                    let lim = self.to_chunk_end(p).min(units - i);
                    let mut m = 1;
                    while m < lim && self.map[(first + i + m) as usize] == p + m {
                        m += 1;
                    }
                    self.client_cmd(cx, tag, p, m, CmdOp::Read, buf_off);
                    i += m;
                }
                if self.reqs[t].pending == 0 {
                    self.reqs[t].issued = 0;
                    cx.out.done(tag, IoResult::Ok);
                }
            }
            VolOp::Write => {
                self.stats.client_write_bytes += u64::from(io.len_bytes);
                self.count_interval(now_ns, u64::from(io.len_bytes));
                if units == 0 {
                    self.reqs[t].issued = 0;
                    cx.out.done(tag, IoResult::Ok);
                    return;
                }
                if !self.formatted {
                    // The first write trims every segment never written (the front-end's
                    // first), as creating an array discards its members: stale data the
                    // members still hold would otherwise be moved by their own GC.
                    self.formatted = true;
                    for g in 0..self.s * self.k {
                        if self.state[g as usize] == Seg::Free {
                            self.set_state(g, Seg::Trimming);
                            self.queue_trim(g);
                        }
                    }
                }
                if !self.waitq.is_empty() || !self.place_write(now_ns, tag, cx) {
                    if self.gc_broken {
                        self.stats.write_errors += 1;
                        let r = &mut self.reqs[t];
                        r.result = IoResult::Err(ENOSPC);
                        r.units = r.allocated;
                        if r.pending == 0 {
                            self.finish(tag, cx);
                        }
                        return;
                    }
                    self.stats.write_waits += 1;
                    self.waitq.push_back(tag);
                    self.gc_pump(cx);
                    return;
                }
                self.gc_pump(cx);
            }
            VolOp::Trim | VolOp::WriteZeroes => {
                self.stats.client_trim_bytes += u64::from(io.len_bytes);
                for v in first..first + units {
                    let old = self.map[v as usize];
                    self.invalidate(old);
                    self.map[v as usize] = NONE;
                }
                self.victim_none = false;
                self.reqs[t].issued = 0;
                cx.out.done(tag, IoResult::Ok);
                self.gc_pump(cx);
            }
            VolOp::Flush => unreachable!("handled above"),
        }
    }

    fn member_done(&mut self, now_ns: u64, done: CmdDone, cx: &mut Cx) {
        let id = done.id;
        if id >= self.trim_base {
            let slot = ((id - self.trim_base) / self.w) as usize;
            let Some((g, left)) = self.trims[slot] else {
                panic!("completion of a trim not in flight");
            };
            if done.result != CmdResult::Ok {
                self.stats.trim_errors += 1;
            }
            if left > 1 {
                self.trims[slot] = Some((g, left - 1));
                return;
            }
            self.trims[slot] = None;
            self.stats.segments_trimmed += 1;
            let c = self.col_of_seg(g) as usize;
            self.col_gc_inflight[c] -= 1;
            self.set_state(g, Seg::Clean);
            self.pump_trims(cx);
            self.after_change(now_ns, cx);
            return;
        }
        if id >= self.gc_base {
            self.gc_done(now_ns, (id - self.gc_base) as usize, done.result, cx);
            return;
        }
        let tag = id / self.per_io;
        let t = tag as usize;
        assert!(
            self.reqs[t].pending > 0,
            "completion of command {id} of a request not in flight"
        );
        if self.reqs[t].op == VolOp::Read {
            let g = self.cmd_seg[id as usize];
            self.seg_reads[g as usize] -= 1;
        }
        if self.reqs[t].result == IoResult::Ok && done.result != CmdResult::Ok {
            self.reqs[t].result = match done.result {
                CmdResult::Err(e) => IoResult::Err(e),
                _ => IoResult::Err(EIO),
            };
            if self.reqs[t].op == VolOp::Write {
                self.stats.write_errors += 1;
            }
        }
        self.reqs[t].pending -= 1;
        let r = &self.reqs[t];
        if r.pending == 0 && r.allocated == r.units {
            self.finish(tag, cx);
        }
        // A read out of a victim, or a write that ends a segment's writes, can let GC go on.
        if self.victim.is_some() || !self.waitq.is_empty() || self.gc_active {
            self.after_change(now_ns, cx);
        }
    }

    fn stats(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(&self.stats).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            let waf = if self.stats.client_write_bytes > 0 {
                (self.stats.client_write_bytes + self.stats.gc_write_bytes) as f64
                    / self.stats.client_write_bytes as f64
            } else {
                1.0
            };
            o.insert("array_write_amplification".into(), waf.into());
            o.insert(
                "spec".into(),
                serde_json::to_value(self.spec).unwrap_or_default(),
            );
            o.insert("columns".into(), self.k.into());
            o.insert("segments_per_column".into(), self.s.into());
            o.insert("front_column".into(), self.front.into());
            o.insert(
                "free_segments_per_column".into(),
                serde_json::json!(self.col_free),
            );
            o.insert(
                "valid_bytes".into(),
                (self.valid.iter().map(|&x| u64::from(x)).sum::<u64>() * self.unit).into(),
            );
            // Roles over time: at each rotation, its time and the new front-end column.
            o.insert(
                "rotation_t_ns".into(),
                serde_json::json!(self.roles.iter().map(|r| r.0).collect::<Vec<_>>()),
            );
            o.insert(
                "rotation_front".into(),
                serde_json::json!(self.roles.iter().map(|r| r.1).collect::<Vec<_>>()),
            );
            o.insert("roles_dropped".into(), self.roles_dropped.into());
            o.insert("interval_ns".into(), self.interval_ns.into());
            o.insert(
                "client_write_bytes_per_interval".into(),
                serde_json::json!(self.write_bytes_per_interval),
            );
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_follows_the_formula() {
        let spec = SerialSpec {
            column_members: 2,
            stripe_bytes: 8192,
            segment_bytes: 64 * 1024,
            unit_bytes: 4096,
            rotate_free: 1,
            gc_start: 1,
            gc_stop: 1,
            gc_depth: 2,
            move_bytes: 8192,
            start_full_bytes: 0,
        };
        let s = Serial::new(spec, &[1 << 20; 4], 512, 1, 65536).unwrap();
        // 16 segments of 32 KiB per member per column.
        assert_eq!(s.s, 32);
        assert_eq!(s.seg_units, 16);
        // Unit 0: column 0, chunk 0 -> member 0 offset 0; unit 2: chunk 1 -> member 1 offset 0;
        // unit 5: chunk 2 -> member 0 at 8192 + 4096.
        assert_eq!(s.locate(0), (0, 0));
        assert_eq!(s.locate(2), (1, 0));
        assert_eq!(s.locate(5), (0, 8192 + 4096));
        // Segment 1 of column 0 starts at 32 KiB on each member.
        assert_eq!(s.locate(16), (0, 32 * 1024));
        // Segment 32 is column 1's first: members 2 and 3.
        assert_eq!(s.locate(32 * 16), (2, 0));
        assert_eq!(s.locate(32 * 16 + 3), (3, 4096));
        // Capacity: 64 segments less 2 * 2 + 1 reserve.
        assert_eq!(s.size_bytes, (64 - 5) * 64 * 1024);
        assert_eq!(spec.size_bytes(1 << 20, 4), s.size_bytes);
        assert!(spec.size_bytes(spec.member_bytes_for(s.size_bytes, 4), 4) >= s.size_bytes);
    }
}
