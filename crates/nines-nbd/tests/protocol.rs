//! The protocol against doc/proto.md byte layouts, and against hostile input (property tests:
//! whatever a client sends, the server answers with a well-framed reply carrying only valid
//! error values, or closes; nothing it accepts reaches outside the export).

use nines_nbd::consts::*;
use nines_nbd::*;
use proptest::prelude::*;

fn export() -> Export {
    Export {
        name: "vol".into(),
        description: "a test volume".into(),
        size_bytes: 1 << 20,
        block_min_bytes: 512,
        block_preferred_bytes: 4096,
        payload_max_bytes: 32 << 20,
        read_only: false,
        fast_zero: false,
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().unwrap())
}
fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes(b[..2].try_into().unwrap())
}
fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().unwrap())
}

/// Splits option replies into (option, type, data), asserting every one is well framed.
fn opt_replies(mut out: &[u8]) -> Vec<(u32, u32, Vec<u8>)> {
    let mut v = Vec::new();
    while !out.is_empty() {
        assert!(out.len() >= 20, "truncated option reply");
        assert_eq!(be64(out), REPLY_MAGIC);
        let len = be32(&out[16..]) as usize;
        assert!(
            out.len() >= 20 + len,
            "option reply shorter than its length"
        );
        v.push((
            be32(&out[8..]),
            be32(&out[12..]),
            out[20..20 + len].to_vec(),
        ));
        out = &out[20 + len..];
    }
    v
}

fn info_payload(name: &[u8], infos: &[u16]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name);
    d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
    for i in infos {
        d.extend_from_slice(&i.to_be_bytes());
    }
    d
}

#[test]
fn greeting_is_fixed_newstyle_with_no_zeroes() {
    let g = greeting();
    assert_eq!(&g[..8], b"NBDMAGIC");
    assert_eq!(&g[8..16], b"IHAVEOPT");
    assert_eq!(be16(&g[16..]), FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
}

#[test]
fn client_flags_unknown_bits_or_old_style_close() {
    assert_eq!(
        client_flags([0, 0, 0, 3]),
        Ok(ClientFlags { no_zeroes: true })
    );
    assert_eq!(
        client_flags([0, 0, 0, 1]),
        Ok(ClientFlags { no_zeroes: false })
    );
    assert_eq!(
        client_flags([0, 0, 0, 0]),
        Err(ProtoError::NotFixedNewstyle)
    );
    assert_eq!(client_flags([0, 0, 0, 5]), Err(ProtoError::ClientFlags(5)));
}

#[test]
fn go_answers_export_block_size_name_then_ack_and_transmits() {
    let mut n = Negotiation::new(ClientFlags { no_zeroes: true });
    let mut out = Vec::new();
    assert_eq!(
        n.option(OPT_STRUCTURED_REPLY, &[], &export(), &mut out),
        OptOutcome::Continue
    );
    assert!(n.structured);
    out.clear();
    let d = info_payload(b"vol", &[INFO_NAME, INFO_BLOCK_SIZE, 999]);
    assert_eq!(
        n.option(OPT_GO, &d, &export(), &mut out),
        OptOutcome::Transmit
    );
    let r = opt_replies(&out);
    assert_eq!(r.len(), 4);
    assert!(r.iter().all(|(o, _, _)| *o == OPT_GO));
    let (_, t, info) = &r[0];
    assert_eq!(
        (*t, be16(info), be64(&info[2..])),
        (REP_INFO, INFO_EXPORT, 1 << 20)
    );
    let flags = be16(&info[10..]);
    for f in [
        FLAG_HAS_FLAGS,
        FLAG_SEND_FLUSH,
        FLAG_SEND_FUA,
        FLAG_SEND_TRIM,
        FLAG_SEND_WRITE_ZEROES,
        FLAG_CAN_MULTI_CONN,
        FLAG_SEND_CACHE,
        FLAG_SEND_FAST_ZERO,
    ] {
        assert_ne!(flags & f, 0, "flag {f:#x} missing");
    }
    assert_eq!(flags & FLAG_READ_ONLY, 0);
    let (_, _, bs) = &r[1];
    assert_eq!(be16(bs), INFO_BLOCK_SIZE);
    assert_eq!(
        (be32(&bs[2..]), be32(&bs[6..]), be32(&bs[10..])),
        (512, 4096, 32 << 20)
    );
    assert_eq!(&r[2].2[..], [&INFO_NAME.to_be_bytes()[..], b"vol"].concat());
    assert_eq!((r[3].1, r[3].2.len()), (REP_ACK, 0));
}

fn meta_payload(name: &[u8], queries: &[&[u8]]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name);
    d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        d.extend_from_slice(&(q.len() as u32).to_be_bytes());
        d.extend_from_slice(q);
    }
    d
}

