//! The requester (client) side: send-rdma of calls, recv-rdma of replies.

use alloc::sync::Arc;
use alloc::vec::Vec;

use mbuf::{Chain, Mbuf, PageProvider};

use super::call_plan::{self, CallPlan};
use super::config::TransportConfig;
use super::counters::Counters;
use super::credits::RequesterCredits;
use super::endpoint::{Cm, Endpoint};
use super::error::CallError;
use super::provisioning::{self, Provision};
use super::pullup::{gather, push_frag};
use super::send_ctx::{FreeList, WrTag};
use super::xdr_reduce::{copy_inline, inline_len, reduce, xdr_pad, ReducedItem};
use super::xid_table::XidTable;
use crate::provider::{
    drain_cq_bounded, Access, Completion, Provider, RegId, RegSegment, Resources, SendOp, SendWr,
    WcKind, WcStatus,
};
use crate::wire::{
    DecodeError, ErrorCode, Header, HeaderEncoder, InlineThresholds, Proc, ReadSegment, Segment,
    WriteChunk,
};

/// Where, in the reduced inline reply, the DDP data item belongs: the byte offset just after
/// the item's length word (the Upper-Layer Binding decides, RFC 8166 §3.4.6). `None` when the
/// reply carries no such item (e.g. an NFS error reply).
pub type LocateFn = fn(&Chain) -> Option<usize>;

/// A DDP-eligible result the caller expects (e.g. the data of an NFS READ).
#[derive(Debug)]
pub struct DdpReply {
    /// Caller-given pages (page mbufs) the data lands in, registered REMOTE_WRITE as a write
    /// chunk. Their length is the most data accepted; no XDR pad is provisioned. They come
    /// back spliced into the reply, or in [`RequesterEvent::Failed`]; when the reply needs no
    /// write chunk (it fits inline) or carries no located data, they are dropped (freed).
    pub pages: Chain,
    /// Where the data goes in the inline reply.
    pub locate: LocateFn,
}

/// How to provision the reply of a call.
#[derive(Debug)]
pub struct ReplySpec {
    /// Largest reply expected, in bytes of RPC message (DDP data included).
    pub max_reply: usize,
    /// A DDP-eligible result, if any.
    pub ddp: Option<DdpReply>,
}

impl ReplySpec {
    /// A reply of at most `max_reply` bytes with no DDP result.
    pub fn inline(max_reply: usize) -> Self {
        ReplySpec {
            max_reply,
            ddp: None,
        }
    }
}

/// A call that was not started: everything is given back.
#[derive(Debug)]
pub struct CallRejected {
    /// Why.
    pub error: CallError,
    /// The call chain, unchanged.
    pub call: Chain,
    /// The reply spec (with the caller's pages, if any).
    pub reply: ReplySpec,
}

/// What [`Requester::poll`] reports.
#[derive(Debug)]
pub enum RequesterEvent {
    /// The connection is up with these thresholds.
    Connected(InlineThresholds),
    /// A reply: the RPC reply message as a chain. When a write chunk was used and located, the
    /// chain is `[inline XDR][DDP marker][caller's page mbufs trimmed to the length written]
    /// [XDR pad if needed][rest of inline XDR]`. Every registration of the call is invalidated
    /// and released before this is reported.
    Reply {
        /// XID.
        xid: u32,
        /// The reply.
        reply: Chain,
    },
    /// A call ended without a reply. The caller's DDP pages come back (if any).
    Failed {
        /// XID.
        xid: u32,
        /// Why.
        error: CallError,
        /// The caller's pages from [`DdpReply`], returned.
        pages: Option<Chain>,
    },
    /// The connection is gone; every pending call was reported `Failed(ConnectionLost)`.
    ConnectionLost,
}

/// What [`Requester::abandon`] hands back.
#[derive(Debug)]
pub struct Abandoned {
    /// The call chain as it was given to [`Requester::call`] (`None` if already returned).
    pub call: Option<Chain>,
    /// The caller's pages from [`DdpReply`], if any.
    pub pages: Option<Chain>,
}

/// Most registrations per call: read chunks, the write chunk, the reply chunk.
const MAX_CALL_REGS: usize = 16;

#[derive(Debug, Clone, Copy)]
struct RegEntry {
    id: RegId,
    handle: u32,
    single: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Free,
    Waiting,
    Invalidating(u32),
    /// The caller abandoned the call: its registrations are revoked and its pages handed back;
    /// the slot and its credit stay until the reply arrives (then dropped) or the connection
    /// goes.
    Abandoned,
}

/// One pending call. Slots live in a table allocated at construction and are reset in place
/// (never moved or rebuilt), so the chains they keep (pull-up pages, reply-chunk pages) keep
/// their storage from one call to the next.
#[derive(Debug)]
struct Slot {
    state: SlotState,
    xid: u32,
    regs: heapless::Vec<RegEntry, MAX_CALL_REGS>,
    call: Option<Chain>,
    /// Pages holding the pulled-up bytes of a Long Call, until the reply.
    pullup: Chain,
    ddp: Option<DdpReply>,
    write_chunk: bool,
    /// The reply chunk's pages (transport pages), when one was provisioned.
    reply_chunk: bool,
    reply_pages: Chain,
    outcome: Option<Result<Chain, CallError>>,
}

impl Slot {
    fn empty() -> Self {
        Slot {
            state: SlotState::Free,
            xid: 0,
            regs: heapless::Vec::new(),
            call: None,
            pullup: Chain::new(),
            ddp: None,
            write_chunk: false,
            reply_chunk: false,
            reply_pages: Chain::new(),
            outcome: None,
        }
    }

    /// Back to free; chains emptied but their storage kept.
    fn reset(&mut self) {
        self.state = SlotState::Free;
        self.regs.clear();
        self.call = None;
        self.pullup.clear();
        self.ddp = None;
        self.write_chunk = false;
        self.reply_chunk = false;
        self.reply_pages.clear();
        self.outcome = None;
    }
}

