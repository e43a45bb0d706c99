//! The mbuf bridge over rxe: NFS-shaped messages whose data is in (emulated) FreeBSD M_EXTPG
//! mbufs go through the bridge into the core's Requester / out of its Responder, over the
//! shim's `OfedQp` and the C wrappers on rxe0, and back into M_EXTPG mbufs.

use std::cell::RefCell;

use krpc_face::mbuf_bridge::{MbufBridge, MbufChain};
use krpc_rdma::transport::{ReplySpec, TransportConfig};
use krpc_rdma_scenarios::Pair;
use mbuf::Chain;
use nfs_proto::nfs3::{NFSPROC3_READ, NFSPROC3_WRITE, NFS_PROGRAM};
use ofed_testkit::emu_mbuf::{self, M_EXTPG};
use onc_rpc::rpc::{Auth, CallHeader, ReplyHeader};
use onc_rpc::xdr::Encoder;

use super::clnt::{
    assert_no_mbuf_left, encode_read_args, mbufs_live, pattern, read_results_chain, read_spec,
    write_args_behind, N,
};
use super::{emu, emu_stats, KernelPages};

fn call_head(xid: u32, proc_: u32) -> Encoder {
    let mut e = Encoder::new();
    CallHeader {
        xid,
        prog: NFS_PROGRAM,
        vers: 3,
        proc_,
        cred: Auth::None,
        verf: Auth::None,
    }
    .encode(&mut e);
    e
}

fn chain_pages(c: &Chain) -> Vec<u64> {
    c.mbufs()
        .filter_map(|m| m.page_info().map(|p| p.pages.to_vec()))
        .flatten()
        .collect()
}

/// Offset of the first zero-length M_PROTO1 mbuf and whether an M_EXTPG mbuf follows it.
fn marker(fb: &MbufChain) -> Option<(usize, bool)> {
    let inf = emu_mbuf::info(fb);
    let (i, at) = emu_mbuf::first_marker(&inf)?;
    Some((at, inf.get(i + 1).is_some_and(|n| n.flags & M_EXTPG != 0)))
}

/// NFSv3 WRITE of 1 MiB + 3 bytes: the client's call is an emulated FreeBSD chain (XDR in
/// small mbufs, the M_PROTO1 marker, the data in 5-page M_EXTPG mbufs, the pad); the bridge
/// makes it a Chain whose page mbufs are the very M_EXTPG pages, the Requester sends it with
/// the data as a read chunk, the Responder's RDMA Read fills its pages, and the handed-up call
/// goes through the bridge into M_EXTPG mbufs over exactly those pages, bytes exact. The
/// client's chain is freed (NFS's free routine: unwire and free unconditionally) as soon as
/// the reply is handed up, as `cl_call` would: no page may still be wired by the transport
/// then.
#[test]
fn nfs_write_extpg_out_as_a_read_chunk_and_up_as_extpg() {
    let Some(mut fx) = emu() else { return };
    let kp = KernelPages::new();
    let before_mbufs = mbufs_live();
    let mut p = Pair::with(&mut fx, TransportConfig::default()).unwrap();
    let data = pattern(N, 31, 12, 11);
    let (fb, head_len) = write_args_behind(&kp, call_head(0x5157, NFSPROC3_WRITE), 3, &data);
    let wire = emu_mbuf::bytes(&fb);
    let client_pages = emu_mbuf::extpg_pages(&fb);
    let mut br = MbufBridge::new(64, 300).unwrap();
    // SAFETY: `fb` is live and unchanged during the call.
    let call = unsafe { br.chain_from_mbufs(fb.as_ptr(), &p.l.pa) }.unwrap();
    assert_eq!(
        chain_pages(&call),
        client_pages,
        "client: page mbufs over the M_EXTPG pages"
    );
    assert_eq!(call.ddp_regions().count(), 1);

    let seen = RefCell::new(None);
    let mut sbr = MbufBridge::default();
    let reply = p
        .rpc(call, ReplySpec::inline(256), &mut |c| {
            let read_pages = chain_pages(&c.call);
            let copy = c.call.copym(0, c.call.len()).unwrap();
            let sfb = sbr
                .mbufs_from_chain(copy, true, true)
                .map_err(|(e, _)| e)
                .unwrap()
                .unwrap();
            let got = emu_mbuf::bytes(&sfb);
            let inf = emu_mbuf::info(&sfb);
            let extpg: Vec<_> = inf.iter().filter(|x| x.flags & M_EXTPG != 0).collect();
            *seen.borrow_mut() = Some((
                read_pages,
                emu_mbuf::extpg_pages(&sfb),
                got,
                marker(&sfb),
                extpg.len(),
                extpg.iter().all(|x| x.is_bridge == 1 && x.npgs <= 5),
            ));
            let mut r = Encoder::new();
            ReplyHeader::success(c.xid).encode(&mut r);
            r.u32(0); // NFS3_OK (the rest of WRITE3res does not matter to the transport)
            Chain::from_bytes(&r.finish().unwrap())
                .map_err(|e| krpc_rdma_scenarios::check::fail("reply", "built", e))
        })
        .unwrap();
    drop(reply);
    // What cl_call would do once the Requester reported the reply: free the caller's NFS
    // chain (its free routine unwires and frees every page outright). The Requester must
    // hold no wiring on those pages by now (the emulation panics on freeing a wired page).
    let freed = emu_mbuf::mbuf_stats().nfs_pages_freed;
    drop(fb);
    assert_eq!(
        emu_mbuf::mbuf_stats().nfs_pages_freed - freed,
        client_pages.len() as u64,
        "the client's pages freed right after the reply"
    );
    let (read_pages, up_pages, got, mark, nextpg, bridge_owned) = seen.into_inner().unwrap();
    println!(
        "WRITE {N}: server M_EXTPG mbufs {nextpg}, pages {}, marker {mark:?}; client pages {}",
        up_pages.len(),
        client_pages.len()
    );
    assert_eq!(got, wire, "server: the call's bytes, data in M_EXTPG mbufs");
    assert!(
        !read_pages.is_empty(),
        "the data arrived in pages (read chunk)"
    );
    assert_eq!(
        up_pages, read_pages,
        "M_EXTPG over the very pages the RDMA Read filled"
    );
    assert!(
        bridge_owned,
        "the bridge's free routine, at most 5 pages each"
    );
    assert_eq!(mark, Some((head_len, true)), "marker in front of the data");
    assert!(read_pages.iter().all(|pa| !client_pages.contains(pa)));
    p.check_clean("after the WRITE").unwrap();
    p.finish().unwrap();
    assert_no_mbuf_left(before_mbufs);
    assert_eq!(emu_stats().refused_double_inv, 0);
}

