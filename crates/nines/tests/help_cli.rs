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
