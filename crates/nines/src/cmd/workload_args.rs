//! Workload options shared by `nines profile` and `nines sim`: one definition, so a simulated run
//! and a real run of the same command line do the same thing.

use std::io::BufReader;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use nines_array::shaping::{BufferSpec, PlacementSpec, ThrottleSpec};
use nines_array::{LayoutSpec, ShapingSpec};
use nines_core::job::{JobSpec, validate_jobs};
use nines_core::jobfile::{self, JobFile, Replace};
use nines_core::units::{
    DEFAULT_PERCENTILES, parse_duration_ns, parse_percentiles, parse_size_bytes,
};
use nines_core::workload::{Arrival, Distribution, RwMode, WorkloadSpec};
use nines_trace::{FitPolicy, Trace, TraceFormat, TraceOptions, TraceUnit, read_trace};

/// The default measured time when neither `--runtime` nor `--ios` is given.
pub const RUNTIME_DEFAULT: &str = "10s";

#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Workload")]
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
    /// Measured time (10s, 500ms, 2m ...), after the ramp [default: 10s unless --ios is given].
    #[arg(long, value_parser = parse_duration)]
    pub runtime: Option<u64>,
    /// Stop after this many I/Os per target (ramp excluded).
    #[arg(long)]
    pub ios: Option<u64>,
    /// Time run first and excluded from the statistics.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub ramp: u64,
    /// Size of the region used on each target [default: from --offset to the end].
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
    /// Pause after each completion before that slot issues again, with its unit (e.g. 100us; a
    /// bare number is refused: fio counts it in µs, nines' other durations in seconds).
    #[arg(long, default_value = "0s", value_parser = parse_thinktime)]
    pub thinktime: u64,
    /// fio's thinktime_blocks: issue bursts of N I/Os (as many at once as --iodepth allows),
    /// wait until all of them complete, then rest --thinktime; without it each slot rests on its
    /// own. fio job files get fio's default, 1 (which makes a thinking job queue depth 1).
    #[arg(long, value_name = "N", requires = "thinktime")]
    pub thinktime_blocks: Option<u32>,
    /// Offset distribution for random patterns: uniform or zipf:THETA.
    #[arg(long, default_value = "uniform", value_parser = parse_distribution)]
    pub distribution: Distribution,
    /// Seed of the request stream: the same seed gives the same offsets on every engine.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Percentiles to report [default: 50,90,99,99.9,99.99,99.999,99.9999].
    #[arg(long, value_parser = parse_pct)]
    pub percentiles: Option<PercentileList>,
}

/// The jobs of a run (`--job NAME:key=value,...`, repeatable): each starts from the workload
/// options. Shared by every verb that runs a workload.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Workload")]
pub struct JobArgs {
    /// A named stream with its own options, e.g. `--job reads:rw=randread,iodepth=10 --job
    /// burst:rw=randwrite,bs=512k,thinktime=2.56s`; keys: rw, mix, bs, iodepth, thinktime,
    /// thinktime-blocks, rate-iops, arrival, size, offset, distribution, ios, seed. Repeat for several jobs; each
    /// starts from the other workload options and gets its own statistics.
    /// Or a fio job file, `--job FILE.fio`: its [global] and job sections are the jobs (fio's
    /// latency subset; every other option is refused by name and line). The command line's
    /// targets, --runtime, --ios, --size, --engine, --cpus, --percentiles and logs replace the
    /// file's; the other workload options are defaults the file's options override.
    #[arg(long = "job", value_name = "NAME:KEY=VALUE,... | FILE.fio")]
    pub jobs: Vec<String>,
    /// The jobs read from a job file (`load_file`).
    #[arg(skip)]
    pub file_jobs: Option<Vec<JobSpec>>,
}

/// Whether a `--job` value names a job file rather than `NAME:key=value,...`: job names have no
/// `/`, so a path with one is a file, as is a name ending in `.fio` or `.job`, or an existing
/// file named without options.
fn is_job_file(v: &str) -> bool {
    v.contains('/')
        || v.ends_with(".fio")
        || v.ends_with(".job")
        || (!v.contains(':') && std::path::Path::new(v).is_file())
}

impl JobArgs {
    /// The run's jobs: the `--job`s, or the workload as one job named "job0". A trace replay
    /// (`trace`) has one job, "trace", which only carries the run's runtime and ramp (the trace
    /// decides everything else), and ends with the trace unless `--runtime` was given.
    pub fn jobs_for(
        &self,
        base: &WorkloadSpec,
        trace: bool,
        runtime_given: bool,
    ) -> Result<Vec<JobSpec>> {
        if trace {
            let mut w = base.clone();
            if !runtime_given {
                w.runtime_ns = None;
            }
            return Ok(vec![JobSpec {
                name: "trace".into(),
                workload: w,
            }]);
        }
        self.jobs(base)
    }

