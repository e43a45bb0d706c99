//! Giving up on calls (issue 14): `Requester::abandon` (a krpc timeout or signal) revokes the
//! call's registrations before it returns — so the caller may reuse its pages at once and
//! the peer can no longer reach them (RFC 8166 §8.1.3) — and drops the late reply;
//! `Requester::close` fails every pending call and hands the caller's pages back.

use alloc::format;
use alloc::vec::Vec;

use krpc_rdma::provider::Provider;
use krpc_rdma::transport::{
    Abandoned, CallError, Incoming, RequesterEvent, ResponderEvent, TransportConfig,
};
use mbuf::Chain;

use crate::check::{bytes_eq, ensure, eq, fail, At, Outcome};
use crate::data::{pattern, Kind};
use crate::fixture::{Fixture, Setup};
use crate::pair::{Pair, Side};
use crate::raw::{advertised_handles, Advertised};
use crate::reconnect::probe_dead;

/// One small RPC, so the responder's grant (not the first single credit) bounds the calls.
#[inline(never)]
fn warm<F: Fixture>(p: &mut Pair<'_, F>) -> Outcome {
    let (call, spec) = Kind::Small.call(&p.l.pa, 0xffff).at("warm-up call")?;
    let pb = p.l.pb.clone();
    p.rpc(call, spec, &mut |c| {
        Kind::Small.reply(&pb, c.xid).at("reply")
    })?;
    ensure(p.req.credits_granted() > 2, "grant", "more than 2 credits")
}

/// Poll the requester: any reply or failure among its events is a failure (nothing may be
/// reported for an abandoned call).
#[inline(never)]
fn poll_silent<F: Fixture>(p: &mut Pair<'_, F>, step: &str) -> Result<bool, crate::Failure> {
    let mut evs = Vec::new();
    p.req.poll(&mut p.l.a, &mut |e| evs.push(e));
    if let Some(e) = evs.iter().find(|e| {
        matches!(
            e,
            RequesterEvent::Reply { .. } | RequesterEvent::Failed { .. }
        )
    }) {
        return Err(fail(step, "nothing reported", format!("{e:?}")));
    }
    Ok(!evs.is_empty())
}

/// A WRITE (read chunk, already read by the responder) and a READ (write chunk, not yet
/// answered), both abandoned: the caller's call chain and pages come back at once, only
/// once, with no registration left; the slots and credits stay until the replies. The
/// WRITE's late reply is dropped (counted) and frees its slot and XID; the READ's reply is
/// never sent (the server drops the call), so its slot stays until the connection goes.
/// Then the caller reuses the READ's pages, and neither call's handle gives the peer
/// access (probed with raw RDMA from side B, which breaks the connection): the pages keep
/// what the caller wrote.
///
/// The requester does not accept Send With Invalidate here: a late reply that invalidates
/// the abandoned call's handle, revoked already, is a remote invalid request at the
/// receiver (rxe, and the soft provider, break the connection on it).
pub fn abandon_revokes_at_once_and_drops_the_late_reply<F: Fixture>(fx: &mut F) -> Outcome {
    let setup = Setup {
        req: TransportConfig {
            accept_remote_invalidate: false,
            ..TransportConfig::default()
        },
        ..Setup::default()
    };
    let mut p = Pair::new(fx, &setup)?;
    // In steps of their own (kernel stack frames stay under 1 KiB).
    let (wlen, dead, held) = both_taken(&mut p)?;
    let (a, b) = both_abandoned(&mut p, wlen)?;
    let mut pages = b.pages.at("the READ's pages")?;
    let mine = reuse_pages(&mut pages)?;
    let c11 = late_reply_dropped(&mut p, held)?;
    read_dropped_and_handles_dead(&mut p, c11, &dead, &pages, &mine)?;
    drop((a, b.call, pages));
    p.finish()
}

