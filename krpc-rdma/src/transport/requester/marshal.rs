//! The call path (xprtrdma's marshal): a call refused at once or taken, its reply
//! provisioned (inline, write chunk, reply chunk), its header and inline part built straight
//! into the send buffer, its DDP regions registered as read chunks or the whole call sent
//! as a Long Call.

use super::{CallRejected, RegEntry, ReplySpec, Requester, SlotState};
use crate::provider::{Access, Provider, RegSegment, SendOp, SendWr};
use crate::transport::call_plan::{self, CallPlan};
use crate::transport::error::CallError;
use crate::transport::provisioning::{self, Provision};
use crate::transport::send_ctx::WrTag;
use crate::transport::xdr_reduce::{copy_inline, inline_len, reduce, ReducedItem};
use crate::wire::{HeaderEncoder, ReadSegment, Segment, WriteChunk};
use mbuf::{Chain, Mbuf};

impl Requester {
    /// Largest reply that arrives inline: the receive threshold minus the smallest header.
    fn max_inline_reply(&self) -> usize {
        provisioning::max_inline_reply(self.ep.thresholds().recv, self.ep.res().recv_buf_size)
    }

    /// Send an RPC call (first word: the XID). The reply, or a failure, is reported later by
    /// [`poll`](Self::poll). On error nothing was posted and everything is handed back.
    ///
    /// # Errors
    /// See [`CallRejected`] / [`CallError`].
    pub fn call<P: Provider>(
        &mut self,
        prov: &mut P,
        call: Chain,
        reply: ReplySpec,
    ) -> Result<(), CallRejected> {
        let Admitted {
            xid,
            need_recv,
            buf,
            idx,
        } = match self.admit(&call) {
            Ok(a) => a,
            Err(error) => return Err(CallRejected { error, call, reply }),
        };
        let ReplySpec { max_reply, ddp } = reply;
        if let Some(slot) = self.slots.get_mut(idx as usize) {
            debug_assert_eq!(slot.state, SlotState::Free);
            slot.xid = xid;
            slot.ddp = ddp;
        }
        let len = match self.marshal(prov, &call, max_reply, idx as usize, buf) {
            Ok(len) => len,
            Err(e) => return Err(self.undo(prov, idx, buf, e, call, max_reply)),
        };
        if need_recv {
            if let Some(rb) = self.recv_free.pop() {
                if let Err(e) = prov.post_recv(&[rb]) {
                    self.recv_free.push(rb);
                    return Err(self.undo(prov, idx, buf, e.into(), call, max_reply));
                }
                self.recv_posted += 1;
            }
        }
        let wr = SendWr {
            wr_id: WrTag::Send(buf).encode(),
            op: SendOp::Send {
                buf,
                len,
                invalidate: None,
            },
            signaled: true,
        };
        if let Err(e) = prov.post_send(&[wr]) {
            return Err(self.undo(prov, idx, buf, e.into(), call, max_reply));
        }
        self.credits.acquire();
        self.ep.counters_mut().messages_sent += 1;
        self.ep.counters_mut().inline_bytes_sent += u64::from(len);
        let inserted = self.xids.insert(xid, idx);
        debug_assert!(inserted, "XID checked free above");
        if let Some(slot) = self.slots.get_mut(idx as usize) {
            slot.call = Some(call);
            slot.state = SlotState::Waiting;
        }
        Ok(())
    }

