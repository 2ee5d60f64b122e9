//! Parsers of the kernel's text formats. Each takes arbitrary text and never panics (property
//! tested); malformed input yields a one-line [`ParseError`].
//!
//! Written by hand because these are the product itself: no crate parses /proc/interrupts or
//! sysfs cpulists in the kernel's exact formats.

use std::collections::BTreeMap;

/// CPU numbers above this are refused (the kernel's NR_CPUS maximum is 8192).
pub const CPU_ID_MAX: usize = 8191;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {msg}")]
pub struct ParseError {
    pub what: &'static str,
    pub msg: String,
}

fn perr(what: &'static str, msg: impl Into<String>) -> ParseError {
    ParseError {
        what,
        msg: msg.into(),
    }
}

/// Parses a kernel cpulist ("0-3,8,10-11", "" = none; also "0-15:2/4" stride groups).
/// Returns sorted, deduplicated CPU numbers.
pub fn parse_cpulist(s: &str) -> Result<Vec<usize>, ParseError> {
    const W: &str = "cpu list";
    let s = s.trim();
    let mut cpus = Vec::new();
    if s.is_empty() || s == "(null)" {
        return Ok(cpus);
    }
    for part in s.split(',') {
        let part = part.trim();
        let (range, stride) = match part.split_once(':') {
            Some((r, g)) => {
                let (used, group) = g
                    .split_once('/')
                    .ok_or_else(|| perr(W, format!("`{part}`: expected RANGE:USED/GROUP")))?;
                let used = parse_cpu(used, W)?;
                let group = parse_cpu(group, W)?;
                if used == 0 || group == 0 || used > group {
                    return Err(perr(W, format!("`{part}`: bad group size")));
                }
                (r, Some((used, group)))
            }
            None => (part, None),
        };
        let (lo, hi) = match range.split_once('-') {
            Some((a, b)) => (parse_cpu(a, W)?, parse_cpu(b, W)?),
            None => {
                let c = parse_cpu(range, W)?;
                (c, c)
            }
        };
        if lo > hi {
            return Err(perr(W, format!("`{part}`: range goes backwards")));
        }
        for c in lo..=hi {
            match stride {
                Some((used, group)) if (c - lo) % group >= used => {}
                _ => cpus.push(c),
            }
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

fn parse_cpu(s: &str, what: &'static str) -> Result<usize, ParseError> {
    let s = s.trim();
    let c: usize = s
        .parse()
        .map_err(|_| perr(what, format!("`{s}` is not a CPU number")))?;
    if c > CPU_ID_MAX {
        return Err(perr(what, format!("CPU {c} is above {CPU_ID_MAX}")));
    }
    Ok(c)
}

/// Formats CPU numbers in the kernel's cpulist form ("0-3,8").
pub fn format_cpulist(cpus: &[usize]) -> String {
    let mut v: Vec<usize> = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if j == i {
            out.push_str(&v[i].to_string());
        } else {
            out.push_str(&format!("{}-{}", v[i], v[j]));
        }
        i = j + 1;
    }
    out
}

/// One row of /proc/interrupts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IrqRow {
    /// "36" for a numbered IRQ, "LOC", "NMI"... for the architecture's rows.
    pub id: String,
    /// The IRQ number when `id` is numeric.
    pub irq: Option<u32>,
    /// Count per CPU column, in the order of [`Interrupts::cpus`] (shorter for "ERR:"-like rows).
    pub counts: Vec<u64>,
    /// Everything after the counts ("PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0").
    pub desc: String,
    /// The handler names ("virtio1-req.0", "nvme0q3"); empty for architecture rows.
    pub actions: Vec<String>,
}

/// /proc/interrupts: the CPU columns and the rows.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Interrupts {
    pub cpus: Vec<usize>,
    pub rows: Vec<IrqRow>,
}

impl Interrupts {
    pub fn row(&self, irq: u32) -> Option<&IrqRow> {
        self.rows.iter().find(|r| r.irq == Some(irq))
    }
}

/// Parses /proc/interrupts.
pub fn parse_interrupts(s: &str) -> Result<Interrupts, ParseError> {
    const W: &str = "/proc/interrupts";
    let mut lines = s.lines();
    let header = lines.next().ok_or_else(|| perr(W, "empty file"))?;
    let mut cpus = Vec::new();
    for tok in header.split_whitespace() {
        let n = tok
            .strip_prefix("CPU")
            .ok_or_else(|| perr(W, format!("header token `{tok}` is not CPUn")))?;
        cpus.push(parse_cpu(n, W)?);
    }
    if cpus.is_empty() {
        return Err(perr(W, "header lists no CPU columns"));
    }
    let mut rows = Vec::new();
    for (lineno, line) in lines.enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (id, rest) = line
            .split_once(':')
            .ok_or_else(|| perr(W, format!("line {}: no `IRQ:` prefix", lineno + 2)))?;
        let id = id.trim().to_string();
        if id.is_empty() || id.contains(char::is_whitespace) {
            return Err(perr(W, format!("line {}: bad IRQ name `{id}`", lineno + 2)));
        }
        let irq = id.parse::<u32>().ok();
        let mut counts = Vec::with_capacity(cpus.len());
        let mut rest = rest;
        while counts.len() < cpus.len() {
            let trimmed = rest.trim_start();
            let end = trimmed.find(char::is_whitespace).unwrap_or(trimmed.len());
            match trimmed[..end].parse::<u64>() {
                Ok(c) if end > 0 => {
                    counts.push(c);
                    rest = &trimmed[end..];
                }
                _ => break,
            }
        }
        if irq.is_some() && counts.len() != cpus.len() {
            return Err(perr(
                W,
                format!(
                    "line {}: IRQ {id} has {} counts for {} CPUs",
                    lineno + 2,
                    counts.len(),
                    cpus.len()
                ),
            ));
        }
        let desc = rest.trim().to_string();
        let actions = if irq.is_some() {
            irq_actions(&desc)
        } else {
            Vec::new()
        };
        rows.push(IrqRow {
            id,
            irq,
            counts,
            desc,
            actions,
        });
    }
    Ok(Interrupts { cpus, rows })
}

