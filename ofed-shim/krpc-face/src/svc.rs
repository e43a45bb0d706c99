//! The Rust half of `svc_rdma`, the kernel RPC server transport (`SVCXPRT *` with
//! `struct xp_ops`, `c/krpc_rdma_svc.c`): one connection's [`Responder`] over an
//! [`FaceQp`](crate::qp::FaceQp) (the verbs backend, or the software provider), behind
//! the opaque `struct krpc_svc` the C side holds.
//!
//! The C side owns the `SVCXPRT`, its lock (an sx), the `struct rpc_msg` and the sleeping;
//! every `krpc_svc_*` entry point below is called with that lock held, allocates with
//! `M_NOWAIT` (the bridge too) and may sleep only inside the verbs (`rdma_disconnect`, an MR
//! reset). What happens here:
//!
//! * **recv** (`krpc_svc_recv`, from `xp_recv` in a pool thread): the connection is polled
//!   through a [`ServerConnection`] (the core's server loop: its queue of [`Incoming`]
//!   calls and its reply backlog allocated once, `max_requests` entries each), the CQ
//!   notification re-armed when nothing is queued. The RPC call header is parsed (checked:
//!   peer input); a call that cannot be handed up is answered here, never dropped: a wrong
//!   RPC version with `MSG_DENIED`/`RPC_MISMATCH` (2..2), a credential or verifier longer
//!   than `MAX_AUTH_BYTES` with `AUTH_ERROR`/`AUTH_BADCRED`/`AUTH_BADVERF`, a truncated
//!   header or a message neither CALL nor REPLY with `GARBAGE_ARGS`, and a call whose arguments cannot be built
//!   into mbufs with `SYSTEM_ERR` (malformed RPC-over-RDMA headers are the Responder's:
//!   `RDMA_ERROR`). The arguments past the header go back through the [`MbufBridge`] as an
//!   mbuf chain, a WRITE's data as M_EXTPG mbufs over the pages the RDMA Read filled (in
//!   the **stock-NFS mode**, [`KrpcSvc::set_stock`], copied into ordinary mbufs instead,
//!   counted). The call's [`ReplyCtx`] is kept by XID, with its program, version and
//!   procedure, until `xp_reply`.
//! * **reply** (`krpc_svc_reply`): the reply header mbuf (encoded by C from the
//!   `rpc_msg`) and the krpc's results chain are walked into one [`Chain`] (M_EXTPG pages by
//!   reference: a READ's data goes by RDMA Write into the client's write chunk) and
//!   replied through the connection (sent, or queued in order until a Send completion's
//!   upcall frees a send resource: `KRPC_SVC_SENT` either way, so no pool thread sleeps
//!   for send resources). In the stock-NFS mode a reply without a DDP marker to a call with
//!   a write chunk first goes through the NFS reply hook ([`locate_reply_item`]): the data
//!   it finds gets a marker (`mark_ddp`, copied into pages when it is not in pages). **Page lifetime**: the walk's page mbufs take one reference per
//!   page (`vm_page_wire` with [`KernelPages`](ofed_shim::KernelPages)) and the Responder keeps
//!   the chain until the reply's Send completes. That alone does not make it safe to
//!   `m_freem` the krpc's chain right after the walk: NFS builds its READ data with
//!   `mb_alloc_ext_plus_pages`, whose free routine `mb_free_mext_pgs` unwires **and frees**
//!   every page whatever other wirings it has. So the FreeBSD chains are kept in a reply
//!   *slot* until the Responder has let go of every page reference the walk took: each slot
//!   has its own counting [`PageProvider`] ([`Counted`], over the connection's) that the walk uses, and
//!   a slot whose count is back to zero has its chains freed at the next reap. No core
//!   change, no allocation per reply (the slots and their providers are made once).
//! * **destroy** (`krpc_svc_free`): the Responder and the connection go first (their
//!   references on reply pages with them), then the held chains.
//!
//! Allocation per RPC in steady state: the bridge's copies of the XDR bytes into mbufs (both
//! ways, as on the client side), the Rust mbufs of the walked reply, and the M_EXTPG mbufs
//! of the arguments; the queue, the context table, the slots and the bridge's scratch are
//! allocated once. Answering a malformed call allocates its small reply chain. The stock-NFS
//! mode: the arguments' copy goes into the mbufs and clusters the bridge builds anyway; a
//! marked reply adds two chain splits and, when its data is copied, a chain of fresh pages.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ffi::c_void;

use krpc_rdma::transport::kernel::{ClntStat, Errno, Phase};
use krpc_rdma::transport::{
    CallError, Incoming, ReplyCtx, Responder, ReverseOutcome, ServerConnection, Wait,
};
use mbuf::{Chain, Mbuf, MbufError, PageProvider};
use nfs_proto::nfs3::locate_reply_item;
use onc_rpc::rpc::{AcceptStat, ReplyHeader, MAX_AUTH_BYTES, RPC_VERSION};
use onc_rpc::svc;
use onc_rpc::view::{BadCall, CallView, MAX_CALL_HEADER};
use onc_rpc::xdr::Decoder;

use crate::ffi::{
    self, FbsdMbuf, FbsdSvcpool, FbsdSvcxprt, KrpcClntRes, KrpcSvcCall, KrpcSvcHandle, KrpcSvcStats,
};
use crate::head::Head;
use crate::mbuf_bridge::{BridgeError, MbufBridge, MbufChain};
use crate::qp::FaceQp;
use ofed_shim::pages::Counted;
use ofed_shim::SockaddrStorage;

/// One reply's FreeBSD chains: the header, the results.
type Held = (Option<MbufChain>, Option<MbufChain>);

/// One reply's FreeBSD chains, kept until the Responder holds no reference on their pages:
/// the walk of the reply takes its page references through the slot's own [`Counted`] (over
/// the connection's provider), so the slot knows when the last one is dropped.
struct Slot {
    pages: Arc<Counted>,
    held: Option<Held>,
}

/// One connection's server state (the C side's `struct krpc_svc`).
///
/// Field order is drop order: the connection (no more DMA), then the Responder (and with it
/// every reference on reply pages), last the slots' FreeBSD chains.
pub struct KrpcSvc {
    // Both boxed (880 and 920 bytes): `new` then moves pointers, not the values, and keeps
    // its frame small.
    qp: Box<dyn FaceQp>,
    /// The Responder with the calls polled and not yet handed up, and the replies waiting
    /// for send resources, in order (the server loop every server runs).
    conn: ServerConnection<Box<Responder>>,
    /// Contexts of calls handed up, by XID.
    ctxs: Contexts,
    bridge: MbufBridge,
    stats: KrpcSvcStats,
    slots: Vec<Slot>,
    /// The first bytes of a call, where its RPC header is decoded.
    head: Head,
    /// The stock-NFS mode (`svc_rdma_set_stock`): arguments in plain mbufs only, the DDP
    /// item of a marker-less reply found by the NFS reply hook.
    stock: bool,
    /// Callbacks (`clnt_rdma_bck`) waiting for their reverse replies.
    bck: BckWaiters,
    /// The connection's page provider (the walk of a callback's arguments).
    pages: Arc<dyn PageProvider>,
}

/// The reverse-direction calls of `clnt_rdma_bck` CLIENTs on this connection waiting for
/// their replies, by XID, each with its outcome once it came (a table allocated once,
/// `max_reverse_requests` entries: a call abandoned keeps its reverse slot until its reply
/// or the loss, so the waiters never outnumber the slots).
#[derive(Debug, Default)]
struct BckWaiters {
    w: Vec<(u32, Option<ReverseOutcome>)>,
    /// Outcomes that arrived for waiters since `krpc_svc_bck_handed` last asked.
    new: u32,
}

