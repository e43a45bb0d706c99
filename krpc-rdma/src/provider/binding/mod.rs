//! The logic every verbs binding shares, written once: [`Binding`] implements [`Provider`]
//! over a small [`Backend`] that only moves bytes to and from the verbs API.
//!
//! The kernel verbs backend (`ofed-shim`: OFED KPI, FRWR) and the userspace provider
//! (`krpc-rdma-verbs`: libibverbs, memory windows or per-run MRs) differ in how they post a
//! work-request chain, where buffers live, and how a registration key is mapped; everything
//! else is the same RC queue-pair bookkeeping, and it lives here, `no_std` and free of
//! `unsafe`:
//!
//! * [`send_queue`]: every posted work request gets a sequence number and a FIFO entry; a
//!   completion retires everything up to it; a chain is posted only if it fits.
//! * [`recv_table`]: which receive buffers the NIC owns.
//! * [`keys`]: the pool of registration keys (MRs, windows) with their state and the rkey
//!   index used when the peer's Send With Invalidate names one.
//! * [`reg_table`]: generation-tagged registration slots holding keys and page references.
//! * [`runs`]: the FRWR page-run rule and the contiguous-run rule.
//! * Work-request chain validation and planning, completion handling, connection state, the
//!   synchronous revocation in `release`.
//!
//! # What a backend does
//!
//! A [`Backend`] owns the hardware objects (queue pair, CQ, buffers, key objects) and their
//! `unsafe`. It turns neutral [`Wr`]/[`Sge`] arrays into its API's work requests, polls raw
//! completions into [`RawWc`], reports connection-manager events as [`RawCm`], and maps one
//! run of SGEs onto one key ([`Backend::map`]). It never keeps its own copy of the state
//! above.
//!
//! # Invariants kept here
//!
//! * A chain is posted only when the send queue has room for all of it, so the hardware
//!   queue never overflows; a refused chain posts nothing.
//! * The first error completion (a flush included) breaks the connection: the backend is told
//!   to disconnect once and the core gets one [`CmEvent::Disconnected`].
//! * A registration holds one page reference on every distinct page it covers until it is
//!   released (or the queue pair is gone), so its pages cannot be reused while the peer may
//!   still reach them.
//! * `release` returns only after every key of the registration is invalid: invalidated
//!   (LOCAL_INV completed, or the peer's Send With Invalidate), or revoked for good by the
//!   backend ([`Backend::revoke`]).
//! * After construction nothing allocates on the per-RPC path except when a chain or a
//!   registration is larger than any before it (scratch arrays grow then, fallibly).

pub mod keys;
pub mod recv_table;
pub mod reg_table;
pub mod runs;
pub mod send_queue;

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use mbuf::PageProvider;

use self::keys::KeyPool;
use self::recv_table::RecvTable;
use self::reg_table::RegTable;
use self::runs::RunRule;
use self::send_queue::{SendQueue, SqEntry, SqKind, RECV_BIT};
use super::{
    Access, CmEvent, Completion, LocalFragment, Provider, ProviderError, RegId, RegSegment,
    Registration, Resources, Revoked, SendOp, SendWr, WcKind, WcStatus,
};

/// A scatter/gather entry: address as the backend's hardware sees it (a kernel DMA/physical
/// address, a userspace virtual address), length and local key (0 where the backend fills it
/// in itself).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sge {
    /// Address of the first byte.
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

/// The operation of one hardware send-queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrOp {
    /// Send, with Send With Invalidate of `invalidate` when set.
    Send {
        /// The peer's rkey to invalidate.
        invalidate: Option<u32>,
    },
    /// RDMA Write to the peer's `(rkey, remote_addr)`.
    RdmaWrite {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// RDMA Read from the peer's `(rkey, remote_addr)`.
    RdmaRead {
        /// Remote address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// LOCAL_INV of one of our keys.
    LocalInv {
        /// The rkey to invalidate.
        rkey: u32,
    },
}

/// One hardware send-queue work request; its SGEs are `sges[sge_first..][..num_sge]` of
/// the array passed along with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wr {
    /// Hardware `wr_id` (a send-queue sequence number).
    pub wr_id: u64,
    /// The operation.
    pub op: WrOp,
    /// Whether it generates a completion.
    pub signaled: bool,
    /// First SGE.
    pub sge_first: u32,
    /// Number of SGEs.
    pub num_sge: u32,
}

/// The outcome of posting a chain: how many of its work requests (a prefix) the hardware
/// took, and whether the call succeeded (then `count` is all of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Posted {
    /// Work requests posted.
    pub count: usize,
    /// The post call succeeded.
    pub ok: bool,
}

/// What a receive completion says about a Send With Invalidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawInv {
    /// Nothing invalidated.
    None,
    /// The completion is flagged "with invalidate" for this rkey.
    Flagged(u32),
    /// Not flagged, but the device filled this non-zero value where the invalidated rkey
    /// goes (rxe in Linux 6.1 does not set `IBV_WC_WITH_INV`): a remote invalidation exactly
    /// when it names one of our valid keys.
    Unflagged(u32),
}

/// One completion as the backend read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawWc {
    /// Hardware `wr_id`: a send-queue sequence number, or [`send_queue::RECV_BIT`] | buffer.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// Bytes received (receives).
    pub byte_len: u32,
    /// Remote invalidation (receives).
    pub inv: RawInv,
}

impl RawWc {
    /// A placeholder for the arrays [`Backend::poll_cq`] fills.
    pub const EMPTY: RawWc = RawWc {
        wr_id: 0,
        status: WcStatus::Success,
        byte_len: 0,
        inv: RawInv::None,
    };
}

/// A connection-manager event as the backend read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawCm {
    /// The connection is established; the peer's private data.
    Established(heapless::Vec<u8, 56>),
    /// The connection is gone (disconnect, error, device removal, timewait exit...).
    Down,
}

