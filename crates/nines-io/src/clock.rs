//! The driver's one clock: CLOCK_MONOTONIC in nanoseconds.
//!
//! Read through `clock_gettime` directly (a vDSO call, about 20 ns) rather than `Instant`, because
//! the generator and the logs need the raw nanosecond count as a `u64` time origin.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Nanoseconds of CLOCK_MONOTONIC.
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Nanoseconds since the Unix epoch (CLOCK_REALTIME), for log headers and reports only.
pub fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns` (absolute, so no drift accumulates).
pub fn sleep_until_ns(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // Bounded: EINTR is the only retry reason, and each retry sleeps towards the same deadline.
    for _ in 0..1000 {
        // SAFETY: `ts` is a valid timespec; the remaining-time pointer may be null with TIMER_ABSTIME.
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        if rc != libc::EINTR {
            return;
        }
    }
}

/// The least a precise wait wakes early from its sleep to spin the rest (fio's `thinktime_spin`
/// idea): about the wake-up latency of a sleeping thread on a quiet host (timer slack 50 us).
pub const SPIN_WINDOW_NS: u64 = 60_000;
/// The most: a host that wakes later than this is too busy to be worth spinning for.
const SPIN_WINDOW_MAX_NS: u64 = 500_000;

/// Longest single sleep of [`wait_until_ns`], so a long wait still notices `abort` promptly.
const SLEEP_SLICE_NS: u64 = 100_000_000;

/// How late sleeps have woken, a moving average of what was measured. Shared by all workers: it
/// is a property of the host (timer slack, virtualisation), not of a thread.
static SLEEP_LATE_NS: AtomicU64 = AtomicU64::new(SPIN_WINDOW_NS);

/// Waits precisely until CLOCK_MONOTONIC reaches `deadline_ns`: sleeps until a little more than
/// the usual wake-up lateness before it (at least `SPIN_WINDOW_NS`), then spins on the clock.
/// Returns early when `abort` is set (checked between sleep slices). Bounded: the sleep slices
/// and the spin both end at the deadline.
pub fn wait_until_ns(deadline_ns: u64, abort: &AtomicBool) {
    let late_ns = SLEEP_LATE_NS.load(Ordering::Relaxed);
    let window_ns = (late_ns + late_ns / 2).clamp(SPIN_WINDOW_NS, SPIN_WINDOW_MAX_NS);
    let wake_ns = deadline_ns.saturating_sub(window_ns);
    loop {
        if abort.load(Ordering::Relaxed) {
            return;
        }
        let now = now_ns();
        if now >= wake_ns {
            break;
        }
        let target = wake_ns.min(now + SLEEP_SLICE_NS);
        sleep_until_ns(target);
        // A moving average (1/8 per sample), with samples capped: a preemption on a busy host
        // must not turn every later wait into a long spin, which would only invite more.
        let sample_ns = now_ns().saturating_sub(target).min(SPIN_WINDOW_MAX_NS) as i64;
        let next = late_ns as i64 + (sample_ns - late_ns as i64) / 8;
        SLEEP_LATE_NS.store(next.max(0) as u64, Ordering::Relaxed);
    }
    while now_ns() < deadline_ns {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precise_wait_meets_the_deadline_closely() {
        let abort = std::sync::atomic::AtomicBool::new(false);
        let mut late_ns = Vec::new();
        for wait_ns in [10_000u64, 100_000, 1_000_000] {
            for _ in 0..20 {
                let deadline = now_ns() + wait_ns;
                wait_until_ns(deadline, &abort);
                let t = now_ns();
                assert!(t >= deadline);
                late_ns.push(t - deadline);
            }
        }
        late_ns.sort_unstable();
        // Median lateness: a plain sleep is typically 50-100 us late; the spin makes it ~0.
        let median = late_ns[late_ns.len() / 2];
        assert!(median < 10_000, "median lateness {median} ns: {late_ns:?}");
    }

    #[test]
    fn precise_wait_returns_on_abort() {
        let abort = std::sync::atomic::AtomicBool::new(true);
        let t = now_ns();
        wait_until_ns(t + 10_000_000_000, &abort);
        assert!(now_ns() - t < 1_000_000_000);
    }

    #[test]
    fn monotonic_and_sleeps_until_deadline() {
        let a = now_ns();
        sleep_until_ns(a + 2_000_000);
        let b = now_ns();
        assert!(b >= a + 2_000_000, "slept {} ns", b - a);
        assert!(unix_now_ns() > 1_600_000_000_000_000_000);
    }
}
