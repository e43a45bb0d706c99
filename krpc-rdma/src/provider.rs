//! The provider boundary: the only way the core touches verbs.
//!
//! A [`Provider`] is one reliable-connected queue pair with its completion queue(s), its
//! pre-registered send and receive buffers, and a pool of per-RPC memory registrations. Three
//! implementations exist: the kernel OFED KPI (`ofed-shim`), userspace libibverbs
//! (`krpc-rdma-verbs`), and the in-process software RC provider used by the tests
//! ([`crate::soft`]).
//!
//! The shape follows what both verbs APIs do naturally:
//!
//! * **Work requests are posted in chains** ([`Provider::post_send`] takes a slice, posted in
//!   order as one `ib_post_send` chain). A chain may mix RDMA Write, RDMA Read, Send,
//!   Send With Invalidate and Local Invalidate.
//! * **Completions** come from [`Provider::poll_cq`] with the work-request id the core chose,
//!   a status, and for receives the byte count and the rkey a Send With Invalidate revoked.
//!   When the connection fails every outstanding work request completes with
//!   [`WcStatus::Flushed`] (RC semantics), so the core always gets its resources back.
//! * **Registration** ([`Provider::register`]) exposes a list of page fragments to the peer
//!   for one RPC and returns the segments (handle, length, offset) to advertise. A kernel FRWR
//!   maps discontiguous pages into one iova range (one segment) and posts its REG_MR work
//!   request ahead of whatever the core posts next; a userspace provider binds a memory window
//!   per contiguous run (several segments). Either way, the registration is valid for work
//!   requests posted after `register` returns.
//! * **Invalidation** is either local ([`SendOp::LocalInv`], a signaled work request: the
//!   registration is revoked when it completes), remote (the peer's Send With Invalidate: the
//!   receive completion names the handle in [`Completion::invalidated`]), or forced by
//!   [`Provider::release`], which revokes synchronously whatever is still valid (used when the
//!   connection is gone and work requests can no longer complete normally).
//! * **Connection events** come from [`Provider::poll_event`]; connection set-up itself
//!   (addresses, `rdma_connect`/`rdma_accept`) belongs to the provider's owner, which hands the
//!   core's RFC 8797 private data to the CM and the peer's back to the core.
//!
//! The core is sans-I/O: it calls these methods from its own entry points (`poll`, `call`,
//! `reply`) and never blocks; a provider must not block either.

pub mod binding;
mod middleware;
pub mod profile;

pub use middleware::Middleware;

use mbuf::PageFragment;

use crate::wire::MAX_CHUNK_SEGMENTS;
use crate::Fault;

/// Work-request id chosen by the core, returned in the completion.
pub type WrId = u64;

/// Index of one of the provider's pre-registered send buffers, `0..Resources::send_bufs`.
pub type SendBufId = u32;

/// Index of one of the provider's pre-registered receive buffers, `0..Resources::recv_bufs`.
pub type RecvBufId = u32;

/// Id of a live registration, chosen by the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RegId(pub u32);

/// Fixed resources of a provider, read once by the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resources {
    /// Number of pre-registered send buffers.
    pub send_bufs: u32,
    /// Number of pre-registered receive buffers.
    pub recv_bufs: u32,
    /// Size of each send buffer in bytes (the largest Send the core can build).
    pub send_buf_size: u32,
    /// Size of each receive buffer in bytes (the largest Send the peer may deliver).
    pub recv_buf_size: u32,
    /// Send-queue depth: work requests outstanding at once (signaled or not).
    pub max_send_wr: u32,
    /// Scatter/gather entries per RDMA Read / RDMA Write work request.
    pub max_sge: u32,
    /// Registrations that may be live at once.
    pub max_registrations: u32,
    /// RDMA Reads outstanding at once as initiator (`max_qp_rd_atom` toward the peer).
    pub max_rd_atomic: u32,
}

impl Default for Resources {
    /// What the providers' configurations start from: 64 send and 64 receive buffers of
    /// 4096 bytes, 256 send-queue entries, 16 SGEs, 256 registrations, 16 outstanding Reads.
    fn default() -> Self {
        Resources {
            send_bufs: 64,
            recv_bufs: 64,
            send_buf_size: 4096,
            recv_buf_size: 4096,
            max_send_wr: 256,
            max_sge: 16,
            max_registrations: 256,
            max_rd_atomic: 16,
        }
    }
}

