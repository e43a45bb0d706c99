//! A careless or hostile responder against the Requester (issue 27, liveness): a reply
//! whose transport header names a pending call but is malformed, or whose chunks contradict
//! what the call provisioned, fails that call — with the peer at fault, counted, its
//! credit, registrations (invalidated first) and pages given back — instead of leaving it
//! pending for a reply that will never come. A message too short to carry an XID is counted
//! and dropped; the call it might have answered stays pending and is answered later. A
//! malformed reply to an abandoned call frees its slot as a late reply would.
//!
//! The replies are hand-made and sent as raw Sends from side B (the Responder is only
//! polled, and drops every call it hands up), so each one consumes the Receive the
//! Requester posted for its call.

use alloc::format;
use alloc::vec::Vec;

use krpc_rdma::provider::Provider;
use krpc_rdma::transport::{CallError, Fault, RequesterEvent, ResponderEvent, TransportConfig};
use krpc_rdma::wire::{DecodeErrorKind, WriteChunk};

use crate::check::{ensure, eq, fail, At, Failure, Outcome};
use crate::data::Kind;
use crate::fixture::{Fixture, Setup};
use crate::heap::chunk_lists;
use crate::pair::{send_raw, Pair};
use crate::raw::{header, seg, words, RAW_WR};

/// What the Requester reported for one call.
#[derive(Debug)]
enum Seen {
    Reply,
    Failed(CallError, bool),
}

/// Poll the responder until it hands up the call `xid`, and drop it (`drop_call`): the
/// reply is ours to forge.
#[inline(never)]
fn take_and_drop<F: Fixture>(p: &mut Pair<'_, F>, xid: u32, step: &str) -> Outcome {
    let mut idle = 0;
    loop {
        let mut calls = Vec::new();
        p.resp.poll(&mut p.l.b, &mut |e| {
            if let ResponderEvent::Call(c) = e {
                calls.push(c);
            }
        });
        let mut found = false;
        for c in calls {
            found |= c.xid == xid;
            p.resp
                .drop_call(&mut p.l.b, c.ctx, &mut |_| {})
                .map_err(|e| fail(step, "drop_call", format!("{e:?}")))?;
        }
        if found {
            return Ok(());
        }
        p.l.idle(&mut idle, false, step)?;
    }
}

/// Send `msg` from side B as a raw Send (in B's last send buffer, which the idle Responder
/// does not use).
#[inline(never)]
fn forge<F: Fixture>(p: &mut Pair<'_, F>, msg: &[u8], step: &str) -> Outcome {
    let buf = p.l.b.resources().send_bufs.saturating_sub(1);
    send_raw(&mut p.l.b, RAW_WR, buf, msg).at(step)
}

/// Poll both sides until the requester reports the end of `xid`.
#[inline(never)]
fn ended<F: Fixture>(p: &mut Pair<'_, F>, xid: u32, step: &str) -> Result<Seen, Failure> {
    let mut idle = 0;
    loop {
        p.resp.poll(&mut p.l.b, &mut |_| {});
        let mut seen = None;
        let mut progress = false;
        p.req.poll(&mut p.l.a, &mut |e| {
            progress = true;
            match e {
                RequesterEvent::Reply { xid: x, .. } if x == xid => seen = Some(Seen::Reply),
                RequesterEvent::Failed {
                    xid: x,
                    error,
                    pages,
                } if x == xid => seen = Some(Seen::Failed(error, pages.is_some())),
                _ => {}
            }
        });
        if let Some(s) = seen {
            return Ok(s);
        }
        p.l.idle(&mut idle, progress, step)?;
    }
}

/// Poll both sides until the requester counted one more bad message than `before`; any
/// reply or failure meanwhile is a failure.
#[inline(never)]
fn counted<F: Fixture>(p: &mut Pair<'_, F>, before: u64, step: &str) -> Outcome {
    let mut idle = 0;
    while p.req.counters().bad_messages == before {
        p.resp.poll(&mut p.l.b, &mut |_| {});
        let mut other = None;
        p.req.poll(&mut p.l.a, &mut |e| {
            if matches!(
                e,
                RequesterEvent::Reply { .. } | RequesterEvent::Failed { .. }
            ) {
                other = Some(format!("{e:?}"));
            }
        });
        if let Some(e) = other {
            return Err(fail(step, "nothing reported", e));
        }
        p.l.idle(&mut idle, false, step)?;
    }
    Ok(())
}