/// Why the binding asks the backend for connection-manager events (a backend whose event
/// channel costs a system call may skip some).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmPoll {
    /// From [`Binding::reap`], before polling the CQ.
    Reap,
    /// From [`Provider::poll_event`] with no event queued; `cq_idle` when the last reap
    /// found the CQ empty.
    Event {
        /// The last reap found no completion.
        cq_idle: bool,
    },
    /// The owner asked ([`Binding::pump_cm`]).
    Forced,
}

/// The result of mapping one run onto one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapped {
    /// The rkey the peer uses from now on.
    pub rkey: u32,
    /// The offset (iova or virtual address) of the first byte.
    pub iova: u64,
    /// Bytes covered.
    pub length: u32,
    /// SGEs of the run covered (a prefix; at least one): the rest goes to another key.
    pub consumed: usize,
    /// A work request with the given `wr_id` was posted on the send queue.
    pub posted: bool,
}

/// How the backend invalidates a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalidation {
    /// A LOCAL_INV work request; the peer's Send With Invalidate also works.
    WorkRequest,
    /// Synchronously, by [`Backend::revoke`] (per-run MRs: deregistration); a `LocalInv`
    /// completes at once.
    Synchronous,
}

/// The fixed shape of one binding's queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// What the core is told.
    pub res: Resources,
    /// Hardware send-queue depth (the core's `max_send_wr` plus room for maps and
    /// invalidations).
    pub sq_depth: u32,
    /// Registration keys (MRs / windows) at most.
    pub keys: u32,
    /// Whether the key objects exist from the start (a kernel MR pool) or are created on
    /// first use ([`Backend::key_create`]).
    pub keys_present: bool,
    /// How keys cover memory.
    pub rule: RunRule,
    /// How keys are invalidated.
    pub invalidation: Invalidation,
    /// Whether [`Backend::map`] posts a work request (FRWR REG_MR, window bind): then
    /// registering needs the connection up and send-queue room.
    pub map_uses_sq: bool,
}

/// What one verbs binding provides (see the module documentation). All `unsafe` of a
/// binding lives behind these methods.
pub trait Backend {
    /// The page provider of the fragments.
    type Pages: PageProvider + ?Sized;

    /// The page provider.
    fn pages(&self) -> &Self::Pages;
    /// A send buffer's bytes.
    fn send_buf(&mut self, buf: u32) -> Option<&mut [u8]>;
    /// A receive buffer's bytes (called only for a buffer that is not posted).
    fn recv_buf(&self, buf: u32) -> Option<&[u8]>;
    /// The SGE of the first `len` bytes of send buffer `buf` (`None`: no such buffer or too
    /// long).
    fn send_sge(&self, buf: u32, len: u32) -> Option<Sge>;
    /// The SGE of the whole receive buffer `buf`.
    fn recv_sge(&self, buf: u32) -> Option<Sge>;
    /// The SGE of a page fragment (`None`: not a valid fragment of our pages).
    fn frag_sge(&self, f: &LocalFragment) -> Option<Sge>;
    /// Post `wrs` (over `sges`) as one chain, in order.
    fn post_send(&mut self, wrs: &[Wr], sges: &[Sge]) -> Posted;
    /// Post one receive per `wr_ids` entry, each over the SGE at the same index.
    fn post_recv(&mut self, wr_ids: &[u64], sges: &[Sge]) -> Posted;
    /// Read up to `out.len()` completions; `None` when the CQ is in error.
    fn poll_cq(&mut self, out: &mut [RawWc]) -> Option<usize>;
    /// The next connection-manager event that matters, if any (non-blocking).
    fn poll_cm(&mut self, why: CmPoll) -> Option<RawCm>;
    /// Move the queue pair to the error state and tell the peer (idempotent).
    fn disconnect(&mut self);
    /// Create the hardware object of key `key` (not present); its rkey.
    ///
    /// # Errors
    /// [`ProviderError::Busy`] / [`ProviderError::NoMemory`] when none can be made now.
    fn key_create(&mut self, key: u32) -> Result<u32, ProviderError>;
    /// Map `run` onto key `key` (current rkey `rkey`, not valid) with `access`, posting the
    /// map work request with `wr_id` where the backend needs one ([`Layout::map_uses_sq`]).
    ///
    /// # Errors
    /// [`ProviderError::BadFragments`] when nothing could be mapped,
    /// [`ProviderError::NotConnected`] when the post failed, [`ProviderError::NoMemory`].
    fn map(
        &mut self,
        key: u32,
        rkey: u32,
        run: &[Sge],
        access: Access,
        wr_id: u64,
    ) -> Result<Mapped, ProviderError>;
    /// Kill key `key`'s rkey now, whatever state it is in (deregister, deallocate): `Some`
    /// with the new rkey when the key object stays usable, `None` when it is gone (created
    /// again by [`key_create`](Self::key_create) on next use).
    fn revoke(&mut self, key: u32) -> Option<u32>;
    /// Key `key` is invalid and leaves its registration (e.g. DMA-unmap its pages).
    fn unmap(&mut self, _key: u32) {}
    /// `release` is waiting for invalidations: keep waiting after `iteration` polls?
    fn release_wait(&mut self, iteration: u32) -> bool;
    /// Whether a key invalidated locally may still be invalidated by the peer under the
    /// same value without harm, so [`Provider::revoke`] can hold it back (a kernel FRWR MR:
    /// rxe's `rxe_invalidate_mr` accepts a FREE MR whose key matches). Not for memory
    /// windows (rxe 6.1 dereferences NULL invalidating a FREE type 2 window). Default: no.
    fn holds_revoked_keys(&self) -> bool {
        false
    }
    /// Tear the queue pair down so no DMA can touch our pages any more; `connected` when
    /// the connection was not broken (disconnect first). Called once, from `Drop`.
    fn shutdown(&mut self, connected: bool);
}

