//! The shim over a real RDMA device (Soft-RoCE `rxe0` in the project's VM), through the
//! userspace emulation of the OFED KPI (`--features emu`): `c/krpc_rdma_ofed.c`, compiled
//! unchanged against `ofed-testkit/emu/kpi_emu.h`, runs on libibverbs/librdmacm; `OfedQp` and
//! `KernelPages` are the shim's own. The provider-conformance suite (`krpc-rdma-scenarios`)
//! runs over it, one test per scenario, plus the shim's own FRWR checks.
//!
//! ```text
//! cargo test --release -p ofed-testkit --features emu --test emu_rxe --no-run
//! cargo xtask vm -- env KRPC_RDMA_REQUIRE_RDMA=1 cargo test --release -p ofed-testkit \
//!     --features emu --test emu_rxe -- --test-threads=1 --nocapture
//! ```
//!
//! Without an RDMA device every test prints "skipped: no RDMA device" and passes, unless
//! `KRPC_RDMA_REQUIRE_RDMA=1` (then it fails). The tests share one process-wide "kernel" (the
//! emulation's page arena, PD and CM thread): run them with `--test-threads=1`.
#![allow(clippy::unwrap_used)]

use std::ffi::c_void;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use krpc_rdma::provider::{Access, Provider, Resources, WcStatus};
use krpc_rdma::transport::TransportConfig;
use krpc_rdma_scenarios::{Connect, Fixture, Limits, Link, PagePair, Pair, Side};
use mbuf::{PageFragment, PageProvider};
use ofed_shim::{KernelPages, OfedConfig, OfedListener, OfedQp};
use ofed_testkit::emu_mbuf::emu_stats;
use ofed_testkit::loopback::{self, Sleep, SockaddrIn};

/// The fixture, or `None` (skip) without an RDMA device (see
/// [`krpc_rdma_scenarios::rdma_present`]).
fn emu() -> Option<Emu> {
    let dev = std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some());
    krpc_rdma_scenarios::rdma_present!(dev).then(|| Emu {
        listener: None,
        pages_before: emu_stats().pages_in_use,
    })
}

/// A fresh port per connection.
static NEXT_PORT: AtomicU16 = AtomicU16::new(20300);

fn sockaddr() -> SockaddrIn {
    let ip = std::env::var("RXE_IP").unwrap_or_else(|_| "10.0.2.15".into());
    let port = NEXT_PORT.fetch_add(1, Ordering::Relaxed);
    let a: SocketAddrV4 = format!("{ip}:{port}").parse().unwrap();
    SockaddrIn::new(a.ip().octets(), a.port())
}

// ---- waiting: the CQ completion handler / CM handler upcall wakes the test thread ---------

static GENERATION: AtomicU64 = AtomicU64::new(0);
static LOCK: Mutex<()> = Mutex::new(());
static WAKE: Condvar = Condvar::new();

extern "C" fn upcall(_arg: *mut c_void) {
    let _g = LOCK.lock().unwrap();
    GENERATION.fetch_add(1, Ordering::SeqCst);
    WAKE.notify_all();
}

/// Sleeping on the upcall's condition variable.
struct CondSleep;

impl Sleep for CondSleep {
    fn upcall(&self) -> extern "C" fn(*mut c_void) {
        upcall
    }
    fn generation(&self) -> u64 {
        GENERATION.load(Ordering::SeqCst)
    }
    fn sleep(&self, gen: u64, ms: u32) {
        let g = LOCK.lock().unwrap();
        let _ = WAKE
            .wait_timeout_while(g, Duration::from_millis(ms.into()), |_| {
                GENERATION.load(Ordering::SeqCst) == gen
            })
            .unwrap();
    }
}

fn ocfg(l: &Limits) -> OfedConfig {
    let mut c = loopback::config();
    krpc_rdma_scenarios::apply_limits!(l, c);
    c
}

struct Emu {
    listener: Option<OfedListener>,
    pages_before: u64,
}

impl Fixture for Emu {
    type Qp = OfedQp;

    fn page_providers(&mut self) -> Result<PagePair, String> {
        self.listener = None;
        self.pages_before = emu_stats().pages_in_use;
        Ok((Arc::new(KernelPages::new()), Arc::new(KernelPages::new())))
    }

    fn resources(&self, limits: &Limits) -> Resources {
        ocfg(limits).resources()
    }

    fn connect(&mut self, c: Connect<'_, OfedQp>) -> Result<(OfedQp, OfedQp), String> {
        let cfg = ocfg(c.limits);
        let sa = sockaddr();
        // SAFETY: NULL vnet (one stack in the emulation); `sa` is a valid sockaddr_in;
        // `upcall` only touches statics (callable from any thread at any time). 15,000 polls
        // of at most 2 ms: 30 s.
        let p = unsafe {
            loopback::connect(
                &CondSleep,
                std::ptr::null_mut(),
                sa.as_ptr(),
                &cfg,
                c.a_private,
                c.b_private,
                c.before_accept,
                15_000,
                |q| q.map_err(|e| format!("{e}")),
            )
        }?;
        self.listener = Some(p.listener);
        Ok((p.a, p.b))
    }

    /// Until one of the queue pairs has new completions or events, or 100 ms.
    fn wait(&mut self, a: &mut OfedQp, b: &mut OfedQp) {
        loopback::wait(&CondSleep, a, b, 100);
    }

    krpc_rdma_scenarios::verbs_binding_probes!(OfedQp);

    fn idle_limit(&self) -> u32 {
        600
    }

