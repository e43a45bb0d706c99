//! Liveness under pressure (issue 14): work the Responder has to put off for want of a
//! send-queue slot resumes when a completion frees one — not only when a new message
//! arrives (one may never come).

use alloc::format;
use alloc::vec::Vec;

use krpc_rdma::transport::{Incoming, ReplyError, ReplySpec, ResponderEvent, TransportConfig};

use crate::check::{bytes_eq, ensure, eq, fail, At, Failure, Outcome};
use crate::data::Kind;
use crate::fixture::{Fixture, Limits, Setup};
use crate::pair::{End, Pair};

/// Poll the responder; calls handed up go to `held`.
#[inline(never)]
fn take_calls<F: Fixture>(p: &mut Pair<'_, F>, held: &mut Vec<Incoming>, budget: usize) -> bool {
    let mut progress = false;
    p.resp.poll_bounded(&mut p.l.b, budget, &mut |e| {
        progress = true;
        if let ResponderEvent::Call(c) = e {
            held.push(c);
        }
    });
    progress
}

/// What the requester's polls ended.
type Ended = Vec<(u32, End)>;

/// Drive until `done` holds, polling both sides (no new call is made).
#[inline(never)]
fn until<F: Fixture>(
    p: &mut Pair<'_, F>,
    held: &mut Vec<Incoming>,
    ended: &mut Ended,
    step: &str,
    done: &dyn Fn(&Pair<'_, F>, usize, usize) -> bool,
) -> Outcome {
    let mut idle = 0;
    while !done(p, held.len(), ended.len()) {
        let mut progress = take_calls(p, held, usize::MAX);
        progress |= p.poll_ends(ended)?;
        p.l.idle(&mut idle, progress, step)?;
    }
    Ok(())
}

/// A pair whose queue pairs have `slots` send-queue slots each, after one round trip (for
/// the credits beyond the first).
#[inline(never)]
fn warmed_pair<F: Fixture>(fx: &mut F, slots: u32) -> Result<Pair<'_, F>, Failure> {
    let setup = Setup {
        limits: Limits {
            max_send_wr: Some(slots),
            ..Limits::default()
        },
        ..Setup::both(TransportConfig::default())
    };
    let mut p = Pair::new(fx, &setup)?;
    let (call, spec) = Kind::Small.call(&p.l.pa, 0xffff).at("warm-up call")?;
    let pb = p.l.pb.clone();
    p.rpc(call, spec, &mut |c| {
        Kind::Small.reply(&pb, c.xid).at("reply")
    })?;
    // The warm-up's Sends completed and polled on both sides: the reply can arrive before
    // the call's Send completion is reaped (rxe under load), which would leave a slot taken
    // and refuse the scenario's first call ("transport resources busy", seen once in 20
    // in-kernel runs).
    p.quiesce()?;
    Ok(p)
}

/// Send the call `kind` with `xid` and wait until its Send completed (delivered, not yet
/// polled by the responder); returns the call's bytes.
#[inline(never)]
fn deliver<F: Fixture>(
    p: &mut Pair<'_, F>,
    kind: Kind,
    xid: u32,
    ended: &mut Ended,
) -> Result<Vec<u8>, Failure> {
    let (call, spec): (_, ReplySpec) = kind.call(&p.l.pa, xid).at("call")?;
    let want = call.to_vec().at("call bytes")?;
    p.call(call, spec, "call")?;
    let mut idle = 0;
    while p.l.fx.sq_outstanding(&p.l.a) > 0 {
        let progress = p.poll_ends(ended)?;
        p.l.idle(&mut idle, progress, "the call's Send completes")?;
    }
    Ok(want)
}

/// Poll the responder one completion at a time until it took a call with a read chunk.
#[inline(never)]
fn take_the_read_call<F: Fixture>(p: &mut Pair<'_, F>, held: &mut Vec<Incoming>) -> Outcome {
    let mut idle = 0;
    while p.resp.counters().read_chunks == 0 {
        let progress = take_calls(p, held, 1);
        p.l.idle(&mut idle, progress, "the call with a read chunk taken")?;
    }
    Ok(())
}

