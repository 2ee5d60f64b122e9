//! The event queue: a monotone radix heap (Ahuja, Mehlhorn, Orlin, Tarjan, "Faster algorithms for
//! the shortest path problem", JACM 1990), which fits a discrete-event simulation exactly: nothing
//! is ever scheduled before the event being handled, so every key pushed is at least the last key
//! popped. Pushing is a bucket append; popping refills from the lowest non-empty bucket only when
//! the run (the earliest items, sorted) is empty, and each item moves down at most 64 times in its
//! life, so both are O(1) amortised, against O(log n) sifts of a binary heap.
//!
//! Two shapes of load, both common: with every device's latency the same (the variance sources
//! off), the devices' completions fall on the same nanosecond and a refill takes a whole batch at
//! once (cheap per event); once latencies vary (issue 17's sources), every completion has its own
//! time, and a plain radix heap refills, redistributes and sorts per event. So: a lowest bucket
//! holding one item is popped without a refill (half the refills of case 1 with every source on);
//! one of at most `SORT_MAX` (16) items is sorted whole into the run instead of being spread over
//! the buckets below it (its items would move down again and again), and later pushes that fall
//! among them are inserted into it (a run longer than `RUN_MAX` (64) spills back to the buckets, so
//! an insertion costs at most that many moves). Measured instead, with every source on (cachegrind,
//! `bench/sim-instructions.sh`, case 1, instructions per I/O): a 4-ary heap of (time, key) items
//! with the current time's items in a deque beside it cost more than the radix heap it replaced
//! (2388-2472 against 2320 on the same build; 1839-1886 against 1454 with the sources off: a batch
//! of 64 at one time costs a sift-down each), and so did choosing between the two per run from the
//! recent batch sizes (the dispatch and its counters alone cost 64 instructions per I/O). Sorted
//! runs of at most 8 and 32 items: 2088 and 2096 against 2074 for 16.
//!
//! Order is total and deterministic: by time, then by the caller's sequence key (creation order),
//! exactly the order of a binary heap on (time, key). Hand-written because it is the simulator's
//! inner loop and no maintained crate offers a min-queue with this tie order.

/// An item of the queue: its time and a unique, increasing tie-break key.
pub(crate) trait Keyed: Copy {
    fn time_ns(&self) -> u64;
    fn key(&self) -> u64;
}

/// Bucket 0 (`now`) and buckets 1..=64.
const BUCKETS: usize = 65;
/// A refilled bucket of at most this many items is sorted whole into the run instead of being
/// spread over the buckets below it.
const SORT_MAX: usize = 16;
/// A sorted run (of more than one time) is spilled back to the buckets when it is this long.
const RUN_MAX: usize = 64;

pub(crate) struct RadixQueue<T: Keyed> {
    /// The time of the last pop: every item is at or after it.
    last_ns: u64,
    /// The run: the earliest items, in (time, key) order, from `head` on (those before it were
    /// popped): every item whose bucket is below `level`. A Vec and an index rather than a
    /// deque: emptied at once when a refill starts.
    now: Vec<T>,
    head: usize,
    /// Items whose bucket is below this are in the run, and buckets 1..level are empty. 1: the
    /// run holds only items at `last_ns`.
    level: usize,
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
            now: Vec::with_capacity(cap.clamp(RUN_MAX, 1 << 16)),
            head: 0,
            level: 1,
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
    /// before (both asserted: a violation would reorder the simulation). Always inlined: the
    /// event loop's hottest call (LLVM otherwise leaves it out of the loop, measured: 26 more
    /// instructions per I/O of case 1 with the sources off).
    #[inline(always)]
    pub(crate) fn push(&mut self, item: T) {
        let t = item.time_ns();
        assert!(
            t >= self.last_ns,
            "event at {t} ns scheduled before the current time {} ns",
            self.last_ns
        );
        debug_assert!(self.now.last().is_none_or(|x| x.key() < item.key()));
        self.len += 1;
        self.place(item);
    }

    #[inline(always)]
    fn place(&mut self, item: T) {
        let b = bucket(self.last_ns, item.time_ns());
        if b >= self.level {
            self.buckets[b].push(item);
            self.nonempty |= 1 << (b - 1);
        } else if self.level == 1 {
            // At `last_ns`, as every item of the run: last (its key is the largest).
            self.now.push(item);
        } else {
            self.place_in_run(item);
        }
    }

    /// Puts an item into a sorted run (level > 1): last when no item of it is later, else at
    /// its place, or spills a long run first.
    #[inline(never)]
    fn place_in_run(&mut self, item: T) {
        let t = item.time_ns();
        // A popped item is at or before `last_ns`: an emptied run takes it last too.
        if self.now.len() < RUN_MAX && self.now.last().is_none_or(|x| x.time_ns() <= t) {
            self.now.push(item);
        } else {
            self.insert(item);
        }
    }

