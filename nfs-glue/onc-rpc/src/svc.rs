//! The server side of ONC RPC (RFC 5531) shared by the NFSv3 and MOUNT
//! services (`nfs-service`): accept or refuse a call before its procedure runs, and the
//! credentials handed to the procedure.
//!
//! [`accept_call`] checks, in this order (Linux's `svc_process` and FreeBSD's `svc_getreq`
//! order: authentication before program lookup):
//!
//! 1. the message is a CALL (anything else is dropped: there is no one to answer);
//! 2. RPC version 2, else MSG_DENIED / RPC_MISMATCH (2, 2);
//! 3. the credential decodes and is `AUTH_NONE` or `AUTH_SYS`, else MSG_DENIED /
//!    AUTH_ERROR / `AUTH_BADCRED` (RPCSEC_GSS and other flavors are not served);
//! 4. with [`AuthPolicy::RequireSys`], an `AUTH_NONE` call to any procedure but NULL is
//!    MSG_DENIED / AUTH_ERROR / `AUTH_TOOWEAK` (the export wants to know who writes);
//! 5. the program, else PROG_UNAVAIL; the version, else PROG_MISMATCH (low, high); the
//!    procedure, else PROC_UNAVAIL.
//!
//! Undecodable arguments are the service's business (GARBAGE_ARGS, [`refusal`]).

use alloc::vec::Vec;

use crate::rpc::{
    AcceptStat, Auth, CallHeader, Rejected, ReplyHeader, AUTH_NONE, AUTH_SYS, CALL, RPC_VERSION,
};
use crate::xdr::{Decoder, Encoder, XdrError};

/// `auth_stat` AUTH_BADCRED: the credential is malformed or of a flavor not served.
pub const AUTH_BADCRED: u32 = 1;
/// `auth_stat` AUTH_BADVERF: the verifier is malformed.
pub const AUTH_BADVERF: u32 = 3;
/// `auth_stat` AUTH_TOOWEAK: the flavor is too weak for this service.
pub const AUTH_TOOWEAK: u32 = 5;
/// The uid and gid an `AUTH_NONE` caller gets (`nobody` on Linux and FreeBSD).
pub const NOBODY: u32 = 65_534;

/// Which credential flavors a service accepts for procedures other than NULL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthPolicy {
    /// `AUTH_SYS` and `AUTH_NONE` (mapped to [`NOBODY`]).
    #[default]
    AllowNone,
    /// `AUTH_SYS` only; `AUTH_NONE` is refused with `AUTH_TOOWEAK`.
    RequireSys,
}

/// Who is calling, as every backend call receives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cred<'a> {
    /// `AUTH_SYS` or `AUTH_NONE`.
    pub flavor: u32,
    /// Effective uid ([`NOBODY`] for `AUTH_NONE`).
    pub uid: u32,
    /// Effective gid ([`NOBODY`] for `AUTH_NONE`).
    pub gid: u32,
    /// Supplementary groups (at most 16).
    pub gids: &'a [u32],
    /// The caller's machine name (`AUTH_SYS`; empty for `AUTH_NONE`).
    pub machine_name: &'a [u8],
}

impl<'a> Cred<'a> {
    /// The credential of an accepted call header (`AUTH_NONE` for any other flavor, which
    /// [`accept_call`] never lets through).
    pub fn of(h: &'a CallHeader) -> Cred<'a> {
        match &h.cred {
            Auth::Sys(s) => Cred {
                flavor: AUTH_SYS,
                uid: s.uid,
                gid: s.gid,
                gids: &s.gids,
                machine_name: &s.machine_name,
            },
            Auth::None | Auth::Other { .. } => Cred::none(),
        }
    }

    /// An `AUTH_NONE` caller.
    pub const fn none() -> Cred<'static> {
        Cred {
            flavor: AUTH_NONE,
            uid: NOBODY,
            gid: NOBODY,
            gids: &[],
            machine_name: &[],
        }
    }
}

/// How callers' identities are mapped before they reach the backend (an export option, as
/// Linux's `root_squash` / `all_squash` with `anonuid` / `anongid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Squash {
    /// Identities as sent.
    #[default]
    None,
    /// uid 0 becomes `uid`, gid 0 becomes `gid`, and a squashed root keeps no supplementary
    /// groups.
    Root {
        /// The anonymous uid.
        uid: u32,
        /// The anonymous gid.
        gid: u32,
    },
    /// Every caller becomes `uid` / `gid`, without supplementary groups.
    All {
        /// The anonymous uid.
        uid: u32,
        /// The anonymous gid.
        gid: u32,
    },
}

