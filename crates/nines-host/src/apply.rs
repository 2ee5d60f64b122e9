//! Applying a plan's runtime changes and reverting them exactly.
//!
//! Order: read every previous value (nothing is written if one cannot be read), save them to the
//! state file, then write each change and read it back. If a write fails or does not stick,
//! everything written so far is restored in reverse order before the error is returned.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::plan::{Plan, normalize_value};

pub const STATE_SCHEMA_NAME: &str = "nines-tune-state";
pub const STATE_SCHEMA_VERSION: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("cannot read {path} before changing it: {msg}; nothing was changed")]
    ReadBefore { path: String, msg: String },
    #[error("cannot write state file {path}: {msg}; nothing was changed")]
    State { path: String, msg: String },
    #[error("writing {value} to {path} failed: {msg}; {rolled_back} earlier change(s) rolled back{}", rollback_suffix(.rollback_failures))]
    Write {
        path: String,
        value: String,
        msg: String,
        rolled_back: usize,
        rollback_failures: Vec<String>,
    },
    #[error("cannot read state {path}: {msg}; give the state file `nines tune --apply` wrote")]
    ReadState { path: String, msg: String },
}

fn rollback_suffix(f: &[String]) -> String {
    if f.is_empty() {
        String::new()
    } else {
        format!("; could NOT restore: {}", f.join("; "))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StateEntry {
    pub kind: String,
    pub path: String,
    pub previous: String,
    pub applied: String,
}

/// How irqbalance was stopped, so revert can start it again.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IrqbalanceStop {
    /// "systemd" (systemctl stop irqbalance) or "signal" (SIGTERM to `pids`).
    pub method: String,
    pub pids: Vec<u32>,
    /// The stopped process's arguments, to restart it by hand when not under systemd.
    pub args: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct State {
    pub schema: String,
    pub schema_version: u32,
    pub root: String,
    /// In application order; revert walks it backwards.
    pub entries: Vec<StateEntry>,
    pub irqbalance: Option<IrqbalanceStop>,
    /// Changes skipped because the kernel refused them (with `skip_refused_irqs`), one line each.
    #[serde(default)]
    pub skipped: Vec<String>,
}

impl State {
    pub fn load(path: &Path) -> Result<State, ApplyError> {
        let p = path.display().to_string();
        let s = nines_core::input::read_to_string(path, nines_core::input::SETTINGS_MAX_BYTES)
            .map_err(|e| ApplyError::ReadState {
                path: p.clone(),
                msg: e.to_string(),
            })?;
        let st: State = serde_json::from_str(&s).map_err(|e| ApplyError::ReadState {
            path: p.clone(),
            msg: e.to_string(),
        })?;
        if st.schema != STATE_SCHEMA_NAME || st.schema_version != STATE_SCHEMA_VERSION {
            return Err(ApplyError::ReadState {
                path: p,
                msg: format!("not a {STATE_SCHEMA_NAME} v{STATE_SCHEMA_VERSION} file"),
            });
        }
        for e in &st.entries {
            if let Some(msg) = crate::plan::change_error(&e.kind, &e.path, &e.previous) {
                return Err(ApplyError::ReadState { path: p, msg });
            }
        }
        Ok(st)
    }

    fn save(&self, path: &Path) -> Result<(), ApplyError> {
        let text = serde_json::to_string_pretty(self).unwrap_or_default();
        // Written to a temporary name then renamed, so a crash never leaves half a state file.
        // The temporary name is this process's own, made new (O_EXCL: never through a
        // symlink, never over a file someone else left there), as the binary's output layer
        // names its partial files.
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let tmp = path.with_file_name(format!(".{name}.nines-partial-{}", std::process::id()));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
            .and_then(|_| std::fs::rename(&tmp, path))
            .map_err(|e| ApplyError::State {
                path: path.display().to_string(),
                msg: e.to_string(),
            })
    }
}

fn host_path(root: &Path, abs: &str) -> PathBuf {
    root.join(abs.trim_start_matches('/'))
}

fn read_norm(root: &Path, abs: &str) -> Result<String, String> {
    std::fs::read_to_string(host_path(root, abs))
        .map(|s| normalize_value(abs, &s))
        .map_err(|e| e.to_string())
}

struct WriteError {
    msg: String,
    /// The kernel refused the write outright (EPERM or EIO), as it does for managed interrupts.
    refused: bool,
}

/// Writes `value` and checks that it reads back the same.
fn write_checked(root: &Path, abs: &str, value: &str) -> Result<(), WriteError> {
    std::fs::write(host_path(root, abs), value).map_err(|e| WriteError {
        msg: e.to_string(),
        refused: matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EIO)),
    })?;
    let back = read_norm(root, abs).map_err(|e| WriteError {
        msg: format!("read back: {e}"),
        refused: false,
    })?;
    let want = normalize_value(abs, value);
    if back != want {
        return Err(WriteError {
            msg: format!("the kernel kept `{back}` instead of `{want}`"),
            refused: false,
        });
    }
    Ok(())
}

/// Options of `nines tune --apply`.
#[derive(Debug, Clone, Default)]
pub struct ApplyOptions {
    pub stop_irqbalance: bool,
    /// Skip (and report) interrupts whose affinity the kernel refuses to change (EPERM/EIO:
    /// kernel-managed queue interrupts) instead of rolling everything back.
    pub skip_refused_irqs: bool,
}

