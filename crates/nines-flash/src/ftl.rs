//! The flash translation layer without time: page mapping, packing, greedy GC, TRIM.
//!
//! Written by hand because it is the product: no crate models an SSD's FTL. Every structure is a
//! flat array sized at construction (u32 maps, one entry per mapping unit; per-block counters),
//! so the FTL allocates nothing after `new` and a device at scale costs ~8 bytes per 4 KiB of
//! flash. The timed model ([`crate::Ssd`]) turns the work reported here (page reads, programs,
//! erases) into pool and channel time; preconditioning calls the same code without timing.
//!
//! A pool is a set of blocks with its own free list, host and GC frontiers and GC: a die (the
//! default) or a plane (`ftl.block_pool = "plane"`, as MQSim). Pool `p` sits on channel
//! `p mod channels`.
//!
//! Layout: block `b` belongs to pool `b / blocks_per_pool`; page `p` (global) is in block
//! `p / pages_per_block`; physical unit `u` is slot `u % units_per_page` of page
//! `u / units_per_page`. Host pages are striped round-robin over pools (so consecutive logical
//! data lands on consecutive pools, and consecutive pools sit on different channels), or with
//! static allocation unit `u` always goes to pool `u mod pools` (each pool fills its own open
//! page), or with `idle-first` allocation in rounds over the pools, each page to the pool of
//! its round where it can be programmed soonest ([`Ftl::write_unit_placed_by`]); GC moves valid units to a separate open block in the same pool.

use std::sync::atomic::{AtomicBool, Ordering};

use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// How many units preconditioning writes between two looks at its stop flag (microseconds of
/// work: a stop is seen within milliseconds).
const STOP_EVERY_UNITS: u32 = 4096;

use crate::config::{Allocation, DeviceConfig, FDP_HANDLES_MAX, GcVictim};

const UNMAPPED: u32 = u32::MAX;

/// How far ahead GC's move loop warms the mapping entries it will update.
const GC_PREFETCH_UNITS: u32 = 8;

/// A fixed-length buffer for tables read at random over MiBs (the FTL's maps, the mapping
/// cache's index). From 2 MiB up it is allocated 2 MiB-aligned, a whole number of 2 MiB pages
/// long, and marked for transparent huge pages, so every access of it can be served by a huge
/// page. A Vec's allocation starts wherever malloc put it, so only its aligned interior could
/// be: up to 2 MiB at each end stayed on 4 KiB pages, about half of a 4 MiB mapping-cache index,
/// and those accesses missed the TLB (measured below in docs/arch-sim.md "Speed"). Hand-written:
/// the alignment is the point, and no maintained crate offers a fixed, aligned, cloneable slice.
pub(crate) struct HugeBuf<T: Copy> {
    ptr: std::ptr::NonNull<T>,
    len: usize,
}

// SAFETY: a HugeBuf owns its elements like a Box<[T]> does.
unsafe impl<T: Copy + Send> Send for HugeBuf<T> {}
// SAFETY: shared access only reads, as for a Box<[T]>.
unsafe impl<T: Copy + Sync> Sync for HugeBuf<T> {}

impl<T: Copy> HugeBuf<T> {
    const HUGE_BYTES: usize = 2 << 20;

    /// `len` copies of `value`.
    pub(crate) fn filled(len: usize, value: T) -> HugeBuf<T> {
        let buf = HugeBuf::<T>::alloc(len);
        for i in 0..len {
            // SAFETY: `i < len`, inside the allocation of `len` elements; writing
            // initialises it.
            unsafe { buf.ptr.as_ptr().add(i).write(value) };
        }
        buf
    }

    /// The allocation of `len` elements, and whether it is huge-page sized (a function of
    /// `len` alone, so a buffer keeps only its pointer and length).
    fn layout(len: usize) -> (std::alloc::Layout, bool) {
        assert!(size_of::<T>() > 0, "HugeBuf of a zero-sized type");
        let bytes = len
            .checked_mul(size_of::<T>())
            .expect("table size overflows usize")
            .max(1);
        let huge = bytes >= Self::HUGE_BYTES;
        let layout = if huge {
            std::alloc::Layout::from_size_align(
                bytes.next_multiple_of(Self::HUGE_BYTES),
                Self::HUGE_BYTES,
            )
        } else {
            std::alloc::Layout::from_size_align(bytes, align_of::<T>())
        };
        (layout.expect("table layout"), huge)
    }

    /// Room for `len` elements, not initialised: every caller writes all of them.
    fn alloc(len: usize) -> HugeBuf<T> {
        let (layout, huge) = Self::layout(len);
        // SAFETY: the layout's size is not zero.
        let raw = unsafe { std::alloc::alloc(layout) }.cast::<T>();
        let Some(ptr) = std::ptr::NonNull::new(raw) else {
            std::alloc::handle_alloc_error(layout)
        };
        #[cfg(target_os = "linux")]
        if huge {
            // SAFETY: the range is exactly this allocation; MADV_HUGEPAGE changes no contents,
            // only how the kernel backs the pages (a hint: if it fails, nothing else changes).
            unsafe {
                libc::madvise(ptr.as_ptr().cast(), layout.size(), libc::MADV_HUGEPAGE);
            }
        }
        HugeBuf { ptr, len }
    }
}

impl<T: Copy> std::ops::Deref for HugeBuf<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialised elements live at `ptr` for as long as self does.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> std::ops::DerefMut for HugeBuf<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in deref, and `&mut self` is the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Clone for HugeBuf<T> {
    fn clone(&self) -> Self {
        let buf = HugeBuf::<T>::alloc(self.len);
        // SAFETY: both hold `len` elements and are distinct allocations; this initialises all
        // of the new one.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), buf.ptr.as_ptr(), self.len) };
        buf
    }
}

