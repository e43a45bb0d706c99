//! The krpc face over the software provider, for a kernel without an RDMA device (feature
//! `face`; FreeBSD: `c/krpc_rdma_bsd_facetest.c` drives it against the kernel's own svc.c,
//! `CLIENT` code, UMA mbufs and M_EXTPG).
//!
//! * [`SoftFaceQp`]: a software-provider queue pair as a [`FaceQp`]. The software provider
//!   completes work when it is posted, on both sides; a real CQ announces completions from
//!   its own context (an interrupt thread or a taskqueue), never from the thread that posts.
//!   So every post, and the disconnect, *kicks* both sides' notifiers
//!   (`krpc_soft_cq_kick`, supplied by the kernel glue: a taskqueue task), and the task calls
//!   the upcall the face set: the face's locks are never taken recursively or in the poster's
//!   lock order. A kick is coalesced while one is pending; an upcall may be spurious (it only
//!   wakes a poller), which is why [`FaceQp::arm`] has nothing to do.
//! * The C entry points of the FreeBSD face test: [`krpc_rdma_face_open`] (a fixture over
//!   kernel pages), [`krpc_rdma_face_pair`] (a connected `struct krpc_clnt` /
//!   `struct krpc_svc` pair, for `clnt_rdma_create` and `svc_rdma_create`; with reverse slots
//!   reserved at both ends: [`krpc_rdma_face_pair_cb`], the backchannel step's) and
//!   [`krpc_rdma_face_close`] (the page references left, which must be 0), and
//!   [`krpc_rdma_face_malformed`]: malformed calls from the core's Requester to an
//!   `svc_rdma` transport that the kernel's own svc.c pool serves, answered by the transport.
//! * The software fabric: connection set-up by port over the software provider, what
//!   rdma_cm gives the face on a device. [`krpc_rdma_soft_listen`] makes a `struct
//!   krpc_listen` (a [`FaceListener`] on a port, for `svc_rdma_listen_create`) and
//!   [`krpc_rdma_soft_dial`] a `struct krpc_clnt` that dials a port ([`FaceDialer`], for
//!   `clnt_rdma_dialed`, reconnecting or not). A dial finds the port's listener, makes a
//!   software connection whose server side waits in the listener's queue (the listener's
//!   notifier kicked), or fails with `ECONNREFUSED` when nobody listens there.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ffi::c_void;

use krpc_face::clnt::KrpcClnt;
use krpc_face::dial::FaceDialer;
use krpc_face::ffi::{FbsdSvcpool, FbsdSvcxprt, KrpcClntHandle, KrpcListenHandle, KrpcSvcHandle};
use krpc_face::listen::{self, FaceListener, KrpcListen};
use krpc_face::qp::FaceQp;
use krpc_face::svc::KrpcSvc;
use krpc_rdma::provider::{Middleware, Provider, ProviderError, RecvBufId, Resources, SendWr};
use krpc_rdma::soft::{pair, set_relax_hook, FabricLock, SoftConfig};
use krpc_rdma::transport::{ReplySpec, Requester, RequesterEvent, TransportConfig};
use krpc_rdma_scenarios::{Limits, Pair, Setup};
use mbuf::{Chain, PageProvider};
use ofed_shim::pages::Counted;

use super::kverbs::GlueSleep;
use super::{boxed_qp, kernel_pages, Qp, SoftKernel, Totals};
use crate::loopback::Sleep;
use crate::nfs_hook::{nfs_read_hook, MALFORMED_CALLS, NULL_AFTER_MALFORMED};

/// A notifier of the kernel glue (opaque).
#[repr(C)]
pub struct KrpcSoftCq {
    _opaque: [u8; 0],
}