/// Applies `plan` on the host under `root`, saving previous values to `state_path` first.
pub fn apply(
    root: &Path,
    plan: &Plan,
    state_path: &Path,
    opts: &ApplyOptions,
) -> Result<State, ApplyError> {
    let mut entries = Vec::with_capacity(plan.changes.len());
    for c in &plan.changes {
        let prev = read_norm(root, &c.path).map_err(|msg| ApplyError::ReadBefore {
            path: c.path.clone(),
            msg,
        })?;
        entries.push(StateEntry {
            kind: c.kind.clone(),
            path: c.path.clone(),
            previous: prev,
            applied: c.value.clone(),
        });
    }
    let mut state = State {
        schema: STATE_SCHEMA_NAME.into(),
        schema_version: STATE_SCHEMA_VERSION,
        root: root.display().to_string(),
        entries,
        irqbalance: None,
        skipped: Vec::new(),
    };
    state.save(state_path)?;
    let mut i = 0;
    while i < state.entries.len() {
        let e = &state.entries[i];
        if let Err(err) = write_checked(root, &e.path, &e.applied) {
            if opts.skip_refused_irqs && e.kind == "irq_affinity" && err.refused {
                state.skipped.push(format!(
                    "{}: {} (kernel-managed interrupt; left at {})",
                    e.path, err.msg, e.previous
                ));
                state.entries.remove(i);
                state.save(state_path)?;
                continue;
            }
            let msg = if e.kind == "irq_affinity" && err.refused {
                format!(
                    "{} (a kernel-managed interrupt: re-run with --skip-refused-irqs to change the rest)",
                    err.msg
                )
            } else {
                err.msg
            };
            let e = &state.entries[i];
            let failures = restore(root, &state.entries[..i]);
            return Err(ApplyError::Write {
                path: e.path.clone(),
                value: e.applied.clone(),
                msg,
                rolled_back: i,
                rollback_failures: failures,
            });
        }
        i += 1;
    }
    if opts.stop_irqbalance {
        state.irqbalance = stop_irqbalance(root);
        state.save(state_path)?;
    }
    Ok(state)
}

/// Restores entries in reverse order; returns one line per value that could not be restored.
fn restore(root: &Path, entries: &[StateEntry]) -> Vec<String> {
    let mut failures = Vec::new();
    for e in entries.iter().rev() {
        if let Err(err) = write_checked(root, &e.path, &e.previous) {
            failures.push(format!("{} (wanted `{}`): {}", e.path, e.previous, err.msg));
        }
    }
    failures
}

/// What a revert did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RevertOutcome {
    pub restored: usize,
    /// One line per value that could not be restored.
    pub failures: Vec<String>,
}

/// Restores every value in `state` under `root`; irqbalance is started again if apply stopped it.
pub fn revert(root: &Path, state: &State) -> RevertOutcome {
    let failures = restore(root, &state.entries);
    let mut out = RevertOutcome {
        restored: state.entries.len() - failures.len(),
        failures,
    };
    if let Some(ib) = &state.irqbalance {
        match ib.method.as_str() {
            "systemd" => match Command::new("systemctl")
                .args(["start", "irqbalance"])
                .status()
            {
                Ok(s) if s.success() => {}
                Ok(s) => out.failures.push(format!(
                    "systemctl start irqbalance exited with {s}: start it by hand"
                )),
                Err(e) => out
                    .failures
                    .push(format!("systemctl start irqbalance: {e}: start it by hand")),
            },
            _ => out.failures.push(format!(
                "irqbalance was stopped by signal; restart it by hand: {}",
                if ib.args.is_empty() {
                    "irqbalance".to_string()
                } else {
                    ib.args.join(" ")
                }
            )),
        }
    }
    out
}

/// Stops irqbalance: with systemctl when it manages it, else SIGTERM to each process.
fn stop_irqbalance(root: &Path) -> Option<IrqbalanceStop> {
    let fs = crate::fs::HostFs::new(root);
    let mut pids = Vec::new();
    let mut args = Vec::new();
    for p in fs
        .list("/proc")
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p.parse::<u32>().ok())
    {
        if fs
            .read_value(&format!("/proc/{p}/comm"))
            .is_ok_and(|c| c == "irqbalance")
        {
            pids.push(p);
            if let Ok(a) = fs.read(&format!("/proc/{p}/cmdline")) {
                args = a
                    .split('\0')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
            }
        }
    }
    if pids.is_empty() {
        return None;
    }
    if Command::new("systemctl")
        .args(["stop", "irqbalance"])
        .status()
        .is_ok_and(|s| s.success())
    {
        return Some(IrqbalanceStop {
            method: "systemd".into(),
            pids,
            args,
        });
    }
    for &p in &pids {
        // SAFETY: kill(2) with a pid we just read and SIGTERM has no memory-safety preconditions.
        unsafe {
            libc::kill(p as libc::pid_t, libc::SIGTERM);
        }
    }
    Some(IrqbalanceStop {
        method: "signal".into(),
        pids,
        args,
    })
}

/// Whether this process runs as root (tune refuses otherwise on the live host).
pub fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
