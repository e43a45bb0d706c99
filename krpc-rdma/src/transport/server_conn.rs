//! One server connection, sans-I/O: what every RPC-over-RDMA server loop does around its
//! [`Responder`], written once (svcrdma's `svc_rdma_recvfrom` / `svc_rdma_sendto` seen from
//! the RPC server's side; quinn-proto's shape: the caller owns the queue pair and the
//! sleeping, this owns the state).
//!
//! A server loop is poll → serve → reply:
//!
//! ```text
//! loop {
//!     conn.poll(&mut qp);
//!     while let Some(call) = conn.next_call() {
//!         match serve(&call.call) {
//!             Some(reply) => { let _ = conn.reply(&mut qp, call.ctx, reply); }
//!             None => conn.drop_call(&mut qp, call.ctx),
//!         }
//!     }
//!     if conn.is_lost() { break; }
//!     sleep(conn.wait());          // on the completion channel, at most that long
//! }
//! ```
//!
//! What it owns, so that no server gets it wrong on its own:
//!
//! * **The reply backlog, in order**: a reply that finds no send resource
//!   ([`ReplyError::WouldBlock`]) waits in a FIFO, later replies queue behind it, and
//!   [`ServerConnection::poll`] sends what fits as Sends complete. Bounded by the contexts
//!   (`max_requests`): a reply holds its call's context, so the queue never outgrows what
//!   was reserved at creation.
//! * **Reply pages admitted before they are taken**: with a reply-data function
//!   ([`ServerConnection::with_reply_bytes`], e.g. an NFS service's READ `count`), a call
//!   whose reply would take pages from the pool every connection shares is handed out only
//!   once the connection's [`PageShare`](super::PageShare) admits them
//!   ([`Responder::take_reply_pages`]); until then it is held back, in order, and every later
//!   call with reply data behind it (calls without reply data go on). A connection over
//!   its fair share is throttled this way; another's ordinary calls are not.
//! * **Calls dropped** without a reply ([`ServerConnection::drop_call`]): context, pages and
//!   credit back at once; calls that waited for them may be handed up.
//! * **The counters** of what it did ([`ServerStats`]) beside the Responder's.
//! * **How long the loop may sleep** ([`ServerConnection::wait`]): not at all while calls
//!   are ready; briefly while calls or replies wait for pages or send resources another
//!   connection (or a completion) will free, which wakes nothing here.
//!
//! `no_std`, no allocation after [`ServerConnection::new`] in steady state; the Responder is
//! held by reference or box, so that neither this nor its creation copies a large value on a
//! kernel stack.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use core::ops::DerefMut;

use mbuf::Chain;

use super::requester::ReverseRejected;
use super::responder::{Incoming, ReplyCtx, ReplyError, Responder, ResponderEvent};
use super::shared_pages::Admission;
use super::{CallError, Counters};
use crate::provider::Provider;

/// The bytes of page data the reply to a call will take from the shared pool (0: none).
pub type ReplyBytes = Box<dyn Fn(&Chain) -> usize + Send + Sync>;

/// How long a server loop may sleep before its next [`ServerConnection::poll`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Calls are ready: do not sleep.
    Now,
    /// Calls or replies wait for pages or send resources that another connection or a
    /// completion frees: sleep briefly (about a millisecond), then poll again.
    Soon,
    /// Nothing to do until a completion arrives: sleep on the completion channel.
    Idle,
}

impl Wait {
    /// The longest sleep, in milliseconds, on the completion channel (which a completion
    /// ends at once): 0 for `Now`, 1 for `Soon` (pages and send resources come back from
    /// elsewhere and wake nothing here), 100 for `Idle` (a loop still looks at its stop
    /// flag that often). Every server loop sleeps by it.
    pub fn millis(self) -> u32 {
        match self {
            Wait::Now => 0,
            Wait::Soon => 1,
            Wait::Idle => 100,
        }
    }
}

