//! Connections made by the krpc face itself, over rxe: `svc_rdma_listen`'s rendezvous
//! transport (each connection request accepted by a pool thread's `xp_recv` and made an
//! `svc_rdma` transport of the same pool), `clnt_rdma_connect` (a `CLIENT` that connects
//! from C to an address) and `clnt_rdma_reconnect_create` (one that makes its connection
//! again after a loss and sends the calls owed a reply again with their XIDs), all compiled
//! unchanged against the emulated `sys/rpc`.

use std::collections::BTreeSet;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use krpc_face::ffi::{FbsdClient, FbsdMbuf, FbsdSvcpool, FbsdSvcxprt, KrpcListenStats};
use krpc_face::mbuf_bridge::MbufChain;
use nfs_proto::nfs3::{NFSPROC3_WRITE, NFS_PROGRAM};
use ofed_testkit::emu_mbuf::{self, Part};
use ofed_testkit::loopback::SockaddrIn;

use super::clnt::{
    assert_empty_results, assert_no_mbuf_left, assert_no_page_left, call, krpc_emu_clnt_destroy,
    mbufs_live, pattern, write_args, RPC_SUCCESS,
};
use super::svc_ops::{
    krpc_emu_svc_recv, krpc_emu_svc_release, krpc_emu_svc_reply, krpc_emu_svc_wait_active,
    krpc_emu_svcpool_create, krpc_emu_svcpool_destroy, live_xprts, SvcMsg, SUCCESS,
};
use super::{emu, emu_stats, sockaddr, KernelPages};

/// The host's `struct timeval` (the emulation is compiled for Linux x86-64).
#[repr(C)]
struct Timeval {
    sec: i64,
    usec: i64,
}

extern "C" {
    fn svc_rdma_listen(
        pool: *mut FbsdSvcpool,
        vnet: *mut c_void,
        addr: *const c_void,
        err: *mut i32,
    ) -> *mut FbsdSvcxprt;
    fn svc_rdma_listen_stats(xprt: *mut FbsdSvcxprt, out: *mut KrpcListenStats);
    fn clnt_rdma_connect(
        vnet: *mut c_void,
        addr: *const c_void,
        prog: u32,
        vers: u32,
        recvsz: usize,
        wait: *mut Timeval,
        err: *mut i32,
    ) -> *mut FbsdClient;
    fn clnt_rdma_reconnect_create(
        vnet: *mut c_void,
        addr: *const c_void,
        prog: u32,
        vers: u32,
        sendsz: usize,
        recvsz: usize,
    ) -> *mut FbsdClient;
    fn krpc_emu_svcpool_track(pool: *mut FbsdSvcpool, on: i32);
    fn krpc_emu_svcpool_take_new(pool: *mut FbsdSvcpool) -> *mut FbsdSvcxprt;
}

/// The procedure the test server echoes (its arguments are its results); 0 is NULL.
const ECHO: u32 = 1;
/// Replies fit inline (the echoes are at most 800 bytes).
const RECVSZ: usize = 1024;

/// What a test server saw.
#[derive(Debug, Default)]
struct Log {
    /// XIDs of the calls handed up, in order.
    received: Vec<u32>,
    /// ... of those it did not answer (hanging).
    held: Vec<u32>,
    replied: usize,
    /// Bytes of WRITE arguments received (NFSv3 WRITE: answered with NFS3_OK).
    write_bytes: usize,
}

/// A server: a rendezvous transport on an address and one thread that serves it and every
/// transport it makes (as svc.c's pool threads, polling each one while it is active).
struct Server {
    rv: usize,
    stop: Arc<AtomicBool>,
    hang: Arc<AtomicBool>,
    log: Arc<Mutex<Log>>,
    t: thread::JoinHandle<Vec<usize>>,
}

