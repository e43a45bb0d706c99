//! The server: a listener on the module's address and port, an accept thread, a kernel
//! thread per connection running the loop every server of this project runs
//! ([`ServerConnection`]: poll → serve → reply, replies in order, READs held back until the
//! shared page budget admits their data), every call through the reply cache into the
//! NFSv3 service ([`drc::serve`]) over the page file system.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use krpc_rdma::provider::profile::{Profiled, StageProfile};
use krpc_rdma::provider::Provider;
use krpc_rdma::transport::{
    Counters, Responder, ServerConnection, ServerStats, SharedPages, TransportConfig,
};
use krpc_rdma_scenarios::heap::{try_boxed, try_boxed_result, Boxed};
use mbuf::PageProvider;
use nfs_pagefs::{FsState, PageFs};
use nfs_service::lock::Lock;
use nfs_service::nfsd::drc::{self, ReplyCache, Served};
use nfs_service::nfsd::Nfs3Service;
use ofed_shim::wait::{wait_any, GlueSleep, Sleep};
use ofed_shim::{OfedConfig, OfedError, OfedListener, OfedQp};
use onc_rpc::svc::Access;

use crate::sys::{self, KMutex, KThread};

/// The service over the page file system, under kernel mutexes.
pub type Service = Nfs3Service<PageFs<KMutex<FsState>>>;

/// What every thread of the server shares.
pub struct Shared {
    /// The NFSv3 service.
    pub svc: Service,
    /// The duplicate request cache.
    pub drc: KMutex<ReplyCache>,
    /// Every connection's page budget (RDMA Read data, READ reply data).
    pub budget: Arc<SharedPages>,
    /// The page provider of the file system and every Responder (one, so that the file
    /// system keeps the very pages the RDMA Reads filled).
    pub pages: Arc<dyn PageProvider>,
    /// The export's access (root squash by default).
    pub access: Access,
    /// Connections served at once, at most.
    pub max_conns: u32,
    /// Set at stop: every loop ends.
    pub stop: AtomicBool,
    /// Figures.
    pub figures: Figures,
    /// The transport counters of the connections that ended, summed.
    pub ended: KMutex<Counters>,
    /// Every connection's stage profile, summed: what the connections that ended did, and
    /// what live ones did up to their last publication (at most a second old while they
    /// serve calls).
    pub profile: KMutex<StageProfile>,
}

/// The server's figures (atomics: read by the report while the threads run).
#[derive(Default)]
pub struct Figures {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connection requests refused (at `max_conns`, or while unloading).
    pub refused: AtomicU64,
    /// Connections being served.
    pub open: AtomicU64,
    /// Calls received.
    pub calls: AtomicU64,
    /// Replies sent (replays included).
    pub replies: AtomicU64,
    /// Replies sent again from the reply cache.
    pub replays: AtomicU64,
    /// Calls dropped (retransmissions in progress, not calls).
    pub dropped: AtomicU64,
    /// Replies with an NFS status other than NFS3_OK.
    pub nfs_errors: AtomicU64,
    /// Replies the transport refused.
    pub reply_errors: AtomicU64,
}

