//! The vocabulary between a volume and the driver that hosts it (docs/arch-array.md).
//!
//! A driver hands a volume *volume I/Os* ([`VolIo`]) and *member completions* ([`CmdDone`]), and
//! calls it when its timer is due; the volume answers by pushing *member commands*
//! ([`MemberCmd`]) and *volume completions* ([`VolDone`]) into a bounded output queue
//! ([`Outputs`]). Data moves by reference ([`BufRef`]): the driver owns every buffer (one per
//! client slot, plus the scratch buffers a volume asks for when it is built), and a volume that
//! must compute on bytes (parity, journals, buffered reads) does it through the [`DataPlane`] the
//! driver passes in. The simulator's data plane has no bytes ([`NoData`]); the real driver's
//! points at real memory; [`crate::testing::MemData`] keeps bytes for tests of policies.

use nines_core::op::Op;

/// An operation on a volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VolOp {
    Read,
    Write,
    /// Make every write completed before it durable.
    Flush,
    /// The client no longer needs the range (NBD TRIM, discard).
    Trim,
    /// Write zeros to the range (NBD WRITE_ZEROES); no data buffer.
    WriteZeroes,
}

impl From<Op> for VolOp {
    fn from(op: Op) -> VolOp {
        match op {
            Op::Read => VolOp::Read,
            Op::Write => VolOp::Write,
        }
    }
}

/// Where a command's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufRef {
    /// No data (flush, trim, control; every command in a driver without data).
    None,
    /// Inside the client buffer of volume I/O `tag`, at `offset` bytes.
    Client { tag: u32, offset: u32 },
    /// Inside scratch buffer `index` of this volume (see [`Volume::scratch`]), at `offset` bytes.
    Scratch { index: u32, offset: u32 },
}

/// One request to a volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolIo {
    /// The driver's tag, returned in the [`VolDone`]; below the `tags` the volume was built for.
    pub tag: u32,
    pub op: VolOp,
    pub offset_bytes: u64,
    pub len_bytes: u32,
    /// Force unit access: the write is durable when it completes.
    pub fua: bool,
}

/// Where a policy that chooses its own offsets put a volume I/O ([`Volume::place`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placed {
    /// The offset the I/O is submitted at (and its data pattern is of, with `--verify`).
    pub offset_bytes: u64,
    /// Whether data read there is the last written (`false`: a read above every write pointer,
    /// which returns zeros; `--verify` does not check it).
    pub verify: bool,
}

/// How a volume I/O or member command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoResult {
    Ok,
    /// A negative-free errno (EIO, ENOSPC, EOPNOTSUPP ...).
    Err(i32),
}

/// A volume I/O completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolDone {
    pub tag: u32,
    pub result: IoResult,
}

/// The window of NVMe Predictable Latency Mode (NVMe 1.4, Set Features 13h/14h).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Window {
    /// Deterministic: no garbage collection unless the device would run out of free blocks.
    Deterministic,
    /// Non-deterministic: writes and GC allowed.
    NonDeterministic,
}

/// Device-control commands (beyond reading and writing bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Control {
    /// Select the PLM window.
    SetWindow(Window),
    /// Collect garbage now, for at most `budget_ns` of device time.
    GcNow { budget_ns: u64 },
    /// How long the range `offset_bytes..+len_bytes` stays busy: answered with
    /// [`CmdResult::Busy`] (0 when idle).
    QueryBusy,
}

/// What a member command does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmdOp {
    Read,
    Write,
    Flush,
    Trim,
    /// Write zeros over the range (no buffer): BLKZEROOUT / FALLOC_FL_ZERO_RANGE on real members.
    WriteZeroes,
    /// A read that completes at once with [`CmdResult::Busy`] when it would wait longer than
    /// `threshold_ns` behind GC or a program/erase (IODA, SOSP'21); otherwise a normal read.
    /// Members without the capability perform a normal read.
    FastFailRead {
        threshold_ns: u64,
    },
    Control(Control),
    /// NVMe Zone Append (zoned members): write `len_bytes` at the write pointer of the zone
    /// starting at `offset_bytes`; answered [`CmdResult::Appended`] with where it went. Members
    /// that are not zoned answer EOPNOTSUPP.
    ZoneAppend,
    /// NVMe Zone Management Send, Reset: every zone in `offset_bytes..+len_bytes` (whole zones;
    /// a driver with one zone per command sends one per zone) becomes empty; reads return zeros.
    ZoneReset,
    /// Zone Management Send, Finish: the zone starting at `offset_bytes` becomes full.
    ZoneFinish,
    /// A write tagged with a Flexible Data Placement handle (NVMe TP4146: directive type 2,
    /// data placement; DSPEC = the placement identifier): an FDP member puts it in that
    /// reclaim unit handle's open reclaim unit. Members without FDP (files, block devices)
    /// perform a plain write; a modelled member without FDP refuses it (EINVAL), as does one
    /// given a handle it does not have. Everything else about it is [`CmdOp::Write`].
    PlacedWrite {
        handle: u16,
    },
}

