//! Emulated SSDs in real time (`emu:PRESET[:SIZE]`, issue 12): the simulator's timed model
//! (nines-flash, driven exactly as `nines sim` drives a member, through
//! [`nines_member::SimMember`], below both drivers) run against the real clock, with real data.
//!
//! - Each command is sent to the model at the current real time (nanoseconds since the
//!   device's first command, so model time 0 is its first I/O, as in the simulator) and completes
//!   when the real clock reaches the model's completion time. The worker keeps the pending
//!   completions in a bounded heap and waits for the earliest (sleep, then spin) without blocking
//!   its other devices (docs/arch-emu.md).
//! - Data is kept: a sparse store of the written 4 KiB blocks, bounded by the memory budget;
//!   unwritten blocks read as zeros; TRIM and write-zeroes free blocks.
//! - The emulation's own overhead (the time an I/O was seen complete minus the model's
//!   completion time) is recorded per device.
//!
//! An emulated device is opened once (`open`, with the budget of all of them together) and lent
//! to the one worker whose volume holds it for a run ([`EmuHandle::lease`]); the lease gives it
//! back when dropped, so the caller reads its counters after the run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hdrhistogram::Histogram;
use nines_array::{CmdOp, CmdResult, MemberCmd};
use nines_core::units::parse_size_bytes;
use nines_flash::{DeviceConfig, Precondition, Ssd};
use nines_member::SimMember;

/// The logical block of an emulated device (the simulator's): offsets and sizes are multiples.
pub const BLOCK_BYTES: u32 = nines_member::LOGICAL_BLOCK_BYTES;
/// Default budget for all emulated devices of a process together (models and data).
pub const MEMORY_BUDGET_BYTES: u64 = nines_member::MEMORY_BUDGET_BYTES;
/// Blocks of data allocated at once when the store grows (1 MiB).
const CHUNK_BLOCKS: usize = 256;
/// An index entry for a block never written (or trimmed).
const NONE: u32 = u32::MAX;

/// Why an emulated device cannot be opened; one line each, saying what to do.
#[derive(Debug, thiserror::Error)]
pub enum EmuError {
    #[error("{spec}: give emu:PRESET or emu:PRESET:SIZE, e.g. emu:afa-m2-2018:4g")]
    Syntax { spec: String },
    #[error("{spec}: {error}")]
    Device {
        spec: String,
        error: nines_flash::FlashError,
    },
    #[error(
        "{spec}: {size_bytes} bytes is larger than {preset}'s capacity of {full_bytes} bytes; give a smaller SIZE"
    )]
    TooLarge {
        spec: String,
        preset: String,
        size_bytes: u64,
        full_bytes: u64,
    },
    #[error(
        "{spec}: needs {need_mib} MiB ({model_mib} MiB of model state, {index_mib} MiB of block index, {data_mib} MiB for the data the workload may write) but only {left_mib} MiB of --memory-budget {budget_mib} MiB is left; give a smaller SIZE, a smaller --size region, fewer emulated devices or a larger --memory-budget"
    )]
    Budget {
        spec: String,
        need_mib: u64,
        model_mib: u64,
        index_mib: u64,
        data_mib: u64,
        left_mib: u64,
        budget_mib: u64,
    },
}

/// `emu:PRESET[:SIZE]` as written on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmuSpec {
    /// A preset name or a device TOML file.
    pub preset: String,
    /// The capacity asked for; None: the simulator's default scale.
    pub size_bytes: Option<u64>,
}

impl EmuSpec {
    /// None when `s` does not start with `emu:` (it is a file or device path); otherwise the
    /// parsed spec or why it is malformed. The last `:` part is a size when it parses as one,
    /// so a TOML path may hold colons.
    pub fn parse(s: &str) -> Option<Result<EmuSpec, EmuError>> {
        let rest = s.strip_prefix("emu:")?;
        let syntax = || EmuError::Syntax {
            spec: s.to_string(),
        };
        if rest.is_empty() {
            return Some(Err(syntax()));
        }
        if let Some((preset, size)) = rest.rsplit_once(':')
            && let Ok(bytes) = parse_size_bytes(size)
        {
            if preset.is_empty() || bytes == 0 {
                return Some(Err(syntax()));
            }
            return Some(Ok(EmuSpec {
                preset: preset.to_string(),
                size_bytes: Some(bytes),
            }));
        }
        Some(Ok(EmuSpec {
            preset: rest.to_string(),
            size_bytes: None,
        }))
    }
}

/// What every emulated device of a process shares: the memory budget, the preconditioning and
/// the seed (the workload's, as in the simulator). Cheap to clone.
#[derive(Clone, Debug)]
pub struct EmuContext {
    inner: Arc<ContextInner>,
}

#[derive(Debug)]
struct ContextInner {
    budget_bytes: u64,
    used_bytes: AtomicU64,
    /// Devices opened so far: the next one's index (its model seed, as the simulator's i).
    opened: AtomicU64,
    precondition: Option<Precondition>,
    seed: u64,
}

