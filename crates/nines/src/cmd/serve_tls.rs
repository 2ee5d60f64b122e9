//! TLS for `nines serve` (NBD_OPT_STARTTLS), as nbdkit and qemu-nbd offer it: X.509
//! certificates from a directory (`ca-cert.pem`, `server-cert.pem`, `server-key.pem`, the names
//! qemu-nbd and nbdkit use) or pre-shared keys from a psktool file (`username:hexkey`). OpenSSL
//! runs the session: rustls has no server side for external PSKs, which GnuTLS clients
//! (libnbd, qemu) use.
//!
//! The data plane (nines-io's serve) moves plain bytes over a socket that reader, writer and
//! core use independently (the core sends replies on its descriptor). A TLS session cannot be
//! shared that way, so each TLS connection gets a socket pair: the server speaks plain NBD on
//! one end, and a pump thread moves bytes between the other end and the TLS session on the
//! client's socket (non-blocking, with poll). Shutting the client's socket down (the stop does)
//! ends the pump, which closes its end of the pair, so TLS never holds a stop up.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use nines_io::serve::{Conn, TlsUpgrade};
use nines_nbd::psk::PskKeys;
use openssl::pkey::PKey;
use openssl::ssl::{
    ErrorCode, HandshakeError, SslAcceptor, SslMethod, SslStream, SslVerifyMode, SslVersion,
};

/// Bytes moved per read in each direction of the pump.
const PUMP_BUF_BYTES: usize = 256 << 10;
/// The pump's poll timeout: a guard only (every wake-up it needs comes from a descriptor).
const PUMP_POLL_MS: i32 = 1000;
/// TLS 1.2 PSK cipher suites (GnuTLS clients offer ECDHE-PSK, DHE-PSK and PSK with AES-GCM
/// or AES-CBC); TLS 1.3 uses OpenSSL's default suites, with the PSK found by the same callback.
const PSK_CIPHERS_TLS12: &str = "ECDHE-PSK-AES256-CBC-SHA384:ECDHE-PSK-AES128-CBC-SHA256:\
    DHE-PSK-AES256-GCM-SHA384:DHE-PSK-AES128-GCM-SHA256:PSK-AES256-GCM-SHA384:PSK-AES128-GCM-SHA256";

/// Where the server's TLS credentials come from.
#[derive(Debug, Clone)]
pub enum Credentials {
    /// A directory with server-cert.pem and server-key.pem (and ca-cert.pem, for
    /// `verify_peer`).
    X509 { dir: PathBuf, verify_peer: bool },
    /// A psktool file.
    Psk { file: PathBuf },
}

/// TLS handshakes refused so far (logged the 1st, 2nd, 4th, 8th... time: a client retrying a
/// wrong key cannot flood stderr).
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// The TLS side of `nines serve`: an OpenSSL acceptor built once from the credentials.
pub struct OpensslTls {
    acceptor: SslAcceptor,
}

