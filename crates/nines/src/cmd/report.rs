//! `nines report`: one run's JSON (and its logs) to a self-contained HTML page and PNGs.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use nines_core::latlog::LatLogReader;
use nines_core::report::Report;
use nines_report::run::{LatPass1, LatPass2, LatView, RunInputs, figures, render_html};
use nines_report::spikes::SpikeParams;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The run's JSON, from `nines profile --json` or `nines sim --json`.
    #[arg(value_name = "RUN.json")]
    pub run: PathBuf,
    /// Where to write the HTML page [default: RUN.html beside the JSON].
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write every figure as a PNG into this directory.
    #[arg(long, value_name = "DIR")]
    pub png: Option<PathBuf>,
    /// Per-I/O log [default: the one the run recorded, if any].
    #[arg(long, value_name = "FILE")]
    pub lat_log: Option<PathBuf>,
    /// Interval histogram log [default: the one the run recorded, if any].
    #[arg(long, value_name = "FILE")]
    pub hdr_log: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    super::output::note_inputs("input", [args.run.as_path()]);
    super::output::note_inputs("--lat-log input", args.lat_log.as_deref());
    super::output::note_inputs("--hdr-log input", args.hdr_log.as_deref());
    let out = match &args.output {
        Some(o) => o.clone(),
        // RUN.html beside the JSON, which must be a file to have a "beside" (an input of a
        // kind never read is refused as such first).
        None => {
            nines_core::input::open(&args.run).with_context(|| reading_run(&args.run))?;
            super::output::derived_output("report", &args.run, "html", "give -o FILE for the page")?
        }
    };
    super::output::check_path("-o", &out)?;
    let report = read_report(&args.run)?;
    let base = args.run.parent().unwrap_or(Path::new("."));
    let lat_path = pick_log(
        args.lat_log,
        report.config.lat_log.as_deref(),
        base,
        "per-I/O",
    );
    let hdr_path = pick_log(
        args.hdr_log,
        report.config.hdr_log.as_deref(),
        base,
        "interval",
    );

    // The logs the run names are inputs too (checked again when -o is created).
    super::output::note_inputs("per-I/O log", lat_path.as_deref());
    super::output::note_inputs("interval log", hdr_path.as_deref());
    super::output::check_path("-o", &out)?;
    let lat = match &lat_path {
        Some(p) => Some(read_lat_log(p)?),
        None => None,
    };
    let intervals = match &hdr_path {
        Some(p) => {
            let bytes = nines_core::input::read(p, nines_core::input::HDR_LOG_MAX_BYTES)
                .with_context(|| format!("reading interval log {}", p.display()))?;
            Some(
                nines_report::intervals::parse_interval_log(&bytes)
                    .with_context(|| format!("reading interval log {}", p.display()))?,
            )
        }
        None => None,
    };
    let title = format!(
        "nines report: {}",
        args.run.file_name().map_or_else(
            || args.run.display().to_string(),
            |n| n.to_string_lossy().into_owned()
        )
    );
    let inputs = RunInputs {
        report: &report,
        title,
        lat,
        intervals,
    };
    let figs = figures(&inputs);
    let html = render_html(&inputs, &figs)?;
    // The page is moved into place only when the PNGs were written too.
    let (pending, mut file) = super::output::PendingOutput::create("-o", &out)?;
    std::io::Write::write_all(&mut file, html.as_bytes())
        .with_context(|| format!("-o {}: write failed", out.display()))?;
    drop(file);
    if let Some(dir) = &args.png {
        write_pngs(dir, &figs)?;
    }
    pending.commit()?;
    eprintln!(
        "nines: wrote {} ({})",
        out.display(),
        nines_report::run::count(figs.len(), "figure", "figures")
    );
    Ok(())
}

fn reading_run(path: &Path) -> String {
    format!(
        "reading {}; pass the JSON written by `nines profile --json` or `nines sim --json`",
        path.display()
    )
}

/// Reads and checks a run's JSON with a message that says what to do.
pub fn read_report(path: &Path) -> anyhow::Result<Report> {
    let text = nines_core::input::read_to_string(path, nines_core::input::REPORT_MAX_BYTES)
        .with_context(|| reading_run(path))?;
    if text.contains("\"nines-sweep\"") && nines_report::sweep::Sweep::from_json(&text).is_ok() {
        anyhow::bail!(
            "{} is a sweep, not a run: its page is the sweep.html `nines sweep` wrote beside it, \
             and each point's run JSON is in its points directory",
            path.display()
        );
    }
    Report::from_json(&text).with_context(|| format!("reading run {}", path.display()))
}

