//! `clnt_rdma` over rxe: a `CLIENT *` made by `clnt_rdma_create` (`c/krpc_rdma_clnt.c`,
//! compiled unchanged against the emulated `sys/rpc` of `emu/kpi_emu_rpc.h`) is called
//! through its `struct clnt_ops` table (`CLNT_CALL_MBUF`, `CLNT_GETERR`, `CLNT_CONTROL`,
//! `CLNT_DESTROY`), with the args as emulated FreeBSD mbuf chains, against the core's
//! Responder serving an NFS-shaped program in a thread of its own. The calling thread
//! sleeps in `msleep` inside `cl_call`; the CQ upcall only wakes it.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use krpc_face::ffi::FbsdClient;
use krpc_face::mbuf_bridge::{MbufBridge, MbufChain};
use krpc_rdma::transport::{ReplySpec, Responder, ResponderEvent, TransportConfig};
use krpc_rdma_scenarios::{Link, Pair};
use mbuf::{Chain, PageProvider};
use nfs_proto::nfs3::{NFSPROC3_READ, NFSPROC3_WRITE, NFS_PROGRAM};
use ofed_shim::OfedQp;
use ofed_testkit::emu_mbuf::{self, M_EXTPG};
use ofed_testkit::loopback;
use onc_rpc::rpc::{CallHeader, ReplyHeader};
use onc_rpc::xdr::{pad, Decoder, Encoder};

use super::clnt::{
    assert_empty_results, assert_no_mbuf_left, assert_no_page_left, call, krpc_emu_clnt_close,
    krpc_emu_clnt_control_timeout, krpc_emu_clnt_control_u32, krpc_emu_clnt_destroy,
    krpc_emu_clnt_set_authsys, mbufs_live, nfs_client, nfs_read_hook, pattern, read_args,
    read_results, read_results_chain, set_xid, timed_call, write_args, BAD_PROC, N,
    RPC_PROCUNAVAIL, RPC_SUCCESS, RPC_TIMEDOUT,
};
use super::{emu, emu_stats, CondSleep, KernelPages};

const RPC_CANTSEND: i32 = 3;
const RPC_CANTRECV: i32 = 4;
/// FreeBSD's ESHUTDOWN (what the Rust side reports, `transport::kernel::Errno::freebsd`).
const ESHUTDOWN: i32 = 58;
const CLSET_TIMEOUT: u32 = 1;
const CLGET_TIMEOUT: u32 = 2;
const CLGET_XID: u32 = 10;
const CLGET_VERS: u32 = 12;
const CLSET_TLS: u32 = 30;

/// A NULL call with this XID is answered 1.5 s late (the timeout test).
const SLOW_XID: u32 = 0x7000_0000;
/// A NULL call with this XID (or up to 255 above it) is never answered (the close tests: an
/// XID abandoned is not reused while its late reply may come).
const NEVER_XID: u32 = 0x7100_0000;

/// Largest reply of the calls other than READ: inline (no reply chunk, so no registration).
/// With 1024 (a reply chunk for every such call) the late reply to the call abandoned by the
/// timeout comes with Send With Invalidate of the handle `abandon` revoked: in this
/// emulation FRWR MRs are rxe type 2 windows, which `Provider::revoke` does not hold back
/// (a FREE window invalidated again crashes Linux 6.1's rxe), so the next bind bumps the key
/// and rxe fails the queue pair on the late invalidation (`RPC_CANTRECV`/`ENOTCONN` for the
/// next call). The kernel shim's real FRWR MRs are held back: see ARCHITECTURE.md.
const INLINE_REPLY: usize = 512;

/// The reply provisioning hook: [`nfs_read_hook`], the other replies in INLINE_REPLY bytes.
fn hook(call: &Chain, pages: &Arc<dyn PageProvider>) -> ReplySpec {
    nfs_read_hook(call, pages, INLINE_REPLY)
}

/// What the server saw of one call.
#[derive(Debug)]
struct Seen {
    xid: u32,
    proc_: u32,
    bytes: Vec<u8>,
    /// Page mbufs in the call (the read chunk's data, RDMA-Read into the server's pages).
    pages: usize,
}

