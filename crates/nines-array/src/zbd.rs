//! fio's `zonemode=zbd` over one host-managed zoned member (`nines profile --zonemode zbd`,
//! docs/arch-zoned.md "fio's zonemode=zbd"): the workload's offsets say which zone, the policy
//! says where in it, as fio's `zbd_adjust_block` does.
//!
//! - **Sequential writes** go to one zone at a time from the zone of the first write, at its
//!   write pointer; when the zone has less room than the write, the next zone (wrapping at the
//!   region's end). The bytes past a zone's capacity are never addressed. A zone with some room
//!   but less than the write is *finished* first (fio finishes a zone whose remainder is below
//!   the block size; nines never shortens a write, so it finishes where the write does not fit).
//! - **Random writes** pick the zone of the generated offset when it is one of the zones being
//!   written, or when fewer than the limit are (it joins them); otherwise one of those zones,
//!   chosen from the offset as fio's `pick_random_zone_idx` does; a zone leaves them once fully
//!   written (or finished).
//! - **Resets, as fio**: a write whose zone is full (no room left, reached by the sequential
//!   writer or chosen by a random one) resets it first and writes at its start. With
//!   `zone_reset_threshold` and `zone_reset_frequency`, once the region's zones hold that share
//!   of its bytes, every `1 / frequency` writes the zone written is reset first.
//! - **Reads** stay in written data (completed writes, not reset since): the generated zone when
//!   it holds the read, else the nearest that does (random) or the next (sequential: each zone
//!   read from its start up to what was written, then the next), at an offset inside that data
//!   derived from the generated one (fio's formula). A read finding no written data anywhere
//!   goes above a write pointer (zeros, as the device answers; not checked by `--verify`) and is
//!   counted. `read_beyond_wp`: reads go where generated.
//! - **Open zones**: a zone counts against the limit from its first write until it is full or
//!   empty again with nothing of it in flight, so the device never sees more open or active
//!   zones than the limit (the driver sets it from `max_open_zones` and the device's limits). A
//!   write to a zone that would exceed it waits, in send order with every zone command after
//!   it, until one completes (fio quiesces). A reset waits for the reads in flight in its zone.
//!
//! Placement happens when the driver asks ([`Volume::place`]) so the data of a write (its
//! `--verify` pattern) is of the offset written: rewriting after a reset writes the same pattern
//! at the same place, so reads verify across resets. The driver delivers a zone's commands in
//! the order sent (the worker's `ZoneSeq` on block devices): completions of a zone come in
//! order, so each zone's written data is the bytes below its completed writes.

use std::collections::VecDeque;
use std::ops::Range;

use crate::ArrayError;
use crate::api::{
    BufRef, CmdDone, CmdOp, CmdResult, Cx, IoResult, MemberCmd, Placed, VolIo, VolOp, Volume,
};

const NONE: u32 = u32::MAX;
const EOPNOTSUPP: i32 = 95;
const EIO: i32 = 5;
/// Zone management commands (resets, finishes) in flight or waiting at most, beyond two per tag.
const MGMT_SPARE: u32 = 16;
/// Zones listed in the report's `zones` (those the run wrote or reset; the first ones).
const ZONES_LISTED_MAX: usize = 4096;

