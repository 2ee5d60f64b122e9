//! The simulated host's APST policy: a controller's power state descriptors (a preset's
//! `[[power.descriptors]]`, Identify Controller read by `nines_io::nvme` or kept in a `nines
//! profile` report) turned into the SSD model's `[[power.states]]`, as the host's kernel
//! programs them (`nines sim --apst`, `--calibrate --power-states-from`).
//!
//! The model's state ([`PowerState`]) is "after `idle_ns` without commands the device is in
//! this state; the next command first pays `exit_ns`", deepest state reached wins. Which states
//! a device enters, and after how long, is not in its descriptors: the host programs it (the
//! APST feature). So the mapping does what Linux does (drivers/nvme/host/core.c,
//! `nvme_configure_apst`, as of 6.1), with its module parameters ([`ApstPolicy`]):
//!
//! - no state at all when the controller does not support APST (APSTA 0) or the host's
//!   `default_ps_max_latency_us` is 0 (APST off, as servers set it);
//! - only non-operational states (NOPS set) whose exit latency is within
//!   `default_ps_max_latency_us`;
//! - with `apst_primary_timeout_ms` and `apst_primary_latency_tol_us` set (the default), the
//!   deepest state whose ENLAT + EXLAT is within the primary tolerance is entered after the
//!   primary timeout, and a deeper one within the secondary tolerance after the secondary timeout
//!   more (at most two states); otherwise every usable state, each after 50 x (ENLAT + EXLAT)
//!   (in ms, rounded up) in the state before it.
//!
//! Approximations, said in the notes the mapping returns:
//!
//! - `idle_ns` is when the device is *in* the state: the idle times of the states before it
//!   plus their entry latencies and its own; `entry_ns` is ENLAT, so a command that arrives
//!   during the entry waits for its end and then the exit (up to ENLAT + EXLAT, the worst case
//!   the descriptors allow).
//! - `exit_ns` is EXLAT, the descriptor's maximum, for every wake-up; commands that arrive
//!   while the controller wakes wait for the same wake-up, none pays its own.
//! - Maximum power (MP), idle and active power are not modelled (the model has no power).
//! - Linux's quirks (`NVME_QUIRK_NO_DEEPEST_PS`, `NO_APST`) and a per-device PM QoS latency
//!   tolerance that differs from the module default are not seen.

use nines_core::nvme::IdentifyController;
use nines_flash::config::{PowerDescriptor, PowerState};

/// The nvme_core module parameters `nvme_configure_apst` reads, defaulting to Linux's values
/// (drivers/nvme/host/core.c since the 2021 rework of APST: primary and secondary timeouts with
/// latency tolerances, after Microsoft's and Intel's drivers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApstPolicy {
    /// `default_ps_max_latency_us` (100000): no state with a longer exit latency; 0: APST off.
    pub ps_max_latency_us: u64,
    /// `apst_primary_timeout_ms` (100).
    pub primary_timeout_ms: u64,
    /// `apst_primary_latency_tol_us` (15000).
    pub primary_latency_tol_us: u64,
    /// `apst_secondary_timeout_ms` (2000).
    pub secondary_timeout_ms: u64,
    /// `apst_secondary_latency_tol_us` (100000).
    pub secondary_latency_tol_us: u64,
}

impl Default for ApstPolicy {
    fn default() -> Self {
        ApstPolicy {
            ps_max_latency_us: 100_000,
            primary_timeout_ms: 100,
            primary_latency_tol_us: 15_000,
            secondary_timeout_ms: 2000,
            secondary_latency_tol_us: 100_000,
        }
    }
}

/// The names of the module parameters, in [`ApstPolicy`]'s order.
pub const APST_PARAMETERS: [&str; 5] = [
    "default_ps_max_latency_us",
    "apst_primary_timeout_ms",
    "apst_primary_latency_tol_us",
    "apst_secondary_timeout_ms",
    "apst_secondary_latency_tol_us",
];

/// A policy that cannot be read: one line, what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("APST policy {text:?}: {reason}")]
pub struct ApstPolicyError {
    pub text: String,
    pub reason: String,
}

