//! The mbuf bridge: FreeBSD `struct mbuf` chains (M_EXTPG page mbufs included) to and from
//! the core's [`mbuf::Chain`], through flat descriptors ([`KrpcMdesc`]).
//!
//! The C side (`c/krpc_rdma_mbuf.c`, compiled against `sys/sys/mbuf.h`, or unchanged against
//! the emulated `struct mbuf` of `ofed-testkit/emu/kpi_emu_mbuf.h`) walks and builds the chains; this
//! side never reads a FreeBSD struct layout, only [`KrpcMdesc`]s and page addresses.
//!
//! * **FreeBSD → Rust** ([`MbufBridge::chain_from_mbufs`]): ordinary mbufs and clusters (XDR)
//!   are copied into internal/cluster mbufs ([`Chain::append`]); each M_EXTPG mbuf becomes one
//!   page mbuf over the same physical pages (`m_epg_pa[]`, `m_epg_1st_off`,
//!   `m_epg_last_len`, clipped to the mbuf's `m_data`/`m_len` window), with its
//!   `m_epg_hdr`/`m_epg_trail` bytes as the page mbuf's header/trailer; **no page byte is
//!   copied**. The page mbuf holds its own reference on each page
//!   ([`PageProvider::page_ref`]: with [`KernelPages`](ofed_shim::KernelPages), one more wiring,
//!   `vm_page_wire`), so the pages stay allocated until both the FreeBSD chain's free
//!   routine and the Rust chain have let go. The zero-length M_PROTO1 mbuf becomes
//!   [`Mbuf::ddp_marker`].
//! * **Rust → FreeBSD** ([`MbufBridge::mbufs_from_chain`]): XDR bytes are copied into
//!   `m_get`/`m_getcl` mbufs (packed), each page mbuf becomes M_EXTPG mbufs of at most
//!   `MBUF_PEXT_MAX_PGS` (5 on amd64) pages over the same pages, each taking one wiring per
//!   page that its free routine (`krpc_mbuf_free_pages`: `vm_page_unwire_noq`, then
//!   `vm_page_free` at the last wiring) gives back; the Rust chain is then dropped, which
//!   releases its own references: the references move to the M_EXTPG mbufs. Markers become
//!   zero-length M_PROTO1 mbufs.
//!
//! The descriptor and page-address arrays are the bridge's scratch, kept between calls: they
//! grow (fallibly) only when a chain is larger than every chain before.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ptr::NonNull;

use mbuf::{Chain, Mbuf, MbufError, PageProvider};

use crate::ffi::{self, FbsdMbuf, KrpcMdesc};

/// Why a conversion failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BridgeError {
    /// A malformed mbuf (walk: `EINVAL`), descriptor (build: `EINVAL`) or page address.
    Invalid,
    /// Out of memory (mbufs, clusters, scratch).
    NoMemory,
    /// The provider refused a page reference.
    Page,
    /// Building the [`Chain`] failed.
    Mbuf(MbufError),
    /// Another errno from the C side.
    Errno(i32),
}

impl From<MbufError> for BridgeError {
    fn from(e: MbufError) -> Self {
        BridgeError::Mbuf(e)
    }
}

const EINVAL: i32 = 22;
const ENOMEM: i32 = 12;
const E2BIG: i32 = 7;

fn errno(rc: i32) -> BridgeError {
    match rc {
        EINVAL => BridgeError::Invalid,
        ENOMEM => BridgeError::NoMemory,
        other => BridgeError::Errno(other),
    }
}

/// An owned FreeBSD mbuf chain (non-empty); dropping it is `m_freem`.
#[derive(Debug)]
pub struct MbufChain(NonNull<FbsdMbuf>);

// SAFETY: an mbuf chain is plain memory owned by whoever holds its head; the kernel hands
// chains between threads (the krpc's callers, its upcalls) all the time.
unsafe impl Send for MbufChain {}

impl MbufChain {
    /// Take ownership of the chain `m` (`None` for NULL).
    ///
    /// # Safety
    /// `m` is NULL or the head of a valid chain nobody else frees.
    pub unsafe fn from_raw(m: *mut FbsdMbuf) -> Option<Self> {
        NonNull::new(m).map(MbufChain)
    }