impl Default for EmuContext {
    fn default() -> Self {
        EmuContext::new(MEMORY_BUDGET_BYTES, None, 1)
    }
}

impl EmuContext {
    /// `precondition` None: auto (steady when the workload writes, fill when it only reads).
    pub fn new(budget_bytes: u64, precondition: Option<Precondition>, seed: u64) -> EmuContext {
        EmuContext {
            inner: Arc::new(ContextInner {
                budget_bytes,
                used_bytes: AtomicU64::new(0),
                opened: AtomicU64::new(0),
                precondition,
                seed,
            }),
        }
    }

    pub fn budget_bytes(&self) -> u64 {
        self.inner.budget_bytes
    }

    /// Bytes charged to the budget by the devices opened so far.
    pub fn used_bytes(&self) -> u64 {
        self.inner.used_bytes.load(Ordering::Relaxed)
    }

    /// Builds, scales and preconditions the device `spec` names. `writes`: the workload writes;
    /// `data_bytes_max`: the most bytes it may write (the whole device when None), charged to
    /// the budget with the model so a run never finds the budget exhausted half-way.
    pub fn open(
        &self,
        text: &str,
        spec: &EmuSpec,
        writes: bool,
        data_bytes_max: Option<u64>,
    ) -> Result<EmuHandle, EmuError> {
        let device_err = |error| EmuError::Device {
            spec: text.to_string(),
            error,
        };
        let full = DeviceConfig::load(&spec.preset).map_err(device_err)?;
        let scaled = match spec.size_bytes {
            None => full
                .scaled(full.scale_for_budget(
                    nines_member::DEVICE_MODEL_BYTES_MAX.min(self.inner.budget_bytes),
                ))
                .map_err(device_err)?,
            Some(size) => scaled_to(&full, size).map_err(|e| match e {
                Scale::TooLarge => EmuError::TooLarge {
                    spec: text.to_string(),
                    preset: full.name.clone(),
                    size_bytes: size,
                    full_bytes: full.logical_bytes(),
                },
                Scale::Flash(error) => device_err(error),
            })?,
        };
        // SIZE is exported exactly (to the block); the model may be larger when the smallest
        // scale at which its GC still works holds more (the rest holds preconditioned data the
        // workload never touches, as a region of a real device would).
        // A zoned description exports every zone (its FTL's capacity does not apply).
        let model_logical_bytes = match &scaled.zoned {
            Some(z) => u64::from(z.zones(&scaled)) * z.zone_size_bytes,
            None => scaled.logical_bytes(),
        };
        let size_bytes = spec
            .size_bytes
            .unwrap_or(model_logical_bytes)
            .min(model_logical_bytes)
            / u64::from(BLOCK_BYTES)
            * u64::from(BLOCK_BYTES);
        if size_bytes == 0 {
            return Err(EmuError::Syntax {
                spec: text.to_string(),
            });
        }
        let blocks = size_bytes / u64::from(BLOCK_BYTES);
        // The maps, and what the device allocates for itself (its write buffer's pages).
        let model_bytes = scaled
            .model_bytes()
            .saturating_add(scaled.device_state_bytes());
        let index_bytes = blocks * 4;
        let data_bytes = if writes {
            data_bytes_max.unwrap_or(size_bytes).min(size_bytes)
        } else {
            0
        };
        let need = model_bytes
            .saturating_add(index_bytes)
            .saturating_add(data_bytes);
        let budget = self.inner.budget_bytes;
        let charged =
            self.inner
                .used_bytes
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                    used.checked_add(need).filter(|&t| t <= budget)
                });
        if let Err(used) = charged {
            let mib = |b: u64| b.div_ceil(1 << 20);
            return Err(EmuError::Budget {
                spec: text.to_string(),
                need_mib: mib(need),
                model_mib: mib(model_bytes),
                index_mib: mib(index_bytes),
                data_mib: mib(data_bytes),
                left_mib: budget.saturating_sub(used) >> 20,
                budget_mib: budget >> 20,
            });
        }
        // A zoned device starts with every zone empty: nothing to precondition.
        let precondition = if scaled.zoned.is_some() {
            Precondition::None
        } else {
            self.inner.precondition.unwrap_or(if writes {
                Precondition::Steady
            } else {
                Precondition::Fill
            })
        };
        // Seeds as the simulator's device i of a run with this workload seed.
        let seed = self.inner.seed;
        let i = self.inner.opened.fetch_add(1, Ordering::Relaxed);
        let dev_seed = seed.wrapping_mul(0x2545_f491_4f6c_dd1d).wrapping_add(i + 1);
        let member = if scaled.zoned.is_some() {
            SimMember::Zoned(Box::new(
                nines_flash::ZonedSsd::new(&scaled, dev_seed).map_err(device_err)?,
            ))
        } else {
            let mut first = Ssd::new(&scaled, seed);
            first.precondition(precondition, seed ^ 0x9e37_79b9_7f4a_7c15);
            let mut ssd = Ssd::with_ftl(&scaled, first.shared_ftl(), dev_seed);
            drop(first);
            // Its own maps now (the first write would copy them in the timed loop otherwise).
            ssd.ftl_mut();
            SimMember::Model(ssd)
        };
        let zone = scaled
            .zoned
            .as_ref()
            .map(|z| (z.zone_size_bytes, z.zone_capacity_bytes));
        let scale = scaled.geometry.blocks_per_plane as f64 / full.geometry.blocks_per_plane as f64;
        let fdp_handles = member.fdp_handles();
        let dev = EmuDevice {
            member,
            origin_ns: None,
            last_at_ns: 0,
            store: Store::new(blocks, data_bytes / u64::from(BLOCK_BYTES)),
            overhead_ns: nines_core::stats::new_latency_histogram(),
            controls: 0,
        };
        Ok(EmuHandle {
            info: Arc::new(EmuInfo {
                spec: text.to_string(),
                preset: full.name.clone(),
                scale,
                blocks_per_plane: scaled.geometry.blocks_per_plane,
                precondition: precondition.name(),
                size_bytes,
                model_logical_bytes,
                charged_bytes: need,
                zone,
                fdp_handles,
            }),
            slot: Arc::new(Mutex::new(Some(Box::new(dev)))),
        })
    }
}

