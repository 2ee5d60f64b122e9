//! The reserved intervals of one channel: a tiny fixed-size interval scheduler.

/// Reserved intervals of one channel, sorted and disjoint, at most `N` of them
/// ([`TIMELINE_CAP_FIFO`], or [`TIMELINE_CAP`] with `controller.die_gaps`). Written by hand: it
/// is a tiny fixed-size interval scheduler on the simulator's hot path.
pub(crate) const TIMELINE_CAP_FIFO: usize = 64;
/// The bound of a channel with `controller.die_gaps` (programs are reserved on their channel
/// ahead of the reads that go before them).
pub(crate) const TIMELINE_CAP: usize = 128;

/// `n` first and `repr(C)`: an idle channel's reservation reads `n` and the first interval,
/// one cache line (with a thousand members every channel's line is cold when its read comes).
#[derive(Clone, Debug)]
#[repr(C)]
pub(crate) struct Timeline<const N: usize = TIMELINE_CAP_FIFO> {
    n: usize,
    iv: [(u64, u64); N],
}

impl<const N: usize> Default for Timeline<N> {
    fn default() -> Self {
        Timeline {
            iv: [(0, 0); N],
            n: 0,
        }
    }
}

impl<const N: usize> Timeline<N> {
    /// The first gap at or after `earliest` in `intervals` (sorted, disjoint) that holds
    /// `dur`: (insert position, start).
    #[inline]
    fn fit(intervals: impl Iterator<Item = (u64, u64)>, earliest: u64, dur: u64) -> (usize, u64) {
        let mut s = earliest;
        let mut n = 0;
        for (i, (a, b)) in intervals.enumerate() {
            if s + dur <= a {
                return (i, s);
            }
            if b > s {
                s = b;
            }
            n = i + 1;
        }
        (n, s)
    }

    /// When the timeline is full, the interval whose gap to the next is the smallest: the two
    /// are merged (the least channel time given up).
    fn merge_point(iv: &[(u64, u64)]) -> usize {
        let mut best = 0;
        for i in 1..iv.len() - 1 {
            if iv[i + 1].0 - iv[i].1 < iv[best + 1].0 - iv[best].1 {
                best = i;
            }
        }
        best
    }

    /// Where [`Timeline::reserve`] at `now` would place `dur`, reserving nothing.
    #[inline]
    pub(crate) fn peek(&self, now: u64, earliest: u64, dur: u64) -> u64 {
        let mut live = 0;
        while live < self.n && self.iv[live].1 <= now {
            live += 1;
        }
        let iv = &self.iv[live..self.n];
        if iv.len() < N {
            return Self::fit(iv.iter().copied(), earliest, dur).1;
        }
        // `reserve` would merge first: place it in the merged list.
        let best = Self::merge_point(iv);
        let merged = iv
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != best + 1)
            .map(|(i, &(a, b))| {
                if i == best {
                    (a, iv[best + 1].1)
                } else {
                    (a, b)
                }
            });
        Self::fit(merged, earliest, dur).1
    }

    /// The end of the last reservation.
    pub(crate) fn end(&self) -> u64 {
        if self.n == 0 {
            0
        } else {
            self.iv[self.n - 1].1
        }
    }

    /// Reserve `dur` at or after `earliest` in the first gap that fits; returns the start.
    /// Intervals that ended by `now` are forgotten.
    #[inline]
    pub(crate) fn reserve(&mut self, now: u64, earliest: u64, dur: u64) -> u64 {
        let mut drop = 0;
        while drop < self.n && self.iv[drop].1 <= now {
            drop += 1;
        }
        // Moves only when something is left to move: an empty move is still a memmove call,
        // and the common case (an idle channel) drops everything and appends.
        if drop > 0 {
            if drop < self.n {
                self.iv.copy_within(drop..self.n, 0);
            }
            self.n -= drop;
        }
        let (pos, s) = Self::fit(self.iv[..self.n].iter().copied(), earliest, dur);
        if self.n == N {
            // Full: merge the two neighbours with the smallest gap between them (the least
            // channel time given up), then place the transfer again.
            let best = Self::merge_point(&self.iv[..self.n]);
            self.iv[best].1 = self.iv[best + 1].1;
            self.iv.copy_within(best + 2..self.n, best + 1);
            self.n -= 1;
            return self.reserve(now, earliest, dur);
        }
        if pos < self.n {
            self.iv.copy_within(pos..self.n, pos + 1);
        }
        self.iv[pos] = (s, s + dur);
        self.n += 1;
        s
    }
}

