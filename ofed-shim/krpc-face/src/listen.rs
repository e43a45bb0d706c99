//! The Rust half of `svc_rdma_listen`, the rendezvous transport (issue 24): a listening
//! rdma_cm id whose connection requests become `svc_rdma` transports, as
//! `svc_vc_rendezvous_recv` turns a listening socket's connections into `svc_vc` ones.
//!
//! The C side (`c/krpc_rdma_svc.c`) owns the rendezvous `SVCXPRT`; its `xp_recv` calls
//! `krpc_listen_accept`, which takes the next request, makes its [`Responder`] (the
//! receives posted before the accept, RFC 8797 private data in the reply) and returns a
//! [`KrpcSvc`] for `svc_rdma_create`. The listener's upcall (a request queued, the device
//! gone) only marks the rendezvous transport active. A request that cannot be served (no
//! memory, the accept failed) is rejected (its queue pair dropped: rdma_cm rejects it) and
//! counted; the listener goes on.

use alloc::boxed::Box;
use alloc::sync::Arc;
use core::ffi::c_void;

use krpc_rdma::provider::Resources;
use krpc_rdma::transport::kernel::Errno;
use krpc_rdma::transport::{Responder, TransportConfig};
use mbuf::PageProvider;
use ofed_shim::{KernelPages, OfedConfig, OfedListener, OfedQp};

use crate::ffi::{self, KrpcListenHandle, KrpcListenStats, KrpcSvcHandle};
use crate::qp::FaceQp;
use crate::svc::KrpcSvc;

const ENOMEM: i32 = Errno::ENOMEM.freebsd();
const EINVAL: i32 = Errno::EINVAL.freebsd();

/// Where connection requests come from.
pub trait FaceListener: Send {
    /// The next request, if any: a queue pair to accept ([`FaceQp::accept`]). `Some(Err)`
    /// with an errno once the listener is dead (its device gone): drop it.
    fn next_request(&mut self) -> Option<Result<Box<dyn FaceQp>, i32>>;

    /// The resources of the queue pairs it makes (what a `Responder` is sized for).
    fn resources(&self) -> Resources;

    /// Call `f(arg)` when a request is queued (or the listener dies); `None`: no upcall.
    ///
    /// # Safety
    /// `f` callable with `arg` from any context until the listener is dropped or the upcall
    /// replaced.
    unsafe fn set_upcall(&mut self, f: Option<extern "C" fn(*mut c_void)>, arg: *mut c_void);
}

impl FaceListener for OfedListener {
    fn next_request(&mut self) -> Option<Result<Box<dyn FaceQp>, i32>> {
        // Through an opaque pointer: the 880-byte `OfedQp` stays out of this frame.
        let next: fn(&mut OfedListener) -> Option<Result<OfedQp, ofed_shim::OfedError>> =
            core::hint::black_box(OfedListener::next_request);
        boxed(next(self)?)
    }

    fn resources(&self) -> Resources {
        self.config().resources()
    }

    unsafe fn set_upcall(&mut self, f: Option<extern "C" fn(*mut c_void)>, arg: *mut c_void) {
        // SAFETY: forwarded with the same contract.
        unsafe { OfedListener::set_upcall(self, f, arg) };
    }
}

/// `q` on the heap (a frame of its own).
#[inline(never)]
fn boxed(q: Result<OfedQp, ofed_shim::OfedError>) -> Option<Result<Box<dyn FaceQp>, i32>> {
    Some(match q {
        Ok(q) => Ok(Box::new(q)),
        Err(ofed_shim::OfedError::Sys { errno, .. }) => Err(errno),
        Err(ofed_shim::OfedError::NoMemory) => Err(ENOMEM),
        Err(ofed_shim::OfedError::Config(_)) => Err(EINVAL),
    })
}

/// What `accept` found.
pub enum Accepted {
    /// A new connection's server state, for `svc_rdma_create`.
    Svc(Box<KrpcSvc>),
    /// No request pending (or the ones pending were rejected).
    None,
    /// The listener is dead (errno).
    Died(i32),
}

/// The rendezvous transport's state (the C side's `struct krpc_listen`).
pub struct KrpcListen {
    l: Box<dyn FaceListener>,
    pages: Arc<dyn PageProvider>,
    tcfg: TransportConfig,
    stats: KrpcListenStats,
}

