//! The stock-NFS mode of the krpc face over rxe (`svc_rdma_set_stock`, `clnt_rdma_set_stock`,
//! see `c/krpc_rdma_svc.h` and `c/krpc_rdma_clnt.h`): for FreeBSD 14.2's NFS, whose receive
//! paths only `mtod()` (no M_EXTPG data) and whose server puts no DDP marker in a READ reply.
//! The server side is `svc_ops`'s (a pool thread over `svc_rdma_create`; a READ with
//! `PLAIN_READ_XID` is answered in ordinary mbufs without a marker, as stock NFS builds it),
//! the client `clnt_rdma` with the tests' NFSv3 reply provisioning (a READ's data by write
//! chunk).

use std::sync::Arc;

use krpc_face::ffi::{FbsdClient, FbsdSvcpool, FbsdSvcxprt, KrpcClntStats, KrpcSvcStats};
use krpc_face::mbuf_bridge::MbufChain;
use krpc_rdma::transport::TransportConfig;
use krpc_rdma_scenarios::{Link, Pair};
use nfs_proto::nfs3::{NFSPROC3_READ, NFSPROC3_WRITE};
use ofed_testkit::emu_mbuf::{self, M_EXTPG, M_PROTO1};

use super::clnt::{
    assert_no_mbuf_left, assert_no_page_left, krpc_emu_clnt_control_u32, krpc_emu_clnt_destroy,
    mbufs_live, nfs_client, pattern, read_args, read_results, timed_call, write_args, N,
    RPC_SUCCESS, RPC_TIMEDOUT,
};
use super::svc_ops::{
    hook, krpc_emu_svc_control_arg, krpc_emu_svc_release, krpc_emu_svcpool_create,
    krpc_emu_svcpool_destroy, start_server, stats_until, Served, PLAIN_READ_XID, TIMEOUT_MS,
};
use super::{emu, emu_stats, KernelPages};

/// `SVCRDMA_SET_STOCK` / `SVCRDMA_GET_STOCK` of `c/krpc_rdma_svc.h`.
const SVCRDMA_SET_STOCK: u32 = 0x5244_0002;
const SVCRDMA_GET_STOCK: u32 = 0x5244_0003;
/// `CLSET_RDMA_STOCK` / `CLGET_RDMA_STOCK` of `c/krpc_rdma_clnt.h`.
const CLSET_RDMA_STOCK: u32 = 0x5244_0004;
const CLGET_RDMA_STOCK: u32 = 0x5244_0005;

extern "C" {
    fn clnt_rdma_get_stats(cl: *mut FbsdClient, out: *mut KrpcClntStats);
}

/// The transport's counters now.
fn svc_stats(xprt: *mut FbsdSvcxprt) -> KrpcSvcStats {
    stats_until(xprt, |_| true)
}

/// `SVC_CONTROL(xprt, SVCRDMA_SET_STOCK, &on)`, then `SVCRDMA_GET_STOCK` says so.
fn svc_set_stock(xprt: *mut FbsdSvcxprt, on: bool) {
    let mut v = u32::from(on);
    // SAFETY: live transport; `v` (an int) outlives the call.
    assert_eq!(
        unsafe { krpc_emu_svc_control_arg(xprt, SVCRDMA_SET_STOCK, &mut v) },
        1
    );
    let mut got = 7u32;
    // SAFETY: as above.
    assert_eq!(
        unsafe { krpc_emu_svc_control_arg(xprt, SVCRDMA_GET_STOCK, &mut got) },
        1
    );
    assert_eq!(got, u32::from(on), "SVCRDMA_GET_STOCK");
}

/// The M_EXTPG mbufs' bytes and whether a zero-length M_PROTO1 mbuf is in `m`.
fn extpg_and_marker(m: &MbufChain) -> (usize, bool) {
    let inf = emu_mbuf::info(m);
    let ext = inf
        .iter()
        .filter(|i| i.flags & M_EXTPG != 0)
        .map(|i| i.len as usize)
        .sum();
    let marker = inf.iter().any(|i| i.flags & M_PROTO1 != 0 && i.len == 0);
    (ext, marker)
}

