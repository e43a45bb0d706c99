//! ONC RPC version 2 message headers (RFC 5531): calls with `AUTH_NONE` or `AUTH_SYS`
//! credentials, and replies (accepted or denied), in both directions.
//!
//! The transport (`krpc-rdma`) carries whole RPC messages; this module builds and checks the
//! part in front of the procedure's arguments or results.

use alloc::vec::Vec;

use crate::view::{BadCall, CallView, ReplyView};
use crate::xdr::{Decoder, Encoder, XdrError};

/// `msg_type` CALL.
pub const CALL: u32 = 0;
/// `msg_type` REPLY.
pub const REPLY: u32 = 1;
/// The RPC version this module speaks.
pub const RPC_VERSION: u32 = 2;
/// `AUTH_NONE`.
pub const AUTH_NONE: u32 = 0;
/// `AUTH_SYS` (`AUTH_UNIX`).
pub const AUTH_SYS: u32 = 1;
/// Largest opaque body of a credential or verifier.
pub const MAX_AUTH_BYTES: usize = 400;
/// Largest `AUTH_SYS` machine name.
pub const MAX_MACHINE_NAME: usize = 255;
/// Largest number of supplementary groups in `AUTH_SYS`.
pub const MAX_GIDS: usize = 16;
/// Bytes of an accepted-success reply header with an `AUTH_NONE` verifier (xid, REPLY,
/// MSG_ACCEPTED, verifier flavor + length, SUCCESS).
pub const SUCCESS_REPLY_HEADER_LEN: usize = 24;

/// `AUTH_SYS` credentials (RFC 5531 appendix A).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthSys {
    /// Arbitrary stamp.
    pub stamp: u32,
    /// The caller's host name (at most 255 bytes).
    pub machine_name: Vec<u8>,
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
    /// Supplementary groups (at most 16).
    pub gids: Vec<u32>,
}

impl AuthSys {
    /// `AUTH_SYS` credentials of `uid` / `gid` with supplementary `gids`, from `machine_name`
    /// (the name and groups copied; nothing is allocated for empty ones).
    pub fn new(stamp: u32, machine_name: &[u8], uid: u32, gid: u32, gids: &[u32]) -> AuthSys {
        AuthSys {
            stamp,
            machine_name: machine_name.to_vec(),
            uid,
            gid,
            gids: gids.to_vec(),
        }
    }
}

/// A credential or verifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// `AUTH_NONE`.
    None,
    /// `AUTH_SYS`.
    Sys(AuthSys),
    /// Any other flavor, body kept opaque.
    Other {
        /// The flavor number.
        flavor: u32,
        /// The body (at most 400 bytes).
        body: Vec<u8>,
    },
}

impl Auth {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Auth::None => {
                e.u32(AUTH_NONE);
                e.u32(0);
            }
            Auth::Sys(s) => {
                let mut b = Encoder::new();
                b.u32(s.stamp);
                b.opaque(&s.machine_name);
                b.u32(s.uid);
                b.u32(s.gid);
                b.u32(s.gids.len() as u32);
                for g in &s.gids {
                    b.u32(*g);
                }
                e.u32(AUTH_SYS);
                match b.finish() {
                    Ok(body) => e.opaque(&body),
                    Err(_) => e.fail(),
                }
            }
            Auth::Other { flavor, body } => {
                e.u32(*flavor);
                e.opaque(body);
            }
        }
    }

    /// The credential or verifier of `flavor` with this `body` (an `opaque_auth`'s, at most
    /// `MAX_AUTH_BYTES`); `AUTH_SYS` bodies are decoded.
    pub(crate) fn from_body(flavor: u32, body: &[u8]) -> Result<Auth, XdrError> {
        match flavor {
            AUTH_NONE => Ok(Auth::None),
            AUTH_SYS => {
                let mut b = Decoder::new(body);
                let stamp = b.u32()?;
                let machine_name = b.opaque("machine name", MAX_MACHINE_NAME)?.to_vec();
                let uid = b.u32()?;
                let gid = b.u32()?;
                let n = b.u32()? as usize;
                if n > MAX_GIDS {
                    return Err(XdrError::TooLong {
                        what: "AUTH_SYS gids",
                        len: n,
                        max: MAX_GIDS,
                    });
                }
                let mut gids = Vec::new();
                for _ in 0..n {
                    gids.push(b.u32()?);
                }
                Ok(Auth::Sys(AuthSys {
                    stamp,
                    machine_name,
                    uid,
                    gid,
                    gids,
                }))
            }
            flavor => Ok(Auth::Other {
                flavor,
                body: body.to_vec(),
            }),
        }
    }
}

