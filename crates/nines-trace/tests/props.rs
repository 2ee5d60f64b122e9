//! Property tests of the trace readers: every valid record round-trips through its text form, and
//! arbitrary input never panics and either parses or fails with a line-numbered one-line error.

use nines_core::op::Op;
use nines_trace::{
    Trace, TraceError, TraceFormat, TraceOptions, TraceRecord, TraceUnit, read_trace, write_trace,
};
use proptest::prelude::*;

fn format_strategy() -> impl Strategy<Value = TraceFormat> {
    prop::sample::select(TraceFormat::ALL.to_vec())
}

fn unit_strategy() -> impl Strategy<Value = TraceUnit> {
    prop_oneof![Just(TraceUnit::Bytes), Just(TraceUnit::Sectors)]
}

/// Whether the format counts offsets and sizes in 512-byte sectors.
fn in_sectors(format: TraceFormat, unit: TraceUnit) -> bool {
    match format {
        TraceFormat::Replayer => unit == TraceUnit::Sectors,
        TraceFormat::MsrCsv => false,
        _ => true,
    }
}

/// Records the format can express exactly, starting at time 0.
fn records_strategy(
    format: TraceFormat,
    unit: TraceUnit,
) -> impl Strategy<Value = Vec<TraceRecord>> {
    let sectors = in_sectors(format, unit);
    let tick_ns: u64 = if format == TraceFormat::MsrCsv {
        100
    } else {
        1
    };
    let one = (
        // Gap to the previous arrival, often 0 (equal times are allowed).
        prop_oneof![Just(0u64), 0u64..1_000_000_000_000],
        any::<u32>(),
        0u64..(1u64 << 45),
        1u64..(1u64 << 21),
        any::<bool>(),
    );
    prop::collection::vec(one, 1..40).prop_map(move |v| {
        let mut t_ns = 0u64;
        v.into_iter()
            .enumerate()
            .map(|(i, (gap, device, offset, len, read))| {
                if i > 0 {
                    t_ns += gap / tick_ns * tick_ns;
                }
                let (offset_bytes, len_bytes) = if sectors {
                    (offset * 512, len.div_ceil(512) * 512)
                } else {
                    (offset, len)
                };
                TraceRecord {
                    arrival_ns: t_ns,
                    device,
                    offset_bytes,
                    len_bytes,
                    op: if read { Op::Read } else { Op::Write },
                    fua: false,
                    flush: false,
                }
            })
            .collect()
    })
}

fn case_strategy() -> impl Strategy<Value = (TraceFormat, TraceUnit, Vec<TraceRecord>, Vec<u8>)> {
    (format_strategy(), unit_strategy()).prop_flat_map(|(format, unit)| {
        (
            Just(format),
            Just(unit),
            records_strategy(format, unit),
            // Per line: 0 plain, 1 CRLF ending, 2 a comment line before, 3 a blank line before.
            prop::collection::vec(0u8..4, 40),
        )
    })
}

fn opts(unit: TraceUnit) -> TraceOptions {
    TraceOptions {
        unit,
        ..TraceOptions::default()
    }
}

/// The invariants of any trace that reads successfully.
fn check_trace(trace: &Trace, lines_total: usize) {
    assert!(!trace.records.is_empty());
    assert_eq!(trace.lines.len(), trace.records.len());
    // Lines only go forward; one line gives two records only when it is a write with a preflush
    // (the flush, then the write, at the same time).
    for (i, w) in trace.lines.windows(2).enumerate() {
        assert!(w[0] <= w[1], "lines {w:?}");
        if w[0] == w[1] {
            let (a, b) = (&trace.records[i], &trace.records[i + 1]);
            assert!(
                a.flush && !b.flush && a.arrival_ns == b.arrival_ns,
                "{a:?} {b:?}"
            );
        }
    }
    assert!(
        trace
            .lines
            .iter()
            .all(|&l| l >= 1 && l as usize <= lines_total)
    );
    assert!(
        trace
            .records
            .windows(2)
            .all(|w| w[0].arrival_ns <= w[1].arrival_ns)
    );
    for r in &trace.records {
        // Only a flush is data-less, and a flush has neither offset nor length.
        if r.flush {
            assert_eq!((r.offset_bytes, r.len_bytes), (0, 0), "{r:?}");
        } else {
            assert!(r.len_bytes > 0, "{r:?}");
        }
        assert!(r.offset_bytes.checked_add(r.len_bytes).is_some());
        assert!(trace.devices.binary_search(&r.device).is_ok());
    }
    assert!(trace.devices.windows(2).all(|w| w[0] < w[1]));
}

