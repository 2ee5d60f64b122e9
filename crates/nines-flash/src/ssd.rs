//! The timed SSD: the FTL plus die, channel, controller and write-buffer timelines.
//!
//! Sans-IO: `submit(now_ns, ..)` takes the time as an argument and returns the completion time
//! at once. Dies and the controller are first-come-first-served timelines reserved in the order
//! commands are submitted; a channel keeps a short list of reserved intervals and places each
//! transfer in the first gap that fits (a transfer queued behind a long GC on one die must not
//! block the channel for the other dies). The driver must call in non-decreasing time (asserted).
//!
//! What a command costs:
//! - every command: a housekeeping stall if it lands in one, the controller's occupancy
//!   (`command_ns`, serial) and latency (`overhead_ns`);
//! - a read: per flash page touched, tR on its die then the bytes over the die's channel (the
//!   die is held until its page register is drained), then the whole request over the host link;
//!   units still in the write buffer's open page are served from DRAM;
//! - a write: the units are packed into flash pages through the DRAM write buffer; the command
//!   completes once its data is in the buffer, which waits only when the buffer is full of pages
//!   whose programs have not finished. A full page is programmed: channel transfer, then tPROG.
//! - GC: hard GC (free blocks at or below the hard threshold) runs on the die before the page
//!   that needed a block; soft GC runs on an idle die whose free blocks are below the soft
//!   threshold. A GC episode holds its die for its page reads, programs (copy-back, no channel)
//!   and erase; a host read to that die waits for the page copy in progress (not the whole
//!   episode) and then goes first, pushing the rest of the episode back (firmware interleaves
//!   host reads with GC page moves; host page programs go in between the copies the same way,
//!   so they do not pile up behind a victim). That is `ftl.gc_mode = "preempt"`, the default; `suspend`
//!   lets the read go at once (suspending GC's program or erase), `blocking` makes it wait for
//!   the whole episode (FEMU), and `foreground` also makes the host write that found its pool
//!   at the hard threshold wait while GC reclaims up to `ftl.gc_batch_blocks` victims on
//!   every pool short of free blocks, in parallel (the write cliff). See [`GcMode`].
//! - suspend-resume: when enabled, a read to a die busy programming or erasing goes first and
//!   pushes the program/erase back by the read's time plus `resume_overhead_ns`.
//! - read priority (when enabled): a read waits only for the program or erase in progress, and
//!   goes ahead of those queued behind it.
//! - `controller.die_gaps` (MQSim's chips serve what is ready): a die is a timeline with gaps
//!   ([`DieSlots`]) instead of FIFO pointers; an operation goes in the earliest gap at or after
//!   its ready time that holds it (docs/arch-sim.md, "Reservation order").
//! - variance sources (each off unless the description turns it on; docs/arch-sim.md cites
//!   each): per-page-type tR/tPROG, read retries, mapping-cache misses (a translation-page read
//!   first; dirty evictions write translation pages back), power-state exit after idle (APST),
//!   FUA/flush on a volatile write cache, firmware jitter drawn from a measured distribution.
//!
//! "Die" in the timing code means the unit that executes one flash command at a time (a die, or
//! a whole chip); "pool" is the FTL's block pool (a die, or a plane). Pool `p` is on channel
//! `p mod channels` and on unit `p mod units`.
//!
//! The control surface (PLM windows, GC now, busy queries, fast-fail reads) is in control.rs.
//!
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use nines_core::op::Op;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::config::{DeviceConfig, GcMode, PAGE_TYPES_MAX, PowerState};
use crate::control::PlmWindow;
use crate::dist::QuantileDist;
use crate::ftl::{Ftl, FtlStats, GC_RESERVE_BLOCKS, GcWork};
use crate::mapcache::MapCache;
use crate::timeline::{DieSlots, SLOT_GC, SLOT_LONG, SlotMoves, TIMELINE_CAP, Timeline};

/// How to bring a fresh device to a realistic state before timing starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precondition {
    /// Factory-fresh: nothing mapped.
    None,
    /// Every logical unit written once, sequentially.
    Fill,
    /// Fill, then uniformly random overwrites of the whole capacity, then GC settles to the soft
    /// threshold: greedy GC's steady state (write amplification no longer changes after one
    /// capacity of random writes; tested).
    Steady,
    /// Steady state with data in only the first `pct` percent of the logical space (MQSim's
    /// initial occupancy): fill that share, overwrite it once at random, let GC settle.
    SteadyAt(u8),
}

impl std::str::FromStr for Precondition {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Precondition::None),
            "fill" => Ok(Precondition::Fill),
            "steady" => Ok(Precondition::Steady),
            _ => {
                let pct = s
                    .strip_prefix("steady:")
                    .map(|p| p.trim_end_matches('%'))
                    .and_then(|p| p.parse::<u8>().ok())
                    .filter(|p| (1..=100).contains(p));
                match pct {
                    Some(100) => Ok(Precondition::Steady),
                    Some(p) => Ok(Precondition::SteadyAt(p)),
                    None => Err(format!(
                        "unknown preconditioning `{s}`; use none, fill, steady or steady:PCT \
                         (data in the first PCT% of the device, 1 to 100)"
                    )),
                }
            }
        }
    }
}

impl Precondition {
    pub fn name(self) -> String {
        match self {
            Precondition::None => "none".into(),
            Precondition::Fill => "fill".into(),
            Precondition::Steady => "steady".into(),
            Precondition::SteadyAt(p) => format!("steady:{p}%"),
        }
    }
}

/// Counters of the timed model since the last reset. `repr(C)`: the ones every command bumps
/// come first, in one cache line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct SsdCounters {
    pub reads: u64,
    pub writes: u64,
    pub read_buffer_hits: u64,
    pub die_busy_ns: u64,
    pub channel_busy_ns: u64,
    pub buffer_full_waits: u64,
    /// Host page programs that joined another plane's program (`geometry.multi_plane`).
    pub multi_plane_programs: u64,
    /// Mapping misses served by a translation read already in flight (`mapping.shared_reads`).
    pub map_shared_reads: u64,
    pub suspensions: u64,
    /// Reads that went in between two page copies of a GC episode.
    pub gc_preemptions: u64,
    pub gc_hard_episodes: u64,
    pub gc_soft_episodes: u64,
    pub housekeeping_stalls: u64,
    pub slow_ios: u64,
    /// GC episodes forced in a deterministic window because a pool was out of free blocks
    /// (each one breaks the window's promise).
    pub window_violations: u64,
    /// Fast-fail reads answered `Busy` (they reserved nothing).
    pub fast_fail_busy: u64,
    /// Victim blocks reclaimed by `gc_now` and by entering a non-deterministic window.
    pub gc_now_victims: u64,
    pub trims: u64,
    /// Page reads that needed read-retry steps.
    pub read_retries: u64,
    /// Mapping-cache misses (each a translation-page read) and translation pages written back.
    pub map_misses: u64,
    pub map_writebacks: u64,
    /// Old data read to merge a write that covers part of a mapping unit.
    pub rmw_reads: u64,
    /// Units never written that a read mapped to a new page (`ftl.reads_map_unwritten`).
    pub reads_mapped: u64,
    /// Reads that went ahead of queued programs or erases (read priority).
    pub read_priority_jumps: u64,
    /// Commands that first woke the device from a low-power state.
    pub power_exits: u64,
    pub flushes: u64,
    pub fua_writes: u64,
    /// Host reads that waited for their die, by what was ahead of them (indexed by
    /// [`ReadWaitCause`]): the per-read cause breakdown of a read tail.
    pub read_waits: [ReadWaits; READ_WAIT_CAUSES],
}

/// What a host read found ahead of it on its die.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadWaitCause {
    /// GC forced because a pool ran out of free blocks (hard GC; in a deterministic window,
    /// a window violation).
    GcForced = 0,
    /// GC the host asked for ([`Ssd::gc_now`], or entering a non-deterministic window).
    GcRequested = 1,
    /// GC the device started on its own while idle (soft GC).
    GcIdle = 2,
    /// Page programs (host writes, translation pages) or their erases, no GC.
    Programs = 3,
    /// Other reads only.
    Reads = 4,
}

/// How many causes [`ReadWaitCause`] has.
pub const READ_WAIT_CAUSES: usize = 5;

impl ReadWaitCause {
    pub const ALL: [ReadWaitCause; READ_WAIT_CAUSES] = [
        ReadWaitCause::GcForced,
        ReadWaitCause::GcRequested,
        ReadWaitCause::GcIdle,
        ReadWaitCause::Programs,
        ReadWaitCause::Reads,
    ];

    /// The report's name.
    pub fn name(self) -> &'static str {
        match self {
            ReadWaitCause::GcForced => "gc_forced",
            ReadWaitCause::GcRequested => "gc_requested",
            ReadWaitCause::GcIdle => "gc_idle",
            ReadWaitCause::Programs => "programs",
            ReadWaitCause::Reads => "reads",
        }
    }
}

/// A read waiting longer than this on its die is counted as slow (about one TLC page program:
/// longer than any single flash operation a read can be queued behind but an erase).
pub const READ_WAIT_SLOW_NS: u64 = 1_000_000;

/// Reads that waited for their die behind one cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadWaits {
    /// Reads that waited at all.
    pub reads: u64,
    /// Of those, reads that waited longer than [`READ_WAIT_SLOW_NS`].
    pub slow_reads: u64,
    pub wait_ns_total: u64,
    pub wait_ns_max: u64,
}

/// Reservation state of one die, as one value (the queries and GC work on it whole). Stored
/// split ([`DieHot`] and [`DieCold`]): a read of an idle die touches only the hot half.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DieTime {
    /// Reserved until then (host and GC work).
    pub(crate) free: u64,
    /// End of the latest program or erase (what a read can suspend).
    long_until: u64,
    /// End of the latest read that went ahead of queued work.
    read_free: u64,
    /// The die's latest GC episode: [gc_from, gc_until), preemptible every `gc_step` (one page
    /// copy).
    gc_from: u64,
    gc_until: u64,
    gc_step: u64,
    /// Why that episode ran (for the read-wait breakdown).
    gc_cause: ReadWaitCause,
}

impl Default for DieTime {
    fn default() -> Self {
        DieTime {
            free: 0,
            long_until: 0,
            read_free: 0,
            gc_from: 0,
            gc_until: 0,
            gc_step: 1,
            gc_cause: ReadWaitCause::GcIdle,
        }
    }
}

