//! io_uring (crate io-uring): one ring serves every target of the engine.
//!
//! - `io_uring`: interrupt-driven completions; `EngineOptions::sqpoll` adds a kernel thread that
//!   polls the submission queue (IORING_SETUP_SQPOLL), pinned with `sqpoll_cpu`.
//! - `io_uring-poll`: IORING_SETUP_IOPOLL, the submitting CPU polls the device's poll queues.
//!   Devices without poll queues are refused in `add_target` (sysfs `queue/io_poll` is 0), and a
//!   first completion with -EOPNOTSUPP (what the block layer returns for them) is turned into
//!   `EngineError::PollUnsupported` too, for devices sysfs could not tell about.
//!
//! Targets are registered as fixed files when the kernel allows a sparse file table, which saves
//! a file-table lookup and reference count per I/O; buffers handed to `register_buffers` become
//! fixed buffers (READ_FIXED/WRITE_FIXED), which saves pinning their pages on every I/O.

use std::os::fd::RawFd;

use io_uring::{IoUring, opcode, types};
use nines_core::op::Op;

use super::{Completion, Engine, EngineError, EngineKind, IoDesc};

/// Slots in the fixed-file table; targets beyond it use plain descriptors.
const FIXED_FILES_MAX: u32 = 1024;
/// Most buffers registered (the kernel's limit, and what a u16 buffer index holds).
const FIXED_BUFS_MAX: usize = 1 << 14;
/// How long the SQPOLL thread spins without work before it sleeps.
const SQPOLL_IDLE_MS: u32 = 1000;

pub(crate) struct Uring {
    ring: IoUring,
    kind: EngineKind,
    fds: Vec<RawFd>,
    /// Size of the registered sparse file table (0 = none).
    fixed_slots: u32,
    in_flight: u32,
    depth_max: u32,
    /// Registered buffers as (start address, end address), sorted by start; the index in this
    /// vector is the kernel's buffer index.
    fixed_bufs: Vec<(usize, usize)>,
}

impl Uring {
    pub(crate) fn new(
        depth_max: u32,
        options: super::EngineOptions,
        poll: bool,
    ) -> Result<Uring, EngineError> {
        let kind = if poll {
            EngineKind::IoUringPoll
        } else {
            EngineKind::IoUring
        };
        let name = kind.name();
        let entries = depth_max.next_power_of_two();
        let mut b = IoUring::builder();
        // The completion queue holds every in-flight I/O, so it can never overflow.
        b.setup_cqsize(entries.max(2) * 2);
        if poll {
            b.setup_iopoll();
        }
        if options.sqpoll {
            b.setup_sqpoll(SQPOLL_IDLE_MS);
            if let Some(cpu) = options.sqpoll_cpu {
                b.setup_sqpoll_cpu(cpu);
            }
        }
        let ring = b
            .build(entries)
            .map_err(|source| match source.raw_os_error() {
                Some(libc::EPERM) if options.sqpoll => EngineError::Unsupported {
                    engine: name,
                    detail: "SQPOLL was refused (EPERM): run as root or without --sqpoll".into(),
                },
                Some(libc::ENOSYS) => EngineError::Unsupported {
                    engine: name,
                    detail: "this kernel has no io_uring; use --engine libaio".into(),
                },
                Some(libc::EPERM) => EngineError::Unsupported {
                    engine: name,
                    detail: "io_uring is disabled (sysctl kernel.io_uring_disabled); set it to 0 \
                         or use --engine libaio"
                        .into(),
                },
                _ => EngineError::Sys {
                    engine: name,
                    what: "io_uring_setup",
                    error: source,
                },
            })?;
        let fixed_slots = match ring.submitter().register_files_sparse(FIXED_FILES_MAX) {
            Ok(()) => FIXED_FILES_MAX,
            Err(_) => 0,
        };
        Ok(Uring {
            ring,
            kind,
            fds: Vec::new(),
            fixed_slots,
            in_flight: 0,
            depth_max,
            fixed_bufs: Vec::new(),
        })
    }
}