enum Scale {
    TooLarge,
    Flash(nines_flash::FlashError),
}

/// The smallest scale of `full` whose capacity is at least `size_bytes` (blocks per plane is
/// whole, so the capacity is rounded up to the next step).
fn scaled_to(full: &DeviceConfig, size_bytes: u64) -> Result<DeviceConfig, Scale> {
    let full_bytes = full.logical_bytes();
    if size_bytes > full_bytes {
        return Err(Scale::TooLarge);
    }
    let bpp = full.geometry.blocks_per_plane;
    let mut want = ((size_bytes as f64 / full_bytes as f64) * f64::from(bpp)).floor() as u32;
    want = want.clamp(1, bpp);
    loop {
        let c = full
            .scaled(f64::from(want) / f64::from(bpp))
            .map_err(Scale::Flash)?;
        if c.logical_bytes() >= size_bytes || want >= bpp {
            return Ok(c);
        }
        // The clamp in `scaled` may already have gone past `want`.
        want = (want + 1).max(c.geometry.blocks_per_plane + 1).min(bpp);
    }
}

/// What the report says about an emulated device.
#[derive(Clone, Debug)]
pub struct EmuInfo {
    /// As named on the command line.
    pub spec: String,
    /// The device description's name.
    pub preset: String,
    /// Blocks-per-plane scale of the model (the simulator's `--scale`).
    pub scale: f64,
    pub blocks_per_plane: u32,
    pub precondition: String,
    /// Bytes exported (SIZE, or the model's capacity).
    pub size_bytes: u64,
    /// The model's capacity (at least `size_bytes`).
    pub model_logical_bytes: u64,
    /// Bytes of the memory budget it holds.
    pub charged_bytes: u64,
    /// A zoned description's (zone size, zone capacity); None: conventional.
    pub zone: Option<(u64, u64)>,
    /// FDP reclaim unit handles placed writes may name (0: the model has no FDP).
    pub fdp_handles: u32,
}

/// An opened emulated device: its description and the device itself, lent to a worker per run.
#[derive(Clone, Debug)]
pub struct EmuHandle {
    info: Arc<EmuInfo>,
    slot: Arc<Mutex<Option<Box<EmuDevice>>>>,
}

/// The emulation's own overhead, measured over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EmuOverhead {
    pub count: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p9999_ns: u64,
    pub max_ns: u64,
}

impl EmuHandle {
    pub fn info(&self) -> &EmuInfo {
        &self.info
    }

    /// Takes the device for a run; None while another run holds it.
    pub(crate) fn lease(&self) -> Option<EmuLease> {
        let dev = self.slot.lock().ok()?.take()?;
        Some(EmuLease {
            dev: Some(dev),
            slot: Arc::clone(&self.slot),
        })
    }

    /// Runs `f` on the device when no run holds it.
    pub fn with_device<R>(&self, f: impl FnOnce(&mut EmuDevice) -> R) -> Option<R> {
        let mut g = self.slot.lock().ok()?;
        g.as_deref_mut().map(f)
    }

    /// The overhead measured since the device was opened (or last reset).
    pub fn overhead(&self) -> EmuOverhead {
        self.with_device(|d| d.overhead()).unwrap_or_default()
    }
}

/// A device lent to a worker; given back when dropped.
pub(crate) struct EmuLease {
    dev: Option<Box<EmuDevice>>,
    slot: Arc<Mutex<Option<Box<EmuDevice>>>>,
}

