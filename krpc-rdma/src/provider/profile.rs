//! Stage profile of a connection: where its wall time goes, measured at the provider
//! boundary. [`Profiled<P>`] wraps any [`Provider`] (a [`Middleware`]) and times, with the
//! embedding's clock, every call the transport makes into the verbs (posting RDMA Reads,
//! RDMA Writes and Sends, posting receives, polling completions, registering and releasing
//! memory), the sleeps the loop reports through [`Profiled::sleep`], and how long each
//! signaled RDMA Read and Send stayed on the wire (post → completion). What is left of the
//! wall time is the core's and the upper layer's own work ([`StageProfile::other_ns`]).
//!
//! The core reads no clock: the embedding passes one ([`Clock`]: `std::time::Instant` in
//! user space, `ktime_get_ns` in a kernel). `no_std`; the in-flight table is allocated once,
//! fallibly, at creation and never grown (a request beyond it, or every request when the
//! allocation failed, is not timed and is counted in [`StageProfile::untimed`]), so the
//! wrapper stays small enough for a kernel stack and allocates nothing per call.
//!
//! Under rxe the verbs calls are where the emulated NIC does its work (`ibv_post_send` runs
//! the send path in the system call), so the profile says how much of a connection's time is
//! the NIC, the wire, the transport and the service.

use alloc::vec::Vec;
use core::fmt;

use super::{
    Access, Completion, LocalFragment, Middleware, Provider, ProviderError, RecvBufId, RegId,
    Registration, Revoked, SendOp, SendWr, WcKind, WrId,
};

/// A monotonic clock in nanoseconds, supplied by the embedding.
pub type Clock = fn() -> u64;

/// Calls of one kind and the time they took.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Timed {
    /// How many.
    pub count: u64,
    /// Their total time, in nanoseconds.
    pub ns: u64,
}

impl Timed {
    fn add(&mut self, ns: u64) {
        self.count = self.count.saturating_add(1);
        self.ns = self.ns.saturating_add(ns);
    }

    /// The mean, in nanoseconds (0 without calls).
    pub fn mean_ns(&self) -> u64 {
        self.ns.checked_div(self.count).unwrap_or(0)
    }
}

/// Where a connection's time went (see the module documentation). Sum several with
/// [`add`](Self::add).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StageProfile {
    /// Wall time from the wrapper's creation to the last [`Profiled::profile`] call.
    pub wall_ns: u64,
    /// Sleeps the loop reported ([`Profiled::sleep`]).
    pub sleep: Timed,
    /// `post_send` calls whose chain holds an RDMA Read.
    pub post_read: Timed,
    /// `post_send` calls whose chain holds an RDMA Write (and no Read).
    pub post_write: Timed,
    /// `post_send` calls of Sends only.
    pub post_send: Timed,
    /// `post_send` calls of LOCAL_INV only.
    pub post_inv: Timed,
    /// `post_recv` calls.
    pub post_recv: Timed,
    /// `poll_cq` calls (all, including those that found nothing).
    pub poll_cq: Timed,
    /// `register` calls.
    pub register: Timed,
    /// `release` and `revoke` calls.
    pub release: Timed,
    /// Signaled chains holding an RDMA Read: post → successful completion. Chains in flight
    /// together overlap: the sum may exceed the wall time; the mean is a Read's latency.
    pub read_wait: Timed,
    /// Signaled chains of Sends (or Writes then a Send): post → successful completion.
    pub send_wait: Timed,
    /// Bytes posted for RDMA Read.
    pub read_bytes: u64,
    /// Bytes posted for RDMA Write.
    pub write_bytes: u64,
    /// Receive completions polled.
    pub recvs: u64,
    /// Send-queue completions polled.
    pub send_completions: u64,
    /// Signaled chains not timed (the in-flight table was full).
    pub untimed: u64,
}

impl StageProfile {
    /// Add `o` (another connection's) to this one.
    pub fn add(&mut self, o: &StageProfile) {
        *self = self.zip_with(o, u64::saturating_add);
    }

    /// What happened since `earlier` (a profile of the same connection taken before): each
    /// figure's difference (0 where `earlier` is not smaller).
    #[must_use]
    pub fn since(&self, earlier: &StageProfile) -> StageProfile {
        self.zip_with(earlier, u64::saturating_sub)
    }

