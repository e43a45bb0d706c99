//! [`KernelPages`]: the [`PageProvider`] of page mbufs over kernel pages.
//!
//! A page address is the physical address of a wired `vm_page` (`VM_PAGE_TO_PHYS`), which
//! is also the address the C wrappers put into SGEs and scatterlists. References are
//! wirings: `alloc_page` allocates a wired page (`vm_page_alloc_noobj(VM_ALLOC_WIRED |
//! VM_ALLOC_NOWAIT | VM_ALLOC_ZERO)`), `page_ref` wires it once more, `page_unref` unwires and
//! frees it at the last wiring — the FreeBSD shape of "pages referenced by page mbufs"
//! (`M_EXTPG`). The bytes are reached through the direct map (`PHYS_TO_DMAP`).
//!
//! The NIC may write a page at any time while it is registered with the peer, so no Rust
//! reference to page memory is ever made: `with_page` hands the callback a copy, and
//! `with_page_mut` writes back only the bytes the callback changed (as the userspace arena
//! does). The bounce buffers are allocated per call (M_NOWAIT); failure is reported as
//! [`PageError::Unmappable`]. The bulk paths (`copydata`, `copyback`, pull-up) use
//! `read_page` / `write_page` instead: one direct copy of the byte range, no bounce buffer.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ptr;
use core::sync::atomic::{AtomicU64, Ordering};

use mbuf::{edit_page_by_copy, page_range_end, AllocError, PageError, PageProvider, PAGE_SIZE};

use crate::ffi;

/// Kernel pages through the C hooks. Stateless apart from counters: the kernel keeps the
/// wirings.
#[derive(Debug, Default)]
pub struct KernelPages {
    allocated: AtomicU64,
    freed_refs: AtomicU64,
}

impl KernelPages {
    /// The provider.
    pub const fn new() -> Self {
        KernelPages {
            allocated: AtomicU64::new(0),
            freed_refs: AtomicU64::new(0),
        }
    }

    /// Pages allocated so far (counter).
    pub fn allocated(&self) -> u64 {
        self.allocated.load(Ordering::Relaxed)
    }

    /// Page references dropped so far (counter).
    pub fn unrefs(&self) -> u64 {
        self.freed_refs.load(Ordering::Relaxed)
    }

    fn kva(addr: u64) -> Result<*mut u8, PageError> {
        if addr % PAGE_SIZE as u64 != 0 {
            return Err(PageError::UnknownPage(addr));
        }
        // SAFETY: a lookup only; the hook returns NULL for addresses it does not know.
        let p = unsafe { ffi::krpc_ofed_page_kva(addr) };
        if p.is_null() {
            Err(PageError::UnknownPage(addr))
        } else {
            Ok(p)
        }
    }
}

fn bounce() -> Result<Vec<u8>, ()> {
    let mut v = Vec::new();
    v.try_reserve_exact(PAGE_SIZE).map_err(|_| ())?;
    v.resize(PAGE_SIZE, 0);
    Ok(v)
}

impl PageProvider for KernelPages {
    fn alloc_page(&self) -> Result<u64, AllocError> {
        let mut pa = 0u64;
        // SAFETY: `pa` is a valid out-pointer.
        let rc = unsafe { ffi::krpc_ofed_page_alloc(&mut pa) };
        if rc != 0 {
            return Err(AllocError);
        }
        self.allocated.fetch_add(1, Ordering::Relaxed);
        Ok(pa)
    }

    fn page_ref(&self, addr: u64) -> Result<(), PageError> {
        Self::kva(addr)?;
        // SAFETY: `addr` names a page the hook knows; wiring it once more is always allowed
        // for a wired page.
        match unsafe { ffi::krpc_ofed_page_ref(addr) } {
            0 => Ok(()),
            _ => Err(PageError::NotInUse(addr)),
        }
    }

    fn page_unref(&self, addr: u64) {
        self.freed_refs.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the hook ignores pages it does not know; for ours it drops one wiring.
        unsafe { ffi::krpc_ofed_page_unref(addr) };
    }

