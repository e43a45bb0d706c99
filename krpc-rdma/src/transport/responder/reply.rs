//! The reply path (svcrdma's sendto): the reply's DDP items written into the write
//! chunks, a Long Reply through the reply chunk, the header encoded into the send buffer,
//! the RDMA Writes and the Send posted as one chain; the reply data's page-budget charge.

use super::{CallCtx, Refusal, ReplyCtx, ReplyError, Responder};
use crate::provider::{Provider, ProviderError, SendOp, SendWr};
use crate::transport::endpoint::Endpoint;
use crate::transport::error::{CallError, Error};
use crate::transport::rdma_plan::plan;
use crate::transport::rdma_plan::WrDesc;
use crate::transport::reply_plan::{self, write_chunk_use, written_segments, WriteChunkUse};
use crate::transport::send_ctx::WrTag;
use crate::transport::shared_pages::Admission;
use crate::transport::xdr_reduce::{copy_inline, inline_len, kept_ranges, reduce, ReducedItem};
use crate::wire::{header_len, HeaderEncoder, Segment, MAX_WRITE_CHUNKS};
use alloc::vec::Vec;
use mbuf::{Chain, PageFragment};

impl Responder {
    /// Take `bytes` (rounded up to whole pages) of the server-wide page budget for the data
    /// of the reply to the call of `ctx`, before the upper layer takes those pages from the
    /// shared pool (an NFS READ's data). [`Admission::Take`]: the pages are this connection's
    /// until the reply's Send completes (or the call is dropped, or the connection lost); a
    /// wait ([`Admission::OverShare`] / [`Admission::NoRoom`]): keep the call and ask again
    /// after the next [`poll`](Self::poll), as the read jobs' calls wait — a connection over
    /// its fair share waits, another's ordinary call does not. Without a page share, or for
    /// 0 bytes, always `Take`. The caller bounds `bytes` (by its largest reply data, which
    /// must be within the budget); a stale `ctx` is admitted and charges nothing.
    pub fn take_reply_pages(&mut self, ctx: &ReplyCtx, bytes: usize) -> Admission {
        let pages = bytes
            .div_ceil(mbuf::PAGE_SIZE)
            .saturating_mul(mbuf::PAGE_SIZE);
        if pages == 0 || !self.is_handed(ctx) {
            return Admission::Take;
        }
        let Some(share) = self.share.as_mut() else {
            return Admission::Take;
        };
        let admission = share.try_take(pages);
        if admission == Admission::Take {
            if let Some(c) = self.ctxs.get_mut(ctx.idx as usize) {
                c.reply_bytes = c.reply_bytes.saturating_add(pages);
            }
        } else {
            self.ep.counters_mut().shared_budget_waits += 1;
        }
        admission
    }

