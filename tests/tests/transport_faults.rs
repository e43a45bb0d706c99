//! Fault tests of the transport core over the software RC provider and its `FaultInjector`:
//! connection loss at chosen points of an RPC, corrupted headers, Send With Invalidate.
//!
//! Invariants checked after every fault: no panic; every call issued ends exactly once (a
//! reply, or `Failed`), and after a connection loss every pending call failed with
//! `ConnectionLost`; no live registration; once the chains handed back are dropped, no page
//! is held by either arena.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use tests::rig;

use std::collections::BTreeMap;
use std::sync::Arc;

use krpc_rdma::provider::WcStatus;
use krpc_rdma::soft::{CorruptSend, FaultConfig, FaultInjector, SoftQp};
use krpc_rdma::transport::{
    CallError, DdpReply, ReplyError, ReplySpec, RequesterEvent, ResponderEvent, TransportConfig,
};
use krpc_rdma::wire::ErrorCode;
use krpc_rdma_scenarios::data::{locate_read, Kind, WORKLOAD};
use mbuf::{Chain, Mbuf, PageProvider};
use rig::{
    assert_clean, pages_with, pattern, reply_for, rig_with, take_reply, teardown, write_call,
    xdr_call, Rig, Soft,
};
use tests::raw::advertised_handles;

type FRig = Rig<FaultInjector<SoftQp>, FaultInjector<SoftQp>>;

/// How each call ended.
#[derive(Debug, Default)]
struct Outcomes {
    replies: BTreeMap<u32, Chain>,
    failed: BTreeMap<u32, (CallError, Option<Chain>)>,
    /// Calls issued (accepted by `Requester::call`).
    issued: Vec<u32>,
    req_lost: bool,
    resp_lost: bool,
    reply_errors: Vec<String>,
}

/// Issue `kinds` (one at a time as credits allow) and serve them until everything ended or
/// nothing moves. Never panics on transport outcomes; records them.
fn drive<A: Soft, B: Soft>(r: &mut Rig<A, B>, first_xid: u32, kinds: &[Kind]) -> Outcomes {
    let mut out = Outcomes::default();
    let mut next = 0usize;
    for _ in 0..200 {
        // Issue as many calls as the requester takes.
        while next < kinds.len() && !out.req_lost {
            let xid = first_xid + next as u32;
            let (call, spec) = kinds[next].call(&r.pa, xid).unwrap();
            match r.req.call(&mut r.qa, call, spec) {
                Ok(()) => {
                    out.issued.push(xid);
                    next += 1;
                }
                Err(rej) => {
                    assert!(
                        matches!(
                            rej.error,
                            CallError::NoCredit | CallError::WouldBlock | CallError::ConnectionLost
                        ),
                        "unexpected refusal {:?}",
                        rej.error
                    );
                    break;
                }
            }
        }
        let mut calls = Vec::new();
        let mut resp_lost = false;
        r.resp.poll(&mut r.qb, &mut |e| match e {
            ResponderEvent::Call(c) => calls.push(c),
            ResponderEvent::ConnectionLost => resp_lost = true,
            ResponderEvent::Connected(_)
            | ResponderEvent::ReverseReply { .. }
            | ResponderEvent::ReverseFailed { .. } => {}
        });
        out.resp_lost |= resp_lost;
        for c in calls {
            let kind = Kind::of(&c.call);
            let reply = kind.reply(&r.pb, c.xid).unwrap();
            drop(c.call);
            if let Err(e) = r.resp.reply(&mut r.qb, c.ctx, reply) {
                out.reply_errors.push(format!("{e:?}"));
            }
        }
        let mut evs = Vec::new();
        r.req.poll(&mut r.qa, &mut |e| evs.push(e));
        let progress = !evs.is_empty();
        for e in evs {
            match e {
                RequesterEvent::Reply { xid, reply } => {
                    assert!(out.replies.insert(xid, reply).is_none(), "two replies");
                    assert!(!out.failed.contains_key(&xid));
                }
                RequesterEvent::Failed { xid, error, pages } => {
                    assert!(out.failed.insert(xid, (error, pages)).is_none(), "two ends");
                    assert!(!out.replies.contains_key(&xid));
                }
                RequesterEvent::ConnectionLost => out.req_lost = true,
                RequesterEvent::Connected(_) | RequesterEvent::ReverseCall(_) => {}
            }
        }
        let ended = out.replies.len() + out.failed.len();
        if !progress && next == kinds.len() && ended == out.issued.len() {
            // One more responder poll to reap its last completions.
            r.resp.poll(&mut r.qb, &mut |e| {
                if matches!(e, ResponderEvent::ConnectionLost) {
                    resp_lost = true;
                }
            });
            out.resp_lost |= resp_lost;
            break;
        }
        if out.req_lost && out.resp_lost && !progress {
            break;
        }
    }
    out
}

