//! File data: blocks of pages, WRITE (adopt or copy-on-write), size changes, READ.

use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec::Vec;

use mbuf::{Chain, Mbuf, PageProvider, MAX_PGS_PER_MBUF, PAGE_SIZE};
use nfs_service::nfsd::{NfsError, NfsResult, WriteIov};

use crate::state::{Data, FsState};
use crate::{BLOCK, MAX_FILE_SIZE, MAX_IO};

/// Zeros to fill hole pages from.
static ZEROS: [u8; PAGE_SIZE] = [0; PAGE_SIZE];

/// Whether `a` and `b` are the same provider object.
pub(crate) fn same_provider(a: &Arc<dyn PageProvider>, b: &Arc<dyn PageProvider>) -> bool {
    core::ptr::eq(Arc::as_ptr(a) as *const u8, Arc::as_ptr(b) as *const u8)
}

/// A zeroed page-sized heap buffer (a page on a kernel stack is too much).
pub(crate) fn scratch() -> NfsResult<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(PAGE_SIZE)
        .map_err(|_| NfsError::Jukebox)?;
    v.resize(PAGE_SIZE, 0);
    Ok(v)
}

/// A fresh page of `p` holding `bytes` (a whole page) at offset 0.
fn fresh_page(p: &dyn PageProvider, bytes: &[u8]) -> NfsResult<u64> {
    let addr = p.alloc_page().map_err(|_| NfsError::Jukebox)?;
    if p.write_page(addr, 0, bytes).is_err() {
        p.page_unref(addr);
        return Err(NfsError::Io);
    }
    Ok(addr)
}

/// What a WRITE did, for the statistics.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct WriteCounts {
    pub(crate) adopted: u64,
    pub(crate) copied: u64,
    pub(crate) zeroed: u64,
}

/// The bytes of a WRITE, consumed in file order.
struct Src<'a> {
    iov: WriteIov<'a>,
    /// Bytes consumed (`Bytes`).
    at: usize,
    /// Current slice and the bytes of it consumed (`Pages`).
    idx: usize,
    off: usize,
}

impl<'a> Src<'a> {
    fn new(iov: WriteIov<'a>) -> Self {
        Src {
            iov,
            at: 0,
            idx: 0,
            off: 0,
        }
    }

    /// Total bytes, or [`NfsError::Inval`] if the count overflows.
    fn total(iov: &WriteIov<'_>) -> NfsResult<usize> {
        match iov {
            WriteIov::Bytes(b) => Ok(b.len()),
            WriteIov::Pages { slices, .. } => slices
                .iter()
                .try_fold(0usize, |n, s| n.checked_add(s.len))
                .ok_or(NfsError::Inval),
        }
    }

    /// If the next bytes are exactly one whole page (one slice, in-page offset 0, a page
    /// long), consume it and return its address.
    fn whole_page(&mut self) -> Option<u64> {
        let WriteIov::Pages { slices, .. } = self.iov else {
            return None;
        };
        while slices.get(self.idx).is_some_and(|s| s.len == 0) {
            self.idx += 1;
        }
        let s = slices.get(self.idx)?;
        if self.off == 0 && s.offset == 0 && s.len == PAGE_SIZE {
            self.idx += 1;
            return Some(s.addr);
        }
        None
    }

