//! `ServerConnection`, the server loop every server runs (nfsd, the harness, the kernel
//! peers), over the software RC provider: replies wait in order for send buffers, dropped
//! calls give their context back, calls whose reply pages the budget does not admit are
//! held back in order while calls without reply data go on.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use krpc_rdma::provider::Resources;
use krpc_rdma::soft::SoftConfig;
use krpc_rdma::transport::{
    Incoming, ReplySpec, RequesterEvent, ServerConnection, SharedPages, TransportConfig, Wait,
};
use mbuf::{Chain, PAGE_SIZE};
use tests::rig::{reply_for, rig_opts, xdr_call, Rig, RigOpts};

const MIB: usize = 1 << 20;

/// A rig with `credits` on both sides and `send_bufs` send buffers at the server, its
/// Responder moved into a `ServerConnection`; the client learns the full grant first.
fn setup(credits: u32, send_bufs: u32) -> (Rig, ServerConnection) {
    let cfg = TransportConfig {
        max_requests: credits,
        ..TransportConfig::default()
    };
    let mut rig = rig_opts(RigOpts {
        req_cfg: cfg,
        resp_cfg: cfg,
        soft_b: SoftConfig::with(Resources {
            send_bufs,
            ..Resources::default()
        }),
        ..RigOpts::default()
    });
    // One call answered so that the client learns the full grant.
    rig.req
        .call(&mut rig.qa, xdr_call(0xfff, b"hi"), ReplySpec::inline(512))
        .unwrap();
    let ev = rig.run(&mut |c| reply_for(c.xid, b"ok"));
    assert!(matches!(ev.first(), Some(RequesterEvent::Reply { .. })));
    assert_eq!(rig.req.credits_granted(), credits);
    // The Responder moves into the connection; a placeholder takes its place in the rig.
    let placeholder = krpc_rdma::transport::Responder::new(
        cfg,
        SoftConfig::default().resources(),
        rig.pb.clone(),
    )
    .unwrap();
    let resp = std::mem::replace(&mut rig.resp, placeholder);
    (rig, ServerConnection::new(Box::new(resp)).unwrap())
}

/// Calls `xid`s with `body`, all sent now.
fn send(rig: &mut Rig, xids: impl IntoIterator<Item = u32>, body: impl Fn(u32) -> Vec<u8>) {
    for x in xids {
        rig.req
            .call(&mut rig.qa, xdr_call(x, &body(x)), ReplySpec::inline(512))
            .unwrap();
    }
}

/// The XIDs of the replies the client has now, in order of arrival.
fn replies(rig: &mut Rig) -> Vec<u32> {
    let mut got = Vec::new();
    rig.req.poll(&mut rig.qa, &mut |e| match e {
        RequesterEvent::Reply { xid, .. } => got.push(xid),
        RequesterEvent::Failed { xid, error, .. } => panic!("{xid}: {error}"),
        _ => {}
    });
    got
}

fn calls(conn: &mut ServerConnection) -> Vec<Incoming> {
    std::iter::from_fn(|| conn.next_call()).collect()
}

#[test]
fn replies_wait_in_order_for_send_buffers() {
    let (mut rig, mut conn) = setup(16, 4);
    send(&mut rig, 1..=16, |_| b"call".to_vec());
    conn.poll(&mut rig.qb);
    let cs = calls(&mut conn);
    assert_eq!(
        cs.iter().map(|c| c.xid).collect::<Vec<_>>(),
        (1..=16).collect::<Vec<_>>()
    );
    // Answered in reverse order: four Sends fit, the other twelve wait, in order.
    for c in cs.into_iter().rev() {
        conn.reply(&mut rig.qb, c.ctx, reply_for(c.xid, b"ok"))
            .unwrap();
    }
    assert_eq!((conn.stats().replies, conn.backlog()), (4, 12));
    assert_eq!(conn.wait(), Wait::Soon);
    assert_eq!(
        conn.wait().millis(),
        1,
        "a loop looks again within a millisecond"
    );
    let mut got = replies(&mut rig);
    for _ in 0..20 {
        conn.poll(&mut rig.qb);
        got.extend(replies(&mut rig));
    }
    let want: Vec<u32> = (1..=16).rev().collect();
    assert_eq!(got, want, "replies in the order they were given");
    let s = *conn.stats();
    assert_eq!(
        (s.calls, s.replies, s.replies_queued, s.reply_errors),
        (16, 16, 12, 0)
    );
    assert_eq!((conn.wait(), conn.wait().millis()), (Wait::Idle, 100));
}

