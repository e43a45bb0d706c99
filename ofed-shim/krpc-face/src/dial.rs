//! Connection set-up from C and reconnection for `clnt_rdma` (issue 24): what FreeBSD's
//! `clnt_reconnect` gives NFS over TCP, over RPC-over-RDMA.
//!
//! A [`FaceDialer`] makes connections to one server address: [`OfedDialer`] through
//! rdma_cm (`OfedQp::connect`), a test's dialer over the software provider. A
//! [`KrpcClnt`](crate::clnt::KrpcClnt) made by [`KrpcClnt::dialed`](crate::clnt::KrpcClnt::dialed)
//! holds its dialer and a [`Link`]: the connection is made by the client itself, and, when
//! it reconnects, a lost connection is made again and every call owed a reply is sent again
//! on the new one **with the same XID** ([`Reconnect`], the core's kept copies: page data
//! shared, never copied), so each call gets exactly one reply, and a server's duplicate
//! request cache sees a retransmission, not a new request. Calls made while no connection
//! is up are held and sent once one is ([`Reconnect::hold`]).
//!
//! Sans-I/O as the core is: the client never sleeps or reads a clock. The C side passes the
//! time (`now_ms`, from `ticks`) to `krpc_clnt_link`, which starts an attempt when the
//! backoff ([`Reconnect::backoff_ms`]: none after a loss, then 100 ms doubling to 30 s) has
//! passed and otherwise says how long to wait; the C side sleeps that long at most (an
//! upcall wakes it sooner).

use alloc::boxed::Box;
use core::ffi::c_void;

use krpc_rdma::provider::Resources;
use krpc_rdma::transport::kernel::Errno;
use krpc_rdma::transport::Reconnect;
use ofed_shim::{OfedConfig, OfedError, OfedQp, SockaddrStorage};

use crate::qp::FaceQp;

/// FreeBSD's `ENOMEM`, for a dialer that failed without a C errno.
const ENOMEM: i32 = Errno::ENOMEM.freebsd();
/// FreeBSD's `EINVAL`.
const EINVAL: i32 = Errno::EINVAL.freebsd();

/// Makes connections to one server.
pub trait FaceDialer: Send {
    /// Start a connection whose connect request carries `private_data` (RFC 8797): a
    /// queue pair whose first connection event is `Established` or `Disconnected` (the
    /// attempt failed). `Err` is an errno (the C wrapper's, or FreeBSD's `ENOMEM`).
    fn dial(&mut self, private_data: &[u8]) -> Result<Box<dyn FaceQp>, i32>;

    /// The resources of the queue pairs it makes (what a `Requester` is sized for).
    fn resources(&self) -> Resources;
}

/// Connections through rdma_cm to one address, in one vnet.
pub struct OfedDialer {
    /// The `struct vnet *` to connect in (NULL: the thread's), as an address.
    vnet: usize,
    addr: SockaddrStorage,
    cfg: OfedConfig,
}

impl core::fmt::Debug for OfedDialer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("OfedDialer").finish_non_exhaustive()
    }
}

impl OfedDialer {
    /// A dialer to the `len` bytes of `struct sockaddr` at `addr` (copied), in `vnet`.
    ///
    /// # Safety
    /// `addr` points to `len` readable bytes; `vnet` is NULL or a `struct vnet *` that
    /// outlives the dialer.
    ///
    /// # Errors
    /// `EINVAL` (FreeBSD's) for a length of 0 or above 128.
    pub unsafe fn new(
        vnet: *mut c_void,
        addr: *const c_void,
        len: usize,
        cfg: OfedConfig,
    ) -> Result<Self, i32> {
        let mut sa = SockaddrStorage::default();
        let dst = match sa.bytes.get_mut(..len) {
            Some(d) if !addr.is_null() && len > 0 => d,
            _ => return Err(EINVAL),
        };
        // SAFETY: the caller vouches for `len` readable bytes at `addr`.
        let src = unsafe { core::slice::from_raw_parts(addr.cast::<u8>(), len) };
        dst.copy_from_slice(src);
        Ok(OfedDialer {
            vnet: vnet as usize,
            addr: sa,
            cfg,
        })
    }
}

impl FaceDialer for OfedDialer {
    fn dial(&mut self, private_data: &[u8]) -> Result<Box<dyn FaceQp>, i32> {
        // SAFETY: `vnet` and the address per `new`'s contract (the address is our copy).
        let made = unsafe {
            OfedQp::connect(
                self.vnet as *mut c_void,
                self.addr.bytes.as_ptr().cast(),
                &self.cfg,
                private_data,
            )
        };
        boxed(made)
    }

    fn resources(&self) -> Resources {
        self.cfg.resources()
    }
}

