//! A registered page arena: [`mbuf::PageProvider`] over one mmap'd region registered as one
//! memory region.
//!
//! * **Page addresses are the region's virtual addresses** (`base + index * 4096`), so a page
//!   fragment maps to an SGE directly: `(addr + offset, len, lkey)`, and a memory window or a
//!   per-RPC MR over a run of pages is bound at the same virtual address (advertised as the
//!   segment offset).
//! * The MR is `LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE | MW_BIND`: local sinks of RDMA Reads,
//!   and the parent of the per-RPC memory windows. Its own rkey is never advertised.
//! * **Allocation is next-fit ascending over a bitmap**: consecutive allocations get
//!   consecutive pages while the arena is not fragmented, so a chain of page mbufs usually
//!   forms one contiguous virtual run — one memory window (segment) instead of one per page.
//! * Per-page reference counts, as the trait requires; `in_use()` and `bad_unrefs()` let
//!   tests prove nothing leaked.
//! * The NIC may write any page at any time while it is registered with the peer, so no Rust
//!   reference to arena memory is ever created: [`PageProvider::with_page`] hands the callback
//!   a copy (bounce buffer), and [`PageProvider::with_page_mut`] writes back only the bytes the
//!   callback changed. [`PageProvider::read_page`] / [`PageProvider::write_page`] copy a
//!   byte range straight out of / into the page (one copy, no bounce), counted in
//!   [`VerbsArena::copied_bytes`].
//! * File I/O without a copy: [`VerbsArena::write_pages_at`] / [`VerbsArena::read_pages_at`]
//!   (`pwritev` / `preadv`, an NFS server's WRITE and READ) and [`VerbsArena::write_pages_to`]
//!   / [`VerbsArena::read_pages_from`] (`writev` / `readv`, an NFS client's file) hand the
//!   kernel iovecs over the pages themselves: the kernel moves the bytes, and still no Rust
//!   reference to arena memory exists.

use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use mbuf::{edit_page_by_copy, page_range_end, AllocError, PageError, PageProvider, PAGE_SIZE};
use rdma_sys::{ibv_access_flags, ibv_dereg_mr, ibv_mr, ibv_reg_mr};

use super::device::Device;
use super::{sys, VerbsError};

const PAGE: u64 = PAGE_SIZE as u64;

#[derive(Debug)]
struct State {
    refs: Vec<u32>,
    bitmap: Vec<u64>,
    cursor: usize,
    in_use: usize,
    bad_unrefs: u64,
}

impl State {
    fn is_set(&self, i: usize) -> bool {
        self.bitmap
            .get(i / 64)
            .is_some_and(|w| w & (1u64 << (i % 64)) != 0)
    }

    fn set(&mut self, i: usize, on: bool) {
        if let Some(w) = self.bitmap.get_mut(i / 64) {
            if on {
                *w |= 1u64 << (i % 64);
            } else {
                *w &= !(1u64 << (i % 64));
            }
        }
    }

    /// First free page in `[from, to)`.
    fn find_free(&self, from: usize, to: usize) -> Option<usize> {
        let mut i = from;
        while i < to {
            let word = self.bitmap.get(i / 64).copied().unwrap_or(u64::MAX);
            let free = !word & (u64::MAX << (i % 64));
            if free != 0 {
                let j = (i / 64) * 64 + free.trailing_zeros() as usize;
                return (j < to).then_some(j);
            }
            i = (i / 64 + 1) * 64;
        }
        None
    }
}

/// The registered page arena.
pub struct VerbsArena {
    dev: Arc<Device>,
    base: *mut u8,
    pages: usize,
    mr: *mut ibv_mr,
    lkey: u32,
    state: Mutex<State>,
    copied: AtomicU64,
}

impl std::fmt::Debug for VerbsArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsArena")
            .field("base", &self.base)
            .field("pages", &self.pages)
            .field("lkey", &self.lkey)
            .finish_non_exhaustive()
    }
}

