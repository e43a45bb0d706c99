//! Unit tests: one or more per operation and per mbuf kind.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::testing::{arena, filled_pages, page_bytes, pattern};
use crate::*;

/// A page mbuf with freshly allocated, patterned pages; returns it with its expected bytes.
fn page_mbuf(
    p: &Arc<dyn PageProvider>,
    npgs: usize,
    first_off: usize,
    last_len: usize,
    seed: u8,
) -> (Mbuf, Vec<u8>) {
    let contents: Vec<Vec<u8>> = (0..npgs)
        .map(|i| pattern(seed.wrapping_add(i as u8 * 7), PAGE_SIZE))
        .collect();
    let addrs = filled_pages(&**p, &contents).unwrap();
    (
        Mbuf::pages(p.clone(), &addrs, first_off, last_len).unwrap(),
        page_bytes(&contents, first_off, last_len),
    )
}

/// Content through copydata, through fragments and through to_vec; all must agree.
fn content(c: &Chain) -> Vec<u8> {
    let v = c.to_vec().unwrap();
    let mut via_frags = Vec::new();
    for f in c.fragments() {
        match f {
            Fragment::Bytes(b) => via_frags.extend_from_slice(b),
            Fragment::Page { addr, offset, len } => {
                let prov = c
                    .mbufs()
                    .find_map(|m| m.provider().cloned())
                    .expect("page fragment without provider");
                prov.with_page(addr, &mut |pg| {
                    via_frags.extend_from_slice(&pg[offset..offset + len])
                })
                .unwrap();
            }
        }
    }
    assert_eq!(v, via_frags);
    let mut cd = alloc::vec![0u8; c.len()];
    c.copydata(0, &mut cd).unwrap();
    assert_eq!(v, cd);
    c.check_invariants().unwrap();
    v
}

/// `left` and `right`, the two halves of a split at `at`, hold `expect` before and after `at`.
fn assert_split(left: &Chain, right: &Chain, at: usize, expect: &[u8]) {
    assert_eq!(content(left), &expect[..at]);
    assert_eq!(content(right), &expect[at..]);
}

/// A page mbuf as [`page_mbuf`] makes it, with an `hdr` header and a `trl` trailer; with its
/// expected bytes.
fn framed_page_mbuf(
    p: &Arc<dyn PageProvider>,
    (npgs, first_off, last_len, seed): (usize, usize, usize, u8),
    hdr: &[u8],
    trl: &[u8],
) -> (Mbuf, Vec<u8>) {
    let (mut m, pages) = page_mbuf(p, npgs, first_off, last_len, seed);
    m.set_epg_hdr(hdr).unwrap();
    m.set_epg_trl(trl).unwrap();
    let mut expect = hdr.to_vec();
    expect.extend_from_slice(&pages);
    expect.extend_from_slice(trl);
    (m, expect)
}

fn kinds(c: &Chain) -> Vec<MbufKind> {
    c.mbufs().map(Mbuf::kind).collect()
}

/// A provider whose `page_ref` fails after a given number of successes.
struct RefBudget {
    inner: Arc<HeapPageArena>,
    left: AtomicUsize,
}

impl RefBudget {
    /// A fresh arena of `pages` pages behind a budget of `left` references: the arena, the
    /// wrapper (to change the budget) and the wrapper as a provider.
    fn over(
        pages: usize,
        left: usize,
    ) -> (Arc<HeapPageArena>, Arc<RefBudget>, Arc<dyn PageProvider>) {
        let inner = Arc::new(HeapPageArena::new(pages).unwrap());
        let f = Arc::new(RefBudget {
            inner: inner.clone(),
            left: AtomicUsize::new(left),
        });
        let p: Arc<dyn PageProvider> = f.clone();
        (inner, f, p)
    }

    /// From now on, `left` more references succeed (`0`: every one fails, `usize::MAX`: in
    /// effect none does).
    fn set(&self, left: usize) {
        self.left.store(left, Ordering::SeqCst);
    }
}

impl PageProvider for RefBudget {
    fn alloc_page(&self) -> Result<u64, AllocError> {
        self.inner.alloc_page()
    }
    fn page_ref(&self, addr: u64) -> Result<(), PageError> {
        let ok = self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if ok {
            self.inner.page_ref(addr)
        } else {
            Err(PageError::RefOverflow(addr))
        }
    }
    fn page_unref(&self, addr: u64) {
        self.inner.page_unref(addr)
    }
    fn with_page(&self, addr: u64, f: &mut dyn FnMut(&[u8])) -> Result<(), PageError> {
        self.inner.with_page(addr, f)
    }
    fn with_page_mut(&self, addr: u64, f: &mut dyn FnMut(&mut [u8])) -> Result<(), PageError> {
        self.inner.with_page_mut(addr, f)
    }
}

// ---------------------------------------------------------------- constructors / kinds

#[test]
fn internal_constructor_and_limits() {
    let m = Mbuf::internal(b"hello").unwrap();
    assert_eq!(m.kind(), MbufKind::Internal);
    assert_eq!(m.len(), 5);
    assert_eq!(m.data(), Some(&b"hello"[..]));
    assert_eq!(m.leading_space(), 0);
    assert_eq!(m.trailing_space(), MLEN - 5);
    assert!(Mbuf::internal(&[0; MLEN]).is_ok());
    assert!(matches!(
        Mbuf::internal(&[0; MLEN + 1]),
        Err(MbufError::TooLarge { .. })
    ));
    let m = Mbuf::internal_with_leading(100, b"ab").unwrap();
    assert_eq!(m.leading_space(), 100);
    assert!(Mbuf::internal_with_leading(MLEN, b"a").is_err());
    assert!(Mbuf::internal_with_leading(usize::MAX, b"a").is_err());
}

#[test]
fn cluster_constructor_and_limits() {
    let m = Mbuf::cluster(&[7; 1000]).unwrap();
    assert_eq!(m.kind(), MbufKind::Cluster);
    assert_eq!(m.buf_size(), Some(MCLBYTES));
    assert_eq!(m.len(), 1000);
    assert!(Mbuf::cluster(&[0; MCLBYTES + 1]).is_err());
    let j = Mbuf::cluster_with(MAX_CLUSTER, 10, &[1; 100]).unwrap();
    assert_eq!(j.buf_size(), Some(MAX_CLUSTER));
    assert_eq!(j.leading_space(), 10);
    assert!(Mbuf::cluster_with(0, 0, &[]).is_err());
    assert!(Mbuf::cluster_with(MAX_CLUSTER + 1, 0, &[]).is_err());
    assert!(Mbuf::cluster_with(100, 50, &[0; 51]).is_err());
}

#[test]
fn page_mbuf_validation_and_length() {
    let (a, p) = arena(8);
    let pg: Vec<u64> = (0..3).map(|_| p.alloc_page().unwrap()).collect();
    let bad = [
        (&pg[..0], 0, 1),
        (&pg[..1], PAGE_SIZE, 1),
        (&pg[..1], 0, 0),
        (&pg[..1], 0, PAGE_SIZE + 1),
        (&pg[..1], 100, PAGE_SIZE - 99),
        (&pg[..2], 0, 0),
    ];
    for (pages, fo, ll) in bad {
        assert!(
            matches!(
                Mbuf::pages(p.clone(), pages, fo, ll),
                Err(MbufError::InvalidPages(_))
            ),
            "{fo} {ll}"
        );
    }
    let seventeen = [pg[0]; 17];
    assert!(Mbuf::pages(p.clone(), &seventeen, 0, 1).is_err());
    // Nothing taken over on error.
    assert_eq!(a.refcount(pg[0]), Some(1));
    // Single page: bytes first_off..first_off + last_len (m_epg_pagelen semantics).
    let m = Mbuf::pages(p.clone(), &pg[..1], 100, PAGE_SIZE - 100).unwrap();
    assert_eq!(m.len(), PAGE_SIZE - 100);
    assert!(m.flags().contains(MbufFlags::EXTPG));
    assert_eq!(m.kind(), MbufKind::Pages);
    // Three pages.
    let mut m3 = Mbuf::pages(p.clone(), &pg[1..3], 10, 20).unwrap();
    assert_eq!(m3.len(), PAGE_SIZE - 10 + 20);
    m3.set_epg_hdr(&[1; 24]).unwrap();
    m3.set_epg_trl(&[2; 64]).unwrap();
    assert!(m3.set_epg_hdr(&[1; 25]).is_err());
    assert!(m3.set_epg_trl(&[1; 65]).is_err());
    assert_eq!(m3.len(), 24 + PAGE_SIZE - 10 + 20 + 64);
    let info = m3.page_info().unwrap();
    assert_eq!(info.pages, &pg[1..3]);
    assert_eq!((info.first_off, info.last_len), (10, 20));
    assert_eq!(info.page_bytes, PAGE_SIZE - 10 + 20);
    assert!(Mbuf::internal(b"x").unwrap().set_epg_hdr(b"a").is_err());
    drop(m);
    drop(m3);
    assert_eq!(a.in_use(), 0);
}

