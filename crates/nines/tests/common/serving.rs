//! A `nines serve` run by a test (serve_nbd, serve_conn, serve_tls, serve_raid): started on a
//! Unix socket or a loopback port, its stderr kept in `serve.err` (shown when the test fails),
//! stopped by SIGTERM or kill -9, killed on drop; and the NBD clients it is tested against.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_nines");

/// The nines binary to serve with: `NINES` when set (bench scripts run a release build), else
/// the one cargo built for the tests.
pub fn bin() -> std::ffi::OsString {
    std::env::var_os("NINES").unwrap_or_else(|| BIN.into())
}

/// An installed program (an NBD client); a missing one fails the test, it never skips.
pub fn tool(name: &str) -> Command {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .expect("sh");
    assert!(
        found.status.success(),
        "{name} is missing: run scripts/setup.sh (it installs the NBD clients these tests use)"
    );
    Command::new(name)
}

/// A `nines serve`; killed on drop (its stderr shown when the test fails).
pub struct Serving {
    child: Option<Child>,
    pub socket: PathBuf,
    /// Listening on this TCP port of 127.0.0.1 instead of the socket.
    pub port: Option<u16>,
    pub err: PathBuf,
}

/// Whether a Unix socket is bound at `path` and listening (/proc/net/unix: flags
/// `__SO_ACCEPTCON`), found without connecting to it, so the server counts no connection.
fn unix_listening(path: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/unix") else {
        return path.exists();
    };
    let want = path.to_string_lossy();
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 8 && f[7] == want && f[3] == "00010000"
    })
}

impl Serving {
    /// On a Unix socket `dir/nbd.sock`, once it listens.
    pub fn start(dir: &Path, args: &[&str]) -> Serving {
        let socket = dir.join("nbd.sock");
        let _ = std::fs::remove_file(&socket);
        let mut s = Serving {
            child: Some(spawn(dir, &["--socket", socket.to_str().unwrap()], args)),
            socket,
            port: None,
            err: dir.join("serve.err"),
        };
        let socket = s.socket.clone();
        s.wait_until(args, || unix_listening(&socket));
        s
    }

    /// On a Unix socket `dir/nbd.sock`, not waiting for it to listen (a test that kills the
    /// server during its start).
    pub fn spawn(dir: &Path, args: &[&str]) -> Serving {
        let socket = dir.join("nbd.sock");
        let _ = std::fs::remove_file(&socket);
        Serving {
            child: Some(spawn(dir, &["--socket", socket.to_str().unwrap()], args)),
            socket,
            port: None,
            err: dir.join("serve.err"),
        }
    }

    /// [`Serving::start`], or the server's stderr when it exits first (a refusal).
    pub fn try_start(dir: &Path, args: &[&str]) -> Result<Serving, String> {
        let mut s = Serving::spawn(dir, args);
        let t0 = Instant::now();
        while !unix_listening(&s.socket) {
            if let Some(st) = s.child.as_mut().unwrap().try_wait().unwrap() {
                s.child = None;
                return Err(format!("exited ({st}): {}", s.stderr()));
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "nines serve never listened: {}",
                s.stderr()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(s)
    }

    /// SIGTERM, then SIGKILL `after` it unless it exited first: whether it did.
    pub fn term_then_kill(self, after: Duration) -> bool {
        self.term_then_kill_when(after, || false)
    }

    /// SIGTERM, then SIGKILL as soon as `now()` says so, or `limit` after it, unless it
    /// exited first: whether it did.
    pub fn term_then_kill_when(mut self, limit: Duration, mut now: impl FnMut() -> bool) -> bool {
        let mut c = self.child.take().unwrap();
        let t0 = Instant::now();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        while t0.elapsed() < limit && !now() {
            if c.try_wait().unwrap().is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        let _ = c.kill();
        c.wait().unwrap();
        false
    }

    /// On a TCP port of 127.0.0.1 (libnbd verifies a server's certificate against its name
    /// only over TCP: a Unix socket has no host name).
    pub fn start_tcp(dir: &Path, args: &[&str]) -> Serving {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let mut s = Serving {
            child: Some(spawn(dir, &["--listen", &addr], args)),
            socket: PathBuf::new(),
            port: Some(port),
            err: dir.join("serve.err"),
        };
        s.wait_until(args, || std::net::TcpStream::connect(&addr).is_ok());
        s
    }

    /// Waits (at most 30 s) for `ready`; a server that exits first fails the test with its
    /// stderr.
    fn wait_until(&mut self, args: &[&str], ready: impl Fn() -> bool) {
        let t0 = Instant::now();
        while !ready() {
            let child = self.child.as_mut().unwrap();
            if let Some(st) = child.try_wait().unwrap() {
                self.child = None;
                panic!("nines serve {args:?} exited ({st}): {}", self.stderr());
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "nines serve never listened: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The plain URI of the default export (`nbd+unix` or `nbd`).
    pub fn uri(&self) -> String {
        self.uri_with("nbd", "", "nines", "")
    }

    /// A libnbd URI: `scheme` nbd or nbds (+unix added for a socket), `user` with its `@`.
    pub fn uri_with(&self, scheme: &str, user: &str, export: &str, query: &str) -> String {
        match self.port {
            Some(port) => format!("{scheme}://{user}localhost:{port}/{export}?{query}"),
            None => format!(
                "{scheme}+unix://{user}/{export}?socket={}{}{query}",
                self.socket.display(),
                if query.is_empty() { "" } else { "&" }
            ),
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Waits (at most 5 s) for `needle` on the server's stderr.
    pub fn wait_stderr(&self, needle: &str) {
        let t0 = Instant::now();
        while !self.stderr().contains(needle) {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "{needle:?} never on stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the exit status.
    pub fn stop(mut self) -> ExitStatus {
        let mut c = self.child.take().unwrap();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let st = c.wait().unwrap();
        if !st.success() {
            eprintln!("nines serve's stderr:\n{}", self.stderr());
        }
        st
    }

    /// SIGTERM; the server must exit successfully.
    pub fn stop_ok(self) {
        let err = self.err.clone();
        let st = self.stop();
        assert!(
            st.success(),
            "nines serve failed at stop: {}",
            std::fs::read_to_string(err).unwrap_or_default()
        );
    }

    /// SIGTERM, then waits at most `limit`: the exit status and how long it took, or None
    /// (the server is killed then).
    pub fn sigterm_within(mut self, limit: Duration) -> Option<(ExitStatus, Duration)> {
        let mut c = self.child.take().unwrap();
        let t0 = Instant::now();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        while t0.elapsed() < limit {
            if let Some(st) = c.try_wait().unwrap() {
                return Some((st, t0.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = c.kill();
        let _ = c.wait();
        eprintln!("nines serve's stderr:\n{}", self.stderr());
        None
    }

    pub fn kill9(mut self) {
        let mut c = self.child.take().unwrap();
        c.kill().unwrap();
        c.wait().unwrap();
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("nines serve's stderr:\n{}", self.stderr());
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn(dir: &Path, listen: &[&str], args: &[&str]) -> Child {
    Command::new(bin())
        .arg("serve")
        .args(listen)
        .args(args)
        .current_dir(dir)
        .stderr(std::fs::File::create(dir.join("serve.err")).unwrap())
        .spawn()
        .expect("spawn nines serve")
}

/// A TCP port of 127.0.0.1 free now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
