//! `nines serve`: one volume (any layout of the volume layer over files or block devices) served
//! over NBD to real clients (fio's nbd engine, qemu, nbdcopy, kernels elsewhere). The protocol
//! is nines-nbd; the serve itself is nines-io's `serve::open` and `OpenServe::serve`
//! (docs/arch-serve.md). This page parses the arguments into a `ServeSpec`, checks and creates
//! the outputs through the one output layer, binds the socket, and prints.

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args as ClapArgs;
use nines_core::units::{DEFAULT_PERCENTILES, counted};
use nines_io::serve::{
    CONNS_MAX_DEFAULT, Exports, Listener, ServeEvents, ServeHandle, ServeLogFiles, ServeSpec,
    Served, Started,
};
use nines_nbd::TlsMode;

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

pub fn run(args: Args) -> anyhow::Result<()> {
    // The handler first, before anything is written: a SIGTERM while the members' superblocks
    // are initialised (`--create`'s resync of every row can take a while) or while a supervisor
    // waits for the socket would otherwise kill serve half-way, with no report and the socket
    // file left behind; the resync stops at the next row and says so (run it again).
    nines_io::sched::install_interrupt_handler()
        .context("cannot install the SIGINT/SIGTERM handler")?;
    args.volume.check()?;
    // Credentials are read and checked before anything is opened or bound.
    let mut spec = serve_spec(&args)?;
    spec.check()?;
    check_paths(&args, &spec)?;
    refuse_lone_members(&args, &spec)?;
    spec.emu = args.emu.context(1)?;
    let mut events = Events {
        args: &args,
        pidfile: None,
    };
    // Large request buffers (of all exports together) take at most half of what the host has
    // available once the members (emulated ones with their models) are open.
    let opened = nines_io::serve::open(spec, &mut events)?
        .with_buffer_budget(super::hostmem::serve_buffer_budget_bytes());
    let (listener, socket) = listen(&args)?;
    let served = create_logs(&args).and_then(|(files, hdr, lat)| {
        let served = opened.serve(listener, files, &ServeHandle::new(), &mut events)?;
        Ok((served, hdr, lat))
    });
    // Only what this process created is removed, and only while the path still names it.
    for created in [socket, events.pidfile.take()].into_iter().flatten() {
        created.remove();
    }
    let (mut served, hdr_pending, lat_pending) = served?;
    keep_log("--hdr-log", hdr_pending, served.hdr_log_error.take(), 0)?;
    let stalls = served.lat_log_stalls;
    keep_log(
        "--lat-log",
        lat_pending,
        served.lat_log_error.take(),
        stalls,
    )?;
    if let Some(path) = &args.json {
        let mut text = serde_json::to_vec_pretty(&served.json()?)?;
        text.push(b'\n');
        output::write_all("--json", path, &text)?;
    }
    eprintln!("nines: {}", served_line(&served, args.exports_from_files));
    Ok(())
}

/// The arguments as a serve: one volume of the targets, or (`--exports-from-files`) an export
/// per target; the emulated members' context is added once the outputs are checked.
fn serve_spec(args: &Args) -> anyhow::Result<ServeSpec> {
    let tls = tls_config(&args.tls)?;
    let mut spec = ServeSpec::new(args.targets.clone());
    spec.layout = args.volume.spec();
    spec.exports = if args.exports_from_files {
        Exports::PerFile
    } else {
        Exports::Volume {
            name: args.export.clone(),
        }
    };
    spec.create_size_bytes = args.size;
    spec.read_only = args.read_only;
    spec.allow_writes = args.allow_writes;
    spec.force = args.force;
    spec.create = args.create;
    spec.start_dirty_degraded = args.start_dirty_degraded;
    spec.percentiles = args
        .percentiles
        .as_ref()
        .map_or_else(|| DEFAULT_PERCENTILES.to_vec(), |p| p.0.clone());
    spec.max_connections = args.max_connections;
    spec.handshake_timeout = Duration::from_nanos(args.handshake_timeout);
    spec.tls = tls;
    spec.hdr_interval_ns = args.hdr_interval;
    spec.hdr_log = args.hdr_log.as_ref().map(|p| p.display().to_string());
    spec.lat_log = args.lat_log.as_ref().map(|p| p.display().to_string());
    Ok(spec)
}

/// Members: each a different file or device, none of them an output.
fn check_paths(args: &Args, spec: &ServeSpec) -> anyhow::Result<()> {
    let buffer_device = spec
        .layout
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
    if let Some(p) = &args.pidfile {
        // Written whole and removed at exit: only a regular file (or a new name) can be one.
        output::regular_file_destination("--pidfile", p)?;
        if args.socket.as_deref().is_some_and(|s| same_path(s, p)) {
            bail!(
                "--socket and --pidfile both name {}; give each its own file",
                p.display()
            );
        }
    }
    Ok(())
}

/// A raid0/raid5 member served alone and writable would have its array's data (and the
/// superblock in its last page) overwritten by a client that sees one plain disk: refused in one
/// line unless `--read-only` or `--force`. Per-file exports count as alone too.
fn refuse_lone_members(args: &Args, spec: &ServeSpec) -> anyhow::Result<()> {
    if spec.read_only || spec.force || !matches!(spec.layout, nines_array::LayoutSpec::Independent)
    {
        return Ok(());
    }
    for (i, p) in args.targets.iter().enumerate() {
        // Emulated members and paths that do not open are not arrays' (the open says why).
        let Ok(f) = std::fs::File::open(p) else {
            continue;
        };
        let Ok(found) = nines_io::array_meta::read_sb(&f) else {
            continue;
        };
        let Ok(sb) = found.sb else {
            continue;
        };
        let layout = match sb.layout {
            nines_array::meta::MetaLayout::Raid0 => "raid0",
            nines_array::meta::MetaLayout::Raid5 => "raid5",
        };
        let at = if args.targets.len() > 1 {
            format!(" (target {i})")
        } else {
            String::new()
        };
        bail!(
            "{}{at} is member {} of a {}-member {layout} array (nines superblock, array {}): \
             served alone, a client's writes would overwrite the array's data; serve the array \
             (`nines serve --layout {layout}` with all {} members in order), or pass \
             --read-only to look at this member, or --allow-writes --force to overwrite it",
            p.display(),
            sb.role,
            sb.members,
            nines_array::meta::uuid_text(&sb.array_uuid),
            sb.members
        );
    }
    Ok(())
}

