//! Property tests: random chains mixing internal, cluster, page and marker mbufs, driven by
//! random operation sequences and checked against a flat `Vec<u8>` model after every step.

// Test-only file: clippy.toml allows these in `#[test]` functions, but the helpers here are
// plain functions of the test crate.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::sync::Arc;

use mbuf::*;
use proptest::prelude::*;

const ARENA_PAGES: usize = 320;

/// Run `body` over a fresh arena of `pages` pages; once `body` returned (and so dropped
/// whatever it built), no page of the arena may be in use. The arena, for further checks.
fn with_arena(
    pages: usize,
    body: impl FnOnce(&Arc<HeapPageArena>) -> Result<(), TestCaseError>,
) -> Result<Arc<HeapPageArena>, TestCaseError> {
    let arena = Arc::new(HeapPageArena::new(pages).unwrap());
    body(&arena)?;
    prop_assert_eq!(arena.in_use(), 0);
    Ok(arena)
}

// ---------------------------------------------------------------- generation

#[derive(Debug, Clone)]
enum MSpec {
    Internal {
        lead: usize,
        len: usize,
        seed: u8,
        ro: bool,
    },
    Cluster {
        size: usize,
        lead: usize,
        len: usize,
        seed: u8,
        ro: bool,
    },
    Pages {
        npgs: usize,
        first_off: usize,
        last_len: usize,
        hdr: usize,
        trl: usize,
        seed: u8,
        ro: bool,
    },
    Marker,
}

fn ro() -> impl Strategy<Value = bool> {
    prop::bool::weighted(0.08)
}

fn mspec() -> impl Strategy<Value = MSpec> {
    let internal = (0..=MLEN, any::<usize>(), any::<u8>(), ro()).prop_map(|(len, l, seed, ro)| {
        MSpec::Internal {
            lead: l % (MLEN - len + 1),
            len,
            seed,
            ro,
        }
    });
    let cluster = (
        prop_oneof![3 => Just(MCLBYTES), 1 => 1usize..=9000],
        any::<usize>(),
        any::<usize>(),
        any::<u8>(),
        ro(),
    )
        .prop_map(|(size, len, lead, seed, ro)| {
            let len = len % (size + 1);
            MSpec::Cluster {
                size,
                lead: lead % (size - len + 1),
                len,
                seed,
                ro,
            }
        });
    let pages = (
        prop_oneof![8 => 1usize..=3, 1 => 4usize..=16],
        prop_oneof![Just(0), Just(PAGE_SIZE - 1), 0..PAGE_SIZE],
        prop_oneof![Just(1), Just(PAGE_SIZE), 1..=PAGE_SIZE],
        prop_oneof![3 => Just(0usize), 1 => 0..=MAX_EPG_HDR],
        prop_oneof![3 => Just(0usize), 1 => 0..=MAX_EPG_TRL],
        any::<u8>(),
        ro(),
    )
        .prop_map(|(npgs, first_off, last_len, hdr, trl, seed, ro)| {
            // Single page: data must end inside the page.
            let last_len = if npgs == 1 {
                1 + (last_len - 1) % (PAGE_SIZE - first_off)
            } else {
                last_len
            };
            MSpec::Pages {
                npgs,
                first_off,
                last_len,
                hdr,
                trl,
                seed,
                ro,
            }
        });
    prop_oneof![3 => internal, 2 => cluster, 4 => pages, 1 => Just(MSpec::Marker)]
}

