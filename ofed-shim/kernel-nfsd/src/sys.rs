//! The kernel services the server needs from the module glue (`ofed-shim/linux/
//! krpc_rdma_linux.c`), each behind a small owning type: a sleepable mutex ([`KMutex`],
//! Linux `struct mutex`), a kernel thread ([`KThread`], `kthread_run` / `kthread_stop`),
//! the wall clock and the module's reference count. Every `unsafe` of the crate is here.

use core::cell::UnsafeCell;
use core::ffi::c_void;

use nfs_proto::nfs3::Nfstime3;
use nfs_service::lock::Lock;

extern "C" {
    fn krpc_mutex_new() -> *mut c_void;
    fn krpc_mutex_lock(m: *mut c_void);
    fn krpc_mutex_unlock(m: *mut c_void);
    fn krpc_mutex_free(m: *mut c_void);
    fn krpc_kthread_run(
        f: extern "C" fn(*mut c_void) -> i32,
        arg: *mut c_void,
        name: *const u8,
    ) -> *mut c_void;
    fn krpc_kthread_should_stop() -> i32;
    fn krpc_kthread_stop(t: *mut c_void) -> i32;
    fn krpc_wall_clock(sec: *mut i64, nsec: *mut u32);
    fn krpc_module_get() -> i32;
    fn krpc_module_put();
}

/// A sleepable kernel mutex over a `T` (Linux `struct mutex`): a waiter sleeps, so a holder
/// preempted on the same CPU runs again (see `nfs_service::lock`).
///
/// Invariant: `raw` is a live, initialised `struct mutex` owned by this value; `value` is
/// only reached between `krpc_mutex_lock` and `krpc_mutex_unlock` of it.
pub struct KMutex<T> {
    raw: *mut c_void,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached with the mutex held (the invariant), so sharing the
// `KMutex` between threads shares `T` as a `Mutex<T>` does: `T: Send` suffices.
unsafe impl<T: Send> Sync for KMutex<T> {}
// SAFETY: the mutex is a heap object of the kernel, not tied to a thread.
unsafe impl<T: Send> Send for KMutex<T> {}

impl<T> KMutex<T> {
    /// A mutex holding `value`, or `None` when the kernel has no memory for it.
    pub fn try_new(value: T) -> Option<Self> {
        // SAFETY: process context (module init, the accept thread); allocation only.
        let raw = unsafe { krpc_mutex_new() };
        (!raw.is_null()).then(|| KMutex {
            raw,
            value: UnsafeCell::new(value),
        })
    }
}

impl<T: Send> Lock<T> for KMutex<T> {
    fn new(value: T) -> Option<Self> {
        Self::try_new(value)
    }

    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        /// Unlocks when dropped, so a panic in `f` (which is a kernel panic anyway) or an
        /// early return never leaves the mutex held.
        struct Held(*mut c_void);
        impl Drop for Held {
            fn drop(&mut self) {
                // SAFETY: this thread locked it below.
                unsafe { krpc_mutex_unlock(self.0) }
            }
        }
        // SAFETY: `raw` is live (invariant); process context (every server thread).
        unsafe { krpc_mutex_lock(self.raw) };
        let _held = Held(self.raw);
        // SAFETY: the mutex is held until `_held` drops, after `f` returns: this is the
        // only reference to the value meanwhile (the invariant).
        f(unsafe { &mut *self.value.get() })
    }
}

impl<T> Drop for KMutex<T> {
    fn drop(&mut self) {
        // SAFETY: `raw` is live and unlocked (no `with` is running: we have `&mut self`);
        // freed once.
        unsafe { krpc_mutex_free(self.raw) }
    }
}

/// A kernel thread running `f(arg)`, stopped (and waited for) when dropped.
///
/// Invariant: `task` is a `task_struct` the glue holds a reference on (`get_task_struct`),
/// released by `krpc_kthread_stop` exactly once (in `Drop`).
pub struct KThread {
    task: *mut c_void,
}

// SAFETY: a task reference may be released from any thread in process context.
unsafe impl Send for KThread {}
// SAFETY: `&KThread` gives no access to the task.
unsafe impl Sync for KThread {}

impl KThread {
    /// Start `f(arg)` on a new kernel thread named `name` (NUL-terminated).
    ///
    /// # Safety
    /// `arg` must stay valid for `f` until this `KThread` is dropped (the drop waits for
    /// the thread to end). `f` may never be called at all when the thread is stopped before
    /// it runs (`kthread_stop`'s rule): whatever `arg` owns must be reclaimed by its owner,
    /// not by `f` alone.
    pub unsafe fn spawn(
        f: extern "C" fn(*mut c_void) -> i32,
        arg: *mut c_void,
        name: &'static [u8],
    ) -> Option<KThread> {
        if name.last() != Some(&0) {
            return None;
        }
        // SAFETY: `name` is NUL-terminated and static; the caller vouches for `arg`.
        let task = unsafe { krpc_kthread_run(f, arg, name.as_ptr()) };
        (!task.is_null()).then_some(KThread { task })
    }
}

impl Drop for KThread {
    fn drop(&mut self) {
        // SAFETY: `task` holds the glue's reference (invariant); released here, once.
        unsafe { krpc_kthread_stop(self.task) };
    }
}

/// Whether the current kernel thread has been asked to stop (`kthread_should_stop`).
pub fn should_stop() -> bool {
    // SAFETY: called only from threads started by `KThread::spawn`.
    unsafe { krpc_kthread_should_stop() != 0 }
}

/// The wall clock (`ktime_get_real_ts64`), as NFS times.
pub fn now() -> Nfstime3 {
    let (mut sec, mut nsec) = (0i64, 0u32);
    // SAFETY: two valid out-pointers.
    unsafe { krpc_wall_clock(&mut sec, &mut nsec) };
    Nfstime3 {
        seconds: u32::try_from(sec).unwrap_or(u32::MAX),
        nseconds: nsec,
    }
}

/// One more reference on the module (`try_module_get`): `false` while it is unloading.
/// While a connection is served, the module holds one, so `rmmod` fails with "in use"
/// instead of tearing the server down under a mounted client.
pub fn module_get() -> bool {
    // SAFETY: any context.
    unsafe { krpc_module_get() != 0 }
}

/// Drop a reference [`module_get`] took. Called from the accept thread after the
/// connection's thread has ended, never from the connection's own thread (the module's
/// code must not be unloaded under a running thread).
pub fn module_put() {
    // SAFETY: pairs with a successful `module_get`.
    unsafe { krpc_module_put() }
}
