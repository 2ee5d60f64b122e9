//! Hand-written samples of the formats with no shared file (msr-csv, disksim, blkparse), every
//! kind of bad line, and fitting.

use nines_core::op::Op;
use nines_trace::{
    FitPolicy, LINE_BYTES_MAX, Trace, TraceError, TraceFormat, TraceOptions, TraceRecord,
    TraceUnit, read_trace,
};

fn read(text: &str, format: TraceFormat) -> Result<Trace, TraceError> {
    read_trace(text.as_bytes(), format, &TraceOptions::default())
}

fn tuple(r: &TraceRecord) -> (u64, u32, u64, u64, Op) {
    (r.arrival_ns, r.device, r.offset_bytes, r.len_bytes, r.op)
}

// Lines in the layout of the SNIA MSR Cambridge CSV files (hm_1 style).
const MSR: &str = "\
Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime
128166372003061629,hm,1,Read,7014609920,24576,41286
128166372016382155,hm,1,Write,1317441536,8192,1963\r
# a comment

128166372016382155,hm,0,write,1317441536,512,1963
128166372026382155,hm,1,READ,0,4096,77
";

#[test]
fn msr_csv_sample() {
    let trace = read(MSR, TraceFormat::MsrCsv).unwrap();
    let got: Vec<_> = trace.records.iter().map(tuple).collect();
    assert_eq!(
        got,
        vec![
            (0, 1, 7_014_609_920, 24_576, Op::Read),
            // (128166372016382155 - 128166372003061629) * 100 ns
            (1_332_052_600, 1, 1_317_441_536, 8_192, Op::Write),
            (1_332_052_600, 0, 1_317_441_536, 512, Op::Write),
            (2_332_052_600, 1, 0, 4_096, Op::Read),
        ]
    );
    assert_eq!(trace.lines, vec![2, 3, 6, 7]);
    assert_eq!(trace.devices, vec![0, 1]);
    assert_eq!(trace.format, TraceFormat::MsrCsv);
    let stats = trace.stats();
    assert_eq!((stats.reads, stats.writes), (2, 2));
    assert_eq!(stats.bytes, 24_576 + 8_192 + 512 + 4_096);
    assert_eq!(stats.duration_ns, 2_332_052_600);
}

#[test]
fn msr_csv_with_a_byte_order_mark() {
    let with_bom = format!("\u{feff}{MSR}");
    let trace = read(&with_bom, TraceFormat::MsrCsv).unwrap();
    assert_eq!(trace, read(MSR, TraceFormat::MsrCsv).unwrap());
    // Only at the very start.
    let err = read("0 0 0 8 1\n\u{feff}1 0 0 8 1\n", TraceFormat::Mqsim).unwrap_err();
    assert_eq!(err.line(), Some(2));
}

#[test]
fn msr_csv_header_only_at_the_top() {
    let text = "128166372003061629,hm,1,Read,0,512,1\nTimestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n";
    let err = read(text, TraceFormat::MsrCsv).unwrap_err();
    assert_eq!(err.line(), Some(2));
    assert!(
        err.to_string().starts_with("line 2: field Timestamp:"),
        "{err}"
    );
}

const DISKSIM: &str = "\
0.000000 0 1000 8 1
1.5 0 2000 16 0
2.250001 3 3000 8 0x1
2.250001 3 3000 8 0X11
10 2 0 1 1a
";

#[test]
fn disksim_sample() {
    let trace = read(DISKSIM, TraceFormat::Disksim).unwrap();
    let got: Vec<_> = trace.records.iter().map(tuple).collect();
    assert_eq!(
        got,
        vec![
            (0, 0, 1000 * 512, 8 * 512, Op::Read),
            (1_500_000, 0, 2000 * 512, 16 * 512, Op::Write),
            (2_250_001, 3, 3000 * 512, 8 * 512, Op::Read),
            (2_250_001, 3, 3000 * 512, 8 * 512, Op::Read),
            (10_000_000, 2, 0, 512, Op::Write),
        ]
    );
    assert_eq!(trace.devices, vec![0, 2, 3]);
}

