//! Connection loss (`Provider::disconnect`, by either side) at each step of a call: every
//! call issued ends exactly once — answered (byte-exact) or failed with `ConnectionLost` —
//! both endpoints see the loss, no registration is left and every page comes back.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::vec::Vec;

use krpc_rdma::provider::Provider;
use krpc_rdma::transport::{
    CallError, Incoming, ReplySpec, RequesterEvent, ResponderEvent, TransportConfig,
};

use crate::check::{bytes_eq, ensure, eq, fail, At, Failure, Outcome};
use crate::data::{Kind, WORKLOAD};
use crate::fixture::Fixture;
use crate::pair::{End, Pair, Side};

/// Where in a call the connection goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Before the calls are sent.
    BeforeSend,
    /// After the responder took the first call and started its RDMA Reads.
    DuringRead,
    /// After the calls were handed up, before any reply.
    AfterHandUp,
    /// Right after the replies were posted.
    DuringReply,
}

/// The calls of one run and how they ended.
struct Run {
    kinds: BTreeMap<u32, Kind>,
    ended: BTreeMap<u32, End>,
    req_lost: bool,
    resp_lost: bool,
    held: Vec<Incoming>,
}

impl Run {
    fn absorb_req(&mut self, evs: Vec<RequesterEvent>, what: &str) -> Result<bool, Failure> {
        let progress = !evs.is_empty();
        for e in evs {
            let (xid, end) = match e {
                RequesterEvent::Reply { xid, reply } => (xid, End::Reply(reply)),
                RequesterEvent::Failed { xid, error, pages } => (xid, End::Failed(error, pages)),
                RequesterEvent::ConnectionLost => {
                    self.req_lost = true;
                    continue;
                }
                RequesterEvent::Connected(_) => continue,
                RequesterEvent::ReverseCall(rc) => {
                    return Err(fail(
                        format!("{what}: reverse call {:#x}", rc.xid),
                        "no reverse-direction call (none enabled)",
                        "one",
                    ))
                }
            };
            ensure(
                self.kinds.contains_key(&xid),
                format!("{what}: end of {xid:#x}"),
                "a call that was issued",
            )?;
            ensure(
                self.ended.insert(xid, end).is_none(),
                format!("{what}: end of {xid:#x}"),
                "one end per call",
            )?;
        }
        Ok(progress)
    }

    fn absorb_resp(&mut self, evs: Vec<ResponderEvent>) -> bool {
        let progress = !evs.is_empty();
        for e in evs {
            match e {
                ResponderEvent::Call(c) => self.held.push(c),
                ResponderEvent::ConnectionLost => self.resp_lost = true,
                // No reverse call is sent here: nothing of it can come back.
                ResponderEvent::Connected(_)
                | ResponderEvent::ReverseReply { .. }
                | ResponderEvent::ReverseFailed { .. } => {}
            }
        }
        progress
    }
}

#[inline(never)]
fn poll_resp<F: Fixture>(p: &mut Pair<'_, F>, budget: usize) -> Vec<ResponderEvent> {
    let mut evs = Vec::new();
    p.resp
        .poll_bounded(&mut p.l.b, budget, &mut |e| evs.push(e));
    evs
}

#[inline(never)]
fn poll_req<F: Fixture>(p: &mut Pair<'_, F>) -> Vec<RequesterEvent> {
    let mut evs = Vec::new();
    p.req.poll(&mut p.l.a, &mut |e| evs.push(e));
    evs
}

/// Answer the held calls; after the loss a reply may be refused (it is then dropped).
#[inline(never)]
fn answer<F: Fixture>(p: &mut Pair<'_, F>, run: &mut Run) -> Result<bool, Failure> {
    let progress = !run.held.is_empty();
    for c in core::mem::take(&mut run.held) {
        let reply = Kind::of(&c.call).reply(&p.l.pb, c.xid).at("reply")?;
        drop(c.call);
        let _ = p.resp.reply(&mut p.l.b, c.ctx, reply);
    }
    Ok(progress)
}

#[inline(never)]
fn loss_at<F: Fixture>(fx: &mut F, step: Step, side: Side) -> Outcome {
    let what = format!("{side:?} disconnects {step:?}");
    let what = what.as_str();
    let mut p = Pair::with(fx, TransportConfig::default())?;
    let mut run = Run {
        kinds: BTreeMap::new(),
        ended: BTreeMap::new(),
        req_lost: false,
        resp_lost: false,
        held: Vec::new(),
    };
    // In steps of their own (kernel stack frames stay under 1 KiB).
    calls_made(&mut p, &mut run, step, side, what)?;
    broken(&mut p, &mut run, step, side, what)?;
    all_ended(&mut p, &mut run, what)?;
    ends_checked(&mut p, &run, what)?;
    drop(run);
    p.finish().map_err(|f| Failure {
        step: format!("{what}: {}", f.step),
        ..f
    })
}

#[inline(never)]
fn both_sides<F: Fixture>(fx: &mut F, step: Step) -> Outcome {
    loss_at(fx, step, Side::A)?;
    loss_at(fx, step, Side::B)
}

/// Loss before the calls are sent.
pub fn loss_before_send<F: Fixture>(fx: &mut F) -> Outcome {
    both_sides(fx, Step::BeforeSend)
}

/// Loss while the responder waits for its RDMA Reads of a call.
pub fn loss_during_rdma_read<F: Fixture>(fx: &mut F) -> Outcome {
    both_sides(fx, Step::DuringRead)
}

/// Loss after the calls were handed up, before their replies.
pub fn loss_after_hand_up<F: Fixture>(fx: &mut F) -> Outcome {
    both_sides(fx, Step::AfterHandUp)
}

