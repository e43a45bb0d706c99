//! The read jobs (svcrdma's rw): a call with read chunks waits in `read_queue` for the
//! DDP budgets, gets its pages ([`Responder::build_call`]), its RDMA Reads planned and
//! posted under `max_rd_atomic`, and is handed up once they are all done.

use super::{CallCtx, CtxState, Incoming, ReadJob, Refusal, ReplyCtx, Responder, ResponderEvent};
use crate::provider::{Provider, ProviderError, SendOp, SendWr};
use crate::transport::error::{CallError, Error};
use crate::transport::rdma_plan::plan;
use crate::transport::send_ctx::WrTag;
use crate::transport::shared_pages::Admission;
use crate::transport::xdr_reduce::xdr_pad;
use alloc::sync::Arc;
use mbuf::{Chain, Mbuf};

impl Responder {
    /// Put a waiting call's pages in: inline pieces, a DDP marker and fresh pages for each
    /// read chunk, XDR pads, the rest of the inline XDR; for a Long Call, fresh pages for its
    /// chunks back to back. Charges the pages to the budget. Any error closes the
    /// connection (`start_job`): out of pages, or [`Error::Bug`].
    fn build_call(&mut self, idx: u32) -> Result<(), Error> {
        let ctx = self.ctxs.get_mut(idx as usize).ok_or(Error::Bug)?;
        let pages = self.ep.pages();
        let chunks = &ctx.chunks;
        let charged = ctx.read_bytes();
        // Mbufs the call will have: the inline ones (one more where a chunk splits one), and
        // per chunk a marker, its page mbufs and a pad.
        let per_mbuf = mbuf::MAX_PGS_PER_MBUF * mbuf::PAGE_SIZE;
        let need = ctx.inline.as_ref().map_or(0, Chain::mbuf_count)
            + chunks
                .iter()
                .map(|&(_, t)| 3 + (t as usize).div_ceil(per_mbuf))
                .sum::<usize>();
        let mut call = self.ep.chains().chain_with(need);
        if ctx.nomsg {
            for &(_, total) in chunks {
                call.append_pages(pages, total as usize)?;
            }
        } else {
            let inline = ctx.inline.take().unwrap_or_default();
            splice(&mut call, inline, chunks, |i, call| {
                let total = chunks.get(i).map_or(0, |c| c.1 as usize);
                Ok(call.append_pages(pages, total)?)
            })?;
        }
        ctx.call = Some(call);
        ctx.ddp_bytes = charged;
        self.ddp_in_use += charged;
        Ok(())
    }

    /// A Long Call with further read chunks, all read: the position-zero chunk's bytes are
    /// the XDR stream, the other chunks' pages go in at their positions (RFC 8166 §3.5.3).
    /// Any error closes the connection (`pump_reads`): out of memory, or [`Error::Bug`].
    fn assemble_long_call(&mut self, idx: u32) -> Result<(), Error> {
        let ctx = self.ctxs.get_mut(idx as usize).ok_or(Error::Bug)?;
        if !ctx.nomsg || ctx.chunks.len() < 2 {
            return Ok(());
        }
        let mut stream = ctx.call.take().ok_or(Error::Bug)?;
        let total0 = ctx.chunks.first().map_or(0, |c| c.1 as usize);
        let mut data = stream.split(total0)?;
        let others = ctx.chunks.get(1..).unwrap_or_default();
        let need = stream.mbuf_count() + data.mbuf_count() + 3 * others.len();
        let mut call = self.ep.chains().chain_with(need);
        splice(&mut call, stream, others, |i, call| {
            let len = others.get(i).map_or(0, |c| c.1 as usize);
            let tail = data.split(len)?;
            Ok(call.cat(core::mem::replace(&mut data, tail))?)
        })?;
        ctx.call = Some(call);
        Ok(())
    }

