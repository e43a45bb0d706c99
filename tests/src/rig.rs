//! The soft rig of the transport tests (`tests/tests/`, `nfs-service`'s `nfsd_transport`),
//! the transport bench (`tests/benches/transport.rs`) and the fuzz targets: a requester and
//! a responder connected through the software RC provider, plus the XDR-ish chain builders
//! the bench uses. (The message
//! builders of the tests are `krpc_rdma_scenarios::data`'s.)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::sync::Arc;

use krpc_rdma::provider::Provider;
use krpc_rdma::soft::{pair, FaultConfig, FaultInjector, SoftConfig, SoftQp};
use krpc_rdma::transport::{
    Incoming, Requester, RequesterEvent, Responder, ResponderEvent, TransportConfig,
};
use mbuf::{Chain, HeapPageArena, Mbuf, PageProvider};

/// Base address of the responder's arena (distinct from the requester's, so a page address
/// of one side is never valid at the other).
pub const ARENA_B_BASE: u64 = 0x10_0000_0000;

/// A connected requester (side A) and responder (side B). `A`/`B` are the providers: the
/// plain [`SoftQp`]s, or [`FaultInjector`]s around them.
pub struct Rig<A = SoftQp, B = SoftQp> {
    pub req: Requester,
    pub resp: Responder,
    pub qa: A,
    pub qb: B,
    pub arena_a: Arc<HeapPageArena>,
    pub arena_b: Arc<HeapPageArena>,
    pub pa: Arc<dyn PageProvider>,
    pub pb: Arc<dyn PageProvider>,
}

/// Access to the software queue pair under a (possibly wrapped) provider.
pub trait Soft: Provider {
    fn soft(&self) -> &SoftQp;
    fn soft_mut(&mut self) -> &mut SoftQp;
}

impl Soft for SoftQp {
    fn soft(&self) -> &SoftQp {
        self
    }
    fn soft_mut(&mut self) -> &mut SoftQp {
        self
    }
}

impl Soft for FaultInjector<SoftQp> {
    fn soft(&self) -> &SoftQp {
        self.inner()
    }
    fn soft_mut(&mut self) -> &mut SoftQp {
        self.inner_mut()
    }
}

/// Everything that can be chosen when building a [`Rig`].
#[derive(Debug, Clone)]
pub struct RigOpts {
    pub req_cfg: TransportConfig,
    pub resp_cfg: TransportConfig,
    pub soft_a: SoftConfig,
    pub soft_b: SoftConfig,
    /// Pages per arena.
    pub pages: usize,
}

impl Default for RigOpts {
    fn default() -> Self {
        RigOpts {
            req_cfg: TransportConfig::default(),
            resp_cfg: TransportConfig::default(),
            soft_a: SoftConfig::default(),
            soft_b: SoftConfig::default(),
            pages: 4096,
        }
    }
}

pub fn rig_opts(o: RigOpts) -> Rig {
    let arena_a = Arc::new(HeapPageArena::new(o.pages).unwrap());
    let arena_b = Arc::new(HeapPageArena::with_base(o.pages, ARENA_B_BASE).unwrap());
    rig_on(arena_a, arena_b, o)
}

/// A new connection (requester, responder, queue pair) over existing arenas: what a
/// reconnect makes, the pages of the calls kept for retransmission staying where they are.
pub fn rig_on(arena_a: Arc<HeapPageArena>, arena_b: Arc<HeapPageArena>, o: RigOpts) -> Rig {
    let pa: Arc<dyn PageProvider> = arena_a.clone();
    let pb: Arc<dyn PageProvider> = arena_b.clone();
    let req = Requester::new(o.req_cfg, o.soft_a.resources(), pa.clone()).unwrap();
    let resp = Responder::new(o.resp_cfg, o.soft_b.resources(), pb.clone()).unwrap();
    let ca = SoftConfig {
        private_data: heapless::Vec::from_slice(&req.private_data()).unwrap(),
        ..o.soft_a
    };
    let cb = SoftConfig {
        private_data: heapless::Vec::from_slice(&resp.private_data()).unwrap(),
        ..o.soft_b
    };
    let (qa, qb) = pair(ca, pa.clone(), cb, pb.clone()).unwrap();
    let mut r = Rig {
        req,
        resp,
        qa,
        qb,
        arena_a,
        arena_b,
        pa,
        pb,
    };
    let (ev_a, ev_b) = r.poll_once();
    assert!(matches!(ev_a.first(), Some(RequesterEvent::Connected(_))));
    assert!(matches!(ev_b.first(), Some(ResponderEvent::Connected(_))));
    r
}

pub fn rig_with(cfg: TransportConfig) -> Rig {
    rig_opts(RigOpts {
        req_cfg: cfg,
        resp_cfg: cfg,
        ..RigOpts::default()
    })
}

pub fn rig() -> Rig {
    rig_with(TransportConfig::default())
}

impl Rig {
    /// Wrap both (connected) queue pairs in fault injectors.
    pub fn with_faults(
        self,
        fa: FaultConfig,
        fb: FaultConfig,
    ) -> Rig<FaultInjector<SoftQp>, FaultInjector<SoftQp>> {
        Rig {
            req: self.req,
            resp: self.resp,
            qa: FaultInjector::new(self.qa, fa),
            qb: FaultInjector::new(self.qb, fb),
            arena_a: self.arena_a,
            arena_b: self.arena_b,
            pa: self.pa,
            pb: self.pb,
        }
    }
}

