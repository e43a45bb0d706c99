//! Golden vectors for the RPC-over-RDMA Version 1 header codec and RFC 8797 private data.
//!
//! Every vector is written by hand from the XDR in RFC 8166 §4.1 (big-endian 32-bit words;
//! an `rdma_offset` is a 64-bit hyper, spelled here as two words, high then low), not produced
//! by the codec. Each one is checked three ways: `parse` gives the expected repr, `emit` gives
//! back the identical bytes, and the zero-copy view's accessors agree with the repr.

// clippy.toml exempts `#[test]` bodies only; the helpers and strategies here are test code too.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use krpc_rdma::wire::{
    negotiate, Body, ChunkLists, CmFlags, CmPrivateData, ErrorBody, ErrorCode, Header, HeaderRepr,
    InlineThresholds, Proc, ReadSegment, Segment, WriteChunk, CM_PRIVATE_MAGIC, MIN_HEADER_LEN,
    RDMA_ERROR, RDMA_MSG, RDMA_NOMSG, RPCRDMA_VERSION,
};

/// Big-endian bytes of a sequence of XDR words.
fn be(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_be_bytes()).collect()
}

fn seg(handle: u32, length: u32, offset: u64) -> Segment {
    Segment {
        handle,
        length,
        offset,
    }
}

fn chunk(segments: &[Segment]) -> WriteChunk {
    WriteChunk::from_slice(segments).unwrap()
}

/// parse → repr, emit → same header bytes, view accessors agree.
fn check(bytes: &[u8], header_len: usize, expected: &HeaderRepr) {
    let repr = HeaderRepr::parse(bytes).unwrap();
    assert_eq!(&repr, expected);
    assert_eq!(repr.buffer_len(), header_len);

    let mut out = vec![0xa5u8; header_len + 8];
    let n = repr.emit(&mut out).unwrap();
    assert_eq!(n, header_len);
    assert_eq!(&out[..n], &bytes[..header_len]);
    assert!(
        out[n..].iter().all(|b| *b == 0xa5),
        "emit wrote past buffer_len"
    );

    let view = Header::new_checked(bytes).unwrap();
    assert_eq!(view.xid(), expected.xid);
    assert_eq!(view.vers(), RPCRDMA_VERSION);
    assert_eq!(view.credit(), expected.credit);
    assert_eq!(view.proc_(), expected.proc_());
    assert_eq!(view.proc_num(), expected.proc_num());
    assert_eq!(view.header_len(), header_len);
    assert_eq!(view.header_bytes(), &bytes[..header_len]);
    assert_eq!(view.payload(), &bytes[header_len..]);
    let empty = ChunkLists::default();
    let lists = expected.chunk_lists().unwrap_or(&empty);
    assert_eq!(
        view.read_list().collect::<Vec<_>>(),
        lists.read_list.to_vec()
    );
    let writes: Vec<WriteChunk> = view.write_list().map(|c| c.to_chunk()).collect();
    assert_eq!(writes, lists.write_list.to_vec());
    for (v, r) in view.write_list().zip(lists.write_list.iter()) {
        assert_eq!(v.len(), r.len());
        assert_eq!(v.segments().collect::<Vec<_>>(), r.to_vec());
    }
    assert_eq!(view.reply_chunk().map(|c| c.to_chunk()), lists.reply_chunk);
    match &expected.body {
        Body::Error(e) => assert_eq!(view.error_body(), Some(*e)),
        _ => assert_eq!(view.error_body(), None),
    }
    // The view's grouping agrees with the repr's.
    let from_view: Vec<(u32, Vec<Segment>)> =
        view.read_chunks().map(|(p, s)| (p, s.collect())).collect();
    let from_repr: Vec<(u32, Vec<Segment>)> =
        lists.read_chunks().map(|(p, s)| (p, s.collect())).collect();
    assert_eq!(from_view, from_repr);
    // And the repr round-trips through the view.
    assert_eq!(HeaderRepr::from_header(&view).unwrap(), repr);
}

