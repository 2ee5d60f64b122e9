//! CPU placement and scheduling of the worker threads: the paper's Fig. 5 arrangement (devices
//! assigned round-robin over chosen CPUs, one worker per CPU), pinning, SCHED_FIFO, memory locking,
//! and the per-thread resource usage that shows interference (CPU time, context switches).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// Errors from placement and scheduling; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum SchedError {
    #[error("--cpus is empty: give at least one CPU, e.g. --cpus 0-1")]
    NoCpus,
    #[error(
        "CPU {cpu} is not available to this process (allowed: {allowed}); pick CPUs from that list"
    )]
    CpuNotAllowed { cpu: usize, allowed: String },
    #[error("cannot pin a worker to CPU {cpu}: {error}")]
    Pin { cpu: usize, error: io::Error },
    #[error(
        "--rt-priority {priority}: SCHED_FIFO is not permitted ({error}); run as root, grant \
         CAP_SYS_NICE (setcap cap_sys_nice+ep nines), or raise `ulimit -r` to at least {priority}"
    )]
    RtDenied { priority: u32, error: io::Error },
    #[error("--rt-priority {priority} is out of range: SCHED_FIFO priorities are {min}..={max}")]
    RtRange { priority: u32, min: i32, max: i32 },
    #[error(
        "cannot lock the I/O path's memory ({error}; RLIMIT_MEMLOCK is {limit}); run as root, \
         raise the limit with `ulimit -l unlimited`, or pass --no-mlock"
    )]
    Mlock { limit: String, error: io::Error },
}

