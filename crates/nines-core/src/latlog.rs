//! The per-I/O latency log: a compact binary format, written without formatting on the hot path
//! and decoded offline (`nines log FILE` turns it into CSV).
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! header:  magic "NINESLAT" | version u32 = 1 | record_bytes u32 = 24 | start_unix_ns u64
//!          | device_count u32 | device_count x (name_len u16 | name UTF-8)
//! records: completion_ns u64 | latency_ns u64 | offset_sector u40 | device u16 | flags u8
//! ```
//!
//! `completion_ns` counts from the run's start; `offset_sector` is the offset in 512-byte units
//! (512 TiB addressable); flags bit 0 is the direction (0 read, 1 write). A hand-written format
//! because it is the product: 24 bytes an I/O, appendable from many workers, readable by a
//! 30-line decoder in any language.

use std::io::{self, Read, Write};

use crate::op::Op;

pub const MAGIC: [u8; 8] = *b"NINESLAT";
pub const VERSION: u32 = 1;
pub const RECORD_BYTES: usize = 24;
/// Device names longer than this are refused when writing a header.
pub const DEVICE_NAME_BYTES_MAX: usize = 4096;
/// The most devices a log can name (device numbers are 16 bits).
pub const DEVICES_MAX: usize = 65_536;

/// One completed I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatRecord {
    pub completion_ns: u64,
    pub latency_ns: u64,
    pub offset_bytes: u64,
    pub device: u16,
    pub op: Op,
}

impl LatRecord {
    /// Encodes into exactly [`RECORD_BYTES`] bytes. Offsets are stored in 512-byte sectors.
    #[inline]
    pub fn encode(&self, out: &mut [u8; RECORD_BYTES]) {
        out[0..8].copy_from_slice(&self.completion_ns.to_le_bytes());
        out[8..16].copy_from_slice(&self.latency_ns.to_le_bytes());
        let sector = self.offset_bytes >> 9;
        out[16..21].copy_from_slice(&sector.to_le_bytes()[..5]);
        out[21..23].copy_from_slice(&self.device.to_le_bytes());
        out[23] = match self.op {
            Op::Read => 0,
            Op::Write => 1,
        };
    }

    #[inline]
    pub fn decode(b: &[u8; RECORD_BYTES]) -> LatRecord {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let mut sector = [0u8; 8];
        sector[..5].copy_from_slice(&b[16..21]);
        LatRecord {
            completion_ns: u64_at(0),
            latency_ns: u64_at(8),
            offset_bytes: u64::from_le_bytes(sector) << 9,
            device: u16::from_le_bytes([b[21], b[22]]),
            op: if b[23] & 1 == 0 { Op::Read } else { Op::Write },
        }
    }
}

/// What the log is about: the devices its records number, and when the run started.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LatLogHeader {
    pub devices: Vec<String>,
    pub start_unix_ns: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum LatLogError {
    #[error("not a nines latency log (bad magic); was it written by `nines profile --lat-log`?")]
    Magic,
    #[error("latency log version {0} is not supported (this nines reads version {VERSION})")]
    Version(u32),
    #[error("latency log is corrupt: {0}")]
    Corrupt(String),
    #[error(
        "latency log ends in the middle of a record ({0} stray bytes); the run may have been killed"
    )]
    Truncated(usize),
    #[error("reading latency log: {0}")]
    Io(#[from] io::Error),
}

/// Writes the header; records follow with [`LatRecord::encode`].
pub fn write_header(w: &mut impl Write, h: &LatLogHeader) -> io::Result<()> {
    if h.devices.len() > DEVICES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "more than 65536 devices in one latency log",
        ));
    }
    w.write_all(&MAGIC)?;
    w.write_all(&VERSION.to_le_bytes())?;
    w.write_all(&(RECORD_BYTES as u32).to_le_bytes())?;
    w.write_all(&h.start_unix_ns.to_le_bytes())?;
    w.write_all(&(h.devices.len() as u32).to_le_bytes())?;
    for name in &h.devices {
        if name.len() > DEVICE_NAME_BYTES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "device name too long for a latency log",
            ));
        }
        w.write_all(&(name.len() as u16).to_le_bytes())?;
        w.write_all(name.as_bytes())?;
    }
    Ok(())
}

/// Reads a log: the header first, then records as an iterator.
pub struct LatLogReader<R: Read> {
    inner: R,
    header: LatLogHeader,
    done: bool,
}

fn read_exact_or(r: &mut impl Read, buf: &mut [u8], what: &str) -> Result<(), LatLogError> {
    r.read_exact(buf).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => LatLogError::Corrupt(format!("header ends inside {what}")),
        _ => LatLogError::Io(e),
    })
}

