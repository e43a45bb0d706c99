//! Reverse-direction RPC (RFC 8167) over the software RC provider: the Responder calls the
//! Requester on the same connection and gets its reply; reverse calls interleave with
//! forward calls at full credit; the slots and the grant bound them; a reverse call beyond
//! the slots closes the connection, a reverse reply nobody asked for is counted and dropped,
//! a loss reports every reverse call outstanding; reverse messages are inline only; a reverse
//! call the upper layer drops unanswered (its `ReverseCtx` a guard) is answered `SYSTEM_ERR`
//! by the requester's next poll, unless the connection is gone.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use krpc_rdma::provider::Resources;
use krpc_rdma::soft::SoftConfig;
use krpc_rdma::transport::{
    CallError, ReplySpec, RequesterEvent, ResponderEvent, ReverseCall, ReverseOutcome,
    ServerConnection, TransportConfig,
};
use mbuf::Chain;
use tests::rig::{raw_send, reply_for, rig_opts, xdr_call, Rig, RigOpts};

/// Forward credits; reverse slots reserved at each end; receive buffers for both.
const CREDITS: u32 = 8;
const REVERSE: u32 = 2;

fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_be_bytes()).collect()
}

/// An RPC call message (msg_type CALL, RPC version 2, the NFSv4 callback program).
fn cb_call(xid: u32, body: &[u8]) -> Chain {
    let mut v = words(&[xid, 0, 2, 0x4000_0000, 1, 1]);
    v.extend_from_slice(body);
    Chain::from_bytes(&v).unwrap()
}

/// An RPC reply message (msg_type REPLY, accepted, success).
fn cb_reply(xid: u32, body: &[u8]) -> Chain {
    let mut v = words(&[xid, 1, 0, 0, 0, 0]);
    v.extend_from_slice(body);
    Chain::from_bytes(&v).unwrap()
}

/// The RPC reply the requester answers a reverse call nobody above answered with: accepted,
/// an `AUTH_NONE` verifier, `SYSTEM_ERR` (RFC 5531).
fn system_err(xid: u32) -> Vec<u8> {
    words(&[xid, 1, 0, 0, 0, 5])
}

/// A connected pair with `REVERSE` reverse slots reserved at both ends (`req_slots` /
/// `resp_slots` enabled) and receive buffers for the forward credits and the reverse
/// slots; the requester has learnt the full grant.
fn setup(req_slots: u32, resp_slots: u32) -> Rig {
    setup_with(req_slots, resp_slots, 16)
}

/// [`setup`] with `send_bufs` send buffers at each end.
fn setup_with(req_slots: u32, resp_slots: u32, send_bufs: u32) -> Rig {
    let cfg = TransportConfig {
        max_requests: CREDITS,
        max_reverse_requests: REVERSE,
        ..TransportConfig::default()
    };
    let res = Resources {
        recv_bufs: CREDITS + REVERSE,
        send_bufs,
        ..Resources::default()
    };
    let mut rig = rig_opts(RigOpts {
        req_cfg: cfg,
        resp_cfg: cfg,
        soft_a: SoftConfig::with(res),
        soft_b: SoftConfig::with(res),
        ..RigOpts::default()
    });
    rig.req.set_reverse_slots(&mut rig.qa, req_slots).unwrap();
    rig.resp.set_reverse_slots(resp_slots).unwrap();
    rig.req
        .call(&mut rig.qa, xdr_call(0xfff, b"hi"), ReplySpec::inline(512))
        .unwrap();
    let ev = rig.run(&mut |c| reply_for(c.xid, b"ok"));
    assert!(matches!(ev.first(), Some(RequesterEvent::Reply { .. })));
    assert_eq!(rig.req.credits_granted(), CREDITS);
    rig
}

/// Poll the requester: the reverse calls it hands up (anything else but replies fails).
fn reverse_calls(rig: &mut Rig) -> (Vec<ReverseCall>, Vec<u32>, bool) {
    let (mut calls, mut replies, mut lost) = (Vec::new(), Vec::new(), false);
    rig.req.poll(&mut rig.qa, &mut |e| match e {
        RequesterEvent::ReverseCall(rc) => calls.push(rc),
        RequesterEvent::Reply { xid, .. } => replies.push(xid),
        RequesterEvent::ConnectionLost => lost = true,
        RequesterEvent::Failed { .. } | RequesterEvent::Connected(_) => {}
    });
    (calls, replies, lost)
}

