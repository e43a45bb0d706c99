//! A soak: thousands of RPCs of mixed shapes over connections that keep failing (the fault
//! injector breaks each one at a random point: after N work requests, at the nth Send, Read
//! or Write, a lost Send, a flush at a poll, on either side), reconnected each time, with
//! [`Reconnect`] sending every call still owed a reply again with the same XID.
//!
//! Checked: every call ends exactly once (a verified reply, or a typed failure), no page,
//! registration or context is left, and the run is deterministic (a fixed seed).
//! `KRPC_RDMA_SOAK_CALLS` sets the number of calls (default 10,000 in release builds, 500
//! in debug builds); the longer run: `KRPC_RDMA_SOAK_CALLS=200000 cargo test --release -p
//! krpc-rdma --features soft --test transport_soak -- --nocapture`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::workload::{kind_of, make_call, make_reply, Kind};
use common::{pattern, reply_for, rig_on, Rig, RigOpts, ARENA_B_BASE};
use krpc_rdma::soft::{FaultConfig, FaultInjector, SoftQp};
use krpc_rdma::transport::{
    CallError, Reconnect, ReplySpec, RequesterEvent, ResponderEvent, TransportConfig,
};
use mbuf::{Chain, HeapPageArena};

type FRig = Rig<FaultInjector<SoftQp>, FaultInjector<SoftQp>>;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn calls() -> usize {
    let default = if cfg!(debug_assertions) { 500 } else { 10_000 };
    std::env::var("KRPC_RDMA_SOAK_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One fault somewhere in the life of every connection, so none lives long. The requester's
/// side never issues RDMA Reads or Writes, so those faults go to the responder's side.
fn fault(rng: &mut Rng) -> (FaultConfig, FaultConfig) {
    let mut f = FaultConfig::default();
    let at = 1 + rng.below(200);
    let responder_side = rng.below(2) == 0;
    match rng.below(if responder_side { 6 } else { 4 }) {
        0 => f.disconnect_after_wrs = Some(at),
        1 => f.disconnect_at_send = Some(at),
        2 => f.drop_send = Some(at),
        3 => f.flush_at_poll = Some(at),
        4 => f.disconnect_at_read = Some(1 + rng.below(40)),
        _ => f.disconnect_at_write = Some(1 + rng.below(40)),
    }
    if responder_side {
        (FaultConfig::default(), f)
    } else {
        (f, FaultConfig::default())
    }
}

fn connect(a: &Arc<HeapPageArena>, b: &Arc<HeapPageArena>, rng: &mut Rng) -> FRig {
    let (fa, fb) = fault(rng);
    rig_on(a.clone(), b.clone(), RigOpts::default()).with_faults(fa, fb)
}

fn kind(rng: &mut Rng) -> Kind {
    match rng.below(10) {
        0..=3 => Kind::Small,
        4..=5 => Kind::Write(1 + rng.below(200_000) as usize),
        6..=8 => Kind::Read(1 + rng.below(200_000) as usize),
        _ => Kind::Long,
    }
}

/// The reply `kind` must bring back for `xid`.
fn expected(xid: u32, kind: Kind) -> Vec<u8> {
    match kind {
        Kind::Small | Kind::Write(_) => reply_for(xid, b"ok..").to_vec().unwrap(),
        Kind::Read(n) => {
            let mut v = reply_for(xid, &0u32.to_be_bytes()).to_vec().unwrap();
            v.extend_from_slice(&(n as u32).to_be_bytes());
            v.extend(pattern(n, 3));
            v.extend(vec![0u8; (4 - n % 4) % 4]);
            v.extend_from_slice(&[0xcc; 4]);
            v
        }
        Kind::Long => reply_for(xid, &pattern(12_000, 5)).to_vec().unwrap(),
    }
}

#[test]
fn every_call_ends_exactly_once_across_failing_connections() {
    let total = calls();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let pages = 16_384;
    let arena_a = Arc::new(HeapPageArena::new(pages).unwrap());
    let arena_b = Arc::new(HeapPageArena::with_base(pages, ARENA_B_BASE).unwrap());
    let mut rc = Reconnect::new(&TransportConfig::default()).unwrap();
    let mut r = connect(&arena_a, &arena_b, &mut rng);
    let mut kinds: BTreeMap<u32, Kind> = BTreeMap::new();
    let mut ended: BTreeMap<u32, Result<(), CallError>> = BTreeMap::new();
    let mut next: Option<(Chain, ReplySpec)> = None;
    let mut issued = 0usize;
    let mut connections = 1u64;
    let mut idle = 0;
    while ended.len() < total {
        // New calls, up to 16 in flight.
        while issued < total && rc.owed() < 16 && !r.req.is_lost() && rc.unsent() == 0 {
            let xid = 0x1000 + issued as u32;
            let (call, spec) = match next.take() {
                Some(c) => c,
                None => {
                    let k = kind(&mut rng);
                    kinds.insert(xid, k);
                    make_call(&r.pa, xid, k)
                }
            };
            match rc.call(&mut r.req, &mut r.qa, call, spec) {
                Ok(()) => issued += 1,
                Err(rej) => {
                    assert!(
                        matches!(
                            rej.error,
                            CallError::NoCredit | CallError::WouldBlock | CallError::ConnectionLost
                        ),
                        "call {xid:#x}: {}",
                        rej.error
                    );
                    next = Some((rej.call, rej.reply));
                    break;
                }
            }
        }
        // The server answers everything it is handed.
        let mut calls_in = Vec::new();
        r.resp.poll(&mut r.qb, &mut |e| {
            if let ResponderEvent::Call(c) = e {
                calls_in.push(c)
            }
        });
        for c in calls_in {
            let reply = make_reply(&r.pb, c.xid, kind_of(&c.call));
            let _ = r.resp.reply(&mut r.qb, c.ctx, reply);
        }
        // The client side, through Reconnect.
        let mut evs = Vec::new();
        r.req.poll(&mut r.qa, &mut |e| evs.push(e));
        let progress = !evs.is_empty();
        for e in evs {
            match rc.on_event(e) {
                Some(RequesterEvent::Reply { xid, reply }) => {
                    let want = expected(xid, kinds[&xid]);
                    assert_eq!(reply.to_vec().unwrap(), want, "reply to {xid:#x}");
                    assert!(ended.insert(xid, Ok(())).is_none(), "{xid:#x} ended twice");
                }
                Some(RequesterEvent::Failed { xid, error, .. }) => {
                    assert!(
                        ended.insert(xid, Err(error)).is_none(),
                        "{xid:#x} ended twice"
                    );
                }
                _ => {}
            }
        }
        if r.req.is_lost() {
            // Reconnect: the old connection is dropped whole, a new one made over the same
            // arenas (the kept calls' pages live there).
            let mut sink = |_| {};
            r.resp.poll(&mut r.qb, &mut sink);
            // No handle of the old connection is still valid: the calls that will be resent
            // are exposed again only under new registrations.
            assert_eq!(r.qa.inner().live_registrations(), 0, "old handles live");
            drop(r);
            r = connect(&arena_a, &arena_b, &mut rng);
            connections += 1;
            idle = 0;
        }
        let mut failed = Vec::new();
        rc.resend(&mut r.req, &mut r.qa, &mut |e| failed.push(e));
        for e in failed {
            if let RequesterEvent::Failed { xid, error, .. } = e {
                assert!(
                    ended.insert(xid, Err(error)).is_none(),
                    "{xid:#x} ended twice"
                );
            }
        }
        idle = if progress { 0 } else { idle + 1 };
        assert!(idle < 1000, "no progress: {} ended of {total}", ended.len());
    }
    let failures: Vec<_> = ended.iter().filter(|(_, e)| e.is_err()).collect();
    let stats = rc.stats();
    println!(
        "soak: {total} calls, {} replies, {} typed failures, {connections} connections, \
         {} retransmits",
        total - failures.len(),
        failures.len(),
        stats.retransmits
    );
    assert_eq!(ended.len(), total);
    assert!(failures.is_empty(), "failures: {failures:?}");
    assert!(
        connections as usize > total / 500,
        "the faults must really break connections"
    );
    assert!(stats.retransmits > 0);
    assert_eq!(rc.owed(), 0);
    drop(rc);
    drop(next);
    let live = (
        r.qa.inner().live_registrations(),
        r.qb.inner().live_registrations(),
    );
    assert_eq!(live, (0, 0), "registrations left");
    drop(r);
    assert_eq!(arena_a.in_use(), 0, "requester pages leaked");
    assert_eq!(arena_b.in_use(), 0, "responder pages leaked");
}
