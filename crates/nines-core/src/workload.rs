//! The workload: what the user asked for ([`WorkloadSpec`]) and the deterministic stream of
//! requests it produces for each target ([`Generator`]).
//!
//! The generator is a plain state machine: the driver passes the current time in, and nothing
//! here reads a clock. For a given seed and target index it yields the same operations and
//! offsets whatever the engine, the timing or the driver (real or simulated), so engines can be
//! compared I/O for I/O.

use std::fmt;
use std::str::FromStr;

use rand_core::{Rng, SeedableRng};
use rand_distr::{Distribution as _, Zipf};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};

use crate::op::Op;
use crate::units::ParseError;

/// Access pattern and direction, with fio's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RwMode {
    Read,
    Write,
    RandRead,
    RandWrite,
    RandRw,
}

impl RwMode {
    pub const NAMES: [&'static str; 5] = ["read", "write", "randread", "randwrite", "randrw"];

    pub fn is_random(self) -> bool {
        matches!(self, RwMode::RandRead | RwMode::RandWrite | RwMode::RandRw)
    }

    /// Whether this workload may write (and so needs write permission on a target).
    pub fn writes(self, read_mix_pct: u8) -> bool {
        match self {
            RwMode::Read | RwMode::RandRead => false,
            RwMode::Write | RwMode::RandWrite => true,
            RwMode::RandRw => read_mix_pct < 100,
        }
    }

    /// Whether this workload may read.
    pub fn reads(self, read_mix_pct: u8) -> bool {
        match self {
            RwMode::Read | RwMode::RandRead => true,
            RwMode::Write | RwMode::RandWrite => false,
            RwMode::RandRw => read_mix_pct > 0,
        }
    }
}

impl fmt::Display for RwMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = match self {
            RwMode::Read => 0,
            RwMode::Write => 1,
            RwMode::RandRead => 2,
            RwMode::RandWrite => 3,
            RwMode::RandRw => 4,
        };
        f.write_str(Self::NAMES[i])
    }
}

impl FromStr for RwMode {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        Ok(match s.trim() {
            "read" => RwMode::Read,
            "write" => RwMode::Write,
            "randread" => RwMode::RandRead,
            "randwrite" => RwMode::RandWrite,
            "randrw" => RwMode::RandRw,
            _ => {
                return Err(ParseError::new(
                    "access pattern",
                    s,
                    "use read, write, randread, randwrite or randrw",
                ));
            }
        })
    }
}

/// How random offsets are distributed over the region.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Distribution {
    Uniform,
    /// Zipf over the region's blocks with exponent `theta` (fio's `zipf:THETA`); hot blocks are
    /// scattered over the region, not packed at its start.
    Zipf {
        theta: f64,
    },
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Distribution::Uniform => f.write_str("uniform"),
            Distribution::Zipf { theta } => write!(f, "zipf:{theta}"),
        }
    }
}

impl FromStr for Distribution {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        let t = s.trim();
        if t == "uniform" {
            return Ok(Distribution::Uniform);
        }
        if let Some(theta) = t.strip_prefix("zipf:") {
            let ok = !theta.is_empty() && theta.chars().all(|c| c.is_ascii_digit() || c == '.');
            if let (true, Ok(theta)) = (ok, theta.parse::<f64>())
                && theta > 0.0
                && theta <= 100.0
            {
                return Ok(Distribution::Zipf { theta });
            }
            return Err(ParseError::new(
                "distribution",
                s,
                "zipf's THETA must be a number in (0, 100], e.g. zipf:1.2",
            ));
        }
        Err(ParseError::new(
            "distribution",
            s,
            "use uniform or zipf:THETA (e.g. zipf:1.2)",
        ))
    }
}

/// How `--rate-iops` spaces I/Os: evenly, or with exponential gaps (a Poisson process).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrival {
    Fixed,
    Poisson,
}

impl fmt::Display for Arrival {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Arrival::Fixed => "fixed",
            Arrival::Poisson => "poisson",
        })
    }
}

