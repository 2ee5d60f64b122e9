//! fio job files as input (`nines profile --job FILE.fio`): the subset of fio's options that
//! matters for latency work, turned into the same [`JobSpec`] list `--job NAME:key=value` gives,
//! plus the run-wide settings fio keeps in job files (targets, engine, CPUs, percentiles, logs).
//!
//! Syntax as fio reads it: `[section]` headers, `key=value` or bare `key` (a flag), lines starting
//! with `#` or `;` are comments. `[global]` options apply to every job section after them; each
//! other section is a job. Values keep fio's meaning: sizes are binary (`4k` = 4096), `runtime`
//! and `ramp_time` default to seconds, `thinktime` to microseconds, `percentile_list` is
//! `:`-separated, `filename` lists files separated by `:`.
//!
//! Every option outside the subset is refused, all of them in one error that names each with its
//! line and, where nines has an equivalent, what to use instead; nothing runs then.

use crate::job::{JobError, JobSpec, validate_jobs};
use crate::units::{parse_cpu_list, parse_duration_ns, parse_percentiles, parse_size_bytes};
use crate::workload::WorkloadSpec;
use crate::zbd::{ZbdOptions, ZoneMode, parse_open_zones, parse_ratio, parse_zone_mode};

/// The largest job file read (fio's own examples are a few KiB).
pub const JOB_FILE_BYTES_MAX: usize = 1 << 20;
/// Clones of one job (`numjobs`) at most.
pub const NUMJOBS_MAX: u64 = crate::job::JOBS_MAX as u64;

/// What a job file asks for besides its jobs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobFile {
    pub jobs: Vec<JobSpec>,
    /// From `filename=` (every job must name the same files): the run's targets.
    pub targets: Vec<String>,
    /// `ioengine`, as a nines engine name.
    pub engine: Option<String>,
    /// `direct=0` or `buffered=1`.
    pub buffered: bool,
    /// `cpus_allowed`, as a CPU list.
    pub cpus: Option<String>,
    /// `percentile_list`.
    pub percentiles: Option<Vec<f64>>,
    /// `write_lat_log=NAME`: nines' per-I/O log, written to `NAME.lat`.
    pub lat_log: Option<String>,
    /// `write_hist_log=NAME`: the interval histograms, written to `NAME.hlog`.
    pub hdr_log: Option<String>,
    /// `log_hist_msec`: the interval of the histogram log.
    pub hdr_interval_ns: Option<u64>,
    /// fio's defaults the file left to fio and nines applied (`ioengine=psync`, `direct=0`):
    /// where nines' own command line defaults differ, a job file still gets fio's.
    pub fio_defaults: Vec<String>,
    /// `zonemode=zbd` with its options (`zonesize`, `zonecapacity`, `max_open_zones`,
    /// `zone_reset_threshold`, `zone_reset_frequency`, `read_beyond_wp`); None: `zonemode=none`
    /// or not given.
    pub zbd: Option<ZbdOptions>,
    /// fio's own text logs beside nines' (`write_lat_log`, `write_bw_log`, `write_iops_log`,
    /// `write_hist_log` prefixes; `log_avg_msec`, `log_hist_msec`, `log_hist_coarseness`,
    /// `log_max_value`, `log_offset`), in fio's formats and file names (crate::fiolog).
    pub fio_logs: crate::fiolog::FioLogSpec,
}

/// One option nines does not run as written, with its line and why (an option outside the
/// subset, or a value nines cannot take).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    pub line: usize,
    pub option: String,
    pub why: String,
}

/// What the command line gives that replaces the file's own end and region: an explicit
/// `--runtime`, `--ios` or `--size` applies to every job of the file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replace {
    pub runtime_ns: Option<u64>,
    pub ios_max: Option<u64>,
    pub size_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JobFileError {
    #[error("line {line}: {text:?} is not `[section]`, `key=value` or `key`")]
    Syntax { line: usize, text: String },
    #[error("line {line}: {key}={value}: {reason}")]
    Value {
        line: usize,
        key: String,
        value: String,
        reason: String,
    },
    #[error("options nines does not run as written: {}", list(.0))]
    Unsupported(Vec<Unsupported>),
    #[error("no job section: add one, e.g. `[job1]`, after [global]")]
    NoJobs,
    #[error(
        "{what} differs between jobs ({a} and {b}); nines runs every job together on the same \
         targets with one {what}: give it once in [global]"
    )]
    Differs {
        what: &'static str,
        a: String,
        b: String,
    },
    #[error(
        "job {job}: no end: give runtime= (with time_based), size= or number_ios= in the file, or \
         --runtime/--size on the command line (fio would run over the whole file once; nines \
         needs the size)"
    )]
    NoEnd { job: String },
    #[error("{key}={value} applies with zonemode=zbd only; add zonemode=zbd or drop it")]
    ZoneOption { key: &'static str, value: String },
    #[error("the job file is larger than {JOB_FILE_BYTES_MAX} bytes")]
    TooLarge,
    #[error("{0}")]
    Job(#[from] JobError),
}

fn list(u: &[Unsupported]) -> String {
    u.iter()
        .map(|x| format!("line {} `{}` ({})", x.line, x.option, x.why))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why an option outside the subset is refused: a specific reason for the common ones.
fn why_unsupported(key: &str) -> &'static str {
    match key {
        "stonewall" | "wait_for" | "new_group" => {
            "nines runs every job at the same time; split the file into one run per group"
        }
        "startdelay" => "every job starts at once in nines",
        "verify" | "do_verify" | "verify_pattern" | "verify_interval" => {
            "use nines' --verify (a pattern of offset and seed, checked on every read)"
        }
        "bssplit" => "nines uses one block size per job",
        "nrfiles" | "filesize" | "directory" | "filename_format" | "opendir" | "unlink" => {
            "name the files or devices with filename="
        }
        "loops" => "give runtime= or number_ios= instead",
        "rate" | "rate_min" | "ratemin" => "nines paces by rate_iops",
        "iodepth_batch"
        | "iodepth_batch_submit"
        | "iodepth_batch_complete"
        | "iodepth_batch_complete_min"
        | "iodepth_batch_complete_max"
        | "iodepth_low" => "nines submits and reaps as the engine allows; only iodepth is taken",
        "sqthread_poll" | "hipri" => "use --engine io_uring-poll or --sqpoll",
        "latency_target" | "latency_window" | "latency_percentile" | "latency_run" => {
            "nines has no latency-target search; sweep queue depths with `nines sweep --qd`"
        }
        "disable_lat" | "disable_clat" | "disable_slat" | "gtod_reduce" | "clat_percentiles"
        | "lat_percentiles" | "slat_percentiles" => "nines always measures total latency",
        "per_job_logs"
        | "log_unix_epoch"
        | "log_alternate_epoch"
        | "log_prio"
        | "log_compression"
        | "log_store_compressed"
        | "log_entries" => {
            "nines writes fio's logs one set per job, plain text, times from the end of the ramp"
        }
        "bwavgtime" | "iopsavgtime" => "give log_avg_msec, which sets both",
        "include" => "include files are not read; paste their options in",
        "job_max_open_zones" => "nines keeps one open-zone limit per device: use max_open_zones",
        "ignore_zone_limits" => "nines keeps to the device's open and active zone limits; drop it",
        "write_zone_remainders" => {
            "nines finishes a zone whose room is smaller than the write; drop it"
        }
        "recover_zbd_write_error" => {
            "a write error fails the run in nines (continue_on_error is not run either)"
        }
        "zonerange" | "zoneskip" => {
            "fio's strided zone mode is not built (zonemode=zbd takes zonesize); drop it"
        }
        _ => "not in the subset nines runs",
    }
}

/// One option as written.
#[derive(Clone, Debug)]
struct Opt {
    line: usize,
    key: String,
    value: Option<String>,
}

struct Section {
    name: String,
    line: usize,
    opts: Vec<Opt>,
    /// The [global] options in force when the section started.
    globals: Vec<Opt>,
}

/// Splits the text into sections; syntax errors and `include` stop here.
fn sections(text: &str) -> Result<Vec<Section>, JobFileError> {
    let mut global: Vec<Opt> = Vec::new();
    let mut jobs: Vec<Section> = Vec::new();
    let mut in_global = false;
    let mut unsupported = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let t = strip_comment(raw).trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        if let Some(rest) = t.strip_prefix('[') {
            let Some(name) = rest.strip_suffix(']') else {
                return Err(JobFileError::Syntax {
                    line,
                    text: t.to_string(),
                });
            };
            let name = name.trim();
            if name.is_empty() {
                return Err(JobFileError::Syntax {
                    line,
                    text: t.to_string(),
                });
            }
            in_global = name == "global";
            if !in_global {
                jobs.push(Section {
                    name: name.to_string(),
                    line,
                    opts: Vec::new(),
                    globals: global.clone(),
                });
            }
            continue;
        }
        if t.starts_with("include ") || t == "include" {
            unsupported.push(Unsupported {
                line,
                option: t.to_string(),
                why: why_unsupported("include").to_string(),
            });
            continue;
        }
        let (key, value) = match t.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim().to_string())),
            None => (t, None),
        };
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(JobFileError::Syntax {
                line,
                text: t.to_string(),
            });
        }
        let opt = Opt {
            line,
            key: key.to_ascii_lowercase(),
            value,
        };
        if in_global {
            global.push(opt);
        } else if let Some(job) = jobs.last_mut() {
            job.opts.push(opt);
        } else {
            // Options before any section: fio refuses them too.
            return Err(JobFileError::Syntax {
                line,
                text: format!("{t} (before any [section])"),
            });
        }
    }
    if !unsupported.is_empty() {
        return Err(JobFileError::Unsupported(unsupported));
    }
    Ok(jobs)
}

