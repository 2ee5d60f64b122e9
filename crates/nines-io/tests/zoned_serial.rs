//! The serial layout (the one policy code, nines-array) over in-memory host-managed zoned
//! members that complete commands in random order, as io_uring's io-wq workers and an NVMe
//! namespace's several queues may, with each member's writes, appends and resets going through
//! `nines_io::zoned::ZoneSeq` exactly as the profile worker and the serve core send them. The
//! members enforce their write pointers like a ZNS namespace; every read is checked against a
//! shadow of what was written. With the ordering: no write off a pointer, the data exact, xGC
//! moving by appends and resetting zones; without it (the same members, the same policy), the
//! members refuse writes.

use std::collections::VecDeque;

use nines_array::testing::MemData;
use nines_array::{
    CmdDone, CmdOp, CmdResult, DataPlane, IoResult, LayoutSpec, MemberCmd, Output, SerialSpec,
    VolIo, VolOp, Volume, VolumeHost, VolumeParams,
};
use nines_io::zoned::{Dispatch, Zone, ZoneCond, ZoneGeometry, ZoneSeq, ZoneType};

const ZONE: u64 = 256 << 10;
const CAP: u64 = 192 << 10;
const ZONES: u64 = 16;
const MEMBERS: usize = 4;
const UNIT: u64 = 4096;
const TAGS: u32 = 8;
const LEN_MAX: u32 = 64 << 10;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A zoned member: bytes, a write pointer per zone, writes off it refused.
struct Dev {
    data: Vec<u8>,
    wp: Vec<u64>,
    wp_errors: u64,
}

impl Dev {
    fn write(&mut self, off: u64, bytes: &[u8]) -> bool {
        let (z, rel) = ((off / ZONE) as usize, off % ZONE);
        if z >= self.wp.len() || rel != self.wp[z] || rel + bytes.len() as u64 > CAP {
            self.wp_errors += 1;
            return false;
        }
        self.wp[z] += bytes.len() as u64;
        self.data[off as usize..off as usize + bytes.len()].copy_from_slice(bytes);
        true
    }
    fn reset(&mut self, off: u64, len: u64) -> bool {
        if !off.is_multiple_of(ZONE) || !len.is_multiple_of(ZONE) || len == 0 {
            return false;
        }
        for z in off / ZONE..(off + len) / ZONE {
            self.wp[z as usize] = 0;
            let s = (z * ZONE) as usize;
            self.data[s..s + ZONE as usize].fill(0);
        }
        true
    }
}

/// A command on its way to a member (completed in random order): a write at `offset_bytes`
/// (an append's chosen by the ordering) or a read.
struct InFlight {
    cmd: MemberCmd,
    offset_bytes: u64,
    write: bool,
}

struct Driver {
    host: VolumeHost,
    data: MemData,
    devs: Vec<Dev>,
    seqs: Vec<ZoneSeq>,
    /// Through the ordering, or straight to the members.
    ordered: bool,
    inflight: Vec<InFlight>,
    sync: VecDeque<CmdDone>,
    done: Vec<(u32, IoResult)>,
    now: u64,
    /// Errors answered to the volume.
    cmd_errors: u64,
}

fn geometry() -> (ZoneGeometry, Vec<Zone>) {
    let g = ZoneGeometry {
        zone_size_bytes: ZONE,
        zone_capacity_bytes: CAP,
        zones: ZONES,
        conventional_zones: 0,
        unwritable_zones: 0,
        max_open_zones: 0,
        max_active_zones: 0,
        max_write_bytes: 0,
    };
    let zones = (0..ZONES)
        .map(|i| Zone {
            start_bytes: i * ZONE,
            len_bytes: ZONE,
            capacity_bytes: CAP,
            wp_bytes: i * ZONE,
            kind: ZoneType::SeqWriteRequired,
            cond: ZoneCond::Empty,
            reset_recommended: false,
            non_seq: false,
        })
        .collect();
    (g, zones)
}

