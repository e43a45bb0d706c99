//! [`OfedQp`]: one RC connection over the OFED KPI implementing [`Provider`].
//!
//! # Resources
//!
//! * Send and receive buffers are one kernel page each ([`PAGE_SIZE`] bytes), addressed by
//!   physical address with the PD's `local_dma_lkey` (the C side fills the lkey). Receives are
//!   posted with `wr_id = RECV_BIT | buffer`.
//! * The queue pair, its CQ, its PD and a pool of FRWR MRs (`ib_alloc_mr(pd,
//!   IB_MR_TYPE_MEM_REG, max_pages_per_mr)`) are created by the C side when rdma_cm has
//!   resolved the route (client) or delivered the connect request (server).
//!
//! # Send-queue accounting
//!
//! Every posted work request — the core's and the provider's own (REG_MR, LOCAL_INV) — gets a
//! sequence number as its hardware `wr_id` and an entry in a FIFO. A completion for sequence
//! `s` retires every entry up to `s` (an RC send queue completes in order). A chain is posted
//! only if the FIFO has room for all of it, so `ib_post_send` never overflows; the hardware
//! queue is [`OfedConfig::internal_wrs`] deeper than what the core is told.
//!
//! # Registrations (FRWR)
//!
//! `register` merges adjacent fragments of one page, splits the fragments where an FRWR
//! cannot continue (a fragment not starting at offset 0 after the first, or a previous one
//! not ending at the page end, or more than `max_pages_per_mr` pages), and registers each run
//! with one MR of the pool: the C side DMA-maps the pages into a scatterlist, bumps the key
//! byte (`ib_update_fast_reg_key(mr, ib_inc_rkey(rkey))`), calls `ib_map_mr_sg` and posts an
//! unsignaled `IB_WR_REG_MR` before `register` returns — so the registration precedes every
//! later work request. If `ib_map_mr_sg` takes only a prefix, the rest gets another MR. One
//! segment per MR (usually one per registration). `SendOp::LocalInv` becomes one
//! `IB_WR_LOCAL_INV` per still-valid MR, the last signaled with the core's id; if the peer's
//! Send With Invalidate already revoked them all, the completion is synthesized. `release`
//! of a still-valid registration posts the invalidations and polls for them (a bounded number
//! of polls: the kernel has no clock here); when the connection is broken, or the polls run
//! out, it deregisters and reallocates the MRs instead (`krpc_ofed_mr_reset`), which kills
//! the rkeys. Each registration holds one page reference on every page it covers.
//!
//! # Errors
//!
//! The first error completion (including a flush) breaks the connection: `rdma_disconnect`
//! (QP to error, everything outstanding flushes, the peer is told) and one
//! [`CmEvent::Disconnected`]. Later posts fail with [`ProviderError::NotConnected`].

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::ffi::c_void;
use core::ptr;

use krpc_rdma::provider::{
    Access, CmEvent, Completion, LocalFragment, Provider, ProviderError, RegId, RegSegment,
    Registration, Resources, SendOp, SendWr, WcKind, WcStatus,
};
use krpc_rdma::wire::MAX_CHUNK_SEGMENTS;
use mbuf::{PageProvider, PAGE_SIZE};

use crate::ffi::{self, KrpcCmEvent, KrpcConn, KrpcListener, KrpcRegOut, KrpcSge, KrpcWc, KrpcWr};
use crate::pages::KernelPages;

/// Receive `wr_id`s carry this bit; send-queue `wr_id`s are sequence numbers below it.
const RECV_BIT: u64 = 1 << 63;
/// `EAGAIN` (same value on FreeBSD and Linux).
const EAGAIN: i32 = 35;
/// Linux's `EAGAIN`, for the userspace emulation.
const EAGAIN_LINUX: i32 = 11;

/// Resources and parameters of one [`OfedQp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OfedConfig {
    /// Send buffers (one page each).
    pub send_bufs: u32,
    /// Receive buffers (one page each).
    pub recv_bufs: u32,
    /// Send-queue depth reported to the core.
    pub max_send_wr: u32,
    /// Extra send-queue slots for REG_MR and LOCAL_INV.
    pub internal_wrs: u32,
    /// SGEs per work request.
    pub max_sge: u32,
    /// Registrations live at once.
    pub max_registrations: u32,
    /// FRWR MRs in the pool (a registration uses one per segment).
    pub num_mrs: u32,
    /// Pages one MR maps at most.
    pub max_pages_per_mr: u32,
    /// Outstanding RDMA Reads as initiator and responder.
    pub max_rd_atomic: u32,
    /// Address and route resolution timeout.
    pub timeout_ms: u32,
    /// CQ polls `release` spends waiting for its invalidations before it deregisters.
    pub release_polls: u32,
}

impl Default for OfedConfig {
    /// 64 + 64 buffers, 256 + 128 send-queue entries, 16 SGEs, 256 registrations, 512 MRs of
    /// 257 pages (1 MiB at any offset), 16 Reads, 5 s resolution timeout.
    fn default() -> Self {
        OfedConfig {
            send_bufs: 64,
            recv_bufs: 64,
            max_send_wr: 256,
            internal_wrs: 128,
            max_sge: 16,
            max_registrations: 256,
            num_mrs: 512,
            max_pages_per_mr: 257,
            max_rd_atomic: 16,
            timeout_ms: 5000,
            release_polls: 1_000_000,
        }
    }
}

impl OfedConfig {
    /// The resources a queue pair with this configuration reports.
    pub fn resources(&self) -> Resources {
        Resources {
            send_bufs: self.send_bufs,
            recv_bufs: self.recv_bufs,
            send_buf_size: PAGE_SIZE as u32,
            recv_buf_size: PAGE_SIZE as u32,
            max_send_wr: self.max_send_wr,
            max_sge: self.max_sge,
            max_registrations: self.max_registrations,
            max_rd_atomic: self.max_rd_atomic,
        }
    }

