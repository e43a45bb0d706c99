//! `RDMA_ERROR` bodies (RFC 8166 §4.2.4, §4.5) and the codec's own decode/encode errors.

use core::fmt;

use super::{
    header::proc_name, HeaderRepr, MAX_CHUNK_SEGMENTS, MAX_HEADER_LEN, MAX_READ_SEGMENTS,
    MAX_WRITE_CHUNKS, RDMA_DONE, RDMA_ERROR, RPCRDMA_VERSION,
};

/// `rdma_err` value `ERR_VERS`: the responder does not support the header's `rdma_vers`.
pub const ERR_VERS: u32 = 1;
/// `rdma_err` value `ERR_CHUNK`: any other header or chunk decoding error.
pub const ERR_CHUNK: u32 = 2;

/// The two `rdma_err` codes of RPC-over-RDMA Version 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// `ERR_VERS` (1).
    Vers,
    /// `ERR_CHUNK` (2).
    Chunk,
}

impl ErrorCode {
    /// The on-the-wire `rdma_err` value.
    pub const fn as_u32(self) -> u32 {
        match self {
            ErrorCode::Vers => ERR_VERS,
            ErrorCode::Chunk => ERR_CHUNK,
        }
    }

    /// The code for an `rdma_err` value, `None` for values RFC 8166 does not define.
    pub const fn from_u32(value: u32) -> Option<ErrorCode> {
        match value {
            ERR_VERS => Some(ErrorCode::Vers),
            ERR_CHUNK => Some(ErrorCode::Chunk),
            _ => None,
        }
    }

    /// The RFC's name: `"ERR_VERS"` or `"ERR_CHUNK"`.
    pub const fn name(self) -> &'static str {
        match self {
            ErrorCode::Vers => "ERR_VERS",
            ErrorCode::Chunk => "ERR_CHUNK",
        }
    }
}

impl From<ErrorCode> for u32 {
    fn from(code: ErrorCode) -> u32 {
        code.as_u32()
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The body of an `RDMA_ERROR` message (the XDR union `rpc_rdma_errcode` switched on `rdma_err`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorBody {
    /// `ERR_VERS` with the inclusive range of versions the sender supports.
    Vers {
        /// Lowest supported version (`rdma_vers_low`).
        low: u32,
        /// Highest supported version (`rdma_vers_high`).
        high: u32,
    },
    /// `ERR_CHUNK`: no further fields.
    Chunk,
}

impl ErrorBody {
    /// The `ERR_VERS` body this implementation sends: it supports version 1 only.
    pub const SUPPORTED_VERSIONS: ErrorBody = ErrorBody::Vers {
        low: RPCRDMA_VERSION,
        high: RPCRDMA_VERSION,
    };

    /// The body this implementation sends for `code`.
    pub const fn for_code(code: ErrorCode) -> ErrorBody {
        match code {
            ErrorCode::Vers => ErrorBody::SUPPORTED_VERSIONS,
            ErrorCode::Chunk => ErrorBody::Chunk,
        }
    }

    /// The `rdma_err` code.
    pub const fn code(&self) -> ErrorCode {
        match self {
            ErrorBody::Vers { .. } => ErrorCode::Vers,
            ErrorBody::Chunk => ErrorCode::Chunk,
        }
    }

    /// Encoded length: 12 bytes for `ERR_VERS`, 4 for `ERR_CHUNK`.
    pub const fn buffer_len(&self) -> usize {
        match self {
            ErrorBody::Vers { .. } => 12,
            ErrorBody::Chunk => 4,
        }
    }
}

/// Why a header was rejected. See [`DecodeError`] for the context (XID, offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecodeErrorKind {
    /// The buffer ends before the header does.
    Truncated,
    /// `rdma_vers` is not 1 (RFC 8166 §4.5.1).
    BadVersion {
        /// The version the peer used.
        vers: u32,
    },
    /// `rdma_proc` is `RDMA_MSGP`, `RDMA_DONE` (RFC 8166 §4.6) or not defined at all.
    UnsupportedProc(u32),
    /// An XDR optional-data discriminator (list entry or Reply chunk) is neither 0 nor 1.
    BadDiscriminator,
    /// More than [`MAX_READ_SEGMENTS`] Read list entries, or more than [`MAX_CHUNK_SEGMENTS`]
    /// segments in a Write chunk or the Reply chunk.
    TooManySegments,
    /// More than [`MAX_WRITE_CHUNKS`] Write chunks.
    TooManyChunks,
    /// The header would be longer than [`MAX_HEADER_LEN`]. The per-list limits make this
    /// unreachable today (a header within them is never longer); it is a backstop so that
    /// `header_len() <= MAX_HEADER_LEN` is checked rather than assumed.
    HeaderTooLong,
    /// `RDMA_ERROR` with an `rdma_err` other than `ERR_VERS` / `ERR_CHUNK`.
    UnknownErrorCode,
    /// A Read segment's position is not a multiple of 4.
    Misaligned,
    /// `RDMA_NOMSG` with an empty Read list, Write list and Reply chunk: the RPC message is
    /// nowhere. RFC 8166 §4.5.2 names this an XDR error.
    EmptyNoMsg,
}

impl DecodeErrorKind {
    /// What a responder answers with (RFC 8166 §4.5): `ERR_VERS` for a version mismatch
    /// (§4.5.1), `ERR_CHUNK` for every other header decoding error (§4.5.2).
    pub const fn reply_error(self) -> ErrorCode {
        match self {
            DecodeErrorKind::BadVersion { .. } => ErrorCode::Vers,
            _ => ErrorCode::Chunk,
        }
    }
}

/// A rejected transport header: the reason, where it was found, and the fields a responder
/// needs to answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    kind: DecodeErrorKind,
    xid: Option<u32>,
    proc_: Option<u32>,
    offset: usize,
    value: u32,
}

impl DecodeError {
    pub(crate) const fn new(kind: DecodeErrorKind, offset: usize, value: u32) -> Self {
        DecodeError {
            kind,
            xid: None,
            proc_: None,
            offset,
            value,
        }
    }

