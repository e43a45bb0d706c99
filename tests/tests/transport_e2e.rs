//! End-to-end tests of the transport core over the software RC provider.

use krpc_rdma::provider::{Provider, SendOp, SendWr};
use krpc_rdma::transport::{CallError, ReplySpec, RequesterEvent, ResponderEvent};
use krpc_rdma::wire::ErrorCode;
use mbuf::PAGE_SIZE;
use tests::rig::{assert_clean, reply_for, rig, take_reply, xdr_call};

#[test]
fn requester_sees_rdma_error() {
    let mut r = rig();
    // Corrupt the version byte of the next call on the wire.
    r.qa.corrupt_next_send(7, 0x02);
    r.req
        .call(&mut r.qa, xdr_call(77, b"x"), ReplySpec::inline(64))
        .unwrap();
    let ev = r.run(&mut |_| panic!("must not be handed up"));
    assert!(ev.iter().any(|e| matches!(
        e,
        RequesterEvent::Failed {
            xid: 77,
            error: CallError::Rdma(ErrorCode::Vers),
            ..
        }
    )));
    assert_eq!(r.req.counters().err_vers_received, 1);
    assert_clean(&r);
}

#[test]
fn unknown_xid_reply_is_dropped() {
    let mut r = rig();
    r.req
        .call(&mut r.qa, xdr_call(1, b"a"), ReplySpec::inline(64))
        .unwrap();
    let mut calls = Vec::new();
    r.resp.poll(&mut r.qb, &mut |e| {
        if let ResponderEvent::Call(c) = e {
            calls.push(c)
        }
    });
    // A raw RDMA_MSG with an unknown XID, then garbage, from the responder's side.
    let mut msg = vec![0, 0, 0x7e, 0x57, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0];
    msg.extend_from_slice(&[0; 12]);
    msg.extend_from_slice(&[0, 0, 0x7e, 0x57]);
    for (i, m) in [msg, vec![1, 2, 3]].into_iter().enumerate() {
        let sb = 63 - i as u32;
        r.qb.send_buf(sb).unwrap()[..m.len()].copy_from_slice(&m);
        r.qb.post_send(&[SendWr {
            wr_id: 1 << 40,
            op: SendOp::Send {
                buf: sb,
                len: m.len() as u32,
                invalidate: None,
            },
            signaled: false,
        }])
        .unwrap();
        let mut ev = Vec::new();
        r.req.poll(&mut r.qa, &mut |e| ev.push(e));
        assert!(ev.is_empty());
    }
    assert_eq!(r.req.counters().bad_messages, 2);
    assert_eq!(r.req.outstanding(), 1);
    assert_eq!(
        r.qa.posted_recvs(),
        1,
        "receive reposted for the pending call"
    );
    for c in calls {
        r.resp.reply(&mut r.qb, c.ctx, reply_for(1, b"ok")).unwrap();
    }
    let ev = r.run(&mut |c| reply_for(c.xid, b""));
    take_reply(ev, 1);
    let _ = PAGE_SIZE;
}
