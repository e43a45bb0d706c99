//! The in-kernel self-test (feature `selftest`): the krpc-rdma core's Requester and Responder
//! run RPC round trips inside the kernel over two fixtures, reported separately:
//!
//! * **soft provider**: the software RC provider (`krpc_rdma::soft`) with the page data in
//!   kernel pages ([`KernelPages`](ofed_shim::KernelPages)) — [`SoftKernel`];
//! * **kernel verbs** (kernel builds, when the glue passes an RDMA device's IPv4 address):
//!   [`OfedQp`](ofed_shim::OfedQp) over the kernel's own verbs through the C wrappers, connected
//!   through rdma_cm to that address (loopback on rxe0 in the project's VM): FRWR
//!   (`IB_WR_REG_MR`), `IB_WR_LOCAL_INV`, Send With Invalidate, completions handled in kernel
//!   context — `kverbs::KVerbs`.
//!
//! Over each it runs every scenario of the provider-conformance suite (`krpc-rdma-scenarios`,
//! `no_std` and panic-free by design; [`run_suite`]), then two checks of its own that count
//! the bytes they verify: a 1 MiB DDP WRITE (read chunk, RDMA Read by the responder) and a
//! 1 MiB DDP READ (write chunk, RDMA Write by the responder), every byte compared. After each
//! connection the fixture checks that no registration is live and that every page reference
//! the connection took was dropped (counted by [`Counted`] around each side's page provider;
//! the kernel glue counts its pages and verbs objects too and reports them at unload).
//!
//! Nothing here panics: every failure is a returned [`Failure`], reported in the report line.
//! Kernel stacks are 16 KiB: the endpoints live in the scenarios' `Pair` (about 1.5 KiB), the
//! soft queue pairs' state is on the heap.
//!
//! The C entry point (kernel builds, and host builds with the `emu` hooks) is
//! [`krpc_rdma_selftest`]: it writes one NUL-terminated line into the caller's buffer and
//! returns 0 on success.

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use krpc_rdma::provider::{Middleware, Resources};
use krpc_rdma::soft::{pair, SoftConfig, SoftQp, SoftStats};
use krpc_rdma::transport::{ReplySpec, TransportConfig};
use krpc_rdma_scenarios::check::{bytes_eq, eq, fail, At};
use krpc_rdma_scenarios::data::{
    pattern, read_call, read_reply, read_reply_bytes, write_call, xdr_call,
};
use krpc_rdma_scenarios::heap::{try_boxed, Boxed};
use krpc_rdma_scenarios::{Connect, Failure, Fixture, Limits, Outcome, PagePair, Pair};
use mbuf::PageProvider;
pub use ofed_shim::pages::Counted;

/// Totals over every queue pair of a run (added when a queue pair is dropped).
#[derive(Debug, Default)]
pub struct Totals {
    /// Sends of side A (the requester's calls, and the raw scenarios' messages).
    pub sends_a: AtomicU64,
    /// Sends of side B (replies).
    pub sends_b: AtomicU64,
    /// Bytes sent (both sides).
    pub send_bytes: AtomicU64,
    /// Bytes moved by RDMA Read.
    pub read_bytes: AtomicU64,
    /// Bytes moved by RDMA Write.
    pub write_bytes: AtomicU64,
    /// Registrations made.
    pub registrations: AtomicU64,
    /// Registrations revoked by the peer's Send With Invalidate.
    pub remote_invs: AtomicU64,
    /// Registrations still live when their queue pair was dropped (the drop revokes them).
    pub live_at_drop: AtomicU64,
}

impl Totals {
    fn add(&self, a_side: bool, st: &SoftStats, live: u32) {
        let sends = if a_side { &self.sends_a } else { &self.sends_b };
        sends.fetch_add(st.sends, Ordering::Relaxed);
        self.send_bytes.fetch_add(st.send_bytes, Ordering::Relaxed);
        self.read_bytes
            .fetch_add(st.rdma_read_bytes, Ordering::Relaxed);
        self.write_bytes
            .fetch_add(st.rdma_write_bytes, Ordering::Relaxed);
        self.registrations
            .fetch_add(st.registrations, Ordering::Relaxed);
        self.remote_invs
            .fetch_add(st.remote_invs, Ordering::Relaxed);
        self.live_at_drop
            .fetch_add(u64::from(live), Ordering::Relaxed);
    }
}

/// A [`SoftQp`] that adds its statistics to the run's [`Totals`] when it is dropped. The
/// queue pair is on the heap: a scenario's frames hold a connection's two.
pub struct Qp {
    inner: Boxed<SoftQp>,
    a_side: bool,
    totals: Arc<Totals>,
}

