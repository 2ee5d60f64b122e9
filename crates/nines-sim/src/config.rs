//! What a simulation is given ([`SimConfig`]) and the devices it prepares ([`prepare`]): scaled to
//! the memory budget and preconditioned.

use std::io;

use nines_array::LayoutSpec;
use nines_core::job::JobSpec;
use nines_core::workload::{WorkloadError, WorkloadSpec};
use nines_flash::{DeviceConfig, FlashError, Precondition, Ssd, ZonedSsd};

use crate::host::HostConfig;
use crate::member::SimMember;
/// The logical block, model memory per device and default budget: the member seam's, shared
/// with the real driver's emulated devices.
pub use nines_member::{DEVICE_MODEL_BYTES_MAX, LOGICAL_BLOCK_BYTES, MEMORY_BUDGET_BYTES};

/// Most devices one simulation drives.
pub const DEVICES_MAX: u32 = 1000;
/// Default most requests of a replayed trace in flight per target.
pub const TRACE_DEPTH_DEFAULT: u32 = 1024;

/// How devices are presented to the workload: the volume layer's layout description.
pub type Layout = LayoutSpec;

#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The full-scale description (a preset or a user's file).
    pub device: DeviceConfig,
    /// How the user named it: a preset name or a path.
    pub device_label: String,
    /// `Some(size)`: zero-latency members of that size instead of the model (`--device null:SIZE`).
    pub null_device_bytes: Option<u64>,
    pub devices: u32,
    pub layout: Layout,
    /// Blocks-per-plane scale in (0, 1]; None: the largest that fits the memory budget.
    pub scale: Option<f64>,
    /// None: steady state when the workload writes, a sequential fill otherwise.
    pub precondition: Option<Precondition>,
    pub host: HostConfig,
    /// The run's workload; with `jobs` empty it is the one job, named "job0"; otherwise the
    /// jobs replace it (its runtime and ramp are the run's).
    pub workload: WorkloadSpec,
    pub jobs: Vec<JobSpec>,
    pub percentiles: Vec<f64>,
    pub memory_budget_bytes: u64,
    /// Most requests of a replayed trace in flight per target.
    pub trace_depth: u32,
    /// Deliver the member completions of a volume I/O together at the last one when the volume
    /// allows it ([`nines_array::Volume::folds_completions`]): the same results, fewer events.
    pub fold_completions: bool,
}

impl SimConfig {
    /// A configuration with the defaults for everything but the device, count and workload.
    pub fn new(device: DeviceConfig, devices: u32, workload: WorkloadSpec) -> SimConfig {
        SimConfig {
            device_label: device.name.clone(),
            device,
            null_device_bytes: None,
            devices,
            layout: Layout::Independent,
            scale: None,
            precondition: None,
            host: HostConfig::default(),
            workload,
            jobs: Vec::new(),
            percentiles: nines_core::units::DEFAULT_PERCENTILES.to_vec(),
            memory_budget_bytes: MEMORY_BUDGET_BYTES,
            trace_depth: TRACE_DEPTH_DEFAULT,
            fold_completions: true,
        }
    }

    /// The jobs that run: the given ones, or the workload as one job.
    pub fn effective_jobs(&self) -> Vec<JobSpec> {
        if self.jobs.is_empty() {
            vec![JobSpec {
                name: "job0".into(),
                workload: self.workload.clone(),
            }]
        } else {
            self.jobs.clone()
        }
    }

    /// Members simulated: the devices, then the layout's extra members (a write buffer's).
    pub fn members(&self) -> u32 {
        self.devices + self.layout.extra_members()
    }

