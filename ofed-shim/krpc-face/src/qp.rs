//! The queue pair a face connection runs over: a [`Provider`] whose completion
//! notification calls the C side's upcall ([`FaceQp`]). In a kernel with an RDMA device it
//! is the verbs backend ([`OfedQp`]: the CQ's completion handler); in one without (FreeBSD
//! has no software RDMA device), the software provider with a deferred notification that the
//! kernel's test glue supplies (`ofed-testkit`'s `face` feature). Both [`KrpcClnt`] and
//! [`KrpcSvc`] hold a `Box<dyn FaceQp>`: the provider is chosen when the connection is made,
//! and the core's generic code sees one `Provider` (the boxed one).
//!
//! [`KrpcClnt`]: crate::clnt::KrpcClnt
//! [`KrpcSvc`]: crate::svc::KrpcSvc

use core::ffi::c_void;

use krpc_rdma::provider::Provider;
use krpc_rdma::transport::kernel::Errno;
use ofed_shim::{OfedError, OfedQp, SockaddrStorage};

/// A [`Provider`] whose completions (and connection events) are announced by a call of an
/// upcall `f(arg)` from a context that must not sleep, once armed.
pub trait FaceQp: Provider + Send {
    /// Route the notification to `f(arg)`, replacing the previous one; returns once no call
    /// of the previous upcall is still running.
    ///
    /// # Safety
    /// `f` must be callable with `arg` from any context until the queue pair is dropped or
    /// the upcall replaced.
    unsafe fn set_upcall(&mut self, f: extern "C" fn(*mut c_void), arg: *mut c_void);

    /// Arm the notification for the next completion (after a poll found nothing). A
    /// provider may also call the upcall without it (a spurious upcall only wakes a poller).
    fn arm(&mut self);

    /// The connection's (local, remote) addresses (`xp_ltaddr` / `xp_rtaddr`), if it has
    /// any (the software provider's connection has none).
    fn addrs(&self) -> Option<(SockaddrStorage, SockaddrStorage)> {
        None
    }

    /// Accept the connection request this queue pair came from, replying with
    /// `private_data` (RFC 8797); post receives first. `Err` is an errno. A queue pair that
    /// was never a request (the software provider's pairs are connected when made) has
    /// nothing to do.
    fn accept(&mut self, private_data: &[u8]) -> Result<(), i32> {
        let _ = private_data;
        Ok(())
    }
}

impl FaceQp for OfedQp {
    unsafe fn set_upcall(&mut self, f: extern "C" fn(*mut c_void), arg: *mut c_void) {
        // SAFETY: forwarded with the same contract.
        unsafe { OfedQp::set_upcall(self, f, arg) };
    }

    fn arm(&mut self) {
        OfedQp::arm(self);
    }

    fn addrs(&self) -> Option<(SockaddrStorage, SockaddrStorage)> {
        OfedQp::addrs(self)
    }

    fn accept(&mut self, private_data: &[u8]) -> Result<(), i32> {
        OfedQp::accept(self, private_data).map_err(|e| match e {
            OfedError::Sys { errno, .. } => errno,
            OfedError::NoMemory => Errno::ENOMEM.freebsd(),
            OfedError::Config(_) => Errno::EINVAL.freebsd(),
        })
    }
}