impl core::fmt::Debug for KrpcListen {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KrpcListen")
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl KrpcListen {
    /// The state over `l`; each connection's Responder gets `tcfg` and allocates from
    /// `pages`.
    pub fn new(
        l: Box<dyn FaceListener>,
        pages: Arc<dyn PageProvider>,
        tcfg: TransportConfig,
    ) -> Box<Self> {
        Box::new(KrpcListen {
            l,
            pages,
            tcfg,
            stats: KrpcListenStats::default(),
        })
    }

    /// Counters.
    pub fn stats(&self) -> KrpcListenStats {
        self.stats
    }

    /// Take requests until one is accepted, none is pending, or the listener died.
    pub fn accept(&mut self) -> Accepted {
        loop {
            let mut qp = match self.l.next_request() {
                None => return Accepted::None,
                Some(Err(e)) => return Accepted::Died(e),
                Some(Ok(qp)) => qp,
            };
            match self.serve(&mut qp) {
                Some(resp) => {
                    let max = self.tcfg.max_requests.max(1) as usize;
                    match KrpcSvc::new(qp, resp, Arc::clone(&self.pages), max) {
                        Ok(svc) => {
                            self.stats.accepted += 1;
                            return Accepted::Svc(svc);
                        }
                        // The connection is dropped (disconnected) with the state.
                        Err(_) => self.stats.refused += 1,
                    }
                }
                // Dropping the queue pair rejects the request.
                None => self.stats.refused += 1,
            }
        }
    }

    /// A request's Responder, its receives posted, the request accepted; `None` when it
    /// cannot be served.
    #[inline(never)]
    fn serve(&mut self, qp: &mut Box<dyn FaceQp>) -> Option<Box<Responder>> {
        let resp = Responder::new(self.tcfg, self.l.resources(), Arc::clone(&self.pages)).ok()?;
        let mut resp = Box::new(resp);
        resp.post_receives(qp);
        qp.accept(&resp.private_data()).ok()?;
        Some(resp)
    }
}

/// The state behind a C handle.
///
/// # Safety
/// `h` came from `krpc_listen_create` and is not freed; the caller holds the rendezvous
/// transport's lock (no other reference is live).
unsafe fn state<'a>(h: *mut KrpcListenHandle) -> &'a mut KrpcListen {
    // SAFETY: per the function's contract.
    unsafe { &mut *h.cast::<KrpcListen>() }
}

/// `krpc_listen_create` (see `c/krpc_rdma_svc.h`): listen on the `len`-byte
/// `struct sockaddr` at `addr` in `vnet`.
///
/// # Safety
/// `addr` points to `len` readable bytes (the C side copies it); `vnet` NULL or a live
/// `struct vnet *`; `out` a valid out-pointer.
#[no_mangle]
pub unsafe extern "C" fn krpc_listen_create(
    vnet: *mut c_void,
    addr: *const c_void,
    len: u32,
    out: *mut *mut KrpcListenHandle,
) -> i32 {
    // SAFETY: per the function's contract.
    let out = unsafe { &mut *out };
    *out = core::ptr::null_mut();
    if addr.is_null() || len == 0 {
        return EINVAL;
    }
    // SAFETY: per the function's contract (`len` is what the C side measured; rdma_cm reads
    // the sockaddr by its family).
    let l = match unsafe { OfedListener::bind(vnet, addr, &OfedConfig::default()) } {
        Ok(l) => l,
        Err(ofed_shim::OfedError::Sys { errno, .. }) => return errno,
        Err(ofed_shim::OfedError::NoMemory) => return ENOMEM,
        Err(ofed_shim::OfedError::Config(_)) => return EINVAL,
    };
    let pages: Arc<dyn PageProvider> = Arc::new(KernelPages::new());
    let h = KrpcListen::new(Box::new(l), pages, TransportConfig::default());
    *out = Box::into_raw(h).cast::<KrpcListenHandle>();
    0
}

/// `krpc_listen_accept` (see `c/krpc_rdma_svc.h`).
///
/// # Safety
/// `h` as for `state`; `out` a valid out-pointer.
#[no_mangle]
pub unsafe extern "C" fn krpc_listen_accept(
    h: *mut KrpcListenHandle,
    out: *mut *mut KrpcSvcHandle,
    err: *mut i32,
) -> i32 {
    // SAFETY: per the function's contract.
    let (s, out, err) = unsafe { (state(h), &mut *out, &mut *err) };
    *out = core::ptr::null_mut();
    *err = 0;
    match s.accept() {
        Accepted::Svc(svc) => {
            *out = Box::into_raw(svc).cast::<KrpcSvcHandle>();
            ffi::LISTEN_NEW
        }
        Accepted::None => ffi::LISTEN_NONE,
        Accepted::Died(e) => {
            *err = e;
            ffi::LISTEN_DIED
        }
    }
}

/// `krpc_listen_set_upcall` (see `c/krpc_rdma_svc.h`).
///
/// # Safety
/// `h` as for `state`; `f(arg)` callable from any context until the listener is freed or
/// the upcall replaced.
#[no_mangle]
pub unsafe extern "C" fn krpc_listen_set_upcall(
    h: *mut KrpcListenHandle,
    f: Option<extern "C" fn(*mut c_void)>,
    arg: *mut c_void,
) {
    // SAFETY: per the function's contract.
    unsafe { state(h).l.set_upcall(f, arg) };
}

/// `krpc_listen_get_stats` (see `c/krpc_rdma_svc.h`).
///
/// # Safety
/// `h` as for `state`; `out` a valid out-pointer.
#[no_mangle]
pub unsafe extern "C" fn krpc_listen_get_stats(
    h: *mut KrpcListenHandle,
    out: *mut KrpcListenStats,
) {
    // SAFETY: per the function's contract.
    unsafe { *out = state(h).stats() };
}

/// `krpc_listen_free` (see `c/krpc_rdma_svc.h`): the listener is destroyed (pending
/// requests rejected).
///
/// # Safety
/// `h` as for `state`; not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn krpc_listen_free(h: *mut KrpcListenHandle) {
    // SAFETY: `h` came from Box::into_raw in krpc_listen_create (or a test's) and is given
    // back once.
    drop(unsafe { Box::from_raw(h.cast::<KrpcListen>()) });
}

/// A listener handle over `l` for a test's C side (the software provider's listener in
/// FreeBSD's face test); the C side frees it with `krpc_listen_free`.
pub fn into_handle(l: Box<KrpcListen>) -> *mut KrpcListenHandle {
    Box::into_raw(l).cast::<KrpcListenHandle>()
}
