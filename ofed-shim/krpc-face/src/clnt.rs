//! The Rust half of `clnt_rdma`, the kernel RPC client transport (`CLIENT *` with
//! `struct clnt_ops`, `c/krpc_rdma_clnt.c`): one connection's [`Requester`] over an
//! [`FaceQp`](crate::qp::FaceQp) (the verbs backend, or the software provider), behind
//! the opaque `struct krpc_clnt` the C side holds.
//!
//! The C side owns the `CLIENT`, its lock (an sx), the XID, the RPC call header and the
//! sleeping; every `krpc_clnt_*` entry point below is called with that lock held, allocates
//! with `M_NOWAIT` (the bridge too) and may sleep only inside the verbs (`rdma_disconnect`,
//! an MR reset). What happens here:
//!
//! * **send** (`krpc_clnt_send`): the header mbuf and the caller's `args` chain are walked
//!   through the [`MbufBridge`] (`args` directly, so the DDP marker keeps its `M_PROTO1`;
//!   M_EXTPG pages by reference) into one [`Chain`]; the [`ReplyHook`] provisions the reply
//!   ([`ReplySpec`]: inline, or a write chunk over pages for a READ-like result);
//!   [`Requester::call`]. No credit or no send resource: `KRPC_CLNT_AGAIN`, the caller waits
//!   (back-pressure, no queue here); any other refusal maps through
//!   [`CallError::rpc_err`] with [`Phase::Send`].
//! * **poll** (`krpc_clnt_poll` / `krpc_clnt_reap`): [`Requester::poll`]; every call's end
//!   is kept for its caller (a table allocated once, `max_requests` entries), the callers
//!   whose calls ended are counted so the C side wakes them; the CQ notification is
//!   re-armed before a caller sleeps. The caller's own reply: the RPC reply header is parsed
//!   (checked: it is peer input) into an `enum clnt_stat` as `_seterr_reply` does, the
//!   results past it go back through the bridge as an mbuf chain (DDP data as M_EXTPG
//!   mbufs over the pages the responder wrote; in the **stock-NFS mode**,
//!   [`KrpcClnt::set_stock`], copied into ordinary mbufs, counted).
//! * **abandon** (timeout, signal): [`Requester::abandon`] revokes the call's registrations
//!   before returning; **close**: [`Requester::close`].
//! * **backchannel** (RFC 8167, Macklem's `cbslots`): a Requester made with
//!   `max_reverse_requests` > 0 enables `cbslots` reverse slots ([`KrpcClnt::set_cbslots`],
//!   `CLSET_RDMA_CBSLOTS`; a dialed client on every connection it makes). Reverse calls are
//!   queued (a table allocated once, `max_reverse_requests` entries) for the backchannel
//!   `SVCXPRT` the caller registered (`CLSET_BACKCHANNEL` with an xprt from
//!   `svc_rdma_create_backchannel`, as clnt_vc hands a CALL to `ct_backchannelxprt`), whose
//!   `xp_recv` takes them as `struct krpc_svc_call` + an mbuf chain (`krpc_clnt_bc_recv`) and
//!   whose `xp_reply` answers them with [`Requester::reverse_reply`] (`krpc_clnt_bc_reply`).
//!   With no backchannel registered, a reverse call's context is dropped: the transport
//!   answers `SYSTEM_ERR` (the requester is polled again at once so that it goes out now).
//! * **dialed** clients ([`KrpcClnt::dialed`], C `krpc_clnt_dial`): the client makes its
//!   connection itself and, reconnecting, makes it again after a loss, resending the calls
//!   owed a reply with their XIDs (see [`crate::dial`]); `krpc_clnt_link` drives it.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ffi::c_void;

use krpc_rdma::transport::kernel::{ClntStat, Errno, Phase};
use krpc_rdma::transport::{
    CallError, CallRejected, Reconnect, ReplySpec, Requester, RequesterEvent, ReverseCall,
    ReverseCtx, TransportConfig,
};
use mbuf::{Chain, PageProvider};
use onc_rpc::rpc::{AcceptStat, Rejected};
use onc_rpc::svc;
use onc_rpc::view::{ReplyView, MAX_CALL_HEADER, MAX_REPLY_HEADER};
use onc_rpc::xdr::Decoder;

use crate::dial::{FaceDialer, Link, LinkState, OfedDialer};
use crate::ffi::{
    self, FbsdClient, FbsdMbuf, KrpcClntHandle, KrpcClntRes, KrpcClntStats, KrpcSvcCall,
};
use crate::head::Head;
use crate::mbuf_bridge::{BridgeError, MbufBridge, MbufChain};
use crate::qp::FaceQp;
use ofed_shim::{KernelPages, OfedConfig};

/// How the reply of a call is provisioned, from the call (its RPC header and arguments):
/// the Upper-Layer Binding's hook (for NFS, nfs-proto's RFC 8267 table).
pub type ReplyHook = fn(&Chain, &Arc<dyn PageProvider>) -> ReplySpec;

/// FreeBSD errno values used here without a [`CallError`].
const EINVAL: i32 = Errno::EINVAL.freebsd();
const ENOMEM: i32 = Errno::ENOMEM.freebsd();
const EBADMSG: i32 = Errno::EBADMSG.freebsd();
const ENOTCONN: i32 = Errno::ENOTCONN.freebsd();

#[derive(Debug)]
enum End {
    Reply(Chain),
    Failed(CallError),
}

/// One connection's client state (the C side's `struct krpc_clnt`).
pub struct KrpcClnt {
    qp: Box<dyn FaceQp>,
    req: Box<Requester>,
    pages: Arc<dyn PageProvider>,
    bridge: MbufBridge,
    /// The reply provisioning; `None`: every reply inline in at most `max_reply` bytes.
    hook: Option<ReplyHook>,
    max_reply: usize,
    /// A dialed client's dialer and connection state (`None`: connected by the caller).
    link: Option<Box<Link>>,
    /// The requesters' configuration (a dialed client makes one per connection).
    tcfg: TransportConfig,
    /// The C side's upcall and its argument (an address), set again on every new queue pair.
    upcall: Option<(extern "C" fn(*mut c_void), usize)>,
    /// Calls that ended, kept for their callers.
    ended: Vec<(u32, End)>,
    /// The first bytes of a reply, where its RPC header is decoded.
    head: Head,
    lost: bool,
    /// The stock-NFS mode (`clnt_rdma_set_stock`): results in plain mbufs only.
    stock: bool,
    stats: KrpcClntStats,
    /// The backchannel (RFC 8167 reverse calls for the backchannel SVCXPRT).
    bc: Backchannel,
}

