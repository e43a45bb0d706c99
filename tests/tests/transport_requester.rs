//! The krpc operations of the Requester beyond call/poll: duplicate XIDs refused, abandon
//! (registrations revoked at once, the late reply dropped), close (every pending call failed,
//! pages handed back), malformed replies ending as `BadReply` (RFC 8166 §4.3.1), bounded poll.
#![allow(clippy::unwrap_used)]

use krpc_rdma::transport::{CallError, DdpReply, ReplySpec, RequesterEvent, ResponderEvent};
use krpc_rdma::wire::{Body, ChunkLists, HeaderRepr, ReadSegment, Segment, WriteChunk};
use krpc_rdma_tests::common::{
    self, assert_clean, pattern, raw_send, reply_for, rig, teardown, write_call, xdr_call,
};
use krpc_rdma_tests::raw::advertised_handles;
use mbuf::Chain;

/// A rig after one round trip, so the responder's grant (not the initial single credit)
/// bounds the calls in flight.
fn warm() -> common::Rig {
    let mut r = rig();
    r.req
        .call(&mut r.qa, xdr_call(0xffff, b"warm"), ReplySpec::inline(64))
        .unwrap();
    r.run(&mut |c| reply_for(c.xid, b"ok"));
    assert!(r.req.credits_granted() > 8);
    r
}

fn failed(ev: &[RequesterEvent], xid: u32) -> Option<CallError> {
    ev.iter().find_map(|e| match e {
        RequesterEvent::Failed { xid: x, error, .. } if *x == xid => Some(*error),
        _ => None,
    })
}

#[test]
fn a_second_call_with_an_outstanding_xid_is_refused() {
    let mut r = rig();
    r.req
        .call(&mut r.qa, xdr_call(5, b"one"), ReplySpec::inline(64))
        .unwrap();
    let rej = r
        .req
        .call(&mut r.qa, xdr_call(5, b"two"), ReplySpec::inline(64))
        .unwrap_err();
    assert_eq!(rej.error, CallError::DuplicateXid);
    assert_eq!(
        rej.call.to_vec().unwrap(),
        xdr_call(5, b"two").to_vec().unwrap()
    );
    let ev = r.run(&mut |c| reply_for(c.xid, b"ok"));
    let replies = ev
        .iter()
        .filter(|e| matches!(e, RequesterEvent::Reply { xid: 5, .. }))
        .count();
    assert_eq!(replies, 1);
    // Once answered, the XID may be used again.
    r.req
        .call(&mut r.qa, xdr_call(5, b"three"), ReplySpec::inline(64))
        .unwrap();
    r.run(&mut |c| reply_for(c.xid, b"ok"));
    assert_clean(&r);
    teardown(r);
}

/// An abandoned WRITE (read chunk) and READ (write chunk): their handles are dead the moment
/// `abandon` returns, the call and the caller's pages come back, the slot and credit stay until
/// the reply, which is then dropped.
#[test]
fn abandon_revokes_at_once_and_drops_the_late_reply() {
    let mut r = warm();
    let data = pattern(64 * 1024, 5);
    r.req
        .call(
            &mut r.qa,
            write_call(&r.pa, 10, &data),
            ReplySpec::inline(64),
        )
        .unwrap();
    let read_pages = Chain::alloc_pages(&r.pa, 32 * 1024).unwrap();
    r.req
        .call(
            &mut r.qa,
            xdr_call(11, b"read"),
            ReplySpec {
                max_reply: 32 * 1024 + 200,
                ddp: Some(DdpReply {
                    pages: read_pages,
                    locate: |_| Some(8),
                }),
            },
        )
        .unwrap();
    let h10 = advertised_handles(&mut r, 10);
    let h11 = advertised_handles(&mut r, 11);
    assert!(!h10.is_empty() && !h11.is_empty());
    // Abandon both before the responder looks.
    let a = r.req.abandon(&mut r.qa, 10).unwrap();
    assert_eq!(a.call.unwrap().len(), write_call(&r.pa, 10, &data).len());
    assert!(a.pages.is_none());
    let b = r.req.abandon(&mut r.qa, 11).unwrap();
    assert_eq!(
        b.pages.unwrap().len(),
        32 * 1024,
        "the caller's pages come back"
    );
    assert!(r.req.abandon(&mut r.qa, 11).is_none(), "only once");
    for (h, off, write) in h10.iter().chain(&h11) {
        let probe = if *write {
            r.qb.probe_remote_write(*h, *off, 1)
        } else {
            r.qb.probe_remote_read(*h, *off, 1)
        };
        assert!(probe.is_err(), "handle {h:#x} still valid after abandon");
    }
    assert_eq!(r.qa.live_registrations(), 0);
    assert_eq!(
        r.req.outstanding(),
        2,
        "slots and credits stay until the replies"
    );
    assert_eq!(r.req.counters().calls_abandoned, 2);
}

