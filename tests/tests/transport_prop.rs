//! Property test of the transport core over the software RC provider: random call and reply
//! shapes, random inline thresholds; byte-exact delivery both ways, the chunk choice the
//! marshalling rules predict, consistent counters, no registration or page left behind.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use tests::rig;

use std::sync::Arc;

use krpc_rdma::transport::{
    CallError, Counters, DdpReply, ReplyError, ReplySpec, RequesterEvent, ResponderEvent,
    TransportConfig,
};
use krpc_rdma::wire::ErrorCode;
use mbuf::{Chain, Mbuf, PageProvider, DEFAULT_ARENA_BASE, PAGE_SIZE};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use rig::{assert_clean, fill_pages, pattern, rig_opts, teardown, Rig, RigOpts, ARENA_B_BASE};
use std::cell::RefCell;
use std::collections::BTreeMap;

/// RDMA_MSG header with three empty lists (RFC 8166 §4.2): xid, vers, credit, proc, 3 × 0.
const MIN_HDR: usize = 28;
/// A one-segment read list entry (present + position + handle, length, 64-bit offset) or
/// write list entry (present + count + segment): 24 bytes more than [`MIN_HDR`]. The
/// software provider makes one segment per registration.
const CHUNK_HDR: usize = 24;
/// A one-segment reply chunk: its discriminator word is already in [`MIN_HDR`]; count +
/// segment = 20 bytes more.
const REPLY_CHUNK_HDR: usize = 20;
/// Send and receive buffers of the default `SoftConfig`.
const BUF: usize = 4096;
const ARENA_PAGES: usize = 4096;

fn xdr_pad(n: usize) -> usize {
    (4 - n % 4) % 4
}

/// The DDP data item of a reply: its position is stored big-endian in reply bytes 4..8
/// (0xffff_ffff: none).
fn locate_word(c: &Chain) -> Option<usize> {
    let mut w = [0u8; 4];
    c.copydata(4, &mut w).ok()?;
    let at = u32::from_be_bytes(w);
    (at != u32::MAX).then_some(at as usize)
}

/// One RPC's shape.
#[derive(Debug, Clone)]
struct Rpc {
    /// Call XDR before the DDP region, in 4-byte words (≥ 1: the XID).
    head_words: usize,
    /// The call's DDP region: (data bytes, in-page offset of the first data byte).
    ddp: Option<(usize, usize)>,
    /// Call XDR after the data and its pad, in words.
    tail_words: usize,
    /// Reply XDR before its DDP region, in words (≥ 2: XID and the locate word).
    rhead_words: usize,
    /// The reply's DDP region: data bytes.
    rddp: Option<usize>,
    /// Reply XDR after the data and its pad, in words.
    rtail_words: usize,
    /// A DDP result provisioned by the caller: pages of `data + extra` bytes.
    spec_ddp: Option<usize>,
    /// `max_reply` = reply length + slack.
    slack: usize,
    seed: u8,
}

#[derive(Debug, Clone)]
struct Case {
    req_send: u32,
    req_recv: u32,
    resp_send: u32,
    resp_recv: u32,
    accept_inv: bool,
    rpcs: Vec<Rpc>,
}

fn len_strategy(max: usize) -> impl Strategy<Value = usize> {
    prop_oneof![0..16usize, 0..1024usize, 0..max]
}

/// A word count: mostly small (real RPC headers), sometimes up to `max`.
fn words(min: usize, max: usize) -> impl Strategy<Value = usize> {
    prop_oneof![min..min + 8, min..min + 64, min..max]
}

fn rpc_strategy() -> impl Strategy<Value = Rpc> {
    (
        (
            words(1, 750),
            proptest::option::of((len_strategy(300 * 1024), 0..PAGE_SIZE)),
        ),
        words(0, 500),
        (
            words(2, 500),
            proptest::option::of(len_strategy(300 * 1024)),
        ),
        words(0, 500),
        proptest::option::of(prop_oneof![0..16usize, 0..8192usize]),
        0..64usize,
        any::<u8>(),
    )
        .prop_map(
            |(
                (head_words, ddp),
                tail_words,
                (rhead_words, rddp),
                rtail_words,
                spec_ddp,
                slack,
                seed,
            )| {
                Rpc {
                    head_words,
                    ddp,
                    tail_words,
                    rhead_words,
                    rddp,
                    rtail_words,
                    spec_ddp,
                    slack,
                    seed,
                }
            },
        )
}

