//! Page provider trait and the page-array storage of page mbufs (`M_EXTPG`).

use alloc::sync::Arc;

use crate::error::{AllocError, MbufError, PageError};

/// The only supported page size, in bytes. Page addresses are multiples of nothing in
/// particular as far as this crate is concerned, but every page is `PAGE_SIZE` bytes long and
/// in-page offsets are `< PAGE_SIZE`.
pub const PAGE_SIZE: usize = 4096;

/// Maximum number of pages in one page mbuf (FreeBSD's `MBUF_PEXT_MAX_PGS` analogue).
pub const MAX_PGS_PER_MBUF: usize = 16;

/// Maximum inline header bytes of a page mbuf (`m_epg_hdr`).
pub const MAX_EPG_HDR: usize = 24;

/// Maximum inline trailer bytes of a page mbuf (`m_epg_trl`).
pub const MAX_EPG_TRL: usize = 64;

/// Source and owner of the pages referenced by page mbufs.
///
/// Pages are named by a `u64` address (physical, DMA or iova: the provider decides). The
/// provider counts references per page, like wired `vm_page`s: every page mbuf holds exactly
/// one reference on every page in its array, so no per-mbuf reference-count allocation is
/// needed. The provider frees a page when its count drops to zero.
///
/// The mapping callbacks (`with_page`, `with_page_mut`) may run with provider locks held: the
/// callback must not call back into the provider. This crate's callbacks only copy bytes.
pub trait PageProvider: Send + Sync {
    /// Allocate one page. The caller receives one reference on it.
    ///
    /// # Errors
    /// [`AllocError`] when no page is available.
    fn alloc_page(&self) -> Result<u64, AllocError>;

    /// Take one more reference on an allocated page.
    ///
    /// # Errors
    /// A [`PageError`] if the page is unknown, free, or its count would overflow.
    fn page_ref(&self, addr: u64) -> Result<(), PageError>;

    /// Drop one reference; the page is freed when the count reaches zero. Releasing an unknown
    /// or free page must be ignored (a provider should count such events).
    fn page_unref(&self, addr: u64);

    /// Map the page for reading; `f` receives all `PAGE_SIZE` bytes.
    ///
    /// # Errors
    /// A [`PageError`] if the page is unknown, free or cannot be mapped.
    fn with_page(&self, addr: u64, f: &mut dyn FnMut(&[u8])) -> Result<(), PageError>;

    /// Map the page for writing; `f` receives all `PAGE_SIZE` bytes.
    ///
    /// # Errors
    /// A [`PageError`] if the page is unknown, free or cannot be mapped.
    fn with_page_mut(&self, addr: u64, f: &mut dyn FnMut(&mut [u8])) -> Result<(), PageError>;

    /// Copy `dst.len()` bytes of the page, starting at in-page `offset`, into `dst`.
    ///
    /// The default goes through [`PageProvider::with_page`]; a provider whose mapping is a
    /// bounce copy (memory a NIC may write, never borrowed) overrides this with one direct
    /// copy. Bulk copies in this crate (`copydata`, `copyback`) use these two methods.
    ///
    /// # Errors
    /// A [`PageError`] if the page cannot be mapped; [`PageError::Unmappable`] if
    /// `offset + dst.len()` exceeds [`PAGE_SIZE`].
    fn read_page(&self, addr: u64, offset: usize, dst: &mut [u8]) -> Result<(), PageError> {
        let end = page_range_end(addr, offset, dst.len())?;
        let mut res = Err(PageError::Unmappable(addr));
        self.with_page(addr, &mut |pg: &[u8]| {
            if let Some(src) = pg.get(offset..end) {
                dst.copy_from_slice(src);
                res = Ok(());
            }
        })?;
        res
    }

    /// Copy `src` into the page at in-page `offset`: the counterpart of
    /// [`PageProvider::read_page`].
    ///
    /// # Errors
    /// As [`PageProvider::read_page`].
    fn write_page(&self, addr: u64, offset: usize, src: &[u8]) -> Result<(), PageError> {
        let end = page_range_end(addr, offset, src.len())?;
        let mut res = Err(PageError::Unmappable(addr));
        self.with_page_mut(addr, &mut |pg: &mut [u8]| {
            if let Some(dst) = pg.get_mut(offset..end) {
                dst.copy_from_slice(src);
                res = Ok(());
            }
        })?;
        res
    }
}

