//! `userspace-harness` as a library: the pieces the binary and the tests share.
//!
//! * [`verbs`]: the libibverbs / librdmacm [`Provider`](krpc_rdma::provider::Provider) (the
//!   `krpc-rdma-verbs` crate, re-exported).
//! * [`rpc`]: the harness's own tiny RPC program (NULL / WRITE / READ / ECHO) over the
//!   transport, with its data pattern (`harness_rpc`, re-exported: `no_std`, shared
//!   with the kernel module's peer runs).
//! * [`trace`]: `--trace`, a provider wrapper that logs every transport header sent and
//!   received as one JSON line.
//! * [`run`]: the `server`, `client`, `bench` and `demo` commands.
//! * [`report`]: the client's report (human and `--json`).
//! * [`decode`]: the `decode` tool (hex in, JSON out).
//! * [`nfs3`]: the `nfs3` command's client: MOUNT over TCP, then `krpc-rdma-session`'s
//!   NFSv3 client over the libibverbs provider, DDP for file data.
//! * [`nfs4`]: the `nfs4` command: `krpc-rdma-session`'s NFSv4.1 client, its back channel
//!   (RFC 8167) on the same RDMA connection.
//! * [`session`]: [`session::VerbsDialer`], the libibverbs connection factory of
//!   `krpc-rdma-session`'s generic `Session` / `Conn` (calls matched to replies by XID,
//!   several in flight, reconnect and retransmit).
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod decode;
pub mod hex;
pub mod nfs3;
pub mod nfs4;
pub use onc_rpc_tcp;
pub use onc_rpc_tcp::mount;
pub mod report;
pub use harness_rpc as rpc;
pub mod run;
pub mod session;
pub mod trace;
pub use krpc_rdma_verbs as verbs;

/// A command-line number of seconds (decimals allowed), above 0.
///
/// # Errors
/// Not a positive finite number below 10^9.
pub fn parse_secs(s: &str) -> Result<std::time::Duration, String> {
    s.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x > 0.0 && *x < 1e9)
        .map(std::time::Duration::from_secs_f64)
        .ok_or_else(|| format!("{s:?} is not a number of seconds"))
}
