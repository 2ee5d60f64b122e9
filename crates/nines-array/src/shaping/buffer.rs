//! `--buffer DEVICE_OR_PRESET --buffer-size S --flush-rate R`: a lifetime-classified write buffer
//! on a fast extra member (paper 004 approach 3: an Optane SSD in front of a NAND SSD).
//!
//! **Layout of the buffer device.** Its first `size` bytes are cut into *buckets* (segments) of
//! `bucket` bytes, the NAND drive's erase unit by default. Unit 0 of a bucket is its header
//! (written when the bucket is retired); the others hold *entries*: one record unit (magic,
//! generation, sequence number, volume block, length, class, checksum) followed by the data, one
//! member command per client write. A bucket is opened for one velocity class and filled in
//! order; every record carries the bucket's generation, so what a bucket holds is self-described.
//!
//! **Writes** land in the open bucket of their class and complete there. **Classes**
//! ([`Classifier`]): the volume is cut into [`RANGES`] LBA ranges; each keeps the rate at which
//! its writes arrive while it is being written; a write's class is
//! `floor(log2(range rate / mean rate)) + classes - 1`, clamped, where the mean is the
//! byte-weighted mean rate of recent writes (half-life `--buffer-half-life`): data of similar
//! update frequency shares a bucket. A block written again while buffered keeps its buffered
//! copy's class. **Reads** of buffered blocks are served from the buffer (a read
//! that mixes buffered and unbuffered blocks reads the wrapped volume first, then overlays the
//! buffered blocks it pinned when it arrived). **Flushing** starts when no more than
//! [`FLUSH_LOW_FREE`] buckets are free (or a write waits for room) and takes one full bucket
//! at a time, oldest first: contiguous runs of its live blocks are read into scratch and
//! written to the wrapped volume, each run paid for by a token bucket (`--flush-rate`) and
//! held while a data member says it stays busy over [`FLUSH_YIELD_BUSY_NS`] (its GC, an erase,
//! queued programs: the run's pages would queue behind that work, and reads after them); when
//! the bucket is done the wrapped volume is flushed and the bucket's header marks it free. A bucket whose
//! blocks were all overwritten while buffered is retired without flushing (absorbed writes).
//!
//! **Restarts.** When the driver has bytes (real targets), the volume first scans the buffer
//! device: in each bucket, the records of its newest generation (newer than its free mark) are
//! replayed in sequence order, so every write that completed before a kill -9 is found again
//! and flushed in turn. Client I/Os wait until the scan is done. The simulator has no bytes and
//! starts empty.
//!
//! Trim and write-zeroes are refused (EOPNOTSUPP): a buffered volume would need tombstone
//! records for them.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::throttle::TokenBucket;
use crate::api::{
    BufRef, CmdDone, CmdOp, CmdResult, Control, Cx, IoResult, MemberCmd, Output, Outputs, VolIo,
    VolOp, Volume,
};
use crate::{AnyVolume, ArrayError};

/// Concurrent flush runs (and scratch buffers for them).
pub const FLUSH_SLOTS: u32 = 1;
/// The largest run a flush reads and writes at once.
pub const FLUSH_IO_BYTES: u32 = 64 << 10;
/// Flushing starts when no more than this many buckets are free (or a write waits for room):
/// a full bucket stays buffered until its room is needed. bench (c), 1800 s, read p99.99 by
/// this value: 0: 3.461 ms, 1: 3.117, 2: 2.906, 3: 3.019, always flushing: 3.152 (with 0 or
/// 1, writes wait for room while a bucket flushes and their writers' rates are misread).
pub const FLUSH_LOW_FREE: usize = 2;
/// A flush run waits while a data member says it stays busy longer than this (more than one
/// page program: GC, an erase, programs queued): written then, its pages would queue on the
/// busy dies behind that work, and reads arriving after it would wait behind them too. Not
/// while room is short (a write waits, or fewer than [`FLUSH_LOW_FREE`] buckets are free).
/// Members that cannot say (real devices) are not asked again. bench (c), 1800 s, read
/// p99.99 by this value: not asking 2.906 ms, 1 ms 2.509, 2 ms 2.482, 3 ms 2.505, 4 ms 2.486,
/// 5 ms 2.449 (but 617 writes held for room).
pub const FLUSH_YIELD_BUSY_NS: u64 = 2_000_000;
/// LBA ranges the classifier tracks.
pub const RANGES: u64 = 256;
/// Most velocity classes.
pub const CLASSES_MAX: u32 = 8;

const EOPNOTSUPP: i32 = 95;
const EIO: i32 = 5;
const REC_MAGIC: u64 = 0x4e49_4e45_5342_5546; // "NINESBUF"
const FREE_MAGIC: u64 = 0x4e49_4e45_5346_5245; // "NINESFRE"
const REC_BYTES: usize = 64;
const NONE: u64 = u64::MAX;

/// A pause after which a range's next write starts a new burst: its gap is not averaged in.
pub const BURST_GAP_NS: u64 = 1_000_000_000;
/// Weight of one write in a range's running means (gap between writes, write length).
const RATE_WEIGHT: f64 = 1.0 / 8.0;

/// A range's write rate while it is being written: running means of the gap between its
/// writes and of their length.
#[derive(Clone, Copy, Debug, Default)]
struct RangeRate {
    at_ns: u64,
    gap_ns: f64,
    len_bytes: f64,
    seen: bool,
}

impl RangeRate {
    fn bytes_per_s(&self) -> f64 {
        self.len_bytes * 1e9 / self.gap_ns.max(1.0)
    }
}

/// Assigns writes a velocity class from the write rate of their LBA range.
///
/// A range's velocity is the rate at which its writes arrive while it is being written (bytes
/// over the mean gap between its writes, gaps over [`BURST_GAP_NS`] left out). Sequential
/// writers of equal-sized regions then differ by their speed, which is their data's velocity
/// (a writer twice as fast rewrites its region twice as often), whatever part of its region
/// a writer has reached. A range whose writes resume after a pause takes the rate of the range
/// below it when that one is being written now (a sequential writer moving on keeps its speed),
/// else its own from before the pause. Scattered writes give each range a low rate of their
/// own. A write's class is `floor(log2(rate / mean)) + classes - 1`, clamped, where the mean
/// is the byte-weighted mean rate of recent writes (half-life `--buffer-half-life`): the
/// fastest data lands in the top class, each halving of the rate one class lower.
#[derive(Clone, Debug)]
pub struct Classifier {
    range_bytes: u64,
    ranges: Vec<RangeRate>,
    /// Decayed sums of the written bytes' rates (Σ len x rate) and of the bytes (Σ len).
    mean_num: f64,
    mean_den: f64,
    mean_at_ns: u64,
    half_life_ns: f64,
    classes: u32,
    /// The update for the write being placed (taken by [`Self::commit`]).
    pending: (usize, RangeRate, f64, f64, u64),
}

impl Classifier {
    /// A classifier of [`RANGES`] ranges of `range_bytes` each into `classes` classes.
    pub fn new(range_bytes: u64, classes: u32, half_life_ns: u64) -> Classifier {
        Classifier {
            range_bytes: range_bytes.max(1),
            ranges: vec![RangeRate::default(); RANGES as usize],
            mean_num: 0.0,
            mean_den: 0.0,
            mean_at_ns: 0,
            half_life_ns: half_life_ns.max(1) as f64,
            classes: classes.max(1),
            pending: (0, RangeRate::default(), 0.0, 0.0, 0),
        }
    }

    /// The class of a write at `now_ns`; counted only when [`Self::commit`] follows (a write
    /// the full buffer refuses is counted once, when it is finally taken).
    pub fn classify(&mut self, now_ns: u64, offset_bytes: u64, len_bytes: u32) -> u32 {
        let r = ((offset_bytes / self.range_bytes) as usize).min(RANGES as usize - 1);
        let len = f64::from(len_bytes);
        let cur = self.ranges[r];
        let active = |x: &RangeRate| x.seen && now_ns.saturating_sub(x.at_ns) <= BURST_GAP_NS;
        let next = if active(&cur) {
            let gap = now_ns.saturating_sub(cur.at_ns) as f64;
            RangeRate {
                at_ns: now_ns,
                gap_ns: cur.gap_ns + (gap - cur.gap_ns) * RATE_WEIGHT,
                len_bytes: cur.len_bytes + (len - cur.len_bytes) * RATE_WEIGHT,
                seen: true,
            }
        } else {
            let below = r.checked_sub(1).map(|b| self.ranges[b]).filter(active);
            match below {
                Some(b) => RangeRate { at_ns: now_ns, ..b },
                None if cur.seen => RangeRate {
                    at_ns: now_ns,
                    ..cur
                },
                None => RangeRate {
                    at_ns: now_ns,
                    gap_ns: BURST_GAP_NS as f64,
                    len_bytes: len,
                    seen: true,
                },
            }
        };
        let rate = next.bytes_per_s();
        let dt = now_ns.saturating_sub(self.mean_at_ns);
        let d = (-(dt as f64) / self.half_life_ns * std::f64::consts::LN_2).exp();
        let num = self.mean_num * d + len * rate;
        let den = self.mean_den * d + len;
        self.pending = (r, next, num, den, now_ns);
        let mean = num / den.max(f64::MIN_POSITIVE);
        let ratio = rate / mean.max(f64::MIN_POSITIVE);
        let c = ratio.log2().floor() as i64 + i64::from(self.classes) - 1;
        c.clamp(0, i64::from(self.classes) - 1) as u32
    }

