//! `--throttle RATE[,BURST]`: a token bucket on writes (paper 004 approach 2: trickling writes
//! keeps the dies idle for reads).
//!
//! A write of `n` bytes costs `n` tokens; a read costs `read_cost × n` (ReFlex-style weights;
//! 0 by default: reads pass at once); flush and trim cost nothing. Tokens accrue at RATE bytes per
//! second up to BURST. A request whose cost the bucket cannot pay now waits in a FIFO (one slot
//! per client tag, so it is bounded) and is admitted by the timer when the bucket can; requests
//! behind it wait too, so writes stay in arrival order. Over any window of length T the cost
//! admitted never exceeds BURST + RATE × T: token arithmetic is exact (integers in byte-
//! nanoseconds), and every request's cost must fit in BURST (checked when built).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::api::{CmdDone, Cx, VolIo, VolOp, Volume};
use crate::{AnyVolume, ArrayError};

const NS_PER_S: u128 = 1_000_000_000;
/// Read costs are kept in millionths of a byte per byte.
const COST_SCALE: u64 = 1_000_000;

/// `--throttle RATE[,BURST]` and `--throttle-read-cost`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThrottleSpec {
    pub rate_bytes_per_s: u64,
    /// None: the largest request (strict smoothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_bytes: Option<u64>,
    /// Tokens a read byte costs, in millionths (0: reads are not throttled; 100000: a write
    /// costs ten times a read of the same size, as in ReFlex).
    #[serde(default)]
    pub read_cost_ppm: u64,
}

/// An exact token bucket: `rate_bytes_per_s` tokens a second up to `burst_bytes`, starting full.
/// Tokens are kept in byte-nanoseconds (bytes × 10⁹), so refills never round.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate_bytes_per_s: u64,
    burst_bytes: u64,
    tokens: u128,
    last_ns: u64,
}

impl TokenBucket {
    pub fn new(rate_bytes_per_s: u64, burst_bytes: u64) -> TokenBucket {
        assert!(rate_bytes_per_s > 0, "a token bucket needs a positive rate");
        TokenBucket {
            rate_bytes_per_s,
            burst_bytes,
            tokens: u128::from(burst_bytes) * NS_PER_S,
            last_ns: 0,
        }
    }

    pub fn rate_bytes_per_s(&self) -> u64 {
        self.rate_bytes_per_s
    }

    pub fn burst_bytes(&self) -> u64 {
        self.burst_bytes
    }

    fn refill(&mut self, now_ns: u64) {
        if now_ns > self.last_ns {
            let add = u128::from(now_ns - self.last_ns) * u128::from(self.rate_bytes_per_s);
            self.tokens = (self.tokens + add).min(u128::from(self.burst_bytes) * NS_PER_S);
            self.last_ns = now_ns;
        }
    }

    /// Takes `cost` tokens at `now` if the bucket holds them.
    pub fn try_take(&mut self, now_ns: u64, cost: u64) -> bool {
        self.refill(now_ns);
        let need = u128::from(cost) * NS_PER_S;
        if self.tokens >= need {
            self.tokens -= need;
            true
        } else {
            false
        }
    }

