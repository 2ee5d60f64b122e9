//! Striping (`--layout raid0 --stripe 128k`), and passthrough: one member, one command per I/O.
//!
//! raid0 maps volume byte `x` to stripe unit `u = x / stripe`, member `u % n`, member offset
//! `(u / n) * stripe + x % stripe`; the capacity is `n` times the smallest member rounded down to
//! whole stripe units. A request becomes one command per stripe unit it touches, issued in
//! ascending volume order, and completes when its last command does (the first error wins). A
//! flush goes to every member.

use crate::ArrayError;
use crate::api::{
    BufRef, CmdDone, CmdOp, CmdResult, Cx, Extent, IoResult, MemberCmd, VolIo, VolOp, Volume,
};

/// The operation a member command carries for a volume operation.
fn cmd_op(op: VolOp) -> CmdOp {
    match op {
        VolOp::Read => CmdOp::Read,
        VolOp::Write => CmdOp::Write,
        VolOp::Flush => CmdOp::Flush,
        VolOp::Trim => CmdOp::Trim,
        VolOp::WriteZeroes => CmdOp::WriteZeroes,
    }
}

/// Whether a volume operation carries a data buffer.
fn has_buf(op: VolOp) -> bool {
    matches!(op, VolOp::Read | VolOp::Write)
}

fn result_of(r: CmdResult) -> IoResult {
    match r {
        CmdResult::Ok => IoResult::Ok,
        CmdResult::Err(e) => IoResult::Err(e),
        // Only fast-fail reads and busy queries answer Busy, zone appends Appended; this
        // layout sends none of them.
        CmdResult::Busy { .. } | CmdResult::Appended { .. } => IoResult::Err(libc_eio()),
    }
}

const fn libc_eio() -> i32 {
    5 // EIO
}

/// One member, one command per I/O: the volume every independent target is.
pub struct Passthrough {
    size_bytes: u64,
    block_bytes: u32,
    tags: u32,
}

impl Passthrough {
    pub fn new(size_bytes: u64, block_bytes: u32, tags: u32) -> Passthrough {
        Passthrough {
            size_bytes,
            block_bytes,
            tags,
        }
    }

    /// The one member command of `io` (its id is the request's tag).
    #[inline(always)]
    pub(crate) fn cmd_of(&self, io: VolIo) -> MemberCmd {
        debug_assert!(io.tag < self.tags);
        MemberCmd {
            id: io.tag,
            member: 0,
            op: cmd_op(io.op),
            offset_bytes: io.offset_bytes,
            len_bytes: io.len_bytes,
            buf: if has_buf(io.op) {
                BufRef::Client {
                    tag: io.tag,
                    offset: 0,
                }
            } else {
                BufRef::None
            },
            fua: io.fua,
        }
    }

    /// The command of request `tag` completed with `first_err` (None: Ok): the request's
    /// result.
    #[inline]
    pub(crate) fn complete(&self, first_err: Option<CmdResult>) -> IoResult {
        first_err.map_or(IoResult::Ok, result_of)
    }
}

impl Volume for Passthrough {
    fn layout(&self) -> &'static str {
        "passthrough"
    }
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    fn members(&self) -> u32 {
        1
    }
    fn block_bytes(&self) -> u32 {
        self.block_bytes
    }
    fn cmds_max(&self) -> u32 {
        self.tags
    }
    fn outputs_max(&self) -> usize {
        1
    }

    fn folds_completions(&self) -> bool {
        true
    }

    #[inline]
    fn submit(&mut self, _now_ns: u64, io: VolIo, cx: &mut Cx) {
        cx.out.cmd(self.cmd_of(io));
    }

    #[inline]
    fn member_done(&mut self, _now_ns: u64, done: CmdDone, cx: &mut Cx) {
        cx.out.done(done.id, result_of(done.result));
    }

    /// The volume is its member, byte for byte.
    fn extent_at(&self, offset_bytes: u64) -> Extent {
        Extent::OnMember {
            member: 0,
            offset_bytes,
            len_bytes: self.size_bytes.saturating_sub(offset_bytes).max(1),
        }
    }
}

