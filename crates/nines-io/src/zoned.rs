//! Host-managed zoned block devices through the Linux zoned block API: NVMe ZNS namespaces
//! (`/dev/nvmeXnY` with `queue/zoned = host-managed`) and host-managed SMR disks.
//!
//! Three parts (docs/arch-zoned.md, "Real zoned block devices"):
//!
//! - **Geometry**: sysfs `queue/zoned`, `chunk_sectors` (the zone size), `nr_zones`,
//!   `max_open_zones`, `max_active_zones` ([`parse_queue`], [`read_queue`]) and the kernel's zone
//!   report (`BLKREPORTZONE`: start, length, capacity, write pointer, type and condition of every
//!   zone; [`parse_report`], [`report_zones`]) give a [`ZoneGeometry`] ([`geometry`]): the zone
//!   size, the zone *capacity* (the writable bytes from a zone's start: below the size on ZNS),
//!   the limits, and each zone's write pointer. Every parser takes bytes or text and returns a
//!   typed error for anything it does not accept: nothing here panics on what a device or a
//!   kernel says (property-tested below).
//! - **Zone management**: reset, open, close and finish by `BLKRESETZONE`, `BLKOPENZONE`,
//!   `BLKCLOSEZONE` and `BLKFINISHZONE` ([`zone_mgmt`]); they need a descriptor open for
//!   writing, which `Target::open` gives only past the write-safety checks.
//! - **Ordering** ([`ZoneSeq`], sans-IO): the writes, zone appends, resets and finishes of one
//!   member, at most one in flight per zone and the rest queued per zone in the order the
//!   volume sent them, each checked against a write pointer the host keeps. Why: nothing below
//!   nines keeps writes to a zone in order. io_uring may hand a block write that would block to
//!   an io-wq worker, and several workers reorder what one ring submitted; an NVMe namespace
//!   has several hardware queues; and the scheduler is `none` on NVMe ZNS namespaces (Debian's
//!   6.1 kernel in the QEMU guest picks it), so mq-deadline's zone write locking, which only
//!   orders what reaches it in order, is not even there. One write in flight per zone is what
//!   that locking itself allows, so it costs no more than the kernel would.
//!
//! **Zone append**: Linux gives user space no zone append on a block device (`REQ_OP_ZONE_APPEND`
//! is for in-kernel users: zonefs, btrfs, f2fs). [`ZoneSeq`] emulates it: the append is a write
//! at the write pointer the host tracks for the zone, serialised with the zone's other writes,
//! and answered `CmdResult::Appended { offset_bytes }` with where it went, so the volume's
//! policy (serial's xGC) sees exactly what an `emu:` member answers. The alternative is a real
//! NVMe Zone Append (opcode 7Dh) through the passthrough character device `/dev/ngXnY`
//! (`IORING_OP_URING_CMD`), which takes any number in flight per zone and returns the LBA in
//! the completion: a separate engine (docs/arch-zoned.md, "A passthrough engine").

use std::io;
use std::os::fd::RawFd;
use std::path::Path;

use nines_array::{CmdOp, CmdResult, MemberCmd};

/// The unit of every zone ioctl and sysfs count: 512-byte sectors, whatever the logical block.
pub const SECTOR_BYTES: u64 = 512;
/// `struct blk_zone_report`'s header: `__u64 sector; __u32 nr_zones; __u32 flags`.
pub const REPORT_HEADER_BYTES: usize = 16;
/// `struct blk_zone`: start, len, wp (sectors), type, cond, non_seq, reset, resv[4],
/// capacity (sectors), reserved[24].
pub const ZONE_RECORD_BYTES: usize = 64;
/// `BLK_ZONE_REP_CAPACITY`: the report fills `capacity` (kernels from 5.9).
pub const REPORT_FLAG_CAPACITY: u32 = 1;
/// Zones asked for per `BLKREPORTZONE` call (a 256 KiB buffer).
const REPORT_BATCH: usize = 4096;
/// The most zones nines takes on one device (a bound on the report loop and its memory; a
/// 32 TB SMR disk with 256 MiB zones has 120 k, a 4 TB ZN540 3,688).
pub const ZONES_MAX: u64 = 1 << 22;

/// `_IOWR(0x12, 130, struct blk_zone_report)` and `_IOW(0x12, 131..136, struct blk_zone_range)`
/// from linux/blkzoned.h (the generic ioctl encoding: x86-64, arm64, riscv).
const BLKREPORTZONE: libc::c_ulong = 0xC010_1282;
const BLKRESETZONE: libc::c_ulong = 0x4010_1283;
const BLKOPENZONE: libc::c_ulong = 0x4010_1286;
const BLKCLOSEZONE: libc::c_ulong = 0x4010_1287;
const BLKFINISHZONE: libc::c_ulong = 0x4010_1288;

/// `queue/zoned`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZonedModel {
    /// A conventional device.
    None,
    /// Zones, but the device takes writes anywhere (nines treats it as conventional).
    HostAware,
    /// Sequential zones written only at their write pointers.
    HostManaged,
}

/// A zone's type (`enum blk_zone_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneType {
    Conventional,
    SeqWriteRequired,
    SeqWritePreferred,
}

/// A zone's condition (`enum blk_zone_cond`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneCond {
    NotWp,
    Empty,
    ImplicitOpen,
    ExplicitOpen,
    Closed,
    ReadOnly,
    Full,
    Offline,
}

