//! The RPC-over-RDMA Version 1 transport header (RFC 8166 §4.1, §4.2): a zero-copy checked view
//! ([`Header`]) and an owned representation ([`HeaderRepr`]).
//!
//! ```text
//!  0        4        8        12       16
//!  +--------+--------+--------+--------+------------------------------------------+
//!  | xid    | vers=1 | credit | proc   | body                                     |
//!  +--------+--------+--------+--------+------------------------------------------+
//!  RDMA_MSG / RDMA_NOMSG body: read list, write list, reply chunk (then, for RDMA_MSG,
//!  the RPC message). RDMA_ERROR body: err, and for ERR_VERS, low and high.
//! ```

use core::fmt;

use super::chunk::{
    group_read_chunks, ChunkLists, ReadChunks, ReadSegment, Segment, SegmentIter, WriteChunk,
    READ_SEGMENT_LEN, SEGMENT_LEN,
};
use super::encode::{encode_error, HeaderEncoder};
use super::error::{
    DecodeError, DecodeErrorKind, EncodeError, ErrorBody, ErrorCode, ERR_CHUNK, ERR_VERS,
};
use super::xdr::{get_u32, put_u32};
use super::{
    FIXED_HEADER_LEN, MAX_CHUNK_SEGMENTS, MAX_HEADER_LEN, MAX_READ_SEGMENTS, MAX_WRITE_CHUNKS,
    RPCRDMA_VERSION,
};

/// `rdma_proc` 0: an RPC message follows the header inline.
pub const RDMA_MSG: u32 = 0;
/// `rdma_proc` 1: no RPC message follows; it travels in a Position Zero Read chunk (Long Call)
/// or the Reply chunk (Long Reply).
pub const RDMA_NOMSG: u32 = 1;
/// `rdma_proc` 2: RFC 5666's padded message, no longer supported (RFC 8166 §4.6.1).
pub const RDMA_MSGP: u32 = 2;
/// `rdma_proc` 3: RFC 5666's "done" signal, no longer supported (RFC 8166 §4.6.2).
pub const RDMA_DONE: u32 = 3;
/// `rdma_proc` 4: a transport error report.
pub const RDMA_ERROR: u32 = 4;

/// Byte offsets of the fixed fields, and of the fields inside list entries.
mod field {
    use core::ops::Range;

    pub(super) const XID: Range<usize> = 0..4;
    pub(super) const VERS: Range<usize> = 4..8;
    pub(super) const CREDIT: Range<usize> = 8..12;
    pub(super) const PROC: Range<usize> = 12..16;
    /// Start of the body (the Read list, or `rdma_err`).
    pub(super) const BODY: usize = 16;

    /// `rdma_err` of an `RDMA_ERROR`.
    pub(super) const ERR_CODE: usize = BODY;
    /// `rdma_vers_low` of an `ERR_VERS`.
    pub(super) const ERR_VERS_LOW: usize = BODY + 4;
    /// `rdma_vers_high` of an `ERR_VERS`.
    pub(super) const ERR_VERS_HIGH: usize = BODY + 8;
    /// End of an `ERR_CHUNK` header.
    pub(super) const ERR_CHUNK_END: usize = BODY + 4;
    /// End of an `ERR_VERS` header.
    pub(super) const ERR_VERS_END: usize = BODY + 12;

    /// In a Read list entry (from its discriminator): `rdma_position`.
    pub(super) const READ_POSITION: usize = 4;
    /// In a Read list entry: the segment.
    pub(super) const READ_SEGMENT: usize = 8;
    /// In a counted chunk (from its discriminator): the segment count.
    pub(super) const CHUNK_COUNT: usize = 4;
    /// In a counted chunk: the first segment.
    pub(super) const CHUNK_SEGMENTS: usize = 8;
}

/// The RFC's name for a procedure number, `None` for undefined values.
pub(crate) const fn proc_name(proc_num: u32) -> Option<&'static str> {
    match proc_num {
        RDMA_MSG => Some("RDMA_MSG"),
        RDMA_NOMSG => Some("RDMA_NOMSG"),
        RDMA_MSGP => Some("RDMA_MSGP"),
        RDMA_DONE => Some("RDMA_DONE"),
        RDMA_ERROR => Some("RDMA_ERROR"),
        _ => None,
    }
}

