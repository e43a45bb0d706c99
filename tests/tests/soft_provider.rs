//! Tests of the software RC provider (`krpc_rdma::soft`) and its fault injector.
// clippy.toml exempts `#[test]` bodies only; the helpers here are test code too.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use std::sync::Arc;

use krpc_rdma::provider::{
    Access, CmEvent, Completion, Provider, ProviderError, Registration, Resources, SendOp, SendWr,
    WcKind, WcStatus,
};
use krpc_rdma::soft::{
    pair, CorruptSend, FaultConfig, FaultInjector, SoftConfig, SoftQp, MAX_SOFT_REGISTRATIONS,
};
use krpc_rdma_scenarios::data::pattern;
use krpc_rdma_scenarios::wr::{local_inv, rdma_read, rdma_write, send_inv, send_wr};
use mbuf::{Chain, HeapPageArena, PageFragment, PageProvider, PAGE_SIZE};

struct Net {
    a: SoftQp,
    b: SoftQp,
    arena_a: Arc<HeapPageArena>,
    arena_b: Arc<HeapPageArena>,
}

impl Net {
    fn pages_a(&self) -> Arc<dyn PageProvider> {
        self.arena_a.clone()
    }
    fn pages_b(&self) -> Arc<dyn PageProvider> {
        self.arena_b.clone()
    }
}

fn net_with(cfg_a: SoftConfig, cfg_b: SoftConfig) -> Net {
    let arena_a = Arc::new(HeapPageArena::with_base(64, 0x1_0000_0000).unwrap());
    let arena_b = Arc::new(HeapPageArena::with_base(64, 0x2_0000_0000).unwrap());
    let (a, b) = pair(cfg_a, arena_a.clone(), cfg_b, arena_b.clone()).unwrap();
    Net {
        a,
        b,
        arena_a,
        arena_b,
    }
}

fn net() -> Net {
    net_with(SoftConfig::default(), SoftConfig::default())
}

fn poll_all<P: Provider>(qp: &mut P) -> Vec<Completion> {
    let mut out = Vec::new();
    let mut buf = [Completion::EMPTY; 4];
    loop {
        let n = qp.poll_cq(&mut buf);
        out.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            return out;
        }
    }
}

/// Write `bytes` into send buffer `buf` and post one signaled Send.
fn send_bytes<P: Provider>(qp: &mut P, wr_id: u64, buf: u32, bytes: &[u8]) {
    qp.send_buf(buf).unwrap()[..bytes.len()].copy_from_slice(bytes);
    qp.post_send(&[send_wr(wr_id, buf, bytes.len() as u32)])
        .unwrap();
}

/// A chain of fresh (zeroed) pages holding `len` bytes.
fn page_chain(pages: &Arc<dyn PageProvider>, len: usize) -> Chain {
    Chain::alloc_pages(pages, len).unwrap()
}

fn frags(chain: &Chain, range: std::ops::Range<usize>) -> Vec<PageFragment> {
    chain.page_fragments_in(range).unwrap().collect()
}

fn register(qp: &mut SoftQp, f: &[PageFragment], access: Access) -> Registration {
    qp.register(f, access).unwrap()
}

/// A fresh page of `pages`, registered whole at `qp`: the page (keep it) and its registration.
fn registered_page(
    qp: &mut SoftQp,
    pages: &Arc<dyn PageProvider>,
    access: Access,
) -> (Chain, Registration) {
    let page = page_chain(pages, PAGE_SIZE);
    let reg = register(qp, &frags(&page, 0..PAGE_SIZE), access);
    (page, reg)
}

/// Both sides saw exactly one `Disconnected` (after `Established`).
fn assert_disconnected(n: &mut Net) {
    for qp in [&mut n.a, &mut n.b] {
        assert!(matches!(qp.poll_event(), Some(CmEvent::Established { .. })));
        assert_eq!(qp.poll_event(), Some(CmEvent::Disconnected));
        assert_eq!(qp.poll_event(), None);
        assert!(!qp.is_connected());
        assert_eq!(
            qp.post_send(&[send_wr(9, 0, 1)]),
            Err(ProviderError::NotConnected)
        );
        assert_eq!(qp.post_recv(&[63]), Err(ProviderError::NotConnected));
    }
}

fn statuses(wcs: &[Completion]) -> Vec<WcStatus> {
    wcs.iter().map(|c| c.status).collect()
}

// ---------------------------------------------------------------- connection and Send

#[test]
fn send_without_posted_receive_is_rnr_and_breaks_the_connection() {
    let mut n = net();
    n.a.post_recv(&[0, 1]).unwrap();
    send_bytes(&mut n.a, 7, 0, b"x");
    let wcs = poll_all(&mut n.a);
    // The Send's RNR completion first, then our own posted receives, flushed.
    assert_eq!(wcs[0].wr_id, 7);
    assert_eq!(wcs[0].status, WcStatus::RnrRetryExceeded);
    let flushed: Vec<_> = wcs[1..].iter().map(|c| (c.kind, c.status)).collect();
    assert_eq!(
        flushed,
        vec![
            (WcKind::Recv { buf: 0 }, WcStatus::Flushed),
            (WcKind::Recv { buf: 1 }, WcStatus::Flushed)
        ]
    );
    assert!(poll_all(&mut n.b).is_empty());
    assert_disconnected(&mut n);
    // Flushed buffers came back.
    assert!(n.a.recv_buf(0).is_ok());
}

