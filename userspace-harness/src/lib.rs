//! `userspace-harness` as a library: the pieces the binary and the tests share.
//!
//! * [`verbs`]: the libibverbs / librdmacm [`Provider`](krpc_rdma::provider::Provider).
//! * [`rpc`]: the harness's own tiny RPC program (NULL / WRITE / READ / ECHO) over the
//!   transport, with its data pattern.
//! * [`trace`]: `--trace`, a provider wrapper that logs every transport header sent and
//!   received as one JSON line.
//! * [`run`]: the `server`, `client`, `bench` and `demo` commands.
//! * [`report`]: the client's report (human and `--json`).
//! * [`decode`]: the `decode` tool (hex in, JSON out).

pub mod decode;
mod hex;
pub mod report;
pub mod rpc;
pub mod run;
pub mod trace;
pub mod verbs;