extern "C" {
    /// A notifier with no upcall; NULL without memory.
    fn krpc_soft_cq_create() -> *mut KrpcSoftCq;
    /// Route the notifier to `f(arg)` (`None`: nothing); returns once no call of the previous
    /// upcall is running.
    fn krpc_soft_cq_set_upcall(
        cq: *mut KrpcSoftCq,
        f: Option<extern "C" fn(*mut c_void)>,
        arg: *mut c_void,
    );
    /// Have the upcall called soon from the notifier's own context (coalesced while one is
    /// pending). Never sleeps; callable with any lock held.
    fn krpc_soft_cq_kick(cq: *mut KrpcSoftCq);
    /// Wait for a pending or running upcall, then free.
    fn krpc_soft_cq_destroy(cq: *mut KrpcSoftCq);
    /// What a waiter for a software-fabric lock does between attempts: sleep a tick, so that
    /// a holder preempted on this CPU runs (krpc_rdma::soft::lock).
    fn krpc_soft_relax();
}

/// Both sides' notifiers, freed when both queue pairs are gone (a side kicks its peer's), and
/// whether the server side accepted the connection: a dialed connection's client side reports
/// no connection event before (rdma_cm's client hears `ESTABLISHED` only after the server's
/// accept, which comes after the server posted its receives; the software pair is connected
/// when made, and a call sent before the receives were posted would fail the connection).
struct Notifiers([*mut KrpcSoftCq; 2], core::sync::atomic::AtomicBool);

// SAFETY: the notifiers are the kernel glue's objects, made for use from any thread; the
// pointers never change and are freed once, in `drop`.
unsafe impl Send for Notifiers {}
// SAFETY: as above; kick and set_upcall are safe to call concurrently (the glue's contract).
unsafe impl Sync for Notifiers {}

impl Notifiers {
    fn new() -> Option<Arc<Self>> {
        // SAFETY: plain constructor calls.
        let n = Notifiers(
            unsafe { [krpc_soft_cq_create(), krpc_soft_cq_create()] },
            core::sync::atomic::AtomicBool::new(true),
        );
        // `n` frees what was made if the other failed.
        if n.0.iter().any(|c| c.is_null()) {
            return None;
        }
        Some(Arc::new(n))
    }

    /// Notifiers of a dialed connection: not accepted yet.
    fn dialed() -> Option<Arc<Self>> {
        let n = Notifiers::new()?;
        n.1.store(false, core::sync::atomic::Ordering::Release);
        Some(n)
    }

    fn accepted(&self) -> bool {
        self.1.load(core::sync::atomic::Ordering::Acquire)
    }

    fn kick(&self) {
        for &cq in &self.0 {
            // SAFETY: live notifiers (freed only when `self` drops).
            unsafe { krpc_soft_cq_kick(cq) };
        }
    }
}

impl Drop for Notifiers {
    fn drop(&mut self) {
        for &cq in &self.0 {
            if !cq.is_null() {
                // SAFETY: made by krpc_soft_cq_create, freed once here.
                unsafe { krpc_soft_cq_destroy(cq) };
            }
        }
    }
}

/// One side of a software-provider connection as a [`FaceQp`] (see the module doc).
pub struct SoftFaceQp {
    qp: Qp,
    side: usize,
    cqs: Arc<Notifiers>,
}

impl SoftFaceQp {
    /// This side's notifier.
    fn own(&self) -> *mut KrpcSoftCq {
        let [a, b] = self.cqs.0;
        if self.side == 0 {
            a
        } else {
            b
        }
    }

    fn notify_after<T>(&self, r: T) -> T {
        self.cqs.kick();
        r
    }
}

impl Middleware for SoftFaceQp {
    fn wrapped(&self) -> &impl Provider {
        &self.qp
    }
    fn wrapped_mut(&mut self) -> &mut impl Provider {
        &mut self.qp
    }
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), ProviderError> {
        let r = Provider::post_send(&mut self.qp, wrs);
        self.notify_after(r)
    }
    fn post_recv(&mut self, bufs: &[RecvBufId]) -> Result<(), ProviderError> {
        let r = Provider::post_recv(&mut self.qp, bufs);
        self.notify_after(r)
    }
    fn disconnect(&mut self) {
        Provider::disconnect(&mut self.qp);
        self.cqs.kick();
    }
    fn poll_event(&mut self) -> Option<krpc_rdma::provider::CmEvent> {
        // The client side of a dialed connection hears nothing before the server accepted.
        if self.side == 0 && !self.cqs.accepted() {
            return None;
        }
        Provider::poll_event(&mut self.qp)
    }
}

krpc_rdma::forward_provider!(middleware [] SoftFaceQp);

