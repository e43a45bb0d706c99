//! Borrowed, allocation-free views of RPC call and reply headers (RFC 5531 `call_body`,
//! `reply_body`): for a transport that hands the credential and verifier on as opaque bytes
//! — the krpc faces, where `svc.c` and the client's `_seterr_reply` do the rest — and must
//! not allocate per call. [`CallHeader::decode`](crate::rpc::CallHeader::decode) and
//! [`ReplyHeader::decode`](crate::rpc::ReplyHeader::decode) are these views plus owned
//! credentials.
//!
//! Every length a peer sends is checked before it is used: a credential or verifier body
//! longer than `MAX_AUTH_BYTES` is refused before its bytes are looked at.

use crate::rpc::{
    AcceptStat, Auth, Rejected, ReplyHeader, CALL, MAX_AUTH_BYTES, REPLY, RPC_VERSION,
};
use crate::svc::{refusal, AUTH_BADCRED, AUTH_BADVERF};
use crate::xdr::{Decoder, XdrError};

/// The longest call header a [`CallView`] reads: XID, direction, RPC version, program,
/// version, procedure, and a credential and a verifier of `MAX_AUTH_BYTES` each.
pub const MAX_CALL_HEADER: usize = 6 * 4 + 2 * (8 + MAX_AUTH_BYTES);

/// The longest reply header a [`ReplyView`] reads: XID, direction, reply status, a verifier
/// of `MAX_AUTH_BYTES`, the accept status and PROG_MISMATCH's two versions.
pub const MAX_REPLY_HEADER: usize = 3 * 4 + 8 + MAX_AUTH_BYTES + 3 * 4;

/// A credential or verifier as it is on the wire: its flavor and its body, not decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpaqueAuth<'a> {
    /// `oa_flavor`.
    pub flavor: u32,
    /// `oa_body` (at most `MAX_AUTH_BYTES`).
    pub body: &'a [u8],
}

impl<'a> OpaqueAuth<'a> {
    /// Decode an `opaque_auth`; a body longer than `MAX_AUTH_BYTES` is refused with its
    /// length before its bytes are taken.
    fn decode(d: &mut Decoder<'a>) -> Result<OpaqueAuth<'a>, AuthError> {
        let flavor = d.u32().map_err(AuthError::Xdr)?;
        let len = d.u32().map_err(AuthError::Xdr)? as usize;
        if len > MAX_AUTH_BYTES {
            return Err(AuthError::TooLong(len));
        }
        let body = d.opaque_fixed(len).map_err(AuthError::Xdr)?;
        Ok(OpaqueAuth { flavor, body })
    }

    /// The credential or verifier, decoded (`AUTH_SYS` allocates its name and groups).
    ///
    /// # Errors
    /// A malformed `AUTH_SYS` body.
    pub fn to_auth(&self) -> Result<Auth, XdrError> {
        Auth::from_body(self.flavor, self.body)
    }
}

/// Why an `opaque_auth` could not be read.
enum AuthError {
    Xdr(XdrError),
    TooLong(usize),
}

/// A call header, borrowed from the message: the decoder is left at the arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallView<'a> {
    /// Transaction id.
    pub xid: u32,
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub proc_: u32,
    /// The credential.
    pub cred: OpaqueAuth<'a>,
    /// The verifier.
    pub verf: OpaqueAuth<'a>,
}

/// Why a message is not a call a server can hand up, and how RFC 5531 answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadCall {
    /// The header ends early (or an item is malformed): `GARBAGE_ARGS`.
    Garbage(XdrError),
    /// The direction is not CALL (this value): `GARBAGE_ARGS` from a server that answers it.
    NotCall(u32),
    /// The RPC version is not 2 (this value): `MSG_DENIED` / `RPC_MISMATCH` (2, 2).
    RpcVersion(u32),
    /// The credential body is longer than `MAX_AUTH_BYTES` (this length):
    /// `MSG_DENIED` / `AUTH_ERROR` / `AUTH_BADCRED`.
    CredTooLong(usize),
    /// The verifier body is longer than `MAX_AUTH_BYTES` (this length):
    /// `MSG_DENIED` / `AUTH_ERROR` / `AUTH_BADVERF`.
    VerfTooLong(usize),
}

impl BadCall {
    /// The reply that answers the call `xid` (an `AUTH_NONE` verifier where one is sent).
    pub fn reply(&self, xid: u32) -> ReplyHeader {
        match self {
            BadCall::Garbage(_) | BadCall::NotCall(_) => refusal(xid, AcceptStat::GarbageArgs),
            BadCall::RpcVersion(_) => ReplyHeader::Denied {
                xid,
                why: Rejected::RpcMismatch {
                    low: RPC_VERSION,
                    high: RPC_VERSION,
                },
            },
            BadCall::CredTooLong(_) => ReplyHeader::Denied {
                xid,
                why: Rejected::AuthError(AUTH_BADCRED),
            },
            BadCall::VerfTooLong(_) => ReplyHeader::Denied {
                xid,
                why: Rejected::AuthError(AUTH_BADVERF),
            },
        }
    }

