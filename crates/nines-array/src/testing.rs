//! Testing a policy with real bytes and no driver: in-memory members ([`MemMembers`]) that can be
//! failed, a data plane over in-memory buffers ([`MemData`]), and a synchronous driver
//! ([`SyncDriver`]) that executes every member command at once, in order, at a time the test
//! controls. Policy authors test layouts, parity and rebuilds here, then on both drivers.
//!
//! Not for hot paths: these allocate freely.

use crate::api::{
    BufRef, CmdDone, CmdOp, CmdResult, DataPlane, IoResult, MemberCmd, Output, VolIo, VolOp, Volume,
};
use crate::{AnyVolume, VolumeHost};

/// EIO, for failed members.
pub const EIO: i32 = 5;
/// EINVAL: a write off a zone's write pointer.
pub const EINVAL: i32 = 22;
/// EOPNOTSUPP: a zone command to a conventional member, TRIM to a zoned one.
pub const EOPNOTSUPP: i32 = 95;

/// Members as byte vectors; a failed member answers every command with EIO.
#[derive(Clone, Debug)]
pub struct MemMembers {
    data: Vec<Vec<u8>>,
    failed: Vec<bool>,
    /// Commands executed per member.
    pub commands: Vec<u64>,
    /// Zoned members (see [`MemMembers::set_zoned`]): zone size (0: conventional).
    zone_bytes: u64,
    /// Per member, per zone, the write pointer (bytes from the zone's start).
    wp: Vec<Vec<u64>>,
    /// Zone resets executed, and zoned commands refused (writes off the write pointer...).
    pub zone_resets: u64,
    pub zone_errors: u64,
}

impl MemMembers {
    pub fn new(sizes_bytes: &[u64]) -> MemMembers {
        MemMembers {
            data: sizes_bytes.iter().map(|&s| vec![0u8; s as usize]).collect(),
            failed: vec![false; sizes_bytes.len()],
            commands: vec![0; sizes_bytes.len()],
            zone_bytes: 0,
            wp: Vec::new(),
            zone_resets: 0,
            zone_errors: 0,
        }
    }

    /// Makes every member zoned, in zones of `zone_bytes` (capacity = size), all empty: writes
    /// only at a zone's write pointer (else EINVAL), zone append, reset (the zone reads zeros),
    /// finish; TRIM answers EOPNOTSUPP.
    pub fn set_zoned(&mut self, zone_bytes: u64) {
        assert!(zone_bytes > 0);
        self.zone_bytes = zone_bytes;
        self.wp = self
            .data
            .iter()
            .map(|d| vec![0; (d.len() as u64 / zone_bytes) as usize])
            .collect();
    }

    /// The write pointer of `member`'s zone `zone` (zoned members).
    pub fn write_pointer(&self, member: u32, zone: u64) -> u64 {
        self.wp[member as usize][zone as usize]
    }

    /// Whether a write of `len` at `off` on member `m` is at its zone's write pointer; moves
    /// the pointer when it is.
    fn zone_write(&mut self, m: usize, off: u64, len: u64) -> bool {
        let z = off / self.zone_bytes;
        let rel = off % self.zone_bytes;
        let ok = (z as usize) < self.wp[m].len()
            && rel == self.wp[m][z as usize]
            && rel + len <= self.zone_bytes;
        if ok {
            self.wp[m][z as usize] += len;
        } else {
            self.zone_errors += 1;
        }
        ok
    }

    /// Members holding these bytes (a copy of real devices, to restart a volume over them).
    pub fn from_bytes(data: Vec<Vec<u8>>) -> MemMembers {
        let n = data.len();
        MemMembers {
            data,
            failed: vec![false; n],
            commands: vec![0; n],
            zone_bytes: 0,
            wp: Vec::new(),
            zone_resets: 0,
            zone_errors: 0,
        }
    }

    pub fn byte(&self, member: u32, offset: u64) -> u8 {
        self.data[member as usize][offset as usize]
    }

    pub fn bytes(&self, member: u32) -> &[u8] {
        &self.data[member as usize]
    }

    /// From now on every command to `member` fails with EIO.
    pub fn fail(&mut self, member: u32) {
        self.failed[member as usize] = true;
    }

