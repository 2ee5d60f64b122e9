//! `nines doctor`: audit the host (or a captured tree) for settings that lengthen the tail.

use std::path::PathBuf;

use nines_host::capture::{wants_gz, write_capture_to};
use nines_host::doctor::DoctorReport;
use nines_host::fs::HostFs;
use nines_host::host::Host;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Also write the findings as JSON (schema "nines-doctor", version 1) to FILE ("-" = stdout only).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Read a captured /proc and /sys tree under DIR instead of the live host.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Write exactly the files doctor read to FILE (.tar or .tar.gz), for `--root` elsewhere.
    #[arg(long, value_name = "FILE")]
    pub capture: Option<PathBuf>,
    /// Also check placement plan PLAN (from `nines tune --plan -o`) against this host: NUMA
    /// locality, where each device's interrupts are served, isolation of the CPUs it uses.
    #[arg(long, value_name = "PLAN")]
    pub plan: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let root = args.root.clone().unwrap_or_else(|| PathBuf::from("/"));
    if !root.is_dir() {
        anyhow::bail!(
            "--root {}: not a directory; extract a capture there first (tar xf FILE -C DIR)",
            root.display()
        );
    }
    let fs = HostFs::new(&root);
    let host = Host::read(&fs);
    let mut report = DoctorReport::new(&root, &host);
    if let Some(p) = &args.plan {
        let plan = nines_host::plan::Plan::load(p)?;
        report.add_plan_findings(&host, &plan);
    }
    let json_to_stdout = args.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if json_to_stdout {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_text());
    }
    if let Some(path) = args.json.as_ref().filter(|_| !json_to_stdout) {
        super::output::write_all("--json", path, (report.to_json() + "\n").as_bytes())?;
    }
    if let Some(path) = &args.capture {
        let (pending, file) = super::output::PendingOutput::create("--capture", path)?;
        let n = write_capture_to(&fs.recorded(), file, wants_gz(path), path)?;
        pending.commit()?;
        eprintln!("nines doctor: captured {n} files to {}", path.display());
    }
    Ok(())
}
