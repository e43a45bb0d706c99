//! [`OfedQp`]: one RC connection over the OFED KPI implementing [`Provider`](krpc_rdma::provider::Provider).
//!
//! The queue-pair logic (send-queue accounting, posted receives, the registration table and
//! key pool, chain validation, completions, connection state, synchronous revocation) is the
//! core's shared [`Binding`]; this file is only its [`Backend`] over the C wrappers of
//! `c/krpc_rdma_ofed.c`, and the connection set-up.
//!
//! # Resources
//!
//! * Send and receive buffers are one kernel page each ([`PAGE_SIZE`] bytes), addressed by
//!   physical address with the PD's `local_dma_lkey` (the C side fills the lkey). Receives are
//!   posted with `wr_id = RECV_BIT | buffer`.
//! * The queue pair, its CQ, its PD and a pool of FRWR MRs (`ib_alloc_mr(pd,
//!   IB_MR_TYPE_MEM_REG, max_pages_per_mr)`) are created by the C side when rdma_cm has
//!   resolved the route (client) or delivered the connect request (server).
//! * The hardware send queue is [`OfedConfig::internal_wrs`] deeper than what the core is
//!   told, for REG_MR and LOCAL_INV.
//!
//! # Registrations (FRWR)
//!
//! The fragments are cut into FRWR runs ([`RunRule::Frwr`]) and each run is registered with
//! one MR of the pool: the C side DMA-maps the pages into a scatterlist, bumps the key byte
//! (`ib_update_fast_reg_key(mr, ib_inc_rkey(rkey))`), calls `ib_map_mr_sg` and posts an
//! unsignaled `IB_WR_REG_MR` before `register` returns — so the registration precedes every
//! later work request. If `ib_map_mr_sg` takes only a prefix, the rest gets another MR.
//! `release` of a still-valid registration posts the invalidations and polls for them (a
//! bounded number of polls, [`OfedConfig::release_polls`]: the kernel has no clock here);
//! when the connection is broken, or the polls run out, the MR is deregistered and
//! reallocated instead (`krpc_ofed_mr_reset`), which kills the rkey.
//!
//! # Errors
//!
//! The first error completion (including a flush) breaks the connection: `rdma_disconnect`
//! (QP to error, everything outstanding flushes, the peer is told) and one
//! [`CmEvent::Disconnected`](krpc_rdma::provider::CmEvent). Later posts fail with
//! [`ProviderError::NotConnected`].

use alloc::vec::Vec;
use core::ffi::c_void;
use core::ptr;

use krpc_rdma::provider::binding::runs::RunRule;
use krpc_rdma::provider::binding::{
    Backend, Binding, BindingStats, CmPoll, Invalidation, Layout, Mapped, Posted, RawCm, RawInv,
    RawWc, Sge, Wr, WrOp,
};
use krpc_rdma::provider::{Access, LocalFragment, ProviderError, Resources, WcStatus};
use mbuf::{PageProvider, PAGE_SIZE};

use crate::ffi::{
    self, KrpcCmEvent, KrpcConn, KrpcListener, KrpcRegOut, KrpcSge, KrpcWc, KrpcWr, SockaddrStorage,
};
use crate::pages::KernelPages;

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

/// Counters of one queue pair (`maps` counts REG_MRs, `key_revokes` MR resets).
pub type OfedStats = BindingStats;

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

fn ksge(s: &Sge) -> KrpcSge {
    KrpcSge {
        addr: s.addr,
        length: s.length,
        reserved: 0,
    }
}

/// Clear `v` and make room for `n` entries (fails rather than aborts).
fn refill<T>(v: &mut Vec<T>, n: usize) -> bool {
    v.clear();
    v.try_reserve(n).is_ok()
}

/// The [`Backend`] over the C wrappers: one rdma_cm connection and its buffer pages.
///
/// # Invariants
/// `conn` is null or a live connection of the C side owned by this value (destroyed once, in
/// [`Backend::shutdown`]); `send_pages` / `recv_pages` are wired pages of `pages`, one
/// reference each, held until drop.
pub struct OfedConn {
    conn: *mut KrpcConn,
    pages: KernelPages,
    cfg: OfedConfig,
    send_pages: Vec<u64>,
    recv_pages: Vec<u64>,
    // Translation scratch for the C calls, sized at creation.
    kwrs: Vec<KrpcWr>,
    ksges: Vec<KrpcSge>,
    krecv: Vec<KrpcSge>,
    kmap: Vec<KrpcSge>,
}

