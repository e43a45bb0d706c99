//! Waiting for a queue pair: the sleep a kernel glue provides ([`Sleep`], the Linux and
//! FreeBSD glues' wait queue as [`GlueSleep`] in kernel builds), [`wait_any`] over queue
//! pairs, and the `sockaddr_in` the C side takes ([`SockaddrIn`]). Shared by the self-test,
//! the peer runs and the in-kernel NFS server.

use core::ffi::c_void;

use crate::OfedQp;

/// `struct sockaddr_in` (Linux's layout; the userspace emulation and the Linux module).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SockaddrIn {
    family: u16,
    port_be: u16,
    addr: [u8; 4],
    zero: [u8; 8],
}

impl SockaddrIn {
    /// `AF_INET`, `addr`:`port`.
    pub fn new(addr: [u8; 4], port: u16) -> Self {
        SockaddrIn {
            family: 2,
            port_be: port.to_be(),
            addr,
            zero: [0; 8],
        }
    }

    /// As the `const struct sockaddr *` the C side takes.
    pub fn as_ptr(&self) -> *const c_void {
        (self as *const SockaddrIn).cast()
    }
}

/// How a fixture sleeps until an upcall (CQ completion or CM event) or a timeout.
pub trait Sleep {
    /// The upcall registered on every queue pair; it must bump the generation and wake the
    /// sleeper, and be callable from any context (completion and CM handlers).
    fn upcall(&self) -> extern "C" fn(*mut c_void);
    /// The current wake generation.
    fn generation(&self) -> u64;
    /// Sleep until the generation is no longer `gen` or `ms` milliseconds passed.
    fn sleep(&self, gen: u64, ms: u32);
}

/// Until one of `qps` (at most 32 are looked at) has new completions or events, or `ms`
/// milliseconds: only NEW work ends the wait early (see `ofed-testkit`'s `loopback::wait`).
pub fn wait_any(s: &impl Sleep, qps: &mut [&mut OfedQp], ms: u32) {
    let had = qps
        .iter()
        .take(32)
        .enumerate()
        .fold(0u32, |m, (i, q)| m | (u32::from(q.has_work()) << i));
    let news = |qps: &mut [&mut OfedQp]| {
        qps.iter_mut().take(32).enumerate().any(|(i, q)| {
            let had = (had >> i) & 1 == 1;
            q.reap() > 0 || (!had && q.has_work())
        })
    };
    if news(qps) {
        return;
    }
    let gen = s.generation();
    for q in qps.iter_mut() {
        q.arm();
    }
    // Completions that arrived before the notification was armed raise no upcall.
    if news(qps) {
        return;
    }
    s.sleep(gen, ms);
}

#[cfg(target_os = "none")]
mod glue {
    use core::ffi::c_void;

    use super::Sleep;

    extern "C" {
        /// Bump the wake generation and wake the waiters (any context).
        fn krpc_ofed_wake(arg: *mut c_void);
        /// The wake generation.
        fn krpc_ofed_wake_gen() -> u64;
        /// Sleep until the generation is not `gen` or `ms` passed (process context).
        fn krpc_ofed_wait_gen(gen: u64, ms: u32) -> i32;
        /// The kernel's monotonic clock in nanoseconds (Linux `ktime_get_ns`).
        fn krpc_monotonic_ns() -> u64;
    }

    /// The kernel's monotonic clock, in nanoseconds (Linux glue only: the peer runs'
    /// benchmarks time themselves with it).
    pub fn monotonic_ns() -> u64 {
        // SAFETY: reads a clock; any context.
        unsafe { krpc_monotonic_ns() }
    }

    /// The upcall of every queue pair: wake the threads that wait.
    extern "C" fn upcall(arg: *mut c_void) {
        // SAFETY: the glue's wake touches only its wait queue and counter; any context.
        unsafe { krpc_ofed_wake(arg) }
    }

    /// The kernel glue's wait queue: one generation counter and one queue for every waiter
    /// (an upcall wakes them all; each looks at its own queue pairs).
    pub struct GlueSleep;

    impl Sleep for GlueSleep {
        fn upcall(&self) -> extern "C" fn(*mut c_void) {
            upcall
        }
        fn generation(&self) -> u64 {
            // SAFETY: reads an atomic of the glue.
            unsafe { krpc_ofed_wake_gen() }
        }
        fn sleep(&self, gen: u64, ms: u32) {
            // SAFETY: process context (the self-test, the peer runs and the server threads
            // run in process context).
            unsafe { krpc_ofed_wait_gen(gen, ms) };
        }
    }
}

#[cfg(target_os = "none")]
pub use glue::{monotonic_ns, GlueSleep};
