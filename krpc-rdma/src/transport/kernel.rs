//! The kernel face of the transport's errors: the errno and FreeBSD `enum clnt_stat` a krpc
//! client (`clnt_rdma`, after `clnt_vc`) reports for a [`CallError`], and the errno of a
//! [`ReplyError`] or [`ProviderError`].
//!
//! `clnt_vc_call` reports a failure to send as `RPC_CANTSEND` and a failure while waiting for
//! the reply as `RPC_CANTRECV`, with the errno in `re_errno`; so the status depends on the
//! [`Phase`]: a call refused by [`Requester::call`](super::Requester::call) vs a call that
//! ended in [`RequesterEvent::Failed`](super::RequesterEvent::Failed). The transport has no
//! clock and no signals: `RPC_TIMEDOUT` and `RPC_INTR` are the krpc layer's own (it
//! [`abandon`](super::Requester::abandon)s the call), listed here for its use.
//!
//! errno values differ between the kernels (`EAGAIN` is 35 on FreeBSD, 11 on Linux):
//! [`Errno`] names them and gives both.

use super::error::CallError;
use super::responder::ReplyError;
use crate::provider::ProviderError;

/// FreeBSD's `enum clnt_stat` (`sys/rpc/clnt_stat.h`), the statuses a transport reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
#[non_exhaustive]
pub enum ClntStat {
    /// `RPC_SUCCESS`.
    Success = 0,
    /// `RPC_CANTENCODEARGS`: the call could not be put on the wire as given.
    CantEncodeArgs = 1,
    /// `RPC_CANTDECODERES`: the reply cannot be made sense of.
    CantDecodeRes = 2,
    /// `RPC_CANTSEND`: failure in sending the call.
    CantSend = 3,
    /// `RPC_CANTRECV`: failure in receiving the result.
    CantRecv = 4,
    /// `RPC_TIMEDOUT` (the krpc layer's: it abandons the call).
    TimedOut = 5,
    /// `RPC_VERSMISMATCH`: the server denied the call: RPC version mismatch.
    VersMismatch = 6,
    /// `RPC_AUTHERROR`: the server denied the call: authentication error.
    AuthError = 7,
    /// `RPC_PROGUNAVAIL`: the program is not available.
    ProgUnavail = 8,
    /// `RPC_PROGVERSMISMATCH`: the program version is not served.
    ProgVersMismatch = 9,
    /// `RPC_PROCUNAVAIL`: the procedure is not available.
    ProcUnavail = 10,
    /// `RPC_CANTDECODEARGS`: the server could not decode the arguments (`GARBAGE_ARGS`).
    CantDecodeArgs = 11,
    /// `RPC_SYSTEMERROR`: a generic "other problem" (configuration, our own bug).
    SystemError = 12,
    /// `RPC_INTR` (the krpc layer's: a signal, it abandons the call).
    Intr = 18,
}

/// The errno values the transport reports, with their numbers on each kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Errno {
    /// Try again (back-pressure).
    EAGAIN,
    /// Invalid argument (a malformed call, a bad configuration, a stale context).
    EINVAL,
    /// Message too long (beyond the transport's limits).
    EMSGSIZE,
    /// Already exists (an XID already outstanding).
    EEXIST,
    /// Out of memory.
    ENOMEM,
    /// Not connected (the connection is gone).
    ENOTCONN,
    /// Shut down (the caller closed the transport).
    ESHUTDOWN,
    /// Protocol error (the peer answered `RDMA_ERROR`).
    EPROTO,
    /// Bad message (a reply that does not match what was provisioned).
    EBADMSG,
    /// Input/output error (one of the transport's own invariants broke: a bug).
    EIO,
}