/// What a [`ServerConnection`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ServerStats {
    /// Calls handed out by [`ServerConnection::next_call`].
    pub calls: u64,
    /// Replies sent (posted).
    pub replies: u64,
    /// Replies that waited in the backlog for send resources.
    pub replies_queued: u64,
    /// Calls dropped without a reply.
    pub dropped: u64,
    /// Replies the transport refused or failed (`ERR_CHUNK` sent instead, memory, a
    /// stale context).
    pub reply_errors: u64,
    /// Calls held back until their reply pages were admitted.
    pub held_back: u64,
    /// Calls that could not be queued (more than the contexts: a bug): the connection was
    /// closed.
    pub overflows: u64,
}

/// What became of a reverse-direction call sent with [`ServerConnection::reverse_call`].
#[derive(Debug)]
pub enum ReverseOutcome {
    /// Its reply (the RPC reply message).
    Reply {
        /// XID.
        xid: u32,
        /// The reply.
        reply: Chain,
    },
    /// No reply will come: the connection was lost.
    Failed {
        /// XID.
        xid: u32,
    },
}

/// A call polled and not yet handed out.
#[derive(Debug)]
struct Ready {
    call: Incoming,
    /// Its reply pages are admitted already (it was held back).
    admitted: bool,
}

/// One server connection: a [`Responder`] with its call queue, held-back calls and reply
/// backlog. See the module documentation. `R` holds the Responder: a `Box` (the default), a
/// kernel's fallible box, or a `&mut Responder` the caller keeps.
pub struct ServerConnection<R = Box<Responder>> {
    resp: R,
    ready: VecDeque<Ready>,
    /// Calls whose reply pages wait for admission, with their size, in order.
    held_back: VecDeque<(Incoming, usize)>,
    /// Replies that wait for send resources, in order.
    backlog: VecDeque<(ReplyCtx, Chain)>,
    /// What became of reverse-direction calls (RFC 8167), in order of arrival.
    reverse: VecDeque<ReverseOutcome>,
    reply_bytes: Option<ReplyBytes>,
    lost: bool,
    stats: ServerStats,
}