/// The maximal runs of positions where `before` and `after` differ, in order (over their
/// common length). A provider that maps pages for writing through a bounce copy
/// (`with_page_mut`) writes back only these, so bytes a NIC wrote elsewhere in the page
/// meanwhile are not overwritten with stale copies.
pub fn changed_runs<'a>(
    before: &'a [u8],
    after: &'a [u8],
) -> impl Iterator<Item = core::ops::Range<usize>> + 'a {
    let n = before.len().min(after.len());
    let differs = move |i: usize| before.get(i) != after.get(i);
    let mut i = 0;
    core::iter::from_fn(move || {
        while i < n && !differs(i) {
            i += 1;
        }
        if i >= n {
            return None;
        }
        let start = i;
        while i < n && differs(i) {
            i += 1;
        }
        Some(start..i)
    })
}

/// `with_page_mut` for a provider that reaches page memory only through copies
/// ([`PageProvider::read_page`] / [`PageProvider::write_page`]): the page is read into
/// `before`, the callback edits `after` (a copy of it), and only the runs it changed are
/// written back ([`changed_runs`]). `before` and `after` are the caller's scratch of one page
/// each (on the stack in userspace, on the heap in a kernel).
///
/// # Errors
/// What `read_page` / `write_page` return; [`PageError::Unmappable`] when the two scratch
/// buffers differ in length.
pub fn edit_page_by_copy<P: PageProvider + ?Sized>(
    provider: &P,
    addr: u64,
    before: &mut [u8],
    after: &mut [u8],
    f: &mut dyn FnMut(&mut [u8]),
) -> Result<(), PageError> {
    if before.len() != after.len() {
        return Err(PageError::Unmappable(addr));
    }
    provider.read_page(addr, 0, before)?;
    after.copy_from_slice(before);
    f(after);
    for r in changed_runs(before, after) {
        if let Some(src) = after.get(r.clone()) {
            provider.write_page(addr, r.start, src)?;
        }
    }
    Ok(())
}

/// The end of in-page range `offset..offset + len`, if it lies inside one page.
///
/// # Errors
/// [`PageError::Unmappable`] for a range past [`PAGE_SIZE`].
pub fn page_range_end(addr: u64, offset: usize, len: usize) -> Result<usize, PageError> {
    offset
        .checked_add(len)
        .filter(|&e| e <= PAGE_SIZE)
        .ok_or(PageError::Unmappable(addr))
}

/// One piece of an mbuf's bytes, by index (no borrow), used to walk ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Piece {
    /// `len` bytes of linear data starting at data offset `from`.
    Linear { from: usize, len: usize },
    /// `len` bytes of the inline header starting at `from`.
    Hdr { from: usize, len: usize },
    /// `len` bytes of page `idx` starting at in-page offset `start`.
    Page {
        idx: usize,
        start: usize,
        len: usize,
    },
    /// `len` bytes of the inline trailer starting at `from`.
    Trl { from: usize, len: usize },
}

impl Piece {
    pub(crate) const fn len(&self) -> usize {
        match *self {
            Piece::Linear { len, .. }
            | Piece::Hdr { len, .. }
            | Piece::Page { len, .. }
            | Piece::Trl { len, .. } => len,
        }
    }
}

/// Where a walk over the pieces of bytes `[start, end)` of one mbuf stands: the pieces are
/// computed one at a time (no array of them on the stack). Slot 0 is the header (or the
/// linear data), slots `1..=npgs` the pages, slot `npgs + 1` the trailer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PieceCursor {
    start: usize,
    end: usize,
    slot: usize,
    pos: usize,
}

impl PieceCursor {
    /// A walk over bytes `[start, start + n)`.
    pub(crate) const fn new(start: usize, n: usize) -> Self {
        PieceCursor {
            start,
            end: start.saturating_add(n),
            slot: 0,
            pos: 0,
        }
    }

    /// The linear-data piece (slot 0 only) of an mbuf of `len` bytes.
    pub(crate) fn next_linear(&mut self, len: usize) -> Option<Piece> {
        if self.slot > 0 {
            return None;
        }
        self.slot = 1;
        let end = self.end.min(len);
        (self.start < end).then_some(Piece::Linear {
            from: self.start,
            len: end - self.start,
        })
    }
}

