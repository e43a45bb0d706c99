//! Runs the real `userspace-harness decode` binary on hand-written RPC-over-RDMA messages.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

fn run_decode(input: &[u8]) -> (i32, Vec<Value>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_userspace-harness"))
        .arg("decode")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn decode");
    // Feed stdin from another thread: the child's output must be drained concurrently or a
    // large input deadlocks on full pipes.
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    let text = String::from_utf8(out.stdout).expect("stdout is UTF-8");
    let values = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    (out.status.code().unwrap_or(-1), values)
}

#[test]
fn rdma_msg_with_read_and_write_chunks_and_payload() {
    // xid 0x1234, vers 1, credit 64, RDMA_MSG
    // read list: position 132, handle 0x11223344, length 4096, offset 0x7f001000; end
    // write list: one chunk of 2 segments; end
    // reply chunk: absent
    // payload: 4 bytes
    let msg = "00001234 00000001 00000040 00000000 \
               00000001 00000084 11223344 00001000 00000000 7f001000 \
               00000000 \
               00000001 00000002 \
                 aaaa0001 00000800 00000000 00010000 \
                 aaaa0002 00000400 00000001 00000000 \
               00000000 \
               00000000 \
               01020304\n";
    let (code, out) = run_decode(msg.as_bytes());
    assert_eq!(code, 0);
    assert_eq!(out.len(), 1);
    let v = &out[0];
    assert_eq!(v["xid"], 0x1234);
    assert_eq!(v["vers"], 1);
    assert_eq!(v["credit"], 64);
    assert_eq!(v["proc"], 0);
    assert_eq!(v["proc_name"], "RDMA_MSG");
    assert_eq!(
        v["read_list"],
        json!([{"position": 132, "handle": 0x11223344u32, "length": 4096, "offset": 0x7f001000u64}])
    );
    assert_eq!(
        v["write_list"],
        json!([[
            {"handle": 0xaaaa0001u32, "length": 2048, "offset": 0x10000u64},
            {"handle": 0xaaaa0002u32, "length": 1024, "offset": 0x1_0000_0000u64}
        ]])
    );
    assert_eq!(v["reply_chunk"], Value::Null);
    // 16 fixed + (4 + 20) + 4 read list + (4 + 4 + 2*16) + 4 write list + 4 reply chunk
    assert_eq!(v["header_len"], 92);
    assert_eq!(v["payload_len"], 4);
    let expected: String = msg.split_whitespace().collect::<String>();
    assert_eq!(v["reencoded"], expected[..184]);
}

#[test]
fn rdma_nomsg_with_reply_chunk() {
    let msg = "00000007 00000001 00000020 00000001 00000000 00000000 \
               00000001 00000001 99aabbcc 00002000 00000000 00300000";
    let (code, out) = run_decode(format!("{msg}\n").as_bytes());
    assert_eq!(code, 0);
    let v = &out[0];
    assert_eq!(v["proc"], 1);
    assert_eq!(v["proc_name"], "RDMA_NOMSG");
    assert_eq!(v["read_list"], json!([]));
    assert_eq!(v["write_list"], json!([]));
    assert_eq!(
        v["reply_chunk"],
        json!([{"handle": 0x99aabbccu32, "length": 8192, "offset": 0x300000u64}])
    );
    assert_eq!(v["header_len"], 48);
}

#[test]
fn rdma_error_vers_and_chunk() {
    let input = "00000009 00000001 00000001 00000004 00000001 00000001 00000001\n\
                 0000000a 00000001 00000001 00000004 00000002\n";
    let (code, out) = run_decode(input.as_bytes());
    assert_eq!(code, 0);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0]["proc"], 4);
    assert_eq!(out[0]["err"], 1);
    assert_eq!(out[0]["err_name"], "ERR_VERS");
    assert_eq!(out[0]["vers_low"], 1);
    assert_eq!(out[0]["vers_high"], 1);
    assert_eq!(out[0]["header_len"], 28);
    assert_eq!(out[1]["err"], 2);
    assert_eq!(out[1]["err_name"], "ERR_CHUNK");
    assert!(out[1].get("vers_low").is_none());
    assert_eq!(out[1]["header_len"], 20);
    assert_eq!(
        out[1]["reencoded"],
        "0000000a000000010000000100000004 00000002".replace(' ', "")
    );
}

#[test]
fn bad_input_gives_error_objects_and_exit_zero() {
    let mut input = Vec::new();
    input.extend_from_slice(b"not hex at all\n");
    input.extend_from_slice(b"abc\n"); // odd digit count
    input.extend_from_slice(b"00000001000000010000000100000002\n"); // RDMA_MSGP: not to be used
    input.extend_from_slice(b"00000001000000010000000100000003\n"); // RDMA_DONE: not to be used
    input.extend_from_slice(b"00000001000000020000000100000000000000000000000000000000\n"); // vers 2
    input.extend_from_slice(b"000000010000000100000001000000000000000100000000\n"); // truncated read list
    input.extend_from_slice(b"00000001000000010000000100000000000000070000000000000000\n"); // bad discriminator
    input.extend_from_slice(b"\xff\xfe\xfd\n"); // not UTF-8
    input.extend_from_slice(b"0000000100000001"); // truncated, no final newline
    let (code, out) = run_decode(&input);
    assert_eq!(code, 0);
    assert_eq!(out.len(), 9);
    for v in &out {
        let reason = v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error in {v}"));
        assert!(!reason.is_empty());
        assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
    }
}

#[test]
fn many_random_lines_never_crash() {
    // A deterministic xorshift stream of random byte strings, valid hex, some with a valid
    // 16-byte prefix, so the decoder is driven deep into the lists.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut input = String::new();
    let lines = 2000;
    for i in 0..lines {
        let len = (next() % 200) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if i % 2 == 0 && bytes.len() >= 16 {
            bytes[4..8].copy_from_slice(&1u32.to_be_bytes());
            bytes[12..16].copy_from_slice(&((next() % 2) as u32).to_be_bytes());
            for w in bytes[16..].chunks_mut(4) {
                if next() % 2 == 0 {
                    let small = (next() % 3) as u8;
                    for (k, b) in w.iter_mut().enumerate() {
                        *b = if k + 1 == 4 { small } else { 0 };
                    }
                }
            }
        }
        for b in &bytes {
            input.push_str(&format!("{b:02x}"));
        }
        input.push('\n');
    }
    let (code, out) = run_decode(input.as_bytes());
    assert_eq!(code, 0);
    // Empty random lines are skipped as blank.
    assert!(
        out.len() >= lines * 9 / 10 && out.len() <= lines,
        "{}",
        out.len()
    );
    assert!(out
        .iter()
        .all(|v| v.get("error").is_some() || v.get("xid").is_some()));
}