#[test]
fn oversize_send_fails_at_both_ends_and_breaks() {
    let cb = SoftConfig::with(Resources {
        recv_buf_size: 1024,
        ..Resources::default()
    });
    let mut n = net_with(SoftConfig::default(), cb);
    n.b.post_recv(&[0, 1]).unwrap();
    send_bytes(&mut n.a, 1, 0, &pattern(1025, 0));
    let a = poll_all(&mut n.a);
    assert_eq!(statuses(&a), vec![WcStatus::Other]);
    let b = poll_all(&mut n.b);
    assert_eq!(b.len(), 2);
    assert_eq!(
        (b[0].kind, b[0].status),
        (WcKind::Recv { buf: 0 }, WcStatus::LocalError)
    );
    assert_eq!(
        (b[1].kind, b[1].status),
        (WcKind::Recv { buf: 1 }, WcStatus::Flushed)
    );
    assert_disconnected(&mut n);
}

#[test]
fn exactly_receive_sized_send_fits() {
    let cb = SoftConfig::with(Resources {
        recv_buf_size: 1024,
        ..Resources::default()
    });
    let mut n = net_with(SoftConfig::default(), cb);
    n.b.post_recv(&[0]).unwrap();
    send_bytes(&mut n.a, 1, 0, &pattern(1024, 4));
    assert_eq!(poll_all(&mut n.b)[0].byte_len, 1024);
    assert!(n.a.is_connected());
}

#[test]
fn send_length_and_buffer_id_are_checked_at_post() {
    let mut n = net();
    n.b.post_recv(&[0]).unwrap();
    assert_eq!(
        n.a.post_send(&[send_wr(1, 64, 1)]),
        Err(ProviderError::BadId)
    );
    assert_eq!(
        n.a.post_send(&[send_wr(1, 0, 4097)]),
        Err(ProviderError::BadFragments)
    );
    assert!(poll_all(&mut n.a).is_empty());
    assert_eq!(n.b.posted_recvs(), 1);
}

#[test]
fn gathered_send_from_an_unmappable_page_is_a_local_error() {
    let mut n = net();
    n.b.post_recv(&[0]).unwrap();
    let bogus = [PageFragment {
        addr: 0x7_0000_0000,
        offset: 0,
        len: 10,
    }];
    n.a.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::SendGather {
            buf: 0,
            len: 0,
            pages: &bogus,
            invalidate: None,
        },
        signaled: false,
    }])
    .unwrap();
    assert_eq!(statuses(&poll_all(&mut n.a)), vec![WcStatus::LocalError]);
    // The receive was not consumed: it flushes.
    let b = poll_all(&mut n.b);
    assert_eq!(statuses(&b), vec![WcStatus::Flushed]);
    assert_disconnected(&mut n);
}

// ---------------------------------------------------------------- RDMA

/// Post one RDMA op that must fail with `RemoteAccess` and break the connection.
fn expect_remote_access(n: &mut Net, wr: SendWr<'_>) {
    n.b.post_recv(&[0]).unwrap();
    n.a.post_send(&[wr]).unwrap();
    assert_eq!(statuses(&poll_all(&mut n.a)), vec![WcStatus::RemoteAccess]);
    assert_eq!(statuses(&poll_all(&mut n.b)), vec![WcStatus::Flushed]);
    assert_disconnected(n);
}

#[test]
fn out_of_range_offsets_are_refused() {
    let mut n = net();
    let (pa, pb) = (n.pages_a(), n.pages_b());
    let target = page_chain(&pb, PAGE_SIZE);
    let reg = register(&mut n.b, &frags(&target, 100..1100), Access::REMOTE_READ);
    let seg = reg.segments[0];
    assert_eq!(seg.length, 1000);
    let h = seg.handle;
    for (off, len) in [
        (seg.offset - 1, 10),
        (seg.offset + 991, 10),
        (seg.offset + 1000, 1),
        (seg.offset - 100, 1),
        (u64::MAX, 2),
        (0, 1),
    ] {
        assert_eq!(
            n.a.probe_remote_read(h, off, len),
            Err(WcStatus::RemoteAccess),
            "{off:#x}+{len}"
        );
    }
    assert_eq!(n.a.probe_remote_read(h, seg.offset + 990, 10), Ok(()));
    // Probes never break the connection; a real read past the end does.
    assert!(n.a.is_connected());
    let sink = page_chain(&pa, PAGE_SIZE);
    let kf = frags(&sink, 0..11);
    expect_remote_access(&mut n, rdma_read(1, &kf, h, seg.offset + 990));
}

