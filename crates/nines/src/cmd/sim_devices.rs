//! `nines sim --list-devices`: the shipped device presets, what each models and which variance
//! sources it turns on (each `NAME` also exists as `NAME-ideal`, the clean model).

use std::io::Write;

use anyhow::{Context, Result};
use nines_flash::{DeviceConfig, preset_names};

/// One line per preset: name, class, capacity, its mechanisms, then its description.
pub fn list(out: &mut impl Write) -> Result<()> {
    writeln!(
        out,
        "{:<18} {:<10} {:<44} variance sources and GC mode (--ideal or NAME-ideal: none, preempt GC)",
        "name", "capacity", "class"
    )?;
    for name in preset_names() {
        let d = DeviceConfig::preset(name).with_context(|| format!("preset {name}"))?;
        let sources = d.mechanisms();
        let sources = if sources.is_empty() {
            "none (gc preempt)".to_string()
        } else {
            let mut s = sources.join(", ");
            if !s.contains("gc-") {
                s.push_str(", gc preempt");
            }
            s
        };
        writeln!(
            out,
            "{:<18} {:<10} {:<44} {}",
            name,
            format!("{:.0} GB", d.logical_bytes() as f64 / 1e9),
            d.class,
            sources
        )?;
        writeln!(out, "{:<18} {}", "", d.description)?;
    }
    Ok(())
}
