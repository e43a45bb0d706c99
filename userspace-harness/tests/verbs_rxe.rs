//! The verbs provider over a real RDMA device (Soft-RoCE `rxe0` in the project's VM): the
//! provider-conformance suite (`krpc-rdma-scenarios`), one test per scenario, plus the
//! verbs-only checks. `cargo xtask vm -- cargo test -p userspace-harness --test verbs_rxe --
//! --nocapture --test-threads=1`. Without an RDMA device every test prints "skipped: no RDMA
//! device" and passes.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use userspace_harness::verbs;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use krpc_rdma::provider::{Access, Completion, Provider, Resources, SendOp, SendWr, WcStatus};
use krpc_rdma::transport::{ReplySpec, TransportConfig};
use krpc_rdma_scenarios::data::{pattern, write_call, xdr_call};
use krpc_rdma_scenarios::{Connect, Fixture, Limits, PagePair, Pair, Setup};
use mbuf::{Chain, PageFragment, PageProvider, PAGE_SIZE};

use verbs::arena::VerbsArena;
use verbs::cm::{connect, VerbsListener};
use verbs::device::Device;
use verbs::qp::VerbsQp;
use verbs::{RegMode, VerbsConfig};

/// The fixture with `cfg`, or `None` (skip) without an RDMA device (see
/// [`krpc_rdma_scenarios::rdma_present`]).
fn verbs_with(cfg: VerbsConfig) -> Option<Verbs> {
    krpc_rdma_scenarios::rdma_present!(verbs::rdma_present()).then(|| Verbs {
        cfg,
        arenas: Vec::new(),
    })
}

fn addr(port: u16) -> SocketAddr {
    let ip = std::env::var("RXE_IP").unwrap_or_else(|_| "10.0.2.15".into());
    format!("{ip}:{port}").parse().unwrap()
}

/// A fresh port per connection.
static NEXT_PORT: AtomicU16 = AtomicU16::new(20100);

/// Verbs queue pairs over two registered arenas.
struct Verbs {
    cfg: VerbsConfig,
    arenas: Vec<Arc<VerbsArena>>,
}

impl Verbs {
    fn config(&self, l: &Limits) -> VerbsConfig {
        let mut c = self.cfg.clone();
        krpc_rdma_scenarios::apply_limits!(l, c.resources);
        c
    }
}

impl Fixture for Verbs {
    type Qp = VerbsQp;

    fn page_providers(&mut self) -> Result<PagePair, String> {
        let dev = Device::open(None).map_err(|e| e.to_string())?;
        let a = VerbsArena::new(&dev, 4096).map_err(|e| e.to_string())?;
        let b = VerbsArena::new(&dev, 4096).map_err(|e| e.to_string())?;
        self.arenas = vec![a.clone(), b.clone()];
        Ok((a, b))
    }

    fn resources(&self, limits: &Limits) -> Resources {
        self.config(limits).resources()
    }

    fn connect(&mut self, c: Connect<'_, VerbsQp>) -> Result<(VerbsQp, VerbsQp), String> {
        let cfg = self.config(c.limits);
        let at = addr(NEXT_PORT.fetch_add(1, Ordering::Relaxed));
        let mut l = VerbsListener::bind(&self.arenas[1], at).map_err(|e| e.to_string())?;
        std::thread::scope(|s| {
            let server = s.spawn(|| l.accept_with(c.b_private, &cfg, |q| (c.before_accept)(q)));
            let qa = connect(&self.arenas[0], at, c.a_private, &cfg);
            let qb = server
                .join()
                .map_err(|_| "accepting thread panicked".to_string())?;
            Ok((
                qa.map_err(|e| e.to_string())?,
                qb.map_err(|e| e.to_string())?,
            ))
        })
    }

    fn wait(&mut self, a: &mut VerbsQp, b: &mut VerbsQp) {
        // Only new completions or events end the wait early, as in emu_rxe: a side's unread
        // backlog would otherwise spend the idle budget in milliseconds.
        verbs::wait::wait_for_news(&mut [a, b], Duration::from_millis(100));
    }