#[test]
fn unknown_handle_and_the_other_sides_handle_are_refused() {
    let mut n = net();
    let (pa, pb) = (n.pages_a(), n.pages_b());
    let (_mine, ra) = registered_page(&mut n.a, &pa, Access::REMOTE_READ);
    let (_theirs, rb) = registered_page(&mut n.b, &pb, Access::REMOTE_READ);
    let (sa, sb) = (ra.segments[0], rb.segments[0]);
    assert_ne!(sa.handle, sb.handle);
    // A's own handle means nothing at B.
    assert_eq!(
        n.a.probe_remote_read(sa.handle, sa.offset, 1),
        Err(WcStatus::RemoteAccess)
    );
    assert_eq!(n.a.probe_remote_read(sb.handle, sb.offset, 1), Ok(()));
    assert_eq!(n.b.probe_remote_read(sa.handle, sa.offset, 1), Ok(()));
    assert_eq!(
        n.a.probe_remote_read(sb.handle ^ 1, sb.offset, 1),
        Err(WcStatus::RemoteAccess)
    );
    let sink = page_chain(&pa, PAGE_SIZE);
    let kf = frags(&sink, 0..1);
    expect_remote_access(&mut n, rdma_read(1, &kf, 0xdead_beef, 0));
}

#[test]
fn handles_of_a_reused_slot_do_not_repeat_for_256_registrations() {
    let cb = SoftConfig::with(Resources {
        max_registrations: 1,
        ..Resources::default()
    });
    let mut n = net_with(SoftConfig::default(), cb);
    let pb = n.pages_b();
    let target = page_chain(&pb, PAGE_SIZE);
    let f = frags(&target, 0..PAGE_SIZE);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..256 {
        let reg = register(&mut n.b, &f, Access::REMOTE_READ);
        assert!(seen.insert(reg.segments[0].handle));
        assert_eq!(reg.id.0, reg.segments[0].handle);
        n.b.release(reg.id).unwrap();
    }
    assert_eq!(n.b.stats().registrations, 256);
    assert_eq!(n.b.stats().releases, 256);
}

#[test]
fn send_with_invalidate_revokes_the_receivers_handle() {
    let mut n = net();
    let pb = n.pages_b();
    let (_target, reg) = registered_page(&mut n.b, &pb, Access::REMOTE_WRITE);
    let seg = reg.segments[0];
    n.b.post_recv(&[4, 5]).unwrap();
    n.a.send_buf(0).unwrap()[..3].copy_from_slice(b"inv");
    n.a.post_send(&[send_inv(1, 0, 3, Some(seg.handle))])
        .unwrap();
    assert_eq!(statuses(&poll_all(&mut n.a)), vec![WcStatus::Success]);
    let got = poll_all(&mut n.b);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status, WcStatus::Success);
    assert_eq!(got[0].invalidated, Some(seg.handle));
    assert_eq!(got[0].byte_len, 3);
    assert_eq!(&n.b.recv_buf(4).unwrap()[..3], b"inv");
    assert_eq!(n.b.stats().remote_invs, 1);
    assert_eq!(
        n.a.probe_remote_write(seg.handle, seg.offset, 1),
        Err(WcStatus::RemoteAccess)
    );
    // LocalInv of a remotely invalidated registration: fine.
    n.b.post_send(&[local_inv(2, reg.id, true)]).unwrap();
    assert_eq!(statuses(&poll_all(&mut n.b)), vec![WcStatus::Success]);

    // Invalidating it again (now stale) is a remote error: receive consumed, connection down.
    n.a.post_send(&[send_inv(3, 0, 3, Some(seg.handle))])
        .unwrap();
    assert_eq!(statuses(&poll_all(&mut n.a)), vec![WcStatus::RemoteAccess]);
    let b = poll_all(&mut n.b);
    assert_eq!(b.len(), 1);
    assert_eq!(
        (b[0].kind, b[0].status, b[0].invalidated),
        (WcKind::Recv { buf: 5 }, WcStatus::LocalError, None)
    );
    assert_disconnected(&mut n);
    n.b.release(reg.id).unwrap();
}

// ---------------------------------------------------------------- registration rules

#[test]
fn frwr_fragment_rules() {
    let mut n = net();
    let pa = n.pages_a();
    let c = page_chain(&pa, 3 * PAGE_SIZE);
    let p: Vec<u64> = frags(&c, 0..3 * PAGE_SIZE).iter().map(|f| f.addr).collect();
    let fr = |i: usize, offset: usize, len: usize| PageFragment {
        addr: p[i],
        offset,
        len,
    };
    let rw = Access::REMOTE_READ | Access::REMOTE_WRITE;
    // Good: first starts anywhere, middle full, last ends anywhere.
    let ok = [fr(0, 10, PAGE_SIZE - 10), fr(1, 0, PAGE_SIZE), fr(2, 0, 5)];
    let reg = n.a.register(&ok, rw).unwrap();
    assert_eq!(reg.segments.len(), 1);
    assert_eq!(reg.segments[0].length as usize, 2 * PAGE_SIZE - 10 + 5);
    n.a.release(reg.id).unwrap();
    // A single fragment inside one page.
    let reg = n.a.register(&[fr(1, 100, 200)], rw).unwrap();
    assert_eq!(reg.segments[0].length, 200);
    n.a.release(reg.id).unwrap();
    let bad: [&[PageFragment]; 7] = [
        &[],
        // a middle fragment that does not start at 0
        &[fr(0, 0, PAGE_SIZE), fr(1, 1, PAGE_SIZE - 1), fr(2, 0, 5)],
        // a first fragment that does not reach the page end
        &[fr(0, 0, 100), fr(1, 0, 100)],
        // a last fragment that does not start at 0
        &[fr(0, 0, PAGE_SIZE), fr(1, 8, 100)],
        // outside the page
        &[fr(0, 4000, 200)],
        // empty fragment
        &[fr(0, 0, 0)],
        // unknown page
        &[PageFragment {
            addr: 0x9_0000_0000,
            offset: 0,
            len: 1,
        }],
    ];
    for f in bad {
        assert_eq!(
            n.a.register(f, rw),
            Err(ProviderError::BadFragments),
            "{f:?}"
        );
    }
    assert_eq!(n.a.live_registrations(), 0);
    drop(c);
    assert_eq!(n.arena_a.in_use(), 0);
}

