//! The rigs: [`Link`], two connected queue pairs driven by hand, and [`Pair`], a
//! [`Requester`] and a [`Responder`] over a link, driven to completion in a bounded number of
//! steps.

use alloc::format;
use alloc::sync::Arc;
use alloc::vec::Vec;

use krpc_rdma::provider::{CmEvent, Completion, Provider, ProviderError, SendOp, SendWr, WcStatus};
use krpc_rdma::transport::{
    Incoming, ReplySpec, Requester, RequesterEvent, Responder, ResponderEvent,
};
use mbuf::{Chain, PageFragment, PageProvider};

use crate::check::{eq, fail, At, Failure, Outcome};
use crate::fixture::{Connect, Fixture, Limits, PagePair, Setup};
use crate::heap::{try_boxed, Boxed};

/// One side of a link: A (requester, raw peer) or B (responder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The requester's side.
    A,
    /// The responder's side.
    B,
}

/// The work-request id of [`Link::probe_read`].
pub const PROBE_WR: u64 = 0xdead_0000_0001;

/// Two connected queue pairs of a fixture and their page providers.
pub struct Link<'f, F: Fixture> {
    /// The fixture (for waiting and probes).
    pub fx: &'f mut F,
    /// Side A.
    pub a: F::Qp,
    /// Side B.
    pub b: F::Qp,
    /// Side A's pages.
    pub pa: Arc<dyn PageProvider>,
    /// Side B's pages.
    pub pb: Arc<dyn PageProvider>,
}

impl<'f, F: Fixture> Link<'f, F> {
    /// Connect a raw link (no transport endpoints) with these private data, and consume both
    /// `Established` events; returns the link and the private data each side received.
    ///
    /// # Errors
    /// The connection failed or was not established in time.
    #[inline(never)]
    pub fn raw(
        fx: &'f mut F,
        limits: &Limits,
        a_private: &[u8],
        b_private: &[u8],
    ) -> Result<(Self, [Vec<u8>; 2]), Failure> {
        let (pa, pb) = fx.page_providers().at("page providers")?;
        let (a, b) = fx
            .connect(Connect {
                limits,
                a_private,
                b_private,
                before_accept: &mut |_| {},
            })
            .at("connect")?;
        let mut l = Link { fx, a, b, pa, pb };
        let mut got: [Option<Vec<u8>>; 2] = [None, None];
        let mut idle = 0;
        while got.iter().any(Option::is_none) {
            let mut progress = false;
            for (slot, q) in got.iter_mut().zip([&mut l.a, &mut l.b]) {
                match q.poll_event() {
                    Some(CmEvent::Established { private_data }) => {
                        *slot = Some(Vec::from(private_data.as_slice()));
                        progress = true;
                    }
                    Some(CmEvent::Disconnected) => {
                        return Err(fail("establish", "Established", "Disconnected"))
                    }
                    None => {}
                }
            }
            l.idle(&mut idle, progress, "establish")?;
        }
        let [ga, gb] = got;
        Ok((l, [ga.unwrap_or_default(), gb.unwrap_or_default()]))
    }

    /// Wait for progress.
    pub fn wait(&mut self) {
        self.fx.wait(&mut self.a, &mut self.b);
    }

    /// Count a round: reset on progress, else wait; fail once the fixture's idle limit is
    /// reached.
    ///
    /// # Errors
    /// No progress for too long.
    #[inline(never)]
    pub fn idle(&mut self, idle: &mut u32, progress: bool, step: &str) -> Outcome {
        if progress {
            *idle = 0;
            return Ok(());
        }
        *idle += 1;
        if *idle > self.fx.idle_limit() {
            return Err(fail(step, "progress", "no progress (hang)"));
        }
        self.wait();
        Ok(())
    }

