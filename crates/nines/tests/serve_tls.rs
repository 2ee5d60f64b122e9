//! `nines serve` with TLS (issue 30), TCP keepalive and several exports, against real clients:
//! libnbd's nbdcopy and nbdinfo over TLS-PSK (a psktool-format key file) and over X.509 with a
//! CA made here, a plain-text client refused under `--tls require`, a wrong key refused, and a
//! raw TLS client that leaves 256 replies unread while another sits in the TLS handshake, then
//! SIGTERM (the TLS pump must never hold the stop); keepalive seen on the accepted socket in
//! the kernel's table; `--exports-from-files` listed, chosen by name, written and read back.
//! A missing client fails the test (run scripts/setup.sh), it never skips.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
use openssl::x509::extension::{BasicConstraints, KeyUsage, SubjectAlternativeName};
use openssl::x509::{X509, X509NameBuilder};

use common::serving::{Serving, free_port, tool};

const BIN: &str = env!("CARGO_BIN_EXE_nines");

const REP_ACK: u32 = 1;
const REP_ERR_TLS_REQD: u32 = (1 << 31) + 5;
const OPT_STARTTLS: u32 = 5;
const OPT_GO: u32 = 7;
const OPT_EXPORT_NAME: u32 = 1;

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("spawn")
}

fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `bytes` of non-repeating data (xorshift), the same for the same seed.
fn data(bytes: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(bytes + 8);
    while v.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(bytes);
    v
}

fn sparse(dir: &Path, name: &str, size_bytes: u64) -> PathBuf {
    let p = dir.join(name);
    std::fs::File::create(&p)
        .unwrap()
        .set_len(size_bytes)
        .unwrap();
    p
}

fn disk_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("nines-tls")
        .tempdir_in("/var/tmp")
        .unwrap()
}

/// A psktool-format key file: `user:hexkey` with a key of 32 bytes from `seed`.
fn psk_file(dir: &Path, name: &str, user: &str, seed: u64) -> PathBuf {
    let hex: String = data(32, seed).iter().map(|b| format!("{b:02x}")).collect();
    let p = dir.join(name);
    std::fs::write(&p, format!("{user}:{hex}\n")).unwrap();
    p
}

