//! Workload options shared by `nines profile` and `nines sim`: one definition, so a simulated run
//! and a real run of the same command line do the same thing.

use anyhow::{Context, Result};
use clap::Args;
use nines_core::units::{
    DEFAULT_PERCENTILES, parse_duration_ns, parse_percentiles, parse_size_bytes,
};
use nines_core::workload::{Arrival, Distribution, RwMode, WorkloadSpec};

/// The default measured time when neither `--runtime` nor `--ios` is given.
pub const RUNTIME_DEFAULT: &str = "10s";

#[derive(Args, Debug, Clone)]
pub struct WorkloadArgs {
    /// Access pattern: read, write, randread, randwrite or randrw.
    #[arg(long, default_value = "randread", value_parser = parse_rw)]
    pub rw: RwMode,
    /// Read share in percent for randrw.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub mix: u8,
    /// Block size (4k, 128k, 1m ...).
    #[arg(long, default_value = "4k", value_parser = parse_size)]
    pub bs: u64,
    /// I/Os in flight per target.
    #[arg(long, default_value_t = 1)]
    pub iodepth: u32,
    /// Measured time (10s, 500ms, 2m ...), after the ramp. Default 10s unless --ios is given.
    #[arg(long, value_parser = parse_duration)]
    pub runtime: Option<u64>,
    /// Stop after this many I/Os per target (ramp excluded).
    #[arg(long)]
    pub ios: Option<u64>,
    /// Time run first and excluded from the statistics.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub ramp: u64,
    /// Size of the region used on each target (default: from --offset to the end).
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Start of the region used on each target.
    #[arg(long, default_value = "0", value_parser = parse_size)]
    pub offset: u64,
    /// Open-loop pacing, I/Os per second per target: latency counts from when each I/O was due.
    #[arg(long)]
    pub rate_iops: Option<u64>,
    /// How --rate-iops spaces I/Os: fixed (even) or poisson (exponential gaps).
    #[arg(long, default_value = "fixed", value_parser = parse_arrival)]
    pub arrival: Arrival,
    /// Pause after each completion before that slot issues again (e.g. 100us).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub thinktime: u64,
    /// Offset distribution for random patterns: uniform or zipf:THETA.
    #[arg(long, default_value = "uniform", value_parser = parse_distribution)]
    pub distribution: Distribution,
    /// Seed of the request stream: the same seed gives the same offsets on every engine.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Percentiles to report (default 50,90,99,99.9,99.99,99.999,99.9999).
    #[arg(long, value_parser = parse_pct)]
    pub percentiles: Option<PercentileList>,
}

/// One `--percentiles` value: a whole list (clap would read a bare `Vec` as repeated values).
#[derive(Debug, Clone, PartialEq)]
pub struct PercentileList(pub Vec<f64>);

fn parse_rw(s: &str) -> Result<RwMode, String> {
    s.parse::<RwMode>().map_err(|e| e.to_string())
}
fn parse_size(s: &str) -> Result<u64, String> {
    parse_size_bytes(s).map_err(|e| e.to_string())
}
fn parse_duration(s: &str) -> Result<u64, String> {
    parse_duration_ns(s).map_err(|e| e.to_string())
}
fn parse_arrival(s: &str) -> Result<Arrival, String> {
    s.parse::<Arrival>().map_err(|e| e.to_string())
}
fn parse_distribution(s: &str) -> Result<Distribution, String> {
    s.parse::<Distribution>().map_err(|e| e.to_string())
}
fn parse_pct(s: &str) -> Result<PercentileList, String> {
    parse_percentiles(s)
        .map(PercentileList)
        .map_err(|e| e.to_string())
}

impl WorkloadArgs {
    /// The validated workload.
    pub fn to_spec(&self) -> Result<WorkloadSpec> {
        let runtime_ns = match (self.runtime, self.ios) {
            (None, None) => Some(parse_duration_ns(RUNTIME_DEFAULT).expect("constant")),
            (r, _) => r,
        };
        let spec = WorkloadSpec {
            rw: self.rw,
            read_mix_pct: self.mix,
            block_size_bytes: self.bs,
            iodepth: self.iodepth,
            runtime_ns,
            ios_max: self.ios,
            ramp_ns: self.ramp,
            region_offset_bytes: self.offset,
            region_size_bytes: self.size,
            rate_iops: self.rate_iops,
            arrival: self.arrival,
            thinktime_ns: self.thinktime,
            distribution: self.distribution,
            seed: self.seed,
        };
        spec.validate().context("invalid workload")?;
        Ok(spec)
    }

    /// The percentiles to report.
    pub fn percentiles(&self) -> Result<Vec<f64>> {
        Ok(self
            .percentiles
            .as_ref()
            .map_or_else(|| DEFAULT_PERCENTILES.to_vec(), |p| p.0.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        w: WorkloadArgs,
    }

    fn parse(args: &[&str]) -> Result<WorkloadSpec> {
        let t = T::try_parse_from(std::iter::once("t").chain(args.iter().copied()))?;
        t.w.to_spec()
    }

    #[test]
    fn defaults_and_options() {
        let s = parse(&[]).unwrap();
        assert_eq!(s, WorkloadSpec::default());
        let s = parse(&[
            "--rw",
            "randrw",
            "--mix",
            "70",
            "--bs",
            "128k",
            "--ios",
            "5",
            "--rate-iops",
            "100",
        ])
        .unwrap();
        assert_eq!(
            (s.rw, s.read_mix_pct, s.block_size_bytes),
            (RwMode::RandRw, 70, 131072)
        );
        assert_eq!(
            (s.runtime_ns, s.ios_max, s.rate_iops),
            (None, Some(5), Some(100))
        );
        let t = T::try_parse_from(["t", "--percentiles", "50,99.9999"]).unwrap();
        assert_eq!(t.w.percentiles().unwrap(), vec![50.0, 99.9999]);
    }

    #[test]
    fn bad_values_are_refused_with_the_reason() {
        for bad in [
            &["--bs", "4q"][..],
            &["--bs", "1000"],
            &["--iodepth", "0"],
            &["--mix", "101"],
            &["--runtime", "ten"],
            &["--rw", "readwrite"],
            &["--distribution", "zipf:0"],
            &["--percentiles", "0,50"],
            &["--rate-iops", "0"],
            &["--arrival", "bursty"],
        ] {
            let err = parse(bad).unwrap_err();
            let msg = format!("{err:#}");
            // The message names the option or the value the user typed.
            assert!(
                msg.contains(bad[0]) || msg.contains(bad[1]),
                "{bad:?}: {msg}"
            );
        }
    }
}
