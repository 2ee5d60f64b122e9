//! The persisted serial array (`--persist`) across crashes, and what the shaping wrappers say
//! about it.
//!
//! The crash driver executes member commands one at a time in a random order (any command in
//! flight may complete first) over members with a volatile cache: a write or trim is durable
//! only once its member is flushed. A crash can come after any command; the members then hold
//! what was flushed plus, sector by sector, a random part of what was not (in order). The
//! volume is reopened over those bytes and every unit must read a value it could hold: the
//! last value acknowledged before the last completed FLUSH, or any value written after it
//! (never a mix of two writes, never another unit's data). Small members make the front-end
//! rotate and xGC clean segments between most crashes. NINES_SERIAL_CRASH_POINTS sets the
//! crashes per seed (default 40).

use nines_array::testing::MemData;
use nines_array::{
    CmdDone, CmdOp, CmdResult, DataPlane, IoResult, LayoutSpec, MemberCmd, Output, SerialSpec,
    ShapingSpec, VolIo, VolOp, Volume, VolumeHost, VolumeParams, build,
};

const UNIT: u64 = 4096;
const SECTOR: usize = 512;
const TAGS: u32 = 4;
const LEN_MAX: u32 = 8 * UNIT as u32;

fn spec() -> SerialSpec {
    SerialSpec {
        column_members: 1,
        stripe_bytes: 8192,
        segment_bytes: 16 * 1024,
        unit_bytes: UNIT as u32,
        rotate_free: 1,
        gc_start: 2,
        gc_stop: 3,
        gc_depth: 2,
        move_bytes: 8192,
        start_full_bytes: 0,
        persist: true,
        zone_size_bytes: 0,
        zone_capacity_bytes: 0,
    }
}

/// Members of 8 segments of 16 KiB plus the metadata region (a superblock and one table page).
const MEMBER_BYTES: u64 = 8 * 16 * 1024 + 2 * 4096;
const MEMBERS: usize = 4;

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

/// One write's bytes for `unit`: every sector names the write and the unit, so a unit pieced
/// together from two writes, or another unit's data, is seen.
fn pattern(id: u64, unit: u64) -> Vec<u8> {
    let mut b = vec![0u8; UNIT as usize];
    if id == 0 {
        return b;
    }
    for (s, sec) in b.chunks_exact_mut(SECTOR).enumerate() {
        sec[..8].copy_from_slice(&id.to_le_bytes());
        sec[8..16].copy_from_slice(&unit.to_le_bytes());
        for (i, x) in sec[16..].iter_mut().enumerate() {
            *x = (id as u8).wrapping_mul(31) ^ (s as u8) ^ (i as u8);
        }
    }
    b
}

/// The write a unit's bytes come from (0: zeros); None when they are no write's.
fn identify(bytes: &[u8], unit: u64) -> Option<u64> {
    let id = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    (pattern(id, unit) == bytes).then_some(id)
}

struct Crashy {
    host: VolumeHost,
    data: MemData,
    now_ns: u64,
    durable: Vec<Vec<u8>>,
    live: Vec<Vec<u8>>,
    /// Writes and trims since each member's last flush, in order: (offset, bytes).
    unflushed: Vec<Vec<(usize, Vec<u8>)>>,
    pending: Vec<MemberCmd>,
    done: Vec<(u32, IoResult)>,
    /// Member commands executed.
    executed: u64,
}

impl Crashy {
    fn open(members: Vec<Vec<u8>>) -> Crashy {
        let sizes: Vec<u64> = members.iter().map(|m| m.len() as u64).collect();
        let vol = build(
            &LayoutSpec::Serial(spec()),
            &VolumeParams {
                member_sizes_bytes: &sizes,
                block_bytes: 512,
                tags: TAGS,
                len_bytes_max: LEN_MAX,
            },
        )
        .unwrap();
        let data = MemData::new(TAGS, LEN_MAX, vol.scratch());
        let mut c = Crashy {
            host: VolumeHost::new(vol, 0, false),
            data,
            now_ns: 0,
            unflushed: vec![Vec::new(); members.len()],
            live: members.clone(),
            durable: members,
            pending: Vec::new(),
            done: Vec::new(),
            executed: 0,
        };
        // Opening starts on the volume's timer.
        if c.host.next_timer_ns().is_some_and(|t| t <= c.now_ns) {
            c.host.on_timer(c.now_ns, &mut c.data);
            c.pull();
        }
        c
    }

    fn pull(&mut self) {
        while let Some(o) = self.host.pop() {
            match o {
                Output::Cmd(c) => self.pending.push(c),
                Output::Done(d) => self.done.push((d.tag, d.result)),
            }
        }
    }

    fn submit(&mut self, io: VolIo) {
        self.host.submit(self.now_ns, io, &mut self.data);
        self.pull();
    }

