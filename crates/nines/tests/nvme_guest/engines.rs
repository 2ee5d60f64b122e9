//! Every I/O engine of `nines profile` on a namespace of the kernel's nvme driver: each
//! completes, its I/O counts are the ones the block layer saw, and `--verify` reads back what it
//! wrote; `io_uring-poll` completes on a poll queue (no interrupts).

use crate::guest::{block_ios, in_guest, interrupts, nines_ok, report};

const DEV: &str = "/dev/nvme0n1";
/// The region every run uses: filled once with the verify pattern, then rewritten by each run
/// with the same seed, so every read of it must verify.
const REGION: &str = "32M";
const IOS: u64 = 3000;

/// Fills the region with the verify pattern (seed 1), sequentially.
fn fill() {
    nines_ok(&[
        "profile",
        DEV,
        "--rw",
        "write",
        "--bs",
        "4k",
        "--size",
        REGION,
        "--ios",
        "8192",
        "--iodepth",
        "16",
        "--engine",
        "io_uring",
        "--verify",
        "--allow-writes",
    ]);
}

/// One randrw run of `IOS` I/Os on the block device with `engine` (and `extra` flags).
fn run(engine: &str, extra: &[&str]) -> (serde_json::Value, (u64, u64)) {
    run_on(DEV, engine, extra)
}

/// One randrw run of `IOS` I/Os on `dev` (the namespace's block or generic device) with
/// `engine` (and `extra` flags), with --verify; returns the report and the namespace's
/// block-layer (reads, writes) during it.
fn run_on(dev: &str, engine: &str, extra: &[&str]) -> (serde_json::Value, (u64, u64)) {
    let json = std::env::temp_dir().join(format!("engine-{engine}{}.json", extra.join("")));
    let ios = IOS.to_string();
    let before = block_ios("nvme0n1");
    let mut args = vec![
        "profile",
        dev,
        "--rw",
        "randrw",
        "--bs",
        "4k",
        "--size",
        REGION,
        "--ios",
        &ios,
        "--iodepth",
        "8",
        "--engine",
        engine,
        "--verify",
        "--allow-writes",
        "--cpus",
        "1",
        "--json",
    ];
    let j = json.to_str().unwrap().to_string();
    args.push(&j);
    args.extend_from_slice(extra);
    nines_ok(&args);
    let after = block_ios("nvme0n1");
    (report(&json), (after.0 - before.0, after.1 - before.1))
}

fn counts(r: &serde_json::Value) -> (u64, u64) {
    let d = &r["devices"][0];
    (
        d["read"]["ios"].as_u64().unwrap(),
        d["write"]["ios"].as_u64().unwrap(),
    )
}

#[test]
#[ignore = "runs inside the NVMe guest (boot_mixed_controllers)"]
fn guest_every_engine_completes_with_exact_counts_and_verify() {
    in_guest();
    fill();
    for (engine, extra) in [
        ("psync", &[][..]),
        ("libaio", &[]),
        ("io_uring", &[]),
        ("io_uring", &["--sqpoll"]),
        ("io_uring-poll", &[]),
    ] {
        let (r, (reads, writes)) = run(engine, extra);
        let (nr, nw) = counts(&r);
        assert_eq!(nr + nw, IOS, "{engine} {extra:?}: the report's I/Os");
        assert!(nr > 0 && nw > 0, "{engine}: randrw did both");
        // Every write nines counted reached the device, and no other: the block layer's count
        // is exact (direct I/O of 4 KiB: no merges or splits). Reads: nines reads the device's
        // first and last sectors before writing (the signature check), so a few more.
        assert_eq!(
            writes, nw,
            "{engine} {extra:?}: writes the block layer completed"
        );
        assert!(
            reads >= nr && reads <= nr + 64,
            "{engine} {extra:?}: block layer reads {reads}, nines {nr}"
        );
        assert_eq!(r["config"]["extra"]["verify"], true);
    }
}

