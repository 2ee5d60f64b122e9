//! `--placement fdp`: the write buffer's lifetime classifier tags each write with a Flexible
//! Data Placement handle (NVMe TP4146) directly, with no buffer device (docs/arch-fdp.md).
//!
//! A write's class (see [`Classifier`]: how many halvings its LBA range's write rate lies below
//! the mean, the fastest data in the top class) picks its reclaim unit handle: with `h`
//! handles, `h - 1` classes, class `c` in handle `c + 1`. Handle 0 is left to untagged data
//! (what was written before, a device's preconditioning, other hosts): the slowest class would
//! otherwise share its reclaim units with that cold data, and GC would move the cold data every
//! time it reclaims them (bench/placement.sh at the paper's proportions: WAF 10.1 in handle 0
//! when the random stream shared it with the fill). A device with one handle has one class. The wrapped layout (a single device, raid0, raid5) maps the
//! write to member commands as always; on the way out each member write whose bytes are the
//! client's (`BufRef::Client { tag }`) becomes a [`CmdOp::PlacedWrite`] with its tag's handle.
//! A layout's own writes from scratch buffers (raid5 parity, read-modify-write results) take
//! the top handle: a row's parity is rewritten by every write to the row, so it lives no
//! longer than the row's fastest data, and mixing it into slower handles would bring back
//! the mixed lifetimes FDP removes.

use super::buffer::{Classifier, RANGES};
use crate::api::{BufRef, CmdDone, CmdOp, Cx, Output, Outputs, VolIo, VolOp, Volume};
use crate::{AnyVolume, ArrayError};
use serde::{Deserialize, Serialize};

/// The most handles a placement tags with (the members' FDP handles above it go unused).
pub const PLACEMENT_HANDLES_MAX: u32 = 16;

/// `--placement fdp` and its options.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementSpec {
    /// Reclaim unit handles to tag with: the fewest the members offer. 0 until a driver
    /// resolves it from its members ([`crate::LayoutSpec::resolve_placement`]).
    #[serde(default)]
    pub handles: u32,
    /// Half-life of the mean write rate classes are relative to.
    pub half_life_ns: u64,
}

pub struct Placement {
    inner: AnyVolume,
    classifier: Classifier,
    handles: u32,
    /// Per tag: the handle of the write in flight under it.
    tag_handle: Vec<u16>,
    out: Outputs,
    writes: [u64; PLACEMENT_HANDLES_MAX as usize],
    bytes: [u64; PLACEMENT_HANDLES_MAX as usize],
    /// Member writes from the layout's own buffers (parity), tagged with the top handle.
    layout_writes: u64,
}

impl Placement {
    pub fn new(inner: AnyVolume, spec: &PlacementSpec, tags: u32) -> Result<Placement, ArrayError> {
        if spec.handles == 0 {
            // nines sim, profile and serve ask their members for handles
            // (LayoutSpec::resolve_placement); a library caller must too.
            return Err(ArrayError::Invalid(
                "--placement fdp: this command does not know its members' FDP handles (nines \
                 sim, profile and serve do; a library caller calls \
                 LayoutSpec::resolve_placement first): drop --placement"
                    .into(),
            ));
        }
        let handles = spec.handles.min(PLACEMENT_HANDLES_MAX);
        let range_bytes = inner.size_bytes().div_ceil(RANGES);
        let cap = inner.outputs_max();
        Ok(Placement {
            classifier: Classifier::new(range_bytes, (handles - 1).max(1), spec.half_life_ns),
            handles,
            tag_handle: vec![0; tags as usize],
            out: Outputs::with_capacity(cap),
            writes: [0; PLACEMENT_HANDLES_MAX as usize],
            bytes: [0; PLACEMENT_HANDLES_MAX as usize],
            layout_writes: 0,
            inner,
        })
    }