#[test]
fn too_many_registrations_in_the_config_is_refused() {
    let cfg = SoftConfig::with(Resources {
        max_registrations: MAX_SOFT_REGISTRATIONS + 1,
        ..Resources::default()
    });
    let arena: Arc<dyn PageProvider> = Arc::new(HeapPageArena::new(1).unwrap());
    assert_eq!(
        pair(cfg, arena.clone(), SoftConfig::default(), arena).err(),
        Some(ProviderError::NoMemory)
    );
}

#[test]
fn registrations_hold_page_references_until_released() {
    let mut n = net();
    let pb = n.pages_b();
    let target = page_chain(&pb, 2 * PAGE_SIZE);
    let f = frags(&target, 0..2 * PAGE_SIZE);
    // Two registrations of the same pages, and one listing the same page twice.
    let r1 = register(&mut n.b, &f, Access::REMOTE_READ);
    let r2 = register(&mut n.b, &f, Access::REMOTE_WRITE);
    let same_page_twice = [
        PageFragment {
            addr: f[0].addr,
            offset: 0,
            len: PAGE_SIZE,
        },
        PageFragment {
            addr: f[0].addr,
            offset: 0,
            len: 10,
        },
    ];
    let r3 = register(&mut n.b, &same_page_twice, Access::REMOTE_READ);
    assert_eq!(n.arena_b.refcount(f[0].addr), Some(4));
    assert_eq!(n.arena_b.refcount(f[1].addr), Some(3));
    // The chain goes away: the pages stay alive for the peer.
    drop(target);
    assert_eq!(n.arena_b.in_use(), 2);
    assert_eq!(n.arena_b.refcount(f[0].addr), Some(3));
    // The peer can still read them.
    let pa = n.pages_a();
    let sink = page_chain(&pa, PAGE_SIZE);
    let kf = frags(&sink, 0..PAGE_SIZE);
    let s = r1.segments[0];
    n.a.post_send(&[rdma_read(1, &kf, s.handle, s.offset + 10)])
        .unwrap();
    assert_eq!(statuses(&poll_all(&mut n.a)), vec![WcStatus::Success]);
    for r in [&r1, &r2, &r3] {
        n.b.release(r.id).unwrap();
    }
    assert_eq!(n.arena_b.in_use(), 0);
    assert_eq!(n.arena_b.bad_unrefs(), 0);
    drop(sink);
    assert_eq!(n.arena_a.in_use(), 0);
}

// ---------------------------------------------------------------- queue depth and chains

#[test]
fn send_queue_depth_is_busy_until_completions_are_polled() {
    let ca = SoftConfig::with(Resources {
        max_send_wr: 4,
        ..Resources::default()
    });
    let mut n = net_with(ca, SoftConfig::default());
    n.b.post_recv(&(0..10).collect::<Vec<_>>()).unwrap();
    let chain: Vec<_> = (0..4).map(|i| send_wr(i, 0, 8)).collect();
    n.a.post_send(&chain).unwrap();
    assert_eq!(n.a.send_queue_used(), 4);
    assert_eq!(n.a.post_send(&[send_wr(9, 0, 8)]), Err(ProviderError::Busy));
    // Busy posted nothing.
    assert_eq!(n.b.stats().recvs, 4);
    let mut one = [Completion::EMPTY];
    assert_eq!(n.a.poll_cq(&mut one), 1);
    assert_eq!(n.a.send_queue_used(), 3);
    // A chain of two does not fit in one free slot: all or nothing.
    assert_eq!(
        n.a.post_send(&[send_wr(10, 0, 8), send_wr(11, 0, 8)]),
        Err(ProviderError::Busy)
    );
    assert_eq!(n.b.stats().recvs, 4);
    n.a.post_send(&[send_wr(12, 0, 8)]).unwrap();
    assert_eq!(poll_all(&mut n.a).len(), 4);
    assert_eq!(n.a.send_queue_used(), 0);
    // Unsignaled successful requests never occupy the queue (default model).
    let unsig: Vec<_> = (0..4)
        .map(|i| SendWr {
            signaled: false,
            ..send_wr(20 + i, 0, 8)
        })
        .collect();
    n.a.post_send(&unsig).unwrap();
    assert_eq!(n.a.send_queue_used(), 0);
    assert!(poll_all(&mut n.a).is_empty());
    assert_eq!(n.b.stats().recvs, 9);
    // A chain longer than the queue can never be posted.
    let five: Vec<_> = (0..5).map(|i| send_wr(30 + i, 0, 8)).collect();
    assert_eq!(n.a.post_send(&five), Err(ProviderError::Busy));
}

