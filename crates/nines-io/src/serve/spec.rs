//! Serving as a library call (issue 32): a [`ServeSpec`] (the members, their layout, how they
//! are exported, the write permissions, TLS, the connection limits and the buffer budget) is
//! what `nines serve` parses its arguments into; [`open()`] opens the members with the write
//! safety checks, reads or writes the array's superblocks (raid0, raid5) and builds each
//! export's volume; [`OpenServe::serve`] serves them on a listening socket until its
//! [`ServeHandle`] is stopped (or the process's interrupt flag is set: SIGINT/SIGTERM after
//! `sched::install_interrupt_handler`) and returns what was served, the report included.
//! Nothing is printed here but what the server's core logs while it runs (refused
//! connections, failed members): notes and the moment serving starts go through
//! [`ServeEvents`].
//!
//! Order matters for "nothing bound or written on a refusal": [`ServeSpec::check`] and
//! [`open()`] refuse before the caller binds its socket; the logs' files are the caller's (it
//! creates them under temporary names and keeps them when the serve succeeded).
//!
//! ```
//! use std::io::{Read, Write};
//! use nines_io::serve::{Listener, ServeHandle, ServeSpec, serve};
//!
//! // A 4 MiB temporary file served on a loopback port; a client negotiates the default export
//! // (fixed newstyle, NBD_OPT_EXPORT_NAME) and stops the server through the handle.
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("disk.img");
//! std::fs::File::create(&path).unwrap().set_len(4 << 20).unwrap();
//! let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
//! let addr = listener.local_addr().unwrap();
//! let handle = ServeHandle::new();
//! let stopper = handle.clone();
//! let client = std::thread::spawn(move || {
//!     let mut c = std::net::TcpStream::connect(addr).unwrap();
//!     let mut greeting = [0u8; 18]; // NBDMAGIC, IHAVEOPT, the handshake flags
//!     c.read_exact(&mut greeting).unwrap();
//!     c.write_all(&3u32.to_be_bytes()).unwrap(); // fixed newstyle, no zeroes
//!     c.write_all(b"IHAVEOPT").unwrap();
//!     c.write_all(&1u32.to_be_bytes()).unwrap(); // NBD_OPT_EXPORT_NAME, the empty name
//!     c.write_all(&0u32.to_be_bytes()).unwrap();
//!     let mut export = [0u8; 10]; // its size, its transmission flags
//!     c.read_exact(&mut export).unwrap();
//!     stopper.stop();
//!     (greeting, u64::from_be_bytes(export[..8].try_into().unwrap()))
//! });
//! let served = serve(ServeSpec::new(vec![path]), Listener::Tcp(listener), &handle, &mut ()).unwrap();
//! let (greeting, size_bytes) = client.join().unwrap();
//! assert_eq!(&greeting[..16], b"NBDMAGICIHAVEOPT");
//! assert_eq!(size_bytes, 4 << 20);
//! assert_eq!(served.connections, 1);
//! assert_eq!(served.report.devices[0].size_bytes, 4 << 20);
//! ```

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nines_array::{AnyVolume, ArrayError, LayoutSpec, Volume, VolumeParams};
use nines_core::hdrlog::IntervalLog;
use nines_core::latlog::{self, LatLogHeader};
use nines_core::op::Op;
use nines_core::report::Report;
use nines_core::units::DEFAULT_PERCENTILES;
use nines_nbd::{Export, TlsMode};

use super::{
    BUFFER_BUDGET_DEFAULT_BYTES, CONNS_MAX_DEFAULT, Conn, HANDSHAKE_TIMEOUT_DEFAULT, HdrSink,
    Members, PAYLOAD_MAX_BYTES, ServeConfig, ServeLogs, ServeOutcome, ServedVolume, Server, TAGS,
    TlsConfig, VOL_IO_MAX_BYTES,
};
use crate::array_meta::{self, MetaError, MetaWriter};
use crate::emu::{EmuContext, EmuHandle};
use crate::target::{Target, TargetError, TargetOptions};

mod report;

/// How the targets are exported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exports {
    /// One volume of all the targets (in `layout`), the export of this name (clients asking
    /// for the empty name get it too).
    Volume { name: String },
    /// Each target an export of its own, served as it is and named by its file name (the
    /// first is the default export); `layout` must be independent.
    PerFile,
}

/// A serve, as a value: what `nines serve` parses its arguments into.
#[derive(Debug)]
pub struct ServeSpec {
    /// Files, block devices or `emu:` devices, in layout order.
    pub targets: Vec<PathBuf>,
    pub layout: LayoutSpec,
    pub exports: Exports,
    /// Create regular-file members of this size, or extend smaller ones.
    pub create_size_bytes: Option<u64>,
    /// Writes answered EPERM.
    pub read_only: bool,
    /// Write to block devices (files are always writable).
    pub allow_writes: bool,
    /// With `allow_writes`: even to a device that is mounted or holds a signature.
    pub force: bool,
    /// raid0/raid5 over members that hold data but no superblock: add superblocks.
    pub create: bool,
    /// Serve a raid5 that crashed while degraded.
    pub start_dirty_degraded: bool,
    /// The budget and settings of emulated members.
    pub emu: EmuContext,
    /// Percentiles of the report.
    pub percentiles: Vec<f64>,
    /// Connections served at once; more are closed at once.
    pub max_connections: usize,
    /// A client that has not finished the handshake this long after connecting is closed.
    pub handshake_timeout: Duration,
    /// TLS (NBD_OPT_STARTTLS) when offered.
    pub tls: Option<TlsConfig>,
    /// Memory large request buffers (of all exports together) may take at once (reset with
    /// [`OpenServe::with_buffer_budget`] to size it once the members, emulated ones with their
    /// models, are open).
    pub buffer_budget_bytes: u64,
    /// Interval of the interval-histogram log.
    pub hdr_interval_ns: u64,
    /// The logs as the report names them (their files are handed to [`OpenServe::serve`]);
    /// one volume only.
    pub hdr_log: Option<String>,
    pub lat_log: Option<String>,
}