    krpc_rdma_scenarios::verbs_binding_probes!(VerbsQp);

    fn idle_limit(&self) -> u32 {
        600
    }

    /// Each connection costs a real connection setup in a TCG guest: a short soak.
    fn soak_calls(&self) -> u32 {
        200
    }

    krpc_rdma_scenarios::arena_probes!();
}

krpc_rdma_scenarios::scenario_tests!(verbs_with(VerbsConfig::default()));

/// The memory windows behind RPCs: a bind per registration, and `release` of a live
/// registration revoking it synchronously.
#[test]
fn memory_window_binds_and_sync_revokes() {
    let Some(mut fx) = verbs_with(VerbsConfig::default()) else {
        return;
    };
    let mut p = Pair::with(&mut fx, TransportConfig::default()).unwrap();
    p.write_rpcs(2).unwrap();
    println!("client {:?}\nserver {:?}", p.l.a.stats(), p.l.b.stats());
    assert!(p.l.a.stats().maps >= 2);
    p.release_revokes(|q| q.stats().sync_revokes).unwrap();
    p.finish().unwrap();
}

/// Register one run of `pages` pages, Local-Invalidate it (posted, completion awaited),
/// release: `n` times. Returns microseconds per cycle.
fn reg_cycle_cost(qp: &mut VerbsQp, p: &Arc<dyn PageProvider>, pages: usize, n: u32) -> f64 {
    let chain = Chain::alloc_pages(p, pages * 4096).unwrap();
    let frags: Vec<PageFragment> = chain.page_fragments_in(0..pages * 4096).unwrap().collect();
    let mut wcs = [Completion::EMPTY; 16];
    let t = Instant::now();
    for i in 0..n {
        let reg = qp
            .register(&frags, Access::REMOTE_READ | Access::REMOTE_WRITE)
            .unwrap();
        assert_eq!(reg.segments.len(), 1, "one contiguous run");
        qp.post_send(&[SendWr {
            wr_id: u64::from(i),
            op: SendOp::LocalInv { reg: reg.id },
            signaled: true,
        }])
        .unwrap();
        loop {
            let k = qp.poll_cq(&mut wcs);
            if let Some(c) = wcs[..k].iter().find(|c| c.wr_id == u64::from(i)) {
                assert_eq!(c.status, WcStatus::Success);
                break;
            }
        }
        qp.release(reg.id).unwrap();
    }
    t.elapsed().as_secs_f64() * 1e6 / f64::from(n)
}

#[test]
fn registration_cost_mw_vs_mr() {
    let Some(mut fx) = verbs_with(VerbsConfig::default()) else {
        return;
    };
    let n = 1000;
    let mut p = Pair::with(&mut fx, TransportConfig::default()).unwrap();
    let pc = p.l.pa.clone();
    let mw1 = reg_cycle_cost(&mut p.l.a, &pc, 1, n);
    let mw64 = reg_cycle_cost(&mut p.l.a, &pc, 64, n);
    println!("client stats (MW): {:?}", p.l.a.stats());
    p.check_clean("MW").unwrap();
    p.finish().unwrap();
    let Some(mut fx) = verbs_with(VerbsConfig {
        reg_mode: RegMode::MemoryRegion,
        ..VerbsConfig::default()
    }) else {
        return;
    };
    let req = TransportConfig {
        accept_remote_invalidate: false,
        ..TransportConfig::default()
    };
    let mut p = Pair::new(
        &mut fx,
        &Setup {
            req,
            resp: req,
            ..Setup::default()
        },
    )
    .unwrap();
    let pc = p.l.pa.clone();
    let mr1 = reg_cycle_cost(&mut p.l.a, &pc, 1, n);
    let mr64 = reg_cycle_cost(&mut p.l.a, &pc, 64, n);
    println!(
        "register + invalidate + release, {n} cycles each (TCG, indicative):\n  \
         memory window: 4 KiB {mw1:.1} us/op, 256 KiB {mw64:.1} us/op\n  \
         per-RPC MR:    4 KiB {mr1:.1} us/op, 256 KiB {mr64:.1} us/op"
    );
    // The MR mode also carries RPCs end to end.
    let call = write_call(&p.l.pa, 77, &pattern(300_000, 7)).unwrap();
    let expect = call.to_vec().unwrap();
    p.rpc(call, ReplySpec::inline(128), &mut |c| {
        assert_eq!(c.call.to_vec().unwrap(), expect);
        Ok(xdr_call(c.xid, b"ok").unwrap())
    })
    .unwrap();
    p.check_clean("MR").unwrap();
    p.finish().unwrap();
}