#[test]
fn strict_send_queue_counts_unsignaled_until_a_later_completion_is_polled() {
    let ca = SoftConfig::with(Resources {
        max_send_wr: 4,
        ..Resources::default()
    });
    let mut n = net_with(ca, SoftConfig::default());
    n.a.set_strict_send_queue(true);
    n.b.post_recv(&(0..10).collect::<Vec<_>>()).unwrap();
    let unsig = |i| SendWr {
        signaled: false,
        ..send_wr(i, 0, 8)
    };
    n.a.post_send(&[unsig(1), unsig(2), unsig(3)]).unwrap();
    assert_eq!(n.a.send_queue_used(), 3);
    assert!(poll_all(&mut n.a).is_empty());
    assert_eq!(
        n.a.post_send(&[unsig(4), unsig(5)]),
        Err(ProviderError::Busy)
    );
    n.a.post_send(&[send_wr(6, 0, 8)]).unwrap();
    assert_eq!(n.a.send_queue_used(), 4);
    let wcs = poll_all(&mut n.a);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].wr_id, 6);
    assert_eq!(n.a.send_queue_used(), 0);
}

#[test]
fn unmappable_local_fragment_is_a_local_error() {
    let mut n = net();
    let pb = n.pages_b();
    let (_target, reg) = registered_page(&mut n.b, &pb, Access::REMOTE_READ);
    let s = reg.segments[0];
    let bogus = [PageFragment {
        addr: 0x1_0000_0000 + 63 * PAGE_SIZE as u64, // A's arena, but a free page
        offset: 0,
        len: 16,
    }];
    n.a.post_send(&[rdma_read(1, &bogus, s.handle, s.offset)])
        .unwrap();
    assert_eq!(statuses(&poll_all(&mut n.a)), vec![WcStatus::LocalError]);
    assert_disconnected(&mut n);
}

#[test]
fn zero_length_rdma_still_checks_the_handle() {
    let mut n = net();
    let pb = n.pages_b();
    let (_target, reg) = registered_page(&mut n.b, &pb, Access::REMOTE_WRITE);
    let s = reg.segments[0];
    n.a.post_send(&[rdma_write(1, &[], s.handle, s.offset)])
        .unwrap();
    assert_eq!(statuses(&poll_all(&mut n.a)), vec![WcStatus::Success]);
    expect_remote_access(&mut n, rdma_write(2, &[], s.handle ^ 0xff, s.offset));
}

// ---------------------------------------------------------------- disconnect

// ---------------------------------------------------------------- fault injection

struct Faulty {
    a: FaultInjector<SoftQp>,
    b: SoftQp,
    pa: Arc<dyn PageProvider>,
    pb: Arc<dyn PageProvider>,
}

fn faulty(config: FaultConfig) -> Faulty {
    let n = net();
    let (pa, pb) = (n.pages_a(), n.pages_b());
    let (a, b) = pair(
        SoftConfig::default(),
        pa.clone(),
        SoftConfig::default(),
        pb.clone(),
    )
    .unwrap();
    Faulty {
        a: FaultInjector::new(a, config),
        b,
        pa,
        pb,
    }
}

fn ids_and_statuses(wcs: &[Completion]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|c| (c.wr_id, c.status)).collect()
}

#[test]
fn fault_disconnect_after_n_work_requests() {
    let Faulty { mut a, mut b, .. } = faulty(FaultConfig {
        disconnect_after_wrs: Some(3),
        ..FaultConfig::default()
    });
    b.post_recv(&[0, 1, 2, 3, 4]).unwrap();
    a.post_send(&[send_wr(1, 0, 1), send_wr(2, 0, 1)]).unwrap();
    a.post_send(&[send_wr(3, 0, 1), send_wr(4, 0, 1), send_wr(5, 0, 1)])
        .unwrap();
    assert_eq!(
        ids_and_statuses(&poll_all(&mut a)),
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success),
            (4, WcStatus::Flushed),
            (5, WcStatus::Flushed)
        ]
    );
    assert_eq!(
        statuses(&poll_all(&mut b)),
        vec![
            WcStatus::Success,
            WcStatus::Success,
            WcStatus::Success,
            WcStatus::Flushed,
            WcStatus::Flushed
        ]
    );
    assert!(matches!(a.poll_event(), Some(CmEvent::Established { .. })));
    assert_eq!(a.poll_event(), Some(CmEvent::Disconnected));
    assert!(matches!(b.poll_event(), Some(CmEvent::Established { .. })));
    assert_eq!(b.poll_event(), Some(CmEvent::Disconnected));
    assert_eq!(
        a.post_send(&[send_wr(6, 0, 1)]),
        Err(ProviderError::NotConnected)
    );
    assert_eq!(a.stats().disconnects, 1);
    assert_eq!(a.stats().wrs, 5);
    assert_eq!(a.stats().sends, 5);
}

