//! Records back into text, in any format: the inverse of reading, used by the round-trip tests and
//! for converting a trace between formats.

use std::fmt::Write as _;
use std::io::Write;

use nines_core::op::Op;

use super::{SECTOR_BYTES, TraceError, TraceFormat, TraceRecord, TraceUnit, parse};

/// The msr-csv timestamp written for the first record: 2008-01-01 00:00 UTC in Windows filetime
/// ticks, so files look like the originals. Reading makes times relative again.
pub const MSR_FILETIME_BASE: u64 = 128_437_632_000_000_000;

/// Writes `records` in `format`, one line each (`unit` applies to the replayer format).
///
/// Times are written as given (msr-csv: relative to the first record, on top of
/// [`MSR_FILETIME_BASE`]); reading the output gives the same records back, with msr-csv times
/// shifted so the first is 0. Fails on a record the format cannot express: offsets and lengths
/// that are not whole sectors in sector formats, msr-csv times that are not whole 100 ns ticks,
/// times that go backwards, zero lengths. Flush requests and FUA are written only in the
/// blkparse format (`FN`, `WF`); the others have no column for them and refuse such records
/// rather than drop what the device was asked.
pub fn write_trace(
    mut w: impl Write,
    records: &[TraceRecord],
    format: TraceFormat,
    unit: TraceUnit,
) -> Result<(), TraceError> {
    let mut line = String::with_capacity(128);
    let first_ns = records.first().map_or(0, |r| r.arrival_ns);
    let mut previous_ns = first_ns;
    for (index, r) in records.iter().enumerate() {
        let fail = |problem: String| TraceError::Unrepresentable {
            index,
            format,
            problem,
        };
        check_record(r, format, previous_ns).map_err(fail)?;
        previous_ns = r.arrival_ns;
        line.clear();
        let at = Position { index, first_ns };
        format_record(&mut line, r, at, format, unit).map_err(fail)?;
        debug_assert!(line.ends_with('\n'), "one line per record");
        w.write_all(line.as_bytes()).map_err(TraceError::Write)?;
    }
    w.flush().map_err(TraceError::Write)
}

/// Why `format` cannot express record `r` at all (flush or FUA outside blkparse, a flush with
/// data, no length, an overflowing end, time going backwards from `previous_ns`).
fn check_record(r: &TraceRecord, format: TraceFormat, previous_ns: u64) -> Result<(), String> {
    if (r.flush || r.fua) && format != TraceFormat::Blkparse {
        return Err(format!(
            "it is a {}, which only the blkparse format can express",
            if r.flush { "flush" } else { "FUA write" }
        ));
    }
    if r.flush {
        if r.len_bytes != 0 || r.offset_bytes != 0 {
            return Err("a flush carries no data".to_string());
        }
    } else if r.len_bytes == 0 {
        return Err("its length is 0".to_string());
    }
    if r.offset_bytes.checked_add(r.len_bytes).is_none() {
        return Err("offset + length overflows 64 bits".to_string());
    }
    if r.arrival_ns < previous_ns {
        return Err(format!(
            "its arrival {} ns is before the previous record's {previous_ns} ns",
            r.arrival_ns
        ));
    }
    Ok(())
}

/// Where a record is in the trace: its index, and the first record's arrival.
#[derive(Clone, Copy)]
struct Position {
    index: usize,
    first_ns: u64,
}

/// `bytes` in 512-byte sectors; why not when it is not a whole number of them.
fn sectors(bytes: u64, what: &str) -> Result<u64, String> {
    if bytes.is_multiple_of(SECTOR_BYTES) {
        Ok(bytes / SECTOR_BYTES)
    } else {
        Err(format!(
            "its {what} of {bytes} bytes is not a whole number of 512-byte sectors"
        ))
    }
}

