//! Scenarios of the transport over the provider: small calls, DDP at the padding sizes, Long
//! Call and Long Reply, credits, RDMA_ERROR answers, stale handles, Send With Invalidate.

use alloc::format;
use alloc::vec::Vec;

use krpc_rdma::provider::{Provider, WcStatus};
use krpc_rdma::transport::{CallError, ReplySpec, TransportConfig};
use krpc_rdma::wire::{CmFlags, CmPrivateData, ErrorBody, Segment};

use crate::check::{bytes_eq, ensure, eq, fail, At, Failure, Outcome};
use crate::data::{
    pad, pattern, read_call, read_reply, read_reply_bytes, write_call, xdr_call, Kind,
};
use crate::fixture::{Feature, Fixture, Limits, Setup};
use crate::heap::chunk_lists;
use crate::pair::{reply_for, End, Pair, Side};
use crate::raw::{call, call_header, error_of, handles_of, read_chunk, words, RawPeer};

/// DDP sizes around the XDR roundup and page boundaries.
pub const PADDING_SIZES: &[usize] = &[0, 1, 2, 3, 4, 4095, 4096, 4097, 65536 + 3, 1 << 20];

/// 50 small calls one after the other, call and reply verified byte for byte.
pub fn small_calls<F: Fixture>(fx: &mut F) -> Outcome {
    let mut p = Pair::with(fx, TransportConfig::default())?;
    let n = 50u32;
    for i in 0..n {
        let expect = xdr_call(i, b"hello world!")
            .at("call")?
            .to_vec()
            .at("bytes")?;
        let reply = p.rpc(
            xdr_call(i, b"hello world!").at("call")?,
            ReplySpec::inline(512),
            &mut |c| {
                bytes_eq(
                    "call as handed up",
                    &expect,
                    &c.call.to_vec().at("call bytes")?,
                )?;
                xdr_call(c.xid, b"pong").at("reply")
            },
        )?;
        bytes_eq(
            "reply",
            &xdr_call(i, b"pong").at("reply")?.to_vec().at("bytes")?,
            &reply.to_vec().at("bytes")?,
        )?;
    }
    eq(
        "requester messages received",
        u64::from(n),
        p.req.counters().messages_received,
    )?;
    eq(
        "responder messages sent",
        u64::from(n),
        p.resp.counters().messages_sent,
    )?;
    p.check_clean("after the calls")?;
    p.finish()
}

/// NFS-WRITE-like calls at every padding size: the data goes in a read chunk (RDMA Read by
/// the responder) once the call is too large for inline, and arrives byte-exact in the
/// shape NFS consumes (`[XDR][marker][page mbufs][pad][XDR]`), with nothing copied.
pub fn ddp_write_padding_sizes<F: Fixture>(fx: &mut F) -> Outcome {
    let mut p = Pair::with(fx, TransportConfig::default())?;
    for (i, &size) in PADDING_SIZES.iter().enumerate() {
        let step = format!("WRITE of {size} bytes");
        let xid = 0x100 + i as u32;
        let data = pattern(size, i as u8);
        let call = write_call(&p.l.pa, xid, &data).at("call")?;
        let expect = call.to_vec().at("bytes")?;
        let (rc_a, rc_b) = (p.req.counters().read_chunks, p.resp.counters().read_chunks);
        p.rpc(call, ReplySpec::inline(256), &mut |c| {
            bytes_eq(&step, &expect, &c.call.to_vec().at("call bytes")?)?;
            if size > 900 {
                let kinds: Vec<_> = c.call.mbufs().collect();
                let marker = kinds.iter().position(|m| m.is_ddp_marker()).at("marker")?;
                let regions: Vec<_> = c.call.ddp_regions().collect();
                eq(format!("{step}: regions"), 1, regions.len())?;
                let r = regions.first().at("region")?;
                eq(
                    format!("{step}: region (offset, len)"),
                    (16, size),
                    (r.offset, r.len),
                )?;
                ensure(
                    kinds.get(marker + 1).is_some_and(|m| m.is_pages()),
                    &step,
                    "page mbufs after the marker",
                )?;
                if pad(size) > 0 {
                    let m = kinds.get(marker + 1 + r.page_mbufs).at("pad mbuf")?;
                    eq(format!("{step}: pad"), [0u8; 3].get(..pad(size)), m.data())?;
                }
            }
            xdr_call(c.xid, b"ok").at("reply")
        })?;
        if size > 900 {
            eq(
                format!("{step}: requester read chunks"),
                rc_a + 1,
                p.req.counters().read_chunks,
            )?;
            eq(
                format!("{step}: responder read chunks"),
                rc_b + 1,
                p.resp.counters().read_chunks,
            )?;
        }
        eq(
            format!("{step}: requester copied"),
            0,
            p.req.counters().ddp_payload_copied_bytes,
        )?;
        eq(
            format!("{step}: responder copied"),
            0,
            p.resp.counters().ddp_payload_copied_bytes,
        )?;
    }
    p.check_clean("after the WRITEs")?;
    p.finish()
}