impl FaceQp for SoftFaceQp {
    unsafe fn set_upcall(&mut self, f: extern "C" fn(*mut c_void), arg: *mut c_void) {
        // SAFETY: live notifier; the caller vouches for `f`/`arg` (FaceQp's contract).
        unsafe { krpc_soft_cq_set_upcall(self.own(), Some(f), arg) };
    }

    fn arm(&mut self) {}

    fn accept(&mut self, _private_data: &[u8]) -> Result<(), i32> {
        self.cqs
            .1
            .store(true, core::sync::atomic::Ordering::Release);
        self.cqs.kick();
        Ok(())
    }
}

impl Drop for SoftFaceQp {
    /// As a verbs queue pair's destruction: the connection goes, the peer hears of it.
    fn drop(&mut self) {
        Provider::disconnect(&mut self.qp);
        self.cqs.kick();
        // SAFETY: live notifier; no upcall after this returns.
        unsafe { krpc_soft_cq_set_upcall(self.own(), None, core::ptr::null_mut()) };
    }
}

/// The face test's client provisioning: an NFSv3 READ's data by write chunk, the rest
/// inline in 1 KiB.
fn hook(call: &Chain, pages: &Arc<dyn PageProvider>) -> ReplySpec {
    nfs_read_hook(call, pages, 1024)
}

/// The face test's state: the fixture whose page providers count what each connection holds,
/// and the page provider of the software fabric's connections (counted too).
pub struct FaceTest {
    fx: SoftKernel,
    fabric: Option<Arc<Counted>>,
}

/// A face test's fixture over kernel pages; NULL without memory. Free it with
/// [`krpc_rdma_face_close`].
#[no_mangle]
pub extern "C" fn krpc_rdma_face_open() -> *mut FaceTest {
    set_relax_hook(relax);
    let fabric = kernel_pages().ok().map(|p| Arc::new(Counted::new(p)));
    Box::into_raw(Box::new(FaceTest {
        fx: SoftKernel::new(kernel_pages),
        fabric,
    }))
}

/// A software-fabric lock's waiter in FreeBSD's kernel: the glue's short sleep (see
/// `krpc_rdma::soft::lock`: spinning alone can starve the preempted holder for ever).
fn relax() {
    // SAFETY: a plain call of the glue; it only sleeps (no argument, nothing returned).
    unsafe { krpc_soft_relax() };
}

/// errno values returned here (FreeBSD's).
const ENOMEM: i32 = 12;
const EIO: i32 = 5;
const EINVAL: i32 = 22;
const EADDRINUSE: i32 = 48;
const ECONNREFUSED: i32 = 61;

// ---- the software fabric ---------------------------------------------------------------------

/// A notifier owned by one object (freed with it).
struct OwnCq(*mut KrpcSoftCq);

// SAFETY: the glue's notifiers are made for use from any thread; freed once, in `drop`.
unsafe impl Send for OwnCq {}
// SAFETY: as above; kick and set_upcall may be called concurrently (the glue's contract).
unsafe impl Sync for OwnCq {}

impl Drop for OwnCq {
    fn drop(&mut self) {
        // SAFETY: made by krpc_soft_cq_create, freed once here.
        unsafe { krpc_soft_cq_destroy(self.0) };
    }
}

/// A listening port of the software fabric.
struct SoftPort {
    port: u16,
    /// Server sides of connections dialed and not yet taken.
    pending: FabricLock<VecDeque<Box<dyn FaceQp>>>,
    /// Kicked when a connection is queued; its upcall is the listener's.
    cq: OwnCq,
    /// What the listener's Responders put in their private data (RFC 8797): the client's
    /// `Established` event carries it.
    private: [u8; krpc_rdma::wire::CM_PRIVATE_LEN],
    pages: Arc<dyn PageProvider>,
    cfg: SoftConfig,
}

/// The ports listened on.
static PORTS: FabricLock<Vec<Arc<SoftPort>>> = FabricLock::new(Vec::new());

/// The listener of a port (a [`FaceListener`]); dropping it closes the port.
struct SoftListener(Arc<SoftPort>);

