//! End-to-end tests of the transport core over the software RC provider.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use common::{
    assert_clean, pages_with, pattern, reply_for, rig, rig_opts, rig_with, take_reply, write_call,
    xdr_call, Rig, RigOpts,
};
use krpc_rdma::provider::{Provider, SendOp, SendWr, WcKind, WcStatus};
use krpc_rdma::soft::SoftConfig;
use krpc_rdma::transport::{
    CallError, DdpReply, ReplySpec, RequesterEvent, ResponderEvent, TransportConfig,
};
use krpc_rdma::wire::{ErrorCode, Header, HeaderRepr};
use mbuf::{Chain, Mbuf, PAGE_SIZE};

#[test]
fn small_call_round_trip() {
    let mut r = rig();
    r.req
        .call(
            &mut r.qa,
            xdr_call(7, b"hello world!"),
            ReplySpec::inline(512),
        )
        .unwrap();
    let ev = r.run(&mut |c| {
        assert_eq!(
            c.call.to_vec().unwrap(),
            xdr_call(7, b"hello world!").to_vec().unwrap()
        );
        reply_for(c.xid, b"pong")
    });
    let reply = take_reply(ev, 7);
    assert_eq!(
        reply.to_vec().unwrap(),
        reply_for(7, b"pong").to_vec().unwrap()
    );
    assert_eq!(r.req.counters().messages_received, 1);
    assert_eq!(r.resp.counters().messages_sent, 1);
    assert_clean(&r);
}

fn check_write(size: usize) {
    let mut r = rig();
    let data = pattern(size, size as u8);
    let call = write_call(&r.pa, 0x100 + size as u32, &data);
    let expect = call.to_vec().unwrap();
    r.req.call(&mut r.qa, call, ReplySpec::inline(256)).unwrap();
    let mut seen = false;
    let ev = r.run(&mut |c| {
        seen = true;
        let call = &c.call;
        assert_eq!(
            call.to_vec().unwrap(),
            expect,
            "byte-exact call for size {size}"
        );
        if size > 900 {
            // Shape: head XDR, marker, page mbufs, pad, tail.
            let kinds: Vec<_> = call.mbufs().collect();
            let marker = kinds
                .iter()
                .position(|m| m.is_ddp_marker())
                .expect("marker");
            let regions: Vec<_> = call.ddp_regions().collect();
            assert_eq!(regions.len(), 1);
            assert_eq!(regions[0].offset, 16);
            assert_eq!(regions[0].len, size);
            assert!(kinds[marker + 1].is_pages());
            let after = marker + 1 + regions[0].page_mbufs;
            let pad = (4 - size % 4) % 4;
            if pad > 0 {
                assert_eq!(kinds[after].len(), pad);
                assert_eq!(kinds[after].data().unwrap(), &[0u8; 3][..pad]);
            }
        }
        reply_for(c.xid, b"ok")
    });
    assert!(seen);
    take_reply(ev, 0x100 + size as u32);
    if size > 900 {
        assert_eq!(r.req.counters().read_chunks, 1);
        assert_eq!(r.resp.counters().read_chunks, 1);
    }
    assert_eq!(r.req.counters().ddp_payload_copied_bytes, 0);
    assert_eq!(r.resp.counters().ddp_payload_copied_bytes, 0);
    assert_clean(&r);
    drop(r.req);
    drop(r.resp);
    drop(r.qa);
    drop(r.qb);
    assert_eq!(r.arena_a.in_use(), 0);
    assert_eq!(r.arena_b.in_use(), 0);
}

#[test]
fn write_1mib_read_chunk_lands_byte_exact() {
    check_write(1 << 20);
}

#[test]
fn write_sizes_padding_rules() {
    for size in [0, 1, 4095, 4096, 4097, (1 << 20) + 3] {
        check_write(size);
    }
}

/// The DDP data item of a READ-like reply: [xid][status 0][len][data][pad][tail 4].
fn locate_read(c: &Chain) -> Option<usize> {
    (c.len() >= 12).then_some(12)
}