impl std::ops::Deref for EmuLease {
    type Target = EmuDevice;
    fn deref(&self) -> &EmuDevice {
        self.dev.as_deref().expect("held until dropped")
    }
}

impl std::ops::DerefMut for EmuLease {
    fn deref_mut(&mut self) -> &mut EmuDevice {
        self.dev.as_deref_mut().expect("held until dropped")
    }
}

impl Drop for EmuLease {
    fn drop(&mut self) {
        if let (Some(d), Ok(mut g)) = (self.dev.take(), self.slot.lock()) {
            *g = Some(d);
        }
    }
}

/// The model, its data and its overhead record.
pub struct EmuDevice {
    member: SimMember,
    /// CLOCK_MONOTONIC at model time 0 (the first command).
    origin_ns: Option<u64>,
    /// The model's last command time: commands reach it in non-decreasing time.
    last_at_ns: u64,
    store: Store,
    overhead_ns: Histogram<u64>,
    /// Device-control commands (PLM windows, GC now, busy queries) the model answered.
    controls: u64,
}

impl std::fmt::Debug for EmuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmuDevice")
            .field("origin_ns", &self.origin_ns)
            .field("stored_blocks", &self.store.stored_blocks())
            .finish()
    }
}

impl EmuDevice {
    pub fn size_bytes(&self) -> u64 {
        self.store.blocks * u64::from(BLOCK_BYTES)
    }

    /// The model (its counters, FTL statistics).
    pub fn ssd(&self) -> Option<&Ssd> {
        self.member.ssd()
    }

    /// Device-control commands the model answered.
    pub fn controls(&self) -> u64 {
        self.controls
    }

    /// Blocks of data held.
    pub fn stored_blocks(&self) -> u64 {
        self.store.stored_blocks()
    }

    /// Whether the block at `offset_bytes` holds data (was written and not trimmed since), and
    /// how many bytes from there, at most `len_bytes`, are alike: block status of an emulated
    /// member (unwritten blocks read as zeros). Never past the device; at least one byte when
    /// `offset_bytes` is inside it.
    pub fn written_run(&self, offset_bytes: u64, len_bytes: u64) -> (bool, u64) {
        let b = u64::from(BLOCK_BYTES);
        let end = offset_bytes
            .saturating_add(len_bytes)
            .min(self.size_bytes());
        if offset_bytes >= end {
            return (false, 0);
        }
        let first = (offset_bytes / b) as usize;
        let last = end.div_ceil(b) as usize;
        let index = &self.store.index[first..last];
        let written = index[0] != NONE;
        let run = index
            .iter()
            .take_while(|&&slot| (slot != NONE) == written)
            .count() as u64;
        let run_end = ((first as u64 + run) * b).min(end);
        (written, run_end - offset_bytes)
    }

    /// Sends `cmd` at real time `now_ns` (CLOCK_MONOTONIC): the model decides when it completes
    /// (returned, in CLOCK_MONOTONIC ns) and how; its data moves now (`buf`: the command's
    /// buffer of `len_bytes`, valid for this call; null for commands without data). The caller
    /// must not report it complete before the returned time.
    #[inline]
    pub(crate) fn send(&mut self, now_ns: u64, cmd: &MemberCmd, buf: *mut u8) -> (u64, CmdResult) {
        let origin = *self.origin_ns.get_or_insert(now_ns);
        let at = now_ns.saturating_sub(origin).max(self.last_at_ns);
        self.last_at_ns = at;
        let end = cmd.offset_bytes.checked_add(u64::from(cmd.len_bytes));
        if end.is_none_or(|e| e > self.size_bytes()) {
            return (now_ns, CmdResult::Err(libc::EINVAL));
        }
        let len = cmd.len_bytes as usize;
        if self.member.zone_bytes() > 0 {
            return self.send_zoned(origin, at, cmd, buf);
        }
        // A placed write the model refuses (no FDP, or not one of its handles: EINVAL below)
        // moves no data, as a refused command on a device changes nothing.
        let refused = matches!(cmd.op, CmdOp::PlacedWrite { handle }
            if u32::from(handle) >= self.member.fdp_handles());
        match cmd.op {
            CmdOp::PlacedWrite { .. } if refused => {}
            CmdOp::Write | CmdOp::PlacedWrite { .. } => {
                // SAFETY: the caller hands a buffer of len_bytes, valid for this call.
                let data = unsafe { std::slice::from_raw_parts(buf, len) };
                if let Err(errno) = self.store.write(cmd.offset_bytes, data) {
                    return (now_ns, CmdResult::Err(errno));
                }
            }
            CmdOp::Read | CmdOp::FastFailRead { .. } => {
                // SAFETY: as above; the engine contract leaves the buffer to the device.
                let data = unsafe { std::slice::from_raw_parts_mut(buf, len) };
                self.store.read(cmd.offset_bytes, data);
            }
            CmdOp::Trim | CmdOp::WriteZeroes => {
                if let Err(errno) = self.store.zero(cmd.offset_bytes, len as u64) {
                    return (now_ns, CmdResult::Err(errno));
                }
            }
            CmdOp::Control(_) => self.controls += 1,
            CmdOp::Flush => {}
            // A conventional model refuses zone commands (EOPNOTSUPP): no data moves.
            CmdOp::ZoneAppend | CmdOp::ZoneReset | CmdOp::ZoneFinish => {}
        }
        let out = self.member.send(at, cmd);
        (origin + out.done_ns, out.result)
    }