    /// The head, still owned by `self`.
    pub fn as_ptr(&self) -> *mut FbsdMbuf {
        self.0.as_ptr()
    }

    /// Give up ownership: the caller frees the chain (`m_freem`).
    pub fn into_raw(self) -> *mut FbsdMbuf {
        let p = self.0.as_ptr();
        core::mem::forget(self);
        p
    }
}

impl Drop for MbufChain {
    fn drop(&mut self) {
        // SAFETY: we own the chain (from_raw's contract / built by krpc_mbuf_build).
        unsafe { ffi::krpc_mbuf_freem(self.0.as_ptr()) };
    }
}

/// The bridge's counters (`krpc_mbuf_get_counts`).
pub fn counts() -> ffi::KrpcMbufCounts {
    let mut c = ffi::KrpcMbufCounts::default();
    // SAFETY: `c` is a valid out-pointer of the C struct's layout.
    unsafe { ffi::krpc_mbuf_get_counts(&mut c) };
    c
}

/// Scratch of the conversions (one per connection or per thread: not shared).
#[derive(Debug, Default)]
pub struct MbufBridge {
    descs: Vec<KrpcMdesc>,
    pages: Vec<u64>,
}

fn grow<T: Default + Clone>(v: &mut Vec<T>, n: usize) -> Result<(), BridgeError> {
    if v.capacity() < n {
        v.try_reserve_exact(n - v.len())
            .map_err(|_| BridgeError::NoMemory)?;
    }
    Ok(())
}

fn u8_len(n: usize) -> Result<u8, BridgeError> {
    u8::try_from(n).map_err(|_| BridgeError::Invalid)
}

fn u16_of(n: usize) -> Result<u16, BridgeError> {
    u16::try_from(n).map_err(|_| BridgeError::Invalid)
}

fn u32_of(n: usize) -> Result<u32, BridgeError> {
    u32::try_from(n).map_err(|_| BridgeError::Invalid)
}

impl MbufBridge {
    /// Scratch for chains of up to `descs` mbufs and `pages` pages (it grows past that).
    ///
    /// # Errors
    /// [`BridgeError::NoMemory`].
    pub fn new(descs: usize, pages: usize) -> Result<Self, BridgeError> {
        let mut b = MbufBridge::default();
        grow(&mut b.descs, descs)?;
        grow(&mut b.pages, pages)?;
        Ok(b)
    }

    /// The descriptors of the last walk or description.
    pub fn descriptors(&self) -> &[KrpcMdesc] {
        &self.descs
    }

    /// The page addresses the last walk's or description's PAGES descriptors index.
    pub fn page_addrs(&self) -> &[u64] {
        &self.pages
    }

    /// Walk the FreeBSD chain `m` into the scratch (`krpc_mbuf_walk`; retried with larger
    /// arrays when they were too small).
    ///
    /// # Safety
    /// `m` is NULL or a valid chain, unchanged during the call.
    ///
    /// # Errors
    /// [`BridgeError::Invalid`] for an insane M_EXTPG mbuf; [`BridgeError::NoMemory`].
    pub unsafe fn walk(&mut self, m: *const FbsdMbuf) -> Result<(), BridgeError> {
        // SAFETY: forwarded contract.
        unsafe { self.walk_parts(&[m]) }
    }