    fn params(&self) -> ffi::KrpcParams {
        ffi::KrpcParams {
            max_send_wr: self.max_send_wr + self.internal_wrs,
            max_recv_wr: self.recv_bufs,
            max_sge: self.max_sge,
            num_mrs: self.num_mrs,
            max_pages_per_mr: self.max_pages_per_mr,
            rd_atomic: self.max_rd_atomic,
            timeout_ms: self.timeout_ms,
            reserved: 0,
        }
    }
}

/// Why setting up a connection failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OfedError {
    /// A C wrapper failed with this errno.
    Sys {
        /// The call.
        what: &'static str,
        /// errno.
        errno: i32,
    },
    /// Out of memory (pages or heap).
    NoMemory,
    /// A configuration value out of range.
    Config(&'static str),
}

impl core::fmt::Display for OfedError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            OfedError::Sys { what, errno } => write!(f, "{what} failed: errno {errno}"),
            OfedError::NoMemory => f.write_str("out of memory"),
            OfedError::Config(m) => write!(f, "configuration: {m}"),
        }
    }
}

/// Counters of one queue pair.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OfedStats {
    /// Work requests posted on the send queue (the core's and internal).
    pub send_wrs: u64,
    /// Receives posted.
    pub recv_wrs: u64,
    /// REG_MR work requests posted.
    pub reg_mrs: u64,
    /// LOCAL_INV work requests posted.
    pub local_invs: u64,
    /// MRs revoked by the peer's Send With Invalidate.
    pub remote_invs: u64,
    /// Synchronous revocations in `release` (posted LOCAL_INV and polled).
    pub sync_revokes: u64,
    /// MRs deregistered and reallocated because they could not be invalidated.
    pub mr_resets: u64,
    /// `post_send` refusals for lack of send-queue room.
    pub busy: u64,
    /// Error completions other than flushes.
    pub errors: u64,
    /// Flushed completions.
    pub flushed: u64,
}

#[derive(Debug, Clone, Copy)]
enum SqKind {
    User(u64),
    Reg,
    Inv { mr: u32, user: Option<u64> },
}

#[derive(Debug, Clone, Copy)]
struct SqEntry {
    seq: u64,
    kind: SqKind,
}

#[derive(Debug, Clone, Copy, Default)]
struct Mr {
    rkey: u32,
    valid: bool,
    inv_pending: bool,
    busy: bool,
}

#[derive(Debug)]
struct Reg {
    gen: u16,
    mrs: heapless::Vec<u32, MAX_CHUNK_SEGMENTS>,
    pages: Vec<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Connecting,
    Up,
    Broken,
}

/// One RC connection over the OFED KPI (see the module documentation).
pub struct OfedQp {
    conn: *mut KrpcConn,
    pages: KernelPages,
    cfg: OfedConfig,
    res: Resources,
    send_pages: Vec<u64>,
    recv_pages: Vec<u64>,
    recv_posted: Vec<bool>,
    sq_depth: usize,
    sq: VecDeque<SqEntry>,
    next_seq: u64,
    mrs: Vec<Mr>,
    free_mrs: Vec<u32>,
    regs: Vec<Option<Reg>>,
    reg_gen: u16,
    live_regs: u32,
    stash: VecDeque<Completion>,
    events: VecDeque<CmEvent>,
    disconnect_reported: bool,
    state: State,
    wrs: Vec<KrpcWr>,
    sges: Vec<KrpcSge>,
    kinds: Vec<SqKind>,
    stats: OfedStats,
}

impl core::fmt::Debug for OfedQp {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OfedQp")
            .field("state", &self.state)
            .field("res", &self.res)
            .field("sq_outstanding", &self.sq.len())
            .field("live_regs", &self.live_regs)
            .finish_non_exhaustive()
    }
}

// SAFETY: the connection handle is owned by this queue pair and only used through `&mut self`
// (or `&self` for read-only buffer access); the C side serializes its own state with a mutex,
// so the object may move between threads.
unsafe impl Send for OfedQp {}

fn status_of(s: u32) -> WcStatus {
    match s {
        ffi::wc::SUCCESS => WcStatus::Success,
        ffi::wc::FLUSHED => WcStatus::Flushed,
        ffi::wc::REM_ACCESS => WcStatus::RemoteAccess,
        ffi::wc::RNR_RETRY => WcStatus::RnrRetryExceeded,
        ffi::wc::LOCAL => WcStatus::LocalError,
        ffi::wc::RETRY => WcStatus::TransportRetryExceeded,
        _ => WcStatus::Other,
    }
}

fn try_vec<T: Clone>(n: usize, v: T) -> Result<Vec<T>, OfedError> {
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(|_| OfedError::NoMemory)?;
    out.resize(n, v);
    Ok(out)
}

fn try_deque<T>(n: usize) -> Result<VecDeque<T>, OfedError> {
    let mut out = VecDeque::new();
    out.try_reserve_exact(n).map_err(|_| OfedError::NoMemory)?;
    Ok(out)
}

/// A fragment as an SGE (page address + offset), or `None` if it is not a valid in-page
/// fragment.
fn frag_sge(f: &LocalFragment) -> Option<KrpcSge> {
    if f.len == 0 || f.offset.checked_add(f.len)? > PAGE_SIZE || f.addr % PAGE_SIZE as u64 != 0 {
        return None;
    }
    Some(KrpcSge {
        addr: f.addr + f.offset as u64,
        length: u32::try_from(f.len).ok()?,
        reserved: 0,
    })
}

