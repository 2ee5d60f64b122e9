//! CPU-device placement plans (paper 000, Fig. 5): per device, the CPU that runs its I/O worker
//! and takes its interrupts, NUMA-local, several devices per CPU round-robin, housekeeping CPUs
//! reserved; the boot parameters that isolate the I/O CPUs; the runtime changes.

use std::collections::BTreeMap;
use std::path::Path;

use crate::host::{DevKind, Host};
use crate::parse::{format_cpulist, natural_key, parse_scheduler};

pub const PLAN_SCHEMA_NAME: &str = "nines-plan";
pub const PLAN_SCHEMA_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("cannot read plan {path}: {msg}; make one with `nines tune --plan -o FILE`")]
    Read { path: String, msg: String },
    #[error("plan {path} is not a nines plan: {msg}")]
    Format { path: String, msg: String },
    #[error(
        "plan {path} has schema version {found}; this nines reads version {PLAN_SCHEMA_VERSION}: re-run `nines tune --plan`"
    )]
    Version { path: String, found: u32 },
    #[error(
        "target `{0}` is not a block device in /sys/block: give a whole device such as nvme0n1 or /dev/zram1"
    )]
    UnknownTarget(String),
    #[error("no I/O CPUs left: --cpus and --housekeeping leave none (online: {online})")]
    NoIoCpus { online: String },
    #[error(
        "--cpus {io} leaves no housekeeping CPU (online: {online}): isolating every CPU leaves the kernel's housekeeping, unmanaged interrupts and nines' own main thread nowhere to run; keep at least one CPU out of --cpus"
    )]
    NoHousekeeping { io: String, online: String },
    #[error("CPU(s) {0} given both as I/O and as housekeeping CPUs: choose one role per CPU")]
    Overlap(String),
    #[error("CPU(s) {cpus} not online (online: {online}); pick CPUs from that list")]
    Offline { cpus: String, online: String },
    #[error(
        "no NVMe devices found to plan for: name the targets, e.g. `nines tune --plan /dev/zram0`"
    )]
    NoDevices,
}

/// One runtime change: write `value` to the host file `path`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Change {
    /// "irq_affinity", "block_queue" or "governor".
    pub kind: String,
    pub path: String,
    pub value: String,
    /// The value when the plan was made (informational; apply reads the live one again).
    pub current: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PlanDevice {
    pub name: String,
    pub path: String,
    pub numa_node: Option<i64>,
    /// The CPU that runs this device's I/O worker and takes its interrupts.
    pub cpu: usize,
    /// Whether `cpu` is on the device's NUMA node (false when the node is unknown or has no I/O CPU).
    pub numa_local: bool,
    pub irqs: Vec<u32>,
}

/// A placement plan: a versioned JSON file (`docs/arch-host.md` documents it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Plan {
    pub schema: String,
    pub schema_version: u32,
    pub io_cpus: Vec<usize>,
    pub housekeeping_cpus: Vec<usize>,
    /// Kernel command line additions that isolate the I/O CPUs (need a reboot).
    pub boot_params: String,
    pub devices: Vec<PlanDevice>,
    /// Runtime changes, applied in this order by `nines tune --apply`.
    pub changes: Vec<Change>,
    pub notes: Vec<String>,
}

/// Housekeeping CPUs by default: the lowest CPU of each NUMA node and its SMT siblings (CPU 0
/// when the host reports no nodes). If that takes every online CPU, only the very first CPU.
pub fn default_housekeeping(h: &Host) -> Vec<usize> {
    let mut hk = Vec::new();
    let firsts: Vec<usize> = if h.nodes.is_empty() {
        h.online.first().copied().into_iter().collect()
    } else {
        h.nodes
            .values()
            .filter_map(|c| c.iter().copied().find(|c| h.online.contains(c)))
            .collect()
    };
    for f in firsts {
        hk.push(f);
        if let Some(cpu) = h.cpu(f) {
            hk.extend(cpu.siblings.iter().copied());
        }
    }
    hk.sort_unstable();
    hk.dedup();
    if hk.len() >= h.online.len() {
        hk = h.online.first().copied().into_iter().collect();
    }
    hk
}

