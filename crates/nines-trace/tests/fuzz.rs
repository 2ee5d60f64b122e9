//! Fuzz-style property tests: real trace lines from the repository's traces/ with random mutations (bytes
//! deleted, inserted, replaced, fields swapped or dropped, lines cut). Every result is either a
//! well-formed trace or a one-line error naming a line in range; for single mqsim lines an
//! independent reference parser decides what must be accepted, and the values must agree.

use std::path::PathBuf;
use std::sync::OnceLock;

use nines_core::op::Op;
use nines_trace::{TraceError, TraceFormat, TraceOptions, TraceUnit, read_trace};
use proptest::prelude::*;

fn traces_dir() -> PathBuf {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    nines_trace::shared_traces_dir(&repo).unwrap_or_else(|e| panic!("{e}"))
}

/// (format, lines) of the real traces, read once. The files are only read, never written.
fn real_lines() -> &'static [(TraceFormat, Vec<String>)] {
    static LINES: OnceLock<Vec<(TraceFormat, Vec<String>)>> = OnceLock::new();
    LINES.get_or_init(|| {
        [
            ("mqsim-tpcc-small.trace", TraceFormat::Mqsim),
            ("mqsim-wsrch-small.trace", TraceFormat::Mqsim),
            (
                "msr-cut-most_thpt_rand_iops.1006.trace",
                TraceFormat::Replayer,
            ),
            ("msr-cut-rw_20_80.105.trace", TraceFormat::Replayer),
            ("msr-cut-rw_40_60.1370.trace", TraceFormat::Replayer),
        ]
        .into_iter()
        .map(|(name, format)| {
            let text = std::fs::read_to_string(traces_dir().join(name)).expect("read trace");
            (format, text.lines().map(str::to_string).collect())
        })
        .collect()
    })
}

#[derive(Clone, Debug)]
enum Mutation {
    Delete(usize),
    Insert(usize, u8),
    Replace(usize, u8),
    SwapFields(usize, usize),
    DropField(usize),
    Truncate(usize),
}