/// Poll the responder: forward calls held, reverse replies (XID, bytes), reverse failures,
/// loss.
#[derive(Default)]
struct Seen {
    calls: Vec<krpc_rdma::transport::Incoming>,
    replies: Vec<(u32, Vec<u8>)>,
    failed: Vec<u32>,
    lost: bool,
}

fn responder_poll(rig: &mut Rig, seen: &mut Seen) {
    rig.resp.poll(&mut rig.qb, &mut |e| match e {
        ResponderEvent::Call(c) => seen.calls.push(c),
        ResponderEvent::ReverseReply { xid, reply } => {
            seen.replies.push((xid, reply.to_vec().unwrap()));
        }
        ResponderEvent::ReverseFailed { xid } => {
            assert!(!seen.lost, "reverse failures come before the loss");
            seen.failed.push(xid);
        }
        ResponderEvent::ConnectionLost => seen.lost = true,
        ResponderEvent::Connected(_) => {}
    });
}

#[test]
fn a_reverse_call_gets_its_reply_on_the_same_connection() {
    let mut rig = setup(REVERSE, REVERSE);
    rig.resp
        .reverse_call(&mut rig.qb, cb_call(0xcb01, b"CB_SEQUENCE"))
        .unwrap();
    let (calls, _, lost) = reverse_calls(&mut rig);
    assert!(!lost);
    let [rc] = <[ReverseCall; 1]>::try_from(calls).unwrap();
    assert_eq!(rc.xid, 0xcb01);
    assert_eq!(
        rc.call.to_vec().unwrap(),
        cb_call(0xcb01, b"CB_SEQUENCE").to_vec().unwrap()
    );
    assert_eq!(rig.req.reverse_slots(), (REVERSE, 1));
    rig.req
        .reverse_reply(&mut rig.qa, rc.ctx, cb_reply(0xcb01, b"NFS4_OK!"))
        .unwrap();
    assert_eq!(rig.req.reverse_slots(), (REVERSE, 0));
    let mut seen = Seen::default();
    responder_poll(&mut rig, &mut seen);
    assert_eq!(
        seen.replies,
        [(0xcb01, cb_reply(0xcb01, b"NFS4_OK!").to_vec().unwrap())]
    );
    // The requester's reverse reply granted its slots.
    assert_eq!(rig.resp.reverse_slots(), (REVERSE, 0, REVERSE));
    let (q, r) = (rig.req.counters(), rig.resp.counters());
    assert_eq!((q.reverse_calls, q.reverse_replies), (1, 1));
    assert_eq!((r.reverse_calls, r.reverse_replies), (1, 1));
    assert_eq!(q.bad_messages + r.bad_messages, 0);
    // The forward direction goes on.
    rig.req
        .call(
            &mut rig.qa,
            xdr_call(0x11, b"after"),
            ReplySpec::inline(512),
        )
        .unwrap();
    let ev = rig.run(&mut |c| reply_for(c.xid, b"ok"));
    assert!(matches!(
        ev.first(),
        Some(RequesterEvent::Reply { xid: 0x11, .. })
    ));
}