    /// The job file `--job` names, if any (then it is the only `--job`).
    pub fn file(&self) -> Result<Option<PathBuf>> {
        let files: Vec<&String> = self.jobs.iter().filter(|j| is_job_file(j)).collect();
        match files.as_slice() {
            [] => Ok(None),
            [f] if self.jobs.len() == 1 => Ok(Some(PathBuf::from(f.as_str()))),
            _ => anyhow::bail!(
                "--job {}: give one job file and no other --job (its sections are the jobs)",
                files[0]
            ),
        }
    }

    /// Reads the job file `--job` names, if any: its jobs (starting from `base`, their end and
    /// size replaced by the command line's `replace`) become the run's, and its run-wide
    /// settings are returned for the verb to use where its command line gave none.
    pub fn load_file(&mut self, base: &WorkloadSpec, replace: &Replace) -> Result<Option<JobFile>> {
        let Some(path) = self.file()? else {
            return Ok(None);
        };
        super::output::note_inputs("--job file", [path.as_path()]);
        let len = std::fs::metadata(&path)
            .with_context(|| format!("--job {}: cannot read the job file", path.display()))?
            .len();
        if len > jobfile::JOB_FILE_BYTES_MAX as u64 {
            anyhow::bail!(
                "--job {}: {len} bytes is more than a job file may hold ({} bytes)",
                path.display(),
                jobfile::JOB_FILE_BYTES_MAX
            );
        }
        let text = nines_core::input::read_to_string(&path, jobfile::JOB_FILE_BYTES_MAX as u64)
            .with_context(|| format!("--job {}: cannot read the job file", path.display()))?;
        let f = jobfile::parse_replacing(&text, base, replace)
            .with_context(|| format!("--job {}", path.display()))?;
        self.file_jobs = Some(f.jobs.clone());
        Ok(Some(f))
    }

    /// The run's jobs: the job file's, the `--job`s, or the workload as one job named "job0".
    pub fn jobs(&self, base: &WorkloadSpec) -> Result<Vec<JobSpec>> {
        if let Some(jobs) = &self.file_jobs {
            validate_jobs(jobs)?;
            return Ok(jobs.clone());
        }
        let jobs = if self.jobs.is_empty() {
            vec![JobSpec {
                name: "job0".into(),
                workload: base.clone(),
            }]
        } else {
            self.jobs
                .iter()
                .enumerate()
                .map(|(i, t)| JobSpec::parse_arg(t, base, i))
                .collect::<Result<Vec<_>, _>>()?
        };
        validate_jobs(&jobs)?;
        Ok(jobs)
    }
}

