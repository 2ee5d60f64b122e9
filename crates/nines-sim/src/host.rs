//! The host model: CPU cost of submitting and completing each I/O, interrupt vs polled
//! completion, a number of host CPUs shared by the I/O workers, and optional background tasks
//! that delay the workers on the CPUs they share.
//!
//! Each CPU is a first-come-first-served timeline. A worker's submission and completion work
//! queue on its CPU; background tasks (Poisson arrivals, exponential or fixed service) take the
//! CPU when they arrive and are not preempted. With polled completion the worker spins from
//! submission until its I/O completes, holding the CPU (paper 002: polling occupies a core),
//! so background tasks and other workers on that CPU wait.

use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};

/// How completions reach the worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompletionMode {
    /// Interrupt-driven: the device raises an interrupt; the worker is woken.
    Interrupt,
    /// Polled: the worker spins on the completion queue.
    Polled,
    /// No host costs at all: latencies are the devices' alone.
    None,
}

impl std::str::FromStr for CompletionMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "interrupt" => Ok(CompletionMode::Interrupt),
            "polled" | "poll" => Ok(CompletionMode::Polled),
            "none" => Ok(CompletionMode::None),
            _ => Err(format!(
                "unknown completion mode `{s}`; use interrupt, polled or none"
            )),
        }
    }
}

impl CompletionMode {
    pub fn name(self) -> &'static str {
        match self {
            CompletionMode::Interrupt => "interrupt",
            CompletionMode::Polled => "polled",
            CompletionMode::None => "none",
        }
    }

    /// Default CPU costs (submission, completion) in ns. Paper 002 measured a 4 KiB read on the
    /// Z-SSD at 14.7 us with interrupts and 13.6 us with polling; the 1.1 us difference is the
    /// interrupt delivery and context switch that polling avoids. Split as 1.5 us to submit and
    /// 2.5 / 1.4 us to complete (the z-ssd preset's device time, 10.7 us, makes up the rest).
    pub fn default_costs_ns(self) -> (u64, u64) {
        match self {
            CompletionMode::Interrupt => (1_500, 2_500),
            CompletionMode::Polled => (1_500, 1_400),
            CompletionMode::None => (0, 0),
        }
    }
}

/// Service-time distribution of background tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceDist {
    Fixed,
    Exponential,
}

impl std::str::FromStr for ServiceDist {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fixed" => Ok(ServiceDist::Fixed),
            "exp" | "exponential" => Ok(ServiceDist::Exponential),
            _ => Err(format!(
                "unknown service distribution `{s}`; use fixed or exponential"
            )),
        }
    }
}

/// Background interference: tasks arriving at random on every host CPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Background {
    /// Task arrivals per second, per CPU (Poisson).
    pub rate_per_s: f64,
    /// Mean service time of a task.
    pub service_ns: u64,
    pub dist: ServiceDist,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostConfig {
    pub completion: CompletionMode,
    /// CPU time to submit one I/O.
    pub submit_ns: u64,
    /// CPU time to complete one I/O.
    pub complete_ns: u64,
    /// Host CPUs; workers are placed round robin (worker i on CPU i mod cpus). None: one per
    /// worker.
    pub cpus: Option<u32>,
    pub background: Option<Background>,
    /// The kernel's APST policy: which power states of a device described by its
    /// descriptors (`[[power.descriptors]]`) it enters, and after how long.
    #[serde(default)]
    pub apst: crate::apst::ApstPolicy,
}

impl HostConfig {
    pub fn new(completion: CompletionMode) -> HostConfig {
        let (submit_ns, complete_ns) = completion.default_costs_ns();
        HostConfig {
            completion,
            submit_ns,
            complete_ns,
            cpus: None,
            background: None,
            apst: crate::apst::ApstPolicy::default(),
        }
    }
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig::new(CompletionMode::Interrupt)
    }
}