    /// Whether a call may start now: refused at once (nothing taken) when the connection is
    /// lost, the chain has no XID, the XID is outstanding, no credit is left, or no slot,
    /// receive buffer or send buffer is free. Takes the send buffer and the slot.
    #[inline(always)] // one caller on the hot path: compiled into it as before the split
    fn admit(&mut self, call: &Chain) -> Result<Admitted, CallError> {
        if self.ep.is_lost() {
            return Err(CallError::ConnectionLost);
        }
        let Some(xid) = read_xid(call) else {
            return Err(CallError::BadCall);
        };
        if self.xids.get(xid).is_some() {
            return Err(CallError::DuplicateXid);
        }
        if !self.credits.can_send() {
            self.ep.counters_mut().credit_stalls += 1;
            return Err(CallError::NoCredit);
        }
        if self.free_slots.is_empty() {
            self.ep.counters_mut().resource_stalls += 1;
            return Err(CallError::WouldBlock);
        }
        let need_recv = self.recv_posted < self.recv_target() + 1;
        if need_recv && self.recv_free.is_empty() {
            self.ep.counters_mut().resource_stalls += 1;
            return Err(CallError::WouldBlock);
        }
        let Some(buf) = self.ep.send().get() else {
            self.ep.counters_mut().resource_stalls += 1;
            return Err(CallError::WouldBlock);
        };
        let Some(idx) = self.free_slots.pop() else {
            self.ep.send().complete(buf);
            self.ep.counters_mut().resource_stalls += 1;
            return Err(CallError::WouldBlock);
        };
        Ok(Admitted {
            xid,
            need_recv,
            buf,
            idx,
        })
    }

    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    fn undo<P: Provider>(
        &mut self,
        prov: &mut P,
        idx: u32,
        buf: u32,
        error: CallError,
        call: Chain,
        max_reply: usize,
    ) -> CallRejected {
        self.release_regs_from(prov, idx as usize, 0);
        self.ep.send().complete(buf);
        if matches!(error, CallError::WouldBlock) {
            self.ep.counters_mut().resource_stalls += 1;
        }
        let ddp = self.slots.get_mut(idx as usize).and_then(|slot| {
            let ddp = slot.ddp.take();
            slot.reset();
            ddp
        });
        self.free_slots.push(idx);
        CallRejected {
            error,
            call,
            reply: ReplySpec { max_reply, ddp },
        }
    }

    /// Release (revoking) the registrations of slot `idx` from index `keep` on: what a call
    /// that is not sent, or a chunk that is not used after all, registered.
    fn release_regs_from<P: Provider>(&mut self, prov: &mut P, idx: usize, keep: usize) {
        let Some(slot) = self.slots.get_mut(idx) else {
            debug_assert!(false, "registrations of a slot out of range");
            return;
        };
        while slot.regs.len() > keep {
            if let Some(r) = slot.regs.pop() {
                let _ = prov.release(r.id);
                self.ep.counters_mut().local_invalidations += 1;
            }
        }
    }

    /// Register the endpoint's fragment table for the peer, as few registrations as the fragments allow: a new
    /// registration starts wherever the fragments are not FRWR-contiguous (a fragment that does
    /// not start at offset 0 of its page, or follows one that does not end at its page's end),
    /// since one registration maps one gap-free iova range. Every registration is recorded in
    /// slot `idx` (so an error path releases it); each one's segments go to `sink`, in order.
    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    fn register<P: Provider>(
        &mut self,
        prov: &mut P,
        idx: usize,
        access: Access,
        mut sink: impl FnMut(&mut P, &[RegSegment]) -> Result<(), CallError>,
    ) -> Result<(), CallError> {
        let mut start = 0;
        while start < self.ep.frags().len() {
            let mut end = start + 1;
            while let (Some(prev), Some(next)) =
                (self.ep.frags().get(end - 1), self.ep.frags().get(end))
            {
                if !crate::provider::binding::runs::continues(prev, next) {
                    break;
                }
                end += 1;
            }
            let run = self.ep.frags().get(start..end).ok_or(CallError::TooLarge)?;
            let reg = prov.register(run, access)?;
            self.ep.counters_mut().registrations += 1;
            let first = reg.segments.first().map_or(0, |s| s.handle);
            let entry = RegEntry {
                id: reg.id,
                handle: first,
                single: reg.segments.len() == 1,
            };
            let Some(slot) = self.slots.get_mut(idx) else {
                let _ = prov.release(reg.id);
                return Err(CallError::Internal);
            };
            if slot.regs.push(entry).is_err() {
                let _ = prov.release(reg.id);
                self.ep.counters_mut().local_invalidations += 1;
                return Err(CallError::TooLarge);
            }
            sink(prov, &reg.segments)?;
            start = end;
        }
        Ok(())
    }

