//! The SSD model's control surface: what a host policy may do besides reads and writes
//! (docs/arch-sim.md has the semantics and the NVMe/IODA references).
//!
//! - [`Ssd::select_window`]: NVMe Predictable Latency Mode windows. In a deterministic window
//!   (DTWIN) no GC runs unless a pool would otherwise run out of free blocks; that forced GC is
//!   counted as a window violation. In a non-deterministic window (NDWIN) GC is allowed, and the
//!   GC debt left by a DTWIN starts at once.
//! - [`Ssd::gc_now`]: GC to a number of free blocks per pool and/or within a time budget.
//! - [`Ssd::trim`] (in ssd.rs) and [`Ssd::flush`]: unmap a range; make buffered data durable.
//! - [`Ssd::busy_remaining_ns`], [`Ssd::range_busy_remaining_ns`], [`Ssd::read_wait_ns`] and
//!   [`Ssd::plm_status`]: queries that change nothing.
//! - [`Ssd::read_fast_fail`]: a read that returns at once with the remaining busy time when it
//!   would wait on its dies longer than a threshold (IODA, SOSP'21), reserving nothing.

use std::sync::Arc;

use nines_core::op::Op;

use crate::ftl::{GC_RESERVE_BLOCKS, GcWork};
use crate::ssd::{ReadPages, ReadWaitCause, Ssd, read_start, xfer_ns};
use crate::timeline::Timeline;

/// NVMe Predictable Latency Mode window of the device (one NVM set: the whole device).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlmWindow {
    /// Predictable Latency Mode off: GC as configured (the default).
    #[default]
    Off,
    /// DTWIN: no GC unless a pool would run out of free blocks (then forced, and counted).
    Deterministic,
    /// NDWIN: GC allowed; pending GC debt runs.
    NonDeterministic,
}

/// What [`Ssd::gc_now`] should reach. Both limits may be given; GC stops at the first reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcGoal {
    /// Free blocks per block pool (a die, or a plane with per-plane pools) to reach, clamped
    /// to the pool; `None`: the soft threshold, where idle GC would stop.
    pub free_blocks_per_die: Option<u32>,
    /// Every pool's GC must end by `now + budget_ns`; a victim that would not fit is not
    /// started. `None`: no time limit.
    pub budget_ns: Option<u64>,
}

/// What a GC request did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcDone {
    pub victims: u64,
    pub units_moved: u64,
    /// When the last pool finishes the GC it was given (`now` when nothing ran).
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
    /// Free blocks over all pools, and in the pool with the fewest.
    pub free_blocks: u64,
    pub free_blocks_min: u32,
    /// Per-pool thresholds in blocks: idle GC below `gc_soft_blocks`; forced GC at or below
    /// `gc_hard_blocks` (outside DTWIN) or `dtwin_reserve_blocks` (in DTWIN).
    pub gc_soft_blocks: u32,
    pub gc_hard_blocks: u32,
    pub dtwin_reserve_blocks: u32,
    /// Blocks GC owes: over all pools, how far each is below the soft threshold.
    pub gc_debt_blocks: u64,
    /// Bytes the host can write in a deterministic window from now before GC is forced
    /// (exact with round-robin allocation: host pages fill pools round robin whatever the
    /// addresses; with static allocation the worst case).
    pub dtwin_write_bytes_estimate: u64,
    /// Reads never force GC in this model, so a DTWIN has no read limit: `None`.
    pub dtwin_read_estimate: Option<u64>,
    pub window_violations: u64,
    /// How long until every die, channel and the controller is idle.
    pub busy_remaining_ns: u64,
}

