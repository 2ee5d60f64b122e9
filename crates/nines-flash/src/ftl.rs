//! The flash translation layer without time: page mapping, packing, greedy GC, TRIM.
//!
//! Written by hand because it is the product: no crate models an SSD's FTL. Every structure is a
//! flat array sized at construction (u32 maps, one entry per mapping unit; per-block counters),
//! so the FTL allocates nothing after `new` and a device at scale costs ~8 bytes per 4 KiB of
//! flash. The timed model ([`crate::Ssd`]) turns the work reported here (page reads, programs,
//! erases) into die and channel time; preconditioning calls the same code without timing.
//!
//! Layout: block `b` belongs to die `b / blocks_per_die`; page `p` (global) is in block
//! `p / pages_per_block`; physical unit `u` is slot `u % units_per_page` of page
//! `u / units_per_page`. Host pages are striped round-robin over dies (so consecutive logical
//! data lands on consecutive dies, and consecutive dies sit on different channels); GC moves
//! valid units to a separate open block in the same die.

use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::config::DeviceConfig;

const UNMAPPED: u32 = u32::MAX;

/// A large map (one u32 per mapping unit) backed by transparent huge pages where the kernel
/// offers them: lookups are random over tens of MiB, and with 4 KiB pages nearly every one
/// would also miss the TLB. A hint only: if madvise fails, the map works the same.
#[derive(Debug)]
struct BigVec(Vec<u32>);

impl BigVec {
    fn with_capacity(n: usize) -> Vec<u32> {
        let v: Vec<u32> = Vec::with_capacity(n);
        #[cfg(target_os = "linux")]
        {
            const HUGE: usize = 2 << 20;
            let start = v.as_ptr() as usize;
            let end = start + n * std::mem::size_of::<u32>();
            let first = start.div_ceil(HUGE) * HUGE;
            let last = end / HUGE * HUGE;
            if last > first {
                // SAFETY: the range lies inside this Vec's own allocation; MADV_HUGEPAGE changes
                // no contents, only how the kernel backs the pages.
                unsafe {
                    libc::madvise(
                        first as *mut libc::c_void,
                        last - first,
                        libc::MADV_HUGEPAGE,
                    );
                }
            }
        }
        v
    }

    fn filled(n: usize, value: u32) -> BigVec {
        let mut v = BigVec::with_capacity(n);
        v.resize(n, value);
        BigVec(v)
    }
}

impl Clone for BigVec {
    fn clone(&self) -> Self {
        let mut v = BigVec::with_capacity(self.0.len());
        v.extend_from_slice(&self.0);
        BigVec(v)
    }
}

impl std::ops::Deref for BigVec {
    type Target = Vec<u32>;
    fn deref(&self) -> &Vec<u32> {
        &self.0
    }
}

impl std::ops::DerefMut for BigVec {
    fn deref_mut(&mut self) -> &mut Vec<u32> {
        &mut self.0
    }
}
const NONE: u32 = u32::MAX;

/// The fewest free blocks per die at which a host block may still open without GC: one for the
/// host block itself and one for GC's own frontier, so that GC can still run afterwards.
pub const GC_RESERVE_BLOCKS: u32 = 2;

const FREE: u8 = 0;
const OPEN: u8 = 1;
const FULL: u8 = 2;

/// The flash work one GC episode on a die performed (one or more victim blocks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcWork {
    pub die: u32,
    /// Victim blocks reclaimed.
    pub victims: u32,
    /// Pages read to move their valid units (pages with at least one valid unit).
    pub page_reads: u32,
    /// Pages programmed in the GC frontier.
    pub page_programs: u32,
    pub erases: u32,
    pub units_moved: u64,
}

impl GcWork {
    pub(crate) fn add(&mut self, o: &GcWork) {
        self.victims += o.victims;
        self.page_reads += o.page_reads;
        self.page_programs += o.page_programs;
        self.erases += o.erases;
        self.units_moved += o.units_moved;
    }
}

/// Where a host unit went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnitPlace {
    pub die: u32,
    /// Global page index.
    pub page: u32,
    /// The page is now full and must be programmed.
    pub page_full: bool,
    /// This unit opened the page (the first unit in it).
    pub page_opened: bool,
}

/// Counters since the last [`Ftl::reset_stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FtlStats {
    pub host_units: u64,
    pub units_moved: u64,
    pub gc_runs: u64,
    pub victims: u64,
    pub erases: u64,
    pub trimmed_units: u64,
}

