//! Chain storage kept for reuse: an endpoint that builds chains for its upper layer (a
//! transport handing up received messages) takes their storage from a [`ChainPool`], and a
//! chain built that way gives its storage back when it is dropped, wherever that happens. A
//! steady stream of messages then reuses the same few buffers instead of allocating one per
//! message (FreeBSD gets the same from its mbuf UMA zone and per-CPU caches).
//!
//! The pool never blocks: it is behind a spin lock that is only ever *tried*; a chain dropped
//! while another thread holds the lock frees its storage instead, and a chain taken while the
//! pool is busy or empty starts without storage (its first mbuf allocates, fallibly, like any
//! chain). The number of buffers kept is bounded at construction.

use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::chain::Chain;
use crate::error::MbufError;
use crate::mbuf::{Mbuf, MLEN};

/// Spare chain storage of one owner (see the module docs of `mbuf/src/pool.rs`).
pub struct ChainPool {
    spare: spin::Mutex<Spare>,
}

/// The buffers kept, and a lower bound of their capacities: a full pool offered a buffer no
/// larger than that bound drops it at once, without looking for its smallest buffer (the
/// steady state, where every buffer has the same capacity).
struct Spare {
    bufs: Vec<VecDeque<Mbuf>>,
    /// At most the smallest capacity in `bufs` (taking buffers out only raises the minimum).
    min_cap: usize,
    /// Recycled chains that kept their first mbuf (an emptied internal one) and belong to no
    /// pool: [`ChainPool::chain_from_bytes`] refills that mbuf in place instead of an mbuf
    /// being freed by one chain and built again for the next.
    primed: Vec<Chain>,
}

impl ChainPool {
    /// A pool keeping at most `max_spare` emptied buffers and `max_spare` recycled ones that
    /// kept their first mbuf (see [`recycle`](Self::recycle)). Buffers are not allocated
    /// here: they come from the chains that return to the pool.
    ///
    /// # Errors
    /// [`MbufError::Alloc`] if the table of spares cannot be allocated.
    pub fn new(max_spare: usize) -> Result<Arc<ChainPool>, MbufError> {
        let mut bufs = Vec::new();
        bufs.try_reserve_exact(max_spare)?;
        let mut primed = Vec::new();
        primed.try_reserve_exact(max_spare)?;
        Ok(Arc::new(ChainPool {
            spare: spin::Mutex::new(Spare {
                bufs,
                min_cap: 0,
                primed,
            }),
        }))
    }

    /// An empty chain whose storage comes from (and returns to) this pool.
    pub fn chain(self: &Arc<Self>) -> Chain {
        let mbufs = self
            .spare
            .try_lock()
            .and_then(|mut s| {
                s.bufs
                    .pop()
                    .or_else(|| s.primed.pop().map(|mut c| c.take_storage()))
            })
            .unwrap_or_default();
        Chain::pooled(mbufs, Arc::clone(self))
    }

    /// Keep the storage of `chain` (any chain: its mbufs are freed) if the pool has room: an
    /// endpoint that consumes chains (a reply it has sent) feeds the pool it builds chains
    /// from (the calls it hands up), so neither side allocates nor frees in steady state.
    ///
    /// A chain whose first mbuf is a writable internal one keeps it (emptied) with its
    /// storage, for [`chain_from_bytes`](Self::chain_from_bytes) to refill.
    pub fn recycle(&self, mut chain: Chain) {
        if chain.prime() {
            if let Some(mut s) = self.spare.try_lock() {
                if s.primed.len() < s.primed.capacity() {
                    s.primed.push(chain);
                    return;
                }
            }
        }
        self.put(chain.take_storage());
    }

    /// A chain of the pool holding a copy of `data` (like [`Chain::from_bytes`]): when `data`
    /// fits an internal mbuf and the pool has one kept by [`recycle`](Self::recycle), that
    /// mbuf is refilled in place; otherwise as [`chain`](Self::chain) then
    /// [`Chain::append`].
    ///
    /// # Errors
    /// [`MbufError::Alloc`].
    pub fn chain_from_bytes(self: &Arc<Self>, data: &[u8]) -> Result<Chain, MbufError> {
        let primed = if data.is_empty() || data.len() > MLEN {
            None
        } else {
            self.spare.try_lock().and_then(|mut s| s.primed.pop())
        };
        let mut c = match primed {
            Some(mut c) => {
                c.adopt(Arc::clone(self));
                c
            }
            None => self.chain(),
        };
        c.set_bytes(data)?;
        Ok(c)
    }

    /// An empty chain of the pool with room for at least `mbufs` mbufs if the pool has such a
    /// buffer (the most recently returned one that is large enough; the search is bounded by
    /// the pool's size), else as [`chain`](Self::chain).
    pub fn chain_with(self: &Arc<Self>, mbufs: usize) -> Chain {
        let found = self.spare.try_lock().and_then(|mut s| {
            let i = s.bufs.iter().rposition(|d| d.capacity() >= mbufs)?;
            Some(s.bufs.swap_remove(i))
        });
        match found {
            Some(d) => Chain::pooled(d, Arc::clone(self)),
            None => self.chain(),
        }
    }

    /// Buffers waiting for reuse (with or without a kept mbuf).
    pub fn spare(&self) -> usize {
        self.spare
            .try_lock()
            .map_or(0, |s| s.bufs.len() + s.primed.len())
    }

    /// Take back the storage of a dropped chain (its mbufs already freed). When the pool is
    /// full it keeps the larger buffers: the smallest one goes (or the new one, if smaller).
    pub(crate) fn put(&self, mbufs: VecDeque<Mbuf>) {
        if mbufs.capacity() == 0 {
            return;
        }
        let Some(mut s) = self.spare.try_lock() else {
            return;
        };
        let cap = mbufs.capacity();
        if s.bufs.len() < s.bufs.capacity() {
            s.min_cap = if s.bufs.is_empty() {
                cap
            } else {
                s.min_cap.min(cap)
            };
            s.bufs.push(mbufs);
            return;
        }
        if cap <= s.min_cap {
            return;
        }
        let smallest = s
            .bufs
            .iter_mut()
            .min_by_key(|d| d.capacity())
            .filter(|d| d.capacity() < cap);
        if let Some(d) = smallest {
            *d = mbufs;
        }
        s.min_cap = s.bufs.iter().map(VecDeque::capacity).min().unwrap_or(0);
    }
}

impl core::fmt::Debug for ChainPool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ChainPool")
            .field("spare", &self.spare())
            .finish()
    }
}
