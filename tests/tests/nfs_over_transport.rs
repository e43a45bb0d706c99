//! nfs-proto and the transport together, both ends ours, over the software RC provider:
//! Macklem's chain layout goes in at the client, comes out at the server as NFS consumes it,
//! and the server-side helpers find the data without copying.
//!
//! * NFSv3 WRITE: the client builds [RPC header + WRITE3args head][DDP marker][page mbufs]
//!   [pad] with `nfs_proto::chain::ddp_call`; the requester sends the pages as a read chunk;
//!   the responder RDMA-Reads them into fresh pages and hands up [XDR][marker][pages][pad];
//!   the server decodes the head (`WriteArgs::decode_head`), finds the data by the marker
//!   (`ddp_data`, checked against the length word) and takes it as page pieces
//!   (`write_data_iovecs`, what `VOP_WRITE` gets) — byte-exact, no copy.
//! * A Long Call (a WRITE whose head is too large for the inline threshold): the whole call
//!   arrives as pages without a marker; the decoder's position gives the data, and
//!   `write_data_iovecs` still finds it in pages.
//! * NFSv3 READ: the server answers with `ddp_reply` (data as page mbufs); the responder
//!   RDMA-Writes them into the client's write chunk, located by
//!   `nfs_proto::nfs3::locate_read_data`; the client's reply holds the data in its own pages.
#![allow(clippy::unwrap_used)]

use krpc_rdma::transport::{DdpReply, ReplySpec, RequesterEvent};
use mbuf::{Chain, Fragment, PageFragment};
use nfs_proto::chain::{ddp_call, ddp_data, ddp_reply, write_data_iovecs};
use nfs_proto::nfs3::{
    call_encoder, locate_read_data, NfsFh3, ReadArgs, ReadHead, ReadRes, StableHow, WriteArgs,
    WriteHead, NFSPROC3_READ, NFSPROC3_WRITE,
};
use onc_rpc::rpc::{Auth, AuthSys, CallHeader, ReplyHeader};
use onc_rpc::xdr::{Decoder, Encoder};
use tests::rig::{pages_with, pattern, rig, Rig};

fn header(xid: u32, proc_: u32) -> Encoder {
    call_encoder(xid, proc_, Auth::Sys(AuthSys::new(7, b"client", 0, 0, &[])))
}

fn fh() -> NfsFh3 {
    NfsFh3 {
        data: vec![0xfa; 32],
    }
}

/// One WRITE of `data` through the transport; the server's view: (head, data offset in the
/// handed-up call, the page pieces of the data, the bytes behind them, markers found).
fn write_through(
    r: &mut Rig,
    xid: u32,
    data: &[u8],
) -> (WriteHead, usize, Vec<PageFragment>, Vec<u8>, usize) {
    let n = data.len() as u32;
    let mut e = header(xid, NFSPROC3_WRITE);
    WriteHead {
        file: fh(),
        offset: 8192,
        count: n,
        stable: StableHow::FileSync,
    }
    .encode_head(&mut e, n);
    let head = e.finish().unwrap();
    let call = ddp_call(&head, pages_with(&r.pa, data), &[]).unwrap();
    r.req.call(&mut r.qa, call, ReplySpec::inline(512)).unwrap();
    let mut seen = None;
    let out = r.run(&mut |inc| {
        let c = &inc.call;
        let mut b = vec![0u8; c.len().min(1024)];
        c.copydata(0, &mut b).unwrap();
        let mut d = Decoder::new(&b);
        let h = CallHeader::decode(&mut d).unwrap();
        assert_eq!((h.xid, h.proc_), (xid, NFSPROC3_WRITE));
        let (wh, len) = WriteArgs::decode_head(&mut d).unwrap();
        let at = d.pos();
        let markers = ddp_data(c).unwrap();
        if let Some(m) = markers.first() {
            // The marker and the XDR agree on where the data is.
            assert_eq!((m.offset, m.len), (at, len as usize));
        }
        let pieces = write_data_iovecs(c, at, len as usize).unwrap();
        let bytes = pieces_bytes_of(c, &pieces);
        seen = Some((wh, at, pieces, bytes, markers.len()));
        let mut e = Encoder::new();
        ReplyHeader::success(xid).encode(&mut e);
        e.u32(0);
        Chain::from_bytes(&e.finish().unwrap()).unwrap()
    });
    assert!(matches!(out.as_slice(), [RequesterEvent::Reply { xid: x, .. }] if *x == xid));
    seen.unwrap()
}

