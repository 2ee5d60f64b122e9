//! Block-I/O trace readers for replay.
//!
//! Five text layouts are read into one in-memory [`Trace`] of [`TraceRecord`]s (arrival time in
//! nanoseconds, device id, byte offset, byte length, direction):
//!
//! | format | line | time | offsets and sizes | direction |
//! |---|---|---|---|---|
//! | `mqsim` | `arrival_time_ns device start_sector size_sectors type` | ns | 512-byte sectors | type 1 = read, 0 = write |
//! | `replayer` | `arrival_time_ms device offset size op` | fractional ms | bytes, or sectors with [`TraceUnit::Sectors`] | op 1 = read, 0 = write |
//! | `msr-csv` | `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime` | Windows filetime (100 ns), made relative to the first record | bytes | `Read` / `Write` |
//! | `disksim` | `time_ms devno blkno bcount flags` | fractional ms | 512-byte blocks | hex flags, bit 0 set = read |
//! | `blkparse` | `maj,min cpu seq seconds pid action rwbs sector + count [process]` | fractional s | 512-byte sectors | rwbs with `R` = read, `W` = write; `F` before them a flush, after them FUA |
//!
//! Rules shared by every format (see docs/arch-trace.md):
//! - Empty lines and lines whose first non-blank character is `#` are skipped.
//! - Any other line that does not parse is an error naming the line number, the field and the
//!   problem; nothing is skipped silently. The only lines skipped on purpose are blkparse's
//!   non-dispatch events, its discard and `N` dispatches, its closing summary section and
//!   `Input file ... added` lines, and
//!   one `Timestamp,...` header line at the top of an msr-csv file.
//! - Arrival times must not go backwards: a line earlier than the one before it is an error (the
//!   published windows and blkparse's merged output are in order; reordering silently would hide a
//!   broken file). Equal times are fine.
//! - Zero-length requests are an error. blkparse's flush requests (`FN`, an empty `FWS`) are
//!   kept as data-less flush records ([`TraceRecord::flush`]), a write with a preflush (`FWS 8 +
//!   8`) as a flush then the write, and FUA (`WFS`) as [`TraceRecord::fua`]: the device pays
//!   for what it was asked (docs/arch-trace.md).
//! - Times are kept as the file gives them (msr-csv: relative to its first record); the time scale
//!   multiplies the gap of every record from the first one, which multiplies every inter-arrival
//!   time by the same factor.
//!
//! [`Trace::fit`] then maps device ids onto the simulated devices and brings offsets beyond the
//! device into range (or refuses them). [`write_trace`] writes records back in any of the formats,
//! which the tests use for round trips and which can convert between formats.
//!
//! Parsing is hand-written rather than done with a CSV or parser-combinator crate: the formats are
//! one line each, and the product needs exact decimal times (no float rounding) and errors that
//! name the line, the field and the fix, which is the whole of the work.

mod fit;
mod parse;
mod replay;
mod write;

use std::fmt;
use std::io::{BufRead, Read};
use std::str::FromStr;

use nines_core::op::Op;
use serde::{Deserialize, Serialize};

pub use replay::TraceReplay;
pub use write::write_trace;

/// The real traces used by tests and benchmarks: `traces/` in the repository at `repo_root` (they
/// are part of the repository, with their origins in its README.md), or `$NINES_TRACES_DIR` where
/// set (a relative value is taken from `repo_root`). An error (never a silent skip) when the
/// directory has no README.md.
pub fn shared_traces_dir(repo_root: &std::path::Path) -> Result<std::path::PathBuf, String> {
    let dir = match std::env::var_os("NINES_TRACES_DIR") {
        Some(d) => repo_root.join(d),
        None => repo_root.join("traces"),
    };
    if dir.join("README.md").is_file() {
        Ok(dir)
    } else {
        Err(format!(
            "cannot find the traces in {}: they are in the repository's traces/ (a checkout \
             without them is incomplete), or set NINES_TRACES_DIR to a directory that holds them",
            dir.display()
        ))
    }
}