#[test]
fn reverse_calls_interleave_with_forward_calls_at_full_credit() {
    let mut rig = setup(REVERSE, REVERSE);
    // Every forward credit in use: the calls are held at the responder, unanswered.
    for x in 1..=CREDITS {
        rig.req
            .call(&mut rig.qa, xdr_call(x, b"fwd"), ReplySpec::inline(512))
            .unwrap();
    }
    let refused = rig
        .req
        .call(&mut rig.qa, xdr_call(99, b"fwd"), ReplySpec::inline(512))
        .unwrap_err();
    assert_eq!(refused.error, CallError::NoCredit);
    let mut seen = Seen::default();
    responder_poll(&mut rig, &mut seen);
    assert_eq!(seen.calls.len(), CREDITS as usize);

    // One reverse call until the requester's first grant, then as many as the slots.
    rig.resp
        .reverse_call(&mut rig.qb, cb_call(0xcb01, b"one"))
        .unwrap();
    let second = rig
        .resp
        .reverse_call(&mut rig.qb, cb_call(0xcb02, b"two"))
        .unwrap_err();
    assert_eq!(second.error, CallError::NoCredit);
    assert_eq!(
        second.msg.to_vec().unwrap(),
        cb_call(0xcb02, b"two").to_vec().unwrap()
    );
    let mut answered = 0;
    for round in 0..2 {
        let (calls, _, lost) = reverse_calls(&mut rig);
        assert!(!lost);
        assert_eq!(calls.len(), round + 1, "round {round}");
        for rc in calls {
            let reply = cb_reply(rc.xid, b"ok");
            rig.req.reverse_reply(&mut rig.qa, rc.ctx, reply).unwrap();
            answered += 1;
        }
        responder_poll(&mut rig, &mut seen);
        if round == 0 {
            // The grant is the requester's slots now: two at once.
            for x in [0xcb02, 0xcb03] {
                rig.resp
                    .reverse_call(&mut rig.qb, cb_call(x, b"more"))
                    .unwrap();
            }
            let third = rig
                .resp
                .reverse_call(&mut rig.qb, cb_call(0xcb04, b"x"))
                .unwrap_err();
            assert_eq!(third.error, CallError::NoCredit);
        }
    }
    assert_eq!(answered, 3);
    let mut got: Vec<u32> = seen.replies.iter().map(|r| r.0).collect();
    got.sort_unstable();
    assert_eq!(got, [0xcb01, 0xcb02, 0xcb03]);

    // Now the forward calls are answered: every one arrives.
    for c in seen.calls.drain(..) {
        rig.resp
            .reply(&mut rig.qb, c.ctx, reply_for(c.xid, b"ok"))
            .unwrap();
    }
    let mut replies = Vec::new();
    for _ in 0..10 {
        let (calls, r, lost) = reverse_calls(&mut rig);
        assert!(calls.is_empty() && !lost);
        replies.extend(r);
        responder_poll(&mut rig, &mut seen);
    }
    replies.sort_unstable();
    assert_eq!(replies, (1..=CREDITS).collect::<Vec<_>>());
    assert_eq!(rig.req.counters().connection_losses, 0);
    assert_eq!(rig.resp.counters().connection_losses, 0);
}

/// A reverse-direction call as raw bytes: `RDMA_MSG`, no chunks, the RPC call.
fn raw_reverse_call(xid: u32) -> Vec<u8> {
    let mut v = words(&[xid, 1, 1, 0, 0, 0, 0]);
    v.extend_from_slice(&cb_call(xid, b"raw").to_vec().unwrap());
    v
}

#[test]
fn a_reverse_call_beyond_the_slots_closes_the_connection() {
    // The requester agreed to one slot; a hostile responder sends two calls.
    let mut rig = setup(1, REVERSE);
    rig.req
        .call(&mut rig.qa, xdr_call(0x21, b"fwd"), ReplySpec::inline(512))
        .unwrap();
    raw_send(&mut rig.qb, 15, &raw_reverse_call(0xbad1));
    let (calls, _, lost) = reverse_calls(&mut rig);
    assert_eq!((calls.len(), lost), (1, false));
    raw_send(&mut rig.qb, 14, &raw_reverse_call(0xbad2));
    let mut failed = Vec::new();
    let mut lost = false;
    for _ in 0..4 {
        rig.req.poll(&mut rig.qa, &mut |e| match e {
            RequesterEvent::ConnectionLost => lost = true,
            RequesterEvent::Failed { xid, error, .. } => failed.push((xid, error)),
            RequesterEvent::ReverseCall(rc) => panic!("{:#x} handed up beyond the slots", rc.xid),
            _ => {}
        });
    }
    assert!(lost, "the requester closed the connection");
    assert_eq!(failed, [(0x21, CallError::ConnectionLost)]);
    let c = rig.req.counters();
    assert_eq!((c.reverse_overflows, c.closes, c.reverse_calls), (1, 1, 1));
    // The first call's context died with the connection.
    let _ = calls;
}

