//! Mbuf chains and the FreeBSD-style chain operations.

use alloc::collections::{vec_deque, VecDeque};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::ops::Range;

use crate::error::MbufError;
use crate::flags::MbufFlags;
use crate::mbuf::{Data, Fragment, Mbuf, MbufFragments, MAX_CLUSTER, MCLBYTES, MLEN};
use crate::page::{PageData, PageProvider, MAX_PGS_PER_MBUF, PAGE_SIZE};
use crate::pool::ChainPool;

/// A chain of mbufs (one packet / RPC message), the `m_next` list of FreeBSD.
///
/// Stored as a `VecDeque<Mbuf>` whose growth is always fallible (`try_reserve`), so every
/// operation that may allocate returns [`MbufError::Alloc`] instead of aborting. Dropping the
/// chain (or [`Chain::clear`]) frees every mbuf and releases every page reference (`m_freem`).
/// A chain taken from a [`ChainPool`] gives its storage back to the pool when dropped; the
/// chains [`split`](Chain::split) makes from it come from the same pool.
///
/// The chain keeps its length (`m_pkthdr.len`, kept up to date by every operation), so
/// [`Chain::len`] does not walk the mbufs; only after [`Chain::mbufs_mut`] (which can change
/// an mbuf's length) is it walked again, until the next operation that sets it.
#[derive(Default)]
pub struct Chain {
    pub(crate) mbufs: VecDeque<Mbuf>,
    /// Total bytes of `mbufs`, or [`LEN_UNKNOWN`] after [`Chain::mbufs_mut`].
    len: usize,
    pool: Option<Arc<ChainPool>>,
}

/// The cached length of a chain whose mbufs were handed out mutably: walk them.
const LEN_UNKNOWN: usize = usize::MAX;

impl Drop for Chain {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            // Free the mbufs (and page references) before touching the pool.
            let mbufs = self.take_storage();
            pool.put(mbufs);
        }
    }
}

/// Bytes being appended to a chain: the new mbufs are already at its end (allocated and
/// filled), the bytes for the trailing space of the old last mbuf not yet written. Either
/// committed ([`Chain::commit_extend`]) or taken back ([`Chain::abort_extend`]).
struct Extension {
    /// Bytes that go into the trailing space of the old last mbuf.
    tail: usize,
    /// Mbufs in the chain before the extension.
    before: usize,
}

/// Mbufs a chain's first storage holds: as many as fit in 1 KiB (at least one), so that
/// storage is a small allocation (the kernel's small malloc zones; glibc's per-thread cache,
/// which serves blocks up to 1,032 bytes) rather than `VecDeque`'s default first capacity of
/// four mbufs (1,120 bytes), which costs a slow-path malloc and free per chain.
const FIRST_MBUFS: usize = {
    let n = 1024 / core::mem::size_of::<Mbuf>();
    if n == 0 {
        1
    } else {
        n
    }
};

/// Room for `n` more mbufs in `mbufs`: the first storage holds at least [`FIRST_MBUFS`],
/// later growth is `VecDeque`'s amortized doubling.
#[inline]
fn reserve_mbufs(mbufs: &mut VecDeque<Mbuf>, n: usize) -> Result<(), MbufError> {
    if n == 0 {
        return Ok(());
    }
    if mbufs.capacity() == 0 {
        mbufs.try_reserve_exact(n.max(FIRST_MBUFS))?;
    } else {
        mbufs.try_reserve(n)?;
    }
    Ok(())
}

/// Copy `dst.len()` bytes starting at chain offset `off` out of `mbufs`.
fn copy_out(mbufs: &VecDeque<Mbuf>, off: usize, dst: &mut [u8]) -> Result<(), MbufError> {
    let total = dst.len();
    let end = off.saturating_add(total);
    let mut pos = 0;
    let mut done = 0;
    for m in mbufs {
        if done == dst.len() {
            break;
        }
        let l = m.len();
        let (lo, hi) = (pos.max(off), (pos + l).min(end));
        if lo < hi {
            let d = dst
                .get_mut(done..done + (hi - lo))
                .ok_or(MbufError::range(off, total, end))?;
            m.read(lo - pos, d)?;
            done += hi - lo;
        }
        pos += l;
    }
    if done == dst.len() {
        Ok(())
    } else {
        Err(MbufError::range(off, dst.len(), pos))
    }
}

/// Remove the first `k` bytes of `mbufs`: mbufs wholly before `k` (and zero-length mbufs at
/// offsets `< k`) are dropped, the mbuf straddling `k` is trimmed. Never allocates.
fn trim_head(mbufs: &mut VecDeque<Mbuf>, k: usize) {
    let mut consumed = 0;
    while let Some(front) = mbufs.front_mut() {
        let l = front.len();
        if l == 0 {
            if consumed < k {
                mbufs.pop_front();
                continue;
            }
            break;
        }
        let rem = k - consumed;
        if rem == 0 {
            break;
        }
        if l <= rem {
            mbufs.pop_front();
            consumed += l;
        } else {
            front.trim_front(rem);
            break;
        }
    }
}