/// What the volume is built over and asked to do.
#[derive(Clone, Debug, PartialEq)]
pub struct ZbdParams {
    pub zone_size_bytes: u64,
    pub zone_capacity_bytes: u64,
    /// Bytes from each zone's start to its write pointer when the run begins (the capacity for
    /// a full zone), one per zone of the member.
    pub written_bytes: Vec<u64>,
    /// The zones the run writes and reads: the region's whole zones (fio's min_zone..max_zone).
    pub zones: Range<u32>,
    /// Zones holding writes at once at most (from `max_open_zones` and the device's limits);
    /// 0: no limit.
    pub open_zones_max: u32,
    /// The device's active zone limit (0: none): zones partly written outside the region
    /// take their share of it.
    pub active_zones_max: u32,
    pub reset_threshold: f64,
    pub reset_frequency: f64,
    pub read_beyond_wp: bool,
    /// Reset the region's zones that hold data before the first I/O (fio does with verify:
    /// what was there carries no pattern of this run, and a zone full of it would be reset
    /// under the reads anyway).
    pub reset_first: bool,
    /// Writes (reads) are random: any job on the target writes (reads) at random offsets.
    pub random_writes: bool,
    pub random_reads: bool,
    pub block_bytes: u32,
    pub tags: u32,
    pub len_bytes_max: u32,
    /// The largest write the member takes as one request (0: not known): a larger one would be
    /// split into requests that nothing keeps in order in a zone.
    pub max_write_bytes: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct ZoneState {
    /// Where the next write is placed (bytes from the zone's start).
    issued: u64,
    /// The device's write pointer once everything sent has completed (completed writes,
    /// finishes and resets).
    done: u64,
    /// Bytes of data written and completed from the start (the readable end).
    data: u64,
    /// Zone commands (writes, resets, finishes) sent or waiting, not completed.
    pending: u32,
    /// Of them, waiting (not sent).
    waiting: u32,
    /// The last `pump` pass that found this zone's first waiting command unable to go.
    blocked_pass: u64,
    /// Reads in flight.
    reads: u32,
    /// Resets placed and not completed: reads stay away.
    resets: u32,
    /// Counts against the open-zone limit.
    held: bool,
    /// One of the random writer's zones.
    in_set: bool,
    /// Written or reset by this run (listed in the report).
    touched: bool,
    /// Reset before the run's first I/O (`reset_first`).
    reset_at_start: bool,
    bytes_written: u64,
    resets_done: u64,
}

/// Counters for the report (`volume.stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ZbdStats {
    pub writes: u64,
    pub write_bytes: u64,
    pub reads: u64,
    /// Resets of a full zone a write reached.
    pub resets_full: u64,
    /// Resets of `zone_reset_threshold` / `zone_reset_frequency`.
    pub resets_threshold: u64,
    /// Resets of zones holding data before the first I/O (`--verify`).
    pub resets_start: u64,
    pub finishes: u64,
    /// Reads that found no written data to go to (read above a write pointer, not verified).
    pub reads_beyond_wp: u64,
    /// Commands that waited for the open-zone limit (or a reset for its zone's reads).
    pub waits: u64,
    pub waiting_max: u64,
    /// The most zones counted against the limit at once.
    pub open_zones_peak: u64,
    /// Zone management commands the device failed.
    pub mgmt_errors: u64,
}

/// The policy (module documentation).
pub struct Zbd {
    p: ZbdParams,
    size_bytes: u64,
    open_max: u32,
    /// The random writer's zones (at most `set_max`).
    set: Vec<u32>,
    set_max: usize,
    zs: Vec<ZoneState>,
    held: u32,
    /// The sequential writer's zone (NONE before the first write).
    wcur: u32,
    /// The sequential reader's zone and position.
    rcur: u32,
    rpos: u64,
    /// Written bytes in the region's zones (fio's `wp_valid_data_bytes`) and the countdown of
    /// writes to the next threshold reset.
    valid_bytes: u64,
    reset_every: u64,
    write_cnt: u64,
    /// Zone commands placed, to send at the next submit (before its write).
    mgmt_next: VecDeque<(CmdOp, u32)>,
    /// Commands waiting, in send order, and each one's zone.
    waiting: VecDeque<(MemberCmd, u32)>,
    pass: u64,
    /// Per tag: placed since the last submit, where, its zone, op, and the result so far.
    placed: Vec<bool>,
    tag_off: Vec<u64>,
    tag_zone: Vec<u32>,
    tag_op: Vec<VolOp>,
    tag_len_bytes: Vec<u64>,
    /// Management command ids (from `tags`): free ones, and each busy one's op and zone.
    mgmt_free: Vec<u32>,
    mgmt_of: Vec<(CmdOp, u32)>,
    stats: ZbdStats,
}