impl BckWaiters {
    /// A reverse call's outcome: to its waiter, or dropped (abandoned: a late reply).
    fn settle(&mut self, o: ReverseOutcome) {
        let xid = match &o {
            ReverseOutcome::Reply { xid, .. } | ReverseOutcome::Failed { xid } => *xid,
        };
        if let Some(e) = self.w.iter_mut().find(|(x, o)| *x == xid && o.is_none()) {
            e.1 = Some(o);
            self.new = self.new.saturating_add(1);
        }
    }

    fn take(&mut self, xid: u32) -> Option<Option<ReverseOutcome>> {
        let i = self.w.iter().position(|(x, _)| *x == xid)?;
        let outcome = self.w.get_mut(i)?.1.take();
        if outcome.is_some() {
            self.w.swap_remove(i);
        }
        Some(outcome)
    }
}

impl core::fmt::Debug for KrpcSvc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KrpcSvc")
            .field("conn", &self.conn)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn table<T>(n: usize) -> Result<Vec<T>, BridgeError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| BridgeError::NoMemory)?;
    Ok(v)
}

/// `reply` (an RPC reply header alone) as a chain for the Responder. Allocates: only a call
/// that cannot be handed up is answered here.
pub(crate) fn answer_chain(reply: &ReplyHeader) -> Option<Chain> {
    Chain::from_bytes(&svc::header_bytes(reply).ok()?).ok()
}

/// Parse the RPC call header at the start of `hdr` (the call's first bytes; RFC 5531
/// `call_body`, through onc-rpc's [`CallView`]) into `call`; the credential and verifier
/// bodies and the offset of the arguments, or why it cannot be handed up (which says how to
/// answer it).
pub(crate) fn parse_call<'a>(
    hdr: &'a [u8],
    call: &mut KrpcSvcCall,
) -> Result<(&'a [u8], &'a [u8], usize), BadCall> {
    let mut d = Decoder::new(hdr);
    let v = CallView::decode(&mut d)?;
    let len = |b: &[u8]| u32::try_from(b.len()).unwrap_or(u32::MAX);
    *call = KrpcSvcCall {
        xid: v.xid,
        rpcvers: RPC_VERSION,
        prog: v.prog,
        vers: v.vers,
        proc_: v.proc_,
        cred_flavor: v.cred.flavor,
        cred_len: len(v.cred.body),
        verf_flavor: v.verf.flavor,
        verf_len: len(v.verf.body),
    };
    Ok((v.cred.body, v.verf.body, d.pos()))
}

/// Whether the message whose first bytes are `head` is a REPLY (RFC 5531 `msg_type` 1, the
/// word after the XID): a reverse-direction reply, which this transport (no backchannel)
/// drops.
fn is_reply(head: &[u8]) -> bool {
    head.get(4..8)
        .is_some_and(|w| w == onc_rpc::rpc::REPLY.to_be_bytes())
}

/// What `recv` found.
enum Recv {
    Call(Option<MbufChain>),
    None,
    Died,
}

impl KrpcSvc {
    /// The state over an accepted queue pair and its [`Responder`], with `max_requests`
    /// calls in flight at most (the size of the queue and the context table; twice that
    /// many reply slots).
    ///
    /// # Errors
    /// [`BridgeError::NoMemory`].
    pub fn new(
        qp: Box<dyn FaceQp>,
        resp: Box<Responder>,
        pages: Arc<dyn PageProvider>,
        max_requests: usize,
    ) -> Result<Box<Self>, BridgeError> {
        let n = max_requests.max(1);
        let conn = ServerConnection::new(resp).map_err(|_| BridgeError::NoMemory)?;
        let mut slots = table(n.saturating_mul(2))?;
        for _ in 0..n.saturating_mul(2) {
            slots.push(Slot {
                pages: Arc::new(Counted::new(Arc::clone(&pages))),
                held: None,
            });
        }
        let bck = BckWaiters {
            w: table(conn.responder().reverse_capacity() as usize)?,
            new: 0,
        };
        Ok(Box::new(KrpcSvc {
            bck,
            pages: Arc::clone(&pages),
            qp,
            conn,
            ctxs: Contexts(table(n)?),
            bridge: MbufBridge::new(64, 64)?,
            stats: KrpcSvcStats::default(),
            slots,
            head: Head::new(MAX_CALL_HEADER)?,
            stock: false,
        }))
    }

    /// The stock-NFS mode on or off (off after [`new`](Self::new); see
    /// `svc_rdma_set_stock` in `c/krpc_rdma_svc.h`).
    pub fn set_stock(&mut self, on: bool) {
        self.stock = on;
    }

    /// Whether the stock-NFS mode is on.
    pub fn stock(&self) -> bool {
        self.stock
    }

    /// An `SVCXPRT *` (`svc_rdma_create`) registered with `pool`, which takes this state
    /// (its `xp_destroy` frees it); `None` without memory (the state is dropped). It comes
    /// with the caller's reference, which the caller drops (`SVC_RELEASE`) once its programs
    /// are registered, as after `svc_vc_create` (see `c/krpc_rdma_svc.h`).
    ///
    /// # Safety
    /// `pool` is a live `SVCPOOL` that outlives the transport.
    pub unsafe fn into_xprt(self: Box<Self>, pool: *mut FbsdSvcpool) -> Option<*mut FbsdSvcxprt> {
        let h = Box::into_raw(self);
        // SAFETY: `h` is a live, uniquely owned KrpcSvc; the C side keeps it until
        // xp_destroy, which gives it back through krpc_svc_free; `pool` per the contract.
        let x = unsafe { ffi::krpc_svc_create(pool, h.cast::<KrpcSvcHandle>()) };
        if x.is_null() {
            // SAFETY: svc_rdma_create failed and did not keep `h`: still ours.
            drop(unsafe { Box::from_raw(h) });
            return None;
        }
        Some(x)
    }

    /// Poll the connection (calls queued, replies waiting for send resources sent in
    /// order), then free the slots whose pages were released.
    fn reap(&mut self) {
        self.conn.poll(&mut self.qp);
        while let Some(o) = self.conn.next_reverse() {
            self.bck.settle(o);
        }
        for s in &mut self.slots {
            if s.held.is_some() && s.pages.outstanding() == 0 {
                s.held = None;
                self.stats.held = self.stats.held.saturating_sub(1);
                self.stats.released += 1;
            }
        }
    }

    /// Reap; if nothing is queued, re-arm the notification and reap again (completions that
    /// arrive before the arm raise no upcall).
    fn reap_armed(&mut self) {
        self.reap();
        if self.conn.wait() != Wait::Now {
            self.qp.arm();
            self.reap();
        }
    }

    /// Answer a call the transport cannot hand up with `reply`.
    fn answer(&mut self, ctx: ReplyCtx, reply: &ReplyHeader) {
        let Some(chain) = answer_chain(reply) else {
            // No memory for 24 bytes: give the context back rather than hold it forever.
            self.give_back(ctx);
            return;
        };
        // Sent, or queued in order behind replies waiting for send resources.
        if self.conn.reply(&mut self.qp, ctx, chain).is_ok() {
            self.stats.answered += 1;
        }
    }

