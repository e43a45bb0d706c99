//! The krpc face's backchannel over rxe (RFC 8167 through the krpc's C interfaces, issue 25
//! item 4): a `clnt_rdma` CLIENT with reverse slots (`CLSET_RDMA_CBSLOTS`) and a backchannel
//! SVCXPRT (`svc_rdma_create_backchannel` + `CLSET_BACKCHANNEL`) served by a pool thread of
//! its own; on the server side an `svc_rdma` transport with its slots
//! (`svc_rdma_set_cbslots`) and a `clnt_rdma_bck_create` CLIENT on it whose `CLNT_CALL_MBUF`
//! sends callbacks on the client's own connection.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use krpc_face::ffi::{FbsdClient, FbsdMbuf, FbsdSvcpool, FbsdSvcxprt};
use krpc_face::mbuf_bridge::MbufChain;
use krpc_rdma::transport::TransportConfig;
use krpc_rdma_scenarios::{Limits, Link, Pair, Setup};
use ofed_testkit::emu_mbuf::{self, Part};

use super::clnt::{
    assert_no_mbuf_left, call, krpc_emu_clnt_control_u32, krpc_emu_clnt_destroy, mbufs_live,
    nfs_client, RPC_SUCCESS,
};
use super::svc_ops::{
    hook, krpc_emu_svc_recv, krpc_emu_svc_release, krpc_emu_svc_reply, krpc_emu_svc_stat,
    krpc_emu_svc_wait_active, krpc_emu_svcpool_create, krpc_emu_svcpool_destroy, start_server,
    SvcMsg, SUCCESS, TIMEOUT_MS, XPRT_DIED,
};
use super::{emu, KernelPages};

extern "C" {
    fn svc_rdma_create_backchannel(pool: *mut FbsdSvcpool) -> *mut FbsdSvcxprt;
    fn svc_rdma_set_cbslots(xprt: *mut FbsdSvcxprt, n: u32) -> i32;
    fn clnt_rdma_bck_create(xprt: *mut FbsdSvcxprt, prog: u32, vers: u32) -> *mut FbsdClient;
}

/// `CLSET_RDMA_CBSLOTS` / `CLGET_RDMA_CBSLOTS` of `c/krpc_rdma_clnt.h`, sys/rpc/clnt.h's
/// `CLSET_BACKCHANNEL`.
const CLSET_RDMA_CBSLOTS: u32 = 0x5244_0006;
const CLGET_RDMA_CBSLOTS: u32 = 0x5244_0007;
const CLSET_BACKCHANNEL: u32 = 29;
/// The NFSv4 callback program and the procedures the callback service knows.
const CB_PROG: u32 = 0x4000_0000;
const CB_NULL: u32 = 0;
const CB_COMPOUND: u32 = 1;
/// A procedure the callback service receives and never answers (the loss test).
const CB_HOLD: u32 = 7;
const RPC_CANTRECV: i32 = 4;
const RPC_CANTSEND: i32 = 3;
const RPC_SYSTEMERROR: i32 = 12;
const RPC_TIMEDOUT: i32 = 5;
/// Forward credits and reverse slots.
const CREDITS: u32 = 32;
const SLOTS: u32 = 2;

/// The callback service: a pool thread on the backchannel xprt (`SVC_RECV` while active, as
/// svc.c's threads), answering CB_NULL (no results) and CB_COMPOUND (the arguments back,
/// each byte + 1); CB_HOLD is received and not answered. Until `stop`; what it received.
fn cb_service(bc: usize, stop: Arc<AtomicBool>, held: Arc<AtomicU32>) -> Vec<(u32, u32)> {
    let x = bc as *mut FbsdSvcxprt;
    let kp = KernelPages::new();
    let mut seen = Vec::new();
    let t0 = Instant::now();
    while !stop.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(120) {
        // SAFETY: the xprt lives until the main thread releases it after joining us.
        if unsafe { krpc_emu_svc_wait_active(x, 50) } == 0 {
            continue;
        }
        loop {
            // SAFETY: a zeroed plain-data struct.
            let mut msg: SvcMsg = unsafe { std::mem::zeroed() };
            let mut a: *mut FbsdMbuf = std::ptr::null_mut();
            // SAFETY: live xprt, valid out-pointers.
            if unsafe { krpc_emu_svc_recv(x, &mut msg, &mut a) } == 0 {
                break;
            }
            // SAFETY: xp_recv's args chain is the caller's.
            let args = unsafe { MbufChain::from_raw(a) };
            let bytes = args.as_ref().map(emu_mbuf::bytes).unwrap_or_default();
            drop(args);
            seen.push((msg.xid, msg.proc_));
            let res = match msg.proc_ {
                CB_NULL => None,
                CB_COMPOUND => {
                    let back: Vec<u8> = bytes.iter().map(|b| b.wrapping_add(1)).collect();
                    Some(emu_mbuf::nfs_chain(&kp, &[Part::Bytes(&back, 0)]))
                }
                _ => {
                    held.store(msg.xid, Ordering::SeqCst);
                    continue;
                }
            };
            let mut seq = 0u32;
            let m = res.map_or(std::ptr::null_mut(), MbufChain::into_raw);
            // SAFETY: live xprt; `m` is consumed by xp_reply.
            let ok = unsafe { krpc_emu_svc_reply(x, msg.xid, SUCCESS, m, &mut seq) };
            assert_eq!(ok, 1, "the backchannel reply went out");
        }
        // SAFETY: live xprt.
        if unsafe { krpc_emu_svc_stat(x) } == XPRT_DIED {
            break;
        }
    }
    seen
}