/// The client's backchannel: reverse slots, reverse calls queued for the backchannel
/// SVCXPRT's `xp_recv`, and the contexts of those handed up and not yet answered. Both
/// tables are allocated once, `max_reverse_requests` entries each.
#[derive(Debug, Default)]
struct Backchannel {
    /// Reverse slots to enable on every connection (`cbslots`).
    slots: u32,
    /// Most slots: the requester's `max_reverse_requests`.
    max: u32,
    /// A backchannel SVCXPRT is registered (`CLSET_BACKCHANNEL`).
    on: bool,
    /// The slots are to be enabled on the connection just made.
    reslot: bool,
    /// A reverse call's context was dropped during a poll: poll again so that its
    /// `SYSTEM_ERR` goes out now.
    dropped: bool,
    /// Reverse calls waiting for `xp_recv`.
    queued: VecDeque<ReverseCall>,
    /// Reverse calls handed up, by XID, waiting for `xp_reply`.
    handed: Vec<(u32, ReverseCtx)>,
}

impl Backchannel {
    /// Tables for `max` reverse calls.
    fn new(max: u32) -> Result<Self, BridgeError> {
        let mut bc = Backchannel {
            max,
            ..Backchannel::default()
        };
        let n = max as usize;
        bc.queued
            .try_reserve_exact(n)
            .map_err(|_| BridgeError::NoMemory)?;
        bc.handed
            .try_reserve_exact(n)
            .map_err(|_| BridgeError::NoMemory)?;
        Ok(bc)
    }

    /// A reverse call from the requester: queued for the backchannel xprt, or (none
    /// registered, or no room: more calls than slots, impossible) dropped, which makes the
    /// transport answer it `SYSTEM_ERR`.
    fn take(&mut self, rc: ReverseCall) {
        if self.on && self.queued.len() < self.queued.capacity() {
            self.queued.push_back(rc);
        } else {
            drop(rc);
            self.dropped = true;
        }
    }

    /// The connection is gone: every reverse call on it is dead (its context stale, dropping
    /// it does nothing).
    fn lost(&mut self) {
        self.queued.clear();
        self.handed.clear();
    }

    /// The backchannel xprt goes: what it did not answer is answered `SYSTEM_ERR`.
    fn off(&mut self) {
        self.on = false;
        self.dropped |= !self.queued.is_empty() || !self.handed.is_empty();
        self.queued.clear();
        self.handed.clear();
    }

    fn take_handed(&mut self, xid: u32) -> Option<ReverseCtx> {
        let i = self.handed.iter().position(|(x, _)| *x == xid)?;
        Some(self.handed.swap_remove(i).1)
    }
}

impl core::fmt::Debug for KrpcClnt {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KrpcClnt")
            .field("req", &self.req)
            .field("ended", &self.ended.len())
            .field("lost", &self.lost)
            .field("link", &self.link)
            .finish_non_exhaustive()
    }
}

impl KrpcClnt {
    /// The state over a connected queue pair and its [`Requester`] (already `Connected`),
    /// with `max_requests` calls in flight at most (the size of the table of ended calls).
    /// Both come boxed (880- and 900-odd-byte values): by value, this function's frame in
    /// the FreeBSD object was 3,120 bytes (`stack.sh` on `krpc_rdma_whole.o`).
    ///
    /// # Errors
    /// [`BridgeError::NoMemory`].
    pub fn new(
        qp: Box<dyn FaceQp>,
        req: Box<Requester>,
        pages: Arc<dyn PageProvider>,
        hook: ReplyHook,
        max_requests: usize,
    ) -> Result<Box<Self>, BridgeError> {
        let mut ended = Vec::new();
        ended
            .try_reserve_exact(max_requests.max(1))
            .map_err(|_| BridgeError::NoMemory)?;
        let bc = Backchannel::new(req.reverse_capacity())?;
        // A reverse call's header (credential and verifier up to MAX_AUTH_BYTES each) is
        // read in the same buffer as a reply's.
        let head = if bc.max > 0 {
            MAX_CALL_HEADER.max(MAX_REPLY_HEADER)
        } else {
            MAX_REPLY_HEADER
        };
        Ok(Box::new(KrpcClnt {
            qp,
            req,
            pages,
            bridge: MbufBridge::new(64, 64)?,
            hook: Some(hook),
            max_reply: 0,
            link: None,
            tcfg: TransportConfig::default(),
            upcall: None,
            ended,
            head: Head::new(head)?,
            lost: false,
            stock: false,
            stats: KrpcClntStats::default(),
            bc,
        }))
    }

    /// A client that makes its connection itself through `dialer` (the first attempt is
    /// started here); with `reconnect`, a lost connection is made again and the calls owed
    /// a reply are sent again with their XIDs (see [`crate::dial`]). Replies are provisioned
    /// by `hook`, or (`None`) inline in at most `max_reply` bytes.
    ///
    /// # Errors
    /// An errno: FreeBSD's `ENOMEM`, or the dialer's.
    pub fn dialed(
        mut dialer: Box<dyn FaceDialer>,
        pages: Arc<dyn PageProvider>,
        hook: Option<ReplyHook>,
        max_reply: usize,
        tcfg: TransportConfig,
        reconnect: bool,
    ) -> Result<Box<Self>, i32> {
        let rc = if reconnect {
            Some(Reconnect::new(&tcfg).map_err(|_| ENOMEM)?)
        } else {
            None
        };
        let req = new_requester(&tcfg, &*dialer, &pages)?;
        let qp = dialer.dial(&req.private_data())?;
        let mut link = Box::new(Link::new(dialer, rc));
        link.state = LinkState::Connecting;
        let max = tcfg.max_requests.max(1) as usize;
        let mut me = KrpcClnt::new(qp, req, pages, inline_only, max).map_err(|_| ENOMEM)?;
        me.hook = hook;
        me.max_reply = max_reply;
        me.link = Some(link);
        me.tcfg = tcfg;
        // Macklem's `xprt_rdma_connect(..., cbslots)`: the slots reserved are enabled on
        // every connection made (fewer with `set_cbslots`).
        me.bc.slots = tcfg.max_reverse_requests;
        Ok(me)
    }