    /// The next call for `xp_recv`.
    fn recv(&mut self, call: &mut KrpcSvcCall, cred: *mut u8, verf: *mut u8) -> Recv {
        loop {
            if self.conn.wait() != Wait::Now {
                self.reap_armed();
            }
            if self.conn.is_lost() {
                // Their contexts died with the connection: nothing to hand up.
                return Recv::Died;
            }
            let Some(inc) = self.conn.next_call() else {
                return Recv::None;
            };
            let Incoming {
                xid,
                call: mut chain,
                ctx,
            } = inc;
            *call = KrpcSvcCall::default();
            let Some(head) = self.head.of(&chain) else {
                self.answer(ctx, &svc::refusal(xid, AcceptStat::SystemErr));
                continue;
            };
            if is_reply(head) {
                // A reply is never answered with a reply. With no backchannel CLIENT
                // (xp_p2 NULL) FreeBSD's svc_vc_recv hands it to xdr_callmsg, which fails,
                // and drops it (svc_vc.c:765-791, 810-813); Linux svcrdma passes it to
                // svc_process, which drops a non-CALL ("bad direction"). Dropped here too,
                // the connection kept, its context (and the credit) given back.
                self.give_back(ctx);
                self.stats.reverse_replies += 1;
                continue;
            }
            let (ok, args) = match parse_call(head, call) {
                // SAFETY: per krpc_svc_recv's contract, cred / verf hold MAX_AUTH_BYTES
                // bytes each (or are NULL), and nothing else refers to them during the call.
                Ok((c, v, args)) => (unsafe { copy_auth(c, cred) && copy_auth(v, verf) }, args),
                Err(bad) => {
                    let reply = bad.reply(xid);
                    self.answer(ctx, &reply);
                    continue;
                }
            };
            let trimmed = i64::try_from(args)
                .ok()
                .and_then(|n| chain.adj(n).ok())
                .is_some();
            if !ok || !trimmed {
                self.answer(ctx, &svc::refusal(xid, AcceptStat::SystemErr));
                continue;
            }
            let built = if chain.is_empty() {
                Ok(None)
            } else {
                self.args_mbufs(chain)
            };
            match built {
                Ok(m) => {
                    // One context per call handed up, max_requests at most: it fits (were
                    // it not, the context would be dropped here and given back at the
                    // next poll, never held for nothing).
                    self.ctxs.put(call, ctx);
                    self.stats.calls += 1;
                    return Recv::Call(m);
                }
                Err(_) => self.answer(ctx, &svc::refusal(xid, AcceptStat::SystemErr)),
            }
        }
    }

    /// A call's arguments as FreeBSD mbufs: DDP data as M_EXTPG mbufs, or in the stock-NFS
    /// mode copied into plain mbufs (counted).
    fn args_mbufs(&mut self, chain: Chain) -> Result<Option<MbufChain>, (BridgeError, Chain)> {
        if !self.stock {
            return self.bridge.mbufs_from_chain(chain, true, true);
        }
        let (m, copied) = self.bridge.flat_mbufs_from_chain(chain, true, true)?;
        if copied > 0 {
            self.stats.stock_arg_copies += 1;
            self.stats.stock_arg_bytes = self.stats.stock_arg_bytes.saturating_add(copied);
        }
        Ok(m)
    }

    /// The stock-NFS mode's reply: a reply without a DDP marker to a call whose (non-empty)
    /// write chunk can hold the DDP item the NFS reply hook finds in it
    /// ([`locate_reply_item`], from the call's program, version and procedure) gets a marker
    /// in front of that item ([`mark_ddp`]), so the Responder RDMA-Writes it into the write
    /// chunk; any other reply comes back unchanged (sent as without the mode).
    ///
    /// # Errors
    /// Memory or pages for the split or the copy ran out: the reply cannot be sent.
    #[inline(never)] // its locals (a few Mbufs) stay out of `reply`'s frame
    fn stock_reply(
        &mut self,
        call: &Pending,
        chain: Chain,
        pages: &Arc<dyn PageProvider>,
    ) -> Result<Chain, MbufError> {
        if chain.mbufs().any(Mbuf::is_ddp_marker) {
            return Ok(chain);
        }
        let Some(room) = self.conn.responder().write_chunk_room(&call.ctx) else {
            return Ok(chain);
        };
        let Some((off, len)) = locate_reply_item(call.prog, call.vers, call.proc_, &chain) else {
            return Ok(chain);
        };
        if len == 0 || len > room || off % 4 != 0 {
            return Ok(chain);
        }
        let (chain, copied) = mark_ddp(chain, off, len, pages)?;
        self.stats.stock_marked += 1;
        if copied > 0 {
            self.stats.stock_reply_copies += 1;
            self.stats.stock_reply_bytes = self
                .stats
                .stock_reply_bytes
                .saturating_add(u64::try_from(copied).unwrap_or(u64::MAX));
        }
        Ok(chain)
    }

    /// Reply to `xid` with `hdr` + `res` (see `krpc_svc_reply`).
    fn reply(&mut self, xid: u32, hdr: *mut FbsdMbuf, res: *mut FbsdMbuf) -> i32 {
        let Some(ci) = self.ctxs.find(xid) else {
            self.stats.reply_failed += 1;
            // SAFETY: per krpc_svc_reply's contract the chains are ours to consume.
            drop(unsafe { (MbufChain::from_raw(hdr), MbufChain::from_raw(res)) });
            return ffi::SVC_FAILED;
        };
        let Some(si) = self.free_slot() else {
            return ffi::SVC_AGAIN;
        };
        let Some(slot) = self.slots.get(si) else {
            return ffi::SVC_AGAIN;
        };
        let sp: Arc<dyn PageProvider> = slot.pages.clone();
        // SAFETY: the C caller holds both chains (live, unchanged) during the call.
        let walked = unsafe { self.bridge.chain_from_mbuf_parts(&[hdr, res], &sp) };
        let pending = self.ctxs.0.remove(ci);
        // SAFETY: from here on the chains are consumed (held or freed) unless we return
        // SVC_AGAIN, which gives them back unowned (into_raw).
        let owned = unsafe { (MbufChain::from_raw(hdr), MbufChain::from_raw(res)) };
        let walked = match walked {
            Ok(c) if self.stock => self.stock_reply(&pending, c, &sp).ok(),
            Ok(c) => Some(c),
            Err(_) => None,
        };
        let ctx = pending.ctx;
        let Some(chain) = walked else {
            // The krpc's chain cannot be sent (an insane M_EXTPG mbuf, no memory to mark
            // its DDP item): the client gets SYSTEM_ERR rather than silence.
            self.answer(ctx, &svc::refusal(xid, AcceptStat::SystemErr));
            self.stats.reply_failed += 1;
            return ffi::SVC_FAILED;
        };
        // Sent, or queued behind replies waiting for send resources (sent in order from a
        // later reap, when a Send completion raises the upcall): either way the chains stay
        // in the slot until the Responder lets go of their pages.
        match self.conn.reply(&mut self.qp, ctx, chain) {
            Ok(()) => {
                self.stats.replies += 1;
                self.hold(si, owned);
                ffi::SVC_SENT
            }
            Err(_) => {
                // ERR_CHUNK sent by the Responder, or the connection is gone: the chain is
                // dropped (its references with it).
                self.stats.reply_failed += 1;
                self.hold(si, owned);
                ffi::SVC_FAILED
            }
        }
    }

    /// A slot with no chains held (after a reap if none is free now).
    fn free_slot(&mut self) -> Option<usize> {
        let free = |s: &[Slot]| s.iter().position(|x| x.held.is_none());
        if let Some(i) = free(&self.slots) {
            return Some(i);
        }
        self.reap();
        free(&self.slots)
    }

    /// Keep the chains in slot `si` until its pages are released (at once if none is
    /// referenced any more).
    fn hold(&mut self, si: usize, owned: Held) {
        if let Some(s) = self.slots.get_mut(si) {
            if s.pages.outstanding() > 0 {
                s.held = Some(owned);
                self.stats.held += 1;
                return;
            }
        }
        self.stats.released += 1;
        drop(owned);
    }

