//! The bridge over the emulated `struct mbuf` (host, feature `emu`; no RDMA device needed:
//! the emulation's page arena is plain memory). Every test checks that no page wiring, mbuf,
//! cluster or M_EXTPG mbuf is left.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::sync::{Arc, Mutex};

use mbuf::{Chain, PageProvider, PAGE_SIZE};
use nfs_proto::chain::{data_pages_from_bytes, ddp_call, ddp_reply};
use nfs_proto::nfs3::{NfsFh3, ReadHead, StableHow, WriteHead, NFSPROC3_WRITE, NFS_PROGRAM};
use onc_rpc::rpc::{Auth, CallHeader, ReplyHeader};
use onc_rpc::xdr::Encoder;

use krpc_face::mbuf_bridge::{counts, MbufBridge};
use ofed_shim::KernelPages;
use ofed_testkit::emu_mbuf::{self, Part, M_EXTPG, M_PKTHDR, M_PROTO1, M_RDONLY};

/// The emulation's counters are process-wide: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const SIZES: &[usize] = &[0, 1, 3, 4, 4095, 4096, 4097, (1 << 20) + 3];

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 12) as u8))
        .collect()
}

fn provider() -> Arc<dyn PageProvider> {
    Arc::new(KernelPages::new())
}

/// Pages wired, mbufs, clusters and M_EXTPG mbufs live now, bridge M_EXTPG mbufs live.
fn live() -> (u64, u64, u64, u64, u64) {
    let s = emu_mbuf::mbuf_stats();
    (
        emu_mbuf::pages_in_use(),
        s.mbufs_live,
        s.clusters_live,
        s.extpg_live,
        counts().extpg_live,
    )
}

/// An NFSv3 WRITE call with `data` in page mbufs (nfs-proto's builders).
pub(crate) fn write_call(p: &Arc<dyn PageProvider>, xid: u32, data: &[u8]) -> Chain {
    let mut e = Encoder::new();
    CallHeader {
        xid,
        prog: NFS_PROGRAM,
        vers: 3,
        proc_: NFSPROC3_WRITE,
        cred: Auth::None,
        verf: Auth::None,
    }
    .encode(&mut e);
    WriteHead {
        file: NfsFh3 { data: vec![7; 32] },
        offset: 4096,
        count: data.len() as u32,
        stable: StableHow::FileSync,
    }
    .encode_head(&mut e, data.len() as u32);
    let head = e.finish().unwrap();
    ddp_call(&head, data_pages_from_bytes(p, data).unwrap(), &[]).unwrap()
}

/// An NFSv3 READ reply with `data` in page mbufs.
pub(crate) fn read_reply(p: &Arc<dyn PageProvider>, xid: u32, data: &[u8]) -> Chain {
    let mut e = Encoder::new();
    ReplyHeader::success(xid).encode(&mut e);
    ReadHead {
        status: nfs_proto::nfs3::Nfsstat3::OK,
        file_attributes: None,
        count: data.len() as u32,
        eof: true,
        data_len: data.len() as u32,
    }
    .encode(&mut e);
    let head = e.finish().unwrap();
    ddp_reply(&head, data_pages_from_bytes(p, data).unwrap(), &[]).unwrap()
}

fn chain_pages(c: &Chain) -> Vec<u64> {
    c.mbufs()
        .filter_map(|m| m.page_info().map(|p| p.pages.to_vec()))
        .flatten()
        .collect()
}

/// (marker index, offset, length) of each DDP region.
fn regions_of(c: &Chain) -> Vec<(usize, usize, usize)> {
    c.ddp_regions()
        .map(|r| (r.marker_index, r.offset, r.len))
        .collect()
}

fn markers(c: &Chain) -> Vec<usize> {
    let mut pos = 0;
    let mut v = Vec::new();
    for m in c.mbufs() {
        if m.is_ddp_marker() {
            v.push(pos);
        }
        pos += m.len();
    }
    v
}

