//! The krpc operations of the Requester beyond call/poll that need the soft provider:
//! duplicate XIDs refused, malformed replies ending as `BadReply` (RFC 8166 §4.3.1), bounded
//! poll. (Abandon, close and reconnect-with-resend are scenarios of the suite, run on every
//! provider: `abandon_revokes_at_once_and_drops_the_late_reply`,
//! `close_fails_every_pending_call_and_hands_the_pages_back`,
//! `reconnect_resends_owed_calls_but_not_abandoned_ones`.)
#![allow(clippy::unwrap_used)]

use krpc_rdma::transport::{CallError, ReplySpec, RequesterEvent, ResponderEvent};
use krpc_rdma::wire::{Body, ChunkLists, HeaderRepr, ReadSegment, Segment, WriteChunk};
use tests::rig::{self, assert_clean, raw_send, reply_for, rig, teardown, xdr_call};

/// Issue `xdr_call(xid, body)` expecting a reply of at most `max_reply` bytes (a reply
/// chunk is provisioned when that may not fit inline).
fn call(r: &mut rig::Rig, xid: u32, body: &[u8], max_reply: usize) {
    r.req
        .call(&mut r.qa, xdr_call(xid, body), ReplySpec::inline(max_reply))
        .unwrap();
}

/// One round trip, so the responder's grant (not the initial single credit) bounds the
/// calls in flight.
fn warm_up(r: &mut rig::Rig) {
    call(r, 0xffff, b"warm", 64);
    r.run(&mut |c| reply_for(c.xid, b"ok"));
}

/// A warmed-up rig ([`warm_up`]).
fn warm() -> rig::Rig {
    let mut r = rig();
    warm_up(&mut r);
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
    call(&mut r, 5, b"one", 64);
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
    call(&mut r, 5, b"three", 64);
    r.run(&mut |c| reply_for(c.xid, b"ok"));
    assert_clean(&r);
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
        call(&mut r, xid, b"readdir", 64 * 1024);
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
        call(&mut r, 100 + xid, b"n", 64);
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

/// `abandon` holds the revoked handles of at most half the slots back (each until its late
/// reply): with 8 slots, four abandoned calls with a reply chunk each are quarantined; the
/// fifth is released at once and the connection closed (`abandon_closes`), never a silent
/// leak; once the loss is seen nothing is registered and no slot is left. (The late reply's
/// Send With Invalidate itself: the scenario
/// `late_send_with_invalidate_after_abandon_keeps_the_connection`.)
#[test]
fn abandon_quarantine_is_bounded_by_half_the_slots() {
    let cfg = krpc_rdma::transport::TransportConfig {
        max_requests: 8,
        ..Default::default()
    };
    let mut r = rig::rig_with(cfg);
    warm_up(&mut r);
    assert!(r.req.credits_granted() >= 5, "{}", r.req.credits_granted());
    for xid in 1..=5 {
        call(&mut r, xid, b"slow", 64 * 1024);
    }
    let regs = r.qa.live_registrations();
    assert!(regs >= 5, "a reply chunk each: {regs}");
    for xid in 1..=4 {
        assert!(r.req.abandon(&mut r.qa, xid).is_some());
    }
    let c = r.req.counters();
    assert_eq!((c.abandon_quarantines, c.abandon_closes), (4, 0));
    assert_eq!(r.qa.live_registrations(), regs - 4, "revoked: not live");
    assert!(!r.req.is_lost());
    assert!(r.req.abandon(&mut r.qa, 5).is_some());
    let c = r.req.counters();
    assert_eq!((c.abandon_quarantines, c.abandon_closes), (4, 1));
    for _ in 0..100 {
        if r.req.is_lost() {
            break;
        }
        r.poll_once();
    }
    assert!(r.req.is_lost(), "the connection closed by abandon");
    assert_eq!(r.req.outstanding(), 0);
    assert_eq!(r.qa.live_registrations(), 0);
    teardown(r);
}