    /// Send the reply to a call. A DDP region of `reply` goes by RDMA Write into the
    /// requester's write chunk (no pad written, segment lengths set to the bytes written,
    /// region and pad removed from the inline reply); a reply too large for inline goes into
    /// the reply chunk (Long Reply, `RDMA_NOMSG`); then the header is sent, with Send With
    /// Invalidate of the requester's first chunk handle when the peer accepts it (RFC 8797).
    ///
    /// # Errors
    /// See [`ReplyError`].
    pub fn reply<P: Provider>(
        &mut self,
        prov: &mut P,
        ctx: ReplyCtx,
        reply: Chain,
    ) -> Result<(), ReplyError> {
        let valid = self.is_handed(&ctx);
        if self.ep.is_lost() || self.closing {
            ctx.consume();
            return Err(ReplyError::ConnectionLost);
        }
        if !valid {
            ctx.consume();
            return Err(ReplyError::StaleContext);
        }
        let Some(buf) = self.ep.send().get() else {
            self.ep.counters_mut().resource_stalls += 1;
            return Err(ReplyError::WouldBlock { ctx, reply });
        };
        let idx = ctx.idx;
        let result = match self.build_reply(prov, idx, buf, reply) {
            Err((_, Some(reply))) => {
                self.ep.send().complete(buf);
                self.ep.counters_mut().resource_stalls += 1;
                return Err(ReplyError::WouldBlock { ctx, reply });
            }
            Ok(()) => Ok(()),
            Err((e, None)) => Err(e),
        };
        // Every other outcome consumes the context.
        ctx.consume();
        match result {
            Ok(()) => {
                // The reply's pages (READ data taken with `take_reply_pages`) live until its
                // Send completes: their part of the page budget goes with the Send.
                if let Some(c) = self.ctxs.get_mut(idx as usize) {
                    let charged = core::mem::take(&mut c.reply_bytes);
                    self.ep.send().charge(buf, charged);
                }
                self.release_ctx(idx);
                Ok(())
            }
            Err(Error::Call(CallError::TooLarge)) => {
                self.ep.send().complete(buf);
                let xid = self.ctxs.get(idx as usize).map_or(0, |c| c.xid);
                self.send_error(prov, Refusal::chunk(xid));
                self.release_ctx(idx);
                Err(ReplyError::ChunkError)
            }
            Err(Error::Bug) => {
                // Our own invariant broke (see `Error`): never answered on the wire — an
                // ERR_CHUNK would blame the requester's chunks —, the connection is closed
                // instead (RFC 8166 §4.5.4), counted in `closes`.
                self.ep.send().complete(buf);
                self.release_ctx(idx);
                self.close(prov);
                Err(ReplyError::Internal)
            }
            Err(Error::Call(e)) => {
                // The reply cannot be built (memory, an unaligned DDP region): the requester
                // gets ERR_CHUNK rather than silence. A provider failure means the queue pair
                // is unusable: close (RFC 8166 §4.5.4).
                self.ep.send().complete(buf);
                let xid = self.ctxs.get(idx as usize).map_or(0, |c| c.xid);
                self.release_ctx(idx);
                match e {
                    CallError::ConnectionLost | CallError::Provider(_) => self.close(prov),
                    _ => self.send_error(prov, Refusal::chunk(xid)),
                }
                Err(ReplyError::Failed(e))
            }
        }
    }

    /// Build and post the reply. On a retryable failure the chain comes back.
    ///
    /// The stages: the reply's DDP items planned into the write chunks
    /// ([`plan_write_chunks`]), a Long Reply's inline part into the reply chunk
    /// ([`plan_long_reply`](Self::plan_long_reply)), the header and inline part encoded
    /// into the send buffer ([`encode_reply`]), the RDMA Writes and the Send posted
    /// ([`post_reply`](Self::post_reply)).
    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    fn build_reply<P: Provider>(
        &mut self,
        prov: &mut P,
        idx: u32,
        buf: u32,
        reply: Chain,
    ) -> Result<(), (Error, Option<Chain>)> {
        let Some(ctx) = self.ctxs.get(idx as usize) else {
            // `reply` checked the context: cannot happen.
            return Err(fatal(Error::Bug));
        };
        let inv = ctx.inv_handle;
        let credit = self.grant();
        self.pieces.clear();
        self.wrs.clear();
        // Counted only once the reply is posted (a refused or retried reply counts nothing).
        let mut tally = ReplyTally::default();
        // DDP regions → write chunks, in order (RFC 8166 §3.4.6).
        let all = reduce(&reply, false).map_err(fatal)?;
        // Bytes written into each Write chunk (0: unused, or empty on purpose).
        let mut written = [0usize; MAX_WRITE_CHUNKS];
        let mut sink = WriteSink {
            max_sge: self.ep.res().max_sge as usize,
            ep: &mut self.ep,
            pieces: &mut self.pieces,
            wrs: &mut self.wrs,
        };
        let items = plan_write_chunks(ctx, &reply, &all, &mut sink, &mut written, &mut tally)
            .map_err(fatal)?;
        // Items with no (or an empty) write chunk: the DDP data travels inline (a copy).
        let placed: usize = items.iter().map(|it| it.len).sum();
        let ddp_total: usize = all.iter().map(|it| it.len).sum();
        tally.ddp_payload_copied_bytes += ddp_total.saturating_sub(placed) as u64;
        let inline = inline_len(reply.len(), &items);
        let reply_segs = ctx.reply_chunk().map(<[Segment]>::len);
        let hlen = header_len(0, ctx.write_chunks().map(<[Segment]>::len), reply_segs);
        let long = reply_plan::is_long(hlen, inline, self.ep.max_send());
        // A Long Reply: what stays inline goes through the reply chunk instead, from the reply's
        // own pages and, for the other bytes, from pages pulled up into this send context.
        let mut reply_written = 0usize;
        if long {
            reply_written = self
                .plan_long_reply(idx, buf, &reply, &items, &mut tally)
                .map_err(fatal)?;
        }
        let Some(ctx) = self.ctxs.get(idx as usize) else {
            // `reply` checked the context: cannot happen.
            return Err(fatal(Error::Bug));
        };
        let head = ReplyHead {
            xid: ctx.xid,
            credit,
            long,
            written: &written,
            reply_written,
        };
        let sb = prov.send_buf(buf).map_err(fatal)?;
        let send_len = encode_reply(sb, ctx, &head, &reply, &items).map_err(fatal)?;
        self.post_reply(prov, buf, inv, send_len, reply, &tally)
    }

