//! Gathering the facts doctor and tune need from a host tree (live or captured), in one pass.
//!
//! Missing files are normal (a kernel without cpufreq, a VM without NUMA); they leave a field
//! empty. Malformed files leave it empty too and add a [`Problem`] that doctor turns into a finding.

use std::collections::BTreeMap;

use crate::fs::HostFs;
use crate::parse::{self, Interrupts, Limit};

/// A file that could not be used, and why (one line).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    pub path: String,
    pub msg: String,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IdleState {
    pub name: String,
    pub exit_latency_us: u64,
    pub disabled: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Cpu {
    pub id: usize,
    pub node: Option<usize>,
    pub siblings: Vec<usize>,
    pub governor: Option<String>,
    pub idle_states: Vec<IdleState>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DevKind {
    Nvme,
    Virtio,
    Scsi,
    /// loop, zram, ram, dm, md, nbd...: no hardware queues or interrupts of their own.
    Virtual,
    Other,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Queue {
    pub scheduler: Option<String>,
    pub nomerges: Option<i64>,
    pub iostats: Option<i64>,
    pub rq_affinity: Option<i64>,
    pub nr_requests: Option<i64>,
    pub io_poll: Option<i64>,
    pub write_cache: Option<String>,
    pub rotational: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Irq {
    pub irq: u32,
    pub name: String,
    pub smp_affinity: Option<Vec<usize>>,
    pub effective_affinity: Option<Vec<usize>>,
    /// Interrupts served so far, all CPUs together, from /proc/interrupts.
    pub total: u64,
    /// CPUs that have served at least one of its interrupts since boot.
    pub served_cpus: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BlockDev {
    pub name: String,
    pub kind: DevKind,
    /// The controller or virtio device ("nvme0", "virtio1").
    pub controller: Option<String>,
    pub numa_node: Option<i64>,
    pub queue: Queue,
    pub irqs: Vec<Irq>,
    /// blk-mq hardware queues: (hctx index, CPUs mapped to it) from /sys/block/<dev>/mq/N/cpu_list.
    pub hw_queues: Vec<(usize, Vec<usize>)>,
}

/// An NVMe controller as sysfs shows it (`/sys/class/nvme/nvmeN`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NvmeCtrl {
    pub name: String,
    pub model: Option<String>,
    pub firmware: Option<String>,
    pub serial: Option<String>,
    /// `power/pm_qos_latency_tolerance_us`: the driver exposes it only for a controller it
    /// enabled APST on; its value ("auto", "any" or microseconds, 0 = off) bounds the exit
    /// latency of the power states APST may enter.
    pub apst_latency_tolerance: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Proc {
    pub pid: u32,
    pub comm: String,
    /// Arguments, NUL-separated in /proc, joined by spaces; only read for processes doctor cares about.
    pub args: Option<String>,
}

/// Everything doctor and tune read, with the path of each source for evidence.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Host {
    pub cmdline: Option<Vec<(String, Option<String>)>>,
    pub online: Vec<usize>,
    pub isolated: Option<Vec<usize>>,
    pub nohz_full: Option<Vec<usize>>,
    pub cpus: Vec<Cpu>,
    pub cpufreq_present: bool,
    pub nodes: BTreeMap<usize, Vec<usize>>,
    pub devices: Vec<BlockDev>,
    pub interrupts: Option<Interrupts>,
    pub poll_queues: Option<i64>,
    /// NVMe controllers (`/sys/class/nvme`), in natural order.
    pub nvme_controllers: Vec<NvmeCtrl>,
    /// `nvme_core.default_ps_max_latency_us`: APST's exit-latency bound for new controllers
    /// (0: APST off).
    pub apst_max_latency_us: Option<i64>,
    /// The nvme_core parameters of its APST policy (`default_ps_max_latency_us`,
    /// `apst_primary_timeout_ms`, `apst_primary_latency_tol_us`, `apst_secondary_timeout_ms`,
    /// `apst_secondary_latency_tol_us`) that this kernel has, by name.
    pub apst_parameters: BTreeMap<String, i64>,
    pub procs: Vec<Proc>,
    pub smartd_conf: Option<(String, String)>,
    pub smartd_default_opts: Option<(String, String)>,
    pub tuned_profile: Option<String>,
    pub limits: Option<BTreeMap<String, Limit>>,
    pub cap_eff: Option<u64>,
    pub sched_rt_runtime_us: Option<i64>,
    pub problems: Vec<Problem>,
    /// Optional sources that were absent (informational).
    pub missing: Vec<String>,
}

/// nvme_core's APST parameters (drivers/nvme/host/core.c), in the kernel's order.
pub const APST_PARAMETERS: [&str; 5] = [
    "default_ps_max_latency_us",
    "apst_primary_timeout_ms",
    "apst_primary_latency_tol_us",
    "apst_secondary_timeout_ms",
    "apst_secondary_latency_tol_us",
];

/// Processes whose arguments doctor reads (housekeeping and interrupt balancing).
pub const WATCHED_COMMS: [&str; 10] = [
    "irqbalance",
    "smartd",
    "smartctl",
    "udisksd",
    "tuned",
    "nvme",
    "collectd",
    "telegraf",
    "node_exporter",
    "storaged",
];

/// Bound on the number of processes scanned.
pub const PROCS_MAX: usize = 1 << 20;

impl Host {
    /// Reads the host under `fs`. Never fails: what cannot be read is recorded in
    /// `problems` (malformed) or `missing` (absent).
    pub fn read(fs: &HostFs) -> Host {
        let mut h = Host::default();
        h.read_cpus(fs);
        h.read_irqs_and_devices(fs);
        h.read_nvme_controllers(fs);
        h.read_housekeeping(fs);
        h.read_process(fs);
        h
    }

    fn problem(&mut self, path: &str, msg: impl std::fmt::Display) {
        self.problems.push(Problem {
            path: path.to_string(),
            msg: msg.to_string(),
        });
    }

    /// Reads an optional file; a read error other than "not found" is a problem.
    fn opt(&mut self, fs: &HostFs, path: &str) -> Option<String> {
        match fs.read_opt(path) {
            Ok(Some(s)) => Some(s),
            Ok(None) => {
                self.missing.push(path.to_string());
                None
            }
            Err(e) => {
                self.problem(path, e);
                None
            }
        }
    }

    fn opt_cpulist(&mut self, fs: &HostFs, path: &str) -> Option<Vec<usize>> {
        let s = self.opt(fs, path)?;
        match parse::parse_cpulist(&s) {
            Ok(v) => Some(v),
            Err(e) => {
                self.problem(path, e);
                None
            }
        }
    }

    fn opt_int(&mut self, fs: &HostFs, path: &str) -> Option<i64> {
        let s = self.opt(fs, path)?;
        match parse::parse_i64(&s, "value") {
            Ok(v) => Some(v),
            Err(e) => {
                self.problem(path, e);
                None
            }
        }
    }

    fn opt_value(&mut self, fs: &HostFs, path: &str) -> Option<String> {
        self.opt(fs, path).map(|s| s.trim().to_string())
    }

    fn read_cpus(&mut self, fs: &HostFs) {
        if let Some(s) = self.opt(fs, "/proc/cmdline") {
            self.cmdline = Some(parse::parse_cmdline(&s));
        }
        self.online = self
            .opt_cpulist(fs, "/sys/devices/system/cpu/online")
            .unwrap_or_default();
        self.isolated = self.opt_cpulist(fs, "/sys/devices/system/cpu/isolated");
        self.nohz_full = self.opt_cpulist(fs, "/sys/devices/system/cpu/nohz_full");
        if let Ok(names) = fs.list("/sys/devices/system/node") {
            for n in names {
                let Some(id) = n.strip_prefix("node").and_then(|i| i.parse::<usize>().ok()) else {
                    continue;
                };
                if let Some(cpus) =
                    self.opt_cpulist(fs, &format!("/sys/devices/system/node/{n}/cpulist"))
                {
                    self.nodes.insert(id, cpus);
                }
            }
        }
        let online = self.online.clone();
        for &c in &online {
            let base = format!("/sys/devices/system/cpu/cpu{c}");
            let node = self
                .nodes
                .iter()
                .find(|(_, cpus)| cpus.contains(&c))
                .map(|(n, _)| *n);
            let siblings = self
                .opt_cpulist(fs, &format!("{base}/topology/thread_siblings_list"))
                .unwrap_or_else(|| vec![c]);
            let governor = self.opt_value(fs, &format!("{base}/cpufreq/scaling_governor"));
            self.cpufreq_present |= governor.is_some();
            let mut idle_states = Vec::new();
            if let Ok(states) = fs.list(&format!("{base}/cpuidle")) {
                for st in states.iter().filter(|s| s.starts_with("state")) {
                    let sb = format!("{base}/cpuidle/{st}");
                    let name = self
                        .opt_value(fs, &format!("{sb}/name"))
                        .unwrap_or_else(|| st.clone());
                    let lat = self.opt_int(fs, &format!("{sb}/latency"));
                    let dis = self.opt_int(fs, &format!("{sb}/disable"));
                    if let Some(lat) = lat {
                        idle_states.push(IdleState {
                            name,
                            exit_latency_us: lat.max(0) as u64,
                            disabled: dis.unwrap_or(0) != 0,
                        });
                    }
                }
            }
            self.cpus.push(Cpu {
                id: c,
                node,
                siblings,
                governor,
                idle_states,
            });
        }
    }

    fn read_irqs_and_devices(&mut self, fs: &HostFs) {
        if let Some(s) = self.opt(fs, "/proc/interrupts") {
            match parse::parse_interrupts(&s) {
                Ok(i) => self.interrupts = Some(i),
                Err(e) => self.problem("/proc/interrupts", e),
            }
        }
        self.poll_queues = if fs.exists("/sys/module/nvme") {
            self.opt_int(fs, "/sys/module/nvme/parameters/poll_queues")
        } else {
            None
        };
        // virtio block devices: /sys/bus/virtio/devices/virtioN/block/<name>.
        let mut virtio_of: BTreeMap<String, String> = BTreeMap::new();
        if let Ok(vdevs) = fs.list("/sys/bus/virtio/devices") {
            for v in vdevs {
                if let Ok(blocks) = fs.list(&format!("/sys/bus/virtio/devices/{v}/block")) {
                    for b in blocks {
                        virtio_of.insert(b, v.clone());
                    }
                }
            }
        }
        let names = match fs.list("/sys/block") {
            Ok(n) => n,
            Err(e) => {
                self.problem("/sys/block", e);
                Vec::new()
            }
        };
        let mut names = names;
        names.sort_by_key(|n| parse::natural_key(n));
        for name in names {
            let dev = self.read_device(fs, &name, virtio_of.get(&name).cloned());
            self.devices.push(dev);
        }
    }

    fn read_device(&mut self, fs: &HostFs, name: &str, virtio: Option<String>) -> BlockDev {
        let kind = dev_kind(name, virtio.is_some());
        let controller = match kind {
            DevKind::Nvme => nvme_controller(name),
            DevKind::Virtio => virtio,
            _ => None,
        };
        let q = format!("/sys/block/{name}/queue");
        let mut queue = Queue::default();
        if let Some(s) = self.opt(fs, &format!("{q}/scheduler")) {
            queue.scheduler = parse::parse_scheduler(&s).0;
        }
        queue.nomerges = self.opt_int(fs, &format!("{q}/nomerges"));
        queue.iostats = self.opt_int(fs, &format!("{q}/iostats"));
        queue.rq_affinity = self.opt_int(fs, &format!("{q}/rq_affinity"));
        queue.nr_requests = self.opt_int(fs, &format!("{q}/nr_requests"));
        queue.io_poll = self.opt_int(fs, &format!("{q}/io_poll"));
        queue.write_cache = self.opt_value(fs, &format!("{q}/write_cache"));
        queue.rotational = self.opt_int(fs, &format!("{q}/rotational"));
        let mut numa_node = None;
        if kind != DevKind::Virtual {
            for p in [
                format!("/sys/block/{name}/device/numa_node"),
                format!("/sys/block/{name}/device/device/numa_node"),
            ] {
                if fs.exists(&p) {
                    numa_node = self.opt_int(fs, &p);
                    break;
                }
            }
        }
        let mut irq_nums = Vec::new();
        if kind == DevKind::Nvme
            && let Ok(msi) = fs.list(&format!("/sys/block/{name}/device/device/msi_irqs"))
        {
            irq_nums.extend(msi.iter().filter_map(|m| m.parse::<u32>().ok()));
        }
        if let (Some(ints), Some(ctrl)) = (&self.interrupts, &controller) {
            for row in &ints.rows {
                if let Some(n) = row.irq
                    && row.actions.iter().any(|a| is_queue_irq(a, ctrl))
                {
                    irq_nums.push(n);
                }
            }
        }
        irq_nums.sort_unstable();
        irq_nums.dedup();
        let mut irqs = Vec::new();
        for n in irq_nums {
            let row = self.interrupts.as_ref().and_then(|i| i.row(n)).cloned();
            let Some(row) = row else { continue };
            // The admin queue (nvmeXq0) and virtio config vectors are not I/O queues.
            let qname = row
                .actions
                .iter()
                .find(|a| controller.as_deref().is_some_and(|c| is_queue_irq(a, c)));
            let Some(qname) = qname.cloned() else {
                continue;
            };
            let smp = self.opt_cpulist(fs, &format!("/proc/irq/{n}/smp_affinity_list"));
            let eff = self.opt_cpulist(fs, &format!("/proc/irq/{n}/effective_affinity_list"));
            irqs.push(Irq {
                irq: n,
                name: qname,
                smp_affinity: smp,
                effective_affinity: eff,
                total: row.counts.iter().sum(),
                served_cpus: served_cpus(
                    self.interrupts
                        .as_ref()
                        .map(|i| i.cpus.as_slice())
                        .unwrap_or(&[]),
                    &row.counts,
                ),
            });
        }
        let mut hw_queues = Vec::new();
        if kind == DevKind::Nvme
            && let Ok(hctxs) = fs.list(&format!("/sys/block/{name}/mq"))
        {
            for hctx in hctxs.iter().filter_map(|h| h.parse::<usize>().ok()) {
                if let Some(cpus) =
                    self.opt_cpulist(fs, &format!("/sys/block/{name}/mq/{hctx}/cpu_list"))
                {
                    hw_queues.push((hctx, cpus));
                }
            }
            hw_queues.sort();
        }
        BlockDev {
            name: name.to_string(),
            kind,
            controller,
            numa_node,
            queue,
            irqs,
            hw_queues,
        }
    }

    /// Each NVMe controller's identity and APST state, and the APST default (only where the
    /// nvme driver is there: nothing is missing on a host without NVMe).
    fn read_nvme_controllers(&mut self, fs: &HostFs) {
        if fs.exists("/sys/module/nvme_core") {
            self.apst_max_latency_us = self.opt_int(
                fs,
                "/sys/module/nvme_core/parameters/default_ps_max_latency_us",
            );
            for name in APST_PARAMETERS {
                let path = format!("/sys/module/nvme_core/parameters/{name}");
                // Kernels before the 2021 rework have only the first.
                if fs.exists(&path)
                    && let Some(v) = self.opt_int(fs, &path)
                {
                    self.apst_parameters.insert(name.to_string(), v);
                }
            }
        }
        if !fs.exists("/sys/class/nvme") {
            return;
        }
        let mut names = match fs.list("/sys/class/nvme") {
            Ok(n) => n,
            Err(e) => {
                self.problem("/sys/class/nvme", e);
                return;
            }
        };
        names.retain(|n| {
            n.strip_prefix("nvme")
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        });
        names.sort_by_key(|n| parse::natural_key(n));
        for name in names {
            let dir = format!("/sys/class/nvme/{name}");
            let tolerance = format!("{dir}/power/pm_qos_latency_tolerance_us");
            let ctrl = NvmeCtrl {
                model: self.opt_value(fs, &format!("{dir}/model")),
                firmware: self.opt_value(fs, &format!("{dir}/firmware_rev")),
                serial: self.opt_value(fs, &format!("{dir}/serial")),
                apst_latency_tolerance: fs
                    .exists(&tolerance)
                    .then(|| self.opt_value(fs, &tolerance))
                    .flatten(),
                name,
            };
            self.nvme_controllers.push(ctrl);
        }
    }

    fn read_housekeeping(&mut self, fs: &HostFs) {
        let pids: Vec<u32> =
            match fs.list_matching("/proc", |n| n.bytes().all(|b| b.is_ascii_digit())) {
                Ok(n) => n.iter().filter_map(|p| p.parse().ok()).collect(),
                Err(e) => {
                    self.problem("/proc", e);
                    Vec::new()
                }
            };
        for pid in pids.into_iter().take(PROCS_MAX) {
            // Processes come and go: a vanished one is not a problem.
            let Ok(comm) = fs.read_value(&format!("/proc/{pid}/comm")) else {
                continue;
            };
            let args = if WATCHED_COMMS.contains(&comm.as_str()) {
                fs.read(&format!("/proc/{pid}/cmdline")).ok().map(|s| {
                    s.split('\0')
                        .filter(|a| !a.is_empty())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
            } else {
                None
            };
            self.procs.push(Proc { pid, comm, args });
        }
        for p in ["/etc/smartd.conf", "/etc/smartmontools/smartd.conf"] {
            if let Ok(Some(s)) = fs.read_opt(p) {
                self.smartd_conf = Some((p.to_string(), s));
                break;
            }
        }
        for p in ["/etc/default/smartmontools", "/etc/sysconfig/smartmontools"] {
            if let Ok(Some(s)) = fs.read_opt(p) {
                self.smartd_default_opts = Some((p.to_string(), s));
                break;
            }
        }
        if let Ok(Some(s)) = fs.read_opt("/etc/tuned/active_profile") {
            let s = s.trim().to_string();
            if !s.is_empty() {
                self.tuned_profile = Some(s);
            }
        }
    }

    fn read_process(&mut self, fs: &HostFs) {
        if let Some(s) = self.opt(fs, "/proc/self/limits") {
            match parse::parse_limits(&s) {
                Ok(l) => self.limits = Some(l),
                Err(e) => self.problem("/proc/self/limits", e),
            }
        }
        if let Some(s) = self.opt(fs, "/proc/self/status") {
            match parse::parse_status_caps(&s, "CapEff") {
                Ok(c) => self.cap_eff = Some(c),
                Err(e) => self.problem("/proc/self/status", e),
            }
        }
        self.sched_rt_runtime_us = self.opt_int(fs, "/proc/sys/kernel/sched_rt_runtime_us");
    }

    pub fn device(&self, name: &str) -> Option<&BlockDev> {
        self.devices.iter().find(|d| d.name == name)
    }

    /// The queue interrupt that completes I/O submitted on `cpu` to NVMe device `d`: blk-mq maps
    /// the CPU to hardware context N (mq/N/cpu_list), served by handler nvmeXq(N+1).
    pub fn irq_for_cpu<'a>(&self, d: &'a BlockDev, cpu: usize) -> Option<&'a Irq> {
        let ctrl = d.controller.as_deref()?;
        let (hctx, _) = d.hw_queues.iter().find(|(_, cpus)| cpus.contains(&cpu))?;
        let name = format!("{ctrl}q{}", hctx + 1);
        d.irqs.iter().find(|i| i.name == name)
    }

    pub fn cpu(&self, id: usize) -> Option<&Cpu> {
        self.cpus.iter().find(|c| c.id == id)
    }

    pub fn running(&self, comm: &str) -> Vec<&Proc> {
        self.procs.iter().filter(|p| p.comm == comm).collect()
    }

    /// The value of a kernel boot parameter (`Some(None)` when present without a value).
    pub fn cmdline_param(&self, key: &str) -> Option<Option<&str>> {
        self.cmdline
            .as_ref()?
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_deref())
    }
}

fn served_cpus(cpus: &[usize], counts: &[u64]) -> Vec<usize> {
    cpus.iter()
        .zip(counts)
        .filter(|(_, n)| **n > 0)
        .map(|(c, _)| *c)
        .collect()
}

fn dev_kind(name: &str, virtio: bool) -> DevKind {
    if virtio {
        DevKind::Virtio
    } else if nvme_controller(name).is_some() {
        DevKind::Nvme
    } else if ["loop", "zram", "ram", "dm-", "md", "nbd", "sr", "fd"]
        .iter()
        .any(|p| name.starts_with(p))
    {
        DevKind::Virtual
    } else if name.starts_with("sd") {
        DevKind::Scsi
    } else {
        DevKind::Other
    }
}

/// "nvme3n1" / "nvme3c0n1" -> "nvme3".
pub fn nvme_controller(name: &str) -> Option<String> {
    let rest = name.strip_prefix("nvme")?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let after = &rest[digits.len()..];
    if digits.is_empty() || !(after.starts_with('n') || after.starts_with('c')) {
        return None;
    }
    Some(format!("nvme{digits}"))
}

/// Whether an interrupt handler name is an I/O queue of controller `ctrl`: "nvme0q3" (not the
/// admin queue q0) or "virtio1-req.0" / "virtio1-request".
pub fn is_queue_irq(action: &str, ctrl: &str) -> bool {
    let Some(rest) = action.strip_prefix(ctrl) else {
        return false;
    };
    if ctrl.starts_with("nvme") {
        rest.strip_prefix('q')
            .and_then(|q| q.parse::<u32>().ok())
            .is_some_and(|q| q > 0)
    } else {
        rest.starts_with("-req")
    }
}