/// Both ends' configuration: `CREDITS` forward credits, `SLOTS` reverse slots reserved, the
/// receive buffers for both.
fn setup() -> Setup {
    let cfg = TransportConfig {
        max_requests: CREDITS,
        max_reverse_requests: SLOTS,
        ..TransportConfig::default()
    };
    Setup {
        req: cfg,
        resp: cfg,
        limits: Limits {
            recv_bufs: Some(CREDITS + SLOTS),
            ..Limits::default()
        },
    }
}

/// Callbacks on the client's own connection, both ops tables against each other:
/// `clnt_rdma_bck`'s CB_NULL and CB_COMPOUND (its arguments in an mbuf chain, answered by the
/// callback service through the client's backchannel xprt, the results back byte-exact),
/// forward calls in between; a callback the client has no backchannel xprt for (before
/// `CLSET_BACKCHANNEL`) ends `RPC_SYSTEMERROR` once the client reaps (its next call); a
/// callback too large for an inline reverse call fails `RPC_CANTSEND` at once; a callback
/// outstanding when the client goes (`CLNT_DESTROY`: the connection closes) ends
/// `RPC_CANTRECV` at once, not by its timeout. No mbuf left.
#[test]
fn backchannel_callbacks_system_err_and_loss_over_rxe() {
    let Some(mut fx) = emu() else { return };
    let before_mbufs = mbufs_live();
    let kp = KernelPages::new();
    let read_data = Arc::new(Vec::new());
    // SAFETY: plain allocations; destroyed at the end.
    let (pool, cbpool) = unsafe { (krpc_emu_svcpool_create(), krpc_emu_svcpool_create()) };
    assert!(!pool.is_null() && !cbpool.is_null());
    {
        let p = Pair::new(&mut fx, &setup()).unwrap();
        let Pair { l, req, resp } = p;
        let Link { a, b, pa, pb, .. } = l;
        let (xprt, stop, _held, server) = start_server(b, resp.into_inner(), pb, pool, &read_data);
        let cl = nfs_client(a, req.into_inner(), pa, hook);
        let mut n = SLOTS + 1;
        assert_eq!(
            // SAFETY: live CLIENT; a uint32_t.
            unsafe { krpc_emu_clnt_control_u32(cl, CLSET_RDMA_CBSLOTS, &mut n) },
            0,
            "beyond the reserve"
        );
        n = SLOTS;
        // SAFETY: as above.
        assert_eq!(
            unsafe { krpc_emu_clnt_control_u32(cl, CLSET_RDMA_CBSLOTS, &mut n) },
            1
        );
        let mut got = 0u32;
        // SAFETY: as above.
        assert_eq!(
            unsafe { krpc_emu_clnt_control_u32(cl, CLGET_RDMA_CBSLOTS, &mut got) },
            1
        );
        assert_eq!(got, SLOTS);
        // SAFETY: live transport.
        assert_eq!(unsafe { svc_rdma_set_cbslots(xprt, SLOTS) }, 0);
        // SAFETY: live transport, an svc_rdma one.
        let cb = unsafe { clnt_rdma_bck_create(xprt, CB_PROG, 1) };
        assert!(!cb.is_null());

        // A forward call first (the grant opens up).
        let (st, e, _, _) = call(cl, 0, None, TIMEOUT_MS);
        assert_eq!(st, RPC_SUCCESS, "forward NULL: {e:?}");

        // No backchannel xprt yet: the client's transport answers SYSTEM_ERR once it reaps
        // (here: the client's next call).
        let cbp = cb as usize;
        let waiter = thread::spawn(move || {
            let t = Instant::now();
            let (st, e, _, rep) = call(cbp as *mut FbsdClient, CB_NULL, None, TIMEOUT_MS);
            (st, e, rep.is_none(), t.elapsed())
        });
        thread::sleep(Duration::from_millis(200));
        let (st, e, _, _) = call(cl, 0, None, TIMEOUT_MS);
        assert_eq!(st, RPC_SUCCESS, "forward NULL: {e:?}");
        let (st, e, no_rep, took) = waiter.join().unwrap();
        println!("callback without a backchannel xprt: {st} {e:?} after {took:?}");
        assert_eq!(
            st, RPC_SYSTEMERROR,
            "answered SYSTEM_ERR by the client's transport"
        );
        assert!(no_rep && took < Duration::from_secs(5));

        // The backchannel xprt and its service.
        // SAFETY: live pool.
        let bc = unsafe { svc_rdma_create_backchannel(cbpool) };
        assert!(!bc.is_null());
        // SAFETY: live CLIENT; CLSET_BACKCHANNEL takes the SVCXPRT pointer as info.
        let set = unsafe { krpc_emu_clnt_control_u32(cl, CLSET_BACKCHANNEL, bc.cast()) };
        assert_eq!(set, 1, "CLSET_BACKCHANNEL");
        let cbstop = Arc::new(AtomicBool::new(false));
        let cbheld = Arc::new(AtomicU32::new(0));
        let service = {
            let (s, h, x) = (cbstop.clone(), cbheld.clone(), bc as usize);
            thread::spawn(move || cb_service(x, s, h))
        };

        // CB_NULL and CB_COMPOUND, forward calls in between, no client call needed to
        // serve them (the backchannel xprt's pool thread reaps).
        let (st, e, _, rep) = call(cb, CB_NULL, None, TIMEOUT_MS);
        assert_eq!(st, RPC_SUCCESS, "CB_NULL: {e:?}");
        assert!(rep.is_some(), "RPC_SUCCESS always with a chain");
        for i in 0..4u8 {
            let body: Vec<u8> = (0..200u32).map(|x| (x as u8).wrapping_mul(i + 3)).collect();
            let args = emu_mbuf::nfs_chain(&kp, &[Part::Bytes(&body, 0)]);
            let (st, e, _, rep) = call(cb, CB_COMPOUND, Some(&args), TIMEOUT_MS);
            assert_eq!(st, RPC_SUCCESS, "CB_COMPOUND {i}: {e:?}");
            let got = emu_mbuf::bytes(&rep.expect("results"));
            let want: Vec<u8> = body.iter().map(|b| b.wrapping_add(1)).collect();
            assert_eq!(got, want, "CB_COMPOUND {i}: the service's results");
            let (st, _, _, _) = call(cl, 0, None, TIMEOUT_MS);
            assert_eq!(st, RPC_SUCCESS, "forward NULL after callback {i}");
        }

        // Too large for an inline reverse call: refused at once.
        let big = emu_mbuf::nfs_chain(&kp, &[Part::Bytes(&vec![7u8; 64 * 1024], 0)]);
        let t = Instant::now();
        let (st, _, _, rep) = call(cb, CB_COMPOUND, Some(&big), TIMEOUT_MS);
        assert_eq!(st, RPC_CANTSEND, "a callback beyond the inline size");
        assert!(rep.is_none() && t.elapsed() < Duration::from_secs(2));
        drop(big);

        // A short timeout on a callback nobody answers: RPC_TIMEDOUT.
        let (st, _, _, _) = call(cb, CB_HOLD, None, 300);
        assert_eq!(st, RPC_TIMEDOUT);

        // The loss with a callback outstanding (CB_HOLD: received, never answered): the
        // client goes, its connection closes, the callback ends RPC_CANTRECV.
        cbheld.store(0, Ordering::SeqCst);
        let waiter = thread::spawn(move || {
            let t = Instant::now();
            let (st, e, _, rep) = call(cbp as *mut FbsdClient, CB_HOLD, None, TIMEOUT_MS);
            (st, e, rep.is_none(), t.elapsed())
        });
        let t = Instant::now();
        while cbheld.load(Ordering::SeqCst) == 0 && t.elapsed() < Duration::from_secs(10) {
            thread::sleep(Duration::from_millis(5));
        }
        assert_ne!(
            cbheld.load(Ordering::SeqCst),
            0,
            "CB_HOLD reached the service"
        );
        // SAFETY: live CLIENT, not used afterwards (the backchannel xprt lets go of it).
        unsafe { krpc_emu_clnt_destroy(cl) };
        let (st, e, no_rep, took) = waiter.join().unwrap();
        println!("callback outstanding at the loss: {st} {e:?} after {took:?}");
        assert_eq!(st, RPC_CANTRECV, "the loss ends the callback");
        assert!(
            no_rep && took < Duration::from_secs(10),
            "not by its timeout"
        );

        cbstop.store(true, Ordering::SeqCst);
        let seen = service.join().unwrap();
        println!("callback service saw {seen:x?}");
        // The 64 KiB callback was refused before it was sent (RPC_CANTSEND): never seen.
        let procs: Vec<u32> = seen.iter().map(|&(_, p)| p).collect();
        assert_eq!(
            procs,
            [
                CB_NULL,
                CB_COMPOUND,
                CB_COMPOUND,
                CB_COMPOUND,
                CB_COMPOUND,
                CB_HOLD,
                CB_HOLD
            ],
            "CB_NULL, 4 CB_COMPOUND, 2 CB_HOLD"
        );
        // SAFETY: no thread uses them any more; not used afterwards.
        unsafe {
            krpc_emu_svc_release(bc);
            krpc_emu_clnt_destroy(cb);
        }
        stop.store(true, Ordering::SeqCst);
        let _ = server.join().unwrap();
        // SAFETY: as above.
        unsafe { krpc_emu_svc_release(xprt) };
    }
    // SAFETY: every transport is gone.
    unsafe {
        krpc_emu_svcpool_destroy(pool);
        krpc_emu_svcpool_destroy(cbpool);
    }
    assert_no_mbuf_left(before_mbufs);
}
