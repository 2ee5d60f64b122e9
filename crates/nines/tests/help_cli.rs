//! `--help` a newcomer can find their way in: the long verbs group their options under headings
//! (workload, layout, targets, host, outputs), and every heading holds at least one option.

mod common;
use common::run;

fn headings(verb: &str) -> Vec<(String, usize)> {
    let out = run(&[verb, "--help"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut heads: Vec<(String, usize)> = Vec::new();
    for line in text.lines() {
        if line.ends_with(':') && !line.starts_with(' ') && !line.contains("Usage") {
            heads.push((line.trim_end_matches(':').to_string(), 0));
        } else if (line.trim_start().starts_with("--") || line.trim_start().starts_with("-q"))
            && let Some(h) = heads.last_mut()
        {
            h.1 += 1;
        }
    }
    heads
}

#[test]
fn profile_and_sim_group_their_options_under_headings() {
    for (verb, want) in [
        (
            "profile",
            &[
                "Workload",
                "Layout: targets as an array volume",
                "Trace replay",
                "Host: engine, CPUs, scheduling",
                "Targets: writes and safety",
                "Outputs",
            ][..],
        ),
        (
            "sim",
            &[
                "Workload",
                "Simulated devices",
                "Simulated host",
                "Outputs",
                "Calibration (fit a device to your profiles)",
            ][..],
        ),
    ] {
        let heads = headings(verb);
        for w in want {
            let h = heads.iter().find(|(h, _)| h == w);
            assert!(
                matches!(h, Some((_, n)) if *n > 0),
                "{verb} --help: no options under {w:?}: {heads:?}"
            );
        }
        // No option is left in the catch-all group but --help and --version.
        let other = heads
            .iter()
            .find(|(h, _)| h == "Options")
            .map_or(0, |h| h.1);
        assert!(
            other <= 2,
            "{verb} --help: {other} options ungrouped: {heads:?}"
        );
    }
}

/// The lines of `verb --help` (short help) that describe option `flag`.
fn option_help(verb: &str, flag: &str) -> Option<String> {
    let out = run(&[verb, "-h"]);
    assert!(out.status.success(), "{verb} -h");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let i = lines.iter().position(|l| {
        let t = l.trim_start();
        t.starts_with(&format!("{flag} ")) || t.contains(&format!(", {flag} ")) || t.ends_with(flag)
    })?;
    // A long option's help may start on the next line.
    let mut h = lines[i].trim().to_string();
    if h.ends_with(flag)
        && let Some(next) = lines.get(i + 1)
    {
        h = format!("{h} {}", next.trim());
    }
    Some(h)
}

/// One meaning per flag name (issue 31 item 20): `-q/--quiet` is the same words in every verb
/// that has it, and `--force` only ever means writing over a device's data; the verbs whose
/// `--force` meant something else refuse it, naming the new flag, and change nothing.
#[test]
fn quiet_and_force_mean_one_thing_in_every_verb() {
    let quiet = "Print nothing but errors and warnings";
    for verb in ["profile", "sim", "merge", "rebuild", "check"] {
        let h = option_help(verb, "--quiet").unwrap_or_else(|| panic!("{verb}: no --quiet"));
        assert!(
            h.starts_with("-q, --quiet") && h.contains(quiet),
            "{verb}: {h}"
        );
    }
    for verb in ["profile", "serve", "rebuild", "check"] {
        let h = option_help(verb, "--force").unwrap_or_else(|| panic!("{verb}: no --force"));
        assert!(
            h.contains("mounted") && h.contains("signature"),
            "{verb}: {h}"
        );
    }
    for (verb, renamed) in [("sim", Some("--allow-long")), ("merge", None)] {
        assert!(
            option_help(verb, "--force").is_none(),
            "{verb} still shows --force"
        );
        if let Some(r) = renamed {
            assert!(option_help(verb, r).is_some(), "{verb}: no {r}");
        }
    }
    let sim = run(&["sim", "--force", "--ios", "10"]);
    let err = String::from_utf8_lossy(&sim.stderr);
    assert!(
        !sim.status.success() && err.contains("--allow-long"),
        "{err}"
    );
    assert!(sim.stdout.is_empty());
    // Quiet runs print nothing on stdout: no placement line, no table.
    for args in [
        &["sim", "-q", "--ios", "1000"][..],
        &["profile", "-q", "--size", "8m", "--ios", "200"][..],
    ] {
        let out = run(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stdout.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// Options that write a file name it `<FILE>` (a folder `<DIR>`), and defaults are given as
/// `[default: ...]`, never in prose (issue 31 item 20).
#[test]
fn placeholders_and_defaults_read_the_same_in_every_verb() {
    for verb in [
        "profile", "sim", "serve", "rebuild", "check", "compare", "report", "merge", "log",
        "doctor", "tune", "sweep", "fleet",
    ] {
        let out = run(&[verb, "--help"]);
        let text = String::from_utf8(out.stdout).unwrap();
        for bad in ["<JSON>", "<OUT>", "(default", "Default "] {
            assert!(!text.contains(bad), "{verb} --help has {bad:?}:\n{text}");
        }
    }
}

/// profile says up front how large its --lat-log can grow (issue 31 item 21), as sim does.
#[test]
fn profile_estimates_its_lat_log_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let lat = dir.path().join("run.lat");
    let lat_s = lat.to_str().unwrap();
    let out = run(&[
        "profile",
        "--size",
        "8m",
        "--ios",
        "500",
        "--lat-log",
        lat_s,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // The embedded default profiles 4 files: 4 x 500 I/Os x 24 bytes.
    assert!(
        err.contains(&format!(
            "--lat-log {lat_s}: at most 0.0 MiB (24 bytes per I/O, 2000 I/Os)"
        )),
        "{err}"
    );
    let len = std::fs::metadata(&lat).unwrap().len();
    assert!(len >= 2000 * 24, "{len}");
}
