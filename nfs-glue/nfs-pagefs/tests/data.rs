//! File data: adoption of received pages, copies, copy-on-write, size changes, holes, EOF,
//! hostile numbers, capacity, page accounting.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use std::sync::Arc;

use common::*;
use mbuf::testing::pattern;
use mbuf::{HeapPageArena, PageProvider, PAGE_SIZE};
use nfs_proto::nfs3::{Sattr3, StableHow};
use nfs_service::nfsd::{Backend, NfsError, WriteIov};

fn size(m: u64) -> Sattr3 {
    Sattr3 {
        size: Some(m),
        ..Sattr3::default()
    }
}

#[test]
fn full_block_write_from_pages_is_adopted_and_read_back_as_the_same_pages() {
    let r = rig();
    let f = create(&r.fs, &root(), &r.fs.root_fh(), b"f");
    let data = pattern(1, 3 * PAGE_SIZE);
    let slices = received(&r.p, 0, &data);
    let w = write_pages(&r.fs, &root(), &f, 4096, &r.p, &slices).unwrap();
    assert_eq!(w.count, 3 * 4096);
    assert_eq!(w.committed, StableHow::FileSync);
    let s = r.fs.stats();
    assert_eq!(s.write_bytes_adopted, 3 * 4096);
    assert_eq!(s.write_bytes_copied, 0);
    assert_eq!(s.pages_held, 3);
    // The file holds the received pages: one reference by the call, one by the file.
    for sl in &slices {
        assert_eq!(r.arena.refcount(sl.addr), Some(2));
    }
    unref_all(&r.p, &slices);
    let d = r.fs.read(&root(), &f, 4096, 3 * 4096, &r.p).unwrap();
    assert!(d.eof);
    let addrs: Vec<u64> = slices.iter().map(|s| s.addr).collect();
    assert_eq!(page_addrs(&d.data), addrs);
    assert_eq!(d.data.to_vec().unwrap(), data);
    assert_eq!(
        d.data.mbuf_count(),
        1,
        "contiguous file pages share one mbuf"
    );
    assert_eq!(r.fs.stats().read_bytes_shared, 3 * 4096);
    // The hole before them reads as zeros.
    let (z, eof) = read(&r, &root(), &f, 0, 4096).unwrap();
    assert_eq!(z, vec![0; 4096]);
    assert!(!eof);
    assert_eq!(r.fs.stats().zero_fill_bytes, 4096);
}

#[test]
fn misaligned_partial_inline_and_foreign_writes_are_copied_byte_exact() {
    let r = rig();
    let f = create(&r.fs, &root(), &r.fs.root_fh(), b"f");
    let mut model = Vec::new();
    let put = |model: &mut Vec<u8>, off: usize, b: &[u8]| {
        if model.len() < off + b.len() {
            model.resize(off + b.len(), 0);
        }
        model[off..off + b.len()].copy_from_slice(b);
    };
    // Pages at an in-page offset: nothing is one whole page at offset 0.
    let a = pattern(2, 2 * PAGE_SIZE);
    let sl = received(&r.p, 100, &a);
    write_pages(&r.fs, &root(), &f, 0, &r.p, &sl).unwrap();
    unref_all(&r.p, &sl);
    put(&mut model, 0, &a);
    // Whole pages but at a file offset that is not block aligned.
    let b = pattern(3, 2 * PAGE_SIZE);
    let sl = received(&r.p, 0, &b);
    write_pages(&r.fs, &root(), &f, 5000, &r.p, &sl).unwrap();
    unref_all(&r.p, &sl);
    put(&mut model, 5000, &b);
    // Inline bytes.
    let c = pattern(4, 777);
    write_bytes(&r.fs, &root(), &f, 3, &c).unwrap();
    put(&mut model, 3, &c);
    // Whole aligned pages of another provider.
    let other: Arc<dyn PageProvider> = Arc::new(HeapPageArena::with_base(8, 1 << 40).unwrap());
    let d = pattern(5, PAGE_SIZE);
    let sl = received(&other, 0, &d);
    write_pages(&r.fs, &root(), &f, 3 * 4096, &other, &sl).unwrap();
    unref_all(&other, &sl);
    put(&mut model, 3 * 4096, &d);
    let s = r.fs.stats();
    assert_eq!(s.write_bytes_adopted, 0);
    assert_eq!(
        s.write_bytes_copied,
        (a.len() + b.len() + c.len() + d.len()) as u64
    );
    let (got, eof) = read(&r, &root(), &f, 0, 1 << 20).unwrap();
    assert!(eof);
    assert_eq!(got, model);
    // A READ from an odd offset spanning blocks.
    let (got, _) = read(&r, &root(), &f, 4095, 4098).unwrap();
    assert_eq!(got, model[4095..4095 + 4098]);
}

