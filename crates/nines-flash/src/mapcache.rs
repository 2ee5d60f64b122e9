//! The mapping table's DRAM cache (DFTL, Gupta et al., ASPLOS 2009; MQSim's CMT): an LRU set of
//! mapping entries, one per logical unit, whose changed entries are written back a translation
//! page at a time.
//!
//! Written by hand because it is on the simulator's per-unit path and must allocate nothing after
//! construction: entries live in one array linked into an LRU list by index, found through an
//! open-addressing index (linear probing, backward-shift deletion). The index holds each key
//! beside its slot number, so probing, and the shifting of a deletion, read only the index:
//! a miss (nearly every access of a random workload over a cache much smaller than the map)
//! touches the index line of its key and the one of the evicted key, not the slot of every
//! key on the probe runs (about 1.5 random slots per search at half load, measured slower). A changed ("dirty") entry records the write-back epoch of its translation page;
//! writing the page back bumps the epoch, which cleans every entry of that page at once (MQSim
//! writes back all dirty entries of a translation page together) without visiting them.

use crate::ftl::HugeBuf;

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Slot {
    key: u32,
    prev: u32,
    next: u32,
    /// 0: clean; otherwise the translation page's epoch when the entry changed.
    dirty_epoch: u32,
}

/// A position of the index: a key and its slot (`slot == NIL`: empty).
#[derive(Clone, Copy, Debug)]
struct IndexEntry {
    key: u32,
    slot: u32,
}

const EMPTY: IndexEntry = IndexEntry { key: 0, slot: NIL };

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
    /// Entries the cache holds (not `slots.capacity()`: a clone's Vec has only its length).
    cap: u32,
    used: u32,
    head: u32,
    tail: u32,
    index: HugeBuf<IndexEntry>,
    shift: u32,
    tpage_epoch: Vec<u32>,
    entries_per_tpage: u32,
    /// [`magic_of`] `entries_per_tpage`: `tpage_of` by a multiplication, exact for every u32 (Lemire, Kaser and Kurz, "Faster remainder by direct computation", 2019), instead of
    /// a division on every access.
    tpage_magic: u64,
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
        let index = HugeBuf::filled(table, EMPTY);
        MapCache {
            // Not on huge pages: slots are filled in the timed loop, and a first touch of a
            // huge page zeroes 2 MiB there (measured 3% slower on 1 s of 64 devices).
            slots: Vec::with_capacity(cap as usize),
            cap,
            used: 0,
            head: NIL,
            tail: NIL,
            index,
            shift: 64 - table.trailing_zeros(),
            tpage_epoch: vec![1; logical_units.div_ceil(entries_per_tpage.max(1)) as usize],
            entries_per_tpage: entries_per_tpage.max(1),
            tpage_magic: magic_of(entries_per_tpage.max(1)),
            hits: 0,
            misses: 0,
            writebacks: 0,
        }
    }

    pub fn capacity(&self) -> u32 {
        self.cap
    }

    #[inline]
    pub fn tpage_of(&self, lpn: u32) -> u32 {
        let q = if self.tpage_magic == 0 {
            lpn
        } else {
            ((self.tpage_magic as u128 * lpn as u128) >> 64) as u32
        };
        debug_assert_eq!(q, lpn / self.entries_per_tpage);
        q
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
            let e = self.index[i];
            if e.slot == NIL {
                return (i, false);
            }
            if e.key == key {
                return (i, true);
            }
            i = (i + 1) & mask;
        }
    }

    /// Warms the index line where a lookup of `lpn` starts (a hint for an access known ahead).
    #[inline]
    pub fn prefetch(&self, lpn: u32) {
        crate::ftl::prefetch(&self.index, self.home(lpn));
    }

    /// Whether `lpn`'s entry is cached (changes nothing).
    #[inline]
    pub fn contains(&self, lpn: u32) -> bool {
        self.find(lpn).1
    }

    /// Remove index position `i`, shifting later entries of its probe run back.
    fn unindex(&mut self, mut i: usize) {
        let mask = self.index.len() - 1;
        self.index[i] = EMPTY;
        let mut j = (i + 1) & mask;
        while self.index[j].slot != NIL {
            let h = self.home(self.index[j].key);
            // Move j back to i when its home is not in (i, j] (cyclically).
            let moves = if i <= j {
                h <= i || h > j
            } else {
                h <= i && h > j
            };
            if moves {
                self.index[i] = self.index[j];
                self.index[j] = EMPTY;
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
        let (pos, found) = self.find(lpn);
        if found {
            self.hits += 1;
            let s = self.index[pos].slot;
            if self.head != s {
                self.unlink(s);
                self.push_front(s);
            }
            if write {
                let tp = self.tpage_of(lpn) as usize;
                self.slots[s as usize].dirty_epoch = self.tpage_epoch[tp];
            }
            return Access {
                hit: true,
                writeback_tpage: None,
            };
        }
        self.misses += 1;
        let mut out = Access::default();
        let out_evicted = self.used >= self.cap;
        let s = if !out_evicted {
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
        self.slots[s as usize].dirty_epoch = if write {
            self.tpage_epoch[self.tpage_of(lpn) as usize]
        } else {
            0
        };
        self.push_front(s);
        // An eviction may have moved entries; then find the free position again.
        let pos = if out_evicted { self.find(lpn).0 } else { pos };
        self.index[pos] = IndexEntry { key: lpn, slot: s };
        out
    }
}

/// `ceil(2^64 / d)` (`u64::MAX / d + 1`), or 0 for `d == 1` (where it does not fit: the
/// quotient is then the number itself).
fn magic_of(d: u32) -> u64 {
    if d <= 1 { 0 } else { u64::MAX / d as u64 + 1 }
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
    fn translation_page_of_a_unit_is_its_quotient() {
        // Powers of two, 1, odd and large divisors; the ends of u32 and random units.
        for per in [1u32, 2, 3, 7, 512, 819, 4096, 65_535, 1 << 31, u32::MAX] {
            let c = MapCache::new(1, 1, per);
            let mut x = per as u64;
            for i in 0..20_000u64 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let lpn = match i {
                    0 => 0,
                    1 => u32::MAX,
                    2 => u32::MAX - 1,
                    3 => per.wrapping_mul(3),
                    4 => per.wrapping_mul(3).wrapping_sub(1),
                    _ => (x >> 32) as u32,
                };
                assert_eq!(c.tpage_of(lpn), lpn / per, "{lpn} / {per}");
            }
        }
    }

    #[test]
    fn a_clone_of_a_partly_filled_cache_keeps_its_capacity() {
        let mut c = MapCache::new(500, 10_000, 64);
        for k in 0..250 {
            assert!(!c.access(k, false).hit);
        }
        let mut d = c.clone();
        for k in 250..500 {
            assert_eq!(c.access(k, true), d.access(k, true));
        }
        // Nothing was evicted from either: the first 250 still hit.
        for k in 0..250 {
            assert!(d.access(k, false).hit, "{k}");
            assert!(c.access(k, false).hit, "{k}");
        }
        assert_eq!((d.capacity(), d.hits, d.misses), (500, 250, 500));
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