/// NFS-READ-like calls at every padding size: the data comes back by RDMA Write into the
/// caller's pages (a write chunk) once the reply is too large for inline, byte-exact.
pub fn ddp_read_padding_sizes<F: Fixture>(fx: &mut F) -> Outcome {
    let mut p = Pair::with(fx, TransportConfig::default())?;
    let pb = p.l.pb.clone();
    for (i, &size) in PADDING_SIZES.iter().enumerate() {
        let step = format!("READ of {size} bytes");
        let xid = 0x200 + i as u32;
        let data = pattern(size, 3);
        let (call, spec) = read_call(&p.l.pa, xid, size).at("call")?;
        let (wc, copied) = (
            p.req.counters().write_chunks,
            p.resp.counters().ddp_payload_copied_bytes,
        );
        let reply = p.rpc(call, spec, &mut |c| {
            read_reply(&pb, c.xid, &data).at("reply")
        })?;
        bytes_eq(
            &step,
            &read_reply_bytes(xid, &data),
            &reply.to_vec().at("bytes")?,
        )?;
        if size + 64 > 996 {
            let regions: Vec<_> = reply.ddp_regions().collect();
            eq(
                format!("{step}: region lengths"),
                alloc::vec![size],
                regions.iter().map(|r| r.len).collect(),
            )?;
            eq(
                format!("{step}: write chunks"),
                wc + 1,
                p.req.counters().write_chunks,
            )?;
            eq(
                format!("{step}: responder copied"),
                copied,
                p.resp.counters().ddp_payload_copied_bytes,
            )?;
        }
    }
    p.check_clean("after the READs")?;
    p.finish()
}

/// A call too large for inline even without DDP goes as a Long Call (position-zero read
/// chunk, handed up as page mbufs); a reply too large goes as a Long Reply (reply chunk).
pub fn long_call_and_long_reply<F: Fixture>(fx: &mut F) -> Outcome {
    let mut p = Pair::with(fx, TransportConfig::default())?;
    let body = pattern(6000, 9);
    let expect = xdr_call(42, &body).at("call")?.to_vec().at("bytes")?;
    let big = pattern(12_000, 5);
    let reply = p.rpc(
        xdr_call(42, &body).at("call")?,
        ReplySpec::inline(20_000),
        &mut |c| {
            bytes_eq("long call", &expect, &c.call.to_vec().at("bytes")?)?;
            ensure(
                c.call.mbufs().all(|m| m.is_pages()),
                "long call",
                "page mbufs only",
            )?;
            xdr_call(c.xid, &big).at("reply")
        },
    )?;
    bytes_eq(
        "long reply",
        &xdr_call(42, &big).at("reply")?.to_vec().at("bytes")?,
        &reply.to_vec().at("bytes")?,
    )?;
    let (a, b) = (*p.req.counters(), *p.resp.counters());
    eq(
        "long calls (requester, responder)",
        (1, 1),
        (a.long_calls, b.long_calls),
    )?;
    eq(
        "long replies (requester, responder)",
        (1, 1),
        (a.long_replies, b.long_replies),
    )?;
    ensure(
        a.pullup_bytes >= 6004,
        "pull-up",
        "the whole call pulled up into pages",
    )?;
    eq("reply chunks", 1, a.reply_chunks)?;
    drop(reply);
    p.check_clean("after the call")?;
    p.finish()
}