#[test]
fn mixed_write_adopts_the_whole_blocks_and_copies_the_edges() {
    let r = rig();
    let f = create(&r.fs, &root(), &r.fs.root_fh(), b"f");
    // File bytes 4000..4000+96+2*4096+10: a 96-byte tail of block 0, blocks 1 and 2 as whole
    // pages, 10 bytes of block 3.
    let head = pattern(6, 96);
    let mid = pattern(7, 2 * PAGE_SIZE);
    let tail = pattern(8, 10);
    let mut sl = received(&r.p, PAGE_SIZE - 96, &head);
    sl.extend(received(&r.p, 0, &mid));
    sl.extend(received(&r.p, 0, &tail));
    write_pages(&r.fs, &root(), &f, 4000, &r.p, &sl).unwrap();
    let s = r.fs.stats();
    assert_eq!(s.write_bytes_adopted, 2 * 4096);
    assert_eq!(s.write_bytes_copied, 106);
    let d = r.fs.read(&root(), &f, 4096, 8192, &r.p).unwrap();
    assert_eq!(page_addrs(&d.data), vec![sl[1].addr, sl[2].addr]);
    unref_all(&r.p, &sl);
    let (got, _) = read(&r, &root(), &f, 0, 1 << 20).unwrap();
    let mut want = vec![0; 4000];
    want.extend(&head);
    want.extend(&mid);
    want.extend(&tail);
    assert_eq!(got, want);
}

#[test]
fn overwrite_does_not_change_an_outstanding_read_chain() {
    let r = rig();
    let f = create(&r.fs, &root(), &r.fs.root_fh(), b"f");
    let a = pattern(9, 2 * PAGE_SIZE);
    let sl = received(&r.p, 0, &a);
    write_pages(&r.fs, &root(), &f, 0, &r.p, &sl).unwrap();
    let held = r.fs.read(&root(), &f, 0, 8192, &r.p).unwrap();
    // Partial overwrite (copied), full-page overwrite (adopted), truncation.
    write_bytes(&r.fs, &root(), &f, 10, b"XXXXXXXXXX").unwrap();
    let sl2 = received(&r.p, 0, &[0x77; PAGE_SIZE]);
    write_pages(&r.fs, &root(), &f, 4096, &r.p, &sl2).unwrap();
    // The received pages of the first call are not written either.
    let mut page = vec![0; PAGE_SIZE];
    r.p.read_page(sl[0].addr, 0, &mut page).unwrap();
    assert_eq!(page, a[..PAGE_SIZE]);
    r.fs.setattr(&root(), &f, &size(5), None).unwrap();
    assert_eq!(held.data.to_vec().unwrap(), a);
    let (now, _) = read(&r, &root(), &f, 0, 100).unwrap();
    assert_eq!(now, a[..5]);
    unref_all(&r.p, &sl);
    unref_all(&r.p, &sl2);
}