impl Errno {
    /// The number on FreeBSD (`sys/sys/errno.h`).
    pub const fn freebsd(self) -> i32 {
        match self {
            Errno::EAGAIN => 35,
            Errno::EINVAL => 22,
            Errno::EMSGSIZE => 40,
            Errno::EEXIST => 17,
            Errno::ENOMEM => 12,
            Errno::ENOTCONN => 57,
            Errno::ESHUTDOWN => 58,
            Errno::EPROTO => 92,
            Errno::EBADMSG => 89,
            Errno::EIO => 5,
        }
    }

    /// The number on Linux (`asm-generic/errno*.h`, x86-64).
    pub const fn linux(self) -> i32 {
        match self {
            Errno::EAGAIN => 11,
            Errno::EINVAL => 22,
            Errno::EMSGSIZE => 90,
            Errno::EEXIST => 17,
            Errno::ENOMEM => 12,
            Errno::ENOTCONN => 107,
            Errno::ESHUTDOWN => 108,
            Errno::EPROTO => 71,
            Errno::EBADMSG => 74,
            Errno::EIO => 5,
        }
    }
}

/// When a call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Refused by [`Requester::call`](super::Requester::call): nothing was sent.
    Send,
    /// Ended without a reply after it was sent
    /// ([`RequesterEvent::Failed`](super::RequesterEvent::Failed)).
    Reply,
}

/// `struct rpc_err` as a transport fills it: the status and `re_errno`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpcErr {
    /// `re_status`.
    pub status: ClntStat,
    /// `re_errno`.
    pub errno: Errno,
}

impl ProviderError {
    /// The errno of a provider failure.
    pub const fn errno(&self) -> Errno {
        match self {
            ProviderError::Busy => Errno::EAGAIN,
            ProviderError::BadFragments => Errno::EMSGSIZE,
            ProviderError::BadId => Errno::EINVAL,
            ProviderError::NotConnected => Errno::ENOTCONN,
            ProviderError::NoMemory => Errno::ENOMEM,
        }
    }
}

impl CallError {
    /// The errno of this error.
    pub const fn errno(&self) -> Errno {
        match self {
            CallError::NoCredit | CallError::WouldBlock => Errno::EAGAIN,
            CallError::BadCall | CallError::UnalignedPosition | CallError::BadConfig => {
                Errno::EINVAL
            }
            CallError::TooLarge => Errno::EMSGSIZE,
            CallError::DuplicateXid => Errno::EEXIST,
            CallError::NoMemory => Errno::ENOMEM,
            CallError::ConnectionLost => Errno::ENOTCONN,
            CallError::Closed => Errno::ESHUTDOWN,
            CallError::Rdma(_) => Errno::EPROTO,
            CallError::BadReply | CallError::MalformedReply(_) => Errno::EBADMSG,
            CallError::Provider(e) => e.errno(),
            CallError::Internal => Errno::EIO,
        }
    }

    /// What a krpc client reports for this error in `phase` (see the module docs): a call
    /// that cannot be encoded as given is `RPC_CANTENCODEARGS`, a reply that cannot be used
    /// `RPC_CANTDECODERES`, a configuration or our own bug `RPC_SYSTEMERROR`; everything else
    /// failed sending (`RPC_CANTSEND`) or receiving (`RPC_CANTRECV`) by its phase.
    pub const fn rpc_err(&self, phase: Phase) -> RpcErr {
        let status = match self {
            CallError::BadCall | CallError::UnalignedPosition => ClntStat::CantEncodeArgs,
            CallError::BadReply | CallError::MalformedReply(_) => ClntStat::CantDecodeRes,
            CallError::BadConfig
            | CallError::Internal
            | CallError::Provider(ProviderError::BadId) => ClntStat::SystemError,
            _ => match phase {
                Phase::Send => ClntStat::CantSend,
                Phase::Reply => ClntStat::CantRecv,
            },
        };
        RpcErr {
            status,
            errno: self.errno(),
        }
    }
}