    /// Counts the write last classified.
    pub fn commit(&mut self) {
        let (r, next, num, den, now_ns) = self.pending;
        self.ranges[r] = next;
        self.mean_num = num;
        self.mean_den = den;
        self.mean_at_ns = now_ns.max(self.mean_at_ns);
    }
}

/// `--buffer` and its options.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BufferSpec {
    /// The buffer device: a path (real targets) or a preset (simulator).
    pub device: String,
    /// Bytes of the device used (None: all of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// Bucket size (None: the NAND drive's erase unit in the simulator, 4 MiB on real targets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_bytes: Option<u64>,
    /// Flush pacing (None: as fast as the flush slots go).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flush_rate_bytes_per_s: Option<u64>,
    pub classes: u32,
    pub half_life_ns: u64,
}

/// The bucket size used when none is given and the driver knows no erase unit.
pub const BUCKET_BYTES_DEFAULT: u64 = 4 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SegState {
    Free,
    Open,
    /// Full, waiting in the flush queue.
    Full,
    Flushing,
    /// Its free mark is being written.
    Retiring,
    /// Marked free, but not reusable yet: reads are still out, or its records are the proof
    /// that older copies in live buckets are stale (until those buckets retire too).
    Marked,
}

#[derive(Clone, Copy, Debug)]
struct Seg {
    state: SegState,
    class: u32,
    /// Next unit to fill.
    fill: u32,
    /// Units mapped to it.
    live: u32,
    /// Buffer reads in flight from it (it is not reused until they end).
    readers: u32,
    /// Older copies, in buckets not yet retired, that this bucket's records supersede.
    shadowing: u32,
    generation: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TagPhase {
    Idle,
    /// Buffer commands out (a write, or the reads of buffered runs).
    Buffer,
    /// Reading the wrapped volume; the pinned runs are read from the buffer after it.
    InnerThenOverlay,
    /// A read or flush passed to the wrapped volume as it is.
    Inner,
}

#[derive(Clone, Copy, Debug)]
struct TagState {
    io: VolIo,
    phase: TagPhase,
    pending: u32,
    result: IoResult,
}

/// A run of buffered blocks a read pinned: `units` blocks at buffer unit `slot`, at `off_units`
/// into the read.
#[derive(Clone, Copy, Debug)]
struct Pin {
    slot: u32,
    off_units: u32,
    units: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FlushPhase {
    Free,
    Reading,
    Writing,
}

#[derive(Clone, Copy, Debug)]
struct FlushRun {
    phase: FlushPhase,
    slot: u32,
    lba: u64,
    units: u32,
}

/// What the volume does before it serves I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Not yet called: decides at the first call whether to scan.
    Start,
    /// Scanning bucket `seg`, chunk `chunk`.
    Scanning {
        seg: u32,
        chunk: u32,
        inflight: bool,
    },
    Ready,
}

/// A record found by the scan.
#[derive(Clone, Copy, Debug)]
struct Found {
    slot: u32,
    generation: u64,
    seq: u64,
    lba: u64,
    units: u32,
    class: u32,
}

pub struct WriteBuffer {
    inner: AnyVolume,
    inner_out: Outputs,
    inner_cmds: u32,
    /// The buffer device's member index.
    member: u32,
    tags: u32,
    unit_bytes: u32,
    units_per_seg: u32,
    segs: Vec<Seg>,
    /// Volume block held by each buffer unit (NONE: none, or a record/header unit).
    slot_lba: Vec<u64>,
    slot_seq: Vec<u64>,
    /// For a buffer unit whose block was written again: the bucket holding the newer copy.
    superseded_by: Vec<u32>,
    map: HashMap<u64, u32>,
    open: Vec<Option<u32>>,
    free: VecDeque<u32>,
    full: VecDeque<u32>,
    retire: VecDeque<u32>,
    retiring: bool,
    generation: u64,
    seq: u64,
    // Classifier.
    classifier: Classifier,
    classes: u32,
    // Per tag.
    state: Vec<TagState>,
    pins: Vec<Vec<Pin>>,
    /// Own command ids per tag (the most buffer commands one read can need).
    per_tag: u32,
    /// The bucket of each own command in flight that reads the buffer (u32::MAX: none).
    cmd_seg: Vec<u32>,
    held: VecDeque<VolIo>,
    // Flushing.
    flushing: Option<u32>,
    cursor: u32,
    runs: [FlushRun; FLUSH_SLOTS as usize],
    inner_flush_out: bool,
    pace: Option<TokenBucket>,
    pace_wait_ns: Option<u64>,
    /// Busy queries to the data members: answers still out, and the longest busy time heard.
    busy_asking: u32,
    busy_max_ns: u64,
    /// When the last answers said every data member is busy for less than the yield limit.
    busy_clear_at_ns: Option<u64>,
    /// No flush run starts before this (a member was busy).
    busy_hold_until_ns: u64,
    /// A member could not answer: flushes no longer ask.
    busy_unsupported: bool,
    mode: Mode,
    /// The scan could not read the buffer: every I/O fails rather than return stale data.
    failed: bool,
    found: Vec<Found>,
    /// The scan's records of retired buckets: (block, sequence, bucket).
    retired: Vec<(u64, u64, u32)>,
    /// Blocks buffered per class now.
    class_live: [u64; CLASSES_MAX as usize],
    size_bytes: u64,
    scratch_bytes: u32,
    stats: Stats,
}

#[derive(Clone, Debug, Default)]
struct Stats {
    writes: u64,
    write_units: u64,
    absorbed_units: u64,
    read_units: u64,
    read_hit_units: u64,
    flushed_bytes: u64,
    flush_runs: u64,
    buckets_flushed: u64,
    buckets_absorbed: u64,
    held_writes: u64,
    /// Flush runs put off because a data member was busy.
    flush_yields: u64,
    first_flush_ns: Option<u64>,
    last_flush_ns: u64,
    class_writes: [u64; CLASSES_MAX as usize],
    class_live_max: [u64; CLASSES_MAX as usize],
    recovered_records: u64,
    recovered_units: u64,
}

fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl WriteBuffer {
    /// A buffer on a member of `buffer_member_bytes` in front of `inner` (built for
    /// `tags + FLUSH_SLOTS + 1` tags and runs of up to [`FLUSH_IO_BYTES`]).
    pub fn new(
        inner: AnyVolume,
        spec: &BufferSpec,
        buffer_member_bytes: u64,
        block_bytes: u32,
        tags: u32,
        len_bytes_max: u32,
    ) -> Result<WriteBuffer, ArrayError> {
        let unit = inner.block_bytes().max(block_bytes).max(512);
        let size = spec.size_bytes.unwrap_or(buffer_member_bytes);
        if size > buffer_member_bytes {
            return Err(ArrayError::Invalid(format!(
                "--buffer-size {size} is larger than the buffer device ({buffer_member_bytes} bytes); give a smaller --buffer-size"
            )));
        }
        let bucket = spec.bucket_bytes.unwrap_or(BUCKET_BYTES_DEFAULT);
        let need = u64::from(len_bytes_max) + u64::from(unit);
        if bucket < need + u64::from(unit) || !bucket.is_multiple_of(u64::from(unit)) {
            return Err(ArrayError::Invalid(format!(
                "--buffer-bucket {bucket} must be a multiple of the {unit}-byte block and hold the \
                 largest write with its record and the bucket header ({} bytes)",
                need + u64::from(unit)
            )));
        }
        if !(1..=CLASSES_MAX).contains(&spec.classes) {
            return Err(ArrayError::Invalid(format!(
                "--buffer-classes {}: give 1 to {CLASSES_MAX}",
                spec.classes
            )));
        }
        let n_segs = size / bucket;
        let min_segs = u64::from(spec.classes) + 2;
        if n_segs < min_segs {
            return Err(ArrayError::Invalid(format!(
                "--buffer-size {size} holds {n_segs} buckets of {bucket} bytes; the buffer needs \
                 at least {min_segs} ({} classes open, one flushing, one free): give a larger \
                 --buffer-size or a smaller --buffer-bucket",
                spec.classes
            )));
        }
        if spec.half_life_ns == 0 {
            return Err(ArrayError::Invalid(
                "--buffer-half-life must be positive, e.g. 10s".into(),
            ));
        }
        let units_per_seg = (bucket / u64::from(unit)) as u32;
        let slots = n_segs as usize * units_per_seg as usize;
        if slots > u32::MAX as usize / 2 {
            return Err(ArrayError::Invalid(format!(
                "the buffer has {slots} blocks, more than this policy indexes; give a smaller --buffer-size"
            )));
        }
        let inner_cmds = inner.cmds_max();
        let per_tag = len_bytes_max.div_ceil(unit) + 1;
        let own = u64::from(tags) * u64::from(per_tag)
            + u64::from(FLUSH_SLOTS)
            + 1
            + u64::from(inner.members());
        if u64::from(inner_cmds) + own > u64::from(u32::MAX / 2) {
            return Err(ArrayError::Invalid(
                "the buffered volume would need too many commands in flight; lower --iodepth"
                    .into(),
            ));
        }
        let size_bytes = inner.size_bytes();
        let range_bytes = size_bytes.div_ceil(RANGES).max(u64::from(unit));
        let scratch_bytes = (len_bytes_max + unit).max(FLUSH_IO_BYTES);
        let idle = TagState {
            io: VolIo {
                tag: 0,
                op: VolOp::Read,
                offset_bytes: 0,
                len_bytes: 0,
                fua: false,
            },
            phase: TagPhase::Idle,
            pending: 0,
            result: IoResult::Ok,
        };
        let seg = Seg {
            state: SegState::Free,
            class: 0,
            fill: 1,
            live: 0,
            readers: 0,
            shadowing: 0,
            generation: 0,
        };
        Ok(WriteBuffer {
            inner_out: Outputs::with_capacity(2 * inner.outputs_max() + 2),
            member: inner.members(),
            inner_cmds,
            tags,
            unit_bytes: unit,
            units_per_seg,
            segs: vec![seg; n_segs as usize],
            slot_lba: vec![NONE; slots],
            slot_seq: vec![0; slots],
            superseded_by: vec![u32::MAX; slots],
            map: HashMap::with_capacity(2 * slots),
            open: vec![None; spec.classes as usize],
            free: (0..n_segs as u32).collect(),
            full: VecDeque::with_capacity(n_segs as usize),
            retire: VecDeque::with_capacity(n_segs as usize),
            retiring: false,
            generation: 1,
            seq: 1,
            classifier: Classifier::new(range_bytes, spec.classes, spec.half_life_ns),
            classes: spec.classes,
            state: vec![idle; tags as usize],
            pins: (0..tags)
                .map(|_| Vec::with_capacity(per_tag as usize))
                .collect(),
            per_tag,
            cmd_seg: vec![u32::MAX; own as usize],
            held: VecDeque::with_capacity(tags as usize),
            flushing: None,
            cursor: 0,
            runs: [FlushRun {
                phase: FlushPhase::Free,
                slot: 0,
                lba: 0,
                units: 0,
            }; FLUSH_SLOTS as usize],
            inner_flush_out: false,
            pace: spec
                .flush_rate_bytes_per_s
                .map(|r| TokenBucket::new(r, u64::from(FLUSH_IO_BYTES))),
            pace_wait_ns: None,
            busy_asking: 0,
            busy_max_ns: 0,
            busy_clear_at_ns: None,
            busy_hold_until_ns: 0,
            busy_unsupported: false,
            mode: Mode::Start,
            failed: false,
            class_live: [0; CLASSES_MAX as usize],
            found: Vec::with_capacity(units_per_seg as usize),
            retired: Vec::new(),
            size_bytes,
            scratch_bytes,
            stats: Stats::default(),
            inner,
        })
    }

    // ---- ids, buffers, addresses ----

    fn tag_cmd(&self, tag: u32, k: u32) -> u32 {
        self.inner_cmds + tag * self.per_tag + k
    }
    fn flush_cmd(&self, i: u32) -> u32 {
        self.inner_cmds + self.tags * self.per_tag + i
    }
    fn header_cmd(&self) -> u32 {
        self.flush_cmd(FLUSH_SLOTS)
    }
    /// The busy query to data member `m`.
    fn query_cmd(&self, m: u32) -> u32 {
        self.flush_cmd(FLUSH_SLOTS + 1 + m)
    }
    fn flush_scratch(&self, i: u32) -> BufRef {
        BufRef::Scratch {
            index: self.tags + i,
            offset: 0,
        }
    }
    fn slot_offset(&self, slot: u32) -> u64 {
        u64::from(slot) * u64::from(self.unit_bytes)
    }
    fn seg_of(&self, slot: u32) -> u32 {
        slot / self.units_per_seg
    }

    fn buffer_cmd(&self, id: u32, op: CmdOp, slot: u32, units: u32, buf: BufRef) -> MemberCmd {
        MemberCmd {
            id,
            member: self.member,
            op,
            offset_bytes: self.slot_offset(slot),
            len_bytes: units * self.unit_bytes,
            buf,
            fua: false,
        }
    }

    // ---- mapping ----

    /// Drops the mapping of buffer unit `slot` (overwritten or flushed).
    fn unmap_slot(&mut self, slot: u32) {
        self.slot_lba[slot as usize] = NONE;
        let s = self.seg_of(slot);
        let seg = &mut self.segs[s as usize];
        assert!(seg.live > 0, "a bucket's live count went below zero");
        seg.live -= 1;
        self.class_live[seg.class as usize] -= 1;
        if seg.live == 0 && seg.state == SegState::Full {
            // Every block of a full bucket was overwritten: retire it without flushing.
            self.stats.buckets_absorbed += 1;
            if let Some(p) = self.full.iter().position(|&x| x == s) {
                self.full.remove(p);
            }
            self.segs[s as usize].state = SegState::Retiring;
            self.retire.push_back(s);
        }
    }

    fn map_unit(&mut self, lba: u64, slot: u32, seq: u64) {
        let s = self.seg_of(slot);
        if let Some(old) = self.map.insert(lba, slot) {
            self.stats.absorbed_units += 1;
            self.shadow(old, s);
            self.unmap_slot(old);
        }
        self.slot_lba[slot as usize] = lba;
        self.slot_seq[slot as usize] = seq;
        let s = s as usize;
        self.segs[s].live += 1;
        let c = self.segs[s].class as usize;
        self.class_live[c] += 1;
        self.stats.class_live_max[c] = self.stats.class_live_max[c].max(self.class_live[c]);
    }

    /// Records that bucket `by` holds a newer copy of the block at buffer unit `old`: `by` is
    /// not reused before `old`'s bucket is retired, so a restart never replays `old`.
    fn shadow(&mut self, old: u32, by: u32) {
        if self.superseded_by[old as usize] == u32::MAX {
            self.superseded_by[old as usize] = by;
            self.segs[by as usize].shadowing += 1;
        }
    }

    /// A marked bucket joins the free list once nothing holds it.
    fn try_release(&mut self, s: u32) {
        let seg = &mut self.segs[s as usize];
        if seg.state == SegState::Marked && seg.readers == 0 && seg.shadowing == 0 {
            seg.state = SegState::Free;
            self.free.push_back(s);
        }
    }

    fn close(&mut self, s: u32) {
        let seg = &mut self.segs[s as usize];
        self.open[seg.class as usize] = None;
        if seg.live == 0 {
            seg.state = SegState::Retiring;
            self.stats.buckets_absorbed += 1;
            self.retire.push_back(s);
        } else {
            seg.state = SegState::Full;
            self.full.push_back(s);
        }
    }

    /// A bucket of class `c` with room for `units`, opening one if needed.
    fn room(&mut self, c: u32, units: u32) -> Option<u32> {
        if let Some(s) = self.open[c as usize] {
            if self.segs[s as usize].fill + units <= self.units_per_seg {
                return Some(s);
            }
            self.close(s);
        }
        let Some(s) = self.free.pop_front() else {
            // Full. When nothing is left to flush, close every open bucket so that flushing can
            // make room (a cold class's bucket may hold the copies that keep retired buckets
            // from being reused).
            if self.flushing.is_none() && self.full.is_empty() {
                for c in 0..self.open.len() {
                    if let Some(o) = self.open[c] {
                        self.close(o);
                    }
                }
            }
            return None;
        };
        let g = self.generation;
        self.generation += 1;
        self.segs[s as usize] = Seg {
            state: SegState::Open,
            class: c,
            fill: 1,
            live: 0,
            readers: 0,
            shadowing: 0,
            generation: g,
        };
        self.open[c as usize] = Some(s);
        Some(s)
    }

    // ---- client I/O ----

    /// Starts a client I/O; false when it is a write the full buffer cannot take yet.
    fn start(&mut self, now_ns: u64, io: VolIo, cx: &mut Cx) -> bool {
        match io.op {
            VolOp::Write => return self.write(now_ns, io, cx),
            VolOp::Read => self.read(now_ns, io, cx),
            VolOp::Flush => {
                // Completed writes are on the buffer device: make them durable there.
                let st = &mut self.state[io.tag as usize];
                *st = TagState {
                    io,
                    phase: TagPhase::Buffer,
                    pending: 1,
                    result: IoResult::Ok,
                };
                let c = MemberCmd {
                    fua: false,
                    ..self.buffer_cmd(self.tag_cmd(io.tag, 0), CmdOp::Flush, 0, 0, BufRef::None)
                };
                cx.out.cmd(c);
            }
            VolOp::Trim | VolOp::WriteZeroes => cx.out.done(io.tag, IoResult::Err(EOPNOTSUPP)),
        }
        true
    }

    fn write(&mut self, now_ns: u64, io: VolIo, cx: &mut Cx) -> bool {
        let unit = self.unit_bytes;
        debug_assert!(
            io.len_bytes.is_multiple_of(unit) && io.offset_bytes.is_multiple_of(u64::from(unit))
        );
        let units = io.len_bytes / unit;
        let mut c = self
            .classifier
            .classify(now_ns, io.offset_bytes, io.len_bytes);
        // A block written again while buffered stays in its buffered copy's class: the newer
        // copy then lands in a bucket of that class opened later, which retires after the
        // older one (a class's buckets flush in order). In another class's bucket it could
        // retire first and, holding the proof that the older copy is stale (`shadowing`),
        // stay out of use until the older bucket retired: one stray write could keep a whole
        // bucket from reuse for minutes (bench (c): 6 of 16 buckets, 11,427 held writes).
        let lba0 = io.offset_bytes / u64::from(unit);
        if let Some(&slot) = (0..u64::from(units)).find_map(|i| self.map.get(&(lba0 + i))) {
            c = self.segs[self.seg_of(slot) as usize].class;
        }
        let Some(s) = self.room(c, units + 1) else {
            // The buffer is full: the write waits for a bucket to be flushed.
            return false;
        };
        self.classifier.commit();
        let first = s * self.units_per_seg + self.segs[s as usize].fill;
        self.segs[s as usize].fill += units + 1;
        let seq = self.seq;
        self.seq += 1;
        for i in 0..units {
            self.map_unit(lba0 + u64::from(i), first + 1 + i, seq);
        }
        self.stats.writes += 1;
        self.stats.write_units += u64::from(units);
        self.stats.class_writes[c as usize] += 1;
        // The record, then the client's bytes after it, in the tag's scratch buffer.
        let scratch = BufRef::Scratch {
            index: io.tag,
            offset: 0,
        };
        if cx.data.has_data() {
            let mut rec = [0u8; REC_BYTES];
            let generation = self.segs[s as usize].generation;
            rec[0..8].copy_from_slice(&REC_MAGIC.to_le_bytes());
            rec[8..16].copy_from_slice(&generation.to_le_bytes());
            rec[16..24].copy_from_slice(&seq.to_le_bytes());
            rec[24..32].copy_from_slice(&lba0.to_le_bytes());
            rec[32..36].copy_from_slice(&units.to_le_bytes());
            rec[36..40].copy_from_slice(&c.to_le_bytes());
            rec[40..44].copy_from_slice(&unit.to_le_bytes());
            rec[44..48].copy_from_slice(&self.units_per_seg.to_le_bytes());
            let sum = fnv(&rec[..56]);
            rec[56..64].copy_from_slice(&sum.to_le_bytes());
            cx.data.zero(scratch, unit);
            cx.data.write_bytes(scratch, &rec);
            cx.data.copy(
                BufRef::Scratch {
                    index: io.tag,
                    offset: unit,
                },
                BufRef::Client {
                    tag: io.tag,
                    offset: 0,
                },
                io.len_bytes,
            );
        }
        self.state[io.tag as usize] = TagState {
            io,
            phase: TagPhase::Buffer,
            pending: 1,
            result: IoResult::Ok,
        };
        let mut cmd = self.buffer_cmd(
            self.tag_cmd(io.tag, 0),
            CmdOp::Write,
            first,
            units + 1,
            scratch,
        );
        cmd.fua = io.fua;
        cx.out.cmd(cmd);
        true
    }

    fn read(&mut self, now_ns: u64, io: VolIo, cx: &mut Cx) {
        let unit = self.unit_bytes;
        let units = io.len_bytes / unit;
        let lba0 = io.offset_bytes / u64::from(unit);
        let tag = io.tag as usize;
        let mut pins = std::mem::take(&mut self.pins[tag]);
        pins.clear();
        let mut hit = 0u32;
        for i in 0..units {
            if let Some(&slot) = self.map.get(&(lba0 + u64::from(i))) {
                hit += 1;
                match pins.last_mut() {
                    Some(p)
                        if p.slot + p.units == slot
                            && p.off_units + p.units == i
                            && self.seg_of(slot) == self.seg_of(p.slot) =>
                    {
                        p.units += 1
                    }
                    _ => pins.push(Pin {
                        slot,
                        off_units: i,
                        units: 1,
                    }),
                }
            }
        }
        self.stats.read_units += u64::from(units);
        self.stats.read_hit_units += u64::from(hit);
        for p in &pins {
            let seg = p.slot / self.units_per_seg;
            self.segs[seg as usize].readers += 1;
        }
        self.pins[tag] = pins;
        if hit == 0 {
            self.state[tag] = TagState {
                io,
                phase: TagPhase::Inner,
                pending: 0,
                result: IoResult::Ok,
            };
            self.inner_submit(now_ns, io, cx);
        } else if hit == units {
            self.state[tag] = TagState {
                io,
                phase: TagPhase::Buffer,
                pending: 0,
                result: IoResult::Ok,
            };
            self.read_pins(io.tag, cx);
        } else {
            self.state[tag] = TagState {
                io,
                phase: TagPhase::InnerThenOverlay,
                pending: 0,
                result: IoResult::Ok,
            };
            self.inner_submit(now_ns, io, cx);
        }
    }

    /// Reads a tag's pinned runs from the buffer into its client buffer.
    fn read_pins(&mut self, tag: u32, cx: &mut Cx) {
        let n = self.pins[tag as usize].len() as u32;
        self.state[tag as usize].phase = TagPhase::Buffer;
        self.state[tag as usize].pending = n;
        for k in 0..n {
            let p = self.pins[tag as usize][k as usize];
            let id = self.tag_cmd(tag, k);
            self.cmd_seg[(id - self.inner_cmds) as usize] = self.seg_of(p.slot);
            let buf = BufRef::Client {
                tag,
                offset: p.off_units * self.unit_bytes,
            };
            let c = self.buffer_cmd(id, CmdOp::Read, p.slot, p.units, buf);
            cx.out.cmd(c);
        }
    }

    fn inner_submit(&mut self, now_ns: u64, io: VolIo, cx: &mut Cx) {
        self.inner.submit(
            now_ns,
            io,
            &mut Cx {
                out: &mut self.inner_out,
                data: cx.data,
            },
        );
    }

    fn finish(&mut self, tag: u32, cx: &mut Cx) {
        let st = self.state[tag as usize];
        self.state[tag as usize].phase = TagPhase::Idle;
        cx.out.done(tag, st.result);
    }

    /// A bucket's reader ended: a retired bucket may now be reused.
    fn reader_done(&mut self, s: u32) {
        self.segs[s as usize].readers -= 1;
        self.try_release(s);
    }

    // ---- the wrapped volume's outputs ----

    fn forward(&mut self, now_ns: u64, cx: &mut Cx) {
        // Bounded: each Done ends an I/O of a finite set (client tags, flush runs).
        while let Some(o) = self.inner_out.pop() {
            match o {
                Output::Cmd(mut c) => {
                    if let BufRef::Client { tag, offset } = c.buf
                        && tag >= self.tags
                    {
                        c.buf = BufRef::Scratch { index: tag, offset };
                    }
                    cx.out.cmd(c);
                }
                Output::Done(d) if d.tag < self.tags => {
                    let t = d.tag as usize;
                    if d.result != IoResult::Ok {
                        self.state[t].result = d.result;
                    }
                    match self.state[t].phase {
                        TagPhase::InnerThenOverlay if self.state[t].result == IoResult::Ok => {
                            self.read_pins(d.tag, cx)
                        }
                        _ => {
                            self.unpin(d.tag);
                            self.finish(d.tag, cx);
                        }
                    }
                }
                Output::Done(d) => {
                    let i = d.tag - self.tags;
                    if i == FLUSH_SLOTS {
                        self.inner_flush_out = false;
                        self.bucket_flushed(now_ns, d.result, cx);
                    } else {
                        self.run_written(i, d.result);
                    }
                }
            }
        }
    }

    fn unpin(&mut self, tag: u32) {
        let n = self.pins[tag as usize].len();
        for k in 0..n {
            let s = self.seg_of(self.pins[tag as usize][k].slot);
            self.reader_done(s);
        }
        self.pins[tag as usize].clear();
    }

    // ---- flushing ----

    /// Starts what flushing can start now: the next bucket, runs of it, retirements.
    fn pump(&mut self, now_ns: u64, cx: &mut Cx) {
        self.pace_wait_ns = None;
        if !self.retiring
            && let Some(s) = self.retire.pop_front()
        {
            self.write_free_mark(s, cx);
        }
        if self.flushing.is_none() {
            // Write-back: full buckets stay buffered (read hits, absorbed rewrites) while more
            // than FLUSH_LOW_FREE buckets are free and no write waits for room.
            if self.free.len() > FLUSH_LOW_FREE && self.held.is_empty() {
                return;
            }
            let Some(s) = self.full.pop_front() else {
                return;
            };
            self.segs[s as usize].state = SegState::Flushing;
            self.flushing = Some(s);
            self.cursor = 1;
            if self.stats.first_flush_ns.is_none() {
                self.stats.first_flush_ns = Some(now_ns);
            }
        }
        let s = self.flushing.expect("a bucket is flushing");
        // Bounded: each pass starts a run in a free slot or stops.
        for i in 0..FLUSH_SLOTS {
            if self.runs[i as usize].phase != FlushPhase::Free {
                continue;
            }
            let Some((slot, lba, units)) = self.next_run(s) else {
                break;
            };
            if !self.members_quiet(now_ns, cx) {
                break;
            }
            let bytes = u64::from(units * self.unit_bytes);
            if let Some(p) = self.pace.as_mut()
                && !p.try_take(now_ns, bytes)
            {
                self.pace_wait_ns = Some(p.ready_at_ns(bytes));
                break;
            }
            self.busy_clear_at_ns = None;
            self.cursor = slot - s * self.units_per_seg + units;
            self.runs[i as usize] = FlushRun {
                phase: FlushPhase::Reading,
                slot,
                lba,
                units,
            };
            self.segs[s as usize].readers += 1;
            let c = self.buffer_cmd(
                self.flush_cmd(i),
                CmdOp::Read,
                slot,
                units,
                self.flush_scratch(i),
            );
            cx.out.cmd(c);
        }
        let idle = self.runs.iter().all(|r| r.phase == FlushPhase::Free);
        if idle && self.next_run(s).is_none() && !self.inner_flush_out {
            // Every live block of the bucket is on the wrapped volume: make it durable there.
            self.inner_flush_out = true;
            let io = VolIo {
                tag: self.tags + FLUSH_SLOTS,
                op: VolOp::Flush,
                offset_bytes: 0,
                len_bytes: 0,
                fua: false,
            };
            self.inner_submit(now_ns, io, cx);
        }
    }

    /// Whether a flush run may start now as far as the data members' own work goes: true when
    /// they answered just now that none stays busy longer than [`FLUSH_YIELD_BUSY_NS`], when
    /// they cannot answer, or when room is short (a write waits, or fewer than
    /// [`FLUSH_LOW_FREE`] buckets are free). Otherwise asks them (or waits for the answer, or
    /// for the busy time they gave to pass) and says false.
    fn members_quiet(&mut self, now_ns: u64, cx: &mut Cx) -> bool {
        if self.busy_unsupported
            || self.member == 0
            || !self.held.is_empty()
            || self.free.len() < FLUSH_LOW_FREE
            || self.busy_clear_at_ns == Some(now_ns)
        {
            return true;
        }
        if self.busy_asking > 0 {
            return false;
        }
        if now_ns < self.busy_hold_until_ns {
            self.pace_wait_ns = Some(self.busy_hold_until_ns);
            return false;
        }
        self.busy_asking = self.member;
        self.busy_max_ns = 0;
        // Bounded: one query per data member.
        for m in 0..self.member {
            cx.out.cmd(MemberCmd {
                id: self.query_cmd(m),
                member: m,
                op: CmdOp::Control(Control::QueryBusy),
                offset_bytes: 0,
                len_bytes: 0,
                buf: BufRef::None,
                fua: false,
            });
        }
        false
    }

    /// A data member answered a busy query.
    fn busy_answer(&mut self, now_ns: u64, r: CmdResult) {
        self.busy_asking = self.busy_asking.saturating_sub(1);
        match r {
            CmdResult::Busy { remaining_ns } => {
                self.busy_max_ns = self.busy_max_ns.max(remaining_ns)
            }
            // A member without the query (real devices refuse it or do nothing).
            CmdResult::Ok | CmdResult::Err(_) | CmdResult::Appended { .. } => {
                self.busy_unsupported = true
            }
        }
        if self.busy_asking == 0 {
            if self.busy_max_ns > FLUSH_YIELD_BUSY_NS {
                self.stats.flush_yields += 1;
                // Ask again when that work is down to the limit (at least 100 us on).
                self.busy_hold_until_ns =
                    now_ns + (self.busy_max_ns - FLUSH_YIELD_BUSY_NS).max(100_000);
            } else {
                self.busy_clear_at_ns = Some(now_ns);
            }
        }
    }

    /// The next run of live, contiguous blocks of bucket `s` from the cursor.
    fn next_run(&self, s: u32) -> Option<(u32, u64, u32)> {
        let base = s * self.units_per_seg;
        let max_units = FLUSH_IO_BYTES / self.unit_bytes;
        let mut i = self.cursor;
        while i < self.units_per_seg && self.slot_lba[(base + i) as usize] == NONE {
            i += 1;
        }
        if i >= self.units_per_seg {
            return None;
        }
        let slot = base + i;
        let lba = self.slot_lba[slot as usize];
        let mut n = 1;
        while i + n < self.units_per_seg
            && n < max_units
            && self.slot_lba[(slot + n) as usize] == lba + u64::from(n)
        {
            n += 1;
        }
        Some((slot, lba, n))
    }

    fn run_read(&mut self, now_ns: u64, i: u32, r: CmdResult, cx: &mut Cx) {
        let run = self.runs[i as usize];
        let s = self.seg_of(run.slot);
        self.reader_done(s);
        if r != CmdResult::Ok {
            // The buffer could not be read: leave the blocks mapped; the bucket is retried.
            self.runs[i as usize].phase = FlushPhase::Free;
            self.flush_failed(s);
            return;
        }
        self.runs[i as usize].phase = FlushPhase::Writing;
        let io = VolIo {
            tag: self.tags + i,
            op: VolOp::Write,
            offset_bytes: run.lba * u64::from(self.unit_bytes),
            len_bytes: run.units * self.unit_bytes,
            fua: false,
        };
        self.inner_submit(now_ns, io, cx);
    }

    fn run_written(&mut self, i: u32, r: IoResult) {
        let run = self.runs[i as usize];
        self.runs[i as usize].phase = FlushPhase::Free;
        let s = self.seg_of(run.slot);
        if r != IoResult::Ok {
            self.flush_failed(s);
            return;
        }
        self.stats.flushed_bytes += u64::from(run.units * self.unit_bytes);
        self.stats.flush_runs += 1;
        for k in 0..run.units {
            let slot = run.slot + k;
            let lba = run.lba + u64::from(k);
            // Only if no newer write of the block arrived meanwhile.
            if self.map.get(&lba) == Some(&slot) {
                self.map.remove(&lba);
                self.slot_lba[slot as usize] = NONE;
                self.segs[s as usize].live -= 1;
                self.class_live[self.segs[s as usize].class as usize] -= 1;
            }
        }
    }

    /// A run failed: the bucket goes back to the end of the queue with its blocks still mapped.
    fn flush_failed(&mut self, s: u32) {
        if self.flushing == Some(s) {
            self.cursor = 1;
        }
    }

    fn bucket_flushed(&mut self, now_ns: u64, r: IoResult, cx: &mut Cx) {
        let Some(s) = self.flushing else {
            return;
        };
        if r != IoResult::Ok || self.segs[s as usize].live > 0 {
            // Not all of it reached the wrapped volume (an error): go over it again.
            self.cursor = 1;
            return;
        }
        self.flushing = None;
        self.stats.buckets_flushed += 1;
        self.stats.last_flush_ns = now_ns;
        self.segs[s as usize].state = SegState::Retiring;
        self.retire.push_back(s);
        let _ = cx;
    }

    /// Writes bucket `s`'s free mark (its generation), so a restart ignores its records.
    fn write_free_mark(&mut self, s: u32, cx: &mut Cx) {
        self.retiring = true;
        let buf = self.flush_scratch(FLUSH_SLOTS);
        if cx.data.has_data() {
            let mut h = [0u8; REC_BYTES];
            h[0..8].copy_from_slice(&FREE_MAGIC.to_le_bytes());
            h[8..16].copy_from_slice(&self.segs[s as usize].generation.to_le_bytes());
            let sum = fnv(&h[..56]);
            h[56..64].copy_from_slice(&sum.to_le_bytes());
            cx.data.zero(buf, self.unit_bytes);
            cx.data.write_bytes(buf, &h);
        }
        let c = self.buffer_cmd(
            self.header_cmd(),
            CmdOp::Write,
            s * self.units_per_seg,
            1,
            buf,
        );
        let k = (self.header_cmd() - self.inner_cmds) as usize;
        self.cmd_seg[k] = s;
        cx.out.cmd(c);
    }

    fn free_marked(&mut self, r: CmdResult) {
        self.retiring = false;
        let s = self.cmd_seg[(self.header_cmd() - self.inner_cmds) as usize];
        if r != CmdResult::Ok {
            // Retry later: the bucket stays out of use.
            self.retire.push_back(s);
            return;
        }
        self.segs[s as usize].state = SegState::Marked;
        // Its records no longer map anything, and no longer need shadowing.
        let base = s * self.units_per_seg;
        for slot in base..base + self.units_per_seg {
            self.slot_lba[slot as usize] = NONE;
            let by = std::mem::replace(&mut self.superseded_by[slot as usize], u32::MAX);
            if by != u32::MAX {
                self.segs[by as usize].shadowing -= 1;
                self.try_release(by);
            }
        }
        self.try_release(s);
    }

    /// Starts I/Os held by the scan or by a full buffer, in order, while they can start.
    fn unhold(&mut self, now_ns: u64, cx: &mut Cx) {
        // Bounded by the held queue (at most one I/O per tag).
        while let Some(io) = self.held.pop_front() {
            if !self.start(now_ns, io, cx) {
                // Still no room: back to the front, in order.
                self.held.push_front(io);
                break;
            }
        }
    }

    // ---- restart scan ----

    fn scan_chunk_units(&self) -> u32 {
        (FLUSH_IO_BYTES / self.unit_bytes).min(self.units_per_seg)
    }

    fn scan_next(&mut self, cx: &mut Cx) {
        let Mode::Scanning { seg, chunk, .. } = self.mode else {
            return;
        };
        if seg as usize >= self.segs.len() {
            self.scan_finish();
            return;
        }
        let per = self.scan_chunk_units();
        let first = chunk * per;
        let units = per.min(self.units_per_seg - first);
        self.mode = Mode::Scanning {
            seg,
            chunk,
            inflight: true,
        };
        let c = self.buffer_cmd(
            self.flush_cmd(0),
            CmdOp::Read,
            seg * self.units_per_seg + first,
            units,
            self.flush_scratch(0),
        );
        cx.out.cmd(c);
    }

    fn scan_read(&mut self, r: CmdResult, cx: &mut Cx) {
        let Mode::Scanning { seg, chunk, .. } = self.mode else {
            return;
        };
        if r != CmdResult::Ok {
            // An unreadable buffer: serve nothing rather than stale data.
            self.mode = Mode::Ready;
            self.failed = true;
            return;
        }
        let per = self.scan_chunk_units();
        let first = chunk * per;
        let units = per.min(self.units_per_seg - first);
        let mut rec = [0u8; REC_BYTES];
        for u in 0..units {
            cx.data.read_bytes(
                BufRef::Scratch {
                    index: self.tags,
                    offset: u * self.unit_bytes,
                },
                &mut rec,
            );
            let word = |a: usize| u64::from_le_bytes(rec[a..a + 8].try_into().expect("8 bytes"));
            let half = |a: usize| u32::from_le_bytes(rec[a..a + 4].try_into().expect("4 bytes"));
            if word(56) != fnv(&rec[..56]) {
                continue;
            }
            let slot = seg * self.units_per_seg + first + u;
            if word(0) == FREE_MAGIC && first + u == 0 {
                // The bucket's free mark: records of this generation or older are void.
                self.segs[seg as usize].generation = word(8);
                self.segs[seg as usize].state = SegState::Marked;
            } else if word(0) == REC_MAGIC
                && half(40) == self.unit_bytes
                && half(44) == self.units_per_seg
            {
                let units_rec = half(32);
                let in_seg = first + u + 1 + units_rec <= self.units_per_seg;
                if in_seg && half(36) < self.classes {
                    self.found.push(Found {
                        slot,
                        generation: word(8),
                        seq: word(16),
                        lba: word(24),
                        units: units_rec,
                        class: half(36),
                    });
                }
            }
        }
        if first + units < self.units_per_seg {
            self.mode = Mode::Scanning {
                seg,
                chunk: chunk + 1,
                inflight: false,
            };
        } else {
            self.scan_apply(seg);
            self.mode = Mode::Scanning {
                seg: seg + 1,
                chunk: 0,
                inflight: false,
            };
        }
        self.scan_next(cx);
    }

    /// Replays the records of bucket `s`'s newest generation; a retired bucket's records only
    /// tell which older copies elsewhere are stale.
    fn scan_apply(&mut self, s: u32) {
        let marked = self.segs[s as usize].state == SegState::Marked;
        let freed_gen = if marked {
            self.segs[s as usize].generation
        } else {
            0
        };
        let newest = self.found.iter().map(|f| f.generation).max().unwrap_or(0);
        self.generation = self.generation.max(newest + 1).max(freed_gen + 1);
        let blocks = self.size_bytes / u64::from(self.unit_bytes);
        let total = self.units_per_seg as usize * self.segs.len();
        let found = std::mem::take(&mut self.found);
        for f in &found {
            self.seq = self.seq.max(f.seq + 1);
        }
        if marked && newest <= freed_gen {
            for f in found.iter().filter(|f| f.generation == freed_gen) {
                for k in 0..f.units {
                    self.retired.push((f.lba + u64::from(k), f.seq, s));
                }
            }
            self.found = found;
            self.found.clear();
            return;
        }
        self.segs[s as usize].state = SegState::Free;
        if newest == 0 {
            self.found = found;
            self.found.clear();
            return;
        }
        let mut fill = 1;
        let mut class = 0;
        self.segs[s as usize].generation = newest;
        for f in found.iter().filter(|f| f.generation == newest) {
            self.stats.recovered_records += 1;
            fill = fill.max(f.slot - s * self.units_per_seg + 1 + f.units);
            class = f.class;
            self.segs[s as usize].class = f.class;
            for k in 0..f.units {
                let lba = f.lba + u64::from(k);
                let slot = f.slot + 1 + k;
                if slot as usize >= total || lba >= blocks {
                    continue;
                }
                match self.map.get(&lba) {
                    Some(&o) if self.slot_seq[o as usize] > f.seq => {
                        // A newer copy was found already: this one is stale.
                        let by = self.seg_of(o);
                        self.shadow(slot, by);
                    }
                    _ => {
                        // map_unit counts replaced blocks as absorbed; a scan is not a workload.
                        let absorbed = self.stats.absorbed_units;
                        self.map_unit(lba, slot, f.seq);
                        self.stats.absorbed_units = absorbed;
                    }
                }
            }
        }
        self.found = found;
        self.found.clear();
        let seg = &mut self.segs[s as usize];
        seg.class = class;
        seg.fill = fill;
        seg.state = SegState::Full;
    }

    fn scan_finish(&mut self) {
        // Live copies older than a retired bucket's copy are stale: the wrapped volume has the
        // newer data. They stay shadowed by the retired bucket until their own bucket retires.
        let retired = std::mem::take(&mut self.retired);
        for &(lba, seq, by) in &retired {
            if let Some(&slot) = self.map.get(&lba)
                && self.slot_seq[slot as usize] < seq
            {
                self.map.remove(&lba);
                self.shadow(slot, by);
                self.unmap_slot(slot);
            }
        }
        let mut live: Vec<u32> = (0..self.segs.len() as u32)
            .filter(|&s| self.segs[s as usize].state == SegState::Full)
            .collect();
        live.sort_by_key(|&s| self.segs[s as usize].generation);
        self.full.clear();
        self.free.clear();
        self.recovered_units_now();
        for s in live {
            if self.segs[s as usize].live == 0 {
                self.segs[s as usize].state = SegState::Retiring;
                self.retire.push_back(s);
            } else {
                self.full.push_back(s);
            }
        }
        for s in 0..self.segs.len() as u32 {
            match self.segs[s as usize].state {
                SegState::Free => self.free.push_back(s),
                SegState::Marked => self.try_release(s),
                _ => {}
            }
        }
        self.mode = Mode::Ready;
    }

    fn recovered_units_now(&mut self) {
        self.stats.recovered_units = self.map.len() as u64;
    }

    /// Moves the first call into the scan (real bytes) or straight to serving (simulator).
    fn begin(&mut self, cx: &mut Cx) {
        if self.mode != Mode::Start {
            return;
        }
        if cx.data.has_data() {
            self.mode = Mode::Scanning {
                seg: 0,
                chunk: 0,
                inflight: false,
            };
            self.scan_next(cx);
        } else {
            self.mode = Mode::Ready;
        }
    }

    fn ready(&self) -> bool {
        self.mode == Mode::Ready
    }

    /// After any event: serve I/Os held by the scan, flush, retry held writes.
    fn after(&mut self, now_ns: u64, cx: &mut Cx) {
        if !self.ready() {
            return;
        }
        if self.failed {
            // Bounded: one held I/O per tag.
            while let Some(io) = self.held.pop_front() {
                cx.out.done(io.tag, IoResult::Err(EIO));
            }
            return;
        }
        self.unhold(now_ns, cx);
        self.forward(now_ns, cx);
        self.pump(now_ns, cx);
        self.forward(now_ns, cx);
    }

    fn own_done(&mut self, now_ns: u64, done: CmdDone, cx: &mut Cx) {
        let k = done.id - self.inner_cmds;
        if k < self.tags * self.per_tag {
            let tag = k / self.per_tag;
            let st = &mut self.state[tag as usize];
            assert!(st.pending > 0, "a buffer command completed twice");
            st.pending -= 1;
            if done.result != CmdResult::Ok && st.result == IoResult::Ok {
                st.result = match done.result {
                    CmdResult::Err(e) => IoResult::Err(e),
                    _ => IoResult::Err(EIO),
                };
            }
            if st.pending == 0 {
                if st.io.op == VolOp::Read {
                    self.unpin(tag);
                }
                self.finish(tag, cx);
            }
            return;
        }
        let i = k - self.tags * self.per_tag;
        if i < FLUSH_SLOTS {
            if matches!(self.mode, Mode::Scanning { .. }) {
                self.scan_read(done.result, cx);
            } else {
                self.run_read(now_ns, i, done.result, cx);
            }
        } else if i == FLUSH_SLOTS {
            self.free_marked(done.result);
        } else {
            self.busy_answer(now_ns, done.result);
        }
    }
}

impl Volume for WriteBuffer {
    fn layout(&self) -> &'static str {
        self.inner.layout()
    }
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    fn members(&self) -> u32 {
        self.member + 1
    }
    fn block_bytes(&self) -> u32 {
        self.unit_bytes
    }
    fn scratch(&self) -> (u32, u32) {
        (self.tags + FLUSH_SLOTS + 1, self.scratch_bytes)
    }
    fn cmds_max(&self) -> u32 {
        self.inner_cmds + self.tags * self.per_tag + FLUSH_SLOTS + 1 + self.member
    }
    fn outputs_max(&self) -> usize {
        // Held I/Os restarted at once (each a write, a read of every block, or the wrapped
        // volume's commands), plus flushing: a free mark, the runs, a flush of the wrapped
        // volume, what the wrapped volume answers, and a busy query per data member.
        let per_io = self.per_tag as usize + self.inner.outputs_max();
        (self.tags as usize + 1) * per_io
            + FLUSH_SLOTS as usize
            + 2
            + 3 * self.inner.outputs_max()
            + self.member as usize
    }