/// The bytes behind `pieces`, read through the chain's own page mbufs (the server's arena).
fn pieces_bytes_of(c: &Chain, pieces: &[PageFragment]) -> Vec<u8> {
    // Every piece must be one of the chain's page fragments (same page, inside it).
    let frags: Vec<PageFragment> = c
        .fragments()
        .filter_map(|f| match f {
            Fragment::Page { addr, offset, len } => Some(PageFragment { addr, offset, len }),
            Fragment::Bytes(_) => None,
        })
        .collect();
    for p in pieces {
        assert!(
            frags.iter().any(|f| f.addr == p.addr
                && p.offset >= f.offset
                && p.offset + p.len <= f.offset + f.len),
            "piece {p:?} is not in the chain's pages"
        );
    }
    let total: usize = pieces.iter().map(|p| p.len).sum();
    let mut out = Vec::with_capacity(total);
    let mut off = 0;
    // Find each piece's position in the chain by walking fragments in order.
    let mut pos = 0usize;
    let mut positions = Vec::new();
    for f in c.fragments() {
        match f {
            Fragment::Page { addr, offset, len } => {
                positions.push((addr, offset, len, pos));
                pos += len;
            }
            Fragment::Bytes(b) => pos += b.len(),
        }
    }
    for p in pieces {
        let (_, foff, _, fpos) = positions
            .iter()
            .find(|(a, o, l, _)| *a == p.addr && p.offset >= *o && p.offset + p.len <= o + l)
            .copied()
            .unwrap();
        let mut b = vec![0u8; p.len];
        c.copydata(fpos + (p.offset - foff), &mut b).unwrap();
        out.extend_from_slice(&b);
        off += p.len;
    }
    assert_eq!(off, total);
    out
}

#[test]
fn nfs_write_data_reaches_the_server_as_pages_without_a_copy() {
    let mut r = rig();
    for (i, len) in [4096usize, 4097, 65536 + 3, (1 << 20) + 3]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, i as u8 + 1);
        let copied_before = r.resp.counters().ddp_payload_copied_bytes;
        let (wh, at, pieces, bytes, markers) = write_through(&mut r, 100 + i as u32, &data);
        assert_eq!(wh.count as usize, len);
        assert_eq!(wh.offset, 8192);
        assert_eq!(markers, 1, "the data came after a DDP marker");
        assert!(at % 4 == 0);
        assert_eq!(pieces.iter().map(|p| p.len).sum::<usize>(), len);
        assert_eq!(bytes, data, "{len} bytes");
        assert_eq!(
            r.resp.counters().ddp_payload_copied_bytes,
            copied_before,
            "the transport copied DDP payload"
        );
    }
    assert!(r.req.counters().read_chunks >= 4);
}

