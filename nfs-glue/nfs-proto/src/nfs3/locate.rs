//! Where the DDP data of a READ or READLINK reply belongs (RFC 8267, RFC 8166 §3.4.6): the
//! krpc-rdma requester's `LocateFn` for these procedures.
//!
//! The requester hands the inline part of the RPC reply (the data item removed, as the
//! responder's reduction left it) and splices the write-chunk data in at the offset returned.

use mbuf::Chain;

use super::{ReadRes, ReadlinkRes};
use onc_rpc::rpc::{ReplyHeader, MAX_AUTH_BYTES, SUCCESS_REPLY_HEADER_LEN};
use onc_rpc::xdr::{Decoder, XdrError};

/// XDR bytes of a `fattr3`.
const FATTR3_LEN: usize = 84;

/// The most bytes of the reply the locate functions read: an accepted-success RPC reply
/// header with the largest verifier, then the longest READ result head (status,
/// `post_op_attr` with attributes, count, eof, data length). READLINK's head is shorter.
pub const LOCATE_PREFIX_MAX: usize =
    SUCCESS_REPLY_HEADER_LEN + MAX_AUTH_BYTES + 4 + (4 + FATTR3_LEN) + 4 + 4 + 4;

/// Decode the RPC reply header from a bounded prefix of `reply`, then the result head with
/// `head`; the offset after it when the reply is an accepted SUCCESS and `head` says so.
fn locate(
    reply: &Chain,
    head: impl FnOnce(&mut Decoder<'_>) -> Result<bool, XdrError>,
) -> Option<usize> {
    let mut buf = [0u8; LOCATE_PREFIX_MAX];
    let n = reply.len().min(LOCATE_PREFIX_MAX);
    let prefix = buf.get_mut(..n)?;
    reply.copydata(0, prefix).ok()?;
    let mut d = Decoder::new(prefix);
    if !ReplyHeader::decode(&mut d).ok()?.is_success() {
        return None;
    }
    head(&mut d).ok()?.then(|| d.pos())
}

/// The `LocateFn` of READ: given the inline part of a READ reply (RPC reply header and
/// `READ3res`, the data absent), the byte offset just after the data's length word; `None`
/// when the reply is not an accepted SUCCESS, the status is not `NFS3_OK`, or the reply is
/// truncated or malformed.
pub fn locate_read_data(reply: &Chain) -> Option<usize> {
    locate(reply, |d| Ok(ReadRes::decode_head(d)?.status.is_ok()))
}

/// The `LocateFn` of READLINK: as [`locate_read_data`], for `READLINK3res` (the offset just
/// after the path's length word).
pub fn locate_readlink_data(reply: &Chain) -> Option<usize> {
    locate(reply, |d| Ok(ReadlinkRes::decode_head(d)?.status.is_ok()))
}