/// `rdma_proc`, with unknown values kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Proc {
    /// `RDMA_MSG` (0).
    Msg,
    /// `RDMA_NOMSG` (1).
    NoMsg,
    /// `RDMA_MSGP` (2), no longer supported.
    MsgP,
    /// `RDMA_DONE` (3), no longer supported.
    Done,
    /// `RDMA_ERROR` (4).
    Error,
    /// Any other value.
    Unknown(u32),
}

impl Proc {
    /// Whether this codec decodes the procedure (`RDMA_MSG`, `RDMA_NOMSG`, `RDMA_ERROR`).
    pub const fn is_supported(self) -> bool {
        matches!(self, Proc::Msg | Proc::NoMsg | Proc::Error)
    }
}

impl From<u32> for Proc {
    fn from(value: u32) -> Proc {
        match value {
            RDMA_MSG => Proc::Msg,
            RDMA_NOMSG => Proc::NoMsg,
            RDMA_MSGP => Proc::MsgP,
            RDMA_DONE => Proc::Done,
            RDMA_ERROR => Proc::Error,
            other => Proc::Unknown(other),
        }
    }
}

impl From<Proc> for u32 {
    fn from(value: Proc) -> u32 {
        match value {
            Proc::Msg => RDMA_MSG,
            Proc::NoMsg => RDMA_NOMSG,
            Proc::MsgP => RDMA_MSGP,
            Proc::Done => RDMA_DONE,
            Proc::Error => RDMA_ERROR,
            Proc::Unknown(other) => other,
        }
    }
}

impl fmt::Display for Proc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let num = u32::from(*self);
        match proc_name(num) {
            Some(name) => f.write_str(name),
            None => write!(f, "unknown({num})"),
        }
    }
}

/// Where the parts of a header are, as far as the walk got. Each boundary is set, together
/// with every later one, as soon as the walk has validated everything before it; so after a
/// failed walk the later boundaries sit at the failure and the lists read as their valid prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    /// End of the last valid Read list entry (= offset of the Read list terminator).
    read_end: usize,
    /// First Write list word.
    write_start: usize,
    /// End of the last valid Write chunk (= offset of the Write list terminator).
    write_end: usize,
    /// The Reply chunk's discriminator.
    reply_start: usize,
    /// End of the header.
    end: usize,
}

impl Layout {
    const fn at(off: usize) -> Layout {
        Layout {
            read_end: off,
            write_start: off,
            write_end: off,
            reply_start: off,
            end: off,
        }
    }

    fn read_end(&mut self, off: usize) {
        *self = Layout::at(off);
    }

    fn write_start(&mut self, off: usize) {
        self.write_start = off;
        self.write_end(off);
    }

    fn write_end(&mut self, off: usize) {
        self.write_end = off;
        self.reply_start(off);
    }

    fn reply_start(&mut self, off: usize) {
        self.reply_start = off;
        self.end = off;
    }
}

/// Context for building errors during a walk.
#[derive(Clone, Copy)]
struct Walk<'a> {
    buf: &'a [u8],
    xid: Option<u32>,
    proc_: Option<u32>,
}

