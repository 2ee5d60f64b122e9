//! Array volumes: the policies that sit between "volume request" and "member command", written
//! once as sans-IO state machines and moved by both drivers (the real one in nines-io, the
//! simulator in nines-sim). See docs/arch-array.md for the API as a guide to writing a policy.
//!
//! - [`api`]: volume I/Os, member commands, device control, the bounded output queue, buffers by
//!   reference and the data plane.
//! - [`raid0`]: passthrough (every independent target) and striping.
//! - [`VolumeHost`]: what a driver holds per volume: the policy, its output queue, the monotone
//!   time check, and the member commands' latencies.
//! - [`testing`]: in-memory members and a synchronous driver, to test a policy with real bytes.

pub mod api;
pub mod crashsim;
pub mod meta;
pub mod raid0;
pub mod raid5;
pub mod serial;
pub mod shaping;
pub mod testing;
pub mod zbd;

use nines_core::stats::DeviceRecorder;
use serde::{Deserialize, Serialize};

pub use api::*;
pub use raid0::{Passthrough, Raid0};
pub use raid5::{DndSpec, Raid5, Raid5Options, RebuildSpec};
pub use serial::{Serial, SerialSpec};
pub use shaping::ShapingSpec;
pub use zbd::{Zbd, ZbdParams};

/// Why a volume cannot be built: one line each, naming the option to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArrayError {
    #[error(
        "{layout} needs at least {min} members; give more targets (with nines sim, more --devices)"
    )]
    TooFewMembers { layout: &'static str, min: usize },
    #[error(
        "--stripe {stripe_bytes} must be a positive multiple of the members' {block_bytes}-byte \
         logical block"
    )]
    Stripe { stripe_bytes: u64, block_bytes: u32 },
    #[error(
        "--{option} {stripe_bytes} is larger than the smallest member ({member_bytes} bytes); use a \
         smaller --{option} or larger members"
    )]
    StripeTooLarge {
        /// The option that set the unit: `stripe` (raid0) or `chunk` (raid5).
        option: &'static str,
        stripe_bytes: u64,
        member_bytes: u64,
    },
    #[error("{0}")]
    Invalid(String),
}

/// How a volume is laid out, as every verb describes it (`--layout`, `--stripe`, ...). Later
/// layouts add a variant and their options here, and a case in [`build`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "layout", rename_all = "lowercase")]
pub enum LayoutSpec {
    /// Each target on its own: one single-member volume per target.
    Independent,
    /// One volume striped over every target.
    Raid0 { stripe_bytes: u64 },
    /// One volume over every target with a rotating parity chunk per row; `failed` starts with
    /// that member failed (degraded).
    Raid5 {
        chunk_bytes: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failed: Option<u32>,
        /// Turns and a write-back buffer (`--policy sched|dnd`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dnd: Option<raid5::DndSpec>,
        /// Rebuild this member, a replacement, from the others (`--rebuild N`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rebuild: Option<raid5::RebuildSpec>,
        /// Reads fail fast on a member busy longer than this and are rebuilt (`--fast-fail`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fast_fail_ns: Option<u64>,
        /// A write-intent bitmap with regions of this many rows (set by `nines serve` over
        /// members with superblocks, see [`meta`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bitmap_region_rows: Option<u64>,
    },
    /// A serial array with external GC (paper 003): a log-structured front-end column, xGC
    /// between back-ends.
    Serial(SerialSpec),
    /// Another layout wrapped in write shaping (`--throttle`, `--chop`, `--buffer`): the same
    /// volumes, each behind the policies; a buffer device is the last member of its volume.
    Shaped {
        inner: Box<LayoutSpec>,
        shaping: ShapingSpec,
    },
}

