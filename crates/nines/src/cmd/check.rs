//! `nines check`: verify the parity of a stopped raid5 volume row by row (md's `check`), report
//! the rows whose parity disagrees with their data (row, parity member, first differing byte),
//! and with `--repair` rewrite that parity from the data (md's `repair`), at most `--rate`
//! bytes read per second, with a progress bar. Members with superblocks are checked as the
//! superblocks describe them (a stale, blank or foreign member is refused as `serve` refuses
//! it); members without are checked over the whole rows of the smallest.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args as ClapArgs;
use nines_array::meta::{self, Expect, MetaLayout, Mismatch};
use nines_io::target::{Target, TargetOptions};

use super::array_meta::{self, FilesIo};
use super::workload_args::parse_size;

/// Mismatches listed (all are counted).
const LISTED_MAX: usize = 10_000;

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The volume's members in layout order (files or block devices).
    #[arg(required = true, value_name = "TARGET")]
    pub targets: Vec<PathBuf>,
    /// The volume's layout (raid5: the one with parity to check).
    #[arg(long, default_value = "raid5", value_parser = ["raid5"])]
    pub layout: String,
    /// raid5 chunk size, as the volume was written with.
    #[arg(long, default_value = "64k", value_parser = parse_size)]
    pub chunk: u64,
    /// Rewrite the parity of every row where it disagrees with the data.
    #[arg(long)]
    pub repair: bool,
    /// At most this many bytes read from the members per second (0: as fast as they go).
    #[arg(long, default_value = "0", value_name = "BYTES/S", value_parser = parse_size)]
    pub rate: u64,
    /// Allow writing to block devices (--repair).
    #[arg(long)]
    pub allow_writes: bool,
    /// With --allow-writes: write even to a device that is mounted or holds a filesystem or
    /// partition-table signature. Destroys its data.
    #[arg(long)]
    pub force: bool,
    /// Write the result (rows, mismatches, repaired, time) here as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Print nothing but errors and warnings: no table or summary on stdout, no live status or
    /// progress on stderr (which is drawn only on a terminal anyway).
    #[arg(long, short)]
    pub quiet: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.force && !args.allow_writes {
        bail!("--force only applies with --allow-writes; add --allow-writes or drop --force");
    }
    // The same file twice would corrupt the volume; no output may name a member.
    super::output::note_members(&args.targets)?;
    super::output::check_outputs(&[("--json", args.json.as_deref())])?;
    let n = args.targets.len() as u32;
    if n < 3 {
        bail!(
            "raid5 has at least 3 members; give every member of the volume, in order ({n} given)"
        );
    }
    let members: Vec<Target> = args
        .targets
        .iter()
        .enumerate()
        .map(|(i, p)| {
            Target::open(
                p,
                &TargetOptions {
                    write: args.repair,
                    allow_writes: args.allow_writes,
                    force: args.force,
                    buffered: true,
                    create_size_bytes: None,
                },
            )
            .with_context(|| format!("cannot open member {i} ({})", p.display()))
        })
        .collect::<anyhow::Result<_>>()?;
    let files: Vec<&std::fs::File> = members
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.file().with_context(|| {
                format!(
                    "member {i} ({}) is not a file or block device: an emulated device keeps nothing to check",
                    args.targets[i].display()
                )
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let names: Vec<String> = args.targets.iter().map(|p| array_meta::name(p)).collect();
    let found = files
        .iter()
        .zip(&names)
        .map(|(f, name)| {
            array_meta::read_sb(f).with_context(|| format!("cannot read {name}'s superblock"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let asm = meta::assemble(
        &Expect {
            layout: MetaLayout::Raid5,
            members: n,
            unit_bytes: args.chunk,
        },
        &found,
        &names,
        None,
    )
    .map_err(|r| anyhow::anyhow!("{r}"))
    .context("cannot check the array")?;
    let rows = match &asm {
        Some(a) => {
            if !a.newest.clean {
                eprintln!(
                    "nines: warning: the array is being served or was not stopped cleanly (its superblocks are not marked clean); rows being written now may be reported (serve resyncs dirty regions when it starts)"
                );
            }
            a.newest.member_data_bytes / args.chunk
        }
        None => members.iter().map(Target::size_bytes).min().unwrap_or(0) / args.chunk,
    };
    nines_io::sched::install_interrupt_handler()
        .context("cannot install the SIGINT/SIGTERM handler")?;
    let bar = progress_bar(rows, args.chunk, args.quiet);
    let mut io = FilesIo(files.clone());
    let mut bufs: Vec<Vec<u8>> = (0..=n).map(|_| vec![0u8; args.chunk as usize]).collect();
    let start = Instant::now();
    let row_read_bytes = args.chunk * u64::from(n);
    let (mut checked, mut count, mut listed) = (0u64, 0u64, Vec::<Mismatch>::new());
    let mut interrupted = false;
    for row in 0..rows {
        if nines_io::sched::interrupted() {
            interrupted = true;
            break;
        }
        if args.rate > 0 {
            // md's speed_limit_max: row k starts no earlier than its bytes allow.
            let due = Duration::from_secs_f64((checked * row_read_bytes) as f64 / args.rate as f64);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        let m = meta::check_raid5_row(n, args.chunk, row, args.repair, &mut io, &mut bufs)
            .with_context(|| format!("cannot check row {row}"))?;
        checked += 1;
        if let Some(m) = m {
            count += 1;
            if listed.len() < LISTED_MAX {
                listed.push(m);
            }
        }
        if row % 64 == 0 {
            bar.set_position(checked);
        }
    }
    bar.finish_and_clear();
    if args.repair {
        for (f, name) in files.iter().zip(&names) {
            f.sync_data()
                .with_context(|| format!("cannot make {name}'s repaired parity durable"))?;
        }
    }
    let elapsed_s = start.elapsed().as_secs_f64();
    for m in listed.iter().take(if args.quiet { 0 } else { 100 }) {
        println!(
            "row {}: the parity on member {} ({}) disagrees with the data from byte {} of the chunk{}",
            m.row,
            m.parity_member,
            names[m.parity_member as usize],
            m.first_byte,
            if args.repair { "; rewritten" } else { "" }
        );
    }
    let mib = (checked * row_read_bytes) as f64 / f64::from(1u32 << 20);
    if !args.quiet {
        println!(
            "checked {checked} of {rows} rows ({mib:.1} MiB read) in {elapsed_s:.2} s: {count} with parity that disagrees with the data{}",
            if args.repair {
                format!(", {count} repaired")
            } else {
                String::new()
            }
        );
    }
    if let Some(path) = &args.json {
        let report = serde_json::json!({
            "layout": "raid5",
            "chunk_bytes": args.chunk,
            "members": args.targets,
            "rows_total": rows,
            "rows_checked": checked,
            "mismatches": count,
            "repaired": if args.repair { count } else { 0 },
            "mismatch_list": listed,
            "elapsed_s": elapsed_s,
            "rate_bytes_per_s": args.rate,
            "interrupted": interrupted,
        });
        let text = serde_json::to_vec_pretty(&report).context("cannot encode the report")?;
        super::output::write_all("--json", path, &text)?;
    }
    if interrupted {
        bail!("interrupted after {checked} of {rows} rows; run it again to check from the start");
    }
    if count > 0 && !args.repair {
        bail!(
            "{count} rows' parity disagrees with their data: run nines check --repair to rewrite it from the data"
        );
    }
    Ok(())
}

fn progress_bar(rows: u64, chunk: u64, quiet: bool) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if quiet || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(rows);
    let style = indicatif::ProgressStyle::with_template(&format!(
        "check {{bar:40}} {{pos}}/{{len}} rows of {} KiB, {{percent}}%, ETA {{eta}}",
        chunk >> 10
    ))
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}
