//! `nines_sim::simulate`, the library call behind `nines sim`: the same report as preparing and
//! running the configuration by hand, a stop before the run simulates nothing, and a trace
//! beyond the simulated target is refused with the sizes a message needs.

use nines_core::op::Op;
use nines_core::workload::{RwMode, WorkloadSpec};
use nines_sim::{RunSpec, SimHandle, SimSpec, SimulateError, TraceSpec, simulate};
use nines_trace::{FitPolicy, Trace, TraceError, TraceFormat, TraceRecord};

fn mixed_run() -> RunSpec {
    RunSpec::new(WorkloadSpec {
        rw: RwMode::RandRw,
        read_mix_pct: 70,
        iodepth: 4,
        runtime_ns: None,
        ios_max: Some(3000),
        seed: 7,
        ..WorkloadSpec::default()
    })
}

#[test]
fn simulate_reports_what_prepare_and_run_report() {
    let sim = SimSpec::preset("afa-m2-2018", 2).unwrap();
    let run = mixed_run();
    let cfg = sim.config(&run);
    let mut prep = nines_sim::prepare(&cfg, run.writes_data()).unwrap();
    let by_hand = nines_sim::run(&mut prep, None).unwrap();
    let mut notes = Vec::new();
    let done = simulate(
        run,
        &sim,
        Default::default(),
        &SimHandle::default(),
        &mut |n| notes.push(n.to_string()),
    )
    .unwrap();
    assert_eq!(done.report.to_json(), by_hand.report.to_json());
    assert_eq!(done.stats.ios, 2 * 3000);
    assert_eq!(done.stats.ios, by_hand.stats.ios);
    assert_eq!(done.scale, prep.scale);
    assert!(!done.interrupted);
    assert!(notes.is_empty(), "{notes:?}");
}

#[test]
fn a_stop_before_the_run_simulates_nothing() {
    let sim = SimSpec::preset("afa-m2-2018", 1).unwrap();
    let handle = SimHandle::default();
    handle.stop();
    let e = simulate(mixed_run(), &sim, Default::default(), &handle, &mut |_| {}).unwrap_err();
    assert!(matches!(e, SimulateError::Interrupted), "{e:?}");
    assert!(!handle.running());
}

#[test]
fn a_trace_beyond_the_target_is_refused_with_its_size_and_fitted_when_asked() {
    let mut sim = SimSpec::preset("afa-m2-2018", 1).unwrap();
    sim.null_device_bytes = Some(1 << 20);
    let records = vec![
        TraceRecord::data(0, 0, 0, 4096, Op::Read),
        TraceRecord::data(1000, 0, 4 << 20, 4096, Op::Read),
    ];
    let replay = |fit| {
        let mut run = RunSpec::new(WorkloadSpec::default());
        run.trace = Some(TraceSpec {
            trace: Trace::from_records(records.clone(), TraceFormat::Mqsim),
            file: "t.trace".into(),
            fit,
            depth: 4,
        });
        run
    };
    let e = simulate(
        replay(FitPolicy::Error),
        &sim,
        Default::default(),
        &SimHandle::default(),
        &mut |_| {},
    )
    .unwrap_err();
    match e {
        SimulateError::TraceBeyond {
            error: TraceError::OutOfRange { out_of_range, .. },
            target_size_bytes,
            ..
        } => {
            assert_eq!(out_of_range, 1);
            assert_eq!(target_size_bytes, 1 << 20);
        }
        e => panic!("{e:?}"),
    }
    let mut notes = Vec::new();
    let done = simulate(
        replay(FitPolicy::Wrap),
        &sim,
        Default::default(),
        &SimHandle::default(),
        &mut |n| notes.push(n.to_string()),
    )
    .unwrap();
    assert_eq!(done.report.aggregate.read.ios, 2);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].starts_with("1 trace requests ended beyond the 1048576-byte target"));
    let trace = &done.report.config.extra["trace"];
    assert_eq!(trace["file"], "t.trace");
    assert_eq!(trace["targets_used"], 1);
}