    /// Moves the wrapped volume's outputs to the caller's queue, member writes tagged.
    fn forward(&mut self, cx: &mut Cx) {
        while let Some(o) = self.out.pop() {
            match o {
                Output::Cmd(mut c) => {
                    if c.op == CmdOp::Write {
                        let handle = match c.buf {
                            BufRef::Client { tag, .. } => self.tag_handle[tag as usize],
                            _ => {
                                self.layout_writes += 1;
                                (self.handles - 1) as u16
                            }
                        };
                        c.op = CmdOp::PlacedWrite { handle };
                    }
                    cx.out.cmd(c);
                }
                Output::Done(d) => cx.out.done(d.tag, d.result),
            }
        }
    }
}

impl Volume for Placement {
    super::same_as_inner!();
    fn outputs_max(&self) -> usize {
        self.inner.outputs_max()
    }

    fn submit(&mut self, now_ns: u64, io: VolIo, cx: &mut Cx) {
        if io.op == VolOp::Write {
            let class = self
                .classifier
                .classify(now_ns, io.offset_bytes, io.len_bytes);
            self.classifier.commit();
            // Class c in handle c + 1 (handle 0 stays untagged data's); one handle: handle 0.
            let handle = (class + 1).min(self.handles - 1);
            debug_assert!(handle < self.handles && (self.handles == 1 || handle > 0));
            self.tag_handle[io.tag as usize] = handle as u16;
            self.writes[handle as usize] += 1;
            self.bytes[handle as usize] += u64::from(io.len_bytes);
        }
        self.inner.submit(
            now_ns,
            io,
            &mut Cx {
                out: &mut self.out,
                data: cx.data,
            },
        );
        self.forward(cx);
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
        self.forward(cx);
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
        self.forward(cx);
    }

    fn write_back(&self) -> bool {
        self.inner.write_back()
    }