    /// Executes one command in flight, chosen at random.
    fn step(&mut self, rng: &mut Rng) {
        let i = rng.below(self.pending.len() as u64) as usize;
        let c = self.pending.swap_remove(i);
        let m = c.member as usize;
        let (off, len) = (c.offset_bytes as usize, c.len_bytes as usize);
        match c.op {
            CmdOp::Read => {
                let src = self.live[m][off..off + len].to_vec();
                self.data.write_bytes(c.buf, &src);
            }
            CmdOp::Write | CmdOp::Trim | CmdOp::WriteZeroes => {
                let mut b = vec![0u8; len];
                if c.op == CmdOp::Write {
                    self.data.read_bytes(c.buf, &mut b);
                }
                self.live[m][off..off + len].copy_from_slice(&b);
                self.unflushed[m].push((off, b));
            }
            CmdOp::Flush => {
                for (o, b) in self.unflushed[m].drain(..) {
                    self.durable[m][o..o + b.len()].copy_from_slice(&b);
                }
            }
            op => panic!("serial sent {op:?}"),
        }
        self.executed += 1;
        self.now_ns += 1000;
        self.host.member_done(
            self.now_ns,
            CmdDone {
                id: c.id,
                result: CmdResult::Ok,
            },
            &mut self.data,
        );
        self.pull();
    }

    /// Runs until `n` requests completed, or until the crash budget runs out (false).
    fn until_done(&mut self, n: usize, rng: &mut Rng, budget: &mut u64) -> bool {
        while self.done.len() < n {
            if *budget == 0 {
                return false;
            }
            assert!(
                !self.pending.is_empty(),
                "requests wait with no member command in flight"
            );
            *budget -= 1;
            self.step(rng);
        }
        true
    }

    /// The members after a crash now: flushed bytes plus a random part of the rest.
    fn crash_image(&self, rng: &mut Rng) -> Vec<Vec<u8>> {
        let mut img = self.durable.clone();
        for (m, recs) in self.unflushed.iter().enumerate() {
            for (o, b) in recs {
                for (s, sec) in b.chunks(SECTOR).enumerate() {
                    if rng.below(2) == 0 {
                        let at = o + s * SECTOR;
                        img[m][at..at + sec.len()].copy_from_slice(sec);
                    }
                }
            }
        }
        img
    }

    fn stats(&self) -> serde_json::Value {
        self.host.volume().stats()
    }
}

/// What each unit may hold: its values in order, the first one guaranteed.
struct Shadow {
    hist: Vec<Vec<u64>>,
}

impl Shadow {
    fn latest(&self, u: usize) -> u64 {
        *self.hist[u].last().unwrap()
    }
}

/// Reads every unit of a freshly opened volume and checks it against the shadow; the values
/// read become the shadow's guaranteed ones.
fn verify_after_open(c: &mut Crashy, sh: &mut Shadow, rng: &mut Rng, point: u64) {
    let units = sh.hist.len() as u64;
    let mut u = 0;
    while u < units {
        let n = (units - u).min(8);
        c.done.clear();
        c.submit(VolIo {
            tag: 0,
            op: VolOp::Read,
            offset_bytes: u * UNIT,
            len_bytes: (n * UNIT) as u32,
            fua: false,
        });
        assert!(c.until_done(1, rng, &mut u64::MAX.clone()));
        assert_eq!(c.done[0].1, IoResult::Ok, "crash {point}: read failed");
        for i in 0..n {
            let at = (i * UNIT) as usize;
            let bytes = &c.data.client[0][at..at + UNIT as usize];
            let unit = (u + i) as usize;
            let got = identify(bytes, u + i);
            assert!(
                got.is_some_and(|g| sh.hist[unit].contains(&g)),
                "crash {point}: unit {unit} reads {got:?}; it may hold {:?} (the first is the \
                 last one flushed); stats {}",
                sh.hist[unit],
                c.stats()
            );
            sh.hist[unit] = vec![got.unwrap()];
        }
        u += n;
    }
}

