//! RPC-over-RDMA Version 1 wire formats: the transport header (RFC 8166 §4) and the
//! RDMA-CM private data exchanged at connection set-up (RFC 8797).
//!
//! The shape follows smoltcp's `wire` module:
//!
//! * [`Header`] is a zero-copy view over a received buffer. [`Header::new_checked`] walks and
//!   validates the whole transport header once; after that no accessor can panic (none can
//!   before it either: every read is bounds-checked and a short buffer reads as zero/empty).
//! * [`HeaderRepr`] is the owned, high-level form with `parse` / `buffer_len` / `emit`.
//!   `parse(emit(r)) == r` for every `r` that `emit` accepts, and `emit(parse(b))` reproduces
//!   the header bytes of `b` exactly (the encoding is canonical).
//! * Unknown values are kept where the caller may need them ([`Proc::Unknown`]), and every
//!   rejection is a [`DecodeError`] that says what a responder should answer
//!   ([`DecodeError::reply_error`], RFC 8166 §4.5).
//!
//! Nothing here allocates: chunk lists are bounded `heapless` vectors whose limits are the
//! constants below, and the decoder rejects headers that exceed them.
//!
//! # Decoding rules (what is accepted, and why)
//!
//! * `rdma_vers` is checked before anything else past the XID: any value but 1 is
//!   [`DecodeErrorKind::BadVersion`], answered with `ERR_VERS` (RFC 8166 §4.5.1). This applies to
//!   every procedure, including `RDMA_ERROR`: a version 1 endpoint cannot know the layout of
//!   another version's header, so it cannot trust an `RDMA_ERROR` body either.
//! * `rdma_proc` 0 (`RDMA_MSG`), 1 (`RDMA_NOMSG`) and 4 (`RDMA_ERROR`) are decoded. 2
//!   (`RDMA_MSGP`) and 3 (`RDMA_DONE`) are no longer part of the protocol (RFC 8166 §4.6) and,
//!   like any other value, are rejected with [`DecodeErrorKind::UnsupportedProc`] (answered with
//!   `ERR_CHUNK`, RFC 8166 §4.5.2).
//! * XDR optional-data discriminators must be exactly 0 or 1
//!   ([`DecodeErrorKind::BadDiscriminator`] otherwise).
//! * A Read segment's position must be a multiple of 4 ([`DecodeErrorKind::Misaligned`]):
//!   positions are XDR stream offsets and XDR items are 4-byte aligned (RFC 8166 §3.4.5, and
//!   RFC 4506 §3), so an unaligned position can never name the start of an XDR item; the
//!   message cannot be reassembled, which is an XDR error answered with `ERR_CHUNK`
//!   (RFC 8166 §4.5.2). `emit` refuses to produce such a header.
//! * Limits: at most [`MAX_READ_SEGMENTS`] Read list entries, [`MAX_WRITE_CHUNKS`] Write chunks,
//!   and [`MAX_CHUNK_SEGMENTS`] segments in any Write chunk or the Reply chunk. A write chunk's
//!   segment count is checked when it is read, before the segments, so a hostile count cannot
//!   make the decoder look past the limit. [`MAX_HEADER_LEN`] follows from those limits.
//! * `RDMA_NOMSG` with an empty Read list, Write list and Reply chunk is rejected
//!   ([`DecodeErrorKind::EmptyNoMsg`], `ERR_CHUNK`): RFC 8166 §4.5.2 lists it as an XDR error.
//! * Rules that need more than the header (`rdma_xid` equal to the RPC message's XID, a
//!   Position Zero Read chunk only with `RDMA_NOMSG`, positions inside the message, overlapping
//!   chunks, zero-length segments, a Write chunk with no segments) are left to the transport:
//!   the codec accepts what the XDR allows within the limits.
//! * Bytes after the header are the payload ([`Header::payload`]); the codec never rejects
//!   them, even after `RDMA_NOMSG` or `RDMA_ERROR`.

mod chunk;
mod cm_private;
mod encode;
mod error;
mod header;
mod xdr;

pub use chunk::{
    group_read_chunks, ChunkLists, ReadChunkSegments, ReadChunks, ReadSegment, Segment,
    SegmentIter, WriteChunk, READ_SEGMENT_LEN, SEGMENT_LEN,
};
pub use cm_private::{
    decode_inline_size, encode_inline_size, negotiate, CmFlags, CmPrivateData, InlineThresholds,
    CM_PRIVATE_LEN, CM_PRIVATE_MAGIC, CM_PRIVATE_VERSION, DEFAULT_INLINE_SIZE, MAX_INLINE_SIZE,
    MIN_INLINE_SIZE,
};
pub use encode::{counted_chunk_len, encode_error, header_len, HeaderEncoder};
pub use error::{
    DecodeError, DecodeErrorKind, EncodeError, ErrorBody, ErrorCode, ERR_CHUNK, ERR_VERS,
};
pub use header::{
    Body, Header, HeaderRepr, Proc, ReadListIter, WriteChunkView, WriteListIter, RDMA_DONE,
    RDMA_ERROR, RDMA_MSG, RDMA_MSGP, RDMA_NOMSG,
};

/// The RPC-over-RDMA protocol version this codec speaks (RFC 8166 §4.2.2).
pub const RPCRDMA_VERSION: u32 = 1;

/// Length of the fixed part of every header: `rdma_xid`, `rdma_vers`, `rdma_credit`, `rdma_proc`.
pub const FIXED_HEADER_LEN: usize = 16;

/// Smallest `RDMA_MSG` / `RDMA_NOMSG` header: the fixed part plus three empty chunk lists.
pub const MIN_HEADER_LEN: usize = 28;

/// Most Read list entries accepted in one message, counted over all Read chunks.
pub const MAX_READ_SEGMENTS: usize = 32;

/// Most segments in one Write chunk or in the Reply chunk. Linux splits a 1 MiB NFS WRITE into
/// many segments and FreeBSD's transport uses 16, so this must be at least 16.
pub const MAX_CHUNK_SEGMENTS: usize = 16;

/// Most Write chunks in one Write list.
pub const MAX_WRITE_CHUNKS: usize = 4;

/// Encoded length of a Read list holding [`MAX_READ_SEGMENTS`] entries, terminator included.
const MAX_READ_LIST_LEN: usize = MAX_READ_SEGMENTS * READ_SEGMENT_LEN + 4;
/// Encoded length of one full Write chunk (discriminator, count, segments) or a full Reply chunk.
const MAX_COUNTED_CHUNK_LEN: usize = 8 + MAX_CHUNK_SEGMENTS * SEGMENT_LEN;
/// Encoded length of a Write list holding [`MAX_WRITE_CHUNKS`] full chunks, terminator included.
const MAX_WRITE_LIST_LEN: usize = MAX_WRITE_CHUNKS * MAX_COUNTED_CHUNK_LEN + 4;

/// Largest header this codec can encode or will decode (2112 bytes with the limits above):
/// fixed part + full Read list + full Write list + full Reply chunk.
pub const MAX_HEADER_LEN: usize =
    FIXED_HEADER_LEN + MAX_READ_LIST_LEN + MAX_WRITE_LIST_LEN + MAX_COUNTED_CHUNK_LEN;

static_assertions::const_assert!(MAX_CHUNK_SEGMENTS >= 16);
static_assertions::const_assert_eq!(MIN_HEADER_LEN, FIXED_HEADER_LEN + 3 * 4);
static_assertions::const_assert_eq!(MAX_HEADER_LEN, 2112);