/// One zone of a report, in bytes from the device's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Zone {
    pub start_bytes: u64,
    pub len_bytes: u64,
    /// Writable bytes from the start (the length where the kernel does not report it).
    pub capacity_bytes: u64,
    /// The write pointer as reported (meaningful for empty, open and closed zones).
    pub wp_bytes: u64,
    pub kind: ZoneType,
    pub cond: ZoneCond,
    /// The device recommends a reset (`reset`).
    pub reset_recommended: bool,
    /// Non-sequential write resources are in use (`non_seq`).
    pub non_seq: bool,
}

impl Zone {
    /// Bytes from the zone's start to where the next write goes: the capacity when full (or
    /// not writable), the write pointer's offset otherwise.
    pub fn written_bytes(&self) -> u64 {
        match self.cond {
            ZoneCond::Empty => 0,
            ZoneCond::ImplicitOpen | ZoneCond::ExplicitOpen | ZoneCond::Closed => self
                .wp_bytes
                .saturating_sub(self.start_bytes)
                .min(self.capacity_bytes),
            _ => self.capacity_bytes,
        }
    }
}

/// What sysfs `queue/` says of a device's zones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLimits {
    pub model: ZonedModel,
    /// The zone size in 512-byte sectors (0 on conventional devices).
    pub chunk_sectors: u64,
    pub nr_zones: u64,
    /// 0: no limit (also where the kernel has no such file).
    pub max_open_zones: u32,
    pub max_active_zones: u32,
    /// `max_sectors_kb` and `max_segments`: the largest request and its most scatter-gather
    /// segments (0: not known).
    pub max_sectors_kb: u64,
    pub max_segments: u64,
}

/// A host-managed device's zones as nines uses them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneGeometry {
    pub zone_size_bytes: u64,
    /// The capacity of every full-size sequential zone (they must agree).
    pub zone_capacity_bytes: u64,
    /// Zones in all (a smaller last zone counted).
    pub zones: u64,
    /// Conventional zones (written anywhere; SMR disks have some at the start, ZNS none).
    pub conventional_zones: u64,
    /// Zones that are offline or read-only (nothing can be written there).
    pub unwritable_zones: u64,
    /// 0: no limit.
    pub max_open_zones: u32,
    pub max_active_zones: u32,
    /// The largest write the block layer passes on as one request whatever the buffer's pages
    /// (0: not known): `max_sectors_kb`, and `max_segments` pages (a page-aligned buffer whose
    /// pages are not contiguous takes a segment each). A larger write is split into requests
    /// that nothing keeps in order on a zone (see [`ZoneSeq`]), so it is refused.
    pub max_write_bytes: u64,
}

/// A host-managed zoned block device as opened: its geometry and its zones when it was opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZonedDevice {
    pub geometry: ZoneGeometry,
    pub zones: Vec<Zone>,
}

impl ZonedDevice {
    /// One line for messages: "host-managed zoned, 4 zones of 64 MiB (48 MiB writable), at
    /// most 4 open and 6 active".
    pub fn describe(&self) -> String {
        let g = &self.geometry;
        let limit = |n: u32| {
            if n == 0 {
                "no limit on".to_string()
            } else {
                format!("at most {n}")
            }
        };
        format!(
            "host-managed zoned, {} zones of {} ({} writable), {} open and {} active zones",
            g.zones,
            size_text(g.zone_size_bytes),
            size_text(g.zone_capacity_bytes),
            limit(g.max_open_zones),
            limit(g.max_active_zones)
        )
    }
}

/// "64 MiB", "1077 MiB", "4 GiB", or bytes where that is not whole.
pub fn size_text(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

/// `bytes` as a size argument nines parses back: "48m", "2g", "4k", or the bytes.
pub fn size_arg(bytes: u64) -> String {
    for (shift, unit) in [(40, "t"), (30, "g"), (20, "m"), (10, "k")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Why zone geometry could not be read or used; every message says what it found.
#[derive(Debug, thiserror::Error)]
pub enum ZonedError {
    #[error("sysfs queue/{file} reads {text:?}; expected {expected}")]
    Sysfs {
        file: &'static str,
        text: String,
        expected: &'static str,
    },
    #[error("sysfs queue/{file} is missing (a zoned device without it is not one nines can use)")]
    Missing { file: &'static str },
    #[error("the zone report is {len} bytes, shorter than its {need}-byte header")]
    ReportShort { len: usize, need: usize },
    #[error("the zone report claims {claimed} zones but its buffer holds {room}")]
    ReportCount { claimed: u64, room: u64 },
    #[error("zone {index} of the report: {why}")]
    BadZone { index: u64, why: String },
    #[error("{0}")]
    Geometry(String),
    #[error("{what} failed: {error}")]
    Ioctl {
        what: &'static str,
        error: io::Error,
    },
}

/// `queue/zoned`'s text.
pub fn parse_model(text: &str) -> Result<ZonedModel, ZonedError> {
    match text.trim() {
        "none" => Ok(ZonedModel::None),
        "host-aware" => Ok(ZonedModel::HostAware),
        "host-managed" => Ok(ZonedModel::HostManaged),
        _ => Err(ZonedError::Sysfs {
            file: "zoned",
            text: clip(text),
            expected: "none, host-aware or host-managed",
        }),
    }
}

/// A decimal count of a sysfs file (surrounding whitespace allowed).
pub fn parse_count(file: &'static str, text: &str) -> Result<u64, ZonedError> {
    let t = text.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ZonedError::Sysfs {
            file,
            text: clip(text),
            expected: "a decimal count",
        });
    }
    t.parse::<u64>().map_err(|_| ZonedError::Sysfs {
        file,
        text: clip(text),
        expected: "a count below 2^64",
    })
}

/// At most 64 characters of what a file said, for a message.
fn clip(text: &str) -> String {
    text.chars().take(64).collect()
}

/// The zone limits from `read(file)`, which returns a `queue/` file's text or None when it is
/// not there. A device without `queue/zoned` is conventional; a zoned one must have
/// `chunk_sectors` and `nr_zones` (kernels before 5.9 lack the open/active limits: no limit).
pub fn parse_queue(
    read: &mut dyn FnMut(&'static str) -> Option<String>,
) -> Result<QueueLimits, ZonedError> {
    let model = match read("zoned") {
        None => ZonedModel::None,
        Some(t) => parse_model(&t)?,
    };
    if model == ZonedModel::None {
        return Ok(QueueLimits {
            model,
            chunk_sectors: 0,
            nr_zones: 0,
            max_open_zones: 0,
            max_active_zones: 0,
            max_sectors_kb: 0,
            max_segments: 0,
        });
    }
    let mut need = |file: &'static str| -> Result<u64, ZonedError> {
        let t = read(file).ok_or(ZonedError::Missing { file })?;
        parse_count(file, &t)
    };
    let chunk_sectors = need("chunk_sectors")?;
    let nr_zones = need("nr_zones")?;
    let mut limit = |file: &'static str| -> Result<u32, ZonedError> {
        match read(file) {
            None => Ok(0),
            Some(t) => {
                let n = parse_count(file, &t)?;
                u32::try_from(n).map_err(|_| ZonedError::Sysfs {
                    file,
                    text: clip(&t),
                    expected: "a count below 2^32",
                })
            }
        }
    };
    let max_open_zones = limit("max_open_zones")?;
    let max_active_zones = limit("max_active_zones")?;
    let mut known = |file: &'static str| -> Result<u64, ZonedError> {
        read(file).map_or(Ok(0), |t| parse_count(file, &t))
    };
    Ok(QueueLimits {
        model,
        chunk_sectors,
        nr_zones,
        max_open_zones,
        max_active_zones,
        max_sectors_kb: known("max_sectors_kb")?,
        max_segments: known("max_segments")?,
    })
}

