//! A deterministic crash simulator for volumes, after TigerBeetle's VOPR and FoundationDB's
//! simulator: the real policy code runs against simulated members, a random client workload
//! and crashes at any member command, all from one seed; after every crash the volume is
//! built again over what the members hold (the code `nines serve`, `check` and `rebuild` open
//! volumes with: [`crate::build`] and a [`VolumeHost`]) and an oracle checks it.
//!
//! - **Members** execute commands in any order (a random command in flight runs next, and its
//!   completion is delivered at once), so completions come back reordered as a thread pool or
//!   a device queue returns them. Each member has a volatile write cache: a write, trim or
//!   zeroing is *durable* only once a later flush of that member completes.
//! - **Crashes** come after a random number of member commands, during start-up too. A
//!   [`Fault::ProcessKill`] (kill -9) keeps what the members executed (the page cache
//!   survives) and applies each command still in flight sector by sector at random (the
//!   kernel may have started it); a [`Fault::PowerLoss`] keeps what was flushed, plus, sector
//!   by sector, a random part of what was not (writes torn and reordered).
//! - **The client** keeps up to `tags` requests in flight on disjoint ranges: writes (some
//!   FUA), WRITE_ZEROES, TRIMs, reads, and FLUSHes among them.
//! - **The oracle**, per unit: the value of its last write acknowledged before a completed
//!   FLUSH was submitted (or of a FUA write when acknowledged) is guaranteed; after a crash the
//!   unit must read that value or one written after it: never an older generation (*lost*),
//!   never a mix of two writes or another unit's data (*wrong*). A read before any crash
//!   returns the last acknowledged value. The volume must open and serve again
//!   (*unservable*), and requests must never wait with nothing in flight and no timer
//!   (*hang*).
//!
//! - **Recovery** of layouts whose metadata lives outside the volume (raid0 and raid5
//!   superblocks, the raid5 write-intent bitmap's resync before serving: `nines-io`'s
//!   `array_meta::open_array`) goes through a [`Recovery`] hook the caller gives, which runs
//!   that code over the crashed images (nines-io's `tests/crash_sim_meta.rs`), so the volume is
//!   built with what the server's start-up decided. Where the start-up serves with a known
//!   hazard (a raid5 that crashed degraded: the write hole, `--start-dirty-degraded`), the hook
//!   names the volume ranges at risk, and only there may a unit read as garbage (counted in
//!   [`Outcome::suspect_units`]).
//!
//! A violation carries its seed and crash point; [`explore`] with that seed replays it
//! exactly. Not for hot paths: this allocates freely.

use std::sync::Arc;

use crate::api::{
    CmdDone, CmdOp, CmdResult, DataPlane, IoResult, MemberCmd, Output, VolIo, VolOp, Volume,
};
use crate::testing::MemData;
use crate::{LayoutSpec, VolumeHost, VolumeParams, build};

/// Bytes a torn write is torn at.
pub const SECTOR_BYTES: usize = 512;

/// What a crash keeps of the members.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The process dies (kill -9): executed commands stay, commands in flight apply in part.
    ProcessKill,
    /// The machine loses power: unflushed writes are lost, torn or kept, at random.
    PowerLoss,
}

/// What a [`Recovery`] decided: the volume to build over the members, and the volume byte
/// ranges `[start, end)` whose contents the start-up knowingly serves unrecoverable.
#[derive(Clone, Debug)]
pub struct Recovered {
    pub spec: LayoutSpec,
    /// The members' sizes the volume is built with (less any metadata area at their end).
    pub member_sizes_bytes: Vec<u64>,
    pub suspect_bytes: Vec<(u64, u64)>,
}

/// Brings crashed members back as the server's start-up does, in place over their images
/// (reading superblocks, resyncing, writing the start's superblocks); an error is the start-up
/// refusing the members (a violation: the volume must serve again).
pub type RecoverFn = dyn Fn(&mut [Vec<u8>]) -> Result<Recovered, String> + Send + Sync;

/// A [`RecoverFn`] in a config.
#[derive(Clone)]
pub struct Recovery(pub Arc<RecoverFn>);

