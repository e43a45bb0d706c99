//! Reconnect and retransmit over any provider (issue 14): a client whose calls go through
//! [`Reconnect`] keeps working across connection losses made to happen at a chosen point of
//! a call's life — while the responder waits for its RDMA Read, after hand-up, right after
//! the replies were posted, while the requester's Local Invalidate is outstanding — and
//! across a soak of mixed calls with several losses. Each time the owed calls are sent again
//! with the **same XID** on a new connection over the same page providers, every call gets
//! exactly one byte-exact reply, the dead connection leaves no registration, and (where a
//! scenario asks) no handle the dead connection advertised still gives access.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::vec::Vec;

use krpc_rdma::provider::{Completion, Middleware, Provider, WcKind, WcStatus};
use krpc_rdma::transport::{
    CallError, Incoming, Reconnect, ReplySpec, RequesterEvent, ResponderEvent, TransportConfig,
};
use mbuf::Chain;

use crate::check::{bytes_eq, ensure, eq, fail, At, Failure, Outcome};
use crate::data::{Kind, Rng};
use crate::fixture::{Fixture, PagePair, Setup};
use crate::heap::{try_boxed, Boxed};
use crate::pair::{Pair, Side};
use crate::raw::{advertised_handles, Advertised};

/// Where in a connection's life it is broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Point {
    /// The responder took its `nth` call with a read chunk (its RDMA Reads posted or waiting
    /// for room). The responder is polled one completion at a time.
    Read,
    /// `nth` calls were handed up, none of them answered.
    HandedUp,
    /// `nth` replies were posted (RDMA Writes, Long Replies, Sends on their way).
    Replied,
    /// The requester posted its `nth` Local Invalidate (a reply arrived for a call whose
    /// write chunk the responder did not invalidate); its completion is not yet polled. The
    /// requester is polled one completion at a time.
    Invalidating,
}

/// The loss of one connection: side `side` disconnects at the `nth` occurrence of `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Loss {
    pub at: Point,
    pub nth: u64,
    pub side: Side,
}

/// What a run is asked to do.
pub(crate) struct Plan<'a> {
    /// Calls to make (XIDs from [`FIRST_XID`]).
    pub total: u32,
    /// Calls owed a reply at most at once.
    pub depth: usize,
    /// The shape of call `xid`.
    pub kind: &'a mut dyn FnMut(u32) -> Kind,
    /// The setup and loss of connection `n` (0 first); `None` for one that lives to the end.
    pub conn: &'a mut dyn FnMut(u32) -> (Setup, Option<Loss>),
    /// Record the handles each call advertises on a connection that is then lost.
    pub record_handles: bool,
}

/// The first XID of a run.
pub(crate) const FIRST_XID: u32 = 0x1000;

/// How a run went.
#[derive(Debug, Default)]
pub(crate) struct Ran {
    /// Connections made.
    pub connections: u32,
    /// Connections lost.
    pub losses: u32,
    /// Calls sent again on a new connection.
    pub retransmits: u64,
    /// Calls lost with their connection (owed a reply at a loss), summed over the losses.
    pub owed_at_losses: u64,
    /// Replies that had arrived before a loss and were reaped after it (delivered, not
    /// resent), summed over the losses.
    pub answered_at_losses: u64,
    /// Where each lost connection was broken.
    pub lost_at: Vec<Point>,
    /// The handles advertised on connections that were then lost.
    pub dead_handles: Vec<Advertised>,
}

/// State carried from one connection to the next.
struct Client {
    rc: Reconnect,
    kinds: BTreeMap<u32, Kind>,
    answered: u32,
    next: u32,
    /// A call refused for now (no credit), to be offered again.
    parked: Option<(Chain, ReplySpec)>,
    handles: Vec<Advertised>,
    /// Calls sent on the current connection (new or sent again).
    sent_here: BTreeSet<u32>,
    /// Calls whose reply the current connection delivered.
    answered_here: BTreeSet<u32>,
    /// Of those, the ones delivered after the connection was broken.
    answered_after_break: u64,
    /// Calls whose reply was delivered, on any connection: never to be handed up again.
    delivered: BTreeSet<u32>,
    /// Replies whose Receive had completed before the current connection was broken, reaped
    /// after it (seen by [`Tap`]): each is delivered, its call not resent.
    arrived_before_loss: BTreeSet<u32>,
}