fn bytes(seed: u8, n: usize) -> Vec<u8> {
    let mut x = u32::from(seed)
        .wrapping_mul(2_654_435_761)
        .wrapping_add(12345);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Build an mbuf; `None` (with nothing leaked) if the arena is exhausted.
fn build(spec: &MSpec, arena: &Arc<HeapPageArena>) -> Option<(Mbuf, Vec<u8>)> {
    let prov: Arc<dyn PageProvider> = arena.clone();
    let set_ro = |mut m: Mbuf, ro: bool| {
        if ro {
            m.insert_flags(MbufFlags::RDONLY);
        }
        m
    };
    Some(match *spec {
        MSpec::Internal {
            lead,
            len,
            seed,
            ro,
        } => {
            let d = bytes(seed, len);
            (
                set_ro(Mbuf::internal_with_leading(lead, &d).unwrap(), ro),
                d,
            )
        }
        MSpec::Cluster {
            size,
            lead,
            len,
            seed,
            ro,
        } => {
            let d = bytes(seed, len);
            (set_ro(Mbuf::cluster_with(size, lead, &d).unwrap(), ro), d)
        }
        MSpec::Pages {
            npgs,
            first_off,
            last_len,
            hdr,
            trl,
            seed,
            ro,
        } => {
            let contents: Vec<Vec<u8>> = (0..npgs)
                .map(|i| bytes(seed.wrapping_add(i as u8 * 13 + 1), PAGE_SIZE))
                .collect();
            let addrs = testing::filled_pages(&*prov, &contents)?;
            let mut expect = bytes(seed ^ 0x55, hdr);
            expect.extend_from_slice(&testing::page_bytes(&contents, first_off, last_len));
            let mut m = Mbuf::pages(prov, &addrs, first_off, last_len).unwrap();
            m.set_epg_hdr(&expect[..hdr]).unwrap();
            let t = bytes(seed ^ 0xaa, trl);
            m.set_epg_trl(&t).unwrap();
            expect.extend_from_slice(&t);
            (set_ro(m, ro), expect)
        }
        MSpec::Marker => (Mbuf::ddp_marker(), Vec::new()),
    })
}

/// Offset selector, resolved against the current chain.
#[derive(Debug, Clone)]
enum Sel {
    /// Uniform in `0..=len`.
    Any(u32),
    /// A fragment/mbuf boundary (page boundaries, header ends, ...) plus a small delta.
    Boundary(u32, i8),
    /// Past the end (`len + 1 + k`).
    Past(u8),
}

fn sel() -> impl Strategy<Value = Sel> {
    prop_oneof![
        4 => any::<u32>().prop_map(Sel::Any),
        4 => (any::<u32>(), -1i8..=1).prop_map(|(i, d)| Sel::Boundary(i, d)),
        1 => any::<u8>().prop_map(Sel::Past),
    ]
}

fn boundaries(c: &Chain) -> Vec<usize> {
    let mut v = vec![0];
    let mut pos = 0;
    for f in c.fragments() {
        pos += f.len();
        v.push(pos);
    }
    v
}

fn resolve(s: &Sel, c: &Chain) -> usize {
    let len = c.len();
    match *s {
        Sel::Any(r) => r as usize % (len + 1),
        Sel::Boundary(i, d) => {
            let b = boundaries(c);
            let x = b[i as usize % b.len()] as isize + isize::from(d);
            x.clamp(0, len as isize) as usize
        }
        Sel::Past(k) => len + 1 + usize::from(k),
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// Split main; `swap`: continue with the right part as main (left becomes side).
    Split(Sel, bool),
    CatSide,
    CatNew(Vec<MSpec>),
    Copydata(Sel, usize),
    Copyback(Sel, usize, u8),
    Adj(Sel, bool),
    /// `raw`: use `prepend(n)` and fill the returned slice.
    Prepend(usize, u8, bool),
    Append(usize, u8),
    AppendMbuf(MSpec),
    Pullup(Sel),
    PullupN(usize),
    AllocPages(usize),
    SwapSide,
    /// `copym(off, len)` of main becomes the side chain (the old side is dropped).
    Copym(Sel, Sel),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (sel(), any::<bool>()).prop_map(|(s, b)| Op::Split(s, b)),
        1 => Just(Op::CatSide),
        1 => prop::collection::vec(mspec(), 0..3).prop_map(Op::CatNew),
        2 => (sel(), 0usize..3000).prop_map(|(s, n)| Op::Copydata(s, n)),
        3 => (sel(), prop_oneof![0usize..300, 0usize..6000], any::<u8>())
            .prop_map(|(s, n, x)| Op::Copyback(s, n, x)),
        3 => (sel(), any::<bool>()).prop_map(|(s, b)| Op::Adj(s, b)),
        2 => (prop_oneof![0usize..=MLEN, 0usize..3000], any::<u8>(), any::<bool>())
            .prop_map(|(n, x, r)| Op::Prepend(n, x, r)),
        2 => (prop_oneof![0usize..300, 0usize..5000], any::<u8>())
            .prop_map(|(n, x)| Op::Append(n, x)),
        2 => mspec().prop_map(Op::AppendMbuf),
        2 => sel().prop_map(Op::Pullup),
        1 => (0usize..=MCLBYTES + 2).prop_map(Op::PullupN),
        1 => prop_oneof![0usize..=3 * PAGE_SIZE, 0usize..=40 * PAGE_SIZE].prop_map(Op::AllocPages),
        1 => Just(Op::SwapSide),
        2 => (sel(), sel()).prop_map(|(a, b)| Op::Copym(a, b)),
    ]
}

// ---------------------------------------------------------------- model and checks

/// A chain with its flat model: bytes, whether it has a packet header, marker offsets.
struct Modeled {
    c: Chain,
    v: Vec<u8>,
    pkthdr: bool,
    markers: Vec<usize>,
}

impl Modeled {
    fn empty() -> Self {
        Modeled {
            c: Chain::new(),
            v: Vec::new(),
            pkthdr: false,
            markers: Vec::new(),
        }
    }
}

fn build_chain(specs: &[MSpec], pkthdr: bool, arena: &Arc<HeapPageArena>) -> Modeled {
    let mut m = Modeled::empty();
    for s in specs {
        if let Some((mb, d)) = build(s, arena) {
            if mb.is_ddp_marker() {
                m.markers.push(m.v.len());
            }
            m.c.append_mbuf(mb).unwrap();
            m.v.extend_from_slice(&d);
        }
    }
    if pkthdr {
        if let Some(f) = m.c.mbufs_mut().next() {
            f.insert_flags(MbufFlags::PKTHDR);
            m.pkthdr = true;
        }
    }
    m
}

fn read_chain(c: &Chain, arena: &HeapPageArena) -> Vec<u8> {
    let mut out = Vec::new();
    for f in c.fragments() {
        assert!(!f.is_empty(), "empty fragment yielded");
        match f {
            Fragment::Bytes(b) => out.extend_from_slice(b),
            Fragment::Page { addr, offset, len } => {
                assert!(offset + len <= PAGE_SIZE);
                arena
                    .with_page(addr, &mut |pg| {
                        out.extend_from_slice(&pg[offset..offset + len])
                    })
                    .unwrap();
            }
        }
    }
    out
}

fn marker_positions(c: &Chain) -> Vec<usize> {
    let mut v = Vec::new();
    let mut pos = 0;
    for m in c.mbufs() {
        if m.is_ddp_marker() {
            v.push(pos);
        }
        pos += m.len();
    }
    v
}

fn check_one(m: &mut Modeled, arena: &HeapPageArena) -> Result<(), TestCaseError> {
    let c = &m.c;
    prop_assert_eq!(c.len(), m.v.len());
    prop_assert_eq!(c.is_empty(), m.v.is_empty());
    prop_assert!(c.to_vec().unwrap() == m.v, "to_vec differs from model");
    prop_assert!(read_chain(c, arena) == m.v, "fragments differ from model");
    if let Err(e) = c.check_invariants() {
        return Err(TestCaseError::fail(format!("invariant: {e}")));
    }
    // Page invariants, checked independently of the crate's own checker.
    for mb in c.mbufs() {
        if let Some(i) = mb.page_info() {
            let n = i.pages.len();
            prop_assert!((1..=MAX_PGS_PER_MBUF).contains(&n));
            prop_assert!(i.first_off < PAGE_SIZE);
            prop_assert!((1..=PAGE_SIZE).contains(&i.last_len));
            if n == 1 {
                prop_assert!(i.first_off + i.last_len <= PAGE_SIZE);
            }
            prop_assert!(i.page_bytes > 0);
            prop_assert!(mb.len() == i.hdr.len() + i.page_bytes + i.trl.len());
            prop_assert!(mb.flags().contains(MbufFlags::EXTPG));
        } else {
            prop_assert!(!mb.flags().contains(MbufFlags::EXTPG));
        }
    }
    // Packet header on the first mbuf only, as modeled.
    if c.mbuf_count() == 0 {
        m.pkthdr = false;
    }
    for (i, mb) in c.mbufs().enumerate() {
        let has = mb.flags().contains(MbufFlags::PKTHDR);
        prop_assert_eq!(has, i == 0 && m.pkthdr, "PKTHDR on mbuf {}", i);
    }
    // Markers where the model says.
    prop_assert_eq!(marker_positions(c), m.markers.clone());
    // DDP regions: start right after the marker, cover exactly the following page mbufs.
    let mbufs: Vec<&Mbuf> = c.mbufs().collect();
    for r in c.ddp_regions() {
        prop_assert!(mbufs[r.marker_index].is_ddp_marker());
        let before: usize = mbufs[..=r.marker_index].iter().map(|m| m.len()).sum();
        prop_assert_eq!(r.offset, before);
        let run = &mbufs[r.marker_index + 1..r.marker_index + 1 + r.page_mbufs];
        prop_assert!(run.iter().all(|m| m.is_pages()));
        prop_assert_eq!(r.len, run.iter().map(|m| m.len()).sum::<usize>());
        if let Some(next) = mbufs.get(r.marker_index + 1 + r.page_mbufs) {
            prop_assert!(!next.is_pages());
        }
        let has_inline = run.iter().any(|m| {
            m.page_info()
                .is_some_and(|i| !i.hdr.is_empty() || !i.trl.is_empty())
        });
        match c.page_fragments_in(r.range()) {
            Ok(it) => {
                prop_assert!(!has_inline);
                let frags: Vec<PageFragment> = it.collect();
                prop_assert_eq!(frags.iter().map(|f| f.len).sum::<usize>(), r.len);
            }
            Err(e) => {
                prop_assert_eq!(e, MbufError::NotPageData);
                prop_assert!(has_inline);
            }
        }
    }
    Ok(())
}

/// Provider reference counts equal the number of page-array entries naming each page.
fn check_refs(chains: &[&Chain], arena: &HeapPageArena) -> Result<(), TestCaseError> {
    let mut counts = std::collections::HashMap::<u64, u32>::new();
    for c in chains {
        for m in c.mbufs() {
            if let Some(i) = m.page_info() {
                for &a in i.pages {
                    *counts.entry(a).or_default() += 1;
                }
            }
        }
    }
    for idx in 0..arena.capacity() {
        let a = arena.page_addr(idx).unwrap();
        let want = counts.get(&a).copied().unwrap_or(0);
        prop_assert_eq!(arena.refcount(a), Some(want), "page {:#x}", a);
    }
    prop_assert_eq!(arena.in_use(), counts.len());
    prop_assert_eq!(arena.bad_unrefs(), 0);
    Ok(())
}

fn readonly_overlap(c: &Chain, off: usize, end: usize) -> bool {
    let mut pos = 0;
    for m in c.mbufs() {
        let l = m.len();
        if !m.is_writable() && pos.max(off) < (pos + l).min(end) {
            return true;
        }
        pos += l;
    }
    false
}

// ---------------------------------------------------------------- one step

fn apply(
    op: &Op,
    main: &mut Modeled,
    side: &mut Modeled,
    arena: &Arc<HeapPageArena>,
) -> Result<(), TestCaseError> {
    match op {
        Op::Split(s, swap) => {
            let off = resolve(s, &main.c);
            let len = main.v.len();
            match main.c.split(off) {
                Ok(right) => {
                    prop_assert!(off <= len);
                    let rv = main.v.split_off(off);
                    let rm: Vec<usize> = main
                        .markers
                        .iter()
                        .filter(|&&p| p >= off)
                        .map(|p| p - off)
                        .collect();
                    main.markers.retain(|&p| p < off);
                    let r = Modeled {
                        c: right,
                        v: rv,
                        pkthdr: main.pkthdr,
                        markers: rm,
                    };
                    // The old side chain is dropped here (its pages released).
                    if *swap {
                        *side = std::mem::replace(main, r);
                    } else {
                        *side = r;
                    }
                }
                Err(e) => {
                    prop_assert!(off > len);
                    prop_assert!(
                        matches!(e, MbufError::OutOfRange { .. }),
                        "unexpected error"
                    );
                }
            }
        }
        Op::CatSide => {
            let s = std::mem::replace(side, Modeled::empty());
            let base = main.v.len();
            main.markers.extend(s.markers.iter().map(|p| p + base));
            main.v.extend_from_slice(&s.v);
            let had_mbufs = main.c.mbuf_count() > 0;
            main.c.cat(s.c).unwrap();
            if !had_mbufs {
                main.pkthdr = false;
            }
        }
        Op::CatNew(specs) => {
            let n = build_chain(specs, true, arena);
            let base = main.v.len();
            main.markers.extend(n.markers.iter().map(|p| p + base));
            main.v.extend_from_slice(&n.v);
            main.c.cat(n.c).unwrap();
        }
        Op::Copydata(s, n) => {
            let off = resolve(s, &main.c);
            let mut buf = vec![0u8; *n];
            match main.c.copydata(off, &mut buf) {
                Ok(()) => prop_assert!(buf[..] == main.v[off..off + n]),
                Err(e) => {
                    prop_assert!(off + n > main.v.len());
                    prop_assert!(
                        matches!(e, MbufError::OutOfRange { .. }),
                        "unexpected error"
                    );
                }
            }
        }
        Op::Copyback(s, n, seed) => {
            let off = resolve(s, &main.c);
            let src = bytes(*seed, *n);
            let len = main.v.len();
            let expect_ro = off <= len && readonly_overlap(&main.c, off, (off + n).min(len));
            match main.c.copyback(off, &src) {
                Ok(()) => {
                    prop_assert!(off <= len && !expect_ro);
                    let over = (off + n).min(len);
                    main.v[off..over].copy_from_slice(&src[..over - off]);
                    main.v.extend_from_slice(&src[over - off..]);
                }
                Err(MbufError::OutOfRange { .. }) => prop_assert!(off > len),
                Err(MbufError::ReadOnly) => prop_assert!(expect_ro),
                Err(e) => return Err(TestCaseError::fail(format!("copyback: {e}"))),
            }
        }
        Op::Adj(s, neg) => {
            let k = resolve(s, &main.c);
            let len = main.v.len();
            let n = if *neg { -(k as i64) } else { k as i64 };
            match main.c.adj(n) {
                Ok(()) => {
                    prop_assert!(k <= len);
                    if *neg {
                        main.v.truncate(len - k);
                        if k > 0 {
                            main.markers.retain(|&p| p < len - k);
                        }
                    } else {
                        main.v.drain(..k);
                        if k > 0 {
                            main.markers.retain(|&p| p >= k);
                            main.markers.iter_mut().for_each(|p| *p -= k);
                        }
                    }
                }
                Err(e) => {
                    prop_assert!(k > len);
                    prop_assert!(
                        matches!(e, MbufError::OutOfRange { .. }),
                        "unexpected error"
                    );
                }
            }
        }
        Op::Prepend(n, seed, raw) => {
            let d = bytes(*seed, *n);
            if *raw {
                let s = main.c.prepend(*n).unwrap();
                prop_assert_eq!(s.len(), *n);
                s.copy_from_slice(&d);
            } else {
                main.c.prepend_bytes(&d).unwrap();
            }
            if *n > 0 {
                main.markers.iter_mut().for_each(|p| *p += n);
            }
            main.v.splice(0..0, d);
        }
        Op::Append(n, seed) => {
            let d = bytes(*seed, *n);
            main.c.append(&d).unwrap();
            main.v.extend_from_slice(&d);
        }
        Op::AppendMbuf(spec) => {
            if let Some((mb, d)) = build(spec, arena) {
                if mb.is_ddp_marker() {
                    main.markers.push(main.v.len());
                }
                main.c.append_mbuf(mb).unwrap();
                main.v.extend_from_slice(&d);
            }
        }
        Op::Pullup(_) | Op::PullupN(_) => {
            let n = match op {
                // Mostly within the pullup limit (boundaries and all), sometimes just above.
                Op::Pullup(s) => match resolve(s, &main.c) {
                    n if n > MCLBYTES + 1 => n % (MCLBYTES + 2),
                    n => n,
                },
                Op::PullupN(n) => *n,
                _ => 0,
            };
            let len = main.v.len();
            let crosses = main.markers.iter().any(|&p| p < n);
            let before = main.c.mbuf_count();
            match main.c.pullup(n) {
                Ok(got) => {
                    prop_assert!(n <= MCLBYTES && n <= len);
                    prop_assert!(got == &main.v[..n]);
                    if n > 0 {
                        prop_assert!(!crosses);
                        let first = main.c.first().unwrap();
                        prop_assert!(first.data().unwrap().len() >= n);
                    }
                }
                Err(MbufError::TooLarge { .. }) => prop_assert!(n > MCLBYTES),
                Err(MbufError::OutOfRange { .. }) => prop_assert!(n <= MCLBYTES && n > len),
                Err(MbufError::CrossesDdpMarker) => {
                    prop_assert!(n <= MCLBYTES && n <= len && crosses);
                    prop_assert_eq!(main.c.mbuf_count(), before);
                }
                Err(e) => return Err(TestCaseError::fail(format!("pullup: {e}"))),
            }
        }
        Op::AllocPages(len) => {
            let prov: Arc<dyn PageProvider> = arena.clone();
            let need = len.div_ceil(PAGE_SIZE);
            let free = arena.free_pages();
            match Chain::alloc_pages(&prov, *len) {
                Ok(pc) => {
                    prop_assert!(need <= free);
                    prop_assert_eq!(pc.len(), *len);
                    prop_assert_eq!(pc.mbuf_count(), len.div_ceil(MAX_PGS_PER_MBUF * PAGE_SIZE));
                    main.v.extend_from_slice(&pc.to_vec().unwrap());
                    main.c.cat(pc).unwrap();
                }
                Err(e) => {
                    prop_assert_eq!(e, MbufError::Alloc);
                    prop_assert!(need > free);
                    prop_assert_eq!(arena.free_pages(), free, "pages leaked on failure");
                }
            }
        }
        Op::SwapSide => std::mem::swap(main, side),
        Op::Copym(a, b) => {
            let off = resolve(a, &main.c);
            let n = resolve(b, &main.c);
            // The old side is dropped here: its pages are released.
            *side = Modeled::empty();
            *side = apply_copym(main, off, n)?;
            // The source stays writable (copym takes `&self`) and writes through it would
            // show in the copy's shared pages; like FreeBSD (shared storage is not
            // writable), the model's caller marks the source's page mbufs read-only.
            for m in main.c.mbufs_mut().filter(|m| m.is_pages()) {
                m.insert_flags(MbufFlags::RDONLY);
            }
        }
    }
    Ok(())
}

/// `copym(off, n)` of `src`, checked against the model: `Some` copy on success (with its
/// model), `None` for an expected out-of-range error.
fn copym_model(src: &Modeled, off: usize, n: usize) -> Result<Option<Modeled>, TestCaseError> {
    let len = src.v.len();
    match src.c.copym(off, n) {
        Ok(c) => {
            prop_assert!(off + n <= len);
            let markers = src
                .markers
                .iter()
                .filter(|&&p| p >= off && p < off + n)
                .map(|p| p - off)
                .collect();
            for m in c.mbufs() {
                // Shared pages are read-only in the copy; copied bytes are writable.
                prop_assert_eq!(m.is_writable(), !m.is_pages());
            }
            Ok(Some(Modeled {
                c,
                v: src.v[off..off + n].to_vec(),
                pkthdr: src.pkthdr,
                markers,
            }))
        }
        Err(e) => {
            prop_assert!(off.saturating_add(n) > len);
            prop_assert!(matches!(e, MbufError::OutOfRange { .. }), "copym: {}", e);
            Ok(None)
        }
    }
}

fn apply_copym(main: &Modeled, off: usize, n: usize) -> Result<Modeled, TestCaseError> {
    Ok(copym_model(main, off, n)?.unwrap_or_else(Modeled::empty))
}

fn check_all(
    main: &mut Modeled,
    side: &mut Modeled,
    arena: &HeapPageArena,
) -> Result<(), TestCaseError> {
    check_one(main, arena)?;
    check_one(side, arena)?;
    check_refs(&[&main.c, &side.c], arena)
}

// ---------------------------------------------------------------- properties

/// Cases per property: 512, or `MBUF_PROP_CASES` for longer soak runs.
fn cases() -> u32 {
    std::env::var("MBUF_PROP_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(512)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Random chains + up to 30 random operations; content, invariants, markers, PKTHDR,
    /// DDP regions and provider reference counts checked after every step; no page leaked
    /// after dropping everything.
    #[test]
    fn ops_match_flat_model(
        specs in prop::collection::vec(mspec(), 0..7),
        pkthdr in any::<bool>(),
        ops in prop::collection::vec(op(), 1..=30),
    ) {
        let arena = with_arena(ARENA_PAGES, |arena| {
            let mut main = build_chain(&specs, pkthdr, arena);
            let mut side = Modeled::empty();
            check_all(&mut main, &mut side, arena)?;
            for op in &ops {
                apply(op, &mut main, &mut side, arena)?;
                check_all(&mut main, &mut side, arena)?;
            }
            Ok(())
        })?;
        prop_assert_eq!(arena.bad_unrefs(), 0);
    }

    /// copym of a random range: content equals the model slice, markers in `[off, off + n)`
    /// are copied, page mbufs of the copy are read-only, provider reference counts equal the
    /// page-array entries across both chains, dropping either first keeps the other intact,
    /// and nothing is leaked once both are dropped.
    #[test]
    fn copym_matches_model(
        specs in prop::collection::vec(mspec(), 0..8),
        pkthdr in any::<bool>(),
        a in sel(),
        b in sel(),
        drop_src_first in any::<bool>(),
        wseed in any::<u8>(),
    ) {
        let arena = with_arena(ARENA_PAGES, |arena| {
            let mut src = build_chain(&specs, pkthdr, arena);
            let off = resolve(&a, &src.c);
            let n = resolve(&b, &src.c);
            if let Some(mut copy) = copym_model(&src, off, n)? {
                check_all(&mut src, &mut copy, arena)?;
                // Writing into the copy: refused iff a shared (page) mbuf is hit.
                let w = bytes(wseed, 3);
                let at = off.min(copy.v.len());
                let over = (at + w.len()).min(copy.v.len());
                let ro = readonly_overlap(&copy.c, at, over);
                match copy.c.copyback(at, &w) {
                    Ok(()) => {
                        prop_assert!(!ro);
                        copy.v[at..over].copy_from_slice(&w[..over - at]);
                        copy.v.extend_from_slice(&w[over - at..]);
                    }
                    Err(e) => {
                        prop_assert!(ro);
                        prop_assert_eq!(e, MbufError::ReadOnly);
                    }
                }
                check_all(&mut src, &mut copy, arena)?;
                let mut empty = Modeled::empty();
                if drop_src_first {
                    drop(src);
                    check_all(&mut copy, &mut empty, arena)?;
                } else {
                    drop(copy);
                    check_all(&mut src, &mut empty, arena)?;
                }
            }
            Ok(())
        })?;
        prop_assert_eq!(arena.bad_unrefs(), 0);
    }

    /// split at any offset (biased to page/header/mbuf boundaries) then cat restores the
    /// content; both halves are valid; page references are exact throughout.
    #[test]
    fn split_then_cat_roundtrips(
        specs in prop::collection::vec(mspec(), 1..8),
        s in sel(),
    ) {
        with_arena(ARENA_PAGES, |arena| {
            let mut m = build_chain(&specs, false, arena);
            let before = m.v.clone();
            let off = resolve(&s, &m.c);
            match m.c.split(off) {
                Ok(right) => {
                    let len = before.len();
                    prop_assert!(off <= len);
                    let mut r = Modeled {
                        c: right,
                        v: before[off..].to_vec(),
                        pkthdr: false,
                        markers: m.markers.iter().filter(|&&p| p >= off).map(|p| p - off).collect(),
                    };
                    let mut l = Modeled {
                        c: std::mem::take(&mut m.c),
                        v: before[..off].to_vec(),
                        pkthdr: false,
                        markers: m.markers.iter().filter(|&&p| p < off).copied().collect(),
                    };
                    check_all(&mut l, &mut r, arena)?;
                    l.c.cat(r.c).unwrap();
                    prop_assert!(l.c.to_vec().unwrap() == before);
                    prop_assert_eq!(marker_positions(&l.c), m.markers.clone());
                    check_refs(&[&l.c], arena)?;
                }
                Err(_) => prop_assert!(off > before.len()),
            }
            Ok(())
        })?;
    }

    /// For k > 0, adj(+k) leaves the same bytes, markers and mbuf lengths as the right part
    /// of split(k); adj(-k) the same as the left part of split(len - k); adj(0) changes
    /// nothing.
    #[test]
    fn adj_equals_split(
        specs in prop::collection::vec(mspec(), 1..8),
        s in sel(),
        neg in any::<bool>(),
    ) {
        with_arena(2 * ARENA_PAGES, |arena| {
            let mut a = build_chain(&specs, false, arena);
            let mut b = build_chain(&specs, false, arena);
            let len = a.v.len();
            let k = resolve(&s, &a.c).min(len);
            let expect = if k == 0 {
                // adj(0) is a no-op (split(len) would move trailing zero-length mbufs).
                a.c.adj(0).unwrap();
                std::mem::take(&mut b.c)
            } else if neg {
                a.c.adj(-(k as i64)).unwrap();
                drop(b.c.split(len - k).unwrap());
                std::mem::take(&mut b.c)
            } else {
                a.c.adj(k as i64).unwrap();
                let right = b.c.split(k).unwrap();
                b.c.clear();
                right
            };
            prop_assert!(a.c.to_vec().unwrap() == expect.to_vec().unwrap());
            prop_assert_eq!(marker_positions(&a.c), marker_positions(&expect));
            let la: Vec<usize> = a.c.mbufs().map(Mbuf::len).collect();
            let lb: Vec<usize> = expect.mbufs().map(Mbuf::len).collect();
            prop_assert_eq!(la, lb);
            a.c.check_invariants().map_err(TestCaseError::fail)?;
            check_refs(&[&a.c, &expect], arena)?;
            Ok(())
        })?;
    }

    /// Random pullup/prepend/append sequences on chains holding pages never lose bytes and
    /// the pulled-up prefix always equals the model.
    #[test]
    fn copydata_every_window(
        specs in prop::collection::vec(mspec(), 1..6),
        windows in prop::collection::vec((sel(), 0usize..20_000), 1..20),
    ) {
        with_arena(ARENA_PAGES, |arena| {
            let m = build_chain(&specs, false, arena);
            for (s, n) in &windows {
                let off = resolve(s, &m.c);
                let mut buf = vec![0u8; *n];
                match m.c.copydata(off, &mut buf) {
                    Ok(()) => prop_assert!(buf[..] == m.v[off..off + n]),
                    Err(_) => prop_assert!(off + n > m.v.len()),
                }
                if off + n <= m.v.len() {
                    let mut via = Vec::new();
                    for f in m.c.fragments_in(off..off + n).unwrap() {
                        match f {
                            Fragment::Bytes(b) => via.extend_from_slice(b),
                            Fragment::Page { addr, offset, len } => arena
                                .with_page(addr, &mut |pg| via.extend_from_slice(&pg[offset..offset + len]))
                                .unwrap(),
                        }
                    }
                    prop_assert!(via[..] == m.v[off..off + n]);
                }
            }
            Ok(())
        })?;
    }
}