#[test]
fn a_reverse_reply_nobody_asked_for_is_counted_and_dropped() {
    let mut rig = setup(REVERSE, REVERSE);
    let mut reply = words(&[0x5eed, 1, 1, 0, 0, 0, 0]);
    reply.extend_from_slice(&cb_reply(0x5eed, b"unasked").to_vec().unwrap());
    raw_send(&mut rig.qa, 15, &reply);
    let mut seen = Seen::default();
    responder_poll(&mut rig, &mut seen);
    assert!(seen.replies.is_empty() && seen.calls.is_empty() && !seen.lost);
    assert_eq!(rig.resp.counters().reverse_replies_unexpected, 1);
    // The connection serves on, both ways.
    rig.resp
        .reverse_call(&mut rig.qb, cb_call(0xcb01, b"after"))
        .unwrap();
    let (calls, _, _) = reverse_calls(&mut rig);
    let [rc] = <[ReverseCall; 1]>::try_from(calls).unwrap();
    rig.req
        .reverse_reply(&mut rig.qa, rc.ctx, cb_reply(0xcb01, b"ok"))
        .unwrap();
    responder_poll(&mut rig, &mut seen);
    assert_eq!(seen.replies.len(), 1);
    rig.req
        .call(&mut rig.qa, xdr_call(0x31, b"fwd"), ReplySpec::inline(512))
        .unwrap();
    let ev = rig.run(&mut |c| reply_for(c.xid, b"ok"));
    assert!(matches!(
        ev.first(),
        Some(RequesterEvent::Reply { xid: 0x31, .. })
    ));
}

#[test]
fn a_loss_reports_every_reverse_call_outstanding() {
    let mut rig = setup(REVERSE, REVERSE);
    // The first reply raises the grant to two.
    rig.resp
        .reverse_call(&mut rig.qb, cb_call(1, b"a"))
        .unwrap();
    let (calls, _, _) = reverse_calls(&mut rig);
    for rc in calls {
        rig.req
            .reverse_reply(&mut rig.qa, rc.ctx, cb_reply(rc.xid, b""))
            .unwrap();
    }
    let mut seen = Seen::default();
    responder_poll(&mut rig, &mut seen);
    for x in [2, 3] {
        rig.resp
            .reverse_call(&mut rig.qb, cb_call(x, b"b"))
            .unwrap();
    }
    let (calls, _, _) = reverse_calls(&mut rig);
    assert_eq!(calls.len(), 2);
    rig.qa.disconnect();
    for _ in 0..4 {
        responder_poll(&mut rig, &mut seen);
    }
    seen.failed.sort_unstable();
    assert_eq!(seen.failed, [2, 3]);
    assert!(seen.lost);
    // The requester's contexts are stale after its loss.
    let (_, _, lost) = reverse_calls(&mut rig);
    assert!(lost);
    for rc in calls {
        let e = rig
            .req
            .reverse_reply(&mut rig.qa, rc.ctx, cb_reply(rc.xid, b""))
            .unwrap_err();
        assert_eq!(e.error, CallError::ConnectionLost);
        assert!(e.ctx.is_none());
    }
    let refused = rig
        .resp
        .reverse_call(&mut rig.qb, cb_call(4, b""))
        .unwrap_err();
    assert_eq!(refused.error, CallError::ConnectionLost);
}

#[test]
fn reverse_messages_are_inline_only() {
    let mut rig = setup(REVERSE, REVERSE);
    // Beyond the 1024-byte inline threshold: refused, handed back, the slot free.
    let big = cb_call(0xb16, &vec![7u8; 2000]);
    let e = rig.resp.reverse_call(&mut rig.qb, big).unwrap_err();
    assert_eq!(e.error, CallError::TooLarge);
    assert_eq!(e.msg.len(), 24 + 2000);
    assert_eq!(rig.resp.reverse_slots().1, 0);
    rig.resp
        .reverse_call(&mut rig.qb, cb_call(0xcb01, b"small"))
        .unwrap();
    let (calls, _, _) = reverse_calls(&mut rig);
    let [rc] = <[ReverseCall; 1]>::try_from(calls).unwrap();
    // A reply too large comes back with its context; a reply for another XID too.
    let e = rig
        .req
        .reverse_reply(&mut rig.qa, rc.ctx, cb_reply(0xcb01, &vec![1u8; 2000]))
        .unwrap_err();
    assert_eq!(e.error, CallError::TooLarge);
    let ctx = e.ctx.expect("the context comes back");
    let e = rig
        .req
        .reverse_reply(&mut rig.qa, ctx, cb_reply(0xcb02, b"wrong xid"))
        .unwrap_err();
    assert_eq!(e.error, CallError::BadCall);
    let ctx = e.ctx.expect("the context comes back");
    rig.req
        .reverse_reply(&mut rig.qa, ctx, cb_reply(0xcb01, b"fits"))
        .unwrap();
    let mut seen = Seen::default();
    responder_poll(&mut rig, &mut seen);
    assert_eq!(seen.replies.len(), 1);
}