impl std::fmt::Debug for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Recovery(..)")
    }
}

/// One exploration's setting.
#[derive(Clone, Debug)]
pub struct CrashConfig {
    pub spec: LayoutSpec,
    pub member_sizes_bytes: Vec<u64>,
    /// The client's I/O unit (a multiple of the volume's block).
    pub unit_bytes: u64,
    /// Client requests in flight at most.
    pub tags: u32,
    /// Units one request covers at most.
    pub units_max: u32,
    pub fault: Fault,
    /// Member commands between crashes: at least this many, up to twice as many.
    pub commands_per_crash: u64,
    /// Client units written at most (the first ones of the volume; 0: all of it), so a small
    /// region is rewritten often.
    pub region_units: u64,
    /// Whether the client sends TRIM and WRITE_ZEROES (layouts that refuse them: false).
    pub zeroes: bool,
    /// The start-up before every (re)build, when the layout's metadata lives outside the
    /// volume; None: the volume is built over the images as they are, with `spec`.
    pub recovery: Option<Recovery>,
}

/// An invariant broken, with what replays it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub seed: u64,
    pub crash_point: u64,
    pub what: String,
}

/// What an exploration did.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub crash_points: u64,
    pub member_commands: u64,
    pub acked_writes: u64,
    pub flushes: u64,
    /// Units a recovery served knowingly unrecoverable ([`Recovered::suspect_bytes`]) that
    /// read as no write's data.
    pub suspect_units: u64,
    pub violations: Vec<Violation>,
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64: every seed, 0 too, gives a good stream.
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One write's bytes for `unit`: every sector names the write and the unit, so a unit pieced
/// together from two writes, or another unit's data, is seen. Value 0 is zeros.
pub fn pattern(value: u64, unit: u64, unit_bytes: u64) -> Vec<u8> {
    let mut b = vec![0u8; unit_bytes as usize];
    if value == 0 {
        return b;
    }
    for (s, sec) in b.chunks_exact_mut(SECTOR_BYTES).enumerate() {
        sec[..8].copy_from_slice(&value.to_le_bytes());
        sec[8..16].copy_from_slice(&unit.to_le_bytes());
        for (i, x) in sec[16..].iter_mut().enumerate() {
            *x = (value as u8).wrapping_mul(31) ^ (s as u8) ^ (i as u8);
        }
    }
    b
}

/// The value each sector of a unit's bytes is (0: zeros); None where a sector is no write's.
pub fn identify_sectors(bytes: &[u8], unit: u64) -> Vec<Option<u64>> {
    let ub = bytes.len() as u64;
    bytes
        .chunks_exact(SECTOR_BYTES)
        .enumerate()
        .map(|(s, sec)| {
            let v = u64::from_le_bytes(sec[..8].try_into().expect("a sector holds 8 bytes"));
            let want = pattern(v, unit, ub);
            (want[s * SECTOR_BYTES..(s + 1) * SECTOR_BYTES] == *sec).then_some(v)
        })
        .collect()
}

/// Members with volatile caches.
struct Members {
    live: Vec<Vec<u8>>,
    /// Per member, writes since its last flush: (offset, bytes).
    unflushed: Vec<Vec<(usize, Vec<u8>)>>,
    durable: Vec<Vec<u8>>,
}

impl Members {
    fn new(image: Vec<Vec<u8>>) -> Members {
        Members {
            unflushed: vec![Vec::new(); image.len()],
            durable: image.clone(),
            live: image,
        }
    }

    fn write(&mut self, m: usize, off: usize, bytes: Vec<u8>) {
        self.live[m][off..off + bytes.len()].copy_from_slice(&bytes);
        self.unflushed[m].push((off, bytes));
    }

    /// Applies a random part of `bytes` at `off`, sector by sector, to `img`.
    fn tear(img: &mut [u8], off: usize, bytes: &[u8], rng: &mut Rng) {
        for (s, sec) in bytes.chunks(SECTOR_BYTES).enumerate() {
            if rng.below(2) == 0 {
                let at = off + s * SECTOR_BYTES;
                img[at..at + sec.len()].copy_from_slice(sec);
            }
        }
    }
}

