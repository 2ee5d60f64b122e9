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
//!   host reads with GC page moves).
//! - suspend-resume: when enabled, a read to a die busy programming or erasing goes first and
//!   pushes the program/erase back by the read's time plus `resume_overhead_ns`.
//!
//! The control surface (what a host policy may do besides reads and writes; docs/arch-sim.md):
//! - [`Ssd::select_window`]: NVMe Predictable Latency Mode windows. In a deterministic window
//!   (DTWIN) no GC runs unless a die would otherwise run out of free blocks; that forced GC is
//!   counted as a window violation. In a non-deterministic window (NDWIN) GC is allowed, and the
//!   GC debt left by a DTWIN starts at once.
//! - [`Ssd::gc_now`]: GC to a number of free blocks per die and/or within a time budget.
//! - [`Ssd::trim`]: unmap a range.
//! - [`Ssd::busy_remaining_ns`], [`Ssd::range_busy_remaining_ns`], [`Ssd::read_wait_ns`] and
//!   [`Ssd::plm_status`]: queries that change nothing.
//! - [`Ssd::read_fast_fail`]: a read that returns at once with the remaining busy time when it
//!   would wait on its dies longer than a threshold (IODA, SOSP'21), reserving nothing.
//!
//! Every call that takes `now_ns` asserts that time does not go backwards.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use nines_core::op::Op;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::config::DeviceConfig;
use crate::ftl::{Ftl, FtlStats, GC_RESERVE_BLOCKS, GcWork};

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
}

impl std::str::FromStr for Precondition {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Precondition::None),
            "fill" => Ok(Precondition::Fill),
            "steady" => Ok(Precondition::Steady),
            _ => Err(format!(
                "unknown preconditioning `{s}`; use none, fill or steady"
            )),
        }
    }
}

impl Precondition {
    pub fn name(self) -> &'static str {
        match self {
            Precondition::None => "none",
            Precondition::Fill => "fill",
            Precondition::Steady => "steady",
        }
    }
}

/// Counters of the timed model since the last reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SsdCounters {
    pub reads: u64,
    pub writes: u64,
    pub read_buffer_hits: u64,
    pub suspensions: u64,
    /// Reads that went in between two page copies of a GC episode.
    pub gc_preemptions: u64,
    pub gc_hard_episodes: u64,
    pub gc_soft_episodes: u64,
    pub housekeeping_stalls: u64,
    pub slow_ios: u64,
    pub buffer_full_waits: u64,
    pub die_busy_ns: u64,
    pub channel_busy_ns: u64,
    /// GC episodes forced in a deterministic window because a die was out of free blocks
    /// (each one breaks the window's promise).
    pub window_violations: u64,
    /// Fast-fail reads answered `Busy` (they reserved nothing).
    pub fast_fail_busy: u64,
    /// Victim blocks reclaimed by [`Ssd::gc_now`] and by entering a non-deterministic window.
    pub gc_now_victims: u64,
    pub trims: u64,
}

/// NVMe Predictable Latency Mode window of the device (one NVM set: the whole device).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlmWindow {
    /// Predictable Latency Mode off: GC as configured (the default).
    #[default]
    Off,
    /// DTWIN: no GC unless a die would run out of free blocks (then forced, and counted).
    Deterministic,
    /// NDWIN: GC allowed; pending GC debt runs.
    NonDeterministic,
}

/// What [`Ssd::gc_now`] should reach. Both limits may be given; GC stops at the first reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcGoal {
    /// Free blocks per die to reach (clamped to the die); `None`: the soft threshold, where
    /// idle GC would stop.
    pub free_blocks_per_die: Option<u32>,
    /// Every die's GC must end by `now + budget_ns`; a victim that would not fit is not
    /// started. `None`: no time limit.
    pub budget_ns: Option<u64>,
}

/// What a GC request did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcDone {
    pub victims: u64,
    pub units_moved: u64,
    /// When the last die finishes the GC it was given (`now` when nothing ran).
    pub until_ns: u64,
}

/// The answer of a fast-fail read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The read ran as a normal read; it completes then.
    Done { completion_ns: u64 },
    /// The read would have waited `remaining_ns` on its dies, more than the threshold; nothing
    /// was reserved. The refusal reaches the host at `completion_ns` (controller latency).
    Busy {
        remaining_ns: u64,
        completion_ns: u64,
    },
}

