//! Handles dropped unconsumed: the table a guard handle writes into when the upper layer drops
//! it without handing it back ([`ReplyCtx`](super::ReplyCtx) at the Responder,
//! [`ReverseCtx`](super::ReverseCtx) at the Requester), and the scan its owner reclaims them
//! with.
//!
//! A drop needs no reference to its owner: it writes the handle's generation into the slot of
//! its index (one `AtomicU32` per slot, allocated with the owner) and counts itself, so a drop
//! allocates nothing and may happen on any thread. The owner looks at the table only when the
//! count is not 0 (one atomic load otherwise), and acts on a mark only if the slot still holds
//! that generation: a mark of a handle already stale (the connection's loss, or the slot
//! reused) is just cleared. Generations are never 0: 0 marks "nothing dropped".

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};

use super::error::CallError;

/// The slots whose handle was dropped unconsumed, shared by an owner and every handle it
/// handed out.
#[derive(Debug)]
pub(crate) struct Returns {
    /// Per slot: the generation of its dropped handle, 0 for none (a generation is never 0).
    dropped: Vec<AtomicU32>,
    /// Drops not reclaimed yet: the owner looks at `dropped` only when this is not 0.
    count: AtomicU32,
}

impl Returns {
    /// A table of `n` slots, none marked.
    ///
    /// # Errors
    /// [`CallError::NoMemory`].
    pub(crate) fn new(n: u32) -> Result<Self, CallError> {
        let mut dropped = Vec::new();
        dropped
            .try_reserve_exact(n as usize)
            .map_err(|_| CallError::NoMemory)?;
        dropped.extend((0..n).map(|_| AtomicU32::new(0)));
        Ok(Returns {
            dropped,
            count: AtomicU32::new(0),
        })
    }

    /// Mark slot `idx` as dropped by its handle of `generation` (a handle's `Drop`; the
    /// owner also marks again a slot it could not act on yet, for its next scan).
    pub(crate) fn give_back(&self, idx: u32, generation: u32) {
        if let Some(slot) = self.dropped.get(idx as usize) {
            slot.store(generation, Ordering::Release);
            self.count.fetch_add(1, Ordering::Release);
        }
    }

    /// Start a pass over the marks, if there are any (one atomic load when there are none):
    /// the count is reset first, so a drop racing with the pass is seen by the next one.
    pub(crate) fn scan(&self) -> Option<Scan> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.count.store(0, Ordering::Release);
        Some(Scan { next: 0 })
    }
}

/// Whether two guard handles' tables are the same one (both consumed counts as the same):
/// what their `PartialEq` compares besides index and generation.
pub(crate) fn same_table(a: &Option<Arc<Returns>>, b: &Option<Arc<Returns>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// A pass over the marks of a [`Returns`] ([`Returns::scan`]): a cursor, not a borrow, so
/// that the owner may change itself between two marks.
#[derive(Debug)]
pub(crate) struct Scan {
    next: usize,
}

impl Scan {
    /// The next marked slot of `returns`, its mark cleared: its index and the generation of
    /// the handle dropped. The owner acts on it only if the slot still holds that generation.
    pub(crate) fn next_mark(&mut self, returns: &Returns) -> Option<(u32, u32)> {
        while let Some(slot) = returns.dropped.get(self.next) {
            let idx = self.next as u32;
            self.next += 1;
            let g = slot.load(Ordering::Acquire);
            if g == 0 {
                continue;
            }
            // Only the value read: a drop racing with this pass (its count added after the
            // reset in `scan`) stays for the next one.
            let _ = slot.compare_exchange(g, 0, Ordering::AcqRel, Ordering::Relaxed);
            return Some((idx, g));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn marks(r: &Returns) -> Option<alloc::vec::Vec<(u32, u32)>> {
        let mut scan = r.scan()?;
        let mut v = alloc::vec::Vec::new();
        while let Some(m) = scan.next_mark(r) {
            v.push(m);
        }
        Some(v)
    }

    #[test]
    fn a_scan_yields_each_mark_once_and_a_mark_given_back_again_comes_next_time() {
        let r = Returns::new(4).unwrap();
        assert!(r.scan().is_none(), "nothing dropped");
        r.give_back(2, 7);
        r.give_back(0, 3);
        r.give_back(9, 1); // beyond the table: ignored
        assert_eq!(marks(&r).unwrap(), [(0, 3), (2, 7)]);
        assert!(r.scan().is_none(), "cleared");
        // Marked again during a pass (the owner could not act on it yet): the next pass.
        r.give_back(1, 5);
        let mut scan = r.scan().unwrap();
        let m = scan.next_mark(&r).unwrap();
        assert_eq!(m, (1, 5));
        r.give_back(m.0, m.1);
        assert_eq!(scan.next_mark(&r), None);
        assert_eq!(marks(&r).unwrap(), [(1, 5)]);
        assert!(Returns::new(0).unwrap().scan().is_none());
    }
}