impl std::str::FromStr for ApstPolicy {
    type Err = ApstPolicyError;

    /// `linux` (today's kernels: the defaults), `legacy` (kernels before the 2021 rework: each
    /// usable state after 50 x (ENLAT + EXLAT), which the kernel still does when
    /// `apst_primary_timeout_ms` is 0), `off` (`default_ps_max_latency_us=0`, as servers set
    /// it), or `NAME=VALUE,...` over the defaults with the module parameters' names (the
    /// `default_`/`apst_` prefixes may be left out).
    fn from_str(text: &str) -> Result<ApstPolicy, ApstPolicyError> {
        let err = |reason: String| ApstPolicyError {
            text: text.to_string(),
            reason,
        };
        let d = ApstPolicy::default();
        match text.trim() {
            "linux" => return Ok(d),
            "legacy" => {
                return Ok(ApstPolicy {
                    primary_timeout_ms: 0,
                    ..d
                });
            }
            "off" => {
                return Ok(ApstPolicy {
                    ps_max_latency_us: 0,
                    ..d
                });
            }
            _ => {}
        }
        let mut p = d;
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (name, value) = item.split_once('=').ok_or_else(|| {
                err(format!(
                    "{item:?} is not NAME=VALUE; give linux, legacy, off or NAME=VALUE,... with \
                     NAME one of {}",
                    APST_PARAMETERS.join(", ")
                ))
            })?;
            let value: u64 = value.trim().parse().map_err(|_| {
                err(format!(
                    "{name}: {value:?} is not a whole number of its unit"
                ))
            })?;
            let name = name.trim();
            let full = APST_PARAMETERS
                .iter()
                .find(|n| {
                    **n == name
                        || n.strip_prefix("default_") == Some(name)
                        || n.strip_prefix("apst_") == Some(name)
                })
                .ok_or_else(|| {
                    err(format!(
                        "unknown parameter {name:?}; use {}",
                        APST_PARAMETERS.join(", ")
                    ))
                })?;
            match *full {
                "default_ps_max_latency_us" => p.ps_max_latency_us = value,
                "apst_primary_timeout_ms" => p.primary_timeout_ms = value,
                "apst_primary_latency_tol_us" => p.primary_latency_tol_us = value,
                "apst_secondary_timeout_ms" => p.secondary_timeout_ms = value,
                _ => p.secondary_latency_tol_us = value,
            }
        }
        if p.primary_timeout_ms > ITPT_MS_MAX || p.secondary_timeout_ms > ITPT_MS_MAX {
            return Err(err(format!(
                "a timeout over {ITPT_MS_MAX} ms does not fit the APST table (24 bits of ms)"
            )));
        }
        Ok(p)
    }
}

impl ApstPolicy {
    /// The values as the kernel's parameters, `NAME=VALUE,...`.
    pub fn describe(&self) -> String {
        let rule = if self.ps_max_latency_us == 0 {
            "APST off"
        } else if self.primary_timeout_ms == 0 || self.primary_latency_tol_us == 0 {
            "50 x (ENLAT + EXLAT), the pre-2021 rule"
        } else {
            "primary/secondary timeouts"
        };
        format!(
            "{rule}: default_ps_max_latency_us={}, apst_primary_timeout_ms={}, \
             apst_primary_latency_tol_us={}, apst_secondary_timeout_ms={}, \
             apst_secondary_latency_tol_us={}",
            self.ps_max_latency_us,
            self.primary_timeout_ms,
            self.primary_latency_tol_us,
            self.secondary_timeout_ms,
            self.secondary_latency_tol_us
        )
    }