impl<T: Copy> Drop for HugeBuf<T> {
    fn drop(&mut self) {
        // SAFETY: allocated with exactly this layout (the same function of the same length);
        // T is Copy, so nothing to drop first.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), Self::layout(self.len).0) };
    }
}

impl<T: Copy> std::fmt::Debug for HugeBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HugeBuf({} elements)", self.len)
    }
}

/// Asks the CPU to bring `v[i]`'s cache line in: a hint, nothing happens past `v`'s end or on
/// other architectures. The maps are tens of MiB per device and read at random, so a lookup
/// known ahead (the next request of a stream, the next unit GC moves) is worth warming.
#[inline(always)]
pub(crate) fn prefetch<T>(v: &[T], i: usize) {
    #[cfg(target_arch = "x86_64")]
    if i < v.len() {
        // SAFETY: the address is inside `v`; a prefetch changes no state a program can
        // observe and never faults.
        unsafe {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            _mm_prefetch::<_MM_HINT_T0>(v.as_ptr().add(i).cast());
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (v, i);
}

const NONE: u32 = u32::MAX;
/// `block_handle` of a block of the shared GC frontier (initially isolated FDP handles).
const SHARED: u8 = u8::MAX;

/// The fewest free blocks per pool at which a host block may still open without GC: one for the
/// host block itself and one for GC's own frontier, so that GC can still run afterwards.
pub const GC_RESERVE_BLOCKS: u32 = 2;

const FREE: u8 = 0;
const OPEN: u8 = 1;
const FULL: u8 = 2;

/// The flash work one GC episode on a pool performed (one or more victim blocks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcWork {
    pub pool: u32,
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
    pub pool: u32,
    /// Global page index.
    pub page: u32,
    /// The page is now full and must be programmed.
    pub page_full: bool,
    /// This unit opened the page (the first unit in it).
    pub page_opened: bool,
}

/// Flexible Data Placement counters since the last [`Ftl::reset_stats`], per reclaim unit
/// handle (only the first `handles` entries are used).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FdpStats {
    pub handles: u32,
    /// Units the host wrote through each handle.
    pub host_units: [u64; FDP_HANDLES_MAX as usize],
    /// Units GC moved, by the handle that last wrote them.
    pub units_moved: [u64; FDP_HANDLES_MAX as usize],
    /// Victims reclaimed, by the handle whose block it was (a host block of the handle, or
    /// its own GC frontier's when persistently isolated).
    pub victims: [u64; FDP_HANDLES_MAX as usize],
    /// Victims that were blocks of the shared GC frontier (initially isolated handles).
    pub victims_shared: u64,
}

impl FdpStats {
    /// Media units per host unit of handle `h` (1 when it wrote nothing).
    pub fn write_amplification(&self, h: usize) -> f64 {
        if self.host_units[h] == 0 {
            return 1.0;
        }
        (self.host_units[h] + self.units_moved[h]) as f64 / self.host_units[h] as f64
    }
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

#[derive(Clone, Copy, Debug)]
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
    blocks_per_pool: u32,
    /// pages_per_block * blocks_per_pool (global page numbers are u32, so it fits): one
    /// division instead of two where a page's pool is asked on every read.
    pages_per_pool: u32,
    pools: u32,
    gc_soft_blocks: u32,
    gc_hard_blocks: u32,
    logical_units: u32,
    l2p: HugeBuf<u32>,
    p2l: HugeBuf<u32>,
    valid: Vec<u32>,
    state: Vec<u8>,
    /// Per-pool stacks of free blocks, pool `d` in `free[d*bpd .. d*bpd + free_count[d]]`.
    free: Vec<u32>,
    free_count: Vec<u32>,
    /// Host frontiers, `handles` per pool: handle `h`'s on pool `p` at `h * pools + p` (so a
    /// conventional device, one handle, has one per pool at `p`).
    host_open: Vec<Frontier>,
    /// GC frontiers: one per pool, or with persistently isolated FDP handles one per handle
    /// and pool, indexed as `host_open`.
    gc_open: Vec<Frontier>,
    /// Per handle and pool (indexed as `host_open`), the host page being filled (global page,
    /// or NONE) and the units in it. With round-robin allocation only the handle's `cur_pool`'s
    /// can be open.
    open_page: Vec<u32>,
    open_fill: Vec<u32>,
    /// Per handle, the pool taking its host pages and the next in the round robin.
    cur_pool: Vec<u32>,
    next_pool: Vec<u32>,
    /// `idle-first` allocation: per handle, the pools that took a page of its current round
    /// (a bitset of `round_words` words per handle; empty with other allocations). See
    /// [`Ftl::write_unit_placed_by`].
    round_used: Vec<u64>,
    round_words: usize,
    /// FDP reclaim unit handles (1: a conventional device).
    handles: u32,
    /// Whether GC keeps each handle's data in its own GC frontier.
    persistent: bool,
    /// With more than one handle: per block, the handle whose frontier opened it (SHARED for
    /// a shared GC frontier's), and per logical unit the handle that last wrote it. Empty on a
    /// conventional device.
    block_handle: Vec<u8>,
    unit_handle: Vec<u8>,
    fdp: FdpStats,
    allocation: Allocation,
    victim: GcVictim,
    candidates: u32,
    rng: Xoshiro256PlusPlus,
    /// Per pool, a victim block GC has started but not finished ([`Ftl::gc_partial`]; NONE
    /// when none), and the first of its pages not yet moved. Every later GC on the pool
    /// finishes it first.
    gc_victim: Vec<u32>,
    gc_cursor: Vec<u32>,
    stats: FtlStats,
}

