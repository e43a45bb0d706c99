//! The RPC-over-RDMA Version 1 transport core (RFC 8166): requester and responder.
//!
//! * [`Requester`] (client): send-rdma of calls given as mbuf [`Chain`](mbuf::Chain)s —
//!   inline (`RDMA_MSG`), with DDP regions as read chunks, or as a Long Call (`RDMA_NOMSG`,
//!   position-zero read chunk) — reply provisioning from a [`ReplySpec`] (inline, a write
//!   chunk in caller-given pages, or a reply chunk), and recv-rdma of replies matched by XID.
//! * [`Responder`] (server): recv-rdma of calls with ddp-read of read chunks into fresh pages,
//!   and ddp-write of replies (write chunk, Long Reply through the reply chunk), `RDMA_ERROR`
//!   for bad headers.
//! * [`ServerConnection`] (server loop): a Responder with its ordered reply backlog, calls
//!   held back until their reply pages are admitted by the page budget, dropped calls and
//!   counters; every server (userspace nfsd, the harness, the kernel peers) runs poll →
//!   serve → reply over it.
//!
//! All are sans-I/O: the caller drives them through `poll` and the entry points; they never
//! block, never read a clock, and touch verbs only through [`Provider`](crate::provider::Provider).
//! Every resource is bounded and allocated at construction (pending-xid table and call
//! contexts sized by `max_requests`, send contexts by the provider's send buffers, fragment
//! tables by `max_fragments`); a call or reply that cannot proceed now is refused with a
//! back-pressure error, never queued.
//!
//! # Rules followed
//!
//! * Positions and roundup (RFC 8166 §3.4.5): a read chunk's position is the data item's
//!   offset in the unreduced XDR stream (the chain offset), 4-aligned; the length word stays
//!   inline; the XDR pad after the data is sent neither inline nor in the chunk. The
//!   responder hands the call up as `[XDR][marker][pages][pad][XDR]`.
//! * Reply provisioning (as Linux `rpcrdma_marshal_req`): no chunk if the largest reply fits
//!   the inline receive (threshold minus the 28-byte minimal header); a write chunk for a DDP
//!   result when the rest of the reply then fits inline; otherwise a reply chunk.
//! * Invalidation (RFC 8166 §3.4.3; RFC 8797): every registration of a call is invalidated
//!   before its reply is handed up — by Local Invalidate (waited for), unless the reply came
//!   by Send With Invalidate naming the handle of a single-segment registration. The responder
//!   uses Send With Invalidate with the first chunk's first handle when the
//!   requester's private data allows it.
//! * Credits (RFC 8166 §3.3): see [`credits`].
//!
//! # Connection loss
//!
//! On `CmEvent::Disconnected` or any failed/flushed completion, every pending call fails with
//! [`CallError::ConnectionLost`] (the caller's DDP pages are returned inside the
//! [`RequesterEvent::Failed`] event), every registration is released, every transport page is
//! freed; responder contexts die ([`Responder::reply`] then answers
//! [`ReplyError::ConnectionLost`]). **The transport does not retry**: like FreeBSD's
//! `clnt_reconnect`, the krpc layer makes a new connection (a new provider and a new
//! `Requester`/`Responder`) and retransmits.

mod bounded;
pub mod call_plan;
pub mod config;
pub mod counters;
pub mod credits;
mod endpoint;
pub mod error;
pub mod kernel;
pub mod provisioning;
pub mod pullup;
pub mod rdma_plan;
pub mod read_chunks;
pub mod reconnect;
pub mod reply_plan;
pub mod requester;
pub mod responder;
mod returns;
pub mod reverse;
pub mod send_ctx;
pub mod server_conn;
pub mod shared_pages;
pub mod xdr_reduce;
mod xid_table;

pub use config::TransportConfig;
pub use counters::{Counters, COUNTER_FIELDS, COUNTER_NAMES};
pub use error::{CallError, Fault};
pub use reconnect::{Reconnect, ReconnectStats};
pub use requester::{
    Abandoned, CallRejected, DdpReply, LocateFn, ReplySpec, Requester, RequesterEvent, ReverseCall,
    ReverseCtx, ReverseRejected,
};
pub use responder::{Incoming, ReplyCtx, ReplyError, Responder, ResponderEvent};
pub use server_conn::{ReplyBytes, ReverseOutcome, ServerConnection, ServerStats, Wait};
pub use shared_pages::{Admission, PageShare, SharedPages};