/// The zone limits of block device `major:minor` from `sys_root` (`/sys` on a live system):
/// `dev/block/M:m/queue/`, or its disk's for a partition.
pub fn read_queue(sys_root: &Path, major: u32, minor: u32) -> Result<QueueLimits, ZonedError> {
    let dev = sys_root.join(format!("dev/block/{major}:{minor}"));
    let queue = if dev.join("queue").is_dir() {
        dev.join("queue")
    } else {
        dev.join("../queue")
    };
    parse_queue(&mut |file| {
        // sysfs files are a page at most; a bound in case the root is not sysfs.
        nines_core::input::read_to_string(&queue.join(file), 4096).ok()
    })
}

fn u64_at(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_ne_bytes(b)
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_ne_bytes(b)
}

/// The header of a `struct blk_zone_report` (native byte order, as the kernel writes it):
/// the zones it holds and its flags.
pub fn parse_report_header(buf: &[u8]) -> Result<(u32, u32), ZonedError> {
    if buf.len() < REPORT_HEADER_BYTES {
        return Err(ZonedError::ReportShort {
            len: buf.len(),
            need: REPORT_HEADER_BYTES,
        });
    }
    let nr = u32_at(buf, 8);
    let flags = u32_at(buf, 12);
    let room = ((buf.len() - REPORT_HEADER_BYTES) / ZONE_RECORD_BYTES) as u64;
    if u64::from(nr) > room {
        return Err(ZonedError::ReportCount {
            claimed: u64::from(nr),
            room,
        });
    }
    Ok((nr, flags))
}

/// One `struct blk_zone` record (64 bytes, sectors), checked; `index` names it in errors.
pub fn parse_zone(rec: &[u8], flags: u32, index: u64) -> Result<Zone, ZonedError> {
    let bad = |why: String| ZonedError::BadZone { index, why };
    if rec.len() < ZONE_RECORD_BYTES {
        return Err(bad(format!("{} bytes, not {ZONE_RECORD_BYTES}", rec.len())));
    }
    let bytes = |sectors: u64, what: &str| {
        sectors
            .checked_mul(SECTOR_BYTES)
            .ok_or_else(|| bad(format!("its {what} ({sectors} sectors) overflows")))
    };
    let start_bytes = bytes(u64_at(rec, 0), "start")?;
    let len_bytes = bytes(u64_at(rec, 8), "length")?;
    let kind = match rec[24] {
        1 => ZoneType::Conventional,
        2 => ZoneType::SeqWriteRequired,
        3 => ZoneType::SeqWritePreferred,
        t => return Err(bad(format!("unknown type {t}"))),
    };
    let cond = match rec[25] {
        0x0 => ZoneCond::NotWp,
        0x1 => ZoneCond::Empty,
        0x2 => ZoneCond::ImplicitOpen,
        0x3 => ZoneCond::ExplicitOpen,
        0x4 => ZoneCond::Closed,
        0xD => ZoneCond::ReadOnly,
        0xE => ZoneCond::Full,
        0xF => ZoneCond::Offline,
        c => return Err(bad(format!("unknown condition {c:#x}"))),
    };
    if len_bytes == 0 {
        return Err(bad("its length is 0".into()));
    }
    let end = start_bytes
        .checked_add(len_bytes)
        .ok_or_else(|| bad("it ends past 2^64 bytes".into()))?;
    let capacity_bytes = if flags & REPORT_FLAG_CAPACITY != 0 {
        bytes(u64_at(rec, 32), "capacity")?
    } else {
        len_bytes
    };
    if capacity_bytes > len_bytes {
        return Err(bad(format!(
            "its capacity ({capacity_bytes} bytes) exceeds its length ({len_bytes})"
        )));
    }
    // The write pointer means something only where the zone is written sequentially and is
    // neither full nor unusable (the kernel reports other values there).
    let wp_sectors = u64_at(rec, 16);
    let wp_bytes = wp_sectors.saturating_mul(SECTOR_BYTES);
    let tracked = matches!(
        cond,
        ZoneCond::Empty | ZoneCond::ImplicitOpen | ZoneCond::ExplicitOpen | ZoneCond::Closed
    );
    if tracked {
        if kind == ZoneType::Conventional {
            return Err(bad(format!("a conventional zone in condition {cond:?}")));
        }
        let top = start_bytes + capacity_bytes;
        if wp_sectors.checked_mul(SECTOR_BYTES).is_none()
            || wp_bytes < start_bytes
            || wp_bytes > top
        {
            return Err(bad(format!(
                "its write pointer (sector {wp_sectors}) is outside its writable range \
                 {start_bytes}..={top} bytes"
            )));
        }
        if cond == ZoneCond::Empty && wp_bytes != start_bytes {
            return Err(bad(format!(
                "empty, but its write pointer (sector {wp_sectors}) is not its start"
            )));
        }
    }
    let _ = end;
    Ok(Zone {
        start_bytes,
        len_bytes,
        capacity_bytes,
        wp_bytes,
        kind,
        cond,
        reset_recommended: rec[27] != 0,
        non_seq: rec[26] != 0,
    })
}