/// The header of a call, up to the procedure's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallHeader {
    /// Transaction id.
    pub xid: u32,
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub proc_: u32,
    /// Credential.
    pub cred: Auth,
    /// Verifier.
    pub verf: Auth,
}

impl CallHeader {
    /// The header of a call of `prog` / `vers` / `proc_` with `cred` and an `AUTH_NONE`
    /// verifier.
    pub fn new(xid: u32, prog: u32, vers: u32, proc_: u32, cred: Auth) -> CallHeader {
        CallHeader {
            xid,
            prog,
            vers,
            proc_,
            cred,
            verf: Auth::None,
        }
    }

    /// An encoder holding the header, ready for the procedure's arguments.
    pub fn encoder(&self) -> Encoder {
        let mut e = Encoder::new();
        self.encode(&mut e);
        e
    }

    /// Append the header to `e`.
    pub fn encode(&self, e: &mut Encoder) {
        e.u32(self.xid);
        e.u32(CALL);
        e.u32(RPC_VERSION);
        e.u32(self.prog);
        e.u32(self.vers);
        e.u32(self.proc_);
        self.cred.encode(e);
        self.verf.encode(e);
    }

    /// The header as bytes.
    ///
    /// # Errors
    /// [`XdrError::Alloc`].
    pub fn to_bytes(&self) -> Result<Vec<u8>, XdrError> {
        self.encoder().finish()
    }

    /// Decode a call header; the decoder is left at the arguments.
    ///
    /// # Errors
    /// Malformed input, a message that is not a CALL ([`XdrError::BadEnum`] "msg_type"), or an
    /// RPC version other than 2 ("rpc version").
    pub fn decode(d: &mut Decoder<'_>) -> Result<CallHeader, XdrError> {
        let v = CallView::decode(d).map_err(BadCall::into_xdr)?;
        Ok(CallHeader {
            xid: v.xid,
            prog: v.prog,
            vers: v.vers,
            proc_: v.proc_,
            cred: v.cred.to_auth()?,
            verf: v.verf.to_auth()?,
        })
    }
}

/// `accept_stat` of an accepted reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptStat {
    /// SUCCESS: the results follow.
    Success,
    /// PROG_UNAVAIL.
    ProgUnavail,
    /// PROG_MISMATCH with the versions supported.
    ProgMismatch {
        /// Lowest version supported.
        low: u32,
        /// Highest version supported.
        high: u32,
    },
    /// PROC_UNAVAIL.
    ProcUnavail,
    /// GARBAGE_ARGS.
    GarbageArgs,
    /// SYSTEM_ERR.
    SystemErr,
}

/// Why a call was denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// RPC_MISMATCH with the RPC versions supported.
    RpcMismatch {
        /// Lowest.
        low: u32,
        /// Highest.
        high: u32,
    },
    /// AUTH_ERROR with its `auth_stat`.
    AuthError(u32),
}

