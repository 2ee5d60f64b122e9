//! Mutation fuzzing of the parsers of user input that the trace/job-file/lat-log/units suites do
//! not cover (issue 15): device TOML, run JSON, HDR interval logs, placement plans and tune
//! states. Each starts from a real input made by nines itself (every preset's TOML, a simulated
//! run's report and `--hdr-log`, the plan and state of the AFA fixture host), mutated by byte
//! flips, truncation, deleted/duplicated/inserted ranges and numbers replaced by extreme values.
//! Property: the parser (and what consumes its result: validation, the terminal table) never
//! panics, and bad input is an error in words; on the command line nothing is written.
//! `NINES_FUZZ_CASES` sets the cases per parser (default 256; the CLI ones take a sixteenth).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

mod common;

fn cases() -> u32 {
    std::env::var("NINES_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip { at: usize, bit: u8 },
    Truncate { at: usize },
    Delete { at: usize, len: usize },
    Duplicate { at: usize, len: usize, to: usize },
    Insert { at: usize, bytes: Vec<u8> },
    Number { nth: usize, with: &'static str },
}

/// Values that broke parsers before: overflow, negative, not-a-number, out of f64 range, 2^32.
const EXTREMES: [&str; 11] = [
    "0",
    "-1",
    "-0",
    "1.5",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999",
    "1e309",
    "NaN",
    "inf",
];

fn mutation() -> impl Strategy<Value = Mutation> {
    // Positions are fractions of the input's length in parts per million, so one strategy fits
    // every input.
    let pos = 0usize..1_000_000;
    prop_oneof![
        (pos.clone(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        pos.clone().prop_map(|at| Mutation::Truncate { at }),
        (pos.clone(), 1usize..64).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (pos.clone(), 1usize..64, pos.clone()).prop_map(|(at, len, to)| Mutation::Duplicate {
            at,
            len,
            to
        }),
        (
            pos.clone(),
            prop::collection::vec(
                prop_oneof![
                    any::<u8>(),
                    Just(b'"'),
                    Just(b'{'),
                    Just(b'['),
                    Just(b'='),
                    Just(b'\n'),
                    Just(b','),
                ],
                1..8
            )
        )
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (0usize..400, prop::sample::select(EXTREMES.to_vec()))
            .prop_map(|(nth, with)| Mutation::Number { nth, with }),
    ]
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 1..4)
}

fn apply(input: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut b = input.to_vec();
    let at = |ppm: usize, len: usize| (ppm * len.max(1)) / 1_000_000;
    for m in muts {
        let n = b.len();
        match m {
            Mutation::Flip { at: p, bit } => {
                if n > 0 {
                    let i = at(*p, n).min(n - 1);
                    b[i] ^= 1 << bit;
                }
            }
            Mutation::Truncate { at: p } => b.truncate(at(*p, n)),
            Mutation::Delete { at: p, len } => {
                let i = at(*p, n);
                let j = (i + len).min(n);
                b.drain(i..j);
            }
            Mutation::Duplicate { at: p, len, to } => {
                let i = at(*p, n);
                let j = (i + len).min(n);
                let piece = b[i..j].to_vec();
                let k = at(*to, n).min(b.len());
                b.splice(k..k, piece);
            }
            Mutation::Insert { at: p, bytes } => {
                let i = at(*p, n);
                b.splice(i..i, bytes.iter().copied());
            }
            Mutation::Number { nth, with } => {
                // The nth run of ASCII digits (modulo how many there are) becomes `with`.
                let mut runs = Vec::new();
                let mut i = 0;
                while i < n {
                    if b[i].is_ascii_digit() {
                        let s = i;
                        while i < n && b[i].is_ascii_digit() {
                            i += 1;
                        }
                        runs.push((s, i));
                    } else {
                        i += 1;
                    }
                }
                if !runs.is_empty() {
                    let (s, e) = runs[nth % runs.len()];
                    b.splice(s..e, with.bytes());
                }
            }
        }
    }
    b
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// Runs `check` on `cases` mutations of each input; a panic in it fails the test with the input.
fn fuzz(name: &str, inputs: &[Vec<u8>], cases: u32, check: impl Fn(&[u8])) {
    assert!(!inputs.is_empty(), "{name}: no seed inputs");
    for (k, input) in inputs.iter().enumerate() {
        // The unmutated input parses (or the seed is wrong, and the fuzzing proves nothing).
        check(input);
        let per = (cases / inputs.len() as u32).max(8);
        runner(per)
            .run(&mutations(), |muts| {
                let bad = apply(input, &muts);
                check(&bad);
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{name} seed {k}: {e}"));
    }
}

// ---- seed inputs made by nines itself ----

struct Seeds {
    dir: tempfile::TempDir,
    report_json: Vec<u8>,
    hdr_log: Vec<u8>,
    plan_json: Vec<u8>,
    state_json: Vec<u8>,
}

fn seeds() -> &'static Seeds {
    static S: OnceLock<Seeds> = OnceLock::new();
    S.get_or_init(|| {
        let dir = common::disk_dir();
        let d = dir.path();
        let json = d.join("run.json");
        let hlog = d.join("run.hlog");
        common::ok(
            common::nines(
                &[
                    "sim",
                    "--quiet",
                    "--devices",
                    "2",
                    "--rw",
                    "randrw",
                    "--mix",
                    "70",
                    "--runtime",
                    "300ms",
                    "--hdr-interval",
                    "50ms",
                    "--json",
                    "run.json",
                    "--hdr-log",
                    "run.hlog",
                ],
                d,
            ),
            "seed sim run",
        );
        let root = d.join("root");
        std::fs::create_dir(&root).unwrap();
        nines_host::testbed::write_afa_host(
            &root,
            nines_host::testbed::AfaOptions { tuned: false },
        )
        .unwrap();
        let host = nines_host::host::Host::read(&nines_host::fs::HostFs::new(&root));
        let plan = nines_host::plan::Plan::build(&host, None, None, &[]).unwrap();
        let state_path = d.join("state.json");
        nines_host::apply::apply(
            &root,
            &plan,
            &state_path,
            &nines_host::apply::ApplyOptions::default(),
        )
        .unwrap();
        Seeds {
            report_json: std::fs::read(&json).unwrap(),
            hdr_log: std::fs::read(&hlog).unwrap(),
            plan_json: plan.to_json().into_bytes(),
            state_json: std::fs::read(&state_path).unwrap(),
            dir,
        }
    })
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn preset_tomls() -> Vec<Vec<u8>> {
    nines_flash::preset_names()
        .into_iter()
        .map(|n| {
            nines_flash::DeviceConfig::preset(n)
                .unwrap()
                .to_toml()
                .unwrap()
                .into_bytes()
        })
        .collect()
}

#[test]
fn device_toml_mutations_are_errors_never_panics() {
    fuzz("device TOML", &preset_tomls(), cases() * 4, |b| {
        if let Ok(d) = nines_flash::DeviceConfig::from_toml(&text(b), "fuzz.toml") {
            // What every verb does next with a description.
            if d.validate().is_ok() {
                let _ = d.to_toml();
            }
        } else {
            let e = nines_flash::DeviceConfig::from_toml(&text(b), "fuzz.toml")
                .unwrap_err()
                .to_string();
            assert!(!e.is_empty() && !e.contains("Error {"), "{e}");
        }
    });
}

#[test]
fn run_json_mutations_are_errors_never_panics() {
    let s = seeds();
    fuzz(
        "run JSON",
        std::slice::from_ref(&s.report_json),
        cases(),
        |b| match nines_core::report::Report::from_json(&text(b)) {
            // What `report`, `compare` and `merge` do first with a run.
            Ok(r) => {
                let _ = nines_report::table::render(&r);
            }
            Err(e) => {
                let e = e.to_string();
                assert!(!e.is_empty(), "empty error");
            }
        },
    );
}

#[test]
fn hdr_log_mutations_are_errors_never_panics() {
    let s = seeds();
    fuzz("HDR log", std::slice::from_ref(&s.hdr_log), cases(), |b| {
        if let Err(e) = nines_report::intervals::parse_interval_log(b) {
            let e = e.to_string();
            assert!(
                !e.contains("ParseError {") && !e.contains("IoError("),
                "{e}"
            );
        }
    });
}

#[test]
fn plan_and_state_mutations_are_errors_never_panics() {
    let s = seeds();
    fuzz(
        "placement plan",
        std::slice::from_ref(&s.plan_json),
        cases(),
        |b| {
            if let Err(e) = nines_host::plan::Plan::from_json(&text(b), "fuzz.json") {
                assert!(e.to_string().contains("fuzz.json"), "{e}");
            }
        },
    );
    let path = s.dir.path().join("fuzz-state.json");
    fuzz(
        "tune state",
        std::slice::from_ref(&s.state_json),
        cases(),
        |b| {
            std::fs::write(&path, b).unwrap();
            if let Err(e) = nines_host::apply::State::load(&path) {
                assert!(!e.to_string().is_empty());
            }
        },
    );
}

/// On the command line a bad input is one line on stderr, exit status 1, and no output file.
#[test]
fn bad_inputs_on_the_command_line_write_nothing() {
    let s = seeds();
    let d = s.dir.path();
    let n = (cases() / 16).max(4);
    let cli = |what: &str, input: &[u8], file: &str, args: &dyn Fn(&Path) -> Vec<String>| {
        let inp = d.join(file);
        runner(n)
            .run(&mutations(), |muts| {
                let bad = apply(input, &muts);
                std::fs::write(&inp, &bad).unwrap();
                let out: PathBuf = d.join("out");
                let _ = std::fs::remove_dir_all(&out);
                std::fs::create_dir(&out).unwrap();
                let a = args(&out);
                let a: Vec<&str> = a.iter().map(String::as_str).collect();
                let o = common::nines(&a, d);
                let err = text(&o.stderr);
                assert!(
                    o.status.code() == Some(0) || o.status.code() == Some(1),
                    "{what}: {:?} {err}",
                    o.status
                );
                assert!(!err.contains("panicked"), "{what}: {err}");
                if !o.status.success() {
                    let left: Vec<_> = std::fs::read_dir(&out).unwrap().collect();
                    assert!(left.is_empty(), "{what}: failed but wrote {left:?}: {err}");
                }
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    };
    let toml = preset_tomls().remove(0);
    cli("sim --device", &toml, "fuzz.toml", &|out| {
        [
            "sim",
            "--quiet",
            "--device",
            "fuzz.toml",
            "--ios",
            "200",
            "--precondition",
            "none",
            "--json",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([out.join("s.json").display().to_string()])
        .collect()
    });
    cli("report", &s.report_json, "fuzz-run.json", &|out| {
        vec![
            "report".into(),
            "fuzz-run.json".into(),
            "-o".into(),
            out.join("r.html").display().to_string(),
        ]
    });
    cli("merge", &s.report_json, "fuzz-run.json", &|out| {
        vec![
            "merge".into(),
            "fuzz-run.json".into(),
            "-o".into(),
            out.join("m.json").display().to_string(),
        ]
    });
}