    /// The stock-NFS mode on or off (off after [`new`](Self::new); see
    /// `clnt_rdma_set_stock` in `c/krpc_rdma_clnt.h`).
    pub fn set_stock(&mut self, on: bool) {
        self.stock = on;
    }

    /// Whether the stock-NFS mode is on.
    pub fn stock(&self) -> bool {
        self.stock
    }

    /// The counters (`clnt_rdma_get_stats`).
    pub fn stats(&self) -> KrpcClntStats {
        self.stats
    }

    /// A `CLIENT *` (`clnt_rdma_create`) for program `prog`, version `vers`, which takes this
    /// state (its `cl_destroy` frees it); `None` without memory (the state is dropped).
    pub fn into_client(self: Box<Self>, prog: u32, vers: u32) -> Option<*mut FbsdClient> {
        let h = Box::into_raw(self);
        // SAFETY: `h` is a live, uniquely owned KrpcClnt; the C side keeps it until
        // cl_destroy, which gives it back through krpc_clnt_free.
        let cl = unsafe { ffi::krpc_clnt_create(h.cast::<KrpcClntHandle>(), prog, vers) };
        if cl.is_null() {
            // SAFETY: clnt_rdma_create failed and did not keep `h`: still ours.
            drop(unsafe { Box::from_raw(h) });
            return None;
        }
        Some(cl)
    }

    /// The requester (statistics).
    pub fn requester(&self) -> &Requester {
        &self.req
    }

    /// Poll the requester; ended calls go to the table, reverse calls to the backchannel
    /// queue. How many calls that ended are not `xid`'s.
    pub(crate) fn reap(&mut self, xid: Option<u32>) -> u32 {
        let mut others = self.reap_once(xid);
        if core::mem::take(&mut self.bc.dropped) {
            // A reverse call nobody will answer: the next poll sends its SYSTEM_ERR.
            others = others.saturating_add(self.reap_once(xid));
        }
        if core::mem::take(&mut self.bc.reslot) && self.bc.slots > 0 {
            // A new connection: its reverse slots (a failure leaves none: reverse calls
            // then close the connection, as the peer broke the agreement).
            let _ = self.req.set_reverse_slots(&mut self.qp, self.bc.slots);
        }
        others
    }

    fn reap_once(&mut self, xid: Option<u32>) -> u32 {
        let (ended, lost, link, bc) = (
            &mut self.ended,
            &mut self.lost,
            &mut self.link,
            &mut self.bc,
        );
        let mut others = 0u32;
        self.req.poll(&mut self.qp, &mut |e| {
            // A reconnecting client keeps the calls lost with the connection.
            let e = match link.as_mut().and_then(|l| l.rc.as_mut()) {
                Some(rc) => match rc.on_event(e) {
                    Some(e) => e,
                    None => return,
                },
                None => e,
            };
            match e {
                RequesterEvent::Reply { xid: x, reply } => {
                    end_call(ended, &mut others, xid, x, End::Reply(reply));
                }
                RequesterEvent::Failed { xid: x, error, .. } => {
                    end_call(ended, &mut others, xid, x, End::Failed(error));
                }
                RequesterEvent::ConnectionLost => {
                    bc.lost();
                    match link.as_mut() {
                        // The attempt failed before the connection was made.
                        Some(l) if l.state == LinkState::Connecting => {
                            l.failed(ENOTCONN);
                            *lost |= l.rc.is_none();
                        }
                        Some(l) => {
                            l.state = LinkState::Down;
                            *lost |= l.rc.is_none();
                        }
                        None => *lost = true,
                    }
                }
                RequesterEvent::Connected(_) => {
                    if let Some(l) = link.as_mut() {
                        l.state = LinkState::Up;
                        l.errno = 0;
                        l.connects = l.connects.saturating_add(1);
                        bc.reslot = true;
                    }
                }
                // For the backchannel SVCXPRT, or answered SYSTEM_ERR by the transport.
                RequesterEvent::ReverseCall(rc) => bc.take(rc),
            }
        });
        // Calls owed a reply go out on the new connection as its credits allow.
        if let Some(l) = self.link.as_mut() {
            if let (LinkState::Up, Some(rc)) = (l.state, l.rc.as_mut()) {
                if rc.unsent() > 0 {
                    let ended = &mut self.ended;
                    rc.resend(&mut self.req, &mut self.qp, &mut |e| {
                        if let RequesterEvent::Failed { xid: x, error, .. } = e {
                            end_call(ended, &mut others, xid, x, End::Failed(error));
                        }
                    });
                }
            }
        }
        others
    }

    /// A dialed client's connection: reap, then, reconnecting and down, start the next
    /// attempt if it is due at `now_ms`. The state, how long until the next attempt
    /// (0: none to wait for), and how many calls of others ended.
    fn drive_link(&mut self, now_ms: u64) -> (LinkState, u32, u32) {
        let mut handed = self.reap(None);
        let Some(l) = self.link.as_mut() else {
            let st = if self.lost {
                LinkState::Down
            } else {
                LinkState::Up
            };
            return (st, 0, handed);
        };
        if l.state != LinkState::Down || l.rc.is_none() || self.lost {
            return (l.state, 0, handed);
        }
        if let Err(wait) = l.due(now_ms) {
            return (LinkState::Down, wait, handed);
        }
        match self.redial() {
            Ok(()) => {
                // An attempt refused at once shows in its first poll.
                handed = handed.saturating_add(self.reap(None));
            }
            Err(e) => {
                if let Some(l) = self.link.as_mut() {
                    l.failed(e);
                }
            }
        }
        let l = self.link.as_mut().map_or(LinkState::Down, |l| l.state);
        (l, 0, handed)
    }

    /// A new connection attempt: a new requester and queue pair replace the dead ones (their
    /// calls are already failed, or kept by the reconnection table).
    fn redial(&mut self) -> Result<(), i32> {
        let Some(l) = self.link.as_mut() else {
            return Err(EINVAL);
        };
        let req = new_requester(&self.tcfg, &*l.dialer, &self.pages)?;
        let mut qp = l.dialer.dial(&req.private_data())?;
        if let Some((f, arg)) = self.upcall {
            // SAFETY: the C side registered `f(arg)` for the life of the state (see
            // `krpc_clnt_set_upcall`), which outlives this queue pair.
            unsafe { qp.set_upcall(f, arg as *mut c_void) };
        }
        l.state = LinkState::Connecting;
        // The old connection goes (its queue pair is destroyed after the new one exists).
        self.req = req;
        self.qp = qp;
        Ok(())
    }

