//! A raw NBD client for crash tests: the fixed-newstyle handshake with EXPORT_NAME, request
//! headers, and simple replies, so a test knows exactly which request was acknowledged when
//! (a library client would hide that).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const FLAG_FUA: u16 = 1 << 0;
pub const TX_SEND_FLUSH: u16 = 1 << 2;
pub const TX_SEND_FUA: u16 = 1 << 3;
pub const TX_SEND_TRIM: u16 = 1 << 5;
pub const TX_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const REPLY_MAGIC: u32 = 0x6744_6698;
/// The block the crash tests write.
pub const BLOCK: usize = 4096;

/// A connected client: the stream, the export's size and transmission flags.
pub struct Conn {
    pub stream: UnixStream,
    pub size_bytes: u64,
    pub flags: u16,
}

/// Connects and negotiates the default export (EXPORT_NAME, NO_ZEROES); None when the server
/// is not there or hangs up during the handshake.
pub fn connect(socket: &Path) -> Option<Conn> {
    let mut s = UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
    let mut g = [0u8; 18];
    s.read_exact(&mut g).ok()?;
    assert_eq!(&g[..16], b"NBDMAGICIHAVEOPT", "not an NBD server");
    s.write_all(&3u32.to_be_bytes()).ok()?;
    s.write_all(b"IHAVEOPT").ok()?;
    s.write_all(&1u32.to_be_bytes()).ok()?;
    s.write_all(&0u32.to_be_bytes()).ok()?;
    let mut r = [0u8; 10];
    s.read_exact(&mut r).ok()?;
    Some(Conn {
        stream: s,
        size_bytes: u64::from_be_bytes(r[..8].try_into().unwrap()),
        flags: u16::from_be_bytes(r[8..10].try_into().unwrap()),
    })
}

/// A request header.
pub fn header(kind: u16, flags: u16, cookie: u64, offset_bytes: u64, len_bytes: u32) -> [u8; 28] {
    let mut b = [0u8; 28];
    b[..4].copy_from_slice(&0x2560_9513u32.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&kind.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..24].copy_from_slice(&offset_bytes.to_be_bytes());
    b[24..28].copy_from_slice(&len_bytes.to_be_bytes());
    b
}

/// A simple reply's (errno, cookie); None when the connection ended.
pub fn reply(s: &mut UnixStream) -> Option<(u32, u64)> {
    let mut r = [0u8; 16];
    s.read_exact(&mut r).ok()?;
    assert_eq!(
        u32::from_be_bytes(r[..4].try_into().unwrap()),
        REPLY_MAGIC,
        "not a simple reply"
    );
    Some((
        u32::from_be_bytes(r[4..8].try_into().unwrap()),
        u64::from_be_bytes(r[8..16].try_into().unwrap()),
    ))
}

/// Reads `buf.len()` bytes at `offset` (one request at a time); the errno on failure, None
/// when the connection ended.
pub fn read_at(s: &mut UnixStream, offset_bytes: u64, buf: &mut [u8]) -> Option<u32> {
    s.write_all(&header(CMD_READ, 0, 1, offset_bytes, buf.len() as u32))
        .ok()?;
    let (errno, _) = reply(s)?;
    if errno == 0 {
        s.read_exact(buf).ok()?;
    }
    Some(errno)
}

/// Block `b` at generation `g` (0: zeros): its number and generation, then words from both.
pub fn block(b: u64, g: u64) -> Vec<u8> {
    if g == 0 {
        return vec![0; BLOCK];
    }
    let mut v = Vec::with_capacity(BLOCK);
    v.extend_from_slice(&(b + 1).to_le_bytes());
    v.extend_from_slice(&g.to_le_bytes());
    let mut z = (b << 32) ^ g.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    while v.len() < BLOCK {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut x = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        v.extend_from_slice(&(x ^ (x >> 31)).to_le_bytes());
    }
    v
}
