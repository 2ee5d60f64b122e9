//! `nines doctor`: audit the host (or a captured tree) for settings that lengthen the tail.

use std::path::{Path, PathBuf};

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

/// An output inside the tree doctor reads would overwrite one of its files (`--root DIR
/// --capture DIR/proc/cpuinfo`), or, on the live host, write into /proc or /sys: refused before
/// anything is read.
fn refuse_inside_tree(option: &str, path: &Path, root: &Path) -> anyhow::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Ok(dir) = std::fs::canonicalize(&parent) else {
        return Ok(()); // check_path says what is wrong with it
    };
    let real = match path.file_name() {
        Some(n) => std::fs::canonicalize(dir.join(n)).unwrap_or_else(|_| dir.join(n)),
        None => dir,
    };
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let inside = ["proc", "sys"]
        .iter()
        .any(|t| real.starts_with(root.join(t)))
        || (root != Path::new("/") && real.starts_with(&root));
    if inside {
        anyhow::bail!(
            "{option} {}: it is inside the tree doctor reads ({}); give a path outside it",
            path.display(),
            root.display()
        );
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let root = args.root.clone().unwrap_or_else(|| PathBuf::from("/"));
    if !root.is_dir() {
        anyhow::bail!(
            "--root {}: not a directory; extract a capture there first (tar xf FILE -C DIR)",
            root.display()
        );
    }
    for (option, path) in [("--capture", &args.capture), ("--json", &args.json)] {
        if let Some(p) = path.as_deref().filter(|p| p.as_os_str() != "-") {
            refuse_inside_tree(option, p, &root)?;
        }
    }
    let fs = HostFs::new(&root);
    let host = Host::read(&fs);
    let mut report = DoctorReport::new(&root, &host);
    if root == Path::new("/") {
        report.add_findings(power_state_findings(&host));
    }
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

/// Each NVMe controller's power-state table (Identify Controller, an admin command: live host
/// and root only) and the states this host's APST policy lets it enter, with their idle times
/// and exit latencies (`nines_sim::apst`, the kernel's rules). A controller that cannot be
/// asked (not root, an old kernel) gets a line saying so.
fn power_state_findings(host: &nines_host::host::Host) -> Vec<nines_host::doctor::Finding> {
    use nines_host::doctor::{Evidence, Finding, Severity};
    use nines_io::nvme::{NvmeDevice, Probe};
    let policy = nines_sim::apst::ApstPolicy::from_parameters(|name| {
        std::fs::read_to_string(format!("/sys/module/nvme_core/parameters/{name}")).ok()
    });
    let mut out = Vec::new();
    for c in &host.nvme_controllers {
        let node = format!("/dev/{}", c.name);
        let table = match NvmeDevice::open(Path::new(&node)) {
            Ok(Probe::Nvme(dev)) => dev.identify_controller().map_err(|e| e.to_string()),
            Ok(Probe::NotNvme(why)) => Err(why),
            Err(e) => Err(e.to_string()),
        };
        let (title, evidence) = match table {
            Ok(id) => {
                let states: Vec<String> = id
                    .power_states
                    .iter()
                    .map(|p| {
                        format!(
                            "PS{} {:.4} W {}{}",
                            p.index,
                            p.power_uw_max as f64 * 1e-6,
                            if p.operational { "op" } else { "non-op" },
                            if p.operational {
                                String::new()
                            } else {
                                format!(
                                    " enlat {} exlat {} µs",
                                    p.latency_us_entry, p.latency_us_exit
                                )
                            }
                        )
                    })
                    .collect();
                let mapped = nines_sim::apst::power_states_from_nvme(&id, &policy);
                let entered: Vec<String> = mapped
                    .states
                    .iter()
                    .map(|s| {
                        format!(
                            "after {} idle (exit {})",
                            nines_core::progress::short_ns(s.idle_ns),
                            nines_core::progress::short_ns(s.exit_ns)
                        )
                    })
                    .collect();
                let allowed = if entered.is_empty() {
                    "none".to_string()
                } else {
                    entered.join(", then ")
                };
                (
                    format!(
                        "{}: power states {}; APST{} enters: {allowed}",
                        c.name,
                        states.join(", "),
                        if id.apst_supported {
                            ""
                        } else {
                            " (not supported)"
                        }
                    ),
                    mapped
                        .notes
                        .iter()
                        .map(|n| Evidence {
                            path: format!("{node} (Identify Controller)"),
                            value: n.clone(),
                        })
                        .collect(),
                )
            }
            Err(why) => (
                format!(
                    "{}: power-state table not read ({why}); run as root to read it",
                    c.name
                ),
                Vec::new(),
            ),
        };
        out.push(Finding {
            id: "block.nvme.power_states".into(),
            severity: Severity::Info,
            subject: c.name.clone(),
            title,
            evidence,
            why: "the states an idle controller enters, and each one's exit latency, are what the first I/O after an idle gap pays".into(),
            fix: String::new(),
        });
    }
    out
}