impl FtlStats {
    /// Units programmed per unit written by the host (1 when GC moved nothing).
    pub fn write_amplification(&self) -> f64 {
        if self.host_units == 0 {
            return 1.0;
        }
        (self.host_units + self.units_moved) as f64 / self.host_units as f64
    }
}

#[derive(Clone, Debug)]
struct Frontier {
    block: u32,
    /// Next unit index inside the block (page * units_per_page + slot).
    next_unit: u32,
}

#[derive(Clone, Debug)]
pub struct Ftl {
    units_per_page: u32,
    pages_per_block: u32,
    units_per_block: u32,
    blocks_per_die: u32,
    dies: u32,
    gc_soft_blocks: u32,
    gc_hard_blocks: u32,
    logical_units: u32,
    l2p: BigVec,
    p2l: BigVec,
    valid: Vec<u32>,
    state: Vec<u8>,
    /// Per-die stacks of free blocks, die `d` in `free[d*bpd .. d*bpd + free_count[d]]`.
    free: Vec<u32>,
    free_count: Vec<u32>,
    host_open: Vec<Frontier>,
    gc_open: Vec<Frontier>,
    /// The device-wide host page being filled: (die, global page, units in it), or none.
    cur_die: u32,
    cur_page: u32,
    cur_fill: u32,
    next_die: u32,
    stats: FtlStats,
}

impl Ftl {
    pub fn new(cfg: &DeviceConfig) -> Ftl {
        let g = &cfg.geometry;
        let upp = cfg.units_per_page();
        let dies = cfg.dies() as u32;
        let bpd = cfg.blocks_per_die();
        let blocks = dies as usize * bpd as usize;
        let ppb = g.pages_per_block;
        let upb = ppb * upp;
        let physical_units = blocks * upb as usize;
        let logical_units = (cfg.logical_bytes() / g.map_unit_bytes as u64) as u32;
        assert!((logical_units as usize) < physical_units);
        let (soft, hard) = cfg.gc_thresholds_blocks();
        let mut free = vec![0u32; blocks];
        let mut free_count = vec![0u32; dies as usize];
        for d in 0..dies {
            // Pushed in reverse so that blocks are used in ascending order.
            for i in 0..bpd {
                free[(d * bpd + i) as usize] = d * bpd + (bpd - 1 - i);
            }
            free_count[d as usize] = bpd;
        }
        let mut ftl = Ftl {
            units_per_page: upp,
            pages_per_block: ppb,
            units_per_block: upb,
            blocks_per_die: bpd,
            dies,
            gc_soft_blocks: soft,
            gc_hard_blocks: hard,
            logical_units,
            l2p: BigVec::filled(logical_units as usize, UNMAPPED),
            p2l: BigVec::filled(physical_units, UNMAPPED),
            valid: vec![0; blocks],
            state: vec![FREE; blocks],
            free,
            free_count,
            host_open: Vec::with_capacity(dies as usize),
            gc_open: Vec::with_capacity(dies as usize),
            cur_die: 0,
            cur_page: NONE,
            cur_fill: 0,
            next_die: 0,
            stats: FtlStats::default(),
        };
        for d in 0..dies {
            let b = ftl.pop_free(d);
            ftl.host_open.push(Frontier {
                block: b,
                next_unit: 0,
            });
            let b = ftl.pop_free(d);
            ftl.gc_open.push(Frontier {
                block: b,
                next_unit: 0,
            });
        }
        ftl
    }

    pub fn logical_units(&self) -> u32 {
        self.logical_units
    }
    pub fn units_per_page(&self) -> u32 {
        self.units_per_page
    }
    pub fn dies(&self) -> u32 {
        self.dies
    }
    pub fn stats(&self) -> FtlStats {
        self.stats
    }
    pub fn reset_stats(&mut self) {
        self.stats = FtlStats::default();
    }
    pub fn free_blocks(&self, die: u32) -> u32 {
        self.free_count[die as usize]
    }
    pub fn gc_soft_blocks(&self) -> u32 {
        self.gc_soft_blocks
    }
    /// Free blocks per die at or below which a host block opens only after GC.
    pub fn gc_hard_blocks(&self) -> u32 {
        self.gc_hard_blocks
    }
    pub fn blocks_per_die(&self) -> u32 {
        self.blocks_per_die
    }
    pub fn pages_per_block(&self) -> u32 {
        self.pages_per_block
    }
    /// The page currently being filled by host writes, if any.
    pub fn open_host_page(&self) -> Option<u32> {
        (self.cur_page != NONE).then_some(self.cur_page)
    }
    /// Index of a page inside its block (for per-page-type timing).
    #[inline]
    pub fn page_in_block(&self, page: u32) -> u32 {
        page % self.pages_per_block
    }
    #[inline]
    pub fn die_of_page(&self, page: u32) -> u32 {
        page / self.pages_per_block / self.blocks_per_die
    }

