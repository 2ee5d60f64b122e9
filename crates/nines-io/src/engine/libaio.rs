//! libaio: Linux native AIO through the raw syscalls `io_setup`, `io_submit`, `io_getevents`
//! and `io_destroy`. One AIO context serves every target of the engine.
//!
//! Written by hand because no maintained Rust crate wraps kernel AIO (the old `libaio`
//! bindings crates are unmaintained and link the C library we do not need): the ABI is four
//! syscalls and two fixed-layout structs, defined below from `include/uapi/linux/aio_abi.h`.

use std::os::fd::RawFd;

use nines_core::op::Op;

use super::{Completion, Engine, EngineError, EngineKind, IoDesc};

type AioContext = libc::c_ulong;

const IOCB_CMD_PREAD: u16 = 0;
const IOCB_CMD_PWRITE: u16 = 1;

/// `struct iocb` from aio_abi.h (64 bytes). Field order of `aio_key`/`aio_rw_flags` depends on
/// endianness in the header; this is the little-endian layout.
#[cfg(target_endian = "little")]
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Iocb {
    aio_data: u64,
    aio_key: u32,
    aio_rw_flags: i32,
    aio_lio_opcode: u16,
    aio_reqprio: i16,
    aio_fildes: u32,
    aio_buf: u64,
    aio_nbytes: u64,
    aio_offset: i64,
    aio_reserved2: u64,
    aio_flags: u32,
    aio_resfd: u32,
}

#[cfg(target_endian = "big")]
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Iocb {
    aio_data: u64,
    aio_rw_flags: i32,
    aio_key: u32,
    aio_lio_opcode: u16,
    aio_reqprio: i16,
    aio_fildes: u32,
    aio_buf: u64,
    aio_nbytes: u64,
    aio_offset: i64,
    aio_reserved2: u64,
    aio_flags: u32,
    aio_resfd: u32,
}

const _: () = assert!(std::mem::size_of::<Iocb>() == 64);

/// `struct io_event` from aio_abi.h (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

const _: () = assert!(std::mem::size_of::<IoEvent>() == 32);

/// The completion ring the kernel maps at the context's address (`struct aio_ring` in
/// fs/aio.c). Reading completions from it in user space, as fio's `userspace_reap` does, saves
/// the `io_getevents` syscall whenever completions are already there: at QD1 on a device that
/// completes inside `io_submit`, one syscall per I/O instead of two.
#[repr(C)]
struct AioRing {
    id: u32,
    nr: u32,
    head: u32,
    tail: u32,
    magic: u32,
    compat_features: u32,
    incompat_features: u32,
    header_length: u32,
    // followed by `nr` io_events
}

const AIO_RING_MAGIC: u32 = 0xa10a10a1;

pub(crate) struct Libaio {
    ctx: AioContext,
    fds: Vec<RawFd>,
    /// One control block per in-flight slot; never moves, so the kernel may keep pointers to it.
    iocbs: Box<[Iocb]>,
    /// Free slots (a stack, capacity `depth_max`).
    free: Vec<u32>,
    /// Queued, not yet submitted (capacity `depth_max`).
    pending: Vec<*mut Iocb>,
    /// I/Os `io_submit` refused one by one (bad fd...): (slot, -errno), handed out by `reap`.
    failed: Vec<(u32, i64)>,
    events: Box<[IoEvent]>,
    depth_max: u32,
    /// The kernel's completion ring can be read in user space (known magic, no incompatible
    /// features).
    user_reap: bool,
}

// SAFETY: the raw pointers in `pending` point into `iocbs`, owned by the same struct.
unsafe impl Send for Libaio {}

fn sys_err(what: &'static str) -> EngineError {
    EngineError::Sys {
        engine: "libaio",
        what,
        error: std::io::Error::last_os_error(),
    }
}