impl LayoutSpec {
    pub fn name(&self) -> &'static str {
        match self {
            LayoutSpec::Independent => "independent",
            LayoutSpec::Raid0 { .. } => "raid0",
            LayoutSpec::Raid5 { .. } => "raid5",
            LayoutSpec::Serial(_) => "serial",
            LayoutSpec::Shaped { inner, .. } => inner.name(),
        }
    }

    /// The layout under any shaping (what decides where bytes go on the members).
    pub fn base(&self) -> &LayoutSpec {
        match self {
            LayoutSpec::Shaped { inner, .. } => inner.base(),
            other => other,
        }
    }

    /// Whether the policy itself writes members whatever the clients do (a rebuild onto a
    /// replacement, a write buffer flushing, a persisted serial array formatting its metadata
    /// region and committing its mapping table), so they must be opened for writing.
    pub fn writes_members(&self) -> bool {
        matches!(
            self.base(),
            LayoutSpec::Raid5 {
                rebuild: Some(_),
                ..
            }
        ) || matches!(self.base(), LayoutSpec::Serial(s) if s.persist)
            || self.shaping().is_some_and(|s| s.buffer.is_some())
    }

    /// The shaping around the layout, if any.
    pub fn shaping(&self) -> Option<&ShapingSpec> {
        match self {
            LayoutSpec::Shaped { shaping, .. } => Some(shaping),
            _ => None,
        }
    }

    /// The shaping around the layout, to fill in what a driver knows (a buffer's bucket).
    pub fn shaping_mut(&mut self) -> Option<&mut ShapingSpec> {
        match self {
            LayoutSpec::Shaped { shaping, .. } => Some(shaping),
            _ => None,
        }
    }

    /// `--placement fdp`: fills in the handles the placement tags with, from the reclaim unit
    /// handles of the data members (`member_handles`, 0 for a member without FDP): the fewest
    /// of them. Refused, saying what to do, when a member has no FDP. Nothing to do without a
    /// placement. Both drivers call it before building volumes, with what their members say.
    pub fn resolve_placement(&mut self, member_handles: &[u32]) -> Result<(), ArrayError> {
        let Some(pl) = self.shaping_mut().and_then(|s| s.placement.as_mut()) else {
            return Ok(());
        };
        if let Some(i) = member_handles.iter().position(|&h| h == 0) {
            return Err(ArrayError::Invalid(format!(
                "--placement fdp needs members with Flexible Data Placement, but member {i} has \
                 none: use an FDP device (nines sim --device afa-m2-2018-fdp, or an \
                 emu:afa-m2-2018-fdp target) or drop --placement"
            )));
        }
        pl.handles = member_handles.iter().copied().min().unwrap_or(0);
        Ok(())
    }

    /// Tells the layout its members' zone geometry `(zone size, zone capacity)` when they are
    /// zoned (None: conventional, nothing to do). Only the serial layout runs over zoned
    /// members (a segment is a zone on each member); any other is refused with what to use,
    /// the message reading after "the members are ". Both drivers call it before building
    /// volumes, with what their members say, as they call [`LayoutSpec::resolve_placement`].
    pub fn resolve_zones(&mut self, zone: Option<(u64, u64)>) -> Result<(), ArrayError> {
        let Some((size_bytes, capacity_bytes)) = zone else {
            return Ok(());
        };
        let mut base = self;
        while let LayoutSpec::Shaped { inner, .. } = base {
            base = inner;
        }
        match base {
            LayoutSpec::Serial(s) => {
                s.zone_size_bytes = size_bytes;
                s.zone_capacity_bytes = capacity_bytes;
                Ok(())
            }
            other => Err(ArrayError::Invalid(format!(
                "zoned (sequential zones, no device GC): --layout {} writes in place; use \
                 --layout serial --segment {capacity_bytes} (zone capacity x --column-members)",
                other.name()
            ))),
        }
    }

    /// `self` wrapped in `shaping` (unchanged when it asks for nothing).
    pub fn shaped(self, shaping: ShapingSpec) -> LayoutSpec {
        if shaping.is_empty() {
            self
        } else {
            LayoutSpec::Shaped {
                inner: Box::new(self),
                shaping,
            }
        }
    }

    /// The capacity of one volume over `data_members` members of `member_bytes` each (the
    /// buffer device of a shaped layout not counted).
    pub fn uniform_size_bytes(&self, member_bytes: u64, data_members: u32) -> u64 {
        match self.base() {
            LayoutSpec::Raid0 { stripe_bytes } => {
                (member_bytes / stripe_bytes) * stripe_bytes * u64::from(data_members)
            }
            LayoutSpec::Raid5 { chunk_bytes, .. } => {
                (member_bytes / chunk_bytes)
                    * chunk_bytes
                    * u64::from(data_members.saturating_sub(1))
            }
            LayoutSpec::Serial(spec) => spec.size_bytes(member_bytes, data_members),
            _ => member_bytes,
        }
    }

    /// The bytes each of `data_members` members must hold for a volume to reach `end_bytes`.
    pub fn member_bytes_for(&self, end_bytes: u64, data_members: u64) -> u64 {
        match self.base() {
            LayoutSpec::Raid0 { stripe_bytes } => {
                let row = stripe_bytes.saturating_mul(data_members.max(1));
                end_bytes.div_ceil(row.max(1)).saturating_mul(*stripe_bytes)
            }
            LayoutSpec::Raid5 { chunk_bytes, .. } => {
                let row = chunk_bytes.saturating_mul(data_members.saturating_sub(1).max(1));
                end_bytes.div_ceil(row.max(1)).saturating_mul(*chunk_bytes)
            }
            LayoutSpec::Serial(spec) => spec.member_bytes_for(end_bytes, data_members as u32),
            _ => end_bytes,
        }
    }

    /// Members beyond the data members (a write buffer's device): `targets` of [`Self::group`]
    /// include them, last.
    pub fn extra_members(&self) -> u32 {
        self.shaping().map_or(0, ShapingSpec::extra_members)
    }

    /// Groups `targets` members into volumes: each volume's members, a contiguous range.
    pub fn group(&self, targets: u32) -> Vec<std::ops::Range<u32>> {
        match self {
            LayoutSpec::Independent => (0..targets).map(|i| i..i + 1).collect(),
            LayoutSpec::Raid0 { .. } | LayoutSpec::Raid5 { .. } | LayoutSpec::Serial(_) => {
                std::iter::once(0..targets).collect()
            }
            // A buffer sits in front of one volume (build refuses more data volumes).
            LayoutSpec::Shaped { shaping, .. } if shaping.extra_members() > 0 => {
                std::iter::once(0..targets).collect()
            }
            LayoutSpec::Shaped { inner, .. } => inner.group(targets),
        }
    }

    /// The layout's options for the report.
    pub fn options(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// What a driver knows when it builds a volume.
#[derive(Clone, Debug)]
pub struct VolumeParams<'a> {
    pub member_sizes_bytes: &'a [u64],
    /// The members' logical block (the largest of them).
    pub block_bytes: u32,
    /// Volume I/Os in flight at most (tags are below it).
    pub tags: u32,
    /// The largest volume I/O.
    pub len_bytes_max: u32,
}