/// Merge fragments that continue each other inside one page, then split into FRWR runs:
/// `(start, end)` index ranges of the merged list.
fn frwr_runs(
    frags: &[LocalFragment],
    max_pages: usize,
    merged: &mut Vec<KrpcSge>,
) -> Result<heapless::Vec<(usize, usize), MAX_CHUNK_SEGMENTS>, ProviderError> {
    merged.clear();
    merged
        .try_reserve(frags.len())
        .map_err(|_| ProviderError::NoMemory)?;
    for f in frags {
        let s = frag_sge(f).ok_or(ProviderError::BadFragments)?;
        match merged.last_mut() {
            Some(last)
                if last.addr + u64::from(last.length) == s.addr
                    && (last.addr & !(PAGE_SIZE as u64 - 1)) == f.addr =>
            {
                last.length += s.length;
            }
            _ => merged.push(s),
        }
    }
    let mut runs = heapless::Vec::new();
    let mut start = 0usize;
    for i in 1..=merged.len() {
        let cut = match (merged.get(i - 1), merged.get(i)) {
            (Some(p), Some(c)) => {
                let prev_end = (p.addr % PAGE_SIZE as u64) + u64::from(p.length);
                c.addr % PAGE_SIZE as u64 != 0
                    || prev_end != PAGE_SIZE as u64
                    || i - start >= max_pages.max(1)
            }
            _ => true,
        };
        if cut {
            runs.push((start, i))
                .map_err(|_| ProviderError::BadFragments)?;
            start = i;
        }
    }
    if runs.is_empty() {
        return Err(ProviderError::BadFragments);
    }
    Ok(runs)
}

impl OfedQp {
    fn new(cfg: &OfedConfig) -> Result<OfedQp, OfedError> {
        if cfg.send_bufs == 0
            || cfg.recv_bufs == 0
            || cfg.max_registrations == 0
            || cfg.max_registrations > u32::from(u16::MAX)
            || cfg.num_mrs == 0
            || cfg.max_sge == 0
        {
            return Err(OfedError::Config(
                "buffer, registration or MR counts out of range",
            ));
        }
        let sq_depth = (cfg.max_send_wr + cfg.internal_wrs) as usize;
        let mut me = OfedQp {
            conn: ptr::null_mut(),
            pages: KernelPages::new(),
            cfg: *cfg,
            res: cfg.resources(),
            send_pages: Vec::new(),
            recv_pages: Vec::new(),
            recv_posted: try_vec(cfg.recv_bufs as usize, false)?,
            sq_depth,
            sq: try_deque(sq_depth)?,
            next_seq: 0,
            mrs: try_vec(cfg.num_mrs as usize, Mr::default())?,
            free_mrs: Vec::new(),
            regs: Vec::new(),
            reg_gen: 0,
            live_regs: 0,
            stash: try_deque(sq_depth + cfg.recv_bufs as usize)?,
            events: try_deque(4)?,
            disconnect_reported: false,
            state: State::Connecting,
            wrs: Vec::new(),
            sges: Vec::new(),
            kinds: Vec::new(),
            stats: OfedStats::default(),
        };
        me.free_mrs
            .try_reserve_exact(cfg.num_mrs as usize)
            .map_err(|_| OfedError::NoMemory)?;
        me.free_mrs.extend((0..cfg.num_mrs).rev());
        me.regs
            .try_reserve_exact(cfg.max_registrations as usize)
            .map_err(|_| OfedError::NoMemory)?;
        me.regs.extend((0..cfg.max_registrations).map(|_| None));
        me.wrs
            .try_reserve(sq_depth)
            .map_err(|_| OfedError::NoMemory)?;
        me.kinds
            .try_reserve(sq_depth)
            .map_err(|_| OfedError::NoMemory)?;
        me.sges
            .try_reserve(sq_depth * 2)
            .map_err(|_| OfedError::NoMemory)?;
        for _ in 0..cfg.send_bufs {
            let p = me.pages.alloc_page().map_err(|_| OfedError::NoMemory)?;
            me.send_pages.push(p);
        }
        for _ in 0..cfg.recv_bufs {
            let p = me.pages.alloc_page().map_err(|_| OfedError::NoMemory)?;
            me.recv_pages.push(p);
        }
        Ok(me)
    }

    /// Start an active connection to `dst` (asynchronous: the first
    /// [`poll_event`](Provider::poll_event) that returns something is `Established` with the
    /// server's private data, or `Disconnected`).
    ///
    /// # Safety
    /// `vnet` must be the `struct vnet *` to connect in (or NULL where the KPI accepts it:
    /// kernels without VIMAGE, and the emulation; `rdma_create_id` refuses NULL with VIMAGE),
    /// and `dst` must point to a valid `struct sockaddr` of the platform for the call.
    ///
    /// # Errors
    /// Allocation failure, or the failing C call.
    pub unsafe fn connect(
        vnet: *mut c_void,
        dst: *const c_void,
        cfg: &OfedConfig,
        private_data: &[u8],
    ) -> Result<OfedQp, OfedError> {
        if private_data.len() > 56 {
            return Err(OfedError::Config("private data longer than 56 bytes"));
        }
        let mut me = OfedQp::new(cfg)?;
        let params = cfg.params();
        let mut conn = ptr::null_mut();
        // SAFETY: the caller vouches for `vnet` and `dst`; the other pointers are valid for
        // the call (the C side copies the private data).
        let rc = unsafe {
            ffi::krpc_ofed_connect(
                vnet,
                dst,
                &params,
                private_data.as_ptr(),
                private_data.len() as u32,
                &mut conn,
            )
        };
        if rc != 0 || conn.is_null() {
            return Err(OfedError::Sys {
                what: "krpc_ofed_connect",
                errno: rc,
            });
        }
        me.conn = conn;
        Ok(me)
    }