    /// Enable `n` reverse slots (`cbslots`) now if connected, and on every connection a
    /// dialed client makes.
    ///
    /// # Errors
    /// `EINVAL` beyond `max_reverse_requests` (or the receive buffers), `ENOTCONN`.
    pub fn set_cbslots(&mut self, n: u32) -> Result<(), i32> {
        if n > self.bc.max {
            return Err(EINVAL);
        }
        self.bc.slots = n;
        let up = match self.link.as_ref() {
            Some(l) => l.state == LinkState::Up,
            None => !self.lost,
        };
        if !up {
            return Ok(());
        }
        self.req
            .set_reverse_slots(&mut self.qp, n)
            .map_err(|e| match e {
                CallError::ConnectionLost => ENOTCONN,
                _ => EINVAL,
            })
    }

    /// The reverse slots asked for (`cbslots`).
    pub fn cbslots(&self) -> u32 {
        self.bc.slots
    }

    /// A backchannel SVCXPRT registered (`on`) or gone: reverse calls not yet answered are
    /// then answered `SYSTEM_ERR` by the transport.
    pub fn set_backchannel(&mut self, on: bool) {
        if on {
            self.bc.on = true;
        } else {
            self.bc.off();
            let _ = self.reap(None);
        }
    }

    /// Reverse calls queued for the backchannel xprt.
    pub fn bc_pending(&self) -> usize {
        self.bc.queued.len()
    }

    /// The next reverse call for the backchannel xprt's `xp_recv` (reap first): its header
    /// in `call` (credential and verifier copied to `cred` / `verf`), its arguments as
    /// mbufs. A call whose header cannot be handed up is answered here (as `svc_rdma`
    /// answers a forward one, or `SYSTEM_ERR`).
    fn bc_recv(
        &mut self,
        call: &mut KrpcSvcCall,
        cred: *mut u8,
        verf: *mut u8,
        handed: &mut u32,
    ) -> Result<Option<MbufChain>, i32> {
        *handed = self.reap(None);
        if self.bc.queued.is_empty() {
            self.qp.arm();
            *handed = handed.saturating_add(self.reap(None));
        }
        loop {
            let Some(rc) = self.bc.queued.pop_front() else {
                return Err(if self.lost {
                    ffi::SVC_DIED
                } else {
                    ffi::SVC_NONE
                });
            };
            let ReverseCall {
                xid,
                call: mut chain,
                ctx,
            } = rc;
            *call = KrpcSvcCall::default();
            let parsed = match self.head.of(&chain) {
                Some(h) => crate::svc::parse_call(h, call).map(|(c, v, off)| {
                    // SAFETY: per krpc_clnt_bc_recv's contract, cred / verf hold
                    // MAX_AUTH_BYTES bytes each (or are NULL), used by nobody else meanwhile.
                    let ok =
                        unsafe { crate::svc::copy_auth(c, cred) && crate::svc::copy_auth(v, verf) };
                    (ok, off)
                }),
                None => Ok((false, 0)),
            };
            let off = match parsed {
                Ok((true, off)) => off,
                Ok((false, _)) => {
                    self.bc_answer(ctx, &svc::refusal(xid, AcceptStat::SystemErr));
                    continue;
                }
                Err(bad) => {
                    self.bc_answer(ctx, &bad.reply(xid));
                    continue;
                }
            };
            let trimmed = i64::try_from(off)
                .ok()
                .and_then(|n| chain.adj(n).ok())
                .is_some();
            let built = if !trimmed {
                Err(())
            } else if chain.is_empty() {
                Ok(None)
            } else {
                self.bridge
                    .mbufs_from_chain(chain, true, true)
                    .map_err(|_| ())
            };
            match built {
                // Within the table's capacity: one entry per reverse slot.
                Ok(m) if self.bc.handed.len() < self.bc.handed.capacity() => {
                    self.bc.handed.push((xid, ctx));
                    return Ok(m);
                }
                _ => self.bc_answer(ctx, &svc::refusal(xid, AcceptStat::SystemErr)),
            }
        }
    }

    /// Answer reverse call `ctx` with `reply` (a header alone); if it cannot be sent the
    /// context is dropped (the transport answers SYSTEM_ERR).
    fn bc_answer(&mut self, ctx: ReverseCtx, reply: &onc_rpc::rpc::ReplyHeader) {
        let Some(chain) = crate::svc::answer_chain(reply) else {
            drop(ctx);
            self.bc.dropped = true;
            return;
        };
        if self.req.reverse_reply(&mut self.qp, ctx, chain).is_err() {
            self.bc.dropped = true;
        }
    }

    /// The backchannel xprt's reply to reverse call `xid` (see `krpc_clnt_bc_reply`).
    fn bc_reply(&mut self, xid: u32, hdr: *mut FbsdMbuf, res: *mut FbsdMbuf) -> i32 {
        let Some(ctx) = self.bc.take_handed(xid) else {
            // SAFETY: per krpc_clnt_bc_reply's contract the chains are ours to consume.
            drop(unsafe { (MbufChain::from_raw(hdr), MbufChain::from_raw(res)) });
            return ffi::SVC_FAILED;
        };
        // SAFETY: the C caller holds both chains (live, unchanged) during the call.
        let walked = unsafe { self.bridge.chain_from_mbuf_parts(&[hdr, res], &self.pages) };
        let rc = match walked {
            Ok(chain) => match self.req.reverse_reply(&mut self.qp, ctx, chain) {
                Ok(()) => ffi::SVC_SENT,
                Err(r) => match (r.error, r.ctx) {
                    (CallError::WouldBlock, Some(ctx)) => {
                        // The chains stay the caller's: it reaps and tries again.
                        self.bc.handed.push((xid, ctx));
                        return ffi::SVC_AGAIN;
                    }
                    // Too large for an inline reverse reply (no chunks in this direction):
                    // the call is answered SYSTEM_ERR rather than left unanswered.
                    (CallError::TooLarge, Some(ctx)) => {
                        self.bc_answer(ctx, &svc::refusal(xid, AcceptStat::SystemErr));
                        ffi::SVC_FAILED
                    }
                    (_, ctx) => {
                        self.bc.dropped |= ctx.is_some();
                        ffi::SVC_FAILED
                    }
                },
            },
            Err(_) => {
                self.bc_answer(ctx, &svc::refusal(xid, AcceptStat::SystemErr));
                ffi::SVC_FAILED
            }
        };
        // SAFETY: SENT or FAILED consume the chains (the reverse reply was copied into a
        // send buffer, or not sent: the walk's page references went with its chain).
        drop(unsafe { (MbufChain::from_raw(hdr), MbufChain::from_raw(res)) });
        if self.bc.dropped {
            let _ = self.reap(None);
        }
        rc
    }

