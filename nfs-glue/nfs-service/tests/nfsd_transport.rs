//! The NFSv3 service behind our Responder, our Requester as the client, over the software RC
//! provider (the soft rig of the cross-crate tests): the chains the transport really hands up
//! and takes back.
//!
//! * WRITE of 1 MiB + 3 with the data in a read chunk: the Responder RDMA-Reads it into its
//!   pages, the dispatcher hands those very pages to the backend (every piece in the
//!   server's arena), the transport copied no payload byte.
//! * READ of 1 MiB + 3 into the client's write chunk: the backend's pages leave by RDMA
//!   Write, the client finds the data with `locate_read_data`, no payload byte copied.
//! * READDIRPLUS of 5,000 entries with a 64 KiB `maxcount`: replies beyond the inline
//!   threshold go by reply chunk; every name exactly once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use std::collections::BTreeMap;

use common::memfs::{fh, MemFs, SeenWrite, ROOT};
use common::{nfs_header, root};
use krpc_rdma::transport::{DdpReply, ReplySpec, RequesterEvent};
use mbuf::Chain;
use nfs_proto::chain::ddp_call;
use nfs_proto::nfs3::*;
use nfs_service::nfsd::{Backend, Nfs3Config, Nfs3Service};
use onc_rpc::rpc::ReplyHeader;
use onc_rpc::xdr::Decoder;
use tests::rig::{pages_with, pattern, rig, Rig};

/// One call through the transport, served by `svc`; the client's reply.
fn call(r: &mut Rig, svc: &Nfs3Service<MemFs>, xid: u32, call: Chain, spec: ReplySpec) -> Chain {
    r.req.call(&mut r.qa, call, spec).unwrap();
    let out = r.run(&mut |inc| svc.dispatch(&inc.call).unwrap().reply);
    match out.into_iter().next() {
        Some(RequesterEvent::Reply { xid: x, reply }) if x == xid => reply,
        other => panic!("{other:?}"),
    }
}

/// The results after the RPC reply header (DDP data spliced in by the requester).
fn results(reply: &Chain) -> Vec<u8> {
    let b = reply.to_vec().unwrap();
    let mut d = Decoder::new(&b);
    assert!(ReplyHeader::decode(&mut d).unwrap().is_success());
    b[d.pos()..].to_vec()
}

#[test]
fn write_and_read_through_the_transport_without_a_copy() {
    let mut r = rig();
    let svc = Nfs3Service::new(MemFs::new(), r.pb.clone(), Nfs3Config::default());
    let root = root();
    let how = Createhow3::Unchecked(Sattr3::default());
    let file = svc.backend().create(&root, &fh(ROOT), b"f", &how).unwrap();
    let len = (1 << 20) + 3;
    let data = pattern(len, 5);

    let mut e = nfs_header(1, NFSPROC3_WRITE, 0);
    WriteHead {
        file: file.clone(),
        offset: 0,
        count: len as u32,
        stable: StableHow::FileSync,
    }
    .encode_head(&mut e, len as u32);
    let c = ddp_call(&e.finish().unwrap(), pages_with(&r.pa, &data), &[]).unwrap();
    let reply = call(&mut r, &svc, 1, c, ReplySpec::inline(512));
    let res = WriteRes::decode(&mut Decoder::new(&results(&reply))).unwrap();
    assert_eq!(res.ok().unwrap().count as usize, len);
    assert_eq!(svc.backend().contents(&file).unwrap(), data);
    // The backend was handed the server's own pages (arena B), where the RDMA Read put the
    // data: 257 page pieces, not a buffer.
    let Some(SeenWrite::Pages(pieces)) = svc.backend().last_write() else {
        panic!("not pages")
    };
    let b0 = r.arena_b.page_addr(0).unwrap();
    assert!(pieces.iter().all(|p| p.addr >= b0));
    assert_eq!(pieces.len(), len.div_ceil(4096));
    assert_eq!(r.req.counters().read_chunks, 1);

    let mut e = nfs_header(2, NFSPROC3_READ, 0);
    ReadArgs {
        file,
        offset: 0,
        count: len as u32,
    }
    .encode(&mut e);
    let spec = ReplySpec {
        max_reply: len + 512,
        ddp: Some(DdpReply {
            pages: Chain::alloc_pages(&r.pa, len).unwrap(),
            locate: locate_read_data,
        }),
    };
    let reply = call(
        &mut r,
        &svc,
        2,
        Chain::from_bytes(&e.finish().unwrap()).unwrap(),
        spec,
    );
    let b = results(&reply);
    let mut d = Decoder::new(&b);
    let h = ReadRes::decode_head(&mut d).unwrap();
    // The service's data limit is 1 MiB: the client gets 1 MiB, not eof.
    assert_eq!((h.status, h.count, h.eof), (Nfsstat3::OK, 1 << 20, false));
    assert_eq!(&b[d.pos()..d.pos() + (1 << 20)], &data[..1 << 20]);
    assert_eq!(r.req.counters().write_chunks, 1);
    assert_eq!(r.resp.counters().ddp_payload_copied_bytes, 0);
}

#[test]
fn readdirplus_of_5000_entries_by_reply_chunk() {
    let mut r = rig();
    let svc = Nfs3Service::new(MemFs::new(), r.pb.clone(), Nfs3Config::default());
    let root = root();
    let how = Createhow3::Unchecked(Sattr3::default());
    for i in 0..5000 {
        svc.backend()
            .create(&root, &fh(ROOT), format!("entry-{i:05}").as_bytes(), &how)
            .unwrap();
    }
    let maxcount = 65536u32;
    let (mut cookie, mut verf, mut xid) = (0u64, Cookieverf3::default(), 10u32);
    let mut seen = BTreeMap::new();
    loop {
        let mut e = nfs_header(xid, NFSPROC3_READDIRPLUS, 0);
        ReaddirplusArgs {
            dir: fh(ROOT),
            cookie,
            cookieverf: verf,
            dircount: maxcount / 8,
            maxcount,
        }
        .encode(&mut e);
        let c = Chain::from_bytes(&e.finish().unwrap()).unwrap();
        let reply = call(
            &mut r,
            &svc,
            xid,
            c,
            ReplySpec::inline(maxcount as usize + 512),
        );
        let res = ReaddirplusRes::decode(&mut Decoder::new(&results(&reply))).unwrap();
        let ok = res.ok().unwrap();
        for e in &ok.reply.entries {
            *seen.entry(e.name.0.clone()).or_insert(0) += 1;
            cookie = e.cookie;
        }
        verf = ok.cookieverf;
        xid += 1;
        if ok.reply.eof {
            break;
        }
    }
    assert_eq!(seen.len(), 5000);
    assert!(seen.values().all(|n| *n == 1));
    assert!(
        r.resp.counters().reply_chunks > 0,
        "no reply went by reply chunk"
    );
}