#[test]
fn rdma_msg_empty_lists() {
    #[rustfmt::skip]
    let bytes: Vec<u8> = vec![
        0xde, 0xad, 0xbe, 0xef, // rdma_xid = 0xdeadbeef
        0x00, 0x00, 0x00, 0x01, // rdma_vers = 1
        0x00, 0x00, 0x00, 0x20, // rdma_credit = 32
        0x00, 0x00, 0x00, 0x00, // rdma_proc = RDMA_MSG (0)
        0x00, 0x00, 0x00, 0x00, // rdma_reads: list end (no entries)
        0x00, 0x00, 0x00, 0x00, // rdma_writes: list end (no entries)
        0x00, 0x00, 0x00, 0x00, // rdma_reply: absent
        // RPC message (payload), inline:
        0xde, 0xad, 0xbe, 0xef, // RPC xid
        0x00, 0x00, 0x00, 0x00, // msg_type = CALL
    ];
    let expected = HeaderRepr {
        xid: 0xdead_beef,
        vers: 1,
        credit: 32,
        body: Body::Msg(ChunkLists::default()),
    };
    assert_eq!(MIN_HEADER_LEN, 28);
    check(&bytes, 28, &expected);
    assert_eq!(Header::new_checked(&bytes[..]).unwrap().payload().len(), 8);
    // Exactly the header, no payload, is fine too.
    check(&bytes[..28], 28, &expected);
}

#[test]
fn rdma_msg_read_list_two_chunks() {
    // Two Read chunks: position 0x80 (one segment) listed first, then position 0x40 (two
    // segments). Grouping must give position 0x40 first, its segments in list order.
    let bytes = be(&[
        0x0000_1001, // rdma_xid
        0x0000_0001, // rdma_vers = 1
        0x0000_0080, // rdma_credit = 128
        0x0000_0000, // rdma_proc = RDMA_MSG
        // rdma_reads
        0x0000_0001, // entry present
        0x0000_0080, //   rdma_position = 128
        0x1111_1111, //   rdma_handle
        0x0000_1000, //   rdma_length = 4096
        0x0000_0001, //   rdma_offset (high word)
        0x0000_2000, //   rdma_offset (low word)  => 0x1_0000_2000
        0x0000_0001, // entry present
        0x0000_0040, //   rdma_position = 64
        0x2222_2222, //   rdma_handle
        0x0000_0800, //   rdma_length = 2048
        0x0000_0000, //   rdma_offset (high)
        0x0003_0000, //   rdma_offset (low)
        0x0000_0001, // entry present
        0x0000_0040, //   rdma_position = 64 (same chunk as the previous entry)
        0x3333_3333, //   rdma_handle
        0x0000_0400, //   rdma_length = 1024
        0x0000_0000, //   rdma_offset (high)
        0x0004_0000, //   rdma_offset (low)
        0x0000_0000, // list end
        0x0000_0000, // rdma_writes: list end
        0x0000_0000, // rdma_reply: absent
        // payload: 12 bytes of inline RPC message
        0x0000_1001,
        0x0000_0000,
        0x0000_0002,
    ]);
    let a = seg(0x1111_1111, 4096, 0x1_0000_2000);
    let b = seg(0x2222_2222, 2048, 0x3_0000);
    let c = seg(0x3333_3333, 1024, 0x4_0000);
    let mut lists = ChunkLists::default();
    for (position, segment) in [(0x80, a), (0x40, b), (0x40, c)] {
        lists
            .read_list
            .push(ReadSegment { position, segment })
            .unwrap();
    }
    let expected = HeaderRepr::new(0x1001, 128, Body::Msg(lists.clone()));
    check(&bytes, 28 + 3 * 24, &expected);

    let grouped: Vec<(u32, Vec<Segment>)> =
        lists.read_chunks().map(|(p, s)| (p, s.collect())).collect();
    assert_eq!(grouped, vec![(0x40, vec![b, c]), (0x80, vec![a])]);
    let totals: Vec<u64> = lists.read_chunks().map(|(_, s)| s.total_length()).collect();
    assert_eq!(totals, vec![3072, 4096]);
}

