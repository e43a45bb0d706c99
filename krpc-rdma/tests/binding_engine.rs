//! The shared verbs-binding logic (`krpc_rdma::provider::binding`) over a scripted backend:
//! what every binding (ofed-shim, userspace-harness) relies on, tested without hardware.
//! The mock backend models an RC send queue: a signaled work request completes, unsignaled
//! ones before it are retired by that completion.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::Arc;

use krpc_rdma::provider::binding::runs::RunRule;
use krpc_rdma::provider::binding::{
    Backend, Binding, CmPoll, Invalidation, Layout, Mapped, Posted, RawCm, RawInv, RawWc, Sge, Wr,
    WrOp,
};
use krpc_rdma::provider::{
    Access, CmEvent, Completion, LocalFragment, Provider, ProviderError, RegId, Resources, SendOp,
    SendWr, WcKind, WcStatus,
};
use mbuf::{HeapPageArena, PageProvider, PAGE_SIZE};

// ---- a counting allocator, per thread ------------------------------------------------------

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a thread-local `Cell` (no
// allocation, no reentrancy).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: AllocLayout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: AllocLayout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: AllocLayout, n: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

// ---- the scripted backend --------------------------------------------------------------------

const BUFS: u32 = 8;

struct Mock {
    pages: Arc<HeapPageArena>,
    send: Vec<Vec<u8>>,
    recv: Vec<Vec<u8>>,
    /// Every work request posted (send queue), in order.
    log: Vec<Wr>,
    /// Completions the "hardware" will deliver.
    cq: VecDeque<RawWc>,
    cm: VecDeque<RawCm>,
    /// Complete signaled work requests as they are posted.
    auto: bool,
    /// The next post fails after this many work requests.
    fail_after: Option<usize>,
    /// SGEs one map covers at most.
    map_max: usize,
    next_rkey: u32,
    revoked: Vec<u32>,
    unmapped: Vec<u32>,
    disconnects: u32,
    /// Pages in use when `shutdown` ran (they must still be referenced then).
    in_use_at_shutdown: Arc<std::sync::Mutex<Option<usize>>>,
    keys_survive_revoke: bool,
}

impl Mock {
    fn new(pages: &Arc<HeapPageArena>) -> Mock {
        Mock {
            pages: Arc::clone(pages),
            send: (0..BUFS).map(|_| vec![0; 256]).collect(),
            recv: (0..BUFS).map(|_| vec![0; 256]).collect(),
            log: Vec::with_capacity(4096),
            cq: VecDeque::with_capacity(4096),
            cm: VecDeque::with_capacity(8),
            auto: true,
            fail_after: None,
            map_max: usize::MAX,
            next_rkey: 0x100,
            revoked: Vec::with_capacity(4096),
            unmapped: Vec::with_capacity(4096),
            disconnects: 0,
            in_use_at_shutdown: Arc::default(),
            keys_survive_revoke: true,
        }
    }
}

impl Backend for Mock {
    type Pages = HeapPageArena;

    fn pages(&self) -> &HeapPageArena {
        &self.pages
    }
    fn send_buf(&mut self, buf: u32) -> Option<&mut [u8]> {
        self.send.get_mut(buf as usize).map(Vec::as_mut_slice)
    }
    fn recv_buf(&self, buf: u32) -> Option<&[u8]> {
        self.recv.get(buf as usize).map(Vec::as_slice)
    }
    fn send_sge(&self, buf: u32, len: u32) -> Option<Sge> {
        (buf < BUFS && len <= 256).then_some(Sge {
            addr: 0x10_0000 + u64::from(buf) * 256,
            length: len,
            lkey: 1,
        })
    }
    fn recv_sge(&self, buf: u32) -> Option<Sge> {
        (buf < BUFS).then_some(Sge {
            addr: 0x20_0000 + u64::from(buf) * 256,
            length: 256,
            lkey: 1,
        })
    }
    fn frag_sge(&self, f: &LocalFragment) -> Option<Sge> {
        (f.len > 0 && f.offset + f.len <= PAGE_SIZE && f.addr % PAGE_SIZE as u64 == 0).then_some(
            Sge {
                addr: f.addr + f.offset as u64,
                length: f.len as u32,
                lkey: 2,
            },
        )
    }
    fn post_send(&mut self, wrs: &[Wr], sges: &[Sge]) -> Posted {
        let n = match self.fail_after.take() {
            Some(k) => k.min(wrs.len()),
            None => wrs.len(),
        };
        for w in &wrs[..n] {
            assert!(w.sge_first as usize + w.num_sge as usize <= sges.len());
            self.log.push(*w);
            if self.auto && w.signaled {
                self.cq.push_back(RawWc {
                    wr_id: w.wr_id,
                    ..RawWc::EMPTY
                });
            }
        }
        Posted {
            count: n,
            ok: n == wrs.len(),
        }
    }
    fn post_recv(&mut self, wr_ids: &[u64], _sges: &[Sge]) -> Posted {
        Posted {
            count: wr_ids.len(),
            ok: true,
        }
    }
    fn poll_cq(&mut self, out: &mut [RawWc]) -> Option<usize> {
        let mut n = 0;
        for o in out.iter_mut() {
            let Some(wc) = self.cq.pop_front() else { break };
            *o = wc;
            n += 1;
        }
        Some(n)
    }
    fn poll_cm(&mut self, _why: CmPoll) -> Option<RawCm> {
        self.cm.pop_front()
    }
    fn disconnect(&mut self) {
        self.disconnects += 1;
    }
    fn key_create(&mut self, _key: u32) -> Result<u32, ProviderError> {
        self.next_rkey += 0x100;
        Ok(self.next_rkey)
    }
    fn map(
        &mut self,
        _key: u32,
        rkey: u32,
        run: &[Sge],
        _access: Access,
        wr_id: u64,
    ) -> Result<Mapped, ProviderError> {
        let took = run.len().min(self.map_max);
        self.log.push(Wr {
            wr_id,
            op: WrOp::LocalInv { rkey: 0 }, // stands for the map request in the log
            signaled: false,
            sge_first: 0,
            num_sge: 0,
        });
        Ok(Mapped {
            rkey: (rkey & !0xff) | ((rkey + 1) & 0xff),
            iova: run[0].addr,
            length: run[..took].iter().map(|s| s.length).sum(),
            consumed: took,
            posted: true,
        })
    }
    fn revoke(&mut self, key: u32) -> Option<u32> {
        self.revoked.push(key);
        self.next_rkey += 0x100;
        self.keys_survive_revoke.then_some(self.next_rkey)
    }
    fn unmap(&mut self, key: u32) {
        self.unmapped.push(key);
    }
    fn release_wait(&mut self, iteration: u32) -> bool {
        iteration < 100
    }
    fn shutdown(&mut self, connected: bool) {
        if connected {
            self.disconnects += 1;
        }
        *self.in_use_at_shutdown.lock().unwrap() = Some(self.pages.in_use());
    }
}

fn layout(inv: Invalidation) -> Layout {
    Layout {
        res: Resources {
            send_bufs: BUFS,
            recv_bufs: BUFS,
            send_buf_size: 256,
            recv_buf_size: 256,
            max_send_wr: 8,
            max_sge: 4,
            max_registrations: 4,
            max_rd_atomic: 4,
        },
        sq_depth: 12,
        keys: 8,
        keys_present: true,
        rule: RunRule::Frwr { max_pages: 4 },
        invalidation: inv,
        map_uses_sq: true,
    }
}

fn up(pages: &Arc<HeapPageArena>) -> Binding<Mock> {
    let mut b = Binding::new(Mock::new(pages), layout(Invalidation::WorkRequest)).unwrap();
    b.established(&[1, 2, 3]);
    assert!(
        matches!(b.poll_event(), Some(CmEvent::Established { private_data }) if private_data[..] == [1, 2, 3])
    );
    b
}

fn arena() -> Arc<HeapPageArena> {
    Arc::new(HeapPageArena::new(64).unwrap())
}

fn page(a: &HeapPageArena) -> u64 {
    a.alloc_page().unwrap()
}

fn frag(addr: u64, offset: usize, len: usize) -> LocalFragment {
    LocalFragment { addr, offset, len }
}

/// A Send of `len` bytes of send buffer `buf`.
fn send_wr(wr_id: u64, buf: u32, len: u32, signaled: bool) -> SendWr<'static> {
    SendWr {
        wr_id,
        op: SendOp::Send {
            buf,
            len,
            invalidate: None,
        },
        signaled,
    }
}

