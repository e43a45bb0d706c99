//! The responder (server) side: recv-rdma of calls with ddp-read of read chunks, and
//! ddp-write / Long Reply / Send of replies.

use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;

use mbuf::{Chain, PageFragment, PageProvider};

use super::bounded::Bounded;
use super::config::TransportConfig;
use super::counters::Counters;
use super::endpoint::{Cm, Endpoint};
use super::error::{CallError, Fault};
use super::rdma_plan::WrDesc;
use super::read_chunks::MAX_CALL_CHUNKS;
use super::returns::{same_table, Returns};
use super::send_ctx::{FreeList, WrTag};
use super::shared_pages::PageShare;
use crate::provider::{
    drain_cq_bounded, Completion, Provider, Resources, SendWr, WcKind, WcStatus,
};
use crate::wire::{
    ErrorCode, InlineThresholds, Segment, CM_PRIVATE_LEN, MAX_CHUNK_SEGMENTS, MAX_READ_SEGMENTS,
    MAX_WRITE_CHUNKS,
};

mod read_job;
mod recv;
mod reply;
mod reverse;

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
            && same_table(&self.returns, &other.returns)
    }
}

impl Eq for ReplyCtx {}

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
    /// The reply to a reverse-direction call sent with [`Responder::reverse_call`]
    /// (RFC 8167).
    ReverseReply {
        /// XID of the reverse call.
        xid: u32,
        /// The RPC reply message (inline).
        reply: Chain,
    },
    /// A reverse-direction call that will get no reply: the connection was lost while it
    /// was outstanding (reported just before [`ConnectionLost`](Self::ConnectionLost)).
    ReverseFailed {
        /// XID of the reverse call.
        xid: u32,
    },
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
    /// The transport broke one of its own invariants building the reply (a bug): nothing was
    /// sent on the wire for it, the connection is closed (the next poll reports the loss).
    Internal,
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
            ReplyError::Internal => Fault::Bug,
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
            ReplyError::Internal => {
                f.write_str("transport invariant broken building the reply: connection closed")
            }
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
    /// Reverse-direction calls sent and not yet answered (RFC 8167).
    reverse: super::reverse::Slots,
    /// Reverse calls the requester's last reverse reply granted (1 until the first).
    reverse_grant: u32,
}

impl core::fmt::Debug for Responder {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Responder")
            .field("thresholds", &self.ep.thresholds())
            .field("recv_posted", &self.recv_posted)
            .field("lost", &self.ep.is_lost())
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
        let reverse = super::reverse::Slots::new(cfg.max_reverse_requests)
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
            reverse,
            reverse_grant: 1,
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

    /// Give back `bytes` of the page budget (a context ended, a reply's Send completed).
    fn give_pages(&mut self, bytes: usize) {
        if bytes > 0 {
            if let Some(share) = self.share.as_mut() {
                share.give(bytes);
            }
        }
    }

    /// The bytes the requester's first Write chunk offers for the reply to the call of
    /// `ctx` (the sum of its segments' lengths); `None` when the call carried no Write chunk,
    /// an empty one (the requester asks for the item inline), or `ctx` is stale. What a
    /// layer that finds the DDP item of a reply itself (the krpc face's stock-NFS mode)
    /// asks before it marks one.
    pub fn write_chunk_room(&self, ctx: &ReplyCtx) -> Option<usize> {
        if !self.is_handed(ctx) {
            return None;
        }
        let c = self.ctxs.get(ctx.idx as usize)?;
        let first = c.write_chunks().next()?;
        let room = first
            .iter()
            .try_fold(0usize, |n, s| n.checked_add(s.length as usize))?;
        (room > 0).then_some(room)
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
        self.ep.counters()
    }

    /// The thresholds in force.
    pub fn thresholds(&self) -> InlineThresholds {
        self.ep.thresholds()
    }

    /// The credit grant sent in replies: the Receives posted, at most `max_requests`.
    pub fn grant(&self) -> u32 {
        self.recv_posted.min(self.ep.cfg().max_requests).max(1)
    }

    /// Post every receive buffer once (done by `poll`; exposed for providers that need
    /// Receives posted before the connection is accepted).
    pub fn post_receives<P: Provider>(&mut self, prov: &mut P) {
        if self.recvs_started || self.ep.is_lost() {
            return;
        }
        let mut ok = true;
        for b in 0..self.ep.res().recv_bufs {
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
        self.ep.counters_mut().calls_dropped += 1;
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
        let Some(mut scan) = self.returns.scan() else {
            return false;
        };
        let mut any = false;
        while let Some((i, g)) = scan.next_mark(&self.returns) {
            // A mark of a context already gone (the connection's loss released it) is
            // just cleared.
            let live = self
                .ctxs
                .get(i as usize)
                .is_some_and(|c| c.state == CtxState::Handed && c.generation == g);
            if live {
                self.ep.counters_mut().contexts_reclaimed += 1;
                self.release_ctx(i);
                any = true;
            }
        }
        any
    }

    /// We can neither answer nor refuse: close the connection (RFC 8166 §4.5.4). The loss is
    /// reported by the next `poll` (and by the provider's own `Disconnected`).
    fn close<P: Provider>(&mut self, prov: &mut P) {
        if self.ep.is_lost() || self.closing {
            return;
        }
        self.closing = true;
        self.ep.counters_mut().closes += 1;
        prov.disconnect();
    }

    fn on_completion<P: Provider>(
        &mut self,
        prov: &mut P,
        wc: &Completion,
        events: &mut impl FnMut(ResponderEvent),
    ) {
        if self.ep.is_lost() || self.closing {
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
                    let charged = self.ep.send().take_charge(buf);
                    self.give_pages(charged);
                    // The reply's storage builds the next call handed up.
                    if let Some(reply) = self.ep.send().complete_take(buf) {
                        self.ep.chains().recycle(reply);
                    }
                    // A send buffer and send-queue room came free: owed errors first, then a
                    // read job that stalled on a full send queue or on the DDP budget (only
                    // when there is one: the common reply completion skips it).
                    self.flush_errors(prov);
                    if self.job.ctx.is_some() || !self.read_queue.is_empty() {
                        self.pump_reads(prov, events);
                    }
                }
                Some(WrTag::Read(idx)) if self.job.ctx == Some(idx) => {
                    self.job.in_flight = self.job.in_flight.saturating_sub(1);
                    self.pump_reads(prov, events);
                }
                _ => {}
            },
        }
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

    /// Connection loss: every context dies, every page is freed.
    fn lose(&mut self, events: &mut impl FnMut(ResponderEvent)) {
        if !self.ep.mark_lost() {
            return;
        }
        for i in 0..self.ctxs.len() {
            let live = self.ctxs.get(i).is_some_and(|c| c.state != CtxState::Free);
            if live {
                self.ep.counters_mut().calls_lost += 1;
                self.release_ctx(i as u32);
            }
        }
        self.read_queue.clear();
        if let Some(share) = self.share.as_mut() {
            share.stop_waiting();
        }
        self.job = ReadJob::default();
        let charged = self.ep.send().reset();
        self.give_pages(charged);
        self.errors.clear();
        self.closing = false;
        self.recv_posted = 0;
        // Reverse calls outstanding get no reply: each is reported, then the loss.
        self.reverse
            .drain(|xid| events(ResponderEvent::ReverseFailed { xid }));
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
