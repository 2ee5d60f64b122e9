//! fio's text logs (`--fio-log`, `write_lat_log`/`write_bw_log`/`write_iops_log`/
//! `write_hist_log` of a job file) written by the log writer thread: the workers push 48-byte
//! [`FioRecord`]s through the same lanes as nines' per-I/O log ([`crate::latlog_sink`]), so the
//! I/O loop formats and locks nothing; this side decodes them and formats fio's lines
//! ([`nines_core::fiolog`]) into each fio job's files.

use std::fs::File;
use std::io::{self, BufWriter, Write};

use nines_core::fiolog::{FIO_RECORD_BYTES, FioJobLog, FioLogKind, FioLogSpec, FioRecord};

use crate::latlog_sink::SinkWriter;

/// Opens one log file by its name (`PREFIX_lat.1.log`): the caller's output policy decides
/// where it goes and how it is replaced. An error says what to do.
pub type FioLogOpen = Box<dyn FnMut(&str) -> Result<File, String> + Send>;

/// fio's logs of a run, as the caller asks for them.
pub struct FioLogOut {
    pub spec: FioLogSpec,
    pub open: FioLogOpen,
}

impl std::fmt::Debug for FioLogOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FioLogOut")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

/// One fio job's logs and files (by [`FioLogKind::ALL`] order).
struct JobFiles {
    log: FioJobLog,
    files: [Option<BufWriter<File>>; 6],
    last_ns: u64,
}

/// The writer-thread side of the fio logs.
pub struct FioLogWriter {
    jobs: Vec<JobFiles>,
    failure: Option<io::Error>,
}

impl FioLogWriter {
    /// Opens every file of `jobs` fio jobs through `out.open`.
    pub fn open(out: &mut FioLogOut, jobs: u32) -> Result<FioLogWriter, String> {
        let mut all: Vec<JobFiles> = (0..jobs)
            .map(|_| JobFiles {
                log: FioJobLog::new(&out.spec),
                files: Default::default(),
                last_ns: 0,
            })
            .collect();
        for (j, kind, name) in out.spec.files(jobs) {
            let f = (out.open)(&name)?;
            let k = FioLogKind::ALL
                .iter()
                .position(|x| *x == kind)
                .expect("a kind");
            all[j as usize].files[k] = Some(BufWriter::with_capacity(256 * 1024, f));
        }
        Ok(FioLogWriter {
            jobs: all,
            failure: None,
        })
    }
}

fn write_line(
    files: &mut [Option<BufWriter<File>>; 6],
    failure: &mut Option<io::Error>,
    kind: FioLogKind,
    line: &str,
) {
    if failure.is_some() {
        return;
    }
    let k = FioLogKind::ALL
        .iter()
        .position(|x| *x == kind)
        .expect("a kind");
    if let Some(f) = files[k].as_mut()
        && let Err(e) = f.write_all(line.as_bytes())
    {
        *failure = Some(e);
    }
}

impl SinkWriter for FioLogWriter {
    fn write_buf(&mut self, buf: &[u8]) -> io::Result<()> {
        for chunk in buf.chunks_exact(FIO_RECORD_BYTES) {
            let r = FioRecord::decode(chunk.try_into().expect("record size"));
            let Some(job) = self.jobs.get_mut(r.job as usize) else {
                continue;
            };
            job.last_ns = job.last_ns.max(r.completion_ns);
            let (files, failure) = (&mut job.files, &mut self.failure);
            job.log
                .record(&r, &mut |kind, line| write_line(files, failure, kind, line));
        }
        match self.failure.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn finish(&mut self) -> io::Result<()> {
        for job in &mut self.jobs {
            let (files, failure) = (&mut job.files, &mut self.failure);
            // fio's finalize_logs at the job's end: its last completion.
            job.log.finish(job.last_ns, &mut |kind, line| {
                write_line(files, failure, kind, line)
            });
        }
        if let Some(e) = self.failure.take() {
            return Err(e);
        }
        for job in &mut self.jobs {
            for f in job.files.iter_mut().flatten() {
                f.flush()?;
                if f.get_ref().metadata()?.is_file() {
                    f.get_ref().sync_data()?;
                }
            }
        }
        Ok(())
    }
}