/// Every zone of a `struct blk_zone_report` buffer appended to `zones`; returns how many.
/// `first_index` numbers them in errors.
pub fn parse_report(
    buf: &[u8],
    first_index: u64,
    zones: &mut Vec<Zone>,
) -> Result<u32, ZonedError> {
    let (nr, flags) = parse_report_header(buf)?;
    for i in 0..nr as usize {
        let at = REPORT_HEADER_BYTES + i * ZONE_RECORD_BYTES;
        zones.push(parse_zone(
            &buf[at..at + ZONE_RECORD_BYTES],
            flags,
            first_index + i as u64,
        )?);
    }
    Ok(nr)
}

/// The geometry of a host-managed device from its limits and its whole report: zones of
/// `chunk_sectors`, contiguous from 0 to `device_bytes` (the last may be smaller), `nr_zones`
/// of them, and one capacity for every full-size sequential zone.
pub fn geometry(
    q: &QueueLimits,
    zones: &[Zone],
    device_bytes: u64,
) -> Result<ZoneGeometry, ZonedError> {
    let g = |m: String| Err(ZonedError::Geometry(m));
    if q.model != ZonedModel::HostManaged {
        return g(format!("the device is {:?}, not host-managed", q.model));
    }
    let Some(zone_size_bytes) = q.chunk_sectors.checked_mul(SECTOR_BYTES).filter(|&z| z > 0) else {
        return g(format!(
            "queue/chunk_sectors is {}: no usable zone size",
            q.chunk_sectors
        ));
    };
    if zones.is_empty() || zones.len() as u64 > ZONES_MAX {
        return g(format!(
            "the report holds {} zones (nines takes 1 to {ZONES_MAX})",
            zones.len()
        ));
    }
    if q.nr_zones != zones.len() as u64 {
        return g(format!(
            "queue/nr_zones says {} zones but the report holds {}",
            q.nr_zones,
            zones.len()
        ));
    }
    let last = zones.len() - 1;
    let mut capacity: Option<u64> = None;
    let (mut conventional_zones, mut unwritable_zones) = (0u64, 0u64);
    for (i, z) in zones.iter().enumerate() {
        let want = (i as u64).checked_mul(zone_size_bytes);
        if want != Some(z.start_bytes) {
            return g(format!(
                "zone {i} starts at byte {}, not at {} x the {zone_size_bytes}-byte zone size",
                z.start_bytes, i
            ));
        }
        if z.len_bytes != zone_size_bytes && !(i == last && z.len_bytes < zone_size_bytes) {
            return g(format!(
                "zone {i} is {} bytes long, not the {zone_size_bytes}-byte zone size",
                z.len_bytes
            ));
        }
        if z.kind == ZoneType::Conventional {
            conventional_zones += 1;
            continue;
        }
        if matches!(z.cond, ZoneCond::Offline | ZoneCond::ReadOnly) {
            unwritable_zones += 1;
        }
        if z.len_bytes == zone_size_bytes {
            match capacity {
                None => capacity = Some(z.capacity_bytes),
                Some(c) if c != z.capacity_bytes => {
                    return g(format!(
                        "zones of different capacities ({c} and {} bytes, zone {i}): nines \
                         needs one capacity for every zone",
                        z.capacity_bytes
                    ));
                }
                Some(_) => {}
            }
        }
    }
    let end = zones[last].start_bytes + zones[last].len_bytes;
    if end != device_bytes {
        return g(format!(
            "the zones end at byte {end} but the device is {device_bytes} bytes"
        ));
    }
    let Some(zone_capacity_bytes) = capacity.filter(|&c| c > 0) else {
        return g("no sequential zone of the full zone size with a capacity above 0".into());
    };
    Ok(ZoneGeometry {
        zone_size_bytes,
        zone_capacity_bytes,
        zones: zones.len() as u64,
        conventional_zones,
        unwritable_zones,
        max_open_zones: q.max_open_zones,
        max_active_zones: q.max_active_zones,
        max_write_bytes: max_write_bytes(q),
    })
}

