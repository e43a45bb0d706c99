//! The shim over a real RDMA device (Soft-RoCE `rxe0` in the project's VM), through the
//! userspace emulation of the OFED KPI (`--features emu`): `c/krpc_rdma_ofed.c`, compiled
//! unchanged against `emu/kpi_emu.h`, runs on libibverbs/librdmacm; `OfedQp` and
//! `KernelPages` are the shim's own. The core's Requester and Responder drive it end to end.
//!
//! ```text
//! cargo test --release -p ofed-shim --features emu --test emu_rxe --no-run
//! cargo xtask vm -- env KRPC_RDMA_REQUIRE_RDMA=1 cargo test --release -p ofed-shim \
//!     --features emu --test emu_rxe -- --test-threads=1 --nocapture
//! ```
//!
//! Without an RDMA device every test prints "skipped: no RDMA device" and passes, unless
//! `KRPC_RDMA_REQUIRE_RDMA=1` (then it fails). The tests share one process-wide "kernel" (the
//! emulation's page arena, PD and CM thread): run them with `--test-threads=1`.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use std::ffi::c_void;
use std::net::SocketAddrV4;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use krpc_rdma::provider::{Completion, Provider, SendOp, SendWr, WcStatus};
use krpc_rdma::transport::{
    DdpReply, Incoming, ReplySpec, Requester, RequesterEvent, Responder, ResponderEvent,
    TransportConfig,
};
use krpc_rdma::wire::HeaderRepr;
use mbuf::{Chain, Mbuf, PageFragment, PageProvider};
use ofed_shim::{KernelPages, OfedConfig, OfedListener, OfedQp};

/// `struct krpc_emu_stats` of `emu/kpi_emu.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct EmuStats {
    reg_mr_binds: u64,
    local_invs: u64,
    send_invs: u64,
    remote_invs_seen: u64,
    remote_invs_quirk: u64,
    refused_double_inv: u64,
    partial_maps: u64,
    cq_upcalls: u64,
    cm_events: u64,
    pages_in_use: u64,
}

extern "C" {
    fn krpc_emu_get_stats(out: *mut EmuStats);
}

fn emu_stats() -> EmuStats {
    let mut s = EmuStats::default();
    // SAFETY: `s` is a valid out-pointer of the C struct's layout.
    unsafe { krpc_emu_get_stats(&mut s) };
    s
}

fn rdma_present() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

/// Skip (pass) without an RDMA device — unless `KRPC_RDMA_REQUIRE_RDMA=1`, where a missing
/// device is a failure.
fn skip() -> bool {
    if rdma_present() {
        false
    } else if std::env::var_os("KRPC_RDMA_REQUIRE_RDMA").is_some_and(|v| v == "1") {
        panic!("no RDMA device, and KRPC_RDMA_REQUIRE_RDMA=1");
    } else {
        println!("skipped: no RDMA device");
        true
    }
}

/// `struct sockaddr_in` (Linux layout).
#[repr(C)]
struct SockaddrIn {
    family: u16,
    port_be: u16,
    addr: [u8; 4],
    zero: [u8; 8],
}

fn sockaddr(port: u16) -> SockaddrIn {
    let ip = std::env::var("RXE_IP").unwrap_or_else(|_| "10.0.2.15".into());
    let a: SocketAddrV4 = format!("{ip}:{port}").parse().unwrap();
    SockaddrIn {
        family: 2, // AF_INET
        port_be: a.port().to_be(),
        addr: a.ip().octets(),
        zero: [0; 8],
    }
}

// ---- waiting: the CQ completion handler / CM handler upcall wakes the test thread ---------

static WOKEN: Mutex<bool> = Mutex::new(false);
static WAKE: Condvar = Condvar::new();

extern "C" fn upcall(_arg: *mut c_void) {
    *WOKEN.lock().unwrap() = true;
    WAKE.notify_all();
}