/// Reservations one die (or chip) may hold ahead of now with `controller.die_gaps`.
pub(crate) const DIE_SLOTS_CAP: usize = 64;

/// What a die reservation is: a read (never moved once placed: its completion was returned),
/// a program or erase, or a GC episode (both moved back by reads that go ahead of them).
pub(crate) const SLOT_READ: u8 = 0;
pub(crate) const SLOT_LONG: u8 = 1;
pub(crate) const SLOT_GC: u8 = 2;
/// Set on an interval already moved by the push in progress (it does not move again).
const SLOT_PINNED: u8 = 0x80;

/// The reserved intervals of one die with `controller.die_gaps`: sorted, disjoint, at most
/// [`DIE_SLOTS_CAP`]. A flash operation goes in the earliest gap at or after its ready time
/// that holds it; a read may also take the place of programs, erases and GC that have not
/// started when it is ready, which move back (see [`DieSlots::place_read`]).
#[derive(Clone, Debug)]
pub(crate) struct DieSlots {
    n: usize,
    iv: [(u64, u64); DIE_SLOTS_CAP],
    kind: [u8; DIE_SLOTS_CAP],
}

impl Default for DieSlots {
    fn default() -> Self {
        DieSlots {
            n: 0,
            iv: [(0, 0); DIE_SLOTS_CAP],
            kind: [SLOT_READ; DIE_SLOTS_CAP],
        }
    }
}

/// A program, erase or GC interval moved by a read: it was at `from`, it is now `by` later.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SlotMove {
    pub(crate) from: u64,
    pub(crate) to: u64,
    pub(crate) end: u64,
    pub(crate) kind: u8,
}

/// At most this many intervals move for one read (each moves at most once).
pub(crate) type SlotMoves = ([SlotMove; DIE_SLOTS_CAP], usize);

impl DieSlots {
    /// The reservations, in order (for tests and queries).
    #[cfg(test)]
    pub(crate) fn intervals(&self) -> &[(u64, u64)] {
        &self.iv[..self.n]
    }

    /// The end of the last reservation (0: none).
    #[cfg(test)]
    pub(crate) fn end(&self) -> u64 {
        if self.n == 0 {
            0
        } else {
            self.iv[self.n - 1].1
        }
    }

    /// Forget what ended by `now`, and make room for `k` more intervals: while fewer than
    /// `k` slots are free, the two neighbours with the smallest gap between them are merged
    /// (the least die time given up). A merged interval holding a read is a read (it never
    /// moves); otherwise it is a program/erase interval (GC steps are no longer known in it).
    pub(crate) fn make_room(&mut self, now: u64, k: usize) {
        let mut drop = 0;
        while drop < self.n && self.iv[drop].1 <= now {
            drop += 1;
        }
        if drop > 0 {
            self.iv.copy_within(drop..self.n, 0);
            self.kind.copy_within(drop..self.n, 0);
            self.n -= drop;
        }
        while self.n + k > DIE_SLOTS_CAP {
            let mut best = 0;
            for i in 1..self.n - 1 {
                if self.iv[i + 1].0 - self.iv[i].1 < self.iv[best + 1].0 - self.iv[best].1 {
                    best = i;
                }
            }
            self.iv[best].1 = self.iv[best + 1].1;
            self.kind[best] = if self.kind[best] == SLOT_READ || self.kind[best + 1] == SLOT_READ {
                SLOT_READ
            } else {
                SLOT_LONG
            };
            self.iv.copy_within(best + 2..self.n, best + 1);
            self.kind.copy_within(best + 2..self.n, best + 1);
            self.n -= 1;
        }
    }

    fn insert(&mut self, a: u64, b: u64, kind: u8) {
        debug_assert!(self.n < DIE_SLOTS_CAP, "room was made");
        let pos = self.iv[..self.n].partition_point(|iv| iv.0 < a);
        self.iv.copy_within(pos..self.n, pos + 1);
        self.kind.copy_within(pos..self.n, pos + 1);
        self.iv[pos] = (a, b);
        self.kind[pos] = kind;
        self.n += 1;
    }

    fn remove(&mut self, i: usize) -> ((u64, u64), u8) {
        let r = (self.iv[i], self.kind[i]);
        self.iv.copy_within(i + 1..self.n, i);
        self.kind.copy_within(i + 1..self.n, i);
        self.n -= 1;
        r
    }

