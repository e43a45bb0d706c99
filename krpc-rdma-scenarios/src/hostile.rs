//! A hostile or careless requester against the Responder, over raw Sends: every message is
//! handed up, answered with `RDMA_ERROR` carrying the grant, or the connection is closed —
//! never a silent drop, never a panic — every refusal is counted, and the pages live calls
//! hold stay within the DDP budget (`TransportConfig::max_call_ddp_bytes` and
//! `max_ddp_bytes`). Sizes stay small: the same scenarios run on rxe in a TCG VM.

use alloc::format;
use alloc::vec::Vec;

use krpc_rdma::provider::Provider;
use krpc_rdma::transport::{ResponderEvent, TransportConfig};
use krpc_rdma::wire::{ErrorBody, Header, Proc, ReadSegment, WriteChunk};
use mbuf::{Chain, Mbuf};

use crate::check::{bytes_eq, ensure, eq, fail, At, Failure, Outcome};
use crate::data::{pages_with, pattern};
use crate::fixture::{Fixture, Setup};
use crate::heap::chunk_lists;
use crate::raw::{call, error_of, header, read_chunk, seg, words, RawPeer};

/// A raw peer whose side A refuses Send With Invalidate (the scenarios reuse or make up
/// handles; a reply revoking one is not what they test), its responder configured `resp`.
#[inline(never)]
fn peer<F: Fixture>(fx: &mut F, resp: TransportConfig) -> Result<RawPeer<'_, F>, Failure> {
    RawPeer::with(
        fx,
        &Setup {
            req: TransportConfig {
                accept_remote_invalidate: false,
                ..TransportConfig::default()
            },
            resp,
            ..Setup::default()
        },
    )
}

/// `msg` is refused: exactly one answer, `RDMA_ERROR`/`ERR_CHUNK` for `xid` (version 1)
/// carrying the grant; nothing handed up.
#[inline(never)]
fn refused<F: Fixture>(h: &mut RawPeer<'_, F>, step: &str, xid: u32, msg: &[u8]) -> Outcome {
    let grant = h.answer_grant();
    let held = h.held.len();
    let ans = h.exchange(msg)?;
    eq(format!("{step}: answers"), 1, ans.len())?;
    eq(
        format!("{step}: the answer"),
        (xid, 1, grant, ErrorBody::Chunk),
        error_of(ans.first().at("answer")?)?,
    )?;
    eq(format!("{step}: handed up"), held, h.held.len())?;
    eq(format!("{step}: connection lost"), false, h.lost)
}

/// `RDMA_ERROR`s sent and messages refused, as the responder counts them.
#[inline(never)]
fn refusals<F: Fixture>(h: &RawPeer<'_, F>) -> (u64, u64) {
    let c = h.p.resp.counters();
    (c.err_chunk_sent, c.bad_messages)
}

/// A valid small call is still handed up and answered (the connection works), then leak
/// checks and teardown.
#[inline(never)]
fn still_works_and_finish<F: Fixture>(mut h: RawPeer<'_, F>, xid: u32) -> Outcome {
    let m = call(xid, &*chunk_lists()?, &xid.to_be_bytes())?;
    eq("valid call: answers", 0, h.exchange(&m)?.len())?;
    eq("valid call: handed up", 1, h.held.len())?;
    eq("valid call: answered", 1, h.answer_all()?.len())?;
    eq("connection lost", false, h.lost)?;
    eq("DDP bytes held", 0, h.p.resp.ddp_bytes_in_use())?;
    eq("RDMA_ERRORs owed", 0, h.p.resp.deferred_errors())?;
    h.p.check_clean("after the hostile calls")?;
    h.p.finish()
}

