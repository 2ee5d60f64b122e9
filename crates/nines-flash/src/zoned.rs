//! A zoned device (NVMe Zoned Namespaces, TP4053 / NVMe ZNS command set 1.1): the logical space
//! is cut into zones written only at their write pointer, reset by the host, and the device has
//! no garbage collection at all (issue 33).
//!
//! Physical layout: a zone holds `blocks_per_zone` erase blocks on *every* block pool (die or
//! plane), and its pages go round-robin over the pools (zone page `q` is on pool `q % pools`,
//! page `q / pools` of that pool's share), so a zone's sequential writes use every die in
//! parallel, as the conventional model's host frontiers do. Zone capacity is a multiple of one
//! page on every pool; the rest of the zone's size (`zone_size_bytes - zone_capacity_bytes`)
//! is a hole that reads as zeros and refuses writes, as the specification has it.
//!
//! Timing reuses the conventional model's parts ([`Ssd`]): the controller front end, the
//! write buffer (a page slot per page in flight), page programs and reads on the die and channel
//! timelines (so a read behind a program or an erase still waits: the tail), and erases queued
//! on the dies like GC's (a read waiting behind one is counted under `programs`). The mapping
//! table is per zone (a few bytes): no mapping-cache lookups. Data is never moved by the device:
//! the [`Ftl`](crate::Ftl) inside the wrapped [`Ssd`] is never written, so its GC counters stay 0
//! (tested).
//!
//! Commands: write at the write pointer, zone append (the device picks the offset: the write
//! pointer; returned), reset (the zone's written blocks are erased on their dies; the command
//! completes when the last erase ends; reads then return zeros), finish (the open page is
//! padded and programmed; the zone is full), open and close (explicit). Resource limits: at
//! most `max_active_zones` zones open or closed, at most `max_open_zones` open; writing a zone
//! that needs opening when the open limit is reached closes the implicitly opened zone opened
//! longest ago (NVMe's implicit close), or fails when every open zone was opened explicitly.
//!
//! Errors, as the Linux NVMe driver maps the status codes: a write off the write pointer, past
//! the zone capacity or across zones, or an append not naming a zone start: EINVAL (Zone Invalid
//! Write / Zone Boundary Error: the block layer reports EIO, nines names the cause); a write to
//! a full zone: ENOSPC (Zone Is Full); too many active zones: EOVERFLOW
//! (`BLK_STS_ZONE_ACTIVE_RESOURCE`); too many open zones: ETOOMANYREFS
//! (`BLK_STS_ZONE_OPEN_RESOURCE`); TRIM and PLM/GC control: EOPNOTSUPP.

use std::cmp::Reverse;

use nines_core::op::Op;
use serde::{Deserialize, Serialize};

use crate::FlashError;
use crate::config::{DeviceConfig, invalid};
use crate::ftl::GcWork;
use crate::ssd::{ReadWaitCause, Ssd, xfer_ns};

pub const EINVAL: i32 = 22;
pub const ENOSPC: i32 = 28;
pub const EOVERFLOW: i32 = 75;
pub const EOPNOTSUPP: i32 = 95;
pub const ETOOMANYREFS: i32 = 109;

/// The `[zoned]` section of a device description.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZonedConfig {
    /// Logical bytes from one zone's start to the next (a multiple of the mapping unit).
    pub zone_size_bytes: u64,
    /// Writable bytes of a zone, from its start: a multiple of one page on every block pool.
    pub zone_capacity_bytes: u64,
    /// Zones open (implicitly or explicitly) at once at most.
    pub max_open_zones: u32,
    /// Zones open or closed (written, not full) at once at most; at least `max_open_zones`.
    pub max_active_zones: u32,
}

impl ZonedConfig {
    /// Bytes of one page on every pool: the capacity is counted in them.
    fn page_stripe_bytes(cfg: &DeviceConfig) -> u64 {
        cfg.pools() * u64::from(cfg.geometry.page_size_bytes)
    }