/// Striping over `n` members.
pub struct Raid0 {
    stripe_bytes: u64,
    n: u64,
    size_bytes: u64,
    block_bytes: u32,
    /// Commands still out per tag, and the tag's first error.
    pending: Vec<u32>,
    result: Vec<IoResult>,
    /// Command ids of tag t are t * per_io .. (t + 1) * per_io: the k-th command of a request
    /// gets id t * per_io + k, so no table maps ids back to requests.
    per_io: u32,
    tags: u32,
    outputs_max: usize,
    commands: u64,
}

impl Raid0 {
    /// Striping over members of `member_sizes_bytes` with `block_bytes` logical blocks, for up
    /// to `tags` volume I/Os of at most `len_bytes_max` in flight.
    pub fn new(
        stripe_bytes: u64,
        member_sizes_bytes: &[u64],
        block_bytes: u32,
        tags: u32,
        len_bytes_max: u32,
    ) -> Result<Raid0, ArrayError> {
        let n = member_sizes_bytes.len();
        if n == 0 {
            return Err(ArrayError::TooFewMembers {
                layout: "raid0",
                min: 1,
            });
        }
        let bb = u64::from(block_bytes.max(1));
        if stripe_bytes == 0 || !stripe_bytes.is_multiple_of(bb) {
            return Err(ArrayError::Stripe {
                stripe_bytes,
                block_bytes,
            });
        }
        let smallest = member_sizes_bytes.iter().copied().min().unwrap_or(0);
        if smallest < stripe_bytes {
            return Err(ArrayError::StripeTooLarge {
                option: "stripe",
                stripe_bytes,
                member_bytes: smallest,
            });
        }
        let size_bytes = (smallest / stripe_bytes) * stripe_bytes * n as u64;
        // A request of len_max touches at most len_max / stripe + 2 units (unaligned ends); a
        // flush touches every member.
        let per_io = (u64::from(len_bytes_max) / stripe_bytes + 2).max(n as u64);
        let cmds = u64::from(tags.max(1)) * per_io;
        if cmds > u64::from(u32::MAX / 2) {
            return Err(ArrayError::Invalid(format!(
                "raid0 would need {cmds} member commands in flight; use a larger --stripe or a smaller --iodepth"
            )));
        }
        Ok(Raid0 {
            stripe_bytes,
            n: n as u64,
            size_bytes,
            block_bytes,
            pending: vec![0; tags as usize],
            result: vec![IoResult::Ok; tags as usize],
            per_io: per_io as u32,
            tags: tags.max(1),
            outputs_max: per_io as usize + 1,
            commands: 0,
        })
    }

    /// Where volume byte `x` lives: (member, member offset).
    #[inline]
    pub fn locate(&self, x: u64) -> (u32, u64) {
        let unit = x / self.stripe_bytes;
        let member = (unit % self.n) as u32;
        (
            member,
            (unit / self.n) * self.stripe_bytes + x % self.stripe_bytes,
        )
    }

    /// Where volume offset `offset_bytes` lies: its stripe unit's member, the member offset
    /// of that unit's row, and the offset inside the unit.
    #[inline(always)]
    fn unit_at(&self, offset_bytes: u64) -> (u32, u64, u64) {
        let unit = offset_bytes / self.stripe_bytes;
        let member = (unit % self.n) as u32;
        (
            member,
            (unit / self.n) * self.stripe_bytes,
            offset_bytes - unit * self.stripe_bytes,
        )
    }

    /// The member and member offset of volume offset `offset_bytes`: where the first command
    /// of a request starting there goes ([`Raid0::map_io`]'s own mapping).
    #[inline]
    pub(crate) fn member_at(&self, offset_bytes: u64) -> (u32, u64) {
        let (member, row_off, inner) = self.unit_at(offset_bytes);
        (member, row_off + inner)
    }

