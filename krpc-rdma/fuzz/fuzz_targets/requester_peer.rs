//! Fuzzes the Requester itself: a hostile responder's replies over the software provider.
//!
//! The input is a script: issue a call (small, with DDP pages for a write chunk, or with a
//! large reply that gets a reply chunk), answer it (or any XID) with a reply built from fuzzed
//! fields (procedure, credit, read list, write chunk and reply chunk lengths, inline payload)
//! or raw bytes, poll with a budget, abandon a call, close, disconnect. Two reverse-direction
//! slots (RFC 8167) are on: a chunkless reply-shaped message whose RPC `msg_type` is CALL is a
//! reverse call, handed up and answered (with its XID or another) by the script.
//!
//! Properties checked on every input:
//! * nothing panics;
//! * every call ends at most once (a reply or a failure), abandoned calls never;
//! * the grant the Requester uses stays within 1..=max_requests;
//! * at the end, no registration is live and every page of both arenas is back.
#![no_main]

use std::collections::HashSet;

use tests::rig::{self, rig_opts, try_raw_send, xdr_call, RigOpts};
use krpc_rdma::provider::{Provider, Resources};
use krpc_rdma::soft::SoftConfig;
use krpc_rdma::transport::{DdpReply, ReplySpec, RequesterEvent, ReverseCall, TransportConfig};
use krpc_rdma::wire::{Body, ChunkLists, HeaderRepr, ReadSegment, Segment, WriteChunk};
use libfuzzer_sys::fuzz_target;
use mbuf::Chain;

struct Script<'a>(&'a [u8]);

impl Script<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u32(&mut self) -> u32 {
        (0..4).fold(0, |v, _| v << 8 | u32::from(self.byte()))
    }
}