/// The longest line accepted, in bytes: a bound on the line buffer so that a binary file fed by
/// mistake (e.g. a raw blktrace file) cannot make the reader allocate without limit.
pub const LINE_BYTES_MAX: usize = 64 * 1024;

/// Bytes per sector (block) in every format that counts in sectors.
pub const SECTOR_BYTES: u64 = 512;

/// The text layout of a trace file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TraceFormat {
    Mqsim,
    Replayer,
    MsrCsv,
    Disksim,
    Blkparse,
}

impl TraceFormat {
    pub const ALL: [TraceFormat; 5] = [
        TraceFormat::Mqsim,
        TraceFormat::Replayer,
        TraceFormat::MsrCsv,
        TraceFormat::Disksim,
        TraceFormat::Blkparse,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            TraceFormat::Mqsim => "mqsim",
            TraceFormat::Replayer => "replayer",
            TraceFormat::MsrCsv => "msr-csv",
            TraceFormat::Disksim => "disksim",
            TraceFormat::Blkparse => "blkparse",
        }
    }
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TraceFormat {
    type Err = TraceError;
    fn from_str(s: &str) -> Result<Self, TraceError> {
        TraceFormat::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| TraceError::UnknownName {
                what: "trace format",
                value: parse::show(s),
                allowed: "mqsim, replayer, msr-csv, disksim, blkparse",
            })
    }
}

/// The unit of the replayer format's offset and size columns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TraceUnit {
    #[default]
    Bytes,
    /// 512-byte sectors.
    Sectors,
}

impl TraceUnit {
    pub const fn name(self) -> &'static str {
        match self {
            TraceUnit::Bytes => "bytes",
            TraceUnit::Sectors => "sectors",
        }
    }

    /// Bytes per unit.
    pub const fn bytes(self) -> u64 {
        match self {
            TraceUnit::Bytes => 1,
            TraceUnit::Sectors => SECTOR_BYTES,
        }
    }
}

impl fmt::Display for TraceUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TraceUnit {
    type Err = TraceError;
    fn from_str(s: &str) -> Result<Self, TraceError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "bytes" => Ok(TraceUnit::Bytes),
            "sectors" => Ok(TraceUnit::Sectors),
            _ => Err(TraceError::UnknownName {
                what: "trace unit",
                value: parse::show(s),
                allowed: "bytes, sectors",
            }),
        }
    }
}

/// How reading interprets a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceOptions {
    /// Unit of the replayer format's offsets and sizes (other formats fix their own units).
    pub unit: TraceUnit,
    /// Multiplies every inter-arrival time: 0.5 replays twice as fast, 2.0 half as fast. Must be
    /// finite and positive.
    pub time_scale: f64,
    /// Read at most this many input lines (every line counts: comments, blank lines and blkparse's
    /// non-dispatch events too). None reads the whole file.
    pub lines_max: Option<u64>,
    /// Refuse a trace of more than this many requests: a trace is held in memory
    /// ([`RECORD_MEMORY_BYTES`] a request), and a pipe has no size to check up front, so an
    /// endless one (`yes ... |`) would grow until the OOM killer. None: no bound (library
    /// callers that know their input); the binary derives one from the host's memory.
    pub records_max: Option<u64>,
}

/// Memory a request of a read trace takes: its record and its line number.
pub const RECORD_MEMORY_BYTES: u64 =
    (std::mem::size_of::<TraceRecord>() + std::mem::size_of::<u64>()) as u64;

impl Default for TraceOptions {
    fn default() -> Self {
        TraceOptions {
            unit: TraceUnit::Bytes,
            time_scale: 1.0,
            lines_max: None,
            records_max: None,
        }
    }
}

