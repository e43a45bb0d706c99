//! A hostile or careless requester against the Responder, over raw Sends on the software
//! provider: every message is answered (a reply or `RDMA_ERROR`), discarded where RFC 8166
//! says so, or the connection is closed — never a silent drop, never a panic, and the pages
//! held stay within the configured DDP budget.

use krpc_rdma::provider::Resources;
use krpc_rdma::provider::{Access, Provider};
use krpc_rdma::soft::SoftConfig;
use krpc_rdma::transport::TransportConfig;
use krpc_rdma::wire::{ChunkLists, ErrorBody, WriteChunk};
use mbuf::Chain;
use tests::raw::{call, error_of, exposed, read_chunk, seg, words, Hostile};
use tests::rig::{self, pattern, RigOpts};

/// A flood of refusals with two send buffers: the RDMA_ERRORs that do not fit wait for a
/// buffer and all go out, in order; with the bounded queue overrun the connection is closed
/// (RFC 8166 §4.5.4), never an error silently skipped.
#[test]
fn refusals_wait_for_send_buffers_then_the_connection_closes_when_they_cannot() {
    let opts = |send_bufs| RigOpts {
        soft_b: SoftConfig::with(Resources {
            send_bufs,
            ..Resources::default()
        }),
        ..RigOpts::default()
    };
    // Twelve refusals posted before the responder polls once: two go at once, ten wait.
    let mut h = Hostile::with(opts(2));
    for xid in 0..12u32 {
        let mut m = words(500 + xid, 1, 2); // RDMA_MSGP
        m.extend_from_slice(&[0; 12]);
        h.send(&m);
    }
    let ans = h.settle();
    let xids: Vec<u32> = ans.iter().map(|a| error_of(a).0).collect();
    assert_eq!(
        xids,
        (500..512).collect::<Vec<_>>(),
        "all answered, in order"
    );
    assert_eq!(h.r.resp.deferred_errors(), 0);
    assert!(h.r.resp.counters().resource_stalls > 0, "some had to wait");
    assert!(!h.lost);

    // One buffer and a burst larger than the queue of owed errors: closed, and said so.
    let mut h = Hostile::with(opts(1));
    for xid in 0..40u32 {
        let mut m = words(600 + xid, 1, 2);
        m.extend_from_slice(&[0; 12]);
        h.send(&m);
    }
    h.settle();
    assert!(h.lost, "the responder reports the connection gone");
    assert_eq!(h.r.resp.counters().closes, 1);
    assert!(!h.r.qa.is_connected());
}

/// A call whose RDMA Read finds the send queue full of Sends (here an RDMA_ERROR) and gets
/// `Busy` with no Read in flight: the Send's completion restarts it (it used to wait for the
/// next incoming message, forever if none came).
#[test]
fn a_read_stalled_on_a_full_send_queue_resumes_when_a_send_completes() {
    let mut h = Hostile::with(RigOpts {
        soft_b: SoftConfig::with(Resources {
            max_send_wr: 1,
            ..Resources::default()
        }),
        ..RigOpts::default()
    });
    let data = pattern(8192, 9);
    let (src, reg, segs) = exposed(&mut h, &data);
    // Both arrive before the responder polls: the refusal's Send takes the only send-queue
    // slot, then the WRITE's Read finds it taken.
    let mut bad = words(1, 1, 2);
    bad.extend_from_slice(&[0; 12]);
    h.send(&bad);
    h.send(&call(2, read_chunk(4, &segs), &[0, 0, 0, 2]));
    let ans = h.settle();
    assert_eq!(ans.len(), 1);
    assert_eq!(error_of(&ans[0]).0, 1);
    assert_eq!(h.held.len(), 1, "the WRITE was read and handed up");
    assert_eq!(h.held[0].call.to_vec().unwrap()[4..], data[..]);
    assert_eq!(h.answer_all().len(), 1);
    h.r.qa.release(reg).unwrap();
    drop(src);
}

/// No pages for a read chunk (the responder's arena is exhausted): the call can be neither
/// taken nor honestly refused, so the connection is closed (RFC 8166 §4.5.4) — not dropped.
#[test]
fn no_pages_for_a_read_chunk_closes_the_connection() {
    let mut h = Hostile::new(TransportConfig::default());
    // Everything but 16 of the responder's 4096 pages is taken elsewhere.
    let hog = Chain::alloc_pages(&h.r.pb, (4096 - 16) * mbuf::PAGE_SIZE).unwrap();
    let data = pattern(128 * 1024, 1);
    let (_src, _reg, segs) = exposed(&mut h, &data);
    assert!(h
        .exchange(&call(5, read_chunk(4, &segs), &[0, 0, 0, 5]))
        .is_empty());
    assert!(h.lost);
    assert!(h.held.is_empty());
    assert_eq!(h.r.resp.counters().closes, 1);
    drop(hog);
    assert_eq!(h.r.arena_b.in_use(), 0, "pages of the failed call returned");
}

