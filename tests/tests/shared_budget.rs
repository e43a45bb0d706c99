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
//!
//! The same with a READ flood: the server takes each 1 MiB READ reply's data pages from the
//! shared arena (as `nfsd` does) and holds them a while. Without asking the budget first the
//! flood's reply data fills the arena and the small client's connection is closed; served
//! through a `ServerConnection` told each call's reply data (as nfsd's is told an NFS READ's
//! count), the flood waits over its share.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::collections::VecDeque;
use std::sync::Arc;

use krpc_rdma::soft::SoftConfig;
use krpc_rdma::transport::{
    Incoming, ReplySpec, RequesterEvent, Responder, ResponderEvent, ServerConnection, SharedPages,
    TransportConfig,
};
use krpc_rdma_scenarios::data::{read_call, read_reply, read_reply_bytes};
use mbuf::{Chain, HeapPageArena, PageProvider, PAGE_SIZE};
use tests::rig::{pattern, reply_for, rig_on, write_call, Rig, RigOpts, ARENA_B_BASE};

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
    /// A client of `rig` that is to make `total` calls of `len` bytes (data seeded `seed`).
    fn new(rig: Rig, total: u32, len: usize, seed: u8) -> Client {
        Client {
            rig,
            sent: 0,
            total,
            len,
            seed,
            replies: 0,
            lost: false,
            failed: Vec::new(),
        }
    }

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
            ResponderEvent::Connected(_)
            | ResponderEvent::ReverseReply { .. }
            | ResponderEvent::ReverseFailed { .. } => {}
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

/// The server's 8 MiB arena and two connections to it: the flooder (its credits cover
/// exactly the arena: alone it may fill it, not overflow it) and the small client.
fn two_connections() -> (Arc<HeapPageArena>, Rig, Rig) {
    let arena_b = Arc::new(HeapPageArena::with_base(ARENA_PAGES, ARENA_B_BASE).unwrap());
    let client_arena = |pages| Arc::new(HeapPageArena::new(pages).unwrap());
    let flood_opts = RigOpts {
        req_cfg: TransportConfig {
            max_requests: FLOOD_CREDITS,
            ..TransportConfig::default()
        },
        ..RigOpts::default()
    };
    let flood = rig_on(
        client_arena(16 * MIB / PAGE_SIZE),
        arena_b.clone(),
        flood_opts,
    );
    let small = rig_on(
        client_arena(4 * MIB / PAGE_SIZE),
        arena_b.clone(),
        RigOpts::default(),
    );
    (arena_b, flood, small)
}

fn run(shared: Option<&Arc<SharedPages>>) -> Outcome {
    let (_, mut flood, mut small) = two_connections();
    if let Some(s) = shared {
        flood.resp.set_page_share(s.join());
        small.resp.set_page_share(s.join());
    }
    let mut flood = Client::new(flood, FLOOD_CALLS, MIB, 1);
    let mut small = Client::new(small, SMALL_CALLS, SMALL, 2);
    // The flood's first call is answered at once, so its client learns the full grant.
    flood.total = 1;
    let mut held = VecDeque::new();
    let mut tally = SmallTally::default();
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
        server_lost |= tally.round(&mut small, round);
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
        small_ok: tally.ok,
        small_max_wait: tally.max_wait,
        server_lost,
        rounds: round,
    }
}

/// What the small client's rounds saw (both floods).
#[derive(Default)]
struct SmallTally {
    /// The round each outstanding WRITE was sent in, oldest first.
    sent_at: VecDeque<u32>,
    /// WRITEs handed up with the right data.
    ok: u32,
    /// Most rounds a WRITE waited between being sent and handed up.
    max_wait: u32,
}

