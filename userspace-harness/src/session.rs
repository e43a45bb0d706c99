//! A client session of any ONC RPC program over RPC-over-RDMA: one connection (the
//! libibverbs provider), the core's [`Requester`], and calls matched to replies by XID.
//!
//! Calls are submitted ([`Session::submit`]) and collected ([`Session::wait`]) separately so
//! a caller can keep several in flight (the NFS client's WRITE/READ pipelines), or made one
//! at a time ([`Session::call`]). Submitting waits for a credit when the server's grant is
//! used up. Without reconnection a lost connection fails every call with [`RunError::Lost`];
//! with it ([`Conn`], shared with the harness's own client) the session connects again with
//! backoff and resends every call still owed a reply with the same XID, so each call gets
//! exactly one reply across a server restart.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krpc_rdma::transport::{
    CallError, CallRejected, Counters, Reconnect, ReplySpec, Requester, RequesterEvent,
    TransportConfig,
};
use krpc_rdma::wire::InlineThresholds;
use mbuf::{Chain, PageProvider, PAGE_SIZE};

use crate::run::{RunError, NO_DEVICE};
use crate::trace::{Traced, Tracer};
use crate::verbs::arena::VerbsArena;
use crate::verbs::cm::connect;
use crate::verbs::device::Device;
use crate::verbs::qp::VerbsQp;
use crate::verbs::{self, VerbsConfig, VerbsError};

/// Seconds without progress, calls outstanding, before a wait gives up.
const STALL: Duration = Duration::from_secs(30);

/// A client connection that may outlive its queue pair: the [`Requester`] of the current
/// connection and its queue pair, and with reconnection on the kept copies of the calls owed a
/// reply ([`Reconnect`]). Shared by [`Session`] and the harness's own client.
pub struct Conn {
    /// The requester of the current connection.
    pub req: Requester,
    /// Its queue pair (traced when asked).
    pub qp: Traced<VerbsQp>,
    /// The registered page arena: one for every connection, so calls kept for
    /// retransmission keep their pages across a reconnect.
    pub arena: Arc<VerbsArena>,
    /// The server.
    pub peer: SocketAddr,
    /// The thresholds negotiated by the current connection.
    pub thresholds: InlineThresholds,
    tcfg: TransportConfig,
    trace: Option<Arc<Tracer>>,
    rc: Option<Reconnect>,
    give_up: Duration,
    reconnects: u64,
    /// Counters of the connections before the current one.
    earlier: Counters,
}

impl Conn {
    /// Connect to `peer` (see [`open`]); with `reconnect`, connections lost later are made
    /// again for up to that long each time.
    ///
    /// # Errors
    /// As [`open`]; no memory for the reconnection table.
    pub fn open(
        peer: SocketAddr,
        tcfg: TransportConfig,
        arena_bytes: usize,
        trace: Option<Arc<Tracer>>,
        reconnect: Option<Duration>,
    ) -> Result<Conn, RunError> {
        let c = open(peer, tcfg, arena_bytes, trace.clone())?;
        let rc = match reconnect {
            Some(_) => Some(
                Reconnect::new(&tcfg)
                    .map_err(|e| RunError::Failed(format!("reconnect table: {e}")))?,
            ),
            None => None,
        };
        Ok(Conn {
            req: c.req,
            qp: c.qp,
            arena: c.arena,
            peer,
            thresholds: c.thresholds,
            tcfg,
            trace,
            rc,
            give_up: reconnect.unwrap_or_default(),
            reconnects: 0,
            earlier: Counters::default(),
        })
    }

    /// Whether lost connections are made again.
    pub fn reconnects_enabled(&self) -> bool {
        self.rc.is_some()
    }

    /// Reconnections so far and calls resent.
    pub fn reconnect_stats(&self) -> (u64, u64) {
        (
            self.reconnects,
            self.rc.as_ref().map_or(0, |rc| rc.stats().retransmits),
        )
    }

    /// Counters of every connection so far.
    pub fn counters(&self) -> Counters {
        self.earlier.add(self.req.counters())
    }

    /// Start a call (kept for retransmission when reconnection is on).
    ///
    /// # Errors
    /// The requester refused it; the call and its reply spec come back.
    pub fn call(&mut self, call: Chain, reply: ReplySpec) -> Result<(), CallRejected> {
        match self.rc.as_mut() {
            Some(rc) => rc.call(&mut self.req, &mut self.qp, call, reply),
            None => self.req.call(&mut self.qp, call, reply),
        }
    }