fn crash_run(seed: u64, points: u64) -> (u64, u64) {
    let mut rng = Rng(seed | 1);
    let mut c = Crashy::open(vec![vec![0u8; MEMBER_BYTES as usize]; MEMBERS]);
    let size = c.host.volume().size_bytes();
    assert_eq!(size, spec().size_bytes(MEMBER_BYTES, MEMBERS as u32));
    let units = size / UNIT;
    let mut sh = Shadow {
        hist: vec![vec![0]; units as usize],
    };
    let mut next_id = 1u64;
    let mut flushes_ok = 0u64;
    for point in 0..points {
        // Crash after this many more member commands.
        let mut budget = 20 + rng.below(400);
        'run: loop {
            c.done.clear();
            if rng.below(8) == 0 {
                // A FLUSH alone: every write acknowledged so far becomes guaranteed.
                c.submit(VolIo {
                    tag: 0,
                    op: VolOp::Flush,
                    offset_bytes: 0,
                    len_bytes: 0,
                    fua: false,
                });
                if !c.until_done(1, &mut rng, &mut budget) {
                    break 'run;
                }
                assert_eq!(c.done[0].1, IoResult::Ok);
                flushes_ok += 1;
                for h in &mut sh.hist {
                    let last = *h.last().unwrap();
                    *h = vec![last];
                }
                continue;
            }
            // Up to four requests on disjoint ranges.
            let mut taken: Vec<(u64, u64)> = Vec::new();
            let mut reads = Vec::new();
            let mut n = 0;
            for tag in 0..1 + rng.below(u64::from(TAGS)) as u32 {
                let u = rng.below(units);
                let len = (1 + rng.below(8)).min(units - u);
                if taken.iter().any(|&(a, b)| u < b && a < u + len) {
                    continue;
                }
                taken.push((u, u + len));
                let kind = rng.below(20);
                let (op, fua) = match kind {
                    0..=12 => (VolOp::Write, false),
                    13 => (VolOp::Write, true),
                    14 => (VolOp::Trim, false),
                    _ => (VolOp::Read, false),
                };
                match op {
                    VolOp::Write => {
                        for i in 0..len {
                            let id = next_id;
                            next_id += 1;
                            let at = (i * UNIT) as usize;
                            c.data.client[tag as usize][at..at + UNIT as usize]
                                .copy_from_slice(&pattern(id, u + i));
                            sh.hist[(u + i) as usize].push(id);
                        }
                    }
                    VolOp::Trim => {
                        for i in 0..len {
                            sh.hist[(u + i) as usize].push(0);
                        }
                    }
                    _ => reads.push((tag, u, len)),
                }
                c.submit(VolIo {
                    tag,
                    op,
                    offset_bytes: u * UNIT,
                    len_bytes: (len * UNIT) as u32,
                    fua,
                });
                n += 1;
            }
            if !c.until_done(n, &mut rng, &mut budget) {
                break 'run;
            }
            for &(tag, r) in &c.done {
                assert_eq!(r, IoResult::Ok, "tag {tag}");
            }
            // Reads in a run see the latest values.
            for (tag, u, len) in reads {
                for i in 0..len {
                    let at = (i * UNIT) as usize;
                    let bytes = &c.data.client[tag as usize][at..at + UNIT as usize];
                    assert_eq!(
                        identify(bytes, u + i),
                        Some(sh.latest((u + i) as usize)),
                        "unit {} read back wrong before any crash",
                        u + i
                    );
                }
            }
        }
        let img = c.crash_image(&mut rng);
        c = Crashy::open(img);
        verify_after_open(&mut c, &mut sh, &mut rng, point);
    }
    let st = c.stats();
    let p = &st["persist"];
    assert_eq!(p["recovery_error"], serde_json::Value::Null);
    (flushes_ok, st["gc_victims"].as_u64().unwrap_or(0))
}