    /// Every figure of `self` and `o` combined by `f`, field by field: the one place that
    /// lists them all for arithmetic ([`add`](Self::add), [`since`](Self::since)).
    fn zip_with(&self, o: &StageProfile, f: fn(u64, u64) -> u64) -> StageProfile {
        let t = |a: Timed, b: Timed| Timed {
            count: f(a.count, b.count),
            ns: f(a.ns, b.ns),
        };
        StageProfile {
            wall_ns: f(self.wall_ns, o.wall_ns),
            sleep: t(self.sleep, o.sleep),
            post_read: t(self.post_read, o.post_read),
            post_write: t(self.post_write, o.post_write),
            post_send: t(self.post_send, o.post_send),
            post_inv: t(self.post_inv, o.post_inv),
            post_recv: t(self.post_recv, o.post_recv),
            poll_cq: t(self.poll_cq, o.poll_cq),
            register: t(self.register, o.register),
            release: t(self.release, o.release),
            read_wait: t(self.read_wait, o.read_wait),
            send_wait: t(self.send_wait, o.send_wait),
            read_bytes: f(self.read_bytes, o.read_bytes),
            write_bytes: f(self.write_bytes, o.write_bytes),
            recvs: f(self.recvs, o.recvs),
            send_completions: f(self.send_completions, o.send_completions),
            untimed: f(self.untimed, o.untimed),
        }
    }

    /// Every figure by name (`STAGE_ns` and `STAGE_n` for each timed stage, then the byte
    /// and completion counts), for machine-read reports: a JSON object, a `name value` list.
    pub fn fields(&self) -> [(&'static str, u64); 28] {
        let t = |t: Timed| (t.ns, t.count);
        let (sl, sln) = t(self.sleep);
        let (pr, prn) = t(self.post_read);
        let (pw, pwn) = t(self.post_write);
        let (ps, psn) = t(self.post_send);
        let (pi, pin) = t(self.post_inv);
        let (rv, rvn) = t(self.post_recv);
        let (pc, pcn) = t(self.poll_cq);
        let (rg, rgn) = t(self.register);
        let (rl, rln) = t(self.release);
        let (rw, rwn) = t(self.read_wait);
        let (sw, swn) = t(self.send_wait);
        [
            ("wall_ns", self.wall_ns),
            ("other_ns", self.other_ns()),
            ("sleep_ns", sl),
            ("sleep_n", sln),
            ("post_read_ns", pr),
            ("post_read_n", prn),
            ("post_write_ns", pw),
            ("post_write_n", pwn),
            ("post_send_ns", ps),
            ("post_send_n", psn),
            ("post_inv_ns", pi),
            ("post_inv_n", pin),
            ("post_recv_ns", rv),
            ("post_recv_n", rvn),
            ("poll_cq_ns", pc),
            ("poll_cq_n", pcn),
            ("register_ns", rg),
            ("register_n", rgn),
            ("release_ns", rl),
            ("release_n", rln),
            ("read_wait_ns", rw),
            ("read_wait_n", rwn),
            ("send_wait_ns", sw),
            ("send_wait_n", swn),
            ("read_bytes", self.read_bytes),
            ("write_bytes", self.write_bytes),
            ("recvs", self.recvs),
            ("untimed", self.untimed),
        ]
    }

    /// The time the loop spent inside provider calls and sleeps.
    pub fn accounted_ns(&self) -> u64 {
        self.stages()
            .iter()
            .fold(0u64, |s, (_, t)| s.saturating_add(t.ns))
    }

    /// The rest of the wall time: the core's and the upper layer's own work (and whatever
    /// else ran on the loop's thread).
    pub fn other_ns(&self) -> u64 {
        self.wall_ns.saturating_sub(self.accounted_ns())
    }

    /// The stages that make up the wall time, by name, in a fixed order.
    pub fn stages(&self) -> [(&'static str, Timed); 9] {
        [
            ("sleep", self.sleep),
            ("post_read", self.post_read),
            ("post_write", self.post_write),
            ("post_send", self.post_send),
            ("post_inv", self.post_inv),
            ("post_recv", self.post_recv),
            ("poll_cq", self.poll_cq),
            ("register", self.register),
            ("release", self.release),
        ]
    }
}

/// Per mille of `part` in `whole` (0 when `whole` is 0).
fn permille(part: u64, whole: u64) -> u64 {
    (u128::from(part) * 1000)
        .checked_div(u128::from(whole))
        .map_or(0, |v| u64::try_from(v).unwrap_or(u64::MAX))
}

/// One line, ASCII (kernel logs): the wall time, each stage's share of it (per cent, one
/// decimal) with its calls and mean (`calls x mean us`), the rest, then the wire times.
/// Stages with no calls are left out.
impl fmt::Display for StageProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let wall = self.wall_ns;
        write!(
            f,
            "wall {}.{:03} s:",
            wall / 1_000_000_000,
            wall / 1_000_000 % 1000
        )?;
        let pct = |ns| {
            let p = permille(ns, wall);
            (p / 10, p % 10)
        };
        for (name, t) in self.stages() {
            if t.count == 0 {
                continue;
            }
            let (a, b) = pct(t.ns);
            write!(
                f,
                " {name} {a}.{b}% ({} x {} us),",
                t.count,
                t.mean_ns() / 1000
            )?;
        }
        let (a, b) = pct(self.other_ns());
        write!(f, " other {a}.{b}%")?;
        for (name, t) in [("read_wait", self.read_wait), ("send_wait", self.send_wait)] {
            if t.count > 0 {
                write!(f, "; {name} {} x {} us", t.count, t.mean_ns() / 1000)?;
            }
        }
        if self.untimed > 0 {
            write!(f, "; untimed {}", self.untimed)?;
        }
        Ok(())
    }
}