impl ServeSpec {
    /// `targets` served as one volume (one target as it is), export `nines`, writable files,
    /// no block device written, no TLS, the default limits, no logs.
    pub fn new(targets: Vec<PathBuf>) -> ServeSpec {
        ServeSpec {
            targets,
            layout: LayoutSpec::Independent,
            exports: Exports::Volume {
                name: "nines".into(),
            },
            create_size_bytes: None,
            read_only: false,
            allow_writes: false,
            force: false,
            create: false,
            start_dirty_degraded: false,
            emu: EmuContext::default(),
            percentiles: DEFAULT_PERCENTILES.to_vec(),
            max_connections: CONNS_MAX_DEFAULT,
            handshake_timeout: HANDSHAKE_TIMEOUT_DEFAULT,
            tls: None,
            buffer_budget_bytes: BUFFER_BUDGET_DEFAULT_BYTES,
            hdr_interval_ns: 1_000_000_000,
            hdr_log: None,
            lat_log: None,
        }
    }

    /// The combinations refused before anything is opened (the caller checks its outputs
    /// after this, as `nines serve` always has); [`open()`] checks again.
    pub fn check(&self) -> Result<(), ServeError> {
        match &self.exports {
            Exports::PerFile => self.check_per_file().map(|_| ()),
            Exports::Volume { .. } => {
                if self.force && !self.allow_writes {
                    return refuse(
                        "--force only applies with --allow-writes; add --allow-writes or drop --force",
                    );
                }
                if self.read_only && self.layout.writes_members() {
                    // The policy itself writes the members whatever the clients do: a persisted
                    // serial array formats members without its metadata and commits its table,
                    // a rebuild writes the replacement, a write buffer flushes. A read-only
                    // serve must write nothing.
                    return refuse(format!(
                        "--read-only cannot be combined with {}: it writes the members itself (a read-only \
                         serve must write nothing); drop --read-only, or drop that option",
                        writer_options(&self.layout)
                    ));
                }
                Ok(())
            }
        }
    }

    /// Per-file exports: the layout and options they allow, and the exports' names.
    fn check_per_file(&self) -> Result<Vec<String>, ServeError> {
        if !matches!(self.layout, LayoutSpec::Independent) {
            return refuse(format!(
                "--exports-from-files serves each target as it is (one export per file); drop --layout {} or --exports-from-files",
                self.layout.name()
            ));
        }
        for (flag, given) in [
            ("--hdr-log", self.hdr_log.is_some()),
            ("--lat-log", self.lat_log.is_some()),
            ("--create", self.create),
            ("--start-dirty-degraded", self.start_dirty_degraded),
        ] {
            if given {
                return refuse(format!(
                    "{flag} is not available with --exports-from-files; serve one volume to use it"
                ));
            }
        }
        export_names(&self.targets)
    }
}

fn refuse<T>(why: impl Into<String>) -> Result<T, ServeError> {
    Err(ServeError::Refused(why.into()))
}