fn mutation_strategy() -> impl Strategy<Value = Mutation> {
    // Bytes that matter to the parsers, plus some that never should appear.
    let byte = prop::sample::select(b"0123456789.,+- \txXaAfF#\r\x00\xff\xc3R W D".to_vec());
    prop_oneof![
        any::<usize>().prop_map(Mutation::Delete),
        (any::<usize>(), byte.clone()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<usize>(), byte).prop_map(|(i, b)| Mutation::Replace(i, b)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapFields(a, b)),
        any::<usize>().prop_map(Mutation::DropField),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn split_fields(b: &[u8]) -> Vec<Vec<u8>> {
    b.split(|&c| c == b' ').map(<[u8]>::to_vec).collect()
}

fn mutate(line: &str, mutations: &[Mutation]) -> Vec<u8> {
    let mut b = line.as_bytes().to_vec();
    for m in mutations {
        match *m {
            Mutation::Delete(i) if !b.is_empty() => {
                b.remove(i % b.len());
            }
            Mutation::Insert(i, c) => b.insert(i % (b.len() + 1), c),
            Mutation::Replace(i, c) if !b.is_empty() => {
                let n = b.len();
                b[i % n] = c;
            }
            Mutation::SwapFields(x, y) => {
                let mut fields = split_fields(&b);
                let n = fields.len();
                fields.swap(x % n, y % n);
                b = fields.join(&b' ');
            }
            Mutation::DropField(x) => {
                let mut fields = split_fields(&b);
                let n = fields.len();
                fields.remove(x % n);
                b = fields.join(&b' ');
            }
            Mutation::Truncate(i) => b.truncate(i % (b.len() + 1)),
            _ => {}
        }
    }
    b
}

/// An independent reading of one mqsim line: Some((ns, device, offset, len, op)) when valid.
fn mqsim_reference(line: &[u8]) -> Option<(u64, u32, u64, u64, Op)> {
    let text = std::str::from_utf8(line).ok()?;
    let text = text.strip_suffix('\r').unwrap_or(text);
    let f: Vec<&str> = text.split_ascii_whitespace().collect();
    if f.len() != 5 {
        return None;
    }
    let num = |s: &str| -> Option<u64> {
        if s.bytes().all(|c| c.is_ascii_digit()) {
            s.parse().ok()
        } else {
            None
        }
    };
    let ns = num(f[0])?;
    let device = u32::try_from(num(f[1])?).ok()?;
    let offset = num(f[2])?.checked_mul(512)?;
    let len = num(f[3])?.checked_mul(512)?;
    let op = match f[4] {
        "1" => Op::Read,
        "0" => Op::Write,
        _ => return None,
    };
    if len == 0 || offset.checked_add(len).is_none() {
        return None;
    }
    Some((ns, device, offset, len, op))
}

fn check(result: Result<nines_trace::Trace, TraceError>, lines_total: usize) {
    match result {
        Ok(trace) => {
            assert_eq!(trace.lines.len(), trace.records.len());
            assert!(
                trace
                    .records
                    .windows(2)
                    .all(|w| w[0].arrival_ns <= w[1].arrival_ns)
            );
            assert!(
                trace
                    .records
                    .iter()
                    .all(|r| r.len_bytes > 0 || (r.flush && r.offset_bytes == 0))
            );
            assert!(trace.lines.iter().all(|&l| l as usize <= lines_total));
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n') && !msg.contains('\r'), "{msg:?}");
            if !matches!(e, TraceError::Empty { .. }) {
                let line = e.line().expect("a line number");
                assert!(line >= 1 && line as usize <= lines_total, "{msg}");
                assert!(msg.starts_with(&format!("line {line}: ")), "{msg}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// A window of real lines, some mutated, read in every format and unit.
    #[test]
    fn mutated_real_windows_never_panic(
        file in 0usize..5,
        start in any::<usize>(),
        edits in prop::collection::vec(
            (0usize..12, prop::collection::vec(mutation_strategy(), 1..4)),
            1..4,
        ),
    ) {
        let (_, lines) = &real_lines()[file];
        let start = start % lines.len();
        let window: Vec<&String> = lines.iter().cycle().skip(start).take(12).collect();
        let mut text: Vec<Vec<u8>> = window.iter().map(|l| l.as_bytes().to_vec()).collect();
        for (i, muts) in &edits {
            text[*i] = mutate(window[*i], muts);
        }
        let joined = text.join(&b'\n');
        let total = joined.split(|&c| c == b'\n').count();
        for format in TraceFormat::ALL {
            for unit in [TraceUnit::Bytes, TraceUnit::Sectors] {
                let opts = TraceOptions { unit, ..TraceOptions::default() };
                check(read_trace(&joined[..], format, &opts), total);
            }
        }
    }

    /// One mutated real mqsim line: accepted exactly when the reference accepts it, with the same
    /// values.
    #[test]
    fn mutated_mqsim_lines_agree_with_a_reference(
        file in 0usize..2,
        index in any::<usize>(),
        muts in prop::collection::vec(mutation_strategy(), 0..3),
    ) {
        let (format, lines) = &real_lines()[file];
        prop_assert_eq!(*format, TraceFormat::Mqsim);
        let line = mutate(&lines[index % lines.len()], &muts);
        let got = read_trace(&line[..], TraceFormat::Mqsim, &TraceOptions::default());
        let comment_or_blank = std::str::from_utf8(&line)
            .map(|t| t.trim().is_empty() || t.trim().starts_with('#'))
            .unwrap_or(false);
        match (mqsim_reference(&line), got) {
            (Some(want), Ok(trace)) => {
                prop_assert_eq!(trace.records.len(), 1);
                let r = trace.records[0];
                prop_assert_eq!((r.arrival_ns, r.device, r.offset_bytes, r.len_bytes, r.op), want);
            }
            (None, Err(e)) => {
                if comment_or_blank {
                    prop_assert!(matches!(e, TraceError::Empty { .. }), "{}", e);
                } else {
                    prop_assert_eq!(e.line(), Some(1), "{}", e);
                }
            }
            (want, got) => prop_assert!(
                false,
                "reference {:?} but reader {:?} for {:?}",
                want,
                got.map(|t| t.records),
                String::from_utf8_lossy(&line)
            ),
        }
    }
}