/// How targets form volumes: shared by every verb that takes targets.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Layout: targets as an array volume")]
pub struct VolumeArgs {
    /// independent (each target on its own), raid0 (one volume striped over every target),
    /// raid5 (one volume over every target, a rotating parity chunk per row; at least 3) or
    /// serial (Kim et al., HotStorage'17: every write log-structured onto one front-end column, the front-end
    /// rotating as it fills, the array's own GC moving data between back-ends; at least 2
    /// columns).
    #[arg(long, default_value = "independent", value_parser = ["independent", "raid0", "raid5", "serial"])]
    pub layout: String,
    /// raid0 stripe (chunk) size; serial: the stripe unit inside a column.
    #[arg(long, default_value = "128k", value_parser = parse_size)]
    pub stripe: u64,
    /// raid5 chunk size (one member's share of a row; a multiple of 512, at most 16m).
    #[arg(long, default_value = "64k", value_parser = parse_chunk)]
    pub chunk: u64,
    /// raid5: start degraded, with this member (0-based, in target order) failed: it is never
    /// read or written, and its data is rebuilt from the others.
    #[arg(long, value_name = "MEMBER")]
    pub failed: Option<u32>,
    /// raid5: this member (0-based) is a replacement: rebuild it from the others, row by row,
    /// while the run goes on (rows not yet rebuilt are served degraded around it). Its old
    /// contents are overwritten. Progress is in the volume's counters; `nines rebuild` runs a
    /// rebuild to the end with a progress bar.
    #[arg(long, value_name = "MEMBER")]
    pub rebuild: Option<u32>,
    /// raid5 --rebuild: at most this many bytes per second written to the replacement
    /// (md's speed_limit_max); 0: as fast as the members allow.
    #[arg(long, default_value = "0", value_name = "BYTES/S", value_parser = parse_size)]
    pub rebuild_rate: u64,
    /// raid5: reads ask each member to fail fast when it would keep them waiting longer than
    /// this (garbage collection, a write ahead of them; simulated and emulated SSDs answer, real
    /// devices just read), and a busy member's piece is rebuilt from the others (IODA's
    /// fast-fail reads, SOSP'21).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub fast_fail: Option<u64>,
    /// raid5 policy: none; sched (members take turns: the member whose turn it is takes the
    /// writes, held meanwhile in a write-back buffer, and reads avoid it, rebuilt from the
    /// others); dnd (sched, and garbage collection only in the owner's turn: every member in
    /// its NVMe PLM deterministic window, the owner told to collect garbage at the start of its
    /// turn for at most half of it; no writes reach it in the second half).
    #[arg(long, default_value = "none", value_parser = ["none", "sched", "dnd"])]
    pub policy: String,
    /// raid5 sched/dnd: the length of each member's turn.
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    pub window: u64,
    /// raid5 sched/dnd: the write-back buffer (memory) holding writes until their member's turn.
    #[arg(long, default_value = "64m", value_parser = parse_size)]
    pub write_back: u64,
    /// serial: members striped together in one column [default: 1].
    #[arg(long, value_name = "N")]
    pub column_members: Option<u32>,
    /// serial: segment size of a column (all its members) [default: 128m, SWAN's group (ATC'19)].
    #[arg(long, value_parser = parse_size)]
    pub segment: Option<u64>,
    /// serial: mapping unit; I/Os must be aligned to it [default: 4k].
    #[arg(long, value_parser = parse_size)]
    pub map_unit: Option<u64>,
    /// serial: the front-end rotates when it has this many free segments left [default: 1].
    #[arg(long, value_name = "SEGMENTS")]
    pub rotate_free: Option<u32>,
    /// serial: GC starts when fewer segments are free outside the front-end [default: 15].
    #[arg(long, value_name = "SEGMENTS")]
    pub gc_start: Option<u32>,
    /// serial: GC stops at this many free segments outside the front-end [default: 15].
    #[arg(long, value_name = "SEGMENTS")]
    pub gc_stop: Option<u32>,
    /// serial: GC moves in flight at most (the GC throttle; 1 to 4096) [default: 4].
    #[arg(long, value_name = "MOVES", value_parser = parse_gc_depth)]
    pub gc_depth: Option<u32>,
    /// serial: bytes one GC move reads and writes at most [default: 256k].
    #[arg(long, value_parser = parse_size)]
    pub gc_move: Option<u64>,
    /// serial: start as if the volume's first SIZE bytes had been written once in order (those
    /// units mapped; for aged simulated members, whose data is there).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub start_full: Option<u64>,
    /// serial: GC victim policy (greedy: the back-end segment with the fewest valid units).
    #[arg(long, value_parser = ["greedy"])]
    pub victim: Option<String>,
    /// serial: keep the mapping table on the members (a metadata region after the last
    /// segment of every member; member 0's holds it), read back when the volume opens, so a
    /// FLUSH (and the end of a run) makes acknowledged writes durable across a restart or a
    /// kill -9. Without it the mapping is in memory only and a reopened volume starts empty.
    #[arg(long)]
    pub persist: bool,
    #[command(flatten)]
    pub shaping: ShapingArgs,
}

/// The serial layout's geometry as its options give it (None: the default), shared by the
/// volume options and `nines check --layout serial` (which must name the geometry served).
pub(super) struct SerialGeometry {
    pub stripe_bytes: u64,
    pub column_members: Option<u32>,
    pub segment_bytes: Option<u64>,
    pub map_unit_bytes: Option<u64>,
    pub rotate_free: Option<u32>,
    pub gc_stop: Option<u32>,
}

impl SerialGeometry {
    /// A serial spec of this geometry, the other options at their defaults.
    pub(super) fn spec(&self) -> anyhow::Result<nines_array::SerialSpec> {
        let d = nines_array::SerialSpec::default();
        Ok(nines_array::SerialSpec {
            column_members: self.column_members.unwrap_or(d.column_members),
            stripe_bytes: self.stripe_bytes,
            segment_bytes: self.segment_bytes.unwrap_or(d.segment_bytes),
            unit_bytes: small_size(
                "map-unit",
                self.map_unit_bytes.unwrap_or(u64::from(d.unit_bytes)),
            )?,
            rotate_free: self.rotate_free.unwrap_or(d.rotate_free),
            gc_stop: self.gc_stop.unwrap_or(d.gc_stop),
            // Not part of the geometry; at most --gc-stop so a small --gc-stop makes a valid
            // spec (check has no --gc-start: it refused every --gc-stop under 15).
            gc_start: d.gc_start.min(self.gc_stop.unwrap_or(d.gc_stop)),
            ..d
        })
    }
}

