//! A fault injector in the style of smoltcp's `phy::FaultInjector`: [`FaultInjector`] wraps a
//! provider, implements [`Provider`] itself, and injects connection failures, lost Sends and
//! corrupted Sends at chosen points.
//!
//! Counting is deterministic (no randomness): the injector counts the work requests that
//! pass through [`Provider::post_send`] successfully (a refused chain — `Busy`, `BadId`, … —
//! counts nothing and fires nothing), Sends (Send and gathered Send, with or without
//! invalidation), RDMA Reads, RDMA Writes, and `poll_cq` calls. Each configured fault fires
//! once.
//!
//! Faults that act on one work request inside a chain need the provider's cooperation, so
//! the wrapped provider implements [`FaultTarget`]: it executes a chain with faults attached
//! to chosen requests ([`WrFault`]), after validating the whole chain as usual (so a chain
//! stays all-or-nothing). [`SoftQp`](super::SoftQp) implements it; a hardware provider could
//! implement [`WrFault::BreakBefore`] (disconnect) and drop/corrupt by other means, or not at
//! all.
//!
//! What the faults model:
//!
//! * **disconnect** — the connection breaks (as if the peer disconnected or the QP hit a
//!   fatal error) just before a chosen work request: that request and every later one of the
//!   chain complete [`WcStatus::Flushed`](crate::provider::WcStatus::Flushed), posted receives
//!   flush on both sides, both sides see `Disconnected`;
//! * **drop** — a Send is lost on the wire for good: RC retransmits, gives up, and the
//!   request completes
//!   [`WcStatus::TransportRetryExceeded`](crate::provider::WcStatus::TransportRetryExceeded);
//!   the connection breaks; the peer never sees the message (its receive is flushed);
//! * **corrupt** — a Send arrives with one byte XORed (the sender's completion is a normal
//!   success): models a bug or memory corruption on the path, which RC's CRC would not catch
//!   because it happened before the NIC;
//! * **flush** — the connection breaks at a chosen `poll_cq` call (before polling), or when
//!   the test calls [`FaultInjector::flush_now`].

use crate::provider::{Completion, Middleware, Provider, ProviderError, SendOp, SendWr};

/// A fault attached to one work request of a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrFault {
    /// Break the connection just before this request executes; it and the rest of the chain
    /// complete flushed. At index `wrs.len()`: break after the whole chain executed.
    BreakBefore,
    /// The request is lost: it completes with `TransportRetryExceeded` and the connection
    /// breaks.
    Drop,
    /// A Send is delivered with byte `offset` of the message XORed with `xor` (no effect on
    /// other requests, or if the message is shorter than `offset + 1`).
    Corrupt {
        /// Byte offset in the delivered message.
        offset: u32,
        /// Bits to flip.
        xor: u8,
    },
}

/// A provider that can execute a chain with injected faults.
pub trait FaultTarget: Provider {
    /// Like [`Provider::post_send`], with `faults`: (index into `wrs`, fault). Validation
    /// and the all-or-nothing rule are those of `post_send`; faults apply only if the chain
    /// is accepted.
    ///
    /// # Errors
    /// As [`Provider::post_send`].
    fn post_send_faulted(
        &mut self,
        wrs: &[SendWr<'_>],
        faults: &[(usize, WrFault)],
    ) -> Result<(), ProviderError>;

    /// Break the connection now (both sides to the error state, flushes, `Disconnected`).
    fn break_connection(&mut self);
}

/// Corrupt the `nth` Send (1-based): XOR byte `offset` of the delivered message with `xor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CorruptSend {
    /// Which Send, counting from 1.
    pub nth: u64,
    /// Byte offset in the message.
    pub offset: u32,
    /// Bits to flip.
    pub xor: u8,
}

/// What to inject. All counts are over the injector's lifetime; `nth` values count from 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultConfig {
    /// Break the connection once this many send-queue work requests have executed: they
    /// complete normally, the next one (in the same chain or a later one) is flushed or
    /// refused. `Some(0)` breaks before the first request.
    pub disconnect_after_wrs: Option<u64>,
    /// Break the connection just before the nth Send (it completes flushed).
    pub disconnect_at_send: Option<u64>,
    /// Break the connection just before the nth RDMA Read (it completes flushed).
    pub disconnect_at_read: Option<u64>,
    /// Break the connection just before the nth RDMA Write (it completes flushed).
    pub disconnect_at_write: Option<u64>,
    /// Lose the nth Send (`TransportRetryExceeded`, connection breaks).
    pub drop_send: Option<u64>,
    /// Corrupt one byte of the nth Send.
    pub corrupt_send: Option<CorruptSend>,
    /// Break the connection at the nth `poll_cq` call, before polling.
    pub flush_at_poll: Option<u64>,
}

