//! [`HeapPageArena`]: a heap-backed [`PageProvider`] for tests and the userspace harness.

use alloc::vec::Vec;

use crate::error::{AllocError, PageError};
use crate::page::{PageProvider, PAGE_SIZE};

/// Default address of page 0 of a [`HeapPageArena`] (non-zero so that a zero address is
/// never a valid page).
pub const DEFAULT_ARENA_BASE: u64 = 0x1_0000_0000;

struct Inner {
    /// `capacity * PAGE_SIZE` bytes; page `i` is `mem[i * PAGE_SIZE..][..PAGE_SIZE]`.
    mem: Vec<u8>,
    /// Reference count per page (0 = free).
    refs: Vec<u32>,
    /// Free page indices; a stack (LIFO). Initially ordered so that a fresh arena hands out
    /// pages 0, 1, 2, ... (contiguous addresses).
    free: Vec<usize>,
    allocated: u64,
    alloc_failures: u64,
    bad_unrefs: u64,
}

/// A fixed-capacity arena of `PAGE_SIZE` pages allocated up front on the heap, with per-page
/// reference counts, a free list and statistics; interior mutability through a spin lock
/// (no `unsafe`).
///
/// Page addresses are `base + index * PAGE_SIZE`. Freshly allocated pages are zeroed.
/// Exhaustion makes [`PageProvider::alloc_page`] fail with [`AllocError`]. Leak check: after
/// dropping every chain, [`HeapPageArena::in_use`] must be 0.
pub struct HeapPageArena {
    base: u64,
    capacity: usize,
    inner: spin::Mutex<Inner>,
}

impl HeapPageArena {
    /// An arena of `npages` pages at [`DEFAULT_ARENA_BASE`].
    ///
    /// # Errors
    /// [`AllocError`] if the memory cannot be allocated.
    pub fn new(npages: usize) -> Result<Self, AllocError> {
        Self::with_base(npages, DEFAULT_ARENA_BASE)
    }

    /// An arena of `npages` pages whose page 0 has address `base`.
    ///
    /// # Errors
    /// [`AllocError`] if the memory cannot be allocated, `base` is not a multiple of
    /// `PAGE_SIZE`, or the address range overflows `u64`.
    pub fn with_base(npages: usize, base: u64) -> Result<Self, AllocError> {
        let ps = PAGE_SIZE as u64;
        if base % ps != 0 {
            return Err(AllocError);
        }
        let bytes = npages.checked_mul(PAGE_SIZE).ok_or(AllocError)?;
        u64::try_from(bytes)
            .ok()
            .and_then(|b| base.checked_add(b))
            .ok_or(AllocError)?;
        let mut mem = Vec::new();
        mem.try_reserve_exact(bytes).map_err(|_| AllocError)?;
        mem.resize(bytes, 0);
        let mut refs = Vec::new();
        refs.try_reserve_exact(npages).map_err(|_| AllocError)?;
        refs.resize(npages, 0);
        let mut free = Vec::new();
        free.try_reserve_exact(npages).map_err(|_| AllocError)?;
        free.extend((0..npages).rev());
        Ok(HeapPageArena {
            base,
            capacity: npages,
            inner: spin::Mutex::new(Inner {
                mem,
                refs,
                free,
                allocated: 0,
                alloc_failures: 0,
                bad_unrefs: 0,
            }),
        })
    }

    /// Address of page 0.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Number of pages in the arena.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Successful [`PageProvider::alloc_page`] calls so far (cumulative).
    pub fn allocated(&self) -> u64 {
        self.inner.lock().allocated
    }

    /// Failed [`PageProvider::alloc_page`] calls so far (exhaustion).
    pub fn alloc_failures(&self) -> u64 {
        self.inner.lock().alloc_failures
    }

    /// [`PageProvider::page_unref`] calls on unknown or free pages (ignored, counted).
    pub fn bad_unrefs(&self) -> u64 {
        self.inner.lock().bad_unrefs
    }

    /// Pages currently free.
    pub fn free_pages(&self) -> usize {
        self.inner.lock().free.len()
    }

    /// Pages currently holding at least one reference.
    pub fn in_use(&self) -> usize {
        self.capacity - self.free_pages()
    }

    /// Reference count of a page (0 if free); `None` if `addr` is not a page of this arena.
    pub fn refcount(&self, addr: u64) -> Option<u32> {
        let idx = self.index(addr)?;
        self.inner.lock().refs.get(idx).copied()
    }

