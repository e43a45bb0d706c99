//! The lock a server's shared state lives under, supplied by whoever embeds the service:
//! std's `Mutex` in user space, a sleepable kernel lock (Linux `struct mutex`, FreeBSD `sx`)
//! in a kernel. Never a spin lock where the holder can be preempted and a waiter spins on
//! the same CPU: a kernel that does not time-slice kernel threads would never run the holder
//! again (the FreeBSD NFS stall of issue 24, docs/FREEBSD.md).
//!
//! The service's own code only ever calls [`Lock::with`], holding the lock for the closure
//! and no longer; it never takes a second lock inside one.

/// Mutual exclusion over a `T`.
pub trait Lock<T>: Send + Sync {
    /// A lock holding `value`, or `None` when the lock itself cannot be had (a kernel lock
    /// is allocated: no memory is an error to answer, never a panic).
    fn new(value: T) -> Option<Self>
    where
        Self: Sized;
    /// Run `f` on the value with the lock held.
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R;
}

/// A spin lock, for tests and for code that runs on one thread (the host tests, the
/// fuzzers). Not for a kernel server (see the module documentation).
pub struct SpinLock<T>(spin::Mutex<T>);

impl<T: Send> Lock<T> for SpinLock<T> {
    fn new(value: T) -> Option<Self> {
        Some(SpinLock(spin::Mutex::new(value)))
    }

    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self.0.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_runs_on_the_value_and_keeps_the_change() {
        let l = SpinLock::new(1u32).expect("a spin lock needs no memory");
        assert_eq!(
            l.with(|v| {
                *v += 1;
                *v
            }),
            2
        );
        assert_eq!(l.with(|v| *v), 2);
    }
}
