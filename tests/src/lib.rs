//! Shared rigs of the cross-crate tests in `tests/tests/` (and of the fuzz targets in
//! `krpc-rdma/fuzz`): the soft rig, a raw peer, and a client that redials.

/// The soft rig (one file, also used by krpc-rdma's bench through `#[path]`).
#[path = "../../krpc-rdma/tests/common/mod.rs"]
#[allow(missing_docs)]
pub mod common;
pub mod raw;
pub mod redial;
