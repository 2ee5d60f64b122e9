//! Helpers for the tests that run inside the guest.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Fails unless this process runs inside the guest (`scripts/nvme-guest.sh` sets NINES_IN_GUEST):
/// the guest tests write to `/dev/nvme*`, which only the guest's are ours to write.
pub fn in_guest() {
    assert_eq!(
        std::env::var("NINES_IN_GUEST").as_deref(),
        Ok("1"),
        "a guest test: run by the boot_* tests inside a QEMU guest (scripts/nvme-guest.sh)"
    );
}

/// Runs the nines binary with `args`; panics with its stderr when it fails.
pub fn nines_ok(args: &[&str]) -> Output {
    let out = nines(args);
    assert!(
        out.status.success(),
        "nines {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs the nines binary with `args`.
pub fn nines(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nines"))
        .args(args)
        .output()
        .expect("run nines")
}

/// A sysfs or procfs file's text, trimmed.
pub fn read(path: impl AsRef<Path>) -> String {
    let p = path.as_ref();
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
        .trim()
        .to_string()
}

/// A block device's completed I/O counts (reads, writes), merges included, from
/// /sys/block/NAME/stat (Documentation/block/stat.rst: fields 1-2 and 5-6).
pub fn block_ios(name: &str) -> (u64, u64) {
    let s = read(format!("/sys/block/{name}/stat"));
    let f: Vec<u64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();
    (f[0] + f[1], f[4] + f[5])
}

/// Interrupts served so far by the vectors whose name starts with `prefix` (nvme0q), per CPU,
/// from /proc/interrupts: vector name -> counts by CPU.
pub fn interrupts(prefix: &str) -> Vec<(String, Vec<u64>)> {
    let text = read("/proc/interrupts");
    let mut lines = text.lines();
    let cpus = lines.next().unwrap().split_whitespace().count();
    lines
        .filter_map(|l| {
            let name = l.split_whitespace().last()?;
            if !name.starts_with(prefix) {
                return None;
            }
            let counts = l
                .split_whitespace()
                .skip(1)
                .take(cpus)
                .map(|x| x.parse().unwrap())
                .collect();
            Some((name.to_string(), counts))
        })
        .collect()
}

/// The report `nines profile --json` wrote.
pub fn report(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}
