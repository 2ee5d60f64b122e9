//! null: completes every I/O at once without touching memory or any device, like fio's
//! engines/null.c. It measures the driver's own loop (controller, volumes, recording) and lets
//! tests drive policies without devices: targets are still opened (for their sizes) but never
//! read or written.

use std::os::fd::RawFd;

use super::{Completion, Engine, EngineError, EngineKind, IoDesc};

pub(crate) struct Null {
    targets: usize,
    /// Queued, not yet reaped; a ring of `depth_max` entries.
    done: Box<[Completion]>,
    done_head: usize,
    done_len: usize,
}

impl Null {
    pub(crate) fn new(depth_max: u32) -> Null {
        assert!(depth_max > 0);
        Null {
            targets: 0,
            done: vec![Completion::default(); depth_max as usize].into_boxed_slice(),
            done_head: 0,
            done_len: 0,
        }
    }
}

impl Engine for Null {
    fn kind(&self) -> EngineKind {
        EngineKind::Null
    }

    fn add_target(&mut self, _fd: RawFd) -> Result<usize, EngineError> {
        self.targets += 1;
        Ok(self.targets - 1)
    }

    fn queue(&mut self, io: IoDesc) -> Result<(), EngineError> {
        if self.done_len == self.done.len() {
            return Err(EngineError::QueueFull {
                engine: "null",
                depth_max: self.done.len() as u32,
            });
        }
        debug_assert!(io.target < self.targets);
        let tail = (self.done_head + self.done_len) % self.done.len();
        self.done[tail] = Completion {
            user_data: io.user_data,
            result: i64::from(io.len_bytes),
        };
        self.done_len += 1;
        Ok(())
    }

    fn commit(&mut self) -> Result<(), EngineError> {
        Ok(())
    }

    fn reap(&mut self, _min: usize, out: &mut [Completion]) -> Result<usize, EngineError> {
        let n = self.done_len.min(out.len());
        for slot in out.iter_mut().take(n) {
            *slot = self.done[self.done_head];
            self.done_head = (self.done_head + 1) % self.done.len();
        }
        self.done_len -= n;
        Ok(n)
    }
}