/// The line without a trailing comment: fio ends a line at `;` or `#` after white space
/// (`numjobs=4 ; 4 threads`).
fn strip_comment(raw: &str) -> &str {
    let b = raw.as_bytes();
    for i in 1..b.len() {
        if matches!(b[i], b';' | b'#') && b[i - 1].is_ascii_whitespace() {
            return &raw[..i];
        }
    }
    raw
}

/// A fio time value: a bare number is in `default_unit_ns`, otherwise a duration with one of
/// fio's units (parse.c `get_mult_time`: us/usec, ms/msec, s/sec, m/min, h/hour, d/day).
fn fio_time_ns(v: &str, default_unit_ns: u64) -> Result<u64, String> {
    let v = v.trim();
    if !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()) {
        return v
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(default_unit_ns))
            .ok_or_else(|| "too large".to_string());
    }
    let lower = v.to_ascii_lowercase();
    let number = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &lower[number.len()..];
    let days = |n: &str| -> Result<u64, String> {
        parse_duration_ns(&format!("{n}h"))
            .map_err(|e| e.to_string())?
            .checked_mul(24)
            .ok_or_else(|| "too large".to_string())
    };
    match unit {
        "d" | "day" | "days" => days(number),
        "hour" | "hours" => parse_duration_ns(&format!("{number}h")).map_err(|e| e.to_string()),
        "usec" => parse_duration_ns(&format!("{number}us")).map_err(|e| e.to_string()),
        "msec" => parse_duration_ns(&format!("{number}ms")).map_err(|e| e.to_string()),
        _ => parse_duration_ns(v).map_err(|e| e.to_string()),
    }
}

/// A fio boolean: a bare flag, or 0/1 (also true/false).
fn fio_bool(v: Option<&str>) -> Result<bool, String> {
    match v.map(str::trim) {
        None | Some("1") | Some("true") | Some("yes") => Ok(true),
        Some("0") | Some("false") | Some("no") => Ok(false),
        Some(_) => Err("give 0 or 1".into()),
    }
}

/// A job name nines accepts: fio's section name with other characters replaced by `_`.
fn job_name(section: &str) -> String {
    let mut n: String = section
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    n.truncate(crate::job::JOB_NAME_BYTES_MAX - 4);
    n
}

/// Per job: what fio options decide together at the end.
#[derive(Default, Clone, Copy)]
struct Ends {
    time_based: bool,
    runtime_ns: Option<u64>,
    size_bytes: Option<u64>,
    io_size_bytes: Option<u64>,
    number_ios: Option<u64>,
    numjobs: u64,
}

/// Run-wide settings: each must agree between jobs.
#[derive(Default)]
struct RunWide {
    targets: Option<String>,
    engine: Option<String>,
    buffered: Option<bool>,
    cpus: Option<String>,
    percentiles: Option<String>,
    lat_log: Option<String>,
    hdr_log: Option<String>,
    hdr_interval: Option<String>,
    /// `zonemode` and its options, as given (checked when read).
    zonemode: Option<String>,
    zonesize: Option<String>,
    zonecapacity: Option<String>,
    max_open_zones: Option<String>,
    zone_reset_threshold: Option<String>,
    zone_reset_frequency: Option<String>,
    read_beyond_wp: Option<String>,
    fio_lat: Option<String>,
    fio_bw: Option<String>,
    fio_iops: Option<String>,
    fio_hist: Option<String>,
    log_avg: Option<String>,
    log_coarse: Option<String>,
    log_max: Option<String>,
    log_offset: Option<String>,
}

fn agree(slot: &mut Option<String>, what: &'static str, value: String) -> Result<(), JobFileError> {
    match slot {
        Some(a) if *a != value => Err(JobFileError::Differs {
            what,
            a: a.clone(),
            b: value,
        }),
        _ => {
            *slot = Some(value);
            Ok(())
        }
    }
}

/// Applies one option to a job; Ok(false) when the option is not in the subset.
fn apply(
    job: &mut JobSpec,
    ends: &mut Ends,
    job_run: &mut RunWide,
    o: &Opt,
) -> Result<bool, JobFileError> {
    if o.value.as_deref().is_some_and(|x| x.contains('$')) {
        return Err(bad(
            o,
            "environment variables and $-expressions are not expanded; write the value".into(),
        ));
    }
    // Options fio takes that change nothing nines measures.
    if matches!(
        o.key.as_str(),
        "name" | "description" | "group_reporting" | "thread" | "threads" | "norandommap"
    ) {
        return Ok(true);
    }
    Ok(apply_pattern(job, o)? || apply_end(job, ends, o)? || apply_run_wide(job, job_run, o)?)
}