impl Walk<'_> {
    fn err(&self, kind: DecodeErrorKind, offset: usize, value: u32) -> DecodeError {
        DecodeError::new(kind, offset, value).with_ids(self.xid, self.proc_)
    }

    fn truncated(&self, offset: usize) -> DecodeError {
        let len = u32::try_from(self.buf.len()).unwrap_or(u32::MAX);
        self.err(DecodeErrorKind::Truncated, offset, len)
    }

    fn word(&self, offset: usize) -> Result<u32, DecodeError> {
        get_u32(self.buf, offset).ok_or_else(|| self.truncated(offset))
    }

    /// Checks that `len` bytes exist at `offset`; returns the end.
    fn need(&self, offset: usize, len: usize) -> Result<usize, DecodeError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.buf.len() => Ok(end),
            _ => Err(self.truncated(offset)),
        }
    }

    fn bounded(&self, end: usize) -> Result<usize, DecodeError> {
        if end > MAX_HEADER_LEN {
            Err(self.err(DecodeErrorKind::HeaderTooLong, end, 0))
        } else {
            Ok(end)
        }
    }

    /// Walks and validates the whole header, recording boundaries in `layout` as it goes.
    fn header(mut self, layout: &mut Layout) -> Result<(), DecodeError> {
        self.xid = get_u32(self.buf, field::XID.start);
        self.proc_ = get_u32(self.buf, field::PROC.start);
        self.word(field::XID.start)?;
        // RFC 8166 §4.5.1: the version decides how to read everything else, so check it first.
        let vers = self.word(field::VERS.start)?;
        // The one header every version shares: RDMA_ERROR / ERR_VERS, which echoes the version
        // of the request it refuses (RFC 8166 §4.5). Readable whatever that version was.
        if vers != RPCRDMA_VERSION
            && get_u32(self.buf, field::PROC.start) == Some(RDMA_ERROR)
            && get_u32(self.buf, field::ERR_CODE) == Some(ERR_VERS)
        {
            self.word(field::CREDIT.start)?;
            return self.error_body(layout);
        }
        if vers != RPCRDMA_VERSION {
            return Err(self.err(
                DecodeErrorKind::BadVersion { vers },
                field::VERS.start,
                vers,
            ));
        }
        self.word(field::CREDIT.start)?;
        let proc_num = self.word(field::PROC.start)?;
        match proc_num {
            RDMA_MSG | RDMA_NOMSG => self.lists(layout),
            RDMA_ERROR => self.error_body(layout),
            other => Err(self.err(
                DecodeErrorKind::UnsupportedProc(other),
                field::PROC.start,
                other,
            )),
        }
    }

    fn error_body(&self, layout: &mut Layout) -> Result<(), DecodeError> {
        let code = self.word(field::ERR_CODE)?;
        let end = match code {
            ERR_VERS => {
                self.word(field::ERR_VERS_LOW)?;
                self.word(field::ERR_VERS_HIGH)?;
                field::ERR_VERS_END
            }
            ERR_CHUNK => field::ERR_CHUNK_END,
            other => {
                return Err(self.err(DecodeErrorKind::UnknownErrorCode, field::ERR_CODE, other))
            }
        };
        layout.reply_start(end);
        Ok(())
    }

    fn discriminator(&self, offset: usize) -> Result<bool, DecodeError> {
        match self.word(offset)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(self.err(DecodeErrorKind::BadDiscriminator, offset, other)),
        }
    }

    /// Validates the counted array at `offset` (its discriminator already read as 1) and
    /// returns its end.
    fn counted_chunk(&self, offset: usize) -> Result<usize, DecodeError> {
        let count_at = offset + field::CHUNK_COUNT;
        let count = self.word(count_at)?;
        let count_usize = usize::try_from(count).unwrap_or(usize::MAX);
        if count_usize > MAX_CHUNK_SEGMENTS {
            return Err(self.err(DecodeErrorKind::TooManySegments, count_at, count));
        }
        let data = offset + field::CHUNK_SEGMENTS;
        let end = self.need(data, count_usize * SEGMENT_LEN)?;
        self.bounded(end)
    }

    fn lists(&self, layout: &mut Layout) -> Result<(), DecodeError> {
        let mut off = field::BODY;
        layout.read_end(off);

        // Read list: {1, position, segment}* 0
        let mut entries = 0usize;
        while self.discriminator(off)? {
            if entries == MAX_READ_SEGMENTS {
                let count = u32::try_from(entries + 1).unwrap_or(u32::MAX);
                return Err(self.err(DecodeErrorKind::TooManySegments, off, count));
            }
            let position = self.word(off + field::READ_POSITION)?;
            if position % 4 != 0 {
                return Err(self.err(
                    DecodeErrorKind::Misaligned,
                    off + field::READ_POSITION,
                    position,
                ));
            }
            let end = self.need(off + field::READ_SEGMENT, SEGMENT_LEN)?;
            let end = self.bounded(end)?;
            entries += 1;
            off = end;
            layout.read_end(off);
        }
        off += 4;
        layout.write_start(off);

        // Write list: {1, count, segment[count]}* 0
        let mut chunks = 0usize;
        while self.discriminator(off)? {
            if chunks == MAX_WRITE_CHUNKS {
                let count = u32::try_from(chunks + 1).unwrap_or(u32::MAX);
                return Err(self.err(DecodeErrorKind::TooManyChunks, off, count));
            }
            off = self.counted_chunk(off)?;
            chunks += 1;
            layout.write_end(off);
        }
        off += 4;
        layout.reply_start(off);

        // Reply chunk: 0 | {1, count, segment[count]}
        let reply = self.discriminator(off)?;
        let end = if reply {
            self.counted_chunk(off)?
        } else {
            self.bounded(off + 4)?
        };
        layout.end = end;

        // RFC 8166 §4.5.2: an RDMA_NOMSG with no chunks at all is an XDR error.
        if self.proc_ == Some(RDMA_NOMSG) && entries == 0 && chunks == 0 && !reply {
            return Err(self.err(DecodeErrorKind::EmptyNoMsg, field::PROC.start, RDMA_NOMSG));
        }
        Ok(())
    }
}

