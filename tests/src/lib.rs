//! The test-support crate of the workspace, and the home of the cross-crate tests in
//! `tests/tests/`. Its modules are shared as a (dev-)dependency, never included by `#[path]`:
//!
//! * [`rig`]: the soft rig (a requester and a responder over the software RC provider), used
//!   by the tests and the transport bench here (`benches/transport.rs`), `nfs-service`'s
//!   tests and the fuzz targets in `krpc-rdma/fuzz`;
//! * [`raw`], [`redial`]: a raw peer, and a client that redials;
//! * [`counting_alloc`]: the counting global allocator of the allocation tests
//!   (`transport_noalloc` here, nfs-service's `nfsd_alloc`);
//! * [`file_data`]: file contents and their comparison, for the NFSv3 client tests
//!   (`krpc-rdma-session`'s host tests, `userspace-harness`'s `nfs3_rxe`).
//!
//! No crate this one depends on dev-depends on it: the tests and the bench of krpc-rdma that
//! use the rig or the counting allocator live here, so there is no dependency cycle.
//! Nothing here needs libibverbs.

pub mod counting_alloc;
pub mod file_data;
pub mod raw;
pub mod redial;
#[allow(missing_docs)]
pub mod rig;
