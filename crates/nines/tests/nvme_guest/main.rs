//! nines on a real kernel nvme driver: QEMU's emulated NVMe controllers in a TCG guest
//! (`scripts/nvme-guest.sh`, issue 41).
//!
//! Two halves in one test binary:
//! - **host side**, the `boot_*` tests: each boots a guest with a set of controllers and
//!   namespaces and runs *this same binary* inside it with `--ignored` and a name filter, then
//!   checks that every guest test of that group ran and passed. A host that cannot boot a guest
//!   fails these tests (the harness says in one line what is missing): they never pass silently.
//! - **guest side**, the `#[ignore]`d `guest_*` tests in the modules: they run only inside the
//!   guest (they fail outside it), against `/dev/nvme*` of the guest, with the host's nines binary
//!   (the guest's root is the host's, read-only, so paths are the same).
//!
//! Run alone: `cargo test -p nines --test nvme_guest` (about a minute a boot on these machines).

#[path = "../common/mod.rs"]
mod common;

mod admin;
mod array64;
mod engines;
mod guest;
mod irq;
mod zoned;

use std::path::Path;
use std::process::Command;

/// The guest of the single-device tests: a conventional namespace alone on controller 0 (the
/// engine and IRQ tests use it), a second controller with a conventional and a zoned namespace,
/// and a third with two zoned namespaces (for serial over ZNS).
const MIXED: &[&str] = &[
    "--ctrl",
    "conv:256M",
    "--ctrl",
    "conv:128M,zns:512M:64M:48M:6:8",
    "--ctrl",
    "zns:512M:64M:48M:6:8,zns:512M:64M:48M:6:8",
];

/// Boots a guest with `guest_args` and runs the guest tests whose names contain `filter`;
/// asserts that they all ran and passed.
fn boot(guest_args: &[&str], filter: &str, timeout_s: u32) {
    let exe = std::env::current_exe().expect("this test binary's path");
    // The guest tests of this group, as libtest lists them here: the guest must pass them all.
    let list = Command::new(&exe)
        .args(["--ignored", "--list", filter])
        .output()
        .expect("list the guest tests");
    let expected = String::from_utf8_lossy(&list.stdout)
        .lines()
        .filter(|l| l.ends_with(": test"))
        .count();
    assert!(expected > 0, "no guest tests match {filter}");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/nvme-guest.sh");
    let timeout = timeout_s.to_string();
    let out = Command::new("bash")
        .arg(&script)
        .args(guest_args)
        .args(["--timeout", &timeout, "--"])
        .arg(&exe)
        .args(["--ignored", "--test-threads=1", "--nocapture", filter])
        .output()
        .expect("run scripts/nvme-guest.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the guest tests failed (exit {:?}):\n{stdout}\n{stderr}",
        out.status.code()
    );
    // What ran in the guest, for the log (cargo shows it with --nocapture or on failure).
    println!("{stdout}");
    // The harness's own line: controllers, namespaces, seconds from qemu to the command.
    if let Some(l) = stderr.lines().rev().find(|l| l.starts_with("nvme-guest: ")) {
        println!("{l}");
    }
    let passed = stdout
        .lines()
        .find_map(|l| l.strip_prefix("test result: ok. "))
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse::<usize>().ok());
    assert_eq!(
        passed,
        Some(expected),
        "expected {expected} guest tests to pass:\n{stdout}\n{stderr}"
    );
}

#[test]
fn boot_mixed_controllers() {
    boot(MIXED, "::guest_", 900);
}

/// Paper 000's array: 64 controllers of one namespace each, on 4 vCPUs (CPU 0 housekeeping, the
/// 64 devices' workers on the other 3).
#[test]
fn boot_64_controllers() {
    boot(
        &[
            "--ctrl", "conv:64M", "--ctrls", "64", "--smp", "4", "--mem", "2048",
        ],
        "::guest64_",
        900,
    );
}