/// A Send of 10 bytes of send buffer 0.
fn send(wr_id: u64, signaled: bool) -> SendWr<'static> {
    send_wr(wr_id, 0, 10, signaled)
}

/// A signaled Local Invalidate of registration `reg`.
fn local_inv(wr_id: u64, reg: RegId) -> SendWr<'static> {
    SendWr {
        wr_id,
        op: SendOp::LocalInv { reg },
        signaled: true,
    }
}

/// The hardware's completion of a Receive into receive buffer `buf`.
fn recv_wc(buf: u64, byte_len: u32) -> RawWc {
    RawWc {
        wr_id: (1 << 63) | buf,
        byte_len,
        ..RawWc::EMPTY
    }
}

/// Drop the test's own reference to each of `pages`.
fn unref(a: &HeapPageArena, pages: &[u64]) {
    for &p in pages {
        a.page_unref(p);
    }
}

fn poll_all(b: &mut Binding<Mock>) -> Vec<Completion> {
    let mut out = [Completion::EMPTY; 16];
    let n = b.poll_cq(&mut out);
    out[..n].to_vec()
}

#[test]
fn a_chain_that_does_not_fit_posts_nothing() {
    let a = arena();
    let mut b = up(&a);
    let chain: Vec<_> = (0..9).map(|i| send(i, false)).collect();
    assert_eq!(b.post_send(&chain), Err(ProviderError::Busy));
    assert!(b.backend().log.is_empty());
    assert_eq!(b.stats().busy, 1);
    assert_eq!(b.sq_outstanding(), 0);
}

