//! NVMe admin data as nines reads it: Identify Controller (CNS 01h), Identify Namespace (CNS
//! 00h), the active namespace ID list (CNS 02h) and the SMART / Health Information log page
//! (Log Identifier 02h), parsed from the bytes a controller returned, and the report section
//! made of them ([`NvmeReport`], a device's `nvme` in the report).
//!
//! Sans-IO like the rest of this crate: the admin commands themselves are issued by
//! `nines_io::nvme` (`NVME_IOCTL_ADMIN_CMD`); the report, the simulator's calibration (a power
//! state table) and the real driver share these types. Every parser takes any byte slice and
//! returns a value or a [`NvmeParseError`]; none panics (property-tested below).
//!
//! Offsets are the specifications' byte ranges, written `high:low` as they are: NVM Express
//! Base Specification 2.0 (Identify Controller data structure, Power State Descriptor data
//! structure, Namespace List, SMART / Health Information log page) and the NVM Command Set
//! Specification 1.0 (Identify Namespace data structure, LBA Format data structure). All
//! multi-byte fields are little endian.

use serde::{Deserialize, Serialize};

/// Identify data structures are 4096 bytes (CNS 00h, 01h, 02h).
pub const IDENTIFY_BYTES: usize = 4096;
/// The SMART / Health Information log page is 512 bytes.
pub const SMART_LOG_BYTES: usize = 512;
/// The power state descriptor table has 32 entries (bytes 3071:2048 of Identify Controller).
pub const POWER_STATES_MAX: usize = 32;
/// Bytes in one SMART data unit: "1,000 units of 512 bytes" (SMART log, Data Units Read).
pub const DATA_UNIT_BYTES: u64 = 512_000;
/// An NVM namespace has at most 64 LBA formats (NLBAF is 0's based, at most 63).
pub const LBA_FORMATS_MAX: usize = 64;

/// Why bytes are not the structure they were read as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvmeParseError {
    #[error("{what}: {got} bytes, the structure is {need}")]
    Short {
        what: &'static str,
        got: usize,
        need: usize,
    },
    #[error("{what}: {why}")]
    Invalid { what: &'static str, why: String },
}

/// The Identify Controller fields nines reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentifyController {
    /// PCI Vendor ID (VID, bytes 01:00).
    pub vendor_id: u16,
    /// PCI Subsystem Vendor ID (SSVID, bytes 03:02).
    pub subsystem_vendor_id: u16,
    /// Serial Number (SN, bytes 23:04), trailing spaces trimmed.
    pub serial: String,
    /// Model Number (MN, bytes 63:24), trailing spaces trimmed.
    pub model: String,
    /// Firmware Revision (FR, bytes 71:64), trailing spaces trimmed.
    pub firmware: String,
    /// Controller ID (CNTLID, bytes 79:78).
    pub controller_id: u16,
    /// Version (VER, bytes 83:80) as "major.minor.tertiary"; absent when 0 (before NVMe 1.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Number of Namespaces (NN, bytes 519:516): the largest namespace ID the controller supports.
    pub namespaces_max: u32,
    /// Volatile Write Cache present (VWC, byte 525 bit 0).
    pub volatile_write_cache: bool,
    /// Autonomous Power State Transitions supported (APSTA, byte 265 bit 0).
    pub apst_supported: bool,
    /// Warning Composite Temperature Threshold (WCTEMP, bytes 267:266, kelvins, 0: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_c_warning: Option<i32>,
    /// Critical Composite Temperature Threshold (CCTEMP, bytes 269:268, kelvins, 0: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_c_critical: Option<i32>,
    /// Total NVM Capacity (TNVMCAP, bytes 295:280, 128 bits; absent when 0, not reported).
    /// Saturates at 2^64 - 1 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes_total: Option<u64>,
    /// The power states, PS0 (the most power) first: NPSS (byte 263, 0's based) + 1 descriptors
    /// from byte 2048, 32 bytes each.
    pub power_states: Vec<PowerStateDescriptor>,
}

/// One power state descriptor (32 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PowerStateDescriptor {
    /// Its number (PSn).
    pub index: u8,
    /// Maximum Power (MP, bytes 01:00) in the scale of MXPS (byte 03 bit 0: 0 = 0.01 W, 1 =
    /// 0.0001 W), in microwatts (exact in both scales).
    pub power_uw_max: u64,
    /// Non-Operational State (NOPS, byte 03 bit 1) clear: I/O commands are processed in it. A
    /// non-operational state is what APST enters when the controller is idle.
    pub operational: bool,
    /// Entry Latency (ENLAT, bytes 07:04), microseconds; 0: not reported.
    pub latency_us_entry: u32,
    /// Exit Latency (EXLAT, bytes 11:08), microseconds; 0: not reported.
    pub latency_us_exit: u32,
    /// Idle Power (IDLP, bytes 17:16, scale IPS in byte 18 bits 7:6), microwatts; absent when
    /// not reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_uw_idle: Option<u64>,
    /// Active Power (ACTP, bytes 21:20, scale APS in byte 22 bits 7:6), microwatts; absent
    /// when not reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_uw_active: Option<u64>,
}