/// Set by the SIGINT/SIGTERM handler; the driver's collector sees it and stops the workers.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_signal: libc::c_int) {
    // Async-signal-safe: one lock-free atomic store, nothing else.
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// Installs a SIGINT and SIGTERM handler that only sets a flag ([`interrupted`]), so a run stops
/// its workers, reports what it measured and removes its temporary files. The handler resets to
/// the default on delivery (SA_RESETHAND): a second Ctrl-C kills at once.
pub fn install_interrupt_handler() -> io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler is an extern "C" fn doing only an
        // atomic store, which is async-signal-safe.
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_interrupt as *const () as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether SIGINT or SIGTERM arrived since [`install_interrupt_handler`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Stops a run from code (what SIGINT does): a `profile` in progress reports what it measured.
/// The flag stays set for the rest of the process, as after a signal.
pub fn interrupt() {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// The CPUs this process may run on, sorted.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        let n = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        return (0..n).collect();
    }
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Checks a CPU list against the CPUs this process may use.
pub fn check_cpus(cpus: &[usize]) -> Result<(), SchedError> {
    if cpus.is_empty() {
        return Err(SchedError::NoCpus);
    }
    let allowed = allowed_cpus();
    for &cpu in cpus {
        if !allowed.contains(&cpu) {
            let list: Vec<String> = allowed.iter().map(|c| c.to_string()).collect();
            return Err(SchedError::CpuNotAllowed {
                cpu,
                allowed: list.join(","),
            });
        }
    }
    Ok(())
}

/// Device `i` goes to `cpus[i % cpus.len()]`: round-robin, as in the paper's Fig. 5.
pub fn assign_round_robin(devices: usize, cpus: &[usize]) -> Vec<usize> {
    assert!(
        !cpus.is_empty(),
        "assign_round_robin needs at least one CPU"
    );
    (0..devices).map(|i| cpus[i % cpus.len()]).collect()
}

/// Round-robin placement in which isolated volumes (`--isolate`) get CPUs of their own where the
/// list has CPUs to spare: with fewer CPUs than volumes (so some must share) and more CPUs than
/// isolated volumes, each isolated volume takes one of the last CPUs of the list and the others
/// go round-robin over the rest. Otherwise it is plain round-robin: every volume already has a
/// CPU of its own (as with a placement plan, one CPU per target), or there is none to spare and
/// an isolated volume still gets a worker thread of its own on a shared CPU.
pub fn assign_isolating(cpus: &[usize], isolated: &[bool]) -> Vec<usize> {
    let n = isolated.len();
    let k = isolated.iter().filter(|&&x| x).count();
    if k == 0 || cpus.len() >= n || cpus.len() <= k {
        return assign_round_robin(n, cpus);
    }
    let (shared, own) = cpus.split_at(cpus.len() - k);
    let (mut next_shared, mut next_own) = (0, 0);
    isolated
        .iter()
        .map(|&iso| {
            if iso {
                next_own += 1;
                own[next_own - 1]
            } else {
                next_shared += 1;
                shared[(next_shared - 1) % shared.len()]
            }
        })
        .collect()
}

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> Result<(), SchedError> {
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it; the size passed is its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(SchedError::Pin {
            cpu,
            error: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Checks a SCHED_FIFO priority against the kernel's range.
pub fn check_rt_priority(priority: u32) -> Result<(), SchedError> {
    // SAFETY: plain syscalls without pointers.
    let min = unsafe { libc::sched_get_priority_min(libc::SCHED_FIFO) };
    let max = unsafe { libc::sched_get_priority_max(libc::SCHED_FIFO) };
    if (priority as i64) < min as i64 || (priority as i64) > max as i64 {
        return Err(SchedError::RtRange { priority, min, max });
    }
    Ok(())
}

/// Runs the calling thread under SCHED_FIFO at `priority`.
pub fn set_fifo_current_thread(priority: u32) -> Result<(), SchedError> {
    check_rt_priority(priority)?;
    let param = libc::sched_param {
        sched_priority: priority as i32,
    };
    // SAFETY: `param` is valid for the call; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc != 0 {
        return Err(SchedError::RtDenied {
            priority,
            error: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Checks up front (on a throw-away thread) that SCHED_FIFO is permitted, so the run fails before
/// any output or worker exists.
pub fn probe_rt_priority(priority: u32) -> Result<(), SchedError> {
    check_rt_priority(priority)?;
    std::thread::scope(|s| s.spawn(|| set_fifo_current_thread(priority)).join()).unwrap_or(Ok(()))
}

fn memlock_limit_text() -> String {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid rlimit to write into.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) } != 0 {
        return "unknown".into();
    }
    if rl.rlim_cur == libc::RLIM_INFINITY {
        "unlimited".into()
    } else {
        format!("{} KiB", rl.rlim_cur / 1024)
    }
}

/// Locks every current and future page of the process in memory (mlockall), so the hot path never
/// takes a page fault on its buffers, histograms or stacks. Undo with [`unlock_memory`].
pub fn lock_memory() -> Result<(), SchedError> {
    // SAFETY: plain syscall without pointers.
    let rc = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) };
    if rc != 0 {
        return Err(SchedError::Mlock {
            limit: memlock_limit_text(),
            error: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Undoes [`lock_memory`].
pub fn unlock_memory() {
    // SAFETY: plain syscall without pointers; failure leaves pages locked, which is harmless.
    unsafe { libc::munlockall() };
}

/// Resource usage of one thread.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ThreadUsage {
    pub usr_cpu_s: f64,
    pub sys_cpu_s: f64,
    pub ctx_voluntary: u64,
    pub ctx_involuntary: u64,
}

impl ThreadUsage {
    /// The calling thread's usage so far (getrusage RUSAGE_THREAD).
    pub fn current_thread() -> ThreadUsage {
        // SAFETY: rusage is plain data written by the kernel.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
        if rc != 0 {
            return ThreadUsage::default();
        }
        let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
        ThreadUsage {
            usr_cpu_s: secs(ru.ru_utime),
            sys_cpu_s: secs(ru.ru_stime),
            ctx_voluntary: ru.ru_nvcsw as u64,
            ctx_involuntary: ru.ru_nivcsw as u64,
        }
    }

    /// Usage accumulated between `earlier` and `self`.
    pub fn since(&self, earlier: &ThreadUsage) -> ThreadUsage {
        ThreadUsage {
            usr_cpu_s: (self.usr_cpu_s - earlier.usr_cpu_s).max(0.0),
            sys_cpu_s: (self.sys_cpu_s - earlier.sys_cpu_s).max(0.0),
            ctx_voluntary: self.ctx_voluntary.saturating_sub(earlier.ctx_voluntary),
            ctx_involuntary: self.ctx_involuntary.saturating_sub(earlier.ctx_involuntary),
        }
    }
}

/// The soft limit on open files (RLIMIT_NOFILE).
pub fn open_files_limit() -> u64 {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid rlimit to write into.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return u64::MAX;
    }
    rl.rlim_cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_follows_the_cpu_list() {
        assert_eq!(assign_round_robin(5, &[4, 7]), vec![4, 7, 4, 7, 4]);
        assert_eq!(assign_round_robin(2, &[1, 2, 3]), vec![1, 2]);
    }

    #[test]
    fn pins_to_an_allowed_cpu_and_rejects_others() {
        let allowed = allowed_cpus();
        assert!(!allowed.is_empty());
        let cpu = *allowed.last().unwrap();
        std::thread::spawn(move || {
            pin_current_thread(cpu).unwrap();
            // SAFETY: sched_getcpu has no arguments.
            assert_eq!(unsafe { libc::sched_getcpu() }, cpu as i32);
        })
        .join()
        .unwrap();
        let err = check_cpus(&[100_000]).unwrap_err().to_string();
        assert!(err.contains("100000") && err.contains("allowed"), "{err}");
        assert!(matches!(check_cpus(&[]), Err(SchedError::NoCpus)));
    }

    #[test]
    fn rt_priority_range_is_checked() {
        assert!(matches!(
            check_rt_priority(1000),
            Err(SchedError::RtRange { .. })
        ));
    }

    #[test]
    fn thread_usage_grows_with_work() {
        // Work until the thread's own CPU time says 5 ms were spent. On a loaded host 30 ms of
        // wall time held less than 5 ms of CPU, so the bound is wall time, long enough that a
        // counter that never grows fails and a busy host passes.
        let u0 = ThreadUsage::current_thread();
        let mut x = 0u64;
        let t = std::time::Instant::now();
        let mut d = ThreadUsage::current_thread().since(&u0);
        while d.usr_cpu_s + d.sys_cpu_s <= 0.005 && t.elapsed().as_secs() < 20 {
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            d = ThreadUsage::current_thread().since(&u0);
        }
        std::hint::black_box(x);
        assert!(d.usr_cpu_s + d.sys_cpu_s > 0.005, "{d:?}");
    }

    #[test]
    fn isolated_volumes_get_spare_cpus_of_their_own() {
        // Two CPUs, three targets, the last isolated: it takes CPU 1, the others share CPU 0.
        assert_eq!(assign_isolating(&[0, 1], &[false, false, true]), [0, 0, 1]);
        // The isolated one first in target order: same CPUs.
        assert_eq!(assign_isolating(&[0, 1], &[true, false, false]), [1, 0, 0]);
        // Nothing isolated, a CPU each already, or no CPU to spare: round-robin.
        assert_eq!(assign_isolating(&[0, 1], &[false; 3]), [0, 1, 0]);
        assert_eq!(
            assign_isolating(&[4, 5, 6], &[true, false, true]),
            [4, 5, 6]
        );
        assert_eq!(assign_isolating(&[3], &[true, false]), [3, 3]);
        assert_eq!(assign_isolating(&[0, 1], &[true, true, false]), [0, 1, 0]);
    }
}