/// Counters of one queue pair.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BindingStats {
    /// Work requests posted on the send queue (the core's and internal).
    pub send_wrs: u64,
    /// Receives posted.
    pub recv_wrs: u64,
    /// Keys mapped (FRWR REG_MR, window binds, per-run `reg_mr`).
    pub maps: u64,
    /// LOCAL_INV work requests posted.
    pub local_invs: u64,
    /// Keys revoked by the peer's Send With Invalidate.
    pub remote_invs: u64,
    /// Synchronous revocations in `release` and `revoke` (posted LOCAL_INV and waited).
    pub sync_revokes: u64,
    /// Registrations revoked with their keys held back (`revoke`: an abandoned call whose
    /// late reply may still name them in a Send With Invalidate).
    pub quarantined: u64,
    /// Keys killed because they could not be invalidated normally (MR reset, window
    /// deallocation, per-run MR deregistration).
    pub key_revokes: u64,
    /// `post_send` / `register` refusals for lack of send-queue room.
    pub busy: u64,
    /// Error completions other than flushes.
    pub errors: u64,
    /// Flushed completions.
    pub flushed: u64,
}

/// Why a binding's connection went down: the first cause seen (later ones are not kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DownCause {
    /// Our side disconnected (`disconnect`).
    Local,
    /// The backend's connection manager reported the connection down (the peer
    /// disconnected, or the CM saw an error).
    Cm,
    /// Polling the completion queue failed.
    Poll,
    /// A completion in error (a flush included) of the work
    /// request of this kind ("recv", "send", "map", "local-inv") with this `wr_id`.
    Completion {
        /// Its status.
        status: WcStatus,
        /// The kind of work request.
        kind: &'static str,
        /// Its `wr_id` as posted to the backend.
        wr_id: u64,
    },
    /// A completion could not be queued for the core (out of memory).
    Stash,
    /// A post was accepted only in part.
    PartialPost,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Connecting,
    Up,
    Broken,
}

/// One RC queue pair: the shared logic over a [`Backend`] (see the module documentation).
#[derive(Debug)]
pub struct Binding<B: Backend> {
    b: B,
    layout: Layout,
    sq: SendQueue,
    recv: RecvTable,
    keys: KeyPool,
    regs: RegTable,
    /// Completions for the core, each with the core send-queue slots it gives back when the
    /// core polls it.
    stash: VecDeque<(Completion, u32)>,
    /// The core's send-queue slots in use: one per `SendWr` posted, given back when its
    /// completion is polled (or when it retires without one).
    core_busy: u32,
    events: VecDeque<CmEvent>,
    state: State,
    disconnect_reported: bool,
    down: Option<DownCause>,
    last_reap_empty: bool,
    stats: BindingStats,
    // Scratch, sized at construction.
    wrs: Vec<Wr>,
    sges: Vec<Sge>,
    kinds: Vec<SqKind>,
    synth: Vec<u64>,
    pending: Vec<u32>,
    sync_invs: Vec<RegId>,
    recv_ids: Vec<u64>,
    recv_sges: Vec<Sge>,
    merged: Vec<Sge>,
}

fn reserve<T>(v: &mut Vec<T>, n: usize) -> Result<(), ProviderError> {
    v.try_reserve(n).map_err(|_| ProviderError::NoMemory)
}

fn with_capacity<T>(n: usize) -> Result<Vec<T>, ProviderError> {
    let mut v = Vec::new();
    reserve(&mut v, n)?;
    Ok(v)
}

/// [`ProviderError::BadId`] for a layout out of range (no buffers, no keys, a send queue
/// shallower than what the core is told; the registration count is checked by
/// [`RegTable::new`]).
fn check(layout: &Layout) -> Result<(), ProviderError> {
    let res = layout.res;
    if res.send_bufs == 0
        || res.recv_bufs == 0
        || layout.keys == 0
        || res.max_sge == 0
        || layout.sq_depth < res.max_send_wr
    {
        return Err(ProviderError::BadId);
    }
    Ok(())
}

impl<B: Backend> Binding<B> {
    /// The shared logic over `b`, with every table and scratch array allocated now.
    ///
    /// # Errors
    /// [`ProviderError::NoMemory`]; [`ProviderError::BadId`] for a layout out of range (no
    /// buffers, no keys, more than 65,536 registrations, a send queue shallower than what
    /// the core is told).
    pub fn new(b: B, layout: Layout) -> Result<Binding<B>, ProviderError> {
        check(&layout)?;
        let mut me = Binding::unallocated(b, layout);
        me.allocate()?;
        Ok(me)
    }

    /// [`new`](Self::new) in two steps, for a caller that builds the binding in its final
    /// place and so holds one copy of it (a kernel caller: `new`'s result, moved into the
    /// caller's own value, is a second copy of this 880-byte struct on a 16 KiB stack). This
    /// step: the binding over `b` with no table or scratch array allocated yet (no
    /// allocation, cannot fail). [`allocate`](Self::allocate) must succeed before it is
    /// used; until then it has no room (every post is refused). Not inlined: the binding is
    /// written straight into the place the caller gives for the result.
    #[inline(never)]
    pub fn unallocated(b: B, layout: Layout) -> Binding<B> {
        Binding {
            b,
            layout,
            sq: SendQueue::default(),
            recv: RecvTable::default(),
            keys: KeyPool::default(),
            regs: RegTable::default(),
            stash: VecDeque::new(),
            core_busy: 0,
            events: VecDeque::new(),
            state: State::Connecting,
            disconnect_reported: false,
            down: None,
            last_reap_empty: true,
            stats: BindingStats::default(),
            wrs: Vec::new(),
            sges: Vec::new(),
            kinds: Vec::new(),
            synth: Vec::new(),
            pending: Vec::new(),
            sync_invs: Vec::new(),
            recv_ids: Vec::new(),
            recv_sges: Vec::new(),
            merged: Vec::new(),
        }
    }

