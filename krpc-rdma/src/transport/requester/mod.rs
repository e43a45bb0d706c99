//! The requester (client) side: send-rdma of calls, recv-rdma of replies.

use alloc::sync::Arc;
use alloc::vec::Vec;

use mbuf::{Chain, PageProvider};

use super::config::TransportConfig;
use super::counters::Counters;
use super::credits::RequesterCredits;
use super::endpoint::{Cm, Endpoint};
use super::error::CallError;
use super::returns::{same_table, Returns};
use super::send_ctx::{FreeList, WrTag};
use super::xid_table::XidTable;
use crate::provider::{
    drain_cq_bounded, Completion, Provider, RegId, Resources, Revoked, WcKind, WcStatus,
};
use crate::wire::InlineThresholds;

mod marshal;
mod reply;
mod reverse;

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
    /// A reverse-direction call from the responder (RFC 8167, e.g. an NFSv4.1 callback):
    /// answer it with [`Requester::reverse_reply`]. Dropping it unanswered is not silent:
    /// the next [`poll`](Requester::poll) answers the call with `SYSTEM_ERR` and frees its
    /// slot (see [`ReverseCtx`]).
    ReverseCall(ReverseCall),
    /// The connection is gone; every pending call was reported `Failed(ConnectionLost)`
    /// (and every reverse call not yet answered is dead: its [`ReverseCtx`] is stale).
    ConnectionLost,
}

/// A reverse-direction call handed up by [`Requester::poll`]. Its [`ctx`](Self::ctx) is a
/// guard: dropped unanswered (with this), the call is answered `SYSTEM_ERR` by the next
/// poll.
#[derive(Debug)]
pub struct ReverseCall {
    /// XID (the responder's).
    pub xid: u32,
    /// The RPC call message (inline: reverse-direction messages carry no chunks).
    pub call: Chain,
    /// Pass back to [`Requester::reverse_reply`].
    pub ctx: ReverseCtx,
}

/// Handle of a reverse-direction call, needed to answer it: one of the slots enabled with
/// [`Requester::set_reverse_slots`], held until the reply is sent (or the connection ends).
///
/// A guard, as the Responder's [`ReplyCtx`](super::ReplyCtx) is: it is consumed by
/// [`Requester::reverse_reply`] (sent, or refused for good), and handed back live in
/// [`ReverseRejected::ctx`] when the reply may be tried again. Dropped instead (with its
/// [`ReverseCall`], by an upper layer that forgot the call or chose not to answer it), the
/// call is not dropped silently: the next [`poll`](Requester::poll) answers it with an RPC
/// reply `MSG_ACCEPTED` / `SYSTEM_ERR` (RFC 5531) and frees the slot, counted in
/// `reverse_dropped` (when no send buffer is free, a later poll does). The drop needs no
/// reference to the Requester: it marks the slot in a table shared with it (one `AtomicU32`
/// per reverse slot, allocated with the Requester), so it allocates nothing and may happen
/// on any thread. Once the connection is lost the context is stale, and dropping it does
/// nothing.
pub struct ReverseCtx {
    idx: u32,
    generation: u32,
    /// Where a drop leaves the context; `None` once consumed.
    returns: Option<Arc<Returns>>,
}

impl ReverseCtx {
    /// Consumed by the Requester (answered, or refused for good): nothing to give back on
    /// drop.
    fn consume(mut self) {
        self.returns = None;
    }

    /// Whether this is a context of the Requester whose table is `returns`.
    fn is_of(&self, returns: &Arc<Returns>) -> bool {
        self.returns
            .as_ref()
            .is_some_and(|r| Arc::ptr_eq(r, returns))
    }
}

impl Drop for ReverseCtx {
    fn drop(&mut self) {
        if let Some(r) = self.returns.take() {
            r.give_back(self.idx, self.generation);
        }
    }
}

impl core::fmt::Debug for ReverseCtx {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ReverseCtx")
            .field("idx", &self.idx)
            .field("generation", &self.generation)
            .finish()
    }
}

impl PartialEq for ReverseCtx {
    fn eq(&self, other: &Self) -> bool {
        (self.idx, self.generation) == (other.idx, other.generation)
            && same_table(&self.returns, &other.returns)
    }
}

impl Eq for ReverseCtx {}

/// A reverse-direction message not sent ([`Requester::reverse_reply`],
/// [`Responder::reverse_call`](super::Responder::reverse_call)): everything handed back.
#[derive(Debug)]
pub struct ReverseRejected {
    /// Why: [`CallError::WouldBlock`] (a send buffer or the send queue is busy: retry),
    /// [`CallError::TooLarge`] (beyond the inline threshold: reverse-direction messages
    /// carry no chunks; send a smaller one), [`CallError::NoCredit`] (as many reverse calls
    /// are outstanding as the slots and the peer's grant allow), [`CallError::BadCall`]
    /// (no XID, or a reply whose XID is not its call's), [`CallError::DuplicateXid`],
    /// [`CallError::BadConfig`] (no reverse slots enabled), [`CallError::ConnectionLost`],
    /// [`CallError::Provider`].
    pub error: CallError,
    /// The message, unchanged.
    pub msg: Chain,
    /// The context, when it is still valid (answer again with it; dropped, the call is
    /// answered `SYSTEM_ERR`: see [`ReverseCtx`]); `None` when it is not (the call is
    /// over), or for a reverse call.
    pub ctx: Option<ReverseCtx>,
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
    /// Reverse-direction calls received and not yet answered (RFC 8167).
    reverse: super::reverse::Slots,
    /// Reverse slots whose [`ReverseCtx`] was dropped unanswered, to answer `SYSTEM_ERR`.
    returns: Arc<Returns>,
}