#[test]
fn refused_connection_is_a_typed_error() {
    if verbs_with(VerbsConfig::default()).is_none() {
        return;
    }
    let dev = Device::open(None).unwrap();
    let arena = VerbsArena::new(&dev, 16).unwrap();
    let cfg = VerbsConfig {
        timeout_ms: 2000,
        ..VerbsConfig::default()
    };
    let e = connect(&arena, addr(20199), &[0u8; 8], &cfg).unwrap_err();
    println!("connect to a port nobody listens on: {e}");
    assert!(matches!(
        e,
        verbs::VerbsError::Refused(_) | verbs::VerbsError::Unreachable(_)
    ));
}

/// `VerbsArena::read_pages_from` / `write_pages_to` (the NFS client's file I/O without a
/// userspace copy): a file read into page fragments at odd offsets and lengths lands there
/// byte for byte, and written out again gives the same bytes; fragments outside allocated
/// pages are refused.
#[test]
fn arena_file_io_through_page_fragments() {
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::os::fd::AsFd;
    if verbs_with(VerbsConfig::default()).is_none() {
        return;
    }
    let dev = Device::open(None).unwrap();
    let arena = VerbsArena::new(&dev, 64).unwrap();
    let data = pattern(3 * PAGE_SIZE + 1000, 9);
    let dir = std::env::temp_dir().join(format!("arena-io-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("src");
    std::fs::write(&src, &data).unwrap();
    let pages: Vec<u64> = (0..4).map(|_| arena.alloc_page().unwrap()).collect();
    let frags = vec![
        PageFragment {
            addr: pages[0],
            offset: 100,
            len: PAGE_SIZE - 100,
        },
        PageFragment {
            addr: pages[1],
            offset: 0,
            len: PAGE_SIZE,
        },
        PageFragment {
            addr: pages[2],
            offset: 7,
            len: 2000,
        },
        PageFragment {
            addr: pages[3],
            offset: 0,
            len: data.len() - (PAGE_SIZE - 100) - PAGE_SIZE - 2000,
        },
    ];
    let f = std::fs::File::open(&src).unwrap();
    assert_eq!(
        arena.read_pages_from(f.as_fd(), &frags).unwrap(),
        data.len()
    );
    let mut at = 0;
    for fr in &frags {
        let mut got = vec![0u8; fr.len];
        arena.read_page(fr.addr, fr.offset, &mut got).unwrap();
        assert_eq!(got, data[at..at + fr.len]);
        at += fr.len;
    }
    // At end of file: fewer bytes, no error.
    assert_eq!(arena.read_pages_from(f.as_fd(), &frags).unwrap(), 0);
    let mut out = std::fs::File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join("out"))
        .unwrap();
    out.write_all(b"head").unwrap();
    assert_eq!(
        arena.write_pages_to(out.as_fd(), &frags).unwrap(),
        data.len()
    );
    out.seek(SeekFrom::Start(0)).unwrap();
    let mut back = Vec::new();
    out.read_to_end(&mut back).unwrap();
    assert_eq!(&back[..4], b"head");
    assert_eq!(back[4..], data[..]);
    // A page not allocated, and a range past the page: refused.
    arena.page_unref(pages[3]);
    assert!(arena.write_pages_to(out.as_fd(), &frags).is_err());
    let past = [PageFragment {
        addr: pages[0],
        offset: 4000,
        len: 200,
    }];
    assert!(arena.read_pages_from(f.as_fd(), &past).is_err());
    for p in &pages[..3] {
        arena.page_unref(*p);
    }
    assert_eq!(arena.in_use(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}
