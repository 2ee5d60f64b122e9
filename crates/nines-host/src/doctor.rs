//! Findings: what on a host lengthens the latency tail, the evidence, and the fix.
//!
//! `analyze` is pure: it only looks at a [`Host`] read before, so findings from a live host and
//! from its capture are the same by construction.

use std::path::Path;

use crate::fs::HostFs;
use crate::host::{DevKind, Host};
use crate::parse::format_cpulist;
use crate::plan;

pub const DOCTOR_SCHEMA_NAME: &str = "nines-doctor";
pub const DOCTOR_SCHEMA_VERSION: u32 = 1;

/// Idle states whose exit latency is above this are a tail risk (a wakeup costs more than a
/// 10 µs device read).
pub const IDLE_EXIT_LATENCY_US_MAX: u64 = 10;
/// Below this, io_uring's registered buffers and a per-I/O log may not fit in locked memory.
pub const MEMLOCK_BYTES_MIN: u64 = 64 << 20;
const CAP_SYS_NICE: u32 = 23;
const CAP_IPC_LOCK: u32 = 14;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warn,
    Critical,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Critical => "critical",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Evidence {
    pub path: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Finding {
    /// Stable identifier ("irq.irqbalance", "block.scheduler").
    pub id: String,
    pub severity: Severity,
    /// What the finding is about: "host", a CPU list, a device name.
    pub subject: String,
    /// One line.
    pub title: String,
    pub evidence: Vec<Evidence>,
    /// Why it matters for tail latency.
    pub why: String,
    /// The exact fix: commands or boot parameters. Empty for purely informational findings.
    pub fix: String,
}

/// The versioned JSON document of `nines doctor --json`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DoctorReport {
    pub schema: String,
    pub schema_version: u32,
    pub root: String,
    pub counts: Counts,
    pub findings: Vec<Finding>,
    /// Optional files that were absent (not an error: e.g. no cpufreq in a VM).
    pub missing: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counts {
    pub critical: usize,
    pub warn: usize,
    pub info: usize,
}

impl DoctorReport {
    pub fn new(root: &Path, host: &Host) -> Self {
        let findings = analyze(host);
        let mut counts = Counts::default();
        for f in &findings {
            match f.severity {
                Severity::Critical => counts.critical += 1,
                Severity::Warn => counts.warn += 1,
                Severity::Info => counts.info += 1,
            }
        }
        DoctorReport {
            schema: DOCTOR_SCHEMA_NAME.to_string(),
            schema_version: DOCTOR_SCHEMA_VERSION,
            root: root.display().to_string(),
            counts,
            findings,
            missing: host.missing.clone(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// Readable text: one block per finding, most severe first. Per-device findings with the
    /// same id, severity and reason are shown once, followed by the other devices' names
    /// (`--json` has each one in full).
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "nines doctor ({}): {} critical, {} warn, {} info\n",
            self.root, self.counts.critical, self.counts.warn, self.counts.info
        );
        let per_device = |f: &Finding| {
            f.id.starts_with("block.") || f.id.starts_with("irq.") && f.id != "irq.irqbalance"
        };
        let mut shown = vec![false; self.findings.len()];
        for (i, f) in self.findings.iter().enumerate() {
            if shown[i] {
                continue;
            }
            shown[i] = true;
            let mut same = Vec::new();
            if per_device(f) {
                for (j, g) in self.findings.iter().enumerate().skip(i + 1) {
                    if !shown[j] && g.id == f.id && g.severity == f.severity && g.why == f.why {
                        shown[j] = true;
                        same.push(g.subject.as_str());
                    }
                }
            }
            out.push_str(&format!(
                "\n[{}] {} ({}): {}\n",
                f.severity.name().to_uppercase(),
                f.id,
                f.subject,
                f.title
            ));
            for e in &f.evidence {
                out.push_str(&format!("    evidence: {} = {}\n", e.path, e.value));
            }
            out.push_str(&format!("    why: {}\n", f.why));
            if !f.fix.is_empty() {
                for (k, line) in f.fix.lines().enumerate() {
                    out.push_str(if k == 0 { "    fix: " } else { "         " });
                    out.push_str(line);
                    out.push('\n');
                }
            }
            if !same.is_empty() {
                const NAMES_MAX: usize = 12;
                let mut names = same
                    .iter()
                    .take(NAMES_MAX)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ");
                if same.len() > NAMES_MAX {
                    names.push_str(", ...");
                }
                out.push_str(&format!(
                    "    same for {} more: {names} (each in full with --json)\n",
                    same.len()
                ));
            }
        }
        out
    }
}

/// Reads the host under `root` and summarises the findings for a report's `host` field:
/// counts by severity and the critical and warn findings' one-line titles.
pub fn doctor_summary(root: &Path) -> serde_json::Value {
    let fs = HostFs::new(root);
    let host = Host::read(&fs);
    let rep = DoctorReport::new(root, &host);
    let titles: Vec<String> = rep
        .findings
        .iter()
        .filter(|f| f.severity >= Severity::Warn)
        .map(|f| format!("{}: {} ({})", f.severity.name(), f.title, f.subject))
        .collect();
    serde_json::json!({
        "schema": DOCTOR_SCHEMA_NAME,
        "schema_version": DOCTOR_SCHEMA_VERSION,
        "root": root.display().to_string(),
        "counts": rep.counts,
        "findings": titles,
        // The nvme driver's APST parameters: a replay can run under the same policy
        // (`nines sim --apst RUN.json`).
        "apst": host.apst_parameters,
    })
}

struct Out(Vec<Finding>);

impl Out {
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        id: &str,
        sev: Severity,
        subject: &str,
        title: String,
        ev: Vec<(String, String)>,
        why: &str,
        fix: String,
    ) {
        self.0.push(Finding {
            id: id.to_string(),
            severity: sev,
            subject: subject.to_string(),
            title,
            evidence: ev
                .into_iter()
                .map(|(path, value)| Evidence { path, value })
                .collect(),
            why: why.to_string(),
            fix,
        });
    }
}

fn ev(path: impl Into<String>, value: impl Into<String>) -> (String, String) {
    (path.into(), value.into())
}

/// All findings for a host, most severe first (stable order within a severity).
pub fn analyze(h: &Host) -> Vec<Finding> {
    let mut o = Out(Vec::new());
    for p in &h.problems {
        o.add(
            "input.unreadable",
            Severity::Warn,
            &p.path,
            format!("could not use {}", p.path),
            vec![ev(&p.path, &p.msg)],
            "doctor cannot check the settings this file holds, so a tail risk there may go unreported",
            format!("check that {} is readable and in the kernel's format (re-run as root, or re-capture)", p.path),
        );
    }
    cpus(h, &mut o);
    irqs(h, &mut o);
    block(h, &mut o);
    apst_policy(h, &mut o);
    nvme_controllers(h, &mut o);
    housekeeping(h, &mut o);
    process(h, &mut o);
    let mut v = o.0;
    v.sort_by_key(|f| std::cmp::Reverse(f.severity));
    v
}

fn cpus(h: &Host, o: &mut Out) {
    let iso = h.isolated.clone().unwrap_or_default();
    if iso.is_empty() {
        cpu_not_isolated(h, o);
    } else {
        cpu_isolated(h, o, &iso);
    }
    cpu_governor(h, o, &iso);
    cpu_idle(h, o);
    cpu_topology(h, o, &iso);
}

/// The kernel command line as evidence.
fn cmdline_ev(h: &Host) -> (String, String) {
    let cmd = h.cmdline.as_ref().map(|c| {
        c.iter()
            .map(|(k, v)| match v {
                Some(v) => format!("{k}={v}"),
                None => k.clone(),
            })
            .collect::<Vec<_>>()
            .join(" ")
    });
    ev(
        "/proc/cmdline",
        cmd.unwrap_or_else(|| "(unreadable)".into()),
    )
}

/// No CPU is isolated: the command line that isolates every CPU but the housekeeping ones.
fn cpu_not_isolated(h: &Host, o: &mut Out) {
    let hk = plan::default_housekeeping(h);
    let io_cpus: Vec<usize> = h
        .online
        .iter()
        .copied()
        .filter(|c| !hk.contains(c))
        .collect();
    let io_list = format_cpulist(&io_cpus);
    o.add(
        "cpu.isolation",
        Severity::Warn,
        "host",
        "no CPUs are isolated for I/O workers".into(),
        vec![ev("/sys/devices/system/cpu/isolated", "(empty)"), cmdline_ev(h)],
        "the scheduler puts other tasks, kernel threads and timer ticks on the CPUs that run I/O workers; \
         each preemption adds its duration to an I/O's latency (Jin et al., ISPASS\'18 §IV-C: isolation shrinks the spread of the worst case)",
        if io_cpus.is_empty() {
            "add more CPUs: every online CPU is needed for housekeeping".into()
        } else {
            format!(
                "add to the kernel command line and reboot: isolcpus={io_list} nohz_full={io_list} rcu_nocbs={io_list} processor.max_cstate=1 idle=poll\n\
                 (`nines tune --plan` computes the CPU list for your devices)"
            )
        },
    );
}

/// CPUs `iso` are isolated: whether they also shed the timer tick and RCU callbacks.
fn cpu_isolated(h: &Host, o: &mut Out, iso: &[usize]) {
    assert!(
        !iso.is_empty(),
        "only isolated CPUs are checked for tick and RCU"
    );
    let iso_list = format_cpulist(iso);
    o.add(
        "cpu.isolation",
        Severity::Info,
        &iso_list,
        format!("CPUs {iso_list} are isolated"),
        vec![ev("/sys/devices/system/cpu/isolated", &iso_list)],
        "isolated CPUs run only what is pinned there, so I/O workers placed on them are not preempted",
        String::new(),
    );
    let nohz = h.nohz_full.clone().unwrap_or_default();
    let missing_nohz: Vec<usize> = iso.iter().copied().filter(|c| !nohz.contains(c)).collect();
    if !missing_nohz.is_empty() {
        o.add(
            "cpu.nohz_full",
            Severity::Warn,
            &format_cpulist(&missing_nohz),
            format!("isolated CPUs {} still take the periodic timer tick", format_cpulist(&missing_nohz)),
            vec![ev("/sys/devices/system/cpu/nohz_full", format_cpulist(&nohz)), cmdline_ev(h)],
            "the scheduler tick interrupts an isolated CPU up to 1000 times a second; an I/O completing during it waits",
            format!("add to the kernel command line and reboot: nohz_full={iso_list}"),
        );
    }
    let rcu = h
        .cmdline_param("rcu_nocbs")
        .flatten()
        .and_then(|v| crate::parse::parse_cpulist(v).ok())
        .unwrap_or_default();
    let missing_rcu: Vec<usize> = iso.iter().copied().filter(|c| !rcu.contains(c)).collect();
    if !missing_rcu.is_empty() {
        o.add(
            "cpu.rcu_nocbs",
            Severity::Warn,
            &format_cpulist(&missing_rcu),
            format!(
                "RCU callbacks still run on isolated CPUs {}",
                format_cpulist(&missing_rcu)
            ),
            vec![cmdline_ev(h)],
            "RCU callback processing runs in softirq context on the CPU and delays the I/O worker",
            format!("add to the kernel command line and reboot: rcu_nocbs={iso_list}"),
        );
    }
}

/// The frequency governor of the CPUs that may run I/O (the isolated ones, else all).
fn cpu_governor(h: &Host, o: &mut Out, iso: &[usize]) {
    if !h.cpufreq_present {
        o.add(
            "cpu.governor",
            Severity::Info,
            "host",
            "no cpufreq: CPU frequency is not controlled by this kernel (VM or firmware-managed)"
                .into(),
            vec![ev(
                "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor",
                "(absent)",
            )],
            "frequency changes add latency at ramp-up; here they are out of the kernel's hands",
            String::new(),
        );
        return;
    }
    // With isolation, only the isolated (I/O) CPUs matter; else every CPU may run I/O.
    let slow: Vec<&crate::host::Cpu> = h
        .cpus
        .iter()
        .filter(|c| iso.is_empty() || iso.contains(&c.id))
        .filter(|c| c.governor.as_deref().is_some_and(|g| g != "performance"))
        .collect();
    if let Some(first) = slow.first() {
        let ids: Vec<usize> = slow.iter().map(|c| c.id).collect();
        o.add(
            "cpu.governor",
            Severity::Warn,
            &format_cpulist(&ids),
            format!("CPUs {} use the `{}` frequency governor", format_cpulist(&ids), first.governor.clone().unwrap_or_default()),
            vec![ev(format!("/sys/devices/system/cpu/cpu{}/cpufreq/scaling_governor", first.id), first.governor.clone().unwrap_or_default())],
            "an idle-ish I/O CPU clocks down and takes time to ramp up when a completion arrives",
            "cpupower frequency-set -g performance   (or: for g in /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor; do echo performance > $g; done; `nines tune --apply` does it per I/O CPU)".into(),
        );
    }
}

/// Enabled idle states whose exit latency is above [`IDLE_EXIT_LATENCY_US_MAX`].
fn cpu_idle(h: &Host, o: &mut Out) {
    let mut deep: Vec<(usize, String, u64)> = Vec::new();
    for c in &h.cpus {
        for s in &c.idle_states {
            if !s.disabled && s.exit_latency_us > IDLE_EXIT_LATENCY_US_MAX {
                deep.push((c.id, s.name.clone(), s.exit_latency_us));
            }
        }
    }
    if let Some(worst) = deep.iter().max_by_key(|d| d.2) {
        let ids: Vec<usize> = deep.iter().map(|d| d.0).collect();
        let idx = h
            .cpu(worst.0)
            .and_then(|c| c.idle_states.iter().position(|s| s.name == worst.1))
            .unwrap_or(0);
        o.add(
            "cpu.idle",
            Severity::Warn,
            &format_cpulist(&ids),
            format!("deep idle states are enabled (worst: {} with {} µs exit latency)", worst.1, worst.2),
            vec![ev(format!("/sys/devices/system/cpu/cpu{}/cpuidle/state{idx}/latency", worst.0), worst.2.to_string())],
            "a CPU waiting for a completion sleeps; waking from a deep C-state adds its exit latency to that I/O",
            format!(
                "boot with processor.max_cstate=1 intel_idle.max_cstate=0 (or idle=poll, as Jin et al., ISPASS'18 did), or at run time: cpupower idle-set -D {IDLE_EXIT_LATENCY_US_MAX}"
            ),
        );
    } else if !h.cpus.is_empty() {
        let any = h.cpus.iter().find(|c| !c.idle_states.is_empty());
        let desc = any
            .map(|c| {
                c.idle_states
                    .iter()
                    .map(|s| format!("{}={}us", s.name, s.exit_latency_us))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_else(|| "no cpuidle states".into());
        o.add(
            "cpu.idle",
            Severity::Info,
            "host",
            format!("no enabled idle state exits slower than {IDLE_EXIT_LATENCY_US_MAX} µs"),
            vec![ev(
                "/sys/devices/system/cpu/cpu*/cpuidle/state*/latency",
                desc,
            )],
            "shallow idle states wake quickly, so they add little to a completion's latency",
            String::new(),
        );
    }
}

/// SMT (and isolated CPUs sharing a core with non-isolated ones) and NUMA.
fn cpu_topology(h: &Host, o: &mut Out, iso: &[usize]) {
    let smt: Vec<String> = h
        .cpus
        .iter()
        .filter(|c| c.siblings.len() > 1 && c.siblings.first() == Some(&c.id))
        .map(|c| format_cpulist(&c.siblings))
        .collect();
    if !smt.is_empty() {
        o.add(
            "cpu.smt",
            Severity::Info,
            "host",
            format!("{} cores run two or more hardware threads (SMT)", smt.len()),
            vec![ev("/sys/devices/system/cpu/cpu*/topology/thread_siblings_list", smt.iter().take(8).cloned().collect::<Vec<_>>().join(" "))],
            "SMT siblings share a core: a busy sibling slows the I/O worker; keep a housekeeping CPU's sibling out of the I/O set or accept it",
            String::new(),
        );
    }
    // An isolated CPU whose SMT sibling is not isolated shares its core with housekeeping work.
    let shared: Vec<usize> = h
        .cpus
        .iter()
        .filter(|c| iso.contains(&c.id) && c.siblings.iter().any(|s| !iso.contains(s)))
        .map(|c| c.id)
        .collect();
    if !shared.is_empty() {
        let c = h.cpu(shared[0]);
        o.add(
            "cpu.smt_shared",
            Severity::Info,
            &format_cpulist(&shared),
            format!("isolated CPUs {} share a core with non-isolated SMT siblings", format_cpulist(&shared)),
            vec![ev(
                format!("/sys/devices/system/cpu/cpu{}/topology/thread_siblings_list", shared[0]),
                c.map(|c| format_cpulist(&c.siblings)).unwrap_or_default(),
            )],
            "work on the sibling thread competes for the core's execution units and caches and slows the I/O worker",
            "isolate whole cores (both siblings), or leave the sibling idle".into(),
        );
    }
    let nodes: Vec<String> = h
        .nodes
        .iter()
        .map(|(n, c)| format!("node{n}={}", format_cpulist(c)))
        .collect();
    o.add(
        "cpu.numa",
        Severity::Info,
        "host",
        format!("{} NUMA node(s), {} online CPUs", h.nodes.len().max(1), h.online.len()),
        vec![ev("/sys/devices/system/node/node*/cpulist", nodes.join(" "))],
        "a device's interrupts and I/O workers should sit on the device's NUMA node; remote memory and interrupts add latency",
        String::new(),
    );
}

fn irqs(h: &Host, o: &mut Out) {
    let balancers = h.running("irqbalance");
    if let Some(p) = balancers.first() {
        o.add(
            "irq.irqbalance",
            Severity::Warn,
            "host",
            "irqbalance is running".into(),
            vec![ev(format!("/proc/{}/comm", p.pid), "irqbalance")],
            "irqbalance moves interrupts between CPUs every 10 s without knowing which CPU submits each device's I/O \
             (Jin et al., ISPASS\'18 §IV-D: completions served on another CPU must be handed back to the submitter)",
            "systemctl stop irqbalance   (or `nines tune --apply PLAN --stop-irqbalance`; or set IRQBALANCE_BANNED_CPULIST to the I/O CPUs)".into(),
        );
    }
    if h.interrupts.is_none() {
        return;
    }
    for d in h.devices.iter().filter(|d| {
        matches!(
            d.kind,
            DevKind::Nvme | DevKind::Virtio | DevKind::Scsi | DevKind::Other
        )
    }) {
        if d.irqs.is_empty() {
            if matches!(d.kind, DevKind::Nvme | DevKind::Virtio) {
                o.add(
                    "irq.unmapped",
                    Severity::Info,
                    &d.name,
                    format!("no queue interrupts found for {}", d.name),
                    vec![ev("/proc/interrupts", format!("no handler named {}q*/-req*", d.controller.clone().unwrap_or_default()))],
                    "without its interrupts doctor cannot check where the device's completions are served",
                    String::new(),
                );
            }
            continue;
        }
        let spread: Vec<&crate::host::Irq> = d
            .irqs
            .iter()
            .filter(|i| i.smp_affinity.as_ref().is_some_and(|a| a.len() > 1))
            .collect();
        let eff: Vec<usize> = {
            let mut v: Vec<usize> = d
                .irqs
                .iter()
                .flat_map(|i| i.effective_affinity.clone().unwrap_or_default())
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let served: Vec<usize> = {
            let mut v: Vec<usize> = d.irqs.iter().flat_map(|i| i.served_cpus.clone()).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let served_ev = ev(
            "/proc/interrupts",
            format!(
                "{} queue interrupts ({}..{}) served on CPUs {} since boot",
                d.irqs.len(),
                d.irqs[0].name,
                d.irqs[d.irqs.len() - 1].name,
                if served.is_empty() {
                    "(none yet)".to_string()
                } else {
                    format_cpulist(&served)
                }
            ),
        );
        if let Some(first) = spread.first() {
            let aff = format_cpulist(first.smp_affinity.as_deref().unwrap_or(&[]));
            o.add(
                "irq.affinity",
                Severity::Warn,
                &d.name,
                format!("{} of {} queue interrupts of {} may be served on any of several CPUs", spread.len(), d.irqs.len(), d.name),
                vec![
                    ev(format!("/proc/irq/{}/smp_affinity_list", first.irq), aff),
                    ev(
                        format!("/proc/irq/{}/effective_affinity_list", first.irq),
                        first.effective_affinity.as_deref().map(format_cpulist).unwrap_or_else(|| "(unreadable)".into()),
                    ),
                    served_ev,
                ],
                "when a completion interrupt lands on a CPU other than the one that submitted the I/O, the wakeup crosses CPUs \
                 (an IPI and cold caches), which Jin et al., ISPASS\'18 §IV-D found to widen the latency spread",
                format!(
                    "pin each queue interrupt to its I/O worker's CPU: echo CPU > /proc/irq/{}/smp_affinity_list \
                     (`nines tune --plan` then `nines tune --apply PLAN` does all {} of them); a kernel-managed \
                     interrupt refuses this (EPERM): then run the device's worker on its effective CPU instead",
                    first.irq,
                    d.irqs.len()
                ),
            );
        } else {
            o.add(
                "irq.affinity",
                Severity::Info,
                &d.name,
                format!("{} queue interrupts of {} are each pinned to one CPU (served on {})", d.irqs.len(), d.name, format_cpulist(&eff)),
                vec![ev(format!("/proc/irq/{}/smp_affinity_list", d.irqs[0].irq), format_cpulist(d.irqs[0].smp_affinity.as_deref().unwrap_or(&[]))), served_ev],
                "pinned queue interrupts are served where the kernel put them; check they match the CPUs that submit (`nines profile` reports it)",
                String::new(),
            );
        }
    }
}

fn block(h: &Host, o: &mut Out) {
    let multi_node = h.nodes.len() > 1;
    for d in h.devices.iter().filter(|d| {
        matches!(
            d.kind,
            DevKind::Nvme | DevKind::Virtio | DevKind::Scsi | DevKind::Other
        )
    }) {
        let q = format!("/sys/block/{}/queue", d.name);
        let flash = d.queue.rotational != Some(1);
        if let Some(s) = &d.queue.scheduler
            && s != "none"
        {
            o.add(
                "block.scheduler",
                if d.kind == DevKind::Nvme && flash { Severity::Warn } else { Severity::Info },
                &d.name,
                format!(
                    "{} uses the `{s}` I/O scheduler{}",
                    d.name,
                    if flash { "" } else { " (it reports itself rotational; right for a disk, not for flash behind it)" }
                ),
                vec![ev(format!("{q}/scheduler"), s.clone())],
                "an I/O scheduler adds a lock and queueing in front of a device that schedules itself; for flash `none` is right",
                format!("echo none > {q}/scheduler"),
            );
        }
        if d.queue.rq_affinity.is_some_and(|v| v != 2) {
            o.add(
                "block.rq_affinity",
                Severity::Info,
                &d.name,
                format!("{} completes requests on the submitting CPU's group, not the CPU itself (rq_affinity={})", d.name, d.queue.rq_affinity.unwrap_or(0)),
                vec![ev(format!("{q}/rq_affinity"), d.queue.rq_affinity.unwrap_or(0).to_string())],
                "with rq_affinity=2 the block layer finishes each request on the CPU that issued it, keeping caches warm and no cross-CPU wakeup",
                format!("echo 2 > {q}/rq_affinity"),
            );
        }
        if d.queue.nomerges.is_some_and(|v| v != 2) {
            o.add(
                "block.nomerges",
                Severity::Info,
                &d.name,
                format!(
                    "{} tries to merge requests (nomerges={})",
                    d.name,
                    d.queue.nomerges.unwrap_or(0)
                ),
                vec![ev(
                    format!("{q}/nomerges"),
                    d.queue.nomerges.unwrap_or(0).to_string(),
                )],
                "merge lookups cost CPU on every submission and random small I/O never merges",
                format!("echo 2 > {q}/nomerges"),
            );
        }
        if d.queue.iostats == Some(1) {
            o.add(
                "block.iostats",
                Severity::Info,
                &d.name,
                format!("{} keeps I/O statistics (iostats=1)", d.name),
                vec![ev(format!("{q}/iostats"), "1")],
                "per-I/O accounting reads the clock and updates shared counters on every request",
                format!("echo 0 > {q}/iostats   (only while measuring: tools like iostat need it)"),
            );
        }
        if let Some(n) = d.queue.nr_requests {
            o.add(
                "block.nr_requests",
                Severity::Info,
                &d.name,
                format!("{} queues at most {n} requests per hardware queue", d.name),
                vec![ev(format!("{q}/nr_requests"), n.to_string())],
                "deep queues hide latency behind throughput; at low queue depth this only bounds the worst burst",
                String::new(),
            );
        }
        if let Some(wc) = &d.queue.write_cache {
            o.add(
                "block.write_cache",
                Severity::Info,
                &d.name,
                format!("{} write cache: {wc}", d.name),
                vec![ev(format!("{q}/write_cache"), wc.clone())],
                "with a volatile write cache (write back) every flush/FUA waits for the cache to drain, which shows up in write tails",
                String::new(),
            );
        }
        if d.kind == DevKind::Nvme {
            let polls = h.poll_queues.unwrap_or(0);
            if polls > 0 {
                o.add(
                    "block.poll_queues",
                    Severity::Info,
                    &d.name,
                    format!(
                        "{} has {polls} poll queue(s) per controller{}: --engine io_uring-poll completes on them, without interrupts",
                        d.name,
                        if d.queue.io_poll == Some(1) { " (io_poll=1)" } else { "" }
                    ),
                    vec![
                        ev("/sys/module/nvme/parameters/poll_queues", polls.to_string()),
                        ev(format!("{q}/io_poll"), d.queue.io_poll.map(|v| v.to_string()).unwrap_or_else(|| "(absent)".into())),
                    ],
                    "polling removes the interrupt and the wakeup from each I/O's path, the shortest tail at the cost of a busy CPU",
                    String::new(),
                );
            }
            if polls == 0 {
                o.add(
                    "block.poll_queues",
                    Severity::Info,
                    &d.name,
                    format!("{} has no poll queues: --engine io_uring-poll is refused on it", d.name),
                    vec![
                        ev("/sys/module/nvme/parameters/poll_queues", h.poll_queues.map(|v| v.to_string()).unwrap_or_else(|| "(absent)".into())),
                        ev(format!("{q}/io_poll"), d.queue.io_poll.map(|v| v.to_string()).unwrap_or_else(|| "(absent)".into())),
                    ],
                    "polling removes the interrupt and the wakeup from each I/O's path, the shortest tail at the cost of a busy CPU",
                    "boot with nvme.poll_queues=N (or `options nvme poll_queues=N` in /etc/modprobe.d/nvme.conf, then reload nvme)".into(),
                );
            }
            match d.numa_node {
                Some(n) if n >= 0 => o.add(
                    "block.numa",
                    Severity::Info,
                    &d.name,
                    format!("{} is attached to NUMA node {n} (CPUs {})", d.name, h.nodes.get(&(n as usize)).map(|c| format_cpulist(c)).unwrap_or_default()),
                    vec![ev(format!("/sys/block/{}/device/numa_node", d.name), n.to_string())],
                    "run its I/O worker and take its interrupts on that node's CPUs (`nines tune --plan` does)",
                    String::new(),
                ),
                _ if multi_node => o.add(
                    "block.numa",
                    Severity::Warn,
                    &d.name,
                    format!("{}'s NUMA node is unknown on a {}-node host", d.name, h.nodes.len()),
                    vec![ev(format!("/sys/block/{}/device/numa_node", d.name), d.numa_node.map(|v| v.to_string()).unwrap_or_else(|| "(absent)".into()))],
                    "without it, placement cannot keep the device's interrupts and worker on its local node",
                    "check the BIOS's ACPI SRAT/_PXM tables (a firmware update or enabling NUMA reporting sets numa_node)".into(),
                ),
                _ => {}
            }
        }
    }
}

/// The nvme driver's APST policy, once (only where nvme_core is loaded): the parameters that
/// decide which idle power states every controller enters and after how long.
fn apst_policy(h: &Host, o: &mut Out) {
    if h.apst_parameters.is_empty() {
        return;
    }
    let get = |n: &str| h.apst_parameters.get(n).copied();
    let rule = match (
        get("default_ps_max_latency_us"),
        get("apst_primary_timeout_ms"),
        get("apst_primary_latency_tol_us"),
    ) {
        (Some(0), _, _) => "APST off for new controllers".to_string(),
        (_, None, _) => {
            "50 x (entry + exit latency) per state (a kernel before the 2021 rework)".to_string()
        }
        (_, Some(0), _) | (_, _, Some(0)) => {
            "50 x (entry + exit latency) per state (the primary parameters are 0)".to_string()
        }
        (_, Some(p), Some(tol)) => format!(
            "the deepest state within {tol} µs of entry + exit after {p} ms idle, a deeper one \
             within {} µs after {} ms more",
            get("apst_secondary_latency_tol_us").map_or("?".into(), |v| v.to_string()),
            get("apst_secondary_timeout_ms").map_or("?".into(), |v| v.to_string())
        ),
        _ => "?".to_string(),
    };
    let values: Vec<String> = crate::host::APST_PARAMETERS
        .iter()
        .filter_map(|n| get(n).map(|v| format!("{n}={v}")))
        .collect();
    o.add(
        "host.apst",
        Severity::Info,
        "host",
        format!("nvme APST policy: {rule} ({})", values.join(", ")),
        h.apst_parameters
            .iter()
            .map(|(n, v)| ev(format!("/sys/module/nvme_core/parameters/{n}"), v.to_string()))
            .collect(),
        "the kernel programs each controller's idle power states from these; `nines sim --apst host` (or a report of this host: --apst RUN.json) simulates a device under the same policy",
        String::new(),
    );
}

/// One line per NVMe controller: model, firmware, its namespaces' write cache and its APST state
/// (with the fix when APST is on: the next I/O after an idle gap pays a power state's exit).
fn nvme_controllers(h: &Host, o: &mut Out) {
    let default = "/sys/module/nvme_core/parameters/default_ps_max_latency_us";
    for c in &h.nvme_controllers {
        let dir = format!("/sys/class/nvme/{}", c.name);
        let mut evidence = vec![
            ev(format!("{dir}/model"), c.model.clone().unwrap_or_default()),
            ev(
                format!("{dir}/firmware_rev"),
                c.firmware.clone().unwrap_or_default(),
            ),
        ];
        let caches: Vec<String> = h
            .devices
            .iter()
            .filter(|d| d.controller.as_deref() == Some(c.name.as_str()))
            .filter_map(|d| {
                let wc = d.queue.write_cache.as_ref()?;
                evidence.push(ev(
                    format!("/sys/block/{}/queue/write_cache", d.name),
                    wc.clone(),
                ));
                Some(format!("{wc} ({})", d.name))
            })
            .collect();
        let tolerance = format!("{dir}/power/pm_qos_latency_tolerance_us");
        let (apst, on) = match (&c.apst_latency_tolerance, h.apst_max_latency_us) {
            (Some(t), _) if t == "0" => ("off (its latency tolerance is 0)".to_string(), false),
            (Some(t), d) => (
                format!(
                    "on: idle power states with an exit latency up to {} µs (latency tolerance {t})",
                    t.parse::<u64>()
                        .ok()
                        .or(d.and_then(|d| u64::try_from(d).ok()))
                        .map_or_else(|| "?".to_string(), |v| v.to_string())
                ),
                true,
            ),
            (None, Some(0)) => ("off (default_ps_max_latency_us=0)".to_string(), false),
            (None, _) => (
                "not in use (the controller does not support it, or the driver left it off)"
                    .to_string(),
                false,
            ),
        };
        if let Some(t) = &c.apst_latency_tolerance {
            evidence.push(ev(&tolerance, t.clone()));
        }
        if let Some(d) = h.apst_max_latency_us {
            evidence.push(ev(default, d.to_string()));
        }
        o.add(
            "block.nvme",
            // A controller that sleeps when idle is a tail the next I/O pays: a warning.
            if on { Severity::Warn } else { Severity::Info },
            &c.name,
            format!(
                "{}: {}, firmware {}; volatile write cache: {}; APST {apst}",
                c.name,
                c.model.as_deref().unwrap_or("?"),
                c.firmware.as_deref().unwrap_or("?"),
                if caches.is_empty() {
                    "?".to_string()
                } else {
                    caches.join(", ")
                },
            ),
            evidence,
            "APST lets an idle controller sleep in a power state whose exit latency the next I/O pays (milliseconds on client drives); a volatile write cache makes every flush and FUA write wait for it (`nines profile` on the device reports the identify data and SMART)",
            if on {
                format!(
                    "echo 0 > {tolerance}   (or boot with nvme_core.default_ps_max_latency_us=0)"
                )
            } else {
                String::new()
            },
        );
    }
}

fn housekeeping(h: &Host, o: &mut Out) {
    let nvme = h.devices.iter().filter(|d| d.kind == DevKind::Nvme).count();
    for p in h.running("smartd") {
        let args = p.args.clone().unwrap_or_default();
        let mut interval = crate::parse::smartd_interval_s(&args);
        let mut src = (format!("/proc/{}/cmdline", p.pid), args.clone());
        if interval.is_none()
            && let Some((path, text)) = &h.smartd_default_opts
        {
            interval = crate::parse::smartd_interval_s(
                &crate::parse::strip_comments(text).replace(['"', '\''], " "),
            );
            if interval.is_some() {
                src = (path.clone(), text.trim().to_string());
            }
        }
        if interval.is_none()
            && let Some((path, text)) = &h.smartd_conf
        {
            let conf = crate::parse::strip_comments(text);
            interval = crate::parse::smartd_interval_s(&conf);
            if interval.is_some() {
                let line = conf
                    .lines()
                    .find(|l| crate::parse::smartd_interval_s(l).is_some())
                    .unwrap_or("");
                src = (path.clone(), line.trim().to_string());
            }
        }
        let interval_s = interval.unwrap_or(1800);
        o.add(
            "housekeeping.smartd",
            if nvme > 0 { Severity::Critical } else { Severity::Warn },
            &format!("pid {}", p.pid),
            format!("smartd polls device health every {interval_s} s{}", if interval.is_none() { " (its default)" } else { "" }),
            vec![ev(format!("/proc/{}/comm", p.pid), "smartd"), ev(src.0, src.1)],
            "each SMART log read makes the SSD's firmware collect and save health data, stalling reads behind it: \
             Jin et al., ISPASS\'18 §IV-E found periodic spikes whose removal cut the worst case from about 600 µs to 90 µs",
            "systemctl stop smartd while measuring (or raise its interval: `-i 86400` in smartd.conf / smartd_opts)".into(),
        );
    }
    for comm in [
        "smartctl",
        "nvme",
        "collectd",
        "telegraf",
        "node_exporter",
        "storaged",
    ] {
        for p in h.running(comm) {
            let args = p.args.clone().unwrap_or_default();
            let polls_smart = comm == "smartctl" || args.contains("smart") || args.contains("nvme");
            if !polls_smart {
                continue;
            }
            o.add(
                "housekeeping.smart_poller",
                Severity::Warn,
                &format!("pid {}", p.pid),
                format!("`{comm}` is running and may read SMART/health logs"),
                vec![ev(format!("/proc/{}/cmdline", p.pid), args)],
                "a health-log read stalls the device's reads behind firmware housekeeping (Jin et al., ISPASS\'18 §IV-E)",
                format!("stop it while measuring: kill {} (or disable its SMART/nvme collector)", p.pid),
            );
        }
    }
    for p in h.running("udisksd") {
        o.add(
            "housekeeping.udisks",
            Severity::Warn,
            &format!("pid {}", p.pid),
            "udisksd is running (it polls drive health periodically)".into(),
            vec![ev(format!("/proc/{}/comm", p.pid), "udisksd")],
            "udisks refreshes SMART data of ATA drives every 10 minutes and probes devices on change events",
            "systemctl stop udisks2 while measuring".into(),
        );
    }
    if let Some(profile) = &h.tuned_profile {
        let good = [
            "latency-performance",
            "network-latency",
            "realtime",
            "cpu-partitioning",
        ]
        .iter()
        .any(|g| profile.contains(g));
        o.add(
            "housekeeping.tuned",
            if good { Severity::Info } else { Severity::Warn },
            "host",
            format!("tuned profile `{profile}` is active"),
            vec![ev("/etc/tuned/active_profile", profile.clone())],
            "tuned rewrites governors, C-state limits and block settings; a throughput or power profile undoes latency tuning",
            if good { String::new() } else { "tuned-adm profile latency-performance   (or systemctl stop tuned before `nines tune --apply`)".into() },
        );
    } else if let Some(p) = h.running("tuned").first() {
        o.add(
            "housekeeping.tuned",
            Severity::Info,
            &format!("pid {}", p.pid),
            "tuned is running (profile unknown)".into(),
            vec![ev(format!("/proc/{}/comm", p.pid), "tuned")],
            "tuned may rewrite governors and block settings behind `nines tune`",
            "tuned-adm active; tuned-adm profile latency-performance".into(),
        );
    }
}

fn process(h: &Host, o: &mut Out) {
    let cap_nice = h.cap_eff.map(|c| c & (1u64 << CAP_SYS_NICE) != 0);
    let rtprio = h
        .limits
        .as_ref()
        .and_then(|l| l.get("Max realtime priority"))
        .copied();
    if let Some(l) = rtprio {
        let soft = l
            .soft
            .map(|v| v.to_string())
            .unwrap_or_else(|| "unlimited".into());
        let allowed = l.soft.is_none_or(|v| v > 0) || cap_nice == Some(true);
        o.add(
            "proc.sched_fifo",
            if allowed { Severity::Info } else { Severity::Critical },
            "process",
            if allowed {
                format!("SCHED_FIFO is allowed (RLIMIT_RTPRIO={soft}, CAP_SYS_NICE={})", cap_nice.unwrap_or(false))
            } else {
                format!("SCHED_FIFO is not allowed (RLIMIT_RTPRIO={soft}, no CAP_SYS_NICE)")
            },
            vec![
                ev("/proc/self/limits", format!("Max realtime priority {soft}")),
                ev("/proc/self/status", format!("CapEff {:016x}", h.cap_eff.unwrap_or(0))),
            ],
            "real-time priority for the I/O workers was the largest single gain in Jin et al., ISPASS\'18 §IV-B (worst case 5 ms to about 600 µs)",
            if allowed { String::new() } else { "run as root, or `setcap cap_sys_nice+ep $(which nines)`, or add `USER - rtprio 99` to /etc/security/limits.conf".into() },
        );
    }
    let memlock = h
        .limits
        .as_ref()
        .and_then(|l| l.get("Max locked memory"))
        .copied();
    let cap_ipc_lock = h.cap_eff.is_some_and(|c| c & (1u64 << CAP_IPC_LOCK) != 0);
    if let Some(l) = memlock
        && l.soft.is_some_and(|v| v < MEMLOCK_BYTES_MIN)
        && !cap_ipc_lock
    {
        let v = l.soft.unwrap_or(0);
        o.add(
            "proc.memlock",
            Severity::Warn,
            "process",
            format!("locked-memory limit is {} KiB", v / 1024),
            vec![ev("/proc/self/limits", format!("Max locked memory {v}"))],
            "io_uring rings and registered buffers are locked memory; too little fails setup or forces unregistered (slower) buffers",
            "ulimit -l unlimited (or `USER - memlock unlimited` in /etc/security/limits.conf)".into(),
        );
    } else if let Some(l) = memlock {
        o.add(
            "proc.memlock",
            Severity::Info,
            "process",
            format!("locked-memory limit: {}", l.soft.map(|v| format!("{} KiB", v / 1024)).unwrap_or_else(|| "unlimited".into())),
            vec![ev("/proc/self/limits", format!("Max locked memory {}", l.soft.map(|v| v.to_string()).unwrap_or_else(|| "unlimited".into())))],
            if cap_ipc_lock {
                "CAP_IPC_LOCK lifts the limit for this process, so io_uring rings and registered buffers fit"
            } else {
                "enough for io_uring rings and registered buffers"
            },
            String::new(),
        );
    }
    if let Some(rt) = h.sched_rt_runtime_us
        && rt >= 0
    {
        o.add(
            "proc.rt_throttle",
            Severity::Warn,
            "host",
            format!("real-time throttling is on: RT tasks get {rt} µs of every second"),
            vec![ev("/proc/sys/kernel/sched_rt_runtime_us", rt.to_string())],
            "a busy-polling SCHED_FIFO worker is stopped for the rest of each period once it used its RT budget, a multi-millisecond stall",
            "sysctl -w kernel.sched_rt_runtime_us=-1   (only with isolated I/O CPUs: an RT spinner can then starve its CPU)".into(),
        );
    }
}

/// Checks a placement plan against the host: each device's NUMA node and interrupts against
/// the CPU the plan gives its worker, and whether that CPU is isolated.
pub fn check_plan(h: &Host, plan: &crate::plan::Plan) -> Vec<Finding> {
    let mut o = Out(Vec::new());
    let iso = h.isolated.clone().unwrap_or_default();
    let mut not_isolated = Vec::new();
    for pd in &plan.devices {
        let Some(d) = h.device(&pd.name) else {
            o.add(
                "plan.device",
                Severity::Warn,
                &pd.name,
                format!("the plan places {}, which this host does not have", pd.name),
                vec![ev("/sys/block", "(no such device)")],
                "a plan made on another host or before devices were renumbered places workers wrongly",
                "make the plan on this host: nines tune --plan -o PLAN".into(),
            );
            continue;
        };
        let cpu_node = h.cpu(pd.cpu).and_then(|c| c.node);
        if let (Some(dn), Some(cn)) = (d.numa_node.filter(|n| *n >= 0), cpu_node)
            && dn as usize != cn
        {
            o.add(
                "plan.numa",
                Severity::Warn,
                &d.name,
                format!("{} is on NUMA node {dn} but the plan runs it on CPU {} of node {cn}", d.name, pd.cpu),
                vec![ev(format!("/sys/block/{}/device/numa_node", d.name), dn.to_string())],
                "every completion then crosses the socket interconnect: remote interrupts and memory add latency",
                "re-plan with I/O CPUs on that node: nines tune --plan --cpus LIST".into(),
            );
        }
        if !d.irqs.is_empty() {
            // With a blk-mq map, the one queue interrupt that completes this CPU's I/O; else any.
            let irqs: Vec<&crate::host::Irq> = match h.irq_for_cpu(d, pd.cpu) {
                Some(i) => vec![i],
                None => d.irqs.iter().collect(),
            };
            let serves = irqs.iter().any(|i| {
                i.effective_affinity
                    .as_ref()
                    .is_some_and(|e| e.contains(&pd.cpu))
            });
            if !serves {
                let mut eff: Vec<usize> = irqs
                    .iter()
                    .flat_map(|i| i.effective_affinity.clone().unwrap_or_default())
                    .collect();
                eff.sort_unstable();
                eff.dedup();
                o.add(
                    "plan.irq",
                    Severity::Warn,
                    &d.name,
                    format!(
                        "{}'s interrupts are served on CPUs {} but the plan submits its I/O on CPU {}",
                        d.name,
                        format_cpulist(&eff),
                        pd.cpu
                    ),
                    vec![ev(
                        format!("/proc/irq/{}/effective_affinity_list", irqs[0].irq),
                        irqs[0].effective_affinity.as_deref().map(format_cpulist).unwrap_or_default(),
                    )],
                    "each completion is served on another CPU and handed back to the worker (Jin et al., ISPASS\'18 §IV-D)",
                    format!(
                        "apply the plan: nines tune --apply PLAN; if the kernel refuses (managed interrupts), re-plan with --cpus {}",
                        format_cpulist(&eff)
                    ),
                );
            }
        }
        if !iso.is_empty() && !iso.contains(&pd.cpu) {
            not_isolated.push(pd.cpu);
        }
    }
    not_isolated.sort_unstable();
    not_isolated.dedup();
    // What was checked, always: so `doctor --plan` says it looked, also when all is well.
    let warned: std::collections::BTreeSet<&str> =
        o.0.iter()
            .filter(|f| f.severity >= Severity::Warn)
            .map(|f| f.subject.as_str())
            .collect();
    let ok = plan
        .devices
        .iter()
        .filter(|d| !warned.contains(d.name.as_str()))
        .count();
    o.add(
        "plan.checked",
        Severity::Info,
        "plan",
        format!(
            "the plan's {} device(s) checked against this host: {ok} placed well (NUMA node, \
             interrupts on the worker's CPU), {} with a warning above",
            plan.devices.len(),
            plan.devices.len() - ok
        ),
        vec![ev(
            "plan",
            format!(
                "I/O CPUs {}, housekeeping {}",
                format_cpulist(&plan.io_cpus),
                format_cpulist(&plan.housekeeping_cpus)
            ),
        )],
        "a plan made elsewhere or before a reboot can place workers away from their devices' interrupts",
        String::new(),
    );
    if !not_isolated.is_empty() {
        o.add(
            "plan.isolation",
            Severity::Warn,
            &format_cpulist(&not_isolated),
            format!("the plan runs I/O workers on CPUs {} which are not isolated", format_cpulist(&not_isolated)),
            vec![ev("/sys/devices/system/cpu/isolated", format_cpulist(&iso))],
            "the host isolated other CPUs; workers outside them share their CPU with everything else",
            format!("re-plan with --cpus {}", format_cpulist(&iso)),
        );
    }
    o.0
}

impl DoctorReport {
    /// Adds the findings of [`check_plan`] (keeping the most-severe-first order and the counts).
    pub fn add_plan_findings(&mut self, h: &Host, plan: &crate::plan::Plan) {
        self.add_findings(check_plan(h, plan));
    }

    /// Adds findings made elsewhere (the binary's: those that need an NVMe admin command).
    pub fn add_findings(&mut self, extra: Vec<Finding>) {
        for f in &extra {
            match f.severity {
                Severity::Critical => self.counts.critical += 1,
                Severity::Warn => self.counts.warn += 1,
                Severity::Info => self.counts.info += 1,
            }
        }
        self.findings.extend(extra);
        self.findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    }
}