    /// Resend what a new connection owes, reap what the transport reports, waiting up to
    /// `wait` when nothing is ready. With reconnection on, calls lost with the connection
    /// are kept for resending, not reported.
    pub fn poll(&mut self, wait: Duration, evs: &mut Vec<RequesterEvent>) {
        if let Some(rc) = self.rc.as_mut() {
            rc.resend(&mut self.req, &mut self.qp, &mut |e| evs.push(e));
        }
        self.req.poll(&mut self.qp, &mut |e| evs.push(e));
        if evs.is_empty() && !wait.is_zero() {
            verbs::wait::wait(self.qp.inner_mut(), wait);
            self.req.poll(&mut self.qp, &mut |e| evs.push(e));
        }
        if let Some(rc) = self.rc.as_mut() {
            let all = std::mem::take(evs);
            evs.extend(all.into_iter().filter_map(|e| rc.on_event(e)));
        }
    }

    /// The connection is gone: connect again (backing off between attempts, giving up after
    /// the reconnection time or when `stop()` says so) and queue the owed calls for
    /// resending ([`Conn::poll`] sends them).
    ///
    /// # Errors
    /// Reconnection is off, or every attempt failed: the last attempt's error.
    pub fn reconnect(&mut self, stop: &dyn Fn() -> bool) -> Result<(), String> {
        let Some(rc) = self.rc.as_mut() else {
            return Err("connection lost".into());
        };
        self.earlier = self.earlier.add(self.req.counters());
        let start = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(u64::from(rc.backoff_ms())));
            if stop() {
                return Err("stopped".into());
            }
            match connect_on(&self.arena, self.peer, self.tcfg, self.trace.clone()) {
                Ok(c) => {
                    self.req = c.req;
                    self.qp = c.qp;
                    self.thresholds = c.thresholds;
                    self.reconnects += 1;
                    rc.on_event(RequesterEvent::Connected(c.thresholds));
                    eprintln!(
                        "userspace-harness: reconnected to {} after {:.1} s; resending {} calls",
                        self.peer,
                        start.elapsed().as_secs_f64(),
                        rc.unsent()
                    );
                    return Ok(());
                }
                Err(e) => {
                    rc.attempt_failed();
                    if start.elapsed() >= self.give_up {
                        return Err(format!("giving up reconnecting: {e}"));
                    }
                }
            }
        }
    }
}

/// One RPC-over-RDMA client connection.
pub struct Session {
    c: Conn,
    pages: Arc<dyn PageProvider>,
    next_xid: u32,
    /// Calls submitted and not yet collected.
    pending: HashMap<u32, Option<Result<Chain, CallError>>>,
    completed: u64,
}

