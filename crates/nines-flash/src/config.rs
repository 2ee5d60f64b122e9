//! Device descriptions: the TOML schema, the shipped presets, validation and the scale knob.
//!
//! A description is plain data. [`DeviceConfig::validate`] checks every rule the model relies on
//! and names the field and the rule when one is broken, so a user's own TOML file gets one clear
//! line instead of a panic deep in the FTL.

use serde::{Deserialize, Serialize};

use crate::FlashError;

/// The presets shipped with nines, embedded at build time. Each file documents where its
/// numbers come from.
pub const PRESETS: [(&str, &str); 12] = [
    ("afa-m2-2018", include_str!("../presets/afa-m2-2018.toml")),
    ("intel-750", include_str!("../presets/intel-750.toml")),
    ("z-ssd", include_str!("../presets/z-ssd.toml")),
    (
        "mqsim-default",
        include_str!("../presets/mqsim-default.toml"),
    ),
    (
        "mqsim-compatible",
        include_str!("../presets/mqsim-compatible.toml"),
    ),
    (
        "ttflash-fast17",
        include_str!("../presets/ttflash-fast17.toml"),
    ),
    ("p4600", include_str!("../presets/p4600.toml")),
    ("femu-ioda", include_str!("../presets/femu-ioda.toml")),
    ("client-nvme", include_str!("../presets/client-nvme.toml")),
    ("zn540", include_str!("../presets/zn540.toml")),
    (
        "afa-m2-2018-fdp",
        include_str!("../presets/afa-m2-2018-fdp.toml"),
    ),
    ("p4600-fdp", include_str!("../presets/p4600-fdp.toml")),
];

/// A preset name with this suffix is the preset with [`DeviceConfig::ideal`] applied.
pub const IDEAL_SUFFIX: &str = "-ideal";

/// The names of the shipped presets, in a stable order.
pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|(n, _)| *n).collect()
}

/// A complete SSD description, as written in a preset or a user's TOML file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// What kind of device this is (`nines sim --list-devices`): e.g. "enterprise NVMe",
    /// "client NVMe", "emulator", "simulator".
    #[serde(default)]
    pub class: String,
    /// The advertised capacity; the geometry after over-provisioning must hold it. When absent
    /// the exported capacity is the geometry minus over-provisioning.
    #[serde(default)]
    pub capacity_bytes: Option<u64>,
    pub geometry: Geometry,
    pub timing: Timing,
    pub ftl: FtlConfig,
    pub controller: Controller,
    #[serde(default)]
    pub buffer: BufferConfig,
    #[serde(default)]
    pub suspend: SuspendConfig,
    #[serde(default)]
    pub housekeeping: Housekeeping,
    #[serde(default)]
    pub slow_io: SlowIo,
    #[serde(default)]
    pub read_retry: ReadRetry,
    #[serde(default)]
    pub mapping: MappingCache,
    #[serde(default)]
    pub power: Power,
    #[serde(default)]
    pub durability: Durability,
    #[serde(default)]
    pub firmware_jitter: FirmwareJitter,
    /// A zoned namespace (NVMe ZNS): sequential zones, no device GC (`crate::zoned`). Absent:
    /// a conventional device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zoned: Option<crate::zoned::ZonedConfig>,
    /// The host completion mode (`interrupt`, `polled` or `none`) that `nines sim --calibrate`
    /// fitted this description with: its latencies hold under that host model only, so a run
    /// that names no `--completion` uses it. Absent in presets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fitted_completion: Option<String>,
    /// NVMe Flexible Data Placement (TP4146). Absent: a conventional device (docs/arch-fdp.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fdp: Option<FdpConfig>,
}

/// The most reclaim unit handles a description may give (the FTL keeps per-handle counters
/// inline, and a unit's handle in one byte).
pub const FDP_HANDLES_MAX: u32 = 16;

/// `[fdp]`: the device's Flexible Data Placement configuration (NVMe TP4146, FDP
/// Configurations log page). In the model a reclaim unit is one block on every block pool (a
/// superblock), each reclaim unit handle has its own open block per pool, and a write tagged
/// with placement handle `h` goes to `h`'s; untagged writes use handle 0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FdpConfig {
    /// Reclaim groups (NRG). The model has one (every die in it), as QEMU's and FEMU's FDP
    /// devices; any other value is refused.
    #[serde(default = "one_u32")]
    pub reclaim_groups: u32,
    /// Reclaim unit handles (NRUH): how many lifetimes the host can keep apart.
    pub handles: u32,
    /// Reclaim unit size (RUNS). When given it must be the model's reclaim unit, one block on
    /// every pool (pools x pages_per_block x page_size_bytes); a check that the description
    /// says what the model does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_unit_bytes: Option<u64>,
    /// Reclaim unit handle type (RUHT): `initially` isolated (GC may mix the handles' valid
    /// data in one shared GC frontier per pool) or `persistently` isolated (a victim written
    /// through handle `h` is moved into a GC frontier of `h`).
    #[serde(default)]
    pub isolation: Isolation,
}

fn one_u32() -> u32 {
    1
}

/// TP4146's reclaim unit handle types.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// Initially isolated: handles' data meet in GC.
    #[default]
    Initially,
    /// Persistently isolated: GC keeps each handle's data apart.
    Persistently,
}