/// The invariants of a connection loss (or of a clean run when `lost` is false).
fn check_outcomes(r: &FRig, out: &Outcomes, what: &str) {
    let lost = out.req_lost;
    if lost {
        assert!(r.req.is_lost(), "{what}: lost");
        assert!(out.resp_lost, "{what}: responder saw the loss too");
        // Every issued call ended exactly once; those that did not get a reply failed with
        // ConnectionLost.
        for xid in &out.issued {
            let ended = out.replies.contains_key(xid) || out.failed.contains_key(xid);
            assert!(ended, "{what}: call {xid:#x} never ended");
        }
        for (xid, (e, _)) in &out.failed {
            assert_eq!(*e, CallError::ConnectionLost, "{what}: call {xid:#x}");
        }
        assert_eq!(r.req.outstanding(), 0, "{what}");
        assert!(r.req.counters().connection_losses == 1, "{what}");
    } else {
        assert!(out.failed.is_empty(), "{what}: failures without loss");
        assert_eq!(out.replies.len(), out.issued.len(), "{what}: all replied");
    }
    assert_clean(r);
}

/// Drop what was handed back; check no page is held; tear down.
fn finish(r: FRig, out: Outcomes, what: &str) {
    let lost = out.req_lost;
    drop(out);
    if lost {
        // After a loss the transport frees every page it held.
        assert_eq!(
            r.arena_a.in_use(),
            0,
            "{what}: requester pages held after the loss"
        );
        assert_eq!(
            r.arena_b.in_use(),
            0,
            "{what}: responder pages held after the loss"
        );
    }
    teardown(r);
}

/// A rig whose requester already has credits (one RPC done), wrapped in fault injectors.
fn warm_rig(cfg: TransportConfig, fa: FaultConfig, fb: FaultConfig) -> FRig {
    let mut r = rig_with(cfg);
    let (call, spec) = Kind::Small.call(&r.pa, 1).unwrap();
    r.req.call(&mut r.qa, call, spec).unwrap();
    let pb = r.pb.clone();
    let ev = r.run(&mut |c| Kind::Small.reply(&pb, c.xid).unwrap());
    take_reply(ev, 1);
    assert!(r.req.credits_granted() > 8);
    r.with_faults(fa, fb)
}

/// [`run_with`] the default configuration.
fn run_faults(fa: FaultConfig, fb: FaultConfig, what: &str) -> Outcomes {
    run_with(TransportConfig::default(), fa, fb, what)
}

fn run_with(cfg: TransportConfig, fa: FaultConfig, fb: FaultConfig, what: &str) -> Outcomes {
    let mut r = warm_rig(cfg, fa, fb);
    let out = drive(&mut r, 0x100, WORKLOAD);
    check_outcomes(&r, &out, what);
    let summary = Outcomes {
        issued: out.issued.clone(),
        req_lost: out.req_lost,
        resp_lost: out.resp_lost,
        reply_errors: out.reply_errors.clone(),
        ..Outcomes::default()
    };
    finish(r, out, what);
    summary
}

/// The requester's and the responder's side, as named in the messages.
const SIDES: [&str; 2] = ["requester", "responder"];

/// `f` on `side` ("requester", else the responder), no fault on the other: the injectors'
/// configurations for [`run_faults`] / [`run_with`] / [`warm_rig`].
fn faults_on(side: &str, f: FaultConfig) -> (FaultConfig, FaultConfig) {
    if side == "requester" {
        (f, FaultConfig::default())
    } else {
        (FaultConfig::default(), f)
    }
}

/// The workload with `f` on `side` only loses the connection; `what` (the fault) is named
/// with the side in the messages.
fn assert_lost(side: &str, f: FaultConfig, what: &str) {
    let what = format!("{side} {what}");
    let (fa, fb) = faults_on(side, f);
    let out = run_faults(fa, fb, &what);
    assert!(out.req_lost, "{what}: the fault fired");
}