/// More calls than the grant (`max_requests` 4), none answered yet: the four within it are
/// handed up, the two beyond it are refused with `ERR_CHUNK` carrying the grant (RFC 8166
/// §3.3.1: the requester broke the credit limit; not dropped), both counted; once the four
/// are answered, four more are taken again.
pub fn hostile_calls_beyond_the_grant<F: Fixture>(fx: &mut F) -> Outcome {
    let cfg = TransportConfig {
        max_requests: 4,
        ..TransportConfig::default()
    };
    let mut h = peer(fx, cfg)?;
    eq("grant", 4, h.p.resp.grant())?;
    for xid in 100..104 {
        let m = call(xid, &*chunk_lists()?, &xid.to_be_bytes())?;
        eq(format!("call {xid}: answers"), 0, h.exchange(&m)?.len())?;
    }
    eq("calls within the grant: handed up", 4, h.held.len())?;
    for xid in 104..106 {
        let m = call(xid, &*chunk_lists()?, &xid.to_be_bytes())?;
        refused(&mut h, &format!("call {xid} beyond the grant"), xid, &m)?;
    }
    eq("refusals counted (ERR_CHUNK, bad)", (2, 2), refusals(&h))?;
    eq("answers to the four", 4, h.answer_all()?.len())?;
    for xid in 200..204 {
        let m = call(xid, &*chunk_lists()?, &xid.to_be_bytes())?;
        eq(format!("call {xid}: answers"), 0, h.exchange(&m)?.len())?;
    }
    eq("four more: handed up", 4, h.held.len())?;
    eq("answers to them", 4, h.answer_all()?.len())?;
    eq("refusals counted at the end", (2, 2), refusals(&h))?;
    still_works_and_finish(h, 300)
}

/// Read chunks beyond what one call may carry: four chunks of the largest size (their sum
/// over `max_call_ddp_bytes`, and more page pieces than a call may have), and one chunk one
/// byte over `max_chunk_bytes`. Each is refused with `ERR_CHUNK` before any page is taken
/// (RFC 8166 §8.1.4); the made-up handles are never read.
pub fn hostile_read_chunks_beyond_the_call_budget<F: Fixture>(fx: &mut F) -> Outcome {
    let cfg = TransportConfig::default();
    let mut h = peer(fx, cfg)?;
    let pages = h.p.l.fx.pages_in_use();
    let big = cfg.max_chunk_bytes;
    let mut l = chunk_lists()?;
    for (i, pos) in [4u32, 8, 12, 16].into_iter().enumerate() {
        l.read_list
            .push(ReadSegment {
                position: pos,
                segment: seg(9, big, (i as u64) << 32),
            })
            .at("read list")?;
    }
    refused(
        &mut h,
        "4 read chunks of max_chunk_bytes",
        42,
        &call(42, &l, &[0; 20])?,
    )?;
    let m = call(43, &*read_chunk(4, &[seg(9, big + 1, 0)])?, &[0; 8])?;
    refused(&mut h, "a read chunk over max_chunk_bytes", 43, &m)?;
    eq("refusals counted (ERR_CHUNK, bad)", (2, 2), refusals(&h))?;
    eq("pages taken", pages, h.p.l.fx.pages_in_use())?;
    eq("DDP bytes held", 0, h.p.resp.ddp_bytes_in_use())?;
    still_works_and_finish(h, 44)
}

/// 64-bit segment offsets near 2^64 in a read chunk, a write chunk and a reply chunk: each
/// call is refused with `ERR_CHUNK` before an address is computed from the offset (checked
/// arithmetic: no panic, no wrap-around to a remote access error), no page taken.
pub fn hostile_segment_offsets_near_2_64<F: Fixture>(fx: &mut F) -> Outcome {
    let mut h = peer(fx, TransportConfig::default())?;
    let pages = h.p.l.fx.pages_in_use();
    for near in [u64::MAX - 100, u64::MAX - 4095, u64::MAX] {
        let r = call(1, &*read_chunk(4, &[seg(7, 4096, near)])?, &[0; 8])?;
        refused(&mut h, &format!("read chunk at {near:#x}"), 1, &r)?;
        let mut w = chunk_lists()?;
        w.write_list
            .push(WriteChunk::from_slice(&[seg(7, 4096, near)]).at("write chunk")?)
            .at("write list")?;
        let m = call(2, &w, &[0; 8])?;
        refused(&mut h, &format!("write chunk at {near:#x}"), 2, &m)?;
        let mut rc = chunk_lists()?;
        rc.reply_chunk = Some(WriteChunk::from_slice(&[seg(7, 1 << 20, near)]).at("reply chunk")?);
        let m = call(3, &rc, &[0; 8])?;
        refused(&mut h, &format!("reply chunk at {near:#x}"), 3, &m)?;
    }
    eq("refusals counted (ERR_CHUNK, bad)", (9, 9), refusals(&h))?;
    eq("pages taken", pages, h.p.l.fx.pages_in_use())?;
    still_works_and_finish(h, 4)
}