impl TraceOptions {
    pub fn validate(&self) -> Result<(), TraceError> {
        if !(self.time_scale.is_finite() && self.time_scale > 0.0) {
            return Err(TraceError::InvalidOption(format!(
                "time scale {} must be a positive finite number (0.5 replays twice as fast, 2 half as fast)",
                self.time_scale
            )));
        }
        if self.lines_max == Some(0) {
            return Err(TraceError::InvalidOption(
                "a line limit of 0 reads nothing; give at least 1 or no limit".to_string(),
            ));
        }
        Ok(())
    }
}

/// One request of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceRecord {
    /// When the request arrives, in nanoseconds on the trace's time line (after time scaling).
    pub arrival_ns: u64,
    /// The trace's device id; after [`Trace::fit`], the simulated device index.
    pub device: u32,
    pub offset_bytes: u64,
    /// Never 0, but for a flush.
    pub len_bytes: u64,
    pub op: Op,
    /// Force unit access: the device completes the request once its data is durable.
    pub fua: bool,
    /// A flush request (make every completed write durable): no data, `op` Write, offset and
    /// length 0. Only blkparse traces have them (`FN`, an empty `FWS`, and the flush before a
    /// `FWS` write with data).
    pub flush: bool,
}

impl TraceRecord {
    /// A read or write without flags.
    pub fn data(arrival_ns: u64, device: u32, offset_bytes: u64, len_bytes: u64, op: Op) -> Self {
        TraceRecord {
            arrival_ns,
            device,
            offset_bytes,
            len_bytes,
            op,
            fua: false,
            flush: false,
        }
    }

    /// A flush request of `device` at `arrival_ns`.
    pub fn flush(arrival_ns: u64, device: u32) -> Self {
        TraceRecord {
            arrival_ns,
            device,
            offset_bytes: 0,
            len_bytes: 0,
            op: Op::Write,
            fua: false,
            flush: true,
        }
    }

    /// One past the last byte; reading guarantees this does not overflow.
    pub fn end_bytes(&self) -> u64 {
        self.offset_bytes + self.len_bytes
    }
}

/// A whole trace in memory, in arrival order.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    pub records: Vec<TraceRecord>,
    pub format: TraceFormat,
    /// Distinct device ids of the records, ascending.
    pub devices: Vec<u32>,
    /// The input line number (1-based) of each record, parallel to `records`, so that later
    /// checks ([`Trace::fit`]) can name the line. Empty for a trace built in code; errors then
    /// name the record's index instead.
    pub lines: Vec<u64>,
}

/// Totals of a trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceStats {
    pub reads: u64,
    /// Writes with data (FUA ones included; flushes are not writes).
    pub writes: u64,
    /// Writes with the FUA bit.
    pub fua_writes: u64,
    /// Flush requests (no data).
    pub flushes: u64,
    /// Bytes of all requests, both directions.
    pub bytes: u64,
    /// Last arrival minus first arrival.
    pub duration_ns: u64,
}

/// What a trace holds, in a workload's terms ([`Trace::shape`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceShape {
    pub rw: nines_core::workload::RwMode,
    /// Reads among data requests, in percent (100 for a read-only trace, 0 for write-only).
    pub read_mix_pct: u8,
    /// The most common data request size (0 for a trace of flushes only).
    pub block_size_bytes_mode: u64,
}

/// Requests of a trace whose sizes are not whole 512-byte sectors ([`Trace::odd_sizes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OddSizes {
    /// How many requests.
    pub requests: u64,
    /// The first one's index in [`Trace::records`] (for [`Trace::location`]).
    pub first_index: usize,
    pub first_len_bytes: u64,
}

/// What [`Trace::fit`] does with requests that end beyond the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FitPolicy {
    /// Refuse the trace, naming the first offending line.
    #[default]
    Error,
    /// Offset modulo the room left for the request, aligned down (see [`Trace::fit`]).
    Wrap,
    /// Shrink every offset by device size / largest end, so the trace's footprint keeps its shape.
    Scale,
}

impl FitPolicy {
    pub const fn name(self) -> &'static str {
        match self {
            FitPolicy::Error => "error",
            FitPolicy::Wrap => "wrap",
            FitPolicy::Scale => "scale",
        }
    }
}