impl<R> core::fmt::Debug for ServerConnection<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ServerConnection")
            .field("ready", &self.ready.len())
            .field("held_back", &self.held_back.len())
            .field("backlog", &self.backlog.len())
            .field("lost", &self.lost)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<R: DerefMut<Target = Responder>> ServerConnection<R> {
    /// A connection over `resp` (set up, receives posted or not: the first `poll` posts
    /// them); its queues reserved for as many calls as the Responder has contexts.
    ///
    /// # Errors
    /// [`CallError::NoMemory`].
    pub fn new(resp: R) -> Result<Self, CallError> {
        let n = resp.contexts().max(1);
        let mut ready = VecDeque::new();
        let mut held_back = VecDeque::new();
        let mut backlog = VecDeque::new();
        let mut reverse = VecDeque::new();
        reverse
            .try_reserve_exact(resp.reverse_capacity() as usize)
            .map_err(|_| CallError::NoMemory)?;
        ready
            .try_reserve_exact(n)
            .and_then(|()| held_back.try_reserve_exact(n))
            .and_then(|()| backlog.try_reserve_exact(n))
            .map_err(|_| CallError::NoMemory)?;
        Ok(ServerConnection {
            resp,
            ready,
            held_back,
            backlog,
            reverse,
            reply_bytes: None,
            lost: false,
            stats: ServerStats::default(),
        })
    }

    /// Admit each call's reply pages (`f(call)` bytes) through the Responder's page share
    /// before handing the call out (see the module documentation). Without a page share on
    /// the Responder every call is admitted at once.
    #[must_use]
    pub fn with_reply_bytes(mut self, f: ReplyBytes) -> Self {
        self.reply_bytes = Some(f);
        self
    }

    /// Drive the transport: completions, received calls (queued for
    /// [`next_call`](Self::next_call)), replies from the backlog as send resources allow,
    /// held-back calls whose pages are admitted now.
    pub fn poll<P: Provider>(&mut self, prov: &mut P) {
        if self.lost {
            return;
        }
        let (ready, lost, stats) = (&mut self.ready, &mut self.lost, &mut self.stats);
        let reverse = &mut self.reverse;
        let mut overflow = false;
        self.resp.poll(prov, &mut |e| {
            overflow |= !take_event(ready, reverse, lost, stats, e);
        });
        if overflow {
            prov.disconnect();
        }
        self.flush_backlog(prov);
        self.admit_held_back();
        if self.lost {
            self.forget();
        }
    }

    /// The next call to serve, in order of arrival (a call held back for its reply pages
    /// comes out once they are admitted, before calls that arrived after it).
    pub fn next_call(&mut self) -> Option<Incoming> {
        while let Some(r) = self.ready.pop_front() {
            let call = r.call;
            let need = match &self.reply_bytes {
                Some(f) if !r.admitted => f(&call.call),
                _ => 0,
            };
            if need == 0
                || (self.held_back.is_empty()
                    && self.resp.take_reply_pages(&call.ctx, need) == Admission::Take)
            {
                self.stats.calls += 1;
                return Some(call);
            }
            self.stats.held_back += 1;
            // Within the capacity reserved at creation (one entry per context).
            self.held_back.push_back((call, need));
        }
        None
    }

    /// Send the reply to a call handed out by [`next_call`](Self::next_call), or queue it
    /// behind earlier replies that wait for send resources (then `Ok`: it goes out, in
    /// order, from a later [`poll`](Self::poll)).
    ///
    /// # Errors
    /// [`ReplyError::ConnectionLost`]; [`ReplyError::ChunkError`] (`ERR_CHUNK` was sent
    /// instead), [`ReplyError::StaleContext`], [`ReplyError::Failed`],
    /// [`ReplyError::Internal`] (the connection is being closed): counted in `reply_errors`,
    /// the call is over. Never `WouldBlock`.
    pub fn reply<P: Provider>(
        &mut self,
        prov: &mut P,
        ctx: ReplyCtx,
        reply: Chain,
    ) -> Result<(), ReplyError> {
        if self.lost {
            return Err(ReplyError::ConnectionLost);
        }
        if !self.backlog.is_empty() {
            self.queue_reply(ctx, reply);
            return Ok(());
        }
        match self.resp.reply(prov, ctx, reply) {
            Ok(()) => {
                self.stats.replies += 1;
                Ok(())
            }
            Err(ReplyError::WouldBlock { ctx, reply }) => {
                self.queue_reply(ctx, reply);
                Ok(())
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    /// The upper layer will not answer this call (a duplicate in progress, a message that
    /// is not a call): its context, pages and credit come back now
    /// ([`Responder::drop_call`]); calls that waited for them are queued.
    pub fn drop_call<P: Provider>(&mut self, prov: &mut P, ctx: ReplyCtx) {
        self.stats.dropped += 1;
        let (ready, lost, stats) = (&mut self.ready, &mut self.lost, &mut self.stats);
        let reverse = &mut self.reverse;
        let mut overflow = false;
        let r = self.resp.drop_call(prov, ctx, &mut |e| {
            overflow |= !take_event(ready, reverse, lost, stats, e);
        });
        if overflow {
            prov.disconnect();
        }
        if r.is_err() {
            self.stats.reply_errors += 1;
        }
        if self.lost {
            self.forget();
        }
    }

    /// Send a reverse-direction call to the requester (RFC 8167; see
    /// [`Responder::reverse_call`]): its outcome comes from
    /// [`next_reverse`](Self::next_reverse).
    ///
    /// # Errors
    /// As [`Responder::reverse_call`].
    pub fn reverse_call<P: Provider>(
        &mut self,
        prov: &mut P,
        call: Chain,
    ) -> Result<(), ReverseRejected> {
        self.resp.reverse_call(prov, call)
    }

    /// The next reverse-direction call's outcome, in order of arrival: its reply, or its
    /// failure with the connection.
    pub fn next_reverse(&mut self) -> Option<ReverseOutcome> {
        self.reverse.pop_front()
    }

    /// The connection is gone: every call and reply still held here died with it.
    pub fn is_lost(&self) -> bool {
        self.lost
    }

    /// How long the loop may sleep now (see [`Wait`]).
    pub fn wait(&self) -> Wait {
        if !self.ready.is_empty() {
            Wait::Now
        } else if !self.held_back.is_empty()
            || !self.backlog.is_empty()
            || self.resp.calls_waiting_for_pages()
        {
            Wait::Soon
        } else {
            Wait::Idle
        }
    }

    /// What this connection did.
    pub fn stats(&self) -> &ServerStats {
        &self.stats
    }

    /// The Responder's counters.
    pub fn counters(&self) -> &Counters {
        self.resp.counters()
    }

    /// The Responder.
    pub fn responder(&self) -> &Responder {
        &self.resp
    }

    /// The Responder, e.g. to set a page share before the first poll.
    pub fn responder_mut(&mut self) -> &mut Responder {
        &mut self.resp
    }

    /// Replies waiting for send resources now.
    pub fn backlog(&self) -> usize {
        self.backlog.len()
    }

    /// Calls held back for their reply pages now.
    pub fn held_back(&self) -> usize {
        self.held_back.len()
    }

    fn queue_reply(&mut self, ctx: ReplyCtx, reply: Chain) {
        self.stats.replies_queued += 1;
        // A queued reply holds its call's context: at most one entry per context, within
        // the capacity reserved at creation.
        self.backlog.push_back((ctx, reply));
    }

    fn failed(&mut self, e: ReplyError) -> ReplyError {
        if matches!(e, ReplyError::ConnectionLost) {
            self.lost = true;
            self.forget();
        } else {
            self.stats.reply_errors += 1;
        }
        e
    }

    /// Send the backlog's replies that fit, in order.
    fn flush_backlog<P: Provider>(&mut self, prov: &mut P) {
        while let Some((ctx, reply)) = self.backlog.pop_front() {
            match self.resp.reply(prov, ctx, reply) {
                Ok(()) => self.stats.replies += 1,
                Err(ReplyError::WouldBlock { ctx, reply }) => {
                    self.backlog.push_front((ctx, reply));
                    return;
                }
                Err(e) => {
                    let lost = matches!(e, ReplyError::ConnectionLost);
                    let _ = self.failed(e);
                    if lost {
                        return;
                    }
                }
            }
        }
    }

    /// Held-back calls whose pages the share admits now go to the front of the ready queue,
    /// in order, ahead of calls that arrived after them.
    fn admit_held_back(&mut self) {
        let mut at = 0;
        while let Some((call, need)) = self.held_back.front() {
            if self.resp.take_reply_pages(&call.ctx, *need) != Admission::Take {
                return;
            }
            if let Some((call, _)) = self.held_back.pop_front() {
                self.ready.insert(
                    at,
                    Ready {
                        call,
                        admitted: true,
                    },
                );
                at += 1;
            }
        }
    }

    /// After a loss: the queued calls and replies are dead (their contexts went with the
    /// connection).
    fn forget(&mut self) {
        self.ready.clear();
        self.held_back.clear();
        self.backlog.clear();
    }
}

/// What the Responder hands up: a call joins `ready`, a reverse call's outcome `reverse`, a
/// loss sets `lost`. False if a call or an outcome could not be queued (impossible: at most
/// one per context or reverse slot, within the reserve; the fallible reserve keeps a failure
/// from aborting).
fn take_event(
    ready: &mut VecDeque<Ready>,
    reverse: &mut VecDeque<ReverseOutcome>,
    lost: &mut bool,
    stats: &mut ServerStats,
    e: ResponderEvent,
) -> bool {
    let outcome = match e {
        ResponderEvent::Call(call) => {
            if ready.try_reserve(1).is_err() {
                stats.overflows += 1;
                return false;
            }
            ready.push_back(Ready {
                call,
                admitted: false,
            });
            return true;
        }
        ResponderEvent::ReverseReply { xid, reply } => ReverseOutcome::Reply { xid, reply },
        ResponderEvent::ReverseFailed { xid } => ReverseOutcome::Failed { xid },
        ResponderEvent::ConnectionLost => {
            *lost = true;
            return true;
        }
        ResponderEvent::Connected(_) => return true,
    };
    if reverse.try_reserve(1).is_err() {
        stats.overflows += 1;
        return false;
    }
    reverse.push_back(outcome);
    true
}