/// Walks `buf`: the layout as far as it is valid, and the first error, if any.
fn walk(buf: &[u8]) -> (Layout, Result<(), DecodeError>) {
    // The common case first: a version 1 RDMA_MSG with three empty lists (every small call
    // and reply). Its layout is fixed; the full walk gives the same result.
    if let (Some(RPCRDMA_VERSION), Some(RDMA_MSG), Some(0), Some(0), Some(0)) = (
        get_u32(buf, field::VERS.start),
        get_u32(buf, field::PROC.start),
        get_u32(buf, field::BODY),
        get_u32(buf, field::BODY + 4),
        get_u32(buf, field::BODY + 8),
    ) {
        let end = field::BODY + 12;
        return (
            Layout {
                read_end: field::BODY,
                write_start: field::BODY + 4,
                write_end: field::BODY + 4,
                reply_start: field::BODY + 8,
                end,
            },
            Ok(()),
        );
    }
    let mut layout = Layout::at(field::BODY);
    let walk = Walk {
        buf,
        xid: None,
        proc_: None,
    };
    let result = walk.header(&mut layout);
    (layout, result)
}

/// A zero-copy view of a transport header at the start of a received Send.
///
/// Built with [`new_checked`](Header::new_checked) the view is known to be a complete, valid
/// version 1 header within the codec's limits, and every accessor reflects it exactly. Built
/// with [`new_unchecked`](Header::new_unchecked) the accessors still never panic: fixed fields
/// missing from a short buffer read as 0, and the lists read as their valid prefix.
#[derive(Debug, Clone)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
    layout: Layout,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps `buffer` without validating it (the layout is still walked, leniently).
    pub fn new_unchecked(buffer: T) -> Header<T> {
        let (layout, _) = walk(buffer.as_ref());
        Header { buffer, layout }
    }

    /// Wraps `buffer` after walking and validating the whole header once.
    pub fn new_checked(buffer: T) -> Result<Header<T>, DecodeError> {
        let (layout, result) = walk(buffer.as_ref());
        result?;
        Ok(Header { buffer, layout })
    }

    /// Re-validates the header (for a view made with [`new_unchecked`](Self::new_unchecked)).
    pub fn check(&self) -> Result<(), DecodeError> {
        walk(self.buffer.as_ref()).1
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn word(&self, offset: usize) -> u32 {
        get_u32(self.buffer.as_ref(), offset).unwrap_or(0)
    }

    /// `rdma_xid`.
    pub fn xid(&self) -> u32 {
        self.word(field::XID.start)
    }

    /// `rdma_vers`.
    pub fn vers(&self) -> u32 {
        self.word(field::VERS.start)
    }

    /// `rdma_credit`: credits requested (in a call) or granted (in a reply).
    pub fn credit(&self) -> u32 {
        self.word(field::CREDIT.start)
    }

    /// `rdma_proc`.
    pub fn proc_(&self) -> Proc {
        Proc::from(self.proc_num())
    }

    /// `rdma_proc` as the raw number.
    pub fn proc_num(&self) -> u32 {
        self.word(field::PROC.start)
    }

    /// Length of the transport header; the payload starts here. For an invalid header: where
    /// validation stopped (at most the buffer length).
    pub fn header_len(&self) -> usize {
        self.layout.end.min(self.buffer.as_ref().len())
    }

    /// The bytes after the header: the RPC message for `RDMA_MSG`.
    pub fn payload(&self) -> &[u8] {
        self.buffer
            .as_ref()
            .get(self.header_len()..)
            .unwrap_or_default()
    }

    /// The header bytes.
    pub fn header_bytes(&self) -> &[u8] {
        self.buffer
            .as_ref()
            .get(..self.header_len())
            .unwrap_or_default()
    }

    /// The Read list entries in wire order (empty unless `RDMA_MSG` / `RDMA_NOMSG`).
    pub fn read_list(&self) -> ReadListIter<'_> {
        ReadListIter {
            buf: self.buffer.as_ref(),
            off: field::BODY,
            end: self.layout.read_end,
        }
    }

    /// The Read chunks, grouped by position (see [`ChunkLists::read_chunks`]).
    pub fn read_chunks(&self) -> ReadChunks<ReadListIter<'_>> {
        group_read_chunks(self.read_list())
    }

    /// The Write chunks in wire order.
    pub fn write_list(&self) -> WriteListIter<'_> {
        WriteListIter {
            buf: self.buffer.as_ref(),
            off: self.layout.write_start,
            end: self.layout.write_end,
        }
    }

    /// The Reply chunk, if present.
    pub fn reply_chunk(&self) -> Option<WriteChunkView<'_>> {
        if !matches!(self.proc_num(), RDMA_MSG | RDMA_NOMSG) {
            return None;
        }
        let start = self.layout.reply_start;
        let buf = self.buffer.as_ref();
        if start.checked_add(4)? > self.layout.end || get_u32(buf, start)? != 1 {
            return None;
        }
        WriteChunkView::at(buf, start, self.layout.end)
    }

    /// The `RDMA_ERROR` body (`None` for other procedures or an unknown code).
    pub fn error_body(&self) -> Option<ErrorBody> {
        if self.proc_num() != RDMA_ERROR {
            return None;
        }
        let buf = self.buffer.as_ref();
        match ErrorCode::from_u32(get_u32(buf, field::ERR_CODE)?)? {
            ErrorCode::Vers => Some(ErrorBody::Vers {
                low: get_u32(buf, field::ERR_VERS_LOW)?,
                high: get_u32(buf, field::ERR_VERS_HIGH)?,
            }),
            ErrorCode::Chunk => Some(ErrorBody::Chunk),
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    /// Sets `rdma_xid` (no effect if the buffer is shorter than 4 bytes).
    pub fn set_xid(&mut self, xid: u32) {
        let _ = put_u32(self.buffer.as_mut(), field::XID.start, xid);
    }

    /// Sets `rdma_credit` (no effect if the buffer is shorter than 12 bytes).
    pub fn set_credit(&mut self, credit: u32) {
        let _ = put_u32(self.buffer.as_mut(), field::CREDIT.start, credit);
    }
}

/// Iterator over the Read list of a [`Header`].
#[derive(Debug, Clone)]
pub struct ReadListIter<'a> {
    buf: &'a [u8],
    off: usize,
    end: usize,
}

