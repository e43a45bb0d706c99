//! The self-test's kernel-verbs fixture (kernel builds): the scenario suite over
//! [`OfedQp`]s on the kernel's own verbs, through the C wrappers of `c/krpc_rdma_ofed.c`
//! compiled into the module. Side A connects through rdma_cm to side B's listener on the
//! same address (loopback on rxe0 in the project's VM), as `tests/emu_rxe.rs` does in
//! userspace over the KPI emulation. One expectation is stronger than there: the
//! emulation's registrations are memory windows, whose bounds rxe (Linux 6.1) does not check
//! (`krpc_rdma_scenarios::fixture::rxe_supports`); here they are real FRWR MRs, whose bounds
//! it does, so [`Feature::RangeChecks`] is supported (an RDMA one byte past a registration's
//! end must be refused).
//!
//! Completions are handled in kernel context: the CQ completion handler (softirq on rxe) and
//! the CM handler (the CM's work queue) call the upcall, which bumps a generation and wakes
//! a wait queue in the glue (`krpc_ofed_wake`); [`Fixture::wait`] polls both queue pairs,
//! arms their CQs, polls again, and sleeps until the generation moves or 100 ms pass
//! ([`loopback::wait`], shared with the emulation's fixture, as is [`loopback::connect`]).
//! Every wait is bounded; 600 waits without progress fail the scenario (the suite's idle
//! limit).
//!
//! The figures (REG_MR, LOCAL_INV, Send With Invalidate sent and received, completions,
//! Sends per side) are the C wrappers' counters ([`KrpcCounts`]) over the run; after the run
//! every verbs object the wrappers count (cm ids, PDs, CQs, QPs, MRs, DMA mappings) must be
//! gone and every page reference returned.

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::borrow::{Borrow, BorrowMut};
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU16, Ordering};

use krpc_rdma::provider::{Middleware, Resources};
use krpc_rdma_scenarios::check::fail;
use krpc_rdma_scenarios::heap::{try_boxed_result, Boxed};
use krpc_rdma_scenarios::{Connect, Failure, Feature, Fixture, Limits, PagePair};

use super::{counted_pair, retire, run_suite, Counted, SuiteCount};
use crate::loopback::{self, SockaddrIn};
use ofed_shim::ffi::{self, KrpcCounts};
pub(super) use ofed_shim::wait::GlueSleep;
use ofed_shim::{KernelPages, OfedConfig, OfedError, OfedListener, OfedQp};

extern "C" {
    /// A line of the self-test's log (`verbose`: only with the module's selftest_verbose).
    fn krpc_selftest_log(verbose: i32, msg: *const u8, len: usize);
}

/// Log `line`, prefixed with "kernel verbs: ".
fn note(verbose: bool, line: &str) {
    let line = format!("kernel verbs: {line}");
    // SAFETY: `line` is valid for `len` bytes during the call; the glue copies it (printk).
    unsafe { krpc_selftest_log(i32::from(verbose), line.as_ptr(), line.len()) };
}

/// The C wrappers' counters now.
pub(super) fn counts() -> KrpcCounts {
    let mut c = KrpcCounts::default();
    // SAFETY: `c` is a valid out-pointer of the C struct's layout.
    unsafe { ffi::krpc_ofed_get_counts(&mut c) };
    c
}

/// Listening ports: a fresh one per connection, cycling through 1,000.
static NEXT_PORT: AtomicU16 = AtomicU16::new(0);
const PORT_BASE: u16 = 20800;

fn ocfg(l: &Limits) -> OfedConfig {
    let mut c = loopback::config();
    krpc_rdma_scenarios::apply_limits!(l, c);
    c
}

/// The fixture's queue pair: an [`OfedQp`] (880 bytes) on the heap, so the suite's frames
/// (which hold a connection's two queue pairs) stay small.
pub struct KQp {
    inner: Boxed<OfedQp>,
}

impl KQp {
    /// `q` on the heap (fallibly; [`loopback::connect`]'s `keep`).
    fn keep(q: Result<OfedQp, OfedError>) -> Result<KQp, String> {
        match try_boxed_result("queue pair", q) {
            Ok(Ok(inner)) => Ok(KQp { inner }),
            Ok(Err(e)) => Err(format!("{e}")),
            Err(e) => Err(format!("{e}")),
        }
    }
}

impl Middleware for KQp {
    fn wrapped(&self) -> &impl krpc_rdma::provider::Provider {
        &*self.inner
    }
    fn wrapped_mut(&mut self) -> &mut impl krpc_rdma::provider::Provider {
        &mut *self.inner
    }
}

