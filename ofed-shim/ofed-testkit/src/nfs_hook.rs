//! What the face tests share (the host tests over rxe, `tests/emu_rxe`, and FreeBSD's
//! in-kernel face test, `selftest::face`): the reply provisioning of their NFSv3 clients
//! (RFC 8267, reduced to what the tests call: an NFSv3 READ's data lands in pages of its
//! `count`, a write chunk, the rest of its reply in a small inline buffer; every other reply
//! inline), and the malformed calls a server transport must answer itself.

use alloc::sync::Arc;

use krpc_rdma::transport::{DdpReply, ReplySpec};
use mbuf::{Chain, PageProvider};
use nfs_proto::nfs3::{locate_read_data, ReadArgs, NFSPROC3_READ, NFS_PROGRAM};
use onc_rpc::rpc::CallHeader;
use onc_rpc::xdr::Decoder;

/// How many bytes of a call [`peek_call`] decodes its header from.
const PEEK: usize = 512;

/// `f` of the RPC header of `call` (decoded from its first 512 bytes) and a decoder past it;
/// `None` when there is no such header.
pub fn peek_call<T>(
    call: &Chain,
    f: impl FnOnce(&CallHeader, &mut Decoder<'_>) -> Option<T>,
) -> Option<T> {
    let mut head = [0u8; PEEK];
    let n = call.len().min(PEEK);
    let head = head.get_mut(..n)?;
    call.copydata(0, head).ok()?;
    let mut d = Decoder::new(head);
    let h = CallHeader::decode(&mut d).ok()?;
    f(&h, &mut d)
}

/// A READ's reply provisioning: its `count` bytes of data land in `sink` (a write chunk),
/// `slack` bytes for the rest of the reply.
pub fn read_spec(sink: Chain, count: usize, slack: usize) -> ReplySpec {
    ReplySpec {
        max_reply: count + slack,
        ddp: Some(DdpReply {
            pages: sink,
            locate: locate_read_data,
        }),
    }
}

/// [`read_spec`] over new pages of `pages` for `count` bytes; `None` without pages.
pub fn read_chunk(pages: &Arc<dyn PageProvider>, count: usize, slack: usize) -> Option<ReplySpec> {
    let sink = Chain::alloc_pages(pages, count.next_multiple_of(4)).ok()?;
    Some(read_spec(sink, count, slack))
}

/// An NFSv3 READ's data in pages of its `count` (write chunk), the rest of its reply in 512
/// bytes; any other reply (or a READ without pages) inline in `inline` bytes.
pub fn nfs_read_hook(call: &Chain, pages: &Arc<dyn PageProvider>, inline: usize) -> ReplySpec {
    peek_call(call, |h, d| {
        if h.prog != NFS_PROGRAM || h.proc_ != NFSPROC3_READ {
            return None;
        }
        let a = ReadArgs::decode(d).ok()?;
        read_chunk(pages, a.count as usize, 512)
    })
    .unwrap_or_else(|| ReplySpec::inline(inline))
}

/// Malformed RPC calls (raw XDR words, as a Requester sends them) that a server transport
/// must answer itself, never hand up, with the reply words it must send (RFC 5531): the
/// host tests over rxe (`tests/emu_rxe/svc_ops.rs`) and FreeBSD's face test send them.
pub const MALFORMED_CALLS: [(&str, &[u32], &[u32]); 3] = [
    (
        "RPC version 3",
        &[0xa1, 0, 3, NFS_PROGRAM, 3, 0, 0, 0, 0, 0],
        // MSG_DENIED, RPC_MISMATCH, low 2, high 2.
        &[0xa1, 1, 1, 0, 2, 2],
    ),
    (
        "credential of 1000 bytes",
        &[0xa2, 0, 2, NFS_PROGRAM, 3, 0, 1, 1000, 0, 0],
        // MSG_DENIED, AUTH_ERROR, AUTH_BADCRED.
        &[0xa2, 1, 1, 1, 1],
    ),
    (
        "truncated header",
        &[0xa3, 0, 2, NFS_PROGRAM],
        // MSG_ACCEPTED, AUTH_NONE verifier, GARBAGE_ARGS.
        &[0xa3, 1, 0, 0, 0, 4],
    ),
];

/// A good NULL call after [`MALFORMED_CALLS`], and its reply (SUCCESS, no results).
pub const NULL_AFTER_MALFORMED: (&[u32], &[u32]) = (
    &[0xb0, 0, 2, NFS_PROGRAM, 3, 0, 0, 0, 0, 0],
    &[0xb0, 1, 0, 0, 0, 0],
);