bitflags::bitflags! {
    /// Access the peer is granted on a registration.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Access: u8 {
        /// The peer may RDMA Read the memory (read chunks: the peer pulls our data).
        const REMOTE_READ = 1;
        /// The peer may RDMA Write the memory (write and reply chunks).
        const REMOTE_WRITE = 2;
        /// The memory may be the local sink of our own RDMA Read.
        const LOCAL_WRITE = 4;
    }
}

/// One advertised piece of a registration: what goes into a chunk segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegSegment {
    /// The rkey / handle the peer uses.
    pub handle: u32,
    /// Bytes covered.
    pub length: u32,
    /// Offset (iova) the peer uses for the first byte.
    pub offset: u64,
}

/// A live registration returned by [`Provider::register`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// Provider id, used to invalidate and release it.
    pub id: RegId,
    /// Segments in the order of the registered fragments; their lengths add up to the
    /// registered byte count.
    pub segments: heapless::Vec<RegSegment, MAX_CHUNK_SEGMENTS>,
}

/// Local memory in a work request: one page fragment of the page provider's pages. The
/// provider maps it to an SGE (kernel: DMA address and the local DMA lkey; userspace: the
/// arena's virtual address and its MR lkey).
pub type LocalFragment = PageFragment;

/// The operation of a send-queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp<'a> {
    /// Send the first `len` bytes of a send buffer. With `invalidate`, Send With Invalidate
    /// of that rkey at the peer (only when the peer said it accepts it, RFC 8797).
    Send {
        /// Which buffer.
        buf: SendBufId,
        /// Bytes to send.
        len: u32,
        /// Remote handle to invalidate, if any.
        invalidate: Option<u32>,
    },
    /// Send `len` bytes of a send buffer followed by page fragments (gathered by the NIC, no
    /// copy). Used for inline page data in small messages when the provider's `max_sge` allows.
    SendGather {
        /// Which buffer (its first `len` bytes go first).
        buf: SendBufId,
        /// Bytes of the buffer.
        len: u32,
        /// Page fragments that follow.
        pages: &'a [LocalFragment],
        /// Remote handle to invalidate, if any.
        invalidate: Option<u32>,
    },
    /// RDMA Read `remote` (a segment the peer advertised) into the local fragments, in order;
    /// their lengths must add up to `remote.length`.
    RdmaRead {
        /// Local sinks.
        local: &'a [LocalFragment],
        /// Peer's handle.
        handle: u32,
        /// Peer's offset.
        offset: u64,
    },
    /// RDMA Write the local fragments, in order, to the peer at `handle`/`offset`.
    RdmaWrite {
        /// Local sources.
        local: &'a [LocalFragment],
        /// Peer's handle.
        handle: u32,
        /// Peer's offset.
        offset: u64,
    },
    /// Revoke a registration of ours (LOCAL_INV). Always signaled.
    LocalInv {
        /// The registration.
        reg: RegId,
    },
}

/// One send-queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: WrId,
    /// What to do.
    pub op: SendOp<'a>,
    /// Whether a completion is generated on success (failures always complete; a flushed
    /// unsignaled request completes too, with [`WcStatus::Flushed`]).
    pub signaled: bool,
}

/// Completion status, the subset of `ib_wc_status` the core distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcStatus {
    /// Success.
    Success,
    /// The queue pair went to the error state; the request did not execute.
    Flushed,
    /// The peer refused an RDMA access (bad handle, range or rights; invalidated handle).
    RemoteAccess,
    /// A Send found no receive posted at the peer and retries ran out.
    RnrRetryExceeded,
    /// A local protection / length error (bad local fragment, receive buffer too small).
    LocalError,
    /// The transport gave up (retry count exceeded, peer gone).
    TransportRetryExceeded,
    /// Anything else.
    Other,
}

/// Which queue a completion belongs to and what it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcKind {
    /// A receive: the buffer holds `byte_len` bytes of a Send from the peer.
    Recv {
        /// The buffer that was posted.
        buf: RecvBufId,
    },
    /// A send-queue request completed (any [`SendOp`]).
    Send,
}