/// The server: the core's Responder on side B, answering NULL, WRITE (NFS3_OK), READ (the
/// data from an emulated knfsd chain with M_EXTPG mbufs), PROC_UNAVAIL for BAD_PROC, and
/// SLOW_XID 1.5 s late; until the connection goes or `stop`.
fn serve(
    mut b: OfedQp,
    mut resp: Responder,
    pb: Arc<dyn PageProvider>,
    read_data: Vec<u8>,
    stop: Arc<AtomicBool>,
) -> (OfedQp, Responder, Vec<Seen>, Vec<MbufChain>) {
    let kp = KernelPages::new();
    let mut br = MbufBridge::default();
    let mut seen = Vec::new();
    let mut knfsd = Vec::new();
    let mut late: Vec<(Instant, krpc_rdma::transport::ReplyCtx, Chain)> = Vec::new();
    let t0 = Instant::now();
    while !stop.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(120) {
        let mut calls = Vec::new();
        let mut lost = false;
        resp.poll(&mut b, &mut |e| match e {
            ResponderEvent::Call(c) => calls.push(c),
            ResponderEvent::ConnectionLost => lost = true,
            ResponderEvent::Connected(_)
            | ResponderEvent::ReverseReply { .. }
            | ResponderEvent::ReverseFailed { .. } => {}
        });
        if lost {
            break;
        }
        for c in calls {
            let bytes = c.call.to_vec().unwrap();
            let pages = c.call.mbufs().filter(|m| m.page_info().is_some()).count();
            let mut d = Decoder::new(&bytes);
            let h = CallHeader::decode(&mut d).unwrap();
            let mut r = Encoder::new();
            let reply = match h.proc_ {
                0 => {
                    ReplyHeader::success(c.xid).encode(&mut r);
                    Chain::from_bytes(&r.finish().unwrap()).unwrap()
                }
                NFSPROC3_WRITE => {
                    ReplyHeader::success(c.xid).encode(&mut r);
                    r.u32(0);
                    Chain::from_bytes(&r.finish().unwrap()).unwrap()
                }
                NFSPROC3_READ => {
                    ReplyHeader::success(c.xid).encode(&mut r);
                    let (fb, _) = read_results_chain(&kp, r, &read_data);
                    // SAFETY: `fb` is live and unchanged during the call.
                    let rc = unsafe { br.chain_from_mbufs(fb.as_ptr(), &pb) }.unwrap();
                    // knfsd's chain lives until the transport is done with its pages.
                    knfsd.push(fb);
                    rc
                }
                _ => {
                    r.u32(c.xid);
                    r.u32(1); // REPLY
                    r.u32(0); // MSG_ACCEPTED
                    r.u32(0); // AUTH_NONE verifier
                    r.u32(0);
                    r.u32(3); // PROC_UNAVAIL
                    Chain::from_bytes(&r.finish().unwrap()).unwrap()
                }
            };
            seen.push(Seen {
                xid: c.xid,
                proc_: h.proc_,
                bytes,
                pages,
            });
            drop(c.call);
            if c.xid & !0xff == NEVER_XID {
                // Never answered (its context goes with `c`).
            } else if c.xid == SLOW_XID {
                late.push((Instant::now() + Duration::from_millis(1500), c.ctx, reply));
            } else {
                resp.reply(&mut b, c.ctx, reply).unwrap();
            }
        }
        let now = Instant::now();
        while let Some(i) = late.iter().position(|(t, _, _)| *t <= now) {
            let (_, ctx, reply) = late.swap_remove(i);
            resp.reply(&mut b, ctx, reply).unwrap();
        }
        loopback::wait_any(&CondSleep, &mut [&mut b], 20);
    }
    (b, resp, seen, knfsd)
}

/// The RPC call header cl_call must have put in front of the args (AUTH_NONE).
fn header(xid: u32, proc_: u32) -> Vec<u8> {
    let mut e = Encoder::new();
    for w in [xid, 0, 2, NFS_PROGRAM, 3, proc_, 0, 0, 0, 0] {
        e.u32(w);
    }
    e.finish().unwrap()
}