#[test]
fn meta_contexts_select_base_allocation_only_after_structured_replies() {
    let e = export();
    let mut n = Negotiation::new(ClientFlags { no_zeroes: true });
    let mut out = Vec::new();
    let set = meta_payload(b"vol", &[b"base:allocation", b"qemu:dirty-bitmap:x"]);
    n.option(OPT_SET_META_CONTEXT, &set, &e, &mut out);
    assert_eq!(opt_replies(&out)[0].1, REP_ERR_INVALID, "before structured");
    assert!(!n.base_allocation);
    n.option(OPT_STRUCTURED_REPLY, &[], &e, &mut out);
    // LIST with no query lists base:allocation (id 0), then ACK.
    out.clear();
    n.option(OPT_LIST_META_CONTEXT, &meta_payload(b"", &[]), &e, &mut out);
    let r = opt_replies(&out);
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].1, REP_META_CONTEXT);
    assert_eq!(
        &r[0].2[..],
        [&0u32.to_be_bytes()[..], b"base:allocation"].concat()
    );
    assert_eq!(r[1].1, REP_ACK);
    assert!(!n.base_allocation, "LIST selects nothing");
    // SET selects it with its id; the unknown namespace is ignored.
    out.clear();
    n.option(OPT_SET_META_CONTEXT, &set, &e, &mut out);
    let r = opt_replies(&out);
    assert_eq!(r.len(), 2);
    assert_eq!(
        &r[0].2[..],
        [
            &META_BASE_ALLOCATION_ID.to_be_bytes()[..],
            b"base:allocation"
        ]
        .concat()
    );
    assert!(n.base_allocation);
    // A SET selecting nothing, or malformed, or for another export, clears the selection.
    for (d, kind) in [
        (meta_payload(b"vol", &[]), REP_ACK),
        (
            meta_payload(b"other", &[b"base:allocation"]),
            REP_ERR_UNKNOWN,
        ),
        (set[..set.len() - 1].to_vec(), REP_ERR_INVALID),
    ] {
        n.option(OPT_SET_META_CONTEXT, &set, &e, &mut out);
        assert!(n.base_allocation);
        out.clear();
        n.option(OPT_SET_META_CONTEXT, &d, &e, &mut out);
        assert_eq!(opt_replies(&out).last().unwrap().1, kind);
        assert!(!n.base_allocation);
    }
}

#[test]
fn block_status_reply_layout() {
    let mut out = Vec::new();
    block_status_reply(&mut out, 7, &[(4096, STATE_HOLE | STATE_ZERO), (512, 0)]);
    assert_eq!(be32(&out), STRUCTURED_REPLY_MAGIC);
    assert_eq!(be16(&out[4..]), REPLY_FLAG_DONE);
    assert_eq!(be16(&out[6..]), REPLY_TYPE_BLOCK_STATUS);
    assert_eq!(be64(&out[8..]), 7);
    assert_eq!(be32(&out[16..]), 4 + 16);
    assert_eq!(be32(&out[20..]), META_BASE_ALLOCATION_ID);
    assert_eq!(
        (
            be32(&out[24..]),
            be32(&out[28..]),
            be32(&out[32..]),
            be32(&out[36..])
        ),
        (4096, 3, 512, 0)
    );
    assert_eq!(out.len(), 40);
}

#[test]
fn info_unknown_name_is_err_unknown_and_malformed_is_err_invalid() {
    let mut n = Negotiation::new(ClientFlags { no_zeroes: true });
    let mut out = Vec::new();
    assert_eq!(
        n.option(OPT_INFO, &info_payload(b"nope", &[]), &export(), &mut out),
        OptOutcome::Continue
    );
    assert_eq!(opt_replies(&out)[0].1, REP_ERR_UNKNOWN);
    out.clear();
    let mut bad = info_payload(b"vol", &[INFO_NAME]);
    bad.pop();
    n.option(OPT_GO, &bad, &export(), &mut out);
    assert_eq!(opt_replies(&out)[0].1, REP_ERR_INVALID);
    out.clear();
    // A name length pointing past the payload.
    n.option(OPT_GO, &[0xff, 0xff, 0xff, 0xff, 0, 0], &export(), &mut out);
    assert_eq!(opt_replies(&out)[0].1, REP_ERR_INVALID);
}