    /// Maps read or write request `io` onto its member commands, in ascending volume order,
    /// calling `emit` with each; marks them in flight and returns how many there were. The one
    /// place raid0's mapping lives: [`Volume::submit`] pushes what it emits into the output
    /// queue, and a simulator that knows each command's outcome when it sends it
    /// ([`crate::VolumeHost::submit_folded`]) sends them at once.
    #[inline(always)]
    pub(crate) fn map_io(&mut self, io: VolIo, mut emit: impl FnMut(MemberCmd)) -> u32 {
        let tag = io.tag;
        assert!(
            self.pending[tag as usize] == 0,
            "tag {tag} submitted while in flight"
        );
        self.result[tag as usize] = IoResult::Ok;
        let op = cmd_op(io.op);
        let first_id = tag * self.per_io;
        let mut k = 0u32;
        if io.op == VolOp::Flush {
            for member in 0..self.n as u32 {
                emit(MemberCmd {
                    id: first_id + k,
                    member,
                    op,
                    offset_bytes: 0,
                    len_bytes: 0,
                    buf: BufRef::None,
                    fua: false,
                });
                k += 1;
            }
        } else {
            let with_buf = has_buf(io.op);
            let end = io.offset_bytes + u64::from(io.len_bytes);
            let mut pos = io.offset_bytes;
            // The first unit by division, the next ones by stepping member and row.
            let (mut member, mut row_off, mut inner) = self.unit_at(pos);
            // Bounded by the request's stripe units (at most len / stripe + 2, asserted).
            while pos < end {
                assert!(
                    k < self.per_io,
                    "raid0 sent more commands for one request than its bound"
                );
                let chunk = (self.stripe_bytes - inner).min(end - pos);
                emit(MemberCmd {
                    id: first_id + k,
                    member,
                    op,
                    offset_bytes: row_off + inner,
                    len_bytes: chunk as u32,
                    buf: if with_buf {
                        BufRef::Client {
                            tag,
                            offset: (pos - io.offset_bytes) as u32,
                        }
                    } else {
                        BufRef::None
                    },
                    fua: io.fua,
                });
                k += 1;
                pos += chunk;
                inner = 0;
                member += 1;
                if u64::from(member) == self.n {
                    member = 0;
                    row_off += self.stripe_bytes;
                }
            }
        }
        self.pending[tag as usize] = k;
        self.commands += u64::from(k);
        k
    }

    /// Every member command of request `tag` completed, `first_err` the first result other
    /// than Ok in send order: the request's result.
    #[inline]
    pub(crate) fn complete_all(&mut self, tag: u32, first_err: Option<CmdResult>) -> IoResult {
        let t = tag as usize;
        assert!(
            self.pending[t] > 0,
            "completion of a request not in flight (tag {tag})"
        );
        self.pending[t] = 0;
        let result = first_err.map_or(IoResult::Ok, result_of);
        self.result[t] = result;
        result
    }
}

impl Volume for Raid0 {
    fn layout(&self) -> &'static str {
        "raid0"
    }
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
    fn members(&self) -> u32 {
        self.n as u32
    }
    fn block_bytes(&self) -> u32 {
        self.block_bytes
    }
    fn cmds_max(&self) -> u32 {
        self.tags * self.per_io
    }
    fn folds_completions(&self) -> bool {
        true
    }
    fn outputs_max(&self) -> usize {
        self.outputs_max
    }

    /// The rest of the stripe unit at `offset_bytes`, on its member.
    fn extent_at(&self, offset_bytes: u64) -> Extent {
        let (member, row_off, inner) = self.unit_at(offset_bytes);
        let unit_left = self.stripe_bytes - inner;
        Extent::OnMember {
            member,
            offset_bytes: row_off + inner,
            len_bytes: unit_left
                .min(self.size_bytes.saturating_sub(offset_bytes))
                .max(1),
        }
    }

    fn submit(&mut self, _now_ns: u64, io: VolIo, cx: &mut Cx) {
        if self.map_io(io, |c| cx.out.cmd(c)) == 0 {
            // A zero-length request.
            cx.out.done(io.tag, IoResult::Ok);
        }
    }

    #[inline]
    fn member_done(&mut self, _now_ns: u64, done: CmdDone, cx: &mut Cx) {
        let tag = done.id / self.per_io;
        let t = tag as usize;
        assert!(
            self.pending[t] > 0,
            "completion of command {} of a request not in flight",
            done.id
        );
        if self.result[t] == IoResult::Ok {
            self.result[t] = result_of(done.result);
        }
        self.pending[t] -= 1;
        if self.pending[t] == 0 {
            cx.out.done(tag, self.result[t]);
        }
    }

    fn stats(&self) -> serde_json::Value {
        serde_json::json!({ "stripe_bytes": self.stripe_bytes, "member_commands": self.commands })
    }
}