    /// The same, as a decoding error.
    pub fn into_xdr(self) -> XdrError {
        match self {
            BadCall::Garbage(e) => e,
            BadCall::NotCall(value) => XdrError::BadEnum {
                what: "msg_type (CALL expected)",
                value,
            },
            BadCall::RpcVersion(value) => XdrError::BadEnum {
                what: "rpc version",
                value,
            },
            BadCall::CredTooLong(len) | BadCall::VerfTooLong(len) => XdrError::TooLong {
                what: "auth body",
                len,
                max: MAX_AUTH_BYTES,
            },
        }
    }
}

impl<'a> CallView<'a> {
    /// Decode a call header; on success the decoder is at the arguments.
    ///
    /// # Errors
    /// [`BadCall`], which says how to answer.
    pub fn decode(d: &mut Decoder<'a>) -> Result<CallView<'a>, BadCall> {
        let xid = d.u32().map_err(BadCall::Garbage)?;
        match d.u32().map_err(BadCall::Garbage)? {
            CALL => {}
            other => return Err(BadCall::NotCall(other)),
        }
        match d.u32().map_err(BadCall::Garbage)? {
            RPC_VERSION => {}
            other => return Err(BadCall::RpcVersion(other)),
        }
        let prog = d.u32().map_err(BadCall::Garbage)?;
        let vers = d.u32().map_err(BadCall::Garbage)?;
        let proc_ = d.u32().map_err(BadCall::Garbage)?;
        let cred = OpaqueAuth::decode(d).map_err(|e| match e {
            AuthError::Xdr(e) => BadCall::Garbage(e),
            AuthError::TooLong(n) => BadCall::CredTooLong(n),
        })?;
        let verf = OpaqueAuth::decode(d).map_err(|e| match e {
            AuthError::Xdr(e) => BadCall::Garbage(e),
            AuthError::TooLong(n) => BadCall::VerfTooLong(n),
        })?;
        Ok(CallView {
            xid,
            prog,
            vers,
            proc_,
            cred,
            verf,
        })
    }
}

/// A reply header, borrowed from the message: after an accepted SUCCESS the decoder is at
/// the results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyView<'a> {
    /// MSG_ACCEPTED.
    Accepted {
        /// Transaction id.
        xid: u32,
        /// The server's verifier.
        verf: OpaqueAuth<'a>,
        /// The outcome.
        stat: AcceptStat,
    },
    /// MSG_DENIED.
    Denied {
        /// Transaction id.
        xid: u32,
        /// Why.
        why: Rejected,
    },
}