/// [`timed_call`] of `what` with a 30 s timeout, which the caller (asleep in msleep) beats
/// only when the CQ upcall's wakeup wakes it; the status and the results.
#[track_caller]
fn woken_call(
    cl: *mut FbsdClient,
    xid: u32,
    proc_: u32,
    args: &MbufChain,
    what: &str,
) -> (i32, Option<MbufChain>) {
    let ((st, _, _, rep), took) = timed_call(cl, xid, proc_, Some(args), 30_000);
    println!("{what} {N} through cl_call: {took:?}");
    assert!(
        took < Duration::from_secs(10),
        "woken by the upcall, not the timeout"
    );
    (st, rep)
}

/// NULL, an NFSv3 WRITE of 1 MiB + 3 bytes in M_EXTPG mbufs (out as a read chunk), a READ of
/// 1 MiB + 3 bytes whose results come back as M_EXTPG mbufs (write chunk), PROC_UNAVAIL, a
/// cl_call timeout (the Requester abandons the call; the late reply is dropped) and a call
/// after it, all through the CLIENT's clnt_ops; CLSET/CLGET_XID, CLSET/CLGET_TIMEOUT,
/// CLGET_VERS, CLSET_TLS refused; then CLNT_DESTROY and no page, mbuf or registration left.
#[test]
fn clnt_ops_null_write_read_timeout_over_rxe() {
    let Some(mut fx) = emu() else { return };
    let pages_before = emu_stats().pages_in_use;
    let before_mbufs = mbufs_live();
    let kp = KernelPages::new();
    let write_data = pattern(N, 29, 12, 21);
    let read_data = pattern(N, 29, 12, 22);
    {
        let p = Pair::with(&mut fx, TransportConfig::default()).unwrap();
        let Pair { l, req, resp } = p;
        let Link { a, b, pa, pb, .. } = l;
        let stop = Arc::new(AtomicBool::new(false));
        let server = {
            let (stop, rd) = (stop.clone(), read_data.clone());
            thread::spawn(move || serve(b, resp.into_inner(), pb, rd, stop))
        };
        let cl = nfs_client(a, req.into_inner(), pa, hook);

        // cl_control basics.
        let mut v = 0u32;
        // SAFETY: live CLIENT, uint32_t arguments.
        assert_eq!(
            unsafe { krpc_emu_clnt_control_u32(cl, CLGET_VERS, &mut v) },
            1
        );
        assert_eq!(v, 3);
        // SAFETY: as above.
        assert_eq!(
            unsafe { krpc_emu_clnt_control_u32(cl, CLSET_TLS, &mut v) },
            0
        );
        set_xid(cl, 0x1000);
        // SAFETY: as above.
        assert_eq!(
            unsafe { krpc_emu_clnt_control_u32(cl, CLGET_XID, &mut v) },
            1
        );
        assert_eq!(v, 0x0fff, "CLSET_XID sets the next call's XID (as clnt_vc)");

        // NULL.
        let (st, e1, e2, rep) = call(cl, 0, None, 30_000);
        assert_eq!((st, e1.status, e2.status), (RPC_SUCCESS, 0, 0), "NULL");
        assert_empty_results(rep, "NULL");

        // WRITE: the args as NFS builds them, data in M_EXTPG mbufs behind the marker.
        let (args, _) = write_args(&kp, 3, &write_data);
        let wire = emu_mbuf::bytes(&args);
        let (st, rep) = woken_call(cl, 0x2000, NFSPROC3_WRITE, &args, "WRITE");
        assert_eq!(st, RPC_SUCCESS, "WRITE");
        let rep = rep.expect("WRITE3res");
        assert_eq!(
            emu_mbuf::bytes(&rep),
            vec![0, 0, 0, 0],
            "results past the reply header"
        );
        drop(rep);
        // As NFS: the args chain is freed after cl_call returned (its free routine unwires
        // and frees every page: the transport must hold none by now).
        let freed = emu_mbuf::mbuf_stats().nfs_pages_freed;
        let npages = emu_mbuf::extpg_pages(&args).len() as u64;
        drop(args);
        assert_eq!(emu_mbuf::mbuf_stats().nfs_pages_freed - freed, npages);

        // READ.
        let rargs = read_args(&kp, 4, N);
        let (st, rep) = woken_call(cl, 0x3000, NFSPROC3_READ, &rargs, "READ");
        assert_eq!(st, RPC_SUCCESS, "READ");
        let rep = rep.expect("READ3res");
        let got = emu_mbuf::bytes(&rep);
        let inf = emu_mbuf::info(&rep);
        let extpg: Vec<_> = inf.iter().filter(|x| x.flags & M_EXTPG != 0).collect();
        println!(
            "READ results: {} bytes, {} M_EXTPG mbufs, {} mbufs",
            got.len(),
            extpg.len(),
            inf.len()
        );
        let want = read_results(&read_data);
        let rhead_len = want.len() - N - pad(N);
        assert!(got == want, "READ results: the bytes past the reply header");
        assert!(!extpg.is_empty(), "the data as M_EXTPG mbufs");
        assert!(extpg.iter().all(|x| x.is_bridge == 1 && x.npgs <= 5));
        let extpg_bytes: usize = extpg.iter().map(|x| x.len as usize).sum();
        assert!(
            extpg_bytes >= N,
            "all the data in M_EXTPG mbufs ({extpg_bytes})"
        );
        let mark = emu_mbuf::first_marker(&inf).map(|(_, at)| at);
        assert_eq!(mark, Some(rhead_len), "the marker in front of the data");
        drop(rep);
        drop(rargs);

        // PROC_UNAVAIL.
        let (st, e1, e2, rep) = call(cl, BAD_PROC, None, 30_000);
        assert_eq!((st, e1.status, e2.status), (RPC_PROCUNAVAIL, 10, 10));
        assert!(rep.is_none());

        // Timeout: the server holds SLOW_XID 1.5 s; cl_call gives up after 300 ms.
        set_xid(cl, SLOW_XID);
        let t = Instant::now();
        let (st, e1, e2, rep) = call(cl, 0, None, 300);
        let waited = t.elapsed();
        println!("timed out after {waited:?}");
        assert_eq!(
            (st, e1.status, e2.status),
            (RPC_TIMEDOUT, RPC_TIMEDOUT, RPC_TIMEDOUT)
        );
        assert!(rep.is_none());
        assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(5));
        // CLSET_TIMEOUT overrides the caller's timeout (as clnt_vc).
        let mut ms = 20_000i64;
        // SAFETY: live CLIENT, a timeval in milliseconds.
        assert_eq!(
            unsafe { krpc_emu_clnt_control_timeout(cl, CLSET_TIMEOUT, &mut ms) },
            1
        );
        let mut got_ms = 0i64;
        // SAFETY: as above.
        assert_eq!(
            unsafe { krpc_emu_clnt_control_timeout(cl, CLGET_TIMEOUT, &mut got_ms) },
            1
        );
        assert_eq!(got_ms, 20_000);
        // A call after the timeout works (with a 1 ms timeout of the caller, overridden),
        // and the late reply to SLOW_XID is dropped by the Requester.
        set_xid(cl, 0x4000);
        let (st, e1, e2, _) = call(cl, 0, None, 1);
        assert_eq!(st, RPC_SUCCESS, "a call after the timeout: {e1:?} {e2:?}");
        thread::sleep(Duration::from_millis(1700));
        let after_late = call(cl, 0, None, 1);

        // cl_close while a caller sleeps in cl_call (its call never answered): the caller
        // returns RPC_CANTRECV / ESHUTDOWN at once, close returns once it has left, and a
        // later call is refused.
        set_xid(cl, NEVER_XID);
        let clp = cl as usize;
        let t = Instant::now();
        let waiter = thread::spawn(move || {
            let (st, e1, e2, rep) = call(clp as *mut FbsdClient, 0, None, 1);
            (st, e1, e2, rep.is_none())
        });
        thread::sleep(Duration::from_millis(300));
        // SAFETY: live CLIENT.
        unsafe { krpc_emu_clnt_close(cl) };
        let closed_after = t.elapsed();
        let (st, e1, e2, no_rep) = waiter.join().unwrap();
        println!("cl_close returned after {closed_after:?}; the waiter got {st} {e1:?}");
        assert_eq!(
            (st, e1.err, e2.err, no_rep),
            (RPC_CANTRECV, ESHUTDOWN, ESHUTDOWN, true),
            "the pending call ends with the close"
        );
        assert!(
            closed_after < Duration::from_secs(10),
            "not by its 20 s timeout"
        );
        let (st, _, _, _) = call(cl, 0, None, 1);
        assert_eq!(st, RPC_CANTSEND, "a call after cl_close");
        // SAFETY: live CLIENT, not used afterwards.
        unsafe { krpc_emu_clnt_destroy(cl) };
        stop.store(true, Ordering::SeqCst);
        let (b, resp, seen, knfsd) = server.join().unwrap();
        println!("responder counters: {:?}", resp.counters());
        let (st, e1, e2, _) = after_late;
        assert_eq!(
            st, RPC_SUCCESS,
            "a call after the late reply: {e1:?} {e2:?}"
        );

        // What the server saw: the C side's header + the args, the WRITE's data in pages.
        let w = seen.iter().find(|s| s.proc_ == NFSPROC3_WRITE).unwrap();
        let mut want = header(0x2000, NFSPROC3_WRITE);
        want.extend_from_slice(&wire);
        assert_eq!(w.xid, 0x2000);
        assert!(w.bytes == want, "server: the WRITE call's bytes");
        assert!(
            w.pages > 0,
            "server: the WRITE data arrived in pages (read chunk)"
        );
        let xids: Vec<u32> = seen.iter().map(|s| s.xid).collect();
        println!("server saw XIDs {xids:x?}");
        assert_eq!(xids.first(), Some(&0x1000));
        assert!(xids.contains(&SLOW_XID) && xids.contains(&0x4000) && xids.contains(&0x4001));
        drop((b, resp));
        let freed = emu_mbuf::mbuf_stats().nfs_pages_freed;
        let n = knfsd.len();
        drop(knfsd);
        assert!(emu_mbuf::mbuf_stats().nfs_pages_freed > freed || n == 0);
    }
    drop(fx);
    assert_no_mbuf_left(before_mbufs);
    assert_no_page_left(pages_before);
}