/// The requester side of one RPC-over-RDMA connection (one provider / queue pair).
///
/// Sans-I/O: [`call`](Self::call) posts work and returns; [`poll`](Self::poll) reaps
/// completions and connection events and reports replies. Bounded: at most
/// `max_requests` calls in the pending-xid table, never more outstanding than the responder
/// granted (RFC 8166 §3.3), and no internal queue (a call that cannot go now is refused with
/// [`CallError::NoCredit`] or [`CallError::WouldBlock`]).
pub struct Requester {
    /// Configuration, resources, pages, reply chains, thresholds, send contexts, fragment
    /// table, counters: what both ends hold.
    ep: Endpoint,
    credits: RequesterCredits,
    slots: Vec<Slot>,
    free_slots: FreeList,
    xids: XidTable,
    recv_free: FreeList,
    recv_posted: u32,
    /// The CM reported the connection gone; acted on once the completions already queued
    /// are reaped (see [`poll_bounded`](Self::poll_bounded)).
    disconnect_seen: bool,
}

impl core::fmt::Debug for Requester {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Requester")
            .field("thresholds", &self.ep.thresholds)
            .field("credits", &self.credits)
            .field("lost", &self.ep.lost)
            .finish_non_exhaustive()
    }
}

/// What every header of one call carries, while the call is marshalled.
#[derive(Debug, Clone, Copy)]
struct CallHeader {
    xid: u32,
    credit: u32,
    /// The send buffer the header is encoded in.
    buf: u32,
    provisioned: Provision,
    /// Segments of the provisioned write chunk / reply chunk (for the header's length).
    chunks: call_plan::Provisioned,
}

impl Requester {
    /// A requester for a provider with `resources`, allocating RPC pages from `pages`. All
    /// tables are allocated here, once.
    ///
    /// # Errors
    /// [`CallError::NoMemory`].
    pub fn new(
        cfg: TransportConfig,
        resources: Resources,
        pages: Arc<dyn PageProvider>,
    ) -> Result<Self, CallError> {
        let n = cfg.max_requests.max(1);
        let mut slots = Vec::new();
        slots
            .try_reserve_exact(n as usize)
            .map_err(|_| CallError::NoMemory)?;
        slots.resize_with(n as usize, Slot::empty);
        Ok(Requester {
            credits: RequesterCredits::new(n),
            slots,
            free_slots: FreeList::new(n).map_err(|_| CallError::NoMemory)?,
            xids: XidTable::new(n as usize).map_err(|_| CallError::NoMemory)?,
            recv_free: FreeList::new(resources.recv_bufs).map_err(|_| CallError::NoMemory)?,
            recv_posted: 0,
            disconnect_seen: false,
            ep: Endpoint::new(cfg, resources, pages)?,
        })
    }

    /// Our 8-byte RFC 8797 private data, for the CM connect request.
    pub fn private_data(&self) -> [u8; crate::wire::CM_PRIVATE_LEN] {
        self.ep.private_data()
    }

    /// The thresholds in force (defaults until the connection is established).
    pub fn thresholds(&self) -> InlineThresholds {
        self.ep.thresholds
    }

    /// Statistics.
    pub fn counters(&self) -> &Counters {
        &self.ep.counters
    }

    /// The current credit grant.
    pub fn credits_granted(&self) -> u32 {
        self.credits.granted()
    }

    /// Calls sent whose reply has not arrived.
    pub fn outstanding(&self) -> u32 {
        self.credits.outstanding()
    }

    /// Whether the connection was lost (the requester is then useless: make a new one).
    pub fn is_lost(&self) -> bool {
        self.ep.lost
    }

    /// Largest reply that arrives inline: the receive threshold minus the smallest header.
    fn max_inline_reply(&self) -> usize {
        provisioning::max_inline_reply(self.ep.thresholds.recv, self.ep.res.recv_buf_size)
    }