/// The half of a die's state every read touches: a read of an idle die loads one 16-byte
/// value instead of a 56-byte state that straddled lines (with a thousand members every die is
/// cold; this load was the largest share of the raid0 case of bench/sim-speed.sh).
/// Invariant: `read_free <= free`, so a die with `free <= t` is idle for a read at `t`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DieHot {
    pub(crate) free: u64,
    read_free: u64,
}

/// The rest of a die's state: read only when the die is busy, written by programs and GC.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DieCold {
    long_until: u64,
    gc_from: u64,
    gc_until: u64,
    gc_step: u64,
    gc_cause: ReadWaitCause,
}

impl DieTime {
    #[inline]
    fn join(hot: DieHot, cold: DieCold) -> DieTime {
        DieTime {
            free: hot.free,
            long_until: cold.long_until,
            read_free: hot.read_free,
            gc_from: cold.gc_from,
            gc_until: cold.gc_until,
            gc_step: cold.gc_step,
            gc_cause: cold.gc_cause,
        }
    }

    #[inline]
    fn split(self) -> (DieHot, DieCold) {
        debug_assert!(
            self.read_free <= self.free,
            "a die's reads end before its work does"
        );
        (
            DieHot {
                free: self.free,
                read_free: self.read_free,
            },
            DieCold {
                long_until: self.long_until,
                gc_from: self.gc_from,
                gc_until: self.gc_until,
                gc_step: self.gc_step,
                gc_cause: self.gc_cause,
            },
        )
    }

    /// What a read arriving at `t` and starting at `start` waited behind (None: no wait).
    #[inline]
    fn wait_cause(&self, t: u64, start: u64) -> Option<ReadWaitCause> {
        if start <= t {
            None
        } else if self.gc_until > t && self.gc_from < start {
            Some(self.gc_cause)
        } else if self.long_until > t {
            Some(ReadWaitCause::Programs)
        } else {
            Some(ReadWaitCause::Reads)
        }
    }
}

/// Programs and erases queued on one die, for read priority: their [start, end) in order.
/// Bounded; when more are queued than it holds, reads on that die fall back to first come,
/// first served until it drains.
const OPS_CAP: usize = 32;

#[derive(Clone, Debug)]
pub(crate) struct LongOps {
    iv: [(u64, u64); OPS_CAP],
    n: usize,
    overflow: bool,
}

impl Default for LongOps {
    fn default() -> Self {
        LongOps {
            iv: [(0, 0); OPS_CAP],
            n: 0,
            overflow: false,
        }
    }
}

impl LongOps {
    fn push(&mut self, now: u64, start: u64, end: u64) {
        let mut done = 0;
        while done < self.n && self.iv[done].1 <= now {
            done += 1;
        }
        if done > 0 {
            self.iv.copy_within(done..self.n, 0);
            self.n -= done;
        }
        if self.n == 0 {
            self.overflow = false;
        }
        if self.n == OPS_CAP {
            self.overflow = true;
            self.iv.copy_within(1..self.n, 0);
            self.n -= 1;
        }
        self.iv[self.n] = (start, end);
        self.n += 1;
    }

    /// Where a prioritised read arriving at `t` starts: after the operation in progress and
    /// the reads that went ahead before it (`read_free`). None: unknown (overflowed).
    #[inline]
    fn read_start(&self, t: u64, read_free: u64) -> Option<u64> {
        if self.overflow {
            return None;
        }
        let mut s = t.max(read_free);
        for &(a, b) in &self.iv[..self.n] {
            if b > s {
                // In progress at `s`, unless it was only due to start there after the read
                // arrived (queued behind earlier reads): then this read goes first too.
                if a < s || (a == s && a <= t) {
                    s = b;
                }
                break;
            }
        }
        Some(s)
    }

    /// The operation starting at `start` (a multi-plane program that another joined) ends
    /// `by` later.
    fn extend(&mut self, start: u64, by: u64) {
        if let Some(iv) = self.iv[..self.n].iter_mut().find(|iv| iv.0 == start) {
            iv.1 += by;
        }
    }

    /// Operations starting at or after `from` move back by `by`.
    fn shift(&mut self, from: u64, by: u64) {
        for iv in &mut self.iv[..self.n] {
            if iv.0 >= from {
                iv.0 += by;
                iv.1 += by;
            }
        }
    }
}

/// Host page programs queued or running on one parallel unit, for multi-plane programs
/// (`geometry.multi_plane`): a later program for another plane of the same die at the same page
/// index joins one that has not started. Bounded; when full the oldest is forgotten (it can no
/// longer be joined).
const MP_CAP: usize = 16;

#[derive(Clone, Copy, Debug, Default)]
struct MpCmd {
    start: u64,
    end: u64,
    die: u32,
    page_in_block: u32,
    /// Planes the command programs (bit per plane).
    planes: u32,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct MpQueue {
    c: [MpCmd; MP_CAP],
    n: usize,
}

impl MpQueue {
    /// Forget commands that ended by `now`.
    fn expire(&mut self, now: u64) {
        let mut w = 0;
        for r in 0..self.n {
            if self.c[r].end > now {
                self.c[w] = self.c[r];
                w += 1;
            }
        }
        self.n = w;
    }

    /// A command not started at `t` on `die` at `page_in_block` without plane `bit`.
    fn joinable(&self, t: u64, die: u32, bit: u32, page_in_block: u32) -> Option<usize> {
        self.c[..self.n].iter().position(|c| {
            c.start >= t && c.die == die && c.planes & bit == 0 && c.page_in_block == page_in_block
        })
    }

    fn push(&mut self, cmd: MpCmd) {
        if self.n == MP_CAP {
            self.c.copy_within(1..MP_CAP, 0);
            self.n -= 1;
        }
        self.c[self.n] = cmd;
        self.n += 1;
    }

    /// Commands starting in `[from, until)` move back by `by` (with `controller.die_gaps`, a
    /// die interval a read moved).
    fn move_within(&mut self, from: u64, until: u64, by: u64) {
        for c in &mut self.c[..self.n] {
            if c.start >= from && c.start < until {
                c.start += by;
                c.end += by;
            }
        }
    }

    /// Commands starting at or after `from` move back by `by`.
    fn shift(&mut self, from: u64, by: u64) {
        for c in &mut self.c[..self.n] {
            if c.start >= from {
                c.start += by;
                c.end += by;
            }
        }
    }
}

/// How a read gets onto a die (see [`read_start`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadPath {
    /// Suspends a program or erase.
    Suspend,
    /// Goes in between two page copies of a GC episode.
    Preempt,
    /// Goes ahead of queued programs and erases (read priority).
    Priority,
    /// Waits its turn.
    Fcfs,
}

/// Where a read arriving at die `die` at `t` starts its tR, and by which path. Pure: the read
/// itself and the queries share it, so a query predicts exactly what a read would do.
#[inline]
pub(crate) fn read_start(
    suspend: bool,
    gc_mode: GcMode,
    erase_ns: u64,
    die: &DieTime,
    ops: Option<&LongOps>,
    t: u64,
) -> (ReadPath, u64) {
    if suspend && die.long_until > t && die.free > t {
        // The die is programming or erasing (or has that queued): the read goes first.
        return (ReadPath::Suspend, t.max(die.read_free));
    }
    if gc_mode != GcMode::Preempt && die.free > t && die.gc_from <= t && t < die.gc_until {
        if gc_mode == GcMode::Suspend {
            // GC's program or erase in progress is suspended: the read goes now.
            return (ReadPath::Suspend, t.max(die.read_free));
        }
        // Blocking: the die is held for the whole victim. After it, a read with priority
        // may still go ahead of programs queued behind the episode.
        if let Some(ops) = ops
            && let Some(start) = ops.read_start(t, die.read_free.max(die.gc_until))
            && start < die.free
        {
            return (ReadPath::Priority, start);
        }
        return (ReadPath::Fcfs, die.free);
    }
    if die.free > t && t < die.gc_until {
        // GC is copying pages on this die, or is queued on it behind programs: the read goes
        // in at the next page-copy boundary (at the episode's start when it has not started:
        // the read waits for what is queued before the GC, not for the GC too).
        let base = t.max(die.read_free).max(die.gc_from);
        let step = die.gc_step;
        let start = die.gc_from + (base - die.gc_from).div_ceil(step) * step;
        // The episode's last erase is one operation: a read due while it runs waits for its
        // end (boundaries inside it let reads cut into a 5 ms erase).
        if start < die.gc_until && start <= die.gc_until.saturating_sub(erase_ns) {
            return (ReadPath::Preempt, start);
        }
    }
    if let Some(ops) = ops
        && die.free > t
        && let Some(start) = ops.read_start(t, die.read_free)
        && start < die.free
    {
        return (ReadPath::Priority, start);
    }
    (ReadPath::Fcfs, t.max(die.free))
}

/// Where a read ready at `t` starts on a die's gap timeline (`controller.die_gaps`): room
/// made, the GC episode in progress split at its next page copy, then the earliest start
/// whose tR and transfer (where channel `chan` can take it) meet nothing that stays.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn gap_read_fit(
    slots: &mut DieSlots,
    chan: &Timeline<TIMELINE_CAP>,
    now: u64,
    t: u64,
    tr: u64,
    xfer: u64,
    gc_step: u64,
    priority: bool,
) -> u64 {
    slots.make_room(now, 2);
    slots.split_gc(t, gc_step);
    slots.fit(t, t, priority, |s| chan.peek(now, s + tr, xfer) + xfer - s)
}

/// The flash pages a read touches, grouped: consecutive units in the same page are one page
/// read. Yields (pool, page, bytes of the request in it, first unit, units).
pub(crate) struct ReadPages {
    lpn: u64,
    last: u64,
    unit_bytes: u64,
    offset_bytes: u64,
    end_bytes: u64,
}

impl ReadPages {
    pub(crate) fn new(unit_bytes: u64, offset_bytes: u64, len_bytes: u64) -> ReadPages {
        ReadPages {
            lpn: offset_bytes / unit_bytes,
            last: (offset_bytes + len_bytes - 1) / unit_bytes,
            unit_bytes,
            offset_bytes,
            end_bytes: offset_bytes + len_bytes,
        }
    }

