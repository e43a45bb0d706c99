//! RPC-over-RDMA Version 1 (RFC 8166) for a FreeBSD-style kernel RPC.
//!
//! A `no_std`, sans-I/O core: the caller drives verbs and time. Today this crate holds
//! [`wire`], the complete transport-header codec (RFC 8166 §4) and the RFC 8797 connection
//! private data. The transport operations (send-rdma, recv-rdma, ddp-read, ddp-write) build
//! on it in later work.
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod provider;
#[cfg(feature = "soft")]
pub mod soft;
pub mod transport;
pub mod wire;