/// NFSv3 READ of 1 MiB + 3 bytes: the server's reply is an emulated FreeBSD chain with the
/// data in M_EXTPG mbufs; through the bridge it goes out by the Responder as RDMA Writes into
/// the client's write chunk; the reply the Requester hands up goes through the bridge into
/// M_EXTPG mbufs over the client's own pages, bytes exact.
#[test]
fn nfs_read_reply_extpg_out_as_a_write_chunk_and_back_as_extpg() {
    let Some(mut fx) = emu() else { return };
    let kp = KernelPages::new();
    let before_mbufs = mbufs_live();
    let mut p = Pair::with(&mut fx, TransportConfig::default()).unwrap();
    let data = pattern(N, 31, 12, 12);
    let mut e = call_head(0x5158, NFSPROC3_READ);
    encode_read_args(&mut e, 4, N);
    let call = Chain::from_bytes(&e.finish().unwrap()).unwrap();
    let sink = Chain::alloc_pages(&p.l.pa, N.next_multiple_of(4)).unwrap();
    let sink_pages = chain_pages(&sink);
    let spec = read_spec(sink, N, 512);
    let server_fbs: RefCell<Vec<MbufChain>> = RefCell::new(Vec::new());
    let wire = RefCell::new(Vec::new());
    let server_pages = RefCell::new(Vec::new());
    let head_len = RefCell::new(0usize);
    let mut sbr = MbufBridge::default();
    let pb = p.l.pb.clone();
    let reply = p
        .rpc(call, spec, &mut |c| {
            let mut r = Encoder::new();
            ReplyHeader::success(c.xid).encode(&mut r);
            let (fb, hl) = read_results_chain(&kp, r, &data);
            *head_len.borrow_mut() = hl;
            *wire.borrow_mut() = emu_mbuf::bytes(&fb);
            *server_pages.borrow_mut() = emu_mbuf::extpg_pages(&fb);
            // SAFETY: `fb` is live and unchanged during the call.
            let rc = unsafe { sbr.chain_from_mbufs(fb.as_ptr(), &pb) }.unwrap();
            // knfsd's chain lives until the transport is done with its pages.
            server_fbs.borrow_mut().push(fb);
            Ok(rc)
        })
        .unwrap();
    let reply_pages = chain_pages(&reply);
    let mut br = MbufBridge::default();
    let fb = br
        .mbufs_from_chain(reply, true, true)
        .map_err(|(e, _)| e)
        .unwrap()
        .unwrap();
    let got = emu_mbuf::bytes(&fb);
    let up = emu_mbuf::extpg_pages(&fb);
    println!(
        "READ {N}: client M_EXTPG pages {}, marker {:?}, write-chunk pages {}",
        up.len(),
        marker(&fb),
        sink_pages.len()
    );
    assert_eq!(got, *wire.borrow(), "client: the reply's bytes");
    assert!(!up.is_empty(), "the data came back in M_EXTPG mbufs");
    assert_eq!(up, reply_pages, "M_EXTPG over the reply's page mbufs");
    assert!(
        up.iter().all(|pa| sink_pages.contains(pa)),
        "... which are the client's own write-chunk pages (RDMA Write landed there)"
    );
    assert!(up.iter().all(|pa| !server_pages.borrow().contains(pa)));
    assert_eq!(
        marker(&fb),
        Some((*head_len.borrow(), true)),
        "client: the marker in front of the data"
    );
    drop(fb);
    p.check_clean("after the READ").unwrap();
    let freed = emu_mbuf::mbuf_stats().nfs_pages_freed;
    server_fbs.borrow_mut().clear();
    assert_eq!(
        emu_mbuf::mbuf_stats().nfs_pages_freed - freed,
        server_pages.borrow().len() as u64,
        "knfsd's pages freed by its own free routine, none still wired"
    );
    p.finish().unwrap();
    assert_no_mbuf_left(before_mbufs);
}
