//! Binding of the krpc-rdma core to FreeBSD's OFED verbs KPI (`sys/ofed`).
//!
//! * [`OfedQp`] implements [`krpc_rdma::provider::Provider`] on one RC connection
//!   made through rdma_cm: FRWR registration (`ib_alloc_mr`, `ib_map_mr_sg`, `IB_WR_REG_MR`,
//!   `IB_WR_LOCAL_INV`, the peer's `IB_WR_SEND_WITH_INV`), posting and polling.
//! * [`KernelPages`] is the [`mbuf::PageProvider`] over kernel pages: page
//!   addresses are physical addresses of wired `vm_page`s, reference counts are wirings.
//! * [`ffi`] is the C boundary: only our own `repr(C)` structs and scalars cross it; the small
//!   C file `c/krpc_rdma_ofed.c` translates to `ib_send_wr`, `ib_wc`, `rdma_cm_event`, and
//!   wraps the KPI's `static inline` verbs (`ib_post_send`, `ib_post_recv`, `ib_poll_cq`,
//!   `ib_req_notify_cq`).
//! * In the kernel staticlib (`--target x86_64-unknown-none`) the global allocator is
//!   malloc(9) through `krpc_ofed_malloc(size, M_NOWAIT)` (every Rust allocation is M_NOWAIT:
//!   the core runs from completion context and must fail rather than sleep; it grows its
//!   structures with `try_reserve`), and the panic handler calls panic(9) through
//!   `krpc_ofed_panic`. Host builds (tests, the `emu` feature) use std's.
//!
//! `unsafe` lives in this crate only (the core and `mbuf` forbid it); every block says why it
//! is sound.
#![cfg_attr(not(test), no_std)]
#![deny(clippy::undocumented_unsafe_blocks)]

extern crate alloc;
// Host builds (tests, tools, the `emu` feature, and the host staticlib that `cargo build
// --workspace` makes) take std's allocator and panic runtime.
#[cfg(all(not(test), not(target_os = "none")))]
extern crate std;

#[cfg(feature = "emu")]
pub mod emu_mbuf;
pub mod ffi;
pub mod krpc_clnt;
pub mod krpc_svc;
pub mod loopback;
pub mod mbuf_bridge;
pub mod pages;
pub mod qp;
mod runtime;
#[cfg(feature = "selftest")]
pub mod selftest;

pub use mbuf_bridge::{BridgeError, MbufBridge, MbufChain};
pub use pages::KernelPages;
pub use qp::{OfedConfig, OfedError, OfedListener, OfedQp, OfedStats};

/// The ABI version of the C wrappers this crate expects; the module glue compares it with
/// `KRPC_OFED_ABI_VERSION` at load.
#[no_mangle]
pub extern "C" fn krpc_rdma_shim_abi_version() -> u32 {
    ffi::ABI_VERSION
}
