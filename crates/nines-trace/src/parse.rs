//! One line of each format into a raw request. Numbers are parsed by hand so that fractional
//! times are exact decimal nanoseconds (no float rounding) and every failure names its field.

use nines_core::op::Op;

use super::{SECTOR_BYTES, TraceError, TraceFormat, TraceUnit};

/// A request as the line gives it, with its time still in the format's own unit.
#[derive(Clone, Copy, Debug)]
pub(super) struct Raw {
    /// ns for every format but msr-csv, whose time is in 100 ns filetime ticks.
    pub time: u64,
    pub device: u32,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    pub op: Op,
    /// Force unit access (blkparse's `F` after the direction).
    pub fua: bool,
    /// A flush: with `len_bytes` 0 a data-less flush request (blkparse `FN`, `FWS` without a
    /// sector); with data a write preceded by a flush (`FWS 8 + 8`: the device sees a flush,
    /// then the write).
    pub flush: bool,
}

impl Raw {
    fn data(time: u64, device: u32, offset_bytes: u64, len_bytes: u64, op: Op) -> Raw {
        Raw {
            time,
            device,
            offset_bytes,
            len_bytes,
            op,
            fua: false,
            flush: false,
        }
    }
}

/// Per-file parsing state.
pub(super) struct State {
    format: TraceFormat,
    unit: TraceUnit,
    /// msr-csv: the first record's timestamp, the origin of the relative time line.
    msr_base: Option<u64>,
    /// Whether a content line has been seen (an msr-csv header is accepted only before).
    content_seen: bool,
    /// blkparse: the summary section has started; everything after it is skipped.
    blk_summary: bool,
}

impl State {
    pub fn new(format: TraceFormat, unit: TraceUnit) -> Self {
        State {
            format,
            unit,
            msr_base: None,
            content_seen: false,
            blk_summary: false,
        }
    }

    /// Parses one non-blank, non-comment line. Ok(None) means the line is skipped on purpose.
    pub fn parse_line(&mut self, text: &str, line: u64) -> Result<Option<Raw>, TraceError> {
        let first_content = !self.content_seen;
        self.content_seen = true;
        match self.format {
            TraceFormat::Mqsim => mqsim(text, line).map(Some),
            TraceFormat::Replayer => replayer(text, line, self.unit).map(Some),
            TraceFormat::MsrCsv => {
                if first_content
                    && text
                        .split(',')
                        .next()
                        .is_some_and(|f| f.trim().eq_ignore_ascii_case("timestamp"))
                {
                    return Ok(None);
                }
                let raw = msr_csv(text, line)?;
                self.msr_base.get_or_insert(raw.time);
                Ok(Some(raw))
            }
            TraceFormat::Disksim => disksim(text, line).map(Some),
            TraceFormat::Blkparse => {
                if self.blk_summary {
                    return Ok(None);
                }
                if blkparse_summary_start(text) {
                    self.blk_summary = true;
                    return Ok(None);
                }
                // blkparse names its inputs after the events, also with -q (no summary).
                if text.starts_with("Input file ") {
                    return Ok(None);
                }
                blkparse(text, line)
            }
        }
    }

    /// The format's time unit into ns on the trace's time line (msr-csv: relative to the first
    /// record). Called only for times at or after the first record's.
    pub fn time_to_ns(&self, time: u64, line: u64) -> Result<u64, TraceError> {
        match self.format {
            TraceFormat::MsrCsv => {
                let base = self.msr_base.expect("set by the first record");
                (time - base)
                    .checked_mul(100)
                    .ok_or_else(|| TraceError::Field {
                        line,
                        field: "Timestamp",
                        problem:
                            "is too far after the first record's (over 58 years); check the column"
                                .to_string(),
                    })
            }
            _ => Ok(time),
        }
    }

