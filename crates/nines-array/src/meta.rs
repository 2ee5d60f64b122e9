//! Member metadata of served arrays (`nines serve`, `nines rebuild`, `nines check` over raid0
//! and raid5): a superblock in the last 4 KiB of every member that says which array the member
//! belongs to, where in it, and how current it is; the rules that refuse a member that is not
//! current (stale, blank, truncated, another array's); and the parity check and resync of a
//! raid5 volume's rows (docs/arch-array.md "Member superblocks").
//!
//! Pure code: the callers read and write the members ([`MemberIo`] for the parity pass).

use std::fmt;

/// Bytes of the superblock page, at the end of each member.
pub const SB_BYTES: u64 = 4096;
/// The superblock's magic.
pub const SB_MAGIC: &[u8; 8] = b"NINESMB1";
const SB_VERSION: u32 = 1;
/// Bytes of the encoded fields (the checksum follows them).
const SB_FIELDS_BYTES: usize = 8 + 4 + 4 + 16 + 4 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 8;
/// Bytes of one slot (the fields and the checksum).
const SLOT_BYTES: usize = SB_FIELDS_BYTES + 8;
/// Where the page's two slots are: sectors apart, so a torn write loses at most the one written.
const SLOT_OFFSETS: [usize; 2] = [0, 2048];
const FLAG_CLEAN: u32 = 1;
const FLAG_CREATING: u32 = 2;
const FLAGS_KNOWN: u32 = FLAG_CLEAN | FLAG_CREATING;
/// Most members a superblock's failed mask covers.
pub const MEMBERS_MAX: u32 = 64;
/// Regions of a raid5 write-intent bitmap cover at least this much of each member.
pub const BITMAP_REGION_MIN_BYTES: u64 = 1 << 20;

/// The layout a superblock describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaLayout {
    Raid0,
    Raid5,
}

impl MetaLayout {
    fn code(self) -> u32 {
        match self {
            MetaLayout::Raid0 => 0,
            MetaLayout::Raid5 => 5,
        }
    }
    fn from_code(c: u32) -> Option<MetaLayout> {
        match c {
            0 => Some(MetaLayout::Raid0),
            5 => Some(MetaLayout::Raid5),
            _ => None,
        }
    }
}

impl fmt::Display for MetaLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MetaLayout::Raid0 => "raid0",
            MetaLayout::Raid5 => "raid5",
        })
    }
}

/// One member's superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub layout: MetaLayout,
    /// The array's identity, the same on every member.
    pub array_uuid: [u8; 16],
    pub members: u32,
    /// This member's position in the array (0-based, the command line's order).
    pub role: u32,
    /// Chunk (raid5) or stripe unit (raid0).
    pub unit_bytes: u64,
    /// Bytes of data per member (whole rows); a raid5 bitmap page follows them.
    pub member_data_bytes: u64,
    /// This member's size when the superblock was written.
    pub member_bytes: u64,
    /// The generation: bumped at every start, clean stop and member failure, on every member
    /// in service, one member at a time (so a crash can leave members one generation apart;
    /// [`assemble`] says which are current).
    pub events: u64,
    /// The array was stopped cleanly (flushed, parity consistent, bitmap clear).
    pub clean: bool,
    /// Written by the first step of a new array's creation (generation 1, before anything else
    /// is written): members carrying only such superblocks hold no array yet, so an interrupted
    /// creation is created again (docs/arch-array.md "Member superblocks").
    pub creating: bool,
    /// Members out of service at `events` (bit per role).
    pub failed_mask: u64,
    /// Rows per write-intent bitmap region (raid5; 0: none).
    pub bitmap_region_rows: u64,
}

