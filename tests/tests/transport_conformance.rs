//! RFC 8166 details of the Responder's replies, checked on the wire over raw Sends: each test
//! names its section.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use krpc_rdma::provider::Provider;
use krpc_rdma::transport::TransportConfig;
use krpc_rdma::wire::{Body, ChunkLists, HeaderRepr, WriteChunk};
use mbuf::{Chain, Mbuf};
use tests::raw::{call, seg, Hostile};
use tests::rig::{self, pages_with, pattern, RigOpts};

/// The decoded answer and its inline payload.
fn msg_of(ans: &[u8]) -> (ChunkLists, Vec<u8>) {
    let h = HeaderRepr::parse(ans).unwrap();
    let payload = ans[h.buffer_len()..].to_vec();
    match h.body {
        Body::Msg(l) => (l, payload),
        other => panic!("expected RDMA_MSG, got {other:?}"),
    }
}

/// §4.3.3: a provisioned Reply chunk that the reply does not need is returned with zero
/// lengths in the inline reply.
#[test]
fn rfc8166_s4_3_3_an_unused_reply_chunk_is_echoed_with_zero_length() {
    // The handles are made up: side A refuses Send With Invalidate, so none is revoked.
    let mut h = Hostile::with(RigOpts {
        req_cfg: TransportConfig {
            accept_remote_invalidate: false,
            ..TransportConfig::default()
        },
        ..RigOpts::default()
    });
    let mut l = ChunkLists::new();
    let provisioned = [seg(0x51, 4096, 0x7000), seg(0x52, 8192, 0x9000)];
    l.reply_chunk = Some(WriteChunk::from_slice(&provisioned).unwrap());
    assert!(h.exchange(&call(22, l, b"GETATTR")).is_empty());
    let ans = h.answer_all();
    assert_eq!(ans.len(), 1);
    let (lists, payload) = msg_of(&ans[0]);
    let echoed = lists.reply_chunk.expect("reply chunk echoed");
    assert_eq!(echoed.len(), 2);
    for (e, p) in echoed.iter().zip(&provisioned) {
        assert_eq!((e.handle, e.offset, e.length), (p.handle, p.offset, 0));
    }
    assert_eq!(payload, 22u32.to_be_bytes());
}

/// Reply provisioning counts the reply header's echo of the write chunk (8 + 16 bytes per
/// segment; Linux's `rpcrdma_max_reply_header_size`): a reply whose inline rest fits the
/// threshold only without that echo gets a reply chunk instead of a write chunk, and arrives
/// (it used to be refused with ERR_CHUNK).
#[test]
fn reply_provisioning_leaves_room_for_the_write_chunk_echo() {
    let mut r = rig::rig();
    let max_inline = r.req.thresholds().recv as usize - 28;
    let rest = max_inline - 10; // fits without the 24-byte echo, not with it
    let data = pattern(8192, 6);
    let pages = Chain::alloc_pages(&r.pa, data.len()).unwrap();
    r.req
        .call(
            &mut r.qa,
            rig::xdr_call(9, b"read"),
            krpc_rdma::transport::ReplySpec {
                max_reply: rest + data.len(),
                ddp: Some(krpc_rdma::transport::DdpReply {
                    pages,
                    locate: |_| Some(4),
                }),
            },
        )
        .unwrap();
    let pb = r.pb.clone();
    let body = pattern(rest - 4, 2);
    let ev = r.run(&mut |c| {
        let mut rep = rig::reply_for(c.xid, &[]);
        rep.append_mbuf(Mbuf::ddp_marker()).unwrap();
        rep.cat(pages_with(&pb, &data)).unwrap();
        rep.append(&body).unwrap();
        rep
    });
    let reply = rig::take_reply(ev, 9);
    let v = reply.to_vec().unwrap();
    assert_eq!(&v[4..4 + data.len()], &data[..]);
    assert_eq!(&v[4 + data.len()..], &body[..]);
    assert_eq!(r.resp.counters().err_chunk_sent, 0);
    assert_eq!(r.req.counters().reply_chunks, 1);
    assert_eq!(r.req.counters().write_chunks, 0);
}

/// §3.5.3: a Long Call (RDMA_NOMSG, the message in a position-zero read chunk) may carry its
/// DDP-eligible item in a further read chunk, positioned in the message the position-zero
/// chunk carries. The responder hands up the message with the item spliced in at its
/// position, as for an RDMA_MSG call (it used to refuse it with ERR_CHUNK).
#[test]
fn rfc8166_s3_5_3_a_long_call_with_a_further_read_chunk() {
    use tests::raw::{exposed, read_chunk};
    let mut h = Hostile::new(TransportConfig::default());
    // The message without its item: xid, 8 bytes of args, the item's length word (10), then
    // a trailer; the item goes at XDR position 16 with a 2-byte pad.
    let mut stream = 31u32.to_be_bytes().to_vec();
    stream.extend_from_slice(&[0xaa; 8]);
    stream.extend_from_slice(&10u32.to_be_bytes());
    stream.extend_from_slice(&[0xbb; 8]);
    let item = pattern(10, 7);
    let (s0, r0, segs0) = tests::raw::exposed(&mut h, &stream);
    let (s1, r1, segs1) = exposed(&mut h, &item);
    let mut l = read_chunk(0, &segs0);
    for s in read_chunk(16, &segs1).read_list {
        l.read_list.push(s).unwrap();
    }
    let hdr = HeaderRepr::new(31, 8, Body::NoMsg(l));
    let mut msg = vec![0u8; hdr.buffer_len()];
    hdr.emit(&mut msg).unwrap();
    assert!(h.exchange(&msg).is_empty(), "no refusal");
    let c = h.held.pop().expect("the call is handed up");
    let mut want = stream[..16].to_vec();
    want.extend_from_slice(&item);
    want.extend_from_slice(&[0, 0]);
    want.extend_from_slice(&stream[16..]);
    assert_eq!(c.call.to_vec().unwrap(), want);
    let regions: Vec<_> = c.call.ddp_regions().map(|r| (r.offset, r.len)).collect();
    assert_eq!(regions, vec![(16, 10)], "the item is the call's DDP region");
    assert_eq!(h.r.resp.counters().long_calls, 1);
    h.held.push(c);
    assert_eq!(h.answer_all().len(), 1);
    for r in [r0, r1] {
        h.r.qa.release(r).unwrap();
    }
    drop((s0, s1));
}
