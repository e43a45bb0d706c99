//! The RPC header in front of an NFSv3 call's arguments: one builder for every client of
//! ours (tests, the in-kernel peer runs) instead of a `CallHeader` written out at each.

use onc_rpc::rpc::{Auth, CallHeader};
use onc_rpc::xdr::Encoder;

use super::{NFS_PROGRAM, NFS_V3};

/// An encoder holding the header of an NFSv3 call of `proc_` with credential `cred` (an
/// `AUTH_NONE` verifier), ready for the arguments.
pub fn call_encoder(xid: u32, proc_: u32, cred: Auth) -> Encoder {
    CallHeader::new(xid, NFS_PROGRAM, NFS_V3, proc_, cred).encoder()
}
