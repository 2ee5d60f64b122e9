//! `nines serve`: one volume (any layout of the volume layer over files or block devices) served
//! over NBD to real clients (fio's nbd engine, qemu, nbdcopy, kernels elsewhere). The protocol
//! is nines-nbd; the server loop is nines-io's `serve` (docs/arch-serve.md).

use std::os::fd::FromRawFd;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args as ClapArgs;
use nines_array::{Volume, VolumeParams};
use nines_core::hdrlog::IntervalLog;
use nines_core::latlog::{self, LatLogHeader};
use nines_core::op::Op;
use nines_core::units::DEFAULT_PERCENTILES;
use nines_io::serve::{
    CONNS_MAX_DEFAULT, HdrSink, Members, PAYLOAD_MAX_BYTES, ServeConfig, ServeLogs, Server, TAGS,
    VOL_IO_MAX_BYTES,
};
use nines_io::target::{Target, TargetOptions};
use nines_nbd::Export;

use super::array_meta;
use super::output::{self, PendingOutput};
use super::workload_args::{EmuArgs, PercentileList, VolumeArgs, parse_pct, parse_size};

#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Members of the volume: files, block devices or emulated SSDs (emu:PRESET[:SIZE]), in
    /// layout order.
    #[arg(required = true, value_name = "TARGET")]
    pub targets: Vec<PathBuf>,
    #[command(flatten)]
    pub volume: VolumeArgs,
    #[command(flatten)]
    pub emu: EmuArgs,
    /// Listen on this Unix socket (created; removed at exit).
    #[arg(long, value_name = "PATH", conflicts_with = "listen")]
    pub socket: Option<PathBuf>,
    /// Listen on this TCP address (ADDR:PORT; 127.0.0.1:10809 is NBD's port on this host only).
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,
    /// The export's name (clients asking for the empty name get it too).
    #[arg(long, default_value = "nines")]
    pub export: String,
    /// Create regular-file members of this size (k/m/g suffixes), or extend smaller ones.
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Serve read-only (writes answered EPERM).
    #[arg(long)]
    pub read_only: bool,
    /// Allow writing to block devices (files are always writable).
    #[arg(long)]
    pub allow_writes: bool,
    /// With --allow-writes: write even to a device that is mounted or holds a filesystem or
    /// partition-table signature. Destroys its data.
    #[arg(long)]
    pub force: bool,
    /// Write the server-side report (latency per request, counters) here at shutdown.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write interval histograms of the served requests' latency (header arrival to reply
    /// hand-off) in the HdrHistogram log format, tagged <export>.read and <export>.write.
    #[arg(long, value_name = "FILE")]
    pub hdr_log: Option<PathBuf>,
    /// Interval of --hdr-log.
    #[arg(long, default_value = "1s", value_name = "DURATION", value_parser = parse_interval)]
    pub hdr_interval: u64,
    /// Log every served read and write (completion time, latency from the request header's
    /// arrival to the reply's hand-off, offset, direction) in nines' per-I/O format, as
    /// profile's --lat-log; decode with `nines log FILE`. Device 0 is the export.
    #[arg(long, value_name = "FILE")]
    pub lat_log: Option<PathBuf>,
    /// raid0/raid5 over members that hold data but no nines superblock (written by an older
    /// nines, profile or another tool): add superblocks, keeping the data (the last 8 KiB of
    /// each member is overwritten, the export shrinks to whole rows below it, and raid5's
    /// parity is recomputed). New members (files with no data) get them without it.
    #[arg(long)]
    pub create: bool,
    /// Serve a raid5 that crashed while a member was out of service, although rows being
    /// written then may read wrong on that member (the RAID5 write hole; md's
    /// start_dirty_degraded).
    #[arg(long)]
    pub start_dirty_degraded: bool,
    /// Percentiles in the --json report [default: 50,90,99,99.9,99.99,99.999,99.9999].
    #[arg(long, value_parser = parse_pct)]
    pub percentiles: Option<PercentileList>,
    /// Connections served at once (handshaking or transmitting); more are closed at once and
    /// the refusals logged on stderr.
    #[arg(long, default_value_t = CONNS_MAX_DEFAULT, value_parser = parse_max_connections)]
    pub max_connections: usize,
    /// A client that has not finished the handshake this long after connecting is closed (an
    /// idle socket cannot hold a connection slot).
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = parse_handshake_timeout)]
    pub handshake_timeout: u64,
    /// Write the server's process id here once it listens (removed at exit).
    #[arg(long, value_name = "FILE")]
    pub pidfile: Option<PathBuf>,
    /// Serve each target as an export of its own, named by its file name (clients list them
    /// with NBD_OPT_LIST, e.g. `nbdinfo --list`, and choose one by name; the first is the
    /// default export), instead of one volume of all the targets.
    #[arg(long, conflicts_with = "export")]
    pub exports_from_files: bool,
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// TLS, as nbdkit and qemu-nbd offer it (NBD_OPT_STARTTLS).
#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "TLS")]
pub struct TlsArgs {
    /// TLS: off, on (offered; plain-text clients served too) or require (every option but
    /// STARTTLS refused before TLS, as nbdkit --tls=require). Default: require when
    /// credentials are given, else off.
    #[arg(long, value_name = "MODE", value_parser = parse_tls_mode)]
    pub tls: Option<nines_nbd::TlsMode>,
    /// X.509 credentials: a directory holding server-cert.pem and server-key.pem (and
    /// ca-cert.pem for --tls-verify-peer), as qemu-nbd and nbdkit name them.
    #[arg(long, value_name = "DIR", conflicts_with = "tls_psk")]
    pub tls_certificates: Option<PathBuf>,
    /// Pre-shared keys: a psktool file of username:hexkey lines (as nbdkit --tls-psk reads).
    #[arg(long, value_name = "FILE")]
    pub tls_psk: Option<PathBuf>,
    /// With --tls-certificates: clients must present a certificate signed by ca-cert.pem.
    #[arg(long, requires = "tls_certificates")]
    pub tls_verify_peer: bool,
}