/// [`ZoneGeometry::max_write_bytes`] from the queue's limits (4 KiB pages).
fn max_write_bytes(q: &QueueLimits) -> u64 {
    let by_sectors = q.max_sectors_kb.saturating_mul(1024);
    let by_segments = q.max_segments.saturating_mul(4096);
    match (by_sectors, by_segments) {
        (0, b) | (b, 0) => b,
        (a, b) => a.min(b),
    }
}

/// Reports up to `max` zones from `start_bytes` through `BLKREPORTZONE` on `fd` (any open
/// descriptor of the device), appending them to `zones`; returns how many came.
fn report_from(
    fd: RawFd,
    start_bytes: u64,
    max: usize,
    buf: &mut [u8],
    zones: &mut Vec<Zone>,
) -> Result<u32, ZonedError> {
    let max = max.min((buf.len() - REPORT_HEADER_BYTES) / ZONE_RECORD_BYTES);
    buf.fill(0);
    buf[..8].copy_from_slice(&(start_bytes / SECTOR_BYTES).to_ne_bytes());
    buf[8..12].copy_from_slice(&(max as u32).to_ne_bytes());
    // The kernel writes each record with 8-byte fields: give it an 8-byte aligned buffer.
    debug_assert!((buf.as_ptr() as usize).is_multiple_of(8));
    // SAFETY: `buf` holds the header and room for `max` records, which is what the header's
    // nr_zones tells the kernel it may write; the buffer outlives the call.
    let rc = unsafe { libc::ioctl(fd, BLKREPORTZONE, buf.as_mut_ptr()) };
    if rc != 0 {
        return Err(ZonedError::Ioctl {
            what: "BLKREPORTZONE",
            error: io::Error::last_os_error(),
        });
    }
    let first = zones.len() as u64;
    parse_report(buf, first, zones)
}

/// An 8-byte aligned report buffer for `records` zones.
fn report_buf(records: usize) -> Vec<u64> {
    vec![0u64; (REPORT_HEADER_BYTES + records * ZONE_RECORD_BYTES).div_ceil(8)]
}

fn as_bytes(v: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64 has no padding or invalid bit patterns; the byte view covers exactly the
    // vector's memory and borrows it mutably for its life.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), v.len() * 8) }
}

/// Every zone of the device behind `fd` (`device_bytes` long), in order.
pub fn report_zones(fd: RawFd, device_bytes: u64) -> Result<Vec<Zone>, ZonedError> {
    let mut words = report_buf(REPORT_BATCH);
    let buf = as_bytes(&mut words);
    let mut zones = Vec::new();
    let mut next = 0u64;
    // Bounded: every call returns at least one zone past `next`, or the loop ends.
    while next < device_bytes && (zones.len() as u64) < ZONES_MAX {
        let n = report_from(fd, next, REPORT_BATCH, buf, &mut zones)?;
        let Some(last) = zones.last().filter(|_| n > 0) else {
            break;
        };
        let end = last.start_bytes.saturating_add(last.len_bytes);
        if end <= next {
            return Err(ZonedError::Geometry(format!(
                "the zone report did not move past byte {next}"
            )));
        }
        next = end;
    }
    Ok(zones)
}

/// The zone starting at `start_bytes` (to learn a write pointer again after an error).
pub fn report_zone(fd: RawFd, start_bytes: u64) -> Result<Zone, ZonedError> {
    let mut words = report_buf(1);
    let mut zones = Vec::with_capacity(1);
    report_from(fd, start_bytes, 1, as_bytes(&mut words), &mut zones)?;
    match zones.pop() {
        Some(z) if z.start_bytes == start_bytes => Ok(z),
        _ => Err(ZonedError::Geometry(format!(
            "no zone starts at byte {start_bytes}"
        ))),
    }
}

/// Reads a block device's zone geometry: None when it is not host-managed (conventional or
/// host-aware), else its geometry and every zone. `dev` is its (major, minor).
pub fn probe(
    fd: RawFd,
    dev: (u32, u32),
    device_bytes: u64,
) -> Result<Option<ZonedDevice>, ZonedError> {
    let q = read_queue(Path::new("/sys"), dev.0, dev.1)?;
    if q.model != ZonedModel::HostManaged {
        return Ok(None);
    }
    let zones = report_zones(fd, device_bytes)?;
    let geometry = geometry(&q, &zones, device_bytes)?;
    Ok(Some(ZonedDevice { geometry, zones }))
}

/// A zone management operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneMgmt {
    Reset,
    Open,
    Close,
    Finish,
}