    /// Post a built reply (`send_len` bytes in send buffer `buf`): its Send (With Invalidate
    /// of `inv`) alone, or the RDMA Writes planned in `pieces` / `wrs` and the Send as one
    /// chain from the kept `wr_array`; then [`sent`](Self::sent). Busy: the chain comes back
    /// for a retry.
    #[inline(always)] // one caller on the hot path: compiled into it as before the split
    fn post_reply<P: Provider>(
        &mut self,
        prov: &mut P,
        buf: u32,
        inv: Option<u32>,
        send_len: usize,
        reply: Chain,
        tally: &ReplyTally,
    ) -> Result<(), (Error, Option<Chain>)> {
        let send_wr = SendWr {
            wr_id: WrTag::Send(buf).encode(),
            op: SendOp::Send {
                buf,
                len: u32::try_from(send_len).map_err(|_| fatal(CallError::TooLarge))?,
                invalidate: inv,
            },
            signaled: true,
        };
        if self.wrs.len() + 1 > self.ep.res().max_send_wr as usize {
            return Err(fatal(CallError::TooLarge));
        }
        if self.wrs.is_empty() {
            // Small reply: one Send.
            return match prov.post_send(&[send_wr]) {
                Ok(()) => {
                    self.sent(buf, inv, send_len, reply, tally);
                    Ok(())
                }
                Err(ProviderError::Busy) => Err((Error::Call(CallError::WouldBlock), Some(reply))),
                Err(other) => Err(fatal(other)),
            };
        }
        // The RDMA Writes and the Send, posted as one chain from the endpoint's array.
        let mut wrs: Vec<SendWr<'_>> = core::mem::take(&mut self.wr_array);
        wrs.clear();
        let built = wrs
            .try_reserve(self.wrs.len() + 1)
            .map_err(|_| CallError::NoMemory)
            .and_then(|()| {
                for d in &self.wrs {
                    let local = self
                        .pieces
                        .get(d.pieces.clone())
                        .ok_or(CallError::TooLarge)?;
                    wrs.push(SendWr {
                        wr_id: WrTag::Write.encode(),
                        op: SendOp::RdmaWrite {
                            local,
                            handle: d.handle,
                            offset: d.offset,
                        },
                        signaled: false,
                    });
                }
                wrs.push(send_wr);
                Ok(())
            });
        let posted = built.map_err(fatal).and_then(|()| {
            prov.post_send(&wrs).map_err(|e| match e {
                ProviderError::Busy => (Error::Call(CallError::WouldBlock), None),
                other => fatal(other),
            })
        });
        self.wr_array = recycle_wrs(wrs);
        match posted {
            Ok(()) => {
                self.sent(buf, inv, send_len, reply, tally);
                Ok(())
            }
            // Busy: the chain comes back for a retry.
            Err((Error::Call(CallError::WouldBlock), None)) => {
                Err((Error::Call(CallError::WouldBlock), Some(reply)))
            }
            Err(e) => Err(e),
        }
    }