/// A volume as drivers hold it: the layouts on every hot path by value (called without dynamic
/// dispatch), any other policy behind the trait.
pub enum AnyVolume {
    Passthrough(Passthrough),
    Raid0(Raid0),
    Other(Box<dyn Volume>),
}

macro_rules! each {
    ($self:expr, $v:ident => $e:expr) => {
        match $self {
            AnyVolume::Passthrough($v) => $e,
            AnyVolume::Raid0($v) => $e,
            AnyVolume::Other($v) => $e,
        }
    };
}

impl Volume for AnyVolume {
    fn layout(&self) -> &'static str {
        each!(self, v => v.layout())
    }
    fn size_bytes(&self) -> u64 {
        each!(self, v => v.size_bytes())
    }
    fn members(&self) -> u32 {
        each!(self, v => v.members())
    }
    fn block_bytes(&self) -> u32 {
        each!(self, v => v.block_bytes())
    }
    fn scratch(&self) -> (u32, u32) {
        each!(self, v => v.scratch())
    }
    fn cmds_max(&self) -> u32 {
        each!(self, v => v.cmds_max())
    }
    fn folds_completions(&self) -> bool {
        each!(self, v => v.folds_completions())
    }
    fn outputs_max(&self) -> usize {
        each!(self, v => v.outputs_max())
    }
    fn place(&mut self, io: &VolIo) -> Option<Placed> {
        each!(self, v => v.place(io))
    }
    #[inline]
    fn submit(&mut self, now_ns: u64, io: VolIo, cx: &mut Cx) {
        each!(self, v => v.submit(now_ns, io, cx))
    }
    #[inline]
    fn member_done(&mut self, now_ns: u64, done: CmdDone, cx: &mut Cx) {
        each!(self, v => v.member_done(now_ns, done, cx))
    }
    #[inline]
    fn next_timer_ns(&self) -> Option<u64> {
        each!(self, v => v.next_timer_ns())
    }
    fn on_timer(&mut self, now_ns: u64, cx: &mut Cx) {
        each!(self, v => v.on_timer(now_ns, cx))
    }
    fn stats(&self) -> serde_json::Value {
        each!(self, v => v.stats())
    }
    fn write_back(&self) -> bool {
        each!(self, v => v.write_back())
    }
    #[inline]
    fn gc_free_members(&self) -> Option<std::ops::Range<u32>> {
        each!(self, v => v.gc_free_members())
    }
    fn warnings(&self) -> Vec<String> {
        each!(self, v => v.warnings())
    }
    fn extent_at(&self, offset_bytes: u64) -> Extent {
        each!(self, v => v.extent_at(offset_bytes))
    }
}

