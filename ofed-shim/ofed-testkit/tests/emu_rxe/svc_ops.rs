//! `svc_rdma` over rxe: an `SVCXPRT *` made by `svc_rdma_create` (`c/krpc_rdma_svc.c`,
//! compiled unchanged against the emulated `sys/rpc` of `emu/kpi_emu_svc.h`) is driven
//! through its `struct xp_ops` table by a pool thread of its own (`SVC_RECV` only while the
//! transport is active, as svc.c's threads; `SVC_REPLY` with the results as emulated
//! FreeBSD mbuf chains; `SVC_STAT`), against `clnt_rdma`'s `CLIENT` (both ops tables against
//! each other), and against the core's Requester for calls `clnt_rdma` cannot send (a
//! malformed RPC header).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use krpc_face::ffi::{FbsdClient, FbsdMbuf, FbsdSvcpool, FbsdSvcxprt, KrpcSvcStats};
use krpc_face::mbuf_bridge::MbufChain;
use krpc_face::svc::KrpcSvc;
use krpc_rdma::transport::{ReplySpec, Requester, RequesterEvent, TransportConfig};
use krpc_rdma_scenarios::{Link, Pair};
use mbuf::{Chain, PageProvider};
use nfs_proto::nfs3::{NFSPROC3_READ, NFSPROC3_WRITE, NFS_PROGRAM};
use ofed_shim::OfedQp;
use ofed_testkit::emu_mbuf::{self, Part, M_EXTPG};
use ofed_testkit::loopback;
use onc_rpc::xdr::Encoder;

use super::clnt::{
    assert_empty_results, assert_no_mbuf_left, assert_no_page_left, call, krpc_emu_clnt_destroy,
    mbufs_live, nfs_client, nfs_read_hook, pattern, read_args, read_results, read_results_chain,
    set_xid, timed_call, write_args, BAD_PROC, N, RPC_PROCUNAVAIL, RPC_SUCCESS, RPC_TIMEDOUT,
};
use super::{emu, emu_stats, CondSleep, KernelPages};

/// `struct krpc_emu_svc_msg` of `emu/kpi_emu_svc.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(super) struct SvcMsg {
    pub xid: u32,
    direction: u32,
    pub rpcvers: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    cred_flavor: u32,
    cred_len: u32,
    verf_flavor: u32,
    verf_len: u32,
    cred: [u8; 400],
}

extern "C" {
    pub(super) fn krpc_emu_svcpool_create() -> *mut FbsdSvcpool;
    pub(super) fn krpc_emu_svcpool_destroy(pool: *mut FbsdSvcpool);
    pub(super) fn krpc_emu_svc_wait_active(xprt: *mut FbsdSvcxprt, timeout_ms: u32) -> i32;
    fn krpc_emu_svc_activations(pool: *mut FbsdSvcpool, calls: *mut u64, activations: *mut u64);
    pub(super) fn krpc_emu_svc_recv(
        xprt: *mut FbsdSvcxprt,
        out: *mut SvcMsg,
        args: *mut *mut FbsdMbuf,
    ) -> i32;
    pub(super) fn krpc_emu_svc_reply(
        xprt: *mut FbsdSvcxprt,
        xid: u32,
        stat: u32,
        m: *mut FbsdMbuf,
        seq: *mut u32,
    ) -> i32;
    pub(super) fn krpc_emu_svc_stat(xprt: *mut FbsdSvcxprt) -> i32;
    fn krpc_emu_svc_ack(xprt: *mut FbsdSvcxprt, ack: *mut u32) -> i32;
    fn krpc_emu_svc_control(xprt: *mut FbsdSvcxprt, rq: u32) -> i32;
    pub(super) fn krpc_emu_svc_control_arg(xprt: *mut FbsdSvcxprt, rq: u32, inp: *mut u32) -> i32;
    fn svc_rdma_get_stats(xprt: *mut FbsdSvcxprt, out: *mut KrpcSvcStats);
    pub(super) fn krpc_emu_svc_release(xprt: *mut FbsdSvcxprt);
}

pub(super) const XPRT_DIED: i32 = 0;
const XPRT_IDLE: i32 = 2;
pub(super) const SUCCESS: u32 = 0;
const PROC_UNAVAIL: u32 = 3;
/// SVCGET_CONNMAXREC: meaningless for RDMA (refused, as the kernel's svc_vc_control).
const SVCGET_CONNMAXREC: u32 = 3;

