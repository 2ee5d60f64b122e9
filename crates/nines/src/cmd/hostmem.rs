//! This host's memory (/proc/meminfo), for checking memory budgets up front: a budget the host
//! cannot give would abort the process on allocation (SIGABRT) instead of failing with a message.

use anyhow::{Result, bail};

/// MemTotal and MemAvailable of /proc/meminfo, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostMemory {
    pub total_bytes: u64,
    /// What can be allocated without swapping (MemAvailable; MemFree on kernels before 3.14).
    pub available_bytes: u64,
}

/// Parses /proc/meminfo's text; None when MemTotal is missing or malformed.
pub fn parse_meminfo(text: &str) -> Option<HostMemory> {
    let field = |name: &str| -> Option<u64> {
        let line = text
            .lines()
            .find(|l| l.split_once(':').is_some_and(|(k, _)| k.trim() == name))?;
        let mut words = line.split_once(':')?.1.split_whitespace();
        let v: u64 = words.next()?.parse().ok()?;
        let scale = match words.next() {
            None => 1,
            Some(u) if u.eq_ignore_ascii_case("kb") => 1024,
            Some(_) => return None,
        };
        Some(v.saturating_mul(scale))
    };
    let total_bytes = field("MemTotal")?;
    let available_bytes = field("MemAvailable")
        .or_else(|| field("MemFree"))
        .unwrap_or(total_bytes)
        .min(total_bytes);
    Some(HostMemory {
        total_bytes,
        available_bytes,
    })
}

/// This host's memory, or None when /proc/meminfo cannot be read (then nothing is checked).
pub fn host_memory() -> Option<HostMemory> {
    parse_meminfo(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// The most requests a replayed trace may hold: half of the memory available now, at
/// `record_bytes` each (the rest is for the run itself). None when the host's memory is unknown.
pub fn trace_records_max(record_bytes: u64, host: Option<HostMemory>) -> Option<u64> {
    host.map(|h| (h.available_bytes / 2 / record_bytes.max(1)).max(1))
}

/// What `nines serve`'s large request buffers may take at once: half of what the host has
/// available now (nines-io's default when the host's memory is unknown).
pub fn serve_buffer_budget_bytes() -> u64 {
    host_memory().map_or(nines_io::serve::BUFFER_BUDGET_DEFAULT_BYTES, |h| {
        h.available_bytes / 2
    })
}

/// A memory budget's default: `default_bytes`, or less when the host has less available.
pub fn default_budget(default_bytes: u64, host: Option<HostMemory>) -> u64 {
    host.map_or(default_bytes, |h| {
        default_bytes.min(h.total_bytes / 2).min(h.available_bytes)
    })
}

/// Refuses a budget (`option`, e.g. "--memory-budget") larger than the memory the host has
/// available now.
pub fn check_budget(option: &str, budget_bytes: u64, host: Option<HostMemory>) -> Result<()> {
    if let Some(h) = host
        && budget_bytes > h.available_bytes
    {
        bail!(
            "{option} {} MiB is more than this host's available memory ({} MiB available of {} MiB); give at most {}m",
            budget_bytes >> 20,
            h.available_bytes >> 20,
            h.total_bytes >> 20,
            h.available_bytes >> 20
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str = "MemTotal:       24684544 kB\nMemFree:         7880704 kB\n\
                           MemAvailable:   10485760 kB\nBuffers:          123 kB\n";

    #[test]
    fn meminfo_is_read_in_bytes() {
        let h = parse_meminfo(MEMINFO).unwrap();
        assert_eq!(h.total_bytes, 24_684_544 * 1024);
        assert_eq!(h.available_bytes, 10 << 30);
        // Old kernels have no MemAvailable: MemFree stands in.
        let old = parse_meminfo("MemTotal: 2048 kB\nMemFree: 1024 kB\n").unwrap();
        assert_eq!(old.available_bytes, 1 << 20);
        assert_eq!(parse_meminfo("MemFree: 1 kB\n"), None);
        assert_eq!(parse_meminfo("MemTotal: x kB\n"), None);
        assert_eq!(parse_meminfo(""), None);
    }

    #[test]
    fn budgets_above_the_available_memory_are_refused() {
        let h = parse_meminfo(MEMINFO);
        // Below MemTotal but above MemAvailable: allocation could fail half-way.
        let e = check_budget("--memory-budget", 20 << 30, h)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--memory-budget 20480 MiB")
                && e.contains("available memory (10240 MiB available of 24106 MiB)")
                && e.contains("at most 10240m"),
            "{e}"
        );
        check_budget("--memory-budget", 10 << 30, h).unwrap();
        check_budget("--memory-budget", 1 << 50, None).unwrap();
        assert_eq!(default_budget(8 << 30, h), 8 << 30);
        // 1 GiB available: 512 MiB of 48-byte requests.
        let host = parse_meminfo("MemTotal: 4194304 kB\nMemAvailable: 1048576 kB\n");
        assert_eq!(trace_records_max(48, host), Some((512 << 20) / 48));
        assert_eq!(trace_records_max(48, None), None);
        let small = parse_meminfo("MemTotal: 4194304 kB\nMemAvailable: 1048576 kB\n");
        assert_eq!(default_budget(8 << 30, small), 1 << 30);
        assert_eq!(default_budget(8 << 30, None), 8 << 30);
    }
}
