//! Helpers shared by the binary's integration tests: running nines, and zram block devices that a
//! test creates and removes. Each test file uses a different subset, hence the allow.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub mod nbd;
pub mod serving;

/// Runs the nines binary in the current directory.
pub fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nines"))
        .args(args)
        .output()
        .expect("run nines")
}

/// Asserts that a run succeeded, showing its stderr when it did not.
pub fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "nines failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the nines binary in `dir`.
pub fn nines(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nines"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run nines")
}

pub fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A temporary directory on the disk-backed filesystem (O_DIRECT works there; /tmp may be tmpfs).
pub fn disk_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("nines-test")
        .tempdir_in("/var/tmp")
        .unwrap()
}

/// A file of `bytes` bytes of non-repeating data.
pub fn make_file(dir: &Path, name: &str, bytes: usize) -> PathBuf {
    use std::io::Write;
    let path = dir.join(name);
    let data: Vec<u8> = (0..bytes)
        .map(|i| (i.wrapping_mul(2654435761) >> 7) as u8)
        .collect();
    std::fs::File::create(&path)
        .unwrap()
        .write_all(&data)
        .unwrap();
    path
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The real traces: the repository's `traces/`, or `$NINES_TRACES_DIR` (relative to the
/// repository's root). Panics when missing: a test that needs them must fail, never pass without
/// them.
pub fn traces_dir() -> PathBuf {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    nines_trace::shared_traces_dir(&repo).unwrap_or_else(|e| panic!("{e}"))
}

/// A program of the Python tools scripts/setup.sh installs (fio-plot, python with hdrh and six):
/// `$NINES_VENV/bin/NAME`, else `.venv/bin/NAME` in the repository. Panics when missing: the
/// interoperability tests must fail, never pass, without the tools they check against.
pub fn venv_bin(name: &str) -> PathBuf {
    let venv = match std::env::var_os("NINES_VENV") {
        Some(v) => PathBuf::from(v),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv"),
    };
    let bin = venv.join("bin").join(name);
    assert!(
        bin.exists(),
        "{} is missing; run `bash scripts/setup.sh` (it installs the pinned Python tools) or set NINES_VENV",
        bin.display()
    );
    bin
}

/// A system program the tests compare against (installed by scripts/setup.sh); panics when absent.
pub fn system_tool(path: &str) -> PathBuf {
    let p = PathBuf::from(path);
    assert!(
        p.exists(),
        "{path} is missing; run `bash scripts/setup.sh` (it installs fio and the other tools the tests use)"
    );
    p
}

/// A zram device created for one test and removed afterwards.
pub struct Zram {
    n: u32,
    removed: bool,
}

impl Zram {
    pub fn new(size: &str) -> Zram {
        let n: u32 = std::fs::read_to_string("/sys/class/zram-control/hot_add")
            .expect("zram is needed: modprobe zram")
            .trim()
            .parse()
            .unwrap();
        std::fs::write(format!("/sys/block/zram{n}/disksize"), size).unwrap();
        Zram { n, removed: false }
    }
    pub fn path(&self) -> String {
        format!("/dev/zram{}", self.n)
    }
    /// The device's sysfs attribute `name` (`/sys/block/zramN/NAME`).
    pub fn attr(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/sys/block/zram{}/{name}", self.n))
    }
    /// Removes the device from the system now (zram hot_remove); fails (EBUSY) while anyone
    /// holds it open.
    pub fn hot_remove(&mut self) -> std::io::Result<()> {
        std::fs::write("/sys/class/zram-control/hot_remove", self.n.to_string())?;
        self.removed = true;
        Ok(())
    }
}

impl Drop for Zram {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        for _ in 0..50 {
            if std::fs::write("/sys/class/zram-control/hot_remove", self.n.to_string()).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// afa-m2-2018's flash with a `[zoned]` section (`dir/zoned.toml`), shrunk so xGC runs within
/// seconds: 512 KiB
/// blocks (32 pages), a zone one block on each of the 64 dies (32 MiB), 40 zones per device.
pub fn zoned_toml(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../nines-flash/presets");
    let text = std::fs::read_to_string(root.join("afa-m2-2018.toml")).unwrap();
    let mut out = String::new();
    for line in text.lines() {
        let l = line.trim_start();
        let line = if l.starts_with("capacity_bytes") {
            continue;
        } else if l.starts_with("name =") {
            "name = \"afa-zoned-small\"".to_string()
        } else if l.starts_with("blocks_per_plane") {
            "blocks_per_plane = 20".to_string()
        } else if l.starts_with("pages_per_block") {
            "pages_per_block = 32".to_string()
        } else if l.starts_with("over_provisioning") {
            // The FTL a zoned device never uses must still satisfy its rules.
            "over_provisioning = 0.3".to_string()
        } else {
            line.to_string()
        };
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(
        "\n[zoned]\nzone_size_bytes = 33_554_432\nzone_capacity_bytes = 33_554_432\n\
         max_open_zones = 4\nmax_active_zones = 4\n",
    );
    let p = dir.join("zoned.toml");
    std::fs::write(&p, out).unwrap();
    p
}

/// A loop device over a file, made for one test (`losetup -f --show`, with `extra` options such
/// as `--offset`/`--sizelimit`) and detached on drop, also when the test fails.
pub struct Loop {
    dev: String,
}

impl Loop {
    pub fn new(file: &Path, extra: &[&str]) -> Loop {
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .args(extra)
            .arg(file)
            .output()
            .expect("losetup (util-linux) runs");
        assert!(
            out.status.success(),
            "losetup {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Loop {
            dev: String::from_utf8(out.stdout).unwrap().trim().to_string(),
        }
    }
    pub fn path(&self) -> &str {
        &self.dev
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        for _ in 0..50 {
            let st = Command::new("losetup").args(["-d", &self.dev]).status();
            if st.is_ok_and(|s| s.success()) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// `n` sparse files `dir/{prefix}{i}.img` of `size_bytes` each (members of a test volume).
pub fn sized_files(dir: &Path, prefix: &str, n: usize, size_bytes: u64) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let p = dir.join(format!("{prefix}{i}.img"));
            std::fs::File::create(&p)
                .unwrap()
                .set_len(size_bytes)
                .unwrap();
            p
        })
        .collect()
}

/// Waits for `child` at most `limit`; past it the child is killed and the test fails naming
/// `what`.
pub fn wait_bounded(
    child: &mut std::process::Child,
    limit: std::time::Duration,
    what: &str,
) -> std::process::ExitStatus {
    let t0 = std::time::Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} ran past {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
