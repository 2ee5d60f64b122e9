//! I/O engines: one small interface (queue, commit, reap), as in fio, so engines are swappable
//! and comparable. An engine owns one kernel context (an io_uring, an AIO context, or nothing for
//! psync) and may drive many targets through it: the per-CPU worker model of the paper's Fig. 5.
//!
//! Contract, for every engine:
//! - `add_target` registers an open file descriptor before any I/O and returns its slot.
//! - `queue` hands one I/O to the engine. The buffer must stay valid and untouched until the I/O
//!   with the same `user_data` is reaped. At most `depth_max` I/Os are in flight per engine.
//! - `commit` submits everything queued since the last commit (psync performs I/O in `queue`).
//! - `submit_one` is `queue` then `commit` of that one I/O (fused where the engine can).
//! - `reap` waits for at least `min` completions (0 = do not wait), writes them into `out` and
//!   returns how many it wrote (never more than `out.len()`).
//! - Nothing on these paths allocates after construction.

use std::os::fd::RawFd;

use nines_core::op::Op;

mod libaio;
mod null;
mod psync;
mod uring;
pub mod uring_cmd;

pub use uring::check_poll_support;

/// Which engine to use; the command-line names are the `Display` strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    /// One `pread`/`pwrite` at a time, one thread per target.
    Psync,
    /// Linux native AIO (`io_submit`/`io_getevents`), interrupt-driven.
    Libaio,
    /// io_uring, interrupt-driven completions.
    IoUring,
    /// io_uring with IOPOLL: the CPU polls the device's poll queues for completions.
    IoUringPoll,
    /// NVMe passthrough: io_uring `IORING_OP_URING_CMD` on `/dev/ngXnY`, NVMe Read/Write
    /// commands with no block layer (fio's `io_uring_cmd`).
    IoUringCmd,
    /// [`EngineKind::IoUringCmd`] on a ring with IOPOLL: completions polled from the
    /// namespace's poll queues (fio's `io_uring_cmd` with `hipri`).
    IoUringCmdPoll,
    /// No I/O at all: every I/O completes at once (the driver's own cost; tests).
    Null,
}

/// Engine options that are not the engine's kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineOptions {
    /// io_uring only: a kernel thread polls the submission queue (`IORING_SETUP_SQPOLL`).
    pub sqpoll: bool,
    /// io_uring only: the CPU the SQPOLL thread is pinned to.
    pub sqpoll_cpu: Option<u32>,
}

/// One I/O handed to an engine.
#[derive(Clone, Copy, Debug)]
pub struct IoDesc {
    /// Slot returned by `add_target`.
    pub target: usize,
    pub op: Op,
    pub offset_bytes: u64,
    pub len_bytes: u32,
    /// Aligned buffer of at least `len_bytes`, valid until this I/O is reaped.
    pub buf: *mut u8,
    /// Returned unchanged in the completion.
    pub user_data: u64,
}

/// One finished I/O.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    pub user_data: u64,
    /// Bytes transferred, or a negative errno.
    pub result: i64,
}

/// Errors an engine reports; the binary adds which target and what to do. OS errors are fields
/// named `error`, shown in the message and deliberately not a `#[source]`, so an error chain
/// printed with `{:#}` does not repeat them.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{engine}: {what}: {error}")]
    Sys {
        engine: &'static str,
        what: &'static str,
        error: std::io::Error,
    },
    #[error(
        "io_uring-poll needs a device with poll queues: {detail}; for NVMe set the nvme module \
         parameter poll_queues (e.g. `nvme.poll_queues=4` on the kernel command line) or use --engine io_uring"
    )]
    PollUnsupported { detail: String },
    #[error("{engine}: queue is full ({depth_max} I/Os in flight)")]
    QueueFull {
        engine: &'static str,
        depth_max: u32,
    },
    #[error("{engine}: {detail}")]
    Unsupported {
        engine: &'static str,
        detail: String,
    },
}

/// The engine interface. Implementations live in the sibling modules.
pub trait Engine: Send {
    fn kind(&self) -> EngineKind;
    fn add_target(&mut self, fd: RawFd) -> Result<usize, EngineError>;
    fn queue(&mut self, io: IoDesc) -> Result<(), EngineError>;
    fn commit(&mut self) -> Result<(), EngineError>;
    fn reap(&mut self, min: usize, out: &mut [Completion]) -> Result<usize, EngineError>;

    /// Queues one I/O and commits it at once, alone: the worker's per-I/O submission (the same
    /// as `queue` then `commit` with nothing else queued). Engines may fuse the two to save
    /// their bookkeeping on the hot path.
    fn submit_one(&mut self, io: IoDesc) -> Result<(), EngineError> {
        self.queue(io)?;
        self.commit()
    }

    /// Optionally registers the I/O buffers (address, length) with the kernel before any I/O,
    /// so I/Os whose buffer lies inside one skip pinning its pages each time (io_uring's fixed
    /// buffers). Returns whether the engine uses them; engines without the notion, or kernels
    /// that refuse (e.g. RLIMIT_MEMLOCK), return Ok(false) and work as before. The buffers must
    /// stay valid as long as the engine lives.
    fn register_buffers(&mut self, bufs: &[(*mut u8, usize)]) -> Result<bool, EngineError> {
        let _ = bufs;
        Ok(false)
    }
}