impl Iterator for ReadListIter<'_> {
    type Item = ReadSegment;

    fn next(&mut self) -> Option<ReadSegment> {
        let next = self.off.checked_add(READ_SEGMENT_LEN)?;
        if next > self.end {
            return None;
        }
        let position = get_u32(self.buf, self.off + field::READ_POSITION)?;
        let segment = Segment::from_bytes(self.buf.get(self.off + field::READ_SEGMENT..)?)?;
        self.off = next;
        Some(ReadSegment { position, segment })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end.saturating_sub(self.off) / READ_SEGMENT_LEN;
        (n, Some(n))
    }
}

/// Iterator over the Write list of a [`Header`].
#[derive(Debug, Clone)]
pub struct WriteListIter<'a> {
    buf: &'a [u8],
    off: usize,
    end: usize,
}

impl<'a> Iterator for WriteListIter<'a> {
    type Item = WriteChunkView<'a>;

    fn next(&mut self) -> Option<WriteChunkView<'a>> {
        let chunk = WriteChunkView::at(self.buf, self.off, self.end)?;
        self.off = self
            .off
            .checked_add(field::CHUNK_SEGMENTS + chunk.data.len())?;
        Some(chunk)
    }
}

/// A Write chunk or the Reply chunk inside a [`Header`]: iterate it for its [`Segment`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteChunkView<'a> {
    data: &'a [u8],
}

impl<'a> WriteChunkView<'a> {
    /// The counted array whose discriminator is at `off`, if it lies wholly before `end`.
    fn at(buf: &'a [u8], off: usize, end: usize) -> Option<WriteChunkView<'a>> {
        let count = usize::try_from(get_u32(buf, off.checked_add(field::CHUNK_COUNT)?)?).ok()?;
        let start = off.checked_add(field::CHUNK_SEGMENTS)?;
        let stop = start.checked_add(count.checked_mul(SEGMENT_LEN)?)?;
        if stop > end {
            return None;
        }
        Some(WriteChunkView {
            data: buf.get(start..stop)?,
        })
    }

    /// Number of segments.
    pub fn len(&self) -> usize {
        self.data.len() / SEGMENT_LEN
    }

    /// True when the chunk has no segments.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The segments in wire order.
    pub fn segments(&self) -> SegmentIter<'a> {
        SegmentIter::new(self.data)
    }

