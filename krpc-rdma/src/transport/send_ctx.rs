//! Send contexts and work-request ids.
//!
//! A send context is one of the provider's pre-registered send buffers plus whatever must stay
//! alive until the Send built in it completes (for a responder: the reply's pages that RDMA
//! Writes posted ahead of the Send read from). It is recycled on the Send's completion.

use alloc::vec::Vec;

use mbuf::Chain;

use crate::provider::{SendBufId, WrId};

/// What a work-request id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrTag {
    /// A Send from send buffer `.0`.
    Send(u32),
    /// A Local Invalidate for pending-call slot `.0` (requester).
    LocalInv(u32),
    /// An RDMA Read for call context `.0` (responder).
    Read(u32),
    /// An unsignaled RDMA Write (completes only when flushed or failed).
    Write,
}

const KIND_SHIFT: u32 = 56;

impl WrTag {
    /// Encode as a work-request id.
    pub fn encode(self) -> WrId {
        let (kind, idx) = match self {
            WrTag::Send(i) => (1u64, i),
            WrTag::LocalInv(i) => (2, i),
            WrTag::Read(i) => (3, i),
            WrTag::Write => (4, 0),
        };
        (kind << KIND_SHIFT) | u64::from(idx)
    }

    /// Decode a work-request id made by [`encode`](Self::encode).
    pub fn decode(id: WrId) -> Option<WrTag> {
        let idx = u32::try_from(id & 0xffff_ffff).ok()?;
        match id >> KIND_SHIFT {
            1 => Some(WrTag::Send(idx)),
            2 => Some(WrTag::LocalInv(idx)),
            3 => Some(WrTag::Read(idx)),
            4 => Some(WrTag::Write),
            _ => None,
        }
    }
}

/// A bounded stack of free ids, allocated once.
#[derive(Debug)]
pub struct FreeList {
    free: Vec<u32>,
    cap: u32,
}

impl FreeList {
    /// Ids `0..n`, all free.
    ///
    /// # Errors
    /// Allocation failure.
    pub fn new(n: u32) -> Result<Self, alloc::collections::TryReserveError> {
        let mut free = Vec::new();
        free.try_reserve_exact(n as usize)?;
        free.extend((0..n).rev());
        Ok(FreeList { free, cap: n })
    }

    /// Take a free id.
    pub fn pop(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// Return an id (ignored if out of range or the list is full, so it never grows).
    pub fn push(&mut self, id: u32) {
        if id < self.cap && self.free.len() < self.cap as usize {
            self.free.push(id);
        }
    }

    /// Free ids.
    pub fn len(&self) -> usize {
        self.free.len()
    }

    /// True when no id is free.
    pub fn is_empty(&self) -> bool {
        self.free.is_empty()
    }

    /// Every id free again (connection reset).
    pub fn reset(&mut self) {
        self.free.clear();
        self.free.extend((0..self.cap).rev());
    }
}

/// What one send context keeps until its Send completes.
#[derive(Debug, Default)]
struct Held {
    /// A responder's reply chain (the pages its RDMA Writes read from).
    reply: Option<Chain>,
    /// Pages the reply's bytes were pulled up into for a Long Reply; emptied, not freed, on
    /// completion, so the next Long Reply reuses its storage.
    pullup: Chain,
    /// Bytes of a server-wide page budget the reply's pages hold until the Send completes
    /// (a responder's READ data, see `Responder::take_reply_pages`); 0 for a requester.
    charge: usize,
}

/// The send contexts of one endpoint.
#[derive(Debug)]
pub struct SendContexts {
    free: FreeList,
    held: Vec<Held>,
}

impl SendContexts {
    /// One context per send buffer.
    ///
    /// # Errors
    /// Allocation failure.
    pub fn new(n: u32) -> Result<Self, alloc::collections::TryReserveError> {
        let mut held = Vec::new();
        held.try_reserve_exact(n as usize)?;
        held.resize_with(n as usize, Held::default);
        Ok(SendContexts {
            free: FreeList::new(n)?,
            held,
        })
    }

    /// Take a free send buffer.
    pub fn get(&mut self) -> Option<SendBufId> {
        self.free.pop()
    }

    /// Keep `reply` alive until the Send in `buf` completes.
    pub fn hold(&mut self, buf: SendBufId, reply: Chain) {
        if let Some(h) = self.held.get_mut(buf as usize) {
            h.reply = Some(reply);
        }
    }

    /// Charge `bytes` of a page budget to the Send in `buf`: handed back by
    /// [`take_charge`](Self::take_charge) when it completes, or by [`reset`](Self::reset).
    pub fn charge(&mut self, buf: SendBufId, bytes: usize) {
        if let Some(h) = self.held.get_mut(buf as usize) {
            h.charge = h.charge.saturating_add(bytes);
        }
    }

    /// The bytes charged to the Send in `buf` (0 if none), now owed back by the caller.
    pub fn take_charge(&mut self, buf: SendBufId) -> usize {
        self.held
            .get_mut(buf as usize)
            .map_or(0, |h| core::mem::take(&mut h.charge))
    }

    /// The pull-up chain of send context `buf` (empty unless a Long Reply is being built or
    /// is in flight from it).
    pub fn pullup(&mut self, buf: SendBufId) -> Option<&mut Chain> {
        self.held.get_mut(buf as usize).map(|h| &mut h.pullup)
    }

    /// The Send in `buf` completed (or was never posted): free what it held, recycle it.
    pub fn complete(&mut self, buf: SendBufId) {
        drop(self.complete_take(buf));
    }

    /// [`complete`](Self::complete), handing back the held reply chain (for its storage).
    pub fn complete_take(&mut self, buf: SendBufId) -> Option<Chain> {
        let reply = self.held.get_mut(buf as usize).and_then(|h| {
            h.pullup.clear();
            h.reply.take()
        });
        self.free.push(buf);
        reply
    }

    /// Connection reset: drop everything held, every buffer free. Returns the bytes that
    /// were charged to the Sends (see [`charge`](Self::charge)), now owed back.
    pub fn reset(&mut self) -> usize {
        let mut charged = 0usize;
        for h in &mut self.held {
            h.reply = None;
            h.pullup.clear();
            charged = charged.saturating_add(core::mem::take(&mut h.charge));
        }
        self.free.reset();
        charged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wr_ids_round_trip() {
        for t in [
            WrTag::Send(7),
            WrTag::LocalInv(0),
            WrTag::Read(63),
            WrTag::Write,
        ] {
            assert_eq!(WrTag::decode(t.encode()), Some(t));
        }
        assert_eq!(WrTag::decode(0), None);
    }
}