impl FromStr for Arrival {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s.trim() {
            "fixed" => Ok(Arrival::Fixed),
            "poisson" => Ok(Arrival::Poisson),
            _ => Err(ParseError::new(
                "arrival process",
                s,
                "use fixed or poisson",
            )),
        }
    }
}

/// The largest queue depth accepted per target.
pub const IODEPTH_MAX: u32 = 4096;
/// The largest block size accepted.
pub const BLOCK_SIZE_BYTES_MAX: u64 = 64 << 20;

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// What the user asked for, for every target of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    pub rw: RwMode,
    /// Share of reads in percent for `randrw`.
    pub read_mix_pct: u8,
    pub block_size_bytes: u64,
    /// I/Os kept in flight per target (closed loop), or the most in flight (open loop).
    pub iodepth: u32,
    /// Measured time, after the ramp. `None` means until `ios_max`.
    pub runtime_ns: Option<u64>,
    /// I/Os per target, ramp excluded. `None` means until `runtime_ns`.
    pub ios_max: Option<u64>,
    /// Time run first and excluded from the statistics.
    pub ramp_ns: u64,
    pub region_offset_bytes: u64,
    /// `None`: from the offset to the end of the target.
    pub region_size_bytes: Option<u64>,
    /// Open-loop pacing per target: latency counts from when each I/O was due.
    pub rate_iops: Option<u64>,
    pub arrival: Arrival,
    /// Pause after each completion before that slot issues again; with `thinktime_blocks`, the
    /// pause after each burst instead.
    pub thinktime_ns: u64,
    /// fio's `thinktime_blocks`: bursts of this many I/Os, then, once all of them completed, the
    /// thinktime (the stream rests as a whole). 0 (nines' own default): each slot rests
    /// `thinktime_ns` after its own completion. A fio job file gets fio's default, 1.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub thinktime_blocks: u32,
    pub distribution: Distribution,
    pub seed: u64,
}

impl Default for WorkloadSpec {
    fn default() -> Self {
        WorkloadSpec {
            rw: RwMode::RandRead,
            read_mix_pct: 50,
            block_size_bytes: 4096,
            iodepth: 1,
            runtime_ns: Some(10_000_000_000),
            ios_max: None,
            ramp_ns: 0,
            region_offset_bytes: 0,
            region_size_bytes: None,
            rate_iops: None,
            arrival: Arrival::Fixed,
            thinktime_ns: 0,
            thinktime_blocks: 0,
            distribution: Distribution::Uniform,
            seed: 1,
        }
    }
}

/// A workload that cannot run, or cannot run on a given target. Messages are one line and say
/// which option to change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkloadError {
    #[error("--bs {0} is not a positive multiple of 512 bytes up to 64 MiB")]
    BlockSize(u64),
    #[error("--iodepth {0} must be between 1 and {IODEPTH_MAX}")]
    IoDepth(u32),
    #[error("--mix {0} must be a read share between 0 and 100 percent")]
    Mix(u8),
    #[error("--rate-iops must be at least 1")]
    Rate,
    #[error("give --runtime or --ios: the run needs an end")]
    NoEnd,
    #[error("--runtime and --ios must be positive")]
    ZeroEnd,
    #[error("zipf theta {0} must be a positive finite number")]
    Theta(f64),
    #[error(
        "block size {block_size_bytes} bytes is not a multiple of the target's logical block size \
         {logical_block_bytes} bytes; use --bs {logical_block_bytes} or a multiple of it"
    )]
    BlockNotMultiple {
        block_size_bytes: u64,
        logical_block_bytes: u32,
    },
    #[error(
        "--offset {offset_bytes} is not a multiple of the target's logical block size {logical_block_bytes} bytes"
    )]
    OffsetAlignment {
        offset_bytes: u64,
        logical_block_bytes: u32,
    },
    #[error(
        "--offset {offset_bytes} is at or beyond the end of the target ({target_size_bytes} bytes); \
         reduce --offset"
    )]
    OffsetBeyondEnd {
        offset_bytes: u64,
        target_size_bytes: u64,
    },
    #[error(
        "region {offset_bytes}+{size_bytes} bytes is larger than the target ({target_size_bytes} bytes); \
         reduce --size or --offset"
    )]
    RegionTooLarge {
        offset_bytes: u64,
        size_bytes: u64,
        target_size_bytes: u64,
    },
    #[error(
        "region of {size_bytes} bytes holds no block of {block_size_bytes} bytes; increase --size or reduce --bs"
    )]
    RegionTooSmall {
        size_bytes: u64,
        block_size_bytes: u64,
    },
}