impl Drop for Qp {
    fn drop(&mut self) {
        self.totals.add(
            self.a_side,
            &self.inner.stats(),
            self.inner.live_registrations(),
        );
    }
}

impl Middleware for Qp {
    fn wrapped(&self) -> &impl krpc_rdma::provider::Provider {
        &*self.inner
    }
    fn wrapped_mut(&mut self) -> &mut impl krpc_rdma::provider::Provider {
        &mut *self.inner
    }
}

krpc_rdma::forward_provider!(middleware [] Qp);

/// `q` on the heap (fallibly).
fn boxed_qp(q: SoftQp) -> Result<Boxed<SoftQp>, String> {
    try_boxed("soft queue pair", || Ok::<_, core::convert::Infallible>(q))
        .map_err(|e| format!("{e}"))
}

#[cfg(all(feature = "face", target_os = "none"))]
pub mod face;
#[cfg(target_os = "none")]
pub mod kverbs;
#[cfg(target_os = "none")]
pub mod peers;

/// Makes the page provider of one side of a connection.
pub type MakePages = fn() -> Result<Arc<dyn PageProvider>, String>;

/// The fixture: soft queue pairs over page providers made by `make` (kernel pages in the
/// kernel), each wrapped in [`Counted`].
pub struct SoftKernel {
    make: MakePages,
    sides: Vec<Arc<Counted>>,
    /// Statistics of every queue pair dropped so far.
    pub totals: Arc<Totals>,
    /// Page references outstanding after a connection was torn down (summed; must stay 0).
    pub pages_left: u64,
    /// Pages allocated over the run.
    pub pages_allocated: u64,
}

impl SoftKernel {
    /// A fixture over `make`.
    pub fn new(make: MakePages) -> Self {
        SoftKernel {
            make,
            sides: Vec::new(),
            totals: Arc::new(Totals::default()),
            pages_left: 0,
            pages_allocated: 0,
        }
    }

    fn retire_sides(&mut self) {
        retire(
            &mut self.sides,
            &mut self.pages_left,
            &mut self.pages_allocated,
        );
    }
}

/// Add what the page providers of a finished connection still hold (must be 0) and how many
/// pages they allocated, and forget them.
fn retire(sides: &mut Vec<Arc<Counted>>, left: &mut u64, allocated: &mut u64) {
    for s in sides.drain(..) {
        *left += s.outstanding();
        *allocated += s.allocs();
    }
}

/// Two fresh counted page providers from `make`, kept in `sides` for the leak check.
fn counted_pair(make: MakePages, sides: &mut Vec<Arc<Counted>>) -> Result<PagePair, String> {
    let a = Arc::new(Counted::new(make()?));
    let b = Arc::new(Counted::new(make()?));
    sides.push(a.clone());
    sides.push(b.clone());
    Ok((a, b))
}

fn config(l: &Limits) -> SoftConfig {
    let mut c = SoftConfig::default();
    krpc_rdma_scenarios::apply_limits!(l, c.resources);
    c
}

impl Fixture for SoftKernel {
    type Qp = Qp;

    fn page_providers(&mut self) -> Result<PagePair, String> {
        self.retire_sides();
        counted_pair(self.make, &mut self.sides)
    }

    fn resources(&self, limits: &Limits) -> Resources {
        config(limits).resources()
    }

    fn connect(&mut self, c: Connect<'_, Qp>) -> Result<(Qp, Qp), String> {
        let Connect {
            limits,
            a_private,
            b_private,
            before_accept,
        } = c;
        let [pa, pb]: [Arc<dyn PageProvider>; 2] = match self.sides.as_slice() {
            [a, b] => [a.clone(), b.clone()],
            _ => return Err("no page providers".into()),
        };
        let side = |pd: &[u8]| SoftConfig {
            private_data: heapless::Vec::from_slice(pd).unwrap_or_default(),
            ..config(limits)
        };
        let (a, b) = pair(side(a_private), pa, side(b_private), pb).map_err(|e| format!("{e}"))?;
        let a = Qp {
            inner: boxed_qp(a)?,
            a_side: true,
            totals: self.totals.clone(),
        };
        let mut b = Qp {
            inner: boxed_qp(b)?,
            a_side: false,
            totals: self.totals.clone(),
        };
        before_accept(&mut b);
        Ok((a, b))
    }

    fn wait(&mut self, _: &mut Qp, _: &mut Qp) {}

    fn idle_limit(&self) -> u32 {
        8
    }