    #[inline]
    pub(crate) fn next(&mut self, ftl: &Ftl) -> Option<(u32, u32, u64)> {
        self.next_units(ftl)
            .map(|(pool, page, bytes, _, _)| (pool, page, bytes))
    }

    #[inline]
    pub(crate) fn next_units(&mut self, ftl: &Ftl) -> Option<(u32, u32, u64, u32, u32)> {
        if self.lpn > self.last {
            return None;
        }
        let lpn = self.lpn;
        let (pool, page, _) = ftl.locate(lpn as u32);
        let mut n = 1;
        while lpn + n <= self.last && ftl.locate((lpn + n) as u32).1 == page {
            n += 1;
        }
        let lo = (lpn * self.unit_bytes).max(self.offset_bytes);
        let hi = ((lpn + n) * self.unit_bytes).min(self.end_bytes);
        self.lpn += n;
        Some((pool, page, hi - lo, lpn as u32, n as u32))
    }
}

/// What happens at the front of a command arriving at `now`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Front {
    /// When the command gets past a power-state exit and a housekeeping stall.
    pub(crate) after_stall: u64,
    /// When the controller starts it.
    pub(crate) start: u64,
    /// When the controller is operational (after a power-state exit).
    awake: u64,
    power_exit: bool,
    stalled: bool,
}

/// `repr(C)` and the field order are deliberate: with a thousand members every device is cold
/// when its command comes, and the fields every command reads are kept in the first six cache
/// lines (the counters a read bumps included) instead of the fourteen lines they spread over
/// in compiler order (a measured part of the raid0 case of bench/sim-speed.sh).
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub struct Ssd {
    // Hot: every command.
    /// The latest `now_ns` any call gave: time must not go backwards.
    now_ns: u64,
    logical_bytes: u64,
    pub(crate) unit_bytes: u64,
    /// Shared between devices until one of them changes it (copy on write): a read-only run of
    /// a thousand preconditioned devices keeps one map.
    pub(crate) ftl: Arc<Ftl>,
    // Timelines.
    /// Per unit, the hot half of its [`DieTime`] (see [`DieHot`]); `units_cold` the rest.
    pub(crate) units: Vec<DieHot>,
    pub(crate) chan: Vec<Timeline>,
    /// Queued programs per unit, when reads have priority.
    pub(crate) ops: Vec<LongOps>,
    pub(crate) overhead_ns: u64,
    command_ns: u64,
    pub(crate) ctrl_free: u64,
    hk_period_ns: u64,
    hk_duration_ns: u64,
    hk_phase_ns: u64,
    pub(crate) channel_bytes_per_s: u64,
    pub(crate) link_read_bytes_per_s: u64,
    pub(crate) link_write_bytes_per_s: u64,
    retry_threshold: u64,
    slow_threshold: u64,
    pub(crate) read_ns: PageTimes,
    pub(crate) channels: u32,
    /// Parallel units (dies, or chips) and block pools.
    units_n: u32,
    pools: u32,
    idle_gc_next: u32,
    pub(crate) window: PlmWindow,
    pub(crate) suspend: bool,
    /// `ftl.gc_mode`: how reads (and, `foreground`, writes) meet GC.
    pub(crate) gc_mode: GcMode,
    /// `controller.die_gaps`: dies are gap timelines (`slots`), not FIFO pointers.
    pub(crate) die_gaps: bool,
    /// `cmt.is_some()`, `!power.is_empty()`, either jitter table non-empty: fixed at
    /// construction, kept here so a command need not touch those fields' lines.
    has_cmt: bool,
    pub(crate) has_power: bool,
    has_jitter: bool,
    /// Set by [`Ssd::sleep`]: the next command pays the deepest power state's exit, however
    /// short the idle time before it; cleared by that command.
    asleep: bool,
    /// `ftl.reads_map_unwritten` (every read checks it).
    reads_map_unwritten: bool,
    /// Until then the device is busy (for power-state entry after idle).
    active_until: u64,
    rng: Xoshiro256PlusPlus,
    pub(crate) counters: SsdCounters,
    // Warm: writes, GC, variance sources.
    units_cold: Vec<DieCold>,
    /// Per unit, its reservations with gaps (empty: `controller.die_gaps` off).
    pub(crate) slots: Vec<DieSlots>,
    /// With `controller.die_gaps`, the channels used instead of `chan` (a larger bound);
    /// empty otherwise.
    pub(crate) chan_gap: Vec<Timeline<TIMELINE_CAP>>,
    /// Reads go ahead of programs and erases in the gap timelines (`read_priority`).
    gap_priority: bool,
    page_bytes: u64,
    pub(crate) program_ns: PageTimes,
    read_ns_mean: u64,
    program_ns_mean: u64,
    pub(crate) erase_ns: u64,
    resume_ns: u64,
    /// `ftl.gc_batch_blocks`: victims a foreground GC stall reclaims.
    gc_batch: u32,
    /// `gc_mode = "foreground"`: host writes are admitted no earlier than this (the end of the
    /// latest foreground GC batch); 0 otherwise.
    writes_blocked_until: u64,
    slow_extra_ns: u64,
    retry_steps: u64,
    retry_step_overhead_ns: u64,
    jitter_read: QuantileDist,
    jitter_write: QuantileDist,
    power: Vec<PowerState>,
    /// Until then the controller is waking from a power state: commands wait for it. Read
    /// only with power states, so kept out of the hot lines.
    awake_ns: u64,
    pub(crate) volatile_cache: bool,
    gc_copyback: bool,
    write_miss_reads: bool,
    pub(crate) flush_ns: u64,
    pub(crate) dram_bytes_per_s: u64,
    dram_access_ns: u64,
    translation_read_bytes: u64,
    /// A translation write-back programs the page (false: MQSim's unserved queue).
    writeback_programs: bool,
    /// Per translation page, when its latest flash read ends (empty: `shared_reads` off).
    tpage_read_end: Vec<u64>,
    buffer_pages: usize,
    /// `buffer.count_sectors`: the buffer holds `buf_sectors_cap` sectors; `buf_sectors_held`
    /// are held by the programs in `buf_release_sectors` (end, sectors) and the open pages
    /// (`open_sectors` per pool). Empty and 0 when off.
    count_sectors: bool,
    buf_sectors_cap: u64,
    buf_sectors_held: u64,
    open_sectors: Vec<u64>,
    buf_release_sectors: BinaryHeap<Reverse<(u64, u64)>>,
    /// Per unit, host programs that a multi-plane program can join (empty: multi-plane off).
    mp: Vec<MpQueue>,
    dies_n: u32,
    dram_free: u64,
    pub(crate) buf_release: BinaryHeap<Reverse<u64>>,
    /// The latest end of any program (a flush waits for it).
    pub(crate) programs_until: u64,
    /// Per pool: a read its open page's program must wait for (read-modify-write, translation
    /// reads); 0 when none.
    open_ready: Vec<u64>,
    cmt: Option<MapCache>,
    pub(crate) window_since_ns: u64,
}

/// Per-page-type flash times, inline (a device's own heap list was a cold line on every read
/// with a thousand members): the page index in the block modulo the number of types picks one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PageTimes {
    n: u32,
    /// `n - 1` when `n` is a power of two (the type is then a mask of the page index, not a
    /// division), else `u32::MAX`. In the padding before `ns`: the line stays one.
    mask: u32,
    ns: [u64; PAGE_TYPES_MAX],
}

const _: () = assert!(
    std::mem::size_of::<PageTimes>() == 64,
    "PageTimes is one cache line"
);

impl PageTimes {
    /// From a validated list (1 to [`PAGE_TYPES_MAX`] times).
    fn new(times: &[u64]) -> PageTimes {
        assert!(
            (1..=PAGE_TYPES_MAX).contains(&times.len()),
            "page types are validated to 1..={PAGE_TYPES_MAX}"
        );
        let mut ns = [0; PAGE_TYPES_MAX];
        ns[..times.len()].copy_from_slice(times);
        let n = times.len() as u32;
        PageTimes {
            n,
            mask: if n.is_power_of_two() { n - 1 } else { u32::MAX },
            ns,
        }
    }

    #[inline]
    pub(crate) fn of(&self, page_in_block: u32) -> u64 {
        if self.mask != u32::MAX {
            self.ns[(page_in_block & self.mask) as usize]
        } else {
            self.ns[(page_in_block % self.n) as usize]
        }
    }
}

#[inline]
pub(crate) fn xfer_ns(bytes: u64, bytes_per_s: u64) -> u64 {
    // In 64 bits whenever the product fits (any transfer under 18 GB): the same quotient
    // without a 128-bit division call on every command.
    match bytes.checked_mul(1_000_000_000) {
        Some(b) => b.div_ceil(bytes_per_s),
        None => (bytes as u128 * 1_000_000_000u128).div_ceil(bytes_per_s as u128) as u64,
    }
}

/// A probability as a threshold on 64 random bits; 1.0 saturates to always.
fn threshold_of(p: f64) -> u64 {
    if p >= 1.0 {
        u64::MAX
    } else {
        (p * 18_446_744_073_709_551_616.0) as u64
    }
}

impl Ssd {
    /// A factory-fresh device. `seed` sets its housekeeping phase and random draws.
    pub fn new(cfg: &DeviceConfig, seed: u64) -> Ssd {
        Ssd::with_ftl(cfg, Arc::new(Ftl::new(cfg)), seed)
    }

