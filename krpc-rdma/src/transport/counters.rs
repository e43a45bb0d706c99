//! Transport statistics, after the "xprt: rdma" line of Linux's `/proc/self/mountstats`.

/// Counters of one transport endpoint (requester or responder). All monotonically increasing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// RPC messages sent (calls by a requester, replies by a responder).
    pub messages_sent: u64,
    /// RPC messages received and handed up.
    pub messages_received: u64,
    /// Read chunks sent (requester) or pulled (responder).
    pub read_chunks: u64,
    /// Write chunks provisioned (requester) or written (responder).
    pub write_chunks: u64,
    /// Reply chunks provisioned (requester) or written (responder).
    pub reply_chunks: u64,
    /// Bytes sent inline in Sends (headers included).
    pub inline_bytes_sent: u64,
    /// Bytes received inline in Sends (headers included).
    pub inline_bytes_received: u64,
    /// Bytes moved by RDMA Read (responder) or exposed to it (requester).
    pub rdma_read_bytes: u64,
    /// Bytes moved by RDMA Write (responder) or reported written (requester).
    pub rdma_write_bytes: u64,
    /// Long Calls (`RDMA_NOMSG` with a position-zero read chunk).
    pub long_calls: u64,
    /// Long Replies (`RDMA_NOMSG` through the reply chunk).
    pub long_replies: u64,
    /// Pull-up copies: non-page bytes copied into pages for RDMA.
    pub pullup_copies: u64,
    /// Bytes copied by pull-ups.
    pub pullup_bytes: u64,
    /// Payload bytes of DDP regions that were copied instead of placed directly (target: 0).
    pub ddp_payload_copied_bytes: u64,
    /// Memory registrations made.
    pub registrations: u64,
    /// Registrations revoked by our own Local Invalidate (or a synchronous release).
    pub local_invalidations: u64,
    /// Registrations revoked by the peer's Send With Invalidate.
    pub remote_invalidations: u64,
    /// Sends With Invalidate we posted.
    pub send_with_invalidate: u64,
    /// Received messages dropped: unknown XID, bad header, wrong procedure.
    pub bad_messages: u64,
    /// `RDMA_ERROR` / `ERR_VERS` sent.
    pub err_vers_sent: u64,
    /// `RDMA_ERROR` / `ERR_CHUNK` sent.
    pub err_chunk_sent: u64,
    /// `RDMA_ERROR` / `ERR_VERS` received.
    pub err_vers_received: u64,
    /// `RDMA_ERROR` / `ERR_CHUNK` received.
    pub err_chunk_received: u64,
    /// Calls refused for lack of credit (requester).
    pub credit_stalls: u64,
    /// Calls refused for a busy resource (send buffer, slot, queue).
    pub resource_stalls: u64,
    /// Connection losses seen.
    pub connection_losses: u64,
    /// Calls (requester) or call contexts (responder) ended by a connection loss.
    pub calls_lost: u64,
}
