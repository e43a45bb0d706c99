//! Host tests only (feature `emu`): the emulated `struct mbuf` of `emu/kpi_emu_mbuf.h` seen
//! from Rust — its live counts, a per-mbuf inspection, `m_copydata`, and chains built the
//! way FreeBSD's NFS builds them (XDR in `m_get`/`m_getcl` mbufs, a zero-length M_PROTO1
//! marker, the data in M_EXTPG mbufs of at most 5 freshly wired pages freed by an
//! `mb_free_mext_pgs`-style routine that unwires and frees unconditionally).
//!
//! Test fixtures, never in a kernel build: a failure here is a failed test, so they assert.
#![allow(clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

use alloc::vec::Vec;

use mbuf::{PageProvider, PAGE_SIZE};

use krpc_face::ffi::FbsdMbuf;
use krpc_face::MbufChain;
use ofed_shim::KernelPages;

/// `struct krpc_emu_mbuf_stats`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EmuMbufStats {
    /// Mbufs not yet freed.
    pub mbufs_live: u64,
    /// Clusters not yet freed.
    pub clusters_live: u64,
    /// M_EXTPG mbufs not yet freed.
    pub extpg_live: u64,
    /// Pages freed by the NFS-style free routine.
    pub nfs_pages_freed: u64,
}

/// `struct krpc_emu_minfo`: one mbuf.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EmuMinfo {
    /// `m_epg_pa` (M_EXTPG).
    pub pa: [u64; 5],
    /// `m_data`.
    pub data: u64,
    /// `m_len`.
    pub len: i32,
    /// `m_flags`.
    pub flags: u32,
    /// `m_epg_1st_off`.
    pub first_off: u16,
    /// `m_epg_last_len`.
    pub last_len: u16,
    /// `m_epg_npgs`.
    pub npgs: u8,
    /// `m_epg_hdrlen`.
    pub hdrlen: u8,
    /// `m_epg_trllen`.
    pub trllen: u8,
    /// Its free routine is the bridge's.
    pub is_bridge: u8,
}

/// `M_EXTPG`.
pub const M_EXTPG: u32 = 0x100;
/// `M_PROTO1`.
pub const M_PROTO1: u32 = 0x2000;
/// `M_PKTHDR`.
pub const M_PKTHDR: u32 = 0x2;
/// `M_RDONLY`.
pub const M_RDONLY: u32 = 0x8;

extern "C" {
    fn krpc_emu_get_mbuf_stats(out: *mut EmuMbufStats);
    fn krpc_emu_m_info(m: *const FbsdMbuf, idx: u32, out: *mut EmuMinfo) -> i32;
    fn krpc_emu_m_bytes(p: *const u8, len: u32, seg: u32) -> *mut FbsdMbuf;
    fn krpc_emu_m_marker() -> *mut FbsdMbuf;
    fn krpc_emu_m_extpg_new(hdr: *const u8, hdrlen: u32) -> *mut FbsdMbuf;
    fn krpc_emu_m_extpg_add(m: *mut FbsdMbuf, pa: u64, off: u32, len: u32) -> i32;
    fn krpc_emu_m_extpg_trail(m: *mut FbsdMbuf, trl: *const u8, trllen: u32) -> i32;
    fn krpc_emu_m_cat(a: *mut FbsdMbuf, b: *mut FbsdMbuf) -> *mut FbsdMbuf;
    fn krpc_emu_m_window(m: *mut FbsdMbuf, idx: u32, off: u32, len: u32) -> i32;
    fn krpc_emu_m_copydata(m: *const FbsdMbuf, off: u32, len: u32, out: *mut u8) -> i32;
}

/// The emulation's mbuf counts.
pub fn mbuf_stats() -> EmuMbufStats {
    let mut s = EmuMbufStats::default();
    // SAFETY: a valid out-pointer of the C struct's layout.
    unsafe { krpc_emu_get_mbuf_stats(&mut s) };
    s
}

/// Every mbuf of `m`, in order.
pub fn info(m: &MbufChain) -> Vec<EmuMinfo> {
    let mut v = Vec::new();
    let mut i = 0;
    loop {
        let mut x = EmuMinfo::default();
        // SAFETY: `m` is a live chain we own; `x` a valid out-pointer.
        if unsafe { krpc_emu_m_info(m.as_ptr(), i, &mut x) } != 0 {
            return v;
        }
        v.push(x);
        i += 1;
    }
}