#[test]
fn one_completion_retires_the_unsignaled_requests_before_it() {
    let a = arena();
    let mut b = up(&a);
    b.post_send(&[send(7, false), send(8, false), send(9, true)])
        .unwrap();
    assert_eq!(b.sq_outstanding(), 3);
    let c = poll_all(&mut b);
    assert_eq!(c.len(), 1, "only the signaled request reports");
    assert_eq!(
        (c[0].wr_id, c[0].status, c[0].kind),
        (9, WcStatus::Success, WcKind::Send)
    );
    assert_eq!(b.sq_outstanding(), 0);
}

/// The core is told `max_send_wr` (8); the hardware queue is deeper (12) for maps and
/// invalidations. A core request holds its slot until its completion is polled.
#[test]
fn the_core_gets_max_send_wr_slots_freed_when_it_polls() {
    let a = arena();
    let mut b = up(&a);
    let eight: Vec<_> = (0..8).map(|i| send(i, true)).collect();
    b.post_send(&eight).unwrap();
    assert_eq!(b.post_send(&[send(8, true)]), Err(ProviderError::Busy));
    // Completed in hardware but not polled: still busy.
    b.reap();
    assert_eq!(b.sq_outstanding(), 0);
    assert_eq!(b.post_send(&[send(8, true)]), Err(ProviderError::Busy));
    let mut one = [Completion::EMPTY];
    assert_eq!(b.poll_cq(&mut one), 1);
    assert_eq!(
        b.post_send(&[send(8, true), send(9, true)]),
        Err(ProviderError::Busy)
    );
    b.post_send(&[send(8, true)]).unwrap();
    // Unsignaled requests go back with the completion that retires them.
    while b.poll_cq(&mut one) == 1 {}
    b.post_send(&(0..7).map(|i| send(20 + i, false)).collect::<Vec<_>>())
        .unwrap();
    b.post_send(&[send(27, true)]).unwrap();
    assert_eq!(b.post_send(&[send(28, true)]), Err(ProviderError::Busy));
    assert_eq!(poll_all(&mut b).len(), 1);
    b.post_send(&eight).unwrap();
}

#[test]
fn bad_ids_and_fragments_are_refused_before_anything_is_posted() {
    let a = arena();
    let mut b = up(&a);
    let bad_buf = send_wr(1, BUFS, 1, true);
    assert_eq!(
        b.post_send(&[send(0, true), bad_buf]),
        Err(ProviderError::BadId)
    );
    // A Send longer than its (existing) buffer: a bad length, as on the soft provider.
    let long = send_wr(3, 0, 257, true);
    assert_eq!(b.post_send(&[long]), Err(ProviderError::BadFragments));
    let p = page(&a);
    let too_many = [frag(p, 0, 1); 5];
    let read = SendWr {
        wr_id: 2,
        op: SendOp::RdmaRead {
            local: &too_many,
            handle: 5,
            offset: 0,
        },
        signaled: true,
    };
    assert_eq!(b.post_send(&[read]), Err(ProviderError::BadFragments));
    assert!(b.backend().log.is_empty());
    a.page_unref(p);
}