    /// A device around an existing FTL state (e.g. a preconditioned one, shared until written).
    pub fn with_ftl(cfg: &DeviceConfig, ftl: Arc<Ftl>, seed: u64) -> Ssd {
        let t = &cfg.timing;
        let read_ns = if t.read_ns_by_page_type.is_empty() {
            vec![t.read_ns]
        } else {
            t.read_ns_by_page_type.clone()
        };
        let program_ns = if t.program_ns_by_page_type.is_empty() {
            vec![t.program_ns]
        } else {
            t.program_ns_by_page_type.clone()
        };
        let units_n = cfg.parallel_units() as u32;
        let pools = cfg.pools() as u32;
        // Bounded by validation (at most the flash) and by the memory budget
        // (DeviceConfig::device_state_bytes).
        let buffer_pages = cfg.buffer_pages() as usize;
        let tpage_read_end = if cfg.mapping.shared_reads && cfg.mapping.cache_bytes > 0 {
            vec![
                0;
                ftl.logical_units()
                    .div_ceil(cfg.translation_entries_per_page()) as usize
            ]
        } else {
            Vec::new()
        };
        let cmt = (cfg.mapping.cache_bytes > 0).then(|| {
            MapCache::new(
                cfg.mapping_cache_entries(),
                ftl.logical_units(),
                cfg.translation_entries_per_page(),
            )
        });
        let jitter_read = QuantileDist::new(&cfg.firmware_jitter.read).unwrap_or_default();
        let jitter_write = QuantileDist::new(&cfg.firmware_jitter.write).unwrap_or_default();
        let mut ssd = Ssd {
            has_jitter: !jitter_read.is_empty() || !jitter_write.is_empty(),
            ftl,
            unit_bytes: cfg.geometry.map_unit_bytes as u64,
            logical_bytes: cfg.logical_bytes(),
            channels: cfg.geometry.channels,
            units_n,
            pools,
            page_bytes: cfg.geometry.page_size_bytes as u64,
            read_ns_mean: read_ns.iter().sum::<u64>() / read_ns.len() as u64,
            program_ns_mean: program_ns.iter().sum::<u64>() / program_ns.len() as u64,
            read_ns: PageTimes::new(&read_ns),
            program_ns: PageTimes::new(&program_ns),
            erase_ns: t.erase_ns,
            channel_bytes_per_s: t.channel_bytes_per_s,
            overhead_ns: cfg.controller.overhead_ns,
            command_ns: cfg.controller.command_ns,
            link_read_bytes_per_s: cfg.controller.read_bytes_per_s,
            link_write_bytes_per_s: cfg.controller.write_bytes_per_s,
            suspend: cfg.suspend.enabled,
            gc_mode: cfg.ftl.gc_mode,
            gc_batch: cfg.ftl.gc_batch_blocks,
            writes_blocked_until: 0,
            resume_ns: cfg.suspend.resume_overhead_ns,
            hk_period_ns: cfg.housekeeping.period_ns,
            hk_duration_ns: cfg.housekeeping.duration_ns,
            hk_phase_ns: 0,
            slow_threshold: threshold_of(cfg.slow_io.probability),
            slow_extra_ns: cfg.slow_io.extra_ns,
            retry_threshold: threshold_of(cfg.read_retry.probability),
            retry_steps: cfg.read_retry.steps as u64,
            retry_step_overhead_ns: cfg.read_retry.step_overhead_ns,
            jitter_read,
            jitter_write,
            has_power: !cfg.power.states.is_empty(),
            power: cfg.power.states.clone(),
            volatile_cache: cfg.durability.volatile_write_cache,
            flush_ns: cfg.durability.flush_ns,
            dram_bytes_per_s: cfg.buffer.dram_bytes_per_s,
            dram_access_ns: cfg.buffer.dram_access_ns,
            gc_copyback: cfg.ftl.gc_copyback,
            reads_map_unwritten: cfg.ftl.reads_map_unwritten,
            translation_read_bytes: cfg.mapping.translation_read_bytes as u64,
            write_miss_reads: cfg.mapping.write_miss_reads,
            writeback_programs: cfg.mapping.writeback_programs,
            tpage_read_end,
            buffer_pages,
            units: vec![DieTime::default().split().0; units_n as usize],
            units_cold: vec![DieTime::default().split().1; units_n as usize],
            die_gaps: cfg.controller.die_gaps,
            gap_priority: cfg.controller.read_priority,
            slots: if cfg.controller.die_gaps {
                vec![DieSlots::default(); units_n as usize]
            } else {
                Vec::new()
            },
            ops: if cfg.controller.read_priority && !cfg.controller.die_gaps {
                vec![LongOps::default(); units_n as usize]
            } else {
                Vec::new()
            },
            mp: if cfg.geometry.multi_plane && pools > cfg.dies() as u32 {
                vec![MpQueue::default(); units_n as usize]
            } else {
                Vec::new()
            },
            dies_n: cfg.dies() as u32,
            chan: vec![Timeline::default(); cfg.geometry.channels as usize],
            // With gaps, programs are reserved on their channel ahead of the reads that go
            // before them: a channel of four chips, each with a program queue, held more than
            // 64 intervals on tpcc, and merged ones walled reads off for milliseconds.
            chan_gap: if cfg.controller.die_gaps {
                vec![Timeline::default(); cfg.geometry.channels as usize]
            } else {
                Vec::new()
            },
            ctrl_free: 0,
            dram_free: 0,
            buf_release: BinaryHeap::with_capacity(buffer_pages + 1),
            count_sectors: cfg.buffer.count_sectors,
            buf_sectors_cap: if cfg.buffer.count_sectors {
                cfg.buffer.write_buffer_bytes / 512
            } else {
                0
            },
            buf_sectors_held: 0,
            open_sectors: if cfg.buffer.count_sectors {
                vec![0; pools as usize]
            } else {
                Vec::new()
            },
            buf_release_sectors: BinaryHeap::with_capacity(cfg.buffer_sector_entries() as usize),
            programs_until: 0,
            open_ready: vec![0; pools as usize],
            active_until: 0,
            awake_ns: 0,
            asleep: false,
            has_cmt: cmt.is_some(),
            cmt,
            idle_gc_next: 0,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            counters: SsdCounters::default(),
            now_ns: 0,
            window: PlmWindow::Off,
            window_since_ns: 0,
        };
        ssd.reseed(seed);
        ssd
    }