/// Why a member's last page is not a superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SbError {
    #[error("no nines superblock")]
    NoMagic,
    #[error("a corrupt nines superblock (checksum mismatch)")]
    Checksum,
    #[error("a nines superblock of an unknown version or layout")]
    Unknown,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Superblock {
    /// A 4 KiB page holding this superblock in slot 0 only (what an older nines wrote; the
    /// writer uses [`Superblock::encode_after`]).
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(SB_BYTES as usize);
        p.extend_from_slice(SB_MAGIC);
        p.extend_from_slice(&SB_VERSION.to_le_bytes());
        p.extend_from_slice(&self.layout.code().to_le_bytes());
        p.extend_from_slice(&self.array_uuid);
        p.extend_from_slice(&self.members.to_le_bytes());
        p.extend_from_slice(&self.role.to_le_bytes());
        p.extend_from_slice(&self.unit_bytes.to_le_bytes());
        p.extend_from_slice(&self.member_data_bytes.to_le_bytes());
        p.extend_from_slice(&self.member_bytes.to_le_bytes());
        p.extend_from_slice(&self.events.to_le_bytes());
        // The old clean word, now flags: bit 0 clean, bit 1 creating (older superblocks: 0 or 1).
        let flags = u32::from(self.clean) | u32::from(self.creating) << 1;
        p.extend_from_slice(&flags.to_le_bytes());
        p.extend_from_slice(&self.failed_mask.to_le_bytes());
        p.extend_from_slice(&self.bitmap_region_rows.to_le_bytes());
        debug_assert_eq!(p.len(), SB_FIELDS_BYTES);
        let sum = fnv1a(&p);
        p.extend_from_slice(&sum.to_le_bytes());
        p.resize(SB_BYTES as usize, 0);
        p
    }

    /// The page written over `prev` (the member's page now): this superblock in one slot, and
    /// in the other, unchanged, `prev`'s newest valid superblock of this array older than this
    /// one (anything else there is cleared: another array's superblock with more events would
    /// be read as the newer). A write torn anywhere (at a power loss, sector by sector) then
    /// leaves the kept slot valid, one generation behind, which [`assemble`] takes as current
    /// unless marked out: ZFS's uberblock ring, of two.
    pub fn encode_after(&self, prev: &[u8]) -> Vec<u8> {
        let mut page = vec![0u8; SB_BYTES as usize];
        let keep = (0..2)
            .filter_map(|k| {
                let at = SLOT_OFFSETS[k];
                let sb = Superblock::decode_slot(prev.get(at..)?).ok()?;
                (sb.array_uuid == self.array_uuid && sb.events < self.events).then_some((k, sb))
            })
            .max_by_key(|(_, sb)| sb.events)
            .map(|(k, _)| k);
        if let Some(k) = keep {
            let at = SLOT_OFFSETS[k];
            page[at..at + SLOT_BYTES].copy_from_slice(&prev[at..at + SLOT_BYTES]);
        }
        let at = SLOT_OFFSETS[usize::from(keep == Some(0))];
        page[at..at + SLOT_BYTES].copy_from_slice(&self.encode()[..SLOT_BYTES]);
        page
    }

    /// Reads a page: the newer valid one of its two slots (slot 0 on a tie; a page of an
    /// older nines has only slot 0). Anything else is an error, never a panic.
    pub fn decode(page: &[u8]) -> Result<Superblock, SbError> {
        let a = Superblock::decode_slot(page);
        let b = page
            .get(SLOT_OFFSETS[1]..)
            .map_or(Err(SbError::NoMagic), Superblock::decode_slot);
        match (a, b) {
            (Ok(a), Ok(b)) => Ok(if b.events > a.events { b } else { a }),
            (Ok(a), Err(_)) => Ok(a),
            (Err(_), Ok(b)) => Ok(b),
            (Err(SbError::NoMagic), Err(e)) | (Err(e), Err(_)) => Err(e),
        }
    }

    /// Reads one slot; anything that is not a valid superblock is an error, never a panic.
    fn decode_slot(page: &[u8]) -> Result<Superblock, SbError> {
        if page.len() < SB_FIELDS_BYTES + 8 || &page[..8] != SB_MAGIC {
            return Err(SbError::NoMagic);
        }
        let sum = u64::from_le_bytes(
            page[SB_FIELDS_BYTES..SB_FIELDS_BYTES + 8]
                .try_into()
                .expect("8"),
        );
        if fnv1a(&page[..SB_FIELDS_BYTES]) != sum {
            return Err(SbError::Checksum);
        }
        let u32_at = |o: usize| u32::from_le_bytes(page[o..o + 4].try_into().expect("4"));
        let u64_at = |o: usize| u64::from_le_bytes(page[o..o + 8].try_into().expect("8"));
        if u32_at(8) != SB_VERSION {
            return Err(SbError::Unknown);
        }
        let layout = MetaLayout::from_code(u32_at(12)).ok_or(SbError::Unknown)?;
        let flags = u32_at(72);
        if flags & !FLAGS_KNOWN != 0 {
            return Err(SbError::Unknown);
        }
        let mut array_uuid = [0u8; 16];
        array_uuid.copy_from_slice(&page[16..32]);
        Ok(Superblock {
            layout,
            array_uuid,
            members: u32_at(32),
            role: u32_at(36),
            unit_bytes: u64_at(40),
            member_data_bytes: u64_at(48),
            member_bytes: u64_at(56),
            events: u64_at(64),
            clean: flags & FLAG_CLEAN != 0,
            creating: flags & FLAG_CREATING != 0,
            failed_mask: u64_at(76),
            bitmap_region_rows: u64_at(84),
        })
    }
}

