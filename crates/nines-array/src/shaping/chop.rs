//! `--chop SIZE`: writes larger than SIZE become SIZE pieces issued one after another, in order
//! (paper 004 approach 2: small writes keep the device's transfer buffers idle for reads). The
//! client's write completes when its last piece has (the first error ends it early). Reads,
//! flushes, trims and writes of at most SIZE pass unchanged.
//!
//! A piece is a volume I/O to the wrapped volume under the client's own tag (one piece per tag
//! is in flight), so the wrapped volume's bounds hold as they are. Its bytes are at an offset in
//! the client's buffer: the wrapped volume pushes into the chop's own queue and each command's
//! client-buffer offset is moved by the piece's offset on the way out.

use crate::api::{BufRef, CmdDone, Cx, IoResult, Output, Outputs, VolIo, VolOp, Volume};
use crate::{AnyVolume, ArrayError};

#[derive(Clone, Copy, Debug)]
struct Chopping {
    io: VolIo,
    /// Bytes of the write issued so far (the piece in flight starts at `issued - piece`).
    issued: u32,
    /// Offset of the piece in flight.
    piece_off: u32,
    result: IoResult,
}

pub struct Chop {
    inner: AnyVolume,
    piece_bytes: u32,
    /// Per tag: the chopped write in progress.
    state: Vec<Option<Chopping>>,
    out: Outputs,
    chopped_writes: u64,
    pieces: u64,
}

impl Chop {
    pub fn new(inner: AnyVolume, piece_bytes: u32, tags: u32) -> Result<Chop, ArrayError> {
        let bb = inner.block_bytes().max(1);
        if piece_bytes == 0 || !piece_bytes.is_multiple_of(bb) {
            return Err(ArrayError::Invalid(format!(
                "--chop {piece_bytes} must be a positive multiple of the volume's {bb}-byte block"
            )));
        }
        let cap = 2 * inner.outputs_max() + 1;
        Ok(Chop {
            piece_bytes,
            state: vec![None; tags as usize],
            out: Outputs::with_capacity(cap),
            chopped_writes: 0,
            pieces: 0,
            inner,
        })
    }

    fn issue_piece(&mut self, now_ns: u64, tag: u32, cx_data: &mut dyn crate::DataPlane) {
        let st = self.state[tag as usize]
            .as_mut()
            .expect("a piece of a write in progress");
        let off = st.issued;
        let len = self.piece_bytes.min(st.io.len_bytes - off);
        st.piece_off = off;
        st.issued += len;
        let piece = VolIo {
            offset_bytes: st.io.offset_bytes + u64::from(off),
            len_bytes: len,
            ..st.io
        };
        self.pieces += 1;
        self.inner.submit(
            now_ns,
            piece,
            &mut Cx {
                out: &mut self.out,
                data: cx_data,
            },
        );
    }

    /// Moves the wrapped volume's outputs to the caller's queue: commands with client offsets
    /// moved to their piece, completions of pieces turned into the next piece or the client's
    /// completion.
    fn forward(&mut self, now_ns: u64, cx: &mut Cx) {
        // Bounded: every Done ends a piece of a finite write; the queue is drained as it fills.
        while let Some(o) = self.out.pop() {
            match o {
                Output::Cmd(mut c) => {
                    if let BufRef::Client { tag, offset } = c.buf
                        && let Some(st) = &self.state[tag as usize]
                    {
                        c.buf = BufRef::Client {
                            tag,
                            offset: offset + st.piece_off,
                        };
                    }
                    cx.out.cmd(c);
                }
                Output::Done(d) => {
                    let Some(st) = self.state[d.tag as usize].as_mut() else {
                        cx.out.done(d.tag, d.result);
                        continue;
                    };
                    if st.result == IoResult::Ok {
                        st.result = d.result;
                    }
                    if st.issued < st.io.len_bytes && st.result == IoResult::Ok {
                        self.issue_piece(now_ns, d.tag, cx.data);
                    } else {
                        let r = st.result;
                        self.state[d.tag as usize] = None;
                        cx.out.done(d.tag, r);
                    }
                }
            }
        }
    }
}

impl Volume for Chop {
    super::same_as_inner!();
    fn outputs_max(&self) -> usize {
        // The wrapped volume's outputs of this call, and of the next piece it may start.
        2 * self.inner.outputs_max() + 1
    }

    fn submit(&mut self, now_ns: u64, io: VolIo, cx: &mut Cx) {
        if io.op == VolOp::Write && io.len_bytes > self.piece_bytes {
            assert!(
                self.state[io.tag as usize].is_none(),
                "tag {} reused while its chopped write is in flight",
                io.tag
            );
            self.chopped_writes += 1;
            self.state[io.tag as usize] = Some(Chopping {
                io,
                issued: 0,
                piece_off: 0,
                result: IoResult::Ok,
            });
            self.issue_piece(now_ns, io.tag, cx.data);
        } else {
            self.inner.submit(
                now_ns,
                io,
                &mut Cx {
                    out: &mut self.out,
                    data: cx.data,
                },
            );
        }
        self.forward(now_ns, cx);
    }