    /// [`EmuDevice::send`] to a zoned model: the model decides first (a write off its write
    /// pointer moves no data; an append's data goes where the model put it; a reset zeroes
    /// its zones), then the data moves.
    #[cold]
    fn send_zoned(
        &mut self,
        origin: u64,
        at: u64,
        cmd: &MemberCmd,
        buf: *mut u8,
    ) -> (u64, CmdResult) {
        let len = cmd.len_bytes as usize;
        if matches!(cmd.op, CmdOp::Control(_)) {
            self.controls += 1;
        }
        let out = self.member.send(at, cmd);
        let stored = match (cmd.op, out.result) {
            (CmdOp::Write, CmdResult::Ok) => {
                // SAFETY: the caller hands a buffer of len_bytes, valid for this call.
                let data = unsafe { std::slice::from_raw_parts(buf, len) };
                self.store.write(cmd.offset_bytes, data)
            }
            (CmdOp::ZoneAppend, CmdResult::Appended { offset_bytes }) => {
                // SAFETY: as above.
                let data = unsafe { std::slice::from_raw_parts(buf, len) };
                self.store.write(offset_bytes, data)
            }
            (CmdOp::WriteZeroes | CmdOp::ZoneReset, CmdResult::Ok) => {
                self.store.zero(cmd.offset_bytes, len as u64)
            }
            (CmdOp::Read | CmdOp::FastFailRead { .. }, _) => {
                // SAFETY: as above; the engine contract leaves the buffer to the device.
                let data = unsafe { std::slice::from_raw_parts_mut(buf, len) };
                self.store.read(cmd.offset_bytes, data);
                Ok(())
            }
            _ => Ok(()),
        };
        match stored {
            Ok(()) => (origin + out.done_ns, out.result),
            Err(errno) => (origin + out.done_ns, CmdResult::Err(errno)),
        }
    }

    /// An I/O that completed at `done_ns` (as `send` returned) was seen complete at `seen_ns`.
    #[inline]
    pub fn record_overhead(&mut self, done_ns: u64, seen_ns: u64) {
        let _ = self
            .overhead_ns
            .record(seen_ns.saturating_sub(done_ns).max(1));
    }

    pub fn overhead(&self) -> EmuOverhead {
        let h = &self.overhead_ns;
        if h.is_empty() {
            return EmuOverhead::default();
        }
        EmuOverhead {
            count: h.len(),
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
            p9999_ns: h.value_at_quantile(0.9999),
            max_ns: h.max(),
        }
    }

    pub fn reset_overhead(&mut self) {
        self.overhead_ns.reset();
    }
}

/// Written blocks: a flat index (block -> slot) over slots in 1 MiB chunks; freed slots are
/// reused first. Bounded by `slots_max` blocks (the budget's share for data).
struct Store {
    blocks: u64,
    index: Vec<u32>,
    chunks: Vec<Box<[u8]>>,
    free: Vec<u32>,
    /// Slots handed out from the chunks so far.
    next: u32,
    slots_max: u64,
}

impl Store {
    fn new(blocks: u64, slots_max: u64) -> Store {
        let chunks_max = (slots_max as usize).div_ceil(CHUNK_BLOCKS);
        Store {
            blocks,
            index: vec![NONE; blocks as usize],
            chunks: Vec::with_capacity(chunks_max),
            free: Vec::with_capacity(slots_max.min(1 << 20) as usize),
            next: 0,
            slots_max,
        }
    }

    fn stored_blocks(&self) -> u64 {
        u64::from(self.next) - self.free.len() as u64
    }

    fn block(&self, slot: u32) -> &[u8] {
        let b = BLOCK_BYTES as usize;
        let (c, i) = (slot as usize / CHUNK_BLOCKS, slot as usize % CHUNK_BLOCKS);
        &self.chunks[c][i * b..(i + 1) * b]
    }

    fn block_mut(&mut self, slot: u32) -> &mut [u8] {
        let b = BLOCK_BYTES as usize;
        let (c, i) = (slot as usize / CHUNK_BLOCKS, slot as usize % CHUNK_BLOCKS);
        &mut self.chunks[c][i * b..(i + 1) * b]
    }

