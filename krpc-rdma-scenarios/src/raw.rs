//! A raw peer: side A of a [`Pair`] driven by hand (its `Requester` stays idle), sending
//! hand-made RPC-over-RDMA messages to the Responder and collecting what comes back.

use alloc::format;
use alloc::vec::Vec;

use krpc_rdma::provider::{Access, Completion, Provider, RegId, WcKind, WcStatus};
use krpc_rdma::transport::{Incoming, Responder, ResponderEvent, TransportConfig};
use krpc_rdma::wire::{
    ChunkLists, ErrorBody, Header, HeaderEncoder, Proc, ReadSegment, Segment, FIXED_HEADER_LEN,
};
use mbuf::{Chain, PageFragment};

use crate::check::{fail, At, Failure};
use crate::fixture::{Fixture, Setup};
use crate::heap::{chunk_lists, try_boxed, Boxed};
use crate::pair::{send_raw, Pair};

/// The work-request id of the raw Sends.
pub const RAW_WR: u64 = 0x7a57_0000_0001;

/// Rounds without progress after which a raw exchange is taken as answered in full.
const QUIET: u32 = 2;

/// The raw peer.
pub struct RawPeer<'f, F: Fixture> {
    /// The pair (its requester idle).
    pub p: Pair<'f, F>,
    /// Calls handed up and not yet answered.
    pub held: Vec<Incoming>,
    /// The responder reported the connection lost.
    pub lost: bool,
}

impl<'f, F: Fixture> RawPeer<'f, F> {
    /// A pair whose responder has `resp_cfg`; every receive buffer of side A posted.
    ///
    /// # Errors
    /// As [`Pair::new`].
    #[inline(never)]
    pub fn new(fx: &'f mut F, resp_cfg: TransportConfig) -> Result<Self, Failure> {
        let setup = Setup {
            resp: resp_cfg,
            ..Setup::default()
        };
        RawPeer::with(fx, &setup)
    }

    /// A pair made as `setup` says (side A advertises `setup.req`'s private data); every
    /// receive buffer of side A posted.
    ///
    /// # Errors
    /// As [`Pair::new`].
    #[inline(never)]
    pub fn with(fx: &'f mut F, setup: &Setup) -> Result<Self, Failure> {
        let mut p = Pair::new(fx, setup)?;
        let n = p.l.a.resources().recv_bufs;
        for b in 0..n {
            p.l.a.post_recv(&[b]).at("raw peer: post receives")?;
        }
        Ok(RawPeer {
            p,
            held: Vec::new(),
            lost: false,
        })
    }

    /// Send `msg` from side A, let the responder work, and return the messages side A got.
    ///
    /// # Errors
    /// The Send was refused or failed, or nothing settled.
    #[inline(never)]
    pub fn exchange(&mut self, msg: &[u8]) -> Result<Vec<Vec<u8>>, Failure> {
        send_raw(&mut self.p.l.a, RAW_WR, 0, msg).at("raw send")?;
        self.settle(true)
    }

    /// Poll until quiet (and, with `sent`, until the raw Send completed): collect handed-up
    /// calls and side A's received messages.
    ///
    /// # Errors
    /// The raw Send failed, or no progress.
    #[inline(never)]
    pub fn settle(&mut self, mut sent: bool) -> Result<Vec<Vec<u8>>, Failure> {
        let mut got = Vec::new();
        let (mut quiet, mut idle) = (0, 0);
        loop {
            let progress = match poll_round(
                &mut self.p.resp,
                &mut self.p.l.a,
                &mut self.p.l.b,
                &mut self.held,
                &mut self.lost,
                &mut got,
            )? {
                (progress, Some(WcStatus::Success)) => {
                    sent = false;
                    progress
                }
                (_, Some(s)) => return Err(fail("raw send", "Success", format!("{s:?}"))),
                (progress, None) => progress,
            };
            if progress {
                quiet = 0;
            } else if !sent {
                quiet += 1;
                if quiet > QUIET {
                    return Ok(got);
                }
            }
            self.p.l.idle(&mut idle, progress, "raw peer: settle")?;
        }
    }

