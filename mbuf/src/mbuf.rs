//! One mbuf: internal data, cluster, or page array.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use crate::error::MbufError;
use crate::flags::MbufFlags;
use crate::page::{
    copy_exact, copy_exact_mut, validate_pages, PageData, PageProvider, Piece, PieceCursor,
    RangeCopy, MAX_EPG_HDR, MAX_EPG_TRL,
};

/// Bytes of inline data in an internal mbuf (FreeBSD `MLEN` on 64-bit platforms).
pub const MLEN: usize = 224;

/// Size of a standard cluster (FreeBSD `MCLBYTES`).
pub const MCLBYTES: usize = 2048;

/// Largest cluster ("jumbo") size accepted by [`Mbuf::cluster_with`].
pub const MAX_CLUSTER: usize = 65536;

/// Kind of storage of an mbuf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MbufKind {
    /// Inline array of [`MLEN`] bytes.
    Internal,
    /// Owned external buffer ([`MCLBYTES`] or a caller-chosen size up to [`MAX_CLUSTER`]).
    Cluster,
    /// Page array (`M_EXTPG`) with optional inline header and trailer.
    Pages,
}

/// Backing buffer of a linear (internal or cluster) mbuf.
enum Store {
    Inline([u8; MLEN]),
    Heap(Vec<u8>),
}

impl Store {
    #[inline]
    fn bytes(&self) -> &[u8] {
        match self {
            Store::Inline(a) => a,
            Store::Heap(v) => v,
        }
    }
    #[inline]
    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Store::Inline(a) => a,
            Store::Heap(v) => v,
        }
    }
    #[inline]
    fn cap(&self) -> usize {
        self.bytes().len()
    }
}

/// Linear storage: `store[off..off + len]` is the data.
pub(crate) struct Linear {
    store: Store,
    off: usize,
    len: usize,
}

impl Linear {
    #[inline]
    fn data(&self) -> &[u8] {
        self.store
            .bytes()
            .get(self.off..self.off + self.len)
            .unwrap_or(&[])
    }
    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        let (off, len) = (self.off, self.len);
        self.store
            .bytes_mut()
            .get_mut(off..off + len)
            .unwrap_or(&mut [])
    }
    #[inline]
    fn trailing(&self) -> usize {
        self.store.cap() - self.off - self.len
    }
}

pub(crate) enum Data {
    Linear(Linear),
    Pages(PageData),
}

/// A single mbuf.
///
/// Invariants (checked by [`Chain::check_invariants`](crate::Chain::check_invariants)):
/// a linear mbuf's data lies inside its buffer; a page mbuf has 1..=16 pages,
/// `first_off < PAGE_SIZE`, `1 <= last_len <= PAGE_SIZE`, and for a single page
/// `first_off + last_len <= PAGE_SIZE` (FreeBSD `m_epg_pagelen` semantics), so it always
/// carries at least one byte of page data.
pub struct Mbuf {
    flags: MbufFlags,
    pub(crate) data: Data,
}

/// Read-only view of the page array of a page mbuf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageInfo<'a> {
    /// Page addresses (`m_epg_pa`).
    pub pages: &'a [u64],
    /// Offset of the first data byte in the first page (`m_epg_1st_off`).
    pub first_off: usize,
    /// Data bytes in the last page, counted from its first data byte (`m_epg_last_len`).
    pub last_len: usize,
    /// Inline header bytes (`m_epg_hdr`), before the page data.
    pub hdr: &'a [u8],
    /// Inline trailer bytes (`m_epg_trl`), after the page data.
    pub trl: &'a [u8],
    /// Bytes of page data (excluding header and trailer).
    pub page_bytes: usize,
}

/// A contiguous piece of chain data, as yielded by the fragment iterators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fragment<'a> {
    /// Mapped bytes: internal or cluster data, or the header/trailer of a page mbuf.
    Bytes(&'a [u8]),
    /// `len` bytes of page `addr` starting at in-page offset `offset`.
    Page {
        /// Page address as given by the provider.
        addr: u64,
        /// Offset inside the page.
        offset: usize,
        /// Length in bytes (`offset + len <= PAGE_SIZE`).
        len: usize,
    },
}

