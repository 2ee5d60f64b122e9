//! The NBD protocol (NetworkBlockDevice/nbd, doc/proto.md), server side, as sans-IO code: byte
//! slices in, byte vectors out, no socket and no file. The server loop (`nines serve`) reads the
//! fixed-size headers, hands them here, and writes what comes back; everything a hostile client
//! can send (bad magic, oversized lengths, offsets past the end, unknown options and commands) is
//! decided here, where it is property-tested, so the loop only moves bytes.
//!
//! Written by hand because the existing crates do not fit (see issue 13): `nbd` 0.3 rejects the
//! mandatory OPT_INFO/OPT_GO and answers TRIM with an invalid error code; `tokio-nbd` is GPL and
//! serves one command at a time per connection.
//!
//! Covered: the fixed newstyle handshake (NO_ZEROES), OPT_EXPORT_NAME, OPT_INFO/OPT_GO with
//! NBD_INFO_EXPORT, NBD_INFO_NAME, NBD_INFO_DESCRIPTION and NBD_INFO_BLOCK_SIZE, OPT_LIST,
//! OPT_ABORT, OPT_STRUCTURED_REPLY, OPT_LIST/SET_META_CONTEXT (`base:allocation`),
//! OPT_STARTTLS when the server offers TLS ([`TlsMode`]: the TLS session itself is the
//! caller's), several exports chosen by name, NBD_REP_ERR_UNSUP for every other option; READ (at any alignment: the server widens it to
//! whole blocks), WRITE, FLUSH, TRIM, WRITE_ZEROES (FUA on the writing ones, FAST_ZERO), CACHE,
//! BLOCK_STATUS, DISC; simple and structured replies. Every request is answered (a write's
//! payload, even over the maximum, is read and dropped when refused), so a connection never
//! leaves step; only a bad magic closes. Replies carry the request's cookie, so a server may
//! send them in any order.

pub mod psk;

/// Protocol constants (names as in doc/proto.md, without the `NBD_` prefix).
pub mod consts {
    pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
    pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
    pub const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
    pub const REQUEST_MAGIC: u32 = 0x2560_9513;
    pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
    pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

    pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
    pub const FLAG_NO_ZEROES: u16 = 1 << 1;
    pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
    pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

    pub const OPT_EXPORT_NAME: u32 = 1;
    pub const OPT_ABORT: u32 = 2;
    pub const OPT_LIST: u32 = 3;
    pub const OPT_STARTTLS: u32 = 5;
    pub const OPT_INFO: u32 = 6;
    pub const OPT_GO: u32 = 7;
    pub const OPT_STRUCTURED_REPLY: u32 = 8;
    pub const OPT_LIST_META_CONTEXT: u32 = 9;
    pub const OPT_SET_META_CONTEXT: u32 = 10;

    pub const REP_ACK: u32 = 1;
    pub const REP_SERVER: u32 = 2;
    pub const REP_INFO: u32 = 3;
    pub const REP_META_CONTEXT: u32 = 4;
    pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
    pub const REP_ERR_POLICY: u32 = (1 << 31) + 2;
    pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
    pub const REP_ERR_TLS_REQD: u32 = (1 << 31) + 5;
    pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
    pub const REP_ERR_TOO_BIG: u32 = (1 << 31) + 9;

    pub const INFO_EXPORT: u16 = 0;
    pub const INFO_NAME: u16 = 1;
    pub const INFO_DESCRIPTION: u16 = 2;
    pub const INFO_BLOCK_SIZE: u16 = 3;

    pub const FLAG_HAS_FLAGS: u16 = 1 << 0;
    pub const FLAG_READ_ONLY: u16 = 1 << 1;
    pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
    pub const FLAG_SEND_FUA: u16 = 1 << 3;
    pub const FLAG_SEND_TRIM: u16 = 1 << 5;
    pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
    pub const FLAG_SEND_DF: u16 = 1 << 7;
    pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
    pub const FLAG_SEND_CACHE: u16 = 1 << 10;
    pub const FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

    pub const CMD_FLAG_FUA: u16 = 1 << 0;
    pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
    pub const CMD_FLAG_DF: u16 = 1 << 2;
    pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
    pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