impl Zbd {
    /// The volume, or why these parameters cannot run (one line, naming what to change).
    pub fn new(p: ZbdParams) -> Result<Zbd, ArrayError> {
        let (zs_bytes, cap) = (p.zone_size_bytes, p.zone_capacity_bytes);
        let n = p.written_bytes.len() as u32;
        if zs_bytes == 0 || cap == 0 || cap > zs_bytes || p.tags == 0 {
            return Err(ArrayError::Invalid(format!(
                "zoned member with zone size {zs_bytes} and capacity {cap}: not a zone geometry"
            )));
        }
        if p.zones.is_empty() || p.zones.end > n {
            return Err(ArrayError::Invalid(format!(
                "--zonemode zbd needs a region of at least one whole zone ({}); give --offset \
                 and --size on zone boundaries covering one or more",
                size_text(zs_bytes)
            )));
        }
        if u64::from(p.len_bytes_max) > cap {
            return Err(ArrayError::Invalid(format!(
                "--zonemode zbd: a {}-byte I/O does not fit a zone's {} capacity; use a smaller \
                 --bs",
                p.len_bytes_max,
                size_text(cap)
            )));
        }
        if p.max_write_bytes > 0 && u64::from(p.len_bytes_max) > p.max_write_bytes {
            let fit = 1u64 << (63 - p.max_write_bytes.leading_zeros());
            return Err(ArrayError::Invalid(format!(
                "--zonemode zbd: a {}-byte I/O is more than the {} bytes the device takes as one \
                 request (queue/max_sectors_kb and max_segments), and the pieces of a split \
                 write can land out of order in a zone; use --bs {}k or less",
                p.len_bytes_max,
                p.max_write_bytes,
                fit >> 10
            )));
        }
        if !(0.0..=1.0).contains(&p.reset_threshold) || !(0.0..=1.0).contains(&p.reset_frequency) {
            return Err(ArrayError::Invalid(
                "zone_reset_threshold and zone_reset_frequency are shares from 0 to 1".into(),
            ));
        }
        let open_max = if p.open_zones_max == 0 {
            u32::MAX
        } else {
            p.open_zones_max
        };
        let mut zs: Vec<ZoneState> = p
            .written_bytes
            .iter()
            .map(|&w| {
                let w = w.min(cap);
                ZoneState {
                    issued: w,
                    done: w,
                    data: w,
                    held: w > 0 && w < cap,
                    ..ZoneState::default()
                }
            })
            .collect();
        let partial: Vec<u32> = (0..n).filter(|&z| zs[z as usize].held).collect();
        let in_range: Vec<u32> = partial
            .iter()
            .copied()
            .filter(|z| p.zones.contains(z))
            .collect();
        // Zones partly written before the run hold the device's active resources until written
        // full or reset. Those of the region are the run's (the random writer takes them as its
        // own, as fio does; the sequential one continues them when it gets there); the others
        // are never touched and leave the rest of the device's active limit.
        let stuck = (partial.len() - in_range.len()) as u64;
        for &z in &partial {
            if !p.zones.contains(&z) {
                zs[z as usize].held = false;
            }
        }
        let device_room = if p.active_zones_max == 0 {
            u64::from(u32::MAX)
        } else {
            u64::from(p.active_zones_max).saturating_sub(stuck)
        };
        let room = u64::from(open_max).min(device_room);
        let ours = in_range.len() as u64;
        // The sequential writer starts in the region's first zone and fills each part-written
        // zone it reaches (freeing its place) before it needs a new one: those ahead of the
        // first must leave it one place.
        let ahead = ours - u64::from(zs[p.zones.start as usize].held);
        let limited = open_max != u32::MAX || p.active_zones_max > 0;
        if limited && (room == 0 || ours > room || (!p.random_writes && ahead >= room)) {
            return Err(ArrayError::Invalid(format!(
                "{} zones are partly written (open or closed), {ours} of them in the region, and \
                 the run may keep {room} zones open (max_open_zones {}, the device's \
                 max_active_zones {} less the {stuck} outside the region): a write could wait \
                 for a zone forever; reset them first (blkzone reset), or give a region holding \
                 them",
                partial.len(),
                if open_max == u32::MAX {
                    "none".to_string()
                } else {
                    open_max.to_string()
                },
                p.active_zones_max
            )));
        }
        let open_max = room.min(u64::from(u32::MAX)) as u32;
        let nz = p.zones.len();
        let set_max = (room.min(nz as u64)) as usize;
        let mut set = Vec::with_capacity(set_max.max(1));
        if p.random_writes {
            for &z in &in_range {
                zs[z as usize].in_set = true;
                set.push(z);
            }
        }
        let held = in_range.len() as u32;
        let valid_bytes = p.zones.clone().map(|z| zs[z as usize].issued).sum::<u64>();
        let reset_every = if p.reset_frequency > 0.0 {
            (1.0 / p.reset_frequency).round().max(1.0) as u64
        } else {
            0
        };
        let tags = p.tags as usize;
        let start: Vec<u32> = if p.reset_first {
            p.zones
                .clone()
                .filter(|&z| zs[z as usize].issued > 0)
                .collect()
        } else {
            Vec::new()
        };
        let mgmt = p.tags * 2 + MGMT_SPARE + start.len() as u32;
        let mut mgmt_next = VecDeque::with_capacity(2 * nz + 4 + start.len());
        let mut resets_start = 0;
        let mut valid_bytes = valid_bytes;
        for &z in &start {
            let s = &mut zs[z as usize];
            valid_bytes -= s.issued.min(valid_bytes);
            s.issued = 0;
            s.resets += 1;
            s.touched = true;
            s.reset_at_start = true;
            resets_start += 1;
            mgmt_next.push_back((CmdOp::ZoneReset, z));
        }
        Ok(Zbd {
            size_bytes: u64::from(n) * zs_bytes,
            open_max,
            set,
            set_max,
            zs,
            held,
            wcur: NONE,
            rcur: NONE,
            rpos: 0,
            valid_bytes,
            reset_every,
            write_cnt: reset_every,
            mgmt_next,
            waiting: VecDeque::with_capacity((p.tags + mgmt) as usize),
            pass: 0,
            placed: vec![false; tags],
            tag_off: vec![0; tags],
            tag_zone: vec![NONE; tags],
            tag_op: vec![VolOp::Read; tags],
            tag_len_bytes: vec![0; tags],
            mgmt_free: (p.tags..p.tags + mgmt).rev().collect(),
            mgmt_of: vec![(CmdOp::ZoneReset, NONE); mgmt as usize],
            stats: ZbdStats {
                open_zones_peak: u64::from(held),
                resets_start,
                ..ZbdStats::default()
            },
            p,
        })
    }