    /// The policy from the module parameters' files (`NAME` -> its text, e.g. read from
    /// /sys/module/nvme_core/parameters/NAME); a file missing or not a number keeps the default.
    pub fn from_parameters(read: impl Fn(&str) -> Option<String>) -> ApstPolicy {
        let d = ApstPolicy::default();
        let p = |name: &str, default: u64| {
            read(name)
                .and_then(|t| t.trim().parse::<u64>().ok())
                .unwrap_or(default)
        };
        ApstPolicy {
            ps_max_latency_us: p("default_ps_max_latency_us", d.ps_max_latency_us),
            primary_timeout_ms: p("apst_primary_timeout_ms", d.primary_timeout_ms),
            primary_latency_tol_us: p("apst_primary_latency_tol_us", d.primary_latency_tol_us),
            secondary_timeout_ms: p("apst_secondary_timeout_ms", d.secondary_timeout_ms),
            secondary_latency_tol_us: p(
                "apst_secondary_latency_tol_us",
                d.secondary_latency_tol_us,
            ),
        }
    }
}

/// The model's power states for a device, and what was done, one line each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedPowerStates {
    pub states: Vec<PowerState>,
    pub notes: Vec<String>,
}

/// The largest ITPT the APST table holds (24 bits of milliseconds).
const ITPT_MS_MAX: u64 = (1 << 24) - 1;

/// Maps `controller`'s power states to the model's under `policy` (see the module's
/// documentation for the rules and what is approximated).
pub fn power_states_from_nvme(
    controller: &IdentifyController,
    policy: &ApstPolicy,
) -> MappedPowerStates {
    power_states_from_descriptors(
        &descriptors_of(controller),
        controller.apst_supported,
        policy,
    )
}

/// A controller's power state table as a description's `[[power.descriptors]]`.
pub fn descriptors_of(controller: &IdentifyController) -> Vec<PowerDescriptor> {
    controller
        .power_states
        .iter()
        .map(|p| PowerDescriptor {
            index: p.index,
            operational: p.operational,
            entry_us: p.latency_us_entry,
            exit_us: p.latency_us_exit,
        })
        .collect()
}

/// Maps power state descriptors to the model's states under `policy`, as Linux's
/// `nvme_configure_apst` programs them; `apst_supported` is the controller's APSTA bit.
pub fn power_states_from_descriptors(
    descriptors: &[PowerDescriptor],
    apst_supported: bool,
    policy: &ApstPolicy,
) -> MappedPowerStates {
    let mut notes = Vec::new();
    if !apst_supported {
        notes.push(
            "the controller does not support autonomous power state transitions (APSTA 0): \
             the model gets no power states"
                .into(),
        );
        return MappedPowerStates {
            states: Vec::new(),
            notes,
        };
    }
    if policy.ps_max_latency_us == 0 {
        notes.push(
            "default_ps_max_latency_us is 0: the host keeps APST off, so the model gets no \
             power states"
                .into(),
        );
        return MappedPowerStates {
            states: Vec::new(),
            notes,
        };
    }
    // The states the host programs, deepest first, each with its idle time in the state before.
    let mut chosen: Vec<(&PowerDescriptor, u64)> = Vec::new();
    let mut last_tolerance = u8::MAX;
    for p in descriptors.iter().rev() {
        if p.operational {
            continue;
        }
        let exit_us = u64::from(p.exit_us);
        if exit_us > policy.ps_max_latency_us {
            notes.push(format!(
                "PS{}: exit latency {exit_us} µs is over default_ps_max_latency_us {}: not used",
                p.index, policy.ps_max_latency_us
            ));
            continue;
        }
        let total_us = exit_us + u64::from(p.entry_us);
        let transition_ms = if policy.primary_timeout_ms > 0 && policy.primary_latency_tol_us > 0 {
            match transition_time(total_us, policy, &mut last_tolerance) {
                Some(ms) => ms,
                None => {
                    notes.push(format!(
                        "PS{}: entry + exit latency {total_us} µs: Linux programs a deeper \
                         state of its tolerance, or none: not used",
                        p.index
                    ));
                    continue;
                }
            }
        } else {
            total_us.div_ceil(20).min(ITPT_MS_MAX)
        };
        chosen.push((p, transition_ms));
    }
    // Shallow to deep: each state is entered after its idle time in the state before it.
    chosen.reverse();
    let mut states = Vec::new();
    let mut at_ns = 0u64;
    for (p, transition_ms) in chosen {
        let entry_ns = u64::from(p.entry_us) * 1000;
        at_ns = at_ns
            .saturating_add(transition_ms.saturating_mul(1_000_000))
            .saturating_add(entry_ns);
        // The model wants a positive, increasing idle time.
        let idle_ns = at_ns.max(states.last().map_or(1, |s: &PowerState| s.idle_ns + 1));
        let state = PowerState {
            idle_ns,
            exit_ns: u64::from(p.exit_us) * 1000,
            entry_ns: entry_ns.min(idle_ns),
        };
        notes.push(format!(
            "PS{} (non-operational): entered after {transition_ms} ms idle and {} µs entry, \
             i.e. idle_ns {}, exit_ns {} (EXLAT)",
            p.index, p.entry_us, state.idle_ns, state.exit_ns
        ));
        states.push(state);
    }
    if states.is_empty() && !descriptors.iter().any(|p| !p.operational) {
        notes.push(
            "the controller has no non-operational power state: the model gets no power states"
                .into(),
        );
    }
    notes.push(
        "not modelled: power (MP, idle, active), Linux quirks and per-device latency tolerances"
            .into(),
    );
    MappedPowerStates { states, notes }
}