/// 256 calls through 32 credits: the initial grant of 1 stalls, then exactly 32 calls are
/// in flight at once and never more than granted; refusals are back-pressure, not errors.
pub fn credits_32_in_flight<F: Fixture>(fx: &mut F) -> Outcome {
    let cfg = TransportConfig {
        max_requests: 32,
        ..TransportConfig::default()
    };
    let mut p = Pair::with(fx, cfg)?;
    let total = 256u32;
    let (mut sent, mut done, mut refused, mut max_out) = (0u32, 0usize, 0u32, 0u32);
    while done < total as usize {
        while sent < total {
            let call = xdr_call(1000 + sent, b"c").at("call")?;
            match p.req.call(&mut p.l.a, call, ReplySpec::inline(64)) {
                Ok(()) => sent += 1,
                Err(rej) => {
                    ensure(
                        matches!(rej.error, CallError::NoCredit | CallError::WouldBlock),
                        "refusal",
                        "NoCredit or WouldBlock",
                    )?;
                    refused += 1;
                    break;
                }
            }
            ensure(
                p.req.outstanding() <= p.req.credits_granted(),
                "outstanding",
                "within the grant",
            )?;
            max_out = max_out.max(p.req.outstanding());
        }
        for (xid, e) in p.run(1, &mut |c| xdr_call(c.xid, b"r").at("reply"))? {
            ensure(
                matches!(e, End::Reply(_)),
                format!("call {xid:#x}"),
                "a reply",
            )?;
            done += 1;
        }
    }
    ensure(
        refused > 0,
        "credits",
        "the initial grant of 1 stalled a call",
    )?;
    eq("most calls in flight", 32, max_out)?;
    ensure(
        p.req.counters().credit_stalls > 0,
        "credit stalls",
        "counted",
    )?;
    p.check_clean("after the calls")?;
    p.finish()
}

/// 128 calls really in flight at once (credits 128, Linux's default): accepted without the
/// responder running once the grant was learnt; the 129th is refused for lack of credit.
pub fn credits_128_in_flight<F: Fixture>(fx: &mut F) -> Outcome {
    let cfg = TransportConfig {
        max_requests: 128,
        ..TransportConfig::default()
    };
    let limits = Limits {
        send_bufs: Some(160),
        recv_bufs: Some(160),
        max_send_wr: Some(512),
        ..Limits::default()
    };
    let mut p = Pair::new(
        fx,
        &Setup {
            req: cfg,
            resp: cfg,
            limits,
        },
    )?;
    p.rpc(
        xdr_call(1, b"hello").at("call")?,
        ReplySpec::inline(64),
        &mut |c| xdr_call(c.xid, b"r").at("reply"),
    )?;
    eq("grant after one reply", 128, p.req.credits_granted())?;
    for i in 0..128u32 {
        p.call(
            xdr_call(100 + i, b"c").at("call")?,
            ReplySpec::inline(64),
            &format!("call {i} of 128"),
        )?;
        ensure(
            p.req.outstanding() <= p.req.credits_granted(),
            "outstanding",
            "within the grant",
        )?;
    }
    eq("outstanding", 128, p.req.outstanding())?;
    let rej = p.req.call(
        &mut p.l.a,
        xdr_call(999, b"c").at("call")?,
        ReplySpec::inline(64),
    );
    eq(
        "the 129th call",
        Some(CallError::NoCredit),
        rej.err().map(|r| r.error),
    )?;
    let ended = p.run(128, &mut |c| xdr_call(c.xid, b"r").at("reply"))?;
    eq(
        "replies",
        128,
        ended
            .iter()
            .filter(|(_, e)| matches!(e, End::Reply(_)))
            .count(),
    )?;
    eq("outstanding after", 0, p.req.outstanding())?;
    p.check_clean("after the calls")?;
    p.finish()
}

