//! A client session of any ONC RPC program over RPC-over-RDMA: one connection (the
//! libibverbs provider), the core's [`Requester`], and calls matched to replies by XID.
//!
//! Calls are submitted ([`Session::submit`]) and collected ([`Session::wait`]) separately so
//! a caller can keep several in flight (the NFS client's WRITE/READ pipelines), or made one
//! at a time ([`Session::call`]). Submitting waits for a credit when the server's grant is
//! used up. A lost connection fails every call with [`RunError::Lost`]; the session never
//! reconnects.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krpc_rdma::transport::{
    CallError, Counters, ReplySpec, Requester, RequesterEvent, TransportConfig,
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

/// One RPC-over-RDMA client connection.
pub struct Session {
    req: Requester,
    qp: Traced<VerbsQp>,
    pages: Arc<dyn PageProvider>,
    arena: Arc<VerbsArena>,
    peer: SocketAddr,
    thresholds: InlineThresholds,
    next_xid: u32,
    /// Calls submitted and not yet collected.
    pending: HashMap<u32, Option<Result<Chain, CallError>>>,
    completed: u64,
}

impl Session {
    /// Connect to `peer` with transport configuration `tcfg` and an arena of `arena_bytes`
    /// (the DDP pages of every call in flight must fit), and wait for the connection to be
    /// established.
    ///
    /// # Errors
    /// No RDMA device, registration failure, refused or unreachable peer.
    pub fn connect(
        peer: SocketAddr,
        tcfg: TransportConfig,
        arena_bytes: usize,
        trace: Option<Arc<Tracer>>,
    ) -> Result<Session, RunError> {
        let c = open(peer, tcfg, arena_bytes, trace)?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.subsec_nanos() ^ d.as_secs() as u32);
        Ok(Session {
            req: c.req,
            qp: c.qp,
            pages: c.arena.clone(),
            arena: c.arena,
            peer,
            thresholds: c.thresholds,
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
        &self.arena
    }

    /// The server.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The inline thresholds negotiated at connection time.
    pub fn thresholds(&self) -> InlineThresholds {
        self.thresholds
    }

    /// The server's current credit grant.
    pub fn credits(&self) -> u32 {
        self.req.credits_granted()
    }

    /// The transport's counters.
    pub fn counters(&self) -> &Counters {
        self.req.counters()
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
            peer: self.peer,
            completed: self.completed,
            lost: self.pending.values().filter(|v| v.is_none()).count() as u64,
        }
    }

    /// Reap what the transport reports, waiting up to `wait` if nothing is ready.
    fn pump(&mut self, wait: Duration) -> Result<bool, RunError> {
        let mut evs = Vec::new();
        self.req.poll(&mut self.qp, &mut |e| evs.push(e));
        if evs.is_empty() && !wait.is_zero() {
            verbs::wait::wait(self.qp.inner_mut(), wait);
            self.req.poll(&mut self.qp, &mut |e| evs.push(e));
        }
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
            return Err(self.lost());
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
            match self.req.call(&mut self.qp, call, reply) {
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
                                self.peer,
                                STALL.as_secs(),
                                self.pending.len()
                            )));
                        }
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
                    self.peer,
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