    fn pop_free(&mut self, die: u32) -> u32 {
        let n = self.free_count[die as usize];
        assert!(
            n > 0,
            "die {die} has no free block: over-provisioning invariant broken"
        );
        let b = self.free[(die * self.blocks_per_die + n - 1) as usize];
        self.free_count[die as usize] = n - 1;
        debug_assert_eq!(self.state[b as usize], FREE);
        self.state[b as usize] = OPEN;
        b
    }

    fn push_free(&mut self, die: u32, block: u32) {
        let n = self.free_count[die as usize];
        assert!(n < self.blocks_per_die);
        self.free[(die * self.blocks_per_die + n) as usize] = block;
        self.free_count[die as usize] = n + 1;
        self.state[block as usize] = FREE;
    }

    /// Where a logical unit lives: (die, global page). An unmapped unit (never written or
    /// trimmed) is placed where a sequential fill would have put it, so reads of it still cost
    /// a flash read.
    #[inline]
    pub fn locate(&self, lpn: u32) -> (u32, u32, bool) {
        let p = self.l2p[lpn as usize];
        if p == UNMAPPED {
            let page = lpn / self.units_per_page;
            let die = page % self.dies;
            let block = die * self.blocks_per_die + (page / self.dies) % self.blocks_per_die;
            let gpage = block * self.pages_per_block + (page / self.dies) % self.pages_per_block;
            return (die, gpage, false);
        }
        let page = p / self.units_per_page;
        (self.die_of_page(page), page, true)
    }

    #[inline]
    fn invalidate(&mut self, lpn: u32) {
        let old = self.l2p[lpn as usize];
        if old != UNMAPPED {
            self.p2l[old as usize] = UNMAPPED;
            let b = old / self.units_per_block;
            debug_assert!(self.valid[b as usize] > 0);
            self.valid[b as usize] -= 1;
        }
    }

    /// TRIM one logical unit.
    pub fn trim_unit(&mut self, lpn: u32) {
        assert!(lpn < self.logical_units);
        if self.l2p[lpn as usize] != UNMAPPED {
            self.invalidate(lpn);
            self.l2p[lpn as usize] = UNMAPPED;
            self.stats.trimmed_units += 1;
        }
    }

    /// Write one logical unit into the host frontier. GC that had to run first (the die's free
    /// blocks at or below the hard threshold) is added to `gc`.
    pub fn write_unit(&mut self, lpn: u32, gc: &mut GcWork) -> UnitPlace {
        self.write_unit_with(lpn, gc, self.gc_hard_blocks)
    }

    /// [`Ftl::write_unit`] with GC forced only at or below `hard_blocks` free blocks per die
    /// instead of the configured hard threshold (a deterministic window defers GC to the last
    /// safe moment). `hard_blocks` must be at least [`GC_RESERVE_BLOCKS`].
    pub fn write_unit_with(&mut self, lpn: u32, gc: &mut GcWork, hard_blocks: u32) -> UnitPlace {
        assert!(lpn < self.logical_units);
        assert!(hard_blocks >= GC_RESERVE_BLOCKS);
        let mut opened = false;
        if self.cur_page == NONE {
            let die = self.next_die;
            self.next_die = (self.next_die + 1) % self.dies;
            let page = self.open_host_page_on(die, gc, hard_blocks);
            self.cur_die = die;
            self.cur_page = page;
            self.cur_fill = 0;
            opened = true;
        }
        let die = self.cur_die;
        let page = self.cur_page;
        let pu = page * self.units_per_page + self.cur_fill;
        self.invalidate(lpn);
        self.l2p[lpn as usize] = pu;
        self.p2l[pu as usize] = lpn;
        self.valid[(pu / self.units_per_block) as usize] += 1;
        self.cur_fill += 1;
        self.stats.host_units += 1;
        let full = self.cur_fill == self.units_per_page;
        if full {
            self.cur_page = NONE;
        }
        UnitPlace {
            die,
            page,
            page_full: full,
            page_opened: opened,
        }
    }