    /// Register the endpoint's fragment table for the peer to write (a write or reply chunk) and make `segs`
    /// the advertised segments.
    fn register_write_chunk<P: Provider>(
        &mut self,
        prov: &mut P,
        idx: usize,
        segs: &mut WriteChunk,
    ) -> Result<(), CallError> {
        segs.clear();
        self.register(prov, idx, Access::REMOTE_WRITE, |_, got| {
            for s in got {
                segs.push(seg_of(s)).map_err(|_| CallError::TooLarge)?;
            }
            Ok(())
        })
    }

    /// Reply provisioning, as Linux's rpcrdma_marshal_req: inline if the largest reply fits
    /// the inline receive; a write chunk for a DDP result when the rest of the reply fits
    /// inline; otherwise a reply chunk. The chunk's segments go to `segs`.
    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    fn provision<P: Provider>(
        &mut self,
        prov: &mut P,
        idx: usize,
        max_reply: usize,
        segs: &mut WriteChunk,
    ) -> Result<Provision, CallError> {
        let max_inline = self.max_inline_reply();
        let pages_len = self
            .slots
            .get(idx)
            .and_then(|s| s.ddp.as_ref())
            .map_or(0, |d| d.pages.len());
        match provisioning::provision(max_reply, pages_len, max_inline) {
            Provision::Inline => return Ok(Provision::Inline),
            Provision::WriteChunk => {
                let d = self.slots.get_mut(idx).and_then(|s| s.ddp.take());
                if let Some(d) = d {
                    let r = self.ep.fill_frags_merged(&d.pages, 0..pages_len);
                    if let Some(s) = self.slots.get_mut(idx) {
                        s.ddp = Some(d);
                    }
                    r?;
                }
                let regs_before = self.slots.get(idx).map_or(0, |s| s.regs.len());
                self.register_write_chunk(prov, idx, segs)?;
                if provisioning::write_chunk_fits(max_reply, pages_len, segs.len(), max_inline) {
                    if let Some(s) = self.slots.get_mut(idx) {
                        s.write_chunk = true;
                    }
                    self.ep.counters_mut().write_chunks += 1;
                    return Ok(Provision::WriteChunk);
                }
                // More segments than the inline reply has room to echo: a reply chunk.
                self.release_regs_from(prov, idx, regs_before);
            }
            Provision::ReplyChunk => {}
        }
        let max_reply = provisioning::reply_chunk(max_reply, self.ep.cfg().max_chunk_bytes)?;
        let slot = self.slots.get_mut(idx).ok_or(CallError::Internal)?;
        slot.reply_pages.clear();
        slot.reply_pages.append_pages(self.ep.pages(), max_reply)?;
        slot.reply_chunk = true;
        self.ep.fill_frags_merged(&slot.reply_pages, 0..max_reply)?;
        self.register_write_chunk(prov, idx, segs)?;
        self.ep.counters_mut().reply_chunks += 1;
        Ok(Provision::ReplyChunk)
    }