    pub const CMD_READ: u16 = 0;
    pub const CMD_WRITE: u16 = 1;
    pub const CMD_DISC: u16 = 2;
    pub const CMD_FLUSH: u16 = 3;
    pub const CMD_TRIM: u16 = 4;
    pub const CMD_CACHE: u16 = 5;
    pub const CMD_WRITE_ZEROES: u16 = 6;
    pub const CMD_BLOCK_STATUS: u16 = 7;

    pub const REPLY_FLAG_DONE: u16 = 1 << 0;
    pub const REPLY_TYPE_NONE: u16 = 0;
    pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
    pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
    pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;

    /// The error values allowed on the wire.
    pub const EPERM: u32 = 1;
    pub const EIO: u32 = 5;
    pub const ENOMEM: u32 = 12;
    pub const EINVAL: u32 = 22;
    pub const ENOSPC: u32 = 28;
    pub const EOVERFLOW: u32 = 75;
    pub const ENOTSUP: u32 = 95;
    pub const ESHUTDOWN: u32 = 108;

    /// Bytes of a request header, a simple reply header, a structured reply header.
    pub const REQUEST_BYTES: usize = 28;
    pub const SIMPLE_REPLY_BYTES: usize = 16;
    pub const STRUCTURED_REPLY_BYTES: usize = 20;
    /// Bytes of an option header (IHAVEOPT, option, length).
    pub const OPT_HEADER_BYTES: usize = 16;
    /// The largest option payload this server reads; larger ones are skipped and answered
    /// NBD_REP_ERR_TOO_BIG (names are at most 4096 bytes by the protocol).
    pub const OPT_DATA_MAX: u32 = 8192;

    /// The one metadata context served, and its id on this server.
    pub const META_BASE_ALLOCATION: &str = "base:allocation";
    pub const META_BASE_ALLOCATION_ID: u32 = 1;
    /// `base:allocation` status flags.
    pub const STATE_HOLE: u32 = 1 << 0;
    pub const STATE_ZERO: u32 = 1 << 1;
    /// The most descriptors one block status reply carries (the spec's bound is 2^20).
    pub const BLOCK_STATUS_EXTENTS_MAX: usize = 1024;
}

use consts::*;

/// A violation after which the connection must be closed (the protocol has no answer for it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("the client sent unknown handshake flags {0:#x}; closing")]
    ClientFlags(u32),
    #[error("the client did not set NBD_FLAG_C_FIXED_NEWSTYLE; closing")]
    NotFixedNewstyle,
    #[error("bad option magic {0:#x}; closing")]
    OptionMagic(u64),
    #[error("bad request magic {0:#x}; closing")]
    RequestMagic(u32),
}

/// What is served: one export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    pub name: String,
    pub description: String,
    pub size_bytes: u64,
    /// NBD_INFO_BLOCK_SIZE: minimum (a power of two, 1..=64 KiB), preferred, maximum payload.
    pub block_min_bytes: u32,
    pub block_preferred_bytes: u32,
    pub payload_max_bytes: u32,
    pub read_only: bool,
    /// Whether a fast zero (NBD_CMD_FLAG_FAST_ZERO) is served: a zeroed range is deallocated
    /// or zeroed by the members without writing it (regular-file members). When false, such
    /// requests fail at once with ENOTSUP, as the protocol asks.
    pub fast_zero: bool,
}

impl Export {
    /// The transmission flags advertised for this export.
    pub fn transmission_flags(&self, structured: bool) -> u16 {
        let mut f = FLAG_HAS_FLAGS
            | FLAG_SEND_FLUSH
            | FLAG_SEND_FUA
            | FLAG_SEND_TRIM
            | FLAG_SEND_WRITE_ZEROES
            | FLAG_CAN_MULTI_CONN
            | FLAG_SEND_CACHE
            | FLAG_SEND_FAST_ZERO;
        if self.read_only {
            f |= FLAG_READ_ONLY;
        }
        if structured {
            // Reads are always answered in one chunk, so "don't fragment" holds trivially.
            f |= FLAG_SEND_DF;
        }
        f
    }
}