    /// The backchannel's upper layer will not answer reverse call `xid`: the transport
    /// answers `SYSTEM_ERR`. False if no such call is waiting for its reply.
    fn bc_drop(&mut self, xid: u32) -> bool {
        let Some(ctx) = self.bc.take_handed(xid) else {
            return false;
        };
        drop(ctx);
        self.bc.dropped = true;
        let _ = self.reap(None);
        true
    }

    fn take(&mut self, xid: u32) -> Option<End> {
        let i = self.ended.iter().position(|(x, _)| *x == xid)?;
        Some(self.ended.swap_remove(i).1)
    }

    fn send(&mut self, hdr: *const FbsdMbuf, args: *const FbsdMbuf, res: &mut KrpcClntRes) -> i32 {
        // SAFETY: the C caller holds both chains (live, unchanged) during the call.
        let call = match unsafe { self.bridge.chain_from_mbuf_parts(&[hdr, args], &self.pages) } {
            Ok(c) => c,
            Err(e) => {
                (res.stat, res.err) = match e {
                    BridgeError::Invalid => (ClntStat::CantEncodeArgs as i32, EINVAL),
                    BridgeError::Errno(n) => (ClntStat::CantSend as i32, n),
                    _ => (ClntStat::CantSend as i32, ENOMEM),
                };
                return ffi::CLNT_REFUSED;
            }
        };
        let spec = match self.hook {
            Some(hook) => hook(&call, &self.pages),
            None => crate::nfs_hook::provision(&call, &self.pages, self.max_reply),
        };
        let sent = match self.link.as_mut() {
            Some(l) => match (l.state, l.rc.as_mut()) {
                (LinkState::Up, Some(rc)) => rc.call(&mut self.req, &mut self.qp, call, spec),
                // Held until a connection is up.
                (_, Some(rc)) => rc.hold(call, spec),
                (LinkState::Up, None) => self.req.call(&mut self.qp, call, spec),
                (_, None) => Err(CallRejected {
                    error: CallError::ConnectionLost,
                    call,
                    reply: spec,
                }),
            },
            None => self.req.call(&mut self.qp, call, spec),
        };
        match sent {
            Ok(()) => ffi::CLNT_SENT,
            Err(r) if matches!(r.error, CallError::NoCredit | CallError::WouldBlock) => {
                ffi::CLNT_AGAIN
            }
            Err(r) => {
                let e = r.error.rpc_err(Phase::Send);
                res.stat = e.status as i32;
                res.err = e.errno.freebsd();
                ffi::CLNT_REFUSED
            }
        }
    }

    /// The end of the caller's call into `res` and `*rep`.
    fn finish(&mut self, end: End, rep: &mut *mut FbsdMbuf, res: &mut KrpcClntRes) {
        let mut reply = match end {
            End::Failed(e) => {
                let e = e.rpc_err(Phase::Reply);
                res.stat = e.status as i32;
                res.err = e.errno.freebsd();
                return;
            }
            End::Reply(c) => c,
        };
        let Some(off) = self.head.of(&reply).and_then(|h| reply_status(h, res)) else {
            res.stat = ClntStat::CantDecodeRes as i32;
            res.err = EBADMSG;
            return;
        };
        if res.stat != ClntStat::Success as i32 {
            return;
        }
        let trimmed = i64::try_from(off)
            .ok()
            .and_then(|n| reply.adj(n).ok())
            .is_some();
        if !trimmed {
            res.stat = ClntStat::CantDecodeRes as i32;
            res.err = EBADMSG;
            return;
        }
        if reply.is_empty() {
            return;
        }
        match self.results_mbufs(reply) {
            Ok(Some(m)) => *rep = m.into_raw(),
            Ok(None) => {}
            Err(_) => {
                res.stat = ClntStat::CantRecv as i32;
                res.err = ENOMEM;
            }
        }
    }

    /// The results as FreeBSD mbufs: DDP data as M_EXTPG mbufs over the write-chunk pages,
    /// or in the stock-NFS mode copied into plain mbufs (counted).
    fn results_mbufs(&mut self, reply: Chain) -> Result<Option<MbufChain>, (BridgeError, Chain)> {
        if !self.stock {
            return self.bridge.mbufs_from_chain(reply, true, true);
        }
        let (m, copied) = self.bridge.flat_mbufs_from_chain(reply, true, true)?;
        if copied > 0 {
            self.stats.stock_copies += 1;
            self.stats.stock_bytes = self.stats.stock_bytes.saturating_add(copied);
        }
        Ok(m)
    }
}

/// Keep a call's end for its caller; count it if it is not `mine`'s.
fn end_call(ended: &mut Vec<(u32, End)>, others: &mut u32, mine: Option<u32>, x: u32, end: End) {
    if Some(x) != mine {
        *others = others.saturating_add(1);
    }
    // At most max_requests calls are in flight: the push fits; if the table cannot grow the
    // end is dropped and that caller times out.
    if ended.try_reserve(1).is_ok() {
        ended.push((x, end));
    }
}

/// The reply provisioning of a client without a hook (never called: `hook` is `None`).
fn inline_only(_: &Chain, _: &Arc<dyn PageProvider>) -> ReplySpec {
    ReplySpec::inline(0)
}

/// A requester for a new connection of `dialer`, boxed (900-odd bytes).
#[inline(never)]
fn new_requester(
    tcfg: &TransportConfig,
    dialer: &dyn FaceDialer,
    pages: &Arc<dyn PageProvider>,
) -> Result<Box<Requester>, i32> {
    let req = Requester::new(*tcfg, dialer.resources(), Arc::clone(pages)).map_err(|_| ENOMEM)?;
    Ok(Box::new(req))
}

