//! NFS side of krpc-rdma: XDR for the DDP-relevant NFS operations, RFC 8267 DDP eligibility,
//! building and consuming the marker + page-mbuf chains.
//!
//! `no_std` + `alloc`. Decoding of peer data never panics: every decoder returns
//! [`xdr::XdrError`].
//!
//! * [`xdr`]: RFC 4506 primitives (checked decoder, non-panicking encoder).
//! * [`rpc`]: ONC RPC v2 call and reply headers (RFC 5531), `AUTH_NONE` / `AUTH_SYS`.
#![no_std]

extern crate alloc;

pub mod rpc;
pub mod xdr;
