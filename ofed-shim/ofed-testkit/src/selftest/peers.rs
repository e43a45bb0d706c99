//! The in-kernel peer runs (kernel builds): the core's Requester and Responder over the
//! kernel's verbs ([`OfedQp`]) against real peers in the same machine, not against
//! themselves:
//!
//! * [`harness_server`]: our **Requester** against `userspace-harness server` (its RPC
//!   program, [`harness_rpc`], the same code on both sides): NULL; WRITE then READ at
//!   4 KiB, 4097 B, 64 KiB + 3 and 1 MiB (DDP: read chunk, RDMA Read by the server; write
//!   chunk, RDMA Write by the server), every WRITE byte checked by the server against the
//!   pattern of its offset (its reply says how many differ), every READ byte checked here;
//!   a Long Call and a Long Reply (ECHO of 16 KiB, checked); 32 WRITEs then 32 READs in
//!   flight (when the server grants 32 credits; the most seen in flight is reported and
//!   must be 32).
//! * [`harness_client`]: our **Responder** serving the harness program to `userspace-harness
//!   client` (its workloads; the client verifies READ data, the server code here WRITE
//!   data), for a given number of connections.
//!
//! Every wait is bounded: the sleeps are the glue's ([`GlueSleep`], at most 100 ms each)
//! and a run fails after [`IDLE_LIMIT`] of them without progress, or after
//! [`ACCEPT_WAITS`] without a connection (a missing peer is a FAIL line, not a hang).
//! Each run reports one line: calls, bytes verified, REG_MR / LOCAL_INV / Send With
//! Invalidate counts, and what is left (verbs objects, page references: must be none).

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;

use harness_rpc as prog;
use krpc_rdma::provider::profile::Profiled;
use krpc_rdma::transport::{
    CallError, DdpReply, ReplyError, ReplySpec, Requester, RequesterEvent, Responder,
    ServerConnection, TransportConfig, Wait,
};
use mbuf::{Chain, PageProvider};

use super::kverbs::{counts, delta, left_over, GlueSleep, VerbsLine};
use super::Counted;
use crate::loopback::{self, Sleep, SockaddrIn};
use krpc_rdma_scenarios::heap::{try_boxed, try_boxed_result, Boxed};
use ofed_shim::ffi::KrpcCounts;
use ofed_shim::{KernelPages, OfedConfig, OfedError, OfedListener, OfedQp};

/// Waits (of at most 100 ms) without progress before a run fails: 30 s.
pub const IDLE_LIMIT: u32 = 300;
/// Waits (of at most 100 ms) for a connection before a run fails: 60 s.
pub const ACCEPT_WAITS: u32 = 600;

/// What a peer run did.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    /// RPCs completed (replies received, or replies sent by the Responder).
    pub calls: u64,
    /// Bytes whose content was checked (by us or by the peer, which reports mismatches).
    pub bytes_verified: u64,
    /// Most calls in flight at once (Requester runs; 0 for the Responder's).
    pub max_in_flight: u32,
    /// Connections made.
    pub connections: u32,
    /// The transport's counters (the Requester's or the Responder's, summed).
    pub read_chunks: u64,
    /// Write chunks.
    pub write_chunks: u64,
    /// Reply chunks.
    pub reply_chunks: u64,
    /// Long Calls (sent or received).
    pub long_calls: u64,
    /// Long Replies.
    pub long_replies: u64,
    /// The C wrappers' counters over the run (`*_live`: after it).
    pub verbs: KrpcCounts,
    /// Page references not returned.
    pub pages_left: u64,
    /// Anything else the run found worth saying.
    pub note: Option<String>,
}

/// A peer run's report line.
pub struct Report {
    /// "harness-server 10.0.2.15:20049" and the like.
    pub what: String,
    /// Its figures.
    pub figures: Figures,
    /// The first failure.
    pub failure: Option<String>,
}

impl core::fmt::Display for Report {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let g = &self.figures;
        match &self.failure {
            None => write!(f, "krpc_rdma peer {}: PASS: ", self.what)?,
            Some(e) => write!(f, "krpc_rdma peer {}: FAIL: {e}; ", self.what)?,
        }
        write!(
            f,
            "connections {}, calls {}, bytes verified {}, most in flight {}; read chunks {}, \
             write chunks {}, reply chunks {}, Long Calls {}, Long Replies {}; {}, page \
             references {}",
            g.connections,
            g.calls,
            g.bytes_verified,
            g.max_in_flight,
            g.read_chunks,
            g.write_chunks,
            g.reply_chunks,
            g.long_calls,
            g.long_replies,
            VerbsLine(&g.verbs),
            g.pages_left
        )?;
        match &g.note {
            Some(n) => write!(f, "; {n}"),
            None => Ok(()),
        }
    }
}

fn config() -> OfedConfig {
    loopback::config()
}

fn kernel_pages() -> Arc<Counted> {
    Arc::new(Counted::new(Arc::new(KernelPages::new())))
}

/// Finish a run: the verbs counters since `before`, and a failure if anything is left.
fn finish(
    what: String,
    before: &KrpcCounts,
    mut figures: Figures,
    pages: &[Arc<Counted>],
    result: Result<(), String>,
) -> Report {
    figures.verbs = delta(before, &counts());
    figures.pages_left = pages.iter().map(|p| p.outstanding()).sum();
    let failure = match result {
        Err(e) => Some(e),
        Ok(()) => left_over(&figures.verbs, figures.pages_left)
            .map(|l| format!("left after the run: {l}")),
    };
    Report {
        what,
        figures,
        failure,
    }
}

fn add_counters(g: &mut Figures, c: &krpc_rdma::transport::Counters) {
    g.read_chunks += c.read_chunks;
    g.write_chunks += c.write_chunks;
    g.reply_chunks += c.reply_chunks;
    g.long_calls += c.long_calls;
    g.long_replies += c.long_replies;
}

/// The Requester side: one connection, the calls in flight, the replies received.
struct Client {
    /// The queue pair, its verbs calls and sleeps timed ([`Profiled`]: the bench's profile),
    /// on the heap (a profile is a few hundred bytes).
    qp: Boxed<Profiled<Boxed<OfedQp>>>,
    req: Boxed<Requester>,
    pages: Arc<dyn PageProvider>,
    next_xid: u32,
    /// XIDs in flight.
    inflight: Vec<u32>,
    /// Replies received and not yet taken.
    replies: Vec<(u32, Chain)>,
    max_in_flight: u32,
}

