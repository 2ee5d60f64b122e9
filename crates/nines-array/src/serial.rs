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
//!   front-end; GC leaves that column first (its victim is given up) and writes wait until GC
//!   commands still in flight there complete, so GC never touches the front-end. The next
//!   front-end is chosen when the last segment before the rotation is down to its last eighth,
//!   so GC's commands there drain while that eighth is written. The new
//!   front-end goes on in GC's open segment there, right after GC's data, so no segment is left
//!   part-written (the members' FTL fills flash blocks in write order: a part-written segment
//!   would share blocks with the next one, and trimming either would leave the device's own GC
//!   data to move). Its `rotate_free` remaining segments are left for GC to write into.
//! - **xGC**: when fewer than `gc_start` segments are free outside the front-end (or writes
//!   wait for room), the policy picks a victim among the sealed back-end segments with no write
//!   in flight, greedily (fewest valid units), and moves its valid units, in runs of at most
//!   `move_bytes` inside one stripe unit, with a read into a scratch buffer and a write into
//!   the open GC segment (one per column) of a back-end column: another than the victim's where
//!   one has room (its reads then do not queue behind GC's programs), the one with the fewest GC
//!   writes in flight (GC's writes spread over the back-ends, so xGC is not bound by one
//!   member's write bandwidth), then the fewest free segments; at most `gc_depth` moves in
//!   flight (the throttle). A move changes the mapping only for units still mapped where it read them (a
//!   client write that completed meanwhile wins). Once every unit is moved and no read is still
//!   in flight from it, the victim is TRIMmed on its members and becomes free. GC stops at
//!   `gc_stop` free segments outside the front-end.
//! - The first write queues a trim of every segment (the front-end's first), as creating an
//!   array discards its members, so the members' own GC never moves stale data; a read-only run
//!   writes nothing. A trim that fails (a member without discard) is counted and ignored: it
//!   only spares the device's own GC. Trims of a column count as GC work there (a rotation to
//!   it waits for them).
//! - **Zoned members** (docs/arch-zoned.md): a segment is one zone on each member of its column
//!   (`--segment` = column members x zone capacity), segment `s` starting at `s x zone_size` on
//!   a member; the front-end writes at the write pointer (in placement order, which both
//!   drivers keep); xGC's writes are zone appends, mapped where the member put them; segments
//!   are reset instead of trimmed (a reset counts as GC work in its column, as a trim does).
//!
//! - **Persistence** (`--persist`): the mapping table is kept on member 0, in a metadata region
//!   after the last segment (the same room is reserved on every member, so columns stay alike):
//!   page 0 a superblock (magic, geometry, checksum), pages 1.. the table, 1024 little-endian
//!   entries a page (physical unit + 1; 0 unmapped, so a zeroed region is an empty table). The
//!   volume opens by reading the superblock and the table (client I/O waits); a region without
//!   a valid superblock is formatted (every page written, then the superblock). A *commit*
//!   snapshots the pages changed since the last one into scratch, flushes every member (the
//!   data those entries point at becomes durable), writes the pages in place and flushes
//!   member 0. Every entry is 4 bytes inside one sector, so a commit cut anywhere leaves each
//!   entry old or new, and both point at data that is there: a location an entry leaves is
//!   reused (its segment trimmed) only after a commit that started after it was left has
//!   completed (cleaned victims wait as *dead* segments, counted as GC work in their column).
//!   A client FLUSH (and a FUA write) is answered when a commit that started after it
//!   completes; dead segments also start commits. Reopened after a crash, segments holding
//!   mapped units are sealed and the others free (trimmed before reuse).

use std::collections::VecDeque;

/// The most GC moves in flight (`--gc-depth`).
pub const GC_DEPTH_MAX: u32 = 4096;
/// The most memory the GC's move buffers (`--gc-depth` x `--gc-move`) may take.
pub const GC_BUFFER_BYTES_MAX: u64 = 1 << 30;

use serde::{Deserialize, Serialize};

use crate::ArrayError;

pub mod ident;
use crate::api::{
    BufRef, CmdDone, CmdOp, CmdResult, Cx, Extent, IoResult, MemberCmd, VolIo, VolOp, Volume,
};
use ident::{GEOMETRY_WORDS, Ident, Open};

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
/// Why client writes wait (`volume.stats.write_wait_ns`): the next front-end's GC commands and
/// trims draining, the front-end's next segment being trimmed, no column with room to rotate to.
const WAIT_DRAIN: u8 = 1;
const WAIT_TRIM: u8 = 2;
const WAIT_ROOM: u8 = 3;

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
    /// Keep the mapping table on the members (`--persist`): see the module documentation.
    #[serde(default)]
    pub persist: bool,
    /// Zoned members (NVMe ZNS): their zone size, set by the driver from the members (0: not
    /// zoned). A segment is then one zone on each member of its column: the zone's capacity
    /// written by the front-end at the write pointer, by xGC with zone appends, reset instead
    /// of trimmed (module documentation, "Zoned members").
    #[serde(default, skip_serializing_if = "is_zero")]
    pub zone_size_bytes: u64,
    /// Zoned members' zone capacity (writable bytes from a zone's start).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub zone_capacity_bytes: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Page of the metadata region (superblock, mapping table).
pub const META_PAGE_BYTES: u64 = 4096;
/// Mapping entries in one page.
const ENTRIES_PER_PAGE: u64 = META_PAGE_BYTES / 4;
/// Metadata commands in flight at most (page reads and writes).
const META_DEPTH: u32 = 4;
/// The member holding the metadata region.
const META_MEMBER: u32 = 0;
const META_MAGIC: &[u8; 8] = b"NINESSR1";

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
            persist: false,
            zone_size_bytes: 0,
            zone_capacity_bytes: 0,
        }
    }
}

impl SerialSpec {
    /// Whether the members are zoned.
    pub fn zoned(&self) -> bool {
        self.zone_size_bytes > 0
    }

    /// Bytes from one segment's start on a member to the next: a zone on zoned members, else
    /// the segment's share.
    pub fn segment_stride_bytes(&self) -> u64 {
        if self.zoned() {
            self.zone_size_bytes
        } else {
            self.segment_bytes / u64::from(self.column_members.max(1))
        }
    }

    /// The segments kept free of client data: room to rotate and for GC to work.
    pub fn reserve_segments(&self, columns: u32) -> u64 {
        u64::from(columns) * (u64::from(self.rotate_free) + 1) + u64::from(self.gc_stop)
    }

    /// Bytes of the metadata region on each member for a volume of `vol_units` mapping units
    /// (a superblock page and the table's pages); 0 without `persist`.
    pub fn meta_bytes(&self, vol_units: u64) -> u64 {
        if !self.persist {
            return 0;
        }
        META_PAGE_BYTES * (1 + vol_units.div_ceil(ENTRIES_PER_PAGE))
    }

    /// Mapping units of a volume over `k` columns of `segs` segments.
    fn vol_units(&self, segs: u64, k: u32) -> u64 {
        (segs * u64::from(k)).saturating_sub(self.reserve_segments(k))
            * (self.segment_bytes / u64::from(self.unit_bytes.max(1)))
    }

    /// Segments per column over `columns` columns of members of `member_bytes` (the
    /// metadata region left at the end of each member).
    pub fn segments_per_column(&self, member_bytes: u64, columns: u32) -> u64 {
        let per_member = self.segment_stride_bytes();
        let mut s = member_bytes.checked_div(per_member).unwrap_or(0);
        while s > 0 && s * per_member + self.meta_bytes(self.vol_units(s, columns)) > member_bytes {
            s -= 1;
        }
        s
    }

    /// The capacity over `members` members of `member_bytes` each (0 when they are too small).
    pub fn size_bytes(&self, member_bytes: u64, members: u32) -> u64 {
        let k = members / self.column_members.max(1);
        let segs = self.segments_per_column(member_bytes, k) * u64::from(k);
        segs.saturating_sub(self.reserve_segments(k)) * self.segment_bytes
    }

