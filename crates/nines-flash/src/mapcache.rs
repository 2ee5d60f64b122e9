//! The mapping table's DRAM cache (DFTL, Gupta et al., ASPLOS 2009; MQSim's CMT): an LRU set of
//! mapping entries, one per logical unit, whose changed entries are written back a translation
//! page at a time.
//!
//! Written by hand because it is on the simulator's per-unit path and must allocate nothing after
//! construction: entries live in one array linked into an LRU list by index, found through an
//! open-addressing index (linear probing, backward-shift deletion), so a lookup is one or two
//! cache misses. A changed ("dirty") entry records the write-back epoch of its translation page;
//! writing the page back bumps the epoch, which cleans every entry of that page at once (MQSim
//! writes back all dirty entries of a translation page together) without visiting them.

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Slot {
    key: u32,
    prev: u32,
    next: u32,
    /// 0: clean; otherwise the translation page's epoch when the entry changed.
    dirty_epoch: u32,
}

/// What one access did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Access {
    pub hit: bool,
    /// A changed entry was evicted: this translation page must be written back.
    pub writeback_tpage: Option<u32>,
}

#[derive(Clone, Debug)]
pub struct MapCache {
    slots: Vec<Slot>,
    used: u32,
    head: u32,
    tail: u32,
    index: Vec<u32>,
    shift: u32,
    tpage_epoch: Vec<u32>,
    entries_per_tpage: u32,
    pub hits: u64,
    pub misses: u64,
    pub writebacks: u64,
}

impl MapCache {
    /// A cache of `entries` entries (at least 1) over `logical_units` units, `entries_per_tpage`
    /// entries per translation page.
    pub fn new(entries: u64, logical_units: u32, entries_per_tpage: u32) -> MapCache {
        let cap = entries.clamp(1, logical_units.max(1) as u64) as u32;
        let table = (cap as usize * 2).next_power_of_two().max(2);
        MapCache {
            slots: Vec::with_capacity(cap as usize),
            used: 0,
            head: NIL,
            tail: NIL,
            index: vec![NIL; table],
            shift: 64 - table.trailing_zeros(),
            tpage_epoch: vec![1; logical_units.div_ceil(entries_per_tpage.max(1)) as usize],
            entries_per_tpage: entries_per_tpage.max(1),
            hits: 0,
            misses: 0,
            writebacks: 0,
        }
    }

    pub fn capacity(&self) -> u32 {
        self.slots.capacity() as u32
    }

    #[inline]
    pub fn tpage_of(&self, lpn: u32) -> u32 {
        lpn / self.entries_per_tpage
    }