impl Fragment<'_> {
    /// Length of the fragment in bytes.
    pub fn len(&self) -> usize {
        match self {
            Fragment::Bytes(b) => b.len(),
            Fragment::Page { len, .. } => *len,
        }
    }

    /// True if the fragment has no bytes (never yielded by the iterators).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Allocate a zeroed heap buffer of exactly `size` bytes, fallibly.
fn heap_buf(size: usize) -> Result<Vec<u8>, MbufError> {
    let mut v = Vec::new();
    v.try_reserve_exact(size)?;
    v.resize(size, 0);
    Ok(v)
}

impl Mbuf {
    fn linear(flags: MbufFlags, store: Store, off: usize, data: &[u8]) -> Result<Self, MbufError> {
        let mut lin = Linear {
            store,
            off,
            len: data.len(),
        };
        let cap = lin.store.cap();
        let end = off
            .checked_add(data.len())
            .filter(|&e| e <= cap)
            .ok_or(MbufError::TooLarge {
                requested: off.saturating_add(data.len()),
                limit: cap,
            })?;
        copy_exact_mut(lin.store.bytes_mut().get_mut(off..end), data)?;
        Ok(Mbuf {
            flags,
            data: Data::Linear(lin),
        })
    }

    /// An internal mbuf (`m_get` + copy) holding `data` at the start of its [`MLEN`] buffer.
    ///
    /// # Errors
    /// [`MbufError::TooLarge`] if `data.len() > MLEN`.
    pub fn internal(data: &[u8]) -> Result<Self, MbufError> {
        Self::internal_with_leading(0, data)
    }

    /// An internal mbuf with `leading` bytes of leading space before `data`
    /// (`M_ALIGN`-like; cheap later prepends).
    ///
    /// # Errors
    /// [`MbufError::TooLarge`] if `leading + data.len() > MLEN`.
    pub fn internal_with_leading(leading: usize, data: &[u8]) -> Result<Self, MbufError> {
        Self::linear(MbufFlags::empty(), Store::Inline([0; MLEN]), leading, data)
    }

    /// An empty internal mbuf (no flags), to be filled in place: a constant, so that
    /// `push_back(Mbuf::EMPTY_INTERNAL)` writes it straight into its slot.
    pub(crate) const EMPTY_INTERNAL: Mbuf = Mbuf {
        flags: MbufFlags::empty(),
        data: Data::Linear(Linear {
            store: Store::Inline([0; MLEN]),
            off: 0,
            len: 0,
        }),
    };

    /// A zero-length internal mbuf flagged [`MbufFlags::DDP_START`]: the DDP marker.
    pub fn ddp_marker() -> Self {
        Mbuf {
            flags: MbufFlags::DDP_START,
            data: Data::Linear(Linear {
                store: Store::Inline([0; MLEN]),
                off: 0,
                len: 0,
            }),
        }
    }

    /// A standard [`MCLBYTES`] cluster mbuf (`m_getcl` + copy) holding `data` at its start.
    ///
    /// # Errors
    /// [`MbufError::TooLarge`] if `data.len() > MCLBYTES`; [`MbufError::Alloc`] if the buffer
    /// cannot be allocated.
    pub fn cluster(data: &[u8]) -> Result<Self, MbufError> {
        Self::cluster_with(MCLBYTES, 0, data)
    }