impl Client {
    fn connect(addr: &SockaddrIn, pages: Arc<dyn PageProvider>) -> Result<Client, String> {
        let cfg = config();
        let req = try_boxed("Requester::new", || {
            Requester::new(TransportConfig::default(), cfg.resources(), pages.clone())
        })
        .map_err(|e| format!("{e}"))?;
        let private = req.private_data();
        // SAFETY: NULL net is &init_net in the Linux glue; `addr` is a valid sockaddr_in
        // that lives through the call.
        let mut qp = try_boxed("connect", || unsafe {
            OfedQp::connect(core::ptr::null_mut(), addr.as_ptr(), &cfg, &private)
        })
        .map_err(|e| format!("{e}"))?;
        // SAFETY: the upcall only wakes the glue's wait queue (any context).
        unsafe { qp.set_upcall(GlueSleep.upcall(), core::ptr::null_mut()) };
        let qp = try_boxed("stage profile", || {
            Ok::<_, core::convert::Infallible>(Profiled::new(qp, ofed_shim::wait::monotonic_ns))
        })
        .map_err(|e| format!("{e}"))?;
        let mut c = Client {
            qp,
            req,
            pages,
            next_xid: 0x4b00_0001,
            inflight: Vec::new(),
            replies: Vec::new(),
            max_in_flight: 0,
        };
        let mut up = false;
        let mut waits = 0;
        while !up {
            let mut err = None;
            c.req.poll(&mut c.qp, &mut |e| match e {
                RequesterEvent::Connected(_) => up = true,
                other => err = Some(format!("{other:?}")),
            });
            if let Some(e) = err {
                return Err(format!("connecting: {e} (is the server listening?)"));
            }
            if !up {
                waits += 1;
                if waits > ACCEPT_WAITS {
                    return Err("connecting: not connected in 60 s".into());
                }
                c.wait(100);
            }
        }
        Ok(c)
    }

    /// Close: the Requester's registrations go; the connection is torn down by the drop
    /// (after the send queue drained, bounded).
    fn close(mut self) {
        self.req.close(&mut self.qp, &mut |_| {});
        let mut idle = 0;
        while self.qp.inner().sq_outstanding() > 0 && idle < IDLE_LIMIT {
            idle += 1;
            self.wait(100);
        }
    }

    /// Sleep until the queue pair has new work or `ms` pass (timed as a sleep).
    fn wait(&mut self, ms: u32) {
        self.qp
            .sleep(|q| loopback::wait_any(&GlueSleep, &mut [&mut **q], ms));
    }

    fn xid(&mut self) -> u32 {
        let x = self.next_xid;
        self.next_xid = x.wrapping_add(1);
        x
    }

    /// Poll once; wait (bounded) when nothing came. Whether anything came.
    fn pump(&mut self) -> Result<bool, String> {
        let mut evs = Vec::new();
        self.req.poll(&mut self.qp, &mut |e| evs.push(e));
        let progress = !evs.is_empty();
        for e in evs {
            match e {
                RequesterEvent::Reply { xid, reply } => {
                    self.inflight.retain(|&x| x != xid);
                    self.replies.push((xid, reply));
                }
                RequesterEvent::Failed { xid, error, .. } => {
                    return Err(format!("call {xid:#x} failed: {error}"))
                }
                RequesterEvent::ConnectionLost => return Err("the connection was lost".into()),
                RequesterEvent::Connected(_) | RequesterEvent::ReverseCall(_) => {}
            }
        }
        if !progress {
            self.wait(100);
        }
        Ok(progress)
    }

    /// Send `call` (waiting for a credit, bounded).
    fn send(&mut self, xid: u32, call: Chain, spec: ReplySpec) -> Result<(), String> {
        let (mut call, mut spec) = (call, spec);
        let mut idle = 0;
        loop {
            match self.req.call(&mut self.qp, call, spec) {
                Ok(()) => {
                    self.inflight.push(xid);
                    self.max_in_flight = self.max_in_flight.max(self.req.outstanding());
                    return Ok(());
                }
                Err(r) if matches!(r.error, CallError::NoCredit | CallError::WouldBlock) => {
                    call = r.call;
                    spec = r.reply;
                    let progress = self.pump()?;
                    idle = if progress { 0 } else { idle + 1 };
                    if idle > IDLE_LIMIT {
                        return Err(format!("call {xid:#x}: no credit in 30 s"));
                    }
                }
                Err(r) => return Err(format!("call {xid:#x} refused: {}", r.error)),
            }
        }
    }

    /// Until every call in flight has its reply (bounded); the replies, taken.
    fn settle(&mut self) -> Result<Vec<(u32, Chain)>, String> {
        let mut idle = 0;
        while !self.inflight.is_empty() {
            let progress = self.pump()?;
            idle = if progress { 0 } else { idle + 1 };
            if idle > IDLE_LIMIT {
                return Err(format!(
                    "{} calls without a reply for 30 s",
                    self.inflight.len()
                ));
            }
        }
        Ok(core::mem::take(&mut self.replies))
    }

    fn reply_of(replies: &[(u32, Chain)], xid: u32) -> Result<&Chain, String> {
        replies
            .iter()
            .find(|(x, _)| *x == xid)
            .map(|(_, c)| c)
            .ok_or(format!("no reply to {xid:#x}"))
    }

    /// WRITE `len` pattern bytes at each of `offsets`, all in flight; the server checks
    /// every byte. Bytes verified.
    fn writes(&mut self, offsets: &[u64], len: usize) -> Result<u64, String> {
        let mut xids = Vec::new();
        for &off in offsets {
            let xid = self.xid();
            let call = prog::write_call(&self.pages, xid, off, len)?;
            self.send(xid, call, ReplySpec::inline(256))?;
            xids.push((xid, off));
        }
        let replies = self.settle()?;
        for (xid, off) in xids {
            match prog::write_result(Self::reply_of(&replies, xid)?, xid)? {
                (prog::STATUS_OK, 0, n) if n as usize == len => {}
                (st, bad, n) => {
                    return Err(format!(
                        "WRITE {xid:#x} of {len} B at {off}: server status {st}, {bad} \
                         mismatched bytes, {n} written"
                    ))
                }
            }
        }
        Ok(len as u64 * offsets.len() as u64)
    }