/// One send-queue slot per side (`Limits::max_send_wr` 1). A call is handed up; a WRITE
/// (read chunk) arrives behind it; the first call's reply Send takes the responder's only
/// slot before the WRITE's Receive is polled, so the WRITE's RDMA Read cannot be posted
/// (checked after polling exactly that one completion). With no further message from the
/// requester, the reply Send's completion must restart the Read: the WRITE is handed up
/// byte-exact and both calls get their replies.
#[inline(never)]
pub fn a_read_stalled_on_a_full_send_queue_resumes_when_a_send_completes<F: Fixture>(
    fx: &mut F,
) -> Outcome {
    let mut p = warmed_pair(fx, 1)?;
    let (mut held, mut ended) = (Vec::new(), Vec::new());
    // In steps of their own (kernel stack frames stay under 1 KiB).
    let kind = Kind::Write(8192);
    let want = stall_the_read(&mut p, &mut held, &mut ended, kind)?;
    // No new message: the reply Send's completion must restart the Read.
    until(
        &mut p,
        &mut held,
        &mut ended,
        "the WRITE handed up",
        &|_, h, _| h > 0,
    )?;
    let w = held.pop().at("the WRITE")?;
    bytes_eq("the WRITE's call", &want, &w.call.to_vec().at("bytes")?)?;
    let reply = kind.reply(&p.l.pb, w.xid).at("reply")?;
    drop(w.call);
    p.resp
        .reply(&mut p.l.b, w.ctx, reply)
        .map_err(|e| fail("WRITE reply", "sent", format!("{e:?}")))?;
    until(&mut p, &mut held, &mut ended, "both replies", &|_, _, e| {
        e == 2
    })?;
    replies_exact(ended, kind, Kind::Small)?;
    ensure(held.is_empty(), "calls held", "none")?;
    p.check_clean("after the stall")?;
    p.finish()
}

/// [`a_read_stalled_on_a_full_send_queue_resumes_when_a_send_completes`], first step: the
/// first call handed up, the WRITE `kind` (XID 2) delivered behind it, the first call's
/// reply in the responder's only slot, and the WRITE's Receive polled with its Read not
/// posted; returns the WRITE's call bytes.
#[inline(never)]
fn stall_the_read<F: Fixture>(
    p: &mut Pair<'_, F>,
    held: &mut Vec<Incoming>,
    ended: &mut Ended,
    kind: Kind,
) -> Result<Vec<u8>, Failure> {
    // The first call, handed up; both send queues empty again.
    let (call, spec) = Kind::Small.call(&p.l.pa, 1).at("first call")?;
    p.call(call, spec, "first call")?;
    until(p, held, ended, "first call handed up", &|p, h, _| {
        h == 1 && p.l.fx.sq_outstanding(&p.l.a) == 0 && p.l.fx.sq_outstanding(&p.l.b) == 0
    })?;
    // The WRITE, delivered (its Send completed) but not yet polled by the responder.
    let want = deliver(p, kind, 2, ended)?;
    // The first call's reply takes the responder's only slot.
    let first = held.pop().at("the first call")?;
    let reply = Kind::Small.reply(&p.l.pb, first.xid).at("reply")?;
    drop(first.call);
    p.resp
        .reply(&mut p.l.b, first.ctx, reply)
        .map_err(|e| fail("first reply", "sent", format!("{e:?}")))?;
    eq("responder's send queue", 1, p.l.fx.sq_outstanding(&p.l.b))?;
    // Exactly one completion: the WRITE's Receive (it came first). Its Read has no slot.
    take_the_read_call(p, held)?;
    eq("handed up while the Read waits", 0, held.len())?;
    eq(
        "responder's send queue (the reply Send, no Read)",
        1,
        p.l.fx.sq_outstanding(&p.l.b),
    )?;
    eq("bytes read so far", 0, p.resp.counters().rdma_read_bytes)?;
    Ok(want)
}

/// Every call of `ended` got its byte-exact reply: `two`'s for XID 2, `other`'s for the rest.
#[inline(never)]
fn replies_exact(ended: Ended, two: Kind, other: Kind) -> Outcome {
    for (xid, end) in ended {
        let expect = if xid == 2 { two } else { other }.expected(xid);
        match end {
            End::Reply(c) => bytes_eq(format!("reply {xid}"), &expect, &c.to_vec().at("bytes")?)?,
            End::Failed(e, _) => return Err(fail(format!("call {xid}"), "a reply", e)),
        }
    }
    Ok(())
}

/// A reply built while another call's RDMA Reads are under way leaves those Reads alone.
/// The Responder once planned both in the same scratch: the reply's RDMA Writes replaced the
/// Read plan, and the stalled Reads resumed from the reply's segments — an RDMA Read from the
/// requester's write chunk (refused by rxe as a remote access error, which broke the
/// connection in the kernel soak), or a call handed up with pages never read.
///
/// `Limits::max_send_wr` 3: a READ call (write chunk) is handed up and held; a 1 MiB+3 WRITE
/// (read chunk) follows and is taken with exactly one completion, so its Reads fill the
/// responder's send queue and stall. The READ's reply is offered then (refused for now, or
/// posted), and offered again until it goes; the WRITE must be handed up byte-exact and
/// both calls get their replies.
pub fn a_reply_built_while_reads_stall_leaves_the_reads_alone<F: Fixture>(fx: &mut F) -> Outcome {
    let mut p = warmed_pair(fx, SLOTS)?;
    let (mut held, mut ended) = (Vec::new(), Vec::new());
    // In steps of their own (kernel stack frames stay under 1 KiB).
    let read = Kind::Read(100);
    let write = Kind::Write(1024 * 1024 + 3);
    let want = stall_the_reads(&mut p, &mut held, &mut ended, read, write)?;
    let w = read_answered_while_stalled(&mut p, &mut held, &mut ended, read)?;
    bytes_eq("the WRITE's call", &want, &w.call.to_vec().at("bytes")?)?;
    write_answered(&mut p, &mut held, &mut ended, w, write)?;
    replies_exact(ended, write, read)?;
    ensure(held.is_empty(), "calls held", "none")?;
    p.check_clean("after the stalled Reads")?;
    p.finish()
}