    /// Erase blocks a zone takes on each pool.
    pub fn blocks_per_zone(&self, cfg: &DeviceConfig) -> u32 {
        let stripe = cfg.pools()
            * u64::from(cfg.geometry.page_size_bytes)
            * u64::from(cfg.geometry.pages_per_block);
        self.zone_capacity_bytes
            .div_ceil(stripe)
            .clamp(1, u64::from(u32::MAX)) as u32
    }

    /// Zones the geometry holds (all its blocks: a zoned device keeps no spare for GC).
    pub fn zones(&self, cfg: &DeviceConfig) -> u32 {
        cfg.blocks_per_pool() / self.blocks_per_zone(cfg)
    }

    pub(crate) fn validate(&self, cfg: &DeviceConfig) -> Result<(), FlashError> {
        let stripe = Self::page_stripe_bytes(cfg);
        let unit = u64::from(cfg.geometry.map_unit_bytes);
        if self.zone_capacity_bytes == 0 || !self.zone_capacity_bytes.is_multiple_of(stripe) {
            return Err(invalid(
                "zoned.zone_capacity_bytes",
                format!(
                    "{} must be a positive multiple of {stripe} bytes (one {}-byte page on each \
                     of the {} block pools)",
                    self.zone_capacity_bytes,
                    cfg.geometry.page_size_bytes,
                    cfg.pools()
                ),
            ));
        }
        if self.zone_size_bytes < self.zone_capacity_bytes
            || !self.zone_size_bytes.is_multiple_of(unit)
        {
            return Err(invalid(
                "zoned.zone_size_bytes",
                format!(
                    "{} must be at least the zone capacity ({}) and a multiple of the {unit}-byte \
                     mapping unit",
                    self.zone_size_bytes, self.zone_capacity_bytes
                ),
            ));
        }
        if self.max_open_zones == 0 || self.max_active_zones < self.max_open_zones {
            return Err(invalid(
                "zoned.max_active_zones",
                format!(
                    "max_open_zones {} must be at least 1 and max_active_zones {} at least that",
                    self.max_open_zones, self.max_active_zones
                ),
            ));
        }
        if self.zones(cfg) == 0 {
            return Err(invalid(
                "zoned.zone_capacity_bytes",
                format!(
                    "a zone needs {} blocks on each pool; the geometry has {}: lower the zone \
                     capacity or add blocks",
                    self.blocks_per_zone(cfg),
                    cfg.blocks_per_pool()
                ),
            ));
        }
        if u64::from(self.zones(cfg))
            .checked_mul(self.zone_size_bytes)
            .is_none()
        {
            return Err(invalid(
                "zoned.zone_size_bytes",
                format!(
                    "{} zones of {} bytes overflow the address space",
                    self.zones(cfg),
                    self.zone_size_bytes
                ),
            ));
        }
        if cfg.geometry.multi_plane || cfg.buffer.count_sectors {
            return Err(invalid(
                "zoned",
                "zoned devices model neither geometry.multi_plane nor buffer.count_sectors: \
                 turn them off",
            ));
        }
        Ok(())
    }
}

/// The state of a zone (NVMe ZNS 1.1, figure "Zone State Machine"; offline and read-only are
/// not modelled).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ZoneState {
    #[default]
    Empty,
    ImplicitlyOpen,
    ExplicitlyOpen,
    Closed,
    Full,
}

impl ZoneState {
    fn is_open(self) -> bool {
        matches!(self, ZoneState::ImplicitlyOpen | ZoneState::ExplicitlyOpen)
    }
    fn is_active(self) -> bool {
        self.is_open() || self == ZoneState::Closed
    }
}

/// One zone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Zone {
    pub state: ZoneState,
    /// The write pointer, bytes from the zone's start (the capacity once finished).
    pub wp_bytes: u64,
    /// Bytes holding data (reads beyond read zeros): the write pointer, unless finished early.
    pub data_bytes: u64,
    pub resets: u64,
    /// Host bytes written into this zone since the counters were reset.
    pub written_bytes: u64,
}