#[test]
fn rdma_msg_write_list_two_chunks() {
    let bytes = be(&[
        0x0000_2002, // rdma_xid
        0x0000_0001, // rdma_vers = 1
        0x0000_0010, // rdma_credit = 16
        0x0000_0000, // rdma_proc = RDMA_MSG
        0x0000_0000, // rdma_reads: list end
        // rdma_writes
        0x0000_0001, // chunk present
        0x0000_0002, //   segment count = 2
        0xaaaa_0001, //   [0] rdma_handle
        0x0001_0000, //   [0] rdma_length = 65536
        0x0000_7f00, //   [0] rdma_offset (high)
        0x0000_0000, //   [0] rdma_offset (low)
        0xaaaa_0002, //   [1] rdma_handle
        0x0000_8000, //   [1] rdma_length = 32768
        0x0000_7f00, //   [1] rdma_offset (high)
        0x0001_0000, //   [1] rdma_offset (low)
        0x0000_0001, // chunk present
        0x0000_0001, //   segment count = 1
        0xbbbb_0001, //   [0] rdma_handle
        0x0000_0200, //   [0] rdma_length = 512
        0xffff_ffff, //   [0] rdma_offset (high)
        0xffff_f000, //   [0] rdma_offset (low)
        0x0000_0000, // list end
        0x0000_0000, // rdma_reply: absent
    ]);
    let mut lists = ChunkLists::default();
    lists
        .write_list
        .push(chunk(&[
            seg(0xaaaa_0001, 65536, 0x7f00_0000_0000),
            seg(0xaaaa_0002, 32768, 0x7f00_0001_0000),
        ]))
        .unwrap();
    lists
        .write_list
        .push(chunk(&[seg(0xbbbb_0001, 512, 0xffff_ffff_ffff_f000)]))
        .unwrap();
    let expected = HeaderRepr::new(0x2002, 16, Body::Msg(lists));
    check(&bytes, bytes.len(), &expected);
    let view = Header::new_checked(&bytes[..]).unwrap();
    let totals: Vec<u64> = view.write_list().map(|c| c.total_length()).collect();
    assert_eq!(totals, vec![98304, 512]);
}

#[test]
fn rdma_nomsg_long_call() {
    // Long Call: the whole RPC call is in a Position Zero Read chunk; nothing follows inline.
    let bytes = be(&[
        0x0000_3003, // rdma_xid
        0x0000_0001, // rdma_vers = 1
        0x0000_0001, // rdma_credit = 1
        0x0000_0001, // rdma_proc = RDMA_NOMSG
        0x0000_0001, // rdma_reads: entry present
        0x0000_0000, //   rdma_position = 0
        0x0c0c_0c0c, //   rdma_handle
        0x0000_2400, //   rdma_length = 9216
        0x0000_0000, //   rdma_offset (high)
        0x0010_0000, //   rdma_offset (low)
        0x0000_0000, // list end
        0x0000_0000, // rdma_writes: list end
        0x0000_0000, // rdma_reply: absent
    ]);
    let mut lists = ChunkLists::default();
    lists
        .read_list
        .push(ReadSegment {
            position: 0,
            segment: seg(0x0c0c_0c0c, 9216, 0x10_0000),
        })
        .unwrap();
    let expected = HeaderRepr::new(0x3003, 1, Body::NoMsg(lists.clone()));
    check(&bytes, 52, &expected);
    let chunks: Vec<u32> = lists.read_chunks().map(|(p, _)| p).collect();
    assert_eq!(chunks, vec![0]);
}