impl Ftl {
    pub fn new(cfg: &DeviceConfig) -> Ftl {
        let g = &cfg.geometry;
        let upp = cfg.units_per_page();
        let pools = cfg.pools() as u32;
        let bpd = cfg.blocks_per_pool();
        let blocks = pools as usize * bpd as usize;
        let ppb = g.pages_per_block;
        let upb = ppb * upp;
        let physical_units = blocks * upb as usize;
        let logical_units = (cfg.logical_bytes() / g.map_unit_bytes as u64) as u32;
        assert!((logical_units as usize) < physical_units);
        let (soft, hard) = cfg.gc_thresholds_blocks();
        let mut free = vec![0u32; blocks];
        let mut free_count = vec![0u32; pools as usize];
        for d in 0..pools {
            // Pushed in reverse so that blocks are used in ascending order.
            for i in 0..bpd {
                free[(d * bpd + i) as usize] = d * bpd + (bpd - 1 - i);
            }
            free_count[d as usize] = bpd;
        }
        let handles = cfg.fdp_handles();
        let gc_frontiers = cfg.gc_frontiers();
        let fdp_on = cfg.fdp.is_some();
        let mut ftl = Ftl {
            units_per_page: upp,
            pages_per_block: ppb,
            units_per_block: upb,
            blocks_per_pool: bpd,
            pages_per_pool: ppb * bpd,
            pools,
            gc_soft_blocks: soft,
            gc_hard_blocks: hard,
            logical_units,
            l2p: HugeBuf::filled(logical_units as usize, UNMAPPED),
            p2l: HugeBuf::filled(physical_units, UNMAPPED),
            valid: vec![0; blocks],
            state: vec![FREE; blocks],
            free,
            free_count,
            host_open: Vec::with_capacity((pools * handles) as usize),
            gc_open: Vec::with_capacity((pools * gc_frontiers) as usize),
            open_page: vec![NONE; (pools * handles) as usize],
            open_fill: vec![0; (pools * handles) as usize],
            cur_pool: vec![0; handles as usize],
            next_pool: vec![0; handles as usize],
            round_used: if cfg.ftl.allocation == Allocation::IdleFirst {
                vec![0; handles as usize * (pools as usize).div_ceil(64)]
            } else {
                Vec::new()
            },
            round_words: (pools as usize).div_ceil(64),
            handles,
            persistent: gc_frontiers > 1,
            block_handle: if fdp_on {
                vec![SHARED; blocks]
            } else {
                Vec::new()
            },
            unit_handle: if fdp_on {
                vec![0; logical_units as usize]
            } else {
                Vec::new()
            },
            fdp: FdpStats {
                handles,
                ..FdpStats::default()
            },
            allocation: cfg.ftl.allocation,
            victim: cfg.ftl.gc_victim,
            candidates: if cfg.ftl.gc_candidates > 0 {
                cfg.ftl.gc_candidates
            } else {
                bpd.max(2).ilog2()
            },
            rng: Xoshiro256PlusPlus::seed_from_u64(0x6c_7669_6374_696d),
            gc_victim: vec![NONE; pools as usize],
            gc_cursor: vec![0; pools as usize],
            stats: FtlStats::default(),
        };
        if !fdp_on {
            // The conventional order of the blocks taken (kept: reports stay byte-identical).
            for d in 0..pools {
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
            return ftl;
        }
        for h in 0..handles {
            for d in 0..pools {
                let b = ftl.pop_free(d);
                ftl.block_handle[b as usize] = h as u8;
                ftl.host_open.push(Frontier {
                    block: b,
                    next_unit: 0,
                });
            }
        }
        for h in 0..gc_frontiers {
            for d in 0..pools {
                let b = ftl.pop_free(d);
                ftl.block_handle[b as usize] = if ftl.persistent { h as u8 } else { SHARED };
                ftl.gc_open.push(Frontier {
                    block: b,
                    next_unit: 0,
                });
            }
        }
        ftl
    }

    /// FDP reclaim unit handles (1 on a conventional device).
    pub fn handles(&self) -> u32 {
        self.handles
    }

    /// The FDP counters (per handle); `None` on a conventional device.
    pub fn fdp_stats(&self) -> Option<FdpStats> {
        (!self.unit_handle.is_empty()).then_some(self.fdp)
    }

    pub fn logical_units(&self) -> u32 {
        self.logical_units
    }
    pub fn units_per_page(&self) -> u32 {
        self.units_per_page
    }
    pub fn pools(&self) -> u32 {
        self.pools
    }
    pub fn stats(&self) -> FtlStats {
        self.stats
    }
    pub fn reset_stats(&mut self) {
        self.stats = FtlStats::default();
        self.fdp = FdpStats {
            handles: self.handles,
            ..FdpStats::default()
        };
    }

    /// Whether any counter moved since the last [`Ftl::reset_stats`].
    pub fn stats_dirty(&self) -> bool {
        self.stats != FtlStats::default()
            || self.fdp
                != FdpStats {
                    handles: self.handles,
                    ..FdpStats::default()
                }
    }
    pub fn free_blocks(&self, pool: u32) -> u32 {
        self.free_count[pool as usize]
    }
    pub fn gc_soft_blocks(&self) -> u32 {
        self.gc_soft_blocks
    }
    /// Free blocks per pool at or below which a host block opens only after GC.
    pub fn gc_hard_blocks(&self) -> u32 {
        self.gc_hard_blocks
    }
    pub fn blocks_per_pool(&self) -> u32 {
        self.blocks_per_pool
    }
    pub fn pages_per_block(&self) -> u32 {
        self.pages_per_block
    }
    /// Whether `page` is a host page still being filled (its units are in the write buffer).
    #[inline]
    pub fn is_open_page(&self, page: u32) -> bool {
        // One open page per pool and handle: a conventional device looks once.
        let mut i = self.pool_of_page(page) as usize;
        while i < self.open_page.len() {
            if self.open_page[i] == page {
                return true;
            }
            i += self.pools as usize;
        }
        false
    }

    /// Whether logical unit `lpn` holds data (written and not trimmed).
    #[inline]
    pub fn is_mapped(&self, lpn: u32) -> bool {
        self.l2p[lpn as usize] != UNMAPPED
    }

    /// The pool a host unit goes to with static allocation (and where an unmapped unit is
    /// assumed to be).
    #[inline]
    fn static_pool(&self, lpn: u32) -> u32 {
        lpn % self.pools
    }

    /// Close the open host page of `pool` (a flush or FUA write programs it padded): returns
    /// the page if one was open. Its empty slots stay unused. Handle 0's on an FDP device.
    pub fn close_open_page(&mut self, pool: u32) -> Option<u32> {
        self.close_open_page_of(0, pool)
    }

    /// [`Ftl::close_open_page`] for FDP handle `handle`'s open page on `pool`.
    pub fn close_open_page_of(&mut self, handle: u32, pool: u32) -> Option<u32> {
        let i = (handle * self.pools + pool) as usize;
        let page = self.open_page[i];
        if page == NONE {
            return None;
        }
        self.open_page[i] = NONE;
        Some(page)
    }
    /// Index of a page inside its block (for per-page-type timing).
    #[inline]
    pub fn page_in_block(&self, page: u32) -> u32 {
        page % self.pages_per_block
    }
    #[inline]
    pub fn pool_of_page(&self, page: u32) -> u32 {
        // floor(floor(p / a) / b) == floor(p / (a * b)).
        page / self.pages_per_pool
    }

    fn pop_free(&mut self, pool: u32) -> u32 {
        let n = self.free_count[pool as usize];
        assert!(
            n > 0,
            "pool {pool} has no free block: over-provisioning invariant broken"
        );
        let b = self.free[(pool * self.blocks_per_pool + n - 1) as usize];
        self.free_count[pool as usize] = n - 1;
        debug_assert_eq!(self.state[b as usize], FREE);
        self.state[b as usize] = OPEN;
        b
    }

    fn push_free(&mut self, pool: u32, block: u32) {
        let n = self.free_count[pool as usize];
        assert!(n < self.blocks_per_pool);
        self.free[(pool * self.blocks_per_pool + n) as usize] = block;
        self.free_count[pool as usize] = n + 1;
        self.state[block as usize] = FREE;
    }

    /// Warms the mapping entry of logical unit `lpn` for a lookup coming soon (a hint).
    #[inline]
    pub fn prefetch_unit(&self, lpn: u32) {
        prefetch(&self.l2p, lpn as usize);
    }

    /// Where a logical unit lives: (pool, global page). An unmapped unit (never written or
    /// trimmed) is placed where a sequential fill would have put it, so reads of it still cost
    /// a flash read.
    #[inline]
    pub fn locate(&self, lpn: u32) -> (u32, u32, bool) {
        let p = self.l2p[lpn as usize];
        if p == UNMAPPED {
            let page = lpn / self.units_per_page;
            let pool = match self.allocation {
                Allocation::RoundRobin | Allocation::IdleFirst => page % self.pools,
                Allocation::Static => self.static_pool(lpn),
            };
            let block = pool * self.blocks_per_pool + (page / self.pools) % self.blocks_per_pool;
            let gpage = block * self.pages_per_block + (page / self.pools) % self.pages_per_block;
            return (pool, gpage, false);
        }
        let page = p / self.units_per_page;
        (self.pool_of_page(page), page, true)
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

    /// Write one logical unit into the host frontier. GC that had to run first (the pool's free
    /// blocks at or below the hard threshold) is added to `gc`.
    pub fn write_unit(&mut self, lpn: u32, gc: &mut GcWork) -> UnitPlace {
        self.write_unit_with(lpn, gc, self.gc_hard_blocks)
    }

    /// [`Ftl::write_unit`] with GC forced only at or below `hard_blocks` free blocks per pool
    /// instead of the configured hard threshold (a deterministic window defers GC to the last
    /// safe moment). `hard_blocks` must be at least [`GC_RESERVE_BLOCKS`].
    pub fn write_unit_with(&mut self, lpn: u32, gc: &mut GcWork, hard_blocks: u32) -> UnitPlace {
        self.write_unit_placed(lpn, 0, gc, hard_blocks)
    }

    /// [`Ftl::write_unit_with`] through FDP reclaim unit handle `handle` (below
    /// [`Ftl::handles`]): the unit goes to that handle's open page, in its own host block.
    /// Pools are taken as if every die were idle ([`Ftl::write_unit_placed_by`]).
    pub fn write_unit_placed(
        &mut self,
        lpn: u32,
        handle: u32,
        gc: &mut GcWork,
        hard_blocks: u32,
    ) -> UnitPlace {
        self.write_unit_placed_by(lpn, handle, gc, hard_blocks, |_| 0)
    }

    /// [`Ftl::write_unit_placed`], where `busy_until(pool)` says when `pool`'s die is free.
    ///
    /// With `idle-first` allocation a handle fills its reclaim unit (one block per pool) in
    /// rounds: every pool takes one page of the handle per round, as in a plain round robin,
    /// but each page opening takes, of the pools the round has not used yet, the one where
    /// the fewest other handles have a page open (each will be programmed there when it
    /// fills), then whose die is free first, ties in round-robin order. Several handles each
    /// in its own fixed round robin (the `round-robin` allocation, and FEMU's FDP device:
    /// every reclaim unit's write pointer steps channel, then LUN, on its own,
    /// hw/femu/bbssd/ftl-fdp.c `fdp_advance_ru_pointer`) put their programs on one die at
    /// once whenever their pointers meet, and a read there waits behind all of them
    /// (docs/arch-fdp.md: three 3.15 ms TLC wordline programs, 9.7 ms, on p4600 NAND). A
    /// controller places a page where it can program it soon ("dynamic allocation", which
    /// assigns a write to an idle channel, chip and die: Hu et al., "Performance Impact and
    /// Interplay of SSD Parallelism through Advanced Commands, Allocation Strategy and Data
    /// Granularity", ICS'11), which keeps the handles' programs apart. The round keeps each
    /// handle's blocks filled evenly, so a block holds the same span of its stream as in a
    /// plain round robin. The die times are those when the page opens: a page filled by
    /// later writes is programmed later, which the open-page count stands in for.
    pub fn write_unit_placed_by(
        &mut self,
        lpn: u32,
        handle: u32,
        gc: &mut GcWork,
        hard_blocks: u32,
        busy_until: impl Fn(u32) -> u64,
    ) -> UnitPlace {
        assert!(lpn < self.logical_units);
        assert!(hard_blocks >= GC_RESERVE_BLOCKS);
        assert!(
            handle < self.handles,
            "placement handle {handle} of {}",
            self.handles
        );
        let h = handle as usize;
        let hb = h * self.pools as usize;
        let mut pool = match self.allocation {
            Allocation::RoundRobin | Allocation::IdleFirst => {
                if self.open_page[hb + self.cur_pool[h] as usize] == NONE {
                    let next = if self.round_used.is_empty() {
                        self.next_pool[h]
                    } else {
                        self.round_pick(h, busy_until)
                    };
                    self.cur_pool[h] = next;
                    self.next_pool[h] = (next + 1) % self.pools;
                }
                self.cur_pool[h]
            }
            Allocation::Static => self.static_pool(lpn),
        };
        let mut opened = false;
        if self.open_page[hb + pool as usize] == NONE {
            let (at, page) = self.open_host_page(handle, pool, gc, hard_blocks);
            if at != pool && self.allocation != Allocation::Static {
                // The round robin goes on from the pool that took the page.
                self.cur_pool[h] = at;
                self.next_pool[h] = (at + 1) % self.pools;
                if !self.round_used.is_empty() {
                    let w = h * self.round_words + at as usize / 64;
                    self.round_used[w] |= 1 << (at % 64);
                }
            }
            pool = at;
            self.open_page[hb + pool as usize] = page;
            self.open_fill[hb + pool as usize] = 0;
            opened = true;
        }
        if !self.unit_handle.is_empty() {
            self.unit_handle[lpn as usize] = handle as u8;
            self.fdp.host_units[h] += 1;
        }
        let p = hb + pool as usize;
        let page = self.open_page[p];
        let pu = page * self.units_per_page + self.open_fill[p];
        self.invalidate(lpn);
        self.l2p[lpn as usize] = pu;
        self.p2l[pu as usize] = lpn;
        self.valid[(pu / self.units_per_block) as usize] += 1;
        self.open_fill[p] += 1;
        self.stats.host_units += 1;
        let full = self.open_fill[p] == self.units_per_page;
        if full {
            self.open_page[p] = NONE;
        }
        UnitPlace {
            pool,
            page,
            page_full: full,
            page_opened: opened,
        }
    }

    /// The pool handle `h`'s next page opens on: of the pools its stripe round has not used,
    /// the one whose die is free first, ties in round-robin order from `next_pool`; a new
    /// round starts when every pool took one. Marks it used. (`idle-first` allocation.)
    fn round_pick(&mut self, h: usize, busy_until: impl Fn(u32) -> u64) -> u32 {
        let words = self.round_words;
        let used = &mut self.round_used[h * words..(h + 1) * words];
        if (0..self.pools).all(|p| used[p as usize / 64] & (1 << (p % 64)) != 0) {
            used.fill(0);
        }
        let mut best = ((u32::MAX, u64::MAX), NONE);
        for i in 0..self.pools {
            let p = (self.next_pool[h] + i) % self.pools;
            if used[p as usize / 64] & (1 << (p % 64)) == 0 {
                // Other handles' pages open on the pool will be programmed there when they
                // fill: a pool with fewer of them first, then the die free first.
                let open = (0..self.handles)
                    .filter(|&o| self.open_page[(o * self.pools + p) as usize] != NONE)
                    .count() as u32;
                let key = (open, busy_until(p));
                if key < best.0 || best.1 == NONE {
                    best = (key, p);
                }
            }
        }
        let p = best.1;
        used[p as usize / 64] |= 1 << (p % 64);
        p
    }

    /// Whether `pool` can give handle `handle` a host page without GC: room left in its host
    /// block, or more than `keep` free blocks to open a new one with.
    #[inline]
    fn has_host_room(&self, handle: u32, pool: u32, keep: u32) -> bool {
        self.host_open[(handle * self.pools + pool) as usize].next_unit < self.units_per_block
            || self.free_count[pool as usize] > keep
    }

    /// Reserve the next host page, on `pool` if it can take one: returns (pool, global page).
    ///
    /// A pool whose host block is used up runs GC first while it has `hard_blocks` or fewer
    /// free blocks, if its garbage can lift it above that. A host block may take a pool's second-to-last free block but never its
    /// last: GC needs one to move pages into (a victim has fewer valid units than a block, so
    /// one free block always lets GC finish it). A pool that GC cannot bring above that reserve
    /// is full of valid data (host pages go round robin over pools whatever the addresses, so
    /// long-lived data can pile up on some pools while its garbage accrues on others); its
    /// host pages then go to the next pool with room, as a dynamic-allocation FTL places them,
    /// until overwrites elsewhere invalidate its data and GC reclaims it (soft GC still runs
    /// there when the die is idle).
    fn open_host_page(
        &mut self,
        handle: u32,
        pool: u32,
        gc: &mut GcWork,
        hard_blocks: u32,
    ) -> (u32, u32) {
        let h = handle;
        self.retire_host_block(h, pool);
        if !self.has_host_room(h, pool, hard_blocks) && self.gc_can_lift(pool, hard_blocks) {
            self.hard_gc(pool, hard_blocks, self.blocks_per_pool, gc);
        }
        let mut at = pool;
        if !self.has_host_room(h, pool, 1) {
            // Exhausted: the next pool that has room without GC, else the first that GC can
            // give room (then its GC work is reported too, under that pool).
            let n = self.pools;
            let others = (1..n).map(|i| (pool + i) % n);
            at = match others.clone().find(|&d| self.has_host_room(h, d, 1)) {
                Some(d) => d,
                None => {
                    let mut found = None;
                    for d in others {
                        self.retire_host_block(h, d);
                        self.hard_gc(d, 1, u32::MAX, gc);
                        if self.has_host_room(h, d, 1) {
                            found = Some(d);
                            break;
                        }
                    }
                    // None is unreachable with a validated geometry (every pool keeps at
                    // least `hard + 4` spare blocks, so garbage exists somewhere); pop_free
                    // names the broken invariant if it ever is.
                    found.unwrap_or(pool)
                }
            };
        }
        let upp = self.units_per_page;
        let fi = (h * self.pools + at) as usize;
        if self.host_open[fi].next_unit >= self.units_per_block {
            self.retire_host_block(h, at);
            let b = self.pop_free(at);
            if !self.block_handle.is_empty() {
                self.block_handle[b as usize] = h as u8;
            }
            self.host_open[fi] = Frontier {
                block: b,
                next_unit: 0,
            };
        }
        let f = &mut self.host_open[fi];
        let page = f.block * self.pages_per_block + f.next_unit / upp;
        f.next_unit += upp;
        (at, page)
    }

    /// Whether reclaiming all the garbage of `pool`'s full blocks would leave it more than
    /// `keep` free blocks. When it would not, foreground GC there is futile (it would move
    /// nearly whole blocks for a few units each, at every visit of the round robin): the pool
    /// is treated as full instead.
    fn gc_can_lift(&self, pool: u32, keep: u32) -> bool {
        let first = (pool * self.blocks_per_pool) as usize;
        let blocks = first..first + self.blocks_per_pool as usize;
        let garbage: u64 = self.state[blocks.clone()]
            .iter()
            .zip(&self.valid[blocks])
            .filter(|(s, _)| **s == FULL)
            .map(|(_, &v)| (self.units_per_block - v) as u64)
            .sum();
        self.free_count[pool as usize] as u64 + garbage / self.units_per_block as u64 > keep as u64
    }

    /// A used-up host block becomes full (a GC candidate) once; the frontier then points at no
    /// block until the pool opens a new one (a pool passed over keeps no stale block: GC may
    /// reclaim and reuse it meanwhile).
    fn retire_host_block(&mut self, handle: u32, pool: u32) {
        let f = &mut self.host_open[(handle * self.pools + pool) as usize];
        if f.next_unit >= self.units_per_block && f.block != NONE {
            self.state[f.block as usize] = FULL;
            f.block = NONE;
        }
    }

    /// Foreground GC on `pool` until it has more than `keep` free blocks, no victim is left,
    /// or `max_rounds` victims were reclaimed; the work is added to `gc`.
    fn hard_gc(&mut self, pool: u32, keep: u32, max_rounds: u32, gc: &mut GcWork) {
        let mut rounds = 0;
        while self.free_count[pool as usize] <= keep && rounds < max_rounds {
            let w = self.gc_once(pool);
            if w.victims == 0 {
                break;
            }
            gc.pool = pool;
            gc.add(&w);
            rounds += 1;
        }
    }

    /// The victim on `pool`: greedy (the full block with the fewest valid units) or the best
    /// full block among `candidates` drawn at random (d-choices; greedy when none is full).
    /// Only a block with fewer valid units than a whole block is worth reclaiming.
    fn pick_victim(&self, pool: u32, rng: &mut Xoshiro256PlusPlus) -> Option<u32> {
        let first = pool * self.blocks_per_pool;
        let mut victim = None;
        let mut best = self.units_per_block;
        if self.victim == GcVictim::DChoices {
            for _ in 0..self.candidates {
                let b =
                    first + ((rng.next_u64() as u128 * self.blocks_per_pool as u128) >> 64) as u32;
                if self.state[b as usize] == FULL && self.valid[b as usize] < best {
                    best = self.valid[b as usize];
                    victim = Some(b);
                }
            }
            if victim.is_some() {
                return victim;
            }
        }
        for b in first..first + self.blocks_per_pool {
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

    /// The work [`Ftl::gc_once`] would do on `pool` now, without doing it: the same victim and
    /// the same counts (tested), so a caller can see whether it fits a time budget first.
    pub fn gc_once_work(&self, pool: u32) -> GcWork {
        let mut w = GcWork {
            pool,
            ..GcWork::default()
        };
        let (victim, first_page) = match self.gc_victim[pool as usize] {
            NONE => match self.pick_victim(pool, &mut self.rng.clone()) {
                Some(v) => (v, 0),
                None => return w,
            },
            v => (v, self.gc_cursor[pool as usize]),
        };
        let upp = self.units_per_page;
        let base = victim * self.units_per_block;
        for page in first_page..self.pages_per_block {
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
        let start = (self.gc_open[self.gc_frontier_of(pool, victim)].next_unit % upp) as u64;
        let programs = ((start + w.units_moved) / upp as u64) as u32;
        w.victims = 1;
        w.erases = 1;
        w.page_programs = programs + u32::from(w.units_moved > 0 && programs == 0);
        w
    }

    /// Host units that can be written before a host block would open at or below `hard_blocks`
    /// free blocks on its pool (so before GC would have to run), with no GC in between. Exact
    /// with round-robin allocation: host pages go round robin over pools whatever the
    /// addresses. With static allocation the addresses decide, so this is the worst case: every
    /// unit going to the pool with the least room.
    pub fn host_units_before_gc(&self, hard_blocks: u32) -> u64 {
        let upp = self.units_per_page as u64;
        let pools = self.pools as u64;
        // Pages each pool can still open without GC, beyond its open page.
        let pages_left = |d: u32| {
            let open_left = ((self.units_per_block - self.host_open[d as usize].next_unit)
                / self.units_per_page) as u64;
            let opens = self.free_count[d as usize].saturating_sub(hard_blocks) as u64;
            open_left + opens * self.pages_per_block as u64
        };
        let in_page = |d: u32| {
            if self.open_page[d as usize] == NONE {
                0
            } else {
                upp - self.open_fill[d as usize] as u64
            }
        };
        match self.allocation {
            // idle-first: each round visits every pool once too, in another order.
            Allocation::RoundRobin | Allocation::IdleFirst => {
                let mut first_gc_page = u64::MAX;
                for d in 0..self.pools {
                    let order = (d as u64 + pools - self.next_pool[0] as u64) % pools;
                    first_gc_page = first_gc_page.min(pages_left(d) * pools + order);
                }
                first_gc_page * upp + in_page(self.cur_pool[0])
            }
            Allocation::Static => (0..self.pools)
                .map(|d| pages_left(d) * upp + in_page(d))
                .min()
                .unwrap_or(0),
        }
    }

    /// Reclaim one victim block on `pool` (greedy: the full block with the fewest valid units;
    /// a victim [`Ftl::gc_partial`] started is finished first). Returns the work done;
    /// `victims == 0` when no block can be reclaimed with any gain.
    pub fn gc_once(&mut self, pool: u32) -> GcWork {
        self.gc_partial(pool, u32::MAX, true)
    }

    /// GC on `pool` that reads at most `max_page_reads` pages (pages with valid units): the
    /// victim in progress, or a new one, is moved page by page from where it was left; when its
    /// last page is moved it is erased and freed (`victims == 1`) if `may_erase`, otherwise it
    /// stays the pool's
    /// victim in progress (`victims == 0`, the pages moved reported) and the next GC there goes
    /// on with it. Firmware collects garbage this way, a page copy at a time, so a host that
    /// gives GC a time budget shorter than a whole victim still gets its garbage collected.
    /// Nothing to do (no victim with any gain): an empty [`GcWork`].
    pub fn gc_partial(&mut self, pool: u32, max_page_reads: u32, may_erase: bool) -> GcWork {
        let mut w = GcWork {
            pool,
            ..GcWork::default()
        };
        let p = pool as usize;
        let (victim, first_page) = match self.gc_victim[p] {
            NONE => {
                let mut rng = self.rng.clone();
                let picked = self.pick_victim(pool, &mut rng);
                self.rng = rng;
                match picked {
                    Some(v) => (v, 0),
                    None => return w,
                }
            }
            v => (v, self.gc_cursor[p]),
        };
        let upp = self.units_per_page;
        let upb = self.units_per_block;
        let base = victim * upb;
        let mut moved = 0u64;
        let mut programs = 0u32;
        let mut page = first_page;
        // The GC frontier in a local, and its position in its page counted rather than
        // divided: this loop runs once per moved unit. Blocks are whole pages, so a new block
        // starts at phase 0 as the full one ended.
        let fi = self.gc_frontier_of(pool, victim);
        let fdp = !self.unit_handle.is_empty();
        let mut f = self.gc_open[fi];
        let mut phase = f.next_unit % upp;
        while page < self.pages_per_block {
            if w.page_reads >= max_page_reads {
                break;
            }
            let mut any = false;
            let first = base + page * upp;
            for pu in first..first + upp {
                // The unit a few ahead in the victim (its p2l entry is on a line read anyway)
                // will update its own l2p entry, a random line: warm it now.
                if let Some(&ahead) = self.p2l.get((pu + GC_PREFETCH_UNITS) as usize) {
                    prefetch(&self.l2p, ahead as usize);
                }
                let lpn = self.p2l[pu as usize];
                if lpn == UNMAPPED {
                    continue;
                }
                any = true;
                // Move to the GC frontier of the same pool.
                if f.next_unit >= upb {
                    self.state[f.block as usize] = FULL;
                    let b = self.pop_free(pool);
                    if fdp {
                        // The frontier's owner: its handle, or shared.
                        self.block_handle[b as usize] = self.block_handle[f.block as usize];
                    }
                    f = Frontier {
                        block: b,
                        next_unit: 0,
                    };
                }
                let dst = f.block * upb + f.next_unit;
                f.next_unit += 1;
                phase += 1;
                if phase == upp {
                    phase = 0;
                    programs += 1;
                }
                self.p2l[pu as usize] = UNMAPPED;
                self.p2l[dst as usize] = lpn;
                self.l2p[lpn as usize] = dst;
                self.valid[f.block as usize] += 1;
                if fdp {
                    self.fdp.units_moved[self.unit_handle[lpn as usize] as usize] += 1;
                }
                moved += 1;
            }
            if any {
                w.page_reads += 1;
            }
            page += 1;
        }
        self.gc_open[fi] = f;
        // Nothing in the loop reads the victim's count (it is neither frontier nor free).
        self.valid[victim as usize] -= moved as u32;
        // A partly filled GC page is programmed when it fills; count it now so time is charged.
        w.page_programs = programs + u32::from(moved > 0 && programs == 0);
        w.units_moved = moved;
        self.stats.units_moved += moved;
        if page < self.pages_per_block || !may_erase {
            self.gc_victim[p] = victim;
            self.gc_cursor[p] = page;
            return w;
        }
        self.gc_victim[p] = NONE;
        self.gc_cursor[p] = 0;
        debug_assert_eq!(self.valid[victim as usize], 0);
        self.push_free(pool, victim);
        w.victims = 1;
        w.erases = 1;
        self.stats.gc_runs += 1;
        self.stats.victims += 1;
        self.stats.erases += 1;
        if fdp {
            match self.block_handle[victim as usize] {
                SHARED => self.fdp.victims_shared += 1,
                h => self.fdp.victims[h as usize] += 1,
            }
        }
        w
    }

    /// The GC frontier a victim's valid units move to: its handle's own when the FDP handles
    /// are persistently isolated, else the pool's one.
    #[inline]
    fn gc_frontier_of(&self, pool: u32, victim: u32) -> usize {
        if self.persistent {
            let h = self.block_handle[victim as usize];
            debug_assert_ne!(h, SHARED, "a persistently isolated victim has a handle");
            h as usize * self.pools as usize + pool as usize
        } else {
            pool as usize
        }
    }

    /// Write every logical unit once, in order (a sequential fill), without timing.
    pub fn fill(&mut self) {
        self.fill_first(self.logical_units);
    }

    /// Write the first `units` logical units once, in order, without timing.
    pub fn fill_first(&mut self, units: u32) {
        self.fill_first_until(units, &AtomicBool::new(false));
    }

    /// [`Ftl::fill_first`], returning early (false, the maps consistent but not filled) once
    /// `stop` is set: preconditioning a large device takes minutes, and a SIGINT must not.
    pub fn fill_first_until(&mut self, units: u32, stop: &AtomicBool) -> bool {
        let mut gc = GcWork::default();
        for lpn in 0..units.min(self.logical_units) {
            if lpn % STOP_EVERY_UNITS == 0 && stop.load(Ordering::Relaxed) {
                return false;
            }
            self.write_unit(lpn, &mut gc);
        }
        true
    }

    /// Uniformly random overwrites of `units` logical units, without timing: brings the device
    /// to the steady state of greedy GC under random writes.
    pub fn random_overwrite(&mut self, units: u64, seed: u64) {
        self.random_overwrite_first(self.logical_units, units, seed);
    }

    /// Uniformly random overwrites of `units` units among the first `span` logical units.
    pub fn random_overwrite_first(&mut self, span: u32, units: u64, seed: u64) {
        self.random_overwrite_first_until(span, units, seed, &AtomicBool::new(false));
    }

    /// [`Ftl::random_overwrite_first`], returning early (false) once `stop` is set.
    pub fn random_overwrite_first_until(
        &mut self,
        span: u32,
        units: u64,
        seed: u64,
        stop: &AtomicBool,
    ) -> bool {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut gc = GcWork::default();
        let n = span.clamp(1, self.logical_units) as u64;
        for i in 0..units {
            if i % u64::from(STOP_EVERY_UNITS) == 0 && stop.load(Ordering::Relaxed) {
                return false;
            }
            // Multiply-shift maps 64 random bits to [0, n) without division.
            let lpn = ((rng.next_u64() as u128 * n as u128) >> 64) as u32;
            self.write_unit(lpn, &mut gc);
        }
        true
    }

    /// Run GC on every pool until its free blocks reach the soft threshold, as an idle device
    /// would: the state a device settles in between bursts of writes.
    pub fn settle_gc(&mut self) {
        self.settle_gc_until(&AtomicBool::new(false));
    }

    /// [`Ftl::settle_gc`], returning early (false) once `stop` is set.
    pub fn settle_gc_until(&mut self, stop: &AtomicBool) -> bool {
        for d in 0..self.pools {
            let mut rounds = 0;
            while self.free_count[d as usize] < self.gc_soft_blocks && rounds < self.blocks_per_pool
            {
                if stop.load(Ordering::Relaxed) {
                    return false;
                }
                if self.gc_once(d).victims == 0 {
                    break;
                }
                rounds += 1;
            }
        }
        true
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
        for d in 0..self.pools {
            for i in 0..self.free_count[d as usize] {
                let b = self.free[(d * self.blocks_per_pool + i) as usize];
                if self.state[b as usize] != FREE || self.valid[b as usize] != 0 {
                    return Err(format!("free block {b} is not empty"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table holds what it was filled with and what is written to it, clones into an equal
    /// and independent copy, and from 2 MiB up starts on a 2 MiB boundary (so all of it can be
    /// a huge page); small ones are ordinary allocations.
    #[test]
    fn huge_buffers_are_aligned_filled_and_clone_independently() {
        for len in [0usize, 1, 1000, (2 << 20) / 4 - 1, (2 << 20) / 4, 3 << 20] {
            let mut a = HugeBuf::filled(len, 7u32);
            assert_eq!(a.len(), len);
            assert!(a.iter().all(|&x| x == 7));
            if len * 4 >= 2 << 20 {
                assert_eq!(a.as_ptr() as usize % (2 << 20), 0, "len {len}");
            }
            if len > 0 {
                a[len - 1] = 9;
                a[len / 2] = 8;
            }
            let mut b = a.clone();
            assert_eq!(&a[..], &b[..]);
            if len > 0 {
                b[0] = 1;
                assert_eq!(a[0], if len == 1 { 8 } else { 7 });
                assert_eq!(b[len / 2], if len == 1 { 1 } else { 8 });
            }
        }
        // Elements wider than a word too (the mapping cache's index entries are 8 bytes).
        let c = HugeBuf::filled(5, (1u32, 2u32));
        assert_eq!(c.clone()[4], (1, 2));
    }
}