impl Chain {
    /// An empty chain (no mbufs). Allocates nothing.
    pub const fn new() -> Self {
        Chain {
            mbufs: VecDeque::new(),
            len: 0,
            pool: None,
        }
    }

    /// A chain over storage from `pool` (see [`ChainPool::chain`]).
    pub(crate) fn pooled(mut mbufs: VecDeque<Mbuf>, pool: Arc<ChainPool>) -> Self {
        // The pool holds emptied buffers only.
        if !mbufs.is_empty() {
            mbufs.clear();
        }
        Chain {
            mbufs,
            len: 0,
            pool: Some(pool),
        }
    }

    /// An empty chain from the same pool as this one (or a plain one).
    fn sibling(&self) -> Chain {
        match &self.pool {
            Some(p) => p.chain(),
            None => Chain::new(),
        }
    }

    /// Mbufs the chain can hold without growing its storage.
    #[inline]
    pub fn mbuf_capacity(&self) -> usize {
        self.mbufs.capacity()
    }

    /// Take the chain's storage, emptied (its mbufs freed); the chain is left without any.
    pub(crate) fn take_storage(&mut self) -> VecDeque<Mbuf> {
        let mut mbufs = core::mem::take(&mut self.mbufs);
        self.len = 0;
        if !mbufs.is_empty() {
            mbufs.clear();
        }
        mbufs
    }

    /// Empty the chain but keep its first mbuf, emptied, when that is a writable internal
    /// mbuf (not a marker): every other mbuf is freed and the chain no longer belongs to a
    /// pool. False (the chain unchanged) when the first mbuf cannot be kept.
    pub(crate) fn prime(&mut self) -> bool {
        let keep = self.mbufs.front().is_some_and(|m| {
            m.kind() == crate::MbufKind::Internal && m.is_writable() && !m.is_ddp_marker()
        });
        if !keep {
            return false;
        }
        if self.mbufs.len() > 1 {
            self.mbufs.truncate(1);
        }
        if let Some(m) = self.mbufs.front_mut() {
            m.reset_linear();
        }
        self.len = 0;
        self.pool = None;
        true
    }

    /// Make the chain's storage return to `pool` when it is dropped.
    pub(crate) fn adopt(&mut self, pool: Arc<ChainPool>) {
        self.pool = Some(pool);
    }

    /// Whether this chain's storage returns to a [`ChainPool`].
    #[inline]
    pub fn is_pooled(&self) -> bool {
        self.pool.is_some()
    }

    /// Move every mbuf of `other` to the end of this chain (like [`Chain::cat`]), leaving
    /// `other` empty with its storage, to be refilled without allocating.
    ///
    /// # Errors
    /// [`MbufError::Alloc`]; both chains are then unchanged.
    pub fn cat_from(&mut self, other: &mut Chain) -> Result<(), MbufError> {
        reserve_mbufs(&mut self.mbufs, other.mbufs.len())?;
        let len = self.len().saturating_add(other.len());
        for m in other.mbufs.iter_mut() {
            m.remove_flags(MbufFlags::PKTHDR);
        }
        self.mbufs.append(&mut other.mbufs);
        self.len = len;
        other.len = 0;
        Ok(())
    }

    /// A chain of one mbuf.
    ///
    /// # Errors
    /// [`MbufError::Alloc`] (the mbuf is dropped).
    pub fn from_mbuf(m: Mbuf) -> Result<Self, MbufError> {
        let mut c = Chain::new();
        c.append_mbuf(m)?;
        Ok(c)
    }

    /// A chain holding a copy of `data` in internal/cluster mbufs (like `m_copyback` onto an
    /// empty chain).
    ///
    /// # Errors
    /// [`MbufError::Alloc`].
    pub fn from_bytes(data: &[u8]) -> Result<Self, MbufError> {
        let mut c = Chain::new();
        c.append(data)?;
        Ok(c)
    }

    /// Total bytes in the chain (`m_pkthdr.len`; `m_length` after [`Chain::mbufs_mut`]).
    #[inline]
    pub fn len(&self) -> usize {
        if self.len == LEN_UNKNOWN {
            return self.walk_len();
        }
        debug_assert_eq!(self.len, self.walk_len(), "cached chain length");
        self.len
    }

    /// The length by walking the mbufs (`m_length`).
    fn walk_len(&self) -> usize {
        self.mbufs.iter().map(Mbuf::len).sum()
    }

    /// True if the chain holds no bytes (it may still hold zero-length mbufs such as markers).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of mbufs, zero-length ones included.
    #[inline]
    pub fn mbuf_count(&self) -> usize {
        self.mbufs.len()
    }