impl Driver {
    fn new(ordered: bool) -> Driver {
        let mut layout = LayoutSpec::Serial(SerialSpec {
            stripe_bytes: 64 << 10,
            segment_bytes: CAP,
            unit_bytes: UNIT as u32,
            rotate_free: 1,
            gc_start: 3,
            gc_stop: 4,
            gc_depth: 4,
            move_bytes: 64 << 10,
            ..SerialSpec::default()
        });
        layout.resolve_zones(Some((ZONE, CAP))).unwrap();
        let sizes = [ZONE * ZONES; MEMBERS];
        let vol = nines_array::build(
            &layout,
            &VolumeParams {
                member_sizes_bytes: &sizes,
                block_bytes: 4096,
                tags: TAGS,
                len_bytes_max: LEN_MAX,
            },
        )
        .unwrap();
        let (g, zones) = geometry();
        let cmds = vol.cmds_max();
        let data = MemData::new(TAGS, LEN_MAX, vol.scratch());
        Driver {
            host: VolumeHost::new(vol, 0, true),
            data,
            devs: (0..MEMBERS)
                .map(|_| Dev {
                    data: vec![0; (ZONE * ZONES) as usize],
                    wp: vec![0; ZONES as usize],
                    wp_errors: 0,
                })
                .collect(),
            seqs: (0..MEMBERS)
                .map(|_| ZoneSeq::new(&g, &zones, cmds))
                .collect(),
            ordered,
            inflight: Vec::new(),
            sync: VecDeque::new(),
            done: Vec::new(),
            now: 0,
            cmd_errors: 0,
        }
    }

    fn size_bytes(&self) -> u64 {
        self.host.volume().size_bytes()
    }

    /// What the ordering lets go: on its way (a write), done now (a reset, an answer); then
    /// what waits behind it in its zone.
    fn dispatch(&mut self, m: usize, first: Option<Dispatch>, mut zone: u32) {
        let mut d = first;
        loop {
            let Some(x) = d.take().or_else(|| self.seqs[m].next(zone)) else {
                return;
            };
            match x {
                Dispatch::Write {
                    cmd, offset_bytes, ..
                } => {
                    self.inflight.push(InFlight {
                        cmd,
                        offset_bytes,
                        write: true,
                    });
                    return;
                }
                Dispatch::Answer {
                    zone: z,
                    id,
                    result,
                } => {
                    self.sync.push_back(CmdDone { id, result });
                    zone = z;
                }
                Dispatch::Manage { zone: z, cmd } => {
                    let ok = match cmd.op {
                        CmdOp::ZoneReset => {
                            self.devs[m].reset(cmd.offset_bytes, u64::from(cmd.len_bytes))
                        }
                        _ => {
                            self.devs[m].wp[z as usize] = CAP;
                            true
                        }
                    };
                    let r = if ok {
                        CmdResult::Ok
                    } else {
                        CmdResult::Err(libc::EINVAL)
                    };
                    let (result, _) = self.seqs[m].complete(cmd.id, r).unwrap();
                    self.sync.push_back(CmdDone { id: cmd.id, result });
                    zone = z;
                }
            }
        }
    }

    fn send(&mut self, c: MemberCmd) {
        self.host.sent(&c, self.now);
        let m = c.member as usize;
        if self.ordered && ZoneSeq::sequenced(c.op) {
            let d = self.seqs[m].submit(&c);
            if d.is_some() {
                self.dispatch(m, d, u32::MAX);
            }
            return;
        }
        match c.op {
            CmdOp::Read => self.inflight.push(InFlight {
                cmd: c,
                offset_bytes: c.offset_bytes,
                write: false,
            }),
            // Unordered: a write goes where it says; an append where the pointer is when sent.
            CmdOp::Write => self.inflight.push(InFlight {
                cmd: c,
                offset_bytes: c.offset_bytes,
                write: true,
            }),
            CmdOp::ZoneAppend => {
                let z = (c.offset_bytes / ZONE) as usize;
                let at = c.offset_bytes + self.devs[m].wp[z];
                self.inflight.push(InFlight {
                    cmd: c,
                    offset_bytes: at,
                    write: true,
                });
            }
            CmdOp::ZoneReset => {
                let ok = self.devs[m].reset(c.offset_bytes, u64::from(c.len_bytes));
                self.sync.push_back(CmdDone {
                    id: c.id,
                    result: if ok {
                        CmdResult::Ok
                    } else {
                        CmdResult::Err(libc::EINVAL)
                    },
                });
            }
            CmdOp::Flush => self.sync.push_back(CmdDone {
                id: c.id,
                result: CmdResult::Ok,
            }),
            _ => self.sync.push_back(CmdDone {
                id: c.id,
                result: CmdResult::Err(libc::EOPNOTSUPP),
            }),
        }
    }

