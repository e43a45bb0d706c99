//! The verbs provider over a real RDMA device (Soft-RoCE `rxe0` in the project's VM):
//! `cargo xtask vm -- cargo test -p userspace-harness --test verbs_rxe -- --nocapture
//! --test-threads=1`. Without an RDMA device every test prints "skipped: no RDMA device" and
//! passes.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use userspace_harness::verbs;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krpc_rdma::provider::{Access, Completion, Provider, SendOp, SendWr, WcStatus};
use krpc_rdma::transport::{
    CallError, DdpReply, Incoming, ReplySpec, Requester, RequesterEvent, Responder, ResponderEvent,
    TransportConfig,
};
use krpc_rdma::wire::HeaderRepr;
use mbuf::{Chain, Mbuf, PageFragment, PageProvider, PAGE_SIZE};

use verbs::arena::VerbsArena;
use verbs::cm::{connect, VerbsListener};
use verbs::device::Device;
use verbs::qp::VerbsQp;
use verbs::wait::wait_any;
use verbs::{RegMode, VerbsConfig};

/// Skip (pass) without an RDMA device — unless `KRPC_RDMA_REQUIRE_RDMA=1` (set by
/// `cargo xtask test` for its run in the VM), where a missing device is a failure, so a VM
/// whose rxe0 did not come up can never pass as "skipped".
fn skip() -> bool {
    if verbs::rdma_present() {
        false
    } else if std::env::var_os("KRPC_RDMA_REQUIRE_RDMA").is_some_and(|v| v == "1") {
        panic!("no RDMA device, and KRPC_RDMA_REQUIRE_RDMA=1");
    } else {
        println!("skipped: no RDMA device");
        true
    }
}

fn addr(port: u16) -> SocketAddr {
    let ip = std::env::var("RXE_IP").unwrap_or_else(|_| "10.0.2.15".into());
    format!("{ip}:{port}").parse().unwrap()
}

struct Rig {
    req: Requester,
    resp: Responder,
    qc: VerbsQp,
    qs: VerbsQp,
    arena_c: Arc<VerbsArena>,
    arena_s: Arc<VerbsArena>,
    pc: Arc<dyn PageProvider>,
    ps: Arc<dyn PageProvider>,
}

fn rig_with(port: u16, tcfg: TransportConfig, vcfg: VerbsConfig) -> Rig {
    let dev = Device::open(None).unwrap();
    let arena_c = VerbsArena::new(&dev, 4096).unwrap();
    let arena_s = VerbsArena::new(&dev, 4096).unwrap();
    let pc: Arc<dyn PageProvider> = arena_c.clone();
    let ps: Arc<dyn PageProvider> = arena_s.clone();
    let req = Requester::new(tcfg, vcfg.resources(), pc.clone()).unwrap();
    let resp = Responder::new(tcfg, vcfg.resources(), ps.clone()).unwrap();
    let a = addr(port);
    let (tx, rx) = std::sync::mpsc::channel();
    let srv_arena = arena_s.clone();
    let scfg = vcfg.clone();
    let server = std::thread::spawn(move || {
        let mut resp = resp;
        let mut l = VerbsListener::bind(&srv_arena, a).unwrap();
        tx.send(()).unwrap();
        let pd = resp.private_data();
        let qs = l
            .accept_with(&pd, &scfg, |qp| resp.post_receives(qp))
            .unwrap();
        (resp, qs)
    });
    rx.recv().unwrap();
    let qc = connect(&arena_c, a, &req.private_data(), &vcfg).unwrap();
    let (resp, qs) = server.join().unwrap();
    let mut r = Rig {
        req,
        resp,
        qc,
        qs,
        arena_c,
        arena_s,
        pc,
        ps,
    };
    let (ea, eb) = r.poll_once();
    assert!(matches!(ea.first(), Some(RequesterEvent::Connected(_))));
    assert!(matches!(eb.first(), Some(ResponderEvent::Connected(_))));
    r
}

fn rig(port: u16) -> Rig {
    rig_with(port, TransportConfig::default(), VerbsConfig::default())
}

impl Rig {
    fn poll_once(&mut self) -> (Vec<RequesterEvent>, Vec<ResponderEvent>) {
        let mut eb = Vec::new();
        self.resp.poll(&mut self.qs, &mut |e| eb.push(e));
        let mut ea = Vec::new();
        self.req.poll(&mut self.qc, &mut |e| ea.push(e));
        (ea, eb)
    }

