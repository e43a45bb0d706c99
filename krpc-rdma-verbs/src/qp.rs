//! [`VerbsQp`]: one RC queue pair over libibverbs implementing
//! [`krpc_rdma::provider::Provider`].
//!
//! The queue-pair logic (send-queue accounting, posted receives, the registration table and
//! key pool, chain validation, completions, connection state, synchronous revocation) is the
//! core's shared [`Binding`]; this file is only its [`Backend`] over libibverbs, which holds
//! every `unsafe` of the provider.
//!
//! # Resources
//!
//! * One completion queue for both queues, with a completion channel (for [`super::wait`]).
//! * One mmap'd buffer region registered `LOCAL_WRITE`: the send buffers, then the receive
//!   buffers. Receives are posted with `wr_id = RECV_BIT | buffer`.
//! * Page fragments of the [`VerbsArena`] become SGEs `(vaddr, len, arena lkey)`.
//! * The hardware send queue is [`VerbsConfig::internal_wrs`] deeper than the depth the core
//!   sees, for window binds and invalidations.
//!
//! # Registrations
//!
//! One key per contiguous virtual run of the fragments ([`RunRule::Contiguous`], at most 16).
//! In [`RegMode::MemoryWindow`] a key is a type-2 window (allocated on first use), bound by an
//! unsignaled `IBV_WR_BIND_MW` posted before `register` returns (so it precedes every later
//! work request) with a fresh key byte; `LocalInv` becomes one `IBV_WR_LOCAL_INV` per
//! still-valid window. `release` of a registration whose windows are still valid posts the
//! invalidations and polls the CQ until they complete (2 s at most); a window that cannot be
//! invalidated (broken queue pair) is deallocated (a window bound to a dead queue pair's PD
//! could otherwise be reached through a later queue pair on the same PD) and a new one is
//! allocated on demand.
//!
//! In [`RegMode::MemoryRegion`] each run is an `ibv_reg_mr`; invalidation is `ibv_dereg_mr`
//! (synchronous; the `LocalInv` completion is synthesized).
//!
//! # Errors
//!
//! The first completion with an error status (including a flush) breaks the connection:
//! `rdma_disconnect` (the queue pair goes to the error state, everything outstanding is
//! flushed, the peer gets a disconnect) and one `CmEvent::Disconnected`. Later posts fail with
//! [`ProviderError::NotConnected`].

use std::ptr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krpc_rdma::provider::binding::runs::RunRule;
use krpc_rdma::provider::binding::{
    Backend, Binding, BindingStats, CmPoll, Invalidation, Layout, Mapped, Posted, RawCm, RawInv,
    RawWc, Sge, Wr, WrOp,
};
use krpc_rdma::provider::{Access, LocalFragment, ProviderError, Resources, WcStatus};
use krpc_rdma::wire::MAX_CHUNK_SEGMENTS;
use mbuf::PAGE_SIZE;
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

/// `poll_event` reads the CM channel at least once per this many calls.
const CM_POLL_EVERY: u32 = 64;
/// How long `release` waits for its invalidations before deallocating the windows.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// Counters of one queue pair (`maps` counts window binds or `ibv_reg_mr` calls,
/// `key_revokes` windows deallocated or MRs deregistered without a LOCAL_INV).
pub type VerbsStats = BindingStats;

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

fn ibv(s: &Sge) -> ibv_sge {
    ibv_sge {
        addr: s.addr,
        length: s.length,
        lkey: s.lkey,
    }
}

/// The [`Backend`] over libibverbs: one queue pair on an rdma_cm id, its CQ, its buffers and
/// its key objects.
///
/// # Invariants
/// Every non-null pointer is a live object owned by this value and destroyed once (in
/// [`Backend::shutdown`] or `Drop`, in dependency order). `mws[k]` / `mrs[k]` hold the
/// window / MR of key `k` (at most one of them is used, by [`RegMode`]). The scratch arrays
/// are only pointed into during one post call.
pub struct VerbsConn {
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
    /// A CQ notification was requested and its event not read yet.
    notify_armed: bool,
    /// The CM channel is non-blocking (set once established): only then is it read.
    cm_nonblocking: bool,
    polls_since_cm: u32,
    buf_base: *mut u8,
    buf_len: usize,
    buf_mr: *mut ibv_mr,
    buf_lkey: u32,
    mws: Vec<*mut ibv_mw>,
    mrs: Vec<*mut ibv_mr>,
    release_deadline: Option<Instant>,
    wrs: Vec<ibv_send_wr>,
    sges: Vec<ibv_sge>,
    rwrs: Vec<ibv_recv_wr>,
    rsges: Vec<ibv_sge>,
}