/// Rust -> FreeBSD -> Rust at every padding size, for a WRITE call and a READ reply: bytes,
/// marker places, DDP regions and page identity kept; the M_EXTPG mbufs at most 5 pages, the
/// bridge's free routine, read-only; no page byte copied (same pages); nothing left.
#[test]
fn round_trips_at_the_padding_sizes() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let p = provider();
    let mut br = MbufBridge::new(16, 64).unwrap();
    let before = live();
    let c0 = counts();
    for &n in SIZES {
        for what in ["WRITE call", "READ reply"] {
            let chain = if what == "WRITE call" {
                write_call(&p, n as u32, &pattern(n, 1))
            } else {
                read_reply(&p, n as u32, &pattern(n, 2))
            };
            let step = format!("{what} of {n} bytes");
            chain.check_invariants().unwrap();
            let bytes = chain.to_vec().unwrap();
            let regions = regions_of(&chain);
            let pages = chain_pages(&chain);
            let marks = markers(&chain);
            assert_eq!(marks.len(), 1, "{step}: one marker");

            let fb = br
                .mbufs_from_chain(chain, false, true)
                .map_err(|(e, _)| e)
                .unwrap()
                .expect("non-empty");
            assert_eq!(emu_mbuf::bytes(&fb), bytes, "{step}: FreeBSD chain bytes");
            let inf = emu_mbuf::info(&fb);
            assert!(inf[0].flags & M_PKTHDR != 0, "{step}: M_PKTHDR first");
            for x in inf.iter().filter(|x| x.flags & M_EXTPG != 0) {
                assert!(x.npgs >= 1 && x.npgs <= 5, "{step}: {x:?}");
                assert_eq!(x.is_bridge, 1, "{step}: the bridge's free routine");
                assert!(x.flags & M_RDONLY != 0, "{step}: M_EXTPG read-only");
            }
            assert_eq!(emu_mbuf::extpg_pages(&fb), pages, "{step}: the same pages");
            let fm = emu_mbuf::markers(&fb);
            assert_eq!(
                fm.iter().map(|m| m.0).collect::<Vec<_>>(),
                marks,
                "{step}: marker at the same offset"
            );
            assert!(
                fm.iter().all(|m| m.1),
                "{step}: marker followed by the data"
            );
            if n > 0 {
                let after = inf
                    .iter()
                    .position(|x| x.flags & M_PROTO1 != 0 && x.len == 0)
                    .unwrap();
                assert!(
                    inf[after + 1].flags & M_EXTPG != 0,
                    "{step}: M_EXTPG behind"
                );
            }

            // SAFETY: `fb` is a live chain we own, unchanged during the call.
            let back = unsafe { br.chain_from_mbufs(fb.as_ptr(), &p) }.unwrap();
            back.check_invariants().unwrap();
            assert_eq!(back.to_vec().unwrap(), bytes, "{step}: bytes back");
            // (Page mbufs come back in 5-page pieces: FreeBSD's MBUF_PEXT_MAX_PGS.)
            assert_eq!(regions_of(&back), regions, "{step}: regions");
            assert_eq!(chain_pages(&back), pages, "{step}: pages back");
            assert_eq!(markers(&back), marks, "{step}: marker back");
            // Both hold the pages now; either may go first.
            if n % 2 == 0 {
                drop(fb);
                drop(back);
            } else {
                drop(back);
                drop(fb);
            }
            assert_eq!(live(), before, "{step}: everything returned");
        }
    }
    let c1 = counts();
    assert_eq!(c1.page_refs - c0.page_refs, c1.page_unrefs - c0.page_unrefs);
    assert!(
        c1.extpg_built - c0.extpg_built >= 2 * 52,
        "1 MiB + 3 in 5-page mbufs"
    );
}