/// Builds the volume of one group of [`LayoutSpec::group`].
pub fn build(spec: &LayoutSpec, p: &VolumeParams) -> Result<AnyVolume, ArrayError> {
    match spec {
        LayoutSpec::Independent => {
            if p.member_sizes_bytes.len() != 1 {
                return Err(ArrayError::Invalid(
                    "an independent target has exactly one member".into(),
                ));
            }
            Ok(AnyVolume::Passthrough(Passthrough::new(
                p.member_sizes_bytes[0],
                p.block_bytes,
                p.tags,
            )))
        }
        LayoutSpec::Raid0 { stripe_bytes } => Ok(AnyVolume::Raid0(Raid0::new(
            *stripe_bytes,
            p.member_sizes_bytes,
            p.block_bytes,
            p.tags,
            p.len_bytes_max,
        )?)),
        LayoutSpec::Raid5 {
            chunk_bytes,
            failed,
            dnd,
            rebuild,
            fast_fail_ns,
            bitmap_region_rows,
        } => Ok(AnyVolume::Other(Box::new(Raid5::new(
            *chunk_bytes,
            p.member_sizes_bytes,
            p.block_bytes,
            p.tags,
            raid5::Raid5Options {
                failed: *failed,
                dnd: *dnd,
                rebuild: *rebuild,
                fast_fail_ns: *fast_fail_ns,
                bitmap_region_rows: *bitmap_region_rows,
            },
        )?))),
        LayoutSpec::Serial(spec) => Ok(AnyVolume::Other(Box::new(Serial::new(
            *spec,
            p.member_sizes_bytes,
            p.block_bytes,
            p.tags,
            p.len_bytes_max,
        )?))),
        LayoutSpec::Shaped { inner, shaping } => shaping::build(inner, shaping, p),
    }
}

/// Most members whose command latencies are kept as distributions (each costs two histograms);
/// larger volumes report member command counts only.
pub const MEMBER_HISTOGRAMS_MAX: u32 = 256;

/// What [`VolumeHost::submit_folded`] sent: when its last command completes, and the first
/// result other than Ok in send order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoldedIo {
    pub done_ns_max: u64,
    pub first_err: Option<CmdResult>,
}

/// What a driver holds for one volume: the policy, its output queue, the check that time never
/// goes backwards, and each member command's send time, so every member's command latencies are
/// recorded the same way in both drivers.
pub struct VolumeHost {
    vol: AnyVolume,
    out: Outputs,
    now_ns: u64,
    sent_ns: Vec<u64>,
    cmd_member: Vec<u32>,
    cmd_op: Vec<Option<nines_core::op::Op>>,
    cmd_len: Vec<u32>,
    /// Member commands sent at or after this time are recorded.
    record_from_ns: u64,
    /// Whether member commands are tracked at all (volumes of more than one member).
    track: bool,
    member_recs: Vec<DeviceRecorder>,
    member_cmds: Vec<u64>,
    member_errors: Vec<u64>,
}

impl VolumeHost {
    /// Hosts `vol`; member command latencies are recorded from `record_from_ns` (the end of the
    /// ramp) when `record_members` (volumes of more than one member, up to
    /// [`MEMBER_HISTOGRAMS_MAX`]).
    pub fn new(vol: AnyVolume, record_from_ns: u64, record_members: bool) -> VolumeHost {
        let cmds = vol.cmds_max() as usize;
        let members = vol.members();
        let out = Outputs::with_capacity(vol.outputs_max().max(1));
        let keep = record_members && members <= MEMBER_HISTOGRAMS_MAX;
        let n = if record_members { cmds } else { 0 };
        VolumeHost {
            out,
            now_ns: 0,
            sent_ns: vec![0; n],
            cmd_member: vec![0; n],
            cmd_op: vec![None; n],
            cmd_len: vec![0; n],
            record_from_ns,
            track: record_members,
            member_recs: if keep {
                (0..members).map(|_| DeviceRecorder::new()).collect()
            } else {
                Vec::new()
            },
            member_cmds: vec![0; members as usize],
            member_errors: vec![0; members as usize],
            vol,
        }
    }