    /// What the policy counted.
    pub fn zbd_stats(&self) -> ZbdStats {
        self.stats
    }

    /// The write pointer the policy expects of zone `z` once all it sent completed (bytes from
    /// the zone's start).
    pub fn write_pointer_bytes(&self, z: u32) -> Option<u64> {
        self.zs.get(z as usize).map(|s| s.done)
    }

    /// Zones counted against the open-zone limit now.
    pub fn open_zones(&self) -> u32 {
        self.held
    }

    fn cap(&self) -> u64 {
        self.p.zone_capacity_bytes
    }

    fn start(&self, z: u32) -> u64 {
        u64::from(z) * self.p.zone_size_bytes
    }

    /// The region's zone of a generated offset.
    fn zone_of(&self, off: u64) -> u32 {
        let z = (off / self.p.zone_size_bytes).min(u64::from(u32::MAX - 1)) as u32;
        z.clamp(self.p.zones.start, self.p.zones.end - 1)
    }

    fn next_zone(&self, z: u32) -> u32 {
        if z + 1 >= self.p.zones.end {
            self.p.zones.start
        } else {
            z + 1
        }
    }

    fn readable(&self, z: u32) -> u64 {
        let s = &self.zs[z as usize];
        if s.resets > 0 { 0 } else { s.data }
    }

