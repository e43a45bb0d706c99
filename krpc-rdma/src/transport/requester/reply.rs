//! The reply path (xprtrdma's reply handler): a Receive matched to its call by XID, checked
//! against what was provisioned, its DDP data placed, every registration invalidated, and
//! the outcome handed up.

use super::{Requester, RequesterEvent, Slot, SlotState};
use crate::provider::{Provider, SendOp, SendWr};
use crate::transport::counters::Counters;
use crate::transport::endpoint::Endpoint;
use crate::transport::error::CallError;
use crate::transport::send_ctx::WrTag;
use crate::transport::xdr_reduce::xdr_pad;
use crate::wire::{DecodeError, ErrorCode, Header, Proc};
use mbuf::{Chain, Mbuf};

impl Requester {
    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    pub(super) fn on_recv<P: Provider>(
        &mut self,
        prov: &mut P,
        buf: u32,
        len: u32,
        invalidated: Option<u32>,
        events: &mut impl FnMut(RequesterEvent),
    ) {
        let Ok(data) = prov.recv_buf(buf) else {
            self.ep.counters_mut().bad_messages += 1;
            return;
        };
        let Some(data) = data.get(..len as usize) else {
            self.ep.counters_mut().bad_messages += 1;
            return;
        };
        self.ep.counters_mut().inline_bytes_received += u64::from(len);
        let hdr = match Header::new_checked(data) {
            Ok(h) => h,
            Err(e) => return self.on_malformed(prov, &e, invalidated, events),
        };
        if self.reverse_enabled()
            && crate::transport::reverse::classify(&hdr)
                == crate::transport::reverse::Direction::ReverseCall
        {
            let taken = self.take_reverse_call(&hdr);
            return self.on_reverse_call(prov, taken, events);
        }
        let xid = hdr.xid();
        let Some(idx) = self.pending(xid) else {
            self.ep.counters_mut().bad_messages += 1;
            return;
        };
        self.credits.update_grant(hdr.credit());
        self.credits.release();
        let Some(slot) = self.slots.get_mut(idx) else {
            // The XID table only holds slot indices: cannot happen.
            debug_assert!(false, "reply for a slot out of range");
            return;
        };
        if slot.state == SlotState::Abandoned {
            self.end_abandoned(prov, idx);
            return;
        }
        let outcome = reply_outcome(slot, &hdr, &mut self.ep);
        if outcome.is_ok() {
            self.ep.counters_mut().messages_received += 1;
        } else if matches!(outcome, Err(CallError::BadReply)) {
            self.ep.counters_mut().bad_messages += 1;
            self.ep.counters_mut().bad_replies += 1;
        }
        slot.outcome = Some(outcome);
        self.end_call(prov, idx, invalidated, events);
    }

    /// The slot of the call `xid` that is owed a reply (waiting, or abandoned: a zombie).
    fn pending(&self, xid: u32) -> Option<usize> {
        self.xids.get(xid).map(|i| i as usize).filter(|&i| {
            self.slots
                .get(i)
                .is_some_and(|s| matches!(s.state, SlotState::Waiting | SlotState::Abandoned))
        })
    }

    /// A reply whose transport header the codec rejects. Too short to name an XID, or
    /// naming no call owed a reply: counted and dropped (nothing can be told). Naming a call
    /// owed a reply: that call fails with [`CallError::MalformedReply`] — it would otherwise
    /// wait, its credit and registrations held, for a reply the responder believes it sent
    /// (Linux xprtrdma fails it with `-EIO`) — and an abandoned call's zombie slot ends as
    /// with a late reply. The credit comes back; the grant stays what the last valid reply
    /// said (the header carrying this one is not trusted). The registrations are
    /// invalidated before the failure is reported, as for any other reply.
    #[cold]
    #[inline(never)]
    fn on_malformed<P: Provider>(
        &mut self,
        prov: &mut P,
        e: &DecodeError,
        invalidated: Option<u32>,
        events: &mut impl FnMut(RequesterEvent),
    ) {
        self.ep.counters_mut().bad_messages += 1;
        let Some(idx) = e.xid().and_then(|xid| self.pending(xid)) else {
            return;
        };
        self.credits.release();
        let Some(slot) = self.slots.get_mut(idx) else {
            debug_assert!(false, "reply for a slot out of range");
            return;
        };
        if slot.state == SlotState::Abandoned {
            self.end_abandoned(prov, idx);
            return;
        }
        self.ep.counters_mut().bad_replies += 1;
        slot.outcome = Some(Err(CallError::MalformedReply(e.kind())));
        self.end_call(prov, idx, invalidated, events);
    }