#[test]
fn list_abort_unknown_and_export_name() {
    let mut n = Negotiation::new(ClientFlags { no_zeroes: false });
    let mut out = Vec::new();
    n.option(OPT_LIST, &[], &export(), &mut out);
    let r = opt_replies(&out);
    assert_eq!(
        (r[0].1, &r[0].2[..]),
        (REP_SERVER, &[0, 0, 0, 3, b'v', b'o', b'l'][..])
    );
    assert_eq!(r[1].1, REP_ACK);
    out.clear();
    for opt in [OPT_STARTTLS, 4, 11, 0x7fff_ffff] {
        assert_eq!(
            n.option(opt, b"xyz", &export(), &mut out),
            OptOutcome::Continue
        );
        assert_eq!(opt_replies(&out)[0].1, REP_ERR_UNSUP);
        out.clear();
    }
    assert_eq!(
        n.option(OPT_EXPORT_NAME, b"other", &export(), &mut out),
        OptOutcome::Close
    );
    assert!(out.is_empty());
    assert_eq!(
        n.option(OPT_EXPORT_NAME, b"vol", &export(), &mut out),
        OptOutcome::Transmit
    );
    assert_eq!(
        out.len(),
        8 + 2 + 124,
        "size, flags and 124 zero bytes without NO_ZEROES"
    );
    assert_eq!(be64(&out), 1 << 20);
    out.clear();
    assert_eq!(
        n.option(OPT_ABORT, &[], &export(), &mut out),
        OptOutcome::Close
    );
    assert_eq!(opt_replies(&out)[0].1, REP_ACK);
}

#[test]
fn option_header_bad_magic_closes_and_too_big_is_flagged() {
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(b"IHAVEOPX");
    assert!(matches!(
        OptHeader::parse(&h),
        Err(ProtoError::OptionMagic(_))
    ));
    h[..8].copy_from_slice(b"IHAVEOPT");
    h[12..].copy_from_slice(&(OPT_DATA_MAX + 1).to_be_bytes());
    assert!(OptHeader::parse(&h).unwrap().too_big());
    let mut out = Vec::new();
    too_big_reply(OPT_GO, &mut out);
    assert_eq!(opt_replies(&out)[0].1, REP_ERR_TOO_BIG);
}

fn req(kind: u16, flags: u16, offset_bytes: u64, len_bytes: u32) -> RawRequest {
    RawRequest {
        flags,
        kind,
        cookie: 0xc00c1e,
        offset_bytes,
        len_bytes,
    }
}