impl<'a> ReplyView<'a> {
    /// Decode a reply header.
    ///
    /// # Errors
    /// Malformed input, a message that is not a REPLY, an unknown status, or a verifier
    /// longer than `MAX_AUTH_BYTES`.
    pub fn decode(d: &mut Decoder<'a>) -> Result<ReplyView<'a>, XdrError> {
        let xid = d.u32()?;
        match d.u32()? {
            REPLY => {}
            value => {
                return Err(XdrError::BadEnum {
                    what: "msg_type (REPLY expected)",
                    value,
                })
            }
        }
        match d.u32()? {
            0 => {
                let verf = OpaqueAuth::decode(d).map_err(|e| match e {
                    AuthError::Xdr(e) => e,
                    AuthError::TooLong(len) => XdrError::TooLong {
                        what: "auth body",
                        len,
                        max: MAX_AUTH_BYTES,
                    },
                })?;
                let stat = match d.u32()? {
                    0 => AcceptStat::Success,
                    1 => AcceptStat::ProgUnavail,
                    2 => AcceptStat::ProgMismatch {
                        low: d.u32()?,
                        high: d.u32()?,
                    },
                    3 => AcceptStat::ProcUnavail,
                    4 => AcceptStat::GarbageArgs,
                    5 => AcceptStat::SystemErr,
                    value => {
                        return Err(XdrError::BadEnum {
                            what: "accept_stat",
                            value,
                        })
                    }
                };
                Ok(ReplyView::Accepted { xid, verf, stat })
            }
            1 => {
                let why = match d.u32()? {
                    0 => Rejected::RpcMismatch {
                        low: d.u32()?,
                        high: d.u32()?,
                    },
                    1 => Rejected::AuthError(d.u32()?),
                    value => {
                        return Err(XdrError::BadEnum {
                            what: "reject_stat",
                            value,
                        })
                    }
                };
                Ok(ReplyView::Denied { xid, why })
            }
            value => Err(XdrError::BadEnum {
                what: "reply_stat",
                value,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn bytes(words: &[u32], extra: &[u8]) -> Vec<u8> {
        let mut b: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        b.extend_from_slice(extra);
        b
    }

    #[test]
    fn a_call_view_borrows_its_credential_and_stops_at_the_arguments() {
        // AUTH_SYS credential of 5 bytes (padded to 8), AUTH_NONE verifier, 4 argument bytes.
        let b = bytes(
            &[7, 0, 2, 100_003, 3, 1, 1, 5],
            &[1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9],
        );
        let mut d = Decoder::new(&b);
        let v = CallView::decode(&mut d).unwrap();
        assert_eq!((v.xid, v.prog, v.vers, v.proc_), (7, 100_003, 3, 1));
        assert_eq!(
            v.cred,
            OpaqueAuth {
                flavor: 1,
                body: &[1, 2, 3, 4, 5]
            }
        );
        assert_eq!(
            v.verf,
            OpaqueAuth {
                flavor: 0,
                body: &[]
            }
        );
        assert_eq!(d.pos(), 48);
    }

    #[test]
    fn bad_calls_say_how_they_are_answered() {
        /// The call's words, what the refusal must be, how it is answered.
        type Case = (&'static [u32], fn(&BadCall) -> bool, ReplyHeader);
        let cases: [Case; 6] = [
            (
                &[1, 0, 3, 1, 1, 0, 0, 0, 0, 0],
                |e| *e == BadCall::RpcVersion(3),
                ReplyHeader::Denied {
                    xid: 9,
                    why: Rejected::RpcMismatch { low: 2, high: 2 },
                },
            ),
            (
                &[1, 0, 2, 1, 1, 0, 0, 401],
                |e| *e == BadCall::CredTooLong(401),
                ReplyHeader::Denied {
                    xid: 9,
                    why: Rejected::AuthError(AUTH_BADCRED),
                },
            ),
            (
                &[1, 0, 2, 1, 1, 0, 0, 0, 0, 401],
                |e| *e == BadCall::VerfTooLong(401),
                ReplyHeader::Denied {
                    xid: 9,
                    why: Rejected::AuthError(AUTH_BADVERF),
                },
            ),
            (
                &[1, 0, 2, 1],
                |e| matches!(e, BadCall::Garbage(_)),
                ReplyHeader::Accepted {
                    xid: 9,
                    verf: Auth::None,
                    stat: AcceptStat::GarbageArgs,
                },
            ),
            (
                &[1, 1, 0, 0, 0, 0],
                |e| *e == BadCall::NotCall(1),
                ReplyHeader::Accepted {
                    xid: 9,
                    verf: Auth::None,
                    stat: AcceptStat::GarbageArgs,
                },
            ),
            // A credential body the message does not hold.
            (
                &[1, 0, 2, 1, 1, 0, 1, 400, 0, 0],
                |e| matches!(e, BadCall::Garbage(XdrError::Short { .. })),
                ReplyHeader::Accepted {
                    xid: 9,
                    verf: Auth::None,
                    stat: AcceptStat::GarbageArgs,
                },
            ),
        ];
        for (w, is, reply) in cases {
            let b = bytes(w, &[]);
            let e = CallView::decode(&mut Decoder::new(&b)).unwrap_err();
            assert!(is(&e), "{w:?}: {e:?}");
            assert_eq!(e.reply(9), reply, "{w:?}");
        }
        // A length that overflows any padding arithmetic: refused, no panic.
        let b = bytes(&[1, 0, 2, 1, 1, 0, 1, u32::MAX], &[]);
        assert!(CallView::decode(&mut Decoder::new(&b)).is_err());
    }

    #[test]
    fn the_longest_headers_fit_their_bounds() {
        let auth = |n: u32| {
            let mut w = alloc::vec![1, n];
            w.extend(core::iter::repeat_n(0, n as usize / 4));
            w
        };
        let mut w = alloc::vec![1, 0, 2, 1, 1, 0];
        w.extend(auth(400));
        w.extend(auth(400));
        let b = bytes(&w, &[]);
        assert_eq!(b.len(), MAX_CALL_HEADER);
        let mut d = Decoder::new(&b);
        CallView::decode(&mut d).unwrap();
        assert_eq!(d.pos(), MAX_CALL_HEADER);
        let mut w = alloc::vec![1, 1, 0];
        w.extend(auth(400));
        w.extend([2, 3, 4]);
        let b = bytes(&w, &[]);
        assert_eq!(b.len(), MAX_REPLY_HEADER);
        let mut d = Decoder::new(&b);
        assert_eq!(
            ReplyView::decode(&mut d).unwrap(),
            ReplyView::Accepted {
                xid: 1,
                verf: OpaqueAuth {
                    flavor: 1,
                    body: &[0; 400]
                },
                stat: AcceptStat::ProgMismatch { low: 3, high: 4 },
            }
        );
        assert_eq!(d.pos(), MAX_REPLY_HEADER);
    }
}