/// RFC 8166 §4.5 and §4.6, answered to raw malformed Sends: short messages, RDMA_DONE and a
/// requester's RDMA_ERROR are discarded; version 2 gets ERR_VERS; RDMA_MSGP, undefined
/// procedures and a read chunk beyond the payload get ERR_CHUNK — each carrying the XID;
/// the connection stays up for a valid call.
pub fn err_vers_and_err_chunk<F: Fixture>(fx: &mut F) -> Outcome {
    let mut h = RawPeer::new(fx, TransportConfig::default())?;
    // The grant an answer carries: the receives posted, less the one it answers.
    let grant = h.p.resp.grant() - 1;
    let mut minimal = words(3, 1, 0);
    minimal.extend_from_slice(&[0; 12]);
    for len in 4..28 {
        eq(
            format!("{len}-byte message: answers"),
            0,
            h.exchange(minimal.get(..len).at("slice")?)?.len(),
        )?;
    }
    let mut done = words(4, 1, 3);
    done.extend_from_slice(&[0; 12]);
    eq("RDMA_DONE: answers", 0, h.exchange(&done)?.len())?;
    let mut err = words(5, 1, 4);
    err.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    eq("RDMA_ERROR/ERR_CHUNK: answers", 0, h.exchange(&err)?.len())?;
    let mut err = words(6, 1, 4);
    err.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0]);
    eq("RDMA_ERROR/ERR_VERS: answers", 0, h.exchange(&err)?.len())?;
    let mut v2 = words(7, 2, 0);
    v2.extend_from_slice(&[0; 12]);
    let ans = h.exchange(&v2)?;
    eq("version 2: answers", 1, ans.len())?;
    eq(
        "version 2: ERR_VERS",
        (7, 2, grant, ErrorBody::Vers { low: 1, high: 1 }),
        error_of(ans.first().at("answer")?)?,
    )?;
    for (xid, proc_) in [(8, 2), (9, 5), (10, 0xffff_ffff)] {
        let mut m = words(xid, 1, proc_);
        m.extend_from_slice(&[0; 12]);
        let ans = h.exchange(&m)?;
        eq(format!("proc {proc_}: answers"), 1, ans.len())?;
        eq(
            format!("proc {proc_}: ERR_CHUNK"),
            (xid, 1, grant, ErrorBody::Chunk),
            error_of(ans.first().at("answer")?)?,
        )?;
    }
    // A read chunk at a position beyond the inline payload: ERR_CHUNK (a semantic check).
    let l = read_chunk(
        16,
        &[Segment {
            handle: 0x100,
            length: 9,
            offset: 0,
        }],
    )?;
    let m = call(11, &l, &[0, 0, 0, 11, 1, 2, 3, 4])?;
    let ans = h.exchange(&m)?;
    eq(
        "read chunk beyond the payload: ERR_CHUNK",
        (11, 1, grant, ErrorBody::Chunk),
        error_of(ans.first().at("answer")?)?,
    )?;
    let c = *h.p.resp.counters();
    eq("ERR_VERS sent", 1, c.err_vers_sent)?;
    eq("ERR_CHUNK sent", 4, c.err_chunk_sent)?;
    eq("refusals counted", 24 + 1 + 2 + 1 + 3 + 1, c.bad_messages)?;
    // The connection stays up: a valid call is handed up and answered.
    let m = call(12, &*chunk_lists()?, &[0, 0, 0, 12, b'p', b'i', b'n', b'g'])?;
    eq(
        "valid call: answers before the reply",
        0,
        h.exchange(&m)?.len(),
    )?;
    eq("valid call: handed up", 1, h.held.len())?;
    eq("valid call: answered", 1, h.answer_all()?.len())?;
    eq("connection lost", false, h.lost)?;
    h.p.check_clean("after the refusals")?;
    h.p.finish()
}

/// The handles the requester advertised in its call `xid`, from its send buffers:
/// (handle, offset, writable).
///
/// # Errors
/// No header of that call was found.
#[inline(never)]
pub fn advertised<F: Fixture>(
    p: &mut Pair<'_, F>,
    xid: u32,
) -> Result<Vec<(u32, u64, bool)>, Failure> {
    for b in 0..p.l.a.resources().send_bufs {
        let Ok(buf) = p.l.a.send_buf(b) else { continue };
        let Some(h) = call_header(buf, xid) else {
            continue;
        };
        let mut out = Vec::new();
        handles_of(&h, &mut out);
        return Ok(out);
    }
    Err(fail(
        format!("advertised handles of {xid:#x}"),
        "the call's header",
        "none",
    ))
}