/// One peer reusing one valid 64 KiB handle in call after call (as many calls as the grant
/// allows, at most 32), with `max_ddp_bytes` three calls' worth: after every call the pages
/// held stay within the budget; calls beyond it wait (no refusal, no drop) and are read and
/// handed up as earlier ones are answered. Every call is handed up once, byte-exact, and
/// answered once.
pub fn hostile_one_handle_reused_within_the_ddp_budget<F: Fixture>(fx: &mut F) -> Outcome {
    const CHUNK: usize = 64 * 1024;
    const BUDGET: usize = 3 * CHUNK;
    let cfg = TransportConfig {
        max_ddp_bytes: BUDGET as u32,
        ..TransportConfig::default()
    };
    let mut h = peer(fx, cfg)?;
    let data = pattern(CHUNK, 3);
    let (src, reg, segs) = h.exposed(&data)?;
    let pages = h.p.l.fx.pages_in_use();
    let budget_pages = BUDGET.div_ceil(mbuf::PAGE_SIZE);
    let calls = h.p.resp.grant().min(32);
    for i in 0..calls {
        // A word, the chunk at position 4, a 4-byte tail.
        let m = call(
            1000 + i,
            &*read_chunk(4, &segs)?,
            &[0, 0, 0, 1, 0xee, 0xee, 0xee, 0xee],
        )?;
        let step = format!("call {i} of {calls}");
        eq(format!("{step}: answers"), 0, h.exchange(&m)?.len())?;
        eq(format!("{step}: connection lost"), false, h.lost)?;
        ensure(
            h.p.resp.ddp_bytes_in_use() <= BUDGET,
            format!("{step}: DDP bytes held"),
            format!("at most {BUDGET}"),
        )?;
        let used = h.p.l.fx.pages_in_use().saturating_sub(pages);
        ensure(
            used <= budget_pages + 8,
            format!("{step}: pages in use ({used})"),
            format!("at most {} (the budget and a few)", budget_pages + 8),
        )?;
    }
    eq(
        "handed up (three calls fit the budget; the rest wait)",
        3.min(calls as usize),
        h.held.len(),
    )?;
    if calls > 3 {
        ensure(
            h.p.resp.counters().ddp_budget_waits > 0,
            "budget waits",
            "counted",
        )?;
    }
    let mut expect = alloc::vec![0u8, 0, 0, 1];
    expect.extend_from_slice(&data);
    expect.extend_from_slice(&[0xee; 4]);
    // Rounds until every call was handed up: answer what is held, then settle (the waiting
    // calls' Reads go out as answers free the budget). A round may end with nothing handed
    // up while Reads are still in flight on a slow provider; 20 such rounds in a row fail.
    let (mut handed, mut answers, mut empty) = (0usize, 0usize, 0u32);
    let mut round = 0u32;
    while handed < calls as usize && empty < 20 {
        round += 1;
        if h.held.is_empty() {
            empty += 1;
        } else {
            empty = 0;
        }
        for c in &h.held {
            bytes_eq(
                format!("call {:#x} as handed up", c.xid),
                &expect,
                &c.call.to_vec().at("call bytes")?,
            )?;
        }
        handed += h.held.len();
        answers += h.answer_all()?.len();
        ensure(
            h.p.resp.ddp_bytes_in_use() <= BUDGET,
            format!("round {round}: DDP bytes held"),
            format!("at most {BUDGET}"),
        )?;
    }
    eq("every call handed up once", calls as usize, handed)?;
    eq("every call answered once", calls as usize, answers)?;
    eq("DDP bytes held at the end", 0, h.p.resp.ddp_bytes_in_use())?;
    let c = *h.p.resp.counters();
    eq(
        "refusals, bad messages, closes",
        (0, 0, 0),
        (c.err_chunk_sent, c.bad_messages, c.closes),
    )?;
    h.p.l.a.release(reg).at("release the reused handle")?;
    drop(src);
    still_works_and_finish(h, 2000)
}