/// The device's Predictable Latency Mode status (the model of NVMe log page 0Ah, per device).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlmStatus {
    pub window: PlmWindow,
    /// When the current window was selected.
    pub window_since_ns: u64,
    /// Free blocks over all dies, and on the die with the fewest.
    pub free_blocks: u64,
    pub free_blocks_min: u32,
    /// Per-die thresholds in blocks: idle GC below `gc_soft_blocks`; forced GC at or below
    /// `gc_hard_blocks` (outside DTWIN) or `dtwin_reserve_blocks` (in DTWIN).
    pub gc_soft_blocks: u32,
    pub gc_hard_blocks: u32,
    pub dtwin_reserve_blocks: u32,
    /// Blocks GC owes: over all dies, how far each is below the soft threshold.
    pub gc_debt_blocks: u64,
    /// Bytes the host can write in a deterministic window from now before GC is forced
    /// (exact for this model: host pages fill dies round robin whatever the addresses).
    pub dtwin_write_bytes_estimate: u64,
    /// Reads never force GC in this model, so a DTWIN has no read limit: `None`.
    pub dtwin_read_estimate: Option<u64>,
    pub window_violations: u64,
    /// How long until every die, channel and the controller is idle.
    pub busy_remaining_ns: u64,
}

/// Reservation state of one die. Kept together (one cache line) because a read touches all.
#[derive(Clone, Copy, Debug)]
struct DieTime {
    /// Reserved until then (host and GC work).
    free: u64,
    /// End of the latest program or erase (what a read can suspend).
    long_until: u64,
    /// End of the latest read that went ahead of queued work.
    read_free: u64,
    /// The die's latest GC episode: [gc_from, gc_until), preemptible every `gc_step` (one page
    /// copy).
    gc_from: u64,
    gc_until: u64,
    gc_step: u64,
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
        }
    }
}

/// How a read gets onto a die (see [`read_start`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadPath {
    /// Suspends a program or erase.
    Suspend,
    /// Goes in between two page copies of a GC episode.
    Preempt,
    /// Waits its turn.
    Fcfs,
}

/// Where a read arriving at die `die` at `t` starts its tR, and by which path. Pure: the read
/// itself and the queries share it, so a query predicts exactly what a read would do.
#[inline]
fn read_start(suspend: bool, die: &DieTime, t: u64) -> (ReadPath, u64) {
    if suspend && die.long_until > t && die.free > t {
        // The die is programming or erasing (or has that queued): the read goes first.
        return (ReadPath::Suspend, t.max(die.read_free));
    }
    if die.free > t && die.gc_from <= t && t < die.gc_until {
        // GC is copying pages on this die: the read goes in at the next page-copy boundary.
        let base = t.max(die.read_free);
        let step = die.gc_step;
        let start = die.gc_from + (base - die.gc_from).div_ceil(step) * step;
        if start < die.gc_until {
            return (ReadPath::Preempt, start);
        }
    }
    (ReadPath::Fcfs, t.max(die.free))
}

/// The flash pages a read of units `first..=last` touches, grouped: consecutive units in the
/// same page are one page read. Yields (die, page, bytes of the request in it).
struct ReadPages {
    lpn: u64,
    last: u64,
    unit_bytes: u64,
    offset_bytes: u64,
    end_bytes: u64,
}

impl ReadPages {
    fn new(unit_bytes: u64, offset_bytes: u64, len_bytes: u64) -> ReadPages {
        ReadPages {
            lpn: offset_bytes / unit_bytes,
            last: (offset_bytes + len_bytes - 1) / unit_bytes,
            unit_bytes,
            offset_bytes,
            end_bytes: offset_bytes + len_bytes,
        }
    }

    #[inline]
    fn next(&mut self, ftl: &Ftl) -> Option<(u32, u32, u64)> {
        if self.lpn > self.last {
            return None;
        }
        let lpn = self.lpn;
        let (die, page, _) = ftl.locate(lpn as u32);
        let mut n = 1;
        while lpn + n <= self.last && ftl.locate((lpn + n) as u32).1 == page {
            n += 1;
        }
        let lo = (lpn * self.unit_bytes).max(self.offset_bytes);
        let hi = ((lpn + n) * self.unit_bytes).min(self.end_bytes);
        self.lpn += n;
        Some((die, page, hi - lo))
    }
}

