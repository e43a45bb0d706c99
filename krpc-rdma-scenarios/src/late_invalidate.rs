//! The late reply to an abandoned call that comes with Send With Invalidate of a handle the
//! abandon revoked (issue 15): `Requester::abandon` revokes at once but holds the handles
//! back (`Provider::revoke`), so the late Send With Invalidate finds the key it names
//! unchanged — not bumped by a re-registration for another call, which fails the queue pair
//! on rxe (`rxe_invalidate_mr`: key mismatch) — and the connection carries on. A provider
//! that releases instead (`revoke` returns `Revoked::Released`: the libibverbs provider's memory
//! windows) gets the call dropped by the server instead of the late reply.

use alloc::format;
use krpc_rdma::transport::{Incoming, ReplySpec, ResponderEvent};

use crate::check::{bytes_eq, ensure, eq, fail, At, Outcome};
use crate::data::Kind;
use crate::fixture::{Fixture, Setup};
use crate::pair::Pair;
use crate::raw::advertised_handles;

/// A reply chunk for a small call: a reply of up to 64 KiB is provisioned (registered and
/// advertised), the actual reply is inline, and the responder invalidates the reply chunk's
/// handle with its Send.
const REPLY_CHUNK: usize = 64 * 1024;

/// Drive until the responder hands up one call; that call.
#[inline(never)]
fn take_call<F: Fixture>(p: &mut Pair<'_, F>, step: &str) -> Result<Incoming, crate::Failure> {
    let mut idle = 0;
    loop {
        let mut got = None;
        let mut progress = false;
        p.resp.poll(&mut p.l.b, &mut |e| {
            progress = true;
            if let ResponderEvent::Call(c) = e {
                got = Some(c);
            }
        });
        if let Some(c) = got {
            return Ok(c);
        }
        p.req.poll(&mut p.l.a, &mut |_| progress = true);
        p.l.idle(&mut idle, progress, step)?;
    }
}

/// One small RPC with a reply chunk, answered at once; its reply checked.
#[inline(never)]
fn rpc_with_reply_chunk<F: Fixture>(p: &mut Pair<'_, F>, xid: u32) -> Outcome {
    let (call, _) = Kind::Small.call(&p.l.pa, xid).at("call")?;
    let pb = p.l.pb.clone();
    let r = p.rpc(call, ReplySpec::inline(REPLY_CHUNK), &mut |c| {
        Kind::Small.reply(&pb, c.xid).at("reply")
    })?;
    bytes_eq(
        "the reply",
        &Kind::Small.expected(xid),
        &r.to_vec().at("bytes")?,
    )
}

/// A call with a reply chunk is taken by the responder and abandoned by the caller (its
/// handle revoked, held back: `abandon_quarantines`, no live registration); the next calls
/// register reply chunks of their own and complete; then the late reply comes, with Send
/// With Invalidate of the revoked handle: it is dropped (`late_replies`), the connection
/// stays up, and a call after it completes. Nothing is left registered.
pub fn late_send_with_invalidate_after_abandon_keeps_the_connection<F: Fixture>(
    fx: &mut F,
) -> Outcome {
    let mut p = Pair::new(fx, &Setup::default())?;
    // A first RPC: the responder's grant, and a registration made and released before.
    rpc_with_reply_chunk(&mut p, 1)?;
    let (call, _) = Kind::Small.call(&p.l.pa, 20).at("the call to abandon")?;
    p.call(call, ReplySpec::inline(REPLY_CHUNK), "the call to abandon")?;
    let dead = advertised_handles(&mut p.l.a, 20);
    ensure(!dead.is_empty(), "reply chunk advertised", "a handle")?;
    let held = take_call(&mut p, "the call handed up")?;
    let a = p.req.abandon(&mut p.l.a, 20).at("abandon")?;
    drop(a);
    eq(
        "registrations right after abandon",
        0,
        p.l.fx.live_registrations(&p.l.a),
    )?;
    if p.req.counters().abandon_quarantines == 0 {
        // The provider released instead of holding the handle back (memory windows: see
        // `Provider::revoke`): a late Send With Invalidate of it would break the
        // connection (or, for a window still FREE under the same key, crash Linux 6.1's
        // rxe), so the server drops the call here and the rest is not this provider's.
        p.l.fx.log(
            "late_send_with_invalidate_after_abandon_keeps_the_connection: the provider \
             releases at abandon (no handle held back); the late reply is not sent",
        );
        drop(held.call);
        p.resp
            .drop_call(&mut p.l.b, held.ctx, &mut |_| {})
            .map_err(|e| fail("drop the call", "Ok", format!("{e:?}")))?;
        rpc_with_reply_chunk(&mut p, 21)?;
        return p.finish();
    }
    // Other calls register (and release) reply chunks meanwhile.
    for xid in 21..24 {
        rpc_with_reply_chunk(&mut p, xid)?;
    }
    // The late reply, with Send With Invalidate of the revoked handle.
    let invs = p.resp.counters().send_with_invalidate;
    let late = Kind::Small.reply(&p.l.pb, 20).at("late reply")?;
    drop(held.call);
    p.resp
        .reply(&mut p.l.b, held.ctx, late)
        .map_err(|e| fail("late reply", "sent", format!("{e:?}")))?;
    let mut idle = 0;
    while p.req.outstanding() > 0 {
        let mut progress = false;
        p.req.poll(&mut p.l.a, &mut |_| progress = true);
        p.resp.poll(&mut p.l.b, &mut |_| progress = true);
        ensure(!p.req.is_lost(), "after the late reply", "connected")?;
        p.l.idle(&mut idle, progress, "the late reply arrives")?;
    }
    eq(
        "the late reply invalidated a handle",
        invs + 1,
        p.resp.counters().send_with_invalidate,
    )?;
    eq("late replies", 1, p.req.counters().late_replies)?;
    eq(
        "quarantined abandons",
        1,
        p.req.counters().abandon_quarantines,
    )?;
    eq("closes by abandon", 0, p.req.counters().abandon_closes)?;
    rpc_with_reply_chunk(&mut p, 30)?;
    eq("lost", false, p.req.is_lost())?;
    p.check_clean("after the late reply")?;
    p.finish()
}