    /// Places a reset of zone `z` (sent at the next submit).
    fn place_reset(&mut self, z: u32, threshold: bool) {
        let s = &mut self.zs[z as usize];
        self.valid_bytes -= s.issued.min(self.valid_bytes);
        s.issued = 0;
        s.resets += 1;
        s.touched = true;
        if threshold {
            self.stats.resets_threshold += 1;
        } else {
            self.stats.resets_full += 1;
        }
        self.mgmt_next.push_back((CmdOp::ZoneReset, z));
    }

    /// Places a finish of zone `z`, whose room is too small for the write.
    fn place_finish(&mut self, z: u32) {
        let cap = self.cap();
        let s = &mut self.zs[z as usize];
        s.issued = cap;
        s.touched = true;
        self.stats.finishes += 1;
        self.mgmt_next.push_back((CmdOp::ZoneFinish, z));
    }

    fn leave_set(&mut self, z: u32) {
        if self.zs[z as usize].in_set {
            self.zs[z as usize].in_set = false;
            if let Some(i) = self.set.iter().position(|&x| x == z) {
                self.set.swap_remove(i);
            }
        }
    }

    /// The sequential writer's zone for a write of `len` (resets and finishes placed).
    fn pick_sequential(&mut self, off: u64, len: u64) -> u32 {
        let cap = self.cap();
        let (mut z, mut arrived) = if self.wcur == NONE {
            (self.zone_of(off), true)
        } else {
            (self.wcur, false)
        };
        // Each turn either returns or leaves a zone behind (finished or written full): at most
        // one pass over the region and back to a zone that can be reset.
        for _ in 0..=2 * self.p.zones.len() + 2 {
            let issued = self.zs[z as usize].issued;
            if cap - issued >= len {
                break;
            }
            if issued >= cap && arrived {
                self.place_reset(z, false);
                break;
            }
            if issued < cap {
                self.place_finish(z);
            }
            z = self.next_zone(z);
            arrived = true;
        }
        self.wcur = z;
        z
    }

    /// The random writer's zone for a write of `len` at generated offset `off`.
    fn pick_random(&mut self, off: u64, len: u64) -> u32 {
        let cap = self.cap();
        let nz = self.p.zones.len() as u64;
        let mut zb = self.zone_of(off);
        for _ in 0..=2 * self.p.zones.len() + 2 * self.set_max + 2 {
            let c = if self.zs[zb as usize].in_set {
                zb
            } else if self.set.len() < self.set_max {
                self.zs[zb as usize].in_set = true;
                self.set.push(zb);
                zb
            } else {
                let i = (u64::from(zb - self.p.zones.start) * self.set.len() as u64 / nz) as usize;
                self.set[i.min(self.set.len() - 1)]
            };
            let issued = self.zs[c as usize].issued;
            if cap - issued >= len {
                return c;
            }
            if issued >= cap {
                // A full zone that just joined: reset, written from its start.
                self.place_reset(c, false);
                return c;
            }
            self.place_finish(c);
            self.leave_set(c);
            zb = self.next_zone(c);
        }
        debug_assert!(false, "no zone for a random write");
        let z = self.zone_of(off);
        self.place_reset(z, false);
        z
    }

    fn place_write(&mut self, io: &VolIo) -> Placed {
        let len = u64::from(io.len_bytes);
        let z = if self.p.random_writes {
            self.pick_random(io.offset_bytes, len)
        } else {
            self.pick_sequential(io.offset_bytes, len)
        };
        // fio's zone_reset_threshold / zone_reset_frequency.
        if self.reset_every > 0
            && self.zs[z as usize].issued > 0
            && self.valid_bytes as f64
                >= (self.p.zones.len() as u64 * self.p.zone_size_bytes) as f64
                    * self.p.reset_threshold
        {
            self.write_cnt -= 1;
            if self.write_cnt == 0 {
                self.write_cnt = self.reset_every;
                self.place_reset(z, true);
            }
        }
        let cap = self.cap();
        let zone_start = self.start(z);
        let s = &mut self.zs[z as usize];
        debug_assert!(s.issued + len <= cap, "a write placed past the capacity");
        let at = zone_start + s.issued;
        s.issued += len;
        s.touched = true;
        s.bytes_written += len;
        let full = s.issued >= cap;
        self.valid_bytes += len;
        if full && self.p.random_writes {
            self.leave_set(z);
        }
        self.stats.writes += 1;
        self.stats.write_bytes += len;
        self.tag_zone[io.tag as usize] = z;
        Placed {
            offset_bytes: at,
            verify: true,
        }
    }

