//! [`VerbsQp`]: one RC queue pair over libibverbs implementing
//! [`krpc_rdma::provider::Provider`].
//!
//! # Resources
//!
//! * One completion queue for both queues, with a completion channel (for [`super::wait`]).
//! * One mmap'd buffer region registered `LOCAL_WRITE`: the send buffers, then the receive
//!   buffers. Receives are posted with `wr_id = RECV_BIT | buffer`.
//! * Page fragments of the [`VerbsArena`] become SGEs `(vaddr, len, arena lkey)`.
//!
//! # Send queue accounting (hardware rule)
//!
//! Every posted work request — the core's and the provider's own (memory-window binds,
//! invalidations) — gets a sequence number as its hardware `wr_id` and an entry in a FIFO.
//! A completion for sequence `s` retires every entry up to `s` (an RC send queue completes in
//! order, so unsignaled requests before `s` succeeded). A chain is posted only if the FIFO has
//! room for all of it (else [`ProviderError::Busy`], nothing posted), so `ibv_post_send` never
//! overflows. The hardware queue is [`VerbsConfig::internal_wrs`] deeper than the depth the
//! core sees.
//!
//! # Registrations
//!
//! One segment per contiguous virtual run of the fragments (at most 16). In
//! [`RegMode::MemoryWindow`] each run gets a type-2 window from a pool, bound by an unsignaled
//! `IBV_WR_BIND_MW` posted before `register` returns (so it precedes every later work
//! request) with a fresh key byte. [`SendOp::LocalInv`] becomes one `IBV_WR_LOCAL_INV` per
//! still-valid window, the last one signaled with the core's id; if every window is already
//! invalid (the peer's Send With Invalidate), no work request is needed and the completion is
//! synthesized (it may then be reported before earlier send-queue completions). `release` of a
//! registration whose windows are still valid posts the invalidations and polls the CQ until
//! they complete (other completions are kept for the next `poll_cq`); when the queue pair is
//! broken it deallocates the windows instead (a window bound to a dead queue pair's PD could
//! otherwise be reached through a later queue pair on the same PD) and the pool allocates new
//! ones on demand. Each registration holds one page reference on every page it covers.
//!
//! In [`RegMode::MemoryRegion`] each run is an `ibv_reg_mr`; invalidation is `ibv_dereg_mr`
//! (synchronous; the `LocalInv` completion is synthesized).
//!
//! # Errors
//!
//! The first completion with an error status (including a flush) breaks the connection:
//! the provider calls `rdma_disconnect` (the queue pair goes to the error state, everything
//! outstanding is flushed, the peer gets a disconnect) and reports one
//! [`CmEvent::Disconnected`]. Later posts fail with [`ProviderError::NotConnected`].

use std::collections::{HashMap, VecDeque};
use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krpc_rdma::provider::{
    Access, CmEvent, Completion, LocalFragment, Provider, ProviderError, RegId, RegSegment,
    Registration, Resources, SendOp, SendWr, WcKind, WcStatus,
};
use krpc_rdma::wire::MAX_CHUNK_SEGMENTS;
use mbuf::{PageProvider, PAGE_SIZE};
use rdma_sys::{
    bind_mw_t, bind_mw_tso_union_t, ibv_access_flags, ibv_ack_cq_events, ibv_alloc_mw,
    ibv_comp_channel, ibv_cq, ibv_create_comp_channel, ibv_create_cq, ibv_dealloc_mw, ibv_dereg_mr,
    ibv_destroy_comp_channel, ibv_destroy_cq, ibv_get_cq_event, ibv_mr, ibv_mw, ibv_mw_bind_info,
    ibv_mw_type, ibv_poll_cq, ibv_post_recv, ibv_post_send, ibv_qp, ibv_qp_init_attr, ibv_qp_type,
    ibv_recv_wr, ibv_reg_mr, ibv_req_notify_cq, ibv_send_flags, ibv_send_wr, ibv_sge, ibv_wc,
    ibv_wc_flags, ibv_wc_status, ibv_wr_opcode, imm_data_invalidated_rkey_union_t, qp_type_t,
    rdma_cm_event_type, rdma_cm_id, rdma_create_qp, rdma_destroy_event_channel, rdma_destroy_id,
    rdma_destroy_qp, rdma_disconnect, rdma_event_channel, rdma_get_cm_event, rdma_t, wr_t, xrc_t,
};

use super::arena::{map, unmap, VerbsArena};
use super::device::Device;
use super::{sys, RegMode, VerbsConfig, VerbsError};

/// Receive `wr_id`s carry this bit; send-queue `wr_id`s are sequence numbers below it.
const RECV_BIT: u64 = 1 << 63;
/// `poll_event` reads the CM channel at least once per this many calls.
const CM_POLL_EVERY: u32 = 64;
/// How long `release` waits for its invalidations before deallocating the windows.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// What a posted send-queue work request was.
#[derive(Debug, Clone, Copy)]
enum SqKind {
    /// The core's request; `Some(id)` reports a completion with that id.
    User(u64),
    /// A window bind (internal).
    Bind,
    /// A window invalidation; `user` when it is the core's signaled `LocalInv`.
    Inv { mw: u32, user: Option<u64> },
}

#[derive(Debug, Clone, Copy)]
struct SqEntry {
    seq: u64,
    kind: SqKind,
}

/// One type-2 memory window of the pool.
#[derive(Debug)]
struct Mw {
    mw: *mut ibv_mw,
    rkey: u32,
    /// Bound and usable by the peer.
    valid: bool,
    /// A LOCAL_INV is posted and not yet complete.
    inv_pending: bool,
    /// Owned by a registration.
    busy: bool,
}

/// One contiguous run of a registration.
#[derive(Debug)]
enum Run {
    Mw(u32),
    Mr {
        mr: *mut ibv_mr,
        // Kept for the Debug output.
        #[allow(dead_code)]
        rkey: u32,
    },
}

#[derive(Debug)]
struct Reg {
    gen: u16,
    runs: Vec<Run>,
    pages: Vec<u64>,
}

/// Connection state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Queue pair created, not yet established (receives may be posted).
    Connecting,
    /// Established.
    Up,
    /// Error or disconnected.
    Broken,
}

/// Counters of one queue pair.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerbsStats {
    /// Work requests posted on the send queue (the core's and internal).
    pub send_wrs: u64,
    /// Receives posted.
    pub recv_wrs: u64,
    /// Memory-window binds posted.
    pub binds: u64,
    /// Local invalidations posted (work requests).
    pub local_invs: u64,
    /// Registrations revoked by the peer's Send With Invalidate.
    pub remote_invs: u64,
    /// Synchronous revocations in `release` (posted LOCAL_INV and waited).
    pub sync_revokes: u64,
    /// Windows deallocated because they could not be invalidated (broken queue pair).
    pub mw_deallocs: u64,
    /// `ibv_reg_mr` calls for per-RPC registrations.
    pub mr_regs: u64,
    /// `post_send` refusals for lack of send-queue room.
    pub busy: u64,
    /// Error completions other than flushes.
    pub errors: u64,
    /// Flushed completions.
    pub flushed: u64,
}