/// The array's uuid as text.
pub fn uuid_text(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Rows per bitmap region for `rows` rows of `chunk_bytes`: at least 1 MiB of each member, and
/// few enough regions for one page.
pub fn bitmap_region_rows(rows: u64, chunk_bytes: u64) -> u64 {
    let min = BITMAP_REGION_MIN_BYTES.div_ceil(chunk_bytes.max(1)).max(1);
    min.max(rows.div_ceil(crate::raid5::BITMAP_REGIONS_MAX))
}

/// What the command line says the array is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expect {
    pub layout: MetaLayout,
    pub members: u32,
    pub unit_bytes: u64,
}

/// What one member's last page held, and its size now.
#[derive(Clone, Debug)]
pub struct Found {
    pub sb: Result<Superblock, SbError>,
    pub size_bytes: u64,
}

/// The array as its members' superblocks describe it, when every member in service is current.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assembly {
    /// The newest superblock: the array's geometry, generation and failed mask. Its `clean` is
    /// on only when every member in service says clean (members that disagree, a start or a
    /// stop cut short, make the array dirty).
    pub newest: Superblock,
    /// The member left out (`--failed`/`--rebuild`) is current (no superblock marks it out):
    /// its bytes are the array's (a resync may read them).
    pub left_out_current: bool,
    /// Members in service whose superblock is behind the newest generation: a start, stop,
    /// failure record or rejoin was cut short after other members were written. They are
    /// current (nothing marks them out); the next start writes them.
    pub behind: Vec<u32>,
}

/// Why an array is not served: one member refused, one line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("member {member} ({name}): {why}")]
pub struct Refused {
    pub member: u32,
    pub name: String,
    pub why: String,
}

/// The failed-mask bit of member `k` (members past the mask's 64 bits are never marked out).
fn out_bit(k: usize) -> u64 {
    1u64.checked_shl(k as u32).unwrap_or(0)
}

/// A superblock change every member in service gets, one member at a time (the writer's
/// transitions; docs/arch-array.md "Member superblocks").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// The first step of a new array (from a template at generation 0 whose failed mask holds
    /// the member left out): generation 1, `creating`.
    Create,
    /// A start: the next generation, not clean, with `left_out` marked out.
    Start { left_out: Option<u32> },
    /// A member failed while serving: marked out; the others at the next generation.
    Fail(u32),
    /// A clean stop (flushed, bitmaps cleared first); `rejoin`: a member rebuilt to the end is
    /// a member again, and written first.
    Stop { rejoin: Option<u32> },
}

/// What a transition writes: `next` (as [`Superblock::of_member`] of each) to the members of
/// `order`, in that order, each made durable before the next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub next: Superblock,
    pub order: Vec<u32>,
}

