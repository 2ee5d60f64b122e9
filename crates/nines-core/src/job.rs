//! Jobs: a run holds one or more named streams of requests against the same targets, each with
//! its own pattern, block size, depth, thinktime and rate, and its own statistics (paper 004's
//! workload is 4 KiB random reads at QD10 plus two 512 KiB write-burst streams with thinktimes).
//!
//! A job is a [`WorkloadSpec`] with a name. On the command line a job is written
//! `--job NAME:key=value,key=value`; keys are the workload options' names (`rw`, `mix`, `bs`,
//! `iodepth`, `thinktime`, `thinktime-blocks`, `rate-iops`, `arrival`, `size`, `offset`, `distribution`, `ios`,
//! `seed`), and a job starts from the run's own workload options (like fio's `[global]`). The
//! run's end and ramp (`--runtime`, `--ramp`) belong to the whole run, not to a job. The fio
//! job-file reader feeds [`JobSpec::set`] too, so both spellings mean the same.

use serde::{Deserialize, Serialize};

use crate::units::{ParseError, parse_size_bytes, parse_thinktime_ns};
use crate::workload::{WorkloadError, WorkloadSpec};

/// The most jobs one run holds.
pub const JOBS_MAX: usize = 64;
/// The longest job name (it appears in tables, JSON keys and log tags).
pub const JOB_NAME_BYTES_MAX: usize = 64;

/// One named stream of requests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    pub name: String,
    pub workload: WorkloadSpec,
}

/// A job that cannot be parsed or run. One line each, naming the job and what to change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JobError {
    #[error("--job {0:?}: write NAME:key=value,... (e.g. reads:rw=randread,iodepth=10)")]
    Syntax(String),
    #[error("job name {0:?}: use 1 to {JOB_NAME_BYTES_MAX} letters, digits, '-', '_' or '.'")]
    Name(String),
    #[error("job {job}: {key}={value}: {reason}")]
    Value {
        job: String,
        key: String,
        value: String,
        reason: String,
    },
    #[error(
        "job {job}: unknown key {key:?}; use rw, mix, bs, iodepth, thinktime, thinktime-blocks, \
         rate-iops, arrival, size, offset, distribution, ios or seed"
    )]
    UnknownKey { job: String, key: String },
    #[error(
        "job {job}: {key} applies to the whole run, not to one job; give --{key} once, outside --job"
    )]
    RunWide { job: String, key: String },
    #[error("job {job}: {error}")]
    Workload { job: String, error: WorkloadError },
    #[error("two jobs are named {0:?}; give each job its own name")]
    Duplicate(String),
    #[error("{0} jobs are more than a run holds ({JOBS_MAX})")]
    TooMany(usize),
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= JOB_NAME_BYTES_MAX
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl JobSpec {
    /// A job named `name` starting from `base` (the run's workload options).
    pub fn new(name: &str, base: &WorkloadSpec) -> Result<JobSpec, JobError> {
        if !valid_name(name) {
            return Err(JobError::Name(name.to_string()));
        }
        Ok(JobSpec {
            name: name.to_string(),
            workload: base.clone(),
        })
    }

    /// Sets one option by its command-line name (`rate-iops` and `rate_iops` both work). The
    /// value is checked on its own here and with the rest of the job by [`JobSpec::validate`].
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), JobError> {
        let w = &mut self.workload;
        let bad = |reason: String| JobError::Value {
            job: self.name.clone(),
            key: key.to_string(),
            value: value.to_string(),
            reason,
        };
        let parse_u64 = |v: &str| -> Result<u64, String> {
            v.trim()
                .parse::<u64>()
                .map_err(|_| "give a whole number".to_string())
        };
        let k = key.trim().replace('_', "-");
        match k.as_str() {
            "rw" => w.rw = value.parse().map_err(|e: ParseError| bad(e.to_string()))?,
            "mix" => {
                let v = parse_u64(value).map_err(bad)?;
                if v > 100 {
                    return Err(bad("give a read share from 0 to 100 percent".into()));
                }
                w.read_mix_pct = v as u8;
            }
            "bs" => w.block_size_bytes = parse_size_bytes(value).map_err(|e| bad(e.to_string()))?,
            "iodepth" => {
                let v = parse_u64(value).map_err(bad)?;
                w.iodepth = u32::try_from(v).map_err(|_| bad("too large".into()))?;
            }
            "thinktime" => {
                w.thinktime_ns = parse_thinktime_ns(value).map_err(|e| bad(e.to_string()))?
            }
            "thinktime-blocks" => {
                let v = parse_u64(value).map_err(bad)?;
                w.thinktime_blocks = u32::try_from(v)
                    .ok()
                    .filter(|&b| b > 0)
                    .ok_or_else(|| bad("give a burst of 1 to 4294967295 I/Os".into()))?;
            }
            "rate-iops" => w.rate_iops = Some(parse_u64(value).map_err(bad)?),
            "arrival" => w.arrival = value.parse().map_err(|e: ParseError| bad(e.to_string()))?,
            "size" => {
                w.region_size_bytes = Some(parse_size_bytes(value).map_err(|e| bad(e.to_string()))?)
            }
            "offset" => {
                w.region_offset_bytes = parse_size_bytes(value).map_err(|e| bad(e.to_string()))?
            }
            "distribution" => {
                w.distribution = value.parse().map_err(|e: ParseError| bad(e.to_string()))?
            }
            "ios" => w.ios_max = Some(parse_u64(value).map_err(bad)?),
            "seed" => w.seed = parse_u64(value).map_err(bad)?,
            "runtime" | "ramp" => {
                return Err(JobError::RunWide {
                    job: self.name.clone(),
                    key: k,
                });
            }
            _ => {
                return Err(JobError::UnknownKey {
                    job: self.name.clone(),
                    key: key.to_string(),
                });
            }
        }
        Ok(())
    }

    /// Checks the job's workload as a whole.
    pub fn validate(&self) -> Result<(), JobError> {
        self.workload
            .validate()
            .map_err(|error| JobError::Workload {
                job: self.name.clone(),
                error,
            })
    }

    /// Parses one `--job NAME:key=value,...` against the run's options `base`. The job's seed,
    /// unless given, is the run's seed plus `index` (its position among the jobs), so two jobs
    /// with the same options still issue different offsets and job 0 issues the same offsets as
    /// a single-job run.
    pub fn parse_arg(text: &str, base: &WorkloadSpec, index: usize) -> Result<JobSpec, JobError> {
        let (name, rest) = match text.split_once(':') {
            Some((n, r)) => (n.trim(), r),
            None => (text.trim(), ""),
        };
        let mut job = JobSpec::new(name, base)?;
        job.workload.seed = base.seed.wrapping_add(index as u64);
        for item in rest.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((k, v)) = item.split_once('=') else {
                return Err(JobError::Syntax(text.to_string()));
            };
            job.set(k, v)?;
        }
        job.validate()?;
        Ok(job)
    }
}