impl core::fmt::Debug for OfedConn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OfedConn")
            .field("connected", &!self.conn.is_null())
            .finish_non_exhaustive()
    }
}

impl OfedConn {
    /// The backend for `cfg`, no connection, no page or scratch array allocated yet
    /// ([`allocate`](Self::allocate) does that).
    #[inline(never)]
    fn unallocated(cfg: &OfedConfig) -> OfedConn {
        OfedConn {
            conn: ptr::null_mut(),
            pages: KernelPages::new(),
            cfg: *cfg,
            send_pages: Vec::new(),
            recv_pages: Vec::new(),
            kwrs: Vec::new(),
            ksges: Vec::new(),
            krecv: Vec::new(),
            kmap: Vec::new(),
        }
    }

    /// The buffer pages and the translation scratch, allocated in place.
    fn allocate(&mut self) -> Result<(), OfedError> {
        let cfg = self.cfg;
        let sq_depth = (cfg.max_send_wr + cfg.internal_wrs) as usize;
        let nomem = |_| OfedError::NoMemory;
        self.send_pages
            .try_reserve_exact(cfg.send_bufs as usize)
            .map_err(nomem)?;
        self.recv_pages
            .try_reserve_exact(cfg.recv_bufs as usize)
            .map_err(nomem)?;
        self.kwrs.try_reserve(sq_depth).map_err(nomem)?;
        self.ksges.try_reserve(sq_depth * 2).map_err(nomem)?;
        self.krecv
            .try_reserve(cfg.recv_bufs as usize)
            .map_err(nomem)?;
        self.kmap.try_reserve(64).map_err(nomem)?;
        for _ in 0..cfg.send_bufs {
            let p = self.pages.alloc_page().map_err(|_| OfedError::NoMemory)?;
            self.send_pages.push(p);
        }
        for _ in 0..cfg.recv_bufs {
            let p = self.pages.alloc_page().map_err(|_| OfedError::NoMemory)?;
            self.recv_pages.push(p);
        }
        Ok(())
    }

    /// The kernel mapping of one of our buffer pages.
    fn kva(pa: Option<&u64>) -> Option<*mut u8> {
        // SAFETY: a lookup of our own page's mapping; no memory is touched.
        let p = unsafe { ffi::krpc_ofed_page_kva(*pa?) };
        (!p.is_null()).then_some(p)
    }
}

/// A fragment as an SGE (page address + offset), or `None` if it is not a valid in-page
/// fragment.
fn frag_sge(f: &LocalFragment) -> Option<Sge> {
    if f.len == 0 || f.offset.checked_add(f.len)? > PAGE_SIZE || f.addr % PAGE_SIZE as u64 != 0 {
        return None;
    }
    Some(Sge {
        addr: f.addr + f.offset as u64,
        length: u32::try_from(f.len).ok()?,
        lkey: 0,
    })
}

impl Backend for OfedConn {
    type Pages = KernelPages;

    /// Kernel FRWR MRs, yes; the userspace emulation's "MRs" are rxe type 2 windows (whose
    /// invalidation while FREE crashes Linux 6.1's rxe), no.
    fn holds_revoked_keys(&self) -> bool {
        !cfg!(feature = "emu")
    }

    fn pages(&self) -> &KernelPages {
        &self.pages
    }

    fn send_buf(&mut self, buf: u32) -> Option<&mut [u8]> {
        let p = Self::kva(self.send_pages.get(buf as usize))?;
        // SAFETY: `p` maps the whole wired page owned by this connection; the borrow of
        // `self` keeps it alive and exclusive. The NIC only reads send buffers, and the core
        // does not write a buffer while a Send of it is outstanding.
        Some(unsafe { core::slice::from_raw_parts_mut(p, PAGE_SIZE) })
    }

    fn recv_buf(&self, buf: u32) -> Option<&[u8]> {
        let p = Self::kva(self.recv_pages.get(buf as usize))?;
        // SAFETY: the page is ours and the binding calls this only for a buffer that is not
        // posted, so the NIC does not write it while the shared borrow lasts (posting needs
        // `&mut`).
        Some(unsafe { core::slice::from_raw_parts(p, PAGE_SIZE) })
    }