/// RFC 8166 §4.3.2.3: an empty write chunk asks for the item inline. Not a refusal: the
/// reply carries the DDP item inline (its XDR pad included) and echoes the chunk empty.
#[inline(never)]
pub fn rfc8166_s4_3_2_3_empty_write_chunk_returns_the_item_inline<F: Fixture>(
    fx: &mut F,
) -> Outcome {
    let mut h = peer(fx, TransportConfig::default())?;
    let mut l = chunk_lists()?;
    l.write_list.push(WriteChunk::new()).at("write list")?;
    let m = call(21, &l, b"\0\0\0\x15READ")?;
    eq("call: answers", 0, h.exchange(&m)?.len())?;
    let c = h.held.pop().at("the call is handed up")?;
    // xid, a status word, the DDP item (101 bytes: a pad of 3), a trailer word.
    let data = pattern(101, 4);
    let mut reply = Chain::from_bytes(&[0, 0, 0, 21, 0, 0, 0, 0]).at("reply")?;
    reply.append_mbuf(Mbuf::ddp_marker()).at("marker")?;
    reply
        .cat(pages_with(&h.p.l.pb, &data).at("pages")?)
        .at("cat")?;
    reply
        .append(&[0, 0, 0, 0xee, 0xee, 0xee, 0xee])
        .at("trailer")?;
    let expect = reply.to_vec().at("reply bytes")?;
    drop(c.call);
    h.p.resp
        .reply(&mut h.p.l.b, c.ctx, reply)
        .map_err(|e| fail("reply", "sent", format!("{e:?}")))?;
    let ans = h.settle(false)?;
    eq("answers", 1, ans.len())?;
    let a = ans.first().at("answer")?;
    let hdr = Header::new_checked(&a[..]).at("answer decodes")?;
    let (xid, hlen) = (hdr.xid(), hdr.header_len());
    eq("answer", Proc::Msg, hdr.proc_())?;
    eq("answer xid", 21, xid)?;
    eq("write chunks echoed", 1, hdr.write_list().count())?;
    ensure(
        hdr.write_list().next().is_some_and(|w| w.is_empty()),
        "the echoed write chunk",
        "empty",
    )?;
    bytes_eq(
        "the item travels inline, pad included",
        &expect,
        a.get(hlen..).unwrap_or_default(),
    )?;
    let c = *h.p.resp.counters();
    eq("ERR_CHUNK sent", 0, c.err_chunk_sent)?;
    eq("DDP payload copied", 101, c.ddp_payload_copied_bytes)?;
    still_works_and_finish(h, 22)
}