krpc_rdma::forward_provider!(middleware [] KQp);

impl Deref for KQp {
    type Target = OfedQp;
    fn deref(&self) -> &OfedQp {
        &self.inner
    }
}

impl DerefMut for KQp {
    fn deref_mut(&mut self) -> &mut OfedQp {
        &mut self.inner
    }
}

impl Borrow<OfedQp> for KQp {
    fn borrow(&self) -> &OfedQp {
        &self.inner
    }
}

impl BorrowMut<OfedQp> for KQp {
    fn borrow_mut(&mut self) -> &mut OfedQp {
        &mut self.inner
    }
}

/// The fixture (see the module documentation).
pub struct KVerbs {
    addr: [u8; 4],
    listener: Option<OfedListener>,
    sides: Vec<Arc<Counted>>,
    pages_left: u64,
    pages_allocated: u64,
}

impl KVerbs {
    fn sockaddr(&self) -> SockaddrIn {
        let n = NEXT_PORT.fetch_add(1, Ordering::Relaxed) % 1000;
        SockaddrIn::new(self.addr, PORT_BASE + n)
    }
}

/// Connection requests are looked for every 2 ms, at most this many times (30 s).
const ACCEPT_POLLS: u32 = 15_000;

impl Fixture for KVerbs {
    type Qp = KQp;

    fn page_providers(&mut self) -> Result<PagePair, String> {
        self.listener = None;
        retire(
            &mut self.sides,
            &mut self.pages_left,
            &mut self.pages_allocated,
        );
        counted_pair(
            || Ok(Arc::new(KernelPages::new()) as Arc<dyn mbuf::PageProvider>),
            &mut self.sides,
        )
    }

    fn resources(&self, limits: &Limits) -> Resources {
        ocfg(limits).resources()
    }

    fn connect(&mut self, c: Connect<'_, KQp>) -> Result<(KQp, KQp), String> {
        let cfg = ocfg(c.limits);
        let sa = self.sockaddr();
        // SAFETY: NULL net is &init_net in the Linux glue; `sa` is a valid sockaddr_in that
        // lives through the call; `upcall` only wakes the glue's wait queue (any context).
        let p = unsafe {
            loopback::connect(
                &GlueSleep,
                core::ptr::null_mut(),
                sa.as_ptr(),
                &cfg,
                c.a_private,
                c.b_private,
                c.before_accept,
                ACCEPT_POLLS,
                KQp::keep,
            )
        }?;
        self.listener = Some(p.listener);
        Ok((p.a, p.b))
    }

    /// Until one of the queue pairs has new completions or events, or 100 ms.
    fn wait(&mut self, a: &mut KQp, b: &mut KQp) {
        loopback::wait(&GlueSleep, a, b, 100);
    }

    fn idle_limit(&self) -> u32 {
        600
    }

    fn live_registrations(&self, q: &KQp) -> u32 {
        q.live_registrations()
    }

    fn sq_outstanding(&self, q: &KQp) -> usize {
        q.sq_outstanding()
    }

    fn is_connected(&self, q: &KQp) -> bool {
        q.is_connected()
    }

    fn healthy(&self, q: &KQp) -> Result<(), String> {
        let st = q.stats();
        (st.errors == 0)
            .then_some(())
            .ok_or(format!("error completions: {st:?}"))
    }

    fn down_cause(&self, q: &KQp) -> Option<String> {
        q.down_cause().map(|c| format!("{c:?}"))
    }

    /// Everything, [`Feature::RangeChecks`] included (FRWR MRs, see the module docs).
    fn supports(&self, _feature: Feature) -> bool {
        true
    }

    fn pages_in_use(&self) -> usize {
        self.sides.iter().map(|s| s.outstanding() as usize).sum()
    }

    fn audit(&mut self) -> Result<(), String> {
        self.listener = None;
        Ok(())
    }

    fn log(&mut self, line: &str) {
        note(false, line);
    }
}

/// What the kernel-verbs run did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The address connected to.
    pub addr: [u8; 4],
    /// The suite's counts.
    pub suite: SuiteCount,
    /// Bytes compared byte for byte by the own DDP checks.
    pub bytes_verified: u64,
    /// The C wrappers' counters over the run (the `*_live` fields: what is left after it).
    pub verbs: KrpcCounts,
    /// Pages allocated by the scenarios' page providers.
    pub pages_allocated: u64,
    /// Page references not returned (must be 0).
    pub pages_left: u64,
}