    /// The queue pair of side `s`.
    pub fn qp(&mut self, s: Side) -> &mut F::Qp {
        match s {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    /// The page provider of side `s`.
    pub fn pages(&self, s: Side) -> Arc<dyn PageProvider> {
        match s {
            Side::A => self.pa.clone(),
            Side::B => self.pb.clone(),
        }
    }

    /// Completions of side `s` until `want` arrived (then whatever else is ready).
    ///
    /// # Errors
    /// Fewer arrived before the idle limit.
    #[inline(never)]
    pub fn completions(
        &mut self,
        s: Side,
        want: usize,
        step: &str,
    ) -> Result<Vec<Completion>, Failure> {
        let mut out = Vec::new();
        let mut idle = 0;
        loop {
            let mut wcs = [Completion::EMPTY; 16];
            let n = self.qp(s).poll_cq(&mut wcs);
            out.extend(wcs.iter().take(n).copied());
            if out.len() >= want && n == 0 {
                return Ok(out);
            }
            if n == 0 {
                self.idle(&mut idle, false, step)
                    .map_err(|e| fail(e.step, format!("{want} completions"), format!("{out:?}")))?;
            }
        }
    }

    /// What side `s` has ready now, without waiting.
    #[inline(never)]
    pub fn ready(&mut self, s: Side) -> Vec<Completion> {
        let mut out = Vec::new();
        let mut wcs = [Completion::EMPTY; 16];
        loop {
            let n = self.qp(s).poll_cq(&mut wcs);
            out.extend(wcs.iter().take(n).copied());
            if n == 0 {
                return out;
            }
        }
    }

    /// The statuses of `want` completions of side `s` equal `expected`, in order.
    ///
    /// # Errors
    /// Other statuses, or too few.
    #[inline(never)]
    pub fn expect_statuses(&mut self, s: Side, expected: &[WcStatus], step: &str) -> Outcome {
        let got: Vec<_> = self
            .completions(s, expected.len(), step)?
            .iter()
            .map(|c| c.status)
            .collect();
        eq(step, expected, got.as_slice())
    }

    /// Write `bytes` into send buffer `buf` of side `s` and post one signaled Send.
    ///
    /// # Errors
    /// The provider refused.
    #[inline(never)]
    pub fn send_bytes(
        &mut self,
        s: Side,
        wr_id: u64,
        buf: u32,
        bytes: &[u8],
    ) -> Result<(), ProviderError> {
        send_raw(self.qp(s), wr_id, buf, bytes)
    }

    /// Post one signaled RDMA Read of `len` bytes at `handle`/`offset` from side `s` into a
    /// fresh page, and return its completion status. A failed Read breaks the connection:
    /// probe last, after everything else of the connection was checked.
    ///
    /// # Errors
    /// The post was refused, or no completion came.
    #[inline(never)]
    pub fn probe_read(
        &mut self,
        s: Side,
        handle: u32,
        offset: u64,
        len: usize,
    ) -> Result<WcStatus, Failure> {
        self.probe(s, false, handle, offset, len)
    }

    /// [`Link::probe_read`] with an RDMA Write of `len` zero bytes.
    ///
    /// # Errors
    /// As [`Link::probe_read`].
    #[inline(never)]
    pub fn probe_write(
        &mut self,
        s: Side,
        handle: u32,
        offset: u64,
        len: usize,
    ) -> Result<WcStatus, Failure> {
        self.probe(s, true, handle, offset, len)
    }

    #[inline(never)]
    fn probe(
        &mut self,
        s: Side,
        write: bool,
        handle: u32,
        offset: u64,
        len: usize,
    ) -> Result<WcStatus, Failure> {
        let p = self.pages(s);
        let page = p.alloc_page().at("probe: page")?;
        let local = [PageFragment {
            addr: page,
            offset: 0,
            len,
        }];
        let posted = self
            .qp(s)
            .post_send(&[crate::wr::rdma(PROBE_WR, write, &local, handle, offset)]);
        let status = match posted {
            Ok(()) => self.completion_of(s, PROBE_WR, "probe: completion"),
            Err(e) => Err(fail("probe: post", "posted", format!("{e:?}"))),
        };
        p.page_unref(page);
        status.map(|c| c.status)
    }

    /// Poll side `s` until the completion of `wr_id` arrives (other completions are dropped).
    ///
    /// # Errors
    /// It did not arrive within the idle limit.
    #[inline(never)]
    pub fn completion_of(
        &mut self,
        s: Side,
        wr_id: u64,
        step: &str,
    ) -> Result<Completion, Failure> {
        let mut idle = 0;
        loop {
            let c = self.ready(s);
            if let Some(c) = c.iter().find(|c| c.wr_id == wr_id) {
                return Ok(*c);
            }
            self.idle(&mut idle, !c.is_empty(), step)?;
        }
    }

    /// Side `s` reports `Disconnected` (within the idle limit), is no longer connected, and
    /// refuses posts with `NotConnected`. Its completions are drained.
    ///
    /// # Errors
    /// Any of it does not hold.
    #[inline(never)]
    pub fn expect_disconnected(&mut self, s: Side, step: &str) -> Outcome {
        let mut idle = 0;
        loop {
            match self.qp(s).poll_event() {
                Some(CmEvent::Disconnected) => break,
                Some(other) => return Err(fail(step, "Disconnected", format!("{other:?}"))),
                None => self.idle(&mut idle, false, step)?,
            }
        }
        self.ready(s);
        let q = match s {
            Side::A => &self.a,
            Side::B => &self.b,
        };
        eq(step, false, self.fx.is_connected(q))?;
        eq(
            step,
            Err(ProviderError::NotConnected),
            send_raw(self.qp(s), 9, 0, &[0]),
        )?;
        let last = self
            .fx
            .resources(&Limits::default())
            .recv_bufs
            .saturating_sub(1);
        let r = self.qp(s).post_recv(&[last]);
        eq(step, Err(ProviderError::NotConnected), r)
    }

    /// Drop both queue pairs and page providers, then check that every page came back and
    /// the fixture's audit passes.
    ///
    /// # Errors
    /// Pages still held, or the audit failed.
    #[inline(never)]
    pub fn finish(self) -> Outcome {
        let Link { fx, a, b, pa, pb } = self;
        drop((a, b, pa, pb));
        eq("teardown: pages held", 0, fx.pages_in_use())?;
        fx.audit().map_err(|e| fail("teardown: audit", "clean", e))
    }
}

/// Write `bytes` into send buffer `buf` of `q` and post one signaled Send.
///
/// # Errors
/// The provider refused.
pub fn send_raw<P: Provider>(
    q: &mut P,
    wr_id: u64,
    buf: u32,
    bytes: &[u8],
) -> Result<(), ProviderError> {
    q.send_buf(buf)?
        .get_mut(..bytes.len())
        .ok_or(ProviderError::BadFragments)?
        .copy_from_slice(bytes);
    q.post_send(&[SendWr {
        wr_id,
        op: SendOp::Send {
            buf,
            len: bytes.len() as u32,
            invalidate: None,
        },
        signaled: true,
    }])
}

/// A requester on side A and a responder on side B of a [`Link`].
pub struct Pair<'f, F: Fixture> {
    /// The connection.
    pub l: Link<'f, F>,
    /// The requester (side A; on the heap, as the responder: 600 and 920 bytes).
    pub req: Boxed<Requester>,
    /// The responder (side B).
    pub resp: Boxed<Responder>,
}

/// How one call ended.
#[derive(Debug)]
pub enum End {
    /// The reply.
    Reply(Chain),
    /// The failure, with the caller's pages handed back.
    Failed(krpc_rdma::transport::CallError, Option<Chain>),
}

impl<'f, F: Fixture> Pair<'f, F> {
    /// Connect a requester and a responder as `setup` says, both reporting `Connected`.
    ///
    /// # Errors
    /// Set-up or connection failed.
    #[inline(never)]
    pub fn new(fx: &'f mut F, setup: &Setup) -> Result<Self, Failure> {
        let (pa, pb) = fx.page_providers().at("page providers")?;
        Pair::over(fx, setup, (pa, pb))
    }