    /// A zone holding `len` bytes of written data near `zb` (random: both ways; sequential:
    /// onwards, wrapping), or None.
    fn find_data(&self, zb: u32, len: u64, both: bool) -> Option<u32> {
        let r = &self.p.zones;
        if both {
            for d in 1..r.len() as u32 {
                let up = zb.checked_add(d).filter(|z| *z < r.end);
                let down = zb.checked_sub(d).filter(|z| *z >= r.start);
                if up.is_none() && down.is_none() {
                    break;
                }
                for z in [up, down].into_iter().flatten() {
                    if self.readable(z) >= len {
                        return Some(z);
                    }
                }
            }
            None
        } else {
            let mut z = zb;
            for _ in 0..r.len() {
                z = self.next_zone(z);
                if self.readable(z) >= len {
                    return Some(z);
                }
            }
            None
        }
    }

    fn place_read(&mut self, io: &VolIo) -> Placed {
        let len = u64::from(io.len_bytes);
        let tag = io.tag as usize;
        self.stats.reads += 1;
        if self.p.read_beyond_wp {
            self.tag_zone[tag] = NONE;
            return Placed {
                offset_bytes: io.offset_bytes,
                verify: true,
            };
        }
        let blk = u64::from(self.p.block_bytes.max(1));
        let found = if self.p.random_reads {
            let zb = self.zone_of(io.offset_bytes);
            let z = if self.readable(zb) >= len {
                Some(zb)
            } else {
                self.find_data(zb, len, true)
            };
            z.map(|z| {
                let range = self.readable(z);
                let rel = if range <= len {
                    0
                } else {
                    (io.offset_bytes % self.p.zone_size_bytes) % (range - len) / blk * blk
                };
                (z, rel)
            })
        } else {
            if self.rcur == NONE {
                self.rcur = self.zone_of(io.offset_bytes);
                self.rpos = 0;
            }
            if self.readable(self.rcur) >= self.rpos + len {
                Some((self.rcur, self.rpos))
            } else {
                self.find_data(self.rcur, len, false).map(|z| (z, 0))
            }
            .inspect(|&(z, rel)| {
                self.rcur = z;
                self.rpos = rel + len;
            })
        };
        match found {
            Some((z, rel)) => {
                self.zs[z as usize].reads += 1;
                self.tag_zone[tag] = z;
                Placed {
                    offset_bytes: self.start(z) + rel,
                    verify: true,
                }
            }
            None => {
                // Nothing written to read: above a write pointer, inside a zone's capacity.
                self.stats.reads_beyond_wp += 1;
                self.tag_zone[tag] = NONE;
                let zb = self.zone_of(io.offset_bytes);
                let rel =
                    (io.offset_bytes % self.p.zone_size_bytes) % (self.cap() - len + 1) / blk * blk;
                Placed {
                    offset_bytes: self.start(zb) + rel,
                    verify: false,
                }
            }
        }
    }

    /// Whether a zone command may go now: a write within the open-zone limit, a reset once
    /// its zone's reads are done.
    fn can_send(&self, op: CmdOp, z: u32) -> bool {
        let s = &self.zs[z as usize];
        match op {
            CmdOp::ZoneReset => s.reads == 0,
            CmdOp::Write => s.held || self.held < self.open_max,
            _ => true,
        }
    }