    /// The krpc will not answer `xid` (`svc_rdma_drop`, see `c/krpc_rdma_svc.h`): its
    /// context and credit go back to the Responder ([`Responder::drop_call`]). False if no
    /// call `xid` is waiting for its reply.
    fn drop_call(&mut self, xid: u32) -> bool {
        let Some(ctx) = self.ctxs.take(xid) else {
            return false;
        };
        self.give_back(ctx);
        self.stats.dropped += 1;
        true
    }

    /// The context goes back to the Responder (`ServerConnection::drop_call`): calls that
    /// waited for it join the queue, never dropped unanswered. A context the Responder no
    /// longer knows (the connection went) is gone already.
    fn give_back(&mut self, ctx: ReplyCtx) {
        self.conn.drop_call(&mut self.qp, ctx);
    }

    fn stat(&mut self) -> i32 {
        self.reap();
        if self.conn.is_lost() {
            ffi::SVC_STAT_DIED
        } else if self.conn.wait() == Wait::Now {
            ffi::SVC_STAT_MOREREQS
        } else {
            ffi::SVC_STAT_IDLE
        }
    }
}

impl KrpcSvc {
    /// Enable `n` reverse slots on this connection (at most `max_reverse_requests`).
    ///
    /// # Errors
    /// `EINVAL`.
    pub fn set_cbslots(&mut self, n: u32) -> Result<(), i32> {
        self.conn
            .responder_mut()
            .set_reverse_slots(n)
            .map_err(|_| Errno::EINVAL.freebsd())
    }

    /// Send the callback `hdr` + `args` (see `krpc_svc_bck_send`).
    fn bck_send(
        &mut self,
        hdr: *const FbsdMbuf,
        args: *const FbsdMbuf,
        res: &mut KrpcClntRes,
    ) -> i32 {
        let mut refuse = |stat: ClntStat, err: Errno| {
            (res.stat, res.err) = (stat as i32, err.freebsd());
            ffi::CLNT_REFUSED
        };
        if self.conn.is_lost() {
            // As clnt_bck_call on a connection the client closed: RPC_CANTRECV.
            return refuse(ClntStat::CantRecv, Errno::ENOTCONN);
        }
        if self.bck.w.len() >= self.bck.w.capacity() {
            // Every slot is taken (calls abandoned wait for their replies): back-pressure.
            return ffi::CLNT_AGAIN;
        }
        let pages = Arc::clone(&self.pages);
        // SAFETY: the C caller holds both chains (live, unchanged) during the call.
        let call = match unsafe { self.bridge.chain_from_mbuf_parts(&[hdr, args], &pages) } {
            Ok(c) => c,
            Err(BridgeError::Invalid) => return refuse(ClntStat::CantEncodeArgs, Errno::EINVAL),
            Err(_) => return refuse(ClntStat::CantSend, Errno::ENOMEM),
        };
        let Some(xid) = self.head.of(&call).and_then(|h| h.get(..4)).map(|w| {
            let mut b = [0u8; 4];
            b.copy_from_slice(w);
            u32::from_be_bytes(b)
        }) else {
            return refuse(ClntStat::CantEncodeArgs, Errno::EINVAL);
        };
        match self.conn.reverse_call(&mut self.qp, call) {
            Ok(()) => {
                self.bck.w.push((xid, None));
                ffi::CLNT_SENT
            }
            Err(r) => match r.error {
                CallError::NoCredit | CallError::WouldBlock => ffi::CLNT_AGAIN,
                // Reverse-direction calls are inline only (RFC 8167: no chunks).
                CallError::TooLarge => refuse(ClntStat::CantSend, Errno::EMSGSIZE),
                CallError::ConnectionLost => refuse(ClntStat::CantRecv, Errno::ENOTCONN),
                // No reverse slot enabled on this connection.
                CallError::BadConfig => refuse(ClntStat::CantSend, Errno::EINVAL),
                e => {
                    let e = e.rpc_err(Phase::Send);
                    (res.stat, res.err) = (e.status as i32, e.errno.freebsd());
                    ffi::CLNT_REFUSED
                }
            },
        }
    }

    /// The callback `xid`'s end, if it came (see `krpc_svc_bck_poll`).
    fn bck_poll(&mut self, xid: u32, rep: &mut *mut FbsdMbuf, res: &mut KrpcClntRes) -> i32 {
        let mut got = self.bck.take(xid);
        if matches!(got, Some(None)) {
            self.reap_armed();
            got = self.bck.take(xid);
        }
        let reply = match got {
            Some(Some(ReverseOutcome::Reply { reply, .. })) => reply,
            Some(Some(ReverseOutcome::Failed { .. })) | None => {
                // The connection went with the call outstanding (or nothing is known of it).
                (res.stat, res.err) = (ClntStat::CantRecv as i32, Errno::ENOTCONN.freebsd());
                return ffi::CLNT_DONE;
            }
            Some(None) if self.conn.is_lost() => {
                self.bck.w.retain(|(x, _)| *x != xid);
                (res.stat, res.err) = (ClntStat::CantRecv as i32, Errno::ENOTCONN.freebsd());
                return ffi::CLNT_DONE;
            }
            Some(None) => return ffi::CLNT_PENDING,
        };
        let mut reply = reply;
        let Some(off) = self
            .head
            .of(&reply)
            .and_then(|h| crate::clnt::reply_status(h, res))
        else {
            (res.stat, res.err) = (ClntStat::CantDecodeRes as i32, Errno::EBADMSG.freebsd());
            return ffi::CLNT_DONE;
        };
        if res.stat != ClntStat::Success as i32 {
            return ffi::CLNT_DONE;
        }
        let trimmed = i64::try_from(off)
            .ok()
            .and_then(|n| reply.adj(n).ok())
            .is_some();
        if !trimmed {
            (res.stat, res.err) = (ClntStat::CantDecodeRes as i32, Errno::EBADMSG.freebsd());
            return ffi::CLNT_DONE;
        }
        if reply.is_empty() {
            return ffi::CLNT_DONE;
        }
        match self.bridge.mbufs_from_chain(reply, true, true) {
            Ok(m) => *rep = m.map_or(core::ptr::null_mut(), MbufChain::into_raw),
            Err(_) => (res.stat, res.err) = (ClntStat::CantRecv as i32, Errno::ENOMEM.freebsd()),
        }
        ffi::CLNT_DONE
    }
}

/// A call handed up and not answered yet: its XID, what the stock-NFS mode's reply hook
/// needs of it (program, version, procedure), its context.
#[derive(Debug)]
struct Pending {
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    ctx: ReplyCtx,
}

/// The calls handed up and not answered yet, by XID (a table allocated once, `max_requests`
/// entries).
#[derive(Debug)]
struct Contexts(Vec<Pending>);

impl Contexts {
    /// Keep `ctx` for `call`; a table full (impossible: one context per call handed up)
    /// drops it, which gives it back to the Responder at its next poll.
    fn put(&mut self, call: &KrpcSvcCall, ctx: ReplyCtx) {
        if self.0.len() < self.0.capacity() {
            self.0.push(Pending {
                xid: call.xid,
                prog: call.prog,
                vers: call.vers,
                proc_: call.proc_,
                ctx,
            });
        }
    }

    fn find(&self, xid: u32) -> Option<usize> {
        self.0.iter().position(|p| p.xid == xid)
    }

    /// The context of `xid`, out of the table.
    fn take(&mut self, xid: u32) -> Option<ReplyCtx> {
        let i = self.find(xid)?;
        Some(self.0.swap_remove(i).ctx)
    }
}

