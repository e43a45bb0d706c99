//! Transport configuration: credits, inline sizes, limits.

use crate::provider::Resources;
use crate::wire::{CmPrivateData, DEFAULT_INLINE_SIZE, MIN_INLINE_SIZE};

use super::error::CallError;

/// Configuration shared by [`Requester`](super::Requester) and [`Responder`](super::Responder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportConfig {
    /// Requester: calls we are able to have outstanding (the credit request sent in every call,
    /// and the size of the pending-xid table). Responder: most credits granted (and the size of
    /// the per-call context table). FreeBSD's clntrdma uses 64.
    pub max_requests: u32,
    /// Largest message we send inline (advertised in RFC 8797 private data).
    pub inline_send: u32,
    /// Largest message we receive inline (advertised, clamped to the provider's receive
    /// buffer size; see [`TransportConfig::private_data_for`]).
    pub inline_recv: u32,
    /// Whether we accept Send With Invalidate from the peer (RFC 8797 flag bit 0).
    pub accept_remote_invalidate: bool,
    /// Largest chunk (read chunk at the responder, reply chunk at the requester) in bytes.
    pub max_chunk_bytes: u32,
    /// Responder: most bytes of read chunks one call may carry (their sum); a call asking
    /// for more is refused with `ERR_CHUNK` before any page is allocated.
    pub max_call_ddp_bytes: u32,
    /// Responder: most page bytes the read chunks of live calls may hold on one connection.
    /// A call whose pages would exceed it waits (its RDMA Reads start once earlier calls are
    /// answered or dropped), so one peer cannot pin more memory than this.
    pub max_ddp_bytes: u32,
    /// Capacity of the scratch fragment table used to build registrations and RDMA work
    /// requests (pages per chunk). 1 MiB needs 257 (an unaligned start adds one).
    pub max_fragments: u32,
    /// Most reverse-direction calls (RFC 8167) outstanding at once that the upper layer may
    /// enable (`set_reverse_slots`, e.g. NFSv4.1's back-channel `ca_maxrequests`): their
    /// slots are reserved at creation. The provider needs as many Receives beyond
    /// `max_requests` (and send buffers to answer or send them). 0: no reverse direction.
    pub max_reverse_requests: u32,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            max_requests: 64,
            inline_send: DEFAULT_INLINE_SIZE,
            inline_recv: DEFAULT_INLINE_SIZE,
            accept_remote_invalidate: true,
            max_chunk_bytes: 2 * 1024 * 1024 + 8192,
            max_call_ddp_bytes: 4 * 1024 * 1024 + 16384,
            max_ddp_bytes: 64 * 1024 * 1024,
            max_fragments: 1024,
            max_reverse_requests: 0,
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

    /// The private data we advertise on a provider with `res`: our inline sizes clamped to
    /// the provider's send and receive buffers (so the peer never sends more than a receive
    /// buffer holds), rounded down to whole KiB by the RFC 8797 encoding.
    ///
    /// # Errors
    /// [`CallError::BadConfig`] when a send or receive buffer is smaller than 1024 bytes, the
    /// inline size every peer may use without negotiation (RFC 8166 §3.3.2).
    pub fn private_data_for(&self, res: &Resources) -> Result<CmPrivateData, CallError> {
        if res.send_buf_size < MIN_INLINE_SIZE || res.recv_buf_size < MIN_INLINE_SIZE {
            return Err(CallError::BadConfig);
        }
        Ok(CmPrivateData::new(
            self.inline_send.min(res.send_buf_size),
            self.inline_recv.min(res.recv_buf_size),
            self.accept_remote_invalidate,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(send: u32, recv: u32) -> Resources {
        Resources {
            send_bufs: 4,
            recv_bufs: 4,
            send_buf_size: send,
            recv_buf_size: recv,
            max_send_wr: 16,
            max_sge: 4,
            max_registrations: 4,
            max_rd_atomic: 4,
        }
    }

    #[test]
    fn advertised_sizes_never_exceed_the_buffers() {
        let cfg = TransportConfig {
            inline_send: 8192,
            inline_recv: 8192,
            ..TransportConfig::default()
        };
        let pd = cfg.private_data_for(&res(4096, 2500)).unwrap();
        assert_eq!(pd.send_size, 4096);
        // 2500 bytes of buffer: the RFC 8797 encoding rounds down to 2048.
        assert_eq!(pd.recv_size, 2048);
        let pd = cfg.private_data_for(&res(65536, 65536)).unwrap();
        assert_eq!((pd.send_size, pd.recv_size), (8192, 8192));
        assert_eq!(
            cfg.private_data_for(&res(4096, 512)),
            Err(CallError::BadConfig)
        );
        assert_eq!(
            cfg.private_data_for(&res(1000, 4096)),
            Err(CallError::BadConfig)
        );
    }
}
