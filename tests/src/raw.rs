//! A raw peer: side A of a [`Rig`] driven by hand, sending hand-made RPC-over-RDMA messages
//! to the Responder and collecting what comes back (tests of refusals and RFC conformance).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use krpc_rdma::provider::{Access, Provider, RegId};
use krpc_rdma::soft::SoftConfig;
use krpc_rdma::transport::{Incoming, TransportConfig};
use krpc_rdma::wire::{Body, ChunkLists, ErrorBody, HeaderRepr, Segment};
use mbuf::{Chain, PageFragment};

use crate::rig::{pages_with, raw_send, rig_opts, Rig, RigOpts, Soft};
use krpc_rdma_scenarios::raw::poll_round;
pub use krpc_rdma_scenarios::raw::words;

/// The rig, with the requester's queue pair driven by hand (the `Requester` stays idle).
pub struct Hostile {
    pub r: Rig,
    /// Calls handed up and not yet answered.
    pub held: Vec<Incoming>,
    pub lost: bool,
}

pub const RAW_SEND_BUF: u32 = 0;

impl Hostile {
    pub fn new(resp_cfg: TransportConfig) -> Self {
        Hostile::with(RigOpts {
            resp_cfg,
            ..RigOpts::default()
        })
    }

    pub fn with(opts: RigOpts) -> Self {
        let mut r = rig_opts(opts);
        // Every receive buffer of side A posted, so every answer lands.
        for b in 0..SoftConfig::default().resources.recv_bufs {
            let _ = r.qa.post_recv(&[b]);
        }
        Hostile {
            r,
            held: Vec::new(),
            lost: false,
        }
    }

    /// Send `msg` from side A, let the responder work, and return what came back.
    pub fn exchange(&mut self, msg: &[u8]) -> Vec<Vec<u8>> {
        self.send(msg);
        self.settle()
    }

    pub fn send(&mut self, msg: &[u8]) {
        raw_send(&mut self.r.qa, RAW_SEND_BUF, msg);
    }

    /// Poll the responder until quiet; collect handed-up calls and side A's received messages.
    pub fn settle(&mut self) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        for _ in 0..100 {
            let r = &mut self.r;
            let (progress, _) = poll_round(
                &mut r.resp,
                &mut r.qa,
                &mut r.qb,
                &mut self.held,
                &mut self.lost,
                &mut got,
            )
            .unwrap();
            if !progress {
                break;
            }
        }
        got
    }

    /// Answer every held call with a short inline reply.
    pub fn answer_all(&mut self) -> Vec<Vec<u8>> {
        for c in std::mem::take(&mut self.held) {
            let reply = Chain::from_bytes(&c.xid.to_be_bytes()).unwrap();
            self.r.resp.reply(&mut self.r.qb, c.ctx, reply).unwrap();
        }
        self.settle()
    }
}

/// The RDMA_ERROR in `ans`: (xid, vers, credit, body).
pub fn error_of(ans: &[u8]) -> (u32, u32, u32, ErrorBody) {
    krpc_rdma_scenarios::raw::error_of(ans).unwrap_or_else(|e| panic!("{e}"))
}

/// A call header with these chunks and inline payload.
pub fn call(xid: u32, lists: ChunkLists, payload: &[u8]) -> Vec<u8> {
    let h = HeaderRepr::new(xid, 8, Body::Msg(lists));
    let mut v = vec![0u8; h.buffer_len()];
    h.emit(&mut v).unwrap();
    v.extend_from_slice(payload);
    v
}

pub fn read_chunk(position: u32, segs: &[Segment]) -> ChunkLists {
    krpc_rdma_scenarios::raw::read_chunk(position, segs)
        .map(krpc_rdma_scenarios::heap::Boxed::into_inner)
        .unwrap_or_else(|e| panic!("{e}"))
}

pub fn seg(handle: u32, length: u32, offset: u64) -> Segment {
    Segment {
        handle,
        length,
        offset,
    }
}

/// Register `data` in side A's pages for remote read; the segments to put in a read chunk.
pub fn exposed(h: &mut Hostile, data: &[u8]) -> (Chain, RegId, Vec<Segment>) {
    let src = pages_with(&h.r.pa, data);
    let frags: Vec<PageFragment> = src.page_fragments_in(0..data.len()).unwrap().collect();
    let reg = h.r.qa.register(&frags, Access::REMOTE_READ).unwrap();
    let segs = reg
        .segments
        .iter()
        .map(|s| seg(s.handle, s.length, s.offset))
        .collect();
    (src, reg.id, segs)
}

/// The requester's handles of its last call, read back from its send buffers.
pub fn advertised_handles<A: Soft, B>(r: &mut Rig<A, B>, xid: u32) -> Vec<(u32, u64, bool)> {
    krpc_rdma_scenarios::raw::advertised_handles(r.qa.soft_mut(), xid)
}
