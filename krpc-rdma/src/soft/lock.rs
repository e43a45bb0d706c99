//! The fabric's lock: a spin lock whose waiters, in a kernel, give the CPU away.
//!
//! Both queue pairs of a software connection take one lock ([`FabricLock`]) for every post
//! and poll. A spin lock that only spins is wrong in a kernel whose threads are not
//! time-sliced in kernel mode (FreeBSD: a kernel thread is preempted only by a thread of
//! better priority, never at the end of its slice): a holder preempted inside the lock waits
//! on its CPU's run queue behind the waiter spinning on that same CPU, forever if the waiter
//! has the better priority. FreeBSD's own NFS over the software fabric found it (an nfsiod
//! spinning in a poll, the nfsd thread that held the lock runnable and never run, every call
//! stopped). So a waiter runs [`Relax`], which calls the hook a kernel glue installed with
//! [`set_relax_hook`] (one that sleeps a tick, say, so the holder runs) and otherwise only
//! spins (user space and tests, where the OS time-slices every thread).

/// The hook installed by [`set_relax_hook`].
static HOOK: spin::Once<fn()> = spin::Once::new();

/// Have every waiter for a fabric lock call `f` between attempts (a kernel glue's yield or
/// short sleep). The first hook installed stays; later calls change nothing.
pub fn set_relax_hook(f: fn()) {
    HOOK.call_once(|| f);
}

/// What a waiter for a [`FabricLock`] does between attempts (see the module docs).
pub struct Relax;

impl spin::RelaxStrategy for Relax {
    fn relax() {
        match HOOK.get() {
            Some(f) => f(),
            None => core::hint::spin_loop(),
        }
    }
}

/// The lock of a software connection's shared state (and of other software-fabric tables a
/// kernel test keeps).
pub type FabricLock<T> = spin::mutex::Mutex<T, Relax>;

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    static CALLS: AtomicUsize = AtomicUsize::new(0);

    fn count() {
        CALLS.fetch_add(1, Ordering::SeqCst);
        std::thread::yield_now();
    }

    /// A waiter calls the installed hook while the lock is held elsewhere, and gets the
    /// lock once it is released.
    #[test]
    fn a_waiter_calls_the_hook_until_the_holder_releases() {
        set_relax_hook(count);
        let l = Arc::new(FabricLock::new(0u32));
        let g = l.lock();
        let t = {
            let l = Arc::clone(&l);
            std::thread::spawn(move || {
                *l.lock() += 1;
            })
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while CALLS.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(
            CALLS.load(Ordering::SeqCst) > 0,
            "the waiter never called the hook"
        );
        drop(g);
        t.join().unwrap();
        assert_eq!(*l.lock(), 1);
    }
}