/// The handler names at the end of a numbered IRQ's description: after the trigger token
/// ("1-edge", "edge", "fasteoi", "PCI-MSI-edge") when there is one, else the last token.
fn irq_actions(desc: &str) -> Vec<String> {
    let toks: Vec<&str> = desc.split_whitespace().collect();
    let trigger = toks.iter().position(|t| {
        t.ends_with("edge")
            || t.ends_with("level")
            || t.ends_with("fasteoi")
            || *t == "edge"
            || *t == "level"
    });
    let names = match trigger {
        Some(i) => toks[i + 1..].join(" "),
        None => toks.last().map(|t| t.to_string()).unwrap_or_default(),
    };
    names
        .split(',')
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

/// Parses /proc/cmdline into (key, value) pairs, stopping at "--" (the rest goes to init).
pub fn parse_cmdline(s: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for tok in s.split_whitespace() {
        if tok == "--" {
            break;
        }
        match tok.split_once('=') {
            Some((k, v)) => out.push((k.to_string(), Some(v.trim_matches('"').to_string()))),
            None => out.push((tok.to_string(), None)),
        }
    }
    out
}

/// One limit of /proc/PID/limits: `None` = unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limit {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// Parses /proc/PID/limits into a map from the limit's name ("Max realtime priority").
pub fn parse_limits(s: &str) -> Result<BTreeMap<String, Limit>, ParseError> {
    const W: &str = "limits";
    let mut lines = s.lines();
    let header = lines.next().ok_or_else(|| perr(W, "empty file"))?;
    let soft_col = header
        .find("Soft Limit")
        .ok_or_else(|| perr(W, "no `Soft Limit` column in header"))?;
    let mut out = BTreeMap::new();
    for line in lines {
        if line.trim().is_empty() {
            continue;
        }
        let Some(name) = line.get(..soft_col) else {
            return Err(perr(
                W,
                format!("line `{}` is shorter than the header", line.trim()),
            ));
        };
        let mut vals = line[soft_col..].split_whitespace();
        let soft = parse_limit_value(vals.next(), W)?;
        let hard = parse_limit_value(vals.next(), W)?;
        out.insert(name.trim().to_string(), Limit { soft, hard });
    }
    Ok(out)
}

fn parse_limit_value(v: Option<&str>, what: &'static str) -> Result<Option<u64>, ParseError> {
    match v {
        Some("unlimited") => Ok(None),
        Some(n) => n
            .parse()
            .map(Some)
            .map_err(|_| perr(what, format!("`{n}` is not a limit"))),
        None => Err(perr(what, "missing limit value")),
    }
}

/// Parses one hexadecimal capability set line ("CapEff:\t000001fffeffffff") of /proc/PID/status.
pub fn parse_status_caps(s: &str, field: &str) -> Result<u64, ParseError> {
    const W: &str = "status";
    for line in s.lines() {
        if let Some((k, v)) = line.split_once(':')
            && k == field
        {
            let v = v.trim();
            return u64::from_str_radix(v, 16)
                .map_err(|_| perr(W, format!("{field} `{v}` is not hexadecimal")));
        }
    }
    Err(perr(W, format!("no {field} line")))
}

/// Parses a block queue's scheduler file ("none [mq-deadline] kyber"): (active, available).
pub fn parse_scheduler(s: &str) -> (Option<String>, Vec<String>) {
    let mut active = None;
    let mut avail = Vec::new();
    for tok in s.split_whitespace() {
        if let Some(t) = tok.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            active = Some(t.to_string());
            avail.push(t.to_string());
        } else {
            avail.push(tok.to_string());
        }
    }
    if active.is_none() && avail.len() == 1 {
        active = avail.first().cloned();
    }
    (active, avail)
}

/// Parses a decimal integer sysfs value.
pub fn parse_i64(s: &str, what: &'static str) -> Result<i64, ParseError> {
    let t = s.trim();
    t.parse()
        .map_err(|_| perr(what, format!("`{t}` is not an integer")))
}

/// smartd's check interval in seconds from smartd.conf (`-i N` or `--interval=N` in DEFAULT or
/// device lines) or smartd's arguments; `None` when not set (smartd's default is 1800 s).
pub fn smartd_interval_s(text: &str) -> Option<u64> {
    let toks: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == '\0')
        .filter(|t| !t.is_empty())
        .collect();
    let mut found = None;
    for (i, t) in toks.iter().enumerate() {
        if t.starts_with('#') {
            continue;
        }
        let v = if *t == "-i" || *t == "--interval" {
            toks.get(i + 1).copied()
        } else if let Some(v) = t.strip_prefix("--interval=") {
            Some(v)
        } else {
            t.strip_prefix("-i")
                .filter(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()))
        };
        if let Some(n) = v.and_then(|v| v.parse::<u64>().ok()) {
            found = Some(found.map_or(n, |f: u64| f.min(n)));
        }
    }
    found
}

/// Strips comments from a config file (`#` to end of line).
pub fn strip_comments(s: &str) -> String {
    s.lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Sort key that orders nvme2n1 before nvme10n1.
pub fn natural_key(name: &str) -> (String, u64, String) {
    let prefix: String = name.chars().take_while(|c| !c.is_ascii_digit()).collect();
    let rest = &name[prefix.len()..];
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let n = digits.parse().unwrap_or(0);
    (prefix, n, rest[digits.len()..].to_string())
}
