//! The responder (server) side: recv-rdma of calls with ddp-read of read chunks, and
//! ddp-write / Long Reply / Send of replies.

use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};

use mbuf::{Chain, Mbuf, PageFragment, PageProvider};

use super::bounded::Bounded;
use super::config::TransportConfig;
use super::counters::Counters;
use super::endpoint::{Cm, Endpoint};
use super::error::{CallError, Fault};
use super::pullup::gather;
use super::rdma_plan::{plan, WrDesc};
use super::read_chunks::{positions_fit, ReadBudget, MAX_CALL_CHUNKS};
use super::reply_plan::{self, write_chunk_use, written_segments, WriteChunkUse};
use super::send_ctx::{FreeList, WrTag};
use super::shared_pages::{Admission, PageShare};
use super::xdr_reduce::{copy_inline, inline_len, kept_ranges, reduce, xdr_pad, ReducedItem};
use crate::provider::{
    drain_cq_bounded, Completion, Provider, ProviderError, Resources, SendOp, SendWr, WcKind,
    WcStatus,
};
use crate::wire::{
    encode_error, header_len, ErrorBody, ErrorCode, Header, HeaderEncoder, InlineThresholds, Proc,
    Segment, CM_PRIVATE_LEN, MAX_CHUNK_SEGMENTS, MAX_READ_SEGMENTS, MAX_WRITE_CHUNKS,
    MIN_HEADER_LEN,
};

/// Handle of a received call, needed to send its reply. Bounded by the credits: there are at
/// most `max_requests` live contexts.
///
/// A guard: it is consumed by [`Responder::reply`] or [`Responder::drop_call`], and if it
/// is dropped instead (with its [`Incoming`], by an upper layer that forgot the call or
/// chose to say nothing) its context comes back to the Responder at the next
/// [`poll`](Responder::poll) (or at once when a call finds no free context), counted in
/// `contexts_reclaimed`, exactly as `drop_call` would give it back. The drop needs no
/// reference to the Responder: it writes the context's generation into a slot of a table
/// shared with it (one `AtomicU32` per context, allocated with the Responder), so a drop
/// allocates nothing and may happen on any thread.
pub struct ReplyCtx {
    idx: u32,
    generation: u32,
    /// Where a drop leaves the context; `None` once consumed.
    returns: Option<Arc<Returns>>,
}

impl ReplyCtx {
    /// Consumed by the Responder (replied, dropped, or refused as stale): nothing to give
    /// back on drop.
    fn consume(mut self) {
        self.returns = None;
    }
}

impl Drop for ReplyCtx {
    fn drop(&mut self) {
        if let Some(r) = self.returns.take() {
            r.give_back(self.idx, self.generation);
        }
    }
}

impl core::fmt::Debug for ReplyCtx {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ReplyCtx")
            .field("idx", &self.idx)
            .field("generation", &self.generation)
            .finish()
    }
}

impl PartialEq for ReplyCtx {
    fn eq(&self, other: &Self) -> bool {
        (self.idx, self.generation) == (other.idx, other.generation)
            && match (&self.returns, &other.returns) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            }
    }
}

impl Eq for ReplyCtx {}

/// The contexts whose [`ReplyCtx`] was dropped unconsumed, shared by a Responder and every
/// `ReplyCtx` it handed out.
#[derive(Debug)]
struct Returns {
    /// Per context: the generation of its dropped `ReplyCtx`, 0 for none (a context's
    /// generation is never 0).
    dropped: Vec<AtomicU32>,
    /// Drops not reclaimed yet: the Responder looks at `dropped` only when this is not 0.
    count: AtomicU32,
}

impl Returns {
    fn new(n: u32) -> Result<Self, CallError> {
        let mut dropped = Vec::new();
        reserve(&mut dropped, n as usize)?;
        dropped.extend((0..n).map(|_| AtomicU32::new(0)));
        Ok(Returns {
            dropped,
            count: AtomicU32::new(0),
        })
    }

    fn give_back(&self, idx: u32, generation: u32) {
        if let Some(slot) = self.dropped.get(idx as usize) {
            slot.store(generation, Ordering::Release);
            self.count.fetch_add(1, Ordering::Release);
        }
    }
}

/// A call handed up by [`Responder::poll`].
#[derive(Debug)]
pub struct Incoming {
    /// XID.
    pub xid: u32,
    /// The RPC call, shaped as NFS consumes it: inline XDR up to a read chunk's position, a
    /// DDP marker, page mbufs with the chunk's data, XDR pad bytes if the data length is not a
    /// multiple of 4, then the rest of the inline XDR. A Long Call is page mbufs only.
    pub call: Chain,
    /// Pass back to [`Responder::reply`].
    pub ctx: ReplyCtx,
}

/// What [`Responder::poll`] reports.
#[derive(Debug)]
pub enum ResponderEvent {
    /// The connection is up with these thresholds.
    Connected(InlineThresholds),
    /// A call.
    Call(Incoming),
    /// The connection is gone: every outstanding [`ReplyCtx`] is dead.
    ConnectionLost,
}

/// Why a reply could not be sent.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReplyError {
    /// Resources busy (send buffer, send queue): retry later with the same context and chain.
    WouldBlock {
        /// The context, still valid.
        ctx: ReplyCtx,
        /// The reply, unchanged.
        reply: Chain,
    },
    /// The context is unknown or already used.
    StaleContext,
    /// The connection is gone.
    ConnectionLost,
    /// The reply does not fit what the requester provisioned (write chunk too small, no reply
    /// chunk for a reply too large for inline): `RDMA_ERROR` / `ERR_CHUNK` was sent instead.
    ChunkError,
    /// Another failure (memory, provider); the context is consumed.
    Failed(CallError),
}

impl ReplyError {
    /// Who is at fault.
    pub fn fault(&self) -> Fault {
        match self {
            ReplyError::WouldBlock { .. } => Fault::BackPressure,
            // The upper layer answered a context it does not hold.
            ReplyError::StaleContext => Fault::Bug,
            ReplyError::ConnectionLost => Fault::Fabric,
            // The requester did not provision room for this reply (RFC 8166 §4.5.2).
            ReplyError::ChunkError => Fault::Peer,
            ReplyError::Failed(e) => e.fault(),
        }
    }
}

impl core::fmt::Display for ReplyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ReplyError::WouldBlock { .. } => f.write_str("transport resources busy"),
            ReplyError::StaleContext => f.write_str("unknown or already used reply context"),
            ReplyError::ConnectionLost => f.write_str("connection lost"),
            ReplyError::ChunkError => {
                f.write_str("reply does not fit the requester's chunks: ERR_CHUNK sent")
            }
            ReplyError::Failed(e) => write!(f, "reply failed: {e}"),
        }
    }
}

impl core::error::Error for ReplyError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            ReplyError::Failed(e) => Some(e),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CtxState {
    Free,
    Reading,
    Handed,
}

#[derive(Debug)]
struct CallCtx {
    state: CtxState,
    generation: u32,
    xid: u32,
    /// The requester's Write chunks, their segments back to back (stored once, in place).
    write_segs: Bounded<Segment>,
    /// Where each Write chunk ends in `write_segs`.
    write_ends: heapless::Vec<u8, MAX_WRITE_CHUNKS>,
    /// The requester's Reply chunk, if it sent one.
    reply_segs: Bounded<Segment>,
    has_reply: bool,
    inv_handle: Option<u32>,
    call: Option<Chain>,
    /// A call waiting for its RDMA Reads: the inline payload, until the read job starts and
    /// [`Responder::build_call`] puts the pages in (pages are allocated only then, within the
    /// connection's DDP budget).
    inline: Option<Chain>,
    /// `RDMA_NOMSG` (a Long Call: the whole message is the position-zero chunk).
    nomsg: bool,
    /// The read chunks: (XDR position, total length).
    chunks: heapless::Vec<(u32, u32), MAX_CALL_CHUNKS>,
    /// Read chunk segments and the call-chain offset their data lands at.
    reads: Bounded<(Segment, usize)>,
    /// Page bytes charged to the connection's DDP budget while the context lives.
    ddp_bytes: usize,
    /// Bytes (whole pages) taken from the server-wide [`PageShare`] while the context lives.
    shared_bytes: usize,
    /// Bytes (whole pages) of the reply's data taken from the [`PageShare`] by
    /// [`Responder::take_reply_pages`]: they go with the reply's Send until it completes.
    reply_bytes: usize,
}

