//! The real traces of the repository's traces/ (or $NINES_TRACES_DIR, relative to the repository's
//! root): every file parses, with exactly the counts of its README, and the
//! readers agree with an independent count of the raw columns.

use std::fs;
use std::io::BufReader;
use std::path::PathBuf;

use nines_core::op::Op;
use nines_trace::{
    FitPolicy, Trace, TraceFormat, TraceOptions, TraceUnit, read_trace, write_trace,
};

fn traces_dir() -> PathBuf {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    nines_trace::shared_traces_dir(&repo).unwrap_or_else(|e| panic!("{e}"))
}

/// Copies a trace into a fresh temporary directory (the README asks tests not to touch the
/// originals) and returns the directory and the copy's path.
fn copy_trace(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let dst = dir.path().join(name);
    fs::copy(traces_dir().join(name), &dst).expect("copy trace");
    (dir, dst)
}

fn read(name: &str, format: TraceFormat, opts: &TraceOptions) -> Trace {
    let (_dir, path) = copy_trace(name);
    let file = fs::File::open(&path).expect("open copy");
    read_trace(BufReader::new(file), format, opts).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// An independent count straight from the text: non-empty lines, and the last column's 1s and 0s.
fn raw_counts(name: &str) -> (u64, u64, u64) {
    let text = fs::read_to_string(traces_dir().join(name)).expect("read trace");
    let mut lines = 0;
    let mut ones = 0;
    let mut zeros = 0;
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        lines += 1;
        match l.split_whitespace().last() {
            Some("1") => ones += 1,
            Some("0") => zeros += 1,
            other => panic!("{name}: unexpected last column {other:?}"),
        }
    }
    (lines, ones, zeros)
}

struct Expect {
    name: &'static str,
    format: TraceFormat,
    records: u64,
    reads: u64,
    writes: u64,
}

// Counts from traces/README.md. One disagreement: the README gives mqsim-wsrch-small
// 24,782 lines, but its 24,779 reads + 4 writes make 24,783 requests, and the file does hold
// 24,783 lines (`wc -l` says 24,782 because the last line has no newline). The reads and writes
// are checked exactly; the request count is the true 24,783.
const EXPECT: [Expect; 5] = [
    Expect {
        name: "mqsim-tpcc-small.trace",
        format: TraceFormat::Mqsim,
        records: 6_999,
        reads: 4_381,
        writes: 2_618,
    },
    Expect {
        name: "mqsim-wsrch-small.trace",
        format: TraceFormat::Mqsim,
        records: 24_783,
        reads: 24_779,
        writes: 4,
    },
    Expect {
        name: "msr-cut-most_thpt_rand_iops.1006.trace",
        format: TraceFormat::Replayer,
        records: 10_000,
        reads: 8_316,
        writes: 1_684,
    },
    Expect {
        name: "msr-cut-rw_20_80.105.trace",
        format: TraceFormat::Replayer,
        records: 10_000,
        reads: 2_020,
        writes: 7_980,
    },
    Expect {
        name: "msr-cut-rw_40_60.1370.trace",
        format: TraceFormat::Replayer,
        records: 10_000,
        reads: 4_054,
        writes: 5_946,
    },
];

#[test]
fn every_shared_trace_parses_with_the_readme_counts() {
    for e in &EXPECT {
        let trace = read(e.name, e.format, &TraceOptions::default());
        let stats = trace.stats();
        assert_eq!(trace.records.len() as u64, e.records, "{}", e.name);
        assert_eq!(stats.reads, e.reads, "{} reads", e.name);
        assert_eq!(stats.writes, e.writes, "{} writes", e.name);
        // The same numbers counted from the raw text, independently of the reader.
        assert_eq!(
            raw_counts(e.name),
            (e.records, e.reads, e.writes),
            "{}",
            e.name
        );
        assert_eq!(trace.lines.len(), trace.records.len());
        assert!(
            trace
                .records
                .windows(2)
                .all(|w| w[0].arrival_ns <= w[1].arrival_ns),
            "{} in order",
            e.name
        );
        assert!(trace.records.iter().all(|r| r.len_bytes > 0));
    }
}

#[test]
fn wsrch_holds_one_more_line_than_the_readme_says() {
    let text = fs::read(traces_dir().join("mqsim-wsrch-small.trace")).unwrap();
    let newlines = text.iter().filter(|&&b| b == b'\n').count();
    assert_eq!(newlines, 24_782, "what `wc -l` reports");
    assert_ne!(text.last(), Some(&b'\n'), "the last line has no newline");
    let trace = read(
        "mqsim-wsrch-small.trace",
        TraceFormat::Mqsim,
        &TraceOptions::default(),
    );
    let last = trace.records.last().unwrap();
    // `60066625000 1 34371424 64 1`, the unterminated last line.
    assert_eq!(
        (
            last.arrival_ns,
            last.device,
            last.offset_bytes,
            last.len_bytes,
            last.op
        ),
        (60_066_625_000, 1, 34_371_424 * 512, 64 * 512, Op::Read)
    );
    assert_eq!(*trace.lines.last().unwrap(), 24_783);
}