// SAFETY: the region pointer is only dereferenced inside `unsafe` blocks under the rules in
// the module documentation (raw copies, no references); the allocator state is behind a
// mutex; the MR pointer is only passed to `ibv_dereg_mr` in `Drop`.
unsafe impl Send for VerbsArena {}
// SAFETY: as above.
unsafe impl Sync for VerbsArena {}

impl VerbsArena {
    /// An arena of `pages` pages registered on `dev`'s protection domain.
    ///
    /// # Errors
    /// `mmap` or `ibv_reg_mr` failure.
    pub fn new(dev: &Arc<Device>, pages: usize) -> Result<Arc<VerbsArena>, VerbsError> {
        if pages == 0 {
            return Err(VerbsError::Config("arena of zero pages"));
        }
        let len = pages
            .checked_mul(PAGE_SIZE)
            .ok_or(VerbsError::Config("arena too large"))?;
        let base = map(len)?;
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
            | ibv_access_flags::IBV_ACCESS_MW_BIND.0;
        // SAFETY: `base..base+len` is a live private mapping owned by this arena until `Drop`,
        // which deregisters before unmapping.
        let mr = unsafe { ibv_reg_mr(dev.pd(), base.cast(), len, access as i32) };
        if mr.is_null() {
            let e = sys("ibv_reg_mr (arena)");
            unmap(base, len);
            return Err(e);
        }
        // SAFETY: `mr` is a live MR returned just above.
        let lkey = unsafe { (*mr).lkey };
        Ok(Arc::new(VerbsArena {
            dev: Arc::clone(dev),
            base,
            pages,
            mr,
            lkey,
            state: Mutex::new(State {
                refs: vec![0; pages],
                bitmap: vec![0; pages.div_ceil(64)],
                cursor: 0,
                in_use: 0,
                bad_unrefs: 0,
            }),
            copied: AtomicU64::new(0),
        }))
    }

    /// The device the arena is registered on.
    pub fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    /// The MR's lkey (every SGE over arena pages uses it).
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    pub(crate) fn mr(&self) -> *mut ibv_mr {
        self.mr
    }

    /// Pages allocated now.
    pub fn in_use(&self) -> usize {
        self.lock().in_use
    }

    /// Releases of unknown or free pages (should stay 0).
    pub fn bad_unrefs(&self) -> u64 {
        self.lock().bad_unrefs
    }

    /// Pages in the arena.
    pub fn pages(&self) -> usize {
        self.pages
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Index of the page at `addr` (page-aligned, inside the arena).
    fn index(&self, addr: u64) -> Option<usize> {
        let base = self.base as u64;
        let off = addr.checked_sub(base)?;
        if off % PAGE != 0 {
            return None;
        }
        let i = usize::try_from(off / PAGE).ok()?;
        (i < self.pages).then_some(i)
    }

    /// Whether `addr` names an allocated page of this arena.
    pub fn is_allocated(&self, addr: u64) -> bool {
        self.index(addr).is_some_and(|i| self.lock().is_set(i))
    }

    /// The virtual address and length of `[offset, offset + len)` of the allocated page
    /// `addr`, for an SGE or a registration; `None` if the fragment is not inside an
    /// allocated page or is empty.
    pub fn frag_addr(&self, addr: u64, offset: usize, len: usize) -> Option<(u64, u32)> {
        if len == 0 || offset.checked_add(len)? > PAGE_SIZE || !self.is_allocated(addr) {
            return None;
        }
        Some((addr + offset as u64, u32::try_from(len).ok()?))
    }

    fn page_ptr(&self, addr: u64) -> Result<*mut u8, PageError> {
        let i = self.index(addr).ok_or(PageError::UnknownPage(addr))?;
        if !self.lock().is_set(i) {
            return Err(PageError::NotInUse(addr));
        }
        // SAFETY: `i < pages`, so the offset stays inside the mapping.
        Ok(unsafe { self.base.add(i * PAGE_SIZE) })
    }
}

impl VerbsArena {
    /// Write the bytes of `frags` (pieces of allocated pages of this arena, in order) to file
    /// descriptor `fd` at its current position with `writev(2)`: the kernel reads them
    /// straight from the arena, nothing is copied in userspace (an NFS client handing READ
    /// data to a file). Returns the bytes written (all of them unless an error occurs).
    ///
    /// The caller must own the pages' contents, i.e. no RDMA operation targets them any more
    /// (true of the pages of a reply the transport has handed up: their registration was
    /// invalidated first).
    ///
    /// # Errors
    /// A fragment that is not inside an allocated page of this arena (`InvalidInput`), or the
    /// error of `writev`.
    pub fn write_pages_to(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        frags: &[mbuf::PageFragment],
    ) -> std::io::Result<usize> {
        self.vectored(fd, frags, Vectored::Write, None)
    }