/// Carries out `op` on the zones of `offset_bytes..+len_bytes` (whole zones) through its
/// ioctl. The descriptor must be open for writing (the kernel answers EBADF otherwise).
pub fn zone_mgmt(fd: RawFd, op: ZoneMgmt, offset_bytes: u64, len_bytes: u64) -> io::Result<()> {
    let req = match op {
        ZoneMgmt::Reset => BLKRESETZONE,
        ZoneMgmt::Open => BLKOPENZONE,
        ZoneMgmt::Close => BLKCLOSEZONE,
        ZoneMgmt::Finish => BLKFINISHZONE,
    };
    // struct blk_zone_range { __u64 sector; __u64 nr_sectors; }
    let range = [offset_bytes / SECTOR_BYTES, len_bytes / SECTOR_BYTES];
    // SAFETY: the ioctl reads the two u64 of `range`, which lives across the call.
    let rc = unsafe { libc::ioctl(fd, req, range.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What a zoned member's zones hold, as `nines check --layout serial` reads them after a run:
/// zones by condition, and every zone a serial volume could not have left (see [`audit`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ZoneAudit {
    pub zones: u64,
    pub empty: u64,
    /// Implicitly or explicitly open.
    pub open: u64,
    pub closed: u64,
    pub full: u64,
    /// Bytes below the write pointers (a full zone's capacity).
    pub written_bytes: u64,
    pub reset_recommended: u64,
    /// Zones whose write pointer is not where whole writes of the volume's unit leave it.
    pub write_pointer_errors: u64,
    /// Offline, read-only or conventional zones, and zones past the volume's that hold data.
    pub other_errors: u64,
    /// The first [`AUDIT_LISTED_MAX`] problems, one line each.
    pub problems: Vec<String>,
}

/// Problems [`audit`] lists (all are counted).
pub const AUDIT_LISTED_MAX: usize = 100;

/// Audits `zones` (one member's report) for a volume that uses the first `used_zones` and
/// writes in whole `unit_bytes`: every write pointer of an open or closed zone a multiple of
/// the unit from its zone's start, no zone offline, read-only or conventional, nothing written
/// past the volume's zones.
pub fn audit(zones: &[Zone], used_zones: u64, unit_bytes: u64) -> ZoneAudit {
    let mut a = ZoneAudit {
        zones: zones.len() as u64,
        ..ZoneAudit::default()
    };
    let unit = unit_bytes.max(1);
    for (i, z) in zones.iter().enumerate() {
        let problem = |a: &mut ZoneAudit, wp: bool, text: String| {
            if wp {
                a.write_pointer_errors += 1;
            } else {
                a.other_errors += 1;
            }
            if a.problems.len() < AUDIT_LISTED_MAX {
                a.problems
                    .push(format!("zone {i} (byte {}): {text}", z.start_bytes));
            }
        };
        a.reset_recommended += u64::from(z.reset_recommended);
        if z.kind == ZoneType::Conventional {
            problem(&mut a, false, "a conventional zone".into());
            continue;
        }
        match z.cond {
            ZoneCond::Empty => a.empty += 1,
            ZoneCond::ImplicitOpen | ZoneCond::ExplicitOpen => a.open += 1,
            ZoneCond::Closed => a.closed += 1,
            ZoneCond::Full => a.full += 1,
            ZoneCond::Offline | ZoneCond::ReadOnly | ZoneCond::NotWp => {
                problem(&mut a, false, format!("{:?}", z.cond).to_lowercase());
                continue;
            }
        }
        let written = z.written_bytes();
        a.written_bytes += written;
        if i as u64 >= used_zones && z.cond != ZoneCond::Empty {
            problem(
                &mut a,
                false,
                format!("holds {written} bytes but the volume uses zones 0..{used_zones} only"),
            );
        } else if matches!(
            z.cond,
            ZoneCond::ImplicitOpen | ZoneCond::ExplicitOpen | ZoneCond::Closed
        ) && !written.is_multiple_of(unit)
        {
            problem(
                &mut a,
                true,
                format!(
                    "its write pointer is {written} bytes in, not a multiple of the {unit}-byte unit"
                ),
            );
        }
    }
    a
}

/// No command (a zone's slot, a queue's end).
const NONE: u32 = u32::MAX;

/// What a member's driver does with a command [`ZoneSeq`] lets go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dispatch {
    /// Write the command's buffer at `offset_bytes` (a write's own offset; an append's the
    /// zone's write pointer). Its completion goes to [`ZoneSeq::complete`].
    Write {
        zone: u32,
        cmd: MemberCmd,
        offset_bytes: u64,
    },
    /// Carry out this reset or finish now ([`zone_mgmt`]); its completion goes to
    /// [`ZoneSeq::complete`].
    Manage { zone: u32, cmd: MemberCmd },
    /// Answer the command with `result` without any I/O (a write off the write pointer, a
    /// full zone, a zone whose write pointer is unknown).
    Answer {
        zone: u32,
        id: u32,
        result: CmdResult,
    },
}

/// A zone's state on the host.
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// Where the next write goes, from the zone's start.
    wp_bytes: u64,
    /// The command in flight (NONE: idle).
    busy: u32,
    /// Commands waiting, oldest first (ids; linked through `ZoneSeq::next`).
    head: u32,
    tail: u32,
    /// A write failed on the device: its write pointer is unknown until learned again or
    /// reset. Writes are answered EIO meanwhile.
    stale: bool,
    /// Conventional, offline or read-only: zone writes are refused.
    unwritable: bool,
}

/// What a member's [`ZoneSeq`] counted (the report's `zoned` of each member).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ZoneSeqStats {
    pub writes: u64,
    /// Zone appends, each a write at the tracked write pointer.
    pub appends: u64,
    pub resets: u64,
    pub finishes: u64,
    pub write_bytes: u64,
    /// Commands that waited for the one before them in their zone.
    pub waits: u64,
    /// The most commands waiting at once (all zones).
    pub queued_max: u64,
    /// Commands refused before any I/O: a write off the write pointer, past the capacity or
    /// to a full zone, an append or reset not naming zones (the device would refuse them).
    pub write_pointer_errors: u64,
    /// Commands the device failed.
    pub device_errors: u64,
    /// Writes refused for their size (above [`ZoneGeometry::max_write_bytes`]).
    pub oversized: u64,
}