/// The log to read: the one given, else the run's own if it can be found: as recorded (absolute,
/// or relative to where the run was started), relative to the JSON's directory, or by file name
/// beside the JSON (the run's files moved together).
fn pick_log(
    given: Option<PathBuf>,
    recorded: Option<&str>,
    base: &Path,
    what: &str,
) -> Option<PathBuf> {
    if given.is_some() {
        return given;
    }
    let rec = PathBuf::from(recorded?);
    let mut candidates = vec![base.join(&rec), rec.clone()];
    if let Some(name) = rec.file_name() {
        candidates.push(base.join(name));
    }
    match candidates.iter().find(|p| p.is_file()) {
        Some(p) => Some(p.clone()),
        None => {
            eprintln!(
                "nines: the run's {what} log {} was not found; reporting without it (give it with --{} FILE)",
                rec.display(),
                if what == "per-I/O" {
                    "lat-log"
                } else {
                    "hdr-log"
                }
            );
            None
        }
    }
}

/// Two passes over a per-I/O log: the distribution first, then decimation and spikes.
fn read_lat_log(path: &Path) -> anyhow::Result<LatView> {
    let ctx = || format!("reading per-I/O log {}", path.display());
    let f = nines_core::input::open(path)
        .with_context(|| format!("opening per-I/O log {}", path.display()))?;
    // Two passes: a file is read twice; a pipe can be read once, so the first pass keeps a copy
    // in an unnamed temporary file (gone with its descriptor) for the second.
    let regular = f.metadata().with_context(ctx)?.is_file();
    let (first, again): (Box<dyn Read>, File) = if regular {
        (Box::new(f.try_clone().with_context(ctx)?), f)
    } else {
        let spool = unnamed_temp_file().with_context(|| {
            format!(
                "per-I/O log {}: cannot make a temporary copy of the pipe in {}",
                path.display(),
                std::env::temp_dir().display()
            )
        })?;
        let tee = Tee {
            from: f,
            to: spool.try_clone().with_context(ctx)?,
        };
        (Box::new(tee), spool)
    };
    let mut p1 = LatPass1::new();
    let mut reader =
        LatLogReader::new(BufReader::with_capacity(1 << 20, first)).with_context(ctx)?;
    let devices = reader.header().devices.clone();
    for r in &mut reader {
        p1.push(&r.with_context(ctx)?);
    }
    drop(reader);
    let s1 = p1.finish();
    let mut again = again;
    again.seek(SeekFrom::Start(0)).with_context(ctx)?;
    let mut p2 = LatPass2::new(&s1, SpikeParams::default());
    for r in LatLogReader::new(BufReader::with_capacity(1 << 20, again)).with_context(ctx)? {
        p2.push(&r.with_context(ctx)?);
    }
    Ok(p2.finish(devices, s1.median_ns))
}

/// A file with no name in the temporary directory: removed by the kernel when closed.
fn unnamed_temp_file() -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o600)
        .open(std::env::temp_dir())
}

/// Reads `from`, writing what it read to `to` (a pipe's one reading, kept for a second pass).
struct Tee {
    from: File,
    to: File,
}

impl Read for Tee {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.from.read(buf)?;
        self.to.write_all(&buf[..n])?;
        Ok(n)
    }
}

pub fn write_pngs(dir: &Path, figs: &[nines_report::html::Figure]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("--png: creating {}", dir.display()))?;
    // Each PNG through the one output layer (a symlink followed, a device or an input refused,
    // a temporary name until committed); all are moved into place only when every one was
    // written, so a full disk leaves no half set: the uncommitted ones remove themselves.
    let mut pending = Vec::with_capacity(figs.len());
    for f in figs {
        let p = dir.join(format!("{}.png", f.id));
        let png = nines_report::plot::render_png_bytes(&f.plot, nines_report::plot::DEFAULT_SIZE)
            .map_err(|e| anyhow::anyhow!("--png: drawing {}: {e}", p.display()))?;
        let (out, mut file) = super::output::PendingOutput::create("--png", &p)?;
        file.write_all(&png)
            .with_context(|| format!("--png: writing {}", p.display()))?;
        pending.push(out);
    }
    for out in pending {
        out.commit()?;
    }
    eprintln!(
        "nines: wrote {} to {}",
        nines_report::run::count(figs.len(), "PNG", "PNGs"),
        dir.display()
    );
    Ok(())
}
