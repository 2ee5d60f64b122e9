//! The reserved intervals of one channel: a tiny fixed-size interval scheduler.

/// Reserved intervals of one channel, sorted and disjoint, at most `TIMELINE_CAP` of them.
/// Written by hand: it is a tiny fixed-size interval scheduler on the simulator's hot path.
pub(crate) const TIMELINE_CAP: usize = 64;

/// `n` first and `repr(C)`: an idle channel's reservation reads `n` and the first interval,
/// one cache line (with a thousand members every channel's line is cold when its read comes).
#[derive(Clone, Debug)]
#[repr(C)]
pub(crate) struct Timeline {
    n: usize,
    iv: [(u64, u64); TIMELINE_CAP],
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            iv: [(0, 0); TIMELINE_CAP],
            n: 0,
        }
    }
}

impl Timeline {
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
        if iv.len() < TIMELINE_CAP {
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
        if self.n == TIMELINE_CAP {
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

#[cfg(test)]
mod tests {
    use super::Timeline;

    #[test]
    fn timeline_backfills_gaps_and_stays_disjoint() {
        let mut t = Timeline::default();
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