    fn with_page(&self, addr: u64, f: &mut dyn FnMut(&[u8])) -> Result<(), PageError> {
        // The NIC may write the page concurrently: the callback gets a copy, never a
        // reference to page memory.
        let mut copy = bounce().map_err(|()| PageError::Unmappable(addr))?;
        self.read_page(addr, 0, &mut copy)?;
        f(&copy);
        Ok(())
    }

    fn with_page_mut(&self, addr: u64, f: &mut dyn FnMut(&mut [u8])) -> Result<(), PageError> {
        // Page-sized scratch on the heap (kernel stacks are 16 KiB).
        let mut before = bounce().map_err(|()| PageError::Unmappable(addr))?;
        let mut after = bounce().map_err(|()| PageError::Unmappable(addr))?;
        edit_page_by_copy(self, addr, &mut before, &mut after, f)
    }

    fn read_page(&self, addr: u64, offset: usize, dst: &mut [u8]) -> Result<(), PageError> {
        let end = page_range_end(addr, offset, dst.len())?;
        let p = Self::kva(addr)?;
        // SAFETY: `offset..end` lies inside the page (`end <= PAGE_SIZE`) reached through the
        // direct map; one raw copy, no reference to page memory is made.
        unsafe { ptr::copy_nonoverlapping(p.add(offset), dst.as_mut_ptr(), end - offset) };
        Ok(())
    }

    fn write_page(&self, addr: u64, offset: usize, src: &[u8]) -> Result<(), PageError> {
        let end = page_range_end(addr, offset, src.len())?;
        let p = Self::kva(addr)?;
        // SAFETY: as in `read_page`, into the page: only `offset..end` is written.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), p.add(offset), end - offset) };
        Ok(())
    }
}

/// A page provider that counts the references it hands out and takes back (around another
/// one): the self-test's leak checks, and `svc_rdma`'s reply slots, which free the krpc's
/// chains once the Responder holds no reference on their pages.
pub struct Counted {
    inner: Arc<dyn PageProvider>,
    allocs: AtomicU64,
    refs: AtomicU64,
    unrefs: AtomicU64,
}

impl Counted {
    /// Count around `inner`.
    pub fn new(inner: Arc<dyn PageProvider>) -> Self {
        Counted {
            inner,
            allocs: AtomicU64::new(0),
            refs: AtomicU64::new(0),
            unrefs: AtomicU64::new(0),
        }
    }

    /// Page references held now (pages allocated plus references taken, minus dropped).
    pub fn outstanding(&self) -> u64 {
        let taken = self.allocs.load(Ordering::Acquire) + self.refs.load(Ordering::Acquire);
        taken.saturating_sub(self.unrefs.load(Ordering::Acquire))
    }

    /// Pages allocated.
    pub fn allocs(&self) -> u64 {
        self.allocs.load(Ordering::Acquire)
    }
}

impl PageProvider for Counted {
    fn alloc_page(&self) -> Result<u64, AllocError> {
        let p = self.inner.alloc_page()?;
        self.allocs.fetch_add(1, Ordering::AcqRel);
        Ok(p)
    }
    fn page_ref(&self, addr: u64) -> Result<(), PageError> {
        self.inner.page_ref(addr)?;
        self.refs.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
    fn page_unref(&self, addr: u64) {
        self.unrefs.fetch_add(1, Ordering::AcqRel);
        self.inner.page_unref(addr);
    }
    fn with_page(&self, addr: u64, f: &mut dyn FnMut(&[u8])) -> Result<(), PageError> {
        self.inner.with_page(addr, f)
    }
    fn with_page_mut(&self, addr: u64, f: &mut dyn FnMut(&mut [u8])) -> Result<(), PageError> {
        self.inner.with_page_mut(addr, f)
    }
    fn read_page(&self, addr: u64, offset: usize, dst: &mut [u8]) -> Result<(), PageError> {
        self.inner.read_page(addr, offset, dst)
    }
    fn write_page(&self, addr: u64, offset: usize, src: &[u8]) -> Result<(), PageError> {
        self.inner.write_page(addr, offset, src)
    }
}