impl Uring {
    /// The registered buffer that holds `[buf, buf + len)`, if any.
    fn fixed_buf_index(&self, buf: *mut u8, len: u32) -> Option<u16> {
        if self.fixed_bufs.is_empty() {
            return None;
        }
        let start = buf as usize;
        let i = self
            .fixed_bufs
            .partition_point(|&(s, _)| s <= start)
            .checked_sub(1)?;
        let (_, end) = self.fixed_bufs[i];
        (start + len as usize <= end).then_some(i as u16)
    }
}

impl Engine for Uring {
    fn kind(&self) -> EngineKind {
        self.kind
    }

    fn add_target(&mut self, fd: RawFd) -> Result<usize, EngineError> {
        if self.kind == EngineKind::IoUringPoll {
            // SAFETY: F_GETFL on a descriptor the caller owns.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
            if flags >= 0 && flags & libc::O_DIRECT == 0 {
                return Err(EngineError::Unsupported {
                    engine: self.kind.name(),
                    detail: "polled I/O needs O_DIRECT; drop --buffered or use --engine io_uring"
                        .into(),
                });
            }
            check_poll_support(fd)?;
        }
        let idx = self.fds.len();
        if (idx as u32) < self.fixed_slots {
            // A failed update just leaves this target on its plain descriptor.
            if self
                .ring
                .submitter()
                .register_files_update(idx as u32, &[fd])
                .is_err()
            {
                self.fixed_slots = idx as u32;
            }
        }
        self.fds.push(fd);
        Ok(idx)
    }

    fn queue(&mut self, io: IoDesc) -> Result<(), EngineError> {
        if self.in_flight >= self.depth_max {
            return Err(EngineError::QueueFull {
                engine: self.kind.name(),
                depth_max: self.depth_max,
            });
        }
        let fixed = (io.target as u32) < self.fixed_slots;
        let fd = self.fds[io.target];
        let buf_index = self.fixed_buf_index(io.buf, io.len_bytes);
        macro_rules! entry {
            ($fd:expr) => {
                match (io.op, buf_index) {
                    (Op::Read, None) => opcode::Read::new($fd, io.buf, io.len_bytes)
                        .offset(io.offset_bytes)
                        .build(),
                    (Op::Write, None) => opcode::Write::new($fd, io.buf, io.len_bytes)
                        .offset(io.offset_bytes)
                        .build(),
                    (Op::Read, Some(i)) => opcode::ReadFixed::new($fd, io.buf, io.len_bytes, i)
                        .offset(io.offset_bytes)
                        .build(),
                    (Op::Write, Some(i)) => opcode::WriteFixed::new($fd, io.buf, io.len_bytes, i)
                        .offset(io.offset_bytes)
                        .build(),
                }
            };
        }
        let entry = if fixed {
            entry!(types::Fixed(io.target as u32))
        } else {
            entry!(types::Fd(fd))
        }
        .user_data(io.user_data);
        // SAFETY: the caller keeps the buffer valid until this I/O is reaped.
        let pushed = unsafe { self.ring.submission().push(&entry) };
        // The ring has at least depth_max entries and in_flight < depth_max.
        assert!(pushed.is_ok(), "submission queue full below depth_max");
        self.in_flight += 1;
        Ok(())
    }

    fn register_buffers(&mut self, bufs: &[(*mut u8, usize)]) -> Result<bool, EngineError> {
        if bufs.is_empty() || bufs.len() > FIXED_BUFS_MAX || !self.fixed_bufs.is_empty() {
            return Ok(false);
        }
        let mut sorted: Vec<(usize, usize)> = bufs
            .iter()
            .map(|&(p, len)| (p as usize, p as usize + len))
            .collect();
        sorted.sort_unstable();
        // Overlapping regions would make the lookup in queue() ambiguous.
        if sorted.windows(2).any(|w| w[0].1 > w[1].0) || sorted.iter().any(|&(s, e)| s == e) {
            return Ok(false);
        }
        let iovecs: Vec<libc::iovec> = sorted
            .iter()
            .map(|&(s, e)| libc::iovec {
                iov_base: s as *mut libc::c_void,
                iov_len: e - s,
            })
            .collect();
        // SAFETY: the trait contract keeps the buffers valid as long as the engine lives.
        match unsafe { self.ring.submitter().register_buffers(&iovecs) } {
            Ok(()) => {
                self.fixed_bufs = sorted;
                Ok(true)
            }
            // ENOMEM (RLIMIT_MEMLOCK) and friends: plain buffers work as well.
            Err(_) => Ok(false),
        }
    }