#[test]
fn slots_are_within_what_was_reserved_and_the_buffers() {
    let mut rig = setup(0, 0);
    assert_eq!(
        rig.req.set_reverse_slots(&mut rig.qa, REVERSE + 1),
        Err(CallError::BadConfig)
    );
    assert_eq!(
        rig.resp.set_reverse_slots(REVERSE + 1),
        Err(CallError::BadConfig)
    );
    // None enabled: a reverse call is refused at the responder, and one arriving at the
    // requester (in the Receive kept for a forward call's reply) has no slot: the
    // connection closes.
    let e = rig
        .resp
        .reverse_call(&mut rig.qb, cb_call(1, b""))
        .unwrap_err();
    assert_eq!(e.error, CallError::BadConfig);
    rig.req
        .call(&mut rig.qa, xdr_call(0x41, b"fwd"), ReplySpec::inline(512))
        .unwrap();
    raw_send(&mut rig.qb, 15, &raw_reverse_call(0xbad3));
    let mut lost = false;
    for _ in 0..4 {
        let (calls, _, l) = reverse_calls(&mut rig);
        assert!(calls.is_empty());
        lost |= l;
    }
    assert!(lost);
    assert_eq!(rig.req.counters().reverse_overflows, 1);
}

#[test]
fn the_server_connection_queues_reverse_outcomes_in_order() {
    let mut rig = setup(REVERSE, REVERSE);
    let placeholder = krpc_rdma::transport::Responder::new(
        TransportConfig::default(),
        SoftConfig::default().resources(),
        rig.pb.clone(),
    )
    .unwrap();
    let resp = std::mem::replace(&mut rig.resp, placeholder);
    let mut conn = ServerConnection::new(Box::new(resp)).unwrap();
    conn.reverse_call(&mut rig.qb, cb_call(0xcb01, b"recall"))
        .unwrap();
    let (calls, _, _) = reverse_calls(&mut rig);
    for rc in calls {
        rig.req
            .reverse_reply(&mut rig.qa, rc.ctx, cb_reply(rc.xid, b"done"))
            .unwrap();
    }
    conn.poll(&mut rig.qb);
    match conn.next_reverse() {
        Some(ReverseOutcome::Reply { xid, reply }) => {
            assert_eq!(xid, 0xcb01);
            assert_eq!(
                reply.to_vec().unwrap(),
                cb_reply(0xcb01, b"done").to_vec().unwrap()
            );
        }
        other => panic!("{other:?}"),
    }
    conn.reverse_call(&mut rig.qb, cb_call(0xcb02, b"recall"))
        .unwrap();
    rig.qa.disconnect();
    for _ in 0..4 {
        conn.poll(&mut rig.qb);
    }
    assert!(conn.is_lost());
    assert!(matches!(
        conn.next_reverse(),
        Some(ReverseOutcome::Failed { xid: 0xcb02 })
    ));
    assert!(conn.next_reverse().is_none());
}

