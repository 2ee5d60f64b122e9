//! `nines tune --plan / --apply / --revert` from the command line against a fixture host tree
//! (the paper-000 AFA host: 40 CPUs, 64 NVMe, written by `nines_host::testbed`) given with the
//! hidden `--root`: the apply path runs for real without changing this machine. The plan's files
//! change to the planned values and nothing else; revert puts every value back; bad plans and
//! states are refused in one line and change nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nines_host::plan::{Plan, normalize_value};
use nines_host::testbed::{AfaOptions, write_afa_host};

mod common;
use common::nines;

/// A scratch directory in RAM when there is one (the fixture has about 9,000 files).
fn scratch() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir()
        && let Ok(d) = tempfile::tempdir_in("/dev/shm")
    {
        return d;
    }
    tempfile::tempdir().unwrap()
}

/// Every file under `root`, path (relative) to bytes.
fn tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().display().to_string();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fixture host under `dir/root` and a work directory `dir/work` for plans and states.
fn fixture(dir: &Path) -> (PathBuf, PathBuf) {
    let root = dir.join("root");
    let work = dir.join("work");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    write_afa_host(&root, AfaOptions { tuned: false }).unwrap();
    (root, work)
}

#[test]
fn plan_apply_revert_on_a_fixture_root_changes_exactly_the_plan_and_restores_every_byte() {
    let dir = scratch();
    let (root, work) = fixture(dir.path());
    let before = tree(&root);

    // Plan: read-only, written to -o.
    let out = nines(
        &[
            "tune",
            "--root",
            s(&root),
            "--plan",
            "--cpus",
            "4-19,24-39",
            "-o",
            "plan.json",
        ],
        &work,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(tree(&root), before, "--plan changed the host tree");
    let plan = Plan::load(&work.join("plan.json")).unwrap();
    assert!(
        plan.changes.len() > 64,
        "the AFA host's plan moves its NVMe interrupts: {} changes",
        plan.changes.len()
    );
    let kinds: std::collections::BTreeSet<&str> =
        plan.changes.iter().map(|c| c.kind.as_str()).collect();
    assert!(kinds.contains("irq_affinity"), "{kinds:?}");

    // Apply: each planned file holds the planned value; every other file is untouched; the
    // state records what was there.
    let out = nines(
        &[
            "tune",
            "--root",
            s(&root),
            "--apply",
            "plan.json",
            "--state",
            "state.json",
        ],
        &work,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("applied {} change(s)", plan.changes.len())),
        "{stdout}"
    );
    let applied = tree(&root);
    let planned: BTreeMap<String, &str> = plan
        .changes
        .iter()
        .map(|c| (c.path.trim_start_matches('/').to_string(), c.value.as_str()))
        .collect();
    assert_eq!(
        applied.len(),
        before.len(),
        "apply created or removed files"
    );
    for (path, bytes) in &applied {
        match planned.get(path) {
            Some(v) => assert_eq!(
                normalize_value(path, &String::from_utf8_lossy(bytes)),
                normalize_value(path, v),
                "{path}"
            ),
            None => assert_eq!(Some(bytes), before.get(path), "{path} changed"),
        }
    }
    assert!(
        planned.keys().any(|p| applied.get(p) != before.get(p)),
        "the plan changed nothing on the untuned host"
    );
    assert!(work.join("state.json").is_file());

    // Revert: every planned file holds its old value again (as the kernel prints it: a value
    // written to a kernel file reads back with its newline, and the scheduler file with the
    // choices around the name), every other file's bytes as before.
    let out = nines(
        &["tune", "--root", s(&root), "--revert", "state.json"],
        &work,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let reverted = tree(&root);
    assert_eq!(reverted.len(), before.len());
    for (path, bytes) in &reverted {
        let was = &before[path];
        if planned.contains_key(path) {
            assert_eq!(
                normalize_value(path, &String::from_utf8_lossy(bytes)),
                normalize_value(path, &String::from_utf8_lossy(was)),
                "{path} not restored"
            );
        } else {
            assert_eq!(bytes, was, "{path} changed");
        }
    }
}

#[test]
fn bad_plans_and_states_are_refused_in_one_line_and_change_nothing() {
    let dir = scratch();
    let (root, work) = fixture(dir.path());
    let out = nines(
        &["tune", "--root", s(&root), "--plan", "-o", "plan.json"],
        &work,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let good = std::fs::read_to_string(work.join("plan.json")).unwrap();
    // A file a hostile plan or state below aims at.
    std::fs::write(root.join("victim"), "keep").unwrap();
    let before = tree(&root);

    let refused = |args: &[&str], what: &str| -> String {
        let o = nines(args, &work);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{what}: one line: {err}");
        assert_eq!(tree(&root), before, "{what} changed the host tree");
        assert!(!work.join("state.json").exists(), "{what} wrote a state");
        err
    };

    // CPUs the host does not have: the message lists the ones it has, as profile's does.
    let e = refused(
        &["tune", "--root", s(&root), "--plan", "--cpus", "2,99"],
        "offline CPUs",
    );
    assert!(
        e.contains("CPU(s) 99 not online (online: 0-39); pick CPUs from that list"),
        "{e}"
    );

    // A truncated plan.
    std::fs::write(work.join("cut.json"), &good[..good.len() / 2]).unwrap();
    let e = refused(
        &[
            "tune",
            "--root",
            s(&root),
            "--apply",
            "cut.json",
            "--state",
            "state.json",
        ],
        "a truncated plan",
    );
    assert!(e.contains("cut.json"), "{e}");
    // Not a plan at all.
    std::fs::write(work.join("other.json"), "{\"version\": 1}").unwrap();
    refused(
        &[
            "tune",
            "--root",
            s(&root),
            "--apply",
            "other.json",
            "--state",
            "state.json",
        ],
        "a JSON file that is not a plan",
    );
    // A plan for another host: paths this tree does not have (rolled back, nothing created).
    let other = good.replace("/proc/irq/", "/proc/irq/9999");
    std::fs::write(work.join("elsewhere.json"), other).unwrap();
    refused(
        &[
            "tune",
            "--root",
            s(&root),
            "--apply",
            "elsewhere.json",
            "--state",
            "state.json",
        ],
        "a plan for another host",
    );
    // A plan (or a state) naming a file no plan change writes: `tune` writes as root, so an
    // edited file must not reach anything else (here a file beside the fixture's /proc).
    let first_irq = good
        .split("\"/proc/irq/")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .map(|r| format!("/proc/irq/{r}"))
        .expect("the plan moves an interrupt");
    let evil = good.replacen(&first_irq, "/proc/irq/../../victim", 1);
    std::fs::write(work.join("evil.json"), evil).unwrap();
    let e = refused(
        &[
            "tune",
            "--root",
            s(&root),
            "--apply",
            "evil.json",
            "--state",
            "state.json",
        ],
        "a plan naming another file",
    );
    assert!(e.contains("not a file"), "{e}");

    // A missing plan, a missing state, a corrupt state.
    refused(
        &[
            "tune",
            "--root",
            s(&root),
            "--apply",
            "none.json",
            "--state",
            "state.json",
        ],
        "a missing plan",
    );
    let e = refused(
        &["tune", "--root", s(&root), "--revert", "none-state.json"],
        "a missing state",
    );
    assert!(e.contains("none-state.json"), "{e}");
    std::fs::write(work.join("bad-state.json"), "[1, 2").unwrap();
    refused(
        &["tune", "--root", s(&root), "--revert", "bad-state.json"],
        "a corrupt state",
    );
    // A state naming a file no change writes is refused too, and the good state reverts.
    let out = nines(
        &[
            "tune",
            "--root",
            s(&root),
            "--apply",
            "plan.json",
            "--state",
            "good-state.json",
        ],
        &work,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let applied = tree(&root);
    let state = std::fs::read_to_string(work.join("good-state.json")).unwrap();
    std::fs::write(
        work.join("evil-state.json"),
        state.replacen(&first_irq, "/proc/irq/../../victim", 1),
    )
    .unwrap();
    let o = nines(
        &["tune", "--root", s(&root), "--revert", "evil-state.json"],
        &work,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("not a file"), "{}", stderr(&o));
    assert_eq!(tree(&root), applied, "a refused state changed the tree");
    let o = nines(
        &["tune", "--root", s(&root), "--revert", "good-state.json"],
        &work,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(root.join("victim")).unwrap(), b"keep");
}