extern "C" {
    fn krpc_emu_msleep_interrupt_next(error: i32);
    fn krpc_emu_erestart() -> i32;
    fn krpc_emu_msleep_calls() -> u64;
    fn krpc_emu_auth_destroyed() -> u64;
    fn krpc_emu_clnt_auth(cl: *mut FbsdClient) -> *mut c_void;
    fn krpc_emu_auth_destroy(a: *mut c_void);
    fn krpc_rdma_busy(clients: *mut u64, xprts: *mut u64, extpg: *mut u64) -> u64;
}

const RPC_INTR: i32 = 18;
/// EINTR: 4 on FreeBSD and Linux.
const EINTR: i32 = 4;
const CLSET_INTERRUPTIBLE: u32 = 23;

/// `krpc_rdma_busy()`'s CLIENT count.
fn live_clients() -> u64 {
    let mut c = 0u64;
    // SAFETY: a valid out-pointer; NULL for the others.
    unsafe { krpc_rdma_busy(&mut c, std::ptr::null_mut(), std::ptr::null_mut()) };
    c
}

/// What clnt_vc does and clnt_rdma now does the same (FreeBSD 14.2's clnt_vc.c): two
/// CLIENTs created back to back start at different XIDs (clnt_vc.c:142-149, 229-230); an
/// interrupted sleep for the reply ends the call RPC_INTR for EINTR and RPC_CANTRECV for
/// ERESTART, re_errno the error (clnt_vc.c:497-520); a zero timeout sends and returns
/// RPC_TIMEDOUT without sleeping (clnt_vc.c:488-494); CLNT_DESTROY leaves the consumer's
/// cl_auth alone (clnt_vc_destroy); cl_close disconnects without cr_lock held and still
/// ends the call sleeping in cl_call; `krpc_rdma_busy()` counts the live CLIENTs.
#[test]
fn clnt_ops_xid_intr_restart_zero_timeout_auth_close_over_rxe() {
    let Some(mut fx) = emu() else { return };
    let pages_before = emu_stats().pages_in_use;
    let before_mbufs = mbufs_live();
    let live0 = live_clients();
    {
        let stop = Arc::new(AtomicBool::new(false));
        let max = TransportConfig::default().max_requests as usize;
        let mut servers = Vec::new();
        let mut hs = Vec::new();
        for _ in 0..2 {
            let Pair { l, req, resp } = Pair::with(&mut fx, TransportConfig::default()).unwrap();
            let Link { a, b, pa, pb, .. } = l;
            let st = stop.clone();
            servers.push(thread::spawn(move || {
                serve(b, resp.into_inner(), pb, Vec::new(), st)
            }));
            hs.push(
                krpc_face::clnt::KrpcClnt::new(
                    Box::new(a),
                    Box::new(req.into_inner()),
                    pa,
                    hook,
                    max,
                )
                .unwrap(),
            );
        }
        // Back to back: the same tick (and likely the same microsecond).
        let h2 = hs.pop().unwrap();
        let h1 = hs.pop().unwrap();
        let cl1 = h1.into_client(NFS_PROGRAM, 3).unwrap();
        let cl2 = h2.into_client(NFS_PROGRAM, 3).unwrap();
        assert_eq!(
            live_clients(),
            live0 + 2,
            "krpc_rdma_busy counts both CLIENTs"
        );
        let (mut x1, mut x2) = (0u32, 0u32);
        // SAFETY: live CLIENTs, uint32_t arguments.
        unsafe {
            assert_eq!(krpc_emu_clnt_control_u32(cl1, CLGET_XID, &mut x1), 1);
            assert_eq!(krpc_emu_clnt_control_u32(cl2, CLGET_XID, &mut x2), 1);
        }
        println!("first XIDs: {x1:#x} {x2:#x}");
        assert_ne!(
            x1, x2,
            "two CLIENTs made in the same tick start at different XIDs"
        );

        // Interruptible sleeps for the reply: EINTR → RPC_INTR, ERESTART → RPC_CANTRECV
        // (clnt_rc reconnects), re_errno the error. A NULL call first opens the credit
        // grant (it starts at 1; each interrupted call keeps its credit), so the sleep
        // interrupted is the wait for the reply, not for credit.
        set_xid(cl1, 0x4700);
        let (st, e1, _, rep) = call(cl1, 0, None, 20_000);
        assert_eq!(st, RPC_SUCCESS, "NULL: {e1:?}");
        assert_empty_results(rep, "NULL");
        let mut one = 1u32;
        // SAFETY: live CLIENT; CLSET_INTERRUPTIBLE takes an int.
        assert_eq!(
            unsafe { krpc_emu_clnt_control_u32(cl1, CLSET_INTERRUPTIBLE, &mut one) },
            1
        );
        // SAFETY: plain C call.
        let erestart = unsafe { krpc_emu_erestart() };
        for (xid, error, want) in [
            (NEVER_XID + 1, EINTR, RPC_INTR),
            (NEVER_XID + 2, erestart, RPC_CANTRECV),
        ] {
            set_xid(cl1, xid);
            // SAFETY: plain C call (the next PCATCH sleep returns `error`).
            unsafe { krpc_emu_msleep_interrupt_next(error) };
            let t = Instant::now();
            let (st, e1, e2, rep) = call(cl1, 0, None, 20_000);
            println!("interrupted ({error}): {st} {e1:?} after {:?}", t.elapsed());
            assert_eq!(
                (st, e1.err, e2.err),
                (want, error, error),
                "sleep error {error}"
            );
            assert!(rep.is_none());
            assert!(t.elapsed() < Duration::from_secs(10), "not by the timeout");
        }
        // SAFETY: disarm (the hook fired above in any case).
        unsafe { krpc_emu_msleep_interrupt_next(0) };

        // A zero timeout: sent, no sleep; RPC_TIMEDOUT (the reply, when it comes, dropped),
        // or, as clnt_vc (clnt_vc.c:483-494 takes a reply already there before its zero-timeout
        // check), RPC_SUCCESS when the reply raced in before the first poll.
        set_xid(cl1, 0x4800);
        // SAFETY: plain C call.
        let sleeps = unsafe { krpc_emu_msleep_calls() };
        let (st, e1, _, rep) = call(cl1, 0, None, 0);
        // SAFETY: plain C call.
        let slept = unsafe { krpc_emu_msleep_calls() } - sleeps;
        match st {
            RPC_TIMEDOUT => assert!(rep.is_none()),
            RPC_SUCCESS => assert_empty_results(rep, "zero timeout, the reply already there"),
            _ => panic!("zero timeout: {st} {e1:?}"),
        }
        assert_eq!(slept, 0, "a zero timeout does not sleep");
        set_xid(cl1, 0x5000);
        let (st, e1, _, rep) = call(cl1, 0, None, 20_000);
        assert_eq!(st, RPC_SUCCESS, "a call after them: {e1:?}");
        assert_empty_results(rep, "NULL");

        // cl_close with a caller asleep in cl_call: rdma_disconnect without cr_lock, and
        // the caller still ends (RPC_CANTRECV / ESHUTDOWN).
        set_xid(cl1, NEVER_XID + 3);
        let locked0 = emu_stats().disconnects_locked;
        let clp = cl1 as usize;
        let waiter = thread::spawn(move || {
            let (st, e1, _, rep) = call(clp as *mut FbsdClient, 0, None, 20_000);
            (st, e1, rep.is_none())
        });
        thread::sleep(Duration::from_millis(300));
        let t = Instant::now();
        // SAFETY: live CLIENT.
        unsafe { krpc_emu_clnt_close(cl1) };
        let (st, e1, no_rep) = waiter.join().unwrap();
        assert_eq!((st, e1.err, no_rep), (RPC_CANTRECV, ESHUTDOWN, true));
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "close ended the call"
        );
        assert_eq!(
            emu_stats().disconnects_locked,
            locked0,
            "rdma_disconnect is not called with cr_lock held"
        );

        // cl_auth belongs to the consumer: CLNT_DESTROY does not AUTH_DESTROY it.
        // SAFETY: live CLIENT; a 4-byte body.
        assert_eq!(
            unsafe { krpc_emu_clnt_set_authsys(cl2, [0u8; 4].as_ptr(), 4) },
            1
        );
        // SAFETY: live CLIENT.
        let auth = unsafe { krpc_emu_clnt_auth(cl2) };
        // SAFETY: plain C call.
        let destroyed = unsafe { krpc_emu_auth_destroyed() };
        // SAFETY: live CLIENTs, not used afterwards.
        unsafe {
            krpc_emu_clnt_destroy(cl2);
            krpc_emu_clnt_destroy(cl1);
        }
        // SAFETY: plain C call.
        assert_eq!(
            unsafe { krpc_emu_auth_destroyed() },
            destroyed,
            "CLNT_DESTROY left cl_auth to its owner"
        );
        // SAFETY: the AUTH is still live and ours (as NLM's nlm_auth).
        unsafe { krpc_emu_auth_destroy(auth) };
        // SAFETY: plain C call.
        assert_eq!(unsafe { krpc_emu_auth_destroyed() }, destroyed + 1);
        assert_eq!(live_clients(), live0, "krpc_rdma_busy: no CLIENT left");
        stop.store(true, Ordering::SeqCst);
        for s in servers {
            drop(s.join().unwrap());
        }
    }
    drop(fx);
    assert_no_mbuf_left(before_mbufs);
    assert_no_page_left(pages_before);
}
