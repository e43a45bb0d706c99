//! Values on the heap, allocated fallibly: how the suite keeps its big values (the
//! endpoints, chunk lists) off a kernel stack (16 KiB, frames of at most 1 KiB).
//!
//! `Box::new` aborts when the allocator refuses (a kernel panic in the module, whose global
//! allocator is `krpc_ofed_malloc`: kvmalloc, `GFP_ATOMIC` in atomic context, `M_NOWAIT` on
//! FreeBSD); [`try_boxed`] reserves the slot first and returns a [`Failure`] instead. The
//! value is made in a frame of its own (not inlined) and moved to the heap by reference, so
//! it exists once on the stack on its way there.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ops::{Deref, DerefMut};

use krpc_rdma::wire::ChunkLists;

use crate::check::{fail, Failure};

/// A `T` on the heap (a one-element boxed array: the form a fallible allocation without
/// `unsafe` can make).
pub struct Boxed<T>(Box<[T; 1]>);

impl<T> Deref for Boxed<T> {
    type Target = T;
    fn deref(&self) -> &T {
        let [v] = &*self.0;
        v
    }
}

impl<T> DerefMut for Boxed<T> {
    fn deref_mut(&mut self) -> &mut T {
        let [v] = &mut *self.0;
        v
    }
}

// A boxed queue pair is a provider, e.g. under a middleware (`provider::profile::Profiled`).
krpc_rdma::forward_provider!(deref [T: krpc_rdma::provider::Provider] Boxed<T>);

impl<T: core::fmt::Debug> core::fmt::Debug for Boxed<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        (**self).fmt(f)
    }
}

impl<T> Boxed<T> {
    /// The value, moved back out (onto the caller's stack).
    pub fn into_inner(self) -> T {
        let [v] = *self.0;
        v
    }
}

/// The heap slot for one `T`, reserved fallibly.
#[inline(never)]
fn slot<T>(what: &str) -> Result<Vec<T>, Failure> {
    let mut v = Vec::new();
    v.try_reserve_exact(1)
        .map_err(|_| fail(what, "memory for it", "the allocator refused"))?;
    Ok(v)
}

/// The one-element vector `v` as a [`Boxed`] (its capacity is exactly 1: no reallocation).
#[inline(never)]
fn seal<T>(v: Vec<T>, what: &str) -> Result<Boxed<T>, Failure> {
    let b: Box<[T]> = v.into_boxed_slice();
    b.try_into()
        .map(Boxed)
        .map_err(|_| fail(what, "one value", "another count"))
}

/// `make()`'s value on the heap, or a [`Failure`] of step `what`: `make`'s error, or the
/// allocation refused. Not inlined, and `make`'s result goes to the heap through `put`
/// by reference: the value exists once on this frame's stack (as `make`'s return value), so
/// a `T` of up to about 900 bytes fits a 1 KiB frame. `make` should return its
/// constructor's result as it is (an error mapped inside `make` is one more copy of `T`).
///
/// # Errors
/// As above.
#[inline(never)]
pub fn try_boxed<T, E: core::fmt::Display>(
    what: &str,
    make: impl FnOnce() -> Result<T, E>,
) -> Result<Boxed<T>, Failure> {
    let mut v = slot(what)?;
    make_into(&mut v, make).map_err(|e| not_made(what, &e))?;
    seal(v, what)
}

/// `make()`'s value pushed into `v` (its slot reserved): the one frame that holds it.
#[inline(never)]
fn make_into<T, E>(v: &mut Vec<T>, make: impl FnOnce() -> Result<T, E>) -> Result<(), E> {
    put(v, make())
}

#[cold]
#[inline(never)]
fn not_made(what: &str, e: &dyn core::fmt::Display) -> Failure {
    fail(what, "made", e)
}

/// [`try_boxed`] of a value already made (`r`: its constructor's result, moved here by
/// reference): `Ok(Ok(boxed))`, or `Ok(Err(e))` with `r`'s own error handed back as it is.
///
/// # Errors
/// The allocation was refused (`r`'s value is dropped).
#[inline(never)]
pub fn try_boxed_result<T, E>(what: &str, r: Result<T, E>) -> Result<Result<Boxed<T>, E>, Failure> {
    let mut v = slot(what)?;
    if let Err(e) = put(&mut v, r) {
        return Ok(Err(e));
    }
    seal(v, what).map(Ok)
}

/// Push `r`'s value into `v` (its slot reserved), or hand back its error.
#[inline(never)]
fn put<T, E>(v: &mut Vec<T>, r: Result<T, E>) -> Result<(), E> {
    v.push(r?);
    Ok(())
}

/// Empty chunk lists (2 KiB) on the heap, made in place.
///
/// # Errors
/// The allocation was refused.
#[inline(never)]
pub fn chunk_lists() -> Result<Boxed<ChunkLists>, Failure> {
    let mut v = slot("chunk lists")?;
    v.push(ChunkLists::new());
    seal(v, "chunk lists")
}