/// Why a zoned command failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ZoneError {
    #[error("write not at the zone's write pointer, past its capacity, or across zones")]
    InvalidWrite,
    #[error("zone is full")]
    ZoneFull,
    #[error("too many active zones")]
    TooManyActive,
    #[error("too many open zones")]
    TooManyOpen,
    #[error("not a zone start, or not whole zones")]
    NotZoneAligned,
    #[error("not supported by a zoned device")]
    Unsupported,
}

impl ZoneError {
    /// The errno a block device would answer (module documentation).
    pub fn errno(self) -> i32 {
        match self {
            ZoneError::InvalidWrite | ZoneError::NotZoneAligned => EINVAL,
            ZoneError::ZoneFull => ENOSPC,
            ZoneError::TooManyActive => EOVERFLOW,
            ZoneError::TooManyOpen => ETOOMANYREFS,
            ZoneError::Unsupported => EOPNOTSUPP,
        }
    }
}

/// A zoned command's end: when, and the offset written (writes and appends; 0 otherwise) or
/// why it failed (it then completes at the controller's time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneDone {
    pub done_ns: u64,
    pub result: Result<u64, ZoneError>,
}

/// Counters of a zoned device since the last reset (report: `zoned`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ZonedStats {
    pub zone_resets: u64,
    pub zone_finishes: u64,
    pub zone_appends: u64,
    /// Blocks erased by resets.
    pub blocks_erased: u64,
    pub host_write_bytes: u64,
    /// Bytes programmed to flash (whole pages, padding included): `media / host` is the
    /// device's write amplification.
    pub media_write_bytes: u64,
    pub open_zones_peak: u32,
    pub active_zones_peak: u32,
    /// Open zones closed by the device to open another (implicit close).
    pub implicit_closes: u64,
    pub invalid_writes: u64,
    pub zone_full_errors: u64,
    pub too_many_open_errors: u64,
    pub too_many_active_errors: u64,
}

/// A zoned device: an [`Ssd`]'s timing parts with a per-zone map instead of its FTL.
#[derive(Clone, Debug)]
pub struct ZonedSsd {
    ssd: Ssd,
    cfg: ZonedConfig,
    pools: u64,
    page_bytes: u64,
    pages_per_block: u64,
    zones: Vec<Zone>,
    /// Open zones, in the order they were opened (bounded by `max_open_zones`; for implicit
    /// close).
    open_order: Vec<u32>,
    open_n: u32,
    active_n: u32,
    stats: ZonedStats,
}

impl ZonedSsd {
    /// A factory-fresh zoned device (every zone empty). Fails when `cfg` has no `[zoned]`
    /// section or, scaled, holds no zone.
    pub fn new(cfg: &DeviceConfig, seed: u64) -> Result<ZonedSsd, FlashError> {
        let Some(z) = cfg.zoned.clone() else {
            return Err(invalid("zoned", "the description has no [zoned] section"));
        };
        z.validate(cfg)?;
        // The wrapped device's FTL is never written; it is built from the conventional part of
        // the description (its maps are what the timing parts expect to find).
        let mut conv = cfg.clone();
        conv.zoned = None;
        let pools = cfg.pools();
        let zones = z.zones(cfg) as usize;
        Ok(ZonedSsd {
            ssd: Ssd::new(&conv, seed),
            pools,
            page_bytes: u64::from(cfg.geometry.page_size_bytes),
            pages_per_block: u64::from(cfg.geometry.pages_per_block),
            zones: vec![Zone::default(); zones],
            open_order: Vec::with_capacity(z.max_open_zones as usize),
            open_n: 0,
            active_n: 0,
            stats: ZonedStats::default(),
            cfg: z,
        })
    }

