//! `nines merge`: runs from many hosts (or simulations) into one report, by adding their
//! histograms exactly (nines_core::merge). fio json+ results join too.

use std::io::Write as _;
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
    /// Replace the output file if it exists
    #[arg(long)]
    pub force: bool,
    /// No table on stdout
    #[arg(short, long)]
    pub quiet: bool,
}

/// Reads one run: a nines report, or fio json+ (recognised by its "fio version" key).
pub fn read_run(path: &std::path::Path) -> Result<MergeInput> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("{file}: cannot read"))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{file}: not JSON (give nines --json or fio json+ files)"))?;
    let report = if v.get("fio version").is_some() {
        from_fio_json(&file, &v)?
    } else {
        Report::from_json(&text).with_context(|| format!("{file}: not a nines report"))?
    };
    Ok(MergeInput { file, report })
}

pub fn run(args: Args) -> Result<()> {
    if args.output.exists() && !args.force {
        bail!(
            "{} exists; choose another -o or add --force to replace it",
            args.output.display()
        );
    }
    if let Some(same) = args.runs.iter().find(|r| {
        r.canonicalize()
            .ok()
            .is_some_and(|c| args.output.canonicalize().ok() == Some(c))
    }) {
        bail!("{} is both an input and the output", same.display());
    }
    let inputs = args
        .runs
        .iter()
        .map(|p| read_run(p))
        .collect::<Result<Vec<_>>>()?;
    let merged = merge(inputs)?;
    // Written whole under a temporary name and renamed: a failed merge leaves no half file.
    let tmp = args.output.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp)
        .with_context(|| format!("-o {}: cannot create", args.output.display()))?;
    f.write_all(merged.to_json().as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("-o {}: write failed", args.output.display()))?;
    std::fs::rename(&tmp, &args.output)
        .with_context(|| format!("-o {}: cannot rename into place", args.output.display()))?;
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
