//! Errors of the transport entry points and of failed calls, sorted by who is at fault
//! ([`Fault`], after rustls's split): refused by us (back-pressure, or a call that breaks a
//! limit; nothing was sent and everything is handed back), this host's memory, the peer, the
//! fabric, or our own bug. The kernel face of each error (errno, FreeBSD's `clnt_stat`) is in
//! [`kernel`](super::kernel).

use core::fmt;

use mbuf::MbufError;

use crate::provider::ProviderError;
use crate::wire::{DecodeErrorKind, ErrorCode};
pub use crate::Fault;

/// Why a call could not be started or why it ended without a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallError {
    /// No credit (RFC 8166 §3.3.1): as many calls are outstanding as the responder granted.
    /// Back-pressure: retry after a reply arrived. Nothing was queued.
    NoCredit,
    /// A bounded resource (send buffer, receive buffer, pending-xid slot, send queue,
    /// registration) is busy: retry after completions. Nothing was queued.
    WouldBlock,
    /// The call chain is too short to hold an XID or is otherwise malformed.
    BadCall,
    /// A DDP region does not start at a 4-byte aligned XDR position (RFC 8166 §3.4.5).
    UnalignedPosition,
    /// The call or the provisioned reply needs more chunks, segments or fragments than the
    /// limits allow, or is larger than `max_chunk_bytes`.
    TooLarge,
    /// The peer answered `RDMA_ERROR` (`ERR_VERS` or `ERR_CHUNK`, RFC 8166 §4.5).
    Rdma(ErrorCode),
    /// The reply did not match what was provisioned (e.g. more bytes than the chunk, a
    /// Write list with more chunks than were offered, a Read list, `RDMA_NOMSG` without a
    /// Reply chunk, `RDMA_MSG` reporting bytes written into the Reply chunk).
    BadReply,
    /// The reply's transport header is malformed (the codec rejected it, for this reason)
    /// but its XID named this call: the call fails rather than wait for a reply that will
    /// not come (Linux xprtrdma fails such a call with `-EIO`).
    MalformedReply(DecodeErrorKind),
    /// The connection is gone; the krpc layer reconnects and retransmits.
    ConnectionLost,
    /// Memory or page allocation failed.
    NoMemory,
    /// The configuration does not fit the provider's resources (e.g. receive buffers smaller
    /// than the 1024-byte inline size every RPC-over-RDMA peer may send).
    BadConfig,
    /// The provider refused an operation.
    Provider(ProviderError),
    /// A call with this XID is already outstanding on the connection: a reply could not tell
    /// the two apart (the krpc allocates XIDs; this is its bug or a retransmit on the same
    /// connection).
    DuplicateXid,
    /// The caller closed the transport ([`Requester::close`](super::Requester::close)).
    Closed,
    /// One of the transport's own invariants broke (a slot it had just taken is missing): a
    /// bug here, [`Fault::Bug`]; the call was not sent and nothing of it is left.
    Internal,
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::NoCredit => f.write_str("no credit: too many calls outstanding"),
            CallError::WouldBlock => f.write_str("transport resources busy"),
            CallError::BadCall => f.write_str("malformed call"),
            CallError::UnalignedPosition => f.write_str("DDP region at an unaligned position"),
            CallError::TooLarge => f.write_str("call or reply exceeds transport limits"),
            CallError::Rdma(code) => write!(f, "peer answered RDMA_ERROR {code}"),
            CallError::BadReply => f.write_str("reply does not match the provisioned chunks"),
            CallError::MalformedReply(k) => write!(f, "malformed reply header: {k:?}"),
            CallError::ConnectionLost => f.write_str("connection lost"),
            CallError::NoMemory => f.write_str("out of memory"),
            CallError::BadConfig => {
                f.write_str("configuration does not fit the provider's buffers")
            }
            CallError::Provider(e) => write!(f, "provider error: {e}"),
            CallError::DuplicateXid => f.write_str("a call with this XID is already outstanding"),
            CallError::Closed => f.write_str("transport closed"),
            CallError::Internal => f.write_str("internal error: a transport invariant broke"),
        }
    }
}

impl CallError {
    /// Who is at fault.
    pub const fn fault(&self) -> Fault {
        match self {
            CallError::NoCredit | CallError::WouldBlock => Fault::BackPressure,
            CallError::BadCall
            | CallError::UnalignedPosition
            | CallError::TooLarge
            | CallError::BadConfig
            | CallError::DuplicateXid
            | CallError::Closed => Fault::Refused,
            CallError::NoMemory => Fault::Memory,
            CallError::Rdma(_) | CallError::BadReply | CallError::MalformedReply(_) => Fault::Peer,
            CallError::ConnectionLost => Fault::Fabric,
            CallError::Provider(e) => e.fault(),
            CallError::Internal => Fault::Bug,
        }
    }

    /// Whether the same call may succeed if retried on this connection later
    /// ([`Fault::BackPressure`]).
    pub const fn is_retryable(&self) -> bool {
        matches!(self.fault(), Fault::BackPressure)
    }
}

impl core::error::Error for CallError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            CallError::Provider(e) => Some(e),
            _ => None,
        }
    }
}

impl From<MbufError> for CallError {
    fn from(e: MbufError) -> Self {
        match e {
            MbufError::Alloc => CallError::NoMemory,
            _ => CallError::BadCall,
        }
    }
}

impl From<ProviderError> for CallError {
    fn from(e: ProviderError) -> Self {
        match e {
            ProviderError::Busy => CallError::WouldBlock,
            ProviderError::NotConnected => CallError::ConnectionLost,
            ProviderError::NoMemory => CallError::NoMemory,
            ProviderError::BadFragments => CallError::TooLarge,
            other => CallError::Provider(other),
        }
    }
}

/// An error of one of the transport's own steps: a [`CallError`] to report with its meaning
/// (the peer, the caller, a limit, memory, the provider), or [`Error::Bug`]: one of our own
/// invariants broke (a context, slot or send buffer the transport itself named is missing).
/// A bug's fault is [`Fault::Bug`] and it never goes on the wire as an `RDMA_ERROR`: where a
/// step meets it, its caller closes the connection (RFC 8166 §4.5.4), which `closes` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Error {
    /// A call error, with its meaning.
    Call(CallError),
    /// Our own invariant broke.
    Bug,
}

impl Error {
    /// Who is at fault.
    #[allow(dead_code)] // the callers match on the variants; kept for the fault's symmetry
    pub(crate) const fn fault(&self) -> Fault {
        match self {
            Error::Call(e) => e.fault(),
            Error::Bug => Fault::Bug,
        }
    }
}

impl From<CallError> for Error {
    fn from(e: CallError) -> Self {
        Error::Call(e)
    }
}

impl From<MbufError> for Error {
    fn from(e: MbufError) -> Self {
        Error::Call(e.into())
    }
}

impl From<ProviderError> for Error {
    fn from(e: ProviderError) -> Self {
        Error::Call(e.into())
    }
}
