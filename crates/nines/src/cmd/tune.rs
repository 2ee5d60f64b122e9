//! `nines tune`: plan a CPU-device placement, apply its runtime changes, revert them.

use std::path::PathBuf;

use anyhow::Context;
use nines_host::apply::{self, ApplyOptions, State};
use nines_host::fs::HostFs;
use nines_host::host::Host;
use nines_host::plan::Plan;

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("mode").required(true).args(["plan", "apply", "revert"])))]
pub struct Args {
    /// Compute a placement plan for TARGETs [default: every NVMe device].
    #[arg(long)]
    pub plan: bool,
    /// Apply the runtime changes of plan file PLAN (root only), saving previous values first.
    #[arg(long, value_name = "PLAN")]
    pub apply: Option<PathBuf>,
    /// Restore the values saved in state file STATE by `--apply`.
    #[arg(long, value_name = "STATE")]
    pub revert: Option<PathBuf>,
    /// CPUs for I/O workers, e.g. 4-19,24-39 [default: all but the housekeeping CPUs].
    #[arg(long, value_name = "LIST", requires = "plan")]
    pub cpus: Option<String>,
    /// CPUs kept for everything else [default: the first CPU of each NUMA node and its SMT siblings].
    #[arg(long, value_name = "LIST", requires = "plan")]
    pub housekeeping: Option<String>,
    /// Write the plan (JSON, schema "nines-plan" v1) to PLAN.
    #[arg(short = 'o', long = "output", value_name = "PLAN", requires = "plan")]
    pub output: Option<PathBuf>,
    /// With --apply: also stop irqbalance (restarted by --revert).
    #[arg(long, requires = "apply")]
    pub stop_irqbalance: bool,
    /// With --apply: skip interrupts the kernel refuses to move (kernel-managed queue interrupts,
    /// EPERM) instead of rolling back; they are listed.
    #[arg(long, requires = "apply")]
    pub skip_refused_irqs: bool,
    /// With --apply: where to save the previous values [default: nines-tune-state.json].
    #[arg(long, value_name = "FILE", requires = "apply")]
    pub state: Option<PathBuf>,
    /// Read (and with --apply/--revert, write) the host tree under DIR instead of / (for testing).
    #[arg(long, value_name = "DIR", hide = true)]
    pub root: Option<PathBuf>,
    /// Devices to place (/dev/nvme0n1 or nvme0n1).
    #[arg(value_name = "TARGET")]
    pub targets: Vec<String>,
}

fn cpus_arg(s: &Option<String>, flag: &str) -> anyhow::Result<Option<Vec<usize>>> {
    s.as_deref()
        .map(|s| {
            nines_core::units::parse_cpu_list(s)
                .with_context(|| format!("{flag} {s}: expected a CPU list like 4-19,24-39"))
        })
        .transpose()
}

fn refuse_unless_root(root: &std::path::Path, what: &str) -> anyhow::Result<()> {
    if root == std::path::Path::new("/") && !apply::is_root() {
        anyhow::bail!(
            "`nines tune {what}` changes kernel settings and needs root: re-run it with sudo"
        );
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let root = args.root.clone().unwrap_or_else(|| PathBuf::from("/"));
    if args.plan {
        let cpus = cpus_arg(&args.cpus, "--cpus")?;
        let hk = cpus_arg(&args.housekeeping, "--housekeeping")?;
        let fs = HostFs::new(&root);
        let host = Host::read(&fs);
        let plan = Plan::build(&host, cpus.as_deref(), hk.as_deref(), &args.targets)?;
        print!("{}", plan.to_text());
        if let Some(out) = &args.output {
            super::output::write_all("-o", out, (plan.to_json() + "\n").as_bytes())?;
            eprintln!(
                "nines tune: plan written to {}; apply it with `nines tune --apply {}`",
                out.display(),
                out.display()
            );
        }
        return Ok(());
    }
    if let Some(plan_path) = &args.apply {
        refuse_unless_root(&root, "--apply")?;
        let state_path = args
            .state
            .clone()
            .unwrap_or_else(|| PathBuf::from("nines-tune-state.json"));
        // The record is written by a rename: onto the file a symlink names, never over the plan,
        // a device or a directory.
        super::output::note_inputs("--apply plan", [plan_path.as_path()]);
        let state_path = super::output::regular_file_destination("--state", &state_path)?;
        let plan = Plan::load(plan_path)?;
        println!(
            "applying {} change(s) from {}:",
            plan.changes.len(),
            plan_path.display()
        );
        for c in &plan.changes {
            println!("  echo {} > {}", c.value, c.path);
        }
        if args.stop_irqbalance {
            println!("  stop irqbalance");
        }
        let state = apply::apply(
            &root,
            &plan,
            &state_path,
            &ApplyOptions {
                stop_irqbalance: args.stop_irqbalance,
                skip_refused_irqs: args.skip_refused_irqs,
            },
        )?;
        println!(
            "applied {} change(s); previous values saved in {}; undo with `nines tune --revert {}`",
            state.entries.len(),
            state_path.display(),
            state_path.display()
        );
        for s in &state.skipped {
            println!("skipped: {s}");
        }
        if let Some(ib) = &state.irqbalance {
            println!("stopped irqbalance ({}, pids {:?})", ib.method, ib.pids);
        }
        return Ok(());
    }
    if let Some(state_path) = &args.revert {
        refuse_unless_root(&root, "--revert")?;
        let state = State::load(state_path)?;
        let out = apply::revert(&root, &state);
        println!(
            "restored {} of {} value(s) from {}",
            out.restored,
            state.entries.len(),
            state_path.display()
        );
        if !out.failures.is_empty() {
            for f in &out.failures {
                eprintln!("could not restore: {f}");
            }
            anyhow::bail!(
                "{} value(s) could not be restored (listed above): set them by hand",
                out.failures.len()
            );
        }
        return Ok(());
    }
    anyhow::bail!("give one of --plan, --apply PLAN or --revert STATE")
}