/// A READ-like call (a write chunk registered in the caller's pages), its reply forged as
/// `reply(xid)`: the call fails with `want`, its pages come back, and it is counted.
#[inline(never)]
fn fails_with<F: Fixture>(
    p: &mut Pair<'_, F>,
    xid: u32,
    what: &str,
    reply: &[u8],
    want: CallError,
) -> Outcome {
    let (call, spec) = Kind::Read(5000).call(&p.l.pa, xid).at("READ call")?;
    p.call(call, spec, what)?;
    take_and_drop(p, xid, what)?;
    let (bad, replies) = (p.req.counters().bad_messages, p.req.counters().bad_replies);
    forge(p, reply, what)?;
    match ended(p, xid, what)? {
        Seen::Failed(e, pages) => {
            eq(format!("{what}: the call's error"), want, e)?;
            eq(format!("{what}: fault"), Fault::Peer, e.fault())?;
            eq(
                format!("{what}: the caller's pages handed back"),
                true,
                pages,
            )?;
        }
        Seen::Reply => return Err(fail(what, format!("Failed({want:?})"), "a reply")),
    }
    eq(format!("{what}: outstanding"), 0, p.req.outstanding())?;
    eq(
        format!("{what}: counted (bad messages, bad replies)"),
        (bad + 1, replies + 1),
        (p.req.counters().bad_messages, p.req.counters().bad_replies),
    )?;
    eq(
        format!("{what}: requester registrations"),
        0,
        p.l.fx.live_registrations(&p.l.a),
    )
}

/// Malformed replies naming a pending call (version 2, `RDMA_DONE`, a bad list
/// discriminator, a header cut short after the fixed words), and decodable ones that
/// contradict the call (two Write chunks where one was offered, `RDMA_MSG` reporting bytes
/// in a Reply chunk that was never offered): each fails its call (`MalformedReply` /
/// `BadReply`, the peer's fault) with its pages back and nothing registered, and the next
/// call goes out on the credit it gave back. A 3-byte message names no call: counted, and
/// the pending call is answered afterwards. A malformed reply to an abandoned call frees
/// its slot (a late reply). The connection stays up throughout.
pub fn a_malformed_reply_fails_its_call_and_returns_its_credit<F: Fixture>(fx: &mut F) -> Outcome {
    let mut p = Pair::new(
        fx,
        &Setup::both(TransportConfig {
            accept_remote_invalidate: false,
            ..TransportConfig::default()
        }),
    )?;
    // Each stage its own frame (the kernel self-test runs this on a 16 KiB stack, every
    // function under 1 KiB).
    let xid = malformed_headers(&mut p, 0x2700)?;
    let xid = mismatches(&mut p, xid)?;
    let xid = too_short(&mut p, xid)?;
    let xid = abandoned(&mut p, xid)?;
    last_call(&mut p, xid + 1)?;
    eq("bad replies counted", 6, p.req.counters().bad_replies)?;
    p.check_clean("after the bad replies")?;
    p.finish()
}

fn msg(xid: u32, vers: u32, proc_: u32, rest: &[u8]) -> Vec<u8> {
    let mut m = words(xid, vers, proc_);
    m.extend_from_slice(rest);
    m
}

/// Headers that do not decode, each naming a pending call: each fails its call. The last
/// XID used.
#[inline(never)]
fn malformed_headers<F: Fixture>(p: &mut Pair<'_, F>, mut xid: u32) -> Result<u32, Failure> {
    let malformed: [(&str, u32, u32, &[u8], DecodeErrorKind); 4] = [
        (
            "version 2",
            2,
            0,
            &[0; 12],
            DecodeErrorKind::BadVersion { vers: 2 },
        ),
        (
            "RDMA_DONE",
            1,
            3,
            &[0; 12],
            DecodeErrorKind::UnsupportedProc(3),
        ),
        (
            "write list discriminator 7",
            1,
            0,
            &[0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0],
            DecodeErrorKind::BadDiscriminator,
        ),
        (
            "cut after the fixed words",
            1,
            0,
            &[0; 4],
            DecodeErrorKind::Truncated,
        ),
    ];
    for (what, vers, proc_, rest, kind) in malformed {
        xid += 1;
        let m = msg(xid, vers, proc_, rest);
        fails_with(p, xid, what, &m, CallError::MalformedReply(kind))?;
    }
    Ok(xid)
}

