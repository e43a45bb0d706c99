//! Reverse-direction RPC (RFC 8167, bidirectional RPC-over-RDMA): the rules both ends share.
//!
//! On one connection the forward-direction Responder (an NFSv4.1 server) may send RPC calls
//! to the forward-direction Requester (the client), which replies on the same connection:
//! NFSv4.1's backchannel (CB_RECALL, CB_SEQUENCE). What this module decides, and what the
//! Requester and Responder do with it:
//!
//! * **Telling a reverse-direction message from a forward one** ([`classify`]): a
//!   reverse-direction message is an `RDMA_MSG` with all three chunk lists empty whose RPC
//!   message repeats the transport header's XID; its RPC `msg_type` says which way it goes
//!   (`CALL` at the Requester, `REPLY` at the Responder). Anything else is forward traffic
//!   and goes the usual way. (Linux's `rpcrdma_is_bcall` and svcrdma apply the same test.)
//! * **Inline only**: reverse-direction messages are `RDMA_MSG` without chunks (as Linux's
//!   xprtrdma and svcrdma send and accept them), so a reverse call or reply must fit the
//!   negotiated inline threshold ([`encode`] refuses one that does not: the upper layer
//!   answers with something smaller, e.g. NFS4ERR_REP_TOO_BIG).
//! * **Credits and receives**: how many reverse calls may be outstanding is the upper
//!   layer's agreement (NFSv4.1's CREATE_SESSION back-channel `ca_maxrequests`), set on
//!   each end with `set_reverse_slots` within the `max_reverse_requests` reserved at
//!   creation. The forward Requester keeps that many extra Receives posted for reverse
//!   calls and grants that many in the `rdma_credit` of its reverse replies; the forward
//!   Responder keeps as many extra Receives for the replies (beyond the forward credits it
//!   grants) and sends at most `min(its slots, the peer's last grant)` reverse calls at once,
//!   one until the first reply (as Linux's backchannel transport starts).
//! * **Refusals**: a reverse call beyond the slots the Requester provisioned cannot be
//!   received safely (its Receive was meant for a forward reply): the connection is closed
//!   (`reverse_overflows`; Linux's xprtrdma does the same). A reverse reply matching no
//!   outstanding reverse call is counted (`reverse_replies_unexpected`) and discarded: a
//!   reply is never answered. When neither end enabled reverse slots, nothing is classified
//!   as reverse: such messages take the forward path (and its refusals).
//! * **No silent drop**: a reverse call the Requester handed up is answered even when its
//!   upper layer drops it unanswered (its `ReverseCtx` is a guard: the next poll replies
//!   `MSG_ACCEPTED` / `SYSTEM_ERR`, [`system_err`], and frees the slot), and so is one it
//!   could not hand up for want of an mbuf (`reverse_dropped` counts both); a reverse call
//!   that cannot be answered at all closes the connection.

use mbuf::Chain;

use super::endpoint::Endpoint;
use super::error::CallError;
use super::send_ctx::WrTag;
use crate::provider::{Provider, ProviderError, SendOp, SendWr};
use crate::wire::{Header, Proc, MIN_HEADER_LEN, RDMA_MSG, RPCRDMA_VERSION};

/// RPC `msg_type` CALL (RFC 5531).
const RPC_CALL: u32 = 0;
/// RPC `msg_type` REPLY (RFC 5531).
const RPC_REPLY: u32 = 1;

/// Which way a received message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Forward-direction traffic (or a message the forward path judges).
    Forward,
    /// A reverse-direction call (at the forward Requester).
    ReverseCall,
    /// A reverse-direction reply (at the forward Responder).
    ReverseReply,
}

/// Which way the message with transport header `hdr` goes (see the module documentation):
/// an `RDMA_MSG` with no chunks whose RPC message (at least XID and `msg_type`) repeats the
/// header's XID is reverse-direction, by its `msg_type`.
pub fn classify(hdr: &Header<&[u8]>) -> Direction {
    if hdr.proc_() != Proc::Msg || hdr.header_len() != MIN_HEADER_LEN {
        return Direction::Forward;
    }
    let rpc = hdr.payload();
    let word = |i: usize| {
        rpc.get(i..i + 4)
            .and_then(|w| <[u8; 4]>::try_from(w).ok())
            .map(u32::from_be_bytes)
    };
    if word(0) != Some(hdr.xid()) {
        return Direction::Forward;
    }
    match word(4) {
        Some(RPC_CALL) => Direction::ReverseCall,
        Some(RPC_REPLY) => Direction::ReverseReply,
        _ => Direction::Forward,
    }
}

/// Why a reverse-direction message cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EncodeError {
    /// Header and message exceed the room (the inline threshold and the send buffer).
    TooLarge,
    /// The message would not copy (a bug).
    Chain,
}