/// The block device name of a target: "/dev/nvme0n1" -> "nvme0n1".
pub fn target_name(t: &str) -> &str {
    t.strip_prefix("/dev/").unwrap_or(t)
}

/// Desired block-queue settings for low-latency flash: (file, value).
/// Why a change of `kind` to `path` with `value` is not one a plan makes (None: it is). `tune
/// --apply` writes plan files as root and `--revert` writes state files back, so a hand-edited
/// or corrupt file must not name any other file: only an interrupt's affinity, a block queue
/// setting of [`QUEUE_SETTINGS`] or a CPU's governor, with a one-line value.
pub fn change_error(kind: &str, path: &str, value: &str) -> Option<String> {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n != "."
            && n != ".."
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
    };
    let digits = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    let ok = match kind {
        "irq_affinity" => path
            .strip_prefix("/proc/irq/")
            .and_then(|r| r.strip_suffix("/smp_affinity_list"))
            .is_some_and(digits),
        "block_queue" => path
            .strip_prefix("/sys/block/")
            .and_then(|r| r.split_once("/queue/"))
            .is_some_and(|(dev, file)| {
                name_ok(dev) && QUEUE_SETTINGS.iter().any(|(f, _)| *f == file)
            }),
        "governor" => path
            .strip_prefix("/sys/devices/system/cpu/cpu")
            .and_then(|r| r.strip_suffix("/cpufreq/scaling_governor"))
            .is_some_and(digits),
        _ => return Some(format!("unknown change kind `{kind}` (for {path})")),
    };
    if !ok {
        return Some(format!(
            "{path} is not a file a `{kind}` change writes; the plan was edited or is corrupt"
        ));
    }
    if value.len() > 256 || value.contains(['\n', '\0']) {
        return Some(format!(
            "{path}: the value is not one line of at most 256 bytes"
        ));
    }
    None
}

/// The I/O and housekeeping CPUs: each as given, else the online CPUs the other leaves (the
/// default housekeeping set when neither is given). Disjoint, online and at least one I/O CPU.
fn cpu_sets(
    h: &Host,
    cpus: Option<&[usize]>,
    housekeeping: Option<&[usize]>,
) -> Result<(Vec<usize>, Vec<usize>), PlanError> {
    let hk: Vec<usize> = match housekeeping {
        Some(v) => v.to_vec(),
        None => match cpus {
            Some(io) => h
                .online
                .iter()
                .copied()
                .filter(|c| !io.contains(c))
                .collect(),
            None => default_housekeeping(h),
        },
    };
    let io: Vec<usize> = match cpus {
        Some(v) => v.to_vec(),
        None => h
            .online
            .iter()
            .copied()
            .filter(|c| !hk.contains(c))
            .collect(),
    };
    let overlap: Vec<usize> = io.iter().copied().filter(|c| hk.contains(c)).collect();
    if !overlap.is_empty() {
        return Err(PlanError::Overlap(format_cpulist(&overlap)));
    }
    let offline: Vec<usize> = io
        .iter()
        .chain(hk.iter())
        .copied()
        .filter(|c| !h.online.contains(c))
        .collect();
    if !offline.is_empty() && !h.online.is_empty() {
        return Err(PlanError::Offline {
            cpus: format_cpulist(&offline),
            online: format_cpulist(&h.online),
        });
    }
    if hk.is_empty() && !h.online.is_empty() {
        return Err(PlanError::NoHousekeeping {
            io: format_cpulist(&io),
            online: format_cpulist(&h.online),
        });
    }
    if io.is_empty() {
        return Err(PlanError::NoIoCpus {
            online: format_cpulist(&h.online),
        });
    }
    Ok((io, hk))
}