/// Probe the first advertised handle from the responder's side, after everything else was
/// checked: an RDMA Read (or Write, for a writable handle) must fail.
#[inline(never)]
fn probe_stale<F: Fixture>(
    p: &mut Pair<'_, F>,
    handles: &[(u32, u64, bool)],
    step: &str,
) -> Outcome {
    let &(h, off, write) = handles.first().at(format!("{step}: a handle"))?;
    let st = if write {
        p.l.probe_write(Side::B, h, off, 64)?
    } else {
        p.l.probe_read(Side::B, h, off, 64)?
    };
    eq(
        format!("{step}: RDMA with the stale handle {h:#x}"),
        WcStatus::RemoteAccess,
        st,
    )
}

/// No handle survives an RPC: after the reply of a WRITE (read chunk) and of a READ (write
/// chunk) was reported, an RDMA with the handle the call advertised fails.
pub fn stale_handles_refused_after_rpc<F: Fixture>(fx: &mut F) -> Outcome {
    for read in [false, true] {
        let mut p = Pair::with(fx, TransportConfig::default())?;
        let pb = p.l.pb.clone();
        let data = pattern(100_000, 1);
        let (call, spec) = if read {
            read_call(&p.l.pa, 5, data.len()).at("call")?
        } else {
            (
                write_call(&p.l.pa, 5, &data).at("call")?,
                ReplySpec::inline(128),
            )
        };
        p.call(call, spec, "call")?;
        let handles = advertised(&mut p, 5)?;
        ensure(!handles.is_empty(), "advertised handles", "at least one")?;
        let ended = p.run(1, &mut |c| {
            if read {
                read_reply(&pb, c.xid, &data).at("reply")
            } else {
                eq("call length", 4 + 8 + 4 + 100_000 + 8, c.call.len())?;
                xdr_call(c.xid, b"ok").at("reply")
            }
        })?;
        drop(reply_for(ended, 5)?);
        p.check_clean("after the RPC")?;
        probe_stale(&mut p, &handles, if read { "READ" } else { "WRITE" })?;
        p.finish()?;
    }
    Ok(())
}

/// Send With Invalidate end to end: offered in the requester's private data, used by the
/// responder with the first chunk's handle; the requester counts a remote invalidation and
/// Local-Invalidates only the rest; the handles are dead afterwards.
pub fn send_with_invalidate<F: Fixture>(fx: &mut F) -> Outcome {
    if !fx.supports(Feature::SendWithInvalidate) {
        return Ok(());
    }
    let mut p = Pair::with(fx, TransportConfig::default())?;
    let ours = CmPrivateData::parse(&p.req.private_data()).at("our private data")?;
    ensure(
        ours.flags.contains(CmFlags::REMOTE_INVALIDATE),
        "private data",
        "REMOTE_INVALIDATE offered",
    )?;
    ensure(
        p.resp.thresholds().send_with_invalidate,
        "responder",
        "Send With Invalidate negotiated",
    )?;
    let data = pattern(100_000, 6);
    // Each call in a step of its own (kernel stack frames stay under 1 KiB).
    swi_write(&mut p, &data)?;
    swi_read(&mut p)?;
    let handles = swi_write_and_read(&mut p, &data)?;
    p.check_clean("after the calls")?;
    probe_stale(&mut p, &handles, "remotely invalidated")?;
    p.finish()
}

/// (Send With Invalidate sent by the responder, remote and local invalidations of the
/// requester.)
#[inline(never)]
fn swi_count<F: Fixture>(p: &Pair<'_, F>) -> (u64, u64, u64) {
    let (a, b) = (p.req.counters(), p.resp.counters());
    (
        b.send_with_invalidate,
        a.remote_invalidations,
        a.local_invalidations,
    )
}