impl Superblock {
    /// This superblock as member `role` of `member_bytes` carries it.
    pub fn of_member(&self, role: u32, member_bytes: u64) -> Superblock {
        Superblock {
            role,
            member_bytes,
            ..self.clone()
        }
    }

    /// Whether member `k` is in service here (not in the failed mask).
    pub fn in_service(&self, k: u32) -> bool {
        self.failed_mask & out_bit(k as usize) == 0
    }

    /// The step of transition `t` from this state (the array's superblock, any role).
    ///
    /// Why any single crash leaves an array that assembles (the protocol, after md's event
    /// counts with its per-device role array, ZFS's uberblocks and TigerBeetle's superblock
    /// generations): a crash between two member writes leaves members one generation apart,
    /// and [`assemble`] does not call a member stale for its lower generation alone, only when
    /// a superblock at its generation or later marks it out. A member is marked out (`Start`
    /// with a member left out, `Fail`) in the first superblock written of that generation,
    /// before any write it misses is acknowledged, and in every superblock after until it
    /// rejoins; it rejoins (`Stop` with `rejoin`) only rebuilt to the end, its own superblock
    /// written first, so the generation that no longer marks it out is never older than its
    /// own. The array's state is the newest generation's; dirty when members disagree.
    pub fn step(&self, t: Transition) -> Step {
        let mut next = self.clone();
        next.events += 1;
        next.clean = false;
        next.creating = false;
        let mut first = None;
        match t {
            Transition::Create => {
                next.events = 1;
                next.creating = true;
            }
            Transition::Start { left_out } => {
                if let Some(f) = left_out {
                    next.failed_mask |= out_bit(f as usize);
                }
            }
            Transition::Fail(m) => next.failed_mask |= out_bit(m as usize),
            Transition::Stop { rejoin } => {
                next.clean = true;
                if let Some(r) = rejoin {
                    next.failed_mask &= !out_bit(r as usize);
                    first = Some(r);
                }
            }
        }
        let order = first
            .into_iter()
            .chain((0..next.members).filter(|&k| Some(k) != first && next.in_service(k)))
            .collect();
        Step { next, order }
    }
}

/// The superblock of this array (other than member `k`'s own) at `events` or later that marks
/// member `k` out of service, the newest such: `k` missed writes since (or is rejoining and
/// not yet written).
fn marked_out<'a>(
    found: &'a [Found],
    uuid: &[u8; 16],
    k: usize,
    events: u64,
) -> Option<&'a Superblock> {
    found
        .iter()
        .enumerate()
        .filter(|&(j, _)| j != k)
        .filter_map(|(_, f)| f.sb.as_ref().ok())
        .filter(|s| &s.array_uuid == uuid && s.events >= events && s.failed_mask & out_bit(k) != 0)
        .max_by_key(|s| s.events)
}

