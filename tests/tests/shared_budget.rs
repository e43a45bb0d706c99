//! Two connections of one server whose Responders take their RDMA-Read pages from one arena
//! (as `nfsd`'s connections share its registered arena), over the software RC provider.
//! Deterministic: the soft provider executes work at post time, the test is the server loop.
//!
//! One connection floods: 1 MiB WRITEs as fast as its 8 credits allow, the server holding
//! each call's pages for a while before answering (a slow backend). The other sends ordinary
//! 64 KiB WRITEs. Each connection's own DDP budget (64 MiB) is far above the 8 MiB arena.
//! Without a shared budget the flood, inside its own budget, takes the whole arena, and the
//! other connection's first WRITE finds no page: that connection is closed. With the server-wide [`SharedPages`] budget the flooder alone
//! still fills the whole arena, then waits over its fair share once the other connection
//! asks; every small WRITE is answered, nobody is closed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::collections::VecDeque;
use std::sync::Arc;

use krpc_rdma::transport::{
    Incoming, ReplySpec, RequesterEvent, ResponderEvent, SharedPages, TransportConfig,
};
use krpc_rdma_tests::common::{pattern, reply_for, rig_on, write_call, Rig, RigOpts, ARENA_B_BASE};
use mbuf::{HeapPageArena, PAGE_SIZE};

const MIB: usize = 1 << 20;
/// The server's arena: 8 MiB.
const ARENA_PAGES: usize = 8 * MIB / PAGE_SIZE;
const FLOOD_CALLS: u32 = 48;
/// The flooder's 1 MiB calls in flight: the whole arena.
const FLOOD_CREDITS: u32 = 8;
const SMALL_CALLS: u32 = 32;
const SMALL: usize = 64 * 1024;
/// Rounds the server holds a flood call's pages before answering it.
const HOLD_ROUNDS: u32 = 3;

/// The arguments' data of a `write_call` as the server received it.
fn data_of(c: &Incoming, len: usize) -> Vec<u8> {
    let b = c.call.to_vec().unwrap();
    b[16..16 + len].to_vec()
}

struct Client {
    rig: Rig,
    sent: u32,
    total: u32,
    len: usize,
    seed: u8,
    replies: u32,
    lost: bool,
    failed: Vec<String>,
}

impl Client {
    /// Send as many calls as the credits allow.
    fn send(&mut self) {
        while self.sent < self.total && self.rig.req.outstanding() < self.rig.req.credits_granted()
        {
            let xid = 1 + self.sent;
            let data = pattern(self.len, self.seed.wrapping_add(xid as u8));
            let c = write_call(&self.rig.pa, xid, &data);
            match self
                .rig
                .req
                .call(&mut self.rig.qa, c, ReplySpec::inline(512))
            {
                Ok(()) => self.sent += 1,
                Err(e) => {
                    self.failed.push(format!("call {xid}: {}", e.error));
                    break;
                }
            }
        }
    }

    fn poll(&mut self) {
        let (mut replies, mut lost, mut failed) = (0, false, Vec::new());
        self.rig.req.poll(&mut self.rig.qa, &mut |e| match e {
            RequesterEvent::Reply { .. } => replies += 1,
            RequesterEvent::Failed { xid, error, .. } => failed.push(format!("{xid}: {error}")),
            RequesterEvent::ConnectionLost => lost = true,
            _ => {}
        });
        self.replies += replies;
        self.lost |= lost;
        self.failed.extend(failed);
    }

    /// The server side: poll the Responder, collecting calls.
    fn serve(&mut self) -> (Vec<Incoming>, bool) {
        let (mut calls, mut lost) = (Vec::new(), false);
        self.rig.resp.poll(&mut self.rig.qb, &mut |e| match e {
            ResponderEvent::Call(c) => calls.push(c),
            ResponderEvent::ConnectionLost => lost = true,
            ResponderEvent::Connected(_) => {}
        });
        (calls, lost)
    }
}

struct Outcome {
    flood: Client,
    small: Client,
    /// Small WRITEs handed up with the right data.
    small_ok: u32,
    /// Most rounds a small WRITE waited between being sent and handed up.
    small_max_wait: u32,
    server_lost: bool,
    rounds: u32,
}