/// A call with this XID is received and never answered (the destroy test).
const HOLD_XID: u32 = 0x7100_0000;
/// A call with this XID is received and not answered: the pool thread says so with
/// `SVC_CONTROL(xprt, SVCRDMA_DROP_CALL, &xid)` (what svc.c's paths that free a request
/// unanswered must do), twice: the second finds no such call.
const DROP_XID: u32 = 0x7200_0000;
/// A READ whose XID has this bit is answered as FreeBSD 14.2's NFS server builds a READ
/// reply: the whole READ3res in ordinary mbufs and clusters, no DDP marker (the stock-NFS
/// mode's tests, `stock.rs`).
pub(super) const PLAIN_READ_XID: u32 = 0x0800_0000;
/// `SVCRDMA_DROP_CALL` of `c/krpc_rdma_svc.h`.
pub(super) const SVCRDMA_DROP_CALL: u32 = 0x5244_0001;
pub(super) const TIMEOUT_MS: u32 = 15_000;

/// The client's reply provisioning: [`nfs_read_hook`], the other replies in 1024 bytes.
pub(super) fn hook(call: &Chain, pages: &Arc<dyn PageProvider>) -> ReplySpec {
    nfs_read_hook(call, pages, 1024)
}

/// What the pool thread saw of one call (through `xp_recv`).
#[derive(Debug)]
pub(super) struct Seen {
    pub(super) msg_xid: u32,
    pub(super) proc_: u32,
    rpcvers: u32,
    cred_flavor: u32,
    pub(super) args: Vec<u8>,
    /// M_EXTPG mbufs in the arguments, their bytes, whether the bridge built them all, and
    /// where the zero-length M_PROTO1 marker is.
    pub(super) extpg: usize,
    pub(super) extpg_bytes: usize,
    bridge_built: bool,
    pub(super) marker_at: Option<usize>,
}

/// The pool thread's summary.
#[derive(Debug, Default)]
pub(super) struct Served {
    pub(super) seen: Vec<Seen>,
    pub(super) replies_ok: usize,
    died: bool,
    /// SVCRDMA_DROP_CALL's answers for DROP_XID: the first, then the second.
    drops: Option<(i32, i32)>,
}

/// A pool thread: sleeps until the transport is active, then `SVC_RECV` until it returns
/// FALSE (and `SVC_STAT` as svc_getreq); answers NULL, WRITE (NFS3_OK), READ (the data as
/// knfsd builds it: M_EXTPG mbufs freed by `mb_free_mext_pgs`, handed to `xp_reply`, which
/// consumes them; with PLAIN_READ_XID as stock NFS builds it, in ordinary mbufs without a
/// marker), PROC_UNAVAIL for BAD_PROC; HOLD_XID is received and not answered.
fn pool_thread(
    xprt: usize,
    read_data: Arc<Vec<u8>>,
    stop: Arc<AtomicBool>,
    held: Arc<AtomicU32>,
) -> Served {
    let x = xprt as *mut FbsdSvcxprt;
    let kp = KernelPages::new();
    let mut out = Served::default();
    let t0 = Instant::now();
    while !stop.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(120) {
        // SAFETY: the transport lives until the main thread releases it after joining us.
        if unsafe { krpc_emu_svc_wait_active(x, 50) } == 0 {
            continue;
        }
        loop {
            // SAFETY: a zeroed plain-data struct.
            let mut msg: SvcMsg = unsafe { std::mem::zeroed() };
            let mut a: *mut FbsdMbuf = std::ptr::null_mut();
            // SAFETY: live transport, valid out-pointers.
            if unsafe { krpc_emu_svc_recv(x, &mut msg, &mut a) } == 0 {
                break;
            }
            // SAFETY: xp_recv's args chain is the caller's.
            let args = unsafe { MbufChain::from_raw(a) };
            let (bytes, inf) = args
                .as_ref()
                .map(|m| (emu_mbuf::bytes(m), emu_mbuf::info(m)))
                .unwrap_or_default();
            let ext: Vec<_> = inf.iter().filter(|i| i.flags & M_EXTPG != 0).collect();
            let marker_at = emu_mbuf::first_marker(&inf).map(|(_, at)| at);
            out.seen.push(Seen {
                msg_xid: msg.xid,
                proc_: msg.proc_,
                rpcvers: msg.rpcvers,
                cred_flavor: msg.cred_flavor,
                args: bytes,
                extpg: ext.len(),
                extpg_bytes: ext.iter().map(|i| i.len as usize).sum(),
                bridge_built: ext.iter().all(|i| i.is_bridge == 1),
                marker_at,
            });
            // As svc_getreq: the krpc frees the args once decoded.
            drop(args);
            let (stat, res) = match msg.proc_ {
                _ if msg.xid == HOLD_XID => {
                    held.store(msg.xid, Ordering::SeqCst);
                    continue;
                }
                _ if msg.xid == DROP_XID => {
                    let mut xid = msg.xid;
                    // SAFETY: live transport; `xid` outlives the calls.
                    let first = unsafe { krpc_emu_svc_control_arg(x, SVCRDMA_DROP_CALL, &mut xid) };
                    // SAFETY: as above.
                    let second =
                        unsafe { krpc_emu_svc_control_arg(x, SVCRDMA_DROP_CALL, &mut xid) };
                    out.drops = Some((first, second));
                    continue;
                }
                0 => (SUCCESS, None),
                NFSPROC3_WRITE => (
                    SUCCESS,
                    Some(emu_mbuf::nfs_chain(&kp, &[Part::Bytes(&[0, 0, 0, 0], 0)])),
                ),
                NFSPROC3_READ if msg.xid & PLAIN_READ_XID != 0 => (
                    SUCCESS,
                    Some(emu_mbuf::nfs_chain(
                        &kp,
                        &[Part::Bytes(&read_results(&read_data), 2048)],
                    )),
                ),
                NFSPROC3_READ => (
                    SUCCESS,
                    Some(read_results_chain(&kp, Encoder::new(), &read_data).0),
                ),
                _ => (PROC_UNAVAIL, None),
            };
            let mut seq = 0u32;
            let m = res.map_or(std::ptr::null_mut(), MbufChain::into_raw);
            // SAFETY: live transport; `m` is consumed by xp_reply.
            if unsafe { krpc_emu_svc_reply(x, msg.xid, stat, m, &mut seq) } == 1 {
                out.replies_ok += 1;
                assert_eq!(seq as usize, out.replies_ok, "*seq counts the replies");
            }
        }
        // SAFETY: live transport.
        if unsafe { krpc_emu_svc_stat(x) } == XPRT_DIED {
            out.died = true;
            break;
        }
    }
    out
}