/// A unit's possible values in the order written, each with the acknowledgement number it
/// got (`IN_FLIGHT` until then); the first is guaranteed.
const IN_FLIGHT: u64 = u64::MAX;
/// A sector's floor when a recovery served it as garbage (a suspect range): it reads as no
/// write's until it is written again.
const GARBAGE: u64 = u64::MAX - 1;

struct Oracle {
    /// Per unit, per sector, the value guaranteed (a unit a crash tore holds several).
    floor: Vec<Vec<u64>>,
    /// Per unit, the values written after its floor, in order, with their acknowledgements.
    later: Vec<Vec<(u64, u64)>>,
    acks: u64,
    /// Whether a unit always holds one write's bytes whole (a log-structured layout maps
    /// whole units), or may hold sectors of several after a crash (layouts in place).
    atomic: bool,
}

impl Oracle {
    /// The last value of `u` acknowledged at or before `ack` becomes its guaranteed one.
    fn settle(&mut self, u: usize, ack: u64) {
        let h = &mut self.later[u];
        if let Some(i) = h.iter().rposition(|&(_, a)| a <= ack) {
            let v = h[i].0;
            self.floor[u].fill(v);
            h.drain(..=i);
        }
    }

    /// The value a read before any crash must return.
    fn latest(&self, u: usize) -> Vec<u64> {
        match self.later[u].last() {
            Some(&(v, _)) => vec![v; self.floor[u].len()],
            None => self.floor[u].clone(),
        }
    }

    /// Whether `got` (per sector; None: no write's) is a value unit `u` may hold after a
    /// crash.
    fn allowed(&self, u: usize, got: &[Option<u64>]) -> bool {
        let later = |v: u64| self.later[u].iter().any(|&(w, _)| w == v);
        let each = got
            .iter()
            .enumerate()
            .all(|(s, g)| g.unwrap_or(GARBAGE) == self.floor[u][s] || g.is_some_and(later));
        if !each || !self.atomic {
            return each;
        }
        // Whole: the floor exactly, or one later value in every sector.
        got.iter()
            .zip(&self.floor[u])
            .all(|(g, f)| g.unwrap_or(GARBAGE) == *f)
            || got.windows(2).all(|w| w[0] == w[1]) && got[0].is_some_and(later)
    }
}

#[derive(Clone, Copy)]
enum Req {
    Data {
        op: VolOp,
        first: u64,
        n: u64,
        fua: bool,
    },
    Flush {
        acks_at_submit: u64,
    },
}

/// The volume under test, its members and the commands in flight.
struct Sim<'a> {
    cfg: &'a CrashConfig,
    host: VolumeHost,
    data: MemData,
    members: Members,
    pending: Vec<MemberCmd>,
    done: Vec<(u32, IoResult)>,
    now_ns: u64,
    executed: u64,
}

impl<'a> Sim<'a> {
    /// Recovers the members (the config's [`Recovery`]) and builds the volume over them;
    /// also the suspect ranges the recovery named.
    fn open(
        cfg: &'a CrashConfig,
        mut image: Vec<Vec<u8>>,
    ) -> Result<(Sim<'a>, Vec<(u64, u64)>), String> {
        let rec = match &cfg.recovery {
            Some(r) => (r.0)(&mut image).map_err(|e| format!("the start-up refuses: {e}"))?,
            None => Recovered {
                spec: cfg.spec.clone(),
                member_sizes_bytes: cfg.member_sizes_bytes.clone(),
                suspect_bytes: Vec::new(),
            },
        };
        let len_max = (u64::from(cfg.units_max) * cfg.unit_bytes) as u32;
        let vol = build(
            &rec.spec,
            &VolumeParams {
                member_sizes_bytes: &rec.member_sizes_bytes,
                block_bytes: 512,
                tags: cfg.tags,
                len_bytes_max: len_max,
            },
        )
        .map_err(|e| format!("the volume cannot be built again: {e}"))?;
        let data = MemData::new(cfg.tags, len_max, vol.scratch());
        let mut s = Sim {
            cfg,
            host: VolumeHost::new(vol, 0, false),
            data,
            members: Members::new(image),
            pending: Vec::new(),
            done: Vec::new(),
            now_ns: 0,
            executed: 0,
        };
        s.timers();
        Ok((s, rec.suspect_bytes))
    }