// blkparse's default output for a short run: queue, get, plug, insert, message, dispatch and
// complete events on two devices, a flush, a discard, then the summary section.
const BLKPARSE: &str = "  8,0    3        1     0.000000000   697  A   W 223490 + 8 <- (8,2) 221442
  8,0    3        2     0.000001218   697  Q   W 223490 + 8 [kjournald]
  8,0    3        3     0.000005766   697  G   W 223490 + 8 [kjournald]
  8,0    3        4     0.000007534   697  P   N [kjournald]
  8,0    3        5     0.000008864   697  I   W 223490 + 8 [kjournald]
  8,0    3        0     0.000013342     0  m   N cfq697 insert_request
  8,0    3        6     0.000016230   697  D   W 223490 + 8 [kjournald]
  8,0    1        1     0.000327144     0  C   W 223490 + 8 [0]
  8,0    0        1     0.001234567  1234  Q   R 1000 + 16 [fio]
  8,0    0        2     0.001240000  1234  D   R 1000 + 16 [fio]
  8,16   0        3     0.001250000  1234  D  RM 5000 + 8 [fio]
  8,0    0        4     0.002000000   300  D FWS [jbd2/sda1-8]
  8,0    0        5     0.002100000   300  D  DS 2048 + 2048 [fstrim]
  8,0    0        6     0.002200000   300  D  WS 7000 + 24 [jbd2/sda1-8]
  8,0    0        7     0.002300000   300  D FWS 0 + 0 [jbd2/sda1-8]
  8,0    1        2     0.003000000     0  C   R 1000 + 16 [0]
CPU0 (sda):
 Reads Queued:           1,        8KiB\t Writes Queued:           0,        0KiB
 Read Dispatches:        2,       12KiB\t Write Dispatches:        2,       12KiB
Total (sda):
 Reads Queued:           1,        8KiB\t Writes Queued:           0,        0KiB
Throughput (R/W): 4KiB/s / 4KiB/s
Events (sda): 16 entries
Skips: 0 forward (0 -   0.0%)
";

#[test]
fn blkparse_sample_uses_dispatches_only() {
    let trace = read(BLKPARSE, TraceFormat::Blkparse).unwrap();
    let sda = 8 << 20;
    let sdb = (8 << 20) | 16;
    let got: Vec<_> = trace.records.iter().map(tuple).collect();
    assert_eq!(
        got,
        vec![
            (16_230, sda, 223_490 * 512, 8 * 512, Op::Write),
            (1_240_000, sda, 1000 * 512, 16 * 512, Op::Read),
            (1_250_000, sdb, 5000 * 512, 8 * 512, Op::Read),
            (2_000_000, sda, 0, 0, Op::Write),
            (2_200_000, sda, 7000 * 512, 24 * 512, Op::Write),
            (2_300_000, sda, 0, 0, Op::Write),
        ]
    );
    // Both empty preflushes (`FWS` without a sector, `FWS 0 + 0`) are flush requests.
    let flushes: Vec<bool> = trace.records.iter().map(|r| r.flush).collect();
    assert_eq!(flushes, [false, false, false, true, false, true]);
    assert!(trace.records.iter().all(|r| !r.fua));
    assert_eq!(trace.lines, vec![7, 10, 11, 12, 14, 15]);
    assert_eq!(trace.devices, vec![sda, sdb]);
}

#[test]
fn blkparse_sparse_devices_spread_over_the_simulated_ones() {
    let mut trace = read(BLKPARSE, TraceFormat::Blkparse).unwrap();
    trace.fit(1 << 30, 2, FitPolicy::Error).unwrap();
    let devices: Vec<u32> = trace.records.iter().map(|r| r.device).collect();
    assert_eq!(devices, vec![0, 0, 1, 0, 0, 0]);
    assert_eq!(trace.devices, vec![0, 1]);
}