#[test]
fn fault_disconnect_exactly_at_a_chain_boundary() {
    let Faulty { mut a, mut b, .. } = faulty(FaultConfig {
        disconnect_after_wrs: Some(2),
        ..FaultConfig::default()
    });
    b.post_recv(&[0, 1, 2]).unwrap();
    a.post_send(&[send_wr(1, 0, 1), send_wr(2, 0, 1)]).unwrap();
    assert_eq!(
        statuses(&poll_all(&mut a)),
        vec![WcStatus::Success, WcStatus::Success]
    );
    assert!(!a.inner().is_connected());
    assert_eq!(
        statuses(&poll_all(&mut b)),
        vec![WcStatus::Success, WcStatus::Success, WcStatus::Flushed]
    );
}

#[test]
fn fault_refused_chains_do_not_count() {
    let Faulty { mut a, mut b, .. } = faulty(FaultConfig {
        disconnect_at_send: Some(1),
        ..FaultConfig::default()
    });
    b.post_recv(&[0]).unwrap();
    assert_eq!(a.post_send(&[send_wr(1, 99, 1)]), Err(ProviderError::BadId));
    assert!(a.inner().is_connected());
    assert_eq!(a.stats().sends, 0);
    assert_eq!(a.stats().disconnects, 0);
    a.post_send(&[send_wr(2, 0, 1)]).unwrap();
    assert_eq!(statuses(&poll_all(&mut a)), vec![WcStatus::Flushed]);
    assert_eq!(statuses(&poll_all(&mut b)), vec![WcStatus::Flushed]);
}

#[test]
fn fault_disconnect_at_nth_rdma_write_and_read() {
    for write in [true, false] {
        let cfg = if write {
            FaultConfig {
                disconnect_at_write: Some(2),
                ..FaultConfig::default()
            }
        } else {
            FaultConfig {
                disconnect_at_read: Some(2),
                ..FaultConfig::default()
            }
        };
        let Faulty {
            mut a,
            mut b,
            pa,
            pb,
        } = faulty(cfg);
        let (_target, reg) =
            registered_page(&mut b, &pb, Access::REMOTE_READ | Access::REMOTE_WRITE);
        let s = reg.segments[0];
        let local = page_chain(&pa, PAGE_SIZE);
        let lf = frags(&local, 0..64);
        let op = |id| {
            if write {
                rdma_write(id, &lf, s.handle, s.offset)
            } else {
                rdma_read(id, &lf, s.handle, s.offset)
            }
        };
        // The other kind does not count.
        let other = if write {
            rdma_read(9, &lf, s.handle, s.offset)
        } else {
            rdma_write(9, &lf, s.handle, s.offset)
        };
        a.post_send(&[op(1), other, other]).unwrap();
        a.post_send(&[op(2), op(3)]).unwrap();
        assert_eq!(
            ids_and_statuses(&poll_all(&mut a)),
            vec![
                (1, WcStatus::Success),
                (9, WcStatus::Success),
                (9, WcStatus::Success),
                (2, WcStatus::Flushed),
                (3, WcStatus::Flushed)
            ],
            "write={write}"
        );
        b.release(reg.id).unwrap();
    }
}

#[test]
fn fault_dropped_send_never_arrives_and_breaks_with_retry_exceeded() {
    let Faulty { mut a, mut b, .. } = faulty(FaultConfig {
        drop_send: Some(2),
        ..FaultConfig::default()
    });
    b.post_recv(&[0, 1, 2]).unwrap();
    send_bytes(&mut a, 1, 0, b"one");
    a.post_send(&[send_wr(2, 0, 3), send_wr(3, 0, 3)]).unwrap();
    assert_eq!(
        ids_and_statuses(&poll_all(&mut a)),
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::TransportRetryExceeded),
            (3, WcStatus::Flushed)
        ]
    );
    let got = poll_all(&mut b);
    assert_eq!(
        got.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        vec![
            (0, WcStatus::Success),
            (1, WcStatus::Flushed),
            (2, WcStatus::Flushed)
        ]
    );
    assert_eq!(a.stats().drops, 1);
    assert_eq!(a.inner().stats().dropped_sends, 1);
    assert_eq!(b.stats().recvs, 1);
    assert!(!b.is_connected());
}

#[test]
fn fault_corrupted_send_flips_one_byte() {
    let Faulty { mut a, mut b, .. } = faulty(FaultConfig {
        corrupt_send: Some(CorruptSend {
            nth: 2,
            offset: 5,
            xor: 0x80,
        }),
        ..FaultConfig::default()
    });
    b.post_recv(&[0, 1, 2]).unwrap();
    let msg = pattern(64, 3);
    for i in 0..3 {
        send_bytes(&mut a, i, 0, &msg);
    }
    assert_eq!(statuses(&poll_all(&mut a)), vec![WcStatus::Success; 3]);
    assert_eq!(poll_all(&mut b).len(), 3);
    let mut corrupted = msg.clone();
    corrupted[5] ^= 0x80;
    assert_eq!(&b.recv_buf(0).unwrap()[..64], &msg[..]);
    assert_eq!(&b.recv_buf(1).unwrap()[..64], &corrupted[..]);
    assert_eq!(&b.recv_buf(2).unwrap()[..64], &msg[..]);
    assert_eq!(a.stats().corruptions, 1);
    assert_eq!(a.inner().stats().corrupted_sends, 1);
    assert!(b.is_connected());
}