impl fmt::Display for FitPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FitPolicy {
    type Err = TraceError;
    fn from_str(s: &str) -> Result<Self, TraceError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "error" => Ok(FitPolicy::Error),
            "wrap" => Ok(FitPolicy::Wrap),
            "scale" => Ok(FitPolicy::Scale),
            _ => Err(TraceError::UnknownName {
                what: "fit policy",
                value: parse::show(s),
                allowed: "error, wrap, scale",
            }),
        }
    }
}

/// What [`Trace::fit`] found and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FitSummary {
    /// Requests that ended beyond the device before fitting (all of them were moved, unless the
    /// policy is Error, which then failed unless this is 0).
    pub out_of_range: u64,
    /// The largest end (offset + length) in the trace before fitting.
    pub max_end_bytes: u64,
    pub policy: FitPolicy,
}

/// Every way reading, fitting or writing a trace can fail. Each message is one line and says what
/// to do.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read the trace at line {line}: {source}; check the file is readable")]
    Io {
        line: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("line {line}: field {field}: {problem}")]
    Field {
        line: u64,
        field: &'static str,
        problem: String,
    },
    #[error("line {line}: {problem}")]
    Line { line: u64, problem: String },
    #[error(
        "line {line}: arrival time {time} {unit} is earlier than the previous request's {previous} {unit}; {fix}"
    )]
    Backwards {
        line: u64,
        /// In the file's own time unit, `unit`.
        time: u64,
        previous: u64,
        unit: &'static str,
        /// How to put the file in order.
        fix: &'static str,
    },
    #[error(
        "the trace holds no requests ({lines} lines read as {format}); check the file and --trace-format"
    )]
    Empty { lines: u64, format: TraceFormat },
    #[error("{0}")]
    InvalidOption(String),
    #[error("unknown {what} {value}; use one of: {allowed}")]
    UnknownName {
        what: &'static str,
        value: String,
        allowed: &'static str,
    },
    #[error(
        "{at}: request at offset {offset_bytes} of {len_bytes} bytes ends at {end_bytes}, beyond the device size of {device_size_bytes} bytes ({out_of_range} requests are out of range, the largest end is {max_end_bytes}); replay with the wrap or scale fit policy, or simulate a larger device"
    )]
    OutOfRange {
        at: String,
        offset_bytes: u64,
        len_bytes: u64,
        end_bytes: u64,
        device_size_bytes: u64,
        out_of_range: u64,
        max_end_bytes: u64,
    },
    #[error(
        "{at}: a request of {len_bytes} bytes is larger than the whole device ({device_size_bytes} bytes); simulate a larger device"
    )]
    RequestTooLarge {
        at: String,
        len_bytes: u64,
        device_size_bytes: u64,
    },
    #[error("cannot write record {index} as {format}: {problem}")]
    Unrepresentable {
        index: usize,
        format: TraceFormat,
        problem: String,
    },
    #[error("cannot write the trace: {0}; check the output is writable")]
    Write(#[source] std::io::Error),
}

impl TraceError {
    /// The input line the error is about, where there is one.
    pub fn line(&self) -> Option<u64> {
        match self {
            TraceError::Io { line, .. }
            | TraceError::Field { line, .. }
            | TraceError::Line { line, .. }
            | TraceError::Backwards { line, .. } => Some(*line),
            _ => None,
        }
    }
}