    /// The credit an answer to one message carries: the responder's grant with every receive
    /// posted but the one the message consumed.
    pub fn answer_grant(&self) -> u32 {
        let recv = self.p.l.b.resources().recv_bufs.saturating_sub(1);
        self.p.resp.grant().min(recv).max(1)
    }

    /// `data` in fresh pages of side A, registered for remote read: the pages, the
    /// registration and its segments (for a read chunk).
    ///
    /// # Errors
    /// No pages, or the registration failed.
    #[inline(never)]
    pub fn exposed(&mut self, data: &[u8]) -> Result<(Chain, RegId, Vec<Segment>), Failure> {
        let src = crate::data::pages_with(&self.p.l.pa, data).at("exposed: pages")?;
        let frags: Vec<PageFragment> = src
            .page_fragments_in(0..data.len())
            .at("exposed: fragments")?
            .collect();
        let a = &mut self.p.l.a;
        let reg = try_boxed("exposed: register", || {
            a.register(&frags, Access::REMOTE_READ)
        })?;
        let segs = reg
            .segments
            .iter()
            .map(|s| seg(s.handle, s.length, s.offset))
            .collect();
        Ok((src, reg.id, segs))
    }

    /// Answer every held call with a 4-byte reply (its XID).
    ///
    /// # Errors
    /// A reply was refused.
    #[inline(never)]
    pub fn answer_all(&mut self) -> Result<Vec<Vec<u8>>, Failure> {
        for c in core::mem::take(&mut self.held) {
            let reply = mbuf::Chain::from_bytes(&c.xid.to_be_bytes()).at("reply chain")?;
            self.p
                .resp
                .reply(&mut self.p.l.b, c.ctx, reply)
                .map_err(|e| fail("answer held call", "sent", format!("{e:?}")))?;
        }
        self.settle(false)
    }
}

/// One round of a raw peer on side `a` facing the responder `resp` on side `b`: poll the
/// responder (calls handed up go to `held`, a connection loss sets `lost`), then side A's
/// completions (each message received goes to `got`, its buffer posted again). Returns
/// whether anything moved, and the status of the raw Send ([`RAW_WR`]) if it completed.
///
/// # Errors
/// A receive buffer could not be read.
#[inline(never)]
pub fn poll_round<A: Provider, B: Provider>(
    resp: &mut Responder,
    a: &mut A,
    b: &mut B,
    held: &mut Vec<Incoming>,
    lost: &mut bool,
    got: &mut Vec<Vec<u8>>,
) -> Result<(bool, Option<WcStatus>), Failure> {
    let mut progress = false;
    resp.poll(b, &mut |e| {
        progress = true;
        match e {
            ResponderEvent::Call(c) => held.push(c),
            ResponderEvent::ConnectionLost => *lost = true,
            // The raw peer's scripts send no reverse call to answer.
            ResponderEvent::Connected(_)
            | ResponderEvent::ReverseReply { .. }
            | ResponderEvent::ReverseFailed { .. } => {}
        }
    });
    let mut wcs = [Completion::EMPTY; 16];
    let n = a.poll_cq(&mut wcs);
    let mut sent = None;
    for wc in wcs.iter().take(n) {
        match (wc.kind, wc.status) {
            (WcKind::Recv { buf }, WcStatus::Success) => {
                let m = a.recv_buf(buf).at("raw peer: receive buffer")?;
                got.push(Vec::from(m.get(..wc.byte_len as usize).unwrap_or(m)));
                // (Fails once the connection is gone; nothing more arrives then.)
                let _ = a.post_recv(&[buf]);
            }
            (WcKind::Send, s) if wc.wr_id == RAW_WR => sent = Some(s),
            _ => {}
        }
    }
    Ok((progress || n > 0, sent))
}

/// The RDMA_ERROR in `ans`: (xid, vers, credit, body). Read through the header view, not
/// the owned `HeaderRepr` (2 KiB on the stack).
///
/// # Errors
/// `ans` is not an RDMA_ERROR.
pub fn error_of(ans: &[u8]) -> Result<(u32, u32, u32, ErrorBody), Failure> {
    let h = Header::new_checked(ans).at("answer decodes")?;
    match (h.proc_(), h.error_body()) {
        (Proc::Error, Some(b)) => Ok((h.xid(), h.vers(), h.credit(), b)),
        (p, _) => Err(fail("answer", "RDMA_ERROR", format!("{p}"))),
    }
}

