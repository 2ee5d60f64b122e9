//! `nines merge`: runs from many hosts (or simulations) into one report, by adding their
//! histograms exactly (nines_core::merge). fio json+ results join too.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Parser;
use nines_core::merge::{MergeInput, from_fio_json, merge};
use nines_core::report::Report;

#[derive(Parser, Debug)]
pub struct Args {
    /// Run reports to merge: nines `--json` files (profile, sim, or an earlier merge) or fio
    /// `--output-format=json+` files
    #[arg(required = true, value_name = "RUN.json")]
    pub runs: Vec<PathBuf>,
    /// Where to write the merged report (JSON, the same schema; `nines report` and `nines
    /// compare` read it)
    #[arg(short, long, value_name = "MERGED.json")]
    pub output: PathBuf,
    /// Accepted for scripts of older nines: an existing -o file is replaced (atomically, as
    /// every verb's outputs are), with or without it.
    #[arg(long, hide = true)]
    pub replace: bool,
    /// Once the name of --replace (--force only ever means writing over a device's data);
    /// refused with that advice.
    #[arg(long, hide = true)]
    pub force: bool,
    /// Merge runs whose files are identical (the same run given twice counts its I/Os twice;
    /// refused unless this is given)
    #[arg(long)]
    pub allow_duplicates: bool,
    /// Print nothing but errors and warnings: no table or summary on stdout, no live status or
    /// progress on stderr (which is drawn only on a terminal anyway).
    #[arg(short, long)]
    pub quiet: bool,
}