/// Builds an engine able to hold `depth_max` I/Os in flight over all its targets.
pub fn build(
    kind: EngineKind,
    depth_max: u32,
    options: EngineOptions,
) -> Result<Box<dyn Engine>, EngineError> {
    if depth_max == 0 || depth_max > DEPTH_MAX_LIMIT {
        return Err(EngineError::Unsupported {
            engine: kind.name(),
            detail: format!(
                "in-flight limit {depth_max} is out of range; use an iodepth times targets per \
                 worker between 1 and {DEPTH_MAX_LIMIT}"
            ),
        });
    }
    if options.sqpoll && !matches!(kind, EngineKind::IoUring | EngineKind::IoUringPoll) {
        return Err(EngineError::Unsupported {
            engine: kind.name(),
            detail: "--sqpoll only applies to io_uring engines; drop it or use --engine io_uring"
                .into(),
        });
    }
    Ok(match kind {
        EngineKind::Psync => Box::new(psync::Psync::new(depth_max)),
        EngineKind::Libaio => Box::new(libaio::Libaio::new(depth_max)?),
        EngineKind::IoUring => Box::new(uring::Uring::new(depth_max, options, false)?),
        EngineKind::IoUringPoll => Box::new(uring::Uring::new(depth_max, options, true)?),
        EngineKind::IoUringCmd => Box::new(uring_cmd::UringCmd::new(depth_max, false)?),
        EngineKind::IoUringCmdPoll => Box::new(uring_cmd::UringCmd::new(depth_max, true)?),
        EngineKind::Null => Box::new(null::Null::new(depth_max)),
    })
}

/// The largest number of I/Os one engine may hold in flight (io_uring's ring limit).
pub const DEPTH_MAX_LIMIT: u32 = 32768;

impl EngineKind {
    /// Every engine, in the order they are documented.
    pub const ALL: [EngineKind; 7] = [
        EngineKind::Psync,
        EngineKind::Libaio,
        EngineKind::IoUring,
        EngineKind::IoUringPoll,
        EngineKind::IoUringCmd,
        EngineKind::IoUringCmdPoll,
        EngineKind::Null,
    ];

    /// The command-line name.
    pub const fn name(self) -> &'static str {
        match self {
            EngineKind::Psync => "psync",
            EngineKind::Libaio => "libaio",
            EngineKind::IoUring => "io_uring",
            EngineKind::IoUringPoll => "io_uring-poll",
            EngineKind::IoUringCmd => "io_uring-cmd",
            EngineKind::IoUringCmdPoll => "io_uring-cmd-poll",
            EngineKind::Null => "null",
        }
    }

    /// Whether one engine (one thread) can keep several I/Os in flight; psync cannot, so the
    /// driver gives it one thread per target.
    pub fn is_async(self) -> bool {
        !matches!(self, EngineKind::Psync)
    }
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An engine name that is not one of `psync|libaio|io_uring|io_uring-poll|io_uring-cmd|io_uring-cmd-poll|null`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown engine '{0}': use psync, libaio, io_uring, io_uring-poll, io_uring-cmd, io_uring-cmd-poll or null"
)]
pub struct UnknownEngine(pub String);

impl std::str::FromStr for EngineKind {
    type Err = UnknownEngine;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EngineKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownEngine(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in EngineKind::ALL {
            assert_eq!(k.to_string().parse::<EngineKind>().unwrap(), k);
        }
        let e = "uring".parse::<EngineKind>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown engine 'uring': use psync, libaio, io_uring, io_uring-poll, io_uring-cmd, io_uring-cmd-poll or null"
        );
    }

    proptest::proptest! {
        /// Any text that is not exactly an engine name is refused with a one-line error that
        /// quotes it and lists the valid names.
        #[test]
        fn unknown_names_are_refused(s in "\\PC{0,24}") {
            match s.parse::<EngineKind>() {
                Ok(k) => proptest::prop_assert_eq!(k.name(), s.as_str()),
                Err(e) => {
                    let msg = e.to_string();
                    proptest::prop_assert!(!msg.contains('\n') || s.contains('\n'));
                    proptest::prop_assert!(msg.contains(&s));
                    proptest::prop_assert!(msg.ends_with("use psync, libaio, io_uring, io_uring-poll, io_uring-cmd, io_uring-cmd-poll or null"));
                }
            }
        }
    }

    #[test]
    fn bad_depths_and_options_are_refused() {
        assert!(build(EngineKind::Psync, 0, EngineOptions::default()).is_err());
        assert!(
            build(
                EngineKind::Libaio,
                DEPTH_MAX_LIMIT + 1,
                EngineOptions::default()
            )
            .is_err()
        );
        let sq = EngineOptions {
            sqpoll: true,
            sqpoll_cpu: None,
        };
        let e = build(EngineKind::Libaio, 4, sq).err().unwrap();
        assert!(e.to_string().contains("--sqpoll"), "{e}");
    }
}
