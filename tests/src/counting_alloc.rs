//! The counting global allocator of the allocation tests (`transport_noalloc` in this
//! package, nfs-service's `nfsd_alloc`): it forwards to `System` and, while counting is on for the
//! current thread, counts allocations (and reallocations), their bytes and the largest one.
//!
//! A global allocator is chosen by the final binary, so this module only provides the type and
//! its counters: each test binary installs it itself with
//! `#[global_allocator] static GLOBAL: Counting = Counting;`
//! (`use tests::counting_alloc::Counting`). Without that line nothing is counted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The allocator (see the module docs).
pub struct Counting;

thread_local! {
    /// Counting on for this thread.
    pub static ON: Cell<bool> = const { Cell::new(false) };
    /// Allocations counted.
    pub static ALLOCS: Cell<u64> = const { Cell::new(0) };
    /// Bytes of the allocations counted.
    pub static BYTES: Cell<u64> = const { Cell::new(0) };
    /// The largest allocation counted.
    pub static LARGEST: Cell<u64> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: the thread-locals may be gone while a thread exits.
    let _ = ON.try_with(|on| {
        if on.get() {
            let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
            let _ = BYTES.try_with(|b| b.set(b.get() + size as u64));
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size as u64)));
        }
    });
}

// SAFETY: forwards to `System`; the bookkeeping touches only const-initialised
// thread-locals (no allocation, no re-entry).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Run `f` with counting set to `on`, restoring the previous state.
pub fn counting<R>(on: bool, f: impl FnOnce() -> R) -> R {
    let before = ON.with(|c| c.replace(on));
    let r = f();
    ON.with(|c| c.set(before));
    r
}

/// Allocations and bytes counted so far on this thread.
pub fn snapshot() -> (u64, u64) {
    (ALLOCS.with(Cell::get), BYTES.with(Cell::get))
}

/// Whether [`Counting`] is this binary's global allocator: one allocation made with counting
/// on is counted. A test asserts it before trusting a count of 0.
pub fn installed() -> bool {
    let (before, _) = snapshot();
    counting(true, || drop(std::hint::black_box(Box::new(0u64))));
    snapshot().0 > before
}