/// The server's first bytes: NBDMAGIC, IHAVEOPT, handshake flags.
pub fn greeting() -> [u8; 18] {
    let mut g = [0u8; 18];
    g[..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    g[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    g[16..].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    g
}

/// The client's flags, checked: unknown bits or a client that is not fixed-newstyle end the
/// connection (doc/proto.md: the server MUST close).
pub fn client_flags(b: [u8; 4]) -> Result<ClientFlags, ProtoError> {
    let f = u32::from_be_bytes(b);
    if f & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(ProtoError::ClientFlags(f));
    }
    if f & FLAG_C_FIXED_NEWSTYLE == 0 {
        return Err(ProtoError::NotFixedNewstyle);
    }
    Ok(ClientFlags {
        no_zeroes: f & FLAG_C_NO_ZEROES != 0,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientFlags {
    pub no_zeroes: bool,
}

/// An option header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptHeader {
    pub option: u32,
    pub len_bytes: u32,
}

impl OptHeader {
    pub fn parse(b: &[u8; OPT_HEADER_BYTES]) -> Result<OptHeader, ProtoError> {
        let magic = u64::from_be_bytes(b[..8].try_into().expect("8 bytes"));
        if magic != IHAVEOPT {
            return Err(ProtoError::OptionMagic(magic));
        }
        Ok(OptHeader {
            option: u32::from_be_bytes(b[8..12].try_into().expect("4 bytes")),
            len_bytes: u32::from_be_bytes(b[12..16].try_into().expect("4 bytes")),
        })
    }

    /// Whether the payload is too large to read: the loop discards it and sends
    /// [`too_big_reply`].
    pub fn too_big(&self) -> bool {
        self.len_bytes > OPT_DATA_MAX
    }
}

/// The answer to an option whose payload was over [`OPT_DATA_MAX`] (the payload discarded).
pub fn too_big_reply(option: u32, out: &mut Vec<u8>) {
    opt_reply(out, option, REP_ERR_TOO_BIG, b"option payload too large");
}

/// What the loop does after an option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptOutcome {
    /// Read the next option.
    Continue,
    /// Send the reply (NBD_REP_ACK to NBD_OPT_STARTTLS), then run the TLS handshake as the
    /// server on the same stream, call [`Negotiation::tls_started`], and read the next option
    /// inside TLS.
    StartTls,
    /// Enter transmission (after OPT_GO or OPT_EXPORT_NAME).
    Transmit,
    /// Close the connection (after OPT_ABORT, or OPT_EXPORT_NAME naming no export).
    Close,
}

/// How the server offers TLS (nbdkit `--tls`, qemu-nbd `--tls-creds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// No TLS: NBD_OPT_STARTTLS is answered NBD_REP_ERR_UNSUP.
    #[default]
    Off,
    /// TLS offered: a client may start it (NBD_OPT_STARTTLS) or stay in plain text.
    On,
    /// TLS required: before TLS every option but NBD_OPT_STARTTLS and NBD_OPT_ABORT is
    /// answered NBD_REP_ERR_TLS_REQD, and NBD_OPT_EXPORT_NAME (which has no error reply)
    /// closes the connection, as nbdkit `--tls=require` and the protocol's FORCEDTLS mode.
    Require,
}

/// The negotiation phase of one connection.
#[derive(Debug, Clone)]
pub struct Negotiation {
    pub client: ClientFlags,
    /// Whether structured replies were negotiated (NBD_OPT_STRUCTURED_REPLY).
    pub structured: bool,
    /// Whether the last NBD_OPT_SET_META_CONTEXT selected `base:allocation` (block status may
    /// be asked for).
    pub base_allocation: bool,
    tls: TlsMode,
    tls_active: bool,
    /// The export chosen by NBD_OPT_GO or NBD_OPT_EXPORT_NAME (an index into the exports).
    chosen: Option<usize>,
}

impl Negotiation {
    pub fn new(client: ClientFlags) -> Negotiation {
        Negotiation {
            client,
            structured: false,
            base_allocation: false,
            tls: TlsMode::Off,
            tls_active: false,
            chosen: None,
        }
    }

    /// The same negotiation with TLS offered as `mode` says.
    pub fn with_tls(mut self, mode: TlsMode) -> Negotiation {
        self.tls = mode;
        self
    }

    /// Whether the connection runs inside TLS now.
    pub fn tls_active(&self) -> bool {
        self.tls_active
    }

    /// The caller finished the TLS handshake after [`OptOutcome::StartTls`]: what was
    /// negotiated in plain text is forgotten (the protocol: the client starts over inside TLS).
    pub fn tls_started(&mut self) {
        self.tls_active = true;
        self.structured = false;
        self.base_allocation = false;
    }

    /// The export the client chose (after [`OptOutcome::Transmit`]): an index into the
    /// exports given to [`Negotiation::option_in`].
    pub fn export_index(&self) -> Option<usize> {
        self.chosen
    }

    /// Answers one option (`data` is its whole payload, at most [`OPT_DATA_MAX`] bytes) into
    /// `out`, for a server with the one export `export`.
    pub fn option(
        &mut self,
        option: u32,
        data: &[u8],
        export: &Export,
        out: &mut Vec<u8>,
    ) -> OptOutcome {
        self.option_in(option, data, std::slice::from_ref(export), out)
    }

    /// Answers one option for a server with several exports (chosen by name; the empty name
    /// chooses the first, the default export).
    pub fn option_in(
        &mut self,
        option: u32,
        data: &[u8],
        exports: &[Export],
        out: &mut Vec<u8>,
    ) -> OptOutcome {
        if self.tls == TlsMode::Require
            && !self.tls_active
            && !matches!(option, OPT_STARTTLS | OPT_ABORT)
        {
            if option == OPT_EXPORT_NAME {
                // No error reply exists for this option: the protocol says close.
                return OptOutcome::Close;
            }
            opt_reply(
                out,
                option,
                REP_ERR_TLS_REQD,
                b"TLS is required: send NBD_OPT_STARTTLS first",
            );
            return OptOutcome::Continue;
        }
        match option {
            OPT_STARTTLS => self.starttls(data, out),
            OPT_EXPORT_NAME => {
                let Some(i) = find_export(exports, data) else {
                    // No error reply exists for this option: the protocol says close.
                    return OptOutcome::Close;
                };
                let export = &exports[i];
                self.chosen = Some(i);
                out.extend_from_slice(&export.size_bytes.to_be_bytes());
                out.extend_from_slice(&export.transmission_flags(self.structured).to_be_bytes());
                if !self.client.no_zeroes {
                    out.extend_from_slice(&[0u8; 124]);
                }
                OptOutcome::Transmit
            }
            OPT_ABORT => {
                opt_reply(out, option, REP_ACK, &[]);
                OptOutcome::Close
            }
            OPT_LIST => {
                if !data.is_empty() {
                    opt_reply(out, option, REP_ERR_INVALID, b"OPT_LIST takes no data");
                    return OptOutcome::Continue;
                }
                for export in exports {
                    let mut rep = Vec::with_capacity(4 + export.name.len());
                    rep.extend_from_slice(&(export.name.len() as u32).to_be_bytes());
                    rep.extend_from_slice(export.name.as_bytes());
                    opt_reply(out, option, REP_SERVER, &rep);
                }
                opt_reply(out, option, REP_ACK, &[]);
                OptOutcome::Continue
            }
            OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    opt_reply(
                        out,
                        option,
                        REP_ERR_INVALID,
                        b"OPT_STRUCTURED_REPLY takes no data",
                    );
                    return OptOutcome::Continue;
                }
                self.structured = true;
                opt_reply(out, option, REP_ACK, &[]);
                OptOutcome::Continue
            }
            OPT_INFO | OPT_GO => self.info(option, data, exports, out),
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
                self.meta_context(option, data, exports, out);
                OptOutcome::Continue
            }
            _ => {
                opt_reply(out, option, REP_ERR_UNSUP, b"option not supported");
                OptOutcome::Continue
            }
        }
    }

    /// NBD_OPT_STARTTLS: acknowledged when TLS is offered and not yet running.
    fn starttls(&mut self, data: &[u8], out: &mut Vec<u8>) -> OptOutcome {
        let option = OPT_STARTTLS;
        if self.tls == TlsMode::Off {
            opt_reply(
                out,
                option,
                REP_ERR_UNSUP,
                b"TLS is not configured on this server (nines serve --tls)",
            );
        } else if !data.is_empty() {
            opt_reply(out, option, REP_ERR_INVALID, b"OPT_STARTTLS takes no data");
        } else if self.tls_active {
            opt_reply(out, option, REP_ERR_INVALID, b"TLS is already running");
        } else {
            opt_reply(out, option, REP_ACK, &[]);
            return OptOutcome::StartTls;
        }
        OptOutcome::Continue
    }

    fn info(
        &mut self,
        option: u32,
        data: &[u8],
        exports: &[Export],
        out: &mut Vec<u8>,
    ) -> OptOutcome {
        let Some(req) = InfoRequest::parse(data) else {
            opt_reply(
                out,
                option,
                REP_ERR_INVALID,
                b"malformed OPT_INFO/OPT_GO payload",
            );
            return OptOutcome::Continue;
        };
        let Some(index) = find_export(exports, req.name) else {
            opt_reply(out, option, REP_ERR_UNKNOWN, b"no such export");
            return OptOutcome::Continue;
        };
        let export = &exports[index];
        let mut info = [0u8; 12];
        info[..2].copy_from_slice(&INFO_EXPORT.to_be_bytes());
        info[2..10].copy_from_slice(&export.size_bytes.to_be_bytes());
        info[10..12].copy_from_slice(&export.transmission_flags(self.structured).to_be_bytes());
        opt_reply(out, option, REP_INFO, &info);
        // Block sizes are sent whether asked or not (allowed; clients that ignore them still
        // get EINVAL for unaligned requests).
        let mut bs = [0u8; 14];
        bs[..2].copy_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        bs[2..6].copy_from_slice(&export.block_min_bytes.to_be_bytes());
        bs[6..10].copy_from_slice(&export.block_preferred_bytes.to_be_bytes());
        bs[10..14].copy_from_slice(&export.payload_max_bytes.to_be_bytes());
        opt_reply(out, option, REP_INFO, &bs);
        let mut name_sent = false;
        let mut desc_sent = false;
        for kind in req.kinds() {
            match kind {
                INFO_NAME if !name_sent => {
                    name_sent = true;
                    let mut rep = Vec::with_capacity(2 + export.name.len());
                    rep.extend_from_slice(&INFO_NAME.to_be_bytes());
                    rep.extend_from_slice(export.name.as_bytes());
                    opt_reply(out, option, REP_INFO, &rep);
                }
                INFO_DESCRIPTION if !desc_sent => {
                    desc_sent = true;
                    let mut rep = Vec::with_capacity(2 + export.description.len());
                    rep.extend_from_slice(&INFO_DESCRIPTION.to_be_bytes());
                    rep.extend_from_slice(export.description.as_bytes());
                    opt_reply(out, option, REP_INFO, &rep);
                }
                // Export and block size are sent anyway; unknown ones are ignored (protocol).
                _ => {}
            }
        }
        opt_reply(out, option, REP_ACK, &[]);
        if option == OPT_GO {
            self.chosen = Some(index);
            OptOutcome::Transmit
        } else {
            OptOutcome::Continue
        }
    }
}

