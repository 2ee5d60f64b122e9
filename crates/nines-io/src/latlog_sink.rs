//! Moves per-I/O log records from the workers to one writer thread without allocating, formatting
//! or dropping anything on the hot path.
//!
//! Each worker owns a [`LatLogLane`]: a fixed set of preallocated byte buffers. The worker appends
//! encoded records to its current buffer; a full buffer goes to the writer thread through a bounded
//! channel and the worker continues in a free one. The writer writes the buffer to the file and
//! hands it back through the lane's own bounded return channel. If the writer falls behind and no
//! free buffer is left, the worker blocks until one returns, and counts the stall (reported as a
//! warning): it never allocates and never drops a record silently. Records of different workers
//! interleave in the file buffer by buffer, so readers sort by completion time if they need order.
//!
//! Written by hand because this is the product's own hot path: a general logging crate would
//! format or allocate per record.

use std::fs::File;
use std::io::{self, Write};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::thread::JoinHandle;

struct Full {
    lane: usize,
    buf: Vec<u8>,
}

/// What the writer thread does with each full buffer: a plain [`File`] gets the bytes as they
/// are (nines' binary log); the fio text logs decode and format them (crate::fiolog_sink).
pub trait SinkWriter: Send + 'static {
    fn write_buf(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Everything was handed over: flush and make durable.
    fn finish(&mut self) -> io::Result<()>;
}

impl SinkWriter for File {
    fn write_buf(&mut self, buf: &[u8]) -> io::Result<()> {
        self.write_all(buf)
    }

    fn finish(&mut self) -> io::Result<()> {
        self.flush()?;
        // Only a regular file has data to make durable: fdatasync of a pipe, a terminal or
        // /dev/null fails (EINVAL) although every record was written.
        if self.metadata()?.is_file() {
            self.sync_data()?;
        }
        Ok(())
    }
}

/// The writer side: owns the file and the writer thread.
pub struct LatLogSink {
    thread: Option<JoinHandle<io::Result<u64>>>,
}

/// What the writer did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SinkSummary {
    pub bytes_written: u64,
}

/// One worker's side: preallocated buffers and the channels to the writer.
pub struct LatLogLane {
    lane: usize,
    record_bytes: usize,
    cur: Vec<u8>,
    full_tx: SyncSender<Full>,
    free_rx: Receiver<Vec<u8>>,
    /// Times this worker had to wait for the writer to return a buffer.
    pub stalls: u64,
    /// Set when the writer thread has gone away (it failed); records are no longer kept.
    pub writer_gone: bool,
}

impl LatLogSink {
    /// Starts the writer thread on `file` (whose header the caller has written) and returns one
    /// lane per worker, each with `buffers_per_lane` buffers of `records_per_buffer` records of
    /// `record_bytes` bytes.
    ///
    /// `rt_priority`: when the workers run SCHED_FIFO, the writer runs one step above them.
    /// Otherwise workers that never sleep (synchronous devices such as zram) would leave it no CPU,
    /// and they would stall on full buffers; above them it preempts a worker only for the short
    /// write of one buffer and then sleeps again.
    pub fn start<W: SinkWriter>(
        file: W,
        lanes: usize,
        buffers_per_lane: usize,
        records_per_buffer: usize,
        record_bytes: usize,
        rt_priority: Option<u32>,
    ) -> io::Result<(LatLogSink, Vec<LatLogLane>)> {
        assert!(lanes > 0 && buffers_per_lane >= 2 && records_per_buffer > 0 && record_bytes > 0);
        let buf_bytes = records_per_buffer * record_bytes;
        // Every buffer can be in the full channel at once, so a send never blocks.
        let (full_tx, full_rx) = mpsc::sync_channel::<Full>(lanes * buffers_per_lane);
        let mut returns = Vec::with_capacity(lanes);
        let mut out = Vec::with_capacity(lanes);
        for lane in 0..lanes {
            let (free_tx, free_rx) = mpsc::sync_channel::<Vec<u8>>(buffers_per_lane);
            for _ in 1..buffers_per_lane {
                free_tx
                    .send(Vec::with_capacity(buf_bytes))
                    .expect("receiver is alive");
            }
            returns.push(free_tx);
            out.push(LatLogLane {
                lane,
                record_bytes,
                cur: Vec::with_capacity(buf_bytes),
                full_tx: full_tx.clone(),
                free_rx,
                stalls: 0,
                writer_gone: false,
            });
        }
        drop(full_tx);
        let thread = std::thread::Builder::new()
            .name("nines-latlog".into())
            .spawn(move || {
                if let Some(p) = rt_priority {
                    // Best effort: the workers' own priority was checked already.
                    let _ = crate::sched::set_fifo_current_thread((p + 1).min(99));
                }
                writer_loop(file, full_rx, returns)
            })?;
        Ok((
            LatLogSink {
                thread: Some(thread),
            },
            out,
        ))
    }