/// Whether two paths name one file (or, not existing yet, one name).
fn same_path(a: &Path, b: &Path) -> bool {
    let canon = |p: &Path| std::fs::canonicalize(p).ok();
    a == b || canon(a).is_some_and(|x| Some(x) == canon(b))
}

/// The logs' files, under temporary names until the serve succeeded.
type Logs = (ServeLogFiles, Option<PendingOutput>, Option<PendingOutput>);

fn create_logs(args: &Args) -> anyhow::Result<Logs> {
    let create = |option, path: &Option<PathBuf>| {
        path.as_deref()
            .map(|p| PendingOutput::create(option, p))
            .transpose()
    };
    let hdr = create("--hdr-log", &args.hdr_log)?;
    let lat = create("--lat-log", &args.lat_log)?;
    let (hdr_pending, hdr) = hdr.map_or((None, None), |(p, f)| (Some(p), Some(f)));
    let (lat_pending, lat) = lat.map_or((None, None), |(p, f)| (Some(p), Some(f)));
    Ok((ServeLogFiles { hdr, lat }, hdr_pending, lat_pending))
}

/// Moves a log into place, unless the server could not write it (saying how often the server
/// waited for its writer).
fn keep_log(
    option: &str,
    pending: Option<PendingOutput>,
    error: Option<std::io::Error>,
    stalls: u64,
) -> anyhow::Result<()> {
    let Some(pending) = pending else {
        return Ok(());
    };
    if let Some(e) = error {
        return Err(e)
            .with_context(|| format!("{option}: cannot write {}", pending.path().display()));
    }
    if stalls > 0 {
        eprintln!(
            "nines: warning: the server waited {} for the {option} writer (a slow disk under the log); no record was dropped",
            counted(stalls, "time", "times")
        );
    }
    pending.commit()
}

/// What the serve tells the user: notes, and once it serves, the pid file and what is served.
struct Events<'a> {
    args: &'a Args,
    /// The pid file once written: removed at exit if it is still ours.
    pidfile: Option<output::CreatedFile>,
}

impl ServeEvents for Events<'_> {
    fn note(&mut self, text: &str) {
        eprintln!("nines: {text}");
    }

    fn started(&mut self, s: &Started) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        if let Some(p) = &self.args.pidfile {
            // Through the one output layer: a symlink is followed, anything but a regular file
            // refused; the file created is recorded so that exit removes only it.
            let pid = format!("{}\n", std::process::id());
            self.pidfile = Some(output::write_created("--pidfile", p, pid.as_bytes())?);
        }
        let tls = match s.tls {
            None => "",
            Some(TlsMode::Require) => " (TLS required)",
            Some(_) => " (TLS offered)",
        };
        let names: Vec<String> = s.exports.iter().map(|(n, _)| format!("{n:?}")).collect();
        if self.args.exports_from_files {
            eprintln!(
                "nines: serving {} as exports {}{tls}; SIGINT/SIGTERM stops",
                counted(s.exports.len() as u64, "file", "files"),
                names.join(", ")
            );
        } else {
            let targets: Vec<String> = self
                .args
                .targets
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            eprintln!(
                "nines: serving {} ({}, {} bytes) as export {}{tls}; SIGINT/SIGTERM stops",
                targets.join(","),
                s.layout,
                s.exports[0].1,
                names[0]
            );
        }
        Ok(())
    }
}

/// The last line: what was served.
fn served_line(s: &Served, per_file: bool) -> String {
    let line = format!(
        "served {}, {}, {} over {}",
        counted(s.reads, "read", "reads"),
        counted(s.writes, "write", "writes"),
        counted(s.flushes, "flush", "flushes"),
        counted(s.connections, "connection", "connections")
    );
    if per_file {
        return format!(
            "{line} to {}",
            counted(s.exports as u64, "export", "exports")
        );
    }
    line
}

/// The listening socket: systemd-style activation (LISTEN_PID is us, LISTEN_FDS=1: fd 3), or
/// --socket / --listen; with the socket file this process bound, to remove at exit.
fn listen(args: &Args) -> anyhow::Result<(Listener, Option<output::CreatedFile>)> {
    // SAFETY: called once, before the server starts any thread.
    if let Some(l) = unsafe { Listener::from_activation() }? {
        return Ok((l, None));
    }
    Ok(match (&args.socket, &args.listen) {
        (Some(p), _) => {
            let l = UnixListener::bind(p).with_context(|| {
                format!(
                    "cannot listen on {}: remove a stale socket file or choose another path",
                    p.display()
                )
            })?;
            (Listener::Unix(l), output::CreatedFile::record(p))
        }
        (None, Some(a)) => (
            Listener::Tcp(
                std::net::TcpListener::bind(a)
                    .with_context(|| format!("cannot listen on {a}: is the port in use?"))?,
            ),
            None,
        ),
        (None, None) => bail!(
            "serve needs --socket PATH or --listen ADDR:PORT (or socket activation, as `nbdinfo -- [ nines serve ... ]` does)"
        ),
    })
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