    /// Host address and length of the arena memory (`capacity() * PAGE_SIZE` bytes, page `i`
    /// at byte `i * PAGE_SIZE`), for registering it with a NIC (e.g. `ibv_reg_mr_iova2` with
    /// `iova = base()`). Stable for the arena's lifetime; this crate never dereferences it.
    pub fn host_region(&self) -> (*const u8, usize) {
        let inner = self.inner.lock();
        (inner.mem.as_ptr(), inner.mem.len())
    }

    /// Address of page `index`, if in range.
    pub fn page_addr(&self, index: usize) -> Option<u64> {
        if index >= self.capacity {
            return None;
        }
        u64::try_from(index)
            .ok()
            .and_then(|i| i.checked_mul(PAGE_SIZE as u64))
            .and_then(|o| self.base.checked_add(o))
    }

    fn index(&self, addr: u64) -> Option<usize> {
        let off = addr.checked_sub(self.base)?;
        if off % PAGE_SIZE as u64 != 0 {
            return None;
        }
        let idx = usize::try_from(off / PAGE_SIZE as u64).ok()?;
        (idx < self.capacity).then_some(idx)
    }

    /// Index of an allocated page, or the reason it is not one.
    fn live_index(&self, inner: &Inner, addr: u64) -> Result<usize, PageError> {
        let idx = self.index(addr).ok_or(PageError::UnknownPage(addr))?;
        match inner.refs.get(idx) {
            Some(&r) if r > 0 => Ok(idx),
            Some(_) => Err(PageError::NotInUse(addr)),
            None => Err(PageError::UnknownPage(addr)),
        }
    }
}

impl PageProvider for HeapPageArena {
    fn alloc_page(&self) -> Result<u64, AllocError> {
        let mut inner = self.inner.lock();
        let Some(idx) = inner.free.pop() else {
            inner.alloc_failures += 1;
            return Err(AllocError);
        };
        let Some(addr) = self.page_addr(idx) else {
            inner.free.push(idx);
            return Err(AllocError);
        };
        if let Some(r) = inner.refs.get_mut(idx) {
            *r = 1;
        }
        if let Some(pg) = inner.mem.get_mut(idx * PAGE_SIZE..(idx + 1) * PAGE_SIZE) {
            pg.fill(0);
        }
        inner.allocated += 1;
        Ok(addr)
    }

    fn page_ref(&self, addr: u64) -> Result<(), PageError> {
        let mut inner = self.inner.lock();
        let idx = self.live_index(&inner, addr)?;
        let r = inner
            .refs
            .get_mut(idx)
            .ok_or(PageError::UnknownPage(addr))?;
        *r = r.checked_add(1).ok_or(PageError::RefOverflow(addr))?;
        Ok(())
    }

    fn page_unref(&self, addr: u64) {
        let mut inner = self.inner.lock();
        let Ok(idx) = self.live_index(&inner, addr) else {
            inner.bad_unrefs += 1;
            return;
        };
        let now_free = match inner.refs.get_mut(idx) {
            Some(r) => {
                *r -= 1;
                *r == 0
            }
            None => false,
        };
        if now_free {
            // `free` has capacity for every page: this push never reallocates.
            inner.free.push(idx);
        }
    }

    fn with_page(&self, addr: u64, f: &mut dyn FnMut(&[u8])) -> Result<(), PageError> {
        let inner = self.inner.lock();
        let idx = self.live_index(&inner, addr)?;
        let pg = inner
            .mem
            .get(idx * PAGE_SIZE..(idx + 1) * PAGE_SIZE)
            .ok_or(PageError::Unmappable(addr))?;
        f(pg);
        Ok(())
    }

    fn with_page_mut(&self, addr: u64, f: &mut dyn FnMut(&mut [u8])) -> Result<(), PageError> {
        let mut inner = self.inner.lock();
        let idx = self.live_index(&inner, addr)?;
        let pg = inner
            .mem
            .get_mut(idx * PAGE_SIZE..(idx + 1) * PAGE_SIZE)
            .ok_or(PageError::Unmappable(addr))?;
        f(pg);
        Ok(())
    }
}

impl core::fmt::Debug for HeapPageArena {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HeapPageArena")
            .field("base", &self.base)
            .field("capacity", &self.capacity)
            .field("in_use", &self.in_use())
            .finish()
    }
}