/// A reply that cannot be built (its DDP region sits at an unaligned XDR position, so it
/// cannot go into the write chunk) consumes the context and answers ERR_CHUNK, so the
/// requester is not left waiting.
#[test]
fn a_reply_that_cannot_be_built_is_answered_with_err_chunk() {
    let mut h = Hostile::new(TransportConfig::default());
    let mut l = ChunkLists::new();
    l.write_list
        .push(WriteChunk::from_slice(&[seg(3, 8192, 0x1000)]).unwrap())
        .unwrap();
    assert!(h.exchange(&call(77, l, b"read")).is_empty());
    let c = h.held.pop().unwrap();
    let mut reply = Chain::from_bytes(&[0, 0, 0, 77, 1]).unwrap();
    reply.append_mbuf(mbuf::Mbuf::ddp_marker()).unwrap();
    reply.cat(rig::pages_with(&h.r.pb, &[7; 100])).unwrap();
    let e = h.r.resp.reply(&mut h.r.qb, c.ctx, reply).unwrap_err();
    assert!(
        matches!(
            e,
            krpc_rdma::transport::ReplyError::Failed(
                krpc_rdma::transport::CallError::UnalignedPosition
            )
        ),
        "{e:?}"
    );
    let ans = h.settle();
    assert_eq!(ans.len(), 1);
    assert_eq!(error_of(&ans[0]).0, 77);
    assert_eq!(error_of(&ans[0]).3, ErrorBody::Chunk);
}

/// The software provider, except that it refuses every RDMA Read post with `BadId`: an error
/// that, unlike `Busy`, no completion will clear.
struct RefuseReads<'a>(&'a mut krpc_rdma::soft::SoftQp);

impl Provider for RefuseReads<'_> {
    fn resources(&self) -> krpc_rdma::provider::Resources {
        self.0.resources()
    }
    fn send_buf(&mut self, b: u32) -> Result<&mut [u8], krpc_rdma::provider::ProviderError> {
        self.0.send_buf(b)
    }
    fn recv_buf(&self, b: u32) -> Result<&[u8], krpc_rdma::provider::ProviderError> {
        self.0.recv_buf(b)
    }
    fn post_send(
        &mut self,
        wrs: &[krpc_rdma::provider::SendWr<'_>],
    ) -> Result<(), krpc_rdma::provider::ProviderError> {
        if wrs
            .iter()
            .any(|w| matches!(w.op, krpc_rdma::provider::SendOp::RdmaRead { .. }))
        {
            return Err(krpc_rdma::provider::ProviderError::BadId);
        }
        self.0.post_send(wrs)
    }
    fn post_recv(&mut self, b: &[u32]) -> Result<(), krpc_rdma::provider::ProviderError> {
        self.0.post_recv(b)
    }
    fn poll_cq(&mut self, out: &mut [krpc_rdma::provider::Completion]) -> usize {
        self.0.poll_cq(out)
    }
    fn register(
        &mut self,
        f: &[krpc_rdma::provider::LocalFragment],
        a: Access,
    ) -> Result<krpc_rdma::provider::Registration, krpc_rdma::provider::ProviderError> {
        self.0.register(f, a)
    }
    fn release(
        &mut self,
        r: krpc_rdma::provider::RegId,
    ) -> Result<(), krpc_rdma::provider::ProviderError> {
        self.0.release(r)
    }
    fn poll_event(&mut self) -> Option<krpc_rdma::provider::CmEvent> {
        self.0.poll_event()
    }
    fn disconnect(&mut self) {
        Provider::disconnect(self.0);
    }
}

/// An RDMA Read the provider refuses for good (not `Busy`) closes the connection; the call
/// used to wait for a completion that would never come.
#[test]
fn a_read_the_provider_refuses_for_good_closes_the_connection() {
    let mut h = Hostile::new(TransportConfig::default());
    let data = pattern(8192, 2);
    let (src, reg, segs) = exposed(&mut h, &data);
    h.send(&call(4, read_chunk(4, &segs), &[0, 0, 0, 4]));
    let mut lost = false;
    let mut handed = 0;
    for _ in 0..4 {
        h.r.resp
            .poll(&mut RefuseReads(&mut h.r.qb), &mut |e| match e {
                krpc_rdma::transport::ResponderEvent::ConnectionLost => lost = true,
                krpc_rdma::transport::ResponderEvent::Call(_) => handed += 1,
                krpc_rdma::transport::ResponderEvent::Connected(_)
                | krpc_rdma::transport::ResponderEvent::ReverseReply { .. }
                | krpc_rdma::transport::ResponderEvent::ReverseFailed { .. } => {}
            });
    }
    assert_eq!(handed, 0);
    assert!(lost, "the responder reports the connection gone");
    assert_eq!(h.r.resp.counters().closes, 1);
    assert!(!h.r.qb.is_connected());
    let _ = h.r.qa.release(reg);
    drop(src);
}