/// Junk where a valid header's chunk lists should be, after valid fixed words: a bad list
/// discriminator, a read segment cut short, a write chunk with 2^32 − 1 segments, a read
/// chunk at an unaligned position, `RDMA_NOMSG` with empty lists and junk after them: each
/// is refused with `ERR_CHUNK` carrying the grant, and counted. Junk after a valid
/// `RDMA_NOMSG` header with a position-zero chunk is no part of the call (RFC 8166 §3.5.3:
/// the message is the chunk): the call is handed up as the chunk's bytes alone.
pub fn hostile_junk_after_a_valid_header<F: Fixture>(fx: &mut F) -> Outcome {
    let mut h = peer(fx, TransportConfig::default())?;
    let junk = [0xa5u8; 24];
    let with = |xid: u32, proc_: u32, after: &[u8]| {
        let mut m = words(xid, 1, proc_);
        m.extend_from_slice(after);
        m
    };
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    cases.push((
        "read list discriminator 2",
        with(1, 0, &[0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0]),
    ));
    let mut cut = alloc::vec![0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 9];
    cut.extend_from_slice(&[0, 0, 0, 0x40]);
    cases.push(("a read segment cut short", with(2, 0, &cut)));
    let mut many = alloc::vec![0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff];
    many.extend_from_slice(&junk);
    cases.push(("a write chunk of 2^32 - 1 segments", with(3, 0, &many)));
    let mut unaligned = alloc::vec![0, 0, 0, 1, 0, 0, 0, 5];
    unaligned.extend_from_slice(&[0, 0, 0, 9, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0]);
    unaligned.extend_from_slice(&[0; 12]);
    unaligned.extend_from_slice(&junk);
    cases.push(("a read chunk at position 5", with(4, 0, &unaligned)));
    let mut nomsg = alloc::vec![0u8; 12];
    nomsg.extend_from_slice(&junk);
    cases.push(("RDMA_NOMSG, empty lists, junk", with(5, 1, &nomsg)));
    let n = cases.len() as u64;
    for (xid, (step, m)) in (1..).zip(&cases) {
        refused(&mut h, step, xid, m)?;
    }
    eq("refusals counted (ERR_CHUNK, bad)", (n, n), refusals(&h))?;

    // A Long Call whose position-zero chunk is the whole call, then junk.
    let stream = [&[0, 0, 0, 6][..], b"long call, then junk"].concat();
    let (src, reg, segs) = h.exposed(&stream)?;
    let mut m = header(6, true, &*read_chunk(0, &segs)?)?;
    m.extend_from_slice(&junk);
    eq("Long Call with junk: answers", 0, h.exchange(&m)?.len())?;
    let c = h.held.first().at("the Long Call is handed up")?;
    bytes_eq(
        "the Long Call as handed up",
        &stream,
        &c.call.to_vec().at("call bytes")?,
    )?;
    eq("its answer", 1, h.answer_all()?.len())?;
    eq("refusals counted at the end", (n, n), refusals(&h))?;
    h.p.l.a.release(reg).at("release")?;
    drop(src);
    still_works_and_finish(h, 7)
}

/// An upper layer that answers none of the calls (`Responder::drop_call`: duplicate-request
/// cache hits), round after round with `max_requests` 4: every dropped call gives its
/// context back, so every call within the grant is taken again — the grant never advertises
/// more than the contexts there are — a fifth call beyond the grant is refused, nothing is
/// sent for a dropped call, and the connection keeps working.
pub fn drop_call_returns_the_context_and_the_credit<F: Fixture>(fx: &mut F) -> Outcome {
    let cfg = TransportConfig {
        max_requests: 4,
        ..TransportConfig::default()
    };
    let mut h = peer(fx, cfg)?;
    let mut xid = 0x500;
    for round in 0..3u64 {
        ensure(
            h.p.resp.grant() <= 4,
            format!("round {round}: grant"),
            "at most the 4 contexts",
        )?;
        for _ in 0..4 {
            xid += 1;
            let m = call(xid, &*chunk_lists()?, &xid.to_be_bytes())?;
            eq(
                format!("round {round}: call {xid:#x} answers"),
                0,
                h.exchange(&m)?.len(),
            )?;
        }
        eq(format!("round {round}: handed up"), 4, h.held.len())?;
        xid += 1;
        let m = call(xid, &*chunk_lists()?, &xid.to_be_bytes())?;
        refused(&mut h, &format!("round {round}: a fifth call"), xid, &m)?;
        for c in core::mem::take(&mut h.held) {
            let mut evs = Vec::new();
            h.p.resp
                .drop_call(&mut h.p.l.b, c.ctx, &mut |e| evs.push(e))
                .map_err(|e| fail(format!("round {round}: drop_call"), "Ok", format!("{e:?}")))?;
            if let Some(e) = evs
                .iter()
                .find(|e| !matches!(e, ResponderEvent::Connected(_)))
            {
                return Err(fail(
                    format!("round {round}: drop_call events"),
                    "none",
                    format!("{e:?}"),
                ));
            }
        }
        eq(
            format!("round {round}: calls dropped"),
            4 * (round + 1),
            h.p.resp.counters().calls_dropped,
        )?;
        eq(
            format!("round {round}: nothing sent for the dropped calls"),
            0,
            h.settle(false)?.len(),
        )?;
    }
    eq("refusals counted (ERR_CHUNK, bad)", (3, 3), refusals(&h))?;
    still_works_and_finish(h, 0x600)
}