/// Parse the RPC reply header at the start of `hdr` (RFC 5531 `reply_body`, through
/// onc-rpc's [`ReplyView`]) into `res` as FreeBSD's `_seterr_reply` does; the offset of the
/// results (meaningful for `RPC_SUCCESS`), or `None` for a malformed header.
pub(crate) fn reply_status(hdr: &[u8], res: &mut KrpcClntRes) -> Option<usize> {
    let mut d = Decoder::new(hdr);
    let stat = match ReplyView::decode(&mut d).ok()? {
        ReplyView::Accepted { verf, stat, .. } => {
            res.verf_flavor = verf.flavor;
            res.verf_len = u32::try_from(verf.body.len()).ok()?;
            match stat {
                AcceptStat::Success => ClntStat::Success,
                AcceptStat::ProgUnavail => ClntStat::ProgUnavail,
                AcceptStat::ProgMismatch { low, high } => {
                    (res.low, res.high) = (low, high);
                    ClntStat::ProgVersMismatch
                }
                AcceptStat::ProcUnavail => ClntStat::ProcUnavail,
                AcceptStat::GarbageArgs => ClntStat::CantDecodeArgs,
                AcceptStat::SystemErr => ClntStat::SystemError,
            }
        }
        ReplyView::Denied { why, .. } => match why {
            Rejected::RpcMismatch { low, high } => {
                (res.low, res.high) = (low, high);
                ClntStat::VersMismatch
            }
            Rejected::AuthError(why) => {
                res.err = i32::try_from(why).ok()?;
                ClntStat::AuthError
            }
        },
    };
    res.stat = stat as i32;
    Some(d.pos())
}

/// The state behind a C handle.
///
/// # Safety
/// `h` came from [`KrpcClnt::into_client`] and is not freed; the caller holds the CLIENT's
/// mutex (no other reference is live).
unsafe fn state<'a>(h: *mut KrpcClntHandle) -> &'a mut KrpcClnt {
    // SAFETY: per the function's contract.
    unsafe { &mut *h.cast::<KrpcClnt>() }
}

/// `krpc_clnt_send` (see `c/krpc_rdma_clnt.h`).
///
/// # Safety
/// `h` as for `state`; `hdr` and `args` NULL or valid chains; `res` a valid out-pointer.
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_send(
    h: *mut KrpcClntHandle,
    hdr: *const FbsdMbuf,
    args: *const FbsdMbuf,
    res: *mut KrpcClntRes,
) -> i32 {
    // SAFETY: per the function's contract.
    let (s, res) = unsafe { (state(h), &mut *res) };
    *res = KrpcClntRes::default();
    if s.lost {
        let e = CallError::ConnectionLost.rpc_err(Phase::Send);
        res.stat = e.status as i32;
        res.err = e.errno.freebsd();
        return ffi::CLNT_REFUSED;
    }
    s.send(hdr, args, res)
}

/// `krpc_clnt_poll` (see `c/krpc_rdma_clnt.h`).
///
/// # Safety
/// `h` as for `state`; `rep`, `res`, `handed` valid out-pointers.
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_poll(
    h: *mut KrpcClntHandle,
    xid: u32,
    rep: *mut *mut FbsdMbuf,
    res: *mut KrpcClntRes,
    handed: *mut u32,
) -> i32 {
    // SAFETY: per the function's contract.
    let (s, rep, res, handed) = unsafe { (state(h), &mut *rep, &mut *res, &mut *handed) };
    *rep = core::ptr::null_mut();
    *res = KrpcClntRes::default();
    *handed = s.reap(Some(xid));
    let mut end = s.take(xid);
    if end.is_none() {
        // Completions that arrive before the notification is armed raise no upcall.
        s.qp.arm();
        *handed = handed.saturating_add(s.reap(Some(xid)));
        end = s.take(xid);
    }
    match end {
        Some(e) => {
            s.finish(e, rep, res);
            ffi::CLNT_DONE
        }
        None => ffi::CLNT_PENDING,
    }
}

/// `krpc_clnt_reap` (see `c/krpc_rdma_clnt.h`).
///
/// # Safety
/// `h` as for `state`; `handed` a valid out-pointer.
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_reap(h: *mut KrpcClntHandle, handed: *mut u32) {
    // SAFETY: per the function's contract.
    let (s, handed) = unsafe { (state(h), &mut *handed) };
    *handed = s.reap(None);
    s.qp.arm();
    *handed = handed.saturating_add(s.reap(None));
}

/// `krpc_clnt_abandon` (see `c/krpc_rdma_clnt.h`).
///
/// # Safety
/// `h` as for `state`.
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_abandon(h: *mut KrpcClntHandle, xid: u32) {
    // SAFETY: per the function's contract.
    let s = unsafe { state(h) };
    // The call chain and the caller's pages come back and are dropped here; a reconnecting
    // client forgets it (it is never sent again).
    let rc = s.link.as_mut().and_then(|l| l.rc.as_mut());
    match rc {
        Some(rc) if rc.owed_xids().any(|(x, _)| x == xid) => {
            drop(rc.abandon(&mut s.req, &mut s.qp, xid));
        }
        _ => drop(s.req.abandon(&mut s.qp, xid)),
    }
    s.ended.retain(|(x, _)| *x != xid);
}

/// `krpc_clnt_close` (see `c/krpc_rdma_clnt.h`).
///
/// # Safety
/// `h` as for `state`.
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_close(h: *mut KrpcClntHandle) {
    // SAFETY: per the function's contract.
    let s = unsafe { state(h) };
    let (ended, lost) = (&mut s.ended, &mut s.lost);
    let mut rc = s.link.as_mut().and_then(|l| l.rc.as_mut());
    s.req.close(&mut s.qp, &mut |e| {
        // The calls on the connection end with `Closed`: a reconnecting client forgets them.
        let e = match rc.as_mut() {
            Some(rc) => match rc.on_event(e) {
                Some(e) => e,
                None => return,
            },
            None => e,
        };
        match e {
            RequesterEvent::Failed { xid, error, .. } if ended.try_reserve(1).is_ok() => {
                ended.push((xid, End::Failed(error)));
            }
            RequesterEvent::ConnectionLost => *lost = true,
            _ => {}
        }
    });
    // Calls held for a connection that will not be made end too.
    if let Some(rc) = rc {
        loop {
            let Some((xid, _)) = rc.owed_xids().next() else {
                break;
            };
            drop(rc.abandon(&mut s.req, &mut s.qp, xid));
            if ended.try_reserve(1).is_ok() {
                ended.push((xid, End::Failed(CallError::Closed)));
            }
        }
    }
    if let Some(l) = s.link.as_mut() {
        l.state = LinkState::Down;
    }
    s.lost = true;
}