/// The fixed words of a header: xid, vers, credit 8, proc.
pub fn words(xid: u32, vers: u32, proc_: u32) -> Vec<u8> {
    [xid, vers, 8, proc_]
        .iter()
        .flat_map(|w| w.to_be_bytes())
        .collect()
}

/// An `RDMA_MSG` call header (credit 8) with these chunk lists, then `payload`.
///
/// # Errors
/// The header does not encode.
pub fn call(xid: u32, lists: &ChunkLists, payload: &[u8]) -> Result<Vec<u8>, Failure> {
    let mut v = header(xid, false, lists)?;
    v.extend_from_slice(payload);
    Ok(v)
}

/// A version 1 header (credit 8, `RDMA_NOMSG` if `nomsg`, else `RDMA_MSG`) with these chunk
/// lists, encoded as `HeaderRepr::emit` does (the same checks: read positions multiples of
/// 4, no `RDMA_NOMSG` without chunks), without a `HeaderRepr` on the stack.
///
/// # Errors
/// The header does not encode.
pub fn header(xid: u32, nomsg: bool, lists: &ChunkLists) -> Result<Vec<u8>, Failure> {
    let mut v = alloc::vec![0u8; FIXED_HEADER_LEN + lists.buffer_len()];
    let mut enc = HeaderEncoder::begin(&mut v, xid, 8, nomsg).at("emit header")?;
    for e in &lists.read_list {
        enc.read_segment(&mut v, e).at("emit read list")?;
    }
    for c in &lists.write_list {
        enc.write_chunk(&mut v, c.iter().copied())
            .at("emit write list")?;
    }
    let reply = lists.reply_chunk.as_ref().map(|c| c.iter().copied());
    let n = enc.finish(&mut v, reply).at("emit reply chunk")?;
    v.truncate(n);
    Ok(v)
}

/// A read list of one chunk at `position` made of `segs` (on the heap: 2 KiB).
///
/// # Errors
/// Too many segments, or no memory.
pub fn read_chunk(position: u32, segs: &[Segment]) -> Result<Boxed<ChunkLists>, Failure> {
    let mut l = chunk_lists()?;
    for s in segs {
        l.read_list
            .push(ReadSegment {
                position,
                segment: *s,
            })
            .at("read list")?;
    }
    Ok(l)
}

/// A segment.
pub fn seg(handle: u32, length: u32, offset: u64) -> Segment {
    Segment {
        handle,
        length,
        offset,
    }
}

/// A handle a call advertised: (handle, offset, whether the peer may write through it).
pub type Advertised = (u32, u64, bool);

/// The handles the call `xid` advertised (read list, write list, reply chunk), read back
/// from the RPC-over-RDMA header in one of `q`'s send buffers (so look right after the call
/// was sent, before the buffer is reused).
pub fn advertised_handles<P: Provider>(q: &mut P, xid: u32) -> Vec<Advertised> {
    let mut out = Vec::new();
    for b in 0..q.resources().send_bufs {
        let Ok(buf) = q.send_buf(b) else {
            continue;
        };
        if let Some(h) = call_header(buf, xid) {
            handles_of(&h, &mut out);
            break;
        }
    }
    out
}

/// The checked header at the start of `buf` if it is an `RDMA_MSG` or `RDMA_NOMSG` of `xid`.
pub fn call_header(buf: &[u8], xid: u32) -> Option<Header<&[u8]>> {
    let h = Header::new_checked(buf).ok()?;
    (h.xid() == xid && matches!(h.proc_(), Proc::Msg | Proc::NoMsg)).then_some(h)
}

/// The handles `h` advertises (read list, write list, reply chunk), appended to `out`.
pub fn handles_of(h: &Header<&[u8]>, out: &mut Vec<Advertised>) {
    out.extend(
        h.read_list()
            .map(|s| (s.segment.handle, s.segment.offset, false)),
    );
    for c in h.write_list().chain(h.reply_chunk()) {
        out.extend(c.segments().map(|s| (s.handle, s.offset, true)));
    }
}