impl FaceListener for SoftListener {
    fn next_request(&mut self) -> Option<Result<Box<dyn FaceQp>, i32>> {
        self.0.pending.lock().pop_front().map(Ok)
    }

    fn resources(&self) -> Resources {
        self.0.cfg.resources()
    }

    unsafe fn set_upcall(&mut self, f: Option<extern "C" fn(*mut c_void)>, arg: *mut c_void) {
        // SAFETY: live notifier; the caller vouches for `f`/`arg`.
        unsafe { krpc_soft_cq_set_upcall(self.0.cq.0, f, arg) };
    }
}

impl Drop for SoftListener {
    fn drop(&mut self) {
        let mut ports = PORTS.lock();
        ports.retain(|p| !Arc::ptr_eq(p, &self.0));
        // The table's memory goes with its last port: nothing of the module's heap is left
        // between tests (the load/unload test counts it before each unload).
        if ports.is_empty() {
            *ports = Vec::new();
        }
        drop(ports);
        // The connections nobody took go (their clients see the disconnect).
        let queued: VecDeque<_> = core::mem::take(&mut *self.0.pending.lock());
        drop(queued);
    }
}

/// Dials a port of the software fabric (a [`FaceDialer`]).
struct SoftDialer {
    port: u16,
    pages: Arc<dyn PageProvider>,
    cfg: SoftConfig,
}

impl FaceDialer for SoftDialer {
    fn dial(&mut self, private_data: &[u8]) -> Result<Box<dyn FaceQp>, i32> {
        let port = PORTS
            .lock()
            .iter()
            .find(|p| p.port == self.port)
            .cloned()
            .ok_or(ECONNREFUSED)?;
        let cqs = Notifiers::dialed().ok_or(ENOMEM)?;
        let side = |pd: &[u8], cfg: &SoftConfig| SoftConfig {
            private_data: heapless::Vec::from_slice(pd).unwrap_or_default(),
            ..cfg.clone()
        };
        let (a, b) = pair(
            side(private_data, &self.cfg),
            Arc::clone(&self.pages),
            side(&port.private, &port.cfg),
            Arc::clone(&port.pages),
        )
        .map_err(|_| ENOMEM)?;
        let totals = Arc::new(Totals::default());
        let qp = |q, a_side| -> Result<Qp, i32> {
            Ok(Qp {
                inner: boxed_qp(q).map_err(|_| ENOMEM)?,
                a_side,
                totals: Arc::clone(&totals),
            })
        };
        let (a, b) = (qp(a, true)?, qp(b, false)?);
        let b: Box<dyn FaceQp> = Box::new(SoftFaceQp {
            qp: b,
            side: 1,
            cqs: Arc::clone(&cqs),
        });
        port.pending.lock().push_back(b);
        // SAFETY: live notifier (the port holds it).
        unsafe { krpc_soft_cq_kick(port.cq.0) };
        Ok(Box::new(SoftFaceQp {
            qp: a,
            side: 0,
            cqs,
        }))
    }

    fn resources(&self) -> Resources {
        self.cfg.resources()
    }
}

/// Listen on `port` of the software fabric: `*out` a `struct krpc_listen` for
/// `svc_rdma_listen_create` (which takes it; `krpc_listen_free` closes the port). 0, or
/// `EADDRINUSE` / `ENOMEM`.
///
/// # Safety
/// `ft` from [`krpc_rdma_face_open`], not yet closed, outliving the listener; `out` valid
/// for a write. Process context.
#[no_mangle]
pub unsafe extern "C" fn krpc_rdma_soft_listen(
    ft: *mut FaceTest,
    port: u16,
    out: *mut *mut KrpcListenHandle,
) -> i32 {
    // SAFETY: per the contract.
    let (ft, out) = unsafe { (&mut *ft, &mut *out) };
    *out = core::ptr::null_mut();
    let Some(pages) = ft.fabric.clone() else {
        return ENOMEM;
    };
    let pages: Arc<dyn PageProvider> = pages;
    let cfg = SoftConfig::default();
    let tcfg = TransportConfig::default();
    let Ok(private) = tcfg.private_data_for(&cfg.resources()) else {
        return ENOMEM;
    };
    // SAFETY: plain constructor.
    let cq = unsafe { krpc_soft_cq_create() };
    if cq.is_null() {
        return ENOMEM;
    }
    let sp = Arc::new(SoftPort {
        port,
        pending: FabricLock::new(VecDeque::new()),
        cq: OwnCq(cq),
        private: private.to_bytes(),
        pages: Arc::clone(&pages),
        cfg,
    });
    {
        let mut ports = PORTS.lock();
        if ports.iter().any(|p| p.port == port) {
            return EADDRINUSE;
        }
        if ports.try_reserve(1).is_err() {
            return ENOMEM;
        }
        ports.push(Arc::clone(&sp));
    }
    *out = listen::into_handle(KrpcListen::new(Box::new(SoftListener(sp)), pages, tcfg));
    0
}