impl Session {
    /// Connect to `peer` with transport configuration `tcfg` and an arena of `arena_bytes`
    /// (the DDP pages of every call in flight must fit), and wait for the connection to be
    /// established. With `reconnect`, a lost connection is made again (for up to that long)
    /// and the calls owed a reply are resent.
    ///
    /// # Errors
    /// No RDMA device, registration failure, refused or unreachable peer.
    pub fn connect(
        peer: SocketAddr,
        tcfg: TransportConfig,
        arena_bytes: usize,
        trace: Option<Arc<Tracer>>,
        reconnect: Option<Duration>,
    ) -> Result<Session, RunError> {
        let c = Conn::open(peer, tcfg, arena_bytes, trace, reconnect)?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.subsec_nanos() ^ d.as_secs() as u32);
        Ok(Session {
            pages: c.arena.clone(),
            c,
            next_xid: seed,
            pending: HashMap::new(),
            completed: 0,
        })
    }

    /// The page provider DDP pages must come from (the registered arena).
    pub fn pages(&self) -> &Arc<dyn PageProvider> {
        &self.pages
    }

    /// The registered arena behind [`Session::pages`].
    pub fn arena(&self) -> &Arc<VerbsArena> {
        &self.c.arena
    }

    /// The server.
    pub fn peer(&self) -> SocketAddr {
        self.c.peer
    }

    /// The inline thresholds negotiated at connection time.
    pub fn thresholds(&self) -> InlineThresholds {
        self.c.thresholds
    }

    /// The server's current credit grant.
    pub fn credits(&self) -> u32 {
        self.c.req.credits_granted()
    }

    /// The transport's counters, over every connection.
    pub fn counters(&self) -> Counters {
        self.c.counters()
    }

    /// Reconnections so far and calls resent.
    pub fn reconnect_stats(&self) -> (u64, u64) {
        self.c.reconnect_stats()
    }

    /// Whether lost connections are made again.
    pub fn reconnects_enabled(&self) -> bool {
        self.c.reconnects_enabled()
    }

    /// A fresh XID.
    pub fn next_xid(&mut self) -> u32 {
        let x = self.next_xid;
        self.next_xid = self.next_xid.wrapping_add(1);
        x
    }

    /// Calls submitted and not yet collected.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    fn lost(&self) -> RunError {
        RunError::Lost {
            peer: self.c.peer,
            completed: self.completed,
            lost: self.pending.values().filter(|v| v.is_none()).count() as u64,
        }
    }

    /// Reap what the transport reports, waiting up to `wait` if nothing is ready.
    fn pump(&mut self, wait: Duration) -> Result<bool, RunError> {
        let mut evs = Vec::new();
        self.c.poll(wait, &mut evs);
        let progressed = !evs.is_empty();
        let mut lost = false;
        for e in evs {
            match e {
                RequesterEvent::Reply { xid, reply } => {
                    if let Some(slot) = self.pending.get_mut(&xid) {
                        *slot = Some(Ok(reply));
                        self.completed += 1;
                    }
                }
                RequesterEvent::Failed { xid, error, .. } => {
                    if error == CallError::ConnectionLost {
                        lost = true;
                    } else if let Some(slot) = self.pending.get_mut(&xid) {
                        *slot = Some(Err(error));
                        self.completed += 1;
                    }
                }
                RequesterEvent::ConnectionLost => lost = true,
                RequesterEvent::Connected(_) => {}
            }
        }
        if lost {
            if !self.c.reconnects_enabled() {
                return Err(self.lost());
            }
            self.c.reconnect(&|| false).map_err(|e| {
                eprintln!("userspace-harness: {e}");
                self.lost()
            })?;
            return Ok(true);
        }
        Ok(progressed)
    }

    /// Start call `xid` (the XID in `call` must be `xid`): waits for a credit if the
    /// server's grant is in use.
    ///
    /// # Errors
    /// The transport refused the call (too large, bad chain), or the connection was lost.
    pub fn submit(&mut self, xid: u32, call: Chain, reply: ReplySpec) -> Result<(), RunError> {
        let mut call = call;
        let mut reply = reply;
        let mut last = Instant::now();
        loop {
            match self.c.call(call, reply) {
                Ok(()) => {
                    self.pending.insert(xid, None);
                    return Ok(());
                }
                Err(rej) => match rej.error {
                    CallError::NoCredit | CallError::WouldBlock => {
                        call = rej.call;
                        reply = rej.reply;
                        if self.pump(Duration::from_millis(10))? {
                            last = Instant::now();
                        } else if last.elapsed() >= STALL {
                            return Err(RunError::Failed(format!(
                                "no credit from {} for {} s ({} calls outstanding)",
                                self.c.peer,
                                STALL.as_secs(),
                                self.pending.len()
                            )));
                        }
                    }
                    CallError::ConnectionLost if self.c.reconnects_enabled() => {
                        // The next pump sees the loss and reconnects.
                        call = rej.call;
                        reply = rej.reply;
                        self.pump(Duration::from_millis(10))?;
                    }
                    CallError::ConnectionLost => return Err(self.lost()),
                    e => return Err(RunError::Failed(format!("call refused: {e}"))),
                },
            }
        }
    }

    /// Wait for the reply of call `xid`: the RPC reply message (DDP data spliced back as
    /// page mbufs).
    ///
    /// # Errors
    /// The call failed in the transport (e.g. an RDMA_ERROR from the server), no progress for
    /// 30 s, an unknown XID, or the connection was lost.
    pub fn wait(&mut self, xid: u32) -> Result<Chain, RunError> {
        let mut last = Instant::now();
        loop {
            match self.pending.get(&xid) {
                None => return Err(RunError::Failed(format!("no call {xid:#x} in flight"))),
                Some(Some(_)) => {
                    let done = self.pending.remove(&xid).flatten();
                    return match done {
                        Some(Ok(reply)) => Ok(reply),
                        Some(Err(e)) => Err(RunError::Failed(format!("call {xid:#x}: {e}"))),
                        None => Err(RunError::Failed(format!("call {xid:#x} vanished"))),
                    };
                }
                Some(None) => {}
            }
            if self.pump(Duration::from_millis(100))? {
                last = Instant::now();
            } else if last.elapsed() >= STALL {
                return Err(RunError::Failed(format!(
                    "no reply from {} for {} s ({} calls outstanding)",
                    self.c.peer,
                    STALL.as_secs(),
                    self.pending.len()
                )));
            }
        }
    }

    /// One call, waited for.
    ///
    /// # Errors
    /// As [`Session::submit`] and [`Session::wait`].
    pub fn call(&mut self, xid: u32, call: Chain, reply: ReplySpec) -> Result<Chain, RunError> {
        self.submit(xid, call, reply)?;
        self.wait(xid)
    }
}

