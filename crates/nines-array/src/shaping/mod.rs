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

mod chop;
mod throttle;

pub use chop::Chop;
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
}

impl ShapingSpec {
    /// Whether any policy is asked for.
    pub fn is_empty(&self) -> bool {
        self.throttle.is_none() && self.chop_bytes.is_none()
    }

    /// Members the shaping adds after the wrapped layout's (the buffer device).
    pub fn extra_members(&self) -> u32 {
        0
    }
}

/// Builds `inner` over the first members and wraps it as `shaping` asks.
pub(crate) fn build(
    inner: &LayoutSpec,
    shaping: &ShapingSpec,
    p: &VolumeParams,
) -> Result<AnyVolume, ArrayError> {
    let mut vol = crate::build(inner, p)?;
    if let Some(chop) = shaping.chop_bytes {
        vol = AnyVolume::Other(Box::new(Chop::new(vol, chop, p.tags)?));
    }
    if let Some(t) = &shaping.throttle {
        vol = AnyVolume::Other(Box::new(Throttle::new(vol, t, p.tags, p.len_bytes_max)?));
    }
    Ok(vol)
}

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
