//! RFC 8267 eligibility tables and Macklem-layout chains (`nfs_proto::ddp`, `nfs_proto::chain`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::sync::Arc;

use mbuf::testing::{arena, pattern};
use mbuf::{Chain, Fragment, Mbuf, MbufError, PageFragment, PageProvider};
use nfs_proto::chain::{
    copy_range, data_pages_from_bytes, ddp_call, ddp_data, ddp_reply, write_data,
    write_data_iovecs, ChainError, DdpData, WriteData,
};
use nfs_proto::ddp::{
    self, ddp_item, nfs2_ddp_item, nfs2_reply_hint, nfs3_ddp_item, nfs3_reply_hint,
    nfs4_op_ddp_item, nfs4_op_reply_hint, reply_hint, Direction, ReplyHint, NF4LNK,
};
use proptest::prelude::*;

/// `prefix` (XDR words) followed by the length word of `data_len`.
fn head_for(prefix_words: usize, data_len: usize) -> Vec<u8> {
    let mut h = pattern(0x5a, prefix_words * 4);
    h.extend_from_slice(&(data_len as u32).to_be_bytes());
    h
}

fn page_frags(c: &Chain) -> Vec<PageFragment> {
    c.fragments()
        .map(|f| match f {
            Fragment::Page { addr, offset, len } => PageFragment { addr, offset, len },
            Fragment::Bytes(_) => panic!("not page data"),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Eligibility table
// ---------------------------------------------------------------------------------------

#[test]
fn nfs3_every_procedure_classified() {
    let mut eligible = Vec::new();
    for p in 0..=21u32 {
        if let Some(item) = nfs3_ddp_item(p) {
            eligible.push((p, item.direction));
        }
        assert_eq!(ddp_item(ddp::NFS_PROGRAM, 3, p), nfs3_ddp_item(p));
    }
    // READLINK 5, READ 6 (reply, write chunk); WRITE 7, SYMLINK 10 (call, read chunk).
    assert_eq!(
        eligible,
        [
            (5, Direction::Reply),
            (6, Direction::Reply),
            (7, Direction::Call),
            (10, Direction::Call)
        ]
    );
    assert_eq!(nfs3_ddp_item(22), None);
    assert_eq!(nfs3_ddp_item(u32::MAX), None);
    // The table and the lookup agree.
    for e in &ddp::NFS3_DDP {
        assert_eq!(nfs3_ddp_item(e.number), Some(e.item));
        assert!(e.number <= ddp::nfs3_proc::LAST);
    }
}

#[test]
fn nfs2_every_procedure_classified() {
    let eligible: Vec<_> = (0..=ddp::nfs2_proc::LAST)
        .filter_map(|p| nfs2_ddp_item(p).map(|i| (p, i.direction)))
        .collect();
    // READLINK 5, READ 6 (reply); WRITE 8, SYMLINK 13 (call).
    assert_eq!(
        eligible,
        [
            (5, Direction::Reply),
            (6, Direction::Reply),
            (8, Direction::Call),
            (13, Direction::Call)
        ]
    );
    assert_eq!(ddp_item(ddp::NFS_PROGRAM, 2, 8), nfs2_ddp_item(8));
}

#[test]
fn nfs4_operations() {
    let eligible: Vec<_> = (0..=75u32)
        .filter_map(|op| nfs4_op_ddp_item(op, Some(NF4LNK)).map(|i| (op, i.direction)))
        .collect();
    // CREATE 6 (NF4LNK), WRITE 38: call; READ 25, READLINK 27: reply.
    assert_eq!(
        eligible,
        [
            (6, Direction::Call),
            (25, Direction::Reply),
            (27, Direction::Reply),
            (38, Direction::Call)
        ]
    );
    // CREATE of anything but a symlink, or of an unknown type, is not eligible.
    for t in [1, 2, 3, 4, 6, 7, 8, 9] {
        assert_eq!(nfs4_op_ddp_item(ddp::nfs4_op::CREATE, Some(t)), None);
    }
    assert_eq!(nfs4_op_ddp_item(ddp::nfs4_op::CREATE, None), None);
    // The other operations ignore the create type.
    assert!(nfs4_op_ddp_item(ddp::nfs4_op::READ, None).is_some());
    assert!(nfs4_op_ddp_item(ddp::nfs4_op::WRITE, Some(1)).is_some());
    // READ_PLUS is not eligible.
    assert_eq!(nfs4_op_ddp_item(ddp::nfs4_op::READ_PLUS, None), None);
    // Per-procedure lookup does not classify NFSv4 or the auxiliary programs.
    for p in 0..=21 {
        assert_eq!(ddp_item(ddp::NFS_PROGRAM, 4, p), None);
        assert_eq!(ddp_item(ddp::MOUNT_PROGRAM, 3, p), None);
        assert_eq!(ddp_item(ddp::NFSACL_PROGRAM, 3, p), None);
    }
    for e in &ddp::NFS4_DDP {
        assert_eq!(nfs4_op_ddp_item(e.number, Some(NF4LNK)), Some(e.item));
    }
}

#[test]
fn reply_hints() {
    for p in 0..=21u32 {
        let want = match p {
            5 | 6 => ReplyHint::WriteChunk,
            16 | 17 => ReplyHint::ReplyChunk,
            _ => ReplyHint::Inline,
        };
        assert_eq!(nfs3_reply_hint(p), want, "NFSv3 proc {p}");
        assert_eq!(reply_hint(ddp::NFS_PROGRAM, 3, p), Some(want));
        // A WriteChunk hint is exactly a DDP-eligible reply item.
        assert_eq!(
            want == ReplyHint::WriteChunk,
            nfs3_ddp_item(p).is_some_and(|i| i.direction == Direction::Reply)
        );
    }
    assert_eq!(nfs2_reply_hint(6), ReplyHint::WriteChunk);
    assert_eq!(nfs2_reply_hint(16), ReplyHint::ReplyChunk);
    assert_eq!(nfs2_reply_hint(8), ReplyHint::Inline);
    assert_eq!(nfs4_op_reply_hint(25), ReplyHint::WriteChunk);
    assert_eq!(nfs4_op_reply_hint(27), ReplyHint::WriteChunk);
    assert_eq!(nfs4_op_reply_hint(26), ReplyHint::ReplyChunk);
    assert_eq!(nfs4_op_reply_hint(9), ReplyHint::ReplyChunk);
    assert_eq!(nfs4_op_reply_hint(68), ReplyHint::ReplyChunk);
    assert_eq!(nfs4_op_reply_hint(38), ReplyHint::Inline);
    assert_eq!(nfs4_op_reply_hint(22), ReplyHint::Inline);
    assert_eq!(
        reply_hint(ddp::NFSACL_PROGRAM, 3, ddp::NFSACL_GETACL),
        Some(ReplyHint::ReplyChunk)
    );
    assert_eq!(
        reply_hint(ddp::NFSACL_PROGRAM, 3, 2),
        Some(ReplyHint::Inline)
    );
    assert_eq!(
        reply_hint(ddp::MOUNT_PROGRAM, 3, ddp::MOUNT_EXPORT),
        Some(ReplyHint::ReplyChunk)
    );
    assert_eq!(
        reply_hint(ddp::MOUNT_PROGRAM, 3, 1),
        Some(ReplyHint::Inline)
    );
    assert_eq!(reply_hint(ddp::NFS_PROGRAM, 4, 1), None);
    assert_eq!(reply_hint(12345, 1, 0), None);
}

// ---------------------------------------------------------------------------------------
// Chains
// ---------------------------------------------------------------------------------------

/// Build a DDP call of `data_len` bytes and check the layout; returns nothing, asserts.
fn check_call(p: &Arc<dyn PageProvider>, prefix_words: usize, data_len: usize, tail: &[u8]) {
    let head = head_for(prefix_words, data_len);
    let bytes = pattern(data_len as u8, data_len);
    let data = data_pages_from_bytes(p, &bytes).unwrap();
    assert_eq!(data.len(), data_len);
    let src = page_frags(&data);

    let call = ddp_call(&head, data, tail).unwrap();
    call.check_invariants().unwrap();

    // Exactly one region: right after the head, exactly the data (pad not included).
    let regions: Vec<_> = call.ddp_regions().collect();
    assert_eq!(regions.len(), 1);
    assert_eq!(regions[0].offset, head.len());
    assert_eq!(regions[0].len, data_len);

    // Bytes: head + data + zero pad + tail.
    let pad = (4 - data_len % 4) % 4;
    let mut want = head.clone();
    want.extend_from_slice(&bytes);
    want.extend(std::iter::repeat_n(0u8, pad));
    want.extend_from_slice(tail);
    assert_eq!(call.len(), want.len());
    let mut got = vec![0u8; call.len()];
    call.copydata(0, &mut got).unwrap();
    assert_eq!(got, want);

    // The receiver finds it by the marker, checked against the length word.
    assert_eq!(
        ddp_data(&call).unwrap(),
        [DdpData {
            marker_index: regions[0].marker_index,
            offset: head.len(),
            len: data_len,
        }]
    );
    assert_eq!(
        ddp_data(&call).unwrap()[0].end_with_pad(),
        head.len() + data_len + pad
    );

    // Zero-copy pieces: the very pages of the source chain.
    let pieces = write_data_iovecs(&call, head.len(), data_len).unwrap();
    assert_eq!(pieces, src);
    assert_eq!(pieces.iter().map(|f| f.len).sum::<usize>(), data_len);

    // Any range that includes XDR bytes is refused.
    if data_len > 0 {
        assert_eq!(
            write_data_iovecs(&call, head.len() - 1, data_len),
            Err(ChainError::NotPageData {
                off: head.len() - 1,
                len: data_len
            })
        );
    }
    if pad > 0 || !tail.is_empty() {
        assert!(matches!(
            write_data_iovecs(&call, head.len(), data_len + 1),
            Err(ChainError::NotPageData { .. })
        ));
    }
    // Out of range.
    assert!(matches!(
        write_data_iovecs(&call, head.len(), call.len()),
        Err(ChainError::Mbuf(MbufError::OutOfRange { .. }))
    ));
}

#[test]
fn ddp_call_layout_sizes() {
    let (a, p) = arena(512);
    for len in [0, 1, 3, 4, 4095, 4096, 4097, (1 << 20) + 3] {
        check_call(&p, 7, len, &[]);
        check_call(&p, 1, len, &[0xee; 8]);
        assert_eq!(a.in_use(), 0, "pages leaked at {len}");
    }
    assert_eq!(a.bad_unrefs(), 0);
}

#[test]
fn ddp_reply_layout() {
    let (a, p) = arena(8);
    // NFSv3 READ3resok-ish head: 3 words, then the count.
    let data = data_pages_from_bytes(&p, b"hello, world").unwrap();
    let head = head_for(3, 12);
    let reply = ddp_reply(&head, data, &[]).unwrap();
    let r: Vec<_> = reply.ddp_regions().collect();
    assert_eq!((r.len(), r[0].offset, r[0].len), (1, 16, 12));
    assert_eq!(&reply.to_vec().unwrap()[16..], b"hello, world");
    drop(reply);
    assert_eq!(a.in_use(), 0);
}

#[test]
fn data_shared_by_copym_is_not_copied() {
    let (a, p) = arena(64);
    // A "file" of 5 pages; write bytes 1000..1000+9000 of it without copying.
    let file_bytes = pattern(3, 5 * 4096);
    let file = data_pages_from_bytes(&p, &file_bytes).unwrap();
    let (off, len) = (1000, 9000);
    let data = file.copym(off, len).unwrap();
    let want_frags: Vec<_> = file.page_fragments_in(off..off + len).unwrap().collect();
    let head = head_for(10, len);
    let call = ddp_call(&head, data, &[]).unwrap();
    let pieces = write_data_iovecs(&call, head.len(), len).unwrap();
    assert_eq!(pieces, want_frags);
    assert_eq!(pieces[0].offset, 1000);
    assert_eq!(
        copy_range(&call, head.len(), len).unwrap(),
        &file_bytes[off..off + len]
    );
    drop(call);
    drop(file);
    assert_eq!(a.in_use(), 0);
}

#[test]
fn non_page_data_rejected() {
    let (a, p) = arena(8);
    // Plain bytes.
    let data = Chain::from_bytes(b"abcd").unwrap();
    assert_eq!(
        ddp_call(&head_for(2, 4), data, &[]).unwrap_err(),
        ChainError::NotPageMbuf { index: 0 }
    );
    // Pages followed by an internal mbuf.
    let mut data = data_pages_from_bytes(&p, &[1; 100]).unwrap();
    data.append_mbuf(Mbuf::internal(b"xyz").unwrap()).unwrap();
    assert_eq!(
        ddp_call(&head_for(2, 103), data, &[]).unwrap_err(),
        ChainError::NotPageMbuf { index: 1 }
    );
    // A marker inside the data.
    let mut data = data_pages_from_bytes(&p, &[1; 100]).unwrap();
    data.append_mbuf(Mbuf::ddp_marker()).unwrap();
    assert_eq!(
        ddp_reply(&head_for(2, 100), data, &[]).unwrap_err(),
        ChainError::NotPageMbuf { index: 1 }
    );
    // A page mbuf with inline header bytes.
    let mut data = data_pages_from_bytes(&p, &[1; 100]).unwrap();
    data.mbufs_mut().next().unwrap().set_epg_hdr(b"hd").unwrap();
    assert_eq!(
        ddp_call(&head_for(2, 102), data, &[]).unwrap_err(),
        ChainError::NotPageMbuf { index: 0 }
    );
    // Nothing leaked by the refusals.
    assert_eq!(a.in_use(), 0);
}

#[test]
fn head_and_tail_checked() {
    let (a, p) = arena(8);
    let mk = |n| data_pages_from_bytes(&p, &vec![7u8; n]).unwrap();
    // Head not a multiple of 4.
    let mut head = head_for(1, 5);
    head.insert(0, 0);
    assert_eq!(
        ddp_call(&head, mk(5), &[]).unwrap_err(),
        ChainError::Unaligned {
            what: "head",
            len: 9
        }
    );
    // Tail not a multiple of 4.
    assert_eq!(
        ddp_call(&head_for(1, 5), mk(5), &[1, 2]).unwrap_err(),
        ChainError::Unaligned {
            what: "tail",
            len: 2
        }
    );
    // Wrong or missing length word.
    assert_eq!(
        ddp_call(&head_for(1, 6), mk(5), &[]).unwrap_err(),
        ChainError::LengthWord {
            found: Some(6),
            data_len: 5
        }
    );
    assert_eq!(
        ddp_call(&[], mk(5), &[]).unwrap_err(),
        ChainError::LengthWord {
            found: None,
            data_len: 5
        }
    );
    assert_eq!(a.in_use(), 0);
    // Display works for every kind.
    for e in [
        ChainError::NotPageMbuf { index: 1 },
        ChainError::Unaligned {
            what: "head",
            len: 3,
        },
        ChainError::LengthWord {
            found: None,
            data_len: 1,
        },
        ChainError::TooLong { len: 1 << 33 },
        ChainError::LengthMismatch {
            offset: 8,
            xdr_len: 3,
            region_len: 4,
        },
        ChainError::NotPageData { off: 0, len: 1 },
        ChainError::Alloc,
        ChainError::Mbuf(MbufError::ReadOnly),
    ] {
        assert!(!e.to_string().is_empty());
    }
    assert_eq!(ChainError::from(MbufError::Alloc), ChainError::Alloc);
}

#[test]
fn page_exhaustion_is_an_error() {
    let (a, p) = arena(2);
    assert_eq!(
        data_pages_from_bytes(&p, &[0; 3 * 4096]).unwrap_err(),
        ChainError::Alloc
    );
    assert_eq!(a.in_use(), 0);
}

#[test]
fn received_shapes() {
    let (a, p) = arena(8);
    // As the responder hands up a WRITE: [XDR][marker][pages][pad][XDR].
    let head = head_for(5, 10);
    let call = ddp_call(&head, data_pages_from_bytes(&p, &[9; 10]).unwrap(), &[]).unwrap();
    let d = ddp_data(&call).unwrap();
    assert_eq!(d.len(), 1);
    assert!(matches!(
        write_data(&call, d[0].offset, d[0].len).unwrap(),
        WriteData::Pages(v) if v.len() == 1 && v[0].len == 10
    ));

    // A length word that disagrees with the region (peer sent a short read chunk).
    let mut bad = Chain::from_bytes(&head_for(1, 11)).unwrap();
    bad.append_mbuf(Mbuf::ddp_marker()).unwrap();
    bad.cat(data_pages_from_bytes(&p, &[9; 10]).unwrap())
        .unwrap();
    assert_eq!(
        ddp_data(&bad).unwrap_err(),
        ChainError::LengthMismatch {
            offset: 8,
            xdr_len: 11,
            region_len: 10
        }
    );
    drop(bad);
    // A read chunk that carried the item's XDR pad (RFC 8166 §3.4.5.2): the region is 12
    // bytes for a 10-byte item; the item is its first 10, the next XDR item starts after 12.
    let mut padded = Chain::from_bytes(&head_for(1, 10)).unwrap();
    padded.append_mbuf(Mbuf::ddp_marker()).unwrap();
    padded
        .cat(data_pages_from_bytes(&p, &[9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 0, 0]).unwrap())
        .unwrap();
    let d = ddp_data(&padded).unwrap();
    assert_eq!((d[0].offset, d[0].len, d[0].end_with_pad()), (8, 10, 20));
    assert!(matches!(
        write_data(&padded, d[0].offset, d[0].len).unwrap(),
        WriteData::Pages(v) if v.iter().map(|f| f.len).sum::<usize>() == 10
    ));
    drop(padded);
    // A marker with no length word in front of it.
    let mut bad = Chain::from_mbuf(Mbuf::ddp_marker()).unwrap();
    bad.cat(data_pages_from_bytes(&p, &[9; 4]).unwrap())
        .unwrap();
    assert!(matches!(
        ddp_data(&bad).unwrap_err(),
        ChainError::LengthWord { found: None, .. }
    ));
    drop(bad);
    // A marker at an unaligned position.
    let mut bad = Chain::from_bytes(&[0, 0, 0, 0, 0, 0]).unwrap();
    bad.append_mbuf(Mbuf::ddp_marker()).unwrap();
    assert!(matches!(
        ddp_data(&bad).unwrap_err(),
        ChainError::Unaligned { len: 6, .. }
    ));

    // A small WRITE that came inline: no marker, data in XDR mbufs ⇒ copied.
    let mut inline = head_for(5, 6);
    inline.extend_from_slice(b"inline\0\0");
    let inline = Chain::from_bytes(&inline).unwrap();
    assert_eq!(ddp_data(&inline).unwrap(), []);
    assert_eq!(
        write_data(&inline, 24, 6).unwrap(),
        WriteData::Copied(b"inline".to_vec())
    );
    assert!(matches!(
        write_data(&inline, 24, 100),
        Err(ChainError::Mbuf(MbufError::OutOfRange { .. }))
    ));
    drop((call, inline));
    assert_eq!(a.in_use(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn layout_holds(
        prefix_words in 0usize..80,
        data_len in 0usize..(3 * 16 * 4096 + 9),
        tail_words in 0usize..40,
        file_off in 0usize..4096,
        shared in any::<bool>(),
    ) {
        let (a, p) = arena(200);
        let head = head_for(prefix_words, data_len);
        let tail = pattern(0x77, tail_words * 4);
        let file_bytes = pattern(data_len as u8, file_off + data_len);
        // Data either copied into fresh pages, or shared (copym) out of a larger page chain
        // at an unaligned offset.
        let file = data_pages_from_bytes(&p, &file_bytes).unwrap();
        let data = if shared {
            file.copym(file_off, data_len).unwrap()
        } else {
            data_pages_from_bytes(&p, &file_bytes[file_off..]).unwrap()
        };
        let src = page_frags(&data);
        let call = ddp_call(&head, data, &tail).unwrap();
        call.check_invariants().unwrap();

        let regions: Vec<_> = call.ddp_regions().collect();
        prop_assert_eq!(regions.len(), 1);
        prop_assert_eq!(regions[0].offset, head.len());
        prop_assert_eq!(regions[0].len, data_len);

        let pad = (4 - data_len % 4) % 4;
        let mut want = head.clone();
        want.extend_from_slice(&file_bytes[file_off..]);
        want.extend(std::iter::repeat_n(0u8, pad));
        want.extend_from_slice(&tail);
        prop_assert_eq!(call.to_vec().unwrap(), want);

        let d = ddp_data(&call).unwrap();
        prop_assert_eq!(d.len(), 1);
        prop_assert_eq!((d[0].offset, d[0].len), (head.len(), data_len));
        let pieces = write_data_iovecs(&call, d[0].offset, d[0].len).unwrap();
        prop_assert_eq!(&pieces, &src);
        if shared {
            let f: Vec<_> = file.page_fragments_in(file_off..file_off + data_len).unwrap().collect();
            prop_assert_eq!(&pieces, &f);
        }
        if data_len > 0 {
            let r = write_data_iovecs(&call, head.len() - 4, data_len);
            prop_assert!(matches!(r, Err(ChainError::NotPageData { .. })), "{:?}", r);
        }
        drop(call);
        drop(file);
        prop_assert_eq!(a.in_use(), 0);
    }
}