    /// Build the header and inline part of `call` in send buffer `buf`, straight into the
    /// buffer; register chunks. Returns the Send length.
    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    fn marshal<P: Provider>(
        &mut self,
        prov: &mut P,
        call: &Chain,
        max_reply: usize,
        idx: usize,
        buf: u32,
    ) -> Result<u32, CallError> {
        let xid = self.slots.get(idx).map_or(0, |s| s.xid);
        let credit = self.ep.cfg().max_requests;
        let mut segs = WriteChunk::new();
        let provisioned = self.provision(prov, idx, max_reply, &mut segs)?;
        let chunks = match provisioned {
            Provision::Inline => call_plan::Provisioned::default(),
            Provision::WriteChunk => call_plan::Provisioned {
                writes: Some(segs.len()),
                reply: None,
            },
            Provision::ReplyChunk => call_plan::Provisioned {
                writes: None,
                reply: Some(segs.len()),
            },
        };
        let hdr = CallHeader {
            xid,
            credit,
            buf,
            provisioned,
            chunks,
        };
        // Everything inline (small page data is copied into the send buffer), or else:
        if !call_plan::fits_inline(call.len(), chunks, self.ep.max_send()) {
            let items = reduce(call, true)?;
            // DDP regions as read chunks, the rest inline (if it then fits).
            if call_plan::too_large_for_inline(items.len()) == CallPlan::ReadChunks {
                if let Some(len) = self.marshal_read_chunks(prov, call, idx, &hdr, &items, &segs)? {
                    return Ok(len);
                }
            }
            // The whole call in a position-zero read chunk.
            return self.marshal_long_call(prov, call, idx, &hdr, &segs);
        }
        let sb = prov.send_buf(buf)?;
        let enc = HeaderEncoder::begin(sb, xid, credit, false).map_err(too_large)?;
        let h = finish_header(enc, sb, provisioned, &segs)?;
        let n = copy_inline(call, &[], sb.get_mut(h..).ok_or(CallError::TooLarge)?)?;
        u32::try_from(h + n).map_err(|_| CallError::TooLarge)
    }

    /// The DDP regions `items` as read chunks, the rest inline; `None` (nothing left
    /// registered) when the reduced call still does not fit inline. Each registration's
    /// segments are written straight into the Read list in the send buffer.
    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    fn marshal_read_chunks<P: Provider>(
        &mut self,
        prov: &mut P,
        call: &Chain,
        idx: usize,
        hdr: &CallHeader,
        items: &[ReducedItem],
        segs: &WriteChunk,
    ) -> Result<Option<u32>, CallError> {
        let buf = hdr.buf;
        let reduced = inline_len(call.len(), items);
        let mut enc = HeaderEncoder::begin(prov.send_buf(buf)?, hdr.xid, hdr.credit, false)
            .map_err(too_large)?;
        let mut ok = true;
        let regs_before = self.slots.get(idx).map_or(0, |s| s.regs.len());
        for item in items {
            self.ep.fill_frags_merged(call, item.data())?;
            let position = u32::try_from(item.offset).map_err(|_| CallError::TooLarge)?;
            self.register(prov, idx, Access::REMOTE_READ, |prov, got| {
                let sb = prov.send_buf(buf)?;
                for s in got {
                    let entry = ReadSegment {
                        position,
                        segment: seg_of(s),
                    };
                    if enc.read_segment(sb, &entry).is_err() {
                        ok = false;
                    }
                }
                Ok(())
            })?;
        }
        if ok
            && call_plan::read_chunks_fit(
                enc.read_entries(),
                reduced,
                hdr.chunks,
                self.ep.max_send(),
            )
        {
            self.ep.counters_mut().read_chunks += items.len() as u64;
            self.ep.counters_mut().rdma_read_bytes +=
                items.iter().map(|i| i.len as u64).sum::<u64>();
            let sb = prov.send_buf(buf)?;
            let h = finish_header(enc, sb, hdr.provisioned, segs)?;
            let n = copy_inline(call, items, sb.get_mut(h..).ok_or(CallError::TooLarge)?)?;
            return u32::try_from(h + n)
                .map(Some)
                .map_err(|_| CallError::TooLarge);
        }
        // Does not fit: undo the read registrations (the caller falls back to a Long Call).
        self.release_regs_from(prov, idx, regs_before);
        Ok(None)
    }