    /// Whether interval `i` may be moved back by a read ready at `r`: a program, erase or GC
    /// not started by `r` (programs and erases only with `priority`), not already moved (a
    /// moved interval's kind carries `SLOT_PINNED`, so it equals neither kind below).
    #[inline]
    fn movable(&self, i: usize, r: u64, priority: bool) -> bool {
        let k = self.kind[i];
        self.iv[i].0 >= r && (k == SLOT_GC || (priority && k == SLOT_LONG))
    }

    /// The earliest `s >= from` such that `[s, s + dur(s))` meets no interval that cannot be
    /// moved for a read ready at `r` (`priority`: programs and erases move; GC always; with
    /// `r = u64::MAX` nothing moves: a plain first fit). Bounded: each step passes an interval.
    pub(crate) fn fit(
        &self,
        from: u64,
        r: u64,
        priority: bool,
        mut dur: impl FnMut(u64) -> u64,
    ) -> u64 {
        let mut s = from;
        'next: loop {
            let e = s + dur(s);
            for i in 0..self.n {
                let (a, b) = self.iv[i];
                if b <= s {
                    continue;
                }
                if a >= e {
                    break;
                }
                if self.movable(i, r, priority) {
                    continue;
                }
                s = b;
                continue 'next;
            }
            return s;
        }
    }

    /// Split the GC interval in progress at `r` (started before it) at the first page-copy
    /// boundary at or after `r` (`step` ns apart from its start): the rest becomes a GC
    /// interval of its own, which a read ready at `r` may go ahead of. Needs one free slot.
    pub(crate) fn split_gc(&mut self, r: u64, step: u64) {
        let Some(i) = (0..self.n).find(|&i| self.iv[i].0 < r && r < self.iv[i].1) else {
            return;
        };
        if self.kind[i] != SLOT_GC || step == 0 {
            return;
        }
        let (a, b) = self.iv[i];
        let cut = a + (r - a).div_ceil(step) * step;
        if cut < b && self.n < DIE_SLOTS_CAP {
            self.iv[i].1 = cut;
            self.insert(cut, b, SLOT_GC);
        }
    }

    /// Reserve `[a, a + dur)`, which must meet nothing (from [`DieSlots::fit`] with nothing
    /// movable). Needs one free slot.
    pub(crate) fn put(&mut self, a: u64, dur: u64, kind: u8) {
        self.insert(a, a + dur, kind);
    }

    /// Reserve a read at `[s, e)` (from [`DieSlots::fit`] for a read ready at `r`): the
    /// programs, erases and GC it meets move back, each to the earliest gap after its old
    /// start that meets nothing fixed; what they meet there moves in turn (an interval moves at
    /// most once, so this ends). Returns the moves, in the order made. Needs one free slot.
    pub(crate) fn place_read(&mut self, s: u64, e: u64, r: u64, priority: bool) -> SlotMoves {
        self.place(s, e, SLOT_READ, r, priority)
    }

    /// Reserve `[s, e)` as `kind`, moving back the movable intervals (for a ready time `r`)
    /// it meets, as [`DieSlots::place_read`] does.
    fn place(&mut self, s: u64, e: u64, kind_new: u8, r: u64, priority: bool) -> SlotMoves {
        let mut moves: SlotMoves = ([SlotMove::default(); DIE_SLOTS_CAP], 0);
        // Pending: intervals taken out to be placed again, in order of their old start.
        let mut pending = [((0u64, 0u64), 0u8); DIE_SLOTS_CAP];
        let mut np = 0;
        self.take(s, e, r, priority, &mut pending, &mut np, 0);
        self.insert(s, e, kind_new | SLOT_PINNED);
        let mut next = 0;
        while next < np {
            let ((a, b), kind) = pending[next];
            next += 1;
            let dur = b - a;
            // Moved (pinned) intervals are fixed; the others may be met and move in turn.
            let to = self.fit(a, r, priority, |_| dur);
            self.take(to, to + dur, r, priority, &mut pending, &mut np, next);
            self.insert(to, to + dur, kind | SLOT_PINNED);
            moves.0[moves.1] = SlotMove {
                from: a,
                to,
                end: to + dur,
                kind,
            };
            moves.1 += 1;
        }
        for k in &mut self.kind[..self.n] {
            *k &= !SLOT_PINNED;
        }
        moves
    }

    /// Take the movable intervals meeting `[lo, hi)` out into `pending[first..np]`, kept in
    /// order of start.
    #[allow(clippy::too_many_arguments)]
    fn take(
        &mut self,
        lo: u64,
        hi: u64,
        r: u64,
        priority: bool,
        pending: &mut [((u64, u64), u8); DIE_SLOTS_CAP],
        np: &mut usize,
        first: usize,
    ) {
        let mut i = 0;
        while i < self.n {
            let (a, b) = self.iv[i];
            if a >= hi {
                break;
            }
            if b > lo && self.movable(i, r, priority) {
                let x = self.remove(i);
                let at = first + pending[first..*np].partition_point(|p| p.0.0 < x.0.0);
                pending.copy_within(at..*np, at + 1);
                pending[at] = x;
                *np += 1;
            } else {
                i += 1;
            }
        }
    }

    /// Lengthen the program `[a, end)` to `[a, end + by)` (another plane joins it): the
    /// programs, erases and GC queued behind it move back (as for a read); None and nothing
    /// changed when a read is in the way.
    pub(crate) fn extend_pushing(&mut self, a: u64, end: u64, by: u64) -> Option<SlotMoves> {
        let i = (0..self.n).find(|&i| self.iv[i].0 <= a && end <= self.iv[i].1)?;
        if self.iv[i].1 != end || self.kind[i] == SLOT_READ {
            return None;
        }
        let (iv, kind) = self.remove(i);
        if self.fit(iv.0, end, true, |_| end + by - iv.0) != iv.0 {
            self.insert(iv.0, iv.1, kind);
            return None;
        }
        Some(self.place(iv.0, end + by, kind, end, true))
    }
}