/// Bytes `off..off + len` of `chain` (a reply's DDP item, `off` a multiple of 4) become a
/// DDP region: a marker in front, the data as plain page mbufs (kept when they are already,
/// else copied into fresh pages of `pages`), its XDR pad (what follows, up to 3 bytes) in an
/// ordinary mbuf of its own, so that the region ends with the data (RFC 8166 §3.4.5: the pad
/// is neither written nor sent inline). The chain, and the bytes copied (0: none).
///
/// # Errors
/// [`MbufError::Alloc`] (the split, the pages, the copy), [`MbufError::OutOfRange`] for a
/// range outside the chain; the chain is lost then.
#[inline(never)] // its Mbuf temporaries (a marker, the pad's mbuf) stay out of its caller's frame
fn mark_ddp(
    mut chain: Chain,
    off: usize,
    len: usize,
    pages: &Arc<dyn PageProvider>,
) -> Result<(Chain, usize), MbufError> {
    let mut data = chain.split(off)?;
    let mut tail = data.split(len)?;
    let (data, copied) = if nfs_proto::chain::check_data(&data).is_ok() {
        (data, 0)
    } else {
        (copy_to_pages(&data, pages)?, len)
    };
    let mut pad = [0u8; 3];
    let n = ((4 - len % 4) % 4).min(tail.len());
    let pad = pad.get_mut(..n).unwrap_or_default();
    tail.copydata(0, pad)?;
    tail.adj(i64::try_from(n).unwrap_or_default())?;
    append_one(&mut chain, None)?;
    chain.cat(data)?;
    // Even empty: a non-page mbuf ends the DDP region (it is the run of page mbufs behind
    // the marker), whatever the tail starts with.
    append_one(&mut chain, Some(pad))?;
    chain.cat(tail)?;
    Ok((chain, copied))
}

/// Append a DDP marker (`None`) or an internal mbuf of `bytes` to `chain`. Not inlined: an
/// `Mbuf` is a 280-odd-byte value, and `mark_ddp`'s frame went over 1 KiB with two of them.
///
/// # Errors
/// [`MbufError::Alloc`], [`MbufError::TooLarge`].
#[inline(never)]
fn append_one(chain: &mut Chain, bytes: Option<&[u8]>) -> Result<(), MbufError> {
    let m = match bytes {
        None => Mbuf::ddp_marker(),
        Some(b) => Mbuf::internal(b)?,
    };
    chain.append_mbuf(m)
}

/// The bytes of `data` in fresh pages of `pages` (plain page mbufs).
///
/// # Errors
/// [`MbufError::Alloc`]: no pages or memory.
#[inline(never)] // its bounce buffer stays out of its caller's frame
fn copy_to_pages(data: &Chain, pages: &Arc<dyn PageProvider>) -> Result<Chain, MbufError> {
    let mut out = Chain::alloc_pages(pages, data.len())?;
    let mut pos = 0usize;
    for m in data.mbufs() {
        if let Some(b) = m.data() {
            out.copyback(pos, b)?;
        } else {
            // A page mbuf (its header / trailer bytes too), through a small bounce buffer.
            let mut buf = [0u8; 256];
            let end = pos.checked_add(m.len()).ok_or(MbufError::Alloc)?;
            let mut at = pos;
            while at < end {
                let piece = buf.get_mut(..(end - at).min(256)).unwrap_or_default();
                data.copydata(at, piece)?;
                out.copyback(at, piece)?;
                at += piece.len();
            }
        }
        pos = pos.checked_add(m.len()).ok_or(MbufError::Alloc)?;
    }
    Ok(out)
}

/// Copy an opaque auth `body` to `dst`.
///
/// # Safety
/// `dst` is NULL or holds `MAX_AUTH_BYTES` writable bytes nobody else uses meanwhile.
pub(crate) unsafe fn copy_auth(body: &[u8], dst: *mut u8) -> bool {
    if body.is_empty() {
        return true;
    }
    if dst.is_null() || body.len() > MAX_AUTH_BYTES {
        return false;
    }
    // SAFETY: per the function's contract (body.len() <= MAX_AUTH_BYTES); `body` is ours,
    // not `dst`.
    unsafe { core::ptr::copy_nonoverlapping(body.as_ptr(), dst, body.len()) };
    true
}

/// The state behind a C handle.
///
/// # Safety
/// `h` came from [`KrpcSvc::into_xprt`] and is not freed; the caller holds the transport's
/// mutex (no other reference is live).
unsafe fn state<'a>(h: *mut KrpcSvcHandle) -> &'a mut KrpcSvc {
    // SAFETY: per the function's contract.
    unsafe { &mut *h.cast::<KrpcSvc>() }
}

/// `krpc_svc_recv` (see `c/krpc_rdma_svc.h`).
///
/// # Safety
/// `h` as for `state`; `call` and `args` valid out-pointers; `cred` / `verf` NULL or
/// `MAX_AUTH_BYTES` writable bytes each.
#[no_mangle]
pub unsafe extern "C" fn krpc_svc_recv(
    h: *mut KrpcSvcHandle,
    call: *mut KrpcSvcCall,
    cred: *mut c_void,
    verf: *mut c_void,
    args: *mut *mut FbsdMbuf,
) -> i32 {
    // SAFETY: per the function's contract.
    let (s, call, args) = unsafe { (state(h), &mut *call, &mut *args) };
    *args = core::ptr::null_mut();
    match s.recv(call, cred.cast(), verf.cast()) {
        Recv::Call(m) => {
            *args = m.map_or(core::ptr::null_mut(), MbufChain::into_raw);
            ffi::SVC_CALL
        }
        Recv::None => ffi::SVC_NONE,
        Recv::Died => ffi::SVC_DIED,
    }
}

/// `krpc_svc_reply` (see `c/krpc_rdma_svc.h`).
///
/// # Safety
/// `h` as for `state`; `hdr` a valid chain and `res` NULL or one, both the caller's to
/// give (consumed unless `KRPC_SVC_AGAIN` is returned).
#[no_mangle]
pub unsafe extern "C" fn krpc_svc_reply(
    h: *mut KrpcSvcHandle,
    xid: u32,
    hdr: *mut FbsdMbuf,
    res: *mut FbsdMbuf,
) -> i32 {
    // SAFETY: per the function's contract.
    unsafe { state(h) }.reply(xid, hdr, res)
}

/// `krpc_svc_reap` (see `c/krpc_rdma_svc.h`).
///
/// # Safety
/// `h` as for `state`.
#[no_mangle]
pub unsafe extern "C" fn krpc_svc_reap(h: *mut KrpcSvcHandle) {
    // SAFETY: per the function's contract.
    unsafe { state(h) }.reap_armed();
}

/// `krpc_svc_drop` (see `c/krpc_rdma_svc.h`): `KRPC_SVC_DROPPED`, or `KRPC_SVC_FAILED` when
/// no call `xid` is waiting for its reply.
///
/// # Safety
/// `h` as for `state`.
#[no_mangle]
pub unsafe extern "C" fn krpc_svc_drop(h: *mut KrpcSvcHandle, xid: u32) -> i32 {
    // SAFETY: per the function's contract.
    if unsafe { state(h) }.drop_call(xid) {
        ffi::SVC_DROPPED
    } else {
        ffi::SVC_FAILED
    }
}

/// `krpc_svc_stat` (see `c/krpc_rdma_svc.h`).
///
/// # Safety
/// `h` as for `state`.
#[no_mangle]
pub unsafe extern "C" fn krpc_svc_stat(h: *mut KrpcSvcHandle) -> i32 {
    // SAFETY: per the function's contract.
    unsafe { state(h) }.stat()
}

/// `krpc_svc_get_stats` (see `c/krpc_rdma_svc.h`).
///
/// # Safety
/// `h` as for `state`; `out` a valid out-pointer.
#[no_mangle]
pub unsafe extern "C" fn krpc_svc_get_stats(h: *mut KrpcSvcHandle, out: *mut KrpcSvcStats) {
    // SAFETY: per the function's contract.
    let s = unsafe { state(h) };
    let c = s.conn.responder().counters();
    (s.stats.write_chunks, s.stats.long_replies) = (c.write_chunks, c.long_replies);
    // SAFETY: per the function's contract.
    unsafe { *out = s.stats };
}