/// Wait until one of the queue pairs has completions or events, or `timeout` passes.
fn wait_any(qps: &mut [&mut OfedQp], timeout: Duration) {
    for q in qps.iter_mut() {
        q.reap();
        if q.has_work() {
            return;
        }
    }
    *WOKEN.lock().unwrap() = false;
    for q in qps.iter_mut() {
        q.arm();
    }
    // Completions that arrived before the notification was armed raise no upcall.
    for q in qps.iter_mut() {
        q.reap();
        if q.has_work() {
            return;
        }
    }
    let g = WOKEN.lock().unwrap();
    let _ = WAKE.wait_timeout_while(g, timeout, |w| !*w).unwrap();
}

// ---- the rig -------------------------------------------------------------------------------

fn ocfg() -> OfedConfig {
    OfedConfig {
        num_mrs: 256,
        ..OfedConfig::default()
    }
}

struct Rig {
    req: Requester,
    resp: Responder,
    qc: OfedQp,
    qs: OfedQp,
    listener: OfedListener,
    pc: Arc<dyn PageProvider>,
    ps: Arc<dyn PageProvider>,
    pages_before: u64,
}

fn rig_with(port: u16, tcfg: TransportConfig, cfg: OfedConfig) -> Rig {
    let pages_before = emu_stats().pages_in_use;
    let pc: Arc<dyn PageProvider> = Arc::new(KernelPages::new());
    let ps: Arc<dyn PageProvider> = Arc::new(KernelPages::new());
    let mut req = Requester::new(tcfg, cfg.resources(), pc.clone()).unwrap();
    let mut resp = Responder::new(tcfg, cfg.resources(), ps.clone()).unwrap();
    let sa = sockaddr(port);
    let sa_ptr = (&sa as *const SockaddrIn).cast::<c_void>();
    // SAFETY: NULL vnet (one stack in the emulation); `sa` is a valid sockaddr_in.
    let mut listener = unsafe { OfedListener::bind(std::ptr::null_mut(), sa_ptr, &cfg) }.unwrap();
    // SAFETY: as above.
    let mut qc =
        unsafe { OfedQp::connect(std::ptr::null_mut(), sa_ptr, &cfg, &req.private_data()) }
            .unwrap();
    // SAFETY: `upcall` only touches statics; callable from any thread at any time.
    unsafe { qc.set_upcall(upcall, std::ptr::null_mut()) };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut qs = loop {
        assert!(Instant::now() < deadline, "no connection request");
        if let Some(q) = listener.next_request() {
            let mut q = q.unwrap();
            // SAFETY: as above.
            unsafe { q.set_upcall(upcall, std::ptr::null_mut()) };
            resp.post_receives(&mut q);
            q.accept(&resp.private_data()).unwrap();
            break q;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let (mut up_c, mut up_s) = (false, false);
    while !(up_c && up_s) {
        assert!(Instant::now() < deadline, "not established: {up_c} {up_s}");
        resp.poll(&mut qs, &mut |e| match e {
            ResponderEvent::Connected(_) => up_s = true,
            ResponderEvent::ConnectionLost => panic!("server: disconnected while connecting"),
            _ => {}
        });
        req.poll(&mut qc, &mut |e| match e {
            RequesterEvent::Connected(_) => up_c = true,
            RequesterEvent::ConnectionLost => panic!("client: disconnected while connecting"),
            _ => {}
        });
        if !(up_c && up_s) {
            wait_any(&mut [&mut qc, &mut qs], Duration::from_millis(50));
        }
    }
    Rig {
        req,
        resp,
        qc,
        qs,
        listener,
        pc,
        ps,
        pages_before,
    }
}

fn rig(port: u16) -> Rig {
    rig_with(port, TransportConfig::default(), ocfg())
}

impl Rig {
    /// Drive both sides until `want` replies/failures arrived (or 120 s); answer every call
    /// with `server`.
    fn run_until(
        &mut self,
        want: usize,
        server: &mut dyn FnMut(&Incoming) -> Chain,
    ) -> Vec<RequesterEvent> {
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        let done = |out: &Vec<RequesterEvent>| {
            out.iter()
                .filter(|e| {
                    matches!(
                        e,
                        RequesterEvent::Reply { .. } | RequesterEvent::Failed { .. }
                    )
                })
                .count()
        };
        while done(&out) < want {
            assert!(Instant::now() < deadline, "timed out: {out:?}");
            let mut calls = Vec::new();
            self.resp.poll(&mut self.qs, &mut |e| match e {
                ResponderEvent::Call(c) => calls.push(c),
                ResponderEvent::ConnectionLost => panic!("server side disconnected"),
                _ => {}
            });
            for c in calls {
                let reply = server(&c);
                self.resp.reply(&mut self.qs, c.ctx, reply).unwrap();
            }
            self.req.poll(&mut self.qc, &mut |e| out.push(e));
            if done(&out) < want {
                wait_any(
                    &mut [&mut self.qc, &mut self.qs],
                    Duration::from_millis(100),
                );
            }
        }
        out
    }
}

fn xdr_call(xid: u32, body: &[u8]) -> Chain {
    let mut v = xid.to_be_bytes().to_vec();
    v.extend_from_slice(body);
    Chain::from_bytes(&v).unwrap()
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 12) as u8))
        .collect()
}