    fn live_registrations(&self, q: &Qp) -> u32 {
        q.inner.live_registrations()
    }

    fn sq_outstanding(&self, q: &Qp) -> usize {
        q.inner.send_queue_used() as usize
    }

    fn is_connected(&self, q: &Qp) -> bool {
        q.inner.is_connected()
    }

    fn pages_in_use(&self) -> usize {
        self.sides.iter().map(|s| s.outstanding() as usize).sum()
    }
}

/// How the suite went over one fixture.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SuiteCount {
    /// Scenarios that passed (a scenario the fixture marks as a known deviation passes when
    /// it fails as expected).
    pub passed: u32,
    /// Scenarios not run (the fixture's skip list).
    pub skipped: u32,
    /// Scenarios that failed, and the own DDP check if it failed.
    pub failed: u32,
}

impl core::fmt::Display for SuiteCount {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} passed, {} skipped, {} failed",
            self.passed, self.skipped, self.failed
        )
    }
}

/// Every scenario of the suite over `fx` but those `skip` names (counted as skipped), then
/// the own 1 MiB DDP checks; the counts, the bytes the DDP checks verified and the first
/// failure. Runs everything even after a failure (each scenario is bounded).
///
/// `note(verbose, line)` is told of each scenario as it starts (`verbose`) and of each
/// failure and skip.
#[inline(never)]
pub fn run_suite<F: Fixture>(
    fx: &mut F,
    skip: fn(&str) -> Option<&'static str>,
    note: fn(bool, &str),
) -> (SuiteCount, u64, Option<Failure>) {
    let mut count = SuiteCount::default();
    let mut first = None;
    // The table and the 1 MiB check in frames of their own (kernel stack frames stay under
    // 1 KiB).
    run_table(fx, skip, note, &mut count, &mut first);
    note(true, "ddp_1mib_both_ways");
    let mut verified = 0;
    if let Err(e) = ddp_1mib_both_ways(fx, &mut verified) {
        count.failed += 1;
        first.get_or_insert(Failure {
            scenario: "ddp_1mib_both_ways",
            ..e
        });
    }
    (count, verified, first)
}

/// [`run_suite`]'s scenarios of the table, counted in `count`, the first failure in `first`.
#[inline(never)]
fn run_table<F: Fixture>(
    fx: &mut F,
    skip: fn(&str) -> Option<&'static str>,
    note: fn(bool, &str),
    count: &mut SuiteCount,
    first: &mut Option<Failure>,
) {
    for (name, f) in krpc_rdma_scenarios::all::<F>() {
        if let Some(why) = skip(name) {
            note(false, &format!("{name}: skipped ({why})"));
            count.skipped += 1;
            continue;
        }
        note(true, name);
        match krpc_rdma_scenarios::run(fx, name, f) {
            Ok(()) => count.passed += 1,
            Err(e) => {
                note(false, &format!("{e}"));
                count.failed += 1;
                first.get_or_insert(e);
            }
        }
    }
}

/// What a run over the soft provider did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The suite's counts.
    pub suite: SuiteCount,
    /// Calls (side A's Sends) and replies (side B's Sends).
    pub calls: u64,
    /// Replies.
    pub replies: u64,
    /// Bytes compared byte for byte by the self-test's own DDP checks.
    pub bytes_verified: u64,
    /// Bytes moved by Send, RDMA Read and RDMA Write over the whole run.
    pub send_bytes: u64,
    /// RDMA Read bytes.
    pub read_bytes: u64,
    /// RDMA Write bytes.
    pub write_bytes: u64,
    /// Registrations made, and revoked by Send With Invalidate.
    pub registrations: u64,
    /// Send With Invalidate revocations.
    pub remote_invs: u64,
    /// Registrations still live when their queue pair was dropped, which then revoked them
    /// and returned their pages (`dropping_a_queue_pair_disconnects_the_peer` does this on
    /// purpose; every other scenario checks that none is live before it tears down).
    pub live_registrations: u64,
    /// Page references not returned (must be 0).
    pub pages_left: u64,
    /// Pages allocated over the run.
    pub pages_allocated: u64,
}

impl core::fmt::Display for Summary {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "soft provider: {} + 1 MiB DDP WRITE/READ; calls {}, replies {}, bytes verified \
             {}, moved: send {} RDMA Read {} RDMA Write {}; registrations {} \
             (send-with-invalidate {}), live at a queue pair's drop {}; pages allocated {}, \
             page references not returned {}",
            self.suite,
            self.calls,
            self.replies,
            self.bytes_verified,
            self.send_bytes,
            self.read_bytes,
            self.write_bytes,
            self.registrations,
            self.remote_invs,
            self.live_registrations,
            self.pages_allocated,
            self.pages_left
        )
    }
}