impl core::fmt::Display for Summary {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let [a, b, c, d] = self.addr;
        let v = &self.verbs;
        write!(
            f,
            "kernel verbs, rdma_cm loopback on {a}.{b}.{c}.{d}: {} + 1 MiB DDP WRITE/READ; \
             calls {}, replies {}, bytes verified {}; {}, page references {} (of {} pages \
             allocated)",
            self.suite,
            v.sends_active,
            v.sends_passive,
            self.bytes_verified,
            VerbsLine(v),
            self.pages_left,
            self.pages_allocated,
        )
    }
}

/// The C wrappers' counters of a run as a report shows them: "FRWR registrations
/// (IB_WR_REG_MR) …, LOCAL_INV …, send-with-invalidate sent … received …, MR resets …;
/// completions …; left after the run: cm ids …, pds …, cqs …, qps …, mrs …, dma maps …"
/// (the self-test's kernel-verbs line and the peer runs' lines).
pub(super) struct VerbsLine<'a>(pub &'a KrpcCounts);

impl core::fmt::Display for VerbsLine<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let v = self.0;
        let [cm_ids, pds, cqs, qps, mrs, dma_maps] = live(v);
        write!(
            f,
            "FRWR registrations (IB_WR_REG_MR) {}, LOCAL_INV {}, send-with-invalidate sent {} \
             received {}, MR resets {}; completions {}; left after the run: cm ids {cm_ids}, \
             pds {pds}, cqs {cqs}, qps {qps}, mrs {mrs}, dma maps {dma_maps}",
            v.reg_mrs, v.local_invs, v.send_invs, v.recv_invs, v.mr_resets, v.completions,
        )
    }
}

/// The run's outcome.
pub struct Run {
    /// Its figures.
    pub summary: Summary,
    /// Its first failure.
    pub failure: Option<Failure>,
}

/// The work counters of `after` minus those of `before`, with the live counts of `after`.
pub(super) fn delta(before: &KrpcCounts, after: &KrpcCounts) -> KrpcCounts {
    let d = |f: fn(&KrpcCounts) -> u64| f(after).wrapping_sub(f(before));
    KrpcCounts {
        reg_mrs: d(|c| c.reg_mrs),
        local_invs: d(|c| c.local_invs),
        send_invs: d(|c| c.send_invs),
        recv_invs: d(|c| c.recv_invs),
        sends_active: d(|c| c.sends_active),
        sends_passive: d(|c| c.sends_passive),
        completions: d(|c| c.completions),
        mr_resets: d(|c| c.mr_resets),
        ..*after
    }
}

/// The live counts of `v`: cm ids, pds, cqs, qps, mrs, dma maps.
fn live(v: &KrpcCounts) -> [u64; 6] {
    [
        v.cm_ids_live,
        v.pds_live,
        v.cqs_live,
        v.qps_live,
        v.mrs_live,
        v.dma_maps_live,
    ]
}

/// What is left after a run (the live counts of `v`, `pages` page references), as text, if
/// anything is.
pub(super) fn left_over(v: &KrpcCounts, pages: u64) -> Option<String> {
    let [cm_ids, pds, cqs, qps, mrs, dma_maps] = live(v);
    let left = [cm_ids, pds, cqs, qps, mrs, dma_maps, pages];
    left.iter()
        .any(|&n| n != 0)
        .then(|| format!("{left:?} (cm ids, pds, cqs, qps, mrs, dma maps, pages)"))
}

/// Run the suite over the kernel's verbs, connecting to `addr` (IPv4).
pub fn run(addr: [u8; 4]) -> Run {
    let before = counts();
    let mut fx = KVerbs {
        addr,
        listener: None,
        sides: Vec::new(),
        pages_left: 0,
        pages_allocated: 0,
    };
    let (suite, bytes_verified, mut failure) = run_suite(&mut fx, |_| None, note);
    fx.listener = None;
    retire(&mut fx.sides, &mut fx.pages_left, &mut fx.pages_allocated);
    let after = counts();
    let verbs = delta(&before, &after);
    if let (None, Some(left)) = (&failure, left_over(&verbs, fx.pages_left)) {
        failure = Some(fail(
            "end of the kernel-verbs run",
            "no verbs object or page reference left",
            left,
        ));
    }
    Run {
        summary: Summary {
            addr,
            suite,
            bytes_verified,
            verbs,
            pages_allocated: fx.pages_allocated,
            pages_left: fx.pages_left,
        },
        failure,
    }
}
