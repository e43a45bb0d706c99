//! Reply provisioning from the call (the Upper-Layer Binding's part, RFC 8267): what
//! `clnt_rdma` offers for a call's reply. [`provision`] is what a client the face dials
//! itself (`krpc_clnt_dial`, `clnt_rdma_connect`, `clnt_rdma_reconnect_create`) uses: the
//! RFC 8267 table of nfs-proto ([`reply_hint`]) for the programs it knows; [`nfs_read_hook`]
//! (an NFSv3 READ's data by write chunk, every other reply inline) is what the tests'
//! clients use.

use alloc::sync::Arc;

use krpc_rdma::transport::{DdpReply, ReplySpec};
use mbuf::{Chain, PageProvider};
use nfs_proto::ddp::{reply_hint, ReplyHint};
use nfs_proto::nfs3::{locate_read_data, ReadArgs, NFSPROC3_READ, NFS_PROGRAM};
use onc_rpc::rpc::CallHeader;
use onc_rpc::xdr::Decoder;

/// How many bytes of a call [`peek_call`] decodes its header from.
const PEEK: usize = 512;

/// A reply every peer may send inline without negotiation (RFC 8166 §3.3.2: 1024-byte
/// inline size) less the smallest RPC-over-RDMA header: what a reply that RFC 8267 says is
/// bounded and small ([`ReplyHint::Inline`]) is provisioned for.
const SMALL: usize = 1024 - 28;
/// What a READ's reply holds besides its data (status, attributes, count, eof, length).
const READ_SLACK: usize = 256;

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

/// The reply provisioning of a call by the RFC 8267 table ([`reply_hint`]): an NFSv3 READ's
/// data in a write chunk of its `count` (pages of `pages`); a reply the table bounds small
/// inline (1024-byte inline size, RFC 8166 §3.3.2); anything else (a reply the table says
/// needs a reply chunk, an NFSv2 READ or a READLINK, a program it does not know, NFSv4's
/// COMPOUND) up to `max_reply` bytes: inline if that fits, else a reply chunk.
pub fn provision(call: &Chain, pages: &Arc<dyn PageProvider>, max_reply: usize) -> ReplySpec {
    peek_call(call, |h, d| match reply_hint(h.prog, h.vers, h.proc_)? {
        ReplyHint::Inline => Some(ReplySpec::inline(SMALL)),
        ReplyHint::WriteChunk if (h.prog, h.vers, h.proc_) == (NFS_PROGRAM, 3, NFSPROC3_READ) => {
            let a = ReadArgs::decode(d).ok()?;
            read_chunk(pages, a.count as usize, READ_SLACK)
        }
        _ => None,
    })
    .unwrap_or_else(|| ReplySpec::inline(max_reply))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mbuf::HeapPageArena;
    use onc_rpc::xdr::Encoder;

    fn call(prog: u32, vers: u32, proc_: u32, args: &[u32]) -> Chain {
        let mut e = Encoder::new();
        for w in [7, 0, 2, prog, vers, proc_, 0, 0, 0, 0] {
            e.u32(w);
        }
        for &w in args {
            e.u32(w);
        }
        Chain::from_bytes(&e.finish().unwrap_or_default()).unwrap_or_else(|_| panic!())
    }

    /// READ: a write chunk of its count; GETATTR: small and inline; READDIR: up to the
    /// client's bound; an unknown program: up to the bound too.
    #[test]
    fn provision_follows_the_rfc_8267_table() {
        let pages: Arc<dyn PageProvider> =
            Arc::new(HeapPageArena::new(64).unwrap_or_else(|_| panic!()));
        // READ3args: fh<8>, offset (u64), count.
        let read = call(NFS_PROGRAM, 3, NFSPROC3_READ, &[8, 1, 2, 0, 0, 9000]);
        let s = provision(&read, &pages, 1 << 20);
        assert_eq!(s.max_reply, 9000 + READ_SLACK);
        assert_eq!(s.ddp.as_ref().map(|d| d.pages.len()), Some(9000));
        let getattr = call(NFS_PROGRAM, 3, 1, &[8, 1, 2]);
        let s = provision(&getattr, &pages, 1 << 20);
        assert_eq!((s.max_reply, s.ddp.is_none()), (SMALL, true));
        let readdir = call(NFS_PROGRAM, 3, 16, &[8, 1, 2]);
        assert_eq!(provision(&readdir, &pages, 70_000).max_reply, 70_000);
        let other = call(400_000, 1, 1, &[]);
        assert_eq!(provision(&other, &pages, 3000).max_reply, 3000);
        // No RPC header at all: the bound.
        let junk = Chain::from_bytes(&[1, 2, 3]).unwrap_or_else(|_| panic!());
        assert_eq!(provision(&junk, &pages, 3000).max_reply, 3000);
    }
}