    /// Sum of the segment lengths.
    pub fn total_length(&self) -> u64 {
        self.segments().map(|s| u64::from(s.length)).sum()
    }

    /// The owned chunk (at most [`MAX_CHUNK_SEGMENTS`] segments are taken, which is all of them
    /// for a checked header).
    pub fn to_chunk(&self) -> WriteChunk {
        self.segments().take(MAX_CHUNK_SEGMENTS).collect()
    }
}

impl<'a> IntoIterator for WriteChunkView<'a> {
    type Item = Segment;
    type IntoIter = SegmentIter<'a>;

    fn into_iter(self) -> SegmentIter<'a> {
        self.segments()
    }
}

/// The procedure-specific part of a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// `RDMA_MSG`: chunk lists, then the RPC message inline.
    Msg(ChunkLists),
    /// `RDMA_NOMSG`: chunk lists only.
    NoMsg(ChunkLists),
    /// `RDMA_ERROR`.
    Error(ErrorBody),
}

impl Body {
    /// The procedure.
    pub fn proc_(&self) -> Proc {
        match self {
            Body::Msg(_) => Proc::Msg,
            Body::NoMsg(_) => Proc::NoMsg,
            Body::Error(_) => Proc::Error,
        }
    }

    /// The procedure number.
    pub fn proc_num(&self) -> u32 {
        u32::from(self.proc_())
    }

    /// The chunk lists (`None` for `RDMA_ERROR`).
    pub fn chunk_lists(&self) -> Option<&ChunkLists> {
        match self {
            Body::Msg(lists) | Body::NoMsg(lists) => Some(lists),
            Body::Error(_) => None,
        }
    }

    /// Encoded length of the body.
    pub fn buffer_len(&self) -> usize {
        match self {
            Body::Msg(lists) | Body::NoMsg(lists) => lists.buffer_len(),
            Body::Error(body) => body.buffer_len(),
        }
    }
}

/// An owned transport header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderRepr {
    /// `rdma_xid`: the XID of the RPC message this header carries (or answers).
    pub xid: u32,
    /// `rdma_vers`: [`RPCRDMA_VERSION`] after `parse`, except in an `RDMA_ERROR` / `ERR_VERS`,
    /// which echoes the version of the request it refuses (RFC 8166 §4.5); `emit` refuses
    /// anything but 1 in every other header.
    pub vers: u32,
    /// `rdma_credit`.
    pub credit: u32,
    /// The procedure and its body.
    pub body: Body,
}

impl HeaderRepr {
    /// A version 1 header.
    pub fn new(xid: u32, credit: u32, body: Body) -> HeaderRepr {
        HeaderRepr {
            xid,
            vers: RPCRDMA_VERSION,
            credit,
            body,
        }
    }

    /// The `RDMA_ERROR` a responder sends for `code` about message `xid`, granting `credit`:
    /// `ERR_VERS` carries low = high = 1 (the versions this implementation supports).
    pub fn error_reply(xid: u32, credit: u32, code: ErrorCode) -> HeaderRepr {
        HeaderRepr::new(xid, credit, Body::Error(ErrorBody::for_code(code)))
    }

    /// `RDMA_ERROR` / `ERR_VERS` for `xid`.
    pub fn vers_error(xid: u32, credit: u32) -> HeaderRepr {
        HeaderRepr::error_reply(xid, credit, ErrorCode::Vers)
    }

    /// `RDMA_ERROR` / `ERR_CHUNK` for `xid`.
    pub fn chunk_error(xid: u32, credit: u32) -> HeaderRepr {
        HeaderRepr::error_reply(xid, credit, ErrorCode::Chunk)
    }

    /// Decodes the header at the start of `buf`, the whole received Send (header, then payload).
    /// The payload starts at [`buffer_len`](Self::buffer_len).
    pub fn parse(buf: &[u8]) -> Result<HeaderRepr, DecodeError> {
        let header = Header::new_checked(buf)?;
        HeaderRepr::from_checked(&header)
    }