/// All bytes of `m` (`m_copydata`, which reads M_EXTPG pages through the direct map).
pub fn bytes(m: &MbufChain) -> Vec<u8> {
    let total: usize = info(m).iter().map(|x| x.len.max(0) as usize).sum();
    let mut v = alloc::vec![0u8; total];
    // SAFETY: `v` holds `total` bytes, the chain's length.
    let rc = unsafe { krpc_emu_m_copydata(m.as_ptr(), 0, total as u32, v.as_mut_ptr()) };
    assert_eq!(rc, 0, "m_copydata");
    v
}

/// Narrow mbuf `idx` of `m` to `[off, off + len)` of its bytes (what `m_adj` leaves).
pub fn window(m: &mut MbufChain, idx: u32, off: u32, len: u32) {
    // SAFETY: `m` is a live chain we own.
    let rc = unsafe { krpc_emu_m_window(m.as_ptr(), idx, off, len) };
    assert_eq!(rc, 0, "window");
}

/// One piece of an NFS-style chain.
#[derive(Debug, Clone, Copy)]
pub enum Part<'a> {
    /// XDR bytes in mbufs/clusters of at most `seg` bytes each.
    Bytes(&'a [u8], u32),
    /// The zero-length M_PROTO1 marker.
    Marker,
    /// Data in M_EXTPG mbufs of at most 5 fresh pages each, starting `first_off` into the
    /// first page; `hdr` on the first and `trl` on the last M_EXTPG mbuf.
    Pages {
        /// The data.
        data: &'a [u8],
        /// Offset in the first page.
        first_off: usize,
        /// `m_epg_hdr` bytes of the first mbuf.
        hdr: &'a [u8],
        /// `m_epg_trail` bytes of the last mbuf.
        trl: &'a [u8],
    },
}

/// A chain of `parts` as FreeBSD's NFS would build it; the pages come from `pages`
/// (`KernelPages`: the emulation's arena) and are owned by the M_EXTPG mbufs.
pub fn nfs_chain(pages: &KernelPages, parts: &[Part<'_>]) -> MbufChain {
    let mut head: *mut FbsdMbuf = core::ptr::null_mut();
    for p in parts {
        let m = match *p {
            // SAFETY: `b` is readable for its length.
            Part::Bytes(b, seg) => unsafe { krpc_emu_m_bytes(b.as_ptr(), b.len() as u32, seg) },
            // SAFETY: no arguments.
            Part::Marker => unsafe { krpc_emu_m_marker() },
            Part::Pages {
                data,
                first_off,
                hdr,
                trl,
            } => extpg_run(pages, data, first_off, hdr, trl),
        };
        assert!(!m.is_null(), "emulated mbuf allocation");
        // SAFETY: both are live chains we own; the result is `head` or `m`.
        head = unsafe { krpc_emu_m_cat(head, m) };
    }
    // SAFETY: the chain just built is ours.
    unsafe { MbufChain::from_raw(head) }.expect("non-empty chain")
}

/// `data` in M_EXTPG mbufs grown page by page as FreeBSD's NFS does (`nfsm_add_ext_pgs`):
/// a fresh page for each `PAGE_SIZE` of data (the first from `first_off`), appended to the
/// current mbuf until it has `MBUF_PEXT_MAX_PGS` (5), then a new mbuf; `hdr` on the first
/// mbuf, `trl` set on the last one at the end.
fn extpg_run(
    pages: &KernelPages,
    data: &[u8],
    first_off: usize,
    hdr: &[u8],
    trl: &[u8],
) -> *mut FbsdMbuf {
    const MAX_PGS: u8 = 5;
    assert!(!data.is_empty() && first_off < PAGE_SIZE);
    let mut head: *mut FbsdMbuf = core::ptr::null_mut();
    let mut m: *mut FbsdMbuf = core::ptr::null_mut();
    let mut npgs = 0u8;
    let mut pos = 0;
    while pos < data.len() {
        if m.is_null() || npgs == MAX_PGS {
            let h = if head.is_null() { hdr } else { &[][..] };
            // SAFETY: `h` is readable for its length.
            m = unsafe { krpc_emu_m_extpg_new(h.as_ptr(), h.len() as u32) };
            assert!(!m.is_null(), "krpc_emu_m_extpg_new");
            // SAFETY: live chains we own.
            head = unsafe { krpc_emu_m_cat(head, m) };
            npgs = 0;
        }
        let pa = pages.alloc_page().expect("page");
        let off = if pos == 0 { first_off } else { 0 };
        let n = (PAGE_SIZE - off).min(data.len() - pos);
        pages
            .write_page(pa, off, &data[pos..pos + n])
            .expect("write");
        // SAFETY: `m` is the live mbuf just made; it takes over our wiring of the page.
        let rc = unsafe { krpc_emu_m_extpg_add(m, pa, off as u32, n as u32) };
        assert_eq!(rc, 0, "krpc_emu_m_extpg_add");
        npgs += 1;
        pos += n;
    }
    // SAFETY: `m` is the chain's last mbuf; `trl` is readable for its length.
    let rc = unsafe { krpc_emu_m_extpg_trail(m, trl.as_ptr(), trl.len() as u32) };
    assert_eq!(rc, 0, "krpc_emu_m_extpg_trail");
    head
}

/// One DDP-eligible item in Macklem's layout, as FreeBSD's NFS builds it: `head` (the XDR
/// before the data, in mbufs of at most `seg` bytes), the M_PROTO1 marker, `data` in M_EXTPG
/// mbufs from the start of fresh pages, and the item's XDR roundup pad (zero bytes).
pub fn ddp_chain(pages: &KernelPages, head: &[u8], seg: u32, data: &[u8]) -> MbufChain {
    let zeros = [0u8; 3];
    let pad = zeros.get(..(4 - data.len() % 4) % 4).unwrap_or(&[]);
    nfs_chain(
        pages,
        &[
            Part::Bytes(head, seg),
            Part::Marker,
            Part::Pages {
                data,
                first_off: 0,
                hdr: &[],
                trl: &[],
            },
            Part::Bytes(pad, 0),
        ],
    )
}

/// `struct krpc_emu_stats` of `emu/kpi_emu.h`: what the emulation counted since the process
/// started (the host tests compare two snapshots).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct EmuStats {
    /// `IB_WR_REG_MR` posted (as memory-window binds).
    pub reg_mr_binds: u64,
    /// `IB_WR_LOCAL_INV` posted.
    pub local_invs: u64,
    /// `IB_WR_SEND_WITH_INV` posted.
    pub send_invs: u64,
    /// Receive completions that named an invalidated key.
    pub remote_invs_seen: u64,
    /// Of those, reported through rxe's unflagged-invalidation quirk.
    pub remote_invs_quirk: u64,
    /// `LOCAL_INV`s of unbound windows refused (would crash the guest kernel).
    pub refused_double_inv: u64,
    /// `ib_map_mr_sg` calls that mapped only a prefix of the list.
    pub partial_maps: u64,
    /// CQ completion upcalls made.
    pub cq_upcalls: u64,
    /// rdma_cm events delivered.
    pub cm_events: u64,
    /// Arena pages wired now.
    pub pages_in_use: u64,
    /// `rdma_disconnect` calls made with an `mtx(9)` held (it may sleep).
    pub disconnects_locked: u64,
}

