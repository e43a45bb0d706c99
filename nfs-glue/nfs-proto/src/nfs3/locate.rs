//! Where the DDP data of a READ or READLINK reply belongs (RFC 8267, RFC 8166 §3.4.6): the
//! krpc-rdma requester's `LocateFn` for these procedures.
//!
//! The requester hands the inline part of the RPC reply (the data item removed, as the
//! responder's reduction left it) and splices the write-chunk data in at the offset returned.

use mbuf::Chain;

use super::{ReadRes, ReadlinkRes, NFSPROC3_READ, NFSPROC3_READLINK};
use crate::ddp::{ddp_item, Direction};
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

/// Where the DDP-eligible result of a whole reply lies (the data still in it): for the call
/// of program `prog`, version `vers`, procedure `proc_` (RFC 8267's table,
/// [`ddp_item`]), the reply's offset of the item's first byte (just after its length word,
/// as [`locate_read_data`] / [`locate_readlink_data`] find it) and its length (the length
/// word), when the reply holds all of it. `None` for a procedure without a DDP-eligible
/// result, a reply that is not an accepted `NFS3_OK`, or one that is truncated or
/// malformed. Pure: what a server transport that must find the item itself uses (the krpc
/// face's stock-NFS mode, for a server that puts no DDP marker in its replies). NFSv3 only:
/// the locate functions read NFSv3 results.
pub fn locate_reply_item(
    prog: u32,
    vers: u32,
    proc_: u32,
    reply: &Chain,
) -> Option<(usize, usize)> {
    let item = ddp_item(prog, vers, proc_)?;
    if item.direction != Direction::Reply || vers != 3 {
        return None;
    }
    let off = match proc_ {
        NFSPROC3_READ => locate_read_data(reply)?,
        NFSPROC3_READLINK => locate_readlink_data(reply)?,
        _ => return None,
    };
    let mut word = [0u8; 4];
    reply.copydata(off.checked_sub(4)?, &mut word).ok()?;
    let len = usize::try_from(u32::from_be_bytes(word)).ok()?;
    (off.checked_add(len)? <= reply.len()).then_some((off, len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddp::NFS_PROGRAM;
    use crate::nfs3::{Nfsstat3, ReadHead, ReadlinkHead, NFSPROC3_WRITE};
    use alloc::vec::Vec;
    use onc_rpc::xdr::Encoder;

    /// An accepted-success reply header, then `head`, then `data` and its XDR pad.
    fn reply(head: impl FnOnce(&mut Encoder), data: &[u8]) -> Chain {
        let mut e = Encoder::new();
        ReplyHeader::success(7).encode(&mut e);
        head(&mut e);
        let mut b: Vec<u8> = e.finish().unwrap();
        b.extend_from_slice(data);
        b.resize(b.len() + (4 - data.len() % 4) % 4, 0);
        Chain::from_bytes(&b).unwrap()
    }

    fn read_reply(status: Nfsstat3, data: &[u8], claimed: u32) -> Chain {
        let h = ReadHead {
            status,
            file_attributes: None,
            count: claimed,
            eof: true,
            data_len: claimed,
        };
        reply(|e| h.encode(e), data)
    }

    #[test]
    fn a_read_reply_gives_its_data() {
        let data: Vec<u8> = (0..4099u32).map(|i| i as u8).collect();
        let r = read_reply(Nfsstat3::OK, &data, 4099);
        // 24 bytes of reply header, status, attributes_follow, count, eof, length: 44.
        assert_eq!(
            locate_reply_item(NFS_PROGRAM, 3, NFSPROC3_READ, &r),
            Some((44, 4099))
        );
        let mut got = alloc::vec![0u8; 4099];
        r.copydata(44, &mut got).unwrap();
        assert_eq!(got, data);
    }

    #[test]
    fn a_readlink_reply_gives_its_path() {
        let h = ReadlinkHead {
            status: Nfsstat3::OK,
            symlink_attributes: None,
            data_len: 5,
        };
        let r = reply(|e| h.encode(e), b"a/b/c");
        // 24 bytes of reply header, status, attributes_follow, length: 36.
        assert_eq!(
            locate_reply_item(NFS_PROGRAM, 3, NFSPROC3_READLINK, &r),
            Some((36, 5))
        );
    }

    #[test]
    fn nothing_without_an_eligible_ok_complete_result() {
        let data = [9u8; 100];
        let r = read_reply(Nfsstat3::OK, &data, 100);
        // Not a reply-direction item, not NFSv3, not NFS.
        assert_eq!(locate_reply_item(NFS_PROGRAM, 3, NFSPROC3_WRITE, &r), None);
        assert_eq!(locate_reply_item(NFS_PROGRAM, 2, 6, &r), None);
        assert_eq!(locate_reply_item(NFS_PROGRAM, 4, NFSPROC3_READ, &r), None);
        assert_eq!(locate_reply_item(100_005, 3, NFSPROC3_READ, &r), None);
        // An error status: no data.
        let bad = reply(
            |e| {
                ReadHead {
                    status: Nfsstat3::ERR_IO,
                    file_attributes: None,
                    count: 0,
                    eof: false,
                    data_len: 0,
                }
                .encode(e)
            },
            &[],
        );
        assert_eq!(locate_reply_item(NFS_PROGRAM, 3, NFSPROC3_READ, &bad), None);
        // A length word beyond the reply (peer or server bug): refused, no panic.
        let short = read_reply(Nfsstat3::OK, &data, 1 << 20);
        assert_eq!(
            locate_reply_item(NFS_PROGRAM, 3, NFSPROC3_READ, &short),
            None
        );
        let huge = read_reply(Nfsstat3::OK, &data, u32::MAX);
        assert_eq!(
            locate_reply_item(NFS_PROGRAM, 3, NFSPROC3_READ, &huge),
            None
        );
        // A truncated reply.
        let cut = Chain::from_bytes(&r.to_vec().unwrap()[..30]).unwrap();
        assert_eq!(locate_reply_item(NFS_PROGRAM, 3, NFSPROC3_READ, &cut), None);
    }
}