    /// Walk several chains one after the other, as if they were linked: what `cl_call` needs,
    /// whose call is its own header/credential chain followed by the caller's `args` walked
    /// directly (`m_copym` drops the marker's `M_PROTO1`; see ARCHITECTURE.md).
    ///
    /// # Safety
    /// Each part is NULL or a valid chain, unchanged during the call.
    ///
    /// # Errors
    /// As [`MbufBridge::walk`].
    pub unsafe fn walk_parts(&mut self, parts: &[*const FbsdMbuf]) -> Result<(), BridgeError> {
        loop {
            let (nd, np) = (self.descs.capacity().max(8), self.pages.capacity().max(8));
            self.descs.clear();
            self.descs.resize(nd, KrpcMdesc::default());
            self.pages.clear();
            self.pages.resize(np, 0);
            let (mut di, mut pi, mut rc) = (0usize, 0usize, 0);
            for &m in parts {
                let (Some(d), Some(p)) = (self.descs.get_mut(di..), self.pages.get_mut(pi..))
                else {
                    rc = E2BIG;
                    break;
                };
                let (mut dn, mut pn) = (0u32, 0u32);
                // SAFETY: `d` / `p` hold the lengths passed; `m` as the caller promised.
                rc = unsafe {
                    ffi::krpc_mbuf_walk(
                        m,
                        d.as_mut_ptr(),
                        u32_of(d.len())?,
                        p.as_mut_ptr(),
                        u32_of(p.len())?,
                        &mut dn,
                        &mut pn,
                    )
                };
                if rc != 0 {
                    break;
                }
                let base = u32_of(pi)?;
                for x in d.iter_mut().take(dn as usize) {
                    if x.kind == ffi::MD_PAGES {
                        x.pa_first = x.pa_first.checked_add(base).ok_or(BridgeError::Invalid)?;
                    }
                }
                di += dn as usize;
                pi += pn as usize;
            }
            match rc {
                0 => {
                    self.descs.truncate(di);
                    self.pages.truncate(pi);
                    return Ok(());
                }
                E2BIG => {
                    self.descs.clear();
                    self.pages.clear();
                    grow(&mut self.descs, nd.saturating_mul(2))?;
                    grow(&mut self.pages, np.saturating_mul(2))?;
                }
                rc => {
                    self.descs.clear();
                    self.pages.clear();
                    return Err(errno(rc));
                }
            }
        }
    }

    /// The [`Chain`] the scratch describes: bytes copied, page mbufs over the same pages
    /// with one new reference each from `pages`.
    ///
    /// # Safety
    /// The descriptors' byte addresses are readable: the chain they were walked from is
    /// alive and unchanged.
    ///
    /// # Errors
    /// [`BridgeError::Invalid`] (a descriptor out of range), [`BridgeError::Page`],
    /// [`BridgeError::Mbuf`]; every reference taken is released then.
    pub unsafe fn to_chain(&self, pages: &Arc<dyn PageProvider>) -> Result<Chain, BridgeError> {
        let mut c = Chain::new();
        for d in &self.descs {
            match d.kind {
                ffi::MD_BYTES => {
                    // SAFETY: the walk took `kva..kva + len` from an mbuf's data (or an
                    // M_EXTPG header/trailer), readable by the caller's promise.
                    let b = unsafe { bytes(d.kva, d.len as usize) };
                    c.append(b)?;
                }
                ffi::MD_MARKER => c.append_mbuf(Mbuf::ddp_marker())?,
                ffi::MD_PAGES => {
                    // SAFETY: as above, for the header and trailer bytes.
                    let m = unsafe { self.page_mbuf(d, pages) }?;
                    c.append_mbuf(m)?;
                }
                _ => return Err(BridgeError::Invalid),
            }
        }
        Ok(c)
    }

    /// One page mbuf of a PAGES descriptor. Not inlined: with it, `to_chain`'s frame was
    /// 1,568 bytes (several 280-byte `Mbuf` temporaries live at once).
    ///
    /// # Safety
    /// As [`MbufBridge::to_chain`].
    #[inline(never)]
    unsafe fn page_mbuf(
        &self,
        d: &KrpcMdesc,
        pages: &Arc<dyn PageProvider>,
    ) -> Result<Mbuf, BridgeError> {
        let first = d.pa_first as usize;
        let pas = first
            .checked_add(usize::from(d.npgs))
            .and_then(|end| self.pages.get(first..end))
            .ok_or(BridgeError::Invalid)?;
        for (i, &pa) in pas.iter().enumerate() {
            if pages.page_ref(pa).is_err() {
                for &q in pas.get(..i).unwrap_or(&[]) {
                    pages.page_unref(q);
                }
                return Err(BridgeError::Page);
            }
        }
        // On success the mbuf owns the references just taken; on error they are ours.
        let mut m = match Mbuf::pages(
            Arc::clone(pages),
            pas,
            usize::from(d.first_off),
            usize::from(d.last_len),
        ) {
            Ok(m) => m,
            Err(e) => {
                for &q in pas {
                    pages.page_unref(q);
                }
                return Err(e.into());
            }
        };
        // (Dropping `m` on an error below releases the references.)
        if d.hdrlen > 0 {
            // SAFETY: the header bytes of the walked M_EXTPG mbuf, per the caller.
            m.set_epg_hdr(unsafe { bytes(d.kva, usize::from(d.hdrlen)) })?;
        }
        if d.trllen > 0 {
            // SAFETY: its trailer bytes, likewise.
            m.set_epg_trl(unsafe { bytes(d.trl_kva, usize::from(d.trllen)) })?;
        }
        Ok(m)
    }

