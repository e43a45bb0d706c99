//! RDMA segments and the three chunk lists of RFC 8166 §3.4 and §4.3.
//!
//! * A *segment* (`rpcrdma1_segment`) names registered memory: handle, length, offset.
//! * The *Read list* is an XDR optional-data list of `{position, segment}` entries; the entries
//!   that share a position form one *Read chunk* (RFC 8166 §3.4.5). [`ChunkLists::read_chunks`]
//!   and [`group_read_chunks`] rebuild the chunks.
//! * The *Write list* is an optional-data list of *Write chunks*, each a counted array of
//!   segments (§3.4.6).
//! * The *Reply chunk* is an optional counted array of segments (§3.5.3).

use zerocopy::byteorder::big_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{MAX_CHUNK_SEGMENTS, MAX_READ_SEGMENTS, MAX_WRITE_CHUNKS};

/// Encoded length of one segment.
pub const SEGMENT_LEN: usize = 16;

/// Encoded length of one Read list entry: discriminator, position, segment.
pub const READ_SEGMENT_LEN: usize = 4 + 4 + SEGMENT_LEN;

/// One RDMA segment (`rpcrdma1_segment`, RFC 8166 §4.1): a steering tag and a byte range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Segment {
    /// `rdma_handle`: the registration's steering tag (R_key).
    pub handle: u32,
    /// `rdma_length`: bytes in the segment.
    pub length: u32,
    /// `rdma_offset`: the address or offset of the first byte.
    pub offset: u64,
}

/// The fixed 16-byte wire layout of a segment.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct SegmentWire {
    handle: U32,
    length: U32,
    offset: U64,
}

static_assertions::const_assert_eq!(core::mem::size_of::<SegmentWire>(), SEGMENT_LEN);

impl Segment {
    /// One past the last byte the segment names (`offset + length`), or `None` when that
    /// overflows 64 bits: such a segment can never be read or written, and a responder
    /// refuses it before computing any address from it.
    pub fn end(&self) -> Option<u64> {
        self.offset.checked_add(u64::from(self.length))
    }

    /// Decodes the segment in the first [`SEGMENT_LEN`] bytes of `buf`.
    pub fn from_bytes(buf: &[u8]) -> Option<Segment> {
        let (wire, _) = SegmentWire::ref_from_prefix(buf).ok()?;
        Some(Segment {
            handle: wire.handle.get(),
            length: wire.length.get(),
            offset: wire.offset.get(),
        })
    }

    /// The 16-byte encoding.
    pub fn to_bytes(&self) -> [u8; SEGMENT_LEN] {
        let wire = SegmentWire {
            handle: U32::new(self.handle),
            length: U32::new(self.length),
            offset: U64::new(self.offset),
        };
        let mut out = [0u8; SEGMENT_LEN];
        out.copy_from_slice(wire.as_bytes());
        out
    }
}

/// Iterator over the segments packed back to back in a byte slice (the body of a counted
/// array). Yields only whole segments.
#[derive(Debug, Clone)]
pub struct SegmentIter<'a> {
    chunks: core::slice::ChunksExact<'a, u8>,
}

impl<'a> SegmentIter<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        SegmentIter {
            chunks: data.chunks_exact(SEGMENT_LEN),
        }
    }
}

impl Iterator for SegmentIter<'_> {
    type Item = Segment;

    fn next(&mut self) -> Option<Segment> {
        self.chunks.next().and_then(Segment::from_bytes)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.chunks.size_hint()
    }
}

impl ExactSizeIterator for SegmentIter<'_> {}

/// One Read list entry (`rpcrdma1_read_segment`): a segment and the XDR position its data
/// belongs at in the unreduced RPC message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ReadSegment {
    /// `rdma_position`: byte offset in the XDR stream; a multiple of 4. Zero for a Position Zero
    /// Read chunk (a Long Call carried entirely in the chunk).
    pub position: u32,
    /// The memory to RDMA Read from.
    pub segment: Segment,
}

/// One Write chunk, or the Reply chunk: a counted array of segments.
pub type WriteChunk = heapless::Vec<Segment, MAX_CHUNK_SEGMENTS>;

