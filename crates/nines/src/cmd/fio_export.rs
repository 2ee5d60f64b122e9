//! `--fio-json` and `--fio-json-plus` for `profile` and `sim`: fio-format exports of a run
//! (nines_report::fio), with the run's recorders and interval log when it has them.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use nines_core::stats::{DeviceRecorder, IoDepthCounts, LatencyParts};
use nines_report::fio::{FioFlavor, FioPercentiles, FioSource};
use nines_report::intervals::IntervalSeries;

#[derive(clap::Args, Debug, Default, Clone)]
#[command(next_help_heading = "Outputs")]
pub struct FioArgs {
    /// Write fio-compatible JSON (fio 3.33's --output-format=json, one job per target), for
    /// fio-plot and other fio tooling: slat, clat and lat as fio defines them, percentiles under
    /// clat_ns as fio's default (docs/report-schema.md).
    #[arg(long, value_name = "FILE")]
    pub fio_json: Option<PathBuf>,
    /// Write fio's json+ layout: --fio-json plus every latency bucket's count (`bins`), for
    /// fio_jsonplus_clat2csv and histogram tools.
    #[arg(long, value_name = "FILE")]
    pub fio_json_plus: Option<PathBuf>,
    /// Write --fio-json/--fio-json-plus as fio's group_reporting does: one job per nines job,
    /// its targets merged (I/O-weighted mean, merged histograms, summed IOPS), so fio-plot's
    /// -l shows nines' mean rather than the unweighted mean of per-target jobs.
    #[arg(long)]
    pub fio_group_reporting: bool,
    /// Which latencies carry percentiles (and json+ bins) in --fio-json/--fio-json-plus, as
    /// fio's slat_percentiles, clat_percentiles and lat_percentiles: any of slat,clat,lat, or
    /// none. fio's default is clat.
    #[arg(long, value_name = "KINDS", default_value = "clat", value_parser = FioPercentiles::parse)]
    pub fio_percentiles: FioPercentiles,
}

/// What a run hands its fio exports beside the report.
pub struct FioRun<'a> {
    /// Each target's recorder (merged over jobs), and per job.
    pub recorders: &'a [DeviceRecorder],
    pub job_recorders: Option<&'a [Vec<DeviceRecorder>]>,
    /// Each target's slat and clat, and its queue depths (real runs).
    pub parts: Option<&'a [Option<LatencyParts>]>,
    pub depth: Option<&'a [IoDepthCounts]>,
    pub group_reporting: bool,
    pub percentiles: FioPercentiles,
}

/// The interval series of a run's --hdr-log, for the fio bandwidth and IOPS samples. A log that
/// cannot be read leaves the samples out (they are optional in fio's output too), with a warning.
pub fn read_intervals(path: &Path) -> Vec<IntervalSeries> {
    let parsed = nines_core::input::read(path, nines_core::input::HDR_LOG_MAX_BYTES)
        .map_err(|e| e.to_string())
        .and_then(|b| nines_report::intervals::parse_interval_log(&b).map_err(|e| e.to_string()));
    match parsed {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "nines: warning: --fio-json: the interval log {} could not be read back ({e}); bw/iops samples left out",
                path.display()
            );
            Vec::new()
        }
    }
}

/// Writes one fio export to an opened file.
pub fn write(mut file: File, option: &str, flavor: FioFlavor, src: &FioSource) -> Result<()> {
    let doc = nines_report::fio::export(src, flavor);
    file.write_all(doc.to_pretty().as_bytes())
        .with_context(|| format!("{option}: write failed"))
}
