//! How a reply is sent (responder, RFC 8166 §3.4.6, §3.5.4, §4.3): each DDP item goes by
//! RDMA Write into its write chunk, or inline when the requester sent that chunk empty
//! (§4.3.2.3); an unused chunk is echoed with zero lengths; a reply whose header and inline
//! part do not fit the send threshold goes through the reply chunk (Long Reply, `RDMA_NOMSG`).
//! Pure; `Responder::build_reply` executes it.

use crate::wire::Segment;

/// What happens to one of the requester's write chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteChunkUse {
    /// The reply's DDP item of the same index is RDMA Written into it.
    Written,
    /// The requester sent it empty: the item travels inline, the chunk is echoed empty.
    Inline,
    /// No DDP item for it: echoed with zero lengths.
    Unused,
}

/// The use of a write chunk (`chunk_empty`: no segments) given whether the reply has a DDP
/// item at its index.
pub fn write_chunk_use(has_item: bool, chunk_empty: bool) -> WriteChunkUse {
    match (has_item, chunk_empty) {
        (false, _) => WriteChunkUse::Unused,
        (true, true) => WriteChunkUse::Inline,
        (true, false) => WriteChunkUse::Written,
    }
}

/// Whether the reply goes as a Long Reply: its header (`header_len`, every chunk echoed) and
/// inline part (`inline` bytes, DDP items removed) exceed `max_send`.
pub fn is_long(header_len: usize, inline: usize, max_send: usize) -> bool {
    header_len + inline > max_send
}

/// The segments of `chunk` with their lengths set to what `written` bytes, filled in order,
/// put into each (what `rdma_plan::plan` maps; RFC 8166 §3.4.6: the responder reports the
/// bytes actually written).
pub fn written_segments(chunk: &[Segment], written: usize) -> impl Iterator<Item = Segment> + '_ {
    let mut left = written;
    chunk.iter().map(move |s| {
        let n = (s.length as usize).min(left);
        left -= n;
        Segment {
            length: n as u32,
            ..*s
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn an_empty_write_chunk_asks_for_the_item_inline() {
        assert_eq!(write_chunk_use(true, false), WriteChunkUse::Written);
        assert_eq!(write_chunk_use(true, true), WriteChunkUse::Inline);
        assert_eq!(write_chunk_use(false, false), WriteChunkUse::Unused);
        assert_eq!(write_chunk_use(false, true), WriteChunkUse::Unused);
    }

    #[test]
    fn long_one_byte_past_the_threshold() {
        assert!(!is_long(28, 996, 1024));
        assert!(is_long(28, 997, 1024));
    }

    #[test]
    fn written_lengths_fill_the_segments_in_order_without_the_pad() {
        let seg = |handle, length| Segment {
            handle,
            length,
            offset: 0x1000,
        };
        let chunk = [seg(1, 4096), seg(2, 4096)];
        // 4097 bytes written (an XDR pad of 3 is not written): 4096 + 1.
        let got: Vec<u32> = written_segments(&chunk, 4097).map(|s| s.length).collect();
        assert_eq!(got, [4096, 1]);
        let got: Vec<u32> = written_segments(&chunk, 0).map(|s| s.length).collect();
        assert_eq!(got, [0, 0]);
        // Handles and offsets are echoed unchanged.
        assert!(written_segments(&chunk, 10).all(|s| s.offset == 0x1000));
    }
}
