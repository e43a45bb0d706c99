//! The receive path: a Receive's message checked ([`Responder::parse_call`]: every number
//! the peer sent, before anything is allocated), a context filled, and refused messages
//! answered with `RDMA_ERROR` (now, or queued for a send buffer).

use super::{CtxState, Received, Refusal, Responder, ResponderEvent, DEFERRED_ERRORS};
use crate::provider::{Provider, SendOp, SendWr};
use crate::transport::error::CallError;
use crate::transport::read_chunks::{positions_fit, ReadBudget, MAX_CALL_CHUNKS};
use crate::transport::send_ctx::WrTag;
use crate::wire::{
    encode_error, ErrorBody, ErrorCode, Header, Proc, MAX_WRITE_CHUNKS, MIN_HEADER_LEN,
};

impl Responder {
    /// Answer a refused message with `RDMA_ERROR`, now or, with no send buffer free, once one
    /// is (in order); with the deferred queue full or the provider failing, close (RFC 8166
    /// §4.5.4: a responder that can neither reply nor send an error closes the connection).
    pub(super) fn send_error<P: Provider>(&mut self, prov: &mut P, r: Refusal) {
        if self.ep.lost || self.closing {
            return;
        }
        if self.errors.is_empty() {
            match self.try_send_error(prov, r) {
                Ok(()) => return,
                Err(CallError::WouldBlock) => {}
                Err(_) => return self.close(prov),
            }
        }
        self.ep.counters.resource_stalls += 1;
        if self.errors.len() >= DEFERRED_ERRORS {
            self.close(prov);
        } else {
            // Within the capacity reserved at creation: no allocation.
            self.errors.push_back(r);
        }
    }

    /// Send the owed `RDMA_ERROR`s that fit now.
    pub(super) fn flush_errors<P: Provider>(&mut self, prov: &mut P) {
        while let Some(&r) = self.errors.front() {
            if self.ep.lost || self.closing {
                self.errors.clear();
                return;
            }
            match self.try_send_error(prov, r) {
                Ok(()) => {
                    self.errors.pop_front();
                }
                Err(CallError::WouldBlock) => return,
                Err(_) => return self.close(prov),
            }
        }
    }

    fn try_send_error<P: Provider>(
        &mut self,
        prov: &mut P,
        r: Refusal,
    ) -> Result<(), CallError> {
        let buf = self.ep.send.get().ok_or(CallError::WouldBlock)?;
        let credit = self.grant();
        let body = ErrorBody::for_code(r.code);
        let len = match prov
            .send_buf(buf)
            .map(|b| encode_error(b, r.xid, r.vers, credit, body))
        {
            Ok(Ok(n)) => n,
            _ => {
                self.ep.send.complete(buf);
                return Err(CallError::BadConfig);
            }
        };
        let wr = SendWr {
            wr_id: WrTag::Send(buf).encode(),
            op: SendOp::Send {
                buf,
                len: u32::try_from(len).unwrap_or(0),
                invalidate: None,
            },
            signaled: true,
        };
        if let Err(e) = prov.post_send(&[wr]) {
            self.ep.send.complete(buf);
            return Err(e.into());
        }
        match r.code {
            ErrorCode::Vers => self.ep.counters.err_vers_sent += 1,
            ErrorCode::Chunk => self.ep.counters.err_chunk_sent += 1,
        }
        self.ep.counters.inline_bytes_sent += len as u64;
        Ok(())
    }