impl std::fmt::Debug for VerbsConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsConn")
            .field("res", &self.res)
            .finish_non_exhaustive()
    }
}

impl VerbsConn {
    fn keys(cfg: &VerbsConfig, dev: &Device) -> u32 {
        match cfg.reg_mode {
            RegMode::MemoryWindow => cfg.max_mws.min(dev.limits().max_mw).max(1),
            RegMode::MemoryRegion => cfg
                .resources
                .max_registrations
                .saturating_mul(MAX_CHUNK_SEGMENTS as u32)
                .max(1),
        }
    }

    /// Create the CQ, the queue pair on `id` and the buffers. `channel` / `id` are owned by
    /// the result from here on (also on error: they are destroyed).
    pub(crate) fn create(
        arena: &Arc<VerbsArena>,
        cfg: &VerbsConfig,
        channel: *mut rdma_event_channel,
        id: *mut rdma_cm_id,
    ) -> Result<(VerbsConn, u32), VerbsError> {
        let dev = Arc::clone(arena.device());
        let lim = dev.limits();
        let max_sge = cfg.resources.max_sge.min(lim.max_sge).max(1);
        let sq_depth = (cfg.resources.max_send_wr + cfg.internal_wrs).min(lim.max_qp_wr);
        let reported_sq = cfg.resources.max_send_wr.min(sq_depth);
        let rd = cfg
            .resources
            .max_rd_atomic
            .min(lim.max_qp_init_rd_atom)
            .min(lim.max_qp_rd_atom)
            .max(1);
        let res = Resources {
            send_bufs: cfg.resources.send_bufs,
            recv_bufs: cfg.resources.recv_bufs,
            send_buf_size: cfg.resources.send_buf_size,
            recv_buf_size: cfg.resources.recv_buf_size,
            max_send_wr: reported_sq,
            max_sge,
            max_registrations: cfg.resources.max_registrations,
            max_rd_atomic: rd,
        };
        let nkeys = VerbsConn::keys(cfg, &dev) as usize;
        let mut me = VerbsConn {
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
            notify_armed: false,
            cm_nonblocking: false,
            polls_since_cm: 0,
            buf_base: ptr::null_mut(),
            buf_len: 0,
            buf_mr: ptr::null_mut(),
            buf_lkey: 0,
            mws: Vec::new(),
            mrs: Vec::new(),
            release_deadline: None,
            wrs: Vec::with_capacity(sq_depth as usize),
            sges: Vec::with_capacity(sq_depth as usize * 2),
            rwrs: Vec::with_capacity(cfg.resources.recv_bufs as usize),
            rsges: Vec::with_capacity(cfg.resources.recv_bufs as usize),
        };
        match cfg.reg_mode {
            RegMode::MemoryWindow => me.mws = vec![ptr::null_mut(); nkeys],
            RegMode::MemoryRegion => me.mrs = vec![ptr::null_mut(); nkeys],
        }
        if cfg.resources.send_bufs == 0
            || cfg.resources.recv_bufs == 0
            || cfg.resources.max_registrations > u32::from(u16::MAX)
        {
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
        let cqe = i32::try_from(sq_depth + cfg.resources.recv_bufs + 16)
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
        attr.cap.max_recv_wr = cfg.resources.recv_bufs;
        attr.cap.max_send_sge = max_sge;
        attr.cap.max_recv_sge = 1;
        // SAFETY: `id`, the PD and `attr` are valid; on success the QP hangs off `id`.
        let rc = unsafe { rdma_create_qp(id, me.dev.pd(), &mut attr) };
        if rc != 0 {
            return Err(sys("rdma_create_qp"));
        }
        // SAFETY: `rdma_create_qp` succeeded, so `id->qp` is the new QP.
        me.qp = unsafe { (*id).qp };
        let send_len = cfg.resources.send_bufs as usize * cfg.resources.send_buf_size as usize;
        let recv_len = cfg.resources.recv_bufs as usize * cfg.resources.recv_buf_size as usize;
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
        Ok((me, sq_depth))
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

    /// Read and acknowledge every CQ event the channel holds (before destroying the CQ).
    fn drain_cq_events(&mut self) {
        while self.take_cq_event() {}
    }

    /// Read one CQ event from the (non-blocking) channel and acknowledge it: whether there
    /// was one. The notification it reports is used up, so the next [`Self::arm`] asks again.
    fn take_cq_event(&mut self) -> bool {
        let mut cq = ptr::null_mut();
        let mut ctx = ptr::null_mut();
        // SAFETY: `comp` is live and non-blocking; out-pointers are valid.
        let rc = unsafe { ibv_get_cq_event(self.comp, &mut cq, &mut ctx) };
        if rc != 0 {
            return false;
        }
        self.cq_events_unacked += 1;
        // SAFETY: acknowledges exactly the event read above (no system call: a counter
        // under the CQ's lock).
        unsafe { ibv_ack_cq_events(self.cq, self.cq_events_unacked) };
        self.cq_events_unacked = 0;
        self.notify_armed = false;
        true
    }

    /// Ask for a CQ event at the next completion (used by the wait helper), unless a request
    /// is still outstanding: then either no completion came since (the request stands) or
    /// its event is in the channel (whose fd `poll(2)` then finds readable at once). One
    /// system call per sleep instead of reading the channel dry and re-arming every time.
    fn arm(&mut self) {
        if self.notify_armed {
            return;
        }
        // SAFETY: `cq` is live.
        if unsafe { ibv_req_notify_cq(self.cq, 0) } == 0 {
            self.notify_armed = true;
        }
    }

    /// Post `self.wrs` (over `self.sges`) linked as one chain: how many were posted.
    fn post_chain(&mut self) -> Posted {
        let n = self.wrs.len();
        if n == 0 {
            return Posted { count: 0, ok: true };
        }
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
        let count = if rc == 0 {
            n
        } else if bad.is_null() {
            0
        } else {
            // SAFETY: `bad` points into the chain we passed.
            usize::try_from(unsafe { bad.offset_from(base) }).unwrap_or(0)
        };
        Posted { count, ok: rc == 0 }
    }

    /// Read CM events until one that matters (non-blocking).
    fn read_cm(&mut self) -> Option<RawCm> {
        if !self.cm_nonblocking {
            return None;
        }
        loop {
            let mut ev = ptr::null_mut();
            // SAFETY: `channel` is live and non-blocking; `ev` is a valid out-pointer.
            let rc = unsafe { rdma_get_cm_event(self.channel, &mut ev) };
            if rc != 0 || ev.is_null() {
                return None;
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
                | rdma_cm_event_type::RDMA_CM_EVENT_REJECTED => return Some(RawCm::Down),
                _ => {}
            }
        }
    }
}

impl Backend for VerbsConn {
    type Pages = VerbsArena;

    fn pages(&self) -> &VerbsArena {
        &self.arena
    }

    fn send_buf(&mut self, buf: u32) -> Option<&mut [u8]> {
        let addr = self.send_addr(buf)?;
        // SAFETY: `addr..addr+send_buf_size` lies inside the buffer mapping owned by `self`;
        // the borrow of `self` keeps it alive and exclusive. The NIC only reads send buffers
        // (while a Send of this buffer is outstanding, which the core does not overlap with
        // writing it).
        Some(unsafe {
            std::slice::from_raw_parts_mut(addr as *mut u8, self.res.send_buf_size as usize)
        })
    }

    fn recv_buf(&self, buf: u32) -> Option<&[u8]> {
        let addr = self.recv_addr(buf)?;
        // SAFETY: inside the mapping; the binding calls this only for a buffer that is not
        // posted, so the NIC does not write it while the shared borrow lasts (posting needs
        // `&mut`).
        Some(unsafe {
            std::slice::from_raw_parts(addr as *const u8, self.res.recv_buf_size as usize)
        })
    }

    fn send_sge(&self, buf: u32, len: u32) -> Option<Sge> {
        (len <= self.res.send_buf_size).then_some(Sge {
            addr: self.send_addr(buf)?,
            length: len,
            lkey: self.buf_lkey,
        })
    }

    fn recv_sge(&self, buf: u32) -> Option<Sge> {
        Some(Sge {
            addr: self.recv_addr(buf)?,
            length: self.res.recv_buf_size,
            lkey: self.buf_lkey,
        })
    }

    fn frag_sge(&self, f: &LocalFragment) -> Option<Sge> {
        let (addr, length) = self.arena.frag_addr(f.addr, f.offset, f.len)?;
        Some(Sge {
            addr,
            length,
            lkey: self.arena.lkey(),
        })
    }

    fn post_send(&mut self, wrs: &[Wr], sges: &[Sge]) -> Posted {
        self.wrs.clear();
        self.sges.clear();
        if self.wrs.try_reserve(wrs.len()).is_err() || self.sges.try_reserve(sges.len()).is_err() {
            return Posted {
                count: 0,
                ok: false,
            };
        }
        // The SGE vector is complete before any pointer into it is taken.
        self.sges.extend(sges.iter().map(ibv));
        let sge_base = self.sges.as_mut_ptr();
        for w in wrs {
            let (opcode, inv) = match w.op {
                WrOp::Send { invalidate: None } => (ibv_wr_opcode::IBV_WR_SEND, None),
                WrOp::Send {
                    invalidate: Some(r),
                } => (ibv_wr_opcode::IBV_WR_SEND_WITH_INV, Some(r)),
                WrOp::RdmaWrite { .. } => (ibv_wr_opcode::IBV_WR_RDMA_WRITE, None),
                WrOp::RdmaRead { .. } => (ibv_wr_opcode::IBV_WR_RDMA_READ, None),
                WrOp::LocalInv { rkey } => (ibv_wr_opcode::IBV_WR_LOCAL_INV, Some(rkey)),
            };
            let mut wr = blank_wr(w.wr_id, opcode, w.signaled);
            if let Some(rkey) = inv {
                wr.imm_data_invalidated_rkey_union = imm_data_invalidated_rkey_union_t {
                    invalidated_rkey: rkey,
                };
            }
            if let WrOp::RdmaWrite { remote_addr, rkey } | WrOp::RdmaRead { remote_addr, rkey } =
                w.op
            {
                wr.wr = wr_t {
                    rdma: rdma_t { remote_addr, rkey },
                };
            }
            let end = (w.sge_first as usize).saturating_add(w.num_sge as usize);
            if w.num_sge > 0 && end <= self.sges.len() {
                // SAFETY: `sge_first + num_sge <= sges.len()` (checked): the pointer stays
                // inside the vector, which does not move until the post returns.
                wr.sg_list = unsafe { sge_base.add(w.sge_first as usize) };
                wr.num_sge = w.num_sge as i32;
            }
            self.wrs.push(wr);
        }
        self.post_chain()
    }

    fn post_recv(&mut self, wr_ids: &[u64], sges: &[Sge]) -> Posted {
        self.rwrs.clear();
        self.rsges.clear();
        if wr_ids.len() != sges.len()
            || self.rwrs.try_reserve(wr_ids.len()).is_err()
            || self.rsges.try_reserve(sges.len()).is_err()
        {
            return Posted {
                count: 0,
                ok: false,
            };
        }
        let n = wr_ids.len();
        if n == 0 {
            return Posted { count: 0, ok: true };
        }
        self.rsges.extend(sges.iter().map(ibv));
        self.rwrs.extend(wr_ids.iter().map(|&wr_id| ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: ptr::null_mut(),
            num_sge: 1,
        }));
        let wbase = self.rwrs.as_mut_ptr();
        let sbase = self.rsges.as_mut_ptr();
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
        let count = if rc == 0 {
            n
        } else if bad.is_null() {
            0
        } else {
            // SAFETY: `bad` points into the chain.
            usize::try_from(unsafe { bad.offset_from(wbase) }).unwrap_or(0)
        };
        Posted { count, ok: rc == 0 }
    }

    fn poll_cq(&mut self, out: &mut [RawWc]) -> Option<usize> {
        // SAFETY: `ibv_wc` is plain data; zeroed entries are valid out-buffers.
        let mut wcs: [ibv_wc; 16] = unsafe { std::mem::zeroed() };
        let want = out.len().min(wcs.len()) as i32;
        // SAFETY: `cq` is live and `wcs` has room for `want` entries.
        let n = unsafe { ibv_poll_cq(self.cq, want, wcs.as_mut_ptr()) };
        let n = usize::try_from(n).ok()?;
        for (o, wc) in out.iter_mut().zip(wcs.iter()).take(n) {
            // SAFETY: the union is a plain `u32` either way; which meaning it has is decided
            // from the flags.
            let raw = unsafe { wc.imm_data_invalidated_rkey_union.invalidated_rkey };
            // rxe in Linux 6.1 fills the invalidated rkey but does not set IBV_WC_WITH_INV
            // (measured: flags 0x5). We never use immediate data, so a non-zero value without
            // IBV_WC_WITH_IMM may be a remote invalidation: the binding checks that it names
            // one of our valid windows. Getting this right matters: a LOCAL_INV of a window
            // the peer already invalidated crashes that kernel (NULL `mw->qp` in
            // `rxe_do_invalidate_mw`).
            let inv = if wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_INV.0 != 0 {
                RawInv::Flagged(raw)
            } else if wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 == 0 && raw != 0 {
                RawInv::Unflagged(raw)
            } else {
                RawInv::None
            };
            *o = RawWc {
                wr_id: wc.wr_id,
                status: status_of(wc.status),
                byte_len: wc.byte_len,
                inv,
            };
        }
        Some(n.min(out.len()))
    }

    fn poll_cm(&mut self, why: CmPoll) -> Option<RawCm> {
        // Reading the CM channel is a system call; while completions keep arriving the
        // connection is alive (and a lost one shows as flushed completions first), so it is
        // read when the CQ was last found empty, and at least every `CM_POLL_EVERY` calls.
        match why {
            CmPoll::Reap => None,
            CmPoll::Forced => self.read_cm(),
            CmPoll::Event { cq_idle } => {
                self.polls_since_cm = self.polls_since_cm.saturating_add(1);
                if !cq_idle && self.polls_since_cm < CM_POLL_EVERY {
                    return None;
                }
                self.polls_since_cm = 0;
                self.read_cm()
            }
        }
    }

    fn disconnect(&mut self) {
        if !self.id.is_null() {
            // SAFETY: `id` is live; rdma_disconnect moves the QP to the error state (flushing
            // everything outstanding) and notifies the peer. Errors are irrelevant here.
            unsafe { rdma_disconnect(self.id) };
        }
    }

    fn key_create(&mut self, key: u32) -> Result<u32, ProviderError> {
        if self.cfg.reg_mode == RegMode::MemoryRegion {
            return Ok(0);
        }
        let slot = self.mws.get_mut(key as usize).ok_or(ProviderError::BadId)?;
        if !slot.is_null() {
            // SAFETY: live window owned by this connection.
            return Ok(unsafe { (**slot).rkey });
        }
        // SAFETY: the PD is live; a failed allocation returns null or `None`.
        let mw = unsafe { ibv_alloc_mw(self.dev.pd(), ibv_mw_type::IBV_MW_TYPE_2) }
            .unwrap_or(ptr::null_mut());
        if mw.is_null() {
            return Err(ProviderError::NoMemory);
        }
        *slot = mw;
        // SAFETY: live window.
        Ok(unsafe { (*mw).rkey })
    }

    fn map(
        &mut self,
        key: u32,
        rkey: u32,
        run: &[Sge],
        access: Access,
        wr_id: u64,
    ) -> Result<Mapped, ProviderError> {
        // Contiguous rule: one merged SGE per run.
        let s = run.first().ok_or(ProviderError::BadFragments)?;
        let (addr, length) = (s.addr, s.length);
        let mut acc = 0u32;
        if access.contains(Access::REMOTE_READ) {
            acc |= ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        }
        if access.contains(Access::REMOTE_WRITE) {
            acc |= ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        }
        match self.cfg.reg_mode {
            RegMode::MemoryWindow => {
                let mw = self
                    .mws
                    .get(key as usize)
                    .copied()
                    .filter(|p| !p.is_null())
                    .ok_or(ProviderError::BadId)?;
                let new_rkey = inc_rkey(rkey);
                // SAFETY: live window owned by this connection. The library passes
                // `mw->rkey` to the kernel as the window's current rkey, which rxe checks;
                // for type 2 nothing updates it, so we do (as `ibv_bind_mw` does for type 1).
                unsafe { (*mw).rkey = rkey };
                let mut wr = blank_wr(wr_id, ibv_wr_opcode::IBV_WR_BIND_MW, false);
                wr.bind_mw_tso_union = bind_mw_tso_union_t {
                    bind_mw: bind_mw_t {
                        mw,
                        rkey: new_rkey,
                        bind_info: ibv_mw_bind_info {
                            mr: self.arena.mr(),
                            addr,
                            length: u64::from(length),
                            mw_access_flags: acc,
                        },
                    },
                };
                self.wrs.clear();
                if self.wrs.try_reserve(1).is_err() {
                    return Err(ProviderError::NoMemory);
                }
                self.wrs.push(wr);
                if !self.post_chain().ok {
                    return Err(ProviderError::Busy);
                }
                Ok(Mapped {
                    rkey: new_rkey,
                    iova: addr,
                    length,
                    consumed: 1,
                    posted: true,
                })
            }
            RegMode::MemoryRegion => {
                let acc = acc | ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
                let slot = self.mrs.get_mut(key as usize).ok_or(ProviderError::BadId)?;
                // SAFETY: `addr..addr+length` lies inside allocated arena pages (checked by
                // `frag_sge`), which stay mapped while the arena lives; the MR is deregistered
                // at invalidation, release or teardown.
                let mr = unsafe {
                    ibv_reg_mr(
                        self.dev.pd(),
                        addr as *mut libc::c_void,
                        length as usize,
                        acc as i32,
                    )
                };
                if mr.is_null() {
                    return Err(ProviderError::NoMemory);
                }
                *slot = mr;
                Ok(Mapped {
                    // SAFETY: live MR.
                    rkey: unsafe { (*mr).rkey },
                    iova: addr,
                    length,
                    consumed: 1,
                    posted: false,
                })
            }
        }
    }

    fn revoke(&mut self, key: u32) -> Option<u32> {
        if let Some(mw) = self.mws.get_mut(key as usize) {
            if !mw.is_null() {
                // SAFETY: live window, not used by any registration any more once revoked;
                // deallocated once (nulled after).
                unsafe { ibv_dealloc_mw(*mw) };
                *mw = ptr::null_mut();
            }
        }
        if let Some(mr) = self.mrs.get_mut(key as usize) {
            if !mr.is_null() {
                // SAFETY: a live per-run MR, deregistered once (nulled after).
                unsafe { ibv_dereg_mr(*mr) };
                *mr = ptr::null_mut();
            }
        }
        None
    }

    fn release_wait(&mut self, iteration: u32) -> bool {
        let now = Instant::now();
        if iteration == 0 {
            self.release_deadline = Some(now + RELEASE_TIMEOUT);
        }
        self.release_deadline.is_some_and(|d| now <= d)
    }

    fn shutdown(&mut self, connected: bool) {
        if connected {
            self.disconnect();
        }
        // Every key object left: deallocate windows, deregister MRs (revokes them all).
        for k in 0..self.mws.len().max(self.mrs.len()) {
            self.revoke(k as u32);
        }
        if !self.qp.is_null() {
            // SAFETY: the QP was created on `id` and nothing uses it any more.
            unsafe { rdma_destroy_qp(self.id) };
            self.qp = ptr::null_mut();
        }
    }
}

impl Drop for VerbsConn {
    fn drop(&mut self) {
        // Idempotent after the binding's shutdown (the QP is then already gone).
        if !self.qp.is_null() {
            self.shutdown(true);
        }
        if !self.cq.is_null() {
            if !self.comp.is_null() {
                self.drain_cq_events();
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

/// One RC queue pair over libibverbs (see the module documentation): the shared
/// [`Binding`] over a [`VerbsConn`]. Its counters, registrations and connection state are
/// the binding's (it dereferences to it).
#[derive(Debug)]
pub struct VerbsQp {
    inner: Binding<VerbsConn>,
}

// SAFETY: every raw pointer is owned by this queue pair and only used through `&mut self`
// (or `&self` for read-only buffer access), so moving the whole object to another thread is
// sound; libibverbs objects may be used from any thread.
unsafe impl Send for VerbsQp {}

krpc_rdma::forward_provider!(VerbsQp => inner as Binding<VerbsConn>);

impl VerbsQp {
    /// Create the queue pair on `id` (see [`VerbsConn`]); `channel` / `id` are owned by the
    /// result from here on (also on error: they are destroyed).
    pub(crate) fn create(
        arena: &Arc<VerbsArena>,
        cfg: &VerbsConfig,
        channel: *mut rdma_event_channel,
        id: *mut rdma_cm_id,
    ) -> Result<VerbsQp, VerbsError> {
        let (conn, sq_depth) = VerbsConn::create(arena, cfg, channel, id)?;
        let layout = Layout {
            res: conn.res,
            sq_depth,
            keys: VerbsConn::keys(cfg, &conn.dev),
            keys_present: false,
            rule: RunRule::Contiguous,
            invalidation: match cfg.reg_mode {
                RegMode::MemoryWindow => Invalidation::WorkRequest,
                RegMode::MemoryRegion => Invalidation::Synchronous,
            },
            map_uses_sq: cfg.reg_mode == RegMode::MemoryWindow,
        };
        let inner = Binding::new(conn, layout).map_err(|e| match e {
            ProviderError::NoMemory => VerbsError::Config("out of memory for the queue pair"),
            _ => VerbsError::Config("buffer counts or registrations out of range"),
        })?;
        Ok(VerbsQp { inner })
    }

    /// The connection is up; the peer's private data goes to the core's first `poll_event`.
    pub(crate) fn established(&mut self, private_data: &[u8]) {
        let b = self.inner.backend_mut();
        // SAFETY: `channel` is live; from now on CM events are read without blocking.
        unsafe { set_nonblocking((*b.channel).fd) };
        b.cm_nonblocking = true;
        self.inner.established(private_data);
    }

    /// Memory windows allocated now.
    pub fn memory_windows(&self) -> u32 {
        let b = self.inner.backend();
        b.mws.iter().filter(|p| !p.is_null()).count() as u32
    }

    /// The arena this queue pair's fragments come from.
    pub fn arena(&self) -> &Arc<VerbsArena> {
        &self.inner.backend().arena
    }

    /// The peer's address (from the connection manager), if known.
    pub fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        let id = self.inner.backend().id;
        if id.is_null() {
            return None;
        }
        // SAFETY: `id` is live for the life of `self`; the route's destination address is
        // plain data, filled by rdma_cm before the connection was established.
        let ss = unsafe { (*id).route.addr.dst_addr_union.dst_storage };
        super::cm::socket_addr_of(&ss)
    }

    pub(crate) fn fds(&self) -> (i32, i32) {
        let b = self.inner.backend();
        // SAFETY: both channels are live for the life of `self`.
        unsafe { ((*b.comp).fd, (*b.channel).fd) }
    }

    /// Ask for a CQ event at the next completion unless a request is outstanding (used by
    /// the wait helper).
    pub(crate) fn arm(&mut self) {
        self.inner.backend_mut().arm();
    }

    /// Read (and acknowledge) the CQ event `poll(2)` found on the completion channel.
    pub(crate) fn take_cq_event(&mut self) {
        self.inner.backend_mut().take_cq_event();
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