#[test]
fn long_call_write_data_is_found_by_the_xdr_offset() {
    // Trailing XDR of 1200 bytes after the data (an NFSv3 WRITE has none; NFSv4 COMPOUNDs
    // do): the reduced message exceeds the 1024-byte inline threshold, so the call goes as a
    // Long Call (RDMA_NOMSG, position-zero read chunk) and is handed up as pages with no
    // marker. The server then finds the data by the XDR decoder's offset.
    let mut r = rig();
    let data = pattern(10_000, 3);
    let n = data.len() as u32;
    let mut e = header(7, NFSPROC3_WRITE);
    WriteHead {
        file: fh(),
        offset: 0,
        count: n,
        stable: StableHow::Unstable,
    }
    .encode_head(&mut e, n);
    let head = e.finish().unwrap();
    let tail = vec![0x77u8; 1200];
    let call = ddp_call(&head, pages_with(&r.pa, &data), &tail).unwrap();
    r.req.call(&mut r.qa, call, ReplySpec::inline(512)).unwrap();
    let mut got = None;
    let out = r.run(&mut |inc| {
        let c = &inc.call;
        let mut b = vec![0u8; 1024.min(c.len())];
        c.copydata(0, &mut b).unwrap();
        let mut d = Decoder::new(&b);
        CallHeader::decode(&mut d).unwrap();
        let (_, len) = WriteArgs::decode_head(&mut d).unwrap();
        let at = d.pos();
        let markers = ddp_data(c).unwrap().len();
        let pieces = write_data_iovecs(c, at, len as usize).unwrap();
        let mut t = vec![0u8; 1200];
        c.copydata(c.len() - 1200, &mut t).unwrap();
        got = Some((markers, pieces_bytes_of(c, &pieces), t));
        let mut e = Encoder::new();
        ReplyHeader::success(7).encode(&mut e);
        e.u32(0);
        Chain::from_bytes(&e.finish().unwrap()).unwrap()
    });
    assert!(matches!(out.as_slice(), [RequesterEvent::Reply { .. }]));
    assert_eq!(r.req.counters().long_calls, 1);
    let (markers, bytes, t) = got.unwrap();
    assert_eq!(markers, 0, "a Long Call is handed up without a marker");
    assert_eq!(bytes, data);
    assert_eq!(t, tail);
}

#[test]
fn nfs_read_data_lands_in_the_clients_write_chunk() {
    let mut r = rig();
    for (i, len) in [4096usize, 5000, (1 << 20) + 3].into_iter().enumerate() {
        let xid = 500 + i as u32;
        let data = pattern(len, 40 + i as u8);
        let mut e = header(xid, NFSPROC3_READ);
        ReadArgs {
            file: fh(),
            offset: 0,
            count: len as u32,
        }
        .encode(&mut e);
        let call = Chain::from_bytes(&e.finish().unwrap()).unwrap();
        let pages = Chain::alloc_pages(&r.pa, len).unwrap();
        let spec = ReplySpec {
            max_reply: len + 256,
            ddp: Some(DdpReply {
                pages,
                locate: locate_read_data,
            }),
        };
        r.req.call(&mut r.qa, call, spec).unwrap();
        let pb = r.pb.clone();
        let out = r.run(&mut |inc| {
            let mut b = vec![0u8; inc.call.len()];
            inc.call.copydata(0, &mut b).unwrap();
            let mut d = Decoder::new(&b);
            CallHeader::decode(&mut d).unwrap();
            let a = ReadArgs::decode(&mut d).unwrap();
            let mut e = Encoder::new();
            ReplyHeader::success(inc.xid).encode(&mut e);
            ReadHead {
                status: nfs_proto::nfs3::Nfsstat3::OK,
                file_attributes: None,
                count: a.count,
                eof: true,
                data_len: a.count,
            }
            .encode(&mut e);
            ddp_reply(&e.finish().unwrap(), pages_with(&pb, &data), &[]).unwrap()
        });
        let reply = match out.as_slice() {
            [RequesterEvent::Reply { xid: x, reply }] if *x == xid => reply,
            other => panic!("{other:?}"),
        };
        let mut b = vec![0u8; reply.len()];
        reply.copydata(0, &mut b).unwrap();
        let mut d = Decoder::new(&b);
        ReplyHeader::decode(&mut d).unwrap();
        let h = ReadRes::decode_head(&mut d).unwrap();
        assert_eq!(h.data_len as usize, len);
        assert_eq!(&b[d.pos()..d.pos() + len], &data[..]);
        // The data sits in the client's own pages (the write chunk), after a marker.
        let regions = ddp_data(reply).unwrap();
        assert_eq!(regions.len(), 1);
        assert_eq!(regions[0].offset, d.pos());
        let pieces = write_data_iovecs(reply, d.pos(), len).unwrap();
        assert!(pieces
            .iter()
            .all(|p| r.arena_a.page_addr(0).unwrap() <= p.addr));
    }
    assert_eq!(r.req.counters().write_chunks, 3);
    assert_eq!(r.resp.counters().ddp_payload_copied_bytes, 0);
}