    /// A cluster mbuf with a buffer of `size` bytes (`1..=MAX_CLUSTER`, `m_getjcl`-like),
    /// holding `data` after `leading` bytes of leading space.
    ///
    /// # Errors
    /// [`MbufError::TooLarge`] if `size` is 0 or above [`MAX_CLUSTER`] or the data does not
    /// fit; [`MbufError::Alloc`] if the buffer cannot be allocated.
    pub fn cluster_with(size: usize, leading: usize, data: &[u8]) -> Result<Self, MbufError> {
        if size == 0 || size > MAX_CLUSTER {
            return Err(MbufError::TooLarge {
                requested: size,
                limit: MAX_CLUSTER,
            });
        }
        if leading.saturating_add(data.len()) > size {
            return Err(MbufError::TooLarge {
                requested: leading.saturating_add(data.len()),
                limit: size,
            });
        }
        Self::linear(
            MbufFlags::empty(),
            Store::Heap(heap_buf(size)?),
            leading,
            data,
        )
    }

    /// A page mbuf over `pages` (FreeBSD `M_EXTPG`).
    ///
    /// On success the mbuf takes over ONE provider reference per page from the caller and
    /// releases them when dropped; on error the caller keeps its references. Data is
    /// `first_off..` of page 0 and `last_len` bytes of the last page, counted from its first
    /// data byte (for a single page: bytes `first_off..first_off + last_len`), exactly like
    /// `m_epg_1st_off` / `m_epg_last_len`.
    ///
    /// # Errors
    /// [`MbufError::InvalidPages`] unless `1 <= pages.len() <= MAX_PGS_PER_MBUF`,
    /// `first_off < PAGE_SIZE`, `1 <= last_len <= PAGE_SIZE` and, for one page,
    /// `first_off + last_len <= PAGE_SIZE`.
    pub fn pages(
        provider: Arc<dyn PageProvider>,
        pages: &[u64],
        first_off: usize,
        last_len: usize,
    ) -> Result<Self, MbufError> {
        validate_pages(pages.len(), first_off, last_len)?;
        let pages = heapless::Vec::from_slice(pages)
            .map_err(|_| MbufError::InvalidPages("more than MAX_PGS_PER_MBUF pages"))?;
        Ok(Self::from_page_data(
            MbufFlags::empty(),
            PageData {
                provider,
                pages,
                first_off,
                last_len,
                hdr: heapless::Vec::new(),
                trl: heapless::Vec::new(),
            },
        ))
    }

    pub(crate) fn from_page_data(flags: MbufFlags, pd: PageData) -> Self {
        Mbuf {
            flags: flags - MbufFlags::EXTPG,
            data: Data::Pages(pd),
        }
    }

    /// A linear mbuf holding `data` at offset 0: internal if it fits in [`MLEN`], otherwise a
    /// cluster of `max(MCLBYTES, data.len())` bytes (fallible).
    pub(crate) fn linear_for(data: &[u8]) -> Result<Self, MbufError> {
        if data.len() <= MLEN {
            Self::internal(data)
        } else {
            Self::cluster_with(data.len().max(MCLBYTES), 0, data)
        }
    }

    /// Number of data bytes (`m_len`).
    #[inline]
    pub fn len(&self) -> usize {
        match &self.data {
            Data::Linear(l) => l.len,
            Data::Pages(p) => p.len(),
        }
    }

