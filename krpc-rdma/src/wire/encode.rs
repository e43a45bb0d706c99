//! Encoding a transport header straight into a send buffer, without building an owned
//! representation first.
//!
//! [`HeaderRepr`](super::HeaderRepr) holds every list at its largest (2 KiB); a transport that
//! builds one per message, moves it and emits it pays for that size on every RPC and on its
//! stack. [`HeaderEncoder`] writes the fixed part, then the Read list entries, the Write
//! chunks and the Reply chunk in wire order, each from whatever the caller already holds (a
//! registration's segments, a received header's chunk, a context's stored segments). It keeps
//! only offsets and counts, not the buffer, so a caller may do other work between two steps
//! (register the next chunk, say) and hand the buffer in again.
//!
//! What it writes is exactly what [`HeaderRepr::emit`](super::HeaderRepr::emit) writes for the
//! same lists (that method is built on it), and it refuses what the decoder would reject:
//! misaligned positions, more entries than the codec's limits, `RDMA_NOMSG` without chunks.

use super::chunk::{ReadSegment, Segment, READ_SEGMENT_LEN, SEGMENT_LEN};
use super::error::{EncodeError, ErrorBody};
use super::header::{RDMA_ERROR, RDMA_MSG, RDMA_NOMSG};
use super::xdr::put_u32;
use super::{
    FIXED_HEADER_LEN, MAX_CHUNK_SEGMENTS, MAX_READ_SEGMENTS, MAX_WRITE_CHUNKS, RPCRDMA_VERSION,
};

/// Encoded length of a counted chunk of `segments` segments (a Write chunk, or a present Reply
/// chunk): discriminator, count, segments.
pub const fn counted_chunk_len(segments: usize) -> usize {
    8 + segments * SEGMENT_LEN
}

/// Length of an `RDMA_MSG` / `RDMA_NOMSG` header with `reads` Read list entries, Write chunks
/// of the given segment counts, and a Reply chunk of `reply` segments if present.
pub fn header_len(
    reads: usize,
    write_chunks: impl IntoIterator<Item = usize>,
    reply: Option<usize>,
) -> usize {
    let writes: usize = write_chunks.into_iter().map(counted_chunk_len).sum();
    FIXED_HEADER_LEN
        + reads * READ_SEGMENT_LEN
        + 4
        + writes
        + 4
        + reply.map_or(4, counted_chunk_len)
}

/// Where the encoder stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Read list entries may follow.
    Reads,
    /// The Read list is closed; Write chunks may follow.
    Writes,
}

/// Incremental encoder of an `RDMA_MSG` / `RDMA_NOMSG` header (see the module docs of `wire/encode.rs`).
///
/// ```
/// # use krpc_rdma::wire::{HeaderEncoder, Header, Segment};
/// let mut buf = [0u8; 128];
/// let seg = Segment { handle: 7, length: 4096, offset: 0x1000 };
/// let mut enc = HeaderEncoder::begin(&mut buf, 42, 32, false).unwrap();
/// enc.write_chunk(&mut buf, [seg]).unwrap();
/// let len = enc.finish(&mut buf, None::<[Segment; 0]>).unwrap();
/// let hdr = Header::new_checked(&buf[..len]).unwrap();
/// assert_eq!(hdr.write_list().count(), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderEncoder {
    at: usize,
    stage: Stage,
    reads: usize,
    writes: usize,
    nomsg: bool,
}

impl HeaderEncoder {
    /// Writes the fixed part of a version 1 header (`RDMA_NOMSG` if `nomsg`, else `RDMA_MSG`)
    /// at the start of `buf`.
    ///
    /// # Errors
    /// [`EncodeError::BufferTooShort`].
    pub fn begin(
        buf: &mut [u8],
        xid: u32,
        credit: u32,
        nomsg: bool,
    ) -> Result<HeaderEncoder, EncodeError> {
        let proc_num = if nomsg { RDMA_NOMSG } else { RDMA_MSG };
        fixed(buf, xid, RPCRDMA_VERSION, credit, proc_num)?;
        Ok(HeaderEncoder {
            at: FIXED_HEADER_LEN,
            stage: Stage::Reads,
            reads: 0,
            writes: 0,
            nomsg,
        })
    }

    /// Bytes written so far (the open lists not yet terminated).
    pub fn len(&self) -> usize {
        self.at
    }

    /// Never true: the fixed part is always written.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Read list entries written.
    pub fn read_entries(&self) -> usize {
        self.reads
    }

