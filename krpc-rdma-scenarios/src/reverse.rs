//! Reverse-direction RPC (RFC 8167) on every provider: the responder calls the requester on
//! the same connection while every forward credit is in use; a hostile responder's reverse
//! call beyond the slots closes the connection; a reverse reply nobody asked for is dropped
//! and the connection serves on; a loss reports every reverse call outstanding.

use alloc::format;
use alloc::vec::Vec;

use krpc_rdma::transport::{
    CallError, ReplySpec, RequesterEvent, ResponderEvent, ReverseCall, TransportConfig,
};
use mbuf::Chain;

use crate::check::{ensure, eq, fail, At, Failure, Outcome};
use crate::data::xdr_call;
use crate::fixture::{Fixture, Limits, Setup};
use crate::pair::{End, Pair, Side};

/// Forward credits and reverse slots of these scenarios.
const CREDITS: u32 = 8;
const SLOTS: u32 = 2;

fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_be_bytes()).collect()
}

/// An RPC call message: msg_type CALL, RPC version 2, the NFSv4 callback program.
fn cb_call(xid: u32) -> Result<Chain, Failure> {
    Chain::from_bytes(&words(&[xid, 0, 2, 0x4000_0000, 1, 1, xid ^ 0x5a5a])).at("reverse call")
}

/// An RPC reply message: msg_type REPLY, accepted, success.
fn cb_reply(xid: u32) -> Result<Chain, Failure> {
    Chain::from_bytes(&words(&[xid, 1, 0, 0, 0, 0, !xid])).at("reverse reply")
}

/// The pair of these scenarios: `CREDITS` forward credits, `SLOTS` reverse slots reserved
/// at both ends (`req_slots` enabled at the requester, `SLOTS` at the responder), receive
/// buffers for both; the requester has learnt the full grant.
fn pair<F: Fixture>(fx: &mut F, req_slots: u32) -> Result<Pair<'_, F>, Failure> {
    let cfg = TransportConfig {
        max_requests: CREDITS,
        max_reverse_requests: SLOTS,
        ..TransportConfig::default()
    };
    let setup = Setup {
        req: cfg,
        resp: cfg,
        limits: Limits {
            recv_bufs: Some(CREDITS + SLOTS),
            ..Limits::default()
        },
    };
    let mut p = Pair::new(fx, &setup)?;
    p.req
        .set_reverse_slots(&mut p.l.a, req_slots)
        .at("requester: set_reverse_slots")?;
    p.resp
        .set_reverse_slots(SLOTS)
        .at("responder: set_reverse_slots")?;
    p.rpc(
        xdr_call(1, b"grant").at("call")?,
        ReplySpec::inline(256),
        &mut |c| xdr_call(c.xid, b"ok").at("reply"),
    )?;
    eq("grant", CREDITS, p.req.credits_granted())?;
    Ok(p)
}

/// What the requester reported in one poll.
#[derive(Default)]
struct ReqSeen {
    reverse: Vec<ReverseCall>,
    ended: Vec<(u32, End)>,
    lost: bool,
}

#[inline(never)]
fn poll_req<F: Fixture>(p: &mut Pair<'_, F>, seen: &mut ReqSeen) -> bool {
    let mut progress = false;
    p.req.poll(&mut p.l.a, &mut |e| {
        progress = true;
        match e {
            RequesterEvent::ReverseCall(rc) => seen.reverse.push(rc),
            RequesterEvent::Reply { xid, reply } => seen.ended.push((xid, End::Reply(reply))),
            RequesterEvent::Failed { xid, error, pages } => {
                seen.ended.push((xid, End::Failed(error, pages)));
            }
            RequesterEvent::ConnectionLost => seen.lost = true,
            RequesterEvent::Connected(_) => {}
        }
    });
    progress
}

/// What the responder reported.
#[derive(Default)]
struct RespSeen {
    calls: Vec<krpc_rdma::transport::Incoming>,
    replies: Vec<(u32, Chain)>,
    failed: Vec<u32>,
    failed_after_loss: bool,
    lost: bool,
}

