//! Two [`OfedQp`]s connected to each other through one address — a listener and a connect on
//! the same RDMA device (rdma_cm loopback) — and waiting on both: what the fixtures that run
//! the scenario suite over a real device share, the userspace emulation's
//! (`tests/emu_rxe.rs`) and the in-kernel self-test's (`src/selftest/kverbs.rs`). How to
//! sleep is theirs ([`Sleep`]).

use alloc::format;
use alloc::string::String;
use core::borrow::BorrowMut;
use core::ffi::c_void;

pub use ofed_shim::wait::{wait_any, Sleep, SockaddrIn};
use ofed_shim::{OfedConfig, OfedError, OfedListener, OfedQp};

/// The configuration the loopback fixtures start from: the default, with 256 FRWR MRs per
/// queue pair (two queue pairs per connection on one device).
pub fn config() -> OfedConfig {
    OfedConfig {
        num_mrs: 256,
        ..OfedConfig::default()
    }
}

/// A connected pair and the listener side B came from (keep it until B is dropped); `Q` is
/// how the caller keeps an [`OfedQp`] (itself, or a box of it: 880 bytes).
pub struct Connected<Q> {
    /// The listener.
    pub listener: OfedListener,
    /// Side A (connected through rdma_cm).
    pub a: Q,
    /// Side B (accepted).
    pub b: Q,
}

/// Listen on `addr`, connect side A to it, take the connection request as side B (looked
/// for `polls` times, sleeping up to 2 ms in between), run `before_accept` on B (it posts
/// receives) and accept with `b_private`. Both report `Established` through their event
/// polls once rdma_cm has connected them. Each [`OfedQp`] is handed to `keep` as its
/// constructor returned it (with its error: a `Result` is moved by reference, not copied),
/// each in a frame of its own (`side`, `request`), so no frame here holds one by value
/// (kernel stack frames stay under 1 KiB when `keep` boxes it).
///
/// # Safety
/// `net` and `addr` as for [`OfedQp::connect`] (`addr` a valid `struct sockaddr` for the
/// calls; the C side copies it). `s.upcall()` must be callable from any context until both
/// queue pairs are dropped.
///
/// # Errors
/// What failed, as text.
#[allow(clippy::too_many_arguments)]
pub unsafe fn connect<Q: BorrowMut<OfedQp>>(
    s: &impl Sleep,
    net: *mut c_void,
    addr: *const c_void,
    cfg: &OfedConfig,
    a_private: &[u8],
    b_private: &[u8],
    before_accept: &mut dyn FnMut(&mut Q),
    polls: u32,
    keep: fn(Result<OfedQp, OfedError>) -> Result<Q, String>,
) -> Result<Connected<Q>, String> {
    // SAFETY: the caller vouches for `net` and `addr`.
    let mut listener =
        unsafe { OfedListener::bind(net, addr, cfg) }.map_err(|e| format!("listen: {e}"))?;
    // SAFETY: as above.
    let mut a = side(
        || unsafe { OfedQp::connect(net, addr, cfg, a_private) },
        keep,
    )
    .map_err(|e| format!("connect: {e}"))?;
    // SAFETY: the caller vouches for the upcall.
    unsafe { a.borrow_mut().set_upcall(s.upcall(), core::ptr::null_mut()) };
    let mut b = None;
    for _ in 0..polls {
        let gen = s.generation();
        if let Some(q) = request(&mut listener, keep) {
            b = Some(q?);
            break;
        }
        s.sleep(gen, 2);
    }
    let mut b = b.ok_or(format!("no connection request in {polls} polls"))?;
    // SAFETY: as above.
    unsafe { b.borrow_mut().set_upcall(s.upcall(), core::ptr::null_mut()) };
    before_accept(&mut b);
    b.borrow_mut()
        .accept(b_private)
        .map_err(|e| format!("accept: {e}"))?;
    Ok(Connected { listener, a, b })
}

/// `make()`'s result, handed to `keep` as it is (a frame of its own: see [`connect`]).
#[inline(never)]
fn side<Q>(
    make: impl FnOnce() -> Result<OfedQp, OfedError>,
    keep: fn(Result<OfedQp, OfedError>) -> Result<Q, String>,
) -> Result<Q, String> {
    keep(make())
}

/// The listener's next connection request, handed to `keep` (a frame of its own).
#[inline(never)]
fn request<Q>(
    listener: &mut OfedListener,
    keep: fn(Result<OfedQp, OfedError>) -> Result<Q, String>,
) -> Option<Result<Q, String>> {
    // Called through an opaque pointer so that its body (an 880-byte `OfedQp` returned by
    // value, built in place by `OfedQp::new`) stays out of this frame.
    let next: fn(&mut OfedListener) -> Option<Result<OfedQp, OfedError>> =
        core::hint::black_box(OfedListener::next_request);
    keep_some(next(listener), keep)
}

/// `q`'s request handed to `keep` (a frame of its own: taking the `Result` out of the
/// `Option` is a copy of the `OfedQp`).
#[inline(never)]
fn keep_some<Q>(
    q: Option<Result<OfedQp, OfedError>>,
    keep: fn(Result<OfedQp, OfedError>) -> Result<Q, String>,
) -> Option<Result<Q, String>> {
    q.map(|q| keep(q).map_err(|e| format!("connection request: {e}")))
}

/// Until one of the queue pairs has new completions or events, or `ms` milliseconds.
///
/// Only new completions or events end the wait early, not work already queued (say the other
/// side's unread Disconnected): else a scenario waiting for one side would spin through its
/// idle budget while the other side's backlog sits there, and a CM event that takes longer
/// to arrive (the peer's DREQ in a loaded TCG guest) would be given up on after milliseconds.
pub fn wait(s: &impl Sleep, a: &mut OfedQp, b: &mut OfedQp, ms: u32) {
    wait_any(s, &mut [a, b], ms);
}
