//! RPC-over-RDMA Version 1 (RFC 8166) for a FreeBSD-style kernel RPC.
//!
//! A `no_std`, sans-I/O core: the caller drives verbs and time. [`wire`]: the transport-header
//! codec (RFC 8166 §4) and the RFC 8797 connection private data; [`provider`]: the verbs
//! boundary and the queue-pair logic the verbs bindings share; [`transport`]: the requester
//! and the responder (send-rdma, recv-rdma, ddp-read, ddp-write); `soft` (feature `soft`): the
//! in-process software RC provider.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

mod fault;
pub use fault::Fault;

pub mod provider;
#[cfg(feature = "soft")]
pub mod soft;
pub mod transport;
pub mod wire;