impl OpensslTls {
    /// Reads and checks the credentials (a missing or mismatched file is an error that names
    /// it, before the server listens).
    pub fn new(creds: &Credentials) -> anyhow::Result<OpensslTls> {
        let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server())
            .context("cannot set up OpenSSL")?;
        b.set_min_proto_version(Some(SslVersion::TLS1_2))
            .context("cannot set up OpenSSL")?;
        match creds {
            Credentials::X509 { dir, verify_peer } => {
                let f = |name: &str| dir.join(name);
                let need = |p: &Path| -> anyhow::Result<()> {
                    if !p.is_file() {
                        bail!(
                            "--tls-certificates: {} is missing; the directory needs server-cert.pem and server-key.pem (and ca-cert.pem for --tls-verify-peer), as qemu-nbd and nbdkit name them",
                            p.display()
                        );
                    }
                    Ok(())
                };
                let (cert, key, ca) = (f("server-cert.pem"), f("server-key.pem"), f("ca-cert.pem"));
                need(&cert)?;
                need(&key)?;
                b.set_certificate_chain_file(&cert).with_context(|| {
                    format!(
                        "--tls-certificates: {} is not a PEM certificate",
                        cert.display()
                    )
                })?;
                let pem = std::fs::read(&key).with_context(|| {
                    format!("--tls-certificates: cannot read {}", key.display())
                })?;
                let pkey = PKey::private_key_from_pem(&pem).with_context(|| {
                    format!(
                        "--tls-certificates: {} is not a PEM private key",
                        key.display()
                    )
                })?;
                b.set_private_key(&pkey)
                    .and_then(|()| b.check_private_key())
                    .with_context(|| {
                        format!(
                            "--tls-certificates: {} does not match {}; give the key the certificate was made for",
                            key.display(),
                            cert.display()
                        )
                    })?;
                if *verify_peer {
                    need(&ca)?;
                    b.set_ca_file(&ca).with_context(|| {
                        format!(
                            "--tls-certificates: {} is not a PEM certificate",
                            ca.display()
                        )
                    })?;
                    b.set_verify(SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT);
                }
            }
            Credentials::Psk { file } => {
                // Bounded and of a readable kind: a device node such as /dev/zero never ends.
                let text = nines_core::input::read_to_string(file, 1 << 20)
                    .with_context(|| format!("--tls-psk: cannot read {}", file.display()))?;
                let keys = PskKeys::parse(&text)
                    .with_context(|| format!("--tls-psk: {}", file.display()))?;
                b.set_cipher_list(PSK_CIPHERS_TLS12)
                    .context("--tls-psk: OpenSSL offers no PSK cipher suite")?;
                b.set_psk_server_callback(move |_ssl, identity, out| {
                    // An unknown identity or a key too large gets 0: the handshake fails.
                    Ok(identity
                        .and_then(|id| keys.key(id))
                        .filter(|k| k.len() <= out.len())
                        .map_or(0, |k| {
                            out[..k.len()].copy_from_slice(k);
                            k.len()
                        }))
                });
            }
        }
        Ok(OpensslTls {
            acceptor: b.build(),
        })
    }
}

/// The client's socket, read and written before the handshake's deadline while it runs
/// (the socket's timeouts are set to what is left before each call), then non-blocking.
struct Sock {
    conn: Box<dyn Conn>,
    deadline: Option<Instant>,
}

impl Sock {
    fn arm(&self) -> io::Result<()> {
        if let Some(d) = self.deadline {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "TLS handshake timed out",
                ));
            }
            self.conn.set_timeouts(Some(left))?;
        }
        Ok(())
    }

    fn timed_out(&self, e: io::Error) -> io::Error {
        // A blocking socket's timeout reads as WouldBlock: during the handshake it is the
        // deadline (OpenSSL would otherwise take it for "try again").
        if self.deadline.is_some() && e.kind() == io::ErrorKind::WouldBlock {
            io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out")
        } else {
            e
        }
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.arm()?;
        self.conn.read(buf).map_err(|e| self.timed_out(e))
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.arm()?;
        self.conn.write(buf).map_err(|e| self.timed_out(e))
    }
    fn flush(&mut self) -> io::Result<()> {
        self.conn.flush()
    }
}

