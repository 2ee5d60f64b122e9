//! What a `--lat-log` of a real run will take on disk, said before the run starts (issue 31
//! item 21: a 60 s log at 800 k IOPS wrote 1.16 GB unannounced). `nines sim` knows its I/O count
//! up front (sim_estimate.rs); a real run does not, so with `--ios` the bound is exact and with a
//! runtime the size is given per million IOPS, beside the free space of the log's disk.

use std::path::{Path, PathBuf};

use nines_core::latlog::RECORD_BYTES;
use nines_core::workload::WorkloadSpec;

/// The I/O rate a runtime-bound estimate is given at: one fast NVMe device's 4 KiB random reads.
const RATE_IOPS_REFERENCE: u64 = 1_000_000;

const MIB: f64 = (1u64 << 20) as f64;

fn size_text(bytes: f64) -> String {
    if bytes >= 1024.0 * MIB {
        format!("{:.1} GiB", bytes / (1024.0 * MIB))
    } else {
        format!("{:.1} MiB", bytes / MIB)
    }
}

/// One line for stderr: how large `path` can grow for `jobs` over `targets` targets, and
/// whether its disk has room. `free_bytes` is the free space of the log's directory, if known.
pub fn note(path: &Path, jobs: &[WorkloadSpec], targets: usize, free_bytes: Option<u64>) -> String {
    let record = RECORD_BYTES as f64;
    let targets = targets.max(1) as f64;
    let runtime_s = jobs
        .iter()
        .filter_map(|w| w.runtime_ns)
        .max()
        .map(|ns| ns as f64 / 1e9);
    let ios: Option<f64> = if runtime_s.is_none() {
        jobs.iter()
            .map(|w| w.ios_max.map(|n| n as f64 * targets))
            .sum::<Option<f64>>()
    } else {
        None
    };
    let (bound_bytes, text) = match (ios, runtime_s) {
        (Some(n), _) => (
            n * record,
            format!(
                "at most {} ({} bytes per I/O, {n:.0} I/Os)",
                size_text(n * record),
                RECORD_BYTES
            ),
        ),
        (None, Some(s)) => {
            let b = RATE_IOPS_REFERENCE as f64 * record * s;
            (
                b,
                format!(
                    "{} bytes per measured I/O: {} per second at 1 M IOPS, {} over this run's {s:.0} s",
                    RECORD_BYTES,
                    size_text(RATE_IOPS_REFERENCE as f64 * record),
                    size_text(b)
                ),
            )
        }
        (None, None) => (0.0, format!("{RECORD_BYTES} bytes per measured I/O")),
    };
    let free = match free_bytes {
        Some(f) if bound_bytes > f as f64 => {
            format!("; only {} free on its disk", size_text(f as f64))
        }
        Some(f) => format!("; {} free on its disk", size_text(f as f64)),
        None => String::new(),
    };
    format!("--lat-log {}: {text}{free}", path.display())
}

/// The folder whose free space a log at `path` uses.
pub fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(runtime_ns: Option<u64>, ios_max: Option<u64>) -> WorkloadSpec {
        WorkloadSpec {
            runtime_ns,
            ios_max,
            ..WorkloadSpec::default()
        }
    }

    #[test]
    fn ios_give_an_exact_bound_and_runtime_a_rate() {
        let p = Path::new("run.lat");
        // 3 targets x 1000 I/Os x 24 bytes.
        let n = note(p, &[spec(None, Some(1000))], 3, Some(1 << 30));
        assert_eq!(
            n,
            "--lat-log run.lat: at most 0.1 MiB (24 bytes per I/O, 3000 I/Os); 1.0 GiB free on its disk"
        );
        // 60 s at 1 M IOPS x 24 bytes = 1.44e9 bytes = 1.3 GiB, more than 1 GiB free.
        let n = note(p, &[spec(Some(60_000_000_000), None)], 1, Some(1 << 30));
        assert_eq!(
            n,
            "--lat-log run.lat: 24 bytes per measured I/O: 22.9 MiB per second at 1 M IOPS, 1.3 GiB over this run's 60 s; only 1.0 GiB free on its disk"
        );
        assert_eq!(dir_of(p), PathBuf::from("."));
        assert_eq!(dir_of(Path::new("/tmp/x.lat")), PathBuf::from("/tmp"));
    }
}
