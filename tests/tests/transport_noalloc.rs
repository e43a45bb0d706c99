//! The per-RPC path allocates nothing (issue 11): a counting `#[global_allocator]` counts the
//! heap allocations made *inside the transport's entry points* (`Requester::call` / `poll`,
//! `Responder::poll` / `reply`) over 10,000 round trips of each workload (small call, 1 MiB
//! DDP WRITE, 1 MiB DDP READ, Long Call, Long Reply, and the five in turn on one
//! connection), after a warm-up.
//!
//! What is counted, honestly:
//! * Counting is switched on only while a transport entry point runs (a thread-local flag set
//!   around each call), so building the inputs (the upper layer's XDR encoding and DDP pages)
//!   and dropping the handed-up chains are not counted — they are the upper layer's work.
//! * The software provider is wrapped in [`Uncounted`], which switches counting off while a
//!   `Provider` method runs: the provider plays the NIC and its own allocations (if any) are
//!   not the transport's. The event callbacks run inside `poll` and are counted (they only
//!   move the chains out, which allocates nothing).
//! * Chains the transport hands up are built by the transport, inside the window: their
//!   storage is counted.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::sync::Arc;

use krpc_rdma::provider::{
    Access, CmEvent, Completion, LocalFragment, Provider, ProviderError, RecvBufId, RegId,
    Registration, Resources, SendBufId, SendWr,
};
use krpc_rdma::soft::{pair, SoftConfig, SoftQp};
use krpc_rdma::transport::{
    DdpReply, Incoming, ReplySpec, Requester, RequesterEvent, Responder, ResponderEvent,
    ServerConnection, SharedPages, TransportConfig,
};
use mbuf::{Chain, HeapPageArena, Mbuf, PageProvider};

use tests::counting_alloc::{counting, installed, snapshot, Counting, ON};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A provider whose own work is not counted.
struct Uncounted(SoftQp);

impl Provider for Uncounted {
    fn resources(&self) -> Resources {
        counting(false, || self.0.resources())
    }
    fn send_buf(&mut self, buf: SendBufId) -> Result<&mut [u8], ProviderError> {
        let before = ON.with(|c| c.replace(false));
        let r = self.0.send_buf(buf);
        ON.with(|c| c.set(before));
        r
    }
    fn recv_buf(&self, buf: RecvBufId) -> Result<&[u8], ProviderError> {
        let before = ON.with(|c| c.replace(false));
        let r = self.0.recv_buf(buf);
        ON.with(|c| c.set(before));
        r
    }
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), ProviderError> {
        counting(false, || self.0.post_send(wrs))
    }
    fn post_recv(&mut self, bufs: &[RecvBufId]) -> Result<(), ProviderError> {
        counting(false, || self.0.post_recv(bufs))
    }
    fn poll_cq(&mut self, out: &mut [Completion]) -> usize {
        counting(false, || self.0.poll_cq(out))
    }
    fn register(
        &mut self,
        frags: &[LocalFragment],
        access: Access,
    ) -> Result<Registration, ProviderError> {
        counting(false, || self.0.register(frags, access))
    }
    fn release(&mut self, reg: RegId) -> Result<(), ProviderError> {
        counting(false, || self.0.release(reg))
    }
    fn poll_event(&mut self) -> Option<CmEvent> {
        counting(false, || self.0.poll_event())
    }
    fn disconnect(&mut self) {
        counting(false, || self.0.disconnect())
    }
}

struct Rig {
    req: Requester,
    resp: Responder,
    qa: Uncounted,
    qb: Uncounted,
    arena_a: Arc<HeapPageArena>,
    arena_b: Arc<HeapPageArena>,
    pa: Arc<dyn PageProvider>,
    pb: Arc<dyn PageProvider>,
}

fn rig() -> Rig {
    let arena_a = Arc::new(HeapPageArena::new(2048).unwrap());
    let arena_b = Arc::new(HeapPageArena::with_base(2048, 0x10_0000_0000).unwrap());
    let pa: Arc<dyn PageProvider> = arena_a.clone();
    let pb: Arc<dyn PageProvider> = arena_b.clone();
    let cfg = TransportConfig::default();
    let (sa, sb) = (SoftConfig::default(), SoftConfig::default());
    let req = Requester::new(cfg, sa.resources(), pa.clone()).unwrap();
    let resp = Responder::new(cfg, sb.resources(), pb.clone()).unwrap();
    let ca = SoftConfig {
        private_data: heapless::Vec::from_slice(&req.private_data()).unwrap(),
        ..sa
    };
    let cb = SoftConfig {
        private_data: heapless::Vec::from_slice(&resp.private_data()).unwrap(),
        ..sb
    };
    let (qa, qb) = pair(ca, pa.clone(), cb, pb.clone()).unwrap();
    let mut r = Rig {
        req,
        resp,
        qa: Uncounted(qa),
        qb: Uncounted(qb),
        arena_a,
        arena_b,
        pa,
        pb,
    };
    let mut up = (false, false);
    r.resp.poll(&mut r.qb, &mut |e| {
        up.1 |= matches!(e, ResponderEvent::Connected(_));
    });
    r.req.poll(&mut r.qa, &mut |e| {
        up.0 |= matches!(e, RequesterEvent::Connected(_));
    });
    assert_eq!(up, (true, true));
    r
}