/// What the injector counted and injected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Send-queue work requests posted successfully.
    pub wrs: u64,
    /// Sends among them.
    pub sends: u64,
    /// RDMA Reads among them.
    pub reads: u64,
    /// RDMA Writes among them.
    pub writes: u64,
    /// `poll_cq` calls.
    pub polls: u64,
    /// Disconnects injected (after N requests, at the nth Send / Read / Write).
    pub disconnects: u64,
    /// Sends dropped.
    pub drops: u64,
    /// Sends corrupted.
    pub corruptions: u64,
    /// Flushes injected (`flush_at_poll` or [`FaultInjector::flush_now`]).
    pub flushes: u64,
}

/// A [`Provider`] wrapper that injects faults into the wrapped provider.
#[derive(Debug)]
pub struct FaultInjector<P> {
    inner: P,
    config: FaultConfig,
    /// Faults not yet fired.
    armed: FaultConfig,
    stats: FaultStats,
}

/// Planned faults for one chain: at most one of each configured kind fires per chain.
type Plan = heapless::Vec<(usize, WrFault), 8>;

impl<P: FaultTarget> FaultInjector<P> {
    /// Wrap `inner`, injecting what `config` says.
    pub fn new(inner: P, config: FaultConfig) -> Self {
        FaultInjector {
            inner,
            config,
            armed: config,
            stats: FaultStats::default(),
        }
    }

    /// The configuration given to [`FaultInjector::new`].
    pub fn config(&self) -> FaultConfig {
        self.config
    }

    /// Counters.
    pub fn stats(&self) -> FaultStats {
        self.stats
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The wrapped provider, mutably (operations on it are not counted).
    pub fn inner_mut(&mut self) -> &mut P {
        &mut self.inner
    }

    /// Unwrap.
    pub fn into_inner(self) -> P {
        self.inner
    }

    /// Break the connection now (a flush at a point the test chooses).
    pub fn flush_now(&mut self) {
        self.stats.flushes += 1;
        self.inner.break_connection();
    }
}

// Faults are injected into `post_send` and `poll_cq`; everything else goes to the wrapped
// provider unchanged.
crate::forward_provider!(middleware [P: FaultTarget] FaultInjector<P>);

impl<P: FaultTarget> Middleware for FaultInjector<P> {
    fn wrapped(&self) -> &impl Provider {
        &self.inner
    }

    fn wrapped_mut(&mut self) -> &mut impl Provider {
        &mut self.inner
    }

    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), ProviderError> {
        let mut plan = Plan::new();
        let mut armed = self.armed;
        let mut st = self.stats;
        // `Plan` holds 8 entries; at most 6 kinds can fire in one chain, so pushes succeed.
        fn add(plan: &mut Plan, at: usize, f: WrFault, st: &mut FaultStats) {
            if plan.push((at, f)).is_ok() {
                match f {
                    WrFault::BreakBefore => st.disconnects += 1,
                    WrFault::Drop => st.drops += 1,
                    WrFault::Corrupt { .. } => st.corruptions += 1,
                }
            }
        }
        fn fire(slot: &mut Option<u64>, count: u64) -> bool {
            if *slot == Some(count) {
                *slot = None;
                true
            } else {
                false
            }
        }
        for (i, wr) in wrs.iter().enumerate() {
            if fire(&mut armed.disconnect_after_wrs, st.wrs) {
                add(&mut plan, i, WrFault::BreakBefore, &mut st);
            }
            match wr.op {
                SendOp::Send { .. } | SendOp::SendGather { .. } => {
                    st.sends += 1;
                    if fire(&mut armed.disconnect_at_send, st.sends) {
                        add(&mut plan, i, WrFault::BreakBefore, &mut st);
                    }
                    if fire(&mut armed.drop_send, st.sends) {
                        add(&mut plan, i, WrFault::Drop, &mut st);
                    }
                    if let Some(c) = armed.corrupt_send.filter(|c| c.nth == st.sends) {
                        armed.corrupt_send = None;
                        let f = WrFault::Corrupt {
                            offset: c.offset,
                            xor: c.xor,
                        };
                        add(&mut plan, i, f, &mut st);
                    }
                }
                SendOp::RdmaRead { .. } => {
                    st.reads += 1;
                    if fire(&mut armed.disconnect_at_read, st.reads) {
                        add(&mut plan, i, WrFault::BreakBefore, &mut st);
                    }
                }
                SendOp::RdmaWrite { .. } => {
                    st.writes += 1;
                    if fire(&mut armed.disconnect_at_write, st.writes) {
                        add(&mut plan, i, WrFault::BreakBefore, &mut st);
                    }
                }
                SendOp::LocalInv { .. } => {}
            }
            st.wrs += 1;
        }
        if fire(&mut armed.disconnect_after_wrs, st.wrs) {
            add(&mut plan, wrs.len(), WrFault::BreakBefore, &mut st);
        }
        self.inner.post_send_faulted(wrs, &plan)?;
        self.armed = armed;
        self.stats = st;
        Ok(())
    }

    fn poll_cq(&mut self, out: &mut [Completion]) -> usize {
        self.stats.polls += 1;
        if self.armed.flush_at_poll == Some(self.stats.polls) {
            self.armed.flush_at_poll = None;
            self.flush_now();
        }
        self.inner.poll_cq(out)
    }
}