#[test]
fn requests_past_the_end_unaligned_unknown_or_empty_are_refused_with_valid_errors() {
    let e = export();
    let n = Negotiated::default();
    let refused = |r: RawRequest| check(&r, &e, &n).unwrap().unwrap_err().errno;
    assert_eq!(refused(req(CMD_WRITE, 0, (1 << 20) - 512, 1024)), ENOSPC);
    assert_eq!(refused(req(CMD_WRITE_ZEROES, 0, 1 << 20, 512)), ENOSPC);
    assert_eq!(refused(req(CMD_READ, 0, 1 << 20, 512)), EINVAL);
    assert_eq!(refused(req(CMD_TRIM, 0, u64::MAX - 100, 512)), EINVAL);
    // Unaligned writes, trims and zeroes are refused; unaligned reads are served.
    assert_eq!(refused(req(CMD_WRITE, 0, 100, 512)), EINVAL);
    assert_eq!(refused(req(CMD_TRIM, 0, 0, 100)), EINVAL);
    assert_eq!(refused(req(CMD_READ, 0, 0, 0)), EINVAL);
    assert_eq!(refused(req(CMD_READ, 1 << 9, 0, 512)), EINVAL); // unknown flag
    assert_eq!(refused(req(CMD_READ, 0, 0, (32 << 20) + 512)), EOVERFLOW);
    // A write payload over the maximum is refused (the loop reads and drops it), not closed.
    assert_eq!(refused(req(CMD_WRITE, 0, 0, (32 << 20) + 512)), EOVERFLOW);
    assert_eq!(refused(req(CMD_WRITE, 0, 0, u32::MAX)), EOVERFLOW);
    // nbd-tester-client -o: offset 1, 1 MiB + 14, served as the blocks around it.
    let big = Export {
        size_bytes: 64 << 20,
        ..export()
    };
    let r = check(&req(CMD_READ, 0, 1, (1 << 20) + 14), &big, &n)
        .unwrap()
        .unwrap();
    assert_eq!(r.aligned_span(512), (0, (1 << 20) + 512, 1));
    // The widened read must fit one payload.
    assert_eq!(
        check(&req(CMD_READ, 0, 1, 32 << 20), &big, &n)
            .unwrap()
            .unwrap_err()
            .errno,
        EOVERFLOW
    );
    // CACHE is served; block status only after base:allocation was selected.
    assert_eq!(
        check(&req(CMD_CACHE, 0, 0, 512), &e, &n)
            .unwrap()
            .unwrap()
            .kind,
        CmdKind::Cache
    );
    assert_eq!(refused(req(CMD_BLOCK_STATUS, 0, 0, 512)), EINVAL);
    let meta = Negotiated {
        structured: true,
        base_allocation: true,
    };
    let bs = check(&req(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, 0, 512), &e, &meta)
        .unwrap()
        .unwrap();
    assert_eq!((bs.kind, bs.req_one), (CmdKind::BlockStatus, true));
    // Fast zero: only on WRITE_ZEROES; ENOTSUP at once where zeroes are not fast.
    assert_eq!(
        refused(req(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 0, 512)),
        ENOTSUP
    );
    assert_eq!(refused(req(CMD_WRITE, CMD_FLAG_FAST_ZERO, 0, 512)), EINVAL);
    let fast = Export {
        fast_zero: true,
        ..export()
    };
    assert!(
        check(
            &req(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 0, 512),
            &fast,
            &n
        )
        .unwrap()
        .unwrap()
        .fast_zero
    );
    let ok = check(&req(CMD_WRITE, CMD_FLAG_FUA, 4096, 8192), &e, &n)
        .unwrap()
        .unwrap();
    assert_eq!(
        (ok.kind, ok.fua, ok.cookie),
        (CmdKind::Write, true, 0xc00c1e)
    );
    let ro = Export {
        read_only: true,
        ..export()
    };
    assert_eq!(
        check(&req(CMD_WRITE, 0, 0, 512), &ro, &n)
            .unwrap()
            .unwrap_err()
            .errno,
        EPERM
    );
    assert_eq!(
        check(&req(CMD_FLUSH, 0, 0, 0), &e, &n)
            .unwrap()
            .unwrap()
            .kind,
        CmdKind::Flush
    );
}

#[test]
fn replies_have_the_documented_layout() {
    let mut out = Vec::new();
    reply(&mut out, false, 7, EIO);
    assert_eq!(
        (be32(&out), be32(&out[4..]), be64(&out[8..]), out.len()),
        (SIMPLE_REPLY_MAGIC, EIO, 7, 16)
    );
    out.clear();
    read_reply_header(&mut out, true, 9, 4096, 512);
    assert_eq!(be32(&out), STRUCTURED_REPLY_MAGIC);
    assert_eq!(
        (be16(&out[4..]), be16(&out[6..]), be64(&out[8..])),
        (REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, 9)
    );
    assert_eq!(
        (be32(&out[16..]), be64(&out[20..]), out.len()),
        (8 + 512, 4096, 28)
    );
    out.clear();
    reply(&mut out, true, 9, ENOSPC);
    assert_eq!(
        (be16(&out[6..]), be32(&out[16..]), be32(&out[20..])),
        (REPLY_TYPE_ERROR, 6, ENOSPC)
    );
}

const VALID_ERRORS: [u32; 8] = [
    EPERM, EIO, ENOMEM, EINVAL, ENOSPC, EOVERFLOW, ENOTSUP, ESHUTDOWN,
];

