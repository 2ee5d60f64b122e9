//! The `nines` command-line tool: argument parsing and wiring only. Every verb lives in its own
//! module under `cmd/`; the work itself is done by the library crates.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;

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
    Profile(cmd::profile::Args),
    /// Decode a per-I/O latency log (from `profile --lat-log`) to CSV.
    Log(cmd::log::Args),
    /// Run workloads on simulated SSDs and arrays.
    Sim(cmd::sim::Args),
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Profile(args) => cmd::profile::run(args),
        Command::Log(args) => cmd::log::run(args),
        Command::Sim(args) => cmd::sim::run(args),
        Command::Doctor(args) => cmd::doctor::run(args),
        Command::Tune(args) => cmd::tune::run(args),
        Command::Report(args) => cmd::report::run(args),
        Command::Compare(args) => cmd::compare::run(args),
        Command::Sweep(args) => cmd::sweep::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One line: the context chain joined, so the user sees what failed and why.
            eprintln!("nines: {err:#}");
            ExitCode::FAILURE
        }
    }
}