    /// [`Pair::new`] over the page providers `pages` of the fixture's last
    /// [`Fixture::page_providers`] call, kept from an earlier pair (a reconnection: the
    /// calls kept for resending hold pages of these providers).
    ///
    /// # Errors
    /// As [`Pair::new`].
    #[inline(never)]
    pub fn over(fx: &'f mut F, setup: &Setup, pages: PagePair) -> Result<Self, Failure> {
        let (pa, pb) = pages;
        let res = fx.resources(&setup.limits);
        let req = try_boxed("Requester::new", || {
            Requester::new(setup.req, res, pa.clone())
        })?;
        let mut resp = try_boxed("Responder::new", || {
            Responder::new(setup.resp, res, pb.clone())
        })?;
        let (ap, bp) = (req.private_data(), resp.private_data());
        let (a, b) = fx
            .connect(Connect {
                limits: &setup.limits,
                a_private: &ap,
                b_private: &bp,
                before_accept: &mut |q| resp.post_receives(q),
            })
            .at("connect")?;
        let mut p = Pair {
            l: Link { fx, a, b, pa, pb },
            req,
            resp,
        };
        let (mut up_a, mut up_b, mut idle) = (false, false, 0);
        while !(up_a && up_b) {
            let (ea, eb) = p.poll_once();
            for e in &ea {
                match e {
                    RequesterEvent::Connected(_) => up_a = true,
                    other => {
                        return Err(fail(
                            "connect: requester",
                            "Connected",
                            format!("{other:?}"),
                        ))
                    }
                }
            }
            for e in &eb {
                match e {
                    ResponderEvent::Connected(_) => up_b = true,
                    other => {
                        return Err(fail(
                            "connect: responder",
                            "Connected",
                            format!("{other:?}"),
                        ))
                    }
                }
            }
            p.l.idle(
                &mut idle,
                !(ea.is_empty() && eb.is_empty()),
                "connect: events",
            )?;
        }
        Ok(p)
    }

