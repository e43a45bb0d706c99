//! Validation of a received call's read chunks (responder), before anything is allocated:
//! every length and position the peer sent is checked (RFC 8166 §4.5.2: a semantic chunk
//! error is answered `ERR_CHUNK`). Pure; `Responder::parse_call` applies it.

use super::xdr_reduce::xdr_pad;

/// Read chunks per call we accept (RFC 8166 does not bound it; NFS uses one).
pub const MAX_CALL_CHUNKS: usize = 4;

/// The DDP budget of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadBudget {
    /// Largest read chunk.
    pub max_chunk_bytes: u32,
    /// Most bytes of read chunks in one call (their sum).
    pub max_call_ddp_bytes: u32,
}

impl ReadBudget {
    /// Admit one more chunk of `total` bytes, `call_bytes` being the call's chunks so far
    /// (updated): its length, or `None` when it breaks the budget (refuse the call).
    pub fn admit(&self, call_bytes: &mut u64, total: u64) -> Option<u32> {
        *call_bytes = call_bytes.saturating_add(total);
        if total > u64::from(self.max_chunk_bytes)
            || *call_bytes > u64::from(self.max_call_ddp_bytes)
        {
            return None;
        }
        u32::try_from(total).ok()
    }
}

/// Whether the read chunks `(position, length)` of a call fit the XDR stream they are placed
/// in: the inline payload (`payload_len` bytes) of an `RDMA_MSG`, or for a Long Call
/// (`nomsg`) the position-zero chunk, which must come first (RFC 8166 §3.5.3) and carry at
/// least one byte: an empty one is a Long Call with no RPC message, which nobody could
/// answer (the XID is in the message), so it is refused (`ERR_CHUNK`) rather than handed up.
/// Each other chunk's position, less the chunks and pads before it, must fall inside that
/// stream, in order, and not at 0.
pub fn positions_fit(chunks: &[(u32, u32)], nomsg: bool, payload_len: usize) -> bool {
    let (stream_len, placed) = if nomsg {
        match chunks.split_first() {
            Some((&(0, total0), rest)) if total0 > 0 => (u64::from(total0), rest),
            _ => return false,
        }
    } else {
        (payload_len as u64, chunks)
    };
    let mut removed = 0u64;
    let mut last_inline = 0u64;
    for &(pos, total) in placed {
        let Some(at) = u64::from(pos).checked_sub(removed) else {
            return false;
        };
        if pos == 0 || at > stream_len || at < last_inline {
            return false;
        }
        last_inline = at;
        removed += u64::from(total) + xdr_pad(total as usize) as u64;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: ReadBudget = ReadBudget {
        max_chunk_bytes: 1 << 20,
        max_call_ddp_bytes: 3 << 19,
    };

    #[test]
    fn a_chunk_exactly_at_the_limit_and_not_one_byte_above() {
        let mut sum = 0;
        assert_eq!(BUDGET.admit(&mut sum, 1 << 20), Some(1 << 20));
        let mut sum = 0;
        assert_eq!(BUDGET.admit(&mut sum, (1 << 20) + 1), None);
    }

    #[test]
    fn the_call_budget_counts_every_chunk() {
        let mut sum = 0;
        assert!(BUDGET.admit(&mut sum, 1 << 20).is_some());
        assert!(BUDGET.admit(&mut sum, 1 << 19).is_some());
        assert!(BUDGET.admit(&mut sum, 1).is_none());
        // A peer's 64-bit total near 2^64 saturates instead of wrapping.
        let mut sum = 0;
        assert!(BUDGET.admit(&mut sum, u64::MAX).is_none());
        assert!(BUDGET.admit(&mut sum, 1).is_none());
    }

    #[test]
    fn positions_inside_the_payload_in_order_with_pads_removed() {
        // Chunk at 8 of 4097 bytes (pad 3), next at 8 + 4100 + 4: 4 inline bytes between.
        assert!(positions_fit(&[(8, 4097), (8 + 4100 + 4, 10)], false, 16));
        // The second chunk's position before the first one's end (less the removed bytes).
        assert!(!positions_fit(&[(8, 4097), (8 + 4100 - 4, 10)], false, 16));
        // At the end of the payload: allowed; one byte after: refused.
        assert!(positions_fit(&[(16, 4)], false, 16));
        assert!(!positions_fit(&[(17, 4)], false, 16));
        // Position zero only for a Long Call.
        assert!(!positions_fit(&[(0, 4)], false, 16));
    }

    #[test]
    fn a_long_call_starts_with_its_position_zero_chunk() {
        assert!(positions_fit(&[(0, 100)], true, 0));
        assert!(positions_fit(&[(0, 100), (40, 8)], true, 0));
        assert!(!positions_fit(&[(0, 100), (104, 8)], true, 0));
        assert!(!positions_fit(&[(4, 100)], true, 0));
        assert!(!positions_fit(&[], true, 0));
    }

    #[test]
    fn a_long_call_with_an_empty_position_zero_chunk_is_refused() {
        // No RPC message at all: nothing to hand up, nobody to answer.
        assert!(!positions_fit(&[(0, 0)], true, 0));
        assert!(!positions_fit(&[(0, 0), (4, 8)], true, 0));
        // One byte is a message (the upper layer decides what it is worth).
        assert!(positions_fit(&[(0, 1)], true, 0));
    }
}