    /// The reply of an abandoned call: its caller is gone and its registrations were revoked
    /// at abandon time (their handles held back until now: the reply may have invalidated one
    /// of them); the reply gives the handles, the slot and the credit back.
    fn end_abandoned<P: Provider>(&mut self, prov: &mut P, idx: usize) {
        let Some(slot) = self.slots.get_mut(idx) else {
            return;
        };
        for r in &slot.regs {
            let _ = prov.release(r.id);
        }
        let xid = slot.xid;
        slot.reset();
        self.xids.remove(xid);
        self.free_slots.push(idx as u32);
        self.ep.counters_mut().late_replies += 1;
    }

    /// The reply of the call in slot `idx` arrived (its outcome stored): invalidate every
    /// registration before reporting it (RFC 8166 §3.4.3), unless the Send With Invalidate
    /// that carried the reply already revoked a single-segment registration.
    fn end_call<P: Provider>(
        &mut self,
        prov: &mut P,
        idx: usize,
        invalidated: Option<u32>,
        events: &mut impl FnMut(RequesterEvent),
    ) {
        let Some(slot) = self.slots.get_mut(idx) else {
            return;
        };
        let mut pending = 0u32;
        for r in &slot.regs {
            if r.single && invalidated == Some(r.handle) {
                self.ep.counters_mut().remote_invalidations += 1;
                continue;
            }
            let wr = SendWr {
                wr_id: WrTag::LocalInv(idx as u32).encode(),
                op: SendOp::LocalInv { reg: r.id },
                signaled: true,
            };
            if prov.post_send(&[wr]).is_ok() {
                pending += 1;
            }
            self.ep.counters_mut().local_invalidations += 1;
        }
        if pending == 0 {
            self.finish(prov, idx, events);
        } else {
            slot.state = SlotState::Invalidating(pending);
        }
    }

    /// Release the slot's registrations and resources; report its outcome.
    pub(super) fn finish<P: Provider>(
        &mut self,
        prov: &mut P,
        idx: usize,
        events: &mut impl FnMut(RequesterEvent),
    ) {
        let Some(slot) = self.slots.get_mut(idx) else {
            debug_assert!(false, "finish of a slot out of range");
            return;
        };
        for r in &slot.regs {
            let _ = prov.release(r.id);
        }
        let xid = slot.xid;
        let pages = slot.ddp.take().map(|d| d.pages);
        let outcome = slot.outcome.take();
        slot.reset();
        self.xids.remove(xid);
        self.free_slots.push(idx as u32);
        match outcome {
            Some(Ok(reply)) => events(RequesterEvent::Reply { xid, reply }),
            Some(Err(error)) => events(RequesterEvent::Failed { xid, error, pages }),
            None => events(RequesterEvent::Failed {
                xid,
                error: CallError::BadReply,
                pages,
            }),
        }
    }
}

/// What the reply `hdr` of the call in `slot` gives its caller: checked against what was
/// provisioned (no Read list, no more write chunks than offered, RFC 8166 §4.3), then
/// `RDMA_ERROR`, an inline reply ([`inline_reply`]) or a Long Reply ([`long_reply`]).
#[inline(always)] // one caller on the hot path: compiled into it as before the split
fn reply_outcome(
    slot: &mut Slot,
    hdr: &Header<&[u8]>,
    ep: &mut Endpoint,
) -> Result<Chain, CallError> {
    // Write chunks the reply reports against those offered (none, or one for a DDP
    // result): a responder echoes what it was given (RFC 8166 §4.3.2), no more.
    let offered = usize::from(slot.write_chunk);
    let extra_writes = hdr.write_list().nth(offered).is_some();
    match hdr.proc_() {
        // A responder leaves the Read list of a reply empty (RFC 8166 §4.3.1); Linux's
        // client fails such a reply with -EIO.
        Proc::Msg | Proc::NoMsg if hdr.read_list().next().is_some() => Err(CallError::BadReply),
        Proc::Msg | Proc::NoMsg if extra_writes => Err(CallError::BadReply),
        Proc::Error => {
            let code = hdr.error_body().map_or(ErrorCode::Chunk, |b| b.code());
            match code {
                ErrorCode::Vers => ep.counters_mut().err_vers_received += 1,
                ErrorCode::Chunk => ep.counters_mut().err_chunk_received += 1,
            }
            Err(CallError::Rdma(code))
        }
        // A Long Reply is RDMA_NOMSG (§3.5.4): RDMA_MSG saying bytes went into the Reply
        // chunk contradicts itself (Linux's rpcrdma_decode_msg: -EIO).
        Proc::Msg if hdr.reply_chunk().is_some_and(|c| c.total_length() > 0) => {
            Err(CallError::BadReply)
        }
        Proc::Msg => inline_reply(slot, hdr, ep),
        Proc::NoMsg => long_reply(slot, hdr, ep),
        _ => Err(CallError::BadReply),
    }
}