impl CallCtx {
    /// Page bytes the call's read chunks need.
    fn read_bytes(&self) -> usize {
        self.chunks.iter().map(|&(_, t)| t as usize).sum()
    }

    /// Whole pages the call's read chunks take (each chunk starts on a fresh page).
    fn read_page_bytes(&self) -> usize {
        self.chunks
            .iter()
            .map(|&(_, t)| (t as usize).div_ceil(mbuf::PAGE_SIZE) * mbuf::PAGE_SIZE)
            .sum()
    }

    /// A free context; its lists' storage is allocated here, once (so a context is small
    /// enough to build and move on a kernel stack).
    fn new() -> Result<Self, CallError> {
        Ok(CallCtx {
            state: CtxState::Free,
            generation: 0,
            xid: 0,
            write_segs: Bounded::with_capacity(MAX_WRITE_CHUNKS * MAX_CHUNK_SEGMENTS)?,
            write_ends: heapless::Vec::new(),
            reply_segs: Bounded::with_capacity(MAX_CHUNK_SEGMENTS)?,
            has_reply: false,
            inv_handle: None,
            call: None,
            inline: None,
            nomsg: false,
            chunks: heapless::Vec::new(),
            reads: Bounded::with_capacity(MAX_READ_SEGMENTS)?,
            ddp_bytes: 0,
            shared_bytes: 0,
            reply_bytes: 0,
        })
    }

    /// The requester's Reply chunk, if it sent one.
    fn reply_chunk(&self) -> Option<&[Segment]> {
        self.has_reply.then_some(&self.reply_segs[..])
    }

    /// The requester's Write chunks, in order.
    fn write_chunks(&self) -> impl Iterator<Item = &[Segment]> + Clone + '_ {
        let mut start = 0usize;
        self.write_ends.iter().map(move |&end| {
            let chunk = self.write_segs.get(start..end as usize).unwrap_or_default();
            start = end as usize;
            chunk
        })
    }
}

/// `RDMA_ERROR`s waiting for a send buffer; one more and the connection is closed.
const DEFERRED_ERRORS: usize = 16;

/// A refused message: the `RDMA_ERROR` that answers it (RFC 8166 §4.5: the request's XID and
/// version).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Refusal {
    xid: u32,
    vers: u32,
    code: ErrorCode,
}

impl Refusal {
    fn chunk(xid: u32) -> Self {
        Refusal {
            xid,
            vers: crate::wire::RPCRDMA_VERSION,
            code: ErrorCode::Chunk,
        }
    }
}

/// What happened to a received message.
#[derive(Debug)]
enum Received {
    /// A call, in this context.
    Call(u32),
    /// Discarded without an answer (RFC 8166 §4.5 short message, §4.6.2 `RDMA_DONE`, a
    /// requester's `RDMA_ERROR`).
    Discard,
    /// Refused with this `RDMA_ERROR`.
    Refuse(Refusal),
    /// Neither taken nor refusable (our memory ran out): close the connection.
    Close,
}

/// The active read job: one context's RDMA Reads, planned, posted under `max_rd_atomic`.
#[derive(Debug, Default)]
struct ReadJob {
    ctx: Option<u32>,
    next_wr: usize,
    in_flight: u32,
}

/// The responder side of one RPC-over-RDMA connection.
///
/// Grants credits equal to the Receives it keeps posted (at most `max_requests`, RFC 8166
/// §3.3.1); keeps one bounded context per call between [`poll`](Self::poll) handing it up and
/// [`reply`](Self::reply).
pub struct Responder {
    /// Configuration, resources, pages, call chains, thresholds, send contexts, fragment
    /// table, counters: what both ends hold.
    ep: Endpoint,
    /// We disconnected (RFC 8166 §4.5.4); the next `poll` reports the loss.
    closing: bool,
    recvs_started: bool,
    recv_posted: u32,
    ctxs: Vec<CallCtx>,
    free_ctx: FreeList,
    /// Calls waiting for their RDMA Reads, oldest first (never grows: one per context).
    read_queue: VecDeque<u32>,
    job: ReadJob,
    /// The running read job's RDMA Reads (planned by `plan_reads`, posted by `pump_reads`
    /// over several polls when they exceed `max_rd_atomic`): kept apart from a reply's
    /// `pieces` / `wrs`, which a reply built meanwhile fills.
    read_pieces: Vec<PageFragment>,
    read_wrs: Vec<WrDesc>,
    /// A reply's RDMA Writes, planned and posted within one `reply`.
    pieces: Vec<PageFragment>,
    wrs: Vec<WrDesc>,
    /// The work-request array a reply's RDMA Writes and Send are posted from: allocated
    /// once, emptied after each post (see [`recycle_wrs`]).
    wr_array: Vec<SendWr<'static>>,
    /// `RDMA_ERROR`s owed, oldest first, sent as send buffers free up.
    /// Owed `RDMA_ERROR`s: at most [`DEFERRED_ERRORS`], room reserved at creation (on the
    /// heap, not inline: the Responder stays small enough to be built on a kernel stack).
    errors: VecDeque<Refusal>,
    /// Page bytes held by live contexts' read chunks (bounded by `max_ddp_bytes`).
    ddp_in_use: usize,
    /// Contexts whose `ReplyCtx` was dropped unconsumed, to reclaim.
    returns: Arc<Returns>,
    /// This connection's part in a server-wide page budget, if the server shares one.
    share: Option<PageShare>,
}

impl core::fmt::Debug for Responder {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Responder")
            .field("thresholds", &self.ep.thresholds)
            .field("recv_posted", &self.recv_posted)
            .field("lost", &self.ep.lost)
            .finish_non_exhaustive()
    }
}

fn reserve<T>(v: &mut Vec<T>, n: usize) -> Result<(), CallError> {
    v.try_reserve_exact(n).map_err(|_| CallError::NoMemory)
}

impl Responder {
    /// A responder for a provider with `resources`, allocating pages from `pages`.
    ///
    /// # Errors
    /// [`CallError::NoMemory`].
    pub fn new(
        cfg: TransportConfig,
        resources: Resources,
        pages: Arc<dyn PageProvider>,
    ) -> Result<Self, CallError> {
        let n = cfg.max_requests.max(1);
        let mut ctxs = Vec::new();
        reserve(&mut ctxs, n as usize)?;
        for _ in 0..n {
            ctxs.push(CallCtx::new()?);
        }
        let mut read_queue = VecDeque::new();
        read_queue
            .try_reserve_exact(n as usize)
            .map_err(|_| CallError::NoMemory)?;
        let (mut pieces, mut wrs) = (Vec::new(), Vec::new());
        let (mut read_pieces, mut read_wrs) = (Vec::new(), Vec::new());
        let nf = cfg.max_fragments as usize;
        reserve(&mut pieces, nf * 2)?;
        reserve(&mut wrs, nf * 2)?;
        reserve(&mut read_pieces, nf * 2)?;
        reserve(&mut read_wrs, nf * 2)?;
        let mut wr_array = Vec::new();
        reserve(&mut wr_array, nf * 2 + 1)?;
        let free_ctx = FreeList::new(n).map_err(|_| CallError::NoMemory)?;
        let returns = Arc::new(Returns::new(n)?);
        let mut errors = VecDeque::new();
        errors
            .try_reserve_exact(DEFERRED_ERRORS)
            .map_err(|_| CallError::NoMemory)?;
        // The endpoint core last, straight into the value returned (no fallible step after
        // it), so the compiler builds it in place: one copy of the endpoint on the stack.
        Ok(Responder {
            ep: Endpoint::new(cfg, resources, pages)?,
            closing: false,
            recvs_started: false,
            recv_posted: 0,
            ctxs,
            free_ctx,
            read_queue,
            job: ReadJob::default(),
            read_pieces,
            read_wrs,
            pieces,
            wrs,
            wr_array,
            errors,
            ddp_in_use: 0,
            returns,
            share: None,
        })
    }