#[test]
fn growth_after_shrink_reads_zeros_not_stale_bytes() {
    let r = rig();
    let f = create(&r.fs, &root(), &r.fs.root_fh(), b"f");
    let aa = vec![0xAA; PAGE_SIZE];
    write_bytes(&r.fs, &root(), &f, 0, &aa[..10]).unwrap();
    r.fs.setattr(&root(), &f, &size(5), None).unwrap();
    r.fs.setattr(&root(), &f, &size(4096), None).unwrap();
    let (got, eof) = read(&r, &root(), &f, 0, 4096).unwrap();
    assert!(eof);
    assert_eq!(&got[..5], &aa[..5]);
    assert_eq!(got[5..], vec![0; 4091]);

    // The same by a WRITE past the end, in the same block and in a later one.
    let g = create(&r.fs, &root(), &r.fs.root_fh(), b"g");
    write_bytes(&r.fs, &root(), &g, 0, &aa).unwrap();
    r.fs.setattr(&root(), &g, &size(3), None).unwrap();
    write_bytes(&r.fs, &root(), &g, 100, b"z").unwrap();
    let (got, _) = read(&r, &root(), &g, 0, 200).unwrap();
    assert_eq!(got.len(), 101);
    assert_eq!(&got[..3], &aa[..3]);
    assert!(got[3..100].iter().all(|&b| b == 0), "{:?}", &got[3..100]);
    assert_eq!(got[100], b'z');
    let h = create(&r.fs, &root(), &r.fs.root_fh(), b"h");
    write_bytes(&r.fs, &root(), &h, 0, &aa).unwrap();
    r.fs.setattr(&root(), &h, &size(7), None).unwrap();
    write_bytes(&r.fs, &root(), &h, 3 * 4096, b"end").unwrap();
    let (got, _) = read(&r, &root(), &h, 0, 1 << 20).unwrap();
    assert_eq!(got.len(), 3 * 4096 + 3);
    assert_eq!(&got[..7], &aa[..7]);
    assert!(got[7..3 * 4096].iter().all(|&b| b == 0));
    assert!(r.fs.stats().zero_fill_bytes >= 4096 - 7);
}

#[test]
fn holes_read_as_zeros_and_sparse_files_hold_no_pages() {
    let r = rig();
    let f = create(&r.fs, &root(), &r.fs.root_fh(), b"f");
    r.fs.setattr(&root(), &f, &size(10 * 4096 + 5), None)
        .unwrap();
    assert_eq!(r.fs.stats().pages_held, 0);
    write_bytes(&r.fs, &root(), &f, 5 * 4096 + 1, b"mid").unwrap();
    assert_eq!(r.fs.stats().pages_held, 1);
    let (got, eof) = read(&r, &root(), &f, 0, 1 << 20).unwrap();
    assert!(eof);
    assert_eq!(got.len(), 10 * 4096 + 5);
    let mut want = vec![0; 10 * 4096 + 5];
    want[5 * 4096 + 1..5 * 4096 + 4].copy_from_slice(b"mid");
    assert_eq!(got, want);
    let a = r.fs.getattr(&root(), &f).unwrap();
    assert_eq!(a.size, 10 * 4096 + 5);
    assert_eq!(a.used, 4096);
}

#[test]
fn read_at_and_past_eof_is_short_with_eof() {
    let r = rig();
    let f = create(&r.fs, &root(), &r.fs.root_fh(), b"f");
    write_bytes(&r.fs, &root(), &f, 0, b"hello").unwrap();
    assert_eq!(
        read(&r, &root(), &f, 0, 100).unwrap(),
        (b"hello".to_vec(), true)
    );
    assert_eq!(
        read(&r, &root(), &f, 2, 3).unwrap(),
        (b"llo".to_vec(), true)
    );
    assert_eq!(
        read(&r, &root(), &f, 1, 2).unwrap(),
        (b"el".to_vec(), false)
    );
    assert_eq!(read(&r, &root(), &f, 5, 10).unwrap(), (vec![], true));
    assert_eq!(read(&r, &root(), &f, 6, 10).unwrap(), (vec![], true));
    assert_eq!(read(&r, &root(), &f, 1 << 50, 10).unwrap(), (vec![], true));
    assert_eq!(read(&r, &root(), &f, 0, 0).unwrap(), (vec![], false));
    let e = create(&r.fs, &root(), &r.fs.root_fh(), b"empty");
    assert_eq!(read(&r, &root(), &e, 0, 10).unwrap(), (vec![], true));
}

