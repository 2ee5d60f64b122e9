//! `nines serve`: one array volume served over NBD (docs/arch-serve.md).
//!
//! Threads and queues (every queue bounded):
//! - one *connection reader* per client: the handshake (nines-nbd decides every answer), then
//!   request headers and write payloads; each request takes a credit from its connection's
//!   credit queue ([`CONN_INFLIGHT_MAX`]) before it goes to the core, so a client never has more
//!   than that many requests in the server. A credit is a buffer ([`IoBuf`]): the payload is
//!   read into it, the volume works on it, the reply leaves from it, and the writer gives it
//!   back, so the server allocates nothing per request in steady state;
//! - the *core*: owns the [`VolumeHost`] exactly as the profile worker does; client requests and
//!   member completions arrive on one bounded inbox; member commands go to the I/O pool, replies
//!   to their connection's writer; each request is answered when the volume completes it, so
//!   replies leave in completion order (by cookie), and a slow request never holds a fast one;
//! - the *I/O pool*: member commands as pread/pwrite/fdatasync/fallocate on the members;
//! - one *connection writer* per client: reply header and data, then the credit back.
//!
//! FLUSH is a volume flush (every member fdatasync'd after every write completed before it, from
//! any connection: CAN_MULTI_CONN); FUA writes are fdatasync'd on their members before they
//! complete. A member the volume fails (raid5: a member that answered an I/O error) is reported
//! and, once no command to it is in flight, its descriptor is closed, so the device can be
//! removed from the system while the volume serves degraded.
//!
//! The whole serve as one library call (members opened, superblocks, volumes, the accept loop,
//! the report) is [`spec`]'s [`serve()`] ([`open()`] then [`OpenServe::serve`]): a
//! [`ServeSpec`] in, [`Served`] out.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fs::File;
use std::io::{self, BufReader, IoSlice, Read, Write};
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError, sync_channel};
use std::thread;
use std::time::{Duration, Instant};

use nines_array::{
    AnyVolume, BufRef, CmdDone, CmdOp, CmdResult, Extent, IoResult, MemberCmd, Output, VolIo,
    VolOp, Volume, VolumeHost,
};
use nines_core::hdrlog::IntervalLog;
use nines_core::latlog::{LatRecord, RECORD_BYTES};
use nines_core::op::Op;
use nines_core::stats::DeviceRecorder;
use nines_nbd::{self as nbd, CmdKind, Command, Export, OptOutcome};

use crate::buf::{AlignedBuf, BUF_ALIGN_BYTES};
use crate::clock::now_ns;
use crate::data::PtrData;
use crate::emu::EmuLease;
use crate::latlog_sink::{LatLogLane, LatLogSink};
use crate::zoned::{Dispatch, ZoneMgmt, ZoneSeq, ZoneSeqStats, ZonedDevice};

pub mod spec;
pub use spec::{
    Exports, Listener, OpenServe, ServeError, ServeEvents, ServeHandle, ServeLogFiles, ServeSpec,
    Served, Started, open, serve,
};

/// Requests one connection may have inside the server at once.
pub const CONN_INFLIGHT_MAX: usize = 64;
/// Volume I/Os in flight at once (the volume's tags).
pub const TAGS: u32 = 128;
/// Threads executing member commands.
pub const IO_THREADS: usize = 8;
/// The largest request payload (NBD_INFO_BLOCK_SIZE maximum). nbd-server and nbdkit serve
/// larger requests than 32 MiB (nbd-tester-client's integrityhuge mode sends up to 50 MB with
/// EXPORT_NAME, never seeing the advertised maximum); the memory they take is bounded by
/// [`ServeConfig::buffer_budget_bytes`].
pub const PAYLOAD_MAX_BYTES: u32 = 64 << 20;
/// The largest volume I/O (the volume's `len_bytes_max`): a request larger than this is
/// submitted in pieces of it, one after the other on the request's tag, so the volumes'
/// command bounds (which grow with it) stay what they were.
pub const VOL_IO_MAX_BYTES: u32 = 32 << 20;
/// Request buffers over [`BUF_KEEP_MAX_BYTES`] held at once by every server of the process
/// (each is given back after its reply): checked against [`ServeConfig::buffer_budget_bytes`]
/// before a buffer grows.
static BIG_BUF_BYTES: AtomicU64 = AtomicU64::new(0);
/// [`ServeConfig::buffer_budget_bytes`]'s default where the host's memory is not known.
pub const BUFFER_BUDGET_DEFAULT_BYTES: u64 = 1 << 30;
/// Client connections served at once by default (`--max-connections`); more are closed at
/// once, and the refusal logged. Each costs two threads and, in transmission, its credits.
pub const CONNS_MAX_DEFAULT: usize = 512;
/// How long a client may take from its connection to the end of the handshake by default
/// (`--handshake-timeout`): an idle or stalled socket is closed after it, so it cannot hold a
/// connection slot for ever.
pub const HANDSHAKE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);
/// At stop, how long clients get to take the replies still owed to them before their sockets
/// are shut down both ways (a client that does not read its replies cannot hold the stop).
pub const STOP_GRACE: Duration = Duration::from_millis(1000);
/// How often a reader waiting for a credit looks whether the server is stopping.
const CREDIT_POLL: Duration = Duration::from_millis(100);
/// A credit's buffer larger than this after a request is given back to the allocator (a few
/// large requests must not pin CONN_INFLIGHT_MAX x 32 MiB per connection).
const BUF_KEEP_MAX_BYTES: usize = 1 << 20;
/// The largest member command the core does itself: a read from the page cache, or, when
/// nothing else is in flight, a read or write of a page-cache member (larger ones go to the
/// pool, where they do not hold up other requests).
const INLINE_MAX_BYTES: u32 = 256 << 10;
/// How long before a timed event (a volume timer, an emulated member's completion) the core
/// stops sleeping and polls its inbox instead (a timed sleep wakes late by about this much).
const SPIN_NS: u64 = 50_000;
/// Bytes the connection reader buffers (request headers arrive several at a time at depth).
const READ_BUF_BYTES: usize = 64 << 10;
/// `--lat-log`: records per buffer and buffers (the core fills one while the writer thread
/// writes another; as profile's workers do).
const LATLOG_RECORDS_PER_BUFFER: usize = 64 * 1024;
const LATLOG_BUFFERS: usize = 4;
/// A stream a client talks over (Unix or TCP).
pub trait Conn: Read + Write + Send + 'static {
    fn try_clone_conn(&self) -> io::Result<Box<dyn Conn>>;
    fn shutdown_both(&self);
    fn shutdown_read(&self);
    /// The socket's descriptor (the core sends replies on it directly when it can).
    fn raw_fd(&self) -> RawFd;
    /// Read and write timeouts (None: wait for ever), for the handshake.
    fn set_timeouts(&self, t: Option<Duration>) -> io::Result<()>;
}

impl Conn for std::os::unix::net::UnixStream {
    fn try_clone_conn(&self) -> io::Result<Box<dyn Conn>> {
        Ok(Box::new(self.try_clone()?))
    }
    fn shutdown_both(&self) {
        let _ = self.shutdown(std::net::Shutdown::Both);
    }
    fn shutdown_read(&self) {
        let _ = self.shutdown(std::net::Shutdown::Read);
    }
    fn raw_fd(&self) -> RawFd {
        self.as_raw_fd()
    }
    fn set_timeouts(&self, t: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(t)?;
        self.set_write_timeout(t)
    }
}

impl Conn for std::net::TcpStream {
    fn try_clone_conn(&self) -> io::Result<Box<dyn Conn>> {
        let _ = self.set_nodelay(true);
        Ok(Box::new(self.try_clone()?))
    }
    fn shutdown_both(&self) {
        let _ = self.shutdown(std::net::Shutdown::Both);
    }
    fn shutdown_read(&self) {
        let _ = self.shutdown(std::net::Shutdown::Read);
    }
    fn raw_fd(&self) -> RawFd {
        self.as_raw_fd()
    }
    fn set_timeouts(&self, t: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(t)?;
        self.set_write_timeout(t)
    }
}

/// A request's buffer, carried by its connection's credit: page-aligned (members may be opened
/// O_DIRECT), grown only when a request is larger than any it carried before.
pub struct IoBuf {
    data: AlignedBuf,
    /// Bytes in use: the write payload, or the read's data.
    len: usize,
    /// Bytes at the start of a read's data not sent (an unaligned read was widened to whole
    /// blocks).
    skip: usize,
    /// The reply header (NBD headers are at most 32 bytes: no growth).
    header: Vec<u8>,
    /// Bytes of [`BIG_BUF_BYTES`] this buffer holds (its request's, when over
    /// [`BUF_KEEP_MAX_BYTES`]); given back with the buffer.
    charged_bytes: u64,
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        self.uncharge();
    }
}

impl IoBuf {
    fn new() -> IoBuf {
        IoBuf {
            data: AlignedBuf::new(BUF_ALIGN_BYTES),
            len: 0,
            skip: 0,
            header: Vec::with_capacity(32),
            charged_bytes: 0,
        }
    }

    /// Takes `need_bytes` of the large-buffer budget for a request that will grow this buffer
    /// past [`BUF_KEEP_MAX_BYTES`] (nothing below it); false when the budget would be exceeded
    /// (the request is refused ENOMEM instead of the process running out of memory).
    fn charge(&mut self, need_bytes: u64, budget_bytes: u64) -> bool {
        if need_bytes <= BUF_KEEP_MAX_BYTES as u64 {
            return true;
        }
        let was = BIG_BUF_BYTES.fetch_add(need_bytes, Ordering::AcqRel);
        if was + need_bytes > budget_bytes {
            BIG_BUF_BYTES.fetch_sub(need_bytes, Ordering::AcqRel);
            return false;
        }
        self.charged_bytes += need_bytes;
        true
    }

    fn uncharge(&mut self) {
        if self.charged_bytes > 0 {
            BIG_BUF_BYTES.fetch_sub(self.charged_bytes, Ordering::AcqRel);
            self.charged_bytes = 0;
        }
    }

    /// Makes `len_bytes` usable (contents unspecified).
    fn set_len(&mut self, len_bytes: usize) {
        if self.data.len() < len_bytes {
            self.data = AlignedBuf::new(len_bytes.next_multiple_of(BUF_ALIGN_BYTES));
        }
        self.len = len_bytes;
        self.skip = 0;
    }

    #[cfg(test)]
    fn bytes(&self) -> &[u8] {
        &self.data.as_slice()[..self.len]
    }

    /// What a read's reply carries: the data less the bytes skipped.
    fn payload(&self) -> &[u8] {
        &self.data.as_slice()[self.skip..self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        let n = self.len;
        &mut self.data.as_mut_slice()[..n]
    }

    /// After its reply left: a buffer a large request grew is given back.
    fn recycle(&mut self) {
        if self.data.len() > BUF_KEEP_MAX_BYTES {
            self.data = AlignedBuf::new(BUF_ALIGN_BYTES);
        }
        self.uncharge();
        self.len = 0;
        self.skip = 0;
    }
}

/// One reply on its way to a writer: the header in `buf.header`, then `buf`'s data for a read,
/// less the first `sent_bytes` the core already sent.
struct Reply {
    buf: IoBuf,
    with_data: bool,
    sent_bytes: usize,
}

/// What the core needs of a connection to answer it.
struct ConnLink {
    replies: SyncSender<Reply>,
    /// The core's own handle on the socket, to send a reply at once when the writer has
    /// nothing queued (one thread hand-off less per request).
    sock: Box<dyn Conn>,
    /// The credit queue, for replies the core sent itself.
    credits: SyncSender<IoBuf>,
    /// Replies handed to the writer and not yet sent: while any is, the core queues behind
    /// them (replies never overtake each other on the socket).
    writer_pending: Arc<AtomicUsize>,
}

enum Msg {
    Request {
        conn: usize,
        cmd: Command,
        buf: IoBuf,
        received_ns: u64,
    },
    Refused {
        conn: usize,
        cookie: u64,
        errno: u32,
        buf: IoBuf,
    },
    /// A request the reader answered itself (CACHE, BLOCK_STATUS): the whole reply is in
    /// `buf.header`.
    Answered {
        conn: usize,
        buf: IoBuf,
    },
    Connected {
        conn: usize,
        link: ConnLink,
        structured: bool,
    },
    Gone {
        conn: usize,
    },
    Member {
        member: u32,
        done: CmdDone,
    },
    Shutdown,
}

/// The member files of the served volume.
pub struct Members {
    /// None for an emulated member (`emu:`), which the core drives itself.
    pub files: Vec<Option<File>>,
    /// The emulated device of each member (None for a file or block device); may be empty.
    pub emu: Vec<Option<crate::emu::EmuHandle>>,
    pub block_device: Vec<bool>,
    /// Host-managed zoned block devices' zones (None: not zoned); may be empty. The core
    /// orders their zone writes and the pool carries out their zone commands (crate::zoned).
    pub zoned: Vec<Option<Arc<ZonedDevice>>>,
    /// How each member is named in messages (its path).
    pub names: Vec<String>,
    /// Called (in the core) when the volume fails a member while serving, before its
    /// descriptor is released: array superblocks record it there.
    pub on_failed: Option<Box<dyn FnMut(u32) + Send>>,
}

/// A member the volume failed while serving.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberFailure {
    pub member: u32,
    pub name: String,
    /// The error the member answered (an errno).
    pub errno: i32,
    /// Seconds after the server started.
    pub at_s: f64,
    /// Whether its descriptor was closed (no command to it was left in flight).
    pub released: bool,
}