/// One RC queue pair over libibverbs (see the module documentation).
pub struct VerbsQp {
    dev: Arc<Device>,
    arena: Arc<VerbsArena>,
    cfg: VerbsConfig,
    res: Resources,
    channel: *mut rdma_event_channel,
    id: *mut rdma_cm_id,
    qp: *mut ibv_qp,
    cq: *mut ibv_cq,
    comp: *mut ibv_comp_channel,
    cq_events_unacked: u32,
    /// Whether the last `reap` found the CQ empty, and `poll_event` calls since the CM
    /// channel was last read: see `poll_event`.
    last_reap_empty: bool,
    polls_since_cm: u32,
    buf_base: *mut u8,
    buf_len: usize,
    buf_mr: *mut ibv_mr,
    buf_lkey: u32,
    recv_posted: Vec<bool>,
    sq_depth: usize,
    sq: VecDeque<SqEntry>,
    next_seq: u64,
    mws: Vec<Mw>,
    mw_live: u32,
    free_mws: Vec<u32>,
    rkey_to_mw: HashMap<u32, u32>,
    regs: Vec<Option<Reg>>,
    reg_gen: u16,
    live_regs: u32,
    stash: VecDeque<Completion>,
    events: VecDeque<CmEvent>,
    disconnect_reported: bool,
    state: State,
    wrs: Vec<ibv_send_wr>,
    sges: Vec<ibv_sge>,
    stats: VerbsStats,
}

impl std::fmt::Debug for VerbsQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsQp")
            .field("state", &self.state)
            .field("res", &self.res)
            .field("sq_outstanding", &self.sq.len())
            .field("live_regs", &self.live_regs)
            .finish_non_exhaustive()
    }
}

// SAFETY: every raw pointer is owned by this queue pair and only used through `&mut self`
// (or `&self` for read-only buffer access), so moving the whole object to another thread is
// sound; libibverbs objects may be used from any thread.
unsafe impl Send for VerbsQp {}

fn status_of(s: u32) -> WcStatus {
    match s {
        ibv_wc_status::IBV_WC_SUCCESS => WcStatus::Success,
        ibv_wc_status::IBV_WC_WR_FLUSH_ERR => WcStatus::Flushed,
        ibv_wc_status::IBV_WC_REM_ACCESS_ERR => WcStatus::RemoteAccess,
        ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExceeded,
        ibv_wc_status::IBV_WC_LOC_LEN_ERR
        | ibv_wc_status::IBV_WC_LOC_QP_OP_ERR
        | ibv_wc_status::IBV_WC_LOC_PROT_ERR
        | ibv_wc_status::IBV_WC_MW_BIND_ERR
        | ibv_wc_status::IBV_WC_LOC_ACCESS_ERR => WcStatus::LocalError,
        ibv_wc_status::IBV_WC_RETRY_EXC_ERR => WcStatus::TransportRetryExceeded,
        _ => WcStatus::Other,
    }
}

/// The next key byte of an rkey (`ibv_inc_rkey`, without its debug-build overflow).
fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

/// A zero-initialised work request with `opcode`.
fn blank_wr(wr_id: u64, opcode: u32, signaled: bool) -> ibv_send_wr {
    ibv_send_wr {
        wr_id,
        next: ptr::null_mut(),
        sg_list: ptr::null_mut(),
        num_sge: 0,
        opcode,
        send_flags: if signaled {
            ibv_send_flags::IBV_SEND_SIGNALED.0
        } else {
            0
        },
        imm_data_invalidated_rkey_union: imm_data_invalidated_rkey_union_t {
            invalidated_rkey: 0,
        },
        wr: wr_t {
            rdma: rdma_t {
                remote_addr: 0,
                rkey: 0,
            },
        },
        qp_type: qp_type_t {
            xrc: xrc_t { remote_srqn: 0 },
        },
        bind_mw_tso_union: bind_mw_tso_union_t {
            bind_mw: bind_mw_t {
                mw: ptr::null_mut(),
                rkey: 0,
                bind_info: ibv_mw_bind_info {
                    mr: ptr::null_mut(),
                    addr: 0,
                    length: 0,
                    mw_access_flags: 0,
                },
            },
        },
    }
}

/// A planned hardware work request (before SGE pointers are fixed).
struct Planned {
    wr: ibv_send_wr,
    sge_start: usize,
    sge_count: usize,
    kind: SqKind,
}

