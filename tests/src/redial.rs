//! A client that survives connection loss, for the reconnect tests and the soak: calls go
//! through [`Reconnect`]; when the connection dies the test's `connect` makes a new one over
//! the same arenas and the owed calls are resent. Every reply is checked against what the
//! workload's server must answer.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use std::collections::BTreeMap;

use krpc_rdma::soft::{FaultInjector, SoftQp};
use krpc_rdma::transport::{
    CallError, Incoming, Reconnect, ReplySpec, RequesterEvent, ResponderEvent, TransportConfig,
};
use mbuf::Chain;

use krpc_rdma_scenarios::data::Kind;

use crate::rig::Rig;

/// Both sides wrapped in fault injectors.
pub type FRig = Rig<FaultInjector<SoftQp>, FaultInjector<SoftQp>>;

/// What the server does with a call handed up.
pub enum Serve {
    /// Answer it.
    Reply,
    /// Break the connection instead (a loss after hand-up).
    Disconnect,
}

/// How a run ended.
#[derive(Debug, Default)]
pub struct Run {
    /// Each call's end: `Ok` for a verified reply.
    pub ended: BTreeMap<u32, Result<(), CallError>>,
    /// Connections used.
    pub connections: u64,
    /// Calls sent again.
    pub retransmits: u64,
}

/// Make `total` calls (xids from 0x1000, shapes from `kind`), at most `depth` owed at once,
/// over `r` and the connections `connect` makes after each loss. `dead` looks at each lost
/// connection before it is dropped; `serve` decides, per call handed up, what the server
/// does. Ends when every call ended; panics on a call ending twice, a reply that differs
/// from what the server sent, or no progress.
pub fn run(
    mut r: FRig,
    total: usize,
    depth: usize,
    kind: &mut dyn FnMut() -> Kind,
    connect: &mut dyn FnMut() -> FRig,
    dead: &mut dyn FnMut(&mut FRig),
    serve: &mut dyn FnMut(&Incoming) -> Serve,
) -> (Run, FRig) {
    let mut rc = Reconnect::new(&TransportConfig::default()).unwrap();
    let mut kinds: BTreeMap<u32, Kind> = BTreeMap::new();
    let mut out = Run {
        connections: 1,
        ..Run::default()
    };
    let mut next: Option<(Chain, ReplySpec)> = None;
    let mut issued = 0usize;
    let mut idle = 0;
    let end = |out: &mut Run, xid: u32, e: Result<(), CallError>| {
        assert!(out.ended.insert(xid, e).is_none(), "{xid:#x} ended twice");
    };
    while out.ended.len() < total {
        while issued < total && rc.owed() < depth && !r.req.is_lost() && rc.unsent() == 0 {
            let xid = 0x1000 + issued as u32;
            let (call, spec) = match next.take() {
                Some(c) => c,
                None => {
                    let k = kind();
                    kinds.insert(xid, k);
                    k.call(&r.pa, xid).unwrap()
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
        let mut calls_in = Vec::new();
        r.resp.poll(&mut r.qb, &mut |e| {
            if let ResponderEvent::Call(c) = e {
                calls_in.push(c)
            }
        });
        for c in calls_in {
            match serve(&c) {
                Serve::Reply => {
                    let reply = Kind::of(&c.call).reply(&r.pb, c.xid).unwrap();
                    let _ = r.resp.reply(&mut r.qb, c.ctx, reply);
                }
                Serve::Disconnect => r.qb.inner_mut().disconnect(),
            }
        }
        let mut evs = Vec::new();
        r.req.poll(&mut r.qa, &mut |e| evs.push(e));
        let progress = !evs.is_empty();
        for e in evs {
            match rc.on_event(e) {
                Some(RequesterEvent::Reply { xid, reply }) => {
                    assert_eq!(
                        reply.to_vec().unwrap(),
                        kinds[&xid].expected(xid),
                        "reply to {xid:#x}"
                    );
                    end(&mut out, xid, Ok(()));
                }
                Some(RequesterEvent::Failed { xid, error, .. }) => end(&mut out, xid, Err(error)),
                _ => {}
            }
        }
        if r.req.is_lost() {
            let mut sink = |_| {};
            r.resp.poll(&mut r.qb, &mut sink);
            // No handle of the old connection is still valid: the calls that will be resent
            // are exposed again only under new registrations.
            assert_eq!(r.qa.inner().live_registrations(), 0, "old handles live");
            dead(&mut r);
            drop(r);
            r = connect();
            out.connections += 1;
            idle = 0;
        }
        let mut failed = Vec::new();
        rc.resend(&mut r.req, &mut r.qa, &mut |e| failed.push(e));
        for e in failed {
            if let RequesterEvent::Failed { xid, error, .. } = e {
                end(&mut out, xid, Err(error));
            }
        }
        idle = if progress { 0 } else { idle + 1 };
        assert!(
            idle < 1000,
            "no progress: {} ended of {total}",
            out.ended.len()
        );
    }
    out.retransmits = rc.stats().retransmits;
    assert_eq!(rc.owed(), 0);
    drop(next);
    (out, r)
}
