//! [`Session`]: a client session of any ONC RPC program over RPC-over-RDMA — one
//! [`Conn`] (made by a [`Dialer`]), calls matched to replies by XID.
//!
//! Calls are submitted ([`Session::submit`]) and collected ([`Session::wait`]) separately so
//! a caller can keep several in flight (the NFS client's WRITE/READ pipelines), or made one
//! at a time ([`Session::call`]). Submitting waits for a credit when the server's grant is
//! used up. Without reconnection a lost connection fails every call with [`RunError::Lost`];
//! with it ([`Conn`], shared with the harness's own client) the session connects again with
//! backoff and resends every call still owed a reply with the same XID, so each call gets
//! exactly one reply across a server restart.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krpc_rdma::transport::{
    CallError, Counters, ReplySpec, RequesterEvent, ReverseCall, ReverseCtx, TransportConfig,
};
use krpc_rdma::wire::InlineThresholds;
use mbuf::{Chain, PageProvider};

use crate::conn::Conn;
use crate::dialer::Dialer;
use crate::error::RunError;

/// Seconds without progress, calls outstanding, before a wait gives up.
const STALL: Duration = Duration::from_secs(30);

/// How a call ended, and when (by the dialer's clock) the session saw it.
type Outcome = (Result<Chain, CallError>, Instant);

/// What answers the reverse-direction calls (RFC 8167) of a session's server: a call
/// message's bytes in, the reply message's bytes out (its first word the call's XID), or
/// `None` to refuse it (the transport then answers it `SYSTEM_ERR`). NFSv4.1: the client's
/// callback service.
pub type ReverseService = Box<dyn FnMut(&[u8]) -> Option<Vec<u8>> + Send>;

/// Reverse-direction traffic of a session.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReverseStats {
    /// Reverse calls received and handed to the service.
    pub calls: u64,
    /// Replies sent.
    pub replies: u64,
    /// Calls the service refused (`None`) or whose reply could not be sent.
    pub refused: u64,
}

/// One RPC-over-RDMA client connection.
pub struct Session<D: Dialer> {
    c: Conn<D>,
    next_xid: u32,
    /// Calls submitted and not yet collected, with when (by the dialer's clock) each
    /// outcome arrived.
    pending: HashMap<u32, Option<Outcome>>,
    completed: u64,
    /// The service answering reverse-direction calls, once [`Session::serve_reverse`] set it.
    reverse: Option<ReverseService>,
    /// Reverse replies the transport could not send yet (no send buffer): sent by the next
    /// pump.
    owed: Vec<(ReverseCtx, Chain)>,
    rstats: ReverseStats,
}