    /// The second step of [`new`](Self::new) after [`unallocated`](Self::unallocated):
    /// every table and scratch array allocated, in place (called once, before any use).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn allocate(&mut self) -> Result<(), ProviderError> {
        let layout = self.layout;
        check(&layout)?;
        let res = layout.res;
        let sq_depth = layout.sq_depth as usize;
        let recv_bufs = res.recv_bufs as usize;
        self.stash = VecDeque::new();
        self.stash
            .try_reserve_exact(sq_depth + recv_bufs)
            .map_err(|_| ProviderError::NoMemory)?;
        self.events = VecDeque::new();
        self.events
            .try_reserve_exact(4)
            .map_err(|_| ProviderError::NoMemory)?;
        self.sq = SendQueue::new(sq_depth)?;
        self.recv = RecvTable::new(res.recv_bufs)?;
        self.keys = KeyPool::new(layout.keys, layout.keys_present)?;
        self.regs = RegTable::new(res.max_registrations)?;
        self.wrs = with_capacity(sq_depth)?;
        self.sges = with_capacity(sq_depth * 2)?;
        self.kinds = with_capacity(sq_depth)?;
        self.synth = with_capacity(res.max_send_wr as usize)?;
        self.pending = with_capacity(sq_depth)?;
        self.sync_invs = with_capacity(res.max_send_wr as usize)?;
        self.recv_ids = with_capacity(recv_bufs)?;
        self.recv_sges = with_capacity(recv_bufs)?;
        self.merged = with_capacity(64)?;
        Ok(())
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.b
    }

    /// The backend, mutable (for its own set-up calls; the shared state is not reachable).
    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.b
    }

    /// Counters.
    pub fn stats(&self) -> BindingStats {
        self.stats
    }

    /// Registrations not yet released.
    pub fn live_registrations(&self) -> u32 {
        self.regs.live()
    }

    /// Key objects (MRs, windows) that exist now.
    pub fn key_objects(&self) -> usize {
        self.keys.present()
    }

    /// Send-queue work requests not yet retired.
    pub fn sq_outstanding(&self) -> usize {
        self.sq.len()
    }

    /// Whether the connection is up.
    pub fn is_connected(&self) -> bool {
        self.state == State::Up
    }

    /// Whether completions or events are waiting (already reaped).
    pub fn has_work(&self) -> bool {
        !self.stash.is_empty() || !self.events.is_empty()
    }

    /// Why the connection went down (the first cause), or `None` while it is up.
    pub fn down_cause(&self) -> Option<DownCause> {
        self.down
    }

    /// Disconnect (the peer gets `Disconnected`; our outstanding work is flushed).
    pub fn disconnect(&mut self) {
        self.break_connection(DownCause::Local);
    }

    /// The connection is up with the peer's `private_data` (for a backend whose owner runs
    /// the connection manager itself); the core's next `poll_event` returns it.
    pub fn established(&mut self, private_data: &[u8]) {
        if self.state == State::Connecting {
            self.state = State::Up;
            let pd = private_data
                .get(..private_data.len().min(56))
                .unwrap_or(&[]);
            let private_data = heapless::Vec::from_slice(pd).unwrap_or_default();
            self.push_event(CmEvent::Established { private_data });
        }
    }

    /// Read every connection-manager event available now.
    pub fn pump_cm(&mut self) {
        self.pump(CmPoll::Forced);
    }

    /// Move every available completion into the stash (and read connection events the
    /// backend reports on this path); returns how many completions were found.
    pub fn reap(&mut self) -> usize {
        self.pump(CmPoll::Reap);
        let mut total = 0;
        loop {
            let mut wcs = [RawWc::EMPTY; 16];
            let n = self.b.poll_cq(&mut wcs);
            if total == 0 {
                self.last_reap_empty = !matches!(n, Some(k) if k > 0);
            }
            let Some(n) = n else {
                self.break_connection(DownCause::Poll);
                return total;
            };
            if n == 0 {
                return total;
            }
            for wc in wcs.iter().take(n) {
                self.on_wc(wc);
            }
            total += n;
        }
    }

    fn pump(&mut self, why: CmPoll) {
        while let Some(ev) = self.b.poll_cm(why) {
            match ev {
                RawCm::Established(pd) => self.established(&pd),
                RawCm::Down => self.break_connection(DownCause::Cm),
            }
        }
    }

    fn push_event(&mut self, ev: CmEvent) {
        // At most one Established and one Disconnected are ever queued.
        if self.events.try_reserve(1).is_ok() {
            self.events.push_back(ev);
        }
    }

    fn break_connection(&mut self, why: DownCause) {
        self.down.get_or_insert(why);
        if self.state != State::Broken {
            self.state = State::Broken;
            self.b.disconnect();
        }
        if !self.disconnect_reported {
            self.disconnect_reported = true;
            self.push_event(CmEvent::Disconnected);
        }
    }

    /// Queue a completion for the core. The stash is sized for every work request that can
    /// be outstanding; if it still cannot grow, the completion would be lost, so the
    /// connection is closed instead (everything outstanding then flushes).
    fn stash_push(stash: &mut VecDeque<(Completion, u32)>, c: Completion, slots: u32) -> bool {
        if stash.try_reserve(1).is_err() {
            return false;
        }
        stash.push_back((c, slots));
        true
    }

    fn send_completion(wr_id: u64, status: WcStatus) -> Completion {
        Completion {
            wr_id,
            status,
            kind: WcKind::Send,
            byte_len: 0,
            invalidated: None,
        }
    }

    fn on_wc(&mut self, wc: &RawWc) {
        let status = wc.status;
        match status {
            WcStatus::Success => {}
            WcStatus::Flushed => self.stats.flushed += 1,
            _ => self.stats.errors += 1,
        }
        let mut kept = true;
        let mut kind = "recv";
        // Receives are told by their wr_id (the opcode of an error completion is undefined).
        if wc.wr_id & RECV_BIT != 0 {
            let buf = (wc.wr_id & !RECV_BIT) as u32;
            self.recv.completed(buf);
            let mut invalidated = None;
            if status == WcStatus::Success {
                let rkey = match wc.inv {
                    RawInv::Flagged(r) => Some(r),
                    RawInv::Unflagged(r) => self.keys.by_rkey(r).map(|_| r),
                    RawInv::None => None,
                };
                if let Some(r) = rkey {
                    invalidated = Some(r);
                    if let Some(k) = self.keys.by_rkey(r) {
                        self.keys.set_invalid(k);
                        self.stats.remote_invs += 1;
                    }
                }
            }
            kept = Self::stash_push(
                &mut self.stash,
                Completion {
                    wr_id: u64::from(buf),
                    status,
                    kind: WcKind::Recv { buf },
                    byte_len: if status == WcStatus::Success {
                        wc.byte_len
                    } else {
                        0
                    },
                    invalidated,
                },
                0,
            );
        } else {
            let (keys, stash) = (&mut self.keys, &mut self.stash);
            // Core slots of the entries retired so far without a completion of their own;
            // they go back with the next reported completion of this run.
            let mut slots = 0u32;
            self.sq.retire_through(wc.wr_id, |e: SqEntry, own| {
                let st = if own { status } else { WcStatus::Success };
                if own {
                    kind = match e.kind {
                        SqKind::User(_) => "send",
                        SqKind::Map => "map",
                        SqKind::Inv { .. } => "local-inv",
                    };
                }
                let report = match e.kind {
                    SqKind::User(id) => {
                        slots += 1;
                        own.then_some(id)
                    }
                    SqKind::Map => None,
                    SqKind::Inv { key, user } => {
                        if let Some(k) = keys.get_mut(key) {
                            k.inv_pending = false;
                        }
                        if st == WcStatus::Success {
                            keys.set_invalid(key);
                        }
                        slots += u32::from(user.is_some());
                        user.filter(|_| own)
                    }
                };
                if let Some(id) = report {
                    kept &= Self::stash_push(stash, Self::send_completion(id, st), slots);
                    slots = 0;
                }
            });
            // Retired under an internal completion: nothing for the core to poll.
            self.core_busy = self.core_busy.saturating_sub(slots);
        }
        if status != WcStatus::Success {
            self.break_connection(DownCause::Completion {
                status,
                kind,
                wr_id: wc.wr_id,
            });
        } else if !kept {
            self.break_connection(DownCause::Stash);
        }
    }

    /// Keys of registration `reg` that still need a LOCAL_INV (valid, none pending).
    /// Revoke `reg`'s keys synchronously (LOCAL_INV and wait, or kill what cannot be
    /// invalidated) and unmap them: the peer can no longer reach its pages. The keys stay
    /// with `reg` (the caller puts them back, or holds them: [`Provider::revoke`]).
    fn invalidate_and_unmap(&mut self, reg: RegId, nkeys: usize) {
        if self.layout.invalidation == Invalidation::WorkRequest {
            // Revoke synchronously what the peer can still use: LOCAL_INV and wait.
            let need = self.keys_to_invalidate(reg).count();
            if self.state == State::Up && need > 0 && self.sq.has_room(need) {
                self.clear_plan();
                if reserve(&mut self.wrs, need).is_ok()
                    && reserve(&mut self.kinds, need).is_ok()
                    && reserve(&mut self.pending, need).is_ok()
                {
                    self.plan_invs(reg, None);
                    if self.post_planned().is_ok() {
                        self.stats.sync_revokes += 1;
                    }
                }
                self.clear_plan();
            }
            self.wait_invalid(reg);
        }
        // Whatever is still valid or pending now is killed for good.
        for j in 0..nkeys {
            let Some(k) = self.regs.get(reg).and_then(|r| r.keys.get(j).copied()) else {
                break;
            };
            if self.keys.get(k).is_some_and(|k| k.valid || k.inv_pending) {
                self.revoke_key(k);
            }
            self.b.unmap(k);
        }
    }

    fn keys_to_invalidate(&self, reg: RegId) -> impl Iterator<Item = u32> + '_ {
        self.regs
            .get(reg)
            .map(|r| r.keys.as_slice())
            .unwrap_or(&[])
            .iter()
            .copied()
            .filter(|&k| self.keys.get(k).is_some_and(|k| k.valid && !k.inv_pending))
    }

    /// Append LOCAL_INVs of `reg`'s keys to the chain being planned; the last one is
    /// signaled and carries `user`. Returns how many.
    fn plan_invs(&mut self, reg: RegId, user: Option<u64>) -> usize {
        let first = self.pending.len();
        let Some(r) = self.regs.get(reg) else {
            return 0;
        };
        for &k in &r.keys {
            if self.keys.get(k).is_some_and(|k| k.valid && !k.inv_pending) {
                self.pending.push(k);
            }
        }
        let n = self.pending.len() - first;
        for j in 0..n {
            let Some(&k) = self.pending.get(first + j) else {
                break;
            };
            let last = j + 1 == n;
            let rkey = self.keys.get(k).map_or(0, |k| k.rkey);
            self.wrs.push(Wr {
                wr_id: self.sq.next_seq(),
                op: WrOp::LocalInv { rkey },
                signaled: last,
                sge_first: 0,
                num_sge: 0,
            });
            self.kinds.push(SqKind::Inv {
                key: k,
                user: if last { user } else { None },
            });
        }
        n
    }

    fn clear_plan(&mut self) {
        self.wrs.clear();
        self.sges.clear();
        self.kinds.clear();
        self.synth.clear();
        self.pending.clear();
        self.sync_invs.clear();
    }

    /// Post the planned chain; on success mark its invalidations pending.
    fn post_planned(&mut self) -> Result<(), ProviderError> {
        let n = self.wrs.len();
        if n == 0 {
            return Ok(());
        }
        let p = self.b.post_send(&self.wrs, &self.sges);
        let posted = if p.ok { n } else { p.count.min(n) };
        for (w, k) in self.wrs.iter().zip(self.kinds.iter()).take(posted) {
            // Room was checked before planning.
            let _ = self.sq.push(w.wr_id, *k);
        }
        self.stats.send_wrs += posted as u64;
        if !p.ok {
            // Our accounting makes this unexpected; a partial post cannot be undone.
            if posted > 0 {
                self.break_connection(DownCause::PartialPost);
                return Err(ProviderError::NotConnected);
            }
            return Err(ProviderError::Busy);
        }
        for &k in &self.pending {
            if let Some(key) = self.keys.get_mut(k) {
                key.inv_pending = true;
            }
        }
        self.stats.local_invs += self.pending.len() as u64;
        Ok(())
    }

    /// Kill key `k`'s rkey now (see [`Backend::revoke`]).
    fn revoke_key(&mut self, k: u32) {
        let r = self.b.revoke(k);
        self.keys.set_invalid(k);
        if let Some(key) = self.keys.get_mut(k) {
            key.inv_pending = false;
            key.present = r.is_some();
            if let Some(rkey) = r {
                key.rkey = rkey;
            }
        }
        self.stats.key_revokes += 1;
    }

    /// The SGE of the first `len` bytes of send buffer `buf`: [`ProviderError::BadId`] for a
    /// buffer that does not exist, [`ProviderError::BadFragments`] for a length past its end
    /// (the id is valid, the length is not: what the software provider answers too).
    fn send_sge(&self, buf: u32, len: u32) -> Result<Sge, ProviderError> {
        if buf >= self.layout.res.send_bufs {
            return Err(ProviderError::BadId);
        }
        self.b.send_sge(buf, len).ok_or(ProviderError::BadFragments)
    }

    /// Validate a chain and count its hardware work requests and SGEs.
    fn count(&self, wrs: &[SendWr<'_>]) -> Result<(usize, usize), ProviderError> {
        let max_sge = self.layout.res.max_sge as usize;
        let (mut hw, mut nsge) = (0usize, 0usize);
        for w in wrs {
            match w.op {
                SendOp::Send { buf, len, .. } => {
                    self.send_sge(buf, len)?;
                    hw += 1;
                    nsge += 1;
                }
                SendOp::SendGather {
                    buf, len, pages, ..
                } => {
                    self.send_sge(buf, len)?;
                    let n = usize::from(len > 0) + pages.len();
                    if n > max_sge {
                        return Err(ProviderError::BadFragments);
                    }
                    for f in pages {
                        self.b.frag_sge(f).ok_or(ProviderError::BadFragments)?;
                    }
                    hw += 1;
                    nsge += n;
                }
                SendOp::RdmaRead { local, .. } | SendOp::RdmaWrite { local, .. } => {
                    if local.is_empty() || local.len() > max_sge {
                        return Err(ProviderError::BadFragments);
                    }
                    let mut total = 0u64;
                    for f in local {
                        total += u64::from(
                            self.b
                                .frag_sge(f)
                                .ok_or(ProviderError::BadFragments)?
                                .length,
                        );
                    }
                    if total > u64::from(u32::MAX) {
                        return Err(ProviderError::BadFragments);
                    }
                    hw += 1;
                    nsge += local.len();
                }
                SendOp::LocalInv { reg } => {
                    if self.regs.get(reg).is_none() {
                        return Err(ProviderError::BadId);
                    }
                    if self.layout.invalidation == Invalidation::WorkRequest {
                        hw += self.keys_to_invalidate(reg).count();
                    }
                }
            }
        }
        Ok((hw, nsge))
    }

    fn plan(&mut self, wrs: &[SendWr<'_>]) -> Result<(), ProviderError> {
        for w in wrs {
            match w.op {
                SendOp::Send {
                    buf,
                    len,
                    invalidate,
                }
                | SendOp::SendGather {
                    buf,
                    len,
                    invalidate,
                    ..
                } => {
                    let first = self.sges.len();
                    if len > 0 {
                        self.sges.push(self.send_sge(buf, len)?);
                    }
                    if let SendOp::SendGather { pages, .. } = w.op {
                        for f in pages {
                            self.sges
                                .push(self.b.frag_sge(f).ok_or(ProviderError::BadFragments)?);
                        }
                    }
                    self.push_wr(WrOp::Send { invalidate }, w, first);
                }
                SendOp::RdmaRead {
                    local,
                    handle,
                    offset,
                }
                | SendOp::RdmaWrite {
                    local,
                    handle,
                    offset,
                } => {
                    let first = self.sges.len();
                    for f in local {
                        self.sges
                            .push(self.b.frag_sge(f).ok_or(ProviderError::BadFragments)?);
                    }
                    let op = if matches!(w.op, SendOp::RdmaRead { .. }) {
                        WrOp::RdmaRead {
                            remote_addr: offset,
                            rkey: handle,
                        }
                    } else {
                        WrOp::RdmaWrite {
                            remote_addr: offset,
                            rkey: handle,
                        }
                    };
                    self.push_wr(op, w, first);
                }
                SendOp::LocalInv { reg } => {
                    let n = match self.layout.invalidation {
                        Invalidation::WorkRequest => self.plan_invs(reg, Some(w.wr_id)),
                        Invalidation::Synchronous => {
                            self.sync_invs.push(reg);
                            0
                        }
                    };
                    if n == 0 {
                        // Nothing left to invalidate by work request (the peer's Send With
                        // Invalidate did it, or the backend revokes synchronously): the
                        // completion is synthesized after the chain is posted.
                        self.synth.push(w.wr_id);
                    }
                }
            }
        }
        Ok(())
    }

    fn push_wr(&mut self, op: WrOp, w: &SendWr<'_>, first_sge: usize) {
        self.wrs.push(Wr {
            wr_id: self.sq.next_seq(),
            op,
            signaled: w.signaled,
            sge_first: first_sge as u32,
            num_sge: (self.sges.len() - first_sge) as u32,
        });
        self.kinds.push(SqKind::User(w.wr_id));
    }

    /// Wait (bounded by the backend) until every key of `reg` is invalid.
    fn wait_invalid(&mut self, reg: RegId) {
        let mut iteration = 0u32;
        while self.state != State::Broken && self.b.release_wait(iteration) {
            let pending = self.regs.get(reg).is_some_and(|r| {
                r.keys
                    .iter()
                    .any(|&k| self.keys.get(k).is_some_and(|k| k.valid || k.inv_pending))
            });
            if !pending {
                break;
            }
            if self.reap() == 0 {
                core::hint::spin_loop();
            }
            iteration = iteration.saturating_add(1);
        }
    }
}

impl<B: Backend> Provider for Binding<B> {
    fn resources(&self) -> Resources {
        self.layout.res
    }

    fn send_buf(&mut self, buf: u32) -> Result<&mut [u8], ProviderError> {
        self.b.send_buf(buf).ok_or(ProviderError::BadId)
    }

    fn recv_buf(&self, buf: u32) -> Result<&[u8], ProviderError> {
        if !self.recv.readable(buf) {
            // Posted (the NIC may be writing it) or no such buffer.
            return Err(ProviderError::BadId);
        }
        self.b.recv_buf(buf).ok_or(ProviderError::BadId)
    }

    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), ProviderError> {
        if self.state != State::Up {
            return Err(ProviderError::NotConnected);
        }
        let (hw, nsge) = self.count(wrs)?;
        let core = u32::try_from(wrs.len()).unwrap_or(u32::MAX);
        if !self.sq.has_room(hw)
            || self.core_busy.saturating_add(core) > self.layout.res.max_send_wr
        {
            self.stats.busy += 1;
            return Err(ProviderError::Busy);
        }
        self.clear_plan();
        reserve(&mut self.wrs, hw)?;
        reserve(&mut self.kinds, hw)?;
        reserve(&mut self.sges, nsge)?;
        reserve(&mut self.pending, hw)?;
        reserve(&mut self.synth, wrs.len())?;
        reserve(&mut self.sync_invs, wrs.len())?;
        let r = self.plan(wrs).and_then(|()| self.post_planned());
        if r.is_ok() {
            self.core_busy += core;
            for i in 0..self.sync_invs.len() {
                let Some(reg) = self.sync_invs.get(i).copied() else {
                    break;
                };
                let n = self.regs.get(reg).map_or(0, |r| r.keys.len());
                for j in 0..n {
                    let k = self.regs.get(reg).and_then(|r| r.keys.get(j).copied());
                    if let Some(k) = k.filter(|&k| self.keys.get(k).is_some_and(|k| k.valid)) {
                        self.revoke_key(k);
                    }
                }
            }
            for i in 0..self.synth.len() {
                if let Some(&id) = self.synth.get(i) {
                    if !Self::stash_push(
                        &mut self.stash,
                        Self::send_completion(id, WcStatus::Success),
                        1,
                    ) {
                        self.break_connection(DownCause::Stash);
                    }
                }
            }
        }
        self.clear_plan();
        r
    }

    fn post_recv(&mut self, bufs: &[u32]) -> Result<(), ProviderError> {
        if self.state == State::Broken {
            return Err(ProviderError::NotConnected);
        }
        if bufs.is_empty() {
            return Ok(());
        }
        self.recv.claim(bufs)?;
        self.recv_ids.clear();
        self.recv_sges.clear();
        // `claim` proved the buffers distinct and in range, so both arrays (sized for every
        // receive buffer) have room.
        for &b in bufs {
            let Some(s) = self.b.recv_sge(b) else {
                self.recv.unclaim(bufs);
                return Err(ProviderError::BadId);
            };
            self.recv_ids.push(RECV_BIT | u64::from(b));
            self.recv_sges.push(s);
        }
        let p = self.b.post_recv(&self.recv_ids, &self.recv_sges);
        let posted = if p.ok {
            bufs.len()
        } else {
            p.count.min(bufs.len())
        };
        self.recv.unclaim(bufs.get(posted..).unwrap_or(&[]));
        self.stats.recv_wrs += posted as u64;
        match (p.ok, posted) {
            (true, _) => Ok(()),
            (false, 0) => Err(ProviderError::NotConnected),
            _ => {
                self.break_connection(DownCause::PartialPost);
                Err(ProviderError::NotConnected)
            }
        }
    }

    fn poll_cq(&mut self, out: &mut [Completion]) -> usize {
        if self.stash.len() < out.len() {
            self.reap();
        }
        let mut n = 0;
        for slot in out.iter_mut() {
            let Some((c, slots)) = self.stash.pop_front() else {
                break;
            };
            self.core_busy = self.core_busy.saturating_sub(slots);
            *slot = c;
            n += 1;
        }
        n
    }

    fn register(
        &mut self,
        frags: &[LocalFragment],
        access: Access,
    ) -> Result<Registration, ProviderError> {
        let uses_sq = self.layout.map_uses_sq;
        if uses_sq && self.state != State::Up {
            return Err(ProviderError::NotConnected);
        }
        self.merged.clear();
        reserve(&mut self.merged, frags.len())?;
        for f in frags {
            let s = self.b.frag_sge(f).ok_or(ProviderError::BadFragments)?;
            self.merged.push(s);
        }
        let runs = runs::runs(&mut self.merged, self.layout.rule)?;
        if self.regs.live() >= self.layout.res.max_registrations || self.keys.free() < runs.len() {
            return Err(ProviderError::Busy);
        }
        if uses_sq && !self.sq.has_room(runs.len()) {
            self.stats.busy += 1;
            return Err(ProviderError::Busy);
        }
        let (id, reg) = self.regs.alloc().ok_or(ProviderError::Busy)?;
        // One page reference on every distinct page covered.
        if reg.pages.try_reserve(frags.len()).is_err() {
            let _ = self.regs.free(id, |_| {});
            return Err(ProviderError::NoMemory);
        }
        for f in frags {
            if reg.pages.last() != Some(&f.addr) {
                reg.pages.push(f.addr);
            }
        }
        reg.pages.sort_unstable();
        reg.pages.dedup();
        let pages = self.b.pages();
        if let Some(bad) = reg.pages.iter().position(|&p| pages.page_ref(p).is_err()) {
            for &p in reg.pages.get(..bad).unwrap_or(&[]) {
                pages.page_unref(p);
            }
            reg.pages.clear();
            let _ = self.regs.free(id, |_| {});
            return Err(ProviderError::BadFragments);
        }
        let mut segments = heapless::Vec::new();
        let mut err = None;
        // Work list of (start, end) ranges of `merged`, in order.
        let mut todo: runs::Runs = heapless::Vec::new();
        for r in runs.iter().rev() {
            let _ = todo.push(*r);
        }
        while let Some((s, e)) = todo.pop() {
            if uses_sq && !self.sq.has_room(1) {
                err = Some(ProviderError::Busy);
                break;
            }
            let Some(k) = self.keys.take() else {
                err = Some(ProviderError::Busy);
                break;
            };
            let Some(reg) = self.regs.get_mut(id) else {
                err = Some(ProviderError::BadId);
                break;
            };
            if reg.keys.push(k).is_err() {
                self.keys.put(k);
                err = Some(ProviderError::BadFragments);
                break;
            }
            if self.keys.get(k).is_some_and(|k| !k.present) {
                match self.b.key_create(k) {
                    Ok(rkey) => {
                        if let Some(key) = self.keys.get_mut(k) {
                            key.present = true;
                            key.rkey = rkey;
                        }
                    }
                    Err(e) => {
                        err = Some(e);
                        break;
                    }
                }
            }
            let Some(run) = self.merged.get(s..e) else {
                err = Some(ProviderError::BadFragments);
                break;
            };
            let rkey = self.keys.get(k).map_or(0, |k| k.rkey);
            let seq = if uses_sq { self.sq.next_seq() } else { 0 };
            let m = match self.b.map(k, rkey, run, access, seq) {
                Ok(m) => m,
                Err(e) => {
                    err = Some(e);
                    break;
                }
            };
            if m.posted {
                let _ = self.sq.push(seq, SqKind::Map);
                self.stats.send_wrs += 1;
            }
            self.stats.maps += 1;
            self.keys.set_valid(k, m.rkey);
            let seg = RegSegment {
                handle: m.rkey,
                length: m.length,
                offset: m.iova,
            };
            let took = m.consumed.min(e - s);
            if segments.push(seg).is_err()
                || took == 0
                || (s + took < e && todo.push((s + took, e)).is_err())
            {
                err = Some(ProviderError::BadFragments);
                break;
            }
        }
        if let Some(e) = err {
            let _ = self.release(id);
            return Err(e);
        }
        Ok(Registration { id, segments })
    }

    fn release(&mut self, reg: RegId) -> Result<(), ProviderError> {
        let (nkeys, revoked) = self
            .regs
            .get(reg)
            .map(|r| (r.keys.len(), r.revoked))
            .ok_or(ProviderError::BadId)?;
        if !revoked {
            self.invalidate_and_unmap(reg, nkeys);
        }
        for j in 0..nkeys {
            let Some(k) = self.regs.get(reg).and_then(|r| r.keys.get(j).copied()) else {
                break;
            };
            self.keys.put(k);
        }
        let pages = self.b.pages();
        self.regs.free(reg, |r| {
            for &p in &r.pages {
                pages.page_unref(p);
            }
        })
    }

    /// Held back only for FRWR MRs invalidated by work request whose backend says so
    /// ([`Backend::holds_revoked_keys`]: the kernel shim, not its KPI emulation, whose FRWR
    /// MRs are rxe windows). Windows and per-run MRs (the libibverbs provider) are
    /// released: a type 2 memory window
    /// invalidated again while FREE under the same key makes Linux 6.1's rxe dereference a
    /// NULL pointer (`rxe_invalidate_mw` → `rxe_check_invalidate_mw` refuses only the
    /// INVALID state, `rxe_do_invalidate_mw` drops `mw->qp`, NULL once FREE: a kernel
    /// panic in the VM), so for them a bumped key (the connection breaks) is the safe
    /// outcome of a late Send With Invalidate.
    fn revoke(&mut self, reg: RegId) -> Result<Revoked, ProviderError> {
        let hold = matches!(self.layout.rule, RunRule::Frwr { .. })
            && self.layout.invalidation == Invalidation::WorkRequest
            && self.b.holds_revoked_keys();
        if !hold {
            return self.release(reg).map(|()| Revoked::Released);
        }
        let (nkeys, revoked) = self
            .regs
            .get(reg)
            .map(|r| (r.keys.len(), r.revoked))
            .ok_or(ProviderError::BadId)?;
        if revoked {
            return Ok(Revoked::Held);
        }
        self.invalidate_and_unmap(reg, nkeys);
        let pages = self.b.pages();
        if let Some(r) = self.regs.get_mut(reg) {
            for &p in &r.pages {
                pages.page_unref(p);
            }
            r.pages.clear();
        }
        self.regs.set_revoked(reg);
        self.stats.quarantined += 1;
        Ok(Revoked::Held)
    }

    fn poll_event(&mut self) -> Option<CmEvent> {
        if self.events.is_empty() {
            self.pump(CmPoll::Event {
                cq_idle: self.last_reap_empty,
            });
        }
        self.events.pop_front()
    }

    fn disconnect(&mut self) {
        self.break_connection(DownCause::Local);
    }
}

impl<B: Backend> Drop for Binding<B> {
    fn drop(&mut self) {
        self.b.shutdown(self.state != State::Broken);
        // The queue pair is gone: no DMA can touch the pages any more.
        let pages = self.b.pages();
        for r in self.regs.live_mut() {
            for &p in &r.pages {
                pages.page_unref(p);
            }
            r.pages.clear();
        }
    }
}
