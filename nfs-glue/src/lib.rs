//! NFS side of krpc-rdma: XDR for the DDP-relevant NFS operations, RFC 8267 DDP eligibility,
//! building and consuming the marker + page-mbuf chains.
//!
//! `no_std` + `alloc`. Decoding of peer data never panics: every decoder returns
//! [`xdr::XdrError`].
//!
//! * [`xdr`]: RFC 4506 primitives (checked decoder, non-panicking encoder).
//! * [`rpc`]: ONC RPC v2 call and reply headers (RFC 5531), `AUTH_NONE` / `AUTH_SYS`.
//! * [`nfs3`]: NFSv3 (RFC 1813) arguments and results of every procedure, RFC 8267 head
//!   codecs for WRITE / SYMLINK / READ / READLINK and the READ / READLINK `LocateFn`s.
//! * [`ddp`]: the RFC 8267 DDP-eligibility tables (which NFS items may use read/write
//!   chunks) and per-procedure reply-provisioning hints.
//! * [`chain`]: Macklem-layout chains (`[XDR][DDP marker][page mbufs][pad][XDR]`): building
//!   DDP calls and replies, finding received items, zero-copy page pieces for `VOP_WRITE`.
//! * [`svc`]: the server side of ONC RPC: accepting or refusing a call, the caller's
//!   credentials.
//! * [`nfsd`]: the NFSv3 service over a VFS-shaped [`nfsd::Backend`], with Macklem's DDP path
//!   (WRITE data to the backend as the received pages, READ data out as page mbufs).
//! * [`mount`]: the MOUNT v3 service over an [`mount::Exports`].
//! * [`nlm`] and [`nsm`]: the Network Lock Manager v4 and Network Status Monitor v1 codecs
//!   and their state (the lock table with its blocking queue and grace period; the monitor's
//!   state number and registrations), for file locking on NFSv3.
//! * [`harness`]: the harness's own RPC program (NULL / WRITE / READ / ECHO with DDP), shared
//!   by `userspace-harness` and the kernel module's peer runs.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod chain;
pub mod ddp;
pub mod harness;
pub mod mount;
pub mod nfs3;
pub mod nfsd;
pub mod nlm;
pub mod nsm;
pub mod rpc;
pub mod svc;
pub mod xdr;