/// An established client connection: what [`open`] returns.
pub struct Opened {
    /// The requester, connected.
    pub req: Requester,
    /// Its queue pair (traced when asked).
    pub qp: Traced<VerbsQp>,
    /// The registered page arena (also the requester's page provider).
    pub arena: Arc<VerbsArena>,
    /// The inline thresholds negotiated.
    pub thresholds: InlineThresholds,
}

/// Open the RDMA device, register an arena of `arena_bytes`, connect a [`Requester`] with
/// configuration `tcfg` to `peer` (RFC 8797 private data in the CM exchange) and wait up to
/// 10 s for it to be established. Shared by [`Session`] and the harness's own client.
///
/// # Errors
/// No RDMA device, registration failure, refused or unreachable peer, no establishment.
pub fn open(
    peer: SocketAddr,
    tcfg: TransportConfig,
    arena_bytes: usize,
    trace: Option<Arc<Tracer>>,
) -> Result<Opened, RunError> {
    let arena = open_arena(arena_bytes)?;
    connect_on(&arena, peer, tcfg, trace)
}

/// The RDMA device's registered page arena of `arena_bytes` (the DDP pages of every call in
/// flight must fit). One arena serves every connection a client makes, so calls kept for
/// retransmission keep their pages across a reconnect.
///
/// # Errors
/// No RDMA device, registration failure.
pub fn open_arena(arena_bytes: usize) -> Result<Arc<VerbsArena>, RunError> {
    if !verbs::rdma_present() {
        return Err(RunError::Failed(NO_DEVICE.into()));
    }
    let dev = Device::open(None).map_err(|e| match e {
        VerbsError::NoDevice => RunError::Failed(NO_DEVICE.into()),
        e => RunError::Failed(e.to_string()),
    })?;
    VerbsArena::new(&dev, arena_bytes.div_ceil(PAGE_SIZE)).map_err(|e| {
        RunError::Failed(format!(
            "registering a {} MiB arena: {e}",
            arena_bytes >> 20
        ))
    })
}

/// Connect to `peer` over `arena` (a new queue pair and Requester) and wait for the
/// connection to be established.
///
/// # Errors
/// Refused or unreachable peer, no connection within 10 s.
pub fn connect_on(
    arena: &Arc<VerbsArena>,
    peer: SocketAddr,
    tcfg: TransportConfig,
    trace: Option<Arc<Tracer>>,
) -> Result<Opened, RunError> {
    let arena = arena.clone();
    let pages: Arc<dyn PageProvider> = arena.clone();
    let vcfg = VerbsConfig::default();
    let mut req = Requester::new(tcfg, vcfg.resources(), pages)
        .map_err(|e| RunError::Failed(format!("requester: {e}")))?;
    let qp = connect(&arena, peer, &req.private_data(), &vcfg).map_err(|e| match e {
        VerbsError::NoDevice => RunError::Failed(NO_DEVICE.into()),
        e => RunError::Failed(format!("cannot connect to {peer}: {e}")),
    })?;
    let mut qp = Traced::new(qp, trace, peer.to_string());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut up = None;
        let mut lost = false;
        req.poll(&mut qp, &mut |e| match e {
            RequesterEvent::Connected(t) => up = Some(t),
            RequesterEvent::ConnectionLost => lost = true,
            _ => {}
        });
        if let Some(thresholds) = up {
            return Ok(Opened {
                req,
                qp,
                arena,
                thresholds,
            });
        }
        if lost || Instant::now() >= deadline {
            return Err(RunError::Failed(format!(
                "connection to {peer} not established"
            )));
        }
        verbs::wait::wait(qp.inner_mut(), Duration::from_millis(100));
    }
}
