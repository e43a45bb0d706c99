//! Fuzzes the Responder itself: a hostile requester's message sequence over the software
//! provider, not only the header decoder.
//!
//! The input is a script of operations: send a message (raw bytes, or a call header built from
//! fuzzed fields whose read chunk may name a real 64 KiB registration of the peer), poll the
//! responder with a budget, answer or drop a held call (sometimes with DDP data), disconnect.
//!
//! Properties checked on every input:
//! * nothing panics (peer input, upper-layer choices, connection loss);
//! * the pages held for read chunks never exceed the DDP budget (or one call's worth);
//! * every call handed up is unique (no XID context handed up twice);
//! * after the connection is gone and everything is dropped, every page of both arenas is
//!   back (no leak, no double free).
#![no_main]

use tests::rig::{self, RigOpts};
use tests::raw::{exposed, Hostile};
use krpc_rdma::provider::Provider;
use krpc_rdma::transport::{Incoming, ResponderEvent, TransportConfig};
use krpc_rdma::wire::{Body, ChunkLists, HeaderRepr, ReadSegment, Segment, WriteChunk};
use libfuzzer_sys::fuzz_target;
use mbuf::{Chain, Mbuf};

const BUDGET: usize = 256 * 1024;

struct Script<'a>(&'a [u8]);

impl Script<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(*b)
    }
    fn u32(&mut self) -> Option<u32> {
        let mut v = 0u32;
        for _ in 0..4 {
            v = v << 8 | u32::from(self.byte()?);
        }
        Some(v)
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
}

fuzz_target!(|data: &[u8]| {
    let cfg = TransportConfig {
        max_requests: 8,
        max_ddp_bytes: BUDGET as u32,
        max_call_ddp_bytes: 128 * 1024,
        // Reverse-direction calls (RFC 8167) on: raw replies the peer sends are judged
        // against the reverse calls outstanding.
        max_reverse_requests: 2,
        ..TransportConfig::default()
    };
    let mut h = Hostile::with(RigOpts {
        resp_cfg: cfg,
        pages: 512,
        ..RigOpts::default()
    });
    let _ = h.r.resp.set_reverse_slots(2);
    let region = vec![0x5au8; 64 * 1024];
    let (src, reg, segs) = exposed(&mut h, &region);
    let real = segs.first().copied().unwrap_or(Segment {
        handle: 0,
        length: 0,
        offset: 0,
    });
    let mut s = Script(data);
    let mut seen = std::collections::HashSet::new();
    let mut steps = 0;
    while let Some(op) = s.byte() {
        steps += 1;
        if steps > 64 {
            break;
        }
        match op % 7 {
            // Raw bytes (up to 1 KiB).
            0 => {
                let n = usize::from(s.byte().unwrap_or(0)) * 4;
                let msg = s.bytes(n).to_vec();
                if h.r.qa.send_buf(0).is_ok() && !msg.is_empty() {
                    let _ = raw(&mut h, &msg);
                }
            }
            // A call built from fields.
            1 => {
                let Some(xid) = s.u32() else { break };
                let flags = s.byte().unwrap_or(0);
                let pos = u32::from(s.byte().unwrap_or(0)) * 4;
                let len = s.u32().unwrap_or(0) % (96 * 1024);
                let off = if flags & 1 != 0 {
                    real.offset + u64::from(s.byte().unwrap_or(0)) * 64
                } else {
                    u64::from(s.u32().unwrap_or(0)) << 32 | u64::from(s.u32().unwrap_or(0))
                };
                let handle = if flags & 2 != 0 {
                    real.handle
                } else {
                    s.u32().unwrap_or(0)
                };
                let mut l = ChunkLists::new();
                if flags & 4 != 0 {
                    let _ = l.read_list.push(ReadSegment {
                        position: if flags & 8 != 0 { 0 } else { pos },
                        segment: Segment {
                            handle,
                            length: len,
                            offset: off,
                        },
                    });
                }
                if flags & 16 != 0 {
                    let seg = Segment {
                        handle,
                        length: len,
                        offset: off,
                    };
                    let chunk = if flags & 32 != 0 {
                        WriteChunk::new()
                    } else {
                        WriteChunk::from_slice(&[seg]).unwrap_or_default()
                    };
                    let _ = l.write_list.push(chunk);
                }
                if flags & 64 != 0 {
                    l.reply_chunk = Some(
                        WriteChunk::from_slice(&[Segment {
                            handle,
                            length: len,
                            offset: off,
                        }])
                        .unwrap_or_default(),
                    );
                }
                let body = if flags & 128 != 0 {
                    Body::NoMsg(l)
                } else {
                    Body::Msg(l)
                };
                let hdr = HeaderRepr::new(xid, 8, body);
                let mut msg = vec![0u8; hdr.buffer_len()];
                if hdr.emit(&mut msg).is_ok() {
                    let n = usize::from(s.byte().unwrap_or(0));
                    msg.extend_from_slice(&xid.to_be_bytes());
                    msg.extend(std::iter::repeat(0u8).take(n * 4));
                    let _ = raw(&mut h, &msg);
                }
            }
            // Poll with a budget.
            2 => {
                let budget = usize::from(s.byte().unwrap_or(1));
                poll(&mut h, budget, &mut seen);
            }
            // Answer a held call, perhaps with a DDP region of up to 16 KiB.
            3 => {
                if h.held.is_empty() {
                    continue;
                }
                let i = usize::from(s.byte().unwrap_or(0)) % h.held.len();
                let c = h.held.swap_remove(i);
                let ddp = usize::from(s.byte().unwrap_or(0)) * 64;
                let mut reply = Chain::from_bytes(&c.xid.to_be_bytes()).unwrap();
                if ddp > 0 {
                    let _ = reply.append_mbuf(Mbuf::ddp_marker());
                    if let Ok(p) = Chain::alloc_pages(&h.r.pb, ddp) {
                        let _ = reply.cat(p);
                    }
                }
                let _ = h.r.resp.reply(&mut h.r.qb, c.ctx, reply);
            }
            // The upper layer drops a held call.
            4 => {
                if let Some(c) = h.held.pop() {
                    let mut got = Vec::new();
                    let _ = h.r.resp.drop_call(&mut h.r.qb, c.ctx, &mut |e| got.push(e));
                    take(&mut h, got, &mut seen);
                }
            }
            // The responder calls the requester (RFC 8167), and the peer answers with a
            // reverse reply for that XID or another.
            5 => {
                let Some(xid) = s.u32() else { break };
                let call = [xid, 0, 2, 0x4000_0000, 1, 1];
                let call: Vec<u8> = call.iter().flat_map(|w| w.to_be_bytes()).collect();
                let _ = h.r.resp.reverse_call(&mut h.r.qb, Chain::from_bytes(&call).unwrap());
                let to = if s.byte().unwrap_or(0) & 1 != 0 {
                    xid
                } else {
                    s.u32().unwrap_or(0)
                };
                let credit = u32::from(s.byte().unwrap_or(0));
                let reply = [to, 1, credit, 0, 0, 0, 0, to, 1, 0, 0, 0, 0];
                let reply: Vec<u8> = reply.iter().flat_map(|w| w.to_be_bytes()).collect();
                let _ = raw(&mut h, &reply);
            }
            // The peer goes away.
            _ => h.r.qa.disconnect(),
        }
        assert!(
            h.r.resp.ddp_bytes_in_use() <= BUDGET.max(128 * 1024),
            "DDP budget exceeded: {}",
            h.r.resp.ddp_bytes_in_use()
        );
    }
    // The end: everything pending runs out, then the connection goes and all is freed.
    poll(&mut h, usize::MAX, &mut seen);
    h.held.clear();
    h.r.qa.disconnect();
    poll(&mut h, usize::MAX, &mut seen);
    let _ = h.r.qa.release(reg);
    drop(src);
    rig::teardown(h.r);
});