/// Loss right after the replies (RDMA Writes, Long Replies, Sends) were posted.
pub fn loss_during_reply<F: Fixture>(fx: &mut F) -> Outcome {
    both_sides(fx, Step::DuringReply)
}

/// [`loss_at`], first step: one RPC for the credits, then the calls of [`WORKLOAD`] until
/// one is refused (the connection already broken by `side` if `step` is `BeforeSend`).
#[inline(never)]
fn calls_made<F: Fixture>(
    p: &mut Pair<'_, F>,
    run: &mut Run,
    step: Step,
    side: Side,
    what: &str,
) -> Outcome {
    // Credits first: one RPC.
    let (call, spec) = Kind::Small.call(&p.l.pa, 1).at("warm-up call")?;
    let pb = p.l.pb.clone();
    p.rpc(call, spec, &mut |c| {
        Kind::Small.reply(&pb, c.xid).at("reply")
    })?;
    ensure(
        p.req.credits_granted() > 8,
        what,
        "a grant above 8 after one RPC",
    )?;
    if step == Step::BeforeSend {
        p.l.qp(side).disconnect();
    }
    for (i, &kind) in WORKLOAD.iter().enumerate() {
        let xid = 0x100 + i as u32;
        let (call, spec): (_, ReplySpec) = kind.call(&p.l.pa, xid).at("call")?;
        match p.req.call(&mut p.l.a, call, spec) {
            Ok(()) => {
                run.kinds.insert(xid, kind);
            }
            Err(rej) => {
                let ok = matches!(
                    rej.error,
                    CallError::NoCredit | CallError::WouldBlock | CallError::ConnectionLost
                ) || (step == Step::BeforeSend
                    && matches!(rej.error, CallError::Provider(_)));
                ensure(
                    ok,
                    format!("{what}: refusal of {xid:#x} ({})", rej.error),
                    "back-pressure or a lost connection",
                )?;
                break;
            }
        }
    }
    Ok(())
}

/// Second step: `side` disconnects at `step` (after the calls: during an RDMA Read, after
/// hand-up, or after the replies were posted).
#[inline(never)]
fn broken<F: Fixture>(
    p: &mut Pair<'_, F>,
    run: &mut Run,
    step: Step,
    side: Side,
    what: &str,
) -> Outcome {
    match step {
        Step::BeforeSend => {}
        Step::DuringRead => {
            // One completion at a time, until the responder took a call with a read chunk
            // (its RDMA Reads are then posted or waiting for room).
            let mut idle = 0;
            while p.resp.counters().read_chunks == 0 {
                let evs = poll_resp(p, 1);
                let progress = run.absorb_resp(evs);
                p.l.idle(
                    &mut idle,
                    progress,
                    &format!("{what}: a call with a read chunk"),
                )?;
            }
            p.l.qp(side).disconnect();
        }
        Step::AfterHandUp | Step::DuringReply => {
            let mut idle = 0;
            while run.held.len() < run.kinds.len() {
                let evs = poll_resp(p, usize::MAX);
                let progress = run.absorb_resp(evs);
                if run.resp_lost {
                    return Err(fail(format!("{what}: hand-up"), "no loss yet", "lost"));
                }
                p.l.idle(
                    &mut idle,
                    progress,
                    &format!("{what}: hand-up of {} calls", run.kinds.len()),
                )?;
            }
            if step == Step::DuringReply {
                answer(p, run)?;
            }
            p.l.qp(side).disconnect();
        }
    }
    Ok(())
}

/// Third step: drive until both sides saw the loss and every call ended.
#[inline(never)]
fn all_ended<F: Fixture>(p: &mut Pair<'_, F>, run: &mut Run, what: &str) -> Outcome {
    let mut idle = 0;
    while !(run.req_lost && run.resp_lost && run.ended.len() == run.kinds.len()) {
        let evs = poll_resp(p, usize::MAX);
        let mut progress = run.absorb_resp(evs);
        progress |= answer(p, run)?;
        let evs = poll_req(p);
        progress |= run.absorb_req(evs, what)?;
        let state = format!(
            "{what}: requester lost {}, responder lost {}, {} of {} calls ended",
            run.req_lost,
            run.resp_lost,
            run.ended.len(),
            run.kinds.len()
        );
        p.l.idle(&mut idle, progress, &state)?;
    }
    Ok(())
}

/// Last step: every call ended with its byte-exact reply or `ConnectionLost`; the requester
/// lost once with nothing outstanding, no registration left on either side.
#[inline(never)]
fn ends_checked<F: Fixture>(p: &mut Pair<'_, F>, run: &Run, what: &str) -> Outcome {
    for (xid, end) in &run.ended {
        match end {
            End::Reply(c) => {
                let kind = run.kinds.get(xid).copied().at("kind")?;
                bytes_eq(
                    format!("{what}: reply {xid:#x}"),
                    &kind.expected(*xid),
                    &c.to_vec().at("bytes")?,
                )?;
            }
            End::Failed(e, _) => eq(
                format!("{what}: failure of {xid:#x}"),
                CallError::ConnectionLost,
                *e,
            )?,
        }
    }
    ensure(p.req.is_lost(), what, "the requester lost")?;
    eq(format!("{what}: outstanding"), 0, p.req.outstanding())?;
    eq(
        format!("{what}: connection losses"),
        1,
        p.req.counters().connection_losses,
    )?;
    let fx = &*p.l.fx;
    eq(
        format!("{what}: requester registrations"),
        0,
        fx.live_registrations(&p.l.a),
    )?;
    eq(
        format!("{what}: responder registrations"),
        0,
        fx.live_registrations(&p.l.b),
    )?;
    Ok(())
}