    /// New housekeeping phase and random stream (after cloning a preconditioned device).
    pub fn reseed(&mut self, seed: u64) {
        self.rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5ee0_d15c_0000_0001);
        if self.hk_period_ns > 0 {
            self.hk_phase_ns = self.rng.next_u64() % self.hk_period_ns;
        }
    }

    /// Bring the FTL to a state without timing anything; counters are reset afterwards.
    pub fn precondition(&mut self, mode: Precondition, seed: u64) {
        self.precondition_until(mode, seed, &std::sync::atomic::AtomicBool::new(false));
    }

    /// [`Ssd::precondition`], returning false as soon as it sees `stop` set (the device then
    /// partly preconditioned, to be dropped): a SIGINT stops a run within milliseconds, not
    /// after minutes of preconditioning.
    pub fn precondition_until(
        &mut self,
        mode: Precondition,
        seed: u64,
        stop: &std::sync::atomic::AtomicBool,
    ) -> bool {
        let done = match mode {
            Precondition::None => true,
            Precondition::Fill => {
                let ftl = Arc::make_mut(&mut self.ftl);
                let n = ftl.logical_units();
                ftl.fill_first_until(n, stop)
            }
            Precondition::Steady => {
                let ftl = Arc::make_mut(&mut self.ftl);
                let n = ftl.logical_units();
                ftl.fill_first_until(n, stop)
                    && ftl.random_overwrite_first_until(n, u64::from(n), seed, stop)
                    && ftl.settle_gc_until(stop)
            }
            Precondition::SteadyAt(pct) => {
                let ftl = Arc::make_mut(&mut self.ftl);
                let span = (ftl.logical_units() as u64 * pct.min(100) as u64 / 100) as u32;
                ftl.fill_first_until(span, stop)
                    && ftl.random_overwrite_first_until(span, span as u64, seed, stop)
                    && ftl.settle_gc_until(stop)
            }
        };
        Arc::make_mut(&mut self.ftl).reset_stats();
        self.counters = SsdCounters::default();
        done
    }

    pub fn ftl(&self) -> &Ftl {
        &self.ftl
    }
    pub fn ftl_mut(&mut self) -> &mut Ftl {
        Arc::make_mut(&mut self.ftl)
    }
    /// The FTL state, to share with other devices.
    pub fn shared_ftl(&self) -> Arc<Ftl> {
        Arc::clone(&self.ftl)
    }

    /// Draws from `other`'s read-only tables (its firmware-jitter distributions) instead of
    /// this device's own copies: devices built from one description then share one copy, which
    /// stays in cache. Changes nothing drawn (asserted: the tables must be equal).
    pub fn share_tables_from(&mut self, other: &Ssd) {
        assert!(
            self.jitter_read == other.jitter_read && self.jitter_write == other.jitter_write,
            "sharing the tables of a device with another description"
        );
        self.jitter_read = other.jitter_read.clone();
        self.jitter_write = other.jitter_write.clone();
    }
    /// Exported capacity.
    pub fn logical_bytes(&self) -> u64 {
        self.logical_bytes
    }
    /// Units that execute one flash command at a time (dies, or chips).
    pub fn dies(&self) -> u32 {
        self.units_n
    }
    pub fn channels(&self) -> u32 {
        self.channels
    }
    pub fn counters(&self) -> SsdCounters {
        self.counters
    }
    pub fn ftl_stats(&self) -> FtlStats {
        self.ftl.stats()
    }
    /// FDP counters per reclaim unit handle; `None` on a conventional device.
    pub fn fdp_stats(&self) -> Option<crate::FdpStats> {
        self.ftl.fdp_stats()
    }
    /// Bytes of one mapping unit (the FTL's counters are in units).
    pub fn unit_bytes(&self) -> u64 {
        self.unit_bytes
    }
    /// FDP reclaim unit handles (1 on a conventional device, which has no placement).
    pub fn fdp_handles(&self) -> u32 {
        self.ftl.handles()
    }
    pub fn reset_counters(&mut self) {
        self.counters = SsdCounters::default();
        if self.ftl.stats_dirty() {
            Arc::make_mut(&mut self.ftl).reset_stats();
        }
    }

    /// The unit (die or chip) a pool's flash commands run on.
    #[inline]
    pub(crate) fn unit_of(&self, pool: u32) -> u32 {
        pool % self.units_n
    }

    /// Unit `u`'s whole reservation state.
    #[inline]
    pub(crate) fn die(&self, u: usize) -> DieTime {
        DieTime::join(self.units[u], self.units_cold[u])
    }

    #[inline]
    fn set_die(&mut self, u: usize, dt: DieTime) {
        (self.units[u], self.units_cold[u]) = dt.split();
    }

    /// Assert that time does not go backwards, and advance the device's notion of now.
    #[inline]
    pub(crate) fn advance(&mut self, now_ns: u64) {
        self.check_time(now_ns);
        self.now_ns = now_ns;
    }

    #[inline]
    pub(crate) fn check_time(&self, now_ns: u64) {
        assert!(
            now_ns >= self.now_ns,
            "Ssd called at {now_ns} ns after a call at {} ns: the driver must call in \
             non-decreasing time",
            self.now_ns
        );
    }

    #[inline]
    pub(crate) fn check_range(&self, offset_bytes: u64, len_bytes: u64) {
        assert!(
            len_bytes > 0 && offset_bytes + len_bytes <= self.logical_bytes,
            "{len_bytes} bytes at {offset_bytes} do not fit a {}-byte device",
            self.logical_bytes
        );
    }

    /// The front end of a command arriving at `now`. Pure.
    #[inline]
    pub(crate) fn front_end(&self, now_ns: u64) -> Front {
        let mut t = now_ns;
        let mut power_exit = false;
        if self.has_power {
            if self.asleep {
                if let Some(s) = self.power.last() {
                    t += s.exit_ns;
                    power_exit = true;
                }
            } else if now_ns > self.active_until {
                // The deepest state whose entry began: a command during the entry waits for
                // it to end, then for the exit.
                let idle = now_ns - self.active_until;
                if let Some(s) = self
                    .power
                    .iter()
                    .rev()
                    .find(|s| s.idle_ns - s.entry_ns <= idle)
                {
                    t = t.max(self.active_until + s.idle_ns) + s.exit_ns;
                    power_exit = true;
                }
            }
            // A command that comes while the controller wakes waits until it is awake.
            t = t.max(self.awake_ns);
        }
        let awake = t;
        let mut stalled = false;
        if self.hk_period_ns > 0 {
            let x = (t + self.hk_phase_ns) % self.hk_period_ns;
            if x < self.hk_duration_ns {
                t += self.hk_duration_ns - x;
                stalled = true;
            }
        }
        let start = if self.command_ns > 0 {
            t.max(self.ctrl_free)
        } else {
            t
        };
        Front {
            after_stall: t,
            start,
            awake,
            power_exit,
            stalled,
        }
    }

    /// Take the controller for a command arriving at `now`; returns when it reaches the flash.
    #[inline]
    pub(crate) fn enter(&mut self, now_ns: u64) -> u64 {
        let f = self.front_end(now_ns);
        if f.stalled {
            self.counters.housekeeping_stalls += 1;
        }
        if f.power_exit {
            self.counters.power_exits += 1;
            self.asleep = false;
            self.awake_ns = f.awake;
        }
        if self.command_ns > 0 {
            self.ctrl_free = f.start + self.command_ns;
        }
        f.start + self.overhead_ns
    }

    /// Puts the device in its deepest idle power state now (a replay that starts with the
    /// device asleep, `nines sim --trace-start asleep`): the next command pays that state's exit
    /// latency. Without power states it changes nothing. Returns whether there is a state.
    pub fn sleep(&mut self) -> bool {
        self.asleep = self.has_power;
        self.has_power
    }

    /// Undoes [`Ssd::sleep`] before any command was sent.
    pub fn wake(&mut self) {
        self.asleep = false;
    }

    /// The device is busy until `t` at least.
    #[inline]
    pub(crate) fn active(&mut self, t: u64) {
        self.active_until = self.active_until.max(t);
    }

    /// TRIM a byte range (whole mapping units inside it) at `now`: the mapping is dropped at
    /// once; the command takes the controller like any other and completes at the returned
    /// time. A read of a trimmed unit still costs a flash read (see [`Ftl::locate`]).
    pub fn trim(&mut self, now_ns: u64, offset_bytes: u64, len_bytes: u64) -> u64 {
        self.advance(now_ns);
        let done = self.enter(now_ns);
        self.counters.trims += 1;
        let first = offset_bytes.div_ceil(self.unit_bytes);
        let end =
            ((offset_bytes + len_bytes) / self.unit_bytes).min(self.ftl.logical_units() as u64);
        for lpn in first..end {
            Arc::make_mut(&mut self.ftl).trim_unit(lpn as u32);
        }
        self.active(done);
        done
    }

    /// Submit a command at `now_ns`; returns the time it completes. Calls must come in
    /// non-decreasing `now_ns` (asserted). The range must lie inside [`Ssd::logical_bytes`].
    /// Warms what a request at `offset_bytes` will look up first (its mapping entry): a hint
    /// for a request known ahead of time, which changes nothing simulated.
    #[inline]
    pub fn prefetch(&self, offset_bytes: u64) {
        let lpn = (offset_bytes / self.unit_bytes) as u32;
        self.ftl.prefetch_unit(lpn);
        if self.has_cmt
            && let Some(c) = &self.cmt
        {
            c.prefetch(lpn);
        }
    }

    #[inline]
    pub fn submit(&mut self, now_ns: u64, op: Op, offset_bytes: u64, len_bytes: u64) -> u64 {
        self.submit_with(now_ns, op, offset_bytes, len_bytes, false)
    }

    /// [`Ssd::submit`] with the Force Unit Access bit: on a volatile write cache a FUA write
    /// completes once its data is programmed (its partly filled pages padded and programmed at
    /// once); with power-loss protection it costs only `durability.flush_ns`. FUA on a read
    /// changes nothing here (the model keeps no stale read cache).
    pub fn submit_with(
        &mut self,
        now_ns: u64,
        op: Op,
        offset_bytes: u64,
        len_bytes: u64,
        fua: bool,
    ) -> u64 {
        self.submit_placed(now_ns, op, offset_bytes, len_bytes, fua, 0)
    }

    /// [`Ssd::submit_with`] with an FDP placement handle (NVMe directive type 2, DSPEC): a
    /// write's units go to reclaim unit handle `handle`'s open reclaim unit. `handle` must be
    /// below [`Ssd::fdp_handles`] (asserted; a member checks first); reads ignore it.
    pub fn submit_placed(
        &mut self,
        now_ns: u64,
        op: Op,
        offset_bytes: u64,
        len_bytes: u64,
        fua: bool,
        handle: u32,
    ) -> u64 {
        self.check_range(offset_bytes, len_bytes);
        self.advance(now_ns);
        let t = self.enter(now_ns);
        self.idle_gc(now_ns);
        let done = match op {
            Op::Read => self.read(t, offset_bytes, len_bytes),
            Op::Write => self.write(t, offset_bytes, len_bytes, fua && op == Op::Write, handle),
        };
        self.end_command(op, done)
    }

    /// What every command adds at its end (a slow I/O, firmware jitter, the device kept
    /// active): [`Ssd::submit_placed`]'s last step, and the zoned path's (`crate::zoned`), which
    /// takes its own way through the flash. Inlined: it is on the conventional hot path.
    #[inline(always)]
    pub(crate) fn end_command(&mut self, op: Op, mut done: u64) -> u64 {
        if self.slow_threshold > 0 && self.rng.next_u64() < self.slow_threshold {
            self.counters.slow_ios += 1;
            done += self.slow_extra_ns;
        }
        if self.has_jitter {
            let jitter = match op {
                Op::Read => &self.jitter_read,
                Op::Write => &self.jitter_write,
            };
            if !jitter.is_empty() {
                done += jitter.sample(self.rng.next_u64());
            }
        }
        if self.has_power {
            self.active(done.max(self.programs_until));
        }
        done
    }

    #[inline]
    fn read(&mut self, t: u64, offset_bytes: u64, len_bytes: u64) -> u64 {
        self.counters.reads += 1;
        if self.reads_map_unwritten {
            self.map_unwritten(t, offset_bytes, len_bytes);
        }
        let mut ready = t;
        let mut pages = ReadPages::new(self.unit_bytes, offset_bytes, len_bytes);
        while let Some((pool, page, bytes, lpn, n)) = pages.next_units(&self.ftl) {
            let end = if self.ftl.is_open_page(page) {
                self.counters.read_buffer_hits += 1;
                self.dram(t, bytes)
            } else {
                let mut at = t;
                if self.has_cmt {
                    at = self.map_lookup(t, lpn, n, false);
                }
                let tr = self.page_read_ns(page);
                self.flash_read(at, pool, tr, bytes, true)
            };
            ready = ready.max(end);
        }
        ready + xfer_ns(len_bytes, self.link_read_bytes_per_s)
    }

    /// `ftl.reads_map_unwritten`: the units of a read never written are mapped to new pages of
    /// their pools, without programs (the pages are only allocated), before the read.
    #[cold]
    fn map_unwritten(&mut self, t: u64, offset_bytes: u64, len_bytes: u64) {
        let first = offset_bytes / self.unit_bytes;
        let last = (offset_bytes + len_bytes - 1) / self.unit_bytes;
        let hard = self.hard_blocks();
        for lpn in first..=last {
            if self.ftl.is_mapped(lpn as u32) {
                continue;
            }
            let mut gc = GcWork::default();
            Arc::make_mut(&mut self.ftl).write_unit_with(lpn as u32, &mut gc, hard);
            self.counters.reads_mapped += 1;
            if gc.victims > 0 {
                self.counters.gc_hard_episodes += 1;
                if self.window == PlmWindow::Deterministic {
                    self.counters.window_violations += 1;
                }
                self.schedule_gc(t, &gc, ReadWaitCause::GcForced);
            }
        }
    }

    fn write(&mut self, t: u64, offset_bytes: u64, len_bytes: u64, fua: bool, handle: u32) -> u64 {
        self.counters.writes += 1;
        let first = offset_bytes / self.unit_bytes;
        let last = (offset_bytes + len_bytes - 1) / self.unit_bytes;
        let hard = self.hard_blocks();
        // Foreground GC holds the write path: no write is admitted before its batch ends.
        let mut admitted = t.max(self.writes_blocked_until);
        let link = xfer_ns(len_bytes, self.link_write_bytes_per_s);
        // The data is in DRAM once it crossed the link and the DRAM took it.
        let in_dram = if self.dram_bytes_per_s > 0 {
            self.dram(t + link, len_bytes)
        } else {
            0
        };
        let partial_first = !offset_bytes.is_multiple_of(self.unit_bytes);
        let partial_last = !(offset_bytes + len_bytes).is_multiple_of(self.unit_bytes);
        let mut durable = 0;
        for lpn in first..=last {
            let mut ready = 0;
            if self.has_cmt {
                ready = self.map_lookup(admitted, lpn as u32, 1, true);
            }
            if ((lpn == first && partial_first) || (lpn == last && partial_last))
                && self.ftl.is_mapped(lpn as u32)
            {
                // Read-modify-write: the rest of the unit comes from flash (or the buffer).
                let (pool, page, _) = self.ftl.locate(lpn as u32);
                if !self.ftl.is_open_page(page) {
                    self.counters.rmw_reads += 1;
                    let tr = self.page_read_ns(page);
                    ready = ready.max(self.flash_read(admitted, pool, tr, self.unit_bytes, false));
                }
            }
            let mut gc = GcWork::default();
            // With `idle-first` allocation a page opens on the die of its handle's round that
            // is free first (`Ftl::write_unit_placed_by`); other allocations ignore the times.
            let (units, units_n) = (&self.units, self.units_n);
            let place = Arc::make_mut(&mut self.ftl).write_unit_placed_by(
                lpn as u32,
                handle,
                &mut gc,
                hard,
                |pool| units[(pool % units_n) as usize].free,
            );
            if gc.victims > 0 {
                self.counters.gc_hard_episodes += 1;
                if self.window == PlmWindow::Deterministic {
                    self.counters.window_violations += 1;
                }
                if self.gc_mode == GcMode::Foreground {
                    admitted = self.foreground_gc(admitted, &mut gc);
                } else {
                    self.schedule_gc(admitted, &gc, ReadWaitCause::GcForced);
                }
            }
            let p = place.pool as usize;
            self.open_ready[p] = self.open_ready[p].max(ready);
            if self.count_sectors {
                let lo = (lpn * self.unit_bytes).max(offset_bytes);
                let hi = ((lpn + 1) * self.unit_bytes).min(offset_bytes + len_bytes);
                admitted = self.admit_sectors(admitted, p, (hi - lo).div_ceil(512));
            } else if place.page_opened {
                admitted = self.admit_page(admitted);
            }
            if place.page_full {
                let end = self.program_page(admitted + link, in_dram, place.pool, place.page);
                durable = durable.max(end);
            } else if fua && self.volatile_cache && (lpn == last) {
                // Nothing else is coming for this page now: pad it and program it.
                if let Some(page) =
                    Arc::make_mut(&mut self.ftl).close_open_page_of(handle, place.pool)
                {
                    let end = self.program_page(admitted + link, in_dram, place.pool, page);
                    durable = durable.max(end);
                }
            }
        }
        let mut done = (admitted + link).max(in_dram);
        if fua {
            self.counters.fua_writes += 1;
            if self.volatile_cache {
                done = done.max(durable);
            }
            done += self.flush_ns;
        }
        done
    }

    /// `ftl.gc_mode = "foreground"`: the write that found `gc.pool` at the hard threshold,
    /// and every host write after it, waits while GC reclaims up to `gc_batch_blocks` victims
    /// on that pool (the hard GC's own included) and, in parallel on their own dies, up to
    /// `gc_batch_blocks` on every other pool short of the soft threshold (firmware that stops
    /// the write path collects everywhere it must, not one die at a time while the others
    /// idle); returns when the write is admitted: once the last die's batch ends.
    /// A victim beyond the one that had to be taken is taken only if it moves at most twice
    /// the units that one moved: the batch reclaims garbage as cheap as what forced it, it
    /// does not compact valid data to fill a quota (on a log-structured writer's member,
    /// whose forced victims are trimmed blocks, it moves nothing).
    /// Bounded: at most `gc_batch_blocks` victims per pool, each pool visited once.
    #[cold]
    fn foreground_gc(&mut self, admitted: u64, gc: &mut GcWork) -> u64 {
        let trigger = gc.pool;
        let batch = self.gc_batch;
        let soft = self.ftl.gc_soft_blocks();
        let limit = gc.units_moved.saturating_mul(2);
        let take = |ftl: &mut Ftl, w: &mut GcWork| {
            while w.victims < batch {
                let next = ftl.gc_once_work(w.pool);
                if next.victims == 0 || next.units_moved > limit {
                    break;
                }
                let x = ftl.gc_once(w.pool);
                if x.victims == 0 {
                    break;
                }
                w.add(&x);
            }
        };
        take(Arc::make_mut(&mut self.ftl), gc);
        self.schedule_gc(admitted, gc, ReadWaitCause::GcForced);
        let mut end = self.units[self.unit_of(trigger) as usize].free;
        for pool in 0..self.pools {
            if pool == trigger || self.ftl.free_blocks(pool) >= soft {
                continue;
            }
            let mut w = GcWork {
                pool,
                ..GcWork::default()
            };
            take(Arc::make_mut(&mut self.ftl), &mut w);
            if w.victims > 0 {
                self.counters.gc_hard_episodes += 1;
                self.schedule_gc(admitted, &w, ReadWaitCause::GcForced);
                end = end.max(self.units[self.unit_of(pool) as usize].free);
            }
        }
        self.writes_blocked_until = self.writes_blocked_until.max(end);
        admitted.max(end)
    }

    /// Make every buffered write durable (NVMe Flush) at `now`: on a volatile write cache the
    /// open pages are padded and programmed, and the flush completes when every program has;
    /// with power-loss protection it completes after the controller and `flush_ns`.
    pub fn flush(&mut self, now_ns: u64) -> u64 {
        self.advance(now_ns);
        let t = self.enter(now_ns);
        self.counters.flushes += 1;
        let mut done = t;
        if self.volatile_cache {
            for handle in 0..self.ftl.handles() {
                for pool in 0..self.pools {
                    if let Some(page) =
                        Arc::make_mut(&mut self.ftl).close_open_page_of(handle, pool)
                    {
                        self.program_page(t, 0, pool, page);
                    }
                }
            }
            done = done.max(self.programs_until);
        }
        done += self.flush_ns;
        self.active(done);
        done
    }

    /// Program a filled (or padded) host page whose data arrived at `data_at` (and in DRAM at
    /// `in_dram`), after any read it depends on; it holds a buffer slot until done.
    fn program_page(&mut self, data_at: u64, in_dram: u64, pool: u32, page: u32) -> u64 {
        let p = pool as usize;
        let start = data_at.max(in_dram).max(self.open_ready[p]);
        self.open_ready[p] = 0;
        let pib = self.ftl.page_in_block(page);
        let tp = self.program_ns.of(pib);
        let end = if self.mp.is_empty() {
            self.program(start, pool, tp)
        } else {
            self.program_multi_plane(start, pool, pib, tp)
        };
        if self.count_sectors {
            let sectors = std::mem::take(&mut self.open_sectors[p]);
            if sectors > 0 {
                self.buf_release_sectors.push(Reverse((end, sectors)));
            }
        } else {
            self.buf_release.push(Reverse(end));
        }
        end
    }

    /// A host page program with multi-plane commands: it joins a queued program of another
    /// plane of its die at the same page index (MQSim's TSU: same die, different plane, same
    /// page address), or is queued as a new command others can join.
    fn program_multi_plane(&mut self, t: u64, pool: u32, page_in_block: u32, tp: u64) -> u64 {
        let u = self.unit_of(pool) as usize;
        let die = pool % self.dies_n;
        let bit = 1u32 << ((pool / self.dies_n) & 31);
        self.mp[u].expire(t);
        let joinable = self.mp[u].joinable(t, die, bit, page_in_block);
        if let Some(i) = joinable
            && self.die_gaps
        {
            // With gaps the joined command grows into the die time after it.
            let cmd = self.mp[u].c[i];
            let c = (pool % self.channels) as usize;
            let xfer = xfer_ns(self.page_bytes, self.channel_bytes_per_s);
            let now = self.now_ns;
            let xe = self.chan_gap[c].peek(now, cmd.start.max(t), xfer) + xfer;
            let by = (xe + tp).saturating_sub(cmd.end);
            // The programs, erases and GC queued behind it move back, as without gaps; a read
            // in the way (reserved, its completion returned) refuses the join.
            let ok = if by == 0 {
                true
            } else if let Some(moves) = self.slots[u].extend_pushing(cmd.start, cmd.end, by) {
                let mut dt = self.die(u);
                self.apply_moves(&mut dt, u, &moves);
                self.set_die(u, dt);
                true
            } else {
                false
            };
            if ok {
                self.chan_gap[c].reserve(now, cmd.start.max(t), xfer);
                let end = cmd.end + by;
                let hot = &mut self.units[u];
                hot.free = hot.free.max(end);
                let cold = &mut self.units_cold[u];
                cold.long_until = cold.long_until.max(end);
                let m = &mut self.mp[u].c[i];
                m.end = end;
                m.planes |= bit;
                self.programs_until = self.programs_until.max(end);
                self.counters.die_busy_ns += by;
                self.counters.channel_busy_ns += xfer;
                self.counters.multi_plane_programs += 1;
                return end;
            }
        } else if let Some(i) = joinable {
            // Both pages cross the channel, then one tPROG: the command ends when the later
            // transfer's tPROG does; what was queued behind it moves back as much.
            let cmd = self.mp[u].c[i];
            let c = (pool % self.channels) as usize;
            let xfer = xfer_ns(self.page_bytes, self.channel_bytes_per_s);
            let xe = self.chan[c].reserve(t, cmd.start.max(t), xfer) + xfer;
            let by = (xe + tp).saturating_sub(cmd.end);
            if by > 0 {
                let mut dt = self.die(u);
                if dt.free >= cmd.end {
                    dt.free += by;
                }
                if dt.long_until >= cmd.end {
                    dt.long_until += by;
                }
                self.set_die(u, dt);
                if let Some(ops) = self.ops.get_mut(u) {
                    ops.shift(cmd.end, by);
                    ops.extend(cmd.start, by);
                }
                self.mp[u].shift(cmd.end, by);
                self.counters.die_busy_ns += by;
            }
            let end = cmd.end + by;
            let m = &mut self.mp[u].c[i];
            m.end = end;
            m.planes |= bit;
            self.programs_until = self.programs_until.max(end);
            self.counters.channel_busy_ns += xfer;
            self.counters.multi_plane_programs += 1;
            return end;
        }
        let (start, end) = self.program_at(t, pool, tp);
        self.mp[u].push(MpCmd {
            start,
            end,
            die,
            page_in_block,
            planes: bit,
        });
        end
    }

    /// The buffer DRAM moves `bytes` from `t` on; returns when done (`t` when unlimited).
    #[inline]
    pub(crate) fn dram(&mut self, t: u64, bytes: u64) -> u64 {
        if self.dram_bytes_per_s == 0 {
            return t;
        }
        let start = t.max(self.dram_free);
        self.dram_free = start + self.dram_access_ns + xfer_ns(bytes, self.dram_bytes_per_s);
        self.dram_free
    }

    /// Look up units `lpn..lpn + n` in the mapping cache at `t`; a miss reads the translation
    /// page first. Returns when the mapping is known. Evicted changed entries are written back.
    fn map_lookup(&mut self, t: u64, lpn: u32, n: u32, write: bool) -> u64 {
        let mut miss_tpage = None;
        for l in lpn..lpn + n {
            let cmt = self.cmt.as_mut().expect("a mapping cache");
            let a = cmt.access(l, write);
            if !a.hit && miss_tpage.is_none() {
                miss_tpage = Some(cmt.tpage_of(l));
            }
            if let Some(tp) = a.writeback_tpage {
                self.counters.map_writebacks += 1;
                // Read the unchanged entries, merge, program the translation page.
                let r = self.translation_read(t, tp, false);
                if self.writeback_programs {
                    let end = self.program(r, tp % self.pools, self.program_ns_mean);
                    self.programs_until = self.programs_until.max(end);
                }
            }
        }
        match miss_tpage {
            Some(_) if write && !self.write_miss_reads => {
                self.counters.map_misses += 1;
                t
            }
            Some(tp) => {
                self.counters.map_misses += 1;
                self.translation_read(t, tp, true)
            }
            None => t,
        }
    }

    /// Read translation page `tp` at `t`; with `shared_reads`, a read of it still in flight
    /// serves a miss (`share`) instead (a write-back always reads: MQSim issues its read).
    /// Returns when the entries are known.
    fn translation_read(&mut self, t: u64, tp: u32, share: bool) -> u64 {
        if share
            && let Some(&end) = self.tpage_read_end.get(tp as usize)
            && end > t
        {
            self.counters.map_shared_reads += 1;
            return end;
        }
        let pool = tp % self.pools;
        let end = self.flash_read(
            t,
            pool,
            self.read_ns_mean,
            self.translation_read_bytes,
            false,
        );
        if let Some(e) = self.tpage_read_end.get_mut(tp as usize) {
            *e = end;
        }
        end
    }

    /// Free blocks per pool at or below which a host block opens only after GC: the
    /// configured hard threshold, or in a deterministic window the least that keeps GC
    /// possible.
    #[inline]
    fn hard_blocks(&self) -> u32 {
        if self.window == PlmWindow::Deterministic {
            GC_RESERVE_BLOCKS
        } else {
            self.ftl.gc_hard_blocks()
        }
    }

    /// Wait for a free page slot in the write buffer (the open page takes one).
    pub(crate) fn admit_page(&mut self, t: u64) -> u64 {
        while let Some(&Reverse(r)) = self.buf_release.peek() {
            if r > t {
                break;
            }
            self.buf_release.pop();
        }
        if self.buf_release.len() + 1 > self.buffer_pages {
            self.counters.buffer_full_waits += 1;
            let Reverse(r) = self.buf_release.pop().expect("buffer holds pages");
            return t.max(r);
        }
        t
    }

    /// With `buffer.count_sectors`: wait until fewer sectors than the buffer holds wait for
    /// their programs (MQSim admits a write-back transaction while its back-pressure depth is
    /// below the limit), then hold `sectors` more in pool `p`'s open page.
    fn admit_sectors(&mut self, t: u64, p: usize, sectors: u64) -> u64 {
        let mut t = t;
        while let Some(&Reverse((r, n))) = self.buf_release_sectors.peek() {
            if r > t {
                break;
            }
            self.buf_release_sectors.pop();
            self.buf_sectors_held -= n;
        }
        if self.buf_sectors_held >= self.buf_sectors_cap {
            self.counters.buffer_full_waits += 1;
            // Open pages hold the rest when nothing is being programmed: nothing to wait for.
            while self.buf_sectors_held >= self.buf_sectors_cap
                && let Some(Reverse((r, n))) = self.buf_release_sectors.pop()
            {
                self.buf_sectors_held -= n;
                t = t.max(r);
            }
        }
        self.buf_sectors_held += sectors;
        self.open_sectors[p] += sectors;
        t
    }

    #[inline]
    pub(crate) fn page_read_ns(&self, page: u32) -> u64 {
        // One page type (the default): not even the division for the page's place in its block.
        if self.read_ns.n == 1 {
            self.read_ns.ns[0]
        } else {
            self.read_ns.of(self.ftl.page_in_block(page))
        }
    }

    /// Read `bytes` of a page of `pool` whose array read takes `tr` (plus retries when `host`
    /// and the draw says so); returns when the bytes are off the channel.
    pub(crate) fn flash_read(&mut self, t: u64, pool: u32, tr: u64, bytes: u64, host: bool) -> u64 {
        let u = self.unit_of(pool) as usize;
        let c = (pool % self.channels) as usize;
        let mut tr = tr;
        if host && self.retry_threshold > 0 && self.rng.next_u64() < self.retry_threshold {
            self.counters.read_retries += 1;
            tr += self.retry_steps * (tr + self.retry_step_overhead_ns);
        }
        let xfer = xfer_ns(bytes, self.channel_bytes_per_s);
        if self.die_gaps {
            return self.flash_read_gaps(t, u, c, tr, xfer, host);
        }
        if self.units[u].free <= t {
            // The die is idle (and so are its reads, `read_free <= free`): the read starts
            // now, first come first served, touching only the die's hot half.
            let xe = self.chan[c].reserve(t, t + tr, xfer) + xfer;
            self.units[u] = DieHot {
                free: xe,
                read_free: xe,
            };
            self.counters.die_busy_ns += xe - t;
            self.counters.channel_busy_ns += xfer;
            return xe;
        }
        let mut dt = self.die(u);
        let (path, start) = read_start(
            self.suspend,
            self.gc_mode,
            self.erase_ns,
            &dt,
            self.ops.get(u),
            t,
        );
        if path == ReadPath::Suspend && dt.read_free <= t {
            self.counters.suspensions += 1;
        }
        if host && let Some(cause) = dt.wait_cause(t, start) {
            let w = &mut self.counters.read_waits[cause as usize];
            let wait = start - t;
            w.reads += 1;
            w.slow_reads += u64::from(wait > READ_WAIT_SLOW_NS);
            w.wait_ns_total += wait;
            w.wait_ns_max = w.wait_ns_max.max(wait);
        }
        let xe = self.chan[c].reserve(t, start + tr, xfer) + xfer;
        match path {
            ReadPath::Suspend => {
                // The program/erase moves back by the read's time and the resume cost.
                let pushed = xe - start + self.resume_ns;
                dt.free += pushed;
                dt.long_until += pushed;
                if self.gc_mode == GcMode::Suspend && dt.gc_until > start {
                    // The suspended operation was GC's: the rest of its episode moves back.
                    dt.gc_until += pushed;
                }
                dt.read_free = xe;
                self.counters.die_busy_ns += xe - start;
            }
            ReadPath::Preempt => {
                // The rest of the GC episode (and whatever is queued behind it) moves back by
                // the read's time.
                let pushed = xe - start;
                dt.free += pushed;
                dt.gc_until += pushed;
                // GC's later page copies start after the read: its boundaries move with them.
                dt.gc_from += pushed;
                if dt.long_until > start {
                    dt.long_until += pushed;
                }
                dt.read_free = xe;
                self.counters.gc_preemptions += 1;
                self.counters.die_busy_ns += pushed;
            }
            ReadPath::Priority => {
                // The queued programs and erases move back by the read's time.
                let pushed = xe - start;
                dt.free += pushed;
                if dt.long_until > start {
                    dt.long_until += pushed;
                }
                dt.read_free = xe;
                self.ops[u].shift(start, pushed);
                if let Some(mp) = self.mp.get_mut(u) {
                    mp.shift(start, pushed);
                }
                self.counters.read_priority_jumps += 1;
                self.counters.die_busy_ns += pushed;
            }
            ReadPath::Fcfs => {
                dt.free = xe;
                dt.read_free = xe;
                self.counters.die_busy_ns += xe - start;
            }
        }
        self.set_die(u, dt);
        self.counters.channel_busy_ns += xfer;
        xe
    }

    /// A page program of `tp` on `pool` whose data is ready at `t`: transfer, then tPROG.
    pub(crate) fn program(&mut self, t: u64, pool: u32, tp: u64) -> u64 {
        self.program_at(t, pool, tp).1
    }

    /// [`Ssd::program`], returning when it starts on its die too.
    fn program_at(&mut self, t: u64, pool: u32, tp: u64) -> (u64, u64) {
        let u = self.unit_of(pool) as usize;
        let c = (pool % self.channels) as usize;
        let xfer = xfer_ns(self.page_bytes, self.channel_bytes_per_s);
        if self.die_gaps {
            return self.program_gaps(t, u, c, tp, xfer);
        }
        let hot = self.units[u];
        // Not with suspend: there a read suspends any program at once, queued or not, and a
        // program put between copies would hold reads (`read_free`) for its whole tPROG.
        if hot.free > t && self.gc_mode == GcMode::Preempt && !self.suspend && self.ops.is_empty() {
            let cold = self.units_cold[u];
            if t < cold.gc_until {
                // GC is copying pages on this die, or queued on it: the program goes in at the
                // next page-copy boundary, as a read does, and the rest of the episode moves
                // back (firmware interleaves host programs with GC's page moves; queued whole
                // behind a victim of 150 page copies, a die's host programs piled up for tens
                // of milliseconds and every read behind them waited: p4600, paper004-dnd).
                let base = t.max(hot.read_free).max(cold.gc_from);
                let step = cold.gc_step;
                let start = cold.gc_from + (base - cold.gc_from).div_ceil(step) * step;
                if start < cold.gc_until && start <= cold.gc_until.saturating_sub(self.erase_ns) {
                    return self.program_into_gc(t, u, c, start, tp, xfer);
                }
            }
        }
        let start = t.max(hot.free);
        let xe = self.chan[c].reserve(t, start, xfer) + xfer;
        let end = xe + tp;
        self.units[u].free = end;
        self.units_cold[u].long_until = end;
        if let Some(ops) = self.ops.get_mut(u) {
            ops.push(t, start, end);
        }
        self.programs_until = self.programs_until.max(end);
        self.counters.die_busy_ns += end - start;
        self.counters.channel_busy_ns += xfer;
        (start, end)
    }

    /// A host program (data ready at `t`) put between GC's page copies on unit `u` at
    /// `start`: the episode's rest and what is queued behind it move back by its time, and
    /// later reads and programs that preempt the episode go after it (`read_free`).
    fn program_into_gc(
        &mut self,
        t: u64,
        u: usize,
        c: usize,
        start: u64,
        tp: u64,
        xfer: u64,
    ) -> (u64, u64) {
        let xe = self.chan[c].reserve(t, start, xfer) + xfer;
        let end = xe + tp;
        let pushed = end - start;
        let mut dt = self.die(u);
        dt.free += pushed;
        dt.gc_until += pushed;
        // GC's later page copies start after the program: its boundaries move with them.
        dt.gc_from += pushed;
        dt.long_until = if dt.long_until > start {
            dt.long_until + pushed
        } else {
            end
        };
        dt.read_free = end;
        self.set_die(u, dt);
        self.counters.gc_preemptions += 1;
        self.programs_until = self.programs_until.max(end);
        self.counters.die_busy_ns += pushed;
        self.counters.channel_busy_ns += xfer;
        (start, end)
    }

    /// A read on unit `u` with `controller.die_gaps`: in the earliest gap at or after `t`
    /// that holds its tR and its transfer (where the channel can take it), or, in place of
    /// programs, erases (with read priority) and GC page copies not started by `t`, which move
    /// back. Returns when its bytes are off the channel.
    fn flash_read_gaps(
        &mut self,
        t: u64,
        u: usize,
        c: usize,
        tr: u64,
        xfer: u64,
        host: bool,
    ) -> u64 {
        let now = self.now_ns;
        let step = self.units_cold[u].gc_step;
        let s = gap_read_fit(
            &mut self.slots[u],
            &self.chan_gap[c],
            now,
            t,
            tr,
            xfer,
            step,
            self.gap_priority,
        );
        let xe = self.chan_gap[c].reserve(now, s + tr, xfer) + xfer;
        let moves = self.slots[u].place_read(s, xe, t, self.gap_priority);
        let mut dt = self.die(u);
        if host && let Some(cause) = dt.wait_cause(t, s) {
            let w = &mut self.counters.read_waits[cause as usize];
            let wait = s - t;
            w.reads += 1;
            w.slow_reads += u64::from(wait > READ_WAIT_SLOW_NS);
            w.wait_ns_total += wait;
            w.wait_ns_max = w.wait_ns_max.max(wait);
        }
        let (gc, long) = self.apply_moves(&mut dt, u, &moves);
        self.counters.gc_preemptions += u64::from(gc);
        self.counters.read_priority_jumps += u64::from(long);
        dt.free = dt.free.max(xe);
        self.set_die(u, dt);
        self.counters.die_busy_ns += xe - s;
        self.counters.channel_busy_ns += xfer;
        xe
    }

    /// What moving programs, erases and GC back changes beyond the die's slots. Returns
    /// whether GC and whether programs or erases moved.
    fn apply_moves(&mut self, dt: &mut DieTime, u: usize, moves: &SlotMoves) -> (bool, bool) {
        let (mut gc, mut long) = (false, false);
        for m in &moves.0[..moves.1] {
            let by = m.to - m.from;
            dt.free = dt.free.max(m.end);
            dt.long_until = dt.long_until.max(m.end);
            if m.kind == SLOT_GC {
                gc = true;
                dt.gc_until = dt.gc_until.max(m.end);
            } else {
                long = true;
                self.programs_until = self.programs_until.max(m.end);
                if let Some(mp) = self.mp.get_mut(u) {
                    mp.move_within(m.from, m.end - by, by);
                }
            }
        }
        (gc, long)
    }

    /// A program on unit `u` with `controller.die_gaps`: in the earliest gap at or after `t`
    /// that holds its transfer (where the channel can take it) and tPROG.
    fn program_gaps(&mut self, t: u64, u: usize, c: usize, tp: u64, xfer: u64) -> (u64, u64) {
        let now = self.now_ns;
        let slots = &mut self.slots[u];
        slots.make_room(now, 1);
        let chan = &self.chan_gap[c];
        let start = slots.fit(t, u64::MAX, false, |s| {
            chan.peek(now, s, xfer) + xfer + tp - s
        });
        let xe = self.chan_gap[c].reserve(now, start, xfer) + xfer;
        let end = xe + tp;
        self.slots[u].put(start, end - start, SLOT_LONG);
        let hot = &mut self.units[u];
        hot.free = hot.free.max(end);
        let cold = &mut self.units_cold[u];
        cold.long_until = cold.long_until.max(end);
        self.programs_until = self.programs_until.max(end);
        self.counters.die_busy_ns += end - start;
        self.counters.channel_busy_ns += xfer;
        (start, end)
    }

    /// Where a read on unit `u` ready at `t` would start with `controller.die_gaps`, reserving
    /// nothing (the same code as the read, on a copy of the die's slots); `pending_gc`: a GC
    /// episode the read's own command would queue first.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gap_read_start(
        &self,
        now: u64,
        u: usize,
        c: usize,
        t: u64,
        tr: u64,
        xfer: u64,
        pending_gc: Option<DieTime>,
    ) -> u64 {
        let mut slots = self.slots[u].clone();
        let mut step = self.units_cold[u].gc_step;
        if let Some(g) = pending_gc {
            slots.make_room(now, 1);
            if g.gc_until > g.gc_from {
                slots.put(g.gc_from, g.gc_until - g.gc_from, SLOT_GC);
            }
            step = g.gc_step;
        }
        gap_read_fit(
            &mut slots,
            &self.chan_gap[c],
            now,
            t,
            tr,
            xfer,
            step,
            self.gap_priority,
        )
    }

    /// Die time of a GC episode's work: page reads, programs and erases, and with no copy-back
    /// each moved page over the channel and back.
    #[inline]
    pub(crate) fn gc_duration(&self, w: &GcWork) -> u64 {
        let mut d = w.page_reads as u64 * self.read_ns_mean
            + w.page_programs as u64 * self.program_ns_mean
            + w.erases as u64 * self.erase_ns;
        if !self.gc_copyback {
            d += (w.page_reads + w.page_programs) as u64
                * xfer_ns(self.page_bytes, self.channel_bytes_per_s);
        }
        d
    }

    /// The die's reservation after a GC episode of `w` queued at `t`. Pure.
    #[inline]
    fn with_gc(&self, mut dt: DieTime, t: u64, w: &GcWork, cause: ReadWaitCause) -> DieTime {
        let dur = self.gc_duration(w);
        let start = t.max(dt.free);
        let end = start + dur;
        dt.free = end;
        dt.long_until = end;
        dt.gc_from = start;
        dt.gc_until = end;
        dt.gc_cause = cause;
        dt.gc_step = if w.page_reads > 0 {
            dur.div_ceil(w.page_reads as u64).max(1)
        } else {
            dur.max(1)
        };
        if self.gc_copyback && w.page_reads > 0 {
            // One page copy: read plus program (kept exactly as before: the step the model
            // has always used).
            dt.gc_step = self.read_ns_mean + self.program_ns_mean;
        }
        dt
    }

    pub(crate) fn schedule_gc(&mut self, t: u64, w: &GcWork, cause: ReadWaitCause) {
        let u = self.unit_of(w.pool) as usize;
        let dt = self.with_gc(self.die(u), t, w, cause);
        self.set_die(u, dt);
        if self.die_gaps && dt.gc_until > dt.gc_from {
            // Queued behind everything the die has, like without gaps.
            self.slots[u].make_room(self.now_ns, 1);
            self.slots[u].put(dt.gc_from, dt.gc_until - dt.gc_from, SLOT_GC);
        }
        let dur = self.gc_duration(w);
        self.counters.die_busy_ns += dur;
        if !self.gc_copyback {
            self.counters.channel_busy_ns += (w.page_reads + w.page_programs) as u64
                * xfer_ns(self.page_bytes, self.channel_bytes_per_s);
        }
        if self.has_power {
            self.active(self.units[u].free);
        }
    }

    /// The pool soft GC would look at for a command at `now`, and whether it would start GC
    /// there: its die idle, short of free blocks, and not in a deterministic window.
    #[inline]
    fn idle_gc_due(&self, now_ns: u64) -> Option<u32> {
        let d = self.idle_gc_next;
        // Free blocks first: the pool's count is compact and usually says no, while the die's
        // timeline is a cache line this command would not touch otherwise (with a thousand
        // members, every line of a device is cold when its command comes).
        (self.window != PlmWindow::Deterministic
            && self.ftl.free_blocks(d) < self.ftl.gc_soft_blocks()
            && self.units[self.unit_of(d) as usize].free <= now_ns)
            .then_some(d)
    }

    /// The unit state soft GC would leave behind for a command at `now` (for the queries).
    pub(crate) fn idle_gc_pending(&self, now_ns: u64) -> Option<(u32, DieTime)> {
        let d = self.idle_gc_due(now_ns)?;
        let w = self.ftl.gc_once_work(d);
        let u = self.unit_of(d);
        (w.victims > 0).then(|| {
            (
                u,
                self.with_gc(self.die(u as usize), now_ns, &w, ReadWaitCause::GcIdle),
            )
        })
    }

    /// Soft GC: look at one pool per command (round robin); if its die is idle and it is short
    /// of free blocks, reclaim one victim now. Never in a deterministic window.
    fn idle_gc(&mut self, t: u64) {
        let due = self.idle_gc_due(t);
        // Round robin without a division on every command.
        let next = self.idle_gc_next + 1;
        self.idle_gc_next = if next == self.pools { 0 } else { next };
        if let Some(d) = due {
            let w = Arc::make_mut(&mut self.ftl).gc_once(d);
            if w.victims > 0 {
                self.counters.gc_soft_episodes += 1;
                self.schedule_gc(t, &w, ReadWaitCause::GcIdle);
            }
        }
    }
}
