//! The libibverbs / librdmacm [`Provider`](krpc_rdma::provider::Provider): the same `no_std`
//! core that runs over the software provider, here over a real RDMA device (Soft-RoCE `rxe0`
//! in the project's VM).
//!
//! * [`device::Device`]: the device context (from librdmacm's device list, so it is the very
//!   context `rdma_cm` ids resolve to) and one protection domain.
//! * [`arena::VerbsArena`]: a registered page arena implementing [`mbuf::PageProvider`]; one
//!   mmap'd region, one MR, page addresses are virtual addresses.
//! * [`qp::VerbsQp`]: one RC queue pair implementing the provider trait; per-RPC registrations
//!   are type-2 memory windows ([`RegMode::MemoryWindow`], default) or, as a fallback and for
//!   comparison, one `ibv_reg_mr` per contiguous run ([`RegMode::MemoryRegion`]).
//! * [`cm`]: connection set-up through `rdma_cm` ([`cm::connect`], [`cm::VerbsListener`]).
//! * [`wait`]: block until one of several queue pairs makes progress (short spin, then
//!   `poll(2)` on the completion channel and CM event channel fds).
//!
//! The queue-pair logic is the core's shared `krpc_rdma::provider::binding`; this crate holds
//! only its libibverbs backend and every `unsafe` of the provider (each block with a
//! `// SAFETY:` comment, enforced by `clippy::undocumented_unsafe_blocks`).
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod accept;
pub mod arena;
pub mod cm;
pub mod device;
pub mod qp;
pub mod signals;
pub mod wait;

use krpc_rdma::provider::Resources;
use std::fmt;
use std::net::SocketAddr;

/// Default RPC-over-RDMA port (IANA "nfsrdma", RFC 8267).
pub const DEFAULT_PORT: u16 = 20049;

/// How per-RPC registrations are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegMode {
    /// Type-2 memory windows bound over the arena MR by an `IBV_WR_BIND_MW` work request
    /// (fresh rkey key byte each time), revoked by `IBV_WR_LOCAL_INV` or the peer's Send With
    /// Invalidate. One window per contiguous run of fragments.
    MemoryWindow,
    /// One `ibv_reg_mr` per contiguous run, `ibv_dereg_mr` to revoke (synchronous, no work
    /// request). The peer must not use Send With Invalidate on these rkeys (advertise
    /// `accept_remote_invalidate = false`).
    MemoryRegion,
}

/// Resources and connection parameters of one [`qp::VerbsQp`].
///
/// The device clamps [`Resources::max_sge`] and [`Resources::max_rd_atomic`] (the latter
/// for Reads as initiator and as responder); the hardware send queue is deeper than
/// [`Resources::max_send_wr`] by [`VerbsConfig::internal_wrs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsConfig {
    /// Buffers, queue depths and limits reported to the core ([`Resources::default`]
    /// unless set).
    pub resources: Resources,
    /// Extra send-queue slots for the provider's internal work requests (memory-window binds
    /// and invalidations).
    pub internal_wrs: u32,
    /// Memory windows allocated at most (a registration uses one per contiguous run).
    pub max_mws: u32,
    /// Registration method.
    pub reg_mode: RegMode,
    /// Address and route resolution timeout, and the wait for the connection, in ms.
    pub timeout_ms: u32,
}

impl Default for VerbsConfig {
    /// [`Resources::default`], 128 internal send-queue entries, 1024 windows, memory
    /// windows, 15 s timeouts (above the IB CM's ~4.3 s retry of a lost REQ/REP/RTU, twice
    /// over).
    fn default() -> Self {
        VerbsConfig::with(Resources::default())
    }
}

impl VerbsConfig {
    /// The default configuration with `resources`.
    pub fn with(resources: Resources) -> Self {
        VerbsConfig {
            resources,
            internal_wrs: 128,
            max_mws: 1024,
            reg_mode: RegMode::MemoryWindow,
            timeout_ms: 15_000,
        }
    }

    /// The resources a queue pair with this configuration reports (before clamping to the
    /// device: [`qp::VerbsQp::resources`](krpc_rdma::provider::Provider::resources) gives the
    /// final values, which are never larger).
    pub fn resources(&self) -> Resources {
        self.resources
    }
}

/// Why a verbs operation failed. Displays as one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerbsError {
    /// No RDMA device at all.
    NoDevice,
    /// No device of that name.
    DeviceNotFound(String),
    /// A library call failed with `errno`.
    Sys {
        /// The call.
        what: &'static str,
        /// `errno` (0 if the call gave none).
        errno: i32,
    },
    /// The address could not be resolved to an RDMA device.
    AddrUnresolved(SocketAddr),
    /// No route to the address.
    RouteUnresolved(SocketAddr),
    /// The peer refused the connection (no listener, or rejected).
    Refused(SocketAddr),
    /// The peer was unreachable.
    Unreachable(SocketAddr),
    /// Waiting for a CM event timed out.
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// Peer or local address.
        addr: SocketAddr,
    },
    /// The connection manager reported something unexpected.
    UnexpectedEvent {
        /// What was waited for.
        wanted: &'static str,
        /// The event name.
        got: String,
        /// Its status.
        status: i32,
    },
    /// The address resolved to a device other than the one the arena is registered on.
    WrongDevice(SocketAddr),
    /// A configuration value the device cannot satisfy.
    Config(&'static str),
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerbsError::NoDevice => f.write_str("no RDMA device (is rdma_rxe loaded and rxe0 up?)"),
            VerbsError::DeviceNotFound(n) => write!(f, "RDMA device {n:?} not found"),
            VerbsError::Sys { what, errno } => {
                write!(
                    f,
                    "{what} failed: {}",
                    std::io::Error::from_raw_os_error(*errno)
                )
            }
            VerbsError::AddrUnresolved(a) => write!(f, "cannot resolve {a} to an RDMA device"),
            VerbsError::RouteUnresolved(a) => write!(f, "no RDMA route to {a}"),
            VerbsError::Refused(a) => write!(f, "connection to {a} refused"),
            VerbsError::Unreachable(a) => write!(f, "{a} unreachable"),
            VerbsError::Timeout { what, addr } => {
                write!(f, "timed out waiting for {what} ({addr})")
            }
            VerbsError::UnexpectedEvent {
                wanted,
                got,
                status,
            } => {
                write!(f, "waiting for {wanted}: got {got} (status {status})")
            }
            VerbsError::WrongDevice(a) => {
                write!(f, "{a} resolves to another RDMA device than the arena's")
            }
            VerbsError::Config(m) => write!(f, "configuration: {m}"),
        }
    }
}

impl std::error::Error for VerbsError {}

/// `errno` of the last failed call.
pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A [`VerbsError::Sys`] for `what` with the current `errno`.
pub(crate) fn sys(what: &'static str) -> VerbsError {
    VerbsError::Sys {
        what,
        errno: errno(),
    }
}

/// Whether this machine has an RDMA device (`/sys/class/infiniband` non-empty).
pub fn rdma_present() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}