    /// The unit of the times in [`Raw::time`] and how to put a file of the format in time
    /// order, for messages.
    pub fn time_unit_and_fix(&self) -> (&'static str, &'static str) {
        match self.format {
            TraceFormat::MsrCsv => (
                "filetime ticks (100 ns)",
                "sort the trace by time (e.g. `sort -s -t, -n -k1,1 FILE`) and retry",
            ),
            TraceFormat::Blkparse => (
                "ns",
                "regenerate it with blkparse's default output, which merges the CPUs in time order",
            ),
            _ => (
                "ns",
                "sort the trace by time (e.g. `sort -s -n -k1,1 FILE`) and retry",
            ),
        }
    }
}

/// A user-supplied value, quoted, escaped and cut short, for one-line error messages.
pub(crate) fn show(s: &str) -> String {
    const CHARS_MAX: usize = 40;
    let mut out = String::with_capacity(s.len().min(CHARS_MAX) + 2);
    out.push('`');
    for (i, c) in s.chars().enumerate() {
        if i == CHARS_MAX {
            out.push('…');
            break;
        }
        out.extend(c.escape_debug());
    }
    out.push('`');
    out
}

fn field_err(line: u64, field: &'static str, problem: String) -> TraceError {
    TraceError::Field {
        line,
        field,
        problem,
    }
}

/// A whole non-negative number: ASCII digits only.
fn uint(s: &str, line: u64, field: &'static str) -> Result<u64, TraceError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(field_err(
            line,
            field,
            format!("{} is not a whole non-negative number", show(s)),
        ));
    }
    s.parse::<u64>().map_err(|_| {
        field_err(
            line,
            field,
            format!("{} is too large (at most {})", show(s), u64::MAX),
        )
    })
}

fn uint32(s: &str, line: u64, field: &'static str) -> Result<u32, TraceError> {
    let v = uint(s, line, field)?;
    u32::try_from(v).map_err(|_| {
        field_err(
            line,
            field,
            format!("{} is too large (at most {})", show(s), u32::MAX),
        )
    })
}

/// A non-negative decimal number of some unit into an integer count of 10^-`frac_digits` of it:
/// `decimal("223.412", 6)` (ms into ns) is 223_412_000. Digits past `frac_digits` are dropped
/// (truncation below one nanosecond).
fn decimal(s: &str, frac_digits: u32, line: u64, field: &'static str) -> Result<u64, TraceError> {
    let bad = || {
        field_err(
            line,
            field,
            format!(
                "{} is not a non-negative decimal number like 12.345",
                show(s)
            ),
        )
    };
    let (int_part, frac_part) = match s.split_once('.') {
        Some((i, f)) => (i, f),
        None => (s, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(bad());
    }
    if !int_part.bytes().all(|b| b.is_ascii_digit())
        || !frac_part.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let too_large = || {
        field_err(
            line,
            field,
            format!("{} is too large for 64-bit nanoseconds", show(s)),
        )
    };
    let int: u64 = if int_part.is_empty() {
        0
    } else {
        int_part.parse().map_err(|_| too_large())?
    };
    let mut frac: u64 = 0;
    let mut digits = frac_part.bytes();
    for _ in 0..frac_digits {
        let d = digits.next().map_or(0, |b| u64::from(b - b'0'));
        frac = frac * 10 + d;
    }
    int.checked_mul(10u64.pow(frac_digits))
        .and_then(|v| v.checked_add(frac))
        .ok_or_else(too_large)
}

/// count * unit bytes, checked.
fn to_bytes(
    count: u64,
    unit_bytes: u64,
    line: u64,
    field: &'static str,
) -> Result<u64, TraceError> {
    count.checked_mul(unit_bytes).ok_or_else(|| {
        field_err(
            line,
            field,
            format!("{count} x {unit_bytes} bytes overflows 64 bits"),
        )
    })
}

/// Checks a request's length and that its end fits in 64 bits.
fn check_extent(
    offset_bytes: u64,
    len_bytes: u64,
    line: u64,
    len_field: &'static str,
) -> Result<(), TraceError> {
    if len_bytes == 0 {
        return Err(field_err(
            line,
            len_field,
            "is 0; zero-length requests cannot be replayed, remove the line".to_string(),
        ));
    }
    if offset_bytes.checked_add(len_bytes).is_none() {
        return Err(TraceError::Line {
            line,
            problem: format!(
                "offset {offset_bytes} + length {len_bytes} bytes overflows 64 bits; check the offset and size columns"
            ),
        });
    }
    Ok(())
}

/// Splits on ASCII whitespace into exactly N fields.
fn fields<'a, const N: usize>(
    text: &'a str,
    line: u64,
    layout: &'static str,
) -> Result<[&'a str; N], TraceError> {
    let mut out = [""; N];
    let mut count = 0usize;
    for (i, f) in text.split_ascii_whitespace().enumerate() {
        if i < N {
            out[i] = f;
        }
        count = i + 1;
    }
    if count != N {
        return Err(TraceError::Line {
            line,
            problem: format!("expected {N} space-separated fields `{layout}`, found {count}"),
        });
    }
    Ok(out)
}

