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
//! degraded; a second failure fails the request with EIO. WRITE_ZEROES is a write whose bytes
//! come from a zeroed scratch chunk instead of the client's buffer, so the parity stays the XOR
//! of the data and reads return zeros; TRIM is the same (dropping a member's bytes under a
//! parity chunk would make the parity wrong; zeros after a trim are allowed and safe). Neither
//! is fast (NBD's FAST_ZERO is refused for raid5 exports before it gets here).
//!
//! Write-intent bitmap (`bitmap_region_rows`, what `nines serve` turns on over members with
//! superblocks; docs/arch-array.md): the rows are grouped into regions of `region_rows` rows,
//! and one page (4 KiB) at member offset `rows * chunk` (just past the data area, on every
//! working member) holds a bit per region. Before a client write reaches any member, the bits
//! of the regions it touches are set and written with FUA to every working member, and the
//! write waits for that; a region's bit is cleared lazily: at a timer pass, regions with no
//! write since the last pass and none in flight (and, under D/ND, nothing in the write-back
//! buffer) are candidates; every member is flushed, and the page is written again without the
//! candidates still idle. So after a crash every row whose data and parity may disagree lies in
//! a region whose bit is set on the members, and the driver resyncs exactly those regions
//! before serving ([`crate::meta`]). Without a bitmap there is no write-hole protection, as md
//! without a bitmap or journal. A degraded array that crashed keeps the write hole (the lost
//! member's chunks of a torn row cannot be recomputed): the driver refuses to start it.

use std::collections::VecDeque;

/// The largest raid5 chunk (one member's share of a row): every verb that moves rows holds a
/// few of them per member in memory.
pub const CHUNK_BYTES_MAX: u64 = 16 << 20;

use crate::ArrayError;
use crate::api::{
    BufRef, CmdDone, CmdOp, CmdResult, Cx, IoResult, MemberCmd, VolIo, VolOp, Volume,
};

use crate::api::{Control, Window};

const EIO: i32 = 5;

/// `b` moved `by` bytes further into its buffer.
#[inline]
fn offset_by(b: BufRef, by: u32) -> BufRef {
    match b {
        BufRef::Client { tag, offset } => BufRef::Client {
            tag,
            offset: offset + by,
        },
        BufRef::Scratch { index, offset } => BufRef::Scratch {
            index,
            offset: offset + by,
        },
        BufRef::None => BufRef::None,
    }
}

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
    /// Waiting for its regions' bits to be durable in the write-intent bitmap.
    Bitmap,
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
    /// Commands sent in this phase (their ids); unlike `pending`, never goes down.
    sent: u32,
    result: IoResult,
    plan: Plan,
    /// The row's pieces (at most n - 1), and the union of their in-chunk ranges.
    pieces: Vec<Piece>,
    lo: u32,
    hi: u32,
    /// A member failed while this row was out: redo it when its commands are back.
    redo: bool,
    /// WRITE_ZEROES or TRIM: a write of the zero chunk ([`Raid5::wsrc`]).
    zero: bool,
}

/// The D/ND policy's options (`--policy sched|dnd --window W --write-back SIZE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DndSpec {
    /// Each member's turn: member `(t / window) % n` takes the writes (and, with PLM, may
    /// collect garbage) while reads avoid it.
    pub window_ns: u64,
    /// Write-back buffer: writes wait here for their member's turn.
    pub write_back_bytes: u64,
    /// Drive the members' garbage collection (`dnd`): every member in its PLM deterministic
    /// window, the owner told to collect garbage at the start of its turn for at most half of
    /// it, and no buffered writes to it in the second half; without (`sched`) the turns only schedule reads and writes, and members
    /// collect garbage whenever they like.
    pub plm: bool,
}

/// Rebuild onto a replacement (`--rebuild N [--rebuild-rate BYTES/s]`): member `N` is new (its
/// bytes are not the array's); row by row, from the first, its chunk is rebuilt from the other
/// members (the XOR of their chunks, whether the lost one held data or parity) and written to it.
/// Rows already rebuilt are healthy; the others are served degraded around it, as with `--failed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RebuildSpec {
    pub member: u32,
    /// At most this many bytes written to the replacement per second (0: as fast as the members
    /// go), as md's speed_limit_max.
    #[serde(default)]
    pub rate_bytes_per_s: u64,
}

/// A rebuild's progress, reported in the volume's counters.
#[derive(Clone, Debug, Default, serde::Serialize)]
struct RebuildStats {
    member: u32,
    rows_total: u64,
    rows_rebuilt: u64,
    bytes_written: u64,
    member_reads: u64,
    row_lock_waits: u64,
    started_ns: Option<u64>,
    done_ns: Option<u64>,
    /// The rebuild stopped: the replacement failed, or another member did (data of the rows not
    /// rebuilt is lost beyond the parity's cover).
    aborted: Option<String>,
    rate_bytes_per_s: u64,
}

#[derive(Clone, Debug)]
struct Rebuild {
    spec: RebuildSpec,
    /// Rows below are rebuilt (healthy).
    cursor: u64,
    /// A row is out: its reads, then its write.
    in_flight: bool,
    /// The next row is held by a request: the rebuild goes on when a member completion frees
    /// it, not on a timer (a timer due now while the row stays held fired again and again at
    /// one instant: the simulator's queue grew without bound, issue 44's README line).
    lock_wait: bool,
    writing: bool,
    pending: u32,
    /// Not before this time (the rate limit).
    next_ns: u64,
    /// The replacement answered an error: every row is degraded again.
    replacement_failed: bool,
    stats: RebuildStats,
}

/// A row's buffered new contents: per member a chunk-sized slot and which granules of it are
/// newer than the member (dirty), which are being written to it (busy), and a version bumped by
/// every write, so a flush that raced a newer write leaves the granules dirty.
#[derive(Clone, Debug)]
struct Entry {
    used: bool,
    /// Taken by a write that is still reading its row: not released, however clean, until
    /// the write's bytes are in it (or the write failed). A release in between freed it, and
    /// the write, finding no entry for its row, wrote straight to its members outside their
    /// turns (tests/raid5_dnd.rs).
    held: bool,
    row: u64,
    dirty: Vec<u128>,
    busy: Vec<u128>,
    version: Vec<u32>,
}

/// Row -> write-back entry, open addressing with linear probing over twice as many slots as
/// entries (so a probe ends at an empty slot soon), deletion by backward shift. Allocated
/// once; never grows (it holds at most one key per entry).
#[derive(Debug)]
struct RowIndex {
    /// (row, entry); `entry == u32::MAX` is empty.
    slots: Vec<(u64, u32)>,
    mask: usize,
}

impl RowIndex {
    const EMPTY: u32 = u32::MAX;

    fn new(entries: usize) -> RowIndex {
        let n = (entries * 2).next_power_of_two().max(2);
        RowIndex {
            slots: vec![(0, Self::EMPTY); n],
            mask: n - 1,
        }
    }