/// What the server counted, for the report.
pub struct ServeOutcome {
    pub recorder: DeviceRecorder,
    pub flushes: u64,
    pub trims: u64,
    pub write_zeroes: u64,
    pub refused: u64,
    /// CACHE and BLOCK_STATUS requests, answered by the connection's reader.
    pub answered_by_reader: u64,
    pub connections: u64,
    pub member_cmds: Vec<u64>,
    /// Member commands the core did itself (no trip through the I/O pool).
    pub member_cmds_inline: u64,
    pub member_errors: Vec<u64>,
    /// What each zoned block device member's write ordering counted (None: not zoned).
    pub member_zoned: Vec<Option<ZoneSeqStats>>,
    pub member_failures: Vec<MemberFailure>,
    pub volume_stats: serde_json::Value,
    /// Why the --hdr-log could not be written, if it could not.
    pub hdr_log_error: Option<io::Error>,
    /// Why the --lat-log could not be written, if it could not.
    pub lat_log_error: Option<io::Error>,
    /// Times the core waited for the --lat-log writer to give a buffer back (nothing is
    /// dropped: the core waits instead).
    pub lat_log_stalls: u64,
}

/// What the server records besides its report: `--hdr-log`'s interval histograms, and
/// `--lat-log`'s per-request log (its file with the header already written: records count
/// their completion time from when the server starts).
#[derive(Default)]
pub struct ServeLogs {
    pub hdr: Option<HdrSink>,
    pub lat: Option<File>,
}

/// `--hdr-log`: interval histograms of the served requests (one tag per direction).
pub struct HdrSink {
    pub interval_ns: u64,
    pub log: IntervalLog<io::BufWriter<File>>,
}

/// The core's side of the interval log: it records each request into `rec` too, and at each
/// interval's end swaps in the spare recorder and hands the full one to the logger thread,
/// which writes it (compression and I/O off the core), resets it and gives it back. Two
/// recorders in all: nothing is allocated per interval, and neither queue can fill.
struct Intervals {
    rec: DeviceRecorder,
    interval_ns: u64,
    /// The current interval's start (core time).
    from_ns: u64,
    full: SyncSender<(DeviceRecorder, u64, u64)>,
    spare: Receiver<DeviceRecorder>,
}

fn logger_thread(
    mut log: IntervalLog<io::BufWriter<File>>,
    full: &Receiver<(DeviceRecorder, u64, u64)>,
    spare: &SyncSender<DeviceRecorder>,
) -> io::Result<()> {
    let mut result = Ok(());
    while let Ok((mut rec, from_ns, len_ns)) = full.recv() {
        if result.is_ok() {
            result = log.write(0, &rec, from_ns, len_ns);
        }
        rec.reset();
        let _ = spare.try_send(rec);
    }
    result?;
    log.finish()?.flush()
}

/// A member's descriptor, shared by the pool threads; -1 once the core closed it.
struct MemberFd {
    fd: AtomicI32,
    block: bool,
    /// A zoned block device's zone size (0: not zoned).
    zone_bytes: u64,
}

/// Every member's descriptor; those still open are closed when the last user is gone.
struct MemberFds(Vec<MemberFd>);

impl Drop for MemberFds {
    fn drop(&mut self) {
        for m in &self.0 {
            let fd = m.fd.swap(-1, Ordering::AcqRel);
            if fd >= 0 {
                // SAFETY: the descriptor came from into_raw_fd and is closed once (swapped out).
                drop(unsafe { File::from_raw_fd(fd) });
            }
        }
    }
}

/// How the server treats connections.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Connections served at once (handshaking or transmitting); more are closed at once.
    pub max_connections: usize,
    /// From the connection to the end of the handshake; a client slower than this is closed.
    pub handshake_timeout: Duration,
    /// The export maps one to one onto its only member, a regular file (a passthrough volume
    /// with no write-back buffer): block status reports that file's holes. Otherwise every
    /// range is reported allocated (always true to the protocol).
    pub identity_file_map: bool,
    /// TLS (NBD_OPT_STARTTLS), when offered: how, and who runs the TLS session.
    pub tls: Option<TlsConfig>,
    /// Memory all request buffers over 1 MiB may take at once (a request that would exceed
    /// it is refused ENOMEM, its payload consumed): half of MemAvailable at start is what
    /// `nines serve` gives.
    pub buffer_budget_bytes: u64,
}

impl Default for ServeConfig {
    fn default() -> ServeConfig {
        ServeConfig {
            max_connections: CONNS_MAX_DEFAULT,
            handshake_timeout: HANDSHAKE_TIMEOUT_DEFAULT,
            identity_file_map: false,
            tls: None,
            buffer_budget_bytes: BUFFER_BUDGET_DEFAULT_BYTES,
        }
    }
}

/// Runs the server side of a TLS handshake on a connection that just acknowledged
/// NBD_OPT_STARTTLS, and returns the stream the rest of the connection speaks plain NBD over
/// (the TLS library lives with the caller; nines-io moves only plain bytes). The returned
/// stream must behave as a socket of its own: the reader, the writer and the core use clones
/// of it independently (the core sends on its descriptor), and shutting the original
/// connection down (as the stop does) must end it.
pub trait TlsUpgrade: Send + Sync {
    /// `deadline`: the handshake's; a client slower than it is refused.
    fn start_tls(&self, conn: Box<dyn Conn>, deadline: Instant) -> io::Result<Box<dyn Conn>>;
}

/// TLS as the server offers it.
#[derive(Clone)]
pub struct TlsConfig {
    /// [`nbd::TlsMode::On`] or [`nbd::TlsMode::Require`].
    pub mode: nbd::TlsMode,
    pub upgrade: Arc<dyn TlsUpgrade>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

/// One export of a server: its volume, members, description and logs.
pub struct ServedVolume {
    pub vol: AnyVolume,
    pub members: Members,
    pub export: Export,
    pub logs: ServeLogs,
}

/// A handle to a running server: hand it connections, then stop it.
pub struct Server {
    /// One per export, in the exports' order (the first is the default export).
    backends: Vec<Backend>,
    /// What a connection's handshake needs of every export.
    links: Arc<Vec<BackendLink>>,
    exports: Arc<Vec<Export>>,
    config: ServeConfig,
    /// Set at stop: readers waiting for a credit give up.
    stopping: Arc<AtomicBool>,
    next_conn: usize,
    /// Connections refused for the limit, and those not yet logged (one line per second at
    /// most: a flood of refusals must not flood stderr).
    refused_conns: u64,
    refused_unlogged: u64,
    refused_logged_at: Option<Instant>,
    /// Each connection's thread (its reader, which joins its writer before it ends) and a
    /// handle to shut its socket down at stop.
    readers: Vec<(thread::JoinHandle<()>, Box<dyn Conn>)>,
}

/// One export's volume: its core, I/O pool and log writers.
struct Backend {
    core: Option<thread::JoinHandle<ServeOutcome>>,
    pool: Vec<thread::JoinHandle<()>>,
    logger: Option<thread::JoinHandle<io::Result<()>>>,
    /// The --lat-log writer thread.
    lat_sink: Option<LatLogSink>,
    cmd_tx: Option<crossbeam_channel::Sender<PoolCmd>>,
}

/// What a connection needs of an export once it chose it.
struct BackendLink {
    inbox: SyncSender<Msg>,
    /// The member whose holes block status reports (see [`ServeConfig::identity_file_map`]).
    map_file: Option<Arc<File>>,
}

struct PoolCmd {
    member: u32,
    id: u32,
    op: CmdOp,
    offset_bytes: u64,
    len_bytes: u32,
    ptr: usize,
    fua: bool,
}

/// Messages that can be in the core's inbox at once: every credit of every connection (a
/// request or a refusal each), two per connection (connected, gone), every member command's
/// completion, and the shutdown. Senders never find it full, so the core and the pool (which
/// send to each other) cannot deadlock.
fn inbox_bound(conns_max: usize, cmds_max: usize) -> usize {
    conns_max * (CONN_INFLIGHT_MAX + 2) + cmds_max + 1
}

impl Server {
    /// Starts the core and the I/O pool over `vol` on `members`, and the writers of `logs`:
    /// a server of one export.
    pub fn start(
        vol: AnyVolume,
        members: Members,
        export: Export,
        logs: ServeLogs,
        config: ServeConfig,
    ) -> io::Result<Server> {
        Server::start_many(
            vec![ServedVolume {
                vol,
                members,
                export,
                logs,
            }],
            config,
        )
    }

    /// A server of several exports (names distinct; the first is the default export that
    /// the empty name chooses): a core, an I/O pool and log writers per export, one limit on
    /// connections for all of them.
    pub fn start_many(volumes: Vec<ServedVolume>, config: ServeConfig) -> io::Result<Server> {
        let config = ServeConfig {
            max_connections: config.max_connections.max(1),
            ..config
        };
        let mut backends = Vec::with_capacity(volumes.len());
        let mut links = Vec::with_capacity(volumes.len());
        let mut exports = Vec::with_capacity(volumes.len());
        for v in volumes {
            let (backend, link) =
                Server::start_backend(v.vol, v.members, &v.export, v.logs, &config)?;
            backends.push(backend);
            links.push(link);
            exports.push(v.export);
        }
        Ok(Server {
            backends,
            links: Arc::new(links),
            exports: Arc::new(exports),
            config,
            stopping: Arc::new(AtomicBool::new(false)),
            next_conn: 0,
            refused_conns: 0,
            refused_unlogged: 0,
            refused_logged_at: None,
            readers: Vec::new(),
        })
    }

