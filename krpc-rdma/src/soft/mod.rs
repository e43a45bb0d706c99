//! The in-process software RC provider: two connected [`SoftQp`]s that implement
//! [`Provider`](crate::provider::Provider) with real reliable-connected semantics, for tests.
//! Feature `soft`; `no_std` + `alloc` + `spin`, no `unsafe`.
//!
//! [`pair`] makes a connection. Each side's first [`poll_event`] is
//! [`CmEvent::Established`](crate::provider::CmEvent::Established) carrying the *peer's*
//! [`SoftConfig::private_data`]. Each side owns its send and receive buffers and has its own
//! [`PageProvider`] (the two may be the same).
//!
//! # Execution model
//!
//! Work executes when it is posted, in order, under the connection's lock: `post_send` runs
//! each request of the chain against the peer and queues completions, in order, in this
//! side's completion queue (and, for a Send, a receive completion in the peer's). `poll_cq`
//! returns them in order. A chain is all-or-nothing: every request is validated first
//! (buffer ids, lengths, SGE counts, local fragment bounds, `LocalInv` ids), then the
//! send-queue room is checked, and only then does anything execute.
//!
//! * **Send** consumes the peer's oldest posted receive and completes it with
//!   `wr_id` = buffer id, [`WcKind::Recv`](crate::provider::WcKind::Recv) and `byte_len`.
//!   Gathered Sends copy the buffer bytes, then the page fragments (read with
//!   [`PageProvider::read_page`]). Send With Invalidate revokes the peer's registration after
//!   delivering and the receive completion reports it in `invalidated`.
//! * **RDMA Read / Write** check the handle at the peer (live, not invalidated, `REMOTE_READ`
//!   resp. `REMOTE_WRITE`, `[offset, offset + len)` inside the registration's iova range),
//!   then copy between the peer's registered pages and our local fragments — the one copy a
//!   software provider must make (through a bounce buffer, see `dma`).
//! * **LocalInv** revokes one of our registrations and always completes (signaled or not).
//!   Invalidating an already invalidated registration succeeds (idempotent, like a second
//!   `LOCAL_INV` of an rkey that is already free on most hardware); an unknown or released
//!   id is refused at post time with [`ProviderError::BadId`].
//!
//! # Errors that break the connection
//!
//! As on real RC, every error completion moves the queue pair to the error state, which here
//! breaks the connection for both sides:
//!
//! | Cause | Requester's completion | Responder |
//! |---|---|---|
//! | Send, no receive posted at the peer | `RnrRetryExceeded` | — |
//! | Send larger than the peer's receive buffer | `Other` (remote invalid request) | receive consumed, `LocalError` |
//! | Send With Invalidate of a handle that is not a live, valid registration of the peer (nor one `revoke` holds back: accepted, as rxe accepts a key that still matches) | `RemoteAccess` | receive consumed, `LocalError` |
//! | RDMA Read/Write: unknown, released or invalidated handle, missing right, range outside | `RemoteAccess` | — |
//! | A local fragment the page provider cannot map | `LocalError` | — |
//! | Injected loss ([`fault`]) | `TransportRetryExceeded` | — |
//!
//! Breaking the connection (for any cause, [`SoftQp::disconnect`], or dropping a `SoftQp`):
//! the rest of the failing chain completes [`WcStatus::Flushed`] (signaled or not), every
//! posted receive on both sides completes `Flushed`, each side gets one
//! [`CmEvent::Disconnected`](crate::provider::CmEvent::Disconnected), and later posts fail
//! with [`ProviderError::NotConnected`]. `poll_cq`, `register`, `release`, `send_buf` and
//! `recv_buf` keep working; registrations stay until released (the core must release them
//! to return the page references).
//!
//! # Queue depth
//!
//! Because work executes at post time, a request occupies its send-queue slot only while its
//! completion waits in the completion queue: a chain of `n` requests needs `n` free slots
//! (else [`ProviderError::Busy`], nothing posted); each completion frees its slot when
//! polled; a successful unsignaled request frees its slot at once (it has no completion).
//! [`SoftQp::set_strict_send_queue`] switches to the hardware rule instead, where a
//! successful unsignaled request keeps its slot until the completion of a later request is
//! polled. `max_rd_atomic` is reported but never binds (Reads finish at post time). The
//! completion queue is sized `max_send_wr + recv_bufs` at creation and cannot overflow.
//!
//! # Registrations
//!
//! See `mr`: one FRWR-like segment per registration (every fragment but the first starts at
//! in-page offset 0, every fragment but the last ends at the page end, else
//! [`ProviderError::BadFragments`]), handles are 24-bit slot + 8-bit key so stale handles do
//! not match new registrations, at most `max_registrations` live ([`ProviderError::Busy`]),
//! and **each registration holds one page reference on every distinct page it covers until it
//! is released**, so the peer can never reach a freed page. `release` revokes (if still
//! valid), drops those references and frees the slot.
//!
//! [`poll_event`]: crate::provider::Provider::poll_event
//! [`PageProvider`]: mbuf::PageProvider
//! [`PageProvider::read_page`]: mbuf::PageProvider::read_page
//! [`WcStatus::Flushed`]: crate::provider::WcStatus::Flushed
//! [`ProviderError::BadId`]: crate::provider::ProviderError::BadId
//! [`ProviderError::NotConnected`]: crate::provider::ProviderError::NotConnected
//! [`ProviderError::Busy`]: crate::provider::ProviderError::Busy
//! [`ProviderError::BadFragments`]: crate::provider::ProviderError::BadFragments