/// The devices to plan for, with the path to show: those named, else every NVMe device; in
/// natural order, each once.
fn plan_targets<'h>(
    h: &'h Host,
    targets: &[String],
) -> Result<Vec<(&'h crate::host::BlockDev, String)>, PlanError> {
    let mut devs: Vec<(&crate::host::BlockDev, String)> = Vec::new();
    if targets.is_empty() {
        let nvme: Vec<_> = h
            .devices
            .iter()
            .filter(|d| d.kind == DevKind::Nvme)
            .collect();
        // Only NVMe by default, as documented. Falling back to every other disk would plan
        // changes to the system disk (vda here) that the user never named.
        devs.extend(nvme.into_iter().map(|d| (d, format!("/dev/{}", d.name))));
    } else {
        for t in targets {
            let name = target_name(t);
            let d = h
                .device(name)
                .ok_or_else(|| PlanError::UnknownTarget(t.clone()))?;
            devs.push((d, t.clone()));
        }
    }
    if devs.is_empty() {
        return Err(PlanError::NoDevices);
    }
    devs.sort_by_key(|(d, _)| natural_key(&d.name));
    devs.dedup_by(|a, b| a.0.name == b.0.name);
    Ok(devs)
}

/// Each device's CPU: the next I/O CPU of its NUMA node, round robin, else (no I/O CPU on its
/// node, or the node unknown) the next of all I/O CPUs, with a note when that is not local.
fn place(
    h: &Host,
    io: &[usize],
    devs: &[(&crate::host::BlockDev, String)],
    notes: &mut Vec<String>,
) -> Vec<PlanDevice> {
    assert!(!io.is_empty(), "devices are placed on I/O CPUs");
    let node_of = |c: usize| h.cpu(c).and_then(|c| c.node);
    let mut pools: BTreeMap<Option<usize>, Vec<usize>> = BTreeMap::new();
    for &c in io {
        pools.entry(node_of(c)).or_default().push(c);
    }
    let mut next: BTreeMap<Option<usize>, usize> = BTreeMap::new();
    let mut any_next = 0usize;
    let mut devices = Vec::new();
    for (d, path) in devs {
        let node = d.numa_node.filter(|n| *n >= 0).map(|n| n as usize);
        let (cpu, local) = match node.and_then(|n| pools.get(&Some(n)).map(|p| (n, p))) {
            Some((n, pool)) => {
                let i = next.entry(Some(n)).or_insert(0);
                let c = pool[*i % pool.len()];
                *i += 1;
                (c, true)
            }
            None => {
                let c = io[any_next % io.len()];
                any_next += 1;
                if h.nodes.len() > 1 {
                    notes.push(format!(
                        "{}: NUMA node {} has no I/O CPU or is unknown; placed on CPU {c} (not NUMA-local)",
                        d.name,
                        d.numa_node.map(|n| n.to_string()).unwrap_or_else(|| "?".into())
                    ));
                }
                (c, h.nodes.len() <= 1)
            }
        };
        devices.push(PlanDevice {
            name: d.name.clone(),
            path: path.clone(),
            numa_node: d.numa_node,
            cpu,
            numa_local: local,
            irqs: d.irqs.iter().map(|i| i.irq).collect(),
        });
    }
    devices
}