/// 1 MiB through a read chunk (DDP WRITE), then 1 MiB (+3, the XDR pad) through a write
/// chunk (DDP READ), every byte compared; the bytes compared are added to `verified`.
#[inline(never)]
fn ddp_1mib_both_ways<F: Fixture>(fx: &mut F, verified: &mut u64) -> Outcome {
    let mut p = Pair::with(fx, TransportConfig::default())?;
    let size = 1usize << 20;
    // WRITE: the call, as the responder's upper layer receives it.
    let data = pattern(size, 0x5a);
    let call = write_call(&p.l.pa, 0x7001, &data).at("write call")?;
    let expect = call.to_vec().at("write call bytes")?;
    let mut seen = 0u64;
    p.rpc(call, ReplySpec::inline(256), &mut |c| {
        let got = c.call.to_vec().at("call as handed up")?;
        bytes_eq("1 MiB WRITE as handed up", &expect, &got)?;
        seen += got.len() as u64;
        xdr_call(c.xid, b"ok").at("reply")
    })?;
    eq("1 MiB WRITE: bytes compared", expect.len() as u64, seen)?;
    *verified += seen;
    eq("read chunks", 1, p.req.counters().read_chunks)?;
    // READ: the reply's data arrives by RDMA Write into the caller's pages.
    let data = pattern(size + 3, 0xa5);
    let pb = p.l.pb.clone();
    let (call, spec) = read_call(&p.l.pa, 0x7002, size + 3).at("read call")?;
    let reply = p.rpc(call, spec, &mut |c| {
        read_reply(&pb, c.xid, &data).at("reply")
    })?;
    let got = reply.to_vec().at("reply bytes")?;
    bytes_eq(
        "1 MiB + 3 READ reply",
        &read_reply_bytes(0x7002, &data),
        &got,
    )?;
    *verified += got.len() as u64;
    eq("write chunks", 1, p.req.counters().write_chunks)?;
    drop(reply);
    p.check_clean("after the DDP calls")?;
    p.finish()
}

/// The outcome of a run: its figures, and its first failure if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// What the run did (until the failure, if any).
    pub summary: Summary,
    /// The first failure.
    pub failure: Option<Failure>,
}

/// Run the self-test over the soft provider with page providers made by `make`: the suite,
/// then the own DDP checks; then the leak check.
pub fn run(make: MakePages) -> Run {
    let mut fx = SoftKernel::new(make);
    let mut s = Summary::default();
    let (suite, verified, first) = run_suite(&mut fx, |_| None, |_, _| {});
    s.suite = suite;
    let mut result: Outcome = first.map_or(Ok(()), Err);
    fx.retire_sides();
    let t = &fx.totals;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    s.calls = get(&t.sends_a);
    s.replies = get(&t.sends_b);
    s.bytes_verified = verified;
    s.send_bytes = get(&t.send_bytes);
    s.read_bytes = get(&t.read_bytes);
    s.write_bytes = get(&t.write_bytes);
    s.registrations = get(&t.registrations);
    s.remote_invs = get(&t.remote_invs);
    s.live_registrations = get(&t.live_at_drop);
    s.pages_left = fx.pages_left;
    s.pages_allocated = fx.pages_allocated;
    if result.is_ok() && s.pages_left != 0 {
        result = Err(fail(
            "end of the run",
            "every page reference returned",
            format!("{} page references held", s.pages_left),
        ));
    }
    Run {
        summary: s,
        failure: result.err(),
    }
}

/// Kernel pages (through the C hooks).
#[cfg(any(target_os = "none", feature = "emu"))]
fn kernel_pages() -> Result<Arc<dyn PageProvider>, String> {
    Ok(Arc::new(ofed_shim::KernelPages::new()))
}

/// A `core::fmt::Write` into a fixed byte buffer, truncating, leaving room for the NUL.
struct Line<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl core::fmt::Write for Line<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        for &b in s.as_bytes() {
            if self.len + 1 >= self.buf.len() {
                break;
            }
            if let Some(slot) = self.buf.get_mut(self.len) {
                *slot = b;
                self.len += 1;
            }
        }
        Ok(())
    }
}

/// One fixture's part of the report: its summary line and its first failure.
pub struct Part<'a> {
    /// The summary (one line).
    pub summary: &'a dyn core::fmt::Display,
    /// The first failure, if any.
    pub failure: Option<&'a Failure>,
}