#[derive(Clone, Debug)]
pub struct Ssd {
    /// Shared between devices until one of them changes it (copy on write): a read-only run of
    /// a thousand preconditioned devices keeps one map.
    ftl: Arc<Ftl>,
    unit_bytes: u64,
    logical_bytes: u64,
    channels: u32,
    dies: u32,
    page_bytes: u64,
    read_ns: Vec<u64>,
    program_ns: Vec<u64>,
    read_ns_mean: u64,
    program_ns_mean: u64,
    erase_ns: u64,
    channel_bytes_per_s: u64,
    overhead_ns: u64,
    command_ns: u64,
    link_read_bytes_per_s: u64,
    link_write_bytes_per_s: u64,
    suspend: bool,
    resume_ns: u64,
    hk_period_ns: u64,
    hk_duration_ns: u64,
    hk_phase_ns: u64,
    slow_threshold: u64,
    slow_extra_ns: u64,
    buffer_pages: usize,
    // Timelines.
    die: Vec<DieTime>,
    chan: Vec<Timeline>,
    ctrl_free: u64,
    buf_release: BinaryHeap<Reverse<u64>>,
    idle_gc_next: u32,
    rng: Xoshiro256PlusPlus,
    counters: SsdCounters,
    /// The latest `now_ns` any call gave: time must not go backwards.
    now_ns: u64,
    window: PlmWindow,
    window_since_ns: u64,
}

#[inline]
fn xfer_ns(bytes: u64, bytes_per_s: u64) -> u64 {
    (bytes as u128 * 1_000_000_000u128).div_ceil(bytes_per_s as u128) as u64
}

