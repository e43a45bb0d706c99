//! The reverse direction at the Responder (RFC 8167, svcrdma's `svc_rdma_backchannel.c`):
//! calls to the requester sent inline within the slots the upper layer agreed and the
//! requester's grant, their replies matched by XID and handed up, the ones outstanding at a
//! loss reported failed. The rules both ends share are in [`crate::transport::reverse`].

use mbuf::Chain;

use super::{Responder, ResponderEvent};
use crate::provider::Provider;
use crate::transport::error::CallError;
use crate::transport::requester::ReverseRejected;
use crate::transport::reverse::{self, Direction, Msg};
use crate::wire::Header;

impl Responder {
    /// Whether reverse-direction calls may be sent at all (`max_reverse_requests` > 0).
    pub(super) fn reverse_enabled(&self) -> bool {
        self.reverse.max() > 0
    }

    /// Enable `n` reverse-direction slots (RFC 8167): the number of reverse calls the upper
    /// layer agreed with the requester (NFSv4.1: the back channel's `ca_maxrequests`), at
    /// most `max_reverse_requests`. At most `min(n, the requester's last grant)` reverse
    /// calls are outstanding at once (one until the first reverse reply); the Receives for
    /// their replies are those beyond the `max_requests` the forward credits use.
    ///
    /// # Errors
    /// [`CallError::BadConfig`] beyond `max_reverse_requests`, or when the provider's receive
    /// buffers cannot hold `max_requests` plus `n`.
    pub fn set_reverse_slots(&mut self, n: u32) -> Result<(), CallError> {
        let room = self.ep.res().recv_bufs;
        let need = self.ep.cfg().max_requests.max(1).checked_add(n);
        if need.is_none_or(|need| need > room) || !self.reverse.set_enabled(n) {
            return Err(CallError::BadConfig);
        }
        Ok(())
    }

    /// Most reverse-direction slots that can be enabled (`max_reverse_requests`).
    pub fn reverse_capacity(&self) -> u32 {
        self.reverse.max()
    }

    /// Reverse-direction slots enabled, reverse calls outstanding, and the requester's
    /// last grant.
    pub fn reverse_slots(&self) -> (u32, u32, u32) {
        (
            self.reverse.enabled(),
            self.reverse.in_use(),
            self.reverse_grant,
        )
    }

    /// Send a reverse-direction call (an RPC call message whose first word is its XID) to
    /// the requester: an inline `RDMA_MSG` whose `rdma_credit` asks for the slots enabled.
    /// Its reply comes as [`ResponderEvent::ReverseReply`]; a loss first reports it
    /// [`ResponderEvent::ReverseFailed`].
    ///
    /// # Errors
    /// [`ReverseRejected`] (nothing sent, the call handed back): `NoCredit` when as many
    /// reverse calls are outstanding as the slots and the grant allow, `WouldBlock`,
    /// `TooLarge`, `BadCall`, `DuplicateXid`, `BadConfig` (no slot enabled),
    /// `ConnectionLost`, `Provider`.
    pub fn reverse_call<P: Provider>(
        &mut self,
        prov: &mut P,
        call: Chain,
    ) -> Result<(), ReverseRejected> {
        let reject = |error, msg| {
            Err(ReverseRejected {
                error,
                msg,
                ctx: None,
            })
        };
        if self.ep.is_lost() || self.closing {
            return reject(CallError::ConnectionLost, call);
        }
        if self.reverse.enabled() == 0 {
            return reject(CallError::BadConfig, call);
        }
        let Some(xid) = reverse::xid_of(&call) else {
            return reject(CallError::BadCall, call);
        };
        if self.reverse.holds(xid) {
            return reject(CallError::DuplicateXid, call);
        }
        let Some((idx, generation)) = self.reverse.take(xid, self.reverse_grant) else {
            self.ep.counters_mut().credit_stalls += 1;
            return reject(CallError::NoCredit, call);
        };
        let credit = self.reverse.enabled();
        if let Err(e) = reverse::send(&mut self.ep, prov, xid, credit, Msg::Chain(&call)) {
            self.reverse.free(idx, generation);
            return reject(e, call);
        }
        self.ep.counters_mut().reverse_calls += 1;
        self.ep.chains().recycle(call);
        Ok(())
    }

    /// A received message that is a reverse-direction reply (`Some`: what to report, if
    /// anything), or not one (`None`: the forward path judges it). A reply to a reverse call
    /// outstanding frees its slot, updates the grant and goes up; one matching none is
    /// counted and discarded (a reply is never answered).
    pub(super) fn take_reverse_reply(&mut self, data: &[u8]) -> Option<Option<ResponderEvent>> {
        let hdr = Header::new_checked(data).ok()?;
        if reverse::classify(&hdr) != Direction::ReverseReply {
            return None;
        }
        let xid = hdr.xid();
        if !self.reverse.free_xid(xid) {
            self.ep.counters_mut().reverse_replies_unexpected += 1;
            return Some(None);
        }
        // The requester's grant: at least one (never a deadlock), at most the slots.
        self.reverse_grant = hdr.credit().clamp(1, self.reverse.enabled().max(1));
        let payload = hdr.payload();
        let mut reply = self
            .ep
            .chains()
            .chain_with(payload.len().div_ceil(mbuf::MCLBYTES).max(1));
        if reply.set_bytes(payload).is_err() {
            // No mbuf for it: the reverse call fails rather than wait for ever.
            self.ep.counters_mut().bad_messages += 1;
            return Some(Some(ResponderEvent::ReverseFailed { xid }));
        }
        self.ep.counters_mut().reverse_replies += 1;
        Some(Some(ResponderEvent::ReverseReply { xid, reply }))
    }
}