    /// Make this connection's RDMA Reads draw on a server-wide page budget too (see
    /// [`shared_pages`](super::shared_pages)): a call's read job then starts only when
    /// the budget admits its pages, besides `max_ddp_bytes`; otherwise the call waits (the
    /// requester is throttled by its credits), retried at every [`poll`](Self::poll) and
    /// whenever a context ends or a Send completes. Set it before the first `poll`.
    pub fn set_page_share(&mut self, share: PageShare) {
        debug_assert!(self.ddp_in_use == 0, "page share set while pages are held");
        self.share = Some(share);
    }

    /// This connection's part in the server-wide page budget, if any.
    pub fn page_share(&self) -> Option<&PageShare> {
        self.share.as_ref()
    }

    /// Take `bytes` (rounded up to whole pages) of the server-wide page budget for the data
    /// of the reply to the call of `ctx`, before the upper layer takes those pages from the
    /// shared pool (an NFS READ's data). [`Admission::Take`]: the pages are this connection's
    /// until the reply's Send completes (or the call is dropped, or the connection lost); a
    /// wait ([`Admission::OverShare`] / [`Admission::NoRoom`]): keep the call and ask again
    /// after the next [`poll`](Self::poll), as the read jobs' calls wait — a connection over
    /// its fair share waits, another's ordinary call does not. Without a page share, or for
    /// 0 bytes, always `Take`. The caller bounds `bytes` (by its largest reply data, which
    /// must be within the budget); a stale `ctx` is admitted and charges nothing.
    pub fn take_reply_pages(&mut self, ctx: &ReplyCtx, bytes: usize) -> Admission {
        let pages = bytes
            .div_ceil(mbuf::PAGE_SIZE)
            .saturating_mul(mbuf::PAGE_SIZE);
        if pages == 0 || !self.is_handed(ctx) {
            return Admission::Take;
        }
        let Some(share) = self.share.as_mut() else {
            return Admission::Take;
        };
        let admission = share.try_take(pages);
        if admission == Admission::Take {
            if let Some(c) = self.ctxs.get_mut(ctx.idx as usize) {
                c.reply_bytes = c.reply_bytes.saturating_add(pages);
            }
        } else {
            self.ep.counters.shared_budget_waits += 1;
        }
        admission
    }

    /// Give back `bytes` of the page budget (a context ended, a reply's Send completed).
    fn give_pages(&mut self, bytes: usize) {
        if bytes > 0 {
            if let Some(share) = self.share.as_mut() {
                share.give(bytes);
            }
        }
    }

    /// How many calls may be live at once (the contexts, `max_requests`).
    pub fn contexts(&self) -> usize {
        self.ctxs.len()
    }

    /// Contexts in use: calls received and not yet replied to or dropped (a dropped
    /// [`ReplyCtx`] counts until the next poll reclaims it).
    pub fn calls_in_progress(&self) -> usize {
        self.ctxs.len().saturating_sub(self.free_ctx.len())
    }

    /// Calls received whose RDMA Reads wait for pages (the connection's DDP budget or the
    /// server-wide one): a server loop should poll again soon rather than sleep long, as the
    /// pages may come back from another connection, which wakes nothing here.
    pub fn calls_waiting_for_pages(&self) -> bool {
        self.job.ctx.is_none() && !self.read_queue.is_empty()
    }

    /// Our 8-byte RFC 8797 private data, for the CM accept.
    pub fn private_data(&self) -> [u8; CM_PRIVATE_LEN] {
        self.ep.private_data()
    }

    /// Statistics.
    pub fn counters(&self) -> &Counters {
        &self.ep.counters
    }

    /// The thresholds in force.
    pub fn thresholds(&self) -> InlineThresholds {
        self.ep.thresholds
    }

    /// The credit grant sent in replies: the Receives posted, at most `max_requests`.
    pub fn grant(&self) -> u32 {
        self.recv_posted.min(self.ep.cfg.max_requests).max(1)
    }

    /// Post every receive buffer once (done by `poll`; exposed for providers that need
    /// Receives posted before the connection is accepted).
    pub fn post_receives<P: Provider>(&mut self, prov: &mut P) {
        if self.recvs_started || self.ep.lost {
            return;
        }
        let mut ok = true;
        for b in 0..self.ep.res.recv_bufs {
            if prov.post_recv(&[b]).is_ok() {
                self.recv_posted += 1;
            } else {
                ok = false;
                break;
            }
        }
        self.recvs_started = ok || self.recv_posted > 0;
    }

    /// Reap completions and connection events; hand up calls. Never blocks.
    pub fn poll<P: Provider>(&mut self, prov: &mut P, events: &mut impl FnMut(ResponderEvent)) {
        self.poll_bounded(prov, usize::MAX, events);
    }

    /// [`poll`](Self::poll) with a work budget: connection events, then at most `budget`
    /// completions. True when everything pending was handled; false when the budget ran out
    /// (call again).
    pub fn poll_bounded<P: Provider>(
        &mut self,
        prov: &mut P,
        budget: usize,
        events: &mut impl FnMut(ResponderEvent),
    ) -> bool {
        while let Some(ev) = self.ep.next_cm_event(prov) {
            match ev {
                Cm::Connected(t) => {
                    self.post_receives(prov);
                    events(ResponderEvent::Connected(t));
                }
                Cm::Disconnected => self.lose(events),
            }
        }
        self.post_receives(prov);
        if self.reclaim() {
            self.pump_reads(prov, events);
        }
        let done = drain_cq_bounded(prov, budget, |prov, wc| {
            self.on_completion(prov, wc, events)
        });
        // Calls waiting for pages another connection may have given back meanwhile.
        if self.calls_waiting_for_pages() {
            self.pump_reads(prov, events);
        }
        self.flush_errors(prov);
        if self.closing {
            self.lose(events);
        }
        done
    }

    /// Page bytes that live calls' read chunks hold (at most `max_ddp_bytes`, or one call's
    /// worth when a single call needs more than that).
    pub fn ddp_bytes_in_use(&self) -> usize {
        self.ddp_in_use
    }

    /// `RDMA_ERROR`s waiting for a send buffer.
    pub fn deferred_errors(&self) -> usize {
        self.errors.len()
    }

    /// The upper layer will not answer this call (a duplicate-request cache hit, an RPCSEC_GSS
    /// sequence outside the window): its context, pages charge and credit come back at once.
    /// Calls waiting for the DDP budget may start, so this may hand up calls.
    ///
    /// # Errors
    /// [`ReplyError::StaleContext`] for a context that is unknown or already used.
    pub fn drop_call<P: Provider>(
        &mut self,
        prov: &mut P,
        ctx: ReplyCtx,
        events: &mut impl FnMut(ResponderEvent),
    ) -> Result<(), ReplyError> {
        let (valid, idx) = (self.is_handed(&ctx), ctx.idx);
        ctx.consume();
        if !valid {
            return Err(ReplyError::StaleContext);
        }
        self.ep.counters.calls_dropped += 1;
        self.release_ctx(idx);
        self.pump_reads(prov, events);
        Ok(())
    }

    /// Whether `ctx` is this Responder's (not another connection's) and its context is
    /// still the handed-up call it names.
    fn is_handed(&self, ctx: &ReplyCtx) -> bool {
        ctx.returns
            .as_ref()
            .is_some_and(|r| Arc::ptr_eq(r, &self.returns))
            && self
                .ctxs
                .get(ctx.idx as usize)
                .is_some_and(|c| c.state == CtxState::Handed && c.generation == ctx.generation)
    }

