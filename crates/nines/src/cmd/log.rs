//! `nines log FILE [-o out.csv]`: decode a per-I/O latency log (from `nines profile --lat-log`)
//! to CSV: `completion_ns,device,direction,offset_bytes,latency_ns`, the device by name.
//!
//! Records are in the order the workers' buffers reached the writer, so different workers'
//! records interleave in blocks; `--sort` orders them by completion time (in memory).

use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use nines_core::latlog::{LatLogReader, LatRecord};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The log written by `nines profile --lat-log FILE` (or sim's, or serve's).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Write the CSV here instead of standard output.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Order records by completion time (reads the whole log into memory).
    #[arg(long)]
    pub sort: bool,
}

pub fn run(args: Args) -> Result<()> {
    if args.file.is_dir() {
        bail!(
            "{} is a directory; give the file written by `nines profile --lat-log FILE`",
            args.file.display()
        );
    }
    super::output::note_inputs("input", [args.file.as_path()]);
    if let Some(out) = &args.output {
        super::output::check_path("-o", out)?;
    }
    let f = nines_core::input::open(&args.file)
        .with_context(|| format!("{}: cannot open", args.file.display()))?;
    // A file's size tells at once what reading it would find (a pipe is counted as it is read).
    if args.sort
        && f.metadata().is_ok_and(|m| {
            m.is_file()
                && m.len().saturating_sub(16 << 20) / nines_core::latlog::RECORD_BYTES as u64
                    > SORT_RECORDS_MAX as u64
        })
    {
        bail!("{}", too_many_to_sort(&args.file));
    }
    let reader = LatLogReader::new(BufReader::with_capacity(1 << 20, f))
        .with_context(|| format!("{}", args.file.display()))?;
    match &args.output {
        None => {
            let stdout = std::io::stdout();
            let mut out = BufWriter::with_capacity(1 << 20, stdout.lock());
            let r = decode(reader, &mut out, args.sort, &args.file).and_then(|()| {
                out.flush().context("writing the CSV")?;
                Ok(())
            });
            // A reader that stops early (`nines log F | head`) is not an error.
            if let Err(e) = r {
                let broken_pipe = e
                    .chain()
                    .filter_map(|c| c.downcast_ref::<std::io::Error>())
                    .any(|io| io.kind() == std::io::ErrorKind::BrokenPipe);
                if !broken_pipe {
                    return Err(e);
                }
            }
        }
        Some(path) => {
            // All or nothing for a regular file; written in place (never renamed over) for
            // /dev/null, a FIFO or /dev/full.
            let (pending, file) = super::output::PendingOutput::create("-o", path)?;
            let mut out = BufWriter::with_capacity(1 << 20, file);
            decode(reader, &mut out, args.sort, &args.file)?;
            out.flush()
                .with_context(|| format!("-o {}: write failed", path.display()))?;
            drop(out);
            pending.commit()?;
        }
    }
    Ok(())
}

/// The most records `--sort` holds in memory (32 bytes each: 1 GiB).
const SORT_RECORDS_MAX: usize = 1 << 25;

fn too_many_to_sort(file: &Path) -> String {
    format!(
        "{}: --sort holds at most {SORT_RECORDS_MAX} records (1 GiB) in memory and this log has \
         more; decode it without --sort and sort the CSV on disk (nines log FILE | sort -t, -k1,1n)",
        file.display()
    )
}

fn decode<R: std::io::Read>(
    reader: LatLogReader<R>,
    out: &mut impl Write,
    sort: bool,
    file: &Path,
) -> Result<()> {
    let devices = reader.header().devices.clone();
    writeln!(
        out,
        "completion_ns,device,direction,offset_bytes,latency_ns"
    )?;
    let mut write_one = |r: &LatRecord| -> Result<()> {
        let Some(name) = devices.get(r.device as usize) else {
            bail!(
                "{}: record names device {} but the log's header lists {} devices; the log is corrupt",
                file.display(),
                r.device,
                devices.len()
            );
        };
        writeln!(
            out,
            "{},{},{},{},{}",
            r.completion_ns,
            csv_field(name),
            r.op,
            r.offset_bytes,
            r.latency_ns
        )?;
        Ok(())
    };
    if sort {
        let mut all = Vec::new();
        for rec in reader {
            if all.len() >= SORT_RECORDS_MAX {
                bail!("{}", too_many_to_sort(file));
            }
            all.push(rec.with_context(|| format!("{}", file.display()))?);
        }
        all.sort_by_key(|r| (r.completion_ns, r.device, r.offset_bytes));
        for r in &all {
            write_one(r)?;
        }
    } else {
        for rec in reader {
            write_one(&rec.with_context(|| format!("{}", file.display()))?)?;
        }
    }
    Ok(())
}

/// Quotes a CSV field when it holds a comma, quote or line break (RFC 4180).
fn csv_field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_only_when_needed() {
        assert_eq!(csv_field("zram3"), "zram3");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