/// A `struct krpc_clnt` that dials `port` of the software fabric (for `clnt_rdma_dialed`,
/// which takes it), reconnecting if `reconnect` is nonzero, replies inline up to
/// `max_reply` bytes. The first attempt is made here: 0, or `ECONNREFUSED` (nobody listens
/// on the port) / `ENOMEM`.
///
/// # Safety
/// `ft` from [`krpc_rdma_face_open`], not yet closed, outliving the client; `out` valid for
/// a write. Process context.
#[no_mangle]
pub unsafe extern "C" fn krpc_rdma_soft_dial(
    ft: *mut FaceTest,
    port: u16,
    reconnect: i32,
    max_reply: u32,
    out: *mut *mut KrpcClntHandle,
) -> i32 {
    // SAFETY: per the contract.
    let (ft, out) = unsafe { (&mut *ft, &mut *out) };
    *out = core::ptr::null_mut();
    let Some(pages) = ft.fabric.clone() else {
        return ENOMEM;
    };
    let pages: Arc<dyn PageProvider> = pages;
    let dialer = Box::new(SoftDialer {
        port,
        pages: Arc::clone(&pages),
        cfg: SoftConfig::default(),
    });
    krpc_face::clnt::dialed_handle(dialer, pages, max_reply, reconnect, out)
}

/// A connected pair: `*clnt` for `clnt_rdma_create` (a Requester, NFSv3 READs provisioned
/// with a write chunk) and `*svc` for `svc_rdma_create` (a Responder), both over one software
/// connection, `TransportConfig::default()` on both sides. 0, or `ENOMEM` / `EIO` (the
/// connection failed) with nothing made.
///
/// # Safety
/// `ft` from [`krpc_rdma_face_open`], not yet closed; `clnt` and `svc` valid for writes.
/// Process context (it may sleep in allocations).
#[no_mangle]
pub unsafe extern "C" fn krpc_rdma_face_pair(
    ft: *mut FaceTest,
    clnt: *mut *mut KrpcClntHandle,
    svc: *mut *mut KrpcSvcHandle,
) -> i32 {
    // SAFETY: per the contract (the same as krpc_rdma_face_pair_cb's).
    unsafe { krpc_rdma_face_pair_cb(ft, 0, clnt, svc) }
}