    /// Connect with `cfg` on both sides and default limits.
    ///
    /// # Errors
    /// As [`Pair::new`].
    #[inline(never)]
    pub fn with(
        fx: &'f mut F,
        cfg: krpc_rdma::transport::TransportConfig,
    ) -> Result<Self, Failure> {
        Pair::new(fx, &Setup::both(cfg))
    }

    /// Poll the responder, then the requester, once.
    #[inline(never)]
    pub fn poll_once(&mut self) -> (Vec<RequesterEvent>, Vec<ResponderEvent>) {
        let mut eb = Vec::new();
        self.resp.poll(&mut self.l.b, &mut |e| eb.push(e));
        let mut ea = Vec::new();
        self.req.poll(&mut self.l.a, &mut |e| ea.push(e));
        (ea, eb)
    }

    /// Start a call.
    ///
    /// # Errors
    /// The requester refused it.
    #[inline(never)]
    pub fn call(&mut self, call: Chain, spec: ReplySpec, step: &str) -> Outcome {
        self.req
            .call(&mut self.l.a, call, spec)
            .map_err(|r| fail(step, "call accepted", r.error))
    }

    /// Drive both sides until `want` calls ended (a reply or a failure), answering every call
    /// handed up with `server`. A lost connection or a refused reply is a failure.
    ///
    /// # Errors
    /// As above, or no progress within the fixture's idle limit.
    #[inline(never)]
    pub fn run(
        &mut self,
        want: usize,
        server: &mut dyn FnMut(&Incoming) -> Result<Chain, Failure>,
    ) -> Result<Vec<(u32, End)>, Failure> {
        let mut out = Vec::new();
        let mut idle = 0;
        while out.len() < want {
            let mut calls = Vec::new();
            let mut lost = false;
            self.resp.poll(&mut self.l.b, &mut |e| match e {
                ResponderEvent::Call(c) => calls.push(c),
                ResponderEvent::ConnectionLost => lost = true,
                // `run` sends no reverse call: nothing of one can come back.
                ResponderEvent::Connected(_)
                | ResponderEvent::ReverseReply { .. }
                | ResponderEvent::ReverseFailed { .. } => {}
            });
            if lost {
                return Err(fail(
                    "run",
                    "connection up",
                    "responder lost the connection",
                ));
            }
            let mut progress = !calls.is_empty();
            for c in calls {
                let reply = server(&c)?;
                drop(c.call);
                self.resp.reply(&mut self.l.b, c.ctx, reply).map_err(|e| {
                    fail(
                        format!("run: reply to {:#x}", c.xid),
                        "reply sent",
                        format!("{e:?}"),
                    )
                })?;
            }
            progress |= self.poll_ends(&mut out)?;
            let step = format!("run: {} of {want} calls ended", out.len());
            self.l.idle(&mut idle, progress, &step)?;
        }
        Ok(out)
    }