impl Server {
    /// Listen on `sa` in `pool` (which tracks its new transports) and serve.
    fn start(pool: *mut FbsdSvcpool, sa: &SockaddrIn) -> Server {
        let mut err = 0;
        // SAFETY: live pool; NULL vnet (one stack in the emulation); `sa` is a valid
        // sockaddr_in the C side copies.
        let rv = unsafe { svc_rdma_listen(pool, std::ptr::null_mut(), sa.as_ptr(), &mut err) };
        assert!(!rv.is_null(), "svc_rdma_listen: errno {err}");
        let stop = Arc::new(AtomicBool::new(false));
        let hang = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Log::default()));
        let t = {
            let (stop, hang, log) = (stop.clone(), hang.clone(), log.clone());
            let (p, r) = (pool as usize, rv as usize);
            thread::spawn(move || serve(p, r, &stop, &hang, &log))
        };
        Server {
            rv: rv as usize,
            stop,
            hang,
            log,
            t,
        }
    }

    fn stats(&self) -> KrpcListenStats {
        let mut s = KrpcListenStats::default();
        // SAFETY: the rendezvous transport lives until `stop`.
        unsafe { svc_rdma_listen_stats(self.rv as *mut FbsdSvcxprt, &mut s) };
        s
    }

    /// Stop serving and end every transport (their connections go) and the listener.
    fn stop(self) -> (Log, KrpcListenStats) {
        let stats = self.stats();
        self.stop.store(true, Ordering::SeqCst);
        let xs = self.t.join().unwrap();
        for x in xs {
            // SAFETY: the test's reference (krpc_emu_svcpool_take_new) and the pool's.
            unsafe { krpc_emu_svc_release(x as *mut FbsdSvcxprt) };
        }
        // SAFETY: the creator's reference and the pool's.
        unsafe { krpc_emu_svc_release(self.rv as *mut FbsdSvcxprt) };
        let log = std::mem::take(&mut *self.log.lock().unwrap());
        (log, stats)
    }
}

/// The server thread: accepts through the rendezvous transport while it is active, takes the
/// transports it made, answers ECHO with the arguments and NULL with nothing (unless
/// hanging: then calls are received and held). Returns the transports it took.
fn serve(
    pool: usize,
    rv: usize,
    stop: &AtomicBool,
    hang: &AtomicBool,
    log: &Mutex<Log>,
) -> Vec<usize> {
    let (pool, rv) = (pool as *mut FbsdSvcpool, rv as *mut FbsdSvcxprt);
    let kp = KernelPages::new();
    let mut xs: Vec<usize> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        // SAFETY: the rendezvous transport lives until the test releases it after joining us.
        if unsafe { krpc_emu_svc_wait_active(rv, 2) } == 1 {
            // SAFETY: a zeroed plain-data struct; live transport; valid out-pointers.
            let mut m: SvcMsg = unsafe { std::mem::zeroed() };
            let mut a: *mut FbsdMbuf = std::ptr::null_mut();
            // SAFETY: as above.
            let got = unsafe { krpc_emu_svc_recv(rv, &mut m, &mut a) };
            assert_eq!(got, 0, "a rendezvous transport hands up no call");
            assert!(a.is_null());
        }
        loop {
            // SAFETY: live pool.
            let x = unsafe { krpc_emu_svcpool_take_new(pool) };
            if x.is_null() {
                break;
            }
            xs.push(x as usize);
        }
        for &x in &xs {
            serve_one(x as *mut FbsdSvcxprt, &kp, hang, log);
        }
    }
    xs
}

/// One turn of a pool thread on `x` (if it is active): every call it hands up.
fn serve_one(x: *mut FbsdSvcxprt, kp: &KernelPages, hang: &AtomicBool, log: &Mutex<Log>) {
    // SAFETY: `x` lives until the test releases it after joining the server thread.
    if unsafe { krpc_emu_svc_wait_active(x, 1) } == 0 {
        return;
    }
    loop {
        // SAFETY: a zeroed plain-data struct.
        let mut m: SvcMsg = unsafe { std::mem::zeroed() };
        let mut a: *mut FbsdMbuf = std::ptr::null_mut();
        // SAFETY: live transport, valid out-pointers.
        if unsafe { krpc_emu_svc_recv(x, &mut m, &mut a) } == 0 {
            return;
        }
        // SAFETY: xp_recv's args chain is the caller's.
        let args = unsafe { MbufChain::from_raw(a) };
        let bytes = args.as_ref().map(emu_mbuf::bytes).unwrap_or_default();
        drop(args);
        let mut l = log.lock().unwrap();
        l.received.push(m.xid);
        if hang.load(Ordering::SeqCst) {
            l.held.push(m.xid);
            continue;
        }
        let res = match m.proc_ {
            ECHO if !bytes.is_empty() => Some(emu_mbuf::nfs_chain(kp, &[Part::Bytes(&bytes, 0)])),
            NFSPROC3_WRITE => {
                l.write_bytes += bytes.len();
                Some(emu_mbuf::nfs_chain(kp, &[Part::Bytes(&[0; 4], 0)]))
            }
            _ => None,
        };
        let r = res.map_or(std::ptr::null_mut(), MbufChain::into_raw);
        let mut seq = 0u32;
        // SAFETY: live transport; `r` is consumed by xp_reply.
        if unsafe { krpc_emu_svc_reply(x, m.xid, SUCCESS, r, &mut seq) } == 1 {
            l.replied += 1;
        }
    }
}

