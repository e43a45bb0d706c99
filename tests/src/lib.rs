//! The test-support crate of the workspace, and the home of the cross-crate tests in
//! `tests/tests/`. Its modules are shared as a (dev-)dependency, never included by `#[path]`:
//!
//! * [`rig`]: the soft rig (a requester and a responder over the software RC provider), used
//!   by the tests here, `nfs-service`'s tests, krpc-rdma's bench and the fuzz targets in
//!   `krpc-rdma/fuzz`;
//! * [`raw`], [`redial`]: a raw peer, and a client that redials;
//! * [`counting_alloc`]: the counting global allocator of the allocation tests (krpc-rdma's
//!   `transport_noalloc`, nfs-service's `nfsd_alloc`);
//! * [`file_data`]: file contents and their comparison, for the NFSv3 client tests
//!   (`krpc-rdma-session`'s host tests, `userspace-harness`'s `nfs3_rxe`).
//!
//! krpc-rdma dev-depends on this crate, which depends on krpc-rdma: cargo allows that cycle
//! for integration tests and benches, which link the one krpc-rdma library this crate links.
//! Nothing here needs libibverbs.

pub mod counting_alloc;
pub mod file_data;
pub mod raw;
pub mod redial;
#[allow(missing_docs)]
pub mod rig;