    /// A Long Reply: what stays inline goes through the reply chunk instead, from the reply's
    /// own pages and, for the other bytes, from pages pulled up into send context `buf`.
    /// Plans its RDMA Writes after the write chunks' ones; returns the bytes it writes.
    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    fn plan_long_reply(
        &mut self,
        idx: u32,
        buf: u32,
        reply: &Chain,
        items: &[ReducedItem],
        tally: &mut ReplyTally,
    ) -> Result<usize, Error> {
        let rc = self
            .ctxs
            .get(idx as usize)
            .and_then(CallCtx::reply_chunk)
            .ok_or(CallError::TooLarge)?;
        let got = self
            .ep
            .gather_for_send(reply, kept_ranges(reply.len(), items), buf)
            // `reply` took this send buffer: cannot happen.
            .ok_or(Error::Bug)??;
        if got.pulled > 0 {
            tally.pullup_copies += 1;
            tally.pullup_bytes += got.pulled as u64;
        }
        plan(
            self.ep.frags(),
            rc.iter().copied(),
            self.ep.res().max_sge as usize,
            &mut self.pieces,
            &mut self.wrs,
        )?;
        tally.long_replies += 1;
        tally.reply_chunks += 1;
        tally.rdma_write_bytes += got.bytes as u64;
        Ok(got.bytes)
    }

    /// Book-keeping after a reply was posted: keep its pages until the Send completes.
    fn sent(
        &mut self,
        buf: u32,
        inv: Option<u32>,
        send_len: usize,
        reply: Chain,
        tally: &ReplyTally,
    ) {
        let c = self.ep.counters_mut();
        c.write_chunks += tally.write_chunks;
        c.reply_chunks += tally.reply_chunks;
        c.long_replies += tally.long_replies;
        c.rdma_write_bytes += tally.rdma_write_bytes;
        c.pullup_copies += tally.pullup_copies;
        c.pullup_bytes += tally.pullup_bytes;
        c.ddp_payload_copied_bytes += tally.ddp_payload_copied_bytes;
        if inv.is_some() {
            self.ep.counters_mut().send_with_invalidate += 1;
        }
        self.ep.counters_mut().messages_sent += 1;
        self.ep.counters_mut().inline_bytes_sent += send_len as u64;
        self.ep.send().hold(buf, reply);
    }
}

/// A failure that gives the reply chain up (the context is consumed).
fn fatal(e: impl Into<Error>) -> (Error, Option<Chain>) {
    (e.into(), None)
}

fn too_large<T>(_: T) -> CallError {
    CallError::TooLarge
}

/// Where a reply's RDMA Writes are planned: the endpoint's fragment table and the reply's
/// `pieces` / `wrs`.
struct WriteSink<'a> {
    max_sge: usize,
    ep: &'a mut Endpoint,
    pieces: &'a mut Vec<PageFragment>,
    wrs: &'a mut Vec<WrDesc>,
}