    fn send_sge(&self, buf: u32, len: u32) -> Option<Sge> {
        let addr = *self.send_pages.get(buf as usize)?;
        (len as usize <= PAGE_SIZE).then_some(Sge {
            addr,
            length: len,
            lkey: 0,
        })
    }

    fn recv_sge(&self, buf: u32) -> Option<Sge> {
        Some(Sge {
            addr: *self.recv_pages.get(buf as usize)?,
            length: PAGE_SIZE as u32,
            lkey: 0,
        })
    }

    fn frag_sge(&self, f: &LocalFragment) -> Option<Sge> {
        frag_sge(f)
    }

    fn post_send(&mut self, wrs: &[Wr], sges: &[Sge]) -> Posted {
        if !refill(&mut self.kwrs, wrs.len()) || !refill(&mut self.ksges, sges.len()) {
            return Posted {
                count: 0,
                ok: false,
            };
        }
        self.ksges.extend(sges.iter().map(ksge));
        self.kwrs.extend(wrs.iter().map(|w| {
            let (opcode, rkey, remote_addr) = match w.op {
                WrOp::Send { invalidate: None } => (ffi::OP_SEND, 0, 0),
                WrOp::Send {
                    invalidate: Some(r),
                } => (ffi::OP_SEND_INV, r, 0),
                WrOp::RdmaWrite { remote_addr, rkey } => (ffi::OP_RDMA_WRITE, rkey, remote_addr),
                WrOp::RdmaRead { remote_addr, rkey } => (ffi::OP_RDMA_READ, rkey, remote_addr),
                WrOp::LocalInv { rkey } => (ffi::OP_LOCAL_INV, rkey, 0),
            };
            KrpcWr {
                wr_id: w.wr_id,
                remote_addr,
                opcode,
                flags: if w.signaled { ffi::WR_SIGNALED } else { 0 },
                rkey,
                sge_first: w.sge_first,
                num_sge: w.num_sge,
                reserved: 0,
            }
        }));
        let mut posted = 0u32;
        // SAFETY: live connection; both arrays are valid for the call (the C side translates
        // them into ib_send_wr/ib_sge chains before posting).
        let rc = unsafe {
            ffi::krpc_ofed_post_send(
                self.conn,
                self.kwrs.as_ptr(),
                self.kwrs.len() as u32,
                self.ksges.as_ptr(),
                self.ksges.len() as u32,
                &mut posted,
            )
        };
        Posted {
            count: posted as usize,
            ok: rc == 0,
        }
    }

    fn post_recv(&mut self, wr_ids: &[u64], sges: &[Sge]) -> Posted {
        if wr_ids.len() != sges.len() || !refill(&mut self.krecv, sges.len()) {
            return Posted {
                count: 0,
                ok: false,
            };
        }
        self.krecv.extend(sges.iter().map(ksge));
        let mut posted = 0u32;
        // SAFETY: live connection; both arrays hold `wr_ids.len()` entries.
        let rc = unsafe {
            ffi::krpc_ofed_post_recv(
                self.conn,
                wr_ids.as_ptr(),
                self.krecv.as_ptr(),
                wr_ids.len() as u32,
                &mut posted,
            )
        };
        Posted {
            count: posted as usize,
            ok: rc == 0,
        }
    }

    fn poll_cq(&mut self, out: &mut [RawWc]) -> Option<usize> {
        let mut wcs = [KrpcWc::default(); 16];
        let want = out.len().min(wcs.len()) as u32;
        // SAFETY: live connection; `wcs` has room for `want` entries.
        let n = unsafe { ffi::krpc_ofed_poll_cq(self.conn, wcs.as_mut_ptr(), want) };
        let n = usize::try_from(n).ok()?;
        for (o, wc) in out.iter_mut().zip(wcs.iter()).take(n) {
            *o = RawWc {
                wr_id: wc.wr_id,
                status: status_of(wc.status),
                byte_len: wc.byte_len,
                inv: if wc.flags & ffi::wc::F_INV != 0 {
                    RawInv::Flagged(wc.invalidated_rkey)
                } else {
                    RawInv::None
                },
            };
        }
        Some(n.min(out.len()))
    }

