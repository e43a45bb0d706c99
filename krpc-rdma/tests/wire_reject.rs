//! What the header decoder and encoder refuse, and what a responder is told to answer.

// clippy.toml exempts `#[test]` bodies only; the helpers and strategies here are test code too.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use krpc_rdma::wire::{
    Body, ChunkLists, DecodeErrorKind, EncodeError, ErrorBody, ErrorCode, Header, HeaderRepr,
    ReadSegment, Segment, WriteChunk, MAX_CHUNK_SEGMENTS, MAX_HEADER_LEN, MAX_READ_SEGMENTS,
    MAX_WRITE_CHUNKS,
};

fn be(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_be_bytes()).collect()
}

fn seg(i: u32) -> Segment {
    Segment {
        handle: 0x100 + i,
        length: 512 * (i + 1),
        offset: 0x1000_0000_0000 + u64::from(i) * 0x1000,
    }
}

fn full_chunk() -> WriteChunk {
    (0..MAX_CHUNK_SEGMENTS as u32).map(seg).collect()
}

/// A header with every list filled to its limit.
fn max_repr() -> HeaderRepr {
    let mut lists = ChunkLists::default();
    for i in 0..MAX_READ_SEGMENTS as u32 {
        lists
            .read_list
            .push(ReadSegment {
                position: (i / 4) * 4096,
                segment: seg(i),
            })
            .unwrap();
    }
    for _ in 0..MAX_WRITE_CHUNKS {
        lists.write_list.push(full_chunk()).unwrap();
    }
    lists.reply_chunk = Some(full_chunk());
    HeaderRepr::new(0xabcd, 32, Body::NoMsg(lists))
}

fn encode(repr: &HeaderRepr) -> Vec<u8> {
    let mut out = vec![0; repr.buffer_len()];
    assert_eq!(repr.emit(&mut out), Ok(out.len()));
    out
}

/// Valid headers of every shape, encoded.
fn samples() -> Vec<Vec<u8>> {
    let mut lists = ChunkLists::default();
    lists
        .read_list
        .push(ReadSegment {
            position: 8,
            segment: seg(1),
        })
        .unwrap();
    lists.write_list.push((0..3).map(seg).collect()).unwrap();
    lists.reply_chunk = Some((0..2).map(seg).collect());
    vec![
        encode(&HeaderRepr::new(1, 1, Body::Msg(ChunkLists::default()))),
        encode(&HeaderRepr::new(2, 2, Body::Msg(lists.clone()))),
        encode(&HeaderRepr::new(3, 3, Body::NoMsg(lists))),
        encode(&HeaderRepr::vers_error(4, 4)),
        encode(&HeaderRepr::chunk_error(5, 5)),
        encode(&max_repr()),
    ]
}

fn kind(buf: &[u8]) -> DecodeErrorKind {
    HeaderRepr::parse(buf).unwrap_err().kind()
}

#[test]
fn every_truncation_point_is_truncated() {
    let mut points = 0;
    for full in samples() {
        let len = full.len();
        for cut in 0..len {
            let prefix = &full[..cut];
            let err = HeaderRepr::parse(prefix).unwrap_err();
            assert_eq!(err.kind(), DecodeErrorKind::Truncated, "cut {cut} of {len}");
            assert_eq!(err.xid().is_some(), cut >= 4);
            assert_eq!(err.reply_error(), ErrorCode::Chunk);
            assert!(err.offset() <= cut);
            assert!(Header::new_checked(prefix).is_err());
            // The unchecked view never panics and never claims more than the buffer.
            let view = Header::new_unchecked(prefix);
            assert!(view.header_len() <= cut);
            let _ = (view.read_list().count(), view.write_list().count());
            let _ = (view.reply_chunk(), view.error_body(), view.payload());
            points += 1;
        }
        // And with the full header, anything after it is payload.
        let mut longer = full.clone();
        longer.extend_from_slice(&[0xee; 5]);
        assert_eq!(HeaderRepr::parse(&longer).unwrap().buffer_len(), len);
    }
    assert!(points > MAX_HEADER_LEN);
}

#[test]
fn short_buffer_without_xid_cannot_be_answered() {
    let err = HeaderRepr::parse(&[0, 0, 1]).unwrap_err();
    assert_eq!(err.xid(), None);
    assert!(!err.should_reply());
    assert_eq!(err.error_reply(1), None);
}

