//! `nines check`: verify the parity of a stopped raid5 volume row by row (md's `check`), report
//! the rows whose parity disagrees with their data (row, parity member, first differing byte),
//! and with `--repair` rewrite that parity from the data (md's `repair`), at most `--rate`
//! bytes read per second, with a progress bar. Members with superblocks are checked as the
//! superblocks describe them (a stale, blank or foreign member is refused as `serve` refuses
//! it); members without are checked over the whole rows of the smallest.
//!
//! `--layout serial` checks a stopped `--persist` serial volume's metadata region on member 0
//! (given the options it was served with): the superblock (magic, geometry, checksum) and every
//! mapping-table entry (a place that exists, no place named twice); `--repair` clears bad
//! entries (their units read as zeros, the volume opens again) and rewrites a damaged
//! superblock.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args as ClapArgs;
use nines_array::meta::{self, Expect, MetaLayout, Mismatch};
use nines_io::target::{Target, TargetOptions};

use super::workload_args::{SerialGeometry, parse_chunk, parse_size};
use nines_io::array_meta::{self, FilesIo};

/// Mismatches listed (all are counted).
const LISTED_MAX: usize = 10_000;

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The volume's members in layout order (files or block devices).
    #[arg(required = true, value_name = "TARGET")]
    pub targets: Vec<PathBuf>,
    /// The volume's layout: raid5 (its parity) or serial (a --persist volume's mapping table).
    #[arg(long, default_value = "raid5", value_parser = ["raid5", "serial"])]
    pub layout: String,
    /// raid5 chunk size, as the volume was written with (a multiple of 512, at most 16m).
    #[arg(long, default_value = "64k", value_parser = parse_chunk)]
    pub chunk: u64,
    /// serial: the options the volume was served with (its geometry): stripe unit inside a
    /// column.
    #[arg(long, default_value = "128k", value_parser = parse_size)]
    pub stripe: u64,
    /// serial: members striped together in one column [default: 1].
    #[arg(long, value_name = "N")]
    pub column_members: Option<u32>,
    /// serial: segment size of a column [default: 128m].
    #[arg(long, value_parser = parse_size)]
    pub segment: Option<u64>,
    /// serial: mapping unit [default: 4k].
    #[arg(long, value_parser = parse_size)]
    pub map_unit: Option<u64>,
    /// serial: --rotate-free as served [default: 1].
    #[arg(long, value_name = "SEGMENTS")]
    pub rotate_free: Option<u32>,
    /// serial: --gc-stop as served [default: 15].
    #[arg(long, value_name = "SEGMENTS")]
    pub gc_stop: Option<u32>,
    /// Rewrite the parity of every row where it disagrees with the data (raid5); clear bad
    /// mapping entries and rewrite a damaged superblock (serial).
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
    let serial_given = args.column_members.is_some()
        || args.segment.is_some()
        || args.map_unit.is_some()
        || args.rotate_free.is_some()
        || args.gc_stop.is_some();
    if args.layout == "serial" {
        return check_serial(&args);
    }
    if serial_given {
        bail!(
            "--column-members, --segment, --map-unit, --rotate-free and --gc-stop apply to --layout serial only"
        );
    }
    let n = args.targets.len() as u32;
    if n < 3 {
        bail!(
            "raid5 has at least 3 members; give every member of the volume, in order ({n} given)"
        );
    }
    let members = open_members(&args)?;
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
    let rows = rows_to_check(&args, &members, &files, &names)?;
    nines_io::sched::install_interrupt_handler()
        .context("cannot install the SIGINT/SIGTERM handler")?;
    let bar = progress_bar(rows, args.chunk, args.quiet);
    let start = Instant::now();
    let scan = scan_rows(&args, &files, rows, &bar, start)?;
    bar.finish_and_clear();
    assert!(scan.checked <= rows && scan.count <= scan.checked);
    if args.repair {
        for (f, name) in files.iter().zip(&names) {
            f.sync_data()
                .with_context(|| format!("cannot make {name}'s repaired parity durable"))?;
        }
    }
    report(&args, &names, rows, &scan, start.elapsed().as_secs_f64())
}