/// The Identify Namespace fields nines reports (NVM command set).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentifyNamespace {
    /// Namespace Size (NSZE, bytes 07:00), logical blocks.
    pub size_blocks: u64,
    /// Namespace Capacity (NCAP, bytes 15:08), logical blocks.
    pub capacity_blocks: u64,
    /// Namespace Utilization (NUSE, bytes 23:16), logical blocks.
    pub utilization_blocks: u64,
    /// The LBA format in use (FLBAS, byte 26: bits 3:0, and bits 6:5 as the high bits).
    pub lba_format_in_use: u8,
    /// The supported LBA formats: NLBAF (byte 25, 0's based) + 1 descriptors from byte 128.
    pub lba_formats: Vec<LbaFormat>,
    /// The in-use format's logical block size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_bytes: Option<u32>,
    /// `size_blocks` in bytes (absent without a block size, or past 2^64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// `capacity_blocks` in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
}

/// One LBA format (4 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LbaFormat {
    pub index: u8,
    /// LBA Data Size (LBADS, byte 02) as bytes, 2^LBADS; absent when LBADS is below 9 (the
    /// format is not supported) or above 31.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_bytes: Option<u32>,
    /// Metadata Size (MS, bytes 01:00), bytes per block.
    pub metadata_bytes: u16,
    /// Relative Performance (RP, byte 03 bits 1:0): 0 best, 1 better, 2 good, 3 degraded.
    pub relative_performance: u8,
}

/// The SMART / Health Information log page (512 bytes). The 128-bit counters saturate at
/// 2^64 - 1 (no device reaches it: that many data units is 9.4 ZB).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmartLog {
    /// Critical Warning (byte 00), the bit field.
    pub critical_warning: u8,
    /// Its set bits, named ([`critical_warning_names`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub critical_warnings: Vec<String>,
    /// Composite Temperature (bytes 02:01), kelvins less 273 (as nvme-cli prints it).
    pub temperature_c_composite: i32,
    /// Available Spare (byte 03), percent of the spare capacity left.
    pub available_spare_pct: u8,
    /// Available Spare Threshold (byte 04), percent.
    pub available_spare_pct_threshold: u8,
    /// Percentage Used (byte 05): the vendor's estimate of the endurance used; may pass 100.
    pub endurance_used_pct: u8,
    /// Data Units Read (bytes 47:32), in units of 512,000 bytes (rounded up by the device).
    pub data_units_read: u64,
    /// Data Units Written (bytes 63:48).
    pub data_units_written: u64,
    /// Host Read Commands (bytes 79:64): read commands the controller completed.
    pub host_read_commands: u64,
    /// Host Write Commands (bytes 95:80).
    pub host_write_commands: u64,
    /// Controller Busy Time (bytes 111:96), minutes with I/O outstanding.
    pub controller_busy_min: u64,
    /// Power Cycles (bytes 127:112).
    pub power_cycles: u64,
    /// Power On Hours (bytes 143:128).
    pub power_on_hours: u64,
    /// Unsafe Shutdowns (bytes 159:144).
    pub unsafe_shutdowns: u64,
    /// Media and Data Integrity Errors (bytes 175:160).
    pub media_errors: u64,
    /// Number of Error Information Log Entries (bytes 191:176), over the controller's life.
    pub error_log_entries: u64,
    /// Warning Composite Temperature Time (bytes 195:192), minutes.
    pub temperature_warning_min: u32,
    /// Critical Composite Temperature Time (bytes 199:196), minutes.
    pub temperature_critical_min: u32,
}

/// What a run changed in the SMART counters: after less before. The counters are the whole
/// controller's (every namespace, every process), and data units are rounded up to 512,000
/// bytes by the device, so a delta of data units is within one unit of the bytes moved.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmartDelta {
    pub host_read_commands: u64,
    pub host_write_commands: u64,
    pub data_units_read: u64,
    pub data_units_written: u64,
    /// `data_units_read` x 512,000.
    pub read_bytes: u64,
    /// `data_units_written` x 512,000.
    pub written_bytes: u64,
    pub controller_busy_min: u64,
    pub media_errors: u64,
    pub error_log_entries: u64,
    pub unsafe_shutdowns: u64,
}

/// What a report says of an NVMe device: identify data and the SMART log before and after the
/// run (`nines profile`). Absent for devices that are not NVMe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmeReport {
    /// The device node the admin commands were sent through (`/dev/nvme0n1`, `/dev/nvme0`,
    /// `/dev/ng0n1`).
    pub device: String,
    pub controller: IdentifyController,
    /// The namespace the device node is (absent for a controller's character device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nsid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<IdentifyNamespace>,
    /// The controller's active namespace IDs (CNS 02h; absent when the command failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_namespaces: Option<Vec<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smart_before: Option<SmartLog>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smart_after: Option<SmartLog>,
    /// `smart_after` less `smart_before` (absent when either is, or a counter went down).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smart_delta: Option<SmartDelta>,
    /// Admin commands that failed after Identify Controller, one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl NvmeReport {
    /// One line for a table: model, firmware, write cache, APST and the power states.
    pub fn summary(&self) -> String {
        let c = &self.controller;
        let mut s = format!(
            "{}: {} (firmware {}, serial {}), volatile write cache {}, APST {}",
            self.device,
            c.model,
            c.firmware,
            c.serial,
            if c.volatile_write_cache { "yes" } else { "no" },
            if c.apst_supported {
                "supported"
            } else {
                "not supported"
            },
        );
        s.push_str(&format!(
            "; power states: {}",
            power_states_text(&c.power_states)
        ));
        s
    }
}