impl Negotiation {
    /// NBD_OPT_LIST_META_CONTEXT / NBD_OPT_SET_META_CONTEXT: the one context served is
    /// `base:allocation` (queries `base:` and `base:allocation` match it; other namespaces are
    /// ignored, as the protocol asks).
    fn meta_context(&mut self, option: u32, data: &[u8], exports: &[Export], out: &mut Vec<u8>) {
        let set = option == OPT_SET_META_CONTEXT;
        if set {
            // Whatever the outcome, the previous selection is replaced.
            self.base_allocation = false;
        }
        if !self.structured {
            opt_reply(
                out,
                option,
                REP_ERR_INVALID,
                b"negotiate structured replies first",
            );
            return;
        }
        let Some(q) = MetaQuery::parse(data) else {
            opt_reply(
                out,
                option,
                REP_ERR_INVALID,
                b"malformed meta context request",
            );
            return;
        };
        if find_export(exports, q.name).is_none() {
            opt_reply(out, option, REP_ERR_UNKNOWN, b"no such export");
            return;
        }
        let queries = q.queries();
        let selected = if queries.is_empty() {
            // LIST with no query lists everything; SET with none selects nothing.
            !set
        } else {
            queries.iter().any(|&q| {
                q == META_BASE_ALLOCATION.as_bytes() || (!set && q == b"base:".as_slice())
            })
        };
        if selected {
            let mut rep = Vec::with_capacity(4 + META_BASE_ALLOCATION.len());
            let id = if set { META_BASE_ALLOCATION_ID } else { 0 };
            rep.extend_from_slice(&id.to_be_bytes());
            rep.extend_from_slice(META_BASE_ALLOCATION.as_bytes());
            opt_reply(out, option, REP_META_CONTEXT, &rep);
            if set {
                self.base_allocation = true;
            }
        }
        opt_reply(out, option, REP_ACK, &[]);
    }
}