    /// Send an RPC call (first word: the XID). The reply, or a failure, is reported later by
    /// [`poll`](Self::poll). On error nothing was posted and everything is handed back.
    ///
    /// # Errors
    /// See [`CallRejected`] / [`CallError`].
    pub fn call<P: Provider>(
        &mut self,
        prov: &mut P,
        call: Chain,
        reply: ReplySpec,
    ) -> Result<(), CallRejected> {
        let reject = |error, call, reply| CallRejected { error, call, reply };
        if self.ep.lost {
            return Err(reject(CallError::ConnectionLost, call, reply));
        }
        let Some(xid) = read_xid(&call) else {
            return Err(reject(CallError::BadCall, call, reply));
        };
        if self.xids.get(xid).is_some() {
            return Err(reject(CallError::DuplicateXid, call, reply));
        }
        if !self.credits.can_send() {
            self.ep.counters.credit_stalls += 1;
            return Err(reject(CallError::NoCredit, call, reply));
        }
        if self.free_slots.is_empty() {
            self.ep.counters.resource_stalls += 1;
            return Err(reject(CallError::WouldBlock, call, reply));
        }
        let need_recv = self.recv_posted < self.credits.outstanding() + 1;
        if need_recv && self.recv_free.is_empty() {
            self.ep.counters.resource_stalls += 1;
            return Err(reject(CallError::WouldBlock, call, reply));
        }
        let Some(buf) = self.ep.send.get() else {
            self.ep.counters.resource_stalls += 1;
            return Err(reject(CallError::WouldBlock, call, reply));
        };
        let Some(idx) = self.free_slots.pop() else {
            self.ep.send.complete(buf);
            self.ep.counters.resource_stalls += 1;
            return Err(reject(CallError::WouldBlock, call, reply));
        };
        let ReplySpec { max_reply, ddp } = reply;
        if let Some(slot) = self.slots.get_mut(idx as usize) {
            debug_assert_eq!(slot.state, SlotState::Free);
            slot.xid = xid;
            slot.ddp = ddp;
        }
        let len = match self.marshal(prov, &call, max_reply, idx as usize, buf) {
            Ok(len) => len,
            Err(e) => return Err(self.undo(prov, idx, buf, e, call, max_reply)),
        };
        if need_recv {
            if let Some(rb) = self.recv_free.pop() {
                if let Err(e) = prov.post_recv(&[rb]) {
                    self.recv_free.push(rb);
                    return Err(self.undo(prov, idx, buf, e.into(), call, max_reply));
                }
                self.recv_posted += 1;
            }
        }
        let wr = SendWr {
            wr_id: WrTag::Send(buf).encode(),
            op: SendOp::Send {
                buf,
                len,
                invalidate: None,
            },
            signaled: true,
        };
        if let Err(e) = prov.post_send(&[wr]) {
            return Err(self.undo(prov, idx, buf, e.into(), call, max_reply));
        }
        self.credits.acquire();
        self.ep.counters.messages_sent += 1;
        self.ep.counters.inline_bytes_sent += u64::from(len);
        let inserted = self.xids.insert(xid, idx);
        debug_assert!(inserted, "XID checked free above");
        if let Some(slot) = self.slots.get_mut(idx as usize) {
            slot.call = Some(call);
            slot.state = SlotState::Waiting;
        }
        Ok(())
    }

    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    fn undo<P: Provider>(
        &mut self,
        prov: &mut P,
        idx: u32,
        buf: u32,
        error: CallError,
        call: Chain,
        max_reply: usize,
    ) -> CallRejected {
        self.release_regs_from(prov, idx as usize, 0);
        self.ep.send.complete(buf);
        if matches!(error, CallError::WouldBlock) {
            self.ep.counters.resource_stalls += 1;
        }
        let ddp = self.slots.get_mut(idx as usize).and_then(|slot| {
            let ddp = slot.ddp.take();
            slot.reset();
            ddp
        });
        self.free_slots.push(idx);
        CallRejected {
            error,
            call,
            reply: ReplySpec { max_reply, ddp },
        }
    }

    /// Release (revoking) the registrations of slot `idx` from index `keep` on: what a call
    /// that is not sent, or a chunk that is not used after all, registered.
    fn release_regs_from<P: Provider>(&mut self, prov: &mut P, idx: usize, keep: usize) {
        let Some(slot) = self.slots.get_mut(idx) else {
            debug_assert!(false, "registrations of a slot out of range");
            return;
        };
        while slot.regs.len() > keep {
            if let Some(r) = slot.regs.pop() {
                let _ = prov.release(r.id);
                self.ep.counters.local_invalidations += 1;
            }
        }
    }

    /// Register `self.ep.frags` for the peer, as few registrations as the fragments allow: a new
    /// registration starts wherever the fragments are not FRWR-contiguous (a fragment that does
    /// not start at offset 0 of its page, or follows one that does not end at its page's end),
    /// since one registration maps one gap-free iova range. Every registration is recorded in
    /// slot `idx` (so an error path releases it); each one's segments go to `sink`, in order.
    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    fn register<P: Provider>(
        &mut self,
        prov: &mut P,
        idx: usize,
        access: Access,
        mut sink: impl FnMut(&mut P, &[RegSegment]) -> Result<(), CallError>,
    ) -> Result<(), CallError> {
        let mut start = 0;
        while start < self.ep.frags.len() {
            let mut end = start + 1;
            while let (Some(prev), Some(next)) =
                (self.ep.frags.get(end - 1), self.ep.frags.get(end))
            {
                if !crate::provider::binding::runs::continues(prev, next) {
                    break;
                }
                end += 1;
            }
            let run = self.ep.frags.get(start..end).ok_or(CallError::TooLarge)?;
            let reg = prov.register(run, access)?;
            self.ep.counters.registrations += 1;
            let first = reg.segments.first().map_or(0, |s| s.handle);
            let entry = RegEntry {
                id: reg.id,
                handle: first,
                single: reg.segments.len() == 1,
            };
            let Some(slot) = self.slots.get_mut(idx) else {
                let _ = prov.release(reg.id);
                return Err(CallError::BadCall);
            };
            if slot.regs.push(entry).is_err() {
                let _ = prov.release(reg.id);
                self.ep.counters.local_invalidations += 1;
                return Err(CallError::TooLarge);
            }
            sink(prov, &reg.segments)?;
            start = end;
        }
        Ok(())
    }

    fn frags_of(&mut self, chain: &Chain, range: core::ops::Range<usize>) -> Result<(), CallError> {
        self.ep.frags.clear();
        for f in chain.page_fragments_in(range)? {
            push_frag(&mut self.ep.frags, f)?;
        }
        Ok(())
    }

    /// Register `self.ep.frags` for the peer to write (a write or reply chunk) and make `segs`
    /// the advertised segments.
    fn register_write_chunk<P: Provider>(
        &mut self,
        prov: &mut P,
        idx: usize,
        segs: &mut WriteChunk,
    ) -> Result<(), CallError> {
        segs.clear();
        self.register(prov, idx, Access::REMOTE_WRITE, |_, got| {
            for s in got {
                segs.push(seg_of(s)).map_err(|_| CallError::TooLarge)?;
            }
            Ok(())
        })
    }