/// Checks a run's job list: at least one, at most [`JOBS_MAX`], names unique, and the run-wide
/// options (end and ramp) the same in every job.
pub fn validate_jobs(jobs: &[JobSpec]) -> Result<(), JobError> {
    if jobs.len() > JOBS_MAX {
        return Err(JobError::TooMany(jobs.len()));
    }
    for (i, j) in jobs.iter().enumerate() {
        j.validate()?;
        if jobs[..i].iter().any(|o| o.name == j.name) {
            return Err(JobError::Duplicate(j.name.clone()));
        }
        let first = &jobs[0].workload;
        if j.workload.runtime_ns != first.runtime_ns || j.workload.ramp_ns != first.ramp_ns {
            return Err(JobError::RunWide {
                job: j.name.clone(),
                key: "runtime".into(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::RwMode;
    use proptest::prelude::*;

    fn base() -> WorkloadSpec {
        WorkloadSpec::default()
    }

    #[test]
    fn paper_004_workload_parses() {
        let b = base();
        let r = JobSpec::parse_arg("reads:rw=randread,bs=4k,iodepth=10", &b, 0).unwrap();
        let w1 = JobSpec::parse_arg("burst1:rw=randwrite,bs=512k,thinktime=2.56s", &b, 1).unwrap();
        let w2 = JobSpec::parse_arg("burst2:rw=randwrite,bs=512k,thinktime=1.28s", &b, 2).unwrap();
        assert_eq!(r.workload.iodepth, 10);
        assert_eq!(r.workload.seed, b.seed);
        assert_eq!(w1.workload.rw, RwMode::RandWrite);
        assert_eq!(w1.workload.block_size_bytes, 512 << 10);
        assert_eq!(w1.workload.thinktime_ns, 2_560_000_000);
        assert_eq!(w2.workload.thinktime_ns, 1_280_000_000);
        assert_ne!(w1.workload.seed, w2.workload.seed);
        validate_jobs(&[r, w1, w2]).unwrap();
    }

    #[test]
    fn errors_name_the_job_and_key() {
        let b = base();
        let e = JobSpec::parse_arg("a:bs=4q", &b, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("job a: bs=4q"), "{e}");
        let e = JobSpec::parse_arg("a:color=red", &b, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown key \"color\""), "{e}");
        let e = JobSpec::parse_arg("a:runtime=1s", &b, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("whole run"), "{e}");
        let e = JobSpec::parse_arg("a:bs", &b, 0).unwrap_err().to_string();
        assert!(e.contains("NAME:key=value"), "{e}");
        let e = JobSpec::parse_arg("a b:bs=4k", &b, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("job name"), "{e}");
        let e = JobSpec::parse_arg("a:iodepth=0", &b, 0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("job a") && e.contains("--iodepth 0"), "{e}");
        let a = JobSpec::parse_arg("a", &b, 0).unwrap();
        let e = validate_jobs(&[a.clone(), a]).unwrap_err().to_string();
        assert!(e.contains("two jobs"), "{e}");
    }

    proptest! {
        /// Any text either parses into a valid job or is refused with a one-line error; it never
        /// panics.
        #[test]
        fn parser_never_panics(s in "\\PC{0,40}") {
            match JobSpec::parse_arg(&s, &base(), 3) {
                Ok(j) => prop_assert!(j.validate().is_ok()),
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }

        #[test]
        fn keys_round_trip(depth in 1u32..4096, bs_kib in 1u64..1024, mix in 0u8..=100) {
            let text = format!("j:rw=randrw,iodepth={depth},bs={bs_kib}k,mix={mix}");
            let j = JobSpec::parse_arg(&text, &base(), 0).unwrap();
            prop_assert_eq!(j.workload.iodepth, depth);
            prop_assert_eq!(j.workload.block_size_bytes, bs_kib * 1024);
            prop_assert_eq!(j.workload.read_mix_pct, mix);
        }
    }
}