#[test]
fn rdma_nomsg_long_reply() {
    // Long Reply: the responder RDMA-Wrote the whole reply into the requester's Reply chunk
    // and sends RDMA_NOMSG with that chunk (lengths = bytes written).
    let bytes = be(&[
        0x0000_4004, // rdma_xid
        0x0000_0001, // rdma_vers = 1
        0x0000_0040, // rdma_credit = 64
        0x0000_0001, // rdma_proc = RDMA_NOMSG
        0x0000_0000, // rdma_reads: list end
        0x0000_0000, // rdma_writes: list end
        0x0000_0001, // rdma_reply: present
        0x0000_0002, //   segment count = 2
        0x5555_0001, //   [0] rdma_handle
        0x0000_1000, //   [0] rdma_length = 4096
        0x0000_0000, //   [0] rdma_offset (high)
        0x0020_0000, //   [0] rdma_offset (low)
        0x5555_0002, //   [1] rdma_handle
        0x0000_0134, //   [1] rdma_length = 308
        0x0000_0000, //   [1] rdma_offset (high)
        0x0030_0000, //   [1] rdma_offset (low)
    ]);
    let lists = ChunkLists {
        reply_chunk: Some(chunk(&[
            seg(0x5555_0001, 4096, 0x20_0000),
            seg(0x5555_0002, 308, 0x30_0000),
        ])),
        ..ChunkLists::default()
    };
    let expected = HeaderRepr::new(0x4004, 64, Body::NoMsg(lists));
    check(&bytes, 64, &expected);
    let view = Header::new_checked(&bytes[..]).unwrap();
    let reply = view.reply_chunk().unwrap();
    assert_eq!(reply.len(), 2);
    assert_eq!(reply.total_length(), 4404);
    assert_eq!(reply.into_iter().count(), 2);
}

#[test]
fn rdma_error_err_vers() {
    let bytes = be(&[
        0x0000_5005, // rdma_xid
        0x0000_0001, // rdma_vers = 1
        0x0000_0001, // rdma_credit = 1
        0x0000_0004, // rdma_proc = RDMA_ERROR
        0x0000_0001, // rdma_err = ERR_VERS
        0x0000_0001, // rdma_vers_low = 1
        0x0000_0001, // rdma_vers_high = 1
    ]);
    let expected = HeaderRepr {
        xid: 0x5005,
        vers: 1,
        credit: 1,
        body: Body::Error(ErrorBody::Vers { low: 1, high: 1 }),
    };
    check(&bytes, 28, &expected);
    assert_eq!(HeaderRepr::vers_error(0x5005, 1), expected);
    assert_eq!(
        HeaderRepr::error_reply(0x5005, 1, ErrorCode::Vers),
        expected
    );
    assert_eq!(expected.proc_num(), RDMA_ERROR);
}

#[test]
fn rdma_error_err_chunk() {
    let bytes = be(&[
        0x0000_6006, // rdma_xid
        0x0000_0001, // rdma_vers = 1
        0x0000_0005, // rdma_credit = 5
        0x0000_0004, // rdma_proc = RDMA_ERROR
        0x0000_0002, // rdma_err = ERR_CHUNK
    ]);
    let expected = HeaderRepr::new(0x6006, 5, Body::Error(ErrorBody::Chunk));
    check(&bytes, 20, &expected);
    assert_eq!(HeaderRepr::chunk_error(0x6006, 5), expected);
}