fn pages_with(p: &Arc<dyn PageProvider>, data: &[u8]) -> Chain {
    let c = Chain::alloc_pages(p, data.len()).unwrap();
    let mut off = 0;
    let frags: Vec<(u64, usize, usize)> = c
        .fragments()
        .map(|f| match f {
            mbuf::Fragment::Page { addr, offset, len } => (addr, offset, len),
            mbuf::Fragment::Bytes(_) => panic!(),
        })
        .collect();
    for (a, o, l) in frags {
        p.with_page_mut(a, &mut |pg| {
            pg[o..o + l].copy_from_slice(&data[off..off + l])
        })
        .unwrap();
        off += l;
    }
    c
}

fn write_call(p: &Arc<dyn PageProvider>, xid: u32, data: &[u8]) -> Chain {
    let mut c = xdr_call(xid, &[0xaa; 8]);
    c.append(&(data.len() as u32).to_be_bytes()).unwrap();
    c.append_mbuf(Mbuf::ddp_marker()).unwrap();
    c.cat(pages_with(p, data)).unwrap();
    let pad = (4 - data.len() % 4) % 4;
    let mut tail = vec![0u8; pad];
    tail.extend_from_slice(&[0xbb; 8]);
    c.append(&tail).unwrap();
    c
}

fn take_reply(ev: Vec<RequesterEvent>, xid: u32) -> Chain {
    for e in ev {
        match e {
            RequesterEvent::Reply { xid: x, reply } if x == xid => return reply,
            RequesterEvent::Failed { error, .. } => panic!("call failed: {error}"),
            _ => {}
        }
    }
    panic!("no reply for {xid:#x}")
}

fn locate_read(c: &Chain) -> Option<usize> {
    (c.len() >= 12).then_some(12)
}

fn assert_clean(r: &Rig) {
    assert_eq!(r.qc.live_registrations(), 0, "client registrations left");
    assert_eq!(r.qs.live_registrations(), 0, "server registrations left");
    assert!(
        r.qc.is_connected() && r.qs.is_connected(),
        "connection broke"
    );
    let (c, s) = (r.qc.stats(), r.qs.stats());
    assert_eq!(c.errors + s.errors, 0, "error completions: {c:?} {s:?}");
    assert_eq!(
        emu_stats().refused_double_inv,
        0,
        "double invalidation attempted"
    );
}

fn teardown(r: Rig) {
    let Rig {
        req,
        resp,
        qc,
        qs,
        listener,
        pc,
        ps,
        pages_before,
    } = r;
    drop((req, resp, qc, qs, listener, pc, ps));
    let st = emu_stats();
    println!("emulation: {st:?}");
    assert_eq!(st.pages_in_use, pages_before, "kernel pages leaked");
}

#[test]
fn small_calls() {
    if skip() {
        return;
    }
    let mut r = rig(20301);
    let n = 100u32;
    let t = Instant::now();
    for i in 0..n {
        r.req
            .call(
                &mut r.qc,
                xdr_call(i, b"hello world!"),
                ReplySpec::inline(512),
            )
            .unwrap();
        let ev = r.run_until(1, &mut |c| {
            assert_eq!(c.call.to_vec().unwrap()[4..], b"hello world!"[..]);
            xdr_call(c.xid, b"pong")
        });
        let reply = take_reply(ev, i);
        assert_eq!(
            reply.to_vec().unwrap(),
            xdr_call(i, b"pong").to_vec().unwrap()
        );
    }
    let dt = t.elapsed();
    println!(
        "small calls through the shim: {n} round trips in {dt:?} ({:.1} us/call)",
        dt.as_secs_f64() * 1e6 / f64::from(n)
    );
    assert_clean(&r);
    teardown(r);
}

