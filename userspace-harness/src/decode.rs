//! The `decode` tool: one RPC-over-RDMA v1 message (hex) in, one JSON object out.
//!
//! The JSON shape is shared with `--trace` output of later tools:
//! `{"xid","vers","credit","proc","proc_name","read_list":[{"position","handle","length","offset"}],
//! "write_list":[[{"handle","length","offset"}]],"reply_chunk":null|[{"handle","length","offset"}],
//! "header_len","payload_len","reencoded"}` plus `"err","err_name"` and, for ERR_VERS,
//! `"vers_low","vers_high"` for RDMA_ERROR. Undecodable input gives `{"error":"<reason>"}`.

use krpc_rdma::wire::{
    Body, ChunkLists, ErrorBody, HeaderRepr, Segment, WriteChunk, ERR_CHUNK, ERR_VERS,
};
use serde_json::{json, Map, Value};

use crate::hex;

/// Decodes one input line. `None` for lines to skip (blank, or a `#` comment).
pub fn decode_line(raw: &[u8]) -> Option<Value> {
    let Ok(text) = core::str::from_utf8(raw) else {
        return Some(error("input line is not UTF-8 text"));
    };
    let text = text.trim();
    if text.is_empty() || text.starts_with('#') {
        return None;
    }
    Some(match hex::parse(text) {
        Ok(bytes) => decode_message(&bytes),
        Err(e) => error(&e.to_string()),
    })
}

/// Decodes the bytes of one Send (transport header, then payload).
pub fn decode_message(bytes: &[u8]) -> Value {
    let repr = match HeaderRepr::parse(bytes) {
        Ok(repr) => repr,
        Err(e) => return error(&e.to_string()),
    };
    let header_len = repr.buffer_len();
    let mut reencoded = vec![0u8; header_len];
    let reencoded = match repr.emit(&mut reencoded) {
        Ok(n) => reencoded.get(..n).map(hex::encode).unwrap_or_default(),
        Err(e) => return error(&format!("re-encoding failed: {e}")),
    };
    let mut obj = Map::new();
    obj.insert("xid".into(), json!(repr.xid));
    obj.insert("vers".into(), json!(repr.vers));
    obj.insert("credit".into(), json!(repr.credit));
    obj.insert("proc".into(), json!(repr.proc_num()));
    let empty = ChunkLists::default();
    let (proc_name, lists) = match &repr.body {
        Body::Msg(lists) => ("RDMA_MSG", lists),
        Body::NoMsg(lists) => ("RDMA_NOMSG", lists),
        Body::Error(_) => ("RDMA_ERROR", &empty),
    };
    obj.insert("proc_name".into(), json!(proc_name));
    let read_list: Vec<Value> = lists
        .read_list
        .iter()
        .map(|r| {
            json!({
                "position": r.position,
                "handle": r.segment.handle,
                "length": r.segment.length,
                "offset": r.segment.offset,
            })
        })
        .collect();
    obj.insert("read_list".into(), Value::Array(read_list));
    let write_list: Vec<Value> = lists.write_list.iter().map(chunk_json).collect();
    obj.insert("write_list".into(), Value::Array(write_list));
    obj.insert(
        "reply_chunk".into(),
        lists.reply_chunk.as_ref().map_or(Value::Null, chunk_json),
    );
    if let Body::Error(err) = &repr.body {
        match err {
            ErrorBody::Vers { low, high } => {
                obj.insert("err".into(), json!(ERR_VERS));
                obj.insert("err_name".into(), json!("ERR_VERS"));
                obj.insert("vers_low".into(), json!(low));
                obj.insert("vers_high".into(), json!(high));
            }
            ErrorBody::Chunk => {
                obj.insert("err".into(), json!(ERR_CHUNK));
                obj.insert("err_name".into(), json!("ERR_CHUNK"));
            }
        }
    }
    obj.insert("header_len".into(), json!(header_len));
    obj.insert(
        "payload_len".into(),
        json!(bytes.len().saturating_sub(header_len)),
    );
    obj.insert("reencoded".into(), json!(reencoded));
    Value::Object(obj)
}

fn segment_json(s: &Segment) -> Value {
    json!({ "handle": s.handle, "length": s.length, "offset": s.offset })
}

fn chunk_json(chunk: &WriteChunk) -> Value {
    Value::Array(chunk.iter().map(segment_json).collect())
}

fn error(reason: &str) -> Value {
    json!({ "error": reason })
}