#[inline(never)]
fn poll_resp<F: Fixture>(p: &mut Pair<'_, F>, seen: &mut RespSeen) -> bool {
    let mut progress = false;
    p.resp.poll(&mut p.l.b, &mut |e| {
        progress = true;
        match e {
            ResponderEvent::Call(c) => seen.calls.push(c),
            ResponderEvent::ReverseReply { xid, reply } => seen.replies.push((xid, reply)),
            ResponderEvent::ReverseFailed { xid } => {
                seen.failed_after_loss |= seen.lost;
                seen.failed.push(xid);
            }
            ResponderEvent::ConnectionLost => seen.lost = true,
            ResponderEvent::Connected(_) => {}
        }
    });
    progress
}

/// Poll both sides until `done` holds (or the idle limit: a hang).
#[inline(never)]
fn until<F: Fixture>(
    p: &mut Pair<'_, F>,
    rq: &mut ReqSeen,
    rs: &mut RespSeen,
    step: &str,
    done: &dyn Fn(&ReqSeen, &RespSeen) -> bool,
) -> Outcome {
    let mut idle = 0;
    while !done(rq, rs) {
        let progress = poll_resp(p, rs) | poll_req(p, rq);
        p.l.idle(&mut idle, progress, step)?;
    }
    Ok(())
}

/// Answer every reverse call the requester holds.
#[inline(never)]
fn answer<F: Fixture>(p: &mut Pair<'_, F>, rq: &mut ReqSeen) -> Outcome {
    for rc in core::mem::take(&mut rq.reverse) {
        let reply = cb_reply(rc.xid)?;
        let step = format!("reverse reply {:#x}", rc.xid);
        p.req
            .reverse_reply(&mut p.l.a, rc.ctx, reply)
            .map_err(|e| fail(step, "sent", e.error))?;
    }
    Ok(())
}

/// Reverse calls while all forward credits are in use, one until the requester's first
/// grant, then as many as the slots; every reply byte-exact; then the forward calls are
/// answered, and the connection is clean.
pub fn reverse_calls_interleave_with_forward_calls_at_full_credit<F: Fixture>(
    fx: &mut F,
) -> Outcome {
    let mut p = pair(fx, SLOTS)?;
    let (mut rq, mut rs) = (ReqSeen::default(), RespSeen::default());
    fill_forward_credits(&mut p, &mut rq, &mut rs)?;
    reverse_rounds(&mut p, &mut rq, &mut rs)?;
    check_reverse_replies(&rs)?;
    answer_forward(&mut p, &mut rq, &mut rs)?;
    let (q, r) = (p.req.counters(), p.resp.counters());
    eq(
        "requester: reverse calls, replies",
        (3, 3),
        (q.reverse_calls, q.reverse_replies),
    )?;
    eq(
        "responder: reverse calls, replies",
        (3, 3),
        (r.reverse_calls, r.reverse_replies),
    )?;
    eq("losses", (0, 0), (q.connection_losses, r.connection_losses))?;
    drop(rq);
    p.check_clean("end")?;
    p.finish()
}

/// Every forward credit in use: `CREDITS` calls held at the responder, unanswered.
#[inline(never)]
fn fill_forward_credits<F: Fixture>(
    p: &mut Pair<'_, F>,
    rq: &mut ReqSeen,
    rs: &mut RespSeen,
) -> Outcome {
    for x in 0..CREDITS {
        let call = xdr_call(0x100 + x, b"fwd").at("call")?;
        p.req
            .call(&mut p.l.a, call, ReplySpec::inline(256))
            .map_err(|r| fail(format!("forward call {x}"), "sent", r.error))?;
    }
    until(p, rq, rs, "forward calls held", &|_, s| {
        s.calls.len() == CREDITS as usize
    })
}

/// One reverse call (a second is refused until the requester's first grant), answered;
/// then two at once (the grant is the slots), answered.
#[inline(never)]
fn reverse_rounds<F: Fixture>(p: &mut Pair<'_, F>, rq: &mut ReqSeen, rs: &mut RespSeen) -> Outcome {
    p.resp
        .reverse_call(&mut p.l.b, cb_call(0xcb01)?)
        .map_err(|r| fail("reverse call 1", "sent", r.error))?;
    let second = p.resp.reverse_call(&mut p.l.b, cb_call(0xcb02)?);
    eq(
        "a second reverse call before the first grant",
        Some(CallError::NoCredit),
        second.err().map(|r| r.error),
    )?;
    let mut sent = 1usize;
    for (round, n) in [(0u32, 1usize), (1, 2)] {
        until(p, rq, rs, "reverse calls arrive", &|q, _| {
            q.reverse.len() == n
        })?;
        answer(p, rq)?;
        until(p, rq, rs, "reverse replies arrive", &|_, s| {
            s.replies.len() == sent
        })?;
        if round == 0 {
            for x in [0xcb02, 0xcb03] {
                p.resp
                    .reverse_call(&mut p.l.b, cb_call(x)?)
                    .map_err(|r| fail(format!("reverse call {x:#x}"), "sent", r.error))?;
            }
            sent += 2;
        }
    }
    Ok(())
}