fn parse_tls_mode(s: &str) -> Result<nines_nbd::TlsMode, String> {
    match s {
        "off" => Ok(nines_nbd::TlsMode::Off),
        "on" => Ok(nines_nbd::TlsMode::On),
        "require" => Ok(nines_nbd::TlsMode::Require),
        _ => Err("must be off, on or require".into()),
    }
}

/// The TLS the server offers, its credentials read and checked: None for --tls off.
pub(super) fn tls_config(t: &TlsArgs) -> anyhow::Result<Option<nines_io::serve::TlsConfig>> {
    use super::serve_tls::{Credentials, OpensslTls};
    use nines_nbd::TlsMode;
    let creds = match (&t.tls_certificates, &t.tls_psk) {
        (Some(dir), _) => Some(Credentials::X509 {
            dir: dir.clone(),
            verify_peer: t.tls_verify_peer,
        }),
        (None, Some(file)) => Some(Credentials::Psk { file: file.clone() }),
        (None, None) => None,
    };
    let mode = t.tls.unwrap_or(if creds.is_some() {
        TlsMode::Require
    } else {
        TlsMode::Off
    });
    match (mode, creds) {
        (TlsMode::Off, None) => Ok(None),
        (TlsMode::Off, Some(_)) => bail!(
            "--tls off contradicts the TLS credentials given; drop --tls off, or the credentials"
        ),
        (_, None) => bail!(
            "--tls on/require needs credentials: give --tls-certificates DIR or --tls-psk FILE"
        ),
        (mode, Some(c)) => Ok(Some(nines_io::serve::TlsConfig {
            mode,
            upgrade: std::sync::Arc::new(OpensslTls::new(&c)?),
        })),
    }
}

/// TCP keepalive on an accepted connection: a peer that vanished (a crashed host, a cut
/// link) is detected after [`KEEPALIVE_IDLE_S`] idle plus [`KEEPALIVE_COUNT`] unanswered probes
/// [`KEEPALIVE_INTERVAL_S`] apart (about two minutes), and its connection closed, instead of
/// holding a slot and its credits for ever.
pub fn set_keepalive(s: &std::net::TcpStream) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = s.as_raw_fd();
    for (level, opt, v) in [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, KEEPALIVE_IDLE_S),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, KEEPALIVE_INTERVAL_S),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, KEEPALIVE_COUNT),
    ] {
        // SAFETY: setsockopt of an int option on a socket we hold.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                level,
                opt,
                (&raw const v).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Seconds a TCP connection is idle before the first keepalive probe.
pub const KEEPALIVE_IDLE_S: libc::c_int = 60;
/// Seconds between keepalive probes.
pub const KEEPALIVE_INTERVAL_S: libc::c_int = 10;
/// Unanswered probes after which the connection is closed.
pub const KEEPALIVE_COUNT: libc::c_int = 6;

fn parse_max_connections(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=65536).contains(&n) => Ok(n),
        Ok(_) => Err("must be 1 to 65536".into()),
        Err(e) => Err(format!("not a count of connections: {e}")),
    }
}

