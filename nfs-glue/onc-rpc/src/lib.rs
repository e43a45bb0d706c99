//! ONC RPC version 2 (RFC 5531) for `no_std` + `alloc`: what every RPC program over
//! krpc-rdma — NFSv3, MOUNT, NLM, NSM, the harness's program, the kernel faces — shares.
//!
//! Decoding of peer data never panics: every decoder returns [`xdr::XdrError`].
//!
//! * [`xdr`]: RFC 4506 primitives (checked decoder, non-panicking encoder).
//! * [`rpc`]: call and reply headers, `AUTH_NONE` / `AUTH_SYS`, in both directions.
//! * [`svc`]: the server side: accepting or refusing a call for a [`svc::Program`] (RPC
//!   version, credentials, program / version / procedure), the caller's credentials, reply
//!   headers.
//! * [`view`]: allocation-free views of call and reply headers (credentials as opaque
//!   bytes) and how RFC 5531 answers a call that cannot be handed up: what the krpc faces
//!   use.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod rpc;
pub mod svc;
pub mod view;
pub mod xdr;