    pub fn volume(&self) -> &AnyVolume {
        &self.vol
    }

    #[inline]
    fn tick(&mut self, now_ns: u64) {
        assert!(
            now_ns >= self.now_ns,
            "time went backwards for a volume: {now_ns} after {}",
            self.now_ns
        );
        self.now_ns = now_ns;
    }

    /// Where a client request goes when the policy chooses ([`Volume::place`]); asked before
    /// [`VolumeHost::submit`].
    pub fn place(&mut self, io: &VolIo) -> Option<Placed> {
        self.vol.place(io)
    }

    /// A client request at `now`.
    #[inline]
    pub fn submit(&mut self, now_ns: u64, io: VolIo, data: &mut dyn DataPlane) {
        self.tick(now_ns);
        let mut cx = Cx {
            out: &mut self.out,
            data,
        };
        self.vol.submit(now_ns, io, &mut cx);
    }

    /// A member command completed at `now`; records its latency from when it was sent.
    #[inline]
    pub fn member_done(&mut self, now_ns: u64, done: CmdDone, data: &mut dyn DataPlane) {
        self.tick(now_ns);
        let id = done.id as usize;
        if self.track && self.sent_ns[id] >= self.record_from_ns {
            let m = self.cmd_member[id] as usize;
            let sent = self.sent_ns[id];
            self.member_cmds[m] += 1;
            if matches!(done.result, CmdResult::Err(_)) {
                self.member_errors[m] += 1;
            }
            if let (Some(op), Some(rec)) = (self.cmd_op[id], self.member_recs.get_mut(m)) {
                rec.record(op, now_ns.saturating_sub(sent), self.cmd_len[id]);
            }
        }
        let mut cx = Cx {
            out: &mut self.out,
            data,
        };
        self.vol.member_done(now_ns, done, &mut cx);
    }

    /// The simulator's fast path for a volume whose commands of one request matter only
    /// together (raid0 and passthrough; see [`Volume::folds_completions`]): maps read or write
    /// `io` and sends
    /// each member command at once through `send`, which returns when it was sent, when it
    /// completes and how; each is recorded as [`VolumeHost::member_done`] records a command. Returns
    /// `None` (and does nothing) when the volume has no such path or the request sends no
    /// command: use [`VolumeHost::submit`] then. Deliver the completion at `done_ns_max` with
    /// [`VolumeHost::complete_folded`]. The same commands, in the same order, as
    /// [`VolumeHost::submit`] pushes: the mapping is the volume's one code.
    #[inline]
    pub fn submit_folded(
        &mut self,
        now_ns: u64,
        io: VolIo,
        mut send: impl FnMut(&MemberCmd) -> (u64, u64, CmdResult),
    ) -> Option<FoldedIo> {
        if !matches!(self.vol, AnyVolume::Raid0(_) | AnyVolume::Passthrough(_))
            || io.len_bytes == 0
            || !matches!(io.op, VolOp::Read | VolOp::Write)
        {
            return None;
        }
        self.tick(now_ns);
        let mut folded = FoldedIo {
            done_ns_max: now_ns,
            first_err: None,
        };
        let data_op = if io.op == VolOp::Read {
            nines_core::op::Op::Read
        } else {
            nines_core::op::Op::Write
        };
        let track = self.track;
        let from_ns = self.record_from_ns;
        let (cmds, errors, recs) = (
            &mut self.member_cmds,
            &mut self.member_errors,
            &mut self.member_recs,
        );
        let mut each = |c: MemberCmd| {
            let (sent_ns, done_ns, result) = send(&c);
            folded.done_ns_max = folded.done_ns_max.max(done_ns);
            let ok = result == CmdResult::Ok;
            if !ok && folded.first_err.is_none() {
                folded.first_err = Some(result);
            }
            if track && sent_ns >= from_ns {
                let m = c.member as usize;
                cmds[m] += 1;
                errors[m] += u64::from(!ok);
                if let Some(rec) = recs.get_mut(m) {
                    rec.record(data_op, done_ns.saturating_sub(sent_ns), c.len_bytes);
                }
            }
        };
        match &mut self.vol {
            AnyVolume::Raid0(r) => {
                r.map_io(io, each);
            }
            AnyVolume::Passthrough(p) => each(p.cmd_of(io)),
            AnyVolume::Other(_) => unreachable!("checked above"),
        }
        Some(folded)
    }