    pub(crate) const fn with_ids(mut self, xid: Option<u32>, proc_: Option<u32>) -> Self {
        self.xid = xid;
        self.proc_ = proc_;
        self
    }

    /// Why the header was rejected.
    pub fn kind(&self) -> DecodeErrorKind {
        self.kind
    }

    /// `rdma_xid`, when the buffer held at least its 4 bytes.
    pub fn xid(&self) -> Option<u32> {
        self.xid
    }

    /// The raw `rdma_proc` word, when the buffer held it (also for a bad version).
    pub fn proc_num(&self) -> Option<u32> {
        self.proc_
    }

    /// Byte offset in the buffer of the offending word (for [`DecodeErrorKind::Truncated`]:
    /// of the field the buffer ended in).
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The offending value: the bad discriminator, error code, position or segment count; for
    /// [`DecodeErrorKind::Truncated`], the buffer length; for the others, the word read.
    pub fn value(&self) -> u32 {
        self.value
    }

    /// The `rdma_err` a responder sends back: `ERR_VERS` for a version mismatch, `ERR_CHUNK`
    /// otherwise (RFC 8166 §4.5.1, §4.5.2).
    pub fn reply_error(&self) -> ErrorCode {
        self.kind.reply_error()
    }

    /// Whether a responder can and should answer with `RDMA_ERROR`: it needs the XID, an
    /// `RDMA_ERROR` is never answered (that could loop between two peers), and an `RDMA_DONE`
    /// is discarded silently (RFC 8166 §4.6.2: its sender expects no answer). A message
    /// shorter than [`MIN_HEADER_LEN`](super::MIN_HEADER_LEN) bytes is the responder's to
    /// discard before decoding (§4.5).
    pub fn should_reply(&self) -> bool {
        self.xid.is_some() && self.proc_ != Some(RDMA_ERROR) && self.proc_ != Some(RDMA_DONE)
    }

    /// The `rdma_vers` an `RDMA_ERROR` for this error carries: the failing request's own
    /// version (RFC 8166 §4.5), which is 1 unless the error is a version mismatch.
    pub fn request_vers(&self) -> u32 {
        match self.kind {
            DecodeErrorKind::BadVersion { vers } => vers,
            _ => RPCRDMA_VERSION,
        }
    }