/// A reverse-direction RPC message to send: the upper layer's chain, or bytes the transport
/// writes itself ([`system_err`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Msg<'a> {
    /// An RPC call or reply as a chain.
    Chain(&'a Chain),
    /// An RPC call or reply as bytes.
    Bytes(&'a [u8]),
}

impl Msg<'_> {
    fn len(self) -> usize {
        match self {
            Msg::Chain(c) => c.len(),
            Msg::Bytes(b) => b.len(),
        }
    }

    /// Copy the message into `dst`, exactly [`len`](Self::len) bytes; false if it would not.
    fn copy_to(self, dst: &mut [u8]) -> bool {
        match self {
            Msg::Chain(c) => c.copydata(0, dst).is_ok(),
            Msg::Bytes(b) if b.len() == dst.len() => {
                dst.copy_from_slice(b);
                true
            }
            Msg::Bytes(_) => false,
        }
    }
}

/// Length of [`system_err`]'s reply.
pub(crate) const SYSTEM_ERR_LEN: usize = 24;

/// The RPC reply refusing the call `xid` with `SYSTEM_ERR` (RFC 5531: `msg_type` REPLY,
/// `reply_stat` MSG_ACCEPTED, an `AUTH_NONE` verifier of length 0, `accept_stat`
/// SYSTEM_ERR = 5): the Requester's answer to a reverse call nobody above will answer.
pub(crate) fn system_err(xid: u32) -> [u8; SYSTEM_ERR_LEN] {
    const MSG_ACCEPTED: u32 = 0;
    const AUTH_NONE: u32 = 0;
    const SYSTEM_ERR: u32 = 5;
    let mut out = [0u8; SYSTEM_ERR_LEN];
    for (dst, w) in
        out.chunks_exact_mut(4)
            .zip([xid, RPC_REPLY, MSG_ACCEPTED, AUTH_NONE, 0, SYSTEM_ERR])
    {
        dst.copy_from_slice(&w.to_be_bytes());
    }
    out
}

/// Write the reverse-direction message for `msg` (an RPC call or reply whose first word is
/// `xid`) into `buf`, at most `room` bytes: an `RDMA_MSG` header (`xid`, version 1,
/// `credit`, three empty chunk lists), then the RPC message. Its length.
///
/// # Errors
/// [`EncodeError::TooLarge`] beyond `room` (reverse-direction messages are inline only).
pub(crate) fn encode(
    buf: &mut [u8],
    room: usize,
    xid: u32,
    credit: u32,
    msg: Msg<'_>,
) -> Result<u32, EncodeError> {
    let total = MIN_HEADER_LEN
        .checked_add(msg.len())
        .filter(|&t| t <= room.min(buf.len()))
        .ok_or(EncodeError::TooLarge)?;
    let len = u32::try_from(total).map_err(|_| EncodeError::TooLarge)?;
    let (head, body) = buf.split_at_mut(MIN_HEADER_LEN);
    for (i, w) in [xid, RPCRDMA_VERSION, credit, RDMA_MSG, 0, 0, 0]
        .into_iter()
        .enumerate()
    {
        if let Some(dst) = head.get_mut(i * 4..i * 4 + 4) {
            dst.copy_from_slice(&w.to_be_bytes());
        }
    }
    let body = body.get_mut(..msg.len()).ok_or(EncodeError::Chain)?;
    if !msg.copy_to(body) {
        return Err(EncodeError::Chain);
    }
    Ok(len)
}

/// Send `msg` as a reverse-direction message (`xid`, `credit`) from one of `ep`'s send
/// buffers, within the negotiated inline threshold: one signaled Send. Nothing is taken on
/// error.
///
/// # Errors
/// [`CallError::WouldBlock`] (no send buffer, or the send queue is full),
/// [`CallError::TooLarge`] (beyond the inline threshold), [`CallError::Provider`],
/// [`CallError::Internal`].
pub(crate) fn send<P: Provider>(
    ep: &mut Endpoint,
    prov: &mut P,
    xid: u32,
    credit: u32,
    msg: Msg<'_>,
) -> Result<(), CallError> {
    let Some(buf) = ep.send().get() else {
        ep.counters_mut().resource_stalls += 1;
        return Err(CallError::WouldBlock);
    };
    let room = ep.max_send();
    let len = match prov.send_buf(buf) {
        Ok(b) => encode(b, room, xid, credit, msg),
        Err(_) => Err(EncodeError::Chain),
    };
    let posted = len
        .map_err(|e| match e {
            EncodeError::TooLarge => CallError::TooLarge,
            EncodeError::Chain => CallError::Internal,
        })
        .and_then(|len| {
            let wr = SendWr {
                wr_id: WrTag::Send(buf).encode(),
                op: SendOp::Send {
                    buf,
                    len,
                    invalidate: None,
                },
                signaled: true,
            };
            prov.post_send(&[wr]).map(|()| len).map_err(|e| match e {
                ProviderError::Busy => CallError::WouldBlock,
                e => CallError::Provider(e),
            })
        });
    match posted {
        Ok(len) => {
            ep.counters_mut().inline_bytes_sent += u64::from(len);
            Ok(())
        }
        Err(e) => {
            ep.send().complete(buf);
            Err(e)
        }
    }
}

