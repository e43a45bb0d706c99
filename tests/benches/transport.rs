//! Per-RPC CPU cost of the transport core: requester and responder in one process over the
//! software RC provider (`krpc_rdma::soft`), one thread.
//!
//! One iteration is one complete round trip:
//! requester `call` (marshal, register, post Send) → responder `poll` (recv-rdma, RDMA Reads
//! of read chunks into fresh pages, hand up) → responder `reply` (RDMA Writes of a write chunk,
//! Send / Send With Invalidate) → requester `poll` (recv-rdma, invalidation, hand up) →
//! responder `poll` (reap the reply's Send completion, free the reply pages).
//!
//! Not timed (criterion `iter_batched` setup / drop): building the call chain and the reply
//! chain (the upper layer's XDR encoding and, for DDP, filling the pages), and dropping the
//! call handed up to the server and the reply handed up to the client.
//!
//! The software provider executes RDMA Reads and Writes at post time with one `memcpy` per
//! byte moved between the two page arenas: that copy emulates the NIC's DMA and is *not* a
//! transport copy. Transport copies are reported from the transport `Counters`
//! (`ddp_payload_copied_bytes`, `pullup_bytes`) after the criterion runs.
//!
//! Run: `cargo bench -p tests --bench transport`.
//! Profile the small-call path alone: `KRPC_RDMA_BENCH_PROFILE=2000000 <bench binary>` under
//! `perf record` or `valgrind --tool=callgrind`.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, BatchSize, Criterion, Throughput};
use krpc_rdma::soft::SoftStats;
use krpc_rdma::transport::{
    Counters, DdpReply, Incoming, ReplySpec, RequesterEvent, ResponderEvent,
};
use mbuf::{Chain, Mbuf, PageProvider};
use tests::rig::{assert_clean, pattern, rig_opts, write_call, xdr_call, Rig, RigOpts};

const MIB: usize = 1 << 20;
const SMALL: usize = 100;

/// One full round trip; returns (call handed up to the server, reply handed up to the client)
/// so that criterion drops them outside the timed region.
fn round_trip(r: &mut Rig, call: Chain, spec: ReplySpec, reply: Chain) -> (Chain, Chain) {
    if let Err(rej) = r.req.call(&mut r.qa, call, spec) {
        panic!("call refused: {}", rej.error);
    }
    let mut inc: Option<Incoming> = None;
    r.resp.poll(&mut r.qb, &mut |e| {
        if let ResponderEvent::Call(c) = e {
            inc = Some(c);
        }
    });
    let Incoming { call, ctx, .. } = inc.expect("call handed up in one poll");
    r.resp.reply(&mut r.qb, ctx, reply).expect("reply posted");
    let mut got: Option<Chain> = None;
    r.req.poll(&mut r.qa, &mut |e| match e {
        RequesterEvent::Reply { reply, .. } => got = Some(reply),
        RequesterEvent::Failed { error, .. } => panic!("call failed: {error}"),
        _ => {}
    });
    // Reap the reply's Send completion (frees the responder's reply pages).
    r.resp.poll(&mut r.qb, &mut |_| {});
    (call, got.expect("reply handed up in one poll"))
}

fn bench_rig() -> Rig {
    // 1 MiB = 256 pages per side per RPC; one RPC in flight. 2048 pages (8 MiB) per arena.
    rig_opts(RigOpts {
        pages: 2048,
        ..RigOpts::default()
    })
}

/// The DDP data item of a READ-like reply: [xid][status][len][data][pad][tail].
fn locate_read(c: &Chain) -> Option<usize> {
    (c.len() >= 12).then_some(12)
}

/// Inputs of one iteration of each kind.
fn small_inputs(xid: u32) -> (Chain, ReplySpec, Chain) {
    let body = [0x5au8; SMALL - 4];
    (
        xdr_call(xid, &body),
        ReplySpec::inline(256),
        xdr_call(xid, &body),
    )
}

/// The two page providers (requester's, responder's).
type Pages = (Arc<dyn PageProvider>, Arc<dyn PageProvider>);

fn pages_of(r: &Rig) -> Pages {
    (r.pa.clone(), r.pb.clone())
}