    fn pull(&mut self) {
        while let Some(o) = self.host.pop() {
            match o {
                Output::Cmd(c) => self.pending.push(c),
                Output::Done(d) => self.done.push((d.tag, d.result)),
            }
        }
    }

    /// Runs the volume's timers that are due.
    fn timers(&mut self) {
        for _ in 0..1000 {
            match self.host.next_timer_ns() {
                Some(t) if t <= self.now_ns => {
                    self.host.on_timer(self.now_ns, &mut self.data);
                    self.pull();
                }
                _ => return,
            }
        }
    }

    fn submit(&mut self, io: VolIo) {
        self.host.submit(self.now_ns, io, &mut self.data);
        self.pull();
    }

    /// Executes one command in flight, chosen at random, and delivers its completion.
    fn step(&mut self, rng: &mut Rng) {
        let i = rng.below(self.pending.len() as u64) as usize;
        let c = self.pending.swap_remove(i);
        let m = c.member as usize;
        let (off, len) = (c.offset_bytes as usize, c.len_bytes as usize);
        let size = self.members.live[m].len();
        let result = if off + len > size && !matches!(c.op, CmdOp::Flush) {
            CmdResult::Err(22)
        } else {
            match c.op {
                CmdOp::Read | CmdOp::FastFailRead { .. } => {
                    let src = self.members.live[m][off..off + len].to_vec();
                    self.data.write_bytes(c.buf, &src);
                    CmdResult::Ok
                }
                CmdOp::Write | CmdOp::PlacedWrite { .. } => {
                    let mut b = vec![0u8; len];
                    self.data.read_bytes(c.buf, &mut b);
                    self.members.write(m, off, b);
                    if c.fua {
                        self.flush_member(m);
                    }
                    CmdResult::Ok
                }
                CmdOp::Trim | CmdOp::WriteZeroes => {
                    self.members.write(m, off, vec![0u8; len]);
                    if c.fua {
                        self.flush_member(m);
                    }
                    CmdResult::Ok
                }
                CmdOp::Flush => {
                    self.flush_member(m);
                    CmdResult::Ok
                }
                CmdOp::Control(_) => CmdResult::Ok,
                CmdOp::ZoneAppend | CmdOp::ZoneReset | CmdOp::ZoneFinish => CmdResult::Err(95),
            }
        };
        self.executed += 1;
        self.now_ns += 1000;
        self.host
            .member_done(self.now_ns, CmdDone { id: c.id, result }, &mut self.data);
        self.pull();
        self.timers();
    }

    fn flush_member(&mut self, m: usize) {
        for (o, b) in self.members.unflushed[m].drain(..) {
            self.members.durable[m][o..o + b.len()].copy_from_slice(&b);
        }
    }

    /// Moves on when nothing is in flight: to the volume's next timer. False when requests
    /// wait with nothing that can ever complete them.
    fn idle_advance(&mut self) -> bool {
        match self.host.next_timer_ns() {
            Some(t) => {
                self.now_ns = self.now_ns.max(t);
                self.host.on_timer(self.now_ns, &mut self.data);
                self.pull();
                true
            }
            None => false,
        }
    }