fn op_flag(s: &str, line: u64, field: &'static str) -> Result<Op, TraceError> {
    match s {
        "1" => Ok(Op::Read),
        "0" => Ok(Op::Write),
        _ => Err(field_err(
            line,
            field,
            format!("{} is not 1 (read) or 0 (write)", show(s)),
        )),
    }
}

/// `arrival_time_ns device start_sector size_sectors type`
fn mqsim(text: &str, line: u64) -> Result<Raw, TraceError> {
    let [t, dev, sector, size, ty] = fields::<5>(
        text,
        line,
        "arrival_time_ns device start_sector size_sectors type",
    )?;
    let time = uint(t, line, "arrival_time_ns")?;
    let device = uint32(dev, line, "device")?;
    let offset_bytes = to_bytes(
        uint(sector, line, "start_sector")?,
        SECTOR_BYTES,
        line,
        "start_sector",
    )?;
    let len_bytes = to_bytes(
        uint(size, line, "size_sectors")?,
        SECTOR_BYTES,
        line,
        "size_sectors",
    )?;
    let op = op_flag(ty, line, "type")?;
    check_extent(offset_bytes, len_bytes, line, "size_sectors")?;
    Ok(Raw::data(time, device, offset_bytes, len_bytes, op))
}

/// `arrival_time_ms device offset size op`, offset and size in bytes or sectors.
fn replayer(text: &str, line: u64, unit: TraceUnit) -> Result<Raw, TraceError> {
    let (layout, offset_field, size_field) = match unit {
        TraceUnit::Bytes => (
            "arrival_time_ms device offset_bytes size_bytes op",
            "offset_bytes",
            "size_bytes",
        ),
        TraceUnit::Sectors => (
            "arrival_time_ms device offset_sectors size_sectors op",
            "offset_sectors",
            "size_sectors",
        ),
    };
    let [t, dev, offset, size, op] = fields::<5>(text, line, layout)?;
    let time = decimal(t, 6, line, "arrival_time_ms")?;
    let device = uint32(dev, line, "device")?;
    let offset_bytes = to_bytes(
        uint(offset, line, offset_field)?,
        unit.bytes(),
        line,
        offset_field,
    )?;
    let len_bytes = to_bytes(
        uint(size, line, size_field)?,
        unit.bytes(),
        line,
        size_field,
    )?;
    let op = op_flag(op, line, "op")?;
    check_extent(offset_bytes, len_bytes, line, size_field)?;
    Ok(Raw::data(time, device, offset_bytes, len_bytes, op))
}