    /// Fill `frags` (pieces of allocated pages of this arena, in order) from file descriptor
    /// `fd` at its current position with `readv(2)`: the kernel writes straight into the
    /// arena, nothing is copied in userspace (an NFS client's WRITE data from a file).
    /// Returns the bytes read; fewer than asked only at end of file.
    ///
    /// The caller must own the pages (freshly allocated, not registered for any RDMA
    /// operation).
    ///
    /// # Errors
    /// A fragment that is not inside an allocated page of this arena (`InvalidInput`), or the
    /// error of `readv`.
    pub fn read_pages_from(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        frags: &[mbuf::PageFragment],
    ) -> std::io::Result<usize> {
        self.vectored(fd, frags, Vectored::Read, None)
    }

    /// As [`VerbsArena::write_pages_to`], at file offset `offset` with `pwritev(2)` (the
    /// descriptor's position is neither used nor moved): an NFS server writing a WRITE's
    /// received pages into its file, one system call for the whole iovec.
    ///
    /// # Errors
    /// As [`VerbsArena::write_pages_to`]; `offset` plus the length past `i64::MAX`
    /// (`InvalidInput`).
    pub fn write_pages_at(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        frags: &[mbuf::PageFragment],
    ) -> std::io::Result<usize> {
        self.vectored(fd, frags, Vectored::Write, Some(offset))
    }

    /// As [`VerbsArena::read_pages_from`], from file offset `offset` with `preadv(2)`: an
    /// NFS server reading a READ's data straight into fresh pages.
    ///
    /// # Errors
    /// As [`VerbsArena::read_pages_from`]; `offset` plus the length past `i64::MAX`
    /// (`InvalidInput`).
    pub fn read_pages_at(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        frags: &[mbuf::PageFragment],
    ) -> std::io::Result<usize> {
        self.vectored(fd, frags, Vectored::Read, Some(offset))
    }

    /// Bytes the CPU copied between arena pages and other memory through
    /// [`PageProvider::read_page`] / [`PageProvider::write_page`] (and so `with_page`,
    /// `with_page_mut`, `Chain::copydata`, `Chain::copyback`): tests prove a data path copies
    /// nothing by watching it stay put. The vectored file I/O above is not counted (the
    /// kernel moves those bytes, not us).
    pub fn copied_bytes(&self) -> u64 {
        self.copied.load(Ordering::Relaxed)
    }

