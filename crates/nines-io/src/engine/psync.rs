//! psync: one blocking `pread`/`pwrite` per `queue` call. The completion is stored in a fixed
//! ring and handed out by `reap`. One thread runs one I/O at a time, so the driver gives psync a
//! thread per target.

use std::os::fd::RawFd;

use nines_core::op::Op;

use super::{Completion, Engine, EngineError, EngineKind, IoDesc};

pub(crate) struct Psync {
    fds: Vec<RawFd>,
    /// Completed, not yet reaped; a ring of `depth_max` entries.
    done: Box<[Completion]>,
    done_head: usize,
    done_len: usize,
}

impl Psync {
    pub(crate) fn new(depth_max: u32) -> Psync {
        assert!(depth_max > 0);
        Psync {
            fds: Vec::new(),
            done: vec![Completion::default(); depth_max as usize].into_boxed_slice(),
            done_head: 0,
            done_len: 0,
        }
    }
}

impl Engine for Psync {
    fn kind(&self) -> EngineKind {
        EngineKind::Psync
    }

    fn add_target(&mut self, fd: RawFd) -> Result<usize, EngineError> {
        self.fds.push(fd);
        Ok(self.fds.len() - 1)
    }

    fn queue(&mut self, io: IoDesc) -> Result<(), EngineError> {
        if self.done_len == self.done.len() {
            return Err(EngineError::QueueFull {
                engine: "psync",
                depth_max: self.done.len() as u32,
            });
        }
        let fd = self.fds[io.target];
        let len = io.len_bytes as usize;
        let off = io.offset_bytes as libc::off_t;
        let result = loop {
            // SAFETY: the caller guarantees `buf` is valid for `len_bytes` until reaped.
            let ret = unsafe {
                match io.op {
                    Op::Read => libc::pread(fd, io.buf.cast(), len, off),
                    Op::Write => libc::pwrite(fd, io.buf.cast(), len, off),
                }
            };
            if ret >= 0 {
                break ret as i64;
            }
            let errno = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            if errno != libc::EINTR {
                break -(errno as i64);
            }
        };
        let tail = (self.done_head + self.done_len) % self.done.len();
        self.done[tail] = Completion {
            user_data: io.user_data,
            result,
        };
        self.done_len += 1;
        Ok(())
    }

    fn commit(&mut self) -> Result<(), EngineError> {
        Ok(())
    }

    fn reap(&mut self, _min: usize, out: &mut [Completion]) -> Result<usize, EngineError> {
        // Everything queued has already completed: there is nothing to wait for.
        let n = self.done_len.min(out.len());
        for slot in out.iter_mut().take(n) {
            *slot = self.done[self.done_head];
            self.done_head = (self.done_head + 1) % self.done.len();
        }
        self.done_len -= n;
        Ok(n)
    }
}
