//! A page budget shared by the connections of one server, the way their pages are shared.
//!
//! A server whose connections all take their RDMA-Read pages from one arena (the userspace
//! `nfsd` registers one 256 MiB arena for every connection; a kernel server takes pages from
//! one pool) needs more than each connection's own `max_ddp_bytes`: several connections, each
//! inside its own budget, can together empty the arena, and then another client's ordinary
//! WRITE finds no page and its connection is closed. [`SharedPages`] is the server-wide
//! budget (the arena's size, or a part of it) and [`PageShare`] one connection's part in it,
//! held by that connection's [`Responder`](super::Responder).
//!
//! The rule ([`admit`], pure): a call's pages are taken only if the server-wide total stays
//! within the budget, and a connection that already holds pages may take more only up to its
//! **fair share**, the budget divided by the connections *active* (holding pages or waiting
//! for them). A connection holding nothing may always start one call when there is room, so
//! a 1 MiB WRITE is never starved by the share's rounding. So a connection alone may use the
//! whole budget; once another asks, the first one's further calls wait (its read jobs do not
//! start: the client is throttled by its credits) until it is back under its share, while
//! the newcomer's calls take the pages the first one frees. Nobody is refused or closed for
//! the budget: calls only wait, and only the calls of a connection at or over its share (or
//! of one that finds the whole budget taken, until pages come back).
//!
//! The pages a server takes from the same pool for its replies (an NFS READ's data) are
//! charged to the same share through [`Responder::take_reply_pages`](super::Responder::take_reply_pages)
//! before the server takes them, and held until the reply's Send completes: a READ flood
//! waits over its share like a WRITE flood, and with every large user of the arena inside
//! one budget smaller than the arena, an admitted call's pages are always there.
//!
//! Lock-free (one compare-and-swap per admission) and `no_std`: the same type serves a
//! kernel server. Waiters are not woken: a connection whose calls wait retries on its own
//! next `poll` (the userspace servers poll such a connection every millisecond).

use alloc::sync::Arc;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// What [`admit`] decides for one request of pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Take the pages.
    Take,
    /// Wait: the connection holds pages and this request would take it over its fair share.
    OverShare,
    /// Wait: the server-wide budget has no room for the request now.
    NoRoom,
}

/// The fair share of one of `active` connections in a budget of `total` bytes.
pub fn fair_share(total: usize, active: usize) -> usize {
    total / active.max(1)
}

/// The rule: may a connection holding `held` bytes take `need` more, `in_use` bytes of the
/// `total` budget being held by all connections together and `active` connections (this one
/// included) holding or waiting for pages?
pub fn admit(total: usize, in_use: usize, active: usize, held: usize, need: usize) -> Admission {
    if in_use.saturating_add(need) > total {
        Admission::NoRoom
    } else if held > 0 && held.saturating_add(need) > fair_share(total, active) {
        Admission::OverShare
    } else {
        Admission::Take
    }
}

/// The server-wide page budget (see the module documentation). Shared by `Arc`; each
/// connection joins it with [`SharedPages::join`].
#[derive(Debug)]
pub struct SharedPages {
    total: usize,
    in_use: AtomicUsize,
    active: AtomicUsize,
    joined: AtomicUsize,
    waits: AtomicU64,
    peak: AtomicUsize,
}

impl SharedPages {
    /// A budget of `total` bytes (the arena's size, or what of it the RDMA Reads may hold).
    pub fn new(total: usize) -> Arc<SharedPages> {
        Arc::new(SharedPages {
            total,
            in_use: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            joined: AtomicUsize::new(0),
            waits: AtomicU64::new(0),
            peak: AtomicUsize::new(0),
        })
    }

    /// A connection's part in the budget.
    pub fn join(self: &Arc<Self>) -> PageShare {
        self.joined.fetch_add(1, Ordering::Relaxed);
        PageShare {
            shared: self.clone(),
            held: 0,
            waiting: false,
            active: false,
        }
    }