    #[inline]
    fn home(&self, key: u32) -> usize {
        ((key as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    /// The index position holding `key`, or where it would go.
    #[inline]
    fn find(&self, key: u32) -> (usize, bool) {
        let mask = self.index.len() - 1;
        let mut i = self.home(key);
        // Bounded: the table is at most half full, so an empty position comes.
        loop {
            let s = self.index[i];
            if s == NIL {
                return (i, false);
            }
            if self.slots[s as usize].key == key {
                return (i, true);
            }
            i = (i + 1) & mask;
        }
    }

    /// Whether `lpn`'s entry is cached (changes nothing).
    #[inline]
    pub fn contains(&self, lpn: u32) -> bool {
        self.find(lpn).1
    }

    /// Remove index position `i`, shifting later entries of its probe run back.
    fn unindex(&mut self, mut i: usize) {
        let mask = self.index.len() - 1;
        self.index[i] = NIL;
        let mut j = (i + 1) & mask;
        while self.index[j] != NIL {
            let h = self.home(self.slots[self.index[j] as usize].key);
            // Move j back to i when its home is not in (i, j] (cyclically).
            let moves = if i <= j {
                h <= i || h > j
            } else {
                h <= i && h > j
            };
            if moves {
                self.index[i] = self.index[j];
                self.index[j] = NIL;
                i = j;
            }
            j = (j + 1) & mask;
        }
    }

    fn unlink(&mut self, s: u32) {
        let Slot { prev, next, .. } = self.slots[s as usize];
        if prev == NIL {
            self.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
    }

    fn push_front(&mut self, s: u32) {
        self.slots[s as usize].prev = NIL;
        self.slots[s as usize].next = self.head;
        if self.head != NIL {
            self.slots[self.head as usize].prev = s;
        }
        self.head = s;
        if self.tail == NIL {
            self.tail = s;
        }
    }

    /// Look `lpn` up as a read or a write (a write changes the entry); a miss inserts it,
    /// evicting the least recently used entry when full.
    #[inline]
    pub fn access(&mut self, lpn: u32, write: bool) -> Access {
        let tp = self.tpage_of(lpn) as usize;
        let (pos, found) = self.find(lpn);
        if found {
            self.hits += 1;
            let s = self.index[pos];
            if self.head != s {
                self.unlink(s);
                self.push_front(s);
            }
            if write {
                self.slots[s as usize].dirty_epoch = self.tpage_epoch[tp];
            }
            return Access {
                hit: true,
                writeback_tpage: None,
            };
        }
        self.misses += 1;
        let mut out = Access::default();
        let s = if (self.used as usize) < self.slots.capacity() {
            self.slots.push(Slot {
                key: lpn,
                prev: NIL,
                next: NIL,
                dirty_epoch: 0,
            });
            self.used += 1;
            self.used - 1
        } else {
            let victim = self.tail;
            let old = self.slots[victim as usize];
            let vtp = self.tpage_of(old.key) as usize;
            if old.dirty_epoch != 0 && old.dirty_epoch == self.tpage_epoch[vtp] {
                // Every changed entry of that translation page goes back with it.
                self.tpage_epoch[vtp] = self.tpage_epoch[vtp].wrapping_add(1).max(1);
                self.writebacks += 1;
                out.writeback_tpage = Some(vtp as u32);
            }
            self.unlink(victim);
            let (vpos, vfound) = self.find(old.key);
            debug_assert!(vfound);
            self.unindex(vpos);
            victim
        };
        self.slots[s as usize].key = lpn;
        self.slots[s as usize].dirty_epoch = if write { self.tpage_epoch[tp] } else { 0 };
        self.push_front(s);
        // The eviction may have moved entries; find the free position again.
        let (pos, _) = self.find(lpn);
        self.index[pos] = s;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::MapCache;
    use std::collections::{HashMap, VecDeque};

    /// The same LRU written the obvious way, to compare with.
    struct Naive {
        cap: usize,
        order: VecDeque<u32>,
        dirty: HashMap<u32, bool>,
        per_tpage: u32,
    }

    impl Naive {
        fn access(&mut self, lpn: u32, write: bool) -> (bool, Option<u32>) {
            if let Some(p) = self.order.iter().position(|&k| k == lpn) {
                self.order.remove(p);
                self.order.push_front(lpn);
                if write {
                    self.dirty.insert(lpn, true);
                }
                return (true, None);
            }
            let mut wb = None;
            if self.order.len() == self.cap {
                let v = self.order.pop_back().unwrap();
                if self.dirty.remove(&v) == Some(true) {
                    let tp = v / self.per_tpage;
                    wb = Some(tp);
                    for k in &self.order {
                        if k / self.per_tpage == tp {
                            self.dirty.insert(*k, false);
                        }
                    }
                }
            }
            self.order.push_front(lpn);
            self.dirty.insert(lpn, write);
            (false, wb)
        }
    }

    #[test]
    fn behaves_as_a_plain_lru_with_page_write_back() {
        for (cap, keys, per) in [
            (1u64, 5u32, 2u32),
            (7, 40, 4),
            (64, 300, 16),
            (500, 2000, 64),
        ] {
            let mut c = MapCache::new(cap, keys, per);
            let mut n = Naive {
                cap: cap as usize,
                order: VecDeque::new(),
                dirty: HashMap::new(),
                per_tpage: per,
            };
            let mut x = cap;
            for i in 0..50_000 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // Skewed keys so that both hits and misses are common.
                let r = (x >> 33) as u32;
                let lpn = if r.is_multiple_of(3) {
                    r % keys
                } else {
                    r % (keys / 4 + 1)
                };
                let write = (x >> 20) % 3 == 0;
                let a = c.access(lpn, write);
                let (hit, wb) = n.access(lpn, write);
                assert_eq!((a.hit, a.writeback_tpage), (hit, wb), "access {i} of {lpn}");
                assert!(c.contains(lpn));
            }
            assert_eq!(c.hits + c.misses, 50_000);
        }
    }
}