fuzz_target!(|data: &[u8]| {
    let cfg = TransportConfig {
        max_reverse_requests: 2,
        ..TransportConfig::default()
    };
    let mut r = rig_opts(RigOpts {
        req_cfg: cfg,
        soft_a: SoftConfig::with(Resources {
            recv_bufs: cfg.max_requests + 2,
            ..Resources::default()
        }),
        pages: 256,
        ..RigOpts::default()
    });
    r.req
        .set_reverse_slots(&mut r.qa, 2)
        .expect("two reverse slots fit the receive buffers");
    let mut reverse: Vec<ReverseCall> = Vec::new();
    let mut s = Script(data);
    let mut issued: Vec<u32> = Vec::new();
    let mut ended: HashSet<u32> = HashSet::new();
    let mut abandoned: HashSet<u32> = HashSet::new();
    let mut xid_next = 1u32;
    let mut steps = 0;
    while !s.0.is_empty() && steps < 64 {
        steps += 1;
        match s.byte() % 7 {
            // Issue a call.
            0 => {
                let xid = xid_next;
                xid_next += 1;
                let spec = match s.byte() % 3 {
                    0 => ReplySpec::inline(128),
                    1 => {
                        let n = 1 + usize::from(s.byte()) * 64;
                        match Chain::alloc_pages(&r.pa, n) {
                            Ok(pages) => ReplySpec {
                                max_reply: n + 64,
                                ddp: Some(DdpReply {
                                    pages,
                                    locate: |c| (c.len() >= 8).then_some(8),
                                }),
                            },
                            Err(_) => continue,
                        }
                    }
                    _ => ReplySpec::inline(8192 + usize::from(s.byte()) * 64),
                };
                if r.req.call(&mut r.qa, xdr_call(xid, b"args"), spec).is_ok() {
                    issued.push(xid);
                }
            }
            // A reply built from fields.
            1 => {
                let xid = match s.byte() {
                    0 => s.u32(),
                    i => issued.get(usize::from(i) % issued.len().max(1)).copied().unwrap_or(0),
                };
                let credit = s.u32() % 300;
                let flags = s.byte();
                let seg = |s: &mut Script| Segment {
                    handle: s.u32(),
                    length: s.u32() % 70_000,
                    offset: u64::from(s.u32()),
                };
                let mut l = ChunkLists::new();
                if flags & 1 != 0 {
                    let _ = l.read_list.push(ReadSegment {
                        position: u32::from(s.byte()) * 4,
                        segment: seg(&mut s),
                    });
                }
                if flags & 2 != 0 {
                    let one = seg(&mut s);
                    let c = if flags & 4 != 0 {
                        WriteChunk::new()
                    } else {
                        WriteChunk::from_slice(&[one]).unwrap_or_default()
                    };
                    let _ = l.write_list.push(c);
                }
                if flags & 8 != 0 {
                    l.reply_chunk = Some(WriteChunk::from_slice(&[seg(&mut s)]).unwrap_or_default());
                }
                let body = match flags >> 4 & 3 {
                    0 | 1 => Body::Msg(l),
                    2 => Body::NoMsg(l),
                    _ => Body::Error(if flags & 64 != 0 {
                        krpc_rdma::wire::ErrorBody::Chunk
                    } else {
                        krpc_rdma::wire::ErrorBody::Vers { low: 1, high: 1 }
                    }),
                };
                let hdr = HeaderRepr::new(xid, credit, body);
                let mut msg = vec![0u8; hdr.buffer_len()];
                if hdr.emit(&mut msg).is_ok() {
                    let n = usize::from(s.byte()) * 4;
                    msg.extend_from_slice(&xid.to_be_bytes());
                    msg.extend(std::iter::repeat(0u8).take(n));
                    msg.truncate(4096);
                    let _ = try_raw_send(&mut r.qb, 1, &msg);
                }
            }
            // Raw bytes from the responder.
            2 => {
                let n = usize::from(s.byte()).min(s.0.len());
                let (m, rest) = s.0.split_at(n);
                s.0 = rest;
                if !m.is_empty() {
                    let _ = try_raw_send(&mut r.qb, 1, m);
                }
            }
            // Abandon.
            3 => {
                if let Some(&xid) = issued.get(usize::from(s.byte()) % issued.len().max(1)) {
                    if !ended.contains(&xid) && r.req.abandon(&mut r.qa, xid).is_some() {
                        abandoned.insert(xid);
                    }
                }
            }
            4 => {
                let mut evs = Vec::new();
                r.req.close(&mut r.qa, &mut |e| evs.push(e));
                record(evs, &mut ended, &abandoned, &mut reverse);
            }
            5 => r.qb.disconnect(),
            // Answer a reverse call, with its XID or another (refused, the context kept).
            _ => {
                if !reverse.is_empty() {
                    let rc = reverse.swap_remove(usize::from(s.byte()) % reverse.len());
                    let xid = if s.byte() & 1 != 0 { rc.xid } else { s.u32() };
                    let reply = xdr_call(xid, &[0, 0, 0, 1, 0, 0, 0, 0]);
                    if let Err(e) = r.req.reverse_reply(&mut r.qa, rc.ctx, reply) {
                        if let Some(ctx) = e.ctx {
                            reverse.push(ReverseCall { xid: rc.xid, call: rc.call, ctx });
                        }
                    }
                }
            }
        }
        let mut evs = Vec::new();
        r.req
            .poll_bounded(&mut r.qa, usize::from(s.byte()).max(1), &mut |e| evs.push(e));
        record(evs, &mut ended, &abandoned, &mut reverse);
        // The responder side's own completions (our raw Sends) are drained and ignored.
        let mut wcs = [krpc_rdma::provider::Completion::EMPTY; 16];
        while r.qb.poll_cq(&mut wcs) > 0 {}
        let g = r.req.credits_granted();
        assert!((1..=64).contains(&g), "grant {g}");
    }
    // The end: close, everything fails or ended, nothing is left.
    let mut evs = Vec::new();
    r.req.close(&mut r.qa, &mut |e| evs.push(e));
    r.req.poll(&mut r.qa, &mut |e| evs.push(e));
    record(evs, &mut ended, &abandoned, &mut reverse);
    drop(reverse);
    for xid in &issued {
        assert!(
            ended.contains(xid) || abandoned.contains(xid),
            "call {xid:#x} never ended"
        );
    }
    assert_eq!(r.qa.live_registrations(), 0, "registrations left after close");
    rig::teardown(r);
});

fn record(
    evs: Vec<RequesterEvent>,
    ended: &mut HashSet<u32>,
    abandoned: &HashSet<u32>,
    reverse: &mut Vec<ReverseCall>,
) {
    for e in evs {
        match e {
            RequesterEvent::Reply { xid, .. } | RequesterEvent::Failed { xid, .. } => {
                assert!(!abandoned.contains(&xid), "abandoned call {xid:#x} reported");
                assert!(ended.insert(xid), "call {xid:#x} ended twice");
            }
            RequesterEvent::ReverseCall(rc) => {
                assert!(reverse.len() < 2, "a reverse call beyond the two slots handed up");
                reverse.push(rc);
            }
            _ => {}
        }
    }
}
