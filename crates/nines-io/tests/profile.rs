//! `nines_io::profile`, the library call behind `nines profile`: what it refuses, and that a
//! refused run leaves no target file behind it created.

use nines_core::workload::{RwMode, WorkloadSpec};
use nines_io::engine::EngineKind;
use nines_io::profile::{ProfileError, ProfileEvents, ProfileSpec, profile};
use nines_spec::RunSpec;

fn spec(targets: Vec<std::path::PathBuf>) -> ProfileSpec {
    let mut s = ProfileSpec::new(targets);
    s.engine = EngineKind::Psync;
    s.mlock = false;
    s
}

#[test]
fn a_refused_region_removes_the_target_file_the_run_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.img");
    let run = RunSpec::new(WorkloadSpec {
        rw: RwMode::RandWrite,
        region_offset_bytes: 1000,
        region_size_bytes: Some(1 << 20),
        ios_max: Some(10),
        runtime_ns: None,
        ..WorkloadSpec::default()
    });
    let e = profile(run, spec(vec![path.clone()]), &mut ()).unwrap_err();
    assert!(matches!(e, ProfileError::Target(_)), "{e:?}");
    assert!(e.to_string().contains("1000"), "{e}");
    assert!(
        !path.exists(),
        "the file the refused run created is still there"
    );
}

#[test]
fn isolating_a_path_that_is_no_target_is_refused_and_the_events_see_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.img");
    std::fs::write(&path, vec![1u8; 4 << 20]).unwrap();
    let run = || {
        RunSpec::new(WorkloadSpec {
            ios_max: Some(500),
            runtime_ns: None,
            ..WorkloadSpec::default()
        })
    };
    let mut s = spec(vec![path.clone()]);
    s.isolate = vec![dir.path().join("other.img")];
    let e = profile(run(), s, &mut ()).unwrap_err();
    assert!(
        matches!(&e, ProfileError::Refused(m) if m.starts_with("--isolate ") && m.contains("other.img")),
        "{e:?}"
    );
    // A run: the placement is told once, the hooks run before and after it, and what they say
    // of the host and the interrupts lands in the report.
    #[derive(Default)]
    struct Seen {
        placement: Vec<String>,
        around: Vec<bool>,
    }
    impl ProfileEvents for Seen {
        fn placement(&mut self, line: &str) {
            self.placement.push(line.to_string());
        }
        fn around_run(&mut self, after: bool) -> Option<String> {
            self.around.push(after);
            after.then(|| "a host note".to_string())
        }
        fn interrupts(&mut self, _disk: &str, cpu: usize) -> Option<serde_json::Value> {
            Some(serde_json::json!({ "cpu": cpu }))
        }
        fn host(&mut self) -> Option<serde_json::Value> {
            Some(serde_json::json!({ "seen": true }))
        }
    }
    let mut seen = Seen::default();
    let done = profile(run(), spec(vec![path]), &mut seen).unwrap();
    assert_eq!(seen.around, [false, true]);
    assert_eq!(seen.placement.len(), 1);
    assert!(
        seen.placement[0].starts_with("placement: engine psync"),
        "{:?}",
        seen.placement
    );
    assert_eq!(done.report.aggregate.read.ios, 500);
    assert!(done.report.warnings.iter().any(|w| w == "a host note"));
    let json = done.report.to_json();
    assert!(
        json.contains("\"seen\": true") || json.contains("\"seen\":true"),
        "{json}"
    );
    assert!(!done.interrupted);
    assert_eq!(done.recorders.len(), 1);
}