/// One work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The id given when posting (for receives: the id passed to `post_recv`).
    pub wr_id: WrId,
    /// Outcome.
    pub status: WcStatus,
    /// Receive or send queue.
    pub kind: WcKind,
    /// Bytes received (receives only; 0 otherwise).
    pub byte_len: u32,
    /// For a receive of a Send With Invalidate: the handle the peer invalidated on our side.
    pub invalidated: Option<u32>,
}

impl Completion {
    /// A placeholder for the arrays [`Provider::poll_cq`] fills.
    pub const EMPTY: Completion = Completion {
        wr_id: 0,
        status: WcStatus::Success,
        kind: WcKind::Send,
        byte_len: 0,
        invalidated: None,
    };
}

/// Poll `prov` until its completion queue is empty, handing each completion to `f` (which
/// may post more work on the same provider).
pub fn drain_cq<P: Provider>(prov: &mut P, f: impl FnMut(&mut P, &Completion)) {
    drain_cq_bounded(prov, usize::MAX, f);
}

/// Like [`drain_cq`], handling at most `budget` completions (a bounded unit of work for a
/// caller that must yield, like smoltcp's `poll_ingress_single`). True when the queue was
/// found empty, false when the budget ran out first (more may be waiting).
pub fn drain_cq_bounded<P: Provider>(
    prov: &mut P,
    budget: usize,
    mut f: impl FnMut(&mut P, &Completion),
) -> bool {
    // Eight at a time: the array is on the stack of every poll (kernel stack frames stay small).
    let mut wcs = [Completion::EMPTY; 8];
    let mut left = budget;
    while left > 0 {
        let want = left.min(wcs.len());
        let n = prov.poll_cq(wcs.get_mut(..want).unwrap_or_default());
        if n == 0 {
            return true;
        }
        for wc in wcs.iter().take(n) {
            f(prov, wc);
        }
        left = left.saturating_sub(n);
    }
    false
}

/// A connection-manager event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// The connection is up; the peer's private data (RFC 8797), empty if none.
    Established {
        /// Up to 56 bytes of peer private data.
        private_data: heapless::Vec<u8, 56>,
    },
    /// The connection is gone (disconnect, device removal, timeout). Outstanding work requests
    /// complete as flushed.
    Disconnected,
}

/// What [`Provider::revoke`] did with a registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoked {
    /// Revoked, its handles held back (quarantined): their keys are not given out again
    /// until `release(reg)`, which must follow.
    Held,
    /// Revoked and released: nothing to follow.
    Released,
}

/// Why a provider call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProviderError {
    /// A work-request queue or a resource pool is full: back off and retry after completions.
    Busy,
    /// The fragments cannot be registered (too many segments, unmappable page, bad length).
    BadFragments,
    /// An id (buffer, registration) that does not exist or is not in the right state.
    BadId,
    /// The connection is not usable (not yet established, or gone).
    NotConnected,
    /// The provider ran out of memory.
    NoMemory,
}

impl ProviderError {
    /// Who is at fault, when the transport gets this from its provider.
    pub const fn fault(&self) -> Fault {
        match self {
            ProviderError::Busy => Fault::BackPressure,
            // A length or fragment the provider cannot take: the message breaks a limit.
            ProviderError::BadFragments => Fault::Refused,
            // The transport named a buffer or registration that does not exist.
            ProviderError::BadId => Fault::Bug,
            ProviderError::NotConnected => Fault::Fabric,
            ProviderError::NoMemory => Fault::Memory,
        }
    }
}

impl core::error::Error for ProviderError {}

impl core::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            ProviderError::Busy => "provider queue or pool full",
            ProviderError::BadFragments => "fragments cannot be registered",
            ProviderError::BadId => "unknown buffer or registration id",
            ProviderError::NotConnected => "connection not established or gone",
            ProviderError::NoMemory => "provider out of memory",
        })
    }
}

/// One reliable-connected queue pair and its resources, as the core sees it.
pub trait Provider {
    /// The fixed resources (buffer counts and sizes, queue depths).
    fn resources(&self) -> Resources;

    /// The bytes of a send buffer, to build a message in.
    ///
    /// # Errors
    /// [`ProviderError::BadId`] for an id out of range.
    fn send_buf(&mut self, buf: SendBufId) -> Result<&mut [u8], ProviderError>;