    /// Appends one Read list entry.
    ///
    /// # Errors
    /// [`EncodeError::Misaligned`] for a position that is not a multiple of 4,
    /// [`EncodeError::TooMany`] after [`MAX_READ_SEGMENTS`] entries or once a Write chunk was
    /// written, [`EncodeError::BufferTooShort`]. Nothing is written on error.
    pub fn read_segment(&mut self, buf: &mut [u8], entry: &ReadSegment) -> Result<(), EncodeError> {
        if entry.position % 4 != 0 {
            return Err(EncodeError::Misaligned {
                position: entry.position,
            });
        }
        if self.stage != Stage::Reads || self.reads == MAX_READ_SEGMENTS {
            return Err(EncodeError::TooMany);
        }
        let end = self.room(buf, READ_SEGMENT_LEN)?;
        word(buf, self.at, 1)?;
        word(buf, self.at + 4, entry.position)?;
        segment(buf, self.at + 8, &entry.segment)?;
        self.at = end;
        self.reads += 1;
        Ok(())
    }

    /// Removes every Read list entry written so far (a caller that finds its read chunks do
    /// not fit and starts over, e.g. with a Long Call).
    pub fn clear_reads(&mut self) {
        if self.stage == Stage::Reads {
            self.at = FIXED_HEADER_LEN;
            self.reads = 0;
        }
    }

    fn close_reads(&mut self, buf: &mut [u8]) -> Result<(), EncodeError> {
        if self.stage == Stage::Reads {
            let end = self.room(buf, 4)?;
            word(buf, self.at, 0)?;
            self.at = end;
            self.stage = Stage::Writes;
        }
        Ok(())
    }

    /// Appends one Write chunk (closing the Read list first).
    ///
    /// # Errors
    /// [`EncodeError::TooMany`] for a chunk of more than [`MAX_CHUNK_SEGMENTS`] segments or
    /// more than [`MAX_WRITE_CHUNKS`] chunks, [`EncodeError::BufferTooShort`].
    pub fn write_chunk<I>(&mut self, buf: &mut [u8], segments: I) -> Result<(), EncodeError>
    where
        I: IntoIterator<Item = Segment>,
    {
        if self.writes == MAX_WRITE_CHUNKS {
            return Err(EncodeError::TooMany);
        }
        self.close_reads(buf)?;
        word(buf, self.at, 1)?;
        self.at = counted(buf, self.at + 4, segments)?;
        self.writes += 1;
        Ok(())
    }

    /// Closes the lists, writes the Reply chunk (if any) and returns the header length.
    ///
    /// # Errors
    /// [`EncodeError::EmptyNoMsg`] for an `RDMA_NOMSG` without any chunk,
    /// [`EncodeError::TooMany`] for a Reply chunk of more than [`MAX_CHUNK_SEGMENTS`]
    /// segments, [`EncodeError::BufferTooShort`].
    pub fn finish<I>(mut self, buf: &mut [u8], reply: Option<I>) -> Result<usize, EncodeError>
    where
        I: IntoIterator<Item = Segment>,
    {
        if self.nomsg && self.reads == 0 && self.writes == 0 && reply.is_none() {
            return Err(EncodeError::EmptyNoMsg);
        }
        self.close_reads(buf)?;
        self.room(buf, 8)?;
        word(buf, self.at, 0)?;
        self.at += 4;
        match reply {
            None => {
                word(buf, self.at, 0)?;
                Ok(self.at + 4)
            }
            Some(segments) => {
                word(buf, self.at, 1)?;
                counted(buf, self.at + 4, segments)
            }
        }
    }

    fn room(&self, buf: &[u8], more: usize) -> Result<usize, EncodeError> {
        let end = self.at.saturating_add(more);
        if end > buf.len() {
            return Err(EncodeError::BufferTooShort {
                needed: end,
                available: buf.len(),
            });
        }
        Ok(end)
    }
}

/// Encodes an `RDMA_ERROR` header (`vers` is echoed from the refused request, RFC 8166 §4.5:
/// any value is allowed with `ERR_VERS`, only 1 with `ERR_CHUNK`); returns its length (20 or
/// 28 bytes).
///
/// # Errors
/// [`EncodeError::BadVersion`], [`EncodeError::BufferTooShort`].
pub fn encode_error(
    buf: &mut [u8],
    xid: u32,
    vers: u32,
    credit: u32,
    body: ErrorBody,
) -> Result<usize, EncodeError> {
    if vers != RPCRDMA_VERSION && !matches!(body, ErrorBody::Vers { .. }) {
        return Err(EncodeError::BadVersion { vers });
    }
    let len = FIXED_HEADER_LEN + body.buffer_len();
    if buf.len() < len {
        return Err(EncodeError::BufferTooShort {
            needed: len,
            available: buf.len(),
        });
    }
    fixed(buf, xid, vers, credit, RDMA_ERROR)?;
    word(buf, FIXED_HEADER_LEN, body.code().as_u32())?;
    if let ErrorBody::Vers { low, high } = body {
        word(buf, FIXED_HEADER_LEN + 4, low)?;
        word(buf, FIXED_HEADER_LEN + 8, high)?;
    }
    Ok(len)
}

