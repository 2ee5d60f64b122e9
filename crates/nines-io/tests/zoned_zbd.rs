//! fio's `zonemode=zbd` (`nines profile --zonemode zbd`, the `nines_array::Zbd` volume) over an
//! in-memory host-managed zoned member that completes commands in random order (as io_uring's
//! io-wq workers and an NVMe namespace's queues may), each write, reset and finish going through
//! `nines_io::zoned::ZoneSeq` as the profile worker sends them. The member enforces its write
//! pointers and counts the zones it has open (written part-way, or with a write executing);
//! writes carry the `--verify` pattern of the offset they were placed at and every read is
//! checked against it. Checked: never a write off a pointer, resets only of full zones and
//! exactly as many as the writes need, the open-zone limit kept, reads only of written data.

use std::collections::VecDeque;

use nines_array::testing::MemData;
use nines_array::{
    CmdDone, CmdOp, CmdResult, DataPlane, IoResult, MemberCmd, Output, VolIo, VolOp, Volume,
    VolumeHost, Zbd, ZbdParams,
};
use nines_io::zoned::{Dispatch, Zone, ZoneCond, ZoneGeometry, ZoneSeq, ZoneType};

const ZONE: u64 = 256 << 10;
const CAP: u64 = 192 << 10;
const ZONES: u64 = 12;
const BLOCK: u32 = 4096;
const TAGS: u32 = 8;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The `--verify` word of device offset `at` (what every write there carries).
fn word(at: u64) -> u64 {
    let mut z = at.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5eed;
    z = (z ^ (z >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z ^ (z >> 29)
}

fn pattern(buf: &mut [u8], at: u64) {
    for (i, c) in buf.chunks_exact_mut(8).enumerate() {
        c.copy_from_slice(&word(at + 8 * i as u64).to_le_bytes());
    }
}

/// The zoned member: bytes, write pointers, writes off them refused; what it saw.
#[derive(Default)]
struct Dev {
    data: Vec<u8>,
    wp: Vec<u64>,
    /// Writes executing per zone.
    writing: Vec<u32>,
    wp_errors: u64,
    resets: u64,
    /// Resets of a zone that was not full.
    resets_not_full: u64,
    finishes: u64,
    bytes_written: u64,
    open_max: u64,
}

impl Dev {
    fn open_now(&self) -> u64 {
        (0..self.wp.len())
            .filter(|&z| (self.wp[z] > 0 && self.wp[z] < CAP) || self.writing[z] > 0)
            .count() as u64
    }
    fn write(&mut self, off: u64, bytes: &[u8]) -> bool {
        let (z, rel) = ((off / ZONE) as usize, off % ZONE);
        if z >= self.wp.len() || rel != self.wp[z] || rel + bytes.len() as u64 > CAP {
            self.wp_errors += 1;
            return false;
        }
        self.wp[z] += bytes.len() as u64;
        self.bytes_written += bytes.len() as u64;
        self.data[off as usize..off as usize + bytes.len()].copy_from_slice(bytes);
        true
    }
}

struct InFlight {
    cmd: MemberCmd,
    offset_bytes: u64,
    write: bool,
}

struct Driver {
    host: VolumeHost,
    data: MemData,
    dev: Dev,
    seq: ZoneSeq,
    inflight: Vec<InFlight>,
    sync: VecDeque<CmdDone>,
    done: Vec<(u32, IoResult)>,
    now: u64,
    limit: u64,
}

fn zones_of(written: &[u64]) -> (ZoneGeometry, Vec<Zone>) {
    let g = ZoneGeometry {
        zone_size_bytes: ZONE,
        zone_capacity_bytes: CAP,
        zones: ZONES,
        conventional_zones: 0,
        unwritable_zones: 0,
        max_open_zones: 0,
        max_active_zones: 0,
        max_write_bytes: 0,
    };
    let zones = (0..ZONES)
        .map(|i| {
            let w = written[i as usize];
            Zone {
                start_bytes: i * ZONE,
                len_bytes: ZONE,
                capacity_bytes: CAP,
                wp_bytes: i * ZONE + w,
                kind: ZoneType::SeqWriteRequired,
                cond: match w {
                    0 => ZoneCond::Empty,
                    w if w >= CAP => ZoneCond::Full,
                    _ => ZoneCond::Closed,
                },
                reset_recommended: false,
                non_seq: false,
            }
        })
        .collect();
    (g, zones)
}

struct Setup {
    random_writes: bool,
    random_reads: bool,
    open_zones_max: u32,
    zones: std::ops::Range<u32>,
    written: Vec<u64>,
    reset_threshold: f64,
    reset_frequency: f64,
    reset_first: bool,
    /// What was written before the run carries the pattern (else other bytes).
    patterned: bool,
}

impl Setup {
    fn new(random: bool, open: u32) -> Setup {
        Setup {
            random_writes: random,
            random_reads: random,
            open_zones_max: open,
            zones: 0..ZONES as u32,
            written: vec![0; ZONES as usize],
            reset_threshold: 0.0,
            reset_frequency: 0.0,
            reset_first: false,
            patterned: true,
        }
    }
}

impl Driver {
    fn new(s: &Setup, len_max: u32) -> Driver {
        let vol = Zbd::new(ZbdParams {
            zone_size_bytes: ZONE,
            zone_capacity_bytes: CAP,
            written_bytes: s.written.clone(),
            zones: s.zones.clone(),
            open_zones_max: s.open_zones_max,
            active_zones_max: s.open_zones_max,
            reset_threshold: s.reset_threshold,
            reset_frequency: s.reset_frequency,
            read_beyond_wp: false,
            reset_first: s.reset_first,
            random_writes: s.random_writes,
            random_reads: s.random_reads,
            block_bytes: BLOCK,
            tags: TAGS,
            len_bytes_max: len_max,
            max_write_bytes: 0,
        })
        .unwrap();
        let cmds = vol.cmds_max();
        let (g, zones) = zones_of(&s.written);
        let mut dev = Dev {
            data: vec![0; (ZONE * ZONES) as usize],
            wp: s.written.clone(),
            writing: vec![0; ZONES as usize],
            ..Dev::default()
        };
        // What was written before the run carries its pattern too.
        for (z, &w) in s.written.iter().enumerate() {
            let at = z as u64 * ZONE;
            let old = &mut dev.data[at as usize..(at + w) as usize];
            if s.patterned {
                pattern(old, at);
            } else {
                old.fill(0xa5);
            }
        }
        Driver {
            host: VolumeHost::new(nines_array::AnyVolume::Other(Box::new(vol)), 0, false),
            data: MemData::new(TAGS, len_max, (0, 0)),
            dev,
            seq: ZoneSeq::new(&g, &zones, cmds),
            inflight: Vec::new(),
            sync: VecDeque::new(),
            done: Vec::new(),
            now: 0,
            limit: u64::from(s.open_zones_max),
        }
    }

    fn check_open(&mut self) {
        let open = self.dev.open_now();
        self.dev.open_max = self.dev.open_max.max(open);
        if self.limit > 0 {
            assert!(
                open <= self.limit,
                "{open} zones open on the device, limit {}",
                self.limit
            );
        }
    }

    fn dispatch(&mut self, first: Option<Dispatch>, mut zone: u32) {
        let mut d = first;
        loop {
            let Some(x) = d.take().or_else(|| self.seq.next(zone)) else {
                return;
            };
            match x {
                Dispatch::Write {
                    cmd, offset_bytes, ..
                } => {
                    self.dev.writing[(offset_bytes / ZONE) as usize] += 1;
                    self.check_open();
                    self.inflight.push(InFlight {
                        cmd,
                        offset_bytes,
                        write: true,
                    });
                    return;
                }
                Dispatch::Answer {
                    zone: z,
                    id,
                    result,
                } => {
                    self.sync.push_back(CmdDone { id, result });
                    zone = z;
                }
                Dispatch::Manage { zone: z, cmd } => {
                    let zi = z as usize;
                    if cmd.op == CmdOp::ZoneReset {
                        assert_eq!(u64::from(cmd.len_bytes), ZONE, "one zone per reset");
                        self.dev.resets += 1;
                        if self.dev.wp[zi] < CAP {
                            self.dev.resets_not_full += 1;
                        }
                        self.dev.wp[zi] = 0;
                        let s = zi * ZONE as usize;
                        self.dev.data[s..s + ZONE as usize].fill(0);
                    } else {
                        self.dev.finishes += 1;
                        self.dev.wp[zi] = CAP;
                    }
                    let (result, _) = self.seq.complete(cmd.id, CmdResult::Ok).unwrap();
                    self.sync.push_back(CmdDone { id: cmd.id, result });
                    zone = z;
                }
            }
        }
    }

    fn send(&mut self, c: MemberCmd) {
        self.host.sent(&c, self.now);
        if ZoneSeq::sequenced(c.op) {
            let d = self.seq.submit(&c);
            if d.is_some() {
                self.dispatch(d, u32::MAX);
            }
            return;
        }
        assert_eq!(c.op, CmdOp::Read, "only reads bypass the ordering here");
        self.inflight.push(InFlight {
            cmd: c,
            offset_bytes: c.offset_bytes,
            write: false,
        });
    }

    fn drain(&mut self) {
        for _ in 0..1_000_000 {
            if let Some(o) = self.host.pop() {
                match o {
                    Output::Cmd(c) => self.send(c),
                    Output::Done(d) => self.done.push((d.tag, d.result)),
                }
                continue;
            }
            let Some(d) = self.sync.pop_front() else {
                return;
            };
            self.host.member_done(self.now, d, &mut self.data);
        }
        panic!("the volume never stopped");
    }

    fn complete_one(&mut self, rng: &mut Rng) -> bool {
        if self.inflight.is_empty() {
            return false;
        }
        let k = rng.below(self.inflight.len() as u64) as usize;
        let f = self.inflight.swap_remove(k);
        let len = f.cmd.len_bytes as usize;
        let mut result = CmdResult::Ok;
        if f.write {
            self.dev.writing[(f.offset_bytes / ZONE) as usize] -= 1;
            let mut buf = vec![0u8; len];
            self.data.read_bytes(f.cmd.buf, &mut buf);
            if !self.dev.write(f.offset_bytes, &buf) {
                result = CmdResult::Err(libc::EIO);
            }
            if let Some((r, zone)) = self.seq.complete(f.cmd.id, result) {
                result = r;
                self.dispatch(None, zone);
            }
        } else {
            let o = f.offset_bytes as usize;
            let bytes = self.dev.data[o..o + len].to_vec();
            self.data.write_bytes(f.cmd.buf, &bytes);
        }
        self.now += 1000;
        self.host.member_done(
            self.now,
            CmdDone {
                id: f.cmd.id,
                result,
            },
            &mut self.data,
        );
        self.drain();
        true
    }

    fn stats(&self) -> serde_json::Value {
        self.host.volume().stats()
    }
}

/// What a run saw.
struct Ran {
    d: Driver,
    writes: u64,
    reads_checked: u64,
}

/// `ios` I/Os at depth TAGS, `write_pct` of them writes of `len` bytes (reads too), offsets
/// random or sequential as `s` says, every read of written data checked.
fn run(seed: u64, s: &Setup, ios: u64, write_pct: u64, len: u32) -> Ran {
    let mut rng = Rng(seed | 1);
    let mut d = Driver::new(s, len);
    let region = u64::from(s.zones.start) * ZONE..u64::from(s.zones.end) * ZONE;
    let mut seq_off = [region.start; 2];
    let mut pending: Vec<Option<(VolOp, u64, bool)>> = vec![None; TAGS as usize];
    let (mut issued, mut writes, mut checked) = (0u64, 0u64, 0u64);
    for _ in 0..ios * 64 {
        if let Some(tag) = pending.iter().position(Option::is_none)
            && issued < ios
        {
            let write = rng.below(100) < write_pct;
            let op = if write { VolOp::Write } else { VolOp::Read };
            let random = if write {
                s.random_writes
            } else {
                s.random_reads
            };
            let gen_off = if random {
                region.start
                    + rng.below((region.end - region.start) / u64::from(BLOCK)) * u64::from(BLOCK)
            } else {
                // The generator's sequential offsets run over the holes too, wrapping.
                let o = &mut seq_off[write as usize];
                if *o + u64::from(len) > region.end {
                    *o = region.start;
                }
                let at = *o;
                *o += u64::from(len);
                at
            };
            let mut io = VolIo {
                tag: tag as u32,
                op,
                offset_bytes: gen_off,
                len_bytes: len,
                fua: false,
            };
            let p = d.host.place(&io).expect("zbd places reads and writes");
            io.offset_bytes = p.offset_bytes;
            let z = p.offset_bytes / ZONE;
            assert!(
                (u64::from(s.zones.start)..u64::from(s.zones.end)).contains(&z),
                "placed outside the region's zones"
            );
            assert!(
                p.offset_bytes % ZONE + u64::from(len) <= CAP,
                "placed across a zone's capacity: {p:?}"
            );
            if write {
                pattern(&mut d.data.client[tag][..len as usize], p.offset_bytes);
                writes += 1;
            }
            pending[tag] = Some((op, p.offset_bytes, p.verify));
            issued += 1;
            d.host.submit(d.now, io, &mut d.data);
            d.drain();
        }
        if rng.below(2) == 0 || issued >= ios {
            d.complete_one(&mut rng);
        }
        for (tag, r) in std::mem::take(&mut d.done) {
            let (op, at, verify) = pending[tag as usize].take().expect("a pending I/O");
            assert_eq!(r, IoResult::Ok, "{op:?} at {at} failed");
            if op == VolOp::Read && verify {
                let mut want = vec![0u8; len as usize];
                pattern(&mut want, at);
                assert!(
                    d.data.client[tag as usize][..len as usize] == want[..],
                    "the read at {at} returned other data than written there"
                );
                checked += 1;
            }
        }
        if issued >= ios && pending.iter().all(Option::is_none) {
            break;
        }
    }
    assert!(
        pending.iter().all(Option::is_none),
        "I/Os never completed: {} in flight, {} waiting in zones, {}",
        d.inflight.len(),
        d.seq.queued(),
        d.stats()
    );
    assert_eq!(d.dev.wp_errors, 0, "a write off a write pointer");
    assert_eq!(d.seq.stats().write_pointer_errors, 0);
    assert_eq!(d.seq.stats().device_errors, 0);
    // The host's write pointers are the device's.
    for z in 0..ZONES as u32 {
        assert_eq!(
            d.seq.write_pointer(z),
            Some(d.dev.wp[z as usize]),
            "zone {z}"
        );
    }
    Ran {
        d,
        writes,
        reads_checked: checked,
    }
}

#[test]
fn sequential_writes_fill_zones_in_turn_and_reset_each_full_zone_reached() {
    let len = 64 << 10;
    let per_zone = CAP / len; // 3 writes fill a zone
    for seed in 1..=4 {
        let s = Setup::new(false, 3);
        let ios = 100;
        let r = run(seed, &s, ios, 100, len as u32);
        // Zone visits in order: the first ZONES start empty, every later one starts with a
        // reset of a full zone.
        let visits = r.writes.div_ceil(per_zone);
        let resets = visits.saturating_sub(ZONES);
        assert_eq!(r.d.dev.resets, resets, "seed {seed}");
        assert_eq!(r.d.dev.resets_not_full, 0);
        assert_eq!(r.d.dev.finishes, 0);
        assert_eq!(r.d.dev.bytes_written, r.writes * len);
        // Where the writer is: zone (visits - 1) % ZONES holds the last part-zone.
        let last = ((visits - 1) % ZONES) as usize;
        let in_last = r.writes - (visits - 1) * per_zone;
        assert_eq!(r.d.dev.wp[last], in_last * len);
        let st = r.d.stats();
        assert_eq!(st["resets_full"], resets);
        assert_eq!(st["writes"], r.writes);
        // Never past the capacity: the holes stay untouched.
        for z in 0..ZONES as usize {
            let hole = &r.d.dev.data[z * ZONE as usize + CAP as usize..(z + 1) * ZONE as usize];
            assert!(hole.iter().all(|&b| b == 0), "zone {z}'s tail was written");
        }
    }
}

#[test]
fn random_writes_keep_to_the_open_zone_limit_and_reset_only_full_zones() {
    let len = 16 << 10;
    for (seed, limit) in [(3, 1), (5, 2), (7, 4), (11, 0)] {
        let s = Setup::new(true, limit);
        let r = run(seed, &s, 1500, 70, len);
        let st = r.d.stats();
        assert_eq!(r.d.dev.resets_not_full, 0, "a reset of a zone not full");
        // Every byte written is on the device or was in a full zone reset: exactly the resets
        // the writes needed.
        let on_dev: u64 = r.d.dev.wp.iter().sum();
        assert_eq!(
            r.d.dev.bytes_written,
            on_dev + r.d.dev.resets * CAP,
            "limit {limit}"
        );
        assert_eq!(st["resets_full"], r.d.dev.resets);
        assert!(
            r.d.dev.resets > 0,
            "1500 x 70% of 16 KiB pass the 2.25 MiB region"
        );
        if limit > 0 {
            assert!(r.d.dev.open_max <= u64::from(limit));
            assert!(st["open_zones_peak"].as_u64().unwrap() <= u64::from(limit));
        }
        assert!(
            r.reads_checked > 100,
            "reads of written data: {}",
            r.reads_checked
        );
    }
}

#[test]
fn reads_stay_in_written_data_and_find_none_on_an_empty_device() {
    // Reads only, on an empty region: nothing to read, every read above a pointer, unchecked.
    let s = Setup::new(true, 2);
    let r = run(9, &s, 50, 0, 4096);
    let st = r.d.stats();
    assert_eq!(st["reads_beyond_wp"], 50);
    assert_eq!(r.reads_checked, 0);
    assert_eq!(r.d.host.volume().warnings().len(), 1);
    // Zones written before the run are read, and only below their pointers.
    let mut s = Setup::new(false, 2);
    s.written[3] = 64 << 10;
    s.written[7] = CAP;
    let r = run(9, &s, 200, 0, 16 << 10);
    assert_eq!(r.d.stats()["reads_beyond_wp"], 0);
    assert_eq!(r.reads_checked, 200);
}

#[test]
fn partly_written_zones_are_continued_and_hold_their_share_of_the_limit() {
    let mut s = Setup::new(true, 3);
    s.written[2] = 32 << 10;
    s.written[5] = 96 << 10;
    let r = run(13, &s, 800, 100, 32 << 10);
    assert_eq!(r.d.dev.resets_not_full, 0);
    assert!(r.d.dev.open_max <= 3);
    // What a random run leaves (as many part-written zones as the limit, the first among
    // them): the sequential writer continues them in turn.
    let mut s = Setup::new(false, 6);
    for z in 0..6 {
        s.written[z] = (z as u64 + 1) * (16 << 10);
    }
    let r = run(37, &s, 200, 100, 16 << 10);
    assert!(r.d.dev.open_max <= 6);
    assert_eq!(r.d.dev.resets_not_full, 0);
    // First pass: the six zones' room (176 + 160 + ... + 96 KiB) and six empty zones, 1968
    // KiB; the other 1232 KiB of the 3200 go to zones reset when reached: 7 of 192 KiB.
    assert_eq!(r.d.dev.resets, 7);
    assert_eq!(r.d.dev.bytes_written, 3200 << 10);
    // One outside the region takes its share of the device's active limit: the run keeps 2.
    let mut s = Setup::new(true, 3);
    s.zones = 0..6;
    s.written[2] = 32 << 10;
    s.written[9] = 16 << 10;
    let r = run(31, &s, 800, 100, 32 << 10);
    assert!(r.d.dev.open_max <= 3, "the device saw {}", r.d.dev.open_max);
    assert_eq!(
        r.d.stats()["open_zones_max"],
        2,
        "3 active less the one outside"
    );
    assert!(r.d.stats()["open_zones_peak"].as_u64().unwrap() <= 2);
    assert_eq!(r.d.dev.wp[9], 16 << 10, "outside the region: untouched");
    // Too many of them for the limit: refused in one line, before any I/O.
    let mut s = Setup::new(true, 1);
    s.written[2] = 32 << 10;
    s.written[5] = 96 << 10;
    let e = Zbd::new(ZbdParams {
        zone_size_bytes: ZONE,
        zone_capacity_bytes: CAP,
        written_bytes: s.written.clone(),
        zones: 0..ZONES as u32,
        open_zones_max: 1,
        active_zones_max: 1,
        reset_threshold: 0.0,
        reset_frequency: 0.0,
        read_beyond_wp: false,
        reset_first: false,
        random_writes: true,
        random_reads: true,
        block_bytes: BLOCK,
        tags: TAGS,
        len_bytes_max: 4096,
        max_write_bytes: 0,
    })
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.starts_with("2 zones are partly written (open or closed), 2 of them in the region")
            && e.contains("reset them")
            && !e.contains('\n'),
        "{e}"
    );
}

#[test]
fn odd_room_is_finished_and_the_threshold_resets_zones_with_data() {
    // 48 KiB writes into 192 KiB zones that start 16 KiB in: 16 KiB of room left over at each
    // zone's end, finished (the open zone freed) before the next zone.
    let mut s = Setup::new(false, 3);
    s.written[0] = 16 << 10;
    s.written[1] = 16 << 10;
    s.zones = 0..2;
    let r = run(17, &s, 12, 100, 48 << 10);
    // Zone 0: 16 + 3 x 48 = 160, 32 KiB left < 48: finished; zone 1 likewise; then zone 0 is
    // full and reset.
    assert!(r.d.dev.finishes >= 2, "finishes {}", r.d.dev.finishes);
    assert_eq!(r.d.dev.resets_not_full, 0);
    // zone_reset_threshold 0 and frequency 1/4: every 4th write resets its zone first.
    let mut s = Setup::new(true, 4);
    s.reset_threshold = 0.0;
    s.reset_frequency = 0.25;
    let r = run(19, &s, 400, 100, 16 << 10);
    let st = r.d.stats();
    let t = st["resets_threshold"].as_u64().unwrap();
    assert!(
        (90..=100).contains(&t),
        "about 400 / 4 threshold resets, not {t}"
    );
    assert_eq!(r.d.dev.resets, t + st["resets_full"].as_u64().unwrap());
    let on_dev: u64 = r.d.dev.wp.iter().sum();
    assert!(r.d.dev.bytes_written > on_dev, "resets dropped data");
}

#[test]
fn with_verify_the_region_is_reset_first_and_every_read_checks() {
    // Data of an earlier run (no pattern of this one) in part and full zones: reset before the
    // first I/O, so every read of this run reads what it wrote.
    let mut s = Setup::new(true, 4);
    s.written[1] = 64 << 10;
    s.written[4] = CAP;
    s.written[9] = 16 << 10;
    s.patterned = false;
    s.reset_first = true;
    let r = run(23, &s, 600, 60, 16 << 10);
    let st = r.d.stats();
    assert_eq!(st["resets_start"], 3, "{st}");
    assert!(r.reads_checked > 50, "{}", r.reads_checked);
    let zones = st["zones"].as_array().unwrap();
    for z in [1, 4, 9] {
        assert!(
            zones
                .iter()
                .any(|e| e["zone"] == z && e["reset_at_start"] == true)
        );
    }
    assert_eq!(
        r.d.dev.resets_not_full, 2,
        "zones 1 and 9 were part-written"
    );
    // Without the reset, the old bytes would be read as this run's (the check fails).
    let mut s = Setup::new(false, 4);
    s.written[0] = CAP;
    s.patterned = false;
    let res = std::panic::catch_unwind(|| run(29, &s, 20, 0, 16 << 10));
    assert!(res.is_err(), "reads of another run's data passed the check");
}

#[test]
fn offsets_before_the_regions_first_whole_zone_go_to_it() {
    // --offset 4k: the region's whole zones are 1..4; the generator's first offsets are in
    // zone 0's part, which the run never touches.
    let mut s = Setup::new(true, 2);
    s.zones = 1..4;
    s.written[1] = 64 << 10;
    let mut d = Driver::new(&s, 16 << 10);
    for (op, off) in [(VolOp::Read, 4096), (VolOp::Write, 8192), (VolOp::Read, 0)] {
        let io = VolIo {
            tag: 0,
            op,
            offset_bytes: off,
            len_bytes: 16 << 10,
            fua: false,
        };
        let p = d.host.place(&io).unwrap();
        assert!(
            (ZONE..4 * ZONE).contains(&p.offset_bytes) && p.verify,
            "{op:?} at {off}: {p:?}"
        );
        d.host.submit(
            d.now,
            VolIo {
                offset_bytes: p.offset_bytes,
                ..io
            },
            &mut d.data,
        );
        d.drain();
        let mut rng = Rng(5);
        while d.complete_one(&mut rng) {}
        assert_eq!(std::mem::take(&mut d.done), [(0, IoResult::Ok)]);
    }
    assert_eq!(d.dev.wp[0], 0);
    assert_eq!(d.dev.wp[1], 80 << 10, "the write continued zone 1");
}