#[test]
fn write_1mib_read_chunk_byte_exact() {
    if skip() {
        return;
    }
    let before = emu_stats();
    let mut r = rig(20302);
    let size = 1 << 20;
    let iters = 4u32;
    let t = Instant::now();
    for it in 0..iters {
        let data = pattern(size, it as u8);
        let xid = 0x1000 + it;
        let call = write_call(&r.pc, xid, &data);
        let expect = call.to_vec().unwrap();
        r.req.call(&mut r.qc, call, ReplySpec::inline(256)).unwrap();
        let ev = r.run_until(1, &mut |c| {
            assert_eq!(c.call.to_vec().unwrap(), expect, "byte-exact 1 MiB call");
            let regions: Vec<_> = c.call.ddp_regions().collect();
            assert_eq!(regions.len(), 1);
            assert_eq!(regions[0].len, size);
            xdr_call(c.xid, b"ok")
        });
        take_reply(ev, xid);
    }
    let dt = t.elapsed();
    println!(
        "DDP WRITE (read chunk, RDMA Read by the server): {iters} x 1 MiB in {dt:?}: {:.1} MB/s",
        f64::from(iters) * size as f64 / dt.as_secs_f64() / 1e6
    );
    println!("client {:?}\nserver {:?}", r.qc.stats(), r.qs.stats());
    assert_eq!(r.req.counters().read_chunks, u64::from(iters));
    assert_eq!(r.resp.counters().ddp_payload_copied_bytes, 0);
    assert!(r.qc.stats().maps >= u64::from(iters));
    assert_clean(&r);
    let after = emu_stats();
    assert!(after.reg_mr_binds - before.reg_mr_binds >= u64::from(iters));
    teardown(r);
}

#[test]
fn read_1mib_through_write_chunk() {
    if skip() {
        return;
    }
    let mut r = rig(20303);
    let size = (1 << 20) + 3;
    let iters = 4u32;
    let data = pattern(size, 3);
    let ps = r.ps.clone();
    let t = Instant::now();
    for it in 0..iters {
        let xid = 0x2000 + it;
        let pages = Chain::alloc_pages(&r.pc, size.next_multiple_of(4)).unwrap();
        let spec = ReplySpec {
            max_reply: size + 64,
            ddp: Some(DdpReply {
                pages,
                locate: locate_read,
            }),
        };
        r.req.call(&mut r.qc, xdr_call(xid, b"READ"), spec).unwrap();
        let d2 = data.clone();
        let ev = r.run_until(1, &mut |c| {
            let mut rep = xdr_call(c.xid, &0u32.to_be_bytes());
            rep.append(&(size as u32).to_be_bytes()).unwrap();
            rep.append_mbuf(Mbuf::ddp_marker()).unwrap();
            rep.cat(pages_with(&ps, &d2)).unwrap();
            let pad = (4 - size % 4) % 4;
            let mut tail = vec![0u8; pad];
            tail.extend_from_slice(&[0xcc; 4]);
            rep.append(&tail).unwrap();
            rep
        });
        let reply = take_reply(ev, xid);
        let mut expect = xdr_call(xid, &0u32.to_be_bytes()).to_vec().unwrap();
        expect.extend_from_slice(&(size as u32).to_be_bytes());
        expect.extend_from_slice(&data);
        expect.extend(std::iter::repeat_n(0u8, (4 - size % 4) % 4));
        expect.extend_from_slice(&[0xcc; 4]);
        assert_eq!(reply.to_vec().unwrap(), expect, "READ reply byte-exact");
    }
    let dt = t.elapsed();
    println!(
        "DDP READ (write chunk, RDMA Write by the server): {iters} x 1 MiB in {dt:?}: {:.1} MB/s",
        f64::from(iters) * size as f64 / dt.as_secs_f64() / 1e6
    );
    println!("client {:?}\nserver {:?}", r.qc.stats(), r.qs.stats());
    assert_eq!(r.req.counters().write_chunks, u64::from(iters));
    assert_clean(&r);
    teardown(r);
}