impl VerbsQp {
    /// Create the CQ, the queue pair on `id` and the buffers. `channel` / `id` are owned by
    /// the result from here on (also on error: they are destroyed).
    pub(crate) fn create(
        arena: &Arc<VerbsArena>,
        cfg: &VerbsConfig,
        channel: *mut rdma_event_channel,
        id: *mut rdma_cm_id,
    ) -> Result<VerbsQp, VerbsError> {
        let dev = Arc::clone(arena.device());
        let lim = dev.limits();
        let max_sge = cfg.max_sge.min(lim.max_sge).max(1);
        let sq_depth = (cfg.max_send_wr + cfg.internal_wrs).min(lim.max_qp_wr);
        let reported_sq = cfg.max_send_wr.min(sq_depth);
        let rd = cfg
            .max_rd_atomic
            .min(lim.max_qp_init_rd_atom)
            .min(lim.max_qp_rd_atom)
            .max(1);
        let res = Resources {
            send_bufs: cfg.send_bufs,
            recv_bufs: cfg.recv_bufs,
            send_buf_size: cfg.send_buf_size,
            recv_buf_size: cfg.recv_buf_size,
            max_send_wr: reported_sq,
            max_sge,
            max_registrations: cfg.max_registrations,
            max_rd_atomic: rd,
        };
        let mut me = VerbsQp {
            dev,
            arena: Arc::clone(arena),
            cfg: cfg.clone(),
            res,
            channel,
            id,
            qp: ptr::null_mut(),
            cq: ptr::null_mut(),
            comp: ptr::null_mut(),
            cq_events_unacked: 0,
            last_reap_empty: true,
            polls_since_cm: 0,
            buf_base: ptr::null_mut(),
            buf_len: 0,
            buf_mr: ptr::null_mut(),
            buf_lkey: 0,
            recv_posted: vec![false; cfg.recv_bufs as usize],
            sq_depth: sq_depth as usize,
            sq: VecDeque::with_capacity(sq_depth as usize),
            next_seq: 0,
            mws: Vec::new(),
            mw_live: 0,
            free_mws: Vec::new(),
            rkey_to_mw: HashMap::new(),
            regs: (0..cfg.max_registrations).map(|_| None).collect(),
            reg_gen: 0,
            live_regs: 0,
            stash: VecDeque::with_capacity(sq_depth as usize + cfg.recv_bufs as usize),
            events: VecDeque::new(),
            disconnect_reported: false,
            state: State::Connecting,
            wrs: Vec::with_capacity(cfg.max_send_wr as usize),
            sges: Vec::with_capacity(cfg.max_send_wr as usize),
            stats: VerbsStats::default(),
        };
        if cfg.send_bufs == 0 || cfg.recv_bufs == 0 || cfg.max_registrations > u32::from(u16::MAX) {
            return Err(VerbsError::Config(
                "buffer counts or registrations out of range",
            ));
        }
        // SAFETY: `id` is a live cm id resolved to this device (checked by the caller).
        let ctx = unsafe { (*id).verbs };
        if ctx != me.dev.ctx() {
            return Err(VerbsError::Config("cm id is on another device"));
        }
        // SAFETY: `ctx` is the live device context.
        me.comp = unsafe { ibv_create_comp_channel(ctx) };
        if me.comp.is_null() {
            return Err(sys("ibv_create_comp_channel"));
        }
        // SAFETY: `comp` is live; its fd is made non-blocking (the wait helper polls it).
        unsafe { set_nonblocking((*me.comp).fd) };
        let cqe = i32::try_from(sq_depth + cfg.recv_bufs + 16)
            .map_err(|_| VerbsError::Config("CQ too large"))?;
        // SAFETY: `ctx` and `comp` are live.
        me.cq = unsafe { ibv_create_cq(ctx, cqe, ptr::null_mut(), me.comp, 0) };
        if me.cq.is_null() {
            return Err(sys("ibv_create_cq"));
        }
        // SAFETY: zeroed init attributes are a valid starting point (pointers null,
        // integers 0); the fields that matter are set below.
        let mut attr: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        attr.send_cq = me.cq;
        attr.recv_cq = me.cq;
        attr.qp_type = ibv_qp_type::IBV_QPT_RC;
        attr.sq_sig_all = 0;
        attr.cap.max_send_wr = sq_depth;
        attr.cap.max_recv_wr = cfg.recv_bufs;
        attr.cap.max_send_sge = max_sge;
        attr.cap.max_recv_sge = 1;
        // SAFETY: `id`, the PD and `attr` are valid; on success the QP hangs off `id`.
        let rc = unsafe { rdma_create_qp(id, me.dev.pd(), &mut attr) };
        if rc != 0 {
            return Err(sys("rdma_create_qp"));
        }
        // SAFETY: `rdma_create_qp` succeeded, so `id->qp` is the new QP.
        me.qp = unsafe { (*id).qp };
        let send_len = cfg.send_bufs as usize * cfg.send_buf_size as usize;
        let recv_len = cfg.recv_bufs as usize * cfg.recv_buf_size as usize;
        me.buf_len = (send_len + recv_len)
            .next_multiple_of(PAGE_SIZE)
            .max(PAGE_SIZE);
        me.buf_base = map(me.buf_len)?;
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        // SAFETY: the mapping is owned by `me` and deregistered before it is unmapped.
        me.buf_mr =
            unsafe { ibv_reg_mr(me.dev.pd(), me.buf_base.cast(), me.buf_len, access as i32) };
        if me.buf_mr.is_null() {
            return Err(sys("ibv_reg_mr (buffers)"));
        }
        // SAFETY: live MR.
        me.buf_lkey = unsafe { (*me.buf_mr).lkey };
        Ok(me)
    }

    /// The connection is up; the peer's private data goes to the core's first `poll_event`.
    pub(crate) fn established(&mut self, private_data: &[u8]) {
        self.state = State::Up;
        let pd = private_data
            .get(..private_data.len().min(56))
            .unwrap_or(&[]);
        let private_data = heapless::Vec::from_slice(pd).unwrap_or_default();
        self.events.push_back(CmEvent::Established { private_data });
        // SAFETY: `channel` is live; from now on CM events are read without blocking.
        unsafe { set_nonblocking((*self.channel).fd) };
    }

    /// Counters.
    pub fn stats(&self) -> VerbsStats {
        self.stats
    }

    /// Registrations not yet released.
    pub fn live_registrations(&self) -> u32 {
        self.live_regs
    }

    /// Memory windows allocated now (pool size).
    pub fn memory_windows(&self) -> u32 {
        self.mw_live
    }

    /// Send-queue work requests not yet retired.
    pub fn sq_outstanding(&self) -> usize {
        self.sq.len()
    }

    /// Whether the connection is up.
    pub fn is_connected(&self) -> bool {
        self.state == State::Up
    }

    /// The arena this queue pair's fragments come from.
    pub fn arena(&self) -> &Arc<VerbsArena> {
        &self.arena
    }

    /// Disconnect (the peer gets `Disconnected`; our outstanding work is flushed).
    pub fn disconnect(&mut self) {
        self.break_connection();
    }