    fn drain(&mut self) {
        for _ in 0..1_000_000 {
            if let Some(o) = self.host.pop() {
                match o {
                    Output::Cmd(c) => self.send(c),
                    Output::Done(d) => self.done.push((d.tag, d.result)),
                }
                continue;
            }
            let Some(d) = self.sync.pop_front() else {
                return;
            };
            if let CmdResult::Err(_) = d.result {
                self.cmd_errors += 1;
            }
            self.host.member_done(self.now, d, &mut self.data);
        }
        panic!("the volume never stopped");
    }

    /// Completes one command in flight, chosen at random (the reordering).
    fn complete_one(&mut self, rng: &mut Rng) -> bool {
        if self.inflight.is_empty() {
            return false;
        }
        let k = rng.below(self.inflight.len() as u64) as usize;
        let f = self.inflight.swap_remove(k);
        let m = f.cmd.member as usize;
        let len = f.cmd.len_bytes as usize;
        let mut result = CmdResult::Ok;
        if f.write {
            let mut buf = vec![0u8; len];
            self.data.read_bytes(f.cmd.buf, &mut buf);
            if !self.devs[m].write(f.offset_bytes, &buf) {
                result = CmdResult::Err(libc::EIO);
            } else if f.cmd.op == CmdOp::ZoneAppend && !self.ordered {
                result = CmdResult::Appended {
                    offset_bytes: f.offset_bytes,
                };
            }
        } else {
            let o = f.offset_bytes as usize;
            let bytes = self.devs[m].data[o..o + len].to_vec();
            self.data.write_bytes(f.cmd.buf, &bytes);
        }
        if self.ordered
            && let Some((r, zone)) = self.seqs[m].complete(f.cmd.id, result)
        {
            result = r;
            self.dispatch(m, None, zone);
        }
        if let CmdResult::Err(_) = result {
            self.cmd_errors += 1;
        }
        self.now += 1000;
        self.host.member_done(
            self.now,
            CmdDone {
                id: f.cmd.id,
                result,
            },
            &mut self.data,
        );
        self.drain();
        true
    }

    fn timers(&mut self) {
        while let Some(t) = self.host.next_timer_ns() {
            if t > self.now {
                break;
            }
            self.host.on_timer(self.now, &mut self.data);
            self.drain();
        }
    }
}