#[test]
fn blkparse_event_lines_before_the_summary_must_be_events() {
    let text = "  8,0 0 1 0.1 5 D R 8 + 8 [x]\nnot an event line\n";
    let err = read(text, TraceFormat::Blkparse).unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 2: field maj,min: `not` is not a device number like 8,0 (blkparse default output expected)"
    );
}

#[test]
fn options_parse_from_names() {
    for f in TraceFormat::ALL {
        assert_eq!(f.name().parse::<TraceFormat>().unwrap(), f);
        assert_eq!(f.to_string(), f.name());
    }
    assert_eq!(
        "msr-csv".parse::<TraceFormat>().unwrap(),
        TraceFormat::MsrCsv
    );
    assert_eq!("sectors".parse::<TraceUnit>().unwrap(), TraceUnit::Sectors);
    assert_eq!("bytes".parse::<TraceUnit>().unwrap(), TraceUnit::Bytes);
    assert_eq!("wrap".parse::<FitPolicy>().unwrap(), FitPolicy::Wrap);
    assert_eq!("scale".parse::<FitPolicy>().unwrap(), FitPolicy::Scale);
    assert_eq!("error".parse::<FitPolicy>().unwrap(), FitPolicy::Error);
    assert_eq!(
        "csv".parse::<TraceFormat>().unwrap_err().to_string(),
        "unknown trace format `csv`; use one of: mqsim, replayer, msr-csv, disksim, blkparse"
    );
    assert_eq!(
        "kb".parse::<TraceUnit>().unwrap_err().to_string(),
        "unknown trace unit `kb`; use one of: bytes, sectors"
    );
    assert_eq!(
        "clip".parse::<FitPolicy>().unwrap_err().to_string(),
        "unknown fit policy `clip`; use one of: error, wrap, scale"
    );
}