    /// True if the mbuf carries no bytes (e.g. a DDP marker).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn linear_in_bounds(&self) -> bool {
        match &self.data {
            Data::Linear(l) => l.off + l.len <= l.store.cap(),
            Data::Pages(_) => true,
        }
    }

    /// Storage kind.
    #[inline]
    pub fn kind(&self) -> MbufKind {
        match &self.data {
            Data::Linear(Linear {
                store: Store::Inline(_),
                ..
            }) => MbufKind::Internal,
            Data::Linear(_) => MbufKind::Cluster,
            Data::Pages(_) => MbufKind::Pages,
        }
    }

    /// True for a page mbuf (`M_EXTPG`).
    #[inline]
    pub fn is_pages(&self) -> bool {
        matches!(self.data, Data::Pages(_))
    }

    /// Flags; [`MbufFlags::EXTPG`] is set exactly for page mbufs.
    #[inline]
    pub fn flags(&self) -> MbufFlags {
        if self.is_pages() {
            self.flags | MbufFlags::EXTPG
        } else {
            self.flags
        }
    }

    /// Replace the flags ([`MbufFlags::EXTPG`] is ignored: it follows the kind).
    pub fn set_flags(&mut self, flags: MbufFlags) {
        self.flags = flags - MbufFlags::EXTPG;
    }

    /// Set some flags ([`MbufFlags::EXTPG`] is ignored).
    #[inline]
    pub fn insert_flags(&mut self, flags: MbufFlags) {
        self.flags |= flags - MbufFlags::EXTPG;
    }

    /// Clear some flags ([`MbufFlags::EXTPG`] is ignored).
    #[inline]
    pub fn remove_flags(&mut self, flags: MbufFlags) {
        self.flags -= flags;
    }

    /// True if the mbuf carries [`MbufFlags::DDP_START`].
    #[inline]
    pub fn is_ddp_marker(&self) -> bool {
        self.flags.contains(MbufFlags::DDP_START)
    }

    /// True unless [`MbufFlags::RDONLY`] is set (`M_WRITABLE`).
    #[inline]
    pub fn is_writable(&self) -> bool {
        !self.flags.contains(MbufFlags::RDONLY)
    }

    /// True if prepend/append/pullup may put bytes into this mbuf's spare space: a writable
    /// linear mbuf that is not a DDP marker.
    #[inline]
    fn space_usable(&self) -> bool {
        self.is_writable() && !self.is_ddp_marker() && !self.is_pages()
    }

    /// Usable space before the data (`M_LEADINGSPACE`): 0 for page mbufs, read-only mbufs and
    /// DDP markers.
    pub fn leading_space(&self) -> usize {
        match &self.data {
            Data::Linear(l) if self.space_usable() => l.off,
            _ => 0,
        }
    }

    /// Usable space after the data (`M_TRAILINGSPACE`): 0 for page mbufs, read-only mbufs
    /// and DDP markers.
    #[inline]
    pub fn trailing_space(&self) -> usize {
        match &self.data {
            Data::Linear(l) if self.space_usable() => l.trailing(),
            _ => 0,
        }
    }

    /// Size of the buffer of a linear mbuf ([`MLEN`] or the cluster size); `None` for page
    /// mbufs.
    pub fn buf_size(&self) -> Option<usize> {
        match &self.data {
            Data::Linear(l) => Some(l.store.cap()),
            Data::Pages(_) => None,
        }
    }

    /// The data of an internal or cluster mbuf (`mtod`); `None` for a page mbuf.
    #[inline]
    pub fn data(&self) -> Option<&[u8]> {
        match &self.data {
            Data::Linear(l) => Some(l.data()),
            Data::Pages(_) => None,
        }
    }

    /// Writable data of an internal or cluster mbuf; `None` for page or read-only mbufs.
    #[inline]
    pub fn data_mut(&mut self) -> Option<&mut [u8]> {
        let writable = self.is_writable();
        match &mut self.data {
            Data::Linear(l) if writable => Some(l.data_mut()),
            _ => None,
        }
    }

    /// Page array of a page mbuf; `None` otherwise.
    pub fn page_info(&self) -> Option<PageInfo<'_>> {
        match &self.data {
            Data::Pages(p) => Some(PageInfo {
                pages: &p.pages,
                first_off: p.first_off,
                last_len: p.last_len,
                hdr: &p.hdr,
                trl: &p.trl,
                page_bytes: p.page_bytes(),
            }),
            Data::Linear(_) => None,
        }
    }

    /// Provider of a page mbuf's pages.
    pub fn provider(&self) -> Option<&Arc<dyn PageProvider>> {
        match &self.data {
            Data::Pages(p) => Some(&p.provider),
            Data::Linear(_) => None,
        }
    }

    /// Set the inline header bytes of a page mbuf (`m_epg_hdr`, at most [`MAX_EPG_HDR`]).
    ///
    /// # Errors
    /// [`MbufError::NotPageMbuf`], [`MbufError::ReadOnly`], or [`MbufError::TooLarge`].
    pub fn set_epg_hdr(&mut self, hdr: &[u8]) -> Result<(), MbufError> {
        let writable = self.is_writable();
        match &mut self.data {
            Data::Pages(_) if !writable => Err(MbufError::ReadOnly),
            Data::Pages(p) => {
                p.hdr = heapless::Vec::from_slice(hdr).map_err(|_| MbufError::TooLarge {
                    requested: hdr.len(),
                    limit: MAX_EPG_HDR,
                })?;
                Ok(())
            }
            Data::Linear(_) => Err(MbufError::NotPageMbuf),
        }
    }

    /// Set the inline trailer bytes of a page mbuf (`m_epg_trl`, at most [`MAX_EPG_TRL`]).
    ///
    /// # Errors
    /// [`MbufError::NotPageMbuf`], [`MbufError::ReadOnly`], or [`MbufError::TooLarge`].
    pub fn set_epg_trl(&mut self, trl: &[u8]) -> Result<(), MbufError> {
        let writable = self.is_writable();
        match &mut self.data {
            Data::Pages(_) if !writable => Err(MbufError::ReadOnly),
            Data::Pages(p) => {
                p.trl = heapless::Vec::from_slice(trl).map_err(|_| MbufError::TooLarge {
                    requested: trl.len(),
                    limit: MAX_EPG_TRL,
                })?;
                Ok(())
            }
            Data::Linear(_) => Err(MbufError::NotPageMbuf),
        }
    }

    /// Fragments of this mbuf, in order (empty pieces are skipped).
    pub fn fragments(&self) -> MbufFragments<'_> {
        self.fragments_range(0, self.len())
    }

    pub(crate) fn fragments_range(&self, start: usize, n: usize) -> MbufFragments<'_> {
        MbufFragments {
            m: self,
            cursor: PieceCursor::new(start, n),
        }
    }

    /// The next piece of the walk `c` over this mbuf's bytes.
    pub(crate) fn next_piece(&self, c: &mut PieceCursor) -> Option<Piece> {
        match &self.data {
            Data::Linear(l) => c.next_linear(l.len),
            Data::Pages(p) => p.next_piece(c),
        }
    }

    fn fragment(&self, piece: Piece) -> Fragment<'_> {
        match (&self.data, piece) {
            (Data::Linear(l), Piece::Linear { from, len }) => {
                Fragment::Bytes(l.data().get(from..from + len).unwrap_or(&[]))
            }
            (Data::Pages(p), Piece::Hdr { from, len }) => {
                Fragment::Bytes(p.hdr.get(from..from + len).unwrap_or(&[]))
            }
            (Data::Pages(p), Piece::Trl { from, len }) => {
                Fragment::Bytes(p.trl.get(from..from + len).unwrap_or(&[]))
            }
            (Data::Pages(p), Piece::Page { idx, start, len }) => Fragment::Page {
                addr: p.pages.get(idx).copied().unwrap_or(0),
                offset: start,
                len,
            },
            _ => Fragment::Bytes(&[]),
        }
    }

    /// Copy bytes `[start, start + dst.len())` of this mbuf into `dst`.
    pub(crate) fn read(&self, start: usize, dst: &mut [u8]) -> Result<(), MbufError> {
        match &self.data {
            Data::Linear(l) => copy_exact(dst, l.data().get(start..start + dst.len())),
            Data::Pages(p) => p.read(start, dst),
        }
    }

    /// Write `src` over bytes `[start, start + src.len())` (ignores RDONLY: callers check).
    pub(crate) fn write(&mut self, start: usize, src: &[u8]) -> Result<(), MbufError> {
        match &mut self.data {
            Data::Linear(l) => copy_exact_mut(l.data_mut().get_mut(start..start + src.len()), src),
            Data::Pages(p) => p.write(start, src),
        }
    }

    /// An internal mbuf holding up to `MLEN` bytes (truncating), no flags, never failing.
    pub(crate) fn small(bytes: &[u8]) -> Self {
        let mut m = Mbuf::ddp_marker();
        m.flags = MbufFlags::empty();
        m.become_internal(bytes);
        m
    }

    /// Replace a page mbuf by an internal mbuf holding `bytes` (≤ 64 ≤ MLEN, no heap
    /// allocation), keeping the flags. Dropping the page data releases its pages.
    fn become_internal(&mut self, bytes: &[u8]) {
        let mut store = [0u8; MLEN];
        let n = bytes.len().min(MLEN);
        if let (Some(d), Some(s)) = (store.get_mut(..n), bytes.get(..n)) {
            d.copy_from_slice(s);
        }
        self.data = Data::Linear(Linear {
            store: Store::Inline(store),
            off: 0,
            len: n,
        });
    }

    /// Drop the first `r` bytes (`0 < r < len`); never allocates.
    pub(crate) fn trim_front(&mut self, r: usize) {
        let len = self.len();
        if r == 0 || r >= len {
            return;
        }
        match &mut self.data {
            Data::Linear(l) => {
                l.off += r;
                l.len -= r;
            }
            Data::Pages(p) => {
                if let Some(rest) = p.trim_front(r) {
                    self.become_internal(&rest);
                }
            }
        }
    }

    /// Keep the first `keep` bytes (`0 < keep < len`); never allocates.
    pub(crate) fn trim_back(&mut self, keep: usize) {
        let len = self.len();
        if keep >= len {
            return;
        }
        match &mut self.data {
            Data::Linear(l) => l.len = keep,
            Data::Pages(p) => {
                if let Some(rest) = p.trim_back(keep) {
                    self.become_internal(&rest);
                }
            }
        }
    }

    /// Grow a linear mbuf's data at the front by `n` bytes of its leading space.
    pub(crate) fn grow_front(&mut self, n: usize) -> bool {
        match &mut self.data {
            Data::Linear(l) if l.off >= n => {
                l.off -= n;
                l.len += n;
                true
            }
            _ => false,
        }
    }

    /// Append `src` into the trailing space of a linear mbuf.
    pub(crate) fn push_tail(&mut self, src: &[u8]) -> bool {
        match &mut self.data {
            Data::Linear(l) if l.trailing() >= src.len() => {
                let start = l.off + l.len;
                if copy_exact_mut(l.store.bytes_mut().get_mut(start..start + src.len()), src)
                    .is_err()
                {
                    return false;
                }
                l.len += src.len();
                true
            }
            _ => false,
        }
    }

    /// For pullup: make room for `n` bytes from the data start (moving the data to offset 0
    /// if needed) and return the buffer slice after the current data, `n - len` bytes.
    pub(crate) fn room_after(&mut self, n: usize) -> Option<&mut [u8]> {
        match &mut self.data {
            Data::Linear(l) if l.store.cap() >= n && l.len <= n => {
                if l.off + n > l.store.cap() {
                    let (off, len) = (l.off, l.len);
                    l.store.bytes_mut().copy_within(off..off + len, 0);
                    l.off = 0;
                }
                let (start, end) = (l.off + l.len, l.off + n);
                l.store.bytes_mut().get_mut(start..end)
            }
            _ => None,
        }
    }

    /// Make an internal mbuf hold exactly `data` (at offset 0), in place; false (unchanged)
    /// for other kinds or when `data` does not fit. Its flags are cleared.
    #[inline]
    pub(crate) fn refill(&mut self, data: &[u8]) -> bool {
        let flags = &mut self.flags;
        match &mut self.data {
            Data::Linear(Linear {
                store: Store::Inline(a),
                off,
                len,
            }) => match a.get_mut(..data.len()) {
                Some(d) => {
                    d.copy_from_slice(data);
                    *off = 0;
                    *len = data.len();
                    *flags = MbufFlags::empty();
                    true
                }
                None => false,
            },
            _ => false,
        }
    }

    /// Empty a linear mbuf in place (data offset back to 0) and clear its flags.
    pub(crate) fn reset_linear(&mut self) {
        self.flags = MbufFlags::empty();
        if let Data::Linear(l) = &mut self.data {
            l.off = 0;
            l.len = 0;
        }
    }

    /// Commit `n` bytes written by [`Mbuf::room_after`].
    pub(crate) fn set_len_after_room(&mut self, n: usize) {
        if let Data::Linear(l) = &mut self.data {
            if l.off + n <= l.store.cap() {
                l.len = n;
            }
        }
    }

    /// Copy bytes `[start, start + n)` of this mbuf into a new mbuf (`m_copym` of one mbuf).
    ///
    /// Linear bytes are copied into a new writable internal mbuf (≤ `MLEN`) or cluster
    /// (fallible). A page range shares the pages (one `page_ref` per page of the copy) and
    /// copies the inline header/trailer bytes; the copy is flagged `RDONLY` (FreeBSD: shared
    /// external storage is not writable). A range of only header or only trailer bytes
    /// becomes a writable internal mbuf. Flags of the copy: `DDP_START` if the range starts
    /// at the mbuf's start (so a zero-length marker is copied as a marker), `EOR` if it ends
    /// at the mbuf's end, `RDONLY` for shared pages; nothing else. On error nothing is leaked.
    pub(crate) fn copy_range(&self, start: usize, n: usize) -> Result<Mbuf, MbufError> {
        let len = self.len();
        let end = start
            .checked_add(n)
            .filter(|&e| e <= len)
            .ok_or(MbufError::range(start, n, len))?;
        let mut flags = MbufFlags::empty();
        let mut m = match &self.data {
            Data::Linear(l) => Mbuf::linear_for(
                l.data()
                    .get(start..end)
                    .ok_or(MbufError::range(start, n, len))?,
            )?,
            Data::Pages(p) => match p.copy_range(start, n)? {
                RangeCopy::Pages(pd) => {
                    flags |= MbufFlags::RDONLY;
                    Mbuf::from_page_data(MbufFlags::empty(), pd)
                }
                RangeCopy::Bytes(b) => Mbuf::small(&b),
            },
        };
        if start == 0 {
            flags |= self.flags & MbufFlags::DDP_START;
        }
        if end == len {
            flags |= self.flags & MbufFlags::EOR;
        }
        m.set_flags(flags);
        Ok(m)
    }

    /// Split at `r` (`0 < r < len`): `self` keeps `[0, r)`, the returned mbuf holds
    /// `[r, len)`. The left piece keeps the flags except `EOR`; the right piece gets
    /// `RDONLY` and `EOR` if the original had them.
    ///
    /// Linear mbufs copy the smaller side into a new mbuf (internal if it fits in `MLEN`,
    /// else a new cluster: fallible). Page mbufs split without copying page data; a page
    /// shared by both sides gets one extra provider reference. On error `self` is unchanged.
    pub(crate) fn split_at(&mut self, r: usize) -> Result<Mbuf, MbufError> {
        let len = self.len();
        if r == 0 || r >= len {
            return Err(MbufError::range(r, 0, len));
        }
        let orig = self.flags;
        let mut right = match &mut self.data {
            Data::Linear(l) => {
                let tail = len - r;
                let is_inline = matches!(l.store, Store::Inline(_));
                if is_inline || tail <= r {
                    let new = Mbuf::linear_for(l.data().get(r..).unwrap_or(&[]))?;
                    l.len = r;
                    new
                } else {
                    // Copy the (smaller) head; the original buffer becomes the right piece.
                    let mut head = Mbuf::linear_for(l.data().get(..r).unwrap_or(&[]))?;
                    l.off += r;
                    l.len -= r;
                    core::mem::swap(self, &mut head);
                    head
                }
            }
            Data::Pages(p) => {
                let (hl, pb) = (p.hdr.len(), p.page_bytes());
                if r <= hl {
                    // Cut inside the header: the left piece is only header bytes and becomes
                    // an internal mbuf; the page data (with the rest of the header) goes right.
                    let left: heapless::Vec<u8, MAX_EPG_HDR> =
                        heapless::Vec::from_slice(p.hdr.get(..r).unwrap_or(&[]))
                            .unwrap_or_default();
                    let rest = heapless::Vec::from_slice(p.hdr.get(r..).unwrap_or(&[]))
                        .unwrap_or_default();
                    p.hdr = rest;
                    let mut other = Mbuf::small(&left);
                    core::mem::swap(self, &mut other);
                    other
                } else if r >= hl + pb {
                    // Cut inside the trailer: the right piece is trailer bytes only.
                    let t = r - hl - pb;
                    let other = Mbuf::small(p.trl.get(t..).unwrap_or(&[]));
                    p.trl.truncate(t);
                    other
                } else {
                    Mbuf::from_page_data(MbufFlags::empty(), split_pages(p, r - hl)?)
                }
            }
        };
        self.flags = orig - MbufFlags::EOR;
        right.flags = orig & (MbufFlags::RDONLY | MbufFlags::EOR);
        Ok(right)
    }
}