/// Write the outcome of a run into `buf` (NUL-terminated, truncated): a first line
/// `krpc_rdma selftest: PASS: ...` or `... FAIL: <first failure>`, then one line per part
/// (`\n`-separated); `note` ends the first line. 0 on success, `-EIO` (-5) on failure.
pub fn report(parts: &[Part<'_>], note: &str, buf: &mut [u8]) -> i32 {
    use core::fmt::Write;
    let mut line = Line { buf, len: 0 };
    let failed = parts.iter().find_map(|p| p.failure);
    let rc = match failed {
        None => {
            let _ = write!(
                line,
                "krpc_rdma selftest: PASS: {} fixture(s){note}",
                parts.len()
            );
            0
        }
        Some(e) => {
            let _ = write!(line, "krpc_rdma selftest: FAIL: {e}{note}");
            -5
        }
    };
    for p in parts {
        let _ = write!(line, "\nkrpc_rdma selftest: {}", p.summary);
        if let Some(e) = p.failure {
            let _ = write!(line, "; first failure: {e}");
        }
    }
    let n = line.len;
    if let Some(nul) = line.buf.get_mut(n) {
        *nul = 0;
    }
    rc
}

/// The C entry point: run the self-test over kernel pages — the soft provider, then (kernel
/// builds, `rdma_addr_be` not 0) the kernel's verbs through rdma_cm to that IPv4 address
/// (network byte order) — and write its report lines into `report` (`len` bytes,
/// NUL-terminated, truncated, `\n` between lines). Returns 0 when everything passed, `-EIO`
/// otherwise (the lines say what failed), `-EINVAL` for a NULL or empty buffer.
///
/// # Safety
/// `report` must be valid for writes of `len` bytes. Process context: the kernel-verbs
/// fixture sleeps (bounded waits for completions and CM events).
#[cfg(any(target_os = "none", feature = "emu"))]
#[no_mangle]
pub unsafe extern "C" fn krpc_rdma_selftest(
    report_buf: *mut u8,
    len: usize,
    rdma_addr_be: u32,
) -> i32 {
    if report_buf.is_null() || len == 0 {
        return -22;
    }
    // SAFETY: the caller gives `len` writable bytes at `report_buf`.
    let buf = unsafe { core::slice::from_raw_parts_mut(report_buf, len) };
    let soft = run(kernel_pages);
    let soft_part = Part {
        summary: &soft.summary,
        failure: soft.failure.as_ref(),
    };
    #[cfg(target_os = "none")]
    if rdma_addr_be != 0 {
        let kv = kverbs::run(rdma_addr_be.to_ne_bytes());
        let kv_part = Part {
            summary: &kv.summary,
            failure: kv.failure.as_ref(),
        };
        return report(&[soft_part, kv_part], "", buf);
    }
    let _ = rdma_addr_be;
    report(&[soft_part], " (kernel verbs not run: no rdma_addr)", buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mbuf::HeapPageArena;
    use std::sync::atomic::AtomicU64 as Base;

    static NEXT_BASE: Base = Base::new(1);

    fn heap() -> Result<Arc<dyn PageProvider>, String> {
        let base = NEXT_BASE.fetch_add(1, Ordering::Relaxed) << 36;
        Ok(Arc::new(
            HeapPageArena::with_base(2048, base).map_err(|e| format!("{e:?}"))?,
        ))
    }

    #[test]
    fn the_selftest_passes_over_heap_pages() {
        let out = run(heap);
        let mut buf = [0u8; 1024];
        let part = Part {
            summary: &out.summary,
            failure: out.failure.as_ref(),
        };
        let rc = report(&[part], "", &mut buf);
        let line = std::ffi::CStr::from_bytes_until_nul(&buf).unwrap();
        println!("{}", line.to_string_lossy());
        assert_eq!(rc, 0, "{out:?}");
        let s = out.summary;
        let all = krpc_rdma_scenarios::all::<SoftKernel>().len() as u32;
        assert_eq!(
            s.suite,
            SuiteCount {
                passed: all,
                skipped: 0,
                failed: 0
            }
        );
        assert!(s.bytes_verified > 2 << 20);
        assert!(s.calls > 256);
        assert!(s.registrations > 0);
    }

    #[test]
    fn the_report_is_truncated_and_terminated() {
        let part = Part {
            summary: &Summary::default(),
            failure: None,
        };
        let mut buf = [0xffu8; 16];
        assert_eq!(report(&[part], "", &mut buf), 0);
        assert_eq!(buf[15], 0);
        assert_eq!(&buf[..15], b"krpc_rdma selft");
    }
}