#[test]
fn ddp_marker_and_flags() {
    let m = Mbuf::ddp_marker();
    assert!(m.is_empty());
    assert!(m.is_ddp_marker());
    assert_eq!(MbufFlags::DDP_START, MbufFlags::PROTO1);
    assert_eq!(m.leading_space(), 0);
    assert_eq!(m.trailing_space(), 0);
    let mut i = Mbuf::internal(b"a").unwrap();
    i.set_flags(MbufFlags::EXTPG | MbufFlags::EOR);
    assert_eq!(i.flags(), MbufFlags::EOR);
    i.insert_flags(MbufFlags::RDONLY);
    assert!(!i.is_writable());
    assert_eq!(i.trailing_space(), 0);
    assert!(i.data_mut().is_none());
    i.remove_flags(MbufFlags::RDONLY);
    assert!(i.data_mut().is_some());
}

// ---------------------------------------------------------------- split

#[test]
fn split_inside_internal() {
    let mut c = Chain::from_mbuf(Mbuf::internal(b"abcdefgh").unwrap()).unwrap();
    let r = c.split(3).unwrap();
    assert_eq!(content(&c), b"abc");
    assert_eq!(content(&r), b"defgh");
    assert_eq!(kinds(&r), [MbufKind::Internal]);
}

#[test]
fn split_inside_cluster_copies_smaller_side() {
    let data = pattern(1, 2000);
    for (at, left, right) in [
        // Tail smaller: tail copied into an internal mbuf, cluster stays left.
        (1900, MbufKind::Cluster, MbufKind::Internal),
        // Head smaller: head copied, original cluster goes right.
        (100, MbufKind::Internal, MbufKind::Cluster),
        // Both sides large: a new cluster.
        (1000, MbufKind::Cluster, MbufKind::Cluster),
    ] {
        let mut c = Chain::from_mbuf(Mbuf::cluster(&data).unwrap()).unwrap();
        let r = c.split(at).unwrap();
        assert_eq!(kinds(&c), [left], "split({at})");
        assert_eq!(kinds(&r), [right], "split({at})");
        assert_split(&c, &r, at, &data);
    }
}

#[test]
fn split_page_mbuf_at_page_boundary() {
    let (a, p) = arena(8);
    let (m, expect) = page_mbuf(&p, 3, 100, 50, 3);
    let addrs: Vec<u64> = m.page_info().unwrap().pages.to_vec();
    let mut c = Chain::from_mbuf(m).unwrap();
    let first = PAGE_SIZE - 100;
    let r = c.split(first).unwrap();
    assert_split(&c, &r, first, &expect);
    let li = c.first().unwrap().page_info().unwrap();
    assert_eq!(
        (li.pages, li.first_off, li.last_len),
        (&addrs[..1], 100, PAGE_SIZE - 100)
    );
    let ri = r.first().unwrap().page_info().unwrap();
    assert_eq!((ri.pages, ri.first_off, ri.last_len), (&addrs[1..], 0, 50));
    // No page shared: every count is still 1.
    for &ad in &addrs {
        assert_eq!(a.refcount(ad), Some(1));
    }
    drop(c);
    assert_eq!(a.in_use(), 2);
    drop(r);
    assert_eq!(a.in_use(), 0);
}

#[test]
fn split_page_mbuf_mid_page_shares_page() {
    let (a, p) = arena(8);
    let (m, expect) = page_mbuf(&p, 3, 100, 50, 4);
    let addrs: Vec<u64> = m.page_info().unwrap().pages.to_vec();
    let mut c = Chain::from_mbuf(m).unwrap();
    let off = PAGE_SIZE - 100 + 1000; // inside page 1
    let r = c.split(off).unwrap();
    assert_split(&c, &r, off, &expect);
    let li = c.first().unwrap().page_info().unwrap();
    assert_eq!(
        (li.pages, li.first_off, li.last_len),
        (&addrs[..2], 100, 1000)
    );
    let ri = r.first().unwrap().page_info().unwrap();
    assert_eq!(
        (ri.pages, ri.first_off, ri.last_len),
        (&addrs[1..], 1000, 50)
    );
    assert_eq!(a.refcount(addrs[1]), Some(2));
    drop(c);
    assert_eq!(a.refcount(addrs[0]), Some(0));
    assert_eq!(a.refcount(addrs[1]), Some(1));
    drop(r);
    assert_eq!(a.in_use(), 0);
}

#[test]
fn split_single_page_mid() {
    let (a, p) = arena(2);
    let (m, expect) = page_mbuf(&p, 1, 300, 1000, 5);
    let mut c = Chain::from_mbuf(m).unwrap();
    let r = c.split(400).unwrap();
    assert_split(&c, &r, 400, &expect);
    let li = c.first().unwrap().page_info().unwrap();
    assert_eq!((li.first_off, li.last_len), (300, 400));
    let ri = r.first().unwrap().page_info().unwrap();
    assert_eq!((ri.first_off, ri.last_len), (700, 600));
    drop((c, r));
    assert_eq!(a.in_use(), 0);
}

#[test]
fn split_page_mbuf_in_last_page() {
    let (a, p) = arena(4);
    let (m, expect) = page_mbuf(&p, 2, 0, 100, 6);
    let mut c = Chain::from_mbuf(m).unwrap();
    let r = c.split(PAGE_SIZE + 40).unwrap();
    assert_split(&c, &r, PAGE_SIZE + 40, &expect);
    let ri = r.first().unwrap().page_info().unwrap();
    assert_eq!((ri.pages.len(), ri.first_off, ri.last_len), (1, 40, 60));
    drop((c, r));
    assert_eq!(a.in_use(), 0);
}

#[test]
fn split_page_mbuf_in_header_and_trailer() {
    let (a, p) = arena(4);
    let (m, expect) = framed_page_mbuf(&p, (2, 0, 10, 7), b"HEADER", b"TRAILER!");
    let c0 = Chain::from_mbuf(m).unwrap();
    let total = c0.len();
    assert_eq!(content(&c0), expect);
    // Try every interesting offset on a fresh copy of the structure.
    for off in [
        1,
        3,
        6,
        7,
        6 + PAGE_SIZE,
        6 + PAGE_SIZE + 10,
        total - 3,
        total - 1,
    ] {
        let (mut m, _) = page_mbuf(&p, 2, 0, 10, 7);
        m.set_epg_hdr(b"HEADER").unwrap();
        m.set_epg_trl(b"TRAILER!").unwrap();
        let mut c = Chain::from_mbuf(m).unwrap();
        let r = c.split(off).unwrap();
        assert_eq!(content(&c), &expect[..off], "off {off}");
        assert_eq!(content(&r), &expect[off..], "off {off}");
        if off <= 6 {
            // Inside/at the end of the header: left is header bytes only.
            assert_eq!(kinds(&c), [MbufKind::Internal]);
            assert_eq!(kinds(&r), [MbufKind::Pages]);
            assert_eq!(
                r.first().unwrap().page_info().unwrap().hdr,
                &b"HEADER"[off..]
            );
        }
        if off >= 6 + PAGE_SIZE + 10 {
            // At/inside the trailer: right is trailer bytes only.
            assert_eq!(kinds(&c), [MbufKind::Pages]);
            assert_eq!(kinds(&r), [MbufKind::Internal]);
        }
        if off == 7 {
            // Inside page data: header left, trailer right.
            assert_eq!(c.first().unwrap().page_info().unwrap().hdr, b"HEADER");
            assert!(c.first().unwrap().page_info().unwrap().trl.is_empty());
            assert_eq!(r.first().unwrap().page_info().unwrap().trl, b"TRAILER!");
            assert!(r.first().unwrap().page_info().unwrap().hdr.is_empty());
        }
    }
    drop(c0);
    assert_eq!(a.in_use(), 0);
}

#[test]
fn split_edges_and_markers() {
    let mut c = Chain::new();
    c.append_mbuf(Mbuf::internal(b"abc").unwrap()).unwrap();
    c.append_mbuf(Mbuf::ddp_marker()).unwrap();
    c.append_mbuf(Mbuf::internal(b"def").unwrap()).unwrap();
    // Split exactly at the marker: marker goes right, in front of its data.
    let mut c2 = Chain::new();
    c2.cat(c.split(0).unwrap()).unwrap();
    assert_eq!(c.mbuf_count(), 0);
    let r = c2.split(3).unwrap();
    assert_eq!(c2.mbuf_count(), 1);
    assert!(r.first().unwrap().is_ddp_marker());
    assert_eq!(content(&r), b"def");
    // Split at len: everything stays left, right is empty.
    let mut c3 = Chain::from_bytes(b"xyz").unwrap();
    let e = c3.split(3).unwrap();
    assert_eq!(e.mbuf_count(), 0);
    assert_eq!(content(&c3), b"xyz");
    // Past the end: error, unchanged.
    assert!(matches!(c3.split(4), Err(MbufError::OutOfRange { .. })));
    assert!(c3.split(usize::MAX).is_err());
    assert_eq!(content(&c3), b"xyz");
}

