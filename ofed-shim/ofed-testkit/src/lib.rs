//! Test support for the `ofed-shim` crates: what tests the verbs backend (`ofed-shim`) and
//! the krpc face (`krpc-face`) without being part of either.
//!
//! * **The KPI emulation** (feature `emu`, host only): `build.rs` compiles the production C
//!   of `../c/` unchanged over `emu/`, a userspace emulation of FreeBSD's OFED KPI (on
//!   libibverbs/librdmacm, so a real device: rxe0), of `struct mbuf` (M_EXTPG included),
//!   `CLIENT` and svc.c's `SVCXPRT` side. The emulation supplies FreeBSD's header names
//!   through `emu/include/`, so the production C has no test-only branch. `emu_mbuf`
//!   builds NFS-shaped chains the way FreeBSD's NFS does and inspects chains. It is a fast
//!   inner loop, not the oracle: FreeBSD 14.2 itself is.
//! * **The in-kernel self-test** (feature `selftest`, `krpc_rdma_selftest` and
//!   `krpc_rdma_peer` for the Linux module): the provider-conformance suite over the software
//!   provider and over the kernel's own verbs, and the peer runs against userspace and knfsd.
//! * [`loopback`]: connecting two `OfedQp`s through rdma_cm, for the self-test and the tests.
//! * `nfs_hook` (features `emu`, `selftest`): the face tests' NFSv3 reply provisioning.
#![cfg_attr(not(test), no_std)]
#![deny(clippy::undocumented_unsafe_blocks)]

extern crate alloc;
#[cfg(all(not(test), not(target_os = "none")))]
extern crate std;

#[cfg(feature = "emu")]
pub mod emu_mbuf;
pub mod loopback;
#[cfg(any(feature = "emu", feature = "selftest"))]
pub mod nfs_hook;
#[cfg(feature = "selftest")]
pub mod selftest;