#[test]
fn corrupt_next_send_hook() {
    let mut n = net();
    n.b.post_recv(&[0, 1, 2]).unwrap();
    n.a.corrupt_next_send(0, 0xff);
    send_bytes(&mut n.a, 1, 0, b"abc");
    // Past the end of the message: no effect, but consumed.
    n.a.corrupt_next_send(3, 0xff);
    send_bytes(&mut n.a, 2, 0, b"abc");
    send_bytes(&mut n.a, 3, 0, b"abc");
    assert_eq!(poll_all(&mut n.b).len(), 3);
    assert_eq!(&n.b.recv_buf(0).unwrap()[..3], &[!b'a', b'b', b'c']);
    assert_eq!(&n.b.recv_buf(1).unwrap()[..3], b"abc");
    assert_eq!(&n.b.recv_buf(2).unwrap()[..3], b"abc");
    assert_eq!(n.a.stats().corrupted_sends, 1);
}

#[test]
fn fault_flush_at_poll_and_flush_now() {
    let Faulty { mut a, mut b, .. } = faulty(FaultConfig {
        flush_at_poll: Some(2),
        ..FaultConfig::default()
    });
    a.post_recv(&[0, 1]).unwrap();
    b.post_recv(&[0]).unwrap();
    send_bytes(&mut a, 1, 0, b"x");
    // First poll: normal.
    assert_eq!(
        ids_and_statuses(&poll_all_once(&mut a)),
        vec![(1, WcStatus::Success)]
    );
    // Second poll: the connection breaks first.
    assert_eq!(
        statuses(&poll_all_once(&mut a)),
        vec![WcStatus::Flushed, WcStatus::Flushed]
    );
    assert_eq!(a.stats().flushes, 1);
    assert!(!b.is_connected());
    assert_eq!(statuses(&poll_all(&mut b)), vec![WcStatus::Success]);

    let Faulty { mut a, mut b, .. } = faulty(FaultConfig::default());
    b.post_recv(&[7]).unwrap();
    a.flush_now();
    assert_eq!(statuses(&poll_all(&mut b)), vec![WcStatus::Flushed]);
    assert_eq!(a.post_recv(&[0]), Err(ProviderError::NotConnected));
    assert_eq!(a.stats().flushes, 1);
}

/// One `poll_cq` call with room for 16.
fn poll_all_once<P: Provider>(qp: &mut P) -> Vec<Completion> {
    let mut buf = [Completion::EMPTY; 16];
    let n = qp.poll_cq(&mut buf);
    buf[..n].to_vec()
}

#[test]
fn fault_injector_passes_everything_else_through() {
    let Faulty {
        mut a, mut b, pa, ..
    } = faulty(FaultConfig::default());
    assert_eq!(a.resources(), SoftConfig::default().resources());
    assert!(matches!(a.poll_event(), Some(CmEvent::Established { .. })));
    let c = page_chain(&pa, PAGE_SIZE);
    let reg = a.register(&frags(&c, 0..100), Access::REMOTE_READ).unwrap();
    assert_eq!(
        b.probe_remote_read(reg.segments[0].handle, reg.segments[0].offset, 100),
        Ok(())
    );
    a.release(reg.id).unwrap();
    b.post_recv(&[0]).unwrap();
    send_bytes(&mut a, 1, 0, b"ok");
    assert_eq!(&b.recv_buf(0).err(), &Some(ProviderError::BadId));
    assert_eq!(poll_all(&mut b).len(), 1);
    assert_eq!(&b.recv_buf(0).unwrap()[..2], b"ok");
    assert_eq!(a.config(), FaultConfig::default());
    let inner = a.into_inner();
    assert!(inner.is_connected());
}

// ---------------------------------------------------------------- property

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]

    /// RDMA Write then Read of arbitrary ranges, at arbitrary in-page offsets on both sides,
    /// matches a byte model of the registered memory; nothing outside the range changes.
    #[test]
    fn rdma_round_trips_match_a_model(
        reg_start in 0usize..PAGE_SIZE,
        reg_len in 1usize..3 * PAGE_SIZE,
        rel in 0usize..3 * PAGE_SIZE,
        len in 0usize..3 * PAGE_SIZE,
        src_off in 0usize..PAGE_SIZE,
        sink_off in 0usize..PAGE_SIZE,
        seed in 0u8..255,
    ) {
        let rel = rel % reg_len;
        let len = len % (reg_len - rel + 1);
        let mut n = net();
        let (pa, pb) = (n.pages_a(), n.pages_b());
        let target = page_chain(&pb, 4 * PAGE_SIZE);
        let reg = register(
            &mut n.b,
            &frags(&target, reg_start..reg_start + reg_len),
            Access::REMOTE_READ | Access::REMOTE_WRITE,
        );
        let s = reg.segments[0];
        proptest::prop_assert_eq!(s.length as usize, reg_len);
        let mut src = page_chain(&pa, 4 * PAGE_SIZE);
        let bytes = pattern(len, seed);
        src.copyback(src_off, &bytes).unwrap();
        let sf = frags(&src, src_off..src_off + len);
        let sink = page_chain(&pa, 4 * PAGE_SIZE);
        let kf = frags(&sink, sink_off..sink_off + len);
        n.a.post_send(&[
            rdma_write(1, &sf, s.handle, s.offset + rel as u64),
            rdma_read(2, &kf, s.handle, s.offset + rel as u64),
        ])
        .unwrap();
        proptest::prop_assert_eq!(
            statuses(&poll_all(&mut n.a)),
            vec![WcStatus::Success, WcStatus::Success]
        );
        let mut model = vec![0u8; 4 * PAGE_SIZE];
        model[reg_start + rel..reg_start + rel + len].copy_from_slice(&bytes);
        proptest::prop_assert_eq!(target.to_vec().unwrap(), model);
        let mut back = vec![0u8; len];
        sink.copydata(sink_off, &mut back).unwrap();
        proptest::prop_assert_eq!(back, bytes);
        n.b.release(reg.id).unwrap();
        drop((target, src, sink));
        proptest::prop_assert_eq!(n.arena_a.in_use(), 0);
        proptest::prop_assert_eq!(n.arena_b.in_use(), 0);
    }
}