    /// Every member command of request `tag` sent by [`VolumeHost::submit_folded`] completed
    /// (at the latest of their completions): the request's completion, returned rather than
    /// queued (the driver carries it out as it would the output [`Output::Done`]).
    #[inline]
    pub fn complete_folded(&mut self, now_ns: u64, tag: u32, folded: FoldedIo) -> VolDone {
        self.tick(now_ns);
        let result = match &mut self.vol {
            AnyVolume::Raid0(r) => r.complete_all(tag, folded.first_err),
            AnyVolume::Passthrough(p) => p.complete(folded.first_err),
            AnyVolume::Other(_) => {
                unreachable!("complete_folded on a volume that submit_folded refuses")
            }
        };
        VolDone { tag, result }
    }

    /// Where volume offset `offset_bytes` lives, for warming a member's caches ahead of a
    /// request that will start there: (member, offset on it) for passthrough and raid0 (its
    /// first stripe unit); `None` for layouts whose mapping depends on state.
    #[inline]
    pub fn member_at(&self, offset_bytes: u64) -> Option<(u32, u64)> {
        match &self.vol {
            AnyVolume::Passthrough(_) => Some((0, offset_bytes)),
            AnyVolume::Raid0(r) => Some(r.member_at(offset_bytes)),
            AnyVolume::Other(_) => None,
        }
    }

    /// When the volume's timer is due.
    #[inline]
    pub fn next_timer_ns(&self) -> Option<u64> {
        self.vol.next_timer_ns()
    }

    pub fn on_timer(&mut self, now_ns: u64, data: &mut dyn DataPlane) {
        self.tick(now_ns);
        let mut cx = Cx {
            out: &mut self.out,
            data,
        };
        self.vol.on_timer(now_ns, &mut cx);
    }

    /// The next output of the last call(s).
    #[inline]
    pub fn pop(&mut self) -> Option<Output> {
        self.out.pop()
    }

    /// Takes the output queue out, so a driver can read the outputs in place while it calls
    /// other parts of itself; give it back with [`VolumeHost::put_outputs`] before the next
    /// call into the volume.
    #[inline]
    pub fn take_outputs(&mut self) -> Outputs {
        std::mem::replace(&mut self.out, Outputs::with_capacity(0))
    }

    /// Returns the queue taken by [`VolumeHost::take_outputs`], emptied.
    #[inline]
    pub fn put_outputs(&mut self, mut out: Outputs) {
        out.clear();
        self.out = out;
    }

    /// The driver sends member command `cmd` to its device at `at_ns` (at or after the call
    /// that produced it: a driver may model a submission cost).
    #[inline]
    pub fn sent(&mut self, cmd: &MemberCmd, at_ns: u64) {
        if !self.track {
            return;
        }
        let id = cmd.id as usize;
        self.sent_ns[id] = at_ns;
        self.cmd_member[id] = cmd.member;
        self.cmd_op[id] = cmd.op.data_op();
        self.cmd_len[id] = cmd.len_bytes;
    }

    /// Each member's command latencies (empty when not recorded).
    pub fn member_recorders(&self) -> &[DeviceRecorder] {
        &self.member_recs
    }

