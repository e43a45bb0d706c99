//! The verbs backend: the krpc-rdma core bound to a kernel's OFED verbs KPI (FreeBSD's
//! `sys/ofed`, and Linux's verbs, which FreeBSD's OFED mirrors through LinuxKPI).
//!
//! One of three crates under `ofed-shim/` (split along xprtrdma's seams: verbs.c/frwr_ops.c
//! apart from transport.c): this one is the verbs layer; `krpc-face` is the FreeBSD krpc face
//! (`clnt_rdma`, `svc_rdma`, the mbuf bridge) over it; `ofed-testkit` holds the KPI emulation,
//! the in-kernel self-test and its loopback. `krpc-rdma-kmod` links them into the kernel
//! module's staticlib.
//!
//! * [`OfedQp`] implements [`krpc_rdma::provider::Provider`] on one RC connection
//!   made through rdma_cm: FRWR registration (`ib_alloc_mr`, `ib_map_mr_sg`, `IB_WR_REG_MR`,
//!   `IB_WR_LOCAL_INV`, the peer's `IB_WR_SEND_WITH_INV`), posting and polling.
//! * [`KernelPages`] is the [`mbuf::PageProvider`] over kernel pages: page
//!   addresses are physical addresses of wired `vm_page`s, reference counts are wirings.
//! * [`ffi`] is the verbs C boundary (`c/krpc_rdma_ofed.h`): only our own `repr(C)` structs and scalars cross it; the small
//!   C file `c/krpc_rdma_ofed.c` translates to `ib_send_wr`, `ib_wc`, `rdma_cm_event`, and
//!   wraps the KPI's `static inline` verbs (`ib_post_send`, `ib_post_recv`, `ib_poll_cq`,
//!   `ib_req_notify_cq`).
//! * In the kernel staticlib (`--target x86_64-unknown-none`) the global allocator is
//!   malloc(9) through `krpc_ofed_malloc(size, M_NOWAIT)` (every Rust allocation is M_NOWAIT:
//!   the core runs from completion context and must fail rather than sleep; it grows its
//!   structures with `try_reserve`), and the panic handler calls panic(9) through
//!   `krpc_ofed_panic`. Host builds (tests, the emulation) use std's.
//!
//! `unsafe` lives in the `ofed-shim` crates only (the core and `mbuf` forbid it); every block says why it
//! is sound.
#![cfg_attr(not(test), no_std)]
#![deny(clippy::undocumented_unsafe_blocks)]

extern crate alloc;
// Host builds (tests, tools, the `emu` feature, and the host staticlib that `cargo build
// --workspace` makes) take std's allocator and panic runtime.
#[cfg(all(not(test), not(target_os = "none")))]
extern crate std;

pub mod ffi;
pub mod pages;
pub mod qp;
mod runtime;
pub mod wait;

pub use ffi::SockaddrStorage;
pub use pages::KernelPages;
pub use qp::{OfedConfig, OfedError, OfedListener, OfedQp, OfedStats};

/// The ABI version of the C wrappers this crate expects; the module glue compares it with
/// `KRPC_OFED_ABI_VERSION` at load.
#[no_mangle]
pub extern "C" fn krpc_rdma_shim_abi_version() -> u32 {
    ffi::ABI_VERSION
}