    /// Give back the contexts whose [`ReplyCtx`] was dropped unconsumed (see there); true if
    /// any was (calls waiting for the DDP budget may start: the caller pumps the reads).
    /// Costs one atomic load when nothing was dropped.
    fn reclaim(&mut self) -> bool {
        if self.returns.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        self.returns.count.store(0, Ordering::Release);
        let mut any = false;
        for i in 0..self.ctxs.len() {
            let Some(slot) = self.returns.dropped.get(i) else {
                break;
            };
            let g = slot.load(Ordering::Acquire);
            if g == 0 {
                continue;
            }
            // Only the value read: a drop racing with this scan (its count added after the
            // store above) stays for the next reclaim.
            let _ = slot.compare_exchange(g, 0, Ordering::AcqRel, Ordering::Relaxed);
            // A mark of a context already gone (the connection's loss released it) is
            // just cleared.
            let live = self
                .ctxs
                .get(i)
                .is_some_and(|c| c.state == CtxState::Handed && c.generation == g);
            if live {
                self.ep.counters.contexts_reclaimed += 1;
                self.release_ctx(i as u32);
                any = true;
            }
        }
        any
    }

    /// We can neither answer nor refuse: close the connection (RFC 8166 §4.5.4). The loss is
    /// reported by the next `poll` (and by the provider's own `Disconnected`).
    fn close<P: Provider>(&mut self, prov: &mut P) {
        if self.ep.lost || self.closing {
            return;
        }
        self.closing = true;
        self.ep.counters.closes += 1;
        prov.disconnect();
    }

    fn on_completion<P: Provider>(
        &mut self,
        prov: &mut P,
        wc: &Completion,
        events: &mut impl FnMut(ResponderEvent),
    ) {
        if self.ep.lost || self.closing {
            return;
        }
        if wc.status != WcStatus::Success {
            self.lose(events);
            return;
        }
        match wc.kind {
            WcKind::Recv { buf } => {
                self.recv_posted = self.recv_posted.saturating_sub(1);
                self.on_recv(prov, buf, wc.byte_len, events);
                // The payload was copied out: repost at once, so the grant stays honest. A
                // buffer that cannot be reposted would shrink the grant for good: close, as
                // Linux's svcrdma does.
                if prov.post_recv(&[buf]).is_ok() {
                    self.recv_posted += 1;
                } else {
                    self.close(prov);
                }
            }
            WcKind::Send => match WrTag::decode(wc.wr_id) {
                Some(WrTag::Send(buf)) => {
                    // The reply's pages are free: so is what they held of the page budget.
                    let charged = self.ep.send.take_charge(buf);
                    self.give_pages(charged);
                    // The reply's storage builds the next call handed up.
                    if let Some(reply) = self.ep.send.complete_take(buf) {
                        self.ep.chains.recycle(reply);
                    }
                    // A send buffer and send-queue room came free: owed errors first, then a
                    // read job that stalled on a full send queue or on the DDP budget.
                    self.flush_errors(prov);
                    self.pump_reads(prov, events);
                }
                Some(WrTag::Read(idx)) if self.job.ctx == Some(idx) => {
                    self.job.in_flight = self.job.in_flight.saturating_sub(1);
                    self.pump_reads(prov, events);
                }
                _ => {}
            },
        }
    }

    /// Answer a refused message with `RDMA_ERROR`, now or, with no send buffer free, once one
    /// is (in order); with the deferred queue full or the provider failing, close (RFC 8166
    /// §4.5.4: a responder that can neither reply nor send an error closes the connection).
    fn send_error<P: Provider>(&mut self, prov: &mut P, r: Refusal) {
        if self.ep.lost || self.closing {
            return;
        }
        if self.errors.is_empty() {
            match self.try_send_error(prov, r) {
                Ok(()) => return,
                Err(CallError::WouldBlock) => {}
                Err(_) => return self.close(prov),
            }
        }
        self.ep.counters.resource_stalls += 1;
        if self.errors.len() >= DEFERRED_ERRORS {
            self.close(prov);
        } else {
            // Within the capacity reserved at creation: no allocation.
            self.errors.push_back(r);
        }
    }

    /// Send the owed `RDMA_ERROR`s that fit now.
    fn flush_errors<P: Provider>(&mut self, prov: &mut P) {
        while let Some(&r) = self.errors.front() {
            if self.ep.lost || self.closing {
                self.errors.clear();
                return;
            }
            match self.try_send_error(prov, r) {
                Ok(()) => {
                    self.errors.pop_front();
                }
                Err(CallError::WouldBlock) => return,
                Err(_) => return self.close(prov),
            }
        }
    }

    fn try_send_error<P: Provider>(&mut self, prov: &mut P, r: Refusal) -> Result<(), CallError> {
        let buf = self.ep.send.get().ok_or(CallError::WouldBlock)?;
        let credit = self.grant();
        let body = ErrorBody::for_code(r.code);
        let len = match prov
            .send_buf(buf)
            .map(|b| encode_error(b, r.xid, r.vers, credit, body))
        {
            Ok(Ok(n)) => n,
            _ => {
                self.ep.send.complete(buf);
                return Err(CallError::BadConfig);
            }
        };
        let wr = SendWr {
            wr_id: WrTag::Send(buf).encode(),
            op: SendOp::Send {
                buf,
                len: u32::try_from(len).unwrap_or(0),
                invalidate: None,
            },
            signaled: true,
        };
        if let Err(e) = prov.post_send(&[wr]) {
            self.ep.send.complete(buf);
            return Err(e.into());
        }
        match r.code {
            ErrorCode::Vers => self.ep.counters.err_vers_sent += 1,
            ErrorCode::Chunk => self.ep.counters.err_chunk_sent += 1,
        }
        self.ep.counters.inline_bytes_sent += len as u64;
        Ok(())
    }

    fn on_recv<P: Provider>(
        &mut self,
        prov: &mut P,
        buf: u32,
        len: u32,
        events: &mut impl FnMut(ResponderEvent),
    ) {
        self.ep.counters.inline_bytes_received += u64::from(len);
        // A call finding every context taken may find one its upper layer dropped.
        if self.free_ctx.is_empty() && self.reclaim() {
            self.pump_reads(prov, events);
        }
        let received = match prov.recv_buf(buf) {
            Ok(data) => match data.get(..len as usize) {
                Some(d) => self.parse_call(d),
                None => Received::Discard,
            },
            Err(_) => Received::Discard,
        };
        match received {
            Received::Call(idx) => {
                if self
                    .ctxs
                    .get(idx as usize)
                    .is_some_and(|c| c.state == CtxState::Reading)
                {
                    // Never full: it holds contexts, and there are as many slots as contexts.
                    if self.read_queue.len() < self.read_queue.capacity() {
                        self.read_queue.push_back(idx);
                    } else {
                        debug_assert!(false, "read queue full: more calls than contexts");
                    }
                    self.pump_reads(prov, events);
                } else {
                    self.hand_up(idx, events);
                }
            }
            Received::Discard => self.ep.counters.bad_messages += 1,
            Received::Refuse(r) => {
                self.ep.counters.bad_messages += 1;
                self.send_error(prov, r);
            }
            Received::Close => self.close(prov),
        }
    }