    pub(super) fn hand_up(&mut self, idx: u32, events: &mut impl FnMut(ResponderEvent)) {
        let Some(ctx) = self.ctxs.get_mut(idx as usize) else {
            debug_assert!(false, "hand-up of a context out of range");
            return;
        };
        ctx.state = CtxState::Handed;
        let Some(call) = ctx.call.take() else {
            // Every path here built the call first. Were it missing, nobody would ever answer
            // the context: give it (and its credit and pages charge) back instead of leaking.
            debug_assert!(false, "hand-up of a context without its call");
            self.release_ctx(idx);
            return;
        };
        self.ep.counters_mut().messages_received += 1;
        events(ResponderEvent::Call(Incoming {
            xid: ctx.xid,
            call,
            ctx: ReplyCtx {
                idx,
                generation: ctx.generation,
                returns: Some(Arc::clone(&self.returns)),
            },
        }));
    }

    /// Plan and post RDMA Reads for the context at the head of the read queue, respecting
    /// `max_rd_atomic`; hand up calls whose reads are all done.
    pub(super) fn pump_reads<P: Provider>(
        &mut self,
        prov: &mut P,
        events: &mut impl FnMut(ResponderEvent),
    ) {
        loop {
            if self.ep.is_lost() || self.closing {
                return;
            }
            let Some(idx) = self.job.ctx.or_else(|| self.start_job(prov)) else {
                return;
            };
            let max = self.ep.res().max_rd_atomic.max(1);
            while self.job.in_flight < max {
                let Some(d) = self.read_wrs.get(self.job.next_wr) else {
                    break;
                };
                let Some(local) = self.read_pieces.get(d.pieces.clone()) else {
                    break;
                };
                let wr = SendWr {
                    wr_id: WrTag::Read(idx).encode(),
                    op: SendOp::RdmaRead {
                        local,
                        handle: d.handle,
                        offset: d.offset,
                    },
                    signaled: true,
                };
                match prov.post_send(&[wr]) {
                    Ok(()) => {
                        self.ep.counters_mut().rdma_read_bytes += u64::from(d.len);
                        self.job.next_wr += 1;
                        self.job.in_flight += 1;
                    }
                    // Room comes back with the next Read or Send completion.
                    Err(ProviderError::Busy) => return,
                    // Anything else will not get better: the call could wait forever.
                    Err(_) => return self.close(prov),
                }
            }
            if self.job.next_wr < self.read_wrs.len() || self.job.in_flight > 0 {
                return;
            }
            self.job = ReadJob::default();
            if self.assemble_long_call(idx).is_err() {
                // Out of memory splitting a few mbufs: neither answerable nor refusable.
                self.release_ctx(idx);
                self.close(prov);
                return;
            }
            self.hand_up(idx, events);
        }
    }

    /// Take the next context needing reads, put its pages in and plan its work requests.
    /// The head of the queue waits while its pages would take the connection over
    /// `max_ddp_bytes` (unless nothing else holds pages: one call within `max_call_ddp_bytes`
    /// always proceeds), or while the server-wide [`PageShare`] does not admit its pages; it
    /// is retried at every poll, when a context ends or a Send completes.
    fn start_job<P: Provider>(&mut self, prov: &mut P) -> Option<u32> {
        while let Some(&idx) = self.read_queue.front() {
            let need = self.ctxs.get(idx as usize).map_or(0, CallCtx::read_bytes);
            if self.ddp_in_use > 0
                && self.ddp_in_use.saturating_add(need) > self.ep.cfg().max_ddp_bytes as usize
            {
                self.ep.counters_mut().ddp_budget_waits += 1;
                return None;
            }
            if let Some(share) = self.share.as_mut() {
                let pages = self
                    .ctxs
                    .get(idx as usize)
                    .map_or(0, CallCtx::read_page_bytes);
                if share.try_take(pages) != Admission::Take {
                    self.ep.counters_mut().shared_budget_waits += 1;
                    return None;
                }
                // Given back by `release_ctx`, whatever happens to the call from here.
                if let Some(ctx) = self.ctxs.get_mut(idx as usize) {
                    ctx.shared_bytes = pages;
                }
            }
            self.read_queue.pop_front();
            match self.build_call(idx) {
                Ok(()) => {}
                Err(_) => {
                    // No pages: we can neither take the call nor say its chunks were wrong.
                    // Close (RFC 8166 §4.5.4); the requester retransmits after reconnecting.
                    self.release_ctx(idx);
                    self.close(prov);
                    return None;
                }
            }
            if let Err(e) = self.plan_reads(idx) {
                if e == Error::Bug {
                    // Our own invariant broke (see `Error`): not refused on the wire — an
                    // ERR_CHUNK would blame the requester's chunks —, the connection is
                    // closed (RFC 8166 §4.5.4), counted in `closes`.
                    self.release_ctx(idx);
                    self.close(prov);
                    return None;
                }
                // More pieces or work requests than our limits: refuse it (RFC 8166 §8.1.4).
                let xid = self.ctxs.get(idx as usize).map_or(0, |c| c.xid);
                self.release_ctx(idx);
                self.ep.counters_mut().bad_messages += 1;
                self.send_error(prov, Refusal::chunk(xid));
                continue;
            }
            self.job = ReadJob {
                ctx: Some(idx),
                next_wr: 0,
                in_flight: 0,
            };
            return Some(idx);
        }
        None
    }