#[test]
fn a_dropped_reverse_call_is_answered_system_err_and_its_slot_freed() {
    let mut rig = setup(REVERSE, REVERSE);
    rig.resp
        .reverse_call(&mut rig.qb, cb_call(0xcb01, b"CB_RECALL"))
        .unwrap();
    let (calls, _, lost) = reverse_calls(&mut rig);
    assert_eq!((calls.len(), lost), (1, false));
    assert_eq!(rig.req.reverse_slots(), (REVERSE, 1));
    // The upper layer forgets the call: nothing happens until the next poll.
    drop(calls);
    assert_eq!(rig.req.reverse_slots(), (REVERSE, 1));
    let (calls, _, lost) = reverse_calls(&mut rig);
    assert!(calls.is_empty() && !lost);
    assert_eq!(
        rig.req.reverse_slots(),
        (REVERSE, 0),
        "the slot is free again"
    );
    let q = rig.req.counters();
    assert_eq!(
        (q.reverse_calls, q.reverse_dropped, q.reverse_replies),
        (1, 1, 0)
    );
    // The responder gets its answer: SYSTEM_ERR for that XID.
    let mut seen = Seen::default();
    responder_poll(&mut rig, &mut seen);
    assert_eq!(seen.replies, [(0xcb01, system_err(0xcb01))]);
    assert_eq!(seen.replies[0].1.len(), 24);
    assert_eq!(rig.resp.reverse_slots(), (REVERSE, 0, REVERSE));
    // Answered once: later polls send nothing more.
    for _ in 0..2 {
        let (calls, _, _) = reverse_calls(&mut rig);
        assert!(calls.is_empty());
        responder_poll(&mut rig, &mut seen);
    }
    assert_eq!(seen.replies.len(), 1);
    assert_eq!(rig.req.counters().reverse_dropped, 1);
    // Another reverse call then goes as usual.
    rig.resp
        .reverse_call(&mut rig.qb, cb_call(0xcb02, b"CB_SEQUENCE"))
        .unwrap();
    let (calls, _, _) = reverse_calls(&mut rig);
    let [rc] = <[ReverseCall; 1]>::try_from(calls).unwrap();
    assert_eq!(rc.xid, 0xcb02);
    rig.req
        .reverse_reply(&mut rig.qa, rc.ctx, cb_reply(0xcb02, b"NFS4_OK!"))
        .unwrap();
    responder_poll(&mut rig, &mut seen);
    assert_eq!(
        seen.replies[1..],
        [(0xcb02, cb_reply(0xcb02, b"NFS4_OK!").to_vec().unwrap())]
    );
    assert_eq!(rig.req.reverse_slots(), (REVERSE, 0));
    let (q, r) = (rig.req.counters(), rig.resp.counters());
    assert_eq!((q.reverse_replies, q.reverse_dropped), (1, 1));
    assert_eq!((r.reverse_calls, r.reverse_replies), (2, 2));
    assert_eq!(q.bad_messages + r.bad_messages, 0);
    assert_eq!(q.connection_losses + r.connection_losses, 0);
}

#[test]
fn a_reverse_context_dropped_after_the_loss_does_nothing() {
    let mut rig = setup(REVERSE, REVERSE);
    rig.resp
        .reverse_call(&mut rig.qb, cb_call(0xcb01, b"CB_RECALL"))
        .unwrap();
    let (calls, _, _) = reverse_calls(&mut rig);
    assert_eq!(calls.len(), 1);
    rig.qa.disconnect();
    let mut lost = false;
    for _ in 0..4 {
        let (more, _, l) = reverse_calls(&mut rig);
        assert!(more.is_empty());
        lost |= l;
    }
    assert!(lost);
    assert_eq!(rig.req.reverse_slots(), (REVERSE, 0));
    let before = *rig.req.counters();
    // The stale context dropped: its mark is cleared by the next polls, nothing sent.
    drop(calls);
    for _ in 0..2 {
        let (more, _, l) = reverse_calls(&mut rig);
        assert!(more.is_empty() && !l);
    }
    assert_eq!(*rig.req.counters(), before);
    assert_eq!(rig.req.counters().reverse_dropped, 0);
    assert_eq!(rig.req.reverse_slots(), (REVERSE, 0));
}

#[test]
fn a_context_handed_back_by_a_reply_too_large_is_answered_when_dropped() {
    let mut rig = setup(REVERSE, REVERSE);
    rig.resp
        .reverse_call(&mut rig.qb, cb_call(0xcb01, b"CB_GETATTR"))
        .unwrap();
    let (calls, _, _) = reverse_calls(&mut rig);
    let [rc] = <[ReverseCall; 1]>::try_from(calls).unwrap();
    let e = rig
        .req
        .reverse_reply(&mut rig.qa, rc.ctx, cb_reply(0xcb01, &vec![1u8; 2000]))
        .unwrap_err();
    assert_eq!(e.error, CallError::TooLarge);
    assert!(e.ctx.is_some(), "the context comes back");
    // The upper layer gives up instead of answering with something smaller.
    drop(e);
    let _ = reverse_calls(&mut rig);
    assert_eq!(rig.req.reverse_slots(), (REVERSE, 0));
    assert_eq!(rig.req.counters().reverse_dropped, 1);
    let mut seen = Seen::default();
    responder_poll(&mut rig, &mut seen);
    assert_eq!(seen.replies, [(0xcb01, system_err(0xcb01))]);
}