fn check_read(size: usize) {
    let mut r = rig();
    let data = pattern(size, 3);
    let xid = 0x200 + size as u32;
    let pages = Chain::alloc_pages(&r.pa, size.max(1).next_multiple_of(4)).unwrap();
    let spec = ReplySpec {
        max_reply: size + 64,
        ddp: Some(DdpReply {
            pages,
            locate: locate_read,
        }),
    };
    r.req.call(&mut r.qa, xdr_call(xid, b"READ"), spec).unwrap();
    let pb = r.pb.clone();
    let d2 = data.clone();
    let ev = r.run(&mut |c| {
        let mut rep = reply_for(c.xid, &0u32.to_be_bytes());
        rep.append(&(size as u32).to_be_bytes()).unwrap();
        rep.append_mbuf(Mbuf::ddp_marker()).unwrap();
        if size > 0 {
            rep.cat(pages_with(&pb, &d2)).unwrap();
        }
        let pad = (4 - size % 4) % 4;
        let mut tail = vec![0u8; pad];
        tail.extend_from_slice(&[0xcc; 4]);
        rep.append(&tail).unwrap();
        rep
    });
    let reply = take_reply(ev, xid);
    let mut expect = reply_for(xid, &0u32.to_be_bytes()).to_vec().unwrap();
    expect.extend_from_slice(&(size as u32).to_be_bytes());
    expect.extend_from_slice(&data);
    expect.extend(std::iter::repeat_n(0u8, (4 - size % 4) % 4));
    expect.extend_from_slice(&[0xcc; 4]);
    assert_eq!(reply.to_vec().unwrap(), expect, "READ reply size {size}");
    if size + 64 > 996 {
        let regions: Vec<_> = reply.ddp_regions().collect();
        assert_eq!(regions.len(), 1);
        assert_eq!(regions[0].len, size);
        assert_eq!(r.req.counters().write_chunks, 1);
        assert_eq!(r.resp.counters().ddp_payload_copied_bytes, 0);
    }
    drop(reply);
    assert_clean(&r);
    drop(r.req);
    drop(r.resp);
    drop(r.qa);
    drop(r.qb);
    assert_eq!(r.arena_a.in_use(), 0);
    assert_eq!(r.arena_b.in_use(), 0);
}

#[test]
fn read_through_write_chunk() {
    check_read(1 << 20);
}

#[test]
fn read_sizes_padding_rules() {
    for size in [0, 1, 4095, 4096, 4097, (1 << 20) + 3] {
        check_read(size);
    }
}

#[test]
fn long_call_and_long_reply() {
    let mut r = rig();
    let body = pattern(6000, 9);
    r.req
        .call(&mut r.qa, xdr_call(42, &body), ReplySpec::inline(20_000))
        .unwrap();
    let expect = xdr_call(42, &body).to_vec().unwrap();
    let big = pattern(12_000, 5);
    let b2 = big.clone();
    let ev = r.run(&mut |c| {
        assert_eq!(c.call.to_vec().unwrap(), expect);
        assert!(c.call.mbufs().all(|m| m.is_pages()));
        reply_for(c.xid, &b2)
    });
    let reply = take_reply(ev, 42);
    assert_eq!(
        reply.to_vec().unwrap(),
        reply_for(42, &big).to_vec().unwrap()
    );
    assert_eq!(r.req.counters().long_calls, 1);
    assert_eq!(r.resp.counters().long_calls, 1);
    assert_eq!(r.resp.counters().long_replies, 1);
    assert_eq!(r.req.counters().long_replies, 1);
    assert!(r.req.counters().pullup_bytes >= 6004);
    assert_eq!(r.req.counters().reply_chunks, 1);
    drop(reply);
    assert_clean(&r);
}

/// Send raw bytes from the requester's queue pair and return the responder's answer.
fn raw_exchange(r: &mut Rig, msg: &[u8]) -> Option<Vec<u8>> {
    // Use the last receive / send buffer ids: the Requester has posted none yet.
    let rb = 63;
    r.qa.post_recv(&[rb]).unwrap();
    common::raw_send(&mut r.qa, 63, msg);
    r.resp.poll(&mut r.qb, &mut |_| {});
    let mut wcs = [krpc_rdma::provider::Completion::EMPTY; 8];
    let n = r.qa.poll_cq(&mut wcs);
    for wc in &wcs[..n] {
        assert_eq!(wc.status, WcStatus::Success);
        if let WcKind::Recv { buf } = wc.kind {
            return Some(r.qa.recv_buf(buf).unwrap()[..wc.byte_len as usize].to_vec());
        }
    }
    None
}