/// `krpc_svc_set_stock` (see `c/krpc_rdma_svc.h`).
///
/// # Safety
/// `h` as for `state`.
#[no_mangle]
pub unsafe extern "C" fn krpc_svc_set_stock(h: *mut KrpcSvcHandle, on: i32) {
    // SAFETY: per the function's contract.
    unsafe { state(h) }.set_stock(on != 0);
}

/// `krpc_svc_get_stock` (see `c/krpc_rdma_svc.h`): 1 or 0.
///
/// # Safety
/// `h` as for `state`.
#[no_mangle]
pub unsafe extern "C" fn krpc_svc_get_stock(h: *mut KrpcSvcHandle) -> i32 {
    // SAFETY: per the function's contract.
    i32::from(unsafe { state(h) }.stock())
}

/// `krpc_svc_addrs` (see `c/krpc_rdma_svc.h`): 0, or `KRPC_SVC_FAILED` with both zeroed.
///
/// # Safety
/// `h` as for `state`; `local` and `remote` valid out-pointers of a `struct
/// sockaddr_storage` each.
#[no_mangle]
pub unsafe extern "C" fn krpc_svc_addrs(
    h: *mut KrpcSvcHandle,
    local: *mut SockaddrStorage,
    remote: *mut SockaddrStorage,
) -> i32 {
    // SAFETY: per the function's contract.
    let (s, local, remote) = unsafe { (state(h), &mut *local, &mut *remote) };
    match s.qp.addrs() {
        Some((l, r)) => {
            (*local, *remote) = (l, r);
            0
        }
        None => {
            (*local, *remote) = (SockaddrStorage::default(), SockaddrStorage::default());
            ffi::SVC_FAILED
        }
    }
}

/// `krpc_svc_free` (see `c/krpc_rdma_svc.h`).
///
/// # Safety
/// `h` as for `state`; not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn krpc_svc_free(h: *mut KrpcSvcHandle) {
    // SAFETY: `h` came from Box::into_raw in into_xprt and is given back once.
    drop(unsafe { Box::from_raw(h.cast::<KrpcSvc>()) });
}