#[test]
fn a_dropped_call_gives_its_context_back() {
    let (mut rig, mut conn) = setup(4, 64);
    send(&mut rig, 1..=4, |_| b"dup".to_vec());
    conn.poll(&mut rig.qb);
    let cs = calls(&mut conn);
    assert_eq!(cs.len(), 4);
    assert_eq!(conn.responder().calls_in_progress(), 4);
    for c in cs {
        conn.drop_call(&mut rig.qb, c.ctx);
    }
    assert_eq!(
        conn.responder().calls_in_progress(),
        0,
        "every context back"
    );
    assert_eq!(conn.stats().dropped, 4);
    assert_eq!(conn.counters().calls_dropped, 4);
    assert_eq!(conn.stats().reply_errors, 0);
    assert_eq!(conn.wait(), Wait::Idle);
}

/// The reply data a call asks for: its first body word, in KiB.
fn need(c: &Chain) -> usize {
    let mut b = [0u8; 4];
    c.copydata(4, &mut b)
        .map_or(0, |()| u32::from_be_bytes(b) as usize * 1024)
}

fn kib(k: u32) -> Vec<u8> {
    k.to_be_bytes().to_vec()
}

#[test]
fn calls_over_the_page_budget_are_held_back_in_order_and_others_go_on() {
    let (mut rig, conn) = setup(8, 64);
    let shared = SharedPages::new(2 * MIB);
    let mut conn = conn.with_reply_bytes(Box::new(need));
    conn.responder_mut().set_page_share(shared.join());
    // 1 and 2 take the whole budget, 3 finds no room, 4 has no reply data, 5 is behind 3.
    let sizes = [1024, 1024, 1024, 0, 4];
    send(&mut rig, 1..=5, |x| kib(sizes[x as usize - 1]));
    conn.poll(&mut rig.qb);
    let first = calls(&mut conn);
    assert_eq!(
        first.iter().map(|c| c.xid).collect::<Vec<_>>(),
        vec![1, 2, 4]
    );
    assert_eq!((conn.held_back(), conn.stats().held_back), (2, 2));
    assert_eq!(shared.in_use(), 2 * MIB);
    assert_eq!(conn.wait(), Wait::Soon);
    // Still no room: nothing comes out however often the loop polls.
    for _ in 0..3 {
        conn.poll(&mut rig.qb);
        assert!(conn.next_call().is_none());
    }
    // Call 1's reply: its pages come back when its Send completes (the next poll): 3 comes
    // out, 5 (behind it) waits for the next pages: those of call 2's reply.
    let mut first = first.into_iter();
    let (c1, c2, c4) = (
        first.next().unwrap(),
        first.next().unwrap(),
        first.next().unwrap(),
    );
    conn.reply(&mut rig.qb, c1.ctx, reply_for(1, b"ok"))
        .unwrap();
    assert_eq!(shared.in_use(), 2 * MIB, "held until the Send completes");
    conn.poll(&mut rig.qb);
    let c3 = calls(&mut conn);
    assert_eq!(c3.iter().map(|c| c.xid).collect::<Vec<_>>(), vec![3]);
    conn.reply(&mut rig.qb, c2.ctx, reply_for(2, b"ok"))
        .unwrap();
    conn.poll(&mut rig.qb);
    let c5 = calls(&mut conn);
    assert_eq!(c5.iter().map(|c| c.xid).collect::<Vec<_>>(), vec![5]);
    assert_eq!(shared.in_use(), MIB + PAGE_SIZE);
    assert_eq!(conn.held_back(), 0);
    for c in [c4].into_iter().chain(c3).chain(c5) {
        conn.reply(&mut rig.qb, c.ctx, reply_for(c.xid, b"ok"))
            .unwrap();
    }
    let mut got = replies(&mut rig);
    for _ in 0..5 {
        conn.poll(&mut rig.qb);
        got.extend(replies(&mut rig));
    }
    got.sort_unstable();
    assert_eq!(got, vec![1, 2, 3, 4, 5]);
    assert_eq!(shared.in_use(), 0, "every page of the budget came back");
    drop(conn);
    assert_eq!(shared.connections(), 0);
}

#[test]
fn a_lost_connection_forgets_what_it_held() {
    let (mut rig, mut conn) = setup(8, 2);
    send(&mut rig, 1..=8, |_| b"x".to_vec());
    conn.poll(&mut rig.qb);
    let cs = calls(&mut conn);
    for c in cs {
        conn.reply(&mut rig.qb, c.ctx, reply_for(c.xid, b"ok"))
            .unwrap();
    }
    assert_eq!(conn.backlog(), 6);
    rig.qa.disconnect();
    for _ in 0..5 {
        conn.poll(&mut rig.qb);
    }
    assert!(conn.is_lost());
    assert_eq!((conn.backlog(), conn.held_back()), (0, 0));
    assert_eq!(conn.wait(), Wait::Idle);
    assert!(conn.next_call().is_none());
}
