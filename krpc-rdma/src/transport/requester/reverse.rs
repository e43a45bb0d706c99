//! The reverse direction at the Requester (RFC 8167, xprtrdma's `backchannel.c`): calls from
//! the responder received into the Receives kept for them, handed up, and answered inline;
//! those nobody above answers (a [`ReverseCtx`] dropped, no mbuf to hand the call up in)
//! answered `SYSTEM_ERR` here. The rules both ends share are in
//! [`crate::transport::reverse`].

use alloc::sync::Arc;

use super::{Requester, RequesterEvent, ReverseCall, ReverseCtx, ReverseRejected};
use crate::provider::Provider;
use crate::transport::error::CallError;
use crate::transport::reverse::{self, Msg};
use crate::wire::Header;
use mbuf::Chain;

impl Requester {
    /// Whether reverse-direction calls are expected at all (`max_reverse_requests` > 0).
    pub(super) fn reverse_enabled(&self) -> bool {
        self.reverse.max() > 0
    }

    /// Receives to keep posted: one per outstanding call and one per free reverse slot.
    pub(super) fn recv_target(&self) -> u32 {
        self.credits
            .outstanding()
            .saturating_add(self.reverse.enabled().saturating_sub(self.reverse.in_use()))
    }

    /// Post Receives up to [`recv_target`](Self::recv_target) from the free ones.
    fn top_up_recvs<P: Provider>(&mut self, prov: &mut P) {
        while self.recv_posted < self.recv_target() {
            let Some(rb) = self.recv_free.pop() else {
                return;
            };
            if prov.post_recv(&[rb]).is_err() {
                self.recv_free.push(rb);
                return;
            }
            self.recv_posted += 1;
        }
    }

    /// Enable `n` reverse-direction slots (RFC 8167): the number of reverse calls the upper
    /// layer agreed with the peer (NFSv4.1: the back channel's `ca_maxrequests` of
    /// CREATE_SESSION), at most `max_reverse_requests`. As many Receives are kept posted for
    /// them, beyond one per outstanding call, and `n` is the grant in each reverse reply's
    /// `rdma_credit`. A reverse call beyond them closes the connection (`reverse_overflows`).
    ///
    /// # Errors
    /// [`CallError::BadConfig`] beyond `max_reverse_requests`, or when the provider's receive
    /// buffers cannot hold `max_requests` plus `n`; [`CallError::ConnectionLost`].
    pub fn set_reverse_slots<P: Provider>(
        &mut self,
        prov: &mut P,
        n: u32,
    ) -> Result<(), CallError> {
        if self.ep.is_lost() {
            return Err(CallError::ConnectionLost);
        }
        let room = self.ep.res().recv_bufs;
        let need = self.ep.cfg().max_requests.max(1).checked_add(n);
        if need.is_none_or(|need| need > room) || !self.reverse.set_enabled(n) {
            return Err(CallError::BadConfig);
        }
        self.top_up_recvs(prov);
        Ok(())
    }

    /// Most reverse-direction slots that can be enabled (`max_reverse_requests`).
    pub fn reverse_capacity(&self) -> u32 {
        self.reverse.max()
    }

    /// Reverse-direction slots enabled, and how many hold a call not yet answered.
    pub fn reverse_slots(&self) -> (u32, u32) {
        (self.reverse.enabled(), self.reverse.in_use())
    }

    /// A reverse-direction call arrived: a slot for it and its message copied out of the
    /// receive buffer (`Some`), or every slot is taken (`None`: see
    /// [`on_reverse_call`](Self::on_reverse_call)).
    pub(super) fn take_reverse_call(&mut self, hdr: &Header<&[u8]>) -> Option<ReverseCall> {
        let xid = hdr.xid();
        let (idx, generation) = self.reverse.take(xid, u32::MAX)?;
        let payload = hdr.payload();
        let mut call = self
            .ep
            .chains()
            .chain_with(payload.len().div_ceil(mbuf::MCLBYTES).max(1));
        let _ = call.set_bytes(payload).inspect_err(|_| call.clear());
        Some(ReverseCall {
            xid,
            call,
            ctx: ReverseCtx {
                idx,
                generation,
                returns: Some(Arc::clone(&self.returns)),
            },
        })
    }

    /// Hand up the reverse call taken, or, with every slot taken, close the connection (its
    /// Receive was one kept for a forward reply: RFC 8167's provisioning broken by the peer).
    /// A call that found no mbuf to be handed up in is answered `SYSTEM_ERR` at once (see
    /// [`answer_unanswered`](Self::answer_unanswered); counted in `reverse_dropped`, not in
    /// `bad_messages`: the peer sent nothing wrong); with no send buffer free, its context
    /// is dropped, so the next poll answers it.
    #[inline(never)]
    pub(super) fn on_reverse_call<P: Provider>(
        &mut self,
        prov: &mut P,
        taken: Option<ReverseCall>,
        events: &mut impl FnMut(RequesterEvent),
    ) {
        let Some(rc) = taken else {
            self.ep.counters_mut().reverse_overflows += 1;
            self.close_for_reverse(prov);
            return;
        };
        if rc.call.is_empty() {
            let ctx = rc.ctx;
            if self.answer_unanswered(prov, ctx.idx, ctx.generation) {
                ctx.consume();
            }
            return;
        }
        self.ep.counters_mut().reverse_calls += 1;
        events(RequesterEvent::ReverseCall(rc));
    }

