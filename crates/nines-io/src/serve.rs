//! `nines serve`: one array volume served over NBD (docs/arch-serve.md).
//!
//! Threads and queues (every queue bounded):
//! - one *connection reader* per client: the handshake (nines-nbd decides every answer), then
//!   request headers and write payloads; each request takes a credit from its connection's
//!   credit queue ([`CONN_INFLIGHT_MAX`]) before it goes to the core, so a client never has more
//!   than that many requests in the server;
//! - the *core*: owns the [`VolumeHost`] exactly as the profile worker does; client requests and
//!   member completions arrive on one bounded inbox; member commands go to the I/O pool, replies
//!   to their connection's writer; each request is answered when the volume completes it, so
//!   replies leave in completion order (by cookie), and a slow request never holds a fast one;
//! - the *I/O pool*: member commands as pread/pwrite/fdatasync/fallocate on the members;
//! - one *connection writer* per client: reply header and data, then the credit back.
//!
//! FLUSH is a volume flush (every member fdatasync'd after every write completed before it, from
//! any connection: CAN_MULTI_CONN); FUA writes are fdatasync'd on their members before they
//! complete.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender, channel, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use nines_array::{
    AnyVolume, BufRef, CmdDone, CmdOp, CmdResult, IoResult, MemberCmd, Output, VolIo, VolOp,
    Volume, VolumeHost,
};
use nines_core::op::Op;
use nines_core::stats::DeviceRecorder;
use nines_nbd::{self as nbd, CmdKind, Command, Export, OptOutcome};

use crate::clock::now_ns;
use crate::data::PtrData;

/// Requests one connection may have inside the server at once.
pub const CONN_INFLIGHT_MAX: usize = 64;
/// Volume I/Os in flight at once (the volume's tags).
pub const TAGS: u32 = 128;
/// Threads executing member commands.
pub const IO_THREADS: usize = 8;
/// The largest request payload (NBD_INFO_BLOCK_SIZE maximum).
pub const PAYLOAD_MAX_BYTES: u32 = 32 << 20;
/// Client connections served at once; more are closed at once.
pub const CONNS_MAX: usize = 64;

/// A stream a client talks over (Unix or TCP).
pub trait Conn: Read + Write + Send + 'static {
    fn try_clone_conn(&self) -> io::Result<Box<dyn Conn>>;
    fn shutdown_both(&self);
    fn shutdown_read(&self);
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
}

/// One reply on its way to a writer.
struct Reply {
    header: Vec<u8>,
    /// A read's data (the client buffer, moved out of the core).
    data: Option<(Vec<u8>, usize)>,
}

enum Msg {
    Request {
        conn: usize,
        cmd: Command,
        payload: Vec<u8>,
        received_ns: u64,
    },
    Refused {
        conn: usize,
        cookie: u64,
        errno: u32,
    },
    Connected {
        conn: usize,
        replies: SyncSender<Reply>,
        structured: bool,
    },
    Gone {
        conn: usize,
    },
    Member(CmdDone),
    Shutdown,
}

/// The member files of the served volume.
pub struct Members {
    pub files: Vec<File>,
    pub block_device: Vec<bool>,
}

/// What the server counted, for the report.
pub struct ServeOutcome {
    pub recorder: DeviceRecorder,
    pub flushes: u64,
    pub trims: u64,
    pub write_zeroes: u64,
    pub refused: u64,
    pub connections: u64,
    pub member_cmds: Vec<u64>,
    pub member_errors: Vec<u64>,
    pub volume_stats: serde_json::Value,
}

/// A handle to a running server: hand it connections, then stop it.
pub struct Server {
    inbox: Sender<Msg>,
    export: Arc<Export>,
    next_conn: usize,
    core: Option<thread::JoinHandle<ServeOutcome>>,
    pool: Vec<thread::JoinHandle<()>>,
    cmd_tx: Option<Sender<PoolCmd>>,
    /// Each connection's reader and a handle to shut its socket down at stop.
    readers: Vec<(thread::JoinHandle<()>, Box<dyn Conn>)>,
}

struct PoolCmd {
    member: usize,
    id: u32,
    op: CmdOp,
    offset_bytes: u64,
    len_bytes: u32,
    ptr: usize,
    fua: bool,
}

