//! The NFSv3 family's protocols for `no_std` + `alloc`: the codecs, over [`onc_rpc`]'s XDR,
//! and how their data rides RPC-over-RDMA (RFC 8267) in Macklem-layout mbuf chains.
//!
//! Decoding of peer data never panics: every decoder returns [`onc_rpc::xdr::XdrError`].
//!
//! * [`nfs3`]: NFSv3 (RFC 1813) arguments and results of every procedure, RFC 8267 head
//!   codecs for WRITE / SYMLINK / READ / READLINK and the READ / READLINK `LocateFn`s.
//! * [`nfs4`]: NFSv4.1 (RFC 8881 / RFC 5662) COMPOUND and CB_COMPOUND with the operations a
//!   minimal client and its callback service need (session setup, OPEN / READ / WRITE /
//!   CLOSE, delegation recall), and the RFC 8267 DDP of WRITE and READ data inside a
//!   COMPOUND (a chain builder for the WRITE call, the READ `LocateFn`).
//! * [`mount`]: MOUNT v3's numbers and result codecs (the service is `nfs-service`'s).
//! * [`nlm`] and [`nsm`]: the Network Lock Manager v4 and Network Status Monitor v1 codecs
//!   and their state (the lock table with its blocking queue and grace period; the monitor's
//!   state number and registrations), for file locking on NFSv3.
//! * [`ddp`]: the RFC 8267 DDP-eligibility tables (which NFS items may use read/write
//!   chunks) and per-procedure reply-provisioning hints.
//! * [`chain`]: Macklem-layout chains (`[XDR][DDP marker][page mbufs][pad][XDR]`): building
//!   DDP calls and replies, finding received items, zero-copy page pieces for `VOP_WRITE`.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod chain;
pub mod ddp;
pub mod mount;
pub mod nfs3;
pub mod nfs4;
pub mod nlm;
pub mod nsm;
