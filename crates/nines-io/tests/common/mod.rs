//! Helpers shared by the engine and target tests: zram devices the tests create and remove,
//! a directory where O_DIRECT works, and a loop that drives an engine over a list of I/Os.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nines_core::op::Op;
use nines_io::buf::BufPool;
use nines_io::engine::{Completion, Engine, IoDesc};

/// A zram block device created by this test and removed when dropped.
pub struct Zram {
    pub index: u32,
    pub path: PathBuf,
}

impl Zram {
    /// Creates a zram device of `size` (e.g. "64M"). Returns None, after printing why, where
    /// zram cannot be used (no zram-control, not root).
    pub fn create(size: &str) -> Option<Zram> {
        let ctl = Path::new("/sys/class/zram-control/hot_add");
        if !ctl.exists() {
            eprintln!(
                "SKIP: /sys/class/zram-control is missing (modprobe zram, as root, to run this test)"
            );
            return None;
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIP: zram tests need root");
            return None;
        }
        let index: u32 = std::fs::read_to_string(ctl)
            .expect("read hot_add")
            .trim()
            .parse()
            .expect("hot_add index");
        let z = Zram {
            index,
            path: PathBuf::from(format!("/dev/zram{index}")),
        };
        std::fs::write(format!("/sys/block/zram{index}/disksize"), size)
            .expect("set zram disksize");
        // udev creates the node; wait a little for it.
        for _ in 0..200 {
            if z.path.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(z.path.exists(), "{} did not appear", z.path.display());
        Some(z)
    }

    pub fn name(&self) -> String {
        format!("zram{}", self.index)
    }

    /// sha256 of `len` bytes from the start (None = whole device), read with O_DIRECT.
    pub fn sha256(&self, len_mib: Option<u64>) -> String {
        sha256_of(&self.path, len_mib)
    }
}

impl Drop for Zram {
    fn drop(&mut self) {
        // The device may still be busy for a moment after its last close (udev probes it).
        for _ in 0..100 {
            if std::fs::write("/sys/class/zram-control/hot_remove", self.index.to_string()).is_ok()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("warning: could not remove zram{}", self.index);
    }
}

/// sha256 of the first `len_mib` MiB (or all) of a file or device, via dd and sha256sum.
pub fn sha256_of(path: &Path, len_mib: Option<u64>) -> String {
    let count = len_mib.map(|n| format!(" count={n}")).unwrap_or_default();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "dd if={} bs=1M iflag=direct status=none{count} | sha256sum",
            path.display()
        ))
        .output()
        .expect("run dd | sha256sum");
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// Runs a command and asserts it succeeded.
pub fn run(cmd: &str) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .expect("spawn sh");
    assert!(
        out.status.success(),
        "`{cmd}` failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A temporary directory on a filesystem that accepts O_DIRECT.
pub fn direct_dir() -> tempfile::TempDir {
    for base in ["/tmp", "/var/tmp", "/work"] {
        let Ok(dir) = tempfile::Builder::new()
            .prefix("nines-io-test")
            .tempdir_in(base)
        else {
            continue;
        };
        let probe = dir.path().join("probe");
        let mut f = std::fs::File::create(&probe).unwrap();
        f.write_all(&[0u8; 4096]).unwrap();
        drop(f);
        let c = std::ffi::CString::new(probe.to_str().unwrap()).unwrap();
        // SAFETY: valid path.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECT) };
        if fd >= 0 {
            // SAFETY: fd is ours.
            unsafe { libc::close(fd) };
            return dir;
        }
    }
    panic!("no directory in /tmp, /var/tmp or /work accepts O_DIRECT");
}

/// One I/O of a test plan.
#[derive(Clone, Copy, Debug)]
pub struct PlanIo {
    pub target: usize,
    pub op: Op,
    pub offset_bytes: u64,
    pub len_bytes: u32,
}

/// The byte pattern of block `block` of target `target` written by `tag`: distinct for every
/// (tag, target, block, position), so a misplaced or torn I/O shows up.
pub fn pattern_byte(tag: u8, target: usize, offset_bytes: u64, pos: usize) -> u8 {
    let x = (offset_bytes + pos as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((target as u64) << 32 | tag as u64);
    (x >> 56) as u8 ^ (x >> 17) as u8
}

/// Drives `engine` over `plan` with up to `depth` I/Os in flight. Writes carry
/// `pattern_byte(tag, ...)`; every read is passed to `check(io, data)`. Returns every result in
/// plan order. Panics on an engine error.
pub fn drive(
    engine: &mut dyn Engine,
    plan: &[PlanIo],
    depth: usize,
    tag: u8,
    check: impl FnMut(&PlanIo, &[u8]),
) -> Vec<i64> {
    drive_with(engine, plan, depth, tag, false, check).0
}

/// `drive`, optionally registering the buffers with the engine first; also returns what
/// `register_buffers` said.
pub fn drive_with(
    engine: &mut dyn Engine,
    plan: &[PlanIo],
    depth: usize,
    tag: u8,
    register: bool,
    mut check: impl FnMut(&PlanIo, &[u8]),
) -> (Vec<i64>, bool) {
    let len_max = plan
        .iter()
        .map(|p| p.len_bytes as usize)
        .max()
        .unwrap_or(4096);
    let mut pool = BufPool::new(depth, len_max);
    let registered = if register {
        let regions: Vec<(*mut u8, usize)> = (0..depth).map(|s| (pool.ptr(s), len_max)).collect();
        engine.register_buffers(&regions).expect("register_buffers")
    } else {
        false
    };
    let mut free: Vec<usize> = (0..depth).rev().collect();
    let mut slot_io = vec![usize::MAX; depth];
    let mut results = vec![i64::MIN; plan.len()];
    let mut comps = vec![Completion::default(); depth];
    let mut next = 0;
    let mut done = 0;
    let mut rounds = 0u64;
    while done < plan.len() {
        rounds += 1;
        assert!(rounds < 10_000_000, "no progress");
        let mut queued = 0;
        while next < plan.len() {
            let Some(slot) = free.pop() else { break };
            let io = plan[next];
            if io.op == Op::Write {
                let buf = &mut pool.get_mut(slot).as_mut_slice()[..io.len_bytes as usize];
                for (i, b) in buf.iter_mut().enumerate() {
                    *b = pattern_byte(tag, io.target, io.offset_bytes, i);
                }
            } else {
                pool.get_mut(slot).as_mut_slice().fill(0xEE);
            }
            engine
                .queue(IoDesc {
                    target: io.target,
                    op: io.op,
                    offset_bytes: io.offset_bytes,
                    len_bytes: io.len_bytes,
                    buf: pool.ptr(slot),
                    user_data: slot as u64,
                })
                .expect("queue");
            slot_io[slot] = next;
            next += 1;
            queued += 1;
        }
        if queued > 0 {
            engine.commit().expect("commit");
        }
        let n = engine.reap(1, &mut comps).expect("reap");
        for c in &comps[..n] {
            let slot = c.user_data as usize;
            let i = slot_io[slot];
            assert_ne!(i, usize::MAX, "completion for a free slot {slot}");
            results[i] = c.result;
            if plan[i].op == Op::Read && c.result == plan[i].len_bytes as i64 {
                check(
                    &plan[i],
                    &pool.get(slot).as_slice()[..plan[i].len_bytes as usize],
                );
            }
            slot_io[slot] = usize::MAX;
            free.push(slot);
            done += 1;
        }
    }
    (results, registered)
}

/// A check that the data read is `tag`'s pattern.
pub fn expect_pattern(tag: u8) -> impl FnMut(&PlanIo, &[u8]) {
    move |io, data| {
        for (i, &b) in data.iter().enumerate() {
            let want = pattern_byte(tag, io.target, io.offset_bytes, i);
            assert_eq!(
                b, want,
                "target {} offset {} byte {i}: read {b:#x}, wrote {want:#x}",
                io.target, io.offset_bytes
            );
        }
    }
}

/// Every block of `[0, blocks * bs)` of each target once, in a scrambled order, interleaving
/// the targets.
pub fn plan_all_blocks(targets: usize, blocks: u64, bs: u32, op: Op) -> Vec<PlanIo> {
    let mut v = Vec::new();
    for k in 0..blocks {
        // A permutation of 0..blocks (blocks a power of two, odd multiplier).
        let b = (k.wrapping_mul(40503) + 17) % blocks;
        for t in 0..targets {
            v.push(PlanIo {
                target: t,
                op,
                offset_bytes: b * bs as u64,
                len_bytes: bs,
            });
        }
    }
    v
}