impl<R: Read> LatLogReader<R> {
    pub fn new(mut inner: R) -> Result<Self, LatLogError> {
        let mut magic = [0u8; 8];
        inner
            .read_exact(&mut magic)
            .map_err(|_| LatLogError::Magic)?;
        if magic != MAGIC {
            return Err(LatLogError::Magic);
        }
        let mut b4 = [0u8; 4];
        read_exact_or(&mut inner, &mut b4, "the version")?;
        let version = u32::from_le_bytes(b4);
        if version != VERSION {
            return Err(LatLogError::Version(version));
        }
        read_exact_or(&mut inner, &mut b4, "the record size")?;
        if u32::from_le_bytes(b4) as usize != RECORD_BYTES {
            return Err(LatLogError::Corrupt(format!(
                "record size {} is not {RECORD_BYTES}",
                u32::from_le_bytes(b4)
            )));
        }
        let mut b8 = [0u8; 8];
        read_exact_or(&mut inner, &mut b8, "the start time")?;
        let start_unix_ns = u64::from_le_bytes(b8);
        read_exact_or(&mut inner, &mut b4, "the device count")?;
        let count = u32::from_le_bytes(b4) as usize;
        if count > DEVICES_MAX {
            return Err(LatLogError::Corrupt(format!(
                "{count} devices is more than {DEVICES_MAX}"
            )));
        }
        let mut devices = Vec::with_capacity(count);
        for _ in 0..count {
            let mut b2 = [0u8; 2];
            read_exact_or(&mut inner, &mut b2, "a device name")?;
            let len = u16::from_le_bytes(b2) as usize;
            if len > DEVICE_NAME_BYTES_MAX {
                return Err(LatLogError::Corrupt(format!("device name of {len} bytes")));
            }
            let mut name = vec![0u8; len];
            read_exact_or(&mut inner, &mut name, "a device name")?;
            devices.push(
                String::from_utf8(name)
                    .map_err(|_| LatLogError::Corrupt("device name is not UTF-8".into()))?,
            );
        }
        Ok(LatLogReader {
            inner,
            header: LatLogHeader {
                devices,
                start_unix_ns,
            },
            done: false,
        })
    }

    pub fn header(&self) -> &LatLogHeader {
        &self.header
    }
}

impl<R: Read> Iterator for LatLogReader<R> {
    type Item = Result<LatRecord, LatLogError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let mut buf = [0u8; RECORD_BYTES];
        let mut filled = 0;
        while filled < RECORD_BYTES {
            match self.inner.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.done = true;
                    return Some(Err(e.into()));
                }
            }
        }
        if filled == 0 {
            self.done = true;
            return None;
        }
        if filled < RECORD_BYTES {
            self.done = true;
            return Some(Err(LatLogError::Truncated(filled)));
        }
        let rec = LatRecord::decode(&buf);
        if usize::from(rec.device) >= self.header.devices.len() {
            self.done = true;
            return Some(Err(LatLogError::Corrupt(format!(
                "record names device {} but the header lists {}",
                rec.device,
                self.header.devices.len()
            ))));
        }
        Some(Ok(rec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip() {
        let h = LatLogHeader {
            devices: vec!["zram0".into(), "nvme0n1".into()],
            start_unix_ns: 77,
        };
        let recs = [
            LatRecord {
                completion_ns: 5,
                latency_ns: 25_000,
                offset_bytes: 4096 * 1000,
                device: 1,
                op: Op::Write,
            },
            LatRecord {
                completion_ns: u64::MAX,
                latency_ns: 1,
                offset_bytes: (1 << 49) - 512,
                device: 0,
                op: Op::Read,
            },
        ];
        let mut out = Vec::new();
        write_header(&mut out, &h).unwrap();
        for r in &recs {
            let mut b = [0u8; RECORD_BYTES];
            r.encode(&mut b);
            out.extend_from_slice(&b);
        }
        let rd = LatLogReader::new(&out[..]).unwrap();
        assert_eq!(rd.header(), &h);
        let back: Vec<LatRecord> = rd.map(Result::unwrap).collect();
        assert_eq!(back, recs);
        // A torn last record is reported, not silently dropped.
        let rd = LatLogReader::new(&out[..out.len() - 3]).unwrap();
        let last = rd.last().unwrap();
        assert!(matches!(last, Err(LatLogError::Truncated(21))));
        assert!(matches!(
            LatLogReader::new(&b"NOTALOG!"[..]),
            Err(LatLogError::Magic)
        ));
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let mut data = MAGIC.to_vec();
            data.extend_from_slice(&bytes);
            if let Ok(rd) = LatLogReader::new(&data[..]) {
                for r in rd.take(100) {
                    let _ = r;
                }
            }
        }

        #[test]
        fn records_round_trip(c in any::<u64>(), l in any::<u64>(), sector in 0u64..(1 << 40), d in any::<u16>(), w in any::<bool>()) {
            let r = LatRecord { completion_ns: c, latency_ns: l, offset_bytes: sector << 9, device: d, op: if w { Op::Write } else { Op::Read } };
            let mut b = [0u8; RECORD_BYTES];
            r.encode(&mut b);
            prop_assert_eq!(LatRecord::decode(&b), r);
        }
    }
}