/// [`krpc_rdma_face_pair`] with `cbslots` reverse-direction slots (RFC 8167) reserved at both
/// ends (`max_reverse_requests`; the receive buffers grown to `max_requests + cbslots` and the
/// send buffers by `cbslots`, as `krpc_clnt_dial_cb` does), none enabled yet: the client
/// enables them with `CLSET_RDMA_CBSLOTS`, the server with `svc_rdma_set_cbslots` (the face
/// test's backchannel step). `cbslots` 0: exactly [`krpc_rdma_face_pair`]. 0, or `EINVAL`
/// (more than 1024 receive buffers) / `ENOMEM` / `EIO` with nothing made.
///
/// # Safety
/// As for [`krpc_rdma_face_pair`].
#[no_mangle]
pub unsafe extern "C" fn krpc_rdma_face_pair_cb(
    ft: *mut FaceTest,
    cbslots: u32,
    clnt: *mut *mut KrpcClntHandle,
    svc: *mut *mut KrpcSvcHandle,
) -> i32 {
    // SAFETY: per the contract.
    let ft = unsafe { &mut *ft };
    let base = TransportConfig::default();
    let (cfg, limits) = if cbslots == 0 {
        (base, Limits::default())
    } else {
        let res = SoftConfig::default().resources();
        let need = base.max_requests.checked_add(cbslots);
        let Some(need) = need.filter(|n| *n <= 1024) else {
            return EINVAL;
        };
        let cfg = TransportConfig {
            max_reverse_requests: cbslots,
            ..base
        };
        let limits = Limits {
            recv_bufs: Some(res.recv_bufs.max(need)),
            send_bufs: Some(res.send_bufs.saturating_add(cbslots)),
            ..Limits::default()
        };
        (cfg, limits)
    };
    let setup = Setup {
        req: cfg,
        resp: cfg,
        limits,
    };
    let Some(cqs) = Notifiers::new() else {
        return ENOMEM;
    };
    let max = cfg.max_requests as usize;
    let Ok(p) = Pair::new(&mut ft.fx, &setup) else {
        return EIO;
    };
    let Pair { l, req, resp } = p;
    let (a, b, pa, pb) = (l.a, l.b, l.pa, l.pb);
    let a = Box::new(SoftFaceQp {
        qp: a,
        side: 0,
        cqs: Arc::clone(&cqs),
    });
    let b = Box::new(SoftFaceQp {
        qp: b,
        side: 1,
        cqs,
    });
    let Ok(c) = KrpcClnt::new(a, Box::new(req.into_inner()), pa, hook, max) else {
        return ENOMEM;
    };
    let Ok(s) = KrpcSvc::new(b, Box::new(resp.into_inner()), pb, max) else {
        return ENOMEM;
    };
    // SAFETY: per the contract; the C side takes both (cl_destroy / xp_destroy free them).
    unsafe {
        *clnt = Box::into_raw(c).cast::<KrpcClntHandle>();
        *svc = Box::into_raw(s).cast::<KrpcSvcHandle>();
    }
    0
}

/// Free the face test's state; `*pages_left` the page references its connections still
/// hold (0 unless something leaked: call it after every `CLIENT` and `SVCXPRT` is gone),
/// `*pages_allocated` the pages they allocated.
///
/// # Safety
/// `ft` from [`krpc_rdma_face_open`], not yet closed; the out-pointers valid for writes.
#[no_mangle]
pub unsafe extern "C" fn krpc_rdma_face_close(
    ft: *mut FaceTest,
    pages_left: *mut u64,
    pages_allocated: *mut u64,
) {
    // SAFETY: per the contract: ours again.
    let mut ft = unsafe { Box::from_raw(ft) };
    ft.fx.retire_sides();
    let (fl, fa) = ft
        .fabric
        .as_ref()
        .map_or((0, 0), |p| (p.outstanding(), p.allocs()));
    // SAFETY: per the contract.
    unsafe {
        *pages_left = ft.fx.pages_left + fl;
        *pages_allocated = ft.fx.pages_allocated + fa;
    }
}

/// The malformed calls of [`MALFORMED_CALLS`], then a good NULL call, sent by the core's
/// Requester (raw words: `clnt_rdma` cannot send them) to a new `svc_rdma` transport
/// registered with `pool`, whose threads (svc.c's `svc_run`) must be serving it, with the
/// NFSv3 program registered (`svc_reg`). Every reply is compared word for word; then the
/// connection is closed (the pool's threads see the transport die and unregister it).
/// `*xprt` is the transport (NULL if none was made), with the creator's reference the caller
/// must drop (`SVC_RELEASE`). 0 and a line saying what was answered in `line`
/// (NUL-terminated, truncated), or `-EIO` and the failure there.
///
/// # Safety
/// `ft` from [`krpc_rdma_face_open`], not yet closed; `pool` a live `SVCPOOL` that outlives
/// the transport; `xprt` valid for a write; `line` valid for writes of `len` bytes.
/// Process context (it sleeps).
#[no_mangle]
pub unsafe extern "C" fn krpc_rdma_face_malformed(
    ft: *mut FaceTest,
    pool: *mut FbsdSvcpool,
    xprt: *mut *mut FbsdSvcxprt,
    line: *mut u8,
    len: usize,
) -> i32 {
    // SAFETY: per the contract.
    let ft = unsafe { &mut *ft };
    // SAFETY: per the contract.
    unsafe { *xprt = core::ptr::null_mut() };
    // SAFETY: per the contract.
    let r = unsafe { malformed(ft, pool, &mut *xprt) };
    let (rc, text) = match r {
        Ok(n) => (
            0,
            format!("{n} malformed calls answered by the transport, then NULL"),
        ),
        Err(e) => (-EIO, e),
    };
    if !line.is_null() && len > 0 {
        let n = text.len().min(len - 1);
        // SAFETY: `line` holds `len` bytes (the contract); `n + 1 <= len`.
        unsafe {
            core::ptr::copy_nonoverlapping(text.as_ptr(), line, n);
            *line.add(n) = 0;
        }
    }
    rc
}