/// [`abandon_revokes_at_once_and_drops_the_late_reply`], first step: a WRITE (XID 10) and a
/// READ (XID 11) called and both taken by the responder (the WRITE's data read); returns
/// the WRITE's call length, both calls' handles and the held calls.
#[inline(never)]
fn both_taken<F: Fixture>(
    p: &mut Pair<'_, F>,
) -> Result<(usize, Vec<Advertised>, Vec<Incoming>), crate::Failure> {
    warm(p)?;
    let (w, ws) = Kind::Write(64 * 1024).call(&p.l.pa, 10).at("WRITE call")?;
    let wlen = w.len();
    p.call(w, ws, "WRITE call")?;
    let mut dead = advertised_handles(&mut p.l.a, 10);
    let (r, rs) = Kind::Read(32 * 1024).call(&p.l.pa, 11).at("READ call")?;
    p.call(r, rs, "READ call")?;
    let hr = advertised_handles(&mut p.l.a, 11);
    ensure(
        !dead.is_empty() && !hr.is_empty(),
        "handles advertised",
        "both calls have some",
    )?;
    dead.extend(hr);
    // The responder takes both (the WRITE's data is read).
    let mut held: Vec<Incoming> = Vec::new();
    let mut idle = 0;
    while held.len() < 2 {
        let mut progress = false;
        p.resp.poll(&mut p.l.b, &mut |e| {
            progress = true;
            if let ResponderEvent::Call(c) = e {
                held.push(c);
            }
        });
        progress |= poll_silent(p, "before abandon")?;
        p.l.idle(&mut idle, progress, "both calls handed up")?;
    }
    Ok((wlen, dead, held))
}

/// Second step: both calls abandoned; the WRITE's call chain (`wlen` bytes) and the READ's
/// pages come back at once and only once, no registration is left, the slots stay.
#[inline(never)]
fn both_abandoned<F: Fixture>(
    p: &mut Pair<'_, F>,
    wlen: usize,
) -> Result<(Abandoned, Abandoned), crate::Failure> {
    let a = p.req.abandon(&mut p.l.a, 10).at("abandon the WRITE")?;
    eq(
        "the WRITE's call back",
        Some(wlen),
        a.call.as_ref().map(|c| c.len()),
    )?;
    eq("the WRITE's pages", true, a.pages.is_none())?;
    let b = p.req.abandon(&mut p.l.a, 11).at("abandon the READ")?;
    let pages = b.pages.as_ref().at("the READ's pages back")?;
    eq("the READ's pages", 32 * 1024, pages.len())?;
    eq(
        "abandon again",
        true,
        p.req.abandon(&mut p.l.a, 11).is_none(),
    )?;
    eq(
        "registrations right after abandon",
        0,
        p.l.fx.live_registrations(&p.l.a),
    )?;
    eq("slots kept until the replies", 2, p.req.outstanding())?;
    eq("calls abandoned", 2, p.req.counters().calls_abandoned)?;
    Ok((a, b))
}

/// The caller reuses the READ's pages at once: what it writes there.
#[inline(never)]
fn reuse_pages(pages: &mut Chain) -> Result<Vec<u8>, crate::Failure> {
    let mine = pattern(32 * 1024, 0x5a);
    pages.copyback(0, &mine).at("reuse the pages")?;
    Ok(mine)
}

/// Third step: the WRITE's late reply is dropped (counted), its slot and XID free again (a
/// new call with XID 10 gets its reply); returns the held READ.
#[inline(never)]
fn late_reply_dropped<F: Fixture>(
    p: &mut Pair<'_, F>,
    mut held: Vec<Incoming>,
) -> Result<Incoming, crate::Failure> {
    let (c10, c11) = match (held.pop(), held.pop()) {
        (Some(x), Some(y)) if x.xid == 10 => (x, y),
        (Some(x), Some(y)) => (y, x),
        _ => return Err(fail("held calls", "two", "fewer")),
    };
    let late = Kind::Small.reply(&p.l.pb, 10).at("late reply")?;
    drop(c10.call);
    p.resp
        .reply(&mut p.l.b, c10.ctx, late)
        .map_err(|e| fail("late reply", "sent", format!("{e:?}")))?;
    let mut idle = 0;
    while p.req.outstanding() > 1 {
        let mut progress = poll_silent(p, "the late reply")?;
        p.resp.poll(&mut p.l.b, &mut |_| progress = true);
        p.l.idle(&mut idle, progress, "the late reply arrives")?;
    }
    eq("lost after the late reply", false, p.req.is_lost())?;
    eq("late replies", 1, p.req.counters().late_replies)?;
    let (call, spec) = Kind::Small.call(&p.l.pa, 10).at("XID 10 again")?;
    let pb = p.l.pb.clone();
    let again = p.rpc(call, spec, &mut |c| {
        Kind::Small.reply(&pb, c.xid).at("reply")
    })?;
    bytes_eq(
        "XID 10 again",
        &Kind::Small.expected(10),
        &again.to_vec().at("bytes")?,
    )?;
    Ok(c11)
}