#[test]
fn msgp_and_done_are_rejected() {
    for proc_num in [2u32, 3] {
        let buf = be(&[0x77, 1, 8, proc_num, 0, 0, 0]);
        let err = HeaderRepr::parse(&buf).unwrap_err();
        assert_eq!(err.kind(), DecodeErrorKind::UnsupportedProc(proc_num));
        assert_eq!(err.xid(), Some(0x77));
        assert_eq!(err.proc_num(), Some(proc_num));
        assert_eq!(err.reply_error(), ErrorCode::Chunk);
        if proc_num == 3 {
            // RFC 8166 §4.6.2: RDMA_DONE is discarded silently.
            assert!(!err.should_reply());
            assert_eq!(err.error_reply(3), None);
        } else {
            assert_eq!(err.error_reply(3), Some(HeaderRepr::chunk_error(0x77, 3)));
        }
        assert!(err.to_string().contains("no longer part"), "{err}");
    }
}

#[test]
fn unknown_procs_are_rejected() {
    for proc_num in [5u32, 6, 0x100, u32::MAX] {
        let buf = be(&[9, 1, 1, proc_num, 0, 0, 0]);
        assert_eq!(kind(&buf), DecodeErrorKind::UnsupportedProc(proc_num));
        assert!(HeaderRepr::parse(&buf)
            .unwrap_err()
            .to_string()
            .contains("unknown"));
    }
}

#[test]
fn bad_versions_answer_err_vers_with_the_xid() {
    for vers in [0u32, 2, 0xffff_ffff] {
        // Checked before the procedure: even an invalid proc gives BadVersion.
        for proc_num in [0u32, 1, 4, 7] {
            let buf = be(&[0x1234_5678, vers, 1, proc_num, 0, 0, 0]);
            let err = HeaderRepr::parse(&buf).unwrap_err();
            assert_eq!(err.kind(), DecodeErrorKind::BadVersion { vers });
            assert_eq!(err.xid(), Some(0x1234_5678));
            assert_eq!(err.reply_error(), ErrorCode::Vers);
            assert_eq!(err.offset(), 4);
            // Never answer an RDMA_ERROR, whatever its version.
            assert_eq!(err.should_reply(), proc_num != 4);
            if proc_num != 4 {
                // RFC 8166 §4.5: the answer carries the request's version.
                let reply = err.error_reply(7).unwrap();
                assert_eq!(err.request_vers(), vers);
                assert_eq!(
                    reply,
                    HeaderRepr {
                        vers,
                        ..HeaderRepr::vers_error(0x1234_5678, 7)
                    }
                );
                assert_eq!(reply.body, Body::Error(ErrorBody::Vers { low: 1, high: 1 }));
                // It encodes, and decodes back whatever the version.
                let mut out = [0u8; 28];
                let n = reply.emit(&mut out).unwrap();
                assert_eq!(HeaderRepr::parse(&out[..n]).unwrap(), reply);
            }
        }
        // Only xid and vers present: still a version error, not truncation.
        let err = HeaderRepr::parse(&be(&[0x42, vers])).unwrap_err();
        assert_eq!(err.kind(), DecodeErrorKind::BadVersion { vers });
        assert_eq!(err.proc_num(), None);
        assert!(err.to_string().contains("version"), "{err}");
        assert!(err.to_string().contains("0x00000042"), "{err}");
    }
}

#[test]
fn bad_discriminators() {
    // In the Read list, the Write list, inside the Write list after a chunk, and the Reply chunk.
    let cases: [(Vec<u32>, usize); 4] = [
        (vec![1, 1, 1, 0, 2, 0, 0], 16),
        (vec![1, 1, 1, 0, 0, 2, 0], 20),
        (vec![1, 1, 1, 0, 0, 1, 0, 7, 0], 28),
        (vec![1, 1, 1, 1, 0, 0, 0xffff_ffff], 24),
    ];
    for (words, offset) in cases {
        let err = HeaderRepr::parse(&be(&words)).unwrap_err();
        assert_eq!(err.kind(), DecodeErrorKind::BadDiscriminator, "{words:?}");
        assert_eq!(err.offset(), offset);
        assert_eq!(err.reply_error(), ErrorCode::Chunk);
    }
}