#[cfg(test)]
mod tests {
    use super::Timeline;

    #[test]
    fn timeline_backfills_gaps_and_stays_disjoint() {
        let mut t: Timeline = Timeline::default();
        assert_eq!(t.reserve(0, 100, 10), 100);
        assert_eq!(t.reserve(0, 0, 10), 0);
        assert_eq!(t.reserve(0, 95, 10), 110);
        assert_eq!(t.reserve(0, 5, 10), 10);
        let mut x = 1u64;
        for i in 0..10_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let now = i * 10;
            let s = t.reserve(now, now + (x >> 54), 7);
            assert!(s >= now);
            for w in t.iv[..t.n].windows(2) {
                assert!(w[0].1 <= w[1].0, "{:?}", &t.iv[..t.n]);
            }
        }
    }
}

#[cfg(test)]
mod die_slots_tests {
    use super::{DIE_SLOTS_CAP, DieSlots, SLOT_GC, SLOT_LONG, SLOT_READ};

    fn disjoint(s: &DieSlots) {
        for w in s.intervals().windows(2) {
            assert!(w[0].1 <= w[1].0, "{:?}", s.intervals());
        }
    }

    #[test]
    fn die_slots_fit_the_memory_budget_config_counts() {
        // DeviceConfig::device_state_bytes counts 64 * 17 + 8 bytes per unit.
        assert!(std::mem::size_of::<DieSlots>() <= DIE_SLOTS_CAP * 17 + 8);
    }

    #[test]
    fn first_fit_backfills_gaps() {
        let mut s = DieSlots::default();
        s.put(100, 50, SLOT_READ);
        s.put(300, 100, SLOT_LONG);
        // 60 ns fits before the read, 120 not before 150, 200 only after the program.
        assert_eq!(s.fit(0, u64::MAX, false, |_| 60), 0);
        assert_eq!(s.fit(0, u64::MAX, false, |_| 120), 150);
        assert_eq!(s.fit(0, u64::MAX, false, |_| 200), 400);
        assert_eq!(s.fit(120, u64::MAX, false, |_| 10), 150);
        // A length that depends on the start (a transfer of 20 on a channel busy until 280,
        // or 290) is computed again at each start tried: [150, 300) holds it, [150, 310) not.
        let chan = |free: u64| move |a: u64| free.max(a) + 20 - a;
        assert_eq!(s.fit(0, u64::MAX, false, chan(280)), 150);
        assert_eq!(s.fit(0, u64::MAX, false, chan(290)), 400);
        assert_eq!(s.end(), 400);
    }