/// `krpc_clnt_free` (see `c/krpc_rdma_clnt.h`).
///
/// # Safety
/// `h` as for `state`; not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_free(h: *mut KrpcClntHandle) {
    // SAFETY: `h` came from Box::into_raw in into_client and is given back once.
    drop(unsafe { Box::from_raw(h.cast::<KrpcClnt>()) });
}

/// `krpc_clnt_set_upcall` (see `c/krpc_rdma_clnt.h`).
///
/// # Safety
/// `h` as for `state`; `f(arg)` callable from the completion handler until the state is
/// freed.
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_set_upcall(
    h: *mut KrpcClntHandle,
    f: extern "C" fn(*mut c_void),
    arg: *mut c_void,
) {
    // SAFETY: per the function's contract.
    let s = unsafe { state(h) };
    s.upcall = Some((f, arg as usize));
    // SAFETY: per the function's contract (a dialed client's later queue pairs get it too).
    unsafe { s.qp.set_upcall(f, arg) };
}

/// `krpc_clnt_dial` (see `c/krpc_rdma_clnt.h`): a client over rdma_cm connections to the
/// `len`-byte `struct sockaddr` at `addr` in `vnet`; replies inline in at most `max_reply`
/// bytes; `reconnect` nonzero: reconnecting.
///
/// # Safety
/// `addr` points to `len` readable bytes; `vnet` NULL or a live `struct vnet *` that
/// outlives the client; `out` a valid out-pointer.
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_dial(
    vnet: *mut c_void,
    addr: *const c_void,
    len: u32,
    max_reply: u32,
    reconnect: i32,
    out: *mut *mut KrpcClntHandle,
) -> i32 {
    // SAFETY: per the function's contract.
    let out = unsafe { &mut *out };
    *out = core::ptr::null_mut();
    // SAFETY: per the function's contract.
    let dialer = match unsafe { OfedDialer::new(vnet, addr, len as usize, OfedConfig::default()) } {
        Ok(d) => Box::new(d),
        Err(e) => return e,
    };
    let pages: Arc<dyn PageProvider> = Arc::new(KernelPages::new());
    dialed_handle(dialer, pages, max_reply, reconnect, out)
}

/// `krpc_clnt_dial_cb` (see `c/krpc_rdma_clnt.h`): [`krpc_clnt_dial`] with `cbslots` reverse
/// slots reserved and enabled on every connection (the receive and send buffers grown by as
/// many).
///
/// # Safety
/// As for [`krpc_clnt_dial`].
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_dial_cb(
    vnet: *mut c_void,
    addr: *const c_void,
    len: u32,
    max_reply: u32,
    reconnect: i32,
    cbslots: u32,
    out: *mut *mut KrpcClntHandle,
) -> i32 {
    // SAFETY: per the function's contract.
    let out = unsafe { &mut *out };
    *out = core::ptr::null_mut();
    let mut tcfg = TransportConfig::default();
    let mut ocfg = OfedConfig::default();
    if cbslots > 0 {
        let need = tcfg.max_requests.checked_add(cbslots);
        let Some(need) = need.filter(|n| *n <= 1024) else {
            return EINVAL;
        };
        tcfg.max_reverse_requests = cbslots;
        ocfg.recv_bufs = ocfg.recv_bufs.max(need);
        ocfg.send_bufs = ocfg.send_bufs.saturating_add(cbslots);
    }
    // SAFETY: per the function's contract.
    let dialer = match unsafe { OfedDialer::new(vnet, addr, len as usize, ocfg) } {
        Ok(d) => Box::new(d),
        Err(e) => return e,
    };
    let pages: Arc<dyn PageProvider> = Arc::new(KernelPages::new());
    dialed_handle_with(dialer, pages, max_reply, tcfg, reconnect, out)
}

/// A `struct krpc_clnt` over `dialer` (see [`KrpcClnt::dialed`]: the RFC 8267 provisioning
/// up to `max_reply`, the default transport configuration, reconnecting if `reconnect` is
/// nonzero) into `*out`: 0, or the errno.
pub fn dialed_handle(
    dialer: Box<dyn FaceDialer>,
    pages: Arc<dyn PageProvider>,
    max_reply: u32,
    reconnect: i32,
    out: &mut *mut KrpcClntHandle,
) -> i32 {
    dialed_handle_with(
        dialer,
        pages,
        max_reply,
        TransportConfig::default(),
        reconnect,
        out,
    )
}

/// [`dialed_handle`] with transport configuration `tcfg` (`krpc_clnt_dial_cb`'s reverse
/// slots reserved in it).
fn dialed_handle_with(
    dialer: Box<dyn FaceDialer>,
    pages: Arc<dyn PageProvider>,
    max_reply: u32,
    tcfg: TransportConfig,
    reconnect: i32,
    out: &mut *mut KrpcClntHandle,
) -> i32 {
    match KrpcClnt::dialed(
        dialer,
        pages,
        None,
        max_reply as usize,
        tcfg,
        reconnect != 0,
    ) {
        Ok(c) => {
            *out = Box::into_raw(c).cast::<KrpcClntHandle>();
            0
        }
        Err(e) => e,
    }
}

/// `krpc_clnt_link` (see `c/krpc_rdma_clnt.h`).
///
/// # Safety
/// `h` as for `state`; the out-pointers valid.
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_link(
    h: *mut KrpcClntHandle,
    now_ms: u64,
    wait_ms: *mut u32,
    failed: *mut u32,
    err: *mut i32,
    handed: *mut u32,
) -> i32 {
    // SAFETY: per the function's contract.
    let (s, wait_ms, failed, err, handed) = unsafe {
        (
            state(h),
            &mut *wait_ms,
            &mut *failed,
            &mut *err,
            &mut *handed,
        )
    };
    let (st, wait, n) = s.drive_link(now_ms);
    if st != LinkState::Up {
        // Completions that arrive before the notification is armed raise no upcall.
        s.qp.arm();
    }
    *wait_ms = wait;
    *handed = n;
    *failed = s.link.as_ref().map_or(0, |l| l.failed_attempts());
    *err = s.link.as_ref().map_or(0, |l| l.errno);
    st.code()
}