fn small_size(name: &str, v: u64) -> anyhow::Result<u32> {
    u32::try_from(v).map_err(|_| anyhow::anyhow!("--{name} {v} is too large"))
}

impl VolumeArgs {
    /// The serial layout's options, defaults filled in.
    fn serial_spec(&self) -> anyhow::Result<nines_array::SerialSpec> {
        let d = nines_array::SerialSpec::default();
        let geometry = SerialGeometry {
            stripe_bytes: self.stripe,
            column_members: self.column_members,
            segment_bytes: self.segment,
            map_unit_bytes: self.map_unit,
            rotate_free: self.rotate_free,
            gc_stop: self.gc_stop,
        };
        Ok(nines_array::SerialSpec {
            gc_start: self.gc_start.unwrap_or(d.gc_start),
            gc_depth: self.gc_depth.unwrap_or(d.gc_depth),
            move_bytes: small_size("gc-move", self.gc_move.unwrap_or(u64::from(d.move_bytes)))?,
            start_full_bytes: self.start_full.unwrap_or(0),
            persist: self.persist,
            // Zone fields: set by the driver from zoned members.
            ..geometry.spec()?
        })
    }

    /// Options that belong to another layout are refused, not ignored.
    pub fn check(&self) -> anyhow::Result<()> {
        // Zero would divide by zero in the estimates and the mapping: refused before anything.
        if self.stripe == 0 {
            anyhow::bail!("--stripe 0: give a positive size, e.g. --stripe 128k");
        }
        if self.segment == Some(0) {
            anyhow::bail!("--segment 0: give a positive size, e.g. --segment 64m");
        }
        if self.failed.is_some() && self.layout != "raid5" {
            anyhow::bail!("--failed applies to --layout raid5 only");
        }
        if self.rebuild.is_some() && self.layout != "raid5" {
            anyhow::bail!("--rebuild applies to --layout raid5 only");
        }
        if self.fast_fail.is_some() && self.layout != "raid5" {
            anyhow::bail!("--fast-fail applies to --layout raid5 only");
        }
        if self.rebuild_rate != 0 && self.rebuild.is_none() {
            anyhow::bail!("--rebuild-rate needs --rebuild MEMBER");
        }
        if self.policy != "none" && self.layout != "raid5" {
            anyhow::bail!("--policy {} applies to --layout raid5 only", self.policy);
        }
        let serial_given = [
            ("--column-members", self.column_members.is_some()),
            ("--segment", self.segment.is_some()),
            ("--map-unit", self.map_unit.is_some()),
            ("--rotate-free", self.rotate_free.is_some()),
            ("--gc-start", self.gc_start.is_some()),
            ("--gc-stop", self.gc_stop.is_some()),
            ("--gc-depth", self.gc_depth.is_some()),
            ("--gc-move", self.gc_move.is_some()),
            ("--victim", self.victim.is_some()),
            ("--start-full", self.start_full.is_some()),
            ("--persist", self.persist),
        ];
        if self.layout != "serial"
            && let Some((name, _)) = serial_given.iter().find(|(_, given)| *given)
        {
            anyhow::bail!("{name} applies to --layout serial only");
        }
        if self.layout == "serial" {
            self.serial_spec()?;
        }
        Ok(())
    }

    pub fn spec(&self) -> LayoutSpec {
        let base = match self.layout.as_str() {
            "raid0" => LayoutSpec::Raid0 {
                stripe_bytes: self.stripe,
            },
            "raid5" => LayoutSpec::Raid5 {
                chunk_bytes: self.chunk,
                failed: self.failed,
                dnd: (self.policy != "none").then(|| nines_array::DndSpec {
                    window_ns: self.window,
                    write_back_bytes: self.write_back,
                    plm: self.policy == "dnd",
                }),
                rebuild: self.rebuild.map(|member| nines_array::RebuildSpec {
                    member,
                    rate_bytes_per_s: self.rebuild_rate,
                }),
                fast_fail_ns: self.fast_fail,
                bitmap_region_rows: None,
            },
            "serial" => LayoutSpec::Serial(self.serial_spec().unwrap_or_default()),
            _ => LayoutSpec::Independent,
        };
        base.shaped(self.shaping.spec())
    }
}