/// A meta context option's payload: export name, then length-prefixed queries.
struct MetaQuery<'a> {
    name: &'a [u8],
    rest: &'a [u8],
    count: usize,
}

impl<'a> MetaQuery<'a> {
    fn parse(data: &'a [u8]) -> Option<MetaQuery<'a>> {
        let name_len = u32::from_be_bytes(data.get(..4)?.try_into().ok()?) as usize;
        let name = data.get(4..4usize.checked_add(name_len)?)?;
        let rest = &data[4 + name_len..];
        let count = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let q = MetaQuery {
            name,
            rest: &rest[4..],
            count,
        };
        // Every query must lie inside the payload, and nothing may follow the last.
        let mut at = 0usize;
        for _ in 0..count {
            let len = u32::from_be_bytes(q.rest.get(at..at + 4)?.try_into().ok()?) as usize;
            at = at.checked_add(4)?.checked_add(len)?;
            if at > q.rest.len() {
                return None;
            }
        }
        (at == q.rest.len()).then_some(q)
    }

    fn queries(&self) -> Vec<&'a [u8]> {
        let mut v = Vec::with_capacity(self.count);
        let mut at = 0usize;
        for _ in 0..self.count {
            let len =
                u32::from_be_bytes(self.rest[at..at + 4].try_into().expect("4 bytes")) as usize;
            v.push(&self.rest[at + 4..at + 4 + len]);
            at += 4 + len;
        }
        v
    }
}

