//! Who is at fault for an error: the one classification every error of the crate answers
//! to (the transport's [`CallError`](crate::transport::CallError) and
//! [`ReplyError`](crate::transport::ReplyError), the provider's
//! [`ProviderError`](crate::provider::ProviderError)), after rustls's split.

/// Who is at fault for an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Refused by us for now (no credit, a busy bounded resource): nothing was sent, the call
    /// is handed back; retry the same call after a completion.
    BackPressure,
    /// Refused by us: the call breaks a limit or a rule (too large, malformed, an XID already
    /// outstanding, the transport closed, a configuration that does not fit). Retrying it as
    /// it is fails again.
    Refused,
    /// This host ran out of memory (pages, chain storage).
    Memory,
    /// The peer: it answered `RDMA_ERROR`, or its reply does not match what was provisioned.
    Peer,
    /// The fabric: the connection is gone (a flushed or failed completion, a disconnect).
    Fabric,
    /// Our own bug: the transport named something the provider does not know, or broke one
    /// of its own invariants. Never expected; counted and reported rather than hidden, and
    /// never answered on the wire.
    Bug,
}