/// The three reverse replies, byte-exact.
#[inline(never)]
fn check_reverse_replies(rs: &RespSeen) -> Outcome {
    for (xid, reply) in &rs.replies {
        let want = cb_reply(*xid)?.to_vec().at("bytes")?;
        eq(
            format!("reverse reply {xid:#x}"),
            want,
            reply.to_vec().at("bytes")?,
        )?;
    }
    let mut xids: Vec<u32> = rs.replies.iter().map(|r| r.0).collect();
    xids.sort_unstable();
    eq("reverse replies", [0xcb01, 0xcb02, 0xcb03].to_vec(), xids)
}

/// The forward calls held, answered now: every one arrives.
#[inline(never)]
fn answer_forward<F: Fixture>(p: &mut Pair<'_, F>, rq: &mut ReqSeen, rs: &mut RespSeen) -> Outcome {
    for c in core::mem::take(&mut rs.calls) {
        let reply = xdr_call(c.xid, b"ok").at("reply")?;
        p.resp
            .reply(&mut p.l.b, c.ctx, reply)
            .map_err(|e| fail("forward reply", "sent", e))?;
    }
    until(p, rq, rs, "forward replies arrive", &|q, _| {
        q.ended.len() == CREDITS as usize
    })?;
    ensure(
        rq.ended.iter().all(|(_, e)| matches!(e, End::Reply(_))),
        "forward calls",
        "every one a reply",
    )
}

/// The reverse call as a hostile responder sends it: raw bytes, an `RDMA_MSG` without
/// chunks around an RPC call.
fn raw_reverse_call(xid: u32) -> Result<Vec<u8>, Failure> {
    let mut v = words(&[xid, 1, 1, 0, 0, 0, 0]);
    v.extend_from_slice(&cb_call(xid)?.to_vec().at("bytes")?);
    Ok(v)
}

/// The requester enabled one reverse slot; a hostile responder sends two reverse calls: the
/// first is handed up, the second closes the connection (`reverse_overflows`), and the
/// forward call outstanding fails with the loss.
pub fn hostile_reverse_call_beyond_the_slots_closes_the_connection<F: Fixture>(
    fx: &mut F,
) -> Outcome {
    let mut p = pair(fx, 1)?;
    let call = xdr_call(0x200, b"fwd").at("call")?;
    p.req
        .call(&mut p.l.a, call, ReplySpec::inline(256))
        .map_err(|r| fail("forward call", "sent", r.error))?;
    let top =
        p.l.fx
            .resources(&Limits::default())
            .send_bufs
            .saturating_sub(1);
    p.l.send_bytes(Side::B, 0xbad1, top, &raw_reverse_call(0xbad1)?)
        .at("raw reverse call 1")?;
    let (mut rq, mut rs) = (ReqSeen::default(), RespSeen::default());
    until(
        &mut p,
        &mut rq,
        &mut rs,
        "the first reverse call",
        &|q, _| q.reverse.len() == 1,
    )?;
    p.l.send_bytes(Side::B, 0xbad2, top - 1, &raw_reverse_call(0xbad2)?)
        .at("raw reverse call 2")?;
    until(&mut p, &mut rq, &mut rs, "the requester closes", &|q, _| {
        q.lost
    })?;
    eq("reverse calls handed up", 1, rq.reverse.len())?;
    ensure(
        matches!(
            rq.ended.as_slice(),
            [(0x200, End::Failed(CallError::ConnectionLost, _))]
        ),
        "the forward call",
        "failed with the loss",
    )?;
    let c = p.req.counters();
    eq(
        "reverse overflows, closes",
        (1, 1),
        (c.reverse_overflows, c.closes),
    )?;
    drop(rq);
    p.finish()
}

