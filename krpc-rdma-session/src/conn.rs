//! [`Conn`]: a client connection that may outlive its queue pair.

use std::time::{Duration, Instant};

use krpc_rdma::transport::{
    CallRejected, Counters, Reconnect, ReplySpec, Requester, RequesterEvent, TransportConfig,
};
use krpc_rdma::wire::InlineThresholds;
use mbuf::Chain;

use crate::dialer::Dialer;
use crate::error::RunError;

/// How long a new connection may take to be established.
const ESTABLISH: Duration = Duration::from_secs(10);

/// How long a client keeps trying across a lost connection or a busy server before it gives
/// up, unless told otherwise: reconnecting (time without a connection) and, in the NFSv3
/// client, resending a call the server answers `NFS3ERR_JUKEBOX`. Two minutes: longer than a
/// server restart takes (knfsd was back after 26 s in the VM), shorter than a Linux soft
/// mount's default (`timeo=600,retrans=2`: three minutes). A hard mount never gives up;
/// a command-line client that hangs for ever is worse than one that says why it stopped.
pub const DEFAULT_GIVE_UP: Duration = Duration::from_secs(120);

/// A client connection that may outlive its queue pair: the [`Requester`] of the current
/// connection and its queue pair, the [`Dialer`] that made them, and with reconnection on the
/// kept copies of the calls owed a reply ([`Reconnect`]). Shared by
/// [`Session`](crate::Session) and the harness's own client.
pub struct Conn<D: Dialer> {
    /// The requester of the current connection.
    pub req: Requester,
    /// Its queue pair.
    pub qp: D::Qp,
    /// What makes the connections (and owns the pages of every call).
    pub dialer: D,
    /// The thresholds negotiated by the current connection.
    pub thresholds: InlineThresholds,
    tcfg: TransportConfig,
    rc: Option<Reconnect>,
    give_up: Duration,
    reconnects: u64,
    /// Counters of the connections before the current one.
    earlier: Counters,
}

impl<D: Dialer> Conn<D> {
    /// Connect through `dialer` (see [`establish`]); with `reconnect`, connections lost later
    /// are made again for up to that long each time.
    ///
    /// # Errors
    /// As [`establish`]; no memory for the reconnection table.
    pub fn open(
        mut dialer: D,
        tcfg: TransportConfig,
        reconnect: Option<Duration>,
    ) -> Result<Conn<D>, RunError> {
        let (req, qp, thresholds) = establish(&mut dialer, tcfg)?;
        let rc = match reconnect {
            Some(_) => Some(
                Reconnect::new(&tcfg)
                    .map_err(|e| RunError::Failed(format!("reconnect table: {e}")))?,
            ),
            None => None,
        };
        Ok(Conn {
            req,
            qp,
            dialer,
            thresholds,
            tcfg,
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
            self.dialer.wait(&mut self.qp, wait);
            self.req.poll(&mut self.qp, &mut |e| evs.push(e));
        }
        if let Some(rc) = self.rc.as_mut() {
            let all = std::mem::take(evs);
            evs.extend(all.into_iter().filter_map(|e| rc.on_event(e)));
        }
    }

    /// How long reconnection goes on before it gives up (zero when it is off).
    pub fn give_up(&self) -> Duration {
        self.give_up
    }

    /// The connection is gone: connect again (backing off between attempts, giving up after
    /// the reconnection time or when `stop()` says so) and queue the owed calls for
    /// resending ([`Conn::poll`] sends them). One line through [`Dialer::note`] when the loss
    /// is seen and one when the connection is back, so a user sees why the client waits. The
    /// times are the dialer's clock ([`Dialer::now`], [`Dialer::sleep`]); no wait goes past
    /// the give-up time: the last attempt is made at it.
    ///
    /// # Errors
    /// Reconnection is off, or every attempt failed: the last attempt's error.
    pub fn reconnect(&mut self, stop: &dyn Fn() -> bool) -> Result<(), String> {
        let Some(rc) = self.rc.as_mut() else {
            return Err("connection lost".into());
        };
        self.earlier = self.earlier.add(self.req.counters());
        let start = self.dialer.now();
        self.dialer.note(format_args!(
            "connection to {} lost; reconnecting (giving up after {} s)",
            self.dialer.peer(),
            secs(self.give_up)
        ));
        loop {
            let spent = self.dialer.now().saturating_duration_since(start);
            let backoff = Duration::from_millis(u64::from(rc.backoff_ms()));
            let pause = backoff.min(self.give_up.saturating_sub(spent));
            if !pause.is_zero() {
                self.dialer.sleep(pause);
            }
            if stop() {
                return Err("stopped".into());
            }
            match establish(&mut self.dialer, self.tcfg) {
                Ok((req, qp, thresholds)) => {
                    self.req = req;
                    self.qp = qp;
                    self.thresholds = thresholds;
                    self.reconnects += 1;
                    rc.on_event(RequesterEvent::Connected(thresholds));
                    let took = self.dialer.now().saturating_duration_since(start);
                    self.dialer.note(format_args!(
                        "reconnected to {} after {:.1} s; resending {} calls",
                        self.dialer.peer(),
                        took.as_secs_f64(),
                        rc.unsent()
                    ));
                    return Ok(());
                }
                Err(e) => {
                    rc.attempt_failed();
                    let spent = self.dialer.now().saturating_duration_since(start);
                    if spent >= self.give_up {
                        return Err(format!(
                            "giving up reconnecting to {} after {:.1} s: {e}",
                            self.dialer.peer(),
                            spent.as_secs_f64()
                        ));
                    }
                }
            }
        }
    }
}

/// `d` in seconds for a message: whole seconds as an integer, else one decimal.
pub(crate) fn secs(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        d.as_secs().to_string()
    } else {
        format!("{:.1}", d.as_secs_f64())
    }
}

/// A new [`Requester`] with configuration `tcfg` over a queue pair `dialer` makes (the
/// requester's RFC 8797 private data in the connection exchange), established within 10 s:
/// the requester, its queue pair and the negotiated thresholds.
///
/// # Errors
/// The requester cannot be made; the dialer failed; no establishment.
pub fn establish<D: Dialer>(
    dialer: &mut D,
    tcfg: TransportConfig,
) -> Result<(Requester, D::Qp, InlineThresholds), RunError> {
    let mut req = Requester::new(tcfg, dialer.resources(), dialer.pages().clone())
        .map_err(|e| RunError::Failed(format!("requester: {e}")))?;
    let mut qp = dialer.dial(&req.private_data())?;
    let deadline = Instant::now() + ESTABLISH;
    loop {
        let mut up = None;
        let mut lost = false;
        req.poll(&mut qp, &mut |e| match e {
            RequesterEvent::Connected(t) => up = Some(t),
            RequesterEvent::ConnectionLost => lost = true,
            _ => {}
        });
        if let Some(thresholds) = up {
            return Ok((req, qp, thresholds));
        }
        if lost || Instant::now() >= deadline {
            return Err(RunError::Failed(format!(
                "connection to {} not established",
                dialer.peer()
            )));
        }
        dialer.wait(&mut qp, Duration::from_millis(100));
    }
}