/// Plan the reply's DDP items `all` into the requester's write chunks, in order (RFC 8166
/// §3.4.6): per chunk, written (its RDMA Writes planned into `sink`, the bytes in
/// `written`), asked inline (§4.3.2.3: echoed empty), or unused (echoed with zero lengths).
/// Returns the items written.
#[inline(always)] // one caller on the hot path: compiled into it as before the split
fn plan_write_chunks(
    ctx: &CallCtx,
    reply: &Chain,
    all: &[ReducedItem],
    sink: &mut WriteSink<'_>,
    written: &mut [usize; MAX_WRITE_CHUNKS],
    tally: &mut ReplyTally,
) -> Result<heapless::Vec<ReducedItem, MAX_WRITE_CHUNKS>, CallError> {
    let mut items: heapless::Vec<ReducedItem, MAX_WRITE_CHUNKS> = heapless::Vec::new();
    for ((i, chunk), w) in ctx.write_chunks().enumerate().zip(written.iter_mut()) {
        let item = all.get(i);
        match (write_chunk_use(item.is_some(), chunk.is_empty()), item) {
            // The requester asks for this item inline (RFC 8166 §4.3.2.3); the chunk is
            // echoed empty.
            (WriteChunkUse::Inline, _) => {}
            (WriteChunkUse::Written, Some(item)) => {
                let frags = sink.ep.fill_frags(reply, item.data())?;
                plan(
                    frags,
                    chunk.iter().copied(),
                    sink.max_sge,
                    sink.pieces,
                    sink.wrs,
                )?;
                let _ = items.push(*item);
                *w = item.len;
                tally.write_chunks += 1;
                tally.rdma_write_bytes += item.len as u64;
            }
            // Unused write chunk: returned with zero lengths.
            _ => {}
        }
    }
    Ok(items)
}

/// What a reply's header says besides the context's stored chunks.
struct ReplyHead<'a> {
    xid: u32,
    credit: u32,
    /// A Long Reply (`RDMA_NOMSG`): nothing inline after the header.
    long: bool,
    /// Bytes written into each Write chunk.
    written: &'a [usize; MAX_WRITE_CHUNKS],
    /// Bytes written into the Reply chunk.
    reply_written: usize,
}

/// Encode the reply's header straight into the send buffer `sb` from the context's stored
/// chunks — each Write chunk echoed with its segments' lengths set to what was written into
/// them (filled in order, as [`plan`] fills them; zero for an unused chunk, RFC 8166
/// §4.3.2), the Reply chunk likewise (zero unless a Long Reply used it, §4.3.3) — and copy
/// the inline rest after it (none for a Long Reply). Returns the Send's length.
#[inline(always)] // one caller on the hot path: compiled into it as before the split
fn encode_reply(
    sb: &mut [u8],
    ctx: &CallCtx,
    head: &ReplyHead<'_>,
    reply: &Chain,
    items: &[ReducedItem],
) -> Result<usize, CallError> {
    let mut enc = HeaderEncoder::begin(sb, head.xid, head.credit, head.long).map_err(too_large)?;
    for (chunk, &w) in ctx.write_chunks().zip(head.written.iter()) {
        enc.write_chunk(sb, written_segments(chunk, w))
            .map_err(too_large)?;
    }
    let rc = ctx
        .reply_chunk()
        .map(|c| written_segments(c, head.reply_written));
    let h = enc.finish(sb, rc).map_err(too_large)?;
    if head.long {
        return Ok(h);
    }
    let rest = sb.get_mut(h..).ok_or(CallError::TooLarge)?;
    Ok(h + copy_inline(reply, items, rest)?)
}

/// Empty a work-request array and give it back its `'static` type, keeping its allocation:
/// the in-place `collect` of an empty vector into one of the same layout reuses the buffer
/// (the allocation test `transport_noalloc` would catch a regression).
fn recycle_wrs(mut wrs: Vec<SendWr<'_>>) -> Vec<SendWr<'static>> {
    wrs.clear();
    wrs.into_iter()
        .map(|w| SendWr {
            wr_id: w.wr_id,
            op: SendOp::LocalInv {
                reg: crate::provider::RegId(0),
            },
            signaled: w.signaled,
        })
        .collect()
}

/// What a reply adds to the [`Counters`] once it is posted (the fields a reply can change:
/// a whole `Counters` would cost more to zero and add than the reply itself).
#[derive(Debug, Default)]
struct ReplyTally {
    write_chunks: u64,
    reply_chunks: u64,
    long_replies: u64,
    rdma_write_bytes: u64,
    pullup_copies: u64,
    pullup_bytes: u64,
    ddp_payload_copied_bytes: u64,
}