/// On each side, for each `n` of `ns`: `fault(n)` on that side only, run by `run` (given
/// the side's name, `n` and the injectors' configurations); the requester must have lost
/// the connection in at least `min_fired` of the runs of each side.
fn sweep_sides(
    ns: core::ops::Range<u64>,
    min_fired: u32,
    fault: impl Fn(u64) -> FaultConfig,
    mut run: impl FnMut(&str, u64, FaultConfig, FaultConfig) -> Outcomes,
) {
    for side in SIDES {
        let mut fired = 0;
        for n in ns.clone() {
            let (fa, fb) = faults_on(side, fault(n));
            fired += u32::from(run(side, n, fa, fb).req_lost);
        }
        assert!(fired >= min_fired, "{side}: faults fired {fired} times");
    }
}

/// The first Send of the injector's side has byte `offset` of its header XORed with `xor`.
fn corrupt_first_send(offset: u32, xor: u8) -> FaultConfig {
    FaultConfig {
        corrupt_send: Some(CorruptSend {
            nth: 1,
            offset,
            xor,
        }),
        ..FaultConfig::default()
    }
}

/// A reply of at most `max_reply` bytes whose READ data (`locate_read`) is placed in a
/// `ddp_len`-byte write chunk of fresh pages of `pa`.
fn read_reply_spec(pa: &Arc<dyn PageProvider>, ddp_len: usize, max_reply: usize) -> ReplySpec {
    ReplySpec {
        max_reply,
        ddp: Some(DdpReply {
            pages: Chain::alloc_pages(pa, ddp_len).unwrap(),
            locate: locate_read,
        }),
    }
}

#[test]
fn workload_without_faults_completes() {
    let out = run_faults(FaultConfig::default(), FaultConfig::default(), "no fault");
    assert!(!out.req_lost);
    assert_eq!(out.issued.len(), WORKLOAD.len());
}

/// Loss before the nth Send of the requester: before a call goes out.
#[test]
fn loss_before_a_calls_send() {
    for n in 1..=WORKLOAD.len() as u64 {
        let f = FaultConfig {
            disconnect_at_send: Some(n),
            ..FaultConfig::default()
        };
        assert_lost("requester", f, &format!("disconnect_at_send={n}"));
    }
}

/// Loss before the nth RDMA Read of the responder: while it pulls a read chunk or a Long Call.
#[test]
fn loss_during_responder_rdma_read() {
    let mut fired = 0;
    for n in 1..=12 {
        let what = format!("responder disconnect_at_read={n}");
        let (fa, fb) = faults_on(
            "responder",
            FaultConfig {
                disconnect_at_read: Some(n),
                ..FaultConfig::default()
            },
        );
        let out = run_faults(fa, fb, &what);
        if !out.req_lost {
            break;
        }
        fired += 1;
    }
    // Write(300000) alone takes 5 Reads of at most 64 KiB (16 SGEs).
    assert!(fired >= 5, "faults fired {fired} times");
}

/// Loss before the nth Send of the responder: after a reply's RDMA Writes, before its Send.
#[test]
fn loss_before_a_replys_send() {
    for n in 1..=WORKLOAD.len() as u64 {
        let f = FaultConfig {
            disconnect_at_send: Some(n),
            ..FaultConfig::default()
        };
        assert_lost("responder", f, &format!("disconnect_at_send={n}"));
    }
    // And between a reply's RDMA Writes (Read(200003) and the Long Reply write in pieces).
    for n in 1..=6 {
        let f = FaultConfig {
            disconnect_at_write: Some(n),
            ..FaultConfig::default()
        };
        assert_lost("responder", f, &format!("disconnect_at_write={n}"));
    }
}

/// Loss after every possible number of work requests, on either side: covers the requester's
/// Local Invalidates (with Send With Invalidate refused, every registration is invalidated
/// locally).
#[test]
fn loss_after_every_work_request() {
    for accept in [true, false] {
        let cfg = TransportConfig {
            accept_remote_invalidate: accept,
            ..TransportConfig::default()
        };
        sweep_sides(
            0..60,
            7,
            |n| FaultConfig {
                disconnect_after_wrs: Some(n),
                ..FaultConfig::default()
            },
            |side, n, fa, fb| {
                let what = format!("{side} disconnect_after_wrs={n} accept_inv={accept}");
                run_with(cfg, fa, fb, &what)
            },
        );
    }
}

/// Loss at every `poll_cq` call of either side (a flush at an arbitrary point).
#[test]
fn loss_at_every_poll() {
    sweep_sides(
        1..40,
        3,
        |n| FaultConfig {
            flush_at_poll: Some(n),
            ..FaultConfig::default()
        },
        |side, n, fa, fb| run_faults(fa, fb, &format!("{side} flush_at_poll={n}")),
    );
}