    /// `readv`/`writev` (`preadv`/`pwritev` at `at`) of all of `frags`, resumed after partial
    /// transfers and EINTR; stops early only at end of file (read).
    fn vectored(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        frags: &[mbuf::PageFragment],
        op: Vectored,
        at: Option<u64>,
    ) -> std::io::Result<usize> {
        use std::io::{Error, ErrorKind};
        use std::os::fd::AsRawFd;
        let mut iov = self.iovecs(frags)?;
        let total: usize = frags.iter().map(|f| f.len).sum();
        let bad_offset = || Error::new(ErrorKind::InvalidInput, "file offset out of range");
        if let Some(o) = at {
            let end = o.checked_add(total as u64).ok_or_else(bad_offset)?;
            libc::off_t::try_from(end).map_err(|_| bad_offset())?;
        }
        let mut done = 0usize;
        let mut first = 0usize;
        while done < total {
            let Some(rest) = iov.get(first..) else {
                break;
            };
            let n = rest.len().min(1024) as libc::c_int;
            let fd = fd.as_raw_fd();
            // In range: checked against `off_t` above for the end of the whole transfer.
            let off = at.map(|o| (o + done as u64) as libc::off_t);
            let rc = match (op, off) {
                // SAFETY: `rest` holds at least `n` iovecs, each describing bytes of allocated
                // arena pages the caller owns (no RDMA operation targets them); the mapping
                // stays alive while `self` lives; readv writes only inside them.
                (Vectored::Read, None) => unsafe { libc::readv(fd, rest.as_ptr(), n) },
                // SAFETY: as above; writev only reads them.
                (Vectored::Write, None) => unsafe { libc::writev(fd, rest.as_ptr(), n) },
                // SAFETY: as for readv; the offset is only a number to the kernel.
                (Vectored::Read, Some(o)) => unsafe { libc::preadv(fd, rest.as_ptr(), n, o) },
                // SAFETY: as for writev; the offset is only a number to the kernel.
                (Vectored::Write, Some(o)) => unsafe { libc::pwritev(fd, rest.as_ptr(), n, o) },
            };
            if rc < 0 {
                let e = Error::last_os_error();
                if e.kind() == ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if rc == 0 {
                match op {
                    Vectored::Read => break,
                    Vectored::Write => {
                        return Err(Error::new(ErrorKind::WriteZero, "writev wrote nothing"))
                    }
                }
            }
            done += rc as usize;
            advance(&mut iov, &mut first, rc as usize);
        }
        Ok(done)
    }

    /// iovecs for `frags`, each checked to lie inside an allocated page.
    fn iovecs(&self, frags: &[mbuf::PageFragment]) -> std::io::Result<Vec<libc::iovec>> {
        use std::io::{Error, ErrorKind};
        let mut iov: Vec<libc::iovec> = Vec::with_capacity(frags.len());
        for f in frags {
            page_range_end(f.addr, f.offset, f.len)
                .map_err(|e| Error::new(ErrorKind::InvalidInput, e.to_string()))?;
            let p = self
                .page_ptr(f.addr)
                .map_err(|e| Error::new(ErrorKind::InvalidInput, e.to_string()))?;
            // SAFETY: `offset + len <= PAGE_SIZE` (checked above) inside an allocated page
            // of the mapping: the pointer stays inside the mapping.
            let base = unsafe { p.add(f.offset) };
            iov.push(libc::iovec {
                iov_base: base.cast(),
                iov_len: f.len,
            });
        }
        Ok(iov)
    }
}

/// The direction of [`VerbsArena::vectored`].
#[derive(Clone, Copy)]
enum Vectored {
    Read,
    Write,
}

/// Move past `n` bytes of `iov` starting at index `*first` (after a partial readv/writev).
fn advance(iov: &mut [libc::iovec], first: &mut usize, n: usize) {
    let mut left = n;
    while left > 0 {
        let Some(v) = iov.get_mut(*first) else {
            break;
        };
        if left >= v.iov_len {
            left -= v.iov_len;
            *first += 1;
        } else {
            // SAFETY: `left < iov_len`: the new base stays inside the same piece.
            v.iov_base = unsafe { v.iov_base.cast::<u8>().add(left) }.cast();
            v.iov_len -= left;
            left = 0;
        }
    }
}

impl PageProvider for VerbsArena {
    fn alloc_page(&self) -> Result<u64, AllocError> {
        let mut st = self.lock();
        let start = st.cursor;
        let i = st
            .find_free(start, self.pages)
            .or_else(|| st.find_free(0, start))
            .ok_or(AllocError)?;
        st.set(i, true);
        if let Some(r) = st.refs.get_mut(i) {
            *r = 1;
        }
        st.in_use += 1;
        st.cursor = if i + 1 >= self.pages { 0 } else { i + 1 };
        Ok(self.base as u64 + i as u64 * PAGE)
    }

