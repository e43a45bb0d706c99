//! Block until a queue pair makes progress, without burning CPU forever: spin briefly on the
//! completion queues, then arm the completion notifications and `poll(2)` on the completion
//! channel and CM event channel fds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::qp::VerbsQp;

/// How long to spin on the CQs before sleeping (`KRPC_RDMA_WAIT_SPIN_US` overrides it
/// for the process, read once: an experiment knob, see [`spin`]).
pub const SPIN: Duration = Duration::from_micros(50);

/// The spin of this process: [`SPIN`], or `KRPC_RDMA_WAIT_SPIN_US` microseconds.
pub fn spin() -> Duration {
    static US: OnceLock<Option<u64>> = OnceLock::new();
    US.get_or_init(|| {
        std::env::var("KRPC_RDMA_WAIT_SPIN_US")
            .ok()
            .and_then(|v| v.parse().ok())
    })
    .map_or(SPIN, Duration::from_micros)
}

/// Spin rounds between two clock reads.
const CLOCK_EVERY: u32 = 16;

/// Waits of this process that went to sleep in `poll(2)` (the spin found nothing).
static SLEEPS: AtomicU64 = AtomicU64::new(0);

/// How many waits of this process so far slept in `poll(2)` on the completion channel
/// instead of finding work while spinning: each is a wake-up through the kernel.
pub fn sleeps() -> u64 {
    SLEEPS.load(Ordering::Relaxed)
}

/// Wait until one of `qps` has completions or connection events to report, or `timeout`
/// passes. Returns whether something is ready. Completions found are kept for the next
/// `poll_cq` (nothing is lost), so the caller then runs `Requester::poll` /
/// `Responder::poll`.
pub fn wait_any(qps: &mut [&mut VerbsQp], timeout: Duration) -> bool {
    wait_until(qps, timeout, None)
}

/// [`wait_any`], except that work already queued when it is called (say one side's unread
/// `Disconnected` after its own disconnect) does not end the wait: only new completions, or
/// events on a queue pair that had nothing queued, do. For a caller that waits for one side
/// while the other keeps an unread backlog: with [`wait_any`] every wait would return at
/// once, and a wait budget meant as seconds would be spent in milliseconds.
pub fn wait_for_news(qps: &mut [&mut VerbsQp], timeout: Duration) -> bool {
    let had: Vec<bool> = qps.iter().map(|q| q.has_work()).collect();
    wait_until(qps, timeout, Some(&had))
}

/// The wait; `had[i]` says queue pair `i` had work queued before (then only new completions
/// count for it); `None`: queued work counts.
fn wait_until(qps: &mut [&mut VerbsQp], timeout: Duration, had: Option<&[bool]>) -> bool {
    let had_work = |i: usize| had.and_then(|h| h.get(i)).copied().unwrap_or(false);
    let news = |i: usize, q: &mut VerbsQp| q.reap() > 0 || (!had_work(i) && q.has_work());
    let start = Instant::now();
    // Spin on the completion queues alone: polling a CQ is a read of mapped memory, while
    // every CM check and every clock read can be a system call (a clock read is an emulated
    // HPET access in a TCG guest), so the clock is looked at once per `CLOCK_EVERY` rounds.
    // Connection events are not read here: the CM fd is in the `poll(2)` set below, which
    // returns at once when one is pending, and the caller's `poll` reads them too.
    let spin = spin().min(timeout);
    let mut round = 0u32;
    loop {
        for (i, q) in qps.iter_mut().enumerate() {
            if news(i, q) {
                return true;
            }
        }
        round = round.wrapping_add(1);
        if round % CLOCK_EVERY == 0 && start.elapsed() >= spin {
            break;
        }
        std::hint::spin_loop();
    }
    // Ask for a CQ event (one system call, none while a request is still outstanding), then
    // look again: completions that arrived before the request raise no event.
    for q in qps.iter_mut() {
        q.arm();
    }
    for (i, q) in qps.iter_mut().enumerate() {
        if news(i, q) {
            return true;
        }
    }
    SLEEPS.fetch_add(1, Ordering::Relaxed);
    // Two descriptors per queue pair, on the stack for up to `STACK_QPS` of them (no
    // allocation per wait).
    const STACK_QPS: usize = 8;
    let blank = libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    };
    let mut stack = [blank; 2 * STACK_QPS];
    let mut heap = Vec::new();
    let fds: &mut [libc::pollfd] = if qps.len() <= STACK_QPS {
        stack.get_mut(..2 * qps.len()).unwrap_or_default()
    } else {
        heap.resize(2 * qps.len(), blank);
        &mut heap
    };
    for (q, pair) in qps.iter().zip(fds.chunks_exact_mut(2)) {
        let (comp, cm) = q.fds();
        for (p, fd) in pair.iter_mut().zip([comp, cm]) {
            p.fd = fd;
            p.events = libc::POLLIN;
        }
    }
    let left = timeout.saturating_sub(start.elapsed());
    let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `fds` holds `fds.len()` valid pollfd entries for open descriptors.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if rc <= 0 {
        return false;
    }
    for ((i, q), pair) in qps.iter_mut().enumerate().zip(fds.chunks_exact(2)) {
        let ready = |k: usize| pair.get(k).is_some_and(|p| p.revents != 0);
        if ready(0) {
            q.take_cq_event();
        }
        if ready(1) {
            q.pump_cm();
        }
        if news(i, q) {
            return true;
        }
    }
    // A CQ event with nothing left to reap (already taken by a previous reap): report
    // progress anyway so the caller polls.
    true
}

/// [`wait_any`] for one queue pair.
pub fn wait(qp: &mut VerbsQp, timeout: Duration) -> bool {
    wait_any(&mut [qp], timeout)
}