fn parse_handshake_timeout(s: &str) -> Result<u64, String> {
    match nines_core::units::parse_duration_ns(s) {
        Ok(v) if (1_000_000..=3_600_000_000_000).contains(&v) => Ok(v),
        Ok(_) => Err("must be 1ms to 1h".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_interval(s: &str) -> Result<u64, String> {
    match nines_core::units::parse_duration_ns(s) {
        Ok(v) if v >= 1_000_000 => Ok(v),
        Ok(_) => Err("must be at least 1ms".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// The options of `spec` that make the policy write its members on its own.
fn writer_options(spec: &nines_array::LayoutSpec) -> String {
    use nines_array::LayoutSpec;
    let mut v = Vec::new();
    match spec.base() {
        LayoutSpec::Serial(s) if s.persist => v.push("--persist"),
        LayoutSpec::Raid5 {
            rebuild: Some(_), ..
        } => v.push("--rebuild"),
        _ => {}
    }
    if spec.shaping().is_some_and(|s| s.buffer.is_some()) {
        v.push("--buffer");
    }
    v.join(" and ")
}

pub(super) enum Listener {
    Unix(UnixListener),
    Tcp(std::net::TcpListener),
}

pub fn run(args: Args) -> anyhow::Result<()> {
    args.volume.check()?;
    // Credentials are read and checked before anything is opened or bound.
    let tls = tls_config(&args.tls)?;
    if args.exports_from_files {
        return super::serve_exports::run(args, tls);
    }
    let tls_note = match &tls {
        None => String::new(),
        Some(t) => format!(
            " (TLS {})",
            if t.mode == nines_nbd::TlsMode::Require {
                "required"
            } else {
                "offered"
            }
        ),
    };
    if args.force && !args.allow_writes {
        bail!("--force only applies with --allow-writes; add --allow-writes or drop --force");
    }
    let spec = args.volume.spec();
    if args.read_only && spec.writes_members() {
        // The policy itself writes the members whatever the clients do: a persisted serial
        // array formats members without its metadata and commits its table, a rebuild writes
        // the replacement, a write buffer flushes. A read-only serve must write nothing.
        bail!(
            "--read-only cannot be combined with {}: it writes the members itself (a read-only \
             serve must write nothing); drop --read-only, or drop that option",
            writer_options(&spec)
        );
    }
    // Members: each a different file or device, none of them an output.
    let buffer_device = spec
        .shaping()
        .and_then(|s| s.buffer.as_ref())
        .map(|b| PathBuf::from(&b.device));
    let mut named: Vec<(String, &Path)> = args
        .targets
        .iter()
        .enumerate()
        .map(|(i, p)| (format!("member {i}"), p.as_path()))
        .collect();
    if let Some(b) = &buffer_device {
        named.push(("--buffer".into(), b.as_path()));
    }
    output::check_distinct_inputs(&named)?;
    output::note_inputs("member", args.targets.iter().map(PathBuf::as_path));
    output::note_inputs("--buffer device", buffer_device.as_deref());
    output::check_outputs(&[
        ("--json", args.json.as_deref()),
        ("--hdr-log", args.hdr_log.as_deref()),
        ("--lat-log", args.lat_log.as_deref()),
        ("--pidfile", args.pidfile.as_deref()),
    ])?;
    let emu = args.emu.context(1)?;
    let members: Vec<Target> = args
        .targets
        .iter()
        .map(|p| open_member(&args, &spec, &emu, p))
        .collect::<anyhow::Result<_>>()?;
    let groups = spec.group(members.len() as u32);
    if groups.len() != 1 {
        bail!(
            "nines serve serves one volume; {} targets with --layout {} make {} volumes: give one target, a layout over all of them (--layout raid0, raid5 or serial), or --exports-from-files to serve each target as an export of its own",
            members.len(),
            spec.name(),
            groups.len()
        );
    }
    let mut sizes: Vec<u64> = members.iter().map(Target::size_bytes).collect();
    let all_files = members
        .iter()
        .all(|t| t.file().is_some() && !t.is_block_device());
    let plain_layout = spec.shaping().is_none()
        && matches!(
            spec.base(),
            nines_array::LayoutSpec::Independent | nines_array::LayoutSpec::Raid0 { .. }
        );
    let block_bytes = members
        .iter()
        .map(Target::logical_block_bytes)
        .max()
        .unwrap_or(512)
        .max(512);
    // raid0 and raid5 over files and block devices carry superblocks (emulated members keep
    // nothing across runs, shaped layouts are not covered).
    let mut spec = spec;
    // A raid5 of two members is a wrong command, not a member problem: say that before the
    // superblocks are read (their refusal would blame a member).
    if matches!(spec.base(), nines_array::LayoutSpec::Raid5 { .. }) && members.len() < 3 {
        return Err(nines_array::ArrayError::TooFewMembers {
            layout: "raid5",
            min: 3,
        })
        .context("cannot serve the array");
    }
    let mut meta_report = serde_json::Value::Null;
    let meta_writer = if array_meta::meta_layout(&spec).is_some()
        && members.iter().all(|t| t.file().is_some())
    {
        let opened = array_meta::open_array(
            &spec,
            &sizes,
            &array_meta::MetaArgs {
                paths: &args.targets,
                create: args.create,
                read_only: args.read_only,
                start_dirty_degraded: args.start_dirty_degraded,
            },
        )
        .context("cannot serve the array")?;
        spec = opened.spec;
        sizes = opened.sizes;
        meta_report = opened.report;
        opened
            .writer
            .map(|w| std::sync::Arc::new(std::sync::Mutex::new(w)))
    } else {
        if args.create {
            bail!(
                "--create adds superblocks to raid0 or raid5 members that are files or block devices; drop it"
            );
        }
        None
    };
    let vol = nines_array::build(
        &spec,
        &VolumeParams {
            member_sizes_bytes: &sizes,
            block_bytes,
            tags: TAGS,
            len_bytes_max: VOL_IO_MAX_BYTES,
        },
    )
    .context("cannot build the volume")?;
    let export = Export {
        name: args.export.clone(),
        description: format!("nines {} volume", vol.layout()),
        size_bytes: vol.size_bytes() / u64::from(vol.block_bytes().max(block_bytes))
            * u64::from(vol.block_bytes().max(block_bytes)),
        block_min_bytes: vol.block_bytes().max(block_bytes),
        block_preferred_bytes: vol.block_bytes().max(4096),
        payload_max_bytes: PAYLOAD_MAX_BYTES,
        read_only: args.read_only,
        // Zeroes are fast where every member is a regular file zeroed by fallocate and no
        // parity or write-back buffer turns them into writes.
        fast_zero: all_files && plain_layout,
    };
    // The handler first: a supervisor may signal as soon as the socket appears, and a SIGTERM
    // before it would kill serve with no report and the socket file left behind.
    nines_io::sched::install_interrupt_handler()
        .context("cannot install the SIGINT/SIGTERM handler")?;
    let (listener, activated) = listen(&args)?;
    let files = members
        .iter()
        .map(|t| t.file().map(std::fs::File::try_clone).transpose())
        .collect::<std::io::Result<Vec<_>>>()
        .context("cannot duplicate a member's descriptor")?;
    let block_device = members.iter().map(Target::is_block_device).collect();
    let emu_members: Vec<_> = members.iter().map(|t| t.emu().cloned()).collect();
    // The server holds the only descriptors: a member it fails and releases is then closed
    // (and can be removed from the system).
    drop(members);
    let layout = vol.layout();
    let size_bytes = export.size_bytes;
    // One regular file served as is: block status can report its holes.
    let identity_file_map = all_files
        && files.len() == 1
        && spec.shaping().is_none()
        && matches!(spec.base(), nines_array::LayoutSpec::Independent);
    let hdr = match &args.hdr_log {
        None => None,
        Some(path) => {
            let (pending, file) = PendingOutput::create("--hdr-log", path)?;
            let start_unix_ns = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let log = IntervalLog::start(
                std::io::BufWriter::new(file),
                "nines serve: interval latency histograms of the served requests in nanoseconds",
                start_unix_ns,
                std::slice::from_ref(&args.export),
                &[Op::Read, Op::Write],
            )
            .with_context(|| format!("--hdr-log: cannot write {}", path.display()))?;
            Some((
                pending,
                HdrSink {
                    interval_ns: args.hdr_interval,
                    log,
                },
            ))
        }
    };
    let (hdr_pending, hdr_sink) = match hdr {
        Some((p, s)) => (Some(p), Some(s)),
        None => (None, None),
    };
    let (lat_pending, lat_file) = match &args.lat_log {
        None => (None, None),
        Some(path) => {
            let (pending, mut file) = PendingOutput::create("--lat-log", path)?;
            let start_unix_ns = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            latlog::write_header(
                &mut file,
                &LatLogHeader {
                    devices: vec![args.export.clone()],
                    start_unix_ns,
                },
            )
            .with_context(|| format!("--lat-log: cannot write {}", path.display()))?;
            (Some(pending), Some(file))
        }
    };
    let mut server = Server::start(
        vol,
        Members {
            files,
            emu: emu_members.clone(),
            block_device,
            names: args
                .targets
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            on_failed: meta_writer.as_ref().map(|w| {
                let w = std::sync::Arc::clone(w);
                Box::new(move |m: u32| {
                    if let Ok(mut w) = w.lock() {
                        w.member_failed(m);
                    }
                }) as Box<dyn FnMut(u32) + Send>
            }),
        },
        export,
        ServeLogs {
            hdr: hdr_sink,
            lat: lat_file,
        },
        ServeConfig {
            max_connections: args.max_connections,
            handshake_timeout: Duration::from_nanos(args.handshake_timeout),
            identity_file_map,
            tls,
            // Large request buffers take at most half of what the host has available now.
            buffer_budget_bytes: super::hostmem::serve_buffer_budget_bytes(),
        },
    )
    .context("cannot start the server")?;
    if let Some(p) = &args.pidfile {
        // Through the one output layer: a symlink is followed, a device or a member refused.
        output::write_all(
            "--pidfile",
            p,
            format!("{}\n", std::process::id()).as_bytes(),
        )?;
    }
    if let nines_array::LayoutSpec::Serial(sp) = spec.base()
        && !sp.persist
    {
        eprintln!(
            "nines: the serial array's mapping is in memory only: a restart starts it empty \
             (add --persist to keep it on the members)"
        );
    }
    eprintln!(
        "nines: serving {} ({layout}, {} bytes) as export {:?}{tls_note}; SIGINT/SIGTERM stops",
        args.targets
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(","),
        size_bytes,
        args.export
    );
    // What the report's measured time and start are: from the first accept to the stop.
    let served_since = std::time::Instant::now();
    let start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    accept_loop(&listener, activated, &mut server)?;
    let connections_refused = server.refused_connections();
    let outcome = server.stop();
    if let Some(w) = &meta_writer {
        // Stopped and flushed: the bitmap cleared and the array marked clean; a replacement
        // rebuilt to the end is a member again.
        let rebuilt = match spec.base() {
            nines_array::LayoutSpec::Raid5 {
                rebuild: Some(r), ..
            } if !outcome.volume_stats["rebuild"]["done_ns"].is_null() => Some(r.member),
            _ => None,
        };
        w.lock()
            .map_err(|_| anyhow::anyhow!("the superblock writer panicked"))?
            .clean_stop(rebuilt)
            .context("cannot mark the array clean in its superblocks")?;
    }
    let measured_ns = (served_since.elapsed().as_nanos() as u64).max(1);
    if let Some(p) = &args.socket {
        let _ = std::fs::remove_file(p);
    }
    if let Some(p) = &args.pidfile {
        let _ = std::fs::remove_file(p);
    }
    let percentiles = args
        .percentiles
        .as_ref()
        .map_or_else(|| DEFAULT_PERCENTILES.to_vec(), |p| p.0.clone());
    let dir = |op| {
        let d = outcome.recorder.dir(op);
        serde_json::json!({
            "ios": d.ios,
            "bytes": d.bytes,
            "latency_ns": d.summary(&percentiles),
        })
    };
    let serve_block = serde_json::json!({
            "export": args.export,
            "layout": layout,
            "layout_options": spec.options(),
            "size_bytes": size_bytes,
            "targets": args.targets,
            "connections": outcome.connections,
            "connections_refused": connections_refused,
            "read": dir(Op::Read),
            "write": dir(Op::Write),
            "flushes": outcome.flushes,
            "trims": outcome.trims,
            "write_zeroes": outcome.write_zeroes,
            "refused": outcome.refused,
            "cache_and_block_status": outcome.answered_by_reader,
            "member_cmds": outcome.member_cmds,
            "member_cmds_inline": outcome.member_cmds_inline,
            "member_errors": outcome.member_errors,
            "member_failures": outcome
                .member_failures
                .iter()
                .map(|f| serde_json::json!({
                    "member": f.member,
                    "target": f.name,
                    "errno": f.errno,
                    "at_s": f.at_s,
                    "released": f.released,
                }))
                .collect::<Vec<_>>(),
            "volume": outcome.volume_stats,
            "superblocks": meta_report,
            "emu": emu_members
                .iter()
                .flatten()
                .map(|h| {
                    let i = h.info();
                    let o = h.overhead();
                    serde_json::json!({
                        "spec": i.spec,
                        "preset": i.preset,
                        "scale": i.scale,
                        "size_bytes": i.size_bytes,
                        "precondition": i.precondition,
                        "overhead_ns": {
                            "count": o.count,
                            "p50": o.p50_ns,
                            "p99": o.p99_ns,
                            "p99.99": o.p9999_ns,
                            "max": o.max_ns,
                        },
                    })
                })
                .collect::<Vec<_>>(),
    });
    let report = served_report(
        &args,
        layout,
        spec.options(),
        size_bytes,
        &outcome,
        &percentiles,
        measured_ns,
        start_unix_ns,
        serve_block,
    )?;
    if let Some(pending) = hdr_pending {
        if let Some(e) = outcome.hdr_log_error {
            return Err(e)
                .with_context(|| format!("--hdr-log: cannot write {}", pending.path().display()));
        }
        pending.commit()?;
    }
    if let Some(pending) = lat_pending {
        if let Some(e) = outcome.lat_log_error {
            return Err(e)
                .with_context(|| format!("--lat-log: cannot write {}", pending.path().display()));
        }
        if outcome.lat_log_stalls > 0 {
            eprintln!(
                "nines: warning: the server waited {} for the --lat-log writer (a slow disk under the log); no record was dropped",
                nines_core::units::counted(outcome.lat_log_stalls, "time", "times")
            );
        }
        pending.commit()?;
    }
    if let Some(path) = &args.json {
        let mut text = serde_json::to_vec_pretty(&report)?;
        text.push(b'\n');
        output::write_all("--json", path, &text)?;
    }
    use nines_core::units::counted;
    eprintln!(
        "nines: served {}, {}, {} over {}",
        counted(outcome.recorder.dir(Op::Read).ios, "read", "reads"),
        counted(outcome.recorder.dir(Op::Write).ios, "write", "writes"),
        counted(outcome.flushes, "flush", "flushes"),
        counted(outcome.connections, "connection", "connections")
    );
    Ok(())
}

/// Opens one member as serve does: block devices O_DIRECT, regular files buffered, with
/// profile's write-safety checks.
pub(super) fn open_member(
    args: &Args,
    spec: &nines_array::LayoutSpec,
    emu: &nines_io::emu::EmuContext,
    p: &Path,
) -> anyhow::Result<Target> {
    // Block devices are served O_DIRECT, as qemu's cache=none: the device's own
    // latency, and an I/O error when the command fails, not at a later writeback.
    // Regular files go through the page cache (FLUSH fdatasyncs them).
    let block = std::fs::metadata(p).is_ok_and(|m| m.file_type().is_block_device());
    Target::open_with(
        p,
        &TargetOptions {
            write: !args.read_only || spec.writes_members(),
            allow_writes: args.allow_writes,
            force: args.force,
            buffered: !block,
            create_size_bytes: args.size,
        },
        emu,
    )
    .map_err(|e| match e {
        // The target's own advice speaks of workloads; serve's fix is --read-only.
        nines_io::target::TargetError::ReadOnly { .. } => anyhow::anyhow!(
            "cannot serve {}: it is on a read-only filesystem; pass --read-only to serve it without writing",
            p.display()
        ),
        e => anyhow::Error::new(e).context(format!("cannot serve {}", p.display())),
    })
}

/// Hands every client to the server until SIGINT/SIGTERM (or, when socket-activated, until the
/// last client has left).
pub(super) fn accept_loop(
    listener: &Listener,
    activated: bool,
    server: &mut Server,
) -> anyhow::Result<()> {
    while !nines_io::sched::interrupted() {
        // Socket activation (nbdinfo/nbdcopy -- [ nines serve ... ]): the server is its
        // client's, and ends when the last client left, as qemu-nbd and nbdkit do.
        if activated && server.accepted_connections() > 0 && server.live_connections() == 0 {
            break;
        }
        let conn: Option<Box<dyn nines_io::serve::Conn>> = match listener {
            Listener::Unix(l) => match l.accept() {
                Ok((s, _)) => Some(Box::new(blocking(s)?)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
                Err(e) => return Err(e).context("accept failed"),
            },
            Listener::Tcp(l) => match l.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false)?;
                    if let Err(e) = set_keepalive(&s) {
                        // Served anyway: only a vanished peer's detection is lost.
                        eprintln!("nines: warning: cannot set TCP keepalive on a connection: {e}");
                    }
                    Some(Box::new(s))
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
                Err(e) => return Err(e).context("accept failed"),
            },
        };
        match conn {
            Some(c) => {
                server.accept(c).context("cannot serve a connection")?;
            }
            // Wait for the next client, waking often enough to see a signal (or, when
            // activated, the last client leaving) promptly.
            None => wait_readable(listener, 50),
        }
    }
    Ok(())
}

fn blocking(s: std::os::unix::net::UnixStream) -> anyhow::Result<std::os::unix::net::UnixStream> {
    s.set_nonblocking(false)?;
    Ok(s)
}

/// Waits up to `timeout_ms` for a connection on the listener (EINTR, a signal, ends it early).
fn wait_readable(l: &Listener, timeout_ms: i32) {
    use std::os::fd::AsRawFd;
    let fd = match l {
        Listener::Unix(l) => l.as_raw_fd(),
        Listener::Tcp(l) => l.as_raw_fd(),
    };
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd on our own listening socket, alive across the call.
    unsafe { libc::poll(&mut p, 1, timeout_ms) };
}

/// The listening socket: systemd-style activation (LISTEN_PID is us, LISTEN_FDS=1: fd 3), or
/// --socket / --listen; and whether it came by activation. Listeners are non-blocking so
/// SIGINT/SIGTERM are seen promptly.
pub(super) fn listen(args: &Args) -> anyhow::Result<(Listener, bool)> {
    let activated = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        == Some(std::process::id());
    if activated {
        let fds = std::env::var("LISTEN_FDS").unwrap_or_default();
        if fds != "1" {
            bail!(
                "socket activation passed LISTEN_FDS={fds}; nines serve takes exactly one socket"
            );
        }
        // SAFETY: the activating parent passes fd 3 as a listening socket (sd_listen_fds(3)).
        let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let rc = unsafe { libc::getsockname(3, (&raw mut addr).cast(), &mut len) };
        if rc != 0 {
            bail!(
                "socket activation: fd 3 is not a socket; start nines serve with --socket or --listen"
            );
        }
        let l = if i32::from(addr.ss_family) == libc::AF_UNIX {
            // SAFETY: fd 3 is a Unix socket we now own.
            Listener::Unix(unsafe { UnixListener::from_raw_fd(3) })
        } else {
            // SAFETY: fd 3 is an inet socket we now own.
            Listener::Tcp(unsafe { std::net::TcpListener::from_raw_fd(3) })
        };
        // SAFETY: clearing our own environment before any thread is started.
        unsafe {
            std::env::remove_var("LISTEN_PID");
            std::env::remove_var("LISTEN_FDS");
        }
        set_nonblocking(&l)?;
        return Ok((l, true));
    }
    let l = match (&args.socket, &args.listen) {
        (Some(p), _) => Listener::Unix(UnixListener::bind(p).with_context(|| {
            format!(
                "cannot listen on {}: remove a stale socket file or choose another path",
                p.display()
            )
        })?),
        (None, Some(a)) => Listener::Tcp(
            std::net::TcpListener::bind(a)
                .with_context(|| format!("cannot listen on {a}: is the port in use?"))?,
        ),
        (None, None) => bail!(
            "serve needs --socket PATH or --listen ADDR:PORT (or socket activation, as `nbdinfo -- [ nines serve ... ]` does)"
        ),
    };
    set_nonblocking(&l)?;
    Ok((l, false))
}

fn set_nonblocking(l: &Listener) -> anyhow::Result<()> {
    match l {
        Listener::Unix(l) => l.set_nonblocking(true),
        Listener::Tcp(l) => l.set_nonblocking(true),
    }
    .context("cannot make the listening socket non-blocking")
}

/// The workload a server saw, as a report states it: the directions seen, the read share and
/// the mean request size (the clients' queue depth is not known).
pub(super) fn served_workload(
    rec: &nines_core::stats::DeviceRecorder,
    measured_ns: u64,
) -> nines_core::workload::WorkloadSpec {
    use nines_core::workload::{RwMode, WorkloadSpec};
    let (r, w) = (rec.dir(Op::Read), rec.dir(Op::Write));
    let ios = r.ios + w.ios;
    WorkloadSpec {
        rw: match (r.ios, w.ios) {
            (_, 0) => RwMode::RandRead,
            (0, _) => RwMode::RandWrite,
            _ => RwMode::RandRw,
        },
        read_mix_pct: (r.ios * 100).checked_div(ios).unwrap_or(100) as u8,
        block_size_bytes: (r.bytes + w.bytes).checked_div(ios).unwrap_or(0),
        runtime_ns: Some(measured_ns),
        ..WorkloadSpec::default()
    }
}

/// A serve report's `extra` start: host, kernel, verb.
pub(super) fn served_extra() -> serde_json::Map<String, serde_json::Value> {
    let mut extra = serde_json::Map::new();
    if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        extra.insert("hostname".into(), serde_json::json!(h.trim()));
    }
    if let Ok(k) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        extra.insert("kernel".into(), serde_json::json!(k.trim()));
    }
    extra.insert("verb".into(), serde_json::json!("serve"));
    extra
}

/// What `serve --json` writes: a nines report (docs/report-schema.md: `kind` "profile", engine
/// "serve", one target, the export, with the volume's members) that `report`, `compare` and
/// `merge` read, plus the server's own counters under `nines_serve`. The workload is what the
/// clients sent: the directions seen, the read share and the mean request size; the clients'
/// queue depth is not known (`iodepth` 1).
#[allow(clippy::too_many_arguments)]
fn served_report(
    args: &Args,
    layout: &str,
    layout_options: serde_json::Value,
    size_bytes: u64,
    outcome: &nines_io::serve::ServeOutcome,
    percentiles: &[f64],
    measured_ns: u64,
    start_unix_ns: u64,
    serve_block: serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    use nines_core::report::{
        DeviceMeta, MemberReport, ReportBuilder, RunConfig, RunKind, VolumeReport,
    };
    let workload = served_workload(&outcome.recorder, measured_ns);
    let mut extra = served_extra();
    extra.insert("export".into(), serde_json::json!(args.export));
    extra.insert("layout".into(), serde_json::json!(layout));
    extra.insert("connections".into(), serde_json::json!(outcome.connections));
    extra.insert("flushes".into(), serde_json::json!(outcome.flushes));
    extra.insert("trims".into(), serde_json::json!(outcome.trims));
    extra.insert("refused".into(), serde_json::json!(outcome.refused));
    if let Some(emu) = serve_block
        .get("emu")
        .filter(|e| e.as_array().is_some_and(|a| !a.is_empty()))
    {
        extra.insert("emu".into(), serde_json::json!({ "devices": emu }));
    }
    let config = RunConfig {
        workload,
        engine: "serve".into(),
        percentiles: percentiles.to_vec(),
        measured_ns,
        start_unix_ns: Some(start_unix_ns),
        lat_log: args.lat_log.as_ref().map(|p| p.display().to_string()),
        hdr_log: args.hdr_log.as_ref().map(|p| p.display().to_string()),
        extra,
    };
    let mut b = ReportBuilder::new(RunKind::Profile, config);
    b.device(
        DeviceMeta {
            name: args.export.clone(),
            path: None,
            size_bytes,
            cpu: None,
        },
        &outcome.recorder,
    );
    if args.targets.len() > 1 {
        let members = args
            .targets
            .iter()
            .enumerate()
            .map(|(i, t)| MemberReport {
                index: i as u32,
                name: t.display().to_string(),
                path: Some(t.display().to_string()),
                size_bytes: 0,
                commands: outcome.member_cmds.get(i).copied().unwrap_or(0),
                errors: outcome.member_errors.get(i).copied().unwrap_or(0),
                read: None,
                write: None,
                internals: None,
                interrupts: None,
            })
            .collect();
        b.device_volume(VolumeReport {
            layout: layout.to_string(),
            options: layout_options,
            stats: outcome.volume_stats.clone(),
            members,
        });
    }
    let mut v = serde_json::to_value(b.finish())?;
    // The server's own counters, as before (tools that read `nines_serve` keep working).
    if let Some(o) = v.as_object_mut() {
        o.insert("nines_serve".into(), serve_block);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn connection_options_parse_and_refuse_out_of_range_values() {
        assert_eq!(parse_max_connections("300"), Ok(300));
        assert!(parse_max_connections("0").is_err());
        assert!(parse_max_connections("65537").is_err());
        assert!(parse_max_connections("-1").is_err());
        assert_eq!(parse_handshake_timeout("700ms"), Ok(700_000_000));
        assert_eq!(parse_handshake_timeout("10s"), Ok(10_000_000_000));
        assert!(parse_handshake_timeout("0s").is_err());
        assert!(parse_handshake_timeout("2h").is_err());
        assert!(parse_handshake_timeout("soon").is_err());
    }

    /// The four keepalive options of an accepted connection, read back with getsockopt.
    #[test]
    fn accepted_tcp_sockets_get_keepalive() {
        use std::os::fd::AsRawFd;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let get = |level, opt| {
            let mut v: libc::c_int = -1;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: getsockopt of an int option into a local of that size.
            let rc = unsafe {
                libc::getsockopt(s.as_raw_fd(), level, opt, (&raw mut v).cast(), &mut len)
            };
            assert_eq!(rc, 0);
            v
        };
        assert_eq!(
            get(libc::SOL_SOCKET, libc::SO_KEEPALIVE),
            0,
            "off by default"
        );
        set_keepalive(&s).unwrap();
        assert_eq!(get(libc::SOL_SOCKET, libc::SO_KEEPALIVE), 1);
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE), KEEPALIVE_IDLE_S);
        assert_eq!(
            get(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL),
            KEEPALIVE_INTERVAL_S
        );
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPCNT), KEEPALIVE_COUNT);
    }

    #[test]
    fn tls_modes_parse() {
        use nines_nbd::TlsMode;
        assert_eq!(parse_tls_mode("off"), Ok(TlsMode::Off));
        assert_eq!(parse_tls_mode("on"), Ok(TlsMode::On));
        assert_eq!(parse_tls_mode("require"), Ok(TlsMode::Require));
        assert!(parse_tls_mode("yes").is_err());
    }

    proptest! {
        /// Any text: a count in range equal to what was written, or an error that says why.
        #[test]
        fn max_connections_accepts_only_counts_in_range(s in prop_oneof![".*", "[0-9]{1,7}"]) {
            match parse_max_connections(&s) {
                Ok(n) => {
                    prop_assert!((1..=65536).contains(&n));
                    prop_assert_eq!(s.parse::<usize>(), Ok(n));
                }
                Err(e) => prop_assert!(!e.is_empty()),
            }
        }

        /// Any text: a timeout from 1 ms to 1 h, or an error.
        #[test]
        fn handshake_timeout_accepts_only_durations_in_range(s in prop_oneof![".*", "[0-9]{1,5}(ms|s|m)"]) {
            if let Ok(ns) = parse_handshake_timeout(&s) {
                prop_assert!((1_000_000..=3_600_000_000_000).contains(&ns));
            }
        }
    }
}