/// Split the page data of `p` at page-data byte `po` (`0 < po < page_bytes`): `p` keeps the
/// header and the pages up to the cut, the returned page data holds the rest and the trailer.
fn split_pages(p: &mut PageData, po: usize) -> Result<PageData, MbufError> {
    let (k, q) = p
        .locate(po)
        .ok_or(MbufError::range(po, 0, p.page_bytes()))?;
    let n = p.npgs();
    let (start_k, len_k) = p.seg(k);
    let right_pages = heapless::Vec::from_slice(p.pages.get(k..).unwrap_or(&[]))
        .map_err(|_| MbufError::InvalidPages("page index"))?;
    let (right_first, right_last, left_npgs, left_last) = if q == 0 {
        // Cut on a page boundary (k >= 1 because po > 0): no page is shared.
        let (_, len_prev) = p.seg(k.saturating_sub(1));
        (0, p.last_len, k, len_prev)
    } else {
        // Page k is shared by both sides: take one more reference for the right side.
        p.provider.page_ref(p.page(k)?)?;
        let right_last = if k + 1 == n { len_k - q } else { p.last_len };
        (start_k + q, right_last, k + 1, q)
    };
    let right = PageData {
        provider: Arc::clone(&p.provider),
        pages: right_pages,
        first_off: right_first,
        last_len: right_last,
        hdr: heapless::Vec::new(),
        trl: core::mem::take(&mut p.trl),
    };
    // The addresses now in `right` carry their references over (plus the extra one above).
    p.pages.truncate(left_npgs);
    p.last_len = left_last;
    Ok(right)
}

/// Iterator over the fragments of one mbuf.
pub struct MbufFragments<'a> {
    m: &'a Mbuf,
    cursor: PieceCursor,
}

impl<'a> Iterator for MbufFragments<'a> {
    type Item = Fragment<'a>;
    fn next(&mut self) -> Option<Fragment<'a>> {
        let piece = self.m.next_piece(&mut self.cursor)?;
        Some(self.m.fragment(piece))
    }
}

impl fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Mbuf");
        d.field("kind", &self.kind())
            .field("len", &self.len())
            .field("flags", &self.flags());
        match &self.data {
            Data::Linear(l) => {
                d.field("off", &l.off).field("buf_size", &l.store.cap());
            }
            Data::Pages(p) => {
                d.field("pages", &p.pages.as_slice())
                    .field("first_off", &p.first_off)
                    .field("last_len", &p.last_len)
                    .field("hdr_len", &p.hdr.len())
                    .field("trl_len", &p.trl.len());
            }
        }
        d.finish()
    }
}