    /// Accept the pending connection this queue pair came from
    /// ([`OfedListener::next_request`]), replying with `private_data`. Post receives first.
    ///
    /// # Errors
    /// The failing C call.
    pub fn accept(&mut self, private_data: &[u8]) -> Result<(), OfedError> {
        if private_data.len() > 56 {
            return Err(OfedError::Config("private data longer than 56 bytes"));
        }
        // SAFETY: live connection; the C side copies the private data.
        let rc = unsafe {
            ffi::krpc_ofed_accept(self.conn, private_data.as_ptr(), private_data.len() as u32)
        };
        if rc != 0 {
            return Err(OfedError::Sys {
                what: "krpc_ofed_accept",
                errno: rc,
            });
        }
        Ok(())
    }

    /// Register `f(arg)` to be called from the CQ's completion handler (interrupt or
    /// taskqueue context in the kernel: it should only wake the thread that polls).
    ///
    /// # Safety
    /// `f` must be callable with `arg` from any context until the queue pair is dropped.
    pub unsafe fn set_upcall(&mut self, f: extern "C" fn(*mut c_void), arg: *mut c_void) {
        // SAFETY: live connection; the caller vouches for `f`/`arg`.
        unsafe { ffi::krpc_ofed_set_upcall(self.conn, f, arg) };
    }

    /// Arm the CQ notification (after a poll found nothing).
    pub fn arm(&mut self) {
        // SAFETY: live connection.
        unsafe { ffi::krpc_ofed_req_notify(self.conn) };
    }

    /// Counters.
    pub fn stats(&self) -> OfedStats {
        self.stats
    }

    /// Registrations not yet released.
    pub fn live_registrations(&self) -> u32 {
        self.live_regs
    }

    /// Send-queue work requests not yet retired.
    pub fn sq_outstanding(&self) -> usize {
        self.sq.len()
    }

    /// Whether the connection is up.
    pub fn is_connected(&self) -> bool {
        self.state == State::Up
    }

    /// The page provider the buffers and registrations use.
    pub fn pages(&self) -> &KernelPages {
        &self.pages
    }

    /// Disconnect (the peer gets `Disconnected`; our outstanding work is flushed).
    pub fn disconnect(&mut self) {
        self.break_connection();
    }

    /// Whether completions or events are waiting (already reaped).
    pub fn has_work(&self) -> bool {
        !self.stash.is_empty() || !self.events.is_empty()
    }