impl Ssd {
    /// A factory-fresh device. `seed` sets its housekeeping phase and slow-I/O draws.
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
        let dies = cfg.dies() as u32;
        let buffer_pages =
            (cfg.buffer.write_buffer_bytes / cfg.geometry.page_size_bytes as u64).max(2) as usize;
        let mut ssd = Ssd {
            ftl,
            unit_bytes: cfg.geometry.map_unit_bytes as u64,
            logical_bytes: cfg.logical_bytes(),
            channels: cfg.geometry.channels,
            dies,
            page_bytes: cfg.geometry.page_size_bytes as u64,
            read_ns_mean: read_ns.iter().sum::<u64>() / read_ns.len() as u64,
            program_ns_mean: program_ns.iter().sum::<u64>() / program_ns.len() as u64,
            read_ns,
            program_ns,
            erase_ns: t.erase_ns,
            channel_bytes_per_s: t.channel_bytes_per_s,
            overhead_ns: cfg.controller.overhead_ns,
            command_ns: cfg.controller.command_ns,
            link_read_bytes_per_s: cfg.controller.read_bytes_per_s,
            link_write_bytes_per_s: cfg.controller.write_bytes_per_s,
            suspend: cfg.suspend.enabled,
            resume_ns: cfg.suspend.resume_overhead_ns,
            hk_period_ns: cfg.housekeeping.period_ns,
            hk_duration_ns: cfg.housekeeping.duration_ns,
            hk_phase_ns: 0,
            slow_threshold: 0,
            slow_extra_ns: cfg.slow_io.extra_ns,
            buffer_pages,
            die: vec![DieTime::default(); dies as usize],
            chan: vec![Timeline::default(); cfg.geometry.channels as usize],
            ctrl_free: 0,
            buf_release: BinaryHeap::with_capacity(buffer_pages + 1),
            idle_gc_next: 0,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            counters: SsdCounters::default(),
            now_ns: 0,
            window: PlmWindow::Off,
            window_since_ns: 0,
        };
        // Probability as a threshold on 64 random bits; 1.0 saturates to always.
        let p = cfg.slow_io.probability;
        ssd.slow_threshold = if p >= 1.0 {
            u64::MAX
        } else {
            (p * 18_446_744_073_709_551_616.0) as u64
        };
        ssd.reseed(seed);
        ssd
    }

    /// New housekeeping phase and slow-I/O stream (after cloning a preconditioned device).
    pub fn reseed(&mut self, seed: u64) {
        self.rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5ee0_d15c_0000_0001);
        if self.hk_period_ns > 0 {
            self.hk_phase_ns = self.rng.next_u64() % self.hk_period_ns;
        }
    }

    /// Bring the FTL to a state without timing anything; counters are reset afterwards.
    pub fn precondition(&mut self, mode: Precondition, seed: u64) {
        match mode {
            Precondition::None => {}
            Precondition::Fill => Arc::make_mut(&mut self.ftl).fill(),
            Precondition::Steady => {
                let ftl = Arc::make_mut(&mut self.ftl);
                ftl.fill();
                let n = ftl.logical_units() as u64;
                ftl.random_overwrite(n, seed);
                ftl.settle_gc();
            }
        }
        Arc::make_mut(&mut self.ftl).reset_stats();
        self.counters = SsdCounters::default();
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
    /// Exported capacity.
    pub fn logical_bytes(&self) -> u64 {
        self.logical_bytes
    }
    pub fn dies(&self) -> u32 {
        self.dies
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
    pub fn reset_counters(&mut self) {
        self.counters = SsdCounters::default();
        if self.ftl.stats() != FtlStats::default() {
            Arc::make_mut(&mut self.ftl).reset_stats();
        }
    }

    /// Assert that time does not go backwards, and advance the device's notion of now.
    #[inline]
    fn advance(&mut self, now_ns: u64) {
        self.check_time(now_ns);
        self.now_ns = now_ns;
    }

    #[inline]
    fn check_time(&self, now_ns: u64) {
        assert!(
            now_ns >= self.now_ns,
            "Ssd called at {now_ns} ns after a call at {} ns: the driver must call in \
             non-decreasing time",
            self.now_ns
        );
    }

    /// The front end of a command arriving at `now`: (when a housekeeping stall lets it in,
    /// when the controller starts it). Pure.
    #[inline]
    fn front_end(&self, now_ns: u64) -> (u64, u64) {
        let mut t = now_ns;
        if self.hk_period_ns > 0 {
            let x = (t + self.hk_phase_ns) % self.hk_period_ns;
            if x < self.hk_duration_ns {
                t += self.hk_duration_ns - x;
            }
        }
        let start = if self.command_ns > 0 {
            t.max(self.ctrl_free)
        } else {
            t
        };
        (t, start)
    }

    /// Take the controller for a command arriving at `now`; returns when it reaches the flash.
    #[inline]
    fn enter(&mut self, now_ns: u64) -> u64 {
        let (after_stall, start) = self.front_end(now_ns);
        if after_stall > now_ns {
            self.counters.housekeeping_stalls += 1;
        }
        if self.command_ns > 0 {
            self.ctrl_free = start + self.command_ns;
        }
        start + self.overhead_ns
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
        done
    }

    /// Submit a command at `now_ns`; returns the time it completes. Calls must come in
    /// non-decreasing `now_ns` (asserted). The range must lie inside [`Ssd::logical_bytes`].
    pub fn submit(&mut self, now_ns: u64, op: Op, offset_bytes: u64, len_bytes: u64) -> u64 {
        assert!(len_bytes > 0 && offset_bytes + len_bytes <= self.logical_bytes);
        self.advance(now_ns);
        let t = self.enter(now_ns);
        self.idle_gc(now_ns);
        let mut done = match op {
            Op::Read => {
                self.counters.reads += 1;
                let mut ready = t;
                let open = self.ftl.open_host_page();
                let mut pages = ReadPages::new(self.unit_bytes, offset_bytes, len_bytes);
                while let Some((die, page, bytes)) = pages.next(&self.ftl) {
                    let end = if open == Some(page) {
                        self.counters.read_buffer_hits += 1;
                        t
                    } else {
                        self.flash_read(t, die, page, bytes)
                    };
                    ready = ready.max(end);
                }
                ready + xfer_ns(len_bytes, self.link_read_bytes_per_s)
            }
            Op::Write => {
                self.counters.writes += 1;
                let first = offset_bytes / self.unit_bytes;
                let last = (offset_bytes + len_bytes - 1) / self.unit_bytes;
                let hard = self.hard_blocks();
                let mut admitted = t;
                let link = xfer_ns(len_bytes, self.link_write_bytes_per_s);
                for lpn in first..=last {
                    let mut gc = GcWork::default();
                    let place =
                        Arc::make_mut(&mut self.ftl).write_unit_with(lpn as u32, &mut gc, hard);
                    if gc.victims > 0 {
                        self.counters.gc_hard_episodes += 1;
                        if self.window == PlmWindow::Deterministic {
                            self.counters.window_violations += 1;
                        }
                        self.schedule_gc(admitted, &gc);
                    }
                    if place.page_opened {
                        admitted = self.admit_page(admitted);
                    }
                    if place.page_full {
                        let end = self.program(admitted + link, place.die, place.page);
                        self.buf_release.push(Reverse(end));
                    }
                }
                admitted + link
            }
        };
        if self.slow_threshold > 0 && self.rng.next_u64() < self.slow_threshold {
            self.counters.slow_ios += 1;
            done += self.slow_extra_ns;
        }
        done
    }

    /// Free blocks per die at or below which a host block opens only after GC: the configured
    /// hard threshold, or in a deterministic window the least that keeps GC possible.
    #[inline]
    fn hard_blocks(&self) -> u32 {
        if self.window == PlmWindow::Deterministic {
            GC_RESERVE_BLOCKS
        } else {
            self.ftl.gc_hard_blocks()
        }
    }

    /// A read at `now` that gives up at once, reserving nothing, when it would wait on its
    /// dies (behind GC, programs, erases or queued reads) longer than `threshold_ns`; otherwise
    /// exactly [`Ssd::submit`] of a read. The wait is [`Ssd::read_wait_ns`] less the front
    /// end's (housekeeping and controller queue), which is not the dies' doing.
    pub fn read_fast_fail(
        &mut self,
        now_ns: u64,
        offset_bytes: u64,
        len_bytes: u64,
        threshold_ns: u64,
    ) -> ReadOutcome {
        assert!(len_bytes > 0 && offset_bytes + len_bytes <= self.logical_bytes);
        self.advance(now_ns);
        let (after_stall, start) = self.front_end(now_ns);
        let wait = self.flash_wait(now_ns, start + self.overhead_ns, offset_bytes, len_bytes);
        if wait > threshold_ns {
            self.counters.fast_fail_busy += 1;
            return ReadOutcome::Busy {
                remaining_ns: wait,
                completion_ns: after_stall + self.overhead_ns,
            };
        }
        ReadOutcome::Done {
            completion_ns: self.submit(now_ns, Op::Read, offset_bytes, len_bytes),
        }
    }

    /// How much longer than on an idle device a read of the range submitted at `now` would
    /// take: housekeeping stall, controller queue, and the wait on its dies and channels
    /// (including GC that the read's own arrival would start). Changes nothing. Exact for a
    /// read whose pages are on different channels (every read of one page, tested); random
    /// per-command costs (slow I/O) are not predicted.
    pub fn read_wait_ns(&self, now_ns: u64, offset_bytes: u64, len_bytes: u64) -> u64 {
        assert!(len_bytes > 0 && offset_bytes + len_bytes <= self.logical_bytes);
        self.check_time(now_ns);
        let (_, start) = self.front_end(now_ns);
        let t = start + self.overhead_ns;
        start - now_ns + self.flash_wait(now_ns, t, offset_bytes, len_bytes)
    }

    /// The longest wait of the range's flash pages for a read reaching the flash at `t`: die
    /// (and channel) time beyond tR + transfer. Pure; accounts for the soft GC that the read's
    /// own `submit` at `now` would start first.
    fn flash_wait(&self, now_ns: u64, t: u64, offset_bytes: u64, len_bytes: u64) -> u64 {
        let pending = self.idle_gc_pending(now_ns);
        let open = self.ftl.open_host_page();
        let mut wait = 0;
        let mut pages = ReadPages::new(self.unit_bytes, offset_bytes, len_bytes);
        while let Some((die, page, bytes)) = pages.next(&self.ftl) {
            if open == Some(page) {
                continue;
            }
            let d = match pending {
                Some((pd, dt)) if pd == die => dt,
                _ => self.die[die as usize],
            };
            let tr = self.page_read_ns(page);
            let (_, start) = read_start(self.suspend, &d, t);
            let xfer = xfer_ns(bytes, self.channel_bytes_per_s);
            let c = (die % self.channels) as usize;
            let xs = self.chan[c].peek(t, start + tr, xfer);
            wait = wait.max(xs - (t + tr));
        }
        wait
    }

    /// How long until every die, channel and the controller of the device is idle, from `now`.
    pub fn busy_remaining_ns(&self, now_ns: u64) -> u64 {
        self.check_time(now_ns);
        let dies = self.die.iter().map(|d| d.free).max().unwrap_or(0);
        let chans = self.chan.iter().map(Timeline::end).max().unwrap_or(0);
        dies.max(chans).max(self.ctrl_free).saturating_sub(now_ns)
    }

    /// How long the dies the range maps to stay reserved from `now` (GC, programs, erases,
    /// reads queued). A read may get in earlier (suspend, GC preemption): that is
    /// [`Ssd::read_wait_ns`].
    pub fn range_busy_remaining_ns(&self, now_ns: u64, offset_bytes: u64, len_bytes: u64) -> u64 {
        assert!(len_bytes > 0 && offset_bytes + len_bytes <= self.logical_bytes);
        self.check_time(now_ns);
        let mut busy = 0;
        let mut pages = ReadPages::new(self.unit_bytes, offset_bytes, len_bytes);
        while let Some((die, _, _)) = pages.next(&self.ftl) {
            busy = busy.max(self.die[die as usize].free.saturating_sub(now_ns));
        }
        busy
    }

    /// Select a Predictable Latency Mode window at `now` (NVMe Set Features 14h; selecting any
    /// window enables the mode, `Off` disables it). GC already started keeps running. Entering
    /// NDWIN starts the GC debt at once: every die below the soft threshold collects back to
    /// it, each as soon as it is free ([`Ssd::gc_now`] with the default goal).
    pub fn select_window(&mut self, now_ns: u64, window: PlmWindow) -> GcDone {
        self.advance(now_ns);
        if window != self.window {
            self.window = window;
            self.window_since_ns = now_ns;
        }
        if window == PlmWindow::NonDeterministic {
            self.gc_now(now_ns, GcGoal::default())
        } else {
            GcDone {
                until_ns: now_ns,
                ..GcDone::default()
            }
        }
    }

    pub fn window(&self) -> PlmWindow {
        self.window
    }

    /// Run GC at `now` on every die short of the goal: victims are reclaimed in greedy order
    /// and each die's work is queued behind what the die already has (host reads may still
    /// preempt it between page copies). Allowed in any window: the host asked for it.
    pub fn gc_now(&mut self, now_ns: u64, goal: GcGoal) -> GcDone {
        self.advance(now_ns);
        let bpd = self.ftl.blocks_per_die();
        let target = goal
            .free_blocks_per_die
            .unwrap_or(self.ftl.gc_soft_blocks())
            .min(bpd);
        let deadline = goal.budget_ns.map(|b| now_ns.saturating_add(b));
        let mut done = GcDone {
            until_ns: now_ns,
            ..GcDone::default()
        };
        for d in 0..self.dies {
            let start = now_ns.max(self.die[d as usize].free);
            let mut work = GcWork {
                die: d,
                ..GcWork::default()
            };
            let mut dur = 0;
            // Bounded: at most one victim per block of the die.
            for _ in 0..bpd {
                if self.ftl.free_blocks(d) >= target {
                    break;
                }
                if let Some(deadline) = deadline {
                    let w = self.ftl.gc_once_work(d);
                    if w.victims == 0 || start + dur + self.gc_duration(&w) > deadline {
                        break;
                    }
                }
                let w = Arc::make_mut(&mut self.ftl).gc_once(d);
                if w.victims == 0 {
                    break;
                }
                dur += self.gc_duration(&w);
                work.add(&w);
            }
            if work.victims > 0 {
                self.schedule_gc(now_ns, &work);
                done.victims += work.victims as u64;
                done.units_moved += work.units_moved;
                done.until_ns = done.until_ns.max(self.die[d as usize].free);
            }
        }
        self.counters.gc_now_victims += done.victims;
        done
    }

    /// The device's Predictable Latency Mode status at `now` (NVMe log page 0Ah). Changes
    /// nothing.
    pub fn plm_status(&self, now_ns: u64) -> PlmStatus {
        self.check_time(now_ns);
        let soft = self.ftl.gc_soft_blocks();
        let mut free_blocks = 0u64;
        let mut free_blocks_min = u32::MAX;
        let mut debt = 0u64;
        for d in 0..self.dies {
            let f = self.ftl.free_blocks(d);
            free_blocks += f as u64;
            free_blocks_min = free_blocks_min.min(f);
            debt += soft.saturating_sub(f) as u64;
        }
        PlmStatus {
            window: self.window,
            window_since_ns: self.window_since_ns,
            free_blocks,
            free_blocks_min,
            gc_soft_blocks: soft,
            gc_hard_blocks: self.ftl.gc_hard_blocks(),
            dtwin_reserve_blocks: GC_RESERVE_BLOCKS,
            gc_debt_blocks: debt,
            dtwin_write_bytes_estimate: self.ftl.host_units_before_gc(GC_RESERVE_BLOCKS)
                * self.unit_bytes,
            dtwin_read_estimate: None,
            window_violations: self.counters.window_violations,
            busy_remaining_ns: self.busy_remaining_ns(now_ns),
        }
    }

    /// Wait for a free page slot in the write buffer (the open page takes one).
    fn admit_page(&mut self, t: u64) -> u64 {
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

    #[inline]
    fn page_read_ns(&self, page: u32) -> u64 {
        self.read_ns[(self.ftl.page_in_block(page) as usize) % self.read_ns.len()]
    }

    fn flash_read(&mut self, t: u64, die: u32, page: u32, bytes: u64) -> u64 {
        let d = die as usize;
        let c = (die % self.channels) as usize;
        let tr = self.page_read_ns(page);
        let xfer = xfer_ns(bytes, self.channel_bytes_per_s);
        let (path, start) = read_start(self.suspend, &self.die[d], t);
        if path == ReadPath::Suspend && self.die[d].read_free <= t {
            self.counters.suspensions += 1;
        }
        let xe = self.chan[c].reserve(t, start + tr, xfer) + xfer;
        let dt = &mut self.die[d];
        match path {
            ReadPath::Suspend => {
                // The program/erase moves back by the read's time and the resume cost.
                let pushed = xe - start + self.resume_ns;
                dt.free += pushed;
                dt.long_until += pushed;
                dt.read_free = xe;
                self.counters.die_busy_ns += xe - start;
            }
            ReadPath::Preempt => {
                // The rest of the GC episode (and whatever is queued behind it) moves back by
                // the read's time.
                let pushed = xe - start;
                dt.free += pushed;
                dt.gc_until += pushed;
                if dt.long_until > start {
                    dt.long_until += pushed;
                }
                dt.read_free = xe;
                self.counters.gc_preemptions += 1;
                self.counters.die_busy_ns += pushed;
            }
            ReadPath::Fcfs => {
                dt.free = xe;
                dt.read_free = xe;
                self.counters.die_busy_ns += xe - start;
            }
        }
        self.counters.channel_busy_ns += xfer;
        xe
    }

    fn program(&mut self, t: u64, die: u32, page: u32) -> u64 {
        let d = die as usize;
        let c = (die % self.channels) as usize;
        let tp = self.program_ns[(self.ftl.page_in_block(page) as usize) % self.program_ns.len()];
        let xfer = xfer_ns(self.page_bytes, self.channel_bytes_per_s);
        let start = t.max(self.die[d].free);
        let xe = self.chan[c].reserve(t, start, xfer) + xfer;
        let end = xe + tp;
        self.die[d].free = end;
        self.die[d].long_until = end;
        self.counters.die_busy_ns += end - start;
        self.counters.channel_busy_ns += xfer;
        end
    }

    /// Die time of a GC episode's work, and its preemption step (one page copy).
    #[inline]
    fn gc_duration(&self, w: &GcWork) -> u64 {
        w.page_reads as u64 * self.read_ns_mean
            + w.page_programs as u64 * self.program_ns_mean
            + w.erases as u64 * self.erase_ns
    }

    /// The die's reservation after a GC episode of `w` queued at `t`. Pure.
    #[inline]
    fn with_gc(&self, mut dt: DieTime, t: u64, w: &GcWork) -> DieTime {
        let dur = self.gc_duration(w);
        let start = t.max(dt.free);
        let end = start + dur;
        dt.free = end;
        dt.long_until = end;
        dt.gc_from = start;
        dt.gc_until = end;
        dt.gc_step = if w.page_reads > 0 {
            self.read_ns_mean + self.program_ns_mean
        } else {
            dur.max(1)
        };
        dt
    }

    fn schedule_gc(&mut self, t: u64, w: &GcWork) {
        let d = w.die as usize;
        self.die[d] = self.with_gc(self.die[d], t, w);
        self.counters.die_busy_ns += self.gc_duration(w);
    }

    /// The die soft GC would look at for a command at `now`, and whether it would start GC
    /// there: idle, short of free blocks, and not in a deterministic window.
    #[inline]
    fn idle_gc_due(&self, now_ns: u64) -> Option<u32> {
        let d = self.idle_gc_next;
        (self.window != PlmWindow::Deterministic
            && self.die[d as usize].free <= now_ns
            && self.ftl.free_blocks(d) < self.ftl.gc_soft_blocks())
        .then_some(d)
    }

    /// The die state soft GC would leave behind for a command at `now` (for the queries).
    fn idle_gc_pending(&self, now_ns: u64) -> Option<(u32, DieTime)> {
        let d = self.idle_gc_due(now_ns)?;
        let w = self.ftl.gc_once_work(d);
        (w.victims > 0).then(|| (d, self.with_gc(self.die[d as usize], now_ns, &w)))
    }

    /// Soft GC: look at one die per command (round robin); if it is idle and short of free
    /// blocks, reclaim one victim now. Never in a deterministic window.
    fn idle_gc(&mut self, t: u64) {
        let due = self.idle_gc_due(t);
        self.idle_gc_next = (self.idle_gc_next + 1) % self.dies;
        if let Some(d) = due {
            let w = Arc::make_mut(&mut self.ftl).gc_once(d);
            if w.victims > 0 {
                self.counters.gc_soft_episodes += 1;
                self.schedule_gc(t, &w);
            }
        }
    }
}

/// Reserved intervals of one channel, sorted and disjoint, at most `TIMELINE_CAP` of them.
/// Written by hand: it is a tiny fixed-size interval scheduler on the simulator's hot path.
const TIMELINE_CAP: usize = 64;

#[derive(Clone, Debug)]
struct Timeline {
    iv: [(u64, u64); TIMELINE_CAP],
    n: usize,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            iv: [(0, 0); TIMELINE_CAP],
            n: 0,
        }
    }
}