#[test]
fn long_call_and_long_reply() {
    if skip() {
        return;
    }
    let mut r = rig(20304);
    let body = pattern(6000, 9);
    r.req
        .call(&mut r.qc, xdr_call(42, &body), ReplySpec::inline(20_000))
        .unwrap();
    let expect = xdr_call(42, &body).to_vec().unwrap();
    let big = pattern(12_000, 5);
    let b2 = big.clone();
    let ev = r.run_until(1, &mut |c| {
        assert_eq!(c.call.to_vec().unwrap(), expect);
        xdr_call(c.xid, &b2)
    });
    let reply = take_reply(ev, 42);
    assert_eq!(
        reply.to_vec().unwrap(),
        xdr_call(42, &big).to_vec().unwrap()
    );
    assert_eq!(r.req.counters().long_calls, 1);
    assert_eq!(r.resp.counters().long_replies, 1);
    assert_eq!(r.req.counters().reply_chunks, 1);
    drop(reply);
    println!("client {:?}\nserver {:?}", r.qc.stats(), r.qs.stats());
    assert_clean(&r);
    teardown(r);
}

/// Post one RDMA Read of `len` bytes at `handle`/`offset` from `qp` and return its status.
fn probe_read(qp: &mut OfedQp, handle: u32, offset: u64, len: usize) -> WcStatus {
    let page = qp.pages().alloc_page().unwrap();
    let frag = [PageFragment {
        addr: page,
        offset: 0,
        len,
    }];
    qp.post_send(&[SendWr {
        wr_id: 0xdead,
        op: SendOp::RdmaRead {
            local: &frag,
            handle,
            offset,
        },
        signaled: true,
    }])
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut wcs = [Completion::EMPTY; 16];
    loop {
        assert!(Instant::now() < deadline, "probe timed out");
        let n = qp.poll_cq(&mut wcs);
        if let Some(c) = wcs[..n].iter().find(|c| c.wr_id == 0xdead) {
            qp.pages().page_unref(page);
            return c.status;
        }
        wait_any(&mut [qp], Duration::from_millis(50));
    }
}

#[test]
fn stale_handle_refused_after_rpc() {
    if skip() {
        return;
    }
    let mut r = rig(20306);
    let data = pattern(100_000, 1);
    let call = write_call(&r.pc, 5, &data);
    r.req.call(&mut r.qc, call, ReplySpec::inline(128)).unwrap();
    // The advertised handles, from the header in the client's send buffer.
    let mut handles = Vec::new();
    for b in 0..r.qc.resources().send_bufs {
        let Ok(buf) = r.qc.send_buf(b) else { continue };
        if let Some(h) = HeaderRepr::parse(buf).ok().filter(|h| h.xid == 5) {
            if let Some(l) = h.chunk_lists() {
                handles.extend(
                    l.read_list
                        .iter()
                        .map(|s| (s.segment.handle, s.segment.offset)),
                );
            }
            break;
        }
    }
    assert!(!handles.is_empty());
    let ev = r.run_until(1, &mut |c| {
        assert_eq!(c.call.len(), 4 + 8 + 4 + 100_000 + 8);
        xdr_call(c.xid, b"ok")
    });
    take_reply(ev, 5);
    assert_clean(&r);
    println!(
        "client stats after the RPC: {:?} (handles {handles:x?})",
        r.qc.stats()
    );
    let (h, off) = handles[0];
    let st = probe_read(&mut r.qs, h, off, 64);
    println!("RDMA Read with the stale handle {h:#x}: {st:?}");
    assert_eq!(st, WcStatus::RemoteAccess);
    // The refused Read broke the server's connection (as it should); nothing else leaked.
    teardown(r);
}