impl ReplyError {
    /// The errno of this error (a krpc server's `svc_sendreply` failure).
    pub fn errno(&self) -> Errno {
        match self {
            ReplyError::WouldBlock { .. } => Errno::EAGAIN,
            ReplyError::StaleContext => Errno::EINVAL,
            ReplyError::ConnectionLost | ReplyError::Internal => Errno::ENOTCONN,
            ReplyError::ChunkError => Errno::EMSGSIZE,
            ReplyError::Failed(e) => e.errno(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Fault;
    use crate::wire::ErrorCode;

    /// Every variant (the provider errors but `NoMemory`, which maps like `CallError::NoMemory`).
    const ALL: [CallError; 18] = [
        CallError::NoCredit,
        CallError::WouldBlock,
        CallError::BadCall,
        CallError::UnalignedPosition,
        CallError::TooLarge,
        CallError::Rdma(ErrorCode::Vers),
        CallError::Rdma(ErrorCode::Chunk),
        CallError::BadReply,
        CallError::MalformedReply(crate::wire::DecodeErrorKind::Truncated),
        CallError::ConnectionLost,
        CallError::NoMemory,
        CallError::BadConfig,
        CallError::Provider(ProviderError::Busy),
        CallError::Provider(ProviderError::BadFragments),
        CallError::Provider(ProviderError::BadId),
        CallError::Provider(ProviderError::NotConnected),
        CallError::DuplicateXid,
        CallError::Closed,
    ];

    #[test]
    fn clnt_stat_values_are_freebsds() {
        // sys/rpc/clnt_stat.h of FreeBSD 14.2.
        assert_eq!(ClntStat::Success as i32, 0);
        assert_eq!(ClntStat::CantEncodeArgs as i32, 1);
        assert_eq!(ClntStat::CantDecodeRes as i32, 2);
        assert_eq!(ClntStat::CantSend as i32, 3);
        assert_eq!(ClntStat::CantRecv as i32, 4);
        assert_eq!(ClntStat::TimedOut as i32, 5);
        assert_eq!(ClntStat::SystemError as i32, 12);
        assert_eq!(ClntStat::Intr as i32, 18);
    }

    #[test]
    fn errno_values_of_both_kernels() {
        // FreeBSD 14.2 sys/sys/errno.h; Linux asm-generic/errno-base.h and errno.h.
        let both = [
            (Errno::EAGAIN, 35, 11),
            (Errno::EINVAL, 22, 22),
            (Errno::EMSGSIZE, 40, 90),
            (Errno::EEXIST, 17, 17),
            (Errno::ENOMEM, 12, 12),
            (Errno::ENOTCONN, 57, 107),
            (Errno::ESHUTDOWN, 58, 108),
            (Errno::EPROTO, 92, 71),
            (Errno::EBADMSG, 89, 74),
        ];
        for (e, freebsd, linux) in both {
            assert_eq!((e.freebsd(), e.linux()), (freebsd, linux), "{e:?}");
        }
    }

    #[test]
    fn back_pressure_is_eagain_and_cantsend_and_retryable() {
        for e in [
            CallError::NoCredit,
            CallError::WouldBlock,
            CallError::Provider(ProviderError::Busy),
        ] {
            assert_eq!(e.fault(), Fault::BackPressure);
            assert!(e.is_retryable());
            assert_eq!(
                e.rpc_err(Phase::Send),
                RpcErr {
                    status: ClntStat::CantSend,
                    errno: Errno::EAGAIN
                }
            );
        }
        assert!(ALL
            .iter()
            .filter(|e| e.is_retryable())
            .all(|e| e.errno() == Errno::EAGAIN));
    }

    #[test]
    fn the_phase_picks_cantsend_or_cantrecv() {
        let lost = CallError::ConnectionLost;
        assert_eq!(lost.fault(), Fault::Fabric);
        assert_eq!(lost.rpc_err(Phase::Send).status, ClntStat::CantSend);
        assert_eq!(lost.rpc_err(Phase::Reply).status, ClntStat::CantRecv);
        assert_eq!(lost.errno(), Errno::ENOTCONN);
        let closed = CallError::Closed;
        assert_eq!(closed.rpc_err(Phase::Reply).status, ClntStat::CantRecv);
        assert_eq!(closed.errno(), Errno::ESHUTDOWN);
    }

    #[test]
    fn the_peers_faults() {
        for code in [ErrorCode::Vers, ErrorCode::Chunk] {
            let e = CallError::Rdma(code);
            assert_eq!(e.fault(), Fault::Peer);
            assert_eq!(
                e.rpc_err(Phase::Reply),
                RpcErr {
                    status: ClntStat::CantRecv,
                    errno: Errno::EPROTO
                }
            );
        }
        let malformed = CallError::MalformedReply(crate::wire::DecodeErrorKind::BadDiscriminator);
        for bad in [CallError::BadReply, malformed] {
            assert_eq!(bad.fault(), Fault::Peer);
            assert_eq!(
                bad.rpc_err(Phase::Reply),
                RpcErr {
                    status: ClntStat::CantDecodeRes,
                    errno: Errno::EBADMSG
                }
            );
        }
    }

    #[test]
    fn refused_by_us_is_not_retryable_and_says_why() {
        let cases = [
            (CallError::TooLarge, ClntStat::CantSend, Errno::EMSGSIZE),
            (CallError::BadCall, ClntStat::CantEncodeArgs, Errno::EINVAL),
            (
                CallError::UnalignedPosition,
                ClntStat::CantEncodeArgs,
                Errno::EINVAL,
            ),
            (CallError::DuplicateXid, ClntStat::CantSend, Errno::EEXIST),
            (CallError::BadConfig, ClntStat::SystemError, Errno::EINVAL),
            (
                CallError::Provider(ProviderError::BadFragments),
                ClntStat::CantSend,
                Errno::EMSGSIZE,
            ),
        ];
        for (e, status, errno) in cases {
            assert_eq!(e.fault(), Fault::Refused, "{e:?}");
            assert!(!e.is_retryable());
            assert_eq!(e.rpc_err(Phase::Send), RpcErr { status, errno }, "{e:?}");
        }
    }

    #[test]
    fn memory_and_our_own_bugs() {
        assert_eq!(CallError::NoMemory.fault(), Fault::Memory);
        assert_eq!(CallError::NoMemory.errno(), Errno::ENOMEM);
        let bug = CallError::Provider(ProviderError::BadId);
        assert_eq!(bug.fault(), Fault::Bug);
        assert_eq!(bug.rpc_err(Phase::Send).status, ClntStat::SystemError);
        assert_eq!(ReplyError::StaleContext.fault(), Fault::Bug);
        assert_eq!(ReplyError::StaleContext.errno(), Errno::EINVAL);
        // A requester slot it had just taken gone missing: a bug, not the caller's fault.
        assert_eq!(CallError::Internal.fault(), Fault::Bug);
        assert!(!CallError::Internal.is_retryable());
        assert_eq!(CallError::Internal.errno(), Errno::EIO);
        assert_eq!((Errno::EIO.freebsd(), Errno::EIO.linux()), (5, 5));
        let e = CallError::Internal.rpc_err(Phase::Send);
        assert_eq!(e.status, ClntStat::SystemError);
    }

    #[test]
    fn every_error_has_a_fault_a_status_and_a_source_where_it_wraps() {
        use core::error::Error;
        for e in ALL {
            let _ = (e.fault(), e.rpc_err(Phase::Send), e.rpc_err(Phase::Reply));
            assert_eq!(
                e.source().is_some(),
                matches!(e, CallError::Provider(_)),
                "{e:?}"
            );
        }
        let failed = ReplyError::Failed(CallError::NoMemory);
        assert_eq!(failed.fault(), Fault::Memory);
        assert!(failed.source().is_some());
        assert_eq!(ReplyError::ChunkError.fault(), Fault::Peer);
    }
}
