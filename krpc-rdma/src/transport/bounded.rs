//! A list whose storage is reserved once, at construction, and never grows: the kernel way of
//! keeping per-context tables (chunk segments, read targets) out of the stack frames that
//! build and move the contexts, without allocating per RPC.

use alloc::vec::Vec;
use core::ops::Deref;

use super::error::CallError;

/// At most `capacity` items, in storage allocated by [`Bounded::with_capacity`].
#[derive(Debug)]
pub(crate) struct Bounded<T>(Vec<T>);

impl<T> Bounded<T> {
    /// Room for exactly `n` items, allocated now.
    ///
    /// # Errors
    /// [`CallError::NoMemory`].
    pub(crate) fn with_capacity(n: usize) -> Result<Self, CallError> {
        let mut v = Vec::new();
        v.try_reserve_exact(n).map_err(|_| CallError::NoMemory)?;
        Ok(Bounded(v))
    }

    /// Append `x`; when full, `x` comes back (the storage never grows).
    pub(crate) fn push(&mut self, x: T) -> Result<(), T> {
        if self.0.len() >= self.0.capacity() {
            return Err(x);
        }
        self.0.push(x);
        Ok(())
    }

    /// Empty it, keeping the storage.
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }
}

impl<T> Deref for Bounded<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_the_item_past_its_capacity_and_keeps_its_storage() {
        let mut b = Bounded::with_capacity(2).unwrap();
        assert_eq!(b.push(1), Ok(()));
        assert_eq!(b.push(2), Ok(()));
        assert_eq!(b.push(3), Err(3));
        assert_eq!(&b[..], &[1, 2]);
        let cap = b.0.capacity();
        b.clear();
        assert!(b.is_empty());
        assert_eq!(b.0.capacity(), cap);
    }
}