    /// READ `len` bytes at each of `offsets` (DDP into a write chunk), all in flight; every
    /// byte checked against the pattern. Bytes verified.
    fn reads(&mut self, offsets: &[u64], len: usize) -> Result<u64, String> {
        let mut xids = Vec::new();
        let count = u32::try_from(len).map_err(|_| "READ size")?;
        for &off in offsets {
            let xid = self.xid();
            let pages = Chain::alloc_pages(&self.pages, len)
                .map_err(|e| format!("page allocation: {e}"))?;
            let spec = ReplySpec {
                max_reply: len + 256,
                ddp: Some(DdpReply {
                    pages,
                    locate: prog::locate_read,
                }),
            };
            self.send(xid, prog::read_call(xid, off, count)?, spec)?;
            xids.push((xid, off));
        }
        let replies = self.settle()?;
        for (xid, off) in xids {
            let r = Self::reply_of(&replies, xid)?;
            match prog::verify_read(r, xid, off, len, &*self.pages)? {
                0 => {}
                bad => {
                    return Err(format!(
                        "READ {xid:#x} of {len} B at {off}: {bad} bytes differ"
                    ))
                }
            }
        }
        Ok(len as u64 * offsets.len() as u64)
    }
}

/// A Requester run against the server at `addr`:`port`: connect, `calls`, close; the report.
fn requester_run(
    what: String,
    addr: [u8; 4],
    port: u16,
    calls: &mut dyn FnMut(&mut Client, &mut Figures) -> Result<(), String>,
) -> Report {
    let before = counts();
    let pages = kernel_pages();
    let mut g = Figures::default();
    let sa = SockaddrIn::new(addr, port);
    let r = Client::connect(&sa, pages.clone() as Arc<dyn PageProvider>).and_then(|mut c| {
        g.connections = 1;
        let r = calls(&mut c, &mut g);
        add_counters(&mut g, c.req.counters());
        g.max_in_flight = c.max_in_flight;
        c.close();
        r
    });
    finish(what, &before, g, &[pages], r)
}

fn dotted([a, b, c, d]: [u8; 4]) -> String {
    format!("{a}.{b}.{c}.{d}")
}

/// Our Requester against `userspace-harness server` at `addr`:`port` (see the module docs).
pub fn harness_server(addr: [u8; 4], port: u16) -> Report {
    let what = format!("harness-server {}:{port} (kernel Requester)", dotted(addr));
    requester_run(what, addr, port, &mut harness_server_calls)
}

fn harness_server_calls(c: &mut Client, g: &mut Figures) -> Result<(), String> {
    // NULL.
    for _ in 0..4 {
        let xid = c.xid();
        c.send(xid, prog::null_call(xid)?, ReplySpec::inline(256))?;
        let replies = c.settle()?;
        prog::check_reply_header(Client::reply_of(&replies, xid)?, xid)?;
        g.calls += 1;
    }
    // WRITE and READ with DDP at each size.
    for len in [4096usize, 4097, (64 << 10) + 3, 1 << 20] {
        g.bytes_verified += c.writes(&[0], len)?;
        g.bytes_verified += c.reads(&[0], len)?;
        g.calls += 2;
    }
    // Long Call and Long Reply: ECHO's argument and result are plain XDR (no DDP).
    let len = 16 << 10;
    let xid = c.xid();
    c.send(
        xid,
        prog::echo_call(xid, len)?,
        ReplySpec::inline(len + 256),
    )?;
    let replies = c.settle()?;
    prog::verify_echo(Client::reply_of(&replies, xid)?, xid, len, &*c.pages)?;
    g.calls += 1;
    g.bytes_verified += 2 * len as u64;
    // 32 in flight: WRITEs of 4097 B at 32 offsets, then READs of them.
    let offsets: Vec<u64> = (0..32u64).map(|i| i * 8192).collect();
    let credits = c.req.credits_granted();
    g.bytes_verified += c.writes(&offsets, 4097)?;
    g.bytes_verified += c.reads(&offsets, 4097)?;
    g.calls += 64;
    let cn = c.req.counters();
    let checks = [
        ("read chunks", cn.read_chunks),
        ("write chunks", cn.write_chunks),
        ("Long Calls", cn.long_calls),
        ("Long Replies (reply chunks)", cn.reply_chunks),
    ];
    if let Some((what, _)) = checks.iter().find(|(_, n)| *n == 0) {
        return Err(format!("no {what} used: {cn:?}"));
    }
    if c.max_in_flight < 32 {
        return Err(format!(
            "at most {} calls in flight (the server granted {credits} credits)",
            c.max_in_flight
        ));
    }
    Ok(())
}

/// Our Responder serving the harness program on `addr`:`port` to `conns` connections of
/// `userspace-harness client` (see the module docs).
pub fn harness_client(addr: [u8; 4], port: u16, conns: u32) -> Report {
    let what = format!("harness-client {}:{port} (kernel Responder)", dotted(addr));
    let before = counts();
    let mut g = Figures::default();
    let mut pages = Vec::new();
    let r = serve(&SockaddrIn::new(addr, port), conns, &mut g, &mut pages);
    finish(what, &before, g, &pages, r)
}

fn serve(
    sa: &SockaddrIn,
    conns: u32,
    g: &mut Figures,
    all_pages: &mut Vec<Arc<Counted>>,
) -> Result<(), String> {
    let cfg = config();
    // SAFETY: NULL net is &init_net in the Linux glue; `sa` is a valid sockaddr_in.
    let mut l = unsafe { OfedListener::bind(core::ptr::null_mut(), sa.as_ptr(), &cfg) }
        .map_err(|e| format!("listen: {e}"))?;
    for _ in 0..conns {
        let pages = kernel_pages();
        all_pages.push(pages.clone());
        serve_one(&mut l, &cfg, pages, g)?;
    }
    Ok(())
}

