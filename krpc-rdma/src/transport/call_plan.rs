//! How a call is sent (RFC 8166 §3.5): inline (`RDMA_MSG`) when the whole call fits the send
//! threshold; else its DDP regions as read chunks with the rest inline; else a Long Call
//! (`RDMA_NOMSG`, the whole call in a position-zero read chunk).
//!
//! Pure: the requester executes the plan (`Requester::marshal`) and asks [`read_chunks_fit`]
//! once the registrations tell how many Read list entries the header carries.

use super::error::CallError;
use crate::wire::header_len;

/// Most read chunks (DDP regions) one call sends.
pub const MAX_READ_CHUNKS: usize = 4;

/// How a call goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallPlan {
    /// Header and the whole call in one Send.
    Inline,
    /// Each DDP region as a read chunk, the rest inline (if it then fits).
    ReadChunks,
    /// The whole call in a position-zero read chunk.
    LongCall,
}

/// The reply chunk the call header carries: Write list segments or Reply chunk segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Provisioned {
    /// Segments of the one write chunk, if provisioned.
    pub writes: Option<usize>,
    /// Segments of the reply chunk, if provisioned.
    pub reply: Option<usize>,
}

impl Provisioned {
    /// Header length with `reads` Read list entries.
    pub fn header_len(&self, reads: usize) -> usize {
        header_len(reads, self.writes, self.reply)
    }
}

/// The first choice for a call of `total` bytes with `ddp_regions` DDP regions (non-empty)
/// and `max_send` the largest inline Send: [`fits_inline`], else [`too_large_for_inline`].
pub fn plan(total: usize, ddp_regions: usize, chunks: Provisioned, max_send: usize) -> CallPlan {
    if fits_inline(total, chunks, max_send) {
        CallPlan::Inline
    } else {
        too_large_for_inline(ddp_regions)
    }
}

/// Whether the whole call (`total` bytes) goes inline.
pub fn fits_inline(total: usize, chunks: Provisioned, max_send: usize) -> bool {
    chunks.header_len(0) + total <= max_send
}

/// A call too large for inline, with `ddp_regions` DDP regions (non-empty): read chunks for
/// one to [`MAX_READ_CHUNKS`] regions, else a Long Call.
pub fn too_large_for_inline(ddp_regions: usize) -> CallPlan {
    if (1..=MAX_READ_CHUNKS).contains(&ddp_regions) {
        CallPlan::ReadChunks
    } else {
        CallPlan::LongCall
    }
}

/// Whether the reduced call (`reduced` bytes left inline) fits with `read_entries` Read list
/// entries; if not, the requester falls back to a Long Call.
pub fn read_chunks_fit(
    read_entries: usize,
    reduced: usize,
    chunks: Provisioned,
    max_send: usize,
) -> bool {
    chunks.header_len(read_entries) + reduced <= max_send
}

/// A Long Call of `total` bytes, within `max_chunk_bytes`.
///
/// # Errors
/// [`CallError::TooLarge`] (refused by us: the call is handed back).
pub fn long_call(total: usize, max_chunk_bytes: u32) -> Result<(), CallError> {
    if total > max_chunk_bytes as usize {
        return Err(CallError::TooLarge);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::MIN_HEADER_LEN;

    const SEND: usize = 1024;
    const NONE: Provisioned = Provisioned {
        writes: None,
        reply: None,
    };

    #[test]
    fn inline_exactly_at_the_threshold_and_not_one_byte_above() {
        let fits = SEND - MIN_HEADER_LEN;
        assert_eq!(plan(fits, 0, NONE, SEND), CallPlan::Inline);
        assert_eq!(plan(fits + 1, 0, NONE, SEND), CallPlan::LongCall);
        assert_eq!(plan(fits + 1, 1, NONE, SEND), CallPlan::ReadChunks);
    }

    #[test]
    fn a_provisioned_chunk_takes_room_from_the_inline_call() {
        // A write chunk of one segment: 8 + 16 bytes more header.
        let w = Provisioned {
            writes: Some(1),
            reply: None,
        };
        let fits = SEND - MIN_HEADER_LEN - 24;
        assert_eq!(plan(fits, 0, w, SEND), CallPlan::Inline);
        assert_eq!(plan(fits + 1, 0, w, SEND), CallPlan::LongCall);
        // A reply chunk of two segments: its discriminator, count and segments (8 + 32 bytes)
        // replace the 4-byte "no reply chunk" word of the smallest header: 36 more.
        let r = Provisioned {
            writes: None,
            reply: Some(2),
        };
        assert_eq!(
            plan(SEND - MIN_HEADER_LEN - 36, 0, r, SEND),
            CallPlan::Inline
        );
        assert_eq!(
            plan(SEND - MIN_HEADER_LEN - 35, 0, r, SEND),
            CallPlan::LongCall
        );
    }

    #[test]
    fn more_than_four_regions_go_as_a_long_call() {
        assert_eq!(
            plan(1 << 20, MAX_READ_CHUNKS, NONE, SEND),
            CallPlan::ReadChunks
        );
        assert_eq!(
            plan(1 << 20, MAX_READ_CHUNKS + 1, NONE, SEND),
            CallPlan::LongCall
        );
    }

    #[test]
    fn read_entries_cost_24_bytes_each_then_the_long_call_switch() {
        // One Read list entry: discriminator, position, segment = 4 + 4 + 16 bytes.
        let fits = SEND - MIN_HEADER_LEN - 24;
        assert!(read_chunks_fit(1, fits, NONE, SEND));
        assert!(!read_chunks_fit(1, fits + 1, NONE, SEND));
        assert!(!read_chunks_fit(2, fits, NONE, SEND));
    }

    #[test]
    fn a_long_call_within_the_chunk_limit_only() {
        assert_eq!(long_call(1 << 20, 1 << 20), Ok(()));
        assert_eq!(long_call((1 << 20) + 1, 1 << 20), Err(CallError::TooLarge));
    }
}