    /// What the members hold after a crash now.
    fn crash_image(&self, rng: &mut Rng) -> Vec<Vec<u8>> {
        let mut img = match self.cfg.fault {
            Fault::ProcessKill => self.members.live.clone(),
            Fault::PowerLoss => {
                let mut img = self.members.durable.clone();
                for (m, recs) in self.members.unflushed.iter().enumerate() {
                    for (o, b) in recs {
                        Members::tear(&mut img[m], *o, b, rng);
                    }
                }
                img
            }
        };
        // Commands in flight may have started.
        let mut data = self.data.clone();
        for c in &self.pending {
            let (m, off, len) = (
                c.member as usize,
                c.offset_bytes as usize,
                c.len_bytes as usize,
            );
            if off + len > img[m].len() {
                continue;
            }
            let bytes = match c.op {
                CmdOp::Write | CmdOp::PlacedWrite { .. } => {
                    let mut b = vec![0u8; len];
                    data.read_bytes(c.buf, &mut b);
                    b
                }
                CmdOp::Trim | CmdOp::WriteZeroes => vec![0u8; len],
                _ => continue,
            };
            Members::tear(&mut img[m], off, &bytes, rng);
        }
        img
    }

    fn recovery_error(&self) -> Option<String> {
        let st = self.host.volume().stats();
        st.get("persist")
            .and_then(|p| p.get("recovery_error"))
            .and_then(|e| e.as_str())
            .map(str::to_owned)
    }
}

/// A run of one seed: `points` crashes, each followed by a recovery and a full read-back.
pub fn explore(cfg: &CrashConfig, seed: u64, points: u64) -> Outcome {
    let mut rng = Rng(seed);
    let mut out = Outcome::default();
    let image: Vec<Vec<u8>> = cfg
        .member_sizes_bytes
        .iter()
        .map(|&s| vec![0u8; s as usize])
        .collect();
    let violation = |out: &mut Outcome, point: u64, what: String| {
        out.violations.push(Violation {
            seed,
            crash_point: point,
            what,
        });
    };
    let mut sim = match Sim::open(cfg, image) {
        Ok((s, _)) => s,
        Err(e) => {
            violation(&mut out, 0, e);
            return out;
        }
    };
    let size = sim.host.volume().size_bytes();
    let mut units = size / cfg.unit_bytes;
    if cfg.region_units > 0 {
        units = units.min(cfg.region_units);
    }
    let sectors = (cfg.unit_bytes as usize / SECTOR_BYTES).max(1);
    let mut oracle = Oracle {
        floor: vec![vec![0; sectors]; units as usize],
        later: vec![Vec::new(); units as usize],
        acks: 0,
        atomic: matches!(cfg.spec.base(), LayoutSpec::Serial(_)),
    };
    let mut next_value = 1u64;
    for point in 0..points {
        out.crash_points += 1;
        let budget = cfg.commands_per_crash + rng.below(cfg.commands_per_crash + 1);
        let stop_at = sim.executed + budget;
        if let Err(what) = run_until(
            &mut sim,
            &mut oracle,
            &mut rng,
            stop_at,
            &mut next_value,
            &mut out,
        ) {
            violation(&mut out, point, what);
            return out;
        }
        out.member_commands += sim.executed;
        let mut img = sim.crash_image(&mut rng);
        let mut early_suspect = Vec::new();
        // Now and then a crash during the start-up too.
        if rng.below(4) == 0 {
            let mut s = match Sim::open(cfg, img.clone()) {
                Ok((s, hole)) => {
                    // What that start-up served knowingly unrecoverable stays so (the next
                    // start-up may find the bitmap it cleared clean).
                    early_suspect = hole;
                    s
                }
                Err(e) => {
                    violation(&mut out, point, e);
                    return out;
                }
            };
            // A read starts the opening of volumes that open on their first request.
            s.submit(VolIo {
                tag: 0,
                op: VolOp::Read,
                offset_bytes: 0,
                len_bytes: cfg.unit_bytes as u32,
                fua: false,
            });
            for _ in 0..rng.below(16) {
                if s.pending.is_empty() {
                    break;
                }
                s.step(&mut rng);
            }
            out.member_commands += s.executed;
            img = s.crash_image(&mut rng);
        }
        let mut suspect;
        (sim, suspect) = match Sim::open(cfg, img) {
            Ok(s) => s,
            Err(e) => {
                violation(&mut out, point, e);
                return out;
            }
        };
        suspect.extend(early_suspect);
        if let Err(what) = verify(&mut sim, &mut oracle, &mut rng, &suspect, &mut out) {
            violation(&mut out, point, what);
            return out;
        }
    }
    out.member_commands += sim.executed;
    out
}