/// Why a serve did not start, or ended in an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A combination or member refused before anything was served; the message says what to do.
    #[error("{0}")]
    Refused(String),
    #[error("cannot serve {path}")]
    Member {
        path: String,
        #[source]
        source: TargetError,
    },
    #[error("cannot serve the array")]
    ArrayMeta(#[source] MetaError),
    #[error("cannot serve the array")]
    ArrayLayout(#[source] ArrayError),
    #[error("cannot build {what}")]
    Build {
        what: String,
        #[source]
        source: ArrayError,
    },
    /// An I/O error: what was being done, and why.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// The caller's [`ServeEvents::started`] failed (serving stopped at once).
    #[error(transparent)]
    Caller(Box<dyn std::error::Error + Send + Sync>),
}

fn io_error(what: impl Into<String>) -> impl FnOnce(io::Error) -> ServeError {
    let what = what.into();
    move |source| ServeError::Io { what, source }
}

/// What a serve tells its caller (all optional).
pub trait ServeEvents {
    /// A note for the user ("warning: ..." for warnings).
    fn note(&mut self, _text: &str) {}
    /// The server listens and serves from now on (a pid file is written here).
    fn started(
        &mut self,
        _started: &Started,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Ok(())
    }
}

impl ServeEvents for () {}

/// What is served, once the server started.
#[derive(Clone, Debug)]
pub struct Started {
    /// Each export's name and size in bytes, the default export first.
    pub exports: Vec<(String, u64)>,
    /// The volume's layout (`passthrough` for per-file exports).
    pub layout: String,
    pub tls: Option<TlsMode>,
}

/// Stops a serve from another thread (clones share it). A serve also stops when the process's
/// interrupt flag is set (SIGINT/SIGTERM with `sched::install_interrupt_handler`).
#[derive(Clone, Debug, Default)]
pub struct ServeHandle(Arc<AtomicBool>);

impl ServeHandle {
    pub fn new() -> ServeHandle {
        ServeHandle::default()
    }

    /// Asks the serve to stop: it finishes the requests in flight and returns its report.
    pub fn stop(&self) {
        self.0.store(true, Ordering::Release);
    }

    pub fn stopped(&self) -> bool {
        self.0.load(Ordering::Acquire) || crate::sched::interrupted()
    }
}

/// The listening socket a serve accepts clients on.
#[derive(Debug)]
pub enum Listener {
    Unix(UnixListener),
    Tcp(std::net::TcpListener),
    /// Passed by socket activation (systemd-style, or `nbdinfo -- [ nines serve ... ]`): the
    /// serve is its client's, and ends when the last client has left.
    Activated(Box<Listener>),
}

impl Listener {
    /// The socket of systemd-style activation (LISTEN_PID is this process, LISTEN_FDS=1:
    /// fd 3), when this process was started so; the variables are cleared.
    ///
    /// # Safety
    /// Call before any other thread is started (it changes the environment), at most once.
    pub unsafe fn from_activation() -> Result<Option<Listener>, ServeError> {
        let activated = std::env::var("LISTEN_PID")
            .ok()
            .and_then(|p| p.parse::<u32>().ok())
            == Some(std::process::id());
        if !activated {
            return Ok(None);
        }
        let fds = std::env::var("LISTEN_FDS").unwrap_or_default();
        if fds != "1" {
            return refuse(format!(
                "socket activation passed LISTEN_FDS={fds}; nines serve takes exactly one socket"
            ));
        }
        // SAFETY: the activating parent passes fd 3 as a listening socket (sd_listen_fds(3)).
        let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let rc = unsafe { libc::getsockname(3, (&raw mut addr).cast(), &mut len) };
        if rc != 0 {
            return refuse(
                "socket activation: fd 3 is not a socket; start nines serve with --socket or --listen",
            );
        }
        let l = if i32::from(addr.ss_family) == libc::AF_UNIX {
            // SAFETY: fd 3 is a Unix socket we now own.
            Listener::Unix(unsafe { UnixListener::from_raw_fd(3) })
        } else {
            // SAFETY: fd 3 is an inet socket we now own.
            Listener::Tcp(unsafe { std::net::TcpListener::from_raw_fd(3) })
        };
        // SAFETY: the caller guarantees no other thread runs yet.
        unsafe {
            std::env::remove_var("LISTEN_PID");
            std::env::remove_var("LISTEN_FDS");
        }
        Ok(Some(Listener::Activated(Box::new(l))))
    }

    fn inner(&self) -> &Listener {
        match self {
            Listener::Activated(l) => l.inner(),
            l => l,
        }
    }

    fn raw_fd(&self) -> i32 {
        match self.inner() {
            Listener::Unix(l) => l.as_raw_fd(),
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Activated(_) => unreachable!("inner() unwraps activation"),
        }
    }

    /// Non-blocking, so a stop is seen promptly.
    fn set_nonblocking(&self) -> io::Result<()> {
        match self.inner() {
            Listener::Unix(l) => l.set_nonblocking(true),
            Listener::Tcp(l) => l.set_nonblocking(true),
            Listener::Activated(_) => unreachable!("inner() unwraps activation"),
        }
    }
}

/// The logs' files (created by the caller; the headers are written here).
#[derive(Debug, Default)]
pub struct ServeLogFiles {
    /// Interval histograms of the served requests (HdrHistogram log).
    pub hdr: Option<File>,
    /// Every served read and write, in nines' per-I/O format.
    pub lat: Option<File>,
}

/// What a serve served.
#[derive(Debug)]
pub struct Served {
    /// The report (`kind` profile, engine "serve", one device per export).
    pub report: Report,
    /// The server's own counters, `nines_serve` in the JSON report.
    pub nines_serve: serde_json::Value,
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub connections: u64,
    pub exports: usize,
    /// Why a log could not be written, if it could not (its file is then not to be kept).
    pub hdr_log_error: Option<io::Error>,
    pub lat_log_error: Option<io::Error>,
    /// Times the core waited for the per-I/O log writer (nothing was dropped).
    pub lat_log_stalls: u64,
}

impl Served {
    /// The JSON `serve --json` writes: the report with `nines_serve` added.
    pub fn json(&self) -> serde_json::Result<serde_json::Value> {
        let mut v = serde_json::to_value(&self.report)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("nines_serve".into(), self.nines_serve.clone());
        }
        Ok(v)
    }
}

/// One export, opened: its volume over its members.
struct OpenExport {
    vol: AnyVolume,
    members: Vec<Target>,
    export: Export,
    /// The members' paths, as given.
    paths: Vec<PathBuf>,
}

/// The members opened and the volumes built, not yet served.
pub struct OpenServe {
    spec: ServeSpec,
    exports: Vec<OpenExport>,
    /// The layout served (with the bitmap the superblocks give).
    layout: LayoutSpec,
    /// raid0/raid5 superblocks: written as members fail and at the clean stop.
    meta: Option<Arc<Mutex<MetaWriter>>>,
    meta_report: serde_json::Value,
    identity_file_map: bool,
}

/// [`open()`] then [`OpenServe::serve`] without logs: serves `spec` until `handle` stops it.
pub fn serve(
    spec: ServeSpec,
    listener: Listener,
    handle: &ServeHandle,
    events: &mut dyn ServeEvents,
) -> Result<Served, ServeError> {
    open(spec, events)?.serve(listener, ServeLogFiles::default(), handle, events)
}

/// Opens the members (with the write safety checks), reads or initialises the superblocks of
/// raid0/raid5 over files and block devices, and builds each export's volume.
pub fn open(spec: ServeSpec, events: &mut dyn ServeEvents) -> Result<OpenServe, ServeError> {
    spec.check()?;
    match &spec.exports {
        Exports::PerFile => open_per_file(spec),
        Exports::Volume { name } => {
            let name = name.clone();
            open_volume(spec, name, events)
        }
    }
}