    /// Move every available completion into the stash and read pending CM events; returns
    /// how many completions were found.
    pub fn reap(&mut self) -> usize {
        self.pump_cm();
        let mut total = 0;
        loop {
            let mut wcs = [KrpcWc::default(); 16];
            // SAFETY: live connection; `wcs` has room for 16 entries.
            let n = unsafe { ffi::krpc_ofed_poll_cq(self.conn, wcs.as_mut_ptr(), 16) };
            if n <= 0 {
                if n < 0 && self.state == State::Up {
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

    fn pump_cm(&mut self) {
        loop {
            let mut ev = KrpcCmEvent::default();
            // SAFETY: live connection; `ev` is a valid out-pointer.
            if unsafe { ffi::krpc_ofed_poll_event(self.conn, &mut ev) } != 1 {
                return;
            }
            match ev.kind {
                ffi::cm::ESTABLISHED => {
                    if self.state == State::Connecting {
                        self.state = State::Up;
                        let n = (ev.private_data_len as usize).min(56);
                        let pd = heapless::Vec::from_slice(ev.private_data.get(..n).unwrap_or(&[]))
                            .unwrap_or_default();
                        self.events
                            .push_back(CmEvent::Established { private_data: pd });
                    }
                }
                _ => self.break_connection(),
            }
        }
    }

    fn break_connection(&mut self) {
        if self.state != State::Broken {
            self.state = State::Broken;
            // SAFETY: live connection; moves the QP to the error state (everything
            // outstanding flushes) and tells the peer. Errors are irrelevant here.
            unsafe { ffi::krpc_ofed_disconnect(self.conn) };
        }
        if !self.disconnect_reported {
            self.disconnect_reported = true;
            self.events.push_back(CmEvent::Disconnected);
        }
    }

    fn on_wc(&mut self, wc: &KrpcWc) {
        let status = status_of(wc.status);
        match status {
            WcStatus::Success => {}
            WcStatus::Flushed => self.stats.flushed += 1,
            _ => self.stats.errors += 1,
        }
        // Receives are told by their wr_id (the opcode of an error completion is undefined).
        if wc.wr_id & RECV_BIT != 0 {
            let buf = (wc.wr_id & !RECV_BIT) as u32;
            if let Some(p) = self.recv_posted.get_mut(buf as usize) {
                *p = false;
            }
            let mut invalidated = None;
            if status == WcStatus::Success && wc.flags & ffi::wc::F_INV != 0 {
                invalidated = Some(wc.invalidated_rkey);
                self.remote_invalidated(wc.invalidated_rkey);
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

    fn retire(&mut self, e: SqEntry, status: WcStatus, reported: bool) {
        match e.kind {
            SqKind::User(id) => {
                if reported {
                    self.push_send_completion(id, status);
                }
            }
            SqKind::Reg => {}
            SqKind::Inv { mr, user } => {
                if let Some(m) = self.mrs.get_mut(mr as usize) {
                    m.inv_pending = false;
                    if status == WcStatus::Success {
                        m.valid = false;
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
        if let Some(m) = self
            .mrs
            .iter_mut()
            .find(|m| m.busy && m.valid && m.rkey == rkey)
        {
            m.valid = false;
            self.stats.remote_invs += 1;
        }
    }

    fn seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq = (self.next_seq + 1) & !RECV_BIT;
        s
    }

    fn page_addr(pages: &[u64], buf: u32) -> Option<u64> {
        pages.get(buf as usize).copied()
    }

    fn reg_slot(&self, id: RegId) -> Option<usize> {
        let slot = (id.0 & 0xffff) as usize;
        let gen = (id.0 >> 16) as u16;
        match self.regs.get(slot) {
            Some(Some(r)) if r.gen == gen => Some(slot),
            _ => None,
        }
    }

    /// MRs of a registration that still need a LOCAL_INV.
    fn mrs_to_invalidate(&self, slot: usize) -> heapless::Vec<u32, MAX_CHUNK_SEGMENTS> {
        let mut out = heapless::Vec::new();
        if let Some(Some(reg)) = self.regs.get(slot) {
            for &i in &reg.mrs {
                if self
                    .mrs
                    .get(i as usize)
                    .is_some_and(|m| m.valid && !m.inv_pending)
                {
                    let _ = out.push(i);
                }
            }
        }
        out
    }

    /// Append LOCAL_INVs of `mrs` to the chain being built; the last carries `user` and is
    /// signaled.
    fn plan_invs(&mut self, mrs: &[u32], user: Option<u64>) {
        let n = mrs.len();
        for (k, &i) in mrs.iter().enumerate() {
            let last = k + 1 == n;
            let rkey = self.mrs.get(i as usize).map_or(0, |m| m.rkey);
            let seq = self.seq();
            self.wrs.push(KrpcWr {
                wr_id: seq,
                opcode: ffi::OP_LOCAL_INV,
                flags: if last { ffi::WR_SIGNALED } else { 0 },
                rkey,
                ..KrpcWr::default()
            });
            self.kinds.push(SqKind::Inv {
                mr: i,
                user: if last { user } else { None },
            });
        }
    }

    /// Post the chain in `self.wrs` / `self.sges` / `self.kinds`.
    fn post_planned(&mut self) -> Result<(), ProviderError> {
        let n = self.wrs.len();
        if n == 0 {
            return Ok(());
        }
        let mut posted = 0u32;
        // SAFETY: live connection; the arrays are valid for the call (the C side translates
        // them into ib_send_wr/ib_sge chains on its stack or heap before posting).
        let rc = unsafe {
            ffi::krpc_ofed_post_send(
                self.conn,
                self.wrs.as_ptr(),
                n as u32,
                self.sges.as_ptr(),
                self.sges.len() as u32,
                &mut posted,
            )
        };
        let posted = (posted as usize).min(n);
        for (w, k) in self.wrs.iter().zip(self.kinds.iter()).take(posted) {
            self.sq.push_back(SqEntry {
                seq: w.wr_id,
                kind: *k,
            });
        }
        self.stats.send_wrs += posted as u64;
        if rc != 0 {
            if posted > 0 {
                self.break_connection();
                return Err(ProviderError::NotConnected);
            }
            return Err(ProviderError::Busy);
        }
        Ok(())
    }

    fn clear_plan(&mut self) {
        self.wrs.clear();
        self.sges.clear();
        self.kinds.clear();
    }

    /// Revoke an MR for good (deregister + reallocate): its rkey dies.
    fn reset_mr(&mut self, i: u32) {
        let mut rkey = 0;
        // SAFETY: live connection, `i` is an MR index of the pool.
        let rc = unsafe { ffi::krpc_ofed_mr_reset(self.conn, i, &mut rkey) };
        if let Some(m) = self.mrs.get_mut(i as usize) {
            m.valid = false;
            m.inv_pending = false;
            if rc == 0 {
                m.rkey = rkey;
            }
        }
        self.stats.mr_resets += 1;
    }

    fn put_mr(&mut self, i: u32) {
        if self
            .mrs
            .get(i as usize)
            .is_some_and(|m| m.valid || m.inv_pending)
        {
            self.reset_mr(i);
        }
        // SAFETY: live connection; the MR is invalid, so its pages may be DMA-unmapped.
        unsafe { ffi::krpc_ofed_mr_unmap(self.conn, i) };
        if let Some(m) = self.mrs.get_mut(i as usize) {
            m.busy = false;
        }
        self.free_mrs.push(i);
    }
}

impl Provider for OfedQp {
    fn resources(&self) -> Resources {
        self.res
    }

    fn send_buf(&mut self, buf: u32) -> Result<&mut [u8], ProviderError> {
        let pa = Self::page_addr(&self.send_pages, buf).ok_or(ProviderError::BadId)?;
        // SAFETY: a lookup of our own page.
        let p = unsafe { ffi::krpc_ofed_page_kva(pa) };
        if p.is_null() {
            return Err(ProviderError::BadId);
        }
        // SAFETY: `p` maps the whole wired page owned by this queue pair; the borrow of
        // `self` keeps it alive and exclusive. The NIC only reads send buffers, and the core
        // does not write a buffer while a Send of it is outstanding.
        Ok(unsafe { core::slice::from_raw_parts_mut(p, PAGE_SIZE) })
    }

    fn recv_buf(&self, buf: u32) -> Result<&[u8], ProviderError> {
        let pa = Self::page_addr(&self.recv_pages, buf).ok_or(ProviderError::BadId)?;
        if self.recv_posted.get(buf as usize).copied().unwrap_or(true) {
            return Err(ProviderError::BadId);
        }
        // SAFETY: a lookup of our own page.
        let p = unsafe { ffi::krpc_ofed_page_kva(pa) };
        if p.is_null() {
            return Err(ProviderError::BadId);
        }
        // SAFETY: the page is ours and not posted, so the NIC does not write it while the
        // shared borrow of `self` lasts (posting needs `&mut self`).
        Ok(unsafe { core::slice::from_raw_parts(p, PAGE_SIZE) })
    }

    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), ProviderError> {
        if self.state != State::Up {
            return Err(ProviderError::NotConnected);
        }
        let max_sge = self.res.max_sge as usize;
        let mut hw = 0usize;
        let mut nsge = 0usize;
        for w in wrs {
            match w.op {
                SendOp::Send { buf, len, .. } => {
                    if buf >= self.res.send_bufs || len as usize > PAGE_SIZE {
                        return Err(ProviderError::BadId);
                    }
                    hw += 1;
                    nsge += 1;
                }
                SendOp::SendGather {
                    buf, len, pages, ..
                } => {
                    if buf >= self.res.send_bufs || len as usize > PAGE_SIZE {
                        return Err(ProviderError::BadId);
                    }
                    let n = usize::from(len > 0) + pages.len();
                    if n > max_sge {
                        return Err(ProviderError::BadFragments);
                    }
                    for f in pages {
                        frag_sge(f).ok_or(ProviderError::BadFragments)?;
                    }
                    hw += 1;
                    nsge += n;
                }
                SendOp::RdmaRead { local, .. } | SendOp::RdmaWrite { local, .. } => {
                    if local.is_empty() || local.len() > max_sge {
                        return Err(ProviderError::BadFragments);
                    }
                    for f in local {
                        frag_sge(f).ok_or(ProviderError::BadFragments)?;
                    }
                    hw += 1;
                    nsge += local.len();
                }
                SendOp::LocalInv { reg } => {
                    let slot = self.reg_slot(reg).ok_or(ProviderError::BadId)?;
                    hw += self.mrs_to_invalidate(slot).len();
                }
            }
        }
        if self.sq.len() + hw > self.sq_depth {
            self.stats.busy += 1;
            return Err(ProviderError::Busy);
        }
        self.clear_plan();
        self.wrs
            .try_reserve(hw)
            .map_err(|_| ProviderError::NoMemory)?;
        self.kinds
            .try_reserve(hw)
            .map_err(|_| ProviderError::NoMemory)?;
        self.sges
            .try_reserve(nsge)
            .map_err(|_| ProviderError::NoMemory)?;
        let mut synth: heapless::Vec<u64, 64> = heapless::Vec::new();
        let mut pending: Vec<u32> = Vec::new();
        for w in wrs {
            let flags = if w.signaled { ffi::WR_SIGNALED } else { 0 };
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
                    let first = self.sges.len() as u32;
                    if len > 0 {
                        let pa =
                            Self::page_addr(&self.send_pages, buf).ok_or(ProviderError::BadId)?;
                        self.sges.push(KrpcSge {
                            addr: pa,
                            length: len,
                            reserved: 0,
                        });
                    }
                    if let SendOp::SendGather { pages, .. } = w.op {
                        for f in pages {
                            self.sges
                                .push(frag_sge(f).ok_or(ProviderError::BadFragments)?);
                        }
                    }
                    let seq = self.seq();
                    self.wrs.push(KrpcWr {
                        wr_id: seq,
                        opcode: if invalidate.is_some() {
                            ffi::OP_SEND_INV
                        } else {
                            ffi::OP_SEND
                        },
                        flags,
                        rkey: invalidate.unwrap_or(0),
                        sge_first: first,
                        num_sge: self.sges.len() as u32 - first,
                        ..KrpcWr::default()
                    });
                    self.kinds.push(SqKind::User(w.wr_id));
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
                    let first = self.sges.len() as u32;
                    for f in local {
                        self.sges
                            .push(frag_sge(f).ok_or(ProviderError::BadFragments)?);
                    }
                    let seq = self.seq();
                    self.wrs.push(KrpcWr {
                        wr_id: seq,
                        remote_addr: offset,
                        opcode: if matches!(w.op, SendOp::RdmaRead { .. }) {
                            ffi::OP_RDMA_READ
                        } else {
                            ffi::OP_RDMA_WRITE
                        },
                        flags,
                        rkey: handle,
                        sge_first: first,
                        num_sge: local.len() as u32,
                        reserved: 0,
                    });
                    self.kinds.push(SqKind::User(w.wr_id));
                }
                SendOp::LocalInv { reg } => {
                    let slot = self.reg_slot(reg).ok_or(ProviderError::BadId)?;
                    let mrs = self.mrs_to_invalidate(slot);
                    if mrs.is_empty() {
                        synth.push(w.wr_id).map_err(|_| ProviderError::Busy)?;
                    } else {
                        self.plan_invs(&mrs, Some(w.wr_id));
                        pending
                            .try_reserve(mrs.len())
                            .map_err(|_| ProviderError::NoMemory)?;
                        pending.extend_from_slice(&mrs);
                    }
                }
            }
        }
        let r = self.post_planned();
        self.clear_plan();
        r?;
        for i in pending {
            if let Some(m) = self.mrs.get_mut(i as usize) {
                m.inv_pending = true;
            }
            self.stats.local_invs += 1;
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
        if bufs.is_empty() {
            return Ok(());
        }
        let mut ids: Vec<u64> = Vec::new();
        ids.try_reserve_exact(bufs.len())
            .map_err(|_| ProviderError::NoMemory)?;
        let mut sges: Vec<KrpcSge> = Vec::new();
        sges.try_reserve_exact(bufs.len())
            .map_err(|_| ProviderError::NoMemory)?;
        for &b in bufs {
            ids.push(RECV_BIT | u64::from(b));
            sges.push(KrpcSge {
                addr: Self::page_addr(&self.recv_pages, b).ok_or(ProviderError::BadId)?,
                length: PAGE_SIZE as u32,
                reserved: 0,
            });
        }
        let mut posted = 0u32;
        // SAFETY: live connection; both arrays hold `bufs.len()` entries.
        let rc = unsafe {
            ffi::krpc_ofed_post_recv(
                self.conn,
                ids.as_ptr(),
                sges.as_ptr(),
                bufs.len() as u32,
                &mut posted,
            )
        };
        let posted = (posted as usize).min(bufs.len());
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
        if self.state != State::Up {
            return Err(ProviderError::NotConnected);
        }
        let mut merged = Vec::new();
        let runs = frwr_runs(frags, self.cfg.max_pages_per_mr as usize, &mut merged)?;
        if self.live_regs >= self.res.max_registrations || self.free_mrs.len() < runs.len() {
            return Err(ProviderError::Busy);
        }
        if self.sq.len() + runs.len() > self.sq_depth {
            self.stats.busy += 1;
            return Err(ProviderError::Busy);
        }
        let slot = self
            .regs
            .iter()
            .position(Option::is_none)
            .ok_or(ProviderError::Busy)?;
        // One page reference on every distinct page covered.
        let mut pages: Vec<u64> = Vec::new();
        pages
            .try_reserve(frags.len())
            .map_err(|_| ProviderError::NoMemory)?;
        for f in frags {
            if pages.last() != Some(&f.addr) && !pages.contains(&f.addr) {
                if self.pages.page_ref(f.addr).is_err() {
                    for p in &pages {
                        self.pages.page_unref(*p);
                    }
                    return Err(ProviderError::BadFragments);
                }
                pages.push(f.addr);
            }
        }
        let mut acc = 0u32;
        if access.contains(Access::REMOTE_READ) {
            acc |= ffi::ACC_REMOTE_READ;
        }
        if access.contains(Access::REMOTE_WRITE) {
            acc |= ffi::ACC_REMOTE_WRITE | ffi::ACC_LOCAL_WRITE;
        }
        if access.contains(Access::LOCAL_WRITE) {
            acc |= ffi::ACC_LOCAL_WRITE;
        }
        let mut mrs: heapless::Vec<u32, MAX_CHUNK_SEGMENTS> = heapless::Vec::new();
        let mut segments = heapless::Vec::new();
        let mut err = None;
        // Work list of (start, end) ranges of `merged`, in order.
        let mut todo: heapless::Vec<(usize, usize), MAX_CHUNK_SEGMENTS> = heapless::Vec::new();
        for r in runs.iter().rev() {
            let _ = todo.push(*r);
        }
        while let Some((s, e)) = todo.pop() {
            let Some(run) = merged.get(s..e) else {
                err = Some(ProviderError::BadFragments);
                break;
            };
            if self.sq.len() >= self.sq_depth {
                err = Some(ProviderError::Busy);
                break;
            }
            let Some(i) = self.free_mrs.pop() else {
                err = Some(ProviderError::Busy);
                break;
            };
            if mrs.push(i).is_err() {
                self.free_mrs.push(i);
                err = Some(ProviderError::BadFragments);
                break;
            }
            if let Some(m) = self.mrs.get_mut(i as usize) {
                m.busy = true;
            }
            let seq = self.seq();
            let mut out = KrpcRegOut::default();
            // SAFETY: live connection; `run` holds `e - s` SGEs of pages referenced above.
            let rc = unsafe {
                ffi::krpc_ofed_reg_mr(
                    self.conn,
                    i,
                    run.as_ptr(),
                    run.len() as u32,
                    acc,
                    seq,
                    &mut out,
                )
            };
            if rc != 0 || out.nmapped == 0 {
                err = Some(if rc == 0 {
                    ProviderError::BadFragments
                } else {
                    ProviderError::NotConnected
                });
                break;
            }
            self.sq.push_back(SqEntry {
                seq,
                kind: SqKind::Reg,
            });
            self.stats.send_wrs += 1;
            self.stats.reg_mrs += 1;
            if let Some(m) = self.mrs.get_mut(i as usize) {
                m.rkey = out.rkey;
                m.valid = true;
            }
            if segments
                .push(RegSegment {
                    handle: out.rkey,
                    length: out.length,
                    offset: out.iova,
                })
                .is_err()
            {
                err = Some(ProviderError::BadFragments);
                break;
            }
            let took = (out.nmapped as usize).min(e - s);
            if s + took < e && todo.push((s + took, e)).is_err() {
                err = Some(ProviderError::BadFragments);
                break;
            }
        }
        self.reg_gen = self.reg_gen.wrapping_add(1);
        let gen = self.reg_gen;
        if let Some(r) = self.regs.get_mut(slot) {
            *r = Some(Reg { gen, mrs, pages });
        }
        self.live_regs += 1;
        let id = RegId((u32::from(gen) << 16) | slot as u32);
        if let Some(e) = err {
            let _ = self.release(id);
            return Err(e);
        }
        Ok(Registration { id, segments })
    }

    fn release(&mut self, reg: RegId) -> Result<(), ProviderError> {
        let slot = self.reg_slot(reg).ok_or(ProviderError::BadId)?;
        let need = self.mrs_to_invalidate(slot);
        if self.state == State::Up
            && !need.is_empty()
            && self.sq.len() + need.len() <= self.sq_depth
        {
            self.clear_plan();
            self.plan_invs(&need, None);
            let ok = self.post_planned().is_ok();
            self.clear_plan();
            if ok {
                for &i in &need {
                    if let Some(m) = self.mrs.get_mut(i as usize) {
                        m.inv_pending = true;
                    }
                }
                self.stats.local_invs += need.len() as u64;
                self.stats.sync_revokes += 1;
            }
        }
        let ids = match self.regs.get(slot) {
            Some(Some(r)) => r.mrs.clone(),
            _ => heapless::Vec::new(),
        };
        let mut polls = self.cfg.release_polls;
        while polls > 0 && self.state != State::Broken {
            let pending = ids.iter().any(|&i| {
                self.mrs
                    .get(i as usize)
                    .is_some_and(|m| m.valid || m.inv_pending)
            });
            if !pending {
                break;
            }
            if self.reap() == 0 {
                core::hint::spin_loop();
            }
            polls -= 1;
        }
        for i in ids {
            self.put_mr(i);
        }
        if let Some(s) = self.regs.get_mut(slot) {
            if let Some(r) = s.take() {
                for p in r.pages {
                    self.pages.page_unref(p);
                }
            }
        }
        self.live_regs = self.live_regs.saturating_sub(1);
        Ok(())
    }

    fn poll_event(&mut self) -> Option<CmEvent> {
        if self.events.is_empty() {
            self.pump_cm();
        }
        self.events.pop_front()
    }

    fn disconnect(&mut self) {
        OfedQp::disconnect(self);
    }
}

impl Drop for OfedQp {
    fn drop(&mut self) {
        if self.conn.is_null() {
            // Never connected: only the buffer pages exist.
        } else {
            if self.state != State::Broken {
                // SAFETY: live connection; errors are irrelevant at teardown.
                unsafe { ffi::krpc_ofed_disconnect(self.conn) };
            }
            // SAFETY: nothing uses the connection after this; the C side destroys the QP,
            // CQ, MRs (deregistration revokes every rkey), PD and cm id.
            unsafe { ffi::krpc_ofed_conn_destroy(self.conn) };
            self.conn = ptr::null_mut();
        }
        // The QP is gone: no DMA can touch the pages any more.
        for slot in 0..self.regs.len() {
            if let Some(Some(r)) = self.regs.get_mut(slot) {
                for p in core::mem::take(&mut r.pages) {
                    self.pages.page_unref(p);
                }
            }
        }
        for &p in self.send_pages.iter().chain(self.recv_pages.iter()) {
            self.pages.page_unref(p);
        }
    }
}

/// A listening rdma_cm id; connection requests become [`OfedQp`]s (QP created, not yet
/// accepted).
pub struct OfedListener {
    l: *mut KrpcListener,
    cfg: OfedConfig,
}

impl core::fmt::Debug for OfedListener {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OfedListener").finish_non_exhaustive()
    }
}

// SAFETY: the listener handle is owned and only used through `&mut self`; the C side locks
// its pending list.
unsafe impl Send for OfedListener {}

impl OfedListener {
    /// Bind and listen on `addr`.
    ///
    /// # Safety
    /// As [`OfedQp::connect`]: `vnet` and `addr` must be valid for the call.
    ///
    /// # Errors
    /// The failing C call.
    pub unsafe fn bind(
        vnet: *mut c_void,
        addr: *const c_void,
        cfg: &OfedConfig,
    ) -> Result<OfedListener, OfedError> {
        let params = cfg.params();
        let mut l = ptr::null_mut();
        // SAFETY: the caller vouches for `vnet` and `addr`; `params` and `l` are valid.
        let rc = unsafe { ffi::krpc_ofed_listen(vnet, addr, &params, 16, &mut l) };
        if rc != 0 || l.is_null() {
            return Err(OfedError::Sys {
                what: "krpc_ofed_listen",
                errno: rc,
            });
        }
        Ok(OfedListener { l, cfg: *cfg })
    }

    /// The next pending connection request, if any (non-blocking). Post receives on it, then
    /// [`OfedQp::accept`].
    pub fn next_request(&mut self) -> Option<Result<OfedQp, OfedError>> {
        let mut conn = ptr::null_mut();
        // SAFETY: live listener; `conn` is a valid out-pointer.
        let rc = unsafe { ffi::krpc_ofed_listener_next(self.l, &mut conn) };
        if rc == EAGAIN || rc == EAGAIN_LINUX {
            return None;
        }
        if rc != 0 || conn.is_null() {
            return Some(Err(OfedError::Sys {
                what: "krpc_ofed_listener_next",
                errno: rc,
            }));
        }
        Some(match OfedQp::new(&self.cfg) {
            Ok(mut qp) => {
                qp.conn = conn;
                Ok(qp)
            }
            Err(e) => {
                // SAFETY: the pending connection is ours and unused; destroying it rejects
                // the request.
                unsafe { ffi::krpc_ofed_conn_destroy(conn) };
                Err(e)
            }
        })
    }
}

impl Drop for OfedListener {
    fn drop(&mut self) {
        // SAFETY: live listener, destroyed once; pending requests are rejected.
        unsafe { ffi::krpc_ofed_listener_destroy(self.l) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(addr: u64, offset: usize, len: usize) -> LocalFragment {
        LocalFragment { addr, offset, len }
    }

    #[test]
    fn frwr_runs_split_at_gaps_and_merge_within_a_page() {
        let mut m = Vec::new();
        // Contiguous pages, first with an offset, last short: one run.
        let r = frwr_runs(
            &[f(0x1000, 100, 3996), f(0x5000, 0, 4096), f(0x3000, 0, 10)],
            16,
            &mut m,
        )
        .unwrap();
        assert_eq!(r.as_slice(), &[(0, 3)]);
        // A short middle fragment forces a new run.
        let r = frwr_runs(&[f(0x1000, 0, 100), f(0x2000, 0, 4096)], 16, &mut m).unwrap();
        assert_eq!(r.as_slice(), &[(0, 1), (1, 2)]);
        // Two fragments continuing inside one page merge.
        let r = frwr_runs(&[f(0x1000, 0, 100), f(0x1000, 100, 3996)], 16, &mut m).unwrap();
        assert_eq!(r.as_slice(), &[(0, 1)]);
        assert_eq!(m[0].length, 4096);
        // Page limit.
        let frags: Vec<_> = (0..5).map(|i| f(0x1000 * (i + 1), 0, 4096)).collect();
        let r = frwr_runs(&frags, 2, &mut m).unwrap();
        assert_eq!(r.as_slice(), &[(0, 2), (2, 4), (4, 5)]);
        // Bad fragments.
        assert!(frwr_runs(&[f(0x1001, 0, 1)], 16, &mut m).is_err());
        assert!(frwr_runs(&[f(0x1000, 4000, 200)], 16, &mut m).is_err());
        assert!(frwr_runs(&[], 16, &mut m).is_err());
    }
}