    /// The peer's address (from the connection manager), if known.
    pub fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        if self.id.is_null() {
            return None;
        }
        // SAFETY: `id` is live for the life of `self`; the route's destination address is
        // plain data, filled by rdma_cm before the connection was established.
        let ss = unsafe { (*self.id).route.addr.dst_addr_union.dst_storage };
        super::cm::socket_addr_of(&ss)
    }

    pub(crate) fn fds(&self) -> (i32, i32) {
        // SAFETY: both channels are live for the life of `self`.
        unsafe { ((*self.comp).fd, (*self.channel).fd) }
    }

    /// Whether completions or events are waiting (already reaped).
    pub(crate) fn has_work(&self) -> bool {
        !self.stash.is_empty() || !self.events.is_empty()
    }

    fn send_addr(&self, buf: u32) -> Option<u64> {
        (buf < self.res.send_bufs)
            .then(|| self.buf_base as u64 + u64::from(buf) * u64::from(self.res.send_buf_size))
    }

    fn recv_addr(&self, buf: u32) -> Option<u64> {
        let base = u64::from(self.res.send_bufs) * u64::from(self.res.send_buf_size);
        (buf < self.res.recv_bufs).then(|| {
            self.buf_base as u64 + base + u64::from(buf) * u64::from(self.res.recv_buf_size)
        })
    }

    fn frag_sge(&self, f: &LocalFragment) -> Result<ibv_sge, ProviderError> {
        let (addr, length) = self
            .arena
            .frag_addr(f.addr, f.offset, f.len)
            .ok_or(ProviderError::BadFragments)?;
        Ok(ibv_sge {
            addr,
            length,
            lkey: self.arena.lkey(),
        })
    }

    fn break_connection(&mut self) {
        if self.state != State::Broken {
            self.state = State::Broken;
            // SAFETY: `id` is live; rdma_disconnect moves the QP to the error state (flushing
            // everything outstanding) and notifies the peer. Errors are irrelevant here.
            unsafe { rdma_disconnect(self.id) };
        }
        if !self.disconnect_reported {
            self.disconnect_reported = true;
            self.events.push_back(CmEvent::Disconnected);
        }
    }

    /// Move every available CQ entry into the stash; returns how many.
    pub(crate) fn reap(&mut self) -> usize {
        let mut total = 0;
        loop {
            // SAFETY: `ibv_wc` is plain data; zeroed entries are valid out-buffers.
            let mut wcs: [ibv_wc; 16] = unsafe { std::mem::zeroed() };
            // SAFETY: `cq` is live and `wcs` has room for 16 entries.
            let n = unsafe { ibv_poll_cq(self.cq, 16, wcs.as_mut_ptr()) };
            if total == 0 {
                self.last_reap_empty = n <= 0;
            }
            if n <= 0 {
                if n < 0 {
                    self.break_connection();
                }
                return total;
            }
            for wc in wcs.iter().take(n as usize) {
                self.on_wc(wc);
            }
            total += n as usize;
        }
    }

    fn on_wc(&mut self, wc: &ibv_wc) {
        let status = status_of(wc.status);
        match status {
            WcStatus::Success => {}
            WcStatus::Flushed => self.stats.flushed += 1,
            _ => self.stats.errors += 1,
        }
        if wc.wr_id & RECV_BIT != 0 {
            let buf = (wc.wr_id & !RECV_BIT) as u32;
            if let Some(p) = self.recv_posted.get_mut(buf as usize) {
                *p = false;
            }
            let mut invalidated = None;
            // SAFETY: the union is a plain `u32` either way; which meaning it has is decided
            // from the flags below.
            let raw = unsafe { wc.imm_data_invalidated_rkey_union.invalidated_rkey };
            let flag_inv = wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_INV.0 != 0;
            // rxe in Linux 6.1 fills the invalidated rkey but does not set IBV_WC_WITH_INV
            // (measured: flags 0x5). We never use immediate data, so a non-zero value without
            // IBV_WC_WITH_IMM that names one of our live windows is a remote invalidation.
            // Getting this right matters: a LOCAL_INV of a window the peer already
            // invalidated crashes that kernel (NULL `mw->qp` in `rxe_do_invalidate_mw`).
            let quirk_inv = wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 == 0
                && raw != 0
                && self.rkey_to_mw.contains_key(&raw);
            if status == WcStatus::Success && (flag_inv || quirk_inv) {
                invalidated = Some(raw);
                self.remote_invalidated(raw);
            }
            self.stash.push_back(Completion {
                wr_id: u64::from(buf),
                status,
                kind: WcKind::Recv { buf },
                byte_len: if status == WcStatus::Success {
                    wc.byte_len
                } else {
                    0
                },
                invalidated,
            });
        } else {
            let seq = wc.wr_id;
            while let Some(e) = self.sq.front().copied() {
                if e.seq > seq {
                    break;
                }
                self.sq.pop_front();
                let st = if e.seq == seq {
                    status
                } else {
                    WcStatus::Success
                };
                self.retire(e, st, e.seq == seq);
            }
        }
        if status != WcStatus::Success {
            self.break_connection();
        }
    }

    /// A send-queue entry is done with `status`; `reported` when it had its own completion.
    fn retire(&mut self, e: SqEntry, status: WcStatus, reported: bool) {
        match e.kind {
            SqKind::User(id) => {
                if reported {
                    self.push_send_completion(id, status);
                }
            }
            SqKind::Bind => {}
            SqKind::Inv { mw, user } => {
                if let Some(m) = self.mws.get_mut(mw as usize) {
                    m.inv_pending = false;
                    if status == WcStatus::Success {
                        m.valid = false;
                        let rkey = m.rkey;
                        self.rkey_to_mw.remove(&rkey);
                    }
                }
                if let (Some(id), true) = (user, reported) {
                    self.push_send_completion(id, status);
                }
            }
        }
    }

    fn push_send_completion(&mut self, wr_id: u64, status: WcStatus) {
        self.stash.push_back(Completion {
            wr_id,
            status,
            kind: WcKind::Send,
            byte_len: 0,
            invalidated: None,
        });
    }

    fn remote_invalidated(&mut self, rkey: u32) {
        if let Some(idx) = self.rkey_to_mw.remove(&rkey) {
            if let Some(m) = self.mws.get_mut(idx as usize) {
                m.valid = false;
            }
            self.stats.remote_invs += 1;
        }
    }

    /// Read every CM event available now (non-blocking).
    pub(crate) fn pump_cm(&mut self) {
        loop {
            let mut ev = ptr::null_mut();
            // SAFETY: `channel` is live and non-blocking once established; `ev` is a valid
            // out-pointer.
            let rc = unsafe { rdma_get_cm_event(self.channel, &mut ev) };
            if rc != 0 || ev.is_null() {
                return;
            }
            // SAFETY: `ev` is a live event until acked just below.
            let kind = unsafe { (*ev).event };
            // SAFETY: acked exactly once, nothing of it is used afterwards.
            unsafe { rdma_sys::rdma_ack_cm_event(ev) };
            match kind {
                rdma_cm_event_type::RDMA_CM_EVENT_DISCONNECTED
                | rdma_cm_event_type::RDMA_CM_EVENT_DEVICE_REMOVAL
                | rdma_cm_event_type::RDMA_CM_EVENT_TIMEWAIT_EXIT
                | rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_ERROR
                | rdma_cm_event_type::RDMA_CM_EVENT_UNREACHABLE
                | rdma_cm_event_type::RDMA_CM_EVENT_REJECTED => self.break_connection(),
                _ => {}
            }
        }
    }

    /// Arm the CQ notification after acknowledging delivered ones (used by the wait helper).
    pub(crate) fn arm(&mut self) {
        loop {
            let mut cq = ptr::null_mut();
            let mut ctx = ptr::null_mut();
            // SAFETY: `comp` is live and non-blocking; out-pointers are valid.
            let rc = unsafe { ibv_get_cq_event(self.comp, &mut cq, &mut ctx) };
            if rc != 0 {
                break;
            }
            self.cq_events_unacked += 1;
        }
        if self.cq_events_unacked > 0 {
            // SAFETY: acknowledges exactly the events read above.
            unsafe { ibv_ack_cq_events(self.cq, self.cq_events_unacked) };
            self.cq_events_unacked = 0;
        }
        // SAFETY: `cq` is live.
        unsafe { ibv_req_notify_cq(self.cq, 0) };
    }

    /// Post the planned chain; records the send-queue entries.
    fn post_planned(&mut self, mut plan: Vec<Planned>) -> Result<(), ProviderError> {
        if plan.is_empty() {
            return Ok(());
        }
        // Fix the SGE pointers (the SGE vector is complete and will not move any more) and
        // link the chain.
        let sge_base = self.sges.as_mut_ptr();
        for p in plan.iter_mut() {
            if p.sge_count > 0 {
                // SAFETY: `sge_start + sge_count <= sges.len()`: the range was pushed while
                // planning.
                p.wr.sg_list = unsafe { sge_base.add(p.sge_start) };
                p.wr.num_sge = p.sge_count as i32;
            }
        }
        self.wrs.clear();
        let kinds: Vec<(u64, SqKind)> = plan.iter().map(|p| (p.wr.wr_id, p.kind)).collect();
        self.wrs.extend(plan.into_iter().map(|p| p.wr));
        let n = self.wrs.len();
        let base = self.wrs.as_mut_ptr();
        for i in 0..n.saturating_sub(1) {
            // SAFETY: `i + 1 < n`: both pointers are inside the vector, which is not touched
            // again until `ibv_post_send` returns.
            unsafe { (*base.add(i)).next = base.add(i + 1) };
        }
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: `qp` is live; the chain, its SGEs (pointing into registered memory) and all
        // pointed-to structures stay valid for the duration of the call (the library copies
        // the requests into the send queue).
        let rc = unsafe { ibv_post_send(self.qp, base, &mut bad) };
        let posted = if rc == 0 {
            n
        } else if bad.is_null() {
            0
        } else {
            // SAFETY: `bad` points into the chain we passed.
            usize::try_from(unsafe { bad.offset_from(base) }).unwrap_or(0)
        };
        for (wr_id, kind) in kinds.into_iter().take(posted) {
            self.sq.push_back(SqEntry { seq: wr_id, kind });
        }
        self.stats.send_wrs += posted as u64;
        if rc != 0 {
            // Our accounting should make this impossible; a partial post cannot be undone.
            if posted > 0 {
                self.break_connection();
                return Err(ProviderError::NotConnected);
            }
            return Err(ProviderError::Busy);
        }
        Ok(())
    }

    fn seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq = (self.next_seq + 1) & !RECV_BIT;
        s
    }

    fn reg_slot(&self, id: RegId) -> Option<usize> {
        let slot = (id.0 & 0xffff) as usize;
        let gen = (id.0 >> 16) as u16;
        match self.regs.get(slot) {
            Some(Some(r)) if r.gen == gen => Some(slot),
            _ => None,
        }
    }

    /// Windows of a registration that still need a LOCAL_INV (valid, none pending).
    fn mws_to_invalidate(&self, slot: usize) -> Vec<u32> {
        let Some(Some(reg)) = self.regs.get(slot) else {
            return Vec::new();
        };
        reg.runs
            .iter()
            .filter_map(|r| match r {
                Run::Mw(i) => self
                    .mws
                    .get(*i as usize)
                    .filter(|m| m.valid && !m.inv_pending)
                    .map(|_| *i),
                Run::Mr { .. } => None,
            })
            .collect()
    }

    fn get_mw(&mut self) -> Result<u32, ProviderError> {
        if let Some(i) = self.free_mws.pop() {
            return Ok(i);
        }
        if self.mw_live >= self.cfg.max_mws.min(self.dev.limits().max_mw) {
            return Err(ProviderError::Busy);
        }
        // SAFETY: the PD is live; a failed allocation returns null or `None`.
        let mw = unsafe { ibv_alloc_mw(self.dev.pd(), ibv_mw_type::IBV_MW_TYPE_2) }
            .unwrap_or(ptr::null_mut());
        if mw.is_null() {
            return Err(ProviderError::NoMemory);
        }
        // SAFETY: live window.
        let rkey = unsafe { (*mw).rkey };
        let m = Mw {
            mw,
            rkey,
            valid: false,
            inv_pending: false,
            busy: false,
        };
        self.mw_live += 1;
        // Reuse a slot of a deallocated window if there is one.
        if let Some(i) = self.mws.iter().position(|m| m.mw.is_null()) {
            if let Some(s) = self.mws.get_mut(i) {
                *s = m;
            }
            return Ok(i as u32);
        }
        self.mws.push(m);
        Ok((self.mws.len() - 1) as u32)
    }

    fn put_mw(&mut self, i: u32) {
        let Some(m) = self.mws.get_mut(i as usize) else {
            return;
        };
        m.busy = false;
        if m.mw.is_null() {
            return;
        }
        if m.valid || m.inv_pending {
            // Cannot be reused safely: revoke for good.
            let rkey = m.rkey;
            // SAFETY: live window, not referenced by any registration any more.
            unsafe { ibv_dealloc_mw(m.mw) };
            m.mw = ptr::null_mut();
            m.valid = false;
            m.inv_pending = false;
            self.rkey_to_mw.remove(&rkey);
            self.mw_live = self.mw_live.saturating_sub(1);
            self.stats.mw_deallocs += 1;
        } else {
            self.free_mws.push(i);
        }
    }

    /// Plan one LOCAL_INV per window in `mws`; the last one carries `user` (signaled).
    fn plan_invs(&mut self, mws: &[u32], user: Option<u64>, plan: &mut Vec<Planned>) {
        let n = mws.len();
        for (k, &i) in mws.iter().enumerate() {
            let last = k + 1 == n;
            let Some(rkey) = self.mws.get(i as usize).map(|m| m.rkey) else {
                continue;
            };
            let signaled = last;
            let seq = self.seq();
            let mut wr = blank_wr(seq, ibv_wr_opcode::IBV_WR_LOCAL_INV, signaled);
            wr.imm_data_invalidated_rkey_union = imm_data_invalidated_rkey_union_t {
                invalidated_rkey: rkey,
            };
            plan.push(Planned {
                wr,
                sge_start: 0,
                sge_count: 0,
                kind: SqKind::Inv {
                    mw: i,
                    user: if last { user } else { None },
                },
            });
        }
    }

    fn mark_inv_pending(&mut self, mws: &[u32]) {
        for &i in mws {
            if let Some(m) = self.mws.get_mut(i as usize) {
                m.inv_pending = true;
            }
        }
        self.stats.local_invs += mws.len() as u64;
    }

    /// Deregister the MR runs of a registration (MR mode invalidation).
    fn dereg_runs(&mut self, slot: usize) {
        if let Some(Some(reg)) = self.regs.get_mut(slot) {
            for r in reg.runs.iter_mut() {
                if let Run::Mr { mr, .. } = r {
                    if !mr.is_null() {
                        // SAFETY: a live per-RPC MR, deregistered once (nulled after).
                        unsafe { ibv_dereg_mr(*mr) };
                        *mr = ptr::null_mut();
                    }
                }
            }
        }
    }

    /// Compute the contiguous virtual runs `(vaddr, len)` of `frags`.
    fn runs_of(
        &self,
        frags: &[LocalFragment],
    ) -> Result<heapless::Vec<(u64, u64), MAX_CHUNK_SEGMENTS>, ProviderError> {
        let mut runs: heapless::Vec<(u64, u64), MAX_CHUNK_SEGMENTS> = heapless::Vec::new();
        for f in frags {
            let (addr, len) = self
                .arena
                .frag_addr(f.addr, f.offset, f.len)
                .ok_or(ProviderError::BadFragments)?;
            match runs.last_mut() {
                Some((a, l)) if *a + *l == addr => *l += u64::from(len),
                _ => runs
                    .push((addr, u64::from(len)))
                    .map_err(|_| ProviderError::BadFragments)?,
            }
        }
        if runs.is_empty() {
            return Err(ProviderError::BadFragments);
        }
        Ok(runs)
    }
}