    /// Validate a received message and, for a call, fill a context: every number the peer
    /// sent is checked (positions, lengths, 64-bit offsets) before anything is allocated.
    fn parse_call(&mut self, data: &[u8]) -> Received {
        // RFC 8166 §4.5: shorter than the smallest header (xid, vers, credit, proc and three
        // empty lists) is not a message to answer.
        if data.len() < MIN_HEADER_LEN {
            return Received::Discard;
        }
        let hdr = match Header::new_checked(data) {
            Ok(h) => h,
            Err(e) => {
                return match e.xid().filter(|_| e.should_reply()) {
                    Some(xid) => Received::Refuse(Refusal {
                        xid,
                        vers: e.request_vers(),
                        code: e.reply_error(),
                    }),
                    None => Received::Discard,
                };
            }
        };
        let xid = hdr.xid();
        let refuse = Received::Refuse(Refusal::chunk(xid));
        let nomsg = match hdr.proc_() {
            Proc::Msg => false,
            Proc::NoMsg => true,
            // An RDMA_ERROR from a requester is never answered.
            _ => return Received::Discard,
        };
        let payload = hdr.payload();
        // Semantic checks the codec leaves to us (RFC 8166 §4.5.2: ERR_CHUNK).
        let mut chunks: heapless::Vec<(u32, u32), MAX_CALL_CHUNKS> = heapless::Vec::new();
        let mut call_bytes = 0u64;
        let budget = ReadBudget {
            max_chunk_bytes: self.ep.cfg.max_chunk_bytes,
            max_call_ddp_bytes: self.ep.cfg.max_call_ddp_bytes,
        };
        // Each list is looked at only when present (a small call has none).
        let has_reads = hdr.read_list().next().is_some();
        if has_reads {
            for (pos, segs) in hdr.read_chunks() {
                let Some(total) = budget.admit(&mut call_bytes, segs.total_length()) else {
                    return refuse;
                };
                if segs.clone().any(|s| s.end().is_none()) || chunks.push((pos, total)).is_err() {
                    return refuse;
                }
            }
        }
        let has_writes = hdr.write_list().next().is_some();
        let reply_chunk = hdr.reply_chunk();
        // The requester's write and reply chunks: a segment whose end overflows 64 bits can
        // never be written.
        let bad_target = (has_writes
            && hdr
                .write_list()
                .any(|c| c.segments().any(|s| s.end().is_none())))
            || reply_chunk.is_some_and(|c| c.segments().any(|s| s.end().is_none()));
        if bad_target {
            return refuse;
        }
        // The XDR stream the other read chunks are placed in (RFC 8166 §3.5.3).
        if !positions_fit(&chunks, nomsg, payload.len()) {
            return refuse;
        }
        let Some(idx) = self.free_ctx.pop() else {
            // More calls than credits granted (the requester broke RFC 8166 §3.3.1): refused,
            // not dropped, so its caller learns at once.
            return refuse;
        };
        // The inline part, copied out of the receive buffer (reposted right after) into a
        // chain of the pool.
        let body = if nomsg { &[][..] } else { payload };
        let Ok(inline) = self.ep.chains.chain_from_bytes(body) else {
            // Out of memory for a few KiB: we cannot hold the call, and a refusal would tell
            // the requester its chunks were wrong; close (RFC 8166 §4.5.4), the requester
            // retransmits on a new connection.
            self.free_ctx.push(idx);
            return Received::Close;
        };
        let Some(ctx) = self.ctxs.get_mut(idx as usize) else {
            debug_assert!(false, "free context index out of range");
            return Received::Discard;
        };
        // Everything the reply needs is stored once, in place.
        ctx.reads.clear();
        ctx.write_segs.clear();
        ctx.write_ends.clear();
        // Where each segment's data lands in the call chain: a chunk's data starts at its XDR
        // position (the inline bytes before it plus the earlier chunks and pads). A Long
        // Call's chunks are read back to back (the position-zero chunk first) and spliced
        // once all are read (`assemble_long_call`).
        let mut back_to_back = 0usize;
        let mut fits = true;
        if has_reads {
            for (pos, segs) in hdr.read_chunks() {
                let mut off = if nomsg { back_to_back } else { pos as usize };
                for seg in segs {
                    fits &= ctx.reads.push((seg, off)).is_ok();
                    off += seg.length as usize;
                }
                back_to_back = off;
            }
        }
        if has_writes {
            for chunk in hdr.write_list().take(MAX_WRITE_CHUNKS) {
                for seg in chunk.segments() {
                    fits &= ctx.write_segs.push(seg).is_ok();
                }
                fits &= ctx.write_ends.push(ctx.write_segs.len() as u8).is_ok();
            }
        }
        ctx.reply_segs.clear();
        ctx.has_reply = false;
        if let Some(c) = reply_chunk {
            ctx.has_reply = true;
            for seg in c.segments() {
                fits &= ctx.reply_segs.push(seg).is_ok();
            }
        }
        // Send With Invalidate of the first chunk's first handle, from the lists just stored.
        // (Linux's svc_rdma_get_inv_rkey is stricter: it uses Send With Invalidate only when
        // every segment carries the same handle. Ours is also safe: the requester
        // Local-Invalidates whatever the Send did not revoke.)
        let inv_handle = if self.ep.thresholds.send_with_invalidate {
            ctx.reads
                .first()
                .map(|(s, _)| s.handle)
                .or_else(|| {
                    // The first Write chunk's first segment (none if that chunk is empty).
                    let first_chunk_segs = ctx.write_ends.first().copied().unwrap_or(0);
                    ctx.write_segs
                        .first()
                        .filter(|_| first_chunk_segs > 0)
                        .map(|s| s.handle)
                })
                .or_else(|| ctx.reply_segs.first().map(|s| s.handle))
        } else {
            None
        };
        if !fits {
            // The codec's limits bound every list: cannot happen for a checked header.
            debug_assert!(false, "checked header beyond the context's lists");
            ctx.reads.clear();
            self.free_ctx.push(idx);
            return refuse;
        }
        // Never 0: 0 marks "nothing dropped" in the shared table of returns.
        ctx.generation = ctx.generation.wrapping_add(1).max(1);
        ctx.xid = xid;
        ctx.inv_handle = inv_handle;
        ctx.nomsg = nomsg;
        ctx.ddp_bytes = 0;
        if chunks.is_empty() {
            ctx.call = Some(inline);
            ctx.inline = None;
            ctx.state = CtxState::Handed;
        } else {
            self.ep.counters.read_chunks += chunks.len() as u64;
            if nomsg {
                self.ep.counters.long_calls += 1;
            }
            ctx.call = None;
            ctx.inline = Some(inline);
            ctx.state = CtxState::Reading;
        }
        ctx.chunks = chunks;
        Received::Call(idx)
    }

    /// Put a waiting call's pages in: inline pieces, a DDP marker and fresh pages for each
    /// read chunk, XDR pads, the rest of the inline XDR; for a Long Call, fresh pages for its
    /// chunks back to back. Charges the pages to the budget.
    fn build_call(&mut self, idx: u32) -> Result<(), CallError> {
        let ctx = self.ctxs.get_mut(idx as usize).ok_or(CallError::BadCall)?;
        let pages = &self.ep.pages;
        let chunks = &ctx.chunks;
        let charged = ctx.read_bytes();
        // Mbufs the call will have: the inline ones (one more where a chunk splits one), and
        // per chunk a marker, its page mbufs and a pad.
        let per_mbuf = mbuf::MAX_PGS_PER_MBUF * mbuf::PAGE_SIZE;
        let need = ctx.inline.as_ref().map_or(0, Chain::mbuf_count)
            + chunks
                .iter()
                .map(|&(_, t)| 3 + (t as usize).div_ceil(per_mbuf))
                .sum::<usize>();
        let mut call = self.ep.chains.chain_with(need);
        if ctx.nomsg {
            for &(_, total) in chunks {
                call.append_pages(pages, total as usize)?;
            }
        } else {
            let inline = ctx.inline.take().unwrap_or_default();
            splice(&mut call, inline, chunks, |i, call| {
                let total = chunks.get(i).map_or(0, |c| c.1 as usize);
                Ok(call.append_pages(pages, total)?)
            })?;
        }
        ctx.call = Some(call);
        ctx.ddp_bytes = charged;
        self.ddp_in_use += charged;
        Ok(())
    }

