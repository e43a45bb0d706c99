//! The receive path: a Receive's message checked ([`Responder::parse_call`]: every number
//! the peer sent, before anything is allocated), a context filled, and refused messages
//! answered with `RDMA_ERROR` (now, or queued for a send buffer).

use super::{CallCtx, CtxState, Received, Refusal, Responder, ResponderEvent, DEFERRED_ERRORS};
use crate::provider::{Provider, SendOp, SendWr};
use crate::transport::error::CallError;
use crate::transport::read_chunks::{positions_fit, ReadBudget, MAX_CALL_CHUNKS};
use crate::transport::send_ctx::WrTag;
use crate::wire::{
    encode_error, ErrorBody, ErrorCode, Header, Proc, WriteChunkView, MAX_WRITE_CHUNKS,
    MIN_HEADER_LEN,
};
use mbuf::Chain;

impl Responder {
    /// Answer a refused message with `RDMA_ERROR`, now or, with no send buffer free, once one
    /// is (in order); with the deferred queue full or the provider failing, close (RFC 8166
    /// §4.5.4: a responder that can neither reply nor send an error closes the connection).
    pub(super) fn send_error<P: Provider>(&mut self, prov: &mut P, r: Refusal) {
        if self.ep.is_lost() || self.closing {
            return;
        }
        if self.errors.is_empty() {
            match self.try_send_error(prov, r) {
                Ok(()) => return,
                Err(CallError::WouldBlock) => {}
                Err(_) => return self.close(prov),
            }
        }
        self.ep.counters_mut().resource_stalls += 1;
        if self.errors.len() >= DEFERRED_ERRORS {
            self.close(prov);
        } else {
            // Within the capacity reserved at creation: no allocation.
            self.errors.push_back(r);
        }
    }

    /// Send the owed `RDMA_ERROR`s that fit now. Called at every poll and every reply's Send
    /// completion: the common "none owed" is decided inline, without a call.
    #[inline(always)]
    pub(super) fn flush_errors<P: Provider>(&mut self, prov: &mut P) {
        if !self.errors.is_empty() {
            self.send_owed_errors(prov);
        }
    }