/// The pool's (xprt_active calls, activations of an inactive transport).
fn activations(pool: *mut FbsdSvcpool) -> (u64, u64) {
    let (mut c, mut a) = (0u64, 0u64);
    // SAFETY: live pool, valid out-pointers.
    unsafe { krpc_emu_svc_activations(pool, &mut c, &mut a) };
    (c, a)
}

/// The server side of a connection: `KrpcSvc` → `svc_rdma_create` → a pool thread.
pub(super) fn start_server(
    b: OfedQp,
    resp: krpc_rdma::transport::Responder,
    pb: Arc<dyn PageProvider>,
    pool: *mut FbsdSvcpool,
    read_data: &Arc<Vec<u8>>,
) -> (
    *mut FbsdSvcxprt,
    Arc<AtomicBool>,
    Arc<AtomicU32>,
    thread::JoinHandle<Served>,
) {
    let max = TransportConfig::default().max_requests as usize;
    let svc = KrpcSvc::new(Box::new(b), Box::new(resp), pb, max).unwrap();
    // SAFETY: the pool lives until the end of the test, after every transport.
    let xprt = unsafe { svc.into_xprt(pool) }.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let held = Arc::new(AtomicU32::new(0));
    let t = {
        let (stop, held, rd, x) = (stop.clone(), held.clone(), read_data.clone(), xprt as usize);
        thread::spawn(move || pool_thread(x, rd, stop, held))
    };
    (xprt, stop, held, t)
}