/// Checks every member but `left_out` against the newest superblock: `Ok(None)` when no
/// member carries an array (a new array, members written without superblocks, or a creation
/// cut short: only `creating` superblocks), `Ok(Some)` when every member in service is current,
/// and the first member that is not otherwise. A member is stale only when a superblock at its
/// generation or later marks it out ([`Superblock::step`] says why that is enough).
pub fn assemble(
    expect: &Expect,
    found: &[Found],
    names: &[String],
    left_out: Option<u32>,
) -> Result<Option<Assembly>, Refused> {
    let newest = found
        .iter()
        .filter_map(|f| f.sb.as_ref().ok())
        .filter(|s| !s.creating)
        .max_by_key(|s| s.events)
        .cloned();
    let Some(mut newest) = newest else {
        return Ok(None);
    };
    let refuse = |k: usize, why: String| Refused {
        member: k as u32,
        name: names.get(k).cloned().unwrap_or_default(),
        why,
    };
    let unit = |b: u64| {
        if b.is_multiple_of(1024) {
            format!("{} KiB", b >> 10)
        } else {
            format!("{b}-byte")
        }
    };
    if newest.layout != expect.layout
        || newest.members != expect.members
        || newest.unit_bytes != expect.unit_bytes
    {
        let k = found
            .iter()
            .position(|f| f.sb.as_ref().ok() == Some(&newest))
            .unwrap_or(0);
        return Err(refuse(
            k,
            format!(
                "the array was created as {} of {} members with {} units; the command line asks for {} of {} with {} units: give the options it was created with",
                newest.layout,
                newest.members,
                unit(newest.unit_bytes),
                expect.layout,
                expect.members,
                unit(expect.unit_bytes)
            ),
        ));
    }
    let rebuild_hint = |k: usize| {
        if expect.layout == MetaLayout::Raid5 {
            format!(
                "rebuild it (serve --rebuild {k}, or nines rebuild --member {k}) or serve without it (--failed {k})"
            )
        } else {
            "raid0 has no redundancy to rebuild it from: give the right member".to_string()
        }
    };
    let mut left_out_current = false;
    let mut clean = newest.clean;
    let mut behind = Vec::new();
    for (k, f) in found.iter().enumerate() {
        let sb = match &f.sb {
            Ok(sb) => sb,
            Err(e) if Some(k as u32) != left_out => {
                let why = if f.size_bytes < newest.member_bytes {
                    format!(
                        "{e} at its end, and it is {} bytes where the array's members were {} bytes: truncated? it is not served as current; {}",
                        f.size_bytes,
                        newest.member_bytes,
                        rebuild_hint(k)
                    )
                } else if f.size_bytes > newest.member_bytes {
                    format!(
                        "{e} at its end, and it is {} bytes where the array's members were {} bytes: grown or replaced? it is not served as current; {}",
                        f.size_bytes,
                        newest.member_bytes,
                        rebuild_hint(k)
                    )
                } else {
                    format!(
                        "{e} while the other members have one (array {}): a blank or replaced member is not served as current; {}",
                        uuid_text(&newest.array_uuid),
                        rebuild_hint(k)
                    )
                };
                return Err(refuse(k, why));
            }
            Err(_) => continue,
        };
        let out = Some(k as u32) == left_out;
        if sb.array_uuid != newest.array_uuid {
            if out {
                continue;
            }
            return Err(refuse(
                k,
                format!(
                    "belongs to another array ({}, this one is {}): give this array's members",
                    uuid_text(&sb.array_uuid),
                    uuid_text(&newest.array_uuid)
                ),
            ));
        }
        if sb.role != k as u32 {
            return Err(refuse(
                k,
                format!(
                    "holds member {} of this array: give the members in their order",
                    sb.role
                ),
            ));
        }
        let marked = marked_out(found, &newest.array_uuid, k, sb.events);
        if out {
            left_out_current = marked.is_none();
            continue;
        }
        if let Some(m) = marked {
            return Err(refuse(
                k,
                format!(
                    "is stale (event {}, the array's {}): member {}'s superblock at event {} marks it out of service, so it missed writes; {}",
                    sb.events,
                    newest.events,
                    m.role,
                    m.events,
                    rebuild_hint(k)
                ),
            ));
        }
        if f.size_bytes != sb.member_bytes {
            return Err(refuse(
                k,
                format!(
                    "is {} bytes where its superblock says {}: give the member as it was",
                    f.size_bytes, sb.member_bytes
                ),
            ));
        }
        clean &= sb.clean;
        if sb.events < newest.events {
            behind.push(k as u32);
        }
    }
    newest.clean = clean;
    Ok(Some(Assembly {
        newest,
        left_out_current,
        behind,
    }))
}

/// Positioned reads and writes of members (the parity pass's I/O).
pub trait MemberIo {
    fn read_at(&mut self, member: u32, offset_bytes: u64, buf: &mut [u8]) -> std::io::Result<()>;
    fn write_at(&mut self, member: u32, offset_bytes: u64, buf: &[u8]) -> std::io::Result<()>;
}

/// A raid5 row whose parity is not the XOR of its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Mismatch {
    pub row: u64,
    /// The member holding the row's parity (the one a repair rewrites).
    pub parity_member: u32,
    /// Bytes into the chunk where the first difference is.
    pub first_byte: u32,
}