fn write_inputs(p: &Pages, xid: u32, data: &[u8]) -> (Chain, ReplySpec, Chain) {
    (
        write_call(&p.0, xid, data),
        ReplySpec::inline(256),
        xdr_call(xid, &[0u8; 24]),
    )
}

fn read_inputs(p: &Pages, xid: u32) -> (Chain, ReplySpec, Chain) {
    let pages = Chain::alloc_pages(&p.0, MIB).unwrap();
    let spec = ReplySpec {
        max_reply: MIB + 64,
        ddp: Some(DdpReply {
            pages,
            locate: locate_read,
        }),
    };
    let mut rep = xdr_call(xid, &0u32.to_be_bytes());
    rep.append(&(MIB as u32).to_be_bytes()).unwrap();
    rep.append_mbuf(Mbuf::ddp_marker()).unwrap();
    // Fresh arena pages (zeroed): the content does not matter to the cost.
    rep.cat(Chain::alloc_pages(&p.1, MIB).unwrap()).unwrap();
    rep.append(&[0xcc; 4]).unwrap();
    (xdr_call(xid, b"READ....args"), spec, rep)
}

fn assert_quiet(r: &Rig) {
    assert_clean(r);
    assert_eq!(r.arena_a.in_use(), 0, "requester pages held between RPCs");
    assert_eq!(r.arena_b.in_use(), 0, "responder pages held between RPCs");
    assert_eq!(r.req.outstanding(), 0);
}

fn transport(c: &mut Criterion) {
    let mut g = c.benchmark_group("rpc_round_trip");
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));

    // Small call.
    let mut r = bench_rig();
    let mut xid = 0u32;
    g.throughput(Throughput::Elements(1));
    g.bench_function("small_100B_call_100B_reply", |b| {
        b.iter_batched(
            || {
                xid = xid.wrapping_add(1);
                small_inputs(xid)
            },
            |(call, spec, reply)| round_trip(&mut r, call, spec, reply),
            BatchSize::SmallInput,
        )
    });
    assert_quiet(&r);
    drop(r);

    // 1 MiB DDP WRITE: the call's data goes as a read chunk (responder RDMA Reads).
    let mut r = bench_rig();
    let p = pages_of(&r);
    let data = pattern(MIB, 7);
    g.throughput(Throughput::BytesDecimal(MIB as u64));
    g.sample_size(50);
    g.bench_function("ddp_write_1MiB_read_chunk", |b| {
        b.iter_batched(
            || {
                xid = xid.wrapping_add(1);
                write_inputs(&p, xid, &data)
            },
            |(call, spec, reply)| round_trip(&mut r, call, spec, reply),
            BatchSize::PerIteration,
        )
    });
    assert_quiet(&r);
    drop(r);

    // 1 MiB DDP READ: the reply's data goes into the caller's pages (write chunk).
    let mut r = bench_rig();
    let p = pages_of(&r);
    g.bench_function("ddp_read_1MiB_write_chunk", |b| {
        b.iter_batched(
            || {
                xid = xid.wrapping_add(1);
                read_inputs(&p, xid)
            },
            |(call, spec, reply)| round_trip(&mut r, call, spec, reply),
            BatchSize::PerIteration,
        )
    });
    assert_quiet(&r);
    drop(r);
    g.finish();

    summary();
}

/// Time `n` round trips (inputs built untimed) and print per-iteration time, RPC/s, MB/s and
/// the copies the transport made, from its counters.
fn measure(
    name: &str,
    n: u32,
    payload: usize,
    mut inputs: impl FnMut(&Pages, u32) -> (Chain, ReplySpec, Chain),
) {
    let mut r = bench_rig();
    let p = pages_of(&r);
    let mut total = Duration::ZERO;
    for i in 0..n {
        let (call, spec, reply) = inputs(&p, i + 1);
        let t = Instant::now();
        let out = round_trip(&mut r, call, spec, reply);
        total += t.elapsed();
        black_box(out);
        if i % 64 == 0 {
            assert_quiet(&r);
        }
    }
    assert_quiet(&r);
    let per = total.as_secs_f64() / f64::from(n);
    let mb = if payload > 0 {
        format!(", {:.0} MB/s", payload as f64 / per / 1e6)
    } else {
        String::new()
    };
    println!(
        "summary {name}: {n} round trips, {:.0} ns/RPC, {:.0} RPC/s{mb}",
        per * 1e9,
        1.0 / per
    );
    let (rq, rs) = (r.req.counters(), r.resp.counters());
    let (sa, sb) = (r.qa.stats(), r.qb.stats());
    copies(name, n, payload, rq, rs, &sa, &sb);
}