/// Write shaping around any layout (paper 004): throttling and chopping.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Layout: write shaping (Karkra, FMS'18)")]
pub struct ShapingArgs {
    /// Token bucket on writes: RATE bytes per second, optionally a BURST [default: the largest
    /// request], sizes with k/m/g suffixes (powers of 1024): `--throttle 20m` or `20m,4m`.
    #[arg(long, value_name = "RATE[,BURST]", value_parser = parse_throttle)]
    pub throttle: Option<(u64, Option<u64>)>,
    /// Tokens each read byte costs under --throttle (0: reads pass; 0.1: a write costs ten reads,
    /// as in ReFlex).
    #[arg(long, default_value = "0", value_name = "WEIGHT", value_parser = parse_read_cost)]
    pub throttle_read_cost: u64,
    /// Split writes larger than SIZE into SIZE pieces issued one after another.
    #[arg(long, value_name = "SIZE", value_parser = parse_chop)]
    pub chop: Option<u32>,
    /// Put a write buffer in front of the volume: a fast device where writes land, sorted by the
    /// velocity of their LBA range and flushed one bucket at a time (on real members, as with
    /// profile and serve: a block device or file, its contents overwritten; in nines sim: a
    /// device preset such as z-ssd).
    #[arg(long, value_name = "DEVICE_OR_PRESET")]
    pub buffer: Option<String>,
    /// Bytes of the buffer device used [default: all of it].
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "buffer")]
    pub buffer_size: Option<u64>,
    /// Bucket flushed at a time [default: the simulated NAND drive's erase unit; 4m on real
    /// devices].
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "buffer")]
    pub buffer_bucket: Option<u64>,
    /// Velocity classes the buffer is partitioned into.
    #[arg(long, default_value = "4", value_name = "N", requires = "buffer")]
    pub buffer_classes: u32,
    /// Half-life of the mean write rate that classes are relative to (a write's class is how
    /// many halvings its range's write rate lies below that mean).
    #[arg(long, default_value = "3600s", value_name = "DURATION", value_parser = parse_duration, requires = "buffer")]
    pub buffer_half_life: u64,
    /// Token bucket pacing the buffer's flushes, bytes per second [default: unpaced].
    #[arg(long, value_name = "RATE", value_parser = parse_rate, requires = "buffer")]
    pub flush_rate: Option<u64>,
    /// Tag each write with a Flexible Data Placement handle by the lifetime class of its LBA
    /// range (the write buffer's classifier, one class per handle the members have), with no
    /// buffer device. Needs members with FDP (a device preset or emu: target such as
    /// pm9d3a-fdp).
    #[arg(long, value_name = "SCHEME", value_parser = ["fdp"], conflicts_with = "buffer")]
    pub placement: Option<String>,
    /// Half-life of the mean write rate the placement's classes are relative to.
    #[arg(long, default_value = "3600s", value_name = "DURATION", value_parser = parse_duration, requires = "placement")]
    pub placement_half_life: u64,
}

impl ShapingArgs {
    pub fn spec(&self) -> ShapingSpec {
        ShapingSpec {
            throttle: self.throttle.map(|(rate, burst)| ThrottleSpec {
                rate_bytes_per_s: rate,
                burst_bytes: burst,
                read_cost_ppm: self.throttle_read_cost,
            }),
            chop_bytes: self.chop,
            buffer: self.buffer.as_ref().map(|d| BufferSpec {
                device: d.clone(),
                size_bytes: self.buffer_size,
                bucket_bytes: self.buffer_bucket,
                flush_rate_bytes_per_s: self.flush_rate,
                classes: self.buffer_classes,
                half_life_ns: self.buffer_half_life,
            }),
            placement: self.placement.as_ref().map(|_| PlacementSpec {
                handles: 0,
                half_life_ns: self.placement_half_life,
            }),
        }
    }
}

/// A positive rate in bytes per second (`80m`, `80m/s`).
fn parse_rate(s: &str) -> Result<u64, String> {
    parse_throttle(s).and_then(|(r, b)| match b {
        None => Ok(r),
        Some(_) => Err(format!("{s}: give one rate, e.g. 80m")),
    })
}

/// `RATE[,BURST]`: a positive rate in bytes per second (a trailing `/s` allowed) and a burst.
pub fn parse_throttle(s: &str) -> Result<(u64, Option<u64>), String> {
    let (rate, burst) = match s.split_once(',') {
        Some((r, b)) => (r, Some(b)),
        None => (s, None),
    };
    let r = rate.trim();
    let r = r.strip_suffix("/s").unwrap_or(r);
    let rate = parse_size_bytes(r).map_err(|e| format!("rate: {e}"))?;
    if rate == 0 {
        return Err("the rate must be positive, e.g. 20m (20 MiB/s)".into());
    }
    let burst = match burst {
        Some(b) => {
            let b = parse_size_bytes(b).map_err(|e| format!("burst: {e}"))?;
            if b == 0 {
                return Err("the burst must be positive, e.g. 20m,1m".into());
            }
            Some(b)
        }
        None => None,
    };
    Ok((rate, burst))
}