impl Ssd {
    /// A read at `now` that gives up at once, reserving nothing, when it would wait on its
    /// dies (behind GC, programs, erases or queued reads) longer than `threshold_ns`; otherwise
    /// exactly [`Ssd::submit`] of a read. The wait is [`Ssd::read_wait_ns`] less the front
    /// end's (housekeeping, power-state exit and controller queue), which is not the dies'
    /// doing.
    pub fn read_fast_fail(
        &mut self,
        now_ns: u64,
        offset_bytes: u64,
        len_bytes: u64,
        threshold_ns: u64,
    ) -> ReadOutcome {
        self.check_range(offset_bytes, len_bytes);
        self.advance(now_ns);
        let f = self.front_end(now_ns);
        let wait = self.flash_wait(now_ns, f.start + self.overhead_ns, offset_bytes, len_bytes);
        if wait > threshold_ns {
            self.counters.fast_fail_busy += 1;
            return ReadOutcome::Busy {
                remaining_ns: wait,
                completion_ns: f.after_stall + self.overhead_ns,
            };
        }
        ReadOutcome::Done {
            completion_ns: self.submit(now_ns, Op::Read, offset_bytes, len_bytes),
        }
    }

    /// How much longer than on an idle device a read of the range submitted at `now` would
    /// take: housekeeping stall, power-state exit, controller queue, and the wait on its dies
    /// and channels (including GC that the read's own arrival would start). Changes nothing.
    /// Exact for a read whose pages are on different channels and whose mapping entries are
    /// cached (every read of one page on a model without a mapping cache, tested); random
    /// per-command costs (read retries, firmware jitter, slow I/O) are not predicted.
    pub fn read_wait_ns(&self, now_ns: u64, offset_bytes: u64, len_bytes: u64) -> u64 {
        self.check_range(offset_bytes, len_bytes);
        self.check_time(now_ns);
        let start = self.front_end(now_ns).start;
        let t = start + self.overhead_ns;
        start - now_ns + self.flash_wait(now_ns, t, offset_bytes, len_bytes)
    }

    /// The longest wait of the range's flash pages for a read reaching the flash at `t`: die
    /// (and channel) time beyond tR + transfer. Pure; accounts for the soft GC that the read's
    /// own `submit` at `now` would start first.
    pub(crate) fn flash_wait(&self, now_ns: u64, t: u64, offset_bytes: u64, len_bytes: u64) -> u64 {
        let pending = self.idle_gc_pending(now_ns);
        let mut wait = 0;
        let mut pages = ReadPages::new(self.unit_bytes, offset_bytes, len_bytes);
        while let Some((pool, page, bytes)) = pages.next(&self.ftl) {
            if self.ftl.is_open_page(page) {
                continue;
            }
            let u = self.unit_of(pool);
            let d = match pending {
                Some((pu, dt)) if pu == u => dt,
                _ => self.die(u as usize),
            };
            let tr = self.page_read_ns(page);
            let xfer = xfer_ns(bytes, self.channel_bytes_per_s);
            let c = (pool % self.channels) as usize;
            let start = if self.die_gaps {
                let gc = pending.filter(|&(pu, _)| pu == u).map(|(_, dt)| dt);
                self.gap_read_start(now_ns, u as usize, c, t, tr, xfer, gc)
            } else {
                read_start(
                    self.suspend,
                    self.gc_mode,
                    self.erase_ns,
                    &d,
                    self.ops.get(u as usize),
                    t,
                )
                .1
            };
            // With gaps a read forgets what ended by its command's arrival (`now`).
            let live = if self.die_gaps { now_ns } else { t };
            let xs = if self.die_gaps {
                self.chan_gap[c].peek(live, start + tr, xfer)
            } else {
                self.chan[c].peek(live, start + tr, xfer)
            };
            wait = wait.max(xs - (t + tr));
        }
        wait
    }

    /// How long until every die, channel and the controller of the device is idle, from `now`.
    pub fn busy_remaining_ns(&self, now_ns: u64) -> u64 {
        self.check_time(now_ns);
        let units = self.units.iter().map(|d| d.free).max().unwrap_or(0);
        let chans = self
            .chan
            .iter()
            .map(Timeline::end)
            .chain(self.chan_gap.iter().map(Timeline::end))
            .max()
            .unwrap_or(0);
        units.max(chans).max(self.ctrl_free).saturating_sub(now_ns)
    }