    fn poll_cm(&mut self, _why: CmPoll) -> Option<RawCm> {
        let mut ev = KrpcCmEvent::default();
        // SAFETY: live connection; `ev` is a valid out-pointer.
        if unsafe { ffi::krpc_ofed_poll_event(self.conn, &mut ev) } != 1 {
            return None;
        }
        Some(match ev.kind {
            ffi::cm::ESTABLISHED => {
                let n = (ev.private_data_len as usize).min(56);
                RawCm::Established(
                    heapless::Vec::from_slice(ev.private_data.get(..n).unwrap_or(&[]))
                        .unwrap_or_default(),
                )
            }
            _ => RawCm::Down,
        })
    }

    fn disconnect(&mut self) {
        // SAFETY: live connection; moves the QP to the error state (everything outstanding
        // flushes) and tells the peer. Errors are irrelevant here.
        unsafe { ffi::krpc_ofed_disconnect(self.conn) };
    }

    fn key_create(&mut self, key: u32) -> Result<u32, ProviderError> {
        self.revoke(key).ok_or(ProviderError::NoMemory)
    }

    fn map(
        &mut self,
        key: u32,
        _rkey: u32,
        run: &[Sge],
        access: Access,
        wr_id: u64,
    ) -> Result<Mapped, ProviderError> {
        if !refill(&mut self.kmap, run.len()) {
            return Err(ProviderError::NoMemory);
        }
        self.kmap.extend(run.iter().map(ksge));
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
        let mut out = KrpcRegOut::default();
        // SAFETY: live connection; `kmap` holds `run.len()` SGEs of pages the registration
        // holds references on; `key` is an MR index of the pool (the binding's key pool has
        // exactly `num_mrs` keys).
        let rc = unsafe {
            ffi::krpc_ofed_reg_mr(
                self.conn,
                key,
                self.kmap.as_ptr(),
                self.kmap.len() as u32,
                acc,
                wr_id,
                &mut out,
            )
        };
        if rc != 0 {
            return Err(ProviderError::NotConnected);
        }
        if out.nmapped == 0 {
            return Err(ProviderError::BadFragments);
        }
        Ok(Mapped {
            rkey: out.rkey,
            iova: out.iova,
            length: out.length,
            consumed: out.nmapped as usize,
            posted: true,
        })
    }

    fn revoke(&mut self, key: u32) -> Option<u32> {
        let mut rkey = 0;
        // SAFETY: live connection, `key` is an MR index of the pool.
        let rc = unsafe { ffi::krpc_ofed_mr_reset(self.conn, key, &mut rkey) };
        (rc == 0).then_some(rkey)
    }

    fn unmap(&mut self, key: u32) {
        // SAFETY: live connection; the MR is invalid, so its pages may be DMA-unmapped.
        unsafe { ffi::krpc_ofed_mr_unmap(self.conn, key) };
    }

    fn release_wait(&mut self, iteration: u32) -> bool {
        iteration < self.cfg.release_polls
    }

    fn shutdown(&mut self, connected: bool) {
        if self.conn.is_null() {
            return;
        }
        if connected {
            // SAFETY: live connection; errors are irrelevant at teardown.
            unsafe { ffi::krpc_ofed_disconnect(self.conn) };
        }
        // SAFETY: nothing uses the connection after this; the C side destroys the QP, CQ,
        // MRs (deregistration revokes every rkey), PD and cm id.
        unsafe { ffi::krpc_ofed_conn_destroy(self.conn) };
        self.conn = ptr::null_mut();
    }
}

impl Drop for OfedConn {
    fn drop(&mut self) {
        self.shutdown(true);
        // The QP is gone: no DMA can touch the buffer pages any more.
        for &p in self.send_pages.iter().chain(self.recv_pages.iter()) {
            self.pages.page_unref(p);
        }
    }
}

/// One RC connection over the OFED KPI (see the module documentation): the shared
/// [`Binding`] over an [`OfedConn`]. Its counters, registrations and connection state are
/// the binding's (it dereferences to it).
#[derive(Debug)]
pub struct OfedQp {
    inner: Binding<OfedConn>,
}

// SAFETY: the connection handle is owned by this queue pair and only used through `&mut self`
// (or `&self` for read-only buffer access); the C side serializes its own state with a mutex,
// so the object may move between threads.
unsafe impl Send for OfedQp {}

krpc_rdma::forward_provider!(OfedQp => inner as Binding<OfedConn>);