    /// Replaces `member` with a fresh zeroed one (a rebuild target).
    pub fn replace(&mut self, member: u32) {
        let m = member as usize;
        self.data[m].fill(0);
        self.failed[m] = false;
    }
}

/// Client buffers (one per tag) and scratch buffers, in memory.
#[derive(Clone, Debug)]
pub struct MemData {
    pub client: Vec<Vec<u8>>,
    pub scratch: Vec<Vec<u8>>,
}

impl MemData {
    pub fn new(tags: u32, len_bytes_max: u32, scratch: (u32, u32)) -> MemData {
        MemData {
            client: (0..tags).map(|_| vec![0; len_bytes_max as usize]).collect(),
            scratch: (0..scratch.0)
                .map(|_| vec![0; scratch.1 as usize])
                .collect(),
        }
    }

    fn slice(&mut self, r: BufRef, len: u32) -> &mut [u8] {
        let (v, off) = match r {
            BufRef::Client { tag, offset } => (&mut self.client[tag as usize], offset),
            BufRef::Scratch { index, offset } => (&mut self.scratch[index as usize], offset),
            BufRef::None => panic!("a data operation on BufRef::None"),
        };
        let off = off as usize;
        &mut v[off..off + len as usize]
    }
}

impl DataPlane for MemData {
    fn has_data(&self) -> bool {
        true
    }
    fn copy(&mut self, dst: BufRef, src: BufRef, len: u32) {
        let tmp = self.slice(src, len).to_vec();
        self.slice(dst, len).copy_from_slice(&tmp);
    }
    fn xor(&mut self, dst: BufRef, src: BufRef, len: u32) {
        let tmp = self.slice(src, len).to_vec();
        for (d, s) in self.slice(dst, len).iter_mut().zip(tmp) {
            *d ^= s;
        }
    }
    fn zero(&mut self, dst: BufRef, len: u32) {
        self.slice(dst, len).fill(0);
    }
    fn write_bytes(&mut self, dst: BufRef, bytes: &[u8]) {
        self.slice(dst, bytes.len() as u32).copy_from_slice(bytes);
    }
    fn read_bytes(&mut self, src: BufRef, out: &mut [u8]) {
        let n = out.len() as u32;
        out.copy_from_slice(self.slice(src, n));
    }
}

/// A driver that executes member commands synchronously against [`MemMembers`].
pub struct SyncDriver {
    host: VolumeHost,
    data: MemData,
    members: MemMembers,
    now_ns: u64,
    /// Time each member command takes (moves the clock; 0 by default).
    pub cmd_ns: u64,
    /// Commands that answer [`CmdResult::Busy`] instead (fast-fail reads, busy queries): the
    /// member and for how long; others run normally.
    pub busy: Vec<(u32, u64)>,
    /// When set, every member command executed, with the members the volume said it kept free
    /// of GC ([`crate::Volume::gc_free_members`]) when it executed.
    pub trace: Option<Vec<(MemberCmd, Option<std::ops::Range<u32>>)>>,
}

impl SyncDriver {
    pub fn new(
        vol: AnyVolume,
        member_sizes_bytes: &[u64],
        tags: u32,
        len_bytes_max: u32,
    ) -> SyncDriver {
        let data = MemData::new(tags, len_bytes_max, vol.scratch());
        SyncDriver {
            host: VolumeHost::new(vol, 0, true),
            data,
            members: MemMembers::new(member_sizes_bytes),
            now_ns: 0,
            cmd_ns: 0,
            busy: Vec::new(),
            trace: None,
        }
    }

    /// A driver over existing members (a volume restarted over the devices another left).
    pub fn with_members(
        vol: AnyVolume,
        members: MemMembers,
        tags: u32,
        len_bytes_max: u32,
    ) -> SyncDriver {
        let sizes: Vec<u64> = members.data.iter().map(|d| d.len() as u64).collect();
        let mut d = SyncDriver::new(vol, &sizes, tags, len_bytes_max);
        d.members = members;
        d
    }

    pub fn members(&self) -> &MemMembers {
        &self.members
    }

