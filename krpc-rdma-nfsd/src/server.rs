//! The RPC-over-RDMA side: a verbs listener accepting connections (at most
//! `--max-connections`), one thread and one [`Responder`] per connection, every call through
//! the shared reply cache into [`Nfs3Service::dispatch`], the reply back through the
//! Responder (READ data by RDMA Write into the client's write chunk, long replies by reply
//! chunk). The connections' RDMA Reads and READ data share one page budget
//! ([`ddp_budget`]), fairly.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use krpc_rdma::provider::Provider;
use krpc_rdma::transport::{Counters, Responder, ServerConnection, SharedPages};
use krpc_rdma_verbs::accept::{accept_each, ServerConfig};
use krpc_rdma_verbs::arena::VerbsArena;
use krpc_rdma_verbs::cm::VerbsListener;
use krpc_rdma_verbs::qp::VerbsQp;
use krpc_rdma_verbs::wait;
use mbuf::{Chain, PageProvider};
use nfs_service::lock::Lock;
use nfs_service::nfsd::drc::{self, ReplyCache, Served};
use nfs_service::nfsd::{Backend, Nfs3Service};
use onc_rpc::svc::Access;

use crate::exports::Clients;

use crate::service_time::ServiceTime;

/// Replies the shared reply cache keeps.
pub const DRC_CAPACITY: usize = 1024;

/// The server-wide page budget of the connections in an arena of `arena_bytes`: three
/// quarters of it, shared fairly (`krpc_rdma::transport::shared_pages`: a connection alone
/// may use all of it, one over its fair share waits while the others' calls proceed). It
/// holds the pages of the RDMA Reads (WRITE data) and of the NFS READ replies' data
/// ([`Responder::take_reply_pages`] before the call is served, until the reply's Send
/// completes). The last quarter is for what takes arena pages outside it: the Responders'
/// reply-chunk pages.
pub fn ddp_budget(arena_bytes: usize) -> Arc<SharedPages> {
    SharedPages::new(arena_bytes / 4 * 3)
}

/// What one connection (or all of them) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// Calls received.
    pub calls: u64,
    /// Replies sent (replays included).
    pub replies: u64,
    /// Replies sent again from the reply cache.
    pub replays: u64,
    /// Calls dropped (retransmissions in progress, messages that are not calls).
    pub dropped: u64,
    /// Replies with an NFS status other than NFS3_OK.
    pub nfs_errors: u64,
    /// Of those, by NFSv3 procedure number (0..=21).
    pub nfs_errors_by_proc: [u64; 22],
    /// Replies the transport refused.
    pub reply_errors: u64,
    /// Where the time went, per procedure.
    pub time: ServiceTime,
}

impl ConnStats {
    fn add(&mut self, o: &ConnStats) {
        self.calls += o.calls;
        self.replies += o.replies;
        self.replays += o.replays;
        self.dropped += o.dropped;
        self.nfs_errors += o.nfs_errors;
        for (a, b) in self.nfs_errors_by_proc.iter_mut().zip(o.nfs_errors_by_proc) {
            *a += b;
        }
        self.reply_errors += o.reply_errors;
        self.time.add(&o.time);
    }

    /// One line.
    pub fn summary(&self) -> String {
        let by: Vec<String> = self
            .nfs_errors_by_proc
            .iter()
            .enumerate()
            .filter(|(_, n)| **n != 0)
            .map(|(p, n)| format!("proc {p}: {n}"))
            .collect();
        format!(
            "{} calls, {} replies ({} replays), {} dropped, {} NFS errors [{}], {} reply errors",
            self.calls,
            self.replies,
            self.replays,
            self.dropped,
            self.nfs_errors,
            by.join(", "),
            self.reply_errors
        )
    }
}

/// The counters as one line of `name value` pairs (zeros left out).
pub fn counters_line(c: &Counters) -> String {
    let v: Vec<String> = c
        .fields()
        .iter()
        .filter(|(_, v)| *v != 0)
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    v.join(", ")
}