impl OfedQp {
    /// A queue pair for `cfg`, not connected: its buffer pages and the binding's tables
    /// allocated.
    ///
    /// Kernel stack frames stay under 1 KiB, so no frame holds two copies of the 880-byte
    /// queue pair (`Binding::new`'s result moved into an `OfedQp` would be one more): the
    /// queue pair is built with nothing allocated by [`unallocated`](Self::unallocated),
    /// its `Binding::unallocated` writing straight into the result, then allocated in
    /// place (a frame of its own, [`allocate`](Self::allocate)); this frame holds the one
    /// copy, returned as it is.
    #[inline(never)]
    fn new(cfg: &OfedConfig) -> Result<OfedQp, OfedError> {
        let mut made = OfedQp::unallocated(cfg);
        if let Ok(me) = &mut made {
            if let Err(e) = me.allocate() {
                made = Err(e);
            }
        }
        made
    }

    /// [`new`](Self::new)'s queue pair before anything is allocated.
    #[inline(never)]
    fn unallocated(cfg: &OfedConfig) -> Result<OfedQp, OfedError> {
        if cfg.max_registrations > u32::from(u16::MAX) {
            return Err(OfedError::Config("max_registrations above 65535"));
        }
        let layout = Layout {
            res: cfg.resources(),
            sq_depth: cfg.max_send_wr + cfg.internal_wrs,
            keys: cfg.num_mrs,
            keys_present: true,
            rule: RunRule::Frwr {
                max_pages: cfg.max_pages_per_mr,
            },
            invalidation: Invalidation::WorkRequest,
            map_uses_sq: true,
        };
        Ok(OfedQp {
            inner: Binding::unallocated(OfedConn::unallocated(cfg), layout),
        })
    }

    /// [`new`](Self::new)'s allocations, in place: the backend's pages and scratch, then the
    /// binding's tables.
    #[inline(never)]
    fn allocate(&mut self) -> Result<(), OfedError> {
        self.inner.backend_mut().allocate()?;
        match self.inner.allocate() {
            Ok(()) => Ok(()),
            Err(ProviderError::NoMemory) => Err(OfedError::NoMemory),
            Err(_) => Err(OfedError::Config(
                "buffer, registration or MR counts out of range",
            )),
        }
    }

    fn conn(&self) -> *mut KrpcConn {
        self.inner.backend().conn
    }

    /// Start an active connection to `dst` (asynchronous: the first
    /// [`poll_event`](krpc_rdma::provider::Provider::poll_event) that returns something is `Established` with the
    /// server's private data, or `Disconnected`).
    ///
    /// # Safety
    /// `vnet` must be the `struct vnet *` to connect in (or NULL where the KPI accepts it:
    /// kernels without VIMAGE, and the emulation; `rdma_create_id` refuses NULL with VIMAGE),
    /// and `dst` must point to a valid `struct sockaddr` of the platform for the call.
    ///
    /// # Errors
    /// Allocation failure, or the failing C call.
    #[inline(never)]
    pub unsafe fn connect(
        vnet: *mut c_void,
        dst: *const c_void,
        cfg: &OfedConfig,
        private_data: &[u8],
    ) -> Result<OfedQp, OfedError> {
        if private_data.len() > 56 {
            return Err(OfedError::Config("private data longer than 56 bytes"));
        }
        // Connected in place, and returned as `new` made it (no copy of the 880-byte queue
        // pair into a local and back out: kernel stack frames stay under 1 KiB).
        let mut made = OfedQp::new(cfg);
        let Ok(me) = &mut made else {
            return made;
        };
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
        me.inner.backend_mut().conn = conn;
        made
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
            ffi::krpc_ofed_accept(
                self.conn(),
                private_data.as_ptr(),
                private_data.len() as u32,
            )
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
        unsafe { ffi::krpc_ofed_set_upcall(self.conn(), f, arg) };
    }

    /// The connection's local and remote addresses (the cm id's `route.addr`, as the
    /// platform's `struct sockaddr_storage`), or `None` without a cm id.
    pub fn addrs(&self) -> Option<(SockaddrStorage, SockaddrStorage)> {
        let conn = self.conn();
        if conn.is_null() {
            return None;
        }
        let (mut l, mut r) = (SockaddrStorage::default(), SockaddrStorage::default());
        // SAFETY: live connection; both out-pointers hold a `struct sockaddr_storage`.
        let rc = unsafe {
            ffi::krpc_ofed_conn_addrs(
                conn,
                (&mut l as *mut SockaddrStorage).cast(),
                (&mut r as *mut SockaddrStorage).cast(),
            )
        };
        (rc == 0).then_some((l, r))
    }