    /// Poll the requester once: replies and failures go to `out`; whether it reported
    /// anything.
    ///
    /// # Errors
    /// The requester lost the connection.
    #[inline(never)]
    pub fn poll_ends(&mut self, out: &mut Vec<(u32, End)>) -> Result<bool, Failure> {
        let mut evs = Vec::new();
        self.req.poll(&mut self.l.a, &mut |e| evs.push(e));
        let progress = !evs.is_empty();
        for e in evs {
            match e {
                RequesterEvent::Reply { xid, reply } => out.push((xid, End::Reply(reply))),
                RequesterEvent::Failed { xid, error, pages } => {
                    out.push((xid, End::Failed(error, pages)))
                }
                RequesterEvent::ConnectionLost => {
                    return Err(fail(
                        "requester",
                        "connection up",
                        "requester lost the connection",
                    ))
                }
                RequesterEvent::Connected(_) => {}
                RequesterEvent::ReverseCall(rc) => {
                    return Err(fail(
                        format!("requester: reverse call {:#x}", rc.xid),
                        "no reverse-direction call (none enabled)",
                        "one",
                    ))
                }
            }
        }
        Ok(progress)
    }

    /// One call, answered by `server`: its reply.
    ///
    /// # Errors
    /// The call was refused or failed, or [`Pair::run`] failed.
    #[inline(never)]
    pub fn rpc(
        &mut self,
        call: Chain,
        spec: ReplySpec,
        server: &mut dyn FnMut(&Incoming) -> Result<Chain, Failure>,
    ) -> Result<Chain, Failure> {
        let xid = xid_of(&call);
        self.call(call, spec, "rpc: call")?;
        match self.run(1, server)?.pop() {
            Some((x, End::Reply(c))) if x == xid => Ok(c),
            other => Err(fail(
                format!("rpc {xid:#x}"),
                "its reply",
                format!("{other:?}"),
            )),
        }
    }

    /// Poll until nothing moves and no work request is outstanding on either side; an event
    /// other than a requester's reply/failure is a failure.
    ///
    /// # Errors
    /// A call was handed up, the connection went, or it did not settle.
    #[inline(never)]
    pub fn quiesce(&mut self) -> Outcome {
        let mut idle = 0;
        loop {
            let (ea, eb) = self.poll_once();
            if let Some(e) = eb.first() {
                return Err(fail(
                    "quiesce",
                    "nothing from the responder",
                    format!("{e:?}"),
                ));
            }
            if let Some(e) = ea.first() {
                return Err(fail(
                    "quiesce",
                    "nothing from the requester",
                    format!("{e:?}"),
                ));
            }
            let out = self.l.fx.sq_outstanding(&self.l.a) + self.l.fx.sq_outstanding(&self.l.b);
            if out == 0 {
                return Ok(());
            }
            self.l.idle(&mut idle, false, "quiesce: send queues")?;
        }
    }