proptest! {
    /// Any option number with any payload: well-framed replies (or the EXPORT_NAME answer), and
    /// only known reply types.
    #[test]
    fn any_option_gets_a_framed_answer(opt in prop_oneof![0u32..16, any::<u32>()],
                                       data in proptest::collection::vec(any::<u8>(), 0..64),
                                       no_zeroes: bool) {
        let mut n = Negotiation::new(ClientFlags { no_zeroes });
        let mut out = Vec::new();
        let outcome = n.option(opt, &data, &export(), &mut out);
        if opt == OPT_EXPORT_NAME {
            let zeroes = if no_zeroes { 0 } else { 124 };
            prop_assert!(out.is_empty() || out.len() == 10 + zeroes);
        } else {
            let r = opt_replies(&out);
            prop_assert!(!r.is_empty());
            for (o, t, _) in &r {
                prop_assert_eq!(*o, opt);
                prop_assert!([REP_ACK, REP_SERVER, REP_INFO, REP_ERR_UNSUP, REP_ERR_INVALID, REP_ERR_UNKNOWN].contains(t));
            }
            if outcome == OptOutcome::Transmit {
                prop_assert_eq!(opt, OPT_GO);
                prop_assert_eq!(r.last().unwrap().1, REP_ACK);
            }
        }
    }

    /// Any request header: refused with a valid error, or accepted only inside the export
    /// (writes, trims and zeroes aligned; reads widened to blocks within one payload); never
    /// closed. Parsing a header with any magic other than the request magic closes.
    #[test]
    fn any_request_is_refused_validly_or_inside_the_export(kind in prop_oneof![0u16..10, any::<u16>()],
                                                           flags in prop_oneof![0u16..8, any::<u16>()],
                                                           offset in prop_oneof![0u64..(2 << 20), any::<u64>()],
                                                           len in prop_oneof![0u32..(2 << 20), any::<u32>()],
                                                           magic: u32) {
        let e = export();
        let r = RawRequest { flags, kind, cookie: 42, offset_bytes: offset, len_bytes: len };
        let mut bytes = r.encode();
        prop_assert_eq!(RawRequest::parse(&bytes), Ok(r));
        bytes[..4].copy_from_slice(&magic.to_be_bytes());
        prop_assert_eq!(RawRequest::parse(&bytes).is_err(), magic != REQUEST_MAGIC);
        let meta = Negotiated { structured: true, base_allocation: flags & 1 == 0 };
        match check(&r, &e, &meta) {
            Err(_) => prop_assert!(false, "a request closed the connection"),
            Ok(Err(refusal)) => {
                prop_assert_eq!(refusal.cookie, 42);
                prop_assert!(VALID_ERRORS.contains(&refusal.errno));
            }
            Ok(Ok(cmd)) => match cmd.kind {
                CmdKind::Flush | CmdKind::Disc => {}
                CmdKind::Read | CmdKind::Cache | CmdKind::BlockStatus => {
                    prop_assert!(cmd.len_bytes > 0);
                    prop_assert!(cmd.offset_bytes + u64::from(cmd.len_bytes) <= e.size_bytes);
                    let (start, span, skip) = cmd.aligned_span(512);
                    prop_assert!(start % 512 == 0 && span % 512 == 0 && start + span <= e.size_bytes);
                    prop_assert!(span <= u64::from(e.payload_max_bytes));
                    prop_assert_eq!(start + u64::from(skip), cmd.offset_bytes);
                }
                _ => {
                    prop_assert!(cmd.len_bytes > 0);
                    prop_assert!(cmd.offset_bytes + u64::from(cmd.len_bytes) <= e.size_bytes);
                    prop_assert_eq!(cmd.offset_bytes % 512, 0);
                    prop_assert_eq!(cmd.len_bytes % 512, 0);
                }
            },
        }
    }

    #[test]
    fn every_os_errno_maps_to_a_valid_wire_error(errno: i32) {
        prop_assert!(VALID_ERRORS.contains(&wire_errno(errno)));
    }
}

fn named(name: &str, size_bytes: u64) -> Export {
    Export {
        name: name.into(),
        size_bytes,
        ..export()
    }
}