/// Reads a whole trace. See the module documentation for the rules.
///
/// Errors: the first malformed line (with its number, field and problem), a time that goes
/// backwards, a zero-length request, an I/O error, invalid options, or a file with no requests.
pub fn read_trace(
    mut reader: impl BufRead,
    format: TraceFormat,
    opts: &TraceOptions,
) -> Result<Trace, TraceError> {
    opts.validate()?;
    let mut buf: Vec<u8> = Vec::with_capacity(256);
    let mut state = parse::State::new(format, opts.unit);
    let mut records: Vec<TraceRecord> = Vec::new();
    let mut lines: Vec<u64> = Vec::new();
    // The previous record's time in the format's own unit, for the order check.
    let mut time_previous: Option<u64> = None;
    // The first record's time in ns after conversion (the origin of time scaling).
    let mut first_ns: Option<u64> = None;
    let mut line: u64 = 0;
    loop {
        if opts.lines_max.is_some_and(|max| line >= max) {
            break;
        }
        buf.clear();
        let read = Read::take(&mut reader, LINE_BYTES_MAX as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|source| TraceError::Io {
                line: line + 1,
                source,
            })?;
        if read == 0 {
            break;
        }
        line += 1;
        if buf.last() == Some(&b'\n') {
            buf.pop();
        } else if buf.len() > LINE_BYTES_MAX {
            return Err(TraceError::Line {
                line,
                problem: format!(
                    "longer than {LINE_BYTES_MAX} bytes; is this a text trace in the {format} format?"
                ),
            });
        }
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        let text = std::str::from_utf8(&buf).map_err(|_| TraceError::Line {
            line,
            problem: format!(
                "not UTF-8 text; is this a {format} text trace (a binary blktrace file must go through blkparse first)?"
            ),
        })?;
        // Files saved by Windows tools (MSR CSV) may start with a byte-order mark.
        let text = if line == 1 {
            text.strip_prefix('\u{feff}').unwrap_or(text)
        } else {
            text
        };
        let trimmed = text.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some(raw) = state.parse_line(text, line)? else {
            continue;
        };
        if let Some(previous) = time_previous
            && raw.time < previous
        {
            let (unit, fix) = state.time_unit_and_fix();
            return Err(TraceError::Backwards {
                line,
                time: raw.time,
                previous,
                unit,
                fix,
            });
        }
        time_previous = Some(raw.time);
        let time_ns = state.time_to_ns(raw.time, line)?;
        let first = *first_ns.get_or_insert(time_ns);
        let arrival_ns = scale_arrival(first, time_ns, opts.time_scale, line)?;
        if let Some(max) = opts.records_max
            && records.len() as u64 + u64::from(raw.flush) + u64::from(raw.len_bytes > 0) > max
        {
            return Err(TraceError::Line {
                line,
                problem: format!(
                    "the trace holds more than {max} requests, more than this host's memory \
                     can replay ({RECORD_MEMORY_BYTES} bytes each); replay a part of it (e.g. \
                     `head -n {max} FILE`)"
                ),
            });
        }
        if raw.flush {
            // A flush, or the flush a write with data asks for before it (the device sees
            // both, in this order, at the same time).
            records.push(TraceRecord::flush(arrival_ns, raw.device));
            lines.push(line);
        }
        if raw.len_bytes > 0 {
            records.push(TraceRecord {
                arrival_ns,
                device: raw.device,
                offset_bytes: raw.offset_bytes,
                len_bytes: raw.len_bytes,
                op: raw.op,
                fua: raw.fua,
                flush: false,
            });
            lines.push(line);
        }
    }
    if records.is_empty() {
        return Err(TraceError::Empty {
            lines: line,
            format,
        });
    }
    let devices = distinct_devices(&records);
    Ok(Trace {
        records,
        format,
        devices,
        lines,
    })
}

/// first + (time - first) * scale, rounded to the nanosecond. Monotonic in `time_ns` for a positive
/// scale, so scaled traces stay in order.
fn scale_arrival(first_ns: u64, time_ns: u64, scale: f64, line: u64) -> Result<u64, TraceError> {
    assert!(time_ns >= first_ns, "times are checked to be in order");
    let delta_ns = time_ns - first_ns;
    let scaled_ns = if scale == 1.0 {
        delta_ns
    } else {
        let v = (delta_ns as f64 * scale).round();
        // 2^64 as f64; anything at or above it does not fit.
        if v >= 18_446_744_073_709_551_616.0 {
            return Err(TraceError::Line {
                line,
                problem: "the arrival time overflows 64-bit nanoseconds after time scaling; use a smaller time scale".to_string(),
            });
        }
        v as u64
    };
    first_ns
        .checked_add(scaled_ns)
        .ok_or_else(|| TraceError::Line {
            line,
            problem:
                "the arrival time overflows 64-bit nanoseconds after time scaling; use a smaller time scale"
                    .to_string(),
        })
}