/// One volume of all the targets.
fn open_volume(
    spec: ServeSpec,
    name: String,
    events: &mut dyn ServeEvents,
) -> Result<OpenServe, ServeError> {
    let members = volume_members(&spec)?;
    let all_files = members
        .iter()
        .all(|t| (t.file().is_some() && !t.is_block_device()) || t.is_absent());
    let block_bytes = members
        .iter()
        .map(Target::logical_block_bytes)
        .max()
        .unwrap_or(512)
        .max(512);
    let (mut layout, sizes, meta, meta_report) = open_superblocks(&spec, &members, events)?;
    assert_eq!(sizes.len(), members.len(), "one size per member");
    // Zone geometry and FDP handles from the members, as nines profile and nines sim do.
    let refs: Vec<&Target> = members.iter().collect();
    let writes = !spec.read_only || layout.writes_members();
    crate::resolve::from_targets(&mut layout, &refs, writes).map_err(ServeError::Refused)?;
    let vol = nines_array::build(
        &layout,
        &VolumeParams {
            member_sizes_bytes: &sizes,
            block_bytes,
            tags: TAGS,
            len_bytes_max: VOL_IO_MAX_BYTES,
        },
    )
    .map_err(|source| ServeError::Build {
        what: "the volume".into(),
        source,
    })?;
    let plain_layout = layout.shaping().is_none()
        && matches!(
            layout.base(),
            LayoutSpec::Independent | LayoutSpec::Raid0 { .. }
        );
    let description = format!("nines {} volume", vol.layout());
    // Zeroes are fast where every member is a regular file zeroed by fallocate and no parity
    // or write-back buffer turns them into writes.
    let fast_zero = all_files && plain_layout;
    let export = export_of(
        &vol,
        block_bytes,
        name,
        description,
        spec.read_only,
        fast_zero,
    );
    // One regular file served as is: block status can report its holes.
    let identity_file_map = all_files
        && members.len() == 1
        && layout.shaping().is_none()
        && matches!(layout.base(), LayoutSpec::Independent);
    Ok(OpenServe {
        exports: vec![OpenExport {
            vol,
            members,
            export,
            paths: spec.targets.clone(),
        }],
        spec,
        layout,
        meta,
        meta_report,
        identity_file_map,
    })
}

/// The members of one volume, opened: refused when the layout makes several volumes of them.
fn volume_members(spec: &ServeSpec) -> Result<Vec<Target>, ServeError> {
    // raid5's --failed member may be missing: nothing reads or writes it.
    let failed = match spec.layout.base() {
        LayoutSpec::Raid5 {
            failed: Some(f),
            rebuild: None,
            ..
        } => Some(*f as usize),
        _ => None,
    };
    let members: Vec<Target> = spec
        .targets
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let emu = p
                .to_str()
                .is_some_and(|t| crate::emu::EmuSpec::parse(t).is_some());
            if Some(i) == failed && !emu && std::fs::symlink_metadata(p).is_err() {
                Ok(Target::absent(p))
            } else {
                open_member(spec, p)
            }
        })
        .collect::<Result<_, _>>()?;
    let groups = spec.layout.group(members.len() as u32);
    if groups.len() != 1 {
        return refuse(format!(
            "nines serve serves one volume; {} targets with --layout {} make {} volumes: give one target, a layout over all of them (--layout raid0, raid5 or serial), or --exports-from-files to serve each target as an export of its own",
            members.len(),
            spec.layout.name(),
            groups.len()
        ));
    }
    Ok(members)
}

type Superblocks = (
    LayoutSpec,
    Vec<u64>,
    Option<Arc<Mutex<MetaWriter>>>,
    serde_json::Value,
);

/// raid0 and raid5 over files and block devices carry superblocks (emulated members keep
/// nothing across runs, shaped layouts are not covered): the layout and member sizes served,
/// and the writer of the superblocks.
fn open_superblocks(
    spec: &ServeSpec,
    members: &[Target],
    events: &mut dyn ServeEvents,
) -> Result<Superblocks, ServeError> {
    let sizes: Vec<u64> = members.iter().map(Target::size_bytes).collect();
    // A raid5 of two members is a wrong command, not a member problem: say that before the
    // superblocks are read (their refusal would blame a member).
    if matches!(spec.layout.base(), LayoutSpec::Raid5 { .. }) && members.len() < 3 {
        return Err(ServeError::ArrayLayout(ArrayError::TooFewMembers {
            layout: "raid5",
            min: 3,
        }));
    }
    if array_meta::meta_layout(&spec.layout).is_none()
        || !members.iter().all(|t| t.file().is_some() || t.is_absent())
    {
        if spec.create {
            return refuse(
                "--create adds superblocks to raid0 or raid5 members that are files or block devices; drop it",
            );
        }
        check_serial_identity(spec, members, &sizes)?;
        return Ok((spec.layout.clone(), sizes, None, serde_json::Value::Null));
    }
    let created: Vec<bool> = members.iter().map(Target::created).collect();
    let opened = array_meta::open_array(
        &spec.layout,
        &sizes,
        &array_meta::MetaArgs {
            paths: &spec.targets,
            create: spec.create,
            read_only: spec.read_only,
            start_dirty_degraded: spec.start_dirty_degraded,
            created: &created,
            verb: array_meta::Verb::Serve,
        },
        &mut |note| events.note(note),
    )
    .map_err(ServeError::ArrayMeta)?;
    let writer = opened.writer.map(|w| Arc::new(Mutex::new(w)));
    Ok((opened.spec, opened.sizes, writer, opened.report))
}