/// What an export grants one client: the identity mapping and whether it may change
/// anything (Linux's exports(5) `ro` / `rw`, `root_squash` / `all_squash`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access {
    /// How the caller's identity is mapped.
    pub squash: Squash,
    /// `ro`: every procedure that would change the file system fails with `NFS3ERR_ROFS`,
    /// and ACCESS grants no MODIFY, EXTEND or DELETE.
    pub read_only: bool,
}

impl<'a> Cred<'a> {
    /// This credential mapped by `squash`.
    pub fn squashed(self, squash: Squash) -> Cred<'a> {
        match squash {
            Squash::None => self,
            Squash::Root { uid, gid } if self.uid == 0 => Cred {
                uid,
                gid: if self.gid == 0 { gid } else { self.gid },
                gids: &[],
                ..self
            },
            Squash::Root { uid: _, gid } if self.gid == 0 => Cred { gid, ..self },
            Squash::Root { .. } => self,
            Squash::All { uid, gid } => Cred {
                uid,
                gid,
                gids: &[],
                ..self
            },
        }
    }
}

/// What a service serves: one program, a range of versions, procedures `0..nprocs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Program {
    /// Program number.
    pub prog: u32,
    /// Lowest version served.
    pub low: u32,
    /// Highest version served.
    pub high: u32,
    /// Procedures `0..nprocs` exist.
    pub nprocs: u32,
    /// Credential policy.
    pub auth: AuthPolicy,
}

/// Why a call does not reach its procedure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Nothing to answer: not a call, or too short to carry an xid and message type.
    Drop,
    /// Answer with this reply header (and nothing after it).
    Reply(ReplyHeader),
}

/// A call accepted for its procedure: the header and a decoder at the arguments.
#[derive(Debug, Clone)]
pub struct Accepted<'a> {
    /// The call header.
    pub header: CallHeader,
    /// At the procedure's arguments.
    pub args: Decoder<'a>,
}

/// Check `msg` (an RPC call message from its xid on) against `p`; see the module
/// documentation for the order of the checks.
///
/// # Errors
/// The [`Refusal`].
pub fn accept_call<'a>(msg: &'a [u8], p: &Program) -> Result<Accepted<'a>, Refusal> {
    let mut d = Decoder::new(msg);
    let (xid, mtype) = match (d.u32(), d.u32()) {
        (Ok(x), Ok(m)) => (x, m),
        _ => return Err(Refusal::Drop),
    };
    if mtype != CALL {
        return Err(Refusal::Drop);
    }
    let denied = |why| Refusal::Reply(ReplyHeader::Denied { xid, why });
    let accepted = |stat| {
        Refusal::Reply(ReplyHeader::Accepted {
            xid,
            verf: Auth::None,
            stat,
        })
    };
    match d.u32() {
        Ok(RPC_VERSION) => {}
        // A call cut short before its version is no call at all.
        Err(_) => return Err(Refusal::Drop),
        Ok(_) => {
            return Err(denied(Rejected::RpcMismatch {
                low: RPC_VERSION,
                high: RPC_VERSION,
            }))
        }
    }
    let mut hd = Decoder::new(msg);
    let header =
        CallHeader::decode(&mut hd).map_err(|_| denied(Rejected::AuthError(AUTH_BADCRED)))?;
    let flavor = match header.cred {
        Auth::None => AUTH_NONE,
        Auth::Sys(_) => AUTH_SYS,
        Auth::Other { .. } => return Err(denied(Rejected::AuthError(AUTH_BADCRED))),
    };
    if flavor == AUTH_NONE && p.auth == AuthPolicy::RequireSys && header.proc_ != 0 {
        return Err(denied(Rejected::AuthError(AUTH_TOOWEAK)));
    }
    if header.prog != p.prog {
        return Err(accepted(AcceptStat::ProgUnavail));
    }
    if header.vers < p.low || header.vers > p.high {
        return Err(accepted(AcceptStat::ProgMismatch {
            low: p.low,
            high: p.high,
        }));
    }
    if header.proc_ >= p.nprocs {
        return Err(accepted(AcceptStat::ProcUnavail));
    }
    Ok(Accepted { header, args: hd })
}

/// An accepted reply header with `stat` (GARBAGE_ARGS, SYSTEM_ERR, …) and an `AUTH_NONE`
/// verifier.
pub fn refusal(xid: u32, stat: AcceptStat) -> ReplyHeader {
    ReplyHeader::Accepted {
        xid,
        verf: Auth::None,
        stat,
    }
}