/// A placed device's changes: its queue interrupts onto the CPUs that submit to them, its queue
/// settings to [`QUEUE_SETTINGS`] (only those that differ and that the device has).
///
/// A multi-queue device with a blk-mq map (NVMe: a queue per CPU or per group of CPUs, in
/// /sys/block/DEV/mq/N/cpu_list) completes I/O submitted on CPU c on the queue c is mapped to,
/// so each queue's interrupt goes onto its own queue's CPUs: the worker's I/O is then completed
/// on the worker's CPU, and the other queues keep serving the CPUs they serve. This is also what
/// the Linux nvme driver's kernel-managed queue interrupts already are (they refuse every move;
/// seen on QEMU's NVMe in the guest tests), so a plan for them changes nothing and applies
/// cleanly. Without a map (single-queue devices), every queue interrupt goes onto the worker's
/// CPU.
fn device_changes(
    pd: &PlanDevice,
    d: &crate::host::BlockDev,
    changes: &mut Vec<Change>,
    notes: &mut Vec<String>,
) {
    assert_eq!(pd.name, d.name, "the change is for the placed device");
    let ctrl = d.controller.as_deref();
    for irq in &d.irqs {
        // nvmeXqN is hardware context N - 1.
        let hctx_cpus = ctrl
            .and_then(|c| irq.name.strip_prefix(c))
            .and_then(|q| q.strip_prefix('q'))
            .and_then(|q| q.parse::<usize>().ok())
            .and_then(|q| q.checked_sub(1))
            .and_then(|h| d.hw_queues.iter().find(|(n, _)| *n == h))
            .map(|(_, cpus)| cpus.as_slice())
            .filter(|cpus| !cpus.is_empty());
        let want = match hctx_cpus {
            Some(cpus) => format_cpulist(cpus),
            None => pd.cpu.to_string(),
        };
        let cur = irq.smp_affinity.as_deref().map(format_cpulist);
        if cur.as_deref() != Some(want.as_str()) {
            changes.push(Change {
                kind: "irq_affinity".into(),
                path: format!("/proc/irq/{}/smp_affinity_list", irq.irq),
                value: want,
                current: cur,
            });
        }
    }
    if d.irqs.is_empty() && d.kind != DevKind::Virtual {
        notes.push(format!(
            "{}: no queue interrupts found; only its queue settings are changed",
            d.name
        ));
    }
    let q = &d.queue;
    let cur: [Option<String>; 4] = [
        q.scheduler.clone(),
        q.nomerges.map(|v| v.to_string()),
        q.rq_affinity.map(|v| v.to_string()),
        q.iostats.map(|v| v.to_string()),
    ];
    for ((file, want), cur) in QUEUE_SETTINGS.iter().zip(cur) {
        // A file the device does not have (zram has no scheduler) is left out.
        if let Some(cur) = cur
            && cur != *want
        {
            changes.push(Change {
                kind: "block_queue".into(),
                path: format!("/sys/block/{}/queue/{file}", d.name),
                value: want.to_string(),
                current: Some(cur),
            });
        }
    }
}

/// The `performance` governor on each CPU a device was placed on, where it is not already.
fn governor_changes(h: &Host, devices: &[PlanDevice], changes: &mut Vec<Change>) {
    let mut plan_cpus: Vec<usize> = devices.iter().map(|d| d.cpu).collect();
    plan_cpus.sort_unstable();
    plan_cpus.dedup();
    for &c in &plan_cpus {
        if let Some(g) = h.cpu(c).and_then(|c| c.governor.clone())
            && g != "performance"
        {
            changes.push(Change {
                kind: "governor".into(),
                path: format!("/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor"),
                value: "performance".into(),
                current: Some(g),
            });
        }
    }
}

pub const QUEUE_SETTINGS: [(&str, &str); 4] = [
    ("scheduler", "none"),
    ("nomerges", "2"),
    ("rq_affinity", "2"),
    ("iostats", "0"),
];