impl WorkloadSpec {
    /// Checks everything that does not depend on a target.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        let bs = self.block_size_bytes;
        if bs == 0 || !bs.is_multiple_of(512) || bs > BLOCK_SIZE_BYTES_MAX {
            return Err(WorkloadError::BlockSize(bs));
        }
        if self.iodepth == 0 || self.iodepth > IODEPTH_MAX {
            return Err(WorkloadError::IoDepth(self.iodepth));
        }
        if self.read_mix_pct > 100 {
            return Err(WorkloadError::Mix(self.read_mix_pct));
        }
        if self.rate_iops == Some(0) {
            return Err(WorkloadError::Rate);
        }
        match (self.runtime_ns, self.ios_max) {
            (None, None) => return Err(WorkloadError::NoEnd),
            (Some(0), _) | (_, Some(0)) => return Err(WorkloadError::ZeroEnd),
            _ => {}
        }
        if let Distribution::Zipf { theta } = self.distribution
            && !(theta.is_finite() && theta > 0.0)
        {
            return Err(WorkloadError::Theta(theta));
        }
        Ok(())
    }

    /// Whether any I/O of this workload writes.
    pub fn writes(&self) -> bool {
        self.rw.writes(self.read_mix_pct)
    }
}

/// One request of the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub op: Op,
    pub offset_bytes: u64,
    pub len_bytes: u32,
    /// When the request was due: its latency counts from here.
    pub intended_ns: u64,
    /// Force unit access (a replayed FUA write): the device completes it once it is durable.
    pub fua: bool,
    /// A flush with no data (a replayed NVMe Flush / block-layer flush): `op` is Write and
    /// `offset_bytes` and `len_bytes` are 0. Sent to the volume as a flush, never measured
    /// (see [`crate::run`]).
    pub flush: bool,
}

/// Open-loop pacing state.
#[derive(Clone, Debug)]
struct Pacer {
    arrival: Arrival,
    period_ns: f64,
    start_ns: u64,
    /// Index of the next I/O (fixed spacing: due = start + index * period, without drift).
    index: u64,
    /// Poisson: the next due time accumulated from exponential gaps.
    next_ns: u64,
    rng: Xoshiro256PlusPlus,
}

impl Pacer {
    fn due_ns(&self) -> u64 {
        match self.arrival {
            Arrival::Fixed => self.start_ns + (self.index as f64 * self.period_ns) as u64,
            Arrival::Poisson => self.next_ns,
        }
    }

    fn advance(&mut self) {
        self.index += 1;
        if self.arrival == Arrival::Poisson {
            self.next_ns += exponential_ns(&mut self.rng, self.period_ns);
        }
    }
}