#[test]
#[ignore = "runs inside the NVMe guest (boot_mixed_controllers)"]
fn guest_io_uring_poll_completes_on_a_poll_queue_without_interrupts() {
    in_guest();
    // The guest boots with nvme.poll_queues=1: the driver made a poll queue, and the namespace
    // takes polled I/O.
    assert_eq!(
        crate::guest::read("/sys/module/nvme/parameters/poll_queues"),
        "1"
    );
    assert_eq!(crate::guest::read("/sys/block/nvme0n1/queue/io_poll"), "1");
    let queue_irqs = |v: &[(String, Vec<u64>)]| -> u64 {
        v.iter()
            .filter(|(n, _)| n != "nvme0q0")
            .flat_map(|(_, c)| c.iter())
            .sum()
    };
    let before = queue_irqs(&interrupts("nvme0q"));
    let (r, _) = run("io_uring-poll", &[]);
    let polled = queue_irqs(&interrupts("nvme0q")) - before;
    let (nr, nw) = counts(&r);
    assert_eq!(nr + nw, IOS);
    // The signature check's reads go through interrupt-driven queues; the run's own do not.
    assert!(
        polled < IOS / 20,
        "{polled} queue interrupts during {IOS} polled I/Os"
    );
    // The same run interrupt-driven takes about an interrupt per I/O.
    let before = queue_irqs(&interrupts("nvme0q"));
    run("io_uring", &[]);
    let irq = queue_irqs(&interrupts("nvme0q")) - before;
    assert!(
        irq >= IOS / 4,
        "only {irq} interrupts for {IOS} interrupt-driven I/Os"
    );
}

/// The passthrough engine: NVMe Read/Write commands on /dev/ng0n1 through io_uring's
/// URING_CMD, with no block layer: the same workload completes with the same counts as
/// io_uring on the namespace's block device, its data is the same namespace's (each reads back
/// what the other wrote), and the block layer accounts none of it.
#[test]
#[ignore = "runs inside the NVMe guest (boot_mixed_controllers)"]
fn guest_passthrough_engine_drives_the_generic_device() {
    in_guest();
    fill();
    let (r, (reads, writes)) = run_on("/dev/ng0n1", "io_uring-cmd", &[]);
    let (nr, nw) = counts(&r);
    assert_eq!(nr + nw, IOS);
    assert!(nr > 0 && nw > 0);
    assert_eq!(r["config"]["engine"], "io_uring-cmd");
    assert_eq!(r["devices"][0]["name"], "ng0n1");
    // Passthrough requests are not the block layer's I/O: its counters do not move for them
    // (the signature check reads the block device before writing: a few reads, no writes).
    assert_eq!(writes, 0, "block-layer writes during passthrough");
    assert!(reads < 64, "block-layer reads during passthrough");
    // What the passthrough run wrote verifies through the block device, and vice versa.
    let (r2, _) = run("io_uring", &[]);
    assert_eq!(counts(&r2).0 + counts(&r2).1, IOS);
    // Its completions raised interrupts on the namespace's queues, attributed as for the block
    // device.
    assert!(r["devices"][0]["interrupts"]["total"].as_u64().unwrap() > 0);
    // Polled passthrough: the same commands on an IOPOLL ring, completed from the poll queue.
    let (p, _) = run_on("/dev/ng0n1", "io_uring-cmd-poll", &[]);
    assert_eq!(counts(&p).0 + counts(&p).1, IOS);
    assert_eq!(p["config"]["engine"], "io_uring-cmd-poll");
    let irqs = p["devices"][0]["interrupts"]["total"].as_u64().unwrap();
    assert!(
        irqs < IOS / 20,
        "{irqs} interrupts for {IOS} polled passthrough I/Os"
    );
}

#[test]
#[ignore = "runs inside the NVMe guest (boot_mixed_controllers)"]
fn guest_passthrough_refusals_are_one_line_and_change_nothing() {
    in_guest();
    let one_line = |args: &[&str], needle: &str| {
        let before = block_ios("nvme0n1").1;
        let out = crate::guest::nines(args);
        assert!(!out.status.success(), "{args:?} ran");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert_eq!(block_ios("nvme0n1").1, before, "{args:?} wrote");
    };
    // The block device with the passthrough engine, and the generic device with another.
    one_line(
        &[
            "profile",
            "/dev/nvme0n1",
            "--engine",
            "io_uring-cmd",
            "--ios",
            "10",
        ],
        "/dev/ngXnY",
    );
    one_line(
        &[
            "profile",
            "/dev/ng0n1",
            "--engine",
            "io_uring",
            "--ios",
            "10",
        ],
        "/dev/nvme0n1",
    );
    // Writing the generic device is writing its namespace: the block device's safety rules.
    one_line(
        &[
            "profile",
            "/dev/ng0n1",
            "--engine",
            "io_uring-cmd",
            "--rw",
            "randwrite",
            "--ios",
            "10",
        ],
        "--allow-writes",
    );
    one_line(
        &[
            "profile",
            "/dev/ng0n1",
            "/dev/ng1n1",
            "--engine",
            "io_uring-cmd",
            "--layout",
            "raid0",
            "--ios",
            "10",
        ],
        "independent",
    );
    // Any other character device is not a target.
    one_line(
        &["profile", "/dev/nvme0", "--ios", "10"],
        "character device",
    );
}