    fn submit(&mut self, now_ns: u64, io: VolIo, cx: &mut Cx) {
        self.begin(cx);
        if self.failed {
            cx.out.done(io.tag, IoResult::Err(EIO));
            return;
        }
        let wait = !self.ready() || (io.op == VolOp::Write && !self.held.is_empty());
        if wait || !self.start(now_ns, io, cx) {
            assert!(
                self.held.len() < self.tags as usize,
                "more I/Os held than tags"
            );
            self.stats.held_writes += u64::from(io.op == VolOp::Write);
            self.held.push_back(io);
        }
        self.after(now_ns, cx);
    }

    fn member_done(&mut self, now_ns: u64, done: CmdDone, cx: &mut Cx) {
        if done.id < self.inner_cmds {
            self.inner.member_done(
                now_ns,
                done,
                &mut Cx {
                    out: &mut self.inner_out,
                    data: cx.data,
                },
            );
        } else {
            self.own_done(now_ns, done, cx);
        }
        self.after(now_ns, cx);
    }

    fn next_timer_ns(&self) -> Option<u64> {
        if self.mode == Mode::Start {
            return Some(0);
        }
        match (self.pace_wait_ns, self.inner.next_timer_ns()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn on_timer(&mut self, now_ns: u64, cx: &mut Cx) {
        self.begin(cx);
        if self.inner.next_timer_ns().is_some_and(|t| t <= now_ns) {
            self.inner.on_timer(
                now_ns,
                &mut Cx {
                    out: &mut self.inner_out,
                    data: cx.data,
                },
            );
        }
        self.after(now_ns, cx);
    }

    fn write_back(&self) -> bool {
        self.inner.write_back()
    }
    fn gc_free_members(&self) -> Option<std::ops::Range<u32>> {
        // The wrapped volume's members keep their numbers (the buffer device is the last one).
        self.inner.gc_free_members()
    }
    fn warnings(&self) -> Vec<String> {
        self.inner.warnings()
    }

    fn stats(&self) -> serde_json::Value {
        let st = &self.stats;
        let span_ns = st
            .first_flush_ns
            .map_or(0, |f| st.last_flush_ns.saturating_sub(f));
        let flush_rate = if span_ns == 0 {
            0.0
        } else {
            st.flushed_bytes as f64 * 1e9 / span_ns as f64
        };
        let hit = if st.read_units == 0 {
            0.0
        } else {
            st.read_hit_units as f64 / st.read_units as f64
        };
        let ub = u64::from(self.unit_bytes);
        let classes: Vec<serde_json::Value> = (0..self.classes as usize)
            .map(|c| {
                serde_json::json!({
                    "class": c,
                    "writes": st.class_writes[c],
                    "occupancy_bytes": self.class_live[c] * ub,
                    "occupancy_bytes_max": st.class_live_max[c] * ub,
                })
            })
            .collect();
        super::stats_with(
            self.inner.stats(),
            "buffer",
            serde_json::json!({
                "size_bytes": u64::from(self.units_per_seg) * ub * self.segs.len() as u64,
                "bucket_bytes": u64::from(self.units_per_seg) * ub,
                "buckets": self.segs.len(),
                "flush_rate_limit_bytes_per_s": self.pace.as_ref().map(TokenBucket::rate_bytes_per_s),
                "writes": st.writes,
                "write_bytes": st.write_units * ub,
                "absorbed_bytes": st.absorbed_units * ub,
                "read_bytes": st.read_units * ub,
                "read_hit_bytes": st.read_hit_units * ub,
                "read_hit_rate": hit,
                "held_writes": st.held_writes,
                "flush_yields": st.flush_yields,
                "flushed_bytes": st.flushed_bytes,
                "flush_runs": st.flush_runs,
                "flush_bytes_per_s": flush_rate,
                "buckets_flushed": st.buckets_flushed,
                "buckets_absorbed": st.buckets_absorbed,
                "occupancy_bytes": self.map.len() as u64 * ub,
                "classes": classes,
                "held_now": self.held.len(),
                "buckets_by_state": {
                    "free": self.segs.iter().filter(|g| g.state == SegState::Free).count(),
                    "open": self.segs.iter().filter(|g| g.state == SegState::Open).count(),
                    "full": self.segs.iter().filter(|g| g.state == SegState::Full).count(),
                    "flushing": self.segs.iter().filter(|g| g.state == SegState::Flushing).count(),
                    "retiring": self.segs.iter().filter(|g| g.state == SegState::Retiring).count(),
                    "marked": self.segs.iter().filter(|g| g.state == SegState::Marked).count(),
                },
                "recovered_records": st.recovered_records,
                "recovered_bytes": st.recovered_units * ub,
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{MemMembers, SyncDriver};
    use crate::{LayoutSpec, ShapingSpec, VolumeParams, build};
    use proptest::prelude::*;

    const DATA_BYTES: u64 = 256 << 10;
    const BUF_BYTES: u64 = 64 << 10;
    const LEN_MAX: u32 = 2048;

    fn spec(classes: u32) -> LayoutSpec {
        LayoutSpec::Independent.shaped(ShapingSpec {
            buffer: Some(BufferSpec {
                device: "mem".into(),
                size_bytes: None,
                bucket_bytes: Some(8 << 10),
                flush_rate_bytes_per_s: None,
                classes,
                half_life_ns: 1_000_000_000,
            }),
            ..ShapingSpec::default()
        })
    }

    fn vol(classes: u32) -> AnyVolume {
        build(
            &spec(classes),
            &VolumeParams {
                member_sizes_bytes: &[DATA_BYTES, BUF_BYTES],
                block_bytes: 512,
                tags: 2,
                len_bytes_max: LEN_MAX,
            },
        )
        .unwrap()
    }

    fn driver(members: Option<MemMembers>) -> SyncDriver {
        let v = vol(2);
        match members {
            Some(m) => SyncDriver::with_members(v, m, 2, LEN_MAX),
            None => SyncDriver::new(v, &[DATA_BYTES, BUF_BYTES], 2, LEN_MAX),
        }
    }

    fn stats(d: &SyncDriver) -> serde_json::Value {
        d.host().volume().stats()["buffer"].clone()
    }

    #[test]
    fn writes_land_in_the_buffer_and_flush_whole_buckets_to_the_volume() {
        let mut d = driver(None);
        let a: Vec<u8> = (0..2048u32).map(|i| (i * 3 + 1) as u8).collect();
        d.write(4096, &a).unwrap();
        // On the buffer device only, after a record unit at unit 1 of bucket 0.
        assert!(d.members().bytes(0).iter().all(|&b| b == 0));
        assert_eq!(&d.members().bytes(1)[1024..1024 + 2048], &a[..]);
        assert_eq!(d.read(4096, 2048).unwrap(), a);
        assert_eq!(stats(&d)["read_hit_rate"], 1.0);
        // A mixed read: the wrapped volume, then the buffered blocks over it.
        let mut want = vec![0u8; 2048];
        want[512..].copy_from_slice(&a[..1536]);
        assert_eq!(d.read(3584, 2048).unwrap(), want);
        // Fill buckets until some flush: 5 writes of 4 units + record fill a 16-unit bucket 3
        // times over; every flushed block is on the data member where the volume has it.
        for k in 0..40u64 {
            let b = vec![k as u8 + 1; 2048];
            d.write(8192 + k * 2048, &b).unwrap();
        }
        let st = stats(&d);
        assert!(st["buckets_flushed"].as_u64().unwrap() > 0, "{st}");
        assert!(st["flushed_bytes"].as_u64().unwrap() >= 8 << 10, "{st}");
        for k in 0..40u64 {
            assert_eq!(
                d.read(8192 + k * 2048, 2048).unwrap(),
                vec![k as u8 + 1; 2048]
            );
        }
        let on_data = (0..40u64)
            .filter(|k| d.members().byte(0, 8192 + k * 2048) == *k as u8 + 1)
            .count();
        assert!(
            on_data > 0 && on_data < 40,
            "some flushed, some still buffered: {on_data}"
        );
    }

    #[test]
    fn overwritten_blocks_are_absorbed_and_hot_ranges_get_their_own_class() {
        let mut d = driver(None);
        // One hot block rewritten many times: its old copies die in the buffer.
        for k in 0..60u8 {
            d.write(0, &[k; 512]).unwrap();
        }
        let st = stats(&d);
        assert_eq!(st["absorbed_bytes"], 59 * 512);
        assert!(st["buckets_absorbed"].as_u64().unwrap() > 0, "{st}");
        assert_eq!(st["flushed_bytes"], 0, "nothing live to flush: {st}");
        assert_eq!(d.read(0, 512).unwrap(), vec![59u8; 512]);
        // A cold write far away goes to the other class.
        d.write(200 << 10, &[9u8; 512]).unwrap();
        let classes = stats(&d)["classes"].clone();
        assert!(classes[0]["writes"].as_u64().unwrap() >= 1, "{classes}");
        assert!(classes[1]["writes"].as_u64().unwrap() >= 59, "{classes}");
    }

    #[test]
    fn the_classifier_separates_streams_by_velocity() {
        // A 19 GiB volume (74 MiB ranges) written as in bench (c): three sequential 128 KiB
        // streams at 4, 28 and 68 writes/s over their own 5 GiB, and 4 KiB random writes at
        // 128/s over 1 GiB; into 8 classes. Every stream keeps one class from its second
        // range on, and the four classes differ, fastest highest.
        let gib = 1u64 << 30;
        let mut c = Classifier::new((19 * gib).div_ceil(RANGES), 8, 3_600_000_000_000);
        let streams: [(u64, u64, u32, bool); 4] = [
            (0, 1_000_000_000 / 4, 128 << 10, false),
            (5 * gib, 1_000_000_000 / 28, 128 << 10, false),
            (10 * gib, 1_000_000_000 / 68, 128 << 10, false),
            (15 * gib, 1_000_000_000 / 128, 4 << 10, true),
        ];
        let mut next_ns = [0u64; 4];
        let mut pos = [0u64; 4];
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        // counts[stream][class], from 300 s on (after every stream has left its first range).
        let mut counts = [[0u64; 8]; 4];
        let end_ns = 600 * 1_000_000_000u64;
        loop {
            let (s, &t) = next_ns.iter().enumerate().min_by_key(|(_, t)| **t).unwrap();
            if t >= end_ns {
                break;
            }
            let (base, period, len, random) = streams[s];
            let off = if random {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                base + (rng % (gib / 4096)) * 4096
            } else {
                base + pos[s]
            };
            pos[s] = (pos[s] + u64::from(len)) % (5 * gib);
            let class = c.classify(t, off, len);
            c.commit();
            if t >= 300 * 1_000_000_000 {
                counts[s][class as usize] += 1;
            }
            next_ns[s] = t + period;
        }
        let main: Vec<usize> = counts
            .iter()
            .map(|k| (0..8).max_by_key(|&i| k[i]).unwrap())
            .collect();
        for (s, k) in counts.iter().enumerate() {
            let total: u64 = k.iter().sum();
            assert!(
                k[main[s]] * 100 >= total * 99,
                "stream {s} spread over classes: {counts:?}"
            );
        }
        // Random is the slowest per range, then 1x, 7x, 17x.
        assert!(
            main[3] < main[0] && main[0] < main[1] && main[1] < main[2],
            "classes {main:?}: {counts:?}"
        );
    }

    #[test]
    fn full_buckets_stay_buffered_until_room_runs_low() {
        // 8 buckets of 16 units; a 2 KiB write takes 5 (record + 4), so 3 fill a bucket.
        let mut d = driver(None);
        let mut before = stats(&d);
        for k in 0..40u64 {
            d.write(k * 2048, &[k as u8 + 1; 2048]).unwrap();
            let st = stats(&d);
            if st["flushed_bytes"] != 0 {
                // Flushing started only once no more than FLUSH_LOW_FREE buckets were free
                // (the write that started it may have taken one), with full buckets waiting.
                let by = &before["buckets_by_state"];
                assert!(
                    by["free"].as_u64().unwrap() <= FLUSH_LOW_FREE as u64 + 1
                        && by["full"].as_u64().unwrap() >= 2,
                    "write {k}: before {before}"
                );
                for j in 0..=k {
                    assert_eq!(d.read(j * 2048, 2048).unwrap(), vec![j as u8 + 1; 2048]);
                }
                return;
            }
            before = st;
        }
        panic!("nothing was flushed: {}", stats(&d));
    }

    #[test]
    fn flushing_waits_while_the_data_member_is_busy_unless_room_runs_short() {
        // 8 buckets of 16 units; a 2 KiB write takes 5 (record + 4), so 3 fill a bucket.
        let mut d = driver(None);
        // The data member says it stays busy 10 ms (beyond FLUSH_YIELD_BUSY_NS).
        d.busy = vec![(0, 10_000_000)];
        let mut k = 0u64;
        // Write until flushing would have started (no more than FLUSH_LOW_FREE buckets free,
        // full ones waiting) while FLUSH_LOW_FREE are still free: nothing reaches the data
        // member; the flush asked it and waits.
        loop {
            d.write(k * 2048, &[k as u8 + 1; 2048]).unwrap();
            k += 1;
            let by = stats(&d)["buckets_by_state"].clone();
            if by["free"].as_u64().unwrap() <= FLUSH_LOW_FREE as u64 && by["full"] != 0 {
                break;
            }
            assert!(k < 40, "the buffer never filled: {}", stats(&d));
        }
        let st = stats(&d);
        assert_eq!(st["flushed_bytes"], 0, "{st}");
        assert!(st["flush_yields"].as_u64().unwrap() > 0, "{st}");
        assert!(d.members().bytes(0).iter().all(|&b| b == 0));
        // Still busy after the hold: asked again, still waiting.
        let t = d.now_ns();
        d.advance_to(t + 9_000_000);
        assert_eq!(stats(&d)["flushed_bytes"], 0, "{}", stats(&d));
        // The member goes quiet: the next question lets the flush go on.
        d.busy = vec![(0, FLUSH_YIELD_BUSY_NS)];
        d.advance_to(t + 20_000_000);
        let st = stats(&d);
        assert!(st["flushed_bytes"].as_u64().unwrap() > 0, "{st}");
        for j in 0..k {
            assert_eq!(d.read(j * 2048, 2048).unwrap(), vec![j as u8 + 1; 2048]);
        }
        // Busy for good: once room runs short, flushing goes on anyway and no write is lost.
        d.busy = vec![(0, u64::MAX / 4)];
        let flushed = st["flushed_bytes"].as_u64().unwrap();
        for j in k..k + 60 {
            d.write(j * 2048 % (DATA_BYTES - 2048), &[j as u8 + 1; 2048])
                .unwrap();
        }
        let st = stats(&d);
        assert!(st["flushed_bytes"].as_u64().unwrap() > flushed, "{st}");
        for j in k + 60 - 20..k + 60 {
            assert_eq!(
                d.read(j * 2048 % (DATA_BYTES - 2048), 2048).unwrap(),
                vec![j as u8 + 1; 2048]
            );
        }
    }

    #[test]
    fn a_block_written_again_while_buffered_keeps_its_class() {
        // A fast sequential writer F (512 B every 1 ms) sets a high mean rate. Block X far
        // away is then written (a new range: slow, class 0) and rewritten every 1 ms beside
        // F: the rate alone (a classifier fed the same writes) moves X's rewrites to class 1,
        // but each finds the previous copy buffered (nothing is flushed: 32 buckets) and stays
        // in class 0, so no class-1 bucket holds a newer copy of a class-0 bucket's block.
        let s = LayoutSpec::Independent.shaped(ShapingSpec {
            buffer: Some(BufferSpec {
                device: "mem".into(),
                size_bytes: None,
                bucket_bytes: Some(8 << 10),
                flush_rate_bytes_per_s: None,
                classes: 2,
                half_life_ns: 1_000_000_000,
            }),
            ..ShapingSpec::default()
        });
        let sizes = [DATA_BYTES, 256 << 10];
        let params = VolumeParams {
            member_sizes_bytes: &sizes,
            block_bytes: 512,
            tags: 2,
            len_bytes_max: LEN_MAX,
        };
        let mut d = SyncDriver::new(build(&s, &params).unwrap(), &sizes, 2, LEN_MAX);
        let mut mirror = Classifier::new(1024, 2, 1_000_000_000);
        let mut want = [0u64; 2];
        let x = 200u64 << 10;
        let mut x_class = None;
        let mut x_moved = 0;
        // F every 1 ms for 100 ms, then X every 0.1 ms for 6 ms, F every 1 ms beside it.
        let mut f = 0u64;
        for j in 0..160u64 {
            d.advance_to(if j < 100 {
                j * 1_000_000
            } else {
                j * 100_000 + 90_000_000
            });
            if j < 100 || j % 10 == 0 {
                let c = mirror.classify(d.now_ns(), f * 512, 512);
                mirror.commit();
                want[c as usize] += 1;
                d.write(f * 512, &[1; 512]).unwrap();
                f += 1;
            }
            if j >= 100 {
                let c = mirror.classify(d.now_ns(), x, 512);
                mirror.commit();
                let first = *x_class.get_or_insert(c);
                x_moved += u64::from(c != first);
                want[first as usize] += 1;
                d.write(x, &[j as u8; 512]).unwrap();
            }
        }
        let st = stats(&d);
        assert_eq!(st["flushed_bytes"], 0, "{st}");
        assert!(x_moved > 0, "the rate alone would move X: {x_class:?}");
        assert_eq!(st["classes"][0]["writes"], want[0], "{st}");
        assert_eq!(st["classes"][1]["writes"], want[1], "{st}");
        assert_eq!(d.read(x, 512).unwrap(), vec![159u8; 512]);
    }

    #[test]
    fn trim_is_refused_and_bad_geometry_is_named() {
        let mut d = driver(None);
        let io = VolIo {
            tag: 0,
            op: VolOp::Trim,
            offset_bytes: 0,
            len_bytes: 512,
            fua: false,
        };
        assert_eq!(d.run(&[io])[0].1, IoResult::Err(EOPNOTSUPP));
        let e = |buf_bytes: u64, bucket: u64| {
            let s = LayoutSpec::Independent.shaped(ShapingSpec {
                buffer: Some(BufferSpec {
                    device: "mem".into(),
                    size_bytes: None,
                    bucket_bytes: Some(bucket),
                    flush_rate_bytes_per_s: None,
                    classes: 4,
                    half_life_ns: 1,
                }),
                ..ShapingSpec::default()
            });
            build(
                &s,
                &VolumeParams {
                    member_sizes_bytes: &[DATA_BYTES, buf_bytes],
                    block_bytes: 512,
                    tags: 1,
                    len_bytes_max: LEN_MAX,
                },
            )
            .err()
            .unwrap()
            .to_string()
        };
        assert!(e(16 << 10, 8 << 10).contains("at least 6"));
        assert!(e(1 << 20, 2048).contains("--buffer-bucket"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Against a flat model: every read returns what was last written, through buffering,
        /// absorption and flushing; and a new buffer over the same devices (a restart after a
        /// kill) finds every completed write again.
        #[test]
        fn reads_match_a_model_and_a_restart_finds_every_write(
            ops in proptest::collection::vec((any::<bool>(), 0u64..120, 1u32..=4, any::<u8>()), 1..150),
            cut in 0usize..150,
        ) {
            // Run the ops, restarting (a new buffer over the same devices, as after a kill -9)
            // once in the middle and once at the end; every completed write must be found.
            let mut d = driver(None);
            let mut model = vec![0u8; DATA_BYTES as usize];
            for (i, &(w, blk, n, v)) in ops.iter().enumerate() {
                if i == cut {
                    d = driver(Some(d.members().clone()));
                }
                // Skew writes towards a hot region so classes and absorption happen.
                let blk = if v % 3 == 0 { blk % 8 } else { blk * 4 };
                let (off, len) = (blk * 512, n * 512);
                if w {
                    let bytes: Vec<u8> = (0..len).map(|i| v.wrapping_add(i as u8)).collect();
                    d.write(off, &bytes).unwrap();
                    model[off as usize..(off + u64::from(len)) as usize].copy_from_slice(&bytes);
                } else {
                    let got = d.read(off, len).unwrap();
                    prop_assert!(
                        got == model[off as usize..(off + u64::from(len)) as usize],
                        "read at {} (op {})", off, i
                    );
                }
            }
            let mut r = driver(Some(d.members().clone()));
            for blk in 0..(DATA_BYTES / 2048) {
                let off = blk * 2048;
                let got = r.read(off, 2048).unwrap();
                prop_assert!(
                    got == model[off as usize..off as usize + 2048],
                    "after the restart, at {}", off
                );
            }
        }
    }
}
