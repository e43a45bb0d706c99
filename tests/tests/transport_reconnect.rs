//! Reconnect and retransmit where only the soft provider's fault injector can break the
//! connection: between two RDMA Writes of one reply, and with the requester's Local
//! Invalidate flushed by the loss. Each time the call is sent again with its XID on a new
//! connection, gets exactly one verified reply, and no handle of the dead connection is still
//! valid. (The loss points every provider can make — during the RDMA Read, after hand-up,
//! right after the reply was posted, while a Local Invalidate is outstanding — are the
//! suite's `reconnect_after_loss_*` scenarios, in `scenarios_soft`.)
#![allow(clippy::unwrap_used)]

use tests::rig;

use std::sync::Arc;

use krpc_rdma::soft::FaultConfig;
use krpc_rdma::transport::TransportConfig;
use krpc_rdma_scenarios::data::Kind;
use mbuf::HeapPageArena;
use rig::{rig_on, RigOpts, ARENA_B_BASE};
use tests::raw::advertised_handles;
use tests::redial::{self, FRig, Run, Serve};

/// Run `kinds` once: the first connection has faults `fa` / `fb`, later ones none. Checks
/// that every call got its one verified reply after exactly one reconnect, that the fault
/// (or the server's disconnect) is what broke the first connection, and that every handle the
/// first connection advertised is dead.
fn case(kinds: &[Kind], req_cfg: TransportConfig, fa: FaultConfig, fb: FaultConfig) -> Run {
    let a = Arc::new(HeapPageArena::new(4096).unwrap());
    let b = Arc::new(HeapPageArena::with_base(4096, ARENA_B_BASE).unwrap());
    let opts = RigOpts {
        req_cfg,
        ..RigOpts::default()
    };
    let first = rig_on(a.clone(), b.clone(), opts.clone()).with_faults(fa, fb);
    let mut next = kinds.iter().copied();
    let mut checked = 0;
    let (out, r) = redial::run(
        first,
        kinds.len(),
        4,
        &mut || next.next().unwrap(),
        &mut || {
            rig_on(a.clone(), b.clone(), opts.clone())
                .with_faults(FaultConfig::default(), FaultConfig::default())
        },
        &mut |dead: &mut FRig| {
            for i in 0..kinds.len() as u32 {
                for (h, off, write) in advertised_handles(dead, 0x1000 + i) {
                    let q = dead.qb.inner();
                    let probe = if write {
                        q.probe_remote_write(h, off, 1)
                    } else {
                        q.probe_remote_read(h, off, 1)
                    };
                    assert!(probe.is_err(), "handle {h:#x} of the dead connection valid");
                    checked += 1;
                }
            }
        },
        &mut |_| Serve::Reply,
    );
    assert_eq!(out.connections, 2, "one loss, one reconnect");
    assert!(out.retransmits >= 1);
    assert!(
        out.ended.values().all(Result::is_ok),
        "every call replied: {:?}",
        out.ended
    );
    if kinds.iter().any(|k| !matches!(k, Kind::Small)) {
        assert!(checked > 0, "the dead connection's handles were probed");
    }
    drop(r);
    assert_eq!(a.in_use(), 0, "requester pages leaked");
    assert_eq!(b.in_use(), 0, "responder pages leaked");
    out
}

#[test]
fn loss_in_the_middle_of_a_replys_rdma_writes() {
    case(
        &[Kind::Read(200_000)],
        TransportConfig::default(),
        FaultConfig::default(),
        FaultConfig {
            disconnect_at_write: Some(2),
            ..FaultConfig::default()
        },
    );
}

#[test]
fn loss_while_a_local_invalidate_is_outstanding() {
    // No Send With Invalidate, so the requester invalidates the write chunk itself: its
    // Send executes, then the connection breaks before the Local Invalidate does.
    case(
        &[Kind::Read(100_000)],
        TransportConfig {
            accept_remote_invalidate: false,
            ..TransportConfig::default()
        },
        FaultConfig {
            disconnect_after_wrs: Some(1),
            ..FaultConfig::default()
        },
        FaultConfig::default(),
    );
}