    fn send_owed_errors<P: Provider>(&mut self, prov: &mut P) {
        while let Some(&r) = self.errors.front() {
            if self.ep.is_lost() || self.closing {
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

    fn try_send_error<P: Provider>(&mut self, prov: &mut P, r: Refusal) -> Result<(), CallError> {
        let buf = self.ep.send().get().ok_or(CallError::WouldBlock)?;
        let credit = self.grant();
        let body = ErrorBody::for_code(r.code);
        let len = match prov
            .send_buf(buf)
            .map(|b| encode_error(b, r.xid, r.vers, credit, body))
        {
            Ok(Ok(n)) => n,
            _ => {
                self.ep.send().complete(buf);
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
            self.ep.send().complete(buf);
            return Err(e.into());
        }
        match r.code {
            ErrorCode::Vers => self.ep.counters_mut().err_vers_sent += 1,
            ErrorCode::Chunk => self.ep.counters_mut().err_chunk_sent += 1,
        }
        self.ep.counters_mut().inline_bytes_sent += len as u64;
        Ok(())
    }

    pub(super) fn on_recv<P: Provider>(
        &mut self,
        prov: &mut P,
        buf: u32,
        len: u32,
        events: &mut impl FnMut(ResponderEvent),
    ) {
        self.ep.counters_mut().inline_bytes_received += u64::from(len);
        // A call finding every context taken may find one its upper layer dropped.
        if self.free_ctx.is_empty() && self.reclaim() {
            self.pump_reads(prov, events);
        }
        let received = match prov.recv_buf(buf) {
            Ok(data) => match data.get(..len as usize) {
                Some(d) if self.reverse_enabled() => match self.take_reverse_reply(d) {
                    Some(ev) => {
                        if let Some(ev) = ev {
                            events(ev);
                        }
                        return;
                    }
                    None => self.parse_call(d),
                },
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
            Received::Discard => self.ep.counters_mut().bad_messages += 1,
            Received::Refuse(r) => {
                self.ep.counters_mut().bad_messages += 1;
                self.send_error(prov, r);
            }
            Received::Close => self.close(prov),
        }
    }

    /// Validate a received message and, for a call, fill a context: every number the peer
    /// sent is checked (positions, lengths, 64-bit offsets) before anything is allocated.
    /// The stages: the header ([`Header::new_checked`]), the chunks ([`check_chunks`]), a
    /// free context and the inline part copied out of the receive buffer, the lists stored
    /// ([`CallCtx::store_lists`]), the context started ([`CallCtx::start`]).
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
        let budget = ReadBudget {
            max_chunk_bytes: self.ep.cfg().max_chunk_bytes,
            max_call_ddp_bytes: self.ep.cfg().max_call_ddp_bytes,
        };
        let Some(found) = check_chunks(&hdr, nomsg, budget) else {
            return refuse;
        };
        let Some(idx) = self.free_ctx.pop() else {
            // More calls than credits granted (the requester broke RFC 8166 §3.3.1): refused,
            // not dropped, so its caller learns at once.
            return refuse;
        };
        // The inline part, copied out of the receive buffer (reposted right after) into a
        // chain of the pool.
        let body = if nomsg { &[][..] } else { hdr.payload() };
        let Ok(inline) = self.ep.chains().chain_from_bytes(body) else {
            // Out of memory for a few KiB: we cannot hold the call, and a refusal would tell
            // the requester its chunks were wrong; close (RFC 8166 §4.5.4), the requester
            // retransmits on a new connection.
            self.free_ctx.push(idx);
            return Received::Close;
        };
        let send_with_invalidate = self.ep.thresholds().send_with_invalidate;
        let Some(ctx) = self.ctxs.get_mut(idx as usize) else {
            debug_assert!(false, "free context index out of range");
            return Received::Discard;
        };
        if !ctx.store_lists(&hdr, &found, nomsg) {
            // The codec's limits bound every list: cannot happen for a checked header. Our
            // own invariant broke (a bug, see `Error`): not refused on the wire — an
            // ERR_CHUNK would blame the requester's chunks —, the connection is closed
            // (RFC 8166 §4.5.4), counted in `closes`.
            debug_assert!(false, "checked header beyond the context's lists");
            ctx.reads.clear();
            self.free_ctx.push(idx);
            return Received::Close;
        }
        let reading = ctx.start(xid, nomsg, send_with_invalidate, found.chunks, inline);
        if reading {
            let chunks = ctx.chunks.len() as u64;
            self.ep.counters_mut().read_chunks += chunks;
            if nomsg {
                self.ep.counters_mut().long_calls += 1;
            }
        }
        Received::Call(idx)
    }
}

/// What [`check_chunks`] found in a call's header: its read chunks and which lists it
/// carries (each list is looked at again only when present: a small call has none).
struct Chunks<'h> {
    /// The read chunks: (XDR position, total length).
    chunks: heapless::Vec<(u32, u32), MAX_CALL_CHUNKS>,
    has_reads: bool,
    has_writes: bool,
    reply_chunk: Option<WriteChunkView<'h>>,
}

/// The semantic checks the codec leaves to us (RFC 8166 §4.5.2: `None` is `ERR_CHUNK`):
/// every read chunk within the per-call budget, no segment whose end overflows 64 bits (the
/// requester's write and reply chunks could never be written), the read chunks' positions
/// within the XDR stream they are placed in (RFC 8166 §3.5.3).
#[inline(always)] // one caller on the hot path: compiled into it as before the split
fn check_chunks<'h>(hdr: &'h Header<&[u8]>, nomsg: bool, budget: ReadBudget) -> Option<Chunks<'h>> {
    let mut chunks: heapless::Vec<(u32, u32), MAX_CALL_CHUNKS> = heapless::Vec::new();
    let mut call_bytes = 0u64;
    let has_reads = hdr.read_list().next().is_some();
    if has_reads {
        for (pos, segs) in hdr.read_chunks() {
            let total = budget.admit(&mut call_bytes, segs.total_length())?;
            if segs.clone().any(|s| s.end().is_none()) || chunks.push((pos, total)).is_err() {
                return None;
            }
        }
    }
    let has_writes = hdr.write_list().next().is_some();
    let reply_chunk = hdr.reply_chunk();
    let bad_target = (has_writes
        && hdr
            .write_list()
            .any(|c| c.segments().any(|s| s.end().is_none())))
        || reply_chunk.is_some_and(|c| c.segments().any(|s| s.end().is_none()));
    if bad_target || !positions_fit(&chunks, nomsg, hdr.payload().len()) {
        return None;
    }
    Some(Chunks {
        chunks,
        has_reads,
        has_writes,
        reply_chunk,
    })
}

impl CallCtx {
    /// Store the call's lists in this context, in place: the read segments with the
    /// call-chain offset their data lands at, the write chunks' segments, the reply chunk.
    /// False if a list does not fit (the codec's limits bound every list: cannot happen
    /// for a checked header).
    #[inline(always)] // one caller on the hot path: compiled into it as before the split
    fn store_lists(&mut self, hdr: &Header<&[u8]>, found: &Chunks<'_>, nomsg: bool) -> bool {
        self.reads.clear();
        self.write_segs.clear();
        self.write_ends.clear();
        // Where each segment's data lands in the call chain: a chunk's data starts at its XDR
        // position (the inline bytes before it plus the earlier chunks and pads). A Long
        // Call's chunks are read back to back (the position-zero chunk first) and spliced
        // once all are read (`assemble_long_call`).
        let mut back_to_back = 0usize;
        let mut fits = true;
        if found.has_reads {
            for (pos, segs) in hdr.read_chunks() {
                let mut off = if nomsg { back_to_back } else { pos as usize };
                for seg in segs {
                    fits &= self.reads.push((seg, off)).is_ok();
                    off += seg.length as usize;
                }
                back_to_back = off;
            }
        }
        if found.has_writes {
            for chunk in hdr.write_list().take(MAX_WRITE_CHUNKS) {
                for seg in chunk.segments() {
                    fits &= self.write_segs.push(seg).is_ok();
                }
                fits &= self.write_ends.push(self.write_segs.len() as u8).is_ok();
            }
        }
        self.reply_segs.clear();
        self.has_reply = false;
        if let Some(c) = &found.reply_chunk {
            self.has_reply = true;
            for seg in c.segments() {
                fits &= self.reply_segs.push(seg).is_ok();
            }
        }
        fits
    }