#[test]
fn queue_pairs_can_move_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SoftQp>();
    assert_send_sync::<FaultInjector<SoftQp>>();
    let mut n = net();
    n.b.post_recv(&[0]).unwrap();
    let Net { mut a, mut b, .. } = n;
    let t = std::thread::spawn(move || {
        send_bytes(&mut a, 1, 0, b"thread");
        a
    });
    let _a = t.join().unwrap();
    assert_eq!(poll_all(&mut b)[0].byte_len, 6);
}

/// The soft provider's own counters and exact private data (the contract itself runs in
/// `krpc-rdma-scenarios` for every provider: `tests/tests/scenarios_soft.rs`).
#[test]
fn soft_counters_and_exact_private_data() {
    let mut ca = SoftConfig::default();
    ca.private_data.extend_from_slice(&[1, 2, 3]).unwrap();
    let mut cb = SoftConfig::default();
    cb.private_data.extend_from_slice(&[9; 56]).unwrap();
    let mut n = net_with(ca.clone(), cb.clone());
    let pd = |p: &SoftConfig| {
        Some(CmEvent::Established {
            private_data: p.private_data.clone(),
        })
    };
    assert_eq!(n.a.poll_event(), pd(&cb));
    assert_eq!(n.b.poll_event(), pd(&ca));
    assert_eq!(n.a.poll_event(), None);
    assert_eq!(n.a.resources(), ca.resources());
    assert_eq!(
        (n.a.resources().send_bufs, n.a.resources().recv_buf_size),
        (64, 4096)
    );
    // Sends.
    n.b.post_recv(&[5, 2, 7]).unwrap();
    assert_eq!(n.b.posted_recvs(), 3);
    for (i, len) in [100, 4096, 1].into_iter().enumerate() {
        send_bytes(&mut n.a, i as u64, i as u32, &pattern(len, 1));
    }
    assert_eq!(poll_all(&mut n.a).len(), 3);
    assert_eq!(poll_all(&mut n.b).len(), 3);
    assert_eq!(
        (n.a.stats().sends, n.a.stats().send_bytes),
        (3, 100 + 4096 + 1)
    );
    assert_eq!(n.b.stats().recvs, 3);
    // RDMA Write and Read.
    let (pa, pb) = (n.pages_a(), n.pages_b());
    let target = page_chain(&pb, 2 * PAGE_SIZE);
    let reg = register(
        &mut n.b,
        &frags(&target, 0..2 * PAGE_SIZE),
        Access::REMOTE_READ | Access::REMOTE_WRITE,
    );
    let s = reg.segments[0];
    let src = page_chain(&pa, 2 * PAGE_SIZE);
    let sf = frags(&src, 123..5123);
    n.a.post_send(&[rdma_write(1, &sf, s.handle, s.offset)])
        .unwrap();
    let kf = frags(&src, 0..2 * PAGE_SIZE);
    n.a.post_send(&[rdma_read(2, &kf, s.handle, s.offset)])
        .unwrap();
    assert_eq!(statuses(&poll_all(&mut n.a)), vec![WcStatus::Success; 2]);
    let st = n.a.stats();
    assert_eq!((st.rdma_writes, st.rdma_write_bytes), (1, 5000));
    assert_eq!(
        (st.rdma_reads, st.rdma_read_bytes),
        (1, 2 * PAGE_SIZE as u64)
    );
    // Local Invalidates, then a disconnect's flushes.
    n.b.post_send(&[local_inv(1, reg.id, false), local_inv(2, reg.id, true)])
        .unwrap();
    assert_eq!(poll_all(&mut n.b).len(), 2);
    assert_eq!(n.b.stats().local_invs, 2);
    n.a.post_recv(&[1, 2]).unwrap();
    n.b.disconnect();
    assert_eq!(statuses(&poll_all(&mut n.a)), vec![WcStatus::Flushed; 2]);
    assert_eq!((n.a.stats().flushed, n.a.stats().error_completions), (2, 0));
    n.b.release(reg.id).unwrap();
}