/// An exponential sample with the given mean, from 53 uniform bits.
fn exponential_ns(rng: &mut Xoshiro256PlusPlus, mean_ns: f64) -> u64 {
    // u in (0, 1]: never ln(0).
    let u = ((rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
    (-u.ln() * mean_ns).round() as u64
}

/// Mixes the seed with the target index so each target has its own stream.
fn stream_seed(seed: u64, target_index: u32, stream: u64) -> u64 {
    // SplitMix64 finaliser over the combination: distinct inputs give unrelated seeds.
    let mut z = seed ^ (u64::from(target_index) << 32) ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform integer in [0, n) without division (Lemire's multiply-shift; bias below 2^-64 * n).
#[inline]
fn below(rng: &mut Xoshiro256PlusPlus, n: u64) -> u64 {
    ((u128::from(rng.next_u64()) * u128::from(n)) >> 64) as u64
}

/// The deterministic request stream of one target.
#[derive(Clone, Debug)]
pub struct Generator {
    rw: RwMode,
    read_mix_pct: u8,
    block_size_bytes: u64,
    region_offset_bytes: u64,
    region_blocks: u64,
    next_seq_block: u64,
    rng: Xoshiro256PlusPlus,
    zipf: Option<Zipf<f64>>,
    /// Multiplier of the permutation that scatters zipf ranks over the region (coprime with it).
    zipf_scatter: u64,
    pacer: Option<Pacer>,
    /// The next request's direction and block when drawn ahead by
    /// [`Generator::peek_offset_bytes`].
    ahead: Option<(Op, u64)>,
}

impl Generator {
    /// The stream for target number `target_index` of size `target_size_bytes`, whose offsets and
    /// sizes must be multiples of `logical_block_bytes`. `start_ns` is the driver's time origin.
    pub fn new(
        spec: &WorkloadSpec,
        target_size_bytes: u64,
        logical_block_bytes: u32,
        target_index: u32,
        start_ns: u64,
    ) -> Result<Generator, WorkloadError> {
        spec.validate()?;
        let lbs = u64::from(logical_block_bytes.max(1));
        let bs = spec.block_size_bytes;
        if !bs.is_multiple_of(lbs) {
            return Err(WorkloadError::BlockNotMultiple {
                block_size_bytes: bs,
                logical_block_bytes,
            });
        }
        let offset = spec.region_offset_bytes;
        if !offset.is_multiple_of(lbs) {
            return Err(WorkloadError::OffsetAlignment {
                offset_bytes: offset,
                logical_block_bytes,
            });
        }
        if offset >= target_size_bytes {
            return Err(WorkloadError::OffsetBeyondEnd {
                offset_bytes: offset,
                target_size_bytes,
            });
        }
        let size = match spec.region_size_bytes {
            Some(size) => size,
            None => target_size_bytes.saturating_sub(offset),
        };
        if offset
            .checked_add(size)
            .is_none_or(|end| end > target_size_bytes)
        {
            return Err(WorkloadError::RegionTooLarge {
                offset_bytes: offset,
                size_bytes: size,
                target_size_bytes,
            });
        }
        let region_blocks = size / bs;
        if region_blocks == 0 {
            return Err(WorkloadError::RegionTooSmall {
                size_bytes: size,
                block_size_bytes: bs,
            });
        }
        let zipf = match spec.distribution {
            Distribution::Uniform => None,
            Distribution::Zipf { theta } => Some(
                Zipf::new(region_blocks as f64, theta).map_err(|_| WorkloadError::Theta(theta))?,
            ),
        };
        let pacer = spec.rate_iops.map(|rate| {
            let period_ns = 1e9 / rate as f64;
            let mut rng =
                Xoshiro256PlusPlus::seed_from_u64(stream_seed(spec.seed, target_index, 2));
            let first_ns = match spec.arrival {
                Arrival::Fixed => start_ns,
                Arrival::Poisson => start_ns + exponential_ns(&mut rng, period_ns),
            };
            Pacer {
                arrival: spec.arrival,
                period_ns,
                start_ns,
                index: 0,
                next_ns: first_ns,
                rng,
            }
        });
        Ok(Generator {
            rw: spec.rw,
            read_mix_pct: spec.read_mix_pct,
            block_size_bytes: bs,
            region_offset_bytes: offset,
            region_blocks,
            next_seq_block: 0,
            rng: Xoshiro256PlusPlus::seed_from_u64(stream_seed(spec.seed, target_index, 1)),
            zipf,
            zipf_scatter: scatter_multiplier(region_blocks),
            pacer,
            ahead: None,
        })
    }

    /// The region actually used: (offset, size) in bytes, a whole number of blocks.
    pub fn region(&self) -> (u64, u64) {
        (
            self.region_offset_bytes,
            self.region_blocks * self.block_size_bytes,
        )
    }

    /// The size of every request.
    pub fn block_size_bytes(&self) -> u32 {
        self.block_size_bytes as u32
    }

    /// With `--rate-iops`, when the next I/O is due; without, `None` (issue when a slot is free).
    pub fn next_due_ns(&self) -> Option<u64> {
        self.pacer.as_ref().map(Pacer::due_ns)
    }

    /// The next request. Rate-paced requests carry their due time; others `now_ns`.
    #[inline]
    pub fn next_request(&mut self, now_ns: u64) -> Request {
        let intended_ns = match &mut self.pacer {
            Some(p) => {
                let due = p.due_ns();
                p.advance();
                due
            }
            None => now_ns,
        };
        let (op, block) = match self.ahead.take() {
            Some(d) => d,
            None => self.draw(),
        };
        Request {
            op,
            offset_bytes: self.offset_of(block),
            len_bytes: self.block_size_bytes as u32,
            intended_ns,
            fua: false,
            flush: false,
        }
    }

    /// The offset of the next request, drawn now and kept for [`Generator::next_request`], so the
    /// stream of requests is exactly the one without looking ahead. A driver uses it to warm
    /// what that request will touch (the simulator prefetches the model's mapping entry) long
    /// before it goes.
    #[inline]
    pub fn peek_offset_bytes(&mut self) -> u64 {
        let (_, block) = match self.ahead {
            Some(d) => d,
            None => {
                let d = self.draw();
                self.ahead = Some(d);
                d
            }
        };
        self.offset_of(block)
    }

    #[inline]
    fn offset_of(&self, block: u64) -> u64 {
        self.region_offset_bytes + block * self.block_size_bytes
    }

    /// The random (or sequential) part of the next request: its direction and block.
    #[inline]
    fn draw(&mut self) -> (Op, u64) {
        let op = match self.rw {
            RwMode::Read | RwMode::RandRead => Op::Read,
            RwMode::Write | RwMode::RandWrite => Op::Write,
            RwMode::RandRw => {
                if below(&mut self.rng, 100) < u64::from(self.read_mix_pct) {
                    Op::Read
                } else {
                    Op::Write
                }
            }
        };
        let block = if self.rw.is_random() {
            match &self.zipf {
                None => below(&mut self.rng, self.region_blocks),
                Some(z) => {
                    let rank = (z.sample(&mut self.rng) as u64).clamp(1, self.region_blocks) - 1;
                    ((u128::from(rank) * u128::from(self.zipf_scatter))
                        % u128::from(self.region_blocks)) as u64
                }
            }
        } else {
            let b = self.next_seq_block;
            self.next_seq_block = if b + 1 == self.region_blocks {
                0
            } else {
                b + 1
            };
            b
        };
        debug_assert!(block < self.region_blocks);
        (op, block)
    }
}

/// A multiplier coprime with `n`, so that rank -> rank * m mod n is a permutation that spreads
/// the hottest zipf ranks over the whole region (as fio scatters them).
fn scatter_multiplier(n: u64) -> u64 {
    fn gcd(mut a: u64, mut b: u64) -> u64 {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    }
    if n <= 1 {
        return 1;
    }
    // Start near n times the golden ratio's fraction; a coprime is found within a few steps.
    let mut m = ((n as f64) * 0.618_033_988_75) as u64 | 1;
    let mut steps = 0u32;
    while gcd(m, n) != 1 {
        m += 2;
        steps += 1;
        assert!(steps < 1_000_000, "no coprime multiplier found for {n}");
    }
    m % n
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spec() -> WorkloadSpec {
        WorkloadSpec {
            ios_max: Some(1000),
            runtime_ns: None,
            ..WorkloadSpec::default()
        }
    }

    #[test]
    fn same_seed_same_stream_different_targets_differ() {
        let s = spec();
        let mut a = Generator::new(&s, 1 << 30, 512, 0, 0).unwrap();
        let mut b = Generator::new(&s, 1 << 30, 512, 0, 12345).unwrap();
        let mut c = Generator::new(&s, 1 << 30, 512, 1, 0).unwrap();
        let ra: Vec<u64> = (0..100).map(|i| a.next_request(i).offset_bytes).collect();
        let rb: Vec<u64> = (0..100)
            .map(|i| b.next_request(i * 7).offset_bytes)
            .collect();
        let rc: Vec<u64> = (0..100).map(|i| c.next_request(i).offset_bytes).collect();
        assert_eq!(ra, rb);
        assert_ne!(ra, rc);
    }

    #[test]
    fn sequential_wraps_within_region() {
        let s = WorkloadSpec {
            rw: RwMode::Read,
            region_offset_bytes: 8192,
            region_size_bytes: Some(3 * 4096),
            ..spec()
        };
        let mut g = Generator::new(&s, 1 << 20, 4096, 0, 0).unwrap();
        let offs: Vec<u64> = (0..5).map(|_| g.next_request(0).offset_bytes).collect();
        assert_eq!(offs, [8192, 12288, 16384, 8192, 12288]);
    }

    #[test]
    fn mix_is_respected() {
        let s = WorkloadSpec {
            rw: RwMode::RandRw,
            read_mix_pct: 70,
            ..spec()
        };
        let mut g = Generator::new(&s, 1 << 30, 512, 0, 0).unwrap();
        let reads = (0..100_000)
            .filter(|_| g.next_request(0).op == Op::Read)
            .count();
        assert!((69_000..71_000).contains(&reads), "{reads}");
    }

    #[test]
    fn fixed_rate_has_no_drift_and_poisson_has_the_mean() {
        let s = WorkloadSpec {
            rate_iops: Some(3),
            ..spec()
        };
        let mut g = Generator::new(&s, 1 << 30, 512, 0, 100).unwrap();
        let due: Vec<u64> = (0..4).map(|_| g.next_request(0).intended_ns).collect();
        assert_eq!(
            due,
            [
                100,
                100 + 333_333_333,
                100 + 666_666_666,
                100 + 1_000_000_000
            ]
        );

        let s = WorkloadSpec {
            rate_iops: Some(1000),
            arrival: Arrival::Poisson,
            ..spec()
        };
        let mut g = Generator::new(&s, 1 << 30, 512, 0, 0).unwrap();
        let n = 200_000u64;
        let mut last = 0;
        for _ in 0..n {
            last = g.next_request(0).intended_ns;
        }
        let mean_gap = last as f64 / n as f64;
        assert!((mean_gap - 1e6).abs() < 1e6 * 0.01, "{mean_gap}");
    }

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let s = WorkloadSpec {
            distribution: Distribution::Zipf { theta: 1.2 },
            ..spec()
        };
        let blocks = 1000u64;
        let mut g = Generator::new(&s, blocks * 4096, 4096, 0, 0).unwrap();
        let mut counts = vec![0u32; blocks as usize];
        for _ in 0..100_000 {
            let r = g.next_request(0);
            assert!(r.offset_bytes < blocks * 4096 && r.offset_bytes.is_multiple_of(4096));
            counts[(r.offset_bytes / 4096) as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top10: u32 = counts[..10].iter().sum();
        // Zipf(1.2) over 1000 items puts well over a third of the mass on the top 10.
        assert!(top10 > 35_000, "{top10}");
    }

    #[test]
    fn target_errors() {
        let s = WorkloadSpec {
            block_size_bytes: 512,
            ..spec()
        };
        assert!(matches!(
            Generator::new(&s, 1 << 20, 4096, 0, 0),
            Err(WorkloadError::BlockNotMultiple { .. })
        ));
        let s = WorkloadSpec {
            region_size_bytes: Some(2 << 20),
            ..spec()
        };
        assert!(matches!(
            Generator::new(&s, 1 << 20, 512, 0, 0),
            Err(WorkloadError::RegionTooLarge { .. })
        ));
        let s = WorkloadSpec {
            region_offset_bytes: 1000,
            ..spec()
        };
        assert!(matches!(
            Generator::new(&s, 1 << 20, 512, 0, 0),
            Err(WorkloadError::OffsetAlignment { .. })
        ));
        assert!(matches!(
            Generator::new(&spec(), 1024, 512, 0, 0),
            Err(WorkloadError::RegionTooSmall { .. })
        ));
        let s = WorkloadSpec {
            region_offset_bytes: 2 << 20,
            ..spec()
        };
        assert!(matches!(
            Generator::new(&s, 1 << 20, 512, 0, 0),
            Err(WorkloadError::OffsetBeyondEnd { .. })
        ));
        let s = WorkloadSpec {
            runtime_ns: None,
            ios_max: None,
            ..spec()
        };
        assert_eq!(s.validate(), Err(WorkloadError::NoEnd));
    }

    #[test]
    fn names_round_trip() {
        for name in RwMode::NAMES {
            assert_eq!(name.parse::<RwMode>().unwrap().to_string(), name);
        }
        assert_eq!(
            "zipf:1.2".parse::<Distribution>(),
            Ok(Distribution::Zipf { theta: 1.2 })
        );
        assert!("zipf:".parse::<Distribution>().is_err());
        assert!("zipf:-1".parse::<Distribution>().is_err());
        assert!("zipf:nan".parse::<Distribution>().is_err());
        assert!("pareto".parse::<Distribution>().is_err());
        assert_eq!("poisson".parse::<Arrival>(), Ok(Arrival::Poisson));
    }

    proptest! {
        #[test]
        fn requests_stay_in_region_and_aligned(
            seed in any::<u64>(),
            bs_blocks in 1u64..64,
            offset_blocks in 0u64..64,
            size_blocks in 1u64..4096,
            random in any::<bool>(),
            zipf in any::<bool>(),
        ) {
            let lbs = 512u64;
            let s = WorkloadSpec {
                rw: if random { RwMode::RandRw } else { RwMode::Write },
                block_size_bytes: bs_blocks * lbs,
                region_offset_bytes: offset_blocks * lbs,
                region_size_bytes: Some(size_blocks * lbs),
                distribution: if zipf { Distribution::Zipf { theta: 0.9 } } else { Distribution::Uniform },
                seed,
                ..spec()
            };
            let target = (offset_blocks + size_blocks) * lbs;
            match Generator::new(&s, target, lbs as u32, 0, 0) {
                Ok(mut g) => {
                    let (off, size) = g.region();
                    for _ in 0..200 {
                        let r = g.next_request(0);
                        prop_assert!(r.offset_bytes >= off);
                        prop_assert!(r.offset_bytes + u64::from(r.len_bytes) <= off + size);
                        prop_assert_eq!(r.offset_bytes % lbs, 0);
                    }
                }
                Err(e) => prop_assert!(bs_blocks > size_blocks, "{e}"),
            }
        }

        /// Looking ahead changes nothing: with peeks at random points the requests are exactly
        /// those of a stream never peeked, and each peek names the next request's offset.
        #[test]
        fn peeking_ahead_leaves_the_stream_unchanged(
            seed in any::<u64>(),
            rw in prop::sample::select(vec![RwMode::RandRw, RwMode::RandRead, RwMode::Write]),
            zipf in any::<bool>(),
            rate in any::<bool>(),
            peeks in prop::collection::vec(0u8..3, 1..300),
        ) {
            let s = WorkloadSpec {
                rw,
                block_size_bytes: 4096,
                region_size_bytes: Some(1 << 24),
                distribution: if zipf { Distribution::Zipf { theta: 0.9 } } else { Distribution::Uniform },
                rate_iops: rate.then_some(1000),
                arrival: Arrival::Poisson,
                seed,
                ..spec()
            };
            let mut plain = Generator::new(&s, 1 << 30, 512, 3, 0).unwrap();
            let mut peeked = Generator::new(&s, 1 << 30, 512, 3, 0).unwrap();
            for (i, &n) in peeks.iter().enumerate() {
                let mut seen = None;
                for _ in 0..n {
                    let o = peeked.peek_offset_bytes();
                    prop_assert!(seen.is_none_or(|x| x == o), "a second peek moved on");
                    seen = Some(o);
                }
                let now = i as u64 * 1000;
                let a = plain.next_request(now);
                let b = peeked.next_request(now);
                prop_assert_eq!(a, b);
                if let Some(o) = seen {
                    prop_assert_eq!(o, b.offset_bytes);
                }
            }
        }

        #[test]
        fn distribution_parser_never_panics(s in "\\PC{0,16}") {
            let _ = s.parse::<Distribution>();
        }
    }
}