/// Accept one connection (within [`ACCEPT_WAITS`]) and serve it until the client goes.
#[inline(never)]
fn serve_one(
    l: &mut OfedListener,
    cfg: &OfedConfig,
    pages: Arc<Counted>,
    g: &mut Figures,
) -> Result<(), String> {
    let p: Arc<dyn PageProvider> = pages;
    let mut resp = try_boxed("Responder::new", || {
        Responder::new(TransportConfig::default(), cfg.resources(), p.clone())
    })
    .map_err(|e| format!("{e}"))?;
    let mut server = prog::Server::new(p.clone());
    let mut qp = None;
    for _ in 0..ACCEPT_WAITS {
        let gen = GlueSleep.generation();
        if let Some(q) = next_request(l) {
            qp = Some(q.map_err(|e| format!("connection request: {e}"))?);
            break;
        }
        GlueSleep.sleep(gen, 100);
    }
    let mut qp = qp.ok_or("no client connected in 60 s")?;
    // SAFETY: the upcall only wakes the glue's wait queue (any context).
    unsafe { qp.set_upcall(GlueSleep.upcall(), core::ptr::null_mut()) };
    resp.post_receives(&mut *qp);
    qp.accept(&resp.private_data())
        .map_err(|e| format!("accept: {e}"))?;
    g.connections += 1;
    let r = serve_calls(&mut qp, &mut resp, &mut server, &*p, g);
    add_counters(g, resp.counters());
    let st = &server.stats;
    g.bytes_verified += st.bytes_in;
    r?;
    if st.mismatches != 0 || st.errors != 0 {
        return Err(format!("server: {}", st.summary()));
    }
    Ok(())
}

/// The listener's next connection request, on the heap (a frame of its own: an `OfedQp` is
/// 880 bytes).
#[inline(never)]
fn next_request(l: &mut OfedListener) -> Option<Result<Boxed<OfedQp>, String>> {
    // Called through an opaque pointer so that its body (an 880-byte `OfedQp` returned by
    // value, built in place by `OfedQp::new`) stays out of this frame.
    let next: fn(&mut OfedListener) -> Option<Result<OfedQp, OfedError>> =
        core::hint::black_box(OfedListener::next_request);
    boxed_some(next(l))
}

/// `q`'s request on the heap (a frame of its own: taking the `Result` out of the `Option`
/// is a copy of the `OfedQp`).
#[inline(never)]
fn boxed_some(q: Option<Result<OfedQp, OfedError>>) -> Option<Result<Boxed<OfedQp>, String>> {
    q.map(boxed)
}

/// `q` on the heap (a frame of its own).
#[inline(never)]
fn boxed(q: Result<OfedQp, OfedError>) -> Result<Boxed<OfedQp>, String> {
    match try_boxed_result("connection request", q) {
        Ok(Ok(q)) => Ok(q),
        Ok(Err(e)) => Err(format!("{e}")),
        Err(e) => Err(format!("{e}")),
    }
}

/// Serve the client's calls over a [`ServerConnection`] (the loop every server runs:
/// replies wait in order for send resources) until the client closes the connection. A
/// frame of its own (the connection's loop and the accept path each near the kernel's 1 KiB).
#[inline(never)]
fn serve_calls(
    qp: &mut OfedQp,
    resp: &mut Responder,
    server: &mut prog::Server,
    pages: &dyn PageProvider,
    g: &mut Figures,
) -> Result<(), String> {
    let mut conn = ServerConnection::new(resp).map_err(|e| format!("server connection: {e}"))?;
    let mut idle = 0;
    loop {
        conn.poll(qp);
        let mut progress = false;
        while let Some(c) = conn.next_call() {
            progress = true;
            let bad = server.stats.mismatches;
            let reply = match server.handle(&c.call) {
                Ok(r) => r,
                Err(_) => server.system_error(c.xid)?,
            };
            if server.stats.mismatches != bad && g.note.is_none() {
                g.note = Some(where_wrong(&c.call, pages));
            }
            drop(c.call);
            match conn.reply(qp, c.ctx, reply) {
                Ok(()) => g.calls += 1,
                // The client went while we answered: the connection's end (below).
                Err(ReplyError::ConnectionLost) => {}
                Err(e) => return Err(format!("reply to {:#x}: {e:?}", c.xid)),
            }
        }
        if conn.is_lost() {
            // The client closed the connection (its run is over) or it broke: either way
            // this connection is done; the client's exit status says whether its run passed.
            return if g.calls > 0 {
                Ok(())
            } else {
                Err("the connection ended before any call".into())
            };
        }
        idle = if progress { 0 } else { idle + 1 };
        if idle > IDLE_LIMIT {
            return Err("no call for 30 s".into());
        }
        let wait = conn.wait();
        if wait == Wait::Soon || (wait == Wait::Idle && !progress) {
            loopback::wait_any(&GlueSleep, &mut [&mut *qp], wait.millis());
        }
    }
}

/// Bytes knfsd's run moves: 1 MiB + 3 (more than one knfsd READ or WRITE may carry: the
/// client continues where a short count stopped, as NFS clients do).
pub const NFS_FILE_BYTES: usize = (1 << 20) + 3;

/// Our Requester speaking NFSv3 to knfsd at `addr`:`port` (20049), with the export's root
/// handle `root` (from userspace MOUNT): NULL; GETATTR of the root (a directory); LOOKUP of
/// `krpc_src` and `krpc_dst` in it (made by the script: `krpc_src` 1 MiB + 3 random bytes,
/// `krpc_dst` empty); READ of `krpc_src` (write chunks); WRITE of those bytes to
/// `krpc_dst` (FILE_SYNC, read chunks); READ of `krpc_dst` back, compared byte for byte
/// with what was read from `krpc_src`; GETATTR of `krpc_dst` (its size). The script then
/// compares the two files from the shell (`cmp`). NFSv3 XDR: `nfs_proto::nfs3`.
pub fn knfsd(addr: [u8; 4], port: u16, root: &[u8]) -> Report {
    let what = format!("knfsd {}:{port} (kernel Requester, NFSv3)", dotted(addr));
    if root.is_empty() {
        let before = counts();
        let none = Err("no root file handle (nfs_fh=)".into());
        return finish(what, &before, Figures::default(), &[], none);
    }
    requester_run(what, addr, port, &mut |c, g| knfsd_calls(c, root, g))
}