/// A late reply to an abandoned call frees its slot and credit and reports nothing.
#[test]
fn the_late_reply_of_an_abandoned_call_is_dropped() {
    let mut r = rig();
    r.req
        .call(&mut r.qa, xdr_call(30, b"slow"), ReplySpec::inline(64))
        .unwrap();
    let mut held = Vec::new();
    r.resp.poll(&mut r.qb, &mut |e| {
        if let ResponderEvent::Call(c) = e {
            held.push(c)
        }
    });
    assert_eq!(held.len(), 1);
    assert!(r.req.abandon(&mut r.qa, 30).is_some());
    let c = held.pop().unwrap();
    r.resp
        .reply(&mut r.qb, c.ctx, reply_for(30, b"late"))
        .unwrap();
    let mut ev = Vec::new();
    r.req.poll(&mut r.qa, &mut |e| ev.push(e));
    assert!(
        ev.iter().all(|e| !matches!(
            e,
            RequesterEvent::Reply { .. } | RequesterEvent::Failed { .. }
        )),
        "{ev:?}"
    );
    assert_eq!(r.req.counters().late_replies, 1);
    assert_eq!(r.req.outstanding(), 0);
    // The XID is free again.
    r.req
        .call(&mut r.qa, xdr_call(30, b"again"), ReplySpec::inline(64))
        .unwrap();
    let ev = r.run(&mut |c| reply_for(c.xid, b"ok"));
    assert!(ev
        .iter()
        .any(|e| matches!(e, RequesterEvent::Reply { xid: 30, .. })));
    assert_clean(&r);
    teardown(r);
}

#[test]
fn close_fails_every_pending_call_and_hands_the_pages_back() {
    let mut r = warm();
    let data = pattern(20_000, 1);
    r.req
        .call(
            &mut r.qa,
            write_call(&r.pa, 40, &data),
            ReplySpec::inline(64),
        )
        .unwrap();
    let pages = Chain::alloc_pages(&r.pa, 16 * 1024).unwrap();
    r.req
        .call(
            &mut r.qa,
            xdr_call(41, b"read"),
            ReplySpec {
                max_reply: 16 * 1024 + 200,
                ddp: Some(DdpReply {
                    pages,
                    locate: |_| Some(8),
                }),
            },
        )
        .unwrap();
    let mut ev = Vec::new();
    r.req.close(&mut r.qa, &mut |e| ev.push(e));
    assert_eq!(failed(&ev, 40), Some(CallError::Closed));
    assert_eq!(failed(&ev, 41), Some(CallError::Closed));
    let back = ev.iter().find_map(|e| match e {
        RequesterEvent::Failed {
            xid: 41,
            pages: Some(p),
            ..
        } => Some(p.len()),
        _ => None,
    });
    assert_eq!(back, Some(16 * 1024));
    assert!(matches!(ev.last(), Some(RequesterEvent::ConnectionLost)));
    assert_eq!(r.qa.live_registrations(), 0);
    let rej = r
        .req
        .call(&mut r.qa, xdr_call(42, b"x"), ReplySpec::inline(64))
        .unwrap_err();
    assert_eq!(rej.error, CallError::ConnectionLost);
    drop(ev);
    teardown(r);
}

/// Hand-made replies from side B: `RDMA_NOMSG` with no reply chunk, and a reply carrying a
/// Read list (RFC 8166 §4.3.1: a responder leaves it empty). Both end as `BadReply`, never as
/// a successful reply.
#[test]
fn malformed_replies_end_as_bad_reply() {
    for (xid, lists, nomsg) in [
        (
            50u32,
            {
                let mut l = ChunkLists::new();
                l.write_list.push(WriteChunk::new()).unwrap();
                l
            },
            true,
        ),
        (
            51,
            {
                let mut l = ChunkLists::new();
                l.read_list
                    .push(ReadSegment {
                        position: 4,
                        segment: Segment {
                            handle: 1,
                            length: 8,
                            offset: 0,
                        },
                    })
                    .unwrap();
                l
            },
            false,
        ),
    ] {
        let mut r = rig();
        // A reply chunk is provisioned (the reply may be large).
        r.req
            .call(
                &mut r.qa,
                xdr_call(xid, b"readdir"),
                ReplySpec::inline(64 * 1024),
            )
            .unwrap();
        let body = if nomsg {
            Body::NoMsg(lists)
        } else {
            Body::Msg(lists)
        };
        let h = HeaderRepr::new(xid, 8, body);
        let mut msg = vec![0u8; h.buffer_len()];
        h.emit(&mut msg).unwrap();
        if !nomsg {
            msg.extend_from_slice(&xid.to_be_bytes());
        }
        raw_send(&mut r.qb, 63, &msg);
        let mut ev = Vec::new();
        r.req.poll(&mut r.qa, &mut |e| ev.push(e));
        assert_eq!(failed(&ev, xid), Some(CallError::BadReply), "{ev:?}");
        assert_eq!(r.qa.live_registrations(), 0);
    }
}