    /// The `RDMA_ERROR` a responder sends for this error, granting `credit`, or `None` when
    /// [`should_reply`](Self::should_reply) is false. The reply carries the request's version
    /// ([`request_vers`](Self::request_vers)).
    pub fn error_reply(&self, credit: u32) -> Option<HeaderRepr> {
        match self.xid {
            Some(xid) if self.should_reply() => {
                let mut h = HeaderRepr::error_reply(xid, credit, self.reply_error());
                h.vers = self.request_vers();
                Some(h)
            }
            _ => None,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (off, v) = (self.offset, self.value);
        match self.kind {
            DecodeErrorKind::Truncated => write!(
                f,
                "header truncated: the {v}-byte buffer ends inside the field at byte {off}"
            )?,
            DecodeErrorKind::BadVersion { vers } => write!(
                f,
                "unsupported RPC-over-RDMA version {vers} (only version {RPCRDMA_VERSION} is supported)"
            )?,
            DecodeErrorKind::UnsupportedProc(p) => match proc_name(p) {
                Some(name) => write!(
                    f,
                    "procedure {p} ({name}) is no longer part of RPC-over-RDMA Version 1"
                )?,
                None => write!(f, "unknown RPC-over-RDMA procedure {p}")?,
            },
            DecodeErrorKind::BadDiscriminator => write!(
                f,
                "invalid XDR list discriminator {v} at byte {off} (must be 0 or 1)"
            )?,
            DecodeErrorKind::TooManySegments => write!(
                f,
                "too many segments at byte {off}: limits are {MAX_READ_SEGMENTS} Read list \
                 entries per message and {MAX_CHUNK_SEGMENTS} segments per Write or Reply chunk \
                 (count {v})"
            )?,
            DecodeErrorKind::TooManyChunks => write!(
                f,
                "too many Write chunks at byte {off}: the limit is {MAX_WRITE_CHUNKS}"
            )?,
            DecodeErrorKind::HeaderTooLong => write!(
                f,
                "header longer than the {MAX_HEADER_LEN}-byte maximum at byte {off}"
            )?,
            DecodeErrorKind::UnknownErrorCode => {
                write!(f, "unknown RDMA_ERROR code {v} at byte {off}")?
            }
            DecodeErrorKind::Misaligned => write!(
                f,
                "Read segment position {v} at byte {off} is not a multiple of 4"
            )?,
            DecodeErrorKind::EmptyNoMsg => write!(
                f,
                "RDMA_NOMSG without a Read list, Write list or Reply chunk carries no RPC message"
            )?,
        }
        if let Some(xid) = self.xid {
            write!(f, " (xid {xid:#010x})")?;
        }
        Ok(())
    }
}

impl core::error::Error for DecodeError {}

/// Why [`HeaderRepr::emit`] (or [`CmPrivateData::emit`](super::CmPrivateData::emit)) refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EncodeError {
    /// The output buffer is shorter than the encoding.
    BufferTooShort {
        /// Bytes the encoding needs.
        needed: usize,
        /// Bytes the buffer has.
        available: usize,
    },
    /// `vers` is not [`RPCRDMA_VERSION`]: only version 1 headers can be encoded.
    BadVersion {
        /// The version in the repr.
        vers: u32,
    },
    /// A Read segment's position is not a multiple of 4 (the decoder would reject it).
    Misaligned {
        /// The position in the repr.
        position: u32,
    },
    /// `RDMA_NOMSG` with no chunks at all (the decoder would reject it).
    EmptyNoMsg,
    /// More Read list entries, Write chunks or chunk segments than the codec's limits (the
    /// decoder would reject them), or a Read list entry after a Write chunk.
    TooMany,
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EncodeError::BufferTooShort { needed, available } => write!(
                f,
                "output buffer too short: {needed} bytes needed, {available} available"
            ),
            EncodeError::BadVersion { vers } => write!(
                f,
                "cannot encode RPC-over-RDMA version {vers} (only version {RPCRDMA_VERSION})"
            ),
            EncodeError::Misaligned { position } => {
                write!(f, "Read segment position {position} is not a multiple of 4")
            }
            EncodeError::EmptyNoMsg => {
                f.write_str("RDMA_NOMSG needs a Read list, Write list or Reply chunk")
            }
            EncodeError::TooMany => {
                f.write_str("more list entries or chunk segments than the codec's limits")
            }
        }
    }
}

impl core::error::Error for EncodeError {}
