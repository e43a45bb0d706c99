//! XDR positions and roundup (RFC 8166 §3.4.5, RFC 4506 §3).
//!
//! A DDP-eligible data item is *reduced*: its bytes leave the inline XDR stream and travel in a
//! chunk. The item's length word stays inline; its XDR roundup pad (0..3 zero bytes that follow
//! the data in the chain) is sent neither inline nor in the chunk. A read chunk's position is
//! the item's byte offset in the *unreduced* XDR stream, which is a multiple of 4.

use core::ops::Range;

use mbuf::Chain;

use super::error::CallError;
use crate::wire::MAX_WRITE_CHUNKS;

/// The XDR roundup of `len`: zero bytes needed to reach a multiple of 4.
pub const fn xdr_pad(len: usize) -> usize {
    (4 - len % 4) % 4
}

/// One reduced data item of a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReducedItem {
    /// Chain offset of the first data byte (= XDR position in the unreduced stream).
    pub offset: usize,
    /// Data bytes.
    pub len: usize,
    /// Roundup pad bytes that follow the data in the chain (removed too).
    pub pad: usize,
}

impl ReducedItem {
    /// The bytes removed from the inline stream: data and pad.
    pub fn removed(&self) -> Range<usize> {
        self.offset..self.offset + self.len + self.pad
    }

    /// The data bytes.
    pub fn data(&self) -> Range<usize> {
        self.offset..self.offset + self.len
    }
}

/// The reduced items of a chain, at most one per write/read chunk we support.
pub type Reduction = heapless::Vec<ReducedItem, MAX_WRITE_CHUNKS>;

/// The DDP regions of `chain` as reduced items, skipping regions of zero bytes when
/// `skip_empty`. Each must start at a 4-aligned offset. The pad is the roundup the chain
/// actually holds after the data (at most `xdr_pad(len)`).
///
/// # Errors
/// [`CallError::UnalignedPosition`], [`CallError::TooLarge`] for more regions than
/// [`MAX_WRITE_CHUNKS`].
pub fn reduce(chain: &Chain, skip_empty: bool) -> Result<Reduction, CallError> {
    let mut out = Reduction::new();
    if !chain.mbufs().any(mbuf::Mbuf::is_ddp_marker) {
        return Ok(out);
    }
    let total = chain.len();
    for region in chain.ddp_regions() {
        if skip_empty && region.len == 0 {
            continue;
        }
        if region.offset % 4 != 0 {
            return Err(CallError::UnalignedPosition);
        }
        let end = region.offset + region.len;
        let pad = xdr_pad(region.len).min(total.saturating_sub(end));
        out.push(ReducedItem {
            offset: region.offset,
            len: region.len,
            pad,
        })
        .map_err(|_| CallError::TooLarge)?;
    }
    Ok(out)
}

/// Bytes left inline once `items` are removed from a chain of `total` bytes.
pub fn inline_len(total: usize, items: &[ReducedItem]) -> usize {
    let removed: usize = items.iter().map(|i| i.len + i.pad).sum();
    total.saturating_sub(removed)
}

/// The chain ranges that stay inline (complement of the removed ranges), in order.
pub fn kept_ranges(total: usize, items: &[ReducedItem]) -> KeptRanges<'_> {
    KeptRanges {
        items,
        idx: 0,
        pos: 0,
        total,
        done: false,
    }
}

/// Iterator of [`kept_ranges`]; yields non-empty ranges only.
#[derive(Debug, Clone)]
pub struct KeptRanges<'a> {
    items: &'a [ReducedItem],
    idx: usize,
    pos: usize,
    total: usize,
    done: bool,
}

impl Iterator for KeptRanges<'_> {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        while !self.done {
            let (end, next) = match self.items.get(self.idx) {
                Some(item) => {
                    self.idx += 1;
                    let r = item.removed();
                    (r.start.min(self.total), r.end.min(self.total))
                }
                None => {
                    self.done = true;
                    (self.total, self.total)
                }
            };
            let range = self.pos..end.max(self.pos);
            self.pos = next.max(self.pos);
            if !range.is_empty() {
                return Some(range);
            }
        }
        None
    }
}

/// Copy the inline part of `chain` (everything but `items`) into `dst`; returns the length.
///
/// # Errors
/// [`CallError::TooLarge`] if `dst` is too short.
pub fn copy_inline(
    chain: &Chain,
    items: &[ReducedItem],
    dst: &mut [u8],
) -> Result<usize, CallError> {
    if items.is_empty() {
        // The whole chain, in one pass.
        return chain.copy_to_slice(dst).map_err(|e| match e {
            mbuf::MbufError::OutOfRange { .. } => CallError::TooLarge,
            other => other.into(),
        });
    }
    let mut at = 0usize;
    for range in kept_ranges(chain.len(), items) {
        let n = range.len();
        let out = dst.get_mut(at..at + n).ok_or(CallError::TooLarge)?;
        chain.copydata(range.start, out)?;
        at += n;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    #[test]
    fn pads() {
        assert_eq!(xdr_pad(0), 0);
        assert_eq!(xdr_pad(1), 3);
        assert_eq!(xdr_pad(4095), 1);
        assert_eq!(xdr_pad(4096), 0);
        assert_eq!(xdr_pad(4097), 3);
    }

    #[test]
    fn kept() {
        let items = [
            ReducedItem {
                offset: 8,
                len: 5,
                pad: 3,
            },
            ReducedItem {
                offset: 20,
                len: 4,
                pad: 0,
            },
        ];
        let v: Vec<_> = kept_ranges(30, &items).collect();
        assert_eq!(v, [0..8, 16..20, 24..30]);
        assert_eq!(inline_len(30, &items), 18);
        let v: Vec<_> = kept_ranges(24, &items).collect();
        assert_eq!(v, [0..8, 16..20]);
        let v: Vec<_> = kept_ranges(10, &[]).collect();
        assert_eq!(v, vec![0..10]);
    }
}