/// A read's token weight as millionths of a token per byte: `0` to `100`.
fn parse_read_cost(s: &str) -> Result<u64, String> {
    let w: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number; give a weight such as 0.1"))?;
    if !(0.0..=100.0).contains(&w) {
        return Err(format!("{s}: give a weight from 0 to 100"));
    }
    Ok((w * 1e6).round() as u64)
}

fn parse_chop(s: &str) -> Result<u32, String> {
    let b = parse_size(s)?;
    if b == 0 || b > u64::from(u32::MAX) {
        return Err(format!(
            "{s}: give a piece size from 512 bytes to 4g, e.g. 4k"
        ));
    }
    Ok(b as u32)
}

/// Trace replay options, shared by `profile` and `sim`.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Trace replay")]
pub struct TraceArgs {
    /// Replay a block trace instead of the workload options (which cannot be combined with it:
    /// the trace decides the pattern, sizes, directions and arrival times), open loop at the
    /// recorded times relative to its first request.
    #[arg(long, conflicts_with_all = [
        "rw", "mix", "bs", "iodepth", "ios", "rate_iops", "arrival", "thinktime",
        "thinktime_blocks", "distribution",
        "size", "offset", "jobs",
    ])]
    pub trace: Option<PathBuf>,
    /// Trace layout: mqsim, replayer, msr-csv, disksim or blkparse.
    #[arg(long, default_value = "mqsim")]
    pub trace_format: String,
    /// Unit of the replayer format's offsets and sizes: bytes or sectors.
    #[arg(long, default_value = "bytes")]
    pub trace_unit: String,
    /// Multiply every inter-arrival time (0.5 replays twice as fast).
    #[arg(long, default_value_t = 1.0)]
    pub trace_time_scale: f64,
    /// Requests beyond the target: error, wrap or scale.
    #[arg(long, default_value = "error")]
    pub trace_fit: String,
    /// Most requests of the trace in flight per target; a request due while all are busy waits,
    /// and its latency counts from its arrival.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub trace_depth: u32,
}

impl TraceArgs {
    /// Reads the trace named by `--trace`, if any.
    pub fn load(&self) -> Result<Option<Trace>> {
        let Some(path) = &self.trace else {
            return Ok(None);
        };
        super::output::note_inputs("--trace", [path.as_path()]);
        let format: TraceFormat = self.trace_format.parse()?;
        let unit: TraceUnit = self.trace_unit.parse()?;
        let opts = TraceOptions {
            unit,
            time_scale: self.trace_time_scale,
            lines_max: None,
            // A pipe has no size to check up front; a regular file's size says little about
            // its requests: bound what is held by the memory there is.
            records_max: super::hostmem::trace_records_max(
                nines_trace::RECORD_MEMORY_BYTES,
                super::hostmem::host_memory(),
            ),
        };
        let f = nines_core::input::open(path)
            .with_context(|| format!("--trace {}: cannot open", path.display()))?;
        let t = read_trace(BufReader::new(f), format, &opts)
            .with_context(|| format!("--trace {}", path.display()))?;
        if let Some(odd) = t.odd_sizes() {
            eprintln!(
                "nines: warning: {}",
                odd_sizes_warning(path, &t, &odd, format, unit)
            );
        }
        Ok(Some(t))
    }

    pub fn fit_policy(&self) -> Result<FitPolicy> {
        Ok(self.trace_fit.parse()?)
    }
}

/// Sizes that are not whole sectors: most likely a trace in 512-byte sectors read as bytes.
pub(crate) fn odd_sizes_warning(
    path: &std::path::Path,
    t: &Trace,
    odd: &nines_trace::OddSizes,
    format: TraceFormat,
    unit: TraceUnit,
) -> String {
    let hint = if format == TraceFormat::Replayer && unit == TraceUnit::Bytes {
        "if the file counts in 512-byte sectors, give --trace-unit sectors"
    } else {
        "check --trace-format and --trace-unit"
    };
    format!(
        "--trace {}: {} of {} requests are smaller than 512 bytes or not a multiple of 512 \
         (the first at {}: {} bytes); {hint}",
        path.display(),
        odd.requests,
        t.records.len(),
        t.location(odd.first_index),
        odd.first_len_bytes,
    )
}

/// One `--percentiles` value: a whole list (clap would read a bare `Vec` as repeated values).
#[derive(Debug, Clone, PartialEq)]
pub struct PercentileList(pub Vec<f64>);

fn parse_rw(s: &str) -> Result<RwMode, String> {
    s.parse::<RwMode>().map_err(|e| e.to_string())
}
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    parse_size_bytes(s).map_err(|e| e.to_string())
}