/// One round trip, with counting on inside each transport entry point. Returns the call
/// handed up to the server and the reply handed up to the client (dropped by the caller,
/// outside the window).
fn round_trip(r: &mut Rig, call: Chain, spec: ReplySpec, reply: Chain) -> (Chain, Chain) {
    counting(true, || r.req.call(&mut r.qa, call, spec))
        .unwrap_or_else(|rej| panic!("call refused: {}", rej.error));
    let mut inc: Option<Incoming> = None;
    counting(true, || {
        r.resp.poll(&mut r.qb, &mut |e| {
            if let ResponderEvent::Call(c) = e {
                inc = Some(c);
            }
        })
    });
    let Incoming { call, ctx, .. } = inc.expect("call handed up in one poll");
    counting(true, || r.resp.reply(&mut r.qb, ctx, reply)).expect("reply posted");
    let mut got: Option<Chain> = None;
    let mut failed = None;
    counting(true, || {
        r.req.poll(&mut r.qa, &mut |e| match e {
            RequesterEvent::Reply { reply, .. } => got = Some(reply),
            RequesterEvent::Failed { error, .. } => failed = Some(error),
            _ => {}
        })
    });
    if let Some(e) = failed {
        panic!("call failed: {e}");
    }
    // Reap the reply's Send completion (frees the responder's reply pages).
    counting(true, || r.resp.poll(&mut r.qb, &mut |_| {}));
    (call, got.expect("reply handed up in one poll"))
}

const MIB: usize = 1 << 20;

fn xdr(xid: u32, body: &[u8]) -> Chain {
    let mut v = xid.to_be_bytes().to_vec();
    v.extend_from_slice(body);
    Chain::from_bytes(&v).unwrap()
}

fn locate_read(c: &Chain) -> Option<usize> {
    (c.len() >= 12).then_some(12)
}

#[derive(Debug, Clone, Copy)]
enum Workload {
    Small,
    DdpWrite,
    DdpRead,
    LongCall,
    LongReply,
}

/// The inputs of one round trip (built outside the counting window).
fn inputs(r: &Rig, w: Workload, xid: u32) -> (Chain, ReplySpec, Chain) {
    match w {
        Workload::Small => (
            xdr(xid, &[0x5a; 96]),
            ReplySpec::inline(256),
            xdr(xid, &[0xa5; 96]),
        ),
        Workload::DdpWrite => {
            let mut c = xdr(xid, &[0xaa; 8]);
            c.append(&(MIB as u32).to_be_bytes()).unwrap();
            c.append_mbuf(Mbuf::ddp_marker()).unwrap();
            c.cat(Chain::alloc_pages(&r.pa, MIB).unwrap()).unwrap();
            c.append(&[0xbb; 8]).unwrap();
            (c, ReplySpec::inline(256), xdr(xid, b"ok.."))
        }
        Workload::DdpRead => {
            let spec = ReplySpec {
                max_reply: MIB + 64,
                ddp: Some(DdpReply {
                    pages: Chain::alloc_pages(&r.pa, MIB).unwrap(),
                    locate: locate_read,
                }),
            };
            let mut rep = xdr(xid, &0u32.to_be_bytes());
            rep.append(&(MIB as u32).to_be_bytes()).unwrap();
            rep.append_mbuf(Mbuf::ddp_marker()).unwrap();
            rep.cat(Chain::alloc_pages(&r.pb, MIB).unwrap()).unwrap();
            rep.append(&[0xcc; 4]).unwrap();
            (xdr(xid, b"READ....args"), spec, rep)
        }
        // 6000 bytes: over the 1024-byte inline threshold, no DDP region.
        Workload::LongCall => (
            xdr(xid, &[0x11; 6000]),
            ReplySpec::inline(256),
            xdr(xid, b"ok.."),
        ),
        // 12000 bytes of reply through the reply chunk.
        Workload::LongReply => (
            xdr(xid, b"args"),
            ReplySpec::inline(20_000),
            xdr(xid, &[0x22; 12_000]),
        ),
    }
}

const ALL: [Workload; 5] = [
    Workload::Small,
    Workload::DdpWrite,
    Workload::DdpRead,
    Workload::LongCall,
    Workload::LongReply,
];