/// Decodable, but not what the call provisioned.
#[inline(never)]
fn mismatches<F: Fixture>(p: &mut Pair<'_, F>, mut xid: u32) -> Result<u32, Failure> {
    xid += 1;
    let mut two = chunk_lists()?;
    for _ in 0..2 {
        let mut c = WriteChunk::new();
        c.push(seg(0x51, 0, 0)).at("write chunk")?;
        two.write_list.push(c).at("write list")?;
    }
    let mut m = header(xid, false, &two)?;
    m.extend_from_slice(&xid.to_be_bytes());
    fails_with(p, xid, "two write chunks", &m, CallError::BadReply)?;
    xid += 1;
    let mut rc = chunk_lists()?;
    let mut c = WriteChunk::new();
    c.push(seg(0x52, 64, 0)).at("reply chunk")?;
    rc.reply_chunk = Some(c);
    let mut m = header(xid, false, &rc)?;
    m.extend_from_slice(&xid.to_be_bytes());
    fails_with(
        p,
        xid,
        "RDMA_MSG with bytes in a reply chunk",
        &m,
        CallError::BadReply,
    )?;
    Ok(xid)
}

/// Too short to name a call: counted, dropped; the pending call is answered later.
#[inline(never)]
fn too_short<F: Fixture>(p: &mut Pair<'_, F>, mut xid: u32) -> Result<u32, Failure> {
    xid += 1;
    let (call, spec) = Kind::Small.call(&p.l.pa, xid).at("small call")?;
    p.call(call, spec, "small call")?;
    take_and_drop(p, xid, "small call")?;
    let bad = p.req.counters().bad_messages;
    forge(p, &[1, 2, 3], "3 bytes")?;
    counted(p, bad, "3 bytes")?;
    eq("3 bytes: the call still pending", 1, p.req.outstanding())?;
    let good = msg(xid, 1, 0, &[0; 12]);
    let good = [&good[..], &xid.to_be_bytes(), b"ok.."].concat();
    forge(p, &good, "the real reply")?;
    match ended(p, xid, "the real reply")? {
        Seen::Reply => Ok(xid),
        s => Err(fail("the real reply", "a reply", format!("{s:?}"))),
    }
}

/// An abandoned call's malformed reply ends its zombie slot.
#[inline(never)]
fn abandoned<F: Fixture>(p: &mut Pair<'_, F>, mut xid: u32) -> Result<u32, Failure> {
    xid += 1;
    let (call, spec) = Kind::Small.call(&p.l.pa, xid).at("call to abandon")?;
    p.call(call, spec, "call to abandon")?;
    take_and_drop(p, xid, "call to abandon")?;
    ensure(
        p.req.abandon(&mut p.l.a, xid).is_some(),
        "abandon",
        "the call abandoned",
    )?;
    let late = p.req.counters().late_replies;
    let bad = p.req.counters().bad_messages;
    forge(p, &msg(xid, 2, 0, &[0; 12]), "abandoned: version 2")?;
    counted(p, bad, "abandoned: version 2")?;
    eq(
        "abandoned: late replies",
        late + 1,
        p.req.counters().late_replies,
    )?;
    eq("abandoned: the slot freed", 0, p.req.outstanding())?;
    Ok(xid)
}

/// The connection works: one more call, answered by the Responder.
#[inline(never)]
fn last_call<F: Fixture>(p: &mut Pair<'_, F>, xid: u32) -> Outcome {
    let (call, spec) = Kind::Small.call(&p.l.pa, xid).at("last call")?;
    let pb = p.l.pb.clone();
    p.rpc(call, spec, &mut |c| {
        Kind::Small.reply(&pb, c.xid).at("reply")
    })?;
    Ok(())
}