impl Server {
    /// Starts the core and the I/O pool over `vol` on `members`.
    pub fn start(vol: AnyVolume, members: Members, export: Export) -> Server {
        // Unbounded channels with bounds by construction: a connection has at most
        // CONN_INFLIGHT_MAX requests in the server (credits), there are at most CONNS_MAX
        // connections, and member commands in flight are at most the volume's cmds_max. (Bounded
        // channels both ways between the core and the pool could deadlock.)
        let (inbox, rx) = channel::<Msg>();
        let (cmd_tx, cmd_rx) = channel::<PoolCmd>();
        let cmd_rx = Arc::new(Mutex::new(cmd_rx));
        let files: Arc<Vec<(File, bool)>> = Arc::new(
            members
                .files
                .into_iter()
                .zip(members.block_device)
                .collect(),
        );
        let pool = (0..IO_THREADS)
            .map(|_| {
                let rx = Arc::clone(&cmd_rx);
                let done = inbox.clone();
                let files = Arc::clone(&files);
                thread::spawn(move || pool_thread(&rx, &done, &files))
            })
            .collect();
        let core_cmd_tx = cmd_tx.clone();
        let core = thread::spawn(move || Core::new(vol, core_cmd_tx).run(rx));
        Server {
            inbox,
            export: Arc::new(export),
            next_conn: 0,
            core: Some(core),
            pool,
            cmd_tx: Some(cmd_tx),
            readers: Vec::new(),
        }
    }

    /// Serves one client connection (handshake and transmission on threads of its own).
    pub fn accept(&mut self, conn: Box<dyn Conn>) -> io::Result<()> {
        self.readers.retain(|(r, _)| !r.is_finished());
        if self.readers.len() >= CONNS_MAX {
            conn.shutdown_both();
            return Ok(());
        }
        let id = self.next_conn;
        self.next_conn += 1;
        let writer = conn.try_clone_conn()?;
        let handle = conn.try_clone_conn()?;
        let inbox = self.inbox.clone();
        let export = Arc::clone(&self.export);
        let shut = conn.try_clone_conn()?;
        let r = thread::spawn(move || {
            // A protocol violation, a client gone, or an option phase ended by the client:
            // close now (other handles to the socket would keep it open). After DISC the
            // writer closes once every reply is out.
            if reader(id, conn, writer, &inbox, &export).is_err() {
                shut.shutdown_both();
            }
            let _ = inbox.send(Msg::Gone { conn: id });
        });
        self.readers.push((r, handle));
        Ok(())
    }

    /// Stops reading new requests, finishes those in flight, flushes the volume, and returns
    /// what was counted.
    pub fn stop(mut self) -> ServeOutcome {
        // Readers stop at once (a request whose header was read but not its payload is
        // dropped unanswered, as a client's disconnect would); requests already in the core
        // are finished, and the volume flushed, before the core returns.
        for (_, c) in &self.readers {
            c.shutdown_read();
        }
        for (r, _) in self.readers.drain(..) {
            let _ = r.join();
        }
        let _ = self.inbox.send(Msg::Shutdown);
        let outcome = self
            .core
            .take()
            .expect("core joined once")
            .join()
            .expect("the serve core panicked");
        drop(self.cmd_tx.take());
        drop(self.inbox);
        for p in self.pool.drain(..) {
            let _ = p.join();
        }
        outcome
    }
}

/// The handshake, then requests until the client disconnects or breaks the protocol.
fn reader(
    id: usize,
    mut conn: Box<dyn Conn>,
    writer: Box<dyn Conn>,
    inbox: &Sender<Msg>,
    export: &Export,
) -> io::Result<()> {
    conn.write_all(&nbd::greeting())?;
    let mut flags = [0u8; 4];
    conn.read_exact(&mut flags)?;
    let client = nbd::client_flags(flags).map_err(io::Error::other)?;
    let mut neg = nbd::Negotiation::new(client);
    let mut data = Vec::with_capacity(nbd::consts::OPT_DATA_MAX as usize);
    let mut out = Vec::new();
    loop {
        let mut h = [0u8; nbd::consts::OPT_HEADER_BYTES];
        conn.read_exact(&mut h)?;
        let h = nbd::OptHeader::parse(&h).map_err(io::Error::other)?;
        out.clear();
        if h.too_big() {
            io::copy(
                &mut (&mut conn).take(u64::from(h.len_bytes)),
                &mut io::sink(),
            )?;
            nbd::too_big_reply(h.option, &mut out);
            conn.write_all(&out)?;
            continue;
        }
        data.resize(h.len_bytes as usize, 0);
        conn.read_exact(&mut data)?;
        let outcome = neg.option(h.option, &data, export, &mut out);
        conn.write_all(&out)?;
        match outcome {
            OptOutcome::Continue => {}
            OptOutcome::Close => {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "option phase ended",
                ));
            }
            OptOutcome::Transmit => break,
        }
    }
    let structured = neg.structured;
    let (reply_tx, reply_rx) = sync_channel::<Reply>(CONN_INFLIGHT_MAX);
    let (credit_tx, credit_rx) = sync_channel::<()>(CONN_INFLIGHT_MAX);
    for _ in 0..CONN_INFLIGHT_MAX {
        credit_tx
            .send(())
            .expect("credit queue sized for every credit");
    }
    let w = thread::spawn(move || writer_thread(writer, &reply_rx, &credit_tx));
    send(
        inbox,
        Msg::Connected {
            conn: id,
            replies: reply_tx,
            structured,
        },
    )?;
    let result = transmit(id, &mut conn, inbox, export, &credit_rx);
    let _ = w; // the writer ends when the core drops this connection's reply queue
    result
}