#[test]
fn limits_are_enforced_at_limit_plus_one() {
    let max = encode(&max_repr());
    assert_eq!(max.len(), MAX_HEADER_LEN);
    assert_eq!(HeaderRepr::parse(&max).unwrap(), max_repr());

    // Read list with MAX_READ_SEGMENTS + 1 entries.
    let mut words = vec![1, 1, 1, 0];
    for i in 0..=MAX_READ_SEGMENTS as u32 {
        words.extend_from_slice(&[1, 0, i, 16, 0, 0]);
    }
    words.extend_from_slice(&[0, 0, 0]);
    let err = HeaderRepr::parse(&be(&words)).unwrap_err();
    assert_eq!(err.kind(), DecodeErrorKind::TooManySegments);
    assert_eq!(err.offset(), 16 + MAX_READ_SEGMENTS * 24);

    // A Write chunk, then the Reply chunk, declaring MAX_CHUNK_SEGMENTS + 1 segments (with or
    // without the segments present: the count alone is enough).
    let n = MAX_CHUNK_SEGMENTS as u32 + 1;
    for with_segments in [false, true] {
        let mut write = vec![1, 1, 1, 0, 0, 1, n];
        let mut reply = vec![1, 1, 1, 0, 0, 0, 1, n];
        if with_segments {
            for _ in 0..n {
                write.extend_from_slice(&[5, 5, 0, 0]);
                reply.extend_from_slice(&[5, 5, 0, 0]);
            }
        }
        write.extend_from_slice(&[0, 0]);
        assert_eq!(kind(&be(&write)), DecodeErrorKind::TooManySegments);
        assert_eq!(kind(&be(&reply)), DecodeErrorKind::TooManySegments);
    }
    // A hostile count is refused before the decoder looks for the segments.
    assert_eq!(
        kind(&be(&[1, 1, 1, 0, 0, 1, u32::MAX])),
        DecodeErrorKind::TooManySegments
    );

    // MAX_WRITE_CHUNKS + 1 one-segment Write chunks.
    let mut words = vec![1, 1, 1, 0, 0];
    for _ in 0..=MAX_WRITE_CHUNKS {
        words.extend_from_slice(&[1, 1, 9, 9, 0, 0]);
    }
    words.extend_from_slice(&[0, 0]);
    let err = HeaderRepr::parse(&be(&words)).unwrap_err();
    assert_eq!(err.kind(), DecodeErrorKind::TooManyChunks);
    assert_eq!(err.reply_error(), ErrorCode::Chunk);
}

#[test]
fn headers_longer_than_max_header_len_are_rejected() {
    // Grow the maximal header by one entry in each list in turn: each is longer than
    // MAX_HEADER_LEN and must be rejected (by the list limit that it breaks first).
    let max = encode(&max_repr());
    let read_end = 16 + MAX_READ_SEGMENTS * 24;
    let mut more_reads = max[..read_end].to_vec();
    more_reads.extend(be(&[1, 0, 1, 1, 0, 0]));
    more_reads.extend_from_slice(&max[read_end..]);
    let write_end = MAX_HEADER_LEN - 4 - (8 + 16 * MAX_CHUNK_SEGMENTS);
    let mut more_writes = max[..write_end].to_vec();
    more_writes.extend(be(&[1, 1, 1, 1, 0, 0]));
    more_writes.extend_from_slice(&max[write_end..]);
    for (buf, expected) in [
        (more_reads, DecodeErrorKind::TooManySegments),
        (more_writes, DecodeErrorKind::TooManyChunks),
    ] {
        assert!(buf.len() > MAX_HEADER_LEN);
        assert_eq!(kind(&buf), expected);
    }
    // Whatever the input, an accepted header is never longer than MAX_HEADER_LEN.
    let view = Header::new_checked(&max[..]).unwrap();
    assert_eq!(view.header_len(), MAX_HEADER_LEN);
}

#[test]
fn unknown_error_codes() {
    for code in [0u32, 3, 0x8000_0000] {
        let buf = be(&[0x55, 1, 1, 4, code, 1, 1]);
        let err = HeaderRepr::parse(&buf).unwrap_err();
        assert_eq!(err.kind(), DecodeErrorKind::UnknownErrorCode);
        assert_eq!(err.value(), code);
        assert_eq!(err.offset(), 16);
        // An RDMA_ERROR is never answered.
        assert!(!err.should_reply());
        assert_eq!(err.error_reply(1), None);
    }
}