impl Libaio {
    pub(crate) fn new(depth_max: u32) -> Result<Libaio, EngineError> {
        let mut ctx: AioContext = 0;
        // SAFETY: io_setup writes the context id into ctx.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_io_setup,
                depth_max as libc::c_long,
                &mut ctx as *mut AioContext,
            )
        };
        if ret < 0 {
            let source = std::io::Error::last_os_error();
            if source.raw_os_error() == Some(libc::EAGAIN) {
                return Err(EngineError::Unsupported {
                    engine: "libaio",
                    detail: format!(
                        "io_setup({depth_max}) exceeds the system's AIO limit; raise \
                         /proc/sys/fs/aio-max-nr (sysctl fs.aio-max-nr) or lower --iodepth"
                    ),
                });
            }
            return Err(EngineError::Sys {
                engine: "libaio",
                what: "io_setup",
                error: source,
            });
        }
        let n = depth_max as usize;
        // SAFETY: the context id is the address of the kernel-mapped ring header.
        let user_reap = unsafe {
            let ring = ctx as *const AioRing;
            std::ptr::read_volatile(&(*ring).magic) == AIO_RING_MAGIC
                && std::ptr::read_volatile(&(*ring).incompat_features) == 0
                && std::ptr::read_volatile(&(*ring).header_length) as usize
                    == std::mem::size_of::<AioRing>()
        };
        Ok(Libaio {
            ctx,
            fds: Vec::new(),
            iocbs: vec![Iocb::default(); n].into_boxed_slice(),
            free: (0..depth_max).rev().collect(),
            pending: Vec::with_capacity(n),
            failed: Vec::with_capacity(n),
            events: vec![IoEvent::default(); n].into_boxed_slice(),
            depth_max,
            user_reap,
        })
    }

    /// Takes completions straight from the kernel's ring; returns how many it wrote.
    fn reap_ring(&mut self, out: &mut [Completion]) -> usize {
        use std::sync::atomic::{AtomicU32, Ordering};
        let ring = self.ctx as *mut AioRing;
        // SAFETY: ring points at the kernel-mapped header, valid until io_destroy; head and tail
        // are 4-byte aligned u32s the kernel updates atomically; the kernel publishes an event
        // before it advances tail (smp_wmb), which the acquire load pairs with.
        unsafe {
            let nr = (*ring).nr;
            let head_ref = AtomicU32::from_ptr(&raw mut (*ring).head);
            let tail = AtomicU32::from_ptr(&raw mut (*ring).tail).load(Ordering::Acquire);
            let mut head = head_ref.load(Ordering::Relaxed);
            if nr == 0 || head >= nr || tail >= nr {
                return 0;
            }
            let events = ring.add(1).cast::<IoEvent>();
            let mut n = 0;
            // Bounded by out.len() and by the ring size.
            while head != tail && n < out.len() {
                let ev = std::ptr::read_volatile(events.add(head as usize));
                let slot = self.slot_of(ev.obj as *const Iocb);
                self.free.push(slot);
                out[n] = Completion {
                    user_data: ev.data,
                    result: ev.res,
                };
                n += 1;
                head = (head + 1) % nr;
            }
            head_ref.store(head, Ordering::Release);
            n
        }
    }

    /// Takes a free slot and fills its control block for `io`.
    #[inline]
    fn fill(&mut self, io: IoDesc) -> Result<*mut Iocb, EngineError> {
        let Some(slot) = self.free.pop() else {
            return Err(EngineError::QueueFull {
                engine: "libaio",
                depth_max: self.depth_max,
            });
        };
        let iocb = &mut self.iocbs[slot as usize];
        *iocb = Iocb {
            aio_data: io.user_data,
            aio_lio_opcode: match io.op {
                Op::Read => IOCB_CMD_PREAD,
                Op::Write => IOCB_CMD_PWRITE,
            },
            aio_fildes: self.fds[io.target] as u32,
            aio_buf: io.buf as u64,
            aio_nbytes: io.len_bytes as u64,
            aio_offset: io.offset_bytes as i64,
            ..Iocb::default()
        };
        Ok(iocb as *mut Iocb)
    }

    fn slot_of(&self, iocb: *const Iocb) -> u32 {
        let base = self.iocbs.as_ptr() as usize;
        let idx = (iocb as usize - base) / std::mem::size_of::<Iocb>();
        assert!(idx < self.iocbs.len());
        idx as u32
    }
}

impl Drop for Libaio {
    fn drop(&mut self) {
        // io_destroy cancels or waits for in-flight I/O, so the kernel holds no pointer into
        // our buffers afterwards.
        // SAFETY: ctx came from io_setup.
        unsafe { libc::syscall(libc::SYS_io_destroy, self.ctx) };
    }
}