impl CmdOp {
    /// Whether the command writes the bytes of its buffer (a write, placed or not).
    pub fn writes_data(self) -> bool {
        matches!(self, CmdOp::Write | CmdOp::PlacedWrite { .. })
    }

    /// The direction statistics file the command under, if it moves data.
    pub fn data_op(self) -> Option<Op> {
        match self {
            CmdOp::Read | CmdOp::FastFailRead { .. } => Some(Op::Read),
            CmdOp::Write | CmdOp::PlacedWrite { .. } | CmdOp::WriteZeroes | CmdOp::ZoneAppend => {
                Some(Op::Write)
            }
            _ => None,
        }
    }
}

/// A command to one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberCmd {
    /// The volume's id for it, returned in the [`CmdDone`]; below [`Volume::cmds_max`].
    pub id: u32,
    /// Index of the member in the volume.
    pub member: u32,
    pub op: CmdOp,
    pub offset_bytes: u64,
    pub len_bytes: u32,
    pub buf: BufRef,
    /// Force unit access (writes).
    pub fua: bool,
}

/// How a member command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmdResult {
    Ok,
    Err(i32),
    /// A fast-fail read that did not wait, or a busy query: the member stays busy this long.
    Busy {
        remaining_ns: u64,
    },
    /// A [`CmdOp::ZoneAppend`] written at `offset_bytes` (the member's offset: the zone's write
    /// pointer when it arrived).
    Appended {
        offset_bytes: u64,
    },
}

impl CmdResult {
    /// The command succeeded (an append, a busy answer included).
    pub fn is_ok(self) -> bool {
        !matches!(self, CmdResult::Err(_))
    }
}

/// A member command completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmdDone {
    pub id: u32,
    pub result: CmdResult,
}

/// What the volume holds at an offset, for block status (NBD `base:allocation`): how a server
/// tells a client which ranges it can skip. Every variant covers `len_bytes` from the offset
/// asked about (at least one byte, never past the volume).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extent {
    /// Reads as zeros without reading a member (never written, or trimmed).
    Unmapped { len_bytes: u64 },
    /// Lies as is on member `member` from `offset_bytes`: the member's own holes (a sparse
    /// file's, an emulated device's unwritten blocks) are the volume's.
    OnMember {
        member: u32,
        offset_bytes: u64,
        len_bytes: u64,
    },
    /// Holds data, or the layout cannot say (parity, a write-back buffer): report allocated,
    /// which the protocol always allows.
    Mapped { len_bytes: u64 },
}

/// What a volume asks of its driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Cmd(MemberCmd),
    Done(VolDone),
}

/// The bounded queue a volume pushes into; the driver drains it after every call. Its capacity
/// is fixed when the driver builds it (from [`Volume::outputs_max`]), so pushing never
/// allocates; overflowing it is a bug in the volume's bound and is asserted.
#[derive(Debug)]
pub struct Outputs {
    /// Pushed outputs; `head` of them already popped. Emptied when fully popped, so a queue
    /// drained after every call never holds more than one call's outputs.
    q: Vec<Output>,
    head: usize,
    cap: usize,
}

impl Outputs {
    pub fn with_capacity(cap: usize) -> Outputs {
        Outputs {
            q: Vec::with_capacity(cap),
            head: 0,
            cap,
        }
    }

    #[inline]
    pub fn push(&mut self, o: Output) {
        if self.head == self.q.len() {
            self.clear();
        } else if self.q.len() == self.cap && self.head > 0 {
            self.q.drain(..self.head);
            self.head = 0;
        }
        assert!(
            self.q.len() < self.cap,
            "a volume pushed more than its declared bound of {} outputs",
            self.cap
        );
        self.q.push(o);
    }

    #[inline]
    pub fn cmd(&mut self, c: MemberCmd) {
        self.push(Output::Cmd(c));
    }

    #[inline]
    pub fn done(&mut self, tag: u32, result: IoResult) {
        self.push(Output::Done(VolDone { tag, result }));
    }

    #[inline]
    pub fn pop(&mut self) -> Option<Output> {
        match self.q.get(self.head) {
            Some(&o) => {
                self.head += 1;
                Some(o)
            }
            None => {
                self.q.clear();
                self.head = 0;
                None
            }
        }
    }

    /// Outputs not yet popped, to read in place (then [`Outputs::clear`]).
    #[inline]
    pub fn as_slice(&self) -> &[Output] {
        &self.q[self.head..]
    }

    #[inline]
    pub fn clear(&mut self) {
        self.q.clear();
        self.head = 0;
    }