/// A raid5 chunk: a positive multiple of 512 bytes, at most `nines_array::raid5::CHUNK_BYTES_MAX`
/// (rebuild and check hold chunks of every member in memory; zero divided by zero).
pub(crate) fn parse_chunk(s: &str) -> Result<u64, String> {
    let max = nines_array::raid5::CHUNK_BYTES_MAX;
    match parse_size_bytes(s).map_err(|e| e.to_string())? {
        0 => Err("must be positive, e.g. 64k".into()),
        v if v > max => Err(format!(
            "{v} bytes is over the bound of {} MiB, e.g. 64k",
            max >> 20
        )),
        v if !v.is_multiple_of(512) => Err(format!(
            "{v} bytes is not a multiple of 512 (the smallest logical block), e.g. 64k"
        )),
        v => Ok(v),
    }
}

/// serial `--gc-depth`: 1 to `nines_array::serial::GC_DEPTH_MAX` moves in flight.
fn parse_gc_depth(s: &str) -> Result<u32, String> {
    let max = nines_array::serial::GC_DEPTH_MAX;
    match s.parse::<u32>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        Ok(_) => Err(format!("must be 1 to {max} (moves in flight)")),
        Err(_) if s.bytes().all(|b| b.is_ascii_digit()) && !s.is_empty() => {
            Err(format!("must be 1 to {max} (moves in flight)"))
        }
        Err(e) => Err(format!("not a count of moves: {e}")),
    }
}
fn parse_duration(s: &str) -> Result<u64, String> {
    parse_duration_ns(s).map_err(|e| e.to_string())
}
fn parse_thinktime(s: &str) -> Result<u64, String> {
    nines_core::units::parse_thinktime_ns(s).map_err(|e| e.to_string())
}
fn parse_arrival(s: &str) -> Result<Arrival, String> {
    s.parse::<Arrival>().map_err(|e| e.to_string())
}
fn parse_distribution(s: &str) -> Result<Distribution, String> {
    s.parse::<Distribution>().map_err(|e| e.to_string())
}
pub(crate) fn parse_pct(s: &str) -> Result<PercentileList, String> {
    parse_percentiles(s)
        .map(PercentileList)
        .map_err(|e| e.to_string())
}