#[test]
fn huge_offsets_and_counts_are_errors_not_wraps() {
    let r = rig();
    let f = create(&r.fs, &root(), &r.fs.root_fh(), b"f");
    write_bytes(&r.fs, &root(), &f, 0, b"abc").unwrap();
    assert_eq!(
        write_bytes(&r.fs, &root(), &f, u64::MAX, b"x").unwrap_err(),
        NfsError::FBig
    );
    assert_eq!(
        write_bytes(&r.fs, &root(), &f, u64::MAX - 1, b"xyz").unwrap_err(),
        NfsError::FBig
    );
    assert_eq!(
        write_bytes(&r.fs, &root(), &f, nfs_pagefs::MAX_FILE_SIZE, b"x").unwrap_err(),
        NfsError::FBig
    );
    assert_eq!(
        r.fs.read(&root(), &f, u64::MAX, 10, &r.p).unwrap_err(),
        NfsError::Inval
    );
    assert_eq!(
        r.fs.read(&root(), &f, u64::MAX - 5, u32::MAX, &r.p)
            .unwrap_err(),
        NfsError::Inval
    );
    assert_eq!(
        r.fs.setattr(&root(), &f, &size(u64::MAX), None)
            .unwrap_err(),
        NfsError::FBig
    );
    // A sparse file at the limit is fine and holds nothing.
    write_bytes(&r.fs, &root(), &f, nfs_pagefs::MAX_FILE_SIZE - 1, b"x").unwrap();
    assert_eq!(
        r.fs.getattr(&root(), &f).unwrap().size,
        nfs_pagefs::MAX_FILE_SIZE
    );
    assert_eq!(r.fs.stats().pages_held, 2);
    // A READ of u32::MAX bytes is short (1 MiB at most).
    let d = r.fs.read(&root(), &f, 0, u32::MAX, &r.p).unwrap();
    assert_eq!(d.data.len(), 1 << 20);
    assert!(!d.eof);
    // A page slice list whose lengths overflow is refused, not summed with a wrap.
    let bad = [
        mbuf::PageFragment {
            addr: 0,
            offset: 0,
            len: usize::MAX,
        },
        mbuf::PageFragment {
            addr: 0,
            offset: 0,
            len: 2,
        },
    ];
    assert!(r
        .fs
        .write(
            &root(),
            &f,
            0,
            StableHow::Unstable,
            WriteIov::Pages {
                provider: &r.p,
                slices: &bad
            }
        )
        .is_err());
    assert_eq!(read(&r, &root(), &f, 0, 3).unwrap().0, b"abc");
}

#[test]
fn nospc_at_capacity_leaves_the_file_unchanged() {
    // Room for the root, one file and its entry, and 4 pages.
    let r = rig_with(64, 256 + 256 + 64 + 2 + 4 * 4096, 100);
    let f = create(&r.fs, &root(), &r.fs.root_fh(), b"f");
    let a = pattern(10, 3 * 4096 + 100);
    write_bytes(&r.fs, &root(), &f, 0, &a).unwrap();
    let before = r.fs.stats();
    assert_eq!(before.pages_held, 4);
    let in_use = r.arena.in_use();
    // Overwriting held blocks needs no room; a new block does.
    write_bytes(&r.fs, &root(), &f, 10, b"ok").unwrap();
    let mut want = a.clone();
    want[10..12].copy_from_slice(b"ok");
    let big = pattern(11, 2 * 4096);
    assert_eq!(
        write_bytes(&r.fs, &root(), &f, 3 * 4096, &big).unwrap_err(),
        NfsError::NoSpc
    );
    let sl = received(&r.p, 0, &big);
    assert_eq!(
        write_pages(&r.fs, &root(), &f, 4 * 4096, &r.p, &sl).unwrap_err(),
        NfsError::NoSpc
    );
    unref_all(&r.p, &sl);
    assert_eq!(read(&r, &root(), &f, 0, 1 << 20).unwrap().0, want);
    assert_eq!(r.fs.getattr(&root(), &f).unwrap().size, a.len() as u64);
    assert_eq!(r.fs.stats().pages_held, 4);
    assert_eq!(r.arena.in_use(), in_use);
    // No room for another node either.
    assert_eq!(
        r.fs.create(
            &root(),
            &r.fs.root_fh(),
            b"g",
            &nfs_proto::nfs3::Createhow3::Unchecked(Sattr3::default())
        )
        .unwrap_err(),
        NfsError::NoSpc
    );
    // Shrinking frees room.
    r.fs.setattr(&root(), &f, &size(0), None).unwrap();
    assert_eq!(r.fs.stats().pages_held, 0);
    write_bytes(&r.fs, &root(), &f, 0, &big).unwrap();
}

#[test]
fn node_limit_is_nospc() {
    let r = rig_with(16, 1 << 20, 3);
    create(&r.fs, &root(), &r.fs.root_fh(), b"a");
    create(&r.fs, &root(), &r.fs.root_fh(), b"b");
    let e =
        r.fs.mkdir(&root(), &r.fs.root_fh(), b"c", &Sattr3::default())
            .unwrap_err();
    assert_eq!(e, NfsError::NoSpc);
    assert_eq!(r.fs.stats().nodes, 3);
    let st = r.fs.fsstat(&root(), &r.fs.root_fh()).unwrap();
    assert_eq!((st.tfiles, st.ffiles), (3, 0));
    assert_eq!(st.tbytes, 1 << 20);
    assert_eq!(st.fbytes, (1 << 20) - r.fs.stats().bytes_used);
}

