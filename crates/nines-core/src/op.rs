//! The direction of an I/O.

use serde::{Deserialize, Serialize};

/// Read or write. Statistics are kept per direction, indexed by [`Op::index`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Read,
    Write,
}

impl Op {
    /// Both directions, in index order.
    pub const ALL: [Op; 2] = [Op::Read, Op::Write];

    /// 0 for reads, 1 for writes: the index into per-direction arrays.
    #[inline]
    pub const fn index(self) -> usize {
        match self {
            Op::Read => 0,
            Op::Write => 1,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