    /// Waits for the writer to write everything the (finished and dropped) lanes sent.
    pub fn finish(mut self) -> io::Result<SinkSummary> {
        let thread = self.thread.take().expect("finish is called once");
        match thread.join() {
            Ok(r) => r.map(|bytes_written| SinkSummary { bytes_written }),
            Err(_) => Err(io::Error::other("the latency-log writer thread panicked")),
        }
    }
}

fn writer_loop<W: SinkWriter>(
    mut file: W,
    full_rx: Receiver<Full>,
    returns: Vec<SyncSender<Vec<u8>>>,
) -> io::Result<u64> {
    let mut written: u64 = 0;
    let mut failure: Option<io::Error> = None;
    // Ends when every lane has been dropped: the channel then disconnects.
    while let Ok(Full { lane, mut buf }) = full_rx.recv() {
        if failure.is_none() {
            match file.write_buf(&buf) {
                Ok(()) => written += buf.len() as u64,
                Err(e) => failure = Some(e),
            }
        }
        buf.clear();
        // The lane may be gone already (it sent its last buffer); then the buffer is freed here.
        let _ = returns[lane].try_send(buf);
    }
    if let Some(e) = failure {
        return Err(e);
    }
    file.finish()?;
    Ok(written)
}

impl LatLogLane {
    /// Appends one encoded record. Allocation-free: the buffer was sized up front.
    #[inline]
    pub fn push(&mut self, record: &[u8]) {
        debug_assert_eq!(record.len(), self.record_bytes);
        if self.cur.len() + record.len() > self.cur.capacity() {
            self.rotate();
        }
        self.cur.extend_from_slice(record);
    }

    #[cold]
    fn rotate(&mut self) {
        let next = match self.free_rx.try_recv() {
            Ok(b) => b,
            Err(TryRecvError::Empty) => {
                self.stalls += 1;
                match self.free_rx.recv() {
                    Ok(b) => b,
                    Err(_) => return self.lose_writer(),
                }
            }
            Err(TryRecvError::Disconnected) => return self.lose_writer(),
        };
        let full = std::mem::replace(&mut self.cur, next);
        if self
            .full_tx
            .send(Full {
                lane: self.lane,
                buf: full,
            })
            .is_err()
        {
            self.lose_writer();
        }
    }

    fn lose_writer(&mut self) {
        // The writer failed; its error is reported by `LatLogSink::finish`. Keep the worker
        // running without allocating: reuse the current buffer.
        self.writer_gone = true;
        self.cur.clear();
    }

    /// Sends the last, partly filled buffer. Returns the stall count.
    pub fn finish(mut self) -> u64 {
        if !self.cur.is_empty() {
            let cur = std::mem::take(&mut self.cur);
            let _ = self.full_tx.send(Full {
                lane: self.lane,
                buf: cur,
            });
        }
        self.stalls
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn every_record_of_every_lane_arrives_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.bin");
        let file = File::create(&path).unwrap();
        let (sink, lanes) = LatLogSink::start(file, 3, 2, 7, 8, None).unwrap();
        let handles: Vec<_> = lanes
            .into_iter()
            .enumerate()
            .map(|(w, mut lane)| {
                std::thread::spawn(move || {
                    for i in 0..1000u64 {
                        lane.push(&((w as u64) << 32 | i).to_le_bytes());
                    }
                    lane.finish()
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let summary = sink.finish().unwrap();
        assert_eq!(summary.bytes_written, 3 * 1000 * 8);
        let mut bytes = Vec::new();
        File::open(&path).unwrap().read_to_end(&mut bytes).unwrap();
        let mut got: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        got.sort_unstable();
        let mut want: Vec<u64> = (0..3u64)
            .flat_map(|w| (0..1000u64).map(move |i| w << 32 | i))
            .collect();
        want.sort_unstable();
        assert_eq!(got, want);
    }
}