    /// The handle a reply's Send With Invalidate names, from the lists stored: the first
    /// chunk's first handle. (Linux's svc_rdma_get_inv_rkey is stricter: it uses Send With
    /// Invalidate only when every segment carries the same handle. Ours is also safe: the
    /// requester Local-Invalidates whatever the Send did not revoke.)
    fn first_handle(&self) -> Option<u32> {
        self.reads
            .first()
            .map(|(s, _)| s.handle)
            .or_else(|| {
                // The first Write chunk's first segment (none if that chunk is empty).
                let first_chunk_segs = self.write_ends.first().copied().unwrap_or(0);
                self.write_segs
                    .first()
                    .filter(|_| first_chunk_segs > 0)
                    .map(|s| s.handle)
            })
            .or_else(|| self.reply_segs.first().map(|s| s.handle))
    }

    /// Start the call in this context (its lists stored): handed up at once with its inline
    /// part, or, with read chunks, waiting for its RDMA Reads. True when it is reading.
    #[inline(always)] // one caller on the hot path: compiled into it as before the split
    fn start(
        &mut self,
        xid: u32,
        nomsg: bool,
        send_with_invalidate: bool,
        chunks: heapless::Vec<(u32, u32), MAX_CALL_CHUNKS>,
        inline: Chain,
    ) -> bool {
        // Never 0: 0 marks "nothing dropped" in the shared table of returns.
        self.generation = self.generation.wrapping_add(1).max(1);
        self.xid = xid;
        self.inv_handle = if send_with_invalidate {
            self.first_handle()
        } else {
            None
        };
        self.nomsg = nomsg;
        self.ddp_bytes = 0;
        let reading = !chunks.is_empty();
        if reading {
            self.call = None;
            self.inline = Some(inline);
            self.state = CtxState::Reading;
        } else {
            self.call = Some(inline);
            self.inline = None;
            self.state = CtxState::Handed;
        }
        self.chunks = chunks;
        reading
    }
}