/// Every bad line gives exactly this one-line message.
#[test]
fn bad_lines_name_line_field_and_problem() {
    let cases: &[(TraceFormat, &str, &str)] = &[
        (
            TraceFormat::Mqsim,
            "1 0 0 8 1\n2 0 0 8 2\n",
            "line 2: field type: `2` is not 1 (read) or 0 (write)",
        ),
        (
            TraceFormat::Mqsim,
            "1 0 0 8\n",
            "line 1: expected 5 space-separated fields `arrival_time_ns device start_sector size_sectors type`, found 4",
        ),
        (
            TraceFormat::Mqsim,
            "# header\n1 0 0 0 1\n",
            "line 2: field size_sectors: is 0; zero-length requests cannot be replayed, remove the line",
        ),
        (
            TraceFormat::Mqsim,
            "-5 0 0 8 1\n",
            "line 1: field arrival_time_ns: `-5` is not a whole non-negative number",
        ),
        (
            TraceFormat::Mqsim,
            "1 4294967296 0 8 1\n",
            "line 1: field device: `4294967296` is too large (at most 4294967295)",
        ),
        (
            TraceFormat::Mqsim,
            "1 0 36028797018963968 8 1\n",
            "line 1: field start_sector: 36028797018963968 x 512 bytes overflows 64 bits",
        ),
        (
            TraceFormat::Mqsim,
            "1 0 36028797018963967 1 1\n",
            "line 1: offset 18446744073709551104 + length 512 bytes overflows 64 bits; check the offset and size columns",
        ),
        (
            TraceFormat::Replayer,
            "0.5 0 0 4096 1\n0.4 0 0 4096 1\n",
            "line 2: arrival time 400000 ns is earlier than the previous request's 500000 ns; sort the trace by time (e.g. `sort -s -n -k1,1 FILE`) and retry",
        ),
        (
            TraceFormat::Replayer,
            "1e3 0 0 4096 1\n",
            "line 1: field arrival_time_ms: `1e3` is not a non-negative decimal number like 12.345",
        ),
        (
            TraceFormat::Replayer,
            "1 0 0 4k 1\n",
            "line 1: field size_bytes: `4k` is not a whole non-negative number",
        ),
        (
            TraceFormat::MsrCsv,
            "1,h,0,Read,0,512\n",
            "line 1: expected 7 comma-separated fields `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`, found 6",
        ),
        (
            TraceFormat::MsrCsv,
            "1,h,0,Trim,0,512,1\n",
            "line 1: field Type: `Trim` is not Read or Write",
        ),
        (
            TraceFormat::MsrCsv,
            "5,h,0,Read,0,512,1\n4,h,0,Read,0,512,1\n",
            "line 2: arrival time 4 filetime ticks (100 ns) is earlier than the previous request's 5 filetime ticks (100 ns); sort the trace by time (e.g. `sort -s -t, -n -k1,1 FILE`) and retry",
        ),
        (
            TraceFormat::MsrCsv,
            "1,,0,Read,0,512,1\n",
            "line 1: field Hostname: is empty",
        ),
        (
            TraceFormat::MsrCsv,
            "1,h,0,Read,0,512,x\n",
            "line 1: field ResponseTime: `x` is not a whole non-negative number",
        ),
        (
            TraceFormat::Disksim,
            "0.1 0 0 8 g\n",
            "line 1: field flags: `g` is not a hexadecimal number like 0x1 (bit 0 set = read)",
        ),
        (
            TraceFormat::Disksim,
            "0.1 0 0 0 1\n",
            "line 1: field bcount: is 0; zero-length requests cannot be replayed, remove the line",
        ),
        (
            TraceFormat::Blkparse,
            "  8,0 0 1 0.1 5 D R 8 - 8 [x]\n",
            "line 1: field +: expected `+` between sector and count, found `-`",
        ),
        (
            TraceFormat::Blkparse,
            "  8,0 0 1 0.1 5 D R 8 + 0 [x]\n",
            "line 1: field count: is 0; zero-length requests cannot be replayed, remove the line",
        ),
        (
            TraceFormat::Blkparse,
            "  8,0 0 1 0.1 5 D R\n",
            "line 1: missing field sector; expected a blkparse event `maj,min cpu seq seconds pid action rwbs sector + count [process]`",
        ),
        (
            TraceFormat::Blkparse,
            "  8,0 0 1\n",
            "line 1: missing field seconds; expected a blkparse event `maj,min cpu seq seconds pid action rwbs sector + count [process]`",
        ),
        (
            TraceFormat::Blkparse,
            "  4096,0 0 1 0.1 5 D R 8 + 8 [x]\n",
            "line 1: field maj,min: `4096,0` is out of range (major below 4096, minor below 1048576)",
        ),
        (
            TraceFormat::Mqsim,
            "# nothing here\n\n",
            "the trace holds no requests (2 lines read as mqsim); check the file and --trace-format",
        ),
        (
            TraceFormat::Blkparse,
            "  8,0 0 1 0.1 5 Q R 8 + 8 [x]\nCPU0 (sda):\n  8,0 0 1 0.1 5 D R 8 + 8 [x]\n",
            "the trace holds no requests (3 lines read as blkparse); check the file and --trace-format",
        ),
    ];
    for (format, text, want) in cases {
        let err = read(text, *format).unwrap_err();
        assert_eq!(err.to_string(), *want, "{format}: {text:?}");
        assert!(!err.to_string().contains('\n'));
    }
}

#[test]
fn binary_and_overlong_lines_are_refused() {
    let mut bytes = b"1 0 0 8 1\n".to_vec();
    bytes.extend_from_slice(&[0xff, 0xfe, b'\n']);
    let err = read_trace(&bytes[..], TraceFormat::Mqsim, &TraceOptions::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 2: not UTF-8 text; is this a mqsim text trace (a binary blktrace file must go through blkparse first)?"
    );
    let long = format!("1 0 0 8 1\n{}\n", "7".repeat(LINE_BYTES_MAX + 1));
    let err = read(&long, TraceFormat::Mqsim).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "line 2: longer than {LINE_BYTES_MAX} bytes; is this a text trace in the mqsim format?"
        )
    );
    // Exactly the limit is fine (and then a field error, not a length error).
    let at_limit = format!("{}\n", "7".repeat(LINE_BYTES_MAX));
    let err = read(&at_limit, TraceFormat::Mqsim).unwrap_err();
    assert!(err.to_string().starts_with("line 1: expected 5"), "{err}");
}