/// `krpc_clnt_set_stock` (see `c/krpc_rdma_clnt.h`).
///
/// # Safety
/// `h` as for `state`.
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_set_stock(h: *mut KrpcClntHandle, on: i32) {
    // SAFETY: per the function's contract.
    unsafe { state(h) }.set_stock(on != 0);
}

/// `krpc_clnt_get_stock` (see `c/krpc_rdma_clnt.h`): 1 or 0.
///
/// # Safety
/// `h` as for `state`.
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_get_stock(h: *mut KrpcClntHandle) -> i32 {
    // SAFETY: per the function's contract.
    i32::from(unsafe { state(h) }.stock())
}

/// `krpc_clnt_get_stats` (see `c/krpc_rdma_clnt.h`).
///
/// # Safety
/// `h` as for `state`; `out` a valid out-pointer.
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_get_stats(h: *mut KrpcClntHandle, out: *mut KrpcClntStats) {
    // SAFETY: per the function's contract.
    unsafe { *out = state(h).stats };
}

/// `krpc_clnt_set_cbslots` (see `c/krpc_rdma_clnt.h`): 0 or an errno.
///
/// # Safety
/// `h` as for `state`.
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_set_cbslots(h: *mut KrpcClntHandle, n: u32) -> i32 {
    // SAFETY: per the function's contract.
    match unsafe { state(h) }.set_cbslots(n) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// `krpc_clnt_get_cbslots` (see `c/krpc_rdma_clnt.h`).
///
/// # Safety
/// `h` as for `state`.
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_get_cbslots(h: *mut KrpcClntHandle) -> u32 {
    // SAFETY: per the function's contract.
    unsafe { state(h) }.cbslots()
}

/// `krpc_clnt_set_bc` (see `c/krpc_rdma_clnt.h`).
///
/// # Safety
/// `h` as for `state`.
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_set_bc(h: *mut KrpcClntHandle, on: i32) {
    // SAFETY: per the function's contract.
    unsafe { state(h) }.set_backchannel(on != 0);
}

/// `krpc_clnt_bc_pending` (see `c/krpc_rdma_clnt.h`).
///
/// # Safety
/// `h` as for `state`.
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_bc_pending(h: *mut KrpcClntHandle) -> u32 {
    // SAFETY: per the function's contract.
    u32::try_from(unsafe { state(h) }.bc_pending()).unwrap_or(u32::MAX)
}

/// `krpc_clnt_bc_recv` (see `c/krpc_rdma_clnt.h`): `KRPC_SVC_CALL`, `_NONE` or `_DIED`.
///
/// # Safety
/// `h` as for `state`; `call`, `args`, `handed` valid out-pointers; `cred` / `verf` NULL or
/// `MAX_AUTH_BYTES` writable bytes each.
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_bc_recv(
    h: *mut KrpcClntHandle,
    call: *mut KrpcSvcCall,
    cred: *mut c_void,
    verf: *mut c_void,
    args: *mut *mut FbsdMbuf,
    handed: *mut u32,
) -> i32 {
    // SAFETY: per the function's contract.
    let (s, call, args, handed) = unsafe { (state(h), &mut *call, &mut *args, &mut *handed) };
    *args = core::ptr::null_mut();
    match s.bc_recv(call, cred.cast(), verf.cast(), handed) {
        Ok(m) => {
            *args = m.map_or(core::ptr::null_mut(), MbufChain::into_raw);
            ffi::SVC_CALL
        }
        Err(rc) => rc,
    }
}

/// `krpc_clnt_bc_reply` (see `c/krpc_rdma_clnt.h`).
///
/// # Safety
/// `h` as for `state`; `hdr` a valid chain and `res` NULL or one, both the caller's to give
/// (consumed unless `KRPC_SVC_AGAIN` is returned).
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_bc_reply(
    h: *mut KrpcClntHandle,
    xid: u32,
    hdr: *mut FbsdMbuf,
    res: *mut FbsdMbuf,
) -> i32 {
    // SAFETY: per the function's contract.
    unsafe { state(h) }.bc_reply(xid, hdr, res)
}

/// `krpc_clnt_bc_drop` (see `c/krpc_rdma_clnt.h`): `KRPC_SVC_DROPPED` or `KRPC_SVC_FAILED`.
///
/// # Safety
/// `h` as for `state`.
#[no_mangle]
pub unsafe extern "C" fn krpc_clnt_bc_drop(h: *mut KrpcClntHandle, xid: u32) -> i32 {
    // SAFETY: per the function's contract.
    if unsafe { state(h) }.bc_drop(xid) {
        ffi::SVC_DROPPED
    } else {
        ffi::SVC_FAILED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    /// Each reply header becomes the `enum clnt_stat` (and its detail) `_seterr_reply` gives.
    #[test]
    fn reply_headers_map_as_seterr_reply() {
        let status = |w: &[u32]| {
            let mut res = KrpcClntRes::default();
            let off = reply_status(&bytes(w), &mut res);
            (off, res)
        };
        // SUCCESS with a 4-byte verifier of flavor 6: the results start after it.
        let (off, res) = status(&[5, 1, 0, 6, 4, 0xab, 0]);
        assert_eq!(off, Some(28));
        assert_eq!((res.stat, res.verf_flavor, res.verf_len), (0, 6, 4));
        let (_, res) = status(&[5, 1, 0, 0, 0, 2, 3, 4]);
        assert_eq!((res.stat, res.low, res.high), (9, 3, 4)); // RPC_PROGVERSMISMATCH
        let (_, res) = status(&[5, 1, 0, 0, 0, 4]);
        assert_eq!(res.stat, 11); // GARBAGE_ARGS: RPC_CANTDECODEARGS
        let (_, res) = status(&[5, 1, 1, 0, 2, 2]);
        assert_eq!((res.stat, res.low, res.high), (6, 2, 2)); // RPC_VERSMISMATCH
        let (_, res) = status(&[5, 1, 1, 1, 5]);
        assert_eq!((res.stat, res.err), (7, 5)); // RPC_AUTHERROR, AUTH_TOOWEAK
                                                 // Malformed: not a REPLY, an unknown accept_stat, a verifier beyond MAX_AUTH_BYTES,
                                                 // a header that ends early.
        for w in [
            &[5, 0, 0, 0, 0, 0][..],
            &[5, 1, 0, 0, 0, 6],
            &[5, 1, 0, 0, 401],
            &[5, 1, 0, 0],
        ] {
            assert_eq!(status(w).0, None, "{w:?}");
        }
    }
}
