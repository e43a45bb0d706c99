//! Shared by the service tests: the in-memory backend and the client's call headers.
#![allow(dead_code)]

pub mod memfs;

use nfs_proto::nfs3::{NFS_PROGRAM, NFS_V3};
use onc_rpc::rpc::{Auth, AuthSys, CallHeader};
use onc_rpc::svc::Cred;
use onc_rpc::xdr::Encoder;

/// `AUTH_SYS` credentials of `uid`, gid 100, from host "client".
pub fn sys(uid: u32) -> Auth {
    Auth::Sys(AuthSys {
        stamp: 1,
        machine_name: b"client".to_vec(),
        uid,
        gid: 100,
        gids: vec![100],
    })
}

/// An encoder holding the header of an NFSv3 call of `proc_` by `uid`, ready for the
/// arguments.
pub fn nfs_header(xid: u32, proc_: u32, uid: u32) -> Encoder {
    let mut e = Encoder::new();
    CallHeader {
        xid,
        prog: NFS_PROGRAM,
        vers: NFS_V3,
        proc_,
        cred: sys(uid),
        verf: Auth::None,
    }
    .encode(&mut e);
    e
}

/// Root, as the backend sees it (for setting up a file system directly).
pub fn root() -> Cred<'static> {
    Cred {
        uid: 0,
        gid: 0,
        ..Cred::none()
    }
}