/// Last step: the server drops the READ `c11` (its reply would write through the revoked
/// handle); no handle of `dead` gives access and the reused `pages` keep `mine`; the
/// connection goes, the abandoned READ's slot with it, reported to nobody.
#[inline(never)]
fn read_dropped_and_handles_dead<F: Fixture>(
    p: &mut Pair<'_, F>,
    c11: Incoming,
    dead: &[Advertised],
    pages: &Chain,
    mine: &[u8],
) -> Outcome {
    drop(c11.call);
    p.resp
        .drop_call(&mut p.l.b, c11.ctx, &mut |_| {})
        .map_err(|e| fail("drop the READ", "Ok", format!("{e:?}")))?;
    eq("the READ's slot kept", 1, p.req.outstanding())?;
    p.check_clean("before the probes")?;
    probe_dead(p, dead)?;
    bytes_eq(
        "the reused pages after the probes",
        mine,
        &pages.to_vec().at("bytes")?,
    )?;
    p.l.qp(Side::B).disconnect();
    let mut idle = 0;
    while !p.req.is_lost() {
        let progress = poll_silent(p, "the loss")?;
        p.l.idle(&mut idle, progress, "the requester sees the loss")?;
    }
    eq("slots after the loss", 0, p.req.outstanding())
}

/// `close` with a WRITE and a READ pending: both fail with `Closed` (the READ's pages handed
/// back in its event), then `ConnectionLost`; no registration is left and later calls are
/// refused.
pub fn close_fails_every_pending_call_and_hands_the_pages_back<F: Fixture>(fx: &mut F) -> Outcome {
    let mut p = Pair::with(fx, TransportConfig::default())?;
    warm(&mut p)?;
    let (w, ws) = Kind::Write(20_000).call(&p.l.pa, 40).at("WRITE call")?;
    p.call(w, ws, "WRITE call")?;
    let (r, rs) = Kind::Read(16 * 1024).call(&p.l.pa, 41).at("READ call")?;
    p.call(r, rs, "READ call")?;
    let mut evs = Vec::new();
    p.req.close(&mut p.l.a, &mut |e| evs.push(e));
    // In XID order (duplicates kept): inserted into a map one by one, since a slice sort
    // keeps a scratch array of the elements on the stack (1.2 KiB here).
    let mut by_xid = alloc::collections::BTreeMap::new();
    by_xid.extend(
        evs.iter()
            .filter_map(|e| match e {
                RequesterEvent::Failed { xid, error, pages } => {
                    Some((*xid, *error, pages.as_ref().map(|c| c.len())))
                }
                _ => None,
            })
            .enumerate()
            .map(|(i, (xid, error, pages))| ((xid, i), (error, pages))),
    );
    let ends: Vec<(u32, CallError, Option<usize>)> = by_xid
        .into_iter()
        .map(|((xid, _), (error, pages))| (xid, error, pages))
        .collect();
    eq(
        "calls failed",
        &[
            (40, CallError::Closed, None),
            (41, CallError::Closed, Some(16 * 1024)),
        ][..],
        &ends[..],
    )?;
    eq(
        "the last event",
        true,
        matches!(evs.last(), Some(RequesterEvent::ConnectionLost)),
    )?;
    eq(
        "registrations after close",
        0,
        p.l.fx.live_registrations(&p.l.a),
    )?;
    let (c, s) = Kind::Small.call(&p.l.pa, 42).at("call after close")?;
    eq(
        "a call after close",
        Some(CallError::ConnectionLost),
        p.req.call(&mut p.l.a, c, s).err().map(|r| r.error),
    )?;
    drop(evs);
    p.finish()
}