    /// Drive both sides until `want` replies/failures arrived (or 60 s); answer every call
    /// with `server`.
    fn run_until(
        &mut self,
        want: usize,
        server: &mut dyn FnMut(&Incoming) -> Chain,
    ) -> Vec<RequesterEvent> {
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
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
            self.resp.poll(&mut self.qs, &mut |e| {
                if let ResponderEvent::Call(c) = e {
                    calls.push(c)
                }
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
}

fn teardown(r: Rig) {
    let Rig {
        req,
        resp,
        qc,
        qs,
        arena_c,
        arena_s,
        pc,
        ps,
    } = r;
    drop((req, resp, qc, qs, pc, ps));
    assert_eq!(arena_c.in_use(), 0, "client arena pages leaked");
    assert_eq!(arena_s.in_use(), 0, "server arena pages leaked");
    assert_eq!(arena_c.bad_unrefs() + arena_s.bad_unrefs(), 0);
}

#[test]
fn small_calls() {
    if skip() {
        return;
    }
    let mut r = rig(20101);
    let n = 200u32;
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
        "small calls: {n} sequential round trips in {dt:?}: {:.0} calls/s, {:.1} us/call",
        f64::from(n) / dt.as_secs_f64(),
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
    let mut r = rig(20102);
    let size = 1 << 20;
    let iters = 8u32;
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
    assert_eq!(r.req.counters().read_chunks, u64::from(iters));
    assert_eq!(r.resp.counters().ddp_payload_copied_bytes, 0);
    println!("client stats {:?}", r.qc.stats());
    assert!(r.qc.stats().maps >= u64::from(iters));
    assert_clean(&r);
    teardown(r);
}

#[test]
fn read_1mib_through_write_chunk() {
    if skip() {
        return;
    }
    let mut r = rig(20103);
    let size = (1 << 20) + 3;
    let iters = 8u32;
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
    assert_eq!(r.req.counters().write_chunks, u64::from(iters));
    println!("client stats {:?}", r.qc.stats());
    assert_clean(&r);
    teardown(r);
}

#[test]
fn long_call_and_long_reply() {
    if skip() {
        return;
    }
    let mut r = rig(20104);
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
    assert_clean(&r);
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
    let mut r = rig_with(20105, cfg, VerbsConfig::default());
    let total = 512u32;
    let (mut sent, mut done, mut max_out) = (0u32, 0u32, 0u32);
    let t = Instant::now();
    while done < total {
        while sent < total {
            match r.req.call(
                &mut r.qc,
                xdr_call(1000 + sent, b"c"),
                ReplySpec::inline(64),
            ) {
                Ok(()) => sent += 1,
                Err(rej) => {
                    assert!(matches!(
                        rej.error,
                        CallError::NoCredit | CallError::WouldBlock
                    ));
                    break;
                }
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
    let dt = t.elapsed();
    println!(
        "pipelined small calls: {total} in {dt:?}: {:.0} calls/s, max outstanding {max_out}",
        f64::from(total) / dt.as_secs_f64()
    );
    assert_eq!(max_out, 32, "32 calls in flight");
    assert_clean(&r);
    teardown(r);
}

/// Post one RDMA Read of `len` bytes at `handle`/`offset` from `qp` and return its status.
fn probe_read(qp: &mut VerbsQp, handle: u32, offset: u64, len: usize) -> WcStatus {
    let page = qp.arena().alloc_page().unwrap();
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
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut wcs = [Completion::EMPTY; 16];
    loop {
        assert!(Instant::now() < deadline, "probe timed out");
        let n = qp.poll_cq(&mut wcs);
        if let Some(c) = wcs[..n].iter().find(|c| c.wr_id == 0xdead) {
            qp.arena().page_unref(page);
            return c.status;
        }
        verbs::wait::wait(qp, Duration::from_millis(50));
    }
}

#[test]
fn stale_handle_refused_after_rpc() {
    if skip() {
        return;
    }
    let mut r = rig(20106);
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
    teardown(r);
}

#[test]
fn release_of_live_registration_revokes() {
    if skip() {
        return;
    }
    let mut r = rig(20107);
    let page = r.pc.alloc_page().unwrap();
    let frag = [PageFragment {
        addr: page,
        offset: 0,
        len: 4096,
    }];
    let reg = r.qc.register(&frag, Access::REMOTE_READ).unwrap();
    let seg = reg.segments[0];
    // While registered: the server can read it.
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
    if skip() {
        return;
    }
    let n = 1000;
    let mut r = rig(20108);
    let pc = r.pc.clone();
    let mw1 = reg_cycle_cost(&mut r.qc, &pc, 1, n);
    let mw64 = reg_cycle_cost(&mut r.qc, &pc, 64, n);
    println!("client stats (MW): {:?}", r.qc.stats());
    assert_clean(&r);
    teardown(r);
    let tcfg = TransportConfig {
        accept_remote_invalidate: false,
        ..TransportConfig::default()
    };
    let vcfg = VerbsConfig {
        reg_mode: RegMode::MemoryRegion,
        ..VerbsConfig::default()
    };
    let mut r = rig_with(20109, tcfg, vcfg);
    let pc = r.pc.clone();
    let mr1 = reg_cycle_cost(&mut r.qc, &pc, 1, n);
    let mr64 = reg_cycle_cost(&mut r.qc, &pc, 64, n);
    println!(
        "register + invalidate + release, {n} cycles each (TCG, indicative):\n  \
         memory window: 4 KiB {mw1:.1} us/op, 256 KiB {mw64:.1} us/op\n  \
         per-RPC MR:    4 KiB {mr1:.1} us/op, 256 KiB {mr64:.1} us/op"
    );
    // The MR mode also carries RPCs end to end.
    let data = pattern(300_000, 7);
    let call = write_call(&r.pc, 77, &data);
    let expect = call.to_vec().unwrap();
    r.req.call(&mut r.qc, call, ReplySpec::inline(128)).unwrap();
    let ev = r.run_until(1, &mut |c| {
        assert_eq!(c.call.to_vec().unwrap(), expect);
        xdr_call(c.xid, b"ok")
    });
    take_reply(ev, 77);
    assert_clean(&r);
    teardown(r);
}

#[test]
fn refused_connection_is_a_typed_error() {
    if skip() {
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
    if skip() {
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
