//! Reconnect and retransmit: what FreeBSD's `clnt_reconnect` does over `clnt_vc`, for a
//! [`Requester`].
//!
//! A [`Reconnect`] keeps, for every call still owed a reply, a copy of the call chain
//! ([`Chain::copym`]: page data shared by reference, never copied) and what is needed to
//! provision its reply again. When the connection goes, the calls it loses are not reported
//! as failed: they wait. Once the caller has connected a new [`Requester`] (sans-I/O: making
//! the connection, and waiting [`backoff_ms`](Reconnect::backoff_ms) between attempts, are the
//! caller's), [`resend`](Reconnect::resend) sends each of them again with the **same XID** as
//! the new connection's credits allow (a new connection starts at one credit, RFC 8166
//! §3.3.1), so every call gets exactly one reply. A call the caller abandons is forgotten and
//! never resent; a reply to an XID the new connection does not know is dropped by the
//! Requester (counted as a bad message).
//!
//! Bounded: the table of owed calls is allocated once with room for `max_requests` calls.

use alloc::vec::Vec;

use mbuf::Chain;

use super::config::TransportConfig;
use super::error::CallError;
use super::requester::{
    Abandoned, CallRejected, DdpReply, LocateFn, ReplySpec, Requester, RequesterEvent,
};
use crate::provider::Provider;

/// First wait before reconnecting, in milliseconds; doubled per failed attempt.
pub const BACKOFF_FIRST_MS: u32 = 100;
/// Longest wait between reconnection attempts, in milliseconds.
pub const BACKOFF_MAX_MS: u32 = 30_000;

#[derive(Debug)]
struct Owed {
    xid: u32,
    /// The call as first given (page data shared with the caller's chain).
    copy: Chain,
    max_reply: usize,
    locate: Option<LocateFn>,
    /// The caller's DDP pages while no live call holds them.
    pages: Option<Chain>,
    /// Sent on the current connection.
    sent: bool,
}

/// Counters of a [`Reconnect`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReconnectStats {
    /// Calls sent again on a new connection.
    pub retransmits: u64,
    /// Connections lost while calls were owed a reply.
    pub losses: u64,
    /// Calls that could not be sent again and were failed to the caller.
    pub resend_failures: u64,
}

/// Kept copies of the calls owed a reply, and their retransmission. See the module docs.
#[derive(Debug)]
pub struct Reconnect {
    owed: Vec<Owed>,
    cap: usize,
    attempts: u32,
    stats: ReconnectStats,
}

impl Reconnect {
    /// Room for `cfg.max_requests` owed calls, allocated here.
    ///
    /// # Errors
    /// [`CallError::NoMemory`].
    pub fn new(cfg: &TransportConfig) -> Result<Self, CallError> {
        let cap = cfg.max_requests.max(1) as usize;
        let mut owed = Vec::new();
        owed.try_reserve_exact(cap)
            .map_err(|_| CallError::NoMemory)?;
        Ok(Reconnect {
            owed,
            cap,
            attempts: 0,
            stats: ReconnectStats::default(),
        })
    }

    /// Calls owed a reply (sent or waiting to be sent again).
    pub fn owed(&self) -> usize {
        self.owed.len()
    }

    /// Calls waiting to be sent on the next connection.
    pub fn unsent(&self) -> usize {
        self.owed.iter().filter(|o| !o.sent).count()
    }