fn fixed(
    buf: &mut [u8],
    xid: u32,
    vers: u32,
    credit: u32,
    proc_num: u32,
) -> Result<(), EncodeError> {
    if buf.len() < FIXED_HEADER_LEN {
        return Err(EncodeError::BufferTooShort {
            needed: FIXED_HEADER_LEN,
            available: buf.len(),
        });
    }
    word(buf, 0, xid)?;
    word(buf, 4, vers)?;
    word(buf, 8, credit)?;
    word(buf, 12, proc_num)
}

/// Writes `{count, segments}` at `at` (the discriminator already written before it); returns
/// the end.
fn counted<I>(buf: &mut [u8], at: usize, segments: I) -> Result<usize, EncodeError>
where
    I: IntoIterator<Item = Segment>,
{
    let mut off = at + 4;
    let mut n = 0u32;
    for s in segments {
        if n as usize == MAX_CHUNK_SEGMENTS {
            return Err(EncodeError::TooMany);
        }
        segment(buf, off, &s)?;
        off += SEGMENT_LEN;
        n += 1;
    }
    word(buf, at, n)?;
    Ok(off)
}

fn word(buf: &mut [u8], at: usize, value: u32) -> Result<(), EncodeError> {
    let available = buf.len();
    put_u32(buf, at, value).ok_or(EncodeError::BufferTooShort {
        needed: at.saturating_add(4),
        available,
    })
}

fn segment(buf: &mut [u8], at: usize, s: &Segment) -> Result<(), EncodeError> {
    let available = buf.len();
    let dst = buf
        .get_mut(at..at + SEGMENT_LEN)
        .ok_or(EncodeError::BufferTooShort {
            needed: at + SEGMENT_LEN,
            available,
        })?;
    dst.copy_from_slice(&s.to_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Header, HeaderRepr};

    fn seg(h: u32) -> Segment {
        Segment {
            handle: h,
            length: 4096,
            offset: u64::from(h) << 12,
        }
    }

    #[test]
    fn writes_what_the_repr_writes_and_refuses_what_the_decoder_rejects() {
        let mut buf = [0u8; 512];
        let mut enc = HeaderEncoder::begin(&mut buf, 9, 32, false).unwrap();
        let entry = ReadSegment {
            position: 8,
            segment: seg(1),
        };
        enc.read_segment(&mut buf, &entry).unwrap();
        let bad = ReadSegment {
            position: 6,
            segment: seg(1),
        };
        assert_eq!(
            enc.read_segment(&mut buf, &bad),
            Err(EncodeError::Misaligned { position: 6 })
        );
        enc.write_chunk(&mut buf, [seg(2), seg(3)]).unwrap();
        // No Read list entry after a Write chunk.
        assert_eq!(
            enc.read_segment(&mut buf, &entry),
            Err(EncodeError::TooMany)
        );
        let len = enc.finish(&mut buf, Some([seg(4)])).unwrap();
        assert_eq!(len, header_len(1, [2], Some(1)));
        let repr = HeaderRepr::parse(&buf[..len]).unwrap();
        let mut again = [0u8; 512];
        assert_eq!(repr.emit(&mut again), Ok(len));
        assert_eq!(again[..len], buf[..len]);
        assert!(Header::new_checked(&buf[..len]).is_ok());

        let enc = HeaderEncoder::begin(&mut buf, 9, 32, true).unwrap();
        assert_eq!(
            enc.finish(&mut buf, None::<[Segment; 0]>),
            Err(EncodeError::EmptyNoMsg)
        );
        let mut short = [0u8; 20];
        let enc = HeaderEncoder::begin(&mut short, 9, 32, false).unwrap();
        assert!(matches!(
            enc.finish(&mut short, None::<[Segment; 0]>),
            Err(EncodeError::BufferTooShort { .. })
        ));
        let too_many = core::iter::repeat_n(seg(5), MAX_CHUNK_SEGMENTS + 1);
        let mut enc = HeaderEncoder::begin(&mut buf, 9, 32, false).unwrap();
        assert_eq!(
            enc.write_chunk(&mut buf, too_many),
            Err(EncodeError::TooMany)
        );
        assert_eq!(
            encode_error(&mut buf, 1, 2, 1, ErrorBody::Chunk),
            Err(EncodeError::BadVersion { vers: 2 })
        );
        assert_eq!(
            encode_error(&mut buf, 1, 2, 1, ErrorBody::SUPPORTED_VERSIONS),
            Ok(28)
        );
    }
}