#[test]
fn split_moves_eor_and_keeps_pkthdr_rdonly() {
    let mut m = Mbuf::internal(b"abcdef").unwrap();
    m.set_flags(MbufFlags::PKTHDR | MbufFlags::EOR | MbufFlags::RDONLY);
    let mut c = Chain::from_mbuf(m).unwrap();
    let r = c.split(2).unwrap();
    assert_eq!(
        c.first().unwrap().flags(),
        MbufFlags::PKTHDR | MbufFlags::RDONLY
    );
    assert_eq!(
        r.first().unwrap().flags(),
        MbufFlags::PKTHDR | MbufFlags::EOR | MbufFlags::RDONLY
    );
}

#[test]
fn split_failing_page_ref_leaves_chain_unchanged() {
    let (a, f, p) = RefBudget::over(4, 0);
    let (m, expect) = page_mbuf(&p, 2, 0, 100, 8);
    let mut c = Chain::from_mbuf(m).unwrap();
    assert!(matches!(c.split(10), Err(MbufError::Page(_))));
    assert_eq!(content(&c), expect);
    assert_eq!(c.mbuf_count(), 1);
    assert_eq!(a.in_use(), 2);
    // A page-boundary split needs no reference and succeeds.
    let r = c.split(PAGE_SIZE).unwrap();
    assert_eq!(content(&r), &expect[PAGE_SIZE..]);
    f.set(usize::MAX);
    drop((c, r));
    assert_eq!(a.in_use(), 0);
    assert_eq!(a.bad_unrefs(), 0);
}

// ---------------------------------------------------------------- copydata / copyback

fn mixed_chain(p: &Arc<dyn PageProvider>) -> (Chain, Vec<u8>) {
    let mut c = Chain::new();
    let mut e = Vec::new();
    let d = pattern(9, 100);
    c.append_mbuf(Mbuf::internal_with_leading(50, &d).unwrap())
        .unwrap();
    e.extend_from_slice(&d);
    let d = pattern(10, 1500);
    c.append_mbuf(Mbuf::cluster(&d).unwrap()).unwrap();
    e.extend_from_slice(&d);
    c.append_mbuf(Mbuf::ddp_marker()).unwrap();
    let (mut m, pe) = page_mbuf(p, 3, 4000, 200, 11);
    m.set_epg_trl(b"tt").unwrap();
    c.append_mbuf(m).unwrap();
    e.extend_from_slice(&pe);
    e.extend_from_slice(b"tt");
    let d = pattern(12, 30);
    c.append_mbuf(Mbuf::internal(&d).unwrap()).unwrap();
    e.extend_from_slice(&d);
    (c, e)
}

/// An empty copy is still a range check: an offset past the end is an error, as
/// FreeBSD's m_copydata would have walked off the chain.
#[test]
fn copydata_of_nothing_past_the_end_is_out_of_range() {
    let c = Chain::new();
    assert!(c.copydata(0, &mut []).is_ok());
    assert!(c.copydata(1, &mut []).is_err());
    let c = Chain::from_bytes(&[1, 2, 3]).unwrap();
    assert!(c.copydata(3, &mut []).is_ok());
    assert!(c.copydata(4, &mut []).is_err());
}

#[test]
fn copydata_across_kinds() {
    let (a, p) = arena(8);
    let (c, e) = mixed_chain(&p);
    assert_eq!(c.len(), e.len());
    for (off, n) in [
        (0, e.len()),
        (90, 20),
        (1590, 200),
        (1600, PAGE_SIZE + 10),
        (e.len() - 5, 5),
    ] {
        let mut buf = alloc::vec![0; n];
        c.copydata(off, &mut buf).unwrap();
        assert_eq!(buf, &e[off..off + n]);
    }
    let mut buf = [0u8; 2];
    assert!(c.copydata(e.len() - 1, &mut buf).is_err());
    assert!(c.copydata(usize::MAX, &mut buf).is_err());
    assert!(c.copydata(e.len(), &mut []).is_ok());
    drop(c);
    assert_eq!(a.in_use(), 0);
}

#[test]
fn copyback_overwrites_pages_and_extends() {
    let (a, p) = arena(8);
    let (mut c, mut e) = mixed_chain(&p);
    let n0 = c.mbuf_count();
    // Overwrite across cluster / page data / trailer.
    let src = pattern(99, 3000);
    c.copyback(1500, &src).unwrap();
    e[1500..4500].copy_from_slice(&src);
    assert_eq!(content(&c), e);
    assert_eq!(c.mbuf_count(), n0);
    // Overwrite the tail and extend by 5000 bytes.
    let len = e.len();
    let src = pattern(42, 5010);
    c.copyback(len - 10, &src).unwrap();
    e.truncate(len - 10);
    e.extend_from_slice(&src);
    assert_eq!(content(&c), e);
    // Append at exactly len.
    c.copyback(e.len(), b"end").unwrap();
    e.extend_from_slice(b"end");
    assert_eq!(content(&c), e);
    // Past the end: error.
    assert!(matches!(
        c.copyback(e.len() + 1, b"x"),
        Err(MbufError::OutOfRange { .. })
    ));
    assert!(c.copyback(usize::MAX, b"x").is_err());
    assert_eq!(content(&c), e);
    drop(c);
    assert_eq!(a.in_use(), 0);
}

#[test]
fn copyback_rdonly_is_error_and_atomic() {
    let mut c = Chain::from_bytes(b"aaaa").unwrap();
    let mut ro = Mbuf::internal(b"bbbb").unwrap();
    ro.insert_flags(MbufFlags::RDONLY);
    c.append_mbuf(ro).unwrap();
    assert_eq!(c.copyback(2, b"xxxx"), Err(MbufError::ReadOnly));
    assert_eq!(content(&c), b"aaaabbbb");
    assert_eq!(c.copyback(6, b"zzzz"), Err(MbufError::ReadOnly));
    // Writing only before the RDONLY mbuf is fine; extension after it adds a new mbuf.
    c.copyback(0, b"xy").unwrap();
    c.copyback(8, b"!!").unwrap();
    assert_eq!(content(&c), b"xyaabbbb!!");
    assert_eq!(c.mbuf_count(), 3);
}

#[test]
fn copyback_read_only_page_mbuf() {
    let (a, p) = arena(2);
    let (mut m, _) = page_mbuf(&p, 1, 0, 100, 1);
    m.insert_flags(MbufFlags::RDONLY);
    let mut c = Chain::from_mbuf(m).unwrap();
    assert_eq!(c.copyback(10, b"x"), Err(MbufError::ReadOnly));
    drop(c);
    assert_eq!(a.in_use(), 0);
}

// ---------------------------------------------------------------- pullup

#[test]
fn pullup_from_pages_releases_consumed_pages() {
    let (a, p) = arena(8);
    let mut c = Chain::from_bytes(b"hdr").unwrap();
    let (m, pe) = page_mbuf(&p, 2, PAGE_SIZE - 10, 100, 13);
    c.append_mbuf(m).unwrap();
    let mut e = b"hdr".to_vec();
    e.extend_from_slice(&pe);
    assert_eq!(a.in_use(), 2);
    // 3 + 10 (rest of page 0) + 50 bytes of page 1: page 0 fully consumed and released.
    let got = c.pullup(63).unwrap().to_vec();
    assert_eq!(got, &e[..63]);
    assert_eq!(content(&c), e);
    assert_eq!(a.in_use(), 1);
    assert_eq!(kinds(&c), [MbufKind::Internal, MbufKind::Pages]);
    assert_eq!(c.first().unwrap().len(), 63);
    // Pull up everything: page mbuf consumed.
    let n = e.len();
    assert_eq!(c.pullup(n).unwrap(), &e[..]);
    assert_eq!(c.mbuf_count(), 1);
    assert_eq!(a.in_use(), 0);
}

#[test]
fn pullup_cases() {
    // Already contiguous: no change.
    let mut c = Chain::from_bytes(b"abcdef").unwrap();
    assert_eq!(c.pullup(4).unwrap(), b"abcd");
    assert_eq!(c.pullup(0).unwrap(), b"");
    // First mbuf read-only: a new mbuf is put in front.
    let mut ro = Mbuf::internal(b"ab").unwrap();
    ro.insert_flags(MbufFlags::RDONLY | MbufFlags::PKTHDR);
    let mut c = Chain::from_mbuf(ro).unwrap();
    c.append(b"cdef").unwrap();
    assert_eq!(c.mbuf_count(), 2);
    assert_eq!(c.pullup(4).unwrap(), b"abcd");
    assert_eq!(content(&c), b"abcdef");
    assert!(c.first().unwrap().is_writable());
    assert!(c.first().unwrap().flags().contains(MbufFlags::PKTHDR));
    // First mbuf too small (internal) for n > MLEN: a cluster is used.
    let mut c = Chain::from_bytes(&pattern(1, 100)).unwrap();
    c.append_mbuf(Mbuf::cluster(&pattern(2, 1000)).unwrap())
        .unwrap();
    let mut e = pattern(1, 100);
    e.extend_from_slice(&pattern(2, 1000));
    assert_eq!(c.pullup(500).unwrap(), &e[..500]);
    assert_eq!(c.first().unwrap().kind(), MbufKind::Cluster);
    assert_eq!(content(&c), e);
    // Data moved to the front of the buffer when the tail room is short.
    let mut c = Chain::from_mbuf(Mbuf::internal_with_leading(220, b"12").unwrap()).unwrap();
    c.append(b"3456789").unwrap();
    assert_eq!(c.mbuf_count(), 2);
    assert_eq!(c.first().unwrap().len(), 4);
    assert_eq!(c.pullup(9).unwrap(), b"123456789");
    assert_eq!(c.mbuf_count(), 1);
    assert_eq!(c.first().unwrap().kind(), MbufKind::Internal);
    // Errors.
    let mut c = Chain::from_bytes(&[0; 3000]).unwrap();
    assert!(matches!(
        c.pullup(MCLBYTES + 1),
        Err(MbufError::TooLarge { .. })
    ));
    let mut c = Chain::from_bytes(b"ab").unwrap();
    assert!(matches!(c.pullup(3), Err(MbufError::OutOfRange { .. })));
    assert!(c.pullup(usize::MAX).is_err());
}