/// Storage of a page mbuf. Holds one provider reference per entry of `pages`, released on
/// drop. Moving an address from one `PageData` to another moves its reference.
pub(crate) struct PageData {
    pub(crate) provider: Arc<dyn PageProvider>,
    pub(crate) pages: heapless::Vec<u64, MAX_PGS_PER_MBUF>,
    /// `m_epg_1st_off`: offset of the first data byte in page 0.
    pub(crate) first_off: usize,
    /// `m_epg_last_len`: number of data bytes in the last page, counted from the first data
    /// byte of that page (from `first_off` when there is a single page, from 0 otherwise).
    pub(crate) last_len: usize,
    pub(crate) hdr: heapless::Vec<u8, MAX_EPG_HDR>,
    pub(crate) trl: heapless::Vec<u8, MAX_EPG_TRL>,
}

impl Drop for PageData {
    fn drop(&mut self) {
        for &addr in self.pages.iter() {
            self.provider.page_unref(addr);
        }
        self.pages.clear();
    }
}

/// Result of [`PageData::copy_range`].
pub(crate) enum RangeCopy {
    /// Page data sharing the source's pages (one new reference per page).
    Pages(PageData),
    /// Copied header-only or trailer-only bytes.
    Bytes(heapless::Vec<u8, MAX_EPG_TRL>),
}

/// Check the page-array invariants for `npgs` pages.
pub(crate) fn validate_pages(
    npgs: usize,
    first_off: usize,
    last_len: usize,
) -> Result<(), MbufError> {
    if npgs == 0 {
        return Err(MbufError::InvalidPages("no pages"));
    }
    if npgs > MAX_PGS_PER_MBUF {
        return Err(MbufError::InvalidPages("more than MAX_PGS_PER_MBUF pages"));
    }
    if first_off >= PAGE_SIZE {
        return Err(MbufError::InvalidPages("first_off >= PAGE_SIZE"));
    }
    if last_len == 0 || last_len > PAGE_SIZE {
        return Err(MbufError::InvalidPages("last_len not in 1..=PAGE_SIZE"));
    }
    if npgs == 1 && first_off + last_len > PAGE_SIZE {
        return Err(MbufError::InvalidPages(
            "single page: first_off + last_len > PAGE_SIZE",
        ));
    }
    Ok(())
}

impl PageData {
    pub(crate) fn npgs(&self) -> usize {
        self.pages.len()
    }

    /// In-page start and length of the data of page `i` (`m_epg_pagelen`).
    pub(crate) fn seg(&self, i: usize) -> (usize, usize) {
        let n = self.npgs();
        let start = if i == 0 { self.first_off } else { 0 };
        let len = if i + 1 == n {
            self.last_len
        } else {
            PAGE_SIZE - start
        };
        (start, len)
    }