impl Isolation {
    pub fn name(self) -> &'static str {
        match self {
            Isolation::Initially => "initially",
            Isolation::Persistently => "persistently",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Geometry {
    pub channels: u32,
    pub chips_per_channel: u32,
    pub dies_per_chip: u32,
    /// Planes set how many blocks a die holds; multi-plane operations are folded into the
    /// effective per-page program time unless `multi_plane` is set.
    pub planes_per_die: u32,
    pub blocks_per_plane: u32,
    pub pages_per_block: u32,
    pub page_size_bytes: u32,
    /// The FTL's mapping unit; several units are packed into one flash page. A write that
    /// covers part of a unit already written first reads the unit (read-modify-write).
    #[serde(default = "default_map_unit_bytes")]
    pub map_unit_bytes: u32,
    /// What executes one flash command at a time: every die on its own (the default), or a
    /// whole chip (its dies take turns, as in MQSim).
    #[serde(default)]
    pub parallel_unit: ParallelUnit,
    /// Multi-plane programs (MQSim's TSU): a host page program joins one already queued on the
    /// same die (not yet started when its data is ready) for another plane at the same page
    /// index in its block; the two take one tPROG after both transfers. Needs
    /// `ftl.block_pool = "plane"` (a pool per plane). Off: one program per command.
    #[serde(default)]
    pub multi_plane: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParallelUnit {
    #[default]
    Die,
    Chip,
}

fn default_map_unit_bytes() -> u32 {
    4096
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timing {
    /// tR: array read time of one page.
    pub read_ns: u64,
    /// tPROG: program time of one page.
    pub program_ns: u64,
    /// tBERS: erase time of one block.
    pub erase_ns: u64,
    /// Optional per page type (page index in block modulo the list length, e.g. LSB/MSB);
    /// replaces `read_ns` when given.
    #[serde(default)]
    pub read_ns_by_page_type: Vec<u64>,
    /// Optional per page type; replaces `program_ns` when given.
    #[serde(default)]
    pub program_ns_by_page_type: Vec<u64>,
    /// Flash channel (bus) transfer rate.
    pub channel_bytes_per_s: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FtlConfig {
    /// Spare share of the physical flash, in [0, 1): 0.07 = 7%.
    pub over_provisioning: f64,
    /// Below this share of free blocks in a die, GC runs whenever the die is idle.
    pub gc_soft_threshold: f64,
    /// Below this share of free blocks in a die, GC runs before the next host page, whatever
    /// else the die has queued.
    pub gc_hard_threshold: f64,
    /// Where host pages go: round robin over the block pools (the default: dynamic
    /// allocation), fixed by logical address (MQSim's static CWDP allocation: unit `u` in pool
    /// `u mod pools`, pools numbered channel first, then chip, die, plane), or `idle-first`:
    /// each host frontier in rounds that give every pool one page, a page opening taking the
    /// pool of the round whose die has the fewest other frontiers' pages open, then is free
    /// first (the controller places a page where it can program it soon; see
    /// `Ftl::write_unit_placed_by`).
    #[serde(default)]
    pub allocation: Allocation,
    /// Free blocks, GC and host frontiers are kept per die (the default) or per plane (MQSim).
    #[serde(default)]
    pub block_pool: BlockPool,
    /// GC victim choice: the block with the fewest valid units (greedy, the default), or the
    /// best of `gc_candidates` blocks drawn at random (MQSim's RGA, the d-choices policy of Van
    /// Houdt, SIGMETRICS 2013).
    #[serde(default)]
    pub gc_victim: GcVictim,
    /// Candidates drawn by `d-choices`; 0 = log2(blocks per pool), as MQSim.
    #[serde(default)]
    pub gc_candidates: u32,
    /// GC moves pages inside the die (copy-back, the default) or over the channel to the
    /// controller and back (MQSim's default `Use_Copyback_for_GC = false`).
    #[serde(default = "default_true")]
    pub gc_copyback: bool,
    /// A read of a unit never written maps it to a newly allocated page of its pool, which is
    /// never programmed (MQSim's `online_create_entry_for_reads` on a device not preconditioned):
    /// the pool's write frontier moves on a page, and a later partial write of the unit reads
    /// it first. Needs `geometry.map_unit_bytes` = the page size. Off: such a read changes
    /// nothing.
    #[serde(default)]
    pub reads_map_unwritten: bool,
    /// How GC shares a die with host reads and writes (see [`GcMode`]); `preempt` by default.
    #[serde(default)]
    pub gc_mode: GcMode,
    /// `gc_mode = "foreground"`: victim blocks GC reclaims, with the host write that found its
    /// pool at the hard threshold waiting, each time that happens (at least 1).
    #[serde(default)]
    pub gc_batch_blocks: u32,
}

/// How garbage collection shares a die with host commands.
///
/// - `preempt` (the default, nines' model since its first version): a read arriving while GC
///   copies pages on its die (or is queued there) goes in at the next page-copy boundary, and
///   so does a host page program; writes never wait for GC except through the write buffer.
/// - `suspend`: a read suspends GC's program or erase in progress and goes at once; GC resumes
///   after it, `suspend.resume_overhead_ns` later (program/erase suspend: Wu and He, "Reducing
///   SSD read latency via NAND flash program and erase suspension", FAST 2012; ONFI 4.x
///   suspend commands).
/// - `blocking`: a die collecting a victim is held for the whole victim, its valid-page copies
///   and its erase; a read behind it waits until the erase ends (FEMU's `do_gc`,
///   hw/femu/bbssd/ftl.c: `gc_read_page`/`gc_write_page` for every valid page and the erase
///   each advance the LUN's `next_lun_avail_time`, which a host read then waits for).
/// - `foreground`: `blocking`, and when a host write finds its pool at the hard threshold
///   (`ftl.gc_hard_threshold`) it waits while GC reclaims up to `ftl.gc_batch_blocks` victims
///   there and on every other pool short of the soft threshold, the dies in parallel:
///   the write cliff of consumer and older enterprise drives, whose firmware collects garbage
///   in the write path once the free pool is spent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GcMode {
    #[default]
    Preempt,
    Suspend,
    Blocking,
    Foreground,
}

impl GcMode {
    /// Whether a read behind GC waits for the whole episode.
    pub fn blocks_reads(self) -> bool {
        matches!(self, GcMode::Blocking | GcMode::Foreground)
    }

    pub fn name(self) -> &'static str {
        match self {
            GcMode::Preempt => "preempt",
            GcMode::Suspend => "suspend",
            GcMode::Blocking => "blocking",
            GcMode::Foreground => "foreground",
        }
    }
}

fn default_true() -> bool {
    true
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Allocation {
    #[default]
    RoundRobin,
    Static,
    IdleFirst,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BlockPool {
    #[default]
    Die,
    Plane,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GcVictim {
    #[default]
    Greedy,
    DChoices,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Controller {
    /// Latency the controller adds to every command (firmware, DMA setup, completion posting).
    pub overhead_ns: u64,
    /// Controller occupancy per command (serial): caps the command rate at 1e9/command_ns.
    /// 0 = unlimited.
    #[serde(default)]
    pub command_ns: u64,
    /// Host interface data rate towards the host (reads).
    pub read_bytes_per_s: u64,
    /// Host interface data rate towards the device (writes).
    pub write_bytes_per_s: u64,
    /// Reads go ahead of programs and erases queued on their die but not started (MQSim's
    /// PRIORITY_OUT_OF_ORDER scheduling); they still wait for the operation in progress.
    #[serde(default)]
    pub read_priority: bool,
    /// Each die (or chip) keeps its reservations as a timeline with gaps instead of a
    /// first-come-first-served queue: a flash operation goes in the earliest gap at or after
    /// its ready time that holds it, so a read due later (after its translation read on
    /// another die, say) does not hold back one that can run now (MQSim's chips serve what is
    /// ready; nines reserves a command's flash work when it is submitted). With
    /// `read_priority`, a read also takes the place of programs and erases not started when it
    /// is ready, which move back. At most 64 reservations per die; when full, the two with the
    /// smallest gap between them merge. Not with `suspend.enabled`.
    #[serde(default)]
    pub die_gaps: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferConfig {
    /// DRAM write buffer; writes complete once buffered. At least two flash pages.
    #[serde(default = "default_write_buffer_bytes")]
    pub write_buffer_bytes: u64,
    /// The buffer DRAM's data rate: data written into the buffer (and reads served from it)
    /// take turns at this rate, plus `dram_access_ns` each. 0 = no limit (the default).
    #[serde(default)]
    pub dram_bytes_per_s: u64,
    #[serde(default)]
    pub dram_access_ns: u64,
    /// The write buffer counts the 512-byte sectors each write brings into a mapping unit
    /// (rounded up), not whole pages: a write is admitted while fewer than
    /// `write_buffer_bytes / 512` sectors wait for their programs, so a 4 KiB write into an
    /// 8 KiB unit holds half what a whole page would (MQSim's `back_pressure_buffer_depth`,
    /// which counts each write-back transaction's sectors). Off: whole pages.
    #[serde(default)]
    pub count_sectors: bool,
}

fn default_write_buffer_bytes() -> u64 {
    16 << 20
}

impl Default for BufferConfig {
    fn default() -> Self {
        BufferConfig {
            write_buffer_bytes: default_write_buffer_bytes(),
            dram_bytes_per_s: 0,
            dram_access_ns: 0,
            count_sectors: false,
        }
    }
}

/// Read retry: a page read whose data has too many errors for ECC is read again with shifted
/// reference voltages (Park et al., "Reducing Solid-State Drive Read Latency by Optimizing
/// Read-Retry", ASPLOS 2021: common in modern 3D NAND, one or more extra steps each costing
/// about a tR). Off by default.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadRetry {
    /// Share of page reads that need retry steps.
    #[serde(default)]
    pub probability: f64,
    /// Extra read steps such a read takes (each the page's tR plus `step_overhead_ns`).
    #[serde(default)]
    pub steps: u32,
    #[serde(default)]
    pub step_overhead_ns: u64,
}

/// The mapping table's DRAM cache (DFTL: Gupta et al., ASPLOS 2009; MQSim's CMT). A unit whose
/// entry is not cached costs a flash read of its translation page first; evicting a changed
/// entry writes its translation page back (read, merge, program). Off (`cache_bytes = 0`, the
/// whole map in DRAM, as enterprise SSDs with 1 GB of DRAM per TB) by default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MappingCache {
    #[serde(default)]
    pub cache_bytes: u64,
    /// DRAM bytes per cached entry (MQSim: (2 log2(physical pages) + sectors per page) / 8).
    #[serde(default = "default_entry_bytes")]
    pub entry_bytes: u32,
    /// Flash bytes per entry in a translation page (MQSim: (log2(physical pages) + sectors per
    /// page) / 8): a translation page holds page_size / this many entries.
    #[serde(default = "default_directory_entry_bytes")]
    pub flash_entry_bytes: u32,
    /// Bytes a translation read moves over the channel (MQSim: one 512-byte sector).
    #[serde(default = "default_translation_read_bytes")]
    pub translation_read_bytes: u32,
    /// A write whose entry is not cached reads its translation page first (DFTL, the default).
    /// `false`: the new entry is only inserted, and the page is read when it is written back
    /// (MQSim: a write miss reserves a CMT slot and issues no flash read).
    #[serde(default = "default_true")]
    pub write_miss_reads: bool,
    /// A write-back of a translation page programs it (the default). `false`: the write-back
    /// only reads the page's unchanged entries; its program takes no flash time (MQSim @ 7ec40e3:
    /// both of its TSUs queue translation writes in `MappingWriteTRQueue` and never serve that
    /// queue, so they never reach a chip). For comparison with MQSim only.
    #[serde(default = "default_true")]
    pub writeback_programs: bool,
    /// A miss whose translation page is already being read waits for that read instead of
    /// reading it again (MQSim: `ArrivingMappingEntries` in `request_mapping_entry`). Off: every
    /// miss reads the page.
    #[serde(default)]
    pub shared_reads: bool,
}

fn default_entry_bytes() -> u32 {
    8
}
fn default_directory_entry_bytes() -> u32 {
    4
}
fn default_translation_read_bytes() -> u32 {
    512
}

impl Default for MappingCache {
    fn default() -> Self {
        MappingCache {
            cache_bytes: 0,
            entry_bytes: default_entry_bytes(),
            flash_entry_bytes: default_directory_entry_bytes(),
            translation_read_bytes: default_translation_read_bytes(),
            write_miss_reads: true,
            writeback_programs: true,
            shared_reads: false,
        }
    }
}

/// Autonomous power state transitions (NVMe APST). Which idle states a device enters, and after
/// how long, is not the device's: the host programs it (the APST feature). So a description
/// gives either the controller's power state `descriptors` (Identify Controller's table), which
/// the simulated host's APST policy turns into states (`nines sim --apst`, as Linux's
/// `nvme_configure_apst` does; `nines_sim::apst`), or the `states` themselves (a table already
/// programmed). Neither: no power states (servers keep APST off). Not both.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Power {
    /// Programmed low-power states, shallow to deep (`idle_ns` increasing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<PowerState>,
    /// The controller's power state descriptors, as `nvme id-ctrl` prints them (PS0 first);
    /// operational ones may be left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub descriptors: Vec<PowerDescriptor>,
}

/// A state the device is in after `idle_ns` without commands. It starts entering it `entry_ns`
/// before (ENLAT): a command that arrives during the entry waits for the entry to end and then
/// for the exit; one that arrives once the device is in the state waits `exit_ns` (EXLAT). No
/// command is processed until the device is operational again, and then every queued command
/// is (NVMe base specification 2.0, 8.15: a doorbell write wakes a non-operational controller,
/// which processes no I/O commands in that state).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerState {
    pub idle_ns: u64,
    pub exit_ns: u64,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub entry_ns: u64,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// One power state descriptor of Identify Controller: its index (PS0 is the highest power),
/// whether the controller processes I/O in it (NOPS clear), and its entry and exit latencies
/// (ENLAT, EXLAT, the maximum in microseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerDescriptor {
    pub index: u8,
    #[serde(default)]
    pub operational: bool,
    pub entry_us: u32,
    pub exit_us: u32,
}

/// Flush and FUA (NVMe Flush command, Force Unit Access bit). With a power-loss-protected
/// buffer (the default, as enterprise SSDs) both complete like any command; with a volatile
/// write cache a FUA write completes when its page is programmed and a flush when every
/// buffered page is, the partly filled page padded and programmed at once. `flush_ns` is
/// firmware work each flush and FUA write adds (e.g. a mapping journal commit).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Durability {
    #[serde(default)]
    pub volatile_write_cache: bool,
    #[serde(default)]
    pub flush_ns: u64,
}

/// Firmware time that varies from command to command (interrupt handling, DMA setup, internal
/// queues), as a measured distribution: points (quantile, extra ns) of its quantile function,
/// both increasing, from quantile 0 to 1; each command draws one value, linearly interpolated.
/// Empty (the default) adds nothing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FirmwareJitter {
    #[serde(default)]
    pub read: Vec<(f64, u64)>,
    #[serde(default)]
    pub write: Vec<(f64, u64)>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuspendConfig {
    /// Program/erase suspend-resume: a read to a programming or erasing die suspends it.
    #[serde(default)]
    pub enabled: bool,
    /// Time added to the suspended operation for each suspension.
    #[serde(default)]
    pub resume_overhead_ns: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Housekeeping {
    /// Every `period_ns` the controller stalls for `duration_ns` (e.g. SMART log updates).
    /// 0 = off. Each device gets its own phase, drawn from its seed.
    #[serde(default)]
    pub period_ns: u64,
    #[serde(default)]
    pub duration_ns: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowIo {
    /// Each command independently takes `extra_ns` longer with this probability (firmware
    /// hiccups, retries). 0 = off.
    #[serde(default)]
    pub probability: f64,
    #[serde(default)]
    pub extra_ns: u64,
}

/// The most page types (`timing.*_by_page_type` entries) a device may list: the model keeps
/// them inline in the device, in one cache line (a heap list was a cache miss on every read of
/// a cold device).
pub const PAGE_TYPES_MAX: usize = 7;

pub(crate) fn invalid(field: &'static str, rule: impl Into<String>) -> FlashError {
    FlashError::Invalid {
        field,
        rule: rule.into(),
    }
}

impl DeviceConfig {
    /// A shipped preset by name; `NAME-ideal` is preset NAME made ideal
    /// ([`DeviceConfig::ideal`]).
    pub fn preset(name: &str) -> Result<DeviceConfig, FlashError> {
        if let Some(base) = name.strip_suffix(IDEAL_SUFFIX)
            && PRESETS.iter().any(|(n, _)| *n == base)
        {
            return Ok(DeviceConfig::preset(base)?.ideal());
        }
        let Some((_, text)) = PRESETS.iter().find(|(n, _)| *n == name) else {
            return Err(FlashError::UnknownPreset {
                name: name.to_string(),
                available: preset_names().join(", "),
            });
        };
        DeviceConfig::from_toml(text, name)
    }

    /// Parse and validate a description. `origin` names it in errors (a preset or a path).
    pub fn from_toml(text: &str, origin: &str) -> Result<DeviceConfig, FlashError> {
        let cfg: DeviceConfig = toml::from_str(text).map_err(|e| FlashError::Toml {
            origin: origin.to_string(),
            message: e.message().to_string(),
            line: line_of(text, e.span().map(|s| s.start)),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The description as a TOML document that [`DeviceConfig::from_toml`] reads back to an
    /// equal description (tested).
    pub fn to_toml(&self) -> Result<String, FlashError> {
        toml::to_string(self).map_err(|e| FlashError::Toml {
            origin: self.name.clone(),
            message: e.to_string(),
            line: None,
        })
    }

    /// Whether [`DeviceConfig::load`] reads `spec` as a file (ends in `.toml` or contains a `/`).
    pub fn is_file_spec(spec: &str) -> bool {
        spec.ends_with(".toml") || spec.contains('/')
    }

    /// A preset name or a path to a TOML file (anything ending in `.toml` or containing a `/`).
    pub fn load(spec: &str) -> Result<DeviceConfig, FlashError> {
        if Self::is_file_spec(spec) {
            let text = nines_core::input::read_to_string(
                std::path::Path::new(spec),
                nines_core::input::SETTINGS_MAX_BYTES,
            )
            .map_err(|e| FlashError::Io {
                path: spec.to_string(),
                message: e.to_string(),
            })?;
            DeviceConfig::from_toml(&text, spec)
        } else {
            DeviceConfig::preset(spec)
        }
    }

    /// The clean model of this device: every variance source off (page-type times replaced by
    /// `timing.read_ns` / `program_ns`, firmware jitter, read retries, slow I/Os, housekeeping
    /// stalls, power states, the mapping cache, the volatile write cache and its flush cost)
    /// and GC in `preempt` mode. Geometry, timings, FTL and controller stay. Named
    /// `NAME-ideal`.
    pub fn ideal(&self) -> DeviceConfig {
        let mut c = self.clone();
        if !c.name.ends_with(IDEAL_SUFFIX) {
            c.name.push_str(IDEAL_SUFFIX);
        }
        c.timing.read_ns_by_page_type.clear();
        c.timing.program_ns_by_page_type.clear();
        c.firmware_jitter = FirmwareJitter::default();
        c.read_retry = ReadRetry::default();
        c.slow_io = SlowIo::default();
        c.housekeeping = Housekeeping::default();
        c.power = Power::default();
        c.mapping = MappingCache::default();
        c.durability = Durability::default();
        c.ftl.gc_mode = GcMode::Preempt;
        c.ftl.gc_batch_blocks = 0;
        c
    }

    /// The variance sources and GC and suspend modes this description turns on, by name, in a fixed order
    /// (empty: the clean model).
    pub fn mechanisms(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if !self.timing.read_ns_by_page_type.is_empty()
            || !self.timing.program_ns_by_page_type.is_empty()
        {
            v.push("page-types");
        }
        if !self.firmware_jitter.read.is_empty() || !self.firmware_jitter.write.is_empty() {
            v.push("firmware-jitter");
        }
        if self.read_retry.probability > 0.0 {
            v.push("read-retry");
        }
        if self.slow_io.probability > 0.0 {
            v.push("slow-io");
        }
        if self.housekeeping.period_ns > 0 && self.housekeeping.duration_ns > 0 {
            v.push("housekeeping");
        }
        if !self.power.states.is_empty() || !self.power.descriptors.is_empty() {
            v.push("power-states");
        }
        if self.mapping.cache_bytes > 0 {
            v.push("mapping-cache");
        }
        if self.durability.volatile_write_cache || self.durability.flush_ns > 0 {
            v.push("volatile-cache");
        }
        if self.suspend.enabled {
            v.push("suspend");
        }
        match self.ftl.gc_mode {
            GcMode::Preempt => {}
            GcMode::Suspend => v.push("gc-suspend"),
            GcMode::Blocking => v.push("gc-blocking"),
            GcMode::Foreground => v.push("gc-foreground"),
        }
        v
    }

    pub fn dies(&self) -> u64 {
        let g = &self.geometry;
        g.channels as u64 * g.chips_per_channel as u64 * g.dies_per_chip as u64
    }

    /// Units (mapping granules) per flash page.
    pub fn units_per_page(&self) -> u32 {
        self.geometry.page_size_bytes / self.geometry.map_unit_bytes
    }

    pub fn physical_bytes(&self) -> u128 {
        let g = &self.geometry;
        self.dies() as u128
            * g.planes_per_die as u128
            * g.blocks_per_plane as u128
            * g.pages_per_block as u128
            * g.page_size_bytes as u128
    }

    /// The longest any single device time may be (one hour), so that sums of them cannot wrap.
    pub const DURATION_NS_MAX: u64 = 3_600_000_000_000;

    /// Check every rule; the first broken one is returned naming its field. One step per
    /// section of the description, in this order (the first broken rule is the one named).
    pub fn validate(&self) -> Result<(), FlashError> {
        self.validate_modes()?;
        self.validate_geometry()?;
        self.validate_shares()?;
        self.validate_durations()?;
        self.validate_timing()?;
        self.validate_buffer()?;
        self.validate_mapping()?;
        self.validate_fdp()?;
        self.validate_capacity()?;
        if let Some(z) = &self.zoned {
            z.validate(self)?;
        }
        self.check_gc_room()
    }

    /// Modes that exclude each other, and the fitted completion mode.
    fn validate_modes(&self) -> Result<(), FlashError> {
        let g = &self.geometry;
        if let Some(m) = &self.fitted_completion
            && !matches!(m.as_str(), "interrupt" | "polled" | "none")
        {
            return Err(invalid(
                "fitted_completion",
                format!("{m:?} is not a completion mode (interrupt, polled or none)"),
            ));
        }
        if self.controller.die_gaps && self.suspend.enabled {
            return Err(invalid(
                "controller.die_gaps",
                "is not modelled with suspend.enabled (turn one off)",
            ));
        }
        if self.controller.die_gaps && self.ftl.gc_mode != GcMode::Preempt {
            return Err(invalid(
                "ftl.gc_mode",
                "only \"preempt\" is modelled with controller.die_gaps (turn one off)",
            ));
        }
        if self.ftl.gc_mode == GcMode::Foreground && self.ftl.gc_batch_blocks == 0 {
            return Err(invalid(
                "ftl.gc_batch_blocks",
                "must be at least 1 with gc_mode = \"foreground\" (victims reclaimed per stall)",
            ));
        }
        if self.ftl.gc_batch_blocks > self.blocks_per_pool() {
            return Err(invalid(
                "ftl.gc_batch_blocks",
                format!(
                    "{} exceeds the blocks of a pool ({})",
                    self.ftl.gc_batch_blocks,
                    self.blocks_per_pool()
                ),
            ));
        }
        if self.ftl.reads_map_unwritten && g.map_unit_bytes != g.page_size_bytes {
            return Err(invalid(
                "ftl.reads_map_unwritten",
                "needs geometry.map_unit_bytes = page_size_bytes (a read maps a whole page)",
            ));
        }
        if g.multi_plane && self.ftl.block_pool != BlockPool::Plane {
            return Err(invalid(
                "geometry.multi_plane",
                "needs ftl.block_pool = \"plane\" (a program's plane is its pool's)",
            ));
        }
        Ok(())
    }

    /// The geometry: every count positive, page and mapping unit sizes, the limits of the maps.
    fn validate_geometry(&self) -> Result<(), FlashError> {
        let g = &self.geometry;
        for (field, v) in [
            ("geometry.channels", g.channels),
            ("geometry.chips_per_channel", g.chips_per_channel),
            ("geometry.dies_per_chip", g.dies_per_chip),
            ("geometry.planes_per_die", g.planes_per_die),
            ("geometry.blocks_per_plane", g.blocks_per_plane),
            ("geometry.pages_per_block", g.pages_per_block),
        ] {
            if v == 0 {
                return Err(invalid(field, "must be at least 1"));
            }
        }
        if g.page_size_bytes == 0 || !g.page_size_bytes.is_multiple_of(512) {
            return Err(invalid(
                "geometry.page_size_bytes",
                format!("{} is not a positive multiple of 512", g.page_size_bytes),
            ));
        }
        if g.map_unit_bytes == 0
            || !g.map_unit_bytes.is_multiple_of(512)
            || !g.page_size_bytes.is_multiple_of(g.map_unit_bytes)
        {
            return Err(invalid(
                "geometry.map_unit_bytes",
                format!(
                    "{} must be a multiple of 512 that divides page_size_bytes ({})",
                    g.map_unit_bytes, g.page_size_bytes
                ),
            ));
        }
        if g.pages_per_block > 1 << 16 || self.units_per_page() > 64 {
            return Err(invalid(
                "geometry.pages_per_block",
                "at most 65536 pages per block and 64 mapping units per page",
            ));
        }
        if self.dies() > 1 << 16 {
            return Err(invalid(
                "geometry.channels",
                "channels x chips_per_channel x dies_per_chip must be at most 65536",
            ));
        }
        debug_assert!(self.dies() >= 1 && self.units_per_page() >= 1);
        Ok(())
    }

    /// Over-provisioning and the GC thresholds: shares of the flash.
    fn validate_shares(&self) -> Result<(), FlashError> {
        let op = self.ftl.over_provisioning;
        if !(0.0..1.0).contains(&op) || op.is_nan() {
            return Err(invalid(
                "ftl.over_provisioning",
                format!(
                    "{op} must be at least 0 and below 1 (a share of the physical flash, 0.07 = 7%)"
                ),
            ));
        }
        for (field, v) in [
            ("ftl.gc_soft_threshold", self.ftl.gc_soft_threshold),
            ("ftl.gc_hard_threshold", self.ftl.gc_hard_threshold),
        ] {
            if !(0.0..1.0).contains(&v) || v.is_nan() {
                return Err(invalid(field, format!("{v} must be a share in [0, 1)")));
            }
        }
        if self.ftl.gc_hard_threshold > self.ftl.gc_soft_threshold {
            return Err(invalid(
                "ftl.gc_hard_threshold",
                "must not exceed ftl.gc_soft_threshold",
            ));
        }
        debug_assert!(self.ftl.gc_hard_threshold <= self.ftl.gc_soft_threshold);
        Ok(())
    }

    /// Every device time at most an hour, so sums of them cannot wrap.
    fn validate_durations(&self) -> Result<(), FlashError> {
        let t = &self.timing;
        // Every duration at most an hour: the model adds a handful of them per command (and
        // scales them by calibration), and a sum that wrapped would simulate a fast device.
        let durations = [
            ("timing.read_ns", t.read_ns),
            ("timing.program_ns", t.program_ns),
            ("timing.erase_ns", t.erase_ns),
            ("controller.overhead_ns", self.controller.overhead_ns),
            ("controller.command_ns", self.controller.command_ns),
            ("buffer.dram_access_ns", self.buffer.dram_access_ns),
            (
                "read_retry.step_overhead_ns",
                self.read_retry.step_overhead_ns,
            ),
            ("durability.flush_ns", self.durability.flush_ns),
            (
                "suspend.resume_overhead_ns",
                self.suspend.resume_overhead_ns,
            ),
            ("housekeeping.period_ns", self.housekeeping.period_ns),
            ("housekeeping.duration_ns", self.housekeeping.duration_ns),
            ("slow_io.extra_ns", self.slow_io.extra_ns),
        ];
        let listed = t
            .read_ns_by_page_type
            .iter()
            .map(|&v| ("timing.read_ns_by_page_type", v))
            .chain(
                t.program_ns_by_page_type
                    .iter()
                    .map(|&v| ("timing.program_ns_by_page_type", v)),
            )
            .chain(self.power.states.iter().flat_map(|p| {
                [
                    ("power.states.idle_ns", p.idle_ns),
                    ("power.states.exit_ns", p.exit_ns),
                    ("power.states.entry_ns", p.entry_ns),
                ]
            }))
            .chain(
                self.firmware_jitter
                    .read
                    .iter()
                    .chain(&self.firmware_jitter.write)
                    .map(|&(_, v)| ("firmware_jitter", v)),
            );
        for (field, v) in durations.into_iter().chain(listed) {
            if v > Self::DURATION_NS_MAX {
                return Err(invalid(
                    field,
                    format!(
                        "{v} ns is more than an hour ({} ns); device times are in nanoseconds",
                        Self::DURATION_NS_MAX
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Times and rates the model divides by or adds: positive; page types listed at most PAGE_TYPES_MAX.
    fn validate_timing(&self) -> Result<(), FlashError> {
        let t = &self.timing;
        for (field, v) in [
            ("timing.read_ns", t.read_ns),
            ("timing.program_ns", t.program_ns),
            ("timing.erase_ns", t.erase_ns),
            ("timing.channel_bytes_per_s", t.channel_bytes_per_s),
            (
                "controller.read_bytes_per_s",
                self.controller.read_bytes_per_s,
            ),
            (
                "controller.write_bytes_per_s",
                self.controller.write_bytes_per_s,
            ),
        ] {
            if v == 0 {
                return Err(invalid(field, "must be positive"));
            }
        }
        for (field, v) in [
            ("timing.read_ns_by_page_type", &t.read_ns_by_page_type),
            ("timing.program_ns_by_page_type", &t.program_ns_by_page_type),
        ] {
            if v.len() > PAGE_TYPES_MAX {
                return Err(invalid(
                    field,
                    format!(
                        "at most {PAGE_TYPES_MAX} page types (SLC 1, MLC 2, TLC 3, QLC 4, PLC 5); got {}",
                        v.len()
                    ),
                ));
            }
        }
        if t.read_ns_by_page_type.contains(&0) || t.program_ns_by_page_type.contains(&0) {
            return Err(invalid(
                "timing.read_ns_by_page_type",
                "every per-page-type time must be positive",
            ));
        }
        debug_assert!(self.timing.read_ns > 0 && self.timing.program_ns > 0);
        Ok(())
    }

    /// The write buffer, housekeeping, slow I/Os and read retries.
    fn validate_buffer(&self) -> Result<(), FlashError> {
        let g = &self.geometry;
        if self.buffer.write_buffer_bytes < 2 * g.page_size_bytes as u64 {
            return Err(invalid(
                "buffer.write_buffer_bytes",
                format!(
                    "must hold at least two pages ({} bytes)",
                    2 * g.page_size_bytes
                ),
            ));
        }
        // The buffer's pages are tracked one by one (allocated up front with the device): a
        // buffer larger than the flash it fronts has no meaning and would only exhaust memory.
        if self.buffer.write_buffer_bytes as u128 > self.physical_bytes() {
            return Err(invalid(
                "buffer.write_buffer_bytes",
                format!(
                    "{} must not exceed the flash it buffers ({} bytes)",
                    self.buffer.write_buffer_bytes,
                    self.physical_bytes()
                ),
            ));
        }
        let hk = &self.housekeeping;
        if hk.period_ns > 0 && hk.duration_ns >= hk.period_ns {
            return Err(invalid(
                "housekeeping.duration_ns",
                "must be shorter than housekeeping.period_ns",
            ));
        }
        let p = self.slow_io.probability;
        if !(0.0..=1.0).contains(&p) || p.is_nan() {
            return Err(invalid(
                "slow_io.probability",
                format!("{p} must be in [0, 1]"),
            ));
        }
        let rr = &self.read_retry;
        if !(0.0..=1.0).contains(&rr.probability) || rr.probability.is_nan() {
            return Err(invalid(
                "read_retry.probability",
                format!("{} must be in [0, 1]", rr.probability),
            ));
        }
        if rr.probability > 0.0 && rr.steps == 0 {
            return Err(invalid(
                "read_retry.steps",
                "must be at least 1 when read_retry.probability is above 0",
            ));
        }
        debug_assert!(
            self.buffer.write_buffer_bytes >= 2 * u64::from(self.geometry.page_size_bytes)
        );
        Ok(())
    }

    /// The mapping cache, power states and firmware jitter.
    fn validate_mapping(&self) -> Result<(), FlashError> {
        let g = &self.geometry;
        let m = &self.mapping;
        if m.entry_bytes == 0 || m.flash_entry_bytes == 0 || m.translation_read_bytes == 0 {
            return Err(invalid(
                "mapping.entry_bytes",
                "entry_bytes, flash_entry_bytes and translation_read_bytes must be positive",
            ));
        }
        if m.translation_read_bytes > g.page_size_bytes {
            return Err(invalid(
                "mapping.translation_read_bytes",
                format!("must not exceed the page ({} bytes)", g.page_size_bytes),
            ));
        }
        if m.cache_bytes > 0 && m.cache_bytes < m.entry_bytes as u64 {
            return Err(invalid(
                "mapping.cache_bytes",
                "must hold at least one entry (or be 0: the whole map in DRAM)",
            ));
        }
        let states = &self.power.states;
        if states.iter().any(|s| s.idle_ns == 0)
            || states.windows(2).any(|w| w[1].idle_ns <= w[0].idle_ns)
        {
            return Err(invalid(
                "power.states",
                "idle_ns must be positive and increase from one state to the next",
            ));
        }
        if states.iter().any(|s| s.entry_ns > s.idle_ns) {
            return Err(invalid(
                "power.states",
                "entry_ns must not exceed idle_ns (the entry starts after some idle time)",
            ));
        }
        let d = &self.power.descriptors;
        if !d.is_empty() && !states.is_empty() {
            return Err(invalid(
                "power",
                "give the controller's descriptors (the host's APST policy programs them) or \
                 programmed states, not both",
            ));
        }
        if d.len() > 32
            || d.windows(2).any(|w| w[1].index <= w[0].index)
            || d.iter().any(|p| p.index > 31)
        {
            return Err(invalid(
                "power.descriptors",
                "at most 32 descriptors, indices 0 to 31 in increasing order",
            ));
        }
        for (field, points) in [
            ("firmware_jitter.read", &self.firmware_jitter.read),
            ("firmware_jitter.write", &self.firmware_jitter.write),
        ] {
            if let Err(rule) = crate::dist::QuantileDist::new(points) {
                return Err(invalid(field, rule));
            }
        }
        Ok(())
    }

    /// Pools, the 32-bit maps and the advertised capacity against the geometry.
    fn validate_capacity(&self) -> Result<(), FlashError> {
        let g = &self.geometry;
        let op = self.ftl.over_provisioning;
        if self.pools() > 1 << 16 {
            return Err(invalid(
                "ftl.block_pool",
                "at most 65536 block pools (dies, or planes with block_pool = \"plane\")",
            ));
        }
        let physical = self.physical_bytes();
        if physical / g.map_unit_bytes as u128 >= u32::MAX as u128 {
            return Err(invalid(
                "geometry.blocks_per_plane",
                "the geometry has 2^32 or more mapping units; the FTL maps with 32-bit entries",
            ));
        }
        if let Some(cap) = self.capacity_bytes
            && cap < u64::from(g.map_unit_bytes)
        {
            // Rounded down to whole mapping units it would hold nothing (and the workload would
            // blame its --offset).
            return Err(invalid(
                "capacity_bytes",
                format!(
                    "{cap} is less than one mapping unit ({} bytes): the device would hold nothing",
                    g.map_unit_bytes
                ),
            ));
        }
        if let Some(cap) = self.capacity_bytes {
            let holds = (physical as f64 * (1.0 - op)) as u128;
            if cap == 0 || cap as u128 > holds {
                return Err(invalid(
                    "capacity_bytes",
                    format!(
                        "{cap} does not fit: the geometry holds {physical} bytes, {holds} after \
                         {:.1}% over-provisioning; add blocks or lower ftl.over_provisioning",
                        op * 100.0
                    ),
                ));
            }
        }

        debug_assert!(self.logical_bytes() >= u64::from(self.geometry.map_unit_bytes));
        Ok(())
    }

    /// `[fdp]`'s rules (nothing when the section is absent).
    fn validate_fdp(&self) -> Result<(), FlashError> {
        let Some(f) = &self.fdp else {
            return Ok(());
        };
        if f.reclaim_groups != 1 {
            return Err(invalid(
                "fdp.reclaim_groups",
                format!(
                    "{} reclaim groups are not modelled (every die is in one group): set 1",
                    f.reclaim_groups
                ),
            ));
        }
        if f.handles == 0 || f.handles > FDP_HANDLES_MAX {
            return Err(invalid(
                "fdp.handles",
                format!("{} must be 1 to {FDP_HANDLES_MAX}", f.handles),
            ));
        }
        let ru = self.reclaim_unit_bytes();
        if let Some(b) = f.reclaim_unit_bytes
            && b != ru
        {
            return Err(invalid(
                "fdp.reclaim_unit_bytes",
                format!(
                    "{b} is not the model's reclaim unit, one block on each of the {} pools \
                     ({ru} bytes): give {ru} or leave it out",
                    self.pools()
                ),
            ));
        }
        Ok(())
    }

    /// Reclaim unit handles (1 on a conventional device: every write goes to handle 0).
    pub fn fdp_handles(&self) -> u32 {
        self.fdp.as_ref().map_or(1, |f| f.handles)
    }

    /// GC frontiers per pool: one per handle when persistently isolated, else one.
    pub fn gc_frontiers(&self) -> u32 {
        match &self.fdp {
            Some(f) if f.isolation == Isolation::Persistently => f.handles,
            _ => 1,
        }
    }

    /// Open blocks per pool: a host frontier per handle and the GC frontiers (2 on a
    /// conventional device).
    pub fn open_blocks_per_pool(&self) -> u32 {
        self.fdp_handles() + self.gc_frontiers()
    }

    /// The model's reclaim unit: one block on every pool.
    pub fn reclaim_unit_bytes(&self) -> u64 {
        self.pools()
            * u64::from(self.geometry.pages_per_block)
            * u64::from(self.geometry.page_size_bytes)
    }

    /// Block pools: the FTL keeps free blocks, frontiers and GC per pool (a die, or a plane).
    /// Pool `p` sits on channel `p mod channels`, chip `(p / channels) mod chips_per_channel`.
    pub fn pools(&self) -> u64 {
        match self.ftl.block_pool {
            BlockPool::Die => self.dies(),
            BlockPool::Plane => self.dies() * self.geometry.planes_per_die as u64,
        }
    }

    /// Blocks per pool.
    pub fn blocks_per_pool(&self) -> u32 {
        match self.ftl.block_pool {
            BlockPool::Die => self.geometry.planes_per_die * self.geometry.blocks_per_plane,
            BlockPool::Plane => self.geometry.blocks_per_plane,
        }
    }

    /// Units that execute one flash command at a time (dies, or chips).
    pub fn parallel_units(&self) -> u64 {
        match self.geometry.parallel_unit {
            ParallelUnit::Die => self.dies(),
            ParallelUnit::Chip => {
                self.geometry.channels as u64 * self.geometry.chips_per_channel as u64
            }
        }
    }

    /// Blocks per pool that logical data cannot occupy (spare blocks).
    pub fn spare_blocks_per_pool(&self) -> u64 {
        let block_bytes =
            self.geometry.pages_per_block as u64 * self.geometry.page_size_bytes as u64;
        (self.blocks_per_pool() as u64)
            .saturating_sub(self.logical_bytes().div_ceil(block_bytes * self.pools()))
    }

    /// The thresholds in blocks per pool, clamped so that GC always has room to move pages:
    /// hard >= 2, soft >= hard + 1, and soft below the spare blocks (on heavily scaled
    /// devices the configured share can exceed the spare blocks; GC would then never stop).
    pub fn gc_thresholds_blocks(&self) -> (u32, u32) {
        let bpd = self.blocks_per_pool() as f64;
        let hard = ((self.ftl.gc_hard_threshold * bpd).ceil() as u32).max(2);
        let spare = self.spare_blocks_per_pool().min(u32::MAX as u64) as u32;
        let soft = ((self.ftl.gc_soft_threshold * bpd).ceil() as u32)
            .min(spare.saturating_sub(2))
            .max(hard + 1);
        (soft, hard)
    }

    /// The smallest blocks-per-plane at which the FTL keeps enough spare blocks per die for GC.
    fn min_blocks_per_plane(&self) -> u32 {
        for bpp in 1..=self.geometry.blocks_per_plane.max(1) {
            let mut c = self.clone();
            c.geometry.blocks_per_plane = bpp;
            if let Some(cap) = self.capacity_bytes {
                let ratio = bpp as f64 / self.geometry.blocks_per_plane as f64;
                c.capacity_bytes = Some((cap as f64 * ratio) as u64);
            }
            if c.check_gc_room().is_ok() && c.blocks_per_pool() >= 8 {
                return bpp;
            }
        }
        self.geometry.blocks_per_plane
    }

    /// A copy with fewer blocks per plane: same page geometry and over-provisioning share.
    /// `scale` in (0, 1]; the result is clamped up to the smallest size that keeps GC workable.
    pub fn scaled(&self, scale: f64) -> Result<DeviceConfig, FlashError> {
        if !(scale > 0.0 && scale <= 1.0) {
            return Err(invalid("scale", format!("{scale} must be in (0, 1]")));
        }
        let mut c = self.clone();
        let want = ((self.geometry.blocks_per_plane as f64) * scale).floor() as u32;
        let min = self.min_blocks_per_plane();
        c.geometry.blocks_per_plane = want.max(min).min(self.geometry.blocks_per_plane).max(1);
        if c.geometry.blocks_per_plane < self.geometry.blocks_per_plane {
            // The mapping cache covers the same share of the (smaller) logical space, so its
            // hit ratio is the full-size device's.
            let ratio = c.geometry.blocks_per_plane as f64 / self.geometry.blocks_per_plane as f64;
            if self.mapping.cache_bytes > 0 {
                c.mapping.cache_bytes = ((self.mapping.cache_bytes as f64 * ratio) as u64)
                    .max(self.mapping.entry_bytes as u64);
            }
            // Keep GC's effective spare: GC's working room (the free-block reserve and the open
            // blocks) is counted in whole blocks, so on a die of few blocks it takes a larger
            // share of the flash than at full size. Raise the over-provisioning by exactly that
            // difference, so the space GC can reclaim from, and so write amplification, stay
            // those of the full-size device (tested).
            let full_op = self.effective_over_provisioning();
            let full_room = self.gc_room_share();
            c.capacity_bytes = None;
            c.ftl.over_provisioning = full_op;
            for _ in 0..4 {
                c.ftl.over_provisioning =
                    (full_op + c.gc_room_share() - full_room).clamp(full_op, 0.9_f64.max(full_op));
            }
        }
        c.check_gc_room()?;
        Ok(c)
    }

    /// The share of the flash not exported: 1 - logical / physical.
    pub fn effective_over_provisioning(&self) -> f64 {
        1.0 - self.logical_bytes() as f64 / self.physical_bytes() as f64
    }

    /// The share of a die GC needs as working room: the soft reserve of free blocks plus the
    /// open blocks, half written on average (two on a conventional device: one block).
    fn gc_room_share(&self) -> f64 {
        let (soft, _) = self.gc_thresholds_blocks();
        (soft as f64 + f64::from(self.open_blocks_per_pool()) / 2.0) / self.blocks_per_pool() as f64
    }

    /// The FTL needs spare blocks beyond its hard threshold (two open blocks per die, one
    /// block of slack for uneven fill across dies, and with FDP one more for each further
    /// open block); checked before a model is built.
    pub fn check_gc_room(&self) -> Result<(), FlashError> {
        let (_, hard) = self.gc_thresholds_blocks();
        let spare = self.spare_blocks_per_pool();
        let need = hard as u64 + 4 + u64::from(self.open_blocks_per_pool() - 2);
        if spare < need {
            return Err(invalid(
                "ftl.over_provisioning",
                format!(
                    "leaves {spare} spare blocks per die; GC needs at least {need} \
                     (hard threshold {hard} + 4{}); raise over_provisioning or blocks_per_plane, \
                     or use a larger scale",
                    match self.open_blocks_per_pool() - 2 {
                        0 => String::new(),
                        n => format!(" + {n} open blocks of the FDP handles"),
                    }
                ),
            ));
        }
        Ok(())
    }

    /// Exported (logical) capacity, a multiple of the mapping unit.
    pub fn logical_bytes(&self) -> u64 {
        let unit = self.geometry.map_unit_bytes as u64;
        let by_op = (self.physical_bytes() as f64 * (1.0 - self.ftl.over_provisioning)) as u64;
        let cap = self.capacity_bytes.unwrap_or(by_op).min(by_op);
        (cap / unit) * unit
    }

    /// Bytes of model state per device for this geometry (maps and per-block arrays).
    pub fn model_bytes(&self) -> u64 {
        let unit = self.geometry.map_unit_bytes as u64;
        let physical_units = (self.physical_bytes() / unit as u128) as u64;
        let logical_units = self.logical_bytes() / unit;
        let blocks = self.pools() * self.blocks_per_pool() as u64;
        let cache = if self.mapping.cache_bytes == 0 {
            0
        } else {
            // Entries (16 bytes each with their links and index slot) and a generation per
            // translation page.
            self.mapping.cache_bytes / self.mapping.entry_bytes as u64 * 24
                + logical_units / self.translation_entries_per_page() as u64 * 4
        };
        // FDP: a handle per logical unit and an owner per block.
        let fdp = if self.fdp.is_some() {
            logical_units + blocks
        } else {
            0
        };
        physical_units * 4 + logical_units * 4 + blocks * 9 + cache + fdp
    }

    /// Pages the write buffer holds (at least two).
    pub fn buffer_pages(&self) -> u64 {
        (self.buffer.write_buffer_bytes / self.geometry.page_size_bytes as u64).max(2)
    }

    /// With `buffer.count_sectors`, the most programs the write buffer can wait for at once:
    /// each holds at least one sector, and a write is admitted only while fewer than
    /// `write_buffer_bytes / 512` sectors are held (so at most a unit's sectors beyond); 0 off.
    pub fn buffer_sector_entries(&self) -> u64 {
        if self.buffer.count_sectors {
            (self.buffer.write_buffer_bytes + self.geometry.map_unit_bytes as u64) / 512 + 1
        } else {
            0
        }
    }

    /// Bytes of state every device allocates for itself, beyond the maps of
    /// [`DeviceConfig::model_bytes`] (which devices that only read share): the write buffer's
    /// page release times (8 bytes a page), and with `controller.die_gaps` each parallel unit's
    /// reservations (17 bytes each, at most 64 a unit) and each channel's second timeline
    /// (16 bytes a reservation, at most 128); with `buffer.count_sectors` its
    /// programs' (release time, sectors) (16 bytes each) and each pool's open-page sectors.
    pub fn device_state_bytes(&self) -> u64 {
        let gaps = if self.controller.die_gaps {
            self.parallel_units()
                .saturating_mul(64 * 17 + 8)
                .saturating_add(
                    (self.geometry.channels as u64)
                        .saturating_mul(crate::timeline::TIMELINE_CAP as u64 * 16 + 8),
                )
        } else {
            0
        };
        (self.buffer_pages() + 1)
            .saturating_mul(8)
            .saturating_add(gaps)
            .saturating_add(self.buffer_sector_entries().saturating_mul(16))
            .saturating_add(if self.buffer.count_sectors {
                self.pools().saturating_mul(8)
            } else {
                0
            })
    }

    /// Mapping entries one translation page holds.
    pub fn translation_entries_per_page(&self) -> u32 {
        (self.geometry.page_size_bytes / self.mapping.flash_entry_bytes).max(1)
    }

    /// Entries the mapping cache holds (0: the whole map is in DRAM).
    pub fn mapping_cache_entries(&self) -> u64 {
        self.mapping.cache_bytes / self.mapping.entry_bytes as u64
    }

    /// A copy whose device-side times are `factor` times as long: every flash, controller and
    /// firmware time multiplied, every data rate divided (so an idle command takes `factor` times
    /// as long, and the proportions of the description stay). Used by calibration to bring a
    /// preset's floor down (or up) to a measured device's; host costs are not part of a device.
    pub fn time_scaled(&self, factor: f64) -> DeviceConfig {
        let t = |ns: u64| ((ns as f64 * factor).round() as u64).max(1);
        let t0 = |ns: u64| (ns as f64 * factor).round() as u64;
        let rate = |r: u64| ((r as f64 / factor).round() as u64).max(1);
        let rate0 = |r: u64| if r == 0 { 0 } else { rate(r) };
        let mut c = self.clone();
        c.timing.read_ns = t(c.timing.read_ns);
        c.timing.program_ns = t(c.timing.program_ns);
        c.timing.erase_ns = t(c.timing.erase_ns);
        for v in c
            .timing
            .read_ns_by_page_type
            .iter_mut()
            .chain(c.timing.program_ns_by_page_type.iter_mut())
        {
            *v = t(*v);
        }
        c.timing.channel_bytes_per_s = rate(c.timing.channel_bytes_per_s);
        c.controller.overhead_ns = t0(c.controller.overhead_ns);
        c.controller.command_ns = t0(c.controller.command_ns);
        c.controller.read_bytes_per_s = rate(c.controller.read_bytes_per_s);
        c.controller.write_bytes_per_s = rate(c.controller.write_bytes_per_s);
        c.buffer.dram_bytes_per_s = rate0(c.buffer.dram_bytes_per_s);
        c.buffer.dram_access_ns = t0(c.buffer.dram_access_ns);
        c.read_retry.step_overhead_ns = t0(c.read_retry.step_overhead_ns);
        c.durability.flush_ns = t0(c.durability.flush_ns);
        for points in [&mut c.firmware_jitter.read, &mut c.firmware_jitter.write] {
            for p in points.iter_mut() {
                p.1 = t0(p.1);
            }
        }
        c
    }

    /// The largest scale (<= 1) whose model fits in `budget_bytes`, or the smallest workable.
    pub fn scale_for_budget(&self, budget_bytes: u64) -> f64 {
        let full = self.model_bytes().max(1);
        (budget_bytes as f64 / full as f64).min(1.0)
    }

    /// The smallest scale at which GC still works (see [`DeviceConfig::scaled`]).
    pub fn min_scale(&self) -> f64 {
        self.min_blocks_per_plane() as f64 / self.geometry.blocks_per_plane as f64
    }
}

fn line_of(text: &str, offset: Option<usize>) -> Option<usize> {
    offset.map(|o| text[..o.min(text.len())].matches('\n').count() + 1)
}