impl WorkloadArgs {
    /// What the command line gives explicitly that replaces a job file's end and region size.
    pub fn replace(&self) -> Replace {
        Replace {
            runtime_ns: self.runtime,
            ios_max: self.ios,
            size_bytes: self.size,
        }
    }

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
            thinktime_blocks: self.thinktime_blocks.unwrap_or(0),
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
    fn serial_options_build_the_layout_and_belong_to_it_only() {
        #[derive(Parser)]
        struct V {
            #[command(flatten)]
            v: VolumeArgs,
        }
        let v = |a: &[&str]| {
            V::try_parse_from(std::iter::once("t").chain(a.iter().copied()))
                .unwrap()
                .v
        };
        let a = v(&[
            "--layout",
            "serial",
            "--segment",
            "16m",
            "--column-members",
            "2",
            "--gc-stop",
            "7",
            "--gc-start",
            "3",
            "--map-unit",
            "8k",
            "--start-full",
            "1g",
        ]);
        a.check().unwrap();
        let LayoutSpec::Serial(sp) = a.spec() else {
            panic!("not serial: {:?}", a.spec());
        };
        assert_eq!(
            (sp.segment_bytes, sp.column_members, sp.gc_stop, sp.gc_start),
            (16 << 20, 2, 7, 3)
        );
        assert_eq!((sp.unit_bytes, sp.start_full_bytes), (8192, 1 << 30));
        assert_eq!(
            sp.stripe_bytes,
            128 << 10,
            "--stripe's default stripes a column"
        );
        assert_eq!(
            sp.rotate_free,
            nines_array::SerialSpec::default().rotate_free
        );
        for opt in [
            &["--segment", "1m"][..],
            &["--gc-stop", "3"],
            &["--start-full", "1g"],
        ] {
            let mut args = vec!["--layout", "raid0"];
            args.extend(opt);
            let e = v(&args).check().unwrap_err().to_string();
            assert!(e.contains(opt[0]) && e.contains("serial only"), "{e}");
        }
        let e = v(&["--layout", "serial", "--map-unit", "8g"])
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("--map-unit"), "{e}");
    }

    #[test]
    fn shaping_options_build_the_wrapped_layout() {
        #[derive(Parser)]
        struct V {
            #[command(flatten)]
            v: VolumeArgs,
        }
        let v = |a: &[&str]| V::try_parse_from(std::iter::once("t").chain(a.iter().copied()));
        assert_eq!(v(&[]).unwrap().v.spec(), LayoutSpec::Independent);
        let s = v(&[
            "--layout",
            "raid0",
            "--throttle",
            "20m/s,1m",
            "--chop",
            "4k",
        ])
        .unwrap()
        .v
        .spec();
        assert_eq!(
            s.base(),
            &LayoutSpec::Raid0 {
                stripe_bytes: 128 << 10
            }
        );
        let sh = s.shaping().unwrap();
        assert_eq!(sh.chop_bytes, Some(4096));
        let t = sh.throttle.as_ref().unwrap();
        assert_eq!(
            (t.rate_bytes_per_s, t.burst_bytes),
            (20 << 20, Some(1 << 20))
        );
        let s = v(&["--throttle", "1m", "--throttle-read-cost", "0.1"])
            .unwrap()
            .v
            .spec();
        assert_eq!(
            s.shaping()
                .unwrap()
                .throttle
                .as_ref()
                .unwrap()
                .read_cost_ppm,
            100_000
        );
        for bad in [
            &["--throttle", "0"][..],
            &["--throttle", "1m,0"],
            &["--throttle", "fast"],
            &["--throttle", "1m,2x"],
            &["--chop", "0"],
            &["--throttle-read-cost", "-1"],
            &["--throttle-read-cost", "much"],
        ] {
            let e = v(bad).err().expect("refused").to_string();
            assert!(e.contains(bad[0]) || e.contains(bad[1]), "{bad:?}: {e}");
        }
    }

    proptest::proptest! {
        /// Any text gives a rate and burst or an error, never a panic; written values read back.
        #[test]
        fn throttle_values_parse_or_are_refused(s in "\\PC{0,24}", r in 1u64..1 << 40, b in 1u64..1 << 40) {
            let _ = parse_throttle(&s);
            proptest::prop_assert_eq!(parse_throttle(&format!("{r},{b}")), Ok((r, Some(b))));
            proptest::prop_assert_eq!(parse_throttle(&format!("{r}/s")), Ok((r, None)));
        }
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

/// Options of emulated SSD targets (`emu:PRESET[:SIZE]`, issue 12).
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Emulated SSDs (emu: targets)")]
pub struct EmuArgs {
    /// Memory for all emulated devices (emu: targets) together: their models, block indexes
    /// and the data the workload may write (a run that would not fit is refused before it starts)
    /// [default: 8g, or less where the host has less: half its memory, or what is available];
    /// refused above the memory available now.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub memory_budget: Option<u64>,
    /// Preconditioning of emulated devices, as in `nines sim`: auto (steady when the workload
    /// writes, fill when it only reads), none, fill, steady or steady:PCT.
    #[arg(long, default_value = "auto", value_name = "MODE")]
    pub precondition: String,
}

impl EmuArgs {
    /// The context emu: targets are opened in; `seed` is the workload's (the models are seeded as
    /// the simulator seeds them).
    pub fn context(&self, seed: u64) -> anyhow::Result<nines_io::emu::EmuContext> {
        let precondition = match self.precondition.as_str() {
            "auto" => None,
            s => Some(
                s.parse::<nines_flash::Precondition>()
                    .map_err(anyhow::Error::msg)
                    .context("--precondition: auto is also accepted")?,
            ),
        };
        let host = super::hostmem::host_memory();
        let budget_bytes = match self.memory_budget {
            Some(b) => {
                // The data the workload writes is kept in memory: a budget the host cannot give
                // would abort on allocation half-way through the run.
                super::hostmem::check_budget("--memory-budget", b, host)?;
                b
            }
            None => super::hostmem::default_budget(nines_io::emu::MEMORY_BUDGET_BYTES, host),
        };
        Ok(nines_io::emu::EmuContext::new(
            budget_bytes.max(1),
            precondition,
            seed,
        ))
    }
}

/// A job file's percentiles and logs (`percentile_list`, `write_lat_log`, `write_hist_log` with
/// `log_hist_msec`), each used where the command line gave none: the same for every verb that
/// reads job files.
pub fn job_file_outputs(
    f: &nines_core::jobfile::JobFile,
    percentiles: &mut Option<PercentileList>,
    lat_log: &mut Option<PathBuf>,
    hdr_log: &mut Option<PathBuf>,
    hdr_interval_ns: &mut u64,
) {
    if percentiles.is_none() {
        *percentiles = f.percentiles.clone().map(PercentileList);
    }
    if lat_log.is_none() {
        *lat_log = f.lat_log.as_ref().map(PathBuf::from);
    }
    if hdr_log.is_none() {
        *hdr_log = f.hdr_log.as_ref().map(PathBuf::from);
        if hdr_log.is_some()
            && let Some(ns) = f.hdr_interval_ns
        {
            *hdr_interval_ns = ns;
        }
    }
}
