//! `provider::profile::Profiled`, the stage profile at the provider boundary, over the
//! software RC provider: RDMA Reads of DDP WRITE-like calls are counted and timed from post to
//! completion, Sends of replies likewise, and the stages add up to no more than the wall time.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::sync::atomic::{AtomicU64, Ordering};

use krpc_rdma::provider::profile::{Profiled, StageProfile};
use krpc_rdma::transport::{ReplySpec, RequesterEvent};
use tests::rig::{pattern, reply_for, rig, write_call, Rig};

/// A clock that moves 1 µs at every reading: every timed call takes at least that.
static NOW: AtomicU64 = AtomicU64::new(0);
fn tick() -> u64 {
    NOW.fetch_add(1000, Ordering::Relaxed)
}

const MIB: usize = 1 << 20;

#[test]
fn reads_and_replies_are_timed_and_stages_fit_in_the_wall_time() {
    let r = rig();
    let mut rig = Rig {
        req: r.req,
        resp: r.resp,
        qa: r.qa,
        qb: Profiled::new(r.qb, tick),
        arena_a: r.arena_a,
        arena_b: r.arena_b,
        pa: r.pa,
        pb: r.pb,
    };
    let data = pattern(MIB, 7);
    // One at a time: the first call has one credit until the grant is learned.
    let mut replies = 0;
    for xid in 1..=3 {
        let call = write_call(&rig.pa, xid, &data);
        rig.req
            .call(&mut rig.qa, call, ReplySpec::inline(512))
            .unwrap();
        let ev = rig.run(&mut |c| {
            // xid, 8 bytes of arguments, the length word, the data, the 8-byte tail.
            assert_eq!(c.call.len(), 4 + 8 + 4 + MIB + 8, "the whole call came");
            reply_for(c.xid, b"ok")
        });
        replies += ev
            .iter()
            .filter(|e| matches!(e, RequesterEvent::Reply { .. }))
            .count();
    }
    assert_eq!(replies, 3);
    // A quiet sleep, as a loop would take one.
    rig.qb.sleep(|_| {
        tick();
    });
    let p = rig.qb.profile();
    assert_eq!(
        p.read_bytes,
        3 * MIB as u64,
        "every byte of the read chunks"
    );
    assert!(p.post_read.count >= 3, "{p:?}");
    // The soft provider's Reads are signaled, one chain per piece of the chunk.
    assert_eq!(p.read_wait.count, p.post_read.count, "{p:?}");
    assert!(p.read_wait.mean_ns() >= 1000, "{p:?}");
    assert!(p.post_send.count >= 3, "the replies: {p:?}");
    assert_eq!(p.recvs, 3, "{p:?}");
    assert_eq!(p.sleep.count, 1);
    assert_eq!(p.write_bytes, 0);
    assert_eq!(p.untimed, 0);
    assert!(p.poll_cq.count > 0 && p.post_recv.count > 0, "{p:?}");
    assert!(p.accounted_ns() <= p.wall_ns, "{p:?}");
    assert_eq!(p.other_ns(), p.wall_ns - p.accounted_ns());
    let line = p.to_string();
    assert!(line.starts_with("wall 0."), "{line}");
    assert!(
        line.contains(" post_read ")
            && line.contains(&format!("; read_wait {} x ", p.read_wait.count)),
        "{line}"
    );
    assert!(
        !line.contains("post_write"),
        "stages without calls are left out: {line}"
    );

    // Two connections' profiles add.
    let mut sum = StageProfile::default();
    sum.add(&p);
    sum.add(&p);
    assert_eq!(sum.read_bytes, 6 * MIB as u64);
    assert_eq!(sum.read_wait.count, 2 * p.read_wait.count);
    assert_eq!(sum.wall_ns, 2 * p.wall_ns);
    assert_eq!(sum.other_ns(), 2 * p.other_ns());
    // And one taken later less one taken earlier is what happened in between.
    assert_eq!(sum.since(&p), p);
    assert_eq!(p.since(&sum), StageProfile::default(), "never below zero");

    // The machine-read names: every figure once, the stages' shares adding up to the wall.
    let f = p.fields();
    let get = |k: &str| f.iter().find(|(n, _)| *n == k).unwrap().1;
    assert_eq!(get("read_bytes"), 3 * MIB as u64);
    assert_eq!(get("read_wait_n"), p.read_wait.count);
    let staged: u64 = f
        .iter()
        .filter(|(n, _)| n.ends_with("_ns") && !n.contains("wait") && *n != "wall_ns")
        .map(|(_, v)| v)
        .sum();
    assert_eq!(staged, get("wall_ns"), "other + the stages = the wall time");
    let mut names: Vec<&str> = f.iter().map(|(n, _)| *n).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), f.len());
}

#[test]
fn an_empty_profile_prints_and_divides_by_nothing() {
    let p = StageProfile::default();
    assert_eq!(p.to_string(), "wall 0.000 s: other 0.0%");
    assert_eq!(p.read_wait.mean_ns(), 0);
}