#[test]
fn rdma_msg_every_list_at_once() {
    // One entry in each list, to pin the boundaries between them.
    let bytes = be(&[
        0x0000_7007, // rdma_xid
        0x0000_0001, // rdma_vers
        0x0000_0002, // rdma_credit
        0x0000_0000, // rdma_proc = RDMA_MSG
        0x0000_0001, // read entry present
        0x0000_0074, //   position = 116
        0x0000_00a1, //   handle
        0x0000_0010, //   length = 16
        0x0000_0000, //   offset high
        0x0000_0100, //   offset low
        0x0000_0000, // read list end
        0x0000_0001, // write chunk present
        0x0000_0001, //   count = 1
        0x0000_00b1, //   handle
        0x0000_0020, //   length = 32
        0x0000_0000, //   offset high
        0x0000_0200, //   offset low
        0x0000_0000, // write list end
        0x0000_0001, // reply chunk present
        0x0000_0001, //   count = 1
        0x0000_00c1, //   handle
        0x0000_0030, //   length = 48
        0x0000_0000, //   offset high
        0x0000_0300, //   offset low
    ]);
    let mut lists = ChunkLists::default();
    lists
        .read_list
        .push(ReadSegment {
            position: 116,
            segment: seg(0xa1, 16, 0x100),
        })
        .unwrap();
    lists
        .write_list
        .push(chunk(&[seg(0xb1, 32, 0x200)]))
        .unwrap();
    lists.reply_chunk = Some(chunk(&[seg(0xc1, 48, 0x300)]));
    check(&bytes, 96, &HeaderRepr::new(0x7007, 2, Body::Msg(lists)));
}

#[test]
fn proc_numbers_and_names() {
    assert_eq!((RDMA_MSG, RDMA_NOMSG, RDMA_ERROR), (0, 1, 4));
    assert_eq!(Proc::from(2), Proc::MsgP);
    assert_eq!(Proc::from(3), Proc::Done);
    assert_eq!(Proc::from(9), Proc::Unknown(9));
    assert_eq!(u32::from(Proc::Unknown(9)), 9);
    assert_eq!(Proc::Msg.to_string(), "RDMA_MSG");
    assert_eq!(Proc::Unknown(9).to_string(), "unknown(9)");
    assert!(!Proc::MsgP.is_supported() && Proc::NoMsg.is_supported());
    assert_eq!(ErrorCode::Vers.as_u32(), 1);
    assert_eq!(ErrorCode::from_u32(2), Some(ErrorCode::Chunk));
    assert_eq!(ErrorCode::from_u32(3), None);
}

#[test]
fn view_setters_patch_fixed_fields() {
    let mut bytes = be(&[7, 1, 3, 0, 0, 0, 0]);
    let mut view = Header::new_checked(&mut bytes[..]).unwrap();
    view.set_xid(0x0102_0304);
    view.set_credit(99);
    assert_eq!((view.xid(), view.credit()), (0x0102_0304, 99));
    assert_eq!(bytes, be(&[0x0102_0304, 1, 99, 0, 0, 0, 0]));
}

// ---- RFC 8797 private data ----

#[test]
fn cm_private_4096_with_send_with_invalidate() {
    #[rustfmt::skip]
    let bytes: [u8; 8] = [
        0xf6, 0xab, 0x0e, 0x18, // Format Identifier (magic)
        0x01,                   // Version = 1
        0x01,                   // flags: bit 0 = accepts Send With Invalidate
        0x03,                   // send size: (4096 >> 10) - 1 = 3
        0x03,                   // receive size: 3 => 4096
    ];
    let pd = CmPrivateData::parse(&bytes).unwrap();
    assert_eq!(
        pd,
        CmPrivateData {
            flags: CmFlags::REMOTE_INVALIDATE,
            send_size: 4096,
            recv_size: 4096
        }
    );
    assert!(pd.accepts_remote_invalidate());
    assert_eq!(pd.to_bytes(), bytes);
    assert_eq!(CmPrivateData::new(4096, 4096, true), pd);
    let mut out = [0u8; 12];
    assert_eq!(pd.emit(&mut out), Ok(8));
    assert_eq!(&out[..8], &bytes);
    assert_eq!(
        u32::from_be_bytes([0xf6, 0xab, 0x0e, 0x18]),
        CM_PRIVATE_MAGIC
    );
}