#[test]
fn misaligned_positions() {
    for position in [1u32, 2, 3, 4097] {
        let buf = be(&[0x66, 1, 1, 1, 1, position, 1, 16, 0, 0, 0, 0, 0]);
        let err = HeaderRepr::parse(&buf).unwrap_err();
        assert_eq!(err.kind(), DecodeErrorKind::Misaligned);
        assert_eq!(err.value(), position);
        assert_eq!(err.offset(), 20);
        assert_eq!(err.reply_error(), ErrorCode::Chunk);
        assert!(err.to_string().contains("multiple of 4"), "{err}");

        let mut lists = ChunkLists::default();
        lists
            .read_list
            .push(ReadSegment {
                position,
                segment: seg(0),
            })
            .unwrap();
        let repr = HeaderRepr::new(0x66, 1, Body::Msg(lists));
        let mut out = [0u8; 64];
        assert_eq!(
            repr.emit(&mut out),
            Err(EncodeError::Misaligned { position })
        );
    }
}

#[test]
fn unchecked_view_reads_the_valid_prefix() {
    // Two valid Read entries, then a bad discriminator.
    let buf = be(&[1, 1, 1, 0, 1, 0, 7, 16, 0, 0, 1, 4, 8, 32, 0, 0, 9, 0, 0, 0]);
    assert_eq!(kind(&buf), DecodeErrorKind::BadDiscriminator);
    let view = Header::new_unchecked(&buf[..]);
    let positions: Vec<u32> = view.read_list().map(|r| r.position).collect();
    assert_eq!(positions, vec![0, 4]);
    assert_eq!(view.write_list().count(), 0);
    assert!(view.reply_chunk().is_none());
    assert_eq!(view.header_len(), 64);
    assert!(view.check().is_err());
    assert!(HeaderRepr::from_header(&view).is_err());
}

#[test]
fn emit_refuses_short_buffers_and_other_versions() {
    for full in samples() {
        let repr = HeaderRepr::parse(&full).unwrap();
        for len in 0..full.len() {
            let mut out = vec![0u8; len];
            assert_eq!(
                repr.emit(&mut out),
                Err(EncodeError::BufferTooShort {
                    needed: full.len(),
                    available: len
                })
            );
            assert!(
                out.iter().all(|b| *b == 0),
                "emit wrote into a short buffer"
            );
        }
        let mut other = repr.clone();
        other.vers = 2;
        let mut out = vec![0u8; full.len()];
        if matches!(other.body, Body::Error(ErrorBody::Vers { .. })) {
            // ERR_VERS echoes the request's version, whatever it was (RFC 8166 §4.5).
            assert_eq!(other.emit(&mut out), Ok(full.len()));
        } else {
            assert_eq!(
                other.emit(&mut out),
                Err(EncodeError::BadVersion { vers: 2 })
            );
        }
        assert!(!EncodeError::BadVersion { vers: 2 }.to_string().is_empty());
    }
}

#[test]
fn error_messages_name_the_problem() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (be(&[1, 1, 1]), "truncated"),
        (be(&[1, 1, 1, 0, 3, 0, 0]), "discriminator 3"),
        (be(&[1, 1, 1, 0, 0, 1, 99]), "too many segments"),
        (be(&[1, 1, 1, 4, 9]), "unknown RDMA_ERROR code 9"),
    ];
    for (buf, needle) in cases {
        let msg = HeaderRepr::parse(&buf).unwrap_err().to_string();
        assert!(msg.contains(needle), "{msg:?} lacks {needle:?}");
        assert!(msg.contains("xid 0x00000001"), "{msg:?}");
    }
}

#[test]
fn nomsg_without_chunks_is_rejected() {
    // RFC 8166 §4.5.2: RDMA_NOMSG with all three lists absent is an XDR error.
    let buf = be(&[0x99, 1, 1, 1, 0, 0, 0]);
    let err = HeaderRepr::parse(&buf).unwrap_err();
    assert_eq!(err.kind(), DecodeErrorKind::EmptyNoMsg);
    assert_eq!(err.reply_error(), ErrorCode::Chunk);
    assert_eq!(err.error_reply(2), Some(HeaderRepr::chunk_error(0x99, 2)));
    assert!(err.to_string().contains("RDMA_NOMSG"), "{err}");
    // The same lists are fine for RDMA_MSG (a Short Message).
    assert!(HeaderRepr::parse(&be(&[0x99, 1, 1, 0, 0, 0, 0])).is_ok());
    // And emit refuses to produce it.
    let repr = HeaderRepr::new(0x99, 1, Body::NoMsg(ChunkLists::default()));
    let mut out = [0u8; 28];
    assert_eq!(repr.emit(&mut out), Err(EncodeError::EmptyNoMsg));
    // The view still shows what is there.
    let view = Header::new_unchecked(&buf[..]);
    assert_eq!(view.header_len(), 28);
}