/// Runs `ios` random writes and verified reads at depth TAGS; returns (member write-pointer
/// errors, errors answered, units read back that had been written, the volume's stats).
fn run(seed: u64, ordered: bool, ios: u32) -> (u64, u64, u64, serde_json::Value) {
    let mut rng = Rng(seed | 1);
    let mut d = Driver::new(ordered);
    let size = d.size_bytes();
    let units = size / UNIT;
    // What each unit holds (a tag of the write that put it there; 0 never written), and which
    // units an I/O in flight covers.
    let mut shadow = vec![0u32; units as usize];
    let mut busy = vec![false; units as usize];
    let mut pending: Vec<Option<(VolOp, u64, u32, u32)>> = vec![None; TAGS as usize];
    let mut serial = 1u32;
    let mut issued = 0u32;
    let mut verified = 0u64;
    for _ in 0..ios * 40 {
        // Issue on a free tag.
        if let Some(tag) = pending.iter().position(Option::is_none)
            && issued < ios
        {
            let n = 1 + rng.below(16);
            let u = rng.below(units - n);
            if (u..u + n).all(|x| !busy[x as usize]) {
                let write = rng.below(3) != 0;
                let op = if write { VolOp::Write } else { VolOp::Read };
                let len = (n * UNIT) as u32;
                if write {
                    // Every unit of this write carries (serial, unit).
                    for k in 0..n {
                        let b = &mut d.data.client[tag][(k * UNIT) as usize..][..UNIT as usize];
                        b.fill(0);
                        b[..4].copy_from_slice(&serial.to_le_bytes());
                        b[4..12].copy_from_slice(&(u + k).to_le_bytes());
                    }
                }
                for x in u..u + n {
                    busy[x as usize] = true;
                }
                pending[tag] = Some((op, u, n as u32, serial));
                serial += 1;
                issued += 1;
                d.host.submit(
                    d.now,
                    VolIo {
                        tag: tag as u32,
                        op,
                        offset_bytes: u * UNIT,
                        len_bytes: len,
                        fua: false,
                    },
                    &mut d.data,
                );
                d.drain();
            }
        }
        if rng.below(2) == 0 || issued >= ios {
            d.complete_one(&mut rng);
        }
        d.timers();
        for (tag, r) in std::mem::take(&mut d.done) {
            let (op, u, n, s) = pending[tag as usize].take().expect("a pending I/O");
            for x in u..u + u64::from(n) {
                busy[x as usize] = false;
            }
            if r != IoResult::Ok {
                continue;
            }
            if op == VolOp::Write {
                for x in u..u + u64::from(n) {
                    shadow[x as usize] = s;
                }
            } else if ordered {
                for k in 0..u64::from(n) {
                    let b = &d.data.client[tag as usize][(k * UNIT) as usize..];
                    let got = u32::from_le_bytes(b[..4].try_into().unwrap());
                    let want = shadow[(u + k) as usize];
                    assert_eq!(got, want, "seed {seed}: unit {} read back wrong", u + k);
                    if want != 0 {
                        verified += 1;
                        let unit = u64::from_le_bytes(b[4..12].try_into().unwrap());
                        assert_eq!(unit, u + k);
                    }
                }
            }
        }
        if issued >= ios && pending.iter().all(Option::is_none) && d.inflight.is_empty() {
            break;
        }
    }
    assert!(
        pending.iter().all(Option::is_none),
        "seed {seed}: I/Os never completed"
    );
    let wp_errors: u64 = d.devs.iter().map(|x| x.wp_errors).sum();
    (wp_errors, d.cmd_errors, verified, d.host.volume().stats())
}

#[test]
fn serial_over_reordering_zoned_members_keeps_every_write_at_its_pointer() {
    for seed in [1u64, 7, 42, 1234, 99_991] {
        let (wp_errors, cmd_errors, verified, st) = run(seed, true, 6000);
        assert!(verified > 10_000, "seed {seed}: {verified} units verified");
        assert_eq!(wp_errors, 0, "seed {seed}: {st}");
        assert_eq!(cmd_errors, 0, "seed {seed}: {st}");
        let n = |k: &str| st[k].as_u64().unwrap_or(0);
        assert!(n("gc_victims") > 0 && n("gc_units_moved") > 0, "{st}");
        assert!(
            n("segments_trimmed") > 64,
            "every zone reset at the first write, then victims: {st}"
        );
        assert_eq!(
            n("gc_errors") + n("write_errors") + n("trim_errors"),
            0,
            "{st}"
        );
    }
}

#[test]
fn without_the_ordering_the_same_members_refuse_writes() {
    let (wp_errors, cmd_errors, _, _) = run(7, false, 3000);
    assert!(wp_errors > 0 && cmd_errors > 0, "{wp_errors} {cmd_errors}");
}