/// What the server did, at exit.
#[derive(Debug, Clone, Copy, Default)]
pub struct Totals {
    /// Connections served.
    pub connections: u64,
    /// Connect requests rejected at `--max-connections`.
    pub refused: u64,
    /// Calls and replies.
    pub stats: ConnStats,
    /// Responder counters, summed.
    pub counters: Counters,
}

/// How connections are wrapped (`--trace`) and how the verbs QP is found again in the
/// wrapper (to wait on its completion queue).
pub struct QpWrap<Q> {
    /// Wrap an accepted QP, given the peer's name.
    pub wrap: Box<dyn Fn(VerbsQp, String) -> Q + Send + Sync>,
    /// The verbs QP inside.
    pub inner: fn(&mut Q) -> &mut VerbsQp,
}

/// No wrapping.
pub fn plain() -> QpWrap<VerbsQp> {
    QpWrap {
        wrap: Box::new(|qp, _| qp),
        inner: |q| q,
    }
}

/// The reply cache's name of a peer.
fn client_id(peer: Option<SocketAddr>) -> u64 {
    match peer.map(|a| a.ip()) {
        Some(IpAddr::V4(a)) => u64::from(u32::from(a)),
        Some(IpAddr::V6(a)) => {
            let b = a.octets();
            b.iter().fold(0u64, |h, x| h.rotate_left(8) ^ u64::from(*x))
        }
        None => 0,
    }
}

/// Everything the connections share.
pub struct Shared<B> {
    /// The service.
    pub svc: Nfs3Service<B>,
    /// The reply cache.
    pub drc: CacheLock,
    /// Who may use the export and how (matched by a connection's peer address).
    pub clients: Clients,
    /// Set to stop every connection.
    pub stop: &'static AtomicBool,
}

/// Serve one call from a client granted `access`: through the reply cache into the service;
/// the reply, if any, and the procedure it ran (none for a replay, a drop, an RPC-level
/// refusal). `st` counts replays and NFS errors.
pub fn serve_call<B: Backend>(
    sh: &Shared<B>,
    client: u64,
    access: Access,
    call: &Chain,
    st: &mut ConnStats,
) -> (Option<Chain>, Option<u32>) {
    match drc::serve(&sh.svc, &sh.drc, client, access, call) {
        Served::Reply(d) => {
            if d.status.is_some_and(|s| s != nfs_proto::nfs3::Nfsstat3::OK) {
                st.nfs_errors += 1;
                let slot = d
                    .proc_
                    .and_then(|p| st.nfs_errors_by_proc.get_mut(p as usize));
                if let Some(n) = slot {
                    *n += 1;
                }
            }
            (Some(d.reply), d.status.and(d.proc_))
        }
        Served::Replay(r) => {
            st.replays += 1;
            (Some(r), None)
        }
        Served::Drop => (None, None),
    }
}

/// The reply cache under std's mutex (a poisoned lock is taken over: the cache's state is
/// consistent between calls).
pub struct CacheLock(Mutex<ReplyCache>);

impl Lock<ReplyCache> for CacheLock {
    fn new(value: ReplyCache) -> Option<Self> {
        Some(CacheLock(Mutex::new(value)))
    }