    /// Bytes of page data (excluding header and trailer).
    pub(crate) fn page_bytes(&self) -> usize {
        match self.npgs() {
            0 => 0,
            1 => self.last_len,
            n => (PAGE_SIZE - self.first_off) + (n - 2) * PAGE_SIZE + self.last_len,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.hdr.len() + self.page_bytes() + self.trl.len()
    }

    /// Page index and in-segment offset of page-data byte `p` (`p < page_bytes()`).
    pub(crate) fn locate(&self, p: usize) -> Option<(usize, usize)> {
        let mut pos = 0;
        for i in 0..self.npgs() {
            let (_, len) = self.seg(i);
            if p < pos + len {
                return Some((i, p - pos));
            }
            pos += len;
        }
        None
    }

    pub(crate) fn check(&self) -> Result<(), MbufError> {
        validate_pages(self.npgs(), self.first_off, self.last_len)
    }

    /// The next piece of the walk `c` (clipped to this mbuf's length), or `None` at its end.
    pub(crate) fn next_piece(&self, c: &mut PieceCursor) -> Option<Piece> {
        let n = self.npgs();
        while c.slot <= n + 1 && c.pos < c.end {
            let slot = c.slot;
            let pos = c.pos;
            let (in_page, len) = match slot {
                0 => (0, self.hdr.len()),
                s if s <= n => self.seg(s - 1),
                _ => (0, self.trl.len()),
            };
            c.slot += 1;
            c.pos += len;
            // Overlap of [pos, pos + len) with [start, end).
            let lo = pos.max(c.start);
            let hi = (pos + len).min(c.end);
            if lo < hi {
                let (from, len) = (lo - pos, hi - lo);
                return Some(match slot {
                    0 => Piece::Hdr { from, len },
                    s if s <= n => Piece::Page {
                        idx: s - 1,
                        start: in_page + from,
                        len,
                    },
                    _ => Piece::Trl { from, len },
                });
            }
        }
        None
    }

    /// Copy bytes `[start, start + n)` (`n > 0`, inside the mbuf) for `m_copym`: header and
    /// trailer bytes are copied, pages are shared, taking one provider reference per page of
    /// the new array. A range without page data (only header or only trailer bytes) gives
    /// [`RangeCopy::Bytes`]. On error every reference taken so far is released.
    pub(crate) fn copy_range(&self, start: usize, n: usize) -> Result<RangeCopy, MbufError> {
        let total = self.len();
        let end = start
            .checked_add(n)
            .filter(|&e| n > 0 && e <= total)
            .ok_or(MbufError::range(start, n, total))?;
        let (hl, pb) = (self.hdr.len(), self.page_bytes());
        let (plo, phi) = (start.clamp(hl, hl + pb) - hl, end.clamp(hl, hl + pb) - hl);
        if plo >= phi {
            // Only header or only trailer bytes (page data lies between them).
            let bytes = if end <= hl {
                self.hdr.get(start..end)
            } else {
                self.trl.get(start - hl - pb..end - hl - pb)
            };
            return heapless::Vec::from_slice(bytes.unwrap_or(&[]))
                .map(RangeCopy::Bytes)
                .map_err(|_| MbufError::range(start, n, total));
        }
        let hdr =
            heapless::Vec::from_slice(self.hdr.get(start.min(hl)..end.min(hl)).unwrap_or(&[]))
                .map_err(|_| MbufError::range(start, n, total))?;
        let trl = heapless::Vec::from_slice(
            self.trl
                .get(start.saturating_sub(hl + pb)..end.saturating_sub(hl + pb))
                .unwrap_or(&[]),
        )
        .map_err(|_| MbufError::range(start, n, total))?;
        let (k0, q0) = self.locate(plo).ok_or(MbufError::range(plo, 0, pb))?;
        let (k1, q1) = self.locate(phi - 1).ok_or(MbufError::range(phi, 0, pb))?;
        let (s0, _) = self.seg(k0);
        let mut out = PageData {
            provider: Arc::clone(&self.provider),
            pages: heapless::Vec::new(),
            first_off: s0 + q0,
            // Counted from the first data byte of the last page: `first_off` if it is also
            // the first page, 0 otherwise.
            last_len: if k1 == k0 { q1 + 1 - q0 } else { q1 + 1 },
            hdr,
            trl,
        };
        for k in k0..=k1 {
            let addr = self.page(k)?;
            // On error `out` is dropped, releasing the references taken so far.
            self.provider.page_ref(addr)?;
            if out.pages.push(addr).is_err() {
                self.provider.page_unref(addr);
                return Err(MbufError::InvalidPages("more than MAX_PGS_PER_MBUF pages"));
            }
        }
        Ok(RangeCopy::Pages(out))
    }

    pub(crate) fn page(&self, idx: usize) -> Result<u64, MbufError> {
        self.pages
            .get(idx)
            .copied()
            .ok_or(MbufError::InvalidPages("page index"))
    }

    /// Copy bytes `[start, start + dst.len())` out of this mbuf.
    pub(crate) fn read(&self, start: usize, dst: &mut [u8]) -> Result<(), MbufError> {
        let mut done = 0;
        let mut c = PieceCursor::new(start, dst.len());
        while let Some(piece) = self.next_piece(&mut c) {
            let len = piece.len();
            let d =
                dst.get_mut(done..done + len)
                    .ok_or(MbufError::range(start, len, self.len()))?;
            match piece {
                Piece::Hdr { from, len } => copy_exact(d, self.hdr.get(from..from + len))?,
                Piece::Trl { from, len } => copy_exact(d, self.trl.get(from..from + len))?,
                Piece::Page { idx, start, .. } => {
                    let addr = self.page(idx)?;
                    self.provider.read_page(addr, start, d)?;
                }
                Piece::Linear { .. } => return Err(MbufError::NotPageMbuf),
            }
            done += len;
        }
        if done == dst.len() {
            Ok(())
        } else {
            Err(MbufError::range(start, dst.len(), self.len()))
        }
    }

    /// Write `src` over bytes `[start, start + src.len())` of this mbuf.
    pub(crate) fn write(&mut self, start: usize, src: &[u8]) -> Result<(), MbufError> {
        let total = self.len();
        let mut done = 0;
        let mut c = PieceCursor::new(start, src.len());
        while let Some(piece) = self.next_piece(&mut c) {
            let len = piece.len();
            let s = src
                .get(done..done + len)
                .ok_or(MbufError::range(start, len, total))?;
            match piece {
                Piece::Hdr { from, len } => copy_exact_mut(self.hdr.get_mut(from..from + len), s)?,
                Piece::Trl { from, len } => copy_exact_mut(self.trl.get_mut(from..from + len), s)?,
                Piece::Page { idx, start, .. } => {
                    let addr = self.page(idx)?;
                    self.provider.write_page(addr, start, s)?;
                }
                Piece::Linear { .. } => return Err(MbufError::NotPageMbuf),
            }
            done += len;
        }
        if done == src.len() {
            Ok(())
        } else {
            Err(MbufError::range(start, src.len(), total))
        }
    }

    /// Keep bytes `[r, len)`: drop header bytes and whole pages before `r` (releasing them).
    /// Returns the remaining trailer bytes if no page data remains (the caller must then
    /// turn the mbuf into an internal one). Requires `0 < r < len`.
    pub(crate) fn trim_front(&mut self, r: usize) -> Option<heapless::Vec<u8, MAX_EPG_TRL>> {
        let hl = self.hdr.len();
        if r < hl {
            let rest =
                heapless::Vec::from_slice(self.hdr.get(r..).unwrap_or(&[])).unwrap_or_default();
            self.hdr = rest;
            return None;
        }
        let p = r - hl;
        let pb = self.page_bytes();
        if p >= pb {
            let t = p - pb;
            return Some(
                heapless::Vec::from_slice(self.trl.get(t..).unwrap_or(&[])).unwrap_or_default(),
            );
        }
        self.hdr.clear();
        // `p < page_bytes`, so `locate` succeeds; `None` would just leave the mbuf as is.
        let (k, q) = self.locate(p)?;
        let n = self.npgs();
        let (start_k, len_k) = self.seg(k);
        let last_len = if k + 1 == n { len_k - q } else { self.last_len };
        for &addr in self.pages.get(..k).unwrap_or(&[]) {
            self.provider.page_unref(addr);
        }
        let rest =
            heapless::Vec::from_slice(self.pages.get(k..).unwrap_or(&[])).unwrap_or_default();
        self.pages = rest;
        self.first_off = start_k + q;
        self.last_len = last_len;
        None
    }

    /// Keep bytes `[0, keep)`, releasing pages wholly past `keep`. Returns the remaining
    /// header bytes if no page data remains. Requires `0 < keep < len`.
    pub(crate) fn trim_back(&mut self, keep: usize) -> Option<heapless::Vec<u8, MAX_EPG_HDR>> {
        let hl = self.hdr.len();
        if keep <= hl {
            return Some(
                heapless::Vec::from_slice(self.hdr.get(..keep).unwrap_or(&[])).unwrap_or_default(),
            );
        }
        let p = keep - hl;
        let pb = self.page_bytes();
        if p > pb {
            self.trl.truncate(p - pb);
            return None;
        }
        self.trl.clear();
        // `0 < p <= page_bytes`, so `locate` succeeds.
        let (k, q) = self.locate(p - 1)?;
        for &addr in self.pages.get(k + 1..).unwrap_or(&[]) {
            self.provider.page_unref(addr);
        }
        self.pages.truncate(k + 1);
        self.last_len = q + 1;
        None
    }
}

/// Copy `src` into `dst`, which must have the same length.
pub(crate) fn copy_exact(dst: &mut [u8], src: Option<&[u8]>) -> Result<(), MbufError> {
    match src {
        Some(s) if s.len() == dst.len() => {
            dst.copy_from_slice(s);
            Ok(())
        }
        _ => Err(MbufError::range(0, dst.len(), src.map_or(0, <[u8]>::len))),
    }
}

/// Copy `src` into `dst`, which must have the same length.
pub(crate) fn copy_exact_mut(dst: Option<&mut [u8]>, src: &[u8]) -> Result<(), MbufError> {
    match dst {
        Some(d) if d.len() == src.len() => {
            d.copy_from_slice(src);
            Ok(())
        }
        d => Err(MbufError::range(0, src.len(), d.map_or(0, |d| d.len()))),
    }
}