    /// How long the dies the range maps to stay reserved from `now` (GC, programs, erases,
    /// reads queued). A read may get in earlier (suspend, GC preemption, read priority): that
    /// is [`Ssd::read_wait_ns`].
    pub fn range_busy_remaining_ns(&self, now_ns: u64, offset_bytes: u64, len_bytes: u64) -> u64 {
        self.check_range(offset_bytes, len_bytes);
        self.check_time(now_ns);
        let mut busy = 0;
        let mut pages = ReadPages::new(self.unit_bytes, offset_bytes, len_bytes);
        while let Some((pool, _, _)) = pages.next(&self.ftl) {
            let u = self.unit_of(pool) as usize;
            busy = busy.max(self.units[u].free.saturating_sub(now_ns));
        }
        busy
    }

    /// Select a Predictable Latency Mode window at `now` (NVMe Set Features 14h; selecting any
    /// window enables the mode, `Off` disables it). GC already started keeps running. Entering
    /// NDWIN starts the GC debt at once: every pool below the soft threshold collects back to
    /// it, each as soon as its die is free ([`Ssd::gc_now`] with the default goal).
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

    /// Run GC at `now` on every pool short of the goal: victims are reclaimed in the FTL's
    /// order and each pool's work is queued behind what its die already has (host reads may
    /// still preempt it between page copies). Allowed in any window: the host asked for it.
    /// With a time budget, a victim that would not fit whole is moved as far as the budget
    /// goes, page copy by page copy ([`crate::Ftl::gc_partial`]), and finished by the pool's
    /// next GC: a budget shorter than one victim still collects garbage.
    pub fn gc_now(&mut self, now_ns: u64, goal: GcGoal) -> GcDone {
        self.advance(now_ns);
        let bpp = self.ftl.blocks_per_pool();
        let target = goal
            .free_blocks_per_die
            .unwrap_or(self.ftl.gc_soft_blocks())
            .min(bpp);
        let deadline = goal.budget_ns.map(|b| now_ns.saturating_add(b));
        // The most one page read costs in a GC episode: its read, a program of the units it
        // moves (at most one page), and the transfers without copy-back.
        let page_ns = self.gc_duration(&GcWork {
            page_reads: 1,
            page_programs: 1,
            ..GcWork::default()
        });
        let mut done = GcDone {
            until_ns: now_ns,
            ..GcDone::default()
        };
        for pool in 0..self.ftl.pools() {
            let u = self.unit_of(pool) as usize;
            let start = now_ns.max(self.units[u].free);
            let mut work = GcWork {
                pool,
                ..GcWork::default()
            };
            let mut dur = 0;
            // Bounded: at most one victim per block of the pool, then one partial step.
            for _ in 0..bpp {
                if self.ftl.free_blocks(pool) >= target {
                    break;
                }
                let w = if let Some(deadline) = deadline {
                    let whole = self.ftl.gc_once_work(pool);
                    let left = deadline.saturating_sub(start + dur);
                    if whole.victims == 0 {
                        break;
                    }
                    if self.gc_duration(&whole) <= left {
                        Arc::make_mut(&mut self.ftl).gc_once(pool)
                    } else {
                        // As many page copies as fit; the erase waits for a budget it fits.
                        let pages = (left / page_ns.max(1)).min(u64::from(u32::MAX)) as u32;
                        if pages == 0 {
                            break;
                        }
                        let w = Arc::make_mut(&mut self.ftl).gc_partial(pool, pages, false);
                        work.add(&w);
                        break;
                    }
                } else {
                    Arc::make_mut(&mut self.ftl).gc_once(pool)
                };
                if w.victims == 0 {
                    break;
                }
                dur += self.gc_duration(&w);
                work.add(&w);
            }
            if work.page_reads > 0 || work.erases > 0 {
                self.schedule_gc(now_ns, &work, ReadWaitCause::GcRequested);
                done.victims += work.victims as u64;
                done.units_moved += work.units_moved;
                done.until_ns = done.until_ns.max(self.units[u].free);
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
        for pool in 0..self.ftl.pools() {
            let f = self.ftl.free_blocks(pool);
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
}