/// `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`
fn msr_csv(text: &str, line: u64) -> Result<Raw, TraceError> {
    const N: usize = 7;
    let mut f = [""; N];
    let mut count = 0usize;
    for (i, part) in text.split(',').enumerate() {
        if i < N {
            f[i] = part.trim();
        }
        count = i + 1;
    }
    if count != N {
        return Err(TraceError::Line {
            line,
            problem: format!(
                "expected {N} comma-separated fields `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, found {count}"
            ),
        });
    }
    let time = uint(f[0], line, "Timestamp")?;
    if f[1].is_empty() {
        return Err(field_err(line, "Hostname", "is empty".to_string()));
    }
    let device = uint32(f[2], line, "DiskNumber")?;
    let op = if f[3].eq_ignore_ascii_case("read") {
        Op::Read
    } else if f[3].eq_ignore_ascii_case("write") {
        Op::Write
    } else {
        return Err(field_err(
            line,
            "Type",
            format!("{} is not Read or Write", show(f[3])),
        ));
    };
    let offset_bytes = uint(f[4], line, "Offset")?;
    let len_bytes = uint(f[5], line, "Size")?;
    // Validated so that a shifted or truncated column is caught; not used by replay.
    uint(f[6], line, "ResponseTime")?;
    check_extent(offset_bytes, len_bytes, line, "Size")?;
    Ok(Raw::data(time, device, offset_bytes, len_bytes, op))
}

/// `time_ms devno blkno bcount flags`, flags in hex with bit 0 = read.
fn disksim(text: &str, line: u64) -> Result<Raw, TraceError> {
    let [t, dev, blk, count, flags] = fields::<5>(text, line, "time_ms devno blkno bcount flags")?;
    let time = decimal(t, 6, line, "time_ms")?;
    let device = uint32(dev, line, "devno")?;
    let offset_bytes = to_bytes(uint(blk, line, "blkno")?, SECTOR_BYTES, line, "blkno")?;
    let len_bytes = to_bytes(uint(count, line, "bcount")?, SECTOR_BYTES, line, "bcount")?;
    let hex = flags
        .strip_prefix("0x")
        .or_else(|| flags.strip_prefix("0X"))
        .unwrap_or(flags);
    if hex.is_empty() || hex.len() > 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(field_err(
            line,
            "flags",
            format!(
                "{} is not a hexadecimal number like 0x1 (bit 0 set = read)",
                show(flags)
            ),
        ));
    }
    let bits = u64::from_str_radix(hex, 16).expect("checked hex digits, at most 16");
    let op = if bits & 1 == 1 { Op::Read } else { Op::Write };
    check_extent(offset_bytes, len_bytes, line, "bcount")?;
    Ok(Raw::data(time, device, offset_bytes, len_bytes, op))
}

/// blkparse prints its per-CPU and total summaries after the events: `CPU0 (sdb):`, `Total (sdb):`.
fn blkparse_summary_start(text: &str) -> bool {
    let t = text.trim_start();
    if t.starts_with("Total (") {
        return true;
    }
    match t.strip_prefix("CPU") {
        Some(rest) => {
            let digits = rest.bytes().take_while(|b| b.is_ascii_digit()).count();
            digits > 0 && rest[digits..].starts_with(" (")
        }
        None => false,
    }
}

/// The device id of `maj,min`: the kernel's dev_t layout, major << 20 | minor.
pub(crate) fn blk_dev_id(maj: u32, min: u32) -> Option<u32> {
    (maj < (1 << 12) && min < (1 << 20)).then_some(maj << 20 | min)
}

const BLK_LAYOUT: &str = "maj,min cpu seq seconds pid action rwbs sector + count [process]";