#[test]
fn err_vers_and_err_chunk() {
    let mut r = rig();
    // Version 2.
    let mut msg = vec![0, 0, 0, 5, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0];
    msg.extend_from_slice(&[0; 12]);
    let ans = raw_exchange(&mut r, &msg).expect("answer");
    let h = HeaderRepr::parse(&ans).unwrap();
    assert_eq!(h.xid, 5);
    assert_eq!(
        h.body,
        krpc_rdma::wire::Body::Error(krpc_rdma::wire::ErrorBody::for_code(ErrorCode::Vers))
    );
    assert_eq!(r.resp.counters().err_vers_sent, 1);
    // RDMA_MSGP (proc 2): ERR_CHUNK.
    let mut msg = vec![0, 0, 0, 6, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2];
    msg.extend_from_slice(&[0; 12]);
    let ans = raw_exchange(&mut r, &msg).expect("answer");
    assert_eq!(
        Header::new_checked(&ans[..])
            .unwrap()
            .error_body()
            .unwrap()
            .code(),
        ErrorCode::Chunk
    );
    // A read chunk position beyond the inline payload: ERR_CHUNK (semantic check).
    let mut msg = vec![0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0];
    msg.extend_from_slice(&[0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 9, 0, 0, 0, 16]);
    msg.extend_from_slice(&[0; 8]);
    msg.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    msg.extend_from_slice(&[0, 0, 0, 7, 1, 2, 3, 4]);
    let ans = raw_exchange(&mut r, &msg).expect("answer");
    let h = Header::new_checked(&ans[..]).unwrap();
    assert_eq!(h.xid(), 7);
    assert_eq!(h.error_body().unwrap().code(), ErrorCode::Chunk);
    assert_eq!(r.resp.counters().err_chunk_sent, 2);
}

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
fn credits_128_calls_through_32_credits() {
    let cfg = TransportConfig {
        max_requests: 32,
        ..TransportConfig::default()
    };
    let mut r = rig_with(cfg);
    let mut sent = 0u32;
    let mut done = 0u32;
    let mut refused = 0u32;
    let mut max_out = 0;
    while done < 128 {
        while sent < 128 {
            match r.req.call(
                &mut r.qa,
                xdr_call(1000 + sent, b"c"),
                ReplySpec::inline(64),
            ) {
                Ok(()) => sent += 1,
                Err(rej) => {
                    assert!(matches!(
                        rej.error,
                        CallError::NoCredit | CallError::WouldBlock
                    ));
                    refused += 1;
                    break;
                }
            }
            assert!(r.req.outstanding() <= r.req.credits_granted());
            max_out = max_out.max(r.req.outstanding());
        }
        let ev = r.run(&mut |c| reply_for(c.xid, b"r"));
        done += ev
            .iter()
            .filter(|e| matches!(e, RequesterEvent::Reply { .. }))
            .count() as u32;
    }
    assert!(
        refused > 0,
        "the initial grant of 1 must have stalled someone"
    );
    assert!(max_out > 1 && max_out <= 32, "max outstanding {max_out}");
    assert!(r.req.counters().credit_stalls > 0);
    assert_clean(&r);
}

#[test]
fn no_handle_survives_an_rpc() {
    let mut r = rig();
    let data = pattern(100_000, 1);
    let call = write_call(&r.pa, 5, &data);
    r.req.call(&mut r.qa, call, ReplySpec::inline(128)).unwrap();
    // Capture the advertised handles from the responder's receive buffers.
    let mut handles = Vec::new();
    let mut calls = Vec::new();
    r.resp.poll(&mut r.qb, &mut |e| {
        if let ResponderEvent::Call(c) = e {
            calls.push(c)
        }
    });
    for b in 0..64 {
        let Ok(buf) = r.qa.send_buf(b) else { continue };
        if let Some(h) = HeaderRepr::parse(buf).ok().filter(|h| h.xid == 5) {
            if let Some(l) = h.chunk_lists() {
                handles.extend(
                    l.read_list
                        .iter()
                        .map(|s| (s.segment.handle, s.segment.offset)),
                );
            }
        }
    }
    assert!(!handles.is_empty());
    for c in calls {
        r.resp.reply(&mut r.qb, c.ctx, reply_for(5, b"ok")).unwrap();
    }
    let ev = r.run(&mut |c| reply_for(c.xid, b""));
    take_reply(ev, 5);
    for (h, off) in handles {
        assert_eq!(
            r.qb.probe_remote_read(h, off, 4),
            Err(WcStatus::RemoteAccess)
        );
    }
    assert_clean(&r);
}