    /// Commands and failed commands per member (recorded ones).
    pub fn member_counts(&self) -> (&[u64], &[u64]) {
        (&self.member_cmds, &self.member_errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::SyncDriver;

    /// Zone geometry reaches a serial layout (also under shaping), conventional members change
    /// nothing, and any other layout over zoned members is refused with the segment to use.
    #[test]
    fn resolve_zones_tells_serial_its_zones_and_refuses_other_layouts() {
        let mut serial = LayoutSpec::Serial(SerialSpec::default());
        let before = serial.clone();
        serial.resolve_zones(None).unwrap();
        assert_eq!(serial, before);
        serial.resolve_zones(Some((2 << 30, 1077 << 20))).unwrap();
        let LayoutSpec::Serial(s) = &serial else {
            unreachable!()
        };
        assert_eq!(
            (s.zone_size_bytes, s.zone_capacity_bytes),
            (2 << 30, 1077 << 20)
        );
        let mut raid0 = LayoutSpec::Raid0 { stripe_bytes: 4096 };
        let e = raid0
            .resolve_zones(Some((1 << 20, 1 << 20)))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("zoned") && e.contains("--layout raid0"),
            "{e}"
        );
        assert!(e.contains("--layout serial --segment 1048576"), "{e}");
        assert_eq!(raid0, LayoutSpec::Raid0 { stripe_bytes: 4096 });
    }

    /// raid0's folded path sends exactly the commands its queued path pushes, records them the
    /// same way, and completes the request once, with the first error in send order.
    #[test]
    fn raid0_folded_submit_sends_what_submit_pushes_and_completes_once() {
        let sizes = [1u64 << 20; 5];
        let spec = LayoutSpec::Raid0 { stripe_bytes: 8192 };
        let params = VolumeParams {
            member_sizes_bytes: &sizes,
            block_bytes: 512,
            tags: 4,
            len_bytes_max: 128 * 1024,
        };
        let host = || VolumeHost::new(build(&spec, &params).unwrap(), 0, true);
        // Unaligned at both ends, wrapping past the last member more than once.
        for (op, offset_bytes, len_bytes) in [
            (VolOp::Read, 3 * 8192 + 1024, 100 * 1024),
            (VolOp::Write, 0, 8192),
            (VolOp::Write, 4096, 512),
        ] {
            let io = VolIo {
                tag: 2,
                op,
                offset_bytes,
                len_bytes,
                fua: false,
            };
            let mut queued = host();
            queued.submit(10, io, &mut NoData);
            let mut pushed = Vec::new();
            while let Some(o) = queued.pop() {
                match o {
                    Output::Cmd(c) => pushed.push(c),
                    Output::Done(d) => panic!("done before any completion: {d:?}"),
                }
            }
            let mut folded = host();
            let mut sent = Vec::new();
            let f = folded
                .submit_folded(10, io, |c| {
                    sent.push(*c);
                    // Command k completes at 100 + 10 k; the second and third fail.
                    let k = sent.len() as u64 - 1;
                    let result = match k {
                        1 => CmdResult::Err(61),
                        2 => CmdResult::Err(62),
                        _ => CmdResult::Ok,
                    };
                    (20, 100 + 10 * k, result)
                })
                .expect("raid0 has a folded path");
            assert_eq!(sent, pushed, "{op:?} {offset_bytes}+{len_bytes}");
            let n = sent.len() as u64;
            assert_eq!(f.done_ns_max, 100 + 10 * (n - 1));
            let first_err = (n > 1).then_some(CmdResult::Err(61));
            assert_eq!(f.first_err, first_err);
            // Every command counted on its member, failures too.
            let (cmds, errors) = folded.member_counts();
            let mut want = [0u64; 5];
            for c in &sent {
                want[c.member as usize] += 1;
            }
            assert_eq!(cmds, want);
            assert_eq!(errors.iter().sum::<u64>(), n.min(3) - 1);
            assert!(folded.pop().is_none());
            let result = if n > 1 {
                IoResult::Err(61)
            } else {
                IoResult::Ok
            };
            let done = folded.complete_folded(f.done_ns_max, 2, f);
            assert_eq!(done, VolDone { tag: 2, result });
            assert!(folded.pop().is_none());
            // The tag is free again.
            assert!(
                folded
                    .submit_folded(f.done_ns_max, io, |_| (0, 0, CmdResult::Ok))
                    .is_some()
            );
        }
        // A flush (every member) and a zero-length request take the queued path.
        let mut h = host();
        for (op, len_bytes) in [(VolOp::Flush, 0), (VolOp::Read, 0)] {
            let io = VolIo {
                tag: 0,
                op,
                offset_bytes: 0,
                len_bytes,
                fua: false,
            };
            assert!(h.submit_folded(0, io, |_| unreachable!()).is_none());
        }
    }

    /// `member_at` (the simulator's prefetch hint) names the member and offset of the first
    /// command a request at that offset sends, for raid0 and passthrough.
    #[test]
    fn member_at_is_where_the_first_command_goes() {
        let sizes = [1u64 << 20; 5];
        for spec in [
            LayoutSpec::Raid0 { stripe_bytes: 8192 },
            LayoutSpec::Raid0 { stripe_bytes: 4096 },
            LayoutSpec::Independent,
        ] {
            let members = if spec == LayoutSpec::Independent {
                1
            } else {
                5
            };
            let params = VolumeParams {
                member_sizes_bytes: &sizes[..members],
                block_bytes: 512,
                tags: 1,
                len_bytes_max: 64 * 1024,
            };
            for offset_bytes in (0..200u64).map(|i| i * 3584 % (members as u64 * 900_000)) {
                // A fresh volume per request: its tag is free.
                let mut h = VolumeHost::new(build(&spec, &params).unwrap(), 0, false);
                let io = VolIo {
                    tag: 0,
                    op: VolOp::Read,
                    offset_bytes,
                    len_bytes: 4096,
                    fua: false,
                };
                let mut first = None;
                h.submit(0, io, &mut NoData);
                while let Some(o) = h.pop() {
                    if let (Output::Cmd(c), None) = (o, first) {
                        first = Some((c.member, c.offset_bytes));
                    }
                }
                assert!(first.is_some());
                assert_eq!(h.member_at(offset_bytes), first, "{spec:?} {offset_bytes}");
            }
        }
    }

    #[test]
    fn raid0_maps_like_the_formula_and_round_trips_bytes() {
        let stripe = 8192u64;
        let sizes = [64 * 1024u64, 64 * 1024, 72 * 1024];
        let spec = LayoutSpec::Raid0 {
            stripe_bytes: stripe,
        };
        let v = build(
            &spec,
            &VolumeParams {
                member_sizes_bytes: &sizes,
                block_bytes: 512,
                tags: 4,
                len_bytes_max: 64 * 1024,
            },
        )
        .unwrap();
        assert_eq!(v.size_bytes(), 3 * 64 * 1024);
        let mut d = SyncDriver::new(v, &sizes, 4, 64 * 1024);
        // Unaligned offsets and lengths crossing several stripe units and members.
        let pattern: Vec<u8> = (0..40_000u32).map(|i| (i * 7 + 3) as u8).collect();
        d.write(5_120, &pattern).unwrap();
        assert_eq!(d.read(5_120, pattern.len() as u32).unwrap(), pattern);
        // The member bytes are exactly where the formula puts them.
        let r = Raid0::new(stripe, &sizes, 512, 1, 4096).unwrap();
        for x in [5_120u64, 8_192, 20_000, 45_119] {
            let (m, off) = r.locate(x);
            assert_eq!(
                d.members().byte(m, off),
                pattern[(x - 5_120) as usize],
                "byte {x}"
            );
        }
    }

    #[test]
    #[should_panic(expected = "time went backwards")]
    fn time_going_backwards_is_caught() {
        let v = build(
            &LayoutSpec::Independent,
            &VolumeParams {
                member_sizes_bytes: &[4096],
                block_bytes: 512,
                tags: 1,
                len_bytes_max: 4096,
            },
        )
        .unwrap();
        let mut h = VolumeHost::new(v, 0, false);
        let io = VolIo {
            tag: 0,
            op: VolOp::Read,
            offset_bytes: 0,
            len_bytes: 512,
            fua: false,
        };
        h.submit(10, io, &mut NoData);
        h.submit(5, io, &mut NoData);
    }

    #[test]
    fn bad_raid0_options_are_refused() {
        let p = |sizes: &[u64]| {
            Raid0::new(4096, sizes, 512, 1, 4096)
                .err()
                .map(|e| e.to_string())
        };
        assert!(p(&[]).unwrap().contains("at least 1"));
        assert!(
            p(&[1024])
                .unwrap()
                .contains("larger than the smallest member")
        );
        let e = Raid0::new(1000, &[1 << 20], 512, 1, 4096)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("--stripe 1000"), "{e}");
    }

    #[test]
    fn raid5_size_errors_name_chunk() {
        let e = |chunk: u64, sizes: &[u64]| {
            Raid5::new(chunk, sizes, 512, 1, Raid5Options::default())
                .err()
                .map(|e| e.to_string())
                .unwrap()
        };
        let big = e(1 << 20, &[1 << 19; 3]);
        assert!(big.starts_with("--chunk 1048576 is larger"), "{big}");
        assert!(big.contains("smaller --chunk"), "{big}");
        assert!(!big.contains("--stripe"), "{big}");
        let odd = e(1000, &[1 << 20; 3]);
        assert!(odd.starts_with("--chunk 1000 must be"), "{odd}");
    }
}
