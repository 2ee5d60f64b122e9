//! The event queue: a monotone radix heap (Ahuja, Mehlhorn, Orlin, Tarjan, "Faster algorithms
//! for the shortest path problem", JACM 1990), which fits a discrete-event simulation exactly:
//! nothing is ever scheduled before the event being handled, so every key pushed is at least
//! the last key popped. Pushing is a bucket append; popping refills from the lowest non-empty
//! bucket only when the current time's bucket is empty, and each item moves down at most 64
//! times in its life, so both are O(1) amortised, against O(log n) sifts of a binary heap.
//!
//! Order is total and deterministic: by time, then by the caller's sequence key (creation
//! order), exactly the order of a binary heap on (time, key). Hand-written because it is the
//! simulator's inner loop and no maintained crate offers a min-queue with this tie order.

/// An item of the queue: its time and a unique, increasing tie-break key.
pub(crate) trait Keyed: Copy {
    fn time_ns(&self) -> u64;
    fn key(&self) -> u64;
}

/// Bucket 0 (`now`) and buckets 1..=64.
const BUCKETS: usize = 65;

pub(crate) struct RadixQueue<T: Keyed> {
    /// The time of the last pop: every item is at or after it.
    last_ns: u64,
    /// Items at `last_ns`, in key order, from `head` on (those before it were popped). A Vec and
    /// an index rather than a deque: emptied at once when a refill starts.
    now: Vec<T>,
    head: usize,
    /// Bucket i (1..=64): items whose time differs from `last_ns` first in bit i-1.
    buckets: [Vec<T>; BUCKETS],
    /// Bit i-1 set: bucket i is not empty (the lowest found without a scan).
    nonempty: u64,
    len: usize,
}

#[inline]
fn bucket(last: u64, t: u64) -> usize {
    (64 - (t ^ last).leading_zeros()) as usize
}

impl<T: Keyed> RadixQueue<T> {
    pub(crate) fn with_capacity(cap: usize) -> Self {
        RadixQueue {
            last_ns: 0,
            now: Vec::with_capacity(cap.min(1 << 16)),
            head: 0,
            buckets: std::array::from_fn(|_| Vec::new()),
            nonempty: 0,
            len: 0,
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }

    /// Adds an item at or after the last popped time, with a key larger than every key pushed
    /// before (both asserted: a violation would reorder the simulation).
    #[inline]
    pub(crate) fn push(&mut self, item: T) {
        let t = item.time_ns();
        assert!(
            t >= self.last_ns,
            "event at {t} ns scheduled before the current time {} ns",
            self.last_ns
        );
        let b = bucket(self.last_ns, t);
        if b == 0 {
            debug_assert!(self.now.last().is_none_or(|x| x.key() < item.key()));
            self.now.push(item);
        } else {
            self.buckets[b].push(item);
            self.nonempty |= 1 << (b - 1);
        }
        self.len += 1;
    }

    /// The earliest item (lowest key among equal times).
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<T> {
        if let Some(&x) = self.now.get(self.head) {
            self.head += 1;
            self.len -= 1;
            return Some(x);
        }
        if self.nonempty == 0 {
            return None;
        }
        self.now.clear();
        self.head = 0;
        let i = self.nonempty.trailing_zeros() as usize + 1;
        self.len -= 1;
        if self.buckets[i].len() == 1 {
            // The lowest bucket's only item is the earliest, and alone at its time (an item
            // at the same time would be in the same bucket). The higher buckets stay right
            // for it as the new current time: it agrees with the old one above bit i-1.
            self.nonempty &= !(1 << (i - 1));
            let x = self.buckets[i].pop()?;
            self.last_ns = x.time_ns();
            return Some(x);
        }
        self.refill(i);
        self.head = 1;
        Some(self.now[0])
    }

    /// Moves bucket `i`'s items (at least two) down; those at its minimum time become `now`.
    fn refill(&mut self, i: usize) {
        debug_assert!(self.buckets[i].len() > 1 && self.now.is_empty());
        self.nonempty &= !(1 << (i - 1));
        let mut items = std::mem::take(&mut self.buckets[i]);
        let min = items
            .iter()
            .map(Keyed::time_ns)
            .min()
            .unwrap_or(self.last_ns);
        self.last_ns = min;
        for &it in &items {
            let b = bucket(min, it.time_ns());
            debug_assert!(b < i, "a refilled item moves to a lower bucket");
            if b == 0 {
                self.now.push(it);
            } else {
                self.buckets[b].push(it);
                self.nonempty |= 1 << (b - 1);
            }
        }
        // Items that met at one time came from one bucket in push order per source, not in key
        // order overall: sort them (usually a handful, often one).
        if self.now.len() > 1 {
            self.now.sort_unstable_by_key(Keyed::key);
        }
        items.clear();
        self.buckets[i] = items;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct E(u64, u64);
    impl Keyed for E {
        fn time_ns(&self) -> u64 {
            self.0
        }
        fn key(&self) -> u64 {
            self.1
        }
    }

    proptest! {
        /// Interleaved pushes (never before the current time) and pops come out exactly as a
        /// binary heap on (time, key) gives them.
        #[test]
        fn same_order_as_a_binary_heap(ops in prop::collection::vec((any::<bool>(), 0u64..5000, 0u32..40), 1..600)) {
            let mut q = RadixQueue::with_capacity(4);
            let mut h = BinaryHeap::new();
            let (mut now, mut key) = (0u64, 0u64);
            for (pop, dt, shift) in ops {
                if pop {
                    let a = q.pop();
                    let b = h.pop().map(|Reverse((t, k))| E(t, k));
                    prop_assert_eq!(a, b);
                    if let Some(e) = a { now = e.0; }
                } else {
                    // Mostly near now, sometimes far ahead, sometimes exactly now.
                    let t = now + (dt << (shift % 34)) * u64::from(dt % 3 != 0);
                    q.push(E(t, key));
                    h.push(Reverse((t, key)));
                    key += 1;
                }
                prop_assert_eq!(q.len(), h.len());
            }
            while let Some(Reverse((t, k))) = h.pop() {
                prop_assert_eq!(q.pop(), Some(E(t, k)));
            }
            prop_assert_eq!(q.pop(), None);
        }
    }

    #[test]
    #[should_panic(expected = "before the current time")]
    fn refuses_the_past() {
        let mut q = RadixQueue::with_capacity(4);
        q.push(E(10, 0));
        q.pop();
        q.push(E(9, 1));
    }
}