#[test]
fn tls_psk_nbdcopy_round_trip_of_64_mib_and_a_wrong_key_is_refused() {
    let d = disk_dir();
    let dir = d.path();
    let size = 64usize << 20;
    let vol = sparse(dir, "vol.img", size as u64);
    let src = dir.join("src.img");
    let want = data(size, 7);
    std::fs::write(&src, &want).unwrap();
    let keys = psk_file(dir, "keys.psk", "alice", 1);
    let json = dir.join("r.json");
    let srv = Serving::start(
        dir,
        &[
            vol.to_str().unwrap(),
            "--tls-psk",
            keys.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let q = format!("tls-psk-file={}", keys.display());
    let uri = srv.uri_with("nbds", "alice@", "", &q);
    let info = ok(tool("nbdinfo").arg(&uri));
    assert!(info.contains("with TLS"), "{info}");
    let t0 = Instant::now();
    ok(tool("nbdcopy").arg(&src).arg(&uri));
    let back = dir.join("back.img");
    ok(tool("nbdcopy").arg(&uri).arg(&back));
    eprintln!(
        "TLS-PSK nbdcopy of 64 MiB there and back: {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(std::fs::read(&back).unwrap() == want, "read back differs");
    assert!(std::fs::read(&vol).unwrap() == want, "the member differs");
    // qemu's client too (tls-creds-psk reads DIR/keys.psk): the export equals the source.
    let cmp = ok(tool("qemu-img")
        .arg("compare")
        .arg("--object")
        .arg(format!(
            "tls-creds-psk,id=tls0,dir={},username=alice,endpoint=client",
            dir.display()
        ))
        .arg("--image-opts")
        .arg(format!(
            "driver=nbd,path={},tls-creds=tls0",
            srv.socket.display()
        ))
        .arg("--image-opts")
        .arg(format!("driver=file,filename={}", src.display())));
    assert!(cmp.contains("Images are identical"), "{cmp}");

    // A wrong key and an unknown user: the handshake fails, nothing is served, the server
    // says so on stderr and goes on serving.
    let bad = psk_file(dir, "bad.psk", "alice", 2);
    let bq = format!("tls-psk-file={}", bad.display());
    let out = run(tool("nbdinfo").arg(srv.uri_with("nbds", "alice@", "", &bq)));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("gnutls_handshake"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mallory = psk_file(dir, "mallory.psk", "mallory", 1);
    let mq = format!("tls-psk-file={}", mallory.display());
    let out = run(tool("nbdinfo").arg(srv.uri_with("nbds", "mallory@", "", &mq)));
    assert!(!out.status.success(), "an unknown user was served");
    srv.wait_stderr("TLS handshake with a client failed");
    ok(tool("nbdinfo").arg(&uri));

    let (st, took) = srv
        .sigterm_within(Duration::from_secs(5))
        .expect("SIGTERM ended the server");
    assert!(st.success(), "{st:?} after {took:?}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    // nbdcopy's requests, all of them served (it may read and write a little more than once).
    let s = &r["nines_serve"];
    assert!(s["write"]["bytes"].as_u64().unwrap() >= size as u64, "{s}");
    assert!(s["read"]["bytes"].as_u64().unwrap() >= size as u64, "{s}");
}

#[test]
fn plain_text_clients_are_refused_under_require_and_served_under_on() {
    let d = disk_dir();
    let dir = d.path();
    let vol = sparse(dir, "vol.img", 1 << 20);
    let keys = psk_file(dir, "keys.psk", "alice", 1);
    let srv = Serving::start(
        dir,
        &[
            vol.to_str().unwrap(),
            "--tls-psk",
            keys.to_str().unwrap(),
            "--tls",
            "require",
        ],
    );
    // libnbd without TLS: refused at OPT_GO with the reason (as nbdkit --tls=require).
    let out = run(tool("nbdinfo").arg(srv.uri_with("nbd", "", "", "")));
    assert!(!out.status.success(), "a plain-text client was served");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("server replied with error to opt_go"), "{err}");
    let out = run(tool("nbdinfo")
        .env("LIBNBD_DEBUG", "1")
        .arg(srv.uri_with("nbd", "", "", "")));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("server error message: TLS is required: send NBD_OPT_STARTTLS first"),
        "{err}"
    );
    // A raw client: OPT_GO answered NBD_REP_ERR_TLS_REQD, OPT_EXPORT_NAME (no error reply
    // exists) closes the connection before anything is served.
    let mut c = UnixStream::connect(&srv.socket).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    greet(&mut c);
    option(&mut c, OPT_GO, &[0, 0, 0, 0, 0, 0]);
    let (opt, kind, msg) = opt_reply(&mut c);
    assert_eq!((opt, kind), (OPT_GO, REP_ERR_TLS_REQD));
    assert!(String::from_utf8_lossy(&msg).contains("TLS is required"));
    option(&mut c, OPT_EXPORT_NAME, b"");
    let mut b = [0u8; 1];
    assert_eq!(c.read(&mut b).unwrap(), 0, "EXPORT_NAME before TLS closes");
    drop(srv);

    let srv = Serving::start(
        dir,
        &[
            vol.to_str().unwrap(),
            "--tls-psk",
            keys.to_str().unwrap(),
            "--tls",
            "on",
        ],
    );
    let info = ok(tool("nbdinfo").arg(srv.uri_with("nbd", "", "", "")));
    assert!(info.contains("without TLS"), "{info}");
    let q = format!("tls-psk-file={}", keys.display());
    let info = ok(tool("nbdinfo").arg(srv.uri_with("nbds", "alice@", "", &q)));
    assert!(info.contains("with TLS"), "{info}");
}

fn greet(c: &mut UnixStream) {
    let mut g = [0u8; 18];
    c.read_exact(&mut g).unwrap();
    assert_eq!(&g[..16], b"NBDMAGICIHAVEOPT");
    c.write_all(&3u32.to_be_bytes()).unwrap();
}

fn option(c: &mut impl Write, opt: u32, data: &[u8]) {
    let mut b = b"IHAVEOPT".to_vec();
    b.extend_from_slice(&opt.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    c.write_all(&b).unwrap();
}

fn opt_reply(c: &mut impl Read) -> (u32, u32, Vec<u8>) {
    let mut h = [0u8; 20];
    c.read_exact(&mut h).unwrap();
    assert_eq!(h[..8], 0x0003_e889_0455_65a9u64.to_be_bytes());
    let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
    let mut d = vec![0u8; len];
    c.read_exact(&mut d).unwrap();
    (
        u32::from_be_bytes(h[8..12].try_into().unwrap()),
        u32::from_be_bytes(h[12..16].try_into().unwrap()),
        d,
    )
}

fn key() -> PKey<Private> {
    let g = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
    PKey::from_ec_key(EcKey::generate(&g).unwrap()).unwrap()
}

fn cert(
    cn: &str,
    key: &PKey<Private>,
    issuer: Option<(&X509, &PKey<Private>)>,
    serial: u32,
) -> X509 {
    let mut name = X509NameBuilder::new().unwrap();
    name.append_entry_by_nid(Nid::COMMONNAME, cn).unwrap();
    let name = name.build();
    let mut b = X509::builder().unwrap();
    b.set_version(2).unwrap();
    b.set_serial_number(&BigNum::from_u32(serial).unwrap().to_asn1_integer().unwrap())
        .unwrap();
    b.set_subject_name(&name).unwrap();
    b.set_pubkey(key).unwrap();
    b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    b.set_not_after(&Asn1Time::days_from_now(2).unwrap())
        .unwrap();
    match issuer {
        None => {
            b.set_issuer_name(&name).unwrap();
            b.append_extension(BasicConstraints::new().critical().ca().build().unwrap())
                .unwrap();
            b.append_extension(
                KeyUsage::new()
                    .critical()
                    .key_cert_sign()
                    .crl_sign()
                    .build()
                    .unwrap(),
            )
            .unwrap();
            b.sign(key, MessageDigest::sha256()).unwrap();
        }
        Some((ca, ca_key)) => {
            b.set_issuer_name(ca.subject_name()).unwrap();
            b.append_extension(BasicConstraints::new().build().unwrap())
                .unwrap();
            b.append_extension(
                KeyUsage::new()
                    .critical()
                    .digital_signature()
                    .key_encipherment()
                    .build()
                    .unwrap(),
            )
            .unwrap();
            let san = SubjectAlternativeName::new()
                .dns(cn)
                .build(&b.x509v3_context(Some(ca), None))
                .unwrap();
            b.append_extension(san).unwrap();
            b.sign(ca_key, MessageDigest::sha256()).unwrap();
        }
    }
    b.build()
}

/// A CA, and a server certificate for `localhost` signed by it: the server's directory
/// (ca-cert.pem, server-cert.pem, server-key.pem) and the client's (ca-cert.pem only).
fn pki(dir: &Path) -> (PathBuf, PathBuf) {
    pki_with_client(dir).0
}

/// [`pki`], and a client directory that also holds a client certificate the CA signed
/// (client-cert.pem, client-key.pem, as libnbd reads them).
fn pki_with_client(dir: &Path) -> ((PathBuf, PathBuf), PathBuf) {
    let ca_key = key();
    let ca = cert("nines test CA", &ca_key, None, 1);
    let cl_key = key();
    let cl = cert("client", &cl_key, Some((&ca, &ca_key)), 3);
    let kdir = dir.join("client-with-cert");
    std::fs::create_dir_all(&kdir).unwrap();
    std::fs::write(kdir.join("ca-cert.pem"), ca.to_pem().unwrap()).unwrap();
    std::fs::write(kdir.join("client-cert.pem"), cl.to_pem().unwrap()).unwrap();
    std::fs::write(
        kdir.join("client-key.pem"),
        cl_key.private_key_to_pem_pkcs8().unwrap(),
    )
    .unwrap();
    let srv_key = key();
    let srv = cert("localhost", &srv_key, Some((&ca, &ca_key)), 2);
    let sdir = dir.join("server-pki");
    let cdir = dir.join("client-pki");
    std::fs::create_dir_all(&sdir).unwrap();
    std::fs::create_dir_all(&cdir).unwrap();
    std::fs::write(sdir.join("ca-cert.pem"), ca.to_pem().unwrap()).unwrap();
    std::fs::write(sdir.join("server-cert.pem"), srv.to_pem().unwrap()).unwrap();
    std::fs::write(
        sdir.join("server-key.pem"),
        srv_key.private_key_to_pem_pkcs8().unwrap(),
    )
    .unwrap();
    std::fs::write(cdir.join("ca-cert.pem"), ca.to_pem().unwrap()).unwrap();
    ((sdir, cdir), kdir)
}

#[test]
fn tls_verify_peer_serves_only_clients_with_a_certificate_from_the_ca() {
    let d = disk_dir();
    let dir = d.path();
    let ((sdir, cdir), kdir) = pki_with_client(dir);
    let vol = sparse(dir, "vol.img", 1 << 20);
    let srv = Serving::start(
        dir,
        &[
            vol.to_str().unwrap(),
            "--tls-certificates",
            sdir.to_str().unwrap(),
            "--tls-verify-peer",
        ],
    );
    let with = format!("tls-certificates={}", kdir.display());
    let info = ok(tool("nbdinfo").arg(srv.uri_with("nbds", "", "", &with)));
    assert!(info.contains("with TLS"), "{info}");
    let without = format!("tls-certificates={}", cdir.display());
    let out = run(tool("nbdinfo").arg(srv.uri_with("nbds", "", "", &without)));
    assert!(
        !out.status.success(),
        "a client without a certificate was served"
    );
    // A certificate from another CA is refused too.
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let (_, okdir) = pki_with_client(&other);
    let foreign = format!("tls-certificates={}", okdir.display());
    let out = run(tool("nbdinfo").arg(srv.uri_with("nbds", "", "", &foreign)));
    assert!(
        !out.status.success(),
        "a client certificate from another CA was accepted"
    );
    // In TLS 1.3 the client may finish before the server has judged its certificate: the
    // server's line can come a moment after the client ended.
    srv.wait_stderr("TLS handshake with a client failed (2 so far)");
}

#[test]
fn tls_x509_round_trip_with_a_ca_made_here_and_a_foreign_ca_refused() {
    let d = disk_dir();
    let dir = d.path();
    let (sdir, cdir) = pki(dir);
    let vol = sparse(dir, "vol.img", 8 << 20);
    let src = dir.join("src.img");
    let want = data(8 << 20, 3);
    std::fs::write(&src, &want).unwrap();
    let srv = Serving::start_tcp(
        dir,
        &[
            vol.to_str().unwrap(),
            "--tls-certificates",
            sdir.to_str().unwrap(),
        ],
    );
    let q = format!("tls-certificates={}", cdir.display());
    let uri = srv.uri_with("nbds", "", "", &q);
    let info = ok(tool("nbdinfo").arg(&uri));
    assert!(info.contains("with TLS"), "{info}");
    ok(tool("nbdcopy").arg(&src).arg(&uri));
    let back = dir.join("back.img");
    ok(tool("nbdcopy").arg(&uri).arg(&back));
    assert!(std::fs::read(&back).unwrap() == want);
    assert!(std::fs::read(&vol).unwrap() == want);
    // A client trusting another CA refuses the server's certificate.
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let (_, odir) = pki(&other);
    let oq = format!("tls-certificates={}", odir.display());
    let out = run(tool("nbdinfo").arg(srv.uri_with("nbds", "", "", &oq)));
    assert!(
        !out.status.success(),
        "a certificate from an unknown CA was accepted"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("certificate verification"), "{err}");
}

#[test]
fn missing_or_mismatched_credentials_are_refused_before_listening() {
    let d = disk_dir();
    let dir = d.path();
    let vol = sparse(dir, "vol.img", 1 << 20);
    let (sdir, _) = pki(dir);
    let serve = |args: &[&str]| {
        let out = run(Command::new(BIN)
            .arg("serve")
            .arg(&vol)
            .arg("--socket")
            .arg(dir.join("x.sock"))
            .args(args));
        assert!(!out.status.success(), "{args:?} was served");
        assert!(!dir.join("x.sock").exists(), "{args:?} listened");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = serve(&["--tls", "require"]);
    assert!(e.contains("needs credentials"), "{e}");
    let psk = psk_file(dir, "keys.psk", "alice", 1);
    let e = serve(&["--tls", "off", "--tls-psk", psk.to_str().unwrap()]);
    assert!(e.contains("--tls off contradicts"), "{e}");
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let e = serve(&["--tls-certificates", empty.to_str().unwrap()]);
    assert!(e.contains("server-cert.pem is missing"), "{e}");
    // A key that is not the certificate's.
    std::fs::copy(sdir.join("server-cert.pem"), empty.join("server-cert.pem")).unwrap();
    std::fs::write(
        empty.join("server-key.pem"),
        key().private_key_to_pem_pkcs8().unwrap(),
    )
    .unwrap();
    let e = serve(&["--tls-certificates", empty.to_str().unwrap()]);
    assert!(e.contains("does not match"), "{e}");
    let bad = dir.join("bad.psk");
    std::fs::write(&bad, "alice:xyz\n").unwrap();
    let e = serve(&["--tls-psk", bad.to_str().unwrap()]);
    assert!(e.contains("line 1: the key is not hexadecimal"), "{e}");
}

#[test]
fn sigterm_ends_a_tls_server_whose_client_left_256_replies_unread() {
    let d = disk_dir();
    let dir = d.path();
    let (sdir, _) = pki(dir);
    let vol = sparse(dir, "vol.img", 256 << 20);
    let json = dir.join("r.json");
    let srv = Serving::start(
        dir,
        &[
            vol.to_str().unwrap(),
            "--tls-certificates",
            sdir.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ],
    );
    // A client stuck in the TLS handshake (STARTTLS acknowledged, then silence).
    let mut stuck = UnixStream::connect(&srv.socket).unwrap();
    stuck
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    greet(&mut stuck);
    option(&mut stuck, OPT_STARTTLS, &[]);
    assert_eq!(opt_reply(&mut stuck).1, REP_ACK);
    // A TLS client that pipelines 256 reads of 1 MiB and never reads a reply.
    let mut c = UnixStream::connect(&srv.socket).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    greet(&mut c);
    option(&mut c, OPT_STARTTLS, &[]);
    assert_eq!(opt_reply(&mut c).1, REP_ACK);
    let mut b = SslConnector::builder(SslMethod::tls_client()).unwrap();
    b.set_verify(SslVerifyMode::NONE);
    let mut tls = b
        .build()
        .configure()
        .unwrap()
        .verify_hostname(false)
        .connect("localhost", c)
        .expect("TLS handshake");
    option(&mut tls, OPT_GO, &[0, 0, 0, 0, 0, 0]);
    loop {
        let (_, kind, _) = opt_reply(&mut tls);
        if kind == REP_ACK {
            break;
        }
        assert!(kind < 1 << 31, "OPT_GO refused: {kind:#x}");
    }
    let mut reqs = Vec::new();
    for i in 0..256u64 {
        let mut r = [0u8; 28];
        r[..4].copy_from_slice(&0x2560_9513u32.to_be_bytes());
        r[8..16].copy_from_slice(&i.to_be_bytes());
        r[16..24].copy_from_slice(&(i << 20).to_be_bytes());
        r[24..28].copy_from_slice(&(1u32 << 20).to_be_bytes());
        reqs.extend_from_slice(&r);
    }
    tls.write_all(&reqs).unwrap();
    tls.flush().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let (st, took) = srv
        .sigterm_within(Duration::from_secs(5))
        .expect("SIGTERM ended the server");
    assert!(st.success(), "{st:?}");
    assert!(took < Duration::from_secs(3), "the stop took {took:?}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(r["nines_serve"]["read"]["ios"].as_u64().unwrap() > 0);
    drop(stuck);
}

/// The accepted socket of a TCP client has keepalive on: the kernel's table shows its
/// keepalive timer (timer 2) armed for the idle time serve sets (60 s).
#[test]
fn accepted_tcp_connections_have_keepalive() {
    let d = disk_dir();
    let dir = d.path();
    let vol = sparse(dir, "vol.img", 1 << 20);
    let port = free_port();
    let err = dir.join("serve.err");
    let mut child = Command::new(BIN)
        .args(["serve", vol.to_str().unwrap(), "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let mut c = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(c) => break c,
            Err(_) if t0.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("nines serve never listened: {e}"),
        }
    };
    let mut g = [0u8; 18];
    c.read_exact(&mut g).unwrap();
    let client_port = c.local_addr().unwrap().port();
    std::thread::sleep(Duration::from_millis(200));
    // /proc/net/tcp: sl local rem st tx:rx tr:when ...; the server's side of this connection
    // has local port `port` and remote port `client_port`.
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let row = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| {
            f[1].ends_with(&format!(":{port:04X}"))
                && f[2].ends_with(&format!(":{client_port:04X}"))
        })
        .unwrap_or_else(|| panic!("no server-side row for the connection in\n{table}"));
    let (timer, when) = row[5].split_once(':').unwrap();
    let when_ticks = u64::from_str_radix(when, 16).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        timer, "02",
        "no keepalive timer on the accepted socket: {row:?}"
    );
    // USER_HZ (100) ticks: about 60 s from now.
    assert!(
        (5000..=6000).contains(&when_ticks),
        "keepalive due in {when_ticks} ticks: {row:?}"
    );
}

#[test]
fn exports_from_files_are_listed_chosen_by_name_and_each_written() {
    let d = disk_dir();
    let dir = d.path();
    let a = sparse(dir, "a.img", 1 << 20);
    let b = sparse(dir, "b.img", 3 << 20);
    let json = dir.join("r.json");
    let srv = Serving::start(
        dir,
        &[
            "--exports-from-files",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let list = ok(tool("nbdinfo")
        .arg("--list")
        .arg("--json")
        .arg(srv.uri_with("nbd", "", "", "")));
    let v: serde_json::Value = serde_json::from_str(&list).unwrap();
    let got: Vec<(String, u64)> = v["exports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["export-name"].as_str().unwrap().to_string(),
                e["export-size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, [("a.img".into(), 1 << 20), ("b.img".into(), 3 << 20)]);
    // Each export written by name lands in its own file only.
    for (name, path, size, seed) in [("a.img", &a, 1usize << 20, 11), ("b.img", &b, 3 << 20, 12)] {
        let src = dir.join(format!("src-{name}"));
        let want = data(size, seed);
        std::fs::write(&src, &want).unwrap();
        let uri = srv.uri_with("nbd", "", name, "");
        ok(tool("nbdcopy").arg(&src).arg(&uri));
        let back = dir.join(format!("back-{name}"));
        ok(tool("nbdcopy").arg(&uri).arg(&back));
        assert!(std::fs::read(&back).unwrap() == want, "{name} read back");
        assert!(std::fs::read(path).unwrap() == want, "{name} on its file");
    }
    // The default export is the first; an unknown name is refused (NBD_REP_ERR_UNKNOWN).
    let info = ok(tool("nbdinfo")
        .arg("--size")
        .arg(srv.uri_with("nbd", "", "", "")));
    assert_eq!(info.trim(), (1u64 << 20).to_string());
    let out = run(tool("nbdinfo").arg(srv.uri_with("nbd", "", "c.img", "")));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("No such file or directory"), "{err}");
    let (st, _) = srv
        .sigterm_within(Duration::from_secs(5))
        .expect("SIGTERM ended the server");
    assert!(st.success());
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let e = r["nines_serve"]["exports"].as_array().unwrap();
    // Over TLS (required): listed inside the session, chosen by name.
    let keys = psk_file(dir, "keys.psk", "alice", 5);
    let srv = Serving::start(
        dir,
        &[
            "--exports-from-files",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--tls-psk",
            keys.to_str().unwrap(),
        ],
    );
    let q = format!("tls-psk-file={}", keys.display());
    let list = ok(tool("nbdinfo")
        .arg("--list")
        .arg(srv.uri_with("nbds", "alice@", "", &q)));
    assert!(
        list.contains("with TLS")
            && list.contains("export=\"a.img\"")
            && list.contains("export=\"b.img\""),
        "{list}"
    );
    let size = ok(tool("nbdinfo")
        .arg("--size")
        .arg(srv.uri_with("nbds", "alice@", "b.img", &q)));
    assert_eq!(size.trim(), (3u64 << 20).to_string());
    assert_eq!(e[0]["export"], "a.img");
    assert_eq!(e[0]["write"]["bytes"], 1u64 << 20);
    assert_eq!(e[1]["export"], "b.img");
    assert_eq!(e[1]["write"]["bytes"], 3u64 << 20);
}

/// The TLS handshake runs within --handshake-timeout: a client silent after STARTTLS's
/// acknowledgement is closed once it is over, and logged as a failed handshake.
#[test]
fn a_client_silent_inside_the_tls_handshake_is_closed_by_the_handshake_timeout() {
    let d = disk_dir();
    let dir = d.path();
    let vol = sparse(dir, "vol.img", 1 << 20);
    let keys = psk_file(dir, "keys.psk", "alice", 1);
    let srv = Serving::start(
        dir,
        &[
            vol.to_str().unwrap(),
            "--tls-psk",
            keys.to_str().unwrap(),
            "--handshake-timeout",
            "700ms",
        ],
    );
    let mut c = UnixStream::connect(&srv.socket).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let t0 = Instant::now();
    greet(&mut c);
    option(&mut c, OPT_STARTTLS, &[]);
    assert_eq!(opt_reply(&mut c).1, REP_ACK);
    let mut b = [0u8; 1];
    let n = c.read(&mut b).unwrap_or(0);
    let took = t0.elapsed();
    assert_eq!(n, 0, "the server sent TLS bytes to a client that sent none");
    assert!(
        took >= Duration::from_millis(600) && took < Duration::from_secs(3),
        "closed after {took:?}"
    );
    srv.wait_stderr("TLS handshake with a client failed (1 so far)");
    // And the server still serves.
    let q = format!("tls-psk-file={}", keys.display());
    ok(tool("nbdinfo").arg(srv.uri_with("nbds", "alice@", "", &q)));
}