impl Provider for VerbsQp {
    fn resources(&self) -> Resources {
        self.res
    }

    fn send_buf(&mut self, buf: u32) -> Result<&mut [u8], ProviderError> {
        let addr = self.send_addr(buf).ok_or(ProviderError::BadId)?;
        // SAFETY: `addr..addr+send_buf_size` lies inside the buffer mapping owned by `self`;
        // the borrow of `self` keeps it alive and exclusive. The NIC only reads send buffers
        // (while a Send of this buffer is outstanding, which the core does not overlap with
        // writing it).
        Ok(unsafe {
            std::slice::from_raw_parts_mut(addr as *mut u8, self.res.send_buf_size as usize)
        })
    }

    fn recv_buf(&self, buf: u32) -> Result<&[u8], ProviderError> {
        let addr = self.recv_addr(buf).ok_or(ProviderError::BadId)?;
        if self.recv_posted.get(buf as usize).copied().unwrap_or(true) {
            // Posted: the NIC may be writing it; no reference may be made.
            return Err(ProviderError::BadId);
        }
        // SAFETY: inside the mapping; the buffer is not posted, so the NIC does not write it
        // while the shared borrow of `self` lasts (posting needs `&mut self`).
        Ok(unsafe {
            std::slice::from_raw_parts(addr as *const u8, self.res.recv_buf_size as usize)
        })
    }

    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), ProviderError> {
        if self.state != State::Up {
            return Err(ProviderError::NotConnected);
        }
        // Validate and count hardware work requests first (nothing is touched).
        let max_sge = self.res.max_sge as usize;
        let mut hw = 0usize;
        let mut nsge = 0usize;
        for w in wrs {
            match w.op {
                SendOp::Send { buf, len, .. } => {
                    if self.send_addr(buf).is_none() || len > self.res.send_buf_size {
                        return Err(ProviderError::BadId);
                    }
                    hw += 1;
                    nsge += 1;
                }
                SendOp::SendGather {
                    buf, len, pages, ..
                } => {
                    if self.send_addr(buf).is_none() || len > self.res.send_buf_size {
                        return Err(ProviderError::BadId);
                    }
                    let n = usize::from(len > 0) + pages.len();
                    if n > max_sge {
                        return Err(ProviderError::BadFragments);
                    }
                    for f in pages {
                        self.frag_sge(f)?;
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
                        total += u64::from(self.frag_sge(f)?.length);
                    }
                    if total > u64::from(u32::MAX) {
                        return Err(ProviderError::BadFragments);
                    }
                    hw += 1;
                    nsge += local.len();
                }
                SendOp::LocalInv { reg } => {
                    let slot = self.reg_slot(reg).ok_or(ProviderError::BadId)?;
                    hw += self.mws_to_invalidate(slot).len();
                }
            }
        }
        if self.sq.len() + hw > self.sq_depth {
            self.stats.busy += 1;
            return Err(ProviderError::Busy);
        }
        // Plan.
        self.sges.clear();
        if self.sges.capacity() < nsge {
            self.sges
                .try_reserve(nsge)
                .map_err(|_| ProviderError::NoMemory)?;
        }
        let mut plan: Vec<Planned> = Vec::new();
        plan.try_reserve(hw).map_err(|_| ProviderError::NoMemory)?;
        let mut synth: Vec<u64> = Vec::new();
        let mut mr_invs: Vec<usize> = Vec::new();
        let mut pending_invs: Vec<u32> = Vec::new();
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
                    let opcode = if invalidate.is_some() {
                        ibv_wr_opcode::IBV_WR_SEND_WITH_INV
                    } else {
                        ibv_wr_opcode::IBV_WR_SEND
                    };
                    let seq = self.seq();
                    let mut wr = blank_wr(seq, opcode, w.signaled);
                    if let Some(rkey) = invalidate {
                        wr.imm_data_invalidated_rkey_union = imm_data_invalidated_rkey_union_t {
                            invalidated_rkey: rkey,
                        };
                    }
                    let start = self.sges.len();
                    if len > 0 {
                        let addr = self.send_addr(buf).ok_or(ProviderError::BadId)?;
                        self.sges.push(ibv_sge {
                            addr,
                            length: len,
                            lkey: self.buf_lkey,
                        });
                    }
                    if let SendOp::SendGather { pages, .. } = w.op {
                        for f in pages {
                            let s = self.frag_sge(f)?;
                            self.sges.push(s);
                        }
                    }
                    plan.push(Planned {
                        wr,
                        sge_start: start,
                        sge_count: self.sges.len() - start,
                        kind: SqKind::User(w.wr_id),
                    });
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
                    let opcode = if matches!(w.op, SendOp::RdmaRead { .. }) {
                        ibv_wr_opcode::IBV_WR_RDMA_READ
                    } else {
                        ibv_wr_opcode::IBV_WR_RDMA_WRITE
                    };
                    let seq = self.seq();
                    let mut wr = blank_wr(seq, opcode, w.signaled);
                    wr.wr = wr_t {
                        rdma: rdma_t {
                            remote_addr: offset,
                            rkey: handle,
                        },
                    };
                    let start = self.sges.len();
                    for f in local {
                        let s = self.frag_sge(f)?;
                        self.sges.push(s);
                    }
                    plan.push(Planned {
                        wr,
                        sge_start: start,
                        sge_count: local.len(),
                        kind: SqKind::User(w.wr_id),
                    });
                }
                SendOp::LocalInv { reg } => {
                    let slot = self.reg_slot(reg).ok_or(ProviderError::BadId)?;
                    let mws = self.mws_to_invalidate(slot);
                    if self.cfg.reg_mode == RegMode::MemoryRegion {
                        mr_invs.push(slot);
                        synth.push(w.wr_id);
                    } else if mws.is_empty() {
                        synth.push(w.wr_id);
                    } else {
                        self.plan_invs(&mws, Some(w.wr_id), &mut plan);
                        pending_invs.extend_from_slice(&mws);
                    }
                }
            }
        }
        self.post_planned(plan)?;
        self.mark_inv_pending(&pending_invs);
        for slot in mr_invs {
            self.dereg_runs(slot);
        }
        for id in synth {
            self.push_send_completion(id, WcStatus::Success);
        }
        Ok(())
    }

    fn post_recv(&mut self, bufs: &[u32]) -> Result<(), ProviderError> {
        if self.state == State::Broken {
            return Err(ProviderError::NotConnected);
        }
        for (k, &b) in bufs.iter().enumerate() {
            let posted = self
                .recv_posted
                .get(b as usize)
                .copied()
                .ok_or(ProviderError::BadId)?;
            if posted || bufs.get(..k).is_some_and(|p| p.contains(&b)) {
                return Err(ProviderError::BadId);
            }
        }
        let mut sges = Vec::with_capacity(bufs.len());
        for &b in bufs {
            sges.push(ibv_sge {
                addr: self.recv_addr(b).ok_or(ProviderError::BadId)?,
                length: self.res.recv_buf_size,
                lkey: self.buf_lkey,
            });
        }
        let mut wrs: Vec<ibv_recv_wr> = bufs
            .iter()
            .map(|&b| ibv_recv_wr {
                wr_id: RECV_BIT | u64::from(b),
                next: ptr::null_mut(),
                sg_list: ptr::null_mut(),
                num_sge: 1,
            })
            .collect();
        let n = wrs.len();
        if n == 0 {
            return Ok(());
        }
        let wbase = wrs.as_mut_ptr();
        let sbase = sges.as_mut_ptr();
        for i in 0..n {
            // SAFETY: `i < n` for both vectors (same length), which are not touched again
            // until `ibv_post_recv` returns.
            unsafe {
                (*wbase.add(i)).sg_list = sbase.add(i);
                if i + 1 < n {
                    (*wbase.add(i)).next = wbase.add(i + 1);
                }
            }
        }
        let mut bad = ptr::null_mut();
        // SAFETY: `qp` is live; the chain and its SGEs (inside the registered buffer region)
        // are valid for the call.
        let rc = unsafe { ibv_post_recv(self.qp, wbase, &mut bad) };
        let posted = if rc == 0 {
            n
        } else if bad.is_null() {
            0
        } else {
            // SAFETY: `bad` points into the chain.
            usize::try_from(unsafe { bad.offset_from(wbase) }).unwrap_or(0)
        };
        for &b in bufs.iter().take(posted) {
            if let Some(p) = self.recv_posted.get_mut(b as usize) {
                *p = true;
            }
        }
        self.stats.recv_wrs += posted as u64;
        match (rc, posted) {
            (0, _) => Ok(()),
            (_, 0) => Err(ProviderError::NotConnected),
            _ => {
                self.break_connection();
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
            let Some(c) = self.stash.pop_front() else {
                break;
            };
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
        let runs = self.runs_of(frags)?;
        if self.live_regs >= self.res.max_registrations {
            return Err(ProviderError::Busy);
        }
        let slot = self
            .regs
            .iter()
            .position(Option::is_none)
            .ok_or(ProviderError::Busy)?;
        let mode = self.cfg.reg_mode;
        if mode == RegMode::MemoryWindow {
            if self.state != State::Up {
                return Err(ProviderError::NotConnected);
            }
            if self.sq.len() + runs.len() > self.sq_depth {
                self.stats.busy += 1;
                return Err(ProviderError::Busy);
            }
        }
        // Page references on every distinct page covered.
        let mut pages: Vec<u64> = Vec::new();
        for f in frags {
            if pages.last() != Some(&f.addr) && !pages.contains(&f.addr) {
                if self.arena.page_ref(f.addr).is_err() {
                    for p in &pages {
                        self.arena.page_unref(*p);
                    }
                    return Err(ProviderError::BadFragments);
                }
                pages.push(f.addr);
            }
        }
        let mut mw_access = 0u32;
        if access.contains(Access::REMOTE_READ) {
            mw_access |= ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        }
        if access.contains(Access::REMOTE_WRITE) {
            mw_access |= ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        }
        let mut out_runs: Vec<Run> = Vec::with_capacity(runs.len());
        let mut segments = heapless::Vec::new();
        let result: Result<(), ProviderError> = (|| {
            match mode {
                RegMode::MemoryWindow => {
                    let mut plan = Vec::with_capacity(runs.len());
                    for &(addr, len) in &runs {
                        let i = self.get_mw()?;
                        out_runs.push(Run::Mw(i));
                        let m = self.mws.get_mut(i as usize).ok_or(ProviderError::BadId)?;
                        m.busy = true;
                        let new_rkey = inc_rkey(m.rkey);
                        let mw = m.mw;
                        // SAFETY: live window owned by this queue pair. The library passes
                        // `mw->rkey` to the kernel as the window's current rkey, which rxe
                        // checks; for type 2 nothing updates it, so we do (as `ibv_bind_mw`
                        // does for type 1).
                        unsafe { (*mw).rkey = m.rkey };
                        let seq = self.seq();
                        let mut wr = blank_wr(seq, ibv_wr_opcode::IBV_WR_BIND_MW, false);
                        wr.bind_mw_tso_union = bind_mw_tso_union_t {
                            bind_mw: bind_mw_t {
                                mw,
                                rkey: new_rkey,
                                bind_info: ibv_mw_bind_info {
                                    mr: self.arena.mr(),
                                    addr,
                                    length: len,
                                    mw_access_flags: mw_access,
                                },
                            },
                        };
                        plan.push(Planned {
                            wr,
                            sge_start: 0,
                            sge_count: 0,
                            kind: SqKind::Bind,
                        });
                        let _ = segments.push(RegSegment {
                            handle: new_rkey,
                            length: u32::try_from(len).map_err(|_| ProviderError::BadFragments)?,
                            offset: addr,
                        });
                    }
                    self.post_planned(plan)?;
                    for (r, s) in out_runs.iter().zip(segments.iter()) {
                        if let Run::Mw(i) = r {
                            if let Some(m) = self.mws.get_mut(*i as usize) {
                                m.rkey = s.handle;
                                m.valid = true;
                                self.rkey_to_mw.insert(s.handle, *i);
                            }
                        }
                    }
                    self.stats.binds += runs.len() as u64;
                }
                RegMode::MemoryRegion => {
                    let acc = mw_access | ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
                    for &(addr, len) in &runs {
                        let len_us =
                            usize::try_from(len).map_err(|_| ProviderError::BadFragments)?;
                        // SAFETY: `addr..addr+len` lies inside allocated arena pages (checked by
                        // `runs_of`), which stay mapped while the arena lives; the MR is
                        // deregistered at invalidation or release.
                        let mr = unsafe {
                            ibv_reg_mr(self.dev.pd(), addr as *mut libc::c_void, len_us, acc as i32)
                        };
                        if mr.is_null() {
                            return Err(ProviderError::NoMemory);
                        }
                        // SAFETY: live MR.
                        let rkey = unsafe { (*mr).rkey };
                        out_runs.push(Run::Mr { mr, rkey });
                        self.stats.mr_regs += 1;
                        let _ = segments.push(RegSegment {
                            handle: rkey,
                            length: u32::try_from(len).map_err(|_| ProviderError::BadFragments)?,
                            offset: addr,
                        });
                    }
                }
            }
            Ok(())
        })();
        if let Err(e) = result {
            for r in out_runs {
                match r {
                    Run::Mw(i) => self.put_mw(i),
                    Run::Mr { mr, .. } => {
                        // SAFETY: a per-RPC MR made just above, never advertised.
                        unsafe { ibv_dereg_mr(mr) };
                    }
                }
            }
            for p in &pages {
                self.arena.page_unref(*p);
            }
            return Err(e);
        }
        self.reg_gen = self.reg_gen.wrapping_add(1);
        let gen = self.reg_gen;
        if let Some(s) = self.regs.get_mut(slot) {
            *s = Some(Reg {
                gen,
                runs: out_runs,
                pages,
            });
        }
        self.live_regs += 1;
        Ok(Registration {
            id: RegId((u32::from(gen) << 16) | slot as u32),
            segments,
        })
    }

    fn release(&mut self, reg: RegId) -> Result<(), ProviderError> {
        let slot = self.reg_slot(reg).ok_or(ProviderError::BadId)?;
        if self.cfg.reg_mode == RegMode::MemoryRegion {
            self.dereg_runs(slot);
        } else {
            // Synchronous revocation of windows the peer can still use.
            let need = self.mws_to_invalidate(slot);
            if self.state == State::Up
                && !need.is_empty()
                && self.sq.len() + need.len() <= self.sq_depth
            {
                let mut plan = Vec::new();
                self.plan_invs(&need, None, &mut plan);
                // Make the last one signaled (plan_invs does) so its completion arrives.
                if self.post_planned(plan).is_ok() {
                    self.mark_inv_pending(&need);
                    self.stats.sync_revokes += 1;
                }
            }
            let ids: Vec<u32> = match self.regs.get(slot) {
                Some(Some(r)) => r
                    .runs
                    .iter()
                    .filter_map(|r| match r {
                        Run::Mw(i) => Some(*i),
                        Run::Mr { .. } => None,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let deadline = Instant::now() + RELEASE_TIMEOUT;
            loop {
                let pending = ids.iter().any(|&i| {
                    self.mws
                        .get(i as usize)
                        .is_some_and(|m| m.valid || m.inv_pending)
                });
                if !pending || self.state == State::Broken || Instant::now() > deadline {
                    break;
                }
                if self.reap() == 0 {
                    std::hint::spin_loop();
                }
            }
            // Whatever is still valid now is deallocated by `put_mw`.
            for i in ids {
                self.put_mw(i);
            }
        }
        if let Some(s) = self.regs.get_mut(slot) {
            if let Some(r) = s.take() {
                for p in r.pages {
                    self.arena.page_unref(p);
                }
            }
        }
        self.live_regs = self.live_regs.saturating_sub(1);
        Ok(())
    }

    fn poll_event(&mut self) -> Option<CmEvent> {
        // Reading the CM channel is a system call; while completions keep arriving the
        // connection is alive (and a lost one shows as flushed completions first), so it is
        // read when the CQ was last found empty, and at least every `CM_POLL_EVERY` calls.
        self.polls_since_cm = self.polls_since_cm.saturating_add(1);
        if self.events.is_empty() && (self.last_reap_empty || self.polls_since_cm >= CM_POLL_EVERY)
        {
            self.polls_since_cm = 0;
            self.pump_cm();
        }
        self.events.pop_front()
    }

    fn disconnect(&mut self) {
        VerbsQp::disconnect(self);
    }
}

impl Drop for VerbsQp {
    fn drop(&mut self) {
        if !self.id.is_null() && self.state != State::Broken {
            // SAFETY: live id; errors are irrelevant at teardown.
            unsafe { rdma_disconnect(self.id) };
        }
        // Registrations left: revoke (deallocate windows / deregister MRs), drop page refs.
        for slot in 0..self.regs.len() {
            self.dereg_runs(slot);
            if let Some(Some(r)) = self.regs.get_mut(slot) {
                for p in std::mem::take(&mut r.pages) {
                    self.arena.page_unref(p);
                }
            }
        }
        for m in self.mws.iter_mut() {
            if !m.mw.is_null() {
                // SAFETY: live window, deallocated once.
                unsafe { ibv_dealloc_mw(m.mw) };
                m.mw = ptr::null_mut();
            }
        }
        if !self.qp.is_null() {
            // SAFETY: the QP was created on `id` and nothing uses it any more.
            unsafe { rdma_destroy_qp(self.id) };
        }
        if !self.cq.is_null() {
            if !self.comp.is_null() {
                self.arm();
            }
            // SAFETY: the QP using it is gone and every notification is acknowledged.
            unsafe { ibv_destroy_cq(self.cq) };
        }
        if !self.comp.is_null() {
            // SAFETY: the CQ using it is gone.
            unsafe { ibv_destroy_comp_channel(self.comp) };
        }
        if !self.buf_mr.is_null() {
            // SAFETY: the buffer MR, deregistered once, before unmapping.
            unsafe { ibv_dereg_mr(self.buf_mr) };
        }
        if !self.buf_base.is_null() {
            unmap(self.buf_base, self.buf_len);
        }
        if !self.id.is_null() {
            // SAFETY: every event of the id was acknowledged; the QP is destroyed.
            unsafe { rdma_destroy_id(self.id) };
        }
        if !self.channel.is_null() {
            // SAFETY: its only id is destroyed.
            unsafe { rdma_destroy_event_channel(self.channel) };
        }
    }
}

/// Set `O_NONBLOCK` on `fd`.
///
/// # Safety
/// `fd` must be an open file descriptor.
pub(crate) unsafe fn set_nonblocking(fd: i32) {
    // SAFETY: the caller guarantees `fd` is open; F_GETFL / F_SETFL touch only its flags.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
    }
}
