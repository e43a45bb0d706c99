//! The `server`, `client`, `bench` and `demo` commands: the [`rpc`] program over
//! the transport over the libibverbs provider.
//!
//! * [`serve`]: listen, one thread per connection (its own queue pair, `Responder` and
//!   store); a one-line summary per connection, totals at exit (`--count` connections,
//!   `--duration`, SIGINT or SIGTERM).
//! * [`client`]: one connection, `depth` calls in flight (never more than the server's credit
//!   grant: the `Requester` refuses, the client waits), every reply verified; progress once a
//!   second on stderr; a [`Report`]. A READ run first WRITEs the `depth` slots it reads
//!   (not measured). Call `i` uses offset `(i % depth) * size`.
//! * [`bench()`]: a server thread and a client in one process over rxe loopback.
//! * [`demo`]: WRITE then READ at several sizes, NULL, ECHO (Long Call / Long Reply), short
//!   throughput runs, and what the counters say.
//!
//! Errors are one line ([`RunError`]); a lost connection reports the calls completed and
//! the calls lost ([`RunError::Lost`]).

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use krpc_rdma::provider::profile::{Profiled, StageProfile};
use krpc_rdma::transport::{
    CallError, Counters, DdpReply, ReplySpec, RequesterEvent, Responder, ServerConnection,
    SharedPages, TransportConfig,
};
use mbuf::{Chain, PageProvider, PAGE_SIZE};

use crate::report::{counters_human, Latency, Report};
use crate::rpc::{self, ServerStats, Workload};
use crate::session::{Conn, Dialer, VerbsDialer};
use crate::trace::{Traced, Tracer};
use crate::verbs::accept::{accept_each, ConnLimits, ServerConfig};
use crate::verbs::arena::VerbsArena;
use crate::verbs::cm::VerbsListener;
use crate::verbs::device::Device;
use crate::verbs::qp::VerbsQp;
use crate::verbs::signals::{self, STOP};
use crate::verbs::{self, VerbsError};

/// The message for a machine without an RDMA device.
pub const NO_DEVICE: &str =
    "no RDMA device found (is rdma_rxe loaded? try 'cargo xtask vm -- userspace-harness ...')";

/// Largest `--size`: what one chunk may carry.
pub const MAX_SIZE: usize = 2 << 20;

/// Most calls in flight: the credits a requester asks for.
pub const MAX_DEPTH: u32 = 64;

/// Seconds without any reply, calls outstanding, before the client gives up.
const STALL: Duration = Duration::from_secs(30);

pub use krpc_rdma_session::RunError;

fn verbs_err(e: VerbsError) -> RunError {
    match e {
        VerbsError::NoDevice => RunError::Failed(NO_DEVICE.into()),
        e => RunError::Failed(e.to_string()),
    }
}

fn open_device() -> Result<Arc<Device>, RunError> {
    if !verbs::rdma_present() {
        return Err(RunError::Failed(NO_DEVICE.into()));
    }
    Device::open(None).map_err(verbs_err)
}

fn arena(dev: &Arc<Device>, bytes: usize) -> Result<Arc<VerbsArena>, RunError> {
    VerbsArena::new(dev, bytes.div_ceil(PAGE_SIZE))
        .map_err(|e| RunError::Failed(format!("registering a {} MiB arena: {e}", bytes >> 20)))
}

// ---------------------------------------------------------------------------------------
// Server

/// Where the server's lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Print {
    /// Standard output (the `server` command).
    Stdout,
    /// Standard error (the server thread of `bench` and `demo`).
    Stderr,
    /// Nowhere.
    Quiet,
}

impl Print {
    fn line(self, s: &str) {
        match self {
            Print::Stdout => println!("{s}"),
            Print::Stderr => eprintln!("{s}"),
            Print::Quiet => {}
        }
    }
}

/// Options of the server.
#[derive(Debug, Clone)]
pub struct ServerOpts {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Stop after serving this many connections.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Arena bytes (shared by every connection).
    pub arena_bytes: usize,
    /// Trace file.
    pub trace: Option<Arc<Tracer>>,
    /// Where summaries go.
    pub print: Print,
    /// Connection limit.
    pub limits: ConnLimits,
}