    #[test]
    fn a_read_moves_programs_not_started_but_never_reads() {
        let mut s = DieSlots::default();
        s.put(0, 100, SLOT_LONG); // in progress at 50
        s.put(100, 100, SLOT_LONG); // queued
        s.put(200, 30, SLOT_READ); // a read reserved earlier: fixed
        s.put(230, 100, SLOT_LONG);
        s.put(500, 100, SLOT_LONG); // far enough: stays
        // Without priority a read ready at 50 goes after everything it cannot pass.
        assert_eq!(s.fit(50, 50, false, |_| 40), 330);
        // With priority it waits for the program in progress only.
        let at = s.fit(50, 50, true, |_| 40);
        assert_eq!(at, 100);
        let (m, n) = s.place_read(at, at + 40, 50, true);
        // The queued program moves after the read and the fixed read (to 230); the one at 230
        // moves behind it (to 330), the one at 500 stays.
        assert_eq!(
            s.intervals(),
            &[
                (0, 100),
                (100, 140),
                (200, 230),
                (230, 330),
                (330, 430),
                (500, 600)
            ]
        );
        assert_eq!(n, 2);
        assert_eq!(
            (m[0].from, m[0].to, m[1].from, m[1].to),
            (100, 230, 230, 330)
        );
        disjoint(&s);
    }

    #[test]
    fn a_read_goes_in_between_gc_page_copies() {
        let mut s = DieSlots::default();
        s.put(0, 1_000, SLOT_GC); // page copies every 100 ns
        s.make_room(0, 2);
        s.split_gc(250, 100);
        assert_eq!(s.intervals(), &[(0, 300), (300, 1_000)]);
        let at = s.fit(250, 250, false, |_| 40);
        assert_eq!(at, 300);
        let (m, n) = s.place_read(at, at + 40, 250, false);
        assert_eq!(s.intervals(), &[(0, 300), (300, 340), (340, 1_040)]);
        assert_eq!((n, m[0].kind), (1, SLOT_GC));
    }

    #[test]
    fn a_full_timeline_merges_the_closest_neighbours() {
        let mut s = DieSlots::default();
        // 64 intervals of 10 ns, 100 ns apart except one pair 1 ns apart (a read, a program).
        for i in 0..DIE_SLOTS_CAP as u64 {
            let a = if i == 10 { 911 } else { i * 100 };
            s.put(a, 10, if i == 9 { SLOT_READ } else { SLOT_LONG });
        }
        assert_eq!(s.intervals().len(), DIE_SLOTS_CAP);
        s.make_room(0, 1);
        assert_eq!(s.intervals().len(), DIE_SLOTS_CAP - 1);
        // 900..910 and 911..921 are one interval now, a read (it holds one): it never moves
        // and its gap is lost (a read ready at 905 went at 910 before, moving the program).
        assert_eq!(s.intervals()[9], (900, 921));
        assert_eq!(s.fit(905, 905, true, |_| 5), 921);
        // Forgetting what ended by `now` makes room first (nothing merged).
        s.make_room(1_099, 2);
        assert_eq!(s.intervals().len(), DIE_SLOTS_CAP - 1 - 10);
        assert_eq!(s.intervals()[0], (1_100, 1_110));
        disjoint(&s);
    }

    #[test]
    fn random_reservations_stay_disjoint_and_reads_never_move() {
        let mut s = DieSlots::default();
        let mut reads: Vec<(u64, u64)> = Vec::new();
        let mut x = 7u64;
        let mut now = 0;
        for i in 0..20_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            now += (x >> 60) * 10;
            let r = now + ((x >> 40) & 0xfff);
            s.make_room(now, 2);
            reads.retain(|iv| iv.1 > now);
            if i % 3 == 0 {
                let d = 500 + (x >> 56);
                let a = s.fit(r, u64::MAX, false, |_| d);
                s.put(a, d, if i % 30 == 0 { SLOT_GC } else { SLOT_LONG });
            } else {
                s.split_gc(r, 100);
                let a = s.fit(r, r, i % 2 == 0, |_| 60);
                assert!(a >= r);
                s.place_read(a, a + 60, r, i % 2 == 0);
                reads.push((a, a + 60));
            }
            disjoint(&s);
            assert!(s.intervals().len() <= DIE_SLOTS_CAP);
            for &(a, b) in &reads {
                assert!(
                    s.intervals().iter().any(|iv| iv.0 <= a && b <= iv.1),
                    "read {a}..{b} moved: {:?}",
                    s.intervals()
                );
            }
        }
    }
}