/// [`send_with_invalidate`], WRITE: the read chunk's handle.
#[inline(never)]
fn swi_write<F: Fixture>(p: &mut Pair<'_, F>, data: &[u8]) -> Outcome {
    p.call(
        write_call(&p.l.pa, 0x60, data).at("call")?,
        ReplySpec::inline(128),
        "WRITE",
    )?;
    eq("WRITE: handles", 1, advertised(p, 0x60)?.len())?;
    drop(reply_for(
        p.run(1, &mut |c| xdr_call(c.xid, b"done").at("reply"))?,
        0x60,
    )?);
    eq(
        "WRITE: (SWI sent, remote inv, local inv)",
        (1, 1, 0),
        swi_count(p),
    )
}

/// [`send_with_invalidate`], READ: the write chunk's handle.
#[inline(never)]
fn swi_read<F: Fixture>(p: &mut Pair<'_, F>) -> Outcome {
    let pb = p.l.pb.clone();
    let (call, spec) = Kind::Read(50_000).call(&p.l.pa, 0x61).at("call")?;
    p.call(call, spec, "READ")?;
    eq("READ: handles", 1, advertised(p, 0x61)?.len())?;
    let reply = reply_for(
        p.run(1, &mut |c| Kind::Read(50_000).reply(&pb, c.xid).at("reply"))?,
        0x61,
    )?;
    eq(
        "READ: region",
        Some(50_000),
        reply.ddp_regions().next().map(|r| r.len),
    )?;
    drop(reply);
    eq(
        "READ: (SWI sent, remote inv, local inv)",
        (2, 2, 0),
        swi_count(p),
    )
}

/// [`send_with_invalidate`], a read chunk and a write chunk: the first by Send With
/// Invalidate, the other locally; returns both handles.
#[inline(never)]
fn swi_write_and_read<F: Fixture>(
    p: &mut Pair<'_, F>,
    data: &[u8],
) -> Result<Vec<(u32, u64, bool)>, Failure> {
    let pb = p.l.pb.clone();
    let (_, spec) = read_call(&p.l.pa, 0x62, 50_000).at("spec")?;
    let spec = ReplySpec {
        max_reply: 50_000 + 64,
        ..spec
    };
    p.call(
        write_call(&p.l.pa, 0x62, data).at("call")?,
        spec,
        "WRITE+READ",
    )?;
    let handles = advertised(p, 0x62)?;
    eq("WRITE+READ: handles", 2, handles.len())?;
    drop(reply_for(
        p.run(1, &mut |c| Kind::Read(50_000).reply(&pb, c.xid).at("reply"))?,
        0x62,
    )?);
    eq(
        "WRITE+READ: (SWI sent, remote inv, local inv)",
        (3, 3, 1),
        swi_count(p),
    )?;
    Ok(handles)
}

/// With Send With Invalidate refused by the requester (RFC 8797 flag clear), the responder
/// never uses it and the requester invalidates everything locally.
pub fn send_with_invalidate_refused<F: Fixture>(fx: &mut F) -> Outcome {
    let req = TransportConfig {
        accept_remote_invalidate: false,
        ..TransportConfig::default()
    };
    let mut p = Pair::new(
        fx,
        &Setup {
            req,
            ..Setup::default()
        },
    )?;
    let ours = CmPrivateData::parse(&p.req.private_data()).at("our private data")?;
    ensure(
        !ours.flags.contains(CmFlags::REMOTE_INVALIDATE),
        "private data",
        "REMOTE_INVALIDATE not offered",
    )?;
    ensure(
        !p.resp.thresholds().send_with_invalidate,
        "responder",
        "no Send With Invalidate",
    )?;
    let data = pattern(100_000, 6);
    p.call(
        write_call(&p.l.pa, 0x70, &data).at("call")?,
        ReplySpec::inline(128),
        "WRITE",
    )?;
    let handles = advertised(&mut p, 0x70)?;
    drop(reply_for(
        p.run(1, &mut |c| xdr_call(c.xid, b"done").at("reply"))?,
        0x70,
    )?);
    let (a, b) = (*p.req.counters(), *p.resp.counters());
    eq(
        "(SWI sent, remote inv, local inv)",
        (0, 0, 1),
        (
            b.send_with_invalidate,
            a.remote_invalidations,
            a.local_invalidations,
        ),
    )?;
    p.check_clean("after the call")?;
    probe_stale(&mut p, &handles, "locally invalidated")?;
    p.finish()
}