#[test]
fn every_flushed_write_survives_a_crash_after_any_command() {
    let points: u64 = std::env::var("NINES_SERIAL_CRASH_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let mut flushes = 0;
    for seed in [0x9e37_79b9_7f4a_7c15u64, 0x2545_f491_4f6c_dd1d, 7] {
        let (f, _) = crash_run(seed, points);
        flushes += f;
    }
    assert!(flushes > points, "too few flushes completed: {flushes}");
}

/// Without crashes, a long run (many rotations and GC victims) reopened after a FLUSH reads
/// back exactly; the cleaned segments waited for commits; and reopening with another geometry
/// refuses every request instead of reading garbage.
#[test]
fn a_flushed_volume_reopens_exactly_and_refuses_another_geometry() {
    let mut rng = Rng(12345);
    let mut c = Crashy::open(vec![vec![0u8; MEMBER_BYTES as usize]; MEMBERS]);
    let units = c.host.volume().size_bytes() / UNIT;
    let mut want = vec![0u64; units as usize];
    let mut budget = u64::MAX;
    for id in 1..3000u64 {
        let u = rng.below(units);
        c.data.client[0][..UNIT as usize].copy_from_slice(&pattern(id, u));
        want[u as usize] = id;
        c.done.clear();
        c.submit(VolIo {
            tag: 0,
            op: VolOp::Write,
            offset_bytes: u * UNIT,
            len_bytes: UNIT as u32,
            fua: false,
        });
        assert!(c.until_done(1, &mut rng, &mut budget));
    }
    c.done.clear();
    c.submit(VolIo {
        tag: 0,
        op: VolOp::Flush,
        offset_bytes: 0,
        len_bytes: 0,
        fua: false,
    });
    assert!(c.until_done(1, &mut rng, &mut budget));
    let st = c.stats();
    assert!(st["gc_victims"].as_u64().unwrap() > 50, "{st}");
    assert!(st["rotations"].as_u64().unwrap() > 10, "{st}");
    let p = &st["persist"];
    assert_eq!(p["formatted"], true);
    assert!(p["dead_segments"].as_u64().unwrap() > 50, "{p}");
    assert!(p["commits"].as_u64().unwrap() > 10, "{p}");
    // Only what was flushed: the crash image is exactly the durable bytes here.
    let img = c.durable.clone();
    let mut r = Crashy::open(img.clone());
    let mut sh = Shadow {
        hist: want.iter().map(|&w| vec![w]).collect(),
    };
    verify_after_open(&mut r, &mut sh, &mut rng, 0);
    let p = &r.stats()["persist"];
    assert_eq!(p["formatted"], false);
    assert_eq!(
        p["recovered_units"].as_u64().unwrap(),
        want.iter().filter(|&&w| w != 0).count() as u64
    );
    // Another segment size over the same members: the superblock does not match.
    let mut other = spec();
    other.segment_bytes = 8192;
    let vol = build(
        &LayoutSpec::Serial(other),
        &VolumeParams {
            member_sizes_bytes: &[MEMBER_BYTES; MEMBERS],
            block_bytes: 512,
            tags: TAGS,
            len_bytes_max: LEN_MAX,
        },
    )
    .unwrap();
    let mut o = Crashy {
        data: MemData::new(TAGS, LEN_MAX, vol.scratch()),
        host: VolumeHost::new(vol, 0, false),
        now_ns: 0,
        unflushed: vec![Vec::new(); MEMBERS],
        live: img.clone(),
        durable: img,
        pending: Vec::new(),
        done: Vec::new(),
        executed: 0,
    };
    o.submit(VolIo {
        tag: 0,
        op: VolOp::Read,
        offset_bytes: 0,
        len_bytes: UNIT as u32,
        fua: false,
    });
    assert!(o.until_done(1, &mut rng, &mut budget));
    assert_eq!(o.done[0].1, IoResult::Err(5));
    let e = o.stats()["persist"]["recovery_error"].clone();
    assert!(e.as_str().unwrap().contains("another geometry"), "{e}");
    // It read the superblock and wrote nothing over the other volume.
    assert!(o.executed >= 1);
    assert!(o.live == o.durable && o.unflushed.iter().all(Vec::is_empty));
    assert!(
        o.live == r.durable,
        "the refused volume changed the members"
    );
}

/// The shaping wrappers (throttle, chop, write buffer) forward which members the serial
/// volume keeps free of GC: the simulator counts the front-end's GC through them.
#[test]
fn shaping_wrappers_forward_the_gc_free_members() {
    let mut sp = spec();
    sp.persist = false;
    let throttle: ShapingSpec = serde_json::from_value(serde_json::json!({
        "throttle": { "rate_bytes_per_s": 1u64 << 40 },
        "chop_bytes": 8192,
    }))
    .unwrap();
    let buffer: ShapingSpec = serde_json::from_value(serde_json::json!({
        "buffer": { "device": "mem", "bucket_bytes": 65536, "classes": 1, "half_life_ns": 1_000_000_000u64 },
    }))
    .unwrap();
    for shaping in [throttle, buffer] {
        let extra = shaping.extra_members() as usize;
        let mut sizes = vec![8 * 16 * 1024u64; MEMBERS];
        // A buffer smaller than the data written (four 64 KiB buckets): a buffer that holds the
        // whole working set keeps full buckets buffered and never flushes, so the front-end
        // would never fill.
        sizes.extend(std::iter::repeat_n(256 << 10, extra));
        let layout = LayoutSpec::Shaped {
            inner: Box::new(LayoutSpec::Serial(sp)),
            shaping: shaping.clone(),
        };
        let vol = build(
            &layout,
            &VolumeParams {
                member_sizes_bytes: &sizes,
                block_bytes: 512,
                tags: TAGS,
                len_bytes_max: LEN_MAX,
            },
        )
        .unwrap();
        let mut d = nines_array::testing::SyncDriver::new(vol, &sizes, TAGS, LEN_MAX);
        let units = d.host().volume().size_bytes() / UNIT;
        let mut fronts = std::collections::BTreeSet::new();
        for i in 0..600u64 {
            d.write((i * 7 % units) * UNIT, &pattern(i + 1, 0)).unwrap();
            let st = d.host().volume().stats();
            let front = st["front_column"].as_u64().unwrap() as u32;
            assert_eq!(
                d.host().volume().gc_free_members(),
                Some(front..front + 1),
                "{shaping:?}"
            );
            fronts.insert(front);
        }
        assert!(fronts.len() > 1, "the front-end never rotated: {shaping:?}");
    }
}