/// The export a name chooses: the empty name chooses the default (the first) export.
fn find_export(exports: &[Export], name: &[u8]) -> Option<usize> {
    if name.is_empty() && !exports.is_empty() {
        return Some(0);
    }
    exports.iter().position(|e| e.name.as_bytes() == name)
}

/// An OPT_INFO/OPT_GO payload: name length, name, count of info requests, the requests.
struct InfoRequest<'a> {
    name: &'a [u8],
    infos: &'a [u8],
}

impl<'a> InfoRequest<'a> {
    fn parse(data: &'a [u8]) -> Option<InfoRequest<'a>> {
        let name_len = u32::from_be_bytes(data.get(..4)?.try_into().ok()?) as usize;
        let name = data.get(4..4usize.checked_add(name_len)?)?;
        let rest = &data[4 + name_len..];
        let n = u16::from_be_bytes(rest.get(..2)?.try_into().ok()?) as usize;
        let infos = &rest[2..];
        (infos.len() == 2 * n).then_some(InfoRequest { name, infos })
    }

    fn kinds(&self) -> impl Iterator<Item = u16> + '_ {
        self.infos
            .chunks_exact(2)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
    }
}

fn opt_reply(out: &mut Vec<u8>, option: u32, kind: u32, data: &[u8]) {
    out.extend_from_slice(&REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

/// A request header as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawRequest {
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    pub offset_bytes: u64,
    pub len_bytes: u32,
}

impl RawRequest {
    pub fn parse(b: &[u8; REQUEST_BYTES]) -> Result<RawRequest, ProtoError> {
        let magic = u32::from_be_bytes(b[..4].try_into().expect("4 bytes"));
        if magic != REQUEST_MAGIC {
            return Err(ProtoError::RequestMagic(magic));
        }
        Ok(RawRequest {
            flags: u16::from_be_bytes(b[4..6].try_into().expect("2 bytes")),
            kind: u16::from_be_bytes(b[6..8].try_into().expect("2 bytes")),
            cookie: u64::from_be_bytes(b[8..16].try_into().expect("8 bytes")),
            offset_bytes: u64::from_be_bytes(b[16..24].try_into().expect("8 bytes")),
            len_bytes: u32::from_be_bytes(b[24..28].try_into().expect("4 bytes")),
        })
    }

    pub fn encode(&self) -> [u8; REQUEST_BYTES] {
        let mut b = [0u8; REQUEST_BYTES];
        b[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset_bytes.to_be_bytes());
        b[24..28].copy_from_slice(&self.len_bytes.to_be_bytes());
        b
    }

    /// Bytes of payload that follow this header on the wire (a write's data), whatever its
    /// fate: the loop must read (or discard) them to stay in step.
    pub fn payload_bytes(&self) -> u32 {
        if self.kind == CMD_WRITE {
            self.len_bytes
        } else {
            0
        }
    }
}

/// What a valid request asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmdKind {
    Read,
    Write,
    Flush,
    Trim,
    WriteZeroes,
    /// Disconnect: finish what is in flight, then close.
    Disc,
    /// A hint to load the range (answered at once: members are read on demand).
    Cache,
    /// `base:allocation` block status of the range.
    BlockStatus,
}