/// Drives the client workload until `stop_at` member commands have executed.
fn run_until(
    sim: &mut Sim,
    oracle: &mut Oracle,
    rng: &mut Rng,
    stop_at: u64,
    next_value: &mut u64,
    out: &mut Outcome,
) -> Result<(), String> {
    let cfg = sim.cfg;
    let units = oracle.floor.len() as u64;
    let ub = cfg.unit_bytes;
    let mut reqs: Vec<Option<Req>> = vec![None; cfg.tags as usize];
    let mut busy = vec![false; units as usize];
    // Bounded: each pass executes a command, submits a request or advances a timer.
    for _ in 0..100_000_000u64 {
        if sim.executed >= stop_at {
            return Ok(());
        }
        // Completions.
        for (tag, result) in std::mem::take(&mut sim.done) {
            let Some(req) = reqs[tag as usize].take() else {
                return Err(format!("tag {tag} completed twice or never submitted"));
            };
            if result != IoResult::Ok {
                return Err(format!("a request failed before any crash: {result:?}"));
            }
            oracle.acks += 1;
            let ack = oracle.acks;
            match req {
                Req::Data { op, first, n, fua } => {
                    for u in first..first + n {
                        busy[u as usize] = false;
                    }
                    match op {
                        VolOp::Read => {
                            for i in 0..n {
                                let u = first + i;
                                let at = (i * ub) as usize;
                                let got = identify_sectors(
                                    &sim.data.client[tag as usize][at..at + ub as usize],
                                    u,
                                );
                                let want = oracle.latest(u as usize);
                                if got
                                    .iter()
                                    .zip(&want)
                                    .any(|(g, w)| g.unwrap_or(GARBAGE) != *w)
                                {
                                    return Err(format!(
                                        "unit {u} read {got:?} before any crash; the last \
                                         value written is {want:?}"
                                    ));
                                }
                            }
                        }
                        _ => {
                            out.acked_writes += 1;
                            for u in first..first + n {
                                oracle.later[u as usize].last_mut().expect("a value").1 = ack;
                                if fua {
                                    oracle.settle(u as usize, ack);
                                }
                            }
                        }
                    }
                }
                Req::Flush { acks_at_submit } => {
                    out.flushes += 1;
                    for u in 0..units as usize {
                        if !oracle.later[u].is_empty() {
                            oracle.settle(u, acks_at_submit);
                        }
                    }
                }
            }
        }
        // New requests, while tags are free (now and then hold back, so commands run).
        if let Some(tag) = reqs.iter().position(Option::is_none)
            && (sim.pending.is_empty() || rng.below(3) == 0)
        {
            let k = rng.below(100);
            if k < 10 {
                reqs[tag] = Some(Req::Flush {
                    acks_at_submit: oracle.acks,
                });
                sim.submit(VolIo {
                    tag: tag as u32,
                    op: VolOp::Flush,
                    offset_bytes: 0,
                    len_bytes: 0,
                    fua: false,
                });
                continue;
            }
            let n = 1 + rng.below(u64::from(cfg.units_max)).min(units - 1);
            let first = rng.below(units - n + 1);
            if (first..first + n).any(|u| busy[u as usize]) {
                // Taken: try again on a later pass.
            } else {
                let (op, fua) = match k {
                    10..=69 => (VolOp::Write, false),
                    70..=75 => (VolOp::Write, true),
                    76..=79 if cfg.zeroes => (VolOp::WriteZeroes, false),
                    80 if cfg.zeroes => (VolOp::WriteZeroes, true),
                    81..=82 if cfg.zeroes => (VolOp::Trim, false),
                    83 if cfg.zeroes => (VolOp::Trim, true),
                    76..=83 => (VolOp::Write, false),
                    _ => (VolOp::Read, false),
                };
                for u in first..first + n {
                    busy[u as usize] = true;
                }
                match op {
                    VolOp::Write => {
                        for i in 0..n {
                            let v = *next_value;
                            *next_value += 1;
                            let at = (i * ub) as usize;
                            sim.data.client[tag][at..at + ub as usize].copy_from_slice(&pattern(
                                v,
                                first + i,
                                ub,
                            ));
                            oracle.later[(first + i) as usize].push((v, IN_FLIGHT));
                        }
                    }
                    VolOp::WriteZeroes | VolOp::Trim => {
                        for u in first..first + n {
                            oracle.later[u as usize].push((0, IN_FLIGHT));
                        }
                    }
                    _ => {}
                }
                reqs[tag] = Some(Req::Data { op, first, n, fua });
                sim.submit(VolIo {
                    tag: tag as u32,
                    op,
                    offset_bytes: first * ub,
                    len_bytes: (n * ub) as u32,
                    fua,
                });
                continue;
            }
        }
        if !sim.pending.is_empty() {
            sim.step(rng);
        } else if reqs.iter().any(Option::is_some) && sim.done.is_empty() && !sim.idle_advance() {
            let waiting = reqs.iter().filter(|r| r.is_some()).count();
            return Err(format!(
                "hang: {waiting} requests wait with no member command in flight and no timer \
                 (volume stats {})",
                sim.host.volume().stats()
            ));
        }
    }
    Err("the workload never reached its crash point".into())
}

