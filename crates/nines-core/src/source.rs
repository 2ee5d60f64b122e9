//! Request sources: where a stream's requests come from. Two exist: the workload generator
//! ([`Generator`], closed loop or paced) and trace replay (in the nines-trace crate, open loop at
//! the recorded arrival times). The run controller ([`crate::run`]) asks a source when its next
//! request is due and takes it; it never knows which kind it drives, so a trace replays the same
//! way on real devices and on simulated ones.

use crate::workload::{Generator, Request};

/// A stream of requests against one target.
pub trait RequestSource: Send {
    /// When the next request is due on the driver's clock: `None` means "as soon as a slot is
    /// free" (closed loop); `Some(t)` means not before `t`, and a request issued later still has
    /// `t` as its intended time (open loop: latency counts from `t`).
    fn next_due_ns(&self) -> Option<u64>;

    /// The next request, taken at `now_ns`; `None` once the source is exhausted (a trace at its
    /// end; a generator never is).
    fn next_request(&mut self, now_ns: u64) -> Option<Request>;

    /// Whether [`RequestSource::next_request`] would return `None`.
    fn exhausted(&self) -> bool;

    /// The largest request this source produces (buffers are sized from it).
    fn len_bytes_max(&self) -> u32;
}

impl RequestSource for Generator {
    #[inline]
    fn next_due_ns(&self) -> Option<u64> {
        Generator::next_due_ns(self)
    }

    #[inline]
    fn next_request(&mut self, now_ns: u64) -> Option<Request> {
        Some(Generator::next_request(self, now_ns))
    }

    #[inline]
    fn exhausted(&self) -> bool {
        false
    }

    fn len_bytes_max(&self) -> u32 {
        Generator::block_size_bytes(self)
    }
}

/// A stream's source as the run controller holds it: the generator by value (the common case,
/// called without dynamic dispatch on the hot path), anything else behind the trait.
pub enum Source {
    Generator(Generator),
    Other(Box<dyn RequestSource>),
}

impl From<Generator> for Source {
    fn from(g: Generator) -> Source {
        Source::Generator(g)
    }
}

impl Source {
    /// Any other source (trace replay, tests).
    pub fn other(s: impl RequestSource + 'static) -> Source {
        Source::Other(Box::new(s))
    }

    #[inline]
    pub fn next_due_ns(&self) -> Option<u64> {
        match self {
            Source::Generator(g) => g.next_due_ns(),
            Source::Other(s) => s.next_due_ns(),
        }
    }

    #[inline]
    pub fn next_request(&mut self, now_ns: u64) -> Option<Request> {
        match self {
            Source::Generator(g) => Some(g.next_request(now_ns)),
            Source::Other(s) => s.next_request(now_ns),
        }
    }

    #[inline]
    pub fn exhausted(&self) -> bool {
        match self {
            Source::Generator(_) => false,
            Source::Other(s) => s.exhausted(),
        }
    }

    /// Where the next request will go, when the source can say without changing its stream
    /// (the generator draws it ahead); `None` otherwise. A hint only.
    #[inline]
    pub fn peek_offset_bytes(&mut self) -> Option<u64> {
        match self {
            Source::Generator(g) => Some(g.peek_offset_bytes()),
            Source::Other(_) => None,
        }
    }

    pub fn len_bytes_max(&self) -> u32 {
        match self {
            Source::Generator(g) => g.block_size_bytes(),
            Source::Other(s) => s.len_bytes_max(),
        }
    }
}
