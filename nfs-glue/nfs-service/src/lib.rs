//! The NFSv3 and MOUNT v3 services for `no_std` + `alloc`, transport-independent: a call in,
//! a reply out, over [`onc_rpc`]'s call checks and [`nfs_proto`]'s codecs and chains.
//!
//! * [`nfsd`]: the NFSv3 service over a VFS-shaped [`nfsd::Backend`], with Macklem's DDP path
//!   (WRITE data to the backend as the received pages, READ data out as page mbufs), the
//!   duplicate request cache, the READDIR budgets.
//! * [`mount`]: the MOUNT v3 service over an [`mount::Exports`].
//! * [`lock`]: the lock shared state lives under, supplied by the embedding.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod lock;
pub mod mount;
pub mod nfsd;