extern "C" {
    fn krpc_emu_get_stats(out: *mut EmuStats);
}

/// The emulation's counters now.
pub fn emu_stats() -> EmuStats {
    let mut s = EmuStats::default();
    // SAFETY: a valid out-pointer of the C struct's layout.
    unsafe { krpc_emu_get_stats(&mut s) };
    s
}

/// Arena pages wired now (any wiring: the kernel's "page references").
pub fn pages_in_use() -> u64 {
    emu_stats().pages_in_use
}

/// The page addresses of `m`'s M_EXTPG mbufs, in order.
pub fn extpg_pages(m: &MbufChain) -> Vec<u64> {
    info(m)
        .iter()
        .filter(|x| x.flags & M_EXTPG != 0)
        .flat_map(|x| x.pa[..usize::from(x.npgs)].to_vec())
        .collect()
}

/// Offsets (chain positions) of `m`'s zero-length M_PROTO1 mbufs, each checked to be followed
/// by an M_EXTPG mbuf or nothing (`false` for a marker followed by anything else).
pub fn markers(m: &MbufChain) -> Vec<(usize, bool)> {
    let v = info(m);
    let mut out = Vec::new();
    let mut pos = 0usize;
    for (i, x) in v.iter().enumerate() {
        if x.flags & M_PROTO1 != 0 && x.len == 0 {
            let next_ok = v
                .get(i + 1)
                .is_none_or(|n| n.flags & M_EXTPG != 0 || n.len > 0);
            out.push((pos, next_ok));
        }
        pos += x.len.max(0) as usize;
    }
    out
}

/// The first zero-length M_PROTO1 mbuf (the marker) of `inf` (a chain's [`info`]): its index
/// in `inf` and its offset in the chain (the bytes of the mbufs in front of it).
pub fn first_marker(inf: &[EmuMinfo]) -> Option<(usize, usize)> {
    let i = inf
        .iter()
        .position(|x| x.flags & M_PROTO1 != 0 && x.len == 0)?;
    Some((i, inf.iter().take(i).map(|x| x.len as usize).sum()))
}