/// A persisted serial volume over files or block devices: every member's identity page checked
/// before anything is served (crate::serial_meta), so a misassembly is refused in one line
/// instead of served as wrong data or a new empty volume.
fn check_serial_identity(
    spec: &ServeSpec,
    members: &[Target],
    sizes: &[u64],
) -> Result<(), ServeError> {
    let LayoutSpec::Serial(s) = spec.layout.base() else {
        return Ok(());
    };
    let files: Option<Vec<&std::fs::File>> = members.iter().map(Target::file).collect();
    let (true, Some(files)) = (s.persist, files) else {
        return Ok(());
    };
    let block_bytes = members
        .iter()
        .map(Target::logical_block_bytes)
        .max()
        .unwrap_or(512);
    // The geometry these options make of these members (a volume that cannot be built is
    // refused later, with the builder's reason).
    let Ok(mut vol) = nines_array::Serial::new(*s, sizes, block_bytes, 1, s.unit_bytes) else {
        return Ok(());
    };
    let Some(region) = vol.persist_region() else {
        return Ok(());
    };
    let names: Vec<String> = spec.targets.iter().map(|p| array_meta::name(p)).collect();
    let n = sizes.len();
    let region_for = |size: u64| {
        nines_array::Serial::new(*s, &vec![size; n], block_bytes, 1, s.unit_bytes)
            .ok()?
            .persist_region()
            .map(|r| r.offset_bytes)
    };
    let id = crate::serial_meta::check_members(&files, &names, &region, &region_for)
        .map_err(|e| ServeError::Refused(e.to_string()))?;
    if id.damaged_superblock {
        return refuse(format!(
            "member 0 ({}): its serial superblock is damaged (checksum): `nines check --layout serial --repair` with the options it was served with rewrites it",
            names[0]
        ));
    }
    Ok(())
}

/// Each target an export of its own, served as it is.
fn open_per_file(spec: ServeSpec) -> Result<OpenServe, ServeError> {
    let names = spec.check_per_file()?;
    let mut exports = Vec::with_capacity(spec.targets.len());
    for (p, name) in spec.targets.iter().zip(names) {
        let t = open_member(&spec, p)?;
        let block_bytes = t.logical_block_bytes().max(512);
        let mut layout = spec.layout.clone();
        let writes = !spec.read_only || layout.writes_members();
        crate::resolve::from_targets(&mut layout, &[&t], writes)
            .map_err(|why| ServeError::Refused(format!("{}: {why}", p.display())))?;
        let vol = nines_array::build(
            &layout,
            &VolumeParams {
                member_sizes_bytes: &[t.size_bytes()],
                block_bytes,
                tags: TAGS,
                len_bytes_max: PAYLOAD_MAX_BYTES,
            },
        )
        .map_err(|source| ServeError::Build {
            what: format!("export {name:?}"),
            source,
        })?;
        let description = format!("nines passthrough of {}", p.display());
        let fast_zero = t.file().is_some() && !t.is_block_device();
        let export = export_of(
            &vol,
            block_bytes,
            name,
            description,
            spec.read_only,
            fast_zero,
        );
        exports.push(OpenExport {
            vol,
            members: vec![t],
            export,
            paths: vec![p.clone()],
        });
    }
    Ok(OpenServe {
        layout: spec.layout.clone(),
        spec,
        exports,
        meta: None,
        meta_report: serde_json::Value::Null,
        // Every export is one target served as is: block status reports a file's holes.
        identity_file_map: true,
    })
}

/// The export of `vol` as clients see it: whole blocks of the larger of the volume's and the
/// members' logical block, requests up to [`PAYLOAD_MAX_BYTES`].
fn export_of(
    vol: &AnyVolume,
    block_bytes: u32,
    name: String,
    description: String,
    read_only: bool,
    fast_zero: bool,
) -> Export {
    let block = vol.block_bytes().max(block_bytes);
    let export = Export {
        name,
        description,
        size_bytes: vol.size_bytes() / u64::from(block) * u64::from(block),
        block_min_bytes: block,
        block_preferred_bytes: vol.block_bytes().max(4096),
        payload_max_bytes: PAYLOAD_MAX_BYTES,
        read_only,
        fast_zero,
    };
    assert!(
        export.size_bytes <= vol.size_bytes() && export.size_bytes.is_multiple_of(u64::from(block))
    );
    export
}

/// Opens one member as serve does: block devices O_DIRECT, regular files buffered, with
/// profile's write-safety checks.
fn open_member(spec: &ServeSpec, p: &Path) -> Result<Target, ServeError> {
    // Block devices are served O_DIRECT, as qemu's cache=none: the device's own latency, and
    // an I/O error when the command fails, not at a later writeback. Regular files go through
    // the page cache (FLUSH fdatasyncs them).
    let block = std::fs::metadata(p).is_ok_and(|m| m.file_type().is_block_device());
    Target::open_with(
        p,
        &TargetOptions {
            write: !spec.read_only || spec.layout.writes_members(),
            allow_writes: spec.allow_writes,
            force: spec.force,
            buffered: !block,
            create_size_bytes: spec.create_size_bytes,
        },
        &spec.emu,
    )
    .map_err(|e| match e {
        // The target's own advice speaks of workloads; serve's fix is --read-only.
        TargetError::ReadOnly { .. } => ServeError::Refused(format!(
            "cannot serve {}: it is on a read-only filesystem; pass --read-only to serve it without writing",
            p.display()
        )),
        source => ServeError::Member {
            path: p.display().to_string(),
            source,
        },
    })
}

/// The options of `spec` that make the policy write its members on its own.
fn writer_options(spec: &LayoutSpec) -> String {
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

/// The export name of a target: its file name (emulated members keep their spec).
fn export_name(p: &Path) -> String {
    p.file_name()
        .map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into())
}

/// The names of `targets`' exports, or the two targets whose names collide.
pub fn export_names(targets: &[PathBuf]) -> Result<Vec<String>, ServeError> {
    let names: Vec<String> = targets.iter().map(|p| export_name(p)).collect();
    for (i, n) in names.iter().enumerate() {
        if n.is_empty() || n.len() > 4096 {
            return refuse(format!(
                "--exports-from-files: {} makes no usable export name (1 to 4096 bytes); rename the file",
                targets[i].display()
            ));
        }
        if let Some(j) = names[..i].iter().position(|m| m == n) {
            return refuse(format!(
                "--exports-from-files: {} and {} would both be export {n:?}; rename one (exports are named by file name)",
                targets[j].display(),
                targets[i].display()
            ));
        }
    }
    Ok(names)
}