/// `RDMA_MSG`: the inline reply goes into the call chain's storage when it fits (the call
/// is done with), else into a chain of the pool; the write chunk's data is placed in it.
#[inline(always)] // one caller on the hot path: compiled into it as before the split
fn inline_reply(
    slot: &mut Slot,
    hdr: &Header<&[u8]>,
    ep: &mut Endpoint,
) -> Result<Chain, CallError> {
    let need = hdr.payload().len().div_ceil(mbuf::MCLBYTES).max(1);
    let mut inline = match slot.call.take() {
        // Refilled below (`set_bytes`: its first mbuf in place when it can be).
        Some(c) if !slot.write_chunk && c.mbuf_capacity() >= need => c,
        other => {
            slot.call = other;
            // Room for the caller's page mbufs, a marker, a pad and the split.
            let pages = slot.ddp.as_ref().map_or(0, |d| d.pages.mbuf_count());
            ep.chains().chain_with(need + pages + 4)
        }
    };
    inline
        .set_bytes(hdr.payload())
        .map_err(CallError::from)
        .and_then(|()| place_ddp(slot, hdr, inline, ep.counters_mut()))
}

/// `RDMA_NOMSG` from a responder means "the reply is in the reply chunk": its pages, trimmed
/// to the bytes written, become the reply. Without a reply chunk, or with more bytes than
/// it has, there is no reply (never an empty success).
#[inline(always)] // one caller on the hot path: compiled into it as before the split
fn long_reply(slot: &mut Slot, hdr: &Header<&[u8]>, ep: &mut Endpoint) -> Result<Chain, CallError> {
    let written = hdr.reply_chunk().map(|c| c.total_length());
    let have = slot.reply_pages.len() as u64;
    match written {
        Some(written) if slot.reply_chunk && written <= have => {
            // The pages move into a chain of the pool; the slot keeps its storage.
            let mut pages = ep.chains().chain();
            let cut = have - written;
            slot.reply_chunk = false;
            let trimmed = pages
                .cat_from(&mut slot.reply_pages)
                .map_err(CallError::from)
                .and_then(|()| i64::try_from(cut).map_err(|_| CallError::BadReply))
                .and_then(|c| pages.adj(-c).map_err(CallError::from));
            let counters = ep.counters_mut();
            counters.long_replies += 1;
            counters.rdma_write_bytes += written;
            trimmed.and_then(|()| place_ddp(slot, hdr, pages, counters))
        }
        _ => Err(CallError::BadReply),
    }
}

/// Splice the write-chunk data into the inline reply at the located offset:
/// `[inline before][marker][caller's pages trimmed to the length written][pad][inline after]`.
fn place_ddp<T: AsRef<[u8]>>(
    slot: &mut Slot,
    hdr: &Header<T>,
    mut inline: Chain,
    counters: &mut Counters,
) -> Result<Chain, CallError> {
    if !slot.write_chunk {
        return Ok(inline);
    }
    let written = hdr.write_list().next().map_or(0, |c| c.total_length());
    let Some(ddp) = slot.ddp.as_mut() else {
        return Ok(inline);
    };
    if written > ddp.pages.len() as u64 {
        return Err(CallError::BadReply);
    }
    let Some(at) = (ddp.locate)(&inline).filter(|a| *a <= inline.len()) else {
        if written == 0 {
            return Ok(inline);
        }
        return Err(CallError::BadReply);
    };
    let written = written as usize;
    let cut = ddp.pages.len() - written;
    ddp.pages
        .adj(-(i64::try_from(cut).map_err(|_| CallError::BadReply)?))
        .map_err(CallError::from)?;
    let Some(mut ddp) = slot.ddp.take() else {
        return Err(CallError::BadReply);
    };
    counters.rdma_write_bytes += written as u64;
    // The tail comes from the same pool as `inline` (a split of a pooled chain).
    let tail = inline.split(at)?;
    inline.append_mbuf(Mbuf::ddp_marker())?;
    inline.cat_from(&mut ddp.pages)?;
    let pad = xdr_pad(written);
    if pad > 0 {
        inline.append_mbuf(Mbuf::internal([0u8; 3].get(..pad).unwrap_or_default())?)?;
    }
    inline.cat(tail)?;
    Ok(inline)
}