    /// No registration left on either side, both connections healthy (after [`Pair::quiesce`]).
    ///
    /// # Errors
    /// A registration is left or a connection is unhealthy.
    #[inline(never)]
    pub fn check_clean(&mut self, step: &str) -> Outcome {
        self.quiesce()?;
        let fx = &*self.l.fx;
        eq(
            format!("{step}: requester registrations"),
            0,
            fx.live_registrations(&self.l.a),
        )?;
        eq(
            format!("{step}: responder registrations"),
            0,
            fx.live_registrations(&self.l.b),
        )?;
        for q in [&self.l.a, &self.l.b] {
            eq(format!("{step}: connected"), true, fx.is_connected(q))?;
            fx.healthy(q)
                .map_err(|e| fail(step, "healthy queue pairs", e))?;
        }
        Ok(())
    }

    /// `n` calls, each carrying 1 MiB of DDP WRITE data in a read chunk (so each maps a
    /// registration at the requester), answered inline.
    ///
    /// # Errors
    /// A call failed.
    #[inline(never)]
    pub fn write_rpcs(&mut self, n: u32) -> Outcome {
        for xid in 0..n {
            let data = crate::data::pattern(1 << 20, xid as u8);
            let call = crate::data::write_call(&self.l.pa, xid, &data).at("write call")?;
            self.rpc(call, ReplySpec::inline(256), &mut |c| {
                crate::data::xdr_call(c.xid, b"ok").at("reply")
            })?;
        }
        Ok(())
    }

    /// A registration of one page at the requester, released while still valid: the
    /// counter `revokes` of side A (a binding's synchronous revocations) goes up.
    ///
    /// # Errors
    /// The registration failed, or `release` did not revoke.
    #[inline(never)]
    pub fn release_revokes(&mut self, revokes: fn(&F::Qp) -> u64) -> Outcome {
        let page = self.l.pa.alloc_page().at("page")?;
        let frag = PageFragment {
            addr: page,
            offset: 0,
            len: mbuf::PAGE_SIZE,
        };
        let reg = self
            .l
            .a
            .register(&[frag], krpc_rdma::provider::Access::REMOTE_READ);
        let before = revokes(&self.l.a);
        let released = reg
            .at("register")
            .and_then(|r| self.l.a.release(r.id).at("release"));
        self.l.pa.page_unref(page);
        released?;
        crate::check::ensure(
            revokes(&self.l.a) > before,
            "release of a live registration",
            "revoked synchronously",
        )
    }

    /// Drop the endpoints, then [`Link::finish`].
    ///
    /// # Errors
    /// As [`Link::finish`].
    #[inline(never)]
    pub fn finish(self) -> Outcome {
        let Pair { l, req, resp } = self;
        drop((req, resp));
        l.finish()
    }
}

/// The XID of a call chain (0 if it has none).
pub fn xid_of(c: &Chain) -> u32 {
    let mut w = [0u8; 4];
    c.copydata(0, &mut w).map_or(0, |()| u32::from_be_bytes(w))
}

/// The reply for `xid` among `ended`, or a failure.
///
/// # Errors
/// No reply for `xid`, or the call failed.
pub fn reply_for(ended: Vec<(u32, End)>, xid: u32) -> Result<Chain, Failure> {
    for (x, e) in ended {
        if x == xid {
            return match e {
                End::Reply(c) => Ok(c),
                End::Failed(err, _) => Err(fail(format!("call {xid:#x}"), "a reply", err)),
            };
        }
    }
    Err(fail(format!("call {xid:#x}"), "a reply", "nothing"))
}