    /// Copy the next `dst.len()` bytes into `dst`.
    fn copy(&mut self, dst: &mut [u8]) -> NfsResult<()> {
        match self.iov {
            WriteIov::Bytes(b) => {
                let end = self.at.checked_add(dst.len()).ok_or(NfsError::Io)?;
                dst.copy_from_slice(b.get(self.at..end).ok_or(NfsError::Io)?);
                self.at = end;
            }
            WriteIov::Pages { provider, slices } => {
                let mut done = 0;
                while done < dst.len() {
                    let s = slices.get(self.idx).ok_or(NfsError::Io)?;
                    let avail = s.len.checked_sub(self.off).ok_or(NfsError::Io)?;
                    let take = avail.min(dst.len() - done);
                    if take > 0 {
                        let d = dst.get_mut(done..done + take).ok_or(NfsError::Io)?;
                        let at = s.offset.checked_add(self.off).ok_or(NfsError::Io)?;
                        provider
                            .read_page(s.addr, at, d)
                            .map_err(|_| NfsError::Io)?;
                    }
                    self.off += take;
                    done += take;
                    if self.off >= s.len {
                        self.idx += 1;
                        self.off = 0;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A copy of the last block of a file of `old_size` bytes with its bytes past the end of
/// file zeroed, when that block is partly valid: `(block, page, bytes zeroed)`. Growing the
/// file puts it in place of the old page, so no stale byte becomes visible.
fn zero_tail(
    p: &dyn PageProvider,
    blocks: &BTreeMap<u64, u64>,
    old_size: u64,
    buf: &mut [u8],
) -> NfsResult<Option<(u64, u64, u64)>> {
    let valid = old_size % BLOCK;
    let b = old_size / BLOCK;
    let Some(&old) = blocks.get(&b).filter(|_| valid != 0) else {
        return Ok(None);
    };
    let v = valid as usize;
    p.read_page(old, 0, buf.get_mut(..v).ok_or(NfsError::Io)?)
        .map_err(|_| NfsError::Io)?;
    buf.get_mut(v..).ok_or(NfsError::Io)?.fill(0);
    let addr = fresh_page(p, buf)?;
    Ok(Some((b, addr, BLOCK - valid)))
}

/// Release the pages of `repl` (a WRITE that failed before changing anything).
fn release(p: &dyn PageProvider, repl: &[(u64, u64)]) {
    for &(_, addr) in repl {
        p.page_unref(addr);
    }
}

/// WRITE `data` at `offset` into regular file `id` (kind and permission checked by the
/// caller). All-or-nothing: every new page is made first, then put in place.
pub(crate) fn write(
    st: &mut FsState,
    own: &Arc<dyn PageProvider>,
    id: u64,
    offset: u64,
    data: WriteIov<'_>,
    buf: &mut [u8],
) -> NfsResult<(u32, WriteCounts)> {
    let n = Src::total(&data)?;
    let count = u32::try_from(n).map_err(|_| NfsError::Inval)?;
    let end = u64::try_from(n)
        .ok()
        .and_then(|n| offset.checked_add(n))
        .filter(|&e| e <= MAX_FILE_SIZE)
        .ok_or(NfsError::FBig)?;
    let mut counts = WriteCounts::default();
    if n == 0 {
        return Ok((0, counts));
    }
    let node = st.node(id)?;
    let Data::File(blocks) = &node.data else {
        return Err(NfsError::Inval);
    };
    let old_size = node.size;
    let (first, last) = (offset / BLOCK, (end - 1) / BLOCK);
    let span = last - first + 1;
    let present = blocks.range(first..=last).count() as u64;
    st.room((span - present).saturating_mul(BLOCK), 0)?;
    let adopt = match data {
        WriteIov::Pages { provider, .. } => same_provider(provider, own),
        WriteIov::Bytes(_) => false,
    };
    let mut repl: Vec<(u64, u64)> = Vec::new();
    let cap = usize::try_from(span + 1).map_err(|_| NfsError::FBig)?;
    repl.try_reserve_exact(cap).map_err(|_| NfsError::Jukebox)?;
    let built = (|| -> NfsResult<()> {
        // Growth past a partly valid last block the write does not touch: zero its tail.
        if offset > old_size && old_size / BLOCK < first {
            if let Some((b, addr, z)) = zero_tail(&**own, blocks, old_size, buf)? {
                repl.push((b, addr));
                counts.zeroed += z;
            }
        }
        let mut src = Src::new(data);
        for blk in first..=last {
            let bs = blk * BLOCK;
            let lo = (offset.max(bs) - bs) as usize;
            let hi = (end.min(bs + BLOCK) - bs) as usize;
            let full = lo == 0 && hi == PAGE_SIZE;
            if full && adopt {
                if let Some(addr) = src.whole_page() {
                    own.page_ref(addr).map_err(|_| NfsError::Io)?;
                    repl.push((blk, addr));
                    counts.adopted += BLOCK;
                    continue;
                }
            }
            if !full {
                // Old bytes below the old end of file, zeros elsewhere (holes, growth, and
                // the garbage past the end of file of the last block).
                let valid = old_size.saturating_sub(bs).min(BLOCK) as usize;
                let valid = match blocks.get(&blk) {
                    Some(&old) if valid > 0 => {
                        own.read_page(old, 0, buf.get_mut(..valid).ok_or(NfsError::Io)?)
                            .map_err(|_| NfsError::Io)?;
                        valid
                    }
                    _ => 0,
                };
                buf.get_mut(valid..).ok_or(NfsError::Io)?.fill(0);
            }
            src.copy(buf.get_mut(lo..hi).ok_or(NfsError::Io)?)?;
            repl.push((blk, fresh_page(&**own, buf)?));
            counts.copied += (hi - lo) as u64;
        }
        Ok(())
    })();
    if let Err(e) = built {
        release(&**own, &repl);
        return Err(e);
    }
    let mut f = file_mut(st, id)?;
    for (blk, addr) in repl {
        f.put(&**own, blk, addr);
    }
    *f.size = (*f.size).max(end);
    Ok((count, counts))
}

/// A regular file's blocks and size, borrowed together with the file system's page count
/// for a change (after the shared-borrow checks of the caller).
struct FileMut<'a> {
    blocks: &'a mut BTreeMap<u64, u64>,
    size: &'a mut u64,
    pages_held: &'a mut u64,
}

impl FileMut<'_> {
    /// Store `addr` (its reference is the caller's, handed over) as block `blk`, releasing
    /// the page it replaces.
    fn put(&mut self, own: &dyn PageProvider, blk: u64, addr: u64) {
        match self.blocks.insert(blk, addr) {
            Some(old) => own.page_unref(old),
            None => *self.pages_held += 1,
        }
    }
}

/// Regular file `id` of `st`, for a change.
fn file_mut(st: &mut FsState, id: u64) -> NfsResult<FileMut<'_>> {
    let FsState {
        nodes, pages_held, ..
    } = st;
    let node = nodes.get_mut(&id).ok_or(NfsError::Stale)?;
    let Data::File(blocks) = &mut node.data else {
        return Err(NfsError::Inval);
    };
    Ok(FileMut {
        blocks,
        size: &mut node.size,
        pages_held,
    })
}

/// Set the size of regular file `id` to `size` (checked by the caller: a regular file,
/// `size <= MAX_FILE_SIZE`, permission). Shrinking releases the blocks past the new end;
/// growing zeroes the tail of a partly valid last block (copy-on-write). Returns the bytes
/// zeroed.
pub(crate) fn set_size(
    st: &mut FsState,
    own: &dyn PageProvider,
    id: u64,
    size: u64,
) -> NfsResult<u64> {
    let node = st.node(id)?;
    let Data::File(blocks) = &node.data else {
        return Err(NfsError::Inval);
    };
    let old = node.size;
    let tail = if size > old {
        let mut buf = scratch()?;
        zero_tail(own, blocks, old, &mut buf)?
    } else {
        None
    };
    let mut f = file_mut(st, id)?;
    let keep = size.div_ceil(BLOCK);
    while let Some(e) = f.blocks.last_entry() {
        if *e.key() < keep {
            break;
        }
        own.page_unref(e.remove());
        *f.pages_held = f.pages_held.saturating_sub(1);
    }
    let mut zeroed = 0;
    if let Some((b, addr, z)) = tail {
        f.put(own, b, addr);
        zeroed = z;
    }
    *f.size = size;
    Ok(zeroed)
}

/// What a READ found under the lock: the blocks of the range, each a page of the file with
/// a reference taken for the reply, or a hole.
pub(crate) struct ReadPlan {
    pub(crate) items: Vec<Option<u64>>,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) eof: bool,
}

/// Plan a READ of at most `count` bytes at `offset` of regular file `id` (checked by the
/// caller): at most [`MAX_IO`] bytes. `offset + count` past `u64::MAX` is
/// [`NfsError::Inval`].
pub(crate) fn read_plan(
    st: &FsState,
    own: &dyn PageProvider,
    id: u64,
    offset: u64,
    count: u32,
) -> NfsResult<ReadPlan> {
    offset
        .checked_add(u64::from(count))
        .ok_or(NfsError::Inval)?;
    let node = st.node(id)?;
    let Data::File(blocks) = &node.data else {
        return Err(NfsError::Inval);
    };
    let size = node.size;
    let mut plan = ReadPlan {
        items: Vec::new(),
        offset,
        len: 0,
        eof: true,
    };
    if offset >= size || count == 0 {
        plan.eof = offset >= size;
        return Ok(plan);
    }
    let len = u64::from(count).min(MAX_IO).min(size - offset);
    let (first, last) = (offset / BLOCK, (offset + len - 1) / BLOCK);
    let span = usize::try_from(last - first + 1).map_err(|_| NfsError::Inval)?;
    plan.items
        .try_reserve_exact(span)
        .map_err(|_| NfsError::Jukebox)?;
    for b in first..=last {
        let item = match blocks.get(&b) {
            Some(&addr) => {
                if own.page_ref(addr).is_err() {
                    release_plan(own, &plan.items);
                    return Err(NfsError::Io);
                }
                Some(addr)
            }
            None => None,
        };
        plan.items.push(item);
    }
    plan.len = len;
    plan.eof = offset + len == size;
    Ok(plan)
}

fn release_plan(own: &dyn PageProvider, items: &[Option<u64>]) {
    for addr in items.iter().flatten() {
        own.page_unref(*addr);
    }
}

/// What a READ's chain carries, for the statistics.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ReadCounts {
    pub(crate) shared: u64,
    pub(crate) zeroed: u64,
}

/// Page mbufs being built: consecutive pages of one provider, up to
/// [`MAX_PGS_PER_MBUF`] per mbuf.
struct Builder {
    chain: Chain,
    prov: Option<Arc<dyn PageProvider>>,
    pages: Vec<u64>,
    first_off: usize,
    last_len: usize,
}

impl Builder {
    /// Add `addr` (its reference handed over: released on error) holding the reply's
    /// bytes `in_off..in_off + len` of it.
    fn push(
        &mut self,
        prov: &Arc<dyn PageProvider>,
        addr: u64,
        in_off: usize,
        len: usize,
    ) -> NfsResult<()> {
        let same = self.prov.as_ref().is_some_and(|p| same_provider(p, prov));
        if !same || self.pages.len() >= MAX_PGS_PER_MBUF {
            if let Err(e) = self.flush() {
                prov.page_unref(addr);
                return Err(e);
            }
        }
        if self.pages.is_empty() {
            self.prov = Some(Arc::clone(prov));
            self.first_off = in_off;
        }
        // Capacity MAX_PGS_PER_MBUF was reserved: no allocation.
        self.pages.push(addr);
        self.last_len = len;
        Ok(())
    }

