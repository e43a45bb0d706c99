//! Send-queue accounting of one RC queue pair.
//!
//! Every posted work request — the core's and the binding's own (key maps, invalidations) —
//! gets a sequence number as its hardware `wr_id` and an entry in a FIFO. An RC send queue
//! completes in order, so a completion for sequence `s` retires every entry up to `s`
//! ([`SendQueue::retire_through`]): the unsignaled ones before it succeeded. A chain is posted
//! only when the FIFO has room for all of it, so the hardware queue never overflows.

use alloc::collections::VecDeque;

use crate::provider::ProviderError;

/// Receive `wr_id`s carry this bit; send-queue sequence numbers stay below it.
pub const RECV_BIT: u64 = 1 << 63;

/// What a posted send-queue work request was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqKind {
    /// The core's request, with the core's id.
    User(u64),
    /// A key map (FRWR REG_MR, memory-window bind): internal, never reported.
    Map,
    /// A LOCAL_INV of `key`; `user` when it is the last of the core's `LocalInv`.
    Inv {
        /// Key index.
        key: u32,
        /// The core's id, reported on completion.
        user: Option<u64>,
    },
}

/// One send-queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqEntry {
    /// Hardware `wr_id`.
    pub seq: u64,
    /// What it was.
    pub kind: SqKind,
}

/// The FIFO of outstanding send-queue work requests (see the module documentation).
#[derive(Debug, Default)]
pub struct SendQueue {
    depth: usize,
    fifo: VecDeque<SqEntry>,
    next: u64,
}

impl SendQueue {
    /// A queue of `depth` entries, allocated now.
    ///
    /// # Errors
    /// [`ProviderError::NoMemory`].
    pub fn new(depth: usize) -> Result<SendQueue, ProviderError> {
        let mut fifo = VecDeque::new();
        fifo.try_reserve_exact(depth)
            .map_err(|_| ProviderError::NoMemory)?;
        Ok(SendQueue {
            depth,
            fifo,
            next: 0,
        })
    }

    /// Entries outstanding.
    pub fn len(&self) -> usize {
        self.fifo.len()
    }

    /// Whether nothing is outstanding.
    pub fn is_empty(&self) -> bool {
        self.fifo.is_empty()
    }

    /// Whether `n` more entries fit.
    pub fn has_room(&self, n: usize) -> bool {
        self.fifo.len().saturating_add(n) <= self.depth
    }

    /// The next sequence number (wraps below [`RECV_BIT`]).
    pub fn next_seq(&mut self) -> u64 {
        let s = self.next;
        self.next = (self.next + 1) & !RECV_BIT;
        s
    }

    /// Record a posted work request. Never grows the FIFO past its depth: callers check
    /// [`has_room`](Self::has_room) before posting; an entry beyond it is refused.
    ///
    /// # Errors
    /// [`ProviderError::Busy`] when the FIFO is full (a caller bug).
    pub fn push(&mut self, seq: u64, kind: SqKind) -> Result<(), ProviderError> {
        if self.fifo.len() >= self.depth {
            debug_assert!(false, "send queue overfilled");
            return Err(ProviderError::Busy);
        }
        self.fifo.push_back(SqEntry { seq, kind });
        Ok(())
    }

    /// Retire every entry up to and including `seq`; `f(entry, own)` is called for each in
    /// order, `own` for the entry whose completion this is.
    pub fn retire_through(&mut self, seq: u64, mut f: impl FnMut(SqEntry, bool)) {
        while let Some(e) = self.fifo.front().copied() {
            if e.seq > seq {
                break;
            }
            self.fifo.pop_front();
            f(e, e.seq == seq);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn retire_through_is_in_order_and_inclusive() {
        let mut q = SendQueue::new(4).unwrap();
        for k in 0..3 {
            let s = q.next_seq();
            q.push(s, SqKind::User(k)).unwrap();
        }
        assert!(q.has_room(1) && !q.has_room(2));
        let mut seen = Vec::new();
        q.retire_through(1, |e, own| seen.push((e.seq, own)));
        assert_eq!(seen, [(0, false), (1, true)]);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn sequence_numbers_never_carry_the_receive_bit() {
        let mut q = SendQueue::new(1).unwrap();
        q.next = RECV_BIT - 1;
        assert_eq!(q.next_seq(), RECV_BIT - 1);
        assert_eq!(q.next_seq(), 0);
    }
}
