//! [`Fixture`]: what the suite needs from a provider to run its scenarios.

use alloc::string::String;
use alloc::sync::Arc;

use krpc_rdma::provider::{Provider, Resources};
use krpc_rdma::transport::TransportConfig;
use mbuf::PageProvider;

/// Provider limits a scenario asks for; `None` keeps the fixture's default. A fixture maps
/// them onto its own configuration (both queue pairs of a pair get the same limits).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Pre-registered send buffers.
    pub send_bufs: Option<u32>,
    /// Pre-registered receive buffers.
    pub recv_bufs: Option<u32>,
    /// Send-queue depth reported to the core.
    pub max_send_wr: Option<u32>,
    /// Registrations live at once.
    pub max_registrations: Option<u32>,
}

/// How to build a [`crate::Pair`]: each side's transport configuration and the provider
/// limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Setup {
    /// The requester's configuration.
    pub req: TransportConfig,
    /// The responder's configuration.
    pub resp: TransportConfig,
    /// Provider limits of both queue pairs.
    pub limits: Limits,
}

impl Setup {
    /// Both sides with `cfg`, default limits.
    pub fn both(cfg: TransportConfig) -> Setup {
        Setup {
            req: cfg,
            resp: cfg,
            limits: Limits::default(),
        }
    }
}

/// Optional provider features a scenario may depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// Send With Invalidate, both directions (posting it, and revoking on receipt).
    SendWithInvalidate,
    /// The device refuses an RDMA that reaches past the end of a registration. (rxe in Linux
    /// 6.1 checks a memory window's accesses against the memory region under it, not
    /// against the window's own bounds.)
    RangeChecks,
}

/// The page providers of the two sides of one connection: side A (requester, or the raw
/// peer) and side B (responder).
pub type PagePair = (Arc<dyn PageProvider>, Arc<dyn PageProvider>);

/// What [`Fixture::connect`] is asked for.
pub struct Connect<'a, Q> {
    /// The provider limits of both queue pairs.
    pub limits: &'a Limits,
    /// Side A's connection private data (RFC 8797).
    pub a_private: &'a [u8],
    /// Side B's connection private data.
    pub b_private: &'a [u8],
    /// Runs on side B's queue pair before it accepts (it posts receives).
    pub before_accept: &'a mut (dyn FnMut(&mut Q) + Send),
}

/// A provider under test: how to connect a pair of its queue pairs, how to wait for them,
/// and the probes the suite checks for leaks. One value serves one scenario at a time; it
/// may connect several pairs, one after the other (the previous pair is dropped first).
pub trait Fixture {
    /// The queue pair type (both sides).
    type Qp: Provider;

    /// Fresh page providers for the next connection (side A, side B). Their pages must be
    /// usable with the queue pairs [`Fixture::connect`] makes next, and
    /// [`Fixture::pages_in_use`] counts what these two hold.
    ///
    /// # Errors
    /// A description of what could not be created.
    fn page_providers(&mut self) -> Result<PagePair, String>;

    /// The resources each queue pair made with `limits` will report.
    fn resources(&self, limits: &Limits) -> Resources;

    /// Connect side A to side B over the page providers of the last
    /// [`Fixture::page_providers`] call (again over the same ones when called several times
    /// without a new `page_providers` call: a reconnection), as `c` says. Both queue pairs report
    /// `CmEvent::Established` from `poll_event`.
    ///
    /// # Errors
    /// A description of what failed.
    fn connect(&mut self, c: Connect<'_, Self::Qp>) -> Result<(Self::Qp, Self::Qp), String>;

    /// Block until one of the queue pairs has completions or connection events, or a short
    /// timeout passes. A no-op for a provider that completes work when it is posted.
    fn wait(&mut self, a: &mut Self::Qp, b: &mut Self::Qp);

    /// How many [`Fixture::wait`]s without any progress mean that a scenario hangs.
    fn idle_limit(&self) -> u32;

    /// Registrations of `q` not yet released.
    fn live_registrations(&self, q: &Self::Qp) -> u32;

    /// Work requests posted on `q` whose completion was not yet polled.
    fn sq_outstanding(&self, q: &Self::Qp) -> usize;

    /// Whether `q` is still connected.
    fn is_connected(&self, q: &Self::Qp) -> bool;

    /// Pages held by the page providers of the last connection (both sides), not counting
    /// what the fixture itself held before it made them. After the connection, its
    /// endpoints and every chain are dropped, this must be 0.
    fn pages_in_use(&self) -> usize;

    /// Provider-specific checks after a connection was torn down (double invalidations,
    /// bad page unrefs, …).
    ///
    /// # Errors
    /// A description of what is wrong.
    fn audit(&mut self) -> Result<(), String> {
        Ok(())
    }

    /// Provider-specific checks of a queue pair whose connection must still be healthy
    /// (no error completion so far).
    ///
    /// # Errors
    /// A description of what is wrong.
    fn healthy(&self, _q: &Self::Qp) -> Result<(), String> {
        Ok(())
    }

    /// Why `q`'s connection went down, as the provider saw it (for failure messages), or
    /// `None` while it is up or where the provider does not say.
    fn down_cause(&self, _q: &Self::Qp) -> Option<String> {
        None
    }

    /// Whether the provider supports `feature` (all do by default).
    fn supports(&self, _feature: Feature) -> bool {
        true
    }

    /// A known deviation of this provider from `scenario`, with the reason: the scenario is
    /// then expected to fail (its failure is logged), and passing is a failure — so the mark
    /// is removed once the provider is fixed. Only for deviations reported as bugs.
    fn known_deviation(&self, _scenario: &str) -> Option<&'static str> {
        None
    }