/// The send-queue slots of [`a_reply_built_while_reads_stall_leaves_the_reads_alone`].
const SLOTS: u32 = 3;

/// [`a_reply_built_while_reads_stall_leaves_the_reads_alone`], first step: the READ call
/// `read` (XID 1) handed up and held, the WRITE `write` (XID 2) taken with its Reads filling
/// the send queue and stalled; returns the WRITE's call bytes.
#[inline(never)]
fn stall_the_reads<F: Fixture>(
    p: &mut Pair<'_, F>,
    held: &mut Vec<Incoming>,
    ended: &mut Ended,
    read: Kind,
    write: Kind,
) -> Result<Vec<u8>, Failure> {
    let (call, spec) = read.call(&p.l.pa, 1).at("READ call")?;
    p.call(call, spec, "READ call")?;
    until(p, held, ended, "READ call handed up", &|p, h, _| {
        h == 1 && p.l.fx.sq_outstanding(&p.l.a) == 0 && p.l.fx.sq_outstanding(&p.l.b) == 0
    })?;
    let want = deliver(p, write, 2, ended)?;
    // Exactly one completion: the WRITE's Receive. Its Reads take every slot and stall.
    take_the_read_call(p, held)?;
    // The job posted Reads up to the slots and stalled with more to post. (How many of them
    // the queue pair still counts as outstanding is the provider's timing: a verbs binding
    // retires a request when it reaps its completion from the device, which rxe may already
    // have delivered, while the Responder has not seen it yet. The Responder's own state is
    // what the bug needs: a job in the middle of its Reads.)
    ensure(
        p.l.fx.sq_outstanding(&p.l.b) <= SLOTS as usize,
        "responder's send queue (the WRITE's Reads)",
        "at most the slots",
    )?;
    let posted = p.resp.counters().rdma_read_bytes;
    ensure(
        posted > 0 && posted < want.len() as u64,
        "bytes of RDMA Read posted before the stall",
        "some, fewer than the WRITE carries",
    )?;
    Ok(want)
}

/// Second step: the READ's reply offered while the Reads wait (refused for now, or posted),
/// and again until it goes, while the WRITE is handed up; returns the WRITE.
#[inline(never)]
fn read_answered_while_stalled<F: Fixture>(
    p: &mut Pair<'_, F>,
    held: &mut Vec<Incoming>,
    ended: &mut Ended,
    read: Kind,
) -> Result<Incoming, Failure> {
    let x = held.pop().at("the READ call")?;
    let reply = read.reply(&p.l.pb, x.xid).at("READ reply")?;
    drop(x.call);
    let mut pending = Some((x.ctx, reply));
    let mut idle = 0;
    let mut write_call = None;
    while pending.is_some() || write_call.is_none() {
        let mut progress = false;
        if let Some((ctx, reply)) = pending.take() {
            match p.resp.reply(&mut p.l.b, ctx, reply) {
                Ok(()) => progress = true,
                Err(ReplyError::WouldBlock { ctx, reply }) => pending = Some((ctx, reply)),
                Err(e) => {
                    return Err(fail(
                        "READ reply",
                        "posted or refused for now",
                        format!("{e:?}"),
                    ))
                }
            }
        }
        progress |= take_calls(p, held, usize::MAX);
        progress |= p.poll_ends(ended)?;
        if write_call.is_none() {
            write_call = held.pop();
        }
        p.l.idle(
            &mut idle,
            progress,
            "the WRITE handed up and the READ answered",
        )?;
    }
    write_call.at("the WRITE")
}

/// Last step: the WRITE `w`'s reply posted (offered again while refused for now) and both
/// replies in.
#[inline(never)]
fn write_answered<F: Fixture>(
    p: &mut Pair<'_, F>,
    held: &mut Vec<Incoming>,
    ended: &mut Ended,
    w: Incoming,
    write: Kind,
) -> Outcome {
    let reply = write.reply(&p.l.pb, w.xid).at("WRITE reply")?;
    drop(w.call);
    let mut pending = Some((w.ctx, reply));
    let mut idle = 0;
    while pending.is_some() || ended.len() < 2 {
        let mut progress = false;
        if let Some((ctx, reply)) = pending.take() {
            match p.resp.reply(&mut p.l.b, ctx, reply) {
                Ok(()) => progress = true,
                Err(ReplyError::WouldBlock { ctx, reply }) => pending = Some((ctx, reply)),
                Err(e) => return Err(fail("WRITE reply", "posted", format!("{e:?}"))),
            }
        }
        progress |= take_calls(p, held, usize::MAX);
        progress |= p.poll_ends(ended)?;
        p.l.idle(&mut idle, progress, "both replies")?;
    }
    Ok(())
}