    /// Starts one export's core, I/O pool and log writers.
    fn start_backend(
        vol: AnyVolume,
        members: Members,
        export: &Export,
        logs: ServeLogs,
        config: &ServeConfig,
    ) -> io::Result<(Backend, BackendLink)> {
        let (lat_sink, lat_lane) = match logs.lat {
            None => (None, None),
            Some(file) => {
                let (sink, mut lanes) = LatLogSink::start(
                    file,
                    1,
                    LATLOG_BUFFERS,
                    LATLOG_RECORDS_PER_BUFFER,
                    RECORD_BYTES,
                    None,
                )?;
                (Some(sink), lanes.pop())
            }
        };
        let (intervals, logger) = match logs.hdr {
            None => (None, None),
            Some(h) => {
                let (full_tx, full_rx) = sync_channel(2);
                let (spare_tx, spare_rx) = sync_channel(2);
                let _ = spare_tx.send(DeviceRecorder::new());
                let log = h.log;
                let logger = thread::spawn(move || logger_thread(log, &full_rx, &spare_tx));
                let iv = Intervals {
                    rec: DeviceRecorder::new(),
                    interval_ns: h.interval_ns.max(1_000_000),
                    from_ns: 0,
                    full: full_tx,
                    spare: spare_rx,
                };
                (Some(iv), Some(logger))
            }
        };
        let cmds_max = vol.cmds_max() as usize;
        let (inbox, rx) = sync_channel::<Msg>(inbox_bound(config.max_connections, cmds_max));
        // At most cmds_max member commands are in flight: the core never waits on this queue.
        let (cmd_tx, cmd_rx) = crossbeam_channel::bounded::<PoolCmd>(cmds_max.max(1));
        // Block status reads the holes of the one member through its own descriptor (lseek
        // SEEK_DATA/SEEK_HOLE moves no data and is safe from any thread).
        let map_file = match (config.identity_file_map, members.files.as_slice()) {
            (true, [Some(f)]) if !members.block_device.first().copied().unwrap_or(true) => {
                Some(Arc::new(f.try_clone()?))
            }
            _ => None,
        };
        let zoned = members.zoned;
        let fds = Arc::new(MemberFds(
            members
                .files
                .into_iter()
                .zip(&members.block_device)
                .enumerate()
                .map(|(k, (f, &block))| MemberFd {
                    fd: AtomicI32::new(f.map_or(-1, |f| f.into_raw_fd())),
                    block,
                    zone_bytes: zoned
                        .get(k)
                        .and_then(Option::as_ref)
                        .map_or(0, |z| z.geometry.zone_size_bytes),
                })
                .collect(),
        ));
        let pool = (0..IO_THREADS)
            .map(|_| {
                let rx = cmd_rx.clone();
                let done = inbox.clone();
                let fds = Arc::clone(&fds);
                thread::spawn(move || pool_thread(&rx, &done, &fds.0))
            })
            .collect();
        let core_cmd_tx = cmd_tx.clone();
        let names = members.names;
        let on_failed = members.on_failed;
        // Emulated members are lent to the core for the server's life (opened just before,
        // so nothing else holds them).
        let emu: Vec<Option<EmuLease>> = members
            .emu
            .iter()
            .map(|h| h.as_ref().and_then(crate::emu::EmuHandle::lease))
            .collect();
        let conns_max = config.max_connections;
        let block_bytes = export.block_min_bytes;
        // The time origin of the latency log and the report, taken before any connection can
        // be read (a request's arrival is stamped by its reader thread): taken inside the core
        // thread, a loaded host started it after the first request arrived, and that request's
        // logged latency exceeded its completion time.
        let start_ns = now_ns();
        let core = thread::spawn(move || {
            let mut core = Core::new(vol, core_cmd_tx, fds, names, emu, conns_max, block_bytes);
            core.zseq = zoned
                .iter()
                .map(|z| {
                    z.as_ref()
                        .map(|z| ZoneSeq::new(&z.geometry, &z.zones, cmds_max as u32))
                })
                .collect();
            core.start_ns = start_ns;
            core.intervals = intervals;
            core.lat = lat_lane;
            core.on_failed = on_failed;
            core.run(rx)
        });
        Ok((
            Backend {
                core: Some(core),
                pool,
                logger,
                lat_sink,
                cmd_tx: Some(cmd_tx),
            },
            BackendLink { inbox, map_file },
        ))
    }

    /// Serves one client connection (handshake and transmission on threads of its own), or,
    /// when `--max-connections` are already served, closes it at once (logged on stderr).
    /// Returns whether it is served.
    pub fn accept(&mut self, conn: Box<dyn Conn>) -> io::Result<bool> {
        if self.live_connections() >= self.config.max_connections {
            conn.shutdown_both();
            self.refused_conns += 1;
            self.refused_unlogged += 1;
            self.log_refusals(false);
            return Ok(false);
        }
        self.log_refusals(true);
        let id = self.next_conn;
        self.next_conn += 1;
        let handle = conn.try_clone_conn()?;
        let links = Arc::clone(&self.links);
        let exports = Arc::clone(&self.exports);
        let shut = conn.try_clone_conn()?;
        let stopping = Arc::clone(&self.stopping);
        let handshake_timeout = self.config.handshake_timeout;
        let tls = self.config.tls.clone();
        let buffer_budget_bytes = self.config.buffer_budget_bytes;
        let r = thread::spawn(move || {
            let mut w = None;
            let mut chosen = None;
            // A protocol violation, a client gone, or an option phase ended by the client:
            // close now (other handles to the socket would keep it open). After DISC the
            // writer closes once every reply is out.
            let ctx = HandshakeCtx {
                id,
                links: &links,
                exports: &exports,
                stopping: &stopping,
                handshake_timeout,
                tls: tls.as_ref(),
                buffer_budget_bytes,
            };
            if reader(&ctx, conn, &mut chosen, &mut w).is_err() {
                shut.shutdown_both();
            }
            // Only the export the client chose knows the connection.
            if let Some(i) = chosen {
                let _ = links[i].inbox.send(Msg::Gone { conn: id });
            }
            // The connection ends when its last reply is out (or the client is gone): the
            // writer returns every credit on every path, so this join is bounded by the
            // requests in the core.
            if let Some(w) = w {
                let _ = w.join();
            }
        });
        self.readers.push((r, handle));
        Ok(true)
    }

    /// Connections being served (handshaking, transmitting, or sending their last replies).
    pub fn live_connections(&mut self) -> usize {
        self.readers.retain(|(r, _)| !r.is_finished());
        self.readers.len()
    }

    /// Connections accepted and served so far.
    pub fn accepted_connections(&self) -> u64 {
        self.next_conn as u64
    }

    /// Connections refused for `--max-connections` so far.
    pub fn refused_connections(&self) -> u64 {
        self.refused_conns
    }

    /// Logs the refusals not yet logged: at most one line a second (`flush`: now, when any).
    fn log_refusals(&mut self, flush: bool) {
        if self.refused_unlogged == 0 {
            return;
        }
        let due = self
            .refused_logged_at
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
        if !due && !flush {
            return;
        }
        eprintln!(
            "nines: refused {} connection{}: {} already served (--max-connections {}); {} refused in all",
            self.refused_unlogged,
            if self.refused_unlogged == 1 { "" } else { "s" },
            self.config.max_connections,
            self.config.max_connections,
            self.refused_conns
        );
        self.refused_unlogged = 0;
        self.refused_logged_at = Some(Instant::now());
    }

    /// Stops reading new requests, finishes those in flight, flushes the volume, and returns
    /// what was counted. Bounded whatever clients do: clients get [`STOP_GRACE`] to take the
    /// replies owed to them, then their sockets are shut down both ways.
    pub fn stop(self) -> ServeOutcome {
        self.stop_all()
            .into_iter()
            .next()
            .expect("a server has at least one export")
    }

    /// [`Server::stop`] for a server of several exports: each export's outcome, in order.
    pub fn stop_all(mut self) -> Vec<ServeOutcome> {
        self.log_refusals(true);
        // Readers stop at once (a request whose header was read but not its payload is
        // dropped unanswered, as a client's disconnect would); requests already in the core
        // are finished, and the volume flushed, before the core returns.
        for (_, c) in &self.readers {
            c.shutdown_read();
        }
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline && self.live_connections() > 0 {
            thread::sleep(Duration::from_millis(5));
        }
        // Whoever is left does not take its replies (or is still in the handshake): a writer
        // blocked on a full socket fails now, and returns its credits, which wakes its reader.
        self.stopping.store(true, Ordering::Release);
        for (_, c) in &self.readers {
            c.shutdown_both();
        }
        for (r, _) in self.readers.drain(..) {
            let _ = r.join();
        }
        let mut outcomes = Vec::with_capacity(self.backends.len());
        for (b, link) in self.backends.iter_mut().zip(self.links.iter()) {
            let _ = link.inbox.send(Msg::Shutdown);
            let mut outcome = b
                .core
                .take()
                .expect("core joined once")
                .join()
                .expect("the serve core panicked");
            // The core dropped its end of the interval queue: the logger writes the last one.
            if let Some(l) = b.logger.take() {
                outcome.hdr_log_error = match l.join() {
                    Ok(r) => r.err(),
                    Err(_) => Some(io::Error::other("the HdrHistogram log writer panicked")),
                };
            }
            // The core finished its lane: the writer writes the last buffer and syncs the file.
            if let Some(s) = b.lat_sink.take() {
                outcome.lat_log_error = s.finish().err();
            }
            drop(b.cmd_tx.take());
            outcomes.push(outcome);
        }
        // The pools end once their queues and every sender to the cores are gone.
        drop(self.links);
        for b in &mut self.backends {
            for p in b.pool.drain(..) {
                let _ = p.join();
            }
        }
        outcomes
    }
}

/// What a connection's handshake needs besides its socket: every export, and TLS.
struct HandshakeCtx<'a> {
    id: usize,
    links: &'a [BackendLink],
    exports: &'a [Export],
    stopping: &'a AtomicBool,
    handshake_timeout: Duration,
    tls: Option<&'a TlsConfig>,
    buffer_budget_bytes: u64,
}

/// What a connection's reader needs besides its socket, in transmission (of the export the
/// client chose).
struct ReaderCtx<'a> {
    id: usize,
    inbox: &'a SyncSender<Msg>,
    export: &'a Export,
    stopping: &'a AtomicBool,
    map_file: Option<&'a File>,
    buffer_budget_bytes: u64,
}

/// Reads exactly `buf` before `deadline` (the handshake's): the socket's timeouts are set to
/// what is left before each read, so a client dribbling bytes cannot stretch it.
fn read_by(conn: &mut dyn Conn, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(handshake_timed_out());
        }
        conn.set_timeouts(Some(left))?;
        match conn.read(&mut buf[done..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(handshake_timed_out());
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `buf` before `deadline` (a client that does not read the handshake's answers
/// is closed too).
fn write_by(conn: &mut dyn Conn, buf: &[u8], deadline: Instant) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(handshake_timed_out());
        }
        conn.set_timeouts(Some(left))?;
        match conn.write(&buf[done..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(handshake_timed_out());
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn handshake_timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "handshake timed out")
}

/// Discards `len_bytes` of the stream (a refused write's payload), in a fixed buffer.
fn discard(conn: &mut impl Read, len_bytes: u64) -> io::Result<()> {
    let n = io::copy(&mut conn.take(len_bytes), &mut io::sink())?;
    if n < len_bytes {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// The handshake (within the handshake timeout), then requests until the client disconnects or
/// breaks the protocol. `chosen` receives the export the client chose, `w` the connection's
/// writer thread once it is started.
fn reader(
    hs: &HandshakeCtx,
    mut conn: Box<dyn Conn>,
    chosen: &mut Option<usize>,
    w: &mut Option<thread::JoinHandle<()>>,
) -> io::Result<()> {
    let deadline = Instant::now() + hs.handshake_timeout;
    write_by(conn.as_mut(), &nbd::greeting(), deadline)?;
    let mut flags = [0u8; 4];
    read_by(conn.as_mut(), &mut flags, deadline)?;
    let client = nbd::client_flags(flags).map_err(io::Error::other)?;
    let mut neg =
        nbd::Negotiation::new(client).with_tls(hs.tls.map_or(nbd::TlsMode::Off, |t| t.mode));
    let mut data = Vec::with_capacity(nbd::consts::OPT_DATA_MAX as usize);
    let mut out = Vec::new();
    loop {
        let mut h = [0u8; nbd::consts::OPT_HEADER_BYTES];
        read_by(conn.as_mut(), &mut h, deadline)?;
        let h = nbd::OptHeader::parse(&h).map_err(io::Error::other)?;
        out.clear();
        if h.too_big() {
            let mut left = u64::from(h.len_bytes);
            let mut chunk = [0u8; 4096];
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                read_by(conn.as_mut(), &mut chunk[..n], deadline)?;
                left -= n as u64;
            }
            nbd::too_big_reply(h.option, &mut out);
            write_by(conn.as_mut(), &out, deadline)?;
            continue;
        }
        data.resize(h.len_bytes as usize, 0);
        read_by(conn.as_mut(), &mut data, deadline)?;
        let outcome = neg.option_in(h.option, &data, hs.exports, &mut out);
        write_by(conn.as_mut(), &out, deadline)?;
        match outcome {
            OptOutcome::Continue => {}
            OptOutcome::StartTls => {
                // Acknowledged: the TLS handshake follows on the same socket, and the rest of
                // the connection (options, requests, replies) runs over the stream it gives.
                let Some(tls) = hs.tls else {
                    return Err(io::Error::other("STARTTLS acknowledged without TLS"));
                };
                conn = tls.upgrade.start_tls(conn, deadline)?;
                neg.tls_started();
            }
            OptOutcome::Close => {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "option phase ended",
                ));
            }
            OptOutcome::Transmit => break,
        }
    }
    let index = neg
        .export_index()
        .ok_or_else(|| io::Error::other("transmission without an export"))?;
    *chosen = Some(index);
    let link = &hs.links[index];
    let ctx = ReaderCtx {
        id: hs.id,
        inbox: &link.inbox,
        export: &hs.exports[index],
        stopping: hs.stopping,
        map_file: link.map_file.as_deref(),
        buffer_budget_bytes: hs.buffer_budget_bytes,
    };
    let ctx = &ctx;
    let writer = conn.try_clone_conn()?;
    // Transmission waits for requests as long as the client likes (an idle client is legal).
    conn.set_timeouts(None)?;
    let structured = neg.structured;
    let (reply_tx, reply_rx) = sync_channel::<Reply>(CONN_INFLIGHT_MAX);
    let (credit_tx, credit_rx) = sync_channel::<IoBuf>(CONN_INFLIGHT_MAX);
    for _ in 0..CONN_INFLIGHT_MAX {
        credit_tx
            .send(IoBuf::new())
            .expect("credit queue sized for every credit");
    }
    let writer_pending = Arc::new(AtomicUsize::new(0));
    let link = ConnLink {
        replies: reply_tx,
        sock: conn.try_clone_conn()?,
        credits: credit_tx.clone(),
        writer_pending: Arc::clone(&writer_pending),
    };
    // The writer ends when the core drops this connection's reply queue (after the reader's
    // Gone, once nothing more is owed).
    *w = Some(thread::spawn(move || {
        writer_thread(writer, &reply_rx, &credit_tx, &writer_pending);
    }));
    send(
        ctx.inbox,
        Msg::Connected {
            conn: ctx.id,
            link,
            structured,
        },
    )?;

    let mut conn = BufReader::with_capacity(READ_BUF_BYTES, conn);
    transmit(ctx, &mut conn, &credit_rx, neg.negotiated())
}

fn send(inbox: &SyncSender<Msg>, m: Msg) -> io::Result<()> {
    inbox
        .send(m)
        .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "server stopping"))
}