/// One connection, `svc_rdma` against `clnt_rdma`, serving `read_data`; `f` runs the calls
/// (CLIENT, SVCXPRT, pages), then the pool thread's summary is checked by the caller. No
/// mbuf, page or registration left afterwards.
fn over_a_connection(
    read_data: Vec<u8>,
    f: impl FnOnce(*mut FbsdClient, *mut FbsdSvcxprt, &KernelPages),
) -> Option<Served> {
    let mut fx = emu()?;
    let pages_before = emu_stats().pages_in_use;
    let before_mbufs = mbufs_live();
    let kp = KernelPages::new();
    let read_data = Arc::new(read_data);
    // SAFETY: plain allocation; destroyed at the end.
    let pool: *mut FbsdSvcpool = unsafe { krpc_emu_svcpool_create() };
    assert!(!pool.is_null());
    let served = {
        let Pair { l, req, resp } = Pair::with(&mut fx, TransportConfig::default()).unwrap();
        let Link { a, b, pa, pb, .. } = l;
        let (xprt, stop, _, server) = start_server(b, resp.into_inner(), pb, pool, &read_data);
        let cl = nfs_client(a, req.into_inner(), pa, hook);
        f(cl, xprt, &kp);
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let served = server.join().unwrap();
        // SAFETY: no thread uses the transport any more; not used afterwards.
        unsafe { krpc_emu_svc_release(xprt) };
        // SAFETY: the CLIENT is not used after this.
        unsafe { krpc_emu_clnt_destroy(cl) };
        served
    };
    drop(fx);
    // SAFETY: every transport of the pool is gone.
    unsafe { krpc_emu_svcpool_destroy(pool) };
    assert_no_mbuf_left(before_mbufs);
    assert_no_page_left(pages_before);
    Some(served)
}

/// `svc_rdma` both ways on one connection. Stock mode off (the default): an NFSv3 WRITE of
/// 1 MiB + 3 with DDP reaches xp_recv as M_EXTPG mbufs behind the marker, and a READ whose
/// reply stock NFS builds (plain mbufs, no marker) cannot use the client's write chunk: too
/// large for inline and no reply chunk, it ends in ERR_CHUNK (the call fails, promptly).
/// Then `SVC_CONTROL(SVCRDMA_SET_STOCK)`: the same WRITE reaches xp_recv in ordinary mbufs,
/// byte for byte, no marker, the copy counted (its data length, one call); the same
/// marker-less READ reply has its data found by the NFS reply hook and RDMA-Written into the
/// write chunk (the client gets the bytes, in its write-chunk pages; one write chunk more,
/// no Long Reply; the copy into pages counted).
#[test]
fn stock_svc_off_then_on_over_rxe() {
    let write_data = pattern(N, 29, 9, 51);
    let read_data = pattern(N, 37, 13, 52);
    let want_read = read_results(&read_data);
    let mut wire = Vec::new();
    let served = over_a_connection(read_data, |cl, xprt, kp| {
        let s0 = svc_stats(xprt);
        assert_eq!(s0.stock_arg_copies + s0.stock_marked, 0);

        // Off: today's behaviour.
        let (args, _) = write_args(kp, 5, &write_data);
        wire = emu_mbuf::bytes(&args);
        let ((st, e, _, _), _) = timed_call(cl, 0x2000, NFSPROC3_WRITE, Some(&args), TIMEOUT_MS);
        assert_eq!(st, RPC_SUCCESS, "WRITE, stock off: {e:?}");
        let rargs = read_args(kp, 6, N);
        let ((st, _, _, rep), took) = timed_call(
            cl,
            PLAIN_READ_XID | 0x3000,
            NFSPROC3_READ,
            Some(&rargs),
            TIMEOUT_MS,
        );
        println!("marker-less READ reply, stock off: status {st} after {took:?}");
        assert!(
            st != RPC_SUCCESS && st != RPC_TIMEDOUT && rep.is_none(),
            "without the mode a marker-less READ reply cannot fill the write chunk"
        );
        let s1 = stats_until(xprt, |s| s.reply_failed > s0.reply_failed);
        println!("svc stats after stock off: {s1:?}");
        assert_eq!(s1.reply_failed, s0.reply_failed + 1, "ERR_CHUNK instead");
        assert_eq!(s1.write_chunks, s0.write_chunks, "no write chunk filled");
        assert_eq!(s1.long_replies, s0.long_replies);
        assert_eq!(
            (s1.stock_arg_copies, s1.stock_arg_bytes, s1.stock_marked),
            (0, 0, 0),
            "nothing copied or marked with the mode off"
        );

        // On.
        svc_set_stock(xprt, true);
        let ((st, e, _, _), _) = timed_call(cl, 0x2001, NFSPROC3_WRITE, Some(&args), TIMEOUT_MS);
        assert_eq!(st, RPC_SUCCESS, "WRITE, stock on: {e:?}");
        let s2 = svc_stats(xprt);
        assert_eq!(s2.stock_arg_copies, 1, "one call's pages copied");
        assert_eq!(
            s2.stock_arg_bytes, N as u64,
            "the copy is the WRITE's data, no more"
        );
        let ((st, e, _, rep), took) = timed_call(
            cl,
            PLAIN_READ_XID | 0x3001,
            NFSPROC3_READ,
            Some(&rargs),
            TIMEOUT_MS,
        );
        println!("marker-less READ reply, stock on: {took:?}");
        assert_eq!(st, RPC_SUCCESS, "READ, stock on: {e:?}");
        let rep = rep.expect("READ3res");
        assert!(emu_mbuf::bytes(&rep) == want_read, "READ results intact");
        let (ext, _) = extpg_and_marker(&rep);
        assert!(
            ext >= N,
            "the data reached the client in its write-chunk pages ({ext})"
        );
        let s3 = stats_until(xprt, |s| s.replies > s2.replies);
        println!("svc stats after stock on: {s3:?}");
        assert_eq!(s3.stock_marked, 1, "the hook found the READ data");
        assert_eq!(s3.write_chunks, s2.write_chunks + 1, "by RDMA Write");
        assert_eq!(s3.long_replies, s2.long_replies, "not a Long Reply");
        assert_eq!(
            (s3.stock_reply_copies, s3.stock_reply_bytes),
            (1, N as u64),
            "the plain-mbuf data copied into pages once"
        );
        assert_eq!(s3.reply_failed, s1.reply_failed);
        drop((args, rargs, rep));
    });
    let Some(served) = served else { return };
    let writes: Vec<_> = served
        .seen
        .iter()
        .filter(|s| s.proc_ == NFSPROC3_WRITE)
        .collect();
    assert_eq!(writes.len(), 2);
    let (off, on) = (writes[0], writes[1]);
    assert!(off.args == wire && on.args == wire, "the arguments intact");
    assert_eq!(off.extpg_bytes, N, "stock off: the data as M_EXTPG mbufs");
    assert!(off.marker_at.is_some(), "stock off: behind the marker");
    assert_eq!(
        (on.extpg, on.marker_at),
        (0, None),
        "stock on: ordinary mbufs only, no marker"
    );
}