#[test]
fn options_are_validated() {
    for scale in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let opts = TraceOptions {
            time_scale: scale,
            ..TraceOptions::default()
        };
        let err = read_trace(&b"1 0 0 8 1\n"[..], TraceFormat::Mqsim, &opts).unwrap_err();
        assert!(err.to_string().starts_with("time scale"), "{err}");
    }
    let opts = TraceOptions {
        lines_max: Some(0),
        ..TraceOptions::default()
    };
    assert!(read_trace(&b"1 0 0 8 1\n"[..], TraceFormat::Mqsim, &opts).is_err());
}

#[test]
fn time_scale_keeps_the_first_arrival_and_rounds_gaps() {
    let text = "1000 0 0 8 1\n1003 0 0 8 1\n1010 0 0 8 0\n";
    let opts = TraceOptions {
        time_scale: 0.5,
        ..TraceOptions::default()
    };
    let trace = read_trace(text.as_bytes(), TraceFormat::Mqsim, &opts).unwrap();
    let arrivals: Vec<u64> = trace.records.iter().map(|r| r.arrival_ns).collect();
    // Gaps 3 and 10 ns from the first, halved: 1.5 rounds to 2, 5.
    assert_eq!(arrivals, vec![1000, 1002, 1005]);
    let opts = TraceOptions {
        time_scale: 1e10,
        ..TraceOptions::default()
    };
    let big = format!("0 0 0 8 1\n{} 0 0 8 1\n", u64::MAX / 2);
    let err = read_trace(big.as_bytes(), TraceFormat::Mqsim, &opts).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("line 2: the arrival time overflows"),
        "{err}"
    );
}

fn built(records: &[(u32, u64, u64)]) -> Trace {
    let records: Vec<TraceRecord> = records
        .iter()
        .enumerate()
        .map(|(i, &(device, offset_bytes, len_bytes))| TraceRecord {
            arrival_ns: i as u64,
            device,
            offset_bytes,
            len_bytes,
            op: Op::Write,
            fua: false,
            flush: false,
        })
        .collect();
    Trace::from_records(records, TraceFormat::Mqsim)
}