    #[inline]
    fn home(&self, row: u64) -> usize {
        // Fibonacci hashing: consecutive rows spread over the table.
        (row.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & self.mask
    }

    fn get(&self, row: u64) -> Option<u32> {
        let mut i = self.home(row);
        // Bounded: the table always has empty slots (at most half full).
        for _ in 0..self.slots.len() {
            let (r, e) = self.slots[i];
            if e == Self::EMPTY {
                return None;
            }
            if r == row {
                return Some(e);
            }
            i = (i + 1) & self.mask;
        }
        None
    }

    fn insert(&mut self, row: u64, entry: u32) {
        let mut i = self.home(row);
        for _ in 0..self.slots.len() {
            if self.slots[i].1 == Self::EMPTY || self.slots[i].0 == row {
                self.slots[i] = (row, entry);
                return;
            }
            i = (i + 1) & self.mask;
        }
        unreachable!("the row index holds at most half its slots");
    }

    fn remove(&mut self, row: u64) {
        let mut i = self.home(row);
        for _ in 0..self.slots.len() {
            let (r, e) = self.slots[i];
            if e == Self::EMPTY {
                return;
            }
            if r == row {
                break;
            }
            i = (i + 1) & self.mask;
        }
        if self.slots[i].0 != row || self.slots[i].1 == Self::EMPTY {
            return;
        }
        // Backward shift: move later members of the probe run into the hole.
        let mut hole = i;
        let mut j = (i + 1) & self.mask;
        for _ in 0..self.slots.len() {
            let (r, e) = self.slots[j];
            if e == Self::EMPTY {
                break;
            }
            let h = self.home(r);
            // The item at j may fill the hole if its home is not in (hole, j] cyclically.
            let dist_hole = hole.wrapping_sub(h) & self.mask;
            let dist_j = j.wrapping_sub(h) & self.mask;
            if dist_hole < dist_j {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
            j = (j + 1) & self.mask;
        }
        self.slots[hole] = (0, Self::EMPTY);
    }
}

#[derive(Clone, Copy, Debug)]
struct FlushCmd {
    entry: u32,
    member: u32,
    version: u32,
    mask: u128,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
struct DndStats {
    write_back_bytes: u64,
    window_ns: u64,
    plm_windows: bool,
    window_switches: u64,
    window_controls_unsupported: u64,
    buffered_writes: u64,
    buffer_waits: u64,
    reads_served_from_buffer: u64,
    flush_writes: u64,
    guard_skips: u64,
    occupancy_bytes: u64,
    occupancy_bytes_max: u64,
    /// The buffer holds one entry per row written (each with room for the whole row), so
    /// scattered small writes can run out of entries while `occupancy_bytes` is low: `entries`
    /// is how many there are, `entries_used_max` the most ever in use (`buffer_waits` counts
    /// writes that found none free).
    entries: u64,
    entries_used: u64,
    entries_used_max: u64,
}

struct Dnd {
    spec: DndSpec,
    /// The owner was told its window closes (PLM: deterministic again) ahead of its turn's end.
    guard_sent: bool,
    /// The latest time the volume was called at.
    now_ns: u64,
    owner: u32,
    next_switch_ns: u64,
    started: bool,
    entries: Vec<Entry>,
    free: Vec<u32>,
    /// Bytes per dirty bit (the members' block).
    granule: u32,
    flush_slots: Vec<Option<FlushCmd>>,
    flushes_out: u32,
    /// Window commands out, per member (one at a time).
    window_out: Vec<bool>,
    buf_waiters: VecDeque<u32>,
    flush_waiters: VecDeque<u32>,
    stats: DndStats,
    /// Row -> entry of the used entries (the lookup of every request; a scan of a 4,096-entry
    /// buffer per request and per event made D/ND 15x slower than plain raid5).
    rows: RowIndex,
    /// Per member, one bit per entry: its `dirty` for that member is not 0. `kick` visits only
    /// the entries with a bit set for the members it serves, in the order a scan would.
    has_dirty: Vec<Vec<u64>>,
    /// Dirty granules over all entries (what `occupancy_bytes` summed by a scan).
    dirty_granules: u64,
    /// Entries that may have become used and clean since the last `release_entries` (newly
    /// taken, or cleaned): it checks only these. Holds at most every entry once.
    maybe_clean: Vec<u32>,
}

impl Dnd {
    /// Bytes in the buffer newer than their member (dirty granules).
    fn occupancy_bytes(&self) -> u64 {
        self.dirty_granules * u64::from(self.granule)
    }

    /// Whether any entry is in use.
    fn any_used(&self) -> bool {
        self.free.len() < self.entries.len()
    }

    /// Sets entry `e`'s dirty bits for member `m` to `new`, keeping the counts and bit sets.
    fn set_dirty(&mut self, e: u32, m: u32, new: u128) {
        let old = std::mem::replace(&mut self.entries[e as usize].dirty[m as usize], new);
        self.dirty_granules =
            self.dirty_granules + u64::from(new.count_ones()) - u64::from(old.count_ones());
        let (w, b) = ((e / 64) as usize, e % 64);
        if new != 0 {
            self.has_dirty[m as usize][w] |= 1 << b;
        } else {
            self.has_dirty[m as usize][w] &= !(1 << b);
            self.maybe_clean.push(e);
        }
    }

    /// Asks member `m` to collect garbage now for at most `budget_ns` (control id `base + m`).
    fn gc_now(&mut self, base: u32, m: u32, budget_ns: u64, failed: Option<u32>, cx: &mut Cx) {
        if Some(m) == failed || self.window_out[m as usize] {
            return;
        }
        self.window_out[m as usize] = true;
        cx.out.cmd(MemberCmd {
            id: base + m,
            member: m,
            op: CmdOp::Control(Control::GcNow { budget_ns }),
            offset_bytes: 0,
            len_bytes: 0,
            buf: BufRef::None,
            fua: false,
        });
    }

    /// Selects member `m`'s PLM window (control id `base + m`), unless it is failed or its
    /// previous window command is still out.
    fn set_window(&mut self, base: u32, m: u32, win: Window, failed: Option<u32>, cx: &mut Cx) {
        if Some(m) == failed || self.window_out[m as usize] {
            return;
        }
        self.window_out[m as usize] = true;
        cx.out.cmd(MemberCmd {
            id: base + m,
            member: m,
            op: CmdOp::Control(Control::SetWindow(win)),
            offset_bytes: 0,
            len_bytes: 0,
            buf: BufRef::None,
            fua: false,
        });
    }
}

/// At most this many buffered writes to members in flight.
const FLUSH_MAX: u32 = 8;

/// The last 1/GUARD_DIVISOR of a member's turn starts no buffered write to it.
const GUARD_DIVISOR: u64 = 2;

/// The bitmap page's bytes (a member block of 4 KiB).
pub const BITMAP_PAGE_BYTES: u32 = 4096;
/// The page's header: magic, region rows, regions (8 bytes each); then one bit per region.
const BITMAP_HEADER_BYTES: usize = 24;
/// Most regions one page has bits for.
pub const BITMAP_REGIONS_MAX: u64 = ((BITMAP_PAGE_BYTES as usize - BITMAP_HEADER_BYTES) * 8) as u64;
/// The bitmap page's magic.
pub const BITMAP_MAGIC: &[u8; 8] = b"NINESBM1";
/// A set bit is cleared when its region has had no write for this long (at least one timer
/// pass, at most two), as md's bitmap daemon does.
const BITMAP_CLEAR_NS: u64 = 500_000_000;

/// The write-intent bitmap page as written to the members: header and one bit per region.
pub fn bitmap_page(region_rows: u64, bits: &[bool]) -> Vec<u8> {
    let mut page = vec![0u8; BITMAP_PAGE_BYTES as usize];
    fill_bitmap_page(&mut page, region_rows, bits);
    page
}

/// Writes the bitmap page into `page` (of [`BITMAP_PAGE_BYTES`]) in place.
fn fill_bitmap_page(page: &mut [u8], region_rows: u64, bits: &[bool]) {
    page.fill(0);
    page[..8].copy_from_slice(BITMAP_MAGIC);
    page[8..16].copy_from_slice(&region_rows.to_le_bytes());
    page[16..24].copy_from_slice(&(bits.len() as u64).to_le_bytes());
    for (i, &b) in bits.iter().enumerate() {
        if b {
            page[BITMAP_HEADER_BYTES + i / 8] |= 1 << (i % 8);
        }
    }
}

/// The regions set in a bitmap page written with `region_rows` and `regions`; `None` when the
/// page is not one (no magic, another geometry).
pub fn parse_bitmap_page(page: &[u8], region_rows: u64, regions: u64) -> Option<Vec<bool>> {
    if page.len() < BITMAP_PAGE_BYTES as usize
        || &page[..8] != BITMAP_MAGIC
        || page[8..16] != region_rows.to_le_bytes()
        || page[16..24] != regions.to_le_bytes()
        || regions > BITMAP_REGIONS_MAX
    {
        return None;
    }
    Some(
        (0..regions as usize)
            .map(|i| page[BITMAP_HEADER_BYTES + i / 8] & (1 << (i % 8)) != 0)
            .collect(),
    )
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BmPhase {
    Idle,
    /// Members flushing before a clearing write: the candidates stay in `clear`.
    Flushing,
    /// The page is being written: `image` is what it holds.
    Writing,
}

#[derive(Clone, Debug, Default, serde::Serialize)]
struct BitmapStats {
    region_rows: u64,
    regions: u64,
    page_offset_bytes: u64,
    /// Page writes that set bits (writes waited for them), and that cleared bits.
    set_writes: u64,
    clear_writes: u64,
    /// Client writes that waited for a bit to be written.
    write_waits: u64,
    /// Regions whose bit is set (wanted) now.
    dirty_regions: u64,
    dirty_regions_max: u64,
}

#[derive(Clone, Debug)]
struct Bitmap {
    region_rows: u64,
    page_offset: u64,
    /// Bits wanted on the members: set before a write, cleared lazily.
    want: Vec<bool>,
    /// Writes may go: set in a page write that completed, and not being cleared.
    durable: Vec<bool>,
    /// Written to since the last clearing pass.
    hot: Vec<bool>,
    /// Candidates of the clearing pass in progress.
    clear: Vec<bool>,
    /// Regions a write in flight touches (filled at each pass).
    busy: Vec<bool>,
    /// The page's bytes, built here before each write.
    page: Vec<u8>,
    /// What the page being written holds.
    image: Vec<bool>,
    phase: BmPhase,
    pending: u32,
    waiters: VecDeque<u32>,
    /// The next clearing pass (0: none due).
    next_clear_ns: u64,
    stats: BitmapStats,
}

/// What a RAID5 volume does beyond striping with parity (each a `--layout raid5` option).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Raid5Options {
    /// Start degraded with this member failed (`--failed`).
    pub failed: Option<u32>,
    /// Turns and a write-back buffer (`--policy sched|dnd`).
    pub dnd: Option<DndSpec>,
    /// Rebuild a replacement (`--rebuild`).
    pub rebuild: Option<RebuildSpec>,
    /// Fast-fail reads beyond this wait (`--fast-fail`).
    pub fast_fail_ns: Option<u64>,
    /// A write-intent bitmap with regions of this many rows (`nines serve` over members with
    /// superblocks): the data area ends a page earlier, and the page holds the bits.
    pub bitmap_region_rows: Option<u64>,
}

pub struct Raid5 {
    dnd: Option<Box<Dnd>>,
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
    /// The zero chunk ([`Raid5::zero_slot`]) holds zeros.
    zero_ready: bool,
    rebuild: Option<Rebuild>,
    /// Reads ask members to fail fast when they would wait longer than this (IODA): a busy
    /// member's piece is rebuilt from the others instead.
    fast_fail_ns: Option<u64>,
    bitmap: Option<Box<Bitmap>>,
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
    /// Of those, reads (a read waiting for a write of its row to finish).
    read_row_lock_waits: u64,
    /// Bytes clients wrote, and bytes written to members for them (data, parity, write-back
    /// flushes; not a rebuild's): their ratio is the array's write amplification.
    client_write_bytes: u64,
    member_write_bytes: u64,
    /// Pieces a member answered busy (fast-fail) and that were rebuilt from the others, and
    /// busy answers that could not be (another piece of the row rebuilt already): read again.
    fast_fail_rebuilt: u64,
    fast_fail_reread: u64,
}

/// The options' rules, before anything is allocated.
fn check_options(
    chunk_bytes: u64,
    member_sizes_bytes: &[u64],
    block_bytes: u32,
    opts: &Raid5Options,
) -> Result<(), ArrayError> {
    let Raid5Options {
        failed,
        dnd,
        rebuild,
        ..
    } = *opts;
    let n = member_sizes_bytes.len();
    if n < 3 {
        return Err(ArrayError::TooFewMembers {
            layout: "raid5",
            min: 3,
        });
    }
    let bb = u64::from(block_bytes.max(1));
    if chunk_bytes == 0 || !chunk_bytes.is_multiple_of(bb) || chunk_bytes > CHUNK_BYTES_MAX {
        return Err(ArrayError::Invalid(format!(
            "--chunk {chunk_bytes} must be a positive multiple of the members' {block_bytes}-byte block and at most 16 MiB"
        )));
    }
    let smallest = member_sizes_bytes.iter().copied().min().unwrap_or(0);
    if smallest < chunk_bytes {
        return Err(ArrayError::StripeTooLarge {
            option: "chunk",
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
    if let Some(rb) = rebuild {
        if rb.member as usize >= n {
            return Err(ArrayError::Invalid(format!(
                "--rebuild {}: the volume has members 0 to {}",
                rb.member,
                n - 1
            )));
        }
        if failed.is_some_and(|f| f != rb.member) {
            return Err(ArrayError::Invalid(format!(
                "--rebuild {} with --failed {}: only the failed member can be rebuilt",
                rb.member,
                failed.unwrap_or(0)
            )));
        }
        if dnd.is_some() {
            return Err(ArrayError::Invalid(
                "--rebuild runs without --policy: rebuild first, then turn the policy on".into(),
            ));
        }
    }
    Ok(())
}

impl Bitmap {
    /// The write-intent bitmap of regions of `rr` rows, its page just past the data area on
    /// every member; and the rows left for data.
    fn new(
        rr: u64,
        chunk_bytes: u64,
        smallest: u64,
        tags: u32,
    ) -> Result<(u64, Box<Bitmap>), ArrayError> {
        // The page sits just past the data area on every member.
        let rows = smallest.saturating_sub(u64::from(BITMAP_PAGE_BYTES)) / chunk_bytes;
        if rr == 0 || rows == 0 || chunk_bytes < u64::from(BITMAP_PAGE_BYTES) {
            return Err(ArrayError::Invalid(format!(
                "the write-intent bitmap needs regions of at least one row, chunks of at least {BITMAP_PAGE_BYTES} bytes and members of at least a chunk and a page ({chunk_bytes}-byte chunk, {smallest}-byte members)"
            )));
        }
        let regions = rows.div_ceil(rr);
        if regions > BITMAP_REGIONS_MAX {
            return Err(ArrayError::Invalid(format!(
                "the write-intent bitmap has room for {BITMAP_REGIONS_MAX} regions; {rows} rows in regions of {rr} make {regions}"
            )));
        }
        let r = regions as usize;
        Ok((
            rows,
            Box::new(Bitmap {
                region_rows: rr,
                page_offset: rows * chunk_bytes,
                want: vec![false; r],
                durable: vec![false; r],
                hot: vec![false; r],
                clear: vec![false; r],
                busy: vec![false; r],
                page: vec![0; BITMAP_PAGE_BYTES as usize],
                image: vec![false; r],
                phase: BmPhase::Idle,
                pending: 0,
                waiters: VecDeque::with_capacity(tags.max(1) as usize),
                next_clear_ns: 0,
                stats: BitmapStats {
                    region_rows: rr,
                    regions,
                    page_offset_bytes: rows * chunk_bytes,
                    ..BitmapStats::default()
                },
            }),
        ))
    }
}

impl Dnd {
    /// The write-back buffer and turns of `--policy sched|dnd` over `n` members.
    fn new(
        spec: DndSpec,
        n: usize,
        chunk_bytes: u64,
        block_bytes: u32,
        tags: u32,
    ) -> Result<Box<Dnd>, ArrayError> {
        if spec.window_ns == 0 {
            return Err(ArrayError::Invalid("--window must be longer than 0".into()));
        }
        let granule = block_bytes.max(1);
        if chunk_bytes / u64::from(granule) > 128 {
            return Err(ArrayError::Invalid(format!(
                "the D/ND write-back buffer tracks at most 128 blocks per chunk: use --chunk {} or smaller",
                128 * u64::from(granule)
            )));
        }
        let entries = spec.write_back_bytes / (n as u64 * chunk_bytes);
        if entries == 0 || spec.write_back_bytes > 4 << 30 {
            return Err(ArrayError::Invalid(format!(
                "--write-back {} bytes: give at least one row ({} bytes: {n} members x the chunk) and at most 4 GiB",
                spec.write_back_bytes,
                n as u64 * chunk_bytes
            )));
        }
        let e = entries as usize;
        Ok(Box::new(Dnd {
            spec,
            guard_sent: false,
            now_ns: 0,
            owner: 0,
            next_switch_ns: 0,
            started: false,
            entries: (0..e)
                .map(|_| Entry {
                    used: false,
                    held: false,
                    row: 0,
                    dirty: vec![0; n],
                    busy: vec![0; n],
                    version: vec![0; n],
                })
                .collect(),
            free: (0..e as u32).rev().collect(),
            granule,
            flush_slots: vec![None; FLUSH_MAX as usize],
            flushes_out: 0,
            window_out: vec![false; n],
            buf_waiters: VecDeque::with_capacity(tags as usize),
            flush_waiters: VecDeque::with_capacity(tags as usize),
            rows: RowIndex::new(e),
            has_dirty: vec![vec![0; e.div_ceil(64)]; n],
            dirty_granules: 0,
            // Each entry is pushed when its first write lands and when a member's bits are cleaned:
            // at most 1 + n times between two releases; it never grows past that.
            maybe_clean: Vec::with_capacity(e * (n + 1) + 16),
            stats: DndStats {
                write_back_bytes: entries * n as u64 * chunk_bytes,
                entries,
                window_ns: spec.window_ns,
                plm_windows: spec.plm,
                ..DndStats::default()
            },
        }))
    }
}

impl Raid5 {
    pub fn new(
        chunk_bytes: u64,
        member_sizes_bytes: &[u64],
        block_bytes: u32,
        tags: u32,
        opts: Raid5Options,
    ) -> Result<Raid5, ArrayError> {
        check_options(chunk_bytes, member_sizes_bytes, block_bytes, &opts)?;
        let Raid5Options {
            failed,
            dnd,
            rebuild,
            fast_fail_ns,
            bitmap_region_rows,
        } = opts;
        let n = member_sizes_bytes.len();
        let smallest = member_sizes_bytes.iter().copied().min().unwrap_or(0);
        let tags = tags.max(1);
        let scratch_bytes = u64::from(tags) * n as u64 * chunk_bytes;
        if scratch_bytes > 1 << 30 {
            return Err(ArrayError::Invalid(format!(
                "raid5 would need {} MiB of parity buffers ({tags} I/Os x {n} members x {chunk_bytes}-byte chunks); use a smaller --chunk or --iodepth",
                scratch_bytes >> 20
            )));
        }
        let (rows, bitmap) = match bitmap_region_rows {
            None => (smallest / chunk_bytes, None),
            Some(rr) => {
                let (rows, b) = Bitmap::new(rr, chunk_bytes, smallest, tags)?;
                (rows, Some(b))
            }
        };
        let dnd = match dnd {
            None => None,
            Some(spec) => Some(Dnd::new(spec, n, chunk_bytes, block_bytes, tags)?),
        };
        // A row's phase sends at most: a read, n - 1 pieces (fast-fail), n - 1 reads to rebuild
        // one of them and n - 2 second reads of other busy ones; a write, n - 1 data and the
        // parity; a flush, n.
        let per_tag = 3 * n as u32;
        Ok(Raid5 {
            dnd,
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
                    sent: 0,
                    result: IoResult::Ok,
                    plan: Plan::Full,
                    pieces: Vec::with_capacity(n),
                    lo: 0,
                    hi: 0,
                    redo: false,
                    zero: false,
                })
                .collect(),
            waiting: VecDeque::with_capacity(tags as usize),
            failed: rebuild.map(|r| r.member).or(failed),
            avoid: None,
            zero_ready: false,
            rebuild: rebuild.map(|spec| Rebuild {
                spec,
                cursor: 0,
                in_flight: false,
                lock_wait: false,
                writing: false,
                pending: 0,
                next_ns: 0,
                replacement_failed: false,
                stats: RebuildStats {
                    member: spec.member,
                    rows_total: rows,
                    rate_bytes_per_s: spec.rate_bytes_per_s,
                    ..RebuildStats::default()
                },
            }),
            fast_fail_ns,
            bitmap,
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

    /// Where write `t`'s bytes at `offset` into its request are: the client's buffer, or the
    /// zero chunk for WRITE_ZEROES and TRIM (a piece never spans more than a chunk).
    #[inline]
    fn wsrc(&self, t: u32, offset: u32) -> BufRef {
        if self.reqs[t as usize].zero {
            self.zero_slot()
        } else {
            Self::client(t, offset)
        }
    }

    /// The scratch chunk of zeros (after the bitmap's page), zeroed at its first use.
    #[inline]
    fn zero_slot(&self) -> BufRef {
        let entries = self.dnd.as_ref().map_or(0, |d| d.entries.len() as u32);
        let rebuild = u32::from(self.rebuild.is_some());
        let bitmap = u32::from(self.bitmap.is_some());
        BufRef::Scratch {
            index: (self.tags + entries + rebuild) * self.n + bitmap,
            offset: 0,
        }
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
        let k = r.sent;
        assert!(
            k < self.per_tag,
            "raid5 sent more commands for one row than its bound"
        );
        r.pending += 1;
        r.sent += 1;
        let id = t * self.per_tag + k;
        self.cmd_member[id as usize] = member;
        match op {
            CmdOp::Read | CmdOp::FastFailRead { .. } => self.stats.member_reads += 1,
            CmdOp::Write => {
                self.stats.member_writes += 1;
                self.stats.member_write_bytes += u64::from(len);
            }
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
        self.rebuild
            .as_ref()
            .is_some_and(|rb| rb.in_flight && rb.cursor == row)
            || self.reqs.iter().enumerate().any(|(i, q)| {
                i as u32 != t && q.row == row && matches!(q.phase, Phase::Read | Phase::Write)
            })
    }

    /// The member row `row` is degraded around: the failed member, unless a rebuild onto its
    /// replacement has passed the row.
    #[inline]
    fn failed_at(&self, row: u64) -> Option<u32> {
        match &self.rebuild {
            Some(rb)
                if !rb.replacement_failed
                    && row < rb.cursor
                    && self.failed == Some(rb.spec.member) =>
            {
                None
            }
            _ => self.failed,
        }
    }

    /// Ids of the rebuild's commands: one per member.
    #[inline]
    fn rebuild_base(&self) -> u32 {
        self.ctl_base() + self.n + FLUSH_MAX
    }

    /// The rebuild's scratch chunk for member `m`.
    #[inline]
    fn rebuild_slot(&self, m: u32) -> BufRef {
        let entries = self.dnd.as_ref().map_or(0, |d| d.entries.len() as u32);
        BufRef::Scratch {
            index: (self.tags + entries) * self.n + m,
            offset: 0,
        }
    }

    /// Starts rebuilding the next row when the rate allows and no request holds it.
    fn rebuild_kick(&mut self, now_ns: u64, cx: &mut Cx) {
        let (n, chunk) = (self.n, self.chunk);
        let Some(rb) = self.rebuild.as_ref() else {
            return;
        };
        if rb.in_flight
            || rb.stats.aborted.is_some()
            || rb.cursor >= rb.stats.rows_total
            || now_ns < rb.next_ns
        {
            return;
        }
        let (row, f) = (rb.cursor, rb.spec.member);
        if self.row_locked(u32::MAX, row) {
            if let Some(rb) = self.rebuild.as_mut() {
                rb.stats.row_lock_waits += u64::from(!rb.lock_wait);
                rb.lock_wait = true;
            }
            return;
        }
        let base = self.rebuild_base();
        let rb = self.rebuild.as_mut().expect("rebuild");
        rb.lock_wait = false;
        rb.stats.started_ns.get_or_insert(now_ns);
        rb.in_flight = true;
        rb.writing = false;
        rb.pending = n - 1;
        rb.stats.member_reads += u64::from(n - 1);
        for k in 0..n {
            if k != f {
                let buf = self.rebuild_slot(k);
                cx.out.cmd(MemberCmd {
                    id: base + k,
                    member: k,
                    op: CmdOp::Read,
                    offset_bytes: row * chunk,
                    len_bytes: chunk as u32,
                    buf,
                    fua: false,
                });
            }
        }
    }

    /// A rebuild command is back: after the reads, the lost chunk is their XOR, written to the
    /// replacement; after the write, the row is healthy.
    fn rebuild_done(&mut self, now_ns: u64, done: CmdDone, cx: &mut Cx) {
        let (n, chunk) = (self.n, self.chunk);
        let m = done.id - self.rebuild_base();
        let f = {
            let rb = self
                .rebuild
                .as_mut()
                .expect("rebuild command without a rebuild");
            assert!(
                rb.in_flight && rb.pending > 0,
                "completion of a rebuild command not in flight"
            );
            rb.pending -= 1;
            rb.spec.member
        };
        if done.result != CmdResult::Ok {
            // The replacement failing leaves the volume degraded, as before the rebuild; another
            // member failing is a second failure: the rows not yet rebuilt are beyond repair.
            let why = if m == f {
                format!("the replacement member {f} failed")
            } else {
                format!("member {m} failed while member {f} was being rebuilt")
            };
            self.stats.members_failed_on_error += 1;
            let rb = self.rebuild.as_mut().expect("rebuild");
            rb.stats.aborted.get_or_insert(why);
        }
        let rb = self.rebuild.as_ref().expect("rebuild");
        if rb.pending > 0 {
            return;
        }
        if rb.stats.aborted.is_some() {
            let rb = self.rebuild.as_mut().expect("rebuild");
            rb.in_flight = false;
            rb.replacement_failed |= m == f;
            self.wake_waiters(cx);
            return;
        }
        let row = rb.cursor;
        if !rb.writing {
            let dst = self.rebuild_slot(f);
            cx.data.zero(dst, chunk as u32);
            for k in 0..n {
                if k != f {
                    cx.data.xor(dst, self.rebuild_slot(k), chunk as u32);
                }
            }
            let id = self.rebuild_base() + f;
            let rb = self.rebuild.as_mut().expect("rebuild");
            rb.writing = true;
            rb.pending = 1;
            cx.out.cmd(MemberCmd {
                id,
                member: f,
                op: CmdOp::Write,
                offset_bytes: row * chunk,
                len_bytes: chunk as u32,
                buf: dst,
                fua: false,
            });
            return;
        }
        let rb = self.rebuild.as_mut().expect("rebuild");
        rb.in_flight = false;
        rb.writing = false;
        rb.cursor += 1;
        rb.stats.rows_rebuilt = rb.cursor;
        rb.stats.bytes_written += chunk;
        if rb.spec.rate_bytes_per_s > 0 {
            let started = rb.stats.started_ns.unwrap_or(now_ns);
            let due = u128::from(rb.stats.bytes_written) * 1_000_000_000
                / u128::from(rb.spec.rate_bytes_per_s);
            rb.next_ns = started.saturating_add(u64::try_from(due).unwrap_or(u64::MAX));
        }
        if rb.cursor >= rb.stats.rows_total {
            rb.stats.done_ns = Some(now_ns);
            self.failed = None;
        }
        self.wake_waiters(cx);
        self.rebuild_kick(now_ns, cx);
    }

    /// Ids of the bitmap's commands: one per member (a page write or a flush).
    #[inline]
    fn bitmap_base(&self) -> u32 {
        self.rebuild_base() + self.n
    }

    /// The scratch buffer the bitmap page is written from (after the rebuild's chunks).
    #[inline]
    fn bitmap_slot(&self) -> BufRef {
        let entries = self.dnd.as_ref().map_or(0, |d| d.entries.len() as u32);
        let rebuild = u32::from(self.rebuild.is_some());
        BufRef::Scratch {
            index: (self.tags + entries + rebuild) * self.n,
            offset: 0,
        }
    }

    /// The members the bitmap goes to (and flushes reach): all but a failed one (a
    /// replacement being rebuilt takes writes, so it gets them too).
    fn bitmap_skip(&self) -> Option<u32> {
        match &self.rebuild {
            Some(rb) if !rb.replacement_failed => None,
            _ => self.failed,
        }
    }

    /// Regions `[first, last]` of request `t` (a write).
    fn regions_of(&self, t: u32) -> (usize, usize) {
        let rr = self.bitmap.as_ref().map_or(1, |b| b.region_rows);
        let q = &self.reqs[t as usize];
        ((q.row / rr) as usize, (q.row_last / rr) as usize)
    }

    /// Marks in `busy` the regions a client write in flight (or waiting) touches; every region
    /// while the write-back buffer holds anything. No allocation: the vector is the bitmap's.
    fn mark_busy(&mut self) {
        let Some(mut busy) = self.bitmap.as_mut().map(|b| std::mem::take(&mut b.busy)) else {
            return;
        };
        let buffered = self.dnd.as_ref().is_some_and(|d| d.any_used());
        busy.fill(buffered);
        for t in 0..self.tags {
            let q = &self.reqs[t as usize];
            if q.phase != Phase::Idle && q.io.op == VolOp::Write {
                let (a, b) = self.regions_of(t);
                busy[a..=b].fill(true);
            }
        }
        if let Some(bm) = self.bitmap.as_mut() {
            bm.busy = busy;
        }
    }

    /// Sends the bitmap page as `image` to every working member (FUA).
    fn bitmap_write(&mut self, cx: &mut Cx) {
        let skip = self.bitmap_skip();
        let base = self.bitmap_base();
        let buf = self.bitmap_slot();
        let n = self.n;
        let bm = self.bitmap.as_mut().expect("bitmap");
        bm.image.copy_from_slice(&bm.want);
        fill_bitmap_page(&mut bm.page, bm.region_rows, &bm.image);
        cx.data.write_bytes(buf, &bm.page);
        bm.phase = BmPhase::Writing;
        bm.pending = 0;
        let off = bm.page_offset;
        for m in 0..n {
            if Some(m) != skip {
                bm.pending += 1;
                cx.out.cmd(MemberCmd {
                    id: base + m,
                    member: m,
                    op: CmdOp::Write,
                    offset_bytes: off,
                    len_bytes: BITMAP_PAGE_BYTES,
                    buf,
                    fua: true,
                });
            }
        }
    }

    /// Writes the bits waiting writes need, when no bitmap command is out.
    fn bitmap_kick(&mut self, cx: &mut Cx) {
        let Some(bm) = self.bitmap.as_ref() else {
            return;
        };
        if bm.phase != BmPhase::Idle || bm.waiters.is_empty() {
            return;
        }
        self.bitmap.as_mut().expect("bitmap").stats.set_writes += 1;
        self.bitmap_write(cx);
        if self.bitmap.as_ref().is_some_and(|b| b.pending == 0) {
            self.bitmap_written(cx);
        }
    }

    /// A clearing pass (timer): regions idle since the last pass are flushed, then cleared.
    fn bitmap_pass(&mut self, now_ns: u64, cx: &mut Cx) {
        let Some(bm) = self.bitmap.as_ref() else {
            return;
        };
        if bm.phase != BmPhase::Idle || now_ns < bm.next_clear_ns || bm.next_clear_ns == 0 {
            return;
        }
        self.mark_busy();
        let skip = self.bitmap_skip();
        let base = self.bitmap_base();
        let n = self.n;
        let bm = self.bitmap.as_mut().expect("bitmap");
        let mut any = false;
        for r in 0..bm.want.len() {
            bm.clear[r] = bm.want[r] && !bm.hot[r] && !bm.busy[r];
            any |= bm.clear[r];
        }
        bm.hot.fill(false);
        bm.next_clear_ns = if bm.want.iter().any(|&w| w) {
            now_ns + BITMAP_CLEAR_NS
        } else {
            0
        };
        if !any {
            return;
        }
        // The rows written before this pass are made durable before their bits go.
        bm.phase = BmPhase::Flushing;
        bm.pending = 0;
        for m in 0..n {
            if Some(m) != skip {
                bm.pending += 1;
                cx.out.cmd(MemberCmd {
                    id: base + m,
                    member: m,
                    op: CmdOp::Flush,
                    offset_bytes: 0,
                    len_bytes: 0,
                    buf: BufRef::None,
                    fua: false,
                });
            }
        }
        if bm.pending == 0 {
            self.bitmap_flushed(now_ns, cx);
        }
    }

    /// The clearing pass's flush is done: candidates still idle are cleared on the members.
    fn bitmap_flushed(&mut self, now_ns: u64, cx: &mut Cx) {
        self.mark_busy();
        let bm = self.bitmap.as_mut().expect("bitmap");
        bm.phase = BmPhase::Idle;
        let mut any = false;
        for r in 0..bm.want.len() {
            // Still idle since the pass (a region written meanwhile keeps its bit).
            bm.clear[r] &= !bm.hot[r] && !bm.busy[r];
            if bm.clear[r] {
                any = true;
                // Writes to it wait again until a page with its bit set is on the members.
                bm.want[r] = false;
                bm.durable[r] = false;
            }
        }
        if !any {
            self.bitmap_kick(cx);
            return;
        }
        bm.stats.clear_writes += 1;
        bm.stats.dirty_regions = bm.want.iter().filter(|&&w| w).count() as u64;
        if bm.next_clear_ns == 0 && bm.stats.dirty_regions > 0 {
            bm.next_clear_ns = now_ns + BITMAP_CLEAR_NS;
        }
        self.bitmap_write(cx);
        if self.bitmap.as_ref().is_some_and(|b| b.pending == 0) {
            self.bitmap_written(cx);
        }
    }

    /// The page is on the members: its bits are durable; writes waiting for them go.
    fn bitmap_written(&mut self, cx: &mut Cx) {
        let bm = self.bitmap.as_mut().expect("bitmap");
        bm.phase = BmPhase::Idle;
        for r in 0..bm.image.len() {
            bm.durable[r] = bm.image[r];
        }
        // Bounded: each waiter is looked at once; one still waiting queues again.
        for _ in 0..self.bitmap.as_ref().map_or(0, |b| b.waiters.len()) {
            let Some(t) = self.bitmap.as_mut().and_then(|b| b.waiters.pop_front()) else {
                break;
            };
            let (a, b) = self.regions_of(t);
            let bm = self.bitmap.as_mut().expect("bitmap");
            if (a..=b).all(|r| bm.durable[r]) {
                self.reqs[t as usize].phase = Phase::Idle;
                self.start_row(t, cx);
            } else {
                for r in a..=b {
                    bm.want[r] = true;
                }
                bm.waiters.push_back(t);
            }
        }
        self.bitmap_kick(cx);
    }

    /// A bitmap command is back.
    fn bitmap_done(&mut self, now_ns: u64, done: CmdDone, cx: &mut Cx) {
        let m = done.id - self.bitmap_base();
        if done.result != CmdResult::Ok {
            // The member is failed (its bitmap no longer counts); a second failure is beyond
            // the parity, and the writes' own commands will say so.
            self.fail_member(m);
        }
        let bm = self
            .bitmap
            .as_mut()
            .expect("bitmap command without a bitmap");
        assert!(
            bm.pending > 0,
            "completion of a bitmap command not in flight"
        );
        bm.pending -= 1;
        if bm.pending > 0 {
            return;
        }
        match bm.phase {
            BmPhase::Flushing => self.bitmap_flushed(now_ns, cx),
            BmPhase::Writing => self.bitmap_written(cx),
            BmPhase::Idle => unreachable!("bitmap commands out while idle"),
        }
    }

    /// Starts write `t` once its regions' bits are durable.
    fn start_write(&mut self, now_ns: u64, t: u32, cx: &mut Cx) {
        if self.bitmap.is_none() {
            self.start_row(t, cx);
            return;
        }
        let (a, b) = self.regions_of(t);
        let bm = self.bitmap.as_mut().expect("bitmap");
        let mut ready = true;
        for r in a..=b {
            bm.hot[r] = true;
            bm.want[r] = true;
            ready &= bm.durable[r];
        }
        let dirty = bm.want.iter().filter(|&&w| w).count() as u64;
        bm.stats.dirty_regions = dirty;
        bm.stats.dirty_regions_max = bm.stats.dirty_regions_max.max(dirty);
        if bm.next_clear_ns == 0 {
            bm.next_clear_ns = now_ns + BITMAP_CLEAR_NS;
        }
        if ready {
            self.start_row(t, cx);
            return;
        }
        bm.stats.write_waits += 1;
        assert!(
            bm.waiters.len() < self.tags as usize,
            "more bitmap waiters than tags"
        );
        bm.waiters.push_back(t);
        self.reqs[t as usize].phase = Phase::Bitmap;
        self.bitmap_kick(cx);
    }

    /// The rebuild's and the D/ND turns' timer.
    fn timer_ns(&self) -> Option<u64> {
        if let Some(rb) = &self.rebuild
            && !rb.in_flight
            && !rb.lock_wait
            && rb.stats.aborted.is_none()
            && rb.cursor < rb.stats.rows_total
        {
            return Some(rb.next_ns);
        }
        self.dnd.as_ref().filter(|d| d.started).map(|d| {
            if d.spec.plm && !d.guard_sent {
                d.next_switch_ns - d.spec.window_ns / GUARD_DIVISOR
            } else {
                d.next_switch_ns
            }
        })
    }
    fn on_own_timer(&mut self, now_ns: u64, cx: &mut Cx) {
        if self.rebuild.is_some() {
            self.rebuild_kick(now_ns, cx);
            return;
        }
        let base = self.ctl_base();
        let failed = self.failed;
        if let Some(d) = self.dnd.as_mut() {
            d.now_ns = now_ns;
            if d.spec.plm && !d.guard_sent && now_ns < d.next_switch_ns {
                // The guard: the owner's garbage collection stops before reads come back to
                // it, so none spills into its deterministic window (IODA's guard time).
                d.guard_sent = true;
                let m = d.owner;
                d.set_window(base, m, Window::Deterministic, failed, cx);
                return;
            }
        }
        self.switch_window(now_ns, cx);
    }

    /// Starts request `t` on its current row, or queues it behind the row's lock.
    fn start_row(&mut self, t: u32, cx: &mut Cx) {
        let row = self.reqs[t as usize].row;
        if self.row_locked(t, row) {
            self.stats.row_lock_waits += 1;
            self.stats.read_row_lock_waits += u64::from(self.reqs[t as usize].io.op == VolOp::Read);
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
        let failed = self.failed_at(row);
        {
            let q = &mut self.reqs[t as usize];
            q.lo = lo;
            q.hi = hi;
            q.pending = 0;
            q.sent = 0;
            q.redo = false;
        }
        if failed.is_some() {
            self.stats.degraded_rows += 1;
        }
        // Out of the request while commands are sent (no allocation), put back below.
        let mut entry = self.entry_of(row);
        if io.op == VolOp::Write && entry.is_none() && self.dnd.is_some() {
            // A write needs room in the write-back buffer before it reads anything.
            match self.take_entry(row) {
                Some(e) => entry = Some(e),
                None => {
                    let d = self.dnd.as_mut().expect("D/ND");
                    d.stats.buffer_waits += 1;
                    d.buf_waiters.push_back(t);
                    let q = &mut self.reqs[t as usize];
                    q.pieces = pieces;
                    q.phase = Phase::Waiting;
                    return;
                }
            }
        }
        let pieces = match io.op {
            VolOp::Read => self.plan_read(t, pieces, entry, cx),
            VolOp::Write => self.plan_write(t, pieces, cx),
            VolOp::Flush | VolOp::Trim | VolOp::WriteZeroes => unreachable!("handled in submit"),
        };
        if let Some(pieces) = pieces {
            self.reqs[t as usize].pieces = pieces;
        }
    }

    /// A free write-back entry for `row`, held by the write taking it (None: the buffer is full).
    fn take_entry(&mut self, row: u64) -> Option<u32> {
        let d = self.dnd.as_mut()?;
        let e = d.free.pop()?;
        let ent = &mut d.entries[e as usize];
        assert!(!ent.used && !ent.held, "a free entry in use");
        ent.used = true;
        ent.held = true;
        ent.row = row;
        d.rows.insert(row, e);
        d.stats.entries_used = (d.entries.len() - d.free.len()) as u64;
        d.stats.entries_used_max = d.stats.entries_used_max.max(d.stats.entries_used);
        Some(e)
    }

    /// A read's row: each piece from its member, from the write-back buffer when newer there,
    /// or rebuilt from the others (a failed member, or the turn's owner). The pieces, unless the
    /// read finished at once (then they are back in the request).
    fn plan_read(
        &mut self,
        t: u32,
        pieces: Vec<Piece>,
        entry: Option<u32>,
        cx: &mut Cx,
    ) -> Option<Vec<Piece>> {
        let n = self.n;
        let row = self.reqs[t as usize].row;
        let base = row * self.chunk;
        let failed = self.failed_at(row);
        self.reqs[t as usize].phase = Phase::Read;
        // D/ND with fast-fail (IODA: PLM windows plus busy answers): the turn's owner, the
        // one member outside its deterministic window, is not rebuilt up front but asked
        // with a fast-fail read, so it serves the read when it is not busy beyond the
        // threshold and has the piece rebuilt (from members in their deterministic
        // windows) when it is. The other members get plain reads: rebuilding one of
        // their pieces would read the owner, the member most likely busy. Without
        // fast-fail the owner's pieces are always rebuilt.
        let owner_fast_fail = self.fast_fail_ns.is_some() && self.dnd.is_some();
        let owner = self.avoid;
        let avoid = if owner_fast_fail { None } else { self.avoid };
        let gone = failed.or(avoid);
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
            } else if let Some(e) = entry
                && self.covered(e, m, p.a, p.b)
            {
                // Newer in the write-back buffer than on the member: served from it.
                self.overlay(e, m, p.a, p.b, Self::client(t, p.client), cx);
                if let Some(d) = self.dnd.as_mut() {
                    d.stats.reads_served_from_buffer += 1;
                }
            } else {
                // With a fast-fail threshold, and while the parity could still rebuild
                // this piece, the member may answer busy instead of making it wait.
                let op = match self.fast_fail_ns {
                    Some(threshold_ns)
                        if gone.is_none() && (!owner_fast_fail || owner == Some(m)) =>
                    {
                        CmdOp::FastFailRead { threshold_ns }
                    }
                    _ => CmdOp::Read,
                };
                self.send(
                    t,
                    m,
                    op,
                    base + u64::from(p.a),
                    p.b - p.a,
                    Self::client(t, p.client),
                    cx,
                );
            }
        }
        self.reqs[t as usize].plan = Plan::Read { rebuild };
        if self.reqs[t as usize].pending == 0 {
            self.reqs[t as usize].pieces = pieces;
            self.reads_done(t, cx);
            return None;
        }
        Some(pieces)
    }

    /// A write's row: full rows and rows around a failed parity go to the write phase at
    /// once; others read what their parity needs first (read-modify-write of the written
    /// pieces, or reconstruct-write from the rest of the row, whichever reads less). The
    /// pieces, unless the write phase has them already.
    fn plan_write(&mut self, t: u32, pieces: Vec<Piece>, cx: &mut Cx) -> Option<Vec<Piece>> {
        let (n, c) = (self.n, self.chunk);
        let (row, lo, hi) = {
            let q = &self.reqs[t as usize];
            (q.row, q.lo, q.hi)
        };
        let base = row * c;
        let p_member = self.parity_member(row);
        let failed = self.failed_at(row);
        let full =
            pieces.len() as u32 == n - 1 && pieces.iter().all(|p| p.a == 0 && u64::from(p.b) == c);
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
                return None;
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
                self.read_parity(t, p_member, base + u64::from(lo), hi - lo, cx);
            }
            Plan::Rcw => {
                self.reqs[t as usize].phase = Phase::Read;
                self.stats.rcw_rows += 1;
                for j in 0..n - 1 {
                    let m = self.data_member(row, j);
                    if Some(m) != failed {
                        let slot = self.slot(t, j, 0);
                        self.send(t, m, CmdOp::Read, base + u64::from(lo), hi - lo, slot, cx);
                    }
                }
                if failed.is_some() {
                    self.read_parity(t, p_member, base + u64::from(lo), hi - lo, cx);
                }
            }
            Plan::Read { .. } => unreachable!(),
        }
        Some(pieces)
    }

    /// Reads the row's parity range into request `t`'s parity slot (the last).
    fn read_parity(&mut self, t: u32, p_member: u32, offset_bytes: u64, len: u32, cx: &mut Cx) {
        let slot = self.slot(t, self.n - 1, 0);
        self.send(t, p_member, CmdOp::Read, offset_bytes, len, slot, cx);
    }

    /// Computes the row's parity (by its plan) and sends the row's writes.
    fn write_phase(&mut self, t: u32, cx: &mut Cx) {
        let n = self.n;
        let (row, plan, lo, hi) = {
            let q = &self.reqs[t as usize];
            (q.row, q.plan, q.lo, q.hi)
        };
        let pieces = std::mem::take(&mut self.reqs[t as usize].pieces);
        let failed = self.failed_at(row);
        let p_member = self.parity_member(row);
        let base = row * self.chunk;
        let pslot = |s: &Self, off: u32| s.slot(t, n - 1, off);
        let len = hi - lo;
        let entry = self.entry_of(row);
        if let Some(e) = entry {
            // What was read from members, brought up to date with the buffer's newer bytes.
            match plan {
                Plan::Rmw => {
                    for p in &pieces {
                        let m = self.data_member(row, p.j);
                        self.overlay(e, m, p.a, p.b, self.slot(t, p.j, 0), cx);
                    }
                    self.overlay(e, p_member, lo, hi, pslot(self, 0), cx);
                }
                Plan::Rcw => {
                    for j in 0..n - 1 {
                        let m = self.data_member(row, j);
                        self.overlay(e, m, lo, hi, self.slot(t, j, 0), cx);
                    }
                    self.overlay(e, p_member, lo, hi, pslot(self, 0), cx);
                }
                _ => {}
            }
        }
        match plan {
            Plan::Full => {
                self.stats.full_rows += 1;
                cx.data.zero(pslot(self, 0), len);
                for p in &pieces {
                    cx.data.xor(pslot(self, 0), self.wsrc(t, p.client), len);
                }
            }
            Plan::Rmw => {
                for p in &pieces {
                    let at = pslot(self, p.a - lo);
                    cx.data.xor(at, self.slot(t, p.j, 0), p.b - p.a);
                    cx.data.xor(at, self.wsrc(t, p.client), p.b - p.a);
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
                        self.wsrc(t, p.client),
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
        if let Some(e) = entry {
            self.buffer_row(t, e, &pieces, cx);
            self.reqs[t as usize].pieces = pieces;
            self.row_done(t, cx);
            self.kick(cx);
            return;
        }
        self.reqs[t as usize].phase = Phase::Write;
        self.reqs[t as usize].pending = 0;
        self.reqs[t as usize].sent = 0;
        for p in &pieces {
            let m = self.data_member(row, p.j);
            if Some(m) != failed {
                self.send(
                    t,
                    m,
                    CmdOp::Write,
                    base + u64::from(p.a),
                    p.b - p.a,
                    self.wsrc(t, p.client),
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

    /// Write-back: request `t`'s new bytes (its pieces and, unless the row's parity member is
    /// failed or the plan writes data only, the parity computed into its slot) go into the row's
    /// buffer entry `e`; each member gets them in its turn.
    fn buffer_row(&mut self, t: u32, e: u32, pieces: &[Piece], cx: &mut Cx) {
        let n = self.n;
        let (row, plan, lo, hi) = {
            let q = &self.reqs[t as usize];
            (q.row, q.plan, q.lo, q.hi)
        };
        let failed = self.failed_at(row);
        let p_member = self.parity_member(row);
        let len = hi - lo;
        let pslot = |s: &Self, off: u32| s.slot(t, n - 1, off);
        if let Some(d) = self.dnd.as_mut()
            && std::mem::take(&mut d.entries[e as usize].held)
        {
            // Released like any other entry from now on, once clean.
            d.maybe_clean.push(e);
        }
        let mut touched = 0u32;
        for p in pieces {
            let m = self.data_member(row, p.j);
            cx.data.copy(
                self.entry_slot(e, m, p.a),
                self.wsrc(t, p.client),
                p.b - p.a,
            );
            let mk = self.mask(p.a, p.b);
            let d = self.dnd.as_mut().expect("D/ND");
            let old = d.entries[e as usize].dirty[m as usize];
            d.set_dirty(e, m, old | mk);
            touched |= 1 << m;
        }
        if plan != Plan::DataOnly && failed != Some(p_member) {
            cx.data
                .copy(self.entry_slot(e, p_member, lo), pslot(self, 0), len);
            let mk = self.mask(lo, hi);
            let d = self.dnd.as_mut().expect("D/ND");
            let old = d.entries[e as usize].dirty[p_member as usize];
            d.set_dirty(e, p_member, old | mk);
            touched |= 1 << p_member;
        }
        let d = self.dnd.as_mut().expect("D/ND");
        for m in 0..n {
            if touched & (1 << m) != 0 {
                d.entries[e as usize].version[m as usize] =
                    d.entries[e as usize].version[m as usize].wrapping_add(1);
            }
        }
        d.stats.buffered_writes += 1;
        let occ = d.occupancy_bytes();
        d.stats.occupancy_bytes = occ;
        d.stats.occupancy_bytes_max = d.stats.occupancy_bytes_max.max(occ);
    }

    /// Request `t`'s row is finished: next row, or done; then waiters may go.
    fn row_done(&mut self, t: u32, cx: &mut Cx) {
        let (row, op) = (self.reqs[t as usize].row, self.reqs[t as usize].io.op);
        if op == VolOp::Write
            && let Some(e) = self.entry_of(row)
            && let Some(d) = self.dnd.as_mut()
            && d.entries[e as usize].held
        {
            // A write that failed before its bytes reached the entry it took: the entry is
            // released like any other (it is clean).
            d.entries[e as usize].held = false;
            d.maybe_clean.push(e);
            self.release_entries(cx);
        }
        let q = &mut self.reqs[t as usize];
        if q.row < q.row_last && q.result == IoResult::Ok {
            q.row += 1;
            q.phase = Phase::Idle;
            self.start_row(t, cx);
        } else if q.io.fua
            && q.io.op == VolOp::Write
            && q.result == IoResult::Ok
            && self.dnd.is_some()
        {
            // A FUA write under D/ND went into the write-back buffer, not to its members: it
            // is acknowledged as a FLUSH is, once every member wrote the buffer out and
            // flushed (issue 38's crash simulator: FUA writes and zeroes acknowledged from
            // the buffer were lost by a power loss).
            q.phase = Phase::Waiting;
            let d = self.dnd.as_mut().expect("D/ND");
            if d.any_used() {
                d.flush_waiters.push_back(t);
                self.kick(cx);
            } else {
                self.send_flushes(t, cx);
            }
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
                let row = self.reqs[t as usize].row;
                let entry = self.entry_of(row);
                if let Some(j) = rebuild {
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
                            // What the member holds, with what the buffer has newer for it.
                            if let Some(e) = entry {
                                self.overlay(e, k, p.a, p.b, self.slot(t, k, 0), cx);
                            }
                            cx.data.xor(dst, self.slot(t, k, 0), p.b - p.a);
                        }
                    }
                    if let Some(e) = entry {
                        self.overlay(e, m, p.a, p.b, dst, cx);
                    }
                }
                if let Some(e) = entry {
                    // Pieces read from members: the buffer's newer bytes over them.
                    for i in 0..self.reqs[t as usize].pieces.len() {
                        let p = self.reqs[t as usize].pieces[i];
                        if Some(p.j) != rebuild {
                            let m = self.data_member(row, p.j);
                            self.overlay(e, m, p.a, p.b, Self::client(t, p.client), cx);
                        }
                    }
                }
                self.row_done(t, cx);
            }
            _ => self.write_phase(t, cx),
        }
    }

    /// Ids at and above this are the policy's own: window controls (+ member), then buffer
    /// writes (+ n + slot).
    #[inline]
    fn ctl_base(&self) -> u32 {
        self.tags * self.per_tag
    }

    /// The buffered row `row`, if any.
    fn entry_of(&self, row: u64) -> Option<u32> {
        self.dnd.as_ref()?.rows.get(row)
    }

    /// Entry `e`'s slot for member `m`.
    #[inline]
    fn entry_slot(&self, e: u32, m: u32, offset: u32) -> BufRef {
        BufRef::Scratch {
            index: (self.tags + e) * self.n + m,
            offset,
        }
    }

    /// The dirty-granule mask of the in-chunk range `a..b`.
    fn mask(&self, a: u32, b: u32) -> u128 {
        let g = self.dnd.as_ref().map_or(1, |d| d.granule);
        let (lo, hi) = (a / g, b.div_ceil(g));
        if hi <= lo {
            return 0;
        }
        let width = hi - lo;
        let ones = if width >= 128 {
            u128::MAX
        } else {
            (1u128 << width) - 1
        };
        ones << lo
    }

    /// Copies the buffered (newer) parts of member `m`'s range `a..b` of entry `e` over `dst`,
    /// which holds that range starting at in-chunk offset `a`.
    fn overlay(&self, e: u32, m: u32, a: u32, b: u32, dst: BufRef, cx: &mut Cx) {
        let Some(d) = self.dnd.as_ref() else { return };
        let g = d.granule;
        let mut bits = d.entries[e as usize].dirty[m as usize] & self.mask(a, b);
        // Bounded: one turn per run of dirty granules (at most 64).
        while bits != 0 {
            let start = bits.trailing_zeros();
            let run = (bits >> start).trailing_ones();
            let (x0, x1) = ((start * g).max(a), ((start + run) * g).min(b));
            cx.data
                .copy(offset_by(dst, x0 - a), self.entry_slot(e, m, x0), x1 - x0);
            bits &= !(if run >= 128 {
                u128::MAX
            } else {
                ((1u128 << run) - 1) << start
            });
        }
    }

    /// Member `m` of the current row in entry `e` is newer than the member over all of `a..b`.
    fn covered(&self, e: u32, m: u32, a: u32, b: u32) -> bool {
        let Some(d) = self.dnd.as_ref() else {
            return false;
        };
        let mk = self.mask(a, b);
        d.entries[e as usize].dirty[m as usize] & mk == mk
    }

    /// Moves the turn to the member whose window `now` is in; tells the members (PLM) and
    /// starts the new owner's buffered writes.
    fn switch_window(&mut self, now_ns: u64, cx: &mut Cx) {
        let base = self.ctl_base();
        let n = self.n;
        let failed = self.failed;
        let Some(d) = self.dnd.as_mut() else { return };
        let w = d.spec.window_ns;
        let owner = ((now_ns / w) % u64::from(n)) as u32;
        d.next_switch_ns = (now_ns / w + 1) * w;
        d.guard_sent = false;
        let old = d.owner;
        let first = !d.started;
        d.started = true;
        if owner != old || first {
            d.owner = owner;
            d.stats.window_switches += u64::from(!first);
            if d.spec.plm {
                if first {
                    // Every member deterministic: garbage is collected only when the policy
                    // asks, in the owner's turn, within a budget (IODA's GC time windows).
                    for m in 0..n {
                        d.set_window(base, m, Window::Deterministic, failed, cx);
                    }
                } else {
                    let budget_ns = w - w / GUARD_DIVISOR;
                    d.gc_now(base, owner, budget_ns, failed, cx);
                }
                let _ = old;
            }
        }
        if failed.is_none() {
            self.avoid = Some(owner);
        }
        self.kick(cx);
    }

    /// Starts buffered writes: to the member whose turn it is (to every member while a FLUSH
    /// waits), at most [`FLUSH_MAX`] at a time; a failed member's buffered bytes are dropped.
    fn kick(&mut self, cx: &mut Cx) {
        let base = self.ctl_base() + self.n;
        let chunk = self.chunk;
        let failed = self.failed;
        let Some(d) = self.dnd.as_mut() else { return };
        let all = !d.flush_waiters.is_empty();
        // The last part of a turn writes nothing new, so the member's own buffer has drained
        // into flash before its deterministic window begins (IODA's guard).
        let winding_down = d.now_ns + d.spec.window_ns / GUARD_DIVISOR >= d.next_switch_ns;
        if winding_down && !all {
            d.stats.guard_skips += 1;
            self.release_entries(cx);
            return;
        }
        let g = d.granule;
        // The entries a scan in index order would act on: those with dirty bits for a member
        // served (the others it passed over). Bounded by the words of the bit sets.
        let words = d.has_dirty[0].len();
        'scan: for w in 0..words {
            let mut bits = 0u64;
            for m in 0..self.n {
                if all || m == d.owner {
                    bits |= d.has_dirty[m as usize][w];
                }
            }
            while bits != 0 {
                let e = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if d.flushes_out >= FLUSH_MAX {
                    break 'scan;
                }
                if !d.entries[e].used {
                    continue;
                }
                for m in 0..self.n {
                    if !all && m != d.owner {
                        continue;
                    }
                    if Some(m) == failed {
                        if d.entries[e].dirty[m as usize] != 0 {
                            d.set_dirty(e as u32, m, 0);
                        }
                        continue;
                    }
                    // Bounded: each turn takes one run of granules or stops.
                    while d.flushes_out < FLUSH_MAX {
                        let ent = &mut d.entries[e];
                        let bits = ent.dirty[m as usize] & !ent.busy[m as usize];
                        if bits == 0 {
                            break;
                        }
                        let start = bits.trailing_zeros();
                        let run = (bits >> start).trailing_ones();
                        let mask = if run >= 128 {
                            u128::MAX
                        } else {
                            ((1u128 << run) - 1) << start
                        };
                        ent.busy[m as usize] |= mask;
                        let slot = d
                            .flush_slots
                            .iter()
                            .position(Option::is_none)
                            .expect("a free flush slot");
                        d.flush_slots[slot] = Some(FlushCmd {
                            entry: e as u32,
                            member: m,
                            version: ent.version[m as usize],
                            mask,
                        });
                        d.flushes_out += 1;
                        d.stats.flush_writes += 1;
                        self.stats.member_write_bytes += u64::from(run * g);
                        let row = ent.row;
                        cx.out.cmd(MemberCmd {
                            id: base + slot as u32,
                            member: m,
                            op: CmdOp::Write,
                            offset_bytes: row * chunk + u64::from(start * g),
                            len_bytes: run * g,
                            buf: BufRef::Scratch {
                                index: (self.tags + e as u32) * self.n + m,
                                offset: start * g,
                            },
                            fua: false,
                        });
                    }
                }
            }
        }
        self.release_entries(cx);
    }

    /// Frees entries with nothing left to write; lets writes waiting for room and FLUSHes
    /// waiting for an empty buffer go on.
    fn release_entries(&mut self, cx: &mut Cx) {
        let Some(d) = self.dnd.as_mut() else { return };
        let mut freed = false;
        // Only entries taken or cleaned since the last call can be used and clean now; in
        // index order, as the scan of every entry freed them (the free list is a stack).
        d.maybe_clean.sort_unstable();
        d.maybe_clean.dedup();
        for k in 0..d.maybe_clean.len() {
            let i = d.maybe_clean[k] as usize;
            let e = &mut d.entries[i];
            if e.used
                && !e.held
                && e.dirty.iter().all(|&x| x == 0)
                && e.busy.iter().all(|&x| x == 0)
            {
                e.used = false;
                let row = e.row;
                d.rows.remove(row);
                d.free.push(i as u32);
                freed = true;
            }
        }
        d.maybe_clean.clear();
        d.stats.occupancy_bytes = d.occupancy_bytes();
        d.stats.entries_used = (d.entries.len() - d.free.len()) as u64;
        if freed {
            // Writes waiting for room go on in order while entries are free; the rest keep
            // their place. (Retrying every waiter on every release re-queued the same writes:
            // 16 M buffer waits for 40 k buffered writes on a 4 KiB-chunk trace replay, each
            // retry a scan of every tag for a row lock: D/ND ran at 1/15 of plain raid5.)
            for _ in 0..d.buf_waiters.len() {
                let Some(t) = self
                    .dnd
                    .as_mut()
                    .filter(|d| !d.free.is_empty())
                    .and_then(|d| d.buf_waiters.pop_front())
                else {
                    break;
                };
                self.start_row(t, cx);
            }
        }
        let empty = self.dnd.as_ref().is_some_and(|d| !d.any_used());
        if empty {
            // Bounded by the tags (each FLUSH waits once).
            while let Some(t) = self.dnd.as_mut().and_then(|d| d.flush_waiters.pop_front()) {
                self.send_flushes(t, cx);
            }
        }
    }

    /// A FLUSH's member flushes (after the buffer is empty, with D/ND).
    fn send_flushes(&mut self, t: u32, cx: &mut Cx) {
        let q = &mut self.reqs[t as usize];
        q.pending = 0;
        q.sent = 0;
        q.phase = Phase::Flush;
        for m in 0..self.n {
            if Some(m) != self.failed {
                self.send(t, m, CmdOp::Flush, 0, 0, BufRef::None, cx);
            }
        }
        if self.reqs[t as usize].pending == 0 {
            self.reqs[t as usize].phase = Phase::Idle;
            cx.out.done(t, IoResult::Ok);
        }
    }

    /// A policy command completed: a window control or a buffered write.
    fn ctl_done(&mut self, done: CmdDone, cx: &mut Cx) {
        let base = self.ctl_base();
        let k = done.id - base;
        if k < self.n {
            let d = self.dnd.as_mut().expect("window control without D/ND");
            d.window_out[k as usize] = false;
            if done.result != CmdResult::Ok {
                // Devices without PLM (zram, most SSDs): the turns still schedule I/O.
                d.stats.window_controls_unsupported += 1;
            }
            return;
        }
        let slot = (k - self.n) as usize;
        let f = {
            let d = self.dnd.as_mut().expect("buffer write without D/ND");
            let f = d.flush_slots[slot]
                .take()
                .expect("completion of a buffer write not in flight");
            d.flushes_out -= 1;
            f
        };
        let row = self
            .dnd
            .as_ref()
            .map(|d| d.entries[f.entry as usize].row)
            .unwrap_or(0);
        let locked = self.row_locked(u32::MAX, row);
        let ok = done.result == CmdResult::Ok;
        if !ok {
            self.fail_member(f.member);
        }
        let d = self.dnd.as_mut().expect("D/ND");
        let e = &mut d.entries[f.entry as usize];
        e.busy[f.member as usize] &= !f.mask;
        // Clean only if nothing newer came meanwhile and no request is reading the row (a read
        // issued before this write landed relies on the buffer for these bytes).
        if ok && e.version[f.member as usize] == f.version && !locked {
            let old = e.dirty[f.member as usize];
            d.set_dirty(f.entry, f.member, old & !f.mask);
        }
        if d.entries[f.entry as usize].dirty[f.member as usize] == 0 {
            // Its busy bits cleared: the entry may be clean of everything now.
            d.maybe_clean.push(f.entry);
        }
        self.kick(cx);
    }

    /// Member `m` answered a fast-fail read of request `t`'s row busy: the piece is rebuilt from
    /// the same range of every other member (plain reads), as a failed member's would be; if the
    /// row already rebuilds a piece, the parity cannot cover a second and the piece is read again,
    /// waiting this time.
    fn busy_piece(&mut self, t: u32, m: u32, cx: &mut Cx) {
        let row = self.reqs[t as usize].row;
        let Some(p) = self.reqs[t as usize]
            .pieces
            .iter()
            .copied()
            .find(|p| self.data_member(row, p.j) == m)
        else {
            unreachable!("a busy answer from member {m}, which holds no piece of the row");
        };
        let base = row * self.chunk;
        let (lo, len) = (base + u64::from(p.a), p.b - p.a);
        let Plan::Read { rebuild } = self.reqs[t as usize].plan else {
            unreachable!("a fast-fail read outside a read");
        };
        if rebuild.is_some() || self.failed_at(row).is_some() {
            self.stats.fast_fail_reread += 1;
            self.send(t, m, CmdOp::Read, lo, len, Self::client(t, p.client), cx);
            return;
        }
        self.stats.fast_fail_rebuilt += 1;
        self.stats.rebuilt_pieces += 1;
        self.reqs[t as usize].plan = Plan::Read { rebuild: Some(p.j) };
        for k in 0..self.n {
            if k != m {
                let slot = self.slot(t, k, 0);
                self.send(t, k, CmdOp::Read, lo, len, slot, cx);
            }
        }
    }

    fn fail_member(&mut self, m: u32) -> bool {
        if let Some(rb) = self.rebuild.as_mut()
            && rb.stats.done_ns.is_none()
        {
            // While a rebuild runs, the replacement failing aborts it (the volume degraded
            // again everywhere, once its rows out are back); any other member is a second failure.
            if m == rb.spec.member {
                rb.stats
                    .aborted
                    .get_or_insert(format!("the replacement member {m} failed"));
                rb.replacement_failed = true;
                self.stats.members_failed_on_error += 1;
                return true;
            }
            return false;
        }
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
        let entries = self.dnd.as_ref().map_or(0, |d| d.entries.len() as u32);
        let rebuild = u32::from(self.rebuild.is_some());
        let bitmap = u32::from(self.bitmap.is_some());
        // The last one: the zero chunk of WRITE_ZEROES and TRIM.
        (
            (self.tags + entries + rebuild) * self.n + bitmap + 1,
            self.chunk as u32,
        )
    }
    fn cmds_max(&self) -> u32 {
        self.bitmap_base() + if self.bitmap.is_some() { self.n } else { 0 }
    }
    fn outputs_max(&self) -> usize {
        // A call may finish one row, start the next, and let every waiter start its row (or
        // its flush), switch windows and start the buffer's writes.
        (self.tags as usize + 1) * (self.per_tag as usize + 1)
            + (self.tags * self.n) as usize
            + 3 * self.n as usize
            + FLUSH_MAX as usize
            // The bitmap's page write or flush.
            + 2 * self.n as usize
    }
    fn next_timer_ns(&self) -> Option<u64> {
        let own = self.timer_ns();
        let bm = self
            .bitmap
            .as_ref()
            .filter(|b| b.phase == BmPhase::Idle && b.next_clear_ns > 0)
            .map(|b| b.next_clear_ns);
        match (own, bm) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
    fn on_timer(&mut self, now_ns: u64, cx: &mut Cx) {
        if self
            .bitmap
            .as_ref()
            .is_some_and(|b| b.next_clear_ns > 0 && now_ns >= b.next_clear_ns)
        {
            self.bitmap_pass(now_ns, cx);
        }
        if self.timer_ns().is_some_and(|at| now_ns >= at) {
            self.on_own_timer(now_ns, cx);
        }
    }

    fn submit(&mut self, now_ns: u64, io: VolIo, cx: &mut Cx) {
        if let Some(d) = self.dnd.as_mut() {
            d.now_ns = now_ns;
        }
        if self.dnd.as_ref().is_some_and(|d| !d.started) {
            self.switch_window(now_ns, cx);
        }
        if self.rebuild.is_some() {
            self.rebuild_kick(now_ns, cx);
        }
        let t = io.tag;
        assert!(t < self.tags, "tag {t} beyond {}", self.tags);
        assert!(
            self.reqs[t as usize].phase == Phase::Idle,
            "tag {t} submitted while in flight"
        );
        let zero = matches!(io.op, VolOp::Trim | VolOp::WriteZeroes);
        let mut io = io;
        if zero {
            // Zeros written as data (the module's documentation says why).
            if !self.zero_ready {
                cx.data.zero(self.zero_slot(), self.chunk as u32);
                self.zero_ready = true;
            }
            io.op = VolOp::Write;
        }
        match io.op {
            VolOp::Trim | VolOp::WriteZeroes => unreachable!("written as zeros above"),
            VolOp::Flush => {
                let q = &mut self.reqs[t as usize];
                q.io = io;
                q.result = IoResult::Ok;
                q.pending = 0;
                q.sent = 0;
                q.phase = Phase::Flush;
                if let Some(d) = self.dnd.as_mut()
                    && d.any_used()
                {
                    // Durable means on the members: every member writes out the buffer now,
                    // whatever its turn, and then the members flush.
                    q.phase = Phase::Waiting;
                    d.flush_waiters.push_back(t);
                    self.kick(cx);
                    return;
                }
                // A replacement being rebuilt takes writes: it is flushed too.
                let skip = match &self.rebuild {
                    Some(rb) if !rb.replacement_failed => None,
                    _ => self.failed,
                };
                for m in 0..self.n {
                    if Some(m) != skip {
                        self.send(t, m, CmdOp::Flush, 0, 0, BufRef::None, cx);
                    }
                }
                return;
            }
            VolOp::Read => self.stats.volume_reads += 1,
            VolOp::Write => self.stats.client_write_bytes += u64::from(io.len_bytes),
        }
        if io.len_bytes == 0 {
            cx.out.done(t, IoResult::Ok);
            return;
        }
        let row_bytes = self.chunk * u64::from(self.n - 1);
        let end = io.offset_bytes + u64::from(io.len_bytes);
        let q = &mut self.reqs[t as usize];
        q.io = io;
        q.zero = zero;
        q.result = IoResult::Ok;
        q.row = io.offset_bytes / row_bytes;
        q.row_last = (end - 1) / row_bytes;
        if io.op == VolOp::Write {
            self.start_write(now_ns, t, cx);
        } else {
            self.start_row(t, cx);
        }
    }

    fn member_done(&mut self, now_ns: u64, done: CmdDone, cx: &mut Cx) {
        if let Some(d) = self.dnd.as_mut() {
            d.now_ns = now_ns;
        }
        if self.bitmap.is_some() && done.id >= self.bitmap_base() {
            self.bitmap_done(now_ns, done, cx);
            return;
        }
        if done.id >= self.rebuild_base() {
            self.rebuild_done(now_ns, done, cx);
            return;
        }
        if done.id >= self.ctl_base() {
            self.ctl_done(done, cx);
            return;
        }
        let t = done.id / self.per_tag;
        let m = self.cmd_member[done.id as usize];
        let phase = self.reqs[t as usize].phase;
        assert!(
            matches!(phase, Phase::Read | Phase::Write | Phase::Flush)
                && self.reqs[t as usize].pending > 0,
            "completion of command {} of a request not in flight",
            done.id
        );
        if let CmdResult::Busy { .. } = done.result
            && phase == Phase::Read
        {
            // A fast-fail read the member would have kept waiting: rebuild its piece.
            self.busy_piece(t, m, cx);
        } else if let CmdResult::Err(_) | CmdResult::Busy { .. } = done.result {
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
            Phase::Idle | Phase::Waiting | Phase::Bitmap => unreachable!(),
        }
        if self.rebuild.is_some() {
            // A row a request held may be the one the rebuild waits for.
            self.rebuild_kick(now_ns, cx);
        }
    }

    fn write_back(&self) -> bool {
        self.dnd.is_some()
    }

    fn warnings(&self) -> Vec<String> {
        let Some(d) = &self.dnd else {
            return Vec::new();
        };
        let st = &d.stats;
        // Out of entries (one per row written) with most of the bytes unused: scattered small
        // writes, each taking a whole row's room.
        if st.buffer_waits > 0
            && st.entries_used_max >= st.entries
            && st.occupancy_bytes_max.saturating_mul(2) < st.write_back_bytes
        {
            vec![format!(
                "write-back buffer: {} writes waited for room although at most {:.1} of its \
                 {:.1} MiB held data: all {} entries (one per row written, each with room for a whole row) \
                 were in use; scattered small writes need more rows: a larger --write-back or a \
                 smaller --chunk",
                st.buffer_waits,
                st.occupancy_bytes_max as f64 / f64::from(1 << 20),
                st.write_back_bytes as f64 / f64::from(1 << 20),
                st.entries
            )]
        } else {
            Vec::new()
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
            let waf = if self.stats.client_write_bytes > 0 {
                self.stats.member_write_bytes as f64 / self.stats.client_write_bytes as f64
            } else {
                0.0
            };
            o.insert("array_write_amplification".into(), waf.into());
            if let Some(bm) = &self.bitmap {
                o.insert(
                    "bitmap".into(),
                    serde_json::to_value(&bm.stats).unwrap_or_default(),
                );
            }
            if let Some(rb) = &self.rebuild {
                o.insert(
                    "rebuild".into(),
                    serde_json::to_value(&rb.stats).unwrap_or_default(),
                );
            }
            if let Some(d) = &self.dnd {
                o.insert(
                    "policy".into(),
                    (if d.spec.plm { "dnd" } else { "sched" }).into(),
                );
                o.insert(
                    "dnd".into(),
                    serde_json::to_value(&d.stats).unwrap_or_default(),
                );
            }
        }
        v
    }
}

#[cfg(test)]
mod row_index_tests {
    use super::RowIndex;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// The index answers as a map would through any sequence of inserts and removes that
        /// keeps at most `entries` keys (rows drawn from a small range, so probe runs collide
        /// and removals shift them).
        #[test]
        fn row_index_matches_a_map(ops in prop::collection::vec((any::<bool>(), 0u64..64), 1..400)) {
            let entries = 16;
            let mut idx = RowIndex::new(entries);
            let mut model: HashMap<u64, u32> = HashMap::new();
            for (k, (insert, row)) in ops.into_iter().enumerate() {
                let row = row * 1_000_003;
                if insert && model.len() < entries && !model.contains_key(&row) {
                    idx.insert(row, k as u32);
                    model.insert(row, k as u32);
                } else if !insert {
                    idx.remove(row);
                    model.remove(&row);
                }
                for r in 0..64u64 {
                    let r = r * 1_000_003;
                    prop_assert_eq!(idx.get(r), model.get(&r).copied());
                }
            }
        }
    }
}
