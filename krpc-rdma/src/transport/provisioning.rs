//! Reply provisioning (requester): which chunk, if any, a call offers for its reply. The rule
//! of Linux's `rpcrdma_marshal_req`: no chunk when the largest reply fits the inline receive;
//! a write chunk in the caller's pages for a DDP result when the rest of the reply then fits
//! inline together with the reply header's echo of that chunk (8 + 16 bytes per segment, as
//! `rpcrdma_max_reply_header_size` counts); otherwise a reply chunk.
//!
//! Pure: the requester registers what this plans (`Requester::provision`) and asks
//! [`write_chunk_fits`] again once it knows how many segments the registration took.

use super::error::CallError;
use crate::wire::{counted_chunk_len, MIN_HEADER_LEN};

/// The chunk offered for the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provision {
    /// None: the largest reply arrives inline.
    Inline,
    /// A write chunk in the caller's DDP pages (first try: one segment).
    WriteChunk,
    /// A reply chunk of `max_reply` bytes in transport pages.
    ReplyChunk,
}

/// Largest reply that arrives inline: the smaller of the negotiated receive threshold and
/// our receive buffers, minus the smallest reply header (28 bytes).
pub fn max_inline_reply(recv_threshold: u32, recv_buf_size: u32) -> usize {
    (recv_threshold.min(recv_buf_size) as usize).saturating_sub(MIN_HEADER_LEN)
}

/// Whether the rest of a reply of at most `max_reply` bytes fits inline when its DDP result
/// (`ddp_len` bytes, no XDR pad provisioned) goes into a write chunk of `segments` segments
/// that the reply header echoes.
pub fn write_chunk_fits(
    max_reply: usize,
    ddp_len: usize,
    segments: usize,
    max_inline: usize,
) -> bool {
    max_reply.saturating_sub(ddp_len) + counted_chunk_len(segments) <= max_inline
}

/// The first choice for a call whose reply is at most `max_reply` bytes with a DDP result of
/// `ddp_len` bytes (0: none), `max_inline` being [`max_inline_reply`].
pub fn provision(max_reply: usize, ddp_len: usize, max_inline: usize) -> Provision {
    if max_reply <= max_inline {
        Provision::Inline
    } else if ddp_len > 0 && write_chunk_fits(max_reply, ddp_len, 1, max_inline) {
        Provision::WriteChunk
    } else {
        Provision::ReplyChunk
    }
}

/// A reply chunk for `max_reply` bytes, within `max_chunk_bytes`.
///
/// # Errors
/// [`CallError::TooLarge`] (refused by us: the call is handed back).
pub fn reply_chunk(max_reply: usize, max_chunk_bytes: u32) -> Result<usize, CallError> {
    if max_reply > max_chunk_bytes as usize {
        return Err(CallError::TooLarge);
    }
    Ok(max_reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1024-byte threshold: 996 bytes of reply arrive inline.
    const MAX_INLINE: usize = 1024 - MIN_HEADER_LEN;

    #[test]
    fn the_inline_reply_is_the_threshold_minus_the_smallest_header() {
        assert_eq!(max_inline_reply(1024, 4096), 996);
        // Our receive buffers bound it too.
        assert_eq!(max_inline_reply(4096, 1024), 996);
        assert_eq!(max_inline_reply(20, 4096), 0);
    }

    #[test]
    fn inline_exactly_at_the_threshold_and_a_chunk_one_byte_above() {
        assert_eq!(provision(MAX_INLINE, 0, MAX_INLINE), Provision::Inline);
        assert_eq!(
            provision(MAX_INLINE + 1, 0, MAX_INLINE),
            Provision::ReplyChunk
        );
        // A DDP result does not matter while the whole reply fits inline.
        assert_eq!(provision(MAX_INLINE, 4096, MAX_INLINE), Provision::Inline);
    }

    #[test]
    fn a_write_chunk_when_the_rest_and_the_echo_of_one_segment_fit() {
        // Echo of one segment: 8 + 16 = 24 bytes.
        let ddp = 65536;
        let edge = ddp + MAX_INLINE - 24;
        assert_eq!(provision(edge, ddp, MAX_INLINE), Provision::WriteChunk);
        assert_eq!(provision(edge + 1, ddp, MAX_INLINE), Provision::ReplyChunk);
    }

    #[test]
    fn more_segments_need_more_room_for_their_echo() {
        let ddp = 65536;
        let max_reply = ddp + MAX_INLINE - 24;
        assert!(write_chunk_fits(max_reply, ddp, 1, MAX_INLINE));
        assert!(!write_chunk_fits(max_reply, ddp, 2, MAX_INLINE));
        // 16 bytes less of the rest: two segments fit.
        assert!(write_chunk_fits(max_reply - 16, ddp, 2, MAX_INLINE));
    }

    #[test]
    fn the_write_chunk_is_the_pages_without_an_xdr_pad() {
        // A 4097-byte result: the caller's pages hold 4097 bytes (no pad provisioned); the
        // rest of the reply is max_reply - 4097 whatever the pad.
        let ddp = 4097;
        let max_reply = ddp + 3 + 100;
        assert!(write_chunk_fits(max_reply, ddp, 1, 103 + 24));
        assert!(!write_chunk_fits(max_reply, ddp, 1, 103 + 24 - 1));
    }

    #[test]
    fn a_reply_chunk_within_the_chunk_limit_only() {
        assert_eq!(reply_chunk(1 << 20, 1 << 20), Ok(1 << 20));
        assert_eq!(
            reply_chunk((1 << 20) + 1, 1 << 20),
            Err(CallError::TooLarge)
        );
    }
}
