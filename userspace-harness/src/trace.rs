//! `--trace FILE`: every transport header sent and received, one JSON line each.
//!
//! [`Traced<P>`] wraps any [`Provider`] without touching the core: at
//! [`post_send`](Provider::post_send) it decodes the send buffer of each Send work request
//! (the bytes of the message: transport header, then the inline RPC message), at
//! [`poll_cq`](Provider::poll_cq) the receive buffer of each successful receive completion.
//! Each line is the `decode` tool's JSON ([`decode_message`]) plus `"dir":"tx"|"rx"`,
//! `"peer":"IP:PORT"` and `"message"`: the hex of the header bytes as they went on the wire
//! (so `reencoded == message` when the codec round-trips). A Send whose data is partly
//! gathered from pages counts those bytes in `payload_len`.
//!
//! Writes are buffered ([`Tracer`] is shared by every connection of the process) and flushed
//! by [`Tracer::flush`] at exit.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::{Arc, Mutex};

use krpc_rdma::provider::{
    Completion, Middleware, Provider, ProviderError, SendOp, SendWr, WcKind, WcStatus,
};
use krpc_rdma::wire::MAX_HEADER_LEN;
use serde_json::{json, Value};

use crate::decode::decode_message;
use crate::hex;

/// The trace file, shared by every traced connection.
#[derive(Debug)]
pub struct Tracer {
    out: Mutex<BufWriter<File>>,
}

impl Tracer {
    /// Create (truncate) `path`.
    ///
    /// # Errors
    /// The file cannot be created.
    pub fn create(path: &std::path::Path) -> Result<Arc<Tracer>, String> {
        let f = File::create(path)
            .map_err(|e| format!("cannot create trace file {}: {e}", path.display()))?;
        Ok(Arc::new(Tracer {
            out: Mutex::new(BufWriter::with_capacity(1 << 16, f)),
        }))
    }

    /// One trace line for `bytes` (a whole message, or its buffered part) travelling `dir`;
    /// `gathered` page bytes followed it on the wire.
    pub fn record(&self, dir: &str, peer: &str, bytes: &[u8], gathered: usize) {
        let line = trace_line(dir, peer, bytes, gathered);
        if let Ok(mut out) = self.out.lock() {
            let _ = serde_json::to_writer(&mut *out, &line);
            let _ = out.write_all(b"\n");
        }
    }

    /// Flush buffered lines to the file.
    ///
    /// # Errors
    /// The write failed.
    pub fn flush(&self) -> Result<(), String> {
        match self.out.lock() {
            Ok(mut out) => out.flush().map_err(|e| format!("writing the trace: {e}")),
            Err(_) => Err("trace writer poisoned".into()),
        }
    }
}

/// The JSON line for one message.
pub fn trace_line(dir: &str, peer: &str, bytes: &[u8], gathered: usize) -> Value {
    let mut v = decode_message(bytes);
    let header_len = v
        .get("header_len")
        .and_then(Value::as_u64)
        .map_or(bytes.len().min(MAX_HEADER_LEN), |n| n as usize);
    if let Some(obj) = v.as_object_mut() {
        if gathered > 0 {
            if let Some(p) = obj.get("payload_len").and_then(Value::as_u64) {
                obj.insert("payload_len".into(), json!(p + gathered as u64));
            }
        }
        obj.insert("dir".into(), json!(dir));
        obj.insert("peer".into(), json!(peer));
        let hdr = bytes.get(..header_len).unwrap_or(bytes);
        obj.insert("message".into(), json!(hex::encode(hdr)));
    }
    v
}

/// A provider whose Sends and receives are traced (see the module documentation).
pub struct Traced<P> {
    inner: P,
    tracer: Option<Arc<Tracer>>,
    peer: String,
}

impl<P> std::fmt::Debug for Traced<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traced")
            .field("peer", &self.peer)
            .field("tracing", &self.tracer.is_some())
            .finish_non_exhaustive()
    }
}

impl<P: Provider> Traced<P> {
    /// Wrap `inner`; with `tracer` `None` nothing is recorded.
    pub fn new(inner: P, tracer: Option<Arc<Tracer>>, peer: String) -> Self {
        Traced {
            inner,
            tracer,
            peer,
        }
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The wrapped provider, mutably (e.g. to wait on it).
    pub fn inner_mut(&mut self) -> &mut P {
        &mut self.inner
    }
}

/// Every `Provider` method forwards to the wrapped provider but the two that record: posted
/// Sends and received messages.
impl<P: Provider> Middleware for Traced<P> {
    fn wrapped(&self) -> &impl Provider {
        &self.inner
    }

    fn wrapped_mut(&mut self) -> &mut impl Provider {
        &mut self.inner
    }

    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), ProviderError> {
        let Some(tracer) = self.tracer.clone() else {
            return self.inner.post_send(wrs);
        };
        // Copy the messages before posting (the buffers are ours until the Send completes,
        // but keep the recording off the posting path's borrow).
        let mut msgs: Vec<(Vec<u8>, usize)> = Vec::new();
        for wr in wrs {
            let (buf, len, gathered) = match wr.op {
                SendOp::Send { buf, len, .. } => (buf, len, 0),
                SendOp::SendGather {
                    buf, len, pages, ..
                } => (buf, len, pages.iter().map(|p| p.len).sum()),
                _ => continue,
            };
            if let Ok(b) = self.inner.send_buf(buf) {
                msgs.push((b.get(..len as usize).unwrap_or(b).to_vec(), gathered));
            }
        }
        self.inner.post_send(wrs)?;
        for (m, g) in msgs {
            tracer.record("tx", &self.peer, &m, g);
        }
        Ok(())
    }

    fn post_recv(&mut self, bufs: &[u32]) -> Result<(), ProviderError> {
        self.inner.post_recv(bufs)
    }

    fn poll_cq(&mut self, out: &mut [Completion]) -> usize {
        let n = self.inner.poll_cq(out);
        if let Some(tracer) = &self.tracer {
            for c in out.iter().take(n) {
                if let (WcKind::Recv { buf }, WcStatus::Success) = (c.kind, c.status) {
                    if let Ok(b) = self.inner.recv_buf(buf) {
                        let m = b.get(..c.byte_len as usize).unwrap_or(b);
                        tracer.record("rx", &self.peer, m, 0);
                    }
                }
            }
        }
        n
    }
}

krpc_rdma::forward_provider!(middleware [P: Provider] Traced<P>);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn trace_line_has_decode_fields_dir_peer_and_message() {
        let msg =
            crate::hex::parse("00000001000000010000008000000000000000000000000000000000deadbeef")
                .unwrap();
        let v = trace_line("tx", "10.0.2.15:20049", &msg, 4096);
        assert_eq!(v["dir"], "tx");
        assert_eq!(v["peer"], "10.0.2.15:20049");
        assert_eq!(v["xid"], 1);
        assert_eq!(v["payload_len"], 4100);
        assert_eq!(v["message"], v["reencoded"]);
        let v = trace_line("rx", "p", &[1, 2, 3], 0);
        assert!(v["error"].is_string());
        assert_eq!(v["message"], "010203");
    }
}