fn unix_ns_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// An export as the report names it, once its volume went to the server.
struct ExportInfo {
    export: Export,
    layout: &'static str,
    paths: Vec<PathBuf>,
    emu: Vec<Option<EmuHandle>>,
}

impl OpenServe {
    /// The budget of large request buffers, decided now that the members are open (`nines
    /// serve`: half of the memory the host has available at this point).
    pub fn with_buffer_budget(mut self, bytes: u64) -> OpenServe {
        self.spec.buffer_budget_bytes = bytes;
        self
    }

    /// The exports' names and sizes, the default first.
    pub fn exports(&self) -> Vec<(String, u64)> {
        self.exports
            .iter()
            .map(|e| (e.export.name.clone(), e.export.size_bytes))
            .collect()
    }

    /// Serves until `handle` stops it (or, on an activated socket, until the last client has
    /// left): the report and counters. `logs`' files get their headers here.
    pub fn serve(
        self,
        listener: Listener,
        logs: ServeLogFiles,
        handle: &ServeHandle,
        events: &mut dyn ServeEvents,
    ) -> Result<Served, ServeError> {
        listener
            .set_nonblocking()
            .map_err(io_error("cannot make the listening socket non-blocking"))?;
        let logs = self.logs(logs)?;
        let OpenServe {
            spec,
            exports,
            layout,
            meta,
            meta_report,
            identity_file_map,
        } = self;
        let (volumes, infos) = hand_over(exports, meta.as_ref(), logs)?;
        let mut server = Server::start_many(
            volumes,
            ServeConfig {
                max_connections: spec.max_connections,
                handshake_timeout: spec.handshake_timeout,
                identity_file_map,
                tls: spec.tls.clone(),
                buffer_budget_bytes: spec.buffer_budget_bytes,
            },
        )
        .map_err(io_error("cannot start the server"))?;
        if let LayoutSpec::Serial(sp) = layout.base()
            && !sp.persist
        {
            events.note(if sp.zoned() {
                // Zoned members refuse --persist (it rewrites its table in place).
                "the serial array's mapping is in memory only: a restart starts it empty \
                 (zoned members cannot keep it: --persist rewrites its table in place)"
            } else {
                "the serial array's mapping is in memory only: a restart starts it empty \
                 (add --persist to keep it on the members)"
            });
        }
        let started = Started {
            exports: infos
                .iter()
                .map(|i| (i.export.name.clone(), i.export.size_bytes))
                .collect(),
            layout: infos[0].layout.to_string(),
            tls: spec.tls.as_ref().map(|t| t.mode),
        };
        events.started(&started).map_err(ServeError::Caller)?;
        // What the report's measured time and start are: from the first accept to the stop.
        let served_since = Instant::now();
        let start_unix_ns = unix_ns_now();
        accept_loop(&listener, &mut server, handle, events)?;
        let connections_refused = server.refused_connections();
        let outcomes = server.stop_all();
        assert_eq!(outcomes.len(), infos.len(), "an outcome per export");
        clean_stop(&layout, meta.as_ref(), &outcomes)?;
        let at = report::At {
            spec: &spec,
            layout: &layout,
            measured_ns: (served_since.elapsed().as_nanos() as u64).max(1),
            start_unix_ns,
            connections_refused,
        };
        report::served(&at, &infos, meta_report, outcomes)
    }

    /// The logs of the (only) export, their headers written.
    fn logs(&self, files: ServeLogFiles) -> Result<ServeLogs, ServeError> {
        let export = &self.exports[0].export.name;
        let name = |n: &Option<String>| n.clone().unwrap_or_default();
        let hdr = match files.hdr {
            None => None,
            Some(file) => {
                let log = IntervalLog::start(
                    io::BufWriter::new(file),
                    "nines serve: interval latency histograms of the served requests in nanoseconds",
                    unix_ns_now(),
                    std::slice::from_ref(export),
                    &[Op::Read, Op::Write],
                )
                .map_err(io_error(format!(
                    "--hdr-log: cannot write {}",
                    name(&self.spec.hdr_log)
                )))?;
                Some(HdrSink {
                    interval_ns: self.spec.hdr_interval_ns,
                    log,
                })
            }
        };
        let lat = match files.lat {
            None => None,
            Some(mut file) => {
                latlog::write_header(
                    &mut file,
                    &LatLogHeader {
                        devices: vec![export.clone()],
                        start_unix_ns: unix_ns_now(),
                    },
                )
                .map_err(io_error(format!(
                    "--lat-log: cannot write {}",
                    name(&self.spec.lat_log)
                )))?;
                Some(file)
            }
        };
        Ok(ServeLogs { hdr, lat })
    }
}

/// Hands each export's volume and members' descriptors to the server (it holds the only
/// ones: a member it fails and releases is then closed); the logs go to the first export.
fn hand_over(
    exports: Vec<OpenExport>,
    meta: Option<&Arc<Mutex<MetaWriter>>>,
    logs: ServeLogs,
) -> Result<(Vec<ServedVolume>, Vec<ExportInfo>), ServeError> {
    let mut logs = Some(logs);
    let mut volumes = Vec::with_capacity(exports.len());
    let mut infos = Vec::with_capacity(exports.len());
    for e in exports {
        let files = e
            .members
            .iter()
            .map(|t| t.file().map(File::try_clone).transpose())
            .collect::<io::Result<Vec<_>>>()
            .map_err(io_error("cannot duplicate a member's descriptor"))?;
        let emu: Vec<Option<EmuHandle>> = e.members.iter().map(|t| t.emu().cloned()).collect();
        let members = Members {
            files,
            emu: emu.clone(),
            block_device: e.members.iter().map(Target::is_block_device).collect(),
            zoned: e.members.iter().map(|t| t.zoned().cloned()).collect(),
            names: e.paths.iter().map(|p| p.display().to_string()).collect(),
            on_failed: meta.map(|w| {
                let w = Arc::clone(w);
                Box::new(move |m: u32| {
                    if let Ok(mut w) = w.lock()
                        && let Err(e) = w.member_failed(m)
                    {
                        // The core's own log, as its refusals: serving goes on.
                        eprintln!(
                            "nines: cannot record member {m}'s failure in the other members' superblocks: {e}"
                        );
                    }
                }) as Box<dyn FnMut(u32) + Send>
            }),
        };
        drop(e.members);
        infos.push(ExportInfo {
            export: e.export.clone(),
            layout: e.vol.layout(),
            paths: e.paths,
            emu,
        });
        volumes.push(ServedVolume {
            vol: e.vol,
            members,
            export: e.export,
            logs: logs.take().unwrap_or_default(),
        });
    }
    Ok((volumes, infos))
}

