//! The Rust half of `krpc_rdma.ko`: one staticlib with every C-facing entry point of the
//! `ofed-shim` crates, for both kernels' module builds (`cargo xtask kobj` links it into one
//! relocatable object; `ofed-shim/kmod/Makefile` and `ofed-shim/linux/Kbuild` link that).
//!
//! * `ofed_shim`: the verbs backend, the kernel runtime (malloc(9) allocator, panic(9)
//!   handler) and `krpc_rdma_shim_abi_version`;
//! * `krpc_face`: `krpc_clnt_*`, `krpc_svc_*` (FreeBSD's `clnt_rdma`/`svc_rdma` call them);
//! * `ofed_testkit` (feature `selftest`): `krpc_rdma_selftest`, `krpc_rdma_peer`;
//! * `krpc_kernel_nfsd` (feature `nfsd`, Linux): `krpc_nfsd_start`, `krpc_nfsd_stop`,
//!   `krpc_nfsd_report`.
//!
//! Nothing else lives here: linking a crate is what puts its `#[no_mangle]` entry points
//! into the archive.
#![no_std]

extern crate krpc_face;
#[cfg(feature = "nfsd")]
extern crate krpc_kernel_nfsd;
extern crate ofed_shim;
#[cfg(feature = "selftest")]
extern crate ofed_testkit;
