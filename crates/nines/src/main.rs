//! The `nines` command-line tool: argument parsing and wiring only. Every verb lives in its own
//! module under `cmd/`; the work itself is done by the library crates.

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};

/// `print!`, `println!`, `eprint!` and `eprintln!` for the whole binary, shadowing std's (macro
/// textual scope reaches every module declared below): they never panic on a closed pipe or a
/// closed stderr (see stdio.rs).
macro_rules! print {
    ($($t:tt)*) => { $crate::stdio::out(format_args!($($t)*)) };
}
macro_rules! println {
    () => { $crate::stdio::out(format_args!("\n")) };
    ($($t:tt)*) => { $crate::stdio::out(format_args!("{}\n", format_args!($($t)*))) };
}
#[allow(unused_macros)]
macro_rules! eprint {
    ($($t:tt)*) => { $crate::stdio::err(format_args!($($t)*)) };
}
macro_rules! eprintln {
    () => { $crate::stdio::err(format_args!("\n")) };
    ($($t:tt)*) => { $crate::stdio::err(format_args!("{}\n", format_args!($($t)*))) };
}

mod cmd;
mod stdio;

/// Tail latency of all-flash arrays: measure, diagnose, simulate, report.
#[derive(Parser, Debug)]
#[command(name = "nines", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Measure every target's latency distribution to six nines, in parallel.
    Profile(Box<cmd::profile::Args>),
    /// Decode a per-I/O latency log (from `profile`, `sim` or `serve --lat-log`) to CSV.
    Log(cmd::log::Args),
    /// Run workloads on simulated SSDs and arrays.
    Sim(Box<cmd::sim::Args>),
    /// Audit this host for settings that lengthen the latency tail.
    Doctor(cmd::doctor::Args),
    /// Plan, apply and revert the host changes that shorten the tail.
    Tune(cmd::tune::Args),
    /// Turn a run's JSON into an HTML report with plots.
    Report(cmd::report::Args),
    /// Put several runs side by side.
    Compare(cmd::compare::Args),
    /// Characterise devices over one parameter (queue depth, write share, engine).
    Sweep(cmd::sweep::Args),
    /// Merge runs from many hosts into one report, adding their histograms exactly.
    Merge(cmd::merge::Args),
    /// Run one nines command as many tasks (locally or on Slurm) and merge their reports.
    Fleet(cmd::fleet::Args),
    /// Serve a volume (one target, or any layout over several) over NBD to real clients.
    Serve(Box<cmd::serve::Args>),
    /// Rebuild a replaced RAID5 member from the others, to the end, with progress.
    Rebuild(cmd::rebuild::Args),
    /// Verify a stopped RAID5 volume's parity (and repair it), with a rate limit and progress.
    Check(cmd::check::Args),
}

fn main() -> ExitCode {
    // The hostile-input matrix (tests/hostile_matrix.rs) is generated from these definitions,
    // so a new flag is covered without anyone listing it.
    if std::env::var_os("NINES_CLI_SPEC").is_some_and(|v| v == "1") {
        print!("{}", cli_spec(&<Cli as clap::CommandFactory>::command()));
        return ExitCode::SUCCESS;
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage_error(err),
    };
    // Until a verb takes SIGINT/SIGTERM over, they end the process at once, its temporary
    // files removed, with README's status (serve's normal end is a signal: 0).
    let status = if matches!(cli.command, Command::Serve(_)) {
        0
    } else {
        cmd::EXIT_INTERRUPTED
    };
    if let Err(e) = cmd::early_signal::install(status) {
        eprintln!("nines: cannot install the SIGINT/SIGTERM handler: {e}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Profile(args) => cmd::profile::run(*args),
        Command::Log(args) => cmd::log::run(args),
        Command::Sim(args) => cmd::sim::run(*args),
        Command::Doctor(args) => cmd::doctor::run(args),
        Command::Tune(args) => cmd::tune::run(args),
        Command::Report(args) => cmd::report::run(args),
        Command::Compare(args) => cmd::compare::run(args),
        Command::Sweep(args) => cmd::sweep::run(args),
        Command::Merge(args) => cmd::merge::run(args),
        Command::Fleet(args) => cmd::fleet::run(args),
        Command::Serve(args) => cmd::serve::run(*args),
        Command::Rebuild(args) => cmd::rebuild::run(args),
        Command::Check(args) => cmd::check::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One line: the context chain joined, so the user sees what failed and why.
            eprintln!("nines: {}", error_line(&err));
            if err.downcast_ref::<cmd::Interrupted>().is_some() {
                return ExitCode::from(cmd::EXIT_INTERRUPTED as u8);
            }
            ExitCode::FAILURE
        }
    }
}