/// Through both ops tables: NULL; an NFSv3 WRITE of 1 MiB + 3 bytes in M_EXTPG mbufs (out
/// as a read chunk) that arrives at xp_recv as M_EXTPG mbufs over the RDMA-Read pages; a
/// READ whose 1 MiB + 3 bytes of results, given to xp_reply as knfsd's M_EXTPG mbufs, come
/// back through the write chunk; PROC_UNAVAIL; a call the server drops unanswered, its
/// context given back by `SVC_CONTROL(SVCRDMA_DROP_CALL)`; SVC_STAT / SVC_ACK / SVC_CONTROL; xp_destroy
/// with a call outstanding (the client's call ends with the connection). Then, against the
/// core's Requester, malformed RPC headers answered (RPC_MISMATCH, AUTH_BADCRED,
/// GARBAGE_ARGS) and a NULL call after them. No mbuf, page or registration left.
#[test]
fn svc_ops_null_write_read_malformed_destroy_over_rxe() {
    let Some(mut fx) = emu() else { return };
    let pages_before = emu_stats().pages_in_use;
    let before_mbufs = mbufs_live();
    let kp = KernelPages::new();
    let write_data = pattern(N, 31, 11, 41);
    let read_data = Arc::new(pattern(N, 31, 11, 42));
    // SAFETY: plain allocation; destroyed at the end.
    let pool = unsafe { krpc_emu_svcpool_create() };
    assert!(!pool.is_null());
    {
        let p = Pair::with(&mut fx, TransportConfig::default()).unwrap();
        let Pair { l, req, resp } = p;
        let Link { a, b, pa, pb, .. } = l;
        let (xprt, stop, held, server) = start_server(b, resp.into_inner(), pb, pool, &read_data);
        let cl = nfs_client(a, req.into_inner(), pa, hook);
        let act0 = activations(pool);

        // NULL.
        set_xid(cl, 0x1000);
        let (st, e, _, rep) = call(cl, 0, None, TIMEOUT_MS);
        assert_eq!(st, RPC_SUCCESS, "NULL: {e:?}");
        assert_empty_results(rep, "NULL");

        // WRITE: the args as NFS builds them, data in M_EXTPG mbufs behind the marker.
        let (args, whead_len) = write_args(&kp, 5, &write_data);
        let wire = emu_mbuf::bytes(&args);
        let ((st, e, _, rep), took) =
            timed_call(cl, 0x2000, NFSPROC3_WRITE, Some(&args), TIMEOUT_MS);
        println!("WRITE {N} client -> xp_recv -> xp_reply -> client: {took:?}");
        assert_eq!(st, RPC_SUCCESS, "WRITE: {e:?}");
        assert_eq!(emu_mbuf::bytes(&rep.expect("WRITE3res")), vec![0; 4]);
        drop(args);

        // READ: knfsd's M_EXTPG reply data, consumed by xp_reply, out by RDMA Write.
        let rargs = read_args(&kp, 6, N);
        let ((st, e, _, rep), took) =
            timed_call(cl, 0x3000, NFSPROC3_READ, Some(&rargs), TIMEOUT_MS);
        println!("READ {N} client -> xp_recv -> xp_reply -> client: {took:?}");
        assert_eq!(st, RPC_SUCCESS, "READ: {e:?}");
        let rep = rep.expect("READ3res");
        let got = emu_mbuf::bytes(&rep);
        let inf = emu_mbuf::info(&rep);
        let extpg_bytes: usize = inf
            .iter()
            .filter(|x| x.flags & M_EXTPG != 0)
            .map(|x| x.len as usize)
            .sum();
        let want = read_results(&read_data);
        assert!(got == want, "READ results: the bytes xp_reply was given");
        assert!(
            extpg_bytes >= N,
            "the READ data reached the client in its write-chunk pages ({extpg_bytes})"
        );
        drop((rep, rargs));

        // PROC_UNAVAIL through xp_reply (no results chain).
        let (st, _, _, rep) = call(cl, BAD_PROC, None, TIMEOUT_MS);
        assert_eq!(st, RPC_PROCUNAVAIL);
        assert!(rep.is_none());

        // A call the server will not answer: the pool thread gives its context back through
        // SVC_CONTROL(SVCRDMA_DROP_CALL); the client's call times out.
        set_xid(cl, DROP_XID);
        let (st, _, _, rep) = call(cl, 0, None, 300);
        assert_eq!(st, RPC_TIMEDOUT, "the dropped call is not answered");
        assert!(rep.is_none());
        let mut stats = KrpcSvcStats::default();
        let t = Instant::now();
        while stats.dropped == 0 && t.elapsed() < Duration::from_secs(10) {
            // SAFETY: live transport, valid out-pointer.
            unsafe { svc_rdma_get_stats(xprt, &mut stats) };
            thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(stats.dropped, 1, "one context given back by svc_rdma_drop");

        // SVC_STAT / SVC_ACK / SVC_CONTROL from this thread (a pool thread may run them too).
        let mut ack = 0u32;
        // SAFETY: live transport.
        unsafe {
            assert_eq!(krpc_emu_svc_stat(xprt), XPRT_IDLE, "nothing queued");
            assert_eq!(krpc_emu_svc_ack(xprt, &mut ack), 0, "no xp_ack (as svc_dg)");
            assert_eq!(krpc_emu_svc_control(xprt, SVCGET_CONNMAXREC), 0);
        }
        let act = activations(pool);
        let (calls, transitions) = (act.0 - act0.0, act.1 - act0.1);
        println!("xprt_active during 4 calls: {calls} calls, {transitions} activations");
        // The upcalls after create (Receive and Send completions while the CQ is armed; how
        // many depends on who wins the poll-before-arm race, so only "some"; without the
        // upcall's xprt_active the NULL call above already times out).
        assert!(calls >= 1, "the CQ upcall activates the transport");

        // xp_destroy with a call outstanding: received, never answered, then the transport
        // goes (xprt_unregister + the last SVC_RELEASE); the client's call ends at once.
        set_xid(cl, HOLD_XID);
        let clp = cl as usize;
        let waiter = thread::spawn(move || {
            let t = Instant::now();
            let (st, e, _, rep) = call(clp as *mut FbsdClient, 0, None, TIMEOUT_MS);
            (st, e, rep.is_none(), t.elapsed())
        });
        let t = Instant::now();
        while held.load(Ordering::SeqCst) != HOLD_XID && t.elapsed() < Duration::from_secs(10) {
            thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            held.load(Ordering::SeqCst),
            HOLD_XID,
            "the call reached xp_recv"
        );
        stop.store(true, Ordering::SeqCst);
        let served = server.join().unwrap();
        // SAFETY: no thread uses the transport any more; not used afterwards.
        unsafe { krpc_emu_svc_release(xprt) };
        let (st, e, no_rep, took) = waiter.join().unwrap();
        println!("outstanding call after xp_destroy: {st} {e:?} after {took:?}");
        assert!(
            st != RPC_SUCCESS && no_rep,
            "the held call fails with the connection"
        );
        assert!(
            took < Duration::from_secs(10),
            "ended by the destroy, not its timeout"
        );
        // SAFETY: live CLIENT, not used afterwards.
        unsafe { krpc_emu_clnt_destroy(cl) };

        // What xp_recv handed up.
        println!(
            "served: {} calls, {} replies",
            served.seen.len(),
            served.replies_ok
        );
        assert_eq!(
            served.replies_ok, 4,
            "NULL, WRITE, READ, PROC_UNAVAIL replied"
        );
        let xids: Vec<u32> = served.seen.iter().map(|s| s.msg_xid).collect();
        assert_eq!(
            xids,
            vec![0x1000, 0x2000, 0x3000, 0x3001, DROP_XID, HOLD_XID]
        );
        assert_eq!(
            served.drops,
            Some((1, 0)),
            "SVCRDMA_DROP_CALL: TRUE for the waiting call, FALSE once its context is back"
        );
        assert!(served
            .seen
            .iter()
            .all(|s| s.rpcvers == 2 && s.cred_flavor == 0));
        let w = &served.seen[1];
        assert_eq!(w.proc_, NFSPROC3_WRITE);
        assert!(
            w.args == wire,
            "xp_recv: the WRITE's arguments, byte for byte"
        );
        println!(
            "WRITE at xp_recv: {} M_EXTPG mbufs, {} page bytes, marker at {:?}",
            w.extpg, w.extpg_bytes, w.marker_at
        );
        assert!(
            w.extpg >= N.div_ceil(4096).div_ceil(5),
            "M_EXTPG mbufs of <= 5 pages"
        );
        assert_eq!(w.extpg_bytes, N, "all the data in M_EXTPG mbufs");
        assert!(
            w.bridge_built,
            "over the RDMA-Read pages (the bridge's mbufs)"
        );
        assert_eq!(
            w.marker_at,
            Some(whead_len),
            "the marker in front of the data"
        );
        assert_eq!(served.seen[0].args.len(), 0, "NULL has no arguments");
    }

    // Malformed calls against the core's Requester: answered by the transport, not handed
    // up; a good call after them is.
    {
        let p = Pair::with(&mut fx, TransportConfig::default()).unwrap();
        let Pair { l, req, resp } = p;
        let Link { mut a, b, pb, .. } = l;
        let (xprt, stop, _, server) = start_server(b, resp.into_inner(), pb, pool, &read_data);
        let mut req = req.into_inner();
        let bad: [(&str, Vec<u32>, Vec<u32>); 4] = [
            (
                "RPC version 3",
                vec![0xa1, 0, 3, NFS_PROGRAM, 3, 0, 0, 0, 0, 0],
                vec![0xa1, 1, 1, 0, 2, 2],
            ),
            (
                "credential of 1000 bytes",
                vec![0xa2, 0, 2, NFS_PROGRAM, 3, 0, 1, 1000, 0, 0],
                vec![0xa2, 1, 1, 1, 1],
            ),
            (
                "truncated header",
                vec![0xa3, 0, 2, NFS_PROGRAM],
                vec![0xa3, 1, 0, 0, 0, 4],
            ),
            (
                "a message neither CALL nor REPLY",
                vec![0xa4, 2, 0, 0, 0, 0],
                vec![0xa4, 1, 0, 0, 0, 4],
            ),
        ];
        for (what, words, want) in bad.iter() {
            let got = raw_call(&mut req, &mut a, words);
            println!("{what}: answered {got:x?}");
            assert_eq!(&got, want, "{what}");
        }
        let got = raw_call(
            &mut req,
            &mut a,
            &[0xb0, 0, 2, NFS_PROGRAM, 3, 0, 0, 0, 0, 0],
        );
        assert_eq!(got, vec![0xb0, 1, 0, 0, 0, 0], "a NULL call after them");
        stop.store(true, Ordering::SeqCst);
        let served = server.join().unwrap();
        let xids: Vec<u32> = served.seen.iter().map(|s| s.msg_xid).collect();
        assert_eq!(xids, vec![0xb0], "only the good call reached xp_recv");
        // SAFETY: no thread uses the transport any more.
        unsafe { krpc_emu_svc_release(xprt) };
        drop((req, a));
    }
    drop(fx);
    // SAFETY: every transport of the pool is gone.
    unsafe { krpc_emu_svcpool_destroy(pool) };
    assert_no_mbuf_left(before_mbufs);
    assert_no_page_left(pages_before);
}

/// One call of raw RPC words through the core's Requester; the reply's words.
fn raw_call(req: &mut Requester, a: &mut OfedQp, words: &[u32]) -> Vec<u32> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
    let xid = words.first().copied().unwrap_or_default();
    req.call(
        a,
        Chain::from_bytes(&bytes).unwrap(),
        ReplySpec::inline(1024),
    )
    .unwrap();
    let t = Instant::now();
    let mut reply = None;
    while reply.is_none() && t.elapsed() < Duration::from_secs(15) {
        req.poll(a, &mut |e| {
            if let RequesterEvent::Reply { xid: x, reply: r } = e {
                if x == xid {
                    reply = Some(r);
                }
            }
        });
        if reply.is_none() {
            loopback::wait_any(&CondSleep, &mut [&mut *a], 20);
        }
    }
    let r = reply.unwrap().to_vec().unwrap();
    r.chunks_exact(4)
        .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
        .collect()
}

