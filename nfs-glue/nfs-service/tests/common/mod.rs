//! Shared by the service tests: the in-memory backend and the client's call headers.
#![allow(dead_code)]

pub mod memfs;

use nfs_proto::nfs3::call_encoder;
use onc_rpc::rpc::{Auth, AuthSys};
use onc_rpc::svc::Cred;
use onc_rpc::xdr::Encoder;

/// `AUTH_SYS` credentials of `uid`, gid 100, from host "client".
pub fn sys(uid: u32) -> Auth {
    Auth::Sys(AuthSys::new(1, b"client", uid, 100, &[100]))
}

/// An encoder holding the header of an NFSv3 call of `proc_` by `uid`, ready for the
/// arguments.
pub fn nfs_header(xid: u32, proc_: u32, uid: u32) -> Encoder {
    call_encoder(xid, proc_, sys(uid))
}

/// Root, as the backend sees it (for setting up a file system directly).
pub fn root() -> Cred<'static> {
    Cred {
        uid: 0,
        gid: 0,
        ..Cred::none()
    }
}