    /// The bytes of a receive buffer (valid after its receive completed, until it is posted
    /// again).
    ///
    /// # Errors
    /// [`ProviderError::BadId`] for an id out of range.
    fn recv_buf(&self, buf: RecvBufId) -> Result<&[u8], ProviderError>;

    /// Post a chain of send-queue work requests, in order. Either the whole chain is posted
    /// or none of it.
    ///
    /// # Errors
    /// [`ProviderError::Busy`] if the send queue lacks room for the chain,
    /// [`ProviderError::NotConnected`]; for malformed requests [`ProviderError::BadId`] when an
    /// id does not exist (a send buffer, a registration) and [`ProviderError::BadFragments`]
    /// when a length or a fragment is bad (a Send longer than its buffer, more SGEs than
    /// `max_sge`, a fragment outside the pages).
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), ProviderError>;

    /// Post receive buffers; each completes with `wr_id` = the buffer id.
    ///
    /// # Errors
    /// [`ProviderError::BadId`] for an unknown or already posted buffer,
    /// [`ProviderError::NotConnected`] after the connection is gone.
    fn post_recv(&mut self, bufs: &[RecvBufId]) -> Result<(), ProviderError>;

    /// Fill `out` with completions; returns how many.
    fn poll_cq(&mut self, out: &mut [Completion]) -> usize;

    /// Register page fragments for one RPC with the given access. The registration is valid
    /// for every work request posted after this returns (a kernel provider chains its REG_MR
    /// ahead of them).
    ///
    /// # Errors
    /// [`ProviderError::Busy`] when no registration is free, [`ProviderError::BadFragments`]
    /// when the fragments need more than [`MAX_CHUNK_SEGMENTS`] segments or are invalid.
    fn register(
        &mut self,
        frags: &[LocalFragment],
        access: Access,
    ) -> Result<Registration, ProviderError>;

    /// Return a registration to the provider. If the peer can still use it (not invalidated
    /// locally or remotely), the provider revokes it synchronously first. After `release` the
    /// handle is dead and the pages may be reused.
    ///
    /// # Errors
    /// [`ProviderError::BadId`] for an unknown registration.
    fn release(&mut self, reg: RegId) -> Result<(), ProviderError>;

    /// Revoke a registration now and, where that is safe, hold its handles back: as
    /// [`release`](Self::release), the peer can no longer use it and its pages may be reused
    /// once this returns; [`Revoked::Held`]: the handles' keys are not given out again —
    /// under another value — until `release(reg)` (which must follow); [`Revoked::Released`]:
    /// released (nothing to follow). For a call given up on ([`Requester::abandon`]) whose
    /// late reply may still come with Send With Invalidate of these handles: a device
    /// invalidates an FRWR MR whose key still matches (rxe: `rxe_invalidate_mr` checks only
    /// the key), but a key bumped by a re-registration for another call fails the queue
    /// pair. The default releases (`Revoked::Released`).
    ///
    /// [`Requester::abandon`]: crate::transport::Requester::abandon
    ///
    /// # Errors
    /// [`ProviderError::BadId`] for an unknown registration.
    fn revoke(&mut self, reg: RegId) -> Result<Revoked, ProviderError> {
        self.release(reg).map(|()| Revoked::Released)
    }

    /// Next connection event, if any.
    fn poll_event(&mut self) -> Option<CmEvent>;

    /// Close the connection from our side (`rdma_disconnect`): the queue pair goes to the
    /// error state, outstanding work completes flushed and the peer sees the connection go.
    /// What an endpoint does when it can neither answer nor refuse a message (RFC 8166
    /// §4.5.4). Idempotent.
    fn disconnect(&mut self);
}

// A boxed provider is a provider, also behind a trait object (`Box<dyn Trait>` where
// `Trait: Provider`): what lets one connection type hold any provider chosen at run time
// (the krpc face's queue pair: the verbs backend, or the software provider in a kernel
// without an RDMA device). A borrowed provider is one too: what lets a middleware wrap a
// queue pair the caller keeps (a kernel thread's boxed `OfedQp` under a stage profile).
crate::forward_provider!(deref [P: Provider + ?Sized] alloc::boxed::Box<P>);
crate::forward_provider!(deref [P: Provider + ?Sized] &mut P);