    /// A slot for a block about to be written (zeroed when it is new to the block).
    fn alloc(&mut self) -> Result<u32, i32> {
        if let Some(s) = self.free.pop() {
            self.block_mut(s).fill(0);
            return Ok(s);
        }
        if u64::from(self.next) >= self.slots_max {
            return Err(libc::ENOSPC);
        }
        let s = self.next;
        if s as usize / CHUNK_BLOCKS == self.chunks.len() {
            // Growth: a new chunk (zeroed by the allocator), rare and bounded by the budget.
            self.chunks
                .push(vec![0u8; CHUNK_BLOCKS * BLOCK_BYTES as usize].into_boxed_slice());
        }
        self.next += 1;
        Ok(s)
    }

    /// Pieces of `offset..offset+len` per block: (block, offset in block, length).
    fn pieces(offset: u64, len: u64) -> impl Iterator<Item = (u64, usize, usize)> {
        let b = u64::from(BLOCK_BYTES);
        let end = offset + len;
        let mut pos = offset;
        std::iter::from_fn(move || {
            if pos >= end {
                return None;
            }
            let blk = pos / b;
            let within = (pos % b) as usize;
            let n = ((b - within as u64).min(end - pos)) as usize;
            pos += n as u64;
            Some((blk, within, n))
        })
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), i32> {
        let mut done = 0usize;
        for (blk, within, n) in Store::pieces(offset, data.len() as u64) {
            let mut slot = self.index[blk as usize];
            if slot == NONE {
                slot = self.alloc()?;
                self.index[blk as usize] = slot;
            }
            self.block_mut(slot)[within..within + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        Ok(())
    }

    fn read(&self, offset: u64, data: &mut [u8]) {
        let mut done = 0usize;
        for (blk, within, n) in Store::pieces(offset, data.len() as u64) {
            let slot = self.index[blk as usize];
            let out = &mut data[done..done + n];
            if slot == NONE {
                out.fill(0);
            } else {
                out.copy_from_slice(&self.block(slot)[within..within + n]);
            }
            done += n;
        }
    }

    /// Zeros a range: whole blocks are freed, parts of blocks zeroed in place.
    fn zero(&mut self, offset: u64, len: u64) -> Result<(), i32> {
        for (blk, within, n) in Store::pieces(offset, len) {
            let slot = self.index[blk as usize];
            if slot == NONE {
                continue;
            }
            if n == BLOCK_BYTES as usize {
                self.index[blk as usize] = NONE;
                if self.free.len() == self.free.capacity() {
                    // Keep the free list bounded: the slot stays zeroed and mapped instead.
                    self.index[blk as usize] = slot;
                    self.block_mut(slot).fill(0);
                } else {
                    self.free.push(slot);
                }
            } else {
                self.block_mut(slot)[within..within + n].fill(0);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nines_array::BufRef;

    fn cmd(op: CmdOp, offset_bytes: u64, len_bytes: u32) -> MemberCmd {
        MemberCmd {
            id: 0,
            member: 0,
            op,
            offset_bytes,
            len_bytes,
            buf: BufRef::None,
            fua: false,
        }
    }

    #[test]
    fn specs_parse() {
        assert!(EmuSpec::parse("/dev/zram0").is_none());
        assert_eq!(
            EmuSpec::parse("emu:afa-m2-2018:4g").unwrap().unwrap(),
            EmuSpec {
                preset: "afa-m2-2018".into(),
                size_bytes: Some(4 << 30)
            }
        );
        assert_eq!(
            EmuSpec::parse("emu:z-ssd").unwrap().unwrap(),
            EmuSpec {
                preset: "z-ssd".into(),
                size_bytes: None
            }
        );
        assert_eq!(
            EmuSpec::parse("emu:/tmp/a:b/dev.toml").unwrap().unwrap(),
            EmuSpec {
                preset: "/tmp/a:b/dev.toml".into(),
                size_bytes: None
            }
        );
        assert!(EmuSpec::parse("emu:").unwrap().is_err());
        assert!(EmuSpec::parse("emu::4g").unwrap().is_err());
        assert!(EmuSpec::parse("emu:p:0").unwrap().is_err());
    }

    proptest::proptest! {
        /// Any text: not emu (no prefix), or a spec whose preset is non-empty and whose size,
        /// when given, is what the size parser reads from the last part; errors are one line.
        #[test]
        fn spec_parser_total(s in "(emu:)?[a-z0-9:./-]{0,20}") {
            match EmuSpec::parse(&s) {
                None => proptest::prop_assert!(!s.starts_with("emu:")),
                Some(Ok(spec)) => {
                    proptest::prop_assert!(!spec.preset.is_empty());
                    match spec.size_bytes {
                        Some(b) => {
                            let tail = s.rsplit_once(':').unwrap().1;
                            proptest::prop_assert_eq!(parse_size_bytes(tail).ok(), Some(b));
                            proptest::prop_assert_eq!(format!("emu:{}:{}", spec.preset, tail), s.clone());
                        }
                        None => proptest::prop_assert_eq!(format!("emu:{}", spec.preset), s.clone()),
                    }
                }
                Some(Err(e)) => {
                    let m = e.to_string();
                    proptest::prop_assert!(!m.contains('\n'));
                    proptest::prop_assert!(m.starts_with(&s));
                }
            }
        }
    }

    #[test]
    fn sizes_round_up_to_a_whole_step_and_refuse_too_large() {
        let ctx = EmuContext::new(1 << 30, Some(Precondition::None), 7);
        let spec = EmuSpec::parse("emu:afa-m2-2018:1g").unwrap().unwrap();
        let h = ctx.open("emu:afa-m2-2018:1g", &spec, false, None).unwrap();
        assert_eq!(h.info().size_bytes, 1 << 30, "SIZE is exported exactly");
        assert!(h.info().model_logical_bytes >= 1 << 30);
        assert!(h.info().scale > 0.0 && h.info().scale < 1.0);
        let big = EmuSpec::parse("emu:afa-m2-2018:1000t").unwrap().unwrap();
        let e = ctx.open("x", &big, false, None).unwrap_err();
        assert!(e.to_string().contains("larger than"), "{e}");
    }

    #[test]
    fn the_budget_refuses_what_would_not_fit() {
        let ctx = EmuContext::new(128 << 20, Some(Precondition::None), 7);
        let spec = EmuSpec::parse("emu:afa-m2-2018:1g").unwrap().unwrap();
        // Read-only: model and index only.
        let h = ctx.open("a", &spec, false, None).unwrap();
        let used = ctx.used_bytes();
        assert_eq!(used, h.info().charged_bytes);
        // Writing the whole gigabyte cannot fit in 128 MiB (two models of ~38 MiB do).
        let e = ctx.open("b", &spec, true, None).unwrap_err();
        let m = e.to_string();
        assert!(m.contains("--memory-budget 128 MiB"), "{m}");
        assert_eq!(ctx.used_bytes(), used, "a refusal charges nothing");
        // A 16 MiB region does.
        ctx.open("c", &spec, true, Some(16 << 20)).unwrap();
    }

    /// A placed write the model refuses (a handle the FDP device does not have, or any handle
    /// on a conventional device) answers EINVAL and stores nothing; a valid one stores.
    #[test]
    fn a_refused_placed_write_changes_no_data() {
        let ctx = EmuContext::new(1 << 30, Some(Precondition::None), 7);
        let mut w: Vec<u8> = (0..4096u32).map(|i| (i * 5 + 3) as u8).collect();
        let mut rbuf = vec![0xffu8; 4096];
        for (preset, handle, ok) in [
            ("afa-m2-2018-fdp", 8u16, false),
            ("afa-m2-2018", 1, false),
            ("afa-m2-2018-fdp", 7, true),
        ] {
            let name = format!("emu:{preset}:1g");
            let spec = EmuSpec::parse(&name).unwrap().unwrap();
            let h = ctx.open(&name, &spec, true, Some(1 << 20)).unwrap();
            let mut lease = h.lease().unwrap();
            let t0 = crate::clock::now_ns();
            let (done, r) = lease.send(
                t0,
                &cmd(CmdOp::PlacedWrite { handle }, 8192, 4096),
                w.as_mut_ptr(),
            );
            lease.send(done, &cmd(CmdOp::Read, 8192, 4096), rbuf.as_mut_ptr());
            if ok {
                assert_eq!(r, CmdResult::Ok, "{preset} handle {handle}");
                assert_eq!(lease.stored_blocks(), 1);
                assert_eq!(rbuf, w);
            } else {
                assert_eq!(r, CmdResult::Err(libc::EINVAL), "{preset} handle {handle}");
                assert_eq!(lease.stored_blocks(), 0, "{preset}: nothing stored");
                assert!(
                    rbuf.iter().all(|&b| b == 0),
                    "{preset}: reads the old zeros"
                );
            }
        }
    }

    #[test]
    fn data_round_trips_unwritten_is_zero_and_trim_frees() {
        let ctx = EmuContext::new(1 << 30, Some(Precondition::None), 7);
        let spec = EmuSpec::parse("emu:afa-m2-2018:1g").unwrap().unwrap();
        let h = ctx.open("d", &spec, true, Some(1 << 20)).unwrap();
        let mut lease = h.lease().unwrap();
        assert!(h.lease().is_none(), "one run at a time");
        let mut w: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 1) as u8).collect();
        let t0 = crate::clock::now_ns();
        let (done, r) = lease.send(t0, &cmd(CmdOp::Write, 4096, 8192), w.as_mut_ptr());
        assert_eq!(r, CmdResult::Ok);
        assert!(done > t0, "a write takes time in the model");
        let mut rbuf = vec![0xffu8; 16384];
        let (done2, r) = lease.send(done, &cmd(CmdOp::Read, 0, 16384), rbuf.as_mut_ptr());
        assert_eq!(r, CmdResult::Ok);
        assert!(done2 > done);
        assert!(rbuf[..4096].iter().all(|&b| b == 0));
        assert_eq!(&rbuf[4096..12288], &w[..]);
        assert!(rbuf[12288..].iter().all(|&b| b == 0));
        assert_eq!(lease.stored_blocks(), 2);
        lease.send(done2, &cmd(CmdOp::Trim, 4096, 4096), std::ptr::null_mut());
        assert_eq!(lease.stored_blocks(), 1);
        lease.send(done2, &cmd(CmdOp::Read, 4096, 8192), rbuf.as_mut_ptr());
        assert!(rbuf[..4096].iter().all(|&b| b == 0));
        assert_eq!(&rbuf[4096..8192], &w[4096..]);
        // The budget's share for data is 1 MiB: the 257th block is refused.
        let mut big = vec![1u8; 1 << 20];
        let (_, r) = lease.send(
            done2,
            &cmd(CmdOp::Write, 1 << 20, 1 << 20),
            big.as_mut_ptr(),
        );
        assert_eq!(r, CmdResult::Err(libc::ENOSPC));
        // Beyond the end.
        let (_, r) = lease.send(done2, &cmd(CmdOp::Read, 1 << 30, 4096), rbuf.as_mut_ptr());
        assert_eq!(r, CmdResult::Err(libc::EINVAL));
        drop(lease);
        assert!(h.lease().is_some(), "given back when the lease ends");
    }

    /// A zoned description behind `emu:`: appends land where the model puts them, a write off
    /// the write pointer moves no data, a reset zeroes its zone.
    #[test]
    fn zoned_emu_appends_resets_and_refuses_off_the_pointer() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../nines-flash/presets/zn540.toml"
        ))
        .unwrap();
        text = text
            .replace("pages_per_block = 1077", "pages_per_block = 8")
            .replace("blocks_per_plane = 1844", "blocks_per_plane = 8")
            .replace("over_provisioning = 0.07", "over_provisioning = 0.5")
            .replace(
                "zone_size_bytes = 2_147_483_648",
                "zone_size_bytes = 16_777_216",
            )
            .replace(
                "zone_capacity_bytes = 1_129_316_352",
                "zone_capacity_bytes = 8_388_608",
            );
        let path = dir.path().join("z.toml");
        std::fs::write(&path, text).unwrap();
        let name = format!("emu:{}", path.display());
        let ctx = EmuContext::new(1 << 30, None, 7);
        let spec = EmuSpec::parse(&name).unwrap().unwrap();
        let h = ctx.open(&name, &spec, true, Some(1 << 20)).unwrap();
        assert_eq!(h.info().zone, Some((16 << 20, 8 << 20)));
        assert_eq!(h.info().size_bytes, 16 * (16 << 20));
        assert_eq!(h.info().precondition, "none");
        let mut lease = h.lease().unwrap();
        let zone1 = 16u64 << 20;
        let mut a: Vec<u8> = (0..8192u32).map(|i| (i * 3 + 5) as u8).collect();
        let t0 = crate::clock::now_ns();
        let (d1, r) = lease.send(t0, &cmd(CmdOp::ZoneAppend, zone1, 8192), a.as_mut_ptr());
        assert_eq!(
            r,
            CmdResult::Appended {
                offset_bytes: zone1
            }
        );
        let (d2, r) = lease.send(d1, &cmd(CmdOp::ZoneAppend, zone1, 4096), a.as_mut_ptr());
        assert_eq!(
            r,
            CmdResult::Appended {
                offset_bytes: zone1 + 8192
            }
        );
        // Off the write pointer: refused, nothing stored.
        let (_, r) = lease.send(d2, &cmd(CmdOp::Write, zone1, 4096), a.as_mut_ptr());
        assert_eq!(r, CmdResult::Err(libc::EINVAL));
        let mut rbuf = vec![0xffu8; 12288];
        lease.send(d2, &cmd(CmdOp::Read, zone1, 12288), rbuf.as_mut_ptr());
        assert_eq!(&rbuf[..8192], &a[..]);
        assert_eq!(&rbuf[8192..], &a[..4096]);
        let (d3, r) = lease.send(
            d2,
            &cmd(CmdOp::ZoneReset, zone1, 16 << 20),
            std::ptr::null_mut(),
        );
        assert_eq!(r, CmdResult::Ok);
        assert!(d3 >= d2 + 5_000_000, "a reset erases on the dies");
        lease.send(d3, &cmd(CmdOp::Read, zone1, 12288), rbuf.as_mut_ptr());
        assert!(rbuf.iter().all(|&b| b == 0));
        assert_eq!(lease.stored_blocks(), 0);
    }
}
