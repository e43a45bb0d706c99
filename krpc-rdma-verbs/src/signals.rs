//! SIGINT / SIGTERM as a stop flag, for the userspace servers over this provider (the
//! harness's `server`, `nfsd`): a signal sets [`STOP`], and the server's loops end when they
//! see it.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGINT / SIGTERM once [`install`] ran.
pub static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Make SIGINT and SIGTERM set [`STOP`] instead of ending the process.
pub fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(
                sig,
                on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
}
