//! A soak: thousands of RPCs of mixed shapes over connections that keep failing (the fault
//! injector breaks each one at a random point: after N work requests, at the nth Send, Read
//! or Write, a lost Send, a flush at a poll, on either side), reconnected each time, with
//! [`Reconnect`] sending every call still owed a reply again with the same XID.
//!
//! Checked: every call ends exactly once (a verified reply, or a typed failure), no page,
//! registration or context is left, and the run is deterministic (a fixed seed).
//! `KRPC_RDMA_SOAK_CALLS` sets the number of calls (default 10,000 in release builds, 500
//! in debug builds); the longer run: `KRPC_RDMA_SOAK_CALLS=200000 cargo test --release -p
//! tests --test transport_soak -- --nocapture`.

use tests::rig;

use std::sync::Arc;

use krpc_rdma::soft::FaultConfig;
use krpc_rdma_scenarios::data::{Kind, Rng};
use mbuf::HeapPageArena;
use rig::{rig_on, RigOpts, ARENA_B_BASE};
use tests::redial::{self, FRig, Serve};

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

#[test]
fn every_call_ends_exactly_once_across_failing_connections() {
    let total = calls();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let pages = 16_384;
    let arena_a = Arc::new(HeapPageArena::new(pages).unwrap());
    let arena_b = Arc::new(HeapPageArena::with_base(pages, ARENA_B_BASE).unwrap());
    let first = connect(&arena_a, &arena_b, &mut rng);
    let rng = std::cell::RefCell::new(rng);
    let (out, r) = redial::run(
        first,
        total,
        16,
        &mut || kind(&mut rng.borrow_mut()),
        &mut || connect(&arena_a, &arena_b, &mut rng.borrow_mut()),
        &mut |_| {},
        &mut |_| Serve::Reply,
    );
    let failures: Vec<_> = out.ended.iter().filter(|(_, e)| e.is_err()).collect();
    println!(
        "soak: {total} calls, {} replies, {} typed failures, {} connections, {} retransmits",
        total - failures.len(),
        failures.len(),
        out.connections,
        out.retransmits
    );
    assert_eq!(out.ended.len(), total);
    assert!(failures.is_empty(), "failures: {failures:?}");
    assert!(
        out.connections as usize > total / 500,
        "the faults must really break connections"
    );
    assert!(out.retransmits > 0);
    let live = (
        r.qa.inner().live_registrations(),
        r.qb.inner().live_registrations(),
    );
    assert_eq!(live, (0, 0), "registrations left");
    drop(r);
    assert_eq!(arena_a.in_use(), 0, "requester pages leaked");
    assert_eq!(arena_b.in_use(), 0, "responder pages leaked");
}