#[test]
fn starttls_is_unsupported_when_off_acknowledged_once_when_on() {
    let c = ClientFlags { no_zeroes: true };
    let mut out = Vec::new();
    let mut off = Negotiation::new(c);
    assert_eq!(
        off.option(OPT_STARTTLS, &[], &export(), &mut out),
        OptOutcome::Continue
    );
    assert_eq!(opt_replies(&out)[0].1, REP_ERR_UNSUP);
    out.clear();
    let mut on = Negotiation::new(c).with_tls(TlsMode::On);
    // With data: invalid, TLS not started.
    assert_eq!(
        on.option(OPT_STARTTLS, b"x", &export(), &mut out),
        OptOutcome::Continue
    );
    assert_eq!(opt_replies(&out)[0].1, REP_ERR_INVALID);
    out.clear();
    // Structured replies negotiated in plain text are forgotten once TLS runs.
    on.option(OPT_STRUCTURED_REPLY, &[], &export(), &mut out);
    assert!(on.structured);
    out.clear();
    assert_eq!(
        on.option(OPT_STARTTLS, &[], &export(), &mut out),
        OptOutcome::StartTls
    );
    let r = opt_replies(&out);
    assert_eq!((r.len(), r[0].0, r[0].1), (1, OPT_STARTTLS, REP_ACK));
    assert!(!on.tls_active());
    on.tls_started();
    assert!(on.tls_active() && !on.structured);
    out.clear();
    assert_eq!(
        on.option(OPT_STARTTLS, &[], &export(), &mut out),
        OptOutcome::Continue
    );
    assert_eq!(opt_replies(&out)[0].1, REP_ERR_INVALID);
    // TLS on but optional: a plain client is served.
    let mut plain = Negotiation::new(c).with_tls(TlsMode::On);
    out.clear();
    assert_eq!(
        plain.option(OPT_GO, &info_payload(b"", &[]), &export(), &mut out),
        OptOutcome::Transmit
    );
}

#[test]
fn tls_require_refuses_every_option_but_starttls_and_abort_before_tls() {
    let c = ClientFlags { no_zeroes: true };
    let mut out = Vec::new();
    let mut n = Negotiation::new(c).with_tls(TlsMode::Require);
    for (opt, data) in [
        (OPT_LIST, vec![]),
        (OPT_INFO, info_payload(b"", &[])),
        (OPT_GO, info_payload(b"vol", &[])),
        (OPT_STRUCTURED_REPLY, vec![]),
        (OPT_LIST_META_CONTEXT, meta_payload(b"", &[])),
        (4, vec![]),
        (0x7fff_ffff, vec![1, 2]),
    ] {
        out.clear();
        assert_eq!(
            n.option(opt, &data, &export(), &mut out),
            OptOutcome::Continue,
            "option {opt}"
        );
        let r = opt_replies(&out);
        assert_eq!((r.len(), r[0].0, r[0].1), (1, opt, REP_ERR_TLS_REQD));
    }
    assert!(!n.structured, "a refused option changes nothing");
    out.clear();
    assert_eq!(
        n.option(OPT_EXPORT_NAME, b"vol", &export(), &mut out),
        OptOutcome::Close
    );
    assert!(out.is_empty(), "EXPORT_NAME has no error reply: closed");
    out.clear();
    assert_eq!(
        n.option(OPT_STARTTLS, &[], &export(), &mut out),
        OptOutcome::StartTls
    );
    n.tls_started();
    out.clear();
    assert_eq!(
        n.option(OPT_GO, &info_payload(b"vol", &[]), &export(), &mut out),
        OptOutcome::Transmit
    );
    assert_eq!(n.export_index(), Some(0));
    let mut a = Negotiation::new(c).with_tls(TlsMode::Require);
    out.clear();
    assert_eq!(
        a.option(OPT_ABORT, &[], &export(), &mut out),
        OptOutcome::Close
    );
    assert_eq!(opt_replies(&out)[0].1, REP_ACK);
}