    /// The name devices are reported under.
    pub fn device_name(&self) -> &str {
        if self.null_device_bytes.is_some() {
            "null"
        } else {
            &self.device.name
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Flash(#[from] FlashError),
    #[error("invalid workload for the simulated devices: {0}")]
    Workload(#[from] WorkloadError),
    #[error("{0}")]
    Job(#[from] nines_core::job::JobError),
    #[error("{0}")]
    Array(#[from] nines_array::ArrayError),
    #[error("{0}")]
    Config(String),
    #[error("per-I/O log: {0}; check that its disk has room and is writable")]
    LatLog(io::Error),
    #[error("interval log: {0}; check that its disk has room and is writable")]
    HdrLog(io::Error),
}

/// Devices scaled, preconditioned and ready to run.
pub struct Prepared {
    pub cfg: SimConfig,
    /// The description actually simulated (after scaling).
    pub scaled: DeviceConfig,
    pub scale: f64,
    pub precondition: Precondition,
    pub members: Vec<SimMember>,
    /// Bytes of model state that exist (maps shared by devices that have not written count once).
    pub model_bytes_per_device: u64,
    /// How the host's APST policy programmed the description's power states (empty: it has
    /// no power state descriptors).
    pub power_notes: Vec<String>,
}

impl Prepared {
    /// Targets the workload sees: one per volume.
    pub fn targets(&self) -> u32 {
        self.cfg.layout.group(self.cfg.members()).len() as u32
    }

    /// Puts every member model in its deepest idle power state (a replay that starts with the
    /// devices asleep: `nines sim --trace-start asleep`), so each one's first command pays that
    /// state's exit. False, changing nothing, when the members have no power states (or are
    /// null devices).
    pub fn sleep_members(&mut self) -> bool {
        let mut all = !self.members.is_empty();
        for m in &mut self.members {
            all &= match m {
                SimMember::Model(ssd) => ssd.sleep(),
                SimMember::Null { .. } | SimMember::Zoned(_) => false,
            };
        }
        if !all {
            for m in &mut self.members {
                if let SimMember::Model(ssd) = m {
                    ssd.wake();
                }
            }
        }
        all
    }

    /// Size of each member device.
    pub fn device_size_bytes(&self) -> u64 {
        self.members[0].size_bytes()
    }

    /// Size of each target.
    pub fn target_size_bytes(&self) -> u64 {
        let dev = self.device_size_bytes();
        self.cfg.layout.uniform_size_bytes(dev, self.cfg.devices)
    }

    /// The SSD models (empty for null devices).
    pub fn ssds(&self) -> impl Iterator<Item = &Ssd> {
        self.members.iter().filter_map(SimMember::ssd)
    }
}

/// Scale and precondition the devices. Preconditioning runs once on one device (mapping and GC
/// only, no timing) and the result is shared by all devices until each first writes.
pub fn prepare(cfg: &SimConfig, writes: bool) -> Result<Prepared, SimError> {
    let never = std::sync::atomic::AtomicBool::new(false);
    prepare_until(cfg, writes, &never).map(|p| p.expect("a preparation nobody stops"))
}

/// [`prepare`], giving None as soon as `stop` is set (preconditioning looks at it every few
/// thousand units it writes, and between devices): a SIGINT must not wait minutes for it.
pub fn prepare_until(
    cfg: &SimConfig,
    writes: bool,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<Option<Prepared>, SimError> {
    use std::sync::atomic::Ordering;
    if cfg.devices == 0 || cfg.devices > DEVICES_MAX {
        return Err(SimError::Config(format!(
            "--devices {} is out of range; give 1 to {DEVICES_MAX}",
            cfg.devices
        )));
    }
    if let Layout::Raid0 { stripe_bytes } = *cfg.layout.base()
        && (stripe_bytes == 0 || !stripe_bytes.is_multiple_of(LOGICAL_BLOCK_BYTES as u64))
    {
        return Err(SimError::Config(format!(
            "--stripe {stripe_bytes} must be a positive multiple of {LOGICAL_BLOCK_BYTES} bytes"
        )));
    }
    if let Some(size) = cfg.null_device_bytes {
        if size < u64::from(LOGICAL_BLOCK_BYTES) || !size.is_multiple_of(LOGICAL_BLOCK_BYTES as u64)
        {
            return Err(SimError::Config(format!(
                "--device null:{size}: give a size that is a positive multiple of {LOGICAL_BLOCK_BYTES} bytes, e.g. null:1g"
            )));
        }
        let prepared = Prepared {
            cfg: cfg.clone(),
            scaled: cfg.device.clone(),
            scale: 1.0,
            precondition: Precondition::None,
            members: (0..cfg.members())
                .map(|_| SimMember::Null { size_bytes: size })
                .collect(),
            model_bytes_per_device: 0,
            power_notes: Vec::new(),
        };
        check_volume_size(&prepared)?;
        return Ok(Some(prepared));
    }
    // Devices that write each own a copy of the maps; read-only runs share one.
    let copies = if writes { cfg.devices as u64 } else { 1 };
    // What every device allocates for itself whatever the scale (its write buffer's pages):
    // taken from the budget first, so that a huge buffer is refused instead of aborting.
    let own_bytes = cfg
        .device
        .device_state_bytes()
        .saturating_mul(u64::from(cfg.members()));
    if own_bytes > cfg.memory_budget_bytes {
        return Err(SimError::Config(format!(
            "{} of {} need {} MiB for their write buffers alone (buffer.write_buffer_bytes = {}, \
             {} pages each); the budget (--memory-budget) is {} MiB: use a smaller write buffer, \
             fewer devices or a larger budget",
            devices_phrase(cfg.devices),
            cfg.device_label,
            own_bytes >> 20,
            cfg.device.buffer.write_buffer_bytes,
            cfg.device.buffer_pages(),
            cfg.memory_budget_bytes >> 20
        )));
    }
    let maps_budget_bytes = cfg.memory_budget_bytes - own_bytes;
    let per_device = DEVICE_MODEL_BYTES_MAX.min(maps_budget_bytes / copies);
    let want = match cfg.scale {
        Some(s) => s,
        None => cfg.device.scale_for_budget(per_device),
    };
    let mut scaled = cfg.device.scaled(want)?;
    // The host's APST policy programs a description's power state descriptors.
    let power_notes = crate::apst::program(&mut scaled, &cfg.host.apst);
    let model = scaled.model_bytes();
    if model.saturating_mul(copies) > maps_budget_bytes {
        return Err(SimError::Config(format!(
            "{} of {} need {} MiB of model state at scale {:.5}; the budget \
             (--memory-budget) is {} MiB: use fewer devices, a smaller --scale, a read-only \
             workload or a larger budget",
            devices_phrase(cfg.devices),
            cfg.device_label,
            model.saturating_mul(copies).saturating_add(own_bytes) >> 20,
            scaled.geometry.blocks_per_plane as f64 / cfg.device.geometry.blocks_per_plane as f64,
            cfg.memory_budget_bytes >> 20
        )));
    }
    let scale =
        scaled.geometry.blocks_per_plane as f64 / cfg.device.geometry.blocks_per_plane as f64;
    if let Some(z) = &scaled.zoned {
        return prepare_zoned(cfg, scaled.clone(), z.clone(), scale, model).map(|mut p| {
            p.power_notes = power_notes;
            Some(p)
        });
    }
    let precondition = cfg.precondition.unwrap_or(if writes {
        Precondition::Steady
    } else {
        Precondition::Fill
    });
    let seed = cfg.workload.seed;
    let mut first = Ssd::new(&scaled, seed);
    if !first.precondition_until(precondition, seed ^ 0x9e37_79b9_7f4a_7c15, stop) {
        return Ok(None);
    }
    let shared = first.shared_ftl();
    let mut members = Vec::with_capacity(cfg.devices as usize);
    for i in 0..cfg.devices {
        let dev_seed = seed
            .wrapping_mul(0x2545_f491_4f6c_dd1d)
            .wrapping_add(i as u64 + 1);
        let mut ssd = Ssd::with_ftl(&scaled, shared.clone(), dev_seed);
        ssd.share_tables_from(&first);
        if stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if writes && i > 0 {
            // Each writing device needs its own maps: copy them now, as part of preparation,
            // rather than on the first write in the middle of the timed loop.
            ssd.ftl_mut();
        }
        members.push(SimMember::Model(ssd));
    }
    drop(first);
    let mut cfg = cfg.clone();
    if let Some(b) = cfg.layout.shaping_mut().and_then(|s| s.buffer.as_mut()) {
        // The write buffer's device: its own model, fresh (an empty buffer), scaled like the
        // others; its buckets default to the NAND drive's erase unit (one block on every die).
        let bcfg = DeviceConfig::load(&b.device)?;
        let mut bscaled = bcfg.scaled(bcfg.scale_for_budget(per_device))?;
        crate::apst::program(&mut bscaled, &cfg.host.apst);
        members.push(SimMember::Model(Ssd::new(&bscaled, seed ^ 0xb0ff)));
        let g = &scaled.geometry;
        let erase_unit =
            scaled.dies() * u64::from(g.pages_per_block) * u64::from(g.page_size_bytes);
        b.bucket_bytes.get_or_insert(erase_unit);
    }
    let prepared = Prepared {
        cfg,
        scaled,
        scale,
        precondition,
        members,
        model_bytes_per_device: model,
        power_notes,
    };
    check_volume_size(&prepared)?;
    Ok(Some(prepared))
}

/// The layout under any shaping, to fill in what the members are.
/// Zoned members (a description with a `[zoned]` section): factory fresh (every zone empty,
/// nothing to precondition: a zoned device holds no data it did not take), only under the
/// serial layout, which is told their zone geometry.
fn prepare_zoned(
    cfg: &SimConfig,
    scaled: DeviceConfig,
    zoned: nines_flash::ZonedConfig,
    scale: f64,
    model: u64,
) -> Result<Prepared, SimError> {
    let mut cfg = cfg.clone();
    if cfg.layout.shaping().is_some_and(|s| s.buffer.is_some()) {
        return Err(SimError::Config(format!(
            "--buffer with zoned members ({}): the buffer's flushes write in place; drop --buffer",
            cfg.device_label
        )));
    }
    cfg.layout
        .resolve_zones(Some((zoned.zone_size_bytes, zoned.zone_capacity_bytes)))
        .map_err(|e| SimError::Config(format!("{} is {e}", cfg.device_label)))?;
    if matches!(cfg.precondition, Some(p) if p != Precondition::None) {
        return Err(SimError::Config(format!(
            "{} is zoned: its zones start empty and cannot be preconditioned; drop --precondition \
             (or give none)",
            cfg.device_label
        )));
    }
    let seed = cfg.workload.seed;
    let mut members = Vec::with_capacity(cfg.devices as usize);
    for i in 0..cfg.devices {
        let dev_seed = seed
            .wrapping_mul(0x2545_f491_4f6c_dd1d)
            .wrapping_add(i as u64 + 1);
        members.push(SimMember::Zoned(Box::new(ZonedSsd::new(
            &scaled, dev_seed,
        )?)));
    }
    let prepared = Prepared {
        cfg,
        scaled,
        scale,
        precondition: Precondition::None,
        members,
        model_bytes_per_device: model,
        power_notes: Vec::new(),
    };
    check_volume_size(&prepared)?;
    Ok(prepared)
}

/// "1 device", "3 devices".
fn devices_phrase(n: u32) -> String {
    format!("{n} device{}", if n == 1 { "" } else { "s" })
}

/// A volume whose stripe (or chunk, or segment) is larger than a member holds nothing: say so,
/// instead of letting the workload blame its --offset against an empty target.
fn check_volume_size(prep: &Prepared) -> Result<(), SimError> {
    let layout = &prep.cfg.layout;
    if prep.target_size_bytes() > 0 {
        return Ok(());
    }
    if matches!(layout.base(), Layout::Independent) {
        // A device description whose capacity, scaled, is less than one mapping unit.
        return Err(SimError::Config(format!(
            "the simulated device holds no data: capacity_bytes {} of the device description is \
             {} bytes at this scale, less than one mapping unit; give a larger capacity_bytes \
             (or --scale 1)",
            prep.cfg
                .device
                .capacity_bytes
                .map_or("(unset)".to_string(), |c| c.to_string()),
            prep.device_size_bytes()
        )));
    }
    let (option, unit_bytes) = match *layout.base() {
        Layout::Raid0 { stripe_bytes } => ("--stripe", stripe_bytes),
        Layout::Raid5 { chunk_bytes, .. } => ("--chunk", chunk_bytes),
        Layout::Serial(ref s) => ("--segment", s.segment_bytes),
        _ => ("--stripe", 0),
    };
    Err(SimError::Config(format!(
        "the {} volume holds no data: {option} {unit_bytes} bytes is larger than each device \
         ({} bytes); give a smaller {option}",
        layout.name(),
        prep.device_size_bytes()
    )))
}