/// Allocations (count, bytes) the transport makes over `n` round trips of `w` (or, for
/// `None`, of the five workloads in turn on one connection), after a warm-up of 100.
fn measure(w: Option<Workload>, n: u32) -> (u64, u64) {
    let mut r = rig();
    let mut xid = 0u32;
    let mut run = |r: &mut Rig, k: u32| {
        for _ in 0..k {
            xid += 1;
            let kind = w.unwrap_or(ALL[xid as usize % ALL.len()]);
            let (call, spec, reply) = inputs(r, kind, xid);
            let out = round_trip(r, call, spec, reply);
            assert!(!out.1.is_empty());
            drop(out);
        }
    };
    run(&mut r, 100);
    assert!(
        installed(),
        "the counting allocator is not the global allocator"
    );
    let before = snapshot();
    run(&mut r, n);
    let after = snapshot();
    assert_eq!(r.req.outstanding(), 0);
    drop(r.req);
    drop(r.resp);
    drop(r.qa);
    drop(r.qb);
    drop((r.pa, r.pb));
    assert_eq!(r.arena_a.in_use(), 0, "{w:?}: requester pages leaked");
    assert_eq!(r.arena_b.in_use(), 0, "{w:?}: responder pages leaked");
    (after.0 - before.0, after.1 - before.1)
}

#[test]
fn steady_state_round_trips_allocate_nothing_in_the_transport() {
    let n = 10_000;
    let mut report = Vec::new();
    for w in ALL.map(Some).into_iter().chain([None]) {
        let (count, bytes) = measure(w, n);
        let w = w.map_or_else(|| "all five in turn".to_string(), |w| format!("{w:?}"));
        println!(
            "{w}: {count} allocations ({bytes} bytes) in {n} round trips: {:.2} per RPC",
            count as f64 / f64::from(n)
        );
        report.push((w, count));
    }
    for (w, count) in report {
        assert_eq!(
            count, 0,
            "{w}: the transport allocated {count} times in {n} round trips"
        );
    }
}

/// [`round_trip`] with the server side through a `ServerConnection` (the loop every server
/// runs): poll, next call, reply, poll again for the Send completion.
fn round_trip_conn(
    r: &mut Rig,
    conn: &mut ServerConnection,
    call: Chain,
    spec: ReplySpec,
    reply: Chain,
) -> (Chain, Chain) {
    counting(true, || r.req.call(&mut r.qa, call, spec))
        .unwrap_or_else(|rej| panic!("call refused: {}", rej.error));
    counting(true, || conn.poll(&mut r.qb));
    let Incoming { call, ctx, .. } =
        counting(true, || conn.next_call()).expect("call handed out in one poll");
    counting(true, || conn.reply(&mut r.qb, ctx, reply)).expect("reply posted");
    let mut got: Option<Chain> = None;
    counting(true, || {
        r.req.poll(&mut r.qa, &mut |e| {
            if let RequesterEvent::Reply { reply, .. } = e {
                got = Some(reply);
            }
        })
    });
    counting(true, || conn.poll(&mut r.qb));
    (call, got.expect("reply handed up in one poll"))
}

/// The reply data of `inputs`' READ-like call: 1 MiB (its body starts with `READ`).
fn read_reply_bytes(c: &Chain) -> usize {
    let mut b = [0u8; 4];
    if c.copydata(4, &mut b).is_ok() && &b == b"READ" {
        MIB
    } else {
        0
    }
}

#[test]
fn steady_state_through_a_server_connection_allocates_nothing() {
    // The five workloads in turn, the server a ServerConnection whose READ-like calls have
    // their reply pages admitted by a shared page budget first (take_reply_pages).
    let mut r = rig();
    let placeholder = Responder::new(
        TransportConfig::default(),
        SoftConfig::default().resources(),
        r.pb.clone(),
    )
    .unwrap();
    let resp = std::mem::replace(&mut r.resp, placeholder);
    let shared = SharedPages::new(64 * MIB);
    let mut conn = ServerConnection::new(Box::new(resp))
        .unwrap()
        .with_reply_bytes(Box::new(read_reply_bytes));
    conn.responder_mut().set_page_share(shared.join());
    let mut xid = 0u32;
    let mut run = |r: &mut Rig, conn: &mut ServerConnection, k: u32| {
        for _ in 0..k {
            xid += 1;
            let (call, spec, reply) = inputs(r, ALL[xid as usize % ALL.len()], xid);
            let out = round_trip_conn(r, conn, call, spec, reply);
            assert!(!out.1.is_empty());
        }
    };
    run(&mut r, &mut conn, 100);
    let n = 5_000;
    assert!(
        installed(),
        "the counting allocator is not the global allocator"
    );
    let before = snapshot();
    run(&mut r, &mut conn, n);
    let (count, bytes) = (snapshot().0 - before.0, snapshot().1 - before.1);
    println!("server connection: {count} allocations ({bytes} bytes) in {n} round trips");
    assert_eq!(count, 0, "allocated {count} times in {n} round trips");
    let s = *conn.stats();
    assert_eq!(
        (s.calls, s.replies, s.reply_errors),
        (u64::from(n) + 100, u64::from(n) + 100, 0)
    );
    // Every READ's pages were charged and came back.
    assert!(shared.peak() >= MIB);
    assert_eq!(shared.in_use(), 0);
    drop(conn);
    drop(r.req);
    drop((r.qa, r.qb, r.pa, r.pb, r.resp));
    assert_eq!(r.arena_b.in_use(), 0, "responder pages leaked");
}