impl<D: Dialer> Session<D> {
    /// Connect through `dialer` with transport configuration `tcfg` and wait for the
    /// connection to be established. With `reconnect`, a lost connection is made again (for
    /// up to that long) and the calls owed a reply are resent.
    ///
    /// # Errors
    /// As [`Dialer::dial`]; no establishment.
    pub fn connect(
        dialer: D,
        tcfg: TransportConfig,
        reconnect: Option<Duration>,
    ) -> Result<Session<D>, RunError> {
        let c = Conn::open(dialer, tcfg, reconnect)?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.subsec_nanos() ^ d.as_secs() as u32);
        Ok(Session {
            c,
            next_xid: seed,
            pending: HashMap::new(),
            completed: 0,
            reverse: None,
            owed: Vec::new(),
            rstats: ReverseStats::default(),
        })
    }

    /// Answer the server's reverse-direction calls (RFC 8167) with `service`, keeping a
    /// Receive posted for each of `slots` of them beyond the forward calls' (the transport
    /// configuration's `max_reverse_requests` at most). Calls are answered whenever the
    /// session reaps the transport: while it waits for a reply or a credit, and in
    /// [`Session::idle`]. Set it before the exchange that lets the server call (NFSv4.1:
    /// before CREATE_SESSION), so no reverse call finds no Receive.
    ///
    /// # Errors
    /// More slots than configured or than the receive buffers hold; the connection is lost.
    pub fn serve_reverse(&mut self, slots: u32, service: ReverseService) -> Result<(), RunError> {
        self.set_reverse_slots(slots)?;
        self.reverse = Some(service);
        Ok(())
    }

    /// Change the number of reverse-direction slots (NFSv4.1: to the back channel's
    /// `ca_maxrequests` the server agreed to).
    ///
    /// # Errors
    /// As [`Session::serve_reverse`].
    pub fn set_reverse_slots(&mut self, slots: u32) -> Result<(), RunError> {
        self.c
            .req
            .set_reverse_slots(&mut self.c.qp, slots)
            .map_err(|e| RunError::Failed(format!("{slots} reverse-direction slots: {e}")))
    }

    /// Reverse-direction calls served so far.
    pub fn reverse_stats(&self) -> ReverseStats {
        self.rstats
    }

    /// Reap the transport for `d` of real time (answering reverse-direction calls) without
    /// waiting for any reply: what a client holding state does between its own calls.
    ///
    /// # Errors
    /// The connection was lost (and could not be made again).
    pub fn idle(&mut self, d: Duration) -> Result<(), RunError> {
        // Real time, as the transport's waits are (the dialer's clock may be a test's
        // virtual one, moved by its sleeps only).
        let end = Instant::now() + d;
        loop {
            let now = Instant::now();
            if now >= end {
                return Ok(());
            }
            self.pump((end - now).min(Duration::from_millis(100)))?;
        }
    }

    /// Answer one reverse-direction call through the service (none set: refused).
    fn on_reverse_call(&mut self, rc: ReverseCall) {
        self.rstats.calls += 1;
        let ReverseCall { call, ctx, .. } = rc;
        let mut bytes = vec![0u8; call.len()];
        let reply = match (call.copydata(0, &mut bytes), self.reverse.as_mut()) {
            (Ok(()), Some(service)) => service(&bytes),
            _ => None,
        };
        let chain = reply.map(|r| Chain::from_bytes(&r));
        match chain {
            Some(Ok(chain)) => self.reverse_reply(ctx, chain),
            // Dropping the context refuses the call: the transport answers it SYSTEM_ERR.
            _ => self.rstats.refused += 1,
        }
    }

    /// Send a reverse reply, or keep it for the next pump when the transport is busy.
    fn reverse_reply(&mut self, ctx: ReverseCtx, reply: Chain) {
        match self.c.req.reverse_reply(&mut self.c.qp, ctx, reply) {
            Ok(()) => self.rstats.replies += 1,
            Err(rej) => match (rej.error, rej.ctx) {
                (CallError::WouldBlock, Some(ctx)) => self.owed.push((ctx, rej.msg)),
                (e, _) => {
                    self.rstats.refused += 1;
                    self.c
                        .dialer
                        .note(format_args!("reverse-direction reply not sent: {e}"));
                }
            },
        }
    }

    /// The page provider DDP pages must come from (the dialer's).
    pub fn pages(&self) -> &Arc<dyn PageProvider> {
        self.c.dialer.pages()
    }

    /// The dialer (and through it the provider's pages and file I/O).
    pub fn dialer(&self) -> &D {
        &self.c.dialer
    }

    /// The dialer, mutably (a test's in-process server lives there).
    pub fn dialer_mut(&mut self) -> &mut D {
        &mut self.c.dialer
    }

    /// The server.
    pub fn peer(&self) -> &str {
        self.c.dialer.peer()
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

    /// How long reconnection goes on before it gives up (zero when it is off).
    pub fn give_up(&self) -> Duration {
        self.c.give_up()
    }

    /// The time now by the dialer's clock ([`Dialer::now`]).
    pub fn now(&self) -> Instant {
        self.c.dialer.now()
    }

    /// Sleep for `d` by the dialer ([`Dialer::sleep`]). Replies that arrive meanwhile wait
    /// in the transport and are reaped by the next [`Session::wait`].
    pub fn sleep(&mut self, d: Duration) {
        self.c.dialer.sleep(d);
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
            peer: self.c.dialer.peer().to_string(),
            completed: self.completed,
            lost: self.pending.values().filter(|v| v.is_none()).count() as u64,
        }
    }

    /// No `what` from the server for [`STALL`].
    fn stalled(&self, what: &str) -> RunError {
        RunError::Failed(format!(
            "{what} from {} for {} s ({} calls outstanding)",
            self.c.dialer.peer(),
            STALL.as_secs(),
            self.pending.len()
        ))
    }

    /// Reap what the transport reports, waiting up to `wait` if nothing is ready.
    fn pump(&mut self, wait: Duration) -> Result<bool, RunError> {
        for (ctx, reply) in std::mem::take(&mut self.owed) {
            self.reverse_reply(ctx, reply);
        }
        let mut evs = Vec::new();
        self.c.poll(wait, &mut evs);
        let progressed = !evs.is_empty();
        let now = self.c.dialer.now();
        let mut lost = false;
        for e in evs {
            match e {
                RequesterEvent::Reply { xid, reply } => {
                    if let Some(slot) = self.pending.get_mut(&xid) {
                        *slot = Some((Ok(reply), now));
                        self.completed += 1;
                    }
                }
                RequesterEvent::Failed { xid, error, .. } => {
                    if error == CallError::ConnectionLost {
                        lost = true;
                    } else if let Some(slot) = self.pending.get_mut(&xid) {
                        *slot = Some((Err(error), now));
                        self.completed += 1;
                    }
                }
                RequesterEvent::ConnectionLost => lost = true,
                RequesterEvent::ReverseCall(rc) => self.on_reverse_call(rc),
                RequesterEvent::Connected(_) => {}
            }
        }
        if lost {
            // Replies owed on the lost connection died with it (their contexts are stale).
            self.owed.clear();
            if !self.c.reconnects_enabled() {
                return Err(self.lost());
            }
            self.c.reconnect(&|| false).map_err(|e| {
                self.c.dialer.note(format_args!("{e}"));
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
                            return Err(self.stalled("no credit"));
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
        self.wait_arrival(xid).map(|(reply, _)| reply)
    }

    /// As [`Session::wait`], and when the reply arrived by the dialer's clock (it may have
    /// waited in the session while other calls were collected): a retry delay counts from
    /// there.
    ///
    /// # Errors
    /// As [`Session::wait`].
    pub fn wait_arrival(&mut self, xid: u32) -> Result<(Chain, Instant), RunError> {
        let mut last = Instant::now();
        loop {
            match self.pending.get(&xid) {
                None => return Err(RunError::Failed(format!("no call {xid:#x} in flight"))),
                Some(Some(_)) => {
                    let done = self.pending.remove(&xid).flatten();
                    return match done {
                        Some((Ok(reply), at)) => Ok((reply, at)),
                        Some((Err(e), _)) => Err(RunError::Failed(format!("call {xid:#x}: {e}"))),
                        None => Err(RunError::Failed(format!("call {xid:#x} vanished"))),
                    };
                }
                Some(None) => {}
            }
            if self.pump(Duration::from_millis(100))? {
                last = Instant::now();
            } else if last.elapsed() >= STALL {
                return Err(self.stalled("no reply"));
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