/// The first word of an RPC message (its XID), if it has one.
pub(crate) fn xid_of(msg: &Chain) -> Option<u32> {
    let mut w = [0u8; 4];
    msg.copydata(0, &mut w).ok()?;
    Some(u32::from_be_bytes(w))
}

/// The reverse-direction slots of one end: at most `max` (reserved at creation), `slots` of
/// them in use as the upper layer agreed, each holding the XID of a reverse call (received
/// and not yet answered, at the Requester; sent and not yet answered, at the Responder).
#[derive(Debug)]
pub(crate) struct Slots {
    /// Per slot: the XID it holds and the generation of its occupant.
    table: alloc::vec::Vec<Option<(u32, u32)>>,
    slots: u32,
    generation: u32,
}

impl Slots {
    /// A table of `max` slots, none enabled.
    pub(crate) fn new(max: u32) -> Result<Self, alloc::collections::TryReserveError> {
        let mut table = alloc::vec::Vec::new();
        table.try_reserve_exact(max as usize)?;
        table.resize(max as usize, None);
        Ok(Slots {
            table,
            slots: 0,
            generation: 0,
        })
    }

    /// Most slots that can be enabled.
    pub(crate) fn max(&self) -> u32 {
        self.table.len() as u32
    }

    /// Slots enabled.
    pub(crate) fn enabled(&self) -> u32 {
        self.slots
    }

    /// Enable `n` slots (at most [`max`](Self::max)); false beyond. Slots in use beyond a
    /// smaller `n` stay until they are answered.
    pub(crate) fn set_enabled(&mut self, n: u32) -> bool {
        if n > self.max() {
            return false;
        }
        self.slots = n;
        true
    }

    /// Slots holding a call.
    pub(crate) fn in_use(&self) -> u32 {
        self.table.iter().filter(|s| s.is_some()).count() as u32
    }

    /// Whether a slot holds `xid`.
    pub(crate) fn holds(&self, xid: u32) -> bool {
        self.table
            .iter()
            .any(|s| matches!(s, Some((x, _)) if *x == xid))
    }

    /// Take a free slot for `xid`, if fewer than `limit` (and the enabled count) are in use;
    /// its index and generation.
    pub(crate) fn take(&mut self, xid: u32, limit: u32) -> Option<(u32, u32)> {
        if self.in_use() >= limit.min(self.slots) {
            return None;
        }
        let idx = self.table.iter().position(Option::is_none)?;
        self.generation = self.generation.wrapping_add(1).max(1);
        let g = self.generation;
        *self.table.get_mut(idx)? = Some((xid, g));
        Some((idx as u32, g))
    }

    /// The XID in slot `idx` if its occupant is generation `g`.
    pub(crate) fn get(&self, idx: u32, g: u32) -> Option<u32> {
        match self.table.get(idx as usize) {
            Some(Some((xid, gen))) if *gen == g => Some(*xid),
            _ => None,
        }
    }

    /// Free slot `idx` if its occupant is generation `g`; its XID.
    pub(crate) fn free(&mut self, idx: u32, g: u32) -> Option<u32> {
        let xid = self.get(idx, g)?;
        if let Some(s) = self.table.get_mut(idx as usize) {
            *s = None;
        }
        Some(xid)
    }

    /// Free the slot holding `xid`; whether one did.
    pub(crate) fn free_xid(&mut self, xid: u32) -> bool {
        match self
            .table
            .iter_mut()
            .find(|s| matches!(s, Some((x, _)) if *x == xid))
        {
            Some(s) => {
                *s = None;
                true
            }
            None => false,
        }
    }