mod nfs {
    //! The NFSv3 calls of [`super::knfsd`], over nfs-proto's XDR.
    use alloc::format;
    use alloc::string::String;
    use alloc::vec::Vec;

    use krpc_rdma::transport::{DdpReply, ReplySpec};
    use mbuf::Chain;
    use nfs_proto::chain::{data_pages_from_bytes, ddp_call};
    use nfs_proto::nfs3::{
        call_encoder, locate_read_data, CommitArgs, CommitRes, Diropargs3, Filename3, FsinfoArgs,
        FsinfoRes, Ftype3, GetattrArgs, GetattrRes, LookupArgs, LookupRes, Nfs3Res, NfsFh3,
        ReadArgs, ReadRes, StableHow, WriteHead, WriteRes, NFSPROC3_COMMIT, NFSPROC3_FSINFO,
        NFSPROC3_GETATTR, NFSPROC3_LOOKUP, NFSPROC3_NULL, NFSPROC3_READ, NFSPROC3_WRITE,
    };
    use onc_rpc::rpc::{Auth, AuthSys, ReplyHeader};
    use onc_rpc::xdr::{Decoder, Encoder};

    use super::Client;

    /// The most one READ or WRITE asks for (also capped by FSINFO's rtmax / wtmax).
    const MAX_IO: usize = 1 << 20;
    /// Room for a reply without data (the values of `krpc-rdma-session`'s NFSv3 client):
    /// under knfsd's 1024-byte inline threshold (it sends no RFC 8797 private data), so no
    /// reply chunk is registered for them.
    const SMALL_REPLY: usize = 640;
    /// READ's result besides its data: small enough for the transport to choose a write
    /// chunk (the rest of the reply inline) over a reply chunk.
    const REPLY_SLACK: usize = 256;

    fn header(xid: u32, proc_: u32) -> Encoder {
        call_encoder(
            xid,
            proc_,
            Auth::Sys(AuthSys::new(0, b"krpc_rdma", 0, 0, &[])),
        )
    }

    fn bytes(e: Encoder) -> Result<Vec<u8>, String> {
        e.finish().map_err(|e| format!("encoding a call: {e}"))
    }

    /// One call, waited for: the reply's bytes and where the results start.
    fn call(
        c: &mut Client,
        xid: u32,
        msg: Chain,
        spec: ReplySpec,
    ) -> Result<(Vec<u8>, usize), String> {
        c.send(xid, msg, spec)?;
        let replies = c.settle()?;
        let r = Client::reply_of(&replies, xid)?;
        let mut b = Vec::new();
        b.try_reserve(r.len()).map_err(|_| "reply buffer")?;
        b.resize(r.len(), 0);
        r.copydata(0, &mut b)
            .map_err(|e| format!("reply {xid:#x}: {e}"))?;
        let mut d = Decoder::new(&b);
        let h = ReplyHeader::decode(&mut d).map_err(|e| format!("reply {xid:#x}: {e}"))?;
        if h.xid() != xid || !h.is_success() {
            return Err(format!("reply {xid:#x}: not accepted: {h:?}"));
        }
        let at = d.pos();
        Ok((b, at))
    }

    fn inline_call(
        c: &mut Client,
        proc_: u32,
        args: &dyn Fn(&mut Encoder),
    ) -> Result<Vec<u8>, String> {
        let xid = c.xid();
        let mut e = header(xid, proc_);
        args(&mut e);
        let msg = Chain::from_bytes(&bytes(e)?).map_err(|e| format!("call: {e}"))?;
        let (b, at) = call(c, xid, msg, ReplySpec::inline(SMALL_REPLY))?;
        Ok(b.get(at..).unwrap_or(&[]).to_vec())
    }

    pub(super) fn null(c: &mut Client) -> Result<(), String> {
        inline_call(c, NFSPROC3_NULL, &|_| {}).map(|_| ())
    }

    /// GETATTR: (type, size).
    pub(super) fn getattr(c: &mut Client, fh: &NfsFh3) -> Result<(Ftype3, u64), String> {
        let args = GetattrArgs { object: fh.clone() };
        let r = inline_call(c, NFSPROC3_GETATTR, &|e| args.encode(e))?;
        match GetattrRes::decode(&mut Decoder::new(&r)).map_err(|e| format!("GETATTR: {e}"))? {
            Nfs3Res::Ok(ok) => Ok((ok.obj_attributes.type_, ok.obj_attributes.size)),
            Nfs3Res::Fail { status, .. } => Err(format!("GETATTR: {status:?}")),
        }
    }

    /// FSINFO: (rtmax, wtmax), each capped at [`MAX_IO`] and at least one page.
    pub(super) fn fsinfo(c: &mut Client, root: &NfsFh3) -> Result<(usize, usize), String> {
        let args = FsinfoArgs {
            fsroot: root.clone(),
        };
        let r = inline_call(c, NFSPROC3_FSINFO, &|e| args.encode(e))?;
        match FsinfoRes::decode(&mut Decoder::new(&r)).map_err(|e| format!("FSINFO: {e}"))? {
            Nfs3Res::Ok(ok) => {
                let cap = |n: u32| (n as usize).clamp(4096, MAX_IO);
                Ok((cap(ok.rtmax), cap(ok.wtmax)))
            }
            Nfs3Res::Fail { status, .. } => Err(format!("FSINFO: {status:?}")),
        }
    }

    pub(super) fn lookup(c: &mut Client, dir: &NfsFh3, name: &str) -> Result<NfsFh3, String> {
        let args = LookupArgs {
            what: Diropargs3 {
                dir: dir.clone(),
                name: Filename3(name.as_bytes().to_vec()),
            },
        };
        let r = inline_call(c, NFSPROC3_LOOKUP, &|e| args.encode(e))?;
        match LookupRes::decode(&mut Decoder::new(&r)).map_err(|e| format!("LOOKUP: {e}"))? {
            Nfs3Res::Ok(ok) => Ok(ok.object),
            Nfs3Res::Fail { status, .. } => Err(format!("LOOKUP {name}: {status:?}")),
        }
    }