/// Programs a description's power states as the host's policy does: its `descriptors`
/// become `states` (the descriptors are then cleared); a description with states already, or
/// none, is left as it is. Returns what was done, one line each (empty: nothing to do).
pub fn program(device: &mut nines_flash::DeviceConfig, policy: &ApstPolicy) -> Vec<String> {
    if device.power.descriptors.is_empty() {
        return Vec::new();
    }
    let mapped = power_states_from_descriptors(&device.power.descriptors, true, policy);
    device.power.descriptors.clear();
    device.power.states = mapped.states;
    let mut notes = vec![format!(
        "APST as the host programs it ({})",
        policy.describe()
    )];
    notes.extend(mapped.notes);
    notes
}

/// `nvme_apst_get_transition_time`: the idle time (ms) of a state of `total_us` entry + exit
/// latency, or `None` when the host does not use it (a deeper state of the same tolerance was
/// already chosen, or it is outside both).
fn transition_time(total_us: u64, policy: &ApstPolicy, last: &mut u8) -> Option<u64> {
    if total_us <= policy.primary_latency_tol_us {
        if *last == 1 {
            return None;
        }
        *last = 1;
        return Some(policy.primary_timeout_ms);
    }
    if policy.secondary_timeout_ms > 0 && total_us <= policy.secondary_latency_tol_us {
        if *last <= 2 {
            return None;
        }
        *last = 2;
        return Some(policy.secondary_timeout_ms);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use nines_core::nvme::PowerStateDescriptor;

    fn ps(index: u8, operational: bool, enlat: u32, exlat: u32) -> PowerStateDescriptor {
        PowerStateDescriptor {
            index,
            power_uw_max: 1000,
            operational,
            latency_us_entry: enlat,
            latency_us_exit: exlat,
            power_uw_idle: None,
            power_uw_active: None,
        }
    }

    /// A Samsung 970 EVO Plus's table (as the client-nvme preset cites it): ps0-2 operational,
    /// ps3 210/1200 µs, ps4 2000/8000 µs.
    fn client(apst: bool) -> IdentifyController {
        IdentifyController {
            vendor_id: 0x144d,
            subsystem_vendor_id: 0x144d,
            serial: "S".into(),
            model: "Samsung SSD 970 EVO Plus 1TB".into(),
            firmware: "2B2QEXM7".into(),
            controller_id: 4,
            version: Some("1.3.0".into()),
            namespaces_max: 1,
            volatile_write_cache: true,
            apst_supported: apst,
            temperature_c_warning: None,
            temperature_c_critical: None,
            capacity_bytes_total: None,
            power_states: vec![
                ps(0, true, 0, 0),
                ps(1, true, 0, 0),
                ps(2, true, 0, 0),
                ps(3, false, 210, 1200),
                ps(4, false, 2000, 8000),
            ],
        }
    }

    #[test]
    fn linux_defaults_program_the_deepest_state_within_the_primary_tolerance() {
        // Both states are within 15 ms: Linux keeps only the deeper, ps4, after 100 ms.
        let m = power_states_from_nvme(&client(true), &ApstPolicy::default());
        assert_eq!(
            m.states,
            vec![PowerState {
                idle_ns: 100_000_000 + 2_000_000,
                exit_ns: 8_000_000,
                entry_ns: 2_000_000,
            }]
        );
        assert!(m.notes.iter().any(|n| n.starts_with("PS3: entry + exit")));
        assert!(m.notes.iter().any(|n| n.contains("PS4 (non-operational): entered after 100 ms idle and 2000 µs entry, i.e. idle_ns 102000000, exit_ns 8000000")), "{:?}", m.notes);
    }

    #[test]
    fn primary_and_secondary_states_chain() {
        // ps3 within 15 ms (primary), ps4 at 60 ms total within 100 ms (secondary, 2 s more).
        let mut c = client(true);
        c.power_states[4] = ps(4, false, 10_000, 50_000);
        let m = power_states_from_nvme(&c, &ApstPolicy::default());
        assert_eq!(
            m.states,
            vec![
                PowerState {
                    idle_ns: 100_000_000 + 210_000,
                    exit_ns: 1_200_000,
                    entry_ns: 210_000,
                },
                PowerState {
                    idle_ns: 100_000_000 + 210_000 + 2_000_000_000 + 10_000_000,
                    exit_ns: 50_000_000,
                    entry_ns: 10_000_000,
                },
            ]
        );
        // An exit latency over the host's limit is not used.
        let tight = ApstPolicy {
            ps_max_latency_us: 40_000,
            ..ApstPolicy::default()
        };
        let m = power_states_from_nvme(&c, &tight);
        assert_eq!(m.states.len(), 1);
        assert!(
            m.notes
                .iter()
                .any(|n| n.contains("PS4: exit latency 50000 µs is over"))
        );
    }

    #[test]
    fn without_the_primary_policy_every_state_after_50_times_its_latency() {
        // The older heuristic: ps3 after 70.5 ms (1410 µs x 50), ps4 500 ms after that.
        let old = ApstPolicy {
            primary_timeout_ms: 0,
            ..ApstPolicy::default()
        };
        let m = power_states_from_nvme(&client(true), &old);
        assert_eq!(
            m.states,
            vec![
                PowerState {
                    idle_ns: 71_000_000 + 210_000,
                    exit_ns: 1_200_000,
                    entry_ns: 210_000,
                },
                PowerState {
                    idle_ns: 71_000_000 + 210_000 + 500_000_000 + 2_000_000,
                    exit_ns: 8_000_000,
                    entry_ns: 2_000_000,
                },
            ]
        );
        // A state with no latency at all still gets a positive, increasing idle time.
        let mut c = client(true);
        c.power_states[3] = ps(3, false, 0, 0);
        c.power_states[4] = ps(4, false, 0, 0);
        let m = power_states_from_nvme(&c, &old);
        assert_eq!(m.states[0].idle_ns, 1);
        assert_eq!(m.states[1].idle_ns, 2);
    }

    #[test]
    fn no_apst_no_states_said_why() {
        let m = power_states_from_nvme(&client(false), &ApstPolicy::default());
        assert!(m.states.is_empty() && m.notes[0].contains("APSTA 0"));
        let off = ApstPolicy {
            ps_max_latency_us: 0,
            ..ApstPolicy::default()
        };
        let m = power_states_from_nvme(&client(true), &off);
        assert!(m.states.is_empty() && m.notes[0].contains("APST off"));
        // QEMU's controller: one operational state.
        let mut c = client(true);
        c.power_states.truncate(1);
        let m = power_states_from_nvme(&c, &ApstPolicy::default());
        assert!(m.states.is_empty());
        assert!(
            m.notes
                .iter()
                .any(|n| n.contains("no non-operational power state"))
        );
    }

    #[test]
    fn policies_are_named_or_written_as_the_kernel_parameters() {
        let d = ApstPolicy::default();
        assert_eq!("linux".parse::<ApstPolicy>().unwrap(), d);
        assert_eq!(
            "legacy".parse::<ApstPolicy>().unwrap().primary_timeout_ms,
            0
        );
        assert_eq!("off".parse::<ApstPolicy>().unwrap().ps_max_latency_us, 0);
        let p: ApstPolicy =
            "apst_primary_timeout_ms=50, secondary_timeout_ms=0,ps_max_latency_us=5000"
                .parse()
                .unwrap();
        assert_eq!(
            p,
            ApstPolicy {
                primary_timeout_ms: 50,
                secondary_timeout_ms: 0,
                ps_max_latency_us: 5000,
                ..d
            }
        );
        for (bad, says) in [
            ("fast", "NAME=VALUE"),
            ("primary_timeout=1", "unknown parameter"),
            ("apst_primary_timeout_ms=-1", "whole number"),
            ("apst_primary_timeout_ms=16777216", "24 bits"),
        ] {
            let e = bad.parse::<ApstPolicy>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_description_with_descriptors_is_programmed_by_the_policy() {
        let mut dev = nines_flash::DeviceConfig::preset("client-nvme").unwrap();
        assert!(dev.power.states.is_empty() && dev.power.descriptors.len() == 2);
        let notes = program(&mut dev, &ApstPolicy::default());
        assert!(dev.power.descriptors.is_empty());
        assert_eq!(
            dev.power.states,
            [PowerState {
                idle_ns: 102_000_000,
                exit_ns: 8_000_000,
                entry_ns: 2_000_000
            }]
        );
        assert!(notes[0].contains("primary/secondary"), "{notes:?}");
        let mut dev = nines_flash::DeviceConfig::preset("client-nvme").unwrap();
        program(&mut dev, &"legacy".parse().unwrap());
        assert_eq!(dev.power.states.len(), 2);
        let mut dev = nines_flash::DeviceConfig::preset("client-nvme").unwrap();
        program(&mut dev, &"off".parse().unwrap());
        assert!(dev.power.states.is_empty() && dev.power.descriptors.is_empty());
        // A description without descriptors is the policy's business no more.
        let mut dev = nines_flash::DeviceConfig::preset("p4600").unwrap();
        assert!(program(&mut dev, &ApstPolicy::default()).is_empty());
    }

    proptest::proptest! {
        /// Any text: a policy or one line, never a panic.
        #[test]
        fn any_policy_text_parses_or_says_why(text in "\\PC{0,60}") {
            if let Err(e) = text.parse::<ApstPolicy>() {
                proptest::prop_assert!(!e.to_string().contains('\n'));
            }
        }
    }

    #[test]
    fn parameters_are_read_with_defaults_for_the_rest() {
        let p = ApstPolicy::from_parameters(|name| match name {
            "default_ps_max_latency_us" => Some("0\n".into()),
            "apst_primary_timeout_ms" => Some("junk".into()),
            _ => None,
        });
        assert_eq!(
            p,
            ApstPolicy {
                ps_max_latency_us: 0,
                ..ApstPolicy::default()
            }
        );
    }

    #[test]
    fn mapped_idle_times_are_positive_and_increasing() {
        // The model's rule for [[power.states]], over a grid of latencies up to the extremes.
        let grid = [0u32, 1, 999, 15_000, 100_000, u32::MAX];
        for policy in [
            ApstPolicy::default(),
            ApstPolicy {
                primary_timeout_ms: 0,
                ps_max_latency_us: u64::MAX,
                ..ApstPolicy::default()
            },
        ] {
            for &a in &grid {
                for &b in &grid {
                    let mut c = client(true);
                    c.power_states[3] = ps(3, false, a, b);
                    c.power_states[4] = ps(4, false, b, a);
                    let m = power_states_from_nvme(&c, &policy);
                    assert!(
                        m.states.windows(2).all(|w| w[0].idle_ns < w[1].idle_ns)
                            && m.states
                                .iter()
                                .all(|s| s.idle_ns > 0 && s.entry_ns <= s.idle_ns),
                        "{m:?}"
                    );
                }
            }
        }
    }
}