/// The power state table in words: `PS0 25.00 W, entry 16 µs, exit 4 µs; PS3 0.01 W non-operational, ...`.
pub fn power_states_text(states: &[PowerStateDescriptor]) -> String {
    if states.is_empty() {
        return "none".into();
    }
    states
        .iter()
        .map(|p| {
            format!(
                "PS{} {:.2} W{}, entry {} µs, exit {} µs",
                p.index,
                p.power_uw_max as f64 * 1e-6,
                if p.operational {
                    ""
                } else {
                    " non-operational"
                },
                p.latency_us_entry,
                p.latency_us_exit
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The first `N` bytes of `bytes` as an array, or why not.
fn structure<'a, const N: usize>(
    what: &'static str,
    bytes: &'a [u8],
) -> Result<&'a [u8; N], NvmeParseError> {
    bytes
        .get(..N)
        .and_then(|b| b.try_into().ok())
        .ok_or(NvmeParseError::Short {
            what,
            got: bytes.len(),
            need: N,
        })
}

fn le16<const N: usize>(b: &[u8; N], at: usize) -> u16 {
    let mut v = [0u8; 2];
    v.copy_from_slice(&b[at..at + 2]);
    u16::from_le_bytes(v)
}

fn le32<const N: usize>(b: &[u8; N], at: usize) -> u32 {
    let mut v = [0u8; 4];
    v.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(v)
}

fn le64<const N: usize>(b: &[u8; N], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

/// A 128-bit counter, saturated to 64 bits.
fn le128_sat<const N: usize>(b: &[u8; N], at: usize) -> u64 {
    let mut v = [0u8; 16];
    v.copy_from_slice(&b[at..at + 16]);
    u64::try_from(u128::from_le_bytes(v)).unwrap_or(u64::MAX)
}

/// An ASCII field: trailing spaces (and NULs, which some firmware pads with) trimmed; any byte
/// outside printable ASCII becomes `?`, so a report or terminal never shows control bytes.
fn ascii(field: &[u8]) -> String {
    let end = field
        .iter()
        .rposition(|&c| c != b' ' && c != 0)
        .map_or(0, |i| i + 1);
    field[..end]
        .iter()
        .map(|&c| {
            if (0x20..=0x7e).contains(&c) {
                c as char
            } else {
                '?'
            }
        })
        .collect()
}

/// Kelvins (a temperature field) as degrees Celsius, less 273 as nvme-cli and the spec's
/// examples do.
fn celsius(kelvin: u16) -> i32 {
    i32::from(kelvin) - 273
}

/// A power field in its scale (00b not reported, 01b 0.0001 W, 10b 0.01 W; 11b reserved) as
/// microwatts.
fn scaled_power_uw(value: u16, scale: u8) -> Option<u64> {
    match scale {
        0b01 => Some(u64::from(value) * 100),
        0b10 => Some(u64::from(value) * 10_000),
        _ => None,
    }
}

/// Parses an Identify Controller data structure (CNS 01h).
pub fn parse_identify_controller(bytes: &[u8]) -> Result<IdentifyController, NvmeParseError> {
    const WHAT: &str = "Identify Controller";
    let b = structure::<IDENTIFY_BYTES>(WHAT, bytes)?;
    // NPSS (byte 263) is 0's based: the number of the deepest state; the table has 32 entries.
    let npss = usize::from(b[263]);
    if npss >= POWER_STATES_MAX {
        return Err(NvmeParseError::Invalid {
            what: WHAT,
            why: format!("NPSS {npss} names more than the {POWER_STATES_MAX} power states"),
        });
    }
    let power_states = (0..=npss)
        .map(|i| parse_power_state(i as u8, b, 2048 + 32 * i))
        .collect();
    let ver = le32(b, 80);
    let temp = |k: u16| (k != 0).then(|| celsius(k));
    let tnvmcap = le128_sat(b, 280);
    Ok(IdentifyController {
        vendor_id: le16(b, 0),
        subsystem_vendor_id: le16(b, 2),
        serial: ascii(&b[4..24]),
        model: ascii(&b[24..64]),
        firmware: ascii(&b[64..72]),
        controller_id: le16(b, 78),
        version: (ver != 0).then(|| format!("{}.{}.{}", ver >> 16, (ver >> 8) & 0xff, ver & 0xff)),
        namespaces_max: le32(b, 516),
        volatile_write_cache: b[525] & 1 != 0,
        apst_supported: b[265] & 1 != 0,
        temperature_c_warning: temp(le16(b, 266)),
        temperature_c_critical: temp(le16(b, 268)),
        capacity_bytes_total: (tnvmcap != 0).then_some(tnvmcap),
        power_states,
    })
}

/// One power state descriptor at `at` (32 bytes inside `b`).
fn parse_power_state(index: u8, b: &[u8; IDENTIFY_BYTES], at: usize) -> PowerStateDescriptor {
    let flags = b[at + 3];
    let mp = u64::from(le16(b, at));
    PowerStateDescriptor {
        index,
        // MXPS: 0 = units of 0.01 W (10,000 uW), 1 = 0.0001 W (100 uW).
        power_uw_max: mp * if flags & 1 != 0 { 100 } else { 10_000 },
        operational: flags & 0b10 == 0,
        latency_us_entry: le32(b, at + 4),
        latency_us_exit: le32(b, at + 8),
        power_uw_idle: scaled_power_uw(le16(b, at + 16), b[at + 18] >> 6),
        power_uw_active: scaled_power_uw(le16(b, at + 20), b[at + 22] >> 6),
    }
}

/// Parses an Identify Namespace data structure (CNS 00h, NVM command set).
pub fn parse_identify_namespace(bytes: &[u8]) -> Result<IdentifyNamespace, NvmeParseError> {
    const WHAT: &str = "Identify Namespace";
    let b = structure::<IDENTIFY_BYTES>(WHAT, bytes)?;
    let nlbaf = usize::from(b[25]);
    if nlbaf >= LBA_FORMATS_MAX {
        return Err(NvmeParseError::Invalid {
            what: WHAT,
            why: format!("NLBAF {nlbaf} names more than the {LBA_FORMATS_MAX} LBA formats"),
        });
    }
    let flbas = b[26];
    let in_use = (flbas & 0x0f) | (((flbas >> 5) & 0b11) << 4);
    if usize::from(in_use) > nlbaf {
        return Err(NvmeParseError::Invalid {
            what: WHAT,
            why: format!("the LBA format in use ({in_use}) is past the last one (NLBAF {nlbaf})"),
        });
    }
    let lba_formats: Vec<LbaFormat> = (0..=nlbaf)
        .map(|i| {
            let at = 128 + 4 * i;
            let lbads = b[at + 2];
            LbaFormat {
                index: i as u8,
                data_bytes: (9..=31).contains(&lbads).then(|| 1u32 << lbads),
                metadata_bytes: le16(b, at),
                relative_performance: b[at + 3] & 0b11,
            }
        })
        .collect();
    let block_bytes = lba_formats[usize::from(in_use)].data_bytes;
    let bytes_of = |blocks: u64| block_bytes.and_then(|s| blocks.checked_mul(u64::from(s)));
    let (size_blocks, capacity_blocks) = (le64(b, 0), le64(b, 8));
    Ok(IdentifyNamespace {
        size_blocks,
        capacity_blocks,
        utilization_blocks: le64(b, 16),
        lba_format_in_use: in_use,
        lba_formats,
        block_bytes,
        size_bytes: bytes_of(size_blocks),
        capacity_bytes: bytes_of(capacity_blocks),
    })
}

/// Parses a namespace list (CNS 02h): up to 1024 namespace IDs, increasing, the unused entries
/// zero.
pub fn parse_namespace_list(bytes: &[u8]) -> Result<Vec<u32>, NvmeParseError> {
    const WHAT: &str = "active namespace list";
    let b = structure::<IDENTIFY_BYTES>(WHAT, bytes)?;
    let mut ids: Vec<u32> = Vec::new();
    for k in 0..IDENTIFY_BYTES / 4 {
        let id = le32(b, 4 * k);
        if id == 0 {
            break;
        }
        if id == u32::MAX || ids.last().is_some_and(|&last| id <= last) {
            return Err(NvmeParseError::Invalid {
                what: WHAT,
                why: format!("entry {k} ({id:#x}) is not a namespace ID after {ids:?}"),
            });
        }
        ids.push(id);
    }
    Ok(ids)
}

/// The names of a Critical Warning's set bits (bits 0 to 5; 6 and 7 are reserved).
pub fn critical_warning_names(bits: u8) -> Vec<String> {
    const NAMES: [&str; 6] = [
        "available spare below threshold",
        "temperature outside its thresholds",
        "reliability degraded by media or internal errors",
        "media placed in read-only mode",
        "volatile memory backup failed",
        "persistent memory region read-only or unreliable",
    ];
    let mut v: Vec<String> = NAMES
        .iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .map(|(_, n)| n.to_string())
        .collect();
    if bits & 0xc0 != 0 {
        v.push(format!("reserved bits {:#04x}", bits & 0xc0));
    }
    v
}

/// Parses a SMART / Health Information log page (Log Identifier 02h).
pub fn parse_smart_log(bytes: &[u8]) -> Result<SmartLog, NvmeParseError> {
    let b = structure::<SMART_LOG_BYTES>("SMART / Health Information log", bytes)?;
    Ok(SmartLog {
        critical_warning: b[0],
        critical_warnings: critical_warning_names(b[0]),
        temperature_c_composite: celsius(le16(b, 1)),
        available_spare_pct: b[3],
        available_spare_pct_threshold: b[4],
        endurance_used_pct: b[5],
        data_units_read: le128_sat(b, 32),
        data_units_written: le128_sat(b, 48),
        host_read_commands: le128_sat(b, 64),
        host_write_commands: le128_sat(b, 80),
        controller_busy_min: le128_sat(b, 96),
        power_cycles: le128_sat(b, 112),
        power_on_hours: le128_sat(b, 128),
        unsafe_shutdowns: le128_sat(b, 144),
        media_errors: le128_sat(b, 160),
        error_log_entries: le128_sat(b, 176),
        temperature_warning_min: le32(b, 192),
        temperature_critical_min: le32(b, 196),
    })
}

impl SmartLog {
    /// What changed from `self` to `later`; `None` when a counter went down (a different
    /// device, or one that was reset in between).
    pub fn delta(&self, later: &SmartLog) -> Option<SmartDelta> {
        let d = |a: u64, b: u64| b.checked_sub(a);
        let data_units_read = d(self.data_units_read, later.data_units_read)?;
        let data_units_written = d(self.data_units_written, later.data_units_written)?;
        Some(SmartDelta {
            host_read_commands: d(self.host_read_commands, later.host_read_commands)?,
            host_write_commands: d(self.host_write_commands, later.host_write_commands)?,
            data_units_read,
            data_units_written,
            read_bytes: data_units_read.saturating_mul(DATA_UNIT_BYTES),
            written_bytes: data_units_written.saturating_mul(DATA_UNIT_BYTES),
            controller_busy_min: d(self.controller_busy_min, later.controller_busy_min)?,
            media_errors: d(self.media_errors, later.media_errors)?,
            error_log_entries: d(self.error_log_entries, later.error_log_entries)?,
            unsafe_shutdowns: d(self.unsafe_shutdowns, later.unsafe_shutdowns)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn put(b: &mut [u8], at: usize, v: &[u8]) {
        b[at..at + v.len()].copy_from_slice(v);
    }

    /// An Identify Controller shaped like QEMU's emulated one (hw/nvme/ctrl.c: PS0 with MP
    /// 0x9c4, ENLAT 0x10, EXLAT 0x4; VWC 07h), with two more power states: PS1 operational at
    /// the 0.0001 W scale, PS2 non-operational, and APST supported.
    fn controller_bytes() -> Vec<u8> {
        let mut b = vec![0u8; IDENTIFY_BYTES];
        put(&mut b, 0, &0x1b36u16.to_le_bytes()); // VID (Red Hat)
        put(&mut b, 2, &0x1af4u16.to_le_bytes()); // SSVID
        put(&mut b, 4, b"deadbeef            "); // SN, 20 bytes, space padded
        put(&mut b, 24, format!("{:<40}", "QEMU NVMe Ctrl").as_bytes()); // MN
        put(&mut b, 64, b"7.2.0   "); // FR
        put(&mut b, 78, &7u16.to_le_bytes()); // CNTLID
        put(&mut b, 80, &0x0001_0400u32.to_le_bytes()); // VER 1.4.0
        b[263] = 2; // NPSS: three states
        b[265] = 1; // APSTA
        put(&mut b, 266, &343u16.to_le_bytes()); // WCTEMP 70 C
        put(&mut b, 268, &373u16.to_le_bytes()); // CCTEMP 100 C
        put(&mut b, 280, &(1u128 << 40).to_le_bytes()); // TNVMCAP 1 TiB
        put(&mut b, 516, &256u32.to_le_bytes()); // NN
        b[525] = 0b111; // VWC present (bits 2:1 are flush behaviour)
        // PS0: MP 0x9c4 = 2500 x 0.01 W = 25 W, ENLAT 16 us, EXLAT 4 us.
        put(&mut b, 2048, &0x9c4u16.to_le_bytes());
        put(&mut b, 2048 + 4, &16u32.to_le_bytes());
        put(&mut b, 2048 + 8, &4u32.to_le_bytes());
        // PS1: MP 35000 x 0.0001 W = 3.5 W (MXPS set), idle 0.5 W (IPS 10b), active 3 W
        // (APS 01b: 30000 x 0.0001 W).
        let ps1 = 2048 + 32;
        put(&mut b, ps1, &35_000u16.to_le_bytes());
        b[ps1 + 3] = 0b01;
        put(&mut b, ps1 + 4, &50u32.to_le_bytes());
        put(&mut b, ps1 + 8, &60u32.to_le_bytes());
        put(&mut b, ps1 + 16, &50u16.to_le_bytes());
        b[ps1 + 18] = 0b10 << 6;
        put(&mut b, ps1 + 20, &30_000u16.to_le_bytes());
        b[ps1 + 22] = 0b01 << 6;
        // PS2: non-operational, 5 mW (MP 50, MXPS 1), ENLAT 2000 us, EXLAT 8000 us.
        let ps2 = 2048 + 64;
        put(&mut b, ps2, &50u16.to_le_bytes());
        b[ps2 + 3] = 0b11;
        put(&mut b, ps2 + 4, &2000u32.to_le_bytes());
        put(&mut b, ps2 + 8, &8000u32.to_le_bytes());
        b
    }

    #[test]
    fn identify_controller_fields_at_their_offsets() {
        let c = parse_identify_controller(&controller_bytes()).unwrap();
        assert_eq!(c.vendor_id, 0x1b36);
        assert_eq!(c.subsystem_vendor_id, 0x1af4);
        assert_eq!(c.serial, "deadbeef");
        assert_eq!(c.model, "QEMU NVMe Ctrl");
        assert_eq!(c.firmware, "7.2.0");
        assert_eq!(c.controller_id, 7);
        assert_eq!(c.version.as_deref(), Some("1.4.0"));
        assert_eq!(c.namespaces_max, 256);
        assert!(c.volatile_write_cache);
        assert!(c.apst_supported);
        assert_eq!(c.temperature_c_warning, Some(70));
        assert_eq!(c.temperature_c_critical, Some(100));
        assert_eq!(c.capacity_bytes_total, Some(1 << 40));
        assert_eq!(c.power_states.len(), 3);
        let ps = &c.power_states;
        assert_eq!(
            ps[0],
            PowerStateDescriptor {
                index: 0,
                power_uw_max: 25_000_000,
                operational: true,
                latency_us_entry: 16,
                latency_us_exit: 4,
                power_uw_idle: None,
                power_uw_active: None,
            }
        );
        assert_eq!(ps[1].power_uw_max, 3_500_000);
        assert!(ps[1].operational);
        assert_eq!(ps[1].power_uw_idle, Some(500_000));
        assert_eq!(ps[1].power_uw_active, Some(3_000_000));
        assert_eq!(ps[2].power_uw_max, 5_000);
        assert!(!ps[2].operational);
        assert_eq!(
            (ps[2].latency_us_entry, ps[2].latency_us_exit),
            (2000, 8000)
        );
        let text = power_states_text(ps);
        assert!(
            text.starts_with("PS0 25.00 W, entry 16 µs, exit 4 µs"),
            "{text}"
        );
        assert!(text.contains("PS2 0.01 W non-operational, entry 2000 µs, exit 8000 µs"));
    }

    #[test]
    fn identify_controller_edges() {
        let mut b = controller_bytes();
        // No version, no thresholds, no capacity, NUL-padded and hostile strings.
        put(&mut b, 80, &0u32.to_le_bytes());
        put(&mut b, 266, &[0; 4]);
        put(&mut b, 280, &[0; 16]);
        put(&mut b, 4, &[0u8; 20]);
        put(&mut b, 24, b"A\x1b[2J\xff  ");
        b[32..64].fill(0);
        b[525] = 0;
        b[265] = 0;
        b[263] = 0;
        let c = parse_identify_controller(&b).unwrap();
        assert_eq!(c.version, None);
        assert_eq!(
            (c.temperature_c_warning, c.temperature_c_critical),
            (None, None)
        );
        assert_eq!(c.capacity_bytes_total, None);
        assert_eq!(c.serial, "");
        assert_eq!(c.model, "A?[2J?");
        assert!(!c.volatile_write_cache && !c.apst_supported);
        assert_eq!(c.power_states.len(), 1);
        // 31 is the deepest state a 32-entry table holds; 32 is not.
        b[263] = 31;
        assert_eq!(
            parse_identify_controller(&b).unwrap().power_states.len(),
            32
        );
        b[263] = 32;
        assert!(matches!(
            parse_identify_controller(&b),
            Err(NvmeParseError::Invalid { .. })
        ));
        // A saturated capacity.
        b[263] = 0;
        put(&mut b, 280, &u128::MAX.to_le_bytes());
        assert_eq!(
            parse_identify_controller(&b).unwrap().capacity_bytes_total,
            Some(u64::MAX)
        );
        assert_eq!(
            parse_identify_controller(&b[..4095]),
            Err(NvmeParseError::Short {
                what: "Identify Controller",
                got: 4095,
                need: 4096
            })
        );
    }

    /// A namespace of 2^21 blocks with two formats, 512 + 0 and 4096 + 8 (best), the second in
    /// use.
    fn namespace_bytes() -> Vec<u8> {
        let mut b = vec![0u8; IDENTIFY_BYTES];
        put(&mut b, 0, &(1u64 << 21).to_le_bytes()); // NSZE
        put(&mut b, 8, &((1u64 << 21) - 8).to_le_bytes()); // NCAP
        put(&mut b, 16, &1000u64.to_le_bytes()); // NUSE
        b[25] = 1; // NLBAF: two formats
        b[26] = 1; // FLBAS: format 1
        // LBAF0: MS 0, LBADS 9 (512), RP 2 (good).
        put(&mut b, 128, &[0, 0, 9, 2]);
        // LBAF1: MS 8, LBADS 12 (4096), RP 0 (best).
        put(&mut b, 132, &[8, 0, 12, 0]);
        b
    }

    #[test]
    fn identify_namespace_fields_at_their_offsets() {
        let n = parse_identify_namespace(&namespace_bytes()).unwrap();
        assert_eq!(n.size_blocks, 1 << 21);
        assert_eq!(n.capacity_blocks, (1 << 21) - 8);
        assert_eq!(n.utilization_blocks, 1000);
        assert_eq!(n.lba_format_in_use, 1);
        assert_eq!(
            n.lba_formats,
            vec![
                LbaFormat {
                    index: 0,
                    data_bytes: Some(512),
                    metadata_bytes: 0,
                    relative_performance: 2
                },
                LbaFormat {
                    index: 1,
                    data_bytes: Some(4096),
                    metadata_bytes: 8,
                    relative_performance: 0
                },
            ]
        );
        assert_eq!(n.block_bytes, Some(4096));
        assert_eq!(n.size_bytes, Some(8 << 30));
        assert_eq!(n.capacity_bytes, Some((8 << 30) - 8 * 4096));
    }

    #[test]
    fn identify_namespace_edges() {
        let mut b = namespace_bytes();
        // FLBAS bits 6:5 are the format index's bits 5:4: 0b01 << 5 | 1 = format 17.
        b[25] = 20;
        b[26] = 0b0010_0001;
        put(&mut b, 128 + 4 * 17, &[0, 0, 13, 1]);
        let n = parse_identify_namespace(&b).unwrap();
        assert_eq!((n.lba_format_in_use, n.block_bytes), (17, Some(8192)));
        assert_eq!(n.lba_formats.len(), 21);
        // An unsupported format (LBADS below 9) and a format past the table.
        b[26] = 2;
        let n = parse_identify_namespace(&b).unwrap();
        assert_eq!((n.block_bytes, n.size_bytes), (None, None));
        b[26] = 0x0f;
        b[25] = 3;
        assert!(parse_identify_namespace(&b).is_err());
        b[25] = 64;
        assert!(parse_identify_namespace(&b).is_err());
        // LBADS 32 would not fit a u32: no size.
        b[25] = 0;
        b[26] = 0;
        b[130] = 32;
        assert_eq!(parse_identify_namespace(&b).unwrap().block_bytes, None);
        // A size past 2^64 bytes.
        b[130] = 12;
        put(&mut b, 0, &u64::MAX.to_le_bytes());
        assert_eq!(parse_identify_namespace(&b).unwrap().size_bytes, None);
        // An inactive namespace reads as zeros: valid, empty.
        let z = parse_identify_namespace(&[0u8; IDENTIFY_BYTES]).unwrap();
        assert_eq!((z.size_blocks, z.block_bytes), (0, None));
    }

    #[test]
    fn namespace_list() {
        let mut b = vec![0u8; IDENTIFY_BYTES];
        for (k, id) in [1u32, 2, 7].iter().enumerate() {
            put(&mut b, 4 * k, &id.to_le_bytes());
        }
        assert_eq!(parse_namespace_list(&b).unwrap(), vec![1, 2, 7]);
        assert_eq!(
            parse_namespace_list(&[0u8; 4096]).unwrap(),
            Vec::<u32>::new()
        );
        // Full: 1024 entries.
        let full: Vec<u8> = (1..=1024u32).flat_map(u32::to_le_bytes).collect();
        assert_eq!(parse_namespace_list(&full).unwrap().len(), 1024);
        // Not increasing, or the broadcast ID.
        put(&mut b, 12, &5u32.to_le_bytes());
        assert!(parse_namespace_list(&b).is_err());
        put(&mut b, 12, &u32::MAX.to_le_bytes());
        assert!(parse_namespace_list(&b).is_err());
        assert!(matches!(
            parse_namespace_list(&b[..100]),
            Err(NvmeParseError::Short { got: 100, .. })
        ));
    }

    fn smart_bytes(host_writes: u128) -> Vec<u8> {
        let mut b = vec![0u8; SMART_LOG_BYTES];
        b[0] = 0b0000_0101; // spare below threshold, reliability degraded
        put(&mut b, 1, &310u16.to_le_bytes()); // 37 C
        b[3] = 97;
        b[4] = 10;
        b[5] = 3;
        put(&mut b, 32, &1234u128.to_le_bytes());
        put(&mut b, 48, &5678u128.to_le_bytes());
        put(&mut b, 64, &100_000u128.to_le_bytes());
        put(&mut b, 80, &host_writes.to_le_bytes());
        put(&mut b, 96, &42u128.to_le_bytes());
        put(&mut b, 112, &9u128.to_le_bytes());
        put(&mut b, 128, &20_000u128.to_le_bytes());
        put(&mut b, 144, &4u128.to_le_bytes());
        put(&mut b, 160, &1u128.to_le_bytes());
        put(&mut b, 176, &2u128.to_le_bytes());
        put(&mut b, 192, &11u32.to_le_bytes());
        put(&mut b, 196, &12u32.to_le_bytes());
        b
    }

    #[test]
    fn smart_log_fields_at_their_offsets() {
        let s = parse_smart_log(&smart_bytes(200_000)).unwrap();
        assert_eq!(s.critical_warning, 5);
        assert_eq!(
            s.critical_warnings,
            vec![
                "available spare below threshold",
                "reliability degraded by media or internal errors"
            ]
        );
        assert_eq!(s.temperature_c_composite, 37);
        assert_eq!(
            (s.available_spare_pct, s.available_spare_pct_threshold),
            (97, 10)
        );
        assert_eq!(s.endurance_used_pct, 3);
        assert_eq!((s.data_units_read, s.data_units_written), (1234, 5678));
        assert_eq!(
            (s.host_read_commands, s.host_write_commands),
            (100_000, 200_000)
        );
        assert_eq!(s.controller_busy_min, 42);
        assert_eq!(s.power_cycles, 9);
        assert_eq!(s.power_on_hours, 20_000);
        assert_eq!(s.unsafe_shutdowns, 4);
        assert_eq!(s.media_errors, 1);
        assert_eq!(s.error_log_entries, 2);
        assert_eq!(
            (s.temperature_warning_min, s.temperature_critical_min),
            (11, 12)
        );
        // 128-bit counters saturate; a log of zeros is 0 K, -273 C.
        let big = parse_smart_log(&smart_bytes(u128::MAX)).unwrap();
        assert_eq!(big.host_write_commands, u64::MAX);
        assert_eq!(
            parse_smart_log(&[0u8; 512])
                .unwrap()
                .temperature_c_composite,
            -273
        );
        assert!(parse_smart_log(&[0u8; 511]).is_err());
        assert_eq!(critical_warning_names(0xc0), vec!["reserved bits 0xc0"]);
    }

    #[test]
    fn smart_delta_counts_the_run() {
        let before = parse_smart_log(&smart_bytes(200_000)).unwrap();
        let mut after = parse_smart_log(&smart_bytes(200_512)).unwrap();
        after.data_units_written += 3;
        let d = before.delta(&after).unwrap();
        assert_eq!(d.host_write_commands, 512);
        assert_eq!(d.host_read_commands, 0);
        assert_eq!(d.data_units_written, 3);
        assert_eq!(d.written_bytes, 3 * 512_000);
        // A counter that went down: no delta.
        assert_eq!(after.delta(&before), None);
    }

    #[test]
    fn report_round_trips_and_summarises() {
        let r = NvmeReport {
            device: "/dev/nvme0n1".into(),
            controller: parse_identify_controller(&controller_bytes()).unwrap(),
            nsid: Some(1),
            namespace: Some(parse_identify_namespace(&namespace_bytes()).unwrap()),
            active_namespaces: Some(vec![1]),
            smart_before: Some(parse_smart_log(&smart_bytes(1)).unwrap()),
            smart_after: None,
            smart_delta: None,
            notes: vec!["SMART log after the run: status 0x4002".into()],
        };
        let text = serde_json::to_string(&r).unwrap();
        for key in [
            "\"power_uw_max\":25000000",
            "\"latency_us_entry\":16",
            "\"latency_us_exit\":4",
            "\"volatile_write_cache\":true",
            "\"temperature_c_composite\":37",
        ] {
            assert!(text.contains(key), "{key} in {text}");
        }
        assert!(!text.contains("smart_after"));
        let back: NvmeReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        let s = r.summary();
        assert!(
            s.starts_with("/dev/nvme0n1: QEMU NVMe Ctrl (firmware 7.2.0, serial deadbeef), volatile write cache yes, APST supported; power states: PS0 25.00 W"),
            "{s}"
        );
    }

    proptest! {
        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4200)) {
            let _ = parse_identify_controller(&bytes);
            let _ = parse_identify_namespace(&bytes);
            let _ = parse_namespace_list(&bytes);
            let _ = parse_smart_log(&bytes);
        }

        /// Random bytes at full size: every structure either parses or says why, and what
        /// parses holds the table's invariants.
        #[test]
        fn full_size_structures_hold_their_invariants(
            bytes in proptest::collection::vec(any::<u8>(), IDENTIFY_BYTES..=IDENTIFY_BYTES),
            npss in 0u8..40,
            nlbaf in 0u8..70,
            flbas in any::<u8>(),
        ) {
            let mut b = bytes;
            b[263] = npss;
            match parse_identify_controller(&b) {
                Ok(c) => {
                    prop_assert_eq!(c.power_states.len(), usize::from(npss) + 1);
                    prop_assert!(c.model.bytes().all(|x| (0x20..=0x7e).contains(&x)));
                    prop_assert!(!c.serial.ends_with(' '));
                    let _ = power_states_text(&c.power_states);
                }
                Err(_) => prop_assert!(usize::from(npss) >= POWER_STATES_MAX),
            }
            b[25] = nlbaf;
            b[26] = flbas;
            if let Ok(n) = parse_identify_namespace(&b) {
                prop_assert_eq!(n.lba_formats.len(), usize::from(nlbaf) + 1);
                prop_assert!(usize::from(n.lba_format_in_use) <= usize::from(nlbaf));
                if let (Some(s), Some(bb)) = (n.size_bytes, n.block_bytes) {
                    prop_assert_eq!(s / u64::from(bb), n.size_blocks);
                }
            }
            if let Ok(ids) = parse_namespace_list(&b) {
                prop_assert!(ids.windows(2).all(|w| w[0] < w[1]));
            }
            let s = parse_smart_log(&b).unwrap();
            let _ = s.delta(&s.clone()).unwrap();
        }
    }
}