fn content_hash(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// Reads one run: a nines report, or fio json+ (recognised by its "fio version" key).
pub fn read_run(path: &std::path::Path) -> Result<MergeInput> {
    Ok(read_run_text(path)?.0)
}

/// [`read_run`], and the file's text (to find the same run given twice).
fn read_run_text(path: &std::path::Path) -> Result<(MergeInput, String)> {
    let file = path.display().to_string();
    let text = nines_core::input::read_to_string(path, nines_core::input::REPORT_MAX_BYTES)
        .with_context(|| format!("{file}: cannot read"))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{file}: not JSON (give nines --json or fio json+ files)"))?;
    let report = if v.get("fio version").is_some() {
        from_fio_json(&file, &v)?
    } else {
        Report::from_json(&text).with_context(|| format!("{file}: not a nines report"))?
    };
    Ok((MergeInput { file, report }, text))
}

pub fn run(args: Args) -> Result<()> {
    // The inputs are never an output (cmd/output.rs refuses -o naming one of them).
    super::output::note_inputs("input", args.runs.iter().map(PathBuf::as_path));
    let regular = super::output::is_regular_destination("-o", &args.output)?;
    if args.force {
        bail!(
            "merge replaces an existing -o file by itself: drop --force (it only ever means \
             writing over a device's data)"
        );
    }
    let mut inputs = Vec::with_capacity(args.runs.len());
    let mut hashes: Vec<u64> = Vec::with_capacity(args.runs.len());
    for (i, p) in args.runs.iter().enumerate() {
        let (input, text) = read_run_text(p)?;
        // The same run twice (by content: a copy or a second name) counts its I/Os twice.
        let hash = content_hash(&text);
        if !args.allow_duplicates
            && let Some(j) = hashes.iter().enumerate().position(|(j, &h)| {
                h == hash && read_run_text(&args.runs[j]).is_ok_and(|(_, t)| t == text)
            })
        {
            bail!(
                "{} and {} are the same run (identical contents): merging it twice counts its \
                 I/Os twice; drop one, or pass --allow-duplicates if that is meant",
                args.runs[j].display(),
                args.runs[i].display()
            );
        }
        hashes.push(hash);
        inputs.push(input);
    }
    let logs: Vec<Option<PathBuf>> = inputs
        .iter()
        .zip(&args.runs)
        .map(|(i, path)| {
            let l = PathBuf::from(i.report.config.hdr_log.as_ref()?);
            let l = if l.is_absolute() {
                l
            } else {
                path.parent().unwrap_or(std::path::Path::new(".")).join(l)
            };
            // A run copied without its interval log (only the JSON gathered) still merges: its
            // histograms are exact; only the merged log lacks its intervals, and that is said.
            if std::fs::symlink_metadata(&l).is_err() {
                eprintln!(
                    "nines merge: warning: {}: its interval log {} is not there; merging without its intervals (copy it beside the run to include them)",
                    path.display(),
                    l.display()
                );
                return None;
            }
            Some(l)
        })
        .collect();
    let sources: Vec<RunTags> = inputs
        .iter()
        .map(|i| {
            let names = i
                .report
                .devices
                .iter()
                .flat_map(|d| {
                    nines_core::op::Op::ALL
                        .into_iter()
                        .map(move |op| (nines_core::stats::hdr_tag(&d.name, op), d.name.clone()))
                })
                .collect();
            (i.report.config.start_unix_ns, names)
        })
        .collect();
    let mut merged = merge(inputs)?;
    super::output::note_inputs(
        "input's interval log",
        logs.iter().flatten().map(PathBuf::as_path),
    );
    // The merged interval log goes beside a regular output file only (never /dev/null.hlog),
    // under the rules -o follows: replaced when it exists, never on -o or an input; and since
    // nobody named it, never written through a symbolic link that stands there.
    if regular && logs.iter().any(Option::is_some) {
        let option = "-o (its interval log)";
        let log_path =
            super::output::derived_output(option, &args.output, "hlog", "give -o a regular file")?;
        super::output::check_distinct(&[
            ("-o", Some(args.output.as_path())),
            (option, Some(log_path.as_path())),
        ])?;
        if std::fs::symlink_metadata(&log_path).is_ok_and(|m| m.file_type().is_symlink()) {
            bail!(
                "{} is a symbolic link (where the merged interval log beside -o goes); remove it \
                 or choose another -o",
                log_path.display()
            );
        }
        merge_interval_logs(&merged, &logs, &sources, &log_path)?;
        merged.config.hdr_log = Some(
            log_path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
    }
    // Written whole under a temporary name and renamed: a failed merge leaves no half file.
    super::output::write_all("-o", &args.output, merged.to_json().as_bytes())?;
    if !args.quiet {
        print!("{}", nines_report::table::render(&merged));
        println!(
            "merged {} runs ({} devices) into {}",
            merged.sources.len(),
            merged.devices.len(),
            args.output.display()
        );
    }
    Ok(())
}

/// A run's start time and its interval-log tags with the device each names.
type RunTags = (Option<u64>, Vec<(String, String)>);

/// The sources' interval logs (`--hdr-log`) as one log beside the merged report: every interval
/// kept, tagged with its merged device name (`label:device.read`), its start moved by its run's
/// start relative to the earliest run (0 for simulated runs, whose time is virtual). Sources
/// without a log are left out (said in the report's warnings).
fn merge_interval_logs(
    merged: &Report,
    logs: &[Option<PathBuf>],
    sources: &[RunTags],
    out: &std::path::Path,
) -> Result<()> {
    use hdrhistogram::serialization::V2DeflateSerializer;
    use hdrhistogram::serialization::interval_log::{
        IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag,
    };
    let base = merged.config.start_unix_ns.unwrap_or(0);
    let mut text = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    let start = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(base);
    {
        let mut w = IntervalLogWriterBuilder::new()
            .add_comment(&format!("nines merge of {} runs", merged.sources.len()))
            .add_comment(&nines_core::hdrlog::FORMAT_VERSION_LINE[1..])
            .with_start_time(start)
            .with_base_time(start)
            .with_max_value_divisor(nines_core::hdrlog::MAX_VALUE_DIVISOR)
            .begin_log_with(&mut text, &mut serializer)?;
        for ((src, log), (start_ns, names)) in merged.sources.iter().zip(logs).zip(sources) {
            let Some(log) = log else { continue };
            let bytes = nines_core::input::read(log, nines_core::input::HDR_LOG_MAX_BYTES)
                .with_context(|| {
                    format!(
                        "{}: its interval log {} cannot be read",
                        src.file,
                        log.display()
                    )
                })?;
            let shift = start_ns.map_or(0, |s| s.saturating_sub(base));
            for (i, entry) in IntervalLogIterator::new(&bytes).enumerate() {
                let entry = entry.map_err(|e| {
                    anyhow::anyhow!(
                        "{}: entry {} is not an interval: {}",
                        log.display(),
                        i + 1,
                        nines_core::hdrlog::describe_log_error(&e)
                    )
                })?;
                let LogEntry::Interval(h) = entry else {
                    continue;
                };
                let tag = h.tag().map(|t| t.as_str().to_string()).unwrap_or_default();
                let (dev, op) = match tag.rsplit_once('.') {
                    Some((d, "write")) => (d.to_string(), nines_core::op::Op::Write),
                    Some((d, "read")) => (d.to_string(), nines_core::op::Op::Read),
                    _ => (tag.clone(), nines_core::op::Op::Read),
                };
                let name = names
                    .iter()
                    .find(|(t, _)| *t == tag)
                    .map(|(_, n)| n.clone())
                    .unwrap_or(dev);
                let new_tag = nines_core::stats::hdr_tag(&format!("{}:{name}", src.label), op);
                let hist = nines_core::hdrlog::decode_histogram(h.encoded_histogram())
                    .map_err(|e| anyhow::anyhow!("{}: {e}", log.display()))?;
                w.write_histogram(
                    &hist,
                    h.start_timestamp() + std::time::Duration::from_nanos(shift),
                    h.duration(),
                    Tag::new(&new_tag),
                )
                .map_err(|e| anyhow::anyhow!("{}: {e}", out.display()))?;
            }
        }
    }
    super::output::write_all("-o (its interval log)", out, &text)?;
    Ok(())
}