    /// READ `len` bytes from offset 0, at most `max` a call (write chunks; as many calls as
    /// that and short counts need).
    pub(super) fn read(
        c: &mut Client,
        fh: &NfsFh3,
        len: usize,
        max: usize,
        calls: &mut u64,
    ) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        out.try_reserve(len).map_err(|_| "READ buffer")?;
        while out.len() < len {
            let n = (len - out.len()).min(max);
            let xid = c.xid();
            let args = ReadArgs {
                file: fh.clone(),
                offset: out.len() as u64,
                count: n as u32,
            };
            let mut e = header(xid, NFSPROC3_READ);
            args.encode(&mut e);
            let msg = Chain::from_bytes(&bytes(e)?).map_err(|e| format!("call: {e}"))?;
            let pages = Chain::alloc_pages(&c.pages, n).map_err(|e| format!("pages: {e}"))?;
            let spec = ReplySpec {
                max_reply: n + REPLY_SLACK,
                ddp: Some(DdpReply {
                    pages,
                    locate: locate_read_data,
                }),
            };
            let (b, at) = call(c, xid, msg, spec)?;
            *calls += 1;
            let mut d = Decoder::new(b.get(at..).unwrap_or(&[]));
            let h = ReadRes::decode_head(&mut d).map_err(|e| format!("READ: {e}"))?;
            if !h.status.is_ok() {
                return Err(format!("READ at {}: {:?}", out.len(), h.status));
            }
            let from = at + d.pos();
            let data = b.get(from..from + h.data_len as usize).ok_or(format!(
                "READ at {}: {} data bytes missing",
                out.len(),
                h.data_len
            ))?;
            if data.is_empty() {
                return Err(format!(
                    "READ at {}: no data (eof {}), want {len} bytes",
                    out.len(),
                    h.eof
                ));
            }
            out.extend_from_slice(data);
        }
        Ok(out)
    }

    /// WRITE `data` at offset 0, FILE_SYNC, at most `max` a call (read chunks; continuing
    /// after short counts).
    pub(super) fn write(
        c: &mut Client,
        fh: &NfsFh3,
        data: &[u8],
        max: usize,
        calls: &mut u64,
    ) -> Result<(), String> {
        let mut done = 0usize;
        while done < data.len() {
            let all = data.get(done..).unwrap_or(&[]);
            let rest = all.get(..max.min(all.len())).unwrap_or(&[]);
            let xid = c.xid();
            let head = WriteHead {
                file: fh.clone(),
                offset: done as u64,
                count: rest.len() as u32,
                stable: StableHow::FileSync,
            };
            let mut e = header(xid, NFSPROC3_WRITE);
            head.encode_head(&mut e, rest.len() as u32);
            let pages = data_pages_from_bytes(&c.pages, rest).map_err(|e| format!("pages: {e}"))?;
            let msg = ddp_call(&bytes(e)?, pages, &[]).map_err(|e| format!("WRITE call: {e}"))?;
            let (b, at) = call(c, xid, msg, ReplySpec::inline(SMALL_REPLY))?;
            *calls += 1;
            let res = WriteRes::decode(&mut Decoder::new(b.get(at..).unwrap_or(&[])))
                .map_err(|e| format!("WRITE: {e}"))?;
            match res {
                Nfs3Res::Ok(ok) if ok.count > 0 && ok.committed == StableHow::FileSync => {
                    done += ok.count as usize
                }
                Nfs3Res::Ok(ok) => {
                    return Err(format!(
                        "WRITE at {done}: count {}, committed {:?}",
                        ok.count, ok.committed
                    ))
                }
                Nfs3Res::Fail { status, .. } => return Err(format!("WRITE at {done}: {status:?}")),
            }
        }
        Ok(())
    }

    /// One call of [`super::knfsd_bench`]: the message and its reply's provisioning.
    pub(super) fn bench_call(
        c: &mut Client,
        xid: u32,
        op: super::BenchOp,
        fh: &NfsFh3,
        offset: u64,
        io: usize,
        template: Option<&Chain>,
    ) -> Result<(Chain, ReplySpec), String> {
        use super::BenchOp;
        match op {
            BenchOp::Null => {
                let msg = Chain::from_bytes(&bytes(header(xid, NFSPROC3_NULL))?)
                    .map_err(|e| format!("call: {e}"))?;
                Ok((msg, ReplySpec::inline(SMALL_REPLY)))
            }
            BenchOp::Write => {
                let head = WriteHead {
                    file: fh.clone(),
                    offset,
                    count: io as u32,
                    stable: StableHow::Unstable,
                };
                let mut e = header(xid, NFSPROC3_WRITE);
                head.encode_head(&mut e, io as u32);
                let t = template.ok_or("no WRITE pages")?;
                // The same pages for every call: shared (references), not copied.
                let pages = t.copym(0, t.len()).map_err(|e| format!("pages: {e}"))?;
                let msg =
                    ddp_call(&bytes(e)?, pages, &[]).map_err(|e| format!("WRITE call: {e}"))?;
                Ok((msg, ReplySpec::inline(SMALL_REPLY)))
            }
            BenchOp::Read => {
                let args = ReadArgs {
                    file: fh.clone(),
                    offset,
                    count: io as u32,
                };
                let mut e = header(xid, NFSPROC3_READ);
                args.encode(&mut e);
                let msg = Chain::from_bytes(&bytes(e)?).map_err(|e| format!("call: {e}"))?;
                let pages = Chain::alloc_pages(&c.pages, io).map_err(|e| format!("pages: {e}"))?;
                let spec = ReplySpec {
                    max_reply: io + REPLY_SLACK,
                    ddp: Some(DdpReply {
                        pages,
                        locate: locate_read_data,
                    }),
                };
                Ok((msg, spec))
            }
        }
    }

    /// The reply of a [`bench_call`]: accepted, NFS3_OK, the whole count moved.
    pub(super) fn bench_check(
        xid: u32,
        reply: &Chain,
        op: super::BenchOp,
        io: usize,
    ) -> Result<(), String> {
        use super::BenchOp;
        let mut b = [0u8; 256];
        let n = reply.len().min(b.len());
        let head = b.get_mut(..n).ok_or("reply")?;
        reply
            .copydata(0, head)
            .map_err(|e| format!("reply {xid:#x}: {e}"))?;
        let mut d = Decoder::new(head);
        let h = ReplyHeader::decode(&mut d).map_err(|e| format!("reply {xid:#x}: {e}"))?;
        if h.xid() != xid || !h.is_success() {
            return Err(format!("reply {xid:#x}: not accepted: {h:?}"));
        }
        match op {
            BenchOp::Null => Ok(()),
            BenchOp::Write => match WriteRes::decode(&mut d) {
                Ok(Nfs3Res::Ok(ok)) if ok.count as usize == io => Ok(()),
                Ok(Nfs3Res::Ok(ok)) => Err(format!("WRITE {xid:#x}: count {}", ok.count)),
                Ok(Nfs3Res::Fail { status, .. }) => Err(format!("WRITE {xid:#x}: {status:?}")),
                Err(e) => Err(format!("WRITE {xid:#x}: {e}")),
            },
            BenchOp::Read => {
                let r = ReadRes::decode_head(&mut d).map_err(|e| format!("READ: {e}"))?;
                if !r.status.is_ok() || r.data_len as usize != io {
                    return Err(format!(
                        "READ {xid:#x}: {:?}, {} bytes (the file must hold the whole range)",
                        r.status, r.data_len
                    ));
                }
                Ok(())
            }
        }
    }

    /// COMMIT of the whole file.
    pub(super) fn commit(c: &mut Client, fh: &NfsFh3) -> Result<(), String> {
        let args = CommitArgs {
            file: fh.clone(),
            offset: 0,
            count: 0,
        };
        let r = inline_call(c, NFSPROC3_COMMIT, &|e| args.encode(e))?;
        match CommitRes::decode(&mut Decoder::new(&r)).map_err(|e| format!("COMMIT: {e}"))? {
            Nfs3Res::Ok(_) => Ok(()),
            Nfs3Res::Fail { status, .. } => Err(format!("COMMIT: {status:?}")),
        }
    }
}