#[test]
fn mqsim_fields_are_converted_exactly() {
    let trace = read(
        "mqsim-tpcc-small.trace",
        TraceFormat::Mqsim,
        &TraceOptions::default(),
    );
    // First line: `938513000 4 264719034 16 0`.
    let r = trace.records[0];
    assert_eq!(r.arrival_ns, 938_513_000);
    assert_eq!(r.device, 4);
    assert_eq!(r.offset_bytes, 264_719_034 * 512);
    assert_eq!(r.len_bytes, 16 * 512);
    assert_eq!(r.op, Op::Write);
    assert_eq!(trace.devices, (0..16).collect::<Vec<u32>>());
    let stats = trace.stats();
    // Last line `1075002000 7 160057354 16 0`.
    assert_eq!(stats.duration_ns, 1_075_002_000 - 938_513_000);
    let text = fs::read_to_string(traces_dir().join("mqsim-tpcc-small.trace")).unwrap();
    let sectors: u64 = text
        .lines()
        .map(|l| l.split_whitespace().nth(3).unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(stats.bytes, sectors * 512);
}

#[test]
fn replayer_times_are_exact_milliseconds() {
    let trace = read(
        "msr-cut-rw_20_80.105.trace",
        TraceFormat::Replayer,
        &TraceOptions::default(),
    );
    // Lines 2 and the last: `223.412 0 3159347200 36864 0`, `242904.693 0 1023476224 7680 0`.
    let r = trace.records[1];
    assert_eq!(
        (r.arrival_ns, r.device, r.offset_bytes, r.len_bytes, r.op),
        (223_412_000, 0, 3_159_347_200, 36_864, Op::Write)
    );
    let last = trace.records.last().unwrap();
    assert_eq!(
        (last.arrival_ns, last.offset_bytes, last.len_bytes),
        (242_904_693_000, 1_023_476_224, 7_680)
    );
    assert_eq!(trace.devices, vec![0]);

    // The sector unit multiplies offsets and sizes by 512 and changes nothing else.
    let sectors = read(
        "msr-cut-rw_20_80.105.trace",
        TraceFormat::Replayer,
        &TraceOptions {
            unit: TraceUnit::Sectors,
            ..TraceOptions::default()
        },
    );
    for (a, b) in trace.records.iter().zip(&sectors.records) {
        assert_eq!(b.offset_bytes, a.offset_bytes * 512);
        assert_eq!(b.len_bytes, a.len_bytes * 512);
        assert_eq!((b.arrival_ns, b.op), (a.arrival_ns, a.op));
    }
}

#[test]
fn time_scale_multiplies_inter_arrival_times() {
    let name = "msr-cut-rw_40_60.1370.trace";
    let base = read(name, TraceFormat::Replayer, &TraceOptions::default());
    let half = read(
        name,
        TraceFormat::Replayer,
        &TraceOptions {
            time_scale: 0.5,
            ..TraceOptions::default()
        },
    );
    let first = base.records[0].arrival_ns;
    for (a, b) in base.records.iter().zip(&half.records) {
        // Replayer times are whole microseconds, so half of each gap is exact.
        assert_eq!(b.arrival_ns - first, (a.arrival_ns - first) / 2);
    }
    assert_eq!(half.stats().duration_ns * 2, base.stats().duration_ns);
}

#[test]
fn lines_max_reads_a_prefix() {
    let trace = read(
        "mqsim-tpcc-small.trace",
        TraceFormat::Mqsim,
        &TraceOptions {
            lines_max: Some(100),
            ..TraceOptions::default()
        },
    );
    let full = read(
        "mqsim-tpcc-small.trace",
        TraceFormat::Mqsim,
        &TraceOptions::default(),
    );
    assert_eq!(trace.records, full.records[..100]);
}

#[test]
fn replayer_traces_exceed_a_small_device_and_fit_by_policy() {
    let name = "msr-cut-rw_20_80.105.trace";
    let trace = read(name, TraceFormat::Replayer, &TraceOptions::default());
    let size = 4u64 << 30; // 4 GiB; the window reaches 14.9 GB
    let max_end = trace.records.iter().map(|r| r.end_bytes()).max().unwrap();
    let expect_out = trace
        .records
        .iter()
        .filter(|r| r.end_bytes() > size)
        .count() as u64;
    assert!(expect_out > 0);
    let first_out = trace
        .records
        .iter()
        .position(|r| r.end_bytes() > size)
        .unwrap();

    let mut refused = trace.clone();
    let err = refused.fit(size, 1, FitPolicy::Error).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("line {}:", first_out + 1)),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("{expect_out} requests are out of range")),
        "{msg}"
    );
    assert_eq!(refused, trace, "an error changes nothing");

    for policy in [FitPolicy::Wrap, FitPolicy::Scale] {
        let mut fitted = trace.clone();
        let summary = fitted.fit(size, 1, policy).unwrap();
        assert_eq!(summary.out_of_range, expect_out);
        assert_eq!(summary.max_end_bytes, max_end);
        assert!(fitted.records.iter().all(|r| r.end_bytes() <= size));
        for (a, b) in trace.records.iter().zip(&fitted.records) {
            assert_eq!(
                (a.arrival_ns, a.len_bytes, a.op),
                (b.arrival_ns, b.len_bytes, b.op)
            );
            // 4 KiB-aligned offsets stay aligned.
            if a.offset_bytes % 4096 == 0 {
                assert_eq!(b.offset_bytes % 4096, 0);
            }
            if policy == FitPolicy::Wrap && a.end_bytes() <= size {
                assert_eq!(a.offset_bytes, b.offset_bytes, "in-range offsets stay");
            }
        }
    }
}

