//! Where a connection's time goes: per NFSv3 procedure, the calls served and the server-side
//! service time (the call handed up by the Responder → the reply posted, split into the
//! dispatch through the reply cache, service and backend, and the Responder's reply), and
//! the connection loop's waits (how often it went to sleep on the completion channel, and
//! for how long). Two clock reads per call and two per wait: cheap next to a call, and what
//! the issue-13 profile of the small-file row is made of. Printed as one line each at exit.

use std::time::{Duration, Instant};

use nfs_proto::nfs3::proc_name;

/// Procedure slots: NFSv3's 22, and one for what did not get as far as a procedure
/// (replays, drops, RPC-level refusals).
pub const SLOTS: usize = 23;
/// The slot of calls without a procedure.
const OTHER: usize = SLOTS - 1;

/// One procedure's calls and time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcTime {
    /// Calls.
    pub calls: u64,
    /// Nanoseconds from the call handed up to the reply built (reply cache, decode, backend,
    /// encode).
    pub dispatch_ns: u64,
    /// Nanoseconds of `Responder::reply` (plan, post the Send and any RDMA Writes).
    pub reply_ns: u64,
}

/// A connection's (or the server's) service times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceTime {
    /// By procedure number; [`SLOTS`]` - 1` for calls without one.
    pub procs: [ProcTime; SLOTS],
    /// Waits for completions (`verbs::wait`), and of those the ones that slept in `poll(2)`.
    pub waits: u64,
    /// Nanoseconds spent in those waits.
    pub wait_ns: u64,
    /// Nanoseconds in `Responder::poll` (completions reaped, receives reposted, RDMA Reads
    /// of read chunks posted).
    pub poll_ns: u64,
    /// The connection thread's scheduler figures over its life (`/proc/thread-self/schedstat`):
    /// nanoseconds on a CPU, nanoseconds runnable but waiting for one, times scheduled.
    pub sched: [u64; 3],
}

/// This thread's `/proc/thread-self/schedstat` (on-CPU ns, run-queue wait ns, timeslices);
/// zeros where there is none.
pub fn sched_now() -> [u64; 3] {
    let mut v = [0u64; 3];
    if let Ok(s) = std::fs::read_to_string("/proc/thread-self/schedstat") {
        for (o, w) in v.iter_mut().zip(s.split_whitespace()) {
            *o = w.parse().unwrap_or(0);
        }
    }
    v
}

impl Default for ServiceTime {
    fn default() -> Self {
        ServiceTime {
            procs: [ProcTime::default(); SLOTS],
            waits: 0,
            wait_ns: 0,
            poll_ns: 0,
            sched: [0; 3],
        }
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl ServiceTime {
    /// Record one call of `proc_` (`None`: not dispatched to a procedure): dispatched from
    /// `start` to `built`, replied by `posted`.
    pub fn call(&mut self, proc_: Option<u32>, start: Instant, built: Instant, posted: Instant) {
        let i = proc_
            .and_then(|p| usize::try_from(p).ok())
            .filter(|p| *p < OTHER)
            .unwrap_or(OTHER);
        if let Some(p) = self.procs.get_mut(i) {
            p.calls += 1;
            p.dispatch_ns = p.dispatch_ns.saturating_add(ns(built - start));
            p.reply_ns = p.reply_ns.saturating_add(ns(posted - built));
        }
    }

    /// Record the scheduler figures between `start` and now ([`sched_now`]).
    pub fn sched_since(&mut self, start: [u64; 3]) {
        for ((o, now), then) in self.sched.iter_mut().zip(sched_now()).zip(start) {
            *o = o.saturating_add(now.saturating_sub(then));
        }
    }

    /// Record a wait that began at `start`.
    pub fn waited(&mut self, start: Instant) {
        self.waits += 1;
        self.wait_ns = self.wait_ns.saturating_add(ns(start.elapsed()));
    }

    /// Record a `Responder::poll` that began at `start`.
    pub fn polled(&mut self, start: Instant) {
        self.poll_ns = self.poll_ns.saturating_add(ns(start.elapsed()));
    }

    /// Sum `o` into `self`.
    pub fn add(&mut self, o: &ServiceTime) {
        for (a, b) in self.procs.iter_mut().zip(o.procs.iter()) {
            a.calls += b.calls;
            a.dispatch_ns = a.dispatch_ns.saturating_add(b.dispatch_ns);
            a.reply_ns = a.reply_ns.saturating_add(b.reply_ns);
        }
        self.waits += o.waits;
        self.wait_ns = self.wait_ns.saturating_add(o.wait_ns);
        self.poll_ns = self.poll_ns.saturating_add(o.poll_ns);
        for (a, b) in self.sched.iter_mut().zip(o.sched) {
            *a = a.saturating_add(b);
        }
    }

    /// One line: `PROC calls × (dispatch + reply) µs mean` for every procedure called, the
    /// totals, the waits.
    pub fn summary(&self) -> String {
        let us = |t: u64, n: u64| t.checked_div(n).unwrap_or(0) as f64 / 1000.0;
        let mut parts = Vec::new();
        let (mut calls, mut busy) = (0u64, 0u64);
        for (i, p) in self.procs.iter().enumerate().filter(|(_, p)| p.calls != 0) {
            let name = u32::try_from(i)
                .ok()
                .filter(|_| i != OTHER)
                .and_then(proc_name)
                .unwrap_or("other");
            parts.push(format!(
                "{name} {} x ({:.0} + {:.0}) us",
                p.calls,
                us(p.dispatch_ns, p.calls),
                us(p.reply_ns, p.calls)
            ));
            calls += p.calls;
            busy = busy.saturating_add(p.dispatch_ns.saturating_add(p.reply_ns));
        }
        let [cpu, runq, slices] = self.sched;
        format!(
            "{}; {calls} calls served in {:.3} s (dispatch + reply), poll {:.3} s, {} waits {:.3} s; \
             thread on CPU {:.3} s, runnable but not running {:.3} s, scheduled {slices} times",
            parts.join(", "),
            busy as f64 / 1e9,
            self.poll_ns as f64 / 1e9,
            self.waits,
            self.wait_ns as f64 / 1e9,
            cpu as f64 / 1e9,
            runq as f64 / 1e9,
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn calls_land_in_their_procedure_and_sum() {
        let t0 = Instant::now();
        let (t1, t2) = (
            t0 + Duration::from_micros(30),
            t0 + Duration::from_micros(40),
        );
        let mut s = ServiceTime::default();
        s.call(Some(1), t0, t1, t2);
        s.call(Some(1), t0, t1, t2);
        s.call(None, t0, t1, t2);
        s.call(Some(99), t0, t1, t2);
        assert_eq!(s.procs[1].calls, 2);
        assert_eq!(s.procs[1].dispatch_ns, 60_000);
        assert_eq!(s.procs[1].reply_ns, 20_000);
        assert_eq!(s.procs[OTHER].calls, 2);
        let mut all = ServiceTime::default();
        all.add(&s);
        all.add(&s);
        assert_eq!(all.procs[1].calls, 4);
        let line = all.summary();
        assert!(line.starts_with("GETATTR 4 x (30 + 10) us, other 4 x (30 + 10) us; 8 calls"));
    }
}