    /// Plan the RDMA Reads of a built call into `read_pieces` / `read_wrs`: a
    /// [`CallError`] if they do not fit our limits, [`Error::Bug`] without the call.
    fn plan_reads(&mut self, idx: u32) -> Result<(), Error> {
        // The caller built the call in this context just before: both always hold.
        let Some(ctx) = self.ctxs.get(idx as usize) else {
            debug_assert!(false, "read plan of a context out of range");
            return Err(Error::Bug);
        };
        let Some(call) = ctx.call.as_ref() else {
            debug_assert!(false, "read plan of a context without its call");
            return Err(Error::Bug);
        };
        self.read_pieces.clear();
        self.read_wrs.clear();
        let max_sge = self.ep.res().max_sge as usize;
        for (seg, off) in ctx.reads.iter() {
            let frags = self.ep.fill_frags(call, *off..*off + seg.length as usize)?;
            plan(
                frags,
                core::iter::once(*seg),
                max_sge,
                &mut self.read_pieces,
                &mut self.read_wrs,
            )?;
        }
        Ok(())
    }
}

/// Splice read chunks' data into the XDR stream `rest` at their positions (RFC 8166 §3.4.5):
/// `[XDR before][marker][data i][pad][XDR …]` for each chunk `(position, length)`, in order;
/// `data(i)` gives chunk `i`'s page mbufs. The pad is its own mbuf, so the DDP region is the
/// data alone. Positions were validated against the stream when the call was received;
/// checked again here, so no peer number can underflow or overrun.
fn splice(
    call: &mut Chain,
    mut rest: Chain,
    chunks: &[(u32, u32)],
    mut data: impl FnMut(usize, &mut Chain) -> Result<(), CallError>,
) -> Result<(), CallError> {
    let (mut inline_at, mut removed) = (0usize, 0usize);
    for (i, &(pos, total)) in chunks.iter().enumerate() {
        let total = total as usize;
        let at = (pos as usize)
            .checked_sub(removed)
            .ok_or(CallError::BadCall)?;
        let n = at.checked_sub(inline_at).ok_or(CallError::BadCall)?;
        // `rest` and its pieces come from the pool: no allocation in steady state.
        let tail = rest.split(n)?;
        call.cat(core::mem::replace(&mut rest, tail))?;
        inline_at = at;
        call.append_mbuf(Mbuf::ddp_marker())?;
        data(i, call)?;
        let pad = xdr_pad(total);
        if pad > 0 {
            call.append_mbuf(Mbuf::internal([0u8; 3].get(..pad).unwrap_or_default())?)?;
        }
        removed += total + pad;
    }
    if !rest.is_empty() {
        // Separate mbufs, so the pad stays its own mbuf.
        call.cat(rest)?;
    }
    Ok(())
}