/// What a server did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerTotals {
    /// Connections served.
    pub connections: u64,
    /// RPC statistics, summed.
    pub stats: ServerStats,
    /// Responder counters, summed.
    pub counters: Counters,
    /// Where the connections' time went (their stage profiles, summed).
    pub profile: StageProfile,
}

impl ServerTotals {
    /// The report printed at exit.
    pub fn human(&self) -> String {
        let mut out = format!(
            "server: {} connections, {}\n",
            self.connections,
            self.stats.summary()
        );
        out.push_str(&counters_human("server transport", &self.counters));
        out.push_str(&format!("server stage profile: {}\n", self.profile));
        out
    }
}

/// A bound server, not yet serving (so binding errors surface before anything starts).
pub struct BoundServer {
    opts: ServerOpts,
    arena: Arc<VerbsArena>,
    listener: VerbsListener,
}

impl fmt::Debug for BoundServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundServer")
            .field("listen", &self.opts.listen)
            .finish_non_exhaustive()
    }
}

/// Open the device, register the arena, listen.
///
/// # Errors
/// No device, address in use, address not on an RDMA device.
pub fn bind_server(opts: ServerOpts) -> Result<BoundServer, RunError> {
    let dev = open_device()?;
    let arena = arena(&dev, opts.arena_bytes)?;
    let listener = VerbsListener::bind(&arena, opts.listen)
        .map_err(|e| RunError::Failed(format!("cannot listen on {}: {e}", opts.listen)))?;
    Ok(BoundServer {
        opts,
        arena,
        listener,
    })
}

/// Serve connections until `--count`, `--duration`, `stop` or a signal (with
/// `signals`).
///
/// # Errors
/// A failing accept that is not a timeout is reported and serving goes on; this returns
/// errors only for resources that cannot be created.
pub fn serve(
    bound: BoundServer,
    stop: &Arc<AtomicBool>,
    signals: bool,
) -> Result<ServerTotals, RunError> {
    let BoundServer {
        opts,
        arena,
        mut listener,
    } = bound;
    if signals {
        signals::install();
    }
    let start = Instant::now();
    let pages: Arc<dyn PageProvider> = arena.clone();
    let conn_pages = pages.clone();
    let conn_stop = stop.clone();
    let (trace, print) = (opts.trace.clone(), opts.print);
    // Every connection's RDMA Reads draw on one budget, the arena's size, fairly.
    let cfg = ServerConfig::default()
        .with_limits(opts.limits)
        .sharing_pages(SharedPages::new(opts.arena_bytes));
    let conns = accept_each(
        &mut listener,
        &cfg,
        &pages,
        |accepted| {
            STOP.load(Ordering::SeqCst)
                || stop.load(Ordering::SeqCst)
                || opts.count.is_some_and(|n| accepted >= n)
                || opts.duration.is_some_and(|d| start.elapsed() >= d)
        },
        |e| print.line(&format!("accept: {e}")),
        move |a| {
            let peer = a.peer_name();
            let qp = Traced::new(a.qp, trace.clone(), peer.clone());
            serve_connection(
                qp,
                a.responder,
                conn_pages.clone(),
                &conn_stop,
                &peer,
                print,
            )
        },
    )
    .map_err(|e| RunError::Failed(e.to_string()))?;
    // Stop live connections only when told to (count reached: let them finish).
    if STOP.load(Ordering::SeqCst) || opts.duration.is_some_and(|d| start.elapsed() >= d) {
        stop.store(true, Ordering::SeqCst);
    }
    let mut totals = ServerTotals::default();
    for (stats, counters, profile) in conns.join() {
        totals.connections += 1;
        totals.stats.add(&stats);
        totals.counters = totals.counters.add(&counters);
        totals.profile.add(&profile);
    }
    if let Some(t) = &opts.trace {
        t.flush()?;
    }
    Ok(totals)
}