    fn member_done(&mut self, now_ns: u64, done: CmdDone, cx: &mut Cx) {
        self.inner.member_done(
            now_ns,
            done,
            &mut Cx {
                out: &mut self.out,
                data: cx.data,
            },
        );
        self.forward(now_ns, cx);
    }

    fn next_timer_ns(&self) -> Option<u64> {
        self.inner.next_timer_ns()
    }

    fn on_timer(&mut self, now_ns: u64, cx: &mut Cx) {
        self.inner.on_timer(
            now_ns,
            &mut Cx {
                out: &mut self.out,
                data: cx.data,
            },
        );
        self.forward(now_ns, cx);
    }

    fn write_back(&self) -> bool {
        self.inner.write_back()
    }

    fn stats(&self) -> serde_json::Value {
        super::stats_with(
            self.inner.stats(),
            "chop",
            serde_json::json!({
                "piece_bytes": self.piece_bytes,
                "chopped_writes": self.chopped_writes,
                "pieces": self.pieces,
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::SyncDriver;
    use crate::{LayoutSpec, ShapingSpec, VolumeParams, build};

    fn chopped(layout: LayoutSpec, sizes: &[u64], chop: u32) -> SyncDriver {
        let spec = LayoutSpec::Shaped {
            inner: Box::new(layout),
            shaping: ShapingSpec {
                chop_bytes: Some(chop),
                ..ShapingSpec::default()
            },
        };
        let v = build(
            &spec,
            &VolumeParams {
                member_sizes_bytes: sizes,
                block_bytes: 512,
                tags: 2,
                len_bytes_max: 64 * 1024,
            },
        )
        .unwrap();
        SyncDriver::new(v, sizes, 2, 64 * 1024)
    }

    #[test]
    fn a_chopped_write_lands_in_pieces_in_order_and_reads_back() {
        // Passthrough: a 40000-byte write at 4096 in 8 KiB pieces is 5 member writes, in order.
        let mut d = chopped(LayoutSpec::Independent, &[1 << 20], 8192);
        let pattern: Vec<u8> = (0..40_960u32).map(|i| (i * 13 + 1) as u8).collect();
        d.write(4096, &pattern).unwrap();
        assert_eq!(d.members().commands[0], 5);
        assert_eq!(
            &d.members().bytes(0)[4096..4096 + pattern.len()],
            &pattern[..]
        );
        assert_eq!(d.read(4096, pattern.len() as u32).unwrap(), pattern);
        let s = d.host().volume().stats();
        assert_eq!(s["chop"]["chopped_writes"], 1);
        assert_eq!(s["chop"]["pieces"], 5);
        // Reads are not chopped; a write of one piece passes as it is.
        assert_eq!(d.members().commands[0], 6);
        d.write(0, &pattern[..8192]).unwrap();
        assert_eq!(d.host().volume().stats()["chop"]["pieces"], 5);
    }

    #[test]
    fn chopping_over_raid0_keeps_the_layout_and_the_bytes() {
        let sizes = [256 * 1024u64, 256 * 1024, 256 * 1024];
        let mut d = chopped(LayoutSpec::Raid0 { stripe_bytes: 8192 }, &sizes, 4096);
        let pattern: Vec<u8> = (0..60_000u32).map(|i| (i * 7 + 3) as u8).collect();
        d.write(1536, &pattern[..59_904]).unwrap();
        assert_eq!(d.read(1536, 59_904).unwrap(), &pattern[..59_904]);
        let r = crate::Raid0::new(8192, &sizes, 512, 1, 4096).unwrap();
        for x in [1536u64, 8192, 30_000, 61_439] {
            let (m, off) = r.locate(x);
            assert_eq!(d.members().byte(m, off), pattern[(x - 1536) as usize]);
        }
        // 59904 bytes in 4 KiB pieces: 15 pieces.
        assert_eq!(d.host().volume().stats()["chop"]["pieces"], 15);
    }

    #[test]
    fn a_failing_piece_fails_the_write_and_stops_it() {
        let mut d = chopped(LayoutSpec::Independent, &[1 << 20], 4096);
        d.members_mut().fail(0);
        assert_eq!(d.write(0, &[7u8; 16384]), Err(crate::testing::EIO));
        assert_eq!(d.members().commands[0], 1);
        assert!(
            Chop::new(
                AnyVolume::Passthrough(crate::Passthrough::new(1 << 20, 512, 1)),
                1000,
                1
            )
            .is_err()
        );
    }
}
