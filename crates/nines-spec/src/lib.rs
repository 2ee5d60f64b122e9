//! A run as a value (issue 32): what `nines profile` and `nines sim` are asked to do, in the
//! words both drivers share. The binary parses its arguments into a [`RunSpec`]; the real
//! driver (`nines_io::profile`) and the simulated one (`nines_sim::simulate`) take it with what
//! is their own (targets to open, or devices to model) and return a `Report`. Nothing here
//! reads a file or a clock: a spec is checked where it is parsed and where it is run.

use std::path::PathBuf;

use nines_array::LayoutSpec;
use nines_core::job::JobSpec;
use nines_core::workload::WorkloadSpec;
use nines_trace::{FitPolicy, Trace};

/// Most requests of a replayed trace in flight per target, unless a run says otherwise.
pub const TRACE_DEPTH_DEFAULT: u32 = 1024;

/// One run: the jobs (or a trace to replay), how targets are presented to them, the
/// percentiles reported and the logs recorded.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// At least one job; the first job's runtime and ramp are the run's. A replay has one job
    /// (its workload carries no pattern) and [`RunSpec::trace`].
    pub jobs: Vec<JobSpec>,
    /// The volume layout and its shaping (`--layout`, `--stripe`, `--throttle` ...).
    pub layout: LayoutSpec,
    /// A trace replayed instead of the jobs' patterns.
    pub trace: Option<TraceSpec>,
    /// Percentiles the report gives, in percent (99.99 for p99.99).
    pub percentiles: Vec<f64>,
    /// How the report names the per-I/O and interval logs the caller writes.
    pub logs: LogNames,
}

/// A trace to replay, and how it is fitted to the targets.
#[derive(Clone, Debug)]
pub struct TraceSpec {
    pub trace: Trace,
    /// Where it was read from, as the report records it.
    pub file: PathBuf,
    /// What to do with requests beyond the target (`--trace-fit`).
    pub fit: FitPolicy,
    /// Most requests in flight per target (`--trace-depth`).
    pub depth: u32,
}

/// The logs of a run as its report names them (the writers are the caller's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogNames {
    /// `--lat-log`: the per-I/O log.
    pub lat_log: Option<String>,
    /// `--hdr-log`: the interval histograms.
    pub hdr_log: Option<String>,
}

impl RunSpec {
    /// A run of one job over independent targets, with the default percentiles.
    pub fn new(workload: WorkloadSpec) -> RunSpec {
        RunSpec {
            jobs: vec![JobSpec {
                name: "job0".into(),
                workload,
            }],
            layout: LayoutSpec::Independent,
            trace: None,
            percentiles: nines_core::units::DEFAULT_PERCENTILES.to_vec(),
            logs: LogNames::default(),
        }
    }

    /// The first job's workload: its runtime and ramp are the run's.
    pub fn workload(&self) -> &WorkloadSpec {
        &self.jobs[0].workload
    }

    /// Whether the run writes data: a write job, or a trace with writes (a flush writes none).
    pub fn writes_data(&self) -> bool {
        match &self.trace {
            Some(t) => t
                .trace
                .records
                .iter()
                .any(|r| r.op == nines_core::op::Op::Write && !r.flush),
            None => self.jobs.iter().any(|j| j.workload.writes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_run_is_one_job_over_independent_targets() {
        let w = WorkloadSpec::default();
        let run = RunSpec::new(w.clone());
        assert_eq!(run.jobs.len(), 1);
        assert_eq!(run.jobs[0].name, "job0");
        assert_eq!(run.workload(), &w);
        assert_eq!(run.layout, LayoutSpec::Independent);
        assert_eq!(run.percentiles, nines_core::units::DEFAULT_PERCENTILES);
        assert_eq!(run.writes_data(), w.writes());
    }

    #[test]
    fn writes_follow_the_jobs_or_the_trace() {
        let mut run = RunSpec::new(WorkloadSpec::default());
        let mut writer = run.jobs[0].clone();
        writer.workload.rw = nines_core::workload::RwMode::RandWrite;
        assert!(writer.workload.writes());
        run.jobs.push(writer);
        assert!(run.writes_data());
        // A replay writes only when its trace does: a flush alone writes no data.
        use nines_core::op::Op;
        use nines_trace::{TraceFormat, TraceRecord};
        let replay = |records| TraceSpec {
            trace: Trace::from_records(records, TraceFormat::Blkparse),
            file: "t.trace".into(),
            fit: FitPolicy::Error,
            depth: 1,
        };
        let read = TraceRecord::data(0, 0, 0, 4096, Op::Read);
        run.trace = Some(replay(vec![read, TraceRecord::flush(10, 0)]));
        assert!(!run.writes_data());
        let write = TraceRecord::data(20, 0, 4096, 4096, Op::Write);
        run.trace = Some(replay(vec![read, TraceRecord::flush(10, 0), write]));
        assert!(run.writes_data());
    }
}