impl Plan {
    /// Builds a plan for `targets` (all NVMe devices, or all physical block devices, when empty).
    pub fn build(
        h: &Host,
        cpus: Option<&[usize]>,
        housekeeping: Option<&[usize]>,
        targets: &[String],
    ) -> Result<Plan, PlanError> {
        let (io, hk) = cpu_sets(h, cpus, housekeeping)?;
        let devs = plan_targets(h, targets)?;
        let mut notes = Vec::new();
        let devices = place(h, &io, &devs, &mut notes);
        let mut changes = Vec::new();
        for (pd, (d, _)) in devices.iter().zip(devs.iter()) {
            device_changes(pd, d, &mut changes, &mut notes);
        }
        governor_changes(h, &devices, &mut changes);
        let l = format_cpulist(&io);
        let boot_params =
            format!("isolcpus={l} nohz_full={l} rcu_nocbs={l} processor.max_cstate=1 idle=poll");
        if changes.iter().any(|c| c.kind == "irq_affinity") {
            notes.push(
                "kernel-managed queue interrupts (most multi-queue NVMe and virtio-blk) refuse affinity changes: \
                 apply with --skip-refused-irqs to change the rest"
                    .into(),
            );
        }
        notes.push("boot_params need a reboot and are not applied by `nines tune --apply`; idle=poll makes every CPU spin when idle".into());
        Ok(Plan {
            schema: PLAN_SCHEMA_NAME.into(),
            schema_version: PLAN_SCHEMA_VERSION,
            io_cpus: io,
            housekeeping_cpus: hk,
            boot_params,
            devices,
            changes,
            notes,
        })
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    pub fn from_json(s: &str, path: &str) -> Result<Plan, PlanError> {
        let v: serde_json::Value = serde_json::from_str(s).map_err(|e| PlanError::Format {
            path: path.into(),
            msg: e.to_string(),
        })?;
        if v.get("schema").and_then(|s| s.as_str()) != Some(PLAN_SCHEMA_NAME) {
            return Err(PlanError::Format {
                path: path.into(),
                msg: format!("`schema` is not \"{PLAN_SCHEMA_NAME}\""),
            });
        }
        let ver = v
            .get("schema_version")
            .and_then(|s| s.as_u64())
            .unwrap_or(0) as u32;
        if ver != PLAN_SCHEMA_VERSION {
            return Err(PlanError::Version {
                path: path.into(),
                found: ver,
            });
        }
        let plan: Plan = serde_json::from_value(v).map_err(|e| PlanError::Format {
            path: path.into(),
            msg: e.to_string(),
        })?;
        for c in &plan.changes {
            if let Some(msg) = change_error(&c.kind, &c.path, &c.value) {
                return Err(PlanError::Format {
                    path: path.into(),
                    msg,
                });
            }
        }
        Ok(plan)
    }

    pub fn load(path: &Path) -> Result<Plan, PlanError> {
        let p = path.display().to_string();
        let s = nines_core::input::read_to_string(path, nines_core::input::SETTINGS_MAX_BYTES)
            .map_err(|e| PlanError::Read {
                path: p.clone(),
                msg: e.to_string(),
            })?;
        Plan::from_json(&s, &p)
    }

    /// The CPU for a target given as a path ("/dev/nvme0n1") or a device name ("nvme0n1").
    pub fn cpu_for(&self, target: &str) -> Option<usize> {
        let name = target_name(target);
        let base = Path::new(target)
            .file_name()
            .and_then(|b| b.to_str())
            .unwrap_or(name);
        self.devices
            .iter()
            .find(|d| d.path == target || d.name == name || d.name == base)
            .map(|d| d.cpu)
    }

    /// Readable text: placement table, boot parameters, changes.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "I/O CPUs: {}   housekeeping CPUs: {}\n\nCPU  devices\n",
            format_cpulist(&self.io_cpus),
            format_cpulist(&self.housekeeping_cpus)
        );
        let mut by_cpu: BTreeMap<usize, Vec<&PlanDevice>> = BTreeMap::new();
        for d in &self.devices {
            by_cpu.entry(d.cpu).or_default().push(d);
        }
        for (c, ds) in by_cpu {
            let names: Vec<String> = ds
                .iter()
                .map(|d| {
                    let node = d
                        .numa_node
                        .map(|n| format!("node{n}"))
                        .unwrap_or_else(|| "node?".into());
                    format!(
                        "{} ({node}{}, {} irqs)",
                        d.name,
                        if d.numa_local { "" } else { ", REMOTE" },
                        d.irqs.len()
                    )
                })
                .collect();
            out.push_str(&format!("{c:>3}  {}\n", names.join(", ")));
        }
        out.push_str(&format!(
            "\nboot parameters (reboot needed): {}\n",
            self.boot_params
        ));
        out.push_str(&format!("\nruntime changes ({}):\n", self.changes.len()));
        for c in &self.changes {
            out.push_str(&format!(
                "  echo {} > {}   # now: {}\n",
                c.value,
                c.path,
                c.current.clone().unwrap_or_else(|| "?".into())
            ));
        }
        for n in &self.notes {
            out.push_str(&format!("note: {n}\n"));
        }
        out
    }
}

/// Normalises a value read back from a tunable so it compares with what was written:
/// the active scheduler of "none [mq-deadline]", a canonical cpulist for *_list files.
pub fn normalize_value(path: &str, raw: &str) -> String {
    let t = raw.trim();
    if path.ends_with("/scheduler") {
        parse_scheduler(t).0.unwrap_or_else(|| t.to_string())
    } else if path.ends_with("_list") {
        crate::parse::parse_cpulist(t)
            .map(|v| format_cpulist(&v))
            .unwrap_or_else(|_| t.to_string())
    } else {
        t.to_string()
    }
}