    fn commit(&mut self) -> Result<(), EngineError> {
        submit(self.ring.submitter(), self.kind.name())
    }

    fn reap(&mut self, min: usize, out: &mut [Completion]) -> Result<usize, EngineError> {
        if out.is_empty() {
            return Ok(0);
        }
        let min = min.min(out.len()).min(self.in_flight as usize);
        let mut n = 0;
        let mut polled = false;
        // Bounded: each pass either returns or waits in the kernel for completions that are
        // in flight (min <= in_flight).
        loop {
            {
                let cq = self.ring.completion();
                for cqe in cq {
                    let result = cqe.result() as i64;
                    if self.kind == EngineKind::IoUringPoll && result == -(libc::EOPNOTSUPP as i64)
                    {
                        self.in_flight -= 1;
                        return Err(EngineError::PollUnsupported {
                            detail: "the device returned EOPNOTSUPP for a polled I/O (it has no \
                                     poll queues)"
                                .into(),
                        });
                    }
                    out[n] = Completion {
                        user_data: cqe.user_data(),
                        result,
                    };
                    n += 1;
                    self.in_flight -= 1;
                    if n == out.len() {
                        break;
                    }
                }
            }
            if n >= min && (polled || n > 0 || self.kind != EngineKind::IoUringPoll) {
                return Ok(n);
            }
            // IOPOLL completions appear only when someone polls: enter the kernel even for
            // min == 0 (submit_and_wait sets GETEVENTS for IOPOLL rings).
            polled = true;
            enter(self.ring.submitter(), min - n.min(min), self.kind.name())?;
        }
    }
}

/// Submits what is queued, retried on EINTR: every io_uring engine's `commit`.
pub(super) fn submit(s: io_uring::Submitter<'_>, engine: &'static str) -> Result<(), EngineError> {
    loop {
        match s.submit() {
            Ok(_) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(error) => {
                return Err(EngineError::Sys {
                    engine,
                    what: "submit",
                    error,
                });
            }
        }
    }
}

/// Enters the kernel to wait for `want` completions (and, on an IOPOLL ring, to poll for
/// them); an interrupted or busy wait is not an error, the caller's loop looks again.
pub(super) fn enter(
    s: io_uring::Submitter<'_>,
    want: usize,
    engine: &'static str,
) -> Result<(), EngineError> {
    match s.submit_and_wait(want) {
        Ok(_) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EBUSY)) => Ok(()),
        Err(error) => Err(EngineError::Sys {
            engine,
            what: "io_uring_enter",
            error,
        }),
    }
}

/// Refuses a target whose device has no poll queues (`/sys/dev/block/M:m/queue/io_poll` is 0),
/// naming the device. Targets whose device sysfs does not describe (tmpfs, overlay) pass; the
/// engine then catches the device's EOPNOTSUPP on the first completion.
pub fn check_poll_support(fd: RawFd) -> Result<(), EngineError> {
    // SAFETY: fstat fills st.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(EngineError::Sys {
            engine: "io_uring-poll",
            what: "fstat",
            error: std::io::Error::last_os_error(),
        });
    }
    let is_blk = st.st_mode & libc::S_IFMT == libc::S_IFBLK;
    let dev = if is_blk { st.st_rdev } else { st.st_dev };
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let base = std::path::PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    // A partition has no queue/ of its own: its parent disk's is one level up.
    let candidates = [base.join("queue/io_poll"), base.join("../queue/io_poll")];
    let Some((path, value)) = candidates
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok().map(|v| (p.clone(), v)))
    else {
        return Ok(());
    };
    if value.trim() == "0" {
        // The disk that owns the queue: /sys/devices/.../<disk>/queue/io_poll.
        let disk = std::fs::canonicalize(&path)
            .ok()
            .and_then(|p| {
                p.parent()?
                    .parent()?
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| format!("{major}:{minor}"));
        let what = if is_blk {
            "device"
        } else {
            "the device under this file,"
        };
        return Err(EngineError::PollUnsupported {
            detail: format!("{what} {disk} has none (/sys/block/{disk}/queue/io_poll is 0)"),
        });
    }
    Ok(())
}
