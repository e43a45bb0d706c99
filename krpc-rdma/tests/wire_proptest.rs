//! Property tests for the header codec and the RFC 8797 private data.

// clippy.toml exempts `#[test]` bodies only; the helpers and strategies here are test code too.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::sync::atomic::{AtomicUsize, Ordering};

use krpc_rdma::wire::{
    negotiate, Body, ChunkLists, CmPrivateData, DecodeErrorKind, ErrorBody, ErrorCode, Header,
    HeaderRepr, ReadSegment, Segment, WriteChunk, CM_PRIVATE_MAGIC, MAX_CHUNK_SEGMENTS,
    MAX_HEADER_LEN, MAX_INLINE_SIZE, MAX_READ_SEGMENTS, MAX_WRITE_CHUNKS, MIN_INLINE_SIZE,
};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Cases for the round-trip property (the brief asks for at least 2048).
const ROUND_TRIP_CASES: u32 = 4096;
/// Cases for the arbitrary-input property.
const ARBITRARY_CASES: u32 = 8192;

fn segment() -> impl Strategy<Value = Segment> {
    (any::<u32>(), any::<u32>(), any::<u64>()).prop_map(|(handle, length, offset)| Segment {
        handle,
        length,
        offset,
    })
}

/// Positions drawn mostly from a few values so that Read chunks with several segments occur.
fn position() -> impl Strategy<Value = u32> {
    prop_oneof![
        3 => (0u32..6).prop_map(|p| p * 4),
        1 => any::<u32>().prop_map(|p| p & !3),
    ]
}

fn read_segment() -> impl Strategy<Value = ReadSegment> {
    (position(), segment()).prop_map(|(position, segment)| ReadSegment { position, segment })
}

fn write_chunk() -> impl Strategy<Value = WriteChunk> {
    vec(segment(), 0..=MAX_CHUNK_SEGMENTS).prop_map(|v| WriteChunk::from_slice(&v).unwrap())
}

fn chunk_lists() -> impl Strategy<Value = ChunkLists> {
    (
        vec(read_segment(), 0..=MAX_READ_SEGMENTS),
        vec(write_chunk(), 0..=MAX_WRITE_CHUNKS),
        proptest::option::of(write_chunk()),
    )
        .prop_map(|(reads, writes, reply_chunk)| ChunkLists {
            read_list: reads.into_iter().collect(),
            write_list: writes.into_iter().collect(),
            reply_chunk,
        })
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        chunk_lists().prop_map(Body::Msg),
        chunk_lists()
            .prop_filter("RDMA_NOMSG needs a chunk", |l| !l.is_empty())
            .prop_map(Body::NoMsg),
        (any::<u32>(), any::<u32>())
            .prop_map(|(low, high)| Body::Error(ErrorBody::Vers { low, high })),
        Just(Body::Error(ErrorBody::Chunk)),
    ]
}

fn repr() -> impl Strategy<Value = HeaderRepr> {
    (any::<u32>(), any::<u32>(), body())
        .prop_map(|(xid, credit, body)| HeaderRepr::new(xid, credit, body))
}

fn encode(repr: &HeaderRepr) -> Vec<u8> {
    let mut out = vec![0u8; repr.buffer_len()];
    let n = repr.emit(&mut out).unwrap();
    assert_eq!(n, out.len());
    out
}