/// Opens every member (for writing only with --repair).
fn open_members(args: &Args) -> anyhow::Result<Vec<Target>> {
    args.targets
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
        .collect()
}

/// The rows of the array: as its superblocks say (warning when it is not marked clean), or
/// whole chunks of the smallest member where it has none.
fn rows_to_check(
    args: &Args,
    members: &[Target],
    files: &[&std::fs::File],
    names: &[String],
) -> anyhow::Result<u64> {
    let found = files
        .iter()
        .zip(names)
        .map(|(f, name)| {
            array_meta::read_sb(f).with_context(|| format!("cannot read {name}'s superblock"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let asm = meta::assemble(
        &Expect {
            layout: MetaLayout::Raid5,
            members: files.len() as u32,
            unit_bytes: args.chunk,
        },
        &found,
        names,
        None,
    )
    .map_err(|r| anyhow::anyhow!("{r}"))
    .context("cannot check the array")?;
    Ok(match &asm {
        Some(a) => {
            if !a.newest.clean {
                eprintln!(
                    "nines: warning: the array is being served or was not stopped cleanly (its superblocks are not marked clean); rows being written now may be reported (serve resyncs dirty regions when it starts)"
                );
            }
            a.newest.member_data_bytes / args.chunk
        }
        None => members.iter().map(Target::size_bytes).min().unwrap_or(0) / args.chunk,
    })
}

/// What the scan of the rows found.
struct Scan {
    checked: u64,
    count: u64,
    listed: Vec<Mismatch>,
    interrupted: bool,
}

/// Checks (and with --repair rewrites) each row's parity, at most --rate bytes read per second,
/// until the last row or SIGINT/SIGTERM.
fn scan_rows(
    args: &Args,
    files: &[&std::fs::File],
    rows: u64,
    bar: &indicatif::ProgressBar,
    start: Instant,
) -> anyhow::Result<Scan> {
    let n = files.len() as u32;
    let mut io = FilesIo(files.to_vec());
    let mut bufs: Vec<Vec<u8>> = (0..=n).map(|_| vec![0u8; args.chunk as usize]).collect();
    let row_read_bytes = args.chunk * u64::from(n);
    let mut scan = Scan {
        checked: 0,
        count: 0,
        listed: Vec::new(),
        interrupted: false,
    };
    for row in 0..rows {
        if nines_io::sched::interrupted() {
            scan.interrupted = true;
            break;
        }
        if args.rate > 0 {
            // md's speed_limit_max: row k starts no earlier than its bytes allow.
            let due =
                Duration::from_secs_f64((scan.checked * row_read_bytes) as f64 / args.rate as f64);
            // In steps of at most 100 ms, so a SIGINT is acted on within that (--rate 1 waits
            // for hours).
            while let Some(wait) = due.checked_sub(start.elapsed()) {
                if nines_io::sched::interrupted() {
                    break;
                }
                std::thread::sleep(wait.min(Duration::from_millis(100)));
            }
            if nines_io::sched::interrupted() {
                scan.interrupted = true;
                break;
            }
        }
        let m = meta::check_raid5_row(n, args.chunk, row, args.repair, &mut io, &mut bufs)
            .with_context(|| format!("cannot check row {row}"))?;
        scan.checked += 1;
        if let Some(m) = m {
            scan.count += 1;
            if scan.listed.len() < LISTED_MAX {
                scan.listed.push(m);
            }
        }
        if row % 64 == 0 {
            bar.set_position(scan.checked);
        }
    }
    Ok(scan)
}

/// Prints the rows found and the summary, writes --json, and fails where rows disagree
/// (without --repair) or the check was interrupted.
fn report(
    args: &Args,
    names: &[String],
    rows: u64,
    scan: &Scan,
    elapsed_s: f64,
) -> anyhow::Result<()> {
    let Scan {
        checked,
        count,
        listed,
        interrupted,
    } = scan;
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
    let row_read_bytes = args.chunk * names.len() as u64;
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
            "repaired": if args.repair { *count } else { 0 },
            "mismatch_list": listed,
            "elapsed_s": elapsed_s,
            "rate_bytes_per_s": args.rate,
            "interrupted": interrupted,
        });
        let text = serde_json::to_vec_pretty(&report).context("cannot encode the report")?;
        super::output::write_all("--json", path, &text)?;
    }
    if *interrupted {
        // As rebuild: what was done is reported, and the shell is told "interrupted" (130).
        return Err(anyhow::Error::new(super::Interrupted(format!(
            "interrupted after {checked} of {rows} rows; run it again to check from the start"
        ))));
    }
    if *count > 0 && !args.repair {
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

/// `nines check --layout serial`: the metadata region of a stopped `--persist` serial volume,
/// or over host-managed zoned members (which refuse --persist) their zones.
fn check_serial(args: &Args) -> anyhow::Result<()> {
    if let Some(members) = zoned_members(args)? {
        return check_serial_zoned(args, &members);
    }
    let (members, region, region_for) = serial_region(args)?;
    let name0 = array_meta::name(&args.targets[0]);
    let f = members[0].file().with_context(|| {
        format!("member 0 ({name0}) is not a file or block device: an emulated device keeps nothing to check")
    })?;
    let start = Instant::now();
    let volume_id = serial_identity(args, &members, &region, &*region_for)?;
    let found = check_serial_region(args, f, &region, &name0, volume_id.as_ref())?;
    assert!(
        found.table.bad <= region.units,
        "at most one bad entry per unit"
    );
    let elapsed_s = start.elapsed().as_secs_f64();
    serial_report(args, &region, &found, &name0, elapsed_s)
}

/// The members opened read-only when any of them is a host-managed zoned block device.
fn zoned_members(args: &Args) -> anyhow::Result<Option<Vec<Target>>> {
    use std::os::unix::fs::FileTypeExt;
    let block = |p: &PathBuf| std::fs::metadata(p).is_ok_and(|m| m.file_type().is_block_device());
    if !args.targets.iter().any(block) {
        return Ok(None);
    }
    let members: Vec<Target> = args
        .targets
        .iter()
        .enumerate()
        .map(|(i, p)| {
            Target::open(
                p,
                &TargetOptions {
                    buffered: true,
                    ..TargetOptions::default()
                },
            )
            .with_context(|| format!("cannot open member {i} ({})", p.display()))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(members
        .iter()
        .any(|t| t.zoned().is_some())
        .then_some(members))
}

/// `nines check --layout serial` over zoned members: a serial volume over them keeps no table
/// (zoned members refuse --persist), so what can be checked is what its zones hold: the
/// members zoned alike and of the geometry the options make, and every zone one the volume
/// could leave (nines_io::zoned::audit: write pointers on whole units, nothing offline or
/// read-only, nothing written past the volume's zones). Reads only.
fn check_serial_zoned(args: &Args, members: &[Target]) -> anyhow::Result<()> {
    use std::os::fd::AsRawFd;
    if args.repair {
        bail!(
            "--repair: a serial volume over zoned members keeps no mapping table to repair (they refuse --persist); drop --repair"
        );
    }
    let names: Vec<String> = args.targets.iter().map(|p| array_meta::name(p)).collect();
    let mut layout = nines_array::LayoutSpec::Serial(geometry(args).spec()?);
    let refs: Vec<&Target> = members.iter().collect();
    nines_io::resolve::from_targets(&mut layout, &refs, false).map_err(anyhow::Error::msg)?;
    let nines_array::LayoutSpec::Serial(spec) = layout else {
        unreachable!("a serial layout stays serial")
    };
    let sizes: Vec<u64> = members.iter().map(Target::size_bytes).collect();
    let block = members
        .iter()
        .map(Target::logical_block_bytes)
        .max()
        .unwrap_or(512);
    nines_array::Serial::new(spec, &sizes, block, 1, spec.unit_bytes)
        .map_err(|e| not_this_volume(&e, "zoned members"))?;
    let columns = members.len() as u32 / spec.column_members.max(1);
    let used = spec.segments_per_column(sizes.iter().copied().min().unwrap_or(0), columns);
    let start = Instant::now();
    let mut audits = Vec::with_capacity(members.len());
    for (t, name) in members.iter().zip(&names) {
        let fd = t
            .file()
            .context("a zoned member is a block device")?
            .as_raw_fd();
        let zones = nines_io::zoned::report_zones(fd, t.size_bytes())
            .with_context(|| format!("cannot read {name}'s zones"))?;
        audits.push(nines_io::zoned::audit(
            &zones,
            used,
            u64::from(spec.unit_bytes),
        ));
    }
    zoned_report(args, &names, &audits, start.elapsed().as_secs_f64())
}

/// Prints and writes (--json) what the zones hold; fails when a zone is not one the volume
/// could leave.
fn zoned_report(
    args: &Args,
    names: &[String],
    audits: &[nines_io::zoned::ZoneAudit],
    elapsed_s: f64,
) -> anyhow::Result<()> {
    let (mut wp_errors, mut other_errors, mut zones) = (0u64, 0u64, 0u64);
    for (a, name) in audits.iter().zip(names) {
        wp_errors += a.write_pointer_errors;
        other_errors += a.other_errors;
        zones += a.zones;
        for p in &a.problems {
            println!("{name}: {p}");
        }
        if !args.quiet {
            println!(
                "{name}: {} zones: {} empty, {} open, {} closed, {} full; {} MiB written; {} write-pointer errors",
                a.zones,
                a.empty,
                a.open,
                a.closed,
                a.full,
                a.written_bytes >> 20,
                a.write_pointer_errors
            );
        }
    }
    println!(
        "checked {zones} zones on {} zoned members in {elapsed_s:.2} s: {wp_errors} write-pointer errors, {other_errors} other zone errors",
        audits.len()
    );
    if let Some(path) = &args.json {
        let report = serde_json::json!({
            "layout": "serial",
            "zoned": true,
            "members": args.targets,
            "zones": audits,
            "write_pointer_errors": wp_errors,
            "other_zone_errors": other_errors,
            "elapsed_s": elapsed_s,
        });
        let text = serde_json::to_vec_pretty(&report).context("cannot encode the report")?;
        super::output::write_all("--json", path, &text)?;
    }
    if wp_errors + other_errors > 0 {
        bail!(
            "{wp_errors} write-pointer errors and {other_errors} other zone errors on the zoned members (listed above): the zones hold what no serial volume of these options leaves"
        );
    }
    Ok(())
}

/// Every member's identity page read and checked as `serve` checks them when it opens the
/// volume: a misassembly is refused in one line. The volume's id, if it has one.
fn serial_identity(
    args: &Args,
    members: &[Target],
    region: &nines_array::serial::PersistRegion,
    region_for: &dyn Fn(u64) -> Option<u64>,
) -> anyhow::Result<Option<[u8; 16]>> {
    let names: Vec<String> = args.targets.iter().map(|p| array_meta::name(p)).collect();
    let files: Vec<&std::fs::File> = members
        .iter()
        .zip(&names)
        .enumerate()
        .map(|(k, (m, name))| {
            m.file().with_context(|| {
                format!("member {k} ({name}) is not a file or block device: an emulated device keeps nothing to check")
            })
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(nines_io::serial_meta::check_members(&files, &names, region, region_for)?.volume_id)
}

/// The serial geometry the options give (defaults where none).
fn geometry(args: &Args) -> SerialGeometry {
    SerialGeometry {
        stripe_bytes: args.stripe,
        column_members: args.column_members,
        segment_bytes: args.segment,
        map_unit_bytes: args.map_unit,
        rotate_free: args.rotate_free,
        gc_stop: args.gc_stop,
    }
}

/// Options that make no serial volume of the members. The policy's own advice is for building
/// a volume (a smaller --segment, larger members); check must instead be given the options the
/// volume was made with, which its members do not record where check could find them first
/// (where the metadata region lies depends on them).
fn not_this_volume(e: &nines_array::ArrayError, what: &str) -> anyhow::Error {
    let text = e.to_string();
    let why = text.split("; use ").next().unwrap_or(&text);
    anyhow::anyhow!(
        "cannot check the volume: these options do not make a serial volume of these {what} \
         ({why}); give check the --segment, --stripe, --column-members, --map-unit, --rotate-free \
         and --gc-stop the volume was served with (defaults where none was given)"
    )
}

/// The serial volume the options describe over the members, and its metadata region.
/// The members, their metadata region, and where the region would be for members of another
/// size (see nines_io::serial_meta::check_members).
type SerialRegion = (
    Vec<Target>,
    nines_array::serial::PersistRegion,
    Box<dyn Fn(u64) -> Option<u64>>,
);

fn serial_region(args: &Args) -> anyhow::Result<SerialRegion> {
    let spec = nines_array::SerialSpec {
        persist: true,
        ..geometry(args).spec()?
    };
    let unit_bytes = spec.unit_bytes;
    let members: Vec<Target> = args
        .targets
        .iter()
        .enumerate()
        .map(|(i, p)| {
            Target::open(
                p,
                &TargetOptions {
                    // Only member 0 holds the table; the others are opened for their sizes.
                    write: args.repair && i == 0,
                    allow_writes: args.allow_writes,
                    force: args.force,
                    buffered: true,
                    create_size_bytes: None,
                },
            )
            .with_context(|| format!("cannot open member {i} ({})", p.display()))
        })
        .collect::<anyhow::Result<_>>()?;
    let sizes: Vec<u64> = members.iter().map(Target::size_bytes).collect();
    let block_bytes = members
        .iter()
        .map(Target::logical_block_bytes)
        .max()
        .unwrap_or(512);
    let mut vol = nines_array::Serial::new(spec, &sizes, block_bytes, 1, unit_bytes)
        .map_err(|e| not_this_volume(&e, "members"))?;
    let region = vol
        .persist_region()
        .context("a --persist volume has a region")?;
    let n = sizes.len();
    let region_for = Box::new(move |size: u64| {
        nines_array::Serial::new(spec, &vec![size; n], block_bytes, 1, unit_bytes)
            .ok()?
            .persist_region()
            .map(|r| r.offset_bytes)
    });
    Ok((members, region, region_for))
}

/// What member 0's region holds: the superblock's verdict, the table's, and (with --repair)
/// the bad entries cleared and a damaged superblock rewritten.
struct SerialFound {
    superblock: nines_array::serial::SuperCheck,
    table: nines_array::serial::TableCheck,
}

fn check_serial_region(
    args: &Args,
    f: &std::fs::File,
    region: &nines_array::serial::PersistRegion,
    name0: &str,
    volume_id: Option<&[u8; 16]>,
) -> anyhow::Result<SerialFound> {
    use nines_array::serial::{SuperCheck, check_superblock, check_table};
    use std::os::unix::fs::FileExt;
    let page = nines_array::serial::META_PAGE_BYTES;
    let mut sb = vec![0u8; page as usize];
    f.read_exact_at(&mut sb, region.offset_bytes)
        .with_context(|| format!("cannot read {name0}'s serial superblock"))?;
    let sb_check = check_superblock(&sb, &region.geometry);
    match sb_check {
        SuperCheck::NoVolume => bail!(
            "member 0 ({name0}) holds no serial volume's table at byte {}: give the members in order, served with --persist, and the --segment/--stripe/--column-members/--map-unit/--rotate-free/--gc-stop they were served with",
            region.offset_bytes
        ),
        SuperCheck::OtherGeometry => bail!(
            "member 0 ({name0}) holds a serial volume of another geometry: give the --segment/--stripe/--column-members/--map-unit/--rotate-free/--gc-stop and members it was served with"
        ),
        SuperCheck::Ok | SuperCheck::Damaged => {}
    }
    let table_off = region.offset_bytes + page;
    let mut table = vec![0u8; (u64::from(region.table_pages) * page) as usize];
    f.read_exact_at(&mut table, table_off)
        .with_context(|| format!("cannot read {name0}'s mapping table"))?;
    let before = table.clone();
    let t = check_table(
        &mut table,
        region.units,
        region.places,
        LISTED_MAX,
        args.repair,
    );
    if args.repair && (t.bad > 0 || sb_check == SuperCheck::Damaged) {
        for (j, (new, old)) in table
            .chunks(page as usize)
            .zip(before.chunks(page as usize))
            .enumerate()
        {
            if new != old {
                f.write_all_at(new, table_off + j as u64 * page)
                    .with_context(|| format!("cannot repair {name0}'s mapping table"))?;
            }
        }
        if sb_check == SuperCheck::Damaged {
            f.write_all_at(&region.superblock(volume_id), region.offset_bytes)
                .with_context(|| format!("cannot rewrite {name0}'s serial superblock"))?;
        }
        f.sync_data()
            .with_context(|| format!("cannot make {name0}'s repair durable"))?;
    }
    Ok(SerialFound {
        superblock: sb_check,
        table: t,
    })
}

/// Prints what was found, writes --json, and fails on damage not repaired.
fn serial_report(
    args: &Args,
    region: &nines_array::serial::PersistRegion,
    found: &SerialFound,
    name0: &str,
    elapsed_s: f64,
) -> anyhow::Result<()> {
    use nines_array::serial::SuperCheck;
    let (sb_check, t) = (found.superblock, &found.table);
    if sb_check == SuperCheck::Damaged {
        println!(
            "the superblock on member 0 ({name0}) is damaged (right magic and geometry, wrong checksum){}",
            if args.repair { "; rewritten" } else { "" }
        );
    }
    for b in t.listed.iter().take(100) {
        println!(
            "unit {}: entry {} is {}{}",
            b.unit,
            b.entry,
            if b.why == "duplicate" {
                "a place an earlier unit names"
            } else {
                "past the volume"
            },
            if args.repair {
                "; cleared (the unit reads as zeros)"
            } else {
                ""
            }
        );
    }
    println!(
        "checked {} mapping entries ({} units mapped) in {elapsed_s:.2} s: {} bad{}",
        region.units,
        t.mapped,
        t.bad,
        if args.repair && t.bad > 0 {
            format!(", {} cleared", t.bad)
        } else {
            String::new()
        }
    );
    if let Some(path) = &args.json {
        let report = serde_json::json!({
            "layout": "serial",
            "members": args.targets,
            "region_offset_bytes": region.offset_bytes,
            "superblock": sb_check,
            "units": region.units,
            "mapped": t.mapped,
            "mismatches": t.bad,
            "repaired": if args.repair { t.bad } else { 0 },
            "mismatch_list": t.listed,
            "elapsed_s": elapsed_s,
        });
        let text = serde_json::to_vec_pretty(&report).context("cannot encode the report")?;
        super::output::write_all("--json", path, &text)?;
    }
    if !args.repair && (t.bad > 0 || sb_check == SuperCheck::Damaged) {
        bail!(
            "the serial volume's metadata is damaged ({} bad entries{}): run nines check --layout serial --repair with the same options",
            t.bad,
            if sb_check == SuperCheck::Damaged {
                ", damaged superblock"
            } else {
                ""
            }
        );
    }
    Ok(())
}