#[test]
fn pullup_refuses_to_cross_marker() {
    let (a, p) = arena(4);
    let mut c = Chain::from_bytes(b"ab").unwrap();
    c.append(b"cd").unwrap(); // same mbuf (trailing space)
    c.append_mbuf(Mbuf::internal(b"ef").unwrap()).unwrap();
    c.append_mbuf(Mbuf::ddp_marker()).unwrap();
    let (m, _) = page_mbuf(&p, 1, 0, 10, 1);
    c.append_mbuf(m).unwrap();
    assert_eq!(c.pullup(6).unwrap(), b"abcdef");
    assert!(c.mbufs().nth(1).unwrap().is_ddp_marker());
    assert_eq!(c.pullup(7), Err(MbufError::CrossesDdpMarker));
    assert_eq!(c.ddp_regions().next().unwrap().len, 10);
    // Marker first.
    let mut c2 = Chain::from_mbuf(Mbuf::ddp_marker()).unwrap();
    c2.append(b"xyz").unwrap();
    assert_eq!(c2.pullup(1), Err(MbufError::CrossesDdpMarker));
    drop(c);
    assert_eq!(a.in_use(), 0);
}

// ---------------------------------------------------------------- prepend / append

#[test]
fn prepend_uses_leading_space() {
    let mut c = Chain::from_mbuf(Mbuf::internal_with_leading(16, b"body").unwrap()).unwrap();
    c.prepend(4).unwrap().copy_from_slice(b"hdr:");
    assert_eq!(c.mbuf_count(), 1);
    assert_eq!(content(&c), b"hdr:body");
    assert_eq!(c.first().unwrap().leading_space(), 12);
}

#[test]
fn prepend_without_space_adds_aligned_mbuf() {
    let mut first = Mbuf::internal(b"body").unwrap();
    first.insert_flags(MbufFlags::PKTHDR);
    let mut c = Chain::from_mbuf(first).unwrap();
    c.prepend_bytes(b"hdr:").unwrap();
    assert_eq!(c.mbuf_count(), 2);
    assert_eq!(content(&c), b"hdr:body");
    // PKTHDR moved to the new first mbuf; the new mbuf is M_ALIGNed (cheap next prepend).
    assert!(c.first().unwrap().flags().contains(MbufFlags::PKTHDR));
    assert!(!c
        .mbufs()
        .nth(1)
        .unwrap()
        .flags()
        .contains(MbufFlags::PKTHDR));
    assert_eq!(c.first().unwrap().leading_space(), MLEN - 4);
    c.prepend_bytes(b"rpc:").unwrap();
    assert_eq!(c.mbuf_count(), 2);
    assert_eq!(content(&c), b"rpc:hdr:body");
    // Large prepend: a cluster.
    c.prepend_bytes(&[5; 1000]).unwrap();
    assert_eq!(c.first().unwrap().kind(), MbufKind::Cluster);
    assert_eq!(c.len(), 1012);
    assert!(matches!(
        c.prepend(MAX_CLUSTER + 1),
        Err(MbufError::TooLarge { .. })
    ));
    assert!(c.prepend(usize::MAX).is_err());
    assert_eq!(c.prepend(0).unwrap().len(), 0);
    // Onto an empty chain.
    let mut e = Chain::new();
    e.prepend_bytes(b"x").unwrap();
    assert_eq!(content(&e), b"x");
}

#[test]
fn prepend_never_writes_into_marker_or_rdonly() {
    let mut c = Chain::from_mbuf(Mbuf::ddp_marker()).unwrap();
    c.prepend_bytes(b"ab").unwrap();
    assert_eq!(c.mbuf_count(), 2);
    assert!(c.mbufs().nth(1).unwrap().is_ddp_marker());
    assert_eq!(c.ddp_regions().next().unwrap().offset, 2);
    let mut ro = Mbuf::internal_with_leading(10, b"z").unwrap();
    ro.insert_flags(MbufFlags::RDONLY);
    let mut c = Chain::from_mbuf(ro).unwrap();
    c.prepend_bytes(b"a").unwrap();
    assert_eq!(c.mbuf_count(), 2);
    assert_eq!(content(&c), b"az");
}

#[test]
fn append_fills_trailing_space_then_new_mbufs() {
    let mut c = Chain::from_bytes(b"a").unwrap();
    c.append(&[1; MLEN - 1]).unwrap();
    assert_eq!(c.mbuf_count(), 1);
    c.append(&[2; 5000]).unwrap();
    // 5000 bytes: MCLBYTES clusters (2048, 2048, 904).
    assert_eq!(
        kinds(&c),
        [
            MbufKind::Internal,
            MbufKind::Cluster,
            MbufKind::Cluster,
            MbufKind::Cluster
        ]
    );
    c.append(&[3; 10]).unwrap();
    assert_eq!(c.mbuf_count(), 4);
    c.append(&[]).unwrap();
    let mut e = b"a".to_vec();
    e.extend_from_slice(&[1; MLEN - 1]);
    e.extend_from_slice(&[2; 5000]);
    e.extend_from_slice(&[3; 10]);
    assert_eq!(content(&c), e);
    // Never into a marker.
    c.append_mbuf(Mbuf::ddp_marker()).unwrap();
    c.append(b"x").unwrap();
    assert!(c.mbufs().nth(4).unwrap().is_empty());
    assert_eq!(c.mbuf_count(), 6);
}

#[test]
fn append_mbuf_clears_pkthdr() {
    let mut c = Chain::new();
    let mut m = Mbuf::internal(b"a").unwrap();
    m.insert_flags(MbufFlags::PKTHDR);
    c.append_mbuf(m).unwrap();
    let mut m = Mbuf::internal(b"b").unwrap();
    m.insert_flags(MbufFlags::PKTHDR);
    c.append_mbuf(m).unwrap();
    c.check_invariants().unwrap();
    assert!(c.first().unwrap().flags().contains(MbufFlags::PKTHDR));
}

// ---------------------------------------------------------------- adj

#[test]
fn adj_head_through_pages_releases_pages() {
    let (a, p) = arena(8);
    let mut c = Chain::from_bytes(b"0123456789").unwrap();
    let (m, pe) = page_mbuf(&p, 4, 100, 300, 14);
    c.append_mbuf(m).unwrap();
    let mut e = b"0123456789".to_vec();
    e.extend_from_slice(&pe);
    assert_eq!(a.in_use(), 4);
    // Into page 2: pages 0 and 1 released.
    let k = 10 + (PAGE_SIZE - 100) + PAGE_SIZE + 5;
    c.adj(k as i64).unwrap();
    assert_eq!(content(&c), &e[k..]);
    assert_eq!(a.in_use(), 2);
    let info = c.first().unwrap().page_info().unwrap();
    assert_eq!(
        (info.pages.len(), info.first_off, info.last_len),
        (2, 5, 300)
    );
    assert_eq!(c.mbuf_count(), 1);
    // Into the last page.
    let k2 = PAGE_SIZE - 5 + 100;
    c.adj(k2 as i64).unwrap();
    let info = c.first().unwrap().page_info().unwrap();
    assert_eq!(
        (info.pages.len(), info.first_off, info.last_len),
        (1, 100, 200)
    );
    assert_eq!(content(&c), &e[k + k2..]);
    assert_eq!(a.in_use(), 1);
    // Everything.
    c.adj(200).unwrap();
    assert_eq!(c.mbuf_count(), 0);
    assert_eq!(a.in_use(), 0);
}