/// Loss while the requester invalidates: a call with a read chunk and a write chunk, Send
/// With Invalidate refused, so the requester posts two Local Invalidates when the reply
/// arrives; the connection breaks right after the first one executed, so the second cannot be
/// posted. A second call is pending. The pending call fails with ConnectionLost; the first
/// call's registrations are all dead (released, which revokes them) whatever it reports;
/// every page comes back.
#[test]
fn loss_during_requester_local_invalidate() {
    let cfg = TransportConfig {
        accept_remote_invalidate: false,
        ..TransportConfig::default()
    };
    // Requester work requests after warm-up: Send(A), Send(B), LocalInv #1 of A → break.
    let fa = FaultConfig {
        disconnect_after_wrs: Some(3),
        ..FaultConfig::default()
    };
    let mut r = warm_rig(cfg, fa, FaultConfig::default());
    let data = pattern(100_000, 6);
    let spec = read_reply_spec(&r.pa, 100_000, 100_000 + 64);
    r.req
        .call(&mut r.qa, write_call(&r.pa, 0x10, &data), spec)
        .unwrap();
    let handles = advertised_handles(&mut r, 0x10);
    assert_eq!(handles.len(), 2, "a read chunk and a write chunk");
    let (call, spec) = Kind::Write(50_000).call(&r.pa, 0x11).unwrap();
    r.req.call(&mut r.qa, call, spec).unwrap();
    let mut calls = Vec::new();
    r.resp.poll(&mut r.qb, &mut |e| {
        if let ResponderEvent::Call(c) = e {
            calls.push(c)
        }
    });
    assert_eq!(calls.len(), 2);
    let second = calls.pop().unwrap();
    let first = calls.pop().unwrap();
    assert_eq!(first.xid, 0x10);
    // Serve only the first call.
    let rep = Kind::Read(100_000).reply(&r.pb, 0x10).unwrap();
    r.resp.reply(&mut r.qb, first.ctx, rep).unwrap();
    let mut evs = Vec::new();
    r.req.poll(&mut r.qa, &mut |e| evs.push(e));
    assert_eq!(r.qa.stats().disconnects, 1, "the fault fired");
    assert_eq!(r.qa.inner().stats().local_invs, 1, "one LocalInv executed");
    let mut ended = BTreeMap::new();
    for e in evs {
        match e {
            RequesterEvent::Failed { xid, error, pages } => {
                ended.insert(xid, (Some(error), pages));
            }
            RequesterEvent::Reply { xid, reply } => {
                ended.insert(xid, (None, Some(reply)));
            }
            _ => {}
        }
    }
    assert_eq!(ended.len(), 2, "both calls ended: {ended:?}");
    assert_eq!(ended[&0x11].0, Some(CallError::ConnectionLost));
    assert!(
        matches!(ended[&0x10].0, None | Some(CallError::ConnectionLost)),
        "{:?}",
        ended[&0x10]
    );
    assert!(ended[&0x10].1.is_some(), "the READ's pages came back");
    assert!(r.req.is_lost());
    for (h, off, write) in handles {
        let probe = if write {
            r.qb.inner().probe_remote_write(h, off, 4)
        } else {
            r.qb.inner().probe_remote_read(h, off, 4)
        };
        assert_eq!(probe, Err(WcStatus::RemoteAccess));
    }
    assert_clean(&r);
    r.resp.poll(&mut r.qb, &mut |_| {});
    assert!(matches!(
        r.resp.reply(&mut r.qb, second.ctx, reply_for(0x11, b"")),
        Err(ReplyError::ConnectionLost)
    ));
    drop(second.call);
    drop(first.call);
    drop(ended);
    assert_eq!(r.arena_a.in_use(), 0);
    assert_eq!(r.arena_b.in_use(), 0);
    teardown(r);
}