    /// Empty every slot (the connection is gone), each XID given to `f`.
    pub(crate) fn drain(&mut self, mut f: impl FnMut(u32)) {
        for s in &mut self.table {
            if let Some((xid, _)) = s.take() {
                f(xid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    fn msg(xid: u32, credit: u32, proc_: u32, lists: [u32; 3], rpc: &[u32]) -> Vec<u8> {
        let mut v = Vec::new();
        for w in [xid, 1, credit, proc_]
            .iter()
            .chain(lists.iter())
            .chain(rpc.iter())
        {
            v.extend_from_slice(&w.to_be_bytes());
        }
        v
    }

    fn dir(bytes: &[u8]) -> Direction {
        classify(&Header::new_checked(bytes).unwrap())
    }

    #[test]
    fn a_chunkless_rdma_msg_repeating_its_xid_goes_by_msg_type() {
        assert_eq!(
            dir(&msg(7, 1, 0, [0; 3], &[7, 0, 2])),
            Direction::ReverseCall
        );
        assert_eq!(
            dir(&msg(7, 1, 0, [0; 3], &[7, 1, 0])),
            Direction::ReverseReply
        );
        // Another XID in the RPC message, an unknown msg_type, too short a message.
        assert_eq!(dir(&msg(7, 1, 0, [0; 3], &[8, 0])), Direction::Forward);
        assert_eq!(dir(&msg(7, 1, 0, [0; 3], &[7, 2])), Direction::Forward);
        assert_eq!(dir(&msg(7, 1, 0, [0; 3], &[7])), Direction::Forward);
        // RDMA_ERROR (ERR_VERS 1..1), or a chunk list present: forward.
        assert_eq!(dir(&msg(7, 1, 4, [1, 1, 1], &[])), Direction::Forward);
        let with_write = msg(7, 1, 0, [0, 1, 1], &[9, 64, 0, 0, 0, 0, 7, 0]);
        let h = Header::new_checked(&with_write[..]).unwrap();
        assert!(h.header_len() > MIN_HEADER_LEN);
        assert_eq!(classify(&h), Direction::Forward);
    }

    #[test]
    fn encode_writes_an_inline_rdma_msg_and_refuses_beyond_the_room() {
        let body: Vec<u8> = [9u32, 1, 0, 0]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        let c = Chain::from_bytes(&body).unwrap();
        let mut buf = vec![0u8; 64];
        let n = encode(&mut buf, 64, 9, 4, Msg::Chain(&c)).unwrap() as usize;
        assert_eq!(n, 28 + 16);
        assert_eq!(&buf[..n], &msg(9, 4, 0, [0; 3], &[9, 1, 0, 0])[..]);
        assert_eq!(dir(&buf[..n]), Direction::ReverseReply);
        assert_eq!(
            encode(&mut buf, 43, 9, 4, Msg::Chain(&c)),
            Err(EncodeError::TooLarge)
        );
        assert_eq!(
            encode(&mut buf[..40], 64, 9, 4, Msg::Chain(&c)),
            Err(EncodeError::TooLarge)
        );
        assert_eq!(xid_of(&c), Some(9));
        // The same message as bytes: the same encoding.
        let mut again = vec![0u8; 64];
        let m = encode(&mut again, 64, 9, 4, Msg::Bytes(&body)).unwrap() as usize;
        assert_eq!(&again[..m], &buf[..n]);
        assert_eq!(
            encode(&mut again, 43, 9, 4, Msg::Bytes(&body)),
            Err(EncodeError::TooLarge)
        );
    }

    #[test]
    fn system_err_is_an_accepted_reply_refusing_the_call() {
        let r = system_err(0xcb01);
        let w: Vec<u32> = r
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
            .collect();
        // xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier (flavor, length 0), SYSTEM_ERR.
        assert_eq!(w, [0xcb01, 1, 0, 0, 0, 5]);
        let mut buf = vec![0u8; 64];
        let n = encode(&mut buf, 64, 0xcb01, 2, Msg::Bytes(&r)).unwrap() as usize;
        assert_eq!(n, 28 + SYSTEM_ERR_LEN);
        assert_eq!(dir(&buf[..n]), Direction::ReverseReply);
    }

    #[test]
    fn slots_hold_xids_within_the_limit_and_generations_catch_stale_handles() {
        let mut s = Slots::new(2).unwrap();
        assert_eq!(s.take(1, 8), None, "none enabled");
        assert!(s.set_enabled(2) && !s.set_enabled(3));
        let (a, ga) = s.take(1, 8).unwrap();
        assert_eq!(s.take(2, 1), None, "the peer's limit");
        let (b, gb) = s.take(2, 8).unwrap();
        assert_eq!(s.take(3, 8), None);
        assert!(s.holds(1) && s.holds(2) && s.in_use() == 2);
        assert_eq!(s.free(a, ga), Some(1));
        assert_eq!(s.free(a, ga), None, "stale");
        let (c, gc) = s.take(3, 8).unwrap();
        assert_eq!(c, a);
        assert_ne!(gc, ga);
        assert_eq!(s.get(a, ga), None);
        assert!(s.free_xid(2) && !s.free_xid(2));
        assert_eq!(s.get(b, gb), None);
        let mut lost = Vec::new();
        s.drain(|x| lost.push(x));
        assert_eq!(lost, [3]);
        assert_eq!(s.in_use(), 0);
    }
}