#[test]
fn adj_tail_through_pages_releases_pages() {
    let (a, p) = arena(8);
    let (m, mut e) = framed_page_mbuf(&p, (4, 100, 300, 15), b"HH", b"TT");
    let mut c = Chain::from_mbuf(m).unwrap();
    c.append(b"xdr").unwrap();
    e.extend_from_slice(b"xdr");
    // Remove xdr + trailer + 300 (last page) + 10 bytes of page 2.
    c.adj(-(3 + 2 + 300 + 10)).unwrap();
    let n = e.len() - 315;
    assert_eq!(content(&c), &e[..n]);
    assert_eq!(a.in_use(), 3);
    let info = c.first().unwrap().page_info().unwrap();
    assert_eq!(
        (info.pages.len(), info.first_off, info.last_len),
        (3, 100, PAGE_SIZE - 10)
    );
    assert!(info.trl.is_empty());
    // Down to the header only: becomes an internal mbuf, all pages released.
    let len = c.len();
    c.adj(-((len - 1) as i64)).unwrap();
    assert_eq!(content(&c), b"H");
    assert_eq!(kinds(&c), [MbufKind::Internal]);
    assert_eq!(a.in_use(), 0);
}

#[test]
fn adj_errors_and_zero() {
    let mut c = Chain::from_bytes(b"abc").unwrap();
    c.adj(0).unwrap();
    assert!(matches!(c.adj(4), Err(MbufError::OutOfRange { .. })));
    assert!(c.adj(-4).is_err());
    assert!(c.adj(i64::MIN).is_err());
    assert!(c.adj(i64::MAX).is_err());
    assert_eq!(content(&c), b"abc");
    c.adj(-3).unwrap();
    assert_eq!(c.mbuf_count(), 0);
}

#[test]
fn adj_matches_split_for_markers() {
    let mk = || {
        let mut c = Chain::from_bytes(b"abc").unwrap();
        c.append_mbuf(Mbuf::ddp_marker()).unwrap();
        c.append_mbuf(Mbuf::internal(b"def").unwrap()).unwrap();
        c
    };
    let mut c = mk();
    c.adj(3).unwrap(); // marker at offset 3 == n: kept
    assert!(c.first().unwrap().is_ddp_marker());
    let mut c = mk();
    c.adj(4).unwrap(); // marker before the cut: removed
    assert!(c.mbufs().all(|m| !m.is_ddp_marker()));
    let mut c = mk();
    c.adj(-3).unwrap(); // marker at the new end: removed
    assert_eq!(c.mbuf_count(), 1);
}

// ---------------------------------------------------------------- cat / iteration

#[test]
fn cat_moves_mbufs_and_demotes_pkthdr() {
    let (a, p) = arena(4);
    let mut c = Chain::from_bytes(b"abc").unwrap();
    let mut first = Mbuf::internal(b"X").unwrap();
    first.insert_flags(MbufFlags::PKTHDR);
    let mut d = Chain::from_mbuf(first).unwrap();
    let (m, pe) = page_mbuf(&p, 1, 0, 7, 16);
    d.append_mbuf(m).unwrap();
    c.cat(d).unwrap();
    let mut e = b"abcX".to_vec();
    e.extend_from_slice(&pe);
    assert_eq!(content(&c), e);
    assert_eq!(c.mbuf_count(), 3);
    c.check_invariants().unwrap();
    c.cat(Chain::new()).unwrap();
    assert_eq!(c.mbuf_count(), 3);
    c.clear();
    assert_eq!(a.in_use(), 0);
    assert_eq!(c.len(), 0);
}

#[test]
fn fragments_in_order() {
    let (a, p) = arena(4);
    let mut c = Chain::from_bytes(b"ab").unwrap();
    c.append_mbuf(Mbuf::ddp_marker()).unwrap();
    let (mut m, _) = page_mbuf(&p, 2, 4000, 10, 17);
    let addrs: Vec<u64> = m.page_info().unwrap().pages.to_vec();
    m.set_epg_hdr(b"H").unwrap();
    m.set_epg_trl(b"T").unwrap();
    c.append_mbuf(m).unwrap();
    let f: Vec<Fragment<'_>> = c.fragments().collect();
    assert_eq!(
        f,
        [
            Fragment::Bytes(b"ab"),
            Fragment::Bytes(b"H"),
            Fragment::Page {
                addr: addrs[0],
                offset: 4000,
                len: 96
            },
            Fragment::Page {
                addr: addrs[1],
                offset: 0,
                len: 10
            },
            Fragment::Bytes(b"T"),
        ]
    );
    // Clipped.
    let f: Vec<Fragment<'_>> = c.fragments_in(1..5).unwrap().collect();
    assert_eq!(
        f,
        [
            Fragment::Bytes(b"b"),
            Fragment::Bytes(b"H"),
            Fragment::Page {
                addr: addrs[0],
                offset: 4000,
                len: 2
            },
        ]
    );
    assert!(c.fragments_in(0..c.len() + 1).is_err());
    #[allow(clippy::reversed_empty_ranges)]
    let bad = c.fragments_in(3..2);
    assert!(bad.is_err());
    assert_eq!(c.fragments_in(2..2).unwrap().count(), 0);
    // Mbuf iteration with flags.
    let flags: Vec<MbufFlags> = c.mbufs().map(Mbuf::flags).collect();
    assert_eq!(
        flags,
        [MbufFlags::empty(), MbufFlags::DDP_START, MbufFlags::EXTPG]
    );
    drop(c);
    assert_eq!(a.in_use(), 0);
}

// ---------------------------------------------------------------- DDP

#[test]
fn ddp_regions_and_page_fragments() {
    let (a, p) = arena(40);
    let mut c = Chain::from_bytes(&[1; 40]).unwrap(); // XDR
    c.append_mbuf(Mbuf::ddp_marker()).unwrap();
    c.cat(Chain::alloc_pages(&p, 20 * PAGE_SIZE + 5).unwrap())
        .unwrap(); // 2 page mbufs
    c.append(&[0; 3]).unwrap(); // XDR pad: not in the region
    c.append(&[2; 8]).unwrap();
    c.append_mbuf(Mbuf::ddp_marker()).unwrap(); // second marker: region of 1 page mbuf
    let (m, _) = page_mbuf(&p, 1, 8, 100, 1);
    c.append_mbuf(m).unwrap();
    c.append_mbuf(Mbuf::ddp_marker()).unwrap(); // third marker at the end: empty region
    let regions: Vec<DdpRegion> = c.ddp_regions().collect();
    assert_eq!(regions.len(), 3);
    assert_eq!(
        regions[0],
        DdpRegion {
            marker_index: 1,
            offset: 40,
            len: 20 * PAGE_SIZE + 5,
            page_mbufs: 2
        }
    );
    let after = 40 + 20 * PAGE_SIZE + 5 + 11;
    assert_eq!(
        regions[1],
        DdpRegion {
            marker_index: 5,
            offset: after,
            len: 100,
            page_mbufs: 1
        }
    );
    assert_eq!(regions[2].len, 0);
    assert_eq!(regions[2].offset, c.len());
    let frags: Vec<PageFragment> = c.page_fragments_in(regions[0].range()).unwrap().collect();
    assert_eq!(frags.len(), 21);
    assert!(frags.iter().all(|f| f.offset == 0));
    assert_eq!(frags.iter().map(|f| f.len).sum::<usize>(), regions[0].len);
    // A sub-range inside the region works too.
    let sub: Vec<PageFragment> = c.page_fragments_in(41..50).unwrap().collect();
    assert_eq!(
        sub,
        [PageFragment {
            addr: frags[0].addr,
            offset: 1,
            len: 9
        }]
    );
    // A range touching XDR bytes is refused.
    assert_eq!(
        c.page_fragments_in(39..50).err(),
        Some(MbufError::NotPageData)
    );
    let r1 = regions[1].range();
    assert_eq!(
        c.page_fragments_in(r1.start - 1..r1.end).err(),
        Some(MbufError::NotPageData)
    );
    // Splitting the chain at the marker keeps the marker with its region.
    let right = c.split(40).unwrap();
    assert_eq!(right.ddp_regions().next().unwrap().offset, 0);
    drop((c, right));
    assert_eq!(a.in_use(), 0);
}

// ---------------------------------------------------------------- alloc_pages / arena

#[test]
fn alloc_pages_shapes() {
    let (a, p) = arena(64);
    assert_eq!(Chain::alloc_pages(&p, 0).unwrap().mbuf_count(), 0);
    let c = Chain::alloc_pages(&p, 1).unwrap();
    let i = c.first().unwrap().page_info().unwrap();
    assert_eq!((i.pages.len(), i.first_off, i.last_len), (1, 0, 1));
    let c2 = Chain::alloc_pages(&p, 16 * PAGE_SIZE).unwrap();
    assert_eq!(c2.mbuf_count(), 1);
    assert_eq!(c2.first().unwrap().page_info().unwrap().last_len, PAGE_SIZE);
    let c3 = Chain::alloc_pages(&p, 16 * PAGE_SIZE + 1).unwrap();
    assert_eq!(c3.mbuf_count(), 2);
    assert_eq!(c3.len(), 16 * PAGE_SIZE + 1);
    assert_eq!(a.in_use(), 1 + 16 + 17);
    // Fresh pages are zeroed.
    assert!(content(&c3).iter().all(|&b| b == 0));
    drop((c, c2, c3));
    assert_eq!(a.in_use(), 0);
    assert_eq!(a.allocated(), 34);
}

