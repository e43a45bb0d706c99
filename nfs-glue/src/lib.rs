//! The NFS side of krpc-rdma, as it was one crate: a facade over the crates under `nfs-glue/`
//! ([`onc_rpc`], [`nfs_proto`], [`nfs_service`]) so `nfs_glue::…` paths keep working. New
//! code imports those crates.
#![no_std]
#![forbid(unsafe_code)]

pub use nfs_proto::{chain, ddp, nfs3, nlm, nsm};
pub use nfs_service::nfsd;
pub use onc_rpc::{rpc, svc, xdr};

/// MOUNT v3: the codecs ([`nfs_proto::mount`]) and the service ([`nfs_service::mount`]).
pub mod mount {
    pub use nfs_proto::mount::*;
    pub use nfs_service::mount::*;
}

/// The harness's RPC program ([`harness_rpc`]).
pub use harness_rpc as harness;
