//! The FreeBSD krpc face of krpc-rdma: the Rust halves of the kernel RPC's transports over
//! the verbs backend ([`ofed_shim::OfedQp`], or any [`qp::FaceQp`]), what svc.c and the NFS
//! client call through
//! `CLIENT`/`SVCXPRT` (xprtrdma's transport.c and svcrdma's svc_rdma_transport.c, in
//! FreeBSD's shape).
//!
//! * [`clnt`]: `clnt_rdma` (`c/krpc_rdma_clnt.c` + this): one connection's
//!   [`Requester`](krpc_rdma::transport::Requester) behind `struct clnt_ops`.
//! * [`svc`]: `svc_rdma` (`c/krpc_rdma_svc.c` + this): one connection's
//!   [`Responder`](krpc_rdma::transport::Responder) through the core's
//!   [`ServerConnection`](krpc_rdma::transport::ServerConnection) behind `struct xp_ops`.
//! * [`mbuf_bridge`]: FreeBSD mbuf chains (M_EXTPG page mbufs, the DDP marker) to and from
//!   the core's [`mbuf::Chain`] (`c/krpc_rdma_mbuf.c` + this), without copying a page.
//! * [`ffi`]: the face's C boundary — the three headers `c/krpc_rdma_{mbuf,clnt,svc}.h`,
//!   each with its own ABI version (the verbs boundary is [`ofed_shim::ffi`]).
//!
//! The C halves live in `ofed-shim/c/` beside the verbs wrapper: that directory is the
//! FreeBSD module's C (`ofed-shim/kmod/Makefile` builds it, `../shared/freebsd-kpi`
//! compiles every file in it against FreeBSD 14.2's headers). Tests: `ofed-testkit` (the
//! emulation of svc.c, `CLIENT` and mbufs, over rxe0).
#![cfg_attr(not(test), no_std)]
#![deny(clippy::undocumented_unsafe_blocks)]

extern crate alloc;

pub mod clnt;
pub mod dial;
pub mod ffi;
mod head;
pub mod listen;
pub mod mbuf_bridge;
pub mod nfs_hook;
pub mod qp;
pub mod svc;

pub use mbuf_bridge::{BridgeError, MbufBridge, MbufChain};

/// The C halves the host unit tests do not link (`c/krpc_rdma_mbuf.c`), stubbed; in a
/// directory of its own so that xtask's list of the face's C-facing entry points
/// (`kobj::EXPORTS`, checked against the `#[no_mangle]` functions of `src/*.rs`) does not
/// take them for exports.
#[cfg(test)]
mod c_stubs;