    /// The budget, in bytes.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Bytes the connections hold now.
    pub fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Acquire)
    }

    /// The most bytes held at once so far.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Connections holding or waiting for pages now.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    /// Connections joined and not yet gone.
    pub fn connections(&self) -> usize {
        self.joined.load(Ordering::Relaxed)
    }

    /// Requests that had to wait, over every connection.
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }
}

/// One connection's part in a [`SharedPages`] budget. Not shared: the connection's
/// Responder owns it. Dropping it gives back whatever it still holds.
#[derive(Debug)]
pub struct PageShare {
    shared: Arc<SharedPages>,
    held: usize,
    /// The last request was told to wait.
    waiting: bool,
    /// Counted in `shared.active`: holding pages, or waiting for them.
    active: bool,
}

impl PageShare {
    /// Take `need` bytes for one call, or say why it must wait. A connection that is told to
    /// wait stays counted as active (so the others' fair shares shrink) until it takes pages
    /// or [`PageShare::stop_waiting`].
    pub fn try_take(&mut self, need: usize) -> Admission {
        self.waiting = true;
        self.sync_active();
        let s = &*self.shared;
        let mut used = s.in_use.load(Ordering::Acquire);
        loop {
            let active = s.active.load(Ordering::Acquire);
            match admit(s.total, used, active, self.held, need) {
                Admission::Take => {}
                wait => {
                    s.waits.fetch_add(1, Ordering::Relaxed);
                    return wait;
                }
            }
            match s.in_use.compare_exchange_weak(
                used,
                used + need,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    s.peak.fetch_max(used + need, Ordering::Relaxed);
                    self.held += need;
                    self.waiting = false;
                    return Admission::Take;
                }
                Err(now) => used = now,
            }
        }
    }

    /// Give back `bytes` taken by [`PageShare::try_take`] (a call's context ended).
    pub fn give(&mut self, bytes: usize) {
        let bytes = bytes.min(self.held);
        self.held -= bytes;
        self.shared.in_use.fetch_sub(bytes, Ordering::AcqRel);
        self.sync_active();
    }

    /// Nothing waits any more (the waiting calls started, or were lost with the
    /// connection): a connection that holds nothing stops counting as active.
    pub fn stop_waiting(&mut self) {
        self.waiting = false;
        self.sync_active();
    }

    /// Count this connection in `shared.active` exactly while it holds or waits.
    fn sync_active(&mut self) {
        let active = self.held > 0 || self.waiting;
        if active != self.active {
            self.active = active;
            if active {
                self.shared.active.fetch_add(1, Ordering::AcqRel);
            } else {
                self.shared.active.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Bytes this connection holds.
    pub fn held(&self) -> usize {
        self.held
    }

    /// The budget this share is part of.
    pub fn shared(&self) -> &Arc<SharedPages> {
        &self.shared
    }
}

impl Drop for PageShare {
    fn drop(&mut self) {
        let held = self.held;
        self.give(held);
        self.stop_waiting();
        self.shared.joined.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn a_connection_alone_may_use_the_whole_budget() {
        // 8 MiB budget, one active connection: 1 MiB calls up to exactly the budget.
        for held in 0..8 {
            assert_eq!(
                admit(8 * MIB, held * MIB, 1, held * MIB, MIB),
                Admission::Take
            );
        }
        assert_eq!(admit(8 * MIB, 8 * MIB, 1, 8 * MIB, 1), Admission::NoRoom);
    }

    #[test]
    fn over_its_share_a_connection_waits_and_the_others_do_not() {
        // Two active connections, 8 MiB: shares of 4 MiB. The first holds 4 MiB.
        assert_eq!(admit(8 * MIB, 4 * MIB, 2, 4 * MIB, 1), Admission::OverShare);
        // The second, holding 3 MiB, takes its last MiB; one byte more is over its share.
        assert_eq!(admit(8 * MIB, 7 * MIB, 2, 3 * MIB, MIB), Admission::Take);
        assert_eq!(
            admit(8 * MIB, 6 * MIB, 2, 3 * MIB, MIB + 1),
            Admission::OverShare
        );
    }

    #[test]
    fn holding_nothing_a_connection_starts_one_call_whenever_there_is_room() {
        // 100 connections share 8 MiB: 83 KiB each, yet an idle one starts a 1 MiB call.
        assert!(fair_share(8 * MIB, 100) < MIB);
        assert_eq!(admit(8 * MIB, 7 * MIB, 100, 0, MIB), Admission::Take);
        // Not when the budget has no room: it waits for pages to come back.
        assert_eq!(admit(8 * MIB, 7 * MIB + 1, 100, 0, MIB), Admission::NoRoom);
        // A peer's size near usize::MAX saturates instead of wrapping.
        assert_eq!(admit(8 * MIB, 1, 1, 0, usize::MAX), Admission::NoRoom);
        assert_eq!(admit(8 * MIB, 0, 1, 1, usize::MAX), Admission::NoRoom);
    }

    #[test]
    fn fair_share_counts_only_active_connections() {
        assert_eq!(fair_share(8 * MIB, 0), 8 * MIB);
        assert_eq!(fair_share(8 * MIB, 1), 8 * MIB);
        assert_eq!(fair_share(8 * MIB, 3), 8 * MIB / 3);
    }

    #[test]
    fn a_flooder_over_its_share_waits_while_a_newcomer_takes_what_it_frees() {
        let s = SharedPages::new(8 * MIB);
        let mut flood = s.join();
        let mut small = s.join();
        assert_eq!(s.connections(), 2);
        // Alone (the other connection idle), the flooder fills the whole budget.
        for _ in 0..8 {
            assert_eq!(flood.try_take(MIB), Admission::Take);
        }
        assert_eq!((s.in_use(), s.active()), (8 * MIB, 1));
        // The newcomer finds no room and waits, counted active: shares are 4 MiB now.
        assert_eq!(small.try_take(64 << 10), Admission::NoRoom);
        assert_eq!(s.active(), 2);
        // One of the flooder's calls ends: it may not take the MiB back (8 - 1 + 1 > 4).
        flood.give(MIB);
        assert_eq!(flood.try_take(MIB), Admission::OverShare);
        // The newcomer's call takes it.
        assert_eq!(small.try_take(64 << 10), Admission::Take);
        assert_eq!(s.in_use(), 7 * MIB + (64 << 10));
        // The flooder drains to its share and then proceeds again.
        for _ in 0..3 {
            flood.give(MIB);
        }
        assert_eq!(flood.try_take(MIB), Admission::OverShare);
        flood.give(MIB);
        assert_eq!(flood.try_take(MIB), Admission::Take);
        assert_eq!(s.waits(), 3);
        assert_eq!(s.peak(), 8 * MIB);
        // Ending: what each still holds comes back, active and joined counts drop.
        small.give(64 << 10);
        assert_eq!(s.active(), 1);
        drop(flood);
        assert_eq!((s.in_use(), s.active(), s.connections()), (0, 0, 1));
        drop(small);
        assert_eq!(s.connections(), 0);
    }

    #[test]
    fn a_waiter_that_stops_waiting_no_longer_shrinks_the_shares() {
        let s = SharedPages::new(4 * MIB);
        let mut a = s.join();
        let mut b = s.join();
        assert_eq!(a.try_take(4 * MIB), Admission::Take);
        assert_eq!(b.try_take(MIB), Admission::NoRoom);
        assert_eq!(s.active(), 2);
        // b's waiting call went with its connection: a alone again.
        b.stop_waiting();
        assert_eq!(s.active(), 1);
        a.give(MIB);
        assert_eq!(a.try_take(MIB), Admission::Take);
        // Giving back more than held gives back what is held, never wraps.
        a.give(usize::MAX);
        assert_eq!((a.held(), s.in_use()), (0, 0));
    }
}