extern "C" {
    fn krpc_emu_svc_addrs(
        xprt: *mut FbsdSvcxprt,
        l: *mut ofed_shim::SockaddrStorage,
        r: *mut ofed_shim::SockaddrStorage,
    ) -> u64;
    fn krpc_emu_svc_freed_locked() -> u64;
    pub(super) fn krpc_rdma_busy(clients: *mut u64, xprts: *mut u64, extpg: *mut u64) -> u64;
}

/// `krpc_rdma_busy()`'s SVCXPRT count.
pub(super) fn live_xprts() -> u64 {
    let mut x = 0u64;
    // SAFETY: a valid out-pointer; NULL for the others.
    unsafe { krpc_rdma_busy(std::ptr::null_mut(), &mut x, std::ptr::null_mut()) };
    x
}

/// Waits up to 10 s for `f(stats)`; the last stats.
pub(super) fn stats_until(
    xprt: *mut FbsdSvcxprt,
    f: impl Fn(&KrpcSvcStats) -> bool,
) -> KrpcSvcStats {
    let mut stats = KrpcSvcStats::default();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        // SAFETY: live transport, valid out-pointer.
        unsafe { svc_rdma_get_stats(xprt, &mut stats) };
        if f(&stats) {
            break;
        }
        thread::sleep(Duration::from_millis(5));
    }
    stats
}