    /// How many calls the soak scenario makes (over several connection losses): large
    /// where connections are cheap, small where each costs a real connection setup.
    fn soak_calls(&self) -> u32 {
        200
    }

    /// A line of information for the log (figures of a run); ignored by default.
    fn log(&mut self, _line: &str) {}
}

/// What rxe (Soft-RoCE, Linux 6.1) supports: everything but [`Feature::RangeChecks`] (it
/// checks an access through a memory window against the region under it, not against the
/// window's bounds).
pub fn rxe_supports(feature: Feature) -> bool {
    feature != Feature::RangeChecks
}

/// The [`Fixture`] methods of a verbs binding whose queue pair has inherent
/// `live_registrations`, `sq_outstanding`, `is_connected` and `stats().errors`; logs to
/// standard output.
#[macro_export]
macro_rules! verbs_binding_probes {
    ($qp:ty) => {
        fn live_registrations(&self, q: &$qp) -> u32 {
            q.live_registrations()
        }
        fn sq_outstanding(&self, q: &$qp) -> usize {
            q.sq_outstanding()
        }
        fn is_connected(&self, q: &$qp) -> bool {
            q.is_connected()
        }
        fn healthy(&self, q: &$qp) -> Result<(), String> {
            let st = q.stats();
            (st.errors == 0)
                .then_some(())
                .ok_or(format!("error completions: {st:?}"))
        }
        fn down_cause(&self, q: &$qp) -> Option<String> {
            q.down_cause().map(|c| format!("{c:?}"))
        }
        fn supports(&self, feature: $crate::Feature) -> bool {
            $crate::fixture::rxe_supports(feature)
        }
        fn log(&mut self, line: &str) {
            println!("{line}");
        }
    };
}

/// Write each of the four [`Limits`] `$limits` sets into the place `$cfg`: a provider's
/// configuration or its `Resources`, whichever holds `send_bufs`, `recv_bufs`, `max_send_wr`
/// and `max_registrations` (all `u32`). How a fixture maps limits onto its provider.
#[macro_export]
macro_rules! apply_limits {
    ($limits:expr, $cfg:expr) => {{
        let l: &$crate::Limits = $limits;
        if let Some(v) = l.send_bufs {
            $cfg.send_bufs = v;
        }
        if let Some(v) = l.recv_bufs {
            $cfg.recv_bufs = v;
        }
        if let Some(v) = l.max_send_wr {
            $cfg.max_send_wr = v;
        }
        if let Some(v) = l.max_registrations {
            $cfg.max_registrations = v;
        }
    }};
}

/// The [`Fixture`] methods `pages_in_use` and `audit` of a fixture whose field `arenas`
/// holds the page arenas of the last connection (each with `in_use()` and `bad_unrefs()`).
#[macro_export]
macro_rules! arena_probes {
    () => {
        fn pages_in_use(&self) -> usize {
            self.arenas.iter().map(|a| a.in_use()).sum()
        }
        fn audit(&mut self) -> Result<(), String> {
            let bad: u64 = self.arenas.iter().map(|a| a.bad_unrefs()).sum();
            (bad == 0)
                .then_some(())
                .ok_or(format!("{bad} bad page unrefs"))
        }
    };
}

/// `$present` (whether an RDMA device is there), after saying "skipped: no RDMA device"
/// when it is not — and panicking instead when `KRPC_RDMA_REQUIRE_RDMA=1` (set for the runs
/// in the VM, so a VM whose rxe0 did not come up can never pass as "skipped"). For the std
/// instantiations over a real device.
#[macro_export]
macro_rules! rdma_present {
    ($present:expr) => {{
        let present: bool = $present;
        if !present {
            if ::std::env::var_os("KRPC_RDMA_REQUIRE_RDMA").is_some_and(|v| v == "1") {
                panic!("no RDMA device, and KRPC_RDMA_REQUIRE_RDMA=1");
            }
            println!("skipped: no RDMA device");
        }
        present
    }};
}