/// [`krpc_rdma_face_malformed`]'s run: how many malformed calls were answered as they must;
/// `*xprt` the transport it made.
///
/// # Safety
/// `pool` as for [`krpc_rdma_face_malformed`].
unsafe fn malformed(
    ft: &mut FaceTest,
    pool: *mut FbsdSvcpool,
    xprt: &mut *mut FbsdSvcxprt,
) -> Result<usize, String> {
    let cqs = Notifiers::new().ok_or("no memory for the notifiers")?;
    let cfg = TransportConfig::default();
    let max = cfg.max_requests as usize;
    let Pair { l, req, resp } = Pair::with(&mut ft.fx, cfg).map_err(|e| format!("{e}"))?;
    let mut a = SoftFaceQp {
        qp: l.a,
        side: 0,
        cqs: Arc::clone(&cqs),
    };
    let b = Box::new(SoftFaceQp {
        qp: l.b,
        side: 1,
        cqs,
    });
    let s = KrpcSvc::new(b, Box::new(resp.into_inner()), l.pb, max)
        .map_err(|e| format!("KrpcSvc::new: {e:?}"))?;
    // SAFETY: `pool` per the contract.
    *xprt = unsafe { s.into_xprt(pool) }.ok_or("svc_rdma_create failed")?;
    // SAFETY: the glue's wake is callable from any context for the module's lifetime.
    unsafe { FaceQp::set_upcall(&mut a, GlueSleep.upcall(), core::ptr::null_mut()) };
    let mut req = req.into_inner();
    let (null, null_want) = NULL_AFTER_MALFORMED;
    let cases = MALFORMED_CALLS.iter().copied().chain(core::iter::once((
        "a NULL call after them",
        null,
        null_want,
    )));
    for (what, words, want) in cases {
        let got = raw_call(&mut req, &mut a, words).map_err(|e| format!("{what}: {e}"))?;
        if got.as_slice() != want {
            return Err(format!("{what}: answered {got:x?}, want {want:x?}"));
        }
    }
    drop(req);
    drop(a);
    Ok(MALFORMED_CALLS.len())
}

/// One call of raw RPC words through `req`; the reply's words (15 s at most).
fn raw_call(req: &mut Requester, a: &mut SoftFaceQp, words: &[u32]) -> Result<Vec<u32>, String> {
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(words.len() * 4)
        .map_err(|_| "no memory")?;
    for w in words {
        bytes.extend_from_slice(&w.to_be_bytes());
    }
    let xid = words.first().copied().unwrap_or_default();
    let call = Chain::from_bytes(&bytes).map_err(|e| format!("{e:?}"))?;
    req.call(a, call, ReplySpec::inline(1024))
        .map_err(|e| format!("call: {e:?}"))?;
    for _ in 0..300 {
        let gen = GlueSleep.generation();
        let mut reply = None;
        req.poll(a, &mut |e| {
            if let RequesterEvent::Reply { xid: x, reply: r } = e {
                if x == xid {
                    reply = Some(r);
                }
            }
        });
        if let Some(r) = reply {
            let v = r.to_vec().map_err(|e| format!("{e:?}"))?;
            return Ok(v
                .chunks_exact(4)
                .map(|c| <[u8; 4]>::try_from(c).map_or(0, u32::from_be_bytes))
                .collect());
        }
        GlueSleep.sleep(gen, 50);
    }
    Err("no reply in 15 s".into())
}