/// The write ordering of one host-managed zoned member (module documentation): zone writes,
/// appends, resets and finishes go through it; reads, flushes and the rest do not. At most one
/// command in flight per zone; the others wait in send order, in a queue linked through their
/// command ids (below the volume's `cmds_max`, so nothing is allocated after [`ZoneSeq::new`]
/// and the queues together hold at most `cmds_max` commands).
pub struct ZoneSeq {
    zone_bytes: u64,
    cap_bytes: u64,
    /// Writes above this are refused (0: no limit); see [`ZoneGeometry::max_write_bytes`].
    max_write_bytes: u64,
    slots: Vec<Slot>,
    /// By command id: the command while it waits or is in flight, the next waiting id of its
    /// zone, where a write went, and its zone (NONE: not held here).
    cmds: Vec<MemberCmd>,
    next: Vec<u32>,
    offset_at: Vec<u64>,
    zone_of_id: Vec<u32>,
    queued: u64,
    stats: ZoneSeqStats,
}

impl ZoneSeq {
    /// The ordering of a member whose zones are `zones` (its report when opened), for a volume
    /// whose command ids are below `cmds_max`.
    pub fn new(geometry: &ZoneGeometry, zones: &[Zone], cmds_max: u32) -> ZoneSeq {
        let slots = zones
            .iter()
            .map(|z| Slot {
                wp_bytes: z.written_bytes().min(geometry.zone_capacity_bytes),
                busy: NONE,
                head: NONE,
                tail: NONE,
                stale: false,
                unwritable: z.kind == ZoneType::Conventional
                    || matches!(z.cond, ZoneCond::Offline | ZoneCond::ReadOnly),
            })
            .collect();
        let n = cmds_max as usize;
        let none = MemberCmd {
            id: NONE,
            member: 0,
            op: CmdOp::Read,
            offset_bytes: 0,
            len_bytes: 0,
            buf: nines_array::BufRef::None,
            fua: false,
        };
        ZoneSeq {
            zone_bytes: geometry.zone_size_bytes,
            cap_bytes: geometry.zone_capacity_bytes,
            max_write_bytes: geometry.max_write_bytes,
            slots,
            cmds: vec![none; n],
            next: vec![NONE; n],
            offset_at: vec![0; n],
            zone_of_id: vec![NONE; n],
            queued: 0,
            stats: ZoneSeqStats::default(),
        }
    }

    /// Whether `op` goes through the ordering.
    pub fn sequenced(op: CmdOp) -> bool {
        matches!(
            op,
            CmdOp::Write
                | CmdOp::PlacedWrite { .. }
                | CmdOp::ZoneAppend
                | CmdOp::ZoneReset
                | CmdOp::ZoneFinish
        )
    }

    pub fn stats(&self) -> ZoneSeqStats {
        self.stats
    }

    /// The host's write pointer of zone `zone` (bytes from its start).
    pub fn write_pointer(&self, zone: u32) -> Option<u64> {
        self.slots.get(zone as usize).map(|s| s.wp_bytes)
    }

    /// The zone a command addresses (its first for a reset), or None past the last.
    fn zone_of(&self, offset_bytes: u64) -> Option<u32> {
        let z = offset_bytes / self.zone_bytes;
        (z < self.slots.len() as u64).then_some(z as u32)
    }

    /// A sequenced command arrives (in the order the volume sent it). Some: what to do now;
    /// None: it waits behind its zone's command in flight, and comes out of [`ZoneSeq::next`].
    pub fn submit(&mut self, c: &MemberCmd) -> Option<Dispatch> {
        debug_assert!(ZoneSeq::sequenced(c.op), "{:?} is not sequenced", c.op);
        let id = c.id as usize;
        assert!(id < self.cmds.len(), "command id {id} at or above cmds_max");
        assert_eq!(self.zone_of_id[id], NONE, "command id {id} is already held");
        self.cmds[id] = *c;
        let Some(z) = self.zone_of(c.offset_bytes) else {
            self.stats.write_pointer_errors += 1;
            return Some(Dispatch::Answer {
                zone: NONE,
                id: c.id,
                result: CmdResult::Err(libc::EINVAL),
            });
        };
        self.zone_of_id[id] = z;
        let s = &mut self.slots[z as usize];
        if s.busy != NONE || s.head != NONE {
            self.next[id] = NONE;
            if s.tail == NONE {
                s.head = c.id;
            } else {
                self.next[s.tail as usize] = c.id;
            }
            s.tail = c.id;
            self.queued += 1;
            self.stats.waits += 1;
            self.stats.queued_max = self.stats.queued_max.max(self.queued);
            return None;
        }
        Some(self.start(z, c.id))
    }

    /// The next waiting command of zone `zone` once nothing is in flight there (call again
    /// after an `Answer`: the zone is still idle). None: the zone is busy or has none waiting.
    pub fn next(&mut self, zone: u32) -> Option<Dispatch> {
        let s = self.slots.get_mut(zone as usize)?;
        if s.busy != NONE || s.head == NONE {
            return None;
        }
        let id = s.head;
        s.head = self.next[id as usize];
        if s.head == NONE {
            s.tail = NONE;
        }
        self.queued -= 1;
        Some(self.start(zone, id))
    }