#[test]
fn alloc_pages_exhaustion_is_error_without_leak() {
    let (a, p) = arena(10);
    let keep = Chain::alloc_pages(&p, 3 * PAGE_SIZE).unwrap();
    assert_eq!(
        Chain::alloc_pages(&p, 8 * PAGE_SIZE).err(),
        Some(MbufError::Alloc)
    );
    assert_eq!(a.in_use(), 3);
    assert_eq!(a.alloc_failures(), 1);
    assert!(Chain::alloc_pages(&p, 7 * PAGE_SIZE).is_ok());
    assert_eq!(a.in_use(), 3);
    drop(keep);
    assert_eq!(a.in_use(), 0);
    assert_eq!(a.bad_unrefs(), 0);
}

#[test]
fn arena_refcounts_and_errors() {
    let a = HeapPageArena::with_base(2, 0x8000).unwrap();
    assert!(HeapPageArena::with_base(2, 0x8001).is_err());
    assert!(HeapPageArena::with_base(2, u64::MAX - 4095).is_err());
    assert_eq!(a.capacity(), 2);
    let x = a.alloc_page().unwrap();
    assert_eq!(x, 0x8000);
    let y = a.alloc_page().unwrap();
    assert_eq!(y, 0x9000);
    assert_eq!(a.alloc_page(), Err(AllocError));
    a.page_ref(x).unwrap();
    assert_eq!(a.refcount(x), Some(2));
    a.page_unref(x);
    a.page_unref(x);
    assert_eq!(a.refcount(x), Some(0));
    assert_eq!(a.page_ref(x), Err(PageError::NotInUse(x)));
    assert_eq!(a.page_ref(0x8001), Err(PageError::UnknownPage(0x8001)));
    assert!(a.with_page(x, &mut |_| {}).is_err());
    assert!(a.with_page_mut(0xa000, &mut |_| {}).is_err());
    a.page_unref(x); // free page: ignored, counted
    a.page_unref(0x1234); // unknown: ignored, counted
    assert_eq!(a.bad_unrefs(), 2);
    assert_eq!(a.in_use(), 1);
    assert_eq!(a.free_pages(), 1);
    let mut seen = 0;
    a.with_page(y, &mut |pg| seen = pg.len()).unwrap();
    assert_eq!(seen, PAGE_SIZE);
    a.page_unref(y);
    assert_eq!(a.in_use(), 0);
    assert_eq!(a.refcount(0x1234), None);
}

#[test]
fn drop_and_free_release_pages() {
    let (a, p) = arena(8);
    let c = Chain::alloc_pages(&p, 5 * PAGE_SIZE).unwrap();
    assert_eq!(a.in_use(), 5);
    c.free();
    assert_eq!(a.in_use(), 0);
    let (m, _) = page_mbuf(&p, 3, 0, 1, 0);
    drop(m);
    assert_eq!(a.in_use(), 0);
    assert_eq!(a.bad_unrefs(), 0);
}

#[test]
fn is_empty_counts_bytes_not_mbufs() {
    let c = Chain::from_mbuf(Mbuf::ddp_marker()).unwrap();
    assert!(c.is_empty());
    assert_eq!(c.mbuf_count(), 1);
    assert_eq!(c.len(), 0);
    assert!(Chain::new().is_empty());
}

#[test]
fn alloc_pages_huge_len_is_alloc_error() {
    let (a, p) = arena(2);
    assert_eq!(
        Chain::alloc_pages(&p, usize::MAX).err(),
        Some(MbufError::Alloc)
    );
    assert_eq!(a.in_use(), 0);
}

#[test]
fn chains_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Chain>();
    check::<Mbuf>();
    check::<HeapPageArena>();
}

#[test]
fn arena_host_region() {
    let a = HeapPageArena::new(3).unwrap();
    let (ptr, len) = a.host_region();
    assert!(!ptr.is_null());
    assert_eq!(len, 3 * PAGE_SIZE);
    assert_eq!(
        a.page_addr(2),
        Some(DEFAULT_ARENA_BASE + 2 * PAGE_SIZE as u64)
    );
    assert_eq!(a.page_addr(3), None);
}

#[test]
fn sizes() {
    // Informative: an mbuf is moved by value inside the chain's VecDeque.
    let s = core::mem::size_of::<Mbuf>();
    std::println!("size_of::<Mbuf>() = {s}");
    assert!(s <= 320, "Mbuf is {s} bytes");
}

// ---------------------------------------------------------------- copym

/// Page-array entries naming `addr` across `chains`.
fn entries(chains: &[&Chain], addr: u64) -> u32 {
    chains
        .iter()
        .flat_map(|c| c.mbufs())
        .filter_map(Mbuf::page_info)
        .map(|i| i.pages.iter().filter(|&&a| a == addr).count() as u32)
        .sum()
}

fn check_refs(a: &HeapPageArena, chains: &[&Chain]) {
    for idx in 0..a.capacity() {
        let addr = a.page_addr(idx).unwrap();
        assert_eq!(
            a.refcount(addr),
            Some(entries(chains, addr)),
            "page {addr:#x}"
        );
    }
    assert_eq!(a.bad_unrefs(), 0);
}

#[test]
fn copym_whole_chain_shares_pages() {
    let (a, p) = arena(8);
    let (mut c, e) = mixed_chain(&p);
    c.mbufs_mut()
        .next()
        .unwrap()
        .insert_flags(MbufFlags::PKTHDR);
    let copy = c.copym(0, c.len()).unwrap();
    assert_eq!(content(&copy), e);
    assert_eq!(
        kinds(&copy),
        [
            MbufKind::Internal,
            MbufKind::Cluster,
            MbufKind::Internal,
            MbufKind::Pages,
            MbufKind::Internal
        ]
    );
    let flags: Vec<MbufFlags> = copy.mbufs().map(Mbuf::flags).collect();
    assert_eq!(flags[0], MbufFlags::PKTHDR);
    assert_eq!(flags[1], MbufFlags::empty());
    assert!(copy.mbufs().nth(2).unwrap().is_ddp_marker());
    assert_eq!(flags[3], MbufFlags::EXTPG | MbufFlags::RDONLY);
    assert_eq!(flags[4], MbufFlags::empty());
    // Same pages, one more reference each.
    let (pi, ci) = (
        c.mbufs().nth(3).unwrap().page_info().unwrap(),
        copy.mbufs().nth(3).unwrap().page_info().unwrap(),
    );
    assert_eq!(pi, ci);
    for &addr in pi.pages {
        assert_eq!(a.refcount(addr), Some(2));
    }
    check_refs(&a, &[&c, &copy]);
    // DDP region preserved in the copy.
    let r: Vec<DdpRegion> = copy.ddp_regions().collect();
    let o: Vec<DdpRegion> = c.ddp_regions().collect();
    assert_eq!(r, o);
    // Internal copies are writable, and independent of the source.
    let mut copy = copy;
    copy.copyback(0, b"XY").unwrap();
    assert_eq!(&content(&c)[..2], &e[..2]);
    assert_eq!(a.in_use(), 3);
    drop((c, copy));
    assert_eq!(a.in_use(), 0);
    assert_eq!(a.bad_unrefs(), 0);
}

#[test]
fn copym_inside_pages_at_odd_offsets() {
    let (a, p) = arena(8);
    let (mut m, e) = framed_page_mbuf(&p, (4, 123, 777, 21), b"hdr-bytes", b"trailer!");
    m.insert_flags(MbufFlags::EOR);
    let c = Chain::from_mbuf(m).unwrap();
    let len = c.len();
    let hl = 9;
    let cases = [
        (0, len),
        (1, 5),                                           // header only
        (hl + 1, 1),                                      // one byte of page 0
        (hl + 5, PAGE_SIZE),                              // pages 0..=1
        (3, len - 3),                                     // inside header to end (EOR kept)
        (hl + (PAGE_SIZE - 123) + 17, 2 * PAGE_SIZE + 1), // pages 1..=3
        (len - 5, 3),                                     // trailer only
        (len - 8 - 3, 5),                                 // last page + trailer
        (hl + (PAGE_SIZE - 123), PAGE_SIZE),              // exactly page 1
    ];
    for (off, n) in cases {
        let copy = c.copym(off, n).unwrap();
        assert_eq!(content(&copy), &e[off..off + n], "copym({off}, {n})");
        assert_eq!(copy.mbuf_count(), 1);
        let cm = copy.first().unwrap();
        if let Some(i) = cm.page_info() {
            assert!(!cm.is_writable());
            // Every page of the copy is a page of the source.
            let src = c.first().unwrap().page_info().unwrap().pages;
            assert!(i.pages.iter().all(|x| src.contains(x)));
        } else {
            assert!(cm.is_writable());
            assert_eq!(cm.kind(), MbufKind::Internal);
        }
        assert_eq!(
            cm.flags().contains(MbufFlags::EOR),
            off + n == len,
            "EOR for copym({off}, {n})"
        );
        check_refs(&a, &[&c, &copy]);
    }
    assert_eq!(a.in_use(), 4);
    drop(c);
    assert_eq!(a.in_use(), 0);
}