/// Side A's provider as the requester polls it: records the XID of every reply whose
/// Receive completed successfully (a flushed Receive carries nothing), while `record`.
struct Tap<'q, Q> {
    qp: &'q mut Q,
    record: bool,
    arrived: &'q mut BTreeSet<u32>,
}

impl<Q: Provider> Middleware for Tap<'_, Q> {
    fn wrapped(&self) -> &impl Provider {
        &*self.qp
    }
    fn wrapped_mut(&mut self) -> &mut impl Provider {
        &mut *self.qp
    }
    fn poll_cq(&mut self, out: &mut [Completion]) -> usize {
        let n = self.qp.poll_cq(out);
        if self.record {
            for wc in out.iter().take(n) {
                let WcKind::Recv { buf } = wc.kind else {
                    continue;
                };
                let xid = self
                    .qp
                    .recv_buf(buf)
                    .ok()
                    .and_then(|d| d.get(..4))
                    .and_then(|w| <[u8; 4]>::try_from(w).ok());
                if let (WcStatus::Success, Some(w)) = (wc.status, xid) {
                    self.arrived.insert(u32::from_be_bytes(w));
                }
            }
        }
        n
    }
}
krpc_rdma::forward_provider!(middleware ['q, Q: Provider] Tap<'q, Q>);

/// How one connection's life ended.
enum Life {
    /// Every call answered.
    Done,
    /// Lost, as planned.
    Lost,
}

/// Run `plan` over `fx`: connect, call, break connections as planned, reconnect over the same
/// page providers and resend, until every call got its one verified reply; then hand the
/// last connection (still up) and the figures to `last`.
///
/// # Errors
/// A call failed or got two replies or wrong bytes, a connection broke other than as
/// planned, a dead connection left a registration, no progress, or `last` failed.
#[inline(never)]
pub(crate) fn run<F: Fixture>(
    fx: &mut F,
    plan: &mut Plan<'_>,
    last: &mut dyn FnMut(Pair<'_, F>, &Ran) -> Outcome,
) -> Outcome {
    let pages: PagePair = fx.page_providers().at("page providers")?;
    let mut c = new_client()?;
    let mut ran = Ran::default();
    let p = loop {
        let (setup, loss) = (plan.conn)(ran.connections);
        ran.connections += 1;
        let n = ran.connections;
        let mut p = Pair::over(&mut *fx, &setup, (pages.0.clone(), pages.1.clone()))
            .map_err(|f| in_connection(n, f))?;
        // Owed from the connections before: sent again on this one or still owed after it.
        let owed_before = xid_set(c.rc.owed_xids().map(|(x, _)| x));
        match life(&mut p, &mut c, plan, loss).map_err(|f| in_connection(n, f))? {
            Life::Done => break p,
            Life::Lost => lost_checked(p, &mut c, &mut ran, &owed_before, n, loss)?,
        }
    };
    c.handles.clear();
    ran.retransmits = c.rc.stats().retransmits;
    eq("calls still owed", 0, c.rc.owed())?;
    drop(c);
    last(p, &ran)
}

/// [`run`]: connection `n`, `p`, was lost as planned (`loss`): exactly the calls it did not
/// answer are owed (from `owed_before` and the ones sent on it), none whose reply arrived
/// before the loss, and it left no registration and nothing outstanding; its figures go to
/// `ran` (a step of its own: kernel stack frames stay under 1 KiB).
#[inline(never)]
fn lost_checked<F: Fixture>(
    p: Pair<'_, F>,
    c: &mut Client,
    ran: &mut Ran,
    owed_before: &BTreeSet<u32>,
    n: u32,
    loss: Option<Loss>,
) -> Outcome {
    ran.losses += 1;
    ran.owed_at_losses += c.rc.unsent() as u64;
    ran.answered_at_losses += c.answered_after_break;
    ran.lost_at.extend(loss.map(|l| l.at));
    let step = format!("connection {n} lost");
    // Exactly the calls this connection did not answer are owed (to be sent
    // again): none whose reply it delivered, even one reaped after the loss.
    let want: Vec<u32> = owed_before
        .union(&c.sent_here)
        .filter(|x| !c.answered_here.contains(x))
        .copied()
        .collect();
    let owed = xid_set(c.rc.owed_xids().map(|(x, _)| x));
    // A reply received before the loss is delivered, not resent.
    let undelivered: Vec<u32> = c
        .arrived_before_loss
        .difference(&c.answered_here)
        .copied()
        .collect();
    eq(
        format!(
            "{step}: replies received before it ({:?}) not delivered",
            c.arrived_before_loss
        ),
        Vec::<u32>::new(),
        undelivered,
    )?;
    eq(
        format!("{step}: calls owed (not answered by it)"),
        want,
        owed.into_iter().collect::<Vec<u32>>(),
    )?;
    let live = (
        p.l.fx.live_registrations(&p.l.a),
        p.l.fx.live_registrations(&p.l.b),
    );
    eq(format!("{step}: registrations left (A, B)"), (0, 0), live)?;
    eq(
        format!("{step}: requester outstanding"),
        0,
        p.req.outstanding(),
    )?;
    ran.dead_handles.append(&mut c.handles);
    drop(p);
    Ok(())
}

/// A fresh [`Client`], on the heap (it holds the `Reconnect`).
///
/// # Errors
/// `Reconnect::new` failed, or no memory.
#[inline(never)]
fn new_client() -> Result<Boxed<Client>, Failure> {
    try_boxed("Reconnect::new", || {
        Reconnect::new(&TransportConfig::default()).map(|rc| Client {
            rc,
            kinds: BTreeMap::new(),
            answered: 0,
            next: FIRST_XID,
            parked: None,
            handles: Vec::new(),
            sent_here: BTreeSet::new(),
            answered_here: BTreeSet::new(),
            answered_after_break: 0,
            delivered: BTreeSet::new(),
            arrived_before_loss: BTreeSet::new(),
        })
    })
}

/// The set of `xids`, inserted one by one (`collect` into a `BTreeSet` sorts a vector first,
/// with a stable sort whose 4 KiB scratch array is on the stack).
#[inline(never)]
fn xid_set(xids: impl Iterator<Item = u32>) -> BTreeSet<u32> {
    let mut s = BTreeSet::new();
    s.extend(xids);
    s
}

#[inline(never)]
fn in_connection(n: u32, f: Failure) -> Failure {
    Failure {
        step: format!("connection {n}: {}", f.step),
        ..f
    }
}

/// Whether the connection is still to be broken at `pt`.
#[inline(never)]
fn pending(loss: Option<Loss>, broken: bool, pt: Point) -> bool {
    !broken && loss.is_some_and(|l| l.at == pt)
}

/// The side to disconnect now: the loss is at `pt` and its `nth` occurrence came (`n`).
#[inline(never)]
fn due(loss: Option<Loss>, broken: bool, pt: Point, n: u64) -> Option<Side> {
    loss.filter(|l| pending(loss, broken, pt) && n >= l.nth)
        .map(|l| l.side)
}

/// One connection's life: resend what is owed, make new calls, serve them, break the
/// connection as `loss` says.
#[inline(never)]
fn life<F: Fixture>(
    p: &mut Pair<'_, F>,
    c: &mut Client,
    plan: &mut Plan<'_>,
    loss: Option<Loss>,
) -> Result<Life, Failure> {
    let end = FIRST_XID + plan.total;
    let mut here = Here {
        held: Vec::new(),
        handed: 0,
        replied: 0,
        broken: false,
    };
    let mut idle = 0;
    c.sent_here.clear();
    c.answered_here.clear();
    c.answered_after_break = 0;
    c.arrived_before_loss.clear();
    loop {
        // A connection broken after its last reply arrived is still seen to go (and is
        // checked for leaks) before the run ends on the next one.
        if c.answered == plan.total && !here.broken {
            return Ok(Life::Done);
        }
        // Each turn in a step of its own (kernel stack frames stay under 1 KiB).
        let mut progress = calls_turn(p, c, plan, end)?;
        progress |= responder_turn(p, c, loss, &mut here)?;
        progress |= requester_turn(p, c, loss, &mut here.broken)?;
        if p.req.is_lost() {
            if !here.broken {
                return Err(unplanned_loss(p));
            }
            return Ok(Life::Lost);
        }
        let step = format!(
            "{} of {} calls answered, {} owed{}",
            c.answered,
            plan.total,
            c.rc.owed(),
            if here.broken { ", after the loss" } else { "" }
        );
        p.l.idle(&mut idle, progress, &step)?;
    }
}

/// What one connection's [`life`] did so far.
struct Here {
    /// Calls handed up, not yet answered.
    held: Vec<Incoming>,
    /// Calls handed up.
    handed: u64,
    /// Replies posted.
    replied: u64,
    /// Whether the connection was broken.
    broken: bool,
}

/// [`life`]: owed calls sent again first, with their XIDs; then new ones up to the plan's
/// depth. Whether anything was sent.
#[inline(never)]
fn calls_turn<F: Fixture>(
    p: &mut Pair<'_, F>,
    c: &mut Client,
    plan: &mut Plan<'_>,
    end: u32,
) -> Result<bool, Failure> {
    let mut progress = false;
    // Owed calls first, with their XIDs; then new ones.
    let mut failed = Vec::new();
    let before = c.rc.stats().retransmits;
    c.rc.resend(&mut p.req, &mut p.l.a, &mut |e| failed.push(e));
    if let Some(e) = failed.first() {
        return Err(fail(
            "resend",
            "every owed call sent again",
            format!("{e:?}"),
        ));
    }
    progress |= c.rc.stats().retransmits > before;
    c.sent_here
        .extend(c.rc.owed_xids().filter(|&(_, sent)| sent).map(|(x, _)| x));
    while c.next < end && c.rc.owed() < plan.depth && c.rc.unsent() == 0 && !p.req.is_lost() {
        let xid = c.next;
        let (call, spec) = match c.parked.take() {
            Some(parked) => parked,
            None => {
                let k = (plan.kind)(xid);
                c.kinds.insert(xid, k);
                k.call(&p.l.pa, xid).at("call")?
            }
        };
        match c.rc.call(&mut p.req, &mut p.l.a, call, spec) {
            Ok(()) => {
                c.next += 1;
                c.sent_here.insert(xid);
                progress = true;
                if plan.record_handles {
                    c.handles.extend(advertised_handles(&mut p.l.a, xid));
                }
            }
            Err(rej) => {
                ensure(
                    matches!(
                        rej.error,
                        CallError::NoCredit | CallError::WouldBlock | CallError::ConnectionLost
                    ),
                    format!("call {xid:#x} refused ({})", rej.error),
                    "back-pressure or a lost connection",
                )?;
                c.parked = Some((rej.call, rej.reply));
                break;
            }
        }
    }
    Ok(progress)
}

/// [`life`]: the responder polled (one completion at a time while a loss at `Read` is
/// pending), calls handed up and answered, the connection broken where `loss` says.
/// Whether anything happened.
#[inline(never)]
fn responder_turn<F: Fixture>(
    p: &mut Pair<'_, F>,
    c: &mut Client,
    loss: Option<Loss>,
    here: &mut Here,
) -> Result<bool, Failure> {
    let mut progress = false;
    // The responder.
    let budget = if pending(loss, here.broken, Point::Read) {
        1
    } else {
        usize::MAX
    };
    let mut evs = Vec::new();
    let done = p
        .resp
        .poll_bounded(&mut p.l.b, budget, &mut |e| evs.push(e));
    progress |= !done || !evs.is_empty();
    for e in evs {
        if let ResponderEvent::Call(call) = e {
            // The server never executes again a call whose reply was delivered.
            ensure(
                !c.delivered.contains(&call.xid),
                format!("call {:#x} handed up", call.xid),
                "never again once its reply was delivered",
            )?;
            here.handed += 1;
            here.held.push(call);
        }
    }
    let reads = p.resp.counters().read_chunks;
    if let Some(side) = due(loss, here.broken, Point::Read, reads)
        .or_else(|| due(loss, here.broken, Point::HandedUp, here.handed))
    {
        p.l.qp(side).disconnect();
        here.broken = true;
        here.held.clear();
    }
    for call in core::mem::take(&mut here.held) {
        let reply = Kind::of(&call.call).reply(&p.l.pb, call.xid).at("reply")?;
        drop(call.call);
        // After a loss a reply may be refused; it is then dropped.
        if p.resp.reply(&mut p.l.b, call.ctx, reply).is_ok() {
            here.replied += 1;
            progress = true;
        }
    }
    if let Some(side) = due(loss, here.broken, Point::Replied, here.replied) {
        p.l.qp(side).disconnect();
        here.broken = true;
    }
    Ok(progress)
}

/// [`life`]: the requester polled (one completion at a time while a loss at `Invalidating`
/// is pending), each reply checked byte-exact and once per call, the connection broken
/// where `loss` says. Whether anything happened.
#[inline(never)]
fn requester_turn<F: Fixture>(
    p: &mut Pair<'_, F>,
    c: &mut Client,
    loss: Option<Loss>,
    broken: &mut bool,
) -> Result<bool, Failure> {
    let mut progress = false;
    // The requester.
    let budget = if pending(loss, *broken, Point::Invalidating) {
        1
    } else {
        usize::MAX
    };
    let mut evs = Vec::new();
    let mut tap = Tap {
        qp: &mut p.l.a,
        record: *broken,
        arrived: &mut c.arrived_before_loss,
    };
    let done = p.req.poll_bounded(&mut tap, budget, &mut |e| evs.push(e));
    progress |= !done || !evs.is_empty();
    for e in evs {
        match c.rc.on_event(e) {
            Some(RequesterEvent::Reply { xid, reply }) => {
                let kind = c
                    .kinds
                    .get(&xid)
                    .copied()
                    .at(format!("reply {xid:#x}: kind"))?;
                bytes_eq(
                    format!("reply {xid:#x}"),
                    &kind.expected(xid),
                    &reply.to_vec().at("reply bytes")?,
                )?;
                // Exactly one reply per XID: a second one would find it forgotten.
                ensure(
                    c.kinds.remove(&xid).is_some(),
                    format!("reply {xid:#x}"),
                    "one reply per call",
                )?;
                c.answered += 1;
                c.answered_here.insert(xid);
                c.delivered.insert(xid);
                c.answered_after_break += u64::from(*broken);
            }
            Some(RequesterEvent::Failed { xid, error, .. }) => {
                return Err(fail(format!("call {xid:#x}"), "a reply", error))
            }
            Some(RequesterEvent::ReverseCall(rc)) => {
                return Err(fail(
                    format!("reverse call {:#x}", rc.xid),
                    "no reverse-direction call (none enabled)",
                    "one",
                ))
            }
            Some(RequesterEvent::ConnectionLost | RequesterEvent::Connected(_)) | None => {}
        }
    }
    let invalidations = p.req.counters().local_invalidations;
    if let Some(side) = due(loss, *broken, Point::Invalidating, invalidations) {
        p.l.qp(side).disconnect();
        *broken = true;
    }
    Ok(progress)
}

/// The failure of a connection lost where no loss was planned, with both sides' causes.
#[inline(never)]
fn unplanned_loss<F: Fixture>(p: &Pair<'_, F>) -> Failure {
    let why = |q| p.l.fx.down_cause(q).unwrap_or_else(|| "?".into());
    fail(
        "connection",
        "lost only where planned",
        format!("lost unplanned (A: {}; B: {})", why(&p.l.a), why(&p.l.b)),
    )
}

/// Probe every handle of `dead` from side B of the live pair `p`: none may give access. The
/// first refused RDMA breaks `p`'s connection, so the later probes are refused at post or
/// flushed; any of that passes, an access granted fails.
///
/// # Errors
/// A handle of a dead connection (or an abandoned call) still gave access.
#[inline(never)]
pub(crate) fn probe_dead<F: Fixture>(p: &mut Pair<'_, F>, dead: &[Advertised]) -> Outcome {
    for &(h, off, write) in dead {
        let r = if write {
            p.l.probe_write(Side::B, h, off, 1)
        } else {
            p.l.probe_read(Side::B, h, off, 1)
        };
        if let Ok(WcStatus::Success) = r {
            return Err(fail(
                format!("probe of handle {h:#x} at {off:#x} (write {write})"),
                "access refused",
                "access granted",
            ));
        }
    }
    Ok(())
}

/// `kinds` over a first connection that `side` breaks at the first `at`, then a second one:
/// every call gets one verified reply; the calls the first connection did not answer, and
/// only those, are sent again exactly once (at least one when the loss came before any
/// reply was sent, at `Read` or `HandedUp`; after the replies were posted, a reply that
/// arrived before the loss is delivered and its call not resent); no registration of the
/// dead connection is left and none of its handles gives access.
#[inline(never)]
fn reconnect_at<F: Fixture>(
    fx: &mut F,
    kinds: &[Kind],
    req: TransportConfig,
    at: Point,
    side: Side,
) -> Outcome {
    let what = format!("{side:?} disconnects at {at:?}");
    let setup = Setup {
        req,
        ..Setup::default()
    };
    let mut kind = |xid: u32| {
        kinds
            .get(xid.wrapping_sub(FIRST_XID) as usize)
            .copied()
            .unwrap_or(Kind::Small)
    };
    let mut conn = |n: u32| {
        let loss = Loss { at, nth: 1, side };
        (setup, (n == 0).then_some(loss))
    };
    let mut plan = Plan {
        total: kinds.len() as u32,
        depth: 4,
        kind: &mut kind,
        conn: &mut conn,
        record_handles: true,
    };
    let must_resend = matches!(at, Point::Read | Point::HandedUp);
    run(fx, &mut plan, &mut |mut p, ran| {
        eq("connections", 2, ran.connections)?;
        eq(
            "retransmits (each call lost with the connection, once)",
            ran.owed_at_losses,
            ran.retransmits,
        )?;

        ensure(
            !must_resend || ran.retransmits >= 1,
            "retransmits",
            "the call lost with the connection sent again",
        )?;
        ensure(
            !ran.dead_handles.is_empty(),
            "handles of the dead connection",
            "recorded",
        )?;
        p.check_clean("after the resends")?;
        probe_dead(&mut p, &ran.dead_handles)?;
        p.finish()
    })
    .map_err(|f| Failure {
        step: format!("{what}: {}", f.step),
        ..f
    })
}

#[inline(never)]
fn both_sides<F: Fixture>(fx: &mut F, kinds: &[Kind], req: TransportConfig, at: Point) -> Outcome {
    reconnect_at(fx, kinds, req, at, Side::A)?;
    reconnect_at(fx, kinds, req, at, Side::B)
}

/// Reconnect after a loss while the responder waits for a call's RDMA Read (a WRITE), by
/// either side: the WRITE and the call behind it are sent again with their XIDs.
pub fn reconnect_after_loss_during_rdma_read<F: Fixture>(fx: &mut F) -> Outcome {
    let kinds = [Kind::Write(100_000), Kind::Small];
    both_sides(fx, &kinds, TransportConfig::default(), Point::Read)
}

/// Reconnect after a loss once a READ was handed up, before its reply.
pub fn reconnect_after_loss_after_hand_up<F: Fixture>(fx: &mut F) -> Outcome {
    let kinds = [Kind::Read(30_000), Kind::Small];
    both_sides(fx, &kinds, TransportConfig::default(), Point::HandedUp)
}

/// Reconnect after a loss right after a READ's reply (its RDMA Writes, then the Send) was
/// posted: the reply arrives once, from whichever connection delivered it.
pub fn reconnect_after_loss_during_reply_writes<F: Fixture>(fx: &mut F) -> Outcome {
    let kinds = [Kind::Read(200_000), Kind::Small];
    both_sides(fx, &kinds, TransportConfig::default(), Point::Replied)
}

/// Reconnect after a loss while the requester's Local Invalidate of a READ's write chunk is
/// outstanding (the requester does not accept Send With Invalidate, so it invalidates
/// itself before handing the reply up, RFC 8166 §3.4.3).
pub fn reconnect_after_loss_during_local_invalidate<F: Fixture>(fx: &mut F) -> Outcome {
    let req = TransportConfig {
        accept_remote_invalidate: false,
        ..TransportConfig::default()
    };
    both_sides(fx, &[Kind::Read(100_000)], req, Point::Invalidating)
}

/// Calls owed when the connection goes are kept (not failed) and sent again with the same
/// XID on the next connection, as its credits allow (it starts at one); a duplicate XID is
/// refused; a call abandoned meanwhile is never resent; the late connection's owed calls
/// get one reply each.
pub fn reconnect_resends_owed_calls_but_not_abandoned_ones<F: Fixture>(fx: &mut F) -> Outcome {
    let pages = fx.page_providers().at("page providers")?;
    let setup = Setup::default();
    let mut rc = Reconnect::new(&TransportConfig::default()).at("Reconnect::new")?;
    // Each connection in a step of its own (kernel stack frames stay under 1 KiB).
    first_connection_lost(fx, &setup, (pages.0.clone(), pages.1.clone()), &mut rc)?;
    let mut p = Pair::over(&mut *fx, &setup, pages)?;
    owed_resent(&mut p, &mut rc)?;
    drop(rc);
    p.check_clean("after the resends")?;
    p.finish()
}

/// [`reconnect_resends_owed_calls_but_not_abandoned_ones`], first connection: after one
/// RPC, calls 0x61-0x63 through `rc` (a second 0x62 refused), the connection lost (only
/// `ConnectionLost` passed on, the three calls kept), 0x62 abandoned and handed back
/// byte-exact.
#[inline(never)]
fn first_connection_lost<F: Fixture>(
    fx: &mut F,
    setup: &Setup,
    pages: PagePair,
    rc: &mut Reconnect,
) -> Outcome {
    let mut p = Pair::over(&mut *fx, setup, pages)?;
    three_calls_and_a_duplicate(&mut p, rc)?;
    p.l.a.disconnect();
    let mut passed = Vec::new();
    let mut idle = 0;
    while !p.req.is_lost() {
        let mut evs = Vec::new();
        p.req.poll(&mut p.l.a, &mut |e| evs.push(e));
        let progress = !evs.is_empty();
        passed.extend(evs.into_iter().filter_map(|e| rc.on_event(e)));
        p.l.idle(&mut idle, progress, "the requester sees its loss")?;
    }
    eq(
        "events passed on (lost calls kept, not failed)",
        "[ConnectionLost]",
        format!("{passed:?}").as_str(),
    )?;
    eq("calls waiting", 3, rc.unsent())?;
    let a = rc
        .abandon(&mut p.req, &mut p.l.a, 0x62)
        .at("abandon 0x62")?;
    let back = a.call.at("abandoned call")?.to_vec().at("bytes")?;
    let (want, _) = Kind::Small.call(&p.l.pa, 0x62).at("call")?;
    bytes_eq("abandoned call", &want.to_vec().at("bytes")?, &back)?;
    Ok(())
}

/// After one RPC, calls 0x61-0x63 through `rc`, and a second 0x62 refused as a duplicate.
#[inline(never)]
fn three_calls_and_a_duplicate<F: Fixture>(p: &mut Pair<'_, F>, rc: &mut Reconnect) -> Outcome {
    let (call, spec) = Kind::Small.call(&p.l.pa, 0x60).at("warm-up call")?;
    let pb = p.l.pb.clone();
    p.rpc(call, spec, &mut |c| {
        Kind::Small.reply(&pb, c.xid).at("reply")
    })?;
    for xid in [0x61u32, 0x62, 0x63] {
        let (call, spec) = Kind::Small.call(&p.l.pa, xid).at("call")?;
        rc.call(&mut p.req, &mut p.l.a, call, spec)
            .map_err(|r| fail(format!("call {xid:#x}"), "accepted", r.error))?;
    }
    let (call, spec) = Kind::Small.call(&p.l.pa, 0x62).at("call")?;
    let dup = rc.call(&mut p.req, &mut p.l.a, call, spec).err();
    eq(
        "a second call 0x62",
        Some(CallError::DuplicateXid),
        dup.map(|r| r.error),
    )?;
    Ok(())
}

/// [`reconnect_resends_owed_calls_but_not_abandoned_ones`], second connection: `rc`'s owed
/// calls sent again as the credits allow (one at first), 0x61 and 0x63 carried and
/// answered byte-exact, 0x62 (abandoned) never.
#[inline(never)]
fn owed_resent<F: Fixture>(p: &mut Pair<'_, F>, rc: &mut Reconnect) -> Outcome {
    let mut failed = Vec::new();
    let waiting = rc.resend(&mut p.req, &mut p.l.a, &mut |e| failed.push(e));
    eq(
        "still waiting after the first resend (one credit)",
        1,
        waiting,
    )?;
    let mut seen = Vec::new();
    let mut replies = 0;
    let mut idle = 0;
    while rc.owed() > 0 {
        let mut calls = Vec::new();
        p.resp.poll(&mut p.l.b, &mut |e| {
            if let ResponderEvent::Call(c) = e {
                calls.push(c)
            }
        });
        let mut progress = !calls.is_empty();
        for c in calls {
            seen.push(c.xid);
            let reply = Kind::Small.reply(&p.l.pb, c.xid).at("reply")?;
            p.resp
                .reply(&mut p.l.b, c.ctx, reply)
                .map_err(|e| fail("reply", "sent", format!("{e:?}")))?;
        }
        let mut evs = Vec::new();
        p.req.poll(&mut p.l.a, &mut |e| evs.push(e));
        progress |= !evs.is_empty();
        for e in evs {
            match rc.on_event(e) {
                Some(RequesterEvent::Reply { xid, reply }) => {
                    bytes_eq(
                        format!("reply {xid:#x}"),
                        &Kind::Small.expected(xid),
                        &reply.to_vec().at("bytes")?,
                    )?;
                    replies += 1;
                }
                Some(RequesterEvent::Failed { xid, error, .. }) => {
                    return Err(fail(format!("call {xid:#x}"), "a reply", error))
                }
                _ => {}
            }
        }
        rc.resend(&mut p.req, &mut p.l.a, &mut |e| failed.push(e));
        eq("resends failed", 0, failed.len())?;
        p.l.idle(&mut idle, progress, "the resent calls answered")?;
    }
    seen.sort_unstable();
    eq(
        "calls the new connection carried",
        &[0x61u32, 0x63][..],
        &seen[..],
    )?;
    eq("replies", 2, replies)?;
    eq("retransmits", 2, rc.stats().retransmits)?;
    Ok(())
}

/// DDP data lengths around the XDR pad and the page size, and larger.
const DDP_SIZES: [usize; 9] = [1, 2, 3, 4, 4095, 4096, 4097, 65_539, 200_003];

#[inline(never)]
fn soak_kind(rng: &mut Rng) -> Kind {
    let size = |rng: &mut Rng| {
        DDP_SIZES
            .get(rng.below(DDP_SIZES.len() as u64) as usize)
            .copied()
            .unwrap_or(1)
    };
    match rng.below(10) {
        0..=2 => Kind::Small,
        3..=4 => Kind::Write(size(rng)),
        5..=7 => Kind::Read(size(rng)),
        _ => Kind::Long,
    }
}

/// A soak: [`Fixture::soak_calls`] calls of mixed shapes (small, DDP WRITE and READ at XDR-pad
/// and page-boundary sizes, Long Call and Long Reply), 16 owed at most, over connections of
/// which the first several are each broken at a random point by a random side (the
/// requester accepting Send With Invalidate on every other one, so Local Invalidates are
/// outstanding on the rest), each reconnected over the same pages with the owed calls sent
/// again. Every call ends with exactly one byte-exact reply; no dead connection leaves a
/// registration; at the end no page, registration or context is held.
pub fn soak_mixed_calls_across_connection_losses<F: Fixture>(fx: &mut F) -> Outcome {
    let total = fx.soak_calls();
    let planned = (total / 60).max(3);
    let mut kinds = Rng(0x9e37_79b9_7f4a_7c15);
    let mut losses = Rng(0x2545_f491_4f6c_dd1d);
    let mut kind = |_| soak_kind(&mut kinds);
    let mut conn = |n: u32| {
        let swi = n % 2 == 0;
        let req = TransportConfig {
            accept_remote_invalidate: swi,
            ..TransportConfig::default()
        };
        let points: &[Point] = if swi {
            &[Point::Read, Point::HandedUp, Point::Replied]
        } else {
            &[
                Point::Read,
                Point::HandedUp,
                Point::Replied,
                Point::Invalidating,
            ]
        };
        let loss = (n < planned).then(|| Loss {
            at: points
                .get(losses.below(points.len() as u64) as usize)
                .copied()
                .unwrap_or(Point::Read),
            nth: 1 + losses.below(8),
            side: if losses.below(2) == 0 {
                Side::A
            } else {
                Side::B
            },
        });
        (
            Setup {
                req,
                ..Setup::default()
            },
            loss,
        )
    };
    let mut plan = Plan {
        total,
        depth: 16,
        kind: &mut kind,
        conn: &mut conn,
        record_handles: false,
    };
    let mut figures = None;
    run(fx, &mut plan, &mut |mut p, ran| {
        figures = Some(format!(
            "soak: {total} calls answered once each over {} connections ({} lost), {} \
             retransmits, {} replies delivered at a loss",
            ran.connections, ran.losses, ran.retransmits, ran.answered_at_losses
        ));
        ensure(
            ran.losses >= planned.min(3),
            format!("connections lost ({} of {planned} planned)", ran.losses),
            "at least three",
        )?;
        // A loss before any reply was sent leaves at least its call owed.
        let early = ran
            .lost_at
            .iter()
            .filter(|at| matches!(at, Point::Read | Point::HandedUp))
            .count() as u64;
        ensure(
            ran.retransmits >= early,
            format!("retransmits ({early} losses before a reply was sent)"),
            "at least one per such loss",
        )?;
        p.check_clean("after the soak")?;
        p.finish()
    })?;
    if let Some(line) = figures {
        fx.log(&line);
    }
    Ok(())
}