/// A request checked against the export: its range lies inside it and is aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Command {
    pub kind: CmdKind,
    pub cookie: u64,
    pub offset_bytes: u64,
    pub len_bytes: u32,
    pub fua: bool,
    /// WRITE_ZEROES with NBD_CMD_FLAG_FAST_ZERO (the export serves it fast).
    pub fast_zero: bool,
    /// WRITE_ZEROES with NBD_CMD_FLAG_NO_HOLE (allocate, do not punch).
    pub no_hole: bool,
    /// BLOCK_STATUS with NBD_CMD_FLAG_REQ_ONE (one descriptor, not past the range).
    pub req_one: bool,
}

impl Command {
    /// The range a read covers on the volume: the request widened to whole blocks of
    /// `block_bytes` (a power of two). A read need not be aligned (the protocol's default
    /// minimum block is 1 byte); the server reads the blocks around it and sends the bytes
    /// asked for. Returns (offset, length, bytes to skip at its start).
    pub fn aligned_span(&self, block_bytes: u32) -> (u64, u64, u32) {
        let b = u64::from(block_bytes.max(1));
        let start = self.offset_bytes / b * b;
        let end = (self.offset_bytes + u64::from(self.len_bytes)).div_ceil(b) * b;
        (start, end - start, (self.offset_bytes - start) as u32)
    }
}

/// A request refused with an NBD error (the connection goes on; a write's payload is
/// discarded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub cookie: u64,
    pub errno: u32,
}

/// Checks a request against the export: `Ok(Ok(cmd))` to serve, `Ok(Err(refusal))` to answer
/// with an error (a write's payload is then read and dropped by the loop, so the connection
/// stays in step, whatever its length). `neg`: what was negotiated (block status needs
/// `base:allocation`). The `Result` is kept for violations that must close; none is left here.
pub fn check(
    req: &RawRequest,
    export: &Export,
    neg: &Negotiated,
) -> Result<Result<Command, Refusal>, ProtoError> {
    let refuse = |errno| {
        Ok(Err(Refusal {
            cookie: req.cookie,
            errno,
        }))
    };
    let kind = match req.kind {
        CMD_READ => CmdKind::Read,
        CMD_WRITE => CmdKind::Write,
        CMD_FLUSH => CmdKind::Flush,
        CMD_TRIM => CmdKind::Trim,
        CMD_WRITE_ZEROES => CmdKind::WriteZeroes,
        CMD_DISC => CmdKind::Disc,
        CMD_CACHE => CmdKind::Cache,
        CMD_BLOCK_STATUS if neg.base_allocation && neg.structured => CmdKind::BlockStatus,
        _ => return refuse(EINVAL),
    };
    let known =
        CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_DF | CMD_FLAG_REQ_ONE | CMD_FLAG_FAST_ZERO;
    if req.flags & !known != 0 {
        return refuse(EINVAL);
    }
    let fast_zero = req.flags & CMD_FLAG_FAST_ZERO != 0;
    if fast_zero && kind != CmdKind::WriteZeroes {
        return refuse(EINVAL);
    }
    let fua = req.flags & CMD_FLAG_FUA != 0;
    let cmd = Command {
        kind,
        cookie: req.cookie,
        offset_bytes: req.offset_bytes,
        len_bytes: req.len_bytes,
        fua,
        fast_zero,
        no_hole: req.flags & CMD_FLAG_NO_HOLE != 0,
        req_one: req.flags & CMD_FLAG_REQ_ONE != 0,
    };
    match kind {
        CmdKind::Flush | CmdKind::Disc => return Ok(Ok(cmd)),
        _ => {}
    }
    let writes = matches!(kind, CmdKind::Write | CmdKind::WriteZeroes | CmdKind::Trim);
    if writes && export.read_only {
        return refuse(EPERM);
    }
    if req.len_bytes == 0 {
        return refuse(EINVAL);
    }
    if matches!(kind, CmdKind::Read | CmdKind::Write) && req.len_bytes > export.payload_max_bytes {
        return refuse(EOVERFLOW);
    }
    let end = req.offset_bytes.checked_add(u64::from(req.len_bytes));
    if end.is_none_or(|e| e > export.size_bytes) {
        // doc/proto.md: ENOSPC for writes past the end, EINVAL for reads and trims.
        return refuse(if matches!(kind, CmdKind::Write | CmdKind::WriteZeroes) {
            ENOSPC
        } else {
            EINVAL
        });
    }
    if fast_zero && !export.fast_zero {
        // Fail fast and change nothing: the client writes the zeroes itself.
        return refuse(ENOTSUP);
    }
    match kind {
        // Reads (and the hints) are served at any alignment: the blocks around the range are
        // read and only the bytes asked for sent. The widened read must fit one payload.
        CmdKind::Read => {
            let (_, span, _) = cmd.aligned_span(export.block_min_bytes);
            if span > u64::from(export.payload_max_bytes) {
                return refuse(EOVERFLOW);
            }
        }
        CmdKind::Cache | CmdKind::BlockStatus => {}
        // Writes, trims and zeroes must be aligned to the advertised minimum block (a
        // read-modify-write of a partial block is not done): refused cleanly, data untouched.
        _ => {
            let min = u64::from(export.block_min_bytes);
            if !req.offset_bytes.is_multiple_of(min)
                || !u64::from(req.len_bytes).is_multiple_of(min)
            {
                return refuse(EINVAL);
            }
        }
    }
    Ok(Ok(cmd))
}