#[test]
fn copym_drop_order_keeps_pages_alive() {
    let (a, p) = arena(4);
    let (m, e) = page_mbuf(&p, 3, 100, 50, 3);
    let c = Chain::from_mbuf(m).unwrap();
    let pages: Vec<u64> = c.first().unwrap().page_info().unwrap().pages.to_vec();
    // Original dropped first: the copy's pages stay allocated and readable.
    let copy = c.copym(10, PAGE_SIZE).unwrap();
    let cp = copy.first().unwrap().page_info().unwrap().pages.to_vec();
    assert_eq!(cp, &pages[..2]);
    assert_eq!(a.refcount(pages[0]), Some(2));
    assert_eq!(a.refcount(pages[1]), Some(2));
    assert_eq!(a.refcount(pages[2]), Some(1));
    drop(c);
    assert_eq!(a.in_use(), 2);
    assert_eq!(a.refcount(pages[0]), Some(1));
    assert_eq!(a.refcount(pages[2]), Some(0));
    assert_eq!(content(&copy), &e[10..10 + PAGE_SIZE]);
    drop(copy);
    assert_eq!(a.in_use(), 0);
    // Copy dropped first: the original is untouched.
    let (m, e) = page_mbuf(&p, 2, 0, 10, 4);
    let c = Chain::from_mbuf(m).unwrap();
    let copy = c.copym(PAGE_SIZE - 1, 2).unwrap();
    check_refs(&a, &[&c, &copy]);
    drop(copy);
    check_refs(&a, &[&c]);
    assert_eq!(content(&c), e);
    drop(c);
    assert_eq!(a.in_use(), 0);
    assert_eq!(a.bad_unrefs(), 0);
}

#[test]
fn copym_page_copy_is_read_only() {
    let (a, p) = arena(4);
    let (c, e) = mixed_chain(&p);
    let start = 1610; // page data of the page mbuf (the marker is at 1600)
    let mut copy = c.copym(start, 300).unwrap();
    assert!(copy.mbufs().all(|m| !m.is_writable() && m.is_pages()));
    assert_eq!(copy.copyback(10, b"zz"), Err(MbufError::ReadOnly));
    assert_eq!(
        copy.mbufs_mut().next().unwrap().set_epg_trl(b"x"),
        Err(MbufError::ReadOnly)
    );
    assert_eq!(content(&copy), &e[start..start + 300]);
    // Appending past the end is fine (new mbufs), nothing shared is written.
    copy.copyback(300, b"tail").unwrap();
    assert_eq!(content(&c), e);
    drop((c, copy));
    assert_eq!(a.in_use(), 0);
}

#[test]
fn copym_markers_and_ranges() {
    let (a, p) = arena(4);
    let (c, e) = mixed_chain(&p);
    let mpos = 1600; // marker offset
    let len = c.len();
    // Marker exactly at off is copied, one at off + len is not.
    let at = c.copym(mpos, 10).unwrap();
    assert!(at.first().unwrap().is_ddp_marker());
    assert_eq!(at.ddp_regions().count(), 1);
    let before = c.copym(mpos - 10, 10).unwrap();
    assert!(before.mbufs().all(|m| !m.is_ddp_marker()));
    assert_eq!(content(&before), &e[mpos - 10..mpos]);
    let across = c.copym(mpos - 10, 20).unwrap();
    assert_eq!(across.mbufs().filter(|m| m.is_ddp_marker()).count(), 1);
    // Empty copies.
    assert_eq!(c.copym(mpos, 0).unwrap().mbuf_count(), 0);
    assert_eq!(c.copym(len, 0).unwrap().mbuf_count(), 0);
    // Out of range.
    assert!(matches!(c.copym(len, 1), Err(MbufError::OutOfRange { .. })));
    assert!(matches!(
        c.copym(len + 1, 0),
        Err(MbufError::OutOfRange { .. })
    ));
    assert!(matches!(c.copym(1, len), Err(MbufError::OutOfRange { .. })));
    assert!(matches!(
        c.copym(usize::MAX, 2),
        Err(MbufError::OutOfRange { .. })
    ));
    assert!(matches!(
        Chain::new().copym(0, 1),
        Err(MbufError::OutOfRange { .. })
    ));
    // Big cluster source: copy is a cluster large enough.
    let big = pattern(1, 9000);
    let bc = Chain::from_mbuf(Mbuf::cluster_with(9000, 0, &big).unwrap()).unwrap();
    let bcopy = bc.copym(5, 8990).unwrap();
    assert_eq!(content(&bcopy), &big[5..8995]);
    drop((c, at, before, across));
    assert_eq!(a.in_use(), 0);
}

#[test]
fn copym_failing_page_ref_leaks_nothing() {
    let (a, f, p) = RefBudget::over(8, usize::MAX);
    let (c, e) = mixed_chain(&p);
    // A second page mbuf after the first one.
    let mut c = c;
    let (m2, e2) = page_mbuf(&p, 2, 0, 10, 40);
    c.append_mbuf(m2).unwrap();
    let mut e = e;
    e.extend_from_slice(&e2);
    f.set(0);
    assert!(matches!(c.copym(0, c.len()), Err(MbufError::Page(_))));
    check_refs(&a, &[&c]);
    assert_eq!(a.in_use(), 5);
    // Byte-only ranges need no reference.
    let ok = c.copym(0, 100).unwrap();
    assert_eq!(content(&ok), &e[..100]);
    f.set(usize::MAX);
    let all = c.copym(0, c.len()).unwrap();
    assert_eq!(content(&all), e);
    check_refs(&a, &[&c, &all]);
    drop((c, ok, all));
    assert_eq!(a.in_use(), 0);
    assert_eq!(a.bad_unrefs(), 0);
}

#[test]
fn copym_ref_exhausted_midway_releases_taken_refs() {
    let (a, f, p) = RefBudget::over(32, usize::MAX);
    let mut c = Chain::new();
    let (m1, _) = page_mbuf(&p, 5, 7, 9, 1);
    c.append_mbuf(m1).unwrap();
    c.append(b"xdr").unwrap();
    let (m2, _) = page_mbuf(&p, 4, 0, PAGE_SIZE, 2);
    c.append_mbuf(m2).unwrap();
    // 9 references needed: fail at every point, inside either page mbuf.
    for budget in 0..9 {
        f.set(budget);
        assert!(matches!(c.copym(0, c.len()), Err(MbufError::Page(_))));
        check_refs(&a, &[&c]);
        assert_eq!(a.in_use(), 9);
    }
    f.set(9);
    let all = c.copym(0, c.len()).unwrap();
    check_refs(&a, &[&c, &all]);
    drop((c, all));
    assert_eq!(a.in_use(), 0);
    assert_eq!(a.bad_unrefs(), 0);
}

/// The default `read_page` / `write_page` (through `with_page` / `with_page_mut`) copy exactly
/// the range asked for, leave the rest of the page alone, and refuse ranges past the page
/// and free pages.
#[test]
fn read_page_and_write_page_ranges() {
    let (_a, p) = arena(2);
    let x = p.alloc_page().unwrap();
    p.write_page(x, 0, &[0xee; PAGE_SIZE]).unwrap();
    p.write_page(x, 4000, &[1, 2, 3]).unwrap();
    let mut got = [0u8; 5];
    p.read_page(x, 3999, &mut got).unwrap();
    assert_eq!(got, [0xee, 1, 2, 3, 0xee]);
    p.write_page(x, PAGE_SIZE, &[]).unwrap();
    assert_eq!(
        p.write_page(x, PAGE_SIZE - 1, &[9, 9]),
        Err(PageError::Unmappable(x))
    );
    assert_eq!(
        p.read_page(x, usize::MAX, &mut got),
        Err(PageError::Unmappable(x))
    );
    let mut whole = [0u8; PAGE_SIZE];
    p.read_page(x, 0, &mut whole).unwrap();
    assert_eq!(whole.iter().filter(|&&b| b != 0xee).count(), 3);
    p.page_unref(x);
    assert!(p.read_page(x, 0, &mut got).is_err());
    assert!(p.write_page(x, 0, &got).is_err());
}

#[test]
fn changed_runs_are_the_maximal_differing_ranges() {
    use crate::changed_runs;
    let before = [0u8; 16];
    let mut after = before;
    assert_eq!(changed_runs(&before, &after).count(), 0);
    for i in [0, 1, 2, 7, 9, 10, 15] {
        after[i] = 1;
    }
    let runs: std::vec::Vec<_> = changed_runs(&before, &after).collect();
    assert_eq!(runs, [0..3, 7..8, 9..11, 15..16]);
    // Every byte outside the runs is equal; every byte inside differs.
    for i in 0..16 {
        assert_eq!(runs.iter().any(|r| r.contains(&i)), before[i] != after[i]);
    }
}

/// A provider reaching its pages only by copies, through [`edit_page_by_copy`]; it records
/// every `write_page` as (offset, length).
struct CopyingPages {
    inner: HeapPageArena,
    writes: spin::Mutex<Vec<(usize, usize)>>,
}