/// `maj,min cpu seq seconds pid action rwbs sector + count [process]`. Only D (dispatch) events
/// are requests; every other event line is checked for its leading fields and skipped. A D
/// event's RWBS must parse ([`Rwbs`]); flush requests and FUA writes are kept as such, discards
/// and `N` requests are skipped.
fn blkparse(text: &str, line: u64) -> Result<Option<Raw>, TraceError> {
    let mut it = text.split_ascii_whitespace();
    let mut next = |field: &'static str| {
        it.next().ok_or_else(|| TraceError::Line {
            line,
            problem: format!("missing field {field}; expected a blkparse event `{BLK_LAYOUT}`"),
        })
    };
    let dev = next("maj,min")?;
    let device = {
        let bad = || {
            field_err(
                line,
                "maj,min",
                format!(
                    "{} is not a device number like 8,0 (blkparse default output expected)",
                    show(dev)
                ),
            )
        };
        let (maj, min) = dev.split_once(',').ok_or_else(bad)?;
        let maj = uint32(maj, line, "maj,min").map_err(|_| bad())?;
        let min = uint32(min, line, "maj,min").map_err(|_| bad())?;
        blk_dev_id(maj, min).ok_or_else(|| {
            field_err(
                line,
                "maj,min",
                format!(
                    "{} is out of range (major below 4096, minor below 1048576)",
                    show(dev)
                ),
            )
        })?
    };
    let cpu = next("cpu")?;
    uint32(cpu, line, "cpu")?;
    let seq = next("seq")?;
    uint(seq, line, "seq")?;
    let secs = next("seconds")?;
    let time = decimal(secs, 9, line, "seconds")?;
    let pid = next("pid")?;
    uint32(pid, line, "pid")?;
    let action = next("action")?;
    if action != "D" {
        return Ok(None);
    }
    let rwbs_text = next("rwbs")?;
    let rwbs = Rwbs::parse(rwbs_text).ok_or_else(|| {
        field_err(
            line,
            "rwbs",
            format!(
                "{} is not a blkparse RWBS field (an optional F for a preflush, one of R W D DE N F, then any of F A S M in that order, e.g. R, WS, WFS, FWS, FN)",
                show(rwbs_text)
            ),
        )
    })?;
    let op = match rwbs.kind {
        RwbsKind::Read => Op::Read,
        RwbsKind::Write => Op::Write,
        // A flush request (REQ_OP_FLUSH, `FN`): the device sees a flush and nothing else.
        RwbsKind::Flush => return Ok(Some(flush_raw(time, device))),
        // Discards, secure erases and other data-less requests are not replayed; a flush asked
        // before one still reaches the device.
        RwbsKind::Discard | RwbsKind::None => {
            return Ok(rwbs.preflush.then(|| flush_raw(time, device)));
        }
    };
    // A write marked flush or FUA may carry no data: an empty preflush (`D FWS [jbd2]`, or
    // `FWS 0 + 0`). It reaches the device as a flush.
    let durable = rwbs.preflush || rwbs.fua;
    let sector = it.next();
    if durable && op == Op::Write && sector.is_none_or(|s| s.starts_with('[') || s.starts_with('('))
    {
        return Ok(Some(flush_raw(time, device)));
    }
    let sector = sector.ok_or_else(|| TraceError::Line {
        line,
        problem: format!("missing field sector; expected a blkparse event `{BLK_LAYOUT}`"),
    })?;
    let offset_bytes = to_bytes(uint(sector, line, "sector")?, SECTOR_BYTES, line, "sector")?;
    let plus = it.next();
    if plus != Some("+") {
        return Err(field_err(
            line,
            "+",
            format!(
                "expected `+` between sector and count, found {}",
                show(plus.unwrap_or(""))
            ),
        ));
    }
    let count = it.next().ok_or_else(|| TraceError::Line {
        line,
        problem: format!("missing field count; expected a blkparse event `{BLK_LAYOUT}`"),
    })?;
    let sectors = uint(count, line, "count")?;
    if durable && op == Op::Write && sectors == 0 {
        return Ok(Some(flush_raw(time, device)));
    }
    let len_bytes = to_bytes(sectors, SECTOR_BYTES, line, "count")?;
    check_extent(offset_bytes, len_bytes, line, "count")?;
    Ok(Some(Raw {
        time,
        device,
        offset_bytes,
        len_bytes,
        op,
        fua: rwbs.fua,
        flush: rwbs.preflush,
    }))
}

/// A data-less flush request.
fn flush_raw(time: u64, device: u32) -> Raw {
    Raw {
        time,
        device,
        offset_bytes: 0,
        len_bytes: 0,
        op: Op::Write,
        fua: false,
        flush: true,
    }
}

/// What a blkparse RWBS field's operation letter says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RwbsKind {
    Read,
    Write,
    /// `D` (discard) or `DE` (secure erase).
    Discard,
    /// A flush request: `FN` (blkparse: a preflush without data or direction), or the kernel
    /// tracepoint's `F` / `FF` (REQ_OP_FLUSH).
    Flush,
    /// `N`: no data and no direction.
    None,
}