    /// A FreeBSD chain becomes a [`Chain`] ([`walk`](Self::walk), then
    /// [`to_chain`](Self::to_chain)); the FreeBSD chain is left as it was (the caller still
    /// owns and frees it).
    ///
    /// # Safety
    /// As [`MbufBridge::walk`].
    ///
    /// # Errors
    /// As the two steps.
    pub unsafe fn chain_from_mbufs(
        &mut self,
        m: *const FbsdMbuf,
        pages: &Arc<dyn PageProvider>,
    ) -> Result<Chain, BridgeError> {
        // SAFETY: forwarded contract; the chain is unchanged between the two steps.
        unsafe {
            self.walk(m)?;
            self.to_chain(pages)
        }
    }

    /// Several FreeBSD chains, one after the other, become one [`Chain`]
    /// ([`walk_parts`](Self::walk_parts), then [`to_chain`](Self::to_chain)).
    ///
    /// # Safety
    /// As [`MbufBridge::walk_parts`].
    ///
    /// # Errors
    /// As the two steps.
    pub unsafe fn chain_from_mbuf_parts(
        &mut self,
        parts: &[*const FbsdMbuf],
        pages: &Arc<dyn PageProvider>,
    ) -> Result<Chain, BridgeError> {
        // SAFETY: forwarded contract; the chains are unchanged between the two steps.
        unsafe {
            self.walk_parts(parts)?;
            self.to_chain(pages)
        }
    }

    /// Describe `chain` in the scratch: descriptors pointing into its bytes, its pages'
    /// addresses. Valid while `chain` is alive and unchanged.
    ///
    /// # Errors
    /// [`BridgeError::NoMemory`] (scratch growth).
    pub fn describe(&mut self, chain: &Chain) -> Result<(), BridgeError> {
        self.descs.clear();
        self.pages.clear();
        let npages: usize = chain
            .mbufs()
            .filter_map(|m| m.page_info().map(|p| p.pages.len()))
            .sum();
        grow(&mut self.descs, chain.mbuf_count())?;
        grow(&mut self.pages, npages)?;
        let keep = ffi::MF_PKTHDR | ffi::MF_EOR | ffi::MF_PROTO1;
        for m in chain.mbufs() {
            let mflags = m.flags().bits() & keep;
            let d = if let Some(p) = m.page_info() {
                let d = KrpcMdesc {
                    kva: p.hdr.as_ptr() as u64,
                    trl_kva: p.trl.as_ptr() as u64,
                    len: u32_of(p.page_bytes)?,
                    kind: ffi::MD_PAGES,
                    pa_first: u32_of(self.pages.len())?,
                    mflags,
                    npgs: u16_of(p.pages.len())?,
                    first_off: u16_of(p.first_off)?,
                    last_len: u16_of(p.last_len)?,
                    hdrlen: u8_len(p.hdr.len())?,
                    trllen: u8_len(p.trl.len())?,
                };
                self.pages.extend_from_slice(p.pages);
                d
            } else if m.is_ddp_marker() && m.is_empty() {
                KrpcMdesc {
                    kind: ffi::MD_MARKER,
                    mflags,
                    ..KrpcMdesc::default()
                }
            } else {
                match m.data() {
                    Some(b) if !b.is_empty() => KrpcMdesc {
                        kva: b.as_ptr() as u64,
                        len: u32_of(b.len())?,
                        kind: ffi::MD_BYTES,
                        mflags,
                        ..KrpcMdesc::default()
                    },
                    _ => continue,
                }
            };
            self.descs.push(d);
        }
        Ok(())
    }