/// `q` on the heap (a frame of its own: an `OfedQp` is 880 bytes).
#[inline(never)]
fn boxed(q: Result<OfedQp, OfedError>) -> Result<Box<dyn FaceQp>, i32> {
    match q {
        Ok(q) => Ok(Box::new(q)),
        Err(OfedError::Sys { errno, .. }) => Err(errno),
        Err(OfedError::NoMemory) => Err(ENOMEM),
        Err(OfedError::Config(_)) => Err(EINVAL),
    }
}

/// Where the client's connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Connected: calls go out.
    Up,
    /// An attempt is under way.
    Connecting,
    /// No connection: the last one was lost, or the last attempt failed.
    Down,
}

impl LinkState {
    /// `KRPC_CLNT_UP` / `_CONNECTING` / `_DOWN`.
    pub fn code(self) -> i32 {
        match self {
            LinkState::Up => crate::ffi::CLNT_UP,
            LinkState::Connecting => crate::ffi::CLNT_CONNECTING,
            LinkState::Down => crate::ffi::CLNT_DOWN,
        }
    }
}

/// A dialed client's connection management: its dialer, its state, and (reconnecting) the
/// calls owed a reply.
pub struct Link {
    pub(crate) dialer: Box<dyn FaceDialer>,
    /// `Some`: reconnect after a loss, resending the owed calls.
    pub(crate) rc: Option<Reconnect>,
    pub(crate) state: LinkState,
    /// Down: the earliest time (ms, the C side's clock) of the next attempt, fixed when the
    /// C side first asks after the failure.
    pub(crate) not_before: Option<u64>,
    /// The last failed attempt's errno (0: none).
    pub(crate) errno: i32,
    /// Connections made.
    pub(crate) connects: u64,
}

impl core::fmt::Debug for Link {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Link")
            .field("state", &self.state)
            .field("owed", &self.rc.as_ref().map(Reconnect::owed))
            .field("errno", &self.errno)
            .field("connects", &self.connects)
            .finish_non_exhaustive()
    }
}

impl Link {
    /// A link over `dialer`, not yet dialed; `rc` for a reconnecting client.
    pub fn new(dialer: Box<dyn FaceDialer>, rc: Option<Reconnect>) -> Self {
        Link {
            dialer,
            rc,
            state: LinkState::Down,
            not_before: None,
            errno: 0,
            connects: 0,
        }
    }

    /// Whether the next attempt is due at `now_ms`: `Ok(())`, or `Err(ms)` to wait. Only
    /// for a reconnecting link that is down; fixes the time of the attempt at the first
    /// question after a loss or failure.
    pub(crate) fn due(&mut self, now_ms: u64) -> Result<(), u32> {
        let backoff = self.rc.as_ref().map_or(0, Reconnect::backoff_ms);
        let at = *self
            .not_before
            .get_or_insert(now_ms.saturating_add(u64::from(backoff)));
        if now_ms >= at {
            self.not_before = None;
            Ok(())
        } else {
            Err(u32::try_from(at - now_ms).unwrap_or(u32::MAX))
        }
    }

    /// An attempt failed (refused, unreachable, or the dialer could not start one).
    pub(crate) fn failed(&mut self, errno: i32) {
        self.state = LinkState::Down;
        self.errno = errno;
        self.not_before = None;
        if let Some(rc) = &mut self.rc {
            rc.attempt_failed();
        }
    }

    /// Failed attempts since the last connection.
    pub fn failed_attempts(&self) -> u32 {
        self.rc.as_ref().map_or(0, Reconnect::failed_attempts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use krpc_rdma::transport::TransportConfig;

    struct Never;
    impl FaceDialer for Never {
        fn dial(&mut self, _: &[u8]) -> Result<Box<dyn FaceQp>, i32> {
            Err(61)
        }
        fn resources(&self) -> Resources {
            OfedConfig::default().resources()
        }
    }

    /// The first attempt after a loss is due at once; after failures the wait doubles from
    /// 100 ms, counted from the first question, and the time is kept between questions.
    #[test]
    fn attempts_are_due_after_the_backoff_counted_from_the_first_question() {
        let rc = Reconnect::new(&TransportConfig::default()).unwrap_or_else(|_| panic!());
        let mut l = Link::new(Box::new(Never), Some(rc));
        assert_eq!(l.due(1000), Ok(()));
        l.failed(61);
        assert_eq!(
            (l.state, l.errno, l.failed_attempts()),
            (LinkState::Down, 61, 1)
        );
        assert_eq!(l.due(5000), Err(100));
        assert_eq!(l.due(5060), Err(40), "the time is kept");
        assert_eq!(l.due(5100), Ok(()));
        l.failed(61);
        assert_eq!(l.due(6000), Err(200));
        assert_eq!(l.due(6200), Ok(()));
    }
}