/// A parsed blkparse RWBS field. blkparse (blkparse_fmt.c, `fill_rwbs`) prints `F` for a flush
/// (REQ_PREFLUSH), then one of `D` (discard), `W`, `R` or `N`, then `F` for FUA, `A`
/// (read-ahead), `S` (sync), `M` (metadata), in that order; the kernel's own tracepoints print
/// `F` for REQ_OP_FLUSH in the operation's place and `DE` for a secure erase, also accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rwbs {
    pub kind: RwbsKind,
    /// A leading `F`: the device is to flush its cache before the data.
    pub preflush: bool,
    /// An `F` after the operation: force unit access.
    pub fua: bool,
}

impl Rwbs {
    /// None when `s` is not an RWBS field in that grammar.
    pub(crate) fn parse(s: &str) -> Option<Rwbs> {
        let b = s.as_bytes();
        // A leading F is a preflush when an operation letter follows; otherwise it is the
        // operation itself (the tracepoint's REQ_OP_FLUSH, `F` or `FS`).
        let preflush =
            b.first() == Some(&b'F') && matches!(b.get(1), Some(b'R' | b'W' | b'D' | b'N' | b'F'));
        let mut i = usize::from(preflush);
        let kind = match b.get(i) {
            Some(b'R') => RwbsKind::Read,
            Some(b'W') => RwbsKind::Write,
            Some(b'N') if preflush => RwbsKind::Flush,
            Some(b'N') => RwbsKind::None,
            Some(b'D') => {
                if b.get(i + 1) == Some(&b'E') {
                    i += 1;
                }
                RwbsKind::Discard
            }
            Some(b'F') => RwbsKind::Flush,
            _ => return None,
        };
        i += 1;
        let mut fua = false;
        let mut rest = &b[i..];
        for (flag, at) in [(b'F', 0), (b'A', 1), (b'S', 2), (b'M', 3)] {
            if rest.first() == Some(&flag) {
                rest = &rest[1..];
                if at == 0 {
                    fua = true;
                }
            }
        }
        if !rest.is_empty() {
            return None;
        }
        Some(Rwbs {
            kind,
            preflush: preflush && kind != RwbsKind::Flush,
            fua,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_is_exact() {
        assert_eq!(decimal("223.412", 6, 1, "t").unwrap(), 223_412_000);
        assert_eq!(decimal("0.000", 6, 1, "t").unwrap(), 0);
        assert_eq!(decimal("5", 6, 1, "t").unwrap(), 5_000_000);
        assert_eq!(decimal(".5", 6, 1, "t").unwrap(), 500_000);
        assert_eq!(decimal("7.", 6, 1, "t").unwrap(), 7_000_000);
        assert_eq!(decimal("1.0000019", 6, 1, "t").unwrap(), 1_000_001);
        assert_eq!(decimal("0.000013342", 9, 1, "t").unwrap(), 13_342);
        assert!(decimal(".", 6, 1, "t").is_err());
        assert!(decimal("-1", 6, 1, "t").is_err());
        assert!(decimal("1e3", 6, 1, "t").is_err());
        assert!(decimal("1.2.3", 6, 1, "t").is_err());
        assert!(decimal("18446744073709.551616", 6, 1, "t").is_err());
        assert_eq!(
            decimal("18446744073709.551615", 6, 1, "t").unwrap(),
            u64::MAX
        );
    }

    #[test]
    fn summary_start() {
        assert!(blkparse_summary_start("CPU0 (sdb):"));
        assert!(blkparse_summary_start("CPU12 (8,0):"));
        assert!(blkparse_summary_start("Total (sdb):"));
        assert!(!blkparse_summary_start("CPU (x)"));
        assert!(!blkparse_summary_start(
            "  8,0    3        1     0.000000000   697  D   W 1 + 8"
        ));
    }

    #[test]
    fn show_escapes_and_truncates() {
        assert_eq!(show("a\tb"), "`a\\tb`");
        assert_eq!(show(&"x".repeat(100)).chars().count(), 43);
    }
}