    /// Puts an item inside a sorted run (level > 1), or spills a long run first.
    #[cold]
    fn insert(&mut self, item: T) {
        debug_assert!(self.level > 1);
        if self.now.len() >= RUN_MAX {
            self.spill();
            self.place(item);
            return;
        }
        let t = item.time_ns();
        // After every item at or before its time: its key is the largest.
        let at = self.head + self.now[self.head..].partition_point(|x| x.time_ns() <= t);
        self.now.insert(at, item);
    }

    /// Moves the run's items after `last_ns` to their buckets (all below `level`, so empty):
    /// the run is back to the items at `last_ns`.
    fn spill(&mut self) {
        self.now.drain(..self.head);
        self.head = 0;
        let keep = self.now.partition_point(|x| x.time_ns() == self.last_ns);
        for k in keep..self.now.len() {
            let it = self.now[k];
            let b = bucket(self.last_ns, it.time_ns());
            debug_assert!(b >= 1 && b < self.level);
            self.buckets[b].push(it);
            self.nonempty |= 1 << (b - 1);
        }
        self.now.truncate(keep);
        self.level = 1;
    }

    /// The earliest item (lowest key among equal times).
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<T> {
        if let Some(&x) = self.now.get(self.head) {
            self.head += 1;
            self.len -= 1;
            self.last_ns = x.time_ns();
            return Some(x);
        }
        if self.nonempty == 0 {
            return None;
        }
        self.now.clear();
        self.head = 0;
        let i = self.nonempty.trailing_zeros() as usize + 1;
        self.len -= 1;
        let n = self.buckets[i].len();
        if n == 1 {
            // The lowest bucket's only item is the earliest, and alone at its time (an item
            // at the same time would be in the same bucket). The higher buckets stay right
            // for it as the new current time: it agrees with the old one above bit i-1.
            self.nonempty &= !(1 << (i - 1));
            let x = self.buckets[i].pop()?;
            self.last_ns = x.time_ns();
            return Some(x);
        }
        if n <= SORT_MAX {
            // Sorted whole: each item then leaves by the run, not moved down bucket by bucket.
            // Its items agree with one another above bit i-1, so later pushes below bucket i
            // of any of them fall among them and go into the run.
            self.nonempty &= !(1 << (i - 1));
            self.now.extend_from_slice(&self.buckets[i]);
            self.buckets[i].clear();
            self.now.sort_unstable_by_key(|x| (x.time_ns(), x.key()));
            self.level = i;
        } else {
            self.refill(i);
        }
        self.head = 1;
        let x = self.now[0];
        self.last_ns = x.time_ns();
        Some(x)
    }

    /// Moves bucket `i`'s items down; those at its minimum time become the run.
    fn refill(&mut self, i: usize) {
        debug_assert!(self.buckets[i].len() > 1 && self.now.is_empty());
        self.nonempty &= !(1 << (i - 1));
        self.level = 1;
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

    /// A small bucket becomes a sorted run; pushes that fall among its items go into it, out of
    /// time order, until it is long enough to be spilled back to the buckets; the order stays
    /// a binary heap's throughout.
    #[test]
    fn sorted_run_takes_pushes_and_spills() {
        let mut q = RadixQueue::with_capacity(4);
        let mut h = BinaryHeap::new();
        let mut key = 0;
        let mut push = |q: &mut RadixQueue<E>, h: &mut BinaryHeap<_>, t: u64| {
            q.push(E(t, key));
            h.push(Reverse((t, key)));
            key += 1;
        };
        for t in [1001, 1000, 1_000_000] {
            push(&mut q, &mut h, t);
        }
        let pop = |q: &mut RadixQueue<E>, h: &mut BinaryHeap<Reverse<(u64, u64)>>| {
            let want = h.pop().map(|Reverse((t, k))| E(t, k));
            assert_eq!(q.pop(), want);
        };
        pop(&mut q, &mut h);
        // 1000 and 1001 differ from 0 first in bit 9: bucket 10, sorted whole.
        assert_eq!((q.level, q.last_ns), (10, 1000));
        let mut spilled = false;
        for k in 0..200u64 {
            // 1000..=1023, descending in steps (never before the current time): inside the run's
            // bucket, mostly out of order.
            let t = (1023 - (k * 7) % 24).max(q.last_ns);
            push(&mut q, &mut h, t);
            spilled |= q.level == 1;
            if k % 5 == 4 {
                pop(&mut q, &mut h);
            }
        }
        assert!(spilled, "a run of {RUN_MAX} items is spilled");
        while !h.is_empty() {
            pop(&mut q, &mut h);
        }
        assert_eq!(q.pop(), None);
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