/// A reply header alone, as bytes.
///
/// # Errors
/// [`XdrError::Alloc`].
pub fn header_bytes(h: &ReplyHeader) -> Result<Vec<u8>, XdrError> {
    let mut e = Encoder::new();
    h.encode(&mut e);
    e.finish()
}

/// Room reserved for a reply's header and results, so that most replies (all but READDIR,
/// whose entries are encoded apart) are encoded without growing the buffer.
pub const REPLY_RESERVE: usize = 512;

/// An encoder holding the accepted-SUCCESS reply header of `xid`, ready for the results
/// (with [`REPLY_RESERVE`] bytes of room).
pub fn success_encoder(xid: u32) -> Encoder {
    let mut e = Encoder::with_capacity(REPLY_RESERVE);
    ReplyHeader::success(xid).encode(&mut e);
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::AuthSys;

    const P: Program = Program {
        prog: 100_003,
        low: 3,
        high: 3,
        nprocs: 22,
        auth: AuthPolicy::RequireSys,
    };

    fn call(prog: u32, vers: u32, proc_: u32, cred: Auth) -> Vec<u8> {
        CallHeader::new(7, prog, vers, proc_, cred)
            .to_bytes()
            .unwrap()
    }

    fn sys() -> Auth {
        Auth::Sys(AuthSys {
            stamp: 0,
            machine_name: b"h".to_vec(),
            uid: 1000,
            gid: 100,
            gids: alloc::vec![100, 5],
        })
    }

    #[test]
    fn squash() {
        let root = Cred {
            uid: 0,
            gid: 0,
            gids: &[0, 5],
            ..Cred::none()
        };
        let user = Cred {
            uid: 1000,
            gid: 0,
            gids: &[0, 5],
            ..Cred::none()
        };
        let r = Squash::Root { uid: 99, gid: 98 };
        let a = Squash::All { uid: 99, gid: 98 };
        assert_eq!(root.squashed(Squash::None), root);
        let s = root.squashed(r);
        assert_eq!((s.uid, s.gid, s.gids), (99, 98, &[][..]));
        let s = user.squashed(r);
        assert_eq!((s.uid, s.gid, s.gids), (1000, 98, &[0, 5][..]));
        let s = user.squashed(a);
        assert_eq!((s.uid, s.gid, s.gids), (99, 98, &[][..]));
    }

    fn refused(msg: &[u8]) -> Refusal {
        accept_call(msg, &P).map(|_| ()).unwrap_err()
    }

    #[test]
    fn checks_in_order() {
        let ok = call(100_003, 3, 21, sys());
        let a = accept_call(&ok, &P).unwrap();
        assert_eq!(a.args.remaining(), 0);
        let c = Cred::of(&a.header);
        assert_eq!(
            (c.uid, c.gid, c.gids, c.machine_name),
            (1000, 100, &[100, 5][..], &b"h"[..])
        );
        assert_eq!(refused(&ok[..7]), Refusal::Drop);
        let mut reply = ok.clone();
        reply[7] = 1;
        assert_eq!(refused(&reply), Refusal::Drop);
        let mut v1 = ok.clone();
        v1[11] = 1;
        assert_eq!(
            refused(&v1),
            Refusal::Reply(ReplyHeader::Denied {
                xid: 7,
                why: Rejected::RpcMismatch { low: 2, high: 2 }
            })
        );
        let other = call(
            100_003,
            3,
            1,
            Auth::Other {
                flavor: 6,
                body: alloc::vec![1, 2, 3, 4],
            },
        );
        let badcred = Refusal::Reply(ReplyHeader::Denied {
            xid: 7,
            why: Rejected::AuthError(AUTH_BADCRED),
        });
        assert_eq!(refused(&other), badcred);
        assert_eq!(refused(&ok[..ok.len() - 4]), badcred);
        assert_eq!(
            refused(&call(100_003, 3, 1, Auth::None)),
            Refusal::Reply(ReplyHeader::Denied {
                xid: 7,
                why: Rejected::AuthError(AUTH_TOOWEAK)
            })
        );
        assert!(accept_call(&call(100_003, 3, 0, Auth::None), &P).is_ok());
        let stat = |m: &[u8]| match refused(m) {
            Refusal::Reply(ReplyHeader::Accepted { stat, .. }) => stat,
            r => panic!("{r:?}"),
        };
        assert_eq!(stat(&call(100_005, 3, 1, sys())), AcceptStat::ProgUnavail);
        assert_eq!(
            stat(&call(100_003, 4, 1, sys())),
            AcceptStat::ProgMismatch { low: 3, high: 3 }
        );
        assert_eq!(stat(&call(100_003, 3, 22, sys())), AcceptStat::ProcUnavail);
    }
}