    /// A Long Call with further read chunks, all read: the position-zero chunk's bytes are
    /// the XDR stream, the other chunks' pages go in at their positions (RFC 8166 §3.5.3).
    fn assemble_long_call(&mut self, idx: u32) -> Result<(), CallError> {
        let ctx = self.ctxs.get_mut(idx as usize).ok_or(CallError::BadCall)?;
        if !ctx.nomsg || ctx.chunks.len() < 2 {
            return Ok(());
        }
        let mut stream = ctx.call.take().ok_or(CallError::BadCall)?;
        let total0 = ctx.chunks.first().map_or(0, |c| c.1 as usize);
        let mut data = stream.split(total0)?;
        let others = ctx.chunks.get(1..).unwrap_or_default();
        let need = stream.mbuf_count() + data.mbuf_count() + 3 * others.len();
        let mut call = self.ep.chains.chain_with(need);
        splice(&mut call, stream, others, |i, call| {
            let len = others.get(i).map_or(0, |c| c.1 as usize);
            let tail = data.split(len)?;
            Ok(call.cat(core::mem::replace(&mut data, tail))?)
        })?;
        ctx.call = Some(call);
        Ok(())
    }

    fn hand_up(&mut self, idx: u32, events: &mut impl FnMut(ResponderEvent)) {
        let Some(ctx) = self.ctxs.get_mut(idx as usize) else {
            debug_assert!(false, "hand-up of a context out of range");
            return;
        };
        ctx.state = CtxState::Handed;
        let Some(call) = ctx.call.take() else {
            // Every path here built the call first. Were it missing, nobody would ever answer
            // the context: give it (and its credit and pages charge) back instead of leaking.
            debug_assert!(false, "hand-up of a context without its call");
            self.release_ctx(idx);
            return;
        };
        self.ep.counters.messages_received += 1;
        events(ResponderEvent::Call(Incoming {
            xid: ctx.xid,
            call,
            ctx: ReplyCtx {
                idx,
                generation: ctx.generation,
                returns: Some(Arc::clone(&self.returns)),
            },
        }));
    }

    /// Plan and post RDMA Reads for the context at the head of the read queue, respecting
    /// `max_rd_atomic`; hand up calls whose reads are all done.
    fn pump_reads<P: Provider>(&mut self, prov: &mut P, events: &mut impl FnMut(ResponderEvent)) {
        loop {
            if self.ep.lost || self.closing {
                return;
            }
            let Some(idx) = self.job.ctx.or_else(|| self.start_job(prov)) else {
                return;
            };
            let max = self.ep.res.max_rd_atomic.max(1);
            while self.job.in_flight < max {
                let Some(d) = self.read_wrs.get(self.job.next_wr) else {
                    break;
                };
                let Some(local) = self.read_pieces.get(d.pieces.clone()) else {
                    break;
                };
                let wr = SendWr {
                    wr_id: WrTag::Read(idx).encode(),
                    op: SendOp::RdmaRead {
                        local,
                        handle: d.handle,
                        offset: d.offset,
                    },
                    signaled: true,
                };
                match prov.post_send(&[wr]) {
                    Ok(()) => {
                        self.ep.counters.rdma_read_bytes += u64::from(d.len);
                        self.job.next_wr += 1;
                        self.job.in_flight += 1;
                    }
                    // Room comes back with the next Read or Send completion.
                    Err(ProviderError::Busy) => return,
                    // Anything else will not get better: the call could wait forever.
                    Err(_) => return self.close(prov),
                }
            }
            if self.job.next_wr < self.read_wrs.len() || self.job.in_flight > 0 {
                return;
            }
            self.job = ReadJob::default();
            if self.assemble_long_call(idx).is_err() {
                // Out of memory splitting a few mbufs: neither answerable nor refusable.
                self.release_ctx(idx);
                self.close(prov);
                return;
            }
            self.hand_up(idx, events);
        }
    }

    /// Take the next context needing reads, put its pages in and plan its work requests.
    /// The head of the queue waits while its pages would take the connection over
    /// `max_ddp_bytes` (unless nothing else holds pages: one call within `max_call_ddp_bytes`
    /// always proceeds), or while the server-wide [`PageShare`] does not admit its pages; it
    /// is retried at every poll, when a context ends or a Send completes.
    fn start_job<P: Provider>(&mut self, prov: &mut P) -> Option<u32> {
        while let Some(&idx) = self.read_queue.front() {
            let need = self.ctxs.get(idx as usize).map_or(0, CallCtx::read_bytes);
            if self.ddp_in_use > 0
                && self.ddp_in_use.saturating_add(need) > self.ep.cfg.max_ddp_bytes as usize
            {
                self.ep.counters.ddp_budget_waits += 1;
                return None;
            }
            if let Some(share) = self.share.as_mut() {
                let pages = self
                    .ctxs
                    .get(idx as usize)
                    .map_or(0, CallCtx::read_page_bytes);
                if share.try_take(pages) != Admission::Take {
                    self.ep.counters.shared_budget_waits += 1;
                    return None;
                }
                // Given back by `release_ctx`, whatever happens to the call from here.
                if let Some(ctx) = self.ctxs.get_mut(idx as usize) {
                    ctx.shared_bytes = pages;
                }
            }
            self.read_queue.pop_front();
            match self.build_call(idx) {
                Ok(()) => {}
                Err(_) => {
                    // No pages: we can neither take the call nor say its chunks were wrong.
                    // Close (RFC 8166 §4.5.4); the requester retransmits after reconnecting.
                    self.release_ctx(idx);
                    self.close(prov);
                    return None;
                }
            }
            if !self.plan_reads(idx) {
                // More pieces or work requests than our limits: refuse it (RFC 8166 §8.1.4).
                let xid = self.ctxs.get(idx as usize).map_or(0, |c| c.xid);
                self.release_ctx(idx);
                self.ep.counters.bad_messages += 1;
                self.send_error(prov, Refusal::chunk(xid));
                continue;
            }
            self.job = ReadJob {
                ctx: Some(idx),
                next_wr: 0,
                in_flight: 0,
            };
            return Some(idx);
        }
        None
    }

    /// Plan the RDMA Reads of a built call into `read_pieces` / `read_wrs`; false if they do
    /// not fit.
    fn plan_reads(&mut self, idx: u32) -> bool {
        // The caller built the call in this context just before: both always hold (false
        // would refuse the call, not leak it).
        let Some(ctx) = self.ctxs.get(idx as usize) else {
            debug_assert!(false, "read plan of a context out of range");
            return false;
        };
        let Some(call) = ctx.call.as_ref() else {
            debug_assert!(false, "read plan of a context without its call");
            return false;
        };
        self.read_pieces.clear();
        self.read_wrs.clear();
        for (seg, off) in ctx.reads.iter() {
            self.ep.frags.clear();
            let Ok(it) = call.page_fragments_in(*off..*off + seg.length as usize) else {
                return false;
            };
            for f in it {
                if self.ep.frags.len() >= self.ep.frags.capacity() {
                    return false;
                }
                self.ep.frags.push(f);
            }
            if plan(
                &self.ep.frags,
                core::iter::once(*seg),
                self.ep.res.max_sge as usize,
                &mut self.read_pieces,
                &mut self.read_wrs,
            )
            .is_err()
            {
                return false;
            }
        }
        true
    }

    fn release_ctx(&mut self, idx: u32) {
        if let Some(ctx) = self.ctxs.get_mut(idx as usize) {
            ctx.state = CtxState::Free;
            ctx.call = None;
            ctx.inline = None;
            ctx.chunks.clear();
            self.ddp_in_use = self.ddp_in_use.saturating_sub(ctx.ddp_bytes);
            ctx.ddp_bytes = 0;
            let charged = ctx.shared_bytes.saturating_add(ctx.reply_bytes);
            ctx.shared_bytes = 0;
            ctx.reply_bytes = 0;
            ctx.reads.clear();
            ctx.write_segs.clear();
            ctx.write_ends.clear();
            ctx.reply_segs.clear();
            ctx.has_reply = false;
            self.free_ctx.push(idx);
            self.give_pages(charged);
        }
    }