/// The error of option `o`'s value, for `reason`.
fn bad(o: &Opt, reason: String) -> JobFileError {
    JobFileError::Value {
        line: o.line,
        key: o.key.clone(),
        value: o.value.as_deref().unwrap_or("").to_string(),
        reason,
    }
}

/// Option `o`'s value, which it needs.
fn need(o: &Opt) -> Result<&str, JobFileError> {
    o.value
        .as_deref()
        .ok_or_else(|| bad(o, "needs a value".into()))
}

/// Sets the job's `key` (as on the command line) to `value` for option `o`.
fn set(job: &mut JobSpec, o: &Opt, key: &str, value: &str) -> Result<(), JobFileError> {
    job.set(key, value).map_err(|e| match e {
        JobError::Value { reason, .. } => bad(o, reason),
        other => JobFileError::Job(other),
    })
}

/// The I/O pattern's options (one per arm): direction, mix, block size, depth, rate, think
/// time, offsets and seed. Ok(false) when `o` is none of them.
fn apply_pattern(job: &mut JobSpec, o: &Opt) -> Result<bool, JobFileError> {
    match o.key.as_str() {
        "rw" | "readwrite" => {
            let x = need(o)?;
            match x {
                "read" | "write" | "randread" | "randwrite" | "randrw" => set(job, o, "rw", x)?,
                _ if x.contains(':') => {
                    let (mode, modifier) = x.split_once(':').unwrap_or((x, ""));
                    return Err(bad(
                        o,
                        format!(
                            "the `:{modifier}` after {mode} (fio's offset modifier: a skip or a \
                             new random offset every N I/Os) is not supported; give rw={mode}"
                        ),
                    ));
                }
                "rw" | "readwrite" => {
                    return Err(bad(
                        o,
                        "sequential mixed I/O is not supported; use randrw (random mixed)".into(),
                    ));
                }
                _ => {
                    return Err(bad(
                        o,
                        "use read, write, randread, randwrite or randrw".into(),
                    ));
                }
            }
        }
        "rwmixread" => set(job, o, "mix", need(o)?)?,
        "rwmixwrite" => {
            let w: u8 = need(o)?
                .parse()
                .ok()
                .filter(|w| *w <= 100)
                .ok_or_else(|| bad(o, "give a percentage from 0 to 100".into()))?;
            set(job, o, "mix", &(100 - w).to_string())?;
        }
        "bs" | "blocksize" => {
            let x = need(o)?;
            if x.contains(',') || x.contains('-') || x.contains(':') {
                return Err(bad(
                    o,
                    "nines takes one block size for reads and writes (no ranges or splits)".into(),
                ));
            }
            set(job, o, "bs", x)?;
        }
        "bsrange" | "blocksize_range" => {
            // One size for reads and writes, as a range from it to itself: `4k-4k`.
            match need(o)?.split_once('-') {
                Some((a, b)) if a.trim() == b.trim() && !a.contains(',') => set(job, o, "bs", a)?,
                _ => {
                    return Err(bad(
                        o,
                        "nines uses one block size per job; give bs= (or a range from one size to itself)".into(),
                    ));
                }
            }
        }
        "iodepth" => set(job, o, "iodepth", need(o)?)?,
        "offset" => {
            let x = need(o)?;
            if x.ends_with('%') {
                return Err(bad(o, "give offset in bytes".into()));
            }
            set(job, o, "offset", x)?;
        }
        "rate_iops" => {
            let x = need(o)?;
            if x.contains(',') {
                return Err(bad(
                    o,
                    "nines takes one rate for reads and writes together".into(),
                ));
            }
            set(job, o, "rate-iops", x)?;
        }
        "rate_process" => match need(o)? {
            "poisson" => set(job, o, "arrival", "poisson")?,
            "linear" => set(job, o, "arrival", "fixed")?,
            _ => return Err(bad(o, "give linear or poisson".into())),
        },
        "thinktime" => {
            let ns = fio_time_ns(need(o)?, 1_000).map_err(|r| bad(o, r))?;
            set(job, o, "thinktime", &format!("{ns}ns"))?;
        }
        "thinktime_blocks" => set(job, o, "thinktime-blocks", need(o)?)?,
        "random_distribution" => {
            let x = need(o)?;
            if x == "random" {
                set(job, o, "distribution", "uniform")?;
            } else if x.starts_with("zipf:") && !x[5..].contains(':') {
                set(job, o, "distribution", x)?;
            } else {
                return Err(bad(
                    o,
                    "nines draws random (uniform) or zipf:THETA offsets".into(),
                ));
            }
        }
        "randseed" => set(job, o, "seed", need(o)?)?,
        _ => return Ok(false),
    }
    Ok(true)
}