    /// The XIDs of the owed calls, each with whether it was sent on the current connection.
    pub fn owed_xids(&self) -> impl Iterator<Item = (u32, bool)> + '_ {
        self.owed.iter().map(|o| (o.xid, o.sent))
    }

    /// Statistics.
    pub fn stats(&self) -> ReconnectStats {
        self.stats
    }

    /// How long to wait before the next connection attempt: 0 the first time after a loss,
    /// then [`BACKOFF_FIRST_MS`] doubled per failed attempt, at most [`BACKOFF_MAX_MS`].
    pub fn backoff_ms(&self) -> u32 {
        match self.attempts {
            0 => 0,
            n => BACKOFF_FIRST_MS
                .saturating_mul(1u32.checked_shl(n - 1).unwrap_or(u32::MAX))
                .min(BACKOFF_MAX_MS),
        }
    }

    /// A connection attempt failed: the next one waits longer.
    pub fn attempt_failed(&mut self) {
        self.attempts = self.attempts.saturating_add(1);
    }

    /// Send `call` through `req`, keeping a copy until its reply.
    ///
    /// # Errors
    /// As [`Requester::call`] (everything handed back); also [`CallError::DuplicateXid`] for
    /// an XID still owed a reply, [`CallError::WouldBlock`] with the table full,
    /// [`CallError::NoMemory`] when the copy cannot be made.
    pub fn call<P: Provider>(
        &mut self,
        req: &mut Requester,
        prov: &mut P,
        call: Chain,
        reply: ReplySpec,
    ) -> Result<(), CallRejected> {
        let xid = match self.admit(&call) {
            Ok(x) => x,
            Err(error) => return Err(CallRejected { error, call, reply }),
        };
        let Ok(copy) = call.copym(0, call.len()) else {
            return Err(CallRejected {
                error: CallError::NoMemory,
                call,
                reply,
            });
        };
        let max_reply = reply.max_reply;
        let locate = reply.ddp.as_ref().map(|d| d.locate);
        req.call(prov, call, reply)?;
        self.owed.push(Owed {
            xid,
            copy,
            max_reply,
            locate,
            pages: None,
            sent: true,
        });
        Ok(())
    }

    /// The XID of `call` if the table can take it: [`CallError::BadCall`] without an XID,
    /// [`CallError::DuplicateXid`] for one still owed a reply, [`CallError::WouldBlock`]
    /// with the table full.
    fn admit(&self, call: &Chain) -> Result<u32, CallError> {
        let mut xid = [0u8; 4];
        call.copydata(0, &mut xid).map_err(|_| CallError::BadCall)?;
        let xid = u32::from_be_bytes(xid);
        if self.owed.iter().any(|o| o.xid == xid) {
            return Err(CallError::DuplicateXid);
        }
        if self.owed.len() >= self.cap {
            return Err(CallError::WouldBlock);
        }
        Ok(xid)
    }

    /// Keep `call` to be sent on the next connection ([`resend`](Self::resend)), without
    /// sending it now: a call made while no connection is up (the first one is still being
    /// made, or the last one was lost). It is owed a reply from then on, as a call sent and
    /// lost with its connection is.
    ///
    /// # Errors
    /// Everything handed back: [`CallError::BadCall`] without an XID,
    /// [`CallError::DuplicateXid`] for an XID still owed a reply, [`CallError::WouldBlock`]
    /// with the table full.
    pub fn hold(&mut self, call: Chain, reply: ReplySpec) -> Result<(), CallRejected> {
        let xid = match self.admit(&call) {
            Ok(x) => x,
            Err(error) => return Err(CallRejected { error, call, reply }),
        };
        let (locate, pages) = match reply.ddp {
            Some(d) => (Some(d.locate), Some(d.pages)),
            None => (None, None),
        };
        self.owed.push(Owed {
            xid,
            copy: call,
            max_reply: reply.max_reply,
            locate,
            pages,
            sent: false,
        });
        Ok(())
    }

    /// Connection attempts that failed since the last connection was made (or since the
    /// table was made).
    pub fn failed_attempts(&self) -> u32 {
        self.attempts
    }

    /// Pass every [`RequesterEvent`] through here. A call lost with its connection is kept
    /// (its pages too) and not reported; a reply or any other failure ends the call and is
    /// passed on, as are connection events.
    pub fn on_event(&mut self, ev: RequesterEvent) -> Option<RequesterEvent> {
        match ev {
            RequesterEvent::Reply { xid, .. } => {
                self.forget(xid);
                Some(ev)
            }
            RequesterEvent::Failed {
                xid,
                error: CallError::ConnectionLost,
                pages,
            } if self.owed.iter().any(|o| o.xid == xid) => {
                if let Some(o) = self.owed.iter_mut().find(|o| o.xid == xid) {
                    o.sent = false;
                    o.pages = pages;
                }
                None
            }
            RequesterEvent::Failed { xid, .. } => {
                self.forget(xid);
                Some(ev)
            }
            RequesterEvent::ConnectionLost => {
                if !self.owed.is_empty() {
                    self.stats.losses += 1;
                }
                Some(ev)
            }
            RequesterEvent::Connected(_) => {
                self.attempts = 0;
                Some(ev)
            }
            // The responder's call, answered on this connection or not at all (a reverse
            // call is never resent by us: its requester retries).
            RequesterEvent::ReverseCall(_) => Some(ev),
        }
    }

    fn forget(&mut self, xid: u32) -> Option<Owed> {
        let i = self.owed.iter().position(|o| o.xid == xid)?;
        Some(self.owed.swap_remove(i))
    }

    /// Send again, on the connection of `req`, the owed calls not yet sent on it, oldest
    /// first, as its credits and resources allow; call again after each poll until it
    /// returns 0. A call that cannot go at all on this connection (e.g. too large for its
    /// limits) is failed through `events`. Returns how many still wait.
    pub fn resend<P: Provider>(
        &mut self,
        req: &mut Requester,
        prov: &mut P,
        events: &mut impl FnMut(RequesterEvent),
    ) -> usize {
        let mut i = 0;
        while let Some(o) = self.owed.get_mut(i) {
            if o.sent {
                i += 1;
                continue;
            }
            if req.is_lost() {
                break;
            }
            let Ok(call) = o.copy.copym(0, o.copy.len()) else {
                break; // out of memory now: try again later
            };
            let ddp = match (o.pages.take(), o.locate) {
                (Some(pages), Some(locate)) => Some(DdpReply { pages, locate }),
                (pages, _) => {
                    o.pages = pages;
                    None
                }
            };
            let spec = ReplySpec {
                max_reply: o.max_reply,
                ddp,
            };
            match req.call(prov, call, spec) {
                Ok(()) => {
                    o.sent = true;
                    self.stats.retransmits += 1;
                    i += 1;
                }
                Err(rej) => {
                    o.pages = rej.reply.ddp.map(|d| d.pages).or(o.pages.take());
                    match rej.error {
                        // Not now: after replies (credit), completions or a reconnect.
                        CallError::NoCredit
                        | CallError::WouldBlock
                        | CallError::NoMemory
                        | CallError::ConnectionLost => break,
                        error => {
                            let xid = o.xid;
                            let pages = o.pages.take();
                            self.owed.swap_remove(i);
                            self.stats.resend_failures += 1;
                            events(RequesterEvent::Failed { xid, error, pages });
                        }
                    }
                }
            }
        }
        self.unsent()
    }

    /// Give up on `xid`: it is never resent. If it is live on the current connection, the
    /// Requester revokes its registrations ([`Requester::abandon`]); either way the call and
    /// the caller's pages come back. `None` if `xid` is not owed.
    pub fn abandon<P: Provider>(
        &mut self,
        req: &mut Requester,
        prov: &mut P,
        xid: u32,
    ) -> Option<Abandoned> {
        let o = self.forget(xid)?;
        // The live call's own chain (same bytes as the copy) is simply dropped.
        let live_pages = if o.sent {
            req.abandon(prov, xid).and_then(|a| a.pages)
        } else {
            None
        };
        Some(Abandoned {
            call: Some(o.copy),
            pages: live_pages.or(o.pages),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_first_wait_to_the_cap_and_resets_on_connect() {
        let mut rc = Reconnect::new(&TransportConfig::default()).unwrap_or_else(|_| panic!());
        assert_eq!(
            rc.backoff_ms(),
            0,
            "the first attempt after a loss waits nothing"
        );
        let mut seen = Vec::new();
        for _ in 0..12 {
            rc.attempt_failed();
            seen.push(rc.backoff_ms());
        }
        assert_eq!(&seen[..5], &[100, 200, 400, 800, 1600]);
        assert!(seen.iter().all(|&ms| ms <= BACKOFF_MAX_MS));
        assert_eq!(seen.last(), Some(&BACKOFF_MAX_MS));
        for _ in 0..100 {
            rc.attempt_failed();
        }
        assert_eq!(rc.backoff_ms(), BACKOFF_MAX_MS, "no overflow");
        let ev = rc.on_event(RequesterEvent::Connected(Default::default()));
        assert!(ev.is_some());
        assert_eq!(rc.backoff_ms(), 0);
    }

    /// A call held while no connection is up is owed (unsent) from then on: its XID cannot
    /// be used again, and the table bounds how many wait.
    #[test]
    fn held_calls_are_owed_unsent_and_bounded() {
        let cfg = TransportConfig {
            max_requests: 2,
            ..TransportConfig::default()
        };
        let mut rc = Reconnect::new(&cfg).unwrap_or_else(|_| panic!());
        let call = |xid: u32| Chain::from_bytes(&[&xid.to_be_bytes()[..], &[0; 36]].concat());
        let held = |rc: &mut Reconnect, xid: u32| {
            let c = call(xid).unwrap_or_else(|_| panic!());
            rc.hold(c, ReplySpec::inline(1024)).map_err(|r| r.error)
        };
        assert_eq!(held(&mut rc, 7), Ok(()));
        assert_eq!((rc.owed(), rc.unsent()), (1, 1));
        assert_eq!(held(&mut rc, 7), Err(CallError::DuplicateXid));
        assert_eq!(held(&mut rc, 8), Ok(()));
        assert_eq!(held(&mut rc, 9), Err(CallError::WouldBlock), "table full");
        let short = Chain::from_bytes(&[1, 2]).unwrap_or_else(|_| panic!());
        let e = rc.hold(short, ReplySpec::inline(1)).map_err(|r| r.error);
        assert_eq!(e, Err(CallError::BadCall), "no XID");
        assert_eq!(rc.owed_xids().collect::<Vec<_>>(), [(7, false), (8, false)]);
        assert_eq!(rc.failed_attempts(), 0);
        rc.attempt_failed();
        assert_eq!(rc.failed_attempts(), 1);
    }
}