#[test]
fn mqsim_devices_map_modulo_the_simulated_count() {
    let mut trace = read(
        "mqsim-tpcc-small.trace",
        TraceFormat::Mqsim,
        &TraceOptions::default(),
    );
    let original = trace.clone();
    let summary = trace.fit(u64::MAX / 2, 5, FitPolicy::Error).unwrap();
    assert_eq!(summary.out_of_range, 0);
    assert_eq!(trace.devices, vec![0, 1, 2, 3, 4]);
    for (a, b) in original.records.iter().zip(&trace.records) {
        assert_eq!(b.device, a.device % 5, "ids 0..16 map as id mod 5");
        assert_eq!(b.offset_bytes, a.offset_bytes);
    }
}

#[test]
fn real_traces_round_trip_through_every_format() {
    let trace = read(
        "mqsim-tpcc-small.trace",
        TraceFormat::Mqsim,
        &TraceOptions::default(),
    );
    for format in TraceFormat::ALL {
        let mut text = Vec::new();
        write_trace(&mut text, &trace.records, format, TraceUnit::Sectors).unwrap();
        let back = read_trace(
            &text[..],
            format,
            &TraceOptions {
                unit: TraceUnit::Sectors,
                ..TraceOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{format}: {e}"));
        let shift = if format == TraceFormat::MsrCsv {
            trace.records[0].arrival_ns
        } else {
            0
        };
        assert_eq!(back.records.len(), trace.records.len(), "{format}");
        for (a, b) in trace.records.iter().zip(&back.records) {
            assert_eq!(
                (
                    a.arrival_ns - shift,
                    a.device,
                    a.offset_bytes,
                    a.len_bytes,
                    a.op
                ),
                (b.arrival_ns, b.device, b.offset_bytes, b.len_bytes, b.op),
                "{format}"
            );
        }
    }
}

#[test]
fn shared_traces_have_whole_sector_sizes_and_a_sector_trace_read_as_bytes_is_caught() {
    for e in &EXPECT {
        let trace = read(e.name, e.format, &TraceOptions::default());
        assert_eq!(trace.odd_sizes(), None, "{}", e.name);
    }
    // The replayer traces count in bytes; written back in sectors and read as bytes again (the
    // mistake the check is for), every size is a sector count: 4 KiB becomes 8 "bytes".
    let trace = read(
        "msr-cut-rw_20_80.105.trace",
        TraceFormat::Replayer,
        &TraceOptions::default(),
    );
    let mut sectors = Vec::new();
    write_trace(
        &mut sectors,
        &trace.records,
        TraceFormat::Replayer,
        TraceUnit::Sectors,
    )
    .unwrap();
    let wrong = read_trace(
        &sectors[..],
        TraceFormat::Replayer,
        &TraceOptions::default(),
    )
    .unwrap();
    let odd = wrong.odd_sizes().expect("sector counts read as bytes");
    let expect = trace
        .records
        .iter()
        .filter(|r| r.len_bytes / 512 < 512 || !(r.len_bytes / 512).is_multiple_of(512))
        .count() as u64;
    assert_eq!(odd.requests, expect);
    assert_eq!(
        odd.first_len_bytes,
        trace.records[odd.first_index].len_bytes / 512
    );
    assert_eq!(
        wrong.location(odd.first_index),
        format!("line {}", odd.first_index + 1)
    );
}