fn knfsd_calls(c: &mut Client, root: &[u8], g: &mut Figures) -> Result<(), String> {
    use nfs_proto::nfs3::{Ftype3, NfsFh3};
    let root = NfsFh3 {
        data: root.to_vec(),
    };
    nfs::null(c)?;
    g.calls += 1;
    let (t, _) = nfs::getattr(c, &root)?;
    g.calls += 1;
    if t != Ftype3::Dir {
        return Err(format!("GETATTR of the root: {t:?}, not a directory"));
    }
    let (rtmax, wtmax) = nfs::fsinfo(c, &root)?;
    g.calls += 1;
    let src = nfs::lookup(c, &root, "krpc_src")?;
    let dst = nfs::lookup(c, &root, "krpc_dst")?;
    g.calls += 2;
    let data = nfs::read(c, &src, NFS_FILE_BYTES, rtmax, &mut g.calls)?;
    nfs::write(c, &dst, &data, wtmax, &mut g.calls)?;
    let back = nfs::read(c, &dst, NFS_FILE_BYTES, rtmax, &mut g.calls)?;
    if back != data {
        let first = back.iter().zip(&data).position(|(a, b)| a != b);
        return Err(format!(
            "krpc_dst read back differs from what was written ({} vs {} bytes, first difference at {first:?})",
            back.len(),
            data.len()
        ));
    }
    g.bytes_verified += back.len() as u64;
    let note = format!("knfsd: FSINFO rtmax {rtmax}, wtmax {wtmax} (capped at 1 MiB)");
    g.note = Some(note);
    let (_, size) = nfs::getattr(c, &dst)?;
    g.calls += 1;
    let cn = c.req.counters();
    if cn.read_chunks == 0 || cn.write_chunks == 0 {
        return Err(format!(
            "WRITE data not through read chunks or READ data not through write chunks: {cn:?}"
        ));
    }
    if size != NFS_FILE_BYTES as u64 {
        return Err(format!(
            "GETATTR of krpc_dst: size {size}, wrote {NFS_FILE_BYTES}"
        ));
    }
    Ok(())
}

/// What [`knfsd_bench`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchOp {
    /// NULL calls (`mib` × 1024 of them).
    Null,
    /// 1 MiB WRITEs (UNSTABLE, as the Linux client's O_DIRECT writes) over `mib` MiB of
    /// `krpc_bench`, then one COMMIT.
    Write,
    /// 1 MiB READs over `mib` MiB of `krpc_bench` (write chunks).
    Read,
}

/// Our Requester as a benchmark against knfsd at `addr`:`port` (root handle `root`): `op`
/// with `depth` calls in flight over `mib` MiB of the file `krpc_bench` in the export (the
/// script makes it). The data phase is timed with the kernel's monotonic clock; the report's
/// note says `… in N ms: R MB/s` (or calls/s). WRITE data pages are made once and shared by
/// every call (no copy per call, as O_DIRECT pins the caller's pages); READ data lands in
/// fresh pages per call. Every reply is checked (status, count).
pub fn knfsd_bench(
    addr: [u8; 4],
    port: u16,
    root: &[u8],
    op: BenchOp,
    depth: u32,
    mib: u32,
) -> Report {
    let what = format!(
        "knfsd-bench {}:{port} ({op:?}, depth {depth}, {mib} MiB; kernel Requester, NFSv3)",
        dotted(addr)
    );
    let root = nfs_proto::nfs3::NfsFh3 {
        data: root.to_vec(),
    };
    requester_run(what, addr, port, &mut |c, g| {
        bench_calls(c, g, &root, op, depth.clamp(1, 64), mib.max(1))
    })
}