    fn stats(&self) -> serde_json::Value {
        let h = self.handles as usize;
        super::stats_with(
            self.inner.stats(),
            "placement",
            serde_json::json!({
                "handles": self.handles,
                "writes_by_handle": &self.writes[..h],
                "bytes_by_handle": &self.bytes[..h],
                "layout_writes": self.layout_writes,
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::SyncDriver;
    use crate::{LayoutSpec, ShapingSpec, VolumeParams, build};

    fn spec(layout: LayoutSpec, handles: u32) -> LayoutSpec {
        layout.shaped(ShapingSpec {
            placement: Some(PlacementSpec {
                handles,
                half_life_ns: 3_600_000_000_000,
            }),
            ..ShapingSpec::default()
        })
    }

    /// Unresolved handles are refused with what to do; a resolved spec builds.
    #[test]
    fn an_unresolved_placement_is_refused() {
        let p = VolumeParams {
            member_sizes_bytes: &[1 << 20],
            block_bytes: 4096,
            tags: 4,
            len_bytes_max: 65536,
        };
        let e = build(&spec(LayoutSpec::Independent, 0), &p).err().unwrap();
        assert!(e.to_string().contains("resolve_placement"), "{e}");
        assert!(build(&spec(LayoutSpec::Independent, 4), &p).is_ok());
    }

    fn driver(layout: LayoutSpec, sizes: &[u64], handles: u32) -> SyncDriver {
        let v = build(
            &spec(layout, handles),
            &VolumeParams {
                member_sizes_bytes: sizes,
                block_bytes: 4096,
                tags: 1,
                len_bytes_max: 65536,
            },
        )
        .unwrap();
        let mut d = SyncDriver::new(v, sizes, 1, 65536);
        d.trace = Some(Vec::new());
        d
    }

    /// The handles of the member writes executed since the trace was last emptied, with their
    /// member and offset; every member write must be placed.
    fn placed(d: &mut SyncDriver) -> Vec<(u32, u64, u16)> {
        let t = std::mem::take(d.trace.as_mut().unwrap());
        t.iter()
            .filter_map(|(c, _)| match c.op {
                CmdOp::PlacedWrite { handle } => Some((c.member, c.offset_bytes, handle)),
                CmdOp::Write => panic!("an untagged write left the placement: {c:?}"),
                _ => None,
            })
            .collect()
    }

    /// Member writes carry their write's class as handle: a fast sequential writer and a slow
    /// one interleaved get the top handle and a lower one, over raid0 each piece of a write
    /// the write's handle, and the data lands as written.
    #[test]
    fn member_writes_carry_the_class_of_their_write() {
        let mut d = driver(
            LayoutSpec::Raid0 { stripe_bytes: 4096 },
            &[24 << 20, 24 << 20],
            4,
        );
        let block = vec![7u8; 8192];
        let (mut slow, mut fast) = (Vec::new(), Vec::new());
        // A slow writer in the first MiB (8 KiB a second) and a fast one from 8 MiB (8 KiB a
        // millisecond), each sequential.
        let mut fast_off = 8u64 << 20;
        for i in 0..4u64 {
            let t = i * 1_000_000_000;
            d.advance_to(t);
            d.write(i * 8192, &block).unwrap();
            let p = placed(&mut d);
            assert_eq!(
                p.len(),
                2,
                "an 8 KiB write is one 4 KiB piece on each member"
            );
            assert_eq!(p[0].2, p[1].2);
            slow.push(p[0].2);
            for j in 1..1000u64 {
                d.advance_to(t + j * 1_000_000);
                d.write(fast_off, &block).unwrap();
                fast_off += 8192;
                let p = placed(&mut d);
                assert_eq!(p[0].2, p[1].2);
                fast.push(p[0].2);
            }
        }
        // Once the rates settled (a range first seen starts at one write a second: some
        // fifty writes at weight 1/8 to reach a millisecond), the slow writer is in handle 1
        // (the lowest class) and the fast one (a thousand times the rate: ten halvings) above it, mostly in the
        // top handle (a writer alone is at the mean rate: the top class, or one below while
        // its rate dips under the mean).
        assert!(slow[1..].iter().all(|&h| h == 1), "slow: {:?}", &slow[1..]);
        // Handle 0 is left to untagged data: no write is placed there.
        assert!(slow.iter().chain(&fast).all(|&h| h > 0));
        assert!(
            fast[300..].iter().all(|&h| h >= 2),
            "fast under the slow one"
        );
        let top = fast[300..].iter().filter(|&&h| h == 3).count();
        assert!(
            top * 10 > (fast.len() - 300) * 9,
            "{top} of {} in the top",
            fast.len() - 300
        );
        assert_eq!(d.members().bytes(0)[..4], [7, 7, 7, 7]);
        assert_eq!(d.read(0, 8192).unwrap(), block);
        let s = d.host().volume().stats();
        assert_eq!(s["placement"]["handles"], 4);
        let writes: u64 = (0..4)
            .map(|h| s["placement"]["writes_by_handle"][h].as_u64().unwrap())
            .sum();
        assert_eq!(writes, 4 * 1000);
        assert_eq!(s["placement"]["layout_writes"], 0);
    }

    /// raid5's parity (written from its scratch buffers) takes the top handle; its data
    /// writes their write's.
    #[test]
    fn raid5_parity_takes_the_top_handle() {
        let sizes = [4 << 20, 4 << 20, 4 << 20];
        let layout = LayoutSpec::Raid5 {
            chunk_bytes: 4096,
            failed: None,
            dnd: None,
            rebuild: None,
            fast_fail_ns: None,
            bitmap_region_rows: None,
        };
        let mut d = driver(layout, &sizes, 4);
        // One slow write: its class is not the top (a first write of a range has the rate
        // of one write a second against a mean of its own: class handles - 1 exactly).
        d.write(0, &[1u8; 4096]).unwrap();
        let p = placed(&mut d);
        assert_eq!(
            p.len(),
            2,
            "a small raid5 write is a data and a parity write: {p:?}"
        );
        let s = d.host().volume().stats();
        assert_eq!(s["placement"]["layout_writes"], 1);
        assert!(
            p.iter().any(|x| x.2 == 3),
            "parity in the top handle: {p:?}"
        );
    }
}