#[test]
fn registration_holds_page_references_until_release_and_invalidates_first() {
    let a = arena();
    let mut b = up(&a);
    let (p, q) = (page(&a), page(&a));
    // Two pieces of one page and a continuing page: one FRWR run, one key.
    let frags = [
        frag(p, 100, 1000),
        frag(p, 1100, PAGE_SIZE - 1100),
        frag(q, 0, 10),
    ];
    let r = b.register(&frags, Access::REMOTE_READ).unwrap();
    assert_eq!(r.segments.len(), 1);
    assert_eq!(r.segments[0].length, PAGE_SIZE as u32 - 100 + 10);
    assert_eq!(a.refcount(p), Some(2), "one reference for the registration");
    assert_eq!(a.refcount(q), Some(2));
    assert_eq!(b.live_registrations(), 1);
    // Release of a live registration: a LOCAL_INV is posted, and release waits for it.
    b.backend_mut().log.clear();
    b.release(r.id).unwrap();
    let log = &b.backend().log;
    assert_eq!(log.len(), 1);
    assert_eq!(
        log[0].op,
        WrOp::LocalInv {
            rkey: r.segments[0].handle
        }
    );
    assert!(log[0].signaled);
    assert_eq!(b.stats().sync_revokes, 1);
    assert!(b.backend().revoked.is_empty(), "invalidated, not revoked");
    assert_eq!(a.refcount(p), Some(1));
    assert_eq!(b.live_registrations(), 0);
    assert_eq!(b.release(r.id), Err(ProviderError::BadId), "stale id");
    unref(&a, &[p, q]);
    assert_eq!(a.in_use(), 0);
}

#[test]
fn gaps_and_partial_maps_take_more_keys() {
    let a = arena();
    let mut b = up(&a);
    let (p, q) = (page(&a), page(&a));
    // A short first piece cannot continue into the next page: two runs.
    let r = b
        .register(&[frag(p, 0, 10), frag(q, 0, 10)], Access::REMOTE_WRITE)
        .unwrap();
    assert_eq!(r.segments.len(), 2);
    b.release(r.id).unwrap();
    // A backend that maps one SGE per key: the rest of the run goes to another key.
    b.backend_mut().map_max = 1;
    let r = b
        .register(
            &[frag(p, 0, PAGE_SIZE), frag(q, 0, 10)],
            Access::REMOTE_WRITE,
        )
        .unwrap();
    assert_eq!(r.segments.len(), 2);
    assert_eq!(r.segments[0].length as usize, PAGE_SIZE);
    assert_eq!(r.segments[1].length, 10);
    b.release(r.id).unwrap();
    unref(&a, &[p, q]);
    assert_eq!(a.in_use(), 0);
}

#[test]
fn local_inv_becomes_one_request_per_valid_key_and_is_synthesized_after_remote_invalidation() {
    let a = arena();
    let mut b = up(&a);
    let (p, q) = (page(&a), page(&a));
    let r = b
        .register(&[frag(p, 0, 10), frag(q, 0, 10)], Access::REMOTE_WRITE)
        .unwrap();
    b.backend_mut().log.clear();
    b.post_send(&[local_inv(77, r.id)]).unwrap();
    let log = b.backend().log.clone();
    assert_eq!(log.len(), 2);
    assert!(
        !log[0].signaled && log[1].signaled,
        "the last one carries the completion"
    );
    let c = poll_all(&mut b);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].wr_id, 77);
    assert_eq!(b.stats().local_invs, 2);
    b.release(r.id).unwrap();

    // The peer's Send With Invalidate revokes the only key: the LocalInv is synthesized.
    let r = b.register(&[frag(p, 0, 10)], Access::REMOTE_WRITE).unwrap();
    let rkey = r.segments[0].handle;
    b.post_recv(&[3]).unwrap();
    b.backend_mut().cq.push_back(RawWc {
        inv: RawInv::Flagged(rkey),
        ..recv_wc(3, 40)
    });
    let c = poll_all(&mut b);
    assert_eq!(c[0].kind, WcKind::Recv { buf: 3 });
    assert_eq!(c[0].invalidated, Some(rkey));
    assert_eq!(b.stats().remote_invs, 1);
    b.backend_mut().log.clear();
    b.post_send(&[local_inv(78, r.id)]).unwrap();
    assert!(b.backend().log.is_empty(), "nothing left to invalidate");
    assert_eq!(poll_all(&mut b)[0].wr_id, 78);
    b.release(r.id).unwrap();
    unref(&a, &[p, q]);
}