#[test]
fn page_provider_exhaustion_fails_cleanly() {
    // The arena has fewer pages than the capacity allows.
    let r = rig_with(3, 1 << 30, 100);
    let f = create(&r.fs, &root(), &r.fs.root_fh(), b"f");
    let e = write_bytes(&r.fs, &root(), &f, 0, &pattern(12, 5 * 4096)).unwrap_err();
    assert_eq!(e, NfsError::Jukebox);
    assert_eq!(r.arena.in_use(), 0);
    assert_eq!(r.fs.getattr(&root(), &f).unwrap().size, 0);
}

#[test]
fn commit_and_write_verifier_are_constant_per_instance() {
    let r = rig();
    let f = create(&r.fs, &root(), &r.fs.root_fh(), b"f");
    let w = write_bytes(&r.fs, &root(), &f, 0, b"x").unwrap();
    assert_eq!(w.committed, StableHow::FileSync);
    assert_eq!(r.fs.commit(&root(), &f, 0, 0).unwrap(), w.verf);
    let r2 = rig_with(4, 1 << 20, 10);
    let other = nfs_pagefs::PageFs::<nfs_service::lock::SpinLock<nfs_pagefs::FsState>>::new(
        r2.p.clone(),
        nfs_pagefs::PageFsConfig {
            instance: INSTANCE + 1,
            ..config(1 << 20, 10)
        },
    )
    .unwrap();
    assert_ne!(
        other.commit(&root(), &other.root_fh(), 0, 0).unwrap(),
        w.verf
    );
}

#[test]
fn pages_are_released_when_the_fs_and_its_chains_are_dropped() {
    let arena = Arc::new(HeapPageArena::new(512).unwrap());
    let p: Arc<dyn PageProvider> = Arc::new(Dirty(arena.clone()));
    let start = arena.in_use();
    let fs = Fs::new(p.clone(), config(64 << 20, 1000)).unwrap();
    let r = root();
    let f = create(&fs, &r, &fs.root_fh(), b"f");
    let g = create(&fs, &r, &fs.root_fh(), b"g");
    let sl = received(&p, 0, &pattern(13, 4 * PAGE_SIZE));
    write_pages(&fs, &r, &f, 0, &p, &sl).unwrap();
    write_pages(&fs, &r, &g, 4096, &p, &sl).unwrap();
    unref_all(&p, &sl);
    write_bytes(&fs, &r, &f, 100, &pattern(14, 9000)).unwrap();
    fs.setattr(&r, &g, &size(3 * 4096 + 1), None).unwrap();
    fs.setattr(&r, &g, &size(9 * 4096), None).unwrap();
    let c1 = fs.read(&r, &f, 0, 1 << 20, &p).unwrap();
    let c2 = fs.read(&r, &g, 0, 1 << 20, &p).unwrap();
    let d = fs
        .mkdir(&r, &fs.root_fh(), b"d", &Sattr3::default())
        .unwrap();
    let h = create(&fs, &r, &d, b"h");
    write_bytes(&fs, &r, &h, 0, &pattern(15, 5000)).unwrap();
    fs.link(&r, &h, &fs.root_fh(), b"h2").unwrap();
    fs.remove(&r, &d, b"h").unwrap();
    fs.remove(&r, &fs.root_fh(), b"f").unwrap();
    assert!(arena.in_use() > start);
    drop(fs);
    // The chains still hold their pages, with the right bytes.
    assert_eq!(c1.data.len(), 4 * 4096);
    assert!(arena.in_use() > start);
    drop(c1);
    drop(c2);
    assert_eq!(arena.in_use(), start);
    assert_eq!(arena.bad_unrefs(), 0);
}

