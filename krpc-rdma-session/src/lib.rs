//! A client session of any ONC RPC program over RPC-over-RDMA, and an NFSv3 client over it,
//! generic over the provider: the libibverbs provider in the harness (`userspace-harness`,
//! over rxe in the VM), the software provider in the host tests.
//!
//! * [`Dialer`]: what a session needs from a provider — dial (and redial) a queue pair,
//!   wait for completions with a timeout, the one page provider of every connection, file
//!   bytes in and out of those pages.
//! * [`Conn`]: the one reconnecting connection (requester + queue pair + kept copies of the
//!   calls owed a reply), shared by [`Session`] and the harness's own client.
//! * [`Session`]: calls matched to replies by XID, several in flight, waiting for credits;
//!   with reconnection on, a lost connection is made again with backoff and every call owed a
//!   reply resent with its XID (answered exactly once).
//! * [`nfs3`]: an NFSv3 client ([`nfs3::Nfs3Client`]) over a [`Session`], DDP for file data
//!   (RFC 8267): WRITE data as read chunks, READ / READLINK data through write chunks,
//!   READDIRPLUS through reply chunks, UNSTABLE WRITEs sent again when the write verifier
//!   changes, calls answered `NFS3ERR_JUKEBOX` sent again under new XIDs; by default
//!   ([`nfs3::Nfs3Opts`]) it reconnects and retries for up to [`DEFAULT_GIVE_UP`].
//!
//! Every RPC call header is built by `onc_rpc::rpc::CallHeader`.

pub mod conn;
pub mod dialer;
pub mod error;
mod filedata;
pub mod nfs3;
pub mod nfs4;
pub mod nfs4cb;
pub mod session;

pub use conn::{Conn, DEFAULT_GIVE_UP};
pub use dialer::Dialer;
pub use error::RunError;
pub use session::Session;
