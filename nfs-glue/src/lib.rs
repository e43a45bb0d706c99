//! NFS side of krpc-rdma: XDR for the DDP-relevant NFS operations, RFC 8267 DDP eligibility,
//! building and consuming the marker + page-mbuf chains.
//!
//! Nothing is implemented here yet: this crate only reserves its place in the workspace.
//! It deliberately exports no API, so nothing can mistake it for a working NFS layer.
#![no_std]