/// The invariants of any error from reading: one line, and a line number in range when it is about
/// a line.
fn check_error(err: &TraceError, lines_total: usize) {
    let msg = err.to_string();
    assert!(
        !msg.contains('\n') && !msg.contains('\r'),
        "one line: {msg:?}"
    );
    match err {
        TraceError::Empty { .. } => {}
        _ => {
            let line = err
                .line()
                .unwrap_or_else(|| panic!("no line number: {msg}"));
            assert!(line >= 1 && line as usize <= lines_total.max(1), "{msg}");
            assert!(msg.starts_with(&format!("line {line}: ")), "{msg}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn valid_records_round_trip((format, unit, records, decor) in case_strategy()) {
        let mut text = Vec::new();
        write_trace(&mut text, &records, format, unit).unwrap();
        let text = String::from_utf8(text).unwrap();
        // Decorate: CRLF endings, comment and blank lines, which reading must skip while
        // keeping line numbers right.
        let mut decorated = String::new();
        let mut line_of_record = Vec::new();
        let mut line = 0u64;
        for (i, l) in text.lines().enumerate() {
            match decor[i] {
                1 => { decorated.push_str(l); decorated.push_str("\r\n"); }
                2 => { decorated.push_str("# comment\n"); line += 1; decorated.push_str(l); decorated.push('\n'); }
                3 => { decorated.push_str("   \n"); line += 1; decorated.push_str(l); decorated.push('\n'); }
                _ => { decorated.push_str(l); decorated.push('\n'); }
            }
            line += 1;
            line_of_record.push(line);
        }
        let trace = read_trace(decorated.as_bytes(), format, &opts(unit))
            .unwrap_or_else(|e| panic!("{format}/{unit}: {e}\n{decorated}"));
        prop_assert_eq!(&trace.records, &records);
        prop_assert_eq!(&trace.lines, &line_of_record);
        prop_assert_eq!(trace.format, format);
        check_trace(&trace, line as usize);
        let stats = trace.stats();
        prop_assert_eq!(stats.reads + stats.writes, records.len() as u64);
        prop_assert_eq!(stats.reads, records.iter().filter(|r| r.op == Op::Read).count() as u64);
        prop_assert_eq!(stats.duration_ns, records.last().unwrap().arrival_ns);
    }

    /// `odd_sizes` counts exactly the requests that are not whole 512-byte sectors and names
    /// the first.
    #[test]
    fn odd_sizes_finds_exactly_the_partial_sectors(
        lens in prop::collection::vec(prop_oneof![1u64..2048, (1u64..64).prop_map(|s| s * 512)], 1..40),
    ) {
        let records: Vec<TraceRecord> = lens
            .iter()
            .enumerate()
            .map(|(i, &len_bytes)| TraceRecord {
                arrival_ns: i as u64,
                device: 0,
                offset_bytes: 0,
                len_bytes,
                op: Op::Read,
                fua: false,
                flush: false,
            })
            .collect();
        let trace = Trace::from_records(records, TraceFormat::Replayer);
        let odd: Vec<usize> = (0..lens.len()).filter(|&i| lens[i] % 512 != 0).collect();
        match trace.odd_sizes() {
            None => prop_assert!(odd.is_empty()),
            Some(o) => {
                prop_assert_eq!(o.requests, odd.len() as u64);
                prop_assert_eq!(o.first_index, odd[0]);
                prop_assert_eq!(o.first_len_bytes, lens[odd[0]]);
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        format in format_strategy(),
        unit in unit_strategy(),
        lines in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..80), 0..8),
    ) {
        let text = lines.join(&b'\n');
        let total = text.split(|&b| b == b'\n').count();
        match read_trace(&text[..], format, &opts(unit)) {
            Ok(trace) => check_trace(&trace, total),
            Err(e) => check_error(&e, total),
        }
    }

    /// Lines built from the formats' own characters, which get much further into the parsers than
    /// random bytes do.
    #[test]
    fn near_valid_lines_never_panic(
        format in format_strategy(),
        unit in unit_strategy(),
        lines in prop::collection::vec(
            prop_oneof![
                "[0-9 ]{0,40}",
                "[0-9.]{1,8} [0-9]{1,3} [0-9]{1,12} [0-9]{1,6} [01x]{1,2}",
                "[0-9]{1,20},[a-z]{0,3},[0-9]{1,2},(Read|Write|read|x),[0-9]{1,12},[0-9]{1,6},[0-9]{1,5}",
                " *[0-9]{1,4},[0-9]{1,7} +[0-9]{1,2} +[0-9]{1,8} +[0-9]{1,3}\\.[0-9]{9} +[0-9]{1,5} +[DQCm] +[FRWSMDN]{1,3}( [0-9]{1,10} \\+ [0-9]{1,5})?( \\[[a-z]+\\])?",
                "(CPU[0-9] \\(sda\\):|Total \\(sda\\):| Reads Queued: 1)",
                "[ -~]{0,60}",
            ],
            0..10,
        ),
    ) {
        let text = lines.join("\n");
        let total = text.split('\n').count();
        match read_trace(text.as_bytes(), format, &opts(unit)) {
            Ok(trace) => check_trace(&trace, total),
            Err(e) => check_error(&e, total),
        }
    }
}

/// What the device is asked for by a blkparse D event `D <rwbs> 8 + 8`, by an independent
/// reading of blkparse's grammar (blkparse_fmt.c `fill_rwbs`, plus the kernel tracepoint's `F`
/// and `DE`): every valid field is generated as preflush? + operation + flags-in-order, and its
/// meaning follows from those parts. None: not a valid RWBS field.
/// Each request: (is a flush, op, fua).
fn rwbs_reference(rwbs: &str) -> Option<Vec<(bool, Op, bool)>> {
    let mut meaning: Option<Vec<(bool, Op, bool)>> = None;
    for pre in ["", "F"] {
        for op in ["R", "W", "D", "DE", "N", "F"] {
            for mask in 0u8..16 {
                let mut s = format!("{pre}{op}");
                for (bit, c) in ["F", "A", "S", "M"].iter().enumerate() {
                    if mask & (1 << bit) != 0 {
                        s.push_str(c);
                    }
                }
                if s != rwbs {
                    continue;
                }
                let fua = mask & 1 != 0;
                let flush = (true, Op::Write, false);
                let m = match op {
                    "R" | "W" => {
                        let dir = if op == "R" { Op::Read } else { Op::Write };
                        let mut v = Vec::new();
                        if pre == "F" {
                            v.push(flush);
                        }
                        v.push((false, dir, fua));
                        v
                    }
                    "F" => vec![flush],
                    _ if pre == "F" => vec![flush],
                    _ => vec![],
                };
                // A string with two derivations (`FF`: preflush + flush, or flush + FUA) must
                // mean the same either way.
                if let Some(prev) = &meaning {
                    assert_eq!(prev, &m, "{rwbs} is ambiguous");
                }
                meaning = Some(m);
            }
        }
    }
    meaning
}

fn rwbs_strategy() -> impl Strategy<Value = String> {
    let letter = prop::sample::select(vec!['F', 'R', 'W', 'D', 'E', 'N', 'A', 'S', 'M', 'B', 'x']);
    prop_oneof![
        // Mostly valid fields, mutated by a letter inserted, removed or replaced.
        (
            prop::sample::select(vec![
                "R", "RS", "RM", "RA", "RF", "W", "WS", "WFS", "WFSM", "FWS", "FWFS", "FN", "F",
                "FF", "D", "DS", "DE", "N", "FR", "FD",
            ]),
            0usize..5,
            0usize..4,
            letter.clone(),
        )
            .prop_map(|(base, at, how, c)| {
                let mut s: Vec<char> = base.chars().collect();
                let at = at.min(s.len());
                match how {
                    0 => {}
                    1 => s.insert(at, c),
                    2 if at < s.len() => {
                        s.remove(at);
                    }
                    _ if at < s.len() => s[at] = c,
                    _ => s.push(c),
                }
                s.into_iter().collect::<String>()
            }),
        prop::collection::vec(letter, 1..6).prop_map(|v| v.into_iter().collect::<String>()),
    ]
    .prop_filter("a field", |s| !s.is_empty())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// A D event's RWBS field is accepted exactly when the reference grammar accepts it, and
    /// then gives exactly the reference's requests (a flush before a preflushed request, FUA
    /// kept, discards and `N` dropped); a refusal names line 2 and the rwbs field. What was read
    /// writes back as blkparse and reads back the same.
    #[test]
    fn blkparse_rwbs_is_read_as_the_grammar_says(rwbs in rwbs_strategy()) {
        let text = format!(
            "  8,0 0 1 0.5 5 D R 0 + 8 [x]\n  8,0 0 2 0.75 5 D {rwbs} 8 + 8 [x]\n"
        );
        let got = read_trace(text.as_bytes(), TraceFormat::Blkparse, &TraceOptions::default());
        match (rwbs_reference(&rwbs), got) {
            (None, Err(e)) => {
                let msg = e.to_string();
                prop_assert!(msg.starts_with("line 2: field rwbs: "), "{rwbs}: {msg}");
                prop_assert!(!msg.contains('\n'));
            }
            (None, Ok(t)) => prop_assert!(false, "{rwbs} accepted: {:?}", t.records),
            (Some(_), Err(e)) => prop_assert!(false, "{rwbs} refused: {e}"),
            (Some(want), Ok(t)) => {
                let got: Vec<(bool, Op, bool)> =
                    t.records[1..].iter().map(|r| (r.flush, r.op, r.fua)).collect();
                prop_assert_eq!(&got, &want, "{}", rwbs);
                for r in &t.records[1..] {
                    prop_assert_eq!(r.arrival_ns, 750_000_000);
                    let (off, len) = if r.flush { (0, 0) } else { (4096, 4096) };
                    prop_assert_eq!((r.offset_bytes, r.len_bytes), (off, len));
                }
                prop_assert_eq!(t.lines.len(), t.records.len());
                prop_assert!(t.lines[1..].iter().all(|&l| l == 2));
                let mut out = Vec::new();
                write_trace(&mut out, &t.records, TraceFormat::Blkparse, TraceUnit::Bytes)
                    .unwrap();
                let back = read_trace(out.as_slice(), TraceFormat::Blkparse, &TraceOptions::default())
                    .unwrap();
                prop_assert_eq!(&back.records, &t.records);
                // Flushes and FUA have no column in the other formats: refused, not dropped.
                let flagged = t.records.iter().any(|r| r.flush || r.fua);
                let as_mqsim = write_trace(Vec::new(), &t.records, TraceFormat::Mqsim, TraceUnit::Bytes);
                prop_assert_eq!(as_mqsim.is_err(), flagged);
            }
        }
    }
}