    /// The earliest time at or after the last refill when `cost` tokens are there (`cost` must
    /// not exceed the burst).
    pub fn ready_at_ns(&self, cost: u64) -> u64 {
        let need = u128::from(cost) * NS_PER_S;
        if self.tokens >= need {
            return self.last_ns;
        }
        let wait = (need - self.tokens).div_ceil(u128::from(self.rate_bytes_per_s));
        self.last_ns
            .saturating_add(u64::try_from(wait).unwrap_or(u64::MAX))
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Held {
    io: Option<VolIo>,
    arrived_ns: u64,
    cost: u64,
}

/// The token-bucket wrapper.
pub struct Throttle {
    inner: AnyVolume,
    bucket: TokenBucket,
    read_cost_ppm: u64,
    held: VecDeque<Held>,
    tags: u32,
    admitted_bytes: u64,
    delayed: u64,
    delay_ns_total: u64,
    delay_ns_max: u64,
    held_max: usize,
}

impl Throttle {
    /// Throttles `inner` for up to `tags` requests of at most `len_bytes_max`.
    pub fn new(
        inner: AnyVolume,
        spec: &ThrottleSpec,
        tags: u32,
        len_bytes_max: u32,
    ) -> Result<Throttle, ArrayError> {
        if spec.rate_bytes_per_s == 0 {
            return Err(ArrayError::Invalid(
                "--throttle 0: give a positive rate in bytes per second, e.g. --throttle 20m"
                    .into(),
            ));
        }
        if spec.read_cost_ppm > 100 * COST_SCALE {
            return Err(ArrayError::Invalid(format!(
                "--throttle-read-cost {}: give a weight from 0 to 100 tokens per read byte",
                spec.read_cost_ppm as f64 / COST_SCALE as f64
            )));
        }
        let biggest = u64::from(len_bytes_max).max(1);
        let burst = spec.burst_bytes.unwrap_or(biggest);
        let cost_max = biggest.max(read_cost(biggest, spec.read_cost_ppm));
        if burst < cost_max {
            return Err(ArrayError::Invalid(format!(
                "--throttle burst {burst} is smaller than the largest request's cost ({cost_max} \
                 bytes), which could never pass: give a burst of at least {cost_max}"
            )));
        }
        Ok(Throttle {
            inner,
            bucket: TokenBucket::new(spec.rate_bytes_per_s, burst),
            read_cost_ppm: spec.read_cost_ppm,
            held: VecDeque::with_capacity(tags as usize),
            tags,
            admitted_bytes: 0,
            delayed: 0,
            delay_ns_total: 0,
            delay_ns_max: 0,
            held_max: 0,
        })
    }

    fn cost(&self, io: &VolIo) -> u64 {
        let len = u64::from(io.len_bytes);
        match io.op {
            VolOp::Write | VolOp::WriteZeroes => len,
            VolOp::Read => read_cost(len, self.read_cost_ppm),
            VolOp::Flush | VolOp::Trim => 0,
        }
    }

    /// Admits the head of the queue if the bucket can pay for it.
    fn admit_one(&mut self, now_ns: u64, cx: &mut Cx) {
        let Some(h) = self.held.front().copied() else {
            return;
        };
        if !self.bucket.try_take(now_ns, h.cost) {
            return;
        }
        self.held.pop_front();
        let io = h.io.expect("held requests carry their I/O");
        let delay = now_ns - h.arrived_ns;
        self.delayed += 1;
        self.delay_ns_total += delay;
        self.delay_ns_max = self.delay_ns_max.max(delay);
        self.admitted_bytes += h.cost;
        self.inner.submit(now_ns, io, cx);
    }
}

fn read_cost(len: u64, ppm: u64) -> u64 {
    (u128::from(len) * u128::from(ppm)).div_ceil(u128::from(COST_SCALE)) as u64
}

impl Volume for Throttle {
    super::same_as_inner!();
    fn outputs_max(&self) -> usize {
        // A timer call admits one request and may run the inner volume's timer.
        2 * self.inner.outputs_max()
    }

    fn submit(&mut self, now_ns: u64, io: VolIo, cx: &mut Cx) {
        let cost = self.cost(&io);
        if cost == 0 {
            self.inner.submit(now_ns, io, cx);
            return;
        }
        if self.held.is_empty() && self.bucket.try_take(now_ns, cost) {
            self.admitted_bytes += cost;
            self.inner.submit(now_ns, io, cx);
            return;
        }
        assert!(
            self.held.len() < self.tags as usize,
            "more requests held than the driver has tags"
        );
        self.held.push_back(Held {
            io: Some(io),
            arrived_ns: now_ns,
            cost,
        });
        self.held_max = self.held_max.max(self.held.len());
    }

    fn member_done(&mut self, now_ns: u64, done: CmdDone, cx: &mut Cx) {
        self.inner.member_done(now_ns, done, cx);
    }

    fn next_timer_ns(&self) -> Option<u64> {
        let own = self.held.front().map(|h| self.bucket.ready_at_ns(h.cost));
        match (own, self.inner.next_timer_ns()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn on_timer(&mut self, now_ns: u64, cx: &mut Cx) {
        if self.inner.next_timer_ns().is_some_and(|t| t <= now_ns) {
            self.inner.on_timer(now_ns, cx);
        }
        self.admit_one(now_ns, cx);
    }

    fn write_back(&self) -> bool {
        self.inner.write_back()
    }

    fn stats(&self) -> serde_json::Value {
        let mean = self.delay_ns_total.checked_div(self.delayed).unwrap_or(0);
        super::stats_with(
            self.inner.stats(),
            "throttle",
            serde_json::json!({
                "rate_bytes_per_s": self.bucket.rate_bytes_per_s(),
                "burst_bytes": self.bucket.burst_bytes(),
                "read_cost": self.read_cost_ppm as f64 / COST_SCALE as f64,
                "admitted_cost_bytes": self.admitted_bytes,
                "delayed_ios": self.delayed,
                "delay_ns_total": self.delay_ns_total,
                "delay_ns_mean": mean,
                "delay_ns_max": self.delay_ns_max,
                "held_max": self.held_max,
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Passthrough;
    use crate::api::{CmdResult, NoData, Output, Outputs};
    use proptest::prelude::*;

    /// Drives a throttled passthrough by hand: submits `ios` (time, len) and runs timers and
    /// completions at once; returns (admission time, bytes) of every write.
    fn admissions(rate: u64, burst: u64, ios: &[(u64, u32)]) -> Vec<(u64, u64)> {
        let tags = ios.len() as u32;
        let inner = AnyVolume::Passthrough(Passthrough::new(1 << 40, 512, tags));
        let spec = ThrottleSpec {
            rate_bytes_per_s: rate,
            burst_bytes: Some(burst),
            read_cost_ppm: 0,
        };
        let max = ios.iter().map(|x| x.1).max().unwrap_or(512);
        let mut t = Throttle::new(inner, &spec, tags, max).unwrap();
        let mut out = Outputs::with_capacity(t.outputs_max());
        let mut got = Vec::new();
        let mut pending = ios.iter().copied().enumerate().peekable();
        let mut now = 0u64;
        let collect = |out: &mut Outputs, now: u64, got: &mut Vec<(u64, u64)>| {
            while let Some(o) = out.pop() {
                if let Output::Cmd(c) = o {
                    got.push((now, u64::from(c.len_bytes)));
                }
            }
        };
        for _ in 0..1_000_000 {
            let next_io = pending.peek().map(|(_, (at, _))| *at);
            let next_timer = t.next_timer_ns();
            let next = match (next_io, next_timer) {
                (None, None) => break,
                (a, b) => a.unwrap_or(u64::MAX).min(b.unwrap_or(u64::MAX)),
            };
            now = now.max(next);
            if next_io == Some(next) {
                let (i, (_, len)) = pending.next().unwrap();
                let io = VolIo {
                    tag: i as u32,
                    op: VolOp::Write,
                    offset_bytes: 0,
                    len_bytes: len,
                    fua: false,
                };
                t.submit(
                    now,
                    io,
                    &mut Cx {
                        out: &mut out,
                        data: &mut NoData,
                    },
                );
            } else {
                t.on_timer(
                    now,
                    &mut Cx {
                        out: &mut out,
                        data: &mut NoData,
                    },
                );
            }
            // Passthrough: complete every command at once so tags are reused freely.
            let cmds: Vec<_> = out.as_slice().to_vec();
            collect(&mut out, now, &mut got);
            for o in cmds {
                if let Output::Cmd(c) = o {
                    t.member_done(
                        now,
                        CmdDone {
                            id: c.id,
                            result: CmdResult::Ok,
                        },
                        &mut Cx {
                            out: &mut out,
                            data: &mut NoData,
                        },
                    );
                }
            }
            out.clear();
        }
        got
    }

    #[test]
    fn a_burst_passes_then_writes_trickle_at_the_rate() {
        // 1 MB/s, burst 8 KiB: two 4 KiB writes pass at once, the third waits 4096 us.
        let got = admissions(
            1_000_000,
            8192,
            &[(0, 4096), (0, 4096), (0, 4096), (0, 4096)],
        );
        assert_eq!(
            got,
            vec![(0, 4096), (0, 4096), (4_096_000, 4096), (8_192_000, 4096)]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// Conformance: over every window [a, b] of admissions, bytes ≤ BURST + RATE·(b − a),
        /// and every request is admitted exactly once.
        #[test]
        fn admitted_bytes_conform_to_the_bucket(
            rate in 1_000u64..100_000_000,
            extra in 0u64..1_000_000,
            ios in proptest::collection::vec((0u64..50_000_000, 1u32..64), 1..60),
        ) {
            let mut ios: Vec<(u64, u32)> = ios.into_iter().map(|(t, l)| (t, l * 512)).collect();
            ios.sort();
            let burst = 64 * 512 + extra;
            let got = admissions(rate, burst, &ios);
            prop_assert_eq!(got.len(), ios.len());
            let total: u64 = ios.iter().map(|x| u64::from(x.1)).sum();
            prop_assert_eq!(got.iter().map(|x| x.1).sum::<u64>(), total);
            for i in 0..got.len() {
                let mut bytes = 0u128;
                for j in i..got.len() {
                    bytes += u128::from(got[j].1);
                    // Exact, in byte-nanoseconds.
                    let allowed = u128::from(burst) * NS_PER_S
                        + u128::from(rate) * u128::from(got[j].0 - got[i].0);
                    prop_assert!(bytes * NS_PER_S <= allowed, "window {}..{}: {} bytes", got[i].0, got[j].0, bytes);
                }
            }
        }
    }

    #[test]
    fn reads_pass_unless_charged_and_bad_options_are_refused() {
        let inner = || AnyVolume::Passthrough(Passthrough::new(1 << 30, 512, 4));
        let spec = |r, b, c| ThrottleSpec {
            rate_bytes_per_s: r,
            burst_bytes: b,
            read_cost_ppm: c,
        };
        assert!(Throttle::new(inner(), &spec(0, None, 0), 4, 4096).is_err());
        let e = Throttle::new(inner(), &spec(1000, Some(100), 0), 4, 4096)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("at least 4096"), "{e}");
        let mut t = Throttle::new(inner(), &spec(1000, Some(4096), 0), 4, 4096).unwrap();
        let mut out = Outputs::with_capacity(t.outputs_max());
        let w = VolIo {
            tag: 0,
            op: VolOp::Write,
            offset_bytes: 0,
            len_bytes: 4096,
            fua: false,
        };
        t.submit(
            0,
            w,
            &mut Cx {
                out: &mut out,
                data: &mut NoData,
            },
        );
        t.submit(
            0,
            VolIo { tag: 1, ..w },
            &mut Cx {
                out: &mut out,
                data: &mut NoData,
            },
        );
        // The second write waits; a read passes it.
        t.submit(
            0,
            VolIo {
                tag: 2,
                op: VolOp::Read,
                ..w
            },
            &mut Cx {
                out: &mut out,
                data: &mut NoData,
            },
        );
        assert_eq!(out.len(), 2);
        assert_eq!(t.next_timer_ns(), Some(4_096_000_000));
        // Charged reads (ReFlex: a write costs 10 reads) wait behind the held write.
        let mut t = Throttle::new(inner(), &spec(1000, Some(4096), 100_000), 4, 4096).unwrap();
        out.clear();
        t.submit(
            0,
            w,
            &mut Cx {
                out: &mut out,
                data: &mut NoData,
            },
        );
        t.submit(
            0,
            VolIo {
                tag: 1,
                op: VolOp::Read,
                ..w
            },
            &mut Cx {
                out: &mut out,
                data: &mut NoData,
            },
        );
        assert_eq!(out.len(), 1);
        assert_eq!(t.next_timer_ns(), Some(410_000_000));
    }
}