    /// The mbufs in order (with their flags via [`Mbuf::flags`]).
    #[inline]
    pub fn mbufs(&self) -> vec_deque::Iter<'_, Mbuf> {
        self.mbufs.iter()
    }

    /// The mbufs in order, mutably (flags, page header/trailer via [`Mbuf::set_epg_hdr`] /
    /// [`Mbuf::set_epg_trl`]; nothing else of an mbuf can change through this).
    pub fn mbufs_mut(&mut self) -> vec_deque::IterMut<'_, Mbuf> {
        // An mbuf's length may change (page header/trailer, or the mbuf replaced).
        self.len = LEN_UNKNOWN;
        self.mbufs.iter_mut()
    }

    /// First mbuf.
    #[inline]
    pub fn first(&self) -> Option<&Mbuf> {
        self.mbufs.front()
    }

    /// Last mbuf.
    #[inline]
    pub fn last(&self) -> Option<&Mbuf> {
        self.mbufs.back()
    }

    fn has_pkthdr(&self) -> bool {
        self.mbufs
            .front()
            .is_some_and(|m| m.flags().contains(MbufFlags::PKTHDR))
    }

    /// Keep `PKTHDR` on the first mbuf only (present iff `had`).
    fn fix_pkthdr(&mut self, had: bool) {
        for (i, m) in self.mbufs.iter_mut().enumerate() {
            if i == 0 && had {
                m.insert_flags(MbufFlags::PKTHDR);
            } else {
                m.remove_flags(MbufFlags::PKTHDR);
            }
        }
    }

    /// Free every mbuf and release every page reference (`m_freem`); the chain stays usable.
    pub fn clear(&mut self) {
        self.len = 0;
        if !self.mbufs.is_empty() {
            self.mbufs.clear();
        }
    }

    /// Consume and free the chain (`m_freem`); same as dropping it.
    pub fn free(self) {}

    /// Append one mbuf at the end (`m->m_next = n` on the last mbuf). A `PKTHDR` flag on `m`
    /// is cleared unless the chain has no mbufs.
    ///
    /// # Errors
    /// [`MbufError::Alloc`]; `m` is then dropped (its page references released).
    pub fn append_mbuf(&mut self, mut m: Mbuf) -> Result<(), MbufError> {
        reserve_mbufs(&mut self.mbufs, 1)?;
        if !self.mbufs.is_empty() {
            m.remove_flags(MbufFlags::PKTHDR);
        }
        self.len = self.len().saturating_add(m.len());
        self.mbufs.push_back(m);
        Ok(())
    }

    /// Concatenate `other` after `self` (`m_cat`). Mbufs are moved, never copied (unlike
    /// FreeBSD, small data is not compacted into the last mbuf), so markers and flags survive;
    /// `PKTHDR` is cleared on `other`'s mbufs (`m_demote_pkthdr`).
    ///
    /// # Errors
    /// [`MbufError::Alloc`]; `other` is then dropped and `self` is unchanged.
    pub fn cat(&mut self, mut other: Chain) -> Result<(), MbufError> {
        self.cat_from(&mut other)
    }

    /// Find where chain offset `off` cuts the chain: returns `(i, r)` where mbufs `..i` lie
    /// wholly before `off` and `r` is the cut inside mbuf `i` (`0 <= r < len_i`; 0 means mbuf
    /// `i` lies wholly at or after `off`). Zero-length mbufs at offset exactly `off` are "after".
    fn cut_point(&self, off: usize) -> (usize, usize) {
        let mut pos = 0;
        for (i, m) in self.mbufs.iter().enumerate() {
            let l = m.len();
            let left = if l == 0 { pos < off } else { pos + l <= off };
            if !left {
                return (i, off.saturating_sub(pos));
            }
            pos += l;
        }
        (self.mbufs.len(), 0)
    }

    /// Split the chain at byte `off` (`m_split`): `self` keeps `[0, off)`, the returned chain
    /// holds `[off, len)`.
    ///
    /// Works at any offset `0..=len`. Zero-length mbufs lying exactly at `off` (e.g. a DDP
    /// marker) go to the right part, so a marker stays in front of the data it marks. A cut
    /// inside an mbuf:
    /// * internal: the tail is copied into a new internal mbuf;
    /// * cluster: the smaller side is copied into a new mbuf (internal if ≤ `MLEN`, else a
    ///   new cluster — fallible). FreeBSD would share the cluster by reference count instead;
    ///   we avoid infallible `Arc` allocations;
    /// * page mbuf: no page data is copied; the pages are divided between the two sides with
    ///   correct `first_off`/`last_len`, and a page holding bytes of both sides gets one extra
    ///   provider reference (`page_ref`). Header bytes before the cut stay left, trailer
    ///   bytes after it go right; a side left with only header (or trailer) bytes becomes an
    ///   internal mbuf.
    ///
    /// The left piece of a cut mbuf keeps its flags minus `EOR`, the right piece gets `RDONLY`
    /// and `EOR` from it. If the chain had `PKTHDR`, both chains have it on their first mbuf.
    ///
    /// # Errors
    /// [`MbufError::OutOfRange`] if `off > len`; [`MbufError::Alloc`] or
    /// [`MbufError::Page`]; the chain is then unchanged.
    pub fn split(&mut self, off: usize) -> Result<Chain, MbufError> {
        let len = self.len();
        if off > len {
            return Err(MbufError::range(off, 0, len));
        }
        let had = self.has_pkthdr();
        let (i, r) = self.cut_point(off);
        let mut right = self.sibling();
        reserve_mbufs(&mut right.mbufs, self.mbufs.len().saturating_sub(i))?;
        if r > 0 {
            let m = self.mbufs.get_mut(i).ok_or(MbufError::range(off, 0, len))?;
            right.mbufs.push_back(m.split_at(r)?);
            right.mbufs.extend(self.mbufs.drain(i + 1..));
        } else {
            right.mbufs.extend(self.mbufs.drain(i..));
        }
        self.len = off;
        right.len = len - off;
        self.fix_pkthdr(had);
        right.fix_pkthdr(had);
        Ok(right)
    }

    /// A new chain holding bytes `[off, off + len)` of this one (`m_copym`).
    ///
    /// * **Page data is shared, not copied**: each page mbuf of the copy names the same pages
    ///   (with `first_off`/`last_len` clipped to the range) and holds its own provider
    ///   reference on each of them (one `page_ref` per page it holds), so either chain can
    ///   be dropped first without freeing pages the other still holds.
    /// * **Copied page mbufs are `RDONLY`** (FreeBSD's rule that copies of shared external
    ///   storage are not writable): [`Chain::copyback`] into their bytes fails with
    ///   [`MbufError::ReadOnly`] and their header/trailer cannot be set. The source chain's
    ///   flags are not changed (`&self`), so the source stays writable: writing through it
    ///   is visible in the copy.
    /// * Internal and cluster bytes, and page header/trailer bytes, are copied (fallibly)
    ///   into new writable internal mbufs (≤ `MLEN` bytes) or clusters; a piece holding only
    ///   header or trailer bytes of a page mbuf becomes an internal mbuf.
    /// * Zero-length mbufs at offsets in `[off, off + len)` are copied, DDP markers as
    ///   markers; so a marker exactly at `off` is copied and one exactly at `off + len` is
    ///   not. The copy has the bytes and markers of the middle part of `split(off)` then
    ///   `split(len)`. `copym(off, 0)` is an empty chain (no mbufs).
    /// * Flags: `PKTHDR` on the first mbuf of the copy iff this chain has it (like
    ///   [`Chain::split`]; FreeBSD copies the packet header only when `off == 0`); a piece
    ///   keeps `DDP_START` if it starts at its source mbuf's start and `EOR` if it ends at
    ///   its end; `RDONLY` only on page mbufs (see above).
    ///
    /// # Errors
    /// [`MbufError::OutOfRange`] if `off + len > self.len()`; [`MbufError::Alloc`] or
    /// [`MbufError::Page`] (a failing `page_ref`): every reference and buffer taken so far is
    /// released. `self` is never changed.
    pub fn copym(&self, off: usize, len: usize) -> Result<Chain, MbufError> {
        let total = self.len();
        let end = off
            .checked_add(len)
            .filter(|&e| e <= total)
            .ok_or(MbufError::range(off, len, total))?;
        // On error `out` is dropped, releasing every page reference taken so far.
        let mut out = Chain::new();
        if len == 0 {
            return Ok(out);
        }
        let mut pos = 0;
        for m in &self.mbufs {
            if pos >= end {
                break;
            }
            let l = m.len();
            let (lo, hi) = (pos.max(off), (pos + l).min(end));
            let take = if l == 0 { pos >= off } else { lo < hi };
            if take {
                reserve_mbufs(&mut out.mbufs, 1)?;
                out.mbufs.push_back(m.copy_range(lo - pos, hi - lo)?);
            }
            pos += l;
        }
        out.len = len;
        out.fix_pkthdr(self.has_pkthdr());
        Ok(out)
    }

    /// Copy `dst.len()` bytes starting at `off` into `dst` (`m_copydata`). Page bytes are read
    /// through the provider.
    ///
    /// # Errors
    /// [`MbufError::OutOfRange`] if `off + dst.len() > len`; [`MbufError::Page`].
    pub fn copydata(&self, off: usize, dst: &mut [u8]) -> Result<(), MbufError> {
        if off.checked_add(dst.len()).is_none() {
            return Err(MbufError::range(off, dst.len(), self.len()));
        }
        if dst.is_empty() {
            // Nothing to copy, but the offset must still lie within the chain.
            let len = self.len();
            return if off <= len {
                Ok(())
            } else {
                Err(MbufError::range(off, 0, len))
            };
        }
        // `copy_out` reports a range past the end itself (one pass, no `len()` first).
        copy_out(&self.mbufs, off, dst)
    }

    /// Copy the whole chain to the start of `dst` in one pass; returns its length.
    ///
    /// # Errors
    /// [`MbufError::OutOfRange`] if `dst` is shorter than the chain (bytes before the end of
    /// `dst` may have been written); [`MbufError::Page`].
    pub fn copy_to_slice(&self, dst: &mut [u8]) -> Result<usize, MbufError> {
        // One linear mbuf (every small message): one copy, no walk.
        if let (1, Some(b)) = (self.mbufs.len(), self.mbufs.front().and_then(Mbuf::data)) {
            return match dst.get_mut(..b.len()) {
                Some(d) => {
                    d.copy_from_slice(b);
                    Ok(b.len())
                }
                None => Err(MbufError::range(0, b.len(), dst.len())),
            };
        }
        let mut at = 0usize;
        for m in &self.mbufs {
            let l = m.len();
            let Some(d) = dst.get_mut(at..at + l) else {
                return Err(MbufError::range(0, self.len(), at));
            };
            match m.data() {
                Some(b) if b.len() == l => d.copy_from_slice(b),
                _ => m.read(0, d)?,
            }
            at += l;
        }
        Ok(at)
    }

    /// Make the chain hold exactly a copy of `data`: the same as [`Chain::clear`] then
    /// [`Chain::append`], but an internal first mbuf is refilled in place when `data` fits
    /// it (no mbuf freed and built again).
    ///
    /// # Errors
    /// As [`Chain::append`] (the chain is then empty).
    pub fn set_bytes(&mut self, data: &[u8]) -> Result<(), MbufError> {
        if !data.is_empty() {
            if let Some(m) = self.mbufs.front_mut() {
                if m.is_writable() && !m.is_ddp_marker() && m.refill(data) {
                    if self.mbufs.len() > 1 {
                        self.mbufs.truncate(1);
                    }
                    self.len = data.len();
                    return Ok(());
                }
            }
        }
        self.clear();
        self.append(data)
    }

    /// Copy the whole chain into a new vector.
    ///
    /// # Errors
    /// [`MbufError::Alloc`] or [`MbufError::Page`].
    pub fn to_vec(&self) -> Result<Vec<u8>, MbufError> {
        let len = self.len();
        let mut v = Vec::new();
        v.try_reserve_exact(len)?;
        v.resize(len, 0);
        copy_out(&self.mbufs, 0, &mut v)?;
        Ok(v)
    }

    /// True if an `RDONLY` mbuf has bytes in `[off, end)`.
    fn readonly_in(&self, off: usize, end: usize) -> bool {
        let mut pos = 0;
        for m in &self.mbufs {
            let l = m.len();
            if pos >= end {
                break;
            }
            if !m.is_writable() && pos.max(off) < (pos + l).min(end) {
                return true;
            }
            pos += l;
        }
        false
    }

    /// Put the new mbufs needed to append `data` at the end of the chain (the bytes that fit
    /// the old last mbuf's trailing space wait for [`commit_extend`](Self::commit_extend)).
    /// No temporary storage: the chain's own room is reserved first. On error the chain is
    /// unchanged.
    fn prepare_extend(&mut self, data: &[u8]) -> Result<Extension, MbufError> {
        let tail = self
            .mbufs
            .back()
            .map_or(0, Mbuf::trailing_space)
            .min(data.len());
        let rest = data.get(tail..).unwrap_or(&[]);
        reserve_mbufs(&mut self.mbufs, rest.len().div_ceil(MCLBYTES))?;
        let ext = Extension {
            tail,
            before: self.mbufs.len(),
        };
        for chunk in rest.chunks(MCLBYTES) {
            match Mbuf::linear_for(chunk) {
                // Room was reserved above: no reallocation here.
                Ok(m) => self.mbufs.push_back(m),
                Err(e) => {
                    self.abort_extend(ext);
                    return Err(e);
                }
            }
        }
        Ok(ext)
    }

    /// Take back a prepared extension.
    fn abort_extend(&mut self, ext: Extension) {
        self.mbufs.truncate(ext.before);
    }

    /// Finish a prepared extension (cannot fail: everything is allocated).
    fn commit_extend(&mut self, ext: Extension, data: &[u8]) {
        if ext.tail > 0 {
            let last = ext
                .before
                .checked_sub(1)
                .and_then(|i| self.mbufs.get_mut(i));
            if let (Some(last), Some(bytes)) = (last, data.get(..ext.tail)) {
                last.push_tail(bytes);
            }
        }
    }

    /// Append `data` at the end (`m_append`): first into the trailing space of the last mbuf
    /// (if it is a writable internal/cluster mbuf and not a DDP marker), then into new
    /// internal mbufs (≤ `MLEN` bytes) or `MCLBYTES` clusters.
    ///
    /// # Errors
    /// [`MbufError::Alloc`]; the chain is then unchanged.
    pub fn append(&mut self, data: &[u8]) -> Result<(), MbufError> {
        if data.is_empty() {
            return Ok(());
        }
        // Fast path: what does not fit the last mbuf fits one new internal mbuf, filled where
        // it lies in the chain (no temporary mbuf moved around).
        let tail = self
            .mbufs
            .back()
            .map_or(0, Mbuf::trailing_space)
            .min(data.len());
        let len = self.len().saturating_add(data.len());
        if let (Some(head), Some(rest)) = (data.get(..tail), data.get(tail..)) {
            if rest.len() <= MLEN {
                if !rest.is_empty() {
                    reserve_mbufs(&mut self.mbufs, 1)?;
                }
                self.len = len;
                if let Some(last) = self.mbufs.back_mut() {
                    last.push_tail(head);
                }
                if !rest.is_empty() {
                    self.mbufs.push_back(Mbuf::EMPTY_INTERNAL);
                    if let Some(m) = self.mbufs.back_mut() {
                        m.push_tail(rest);
                    }
                }
                return Ok(());
            }
        }
        let ext = self.prepare_extend(data)?;
        self.commit_extend(ext, data);
        self.len = len;
        Ok(())
    }

    /// Write `src` at offset `off` (`m_copyback`): existing bytes are overwritten in place
    /// (page bytes through the provider); bytes past the end extend the chain like
    /// [`Chain::append`]. Unlike FreeBSD, `off > len` is an error (no zero filling).
    ///
    /// # Errors
    /// [`MbufError::OutOfRange`] if `off > len`; [`MbufError::ReadOnly`] if a byte to
    /// overwrite belongs to an `RDONLY` mbuf; [`MbufError::Alloc`] (chain unchanged in all
    /// these cases); [`MbufError::Page`] if the provider fails mid-write, in which case bytes
    /// before the failing page may already be written and the chain is not extended.
    pub fn copyback(&mut self, off: usize, src: &[u8]) -> Result<(), MbufError> {
        let len = self.len();
        let end = off
            .checked_add(src.len())
            .filter(|_| off <= len)
            .ok_or(MbufError::range(off, src.len(), len))?;
        let over_end = end.min(len);
        if off < over_end && self.readonly_in(off, over_end) {
            return Err(MbufError::ReadOnly);
        }
        let (over, ext_bytes) = src
            .split_at_checked(over_end - off)
            .ok_or(MbufError::range(off, src.len(), len))?;
        let ext = self.prepare_extend(ext_bytes)?;
        let mut pos = 0;
        let mut done = 0;
        let mut written = Ok(());
        for m in self.mbufs.iter_mut() {
            if done == over.len() {
                break;
            }
            let l = m.len();
            let (lo, hi) = (pos.max(off), (pos + l).min(over_end));
            if lo < hi {
                written = over
                    .get(done..done + (hi - lo))
                    .ok_or(MbufError::range(off, src.len(), len))
                    .and_then(|s| m.write(lo - pos, s));
                if written.is_err() {
                    break;
                }
                done += hi - lo;
            }
            pos += l;
        }
        match written {
            Ok(()) => {
                self.commit_extend(ext, ext_bytes);
                self.len = len + ext_bytes.len();
                Ok(())
            }
            Err(e) => {
                self.abort_extend(ext);
                Err(e)
            }
        }
    }

    /// Make room for `n` bytes in front of the chain and return them (`M_PREPEND`).
    ///
    /// Uses the leading space of the first mbuf when it is a writable internal/cluster mbuf
    /// (not a DDP marker) with at least `n` bytes of it; the returned bytes then hold whatever
    /// was there before. Otherwise a new mbuf is put in front: internal if `n <= MLEN`
    /// (data at the end of the buffer, `M_ALIGN`), else a cluster of `max(n, MCLBYTES)`
    /// bytes; its bytes are zero. `PKTHDR` moves to the new first mbuf.
    ///
    /// # Errors
    /// [`MbufError::TooLarge`] if `n > MAX_CLUSTER`; [`MbufError::Alloc`].
    pub fn prepend(&mut self, n: usize) -> Result<&mut [u8], MbufError> {
        if n == 0 {
            return Ok(&mut []);
        }
        let usable = self.mbufs.front().is_some_and(|m| m.leading_space() >= n);
        let len = self.len().saturating_add(n);
        if usable {
            if let Some(m) = self.mbufs.front_mut() {
                m.grow_front(n);
            }
        } else {
            if n > MAX_CLUSTER {
                return Err(MbufError::TooLarge {
                    requested: n,
                    limit: MAX_CLUSTER,
                });
            }
            let had = self.has_pkthdr();
            reserve_mbufs(&mut self.mbufs, 1)?;
            let mut m = if n <= MLEN {
                Mbuf::internal_with_leading(MLEN, &[])?
            } else {
                let size = n.max(MCLBYTES);
                Mbuf::cluster_with(size, size, &[])?
            };
            m.grow_front(n);
            self.mbufs.push_front(m);
            self.fix_pkthdr(had);
        }
        self.len = len;
        self.mbufs
            .front_mut()
            .and_then(Mbuf::data_mut)
            .and_then(|d| d.get_mut(..n))
            .ok_or(MbufError::range(0, n, 0))
    }

    /// Prepend a copy of `data` (`M_PREPEND` + copy); see [`Chain::prepend`].
    ///
    /// # Errors
    /// As [`Chain::prepend`].
    pub fn prepend_bytes(&mut self, data: &[u8]) -> Result<(), MbufError> {
        let dst = self.prepend(data.len())?;
        crate::page::copy_exact(dst, Some(data))
    }

    /// Trim bytes (`m_adj`): `n > 0` removes `n` bytes from the head, `n < 0` removes `-n`
    /// bytes from the tail. Never allocates.
    ///
    /// Mbufs emptied by the trim are freed (FreeBSD leaves emptied head mbufs in place with
    /// `m_len = 0`), page mbufs release the pages that no longer hold data and adjust
    /// `first_off`/`last_len`; a page mbuf left with only header/trailer bytes becomes an
    /// internal mbuf. For `n != 0` the result is exactly the corresponding part of `split(n)`
    /// (head) or `split(len - n)` (tail), including where zero-length mbufs (markers) end up: a head
    /// trim removes those at offsets `< n`, a tail trim removes those at offsets `>= len - n`.
    /// `adj(0)` changes nothing.
    ///
    /// # Errors
    /// [`MbufError::OutOfRange`] if `|n| > len` (FreeBSD would trim everything); the chain is
    /// then unchanged.
    pub fn adj(&mut self, n: i64) -> Result<(), MbufError> {
        if n == 0 {
            return Ok(());
        }
        let len = self.len();
        let k = usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX);
        if k > len {
            return Err(MbufError::range(0, k, len));
        }
        self.len = len - k;
        if n > 0 {
            let had = self.has_pkthdr();
            trim_head(&mut self.mbufs, k);
            self.fix_pkthdr(had);
        } else {
            let (i, r) = self.cut_point(len - k);
            if r > 0 {
                if let Some(m) = self.mbufs.get_mut(i) {
                    m.trim_back(r);
                }
                self.mbufs.truncate(i + 1);
            } else {
                self.mbufs.truncate(i);
            }
        }
        Ok(())
    }

    /// Make the first `n` bytes contiguous in the first mbuf and return them (`m_pullup`).
    ///
    /// If the first mbuf is an internal/cluster mbuf holding `n` bytes already, nothing
    /// changes. Otherwise bytes are copied (from any kind of mbuf, pages included) into the
    /// first mbuf if it is a writable internal/cluster mbuf whose buffer can hold `n` bytes
    /// (its data is moved to the buffer start if needed), else into a new mbuf put in front
    /// (internal if `n <= MLEN`, else an `MCLBYTES` cluster). Source mbufs are trimmed;
    /// emptied ones are freed (pages released). `PKTHDR` stays on the first mbuf.
    ///
    /// # Errors
    /// [`MbufError::TooLarge`] if `n > MCLBYTES`; [`MbufError::OutOfRange`] if `n > len`;
    /// [`MbufError::CrossesDdpMarker`] if a DDP marker lies at an offset `< n` (its region
    /// would be destroyed); [`MbufError::Alloc`]; [`MbufError::Page`]. The chain is
    /// unchanged in every error case (its first mbuf's data may have moved inside its
    /// buffer).
    pub fn pullup(&mut self, n: usize) -> Result<&[u8], MbufError> {
        if n > MCLBYTES {
            return Err(MbufError::TooLarge {
                requested: n,
                limit: MCLBYTES,
            });
        }
        let len = self.len();
        if n > len {
            return Err(MbufError::range(0, n, len));
        }
        if n == 0 {
            return Ok(&[]);
        }
        let ready = self
            .mbufs
            .front()
            .and_then(Mbuf::data)
            .is_some_and(|d| d.len() >= n);
        if !ready {
            self.gather_front(n)?;
        }
        self.mbufs
            .front()
            .and_then(Mbuf::data)
            .and_then(|d| d.get(..n))
            .ok_or(MbufError::range(0, n, len))
    }

    fn gather_front(&mut self, n: usize) -> Result<(), MbufError> {
        let mut pos = 0;
        for m in &self.mbufs {
            if pos >= n {
                break;
            }
            if m.is_ddp_marker() {
                return Err(MbufError::CrossesDdpMarker);
            }
            pos += m.len();
        }
        let had = self.has_pkthdr();
        let in_place = self.mbufs.front().is_some_and(|m| {
            m.is_writable() && !m.is_ddp_marker() && m.buf_size().is_some_and(|s| s >= n)
        });
        let mut target = if in_place {
            self.mbufs.pop_front().ok_or(MbufError::range(0, n, 0))?
        } else {
            reserve_mbufs(&mut self.mbufs, 1)?;
            if n <= MLEN {
                Mbuf::internal(&[])?
            } else {
                Mbuf::cluster(&[])?
            }
        };
        let have = target.len();
        let need = n - have;
        let res = match target.room_after(n) {
            Some(room) => copy_out(&self.mbufs, 0, room),
            None => Err(MbufError::range(0, n, have)),
        };
        if let Err(e) = res {
            if in_place {
                // Popping freed a slot: this push cannot reallocate.
                self.mbufs.push_front(target);
            }
            return Err(e);
        }
        target.set_len_after_room(n);
        trim_head(&mut self.mbufs, need);
        self.mbufs.push_front(target);
        self.fix_pkthdr(had);
        Ok(())
    }

    /// Iterate over the chain's bytes as fragments, in order: mapped bytes of internal and
    /// cluster mbufs and of page headers/trailers, and page pieces. Empty pieces are skipped.
    pub fn fragments(&self) -> Fragments<'_> {
        Fragments {
            mbufs: self.mbufs.iter(),
            cur: None,
            pos: 0,
            start: 0,
            end: usize::MAX,
        }
    }

    /// Fragments covering exactly the bytes of `range` (pieces clipped to it).
    ///
    /// # Errors
    /// [`MbufError::OutOfRange`] unless `range.start <= range.end <= len`.
    pub fn fragments_in(&self, range: Range<usize>) -> Result<Fragments<'_>, MbufError> {
        let len = self.len();
        if range.start > range.end || range.end > len {
            return Err(MbufError::range(
                range.start,
                range.end.saturating_sub(range.start),
                len,
            ));
        }
        Ok(Fragments {
            mbufs: self.mbufs.iter(),
            cur: None,
            pos: 0,
            start: range.start,
            end: range.end,
        })
    }

    /// Allocate fresh pages from `provider` for `len` bytes and return them as page mbufs
    /// of up to [`MAX_PGS_PER_MBUF`] pages each (`first_off = 0`, the last page partially
    /// used). Page contents are whatever the provider gives (the heap arena zeroes them).
    /// `len == 0` gives an empty chain.
    ///
    /// # Errors
    /// [`MbufError::Alloc`] if the provider is exhausted or the chain cannot grow; every page
    /// allocated so far is released.
    pub fn alloc_pages(provider: &Arc<dyn PageProvider>, len: usize) -> Result<Chain, MbufError> {
        let mut chain = Chain::new();
        chain.append_pages(provider, len)?;
        Ok(chain)
    }

    /// Append page mbufs of fresh pages for `len` bytes, as [`Chain::alloc_pages`] makes them
    /// (into this chain's storage: no allocation when it has room).
    ///
    /// # Errors
    /// As [`Chain::alloc_pages`]; the chain is then unchanged (every page taken is released).
    pub fn append_pages(
        &mut self,
        provider: &Arc<dyn PageProvider>,
        len: usize,
    ) -> Result<(), MbufError> {
        const PER_MBUF: usize = MAX_PGS_PER_MBUF * PAGE_SIZE;
        reserve_mbufs(&mut self.mbufs, len.div_ceil(PER_MBUF))?;
        let total = self.len().saturating_add(len);
        let before = self.mbufs.len();
        let mut remaining = len;
        while remaining > 0 {
            let bytes = remaining.min(PER_MBUF);
            let npgs = bytes.div_ceil(PAGE_SIZE);
            let mut pd = PageData {
                provider: Arc::clone(provider),
                pages: heapless::Vec::new(),
                first_off: 0,
                last_len: bytes - (npgs - 1) * PAGE_SIZE,
                hdr: heapless::Vec::new(),
                trl: heapless::Vec::new(),
            };
            for _ in 0..npgs {
                // On error `pd` and the mbufs added so far are dropped, releasing every page
                // taken.
                let addr = match provider.alloc_page() {
                    Ok(a) => a,
                    Err(e) => {
                        self.mbufs.truncate(before);
                        return Err(e.into());
                    }
                };
                if pd.pages.push(addr).is_err() {
                    provider.page_unref(addr);
                    self.mbufs.truncate(before);
                    return Err(MbufError::InvalidPages("too many pages"));
                }
            }
            self.mbufs
                .push_back(Mbuf::from_page_data(MbufFlags::empty(), pd));
            remaining -= bytes;
        }
        self.len = total;
        Ok(())
    }

    /// Check the structural invariants: every page mbuf has 1..=16 pages, `first_off <
    /// PAGE_SIZE`, `1 <= last_len <= PAGE_SIZE`, a single page has `first_off + last_len <=
    /// PAGE_SIZE`; linear data lies in its buffer; `PKTHDR` is on the first mbuf only.
    ///
    /// # Errors
    /// A description of the first violation.
    pub fn check_invariants(&self) -> Result<(), &'static str> {
        if self.len != LEN_UNKNOWN && self.len != self.walk_len() {
            return Err("cached chain length differs from the mbufs' lengths");
        }
        for (i, m) in self.mbufs.iter().enumerate() {
            if i > 0 && m.flags().contains(MbufFlags::PKTHDR) {
                return Err("PKTHDR on a mbuf other than the first");
            }
            match &m.data {
                Data::Pages(p) => p.check().map_err(|e| match e {
                    MbufError::InvalidPages(why) => why,
                    _ => "invalid page mbuf",
                })?,
                Data::Linear(_) => {
                    if !m.linear_in_bounds() {
                        return Err("linear data outside its buffer");
                    }
                }
            }
        }
        Ok(())
    }
}

