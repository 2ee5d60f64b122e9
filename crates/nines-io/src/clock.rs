//! The driver's one clock: CLOCK_MONOTONIC in nanoseconds.
//!
//! Read through `clock_gettime` directly (a vDSO call, about 20 ns) rather than `Instant`, because
//! the generator and the logs need the raw nanosecond count as a `u64` time origin.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_and_sleeps_until_deadline() {
        let a = now_ns();
        sleep_until_ns(a + 2_000_000);
        let b = now_ns();
        assert!(b >= a + 2_000_000, "slept {} ns", b - a);
        assert!(unix_now_ns() > 1_600_000_000_000_000_000);
    }
}