    /// Send the reply to a call. A DDP region of `reply` goes by RDMA Write into the
    /// requester's write chunk (no pad written, segment lengths set to the bytes written,
    /// region and pad removed from the inline reply); a reply too large for inline goes into
    /// the reply chunk (Long Reply, `RDMA_NOMSG`); then the header is sent, with Send With
    /// Invalidate of the requester's first chunk handle when the peer accepts it (RFC 8797).
    ///
    /// # Errors
    /// See [`ReplyError`].
    pub fn reply<P: Provider>(
        &mut self,
        prov: &mut P,
        ctx: ReplyCtx,
        reply: Chain,
    ) -> Result<(), ReplyError> {
        let valid = self.is_handed(&ctx);
        if self.ep.lost || self.closing {
            ctx.consume();
            return Err(ReplyError::ConnectionLost);
        }
        if !valid {
            ctx.consume();
            return Err(ReplyError::StaleContext);
        }
        let Some(buf) = self.ep.send.get() else {
            self.ep.counters.resource_stalls += 1;
            return Err(ReplyError::WouldBlock { ctx, reply });
        };
        let idx = ctx.idx;
        let result = match self.build_reply(prov, idx, buf, reply) {
            Err((_, Some(reply))) => {
                self.ep.send.complete(buf);
                self.ep.counters.resource_stalls += 1;
                return Err(ReplyError::WouldBlock { ctx, reply });
            }
            Ok(()) => Ok(()),
            Err((e, None)) => Err(e),
        };
        // Every other outcome consumes the context.
        ctx.consume();
        match result {
            Ok(()) => {
                // The reply's pages (READ data taken with `take_reply_pages`) live until its
                // Send completes: their part of the page budget goes with the Send.
                if let Some(c) = self.ctxs.get_mut(idx as usize) {
                    let charged = core::mem::take(&mut c.reply_bytes);
                    self.ep.send.charge(buf, charged);
                }
                self.release_ctx(idx);
                Ok(())
            }
            Err(CallError::TooLarge) => {
                self.ep.send.complete(buf);
                let xid = self.ctxs.get(idx as usize).map_or(0, |c| c.xid);
                self.send_error(prov, Refusal::chunk(xid));
                self.release_ctx(idx);
                Err(ReplyError::ChunkError)
            }
            Err(e) => {
                // The reply cannot be built (memory, an unaligned DDP region): the requester
                // gets ERR_CHUNK rather than silence. A provider failure means the queue pair
                // is unusable: close (RFC 8166 §4.5.4).
                self.ep.send.complete(buf);
                let xid = self.ctxs.get(idx as usize).map_or(0, |c| c.xid);
                self.release_ctx(idx);
                match e {
                    CallError::ConnectionLost | CallError::Provider(_) => self.close(prov),
                    _ => self.send_error(prov, Refusal::chunk(xid)),
                }
                Err(ReplyError::Failed(e))
            }
        }
    }

    /// Build and post the reply. On a retryable failure the chain comes back.
    ///
    /// The header is encoded straight into the send buffer from the context's stored chunks:
    /// each Write chunk echoed with its segments' lengths set to what was written into them
    /// (filled in order, as [`plan`] fills them; zero for an unused chunk, RFC 8166 §4.3.2),
    /// the Reply chunk likewise (zero unless a Long Reply used it, §4.3.3).
    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    fn build_reply<P: Provider>(
        &mut self,
        prov: &mut P,
        idx: u32,
        buf: u32,
        reply: Chain,
    ) -> Result<(), (CallError, Option<Chain>)> {
        let fatal = |e| (e, None);
        let Some(ctx) = self.ctxs.get(idx as usize) else {
            return Err(fatal(CallError::BadCall));
        };
        let xid = ctx.xid;
        let inv = ctx.inv_handle;
        let credit = self.grant();
        self.pieces.clear();
        self.wrs.clear();
        // Counted only once the reply is posted (a refused or retried reply counts nothing).
        let mut tally = ReplyTally::default();
        // DDP regions → write chunks, in order (RFC 8166 §3.4.6).
        let all = reduce(&reply, false).map_err(fatal)?;
        let mut items: heapless::Vec<ReducedItem, MAX_WRITE_CHUNKS> = heapless::Vec::new();
        // Bytes written into each Write chunk (0: unused, or empty on purpose).
        let mut written = [0usize; MAX_WRITE_CHUNKS];
        for ((i, chunk), w) in ctx.write_chunks().enumerate().zip(written.iter_mut()) {
            let item = all.get(i);
            match (write_chunk_use(item.is_some(), chunk.is_empty()), item) {
                // The requester asks for this item inline (RFC 8166 §4.3.2.3); the chunk is
                // echoed empty.
                (WriteChunkUse::Inline, _) => {}
                (WriteChunkUse::Written, Some(item)) => {
                    self.ep.frags.clear();
                    for f in reply
                        .page_fragments_in(item.data())
                        .map_err(|e| fatal(e.into()))?
                    {
                        if self.ep.frags.len() >= self.ep.frags.capacity() {
                            return Err(fatal(CallError::TooLarge));
                        }
                        self.ep.frags.push(f);
                    }
                    plan(
                        &self.ep.frags,
                        chunk.iter().copied(),
                        self.ep.res.max_sge as usize,
                        &mut self.pieces,
                        &mut self.wrs,
                    )
                    .map_err(fatal)?;
                    let _ = items.push(*item);
                    *w = item.len;
                    tally.write_chunks += 1;
                    tally.rdma_write_bytes += item.len as u64;
                }
                // Unused write chunk: returned with zero lengths.
                _ => {}
            }
        }
        // Items with no (or an empty) write chunk: the DDP data travels inline (a copy).
        let placed: usize = items.iter().map(|it| it.len).sum();
        let ddp_total: usize = all.iter().map(|it| it.len).sum();
        tally.ddp_payload_copied_bytes += ddp_total.saturating_sub(placed) as u64;
        let total = reply.len();
        let inline = inline_len(total, &items);
        let reply_segs = ctx.reply_chunk().map(<[Segment]>::len);
        let max_send = self.ep.max_send();
        let hlen = header_len(0, ctx.write_chunks().map(<[Segment]>::len), reply_segs);
        let long = reply_plan::is_long(hlen, inline, max_send);
        // A Long Reply: what stays inline goes through the reply chunk instead, from the reply's
        // own pages and, for the other bytes, from pages pulled up into this send context.
        let mut reply_written = 0usize;
        if long {
            reply_written = self
                .plan_long_reply(idx, buf, &reply, &items, &mut tally)
                .map_err(fatal)?;
        }
        let Some(ctx) = self.ctxs.get(idx as usize) else {
            return Err(fatal(CallError::BadCall));
        };
        let send_len = {
            let sb = prov.send_buf(buf).map_err(|e| fatal(e.into()))?;
            let mut enc = HeaderEncoder::begin(sb, xid, credit, long).map_err(too_large)?;
            for (chunk, &w) in ctx.write_chunks().zip(written.iter()) {
                enc.write_chunk(sb, written_segments(chunk, w))
                    .map_err(too_large)?;
            }
            let rc = ctx
                .reply_chunk()
                .map(|c| written_segments(c, reply_written));
            let h = enc.finish(sb, rc).map_err(too_large)?;
            if long {
                h
            } else {
                let rest = sb.get_mut(h..).ok_or(fatal(CallError::TooLarge))?;
                h + copy_inline(&reply, &items, rest).map_err(fatal)?
            }
        };
        let send_wr = SendWr {
            wr_id: WrTag::Send(buf).encode(),
            op: SendOp::Send {
                buf,
                len: u32::try_from(send_len).map_err(|_| fatal(CallError::TooLarge))?,
                invalidate: inv,
            },
            signaled: true,
        };
        if self.wrs.len() + 1 > self.ep.res.max_send_wr as usize {
            return Err(fatal(CallError::TooLarge));
        }
        if self.wrs.is_empty() {
            // Small reply: one Send.
            return match prov.post_send(&[send_wr]) {
                Ok(()) => {
                    self.sent(buf, inv, send_len, reply, &tally);
                    Ok(())
                }
                Err(ProviderError::Busy) => Err((CallError::WouldBlock, Some(reply))),
                Err(other) => Err(fatal(other.into())),
            };
        }
        // The RDMA Writes and the Send, posted as one chain from the endpoint's array.
        let mut wrs: Vec<SendWr<'_>> = core::mem::take(&mut self.wr_array);
        wrs.clear();
        let built = wrs
            .try_reserve(self.wrs.len() + 1)
            .map_err(|_| CallError::NoMemory)
            .and_then(|()| {
                for d in &self.wrs {
                    let local = self
                        .pieces
                        .get(d.pieces.clone())
                        .ok_or(CallError::TooLarge)?;
                    wrs.push(SendWr {
                        wr_id: WrTag::Write.encode(),
                        op: SendOp::RdmaWrite {
                            local,
                            handle: d.handle,
                            offset: d.offset,
                        },
                        signaled: false,
                    });
                }
                wrs.push(send_wr);
                Ok(())
            });
        let posted = built.map_err(fatal).and_then(|()| {
            prov.post_send(&wrs).map_err(|e| match e {
                ProviderError::Busy => (CallError::WouldBlock, None),
                other => fatal(other.into()),
            })
        });
        self.wr_array = recycle_wrs(wrs);
        match posted {
            Ok(()) => {
                self.sent(buf, inv, send_len, reply, &tally);
                Ok(())
            }
            // Busy: the chain comes back for a retry.
            Err((CallError::WouldBlock, None)) => Err((CallError::WouldBlock, Some(reply))),
            Err(e) => Err(e),
        }
    }