/// Chains as FreeBSD's NFS builds them (XDR in small mbufs and clusters, the marker, the data
/// in M_EXTPG mbufs of fresh pages at an odd first offset): page mbufs over the same pages,
/// bytes and the DDP region exact; the Rust chain let go first, the NFS free routine then
/// frees every page (it would panic on a page the Rust side still wired).
#[test]
fn nfs_built_chains_become_page_mbufs_over_the_same_pages() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let kp = KernelPages::new();
    let p = provider();
    let mut br = MbufBridge::default();
    let before = live();
    for &n in SIZES.iter().filter(|&&n| n > 0) {
        let data = pattern(n, 3);
        let head = pattern(120, 4);
        let tail = vec![0u8; (4 - n % 4) % 4];
        let mut parts = vec![Part::Bytes(&head, 50), Part::Marker];
        parts.push(Part::Pages {
            data: &data,
            first_off: 100,
            hdr: &[],
            trl: &[],
        });
        if !tail.is_empty() {
            parts.push(Part::Bytes(&tail, 0));
        }
        let fb = emu_mbuf::nfs_chain(&kp, &parts);
        let freed0 = emu_mbuf::mbuf_stats().nfs_pages_freed;
        let src = emu_mbuf::bytes(&fb);
        let fpages = emu_mbuf::extpg_pages(&fb);
        let nextpg = emu_mbuf::info(&fb)
            .iter()
            .filter(|x| x.flags & M_EXTPG != 0)
            .count();
        // SAFETY: `fb` is live and unchanged during the call.
        let c = unsafe { br.chain_from_mbufs(fb.as_ptr(), &p) }.unwrap();
        c.check_invariants().unwrap();
        assert_eq!(c.to_vec().unwrap(), src, "{n}: bytes");
        assert_eq!(chain_pages(&c), fpages, "{n}: the very pages");
        assert_eq!(c.mbufs().filter(|m| m.is_pages()).count(), nextpg);
        let r: Vec<_> = c.ddp_regions().collect();
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].offset, r[0].len),
            (head.len(), n),
            "{n}: the DDP region"
        );
        let first = c
            .mbufs()
            .find(|m| m.is_pages())
            .unwrap()
            .page_info()
            .unwrap();
        assert_eq!(first.first_off, 100);
        drop(c);
        drop(fb);
        assert_eq!(
            emu_mbuf::mbuf_stats().nfs_pages_freed - freed0,
            fpages.len() as u64,
            "{n}: NFS's free routine freed every page"
        );
        assert_eq!(live(), before, "{n}: everything returned");
    }
}

/// M_EXTPG header and trailer bytes, and windows left by m_adj (m_data as an offset into
/// header | pages | trailer): clipped exactly; a window without page bytes becomes plain
/// bytes. Back the other way, a 24-byte page-mbuf header (FreeBSD's holds 23) goes into an
/// ordinary mbuf in front.
#[test]
fn extpg_header_trailer_and_windows() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let kp = KernelPages::new();
    let p = provider();
    let mut br = MbufBridge::default();
    let before = live();
    let hdr = pattern(23, 5);
    let trl = pattern(64, 6);
    let data = pattern(3 * PAGE_SIZE - 10 - 20, 7); // 3 pages, first_off 10, last 4076
    for (off, cut) in [
        (0u32, 0u32),
        (5, 7),
        (23 + 5000, 0),
        (0, 64 + 100),
        (3, 64 + 12000),
    ] {
        let mut fb = emu_mbuf::nfs_chain(
            &kp,
            &[
                Part::Bytes(b"abcd", 0),
                Part::Pages {
                    data: &data,
                    first_off: 10,
                    hdr: &hdr,
                    trl: &trl,
                },
            ],
        );
        let total = emu_mbuf::info(&fb)[1].len as u32;
        emu_mbuf::window(&mut fb, 1, off, total - off - cut);
        let src = emu_mbuf::bytes(&fb);
        // SAFETY: live and unchanged.
        let c = unsafe { br.chain_from_mbufs(fb.as_ptr(), &p) }.unwrap();
        c.check_invariants().unwrap();
        assert_eq!(c.to_vec().unwrap(), src, "window {off}/{cut}: bytes");
        let pm = c
            .mbufs()
            .find(|m| m.is_pages())
            .unwrap()
            .page_info()
            .unwrap();
        let h0 = (off as usize).min(23);
        assert_eq!(pm.hdr, &hdr[h0..], "window {off}/{cut}: header");
        let t1 = 64usize.saturating_sub(cut as usize);
        assert_eq!(pm.trl, &trl[..t1], "window {off}/{cut}: trailer");
        let all = emu_mbuf::extpg_pages(&fb);
        let skip = usize::from(off >= 23 + 4086) + usize::from(off >= 23 + 4086 + 4096);
        assert_eq!(pm.pages[0], all[skip], "window {off}/{cut}: first page");
        drop(c);
        drop(fb);
    }
    // A window of header bytes only, and one of trailer bytes only.
    for (off, len) in [(2u32, 20u32), (23 + (data.len() as u32) + 1, 60)] {
        let mut fb = emu_mbuf::nfs_chain(
            &kp,
            &[Part::Pages {
                data: &data,
                first_off: 10,
                hdr: &hdr,
                trl: &trl,
            }],
        );
        emu_mbuf::window(&mut fb, 0, off, len);
        let src = emu_mbuf::bytes(&fb);
        // SAFETY: live and unchanged.
        let c = unsafe { br.chain_from_mbufs(fb.as_ptr(), &p) }.unwrap();
        assert_eq!(c.to_vec().unwrap(), src);
        assert!(
            c.mbufs().all(|m| !m.is_pages()),
            "no page mbuf without page bytes"
        );
        drop(c);
        drop(fb);
    }
    // Rust -> FreeBSD with a 24-byte header and a 64-byte trailer.
    let mut chain = data_pages_from_bytes(&p, &data).unwrap();
    let m = chain.mbufs_mut().next().unwrap();
    m.set_epg_hdr(&pattern(24, 8)).unwrap();
    m.set_epg_trl(&trl).unwrap();
    let bytes = chain.to_vec().unwrap();
    let fb = br
        .mbufs_from_chain(chain, true, false)
        .map_err(|(e, _)| e)
        .unwrap()
        .unwrap();
    assert_eq!(emu_mbuf::bytes(&fb), bytes);
    let inf = emu_mbuf::info(&fb);
    assert_eq!(
        (inf[0].flags & M_EXTPG, inf[0].len),
        (0, 24),
        "header in front"
    );
    assert_eq!(inf[1].hdrlen, 0);
    assert_eq!(inf.last().unwrap().trllen, 64);
    drop(fb);
    assert_eq!(live(), before, "everything returned");
}