/// What each test starts from: an emulated pool that tracks the transports registered with
/// it, and the mbuf and page counts to come back to.
struct Rig {
    pool: *mut FbsdSvcpool,
    mbufs: (u64, u64, u64),
    pages: u64,
}

impl Rig {
    fn new() -> Rig {
        let (mbufs, pages) = (mbufs_live(), emu_stats().pages_in_use);
        // SAFETY: a fresh pool, destroyed in `finish` after every transport.
        let pool = unsafe { krpc_emu_svcpool_create() };
        // SAFETY: live pool.
        unsafe { krpc_emu_svcpool_track(pool, 1) };
        Rig { pool, mbufs, pages }
    }

    /// The pool destroyed (every transport of it gone by now); no SVCXPRT, mbuf or page
    /// left.
    #[track_caller]
    fn finish(self) {
        // SAFETY: every transport of the pool is gone (the caller's servers stopped).
        unsafe { krpc_emu_svcpool_destroy(self.pool) };
        assert_eq!(live_xprts(), 0, "no SVCXPRT left");
        assert_no_mbuf_left(self.mbufs);
        assert_no_page_left(self.pages);
    }
}

/// An ECHO of `data` through `cl`: the results must be the arguments.
#[track_caller]
fn echo(cl: *mut FbsdClient, kp: &KernelPages, data: &[u8], timeout_ms: u32) {
    let args = emu_mbuf::nfs_chain(kp, &[Part::Bytes(data, 0)]);
    let (st, e1, e2, rep) = call(cl, ECHO, Some(&args), timeout_ms);
    assert_eq!(st, RPC_SUCCESS, "ECHO of {}: {e1:?} / {e2:?}", data.len());
    let got = rep.as_ref().map(emu_mbuf::bytes).unwrap_or_default();
    assert!(
        got == data,
        "ECHO of {} bytes came back different",
        data.len()
    );
}

fn timeval(ms: i64) -> Timeval {
    Timeval {
        sec: ms / 1000,
        usec: (ms % 1000) * 1000,
    }
}

/// `clnt_rdma_connect` to `sa`: the CLIENT or the errno.
fn connect(sa: *const c_void, wait_ms: i64) -> Result<*mut FbsdClient, i32> {
    let mut tv = timeval(wait_ms);
    let mut err = 0;
    // SAFETY: NULL vnet; `sa` a sockaddr the C side copies; valid out-pointers.
    let cl = unsafe {
        clnt_rdma_connect(
            std::ptr::null_mut(),
            sa,
            NFS_PROGRAM,
            3,
            RECVSZ,
            &mut tv,
            &mut err,
        )
    };
    if cl.is_null() {
        Err(err)
    } else {
        assert_eq!(err, 0);
        Ok(cl)
    }
}