/// A decoded reply header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyHeader {
    /// MSG_ACCEPTED.
    Accepted {
        /// Transaction id.
        xid: u32,
        /// The server's verifier.
        verf: Auth,
        /// The outcome; for [`AcceptStat::Success`] the results follow.
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

impl ReplyHeader {
    /// The transaction id.
    pub fn xid(&self) -> u32 {
        match self {
            ReplyHeader::Accepted { xid, .. } | ReplyHeader::Denied { xid, .. } => *xid,
        }
    }

    /// Whether the results follow.
    pub fn is_success(&self) -> bool {
        matches!(
            self,
            ReplyHeader::Accepted {
                stat: AcceptStat::Success,
                ..
            }
        )
    }

    /// Decode a reply header; after a success the decoder is left at the results.
    ///
    /// # Errors
    /// Malformed input or a message that is not a REPLY.
    pub fn decode(d: &mut Decoder<'_>) -> Result<ReplyHeader, XdrError> {
        Ok(match ReplyView::decode(d)? {
            ReplyView::Accepted { xid, verf, stat } => ReplyHeader::Accepted {
                xid,
                verf: verf.to_auth()?,
                stat,
            },
            ReplyView::Denied { xid, why } => ReplyHeader::Denied { xid, why },
        })
    }

    /// Append the header to `e`.
    pub fn encode(&self, e: &mut Encoder) {
        e.u32(self.xid());
        e.u32(REPLY);
        match self {
            ReplyHeader::Accepted { verf, stat, .. } => {
                e.u32(0);
                verf.encode(e);
                match *stat {
                    AcceptStat::Success => e.u32(0),
                    AcceptStat::ProgUnavail => e.u32(1),
                    AcceptStat::ProgMismatch { low, high } => {
                        e.u32(2);
                        e.u32(low);
                        e.u32(high);
                    }
                    AcceptStat::ProcUnavail => e.u32(3),
                    AcceptStat::GarbageArgs => e.u32(4),
                    AcceptStat::SystemErr => e.u32(5),
                }
            }
            ReplyHeader::Denied { why, .. } => {
                e.u32(1);
                match *why {
                    Rejected::RpcMismatch { low, high } => {
                        e.u32(0);
                        e.u32(low);
                        e.u32(high);
                    }
                    Rejected::AuthError(s) => {
                        e.u32(1);
                        e.u32(s);
                    }
                }
            }
        }
    }

    /// An accepted-success header with an `AUTH_NONE` verifier.
    pub fn success(xid: u32) -> ReplyHeader {
        ReplyHeader::Accepted {
            xid,
            verf: Auth::None,
            stat: AcceptStat::Success,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_and_reply_round_trip() {
        let c = CallHeader {
            xid: 0x1234,
            prog: 100_003,
            vers: 3,
            proc_: 7,
            cred: Auth::Sys(AuthSys {
                stamp: 1,
                machine_name: b"vm".to_vec(),
                uid: 0,
                gid: 0,
                gids: alloc::vec![0, 5],
            }),
            verf: Auth::None,
        };
        let b = c.to_bytes().unwrap();
        let mut d = Decoder::new(&b);
        assert_eq!(CallHeader::decode(&mut d).unwrap(), c);
        assert_eq!(d.remaining(), 0);

        for r in [
            ReplyHeader::success(9),
            ReplyHeader::Accepted {
                xid: 9,
                verf: Auth::None,
                stat: AcceptStat::ProgMismatch { low: 2, high: 3 },
            },
            ReplyHeader::Denied {
                xid: 9,
                why: Rejected::AuthError(1),
            },
        ] {
            let mut e = Encoder::new();
            r.encode(&mut e);
            let b = e.finish().unwrap();
            let mut d = Decoder::new(&b);
            assert_eq!(ReplyHeader::decode(&mut d).unwrap(), r);
            assert_eq!(d.remaining(), 0);
        }
        let mut e = Encoder::new();
        ReplyHeader::success(1).encode(&mut e);
        assert_eq!(e.len(), SUCCESS_REPLY_HEADER_LEN);
    }

    #[test]
    fn malformed_headers_are_errors() {
        // A call decoded as a reply, a bad RPC version, too many gids, truncation anywhere.
        let c = CallHeader {
            xid: 1,
            prog: 100_005,
            vers: 3,
            proc_: 1,
            cred: Auth::None,
            verf: Auth::None,
        }
        .to_bytes()
        .unwrap();
        assert!(ReplyHeader::decode(&mut Decoder::new(&c)).is_err());
        let mut bad = c.clone();
        bad[11] = 3;
        assert!(CallHeader::decode(&mut Decoder::new(&bad)).is_err());
        for n in 0..c.len() {
            assert!(CallHeader::decode(&mut Decoder::new(&c[..n])).is_err());
        }
        let mut e = Encoder::new();
        for w in [1u32, CALL, 2, 1, 1, 1, AUTH_SYS, 28, 0, 0, 0, 0, 17] {
            e.u32(w);
        }
        let b = e.finish().unwrap();
        assert!(matches!(
            CallHeader::decode(&mut Decoder::new(&b)),
            Err(XdrError::TooLong { .. } | XdrError::Short { .. })
        ));
    }
}