#[test]
fn cm_private_extremes_and_padding() {
    #[rustfmt::skip]
    let bytes: [u8; 12] = [
        0xf6, 0xab, 0x0e, 0x18, // magic
        0x01,                   // version 1
        0xfe,                   // flags: bit 0 clear, reserved bits set (ignored)
        0x00,                   // send size: 0 => 1024
        0xff,                   // receive size: 255 => 262144
        0x00, 0x00, 0x00, 0x00, // RDMA-CM padding, ignored
    ];
    let pd = CmPrivateData::parse(&bytes).unwrap();
    assert_eq!(pd.flags, CmFlags::empty());
    assert_eq!((pd.send_size, pd.recv_size), (1024, 256 * 1024));
    assert_eq!(
        pd.to_bytes(),
        [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x00, 0xff]
    );
}

#[test]
fn cm_private_absent_or_foreign_means_defaults() {
    let good = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03];
    for len in 0..8 {
        assert_eq!(CmPrivateData::parse(&good[..len]), None, "len {len}");
        assert_eq!(
            CmPrivateData::from_peer(&good[..len]),
            CmPrivateData::DEFAULT
        );
    }
    let bad_magic = [0xf6, 0xab, 0x0e, 0x19, 0x01, 0x01, 0x03, 0x03];
    let bad_version = [0xf6, 0xab, 0x0e, 0x18, 0x02, 0x01, 0x03, 0x03];
    let little_endian_magic = [0x18, 0x0e, 0xab, 0xf6, 0x01, 0x01, 0x03, 0x03];
    for b in [bad_magic, bad_version, little_endian_magic] {
        assert_eq!(CmPrivateData::from_peer(&b), CmPrivateData::DEFAULT);
    }
    assert_eq!(
        CmPrivateData::DEFAULT,
        CmPrivateData {
            flags: CmFlags::empty(),
            send_size: 1024,
            recv_size: 1024
        }
    );
}

#[test]
fn cm_private_size_encoding() {
    use krpc_rdma::wire::{decode_inline_size, encode_inline_size};
    assert_eq!(encode_inline_size(1024), 0);
    assert_eq!(encode_inline_size(4096), 3);
    assert_eq!(encode_inline_size(262_144), 255);
    assert_eq!(encode_inline_size(5000), 3); // rounds down to 4 KiB
    assert_eq!(encode_inline_size(0), 0); // clamps up to 1 KiB
    assert_eq!(encode_inline_size(1 << 20), 255); // clamps down to 256 KiB
    assert_eq!(decode_inline_size(0), 1024);
    assert_eq!(decode_inline_size(3), 4096);
    assert_eq!(decode_inline_size(255), 262_144);
}

#[test]
fn cm_private_negotiation() {
    // We offer 4096/4096 and accept SWI; a Linux-like peer offers 4096 send / 8192 recv + SWI.
    let ours = CmPrivateData::new(4096, 4096, true);
    let peer = CmPrivateData::new(4096, 8192, true);
    assert_eq!(
        negotiate(&ours, &peer),
        InlineThresholds {
            send: 4096,
            recv: 4096,
            send_with_invalidate: true
        }
    );
    // Asymmetric: our send is capped by the peer's receive, our receive by the peer's send.
    let ours = CmPrivateData::new(16384, 8192, false);
    let peer = CmPrivateData::new(2048, 4096, false);
    assert_eq!(
        negotiate(&ours, &peer),
        InlineThresholds {
            send: 4096,
            recv: 2048,
            send_with_invalidate: false
        }
    );
    // A peer without private data: the 1024/1024 defaults, no remote invalidation.
    let peer = CmPrivateData::from_peer(&[]);
    assert_eq!(
        negotiate(&CmPrivateData::new(4096, 4096, true), &peer),
        InlineThresholds::default()
    );
    assert_eq!(
        InlineThresholds::default(),
        InlineThresholds {
            send: 1024,
            recv: 1024,
            send_with_invalidate: false
        }
    );
}