/// Reads row `row` of a raid5 of `n` members (left-symmetric: parity on `n - 1 - row % n`)
/// into `bufs` (one chunk per member), checks the parity and, when `repair`, rewrites it from
/// the data. Returns the mismatch found, if any.
pub fn check_raid5_row(
    n: u32,
    chunk_bytes: u64,
    row: u64,
    repair: bool,
    io: &mut dyn MemberIo,
    bufs: &mut [Vec<u8>],
) -> std::io::Result<Option<Mismatch>> {
    assert!(
        bufs.len() == n as usize + 1,
        "one buffer per member and one for the parity"
    );
    let p = n - 1 - (row % u64::from(n)) as u32;
    let off = row * chunk_bytes;
    for m in 0..n {
        io.read_at(m, off, &mut bufs[m as usize])?;
    }
    let (members, acc) = bufs.split_at_mut(n as usize);
    let acc = &mut acc[0];
    acc.fill(0);
    for (m, b) in members.iter().enumerate() {
        if m as u32 != p {
            for (a, x) in acc.iter_mut().zip(b.iter()) {
                *a ^= x;
            }
        }
    }
    let stored = &members[p as usize];
    let Some(first) = acc.iter().zip(stored.iter()).position(|(a, b)| a != b) else {
        return Ok(None);
    };
    if repair {
        io.write_at(p, off, acc)?;
    }
    Ok(Some(Mismatch {
        row,
        parity_member: p,
        first_byte: first as u32,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb(role: u32, events: u64) -> Superblock {
        Superblock {
            layout: MetaLayout::Raid5,
            array_uuid: [7; 16],
            members: 3,
            role,
            unit_bytes: 65536,
            member_data_bytes: 64 << 20,
            member_bytes: (64 << 20) + 8192,
            events,
            clean: true,
            creating: false,
            failed_mask: 0,
            bitmap_region_rows: 16,
        }
    }

    fn found(s: Result<Superblock, SbError>, size: u64) -> Found {
        Found {
            sb: s,
            size_bytes: size,
        }
    }

    const EXPECT: Expect = Expect {
        layout: MetaLayout::Raid5,
        members: 3,
        unit_bytes: 65536,
    };

    fn names() -> Vec<String> {
        (0..3).map(|i| format!("m{i}")).collect()
    }

    #[test]
    fn superblock_round_trips_and_rejects_corruption() {
        let s = sb(2, 41);
        let page = s.encode();
        assert_eq!(page.len(), SB_BYTES as usize);
        assert_eq!(Superblock::decode(&page), Ok(s));
        let mut bad = page.clone();
        bad[64] ^= 1;
        assert_eq!(Superblock::decode(&bad), Err(SbError::Checksum));
        assert_eq!(Superblock::decode(&[0u8; 4096]), Err(SbError::NoMagic));
        assert_eq!(Superblock::decode(&page[..20]), Err(SbError::NoMagic));
    }

    /// Every way a page write can tear at a power loss (each 512-byte sector old, new, or,
    /// where it changes, half of each) reads back as the superblock before or the one written;
    /// and a page of an older nines (slot 0 only) is read and written over the same way.
    #[test]
    fn a_torn_superblock_page_reads_as_before_or_after() {
        let mut page = vec![0u8; SB_BYTES as usize];
        let mut prev: Option<Superblock> = None;
        let mut cases = 0u64;
        for events in 1..6u64 {
            let next = Superblock {
                clean: events % 2 == 0,
                ..sb(1, events)
            };
            let new = next.encode_after(&page);
            assert_eq!(Superblock::decode(&new).as_ref(), Ok(&next));
            let sectors = SB_BYTES as usize / 512;
            let changed: Vec<usize> = (0..sectors)
                .filter(|&i| page[i * 512..(i + 1) * 512] != new[i * 512..(i + 1) * 512])
                .collect();
            assert!(!changed.is_empty() && changed.len() <= 2, "{changed:?}");
            for mut pick in 0..3u32.pow(changed.len() as u32) {
                let mut torn = page.clone();
                for &i in &changed {
                    let r = i * 512..(i + 1) * 512;
                    match pick % 3 {
                        0 => {}
                        1 => torn[r.clone()].copy_from_slice(&new[r]),
                        _ => {
                            torn[r.start..r.start + 50].copy_from_slice(&new[r.start..r.start + 50])
                        }
                    }
                    pick /= 3;
                }
                let got = Superblock::decode(&torn).ok();
                assert!(
                    got.as_ref() == Some(&next) || got == prev,
                    "events {events}: torn {got:?}"
                );
                cases += 1;
            }
            page = new;
            prev = Some(next);
        }
        assert!(cases >= 5 * 3);
        // An older nines's page: read, and the next write keeps it in the other slot.
        let old = sb(1, 9).encode();
        assert_eq!(Superblock::decode(&old), Ok(sb(1, 9)));
        let after = sb(1, 10).encode_after(&old);
        assert_eq!(&after[..100], &old[..100], "the older slot kept");
        assert_eq!(Superblock::decode(&after), Ok(sb(1, 10)));
        // Another array's superblock (more events) is not kept beside this one.
        let foreign = Superblock {
            array_uuid: [1; 16],
            ..sb(1, 50)
        }
        .encode();
        assert_eq!(
            Superblock::decode(&sb(1, 3).encode_after(&foreign)),
            Ok(sb(1, 3))
        );
    }

    #[test]
    fn current_members_assemble() {
        let size = (64 << 20) + 8192;
        let f: Vec<Found> = (0..3).map(|k| found(Ok(sb(k, 9)), size)).collect();
        let a = assemble(&EXPECT, &f, &names(), None).unwrap().unwrap();
        assert_eq!(a.newest.events, 9);
        let none: Vec<Found> = (0..3).map(|_| found(Err(SbError::NoMagic), size)).collect();
        assert_eq!(assemble(&EXPECT, &none, &names(), None), Ok(None));
    }

    #[test]
    fn stale_blank_truncated_and_foreign_members_are_refused_with_their_reason() {
        let size = (64 << 20) + 8192;
        let base = || -> Vec<Found> { (0..3).map(|k| found(Ok(sb(k, 9)), size)).collect() };
        // Behind alone is not stale (a start or stop cut short): current, and the array dirty.
        let mut behind = base();
        behind[1] = found(
            Ok(Superblock {
                clean: false,
                ..sb(1, 7)
            }),
            size,
        );
        let a = assemble(&EXPECT, &behind, &names(), None).unwrap().unwrap();
        assert_eq!(
            (a.newest.events, a.newest.clean, a.behind.clone()),
            (9, false, vec![1])
        );
        // Stale: a superblock at its generation or later marks it out.
        let mut stale = base();
        stale[1] = found(Ok(sb(1, 7)), size);
        stale[2] = found(
            Ok(Superblock {
                failed_mask: 1 << 1,
                ..sb(2, 9)
            }),
            size,
        );
        let e = assemble(&EXPECT, &stale, &names(), None).unwrap_err();
        assert_eq!(e.member, 1);
        assert!(
            e.why
                .contains("stale (event 7, the array's 9): member 2's superblock"),
            "{e}"
        );
        // Left out, a stale member is fine; not current, so not a resync source.
        let a = assemble(&EXPECT, &stale, &names(), Some(1))
            .unwrap()
            .unwrap();
        assert!(!a.left_out_current);
        let a = assemble(&EXPECT, &base(), &names(), Some(1))
            .unwrap()
            .unwrap();
        assert!(a.left_out_current);

        let mut blank = base();
        blank[2] = found(Err(SbError::NoMagic), size);
        let e = assemble(&EXPECT, &blank, &names(), None).unwrap_err();
        assert_eq!(e.member, 2);
        assert!(e.why.contains("blank or replaced"), "{e}");

        let mut truncated = base();
        truncated[0] = found(Err(SbError::NoMagic), 32 << 20);
        let e = assemble(&EXPECT, &truncated, &names(), None).unwrap_err();
        assert_eq!(e.member, 0);
        assert!(e.why.contains("truncated?"), "{e}");

        let mut foreign = base();
        let mut other = sb(1, 30);
        other.array_uuid = [9; 16];
        foreign[1] = found(Ok(other), size);
        // The foreign member has more events: the array is still the majority's... the newest
        // decides, so the other two are the ones named; either way it is refused.
        let e = assemble(&EXPECT, &foreign, &names(), None).unwrap_err();
        assert!(e.why.contains("another array"), "{e}");
        let mut foreign = base();
        let mut other = sb(1, 3);
        other.array_uuid = [9; 16];
        foreign[1] = found(Ok(other), size);
        let e = assemble(&EXPECT, &foreign, &names(), None).unwrap_err();
        assert_eq!(e.member, 1);
        assert!(e.why.contains("another array"), "{e}");

        let mut swapped = base();
        swapped.swap(0, 1);
        let e = assemble(&EXPECT, &swapped, &names(), None).unwrap_err();
        assert!(e.why.contains("in their order"), "{e}");

        let mut failed = base();
        failed[0] = found(
            Ok(Superblock {
                failed_mask: 1 << 2,
                events: 10,
                ..sb(0, 10)
            }),
            size,
        );
        failed[1] = found(
            Ok(Superblock {
                failed_mask: 1 << 2,
                events: 10,
                ..sb(1, 10)
            }),
            size,
        );
        let e = assemble(&EXPECT, &failed, &names(), None).unwrap_err();
        assert_eq!(e.member, 2);

        let wrong = Expect {
            unit_bytes: 4096,
            ..EXPECT
        };
        let e = assemble(&wrong, &base(), &names(), None).unwrap_err();
        assert!(
            e.why.contains("created as raid5 of 3 members with 64 KiB"),
            "{e}"
        );
    }

    struct Mem(Vec<Vec<u8>>);
    impl MemberIo for Mem {
        fn read_at(&mut self, m: u32, o: u64, b: &mut [u8]) -> std::io::Result<()> {
            b.copy_from_slice(&self.0[m as usize][o as usize..o as usize + b.len()]);
            Ok(())
        }
        fn write_at(&mut self, m: u32, o: u64, b: &[u8]) -> std::io::Result<()> {
            self.0[m as usize][o as usize..o as usize + b.len()].copy_from_slice(b);
            Ok(())
        }
    }

    #[test]
    fn a_corrupted_parity_chunk_is_found_and_repaired() {
        let (n, c) = (4u32, 4096u64);
        let rows = 8u64;
        let mut mem = Mem((0..n)
            .map(|m| {
                (0..rows * c)
                    .map(|i| (i as u32 * 31 + m * 7) as u8)
                    .collect()
            })
            .collect());
        let mut bufs: Vec<Vec<u8>> = (0..=n).map(|_| vec![0; c as usize]).collect();
        // Make parity right everywhere, then break row 5's at byte 100.
        for r in 0..rows {
            check_raid5_row(n, c, r, true, &mut mem, &mut bufs).unwrap();
        }
        for r in 0..rows {
            assert_eq!(
                check_raid5_row(n, c, r, false, &mut mem, &mut bufs).unwrap(),
                None
            );
        }
        let p = n - 1 - (5 % n);
        mem.0[p as usize][(5 * c + 100) as usize] ^= 0x40;
        let found: Vec<Mismatch> = (0..rows)
            .filter_map(|r| check_raid5_row(n, c, r, false, &mut mem, &mut bufs).unwrap())
            .collect();
        assert_eq!(
            found,
            vec![Mismatch {
                row: 5,
                parity_member: p,
                first_byte: 100
            }]
        );
        assert!(
            check_raid5_row(n, c, 5, true, &mut mem, &mut bufs)
                .unwrap()
                .is_some()
        );
        assert_eq!(
            check_raid5_row(n, c, 5, false, &mut mem, &mut bufs).unwrap(),
            None
        );
    }
}