#[test]
fn an_unflagged_value_is_an_invalidation_only_when_it_names_a_valid_key() {
    let a = arena();
    let mut b = up(&a);
    let p = page(&a);
    let r = b.register(&[frag(p, 0, 10)], Access::REMOTE_WRITE).unwrap();
    let rkey = r.segments[0].handle;
    b.post_recv(&[0, 1]).unwrap();
    for (buf, raw) in [(0u64, rkey ^ 0x0100_0000), (1, rkey)] {
        b.backend_mut().cq.push_back(RawWc {
            inv: RawInv::Unflagged(raw),
            ..recv_wc(buf, 28)
        });
    }
    let c = poll_all(&mut b);
    assert_eq!(c[0].invalidated, None, "not one of our keys");
    assert_eq!(c[1].invalidated, Some(rkey));
    assert_eq!(b.stats().remote_invs, 1);
    b.release(r.id).unwrap();
    a.page_unref(p);
}

#[test]
fn receive_buffers_are_owned_by_the_nic_while_posted() {
    let a = arena();
    let mut b = up(&a);
    assert!(b.recv_buf(2).is_ok());
    assert_eq!(b.post_recv(&[2, 2]), Err(ProviderError::BadId));
    b.post_recv(&[2]).unwrap();
    assert_eq!(b.recv_buf(2), Err(ProviderError::BadId));
    assert_eq!(b.post_recv(&[2]), Err(ProviderError::BadId), "posted twice");
    b.backend_mut().cq.push_back(recv_wc(2, 5));
    let c = poll_all(&mut b);
    assert_eq!((c[0].kind, c[0].byte_len), (WcKind::Recv { buf: 2 }, 5));
    assert!(b.recv_buf(2).is_ok());
}

#[test]
fn an_error_completion_breaks_the_connection_once_and_flushes_follow() {
    let a = arena();
    let mut b = up(&a);
    b.backend_mut().auto = false;
    b.post_send(&[send(1, true), send(2, true)]).unwrap();
    let seqs: Vec<u64> = b.backend().log.iter().map(|w| w.wr_id).collect();
    b.backend_mut().cq.push_back(RawWc {
        wr_id: seqs[0],
        status: WcStatus::RemoteAccess,
        ..RawWc::EMPTY
    });
    b.backend_mut().cq.push_back(RawWc {
        wr_id: seqs[1],
        status: WcStatus::Flushed,
        ..RawWc::EMPTY
    });
    let c = poll_all(&mut b);
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(1, WcStatus::RemoteAccess), (2, WcStatus::Flushed)]
    );
    assert_eq!(b.backend().disconnects, 1);
    assert_eq!(b.poll_event(), Some(CmEvent::Disconnected));
    assert_eq!(b.poll_event(), None);
    assert!(!b.is_connected());
    assert_eq!(
        b.post_send(&[send(3, true)]),
        Err(ProviderError::NotConnected)
    );
    assert_eq!((b.stats().errors, b.stats().flushed), (1, 1));
}

#[test]
fn a_partial_post_breaks_the_connection_and_none_is_busy() {
    let a = arena();
    let mut b = up(&a);
    b.backend_mut().fail_after = Some(0);
    assert_eq!(b.post_send(&[send(1, true)]), Err(ProviderError::Busy));
    assert!(b.is_connected());
    b.backend_mut().fail_after = Some(1);
    assert_eq!(
        b.post_send(&[send(1, false), send(2, true)]),
        Err(ProviderError::NotConnected)
    );
    assert!(!b.is_connected());
    assert_eq!(b.sq_outstanding(), 1, "the posted prefix is accounted");
}