#[test]
fn connection_loss_mid_rpc_leaks_nothing() {
    let mut r = rig();
    let data = pattern(300_000, 2);
    let call = write_call(&r.pa, 9, &data);
    r.req.call(&mut r.qa, call, ReplySpec::inline(128)).unwrap();
    let pages = Chain::alloc_pages(&r.pa, 65536).unwrap();
    r.req
        .call(
            &mut r.qa,
            xdr_call(10, b"READ"),
            ReplySpec {
                max_reply: 70_000,
                ddp: Some(DdpReply {
                    pages,
                    locate: locate_read,
                }),
            },
        )
        .ok();
    // The responder starts reading, then the connection breaks.
    let mut calls = Vec::new();
    r.resp.poll(&mut r.qb, &mut |e| {
        if let ResponderEvent::Call(c) = e {
            calls.push(c)
        }
    });
    r.qa.disconnect();
    let mut ev = Vec::new();
    r.req.poll(&mut r.qa, &mut |e| ev.push(e));
    r.resp.poll(&mut r.qb, &mut |_| {});
    for c in calls {
        assert!(r.resp.reply(&mut r.qb, c.ctx, reply_for(9, b"")).is_err());
    }
    let mut returned = Vec::new();
    for e in ev {
        if let RequesterEvent::Failed { error, pages, .. } = e {
            assert_eq!(error, CallError::ConnectionLost);
            returned.push(pages);
        }
    }
    assert!(!returned.is_empty());
    assert!(r.req.is_lost());
    drop(returned);
    assert_clean(&r);
    drop(r.req);
    drop(r.resp);
    drop(r.qa);
    drop(r.qb);
    assert_eq!(r.arena_a.in_use(), 0);
    assert_eq!(r.arena_b.in_use(), 0);
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

/// 128 calls really in flight at once: credits 128 (Linux's default), enough buffers on both
/// sides; the requester reaches exactly 128 outstanding only after the responder's grant
/// raised the initial credit of 1, and never exceeds the grant on the way.
#[test]
fn credits_128_really_in_flight() {
    let cfg = TransportConfig {
        max_requests: 128,
        ..TransportConfig::default()
    };
    let soft = SoftConfig {
        send_bufs: 160,
        recv_bufs: 160,
        max_send_wr: 512,
        ..SoftConfig::default()
    };
    let mut r = rig_opts(RigOpts {
        req_cfg: cfg,
        resp_cfg: cfg,
        soft_a: soft.clone(),
        soft_b: soft,
        ..RigOpts::default()
    });
    // One RPC to learn the grant.
    r.req
        .call(&mut r.qa, xdr_call(1, b"hello"), ReplySpec::inline(64))
        .unwrap();
    let ev = r.run(&mut |c| reply_for(c.xid, b"r"));
    assert_eq!(ev.len(), 1);
    assert_eq!(r.req.credits_granted(), 128);
    // 128 calls without the responder running: all must be accepted and outstanding.
    for i in 0..128u32 {
        r.req
            .call(&mut r.qa, xdr_call(100 + i, b"c"), ReplySpec::inline(64))
            .unwrap_or_else(|rej| panic!("call {i} refused: {:?}", rej.error));
        assert!(r.req.outstanding() <= r.req.credits_granted());
    }
    assert_eq!(r.req.outstanding(), 128);
    // The 129th is refused for lack of credit, and handed back.
    let rej = r
        .req
        .call(&mut r.qa, xdr_call(999, b"c"), ReplySpec::inline(64))
        .unwrap_err();
    assert_eq!(rej.error, CallError::NoCredit);
    let ev = r.run(&mut |c| reply_for(c.xid, b"r"));
    let replies = ev
        .iter()
        .filter(|e| matches!(e, RequesterEvent::Reply { .. }))
        .count();
    assert_eq!(replies, 128);
    assert_eq!(r.req.outstanding(), 0);
    assert_clean(&r);
}