/// Two connections' SVCXPRTs, as FreeBSD 14.2's svc_vc makes them: xp_lock sx_init'ed
/// (the emulated xprt_register refuses a transport without it) and sx_destroy'ed by
/// xp_destroy; xp_rtaddr / xp_ltaddr the connection's addresses (svc_vc.c:320, 328);
/// xp_sockref nonzero and different per connection (the reply cache tells connections apart
/// by it, nfs_nfsdcache.c:633-639). A REPLY-direction message (no backchannel: xp_p2 NULL)
/// is counted and dropped, never answered, and the connection still serves calls.
/// `krpc_rdma_busy()` counts the live SVCXPRTs.
#[test]
fn svc_ops_xp_lock_addrs_sockref_reverse_reply_over_rxe() {
    let Some(mut fx) = emu() else { return };
    let pages_before = emu_stats().pages_in_use;
    let before_mbufs = mbufs_live();
    let read_data = Arc::new(Vec::new());
    // SAFETY: plain C call.
    let freed_locked = unsafe { krpc_emu_svc_freed_locked() };
    let live0 = live_xprts();
    // SAFETY: plain allocation; destroyed at the end.
    let pool = unsafe { krpc_emu_svcpool_create() };
    assert!(!pool.is_null());
    {
        let mut conns = Vec::new();
        for _ in 0..2 {
            let Pair { l, req, resp } = Pair::with(&mut fx, TransportConfig::default()).unwrap();
            let Link { a, b, pb, .. } = l;
            let (xprt, stop, _, server) = start_server(b, resp.into_inner(), pb, pool, &read_data);
            conns.push((a, req.into_inner(), xprt, stop, server));
        }
        assert_eq!(
            live_xprts(),
            live0 + 2,
            "krpc_rdma_busy counts both SVCXPRTs"
        );
        let mut refs = Vec::new();
        for (a, _, xprt, _, _) in &conns {
            let (mut l, mut r) = Default::default();
            // SAFETY: live transport, valid out-pointers.
            let sockref = unsafe { krpc_emu_svc_addrs(*xprt, &mut l, &mut r) };
            let (cl_local, cl_remote) = a.addrs().expect("the client's addresses");
            println!(
                "xp_sockref {sockref:#x}, xp_rtaddr {:?}, xp_ltaddr {:?}",
                &r.bytes[..8],
                &l.bytes[..8]
            );
            assert_ne!(sockref, 0, "xp_sockref set");
            assert_ne!(r.bytes, [0u8; 128], "xp_rtaddr set");
            assert_eq!(r, cl_local, "xp_rtaddr is the client's address");
            assert_eq!(l, cl_remote, "xp_ltaddr is the address the client reached");
            refs.push(sockref);
        }
        assert_ne!(refs[0], refs[1], "one xp_sockref per connection");

        // A REPLY where a CALL belongs: dropped and counted, nothing sent back. A NULL call
        // first: the grant starts at 1, and the REPLY takes a credit it never gives back on
        // the Requester's side (nothing answers it).
        let (a, req, xprt, _, _) = &mut conns[0];
        let got = raw_call(req, a, &[0xc0, 0, 2, NFS_PROGRAM, 3, 0, 0, 0, 0, 0]);
        assert_eq!(got, vec![0xc0, 1, 0, 0, 0, 0], "a NULL call first");
        let bytes: Vec<u8> = [0xc1u32, 1, 0, 0, 0, 0]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        req.call(
            a,
            Chain::from_bytes(&bytes).unwrap(),
            ReplySpec::inline(1024),
        )
        .unwrap();
        let stats = stats_until(*xprt, |s| s.reverse_replies > 0);
        assert_eq!(stats.reverse_replies, 1, "the REPLY was counted: {stats:?}");
        assert_eq!(stats.answered, 0, "and not answered");
        let t = Instant::now();
        let mut answered = false;
        while t.elapsed() < Duration::from_millis(300) {
            req.poll(a, &mut |e| {
                answered |= matches!(e, RequesterEvent::Reply { xid: 0xc1, .. });
            });
            loopback::wait_any(&CondSleep, &mut [&mut *a], 20);
        }
        assert!(!answered, "a reply is never answered with a reply");
        let got = raw_call(req, a, &[0xc2, 0, 2, NFS_PROGRAM, 3, 0, 0, 0, 0, 0]);
        assert_eq!(
            got,
            vec![0xc2, 1, 0, 0, 0, 0],
            "a NULL call after it is answered"
        );

        for (a, req, xprt, stop, server) in conns {
            stop.store(true, Ordering::SeqCst);
            let served = server.join().unwrap();
            assert!(
                served.seen.iter().all(|s| s.msg_xid != 0xc1),
                "never handed up"
            );
            // SAFETY: no thread uses the transport any more.
            unsafe { krpc_emu_svc_release(xprt) };
            drop((req, a));
        }
    }
    assert_eq!(live_xprts(), live0, "krpc_rdma_busy: no SVCXPRT left");
    // SAFETY: plain C call.
    assert_eq!(
        unsafe { krpc_emu_svc_freed_locked() },
        freed_locked,
        "xp_destroy sx_destroyed xp_lock"
    );
    drop(fx);
    // SAFETY: every transport of the pool is gone.
    unsafe { krpc_emu_svcpool_destroy(pool) };
    assert_no_mbuf_left(before_mbufs);
    assert_no_page_left(pages_before);
}