/// Signaled chains whose completion is timed at once, at most.
const IN_FLIGHT: usize = 64;

#[derive(Debug, Clone, Copy)]
enum Class {
    Read,
    Send,
}

/// A [`Provider`] whose calls are timed into a [`StageProfile`] (see the module
/// documentation). Forwards everything; changes nothing the transport sees.
pub struct Profiled<P> {
    inner: P,
    clock: Clock,
    start: u64,
    prof: StageProfile,
    /// The profile as [`delta`](Self::delta) last returned it.
    mark: StageProfile,
    /// Signaled chains in flight: the wr_id of their last signaled request, when posted, and
    /// what they were (capacity [`IN_FLIGHT`], reserved at creation, or 0).
    flight: Vec<(WrId, u64, Class)>,
}

impl<P> fmt::Debug for Profiled<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Profiled")
            .field("prof", &self.prof)
            .field("in_flight", &self.flight.len())
            .finish_non_exhaustive()
    }
}

impl<P: Provider> Profiled<P> {
    /// Wrap `inner`; the wall time starts now.
    pub fn new(inner: P, clock: Clock) -> Self {
        let mut flight = Vec::new();
        // Without the table nothing is timed from post to completion; the rest still is.
        let _ = flight.try_reserve_exact(IN_FLIGHT);
        Profiled {
            inner,
            clock,
            start: clock(),
            prof: StageProfile::default(),
            mark: StageProfile::default(),
            flight,
        }
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The wrapped provider, mutably (calls through it are not timed).
    pub fn inner_mut(&mut self) -> &mut P {
        &mut self.inner
    }

    /// Run `f` (the loop's sleep on the completion channel) on the wrapped provider, timed
    /// as a sleep.
    pub fn sleep<T>(&mut self, f: impl FnOnce(&mut P) -> T) -> T {
        let t = (self.clock)();
        let r = f(&mut self.inner);
        self.prof.sleep.add((self.clock)().saturating_sub(t));
        r
    }

    /// The profile so far (its wall time ends now).
    pub fn profile(&mut self) -> StageProfile {
        self.prof.wall_ns = (self.clock)().saturating_sub(self.start);
        self.prof
    }

    /// What happened since the last `delta` (since creation, the first time): for a report
    /// that publishes a live connection's figures piecewise, or a benchmark that times one
    /// phase. Computed in place (no profile-sized temporaries on the caller's stack).
    pub fn delta(&mut self) -> StageProfile {
        self.prof.wall_ns = (self.clock)().saturating_sub(self.start);
        let d = self.prof.since(&self.mark);
        self.mark = self.prof;
        d
    }
}

/// What a chain holds: its class for the wire time, its bytes, its stage.
fn classify(wrs: &[SendWr<'_>]) -> (bool, bool, bool, u64, u64) {
    let (mut read, mut write, mut send) = (false, false, false);
    let (mut rb, mut wb) = (0u64, 0u64);
    let len = |l: &[LocalFragment]| {
        l.iter().fold(0u64, |s, f| {
            s.saturating_add(u64::try_from(f.len).unwrap_or(u64::MAX))
        })
    };
    for wr in wrs {
        match wr.op {
            SendOp::RdmaRead { local, .. } => {
                read = true;
                rb = rb.saturating_add(len(local));
            }
            SendOp::RdmaWrite { local, .. } => {
                write = true;
                wb = wb.saturating_add(len(local));
            }
            SendOp::Send { .. } | SendOp::SendGather { .. } => send = true,
            SendOp::LocalInv { .. } => {}
        }
    }
    (read, write, send, rb, wb)
}

impl<P: Provider> Middleware for Profiled<P> {
    fn wrapped(&self) -> &impl Provider {
        &self.inner
    }

    fn wrapped_mut(&mut self) -> &mut impl Provider {
        &mut self.inner
    }

    // Each method times its call itself (no helper returning the result in a tuple: a
    // registration is a few hundred bytes, and one more copy of it on a kernel stack
    // counts).
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), ProviderError> {
        let t = (self.clock)();
        let r = self.inner.post_send(wrs);
        let ns = (self.clock)().saturating_sub(t);
        let (read, write, send, rb, wb) = classify(wrs);
        let stage = if read {
            &mut self.prof.post_read
        } else if write {
            &mut self.prof.post_write
        } else if send {
            &mut self.prof.post_send
        } else {
            &mut self.prof.post_inv
        };
        stage.add(ns);
        if r.is_ok() {
            self.prof.read_bytes = self.prof.read_bytes.saturating_add(rb);
            self.prof.write_bytes = self.prof.write_bytes.saturating_add(wb);
            let class = if read {
                Some(Class::Read)
            } else if send {
                Some(Class::Send)
            } else {
                None
            };
            if let (Some(class), Some(last)) = (class, wrs.iter().rev().find(|w| w.signaled)) {
                // Within the capacity reserved at creation: never an allocation here.
                if self.flight.len() < self.flight.capacity() {
                    self.flight.push((last.wr_id, t, class));
                } else {
                    self.prof.untimed = self.prof.untimed.saturating_add(1);
                }
            }
        }
        r
    }

    fn post_recv(&mut self, bufs: &[RecvBufId]) -> Result<(), ProviderError> {
        let t = (self.clock)();
        let r = self.inner.post_recv(bufs);
        self.prof.post_recv.add((self.clock)().saturating_sub(t));
        r
    }

    fn poll_cq(&mut self, out: &mut [Completion]) -> usize {
        let t = (self.clock)();
        let n = self.inner.poll_cq(out);
        let now = (self.clock)();
        self.prof.poll_cq.add(now.saturating_sub(t));
        for c in out.iter().take(n) {
            match c.kind {
                WcKind::Recv { .. } => self.prof.recvs = self.prof.recvs.saturating_add(1),
                WcKind::Send => {
                    self.prof.send_completions = self.prof.send_completions.saturating_add(1);
                    if let Some(i) = self.flight.iter().position(|e| e.0 == c.wr_id) {
                        let (_, t, class) = self.flight.swap_remove(i);
                        if c.status == super::WcStatus::Success {
                            let wait = now.saturating_sub(t);
                            match class {
                                Class::Read => self.prof.read_wait.add(wait),
                                Class::Send => self.prof.send_wait.add(wait),
                            }
                        }
                    }
                }
            }
        }
        n
    }

    fn register(
        &mut self,
        frags: &[LocalFragment],
        access: Access,
    ) -> Result<Registration, ProviderError> {
        let t = (self.clock)();
        let r = self.inner.register(frags, access);
        self.prof.register.add((self.clock)().saturating_sub(t));
        r
    }

    fn release(&mut self, reg: RegId) -> Result<(), ProviderError> {
        let t = (self.clock)();
        let r = self.inner.release(reg);
        self.prof.release.add((self.clock)().saturating_sub(t));
        r
    }

    fn revoke(&mut self, reg: RegId) -> Result<Revoked, ProviderError> {
        let t = (self.clock)();
        let r = self.inner.revoke(reg);
        self.prof.release.add((self.clock)().saturating_sub(t));
        r
    }

    fn disconnect(&mut self) {
        // A lost connection flushes what was in flight: nothing left to time.
        self.flight.clear();
        self.inner.disconnect();
    }
}

crate::forward_provider!(middleware [P: Provider] Profiled<P>);