    /// The bytes each of `members` members must hold for a volume of at least `end_bytes`.
    pub fn member_bytes_for(&self, end_bytes: u64, members: u32) -> u64 {
        let k = (members / self.column_members.max(1)).max(1);
        let segs = end_bytes.div_ceil(self.segment_bytes.max(1)) + self.reserve_segments(k);
        let per_col = segs.div_ceil(u64::from(k));
        per_col * self.segment_stride_bytes() + self.meta_bytes(self.vol_units(per_col, k))
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
    /// Cleaned, waiting for a commit before its trim (persisted volumes).
    Dead,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Boot {
    /// Not opened yet: the first timer or request reads the metadata region.
    Wait,
    /// Reading every member's identity page (member 0's is the superblock).
    ReadSuper,
    ReadMap,
    Ready,
    /// The region could not be read or holds another volume: every request answers EIO.
    Failed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Commit {
    Idle,
    /// Every member flushing (the data the snapshot's entries point at).
    DataFlush,
    /// The snapshot's pages being written.
    Pages,
    /// Forming: the other members' identity pages being written, marked forming, then those
    /// members flushing (see `ident`).
    IdsForming,
    IdsFormingFlush,
    /// The superblock being written (the format's commit).
    Super,
    /// The metadata member flushing.
    MetaFlush,
    /// The other members' identity pages being written formed (forming's last step, or an
    /// open that found some still forming), then those members flushing.
    IdsFormed,
    IdsFormedFlush,
}

/// The persistence counters (`volume.stats.persist`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct MetaStats {
    /// Member 0's offset of the metadata region.
    pub region_offset_bytes: u64,
    pub region_bytes: u64,
    /// The region held no volume and was formatted at open.
    pub formatted: bool,
    /// Mapping units found at open.
    pub recovered_units: u64,
    pub recovery_error: Option<String>,
    pub commits: u64,
    pub commit_errors: u64,
    pub pages_written: u64,
    /// FLUSHes and FUA writes answered by a commit.
    pub commit_waits: u64,
    /// Segments that waited for a commit before their trim.
    pub dead_segments: u64,
}

/// The persisted mapping table's state (`--persist`).
struct Meta {
    /// Member 0's offset of the region: page 0 the superblock, page `1 + j` table page `j`.
    off_bytes: u64,
    /// Table pages.
    pages: u32,
    /// Region pages in one scratch slot; the region's image starts at slot `slot_base`.
    pages_per_slot: u32,
    slot_base: u32,
    boot: Boot,
    commit: Commit,
    /// Table pages changed since the last snapshot; the running commit's snapshot.
    dirty: Vec<u64>,
    taking: Vec<u64>,
    /// Next table page to read or write; commands in flight; their ids (bit i: id base + i).
    cursor: u32,
    inflight: u32,
    ids_busy: u32,
    /// A command of the running commit failed.
    failed: bool,
    /// The running (or next) commit formats: it writes the superblock after the pages.
    format: bool,
    /// The running (or next) commit writes the other members' identity pages formed.
    finish_ids: bool,
    /// The commands in flight go to every member (ids `meta_base + member`), not through
    /// `ids_busy`.
    wide: bool,
    /// The volume's id (from its superblock, or made when it is formed); an earlier nines'
    /// volume has none (`legacy`).
    volume_id: [u8; 16],
    legacy: bool,
    /// Scratch slot of member 0's identity page (member `m`'s follows in order).
    ids_slot: u32,
    /// Commits started and completed (a commit's number is `started` when it starts).
    started: u64,
    done: u64,
    /// Cleaned segments and the commit number they wait for.
    dead: VecDeque<(u32, u64)>,
    /// FLUSHes and FUA writes (tags) and the commit number they wait for.
    waiters: VecDeque<(u32, u64)>,
    /// Requests that came before the table was read.
    held: VecDeque<VolIo>,
    page: Vec<u8>,
    stats: MetaStats,
}

#[inline]
fn bit(v: &[u64], i: u32) -> bool {
    v[(i / 64) as usize] & (1 << (i % 64)) != 0
}

/// The first set bit at or after `from`, below `end`.
fn next_bit(v: &[u64], from: u32, end: u32) -> Option<u32> {
    let mut i = from;
    while i < end {
        let w = v[(i / 64) as usize] >> (i % 64);
        if w != 0 {
            let j = i + w.trailing_zeros();
            return (j < end).then_some(j);
        }
        i = (i / 64 + 1) * 64;
    }
    None
}

fn fnv64(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
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
    /// Victims left part-cleaned because their column became the front-end (GC leaves the
    /// next front-end; the segment is sealed and may be picked again). Every other victim is
    /// trimmed, or reset on zoned members, once empty.
    pub gc_victims_left: u64,
    /// Times writes waited with nothing in flight that could make room, so GC was let into
    /// every column (the front-end too) until they went on (see `Serial::stuck`).
    pub gc_stuck: u64,
    pub gc_errors: u64,
    pub rotations: u64,
    pub segments_trimmed: u64,
    pub trim_errors: u64,
    /// Client writes that waited for room (GC, a trim, or a rotation draining GC).
    pub write_waits: u64,
    /// Time the queue of waiting writes was blocked, by cause: the next front-end's GC and
    /// trims draining before a rotation, the front-end's next segment being trimmed, no room
    /// to rotate to (GC must clean a segment first).
    pub write_wait_ns_rotation_drain: u64,
    pub write_wait_ns_trim: u64,
    pub write_wait_ns_no_room: u64,
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
    /// Each column's open GC segment and its next slot.
    gc_open: Vec<Option<(u32, u32)>>,
    /// GC writes in flight (or moves whose write is next) to each column.
    col_gc_writes: Vec<u32>,
    /// GC writes in flight to one column at most: `gc_depth` over the back-end columns.
    col_gc_writes_max: u32,
    rotate_to: Option<u32>,
    victim: Option<u32>,
    victim_cursor: u32,
    /// No eligible victim was found since the last change that could make one.
    victim_none: bool,
    gc_active: bool,
    gc_broken: bool,
    /// Writes wait and nothing in flight can make room (after a restart, which seals the
    /// segments GC had open and leaves free space where the rules keep GC out): GC may then
    /// use every column, the front-end too, until writes go on or a rotation is chosen.
    stuck: bool,
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
    /// Ids of metadata commands start here.
    meta_base: u32,
    meta: Option<Box<Meta>>,
    /// Why the last `open_front` gave no segment; why the waiting writes are blocked since when.
    last_cause: u8,
    block_cause: u8,
    block_since_ns: u64,
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
        if spec.gc_depth > GC_DEPTH_MAX
            || u64::from(spec.gc_depth) * u64::from(spec.move_bytes) > GC_BUFFER_BYTES_MAX
        {
            return bad(format!(
                "--gc-depth {} x --gc-move {} needs more than the {} MiB the GC's move buffers may \
                 hold (and --gc-depth is at most {GC_DEPTH_MAX}); use a smaller --gc-depth or --gc-move",
                spec.gc_depth,
                spec.move_bytes,
                GC_BUFFER_BYTES_MAX >> 20
            ));
        }
        if spec.persist {
            if !spec.move_bytes.is_multiple_of(META_PAGE_BYTES as u32)
                || !(META_PAGE_BYTES as u32).is_multiple_of(block_bytes.max(1))
            {
                return bad(format!(
                    "--persist needs --gc-move a multiple of {META_PAGE_BYTES} and members' \
                     logical block ({block_bytes}) at most {META_PAGE_BYTES}"
                ));
            }
            if spec.start_full_bytes > 0 {
                return bad(
                    "--start-full and --persist exclude each other (a persisted volume \
                            starts from what its members hold)"
                        .into(),
                );
            }
        }
        if spec.zoned() {
            check_zoned(&spec)?;
        }
        let smallest = member_sizes_bytes.iter().copied().min().unwrap_or(0);
        let s = spec.segments_per_column(smallest, k);
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
        let meta = spec.persist.then(|| {
            let pages = (vol_units as u64).div_ceil(ENTRIES_PER_PAGE) as u32;
            let words = (pages as usize).div_ceil(64);
            let per_member = spec.segment_bytes / u64::from(w);
            Box::new(Meta {
                off_bytes: s * per_member,
                pages,
                pages_per_slot: spec.move_bytes / META_PAGE_BYTES as u32,
                slot_base: spec.gc_depth,
                boot: Boot::Wait,
                commit: Commit::Idle,
                dirty: vec![0; words],
                taking: vec![0; words],
                cursor: 0,
                inflight: 0,
                ids_busy: 0,
                failed: false,
                format: false,
                finish_ids: false,
                wide: false,
                volume_id: [0; 16],
                legacy: false,
                ids_slot: spec.gc_depth
                    + (pages + 1).div_ceil(spec.move_bytes / META_PAGE_BYTES as u32),
                started: 0,
                done: 0,
                dead: VecDeque::with_capacity(segs),
                waiters: VecDeque::with_capacity(tags as usize),
                held: VecDeque::with_capacity(tags as usize),
                page: vec![0; META_PAGE_BYTES as usize],
                stats: MetaStats {
                    region_offset_bytes: s * per_member,
                    region_bytes: spec.meta_bytes(vol_units as u64),
                    ..MetaStats::default()
                },
            })
        });
        let meta_base = gc_base + spec.gc_depth + TRIM_SLOTS * w;
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
            gc_open: vec![None; k as usize],
            col_gc_writes: vec![0; k as usize],
            col_gc_writes_max: spec.gc_depth.div_ceil(k.saturating_sub(1).max(1)),
            rotate_to: None,
            victim: None,
            victim_cursor: 0,
            victim_none: false,
            gc_active: false,
            gc_broken: false,
            stuck: false,
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
                + 1
                // A commit's flushes or page writes, the requests it answers.
                + if spec.persist { (n + META_DEPTH + tags + 2) as usize } else { 0 },
            meta_base,
            meta,
            last_cause: 0,
            block_cause: 0,
            block_since_ns: 0,
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
        // The segment's start on each member of its column, then the unit's place in it
        // (the same offsets as striping the column's whole space when segments are contiguous).
        let o = u64::from(p % self.seg_units) * self.unit;
        let c = self.spec.stripe_bytes;
        let chunk = o / c;
        let member = col * self.w + (chunk % u64::from(self.w)) as u32;
        let start = u64::from(g % self.s) * self.spec.segment_stride_bytes();
        (member, start + (chunk / u64::from(self.w)) * c + o % c)
    }

    /// The physical unit at `member`'s offset `off` (inside a segment): [`Self::locate`]
    /// inverted, for where a zone append put its data.
    fn unit_at(&self, member: u32, off: u64) -> u32 {
        let stride = self.spec.segment_stride_bytes();
        let (g_local, within) = (off / stride, off % stride);
        let c = self.spec.stripe_bytes;
        let (col, j) = (member / self.w, u64::from(member % self.w));
        let o = ((within / c) * u64::from(self.w) + j) * c + within % c;
        let p = (col * self.s + g_local as u32) * self.seg_units + (o / self.unit) as u32;
        debug_assert_eq!(self.locate(p), (member, off), "unit_at inverts locate");
        p
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
    fn open_front(&mut self, now_ns: u64) -> Option<(u32, u32)> {
        for _ in 0..2 {
            if let Some(c) = self.rotate_to {
                if self.col_gc_inflight[c as usize] > 0 {
                    self.last_cause = WAIT_DRAIN;
                    return None;
                }
                self.rotate_to = None;
                self.front = c;
                // The front-end goes on in the GC segment open there, right after GC's data
                // (a segment left part-written would share the members' flash blocks with the
                // next one, and their own GC would move what the trim of one left in them).
                self.stats.rotations += 1;
                self.victim_none = false;
                self.note_role(now_ns);
                if let Some((g, next)) = self.gc_open[c as usize].take() {
                    if next < self.seg_units {
                        return Some((g, next));
                    }
                    self.set_state(g, Seg::Sealed);
                }
            }
            let f = self.front;
            if self.col_free[f as usize] > self.spec.rotate_free {
                let Some(g) = self.clean_segment(f) else {
                    self.last_cause = WAIT_TRIM;
                    return None;
                };
                self.set_state(g, Seg::Open);
                return Some((g, 0));
            }
            if !self.pick_next_front() {
                self.last_cause = WAIT_ROOM;
                return None;
            }
        }
        None
    }

    /// Chooses the next front-end, the back-end column with the most free segments (more than
    /// `rotate_free`), and makes GC leave it; false when there is none.
    fn pick_next_front(&mut self) -> bool {
        let f = self.front;
        let mut best: Option<u32> = None;
        for i in 1..self.k {
            let c = (f + i) % self.k;
            if self.col_free[c as usize] > self.spec.rotate_free
                && best.is_none_or(|b| self.col_free[c as usize] > self.col_free[b as usize])
            {
                best = Some(c);
            }
        }
        let Some(c) = best else {
            return false;
        };
        self.rotate_to = Some(c);
        // GC keeps out of the next front-end again.
        self.stuck = false;
        // GC leaves the next front-end.
        if let Some(v) = self.victim
            && self.col_of_seg(v) == c
        {
            self.set_state(v, Seg::Sealed);
            self.victim = None;
            self.stats.gc_victims_left += 1;
        }
        true
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
                        Some((g, next)) => {
                            self.front_open = Some((g, next));
                            (g, next)
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
            // The front-end's last segment is down to its last eighth: choose the next
            // front-end now, so that GC's commands there drain while this eighth is written
            // rather than while client writes wait.
            if self.rotate_to.is_none()
                && self.col_free[self.front as usize] <= self.spec.rotate_free
                && self.seg_units - (next + take) <= self.seg_units / 8
            {
                self.pick_next_front();
            }
        }
        true
    }

    /// The waiting writes are blocked by `cause` from now (0: no longer blocked); the time
    /// since the last change goes to the previous cause.
    fn note_block(&mut self, now_ns: u64, cause: u8) {
        let ns = now_ns.saturating_sub(self.block_since_ns);
        match self.block_cause {
            WAIT_DRAIN => self.stats.write_wait_ns_rotation_drain += ns,
            WAIT_TRIM => self.stats.write_wait_ns_trim += ns,
            WAIT_ROOM => self.stats.write_wait_ns_no_room += ns,
            _ => {}
        }
        self.block_cause = cause;
        self.block_since_ns = now_ns;
    }

    /// Places waiting writes, in order, while there is room.
    fn wake_writes(&mut self, now_ns: u64, cx: &mut Cx) {
        self.wake_writes_inner(now_ns, cx);
        if self.waitq.is_empty() {
            self.stuck = false;
        }
        let cause = if self.waitq.is_empty() {
            0
        } else {
            self.last_cause
        };
        if cause != self.block_cause {
            self.note_block(now_ns, cause);
        }
    }

    fn wake_writes_inner(&mut self, now_ns: u64, cx: &mut Cx) {
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
                    self.mark(v);
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
        if r.fua
            && r.result == IoResult::Ok
            && let Some(m) = self.meta.as_mut()
        {
            // FUA: answered once a commit holds its mapping.
            m.waiters.push_back((tag, m.started + 1));
            m.stats.commit_waits += 1;
            self.maybe_commit(cx);
            return;
        }
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
        self.stuck || (c != self.front && Some(c) != self.rotate_to)
    }

    /// Whether writes wait with nothing in flight that could make room for them: no client
    /// command, GC move, trim, commit or segment waiting for one. Without [`Serial::stuck`] they would wait for
    /// ever (found by the crash simulator: a restarted full volume whose only free segments
    /// were the front-end's reserve).
    fn no_progress(&self) -> bool {
        !self.waitq.is_empty()
            && !self.gc_broken
            // A client command in flight frees units when it completes (and wakes GC).
            && self.reqs.iter().all(|r| r.pending == 0)
            && self.moves.iter().all(|m| *m == Move::Idle)
            && self.trims.iter().all(Option::is_none)
            && self.trim_q.is_empty()
            && self
                .meta
                .as_ref()
                .is_none_or(|m| m.commit == Commit::Idle && m.dead.is_empty())
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

    /// A GC destination with room for a move out of column `vcol`: see `gc_dest_col`.
    fn gc_dest(&mut self, vcol: u32) -> Option<(u32, u32)> {
        let c = self.gc_dest_col(vcol)?;
        if let Some((g, next)) = self.gc_open[c as usize] {
            return Some((g, next));
        }
        let g = self.clean_segment(c)?;
        self.set_state(g, Seg::Open);
        self.gc_open[c as usize] = Some((g, 0));
        Some((g, 0))
    }

    /// Whether column `c` can take a GC write now: GC may use it and it has an open GC segment
    /// with room or a free segment (sealing a full open one).
    fn gc_room(&mut self, c: u32) -> bool {
        if !self.gc_may_use(c) {
            return false;
        }
        if let Some((g, next)) = self.gc_open[c as usize] {
            if next < self.seg_units {
                return true;
            }
            self.set_state(g, Seg::Sealed);
            self.victim_none = false;
            self.gc_open[c as usize] = None;
        }
        self.col_free[c as usize] > 0
    }

    /// The column a GC move out of column `vcol` writes to: among the back-end columns with
    /// room and fewer than `gc_depth / (columns - 1)` GC writes in flight (GC's queue on one
    /// member stays short, so a rotation there drains it quickly, and its moves spread over
    /// every back-end), one other than `vcol` where there is one (the victim's reads do not queue behind
    /// GC's programs there), then the one with the fewest GC writes in flight (GC's writes
    /// spread over the back-ends: one member's write bandwidth would bound xGC, and with it
    /// the client), then the fewest free segments (free space gathers where the next
    /// front-end comes from).
    fn gc_dest_col(&mut self, vcol: u32) -> Option<u32> {
        let mut best: Option<(u32, u32, u32, u32)> = None;
        for c in 0..self.k {
            if !self.gc_room(c) || self.col_gc_writes[c as usize] >= self.col_gc_writes_max {
                continue;
            }
            let key = (
                u32::from(c == vcol),
                self.col_gc_writes[c as usize],
                self.col_free[c as usize],
                c,
            );
            if best.is_none_or(|b| key < b) {
                best = Some(key);
            }
        }
        best.map(|b| b.3)
    }

    /// Starts GC moves while GC is wanted and slots are free; finishes the victim when done.
    fn gc_pump(&mut self, cx: &mut Cx) {
        self.gc_moves(cx);
        self.finish_victim();
        self.pump_trims(cx);
        if self.meta.is_some() {
            self.maybe_commit(cx);
        }
    }

    /// After GC was pumped and waiting writes were tried: when they still wait with nothing in
    /// flight that could make room, GC may use every column (see `Serial::stuck`).
    fn unstick(&mut self, now_ns: u64, cx: &mut Cx) {
        if self.stuck || !self.no_progress() {
            return;
        }
        self.stuck = true;
        self.stats.gc_stuck += 1;
        self.victim_none = false;
        self.gc_pump(cx);
        if !self.waitq.is_empty() {
            self.wake_writes(now_ns, cx);
            self.gc_pump(cx);
        }
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
            let Some((dg, dnext)) = self.gc_dest(self.col_of_seg(v)) else {
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
            let dc = self.col_of_seg(dg) as usize;
            self.gc_open[dc] = Some((dg, dnext + n));
            self.col_gc_writes[dc] += 1;
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
        } else if let Some(m) = self.meta.as_mut() {
            // Entries on the members may still point here until a commit that starts now.
            m.dead.push_back((v, m.started + 1));
            m.stats.dead_segments += 1;
            self.set_state(v, Seg::Dead);
            let c = self.col_of_seg(v) as usize;
            self.col_gc_inflight[c] += 1;
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
        // Zone resets too: letting a rotation go ahead of them (they reset other zones than the
        // new front-end writes) cut QUICK's write p99.99 (1.311 -> 1.088 of conventional) but
        // the full run's read p99.99 went 7.7 -> 47.8 ms, through xGC's moves filling a
        // back-end member's write buffer after rotations (not the erases: those rotations had
        // none in flight; docs/arch-zoned.md, session 37).
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
            // Zoned members: the segment's zone is reset (whole zone), not trimmed.
            let (op, stride) = if self.spec.zoned() {
                (CmdOp::ZoneReset, self.spec.zone_size_bytes)
            } else {
                (CmdOp::Trim, self.spec.segment_bytes / u64::from(self.w))
            };
            for (i, m) in self.col_members(c).enumerate() {
                cx.out.cmd(MemberCmd {
                    id: self.trim_base + slot * self.w + i as u32,
                    member: m,
                    op,
                    offset_bytes: u64::from(g % self.s) * stride,
                    len_bytes: stride.min(u64::from(u32::MAX)) as u32,
                    buf: BufRef::None,
                    fua: false,
                });
            }
        }
    }

    /// A GC move's write to zoned members: a zone append to the destination segment's zone on
    /// the destination unit's member. Moves complete their reads in any order, so their writes
    /// would not reach a zone in the order their places were given; appends let the member
    /// pick the place (the write pointer), and the move maps its units where the data went.
    /// The places given stay the accounting: appends to a zone fill exactly the units given.
    fn gc_append(&mut self, cx: &mut Cx, slot: usize, dst: u32, n: u32, buf: BufRef) {
        let (member, off) = self.locate(dst);
        let zone_start = off - off % self.spec.zone_size_bytes;
        cx.out.cmd(MemberCmd {
            id: self.gc_base + slot as u32,
            member,
            op: CmdOp::ZoneAppend,
            offset_bytes: zone_start,
            len_bytes: (u64::from(n) * self.unit) as u32,
            buf,
            fua: false,
        });
    }

    fn gc_done(&mut self, now_ns: u64, slot: usize, result: CmdResult, cx: &mut Cx) {
        let ok = matches!(result, CmdResult::Ok | CmdResult::Appended { .. });
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
                    if self.spec.zoned() {
                        self.gc_append(cx, slot, dst, n, buf);
                    } else {
                        self.push_cmd(
                            cx,
                            self.gc_base + slot as u32,
                            dst,
                            n,
                            CmdOp::Write,
                            buf,
                            false,
                        );
                    }
                } else {
                    let ix = self.seg_of(dst) as usize;
                    self.seg_writes[ix] -= 1;
                    let dc = self.col_of_seg(ix as u32) as usize;
                    self.col_gc_writes[dc] -= 1;
                    let ix = self.col_of_seg(self.seg_of(dst)) as usize;
                    self.col_gc_inflight[ix] -= 1;
                    self.moves[slot] = Move::Idle;
                }
            }
            Move::Write { src, dst, n } => {
                let dg = self.seg_of(dst);
                let dc = self.col_of_seg(dg) as usize;
                self.col_gc_writes[dc] -= 1;
                self.seg_writes[dg as usize] -= 1;
                let ix = self.col_of_seg(dg) as usize;
                self.col_gc_inflight[ix] -= 1;
                if ok {
                    // Where the data went: the place given, or where a zone append put it.
                    let at = match result {
                        CmdResult::Appended { offset_bytes } => {
                            Some((self.locate(dst).0, offset_bytes))
                        }
                        _ => None,
                    };
                    for i in 0..n {
                        let d = match at {
                            Some((m, off)) => self.unit_at(m, off + u64::from(i) * self.unit),
                            None => dst + i,
                        };
                        debug_assert_eq!(self.seg_of(d), dg, "an append stays in its zone");
                        let v = self.rev[(src + i) as usize];
                        if v != NONE {
                            self.invalidate(src + i);
                            self.mark(v);
                            self.map[v as usize] = d;
                            self.rev[d as usize] = v;
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
        self.unstick(now_ns, cx);
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

/// Persistence (`--persist`): opening, commits. See the module documentation.
impl Serial {
    /// Volume unit `v`'s entry changed: its table page goes into the next commit.
    #[inline]
    fn mark(&mut self, v: u32) {
        if let Some(m) = self.meta.as_mut() {
            let j = (u64::from(v) / ENTRIES_PER_PAGE) as usize;
            m.dirty[j / 64] |= 1 << (j % 64);
        }
    }

    /// Where region page `i` lives in scratch.
    fn image(m: &Meta, i: u32) -> BufRef {
        BufRef::Scratch {
            index: m.slot_base + i / m.pages_per_slot,
            offset: (i % m.pages_per_slot) * META_PAGE_BYTES as u32,
        }
    }

    /// A command on region pages `first..first + pages` (inside one scratch slot).
    fn meta_cmd(&mut self, cx: &mut Cx, op: CmdOp, first: u32, pages: u32) {
        let m = self.meta.as_mut().expect("persisted");
        let i = (!m.ids_busy).trailing_zeros();
        assert!(i < META_DEPTH, "more metadata commands than META_DEPTH");
        m.ids_busy |= 1 << i;
        m.inflight += 1;
        cx.out.cmd(MemberCmd {
            id: self.meta_base + i,
            member: META_MEMBER,
            op,
            offset_bytes: m.off_bytes + u64::from(first) * META_PAGE_BYTES,
            len_bytes: pages * META_PAGE_BYTES as u32,
            buf: if op == CmdOp::Flush {
                BufRef::None
            } else {
                Self::image(m, first)
            },
            fua: false,
        });
    }

    /// The geometry a superblock records (see `ident`).
    fn geometry(&self) -> [u64; GEOMETRY_WORDS] {
        [
            u64::from(self.unit as u32),
            self.spec.segment_bytes,
            self.spec.stripe_bytes,
            u64::from(self.w),
            u64::from(self.k),
            u64::from(self.s),
            self.map.len() as u64,
        ]
    }

    /// Where member `member`'s identity page lives in scratch.
    fn id_image(m: &Meta, member: u32) -> BufRef {
        BufRef::Scratch {
            index: m.ids_slot + member / m.pages_per_slot,
            offset: (member % m.pages_per_slot) * META_PAGE_BYTES as u32,
        }
    }

    /// `op` on the identity page of each of `members` (a flush of each): ids `meta_base +
    /// member`, outside `ids_busy`.
    fn meta_wide(&mut self, cx: &mut Cx, op: CmdOp, members: std::ops::Range<u32>) {
        let m = self.meta.as_mut().expect("persisted");
        m.wide = true;
        m.inflight += members.len() as u32;
        for member in members {
            let flush = op == CmdOp::Flush;
            cx.out.cmd(MemberCmd {
                id: self.meta_base + member,
                member,
                op,
                offset_bytes: if flush { 0 } else { m.off_bytes },
                len_bytes: if flush { 0 } else { META_PAGE_BYTES as u32 },
                buf: if flush {
                    BufRef::None
                } else {
                    Self::id_image(m, member)
                },
                fua: false,
            });
        }
    }

    /// Members `1..n`'s identity pages, forming or formed, written.
    fn write_ids(&mut self, cx: &mut Cx, formed: bool) {
        let g = self.geometry();
        let n = self.n;
        let m = self.meta.as_mut().expect("persisted");
        m.commit = if formed {
            Commit::IdsFormed
        } else {
            Commit::IdsForming
        };
        for k in 1..n {
            let page = ident::encode(&g, &m.volume_id, k, n, formed);
            cx.data.write_bytes(Self::id_image(m, k), &page);
        }
        self.meta_wide(cx, CmdOp::Write, 1..n);
    }

    /// Member 0's superblock (its identity page, formed) written: the volume exists.
    fn write_super(&mut self, cx: &mut Cx) {
        let g = self.geometry();
        let n = self.n;
        let m = self.meta.as_mut().expect("persisted");
        m.wide = false;
        m.commit = Commit::Super;
        let page = ident::encode(&g, &m.volume_id, 0, n, true);
        cx.data.write_bytes(Self::image(m, 0), &page);
        self.meta_cmd(cx, CmdOp::Write, 0, 1);
    }

    /// Opening: read the superblock.
    fn start_boot(&mut self, cx: &mut Cx) {
        let m = self.meta.as_mut().expect("persisted");
        m.boot = Boot::ReadSuper;
        m.failed = false;
        self.meta_wide(cx, CmdOp::Read, 0..self.n);
    }

    /// Every member's identity page is read: open, form, or refuse (see `ident`).
    fn identify(&mut self, now_ns: u64, cx: &mut Cx) {
        let g = self.geometry();
        let n = self.n;
        let m = self.meta.as_mut().expect("persisted");
        m.wide = false;
        if m.failed {
            return self.boot_failed("reading the members' metadata regions failed".into(), cx);
        }
        let mut found = Vec::with_capacity(n as usize);
        for k in 0..n {
            if cx.data.has_data() {
                cx.data.read_bytes(Self::id_image(m, k), &mut m.page);
                found.push(ident::decode(&m.page));
            } else {
                found.push(Ident::Blank);
            }
        }
        match ident::assemble(&found, &g) {
            Err((k, why)) => self.boot_failed(format!("member {k}: {why}"), cx),
            Ok(open) => {
                if let Open::Form = open {
                    // No volume there: format (every page of the empty table, then the
                    // identity pages and the superblock); the first write trims every segment.
                    m.stats.formatted = true;
                    m.format = true;
                    m.volume_id = ident::volume_id(now_ns, &g, n);
                    for j in 0..m.pages {
                        m.dirty[(j / 64) as usize] |= 1 << (j % 64);
                    }
                    return self.booted(now_ns, cx);
                }
                match open {
                    Open::Legacy => m.legacy = true,
                    Open::Volume { volume_id, finish } => {
                        m.volume_id = volume_id;
                        m.finish_ids = finish;
                    }
                    Open::Form => unreachable!("handled above"),
                }
                m.boot = Boot::ReadMap;
                m.cursor = 0;
                self.pump_map_reads(cx);
                let m = self.meta.as_ref().expect("persisted");
                if m.inflight == 0 {
                    self.load_map(now_ns, cx);
                }
            }
        }
    }

    fn boot_failed(&mut self, why: String, cx: &mut Cx) {
        let m = self.meta.as_mut().expect("persisted");
        m.boot = Boot::Failed;
        m.stats.recovery_error = Some(why);
        while let Some(io) = m.held.pop_front() {
            cx.out.done(io.tag, IoResult::Err(EIO));
        }
    }

    /// Reads of the table's pages, `META_DEPTH` at most in flight.
    fn pump_map_reads(&mut self, cx: &mut Cx) {
        loop {
            let m = self.meta.as_ref().expect("persisted");
            if m.inflight >= META_DEPTH || m.cursor >= m.pages {
                return;
            }
            let (j, pps) = (m.cursor, m.pages_per_slot);
            // Region page j + 1 up to the end of its slot.
            let n = (pps - (j + 1) % pps).min(m.pages - j);
            self.meta.as_mut().expect("persisted").cursor += n;
            self.meta_cmd(cx, CmdOp::Read, j + 1, n);
        }
    }

    /// Every table page is in scratch: rebuild the mapping, the valid counts and the segments.
    fn load_map(&mut self, now_ns: u64, cx: &mut Cx) {
        let m = self.meta.as_mut().expect("persisted");
        let total = self.rev.len() as u64;
        let mut recovered = 0u64;
        let mut bad: Option<String> = None;
        'pages: for j in 0..m.pages {
            let src = Self::image(m, j + 1);
            cx.data.read_bytes(src, &mut m.page);
            for (i, e) in m.page.chunks_exact(4).enumerate() {
                let e = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
                if e == 0 {
                    continue;
                }
                let v = u64::from(j) * ENTRIES_PER_PAGE + i as u64;
                let p = u64::from(e - 1);
                if v >= self.map.len() as u64 || p >= total || self.rev[p as usize] != NONE {
                    bad = Some(format!(
                        "the mapping table is corrupt: entry {v} holds {e} (units {}, places \
                         {total})",
                        self.map.len()
                    ));
                    break 'pages;
                }
                self.map[v as usize] = p as u32;
                self.rev[p as usize] = v as u32;
                self.valid[(p / u64::from(self.seg_units)) as usize] += 1;
                recovered += 1;
            }
        }
        if let Some(why) = bad {
            self.map.fill(NONE);
            self.rev.fill(NONE);
            self.valid.fill(0);
            self.boot_failed(why, cx);
            return;
        }
        m.stats.recovered_units = recovered;
        for g in 0..self.s * self.k {
            if self.valid[g as usize] > 0 {
                self.set_state(g, Seg::Sealed);
            }
        }
        // The members were formatted when the volume was made; free segments are trimmed
        // before reuse.
        self.formatted = true;
        let best = (0..self.k).max_by_key(|&c| (self.col_free[c as usize], c));
        self.front = best.unwrap_or(0);
        self.booted(now_ns, cx);
    }

    /// Open: the requests that waited go in, in order.
    fn booted(&mut self, now_ns: u64, cx: &mut Cx) {
        let m = self.meta.as_mut().expect("persisted");
        m.boot = Boot::Ready;
        while let Some(io) = self.meta.as_mut().expect("persisted").held.pop_front() {
            self.submit(now_ns, io, cx);
        }
        self.maybe_commit(cx);
    }

    /// Starts a commit when one is wanted and none runs: snapshot the changed pages into
    /// scratch, then flush every member.
    fn maybe_commit(&mut self, cx: &mut Cx) {
        let Some(m) = self.meta.as_mut() else { return };
        if m.boot != Boot::Ready || m.commit != Commit::Idle {
            return;
        }
        if m.waiters.is_empty()
            && !m.format
            && !m.finish_ids
            && (m.dead.is_empty() || self.gc_broken)
        {
            return;
        }
        m.started += 1;
        std::mem::swap(&mut m.dirty, &mut m.taking);
        m.dirty.fill(0);
        if cx.data.has_data() {
            let vol_units = self.map.len() as u64;
            let mut j = 0;
            while let Some(p) = next_bit(&m.taking, j, m.pages) {
                let first = u64::from(p) * ENTRIES_PER_PAGE;
                let last = (first + ENTRIES_PER_PAGE).min(vol_units);
                m.page.fill(0);
                for (i, v) in (first..last).enumerate() {
                    let e = self.map[v as usize];
                    let e = if e == NONE { 0 } else { e + 1 };
                    m.page[4 * i..4 * i + 4].copy_from_slice(&e.to_le_bytes());
                }
                cx.data.write_bytes(Self::image(m, p + 1), &m.page);
                j = p + 1;
            }
        }
        m.commit = Commit::DataFlush;
        m.failed = false;
        debug_assert_eq!(
            m.inflight, 0,
            "a commit starts with no metadata command in flight"
        );
        self.meta_wide(cx, CmdOp::Flush, 0..self.n);
    }

    /// Writes of the snapshot's pages; when all are written, the superblock (formatting) or
    /// the metadata member's flush.
    fn pump_page_writes(&mut self, cx: &mut Cx) {
        loop {
            let m = self.meta.as_ref().expect("persisted");
            if m.inflight >= META_DEPTH {
                return;
            }
            let Some(j) = next_bit(&m.taking, m.cursor, m.pages) else {
                break;
            };
            let pps = m.pages_per_slot;
            let mut n = 1;
            while j + n < m.pages && bit(&m.taking, j + n) && (j + n + 1) % pps != 0 {
                n += 1;
            }
            let m = self.meta.as_mut().expect("persisted");
            m.cursor = j + n;
            m.stats.pages_written += u64::from(n);
            self.meta_cmd(cx, CmdOp::Write, j + 1, n);
        }
        let m = self.meta.as_mut().expect("persisted");
        if m.inflight > 0 {
            return;
        }
        if m.failed {
            self.commit_failed(cx);
        } else if m.format {
            // Forming: the other members' pages (forming) first, then the superblock.
            if self.n > 1 {
                self.write_ids(cx, false);
            } else {
                self.write_super(cx);
            }
        } else {
            m.commit = Commit::MetaFlush;
            self.meta_cmd(cx, CmdOp::Flush, 0, 0);
        }
    }

    /// A commit's command failed: its pages go back to the next one, the requests waiting for
    /// it answer EIO, the segments waiting for it wait on.
    fn commit_failed(&mut self, cx: &mut Cx) {
        let m = self.meta.as_mut().expect("persisted");
        m.wide = false;
        m.stats.commit_errors += 1;
        for (d, t) in m.dirty.iter_mut().zip(&m.taking) {
            *d |= *t;
        }
        m.commit = Commit::Idle;
        let number = m.started;
        while let Some(&(tag, need)) = m.waiters.front() {
            if need > number {
                break;
            }
            m.waiters.pop_front();
            cx.out.done(tag, IoResult::Err(EIO));
        }
        // Reuse of cleaned space stops (like a GC error): what waits for room fails.
        self.gc_broken = true;
    }

    fn commit_done(&mut self, now_ns: u64, cx: &mut Cx) {
        let m = self.meta.as_mut().expect("persisted");
        m.commit = Commit::Idle;
        m.done = m.started;
        m.format = false;
        m.stats.commits += 1;
        let done = m.done;
        while let Some(&(tag, need)) = m.waiters.front() {
            if need > done {
                break;
            }
            m.waiters.pop_front();
            cx.out.done(tag, IoResult::Ok);
        }
        while let Some(&(g, need)) = self.meta.as_ref().expect("persisted").dead.front() {
            if need > done {
                break;
            }
            self.meta.as_mut().expect("persisted").dead.pop_front();
            // Counted in its column's GC work since it died.
            self.set_state(g, Seg::Trimming);
            self.trim_q.push_back(g);
        }
        self.maybe_commit(cx);
        self.after_change(now_ns, cx);
    }

    fn meta_done(&mut self, now_ns: u64, i: u32, result: CmdResult, cx: &mut Cx) {
        let ok = result == CmdResult::Ok;
        let m = self
            .meta
            .as_mut()
            .expect("a metadata completion without --persist");
        assert!(
            m.inflight > 0,
            "completion of a metadata command not in flight"
        );
        m.inflight -= 1;
        if !m.wide {
            m.ids_busy &= !(1 << i);
        }
        if !ok {
            m.failed = true;
        }
        let last = m.inflight == 0;
        match m.boot {
            Boot::ReadSuper => {
                if last {
                    self.identify(now_ns, cx);
                }
            }
            Boot::ReadMap => {
                if !ok {
                    // The reads still in flight are ignored (Boot::Failed).
                    return self
                        .boot_failed(format!("reading the mapping table failed: {result:?}"), cx);
                }
                self.pump_map_reads(cx);
                let m = self.meta.as_ref().expect("persisted");
                if m.inflight == 0 && m.cursor >= m.pages {
                    self.load_map(now_ns, cx);
                }
            }
            // Reads of a region that failed to open, still in flight then.
            Boot::Failed => {}
            Boot::Wait => panic!("a metadata completion while not opening"),
            Boot::Ready => {
                let failed = m.failed;
                let (phase, n) = (m.commit, self.n);
                if phase == Commit::Pages {
                    return self.pump_page_writes(cx);
                }
                if !last {
                    return;
                }
                if failed {
                    return self.commit_failed(cx);
                }
                match phase {
                    Commit::DataFlush => {
                        m.wide = false;
                        m.commit = Commit::Pages;
                        m.cursor = 0;
                        m.ids_busy = 0;
                        self.pump_page_writes(cx);
                    }
                    Commit::IdsForming => {
                        m.commit = Commit::IdsFormingFlush;
                        self.meta_wide(cx, CmdOp::Flush, 1..n);
                    }
                    Commit::IdsFormingFlush => self.write_super(cx),
                    Commit::Super => {
                        m.commit = Commit::MetaFlush;
                        self.meta_cmd(cx, CmdOp::Flush, 0, 0);
                    }
                    Commit::MetaFlush => {
                        if (m.format || m.finish_ids) && n > 1 {
                            self.write_ids(cx, true);
                        } else {
                            self.commit_done(now_ns, cx);
                        }
                    }
                    Commit::IdsFormed => {
                        m.commit = Commit::IdsFormedFlush;
                        self.meta_wide(cx, CmdOp::Flush, 1..n);
                    }
                    Commit::IdsFormedFlush => {
                        m.wide = false;
                        m.finish_ids = false;
                        self.commit_done(now_ns, cx);
                    }
                    Commit::Pages => unreachable!("handled above"),
                    Commit::Idle => panic!("a metadata completion with no commit running"),
                }
            }
        }
    }
}

/// A persisted serial volume's metadata region, as `nines check` reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersistRegion {
    /// The member holding it, and its offset there.
    pub member: u32,
    pub offset_bytes: u64,
    /// Pages of the mapping table (after the superblock page).
    pub table_pages: u32,
    /// The geometry its superblock records, and the members of the volume.
    pub geometry: [u64; GEOMETRY_WORDS],
    pub members: u32,
    /// Mapping units (the table's entries in use) and physical places they may name.
    pub units: u64,
    pub places: u64,
}

impl Serial {
    /// Where a `--persist` volume of this geometry keeps its table, and the superblock it
    /// writes there; None without `--persist`.
    pub fn persist_region(&mut self) -> Option<PersistRegion> {
        let m = self.meta.as_ref()?;
        Some(PersistRegion {
            member: META_MEMBER,
            offset_bytes: m.off_bytes,
            table_pages: m.pages,
            geometry: self.geometry(),
            members: self.n,
            units: self.map.len() as u64,
            places: self.rev.len() as u64,
        })
    }
}

/// How the superblock found on the metadata member compares with the one expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SuperCheck {
    /// The same volume, intact.
    Ok,
    /// No serial volume's magic: never served with `--persist` (or over another region).
    NoVolume,
    /// A serial volume of another geometry (other options or member sizes).
    OtherGeometry,
    /// The right magic and geometry, but its checksum (or the rest of the page) is damaged.
    Damaged,
}

/// The rules of serial over zoned members (`spec.zone_size_bytes > 0`): one line each, naming
/// what to change.
fn check_zoned(spec: &SerialSpec) -> Result<(), ArrayError> {
    let w = u64::from(spec.column_members.max(1));
    let cap = spec.zone_capacity_bytes;
    let bad = |m: String| Err(ArrayError::Invalid(m));
    if cap == 0 || cap > spec.zone_size_bytes {
        return bad(format!(
            "zoned members with zone size {} need a zone capacity in 1..={0}",
            spec.zone_size_bytes
        ));
    }
    if spec.zone_size_bytes > u64::from(u32::MAX) {
        return bad(format!(
            "zones of {} bytes do not fit one member command (a reset names a whole zone); \
             zoned members need zones under 4 GiB",
            spec.zone_size_bytes
        ));
    }
    if spec.segment_bytes != cap * w {
        return bad(format!(
            "serial over zoned members needs a segment of one zone on each member of a column: \
             use --segment {} (--column-members {w} x the {cap}-byte zone capacity)",
            cap * w
        ));
    }
    if spec.persist {
        return bad(
            "--persist rewrites its mapping table in place, which zoned members refuse; \
             drop --persist or use conventional members"
                .into(),
        );
    }
    if spec.start_full_bytes > 0 {
        return bad(
            "--start-full maps data that zoned members do not hold (they start empty); drop it"
                .into(),
        );
    }
    Ok(())
}

/// What superblock page `found` (member 0's region page 0) is for a volume of geometry
/// `expected`: an identity page or an earlier nines' superblock of it, nothing, damaged, or
/// another geometry's.
pub fn check_superblock(found: &[u8], expected: &[u64; GEOMETRY_WORDS]) -> SuperCheck {
    match ident::decode(found) {
        Ident::Legacy { geometry }
        | Ident::Member {
            geometry,
            index: 0,
            formed: true,
            ..
        } if geometry == *expected => SuperCheck::Ok,
        Ident::Blank => SuperCheck::NoVolume,
        _ if ident::raw_geometry(found) == Some(*expected) => SuperCheck::Damaged,
        _ => SuperCheck::OtherGeometry,
    }
}

impl PersistRegion {
    /// The superblock to write on member 0 for this geometry: the identity page of volume
    /// `volume_id`, or without one an earlier nines' superblock (no identity checks).
    pub fn superblock(&self, volume_id: Option<&[u8; 16]>) -> Vec<u8> {
        match volume_id {
            Some(id) => ident::encode(&self.geometry, id, 0, self.members, true),
            None => ident::encode_legacy(&self.geometry),
        }
    }
}

/// A mapping-table entry that cannot be right.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct BadEntry {
    /// The volume unit (the entry's index).
    pub unit: u64,
    /// The entry as found (physical place + 1).
    pub entry: u32,
    /// Why: `out_of_range` (a place past the members, or an entry past the volume's units)
    /// or `duplicate` (a place an earlier unit already names).
    pub why: &'static str,
}

/// What [`check_table`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TableCheck {
    /// Units mapped by good entries.
    pub mapped: u64,
    /// Bad entries in all, and the first `listed_max` of them.
    pub bad: u64,
    pub listed: Vec<BadEntry>,
}

/// Checks a persisted mapping table (`table`: its pages, 1024 little-endian entries each,
/// place + 1 or 0 for unmapped) of a volume of `units` units over `places` places: every
/// entry names a place that exists, no two name the same place, and entries past `units` are
/// 0. With `repair`, every bad entry is cleared (its unit then reads as zeros; of two units
/// naming one place the first keeps it, as the volume's own open would have refused both).
pub fn check_table(
    table: &mut [u8],
    units: u64,
    places: u64,
    listed_max: usize,
    repair: bool,
) -> TableCheck {
    let mut seen = vec![0u64; places.div_ceil(64) as usize];
    let mut out = TableCheck::default();
    for (v, e) in table.chunks_exact_mut(4).enumerate() {
        let entry = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
        if entry == 0 {
            continue;
        }
        let v = v as u64;
        let p = u64::from(entry - 1);
        let why = if v >= units || p >= places {
            "out_of_range"
        } else if seen[(p / 64) as usize] & (1 << (p % 64)) != 0 {
            "duplicate"
        } else {
            seen[(p / 64) as usize] |= 1 << (p % 64);
            out.mapped += 1;
            continue;
        };
        out.bad += 1;
        if out.listed.len() < listed_max {
            out.listed.push(BadEntry {
                unit: v,
                entry,
                why,
            });
        }
        if repair {
            e.fill(0);
        }
    }
    out
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
    /// Units never written (or trimmed) read as zeros: a run of unmapped units is a hole, a run
    /// of mapped ones data. A persisted volume whose table is not read yet says nothing.
    fn extent_at(&self, offset_bytes: u64) -> Extent {
        let left = self.size_bytes.saturating_sub(offset_bytes).max(1);
        if self.meta.as_ref().is_some_and(|m| m.boot != Boot::Ready)
            || offset_bytes >= self.size_bytes
        {
            return Extent::Mapped { len_bytes: left };
        }
        let first = (offset_bytes / self.unit) as usize;
        let unmapped = self.map[first] == NONE;
        // A block-status request covers less than 4 GiB: look no further than that.
        let scan = (u64::from(u32::MAX) / self.unit + 2) as usize;
        let run = self.map[first..]
            .iter()
            .take(scan)
            .take_while(|&&p| (p == NONE) == unmapped)
            .count() as u64;
        let len_bytes = (run * self.unit - offset_bytes % self.unit).min(left);
        if unmapped {
            Extent::Unmapped { len_bytes }
        } else {
            Extent::Mapped { len_bytes }
        }
    }
    fn scratch(&self) -> (u32, u32) {
        // GC's slots, then the metadata region's image (persisted volumes).
        // The region's image, then every member's identity page.
        let image = self.meta.as_ref().map_or(0, |m| {
            (m.pages + 1).div_ceil(m.pages_per_slot) + self.n.div_ceil(m.pages_per_slot)
        });
        (self.spec.gc_depth + image, self.spec.move_bytes)
    }
    fn cmds_max(&self) -> u32 {
        self.meta_base
            + if self.meta.is_some() {
                self.n.max(META_DEPTH)
            } else {
                0
            }
    }
    fn write_back(&self) -> bool {
        // Acknowledged writes are durable only once a commit holds their mapping.
        self.meta.is_some()
    }
    fn next_timer_ns(&self) -> Option<u64> {
        // Opening reads the metadata region at once.
        self.meta
            .as_ref()
            .is_some_and(|m| m.boot == Boot::Wait)
            .then_some(0)
    }
    fn on_timer(&mut self, _now_ns: u64, cx: &mut Cx) {
        if self.meta.as_ref().is_some_and(|m| m.boot == Boot::Wait) {
            self.start_boot(cx);
        }
    }
    fn outputs_max(&self) -> usize {
        self.outputs_max
    }
    fn gc_free_members(&self) -> Option<std::ops::Range<u32>> {
        // While stuck, GC may write anywhere: no member is kept free of it.
        Some(if self.stuck {
            0..0
        } else {
            self.front_members()
        })
    }

    fn submit(&mut self, now_ns: u64, io: VolIo, cx: &mut Cx) {
        let tag = io.tag;
        let t = tag as usize;
        if let Some(m) = self.meta.as_mut() {
            match m.boot {
                Boot::Ready => {}
                Boot::Failed => {
                    cx.out.done(tag, IoResult::Err(EIO));
                    return;
                }
                Boot::Wait | Boot::ReadSuper | Boot::ReadMap => {
                    m.held.push_back(io);
                    if m.boot == Boot::Wait {
                        self.start_boot(cx);
                    }
                    return;
                }
            }
            if io.op == VolOp::Flush {
                m.waiters.push_back((tag, m.started + 1));
                m.stats.commit_waits += 1;
                self.maybe_commit(cx);
                return;
            }
        }
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
            // No units: it finishes when its member flushes have (a request's `units` would
            // otherwise be the tag's last one's, and the flush never answered).
            self.reqs[t].units = 0;
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
                    if self.waitq.is_empty() {
                        let cause = self.last_cause;
                        self.note_block(now_ns, cause);
                    }
                    self.waitq.push_back(tag);
                    self.gc_pump(cx);
                    self.unstick(now_ns, cx);
                    return;
                }
                self.gc_pump(cx);
            }
            VolOp::Trim | VolOp::WriteZeroes => {
                self.stats.client_trim_bytes += u64::from(io.len_bytes);
                for v in first..first + units {
                    let old = self.map[v as usize];
                    if old != NONE {
                        self.invalidate(old);
                        self.mark(v);
                        self.map[v as usize] = NONE;
                    }
                }
                self.victim_none = false;
                self.reqs[t].issued = 0;
                if io.fua
                    && let Some(m) = self.meta.as_mut()
                {
                    // FUA: answered once a commit holds the dropped entries, as a FUA write
                    // is (answered at once, a crash brought the old data back).
                    m.waiters.push_back((tag, m.started + 1));
                    m.stats.commit_waits += 1;
                    self.maybe_commit(cx);
                } else {
                    cx.out.done(tag, IoResult::Ok);
                }
                self.gc_pump(cx);
            }
            VolOp::Flush => unreachable!("handled above"),
        }
    }

    fn member_done(&mut self, now_ns: u64, done: CmdDone, cx: &mut Cx) {
        let id = done.id;
        if id >= self.meta_base {
            self.meta_done(now_ns, id - self.meta_base, done.result, cx);
            return;
        }
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
            if let Some(m) = &self.meta {
                o.insert(
                    "persist".into(),
                    serde_json::to_value(&m.stats).unwrap_or_default(),
                );
            }
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
            persist: false,
            zone_size_bytes: 0,
            zone_capacity_bytes: 0,
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

    fn entries(e: &[u32]) -> Vec<u8> {
        e.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn check_table_finds_out_of_range_and_duplicate_entries_and_repair_clears_them() {
        // 4 units over 8 places: unit 0 -> place 2, unit 1 unmapped, unit 2 -> place 9 (out of
        // range), unit 3 -> place 2 again (duplicate), entry 4 past the units.
        let mut t = entries(&[3, 0, 10, 3, 1, 0]);
        let c = check_table(&mut t, 4, 8, 10, false);
        assert_eq!(c.mapped, 1);
        assert_eq!(c.bad, 3);
        assert_eq!(
            c.listed,
            vec![
                BadEntry {
                    unit: 2,
                    entry: 10,
                    why: "out_of_range"
                },
                BadEntry {
                    unit: 3,
                    entry: 3,
                    why: "duplicate"
                },
                BadEntry {
                    unit: 4,
                    entry: 1,
                    why: "out_of_range"
                },
            ]
        );
        assert_eq!(
            t,
            entries(&[3, 0, 10, 3, 1, 0]),
            "checking alone changes nothing"
        );
        let c = check_table(&mut t, 4, 8, 1, true);
        assert_eq!(
            (c.bad, c.listed.len()),
            (3, 1),
            "every bad entry counted, one listed"
        );
        assert_eq!(
            t,
            entries(&[3, 0, 0, 0, 0, 0]),
            "the first unit keeps its place"
        );
        let c = check_table(&mut t, 4, 8, 10, false);
        assert_eq!((c.mapped, c.bad), (1, 0));
    }

    #[test]
    fn the_superblock_check_tells_damage_from_another_geometry() {
        let spec = SerialSpec {
            column_members: 1,
            stripe_bytes: 8192,
            segment_bytes: 64 * 1024,
            unit_bytes: 4096,
            rotate_free: 1,
            gc_start: 1,
            gc_stop: 1,
            gc_depth: 2,
            move_bytes: 8192,
            start_full_bytes: 0,
            persist: true,
            zone_size_bytes: 0,
            zone_capacity_bytes: 0,
        };
        let r = Serial::new(spec, &[1 << 20; 2], 512, 1, 65536)
            .unwrap()
            .persist_region()
            .unwrap();
        assert_eq!(r.member, 0);
        assert_eq!(
            r.units * 4096,
            Serial::new(spec, &[1 << 20; 2], 512, 1, 65536)
                .unwrap()
                .size_bytes
        );
        assert_eq!(u64::from(r.table_pages), r.units.div_ceil(1024));
        for sb in [r.superblock(Some(&[3; 16])), r.superblock(None)] {
            assert_eq!(check_superblock(&sb, &r.geometry), SuperCheck::Ok);
            let mut damaged = sb.clone();
            damaged[70] ^= 1;
            assert_eq!(check_superblock(&damaged, &r.geometry), SuperCheck::Damaged);
        }
        assert_eq!(
            check_superblock(&[0; 4096], &r.geometry),
            SuperCheck::NoVolume
        );
        let other = Serial::new(
            SerialSpec {
                segment_bytes: 128 * 1024,
                ..spec
            },
            &[1 << 20; 2],
            512,
            1,
            65536,
        )
        .unwrap()
        .persist_region()
        .unwrap();
        assert_eq!(
            check_superblock(&other.superblock(None), &r.geometry),
            SuperCheck::OtherGeometry
        );
        let mut plain = Serial::new(
            SerialSpec {
                persist: false,
                ..spec
            },
            &[1 << 20; 2],
            512,
            1,
            65536,
        )
        .unwrap();
        assert!(plain.persist_region().is_none());
    }
}