    /// A Long Call: the whole call in a position-zero read chunk, its non-page bytes pulled
    /// up into the slot's pages.
    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    fn marshal_long_call<P: Provider>(
        &mut self,
        prov: &mut P,
        call: &Chain,
        idx: usize,
        hdr: &CallHeader,
        segs: &WriteChunk,
    ) -> Result<u32, CallError> {
        let total = call.len();
        call_plan::long_call(total, self.ep.cfg().max_chunk_bytes)?;
        let slot = self.slots.get_mut(idx).ok_or(CallError::Internal)?;
        let got = self
            .ep
            .gather(call, core::iter::once(0..total), &mut slot.pullup)?;
        if got.pulled > 0 {
            self.ep.counters_mut().pullup_copies += 1;
            self.ep.counters_mut().pullup_bytes += got.pulled as u64;
        }
        let buf = hdr.buf;
        let mut enc = HeaderEncoder::begin(prov.send_buf(buf)?, hdr.xid, hdr.credit, true)
            .map_err(too_large)?;
        self.register(prov, idx, Access::REMOTE_READ, |prov, got| {
            let sb = prov.send_buf(buf)?;
            for s in got {
                let entry = ReadSegment {
                    position: 0,
                    segment: seg_of(s),
                };
                enc.read_segment(sb, &entry).map_err(too_large)?;
            }
            Ok(())
        })?;
        self.ep.counters_mut().long_calls += 1;
        self.ep.counters_mut().read_chunks += 1;
        self.ep.counters_mut().rdma_read_bytes += total as u64;
        let sb = prov.send_buf(buf)?;
        let len = finish_header(enc, sb, hdr.provisioned, segs)?;
        u32::try_from(len).map_err(|_| CallError::TooLarge)
    }
}

/// A call [`admit`](Requester::admit)ted: its XID, whether a Receive must be posted for
/// it, its send buffer and its slot.
struct Admitted {
    xid: u32,
    need_recv: bool,
    buf: u32,
    idx: u32,
}

/// What every header of one call carries, while the call is marshalled.
#[derive(Debug, Clone, Copy)]
struct CallHeader {
    xid: u32,
    credit: u32,
    /// The send buffer the header is encoded in.
    buf: u32,
    provisioned: Provision,
    /// Segments of the provisioned write chunk / reply chunk (for the header's length).
    chunks: call_plan::Provisioned,
}

/// The XID, the call's first word (from the first mbuf when it holds it).
fn read_xid(call: &Chain) -> Option<u32> {
    let first = call
        .first()
        .and_then(Mbuf::data)
        .and_then(|d| d.get(..4))
        .and_then(|w| <[u8; 4]>::try_from(w).ok());
    if let Some(w) = first {
        return Some(u32::from_be_bytes(w));
    }
    let mut w = [0u8; 4];
    call.copydata(0, &mut w).ok()?;
    Some(u32::from_be_bytes(w))
}

fn too_large(_: crate::wire::EncodeError) -> CallError {
    CallError::TooLarge
}

/// Close the call header: the provisioned chunk (Write list or Reply chunk) after whatever
/// Read list entries were written. Returns the header length.
fn finish_header(
    mut enc: HeaderEncoder,
    sb: &mut [u8],
    provisioned: Provision,
    segs: &WriteChunk,
) -> Result<usize, CallError> {
    let chunk = segs.iter().copied();
    match provisioned {
        Provision::Inline => enc.finish(sb, None::<core::iter::Empty<Segment>>),
        Provision::WriteChunk => {
            enc.write_chunk(sb, chunk).map_err(too_large)?;
            enc.finish(sb, None::<core::iter::Empty<Segment>>)
        }
        Provision::ReplyChunk => enc.finish(sb, Some(chunk)),
    }
    .map_err(too_large)
}

fn seg_of(s: &RegSegment) -> Segment {
    Segment {
        handle: s.handle,
        length: s.length,
        offset: s.offset,
    }
}