    /// Reserve the next page of `die`'s host block, opening a new block (after hard GC) when
    /// the current one is used up.
    fn open_host_page_on(&mut self, die: u32, gc: &mut GcWork, hard_blocks: u32) -> u32 {
        let upp = self.units_per_page;
        if self.host_open[die as usize].next_unit >= self.units_per_block {
            let old = self.host_open[die as usize].block;
            self.state[old as usize] = FULL;
            let mut rounds = 0;
            while self.free_count[die as usize] <= hard_blocks && rounds < self.blocks_per_die {
                let w = self.gc_once(die);
                if w.victims == 0 {
                    break;
                }
                gc.die = die;
                gc.add(&w);
                rounds += 1;
            }
            let b = self.pop_free(die);
            self.host_open[die as usize] = Frontier {
                block: b,
                next_unit: 0,
            };
        }
        let f = &mut self.host_open[die as usize];
        let page = f.block * self.pages_per_block + f.next_unit / upp;
        f.next_unit += upp;
        page
    }

    /// The greedy victim on `die`: the full block with the fewest valid units, if any has fewer
    /// than a whole block.
    fn pick_victim(&self, die: u32) -> Option<u32> {
        let first = die * self.blocks_per_die;
        let mut victim = None;
        let mut best = self.units_per_block;
        for b in first..first + self.blocks_per_die {
            // Branch-light scan: the per-block arrays are small and contiguous.
            if self.state[b as usize] == FULL && self.valid[b as usize] < best {
                best = self.valid[b as usize];
                victim = Some(b);
                if best == 0 {
                    break;
                }
            }
        }
        victim
    }

    /// The work [`Ftl::gc_once`] would do on `die` now, without doing it: the same victim and
    /// the same counts (tested), so a caller can see whether it fits a time budget first.
    pub fn gc_once_work(&self, die: u32) -> GcWork {
        let mut w = GcWork {
            die,
            ..GcWork::default()
        };
        let Some(victim) = self.pick_victim(die) else {
            return w;
        };
        let upp = self.units_per_page;
        let base = victim * self.units_per_block;
        for page in 0..self.pages_per_block {
            let from = (base + page * upp) as usize;
            let valid = self.p2l[from..from + upp as usize]
                .iter()
                .filter(|&&l| l != UNMAPPED)
                .count() as u64;
            w.units_moved += valid;
            w.page_reads += u32::from(valid > 0);
        }
        // The GC frontier programs a page each time it crosses a page boundary (blocks are whole
        // pages, so a block change keeps the phase).
        let start = (self.gc_open[die as usize].next_unit % upp) as u64;
        let programs = ((start + w.units_moved) / upp as u64) as u32;
        w.victims = 1;
        w.erases = 1;
        w.page_programs = programs + u32::from(w.units_moved > 0 && programs == 0);
        w
    }

    /// Host units that can be written before a host block would open at or below `hard_blocks`
    /// free blocks on its die (so before GC would have to run), with no GC in between. Exact:
    /// host pages go round robin over dies whatever the logical addresses.
    pub fn host_units_before_gc(&self, hard_blocks: u32) -> u64 {
        let upp = self.units_per_page as u64;
        let dies = self.dies as u64;
        let mut first_gc_page = u64::MAX;
        for d in 0..self.dies {
            let open_left = ((self.units_per_block - self.host_open[d as usize].next_unit)
                / self.units_per_page) as u64;
            let opens = self.free_count[d as usize].saturating_sub(hard_blocks) as u64;
            let pages = open_left + opens * self.pages_per_block as u64;
            let order = (d as u64 + dies - self.next_die as u64) % dies;
            first_gc_page = first_gc_page.min(pages * dies + order);
        }
        let in_page = if self.cur_page == NONE {
            0
        } else {
            upp - self.cur_fill as u64
        };
        first_gc_page * upp + in_page
    }

