//! TLS pre-shared keys as nbdkit `--tls-psk` and qemu's `tls-creds-psk` read them: the file
//! GnuTLS's `psktool` writes, one `username:hexkey` a line (the key in hexadecimal). Parsed here,
//! with no TLS library, so every malformed file gets a one-line reason naming its line.

use std::collections::HashMap;

/// The longest identity accepted (OpenSSL's PSK_MAX_IDENTITY_LEN in 1.1 is 128 bytes).
pub const PSK_IDENTITY_MAX_BYTES: usize = 128;
/// The longest key accepted (OpenSSL's PSK_MAX_PSK_LEN in 1.1 is 256 bytes).
pub const PSK_KEY_MAX_BYTES: usize = 256;

/// A malformed PSK file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PskError {
    #[error("line {line}: expected username:hexkey (as psktool writes); fix or remove the line")]
    NoColon { line: usize },
    #[error("line {line}: the username is empty; write username:hexkey")]
    EmptyIdentity { line: usize },
    #[error(
        "line {line}: the username is longer than {PSK_IDENTITY_MAX_BYTES} bytes; choose a shorter one"
    )]
    IdentityTooLong { line: usize },
    #[error(
        "line {line}: the key is not hexadecimal bytes (an even count of 0-9a-f); make one with `psktool -u NAME -p FILE`"
    )]
    BadHex { line: usize },
    #[error("line {line}: the key is empty; make one with `psktool -u NAME -p FILE`")]
    EmptyKey { line: usize },
    #[error("line {line}: the key is longer than {PSK_KEY_MAX_BYTES} bytes; use a shorter key")]
    KeyTooLong { line: usize },
    #[error("line {line}: username {identity:?} is listed twice; keep one line per username")]
    Duplicate { line: usize, identity: String },
    #[error("the file holds no key; add a line username:hexkey (psktool -u NAME -p FILE)")]
    Empty,
}

/// The keys of a PSK file by identity (username).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PskKeys {
    keys: HashMap<Vec<u8>, Vec<u8>>,
}

impl PskKeys {
    /// Parses a psktool file: `username:hexkey` lines; blank lines are skipped, a trailing
    /// `\r` is tolerated, anything else malformed is refused with its line number.
    pub fn parse(text: &str) -> Result<PskKeys, PskError> {
        let mut keys = HashMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let l = raw.strip_suffix('\r').unwrap_or(raw);
            if l.trim().is_empty() {
                continue;
            }
            // The username may not hold a colon (psktool refuses one): split at the first.
            let (id, hex) = l.split_once(':').ok_or(PskError::NoColon { line })?;
            if id.is_empty() {
                return Err(PskError::EmptyIdentity { line });
            }
            if id.len() > PSK_IDENTITY_MAX_BYTES {
                return Err(PskError::IdentityTooLong { line });
            }
            let key = decode_hex(hex).ok_or(PskError::BadHex { line })?;
            if key.is_empty() {
                return Err(PskError::EmptyKey { line });
            }
            if key.len() > PSK_KEY_MAX_BYTES {
                return Err(PskError::KeyTooLong { line });
            }
            if keys.insert(id.as_bytes().to_vec(), key).is_some() {
                return Err(PskError::Duplicate {
                    line,
                    identity: id.to_string(),
                });
            }
        }
        if keys.is_empty() {
            return Err(PskError::Empty);
        }
        Ok(PskKeys { keys })
    }

    /// The key of `identity`, if the file lists it.
    pub fn key(&self, identity: &[u8]) -> Option<&[u8]> {
        self.keys.get(identity).map(Vec::as_slice)
    }

    /// How many identities the file lists.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    b.chunks_exact(2)
        .map(|p| Some(nibble(p[0])? << 4 | nibble(p[1])?))
        .collect()
}