#[test]
fn remove_frees_the_pages_of_the_last_link_only() {
    let r = rig();
    let f = create(&r.fs, &root(), &r.fs.root_fh(), b"f");
    write_bytes(&r.fs, &root(), &f, 0, &pattern(16, 3 * 4096)).unwrap();
    r.fs.link(&root(), &f, &r.fs.root_fh(), b"f2").unwrap();
    r.fs.remove(&root(), &r.fs.root_fh(), b"f").unwrap();
    assert_eq!(r.fs.stats().pages_held, 3);
    assert_eq!(read(&r, &root(), &f, 0, 10).unwrap().0, pattern(16, 10));
    r.fs.remove(&root(), &r.fs.root_fh(), b"f2").unwrap();
    assert_eq!(r.fs.stats().pages_held, 0);
    assert_eq!(r.arena.in_use(), 0);
    assert_eq!(r.fs.getattr(&root(), &f).unwrap_err(), NfsError::Stale);
    assert_eq!(r.fs.stats().nodes, 1);
}

mod model {
    //! Random WRITEs (inline, whole pages, misaligned pages), truncations and extensions
    //! against a byte-vector model, over a provider whose fresh pages are garbage.
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Bytes(u32, Vec<u8>),
        Pages(u32, usize, u16, u8),
        Size(u32),
        Read(u32, u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (
                0u32..40_000,
                proptest::collection::vec(any::<u8>(), 0..6000)
            )
                .prop_map(|(o, b)| Op::Bytes(o, b)),
            (0u32..10, 0usize..3, 1u16..12_000, any::<u8>())
                .prop_map(|(blk, k, n, seed)| Op::Pages(blk, [0, 1, 4095][k], n, seed)),
            (0u32..40_000).prop_map(Op::Size),
            (0u32..45_000, 0u32..20_000).prop_map(|(o, n)| Op::Read(o, n)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn matches_a_byte_vector(ops in proptest::collection::vec(op(), 1..24)) {
            let r = rig();
            let f = create(&r.fs, &root(), &r.fs.root_fh(), b"f");
            let mut model: Vec<u8> = Vec::new();
            let mut chains = Vec::new();
            for o in ops {
                match o {
                    Op::Bytes(off, b) => {
                        let off = off as usize;
                        let w = write_bytes(&r.fs, &root(), &f, off as u64, &b).unwrap();
                        prop_assert_eq!(w.count as usize, b.len());
                        if b.is_empty() {
                            continue;
                        }
                        if model.len() < off + b.len() {
                            model.resize(off + b.len(), 0);
                        }
                        model[off..off + b.len()].copy_from_slice(&b);
                    }
                    Op::Pages(blk, first_off, n, seed) => {
                        // Whole pages from a block boundary when first_off is 0 (adopted),
                        // else misaligned pieces.
                        let off = blk as usize * PAGE_SIZE + first_off;
                        let b = pattern(seed, n as usize);
                        let sl = received(&r.p, first_off, &b);
                        write_pages(&r.fs, &root(), &f, off as u64, &r.p, &sl).unwrap();
                        unref_all(&r.p, &sl);
                        if model.len() < off + b.len() {
                            model.resize(off + b.len(), 0);
                        }
                        model[off..off + b.len()].copy_from_slice(&b);
                    }
                    Op::Size(s) => {
                        r.fs.setattr(&root(), &f, &size(u64::from(s)), None).unwrap();
                        model.resize(s as usize, 0);
                    }
                    Op::Read(off, n) => {
                        // Held across later changes: must keep its bytes.
                        let d = r.fs.read(&root(), &f, u64::from(off), n, &r.p).unwrap();
                        let lo = (off as usize).min(model.len());
                        let hi = (off as usize + n as usize).min(model.len());
                        prop_assert_eq!(d.data.to_vec().unwrap(), model[lo..hi].to_vec());
                        prop_assert_eq!(d.eof, off as usize + n as usize >= model.len());
                        chains.push((d.data, model[lo..hi].to_vec()));
                    }
                }
                let (got, eof) = read(&r, &root(), &f, 0, 1 << 20).unwrap();
                prop_assert!(eof);
                prop_assert_eq!(&got, &model);
                prop_assert_eq!(r.fs.getattr(&root(), &f).unwrap().size, model.len() as u64);
            }
            for (c, want) in &chains {
                prop_assert_eq!(&c.to_vec().unwrap(), want);
            }
            let held = r.fs.stats().pages_held as usize;
            prop_assert!(held <= model.len().div_ceil(PAGE_SIZE));
            drop(chains);
            prop_assert_eq!(r.arena.in_use(), held);
            drop(r.fs);
            prop_assert_eq!(r.arena.in_use(), 0);
        }
    }
}