fn case_strategy() -> impl Strategy<Value = Case> {
    (
        1024..=4096u32,
        1024..=4096u32,
        1024..=4096u32,
        1024..=4096u32,
        any::<bool>(),
        proptest::collection::vec(rpc_strategy(), 1..4),
    )
        .prop_map(
            |(req_send, req_recv, resp_send, resp_recv, accept_inv, rpcs)| Case {
                req_send,
                req_recv,
                resp_send,
                resp_recv,
                accept_inv,
                rpcs,
            },
        )
}

/// Page mbufs holding `data`, the first byte at in-page offset `first_off`.
fn pages_at(p: &Arc<dyn PageProvider>, data: &[u8], first_off: usize) -> Chain {
    let mut c = Chain::alloc_pages(p, data.len() + first_off).unwrap();
    c.adj(first_off as i64).unwrap();
    fill_pages(p, &c, data);
    c
}

/// `[xid][words…]` of `words` 4-byte words (the first is the XID).
fn xdr_bytes(xid: u32, words: usize, seed: u8) -> Vec<u8> {
    let mut v = xid.to_be_bytes().to_vec();
    v.extend(pattern((words - 1) * 4, seed));
    v
}

/// A chain `[head][marker][pages data][pad + tail]` (no marker without a region) and its bytes.
fn build(
    p: &Arc<dyn PageProvider>,
    head: &[u8],
    ddp: Option<(&[u8], usize)>,
    tail: &[u8],
) -> (Chain, Vec<u8>) {
    let mut c = Chain::from_bytes(head).unwrap();
    let mut bytes = head.to_vec();
    let mut rest = Vec::new();
    if let Some((data, off)) = ddp {
        c.append_mbuf(Mbuf::ddp_marker()).unwrap();
        if !data.is_empty() {
            c.cat(pages_at(p, data, off)).unwrap();
        }
        bytes.extend_from_slice(data);
        rest.resize(xdr_pad(data.len()), 0);
    }
    rest.extend_from_slice(tail);
    if !rest.is_empty() {
        c.append(&rest).unwrap();
    }
    bytes.extend_from_slice(&rest);
    (c, bytes)
}

/// (call path, reply provisioning, reply path, call had DDP data).
type Path = (CallPath, ReplyProv, ReplyPath, bool);