    /// Starts command `id` on idle zone `z`: checked against the write pointer, then in flight
    /// (a write or a management command) or answered.
    fn start(&mut self, z: u32, id: u32) -> Dispatch {
        let c = self.cmds[id as usize];
        let (zs, cap) = (self.zone_bytes, self.cap_bytes);
        let zone_start = u64::from(z) * zs;
        let s = self.slots[z as usize];
        let refuse = |me: &mut ZoneSeq, errno: i32| {
            me.zone_of_id[id as usize] = NONE;
            me.stats.write_pointer_errors += 1;
            Dispatch::Answer {
                zone: z,
                id,
                result: CmdResult::Err(errno),
            }
        };
        let len = u64::from(c.len_bytes);
        let at = match c.op {
            CmdOp::Write | CmdOp::PlacedWrite { .. } | CmdOp::ZoneAppend => {
                let append = c.op == CmdOp::ZoneAppend;
                let rel = c.offset_bytes - zone_start;
                if s.unwritable || (append && rel != 0) {
                    return refuse(self, libc::EINVAL);
                }
                if s.stale {
                    // Not a write-pointer error of the volume's: the device failed before.
                    self.zone_of_id[id as usize] = NONE;
                    return Dispatch::Answer {
                        zone: z,
                        id,
                        result: CmdResult::Err(libc::EIO),
                    };
                }
                if self.max_write_bytes > 0 && len > self.max_write_bytes {
                    // The kernel would split it into requests nothing keeps in order.
                    self.stats.oversized += 1;
                    self.zone_of_id[id as usize] = NONE;
                    return Dispatch::Answer {
                        zone: z,
                        id,
                        result: CmdResult::Err(libc::EINVAL),
                    };
                }
                if s.wp_bytes >= cap {
                    return refuse(self, libc::ENOSPC);
                }
                let rel = if append { s.wp_bytes } else { rel };
                if rel != s.wp_bytes || len == 0 || rel + len > cap {
                    return refuse(self, libc::EINVAL);
                }
                zone_start + rel
            }
            CmdOp::ZoneReset => {
                let end = c.offset_bytes.checked_add(len);
                let whole = len > 0
                    && len.is_multiple_of(zs)
                    && c.offset_bytes == zone_start
                    && end.is_some_and(|e| e <= self.slots.len() as u64 * zs);
                if !whole {
                    return refuse(self, libc::EINVAL);
                }
                zone_start
            }
            CmdOp::ZoneFinish => {
                if c.offset_bytes != zone_start || s.unwritable {
                    return refuse(self, libc::EINVAL);
                }
                zone_start
            }
            _ => unreachable!("only sequenced commands are held"),
        };
        self.slots[z as usize].busy = id;
        self.offset_at[id as usize] = at;
        match c.op {
            CmdOp::ZoneReset | CmdOp::ZoneFinish => Dispatch::Manage { zone: z, cmd: c },
            _ => Dispatch::Write {
                zone: z,
                cmd: c,
                offset_bytes: at,
            },
        }
    }

    /// Command `id` (let go by a `Write` or `Manage`) completed on the device with `result`
    /// (`Ok` or `Err`). Returns the result for the volume (an append's `Appended` with where it
    /// went) and its zone, whose next command [`ZoneSeq::next`] then gives; None when `id` is
    /// not a command in flight here (a read of the same member).
    pub fn complete(&mut self, id: u32, result: CmdResult) -> Option<(CmdResult, u32)> {
        let z = *self.zone_of_id.get(id as usize)?;
        if z == NONE || self.slots[z as usize].busy != id {
            return None;
        }
        self.zone_of_id[id as usize] = NONE;
        let c = self.cmds[id as usize];
        let at = self.offset_at[id as usize];
        let (zs, cap) = (self.zone_bytes, self.cap_bytes);
        self.slots[z as usize].busy = NONE;
        let len = u64::from(c.len_bytes);
        let zones = if c.op == CmdOp::ZoneReset {
            (len / zs) as usize
        } else {
            1
        };
        if let CmdResult::Err(e) = result {
            self.stats.device_errors += 1;
            // What the device did is unknown: learn it again (`refresh`) or reset.
            for s in &mut self.slots[z as usize..z as usize + zones] {
                s.stale = true;
            }
            return Some((CmdResult::Err(e), z));
        }
        let s = &mut self.slots[z as usize];
        let out = match c.op {
            CmdOp::ZoneAppend => {
                s.wp_bytes += len;
                self.stats.appends += 1;
                self.stats.write_bytes += len;
                CmdResult::Appended { offset_bytes: at }
            }
            CmdOp::ZoneReset => {
                for s in &mut self.slots[z as usize..z as usize + zones] {
                    s.wp_bytes = 0;
                    s.stale = false;
                }
                self.stats.resets += 1;
                CmdResult::Ok
            }
            CmdOp::ZoneFinish => {
                s.wp_bytes = cap;
                s.stale = false;
                self.stats.finishes += 1;
                CmdResult::Ok
            }
            _ => {
                s.wp_bytes += len;
                self.stats.writes += 1;
                self.stats.write_bytes += len;
                CmdResult::Ok
            }
        };
        Some((out, z))
    }

    /// Whether zone `zone`'s write pointer is unknown (a device error), so the driver should
    /// learn it again ([`ZoneSeq::refresh`]).
    pub fn stale(&self, zone: u32) -> bool {
        self.slots.get(zone as usize).is_some_and(|s| s.stale)
    }

    /// Zone `zone` as the device reports it now (after an error): its write pointer is known
    /// again. None: the report failed too; the zone stays refused until reset.
    pub fn refresh(&mut self, zone: u32, found: Option<&Zone>) {
        let cap = self.cap_bytes;
        if let (Some(s), Some(z)) = (self.slots.get_mut(zone as usize), found) {
            s.wp_bytes = z.written_bytes().min(cap);
            s.stale = false;
        }
    }

    /// The command that had id `id` here last (to name an answered one in messages).
    pub fn command(&self, id: u32) -> Option<MemberCmd> {
        self.cmds.get(id as usize).copied().filter(|c| c.id == id)
    }

    /// Zone `zone`'s start (bytes from the device's start).
    pub fn zone_start_bytes(&self, zone: u32) -> u64 {
        u64::from(zone) * self.zone_bytes
    }

    /// Commands waiting (not in flight) in every zone.
    pub fn queued(&self) -> u64 {
        self.queued
    }
}

#[cfg(test)]
mod tests;