    /// A reverse call can be neither handed up nor answered: close the connection (the loss
    /// is acted on once the completions queued are reaped).
    fn close_for_reverse<P: Provider>(&mut self, prov: &mut P) {
        self.ep.counters_mut().closes += 1;
        prov.disconnect();
        self.disconnect_seen = true;
    }

    /// Answer the reverse call in slot `idx` (generation `g`), which nobody above will
    /// answer, with an RPC reply `MSG_ACCEPTED` / `SYSTEM_ERR`, inline, and free its slot
    /// (`reverse_dropped`; its Receive is posted again). False when no send buffer or
    /// send-queue room is free: nothing is done, the caller tries again later. A slot no
    /// longer holding `g` (the call answered, or the connection lost) and a connection
    /// already going are left alone. Any other failure to send frees the slot and closes
    /// the connection: a reverse call is answered, or its connection closed.
    fn answer_unanswered<P: Provider>(&mut self, prov: &mut P, idx: u32, g: u32) -> bool {
        let Some(xid) = self.reverse.get(idx, g) else {
            return true;
        };
        if self.disconnect_seen || self.ep.is_lost() {
            // The loss (acted on at the end of this poll) drains the slot.
            return true;
        }
        let credit = self.reverse.enabled();
        let reply = reverse::system_err(xid);
        match reverse::send(&mut self.ep, prov, xid, credit, Msg::Bytes(&reply)) {
            Ok(()) => {}
            Err(CallError::WouldBlock) => return false,
            Err(_) => self.close_for_reverse(prov),
        }
        self.reverse.free(idx, g);
        self.ep.counters_mut().reverse_dropped += 1;
        if !self.disconnect_seen {
            self.top_up_recvs(prov);
        }
        true
    }

    /// Answer the reverse calls whose [`ReverseCtx`] was dropped unanswered (see there), at
    /// the start of every poll: one atomic load when none was. A mark of a stale context is
    /// just cleared; one that must wait for a send buffer is marked again, for the next
    /// poll.
    #[inline(never)]
    pub(super) fn reclaim_reverse<P: Provider>(&mut self, prov: &mut P) {
        let Some(mut scan) = self.returns.scan() else {
            return;
        };
        while let Some((idx, g)) = scan.next_mark(&self.returns) {
            if !self.answer_unanswered(prov, idx, g) {
                self.returns.give_back(idx, g);
            }
        }
    }

    /// Send the reply to a reverse-direction call handed up by [`poll`](Self::poll): an
    /// inline `RDMA_MSG` whose `rdma_credit` grants the reverse slots enabled. The reply's
    /// first word must be the call's XID. On success the slot is free for the next reverse
    /// call (its Receive is posted again).
    ///
    /// # Errors
    /// [`ReverseRejected`]: `WouldBlock`, `TooLarge` and `BadCall` for a reply whose XID is
    /// not the call's hand the context back, still a guard (answer again, a smaller reply
    /// for `TooLarge`; drop it and the call is answered `SYSTEM_ERR`); a stale context, a
    /// lost connection or a provider failure consume it (the call is over). A context of
    /// another Requester is refused `BadCall` and dropped: its own Requester answers it.
    pub fn reverse_reply<P: Provider>(
        &mut self,
        prov: &mut P,
        ctx: ReverseCtx,
        reply: Chain,
    ) -> Result<(), ReverseRejected> {
        let reject = |error, msg, ctx| Err(ReverseRejected { error, msg, ctx });
        if !ctx.is_of(&self.returns) {
            return reject(CallError::BadCall, reply, None);
        }
        if self.ep.is_lost() {
            ctx.consume();
            return reject(CallError::ConnectionLost, reply, None);
        }
        let Some(xid) = self.reverse.get(ctx.idx, ctx.generation) else {
            ctx.consume();
            return reject(CallError::BadCall, reply, None);
        };
        if reverse::xid_of(&reply) != Some(xid) {
            return reject(CallError::BadCall, reply, Some(ctx));
        }
        let credit = self.reverse.enabled();
        match reverse::send(&mut self.ep, prov, xid, credit, Msg::Chain(&reply)) {
            Ok(()) => {}
            // Back-pressure or too large: the context stays valid, answer again.
            Err(e @ (CallError::WouldBlock | CallError::TooLarge)) => {
                return reject(e, reply, Some(ctx));
            }
            Err(e) => {
                self.reverse.free(ctx.idx, ctx.generation);
                ctx.consume();
                return reject(e, reply, None);
            }
        }
        self.reverse.free(ctx.idx, ctx.generation);
        ctx.consume();
        self.ep.counters_mut().reverse_replies += 1;
        self.ep.chains().recycle(reply);
        self.top_up_recvs(prov);
        Ok(())
    }
}