fn send(inbox: &Sender<Msg>, m: Msg) -> io::Result<()> {
    inbox
        .send(m)
        .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "server stopping"))
}

fn transmit(
    id: usize,
    conn: &mut Box<dyn Conn>,
    inbox: &Sender<Msg>,
    export: &Export,
    credits: &Receiver<()>,
) -> io::Result<()> {
    loop {
        let mut h = [0u8; nbd::consts::REQUEST_BYTES];
        conn.read_exact(&mut h)?;
        let received_ns = now_ns();
        let raw = nbd::RawRequest::parse(&h).map_err(io::Error::other)?;
        let checked = nbd::check(&raw, export).map_err(io::Error::other)?;
        let mut payload = Vec::new();
        if raw.payload_bytes() > 0 {
            payload.resize(raw.payload_bytes() as usize, 0);
            conn.read_exact(&mut payload)?;
        }
        if credits.recv().is_err() {
            return Ok(());
        }
        match checked {
            Err(r) => send(
                inbox,
                Msg::Refused {
                    conn: id,
                    cookie: r.cookie,
                    errno: r.errno,
                },
            )?,
            Ok(cmd) => {
                let disc = cmd.kind == CmdKind::Disc;
                send(
                    inbox,
                    Msg::Request {
                        conn: id,
                        cmd,
                        payload,
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

fn writer_thread(mut conn: Box<dyn Conn>, replies: &Receiver<Reply>, credits: &SyncSender<()>) {
    while let Ok(r) = replies.recv() {
        let ok = conn.write_all(&r.header).is_ok()
            && r.data
                .as_ref()
                .is_none_or(|(d, n)| conn.write_all(&d[..*n]).is_ok());
        if !ok {
            conn.shutdown_both();
            break;
        }
        let _ = credits.try_send(());
    }
    // Nothing more is owed (or the client went away): closing tells a client after DISC that
    // everything was answered.
    conn.shutdown_both();
}

fn pool_thread(rx: &Mutex<Receiver<PoolCmd>>, done: &Sender<Msg>, files: &[(File, bool)]) {
    loop {
        let cmd = match rx.lock() {
            Ok(rx) => match rx.recv() {
                Ok(c) => c,
                Err(_) => return,
            },
            Err(_) => return,
        };
        let result = match exec(&cmd, files) {
            Ok(()) => CmdResult::Ok,
            Err(e) => CmdResult::Err(e.raw_os_error().unwrap_or(libc::EIO)),
        };
        if done
            .send(Msg::Member(CmdDone { id: cmd.id, result }))
            .is_err()
        {
            return;
        }
    }
}

fn exec(c: &PoolCmd, files: &[(File, bool)]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let (f, block) = &files[c.member];
    let len = c.len_bytes as usize;
    match c.op {
        CmdOp::Read | CmdOp::FastFailRead { .. } => {
            // SAFETY: the core keeps the buffer alive and untouched until this command's
            // completion reaches it.
            let buf = unsafe { std::slice::from_raw_parts_mut(c.ptr as *mut u8, len) };
            f.read_exact_at(buf, c.offset_bytes)
        }
        CmdOp::Write => {
            // SAFETY: as above.
            let buf = unsafe { std::slice::from_raw_parts(c.ptr as *const u8, len) };
            f.write_all_at(buf, c.offset_bytes)?;
            if c.fua { f.sync_data() } else { Ok(()) }
        }
        CmdOp::Flush => f.sync_data(),
        CmdOp::Trim | CmdOp::WriteZeroes => {
            let zero = matches!(c.op, CmdOp::WriteZeroes);
            range_op(f, *block, zero, c.offset_bytes, c.len_bytes)?;
            if c.fua { f.sync_data() } else { Ok(()) }
        }
        CmdOp::Control(_) => Ok(()),
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
}

struct ConnState {
    replies: Option<SyncSender<Reply>>,
    structured: bool,
    gone: bool,
}

struct Core {
    host: VolumeHost,
    cmd_tx: Sender<PoolCmd>,
    bufs: Vec<Vec<u8>>,
    scratch: Vec<Vec<u8>>,
    ptr_client: Vec<(*mut u8, usize)>,
    ptr_scratch: Vec<(*mut u8, usize)>,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    waiting: VecDeque<(usize, Command, Vec<u8>, u64)>,
    conns: Vec<ConnState>,
    inflight_cmds: usize,
    out: ServeOutcome,
    start_ns: u64,
}

impl Core {
    fn new(vol: AnyVolume, cmd_tx: Sender<PoolCmd>) -> Core {
        let (n, len) = vol.scratch();
        let members = vol.members() as usize;
        let stats = vol.stats();
        Core {
            host: VolumeHost::new(vol, 0, members > 1),
            cmd_tx,
            bufs: (0..TAGS).map(|_| Vec::new()).collect(),
            scratch: (0..n).map(|_| vec![0u8; len as usize]).collect(),
            ptr_client: Vec::with_capacity(TAGS as usize),
            ptr_scratch: Vec::with_capacity(n as usize),
            slots: (0..TAGS).map(|_| None).collect(),
            free: (0..TAGS).rev().collect(),
            waiting: VecDeque::new(),
            conns: Vec::new(),
            inflight_cmds: 0,
            out: ServeOutcome {
                recorder: DeviceRecorder::new(),
                flushes: 0,
                trims: 0,
                write_zeroes: 0,
                refused: 0,
                connections: 0,
                member_cmds: vec![0; members],
                member_errors: vec![0; members],
                volume_stats: stats,
            },
            start_ns: now_ns(),
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
            let msg = match self.host.next_timer_ns() {
                Some(at) => {
                    let wait = at.saturating_sub(self.now());
                    match rx.recv_timeout(Duration::from_nanos(wait.max(1))) {
                        Ok(m) => Some(m),
                        Err(RecvTimeoutError::Timeout) => None,
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                None => match rx.recv() {
                    Ok(m) => Some(m),
                    Err(_) => break,
                },
            };
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
        self.out.volume_stats = self.host.volume().stats();
        let (cmds, errs) = self.host.member_counts();
        if !cmds.is_empty() {
            self.out.member_cmds = cmds.to_vec();
            self.out.member_errors = errs.to_vec();
        }
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
            match rx.recv() {
                Ok(m) => self.handle(m),
                Err(_) => break,
            }
        }
        false
    }

    /// Calls the volume with the data plane over the current buffers (the pointer tables are
    /// refilled in place: client buffers are swapped per request).
    fn with_data<R>(&mut self, f: impl FnOnce(&mut VolumeHost, &mut PtrData) -> R) -> R {
        let Core {
            host,
            bufs,
            scratch,
            ptr_client,
            ptr_scratch,
            ..
        } = self;
        ptr_client.clear();
        ptr_client.extend(bufs.iter_mut().map(|b| (b.as_mut_ptr(), b.len())));
        ptr_scratch.clear();
        ptr_scratch.extend(scratch.iter_mut().map(|b| (b.as_mut_ptr(), b.len())));
        let mut data = PtrData {
            client: ptr_client,
            scratch: ptr_scratch,
        };
        f(host, &mut data)
    }

    fn handle(&mut self, m: Msg) {
        match m {
            Msg::Connected {
                conn,
                replies,
                structured,
            } => {
                if self.conns.len() <= conn {
                    self.conns.resize_with(conn + 1, || ConnState {
                        replies: None,
                        structured: false,
                        gone: true,
                    });
                }
                self.conns[conn] = ConnState {
                    replies: Some(replies),
                    structured,
                    gone: false,
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
            } => {
                self.out.refused += 1;
                self.reply(conn, cookie, 0, errno, None);
            }
            Msg::Request {
                conn,
                cmd,
                payload,
                received_ns,
            } => {
                if cmd.kind == CmdKind::Disc {
                    // Everything before it is answered as it completes; the writer closes after
                    // the last, when the reader's Gone arrives and no slot holds the connection.
                    return;
                }
                self.waiting.push_back((conn, cmd, payload, received_ns));
                self.start_waiting();
            }
            Msg::Member(done) => {
                self.inflight_cmds -= 1;
                let now = self.now();
                self.with_data(|h, d| h.member_done(now, done, d));
                self.drain();
                self.start_waiting();
            }
            Msg::Shutdown => {}
        }
    }

    fn start_waiting(&mut self) {
        while !self.waiting.is_empty() {
            let Some(tag) = self.free.pop() else { return };
            let (conn, cmd, payload, received_ns) =
                self.waiting.pop_front().expect("checked non-empty");
            let op = match cmd.kind {
                CmdKind::Read => VolOp::Read,
                CmdKind::Write => VolOp::Write,
                CmdKind::Flush => VolOp::Flush,
                CmdKind::Trim => VolOp::Trim,
                CmdKind::WriteZeroes => VolOp::WriteZeroes,
                CmdKind::Disc => unreachable!("DISC never waits"),
            };
            let b = &mut self.bufs[tag as usize];
            if cmd.kind == CmdKind::Write {
                *b = payload;
            } else if cmd.kind == CmdKind::Read {
                b.resize(cmd.len_bytes as usize, 0);
            }
            self.slots[tag as usize] = Some(Slot {
                conn,
                cookie: cmd.cookie,
                kind: cmd.kind,
                offset_bytes: cmd.offset_bytes,
                len_bytes: cmd.len_bytes,
                received_ns,
            });
            let io = VolIo {
                tag,
                op,
                offset_bytes: cmd.offset_bytes,
                len_bytes: if op == VolOp::Flush { 0 } else { cmd.len_bytes },
                fua: cmd.fua,
            };
            let now = self.now();
            self.with_data(|h, d| h.submit(now, io, d));
            self.drain();
        }
    }

    /// Sends the volume's member commands to the pool and answers its completions.
    fn drain(&mut self) {
        while let Some(o) = self.host.pop() {
            match o {
                Output::Cmd(c) => self.send_cmd(c),
                Output::Done(d) => self.complete(d.tag, d.result),
            }
        }
    }

    fn send_cmd(&mut self, c: MemberCmd) {
        let now = self.now();
        self.host.sent(&c, now);
        let ptr = match c.buf {
            BufRef::None => 0,
            r => self.with_data(|_, d| d.ptr(r, c.len_bytes)) as usize,
        };
        self.inflight_cmds += 1;
        let cmd = PoolCmd {
            member: c.member as usize,
            id: c.id,
            op: c.op,
            offset_bytes: c.offset_bytes,
            len_bytes: c.len_bytes,
            ptr,
            fua: c.fua,
        };
        if self.cmd_tx.send(cmd).is_err() {
            // The pool is gone only after the core ended: not reachable while it runs.
            self.inflight_cmds -= 1;
        }
    }

    fn complete(&mut self, tag: u32, result: IoResult) {
        let slot = self.slots[tag as usize]
            .take()
            .expect("a volume completed a tag it was not given");
        self.free.push(tag);
        let errno = match result {
            IoResult::Ok => 0,
            IoResult::Err(e) => nbd::wire_errno(e),
        };
        let latency_ns = now_ns().saturating_sub(slot.received_ns);
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
            CmdKind::Disc => {}
        }
        if slot.conn == usize::MAX {
            return;
        }
        let data = if slot.kind == CmdKind::Read && errno == 0 {
            let b = std::mem::take(&mut self.bufs[tag as usize]);
            Some((b, slot.len_bytes as usize))
        } else {
            None
        };
        self.reply(slot.conn, slot.cookie, slot.offset_bytes, errno, data);
        self.release_if_gone(slot.conn);
    }

    /// Drops a departed connection's reply queue once nothing more is owed to it (its writer
    /// then ends).
    fn release_if_gone(&mut self, conn: usize) {
        let owed = self.slots.iter().flatten().any(|s| s.conn == conn)
            || self.waiting.iter().any(|w| w.0 == conn);
        if let Some(c) = self.conns.get_mut(conn)
            && c.gone
            && !owed
        {
            c.replies = None;
        }
    }

    fn reply(
        &mut self,
        conn: usize,
        cookie: u64,
        offset_bytes: u64,
        errno: u32,
        data: Option<(Vec<u8>, usize)>,
    ) {
        let Some(c) = self.conns.get(conn) else {
            return;
        };
        let Some(tx) = &c.replies else { return };
        let mut header = Vec::with_capacity(32);
        match &data {
            Some((_, n)) => {
                nbd::read_reply_header(&mut header, c.structured, cookie, offset_bytes, *n as u32)
            }
            None => nbd::reply(&mut header, c.structured, cookie, errno),
        }
        let _ = tx.send(Reply { header, data });
    }
}