    fn send(&mut self, c: MemberCmd, z: u32, cx: &mut Cx) {
        if c.op == CmdOp::Write && !self.zs[z as usize].held {
            self.zs[z as usize].held = true;
            self.held += 1;
            self.stats.open_zones_peak = self.stats.open_zones_peak.max(u64::from(self.held));
        }
        cx.out.cmd(c);
    }

    /// A zone command: now, or after those of its zone waiting.
    fn emit(&mut self, c: MemberCmd, z: u32, cx: &mut Cx) {
        self.zs[z as usize].pending += 1;
        if self.zs[z as usize].waiting == 0 && self.can_send(c.op, z) {
            self.send(c, z, cx);
        } else {
            self.zs[z as usize].waiting += 1;
            self.waiting.push_back((c, z));
            self.stats.waits += 1;
            self.stats.waiting_max = self.stats.waiting_max.max(self.waiting.len() as u64);
        }
    }

    /// Sends what waits and may go, each zone's in order. A zone's commands never wait behind
    /// another zone's: the writes that will fill a zone (and free its place under the limit)
    /// go while a write to a new zone waits for that place.
    fn pump(&mut self, cx: &mut Cx) {
        if self.waiting.is_empty() {
            return;
        }
        self.pass += 1;
        let pass = self.pass;
        let mut i = 0;
        while i < self.waiting.len() {
            let (c, z) = self.waiting[i];
            if self.zs[z as usize].blocked_pass != pass && self.can_send(c.op, z) {
                self.waiting.remove(i);
                self.zs[z as usize].waiting -= 1;
                self.send(c, z, cx);
            } else {
                self.zs[z as usize].blocked_pass = pass;
                i += 1;
            }
        }
    }

    /// Zone `z`'s commands completed one: no longer counted against the limit once it is full
    /// or empty with nothing in flight.
    fn settle(&mut self, z: u32) {
        let cap = self.cap();
        let s = &mut self.zs[z as usize];
        s.pending -= 1;
        if s.held && s.pending == 0 && (s.done == 0 || s.done >= cap) {
            s.held = false;
            self.held -= 1;
        }
    }

    fn mgmt_cmd(&mut self, op: CmdOp, z: u32) -> Option<MemberCmd> {
        let id = self.mgmt_free.pop()?;
        self.mgmt_of[(id - self.p.tags) as usize] = (op, z);
        Some(MemberCmd {
            id,
            member: 0,
            op,
            offset_bytes: self.start(z),
            len_bytes: if op == CmdOp::ZoneReset {
                self.p.zone_size_bytes as u32
            } else {
                0
            },
            buf: BufRef::None,
            fua: false,
        })
    }
}

/// "64 MiB", "48 MiB", or bytes.
fn size_text(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else {
        format!("{b} bytes")
    }
}

