//! Transport configuration: credits, inline sizes, limits.

use crate::wire::{CmPrivateData, DEFAULT_INLINE_SIZE};

/// Configuration shared by [`Requester`](super::Requester) and [`Responder`](super::Responder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportConfig {
    /// Requester: calls we are able to have outstanding (the credit request sent in every call,
    /// and the size of the pending-xid table). Responder: most credits granted (and the size of
    /// the per-call context table). FreeBSD's clntrdma uses 64.
    pub max_requests: u32,
    /// Largest message we send inline (advertised in RFC 8797 private data).
    pub inline_send: u32,
    /// Largest message we receive inline (advertised; receive buffers must hold it).
    pub inline_recv: u32,
    /// Whether we accept Send With Invalidate from the peer (RFC 8797 flag bit 0).
    pub accept_remote_invalidate: bool,
    /// Largest chunk (read chunk at the responder, reply chunk at the requester) in bytes.
    pub max_chunk_bytes: u32,
    /// Capacity of the scratch fragment table used to build registrations and RDMA work
    /// requests (pages per chunk). 1 MiB needs 257 (an unaligned start adds one).
    pub max_fragments: u32,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            max_requests: 64,
            inline_send: DEFAULT_INLINE_SIZE,
            inline_recv: DEFAULT_INLINE_SIZE,
            accept_remote_invalidate: true,
            max_chunk_bytes: 2 * 1024 * 1024 + 8192,
            max_fragments: 1024,
        }
    }
}

impl TransportConfig {
    /// Our RFC 8797 private data for the connection manager.
    pub fn private_data(&self) -> CmPrivateData {
        CmPrivateData::new(
            self.inline_send,
            self.inline_recv,
            self.accept_remote_invalidate,
        )
    }
}