    /// `chain` becomes a FreeBSD chain: XDR bytes copied into mbufs/clusters, page mbufs
    /// into M_EXTPG mbufs over the same pages (the references move: the M_EXTPG mbufs wire
    /// each page once, then `chain` is dropped). `nowait`: `M_NOWAIT` (else `M_WAITOK`);
    /// `pkthdr`: the first mbuf is an `M_PKTHDR` mbuf with `m_pkthdr.len` set. `None` for an
    /// empty chain.
    ///
    /// # Errors
    /// The error and `chain`, untouched (nothing was built, no wiring taken).
    pub fn mbufs_from_chain(
        &mut self,
        chain: Chain,
        nowait: bool,
        pkthdr: bool,
    ) -> Result<Option<MbufChain>, (BridgeError, Chain)> {
        let flags = if pkthdr { ffi::MB_PKTHDR } else { 0 };
        self.build(chain, nowait, flags)
    }

    /// As [`mbufs_from_chain`](Self::mbufs_from_chain), but only ordinary mbufs and clusters
    /// (`KRPC_MB_FLAT`, the stock-NFS mode): the page mbufs' bytes are copied into them
    /// (once, by the C side through the direct map) and DDP markers are left out, so a
    /// receive path that only `mtod()`s can parse the chain. Also the page bytes that were
    /// copied (0 when the chain had no page mbuf).
    ///
    /// # Errors
    /// As [`mbufs_from_chain`](Self::mbufs_from_chain).
    pub fn flat_mbufs_from_chain(
        &mut self,
        chain: Chain,
        nowait: bool,
        pkthdr: bool,
    ) -> Result<(Option<MbufChain>, u64), (BridgeError, Chain)> {
        let copied: u64 = chain
            .mbufs()
            .filter_map(|m| m.page_info().map(|p| p.page_bytes as u64))
            .fold(0u64, u64::saturating_add);
        let flags = ffi::MB_FLAT | if pkthdr { ffi::MB_PKTHDR } else { 0 };
        self.build(chain, nowait, flags).map(|m| (m, copied))
    }

    /// `chain` built by `krpc_mbuf_build` with `flags` (`KRPC_MB_*`).
    fn build(
        &mut self,
        chain: Chain,
        nowait: bool,
        flags: i32,
    ) -> Result<Option<MbufChain>, (BridgeError, Chain)> {
        if let Err(e) = self.describe(&chain) {
            return Err((e, chain));
        }
        let mut out: *mut FbsdMbuf = core::ptr::null_mut();
        let (nd, np) = match (u32_of(self.descs.len()), u32_of(self.pages.len())) {
            (Ok(nd), Ok(np)) => (nd, np),
            _ => return Err((BridgeError::Invalid, chain)),
        };
        // SAFETY: the descriptors point into `chain`, alive and unchanged until after the
        // call; the arrays hold `nd` / `np` elements; `out` is a valid out-pointer.
        let rc = unsafe {
            ffi::krpc_mbuf_build(
                self.descs.as_ptr(),
                nd,
                self.pages.as_ptr(),
                np,
                if nowait { ffi::M_NOWAIT } else { 0 },
                flags,
                &mut out,
            )
        };
        self.descs.clear();
        self.pages.clear();
        if rc != 0 {
            return Err((errno(rc), chain));
        }
        drop(chain);
        // SAFETY: krpc_mbuf_build returned a chain that is now ours alone.
        Ok(unsafe { MbufChain::from_raw(out) })
    }
}

/// The `len` bytes at `kva`.
///
/// # Safety
/// `kva..kva + len` is readable and not written during the borrow.
unsafe fn bytes<'a>(kva: u64, len: usize) -> &'a [u8] {
    if len == 0 || kva == 0 {
        return &[];
    }
    // SAFETY: per the function's contract.
    unsafe { core::slice::from_raw_parts(kva as usize as *const u8, len) }
}
