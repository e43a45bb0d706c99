//! Block until a queue pair makes progress, without burning CPU forever: spin briefly on the
//! completion queues, then arm the completion notifications and `poll(2)` on the completion
//! channel and CM event channel fds.

use std::time::{Duration, Instant};

use super::qp::VerbsQp;

/// How long to spin on the CQs before sleeping.
pub const SPIN: Duration = Duration::from_micros(50);

/// Spin rounds between two clock reads.
const CLOCK_EVERY: u32 = 16;

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
    // Connection events first (a system call each), then spin on the completion queues
    // alone: polling a CQ is a read of mapped memory, while every CM check and every clock
    // read can be a system call (a clock read is an emulated HPET access in a TCG guest), so
    // the clock is looked at once per `CLOCK_EVERY` rounds. A CM event that arrives during
    // the spin is seen by the `poll(2)` below (its fd is in the set) or by the next wait.
    for (i, q) in qps.iter_mut().enumerate() {
        q.pump_cm();
        if news(i, q) {
            return true;
        }
    }
    let spin = SPIN.min(timeout);
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
    for q in qps.iter_mut() {
        q.arm();
    }
    // Completions that arrived before the notification was armed raise no event.
    for (i, q) in qps.iter_mut().enumerate() {
        q.pump_cm();
        if news(i, q) {
            return true;
        }
    }
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(qps.len() * 2);
    for q in qps.iter() {
        let (comp, cm) = q.fds();
        for fd in [comp, cm] {
            fds.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
    }
    let left = timeout.saturating_sub(start.elapsed());
    let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `fds` holds `fds.len()` valid pollfd entries for open descriptors.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if rc <= 0 {
        return false;
    }
    for (i, q) in qps.iter_mut().enumerate() {
        q.pump_cm();
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
