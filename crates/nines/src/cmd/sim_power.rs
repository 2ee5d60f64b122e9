//! `nines sim --calibrate ... --power-states-from DEVICE|RUN.json`: a real NVMe device's power
//! state table as the fitted description's `[[power.states]]`, mapped as Linux's APST would
//! program it (`nines_sim::apst`).

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use nines_core::nvme::IdentifyController;
use nines_io::nvme::{NvmeDevice, Probe};
use nines_sim::apst::{ApstPolicy, MappedPowerStates, power_states_from_nvme};

/// Where the host's APST parameters are (`nvme_configure_apst` reads them).
const NVME_CORE_PARAMETERS: &str = "/sys/module/nvme_core/parameters";

/// The power states and the lines that say where they came from and how they were mapped.
pub struct PowerSource {
    pub mapped: MappedPowerStates,
    /// For the calibration table (and so the fitted file's comments).
    pub lines: Vec<String>,
}

/// Reads `path`: an NVMe device node (admin passthrough: Identify Controller) or a `nines
/// profile --json` report whose devices include an NVMe one (its `nvme.controller`).
pub fn read(path: &Path) -> Result<PowerSource> {
    let shown = path.display();
    let meta = std::fs::metadata(path)
        .with_context(|| format!("--power-states-from {shown}: cannot read it"))?;
    let (controller, source, policy, policy_source) = if meta.is_file() {
        let (c, device, recorded) = from_report(path)?;
        let (policy, said) = match recorded {
            Some(p) => (p, "the APST parameters of the host the report was taken on"),
            None => (
                ApstPolicy::default(),
                "Linux's default APST parameters (the report does not record the measuring host's)",
            ),
        };
        (c, format!("{device} as recorded in {shown}"), policy, said)
    } else {
        let c = from_device(path)?;
        let policy = ApstPolicy::from_parameters(|name| {
            std::fs::read_to_string(Path::new(NVME_CORE_PARAMETERS).join(name)).ok()
        });
        (
            c,
            shown.to_string(),
            policy,
            "this host's APST parameters (/sys/module/nvme_core/parameters; defaults where absent)",
        )
    };
    let mapped = power_states_from_nvme(&controller, &policy);
    let mut lines = vec![format!(
        "power states from {source}: {} (firmware {}), power state descriptors: {}, APST {}; mapped with {policy_source}: power states for the model: {}",
        controller.model,
        controller.firmware,
        controller.power_states.len(),
        if controller.apst_supported {
            "supported"
        } else {
            "not supported"
        },
        mapped.states.len()
    )];
    lines.extend(mapped.notes.iter().map(|n| format!("  {n}")));
    Ok(PowerSource { mapped, lines })
}

fn from_device(path: &Path) -> Result<IdentifyController> {
    let shown = path.display();
    match NvmeDevice::open(path).with_context(|| format!("--power-states-from {shown}"))? {
        Probe::NotNvme(why) => bail!(
            "--power-states-from {shown}: {why}; give an NVMe device node (/dev/nvme0n1, \
             /dev/nvme0, /dev/ng0n1) or a `nines profile --json` report of one"
        ),
        Probe::Nvme(dev) => dev
            .identify_controller()
            .with_context(|| format!("--power-states-from {shown}")),
    }
}

/// The first NVMe device's (or member's) controller in a report, its device node, and the
/// measuring host's APST policy when the report records it (`host.apst`).
fn from_report(path: &Path) -> Result<(IdentifyController, String, Option<ApstPolicy>)> {
    let shown = path.display();
    let text = nines_core::input::read_to_string(path, nines_core::input::REPORT_MAX_BYTES)
        .with_context(|| format!("--power-states-from {shown}: cannot read it"))?;
    let report = nines_core::report::Report::from_json(&text)
        .with_context(|| format!("--power-states-from {shown}"))?;
    report
        .devices
        .iter()
        .flat_map(|d| {
            d.nvme.iter().chain(
                d.volume
                    .iter()
                    .flat_map(|v| &v.members)
                    .filter_map(|m| m.nvme.as_ref()),
            )
        })
        .next()
        .map(|n| {
            let policy = report
                .host
                .as_ref()
                .and_then(|h| h["apst"].as_object())
                .filter(|m| !m.is_empty())
                .and_then(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(",")
                        .parse::<ApstPolicy>()
                        .ok()
                });
            (n.controller.clone(), n.device.clone(), policy)
        })
        .ok_or_else(|| {
            anyhow!(
                "--power-states-from {shown}: the report has no NVMe device (its devices have \
                 no `nvme` section: profile an NVMe device with this version of nines, or give \
                 the device node)"
            )
        })
}