#[test]
fn several_exports_are_listed_and_chosen_by_name() {
    let exports = [
        named("a", 1 << 20),
        named("b", 2 << 20),
        named("c", 3 << 20),
    ];
    let c = ClientFlags { no_zeroes: true };
    let mut out = Vec::new();
    let mut n = Negotiation::new(c);
    n.option_in(OPT_LIST, &[], &exports, &mut out);
    let r = opt_replies(&out);
    let names: Vec<_> = r
        .iter()
        .filter(|(_, t, _)| *t == REP_SERVER)
        .map(|(_, _, d)| (be32(d), d[4..].to_vec()))
        .collect();
    assert_eq!(
        names,
        vec![(1, b"a".to_vec()), (1, b"b".to_vec()), (1, b"c".to_vec())]
    );
    assert_eq!(r.last().unwrap().1, REP_ACK);
    // INFO on each name answers that export's size; an unknown name is ERR_UNKNOWN.
    for (i, e) in exports.iter().enumerate() {
        out.clear();
        assert_eq!(
            n.option_in(
                OPT_INFO,
                &info_payload(e.name.as_bytes(), &[]),
                &exports,
                &mut out
            ),
            OptOutcome::Continue
        );
        let r = opt_replies(&out);
        assert_eq!(be64(&r[0].2[2..]), (i as u64 + 1) << 20);
    }
    out.clear();
    n.option_in(OPT_GO, &info_payload(b"d", &[]), &exports, &mut out);
    assert_eq!(opt_replies(&out)[0].1, REP_ERR_UNKNOWN);
    assert_eq!(n.export_index(), None);
    // Meta contexts of an unknown export: ERR_UNKNOWN too; of a known one: answered.
    n.option_in(OPT_STRUCTURED_REPLY, &[], &exports, &mut out);
    out.clear();
    n.option_in(
        OPT_LIST_META_CONTEXT,
        &meta_payload(b"zz", &[]),
        &exports,
        &mut out,
    );
    assert_eq!(opt_replies(&out)[0].1, REP_ERR_UNKNOWN);
    out.clear();
    n.option_in(
        OPT_LIST_META_CONTEXT,
        &meta_payload(b"c", &[]),
        &exports,
        &mut out,
    );
    assert_eq!(opt_replies(&out)[0].1, REP_META_CONTEXT);
    out.clear();
    assert_eq!(
        n.option_in(OPT_GO, &info_payload(b"b", &[]), &exports, &mut out),
        OptOutcome::Transmit
    );
    assert_eq!(n.export_index(), Some(1));
    // The empty name is the first export; EXPORT_NAME picks by name, unknown closes.
    let mut m = Negotiation::new(c);
    out.clear();
    assert_eq!(
        m.option_in(OPT_EXPORT_NAME, b"", &exports, &mut out),
        OptOutcome::Transmit
    );
    assert_eq!((m.export_index(), be64(&out)), (Some(0), 1 << 20));
    let mut m = Negotiation::new(c);
    out.clear();
    assert_eq!(
        m.option_in(OPT_EXPORT_NAME, b"c", &exports, &mut out),
        OptOutcome::Transmit
    );
    assert_eq!((m.export_index(), be64(&out)), (Some(2), 3 << 20));
    let mut m = Negotiation::new(c);
    assert_eq!(
        m.option_in(OPT_EXPORT_NAME, b"x", &exports, &mut out),
        OptOutcome::Close
    );
}

proptest! {
    /// Under --tls require, no option sent before TLS reaches an export: every one but
    /// STARTTLS and ABORT is answered NBD_REP_ERR_TLS_REQD (EXPORT_NAME closes), and nothing
    /// is negotiated.
    #[test]
    fn tls_require_lets_nothing_through_before_tls(opt in prop_oneof![0u32..16, any::<u32>()],
                                                   data in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut n = Negotiation::new(ClientFlags { no_zeroes: true }).with_tls(TlsMode::Require);
        let mut out = Vec::new();
        let outcome = n.option_in(opt, &data, &[export(), named("b", 4096)], &mut out);
        prop_assert_eq!(n.export_index(), None);
        prop_assert!(!n.structured && !n.base_allocation);
        match opt {
            OPT_EXPORT_NAME => {
                prop_assert_eq!(outcome, OptOutcome::Close);
                prop_assert!(out.is_empty());
            }
            OPT_ABORT => prop_assert_eq!(outcome, OptOutcome::Close),
            OPT_STARTTLS if data.is_empty() => prop_assert_eq!(outcome, OptOutcome::StartTls),
            OPT_STARTTLS => prop_assert_eq!(opt_replies(&out)[0].1, REP_ERR_INVALID),
            _ => {
                prop_assert_eq!(outcome, OptOutcome::Continue);
                let r = opt_replies(&out);
                prop_assert_eq!(r.len(), 1);
                prop_assert_eq!(r[0].1, REP_ERR_TLS_REQD);
            }
        }
    }
}