/// Inputs for the never-panic property: a mix of random bytes, word soup that looks like a
/// header, and valid headers with mutations and truncations.
fn input() -> impl Strategy<Value = Vec<u8>> {
    let random = vec(any::<u8>(), 0..256);
    let word = prop_oneof![4 => 0u32..6, 1 => 15u32..20, 1 => any::<u32>()];
    let soup = (
        any::<u32>(),
        prop_oneof![8 => Just(1u32), 1 => any::<u32>()],
        any::<u32>(),
        prop_oneof![4 => 0u32..2, 1 => 0u32..6, 1 => any::<u32>()],
        vec(word, 0..96),
    )
        .prop_map(|(xid, vers, credit, proc_num, rest)| {
            [xid, vers, credit, proc_num]
                .iter()
                .chain(rest.iter())
                .flat_map(|w| w.to_be_bytes())
                .collect::<Vec<u8>>()
        });
    let mutated = (
        repr(),
        vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        any::<prop::sample::Index>(),
        any::<bool>(),
        vec(any::<u8>(), 0..16),
    )
        .prop_map(|(r, flips, cut, truncate, payload)| {
            let mut bytes = encode(&r);
            bytes.extend_from_slice(&payload);
            for (at, value) in flips {
                let i = at.index(bytes.len());
                bytes[i] = value;
            }
            if truncate {
                bytes.truncate(cut.index(bytes.len() + 1));
            }
            bytes
        });
    prop_oneof![1 => random, 2 => soup, 3 => mutated]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(ROUND_TRIP_CASES))]

    /// emit → parse is the identity; buffer_len == bytes emitted == bytes consumed; the view
    /// agrees.
    #[test]
    fn round_trip(r in repr(), payload in vec(any::<u8>(), 0..32)) {
        let mut buf = vec![0u8; r.buffer_len()];
        let written = r.emit(&mut buf).unwrap();
        prop_assert_eq!(written, r.buffer_len());
        prop_assert!(written <= MAX_HEADER_LEN);
        buf.extend_from_slice(&payload);

        let parsed = HeaderRepr::parse(&buf).unwrap();
        prop_assert_eq!(&parsed, &r);
        prop_assert_eq!(parsed.buffer_len(), written);

        let view = Header::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(view.header_len(), written);
        prop_assert_eq!(view.payload(), &payload[..]);
        prop_assert_eq!(view.xid(), r.xid);
        prop_assert_eq!(view.credit(), r.credit);
        prop_assert_eq!(view.proc_num(), r.proc_num());
        if let Some(lists) = r.chunk_lists() {
            prop_assert_eq!(view.read_list().collect::<Vec<_>>(), lists.read_list.to_vec());
            prop_assert_eq!(view.write_list().count(), lists.write_list.len());
            prop_assert_eq!(view.reply_chunk().map(|c| c.to_chunk()), lists.reply_chunk.clone());
        }
    }

    /// The Read chunks partition the Read list: every entry exactly once, positions strictly
    /// ascending, list order kept inside each chunk.
    #[test]
    fn read_chunks_partition_the_read_list(lists in chunk_lists()) {
        let chunks: Vec<(u32, Vec<Segment>)> =
            lists.read_chunks().map(|(p, s)| (p, s.collect())).collect();
        prop_assert!(chunks.windows(2).all(|w| w[0].0 < w[1].0));
        for (position, segments) in &chunks {
            let expected: Vec<Segment> = lists
                .read_list
                .iter()
                .filter(|r| r.position == *position)
                .map(|r| r.segment)
                .collect();
            prop_assert_eq!(segments, &expected);
        }
        let total: usize = chunks.iter().map(|(_, s)| s.len()).sum();
        prop_assert_eq!(total, lists.read_list.len());
    }

    /// Private data: any 8 bytes with the magic and version 1 decode, and re-encode to the same
    /// bytes except reserved flag bits; everything else reads as the defaults.
    #[test]
    fn cm_private_data(bytes in vec(any::<u8>(), 0..16), magic in any::<bool>(), version in prop_oneof![Just(1u8), any::<u8>()]) {
        let mut bytes = bytes;
        if magic && bytes.len() >= 5 {
            bytes[..4].copy_from_slice(&CM_PRIVATE_MAGIC.to_be_bytes());
            bytes[4] = version;
        }
        let valid = bytes.len() >= 8
            && bytes[..4] == CM_PRIVATE_MAGIC.to_be_bytes()
            && bytes[4] == 1;
        match CmPrivateData::parse(&bytes) {
            Some(pd) => {
                prop_assert!(valid);
                let mut expected = [0u8; 8];
                expected.copy_from_slice(&bytes[..8]);
                expected[5] &= 1;
                prop_assert_eq!(pd.to_bytes(), expected);
                prop_assert_eq!(CmPrivateData::parse(&pd.to_bytes()), Some(pd));
            }
            None => {
                prop_assert!(!valid);
                prop_assert_eq!(CmPrivateData::from_peer(&bytes), CmPrivateData::DEFAULT);
            }
        }
    }

    /// Negotiation: each direction is the min of sender's send and receiver's receive, always
    /// representable, and symmetric between the two ends.
    #[test]
    fn negotiation_is_consistent(a in (any::<u32>(), any::<u32>(), any::<bool>()), b in (any::<u32>(), any::<u32>(), any::<bool>())) {
        let ours = CmPrivateData::new(a.0, a.1, a.2);
        let peer = CmPrivateData::new(b.0, b.1, b.2);
        let us = negotiate(&ours, &peer);
        let them = negotiate(&peer, &ours);
        prop_assert_eq!(us.send, them.recv);
        prop_assert_eq!(us.recv, them.send);
        prop_assert_eq!(us.send, ours.send_size.min(peer.recv_size));
        prop_assert_eq!(us.send_with_invalidate, b.2);
        prop_assert_eq!(them.send_with_invalidate, a.2);
        for v in [us.send, us.recv] {
            prop_assert!((MIN_INLINE_SIZE..=MAX_INLINE_SIZE).contains(&v));
            prop_assert_eq!(v % 1024, 0);
        }
        // Our data survives the wire.
        prop_assert_eq!(CmPrivateData::from_peer(&ours.to_bytes()), ours);
    }
}