    pub fn members_mut(&mut self) -> &mut MemMembers {
        &mut self.members
    }

    pub fn host(&self) -> &VolumeHost {
        &self.host
    }

    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Moves the clock to `t` and runs the volume's timers that fall due on the way.
    pub fn advance_to(&mut self, t: u64) {
        // Bounded: each timer call must move the volume's next timer forward.
        for _ in 0..1_000_000 {
            match self.host.next_timer_ns() {
                Some(at) if at <= t => {
                    self.now_ns = self.now_ns.max(at);
                    self.host.on_timer(self.now_ns, &mut self.data);
                    self.drain(&mut Vec::new());
                }
                _ => break,
            }
        }
        self.now_ns = self.now_ns.max(t);
    }

    fn exec(&mut self, c: &MemberCmd) -> CmdResult {
        let m = c.member as usize;
        self.members.commands[m] += 1;
        if self.members.failed[m] {
            return CmdResult::Err(EIO);
        }
        let off = c.offset_bytes as usize;
        let len = c.len_bytes as usize;
        if self.members.zone_bytes > 0 {
            if let Some(r) = self.exec_zoned(c) {
                return r;
            }
        } else if matches!(
            c.op,
            CmdOp::ZoneAppend | CmdOp::ZoneReset | CmdOp::ZoneFinish
        ) {
            return CmdResult::Err(EOPNOTSUPP);
        }
        match c.op {
            CmdOp::FastFailRead { threshold_ns } => {
                if let Some(&(_, ns)) = self.busy.iter().find(|(b, _)| *b == c.member)
                    && ns > threshold_ns
                {
                    return CmdResult::Busy { remaining_ns: ns };
                }
                let src = self.members.data[m][off..off + len].to_vec();
                self.data.write_bytes(c.buf, &src);
                CmdResult::Ok
            }
            CmdOp::Read => {
                let src = self.members.data[m][off..off + len].to_vec();
                self.data.write_bytes(c.buf, &src);
                CmdResult::Ok
            }
            CmdOp::Write | CmdOp::PlacedWrite { .. } => {
                let mut buf = vec![0u8; len];
                self.data.read_bytes(c.buf, &mut buf);
                self.members.data[m][off..off + len].copy_from_slice(&buf);
                CmdResult::Ok
            }
            CmdOp::WriteZeroes | CmdOp::Trim => {
                self.members.data[m][off..off + len].fill(0);
                CmdResult::Ok
            }
            CmdOp::Flush => CmdResult::Ok,
            CmdOp::Control(crate::api::Control::QueryBusy) => {
                let ns = self
                    .busy
                    .iter()
                    .find(|(b, _)| *b == c.member)
                    .map_or(0, |x| x.1);
                CmdResult::Busy { remaining_ns: ns }
            }
            CmdOp::Control(_) => CmdResult::Ok,
            CmdOp::ZoneAppend | CmdOp::ZoneReset | CmdOp::ZoneFinish => {
                unreachable!("zone commands are executed by exec_zoned")
            }
        }
    }

    /// The commands zoned members execute differently (None: as a conventional member).
    fn exec_zoned(&mut self, c: &MemberCmd) -> Option<CmdResult> {
        let m = c.member as usize;
        let zb = self.members.zone_bytes;
        let (off, len) = (c.offset_bytes, u64::from(c.len_bytes));
        let r = match c.op {
            CmdOp::Write | CmdOp::WriteZeroes => {
                if !self.members.zone_write(m, off, len) {
                    return Some(CmdResult::Err(EINVAL));
                }
                return None;
            }
            CmdOp::Trim => CmdResult::Err(EOPNOTSUPP),
            CmdOp::ZoneAppend => {
                if off % zb != 0 {
                    self.members.zone_errors += 1;
                    return Some(CmdResult::Err(EINVAL));
                }
                let at = off + self.members.wp[m][(off / zb) as usize];
                if !self.members.zone_write(m, at, len) {
                    return Some(CmdResult::Err(EINVAL));
                }
                let mut buf = vec![0u8; len as usize];
                self.data.read_bytes(c.buf, &mut buf);
                self.members.data[m][at as usize..(at + len) as usize].copy_from_slice(&buf);
                CmdResult::Appended { offset_bytes: at }
            }
            CmdOp::ZoneReset => {
                if off % zb != 0 || len % zb != 0 || len == 0 {
                    self.members.zone_errors += 1;
                    return Some(CmdResult::Err(EINVAL));
                }
                self.members.data[m][off as usize..(off + len) as usize].fill(0);
                for z in off / zb..(off + len) / zb {
                    self.members.wp[m][z as usize] = 0;
                    self.members.zone_resets += 1;
                }
                CmdResult::Ok
            }
            CmdOp::ZoneFinish => {
                self.members.wp[m][(off / zb) as usize] = zb;
                CmdResult::Ok
            }
            _ => return None,
        };
        Some(r)
    }