/// An upper layer that forgets its calls: every `Incoming` (and with it its `ReplyCtx`) is
/// dropped without `reply` or `drop_call`, round after round with `max_requests` 4. Each
/// dropped context comes back to the Responder (counted in `contexts_reclaimed`), so the
/// next round's four calls are handed up again instead of refused for want of a context;
/// a fifth call beyond the grant is still refused; nothing is sent for a forgotten call.
/// One forgotten call carried a read chunk: its pages charge comes back too. Before, each
/// forgotten context leaked and the grant kept advertising it: after four, every call got
/// `ERR_CHUNK`.
pub fn a_dropped_incoming_returns_its_context<F: Fixture>(fx: &mut F) -> Outcome {
    let cfg = TransportConfig {
        max_requests: 4,
        ..TransportConfig::default()
    };
    let mut h = peer(fx, cfg)?;
    let mut xid: u32 = 0x2740;
    let data = pattern(3000, 27);
    let (src, reg, segs) = h.exposed(&data)?;
    for round in 0..3u64 {
        for i in 0..4 {
            xid += 1;
            let m = if round == 1 && i == 0 {
                // A WRITE-like call: 4 inline bytes, then its read chunk at position 8.
                let mut body = Vec::from(xid.to_be_bytes());
                body.extend_from_slice(&(data.len() as u32).to_be_bytes());
                call(xid, &*read_chunk(8, &segs)?, &body)?
            } else {
                call(xid, &*chunk_lists()?, &xid.to_be_bytes())?
            };
            eq(
                format!("round {round}: call {xid:#x} answers"),
                0,
                h.exchange(&m)?.len(),
            )?;
        }
        eq(format!("round {round}: handed up"), 4, h.held.len())?;
        if round == 1 {
            ensure(
                h.p.resp.ddp_bytes_in_use() >= data.len(),
                "round 1: the read chunk's pages charged",
                format!("at least {}", data.len()),
            )?;
        }
        xid += 1;
        let m = call(xid, &*chunk_lists()?, &xid.to_be_bytes())?;
        refused(&mut h, &format!("round {round}: a fifth call"), xid, &m)?;
        // Forgotten: half dropped whole, half with the call chain kept and only the context
        // dropped.
        for (i, c) in core::mem::take(&mut h.held).into_iter().enumerate() {
            if i % 2 == 0 {
                drop(c);
            } else {
                let krpc_rdma::transport::Incoming { call, ctx, .. } = c;
                drop(ctx);
                drop(call);
            }
        }
        eq(
            format!("round {round}: nothing sent for the forgotten calls"),
            0,
            h.settle(false)?.len(),
        )?;
        eq(
            format!("round {round}: DDP bytes held"),
            0,
            h.p.resp.ddp_bytes_in_use(),
        )?;
    }
    eq(
        "contexts reclaimed",
        12,
        h.p.resp.counters().contexts_reclaimed,
    )?;
    eq(
        "calls dropped by drop_call",
        0,
        h.p.resp.counters().calls_dropped,
    )?;
    eq("refusals counted (ERR_CHUNK, bad)", (3, 3), refusals(&h))?;
    h.p.l.a.release(reg).at("release")?;
    drop(src);
    still_works_and_finish(h, 0x2800)
}

/// A Long Call (`RDMA_NOMSG`) whose position-zero read chunk carries no bytes: there is no
/// RPC message (not even an XID to answer at the RPC level), so it is refused with
/// `ERR_CHUNK` carrying the grant, counted, and nothing is handed up (before, an empty call
/// went up that nobody could answer). The made-up handle is never read.
pub fn hostile_long_call_without_bytes_is_refused<F: Fixture>(fx: &mut F) -> Outcome {
    let mut h = peer(fx, TransportConfig::default())?;
    let m = header(0x2750, true, &*read_chunk(0, &[seg(0x7777, 0, 0)])?)?;
    refused(&mut h, "a Long Call of 0 bytes", 0x2750, &m)?;
    // Two empty segments are no better.
    let m = header(
        0x2751,
        true,
        &*read_chunk(0, &[seg(0x7777, 0, 0), seg(0x7778, 0, 4096)])?,
    )?;
    refused(&mut h, "a Long Call of two empty segments", 0x2751, &m)?;
    eq("refusals counted (ERR_CHUNK, bad)", (2, 2), refusals(&h))?;
    still_works_and_finish(h, 0x2752)
}