/// Corrupt one byte of the call header (every offset of a header with a read chunk and a
/// write chunk, several bit patterns): the responder answers ERR_VERS / ERR_CHUNK, drops the
/// message (counted), or the connection breaks (a bad handle) — never a panic, never a leak.
#[test]
fn corrupted_call_headers() {
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    // Header of a call with one read chunk and one write chunk: 28 + 24 + 24 = 76 bytes.
    for offset in 0..80u32 {
        for xor in [0x01u8, 0x02, 0x80, 0xff] {
            let mut r = warm_rig(
                TransportConfig::default(),
                corrupt_first_send(offset, xor),
                FaultConfig::default(),
            );
            // A WRITE-like call (read chunk) that also provisions a write chunk.
            let mut call = xdr_call(0x20, &[2, 0, 0, 0, 0, 0, 0x40, 0]);
            call.append(&16384u32.to_be_bytes()).unwrap();
            call.append_mbuf(Mbuf::ddp_marker()).unwrap();
            call.cat(pages_with(&r.pa, &pattern(16384, 1))).unwrap();
            call.append(&[0xbb; 8]).unwrap();
            let spec = ReplySpec {
                max_reply: 8192 + 64,
                ddp: Some(DdpReply {
                    pages: Chain::alloc_pages(&r.pa, 8192).unwrap(),
                    locate: locate_read,
                }),
            };
            r.req.call(&mut r.qa, call, spec).unwrap();
            let before_bad = r.req.counters().bad_messages + r.resp.counters().bad_messages;
            let out = {
                let mut evs = Vec::new();
                let mut lost = false;
                for _ in 0..10 {
                    let mut calls = Vec::new();
                    r.resp.poll(&mut r.qb, &mut |e| match e {
                        ResponderEvent::Call(c) => calls.push(c),
                        ResponderEvent::ConnectionLost => lost = true,
                        ResponderEvent::Connected(_)
                        | ResponderEvent::ReverseReply { .. }
                        | ResponderEvent::ReverseFailed { .. } => {}
                    });
                    for c in calls {
                        let rep = Kind::Read(4000).reply(&r.pb, c.xid).unwrap();
                        let _ = r.resp.reply(&mut r.qb, c.ctx, rep);
                    }
                    r.req.poll(&mut r.qa, &mut |e| evs.push(e));
                }
                (evs, lost)
            };
            let (evs, _) = out;
            let what = format!("offset {offset} xor {xor:#x}");
            let mut ended = 0;
            let mut class = String::new();
            for e in &evs {
                match e {
                    RequesterEvent::Reply { .. } => {
                        ended += 1;
                        class = "reply".into();
                    }
                    RequesterEvent::Failed { error, .. } => {
                        ended += 1;
                        class = format!("{error:?}");
                    }
                    _ => {}
                }
            }
            assert!(ended <= 1, "{what}: {evs:?}");
            if ended == 0 {
                let bad = r.req.counters().bad_messages + r.resp.counters().bad_messages;
                assert!(bad > before_bad, "{what}: a silent drop must be counted");
                class = "dropped (counted)".into();
                assert_eq!(r.req.outstanding(), 1);
            }
            *seen.entry(class).or_default() += 1;
            drop(evs);
            if r.req.is_lost() {
                assert_clean(&r);
            }
            // Dropping a requester with a call pending releases its registrations with the
            // queue pair.
            teardown(r);
        }
    }
    println!("corrupted call headers: {seen:?}");
    assert!(seen.contains_key("Rdma(Vers)"), "{seen:?}");
    assert!(seen.contains_key("Rdma(Chunk)"), "{seen:?}");
    assert!(seen.contains_key("dropped (counted)"), "{seen:?}");
}

/// Corrupt one byte of the reply header (a READ reply with a write chunk): the requester
/// drops it (counted) only when the XID was hit, and otherwise delivers the reply or fails
/// the call (`MalformedReply` / `BadReply`) — never a panic, never a leak.
#[test]
fn corrupted_reply_headers() {
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    for offset in 0..60u32 {
        for xor in [0x01u8, 0x80, 0xff] {
            let mut r = warm_rig(
                TransportConfig::default(),
                FaultConfig::default(),
                corrupt_first_send(offset, xor),
            );
            let out = drive(&mut r, 0x30, &[Kind::Read(40_000)]);
            let what = format!("offset {offset} xor {xor:#x}");
            let class = if let Some(reply) = out.replies.get(&0x30) {
                let _ = reply.len();
                "reply".to_string()
            } else if let Some((e, _)) = out.failed.get(&0x30) {
                format!("{e:?}")
            } else {
                assert!(
                    r.req.counters().bad_messages > 0,
                    "{what}: a silent drop must be counted"
                );
                // Only a reply whose XID no longer names the call may be dropped: one that
                // still names it ends it (a reply, or a failure with the peer at fault).
                assert!(
                    offset < 4,
                    "{what}: the XID was intact, yet the call stays pending"
                );
                "dropped (counted)".to_string()
            };
            *seen.entry(class).or_default() += 1;
            if out.req_lost {
                assert_clean(&r);
            }
            drop(out);
            teardown(r);
        }
    }
    println!("corrupted reply headers: {seen:?}");
    assert!(seen.contains_key("dropped (counted)"), "{seen:?}");
    assert!(
        seen.keys().any(|k| k.starts_with("MalformedReply")),
        "{seen:?}"
    );
}