    fn with<R>(&self, f: impl FnOnce(&mut ReplyCache) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Serve one connection until it is lost or stopped; its statistics and counters. The
/// loop is poll → serve → reply over a [`ServerConnection`] (ordered reply backlog, READs
/// held back until the shared page budget admits their data pages, dropped calls).
pub fn serve_connection<B: Backend + Send + Sync + 'static, Q: Provider>(
    sh: &Arc<Shared<B>>,
    mut qp: Q,
    inner: fn(&mut Q) -> &mut VerbsQp,
    resp: Responder,
    client: u64,
    access: Access,
) -> (ConnStats, Counters, &'static str) {
    let mut st = ConnStats::default();
    let conn = ServerConnection::new(Box::new(resp)).map_err(|e| e.to_string());
    let mut conn = match conn {
        Ok(c) => {
            let svc = Arc::clone(sh);
            c.with_reply_bytes(Box::new(move |call| svc.svc.reply_data_bytes(call)))
        }
        Err(e) => {
            qp.disconnect();
            println!("connection refused: {e}");
            return (st, Counters::default(), "refused");
        }
    };
    let sched = crate::service_time::sched_now();
    let how = loop {
        let t = Instant::now();
        conn.poll(&mut qp);
        st.time.polled(t);
        while let Some(c) = conn.next_call() {
            let start = Instant::now();
            let (reply, proc_) = serve_call(sh, client, access, &c.call, &mut st);
            let built = Instant::now();
            match reply {
                // Sent, or queued in order behind replies waiting for send resources; a
                // refusal is counted by the connection.
                Some(r) => drop(conn.reply(&mut qp, c.ctx, r)),
                None => conn.drop_call(&mut qp, c.ctx),
            }
            st.time.call(proc_, start, built, Instant::now());
        }
        if conn.is_lost() {
            break "closed";
        }
        if sh.stop.load(Ordering::SeqCst) {
            qp.disconnect();
            break "stopped";
        }
        let ms = conn.wait().millis();
        if ms == 0 {
            continue;
        }
        let t = Instant::now();
        wait::wait(inner(&mut qp), Duration::from_millis(ms.into()));
        st.time.waited(t);
    };
    st.time.sched_since(sched);
    let s = conn.stats();
    st.calls = s.calls;
    st.replies = s.replies;
    st.dropped = s.dropped;
    st.reply_errors = s.reply_errors;
    (st, *conn.counters(), how)
}

/// Accept connections on `listener` until `stop`; serve each on its own thread
/// (krpc-rdma-verbs' [`accept_each`] with `cfg`: `ServerConfig::default()` advertises inline
/// sizes equal to the 4 KiB buffers; its connection limit and shared page budget).
///
/// # Errors
/// A Responder or a thread cannot be created.
pub fn serve<B, Q>(
    sh: &Arc<Shared<B>>,
    arena: &Arc<VerbsArena>,
    listener: &mut VerbsListener,
    cfg: &ServerConfig,
    qpw: QpWrap<Q>,
) -> Result<Totals, String>
where
    B: Backend + Send + Sync + 'static,
    Q: Provider + Send + 'static,
{
    let pages: Arc<dyn PageProvider> = arena.clone();
    let stop = sh.stop;
    let sh = sh.clone();
    let conns = accept_each(
        listener,
        cfg,
        &pages,
        |_| stop.load(Ordering::SeqCst),
        |n| println!("accept: {n}"),
        move |a| {
            let peer = a.peer_name();
            let client = client_id(a.peer);
            let mut q = (qpw.wrap)(a.qp, peer.clone());
            let Some(access) = a.peer.and_then(|p| sh.clients.access_for(p.ip())) else {
                // Not a client of the export: MOUNT refused it too.
                q.disconnect();
                println!("connection from {peer} refused: not in the export's client list");
                return (ConnStats::default(), Counters::default());
            };
            let start = Instant::now();
            let (st, c, how) = serve_connection(&sh, q, qpw.inner, a.responder, client, access);
            println!(
                "connection from {peer} {how} after {:.1} s: {}; transport: {}",
                start.elapsed().as_secs_f64(),
                st.summary(),
                counters_line(&c)
            );
            (st, c)
        },
    )
    .map_err(|e| e.to_string())?;
    let mut totals = Totals {
        refused: conns.refused(),
        ..Totals::default()
    };
    for (st, c) in conns.join() {
        totals.connections += 1;
        totals.stats.add(&st);
        totals.counters = totals.counters.add(&c);
    }
    Ok(totals)
}