    /// Arm the CQ notification (after a poll found nothing).
    pub fn arm(&mut self) {
        // SAFETY: live connection.
        unsafe { ffi::krpc_ofed_req_notify(self.conn()) };
    }

    /// The page provider the buffers and registrations use.
    pub fn pages(&self) -> &KernelPages {
        &self.inner.backend().pages
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
    /// [`OfedQp::accept`]. Once the listener's device is gone (`RDMA_CM_EVENT_DEVICE_REMOVAL`
    /// on its id) this returns `Some(Err(OfedError::Sys { errno: ENODEV, .. }))`: drop the
    /// listener.
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
        // Set up in place (see `connect`).
        let mut made = OfedQp::new(&self.cfg);
        match &mut made {
            Ok(qp) => qp.inner.backend_mut().conn = conn,
            // SAFETY: the pending connection is ours and unused; destroying it rejects the
            // request.
            Err(_) => unsafe { ffi::krpc_ofed_conn_destroy(conn) },
        }
        Some(made)
    }

    /// Call `f(arg)` when a connection request is queued or the listener's device goes
    /// (from rdma_cm's handler: it should only wake the thread that takes the requests).
    ///
    /// # Safety
    /// `f` must be callable with `arg` from any context until the listener is dropped or
    /// the upcall replaced.
    pub unsafe fn set_upcall(&mut self, f: Option<extern "C" fn(*mut c_void)>, arg: *mut c_void) {
        let f = f.unwrap_or(no_upcall);
        // SAFETY: live listener; the caller vouches for `f`/`arg` (`no_upcall` does nothing).
        unsafe { ffi::krpc_ofed_listener_set_upcall(self.l, f, arg) };
    }

    /// The configuration of the queue pairs it makes.
    pub fn config(&self) -> &OfedConfig {
        &self.cfg
    }
}

/// The upcall of a listener that has none: does nothing.
extern "C" fn no_upcall(_: *mut c_void) {}

impl Drop for OfedListener {
    fn drop(&mut self) {
        // SAFETY: live listener, destroyed once; pending requests are rejected.
        unsafe { ffi::krpc_ofed_listener_destroy(self.l) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use krpc_rdma::provider::binding::runs::runs;

    fn f(addr: u64, offset: usize, len: usize) -> LocalFragment {
        LocalFragment { addr, offset, len }
    }

    /// `frag_sge` + the shared FRWR rule, as `register` composes them.
    fn frwr_runs(
        frags: &[LocalFragment],
        max_pages: u32,
        m: &mut Vec<Sge>,
    ) -> Result<Vec<(usize, usize)>, ProviderError> {
        m.clear();
        for x in frags {
            m.push(frag_sge(x).ok_or(ProviderError::BadFragments)?);
        }
        Ok(runs(m, RunRule::Frwr { max_pages })?.to_vec())
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
        assert_eq!(r, [(0, 3)]);
        // A short middle fragment forces a new run.
        let r = frwr_runs(&[f(0x1000, 0, 100), f(0x2000, 0, 4096)], 16, &mut m).unwrap();
        assert_eq!(r, [(0, 1), (1, 2)]);
        // Two fragments continuing inside one page merge.
        let r = frwr_runs(&[f(0x1000, 0, 100), f(0x1000, 100, 3996)], 16, &mut m).unwrap();
        assert_eq!(r, [(0, 1)]);
        assert_eq!(m[0].length, 4096);
        // Page limit.
        let frags: Vec<_> = (0..5).map(|i| f(0x1000 * (i + 1), 0, 4096)).collect();
        let r = frwr_runs(&frags, 2, &mut m).unwrap();
        assert_eq!(r, [(0, 2), (2, 4), (4, 5)]);
        // Bad fragments.
        assert!(frwr_runs(&[f(0x1001, 0, 1)], 16, &mut m).is_err());
        assert!(frwr_runs(&[f(0x1000, 4000, 200)], 16, &mut m).is_err());
        assert!(frwr_runs(&[], 16, &mut m).is_err());
    }
}