/// The host's CPUs over simulated time.
#[derive(Clone, Debug)]
pub struct Host {
    cfg: HostConfig,
    cpu_free: Vec<u64>,
    bg_next: Vec<u64>,
    bg_period_ns: f64,
    rng: Xoshiro256PlusPlus,
    /// Background tasks run, and CPU time they took.
    pub bg_tasks: u64,
    pub bg_busy_ns: u64,
    /// I/O work that had to wait for a busy CPU, and how long in total.
    pub cpu_waits: u64,
    pub cpu_wait_ns: u64,
}

fn exp_ns(rng: &mut Xoshiro256PlusPlus, mean: f64) -> u64 {
    let u = ((rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
    (-u.ln() * mean).round() as u64
}

impl Host {
    pub fn new(cfg: &HostConfig, cpus: u32, seed: u64) -> Host {
        let cpus = cpus.max(1) as usize;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x6057_cafe_0000_0002);
        let (bg_next, bg_period_ns) = match &cfg.background {
            Some(b) if b.rate_per_s > 0.0 => {
                let period = 1e9 / b.rate_per_s;
                (
                    (0..cpus).map(|_| exp_ns(&mut rng, period)).collect(),
                    period,
                )
            }
            _ => (vec![u64::MAX; cpus], 0.0),
        };
        Host {
            cfg: cfg.clone(),
            cpu_free: vec![0; cpus],
            bg_next,
            bg_period_ns,
            rng,
            bg_tasks: 0,
            bg_busy_ns: 0,
            cpu_waits: 0,
            cpu_wait_ns: 0,
        }
    }

    pub fn cpus(&self) -> u32 {
        self.cpu_free.len() as u32
    }

    pub fn completion(&self) -> CompletionMode {
        self.cfg.completion
    }

    /// Run the background tasks that arrived on `cpu` by `t`.
    #[inline]
    fn background_until(&mut self, cpu: usize, t: u64) {
        let Some(b) = &self.cfg.background else {
            return;
        };
        let (service, dist) = (b.service_ns, b.dist);
        // Bounded: each iteration moves bg_next forward by a positive gap (at least 1 ns).
        while self.bg_next[cpu] <= t {
            let arrive = self.bg_next[cpu];
            let s = match dist {
                ServiceDist::Fixed => service,
                ServiceDist::Exponential => exp_ns(&mut self.rng, service as f64),
            };
            self.cpu_free[cpu] = self.cpu_free[cpu].max(arrive) + s;
            self.bg_tasks += 1;
            self.bg_busy_ns += s;
            self.bg_next[cpu] = arrive + exp_ns(&mut self.rng, self.bg_period_ns).max(1);
        }
    }

    #[inline]
    fn run(&mut self, cpu: usize, t: u64, cost: u64) -> u64 {
        self.background_until(cpu, t);
        let start = t.max(self.cpu_free[cpu]);
        if start > t {
            self.cpu_waits += 1;
            self.cpu_wait_ns += start - t;
        }
        self.cpu_free[cpu] = start + cost;
        start + cost
    }

    /// A worker on `cpu` submits at `t`: returns when the command reaches the device.
    #[inline]
    pub fn submit(&mut self, cpu: u32, t: u64) -> u64 {
        if self.cfg.completion == CompletionMode::None {
            return t;
        }
        self.run(cpu as usize, t, self.cfg.submit_ns)
    }

    /// After a submission: with polling, the worker spins until `device_done`.
    #[inline]
    pub fn hold_until(&mut self, cpu: u32, device_done: u64) {
        if self.cfg.completion == CompletionMode::Polled {
            let c = cpu as usize;
            self.cpu_free[c] = self.cpu_free[c].max(device_done);
        }
    }

    /// The device completed at `t`: returns when the worker has the completion.
    #[inline]
    pub fn complete(&mut self, cpu: u32, t: u64) -> u64 {
        match self.cfg.completion {
            CompletionMode::None => t,
            CompletionMode::Interrupt => self.run(cpu as usize, t, self.cfg.complete_ns),
            CompletionMode::Polled => {
                // The spinning worker holds the CPU: it sees the completion first, and
                // background tasks that arrived meanwhile run after it.
                let c = cpu as usize;
                let end = t.max(self.cpu_free[c]) + self.cfg.complete_ns;
                self.cpu_free[c] = end;
                self.background_until(c, end);
                end
            }
        }
    }
}