    /// Turn the pending pages into one mbuf at the end of the chain.
    fn flush(&mut self) -> NfsResult<()> {
        let Some(prov) = self.prov.take() else {
            return Ok(());
        };
        if self.pages.is_empty() {
            return Ok(());
        }
        let m = Mbuf::pages(
            Arc::clone(&prov),
            &self.pages,
            self.first_off,
            self.last_len,
        );
        match m {
            Ok(m) => {
                self.pages.clear();
                // On error the mbuf is dropped, releasing its references.
                self.chain.append_mbuf(m).map_err(|_| NfsError::Jukebox)
            }
            Err(_) => {
                for &addr in &self.pages {
                    prov.page_unref(addr);
                }
                self.pages.clear();
                Err(NfsError::ServerFault)
            }
        }
    }

    /// Release the pending pages (on error).
    fn release(&mut self) {
        if let Some(prov) = self.prov.take() {
            for &addr in &self.pages {
                prov.page_unref(addr);
            }
        }
        self.pages.clear();
    }
}

/// A page of `p` with bytes `in_off..in_off + len` zero (the rest is never read).
fn zero_page(p: &dyn PageProvider, in_off: usize, len: usize) -> NfsResult<u64> {
    let addr = p.alloc_page().map_err(|_| NfsError::Jukebox)?;
    let z = ZEROS.get(..len).ok_or(NfsError::ServerFault);
    if z.and_then(|z| p.write_page(addr, in_off, z).map_err(|_| NfsError::Io))
        .is_err()
    {
        p.page_unref(addr);
        return Err(NfsError::Io);
    }
    Ok(addr)
}

/// The chain of a planned READ: the file's pages themselves, and for holes fresh zero pages
/// of `fresh`. Every reference of the plan ends in the chain or is released.
pub(crate) fn read_chain(
    own: &Arc<dyn PageProvider>,
    fresh: &Arc<dyn PageProvider>,
    plan: ReadPlan,
) -> NfsResult<(Chain, ReadCounts)> {
    let mut counts = ReadCounts::default();
    let mut b = Builder {
        chain: Chain::new(),
        prov: None,
        pages: Vec::new(),
        first_off: 0,
        last_len: 0,
    };
    let mut items = plan.items.into_iter();
    if b.pages.try_reserve_exact(MAX_PGS_PER_MBUF).is_err() {
        release_plan(&**own, items.as_slice());
        return Err(NfsError::Jukebox);
    }
    let end = plan.offset + plan.len;
    let mut pos = plan.offset;
    let mut err = None;
    for item in items.by_ref() {
        let bs = pos - pos % BLOCK;
        let seg_end = end.min(bs + BLOCK);
        let (in_off, len) = ((pos - bs) as usize, (seg_end - pos) as usize);
        let r = match item {
            Some(addr) => {
                counts.shared += len as u64;
                b.push(own, addr, in_off, len)
            }
            None => zero_page(&**fresh, in_off, len).and_then(|addr| {
                counts.zeroed += len as u64;
                b.push(fresh, addr, in_off, len)
            }),
        };
        if let Err(e) = r {
            err = Some(e);
            break;
        }
        pos = seg_end;
    }
    if err.is_none() {
        err = b.flush().err();
    }
    if let Some(e) = err {
        release_plan(&**own, items.as_slice());
        b.release();
        return Err(e);
    }
    Ok((b.chain, counts))
}