#[test]
fn release_of_live_registration_revokes() {
    if skip() {
        return;
    }
    let mut r = rig(20307);
    let page = r.pc.alloc_page().unwrap();
    let frag = [PageFragment {
        addr: page,
        offset: 0,
        len: 4096,
    }];
    let reg =
        r.qc.register(&frag, krpc_rdma::provider::Access::REMOTE_READ)
            .unwrap();
    let seg = reg.segments[0];
    assert_eq!(
        probe_read(&mut r.qs, seg.handle, seg.offset, 64),
        WcStatus::Success
    );
    r.qc.release(reg.id).unwrap();
    assert!(r.qc.stats().sync_revokes >= 1);
    let st = probe_read(&mut r.qs, seg.handle, seg.offset, 64);
    println!("RDMA Read after release (no LocalInv by the core): {st:?}");
    assert_eq!(st, WcStatus::RemoteAccess);
    r.pc.page_unref(page);
    teardown(r);
}

/// Pages that are not contiguous in the emulation's "physical" (= virtual) space: the
/// emulated `ib_map_mr_sg` maps only the contiguous prefix, and the shim must register the
/// rest with another MR (`nmapped < n`), advertise both segments, and revoke both.
#[test]
fn discontiguous_pages_take_two_mrs() {
    if skip() {
        return;
    }
    let mut r = rig(20308);
    let before = emu_stats();
    let a = r.pc.alloc_page().unwrap();
    let hole = r.pc.alloc_page().unwrap();
    let b = r.pc.alloc_page().unwrap();
    assert_ne!(b, a + 4096, "pages must be discontiguous");
    for (p, v) in [(a, 0x11u8), (b, 0x22u8)] {
        r.pc.with_page_mut(p, &mut |pg| pg.fill(v)).unwrap();
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
    let reg =
        r.qc.register(&frags, krpc_rdma::provider::Access::REMOTE_READ)
            .unwrap();
    println!("segments over two discontiguous pages: {:x?}", reg.segments);
    assert_eq!(reg.segments.len(), 2, "one MR per contiguous run");
    assert_eq!(reg.segments[0].length, 4096);
    assert_eq!(reg.segments[1].length, 100);
    assert!(emu_stats().partial_maps > before.partial_maps);
    for s in &reg.segments {
        assert_eq!(
            probe_read(&mut r.qs, s.handle, s.offset, s.length as usize),
            WcStatus::Success
        );
    }
    let invs = emu_stats().local_invs;
    r.qc.release(reg.id).unwrap();
    assert_eq!(r.qc.live_registrations(), 0);
    assert_eq!(emu_stats().local_invs - invs, 2, "both MRs invalidated");
    // The remainder's MR (the second segment) is refused now. (One probe only: the refused
    // Read breaks the server's connection.)
    let s = reg.segments[1];
    let st = probe_read(&mut r.qs, s.handle, s.offset, 16);
    println!("RDMA Read of segment {:#x} after release: {st:?}", s.handle);
    assert_eq!(st, WcStatus::RemoteAccess);
    for p in [a, hole, b] {
        r.pc.page_unref(p);
    }
    teardown(r);
}

#[test]
fn calls_32_in_flight_within_credits() {
    if skip() {
        return;
    }
    let cfg = TransportConfig {
        max_requests: 32,
        ..TransportConfig::default()
    };
    let mut r = rig_with(20305, cfg, ocfg());
    let total = 256u32;
    let (mut sent, mut done, mut max_out) = (0u32, 0u32, 0u32);
    while done < total {
        while sent < total {
            match r.req.call(
                &mut r.qc,
                xdr_call(1000 + sent, b"c"),
                ReplySpec::inline(64),
            ) {
                Ok(()) => sent += 1,
                Err(_) => break,
            }
            assert!(r.req.outstanding() <= r.req.credits_granted());
            max_out = max_out.max(r.req.outstanding());
        }
        let ev = r.run_until(1, &mut |c| xdr_call(c.xid, b"r"));
        for e in &ev {
            if let RequesterEvent::Failed { error, .. } = e {
                panic!("failed: {error}");
            }
        }
        done += ev
            .iter()
            .filter(|e| matches!(e, RequesterEvent::Reply { .. }))
            .count() as u32;
    }
    println!("pipelined: {total} calls, max outstanding {max_out}");
    assert_eq!(max_out, 32, "32 calls in flight");
    assert_clean(&r);
    teardown(r);
}