/// The options that end a job or repeat it (one per arm): runtime, ramp, sizes, I/O counts,
/// numjobs. Ok(false) when `o` is none of them.
fn apply_end(job: &mut JobSpec, ends: &mut Ends, o: &Opt) -> Result<bool, JobFileError> {
    let v = o.value.as_deref();
    match o.key.as_str() {
        "runtime" | "timeout" => {
            ends.runtime_ns = Some(fio_time_ns(need(o)?, 1_000_000_000).map_err(|r| bad(o, r))?)
        }
        "time_based" => ends.time_based = fio_bool(v).map_err(|r| bad(o, r))?,
        "ramp_time" => {
            job.workload.ramp_ns = fio_time_ns(need(o)?, 1_000_000_000).map_err(|r| bad(o, r))?
        }
        "size" => {
            let x = need(o)?;
            if x.ends_with('%') {
                return Err(bad(
                    o,
                    "give size in bytes (4g); nines does not take a share of the file".into(),
                ));
            }
            ends.size_bytes = Some(parse_size_bytes(x).map_err(|e| bad(o, e.to_string()))?);
        }
        "io_size" | "io_limit" => {
            ends.io_size_bytes =
                Some(parse_size_bytes(need(o)?).map_err(|e| bad(o, e.to_string()))?)
        }
        "number_ios" => {
            ends.number_ios = Some(
                need(o)?
                    .parse()
                    .map_err(|_| bad(o, "give a whole number".into()))?,
            )
        }
        "numjobs" => {
            let n: u64 = need(o)?
                .parse()
                .map_err(|_| bad(o, "give a whole number".into()))?;
            if n == 0 || n > NUMJOBS_MAX {
                return Err(bad(o, format!("give 1 to {NUMJOBS_MAX}")));
            }
            ends.numjobs = n;
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// The run-wide options (one per arm), which every job must agree on: targets, engine, direct
/// I/O, CPUs, percentiles and logs. Ok(false) when `o` is none of them.
fn apply_run_wide(job: &JobSpec, job_run: &mut RunWide, o: &Opt) -> Result<bool, JobFileError> {
    let v = o.value.as_deref();
    match o.key.as_str() {
        "filename" => job_run.targets = Some(need(o)?.to_string()),
        "ioengine" => {
            let engine = match need(o)? {
                "libaio" => "libaio",
                "io_uring" => "io_uring",
                // fio's NVMe passthrough engine (cmd_type=nvme, its default and only type).
                "io_uring_cmd" => "io_uring-cmd",
                "psync" | "sync" | "pvsync" => "psync",
                "null" => "null",
                _ => {
                    return Err(bad(
                        o,
                        "nines runs libaio, io_uring, io_uring_cmd, psync (sync, pvsync) or null"
                            .into(),
                    ));
                }
            };
            job_run.engine = Some(engine.to_string());
        }
        "direct" => job_run.buffered = Some(!fio_bool(v).map_err(|r| bad(o, r))?),
        "buffered" => job_run.buffered = Some(fio_bool(v).map_err(|r| bad(o, r))?),
        "cpus_allowed" => {
            let x = need(o)?;
            parse_cpu_list(x).map_err(|e| bad(o, e.to_string()))?;
            job_run.cpus = Some(x.to_string());
        }
        "percentile_list" => {
            let x = need(o)?;
            parse_percentiles(&x.replace(':', ",")).map_err(|e| bad(o, e.to_string()))?;
            job_run.percentiles = Some(x.replace(':', ","));
        }
        "write_lat_log" => {
            let prefix = v.unwrap_or(job.name.as_str());
            job_run.lat_log = Some(format!("{prefix}.lat"));
            job_run.fio_lat = Some(prefix.to_string());
        }
        "write_hist_log" => {
            let prefix = v.unwrap_or(job.name.as_str());
            job_run.hdr_log = Some(format!("{prefix}.hlog"));
            job_run.fio_hist = Some(prefix.to_string());
        }
        "write_bw_log" => job_run.fio_bw = Some(v.unwrap_or(job.name.as_str()).to_string()),
        "write_iops_log" => job_run.fio_iops = Some(v.unwrap_or(job.name.as_str()).to_string()),
        "log_avg_msec" => {
            let ms: u64 = need(o)?
                .parse()
                .map_err(|_| bad(o, "give milliseconds (0: every I/O)".into()))?;
            job_run.log_avg = Some(ms.to_string());
        }
        "log_hist_coarseness" => {
            let c: u32 = need(o)?
                .parse()
                .ok()
                .filter(|c| *c <= 6)
                .ok_or_else(|| bad(o, "give 0 to 6".into()))?;
            job_run.log_coarse = Some(c.to_string());
        }
        "log_max_value" => {
            job_run.log_max = Some(fio_bool(v).map_err(|r| bad(o, r))?.to_string());
        }
        "log_offset" => {
            job_run.log_offset = Some(fio_bool(v).map_err(|r| bad(o, r))?.to_string());
        }
        "zonemode"
        | "zonesize"
        | "zonecapacity"
        | "max_open_zones"
        | "zone_reset_threshold"
        | "zone_reset_frequency"
        | "read_beyond_wp" => apply_zoned(job_run, o)?,
        "log_hist_msec" => {
            let ms: u64 = need(o)?
                .parse()
                .ok()
                .filter(|m| *m > 0)
                .ok_or_else(|| bad(o, "give milliseconds, at least 1".into()))?;
            job_run.hdr_interval = Some(ms.to_string());
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// fio's zoned block device options (`zonemode=zbd` and what goes with it), each checked as
/// read; which combination runs is decided once the jobs agree ([`zbd_options`]).
fn apply_zoned(job_run: &mut RunWide, o: &Opt) -> Result<(), JobFileError> {
    let v = o.value.as_deref();
    let text = match o.key.as_str() {
        "zonemode" => {
            parse_zone_mode(need(o)?).map_err(|e| bad(o, e.to_string()))?;
            &mut job_run.zonemode
        }
        "zonesize" | "zonecapacity" => {
            let b = parse_size_bytes(need(o)?).map_err(|e| bad(o, e.to_string()))?;
            if b == 0 || !b.is_multiple_of(512) {
                return Err(bad(o, "give a size in whole 512-byte sectors".into()));
            }
            if o.key == "zonesize" {
                &mut job_run.zonesize
            } else {
                &mut job_run.zonecapacity
            }
        }
        "max_open_zones" => {
            parse_open_zones(need(o)?).map_err(|e| bad(o, e.to_string()))?;
            &mut job_run.max_open_zones
        }
        "zone_reset_threshold" | "zone_reset_frequency" => {
            let what = if o.key == "zone_reset_threshold" {
                "zone_reset_threshold"
            } else {
                "zone_reset_frequency"
            };
            parse_ratio(what, need(o)?).map_err(|e| bad(o, e.to_string()))?;
            if o.key == "zone_reset_threshold" {
                &mut job_run.zone_reset_threshold
            } else {
                &mut job_run.zone_reset_frequency
            }
        }
        _ => {
            let b = fio_bool(v).map_err(|r| bad(o, r))?;
            job_run.read_beyond_wp = Some((b as u8).to_string());
            return Ok(());
        }
    };
    *text = Some(need(o).unwrap_or("").trim().to_string());
    Ok(())
}

/// The run's `zonemode=zbd` options from the agreed zone keys (checked when read): None without
/// `zonemode=zbd`; the other keys without it are refused, naming it.
fn zbd_options(run: &RunWide) -> Result<Option<ZbdOptions>, JobFileError> {
    let mode = run
        .zonemode
        .as_deref()
        .map(|m| parse_zone_mode(m).expect("checked when read"));
    let others = [
        ("zonesize", &run.zonesize),
        ("zonecapacity", &run.zonecapacity),
        ("max_open_zones", &run.max_open_zones),
        ("zone_reset_threshold", &run.zone_reset_threshold),
        ("zone_reset_frequency", &run.zone_reset_frequency),
        ("read_beyond_wp", &run.read_beyond_wp),
    ];
    if mode != Some(ZoneMode::Zbd) {
        if let Some((key, Some(value))) = others.iter().find(|(_, v)| v.is_some()) {
            return Err(JobFileError::ZoneOption {
                key,
                value: value.clone(),
            });
        }
        return Ok(None);
    }
    let size = |v: &Option<String>| {
        v.as_deref()
            .map(|x| parse_size_bytes(x).expect("checked when read"))
    };
    let ratio = |what, v: &Option<String>| {
        v.as_deref()
            .map_or(0.0, |x| parse_ratio(what, x).expect("checked when read"))
    };
    Ok(Some(ZbdOptions {
        max_open_zones: run
            .max_open_zones
            .as_deref()
            .and_then(|x| parse_open_zones(x).expect("checked when read")),
        zone_reset_threshold: ratio("zone_reset_threshold", &run.zone_reset_threshold),
        zone_reset_frequency: ratio("zone_reset_frequency", &run.zone_reset_frequency),
        read_beyond_wp: run.read_beyond_wp.as_deref() == Some("1"),
        zone_size_bytes: size(&run.zonesize),
        zone_capacity_bytes: size(&run.zonecapacity),
    }))
}

/// Reads a fio job file. `base` is the workload the jobs start from (the command line's).
pub fn parse(text: &str, base: &WorkloadSpec) -> Result<JobFile, JobFileError> {
    parse_replacing(text, base, &Replace::default())
}

/// Reads a fio job file, the command line's `replace` taking the place of each job's end and
/// region size. Every option that cannot run is named, with its line, in one error (an option in
/// [global] once, however many jobs it applies to); nothing runs then.
pub fn parse_replacing(
    text: &str,
    base: &WorkloadSpec,
    replace: &Replace,
) -> Result<JobFile, JobFileError> {
    if text.len() > JOB_FILE_BYTES_MAX {
        return Err(JobFileError::TooLarge);
    }
    let sections = sections(text)?;
    if sections.is_empty() {
        return Err(JobFileError::NoJobs);
    }
    let mut unsupported = Vec::new();
    let mut run = RunWide::default();
    let mut jobs = Vec::new();
    for sec in &sections {
        let name = job_name(&sec.name);
        let mut job = JobSpec::new(&name, base).map_err(|_| JobFileError::Syntax {
            line: sec.line,
            text: format!("[{}]", sec.name),
        })?;
        job.workload.seed = base.seed.wrapping_add(jobs.len() as u64);
        let mut ends = Ends {
            numjobs: 1,
            ..Ends::default()
        };
        let mut job_run = RunWide::default();
        apply_section(sec, &mut job, &mut ends, &mut job_run, &mut unsupported)?;
        if !unsupported.is_empty() {
            // Ends and agreement between jobs are judged once the options run as written.
            continue;
        }
        job_end(&mut job, ends, replace, sec.line)?;
        // fio's thinktime_blocks defaults to 1: a thinking job rests after every I/O, which
        // caps it at one I/O in flight whatever its iodepth.
        if job.workload.thinktime_ns > 0 && job.workload.thinktime_blocks == 0 {
            job.workload.thinktime_blocks = 1;
        }
        agree_run_wide(&mut run, job_run)?;
        for k in 0..ends.numjobs {
            let mut clone = job.clone();
            if k > 0 {
                clone.name = format!("{name}.{k}");
                clone.workload.seed = base.seed.wrapping_add((jobs.len()) as u64);
            }
            jobs.push(clone);
        }
    }
    if !unsupported.is_empty() {
        unsupported.sort_by_key(|u| u.line);
        return Err(JobFileError::Unsupported(unsupported));
    }
    validate_jobs(&jobs)?;
    let mut fio_defaults = Vec::new();
    let zbd = zbd_options(&run)?;
    let fio_logs = fio_logs(&run);
    let targets = run
        .targets
        .map(|t| {
            t.split(':')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    Ok(JobFile {
        jobs,
        targets,
        // fio's defaults, not nines': psync, and buffered I/O (direct=0).
        engine: Some(run.engine.unwrap_or_else(|| {
            fio_defaults.push("ioengine=psync".to_string());
            "psync".to_string()
        })),
        buffered: run.buffered.unwrap_or_else(|| {
            fio_defaults.push("direct=0 (buffered)".to_string());
            true
        }),
        cpus: run.cpus,
        percentiles: run
            .percentiles
            .map(|p| parse_percentiles(&p).expect("checked when read")),
        lat_log: run.lat_log,
        hdr_log: run.hdr_log,
        hdr_interval_ns: run
            .hdr_interval
            .as_ref()
            .map(|ms| ms.parse::<u64>().expect("checked when read") * 1_000_000),
        fio_defaults,
        zbd,
        fio_logs,
    })
}

/// The fio text logs of the run-wide settings (each value checked when read).
fn fio_logs(run: &RunWide) -> crate::fiolog::FioLogSpec {
    let num = |s: &Option<String>| s.as_ref().map(|x| x.parse::<u64>().expect("checked"));
    let mut f = crate::fiolog::FioLogSpec::new();
    f.lat = run.fio_lat.clone();
    f.bw = run.fio_bw.clone();
    f.iops = run.fio_iops.clone();
    f.hist = run.fio_hist.clone();
    f.avg_msec = num(&run.log_avg).unwrap_or(0);
    f.hist_msec = num(&run.hdr_interval).unwrap_or(f.hist_msec);
    f.hist_coarseness = num(&run.log_coarse).unwrap_or(0) as u32;
    f.log_max = run.log_max.as_deref() == Some("true");
    f.log_offset = run.log_offset.as_deref() == Some("true");
    f
}

/// Applies a section's options ([global] first) to its job; each option that cannot run is
/// added to `unsupported` (a [global] one once, however many jobs it applies to).
fn apply_section(
    sec: &Section,
    job: &mut JobSpec,
    ends: &mut Ends,
    job_run: &mut RunWide,
    unsupported: &mut Vec<Unsupported>,
) -> Result<(), JobFileError> {
    for o in sec.globals.iter().chain(&sec.opts) {
        let why = match apply(job, ends, job_run, o) {
            Ok(true) => continue,
            Ok(false) => why_unsupported(&o.key).to_string(),
            Err(JobFileError::Value { reason, .. }) => reason,
            Err(e) => return Err(e),
        };
        let option = match &o.value {
            Some(v) => format!("{}={v}", o.key),
            None => o.key.clone(),
        };
        // A [global] option is named once, not once per job it applies to.
        if !unsupported
            .iter()
            .any(|u: &Unsupported| u.line == o.line && u.option == option)
        {
            unsupported.push(Unsupported {
                line: o.line,
                option,
                why,
            });
        }
    }
    Ok(())
}

/// The job's end, as fio decides it, after the command line's `replace`: time_based runs for
/// runtime; otherwise the job ends after size (or io_size, or number_ios) worth of I/O, or at
/// runtime if that comes first. An error when it has no end (`line`: its section's).
fn job_end(
    job: &mut JobSpec,
    mut ends: Ends,
    replace: &Replace,
    line: usize,
) -> Result<(), JobFileError> {
    if let Some(ns) = replace.runtime_ns {
        ends.runtime_ns = Some(ns);
    }
    if let Some(n) = replace.ios_max {
        ends.number_ios = Some(n);
    }
    if let Some(b) = replace.size_bytes {
        ends.size_bytes = Some(b);
        ends.io_size_bytes = None;
    }
    let w = &mut job.workload;
    w.runtime_ns = ends.runtime_ns;
    w.ios_max = match (ends.time_based, ends.number_ios) {
        (_, Some(n)) => Some(n),
        (true, None) => None,
        (false, None) => ends
            .io_size_bytes
            .or(ends.size_bytes)
            .map(|b| (b / w.block_size_bytes.max(1)).max(1)),
    };
    if let Some(size) = ends.size_bytes {
        w.region_size_bytes = Some(size);
    }
    if w.runtime_ns.is_none() && w.ios_max.is_none() {
        if ends.time_based {
            return Err(JobFileError::Value {
                line,
                key: "time_based".into(),
                value: String::new(),
                reason: format!("job {} has no runtime= to run for", job.name),
            });
        }
        return Err(JobFileError::NoEnd {
            job: job.name.clone(),
        });
    }
    Ok(())
}

/// Takes a job's run-wide settings into the run's; an error where they differ.
fn agree_run_wide(run: &mut RunWide, job_run: RunWide) -> Result<(), JobFileError> {
    for (slot, what, value) in [
        (&mut run.targets, "filename", job_run.targets),
        (&mut run.engine, "ioengine", job_run.engine),
        (&mut run.cpus, "cpus_allowed", job_run.cpus),
        (&mut run.percentiles, "percentile_list", job_run.percentiles),
        (&mut run.lat_log, "write_lat_log", job_run.lat_log),
        (&mut run.hdr_log, "write_hist_log", job_run.hdr_log),
        (&mut run.hdr_interval, "log_hist_msec", job_run.hdr_interval),
        (&mut run.zonemode, "zonemode", job_run.zonemode),
        (&mut run.zonesize, "zonesize", job_run.zonesize),
        (&mut run.zonecapacity, "zonecapacity", job_run.zonecapacity),
        (
            &mut run.max_open_zones,
            "max_open_zones",
            job_run.max_open_zones,
        ),
        (
            &mut run.zone_reset_threshold,
            "zone_reset_threshold",
            job_run.zone_reset_threshold,
        ),
        (
            &mut run.zone_reset_frequency,
            "zone_reset_frequency",
            job_run.zone_reset_frequency,
        ),
        (
            &mut run.read_beyond_wp,
            "read_beyond_wp",
            job_run.read_beyond_wp,
        ),
        (&mut run.fio_lat, "write_lat_log", job_run.fio_lat),
        (&mut run.fio_bw, "write_bw_log", job_run.fio_bw),
        (&mut run.fio_iops, "write_iops_log", job_run.fio_iops),
        (&mut run.fio_hist, "write_hist_log", job_run.fio_hist),
        (&mut run.log_avg, "log_avg_msec", job_run.log_avg),
        (
            &mut run.log_coarse,
            "log_hist_coarseness",
            job_run.log_coarse,
        ),
        (&mut run.log_max, "log_max_value", job_run.log_max),
        (&mut run.log_offset, "log_offset", job_run.log_offset),
    ] {
        if let Some(v) = value {
            agree(slot, what, v)?;
        }
    }
    if let Some(b) = job_run.buffered {
        if run.buffered.is_some_and(|a| a != b) {
            return Err(JobFileError::Differs {
                what: "direct",
                a: (!run.buffered.unwrap_or(false) as u8).to_string(),
                b: (!b as u8).to_string(),
            });
        }
        run.buffered = Some(b);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Distribution, RwMode};
    use proptest::prelude::*;

    fn base() -> WorkloadSpec {
        WorkloadSpec::default()
    }

    #[test]
    fn global_and_job_sections_become_jobs() {
        let text = "\
; a latency job
[global]
filename=/dev/nvme0n1:/dev/nvme1n1
ioengine=io_uring
direct=1
bs=4k
runtime=30
time_based
ramp_time=2s
percentile_list=50:99.9:99.9999
write_lat_log=run
write_hist_log=run
log_hist_msec=500
cpus_allowed=2-3
group_reporting

[reads]
rw=randread
iodepth=10
random_distribution=zipf:1.2

[burst]
rw=randwrite
bs=512k
thinktime=2560000
numjobs=2
";
        let f = parse(text, &base()).unwrap();
        assert_eq!(f.targets, ["/dev/nvme0n1", "/dev/nvme1n1"]);
        assert_eq!(f.engine.as_deref(), Some("io_uring"));
        assert!(!f.buffered);
        assert_eq!(f.cpus.as_deref(), Some("2-3"));
        assert_eq!(f.percentiles, Some(vec![50.0, 99.9, 99.9999]));
        assert_eq!(f.lat_log.as_deref(), Some("run.lat"));
        assert_eq!(f.hdr_log.as_deref(), Some("run.hlog"));
        assert_eq!(f.hdr_interval_ns, Some(500_000_000));
        let names: Vec<&str> = f.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["reads", "burst", "burst.1"]);
        let r = &f.jobs[0].workload;
        assert_eq!(r.rw, RwMode::RandRead);
        assert_eq!((r.iodepth, r.block_size_bytes), (10, 4096));
        assert_eq!(r.runtime_ns, Some(30_000_000_000));
        assert_eq!(r.ramp_ns, 2_000_000_000);
        assert_eq!(r.ios_max, None, "time_based: the runtime ends it");
        assert_eq!(r.distribution, Distribution::Zipf { theta: 1.2 });
        let w = &f.jobs[1].workload;
        assert_eq!(w.block_size_bytes, 512 << 10);
        assert_eq!(
            w.thinktime_ns, 2_560_000_000,
            "thinktime is in microseconds"
        );
        assert_eq!(w.thinktime_blocks, 1, "fio's default: rest after every I/O");
        assert_eq!(
            r.thinktime_blocks, 0,
            "a job that does not think has no bursts"
        );
        // Every job gets its own random stream; clones too.
        let seeds: Vec<u64> = f.jobs.iter().map(|j| j.workload.seed).collect();
        assert_eq!(seeds, [1, 2, 3]);
    }

    /// fio's log options: one set of text logs per job beside nines' binary logs.
    #[test]
    fn fio_log_options_become_fios_text_logs() {
        let text = "[global]\nruntime=1\nwrite_lat_log=run\nwrite_bw_log=bw\nwrite_iops_log\n\
                    write_hist_log=h\nlog_hist_msec=250\nlog_avg_msec=100\nlog_hist_coarseness=3\n\
                    log_max_value=1\nlog_offset=1\n[a]\nrw=randread\n";
        let f = parse(text, &base()).unwrap();
        assert_eq!(
            f.lat_log.as_deref(),
            Some("run.lat"),
            "nines' own log stays"
        );
        let l = &f.fio_logs;
        assert_eq!(l.lat.as_deref(), Some("run"));
        assert_eq!(l.bw.as_deref(), Some("bw"));
        assert_eq!(
            l.iops.as_deref(),
            Some("a"),
            "no value: the job's name, as fio"
        );
        assert_eq!(l.hist.as_deref(), Some("h"));
        assert_eq!((l.avg_msec, l.hist_msec, l.hist_coarseness), (100, 250, 3));
        assert!(l.log_max && l.log_offset);
        let names: Vec<String> = l.files(1).into_iter().map(|(_, _, n)| n).collect();
        assert_eq!(
            names,
            [
                "run_lat.1.log",
                "run_clat.1.log",
                "run_slat.1.log",
                "bw_bw.1.log",
                "a_iops.1.log",
                "h_clat_hist.1.log"
            ]
        );
        for bad in ["log_hist_coarseness=7", "log_avg_msec=x", "log_offset=2"] {
            let e = parse(&format!("[a]\nruntime=1\n{bad}\n"), &base()).unwrap_err();
            assert!(
                e.to_string().contains(bad.split('=').next().unwrap()),
                "{e}"
            );
        }
        let e = parse("[a]\nruntime=1\nper_job_logs=0\n", &base()).unwrap_err();
        assert!(e.to_string().contains("one set per job"), "{e}");
    }

    #[test]
    fn fio_time_units_and_defaults_are_fios() {
        for (v, ns) in [
            ("365d", 365 * 86_400_000_000_000u64),
            ("2hour", 7_200_000_000_000),
            ("1min", 60_000_000_000),
            ("500msec", 500_000_000),
            ("10usec", 10_000),
            ("30", 30_000_000_000),
        ] {
            let f = parse(&format!("[j]\nruntime={v}\ntime_based\n"), &base()).unwrap();
            assert_eq!(f.jobs[0].workload.runtime_ns, Some(ns), "{v}");
        }
        assert!(parse("[j]\nruntime=1fortnight\n", &base()).is_err());
        // Neither ioengine nor direct: fio's psync and buffered I/O, and the file says so.
        let f = parse("[j]\nruntime=1\nthreads=1\n", &base()).unwrap();
        assert_eq!((f.engine.as_deref(), f.buffered), (Some("psync"), true));
        assert_eq!(f.fio_defaults, ["ioengine=psync", "direct=0 (buffered)"]);
        let f = parse("[j]\nruntime=1\nioengine=libaio\ndirect=1\n", &base()).unwrap();
        assert_eq!((f.engine.as_deref(), f.buffered), (Some("libaio"), false));
        assert!(f.fio_defaults.is_empty());
        // rw's offset modifier is named as what is not supported.
        let e = parse("[j]\nruntime=1\nrw=read:-8k\n", &base())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`:-8k` after read") && e.contains("give rw=read"),
            "{e}"
        );
    }

    #[test]
    fn thinktime_blocks_makes_bursts_as_paper_004_ran_them() {
        // Paper 004's chopping table: T=1.28, B=160, BS=512k.
        let text = "[burst]\nrw=randwrite\nbs=512k\niodepth=32\nthinktime=1280000\nthinktime_blocks=160\nruntime=60\n";
        let f = parse(text, &base()).unwrap();
        let w = &f.jobs[0].workload;
        assert_eq!((w.thinktime_ns, w.thinktime_blocks), (1_280_000_000, 160));
        for bad in ["0", "-1", "x", "4294967296"] {
            let t = format!("[b]\nruntime=1\nthinktime=10\nthinktime_blocks={bad}\n");
            let e = parse(&t, &base()).unwrap_err().to_string();
            assert!(e.contains("thinktime_blocks"), "{bad}: {e}");
        }
    }

    #[test]
    fn size_without_time_based_ends_after_one_pass() {
        let f = parse("[j]\nrw=read\nbs=128k\nsize=512m\nrwmixwrite=30\n", &base()).unwrap();
        let w = &f.jobs[0].workload;
        assert_eq!(w.ios_max, Some(4096));
        assert_eq!(w.region_size_bytes, Some(512 << 20));
        assert_eq!(w.runtime_ns, None);
        assert_eq!(w.read_mix_pct, 70);
        let f = parse("[j]\nsize=1m\nio_size=8k\nruntime=5\n", &base()).unwrap();
        assert_eq!(f.jobs[0].workload.ios_max, Some(2));
        assert_eq!(f.jobs[0].workload.runtime_ns, Some(5_000_000_000));
    }

    #[test]
    fn unsupported_options_are_all_named_with_their_lines() {
        let text =
            "[global]\nstonewall\nverify=md5\n[a]\nrw=randread\nruntime=1\nbssplit=4k/50:8k/50\n";
        let e = parse(text, &base()).unwrap_err();
        let JobFileError::Unsupported(u) = &e else {
            panic!("{e}")
        };
        let named: Vec<(usize, &str)> = u.iter().map(|x| (x.line, x.option.as_str())).collect();
        assert_eq!(
            named,
            [
                (2, "stonewall"),
                (3, "verify=md5"),
                (7, "bssplit=4k/50:8k/50")
            ]
        );
        let msg = e.to_string();
        assert!(
            msg.contains("line 3 `verify=md5` (use nines' --verify"),
            "{msg}"
        );
        assert!(!msg.contains('\n'));
    }

    #[test]
    fn bad_values_and_shapes_are_refused_with_the_line() {
        let cases = [
            (
                "[a]\nrw=rw\nruntime=1\n",
                "line 2 `rw=rw` (sequential mixed",
            ),
            ("[a]\nbs=4k,8k\nruntime=1\n", "line 2 `bs=4k,8k`"),
            ("[a]\nbsrange=4k-8k\nruntime=1\n", "line 2 `bsrange=4k-8k`"),
            ("[a]\nioengine=mmap\nruntime=1\n", "line 2 `ioengine=mmap`"),
            ("[a]\niodepth=x\nruntime=1\n", "line 2 `iodepth=x`"),
            ("[a]\nruntime=${T}\n", "not expanded"),
            ("[a]\nrw=read\n", "no end"),
            ("[a]\ntime_based\n", "no runtime"),
            ("rw=read\n", "before any [section]"),
            ("[global]\nrw=read\n", "no job section"),
            ("[a\n", "line 1"),
            (
                "[a]\nfilename=x\nruntime=1\n[b]\nfilename=y\nruntime=1\n",
                "filename differs between jobs",
            ),
            ("[a]\nruntime=1\n[b]\nruntime=2\n", "whole run"),
            ("[a]\nsize=50%\n", "size=50%"),
            ("[a]\ninclude other.fio\nruntime=1\n", "include files"),
        ];
        for (text, want) in cases {
            let e = parse(text, &base()).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn every_problem_is_named_once_with_its_line() {
        // A bad value, an unknown option in [global] (two jobs: named once), a bad value in the
        // second job, and a trailing comment that is not part of the value.
        let text = "[global]\nnumjobs=2\t; two clones\nrw=rw\nexitall_on_error\nruntime=1\n\
                    [a]\nbs=4k\n[b]\niodepth=lots  # deep\n";
        let e = parse(text, &base()).unwrap_err();
        let JobFileError::Unsupported(u) = &e else {
            panic!("{e}")
        };
        let named: Vec<(usize, &str)> = u.iter().map(|x| (x.line, x.option.as_str())).collect();
        assert_eq!(
            named,
            [(3, "rw=rw"), (4, "exitall_on_error"), (9, "iodepth=lots")]
        );
        assert!(u[2].why.contains("whole number"), "{e}");
        // No end anywhere and a refused option: the option is what is named.
        let e = parse("[a]\nverify=crc32c\n", &base()).unwrap_err();
        assert!(matches!(e, JobFileError::Unsupported(_)), "{e}");
        // With the options fixed, the comment is gone from the value.
        let f = parse("[global]\nnumjobs=2\t; two\nruntime=1 # s\n[a]\n", &base()).unwrap();
        assert_eq!(f.jobs.len(), 2);
        assert_eq!(f.jobs[0].workload.runtime_ns, Some(1_000_000_000));
    }

    #[test]
    fn the_command_line_replaces_end_and_size() {
        let text = "[j]\nrw=randread\nbs=4k\nsize=10g\ntime_based\nruntime=900\n";
        let r = Replace {
            runtime_ns: Some(200_000_000),
            ios_max: None,
            size_bytes: Some(1 << 20),
        };
        let w = parse_replacing(text, &base(), &r).unwrap().jobs[0]
            .workload
            .clone();
        assert_eq!(w.runtime_ns, Some(200_000_000));
        assert_eq!(w.region_size_bytes, Some(1 << 20));
        assert_eq!(w.ios_max, None, "time_based");
        // A job with no end of its own gets one from the command line.
        let r = Replace {
            runtime_ns: None,
            ios_max: Some(7),
            size_bytes: None,
        };
        let w = parse_replacing("[j]\nrw=read\n", &base(), &r).unwrap().jobs[0]
            .workload
            .clone();
        assert_eq!((w.ios_max, w.runtime_ns), (Some(7), None));
        // timeout is fio's other name for runtime; a range from one size to itself is that size.
        let f = parse("[j]\ntimeout=3\nbsrange=8k-8k\n", &base()).unwrap();
        assert_eq!(f.jobs[0].workload.runtime_ns, Some(3_000_000_000));
        assert_eq!(f.jobs[0].workload.block_size_bytes, 8192);
    }

    #[test]
    fn zonemode_zbd_and_its_options_as_fio_writes_them() {
        let text = "[global]\nfilename=/dev/nvme0n2\nzonemode=zbd\nzonesize=64m\n\
                    zonecapacity=48m\nmax_open_zones=4\nzone_reset_threshold=0.7\n\
                    zone_reset_frequency=0.1\n[w]\nrw=randwrite\nsize=128m\n";
        let f = parse(text, &base()).unwrap();
        assert_eq!(
            f.zbd,
            Some(ZbdOptions {
                max_open_zones: Some(4),
                zone_reset_threshold: 0.7,
                zone_reset_frequency: 0.1,
                read_beyond_wp: false,
                zone_size_bytes: Some(64 << 20),
                zone_capacity_bytes: Some(48 << 20),
            })
        );
        let f = parse(
            "[j]\nzonemode=zbd\nread_beyond_wp=1\nrw=read\nsize=1m\n",
            &base(),
        )
        .unwrap();
        assert!(f.zbd.unwrap().read_beyond_wp);
        // zonemode=none, or none given: no zone mode; its options alone are refused.
        let f = parse("[j]\nzonemode=none\nrw=read\nsize=1m\n", &base()).unwrap();
        assert_eq!(f.zbd, None);
        let e = parse("[j]\nmax_open_zones=4\nrw=write\nsize=1m\n", &base())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "max_open_zones=4 applies with zonemode=zbd only; add zonemode=zbd or drop it"
        );
        // strided, a bad share, strided's options and fio's other zone knobs: named, one line.
        let e = parse(
            "[j]\nzonemode=strided\nzoneskip=4k\njob_max_open_zones=2\n\
             zone_reset_threshold=2\nrw=write\nsize=1m\n",
            &base(),
        )
        .unwrap_err()
        .to_string();
        assert!(!e.contains('\n'), "{e}");
        for want in [
            "line 2 `zonemode=strided` (zonemode \"strided\": nines runs none or zbd",
            "line 3 `zoneskip=4k` (fio's strided zone mode is not built",
            "line 4 `job_max_open_zones=2` (nines keeps one open-zone limit per device",
            "line 5 `zone_reset_threshold=2` (zone_reset_threshold \"2\": give a number from 0 to 1",
        ] {
            assert!(e.contains(want), "{want} not in {e}");
        }
        // Jobs must agree, as on every run-wide option.
        let e = parse(
            "[a]\nzonemode=zbd\nrw=write\nsize=1m\n[b]\nzonemode=none\nrw=read\nsize=1m\n",
            &base(),
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                JobFileError::Differs {
                    what: "zonemode",
                    ..
                }
            ),
            "{e}"
        );
    }

    proptest! {
        /// Any text parses into valid jobs or is refused with a one-line error; never a panic.
        #[test]
        fn parser_never_panics(s in "(\\[[a-z]{0,6}\\]\n|[a-z_]{1,12}(=[0-9a-z:,%$/.-]{0,10})?\n|#.*\n|\\PC{0,20}\n){0,12}") {
            match parse(&s, &base()) {
                Ok(f) => {
                    prop_assert!(!f.jobs.is_empty());
                    for j in &f.jobs {
                        prop_assert!(j.validate().is_ok());
                    }
                }
                Err(e) => {
                    let m = e.to_string();
                    prop_assert!(!m.is_empty() && !m.contains('\n'));
                }
            }
        }

        /// Any value of a zone option is taken exactly or refused in one line naming it.
        #[test]
        fn zone_options_round_trip_or_refuse(open in 0u32..5000, thr in 0.0f64..1.5,
                                             zs_k in 0u64..1u64 << 22, junk in "\\PC{0,8}") {
            let text = format!(
                "[j]\nzonemode=zbd\nmax_open_zones={open}\nzone_reset_threshold={thr}\n\
                 zonesize={zs_k}k\nzone_reset_frequency={junk}\nrw=write\nsize=1m\n"
            );
            match parse(&text, &base()) {
                Ok(f) => {
                    let z = f.zbd.expect("zonemode=zbd");
                    prop_assert_eq!(z.max_open_zones, (open > 0).then_some(open));
                    prop_assert!(open <= crate::zbd::MAX_OPEN_ZONES_MAX);
                    prop_assert_eq!(z.zone_reset_threshold, thr);
                    prop_assert!(thr <= 1.0 && zs_k > 0);
                    prop_assert_eq!(z.zone_size_bytes, Some(zs_k << 10));
                    prop_assert!((0.0..=1.0).contains(&z.zone_reset_frequency));
                }
                Err(e) => {
                    let m = e.to_string();
                    prop_assert!(!m.contains('\n'));
                    prop_assert!(
                        m.contains("max_open_zones") || m.contains("zone_reset_threshold")
                            || m.contains("zonesize") || m.contains("zone_reset_frequency"),
                        "{}", m
                    );
                }
            }
        }

        /// Options written in a job file reach the job exactly.
        #[test]
        fn options_round_trip(depth in 1u32..1024, bs_k in 1u64..1024, mix in 0u8..=100,
                              runtime in 1u64..1000, think_us in 0u64..100_000,
                              blocks in proptest::option::of(1u32..100_000)) {
            let blocks_line = blocks.map_or(String::new(), |b| format!("thinktime_blocks={b}\n"));
            let text = format!(
                "[global]\nrw=randrw\ntime_based\nruntime={runtime}\n[j]\niodepth={depth}\nbs={bs_k}k\nrwmixread={mix}\nthinktime={think_us}\n{blocks_line}"
            );
            let f = parse(&text, &base()).unwrap();
            let w = &f.jobs[0].workload;
            prop_assert_eq!(w.iodepth, depth);
            prop_assert_eq!(w.block_size_bytes, bs_k * 1024);
            prop_assert_eq!(w.read_mix_pct, mix);
            prop_assert_eq!(w.runtime_ns, Some(runtime * 1_000_000_000));
            prop_assert_eq!(w.thinktime_ns, think_us * 1000);
            let expected_blocks = match blocks {
                Some(b) => b,
                None if think_us > 0 => 1,
                None => 0,
            };
            prop_assert_eq!(w.thinktime_blocks, expected_blocks);
        }
    }
}