fn copies(
    name: &str,
    n: u32,
    payload: usize,
    rq: &Counters,
    rs: &Counters,
    sa: &SoftStats,
    sb: &SoftStats,
) {
    let mibs = (payload as f64 * f64::from(n)) / MIB as f64;
    let per_mib = |b: u64| {
        if mibs > 0.0 {
            format!("{:.1}", b as f64 / mibs)
        } else {
            "n/a".into()
        }
    };
    let ddp = rq.ddp_payload_copied_bytes + rs.ddp_payload_copied_bytes;
    let pull = rq.pullup_bytes + rs.pullup_bytes;
    println!(
        "copies {name}: transport ddp_payload_copied_bytes={ddp} ({} B/MiB), pullup_bytes={pull} \
         ({} B/MiB, req {} / resp {}); read_chunks req/resp={}/{}, write_chunks={}/{}, \
         remote_invalidations={}, local_invalidations={}",
        per_mib(ddp),
        per_mib(pull),
        rq.pullup_bytes,
        rs.pullup_bytes,
        rq.read_chunks,
        rs.read_chunks,
        rq.write_chunks,
        rs.write_chunks,
        rq.remote_invalidations,
        rq.local_invalidations,
    );
    println!(
        "copies {name}: soft provider (NIC emulation, not a transport copy): RDMA Read bytes={} \
         ({} B/MiB), RDMA Write bytes={} ({} B/MiB), Send bytes a->b={} b->a={}",
        sb.rdma_read_bytes,
        per_mib(sb.rdma_read_bytes),
        sb.rdma_write_bytes,
        per_mib(sb.rdma_write_bytes),
        sa.send_bytes,
        sb.send_bytes,
    );
    if payload > 0 {
        assert_eq!(ddp, 0, "{name}: DDP payload copied by the transport");
        assert_eq!(pull, 0, "{name}: pull-up on a DDP path");
    }
}

fn summary() {
    let data = pattern(MIB, 7);
    measure("small_100B_call_100B_reply", 200_000, 0, |_, xid| {
        small_inputs(xid)
    });
    measure("ddp_write_1MiB_read_chunk", 500, MIB, |p, xid| {
        write_inputs(p, xid, &data)
    });
    measure("ddp_read_1MiB_write_chunk", 500, MIB, read_inputs);
}

/// `KRPC_RDMA_BENCH_PROFILE=N`: run N round trips (inputs included) and exit, for
/// `perf record` / `valgrind --tool=callgrind` without criterion. The kind of round trip is
/// `KRPC_RDMA_BENCH_PROFILE_KIND`: `small` (default), `write` (1 MiB DDP WRITE, read chunk)
/// or `read` (1 MiB DDP READ, write chunk).
fn profile_loop(n: u32) {
    let mut r = bench_rig();
    let p = pages_of(&r);
    let kind = std::env::var("KRPC_RDMA_BENCH_PROFILE_KIND").unwrap_or_default();
    let data = pattern(MIB, 7);
    for i in 0..n {
        let (call, spec, reply) = match kind.as_str() {
            "write" => write_inputs(&p, i + 1, &data),
            "read" => read_inputs(&p, i + 1),
            _ => small_inputs(i + 1),
        };
        black_box(round_trip(&mut r, call, spec, reply));
    }
    assert_quiet(&r);
    println!("profile loop: {n} {kind} round trips");
}

criterion_group!(benches, transport);

fn main() {
    if let Some(n) = std::env::var("KRPC_RDMA_BENCH_PROFILE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        profile_loop(n);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
