//! `nines rebuild`: rebuild one member of a RAID5 volume (a replacement) from the others, to
//! the end, with a progress bar. The rebuild itself is the raid5 policy's (`--rebuild N`, the
//! same code `profile`, `sim` and `serve` run under load); this verb only moves its member
//! commands, one at a time, with positioned reads and writes, and sleeps when `--rate` says so.
//! Why a driver of its own: the run engine ends runs by time or I/O count, and a rebuild ends
//! when the policy says it has reached the last row.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args as ClapArgs;
use nines_array::api::{BufRef, CmdDone, CmdOp, CmdResult, DataPlane, Output};
use nines_array::{LayoutSpec, RebuildSpec, Volume, VolumeHost, VolumeParams};
use nines_io::target::{Target, TargetOptions};

use super::workload_args::{parse_chunk, parse_size};
use nines_io::array_meta;

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The volume's members in layout order (files or block devices), the replacement among
    /// them at its position.
    #[arg(required = true, value_name = "TARGET")]
    pub targets: Vec<PathBuf>,
    /// The member (0-based, in target order) to rebuild; its contents are overwritten.
    #[arg(long, value_name = "MEMBER")]
    pub member: u32,
    /// The volume's layout (raid5 is the one with redundancy to rebuild from).
    #[arg(long, default_value = "raid5", value_parser = ["raid5"])]
    pub layout: String,
    /// raid5 chunk size, as the volume was written with (a multiple of 512, at most 16m).
    #[arg(long, default_value = "64k", value_parser = parse_chunk)]
    pub chunk: u64,
    /// At most this many bytes per second written to the replacement (0: as fast as it goes).
    #[arg(long, default_value = "0", value_name = "BYTES/S", value_parser = parse_size)]
    pub rate: u64,
    /// Allow writing to a block device (files are always writable).
    #[arg(long)]
    pub allow_writes: bool,
    /// With --allow-writes: write even to a device that is mounted or holds a filesystem or
    /// partition-table signature. Destroys its data.
    #[arg(long)]
    pub force: bool,
    /// Write the rebuild's counters (rows, bytes, time, member reads) here as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Print nothing but errors and warnings: no table or summary on stdout, no live status or
    /// progress on stderr (which is drawn only on a terminal anyway).
    #[arg(long, short)]
    pub quiet: bool,
}

/// The rebuild's buffers: the policy's scratch chunks, in memory.
struct Scratch {
    bufs: Vec<Vec<u8>>,
}

impl Scratch {
    fn at(&mut self, r: BufRef, len: u32) -> &mut [u8] {
        match r {
            BufRef::Scratch { index, offset } => {
                let (o, l) = (offset as usize, len as usize);
                &mut self.bufs[index as usize][o..o + l]
            }
            other => panic!("a rebuild uses scratch buffers only, not {other:?}"),
        }
    }
    /// Two different buffers' slices at once (a rebuild never copies within one buffer).
    fn pair(&mut self, dst: BufRef, src: BufRef, len: u32) -> (&mut [u8], &[u8]) {
        let (
            BufRef::Scratch {
                index: di,
                offset: doff,
            },
            BufRef::Scratch {
                index: si,
                offset: soff,
            },
        ) = (dst, src)
        else {
            panic!("a rebuild uses scratch buffers only");
        };
        assert_ne!(di, si, "a rebuild never combines a buffer with itself");
        let (di, si, l) = (di as usize, si as usize, len as usize);
        let (d, s) = if di < si {
            let (a, b) = self.bufs.split_at_mut(si);
            (&mut a[di], &b[0])
        } else {
            let (a, b) = self.bufs.split_at_mut(di);
            (&mut b[0], &a[si])
        };
        (
            &mut d[doff as usize..doff as usize + l],
            &s[soff as usize..soff as usize + l],
        )
    }
}