/// Every argument of every subcommand that takes a value, one per line, tab-separated: the
/// subcommand path ("fleet status"), the argument's id, its long name (empty for a positional),
/// what it takes (path, number, choice or other: a string parsed later, given numbers too) and
/// its value names.
fn cli_spec(root: &clap::Command) -> String {
    use std::any::TypeId;
    fn walk(cmd: &clap::Command, path: &str, out: &mut String) {
        for arg in cmd.get_arguments() {
            if !arg.get_action().takes_values() || arg.is_hide_set() {
                continue;
            }
            let parser = arg.get_value_parser();
            let names: Vec<String> = arg
                .get_value_names()
                .map(|v| v.iter().map(|n| n.to_string()).collect())
                .unwrap_or_default();
            let upper = names.join(" ").to_uppercase();
            let t = parser.type_id();
            let numeric = [
                TypeId::of::<u8>(),
                TypeId::of::<u16>(),
                TypeId::of::<u32>(),
                TypeId::of::<u64>(),
                TypeId::of::<usize>(),
                TypeId::of::<i32>(),
                TypeId::of::<i64>(),
                TypeId::of::<f32>(),
                TypeId::of::<f64>(),
            ];
            let kind = if !arg.get_possible_values().is_empty() {
                "choice"
            } else if t == TypeId::of::<std::path::PathBuf>()
                || [
                    "FILE", "DIR", "PATH", "TARGET", ".JSON", ".TOML", "PLAN", "STATE",
                ]
                .iter()
                .any(|w| upper.contains(w))
            {
                "path"
            } else if numeric.iter().any(|n| t == *n) {
                "number"
            } else {
                "other"
            };
            let long = arg.get_long().unwrap_or("");
            // Arguments passed through to another verb (sweep's, fleet's) are not this verb's.
            let passthrough = arg.is_positional() && arg.is_trailing_var_arg_set();
            if passthrough || (arg.is_positional() && arg.is_last_set()) {
                continue;
            }
            out.push_str(&format!(
                "{path}\t{}\t{long}\t{kind}\t{}\n",
                arg.get_id(),
                names.join(" ")
            ));
        }
        for sub in cmd.get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            let p = if path.is_empty() {
                sub.get_name().to_string()
            } else {
                format!("{path} {}", sub.get_name())
            };
            walk(sub, &p, out);
        }
    }
    let mut out = String::new();
    walk(root, "", &mut out);
    out
}

/// The error and its causes on one line. Library errors often repeat their source in their own
/// message as well as exposing it as `source()`; a cause already said is not said again.
fn error_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace('\n', " ")
}

/// Help and version go to stdout as clap prints them. Every other argument error becomes one line,
/// `nines: ...`, like every other error of nines, with exit status 2 (clap's usage status).
fn usage_error(err: clap::Error) -> ExitCode {
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
        // `nines` alone: the help, on stderr, as a usage error.
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = err.print();
            return ExitCode::from(2);
        }
        _ => {}
    }
    eprintln!("nines: {}", one_line(&err.render().to_string()));
    ExitCode::from(2)
}

/// clap's message without its "error: " prefix, usage block and help hint, joined on one line.
fn one_line(rendered: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for line in rendered.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("Usage:") || line.starts_with("For more information")
        {
            continue;
        }
        parts.push(line.strip_prefix("error: ").unwrap_or(line));
    }
    let mut msg = parts.join("; ");
    msg.push_str(" (see --help)");
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_already_in_the_message_are_not_repeated() {
        let io = std::io::Error::from_raw_os_error(1);
        #[derive(Debug)]
        struct Wrapping(std::io::Error);
        impl std::fmt::Display for Wrapping {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "cannot set SCHED_FIFO: {}", self.0)
            }
        }
        impl std::error::Error for Wrapping {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let err = anyhow::Error::new(Wrapping(io)).context("worker on CPU 1");
        assert_eq!(
            error_line(&err),
            "worker on CPU 1: cannot set SCHED_FIFO: Operation not permitted (os error 1)"
        );
    }

    #[test]
    fn argument_errors_become_one_line() {
        for args in [
            &["nines", "profile", "--mix", "abc"][..],
            &["nines", "profile", "--bs", "4x"],
            &["nines", "profile", "--rw", "foo"],
            &["nines", "frobnicate"],
            &["nines", "profile", "--no-such-option"],
        ] {
            let err = Cli::try_parse_from(args).unwrap_err();
            let line = one_line(&err.render().to_string());
            assert!(!line.contains('\n'), "{line}");
            assert!(!line.starts_with("error:"), "{line}");
            assert!(line.ends_with("(see --help)"), "{line}");
            // The offending text is named.
            let bad = args[args.len() - 1];
            assert!(line.contains(bad), "{args:?}: {line}");
        }
    }
}