    /// A Long Reply: what stays inline goes through the reply chunk instead, from the reply's
    /// own pages and, for the other bytes, from pages pulled up into send context `buf`.
    /// Plans its RDMA Writes after the write chunks' ones; returns the bytes it writes.
    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    fn plan_long_reply(
        &mut self,
        idx: u32,
        buf: u32,
        reply: &Chain,
        items: &[ReducedItem],
        tally: &mut ReplyTally,
    ) -> Result<usize, CallError> {
        let rc = self
            .ctxs
            .get(idx as usize)
            .and_then(CallCtx::reply_chunk)
            .ok_or(CallError::TooLarge)?;
        self.ep.frags.clear();
        let hold = self.ep.send.pullup(buf).ok_or(CallError::BadCall)?;
        let got = gather(
            reply,
            kept_ranges(reply.len(), items),
            &self.ep.pages,
            &mut self.ep.frags,
            hold,
        )?;
        if got.pulled > 0 {
            tally.pullup_copies += 1;
            tally.pullup_bytes += got.pulled as u64;
        }
        plan(
            &self.ep.frags,
            rc.iter().copied(),
            self.ep.res.max_sge as usize,
            &mut self.pieces,
            &mut self.wrs,
        )?;
        tally.long_replies += 1;
        tally.reply_chunks += 1;
        tally.rdma_write_bytes += got.bytes as u64;
        Ok(got.bytes)
    }

    /// Book-keeping after a reply was posted: keep its pages until the Send completes.
    fn sent(
        &mut self,
        buf: u32,
        inv: Option<u32>,
        send_len: usize,
        reply: Chain,
        tally: &ReplyTally,
    ) {
        let c = &mut self.ep.counters;
        c.write_chunks += tally.write_chunks;
        c.reply_chunks += tally.reply_chunks;
        c.long_replies += tally.long_replies;
        c.rdma_write_bytes += tally.rdma_write_bytes;
        c.pullup_copies += tally.pullup_copies;
        c.pullup_bytes += tally.pullup_bytes;
        c.ddp_payload_copied_bytes += tally.ddp_payload_copied_bytes;
        if inv.is_some() {
            self.ep.counters.send_with_invalidate += 1;
        }
        self.ep.counters.messages_sent += 1;
        self.ep.counters.inline_bytes_sent += send_len as u64;
        self.ep.send.hold(buf, reply);
    }

    /// Connection loss: every context dies, every page is freed.
    fn lose(&mut self, events: &mut impl FnMut(ResponderEvent)) {
        if self.ep.lost {
            return;
        }
        self.ep.lost = true;
        self.ep.counters.connection_losses += 1;
        for i in 0..self.ctxs.len() {
            let live = self.ctxs.get(i).is_some_and(|c| c.state != CtxState::Free);
            if live {
                self.ep.counters.calls_lost += 1;
                self.release_ctx(i as u32);
            }
        }
        self.read_queue.clear();
        if let Some(share) = self.share.as_mut() {
            share.stop_waiting();
        }
        self.job = ReadJob::default();
        let charged = self.ep.send.reset();
        self.give_pages(charged);
        self.errors.clear();
        self.closing = false;
        self.recv_posted = 0;
        events(ResponderEvent::ConnectionLost);
    }

    /// Inject a raw received message as if it came from the peer (tests and fuzzing of the
    /// validation path); returns what would be answered.
    #[doc(hidden)]
    pub fn classify(&mut self, data: &[u8]) -> Option<(u32, ErrorCode)> {
        match self.parse_call(data) {
            Received::Call(idx) => {
                self.release_ctx(idx);
                None
            }
            Received::Discard | Received::Close => None,
            Received::Refuse(r) => Some((r.xid, r.code)),
        }
    }
}

fn too_large<T>(_: T) -> (CallError, Option<Chain>) {
    (CallError::TooLarge, None)
}

/// Empty a work-request array and give it back its `'static` type, keeping its allocation:
/// the in-place `collect` of an empty vector into one of the same layout reuses the buffer
/// (the allocation test `transport_noalloc` would catch a regression).
fn recycle_wrs(mut wrs: Vec<SendWr<'_>>) -> Vec<SendWr<'static>> {
    wrs.clear();
    wrs.into_iter()
        .map(|w| SendWr {
            wr_id: w.wr_id,
            op: SendOp::LocalInv {
                reg: crate::provider::RegId(0),
            },
            signaled: w.signaled,
        })
        .collect()
}

/// What a reply adds to the [`Counters`] once it is posted (the fields a reply can change:
/// a whole `Counters` would cost more to zero and add than the reply itself).
#[derive(Debug, Default)]
struct ReplyTally {
    write_chunks: u64,
    reply_chunks: u64,
    long_replies: u64,
    rdma_write_bytes: u64,
    pullup_copies: u64,
    pullup_bytes: u64,
    ddp_payload_copied_bytes: u64,
}

/// Splice read chunks' data into the XDR stream `rest` at their positions (RFC 8166 §3.4.5):
/// `[XDR before][marker][data i][pad][XDR …]` for each chunk `(position, length)`, in order;
/// `data(i)` gives chunk `i`'s page mbufs. The pad is its own mbuf, so the DDP region is the
/// data alone. Positions were validated against the stream when the call was received;
/// checked again here, so no peer number can underflow or overrun.
fn splice(
    call: &mut Chain,
    mut rest: Chain,
    chunks: &[(u32, u32)],
    mut data: impl FnMut(usize, &mut Chain) -> Result<(), CallError>,
) -> Result<(), CallError> {
    let (mut inline_at, mut removed) = (0usize, 0usize);
    for (i, &(pos, total)) in chunks.iter().enumerate() {
        let total = total as usize;
        let at = (pos as usize)
            .checked_sub(removed)
            .ok_or(CallError::BadCall)?;
        let n = at.checked_sub(inline_at).ok_or(CallError::BadCall)?;
        // `rest` and its pieces come from the pool: no allocation in steady state.
        let tail = rest.split(n)?;
        call.cat(core::mem::replace(&mut rest, tail))?;
        inline_at = at;
        call.append_mbuf(Mbuf::ddp_marker())?;
        data(i, call)?;
        let pad = xdr_pad(total);
        if pad > 0 {
            call.append_mbuf(Mbuf::internal([0u8; 3].get(..pad).unwrap_or_default())?)?;
        }
        removed += total + pad;
    }
    if !rest.is_empty() {
        // Separate mbufs, so the pad stays its own mbuf.
        call.cat(rest)?;
    }
    Ok(())
}
