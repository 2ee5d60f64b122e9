//! `--fio-log PREFIX` for `profile` (and a job file's `write_lat_log`, `write_bw_log`,
//! `write_iops_log`, `write_hist_log`): fio's own text logs, in fio 3.33's formats and file names
//! (`PREFIX_lat.1.log`, `PREFIX_clat.1.log`, `PREFIX_slat.1.log`, `PREFIX_bw.1.log`,
//! `PREFIX_iops.1.log`, `PREFIX_clat_hist.1.log`; the number is the fio job's, in the order of
//! `--fio-json`), beside nines' binary logs. Written by the log writer thread
//! (nines_io::fiolog_sink), never by the I/O loop.
//!
//! Outputs: each file is named by the prefix the user gave, so it goes through the one output
//! policy (cmd/output.rs: own inputs, block devices and directories refused; written under a
//! temporary name, renamed into place only when the run succeeded). A name that exists as
//! anything but a regular file (a symlink, a FIFO, a device) is refused: nobody named that node.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Result, bail};
use nines_core::fiolog::FioLogSpec;
use nines_io::fiolog_sink::FioLogOut;

use super::output::PendingOutput;

#[derive(clap::Args, Debug, Default, Clone)]
#[command(next_help_heading = "Outputs")]
pub struct FioLogArgs {
    /// Write fio's text logs under PREFIX, in fio's formats and names: PREFIX_lat.N.log,
    /// _clat.N.log, _slat.N.log (write_lat_log), _bw.N.log, _iops.N.log, _clat_hist.N.log (N: the
    /// fio job, as in --fio-json), for fiologparser_hist.py, fio-plot -g and other fio tools.
    #[arg(long, value_name = "PREFIX")]
    pub fio_log: Option<String>,
    /// Which of --fio-log's logs: any of lat,bw,iops,hist (comma-separated).
    #[arg(long, value_name = "KINDS", default_value = "lat,bw,iops,hist", value_parser = parse_kinds)]
    pub fio_log_kinds: FioLogKinds,
    /// fio's log_avg_msec: average each log over windows of this many milliseconds (0: a line per
    /// I/O).
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub fio_log_avg_msec: u64,
    /// fio's log_hist_msec: the window of the clat histogram log.
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub fio_log_hist_msec: u64,
    /// fio's log_hist_coarseness: merge 2^N of fio's 1856 histogram buckets per column (0-6).
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=6))]
    pub fio_log_hist_coarseness: u32,
    /// fio's log_max_value: log each window's maximum instead of its mean.
    #[arg(long)]
    pub fio_log_max_value: bool,
    /// fio's log_offset: each per-I/O line carries the I/O's offset.
    #[arg(long)]
    pub fio_log_offset: bool,
}

/// Which of fio's logs `--fio-log` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FioLogKinds {
    pub lat: bool,
    pub bw: bool,
    pub iops: bool,
    pub hist: bool,
}

impl Default for FioLogKinds {
    fn default() -> Self {
        FioLogKinds {
            lat: true,
            bw: true,
            iops: true,
            hist: true,
        }
    }
}

fn parse_kinds(s: &str) -> Result<FioLogKinds, String> {
    let mut k = FioLogKinds {
        lat: false,
        bw: false,
        iops: false,
        hist: false,
    };
    for x in s.split(',').map(str::trim) {
        match x {
            "lat" => k.lat = true,
            "bw" => k.bw = true,
            "iops" => k.iops = true,
            "hist" => k.hist = true,
            _ => {
                return Err(format!(
                    "`{x}` is not one of fio's logs: give any of lat,bw,iops,hist"
                ));
            }
        }
    }
    Ok(k)
}

impl FioLogArgs {
    /// The logs asked: `--fio-log`, else the job file's.
    pub fn spec(&self, job_file: &FioLogSpec) -> Option<FioLogSpec> {
        let Some(prefix) = &self.fio_log else {
            return job_file.any().then(|| job_file.clone());
        };
        let k = self.fio_log_kinds;
        let p = |on: bool| on.then(|| prefix.clone());
        Some(FioLogSpec {
            lat: p(k.lat),
            bw: p(k.bw),
            iops: p(k.iops),
            hist: p(k.hist),
            avg_msec: self.fio_log_avg_msec,
            hist_msec: self.fio_log_hist_msec,
            hist_coarseness: self.fio_log_hist_coarseness,
            log_max: self.fio_log_max_value,
            log_offset: self.fio_log_offset,
        })
    }
}

/// The fio logs' files while the run writes them, moved into place by [`FioLogFiles::commit`].
pub struct FioLogFiles {
    pending: Arc<Mutex<Vec<PendingOutput>>>,
}

/// Refuses a derived name that exists as something other than a regular file, or lies in /dev.
fn check_derived(path: &Path) -> Result<()> {
    if let Ok(md) = std::fs::symlink_metadata(path)
        && !md.is_file()
    {
        bail!(
            "--fio-log: {} exists and is not a regular file (a symlink, a directory, a FIFO or a \
             device); nines replaces only regular files it derives from the prefix, so remove it \
             or give another prefix",
            path.display()
        );
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    if dir.starts_with("/dev") || dir.starts_with("/proc") || dir.starts_with("/sys") {
        bail!(
            "--fio-log: {} is in {}, where no log file belongs; give a prefix in a directory",
            path.display(),
            dir.display()
        );
    }
    Ok(())
}

/// The fio logs of a run, if any: their files and the driver's side.
type Asked = (Option<FioLogFiles>, Option<FioLogOut>);

impl FioLogFiles {
    /// The logs `args` (or else the job file) ask for, checked ([`FioLogFiles::create`]).
    pub fn asked(args: &FioLogArgs, job_file: &FioLogSpec) -> Result<Asked> {
        match args.spec(job_file) {
            Some(s) => FioLogFiles::create(s).map(|(f, o)| (Some(f), Some(o))),
            None => Ok((None, None)),
        }
    }

    /// Checks the first fio job's files (the others are checked as they are opened, still before
    /// the first I/O) and returns the driver's side: files opened as the run starts.
    pub fn create(spec: FioLogSpec) -> Result<(FioLogFiles, FioLogOut)> {
        for (_, _, name) in spec.files(1) {
            check_derived(Path::new(&name))?;
            super::output::check_path("--fio-log", Path::new(&name))?;
        }
        let pending = Arc::new(Mutex::new(Vec::new()));
        let into = pending.clone();
        let open = move |name: &str| -> Result<std::fs::File, String> {
            let path = Path::new(name);
            check_derived(path).map_err(|e| e.to_string())?;
            let (out, file) =
                PendingOutput::create("--fio-log", path).map_err(|e| format!("{e:#}"))?;
            into.lock().unwrap_or_else(|e| e.into_inner()).push(out);
            Ok(file)
        };
        Ok((
            FioLogFiles { pending },
            FioLogOut {
                spec,
                open: Box::new(open),
            },
        ))
    }

    /// Moves every log into place: the run succeeded.
    pub fn commit(self) -> Result<()> {
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        for p in pending {
            p.commit()?;
        }
        Ok(())
    }
}