    fn pages_in_use(&self) -> usize {
        emu_stats().pages_in_use.saturating_sub(self.pages_before) as usize
    }

    fn audit(&mut self) -> Result<(), String> {
        self.listener = None;
        let st = emu_stats();
        (st.refused_double_inv == 0)
            .then_some(())
            .ok_or(format!("double invalidation attempted: {st:?}"))
    }
}

krpc_rdma_scenarios::scenario_tests!(emu());

/// The FRWR work behind RPCs: a REG_MR per registration, the peer's Send With Invalidate
/// seen by the emulation, and `release` of a live registration revoking it synchronously.
#[test]
fn frwr_registrations_invalidations_and_sync_revokes() {
    let Some(mut fx) = emu() else { return };
    let before = emu_stats();
    let mut p = Pair::with(&mut fx, TransportConfig::default()).unwrap();
    let iters = 2;
    p.write_rpcs(iters).unwrap();
    let after = emu_stats();
    println!("client {:?}\nemulation {after:?}", p.l.a.stats());
    assert!(p.l.a.stats().maps >= u64::from(iters));
    assert!(after.reg_mr_binds - before.reg_mr_binds >= u64::from(iters));
    assert!(
        after.remote_invs_seen - before.remote_invs_seen >= u64::from(iters),
        "Send With Invalidate seen"
    );
    p.release_revokes(|q| q.stats().sync_revokes).unwrap();
    p.finish().unwrap();
}

/// Pages that are not contiguous in the emulation's "physical" (= virtual) space: the
/// emulated `ib_map_mr_sg` maps only the contiguous prefix, and the shim must register the
/// rest with another MR (`nmapped < n`), advertise both segments, and revoke both.
#[test]
fn discontiguous_pages_take_two_mrs() {
    let Some(mut fx) = emu() else { return };
    let (mut l, _) = Link::raw(&mut fx, &Limits::default(), &[], &[]).unwrap();
    let before = emu_stats();
    let pc: Arc<dyn PageProvider> = l.pa.clone();
    let a = pc.alloc_page().unwrap();
    let hole = pc.alloc_page().unwrap();
    let b = pc.alloc_page().unwrap();
    assert_ne!(b, a + 4096, "pages must be discontiguous");
    for (p, v) in [(a, 0x11u8), (b, 0x22u8)] {
        pc.with_page_mut(p, &mut |pg| pg.fill(v)).unwrap();
    }
    let frags = [
        PageFragment {
            addr: a,
            offset: 0,
            len: 4096,
        },
        PageFragment {
            addr: b,
            offset: 0,
            len: 100,
        },
    ];
    let reg = l.a.register(&frags, Access::REMOTE_READ).unwrap();
    println!("segments over two discontiguous pages: {:x?}", reg.segments);
    assert_eq!(reg.segments.len(), 2, "one MR per contiguous run");
    assert_eq!(reg.segments[0].length, 4096);
    assert_eq!(reg.segments[1].length, 100);
    assert!(emu_stats().partial_maps > before.partial_maps);
    for s in &reg.segments {
        assert_eq!(
            l.probe_read(Side::B, s.handle, s.offset, s.length as usize)
                .unwrap(),
            WcStatus::Success
        );
    }
    let invs = emu_stats().local_invs;
    l.a.release(reg.id).unwrap();
    assert_eq!(l.a.live_registrations(), 0);
    assert_eq!(emu_stats().local_invs - invs, 2, "both MRs invalidated");
    // The remainder's MR (the second segment) is refused now. (One probe only: the refused
    // Read breaks the connection.)
    let s = reg.segments[1];
    assert_eq!(
        l.probe_read(Side::B, s.handle, s.offset, 16).unwrap(),
        WcStatus::RemoteAccess
    );
    for p in [a, hole, b] {
        pc.page_unref(p);
    }
    l.finish().unwrap();
}

/// FreeBSD-shaped NFS messages (emulated `struct mbuf`, M_EXTPG) through the mbuf bridge.
/// What the krpc-face tests share (CLNT_* of the emulation, the NFS client and its reply
/// provisioning, NFSv3 arguments and results, the leak checks).
#[path = "emu_rxe/clnt.rs"]
mod clnt;

#[path = "emu_rxe/mbuf_face.rs"]
mod mbuf_face;

/// `clnt_rdma`: a `CLIENT *` called through its `struct clnt_ops` table.
#[path = "emu_rxe/clnt_ops.rs"]
mod clnt_ops;

/// The backchannel (RFC 8167) through the krpc face: `clnt_rdma`'s reverse slots and
/// backchannel SVCXPRT, `clnt_rdma_bck` on `svc_rdma`.
#[path = "emu_rxe/backchannel.rs"]
mod backchannel;
/// `clnt_rdma` against Linux knfsd (NFSv3 over its RPC-over-RDMA listener, in the VM).
#[path = "emu_rxe/clnt_knfsd.rs"]
mod clnt_knfsd;
/// `svc_rdma_listen` (the rendezvous transport), `clnt_rdma_connect` and
/// `clnt_rdma_reconnect_create` (connections made from C, and made again).
#[path = "emu_rxe/connect.rs"]
mod connect;
/// The stock-NFS mode of `svc_rdma` and `clnt_rdma` (FreeBSD 14.2's NFS: plain mbufs, no
/// DDP marker in its READ replies).
#[path = "emu_rxe/stock.rs"]
mod stock;
/// `svc_rdma`: an `SVCXPRT *` driven through its `struct xp_ops` table.
#[path = "emu_rxe/svc_ops.rs"]
mod svc_ops;
