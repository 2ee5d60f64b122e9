//! Interrupt counts over a run, for `nines profile`: which CPUs served each device's queue
//! interrupts, against the CPU that submitted its I/O.

use std::collections::BTreeMap;
use std::path::Path;

use crate::fs::HostFs;
use crate::host::{is_queue_irq, nvme_controller};
use crate::parse::{Interrupts, parse_interrupts};

#[derive(Debug, thiserror::Error)]
pub enum IrqError {
    #[error("cannot read /proc/interrupts under {root}: {msg}")]
    Read { root: String, msg: String },
    #[error("{0}")]
    Parse(#[from] crate::parse::ParseError),
}

/// One reading of /proc/interrupts plus the block device -> queue IRQ map.
#[derive(Debug, Clone)]
pub struct IrqSnapshot {
    pub interrupts: Interrupts,
    /// Block device name -> its queue IRQs (e.g. "nvme0n1" -> [101, 102...], "vda" -> [36]).
    pub device_irqs: BTreeMap<String, Vec<u32>>,
}

/// Interrupts served between two snapshots: per IRQ, (CPU, count) for CPUs with count > 0.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct IrqDelta {
    pub per_irq: BTreeMap<u32, Vec<(usize, u64)>>,
    pub device_irqs: BTreeMap<String, Vec<u32>>,
}

impl IrqSnapshot {
    /// Reads /proc/interrupts (and /sys, for the device map) under `root` ("/" for the live host).
    pub fn read(root: &Path) -> Result<IrqSnapshot, IrqError> {
        let fs = HostFs::new(root);
        let text = fs.read("/proc/interrupts").map_err(|e| IrqError::Read {
            root: root.display().to_string(),
            msg: e.to_string(),
        })?;
        let interrupts = parse_interrupts(&text)?;
        let mut device_irqs = BTreeMap::new();
        for name in fs.list("/sys/block").unwrap_or_default() {
            let irqs = device_queue_irqs(&fs, &interrupts, &name);
            if !irqs.is_empty() {
                device_irqs.insert(name, irqs);
            }
        }
        Ok(IrqSnapshot {
            interrupts,
            device_irqs,
        })
    }

    /// Counts served between `self` (earlier) and `later`. IRQs absent from either side are left
    /// out; a counter that went backwards (IRQ reassigned) counts as 0.
    pub fn delta(&self, later: &IrqSnapshot) -> IrqDelta {
        let mut per_irq = BTreeMap::new();
        for row in &later.interrupts.rows {
            let Some(n) = row.irq else { continue };
            let Some(before) = self.interrupts.row(n) else {
                continue;
            };
            let mut v = Vec::new();
            for (i, &cpu) in later.interrupts.cpus.iter().enumerate() {
                let after = row.counts.get(i).copied().unwrap_or(0);
                let j = self.interrupts.cpus.iter().position(|&c| c == cpu);
                let b = j.and_then(|j| before.counts.get(j)).copied().unwrap_or(0);
                let d = after.saturating_sub(b);
                if d > 0 {
                    v.push((cpu, d));
                }
            }
            per_irq.insert(n, v);
        }
        IrqDelta {
            per_irq,
            device_irqs: later.device_irqs.clone(),
        }
    }
}

/// The queue IRQs of block device `dev` ("nvme0n1", "/dev/vda") on the host under `root`; empty
/// for devices without interrupts of their own (zram, loop) or when /proc/interrupts is unreadable.
pub fn queue_irqs(root: &Path, dev: &str) -> Vec<u32> {
    let fs = HostFs::new(root);
    let Ok(text) = fs.read("/proc/interrupts") else {
        return Vec::new();
    };
    let Ok(ints) = parse_interrupts(&text) else {
        return Vec::new();
    };
    device_queue_irqs(&fs, &ints, crate::plan::target_name(dev))
}

/// The queue IRQs of block device `name`: NVMe "nvmeXqY" (Y > 0) and virtio "virtioN-req.*"
/// handlers in /proc/interrupts, found via the controller name.
pub fn device_queue_irqs(fs: &HostFs, ints: &Interrupts, name: &str) -> Vec<u32> {
    let ctrl = match nvme_controller(name) {
        Some(c) => Some(c),
        None => fs
            .list("/sys/bus/virtio/devices")
            .unwrap_or_default()
            .into_iter()
            .find(|v| {
                fs.list(&format!("/sys/bus/virtio/devices/{v}/block"))
                    .unwrap_or_default()
                    .iter()
                    .any(|b| b == name)
            }),
    };
    let Some(ctrl) = ctrl else { return Vec::new() };
    ints.rows
        .iter()
        .filter(|r| r.actions.iter().any(|a| is_queue_irq(a, &ctrl)))
        .filter_map(|r| r.irq)
        .collect()
}

/// Where a device's interrupts were served during a run. `off_cpu` is true when any was served
/// on a CPU other than `submit_cpu`.
pub fn device_irq_report(
    dev_name: &str,
    submit_cpu: Option<usize>,
    delta: &IrqDelta,
) -> serde_json::Value {
    let name = crate::plan::target_name(dev_name);
    let irqs = delta.device_irqs.get(name).cloned().unwrap_or_default();
    if irqs.is_empty() {
        return serde_json::json!({
            "device": name, "irqs": [], "submit_cpu": submit_cpu, "served_by_cpu": {},
            "total": 0, "off_cpu_count": 0, "off_cpu": false,
            "note": "no queue interrupts found (zram, loop and files complete without a device interrupt)",
        });
    }
    let mut by_cpu: BTreeMap<usize, u64> = BTreeMap::new();
    for n in &irqs {
        for &(c, k) in delta.per_irq.get(n).map(|v| v.as_slice()).unwrap_or(&[]) {
            *by_cpu.entry(c).or_default() += k;
        }
    }
    let total: u64 = by_cpu.values().sum();
    let off: u64 = match submit_cpu {
        Some(s) => by_cpu
            .iter()
            .filter(|(c, _)| **c != s)
            .map(|(_, k)| k)
            .sum(),
        None => 0,
    };
    let served: serde_json::Map<String, serde_json::Value> = by_cpu
        .iter()
        .map(|(c, k)| (c.to_string(), serde_json::json!(k)))
        .collect();
    serde_json::json!({
        "device": name, "irqs": irqs, "submit_cpu": submit_cpu, "served_by_cpu": served,
        "total": total, "off_cpu_count": off, "off_cpu": off > 0,
    })
}