/// What the negotiation settled that requests are checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Negotiated {
    pub structured: bool,
    pub base_allocation: bool,
}

impl Negotiation {
    pub fn negotiated(&self) -> Negotiated {
        Negotiated {
            structured: self.structured,
            base_allocation: self.base_allocation,
        }
    }
}

/// A block status reply: one NBD_REPLY_TYPE_BLOCK_STATUS chunk for `base:allocation` with the
/// descriptors (length, status flags), done.
pub fn block_status_reply(out: &mut Vec<u8>, cookie: u64, extents: &[(u32, u32)]) {
    let len = 4 + 8 * extents.len() as u32;
    chunk_header(out, REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, cookie, len);
    out.extend_from_slice(&META_BASE_ALLOCATION_ID.to_be_bytes());
    for &(l, f) in extents {
        out.extend_from_slice(&l.to_be_bytes());
        out.extend_from_slice(&f.to_be_bytes());
    }
}

/// An OS errno as one of the values allowed on the wire (doc/proto.md "Error values").
pub fn wire_errno(os_errno: i32) -> u32 {
    match os_errno {
        1 | 13 | 30 => EPERM, // EPERM, EACCES, EROFS
        12 => ENOMEM,
        22 => EINVAL,
        28 | 27 | 122 => ENOSPC, // ENOSPC, EFBIG, EDQUOT
        75 => EOVERFLOW,
        95 => ENOTSUP,
        108 => ESHUTDOWN,
        _ => EIO,
    }
}

/// A reply header (simple or structured) for a request that moved no data back, or failed.
pub fn reply(out: &mut Vec<u8>, structured: bool, cookie: u64, errno: u32) {
    if !structured {
        out.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
        out.extend_from_slice(&errno.to_be_bytes());
        out.extend_from_slice(&cookie.to_be_bytes());
        return;
    }
    if errno == 0 {
        chunk_header(out, REPLY_FLAG_DONE, REPLY_TYPE_NONE, cookie, 0);
    } else {
        // Error chunk: error, message length (0), no message.
        chunk_header(out, REPLY_FLAG_DONE, REPLY_TYPE_ERROR, cookie, 6);
        out.extend_from_slice(&errno.to_be_bytes());
        out.extend_from_slice(&0u16.to_be_bytes());
    }
}

/// The header that precedes a successful read's `len_bytes` of data (the data follows it).
pub fn read_reply_header(
    out: &mut Vec<u8>,
    structured: bool,
    cookie: u64,
    offset_bytes: u64,
    len_bytes: u32,
) {
    if !structured {
        reply(out, false, cookie, 0);
        return;
    }
    chunk_header(
        out,
        REPLY_FLAG_DONE,
        REPLY_TYPE_OFFSET_DATA,
        cookie,
        8 + len_bytes,
    );
    out.extend_from_slice(&offset_bytes.to_be_bytes());
}

fn chunk_header(out: &mut Vec<u8>, flags: u16, kind: u16, cookie: u64, len: u32) {
    out.extend_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
}