    /// Reply provisioning, as Linux's rpcrdma_marshal_req: inline if the largest reply fits
    /// the inline receive; a write chunk for a DDP result when the rest of the reply fits
    /// inline; otherwise a reply chunk. The chunk's segments go to `segs`.
    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    fn provision<P: Provider>(
        &mut self,
        prov: &mut P,
        idx: usize,
        max_reply: usize,
        segs: &mut WriteChunk,
    ) -> Result<Provision, CallError> {
        let max_inline = self.max_inline_reply();
        let pages_len = self
            .slots
            .get(idx)
            .and_then(|s| s.ddp.as_ref())
            .map_or(0, |d| d.pages.len());
        match provisioning::provision(max_reply, pages_len, max_inline) {
            Provision::Inline => return Ok(Provision::Inline),
            Provision::WriteChunk => {
                let d = self.slots.get_mut(idx).and_then(|s| s.ddp.take());
                if let Some(d) = d {
                    let r = self.frags_of(&d.pages, 0..pages_len);
                    if let Some(s) = self.slots.get_mut(idx) {
                        s.ddp = Some(d);
                    }
                    r?;
                }
                let regs_before = self.slots.get(idx).map_or(0, |s| s.regs.len());
                self.register_write_chunk(prov, idx, segs)?;
                if provisioning::write_chunk_fits(max_reply, pages_len, segs.len(), max_inline) {
                    if let Some(s) = self.slots.get_mut(idx) {
                        s.write_chunk = true;
                    }
                    self.ep.counters.write_chunks += 1;
                    return Ok(Provision::WriteChunk);
                }
                // More segments than the inline reply has room to echo: a reply chunk.
                self.release_regs_from(prov, idx, regs_before);
            }
            Provision::ReplyChunk => {}
        }
        let max_reply = provisioning::reply_chunk(max_reply, self.ep.cfg.max_chunk_bytes)?;
        let pages = Arc::clone(&self.ep.pages);
        let slot = self.slots.get_mut(idx).ok_or(CallError::BadCall)?;
        slot.reply_pages.clear();
        slot.reply_pages.append_pages(&pages, max_reply)?;
        slot.reply_chunk = true;
        // The slot's chain is borrowed while `frags` is filled: go through a split borrow.
        self.ep.frags.clear();
        for f in slot.reply_pages.page_fragments_in(0..max_reply)? {
            push_frag(&mut self.ep.frags, f)?;
        }
        self.register_write_chunk(prov, idx, segs)?;
        self.ep.counters.reply_chunks += 1;
        Ok(Provision::ReplyChunk)
    }

    /// Build the header and inline part of `call` in send buffer `buf`, straight into the
    /// buffer; register chunks. Returns the Send length.
    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    fn marshal<P: Provider>(
        &mut self,
        prov: &mut P,
        call: &Chain,
        max_reply: usize,
        idx: usize,
        buf: u32,
    ) -> Result<u32, CallError> {
        let xid = self.slots.get(idx).map_or(0, |s| s.xid);
        let credit = self.ep.cfg.max_requests;
        let mut segs = WriteChunk::new();
        let provisioned = self.provision(prov, idx, max_reply, &mut segs)?;
        let chunks = match provisioned {
            Provision::Inline => call_plan::Provisioned::default(),
            Provision::WriteChunk => call_plan::Provisioned {
                writes: Some(segs.len()),
                reply: None,
            },
            Provision::ReplyChunk => call_plan::Provisioned {
                writes: None,
                reply: Some(segs.len()),
            },
        };
        let hdr = CallHeader {
            xid,
            credit,
            buf,
            provisioned,
            chunks,
        };
        // Everything inline (small page data is copied into the send buffer), or else:
        if !call_plan::fits_inline(call.len(), chunks, self.ep.max_send()) {
            let items = reduce(call, true)?;
            // DDP regions as read chunks, the rest inline (if it then fits).
            if call_plan::too_large_for_inline(items.len()) == CallPlan::ReadChunks {
                if let Some(len) = self.marshal_read_chunks(prov, call, idx, &hdr, &items, &segs)? {
                    return Ok(len);
                }
            }
            // The whole call in a position-zero read chunk.
            return self.marshal_long_call(prov, call, idx, &hdr, &segs);
        }
        let sb = prov.send_buf(buf)?;
        let enc = HeaderEncoder::begin(sb, xid, credit, false).map_err(too_large)?;
        let h = finish_header(enc, sb, provisioned, &segs)?;
        let n = copy_inline(call, &[], sb.get_mut(h..).ok_or(CallError::TooLarge)?)?;
        u32::try_from(h + n).map_err(|_| CallError::TooLarge)
    }

    /// The DDP regions `items` as read chunks, the rest inline; `None` (nothing left
    /// registered) when the reduced call still does not fit inline. Each registration's
    /// segments are written straight into the Read list in the send buffer.
    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    fn marshal_read_chunks<P: Provider>(
        &mut self,
        prov: &mut P,
        call: &Chain,
        idx: usize,
        hdr: &CallHeader,
        items: &[ReducedItem],
        segs: &WriteChunk,
    ) -> Result<Option<u32>, CallError> {
        let buf = hdr.buf;
        let reduced = inline_len(call.len(), items);
        let mut enc = HeaderEncoder::begin(prov.send_buf(buf)?, hdr.xid, hdr.credit, false)
            .map_err(too_large)?;
        let mut ok = true;
        let regs_before = self.slots.get(idx).map_or(0, |s| s.regs.len());
        for item in items {
            self.frags_of(call, item.data())?;
            let position = u32::try_from(item.offset).map_err(|_| CallError::TooLarge)?;
            self.register(prov, idx, Access::REMOTE_READ, |prov, got| {
                let sb = prov.send_buf(buf)?;
                for s in got {
                    let entry = ReadSegment {
                        position,
                        segment: seg_of(s),
                    };
                    if enc.read_segment(sb, &entry).is_err() {
                        ok = false;
                    }
                }
                Ok(())
            })?;
        }
        if ok
            && call_plan::read_chunks_fit(
                enc.read_entries(),
                reduced,
                hdr.chunks,
                self.ep.max_send(),
            )
        {
            self.ep.counters.read_chunks += items.len() as u64;
            self.ep.counters.rdma_read_bytes += items.iter().map(|i| i.len as u64).sum::<u64>();
            let sb = prov.send_buf(buf)?;
            let h = finish_header(enc, sb, hdr.provisioned, segs)?;
            let n = copy_inline(call, items, sb.get_mut(h..).ok_or(CallError::TooLarge)?)?;
            return u32::try_from(h + n)
                .map(Some)
                .map_err(|_| CallError::TooLarge);
        }
        // Does not fit: undo the read registrations (the caller falls back to a Long Call).
        self.release_regs_from(prov, idx, regs_before);
        Ok(None)
    }