/// `svc_rdma_listen` accepts every connection request into an `svc_rdma` transport of its
/// pool; `clnt_rdma_connect` connects from C and its CLIENT carries NULL and echoes of
/// 64-800 bytes; two clients on one listener; a connection to a port nobody listens on
/// fails with an errno (not a hang), as does an address family rdma_cm cannot dial; the
/// listener's counters; everything torn down leaves no transport, mbuf or page.
#[test]
fn svc_rdma_listen_and_clnt_rdma_connect_over_rxe() {
    let Some(_fx) = emu() else { return };
    let rig = Rig::new();
    let (pool, sa) = (rig.pool, sockaddr());
    let srv = Server::start(pool, &sa);
    let kp = KernelPages::new();

    let t = Instant::now();
    let cl = connect(sa.as_ptr(), 10_000).unwrap_or_else(|e| panic!("clnt_rdma_connect: {e}"));
    let connect_time = t.elapsed();
    let (st, e1, e2, rep) = call(cl, 0, None, 10_000);
    assert_eq!(st, RPC_SUCCESS, "NULL: {e1:?} / {e2:?}");
    assert_empty_results(rep, "NULL");
    for i in 0..24usize {
        echo(cl, &kp, &pattern(64 + i * 31, 7, 3, i as u8), 10_000);
    }
    let cl2 = connect(sa.as_ptr(), 10_000).unwrap_or_else(|e| panic!("second client: {e}"));
    echo(cl2, &kp, &pattern(300, 3, 2, 9), 10_000);
    echo(cl, &kp, &pattern(301, 3, 2, 8), 10_000);
    let stats = srv.stats();
    assert_eq!(
        (stats.accepted, stats.refused),
        (2, 0),
        "two connection requests, both accepted"
    );

    // Nobody listens on a fresh port: rdma_cm's reject ends the attempt.
    let nobody = sockaddr();
    let t = Instant::now();
    let e = connect(nobody.as_ptr(), 10_000).expect_err("a connection to nobody");
    assert_ne!(e, 0);
    let refused_in = t.elapsed();
    assert!(
        refused_in < Duration::from_secs(10),
        "refused, not timed out: {refused_in:?}"
    );
    // AF_UNIX (1): not a family rdma_cm dials.
    let unix = [1u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let e = connect(unix.as_ptr().cast(), 1000).expect_err("AF_UNIX");
    assert_ne!(e, 0);

    // SAFETY: live CLIENTs, not used afterwards.
    unsafe {
        krpc_emu_clnt_destroy(cl);
        krpc_emu_clnt_destroy(cl2);
    }
    let (log, _) = srv.stop();
    assert_eq!(log.replied, 1 + 24 + 2, "every call answered");
    rig.finish();
    eprintln!(
        "listen/connect: connected in {connect_time:?}, 27 calls + 1 on a second client; \
         a connection to nobody refused in {refused_in:?}"
    );
}

/// `clnt_rdma_reconnect_create` under a loop of calls from 4 threads: the calls made before
/// the server listens wait for it (the client retries with backoff); then the server stops
/// answering, holds the calls it receives, and restarts (every transport and the listener
/// destroyed, a new listener on the same address): the client makes its connection again
/// and sends the calls owed a reply again **with their XIDs** (every XID the first server
/// held reaches the second), and every call returns exactly once with its own echo.
#[test]
fn clnt_rdma_reconnect_survives_a_server_restart_over_rxe() {
    let Some(_fx) = emu() else { return };
    let rig = Rig::new();
    let (pool, sa) = (rig.pool, sockaddr());
    // SAFETY: NULL vnet; `sa` a sockaddr the C side copies.
    let cl = unsafe {
        clnt_rdma_reconnect_create(std::ptr::null_mut(), sa.as_ptr(), NFS_PROGRAM, 3, 0, RECVSZ)
    };
    assert!(!cl.is_null());

    const THREADS: usize = 4;
    const CALLS: usize = 40;
    let done = Arc::new(AtomicUsize::new(0));
    let callers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (c, done) = (cl as usize, done.clone());
            thread::spawn(move || {
                let kp = KernelPages::new();
                for i in 0..CALLS {
                    let n = 64 + (t * CALLS + i) * 37 % 700;
                    echo(
                        c as *mut FbsdClient,
                        &kp,
                        &pattern(n, 5, 2, (t * 64 + i) as u8),
                        60_000,
                    );
                    done.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();

    // Nobody listens yet: the first calls wait through failed attempts.
    thread::sleep(Duration::from_millis(300));
    assert_eq!(
        done.load(Ordering::SeqCst),
        0,
        "no call answered without a server"
    );
    let s1 = Server::start(pool, &sa);
    let until = |what: &str, f: &dyn Fn() -> bool| {
        let t = Instant::now();
        while !f() {
            assert!(t.elapsed() < Duration::from_secs(30), "waiting for {what}");
            thread::sleep(Duration::from_millis(5));
        }
    };
    until("40 answers from the first server", &|| {
        s1.log.lock().unwrap().replied >= 40
    });
    s1.hang.store(true, Ordering::SeqCst);
    until("calls held by the first server", &|| {
        s1.log.lock().unwrap().held.len() >= THREADS
    });
    let answered_before = done.load(Ordering::SeqCst);
    let (log1, st1) = s1.stop();
    thread::sleep(Duration::from_millis(300));
    let s2 = Server::start(pool, &sa);
    for c in callers {
        c.join().unwrap();
    }
    let (log2, st2) = s2.stop();
    assert_eq!(
        done.load(Ordering::SeqCst),
        THREADS * CALLS,
        "every call answered"
    );
    let second: BTreeSet<u32> = log2.received.iter().copied().collect();
    let lost: Vec<_> = log1.held.iter().filter(|x| !second.contains(x)).collect();
    assert!(
        lost.is_empty(),
        "calls held by the first server reach the second with their XIDs: missing {lost:x?}"
    );
    assert!(
        log1.replied + log2.replied >= THREADS * CALLS,
        "every call answered by one of the servers"
    );
    assert_eq!(
        (st1.accepted, st2.accepted),
        (1, 1),
        "one connection per server"
    );

    // SAFETY: live CLIENT, not used afterwards.
    unsafe { krpc_emu_clnt_destroy(cl) };
    rig.finish();
    eprintln!(
        "reconnect: {} calls from {THREADS} threads; {answered_before} answered before the \
         restart, {} held by the first server and resent with their XIDs; first server \
         {} received / {} replied, second {} / {}",
        THREADS * CALLS,
        log1.held.len(),
        log1.received.len(),
        log1.replied,
        log2.received.len(),
        log2.replied
    );
}

/// What FreeBSD's NFS client does to a reconnecting `clnt_rdma` when it writes a file: many
/// NFSv3 WRITEs of 64 KiB + 3 in flight at once from several threads (its nfsiods), each
/// with its data behind the marker in M_EXTPG mbufs (a read chunk), more than the
/// connection's credits: every call returns `RPC_SUCCESS` and the server receives every
/// byte.
#[test]
fn clnt_rdma_reconnect_many_ddp_writes_in_flight_over_rxe() {
    let Some(_fx) = emu() else { return };
    let rig = Rig::new();
    let (pool, sa) = (rig.pool, sockaddr());
    let srv = Server::start(pool, &sa);
    // SAFETY: NULL vnet; `sa` a sockaddr the C side copies.
    let cl = unsafe {
        clnt_rdma_reconnect_create(std::ptr::null_mut(), sa.as_ptr(), NFS_PROGRAM, 3, 0, RECVSZ)
    };
    assert!(!cl.is_null());
    const THREADS: usize = 8;
    const CALLS: usize = 16;
    const N: usize = (64 << 10) + 3;
    let t0 = Instant::now();
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let c = cl as usize;
            thread::spawn(move || {
                let kp = KernelPages::new();
                let data = pattern(N, 3, 5, t as u8);
                for i in 0..CALLS {
                    let (args, _) = write_args(&kp, t as u8, &data);
                    let (st, e1, e2, _) =
                        call(c as *mut FbsdClient, NFSPROC3_WRITE, Some(&args), 60_000);
                    assert_eq!(st, RPC_SUCCESS, "thread {t} WRITE {i}: {e1:?} / {e2:?}");
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let took = t0.elapsed();
    // SAFETY: live CLIENT, not used afterwards.
    unsafe { krpc_emu_clnt_destroy(cl) };
    let (log, _) = srv.stop();
    assert_eq!(log.replied, THREADS * CALLS, "every WRITE answered once");
    assert!(
        log.write_bytes >= THREADS * CALLS * N,
        "the server received every byte: {} of at least {}",
        log.write_bytes,
        THREADS * CALLS * N
    );
    rig.finish();
    eprintln!(
        "{} WRITEs of {N} bytes from {THREADS} threads in {took:?}",
        THREADS * CALLS
    );
}