impl DataPlane for Scratch {
    fn has_data(&self) -> bool {
        true
    }
    fn copy(&mut self, dst: BufRef, src: BufRef, len: u32) {
        let (d, s) = self.pair(dst, src, len);
        d.copy_from_slice(s);
    }
    fn xor(&mut self, dst: BufRef, src: BufRef, len: u32) {
        let (d, s) = self.pair(dst, src, len);
        for (x, y) in d.iter_mut().zip(s) {
            *x ^= y;
        }
    }
    fn zero(&mut self, dst: BufRef, len: u32) {
        self.at(dst, len).fill(0);
    }
    fn write_bytes(&mut self, dst: BufRef, bytes: &[u8]) {
        self.at(dst, bytes.len() as u32).copy_from_slice(bytes);
    }
    fn read_bytes(&mut self, src: BufRef, out: &mut [u8]) {
        out.copy_from_slice(self.at(src, out.len() as u32));
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.force && !args.allow_writes {
        bail!("--force only applies with --allow-writes; add --allow-writes or drop --force");
    }
    // The same file twice would corrupt the volume; no output may name a member.
    super::output::note_members(&args.targets)?;
    super::output::check_outputs(&[("--json", args.json.as_deref())])?;
    let n = args.targets.len();
    if n < 3 {
        bail!(
            "raid5 has at least 3 members; give every member of the volume, in order ({n} given)"
        );
    }
    if args.member as usize >= n {
        bail!(
            "--member {}: the volume has members 0 to {}",
            args.member,
            n - 1
        );
    }
    let members = open_members(&args)?;
    let (vol, mut writer) = build_volume(&args, &members)?;
    let (count, bytes) = vol.scratch();
    let mut data = Scratch {
        bufs: (0..count).map(|_| vec![0u8; bytes as usize]).collect(),
    };
    let rows_total = vol.stats()["rebuild"]["rows_total"].as_u64().unwrap_or(0);
    let mut host = VolumeHost::new(vol, 0, true);
    nines_io::sched::install_interrupt_handler()
        .context("cannot install the SIGINT/SIGTERM handler")?;
    let bar = progress_bar(rows_total, args.chunk, args.quiet);
    let start = Instant::now();
    let interrupted = drive(&mut host, &members, &mut data, &bar, start);
    bar.finish_and_clear();
    members[args.member as usize]
        .file()
        .expect("members are files (checked above)")
        .sync_data()
        .context("cannot make the rebuilt member durable (fdatasync)")?;
    let stats = host.volume().stats();
    let rb = &stats["rebuild"];
    let elapsed_s = start.elapsed().as_secs_f64();
    let report = serde_json::json!({
        "layout": "raid5",
        "chunk_bytes": args.chunk,
        "members": args.targets,
        "rebuild": rb,
        "elapsed_s": elapsed_s,
        "interrupted": interrupted,
    });
    if let Some(path) = &args.json {
        let text = serde_json::to_vec_pretty(&report).context("cannot encode the report")?;
        super::output::write_all("--json", path, &text)?;
    }
    if let Some(why) = rb["aborted"].as_str() {
        bail!(
            "the rebuild stopped at row {} of {rows_total}: {why}",
            rb["rows_rebuilt"]
        );
    }
    let rows = rb["rows_rebuilt"].as_u64().unwrap_or(0);
    assert!(rows <= rows_total, "a rebuild never passes the last row");
    if let Some(w) = writer.as_mut()
        && !interrupted
        && rows == rows_total
    {
        w.clean_stop(Some(args.member))
            .context("cannot write the rebuilt member's superblock")?;
    }
    let mib = (rows * args.chunk) as f64 / f64::from(1u32 << 20);
    if interrupted {
        // The one rule for interrupted runs: what was done is reported, exit 130.
        eprintln!(
            "nines: interrupted after {rows} of {rows_total} rows ({mib:.1} MiB); run it again to rebuild from the start"
        );
        std::process::exit(super::EXIT_INTERRUPTED);
    }
    if !args.quiet {
        println!(
            "rebuilt member {} ({}): {rows} rows, {mib:.1} MiB in {elapsed_s:.2} s ({:.1} MiB/s), {} member reads",
            args.member,
            args.targets[args.member as usize].display(),
            mib / elapsed_s.max(1e-9),
            rb["member_reads"]
        );
    }
    Ok(())
}

/// Opens every member (only the replacement for writing); each must be a file or block device.
fn open_members(args: &Args) -> anyhow::Result<Vec<Target>> {
    let members: Vec<Target> = args
        .targets
        .iter()
        .enumerate()
        .map(|(i, p)| {
            Target::open(
                p,
                &TargetOptions {
                    // Only the replacement is written.
                    write: i as u32 == args.member,
                    allow_writes: args.allow_writes,
                    force: args.force,
                    buffered: true,
                    create_size_bytes: None,
                },
            )
            .map_err(|e| {
                use nines_io::target::TargetError;
                // The target's advice names --size, which rebuild has not: members exist.
                match e {
                    TargetError::Missing { .. } => anyhow::anyhow!(
                        "cannot open member {i} ({}): no such file or device; give every member of the volume, the replacement created first with the others' size (truncate -s)",
                        p.display()
                    ),
                    TargetError::TooSmall { size_bytes, .. } => anyhow::anyhow!(
                        "cannot open member {i} ({}): it holds {size_bytes} bytes; every member, the replacement too, needs the others' size (truncate -s)",
                        p.display()
                    ),
                    e => anyhow::Error::new(e)
                        .context(format!("cannot open member {i} ({})", p.display())),
                }
            })
        })
        .collect::<anyhow::Result<_>>()?;
    if let Some(i) = members.iter().position(|t| t.file().is_none()) {
        bail!(
            "member {i} ({}) is not a file or block device: an emulated device's bytes live only inside the run that made it, so there is nothing to rebuild from or onto; use --rebuild on that run instead",
            args.targets[i].display()
        );
    }
    Ok(members)
}

/// The raid5 volume rebuilding `--member`, and the writer of its superblocks when the members
/// carry them.
fn build_volume(
    args: &Args,
    members: &[Target],
) -> anyhow::Result<(nines_array::AnyVolume, Option<array_meta::MetaWriter>)> {
    let mut sizes: Vec<u64> = members.iter().map(Target::size_bytes).collect();
    let mut spec = LayoutSpec::Raid5 {
        chunk_bytes: args.chunk,
        failed: None,
        dnd: None,
        rebuild: Some(RebuildSpec {
            member: args.member,
            rate_bytes_per_s: args.rate,
        }),
        fast_fail_ns: None,
        bitmap_region_rows: None,
    };
    // Members with superblocks (served arrays): the others must be current, the data area is
    // what they say, and the replacement joins the array (its superblock written) once it is
    // rebuilt to the end. Without any, the whole rows of the members are rebuilt, as before.
    let any_sb = members
        .iter()
        .filter_map(Target::file)
        .map(array_meta::read_sb)
        .any(|f| f.is_ok_and(|f| f.sb.is_ok_and(|s| !s.creating)));
    let mut writer = None;
    if any_sb {
        let opened = array_meta::open_array(
            &spec,
            &sizes,
            &array_meta::MetaArgs {
                paths: &args.targets,
                create: false,
                read_only: false,
                start_dirty_degraded: false,
                created: &[],
                verb: array_meta::Verb::Rebuild,
            },
            &mut |note| eprintln!("nines: {note}"),
        )
        .context("cannot rebuild the array")?;
        spec = opened.spec;
        sizes = opened.sizes;
        writer = opened.writer;
    }
    let block_bytes = members
        .iter()
        .map(Target::logical_block_bytes)
        .max()
        .unwrap_or(512)
        .max(512);
    let vol = nines_array::build(
        &spec,
        &VolumeParams {
            member_sizes_bytes: &sizes,
            block_bytes,
            tags: 1,
            len_bytes_max: block_bytes,
        },
    )
    .context("cannot build the volume")?;
    Ok((vol, writer))
}

/// Moves the policy's member commands until it stops asking for time (the last row done or
/// the rebuild aborted) or SIGINT/SIGTERM: whether it was interrupted.
fn drive(
    host: &mut VolumeHost,
    members: &[Target],
    data: &mut Scratch,
    bar: &indicatif::ProgressBar,
    start: Instant,
) -> bool {
    let now = |s: &Instant| s.elapsed().as_nanos() as u64;
    // Bounded: each pass rebuilds a row or waits for the rate.
    while let Some(at) = host.next_timer_ns() {
        if nines_io::sched::interrupted() {
            return true;
        }
        let t = now(&start);
        if at > t {
            std::thread::sleep(Duration::from_nanos((at - t).min(100_000_000)));
            continue;
        }
        host.on_timer(now(&start), data);
        while let Some(out) = host.pop() {
            let Output::Cmd(c) = out else {
                continue;
            };
            host.sent(&c, now(&start));
            let result = exec(
                members,
                data,
                c.member,
                c.op,
                c.offset_bytes,
                c.len_bytes,
                c.buf,
            );
            host.member_done(now(&start), CmdDone { id: c.id, result }, data);
        }
        let st = host.volume().stats();
        bar.set_position(st["rebuild"]["rows_rebuilt"].as_u64().unwrap_or(0));
    }
    false
}

fn exec(
    members: &[Target],
    data: &mut Scratch,
    member: u32,
    op: CmdOp,
    offset_bytes: u64,
    len_bytes: u32,
    buf: BufRef,
) -> CmdResult {
    const EIO: i32 = 5;
    let file = members[member as usize]
        .file()
        .expect("members are files (checked when opened)");
    let r = match op {
        CmdOp::Read => file.read_exact_at(data.at(buf, len_bytes), offset_bytes),
        CmdOp::Write => file.write_all_at(data.at(buf, len_bytes), offset_bytes),
        CmdOp::Flush => file.sync_data(),
        _ => return CmdResult::Err(95),
    };
    match r {
        Ok(()) => CmdResult::Ok,
        Err(e) => CmdResult::Err(e.raw_os_error().unwrap_or(EIO)),
    }
}

fn progress_bar(rows: u64, chunk: u64, quiet: bool) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if quiet || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(rows);
    let style = indicatif::ProgressStyle::with_template(&format!(
        "rebuild {{bar:40}} {{pos}}/{{len}} rows of {} KiB, {{percent}}%, ETA {{eta}}",
        chunk >> 10
    ))
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}