/// Appends record `r`'s line in `format` to `line` (a table of the formats' columns).
fn format_record(
    line: &mut String,
    r: &TraceRecord,
    at: Position,
    format: TraceFormat,
    unit: TraceUnit,
) -> Result<(), String> {
    let read = r.op == Op::Read;
    match format {
        TraceFormat::Mqsim => {
            let _ = writeln!(
                line,
                "{} {} {} {} {}",
                r.arrival_ns,
                r.device,
                sectors(r.offset_bytes, "offset")?,
                sectors(r.len_bytes, "length")?,
                u8::from(read)
            );
        }
        TraceFormat::Replayer => {
            let (offset, len) = match unit {
                TraceUnit::Bytes => (r.offset_bytes, r.len_bytes),
                TraceUnit::Sectors => (
                    sectors(r.offset_bytes, "offset")?,
                    sectors(r.len_bytes, "length")?,
                ),
            };
            let _ = writeln!(
                line,
                "{}.{:06} {} {} {} {}",
                r.arrival_ns / 1_000_000,
                r.arrival_ns % 1_000_000,
                r.device,
                offset,
                len,
                u8::from(read)
            );
        }
        TraceFormat::MsrCsv => msr_line(line, r, at.first_ns)?,
        TraceFormat::Disksim => {
            let _ = writeln!(
                line,
                "{}.{:06} {} {} {} {:x}",
                r.arrival_ns / 1_000_000,
                r.arrival_ns % 1_000_000,
                r.device,
                sectors(r.offset_bytes, "offset")?,
                sectors(r.len_bytes, "length")?,
                u8::from(read)
            );
        }
        TraceFormat::Blkparse => blkparse_line(line, r, at.index)?,
    }
    Ok(())
}

/// An msr-csv line: the time in filetime ticks after [`MSR_FILETIME_BASE`].
fn msr_line(line: &mut String, r: &TraceRecord, first_ns: u64) -> Result<(), String> {
    let rel_ns = r.arrival_ns - first_ns;
    if !rel_ns.is_multiple_of(100) {
        return Err(format!(
            "its time {rel_ns} ns after the first record is not a whole number of 100 ns filetime ticks"
        ));
    }
    let ticks = MSR_FILETIME_BASE
        .checked_add(rel_ns / 100)
        .ok_or_else(|| "its time overflows a filetime".to_string())?;
    let _ = writeln!(
        line,
        "{},nines,{},{},{},{},0",
        ticks,
        r.device,
        if r.op == Op::Read { "Read" } else { "Write" },
        r.offset_bytes,
        r.len_bytes
    );
    Ok(())
}

/// A blkparse `D` (issue) line, the `index`th event: a flush (`FN`), else a read or write with
/// FUA as `F`.
fn blkparse_line(line: &mut String, r: &TraceRecord, index: usize) -> Result<(), String> {
    // The inverse of parse::blk_dev_id; every u32 splits into a valid pair.
    let (maj, min) = (r.device >> 20, r.device & ((1 << 20) - 1));
    debug_assert_eq!(parse::blk_dev_id(maj, min), Some(r.device));
    if r.flush {
        let _ = writeln!(
            line,
            "{:>3},{:<3} {:>3} {:>8} {:>5}.{:09} {:>5}  D  FN [nines]",
            maj,
            min,
            0,
            index + 1,
            r.arrival_ns / 1_000_000_000,
            r.arrival_ns % 1_000_000_000,
            1,
        );
        return Ok(());
    }
    let rwbs = match (r.op == Op::Read, r.fua) {
        (true, false) => "R",
        (true, true) => "RF",
        (false, false) => "W",
        (false, true) => "WF",
    };
    let _ = writeln!(
        line,
        "{:>3},{:<3} {:>3} {:>8} {:>5}.{:09} {:>5}  D {:>3} {} + {} [nines]",
        maj,
        min,
        0,
        index + 1,
        r.arrival_ns / 1_000_000_000,
        r.arrival_ns % 1_000_000_000,
        1,
        rwbs,
        sectors(r.offset_bytes, "offset")?,
        sectors(r.len_bytes, "length")?,
    );
    Ok(())
}