    /// Builds the repr from a view (validating it first if needed).
    pub fn from_header<T: AsRef<[u8]>>(header: &Header<T>) -> Result<HeaderRepr, DecodeError> {
        header.check()?;
        HeaderRepr::from_checked(header)
    }

    fn from_checked<T: AsRef<[u8]>>(header: &Header<T>) -> Result<HeaderRepr, DecodeError> {
        // The walk has validated everything; the fallbacks below cannot trigger, but keep the
        // code free of panics.
        let inconsistent = |kind| {
            DecodeError::new(kind, header.header_len(), 0)
                .with_ids(Some(header.xid()), Some(header.proc_num()))
        };
        let body = match header.proc_() {
            Proc::Msg | Proc::NoMsg => {
                let mut lists = ChunkLists::default();
                for entry in header.read_list() {
                    lists
                        .read_list
                        .push(entry)
                        .map_err(|_| inconsistent(DecodeErrorKind::TooManySegments))?;
                }
                for chunk in header.write_list() {
                    lists
                        .write_list
                        .push(chunk.to_chunk())
                        .map_err(|_| inconsistent(DecodeErrorKind::TooManyChunks))?;
                }
                lists.reply_chunk = header.reply_chunk().map(|c| c.to_chunk());
                if header.proc_() == Proc::Msg {
                    Body::Msg(lists)
                } else {
                    Body::NoMsg(lists)
                }
            }
            Proc::Error => Body::Error(
                header
                    .error_body()
                    .ok_or_else(|| inconsistent(DecodeErrorKind::UnknownErrorCode))?,
            ),
            other => {
                return Err(inconsistent(DecodeErrorKind::UnsupportedProc(u32::from(
                    other,
                ))))
            }
        };
        Ok(HeaderRepr {
            xid: header.xid(),
            vers: header.vers(),
            credit: header.credit(),
            body,
        })
    }

    /// The procedure number.
    pub fn proc_num(&self) -> u32 {
        self.body.proc_num()
    }

    /// The procedure.
    pub fn proc_(&self) -> Proc {
        self.body.proc_()
    }

    /// The chunk lists (`None` for `RDMA_ERROR`).
    pub fn chunk_lists(&self) -> Option<&ChunkLists> {
        self.body.chunk_lists()
    }

    /// Encoded length of the header; equals the bytes `parse` consumed.
    pub fn buffer_len(&self) -> usize {
        FIXED_HEADER_LEN + self.body.buffer_len()
    }

    /// Encodes the header into the start of `buf`, writing exactly
    /// [`buffer_len`](Self::buffer_len) bytes, and returns that length. Refuses (never panics)
    /// when `buf` is too short, `vers` is not 1, a Read position is not a multiple of 4, or the
    /// body is an `RDMA_NOMSG` without chunks: exactly what [`parse`](Self::parse) rejects.
    /// The one exception, which `parse` reads back too: an `RDMA_ERROR` / `ERR_VERS` may carry
    /// any version, because it echoes the version of the request it refuses (RFC 8166 §4.5).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        if self.vers != RPCRDMA_VERSION && !matches!(self.body, Body::Error(ErrorBody::Vers { .. }))
        {
            return Err(EncodeError::BadVersion { vers: self.vers });
        }
        if let Some(position) = self.chunk_lists().and_then(ChunkLists::misaligned_position) {
            return Err(EncodeError::Misaligned { position });
        }
        if matches!(&self.body, Body::NoMsg(lists) if lists.is_empty()) {
            return Err(EncodeError::EmptyNoMsg);
        }
        let len = self.buffer_len();
        let available = buf.len();
        let out = buf.get_mut(..len).ok_or(EncodeError::BufferTooShort {
            needed: len,
            available,
        })?;
        match &self.body {
            Body::Msg(lists) | Body::NoMsg(lists) => {
                let nomsg = matches!(self.body, Body::NoMsg(_));
                let mut enc = HeaderEncoder::begin(out, self.xid, self.credit, nomsg)?;
                for entry in &lists.read_list {
                    enc.read_segment(out, entry)?;
                }
                for chunk in &lists.write_list {
                    enc.write_chunk(out, chunk.iter().copied())?;
                }
                enc.finish(out, lists.reply_chunk.as_ref().map(|c| c.iter().copied()))
            }
            Body::Error(body) => encode_error(out, self.xid, self.vers, self.credit, *body),
        }
    }
}