    /// Executes outputs until the queue is empty; collects volume completions.
    fn drain(&mut self, done: &mut Vec<(u32, IoResult)>) {
        // Bounded: a policy that keeps issuing commands forever is a bug this catches.
        for _ in 0..10_000_000 {
            let Some(o) = self.host.pop() else {
                return;
            };
            match o {
                Output::Done(d) => done.push((d.tag, d.result)),
                Output::Cmd(c) => {
                    if let Some(t) = &mut self.trace {
                        t.push((c, self.host.volume().gc_free_members()));
                    }
                    self.host.sent(&c, self.now_ns);
                    let result = self.exec(&c);
                    self.now_ns += self.cmd_ns;
                    self.host.member_done(
                        self.now_ns,
                        CmdDone { id: c.id, result },
                        &mut self.data,
                    );
                }
            }
        }
        panic!("the volume never stopped issuing commands");
    }

    /// Submits `ios` together (their client buffers already filled through [`Self::data_mut`]),
    /// runs until all complete, and returns their results by tag order of completion.
    pub fn run(&mut self, ios: &[VolIo]) -> Vec<(u32, IoResult)> {
        let mut done = Vec::new();
        for io in ios {
            self.host.submit(self.now_ns, *io, &mut self.data);
        }
        self.drain(&mut done);
        // A policy may hold I/Os until a timer (turns, pacing, flushing): run the timers in
        // time order until every I/O is done. Bounded; a policy that never finishes is caught.
        for _ in 0..1_000_000 {
            if done.len() >= ios.len() {
                break;
            }
            let Some(at) = self.host.next_timer_ns() else {
                break;
            };
            self.now_ns = self.now_ns.max(at);
            self.host.on_timer(self.now_ns, &mut self.data);
            self.drain(&mut done);
        }
        assert_eq!(
            done.len(),
            ios.len(),
            "every volume I/O completes exactly once"
        );
        done
    }

    pub fn data_mut(&mut self) -> &mut MemData {
        &mut self.data
    }

    fn one(&mut self, op: VolOp, offset_bytes: u64, len_bytes: u32) -> IoResult {
        let io = VolIo {
            tag: 0,
            op,
            offset_bytes,
            len_bytes,
            fua: false,
        };
        self.run(&[io])[0].1
    }

    /// Writes `bytes` at `offset` (through tag 0's buffer).
    pub fn write(&mut self, offset_bytes: u64, bytes: &[u8]) -> Result<(), i32> {
        self.data.client[0][..bytes.len()].copy_from_slice(bytes);
        match self.one(VolOp::Write, offset_bytes, bytes.len() as u32) {
            IoResult::Ok => Ok(()),
            IoResult::Err(e) => Err(e),
        }
    }

    /// Reads `len` bytes at `offset`.
    pub fn read(&mut self, offset_bytes: u64, len_bytes: u32) -> Result<Vec<u8>, i32> {
        self.data.client[0][..len_bytes as usize].fill(0xEE);
        match self.one(VolOp::Read, offset_bytes, len_bytes) {
            IoResult::Ok => Ok(self.data.client[0][..len_bytes as usize].to_vec()),
            IoResult::Err(e) => Err(e),
        }
    }

    pub fn flush(&mut self) -> Result<(), i32> {
        match self.one(VolOp::Flush, 0, 0) {
            IoResult::Ok => Ok(()),
            IoResult::Err(e) => Err(e),
        }
    }
}