    /// A Long Call: the whole call in a position-zero read chunk, its non-page bytes pulled
    /// up into the slot's pages.
    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    fn marshal_long_call<P: Provider>(
        &mut self,
        prov: &mut P,
        call: &Chain,
        idx: usize,
        hdr: &CallHeader,
        segs: &WriteChunk,
    ) -> Result<u32, CallError> {
        let total = call.len();
        call_plan::long_call(total, self.ep.cfg.max_chunk_bytes)?;
        self.ep.frags.clear();
        let got = {
            let slot = self.slots.get_mut(idx).ok_or(CallError::BadCall)?;
            gather(
                call,
                core::iter::once(0..total),
                &self.ep.pages,
                &mut self.ep.frags,
                &mut slot.pullup,
            )?
        };
        if got.pulled > 0 {
            self.ep.counters.pullup_copies += 1;
            self.ep.counters.pullup_bytes += got.pulled as u64;
        }
        let buf = hdr.buf;
        let mut enc = HeaderEncoder::begin(prov.send_buf(buf)?, hdr.xid, hdr.credit, true)
            .map_err(too_large)?;
        self.register(prov, idx, Access::REMOTE_READ, |prov, got| {
            let sb = prov.send_buf(buf)?;
            for s in got {
                let entry = ReadSegment {
                    position: 0,
                    segment: seg_of(s),
                };
                enc.read_segment(sb, &entry).map_err(too_large)?;
            }
            Ok(())
        })?;
        self.ep.counters.long_calls += 1;
        self.ep.counters.read_chunks += 1;
        self.ep.counters.rdma_read_bytes += total as u64;
        let sb = prov.send_buf(buf)?;
        let len = finish_header(enc, sb, hdr.provisioned, segs)?;
        u32::try_from(len).map_err(|_| CallError::TooLarge)
    }

    /// Reap completions and connection events; report replies, failures and connection state
    /// through `events`. Never blocks.
    pub fn poll<P: Provider>(&mut self, prov: &mut P, events: &mut impl FnMut(RequesterEvent)) {
        self.poll_bounded(prov, usize::MAX, events);
    }

    /// [`poll`](Self::poll) with a work budget: connection events, then at most `budget`
    /// completions. True when everything pending was handled; false when the budget ran out
    /// (call again).
    ///
    /// A disconnection is acted on only once the completion queue is drained: a reply whose
    /// Receive completed before the loss is delivered, not resent (as Linux xprtrdma does
    /// with the successful receives it reaps before the flushed ones); a flushed (failed)
    /// completion met first loses the connection at once.
    pub fn poll_bounded<P: Provider>(
        &mut self,
        prov: &mut P,
        budget: usize,
        events: &mut impl FnMut(RequesterEvent),
    ) -> bool {
        while let Some(ev) = self.ep.next_cm_event(prov) {
            match ev {
                Cm::Connected(t) => events(RequesterEvent::Connected(t)),
                Cm::Disconnected => self.disconnect_seen = true,
            }
        }
        let done = drain_cq_bounded(prov, budget, |prov, wc| {
            self.on_completion(prov, wc, events)
        });
        if done && self.disconnect_seen {
            self.lose(prov, events);
        }
        done
    }