impl TlsUpgrade for OpensslTls {
    fn start_tls(&self, conn: Box<dyn Conn>, deadline: Instant) -> io::Result<Box<dyn Conn>> {
        let raw = conn.raw_fd();
        let sock = Sock {
            conn,
            deadline: Some(deadline),
        };
        let mut tls = match self.acceptor.accept(sock) {
            Ok(s) => s,
            Err(e) => {
                let why = match &e {
                    HandshakeError::SetupFailure(s) => s.to_string(),
                    HandshakeError::Failure(m) | HandshakeError::WouldBlock(m) => {
                        m.error().to_string()
                    }
                };
                let n = REFUSED.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    eprintln!(
                        "nines: TLS handshake with a client failed ({n} so far): {}",
                        one_line(&why)
                    );
                }
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "TLS handshake failed",
                ));
            }
        };
        tls.get_mut().deadline = None;
        tls.get_ref().conn.set_timeouts(None)?;
        set_nonblocking(raw, true)?;
        let (inner, outer) = UnixStream::pair()?;
        outer.set_nonblocking(true)?;
        std::thread::Builder::new()
            .name("nines-tls".into())
            .spawn(move || pump(tls, raw, outer))?;
        Ok(Box::new(inner))
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn set_nonblocking(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor the caller holds open.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let flags = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A buffer of bytes read and not yet written on.
struct Pending {
    buf: Vec<u8>,
    at: usize,
    len: usize,
}

impl Pending {
    fn new() -> Pending {
        Pending {
            buf: vec![0; PUMP_BUF_BYTES],
            at: 0,
            len: 0,
        }
    }
    fn is_empty(&self) -> bool {
        self.at == self.len
    }
}

/// Moves bytes between the TLS session on the client's socket (`raw`) and the plain end of
/// the pair, until both directions are closed or the client's socket fails. The client's
/// end of the stream (close_notify, EOF, an error) shuts the pair's write side, so the reader
/// sees the client leave; the server's end (the writer shutting its socket once every reply
/// is out) sends close_notify and shuts the client's socket for writing.
fn pump(mut tls: SslStream<Sock>, raw: RawFd, plain: UnixStream) {
    let mut down = Pending::new(); // client -> server: requests
    let mut up = Pending::new(); // server -> client: replies
    let mut client_open = true;
    let mut server_open = true;
    let plain_fd = plain.as_raw_fd();
    loop {
        let mut progress = false;
        let (mut raw_ev, mut plain_ev) = (0i16, 0i16);
        if down.is_empty() && client_open {
            match tls.ssl_read(&mut down.buf) {
                Ok(n) if n > 0 => {
                    (down.at, down.len) = (0, n);
                    progress = true;
                }
                Err(e) if e.code() == ErrorCode::WANT_READ => raw_ev |= libc::POLLIN,
                Err(e) if e.code() == ErrorCode::WANT_WRITE => raw_ev |= libc::POLLOUT,
                // close_notify, EOF, a read side shut by the stop, or a broken session.
                _ => {
                    client_open = false;
                    let _ = plain.shutdown(std::net::Shutdown::Write);
                    progress = true;
                }
            }
        }
        if !down.is_empty() {
            match (&plain).write(&down.buf[down.at..down.len]) {
                Ok(n) => {
                    down.at += n;
                    progress = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => plain_ev |= libc::POLLOUT,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The server closed the connection's reading side: drop the client's bytes.
                Err(_) => {
                    down.at = down.len;
                    client_open = false;
                    progress = true;
                }
            }
        }
        if up.is_empty() && server_open {
            match (&plain).read(&mut up.buf) {
                Ok(0) => {
                    server_open = false;
                    progress = true;
                }
                Ok(n) => {
                    (up.at, up.len) = (0, n);
                    progress = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => plain_ev |= libc::POLLIN,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    server_open = false;
                    progress = true;
                }
            }
        }
        if !up.is_empty() {
            match tls.ssl_write(&up.buf[up.at..up.len]) {
                Ok(n) => {
                    up.at += n;
                    progress = true;
                }
                Err(e) if e.code() == ErrorCode::WANT_WRITE => raw_ev |= libc::POLLOUT,
                Err(e) if e.code() == ErrorCode::WANT_READ => raw_ev |= libc::POLLIN,
                // The client is gone or the stop shut its socket: the pair closes with us,
                // so the server's writer fails and returns its credits.
                Err(_) => return,
            }
        }
        if !server_open && up.is_empty() {
            // Every reply is out: tell the client the session ends, then end it.
            let _ = tls.shutdown();
            // SAFETY: shutdown(2) on the client's socket, which the connection still holds.
            unsafe { libc::shutdown(raw, libc::SHUT_WR) };
            return;
        }
        if progress {
            continue;
        }
        let mut fds = [
            libc::pollfd {
                fd: raw,
                events: raw_ev,
                revents: 0,
            },
            libc::pollfd {
                fd: plain_fd,
                events: plain_ev,
                revents: 0,
            },
        ];
        // SAFETY: two pollfds on descriptors alive for the call.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, PUMP_POLL_MS) };
    }
}