fn raw(h: &mut Hostile, msg: &[u8]) -> Option<()> {
    let n = msg.len().min(4096);
    rig::try_raw_send(&mut h.r.qa, 0, msg.get(..n)?).ok()
}

fn poll(h: &mut Hostile, budget: usize, seen: &mut std::collections::HashSet<(u32, u32)>) {
    let mut got = Vec::new();
    h.r.resp
        .poll_bounded(&mut h.r.qb, budget, &mut |e| got.push(e));
    take(h, got, seen);
    // Side A: reap and repost, as the hostile peer's own receive path.
    let mut wcs = [krpc_rdma::provider::Completion::EMPTY; 16];
    loop {
        let n = h.r.qa.poll_cq(&mut wcs);
        if n == 0 {
            break;
        }
        for wc in &wcs[..n] {
            if let krpc_rdma::provider::WcKind::Recv { buf } = wc.kind {
                let _ = h.r.qa.post_recv(&[buf]);
            }
        }
    }
}

fn take(
    h: &mut Hostile,
    got: Vec<ResponderEvent>,
    seen: &mut std::collections::HashSet<(u32, u32)>,
) {
    for e in got {
        match e {
            ResponderEvent::Call(c) => {
                let key = ctx_key(&c);
                assert!(seen.insert(key), "context handed up twice: {key:?}");
                h.held.push(c);
            }
            ResponderEvent::ConnectionLost => {
                h.lost = true;
                h.held.clear();
            }
            ResponderEvent::Connected(_)
                | ResponderEvent::ReverseReply { .. }
                | ResponderEvent::ReverseFailed { .. } => {}
        }
    }
}

/// (slot, generation) of a handed-up call, from its Debug form (the fields are private).
fn ctx_key(c: &Incoming) -> (u32, u32) {
    let d = format!("{:?}", c.ctx);
    let num = |k: &str| {
        d.split(k)
            .nth(1)
            .and_then(|r| {
                r.trim_start_matches([':', ' '])
                    .split(|ch: char| !ch.is_ascii_digit())
                    .next()
            })
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (num("idx"), num("generation"))
}