    fn on_completion<P: Provider>(
        &mut self,
        prov: &mut P,
        wc: &Completion,
        events: &mut impl FnMut(RequesterEvent),
    ) {
        if self.ep.lost {
            return;
        }
        if wc.status != WcStatus::Success {
            self.lose(prov, events);
            return;
        }
        match wc.kind {
            WcKind::Recv { buf } => {
                self.recv_posted = self.recv_posted.saturating_sub(1);
                self.on_recv(prov, buf, wc.byte_len, wc.invalidated, events);
                // Keep a Receive posted for every outstanding call.
                if self.recv_posted < self.credits.outstanding() && prov.post_recv(&[buf]).is_ok() {
                    self.recv_posted += 1;
                } else {
                    self.recv_free.push(buf);
                }
            }
            WcKind::Send => match WrTag::decode(wc.wr_id) {
                Some(WrTag::Send(buf)) => self.ep.send.complete(buf),
                Some(WrTag::LocalInv(idx)) => {
                    let done = match self.slots.get_mut(idx as usize) {
                        Some(s) => match s.state {
                            SlotState::Invalidating(n) if n > 1 => {
                                s.state = SlotState::Invalidating(n - 1);
                                false
                            }
                            SlotState::Invalidating(_) => true,
                            _ => false,
                        },
                        None => false,
                    };
                    if done {
                        self.finish(prov, idx as usize, events);
                    }
                }
                _ => {}
            },
        }
    }

    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    fn on_recv<P: Provider>(
        &mut self,
        prov: &mut P,
        buf: u32,
        len: u32,
        invalidated: Option<u32>,
        events: &mut impl FnMut(RequesterEvent),
    ) {
        let Ok(data) = prov.recv_buf(buf) else {
            self.ep.counters.bad_messages += 1;
            return;
        };
        let Some(data) = data.get(..len as usize) else {
            self.ep.counters.bad_messages += 1;
            return;
        };
        self.ep.counters.inline_bytes_received += u64::from(len);
        let hdr = match Header::new_checked(data) {
            Ok(h) => h,
            Err(e) => return self.on_malformed(prov, &e, invalidated, events),
        };
        let xid = hdr.xid();
        let Some(idx) = self.pending(xid) else {
            self.ep.counters.bad_messages += 1;
            return;
        };
        self.credits.update_grant(hdr.credit());
        self.credits.release();
        let Some(slot) = self.slots.get_mut(idx) else {
            // The XID table only holds slot indices: cannot happen.
            debug_assert!(false, "reply for a slot out of range");
            return;
        };
        if slot.state == SlotState::Abandoned {
            self.end_abandoned(prov, idx);
            return;
        }
        // Write chunks the reply reports against those offered (none, or one for a DDP
        // result): a responder echoes what it was given (RFC 8166 §4.3.2), no more.
        let offered = usize::from(slot.write_chunk);
        let extra_writes = hdr.write_list().nth(offered).is_some();
        let outcome = match hdr.proc_() {
            // A responder leaves the Read list of a reply empty (RFC 8166 §4.3.1); Linux's
            // client fails such a reply with -EIO.
            Proc::Msg | Proc::NoMsg if hdr.read_list().next().is_some() => Err(CallError::BadReply),
            Proc::Msg | Proc::NoMsg if extra_writes => Err(CallError::BadReply),
            Proc::Error => {
                let code = hdr.error_body().map_or(ErrorCode::Chunk, |b| b.code());
                match code {
                    ErrorCode::Vers => self.ep.counters.err_vers_received += 1,
                    ErrorCode::Chunk => self.ep.counters.err_chunk_received += 1,
                }
                Err(CallError::Rdma(code))
            }
            // A Long Reply is RDMA_NOMSG (§3.5.4): RDMA_MSG saying bytes went into the Reply
            // chunk contradicts itself (Linux's rpcrdma_decode_msg: -EIO).
            Proc::Msg if hdr.reply_chunk().is_some_and(|c| c.total_length() > 0) => {
                Err(CallError::BadReply)
            }
            Proc::Msg => {
                // The inline reply goes into the call chain's storage when it fits (the call
                // is done with), else into a chain of the pool.
                let need = hdr.payload().len().div_ceil(mbuf::MCLBYTES).max(1);
                let mut inline = match slot.call.take() {
                    // Refilled below (`set_bytes`: its first mbuf in place when it can be).
                    Some(c) if !slot.write_chunk && c.mbuf_capacity() >= need => c,
                    other => {
                        slot.call = other;
                        // Room for the caller's page mbufs, a marker, a pad and the split.
                        let pages = slot.ddp.as_ref().map_or(0, |d| d.pages.mbuf_count());
                        self.ep.chains.chain_with(need + pages + 4)
                    }
                };
                inline
                    .set_bytes(hdr.payload())
                    .map_err(CallError::from)
                    .and_then(|()| place_ddp(slot, &hdr, inline, &mut self.ep.counters))
            }
            Proc::NoMsg => {
                // RDMA_NOMSG from a responder means "the reply is in the reply chunk": without
                // one, there is no reply (never an empty success).
                let written = hdr.reply_chunk().map(|c| c.total_length());
                let have = slot.reply_pages.len() as u64;
                match written {
                    Some(written) if slot.reply_chunk && written <= have => {
                        // The pages move into a chain of the pool; the slot keeps its storage.
                        let mut pages = self.ep.chains.chain();
                        let cut = have - written;
                        slot.reply_chunk = false;
                        let trimmed = pages
                            .cat_from(&mut slot.reply_pages)
                            .map_err(CallError::from)
                            .and_then(|()| i64::try_from(cut).map_err(|_| CallError::BadReply))
                            .and_then(|c| pages.adj(-c).map_err(CallError::from));
                        self.ep.counters.long_replies += 1;
                        self.ep.counters.rdma_write_bytes += written;
                        trimmed.and_then(|()| place_ddp(slot, &hdr, pages, &mut self.ep.counters))
                    }
                    _ => Err(CallError::BadReply),
                }
            }
            _ => Err(CallError::BadReply),
        };
        if outcome.is_ok() {
            self.ep.counters.messages_received += 1;
        } else if matches!(outcome, Err(CallError::BadReply)) {
            self.ep.counters.bad_messages += 1;
            self.ep.counters.bad_replies += 1;
        }
        slot.outcome = Some(outcome);
        self.end_call(prov, idx, invalidated, events);
    }

    /// The slot of the call `xid` that is owed a reply (waiting, or abandoned: a zombie).
    fn pending(&self, xid: u32) -> Option<usize> {
        self.xids.get(xid).map(|i| i as usize).filter(|&i| {
            self.slots
                .get(i)
                .is_some_and(|s| matches!(s.state, SlotState::Waiting | SlotState::Abandoned))
        })
    }

    /// A reply whose transport header the codec rejects. Too short to name an XID, or
    /// naming no call owed a reply: counted and dropped (nothing can be told). Naming a call
    /// owed a reply: that call fails with [`CallError::MalformedReply`] — it would otherwise
    /// wait, its credit and registrations held, for a reply the responder believes it sent
    /// (Linux xprtrdma fails it with `-EIO`) — and an abandoned call's zombie slot ends as
    /// with a late reply. The credit comes back; the grant stays what the last valid reply
    /// said (the header carrying this one is not trusted). The registrations are
    /// invalidated before the failure is reported, as for any other reply.
    #[cold]
    #[inline(never)]
    fn on_malformed<P: Provider>(
        &mut self,
        prov: &mut P,
        e: &DecodeError,
        invalidated: Option<u32>,
        events: &mut impl FnMut(RequesterEvent),
    ) {
        self.ep.counters.bad_messages += 1;
        let Some(idx) = e.xid().and_then(|xid| self.pending(xid)) else {
            return;
        };
        self.credits.release();
        let Some(slot) = self.slots.get_mut(idx) else {
            debug_assert!(false, "reply for a slot out of range");
            return;
        };
        if slot.state == SlotState::Abandoned {
            self.end_abandoned(prov, idx);
            return;
        }
        self.ep.counters.bad_replies += 1;
        slot.outcome = Some(Err(CallError::MalformedReply(e.kind())));
        self.end_call(prov, idx, invalidated, events);
    }