extern crate alloc;

mod dma;
mod fabric;
pub mod fault;
pub mod lock;
mod mr;
mod qp;

use alloc::sync::Arc;

use mbuf::PageProvider;

use crate::provider::{ProviderError, Resources};

pub use fault::{CorruptSend, FaultConfig, FaultInjector, FaultStats, FaultTarget, WrFault};
pub use lock::{set_relax_hook, FabricLock, Relax};
pub use mr::MAX_SOFT_REGISTRATIONS;
pub use qp::SoftQp;

/// Resources and connection parameters of one [`SoftQp`].
///
/// How the soft queue pair reads [`Resources`]: a gathered Send takes one SGE for its
/// buffer (if its length is not zero) plus one per page fragment, an RDMA operation one
/// per local fragment; `max_registrations` is at most [`MAX_SOFT_REGISTRATIONS`];
/// `max_rd_atomic` is reported and never binds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SoftConfig {
    /// Buffers, queue depths and limits ([`Resources::default`] unless set).
    pub resources: Resources,
    /// What the peer's `Established` event carries (RFC 8797 private data; none by default).
    pub private_data: heapless::Vec<u8, 56>,
}

impl SoftConfig {
    /// A configuration with `resources` and no private data.
    pub fn with(resources: Resources) -> Self {
        SoftConfig {
            resources,
            private_data: heapless::Vec::new(),
        }
    }

    /// The [`Resources`] a queue pair with this configuration reports.
    pub fn resources(&self) -> Resources {
        self.resources
    }
}

/// Counters of one side of a soft connection (cumulative).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SoftStats {
    /// Sends (all kinds) this side delivered successfully.
    pub sends: u64,
    /// Bytes those Sends delivered.
    pub send_bytes: u64,
    /// Receives that completed successfully on this side.
    pub recvs: u64,
    /// RDMA Reads this side executed successfully.
    pub rdma_reads: u64,
    /// Bytes they copied.
    pub rdma_read_bytes: u64,
    /// RDMA Writes this side executed successfully.
    pub rdma_writes: u64,
    /// Bytes they copied.
    pub rdma_write_bytes: u64,
    /// Local invalidations executed.
    pub local_invs: u64,
    /// Registrations of this side the peer invalidated with Send With Invalidate.
    pub remote_invs: u64,
    /// Successful `register` calls.
    pub registrations: u64,
    /// Successful `release` calls.
    pub releases: u64,
    /// Completions with an error status other than `Flushed` (either queue).
    pub error_completions: u64,
    /// Flushed completions (either queue).
    pub flushed: u64,
    /// Sends delivered corrupted by an injected fault.
    pub corrupted_sends: u64,
    /// Sends lost by an injected fault.
    pub dropped_sends: u64,
    /// Completions lost because the completion queue could not grow (should stay 0).
    pub cq_overflows: u64,
}

/// Make two connected queue pairs: `a` with `cfg_a` over `pages_a`, `b` with `cfg_b` over
/// `pages_b`.
///
/// # Errors
/// [`ProviderError::NoMemory`] if a buffer or table cannot be allocated (every allocation
/// uses `try_reserve`, except the one `Arc` of the shared state) or `max_registrations`
/// exceeds [`MAX_SOFT_REGISTRATIONS`].
pub fn pair(
    cfg_a: SoftConfig,
    pages_a: Arc<dyn PageProvider>,
    cfg_b: SoftConfig,
    pages_b: Arc<dyn PageProvider>,
) -> Result<(SoftQp, SoftQp), ProviderError> {
    let side_a = fabric::Side::boxed(fabric::End::A, &cfg_a, pages_a, cfg_b.private_data.clone())?;
    let side_b = fabric::Side::boxed(fabric::End::B, &cfg_b, pages_b, cfg_a.private_data.clone())?;
    let shared = Arc::new(FabricLock::new(fabric::Fabric::new(side_a, side_b)?));
    let a = SoftQp::new(Arc::clone(&shared), fabric::End::A, cfg_a.resources())?;
    let b = SoftQp::new(shared, fabric::End::B, cfg_b.resources())?;
    Ok((a, b))
}