/// Stopped and flushed: the superblocks' bitmap cleared and the array marked clean; a
/// replacement rebuilt to the end is a member again.
fn clean_stop(
    layout: &LayoutSpec,
    meta: Option<&Arc<Mutex<MetaWriter>>>,
    outcomes: &[ServeOutcome],
) -> Result<(), ServeError> {
    let Some(w) = meta else { return Ok(()) };
    let rebuilt = match layout.base() {
        LayoutSpec::Raid5 {
            rebuild: Some(r), ..
        } if !outcomes[0].volume_stats["rebuild"]["done_ns"].is_null() => Some(r.member),
        _ => None,
    };
    w.lock()
        .map_err(|_| ServeError::Refused("the superblock writer panicked".into()))?
        .clean_stop(rebuilt)
        .map_err(io_error("cannot mark the array clean in its superblocks"))
}

/// Hands every client to the server until `handle` stops it (or, when socket-activated, until
/// the last client has left).
fn accept_loop(
    listener: &Listener,
    server: &mut Server,
    handle: &ServeHandle,
    events: &mut dyn ServeEvents,
) -> Result<(), ServeError> {
    let activated = matches!(listener, Listener::Activated(_));
    while !handle.stopped() {
        // Socket activation (nbdinfo/nbdcopy -- [ nines serve ... ]): the server is its
        // client's, and ends when the last client left, as qemu-nbd and nbdkit do.
        if activated && server.accepted_connections() > 0 && server.live_connections() == 0 {
            break;
        }
        match accept(listener.inner(), events).map_err(io_error("accept failed"))? {
            Some(c) => {
                server
                    .accept(c)
                    .map_err(io_error("cannot serve a connection"))?;
            }
            // Wait for the next client, waking often enough to see a stop (or, when
            // activated, the last client leaving) promptly.
            None => wait_readable(listener, 50),
        }
    }
    Ok(())
}