fn add(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

/// One connection's work, handed to its thread.
struct Work {
    qp: Boxed<OfedQp>,
    resp: Boxed<Responder>,
    client: u64,
}

/// A connection's thread and what it shares with the accept thread.
struct ConnSlot {
    /// Declared first: dropped (stopped and waited for) before `state`.
    _thread: KThread,
    state: Arc<ConnState>,
}

struct ConnState {
    shared: Arc<Shared>,
    /// Taken by the thread when it starts; still here if it was stopped before it ran.
    work: KMutex<Option<Work>>,
    done: AtomicBool,
}

/// What the accept thread owns.
pub struct Acceptor {
    shared: Arc<Shared>,
    listener: KMutex<Option<OfedListener>>,
}

impl Acceptor {
    /// An acceptor for `listener`.
    pub fn new(shared: Arc<Shared>, listener: OfedListener) -> Option<Acceptor> {
        Some(Acceptor {
            shared,
            listener: KMutex::try_new(Some(listener))?,
        })
    }
}

/// The accept thread: `arg` is an `&Acceptor` that outlives the thread (the caller keeps
/// it until the thread is stopped).
pub(crate) extern "C" fn accept_main(arg: *mut c_void) -> i32 {
    // SAFETY: `start` keeps the `Acceptor` alive until this thread has ended.
    let acc = unsafe { thread_arg::<Acceptor>(arg) };
    let Some(mut listener) = acc.listener.with(Option::take) else {
        return 0;
    };
    let sh = &acc.shared;
    // SAFETY: the upcall only wakes the glue's wait queue (any context).
    unsafe { listener.set_upcall(Some(GlueSleep.upcall()), core::ptr::null_mut()) };
    let mut conns: Vec<ConnSlot> = Vec::new();
    while !sys::should_stop() && !sh.stop.load(Ordering::Acquire) {
        reap(&mut conns, false);
        let gen = GlueSleep.generation();
        match next_request(&mut listener) {
            Some(Ok(qp)) => admit(sh, &mut conns, qp),
            Some(Err(_)) => add(&sh.figures.refused, 1),
            None => GlueSleep.sleep(gen, 100),
        }
    }
    sh.stop.store(true, Ordering::Release);
    reap(&mut conns, true);
    drop(listener);
    0
}

/// Stop and forget the connections whose thread ended (`all`: every one, asking them to
/// stop); each gives back its module reference.
fn reap(conns: &mut Vec<ConnSlot>, all: bool) {
    let mut i = 0;
    while i < conns.len() {
        let done = conns
            .get(i)
            .is_some_and(|c| all || c.state.done.load(Ordering::Acquire));
        if done {
            // Stops the thread (waits for it), then drops its state and any work it never
            // took.
            drop(conns.swap_remove(i));
            sys::module_put();
        } else {
            i += 1;
        }
    }
}

/// Accept `qp` and start its thread, or refuse it.
fn admit(sh: &Arc<Shared>, conns: &mut Vec<ConnSlot>, mut qp: Boxed<OfedQp>) {
    let full = conns.len() >= sh.max_conns as usize;
    if full || conns.try_reserve(1).is_err() || !sys::module_get() {
        // Dropping an unaccepted request rejects it.
        add(&sh.figures.refused, 1);
        return;
    }
    let Some(slot) = start_conn(sh, &mut qp).and_then(|resp| spawn(sh, qp, resp)) else {
        add(&sh.figures.refused, 1);
        sys::module_put();
        return;
    };
    conns.push(slot);
    add(&sh.figures.accepted, 1);
}

/// The connection's Responder, its receives posted, the connection accepted.
#[inline(never)]
fn start_conn(sh: &Arc<Shared>, qp: &mut Boxed<OfedQp>) -> Option<Boxed<Responder>> {
    let cfg = OfedConfig::default();
    let mut resp = try_boxed("Responder::new", || {
        Responder::new(
            TransportConfig::default(),
            cfg.resources(),
            sh.pages.clone(),
        )
    })
    .ok()?;
    resp.set_page_share(sh.budget.join());
    // SAFETY: the upcall only wakes the glue's wait queue (any context).
    unsafe { qp.set_upcall(GlueSleep.upcall(), core::ptr::null_mut()) };
    resp.post_receives(&mut **qp);
    qp.accept(&resp.private_data()).ok()?;
    Some(resp)
}

fn spawn(sh: &Arc<Shared>, qp: Boxed<OfedQp>, resp: Boxed<Responder>) -> Option<ConnSlot> {
    let client = client_id(&qp);
    let state = Arc::new(ConnState {
        shared: sh.clone(),
        work: KMutex::try_new(Some(Work { qp, resp, client }))?,
        done: AtomicBool::new(false),
    });
    let arg = Arc::as_ptr(&state).cast_mut().cast::<c_void>();
    // SAFETY: the slot keeps `state` alive until the thread is stopped (`ConnSlot` drops
    // the thread first); the work is owned by `state`, not by the thread's argument.
    let thread = unsafe { KThread::spawn(conn_main, arg, b"krpc_nfsd_conn\0") }?;
    Some(ConnSlot {
        _thread: thread,
        state,
    })
}

/// The reply cache's name of the peer: its IPv4 address (it survives reconnects).
fn client_id(qp: &OfedQp) -> u64 {
    qp.addrs()
        .and_then(|(_, peer)| {
            peer.bytes
                .get(4..8)
                .and_then(|a| <[u8; 4]>::try_from(a).ok())
        })
        .map_or(0, |a| u64::from(u32::from_be_bytes(a)))
}

/// A connection's thread: `arg` is its `&ConnState`.
extern "C" fn conn_main(arg: *mut c_void) -> i32 {
    // SAFETY: the accept thread's `ConnSlot` keeps the state alive until this thread ended.
    let st = unsafe { thread_arg::<ConnState>(arg) };
    if let Some(w) = st.work.with(Option::take) {
        serve(&st.shared, w);
    }
    st.done.store(true, Ordering::Release);
    0
}

/// Serve one connection until it is lost or the server stops; its verbs calls and sleeps
/// timed into a stage profile ([`Profiled`], the kernel's monotonic clock).
fn serve(sh: &Arc<Shared>, w: Work) {
    let Work {
        mut qp,
        resp,
        client,
    } = w;
    let f = &sh.figures;
    add(&f.open, 1);
    let svc = sh.clone();
    let Ok(conn) = ServerConnection::new(resp) else {
        qp.disconnect();
        f.open.fetch_sub(1, Ordering::Relaxed);
        return;
    };
    let mut conn = conn.with_reply_bytes(Box::new(move |c| svc.svc.reply_data_bytes(c)));
    // The queue pair under its stage profile, on the heap (a profile is a few hundred bytes).
    let Ok(mut pq) = try_boxed("stage profile", || {
        Ok::<_, core::convert::Infallible>(Profiled::new(&mut *qp, ofed_shim::wait::monotonic_ns))
    }) else {
        drop(conn);
        qp.disconnect();
        f.open.fetch_sub(1, Ordering::Relaxed);
        return;
    };
    let mut seen = ServerStats::default();
    let mut shown = 0u64;
    loop {
        conn.poll(&mut *pq);
        serve_calls(sh, client, &mut conn, &mut pq);
        let now = *conn.stats();
        if now != seen {
            seen = publish(f, seen, &now);
            shown = publish_profile(sh, shown, &mut pq, false);
        }
        if conn.is_lost() {
            break;
        }
        if sys::should_stop() || sh.stop.load(Ordering::Acquire) {
            pq.disconnect();
            break;
        }
        let ms = conn.wait().millis();
        if ms != 0 {
            pq.sleep(|q| wait_any(&GlueSleep, &mut [&mut **q], ms));
        }
    }
    publish(f, seen, conn.stats());
    publish_profile(sh, shown, &mut pq, true);
    drop(pq);
    let c = *conn.counters();
    sh.ended.with(|e| *e += c);
    // The queue pair first: once it is destroyed the device writes no page the Responder
    // still holds (an RDMA Read in flight at a stop), then the Responder and its pages.
    drop(qp);
    drop(conn);
    f.open.fetch_sub(1, Ordering::Relaxed);
}

/// Every call the connection has ready, through the reply cache into the service, each
/// answered (or dropped) in order. A frame of its own: the service's results are large.
#[inline(never)]
fn serve_calls(
    sh: &Shared,
    client: u64,
    conn: &mut ServerConnection<Boxed<Responder>>,
    pq: &mut Profiled<&mut OfedQp>,
) {
    let f = &sh.figures;
    while let Some(c) = conn.next_call() {
        match drc::serve(&sh.svc, &sh.drc, client, sh.access, &c.call) {
            Served::Reply(d) => {
                if d.status.is_some_and(|s| s != nfs_proto::nfs3::Nfsstat3::OK) {
                    add(&f.nfs_errors, 1);
                }
                drop(c.call);
                drop(conn.reply(pq, c.ctx, d.reply));
            }
            Served::Replay(r) => {
                add(&f.replays, 1);
                drop(c.call);
                drop(conn.reply(pq, c.ctx, r));
            }
            Served::Drop => conn.drop_call(pq, c.ctx),
        }
    }
}

/// Add the connection's stage profile since it was last published (at `shown`, on the
/// kernel's monotonic clock) to the server's, at most once a second (every time when
/// `last`); the new `shown`. A frame of its own: a profile is a few hundred bytes.
#[inline(never)]
fn publish_profile(sh: &Shared, shown: u64, pq: &mut Profiled<&mut OfedQp>, last: bool) -> u64 {
    let now = ofed_shim::wait::monotonic_ns();
    if !last && now.saturating_sub(shown) < 1_000_000_000 {
        return shown;
    }
    let d = pq.delta();
    sh.profile.with(|p| p.add(&d));
    now
}

/// Add what the connection did since `seen` to the server's figures (so the report is
/// current while connections are up; called when something happened, so that an idle pass
/// of the loop touches no shared counter); the new `seen`.
fn publish(f: &Figures, seen: ServerStats, now: &ServerStats) -> ServerStats {
    add(&f.calls, now.calls.saturating_sub(seen.calls));
    add(&f.replies, now.replies.saturating_sub(seen.replies));
    add(&f.dropped, now.dropped.saturating_sub(seen.dropped));
    add(
        &f.reply_errors,
        now.reply_errors.saturating_sub(seen.reply_errors),
    );
    *now
}

/// The listener's next connection request, on the heap (frames of their own: an `OfedQp`
/// is 880 bytes).
#[inline(never)]
fn next_request(l: &mut OfedListener) -> Option<Result<Boxed<OfedQp>, ()>> {
    let next: fn(&mut OfedListener) -> Option<Result<OfedQp, OfedError>> =
        core::hint::black_box(OfedListener::next_request);
    boxed_some(next(l))
}

#[inline(never)]
fn boxed_some(q: Option<Result<OfedQp, OfedError>>) -> Option<Result<Boxed<OfedQp>, ()>> {
    q.map(|q| match try_boxed_result("connection request", q) {
        Ok(Ok(q)) => Ok(q),
        _ => Err(()),
    })
}

/// `arg` as the `&T` a thread was started with.
///
/// # Safety
/// `arg` points to a `T` that stays alive for `'a` (its owner keeps it until the thread has
/// ended).
unsafe fn thread_arg<'a, T>(arg: *mut c_void) -> &'a T {
    // SAFETY: the caller's.
    unsafe { &*arg.cast::<T>() }
}