#[test]
fn release_on_a_broken_connection_revokes_and_unmaps() {
    let a = arena();
    let mut b = up(&a);
    let p = page(&a);
    let r = b.register(&[frag(p, 0, 10)], Access::REMOTE_READ).unwrap();
    b.backend_mut().cm.push_back(RawCm::Down);
    assert_eq!(b.poll_event(), Some(CmEvent::Disconnected));
    b.release(r.id).unwrap();
    assert_eq!(
        b.backend().revoked.len(),
        1,
        "could not invalidate: revoked"
    );
    assert_eq!(b.backend().unmapped.len(), 1);
    assert_eq!(b.stats().key_revokes, 1);
    assert_eq!(a.refcount(p), Some(1));
    a.page_unref(p);
}

#[test]
fn synchronous_invalidation_revokes_at_local_inv_and_synthesizes() {
    let a = arena();
    let mut m = Mock::new(&a);
    m.keys_survive_revoke = false;
    let mut b = Binding::new(m, layout(Invalidation::Synchronous)).unwrap();
    b.established(&[]);
    let p = page(&a);
    let r = b.register(&[frag(p, 0, 10)], Access::REMOTE_WRITE).unwrap();
    b.backend_mut().log.clear();
    b.post_send(&[local_inv(5, r.id)]).unwrap();
    assert!(b.backend().log.is_empty());
    assert_eq!(b.backend().revoked.len(), 1);
    assert_eq!(poll_all(&mut b)[0].wr_id, 5);
    b.release(r.id).unwrap();
    assert_eq!(b.backend().revoked.len(), 1, "not revoked twice");
    // The revoked key object is gone: the next use creates one.
    let r = b.register(&[frag(p, 0, 10)], Access::REMOTE_WRITE).unwrap();
    b.release(r.id).unwrap();
    a.page_unref(p);
}

#[test]
fn drop_shuts_the_queue_pair_down_before_dropping_page_references() {
    let a = arena();
    let mut b = up(&a);
    let p = page(&a);
    let _r = b.register(&[frag(p, 0, 10)], Access::REMOTE_READ).unwrap();
    a.page_unref(p);
    assert_eq!(a.in_use(), 1, "the registration keeps the page");
    let probe = Arc::clone(&b.backend().in_use_at_shutdown);
    drop(b);
    assert_eq!(
        *probe.lock().unwrap(),
        Some(1),
        "still referenced while the QP is torn down"
    );
    assert_eq!(a.in_use(), 0, "released after");
}

#[test]
fn registration_and_limits() {
    let a = arena();
    let mut b = up(&a);
    let p = page(&a);
    let regs: Vec<_> = (0..4)
        .map(|_| b.register(&[frag(p, 0, 10)], Access::REMOTE_READ).unwrap())
        .collect();
    assert_eq!(
        b.register(&[frag(p, 0, 10)], Access::REMOTE_READ),
        Err(ProviderError::Busy)
    );
    assert_eq!(
        b.register(&[frag(p + 1, 0, 10)], Access::REMOTE_READ),
        Err(ProviderError::BadFragments)
    );
    for r in regs {
        b.release(r.id).unwrap();
    }
    a.page_unref(p);
    assert_eq!(a.in_use(), 0);
}

/// The per-RPC path allocates nothing once warm: receive posts, a Send chain, a
/// registration with its LOCAL_INV and release, completions.
#[test]
fn steady_state_does_not_allocate() {
    let a = arena();
    let mut b = up(&a);
    let (p, q) = (page(&a), page(&a));
    let frags = [frag(p, 0, PAGE_SIZE), frag(q, 0, 100)];
    let round = |b: &mut Binding<Mock>| {
        b.post_recv(&[0, 1, 2]).unwrap();
        for buf in 0..3u64 {
            b.backend_mut().cq.push_back(recv_wc(buf, 28));
        }
        let r = b.register(&frags, Access::REMOTE_WRITE).unwrap();
        b.post_send(&[send(1, false), local_inv(2, r.id)]).unwrap();
        let mut out = [Completion::EMPTY; 8];
        let mut seen = 0;
        while seen < 4 {
            let n = b.poll_cq(&mut out);
            assert!(n > 0);
            seen += n;
        }
        b.release(r.id).unwrap();
        b.backend_mut().log.clear();
        b.backend_mut().unmapped.clear();
    };
    for _ in 0..10 {
        round(&mut b);
    }
    let before = allocs();
    for _ in 0..10_000 {
        round(&mut b);
    }
    assert_eq!(
        allocs() - before,
        0,
        "allocations in 10,000 steady-state rounds"
    );
    unref(&a, &[p, q]);
}