    /// The reply of an abandoned call: its caller is gone and its registrations were revoked
    /// at abandon time (their handles held back until now: the reply may have invalidated one
    /// of them); the reply gives the handles, the slot and the credit back.
    fn end_abandoned<P: Provider>(&mut self, prov: &mut P, idx: usize) {
        let Some(slot) = self.slots.get_mut(idx) else {
            return;
        };
        for r in &slot.regs {
            let _ = prov.release(r.id);
        }
        let xid = slot.xid;
        slot.reset();
        self.xids.remove(xid);
        self.free_slots.push(idx as u32);
        self.ep.counters.late_replies += 1;
    }

    /// The reply of the call in slot `idx` arrived (its outcome stored): invalidate every
    /// registration before reporting it (RFC 8166 §3.4.3), unless the Send With Invalidate
    /// that carried the reply already revoked a single-segment registration.
    fn end_call<P: Provider>(
        &mut self,
        prov: &mut P,
        idx: usize,
        invalidated: Option<u32>,
        events: &mut impl FnMut(RequesterEvent),
    ) {
        let Some(slot) = self.slots.get_mut(idx) else {
            return;
        };
        let mut pending = 0u32;
        for r in &slot.regs {
            if r.single && invalidated == Some(r.handle) {
                self.ep.counters.remote_invalidations += 1;
                continue;
            }
            let wr = SendWr {
                wr_id: WrTag::LocalInv(idx as u32).encode(),
                op: SendOp::LocalInv { reg: r.id },
                signaled: true,
            };
            if prov.post_send(&[wr]).is_ok() {
                pending += 1;
            }
            self.ep.counters.local_invalidations += 1;
        }
        if pending == 0 {
            self.finish(prov, idx, events);
        } else {
            slot.state = SlotState::Invalidating(pending);
        }
    }

    /// Release the slot's registrations and resources; report its outcome.
    fn finish<P: Provider>(
        &mut self,
        prov: &mut P,
        idx: usize,
        events: &mut impl FnMut(RequesterEvent),
    ) {
        let Some(slot) = self.slots.get_mut(idx) else {
            debug_assert!(false, "finish of a slot out of range");
            return;
        };
        for r in &slot.regs {
            let _ = prov.release(r.id);
        }
        let xid = slot.xid;
        let pages = slot.ddp.take().map(|d| d.pages);
        let outcome = slot.outcome.take();
        slot.reset();
        self.xids.remove(xid);
        self.free_slots.push(idx as u32);
        match outcome {
            Some(Ok(reply)) => events(RequesterEvent::Reply { xid, reply }),
            Some(Err(error)) => events(RequesterEvent::Failed { xid, error, pages }),
            None => events(RequesterEvent::Failed {
                xid,
                error: CallError::BadReply,
                pages,
            }),
        }
    }

    /// Fail every pending call with `error`: registrations released (revoked first if still
    /// valid), pages handed back. Abandoned calls end silently: their caller was told.
    fn fail_all<P: Provider>(
        &mut self,
        prov: &mut P,
        error: CallError,
        events: &mut impl FnMut(RequesterEvent),
    ) {
        for (idx, slot) in self.slots.iter_mut().enumerate() {
            if slot.state == SlotState::Free {
                continue;
            }
            for r in &slot.regs {
                let _ = prov.release(r.id);
            }
            let (xid, abandoned) = (slot.xid, slot.state == SlotState::Abandoned);
            let pages = slot.ddp.take().map(|d| d.pages);
            slot.reset();
            self.xids.remove(xid);
            self.free_slots.push(idx as u32);
            if abandoned {
                continue;
            }
            self.ep.counters.calls_lost += 1;
            events(RequesterEvent::Failed { xid, error, pages });
        }
    }

    /// Give up on the call `xid` now (a krpc timeout or signal, FreeBSD's `clnt_vc_call`
    /// removing its request; Linux's `xprt_rdma_free`): every registration of the call is
    /// revoked before this returns (RFC 8166 §8.1.3: the responder can no longer touch the
    /// caller's memory), and the call chain and the caller's DDP pages are handed back. The
    /// slot and its credit stay taken until the reply arrives (it is then dropped and
    /// counted in `late_replies`) or the connection goes, so the credit accounting stays
    /// true. `None` if no call `xid` is waiting for its reply.
    ///
    /// A responder still reading the call's chunks then fails on a revoked handle, which
    /// breaks the connection; that is the price of taking the memory back at once, as on
    /// Linux.
    ///
    /// The registrations are revoked with [`Provider::revoke`]: where the provider can (FRWR
    /// MRs; not memory windows, see there) their handles are held back (quarantined), not
    /// registered again under another key, until the late reply arrives or the connection
    /// ends. The late reply may come with Send With Invalidate of one of
    /// them; a device invalidates an MR whose key still matches (rxe), but a key bumped by
    /// a re-registration for another call would fail the queue pair. Bounded: when more than
    /// half of the slots would hold quarantined handles, the registrations are released
    /// instead and the connection is closed (`abandon_closes`; the calls in flight fail
    /// with the loss, seen at the next poll).
    pub fn abandon<P: Provider>(&mut self, prov: &mut P, xid: u32) -> Option<Abandoned> {
        let idx = self.xids.get(xid)? as usize;
        let held = self
            .slots
            .iter()
            .filter(|s| s.state == SlotState::Abandoned && !s.regs.is_empty())
            .count();
        let limit = (self.slots.len() / 2).max(1);
        let slot = self
            .slots
            .get_mut(idx)
            .filter(|s| s.state == SlotState::Waiting)?;
        let quarantine = !slot.regs.is_empty() && held < limit;
        self.ep.counters.local_invalidations += slot.regs.len() as u64;
        if quarantine {
            // The held ones are released with the late reply (`recv`) or the connection
            // (`fail_all`); the provider released the others.
            slot.regs.retain(|r| matches!(prov.revoke(r.id), Ok(true)));
            if !slot.regs.is_empty() {
                self.ep.counters.abandon_quarantines += 1;
            }
        } else {
            for r in &slot.regs {
                let _ = prov.release(r.id);
            }
            if !slot.regs.is_empty() {
                self.ep.counters.abandon_closes += 1;
                prov.disconnect();
            }
            slot.regs.clear();
        }
        slot.state = SlotState::Abandoned;
        slot.pullup.clear();
        slot.reply_chunk = false;
        slot.reply_pages.clear();
        slot.outcome = None;
        self.ep.counters.calls_abandoned += 1;
        Some(Abandoned {
            call: slot.call.take(),
            pages: slot.ddp.take().map(|d| d.pages),
        })
    }

