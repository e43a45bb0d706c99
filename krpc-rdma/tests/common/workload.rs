//! The mixed workload of the fault and soak tests: calls of four shapes (small, WRITE-like
//! with a read chunk, READ-like with a write chunk, Long Call and Long Reply), the server's
//! replies, and the checks of what came back.

use std::sync::Arc;

use krpc_rdma::transport::{DdpReply, ReplySpec};
use mbuf::{Chain, Mbuf, PageProvider};

use super::{pages_with, pattern, reply_for, xdr_call};

/// The DDP data item of a READ-like reply: [xid][status][len][data][pad][tail].
pub fn locate_read(c: &Chain) -> Option<usize> {
    (c.len() >= 12).then_some(12)
}

/// What the server answers, by the call's first body word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Small call, small reply.
    Small,
    /// NFS-WRITE-like: data in a read chunk.
    Write(usize),
    /// NFS-READ-like: data back through a write chunk into the caller's pages.
    Read(usize),
    /// Long Call and Long Reply.
    Long,
}

pub fn kind_of(call: &Chain) -> Kind {
    let mut w = [0u8; 8];
    call.copydata(4, &mut w).unwrap();
    let n = u32::from_be_bytes([w[4], w[5], w[6], w[7]]) as usize;
    match w[0] {
        1 => Kind::Small,
        2 => Kind::Write(n),
        3 => Kind::Read(n),
        _ => Kind::Long,
    }
}

/// The call chain and reply spec of a call of `kind`.
pub fn make_call(pa: &Arc<dyn PageProvider>, xid: u32, kind: Kind) -> (Chain, ReplySpec) {
    let tag = |t: u8, n: usize| {
        let mut v = vec![t, 0, 0, 0];
        v.extend_from_slice(&(n as u32).to_be_bytes());
        v
    };
    match kind {
        Kind::Small => (xdr_call(xid, &tag(1, 0)), ReplySpec::inline(256)),
        Kind::Write(n) => {
            let mut c = xdr_call(xid, &tag(2, n));
            c.append(&(n as u32).to_be_bytes()).unwrap();
            c.append_mbuf(Mbuf::ddp_marker()).unwrap();
            c.cat(pages_with(pa, &pattern(n, 4))).unwrap();
            let mut tail = vec![0u8; (4 - n % 4) % 4];
            tail.extend_from_slice(&[0xbb; 8]);
            c.append(&tail).unwrap();
            (c, ReplySpec::inline(256))
        }
        Kind::Read(n) => (
            xdr_call(xid, &tag(3, n)),
            ReplySpec {
                max_reply: n + 64,
                ddp: Some(DdpReply {
                    pages: Chain::alloc_pages(pa, n).unwrap(),
                    locate: locate_read,
                }),
            },
        ),
        Kind::Long => {
            let mut body = tag(4, 0);
            body.extend(pattern(6000, 9));
            (xdr_call(xid, &body), ReplySpec::inline(20_000))
        }
    }
}

/// The server's reply to a call of `kind`.
pub fn make_reply(pb: &Arc<dyn PageProvider>, xid: u32, kind: Kind) -> Chain {
    match kind {
        Kind::Small | Kind::Write(_) => reply_for(xid, b"ok.."),
        Kind::Read(n) => {
            let mut rep = reply_for(xid, &0u32.to_be_bytes());
            rep.append(&(n as u32).to_be_bytes()).unwrap();
            rep.append_mbuf(Mbuf::ddp_marker()).unwrap();
            rep.cat(pages_with(pb, &pattern(n, 3))).unwrap();
            let mut tail = vec![0u8; (4 - n % 4) % 4];
            tail.extend_from_slice(&[0xcc; 4]);
            rep.append(&tail).unwrap();
            rep
        }
        Kind::Long => reply_for(xid, &pattern(12_000, 5)),
    }
}

/// The reply `kind` must bring back for `xid`.
pub fn expected(xid: u32, kind: Kind) -> Vec<u8> {
    match kind {
        Kind::Small | Kind::Write(_) => reply_for(xid, b"ok..").to_vec().unwrap(),
        Kind::Read(n) => {
            let mut v = reply_for(xid, &0u32.to_be_bytes()).to_vec().unwrap();
            v.extend_from_slice(&(n as u32).to_be_bytes());
            v.extend(pattern(n, 3));
            v.extend(vec![0u8; (4 - n % 4) % 4]);
            v.extend_from_slice(&[0xcc; 4]);
            v
        }
        Kind::Long => reply_for(xid, &pattern(12_000, 5)).to_vec().unwrap(),
    }
}