/// A chain whose pages the emulation does not know (not kernel pages) is refused with
/// nothing built, and handed back whole.
#[test]
fn foreign_pages_are_refused_and_the_chain_handed_back() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let heap: Arc<dyn PageProvider> = Arc::new(mbuf::HeapPageArena::new(8).unwrap());
    let mut br = MbufBridge::default();
    let before = live();
    let chain = data_pages_from_bytes(&heap, &pattern(5000, 9)).unwrap();
    let len = chain.len();
    let (e, back) = br.mbufs_from_chain(chain, true, false).unwrap_err();
    assert_eq!(e, krpc_face::BridgeError::Invalid);
    assert_eq!(back.len(), len);
    assert_eq!(live(), before);
}

/// `cl_call`'s shape: the call header and credential in one chain, the caller's `args` (with
/// the marker and the M_EXTPG data) in another, walked one after the other into one Chain:
/// bytes concatenated, the DDP region behind the header, the page indices of the second part
/// shifted past the first's pages.
#[test]
fn header_and_args_walked_as_one_call() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let kp = KernelPages::new();
    let p = provider();
    let mut br = MbufBridge::default();
    let before = live();
    let data_a = pattern(3 * PAGE_SIZE, 20);
    let data_b = pattern(9 * PAGE_SIZE + 1, 21);
    let rpc_head = pattern(40, 22);
    let args_head = pattern(36, 23);
    // The "header" part carries pages too, so the second part's indices must be shifted.
    let hdr_chain = emu_mbuf::nfs_chain(
        &kp,
        &[
            Part::Bytes(&rpc_head, 0),
            Part::Pages {
                data: &data_a,
                first_off: 0,
                hdr: &[],
                trl: &[],
            },
        ],
    );
    let args = emu_mbuf::nfs_chain(
        &kp,
        &[
            Part::Bytes(&args_head, 12),
            Part::Marker,
            Part::Pages {
                data: &data_b,
                first_off: 0,
                hdr: &[],
                trl: &[],
            },
            Part::Bytes(&[0, 0, 0], 0),
        ],
    );
    let mut want = emu_mbuf::bytes(&hdr_chain);
    want.extend(emu_mbuf::bytes(&args));
    let mut want_pages = emu_mbuf::extpg_pages(&hdr_chain);
    want_pages.extend(emu_mbuf::extpg_pages(&args));
    // SAFETY: both chains live and unchanged during the call.
    let c = unsafe { br.chain_from_mbuf_parts(&[hdr_chain.as_ptr(), args.as_ptr()], &p) }.unwrap();
    c.check_invariants().unwrap();
    assert_eq!(c.to_vec().unwrap(), want);
    assert_eq!(
        chain_pages(&c),
        want_pages,
        "page indices of the second part shifted"
    );
    let r = regions_of(&c);
    let m = c.mbufs().position(|m| m.is_ddp_marker()).unwrap();
    assert_eq!(r, vec![(m, 40 + data_a.len() + 36, data_b.len())]);
    drop(c);
    drop(args);
    drop(hdr_chain);
    assert_eq!(live(), before);
}