impl Engine for Libaio {
    fn kind(&self) -> EngineKind {
        EngineKind::Libaio
    }

    fn add_target(&mut self, fd: RawFd) -> Result<usize, EngineError> {
        self.fds.push(fd);
        Ok(self.fds.len() - 1)
    }

    fn queue(&mut self, io: IoDesc) -> Result<(), EngineError> {
        let iocb = self.fill(io)?;
        self.pending.push(iocb);
        Ok(())
    }

    /// One iocb, one `io_submit`, without the pending list (the worker's per-I/O path).
    fn submit_one(&mut self, io: IoDesc) -> Result<(), EngineError> {
        if !self.pending.is_empty() {
            self.queue(io)?;
            return self.commit();
        }
        let mut iocb = self.fill(io)?;
        // Bounded: EINTR is the only retry, and each retry is a new call.
        loop {
            // SAFETY: `iocb` points into self.iocbs, valid until the I/O is reaped.
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_io_submit,
                    self.ctx,
                    1 as libc::c_long,
                    &mut iocb as *mut *mut Iocb,
                )
            };
            if ret == 1 {
                return Ok(());
            }
            let errno = if ret < 0 {
                std::io::Error::last_os_error().raw_os_error()
            } else {
                None
            };
            let slot = self.slot_of(iocb);
            match errno {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) | None => {
                    // Not submitted (EAGAIN, or 0 taken without an error: errno is stale
                    // then, so say EAGAIN): the slot is free again.
                    self.free.push(slot);
                    return Err(EngineError::Sys {
                        engine: "libaio",
                        what: "io_submit",
                        error: std::io::Error::from_raw_os_error(libc::EAGAIN),
                    });
                }
                Some(errno) => {
                    // Refused (bad fd...): the caller sees the error on its I/O, as in commit.
                    self.failed.push((slot, -(errno as i64)));
                    return Ok(());
                }
            }
        }
    }

    fn commit(&mut self) -> Result<(), EngineError> {
        // Bounded: every pass submits at least one iocb or moves one to `failed`.
        while !self.pending.is_empty() {
            // SAFETY: pending holds valid iocb pointers into self.iocbs.
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_io_submit,
                    self.ctx,
                    self.pending.len() as libc::c_long,
                    self.pending.as_mut_ptr(),
                )
            };
            if ret > 0 {
                self.pending.drain(..ret as usize);
                continue;
            }
            let err = std::io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) | None => return Err(sys_err("io_submit")),
                Some(errno) => {
                    // The first pending iocb is bad: complete it with the error so the caller
                    // sees it on its I/O, then go on with the rest.
                    let bad = self.pending.remove(0);
                    let slot = self.slot_of(bad);
                    // The slot stays taken until the failure is reaped, so `failed` never holds
                    // more than depth_max entries (its capacity: no allocation).
                    self.failed.push((slot, -(errno as i64)));
                }
            }
        }
        Ok(())
    }

    fn reap(&mut self, min: usize, out: &mut [Completion]) -> Result<usize, EngineError> {
        let mut n = 0;
        while n < out.len()
            && let Some((slot, result)) = self.failed.pop()
        {
            out[n] = Completion {
                user_data: self.iocbs[slot as usize].aio_data,
                result,
            };
            self.free.push(slot);
            n += 1;
        }
        if self.user_reap {
            n += self.reap_ring(&mut out[n..]);
        }
        let nr = (out.len() - n).min(self.events.len());
        if nr == 0 || n >= min {
            return Ok(n);
        }
        let want = min.saturating_sub(n).min(nr);
        let got = loop {
            // SAFETY: events has room for nr entries; a null timeout waits for `want`.
            let ret = unsafe {
                libc::syscall(
                    libc::SYS_io_getevents,
                    self.ctx,
                    want as libc::c_long,
                    nr as libc::c_long,
                    self.events.as_mut_ptr(),
                    std::ptr::null_mut::<libc::timespec>(),
                )
            };
            if ret >= 0 {
                break ret as usize;
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return Err(sys_err("io_getevents"));
            }
        };
        for i in 0..got {
            let ev = self.events[i];
            let slot = self.slot_of(ev.obj as *const Iocb);
            self.free.push(slot);
            out[n] = Completion {
                user_data: ev.data,
                result: ev.res,
            };
            n += 1;
        }
        Ok(n)
    }
}