#[test]
fn a_context_handed_back_by_back_pressure_is_answered_once_a_send_buffer_frees() {
    const SEND_BUFS: u32 = 4;
    let mut rig = setup_with(REVERSE, REVERSE, SEND_BUFS);
    rig.resp
        .reverse_call(&mut rig.qb, cb_call(0xcb01, b"CB_RECALL"))
        .unwrap();
    let (calls, _, _) = reverse_calls(&mut rig);
    let [rc] = <[ReverseCall; 1]>::try_from(calls).unwrap();
    // Forward calls hold every send buffer until the requester reaps their Sends.
    let mut sent = 0;
    loop {
        match rig.req.call(
            &mut rig.qa,
            xdr_call(0x100 + sent, b"fwd"),
            ReplySpec::inline(512),
        ) {
            Ok(()) => sent += 1,
            Err(r) => {
                assert_eq!(r.error, CallError::WouldBlock);
                break;
            }
        }
    }
    assert_eq!(sent, SEND_BUFS);
    let e = rig
        .req
        .reverse_reply(&mut rig.qa, rc.ctx, cb_reply(0xcb01, b"NFS4_OK!"))
        .unwrap_err();
    assert_eq!(e.error, CallError::WouldBlock);
    let ctx = e.ctx.expect("the context comes back");
    drop(ctx);
    // The next poll tries before it reaps the Sends: no buffer, the call waits (marked
    // again); the poll after answers it.
    let (calls, _, lost) = reverse_calls(&mut rig);
    assert!(calls.is_empty() && !lost);
    assert_eq!(rig.req.reverse_slots(), (REVERSE, 1));
    assert_eq!(rig.req.counters().reverse_dropped, 0);
    let (calls, _, lost) = reverse_calls(&mut rig);
    assert!(calls.is_empty() && !lost);
    assert_eq!(rig.req.reverse_slots(), (REVERSE, 0));
    assert_eq!(rig.req.counters().reverse_dropped, 1);
    let mut seen = Seen::default();
    responder_poll(&mut rig, &mut seen);
    assert_eq!(seen.replies, [(0xcb01, system_err(0xcb01))]);
    assert_eq!(seen.calls.len(), SEND_BUFS as usize);
    // The forward calls are answered as usual.
    for c in seen.calls.drain(..) {
        rig.resp
            .reply(&mut rig.qb, c.ctx, reply_for(c.xid, b"ok"))
            .unwrap();
    }
    let mut replies = Vec::new();
    for _ in 0..4 {
        let (calls, r, lost) = reverse_calls(&mut rig);
        assert!(calls.is_empty() && !lost);
        replies.extend(r);
    }
    replies.sort_unstable();
    assert_eq!(replies, (0x100..0x100 + SEND_BUFS).collect::<Vec<_>>());
}

#[test]
fn a_reverse_context_of_another_requester_goes_back_to_its_own() {
    let mut one = setup(REVERSE, REVERSE);
    let mut two = setup(REVERSE, REVERSE);
    for rig in [&mut one, &mut two] {
        rig.resp
            .reverse_call(&mut rig.qb, cb_call(0xcb01, b"CB_RECALL"))
            .unwrap();
    }
    let [a] = <[ReverseCall; 1]>::try_from(reverse_calls(&mut one).0).unwrap();
    let [b] = <[ReverseCall; 1]>::try_from(reverse_calls(&mut two).0).unwrap();
    // The same slot and generation on each connection, but not the same context.
    assert_ne!(a.ctx, b.ctx);
    let e = two
        .req
        .reverse_reply(&mut two.qa, a.ctx, cb_reply(0xcb01, b"wrong connection"))
        .unwrap_err();
    assert_eq!(e.error, CallError::BadCall);
    assert!(e.ctx.is_none());
    assert_eq!(two.req.reverse_slots(), (REVERSE, 1));
    // Dropped by the refusal, the context went back to its own requester, which answers.
    let _ = reverse_calls(&mut one);
    assert_eq!(one.req.reverse_slots(), (REVERSE, 0));
    assert_eq!(one.req.counters().reverse_dropped, 1);
    let mut seen = Seen::default();
    responder_poll(&mut one, &mut seen);
    assert_eq!(seen.replies, [(0xcb01, system_err(0xcb01))]);
    // The other connection's call is still there to answer.
    two.req
        .reverse_reply(&mut two.qa, b.ctx, cb_reply(0xcb01, b"NFS4_OK!"))
        .unwrap();
    let mut seen = Seen::default();
    responder_poll(&mut two, &mut seen);
    assert_eq!(
        seen.replies,
        [(0xcb01, cb_reply(0xcb01, b"NFS4_OK!").to_vec().unwrap())]
    );
    assert_eq!(two.req.counters().reverse_dropped, 0);
}