impl<A: Provider, B: Provider> Rig<A, B> {
    pub fn poll_once(&mut self) -> (Vec<RequesterEvent>, Vec<ResponderEvent>) {
        let mut eb = Vec::new();
        self.resp.poll(&mut self.qb, &mut |e| eb.push(e));
        let mut ea = Vec::new();
        self.req.poll(&mut self.qa, &mut |e| ea.push(e));
        (ea, eb)
    }

    /// Run until quiet; answer every call with `server`.
    pub fn run(&mut self, server: &mut dyn FnMut(&Incoming) -> Chain) -> Vec<RequesterEvent> {
        let mut out = Vec::new();
        for _ in 0..1000 {
            let mut calls = Vec::new();
            self.resp.poll(&mut self.qb, &mut |e| {
                if let ResponderEvent::Call(c) = e {
                    calls.push(c)
                }
            });
            let quiet = calls.is_empty();
            for c in calls {
                let reply = server(&c);
                self.resp.reply(&mut self.qb, c.ctx, reply).unwrap();
            }
            let before = out.len();
            self.req.poll(&mut self.qa, &mut |e| out.push(e));
            if quiet && out.len() == before && self.req.outstanding() == 0 {
                let mut more = Vec::new();
                self.resp.poll(&mut self.qb, &mut |e| more.push(e));
                if more.is_empty() {
                    break;
                }
            }
        }
        out
    }
}

/// Post `msg` as one signaled Send from send buffer `buf` of `q`: a peer speaking raw bytes.
pub fn raw_send<P: Provider>(q: &mut P, buf: u32, msg: &[u8]) {
    try_raw_send(q, buf, msg).unwrap();
}

/// [`raw_send`] that reports a refusal (no such buffer, message too long, connection gone).
pub fn try_raw_send<P: Provider>(
    q: &mut P,
    buf: u32,
    msg: &[u8],
) -> Result<(), krpc_rdma::provider::ProviderError> {
    q.send_buf(buf)?
        .get_mut(..msg.len())
        .ok_or(krpc_rdma::provider::ProviderError::BadId)?
        .copy_from_slice(msg);
    q.post_send(&[krpc_rdma::provider::SendWr {
        wr_id: 999,
        op: krpc_rdma::provider::SendOp::Send {
            buf,
            len: msg.len() as u32,
            invalidate: None,
        },
        signaled: true,
    }])
}

pub fn xdr_call(xid: u32, body: &[u8]) -> Chain {
    let mut v = xid.to_be_bytes().to_vec();
    v.extend_from_slice(body);
    Chain::from_bytes(&v).unwrap()
}

pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Page mbufs holding `data`.
pub fn pages_with(p: &Arc<dyn PageProvider>, data: &[u8]) -> Chain {
    let mut c = Chain::alloc_pages(p, data.len()).unwrap();
    fill_pages(p, &c, data);
    let _ = &mut c;
    c
}

/// Copy `data` into the page mbufs of `c` (which must be page data only, `data.len()` long).
pub fn fill_pages(p: &Arc<dyn PageProvider>, c: &Chain, data: &[u8]) {
    let mut off = 0;
    let addrs: Vec<(u64, usize, usize)> = c
        .fragments()
        .map(|f| match f {
            mbuf::Fragment::Page { addr, offset, len } => (addr, offset, len),
            mbuf::Fragment::Bytes(_) => panic!(),
        })
        .collect();
    for (addr, o, l) in addrs {
        p.with_page_mut(addr, &mut |pg| {
            pg[o..o + l].copy_from_slice(&data[off..off + l])
        })
        .unwrap();
        off += l;
    }
}

/// An NFS-WRITE-like call: xid, 8 bytes of args, length word, marker, pages, pad, 8-byte tail.
pub fn write_call(p: &Arc<dyn PageProvider>, xid: u32, data: &[u8]) -> Chain {
    let mut c = xdr_call(xid, &[0xaa; 8]);
    c.append(&(data.len() as u32).to_be_bytes()).unwrap();
    if !data.is_empty() {
        c.append_mbuf(Mbuf::ddp_marker()).unwrap();
        c.cat(pages_with(p, data)).unwrap();
    }
    let pad = (4 - data.len() % 4) % 4;
    let mut tail = vec![0u8; pad];
    tail.extend_from_slice(&[0xbb; 8]);
    c.append(&tail).unwrap();
    c
}

pub fn reply_for(xid: u32, body: &[u8]) -> Chain {
    xdr_call(xid, body)
}

pub fn take_reply(ev: Vec<RequesterEvent>, xid: u32) -> Chain {
    for e in ev {
        match e {
            RequesterEvent::Reply { xid: x, reply } if x == xid => return reply,
            RequesterEvent::Failed { error, .. } => panic!("call failed: {error}"),
            _ => {}
        }
    }
    panic!("no reply for {xid:#x}")
}

pub fn assert_clean<A: Soft, B: Soft>(r: &Rig<A, B>) {
    assert_eq!(
        r.qa.soft().live_registrations(),
        0,
        "requester registrations left"
    );
    assert_eq!(
        r.qb.soft().live_registrations(),
        0,
        "responder registrations left"
    );
}

/// Drop every endpoint and check that both arenas got all their pages back.
pub fn teardown<A, B>(r: Rig<A, B>) {
    drop((r.req, r.resp, r.qa, r.qb, r.pa, r.pb));
    let (arena_a, arena_b) = (r.arena_a, r.arena_b);
    assert_eq!(arena_a.in_use(), 0, "requester arena pages leaked");
    assert_eq!(arena_b.in_use(), 0, "responder arena pages leaked");
    assert_eq!(arena_a.bad_unrefs(), 0, "requester arena bad unrefs");
    assert_eq!(arena_b.bad_unrefs(), 0, "responder arena bad unrefs");
}
