//! `nines compare`: several runs side by side, as a table on stdout and an HTML page.

use std::path::PathBuf;

use anyhow::Context;
use nines_report::compare::{Run, differences, figures, render_html, text_table};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Run JSONs (from `nines profile --json` or `nines sim --json`); the first is the baseline.
    #[arg(value_name = "RUN.json", num_args = 2.., required = true)]
    pub runs: Vec<PathBuf>,
    /// Write the comparison page (HTML, every figure) here [default: no page; the table alone].
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write every figure as a PNG into this directory.
    #[arg(long, value_name = "DIR")]
    pub png: Option<PathBuf>,
    /// Names for the runs, comma separated, in order [default: the file names].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub labels: Option<Vec<String>>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    super::output::note_inputs("input", args.runs.iter().map(PathBuf::as_path));
    if let Some(out) = &args.output {
        super::output::check_path("-o", out)?;
    }
    if let Some(l) = &args.labels
        && l.len() != args.runs.len()
    {
        anyhow::bail!(
            "--labels gives {} but {} given; give one label per run",
            nines_report::run::count(l.len(), "label", "labels"),
            nines_report::run::count(args.runs.len(), "run was", "runs were")
        );
    }
    let mut runs = Vec::with_capacity(args.runs.len());
    for (i, path) in args.runs.iter().enumerate() {
        let report = super::report::read_report(path)?;
        let label = match &args.labels {
            Some(l) => l[i].clone(),
            None => default_label(&args.runs, i),
        };
        runs.push(Run { label, report });
    }
    for w in differences(&runs) {
        if w.ends_with(nines_report::compare::SHOWS_ITS_EFFECT) {
            eprintln!("nines: {w}");
        } else {
            eprintln!("nines: warning: {w}");
        }
    }
    print!("{}", text_table(&runs));
    let figs = figures(&runs);
    // The page is moved into place only when the PNGs were written too.
    let pending = match &args.output {
        Some(out) => {
            let html = render_html(&runs, &figs)?;
            let (pending, mut file) = super::output::PendingOutput::create("-o", out)?;
            std::io::Write::write_all(&mut file, html.as_bytes())
                .with_context(|| format!("-o {}: write failed", out.display()))?;
            Some(pending)
        }
        None => None,
    };
    if let Some(dir) = &args.png {
        super::report::write_pngs(dir, &figs)?;
    }
    if let Some(pending) = pending {
        let out = pending.path().to_path_buf();
        pending.commit()?;
        eprintln!(
            "nines: wrote {} ({})",
            out.display(),
            nines_report::run::count(figs.len(), "figure", "figures")
        );
    } else if args.png.is_none() {
        // report writes RUN.html by default; compare has no single run to name a page after,
        // so it writes none unless asked, and says so rather than staying silent.
        eprintln!(
            "next: add -o compare.html for the comparison page ({}), or --png DIR",
            nines_report::run::count(figs.len(), "figure", "figures")
        );
    }
    Ok(())
}

/// The file stem, or the whole path when two runs share a stem.
fn default_label(paths: &[PathBuf], i: usize) -> String {
    let stem = |p: &PathBuf| {
        p.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| p.display().to_string())
    };
    let s = stem(&paths[i]);
    if paths.iter().filter(|p| stem(p) == s).count() > 1 {
        paths[i].display().to_string()
    } else {
        s
    }
}