/// The chunk lists carried by `RDMA_MSG` and `RDMA_NOMSG` (RFC 8166 §4.3).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChunkLists {
    /// Read list entries in wire order (all Read chunks together).
    pub read_list: heapless::Vec<ReadSegment, MAX_READ_SEGMENTS>,
    /// Write chunks in wire order.
    pub write_list: heapless::Vec<WriteChunk, MAX_WRITE_CHUNKS>,
    /// The Reply chunk, if any.
    pub reply_chunk: Option<WriteChunk>,
}

impl ChunkLists {
    /// No chunks at all (the lists of a short message).
    pub fn new() -> Self {
        ChunkLists::default()
    }

    /// True when all three lists are empty.
    pub fn is_empty(&self) -> bool {
        self.read_list.is_empty() && self.write_list.is_empty() && self.reply_chunk.is_none()
    }

    /// Encoded length of the three lists.
    pub fn buffer_len(&self) -> usize {
        let read = self.read_list.len() * READ_SEGMENT_LEN + 4;
        let write = self.write_list.iter().map(counted_len).sum::<usize>() + 4;
        let reply = self.reply_chunk.as_ref().map_or(4, counted_len);
        read + write + reply
    }

    /// The Read chunks: entries grouped by position, in ascending position order; within a
    /// chunk, segments keep their Read list order (RFC 8166 §3.4.5: segments with the same
    /// position form one chunk, in list order).
    pub fn read_chunks(
        &self,
    ) -> ReadChunks<core::iter::Copied<core::slice::Iter<'_, ReadSegment>>> {
        group_read_chunks(self.read_list.iter().copied())
    }

    /// The first Read segment position that is not a multiple of 4, if any.
    pub fn misaligned_position(&self) -> Option<u32> {
        self.read_list
            .iter()
            .map(|r| r.position)
            .find(|p| p % 4 != 0)
    }
}

/// Length of `{1, count, segments}`.
fn counted_len(chunk: &WriteChunk) -> usize {
    8 + chunk.len() * SEGMENT_LEN
}

/// Groups any Read list into Read chunks (see [`ChunkLists::read_chunks`]); works on the view's
/// [`ReadListIter`](super::ReadListIter) as well. Quadratic in the list length, which is at most
/// [`MAX_READ_SEGMENTS`]; allocates nothing.
pub fn group_read_chunks<I>(list: I) -> ReadChunks<I::IntoIter>
where
    I: IntoIterator<Item = ReadSegment>,
    I::IntoIter: Clone,
{
    ReadChunks {
        list: list.into_iter(),
        last: None,
    }
}

/// Iterator over Read chunks as `(position, segments)`, in ascending position order.
#[derive(Debug, Clone)]
pub struct ReadChunks<I> {
    list: I,
    last: Option<u32>,
}

impl<I> Iterator for ReadChunks<I>
where
    I: Iterator<Item = ReadSegment> + Clone,
{
    type Item = (u32, ReadChunkSegments<I>);

    fn next(&mut self) -> Option<Self::Item> {
        let last = self.last;
        let position = self
            .list
            .clone()
            .map(|r| r.position)
            .filter(|p| last.is_none_or(|l| *p > l))
            .min()?;
        self.last = Some(position);
        Some((
            position,
            ReadChunkSegments {
                list: self.list.clone(),
                position,
            },
        ))
    }
}

/// The segments of one Read chunk, in Read list order.
#[derive(Debug, Clone)]
pub struct ReadChunkSegments<I> {
    list: I,
    position: u32,
}

impl<I> ReadChunkSegments<I>
where
    I: Iterator<Item = ReadSegment> + Clone,
{
    /// Sum of the segment lengths: the bytes the chunk carries.
    pub fn total_length(&self) -> u64 {
        self.clone().map(|s| u64::from(s.length)).sum()
    }
}

impl<I> Iterator for ReadChunkSegments<I>
where
    I: Iterator<Item = ReadSegment>,
{
    type Item = Segment;

    fn next(&mut self) -> Option<Segment> {
        let position = self.position;
        self.list
            .by_ref()
            .find(|r| r.position == position)
            .map(|r| r.segment)
    }
}