impl Timeline {
    /// The first gap at or after `earliest` in `intervals` (sorted, disjoint) that holds
    /// `dur`: (insert position, start).
    #[inline]
    fn fit(intervals: impl Iterator<Item = (u64, u64)>, earliest: u64, dur: u64) -> (usize, u64) {
        let mut s = earliest;
        let mut n = 0;
        for (i, (a, b)) in intervals.enumerate() {
            if s + dur <= a {
                return (i, s);
            }
            if b > s {
                s = b;
            }
            n = i + 1;
        }
        (n, s)
    }

    /// When the timeline is full, the interval whose gap to the next is the smallest: the two
    /// are merged (the least channel time given up).
    fn merge_point(iv: &[(u64, u64)]) -> usize {
        let mut best = 0;
        for i in 1..iv.len() - 1 {
            if iv[i + 1].0 - iv[i].1 < iv[best + 1].0 - iv[best].1 {
                best = i;
            }
        }
        best
    }

    /// Where [`Timeline::reserve`] at `now` would place `dur`, reserving nothing.
    #[inline]
    fn peek(&self, now: u64, earliest: u64, dur: u64) -> u64 {
        let mut live = 0;
        while live < self.n && self.iv[live].1 <= now {
            live += 1;
        }
        let iv = &self.iv[live..self.n];
        if iv.len() < TIMELINE_CAP {
            return Self::fit(iv.iter().copied(), earliest, dur).1;
        }
        // `reserve` would merge first: place it in the merged list.
        let best = Self::merge_point(iv);
        let merged = iv
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != best + 1)
            .map(|(i, &(a, b))| {
                if i == best {
                    (a, iv[best + 1].1)
                } else {
                    (a, b)
                }
            });
        Self::fit(merged, earliest, dur).1
    }

    /// The end of the last reservation.
    fn end(&self) -> u64 {
        if self.n == 0 {
            0
        } else {
            self.iv[self.n - 1].1
        }
    }

    /// Reserve `dur` at or after `earliest` in the first gap that fits; returns the start.
    /// Intervals that ended by `now` are forgotten.
    #[inline]
    fn reserve(&mut self, now: u64, earliest: u64, dur: u64) -> u64 {
        let mut drop = 0;
        while drop < self.n && self.iv[drop].1 <= now {
            drop += 1;
        }
        if drop > 0 {
            self.iv.copy_within(drop..self.n, 0);
            self.n -= drop;
        }
        let (pos, s) = Self::fit(self.iv[..self.n].iter().copied(), earliest, dur);
        if self.n == TIMELINE_CAP {
            // Full: merge the two neighbours with the smallest gap between them (the least
            // channel time given up), then place the transfer again.
            let best = Self::merge_point(&self.iv[..self.n]);
            self.iv[best].1 = self.iv[best + 1].1;
            self.iv.copy_within(best + 2..self.n, best + 1);
            self.n -= 1;
            return self.reserve(now, earliest, dur);
        }
        self.iv.copy_within(pos..self.n, pos + 1);
        self.iv[pos] = (s, s + dur);
        self.n += 1;
        s
    }
}

#[cfg(test)]
mod tests {
    use super::Timeline;

    #[test]
    fn timeline_backfills_gaps_and_stays_disjoint() {
        let mut t = Timeline::default();
        assert_eq!(t.reserve(0, 100, 10), 100);
        assert_eq!(t.reserve(0, 0, 10), 0);
        assert_eq!(t.reserve(0, 95, 10), 110);
        assert_eq!(t.reserve(0, 5, 10), 10);
        let mut x = 1u64;
        for i in 0..10_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let now = i * 10;
            let s = t.reserve(now, now + (x >> 54), 7);
            assert!(s >= now);
            for w in t.iv[..t.n].windows(2) {
                assert!(w[0].1 <= w[1].0, "{:?}", &t.iv[..t.n]);
            }
        }
    }
}