extern "C" {
    fn svc_rdma_set_idle_timeout(xprt: *mut FbsdSvcxprt, secs: i32);
    fn svc_rdma_idle_closes() -> u32;
}

/// The idle timeout (svc_vc's `xp_idletimeout`, which svc.c cannot apply to a transport
/// without a socket): with 1 s, a connection with a call in progress stays (3 s with a held
/// call); once that call is dropped and nothing else comes, the transport is ended within
/// seconds (`SVC_STAT` says XPRT_DIED to the pool thread, the idle counter moves), and after
/// svc.c's release the client's next call fails instead of hanging. No mbuf or page left.
#[test]
fn svc_ops_idle_timeout_ends_a_silent_connection_over_rxe() {
    let Some(mut fx) = emu() else { return };
    let pages_before = emu_stats().pages_in_use;
    let before_mbufs = mbufs_live();
    let read_data = Arc::new(Vec::new());
    // SAFETY: plain allocation; destroyed at the end.
    let pool = unsafe { krpc_emu_svcpool_create() };
    assert!(!pool.is_null());
    {
        let Pair { l, req, resp } = Pair::with(&mut fx, TransportConfig::default()).unwrap();
        let Link { a, b, pa, pb, .. } = l;
        let (xprt, _stop, held, server) = start_server(b, resp.into_inner(), pb, pool, &read_data);
        // SAFETY: live transport.
        unsafe { svc_rdma_set_idle_timeout(xprt, 1) };
        let cl = nfs_client(a, req.into_inner(), pa, hook);
        // SAFETY: plain C call.
        let closes0 = unsafe { svc_rdma_idle_closes() };

        set_xid(cl, 0x5000);
        let (st, e, _, rep) = call(cl, 0, None, TIMEOUT_MS);
        assert_eq!(st, RPC_SUCCESS, "NULL: {e:?}");
        assert_empty_results(rep, "NULL");

        // A call in progress (received, never answered) keeps the connection.
        set_xid(cl, HOLD_XID);
        let (st, _, _, _) = call(cl, 0, None, 3000);
        assert_eq!(st, RPC_TIMEDOUT, "the held call times out on the client");
        assert_eq!(held.load(Ordering::SeqCst), HOLD_XID, "the server holds it");
        // SAFETY: plain C call.
        assert_eq!(
            unsafe { svc_rdma_idle_closes() },
            closes0,
            "no idle close while a call is in progress"
        );
        // The krpc says it will not answer: nothing in progress, nothing comes: closed.
        let mut xid = HOLD_XID;
        // SAFETY: live transport; `xid` outlives the call.
        assert_eq!(
            unsafe { krpc_emu_svc_control_arg(xprt, SVCRDMA_DROP_CALL, &mut xid) },
            1
        );
        let t = Instant::now();
        let served = server.join().unwrap();
        println!("idle close after {:?}", t.elapsed());
        assert!(served.died, "the pool thread saw XPRT_DIED");
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "closed within seconds"
        );
        // SAFETY: plain C call.
        assert_eq!(unsafe { svc_rdma_idle_closes() }, closes0 + 1);
        // What svc_getreq does for XPRT_DIED, and the creator's reference: xp_destroy
        // disconnects; the client's next call fails, it does not hang.
        // SAFETY: no thread uses the transport any more.
        unsafe { krpc_emu_svc_release(xprt) };
        set_xid(cl, 0x5001);
        let (st, _, _, _) = call(cl, 0, None, TIMEOUT_MS);
        assert!(
            st != RPC_SUCCESS && st != RPC_TIMEDOUT,
            "a call after the idle close ends with an error, got {st}"
        );
        // SAFETY: the CLIENT is not used after this.
        unsafe { krpc_emu_clnt_destroy(cl) };
    }
    drop(fx);
    // SAFETY: every transport of the pool is gone.
    unsafe { krpc_emu_svcpool_destroy(pool) };
    assert_no_mbuf_left(before_mbufs);
    assert_no_page_left(pages_before);
}