    /// Reclaim one victim block on `die` (greedy: the full block with the fewest valid units).
    /// Returns the work done; `victims == 0` when no block can be reclaimed with any gain.
    pub fn gc_once(&mut self, die: u32) -> GcWork {
        let mut w = GcWork {
            die,
            ..GcWork::default()
        };
        let Some(victim) = self.pick_victim(die) else {
            return w;
        };
        let upp = self.units_per_page;
        let base = victim * self.units_per_block;
        let mut moved = 0u64;
        let mut programs = 0u32;
        for page in 0..self.pages_per_block {
            let mut any = false;
            for slot in 0..upp {
                let pu = base + page * upp + slot;
                let lpn = self.p2l[pu as usize];
                if lpn == UNMAPPED {
                    continue;
                }
                any = true;
                // Move to the GC frontier of the same die.
                if self.gc_open[die as usize].next_unit >= self.units_per_block {
                    let old = self.gc_open[die as usize].block;
                    self.state[old as usize] = FULL;
                    let b = self.pop_free(die);
                    self.gc_open[die as usize] = Frontier {
                        block: b,
                        next_unit: 0,
                    };
                }
                let f = &mut self.gc_open[die as usize];
                let dst = f.block * self.units_per_block + f.next_unit;
                f.next_unit += 1;
                if f.next_unit.is_multiple_of(upp) {
                    programs += 1;
                }
                self.p2l[pu as usize] = UNMAPPED;
                self.p2l[dst as usize] = lpn;
                self.l2p[lpn as usize] = dst;
                self.valid[(dst / self.units_per_block) as usize] += 1;
                moved += 1;
            }
            if any {
                w.page_reads += 1;
            }
        }
        self.valid[victim as usize] = 0;
        self.push_free(die, victim);
        w.victims = 1;
        w.erases = 1;
        w.units_moved = moved;
        // A partly filled GC page is programmed when it fills; count it now so time is charged.
        w.page_programs = programs + u32::from(moved > 0 && programs == 0);
        self.stats.gc_runs += 1;
        self.stats.victims += 1;
        self.stats.erases += 1;
        self.stats.units_moved += moved;
        w
    }

    /// Write every logical unit once, in order (a sequential fill), without timing.
    pub fn fill(&mut self) {
        let mut gc = GcWork::default();
        for lpn in 0..self.logical_units {
            self.write_unit(lpn, &mut gc);
        }
    }

    /// Uniformly random overwrites of `units` logical units, without timing: brings the device
    /// to the steady state of greedy GC under random writes.
    pub fn random_overwrite(&mut self, units: u64, seed: u64) {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut gc = GcWork::default();
        let n = self.logical_units as u64;
        for _ in 0..units {
            // Multiply-shift maps 64 random bits to [0, n) without division.
            let lpn = ((rng.next_u64() as u128 * n as u128) >> 64) as u32;
            self.write_unit(lpn, &mut gc);
        }
    }

    /// Run GC on every die until its free blocks reach the soft threshold, as an idle device
    /// would: the state a device settles in between bursts of writes.
    pub fn settle_gc(&mut self) {
        for d in 0..self.dies {
            let mut rounds = 0;
            while self.free_count[d as usize] < self.gc_soft_blocks && rounds < self.blocks_per_die
            {
                if self.gc_once(d).victims == 0 {
                    break;
                }
                rounds += 1;
            }
        }
    }

    /// Check every invariant of the maps (for tests; O(size)).
    pub fn check_consistency(&self) -> Result<(), String> {
        let mut valid = vec![0u32; self.valid.len()];
        for (lpn, &pu) in self.l2p.iter().enumerate() {
            if pu == UNMAPPED {
                continue;
            }
            if self.p2l[pu as usize] != lpn as u32 {
                return Err(format!(
                    "l2p[{lpn}] = {pu} but p2l[{pu}] = {}",
                    self.p2l[pu as usize]
                ));
            }
            valid[(pu / self.units_per_block) as usize] += 1;
        }
        for (pu, &lpn) in self.p2l.iter().enumerate() {
            if lpn != UNMAPPED && self.l2p[lpn as usize] != pu as u32 {
                return Err(format!("p2l[{pu}] = {lpn} but l2p[{lpn}] differs"));
            }
        }
        if valid != self.valid {
            return Err("per-block valid counts disagree with the maps".into());
        }
        for d in 0..self.dies {
            for i in 0..self.free_count[d as usize] {
                let b = self.free[(d * self.blocks_per_die + i) as usize];
                if self.state[b as usize] != FREE || self.valid[b as usize] != 0 {
                    return Err(format!("free block {b} is not empty"));
                }
            }
        }
        Ok(())
    }
}