fn bench_calls(
    c: &mut Client,
    g: &mut Figures,
    root: &nfs_proto::nfs3::NfsFh3,
    op: BenchOp,
    depth: u32,
    mib: u32,
) -> Result<(), String> {
    let file = nfs::lookup(c, root, "krpc_bench")?;
    let (rtmax, wtmax) = nfs::fsinfo(c, root)?;
    let io = match op {
        BenchOp::Read => rtmax,
        _ => wtmax,
    };
    let total = u64::from(mib) << 20;
    let n = match op {
        BenchOp::Null => u64::from(mib) * 1024,
        _ => total / io as u64,
    };
    let template = match op {
        BenchOp::Write => Some(
            nfs_proto::chain::data_pages_from_bytes(&c.pages, &alloc::vec![0x5au8; io])
                .map_err(|e| format!("pages: {e}"))?,
        ),
        _ => None,
    };
    let t0 = ofed_shim::wait::monotonic_ns();
    // The data phase's profile starts here.
    let _ = c.qp.delta();
    let mut sent = 0u64;
    let mut done = 0u64;
    while done < n {
        while sent < n && (c.inflight.len() as u32) < depth {
            let off = sent * io as u64;
            let xid = c.xid();
            let (msg, spec) = nfs::bench_call(c, xid, op, &file, off, io, template.as_ref())?;
            c.send(xid, msg, spec)?;
            sent += 1;
        }
        let mut idle = 0;
        while c.replies.is_empty() {
            idle = if c.pump()? { 0 } else { idle + 1 };
            if idle > IDLE_LIMIT {
                return Err(format!(
                    "{} calls without a reply for 30 s",
                    c.inflight.len()
                ));
            }
        }
        for (xid, reply) in core::mem::take(&mut c.replies) {
            nfs::bench_check(xid, &reply, op, io)?;
            done += 1;
        }
    }
    if op == BenchOp::Write {
        nfs::commit(c, &file)?;
    }
    let ns = ofed_shim::wait::monotonic_ns().saturating_sub(t0).max(1);
    let prof = profile_line(&mut c.qp);
    g.calls += n + 2;
    let ms = ns / 1_000_000;
    g.note = Some(match op {
        BenchOp::Null => format!(
            "bench: {n} NULL calls, depth {depth}, in {ms} ms: {} calls/s; stage profile {prof}",
            n * 1_000_000_000 / ns
        ),
        _ => {
            // MiB/s in tenths.
            let t = u64::try_from((u128::from(total) * 10_000_000_000 / u128::from(ns)) >> 20)
                .unwrap_or(u64::MAX);
            format!(
                "bench: {op:?} {mib} MiB in {io}-byte calls, depth {depth}, in {ms} ms: {}.{} \
                 MiB/s; stage profile {prof}",
                t / 10,
                t % 10
            )
        }
    });
    Ok(())
}

/// The queue pair's stage profile since the last `delta`, as one line (a frame of its own:
/// a profile is a few hundred bytes).
#[inline(never)]
fn profile_line(qp: &mut Profiled<Boxed<OfedQp>>) -> String {
    format!("{}", qp.delta())
}

/// Where a WRITE call's data differs from the pattern of its offset, page by page (4 KiB
/// of the data each): for the report of the first mismatched WRITE.
fn where_wrong(call: &Chain, pages: &dyn PageProvider) -> String {
    let mut w = [0u8; 12];
    if call.copydata(prog::CALL_HEADER_LEN, &mut w).is_err() {
        return "a WRITE too short to say".into();
    }
    let [o0, o1, o2, o3, o4, o5, o6, o7, l0, l1, l2, l3] = w;
    let off = u64::from_be_bytes([o0, o1, o2, o3, o4, o5, o6, o7]);
    let len = u32::from_be_bytes([l0, l1, l2, l3]) as usize;
    // Per 4 KiB piece of the data: bytes that differ.
    let mut bad: Vec<(usize, u64)> = Vec::new();
    let r = prog::walk(call, prog::WRITE_DATA_POS, len, pages, &mut |at, b| {
        let n = prog::pattern_mismatches(off + at as u64, b);
        if n > 0 {
            let page = at / 4096;
            match bad.last_mut() {
                Some((p, m)) if *p == page => *m += n,
                _ => bad.push((page, n)),
            }
        }
    });
    if let Err(e) = r {
        return format!("WRITE data at {off}: {e}");
    }
    let first = bad.first().map_or(0, |b| b.0);
    let last = bad.last().map_or(0, |b| b.0);
    format!(
        "first mismatched WRITE: {len} B at offset {off}, {} of its 4 KiB pieces differ (pieces \
         {first}..={last}: data bytes {}..{})",
        bad.len(),
        first * 4096,
        (last + 1) * 4096
    )
}

/// The C entry point of the peer runs: `kind` 1 [`harness_server`], 2 [`harness_client`]
/// (`conns` connections), 3 [`knfsd`] (root handle `fh`), 4 / 5 / 6 [`knfsd_bench`] WRITE /
/// READ / NULL (`conns` calls in flight, `mib` MiB); the report
/// line into `report` (`len` bytes, NUL-terminated). 0 on PASS, -EIO (-5) on FAIL, -EINVAL
/// (-22) for bad arguments.
///
/// # Safety
/// `report` valid for writes of `len` bytes; `fh` valid for reads of `fh_len` bytes (or
/// `fh_len` 0). Process context (the runs sleep).
#[no_mangle]
pub unsafe extern "C" fn krpc_rdma_peer(
    report_buf: *mut u8,
    len: usize,
    kind: u32,
    addr_be: u32,
    port: u32,
    conns: u32,
    fh: *const u8,
    fh_len: usize,
    mib: u32,
) -> i32 {
    if report_buf.is_null() || len == 0 {
        return -22;
    }
    // SAFETY: the caller gives `len` writable bytes at `report_buf`.
    let buf = unsafe { core::slice::from_raw_parts_mut(report_buf, len) };
    let fh: &[u8] = if fh.is_null() || fh_len == 0 {
        &[]
    } else {
        // SAFETY: the caller gives `fh_len` readable bytes at `fh`.
        unsafe { core::slice::from_raw_parts(fh, fh_len) }
    };
    let Ok(port) = u16::try_from(port) else {
        return -22;
    };
    let addr = addr_be.to_ne_bytes();
    let rep = match kind {
        1 => harness_server(addr, port),
        2 => harness_client(addr, port, conns.max(1)),
        3 => knfsd(addr, port, fh),
        4 => knfsd_bench(addr, port, fh, BenchOp::Write, conns, mib),
        5 => knfsd_bench(addr, port, fh, BenchOp::Read, conns, mib),
        6 => knfsd_bench(addr, port, fh, BenchOp::Null, conns, mib),
        _ => Report {
            what: format!("kind {kind}"),
            figures: Figures::default(),
            failure: Some("not implemented in this module".into()),
        },
    };
    let mut line = super::Line { buf, len: 0 };
    {
        use core::fmt::Write;
        let _ = write!(line, "{rep}");
    }
    let n = line.len;
    if let Some(nul) = line.buf.get_mut(n) {
        *nul = 0;
    }
    if rep.failure.is_some() {
        -5
    } else {
        0
    }
}