    /// Close the transport (FreeBSD's `clnt_vc_close`): disconnect, fail every pending call
    /// with [`CallError::Closed`] (registrations revoked, the caller's pages handed back in
    /// the events), then report [`RequesterEvent::ConnectionLost`]. Later calls are refused.
    pub fn close<P: Provider>(&mut self, prov: &mut P, events: &mut impl FnMut(RequesterEvent)) {
        if self.ep.lost {
            return;
        }
        prov.disconnect();
        self.fail_all(prov, CallError::Closed, events);
        self.lose(prov, events);
    }

    /// Connection loss: fail every pending call, release every registration, free all pages.
    fn lose<P: Provider>(&mut self, prov: &mut P, events: &mut impl FnMut(RequesterEvent)) {
        if self.ep.lost {
            return;
        }
        self.ep.lost = true;
        self.ep.counters.connection_losses += 1;
        self.fail_all(prov, CallError::ConnectionLost, events);
        self.credits.reset();
        self.ep.send.reset();
        self.recv_free.reset();
        self.recv_posted = 0;
        self.xids.clear();
        self.free_slots.reset();
        events(RequesterEvent::ConnectionLost);
    }
}

/// The XID, the call's first word (from the first mbuf when it holds it).
fn read_xid(call: &Chain) -> Option<u32> {
    let first = call
        .first()
        .and_then(Mbuf::data)
        .and_then(|d| d.get(..4))
        .and_then(|w| <[u8; 4]>::try_from(w).ok());
    if let Some(w) = first {
        return Some(u32::from_be_bytes(w));
    }
    let mut w = [0u8; 4];
    call.copydata(0, &mut w).ok()?;
    Some(u32::from_be_bytes(w))
}

fn too_large(_: crate::wire::EncodeError) -> CallError {
    CallError::TooLarge
}

/// Close the call header: the provisioned chunk (Write list or Reply chunk) after whatever
/// Read list entries were written. Returns the header length.
fn finish_header(
    mut enc: HeaderEncoder,
    sb: &mut [u8],
    provisioned: Provision,
    segs: &WriteChunk,
) -> Result<usize, CallError> {
    let chunk = segs.iter().copied();
    match provisioned {
        Provision::Inline => enc.finish(sb, None::<core::iter::Empty<Segment>>),
        Provision::WriteChunk => {
            enc.write_chunk(sb, chunk).map_err(too_large)?;
            enc.finish(sb, None::<core::iter::Empty<Segment>>)
        }
        Provision::ReplyChunk => enc.finish(sb, Some(chunk)),
    }
    .map_err(too_large)
}

fn seg_of(s: &RegSegment) -> Segment {
    Segment {
        handle: s.handle,
        length: s.length,
        offset: s.offset,
    }
}

/// Splice the write-chunk data into the inline reply at the located offset:
/// `[inline before][marker][caller's pages trimmed to the length written][pad][inline after]`.
fn place_ddp<T: AsRef<[u8]>>(
    slot: &mut Slot,
    hdr: &Header<T>,
    mut inline: Chain,
    counters: &mut Counters,
) -> Result<Chain, CallError> {
    if !slot.write_chunk {
        return Ok(inline);
    }
    let written = hdr.write_list().next().map_or(0, |c| c.total_length());
    let Some(ddp) = slot.ddp.as_mut() else {
        return Ok(inline);
    };
    if written > ddp.pages.len() as u64 {
        return Err(CallError::BadReply);
    }
    let Some(at) = (ddp.locate)(&inline).filter(|a| *a <= inline.len()) else {
        if written == 0 {
            return Ok(inline);
        }
        return Err(CallError::BadReply);
    };
    let written = written as usize;
    let cut = ddp.pages.len() - written;
    ddp.pages
        .adj(-(i64::try_from(cut).map_err(|_| CallError::BadReply)?))
        .map_err(CallError::from)?;
    let Some(mut ddp) = slot.ddp.take() else {
        return Err(CallError::BadReply);
    };
    counters.rdma_write_bytes += written as u64;
    // The tail comes from the same pool as `inline` (a split of a pooled chain).
    let tail = inline.split(at)?;
    inline.append_mbuf(Mbuf::ddp_marker())?;
    inline.cat_from(&mut ddp.pages)?;
    let pad = xdr_pad(written);
    if pad > 0 {
        inline.append_mbuf(Mbuf::internal([0u8; 3].get(..pad).unwrap_or_default())?)?;
    }
    inline.cat(tail)?;
    Ok(inline)
}