/// Nanoseconds of a monotonic clock started at the first call: the stage profile's clock.
fn mono_ns() -> u64 {
    static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    u64::try_from(T0.get_or_init(Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Serve one connection until it is lost or `stop`: poll → serve → reply over a
/// [`ServerConnection`] (replies wait for send resources in order), its verbs calls and
/// sleeps timed into a stage profile.
fn serve_connection(
    qp: Traced<VerbsQp>,
    resp: Responder,
    pages: Arc<dyn PageProvider>,
    stop: &AtomicBool,
    peer: &str,
    print: Print,
) -> (ServerStats, Counters, StageProfile) {
    let mut srv = rpc::Server::new(pages);
    let start = Instant::now();
    let mut qp = Profiled::new(qp, mono_ns);
    let mut conn = match ServerConnection::new(Box::new(resp)) {
        Ok(c) => c,
        Err(e) => {
            qp.inner_mut().inner_mut().disconnect();
            print.line(&format!("connection from {peer} refused: {e}"));
            return (srv.stats, Counters::default(), qp.profile());
        }
    };
    let how = loop {
        conn.poll(&mut qp);
        while let Some(c) = conn.next_call() {
            let reply = srv.handle(&c.call).or_else(|_| srv.system_error(c.xid));
            drop(c.call);
            match reply {
                // Sent or queued in order; a refusal is counted by the connection.
                Ok(r) => drop(conn.reply(&mut qp, c.ctx, r)),
                Err(_) => conn.drop_call(&mut qp, c.ctx),
            }
        }
        if conn.is_lost() {
            break "closed";
        }
        if stop.load(Ordering::SeqCst) || STOP.load(Ordering::SeqCst) {
            qp.inner_mut().inner_mut().disconnect();
            break "stopped";
        }
        // Calls or replies waiting for pages another connection holds, or for send
        // resources, wake nothing here: `Wait::millis` says how long to sleep.
        let ms = conn.wait().millis();
        if ms > 0 {
            qp.sleep(|t| verbs::wait::wait(t.inner_mut(), Duration::from_millis(ms.into())));
        }
    };
    let mut stats = srv.stats;
    stats.errors += conn.stats().reply_errors + conn.stats().dropped;
    let profile = qp.profile();
    print.line(&format!(
        "connection from {peer} {how} after {:.1} s: {}\n  stage profile: {profile}",
        start.elapsed().as_secs_f64(),
        stats.summary()
    ));
    (stats, *conn.counters(), profile)
}

// ---------------------------------------------------------------------------------------
// Client

/// Options of a client run.
#[derive(Debug, Clone)]
pub struct ClientOpts {
    /// The server.
    pub server: SocketAddr,
    /// The workload.
    pub workload: Workload,
    /// Bytes per WRITE / READ.
    pub size: usize,
    /// Calls in flight.
    pub depth: u32,
    /// Calls to make (when no duration).
    pub count: Option<u64>,
    /// How long to run.
    pub duration: Option<Duration>,
    /// Progress on stderr once a second.
    pub progress: bool,
    /// Trace file.
    pub trace: Option<Arc<Tracer>>,
    /// Reconnect after a lost connection and resend the calls owed a reply (same XIDs),
    /// giving up after this long without a connection (the command's default:
    /// `krpc_rdma_session::DEFAULT_GIVE_UP`); `None` (`--no-reconnect`): a lost connection
    /// ends the run (exit status 3).
    pub reconnect: Option<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Write,
    Read,
    Echo,
}

#[derive(Debug)]
struct Op {
    kind: Kind,
    offset: u64,
    len: usize,
    start: Instant,
}

/// One finished call.
#[derive(Debug)]
struct Done {
    lat_ns: u64,
    /// `Err` for a failed call or bad data.
    result: Result<(), String>,
}

struct Staged {
    xid: u32,
    call: Chain,
    reply: ReplySpec,
    op: Op,
}

/// One client: the requester of the current connection, its queue pair, the calls in flight
/// and, with reconnection on, the kept copies of the calls owed a reply.
struct Driver {
    c: Conn<VerbsDialer>,
    pages: Arc<dyn PageProvider>,
    peer: SocketAddr,
    next_xid: u32,
    inflight: HashMap<u32, Op>,
    staged: Option<Staged>,
    completed: u64,
    last_progress: Instant,
}

impl Driver {
    fn connect(
        server: SocketAddr,
        arena_bytes: usize,
        trace: Option<Arc<Tracer>>,
        reconnect: Option<Duration>,
    ) -> Result<Driver, RunError> {
        let c = Conn::open(
            VerbsDialer::new(server, arena_bytes, trace)?,
            TransportConfig::default(),
            reconnect,
        )?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.subsec_nanos());
        Ok(Driver {
            pages: c.dialer.pages().clone(),
            c,
            peer: server,
            next_xid: seed,
            inflight: HashMap::new(),
            staged: None,
            completed: 0,
            last_progress: Instant::now(),
        })
    }

    fn lost(&self, lost: u64) -> RunError {
        RunError::Lost {
            peer: self.peer.to_string(),
            completed: self.completed,
            lost,
        }
    }

    /// Counters of every connection so far.
    fn counters(&self) -> Counters {
        self.c.counters()
    }

    /// The connection is gone: without reconnection, the run ends; with it, connect again
    /// (backing off between attempts, giving up after `give_up`) and resend the owed calls.
    fn reconnect(&mut self) -> Result<(), RunError> {
        let owed = self.inflight.len() as u64;
        if let Err(e) = self.c.reconnect(&|| STOP.load(Ordering::SeqCst)) {
            if self.c.reconnects_enabled() {
                eprintln!("userspace-harness: {e}");
            }
            return Err(self.lost(owed));
        }
        self.last_progress = Instant::now();
        Ok(())
    }

    /// Build the next call (it is sent by [`Driver::try_send`]).
    fn stage(&mut self, kind: Kind, offset: u64, len: usize) -> Result<(), RunError> {
        let xid = self.next_xid;
        self.next_xid = self.next_xid.wrapping_add(1);
        let (call, reply) = match kind {
            Kind::Null => (rpc::null_call(xid)?, ReplySpec::inline(256)),
            Kind::Write => (
                rpc::write_call(&self.pages, xid, offset, len)?,
                ReplySpec::inline(256),
            ),
            Kind::Read => {
                let pages = Chain::alloc_pages(&self.pages, len)
                    .map_err(|e| RunError::Failed(format!("page allocation: {e}")))?;
                (
                    rpc::read_call(xid, offset, u32::try_from(len).unwrap_or(u32::MAX))?,
                    ReplySpec {
                        max_reply: len + 256,
                        ddp: Some(DdpReply {
                            pages,
                            locate: rpc::locate_read,
                        }),
                    },
                )
            }
            Kind::Echo => (rpc::echo_call(xid, len)?, ReplySpec::inline(len + 256)),
        };
        self.staged = Some(Staged {
            xid,
            call,
            reply,
            op: Op {
                kind,
                offset,
                len,
                start: Instant::now(),
            },
        });
        Ok(())
    }

    /// Send the staged call if the credits and resources allow; `Ok(true)` when sent.
    fn try_send(&mut self) -> Result<bool, RunError> {
        if self.c.req.outstanding() >= self.c.req.credits_granted() {
            return Ok(false);
        }
        let Some(s) = self.staged.take() else {
            return Ok(false);
        };
        let Staged {
            xid,
            call,
            reply,
            mut op,
        } = s;
        op.start = Instant::now();
        let sent = self.c.call(call, reply);
        match sent {
            Ok(()) => {
                self.inflight.insert(xid, op);
                Ok(true)
            }
            Err(rej) => match rej.error {
                CallError::NoCredit | CallError::WouldBlock => {
                    self.staged = Some(Staged {
                        xid,
                        call: rej.call,
                        reply: rej.reply,
                        op,
                    });
                    Ok(false)
                }
                CallError::ConnectionLost if self.c.reconnects_enabled() => {
                    self.staged = Some(Staged {
                        xid,
                        call: rej.call,
                        reply: rej.reply,
                        op,
                    });
                    Ok(false) // the next pump sees the loss and reconnects
                }
                CallError::ConnectionLost => Err(self.lost(self.inflight.len() as u64 + 1)),
                e => Err(RunError::Failed(format!("call refused: {e}"))),
            },
        }
    }

    /// Reap replies, waiting up to `wait` when none is ready.
    fn pump(&mut self, wait: Duration) -> Result<Vec<Done>, RunError> {
        let mut evs = Vec::new();
        self.c.poll(wait, &mut evs);
        let now = Instant::now();
        let mut done = Vec::new();
        let mut lost = false;
        let mut lost_calls = 0u64;
        for e in evs {
            match e {
                RequesterEvent::Reply { xid, reply } => {
                    let Some(op) = self.inflight.remove(&xid) else {
                        continue;
                    };
                    let result = self.verify(&op, xid, &reply);
                    drop(reply);
                    self.completed += 1;
                    done.push(Done {
                        lat_ns: u64::try_from(now.duration_since(op.start).as_nanos())
                            .unwrap_or(u64::MAX),
                        result,
                    });
                }
                RequesterEvent::Failed { xid, error, .. } => {
                    if self.inflight.remove(&xid).is_none() {
                        continue;
                    }
                    if error == CallError::ConnectionLost {
                        lost = true;
                        lost_calls += 1;
                    } else {
                        self.completed += 1;
                        done.push(Done {
                            lat_ns: 0,
                            result: Err(format!("call {xid:#x} failed: {error}")),
                        });
                    }
                }
                RequesterEvent::ConnectionLost => lost = true,
                // No reverse slots are enabled here: the transport hands up no reverse call.
                RequesterEvent::Connected(_) | RequesterEvent::ReverseCall(_) => {}
            }
        }
        if lost {
            if self.c.reconnects_enabled() {
                self.reconnect()?;
                return Ok(done);
            }
            return Err(self.lost(lost_calls + self.inflight.len() as u64));
        }
        if !done.is_empty() || self.inflight.is_empty() {
            self.last_progress = now;
        } else if now.duration_since(self.last_progress) >= STALL {
            return Err(RunError::Failed(format!(
                "no reply from {} for {} s: {} calls completed, {} outstanding",
                self.peer,
                STALL.as_secs(),
                self.completed,
                self.inflight.len()
            )));
        }
        Ok(done)
    }

    fn verify(&self, op: &Op, xid: u32, reply: &Chain) -> Result<(), String> {
        match op.kind {
            Kind::Null => rpc::check_reply_header(reply, xid),
            Kind::Write => match rpc::write_result(reply, xid)? {
                (rpc::STATUS_OK, 0, n) if n as usize == op.len => Ok(()),
                (st, bad, n) => Err(format!(
                    "WRITE {xid:#x} of {} B at {}: server status {st}, {bad} mismatched bytes, \
                     {n} written",
                    op.len, op.offset
                )),
            },
            Kind::Read => match rpc::verify_read(reply, xid, op.offset, op.len, &*self.pages)? {
                0 => Ok(()),
                bad => Err(format!(
                    "READ {xid:#x} of {} B at {}: {bad} bytes differ",
                    op.len, op.offset
                )),
            },
            Kind::Echo => rpc::verify_echo(reply, xid, op.len, &*self.pages),
        }
    }

    /// One call, waited for.
    fn one(&mut self, kind: Kind, offset: u64, len: usize) -> Result<Done, RunError> {
        self.stage(kind, offset, len)?;
        while !self.try_send()? {
            self.pump(Duration::from_millis(10))?;
        }
        loop {
            if let Some(d) = self.pump(Duration::from_millis(100))?.pop() {
                return Ok(d);
            }
        }
    }
}

/// What one measured phase gave.
struct Phase {
    ops: u64,
    secs: f64,
    lat: Vec<u64>,
    errors: u64,
    first_error: Option<String>,
}

fn kind_of(w: Workload) -> Kind {
    match w {
        Workload::Null => Kind::Null,
        Workload::Write => Kind::Write,
        Workload::Read => Kind::Read,
    }
}

/// Run calls of `kind`, `depth` in flight, until `count` calls or `duration`.
fn phase(
    d: &mut Driver,
    kind: Kind,
    size: usize,
    depth: u32,
    count: Option<u64>,
    duration: Option<Duration>,
    progress: bool,
) -> Result<Phase, RunError> {
    let start = Instant::now();
    let mut next_progress = start + Duration::from_secs(1);
    let slots = u64::from(depth.max(1));
    let (mut issued, mut ops, mut errors) = (0u64, 0u64, 0u64);
    let mut lat = Vec::new();
    let mut first_error = None;
    loop {
        let time_up = duration.is_some_and(|t| start.elapsed() >= t);
        let more = !time_up && count.is_none_or(|n| issued < n);
        if !more {
            d.staged = None;
        }
        while more && (d.inflight.len() as u64) < slots {
            if d.staged.is_none() {
                d.stage(kind, (issued % slots) * size as u64, size)?;
            }
            if !d.try_send()? {
                break;
            }
            issued += 1;
            if count.is_some_and(|n| issued >= n) {
                break;
            }
        }
        if !more && d.inflight.is_empty() {
            break;
        }
        for done in d.pump(Duration::from_millis(50))? {
            ops += 1;
            lat.push(done.lat_ns);
            if let Err(e) = done.result {
                errors += 1;
                first_error.get_or_insert(e);
            }
        }
        if progress && Instant::now() >= next_progress {
            let t = start.elapsed().as_secs_f64();
            eprintln!(
                "[{t:5.1} s] {ops} ops, {:.0} ops/s{}",
                ops as f64 / t,
                if errors > 0 {
                    format!(", {errors} errors")
                } else {
                    String::new()
                }
            );
            next_progress += Duration::from_secs(1);
        }
    }
    Ok(Phase {
        ops,
        secs: start.elapsed().as_secs_f64(),
        lat,
        errors,
        first_error,
    })
}

fn client_arena_bytes(size: usize, depth: u32) -> usize {
    // Call pages and reply pages of every call in flight, plus one call being built, plus
    // transport pages (Long Calls, reply chunks), with room against fragmentation.
    (size.next_multiple_of(PAGE_SIZE) + 2 * PAGE_SIZE) * (depth as usize + 1) * 4 + (16 << 20)
}

/// Run a client; the report of the measured phase. Verification failures are counted in
/// `errors` (and the first is printed on stderr).
///
/// # Errors
/// No device, a refused connection, a lost connection, a stalled server.
pub fn client(o: &ClientOpts) -> Result<Report, RunError> {
    let mut d = Driver::connect(
        o.server,
        client_arena_bytes(o.size, o.depth),
        o.trace.clone(),
        o.reconnect,
    )?;
    let r = client_on(&mut d, o);
    drop(d);
    if let Some(t) = &o.trace {
        t.flush()?;
    }
    r
}

fn client_on(d: &mut Driver, o: &ClientOpts) -> Result<Report, RunError> {
    let size = if o.workload == Workload::Null {
        0
    } else {
        o.size
    };
    if o.workload == Workload::Read {
        // The slots READ will read: WRITE them first (not measured).
        let pre = phase(
            d,
            Kind::Write,
            size,
            o.depth,
            Some(u64::from(o.depth)),
            None,
            false,
        )?;
        if let Some(e) = pre.first_error {
            return Err(RunError::Failed(format!("preparing the READ run: {e}")));
        }
    }
    let count = if o.duration.is_none() {
        Some(o.count.unwrap_or(1000))
    } else {
        o.count
    };
    let mut p = phase(
        d,
        kind_of(o.workload),
        size,
        o.depth,
        count,
        o.duration,
        o.progress,
    )?;
    if let Some(e) = &p.first_error {
        eprintln!("userspace-harness: {} errors; first: {e}", p.errors);
    }
    let (reconnects, resent) = d.c.reconnect_stats();
    if reconnects > 0 {
        eprintln!("userspace-harness: {reconnects} reconnects, {resent} calls resent");
    }
    Ok(Report {
        workload: o.workload,
        size,
        depth: o.depth,
        ops: p.ops,
        secs: p.secs,
        lat: Latency::of(&mut p.lat),
        errors: p.errors,
        counters: d.counters(),
    })
}

/// What `bench` gives: the client's report and the server's totals.
#[derive(Debug)]
pub struct BenchResult {
    /// The client's report.
    pub report: Report,
    /// The server thread's totals.
    pub server: ServerTotals,
}

/// The in-process server thread of `bench` and `demo`.
type ServerThread = std::thread::JoinHandle<Result<ServerTotals, RunError>>;

/// Serve `bound` on a thread of its own; its stop flag and handle.
fn spawn_server(bound: BoundServer) -> Result<(Arc<AtomicBool>, ServerThread), RunError> {
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let srv = std::thread::Builder::new()
        .name("server".into())
        .spawn(move || serve(bound, &st, false))
        .map_err(|e| RunError::Failed(format!("spawning the server thread: {e}")))?;
    Ok((stop, srv))
}

/// A server thread on `addr` serving one connection, and a client connecting to it.
///
/// # Errors
/// As [`client`] and [`bind_server`].
pub fn bench(o: &ClientOpts, server_print: Print) -> Result<BenchResult, RunError> {
    let bound = bind_server(ServerOpts {
        listen: o.server,
        count: Some(1),
        duration: None,
        arena_bytes: client_arena_bytes(o.size, o.depth),
        trace: o.trace.clone(),
        print: server_print,
        limits: ConnLimits::default(),
    })?;
    let (stop, srv) = spawn_server(bound)?;
    let res = client(o);
    if res.is_err() {
        stop.store(true, Ordering::SeqCst);
    }
    let server = srv
        .join()
        .map_err(|_| RunError::Failed("the server thread panicked".into()))??;
    Ok(BenchResult {
        report: res?,
        server,
    })
}

// ---------------------------------------------------------------------------------------
// Demo

fn chunk_kinds(a: &Counters, b: &Counters) -> String {
    let mut v = Vec::new();
    if b.long_calls > a.long_calls {
        v.push("Long Call (position-zero read chunk)".to_string());
    }
    let reads = b.read_chunks - a.read_chunks;
    if reads > b.long_calls - a.long_calls {
        v.push(format!(
            "read chunk ({} B exposed to RDMA Read)",
            b.rdma_read_bytes - a.rdma_read_bytes
        ));
    }
    if b.write_chunks > a.write_chunks {
        v.push(format!(
            "write chunk ({} B RDMA-Written)",
            b.rdma_write_bytes - a.rdma_write_bytes
        ));
    }
    if b.long_replies > a.long_replies || b.reply_chunks > a.reply_chunks {
        v.push("reply chunk (Long Reply)".to_string());
    }
    if v.is_empty() {
        v.push("inline (RDMA_MSG)".to_string());
    }
    v.join(" + ")
}

/// Options of the demo.
#[derive(Debug, Clone)]
pub struct DemoOpts {
    /// Address the server thread listens on.
    pub addr: SocketAddr,
    /// Trace file.
    pub trace: Option<Arc<Tracer>>,
}

/// The demo (human-readable, on stdout).
///
/// # Errors
/// As [`bench()`]; a verification failure is an error too.
pub fn demo(o: &DemoOpts) -> Result<(), RunError> {
    let bound = bind_server(ServerOpts {
        listen: o.addr,
        count: Some(1),
        duration: None,
        arena_bytes: 96 << 20,
        trace: o.trace.clone(),
        print: Print::Quiet,
        limits: ConnLimits::default(),
    })?;
    let dev_name = std::env::var("RXE_DEV").unwrap_or_else(|_| "the first RDMA device".into());
    println!(
        "krpc-rdma demo: an RPC-over-RDMA v1 server and client in one process over {dev_name} \
         ({}), the harness's RPC program (NULL / WRITE / READ / ECHO), every byte verified.\n",
        o.addr
    );
    let (stop, srv) = spawn_server(bound)?;
    let res = (|| -> Result<Counters, RunError> {
        let mut d = Driver::connect(o.addr, 96 << 20, o.trace.clone(), None)?;
        let th = d.c.req.thresholds();
        println!(
            "connected: inline thresholds send {} B / receive {} B, credits granted {}",
            th.send,
            th.recv,
            d.c.req.credits_granted()
        );
        let step = |d: &mut Driver, what: &str, kind: Kind, off: u64, len: usize| {
            let a = *d.c.req.counters();
            let done = d.one(kind, off, len)?;
            let b = *d.c.req.counters();
            if let Err(e) = &done.result {
                return Err(RunError::Failed(format!("{what}: {e}")));
            }
            println!(
                "  {what:<28} {:>8.0} us  {}",
                done.lat_ns as f64 / 1000.0,
                chunk_kinds(&a, &b)
            );
            Ok(())
        };
        println!("\nNULL:");
        for _ in 0..3 {
            step(&mut d, "NULL", Kind::Null, 0, 0)?;
        }
        println!("\nWRITE (data in a DDP region) then READ (reply data DDP-eligible), verified:");
        let sizes = [1usize, 4095, 4096, 4097, 65536, (1 << 20) + 3];
        let mut off = 3u64;
        for &n in &sizes {
            step(&mut d, &format!("WRITE {n} B @ {off}"), Kind::Write, off, n)?;
            step(&mut d, &format!("READ  {n} B @ {off}"), Kind::Read, off, n)?;
            off += n as u64 + 4096 + 5;
        }
        println!("\nECHO (argument and result as plain XDR, no DDP region):");
        step(&mut d, "ECHO 100 B", Kind::Echo, 0, 100)?;
        step(&mut d, "ECHO 6000 B", Kind::Echo, 0, 6000)?;
        println!("\nthroughput (indicative: rxe loopback in a VM):");
        for (kind, w, size, depth, count) in [
            (Kind::Null, "NULL", 0usize, 8u32, 2000u64),
            (Kind::Write, "WRITE", 64 << 10, 4, 200),
            (Kind::Read, "READ", 64 << 10, 4, 200),
            (Kind::Write, "WRITE", 1 << 20, 4, 24),
            (Kind::Read, "READ", 1 << 20, 4, 24),
        ] {
            let mut p = phase(&mut d, kind, size, depth, Some(count), None, false)?;
            if let Some(e) = p.first_error {
                return Err(RunError::Failed(e));
            }
            let l = Latency::of(&mut p.lat);
            println!(
                "  {w:<5} {:>8} B x {count:<5} depth {depth}: {:>7.0} ops/s {:>7.2} MB/s  \
                 p50 {:.0} us  p99 {:.0} us",
                size,
                p.ops as f64 / p.secs,
                p.ops as f64 * size as f64 / p.secs / 1e6,
                l.p50,
                l.p99
            );
        }
        Ok(*d.c.req.counters())
    })();
    if res.is_err() {
        stop.store(true, Ordering::SeqCst);
    }
    let server = srv
        .join()
        .map_err(|_| RunError::Failed("the server thread panicked".into()))??;
    let client = res?;
    println!();
    print!("{}", counters_human("client (requester)", &client));
    print!("{}", server.human());
    println!(
        "\nchunk types used: read chunks {} (Long Calls {}), write chunks {}, reply chunks {} \
         (Long Replies {}); DDP payload bytes copied by the transport: client {}, server {}",
        client.read_chunks,
        client.long_calls,
        client.write_chunks,
        client.reply_chunks,
        server.counters.long_replies,
        client.ddp_payload_copied_bytes,
        server.counters.ddp_payload_copied_bytes
    );
    if server.stats.mismatches > 0 || server.stats.errors > 0 {
        return Err(RunError::Failed(format!(
            "the server saw {} mismatched bytes and {} errors",
            server.stats.mismatches, server.stats.errors
        )));
    }
    println!("demo: all data verified");
    Ok(())
}