impl SmallTally {
    /// The small client's round: from round 6 one 64 KiB WRITE at a time, each answered at
    /// once by the server after its data is checked. True if the server lost the connection.
    fn round(&mut self, small: &mut Client, round: u32) -> bool {
        if round >= 6 && small.rig.req.outstanding() == 0 {
            let before = small.sent;
            small.send_one();
            if small.sent > before {
                self.sent_at.push_back(round);
            }
        }
        let (calls, mut lost) = small.serve();
        for c in calls {
            let xid = c.xid;
            if data_of(&c, SMALL) == pattern(SMALL, 2u8.wrapping_add(xid as u8)) {
                self.ok += 1;
            }
            let sent = self.sent_at.pop_front().unwrap_or(round);
            self.max_wait = self.max_wait.max(round - sent);
            let r = reply_for(xid, b"ok");
            lost |= small.rig.resp.reply(&mut small.rig.qb, c.ctx, r).is_err();
        }
        lost
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

struct ReadOutcome {
    small: Client,
    /// READ replies whose data arrived intact, and those that did not.
    flood_ok: u32,
    flood_bad: u32,
    flood_lost: bool,
    flood_failed: Vec<String>,
    small_ok: u32,
    small_max_wait: u32,
    server_lost: bool,
    closes: (u64, u64),
    flood_waits: u64,
    rounds: u32,
}

/// The READ flood (see the module documentation); `admit`: the server asks the page budget
/// (`take_reply_pages`) before it takes a reply's data pages.
fn run_reads(shared: &Arc<SharedPages>, admit: bool) -> (ReadOutcome, Arc<HeapPageArena>) {
    let (arena_b, mut flood, mut small) = two_connections();
    let pb: Arc<dyn PageProvider> = arena_b.clone();
    small.resp.set_page_share(shared.join());
    // The flood's server is the loop every server runs: a ServerConnection, told the reply
    // data of each call (1 MiB) when it is to ask the budget for it.
    let placeholder = Responder::new(
        TransportConfig::default(),
        SoftConfig::default().resources(),
        pb.clone(),
    )
    .unwrap();
    let mut conn =
        ServerConnection::new(Box::new(std::mem::replace(&mut flood.resp, placeholder))).unwrap();
    conn.responder_mut().set_page_share(shared.join());
    if admit {
        conn = conn.with_reply_bytes(Box::new(|_| MIB));
    }
    let mut small = Client::new(small, SMALL_CALLS, SMALL, 2);
    let data = |xid: u32| pattern(MIB, 7u8.wrapping_add(xid as u8));
    let (mut sent, mut limit) = (0u32, 1u32);
    let (mut flood_ok, mut flood_bad, mut flood_lost) = (0, 0, false);
    let mut flood_failed = Vec::new();
    let mut waiting: VecDeque<Incoming> = VecDeque::new();
    let mut held: VecDeque<(u32, Incoming, Chain)> = VecDeque::new();
    let mut tally = SmallTally::default();
    let mut server_lost = false;
    let mut round = 0u32;
    while round < 10_000 {
        round += 1;
        // The flood's first READ is answered at once, so its client learns the full grant.
        if round == 3 {
            limit = FLOOD_CALLS;
        }
        while sent < limit && flood.req.outstanding() < flood.req.credits_granted() {
            let (c, spec) = read_call(&flood.pa, 1 + sent, MIB).unwrap();
            match flood.req.call(&mut flood.qa, c, spec) {
                Ok(()) => sent += 1,
                Err(e) => {
                    flood_failed.push(format!("call {}: {}", 1 + sent, e.error));
                    break;
                }
            }
        }
        server_lost |= tally.round(&mut small, round);
        // READs: handed out in order once admitted, their data taken from the shared arena
        // (a READ that finds the arena empty tries again next round), held, then answered
        // one per round.
        conn.poll(&mut flood.qb);
        server_lost |= conn.is_lost();
        while let Some(c) = conn.next_call() {
            waiting.push_back(c);
        }
        while let Some(c) = waiting.front() {
            let Ok(rep) = read_reply(&pb, c.xid, &data(c.xid)) else {
                break;
            };
            let c = waiting.pop_front().unwrap();
            held.push_back((round, c, rep));
        }
        if let Some((at, _, _)) = held.front() {
            if round - at >= HOLD_ROUNDS || round < 3 {
                let (_, c, rep) = held.pop_front().unwrap();
                if conn.reply(&mut flood.qb, c.ctx, rep).is_err() {
                    server_lost = true;
                }
            }
        }
        flood.req.poll(&mut flood.qa, &mut |e| match e {
            RequesterEvent::Reply { xid, reply } => {
                if reply.to_vec().unwrap() == read_reply_bytes(xid, &data(xid)) {
                    flood_ok += 1;
                } else {
                    flood_bad += 1;
                }
            }
            RequesterEvent::Failed { xid, error, .. } => {
                flood_failed.push(format!("{xid}: {error}"));
            }
            RequesterEvent::ConnectionLost => flood_lost = true,
            _ => {}
        });
        small.poll();
        let done = flood_ok + flood_bad == FLOOD_CALLS && small.replies == SMALL_CALLS;
        if done || flood_lost || small.lost || server_lost {
            break;
        }
    }
    drop((waiting, held));
    let closes = (conn.counters().closes, small.rig.resp.counters().closes);
    let flood_waits = conn.counters().shared_budget_waits;
    assert_eq!(conn.stats().reply_errors, 0);
    drop((conn, flood));
    (
        ReadOutcome {
            small,
            flood_ok,
            flood_bad,
            flood_lost,
            flood_failed,
            small_ok: tally.ok,
            small_max_wait: tally.max_wait,
            server_lost,
            closes,
            flood_waits,
            rounds: round,
        },
        arena_b,
    )
}

#[test]
fn a_read_flood_waits_over_its_share_and_the_other_connections_writes_are_answered() {
    let shared = SharedPages::new(ARENA_PAGES * PAGE_SIZE);
    let (o, arena_b) = run_reads(&shared, true);
    let s = &o.small;
    assert_eq!(
        (o.flood_lost, s.lost, o.server_lost, o.closes),
        (false, false, false, (0, 0)),
        "a connection was closed after {} rounds: flood {:?}, small {:?}",
        o.rounds,
        o.flood_failed,
        s.failed
    );
    assert!(o.flood_failed.is_empty() && s.failed.is_empty());
    assert_eq!((s.replies, o.small_ok), (SMALL_CALLS, SMALL_CALLS));
    // The first waits for the flood's pages to come back (at its READ reply's Send
    // completion, a round later than a WRITE's pages at its reply): three rounds at most.
    assert!(
        o.small_max_wait <= 3,
        "a small WRITE waited {} rounds",
        o.small_max_wait
    );
    // Every READ answered with its data; the flood alone filled the budget, then waited.
    assert_eq!((o.flood_ok, o.flood_bad), (FLOOD_CALLS, 0));
    assert_eq!(shared.peak(), ARENA_PAGES * PAGE_SIZE);
    assert!(o.flood_waits > 0);
    drop(o);
    assert_eq!(shared.in_use(), 0);
    assert_eq!(arena_b.in_use(), 0);
}

#[test]
fn without_asking_the_budget_a_read_flood_closes_the_other_connection() {
    // The control: the same run with the READ data taken without `take_reply_pages` (what
    // nfsd did before): the flood's reply pages, outside the budget, empty the arena and
    // the small client's next WRITE finds no page.
    let shared = SharedPages::new(ARENA_PAGES * PAGE_SIZE);
    let (o, _) = run_reads(&shared, false);
    assert!(
        o.small.lost || o.server_lost || o.closes.1 > 0,
        "the small connection survived {} rounds: the control no longer shows the hole",
        o.rounds
    );
}