/// A reverse reply that answers nothing is counted and dropped; the connection then serves
/// a forward call and a reverse call as before.
pub fn hostile_reverse_reply_nobody_asked_for_is_dropped<F: Fixture>(fx: &mut F) -> Outcome {
    let mut p = pair(fx, SLOTS)?;
    let mut bytes = words(&[0x5eed, 1, 1, 0, 0, 0, 0]);
    bytes.extend_from_slice(&cb_reply(0x5eed)?.to_vec().at("bytes")?);
    let top =
        p.l.fx
            .resources(&Limits::default())
            .send_bufs
            .saturating_sub(1);
    p.l.send_bytes(Side::A, 0x5eed, top, &bytes)
        .at("raw reverse reply")?;
    let (mut rq, mut rs) = (ReqSeen::default(), RespSeen::default());
    let mut idle = 0;
    while p.resp.counters().reverse_replies_unexpected == 0 {
        let progress = poll_resp(&mut p, &mut rs) | poll_req(&mut p, &mut rq);
        p.l.idle(&mut idle, progress, "the unasked reply arrives")?;
    }
    ensure(
        rs.replies.is_empty() && rs.calls.is_empty() && !rs.lost,
        "the unasked reply",
        "dropped, nothing handed up, the connection up",
    )?;
    p.resp
        .reverse_call(&mut p.l.b, cb_call(0xcb01)?)
        .map_err(|r| fail("reverse call", "sent", r.error))?;
    until(&mut p, &mut rq, &mut rs, "the reverse call", &|q, _| {
        q.reverse.len() == 1
    })?;
    answer(&mut p, &mut rq)?;
    until(&mut p, &mut rq, &mut rs, "its reply", &|_, s| {
        s.replies.len() == 1
    })?;
    p.rpc(
        xdr_call(0x300, b"fwd").at("call")?,
        ReplySpec::inline(256),
        &mut |c| xdr_call(c.xid, b"ok").at("reply"),
    )?;
    drop(rq);
    p.check_clean("end")?;
    p.finish()
}

/// Reverse calls outstanding when the requester's side goes: the responder reports each
/// one failed, then the loss; the requester's contexts are dead.
pub fn loss_with_reverse_calls_outstanding<F: Fixture>(fx: &mut F) -> Outcome {
    let mut p = pair(fx, SLOTS)?;
    let (mut rq, mut rs) = (ReqSeen::default(), RespSeen::default());
    // One round trip raises the grant to the slots.
    p.resp
        .reverse_call(&mut p.l.b, cb_call(1)?)
        .map_err(|r| fail("reverse call 1", "sent", r.error))?;
    until(&mut p, &mut rq, &mut rs, "reverse call 1", &|q, _| {
        q.reverse.len() == 1
    })?;
    answer(&mut p, &mut rq)?;
    until(&mut p, &mut rq, &mut rs, "its reply", &|_, s| {
        s.replies.len() == 1
    })?;
    for x in [2, 3] {
        p.resp
            .reverse_call(&mut p.l.b, cb_call(x)?)
            .map_err(|r| fail(format!("reverse call {x}"), "sent", r.error))?;
    }
    until(
        &mut p,
        &mut rq,
        &mut rs,
        "reverse calls 2 and 3",
        &|q, _| q.reverse.len() == 2,
    )?;
    krpc_rdma::provider::Provider::disconnect(&mut p.l.a);
    until(
        &mut p,
        &mut rq,
        &mut rs,
        "both sides see the loss",
        &|q, s| q.lost && s.lost,
    )?;
    let mut failed = rs.failed.clone();
    failed.sort_unstable();
    eq("reverse calls failed", [2, 3].to_vec(), failed)?;
    ensure(
        !rs.failed_after_loss,
        "reverse failures",
        "reported before the loss",
    )?;
    for rc in core::mem::take(&mut rq.reverse) {
        let reply = cb_reply(rc.xid)?;
        let e = p.req.reverse_reply(&mut p.l.a, rc.ctx, reply).err();
        eq(
            "a reverse reply after the loss",
            Some(CallError::ConnectionLost),
            e.map(|e| e.error),
        )?;
    }
    drop(rq);
    p.finish()
}