/// A credit: at once when one is free, else as soon as a reply gives one back. Err once the
/// server is stopping (a client that does not read its replies cannot hold the stop).
fn take_credit(credits: &Receiver<IoBuf>, stopping: &AtomicBool) -> io::Result<IoBuf> {
    // The common case: a credit is free (no clock read for the timed wait).
    if let Ok(b) = credits.try_recv() {
        return Ok(b);
    }
    loop {
        match credits.recv_timeout(CREDIT_POLL) {
            Ok(b) => return Ok(b),
            Err(RecvTimeoutError::Timeout) if !stopping.load(Ordering::Acquire) => {}
            Err(_) => {
                return Err(io::Error::new(io::ErrorKind::BrokenPipe, "server stopping"));
            }
        }
    }
}

/// Reads a request header; Ok(false) when the client closed cleanly between requests.
fn read_header(conn: &mut impl Read, h: &mut [u8; nbd::consts::REQUEST_BYTES]) -> io::Result<bool> {
    let mut done = 0;
    while done < h.len() {
        match conn.read(&mut h[done..]) {
            Ok(0) if done == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn transmit(
    ctx: &ReaderCtx,
    conn: &mut impl Read,
    credits: &Receiver<IoBuf>,
    neg: nbd::Negotiated,
) -> io::Result<()> {
    let id = ctx.id;
    let mut extents = Vec::with_capacity(nbd::consts::BLOCK_STATUS_EXTENTS_MAX);
    loop {
        let mut h = [0u8; nbd::consts::REQUEST_BYTES];
        if !read_header(conn, &mut h)? {
            // The client closed (or the server stops reading): replies still owed go out, then
            // the writer closes.
            return Ok(());
        }
        let received_ns = now_ns();
        let raw = nbd::RawRequest::parse(&h).map_err(io::Error::other)?;
        let checked = nbd::check(&raw, ctx.export, &neg).map_err(io::Error::other)?;
        let mut buf = take_credit(credits, ctx.stopping)?;
        // A large request's buffer comes out of the budget first (a read's is its span of
        // whole blocks); over it, the request is refused, its payload consumed.
        let checked = match checked {
            Ok(cmd) if matches!(cmd.kind, CmdKind::Read | CmdKind::Write) => {
                let need = if cmd.kind == CmdKind::Read {
                    cmd.aligned_span(ctx.export.block_min_bytes).1
                } else {
                    u64::from(cmd.len_bytes)
                };
                if buf.charge(need, ctx.buffer_budget_bytes) {
                    Ok(cmd)
                } else {
                    Err(nbd::Refusal {
                        cookie: cmd.cookie,
                        errno: nbd::consts::ENOMEM,
                    })
                }
            }
            other => other,
        };
        match checked {
            Err(r) => {
                // A refused write's payload is read and dropped (the buffer is not grown).
                discard(conn, u64::from(raw.payload_bytes()))?;
                send(
                    ctx.inbox,
                    Msg::Refused {
                        conn: id,
                        cookie: r.cookie,
                        errno: r.errno,
                        buf,
                    },
                )?;
            }
            Ok(cmd)
                if cmd.kind == CmdKind::Cache
                    || (cmd.kind == CmdKind::BlockStatus && ctx.map_file.is_some()) =>
            {
                // Answered here, off the core: CACHE is a hint (members are read on demand),
                // block status of one file served as is needs only its map. Block status of
                // any other volume goes to the core, which holds the volume's mapping and the
                // emulated members.
                buf.set_len(0);
                buf.header.clear();
                if cmd.kind == CmdKind::Cache {
                    nbd::reply(&mut buf.header, neg.structured, cmd.cookie, 0);
                } else {
                    allocation_map(ctx.map_file, &cmd, ctx.export.size_bytes, &mut extents);
                    nbd::block_status_reply(&mut buf.header, cmd.cookie, &extents);
                }
                send(ctx.inbox, Msg::Answered { conn: id, buf })?;
            }
            Ok(cmd) => {
                buf.set_len(raw.payload_bytes() as usize);
                conn.read_exact(buf.bytes_mut())?;
                let disc = cmd.kind == CmdKind::Disc;
                send(
                    ctx.inbox,
                    Msg::Request {
                        conn: id,
                        cmd,
                        buf,
                        received_ns,
                    },
                )?;
                if disc {
                    return Ok(());
                }
            }
        }
    }
}

/// The `base:allocation` extents of a request's range: the holes and data of the export's
/// file when it maps one to one (SEEK_DATA/SEEK_HOLE), else the whole range allocated. At most
/// [`nbd::consts::BLOCK_STATUS_EXTENTS_MAX`] extents (the client asks again for the rest); one
/// with REQ_ONE; never past the export.
fn allocation_map(file: Option<&File>, cmd: &Command, size_bytes: u64, out: &mut Vec<(u32, u32)>) {
    out.clear();
    let start = cmd.offset_bytes;
    let end = (start + u64::from(cmd.len_bytes)).min(size_bytes);
    let Some(f) = file else {
        out.push(((end - start) as u32, 0));
        return;
    };
    let mut pos = start;
    while pos < end && out.len() < nbd::consts::BLOCK_STATUS_EXTENTS_MAX {
        let (next, flags) = file_run(f.as_raw_fd(), pos, end);
        push_extent(out, (next - pos) as u32, flags);
        pos = next;
        if cmd.req_one {
            break;
        }
    }
}

/// Adds an extent, merged with the last when their flags agree.
fn push_extent(out: &mut Vec<(u32, u32)>, len: u32, flags: u32) {
    match out.last_mut() {
        Some((l, f)) if *f == flags => *l += len,
        _ => out.push((len, flags)),
    }
}

/// The run of a regular file from `pos` (below `end`) that is all hole or all data: its end
/// (above `pos`, at most `end`) and its block-status flags (HOLE|ZERO or 0). A file system
/// that cannot tell reports data.
fn file_run(fd: RawFd, pos: u64, end: u64) -> (u64, u32) {
    let hole = nbd::consts::STATE_HOLE | nbd::consts::STATE_ZERO;
    // SAFETY: lseek on an open descriptor; SEEK_DATA/SEEK_HOLE return absolute offsets,
    // so other threads' use of the descriptor (positional I/O only) is unaffected.
    let data = unsafe { libc::lseek(fd, pos as i64, libc::SEEK_DATA) };
    let (next, flags) = if data < 0 {
        match io::Error::last_os_error().raw_os_error() {
            // No data at or after pos: a hole to the end of the file.
            Some(libc::ENXIO) => (end, hole),
            // The file system cannot tell: report the rest allocated.
            _ => (end, 0),
        }
    } else if data as u64 > pos {
        (data as u64, hole)
    } else {
        // SAFETY: as above.
        let h = unsafe { libc::lseek(fd, pos as i64, libc::SEEK_HOLE) };
        if h < 0 || h as u64 <= pos {
            (end, 0)
        } else {
            (h as u64, 0)
        }
    };
    (next.min(end), flags)
}

/// Writes `a` then `b`, less their first `skip_bytes`, with as few system calls as the socket
/// allows.
fn write_two(conn: &mut dyn Conn, a: &[u8], b: &[u8], skip_bytes: usize) -> io::Result<()> {
    let mut bufs = [IoSlice::new(a), IoSlice::new(b)];
    let mut slices: &mut [IoSlice] = &mut bufs;
    IoSlice::advance_slices(&mut slices, skip_bytes);
    while !slices.is_empty() {
        match conn.write_vectored(slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Sends `a` then `b` without waiting: the bytes the socket took (0 when it took none or
/// failed; the writer then sends the rest, or finds the error).
fn send_nowait(fd: RawFd, a: &[u8], b: &[u8]) -> usize {
    let iov = [
        libc::iovec {
            iov_base: a.as_ptr() as *mut libc::c_void,
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        },
    ];
    // SAFETY: a zeroed msghdr is valid; the iovecs point into live slices for the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = if b.is_empty() { 1 } else { 2 };
    // SAFETY: a plain syscall on an open socket the caller owns a handle to.
    let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    usize::try_from(n).unwrap_or(0)
}

fn writer_thread(
    mut conn: Box<dyn Conn>,
    replies: &Receiver<Reply>,
    credits: &SyncSender<IoBuf>,
    pending: &AtomicUsize,
) {
    let mut broken = false;
    while let Ok(Reply {
        mut buf,
        with_data,
        sent_bytes,
    }) = replies.recv()
    {
        let data = if with_data { buf.payload() } else { &[] };
        if !broken && write_two(conn.as_mut(), &buf.header, data, sent_bytes).is_err() {
            // The client is gone (or the server stopping shut the socket): later replies are
            // dropped, but every credit still goes back, so a reader waiting for one (a client
            // that had every credit out) wakes, finds the socket closed and ends.
            conn.shutdown_both();
            broken = true;
        }
        buf.recycle();
        let _ = credits.try_send(buf);
        pending.fetch_sub(1, Ordering::Release);
    }
    // Nothing more is owed (or the client went away): closing tells a client after DISC that
    // everything was answered.
    conn.shutdown_both();
}

fn pool_thread(
    rx: &crossbeam_channel::Receiver<PoolCmd>,
    done: &SyncSender<Msg>,
    fds: &[MemberFd],
) {
    while let Ok(cmd) = rx.recv() {
        let result = match exec(&cmd, fds) {
            Ok(()) => CmdResult::Ok,
            Err(e) => CmdResult::Err(e.raw_os_error().unwrap_or(libc::EIO)),
        };
        let msg = Msg::Member {
            member: cmd.member,
            done: CmdDone { id: cmd.id, result },
        };
        if done.send(msg).is_err() {
            return;
        }
    }
}

fn exec(c: &PoolCmd, fds: &[MemberFd]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let m = &fds[c.member as usize];
    let fd = m.fd.load(Ordering::Acquire);
    if fd < 0 {
        // A released member: the volume no longer sends to it, but never touch a descriptor
        // number that may have been reused.
        return Err(io::Error::from_raw_os_error(libc::EIO));
    }
    // SAFETY: the descriptor stays open while a command to its member is in flight (the core
    // closes a failed member's only once none is); ManuallyDrop keeps this view from closing it.
    let f = ManuallyDrop::new(unsafe { File::from_raw_fd(fd) });
    let len = c.len_bytes as usize;
    match c.op {
        CmdOp::Read | CmdOp::FastFailRead { .. } => {
            // SAFETY: the core keeps the buffer alive and untouched until this command's
            // completion reaches it.
            let buf = unsafe { std::slice::from_raw_parts_mut(c.ptr as *mut u8, len) };
            f.read_exact_at(buf, c.offset_bytes)
        }
        CmdOp::Write | CmdOp::PlacedWrite { .. } => {
            // SAFETY: as above.
            let buf = unsafe { std::slice::from_raw_parts(c.ptr as *const u8, len) };
            f.write_all_at(buf, c.offset_bytes)?;
            if c.fua { f.sync_data() } else { Ok(()) }
        }
        CmdOp::Flush => f.sync_data(),
        // A zoned member takes no discard or zeroes in place (its emulated twin neither).
        CmdOp::Trim | CmdOp::WriteZeroes if m.zone_bytes > 0 => {
            Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
        }
        CmdOp::Trim | CmdOp::WriteZeroes => {
            let zero = matches!(c.op, CmdOp::WriteZeroes);
            range_op(&f, m.block, zero, c.offset_bytes, c.len_bytes)?;
            if c.fua { f.sync_data() } else { Ok(()) }
        }
        CmdOp::Control(_) => Ok(()),
        // A zoned block device's, let go by the core's ordering (an append reaches the pool as
        // a write at the write pointer).
        CmdOp::ZoneReset if m.zone_bytes > 0 => {
            crate::zoned::zone_mgmt(fd, ZoneMgmt::Reset, c.offset_bytes, u64::from(c.len_bytes))
        }
        CmdOp::ZoneFinish if m.zone_bytes > 0 => {
            crate::zoned::zone_mgmt(fd, ZoneMgmt::Finish, c.offset_bytes, m.zone_bytes)
        }
        // Files and conventional block devices have no zones.
        CmdOp::ZoneAppend | CmdOp::ZoneReset | CmdOp::ZoneFinish => {
            Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
        }
    }
}
/// Discard (trim) or zero a range: fallocate on files, BLKDISCARD/BLKZEROOUT on block devices.
fn range_op(f: &File, block: bool, zero: bool, offset: u64, len: u32) -> io::Result<()> {
    let rc = if block {
        const BLKDISCARD: libc::c_ulong = 0x1277;
        const BLKZEROOUT: libc::c_ulong = 0x127f;
        let range = [offset, u64::from(len)];
        // SAFETY: the ioctls read two u64 from `range`, which lives across the call.
        unsafe {
            libc::ioctl(
                f.as_raw_fd(),
                if zero { BLKZEROOUT } else { BLKDISCARD },
                range.as_ptr(),
            )
        }
    } else {
        let mode = if zero {
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE
        } else {
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
        };
        // SAFETY: a plain syscall on an open descriptor.
        unsafe { libc::fallocate(f.as_raw_fd(), mode, offset as i64, i64::from(len)) }
    };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    // A discard a member cannot do loses nothing (its content is unspecified after TRIM).
    if !zero && err.raw_os_error() == Some(libc::EOPNOTSUPP) {
        return Ok(());
    }
    Err(err)
}

struct Slot {
    conn: usize,
    cookie: u64,
    kind: CmdKind,
    offset_bytes: u64,
    len_bytes: u32,
    received_ns: u64,
    /// The volume range the request covers (a read's widened to whole blocks), submitted in
    /// pieces of at most [`VOL_IO_MAX_BYTES`]: the current piece starts `done_bytes` in and is
    /// `piece_bytes` long.
    vol_offset_bytes: u64,
    vol_len_bytes: u32,
    done_bytes: u32,
    piece_bytes: u32,
    /// Force unit access: every piece carries it.
    fua: bool,
}

struct ConnState {
    link: Option<ConnLink>,
    structured: bool,
    gone: bool,
    /// Requests of this connection waiting or in the volume (replies still owed).
    owed: u32,
}

/// A member as the core sees it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum MemberState {
    Working,
    /// Failed by the volume; its descriptor is closed once nothing to it is in flight.
    Failed,
    Released,
}

struct Core {
    host: VolumeHost,
    cmd_tx: crossbeam_channel::Sender<PoolCmd>,
    /// Each tag's client buffer while its request is in the volume.
    bufs: Vec<Option<IoBuf>>,
    /// The volume's scratch buffers (page-aligned: members may be O_DIRECT).
    _scratch: Vec<AlignedBuf>,
    /// Pointer and length of each tag's buffer (null when none), kept in step with `bufs`.
    ptr_client: Vec<(*mut u8, usize)>,
    ptr_scratch: Vec<(*mut u8, usize)>,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    waiting: VecDeque<(usize, Command, IoBuf, u64)>,
    conns: Vec<ConnState>,
    inflight_cmds: usize,
    member_inflight: Vec<u32>,
    member_state: Vec<MemberState>,
    /// Errors each member answered (for the stderr lines of layouts that do not fail members).
    member_errors_seen: Vec<u64>,
    /// Members read from the page cache at once when cached (regular files, buffered).
    read_inline: Vec<bool>,
    /// Page-cache members (regular files): when nothing else is in flight, the core does a
    /// command to one itself rather than hand it to the pool (at QD1 every hand-off is a
    /// thread wake-up on the request's path).
    buffered: Vec<bool>,
    /// Member commands done in the core, to deliver after the outputs that made them.
    inline_done: Vec<(u32, CmdDone)>,
    fds: Arc<MemberFds>,
    names: Vec<String>,
    /// Emulated members (indexed like the members; shorter when the last are real) and their
    /// commands in flight by completion time (CLOCK_MONOTONIC), member and id, with the model's
    /// result of each by id; at most cmds_max of them.
    emu: Vec<Option<EmuLease>>,
    emu_pending: BinaryHeap<Reverse<(u64, u32, u32)>>,
    emu_res: Vec<CmdResult>,
    /// Each zoned block device member's write ordering (indexed like the members; may be
    /// shorter): its zone commands go to the pool one per zone, in send order.
    zseq: Vec<Option<ZoneSeq>>,
    out: ServeOutcome,
    start_ns: u64,
    /// `--hdr-log`'s intervals, when asked for.
    intervals: Option<Intervals>,
    /// `--lat-log`'s lane: one record per served read and write.
    lat: Option<LatLogLane>,
    /// [`Members::on_failed`].
    on_failed: Option<Box<dyn FnMut(u32) + Send>>,
    /// The export's block: reads are widened to whole blocks.
    block_bytes: u32,
    /// Block status's extents, reused (nothing allocated per request).
    extents: Vec<(u32, u32)>,
    /// Tags whose next piece is to be submitted ([`Core::next_piece`]).
    pieces: Vec<u32>,
}

impl Core {
    fn new(
        vol: AnyVolume,
        cmd_tx: crossbeam_channel::Sender<PoolCmd>,
        fds: Arc<MemberFds>,
        names: Vec<String>,
        emu: Vec<Option<EmuLease>>,
        conns_max: usize,
        block_bytes: u32,
    ) -> Core {
        let (n, len) = vol.scratch();
        let cmds_max = vol.cmds_max() as usize;
        let members = vol.members() as usize;
        let stats = vol.stats();
        let mut scratch: Vec<AlignedBuf> = (0..n).map(|_| AlignedBuf::new(len as usize)).collect();
        let ptr_scratch = scratch
            .iter_mut()
            .map(|b| (b.as_mut_ptr(), b.len()))
            .collect();
        Core {
            // Member commands are counted for one member too (a passthrough volume's report).
            host: VolumeHost::new(vol, 0, true),
            cmd_tx,
            bufs: (0..TAGS).map(|_| None).collect(),
            _scratch: scratch,
            ptr_client: vec![(std::ptr::null_mut(), 0); TAGS as usize],
            ptr_scratch,
            slots: (0..TAGS).map(|_| None).collect(),
            free: (0..TAGS).rev().collect(),
            waiting: VecDeque::with_capacity(conns_max * CONN_INFLIGHT_MAX),
            conns: Vec::new(),
            inflight_cmds: 0,
            member_inflight: vec![0; members],
            member_state: vec![MemberState::Working; members],
            member_errors_seen: vec![0; members],
            read_inline: fds.0.iter().map(|m| !m.block).collect(),
            buffered: fds
                .0
                .iter()
                .map(|m| !m.block && m.fd.load(Ordering::Relaxed) >= 0)
                .collect(),
            inline_done: Vec::with_capacity(cmds_max),
            fds,
            names,
            emu,
            emu_pending: BinaryHeap::with_capacity(cmds_max),
            emu_res: vec![CmdResult::Ok; cmds_max],
            zseq: Vec::new(),
            out: ServeOutcome {
                recorder: DeviceRecorder::new(),
                flushes: 0,
                trims: 0,
                write_zeroes: 0,
                refused: 0,
                answered_by_reader: 0,
                connections: 0,
                member_cmds: vec![0; members],
                member_cmds_inline: 0,
                member_errors: vec![0; members],
                member_zoned: Vec::new(),
                member_failures: Vec::new(),
                volume_stats: stats,
                hdr_log_error: None,
                lat_log_error: None,
                lat_log_stalls: 0,
            },
            start_ns: now_ns(),
            intervals: None,
            lat: None,
            on_failed: None,
            block_bytes,
            extents: Vec::with_capacity(nbd::consts::BLOCK_STATUS_EXTENTS_MAX),
            pieces: Vec::with_capacity(TAGS as usize),
        }
    }

    fn now(&self) -> u64 {
        now_ns() - self.start_ns
    }

    fn run(mut self, rx: Receiver<Msg>) -> ServeOutcome {
        let mut stopping = false;
        loop {
            if stopping && self.idle() {
                if self.flush_at_end(&rx) {
                    continue;
                }
                break;
            }
            let Ok(msg) = self.next_msg(&rx) else { break };
            self.harvest_emu();
            self.roll_interval(false);
            if let Some(at) = self.host.next_timer_ns()
                && at <= self.now()
            {
                let now = self.now();
                self.with_data(|h, d| h.on_timer(now, d));
                self.drain();
            }
            match msg {
                None => {}
                Some(Msg::Shutdown) => stopping = true,
                Some(m) => self.handle(m),
            }
        }
        self.roll_interval(true);
        // Dropping the queue ends the logger once it wrote the last interval.
        self.intervals = None;
        self.out.lat_log_stalls = self.lat.take().map_or(0, LatLogLane::finish);
        self.out.volume_stats = self.host.volume().stats();
        let (cmds, errs) = self.host.member_counts();
        if !cmds.is_empty() {
            self.out.member_cmds = cmds.to_vec();
            self.out.member_errors = errs.to_vec();
        }
        self.out.member_zoned = self
            .zseq
            .iter()
            .map(|z| z.as_ref().map(ZoneSeq::stats))
            .collect();
        self.out
    }

    fn idle(&self) -> bool {
        self.free.len() == TAGS as usize && self.waiting.is_empty() && self.inflight_cmds == 0
    }

    /// The final flush at shutdown: submitted once, then waited for. Returns whether the loop
    /// must go on (the flush is in flight).
    fn flush_at_end(&mut self, rx: &Receiver<Msg>) -> bool {
        let tag = self.free.pop().expect("idle core has every tag");
        self.slots[tag as usize] = Some(Slot {
            conn: usize::MAX,
            cookie: 0,
            kind: CmdKind::Flush,
            offset_bytes: 0,
            len_bytes: 0,
            received_ns: now_ns(),
            vol_offset_bytes: 0,
            vol_len_bytes: 0,
            done_bytes: 0,
            piece_bytes: 0,
            fua: false,
        });
        let io = VolIo {
            tag,
            op: VolOp::Flush,
            offset_bytes: 0,
            len_bytes: 0,
            fua: false,
        };
        let now = self.now();
        self.with_data(|h, d| h.submit(now, io, d));
        self.drain();
        while !self.idle() {
            match self.next_msg(rx) {
                Ok(Some(m)) => self.handle(m),
                Ok(None) => {}
                Err(()) => break,
            }
            self.harvest_emu();
        }
        false
    }

    /// The next message, or None when the volume's timer or an emulated member's completion
    /// came first; Err when every sender is gone.
    fn next_msg(&self, rx: &Receiver<Msg>) -> Result<Option<Msg>, ()> {
        let timer = self
            .host
            .next_timer_ns()
            .map(|at| at.saturating_sub(self.now()));
        let emu = self
            .emu_pending
            .peek()
            .map(|Reverse((at, _, _))| at.saturating_sub(now_ns()));
        let interval = self
            .intervals
            .as_ref()
            .map(|iv| (iv.from_ns + iv.interval_ns).saturating_sub(self.now()));
        match timer.into_iter().chain(emu).chain(interval).min() {
            // A timed sleep wakes late by tens of microseconds: sleep until shortly before,
            // then poll (an emulated completion is seen within a few microseconds of its time).
            Some(wait) if wait > SPIN_NS => {
                match rx.recv_timeout(Duration::from_nanos(wait - SPIN_NS)) {
                    Ok(m) => Ok(Some(m)),
                    Err(RecvTimeoutError::Timeout) => Ok(None),
                    Err(RecvTimeoutError::Disconnected) => Err(()),
                }
            }
            Some(_) => match rx.try_recv() {
                Ok(m) => Ok(Some(m)),
                Err(TryRecvError::Empty) => {
                    std::hint::spin_loop();
                    Ok(None)
                }
                Err(TryRecvError::Disconnected) => Err(()),
            },
            None => rx.recv().map(Some).map_err(|_| ()),
        }
    }

    /// Ends the current `--hdr-log` interval when it is due (`last`: now, at shutdown) and hands
    /// it to the logger. When the logger still holds the spare recorder, the interval runs on
    /// (a longer interval, nothing lost).
    fn roll_interval(&mut self, last: bool) {
        let now = self.now();
        let Some(iv) = self.intervals.as_mut() else {
            return;
        };
        if !last && now < iv.from_ns + iv.interval_ns {
            return;
        }
        let spare = if last {
            iv.spare.recv().ok()
        } else {
            iv.spare.try_recv().ok()
        };
        let Some(spare) = spare else { return };
        let full = std::mem::replace(&mut iv.rec, spare);
        // Two recorders in all, the queue holds two: never full.
        let _ = iv.full.send((full, iv.from_ns, now - iv.from_ns));
        iv.from_ns = now;
    }

    /// Completes every emulated command whose completion time has come, as the pool's
    /// completions are.
    fn harvest_emu(&mut self) {
        let t = now_ns();
        while let Some(Reverse((at, member, id))) = self.emu_pending.peek().copied() {
            if at > t {
                break;
            }
            self.emu_pending.pop();
            if let Some(dev) = self.emu.get_mut(member as usize).and_then(Option::as_mut) {
                dev.record_overhead(at, t);
            }
            let result = self.emu_res[id as usize];
            self.handle(Msg::Member {
                member,
                done: CmdDone { id, result },
            });
        }
    }

    /// Calls the volume with the data plane over the current buffers.
    fn with_data<R>(&mut self, f: impl FnOnce(&mut VolumeHost, &mut PtrData) -> R) -> R {
        let mut data = PtrData {
            client: &self.ptr_client,
            scratch: &self.ptr_scratch,
        };
        f(&mut self.host, &mut data)
    }

    fn handle(&mut self, m: Msg) {
        match m {
            Msg::Connected {
                conn,
                link,
                structured,
            } => {
                if self.conns.len() <= conn {
                    self.conns.resize_with(conn + 1, || ConnState {
                        link: None,
                        structured: false,
                        gone: true,
                        owed: 0,
                    });
                }
                self.conns[conn] = ConnState {
                    link: Some(link),
                    structured,
                    gone: false,
                    owed: 0,
                };
                self.out.connections += 1;
            }
            Msg::Gone { conn } => {
                // Replies still owed are sent first; the writer ends when nothing more is owed
                // and its queue is dropped.
                if let Some(c) = self.conns.get_mut(conn) {
                    c.gone = true;
                }
                self.release_if_gone(conn);
            }
            Msg::Refused {
                conn,
                cookie,
                errno,
                buf,
            } => {
                self.out.refused += 1;
                self.reply(conn, cookie, 0, errno, buf, false);
            }
            Msg::Answered { conn, buf } => {
                self.out.answered_by_reader += 1;
                self.deliver(conn, buf, false);
            }
            Msg::Request {
                conn,
                cmd,
                buf,
                received_ns,
            } => {
                if cmd.kind == CmdKind::Disc {
                    // Everything before it is answered as it completes; the writer closes after
                    // the last, when the reader's Gone arrives and nothing more is owed.
                    return;
                }
                if cmd.kind == CmdKind::BlockStatus {
                    self.block_status(conn, &cmd, buf);
                    return;
                }
                if let Some(c) = self.conns.get_mut(conn) {
                    c.owed += 1;
                }
                self.waiting.push_back((conn, cmd, buf, received_ns));
                self.start_waiting();
            }
            Msg::Member { member, done } => {
                self.member_completed(member, done);
                self.drain();
                self.start_waiting();
            }
            Msg::Shutdown => {}
        }
    }

    /// Answers a BLOCK_STATUS request (`base:allocation`) from the volume's mapping
    /// ([`Volume::extent_at`]) and its members' own holes: an emulated member's unwritten
    /// blocks, a regular file's holes. Rare and bounded (at most
    /// [`nbd::consts::BLOCK_STATUS_EXTENTS_MAX`] extents), so done in the core, which holds both.
    fn block_status(&mut self, conn: usize, cmd: &Command, mut buf: IoBuf) {
        self.out.answered_by_reader += 1;
        let mut extents = std::mem::take(&mut self.extents);
        extents.clear();
        let start = cmd.offset_bytes;
        let end = (start + u64::from(cmd.len_bytes)).min(self.host.volume().size_bytes());
        let hole = nbd::consts::STATE_HOLE | nbd::consts::STATE_ZERO;
        let mut pos = start;
        while pos < end && extents.len() < nbd::consts::BLOCK_STATUS_EXTENTS_MAX {
            let (len, flags) = match self.host.volume().extent_at(pos) {
                Extent::Unmapped { len_bytes } => (len_bytes, hole),
                Extent::Mapped { len_bytes } => (len_bytes, 0),
                Extent::OnMember {
                    member,
                    offset_bytes,
                    len_bytes,
                } => self.member_run(member, offset_bytes, len_bytes.min(end - pos)),
            };
            let len = len.clamp(1, end - pos);
            push_extent(&mut extents, len as u32, flags);
            pos += len;
            if cmd.req_one {
                break;
            }
        }
        if extents.is_empty() {
            extents.push(((end - start) as u32, 0));
        }
        buf.set_len(0);
        buf.header.clear();
        nbd::block_status_reply(&mut buf.header, cmd.cookie, &extents);
        self.extents = extents;
        self.deliver(conn, buf, false);
    }

    /// The run of member `member` from `offset_bytes` (at most `len_bytes`) that is all
    /// unwritten or all data, and its flags: an emulated member's store, a regular file's
    /// SEEK_DATA/SEEK_HOLE; data for a block device or a released member.
    fn member_run(&self, member: u32, offset_bytes: u64, len_bytes: u64) -> (u64, u32) {
        let hole = nbd::consts::STATE_HOLE | nbd::consts::STATE_ZERO;
        if let Some(dev) = self.emu.get(member as usize).and_then(Option::as_ref) {
            let (written, n) = dev.written_run(offset_bytes, len_bytes);
            return (n, if written { 0 } else { hole });
        }
        let Some(m) = self.fds.0.get(member as usize) else {
            return (len_bytes, 0);
        };
        let fd = m.fd.load(Ordering::Acquire);
        if m.block || fd < 0 || self.member_state[member as usize] != MemberState::Working {
            return (len_bytes, 0);
        }
        let (next, flags) = file_run(fd, offset_bytes, offset_bytes + len_bytes);
        (next - offset_bytes, flags)
    }

    fn member_completed(&mut self, member: u32, mut done: CmdDone) {
        self.inflight_cmds -= 1;
        self.member_inflight[member as usize] -= 1;
        // A zoned member's zone command: its zone's next goes now; an append says where.
        if let Some(seq) = self.zseq.get_mut(member as usize).and_then(Option::as_mut)
            && let Some((result, zone)) = seq.complete(done.id, done.result)
        {
            if seq.stale(zone) {
                let fd = self.fds.0[member as usize].fd.load(Ordering::Acquire);
                let found = crate::zoned::report_zone(fd, seq.zone_start_bytes(zone)).ok();
                seq.refresh(zone, found.as_ref());
            }
            done.result = result;
            self.zone_run(member, None, zone);
        }
        let now = self.now();
        self.with_data(|h, d| h.member_done(now, done, d));
        if let CmdResult::Err(errno) = done.result {
            self.member_error(member, errno);
        }
        self.release_failed(member);
    }

    /// A member answered an error: if the volume failed it (a redundant layout), report it.
    fn member_error(&mut self, member: u32, errno: i32) {
        let m = member as usize;
        self.member_errors_seen[m] += 1;
        if self.member_state[m] != MemberState::Working {
            return;
        }
        if failed_member(&self.host.volume().stats()) != Some(member) {
            // A layout without redundancy (raid0, passthrough) passes the error to the client;
            // say so on stderr too, the 1st, 2nd, 4th, 8th... time (bounded output).
            let n = self.member_errors_seen[m];
            if n.is_power_of_two() {
                let name = self.names.get(m).map_or("", String::as_str);
                eprintln!(
                    "nines: member {member} ({name}) failed a command at {:.3} s: {} ({n} \
                     error{} so far); the request failed",
                    self.now() as f64 / 1e9,
                    io::Error::from_raw_os_error(errno),
                    if n == 1 { "" } else { "s" }
                );
            }
            return;
        }
        self.member_state[m] = MemberState::Failed;
        let at_s = self.now() as f64 / 1e9;
        let name = self.names.get(m).cloned().unwrap_or_default();
        eprintln!(
            "nines: member {member} ({name}) failed at {at_s:.3} s: {}; serving degraded",
            io::Error::from_raw_os_error(errno)
        );
        self.out.member_failures.push(MemberFailure {
            member,
            name,
            errno,
            at_s,
            released: false,
        });
        if let Some(f) = self.on_failed.as_mut() {
            f(member);
        }
    }

    /// Closes a failed member's descriptor once no command to it is in flight (the volume
    /// sends it none after failing it), so the device can be taken out of the system.
    fn release_failed(&mut self, member: u32) {
        let m = member as usize;
        if self.member_state[m] != MemberState::Failed || self.member_inflight[m] > 0 {
            return;
        }
        self.member_state[m] = MemberState::Released;
        let fd = self.fds.0[m].fd.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: swapped out of the table, so closed once; no command to it is in flight
            // and any later one sees -1.
            drop(unsafe { File::from_raw_fd(fd) });
        }
        if let Some(f) = self
            .out
            .member_failures
            .iter_mut()
            .find(|f| f.member == member)
        {
            f.released = true;
            eprintln!(
                "nines: member {member} ({}) released: its descriptor is closed",
                f.name
            );
        }
    }

    fn start_waiting(&mut self) {
        while !self.waiting.is_empty() {
            let Some(tag) = self.free.pop() else { return };
            let (conn, cmd, mut buf, received_ns) =
                self.waiting.pop_front().expect("checked non-empty");
            let op = match cmd.kind {
                CmdKind::Read => VolOp::Read,
                CmdKind::Write => VolOp::Write,
                CmdKind::Flush => VolOp::Flush,
                CmdKind::Trim => VolOp::Trim,
                CmdKind::WriteZeroes => VolOp::WriteZeroes,
                CmdKind::Disc | CmdKind::Cache | CmdKind::BlockStatus => {
                    unreachable!("answered before the volume")
                }
            };
            // A read covers whole blocks (an unaligned one is widened; only the bytes asked
            // for are sent).
            let (offset_bytes, len_bytes) = if cmd.kind == CmdKind::Read {
                let (start, span, skip) = cmd.aligned_span(self.block_bytes);
                buf.set_len(span as usize);
                buf.skip = skip as usize;
                (start, span as u32)
            } else {
                (cmd.offset_bytes, cmd.len_bytes)
            };
            let piece_bytes = len_bytes.min(VOL_IO_MAX_BYTES);
            let data = buf.bytes_mut();
            self.ptr_client[tag as usize] =
                (data.as_mut_ptr(), data.len().min(piece_bytes as usize));
            self.bufs[tag as usize] = Some(buf);
            self.slots[tag as usize] = Some(Slot {
                conn,
                cookie: cmd.cookie,
                kind: cmd.kind,
                offset_bytes: cmd.offset_bytes,
                len_bytes: cmd.len_bytes,
                received_ns,
                vol_offset_bytes: offset_bytes,
                vol_len_bytes: len_bytes,
                done_bytes: 0,
                piece_bytes,
                fua: cmd.fua,
            });
            let io = VolIo {
                tag,
                op,
                offset_bytes,
                len_bytes: if op == VolOp::Flush { 0 } else { piece_bytes },
                fua: cmd.fua,
            };
            let now = self.now();
            self.with_data(|h, d| h.submit(now, io, d));
            self.drain();
        }
    }

    /// The piece of a request larger than [`VOL_IO_MAX_BYTES`] that completed was not its
    /// last: moves the tag on to the next piece (submitted by [`Core::drain`] once the
    /// outputs of the call that completed it are out). False when the request is done.
    fn next_piece(&mut self, tag: u32, result: IoResult) -> bool {
        let Some(slot) = self.slots[tag as usize].as_mut() else {
            return false;
        };
        let done = slot.done_bytes + slot.piece_bytes;
        if result != IoResult::Ok || slot.kind == CmdKind::Flush || done >= slot.vol_len_bytes {
            return false;
        }
        slot.done_bytes = done;
        slot.piece_bytes = (slot.vol_len_bytes - done).min(VOL_IO_MAX_BYTES);
        let piece = slot.piece_bytes as usize;
        let moves_data = matches!(slot.kind, CmdKind::Read | CmdKind::Write);
        if moves_data && let Some(buf) = self.bufs[tag as usize].as_mut() {
            let data = buf.bytes_mut();
            self.ptr_client[tag as usize] = (data[done as usize..].as_mut_ptr(), piece);
        }
        self.pieces.push(tag);
        true
    }

    /// Submits the next piece of request `tag` ([`Core::next_piece`]).
    fn submit_piece(&mut self, tag: u32) {
        let Some(slot) = self.slots[tag as usize].as_ref() else {
            return;
        };
        let io = VolIo {
            tag,
            op: match slot.kind {
                CmdKind::Read => VolOp::Read,
                CmdKind::Write => VolOp::Write,
                CmdKind::Trim => VolOp::Trim,
                _ => VolOp::WriteZeroes,
            },
            offset_bytes: slot.vol_offset_bytes + u64::from(slot.done_bytes),
            len_bytes: slot.piece_bytes,
            fua: slot.fua,
        };
        let now = self.now();
        self.with_data(|h, d| h.submit(now, io, d));
    }

    /// Sends the volume's member commands to the pool (or reads them from the page cache at
    /// once), and answers its completions.
    fn drain(&mut self) {
        loop {
            while let Some(o) = self.host.pop() {
                match o {
                    Output::Cmd(c) => self.send_cmd(c),
                    Output::Done(d) => {
                        if !self.next_piece(d.tag, d.result) {
                            self.complete(d.tag, d.result);
                        }
                    }
                }
            }
            // A large request's next piece, once every output of the call that completed
            // the last is out.
            if let Some(tag) = self.pieces.pop() {
                self.submit_piece(tag);
                continue;
            }
            // Commands done here are delivered once every output of the call that made them
            // is out (as completions from the pool would be).
            let Some((member, done)) = self.inline_done.pop() else {
                return;
            };
            self.member_completed(member, done);
        }
    }

    /// A read from a page-cache member, done at once when every byte is cached
    /// (preadv2 RWF_NOWAIT): no trip through the pool. None: the pool must do it.
    fn read_cached(
        &mut self,
        member: u32,
        ptr: usize,
        len_bytes: u32,
        offset_bytes: u64,
    ) -> Option<CmdResult> {
        let m = member as usize;
        if !self.read_inline[m] || len_bytes > INLINE_MAX_BYTES {
            return None;
        }
        let fd = self.fds.0[m].fd.load(Ordering::Acquire);
        if fd < 0 {
            return None;
        }
        let iov = libc::iovec {
            iov_base: ptr as *mut libc::c_void,
            iov_len: len_bytes as usize,
        };
        // SAFETY: the buffer is the command's, alive and untouched until it completes; the
        // descriptor is open (only this thread closes members' descriptors).
        let n = unsafe { libc::preadv2(fd, &iov, 1, offset_bytes as i64, libc::RWF_NOWAIT) };
        if n == len_bytes as isize {
            return Some(CmdResult::Ok);
        }
        if n < 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EAGAIN) => {}
                Some(libc::EOPNOTSUPP | libc::EINVAL) => self.read_inline[m] = false,
                Some(e) => return Some(CmdResult::Err(e)),
                None => {}
            }
        }
        // Partly cached, or past the end: the pool reads it whole (and reports a short read).
        None
    }

    /// Whether the core does this command itself, blocking: a read (not cached) or a plain
    /// write of at most [`INLINE_MAX_BYTES`] on a page-cache member, when no other member
    /// command is in flight and no request waits for a tag. Then nothing else can be held up
    /// but requests still on their way in, and the request saves two thread hand-offs (to the
    /// pool and back). FUA writes, flushes, trims and zeroes (which sync) and block devices
    /// (whose commands take the device's time) always go to the pool.
    fn inline_now(&self, c: &MemberCmd) -> bool {
        let m = c.member as usize;
        self.inflight_cmds == 0
            && self.waiting.is_empty()
            && self.buffered[m]
            && c.len_bytes <= INLINE_MAX_BYTES
            && match c.op {
                CmdOp::Read => true,
                CmdOp::Write | CmdOp::PlacedWrite { .. } => !c.fua,
                _ => false,
            }
    }

    fn send_cmd(&mut self, c: MemberCmd) {
        let now = self.now();
        self.host.sent(&c, now);
        let ptr = match c.buf {
            BufRef::None => 0,
            r => self.with_data(|_, d| d.ptr(r, c.len_bytes)) as usize,
        };
        if let Some(dev) = self.emu.get_mut(c.member as usize).and_then(Option::as_mut) {
            // The model times it and moves its data now; it completes when the clock says.
            let (at, result) = dev.send(now_ns(), &c, ptr as *mut u8);
            self.emu_res[c.id as usize] = result;
            self.emu_pending.push(Reverse((at, c.member, c.id)));
            self.inflight_cmds += 1;
            self.member_inflight[c.member as usize] += 1;
            return;
        }
        if let Some(seq) = self
            .zseq
            .get_mut(c.member as usize)
            .and_then(Option::as_mut)
            && ZoneSeq::sequenced(c.op)
        {
            // In flight from the volume's view now; on the pool once its zone is free.
            self.inflight_cmds += 1;
            self.member_inflight[c.member as usize] += 1;
            if let Some(d) = seq.submit(&c) {
                self.zone_run(c.member, Some(d), u32::MAX);
            }
            return;
        }
        if matches!(c.op, CmdOp::Read)
            && let Some(result) = self.read_cached(c.member, ptr, c.len_bytes, c.offset_bytes)
        {
            self.inflight_cmds += 1;
            self.member_inflight[c.member as usize] += 1;
            self.out.member_cmds_inline += 1;
            self.inline_done
                .push((c.member, CmdDone { id: c.id, result }));
            return;
        }
        let cmd = PoolCmd {
            member: c.member,
            id: c.id,
            op: c.op,
            offset_bytes: c.offset_bytes,
            len_bytes: c.len_bytes,
            ptr,
            fua: c.fua,
        };
        if self.inline_now(&c) {
            let result = match exec(&cmd, &self.fds.0) {
                Ok(()) => CmdResult::Ok,
                Err(e) => CmdResult::Err(e.raw_os_error().unwrap_or(libc::EIO)),
            };
            self.inflight_cmds += 1;
            self.member_inflight[c.member as usize] += 1;
            self.out.member_cmds_inline += 1;
            self.inline_done
                .push((c.member, CmdDone { id: c.id, result }));
            return;
        }
        // The queue holds cmds_max commands, the most the volume has out: never full. It is
        // disconnected only after the core ended.
        if self.cmd_tx.send(cmd).is_ok() {
            self.inflight_cmds += 1;
            self.member_inflight[c.member as usize] += 1;
        }
    }

    /// Carries out what a zoned member's ordering lets go: `first`, then what waits in its
    /// zone (`zone`, or the one `first` names), until one is on the pool or none waits.
    /// Answers complete in the core, after the outputs that made them. Bounded by the
    /// commands the ordering holds.
    fn zone_run(&mut self, member: u32, mut first: Option<Dispatch>, mut zone: u32) {
        let m = member as usize;
        for _ in 0..=self.emu_res.len() {
            let next = match first.take() {
                Some(d) => Some(d),
                None => self.zseq[m].as_mut().and_then(|s| s.next(zone)),
            };
            let Some(d) = next else { return };
            let (cmd, op, offset_bytes) = match d {
                Dispatch::Answer {
                    zone: z,
                    id,
                    result,
                } => {
                    self.inline_done.push((member, CmdDone { id, result }));
                    zone = z;
                    continue;
                }
                Dispatch::Write {
                    cmd, offset_bytes, ..
                } => (cmd, CmdOp::Write, offset_bytes),
                Dispatch::Manage { cmd, .. } => (cmd, cmd.op, cmd.offset_bytes),
            };
            let ptr = match cmd.buf {
                BufRef::None => 0,
                r => self.with_data(|_, d| d.ptr(r, cmd.len_bytes)) as usize,
            };
            // Never full (cmds_max commands at most); disconnected only after the core ended.
            let _ = self.cmd_tx.send(PoolCmd {
                member,
                id: cmd.id,
                op,
                offset_bytes,
                len_bytes: cmd.len_bytes,
                ptr,
                fua: cmd.fua,
            });
            return;
        }
        unreachable!("a zone's queue holds at most the volume's commands")
    }

    fn complete(&mut self, tag: u32, result: IoResult) {
        let slot = self.slots[tag as usize]
            .take()
            .expect("a volume completed a tag it was not given");
        self.free.push(tag);
        self.ptr_client[tag as usize] = (std::ptr::null_mut(), 0);
        let buf = self.bufs[tag as usize].take();
        let errno = match result {
            IoResult::Ok => 0,
            IoResult::Err(e) => nbd::wire_errno(e),
        };
        let t = now_ns();
        let latency_ns = t.saturating_sub(slot.received_ns);
        if let Some(op) = match slot.kind {
            CmdKind::Read => Some(Op::Read),
            CmdKind::Write => Some(Op::Write),
            _ => None,
        } {
            if let Some(iv) = self.intervals.as_mut() {
                iv.rec.record(op, latency_ns, slot.len_bytes);
            }
            if let Some(lane) = self.lat.as_mut() {
                let mut record = [0u8; RECORD_BYTES];
                LatRecord {
                    completion_ns: t.saturating_sub(self.start_ns),
                    latency_ns,
                    offset_bytes: slot.offset_bytes,
                    device: 0,
                    op,
                }
                .encode(&mut record);
                lane.push(&record);
            }
        }
        match slot.kind {
            CmdKind::Read => self
                .out
                .recorder
                .record(Op::Read, latency_ns, slot.len_bytes),
            CmdKind::Write => self
                .out
                .recorder
                .record(Op::Write, latency_ns, slot.len_bytes),
            CmdKind::Flush => self.out.flushes += 1,
            CmdKind::Trim => self.out.trims += 1,
            CmdKind::WriteZeroes => self.out.write_zeroes += 1,
            CmdKind::Disc | CmdKind::Cache | CmdKind::BlockStatus => {}
        }
        let Some(mut buf) = buf else { return };
        if slot.kind == CmdKind::Read {
            // The blocks around an unaligned read were read: send the bytes asked for.
            buf.len = buf.skip + slot.len_bytes as usize;
        }
        if let Some(c) = self.conns.get_mut(slot.conn) {
            c.owed -= 1;
        }
        let with_data = slot.kind == CmdKind::Read && errno == 0;
        self.reply(
            slot.conn,
            slot.cookie,
            slot.offset_bytes,
            errno,
            buf,
            with_data,
        );
        self.release_if_gone(slot.conn);
    }

    /// Drops a departed connection's reply queue once nothing more is owed to it (its writer
    /// then ends).
    fn release_if_gone(&mut self, conn: usize) {
        if let Some(c) = self.conns.get_mut(conn)
            && c.gone
            && c.owed == 0
        {
            c.link = None;
        }
    }

    fn reply(
        &mut self,
        conn: usize,
        cookie: u64,
        offset_bytes: u64,
        errno: u32,
        mut buf: IoBuf,
        with_data: bool,
    ) {
        let Some(c) = self.conns.get(conn) else {
            return;
        };
        if c.link.is_none() {
            return;
        }
        buf.header.clear();
        if with_data {
            let payload_bytes = buf.payload().len() as u32;
            nbd::read_reply_header(
                &mut buf.header,
                c.structured,
                cookie,
                offset_bytes,
                payload_bytes,
            );
        } else {
            nbd::reply(&mut buf.header, c.structured, cookie, errno);
        }
        self.deliver(conn, buf, with_data);
    }

    /// Sends a reply whose header is built (the core sends it at once when the writer has
    /// nothing queued, else the writer does), then gives the credit back.
    fn deliver(&mut self, conn: usize, mut buf: IoBuf, with_data: bool) {
        let Some(link) = self.conns.get(conn).and_then(|c| c.link.as_ref()) else {
            return;
        };
        let mut sent_bytes = 0;
        if link.writer_pending.load(Ordering::Acquire) == 0 {
            let data = if with_data { buf.payload() } else { &[] };
            sent_bytes = send_nowait(link.sock.raw_fd(), &buf.header, data);
            if sent_bytes == buf.header.len() + data.len() {
                buf.recycle();
                let _ = link.credits.try_send(buf);
                return;
            }
        }
        link.writer_pending.fetch_add(1, Ordering::Release);
        // At most CONN_INFLIGHT_MAX replies are owed to a connection: never full.
        let _ = link.replies.send(Reply {
            buf,
            with_data,
            sent_bytes,
        });
    }
}

/// The member a redundant volume has failed, found in its statistics (raid5's `failed_member`,
/// under any wrapper). Called only after a member error.
fn failed_member(stats: &serde_json::Value) -> Option<u32> {
    match stats {
        serde_json::Value::Object(o) => {
            if let Some(m) = o.get("failed_member").and_then(serde_json::Value::as_u64) {
                return u32::try_from(m).ok();
            }
            o.values().find_map(failed_member)
        }
        serde_json::Value::Array(a) => a.iter().find_map(failed_member),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_member_is_found_under_wrappers() {
        let v = serde_json::json!({"failed_member": null, "x": 1});
        assert_eq!(failed_member(&v), None);
        let v = serde_json::json!({"inner": {"failed_member": 2}});
        assert_eq!(failed_member(&v), Some(2));
        let v = serde_json::json!([{"a": 1}, {"failed_member": 0}]);
        assert_eq!(failed_member(&v), Some(0));
    }

    #[test]
    fn large_buffers_are_charged_to_the_budget_and_given_back() {
        let budget = 1u64 << 40;
        let mut a = IoBuf::new();
        assert!(a.charge(4096, 0), "small buffers are never charged");
        assert!(a.charge(8 << 20, budget));
        assert_eq!(a.charged_bytes, 8 << 20);
        let mut b = IoBuf::new();
        // Over what is left of a budget: refused, nothing charged.
        let left = budget - BIG_BUF_BYTES.load(Ordering::Acquire);
        assert!(!b.charge(left + 1, budget));
        assert_eq!(b.charged_bytes, 0);
        a.set_len(8 << 20);
        a.recycle();
        assert_eq!(a.charged_bytes, 0, "recycling gives the charge back");
        assert!(b.charge(2 << 20, budget));
        assert_eq!(b.charged_bytes, 2 << 20);
        drop(b);
    }

    /// A server whose large-buffer budget is 3 MiB: a 2 MiB write is served, a 4 MiB one is
    /// refused ENOMEM with its payload consumed (the next request is answered in step), and a
    /// 48 MiB read (over the 32 MiB volume I/O: served in two pieces) comes back whole once
    /// the budget allows it.
    #[test]
    fn the_buffer_budget_refuses_what_it_cannot_hold_and_large_requests_are_served_in_pieces() {
        use std::os::unix::fs::FileExt;
        use std::os::unix::net::UnixStream;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m0");
        let size = 64u64 << 20;
        let mut content: Vec<u8> = (0..size).map(|i| (i / 4096 * 7 + i) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let vol = nines_array::build(
            &nines_array::LayoutSpec::Independent,
            &nines_array::VolumeParams {
                member_sizes_bytes: &[size],
                block_bytes: 512,
                tags: TAGS,
                len_bytes_max: VOL_IO_MAX_BYTES,
            },
        )
        .unwrap();
        let export = Export {
            name: "t".into(),
            description: String::new(),
            size_bytes: size,
            block_min_bytes: 512,
            block_preferred_bytes: 4096,
            payload_max_bytes: PAYLOAD_MAX_BYTES,
            read_only: false,
            fast_zero: false,
        };
        let config = ServeConfig {
            buffer_budget_bytes: 3 << 20,
            ..ServeConfig::default()
        };
        let members = Members {
            files: vec![Some(file.try_clone().unwrap())],
            emu: Vec::new(),
            block_device: vec![false],
            zoned: Vec::new(),
            names: vec!["m0".into()],
            on_failed: None,
        };
        let mut server = Server::start(vol, members, export, ServeLogs::default(), config).unwrap();
        let (mut c, theirs) = UnixStream::pair().unwrap();
        server.accept(Box::new(theirs)).unwrap();
        let mut g = [0u8; 18];
        c.read_exact(&mut g).unwrap();
        c.write_all(&3u32.to_be_bytes()).unwrap();
        c.write_all(b"IHAVEOPT").unwrap();
        c.write_all(&1u32.to_be_bytes()).unwrap();
        c.write_all(&0u32.to_be_bytes()).unwrap();
        let mut r = [0u8; 10];
        c.read_exact(&mut r).unwrap();
        let request = |kind: u16, cookie: u64, off: u64, len: u32| {
            let mut b = [0u8; 28];
            b[..4].copy_from_slice(&0x2560_9513u32.to_be_bytes());
            b[6..8].copy_from_slice(&kind.to_be_bytes());
            b[8..16].copy_from_slice(&cookie.to_be_bytes());
            b[16..24].copy_from_slice(&off.to_be_bytes());
            b[24..28].copy_from_slice(&len.to_be_bytes());
            b
        };
        let reply = |c: &mut UnixStream| {
            let mut r = [0u8; 16];
            c.read_exact(&mut r).unwrap();
            (
                u32::from_be_bytes(r[4..8].try_into().unwrap()),
                u64::from_be_bytes(r[8..].try_into().unwrap()),
            )
        };
        c.write_all(&request(1, 1, 0, 2 << 20)).unwrap();
        c.write_all(&vec![0xaa; 2 << 20]).unwrap();
        assert_eq!(reply(&mut c), (0, 1), "2 MiB fits the budget");
        content[..2 << 20].fill(0xaa);
        c.write_all(&request(1, 2, 8 << 20, 4 << 20)).unwrap();
        c.write_all(&vec![0xbb; 4 << 20]).unwrap();
        assert_eq!(reply(&mut c), (nbd::consts::ENOMEM, 2), "4 MiB does not");
        c.write_all(&request(0, 3, 0, 4096)).unwrap();
        assert_eq!(reply(&mut c), (0, 3), "in step after the refusal");
        let mut back = vec![0u8; 4096];
        c.read_exact(&mut back).unwrap();
        assert!(back.iter().all(|&b| b == 0xaa));
        let mut on_disk = vec![0u8; 4 << 20];
        file.read_exact_at(&mut on_disk, 8 << 20).unwrap();
        assert!(
            on_disk == content[8 << 20..12 << 20],
            "the refused write changed data"
        );
        server.stop();
        // A budget that holds it: a 48 MiB read in two volume pieces, every byte in place.
        let vol = nines_array::build(
            &nines_array::LayoutSpec::Independent,
            &nines_array::VolumeParams {
                member_sizes_bytes: &[size],
                block_bytes: 512,
                tags: TAGS,
                len_bytes_max: VOL_IO_MAX_BYTES,
            },
        )
        .unwrap();
        let members = Members {
            files: vec![Some(file.try_clone().unwrap())],
            emu: Vec::new(),
            block_device: vec![false],
            zoned: Vec::new(),
            names: vec!["m0".into()],
            on_failed: None,
        };
        let export = Export {
            name: "t".into(),
            description: String::new(),
            size_bytes: size,
            block_min_bytes: 512,
            block_preferred_bytes: 4096,
            payload_max_bytes: PAYLOAD_MAX_BYTES,
            read_only: false,
            fast_zero: false,
        };
        let mut server = Server::start(
            vol,
            members,
            export,
            ServeLogs::default(),
            ServeConfig::default(),
        )
        .unwrap();
        let (mut c, theirs) = UnixStream::pair().unwrap();
        server.accept(Box::new(theirs)).unwrap();
        c.read_exact(&mut g).unwrap();
        c.write_all(&3u32.to_be_bytes()).unwrap();
        c.write_all(b"IHAVEOPT").unwrap();
        c.write_all(&1u32.to_be_bytes()).unwrap();
        c.write_all(&0u32.to_be_bytes()).unwrap();
        c.read_exact(&mut r).unwrap();
        let len = 48usize << 20;
        c.write_all(&request(0, 4, 4096 + 512, len as u32)).unwrap();
        assert_eq!(reply(&mut c), (0, 4));
        let mut back = vec![0u8; len];
        c.read_exact(&mut back).unwrap();
        assert!(back == content[4608..4608 + len], "a 48 MiB read differs");
        drop(c);
        let out = server.stop();
        assert_eq!(out.recorder.dir(Op::Read).ios, 1);
    }

    #[test]
    fn io_buf_grows_only_when_needed_and_gives_big_buffers_back() {
        let mut b = IoBuf::new();
        let p = b.data.as_ptr();
        b.set_len(4096);
        assert_eq!(b.data.as_ptr(), p, "a page fits the first buffer");
        b.set_len(65536);
        assert_eq!(b.bytes().len(), 65536);
        assert_eq!(b.data.as_ptr() as usize % BUF_ALIGN_BYTES, 0);
        let p = b.data.as_ptr();
        b.recycle();
        b.set_len(512);
        assert_eq!(b.data.as_ptr(), p, "64 KiB is kept");
        b.set_len(2 << 20);
        b.recycle();
        assert_eq!(b.data.len(), BUF_ALIGN_BYTES, "2 MiB is given back");
    }
}
