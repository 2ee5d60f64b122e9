//! The timed SSD: the FTL plus die, channel, controller and write-buffer timelines.
//!
//! Sans-IO: `submit(now_ns, ..)` takes the time as an argument and returns the completion time
//! at once. Dies and the controller are first-come-first-served timelines reserved in the order
//! commands are submitted; a channel keeps a short list of reserved intervals and places each
//! transfer in the first gap that fits (a transfer queued behind a long GC on one die must not
//! block the channel for the other dies). The driver must call `submit` in non-decreasing time.
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

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use nines_core::op::Op;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::config::DeviceConfig;
use crate::ftl::{Ftl, FtlStats, GcWork};

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
    die_free: Vec<u64>,
    die_long_until: Vec<u64>,
    die_read_free: Vec<u64>,
    /// The die's latest GC episode: [from, until), preemptible every `gc_step` (one page copy).
    gc_from: Vec<u64>,
    gc_until: Vec<u64>,
    gc_step: Vec<u64>,
    chan: Vec<Timeline>,
    ctrl_free: u64,
    buf_release: BinaryHeap<Reverse<u64>>,
    idle_gc_next: u32,
    rng: Xoshiro256PlusPlus,
    counters: SsdCounters,
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
            die_free: vec![0; dies as usize],
            die_long_until: vec![0; dies as usize],
            die_read_free: vec![0; dies as usize],
            gc_from: vec![0; dies as usize],
            gc_until: vec![0; dies as usize],
            gc_step: vec![1; dies as usize],
            chan: vec![Timeline::default(); cfg.geometry.channels as usize],
            ctrl_free: 0,
            buf_release: BinaryHeap::with_capacity(buffer_pages + 1),
            idle_gc_next: 0,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            counters: SsdCounters::default(),
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

    /// TRIM a byte range (whole mapping units inside it). Takes no device time.
    pub fn trim(&mut self, offset_bytes: u64, len_bytes: u64) {
        let first = offset_bytes.div_ceil(self.unit_bytes);
        let end =
            ((offset_bytes + len_bytes) / self.unit_bytes).min(self.ftl.logical_units() as u64);
        for lpn in first..end {
            Arc::make_mut(&mut self.ftl).trim_unit(lpn as u32);
        }
    }

    /// Submit a command at `now_ns`; returns the time it completes. Calls must come in
    /// non-decreasing `now_ns`. The range must lie inside [`Ssd::logical_bytes`].
    pub fn submit(&mut self, now_ns: u64, op: Op, offset_bytes: u64, len_bytes: u64) -> u64 {
        assert!(len_bytes > 0 && offset_bytes + len_bytes <= self.logical_bytes);
        let mut t = now_ns;
        if self.hk_period_ns > 0 {
            let x = (t + self.hk_phase_ns) % self.hk_period_ns;
            if x < self.hk_duration_ns {
                t += self.hk_duration_ns - x;
                self.counters.housekeeping_stalls += 1;
            }
        }
        if self.command_ns > 0 {
            let s = t.max(self.ctrl_free);
            self.ctrl_free = s + self.command_ns;
            t = s;
        }
        t += self.overhead_ns;
        self.idle_gc(now_ns);
        let first = offset_bytes / self.unit_bytes;
        let last = (offset_bytes + len_bytes - 1) / self.unit_bytes;
        let mut done = match op {
            Op::Read => {
                self.counters.reads += 1;
                let mut ready = t;
                let mut lpn = first;
                let open = self.ftl.open_host_page();
                while lpn <= last {
                    let (die, page, _) = self.ftl.locate(lpn as u32);
                    let mut n = 1;
                    while lpn + n <= last && self.ftl.locate((lpn + n) as u32).1 == page {
                        n += 1;
                    }
                    // The request's bytes inside these units.
                    let lo = (lpn * self.unit_bytes).max(offset_bytes);
                    let hi = ((lpn + n) * self.unit_bytes).min(offset_bytes + len_bytes);
                    let end = if open == Some(page) {
                        self.counters.read_buffer_hits += 1;
                        t
                    } else {
                        self.flash_read(t, die, page, hi - lo)
                    };
                    ready = ready.max(end);
                    lpn += n;
                }
                ready + xfer_ns(len_bytes, self.link_read_bytes_per_s)
            }
            Op::Write => {
                self.counters.writes += 1;
                let mut admitted = t;
                let link = xfer_ns(len_bytes, self.link_write_bytes_per_s);
                for lpn in first..=last {
                    let mut gc = GcWork::default();
                    let place = Arc::make_mut(&mut self.ftl).write_unit(lpn as u32, &mut gc);
                    if gc.victims > 0 {
                        self.counters.gc_hard_episodes += 1;
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

    fn flash_read(&mut self, t: u64, die: u32, page: u32, bytes: u64) -> u64 {
        let d = die as usize;
        let c = (die % self.channels) as usize;
        let tr = self.read_ns[(self.ftl.page_in_block(page) as usize) % self.read_ns.len()];
        let xfer = xfer_ns(bytes, self.channel_bytes_per_s);
        if self.suspend && self.die_long_until[d] > t && self.die_free[d] > t {
            // The die is programming or erasing (or has that queued): the read goes first.
            if self.die_read_free[d] <= t {
                self.counters.suspensions += 1;
            }
            let start = t.max(self.die_read_free[d]);
            let xe = self.chan[c].reserve(t, start + tr, xfer) + xfer;
            let pushed = xe - start + self.resume_ns;
            self.die_free[d] += pushed;
            self.die_long_until[d] += pushed;
            self.die_read_free[d] = xe;
            self.counters.die_busy_ns += xe - start;
            self.counters.channel_busy_ns += xfer;
            return xe;
        }
        if self.die_free[d] > t && self.gc_from[d] <= t && t < self.gc_until[d] {
            // GC is copying pages on this die: the read goes in at the next page-copy
            // boundary and the rest of the GC episode (and whatever is queued behind it)
            // moves back by the read's time.
            let base = t.max(self.die_read_free[d]);
            let step = self.gc_step[d];
            let start = self.gc_from[d] + (base - self.gc_from[d]).div_ceil(step) * step;
            if start < self.gc_until[d] {
                let xe = self.chan[c].reserve(t, start + tr, xfer) + xfer;
                let pushed = xe - start;
                self.die_free[d] += pushed;
                self.gc_until[d] += pushed;
                if self.die_long_until[d] > start {
                    self.die_long_until[d] += pushed;
                }
                self.die_read_free[d] = xe;
                self.counters.gc_preemptions += 1;
                self.counters.die_busy_ns += pushed;
                self.counters.channel_busy_ns += xfer;
                return xe;
            }
        }
        let start = t.max(self.die_free[d]);
        let xe = self.chan[c].reserve(t, start + tr, xfer) + xfer;
        self.die_free[d] = xe;
        self.die_read_free[d] = xe;
        self.counters.die_busy_ns += xe - start;
        self.counters.channel_busy_ns += xfer;
        xe
    }

    fn program(&mut self, t: u64, die: u32, page: u32) -> u64 {
        let d = die as usize;
        let c = (die % self.channels) as usize;
        let tp = self.program_ns[(self.ftl.page_in_block(page) as usize) % self.program_ns.len()];
        let xfer = xfer_ns(self.page_bytes, self.channel_bytes_per_s);
        let start = t.max(self.die_free[d]);
        let xe = self.chan[c].reserve(t, start, xfer) + xfer;
        let end = xe + tp;
        self.die_free[d] = end;
        self.die_long_until[d] = end;
        self.counters.die_busy_ns += end - start;
        self.counters.channel_busy_ns += xfer;
        end
    }

    fn schedule_gc(&mut self, t: u64, w: &GcWork) {
        let d = w.die as usize;
        let dur = w.page_reads as u64 * self.read_ns_mean
            + w.page_programs as u64 * self.program_ns_mean
            + w.erases as u64 * self.erase_ns;
        let start = t.max(self.die_free[d]);
        let end = start + dur;
        self.die_free[d] = end;
        self.die_long_until[d] = end;
        self.gc_from[d] = start;
        self.gc_until[d] = end;
        self.gc_step[d] = if w.page_reads > 0 {
            self.read_ns_mean + self.program_ns_mean
        } else {
            dur.max(1)
        };
        self.counters.die_busy_ns += dur;
    }

    /// Soft GC: look at one die per command (round robin); if it is idle and short of free
    /// blocks, reclaim one victim now.
    fn idle_gc(&mut self, t: u64) {
        let d = self.idle_gc_next;
        self.idle_gc_next = (d + 1) % self.dies;
        if self.die_free[d as usize] <= t && self.ftl.free_blocks(d) < self.ftl.gc_soft_blocks() {
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
        let mut s = earliest;
        let mut pos = self.n;
        for i in 0..self.n {
            let (a, b) = self.iv[i];
            if s + dur <= a {
                pos = i;
                break;
            }
            if b > s {
                s = b;
            }
        }
        if self.n == TIMELINE_CAP {
            // Full: merge the two neighbours with the smallest gap between them (the least
            // channel time given up), then place the transfer again.
            let mut best = 0;
            for i in 1..self.n - 1 {
                if self.iv[i + 1].0 - self.iv[i].1 < self.iv[best + 1].0 - self.iv[best].1 {
                    best = i;
                }
            }
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