fn run(shared: Option<&Arc<SharedPages>>) -> Outcome {
    let arena_b = Arc::new(HeapPageArena::with_base(ARENA_PAGES, ARENA_B_BASE).unwrap());
    let client_arena = |pages| Arc::new(HeapPageArena::new(pages).unwrap());
    // The flooder's credits cover exactly the arena: alone it may fill it, not overflow it.
    let flood_opts = RigOpts {
        req_cfg: TransportConfig {
            max_requests: FLOOD_CREDITS,
            ..TransportConfig::default()
        },
        ..RigOpts::default()
    };
    let mut flood = rig_on(
        client_arena(16 * MIB / PAGE_SIZE),
        arena_b.clone(),
        flood_opts,
    );
    let mut small = rig_on(
        client_arena(4 * MIB / PAGE_SIZE),
        arena_b.clone(),
        RigOpts::default(),
    );
    if let Some(s) = shared {
        flood.resp.set_page_share(s.join());
        small.resp.set_page_share(s.join());
    }
    let client = |rig, total, len, seed| Client {
        rig,
        sent: 0,
        total,
        len,
        seed,
        replies: 0,
        lost: false,
        failed: Vec::new(),
    };
    let mut flood = client(flood, FLOOD_CALLS, MIB, 1);
    let mut small = client(small, SMALL_CALLS, SMALL, 2);
    // The flood's first call is answered at once, so its client learns the full grant.
    flood.total = 1;
    let (mut held, mut small_ok, mut small_max_wait) = (VecDeque::new(), 0, 0);
    let mut small_sent_at = VecDeque::new();
    let mut server_lost = false;
    let mut round = 0u32;
    while round < 10_000 {
        round += 1;
        // Clients: the flooder keeps every credit busy; the small client starts once the
        // flood has filled the arena, one call at a time.
        if round == 3 {
            flood.total = FLOOD_CALLS;
        }
        flood.send();
        if round >= 6 && small.rig.req.outstanding() == 0 {
            let before = small.sent;
            small.send_one();
            if small.sent > before {
                small_sent_at.push_back(round);
            }
        }
        // Server: small calls answered at once, after checking their data.
        let (calls, lost) = small.serve();
        server_lost |= lost;
        for c in calls {
            let xid = c.xid;
            if data_of(&c, SMALL) == pattern(SMALL, 2u8.wrapping_add(xid as u8)) {
                small_ok += 1;
            }
            let sent = small_sent_at.pop_front().unwrap_or(round);
            small_max_wait = small_max_wait.max(round - sent);
            small
                .rig
                .resp
                .reply(&mut small.rig.qb, c.ctx, reply_for(xid, b"ok"))
                .unwrap();
        }
        // Flood calls: held HOLD_ROUNDS rounds (their pages busy), then answered, one per round.
        let (calls, lost) = flood.serve();
        server_lost |= lost;
        for c in calls {
            held.push_back((round, c));
        }
        if let Some((at, _)) = held.front() {
            if round - at >= HOLD_ROUNDS || round < 3 {
                let (_, c) = held.pop_front().unwrap();
                let xid = c.xid;
                let r = reply_for(xid, b"ok");
                if flood.rig.resp.reply(&mut flood.rig.qb, c.ctx, r).is_err() {
                    server_lost = true;
                }
            }
        }
        flood.poll();
        small.poll();
        let done = flood.replies == FLOOD_CALLS && small.replies == SMALL_CALLS;
        if done || flood.lost || small.lost || server_lost {
            break;
        }
    }
    drop(held);
    Outcome {
        flood,
        small,
        small_ok,
        small_max_wait,
        server_lost,
        rounds: round,
    }
}

impl Client {
    fn send_one(&mut self) {
        let total = self.total;
        self.total = total.min(self.sent + 1);
        self.send();
        self.total = total;
    }
}

#[test]
fn a_flooding_connection_waits_over_its_share_and_the_other_connections_writes_are_answered() {
    let shared = SharedPages::new(ARENA_PAGES * PAGE_SIZE);
    let o = run(Some(&shared));
    let (f, s) = (&o.flood, &o.small);
    let closes = (f.rig.resp.counters().closes, s.rig.resp.counters().closes);
    assert_eq!(
        (f.lost, s.lost, o.server_lost, closes),
        (false, false, false, (0, 0)),
        "a connection was closed after {} rounds: flood {:?}, small {:?}",
        o.rounds,
        f.failed,
        s.failed
    );
    assert!(
        f.failed.is_empty() && s.failed.is_empty(),
        "{:?} {:?}",
        f.failed,
        s.failed
    );
    // Every small WRITE answered, its data intact, none waiting long for pages: the first
    // waits for one flood call to end, the others find room under the flooder's cap.
    assert_eq!((s.replies, o.small_ok), (SMALL_CALLS, SMALL_CALLS));
    assert!(
        o.small_max_wait <= 2,
        "a small WRITE waited {} rounds",
        o.small_max_wait
    );
    assert_eq!(f.replies, FLOOD_CALLS, "the flood finished too");
    // The flooder alone used the whole arena, then waited over its share.
    assert_eq!(shared.peak(), ARENA_PAGES * PAGE_SIZE);
    assert!(f.rig.resp.counters().shared_budget_waits > 0);
    // Everything came back.
    assert_eq!(shared.in_use(), 0);
    assert_eq!(f.rig.arena_b.in_use(), 0);
}