pub(crate) fn distinct_devices(records: &[TraceRecord]) -> Vec<u32> {
    let mut devices: Vec<u32> = records.iter().map(|r| r.device).collect();
    devices.sort_unstable();
    devices.dedup();
    devices
}

impl Trace {
    /// A trace built in code (tests, generated workloads): the device list is derived, and with
    /// no line numbers errors name records by their 1-based position.
    pub fn from_records(records: Vec<TraceRecord>, format: TraceFormat) -> Trace {
        let devices = distinct_devices(&records);
        Trace {
            records,
            format,
            devices,
            lines: Vec::new(),
        }
    }

    /// Counts and totals.
    pub fn stats(&self) -> TraceStats {
        let mut stats = TraceStats::default();
        for r in &self.records {
            if r.flush {
                stats.flushes += 1;
                continue;
            }
            match r.op {
                Op::Read => stats.reads += 1,
                Op::Write => {
                    stats.writes += 1;
                    stats.fua_writes += u64::from(r.fua);
                }
            }
            stats.bytes = stats.bytes.saturating_add(r.len_bytes);
        }
        if let (Some(first), Some(last)) = (self.records.first(), self.records.last()) {
            stats.duration_ns = last.arrival_ns.saturating_sub(first.arrival_ns);
        }
        stats
    }

    /// What the trace holds, as a workload would say it: one direction (randread, randwrite) or
    /// both (randrw, with the reads' share in percent, rounded), and the most common data request
    /// size (the smallest of equally common ones). Flushes are not requests of a direction.
    /// Reports of a replay give these as their `config.workload` rw, read_mix_pct and
    /// block_size_bytes.
    pub fn shape(&self) -> TraceShape {
        let ts = self.stats();
        let mut sizes: Vec<u64> = self
            .records
            .iter()
            .filter(|r| !r.flush)
            .map(|r| r.len_bytes)
            .collect();
        sizes.sort_unstable();
        let (mut mode, mut mode_n, mut i) = (0u64, 0usize, 0usize);
        while i < sizes.len() {
            let j = sizes[i..].partition_point(|&x| x == sizes[i]) + i;
            if j - i > mode_n {
                (mode, mode_n) = (sizes[i], j - i);
            }
            i = j;
        }
        let total = ts.reads + ts.writes;
        let read_mix_pct = (ts.reads * 100 + total / 2).checked_div(total).unwrap_or(0) as u8;
        let rw = match (ts.reads, ts.writes) {
            (_, 0) => nines_core::workload::RwMode::RandRead,
            (0, _) => nines_core::workload::RwMode::RandWrite,
            _ => nines_core::workload::RwMode::RandRw,
        };
        TraceShape {
            rw,
            read_mix_pct,
            block_size_bytes_mode: mode,
        }
    }

    /// Requests whose size is below 512 bytes or not a multiple of 512: the sign of a trace
    /// that counts in 512-byte sectors read as bytes. `None` when every size is whole sectors.
    pub fn odd_sizes(&self) -> Option<OddSizes> {
        let mut odd = self.records.iter().enumerate().filter(|(_, r)| {
            !r.flush && (r.len_bytes < SECTOR_BYTES || !r.len_bytes.is_multiple_of(SECTOR_BYTES))
        });
        let (first, r) = odd.next()?;
        Some(OddSizes {
            requests: 1 + odd.count() as u64,
            first_index: first,
            first_len_bytes: r.len_bytes,
        })
    }

    /// Where record `index` came from, for error messages: "line N" when known.
    pub fn location(&self, index: usize) -> String {
        match self.lines.get(index) {
            Some(line) => format!("line {line}"),
            None => format!("request {}", index + 1),
        }
    }
}
