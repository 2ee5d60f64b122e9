//! Write shaping (paper 004, approaches 2 and 3): policies that wrap another volume, so they
//! work on a single device as well as on any array layout, in both drivers.
//!
//! - [`Throttle`] (`--throttle RATE[,BURST]`): a token bucket on writes (reads optionally charged
//!   a ReFlex-style fraction of their bytes); held requests wait in arrival order.
//! - [`Chop`] (`--chop SIZE`): a write larger than SIZE becomes SIZE pieces, issued one after
//!   another; the client's write completes with its last piece.
//! - [`WriteBuffer`] (`--buffer DEVICE_OR_PRESET --buffer-size S --flush-rate R`): writes land
//!   on a fast extra member, partitioned by the velocity class of their LBA range, and whole
//!   buckets of one class are flushed to the wrapped volume under a token bucket.
//!
//! Wrappers nest as throttle(chop(buffer(layout))): the throttle shapes what the client sends,
//! chopping splits what it admits, the buffer absorbs the pieces. A wrapper that must rewrite
//! what the wrapped volume asks for (chop moves buffer offsets, the buffer maps its own scratch
//! buffers and command ids) gives it an output queue of its own, sized when built, and
//! translates each output into the caller's queue; nothing on the per-I/O path allocates.

pub use buffer::{BUCKET_BYTES_DEFAULT, BufferSpec, WriteBuffer};
pub use chop::Chop;
pub use placement::{PLACEMENT_HANDLES_MAX, Placement, PlacementSpec};
pub use throttle::{Throttle, ThrottleSpec, TokenBucket};

use serde::{Deserialize, Serialize};

use crate::{AnyVolume, ArrayError, LayoutSpec, VolumeParams};

/// The shaping options every verb takes (`--throttle`, `--chop`, `--buffer`...); all optional.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShapingSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle: Option<ThrottleSpec>,
    /// Writes larger than this are split into pieces of this size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chop_bytes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer: Option<BufferSpec>,
    /// `--placement fdp`: writes tagged with an FDP handle by their lifetime class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementSpec>,
}

impl ShapingSpec {
    /// Whether any policy is asked for.
    pub fn is_empty(&self) -> bool {
        self.throttle.is_none()
            && self.chop_bytes.is_none()
            && self.buffer.is_none()
            && self.placement.is_none()
    }

    /// Members the shaping adds after the wrapped layout's (the buffer device).
    pub fn extra_members(&self) -> u32 {
        u32::from(self.buffer.is_some())
    }
}

/// Builds `inner` over the first members and wraps it as `shaping` asks.
pub(crate) fn build(
    inner: &LayoutSpec,
    shaping: &ShapingSpec,
    p: &VolumeParams,
) -> Result<AnyVolume, ArrayError> {
    let extra = shaping.extra_members() as usize;
    if p.member_sizes_bytes.len() <= extra {
        return Err(ArrayError::TooFewMembers {
            layout: "a buffered volume",
            min: extra + 1,
        });
    }
    let n_inner = p.member_sizes_bytes.len() - extra;
    let mut vol = match &shaping.buffer {
        Some(b) => {
            if matches!(inner, LayoutSpec::Independent) && n_inner != 1 {
                return Err(ArrayError::Invalid(format!(
                    "--buffer puts one buffer in front of one volume, but {n_inner} independent \
                     targets were given: give one target (and the buffer), or --layout raid0"
                )));
            }
            let inner_p = VolumeParams {
                member_sizes_bytes: &p.member_sizes_bytes[..n_inner],
                block_bytes: p.block_bytes,
                // Client tags, one per flush run, and one for flushing the wrapped volume.
                tags: p.tags + buffer::FLUSH_SLOTS + 1,
                len_bytes_max: p.len_bytes_max.max(buffer::FLUSH_IO_BYTES),
            };
            let inner_vol = crate::build(inner, &inner_p)?;
            AnyVolume::Other(Box::new(WriteBuffer::new(
                inner_vol,
                b,
                p.member_sizes_bytes[n_inner],
                p.block_bytes,
                p.tags,
                p.len_bytes_max,
            )?))
        }
        None => crate::build(inner, p)?,
    };
    if let Some(pl) = &shaping.placement {
        if shaping.buffer.is_some() {
            return Err(ArrayError::Invalid(
                "--placement fdp and --buffer are two ways to keep lifetimes apart: give one"
                    .into(),
            ));
        }
        vol = AnyVolume::Other(Box::new(Placement::new(vol, pl, p.tags)?));
    }
    if let Some(chop) = shaping.chop_bytes {
        vol = AnyVolume::Other(Box::new(Chop::new(vol, chop, p.tags)?));
    }
    if let Some(t) = &shaping.throttle {
        vol = AnyVolume::Other(Box::new(Throttle::new(vol, t, p.tags, p.len_bytes_max)?));
    }
    Ok(vol)
}

/// The `Volume` methods a wrapper answers as the volume it wraps (`self.inner`).
macro_rules! same_as_inner {
    () => {
        fn layout(&self) -> &'static str {
            self.inner.layout()
        }
        fn size_bytes(&self) -> u64 {
            self.inner.size_bytes()
        }
        fn members(&self) -> u32 {
            self.inner.members()
        }
        fn block_bytes(&self) -> u32 {
            self.inner.block_bytes()
        }
        fn scratch(&self) -> (u32, u32) {
            self.inner.scratch()
        }
        fn cmds_max(&self) -> u32 {
            self.inner.cmds_max()
        }
        fn gc_free_members(&self) -> Option<std::ops::Range<u32>> {
            // The members keep their numbers through a wrapper (a buffer device comes last).
            self.inner.gc_free_members()
        }
        fn warnings(&self) -> Vec<String> {
            self.inner.warnings()
        }
        fn extent_at(&self, offset_bytes: u64) -> crate::api::Extent {
            // A wrapper that holds no data of its own (it splits or delays requests): the
            // wrapped volume's mapping is the volume's.
            self.inner.extent_at(offset_bytes)
        }
    };
}
pub(crate) use same_as_inner;

mod buffer;
mod chop;
mod placement;
mod throttle;

/// The wrapped volume's stats with `key: own` added (a wrapper reports beside what it wraps).
pub(crate) fn stats_with(
    inner: serde_json::Value,
    key: &str,
    own: serde_json::Value,
) -> serde_json::Value {
    let mut m = match inner {
        serde_json::Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    m.insert(key.into(), own);
    serde_json::Value::Object(m)
}