    /// The timing parts (counters, die busy time): its FTL is never used.
    pub fn ssd(&self) -> &Ssd {
        &self.ssd
    }
    pub fn config(&self) -> &ZonedConfig {
        &self.cfg
    }
    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }
    pub fn stats(&self) -> ZonedStats {
        self.stats
    }
    pub fn open_zones(&self) -> u32 {
        self.open_n
    }
    pub fn active_zones(&self) -> u32 {
        self.active_n
    }
    /// Exported bytes: every zone's size (capacity and hole).
    pub fn logical_bytes(&self) -> u64 {
        self.zones.len() as u64 * self.cfg.zone_size_bytes
    }
    pub fn reset_counters(&mut self) {
        self.ssd.reset_counters();
        self.stats = ZonedStats {
            open_zones_peak: self.open_n,
            active_zones_peak: self.active_n,
            ..ZonedStats::default()
        };
        for z in &mut self.zones {
            z.resets = 0;
            z.written_bytes = 0;
        }
    }

    fn zone_of(&self, offset_bytes: u64) -> (usize, u64) {
        (
            (offset_bytes / self.cfg.zone_size_bytes) as usize,
            offset_bytes % self.cfg.zone_size_bytes,
        )
    }

    fn check_range(&self, offset_bytes: u64, len_bytes: u64) {
        assert!(
            len_bytes > 0 && offset_bytes + len_bytes <= self.logical_bytes(),
            "{len_bytes} bytes at {offset_bytes} do not fit a {}-byte zoned device",
            self.logical_bytes()
        );
    }

    /// A failed command: it takes the controller and completes.
    fn fail(&mut self, now_ns: u64, e: ZoneError) -> ZoneDone {
        self.ssd.advance(now_ns);
        let done_ns = self.ssd.enter(now_ns);
        match e {
            ZoneError::InvalidWrite => self.stats.invalid_writes += 1,
            ZoneError::ZoneFull => self.stats.zone_full_errors += 1,
            ZoneError::TooManyOpen => self.stats.too_many_open_errors += 1,
            ZoneError::TooManyActive => self.stats.too_many_active_errors += 1,
            _ => {}
        }
        ZoneDone {
            done_ns,
            result: Err(e),
        }
    }

    fn set_state(&mut self, z: usize, st: ZoneState) {
        let old = self.zones[z].state;
        if old.is_open() && !st.is_open() {
            self.open_n -= 1;
            let i = self.open_order.iter().position(|&o| o as usize == z);
            self.open_order
                .remove(i.expect("an open zone is in the open order"));
        }
        if !old.is_open() && st.is_open() {
            self.open_n += 1;
            self.open_order.push(z as u32);
        }
        match (old.is_active(), st.is_active()) {
            (true, false) => self.active_n -= 1,
            (false, true) => self.active_n += 1,
            _ => {}
        }
        self.zones[z].state = st;
        self.stats.open_zones_peak = self.stats.open_zones_peak.max(self.open_n);
        self.stats.active_zones_peak = self.stats.active_zones_peak.max(self.active_n);
        debug_assert!(self.open_n <= self.cfg.max_open_zones);
        debug_assert!(self.active_n <= self.cfg.max_active_zones);
        debug_assert_eq!(self.open_n as usize, self.open_order.len());
    }

    /// Makes zone `z` open (`explicit`: by an Open command) if it is not, within the limits.
    fn open(&mut self, z: usize, explicit: bool) -> Result<(), ZoneError> {
        let st = self.zones[z].state;
        match st {
            ZoneState::Full => return Err(ZoneError::ZoneFull),
            ZoneState::ImplicitlyOpen if explicit => {
                self.set_state(z, ZoneState::ExplicitlyOpen);
                return Ok(());
            }
            s if s.is_open() => return Ok(()),
            _ => {}
        }
        if st == ZoneState::Empty && self.active_n >= self.cfg.max_active_zones {
            return Err(ZoneError::TooManyActive);
        }
        if self.open_n >= self.cfg.max_open_zones {
            // Implicit close of the implicitly opened zone opened longest ago.
            let victim = self
                .open_order
                .iter()
                .copied()
                .find(|&o| self.zones[o as usize].state == ZoneState::ImplicitlyOpen)
                .ok_or(ZoneError::TooManyOpen)?;
            self.set_state(victim as usize, ZoneState::Closed);
            self.stats.implicit_closes += 1;
        }
        let to = if explicit {
            ZoneState::ExplicitlyOpen
        } else {
            ZoneState::ImplicitlyOpen
        };
        self.set_state(z, to);
        Ok(())
    }

    /// Writes `len_bytes` at `offset_bytes`, which must be zone `z`'s write pointer.
    pub fn write(&mut self, now_ns: u64, offset_bytes: u64, len_bytes: u64, fua: bool) -> ZoneDone {
        self.check_range(offset_bytes, len_bytes);
        let (z, rel) = self.zone_of(offset_bytes);
        self.write_zone(now_ns, z, rel, len_bytes, fua)
    }

    /// Zone Append to the zone starting at `zone_start_bytes`: written at the write pointer,
    /// whose offset (from the device's start) the result carries.
    pub fn append(
        &mut self,
        now_ns: u64,
        zone_start_bytes: u64,
        len_bytes: u64,
        fua: bool,
    ) -> ZoneDone {
        self.check_range(zone_start_bytes, len_bytes);
        let (z, rel) = self.zone_of(zone_start_bytes);
        if rel != 0 {
            return self.fail(now_ns, ZoneError::NotZoneAligned);
        }
        let wp = self.zones[z].wp_bytes;
        let done = self.write_zone(now_ns, z, wp, len_bytes, fua);
        if done.result.is_ok() {
            self.stats.zone_appends += 1;
        }
        done
    }

    fn write_zone(&mut self, now_ns: u64, z: usize, rel: u64, len: u64, fua: bool) -> ZoneDone {
        let zone = self.zones[z];
        if zone.state == ZoneState::Full {
            return self.fail(now_ns, ZoneError::ZoneFull);
        }
        if rel != zone.wp_bytes || rel + len > self.cfg.zone_capacity_bytes {
            return self.fail(now_ns, ZoneError::InvalidWrite);
        }
        if let Err(e) = self.open(z, false) {
            return self.fail(now_ns, e);
        }
        self.ssd.advance(now_ns);
        let t = self.ssd.enter(now_ns);
        let done = self.place(t, rel, len, fua);
        let zone = &mut self.zones[z];
        zone.wp_bytes = rel + len;
        zone.data_bytes = zone.wp_bytes;
        zone.written_bytes += len;
        self.stats.host_write_bytes += len;
        if zone.wp_bytes == self.cfg.zone_capacity_bytes {
            self.set_state(z, ZoneState::Full);
        }
        let start = z as u64 * self.cfg.zone_size_bytes;
        ZoneDone {
            done_ns: self.ssd.end_command(Op::Write, done),
            result: Ok(start + rel),
        }
    }

    /// The timing of a write of `len` at `rel` in its zone that reached the flash side at `t`:
    /// through the link into the buffer (a page slot for each page it opens), each page it
    /// fills programmed on its pool.
    fn place(&mut self, t: u64, rel: u64, len: u64, fua: bool) -> u64 {
        let s = &mut self.ssd;
        s.counters.writes += 1;
        let link = xfer_ns(len, s.link_write_bytes_per_s);
        let in_dram = if s.dram_bytes_per_s > 0 {
            s.dram(t + link, len)
        } else {
            0
        };
        let pb = self.page_bytes;
        let (mut pos, end) = (rel, rel + len);
        let mut admitted = t;
        let mut durable = 0;
        while pos < end {
            let q = pos / pb;
            let page_end = (q + 1) * pb;
            if pos.is_multiple_of(pb) {
                admitted = self.ssd.admit_page(admitted);
            }
            if end >= page_end {
                durable = durable.max(self.program_page(admitted + link, in_dram, q));
            }
            pos = end.min(page_end);
        }
        let s = &mut self.ssd;
        let mut done = (admitted + link).max(in_dram);
        if fua {
            s.counters.fua_writes += 1;
            if s.volatile_cache {
                if !end.is_multiple_of(pb) {
                    // Nothing else is coming for this page now: padded and programmed (its
                    // rest, when written, is programmed again: a simplification).
                    durable = durable.max(self.program_page(admitted + link, in_dram, end / pb));
                }
                done = done.max(durable);
            }
            done += self.ssd.flush_ns;
        }
        done
    }

    /// Programs zone page `q` (data at `data_at`, in DRAM at `in_dram`) on its pool; it holds a
    /// buffer slot until done.
    fn program_page(&mut self, data_at: u64, in_dram: u64, q: u64) -> u64 {
        let pool = (q % self.pools) as u32;
        let pib = ((q / self.pools) % self.pages_per_block) as u32;
        let tp = self.ssd.program_ns.of(pib);
        let end = self.ssd.program(data_at.max(in_dram), pool, tp);
        self.ssd.buf_release.push(Reverse(end));
        self.stats.media_write_bytes += self.page_bytes;
        end
    }

    /// Reads `len_bytes` at `offset_bytes` (any zones): pages below a zone's data are read from
    /// flash (or the buffer, for the page still open), the rest are zeros without a flash read.
    pub fn read(&mut self, now_ns: u64, offset_bytes: u64, len_bytes: u64) -> u64 {
        self.check_range(offset_bytes, len_bytes);
        self.ssd.advance(now_ns);
        let t = self.ssd.enter(now_ns);
        self.ssd.counters.reads += 1;
        let pb = self.page_bytes;
        let mut ready = t;
        let (mut pos, end) = (offset_bytes, offset_bytes + len_bytes);
        while pos < end {
            let (z, rel) = self.zone_of(pos);
            let zone_end = (z as u64 + 1) * self.cfg.zone_size_bytes;
            let piece_end = end.min(zone_end);
            let data = self.zones[z].data_bytes;
            let open_page = (!data.is_multiple_of(pb)).then_some(data / pb);
            let mut r = rel;
            let r_end = rel + (piece_end - pos);
            while r < r_end.min(data) {
                let q = r / pb;
                let hi = r_end.min(data).min((q + 1) * pb);
                let bytes = hi - r;
                let e = if Some(q) == open_page && self.zones[z].wp_bytes == data {
                    self.ssd.counters.read_buffer_hits += 1;
                    self.ssd.dram(t, bytes)
                } else {
                    let pool = (q % self.pools) as u32;
                    let pib = ((q / self.pools) % self.pages_per_block) as u32;
                    let tr = self.ssd.read_ns.of(pib);
                    self.ssd.flash_read(t, pool, tr, bytes, true)
                };
                ready = ready.max(e);
                r = hi;
            }
            pos = piece_end;
        }
        let done = ready + xfer_ns(len_bytes, self.ssd.link_read_bytes_per_s);
        self.ssd.end_command(Op::Read, done)
    }

    /// Zone Reset of every zone in `offset_bytes..+len_bytes` (whole zones): the blocks written
    /// are erased on their dies; completes when the last erase ends.
    pub fn reset(&mut self, now_ns: u64, offset_bytes: u64, len_bytes: u64) -> ZoneDone {
        let zs = self.cfg.zone_size_bytes;
        if len_bytes == 0
            || !offset_bytes.is_multiple_of(zs)
            || !len_bytes.is_multiple_of(zs)
            || offset_bytes + len_bytes > self.logical_bytes()
        {
            return self.fail(now_ns, ZoneError::NotZoneAligned);
        }
        self.ssd.advance(now_ns);
        let t = self.ssd.enter(now_ns);
        let mut done = t;
        let first = (offset_bytes / zs) as usize;
        for z in first..first + (len_bytes / zs) as usize {
            done = done.max(self.reset_one(t, z));
        }
        ZoneDone {
            done_ns: done,
            result: Ok(0),
        }
    }

    fn reset_one(&mut self, t: u64, z: usize) -> u64 {
        let pages = self.zones[z].data_bytes.div_ceil(self.page_bytes);
        let mut done = t;
        for pool in 0..self.pools {
            // Pages of this pool among the zone's first `pages`, then its blocks holding them.
            let on_pool = (pages + self.pools - 1 - pool) / self.pools;
            let blocks = on_pool.div_ceil(self.pages_per_block) as u32;
            if blocks == 0 {
                continue;
            }
            let w = GcWork {
                pool: pool as u32,
                erases: blocks,
                ..GcWork::default()
            };
            self.ssd.schedule_gc(t, &w, ReadWaitCause::Programs);
            let u = self.ssd.unit_of(pool as u32) as usize;
            done = done.max(self.ssd.die(u).free);
            self.stats.blocks_erased += u64::from(blocks);
        }
        self.set_state(z, ZoneState::Empty);
        let zone = &mut self.zones[z];
        zone.wp_bytes = 0;
        zone.data_bytes = 0;
        zone.resets += 1;
        self.stats.zone_resets += 1;
        done
    }

    /// Zone Finish of the zone starting at `zone_start_bytes`: its open page padded and
    /// programmed, the zone full (its unwritten rest reads zeros).
    pub fn finish(&mut self, now_ns: u64, zone_start_bytes: u64) -> ZoneDone {
        let (z, rel) = self.zone_of(zone_start_bytes);
        if rel != 0 || z >= self.zones.len() {
            return self.fail(now_ns, ZoneError::NotZoneAligned);
        }
        self.ssd.advance(now_ns);
        let t = self.ssd.enter(now_ns);
        let mut done = t;
        let data = self.zones[z].data_bytes;
        if self.zones[z].state != ZoneState::Full && !data.is_multiple_of(self.page_bytes) {
            done = self.program_page(t, 0, data / self.page_bytes);
        }
        if self.zones[z].state != ZoneState::Full {
            self.zones[z].wp_bytes = self.cfg.zone_capacity_bytes;
            self.set_state(z, ZoneState::Full);
            self.stats.zone_finishes += 1;
        }
        ZoneDone {
            done_ns: done,
            result: Ok(0),
        }
    }

    /// Zone Open (explicit) of the zone starting at `zone_start_bytes`.
    pub fn open_zone(&mut self, now_ns: u64, zone_start_bytes: u64) -> ZoneDone {
        let (z, rel) = self.zone_of(zone_start_bytes);
        if rel != 0 || z >= self.zones.len() {
            return self.fail(now_ns, ZoneError::NotZoneAligned);
        }
        if let Err(e) = self.open(z, true) {
            return self.fail(now_ns, e);
        }
        self.ssd.advance(now_ns);
        ZoneDone {
            done_ns: self.ssd.enter(now_ns),
            result: Ok(0),
        }
    }

    /// Zone Close of an open zone: it stays active (closed), its resources freed for another.
    pub fn close_zone(&mut self, now_ns: u64, zone_start_bytes: u64) -> ZoneDone {
        let (z, rel) = self.zone_of(zone_start_bytes);
        if rel != 0 || z >= self.zones.len() {
            return self.fail(now_ns, ZoneError::NotZoneAligned);
        }
        if self.zones[z].state.is_open() {
            let to = if self.zones[z].wp_bytes == 0 {
                ZoneState::Empty
            } else {
                ZoneState::Closed
            };
            self.set_state(z, to);
        }
        self.ssd.advance(now_ns);
        ZoneDone {
            done_ns: self.ssd.enter(now_ns),
            result: Ok(0),
        }
    }

    /// Flush: as the conventional device's (its FTL holds no open page, so only programs in
    /// flight and `durability.flush_ns` count).
    pub fn flush(&mut self, now_ns: u64) -> u64 {
        self.ssd.flush(now_ns)
    }

    /// A command the zoned device does not take (TRIM, PLM windows, GC now): refused at the
    /// controller's time.
    pub fn unsupported(&mut self, now_ns: u64) -> ZoneDone {
        self.fail(now_ns, ZoneError::Unsupported)
    }

    /// How long the device stays busy after `now_ns` (any die).
    pub fn busy_remaining_ns(&self, now_ns: u64) -> u64 {
        self.ssd.busy_remaining_ns(now_ns)
    }
}