    /// Outputs not yet popped.
    pub fn len(&self) -> usize {
        self.q.len() - self.head
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Byte operations on buffers the driver owns. Implementations: [`NoData`] (simulator: nothing
/// to move), the real driver's (raw memory), [`crate::testing::MemData`] (tests).
pub trait DataPlane {
    /// Whether buffers hold real bytes; a policy may skip computing on them when not.
    fn has_data(&self) -> bool;
    /// `dst[..len] = src[..len]`.
    fn copy(&mut self, dst: BufRef, src: BufRef, len: u32);
    /// `dst[..len] ^= src[..len]`.
    fn xor(&mut self, dst: BufRef, src: BufRef, len: u32);
    /// `dst[..len] = 0`.
    fn zero(&mut self, dst: BufRef, len: u32);
    /// Writes `bytes` at `dst` (journal records, superblocks).
    fn write_bytes(&mut self, dst: BufRef, bytes: &[u8]);
    /// Reads `out.len()` bytes at `src`.
    fn read_bytes(&mut self, src: BufRef, out: &mut [u8]);
}

/// The data plane of a driver without bytes (the simulator): every operation does nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoData;

impl DataPlane for NoData {
    fn has_data(&self) -> bool {
        false
    }
    fn copy(&mut self, _: BufRef, _: BufRef, _: u32) {}
    fn xor(&mut self, _: BufRef, _: BufRef, _: u32) {}
    fn zero(&mut self, _: BufRef, _: u32) {}
    fn write_bytes(&mut self, _: BufRef, _: &[u8]) {}
    fn read_bytes(&mut self, _: BufRef, out: &mut [u8]) {
        out.fill(0);
    }
}

/// What a volume's calls get: where to push, and the bytes.
pub struct Cx<'a> {
    pub out: &'a mut Outputs,
    pub data: &'a mut dyn DataPlane,
}

/// A volume policy: sans-IO (no clock, no file, no thread), driven by the real driver and by the
/// simulator alike. Every method takes the current time; a driver calls them in non-decreasing
/// time ([`crate::VolumeHost`] asserts it).
pub trait Volume: Send {
    /// The layout's name (`passthrough`, `raid0`, ...).
    fn layout(&self) -> &'static str;
    /// Capacity offered to clients.
    fn size_bytes(&self) -> u64;
    /// Members driven.
    fn members(&self) -> u32;
    /// Alignment of volume offsets and lengths that the layout needs.
    fn block_bytes(&self) -> u32;
    /// Scratch buffers the driver must provide: (count, bytes each). Default none.
    fn scratch(&self) -> (u32, u32) {
        (0, 0)
    }
    /// Most member commands in flight at once (ids are below it).
    fn cmds_max(&self) -> u32;
    /// Most outputs one call can push (the driver sizes [`Outputs`] with it).
    fn outputs_max(&self) -> usize;
    /// Where this client request goes, for a policy that chooses offsets itself (fio's
    /// `zonemode=zbd` over a zoned device, [`crate::zbd`]: writes at a write pointer, reads in
    /// written data). The driver asks just before [`Volume::submit`], with the offset as
    /// generated, and submits the I/O at the offset returned (its `--verify` pattern is of that
    /// offset). None (every other layout): where it was asked.
    fn place(&mut self, io: &VolIo) -> Option<Placed> {
        let _ = io;
        None
    }
    /// A client request. Its buffer is `BufRef::Client { tag, offset: 0 }`.
    fn submit(&mut self, now_ns: u64, io: VolIo, cx: &mut Cx);
    /// A member command completed.
    fn member_done(&mut self, now_ns: u64, done: CmdDone, cx: &mut Cx);
    /// Whether the member commands one [`Volume::submit`] pushes matter only together: until
    /// the last of them completes the volume does nothing with their completions but count
    /// them, and it pushes nothing else in that submit. A simulator, which knows each
    /// command's outcome when it sends it, may then send them all at once and complete the
    /// request at the last one's completion, recording each command's own latency
    /// ([`crate::VolumeHost::submit_folded`], raid0's path): an event and the output queue
    /// saved per stripe unit. Default: no.
    fn folds_completions(&self) -> bool {
        false
    }
    /// When the volume wants [`Volume::on_timer`] called (window rotation, flush pacing...).
    fn next_timer_ns(&self) -> Option<u64> {
        None
    }
    /// Called at or after [`Volume::next_timer_ns`].
    fn on_timer(&mut self, now_ns: u64, cx: &mut Cx) {
        let _ = (now_ns, cx);
    }
    /// Whether the volume acknowledges writes it still holds in a buffer of its own (a
    /// write-back buffer): a driver with real data must FLUSH it before it ends.
    fn write_back(&self) -> bool {
        false
    }
    /// Members the policy keeps free of device garbage collection right now (a serial array's
    /// front-end), so a simulator can count the GC that happens on them anyway. Default: the
    /// layout promises nothing.
    fn gc_free_members(&self) -> Option<std::ops::Range<u32>> {
        None
    }
    /// What the volume holds at `offset_bytes` (below [`Volume::size_bytes`]): see [`Extent`].
    /// Asked off the hot path (a client's block-status request). Default: the rest of the
    /// volume [`Extent::Mapped`], which is true of every layout.
    fn extent_at(&self, offset_bytes: u64) -> Extent {
        Extent::Mapped {
            len_bytes: self.size_bytes().saturating_sub(offset_bytes).max(1),
        }
    }
    /// The policy's own counters for the report (fan-out, rebuilt reads, ...): a JSON object.
    fn stats(&self) -> serde_json::Value {
        serde_json::Value::Object(serde_json::Map::new())
    }
    /// What the policy's counters say the user should know, one line each, naming what to
    /// change (asked once, when the run is reported).
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
}