/// Specific header corruptions and their required answers.
#[test]
fn corrupted_call_header_answers() {
    // (offset, xor, expected failure): version 1 → 3 (ERR_VERS), proc 0 → 2 (RDMA_MSGP,
    // ERR_CHUNK), read chunk position 16 → 16 + 0x100000 (beyond the payload, ERR_CHUNK).
    for (offset, xor, want) in [
        (7u32, 0x02u8, ErrorCode::Vers),
        (15, 0x02, ErrorCode::Chunk),
        (21, 0x10, ErrorCode::Chunk),
    ] {
        let mut r = warm_rig(
            TransportConfig::default(),
            corrupt_first_send(offset, xor),
            FaultConfig::default(),
        );
        let out = drive(&mut r, 0x40, &[Kind::Write(10_000)]);
        let what = format!("offset {offset}");
        assert!(
            matches!(out.failed.get(&0x40), Some((CallError::Rdma(c), None)) if *c == want),
            "{what}: {:?}",
            out.failed
        );
        assert!(!out.req_lost, "{what}");
        assert_clean(&r);
        let resp = r.resp.counters();
        assert_eq!(resp.err_vers_sent + resp.err_chunk_sent, 1, "{what}");
        // The connection survives: another call goes through.
        let out2 = drive(&mut r, 0x50, &[Kind::Small, Kind::Write(10_000)]);
        assert_eq!(out2.replies.len(), 2, "{what}");
        drop((out, out2));
        teardown(r);
    }
}

/// Counters. When a reply does not fit what the requester provisioned, the responder sends
/// `ERR_CHUNK` instead; nothing was written, so no write chunk and no RDMA Write bytes may be
/// counted (the responder tallies a reply's counters only once it is posted).
#[test]
fn err_chunk_reply_counts_no_write_chunk() {
    let cfg = TransportConfig {
        inline_send: 1024,
        inline_recv: 1024,
        ..TransportConfig::default()
    };
    let mut r = rig_with(cfg);
    // The requester provisions a 4096-byte write chunk and expects at most 4096 + 900
    // bytes: the rest (900) fits inline. The server's reply has 2000 bytes of inline XDR
    // around 100 bytes of DDP data: too large for inline, no reply chunk → ERR_CHUNK.
    let spec = read_reply_spec(&r.pa, 4096, 4096 + 900);
    r.req
        .call(&mut r.qa, xdr_call(0x80, b"READ"), spec)
        .unwrap();
    assert_eq!(r.req.counters().write_chunks, 1);
    let pb = r.pb.clone();
    let mut result = None;
    let mut calls = Vec::new();
    r.resp.poll(&mut r.qb, &mut |e| {
        if let ResponderEvent::Call(c) = e {
            calls.push(c)
        }
    });
    for c in calls {
        let mut rep = reply_for(c.xid, &0u32.to_be_bytes());
        rep.append(&100u32.to_be_bytes()).unwrap();
        rep.append_mbuf(Mbuf::ddp_marker()).unwrap();
        rep.cat(pages_with(&pb, &pattern(100, 1))).unwrap();
        rep.append(&[0xcc; 2000]).unwrap();
        result = Some(r.resp.reply(&mut r.qb, c.ctx, rep));
    }
    assert!(matches!(result, Some(Err(ReplyError::ChunkError))));
    let mut evs = Vec::new();
    r.req.poll(&mut r.qa, &mut |e| evs.push(e));
    assert!(evs.iter().any(|e| matches!(
        e,
        RequesterEvent::Failed {
            error: CallError::Rdma(ErrorCode::Chunk),
            ..
        }
    )));
    drop(evs);
    assert_eq!(r.resp.counters().err_chunk_sent, 1);
    assert_eq!(r.qb.stats().rdma_writes, 0, "nothing was written");
    assert_eq!(
        r.resp.counters().write_chunks,
        0,
        "no write chunk was written"
    );
    assert_eq!(r.resp.counters().rdma_write_bytes, 0, "no byte was written");
    teardown(r);
}