/// Iterator over a chain's fragments (see [`Chain::fragments`]).
pub struct Fragments<'a> {
    mbufs: vec_deque::Iter<'a, Mbuf>,
    cur: Option<MbufFragments<'a>>,
    pos: usize,
    start: usize,
    end: usize,
}

impl<'a> Iterator for Fragments<'a> {
    type Item = Fragment<'a>;
    #[inline]
    fn next(&mut self) -> Option<Fragment<'a>> {
        loop {
            if let Some(f) = self.cur.as_mut().and_then(Iterator::next) {
                return Some(f);
            }
            self.cur = None;
            if self.pos >= self.end {
                return None;
            }
            let m = self.mbufs.next()?;
            let mpos = self.pos;
            let l = m.len();
            self.pos += l;
            let (lo, hi) = (mpos.max(self.start), (mpos + l).min(self.end));
            if lo < hi {
                self.cur = Some(m.fragments_range(lo - mpos, hi - lo));
            }
        }
    }
}

/// A piece of page data: `len` bytes of page `addr` from in-page offset `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PageFragment {
    /// Page address as given by the provider.
    pub addr: u64,
    /// Offset inside the page.
    pub offset: usize,
    /// Length (`offset + len <= PAGE_SIZE`).
    pub len: usize,
}

impl fmt::Debug for Chain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chain")
            .field("len", &self.len())
            .field("mbufs", &self.mbufs)
            .finish()
    }
}