impl Volume for Zbd {
    fn layout(&self) -> &'static str {
        "zbd"
    }
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    fn members(&self) -> u32 {
        1
    }
    fn block_bytes(&self) -> u32 {
        self.p.block_bytes
    }
    fn cmds_max(&self) -> u32 {
        self.p.tags + self.mgmt_of.len() as u32
    }
    fn outputs_max(&self) -> usize {
        self.cmds_max() as usize + 4
    }

    fn place(&mut self, io: &VolIo) -> Option<Placed> {
        let t = io.tag as usize;
        let p = match io.op {
            VolOp::Write => self.place_write(io),
            VolOp::Read => self.place_read(io),
            _ => return None,
        };
        self.placed[t] = true;
        self.tag_off[t] = p.offset_bytes;
        Some(p)
    }

    fn submit(&mut self, _now_ns: u64, io: VolIo, cx: &mut Cx) {
        let t = io.tag as usize;
        if matches!(io.op, VolOp::Read | VolOp::Write) && !self.placed[t] {
            // A driver that does not ask where (the simulator): placed here.
            self.place(&io);
        }
        self.placed[t] = false;
        self.tag_op[t] = io.op;
        self.tag_len_bytes[t] = u64::from(io.len_bytes);
        while let Some((op, z)) = self.mgmt_next.pop_front() {
            match self.mgmt_cmd(op, z) {
                Some(c) => self.emit(c, z, cx),
                None => debug_assert!(false, "out of zone management ids"),
            }
        }
        let (op, buf) = match io.op {
            VolOp::Read => (CmdOp::Read, true),
            VolOp::Write => (CmdOp::Write, true),
            VolOp::Flush => (CmdOp::Flush, false),
            VolOp::Trim | VolOp::WriteZeroes => {
                cx.out.done(io.tag, IoResult::Err(EOPNOTSUPP));
                return;
            }
        };
        let c = MemberCmd {
            id: io.tag,
            member: 0,
            op,
            offset_bytes: if buf {
                self.tag_off[t]
            } else {
                io.offset_bytes
            },
            len_bytes: io.len_bytes,
            buf: if buf {
                BufRef::Client {
                    tag: io.tag,
                    offset: 0,
                }
            } else {
                BufRef::None
            },
            fua: io.fua,
        };
        if op == CmdOp::Write {
            let z = self.tag_zone[t];
            self.emit(c, z, cx);
        } else {
            cx.out.cmd(c);
        }
    }

    fn member_done(&mut self, _now_ns: u64, done: CmdDone, cx: &mut Cx) {
        let ok = !matches!(done.result, CmdResult::Err(_));
        if done.id < self.p.tags {
            let t = done.id as usize;
            let z = self.tag_zone[t];
            match self.tag_op[t] {
                VolOp::Read if z != NONE => {
                    self.zs[z as usize].reads -= 1;
                }
                VolOp::Write => {
                    let len = self.tag_len_bytes[t];
                    if ok {
                        let s = &mut self.zs[z as usize];
                        s.done += len;
                        s.data = s.done;
                    }
                    self.settle(z);
                }
                _ => {}
            }
            self.pump(cx);
            let r = match done.result {
                CmdResult::Err(e) => IoResult::Err(e),
                CmdResult::Ok => IoResult::Ok,
                _ => IoResult::Err(EIO),
            };
            cx.out.done(done.id, r);
            return;
        }
        let (op, z) = self.mgmt_of[(done.id - self.p.tags) as usize];
        self.mgmt_free.push(done.id);
        let cap = self.cap();
        let s = &mut self.zs[z as usize];
        if op == CmdOp::ZoneReset {
            s.resets -= 1;
        }
        if ok {
            if op == CmdOp::ZoneReset {
                s.done = 0;
                s.data = 0;
                s.resets_done += 1;
            } else {
                s.done = cap;
            }
        } else {
            self.stats.mgmt_errors += 1;
        }
        self.settle(z);
        self.pump(cx);
    }

    fn stats(&self) -> serde_json::Value {
        let zones: Vec<serde_json::Value> = self
            .zs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.touched)
            .take(ZONES_LISTED_MAX)
            .map(|(i, s)| {
                serde_json::json!({
                    "zone": i,
                    "write_pointer_bytes": s.done,
                    "bytes_written": s.bytes_written,
                    "resets": s.resets_done,
                    "reset_at_start": s.reset_at_start,
                })
            })
            .collect();
        let mut v = serde_json::to_value(self.stats).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("zonemode".into(), "zbd".into());
            o.insert(
                "open_zones_max".into(),
                if self.open_max == u32::MAX {
                    serde_json::Value::Null
                } else {
                    self.open_max.into()
                },
            );
            o.insert(
                "zones_first".into(),
                serde_json::Value::from(self.p.zones.start),
            );
            o.insert(
                "zones_count".into(),
                serde_json::Value::from(self.p.zones.len()),
            );
            o.insert(
                "writes_random".into(),
                serde_json::Value::from(self.p.random_writes),
            );
            o.insert("zones".into(), serde_json::Value::Array(zones));
        }
        v
    }

    fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.stats.reads_beyond_wp > 0 {
            w.push(format!(
                "--zonemode zbd: {} reads found no written data and read above a write pointer \
                 (zeros, without a flash read, and not verified); write the zones first",
                self.stats.reads_beyond_wp
            ));
        }
        w
    }
}