    pub(super) fn on_recv<P: Provider>(
        &mut self,
        prov: &mut P,
        buf: u32,
        len: u32,
        events: &mut impl FnMut(ResponderEvent),
    ) {
        self.ep.counters.inline_bytes_received += u64::from(len);
        // A call finding every context taken may find one its upper layer dropped.
        if self.free_ctx.is_empty() && self.reclaim() {
            self.pump_reads(prov, events);
        }
        let received = match prov.recv_buf(buf) {
            Ok(data) => match data.get(..len as usize) {
                Some(d) => self.parse_call(d),
                None => Received::Discard,
            },
            Err(_) => Received::Discard,
        };
        match received {
            Received::Call(idx) => {
                if self
                    .ctxs
                    .get(idx as usize)
                    .is_some_and(|c| c.state == CtxState::Reading)
                {
                    // Never full: it holds contexts, and there are as many slots as contexts.
                    if self.read_queue.len() < self.read_queue.capacity() {
                        self.read_queue.push_back(idx);
                    } else {
                        debug_assert!(false, "read queue full: more calls than contexts");
                    }
                    self.pump_reads(prov, events);
                } else {
                    self.hand_up(idx, events);
                }
            }
            Received::Discard => self.ep.counters.bad_messages += 1,
            Received::Refuse(r) => {
                self.ep.counters.bad_messages += 1;
                self.send_error(prov, r);
            }
            Received::Close => self.close(prov),
        }
    }