/// Reads every unit of a freshly opened volume and checks it against the oracle; the values
/// read become the guaranteed ones.
fn verify(
    sim: &mut Sim,
    oracle: &mut Oracle,
    rng: &mut Rng,
    suspect: &[(u64, u64)],
    out: &mut Outcome,
) -> Result<(), String> {
    let units = oracle.floor.len() as u64;
    let ub = sim.cfg.unit_bytes;
    let per = u64::from(sim.cfg.units_max);
    let mut u = 0;
    while u < units {
        let n = (units - u).min(per);
        sim.done.clear();
        sim.submit(VolIo {
            tag: 0,
            op: VolOp::Read,
            offset_bytes: u * ub,
            len_bytes: (n * ub) as u32,
            fua: false,
        });
        for _ in 0..10_000_000u64 {
            if !sim.done.is_empty() {
                break;
            }
            if !sim.pending.is_empty() {
                sim.step(rng);
            } else if !sim.idle_advance() {
                return Err("hang: a read after recovery never completes".into());
            }
        }
        let Some(&(_, result)) = sim.done.first() else {
            return Err("a read after recovery never completes".into());
        };
        if result != IoResult::Ok {
            return Err(format!(
                "unservable after recovery: a read answers {result:?} ({})",
                sim.recovery_error().unwrap_or_default()
            ));
        }
        for i in 0..n {
            let unit = u + i;
            let ui = unit as usize;
            let at = (i * ub) as usize;
            let got = identify_sectors(&sim.data.client[0][at..at + ub as usize], unit);
            let at_risk = suspect
                .iter()
                .any(|&(a, b)| a < (unit + 1) * ub && unit * ub < b);
            if at_risk && !oracle.allowed(ui, &got) {
                // Served knowingly unrecoverable (garbage, or sectors of older writes pieced
                // together from stale parity): whatever it reads is its value now.
                out.suspect_units += 1;
            } else if !oracle.allowed(ui, &got) {
                // Sectors of this unit's own writes that are not allowed are older ones:
                // lost; anything else (another unit's data, garbage) is wrong.
                let kind = if got.iter().all(Option::is_some) {
                    "lost"
                } else {
                    "wrong"
                };
                return Err(format!(
                    "{kind}: unit {unit} reads {got:?} after recovery; it may hold {:?} then \
                     {:?}",
                    oracle.floor[ui],
                    oracle.later[ui].iter().map(|x| x.0).collect::<Vec<_>>()
                ));
            }
            oracle.floor[ui] = got.iter().map(|g| g.unwrap_or(GARBAGE)).collect();
            oracle.later[ui].clear();
        }
        u += n;
    }
    sim.done.clear();
    Ok(())
}