impl core::fmt::Debug for Requester {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Requester")
            .field("thresholds", &self.ep.thresholds())
            .field("credits", &self.credits)
            .field("lost", &self.ep.is_lost())
            .finish_non_exhaustive()
    }
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
            reverse: super::reverse::Slots::new(cfg.max_reverse_requests)
                .map_err(|_| CallError::NoMemory)?,
            returns: Arc::new(Returns::new(cfg.max_reverse_requests)?),
            // The endpoint core last (no fallible step after it), so the compiler builds it
            // in place: one copy of the endpoint on the stack.
            ep: Endpoint::new(cfg, resources, pages)?,
        })
    }

    /// Our 8-byte RFC 8797 private data, for the CM connect request.
    pub fn private_data(&self) -> [u8; crate::wire::CM_PRIVATE_LEN] {
        self.ep.private_data()
    }

    /// The thresholds in force (defaults until the connection is established).
    pub fn thresholds(&self) -> InlineThresholds {
        self.ep.thresholds()
    }

    /// Statistics.
    pub fn counters(&self) -> &Counters {
        self.ep.counters()
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
        self.ep.is_lost()
    }

    /// Reap completions and connection events; report replies, failures and connection state
    /// through `events`. Never blocks. First, reverse calls whose [`ReverseCtx`] was dropped
    /// unanswered are answered `SYSTEM_ERR` (one atomic load when none was).
    pub fn poll<P: Provider>(&mut self, prov: &mut P, events: &mut impl FnMut(RequesterEvent)) {
        self.poll_bounded(prov, usize::MAX, events);
    }

    /// [`poll`](Self::poll) with a work budget: reverse calls dropped unanswered, connection
    /// events, then at most `budget` completions. True when everything pending was handled; false when the budget ran out
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
        self.reclaim_reverse(prov);
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
        if self.ep.is_lost() {
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
                // Keep a Receive posted for every outstanding call and free reverse slot.
                if self.recv_posted < self.recv_target() && prov.post_recv(&[buf]).is_ok() {
                    self.recv_posted += 1;
                } else {
                    self.recv_free.push(buf);
                }
            }
            WcKind::Send => match WrTag::decode(wc.wr_id) {
                Some(WrTag::Send(buf)) => self.ep.send().complete(buf),
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
            self.ep.counters_mut().calls_lost += 1;
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
        self.ep.counters_mut().local_invalidations += slot.regs.len() as u64;
        if quarantine {
            // The held ones are released with the late reply (`recv`) or the connection
            // (`fail_all`); the provider released the others.
            slot.regs
                .retain(|r| matches!(prov.revoke(r.id), Ok(Revoked::Held)));
            if !slot.regs.is_empty() {
                self.ep.counters_mut().abandon_quarantines += 1;
            }
        } else {
            for r in &slot.regs {
                let _ = prov.release(r.id);
            }
            if !slot.regs.is_empty() {
                self.ep.counters_mut().abandon_closes += 1;
                prov.disconnect();
            }
            slot.regs.clear();
        }
        slot.state = SlotState::Abandoned;
        slot.pullup.clear();
        slot.reply_chunk = false;
        slot.reply_pages.clear();
        slot.outcome = None;
        self.ep.counters_mut().calls_abandoned += 1;
        Some(Abandoned {
            call: slot.call.take(),
            pages: slot.ddp.take().map(|d| d.pages),
        })
    }

    /// Close the transport (FreeBSD's `clnt_vc_close`): disconnect, fail every pending call
    /// with [`CallError::Closed`] (registrations revoked, the caller's pages handed back in
    /// the events), then report [`RequesterEvent::ConnectionLost`]. Later calls are refused.
    pub fn close<P: Provider>(&mut self, prov: &mut P, events: &mut impl FnMut(RequesterEvent)) {
        if self.ep.is_lost() {
            return;
        }
        prov.disconnect();
        self.fail_all(prov, CallError::Closed, events);
        self.lose(prov, events);
    }

    /// Connection loss: fail every pending call, release every registration, free all pages.
    fn lose<P: Provider>(&mut self, prov: &mut P, events: &mut impl FnMut(RequesterEvent)) {
        if !self.ep.mark_lost() {
            return;
        }
        self.fail_all(prov, CallError::ConnectionLost, events);
        self.credits.reset();
        self.ep.send().reset();
        self.recv_free.reset();
        self.recv_posted = 0;
        self.xids.clear();
        self.free_slots.reset();
        // Reverse calls not answered die with the connection (their contexts go stale: a
        // drop of one is cleared by the next poll, nothing sent).
        self.reverse.drain(|_| {});
        events(RequesterEvent::ConnectionLost);
    }
}