/// `clnt_rdma` with `CLNT_CONTROL(CLSET_RDMA_STOCK)` against a server in its default mode:
/// the WRITE goes as before (its data behind the marker: M_EXTPG at the server's xp_recv),
/// the READ's results (the data by write chunk) are handed back in ordinary mbufs, byte for
/// byte, the copy counted; with the mode off again the next READ's data is M_EXTPG.
#[test]
fn stock_clnt_results_in_plain_mbufs_over_rxe() {
    let write_data = pattern(N, 23, 7, 61);
    let read_data = pattern(N, 41, 10, 62);
    let want_read = read_results(&read_data);
    let served = over_a_connection(read_data, |cl, _xprt, kp| {
        let set = |on: u32| {
            let mut v = on;
            // SAFETY: live CLIENT; an int.
            assert_eq!(
                unsafe { krpc_emu_clnt_control_u32(cl, CLSET_RDMA_STOCK, &mut v) },
                1
            );
            let mut got = 7u32;
            // SAFETY: as above.
            assert_eq!(
                unsafe { krpc_emu_clnt_control_u32(cl, CLGET_RDMA_STOCK, &mut got) },
                1
            );
            assert_eq!(got, on, "CLGET_RDMA_STOCK");
        };
        let stats = || {
            let mut s = KrpcClntStats::default();
            // SAFETY: live CLIENT, valid out-pointer.
            unsafe { clnt_rdma_get_stats(cl, &mut s) };
            s
        };
        set(1);
        let (args, _) = write_args(kp, 5, &write_data);
        let ((st, e, _, _), _) = timed_call(cl, 0x4000, NFSPROC3_WRITE, Some(&args), TIMEOUT_MS);
        assert_eq!(st, RPC_SUCCESS, "WRITE: {e:?}");
        assert_eq!(stats(), KrpcClntStats::default(), "WRITE3res has no pages");
        let rargs = read_args(kp, 6, N);
        let ((st, e, _, rep), _) = timed_call(cl, 0x4001, NFSPROC3_READ, Some(&rargs), TIMEOUT_MS);
        assert_eq!(st, RPC_SUCCESS, "READ: {e:?}");
        let rep = rep.expect("READ3res");
        assert!(emu_mbuf::bytes(&rep) == want_read, "READ results intact");
        assert_eq!(
            extpg_and_marker(&rep),
            (0, false),
            "stock on: ordinary mbufs only, no marker"
        );
        let s = stats();
        assert_eq!((s.stock_copies, s.stock_bytes), (1, N as u64));
        drop(rep);

        set(0);
        let ((st, e, _, rep), _) = timed_call(cl, 0x4002, NFSPROC3_READ, Some(&rargs), TIMEOUT_MS);
        assert_eq!(st, RPC_SUCCESS, "READ, stock off: {e:?}");
        let rep = rep.expect("READ3res");
        assert!(emu_mbuf::bytes(&rep) == want_read);
        assert!(
            extpg_and_marker(&rep).0 >= N,
            "stock off: the data as M_EXTPG"
        );
        assert_eq!(stats().stock_copies, 1, "nothing more copied");
        drop((args, rargs, rep));
    });
    let Some(served) = served else { return };
    let w = served
        .seen
        .iter()
        .find(|s| s.proc_ == NFSPROC3_WRITE)
        .expect("the WRITE reached xp_recv");
    assert_eq!(
        w.extpg_bytes, N,
        "the client's stock mode sends calls as before (read chunk, M_EXTPG at the server)"
    );
    assert_eq!(served.replies_ok, 3);
}