/// Arbitrary input never panics; whenever parse succeeds, re-emitting gives exactly the header
/// prefix of the input, and the view agrees; whenever it fails, the error is consistent.
#[test]
fn parse_arbitrary_bytes() {
    let ok = AtomicUsize::new(0);
    let err = AtomicUsize::new(0);
    let mut runner = TestRunner::new(Config::with_cases(ARBITRARY_CASES));
    runner
        .run(&input(), |bytes| {
            let view = Header::new_unchecked(&bytes[..]);
            let _ = (view.xid(), view.vers(), view.credit(), view.proc_());
            let _ = (view.read_list().count(), view.read_chunks().count());
            let _ = (
                view.write_list().map(|c| c.total_length()).sum::<u64>(),
                view.reply_chunk(),
            );
            let _ = (view.error_body(), view.payload().len(), view.header_len());
            prop_assert!(view.header_len() <= bytes.len());
            match HeaderRepr::parse(&bytes) {
                Ok(repr) => {
                    ok.fetch_add(1, Ordering::Relaxed);
                    let n = repr.buffer_len();
                    prop_assert!(n <= bytes.len() && n <= MAX_HEADER_LEN);
                    let mut out = vec![0u8; n];
                    prop_assert_eq!(repr.emit(&mut out), Ok(n));
                    prop_assert_eq!(&out[..], &bytes[..n]);
                    prop_assert_eq!(view.header_len(), n);
                    prop_assert!(view.check().is_ok());
                }
                Err(e) => {
                    err.fetch_add(1, Ordering::Relaxed);
                    prop_assert!(Header::new_checked(&bytes[..]).is_err());
                    prop_assert_eq!(e.xid().is_some(), bytes.len() >= 4);
                    let vers_error = matches!(e.kind(), DecodeErrorKind::BadVersion { .. });
                    prop_assert_eq!(e.reply_error() == ErrorCode::Vers, vers_error);
                    prop_assert!(!e.to_string().is_empty());
                }
            }
            Ok(())
        })
        .unwrap();
    let (ok, err) = (ok.into_inner(), err.into_inner());
    eprintln!("parse_arbitrary_bytes: {ARBITRARY_CASES} cases, {ok} parsed, {err} rejected");
    assert_eq!(ok + err, ARBITRARY_CASES as usize);
    // The input mix must exercise both outcomes substantially.
    assert!(
        ok > ARBITRARY_CASES as usize / 10,
        "only {ok} inputs parsed"
    );
    assert!(
        err > ARBITRARY_CASES as usize / 10,
        "only {err} inputs rejected"
    );
}