/// One waiting client, made blocking (TCP with keepalive), or None.
fn accept(l: &Listener, events: &mut dyn ServeEvents) -> io::Result<Option<Box<dyn Conn>>> {
    let r = match l {
        Listener::Unix(l) => l.accept().and_then(|(s, _)| {
            s.set_nonblocking(false)?;
            Ok(Box::new(s) as Box<dyn Conn>)
        }),
        Listener::Tcp(l) => l.accept().and_then(|(s, _)| {
            s.set_nonblocking(false)?;
            if let Err(e) = set_keepalive(&s) {
                // Served anyway: only a vanished peer's detection is lost.
                events.note(&format!(
                    "warning: cannot set TCP keepalive on a connection: {e}"
                ));
            }
            Ok(Box::new(s) as Box<dyn Conn>)
        }),
        Listener::Activated(l) => return accept(l, events),
    };
    match r {
        Ok(c) => Ok(Some(c)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// Waits up to `timeout_ms` for a connection on the listener (EINTR, a signal, ends it early).
fn wait_readable(l: &Listener, timeout_ms: i32) {
    let mut p = libc::pollfd {
        fd: l.raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd on our own listening socket, alive across the call.
    unsafe { libc::poll(&mut p, 1, timeout_ms) };
}

/// TCP keepalive on an accepted connection: a peer that vanished (a crashed host, a cut
/// link) is detected after [`KEEPALIVE_IDLE_S`] idle plus [`KEEPALIVE_COUNT`] unanswered probes
/// [`KEEPALIVE_INTERVAL_S`] apart (about two minutes), and its connection closed, instead of
/// holding a slot and its credits for ever.
pub fn set_keepalive(s: &std::net::TcpStream) -> io::Result<()> {
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
            return Err(io::Error::last_os_error());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_are_named_by_file_name_and_collisions_refused() {
        let t = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        assert_eq!(
            export_names(&t(&["/d/a.img", "b.img", "emu:p4600:1g"])).unwrap(),
            ["a.img", "b.img", "emu:p4600:1g"]
        );
        let e = export_names(&t(&["/x/a.img", "/y/a.img"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/x/a.img and /y/a.img would both be export \"a.img\""),
            "{e}"
        );
    }

    /// The four keepalive options of an accepted connection, read back with getsockopt.
    #[test]
    fn accepted_tcp_sockets_get_keepalive() {
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

    /// A raw NBD client: the fixed-newstyle handshake with NBD_OPT_EXPORT_NAME `name`, the
    /// export's size.
    fn negotiate(c: &mut std::os::unix::net::UnixStream, name: &str) -> u64 {
        use std::io::{Read, Write};
        let mut greeting = [0u8; 18];
        c.read_exact(&mut greeting).unwrap();
        assert_eq!(&greeting[..16], b"NBDMAGICIHAVEOPT");
        c.write_all(&3u32.to_be_bytes()).unwrap();
        c.write_all(b"IHAVEOPT").unwrap();
        c.write_all(&1u32.to_be_bytes()).unwrap();
        c.write_all(&(name.len() as u32).to_be_bytes()).unwrap();
        c.write_all(name.as_bytes()).unwrap();
        let mut export = [0u8; 10];
        c.read_exact(&mut export).unwrap();
        u64::from_be_bytes(export[..8].try_into().unwrap())
    }

    /// One request (simple reply): its error value.
    fn request(c: &mut std::os::unix::net::UnixStream, kind: u16, off: u64, data: &[u8]) -> u32 {
        use std::io::{Read, Write};
        let mut h = [0u8; 28];
        h[..4].copy_from_slice(&0x2560_9513u32.to_be_bytes());
        h[6..8].copy_from_slice(&kind.to_be_bytes());
        h[8..16].copy_from_slice(&7u64.to_be_bytes());
        h[16..24].copy_from_slice(&off.to_be_bytes());
        h[24..28].copy_from_slice(&(data.len() as u32).to_be_bytes());
        c.write_all(&h).unwrap();
        c.write_all(data).unwrap();
        let mut r = [0u8; 16];
        c.read_exact(&mut r).unwrap();
        assert_eq!(r[..4], 0x6744_6698u32.to_be_bytes());
        assert_eq!(
            r[8..16],
            7u64.to_be_bytes(),
            "the reply carries the request's cookie"
        );
        u32::from_be_bytes(r[4..8].try_into().unwrap())
    }

    /// Serves `spec` on a Unix socket in `dir` while `client` runs, then stops it.
    fn serve_while(
        spec: ServeSpec,
        dir: &Path,
        client: impl FnOnce(std::os::unix::net::UnixStream) + Send + 'static,
    ) -> Served {
        let sock = dir.join("nbd.sock");
        let listener = UnixListener::bind(&sock).unwrap();
        let handle = ServeHandle::new();
        let stopper = handle.clone();
        let t = std::thread::spawn(move || {
            client(std::os::unix::net::UnixStream::connect(&sock).unwrap());
            stopper.stop();
        });
        let served = serve(spec, Listener::Unix(listener), &handle, &mut ()).unwrap();
        t.join().unwrap();
        served
    }

    /// raid0 over two new files, served from Rust: the superblocks are created (magic in each
    /// member's last 4 KiB), the export is the data area (whole 64 KiB stripes of both members
    /// less the superblock), a write lands on member 0 at offset 0, and the report has the
    /// volume with its two members.
    #[test]
    fn a_raid0_of_new_files_gets_superblocks_and_serves_a_write_from_rust() {
        let dir = tempfile::tempdir().unwrap();
        let m: Vec<PathBuf> = (0..2).map(|i| dir.path().join(format!("m{i}"))).collect();
        for p in &m {
            File::create(p).unwrap().set_len(1 << 20).unwrap();
        }
        let mut spec = ServeSpec::new(m.clone());
        spec.layout = LayoutSpec::Raid0 {
            stripe_bytes: 64 << 10,
        };
        let want: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        let data = want.clone();
        let served = serve_while(spec, dir.path(), move |mut c| {
            let rows = ((1u64 << 20) - 4096) / (64 << 10);
            assert_eq!(negotiate(&mut c, ""), rows * 2 * (64 << 10));
            assert_eq!(request(&mut c, 1, 0, &data), 0, "the write succeeds");
            assert_eq!(request(&mut c, 3, 0, &[]), 0, "the flush succeeds");
        });
        assert_eq!((served.writes, served.connections), (1, 1));
        // The client's flush, and the volume's own at the end of the serve.
        assert!(served.flushes >= 1, "{}", served.flushes);
        assert_eq!(served.nines_serve["superblocks"]["created"], true);
        let vol = served.report.devices[0].volume.as_ref().unwrap();
        assert_eq!((vol.layout.as_str(), vol.members.len()), ("raid0", 2));
        let mut got = vec![0u8; 4096];
        std::os::unix::fs::FileExt::read_exact_at(&File::open(&m[0]).unwrap(), &mut got, 0)
            .unwrap();
        assert_eq!(got, want);
        for p in &m {
            let bytes = std::fs::read(p).unwrap();
            assert_eq!(
                &bytes[(1 << 20) - 4096..][..8],
                b"NINESMB1",
                "{}",
                p.display()
            );
        }
    }

    /// Per-file exports: a client chooses the second by name and gets its size; the report has
    /// a device per export and the server's counters per export.
    #[test]
    fn per_file_exports_are_chosen_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.img");
        let b = dir.path().join("b.img");
        File::create(&a).unwrap().set_len(1 << 20).unwrap();
        File::create(&b).unwrap().set_len(3 << 20).unwrap();
        let mut spec = ServeSpec::new(vec![a, b]);
        spec.exports = Exports::PerFile;
        let served = serve_while(spec, dir.path(), |mut c| {
            assert_eq!(negotiate(&mut c, "b.img"), 3 << 20);
        });
        assert_eq!(served.exports, 2);
        let sizes: Vec<u64> = served.report.devices.iter().map(|d| d.size_bytes).collect();
        assert_eq!(sizes, [1 << 20, 3 << 20]);
        let conns: Vec<u64> = served.nines_serve["exports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["connections"].as_u64().unwrap())
            .collect();
        assert_eq!(conns, [0, 1]);
    }

    /// The checks before anything is opened: each refusal names what to drop.
    #[test]
    fn combinations_are_refused_before_anything_is_opened() {
        let mut s = ServeSpec::new(vec![PathBuf::from("/nonexistent/a")]);
        s.force = true;
        let e = s.check().unwrap_err().to_string();
        assert!(
            e.contains("--force only applies with --allow-writes"),
            "{e}"
        );
        let mut s = ServeSpec::new(vec![PathBuf::from("a"), PathBuf::from("b")]);
        s.exports = Exports::PerFile;
        s.lat_log = Some("x.lat".into());
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("--lat-log is not available"), "{e}");
        s.lat_log = None;
        s.check().unwrap();
    }
}