/// `krpc_svc_set_cbslots` (see `c/krpc_rdma_svc.h`): 0 or `EINVAL`.
///
/// # Safety
/// `h` as for `state`.
#[no_mangle]
pub unsafe extern "C" fn krpc_svc_set_cbslots(h: *mut KrpcSvcHandle, n: u32) -> i32 {
    // SAFETY: per the function's contract.
    match unsafe { state(h) }.set_cbslots(n) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// `krpc_svc_bck_send` (see `c/krpc_rdma_svc.h`): `KRPC_CLNT_SENT`, `_AGAIN` or `_REFUSED`.
///
/// # Safety
/// `h` as for `state`; `hdr` and `args` NULL or valid chains (walked, not consumed); `res` a
/// valid out-pointer.
#[no_mangle]
pub unsafe extern "C" fn krpc_svc_bck_send(
    h: *mut KrpcSvcHandle,
    hdr: *const FbsdMbuf,
    args: *const FbsdMbuf,
    res: *mut KrpcClntRes,
) -> i32 {
    // SAFETY: per the function's contract.
    let (s, res) = unsafe { (state(h), &mut *res) };
    *res = KrpcClntRes::default();
    s.bck_send(hdr, args, res)
}

/// `krpc_svc_bck_poll` (see `c/krpc_rdma_svc.h`): `KRPC_CLNT_DONE` or `_PENDING`.
///
/// # Safety
/// `h` as for `state`; `rep` and `res` valid out-pointers.
#[no_mangle]
pub unsafe extern "C" fn krpc_svc_bck_poll(
    h: *mut KrpcSvcHandle,
    xid: u32,
    rep: *mut *mut FbsdMbuf,
    res: *mut KrpcClntRes,
) -> i32 {
    // SAFETY: per the function's contract.
    let (s, rep, res) = unsafe { (state(h), &mut *rep, &mut *res) };
    *rep = core::ptr::null_mut();
    *res = KrpcClntRes::default();
    s.bck_poll(xid, rep, res)
}

/// `krpc_svc_bck_abandon` (see `c/krpc_rdma_svc.h`).
///
/// # Safety
/// `h` as for `state`.
#[no_mangle]
pub unsafe extern "C" fn krpc_svc_bck_abandon(h: *mut KrpcSvcHandle, xid: u32) {
    // SAFETY: per the function's contract.
    unsafe { state(h) }.bck.w.retain(|(x, _)| *x != xid);
}

/// `krpc_svc_bck_handed` (see `c/krpc_rdma_svc.h`).
///
/// # Safety
/// `h` as for `state`.
#[no_mangle]
pub unsafe extern "C" fn krpc_svc_bck_handed(h: *mut KrpcSvcHandle) -> u32 {
    // SAFETY: per the function's contract.
    core::mem::take(&mut unsafe { state(h) }.bck.new)
}

extern "C" fn no_upcall(_: *mut c_void) {}

/// `krpc_svc_set_upcall` (see `c/krpc_rdma_svc.h`).
///
/// # Safety
/// `h` as for `state`; `f(arg)` callable from the completion handler until the state is
/// freed or the upcall replaced.
#[no_mangle]
pub unsafe extern "C" fn krpc_svc_set_upcall(
    h: *mut KrpcSvcHandle,
    f: Option<extern "C" fn(*mut c_void)>,
    arg: *mut c_void,
) {
    let (f, arg) = match f {
        Some(f) => (f, arg),
        None => (
            no_upcall as extern "C" fn(*mut c_void),
            core::ptr::null_mut(),
        ),
    };
    // SAFETY: per the function's contract.
    unsafe { state(h).qp.set_upcall(f, arg) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use krpc_rdma::transport::ResponderEvent;

    fn bytes(words: &[u32], extra: &[u8]) -> Vec<u8> {
        let mut b: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        b.extend_from_slice(extra);
        b
    }

    /// The words of the reply chain that answers call 9 with `reply`.
    fn answer_words(reply: &ReplyHeader) -> Vec<u32> {
        answer_chain(reply)
            .unwrap()
            .to_vec()
            .unwrap()
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn a_call_header_is_parsed_with_its_credential() {
        // AUTH_SYS credential of 5 bytes (padded to 8), AUTH_NONE verifier, 4 argument bytes.
        let b = bytes(
            &[7, 0, 2, 100_003, 3, 1, 1, 5],
            &[1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9],
        );
        let mut call = KrpcSvcCall::default();
        let (cred, verf, args) = parse_call(&b, &mut call).unwrap();
        assert_eq!((cred, verf, args), (&[1, 2, 3, 4, 5][..], &[][..], 48));
        assert_eq!(
            (call.xid, call.rpcvers, call.prog, call.vers, call.proc_),
            (7, 2, 100_003, 3, 1)
        );
        assert_eq!((call.cred_flavor, call.cred_len, call.verf_len), (1, 5, 0));
        assert_eq!(b.len() - args, 4);
    }

    #[test]
    fn malformed_headers_get_their_answers() {
        let mut call = KrpcSvcCall::default();
        // What the client of call 9 gets back (RFC 5531 reply_body words after the XID).
        let cases: [(&[u32], &[u32]); 6] = [
            (&[1, 0, 3, 1, 1, 0, 0, 0, 0, 0], &[1, 1, 0, 2, 2]), // RPC_MISMATCH 2..2
            (&[1, 0, 2, 1, 1, 0, 0, 401], &[1, 1, 1, 1]),        // AUTH_ERROR AUTH_BADCRED
            (&[1, 0, 2, 1, 1, 0, 0, 0, 0, 401], &[1, 1, 1, 3]),  // AUTH_ERROR AUTH_BADVERF
            (&[1, 0, 2, 1], &[1, 0, 0, 0, 4]),                   // GARBAGE_ARGS
            (&[1, 1, 0, 0, 0, 0], &[1, 0, 0, 0, 4]),             // not a CALL: GARBAGE_ARGS
            // A credential body the message does not hold: GARBAGE_ARGS.
            (&[1, 0, 2, 1, 1, 0, 1, 400, 0, 0], &[1, 0, 0, 0, 4]),
        ];
        for (w, want) in cases {
            let bad = parse_call(&bytes(w, &[]), &mut call).unwrap_err();
            let got = answer_words(&bad.reply(9));
            assert_eq!(got.first(), Some(&9), "{w:?}");
            assert_eq!(&got[1..], want, "{w:?}");
        }
        // A length that overflows the padding arithmetic: refused, no panic.
        assert!(parse_call(&bytes(&[1, 0, 2, 1, 1, 0, 1, u32::MAX], &[]), &mut call).is_err());
    }

    /// What `krpc_svc_drop` does with the table, over a real Responder (software RC
    /// provider): the context of the dropped XID leaves the table and goes back to the
    /// Responder (`calls_dropped`), a second drop of it finds nothing, the other call's
    /// context stays and is answered; a context left in the table is given back when the
    /// table goes (`contexts_reclaimed`), not leaked.
    #[test]
    fn a_dropped_xid_gives_its_context_back() {
        use krpc_rdma::soft::{pair, SoftConfig};
        use krpc_rdma::transport::{ReplySpec, Requester, TransportConfig};
        use mbuf::HeapPageArena;

        let pa: Arc<dyn PageProvider> = Arc::new(HeapPageArena::new(64).unwrap());
        let pb: Arc<dyn PageProvider> =
            Arc::new(HeapPageArena::with_base(64, 0x10_0000_0000).unwrap());
        let cfg = TransportConfig {
            max_requests: 3,
            ..TransportConfig::default()
        };
        let (ca, cb) = (SoftConfig::default(), SoftConfig::default());
        let mut req = Requester::new(cfg, ca.resources(), pa.clone()).unwrap();
        let mut resp = Responder::new(cfg, cb.resources(), pb.clone()).unwrap();
        let ca = SoftConfig {
            private_data: heapless::Vec::from_slice(&req.private_data()).unwrap(),
            ..ca
        };
        let cb = SoftConfig {
            private_data: heapless::Vec::from_slice(&resp.private_data()).unwrap(),
            ..cb
        };
        let (mut qa, mut qb) = pair(ca, pa.clone(), cb, pb.clone()).unwrap();
        type Qp = krpc_rdma::soft::SoftQp;
        fn poll(r: &mut Requester, qa: &mut Qp, s: &mut Responder, qb: &mut Qp) -> Vec<Incoming> {
            let mut calls = Vec::new();
            r.poll(qa, &mut |_| {});
            s.poll(qb, &mut |e| {
                if let ResponderEvent::Call(c) = e {
                    calls.push(c);
                }
            });
            calls
        }
        let mut calls = poll(&mut req, &mut qa, &mut resp, &mut qb);
        // One call answered first (the grant starts at 1), then three held.
        let first = Chain::from_bytes(&0x50u32.to_be_bytes()).unwrap();
        req.call(&mut qa, first, ReplySpec::inline(64)).unwrap();
        calls.extend(poll(&mut req, &mut qa, &mut resp, &mut qb));
        let c = calls.pop().unwrap();
        resp.reply(&mut qb, c.ctx, Chain::from_bytes(&[0, 0, 0, 0x50]).unwrap())
            .unwrap();
        calls.extend(poll(&mut req, &mut qa, &mut resp, &mut qb));
        assert!(req.credits_granted() >= 3, "the grant opened up");
        for xid in 0x51..0x54u32 {
            let call = Chain::from_bytes(&xid.to_be_bytes()).unwrap();
            req.call(&mut qa, call, ReplySpec::inline(64)).unwrap();
            calls.extend(poll(&mut req, &mut qa, &mut resp, &mut qb));
        }
        assert_eq!(calls.len(), 3, "three calls handed up");
        let mut t = Contexts(Vec::with_capacity(3));
        let xids: Vec<u32> = calls.iter().map(|c| c.xid).collect();
        for c in calls.drain(..) {
            let call = KrpcSvcCall {
                xid: c.xid,
                ..KrpcSvcCall::default()
            };
            t.put(&call, c.ctx);
        }
        // Inline calls carried no write chunk: nothing for the stock-NFS mode to fill.
        assert!(t.0.iter().all(|p| resp.write_chunk_room(&p.ctx).is_none()));
        let ctx = t.take(xids[1]).expect("the call is in the table");
        resp.drop_call(&mut qb, ctx, &mut |_| {}).unwrap();
        assert_eq!(resp.counters().calls_dropped, 1);
        assert!(t.take(xids[1]).is_none(), "a second drop finds nothing");
        let ctx = t.take(xids[0]).unwrap();
        resp.reply(
            &mut qb,
            ctx,
            Chain::from_bytes(&xids[0].to_be_bytes()).unwrap(),
        )
        .unwrap();
        assert_eq!(t.0.len(), 1);
        drop(t);
        resp.poll(&mut qb, &mut |_| {});
        assert_eq!(
            resp.counters().contexts_reclaimed,
            1,
            "the table's last context came back"
        );
    }

    /// What the stock-NFS mode does to a marker-less reply: the DDP region is the data
    /// `locate_reply_item` found (in pages, copied when it was in ordinary mbufs, shared when
    /// it already was page mbufs), the pad in an mbuf of its own, every byte unchanged.
    #[test]
    fn mark_ddp_makes_the_located_item_a_ddp_region() {
        use mbuf::HeapPageArena;
        use nfs_proto::nfs3::{Nfsstat3, ReadHead, NFSPROC3_READ, NFS_PROGRAM};
        use onc_rpc::xdr::Encoder;

        let pages: Arc<dyn PageProvider> = Arc::new(HeapPageArena::new(64).unwrap());
        let data: Vec<u8> = (0..10_001u32).map(|i| (i * 7) as u8).collect();
        let mut e = Encoder::new();
        ReplyHeader::success(3).encode(&mut e);
        ReadHead {
            status: Nfsstat3::OK,
            file_attributes: None,
            count: 10_001,
            eof: true,
            data_len: 10_001,
        }
        .encode(&mut e);
        let head = e.finish().unwrap();
        let mut bytes = head.clone();
        bytes.extend_from_slice(&data);
        bytes.extend_from_slice(&[0, 0, 0]);

        // As stock NFS builds it: ordinary mbufs / clusters, no marker.
        let plain = Chain::from_bytes(&bytes).unwrap();
        let (off, len) = locate_reply_item(NFS_PROGRAM, 3, NFSPROC3_READ, &plain).unwrap();
        assert_eq!((off, len), (head.len(), data.len()));
        let (c, copied) = mark_ddp(plain, off, len, &pages).unwrap();
        assert_eq!(copied, data.len(), "the data was copied into pages");
        let regions: Vec<_> = c.ddp_regions().collect();
        assert_eq!(regions.len(), 1);
        assert_eq!(regions[0].range(), off..off + len);
        assert_eq!(c.to_vec().unwrap(), bytes, "every byte where it was");
        c.check_invariants().unwrap();

        // Data already in page mbufs (an M_EXTPG READ without a marker): shared, not copied.
        let mut paged = Chain::from_bytes(&head).unwrap();
        paged
            .cat(nfs_proto::chain::data_pages_from_bytes(&pages, &data).unwrap())
            .unwrap();
        paged.append(&[0, 0, 0]).unwrap();
        let (c, copied) = mark_ddp(paged, off, len, &pages).unwrap();
        assert_eq!(copied, 0, "page mbufs are used as they are");
        assert_eq!(c.ddp_regions().next().unwrap().range(), off..off + len);
        assert_eq!(c.to_vec().unwrap(), bytes);

        // A range beyond the chain: an error, no panic.
        let short = Chain::from_bytes(&bytes[..100]).unwrap();
        assert!(mark_ddp(short, off, len, &pages).is_err());
    }

    impl crate::qp::FaceQp for krpc_rdma::soft::SoftQp {
        unsafe fn set_upcall(&mut self, _: extern "C" fn(*mut c_void), _: *mut c_void) {}
        fn arm(&mut self) {}
    }

    /// The backchannel pieces both sides run, over the software provider: the client's
    /// `KrpcClnt` (reverse slots via `set_cbslots`, bounded by `max_reverse_requests`) and
    /// the server's `KrpcSvc` waiting for its callbacks by XID (what `krpc_svc_bck_poll`
    /// reads). Without a backchannel xprt a reverse call is answered `SYSTEM_ERR` by the
    /// client at once, and the waiting callback ends `RPC_SYSTEMERROR`; a call queued for a
    /// backchannel xprt that goes is answered `SYSTEM_ERR` too (never leaked); a late reply
    /// for an abandoned callback is dropped; the loss ends a waiting callback `RPC_CANTRECV`.
    /// (The mbuf halves, `krpc_clnt_bc_recv` / `_reply` and `krpc_svc_bck_send`, need the
    /// C bridge: the emu tests.)
    #[test]
    fn backchannel_system_err_late_reply_and_loss() {
        use crate::clnt::KrpcClnt;
        use krpc_rdma::soft::{pair, SoftConfig};
        use krpc_rdma::transport::{ReplySpec, Requester, TransportConfig};
        use mbuf::HeapPageArena;

        let pa: Arc<dyn PageProvider> = Arc::new(HeapPageArena::new(64).unwrap());
        let pb: Arc<dyn PageProvider> =
            Arc::new(HeapPageArena::with_base(64, 0x10_0000_0000).unwrap());
        let cfg = TransportConfig {
            max_requests: 4,
            max_reverse_requests: 2,
            ..TransportConfig::default()
        };
        let (ca, cb) = (SoftConfig::default(), SoftConfig::default());
        let req = Requester::new(cfg, ca.resources(), pa.clone()).unwrap();
        let resp = Responder::new(cfg, cb.resources(), pb.clone()).unwrap();
        let ca = SoftConfig {
            private_data: heapless::Vec::from_slice(&req.private_data()).unwrap(),
            ..ca
        };
        let cb = SoftConfig {
            private_data: heapless::Vec::from_slice(&resp.private_data()).unwrap(),
            ..cb
        };
        let (qa, qb) = pair(ca, pa.clone(), cb, pb.clone()).unwrap();
        fn hook(_: &Chain, _: &Arc<dyn PageProvider>) -> ReplySpec {
            ReplySpec::inline(256)
        }
        let mut c = KrpcClnt::new(Box::new(qa), Box::new(req), pa, hook, 4).unwrap();
        let mut s = KrpcSvc::new(Box::new(qb), Box::new(resp), pb, 4).unwrap();
        assert_eq!(
            c.set_cbslots(3),
            Err(EINVAL_FBSD),
            "beyond max_reverse_requests"
        );
        c.set_cbslots(2).unwrap();
        assert_eq!(c.cbslots(), 2);
        s.set_cbslots(2).unwrap();
        assert!(s.set_cbslots(3).is_err());
        let words = |w: &[u32]| -> Vec<u8> { w.iter().flat_map(|x| x.to_be_bytes()).collect() };
        let cb_call = |xid: u32| {
            Chain::from_bytes(&words(&[xid, 0, 2, 0x4000_0000, 1, 1, 0, 0, 0, 0])).unwrap()
        };
        let settle = |c: &mut KrpcClnt, s: &mut KrpcSvc| {
            for _ in 0..8 {
                let _ = c.reap(None);
                s.reap();
            }
        };
        settle(&mut c, &mut s);

        // No backchannel xprt: answered SYSTEM_ERR by the client's transport.
        s.conn.reverse_call(&mut s.qp, cb_call(0xc1)).unwrap();
        s.bck.w.push((0xc1, None));
        let (mut rep, mut res) = (core::ptr::null_mut(), KrpcClntRes::default());
        assert_eq!(s.bck_poll(0xc1, &mut rep, &mut res), ffi::CLNT_PENDING);
        settle(&mut c, &mut s);
        assert_eq!(s.bck.new, 1, "one waiter's reply arrived");
        assert_eq!(s.bck_poll(0xc1, &mut rep, &mut res), ffi::CLNT_DONE);
        assert_eq!(res.stat, ClntStat::SystemError as i32);
        assert!(rep.is_null());
        assert!(s.bck.w.is_empty());

        // A backchannel xprt registered: queued for it; it goes: answered SYSTEM_ERR.
        c.set_backchannel(true);
        s.conn.reverse_call(&mut s.qp, cb_call(0xc2)).unwrap();
        s.bck.w.push((0xc2, None));
        settle(&mut c, &mut s);
        assert_eq!(c.bc_pending(), 1, "queued for xp_recv");
        assert_eq!(s.bck_poll(0xc2, &mut rep, &mut res), ffi::CLNT_PENDING);
        c.set_backchannel(false);
        assert_eq!(c.bc_pending(), 0);
        settle(&mut c, &mut s);
        assert_eq!(s.bck_poll(0xc2, &mut rep, &mut res), ffi::CLNT_DONE);
        assert_eq!(res.stat, ClntStat::SystemError as i32);
        assert_eq!(c.requester().counters().reverse_dropped, 2);

        // Abandoned (krpc_svc_bck_abandon): the late reply is dropped, its slot freed.
        s.conn.reverse_call(&mut s.qp, cb_call(0xc3)).unwrap();
        s.bck.w.push((0xc3, None));
        s.bck.w.retain(|(x, _)| *x != 0xc3);
        settle(&mut c, &mut s);
        assert!(s.bck.w.is_empty());
        assert_eq!(
            s.conn.responder().reverse_slots().1,
            0,
            "the slot came back"
        );

        // The loss with a callback outstanding: it ends RPC_CANTRECV.
        c.set_backchannel(true);
        s.conn.reverse_call(&mut s.qp, cb_call(0xc4)).unwrap();
        s.bck.w.push((0xc4, None));
        settle(&mut c, &mut s);
        assert_eq!(c.bc_pending(), 1);
        drop(c);
        settle_svc(&mut s);
        assert_eq!(s.bck_poll(0xc4, &mut rep, &mut res), ffi::CLNT_DONE);
        assert_eq!(res.stat, ClntStat::CantRecv as i32);
        // A callback sent after the loss: refused at once (no bridge needed for the check).
        assert!(s.conn.is_lost());
    }

    const EINVAL_FBSD: i32 = Errno::EINVAL.freebsd();

    fn settle_svc(s: &mut KrpcSvc) {
        for _ in 0..8 {
            s.reap();
        }
    }

    #[test]
    fn the_transport_s_own_answer_is_system_err() {
        // What xp_recv / xp_reply answer when the arguments or results cannot be moved.
        let words = answer_words(&svc::refusal(9, AcceptStat::SystemErr));
        assert_eq!(words, [9, 1, 0, 0, 0, 5]);
    }
}