#[test]
fn fit_wrap_and_scale_exactly() {
    let size = 1_000_000u64;
    let t = built(&[
        (7, 0, 4096),
        (7, 995_904, 4096), // ends exactly at the size: in range
        (9, 1_000_000, 4096),
        (9, 3_000_512, 512),
        (3, 2_000_000, 8192), // ends at 2_008_192
    ]);
    let mut w = t.clone();
    let s = w.fit(size, 2, FitPolicy::Wrap).unwrap();
    assert_eq!(s.out_of_range, 3);
    assert_eq!(s.max_end_bytes, 3_001_024);
    assert_eq!(s.policy, FitPolicy::Wrap);
    let offsets: Vec<u64> = w.records.iter().map(|r| r.offset_bytes).collect();
    // offset % (size - len + 1), aligned down to the offset's own alignment (at most 4096):
    // 1_000_000 % 995_905 = 4_095, 1_000_000 = 2^6 * 15625 so align 64 -> 4_032;
    // 3_000_512 % 999_489 = 2_045, align 64 -> 1_984; 2_000_000 % 991_809 = 16_382, align 128
    // -> 16_256.
    assert_eq!(offsets, vec![0, 995_904, 4_032, 1_984, 16_256]);
    // Ids 3, 7, 9 are numbered 0, 1, 2 and go to 0, 1, 0.
    let devices: Vec<u32> = w.records.iter().map(|r| r.device).collect();
    assert_eq!(devices, vec![1, 1, 0, 0, 0]);
    assert_eq!(w.devices, vec![0, 1]);

    let mut s_trace = t.clone();
    s_trace.fit(size, 2, FitPolicy::Scale).unwrap();
    let offsets: Vec<u64> = s_trace.records.iter().map(|r| r.offset_bytes).collect();
    // offset * 1_000_000 / 3_001_024, capped at size - len, aligned down as the original:
    // 995_904 -> 331_854 -> 331_840; 1_000_000 -> 333_219 -> 333_184;
    // 3_000_512 -> 999_829, capped at 999_488; 2_000_000 -> 666_439 -> 666_368.
    assert_eq!(offsets, vec![0, 331_840, 333_184, 999_488, 666_368]);
    assert!(s_trace.records.iter().all(|r| r.end_bytes() <= size));

    let mut e = t.clone();
    let err = e.fit(size, 2, FitPolicy::Error).unwrap_err();
    assert_eq!(
        err.to_string(),
        "request 3: request at offset 1000000 of 4096 bytes ends at 1004096, beyond the device size of 1000000 bytes (3 requests are out of range, the largest end is 3001024); replay with the wrap or scale fit policy, or simulate a larger device"
    );
    assert_eq!(e, t);
}

#[test]
fn fit_refuses_impossible_requests_and_arguments() {
    let mut t = built(&[(0, 0, 4096), (0, 0, 8192)]);
    let err = t.fit(4096, 1, FitPolicy::Wrap).unwrap_err();
    assert_eq!(
        err.to_string(),
        "request 2: a request of 8192 bytes is larger than the whole device (4096 bytes); simulate a larger device"
    );
    assert!(t.fit(1 << 20, 0, FitPolicy::Wrap).is_err());
    assert!(t.fit(0, 1, FitPolicy::Wrap).is_err());
    // Scale never stretches a trace that fits.
    let before = t.clone();
    let s = t.fit(1 << 20, 1, FitPolicy::Scale).unwrap();
    assert_eq!(s.out_of_range, 0);
    assert_eq!(t.records, before.records);
}

#[test]
fn fit_error_names_the_input_line() {
    let text = "# comment\n0 0 0 8 1\n\n5 0 100 8 0\n";
    let mut trace = read(text, TraceFormat::Mqsim).unwrap();
    let err = trace.fit(8 * 512, 1, FitPolicy::Error).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("line 4: request at offset 51200 of 4096 bytes"),
        "{err}"
    );
}

/// A trace longer than `records_max` requests is refused at the line that would pass the bound,
/// saying what to do, rather than read until memory runs out (an endless pipe); a preflushed
/// write counts as two requests.
#[test]
fn a_trace_past_records_max_is_refused_at_that_line() {
    let text = "0 0 0 4096 1\n1 0 4096 4096 1\n2 0 8192 4096 0\n3 0 0 4096 1\n";
    let opts = |max| TraceOptions {
        records_max: Some(max),
        ..TraceOptions::default()
    };
    let t = read_trace(text.as_bytes(), TraceFormat::Replayer, &opts(4)).unwrap();
    assert_eq!(t.records.len(), 4);
    let e = read_trace(text.as_bytes(), TraceFormat::Replayer, &opts(3)).unwrap_err();
    assert_eq!(e.line(), Some(4), "{e}");
    let msg = e.to_string();
    assert!(
        msg.starts_with("line 4: ")
            && msg.contains("more than 3 requests")
            && msg.contains("head -n 3"),
        "{msg}"
    );
    let blk = "8,0 1 1 0.000000000 1 D FWS 8 + 8 [x]\n";
    let e = read_trace(blk.as_bytes(), TraceFormat::Blkparse, &opts(1)).unwrap_err();
    assert_eq!(e.line(), Some(1), "{e}");
}