    fn page_ref(&self, addr: u64) -> Result<(), PageError> {
        let i = self.index(addr).ok_or(PageError::UnknownPage(addr))?;
        let mut st = self.lock();
        if !st.is_set(i) {
            return Err(PageError::NotInUse(addr));
        }
        let r = st.refs.get_mut(i).ok_or(PageError::UnknownPage(addr))?;
        *r = r.checked_add(1).ok_or(PageError::RefOverflow(addr))?;
        Ok(())
    }

    fn page_unref(&self, addr: u64) {
        let Some(i) = self.index(addr) else {
            self.lock().bad_unrefs += 1;
            return;
        };
        let mut st = self.lock();
        if !st.is_set(i) {
            st.bad_unrefs += 1;
            return;
        }
        let left = match st.refs.get_mut(i) {
            Some(r) => {
                *r = r.saturating_sub(1);
                *r
            }
            None => return,
        };
        if left == 0 {
            st.set(i, false);
            st.in_use = st.in_use.saturating_sub(1);
        }
    }

    fn with_page(&self, addr: u64, f: &mut dyn FnMut(&[u8])) -> Result<(), PageError> {
        // The NIC may write the page concurrently: the callback gets a copy, never a
        // reference to arena memory.
        let mut copy = [0u8; PAGE_SIZE];
        self.read_page(addr, 0, &mut copy)?;
        f(&copy);
        Ok(())
    }

    fn with_page_mut(&self, addr: u64, f: &mut dyn FnMut(&mut [u8])) -> Result<(), PageError> {
        // Only the runs the callback changed go back, so bytes the NIC wrote meanwhile
        // elsewhere in the page are not overwritten with stale copies.
        let mut before = [0u8; PAGE_SIZE];
        let mut after = [0u8; PAGE_SIZE];
        edit_page_by_copy(self, addr, &mut before, &mut after, f)
    }

    fn read_page(&self, addr: u64, offset: usize, dst: &mut [u8]) -> Result<(), PageError> {
        let end = page_range_end(addr, offset, dst.len())?;
        let p = self.page_ptr(addr)?;
        // SAFETY: `offset..end` lies inside an allocated page of the mapping (`end <=
        // PAGE_SIZE`); one raw copy into `dst`, no reference to arena memory is made.
        unsafe { ptr::copy_nonoverlapping(p.add(offset), dst.as_mut_ptr(), end - offset) };
        self.copied
            .fetch_add((end - offset) as u64, Ordering::Relaxed);
        Ok(())
    }

    fn write_page(&self, addr: u64, offset: usize, src: &[u8]) -> Result<(), PageError> {
        let end = page_range_end(addr, offset, src.len())?;
        let p = self.page_ptr(addr)?;
        // SAFETY: as in `read_page`, in the other direction: only `offset..end` of the page is
        // written, so bytes the NIC writes elsewhere in the page are untouched.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), p.add(offset), end - offset) };
        self.copied
            .fetch_add((end - offset) as u64, Ordering::Relaxed);
        Ok(())
    }
}

impl Drop for VerbsArena {
    fn drop(&mut self) {
        // SAFETY: `mr` came from `ibv_reg_mr` and is deregistered exactly once, before the
        // memory it covers is unmapped.
        unsafe { ibv_dereg_mr(self.mr) };
        unmap(self.base, self.pages * PAGE_SIZE);
    }
}

/// A private anonymous read/write mapping of `len` bytes (page-aligned, zeroed).
pub(crate) fn map(len: usize) -> Result<*mut u8, VerbsError> {
    // SAFETY: anonymous private mapping with no address hint: creates new memory, touches
    // nothing existing.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(sys("mmap"));
    }
    Ok(p.cast())
}

/// Unmap a mapping made by [`map`].
pub(crate) fn unmap(p: *mut u8, len: usize) {
    // SAFETY: `p..p+len` is a mapping made by `map` that nothing uses any more.
    unsafe { libc::munmap(p.cast(), len) };
}