/// `poll_bounded` handles at most its budget of completions and says whether more remain.
#[test]
fn bounded_poll_yields_after_its_budget() {
    let mut r = warm();
    for xid in 0..8u32 {
        r.req
            .call(&mut r.qa, xdr_call(100 + xid, b"n"), ReplySpec::inline(64))
            .unwrap();
    }
    let mut calls = 0;
    let mut rounds = 0;
    loop {
        rounds += 1;
        let done = r.resp.poll_bounded(&mut r.qb, 2, &mut |e| {
            if matches!(e, ResponderEvent::Call(_)) {
                calls += 1;
            }
        });
        if done {
            break;
        }
        assert!(rounds < 100);
    }
    assert_eq!(calls, 8);
    assert!(
        rounds >= 4,
        "eight Receives in budgets of two take four rounds or more"
    );
}

/// Reconnect: calls lost with their connection wait and are sent again with the same XID on
/// the next one; an abandoned call is not; the new connection starts at one credit.
#[test]
fn reconnect_resends_owed_calls_with_their_xid_but_not_abandoned_ones() {
    let mut r = warm();
    let mut rc = krpc_rdma::transport::Reconnect::new(&Default::default()).unwrap();
    for xid in [61u32, 62, 63] {
        rc.call(
            &mut r.req,
            &mut r.qa,
            xdr_call(xid, b"op"),
            ReplySpec::inline(64),
        )
        .unwrap();
    }
    let dup = rc
        .call(
            &mut r.req,
            &mut r.qa,
            xdr_call(62, b"op"),
            ReplySpec::inline(64),
        )
        .unwrap_err();
    assert_eq!(dup.error, CallError::DuplicateXid);
    // The connection breaks before the server sees anything.
    r.qa.disconnect();
    let mut passed = Vec::new();
    r.req
        .poll(&mut r.qa, &mut |e| passed.extend(rc.on_event(e)));
    assert!(
        matches!(passed.as_slice(), [RequesterEvent::ConnectionLost]),
        "lost calls are kept, not failed: {passed:?}"
    );
    assert_eq!(rc.unsent(), 3);
    let a = rc.abandon(&mut r.req, &mut r.qa, 62).unwrap();
    assert_eq!(
        a.call.unwrap().to_vec().unwrap(),
        xdr_call(62, b"op").to_vec().unwrap()
    );
    // A new connection over the same arenas.
    let (aa, ab) = (r.arena_a.clone(), r.arena_b.clone());
    drop(r);
    let mut r = common::rig_on(aa, ab, common::RigOpts::default());
    let mut sink = |_| {};
    assert_eq!(
        rc.resend(&mut r.req, &mut r.qa, &mut sink),
        1,
        "one credit: one resent"
    );
    let mut seen = Vec::new();
    for _ in 0..20 {
        let mut calls = Vec::new();
        r.resp.poll(&mut r.qb, &mut |e| {
            if let ResponderEvent::Call(c) = e {
                calls.push(c)
            }
        });
        for c in calls {
            seen.push(c.xid);
            r.resp
                .reply(&mut r.qb, c.ctx, reply_for(c.xid, b"ok"))
                .unwrap();
        }
        let mut evs = Vec::new();
        r.req.poll(&mut r.qa, &mut |e| evs.extend(rc.on_event(e)));
        rc.resend(&mut r.req, &mut r.qa, &mut sink);
        if rc.owed() == 0 {
            break;
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, vec![61, 63], "same XIDs, the abandoned one never");
    assert_eq!(rc.stats().retransmits, 2);
    assert_eq!(rc.owed(), 0);
    teardown(r);
}