impl PageProvider for CopyingPages {
    fn alloc_page(&self) -> Result<u64, AllocError> {
        self.inner.alloc_page()
    }
    fn page_ref(&self, addr: u64) -> Result<(), PageError> {
        self.inner.page_ref(addr)
    }
    fn page_unref(&self, addr: u64) {
        self.inner.page_unref(addr)
    }
    fn with_page(&self, addr: u64, f: &mut dyn FnMut(&[u8])) -> Result<(), PageError> {
        self.inner.with_page(addr, f)
    }
    fn with_page_mut(&self, addr: u64, f: &mut dyn FnMut(&mut [u8])) -> Result<(), PageError> {
        let mut before = [0u8; PAGE_SIZE];
        let mut after = [0u8; PAGE_SIZE];
        edit_page_by_copy(self, addr, &mut before, &mut after, f)
    }
    fn read_page(&self, addr: u64, offset: usize, dst: &mut [u8]) -> Result<(), PageError> {
        self.inner.read_page(addr, offset, dst)
    }
    fn write_page(&self, addr: u64, offset: usize, src: &[u8]) -> Result<(), PageError> {
        self.writes.lock().push((offset, src.len()));
        self.inner.write_page(addr, offset, src)
    }
}

#[test]
fn edit_page_by_copy_writes_back_only_the_changed_runs() {
    let p = CopyingPages {
        inner: HeapPageArena::new(1).unwrap(),
        writes: spin::Mutex::new(Vec::new()),
    };
    let x = p.alloc_page().unwrap();
    p.inner.write_page(x, 0, &[7u8; PAGE_SIZE]).unwrap();
    p.with_page_mut(x, &mut |pg: &mut [u8]| {
        pg[5] = 1;
        pg[100..103].copy_from_slice(&[2, 3, 4]);
        pg[200] = 7; // unchanged value: not a change
    })
    .unwrap();
    assert_eq!(*p.writes.lock(), [(5, 1), (100, 3)]);
    let mut got = [0u8; PAGE_SIZE];
    p.read_page(x, 0, &mut got).unwrap();
    assert_eq!((got[4], got[5], got[6]), (7, 1, 7));
    assert_eq!(&got[99..104], &[7, 2, 3, 4, 7]);
    // Scratch buffers of different lengths are refused, nothing read or written.
    let (mut a, mut b) = ([0u8; 8], [0u8; 9]);
    let r = edit_page_by_copy(&p, x, &mut a, &mut b, &mut |_: &mut [u8]| {});
    assert_eq!(r, Err(PageError::Unmappable(x)));
    assert_eq!(p.writes.lock().len(), 2);
}

#[test]
fn chain_pool_reuses_storage_and_keeps_the_larger_buffers() {
    use crate::ChainPool;
    let pool = ChainPool::new(2).unwrap();
    assert_eq!(pool.spare(), 0);
    let mut c = pool.chain();
    assert!(c.is_pooled());
    c.append(&[1u8; 100]).unwrap();
    c.append_mbuf(Mbuf::ddp_marker()).unwrap();
    c.append(&[2u8; 100]).unwrap();
    // A split of a pooled chain is pooled too; both give their storage back when dropped.
    let tail = c.split(100).unwrap();
    assert!(tail.is_pooled());
    assert_eq!(tail.len(), 100);
    drop(c);
    drop(tail);
    assert_eq!(pool.spare(), 2);
    let again = pool.chain();
    assert!(again.mbuf_capacity() > 0);
    assert_eq!(again.mbuf_count(), 0);
    drop(again);
    // Full: a larger buffer replaces the smallest, a smaller one is dropped.
    let mut big = Chain::new();
    for _ in 0..40 {
        big.append_mbuf(Mbuf::ddp_marker()).unwrap();
    }
    let big_cap = big.mbuf_capacity();
    pool.recycle(big);
    assert_eq!(pool.spare(), 2);
    let found = pool.chain_with(big_cap);
    assert!(found.mbuf_capacity() >= big_cap);
    assert_eq!(pool.spare(), 1);
    drop(found);
    // A recycled chain starting with an internal mbuf is kept apart, with that mbuf.
    pool.recycle(Chain::from_bytes(b"x").unwrap());
    assert_eq!(pool.spare(), 3);
    assert!(pool.chain_with(big_cap).mbuf_capacity() >= big_cap);
}

#[test]
fn chain_pool_refills_a_recycled_mbuf_in_place() {
    use crate::ChainPool;
    let (a, p) = arena(4);
    let pool = ChainPool::new(1).unwrap();
    // A recycled chain keeps its first internal mbuf, emptied; the others are freed.
    let mut c = Chain::from_bytes(&[1u8; 100]).unwrap();
    c.append(&[2u8; 300]).unwrap();
    c.cat(Chain::alloc_pages(&p, 5000).unwrap()).unwrap();
    assert!(c.mbuf_count() > 2);
    pool.recycle(c);
    assert_eq!(
        a.in_use(),
        0,
        "the recycled chain's pages are released at once"
    );
    assert_eq!(pool.spare(), 1);
    let d = pool.chain_from_bytes(&[3u8; 50]).unwrap();
    assert_eq!(pool.spare(), 0, "the kept mbuf was taken");
    assert!(d.is_pooled());
    assert_eq!((d.mbuf_count(), d.len()), (1, 50));
    assert_eq!(d.to_vec().unwrap(), vec![3u8; 50]);
    assert_eq!(d.first().unwrap().flags(), MbufFlags::empty());
    assert_eq!(d.first().unwrap().kind(), MbufKind::Internal);
    d.check_invariants().unwrap();
    // Its storage comes back (empty) when it is dropped; a chain of bytes is then built anew.
    drop(d);
    assert_eq!(pool.spare(), 1);
    let e = pool.chain_from_bytes(b"xyz").unwrap();
    assert_eq!(e.to_vec().unwrap(), b"xyz");
    assert!(e.is_pooled());
    drop(e);
    // More than an internal mbuf holds: clusters, as `append` makes them.
    let big = pool.chain_from_bytes(&[4u8; 1000]).unwrap();
    assert_eq!(big.to_vec().unwrap(), vec![4u8; 1000]);
    assert_eq!(big.first().unwrap().kind(), MbufKind::Cluster);
    drop(big);
    // Nothing is kept of a chain starting with a marker, a page mbuf or a read-only mbuf.
    let mut m = Chain::new();
    m.append_mbuf(Mbuf::ddp_marker()).unwrap();
    m.append(b"abc").unwrap();
    pool.recycle(m);
    pool.recycle(Chain::alloc_pages(&p, 100).unwrap());
    let mut ro = Chain::from_bytes(b"ro").unwrap();
    ro.mbufs_mut()
        .next()
        .unwrap()
        .insert_flags(MbufFlags::RDONLY);
    pool.recycle(ro);
    assert_eq!(a.in_use(), 0);
    let f = pool.chain_from_bytes(b"abcd").unwrap();
    assert_eq!(f.to_vec().unwrap(), b"abcd");
    assert!(f.mbufs().all(|m| !m.is_ddp_marker() && m.is_writable()));
    assert_eq!(pool.spare(), 0);
    // A chain of the pool recycled into it is kept without its link to the pool (no cycle).
    pool.recycle(f);
    assert_eq!(pool.spare(), 1);
    assert_eq!(Arc::strong_count(&pool), 1);
}

#[test]
fn set_bytes_is_clear_then_append() {
    let mut c = Chain::from_bytes(&[7u8; 50]).unwrap();
    c.append_mbuf(Mbuf::ddp_marker()).unwrap();
    c.append(&[8u8; 300]).unwrap();
    c.set_bytes(&[9u8; 20]).unwrap();
    assert_eq!(c.to_vec().unwrap(), vec![9u8; 20]);
    assert_eq!(c.mbuf_count(), 1);
    c.set_bytes(&[5u8; 3000]).unwrap();
    assert_eq!(c.to_vec().unwrap(), vec![5u8; 3000]);
    c.check_invariants().unwrap();
    c.set_bytes(&[]).unwrap();
    assert!(c.is_empty());
}

#[test]
fn first_chain_storage_stays_within_one_kib_and_then_grows() {
    let mbuf = core::mem::size_of::<Mbuf>();
    let c = Chain::from_bytes(&pattern(1, 100)).unwrap();
    assert!(c.mbuf_capacity() >= 1);
    assert!(
        c.mbuf_capacity() * mbuf <= 1024,
        "{} mbufs of {mbuf} bytes",
        c.mbuf_capacity()
    );
    // Past the first storage the chain grows as before, content intact.
    let mut c = Chain::new();
    for i in 0..10u8 {
        c.append_mbuf(Mbuf::internal(&[i]).unwrap()).unwrap();
    }
    assert_eq!(c.mbuf_count(), 10);
    assert_eq!(content(&c), (0..10u8).collect::<Vec<u8>>());
    // Nothing to add: no storage is allocated.
    let mut a = Chain::new();
    a.cat(Chain::new()).unwrap();
    assert_eq!(a.mbuf_capacity(), 0);
}