    /// Validate a received message and, for a call, fill a context: every number the peer
    /// sent is checked (positions, lengths, 64-bit offsets) before anything is allocated.
    pub(super) fn parse_call(&mut self, data: &[u8]) -> Received {
        // RFC 8166 §4.5: shorter than the smallest header (xid, vers, credit, proc and three
        // empty lists) is not a message to answer.
        if data.len() < MIN_HEADER_LEN {
            return Received::Discard;
        }
        let hdr = match Header::new_checked(data) {
            Ok(h) => h,
            Err(e) => {
                return match e.xid().filter(|_| e.should_reply()) {
                    Some(xid) => Received::Refuse(Refusal {
                        xid,
                        vers: e.request_vers(),
                        code: e.reply_error(),
                    }),
                    None => Received::Discard,
                };
            }
        };
        let xid = hdr.xid();
        let refuse = Received::Refuse(Refusal::chunk(xid));
        let nomsg = match hdr.proc_() {
            Proc::Msg => false,
            Proc::NoMsg => true,
            // An RDMA_ERROR from a requester is never answered.
            _ => return Received::Discard,
        };
        let payload = hdr.payload();
        // Semantic checks the codec leaves to us (RFC 8166 §4.5.2: ERR_CHUNK).
        let mut chunks: heapless::Vec<(u32, u32), MAX_CALL_CHUNKS> = heapless::Vec::new();
        let mut call_bytes = 0u64;
        let budget = ReadBudget {
            max_chunk_bytes: self.ep.cfg.max_chunk_bytes,
            max_call_ddp_bytes: self.ep.cfg.max_call_ddp_bytes,
        };
        // Each list is looked at only when present (a small call has none).
        let has_reads = hdr.read_list().next().is_some();
        if has_reads {
            for (pos, segs) in hdr.read_chunks() {
                let Some(total) = budget.admit(&mut call_bytes, segs.total_length()) else {
                    return refuse;
                };
                if segs.clone().any(|s| s.end().is_none()) || chunks.push((pos, total)).is_err() {
                    return refuse;
                }
            }
        }
        let has_writes = hdr.write_list().next().is_some();
        let reply_chunk = hdr.reply_chunk();
        // The requester's write and reply chunks: a segment whose end overflows 64 bits can
        // never be written.
        let bad_target = (has_writes
            && hdr
                .write_list()
                .any(|c| c.segments().any(|s| s.end().is_none())))
            || reply_chunk.is_some_and(|c| c.segments().any(|s| s.end().is_none()));
        if bad_target {
            return refuse;
        }
        // The XDR stream the other read chunks are placed in (RFC 8166 §3.5.3).
        if !positions_fit(&chunks, nomsg, payload.len()) {
            return refuse;
        }
        let Some(idx) = self.free_ctx.pop() else {
            // More calls than credits granted (the requester broke RFC 8166 §3.3.1): refused,
            // not dropped, so its caller learns at once.
            return refuse;
        };
        // The inline part, copied out of the receive buffer (reposted right after) into a
        // chain of the pool.
        let body = if nomsg { &[][..] } else { payload };
        let Ok(inline) = self.ep.chains.chain_from_bytes(body) else {
            // Out of memory for a few KiB: we cannot hold the call, and a refusal would tell
            // the requester its chunks were wrong; close (RFC 8166 §4.5.4), the requester
            // retransmits on a new connection.
            self.free_ctx.push(idx);
            return Received::Close;
        };
        let Some(ctx) = self.ctxs.get_mut(idx as usize) else {
            debug_assert!(false, "free context index out of range");
            return Received::Discard;
        };
        // Everything the reply needs is stored once, in place.
        ctx.reads.clear();
        ctx.write_segs.clear();
        ctx.write_ends.clear();
        // Where each segment's data lands in the call chain: a chunk's data starts at its XDR
        // position (the inline bytes before it plus the earlier chunks and pads). A Long
        // Call's chunks are read back to back (the position-zero chunk first) and spliced
        // once all are read (`assemble_long_call`).
        let mut back_to_back = 0usize;
        let mut fits = true;
        if has_reads {
            for (pos, segs) in hdr.read_chunks() {
                let mut off = if nomsg { back_to_back } else { pos as usize };
                for seg in segs {
                    fits &= ctx.reads.push((seg, off)).is_ok();
                    off += seg.length as usize;
                }
                back_to_back = off;
            }
        }
        if has_writes {
            for chunk in hdr.write_list().take(MAX_WRITE_CHUNKS) {
                for seg in chunk.segments() {
                    fits &= ctx.write_segs.push(seg).is_ok();
                }
                fits &= ctx.write_ends.push(ctx.write_segs.len() as u8).is_ok();
            }
        }
        ctx.reply_segs.clear();
        ctx.has_reply = false;
        if let Some(c) = reply_chunk {
            ctx.has_reply = true;
            for seg in c.segments() {
                fits &= ctx.reply_segs.push(seg).is_ok();
            }
        }
        // Send With Invalidate of the first chunk's first handle, from the lists just stored.
        // (Linux's svc_rdma_get_inv_rkey is stricter: it uses Send With Invalidate only when
        // every segment carries the same handle. Ours is also safe: the requester
        // Local-Invalidates whatever the Send did not revoke.)
        let inv_handle = if self.ep.thresholds.send_with_invalidate {
            ctx.reads
                .first()
                .map(|(s, _)| s.handle)
                .or_else(|| {
                    // The first Write chunk's first segment (none if that chunk is empty).
                    let first_chunk_segs = ctx.write_ends.first().copied().unwrap_or(0);
                    ctx.write_segs
                        .first()
                        .filter(|_| first_chunk_segs > 0)
                        .map(|s| s.handle)
                })
                .or_else(|| ctx.reply_segs.first().map(|s| s.handle))
        } else {
            None
        };
        if !fits {
            // The codec's limits bound every list: cannot happen for a checked header.
            debug_assert!(false, "checked header beyond the context's lists");
            ctx.reads.clear();
            self.free_ctx.push(idx);
            return refuse;
        }
        // Never 0: 0 marks "nothing dropped" in the shared table of returns.
        ctx.generation = ctx.generation.wrapping_add(1).max(1);
        ctx.xid = xid;
        ctx.inv_handle = inv_handle;
        ctx.nomsg = nomsg;
        ctx.ddp_bytes = 0;
        if chunks.is_empty() {
            ctx.call = Some(inline);
            ctx.inline = None;
            ctx.state = CtxState::Handed;
        } else {
            self.ep.counters.read_chunks += chunks.len() as u64;
            if nomsg {
                self.ep.counters.long_calls += 1;
            }
            ctx.call = None;
            ctx.inline = Some(inline);
            ctx.state = CtxState::Reading;
        }
        ctx.chunks = chunks;
        Received::Call(idx)
    }
}