thread_local! {
    static TALLY: RefCell<BTreeMap<Path, u64>> = const { RefCell::new(BTreeMap::new()) };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum CallPath {
    Inline,
    ReadChunk,
    LongCall,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum ReplyProv {
    None,
    WriteChunk,
    ReplyChunk,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum ReplyPath {
    Inline,
    LongReply,
    ErrChunk,
}

fn in_arena(addr: u64, base: u64) -> bool {
    addr >= base && addr < base + (ARENA_PAGES * PAGE_SIZE) as u64
}

fn page_addrs(c: &Chain) -> Vec<u64> {
    c.fragments()
        .filter_map(|f| match f {
            mbuf::Fragment::Page { addr, .. } => Some(addr),
            mbuf::Fragment::Bytes(_) => None,
        })
        .collect()
}

/// Run one RPC of shape `s` and check everything.
fn one_rpc(r: &mut Rig, xid: u32, s: &Rpc) -> Result<(), TestCaseError> {
    let before_req: Counters = *r.req.counters();
    let before_resp: Counters = *r.resp.counters();
    // The call.
    let head = xdr_bytes(xid, s.head_words, s.seed);
    let ddp_data = s.ddp.map(|(d, off)| (pattern(d, s.seed ^ 0x55), off));
    let tail = pattern(s.tail_words * 4, s.seed ^ 0xaa);
    let (call, call_bytes) = build(
        &r.pa,
        &head,
        ddp_data.as_ref().map(|(d, off)| (d.as_slice(), *off)),
        &tail,
    );
    let d = ddp_data.as_ref().map_or(0, |(d, _)| d.len());
    let t = call_bytes.len();
    // The reply.
    let rhead_len = s.rhead_words * 4;
    let mut rhead = xdr_bytes(xid, s.rhead_words, s.seed ^ 0x33);
    let locate_at = if s.rddp.is_some() {
        rhead_len as u32
    } else {
        u32::MAX
    };
    rhead[4..8].copy_from_slice(&locate_at.to_be_bytes());
    let rdata = s.rddp.map(|n| pattern(n, s.seed ^ 0x77));
    let rtail = pattern(s.rtail_words * 4, s.seed ^ 0x11);
    let (reply, reply_bytes) = build(
        &r.pb,
        &rhead,
        rdata.as_ref().map(|v| (v.as_slice(), 0)),
        &rtail,
    );
    let rd = rdata.as_ref().map_or(0, Vec::len);
    let rlen = reply_bytes.len();
    let max_reply = rlen + s.slack;
    let cap = s.spec_ddp.map(|extra| rd + extra);
    let spec = ReplySpec {
        max_reply,
        ddp: cap.map(|c| DdpReply {
            pages: Chain::alloc_pages(&r.pa, c).unwrap(),
            locate: locate_word,
        }),
    };

    // What the marshalling rules predict (RFC 8166 §3.4.5; Linux rpcrdma_marshal_req).
    let thr = r.req.thresholds();
    let max_inline = (thr.recv as usize).min(BUF) - MIN_HDR;
    let max_send = (thr.send as usize).min(BUF);
    let prov = if max_reply <= max_inline {
        ReplyProv::None
    } else if cap.is_some_and(|c| c > 0 && max_reply.saturating_sub(c) + CHUNK_HDR <= max_inline) {
        // The reply's header echoes the write chunk (one segment on the software provider).
        ReplyProv::WriteChunk
    } else {
        ReplyProv::ReplyChunk
    };
    let call_hdr = MIN_HDR
        + match prov {
            ReplyProv::None => 0,
            ReplyProv::WriteChunk => CHUNK_HDR,
            ReplyProv::ReplyChunk => REPLY_CHUNK_HDR,
        };
    let path = if call_hdr + t <= max_send {
        CallPath::Inline
    } else if d > 0 && call_hdr + CHUNK_HDR + (t - d - xdr_pad(d)) <= max_send {
        CallPath::ReadChunk
    } else {
        CallPath::LongCall
    };
    let resp_thr = r.resp.thresholds();
    prop_assert_eq!(resp_thr.send, thr.recv, "thresholds are symmetric");
    let write_used = prov == ReplyProv::WriteChunk && s.rddp.is_some();
    // A provisioned reply chunk is echoed (zero lengths) in an inline reply (RFC 8166
    // §4.3.3), so it counts in the reply header as it does in the call's.
    let resp_hdr = MIN_HDR
        + match prov {
            ReplyProv::None => 0,
            ReplyProv::WriteChunk => CHUNK_HDR,
            ReplyProv::ReplyChunk => REPLY_CHUNK_HDR,
        };
    let resp_inline = if write_used {
        rlen - rd - xdr_pad(rd)
    } else {
        rlen
    };
    let rpath = if resp_hdr + resp_inline <= (resp_thr.send as usize).min(BUF) {
        ReplyPath::Inline
    } else if prov == ReplyProv::ReplyChunk {
        ReplyPath::LongReply
    } else {
        ReplyPath::ErrChunk
    };

    TALLY.with(|t| {
        *t.borrow_mut()
            .entry((path, prov, rpath, d > 0))
            .or_default() += 1
    });
    // Go.
    if let Err(rej) = r.req.call(&mut r.qa, call, spec) {
        return Err(TestCaseError::fail(format!(
            "call refused: {:?} (path {path:?}, prov {prov:?}, t={t}, d={d})",
            rej.error
        )));
    }
    let mut calls = Vec::new();
    r.resp.poll(&mut r.qb, &mut |e| {
        if let ResponderEvent::Call(c) = e {
            calls.push(c)
        }
    });
    prop_assert_eq!(calls.len(), 1, "call handed up in one poll");
    let inc = calls.pop().unwrap();
    prop_assert_eq!(inc.xid, xid);
    let got = inc.call.to_vec().unwrap();
    prop_assert!(got == call_bytes, "call not byte-exact (path {:?})", path);
    match path {
        CallPath::ReadChunk => {
            let regions: Vec<_> = inc.call.ddp_regions().collect();
            prop_assert_eq!(regions.len(), 1);
            prop_assert_eq!(regions[0].offset, s.head_words * 4);
            prop_assert_eq!(regions[0].len, d);
            let mbufs: Vec<_> = inc.call.mbufs().collect();
            let m = regions[0].marker_index;
            prop_assert!(mbufs[m].is_ddp_marker());
            for k in 0..regions[0].page_mbufs {
                prop_assert!(mbufs[m + 1 + k].is_pages());
            }
            let after = m + 1 + regions[0].page_mbufs;
            if xdr_pad(d) > 0 {
                prop_assert_eq!(mbufs[after].len(), xdr_pad(d));
            }
            for a in page_addrs(&inc.call) {
                prop_assert!(in_arena(a, ARENA_B_BASE), "call pages are the responder's");
            }
        }
        CallPath::LongCall => {
            let kinds: Vec<_> = inc.call.mbufs().map(|m| (m.kind(), m.len())).collect();
            prop_assert!(
                inc.call.mbufs().all(|m| m.is_pages()),
                "long call not all pages: {:?} t={} hdr={} thr={:?} counters {:?}",
                kinds,
                t,
                call_hdr,
                thr,
                r.req.counters()
            );
        }
        CallPath::Inline => {
            prop_assert_eq!(inc.call.ddp_regions().count(), 0);
        }
    }
    drop(inc.call);
    let res = r.resp.reply(&mut r.qb, inc.ctx, reply);
    match rpath {
        ReplyPath::ErrChunk => prop_assert!(
            matches!(res, Err(ReplyError::ChunkError)),
            "expected ChunkError, got {:?}",
            res
        ),
        _ => prop_assert!(res.is_ok(), "reply failed: {:?}", res),
    }
    let mut evs = Vec::new();
    r.req.poll(&mut r.qa, &mut |e| evs.push(e));
    r.resp.poll(&mut r.qb, &mut |_| {});
    prop_assert_eq!(evs.len(), 1, "one event: {:?}", evs);
    let ev = evs.pop().unwrap();
    match (rpath, ev) {
        (ReplyPath::ErrChunk, RequesterEvent::Failed { xid: x, error, .. }) => {
            prop_assert_eq!(x, xid);
            prop_assert_eq!(error, CallError::Rdma(ErrorCode::Chunk));
        }
        (ReplyPath::ErrChunk, other) => {
            return Err(TestCaseError::fail(format!(
                "expected ERR_CHUNK, got {other:?}"
            )));
        }
        (_, RequesterEvent::Reply { xid: x, reply }) => {
            prop_assert_eq!(x, xid);
            let got = reply.to_vec().unwrap();
            prop_assert!(
                got == reply_bytes,
                "reply not byte-exact ({:?}/{:?}): got {} bytes, want {}",
                prov,
                rpath,
                got.len(),
                reply_bytes.len()
            );
            if write_used && rd > 0 {
                let regions: Vec<_> = reply.ddp_regions().collect();
                prop_assert_eq!(regions.len(), 1);
                prop_assert_eq!(regions[0].offset, rhead_len);
                prop_assert_eq!(regions[0].len, rd);
                for a in page_addrs(&reply) {
                    prop_assert!(
                        in_arena(a, DEFAULT_ARENA_BASE),
                        "reply data in the caller's pages"
                    );
                }
            }
        }
        (_, other) => {
            return Err(TestCaseError::fail(format!(
                "expected a reply, got {other:?}"
            )));
        }
    }

    // Counters: deltas of this RPC.
    let q = r.req.counters();
    let p = r.resp.counters();
    let dq = |f: fn(&Counters) -> u64| f(q) - f(&before_req);
    let dp = |f: fn(&Counters) -> u64| f(p) - f(&before_resp);
    let chunked_call = u64::from(path != CallPath::Inline);
    prop_assert_eq!(dq(|c| c.messages_sent), 1);
    prop_assert_eq!(dq(|c| c.read_chunks), chunked_call);
    prop_assert_eq!(dp(|c| c.read_chunks), chunked_call);
    prop_assert_eq!(dq(|c| c.long_calls), u64::from(path == CallPath::LongCall));
    prop_assert_eq!(dp(|c| c.long_calls), u64::from(path == CallPath::LongCall));
    let read_bytes = match path {
        CallPath::Inline => 0,
        CallPath::ReadChunk => d as u64,
        CallPath::LongCall => t as u64,
    };
    prop_assert_eq!(dq(|c| c.rdma_read_bytes), read_bytes);
    prop_assert_eq!(dp(|c| c.rdma_read_bytes), read_bytes);
    prop_assert_eq!(
        dq(|c| c.write_chunks),
        u64::from(prov == ReplyProv::WriteChunk)
    );
    prop_assert_eq!(
        dq(|c| c.reply_chunks),
        u64::from(prov == ReplyProv::ReplyChunk)
    );
    if rpath != ReplyPath::ErrChunk {
        // Not checked on the ERR_CHUNK path: the responder counts the write chunk before it
        // finds the reply cannot go (known counter bug, see
        // `transport_faults::err_chunk_reply_counts_no_write_chunk`).
        prop_assert_eq!(dp(|c| c.write_chunks), u64::from(write_used));
    }
    let long_reply = u64::from(rpath == ReplyPath::LongReply);
    prop_assert_eq!(dp(|c| c.reply_chunks), long_reply);
    prop_assert_eq!(dp(|c| c.long_replies), long_reply);
    prop_assert_eq!(dq(|c| c.long_replies), long_reply);
    prop_assert_eq!(
        dp(|c| c.err_chunk_sent),
        u64::from(rpath == ReplyPath::ErrChunk)
    );
    prop_assert_eq!(dq(|c| c.ddp_payload_copied_bytes), 0);
    // The responder counts a reply DDP region as copied when no write chunk carried it.
    let resp_copied = if s.rddp.is_some() && !write_used {
        rd as u64
    } else {
        0
    };
    prop_assert_eq!(dp(|c| c.ddp_payload_copied_bytes), resp_copied);
    if path == CallPath::ReadChunk {
        prop_assert_eq!(
            dq(|c| c.pullup_bytes),
            0,
            "no pull-up on the read-chunk path"
        );
    }
    if write_used && rpath == ReplyPath::Inline {
        prop_assert_eq!(
            dp(|c| c.pullup_bytes),
            0,
            "no pull-up on the write-chunk path"
        );
        prop_assert_eq!(dp(|c| c.rdma_write_bytes), rd as u64);
        prop_assert_eq!(dq(|c| c.rdma_write_bytes), rd as u64);
    }
    // Invalidation: one registration per chunk — except a Long Call carrying DDP pages,
    // whose gap-free runs (pulled-up head, data pages, pulled-up tail) are registered
    // separately — and each registration revoked exactly once.
    let chunks = u64::from(prov != ReplyProv::None) + chunked_call;
    let regs = dq(|c| c.registrations);
    if path == CallPath::LongCall && d > 0 {
        prop_assert!(
            regs > chunks,
            "Long Call with DDP: one registration per run"
        );
    } else {
        prop_assert_eq!(regs, chunks);
    }
    prop_assert_eq!(
        dq(|c| c.local_invalidations) + dq(|c| c.remote_invalidations),
        regs
    );
    let swi = u64::from(
        regs > 0 && r.resp.thresholds().send_with_invalidate && rpath != ReplyPath::ErrChunk,
    );
    prop_assert_eq!(dq(|c| c.remote_invalidations), swi);
    prop_assert_eq!(dp(|c| c.send_with_invalidate), swi);
    // Nothing left behind.
    assert_clean(r);
    prop_assert_eq!(r.req.outstanding(), 0);
    prop_assert_eq!(r.arena_a.in_use(), 0, "requester pages held after the RPC");
    prop_assert_eq!(r.arena_b.in_use(), 0, "responder pages held after the RPC");
    Ok(())
}

fn run_case(c: &Case) -> Result<(), TestCaseError> {
    let cfg = |send, recv, accept| TransportConfig {
        inline_send: send,
        inline_recv: recv,
        accept_remote_invalidate: accept,
        ..TransportConfig::default()
    };
    let mut r = rig_opts(RigOpts {
        req_cfg: cfg(c.req_send, c.req_recv, c.accept_inv),
        resp_cfg: cfg(c.resp_send, c.resp_recv, true),
        pages: ARENA_PAGES,
        ..RigOpts::default()
    });
    for (i, rpc) in c.rpcs.iter().enumerate() {
        one_rpc(&mut r, 0x1000 + i as u32, rpc)?;
    }
    teardown(r);
    Ok(())
}

/// Cases per run (each 1–3 RPCs): 10 000 in release (≈ 5 s on one core), 100 in debug
/// builds; `PROPTEST_CASES` overrides.
fn cases() -> u32 {
    let default = if cfg!(debug_assertions) { 100 } else { 10_000 };
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn random_call_and_reply_shapes() {
    let mut runner = TestRunner::new(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 2000,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let result = runner.run(&case_strategy(), |c| run_case(&c));
    let tally = TALLY.with(|t| t.borrow().clone());
    for (k, n) in &tally {
        println!("{k:?}: {n}");
    }
    if let Err(e) = result {
        panic!("{e}");
    }
    // Every path the rules can take was exercised.
    let seen = |f: &dyn Fn(&Path) -> bool| tally.keys().any(f);
    for p in [CallPath::Inline, CallPath::ReadChunk, CallPath::LongCall] {
        assert!(seen(&|k| k.0 == p), "call path {p:?} never taken");
    }
    for p in [
        ReplyProv::None,
        ReplyProv::WriteChunk,
        ReplyProv::ReplyChunk,
    ] {
        assert!(seen(&|k| k.1 == p), "reply provisioning {p:?} never taken");
    }
    for p in [ReplyPath::Inline, ReplyPath::LongReply, ReplyPath::ErrChunk] {
        assert!(seen(&|k| k.2 == p), "reply path {p:?} never taken");
    }
    assert!(
        seen(&|k| k.0 == CallPath::LongCall && k.3),
        "Long Call with DDP data never taken"
    );
    assert!(
        seen(&|k| k.0 == CallPath::ReadChunk
            && k.1 == ReplyProv::WriteChunk
            && k.2 == ReplyPath::Inline),
        "read chunk + write chunk never taken"
    );
}

/// An NFS-WRITE-like call whose inline part does not fit even with the data in a read chunk
/// goes as a Long Call (RFC 8166 §3.5.3): the head is pulled up into a fresh page (ending
/// mid-page), then come the caller's data pages, then the pulled-up pad and tail. No single
/// FRWR maps fragments with such holes, so the requester registers each gap-free run
/// separately and sends several position-zero segments (as Linux does).
#[test]
fn long_call_with_ddp_pages() {
    let cfg = TransportConfig {
        inline_send: 1024,
        inline_recv: 1024,
        ..TransportConfig::default()
    };
    let mut r = rig::rig_with(cfg);
    // 1200 bytes of head XDR: too large for a 1024-byte inline Send even once reduced.
    let head = xdr_bytes(0x77, 300, 1);
    let data = pattern(8192, 2);
    let (call, bytes) = build(&r.pa, &head, Some((&data, 0)), &[0xee; 8]);
    if let Err(rej) = r.req.call(&mut r.qa, call, ReplySpec::inline(256)) {
        panic!("Long Call with DDP pages refused: {:?}", rej.error);
    }
    let ev = r.run(&mut |c| {
        assert_eq!(c.call.to_vec().unwrap(), bytes);
        rig::reply_for(c.xid, b"ok")
    });
    rig::take_reply(ev, 0x77);
    assert_eq!(r.req.counters().long_calls, 1);
    assert_clean(&r);
    teardown(r);
}
