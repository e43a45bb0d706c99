//! The shared state of one connection: both sides' receive queues, completion queues, event
//! queues and registration tables, and the execution of work requests against the peer.
//!
//! Everything happens under one lock (the [`SoftQp`](super::SoftQp)s hold an
//! `Arc<FabricLock<Fabric>>`, see `lock` for what its waiters do in a kernel), at post time,
//! in order: a posted chain has fully executed (or failed) when `post_send` returns, and its
//! completions are queued in order.

use super::alloc::boxed::Box;
use super::alloc::collections::VecDeque;
use super::alloc::sync::Arc;
use super::alloc::vec::Vec;

use mbuf::{PageFragment, PageProvider, PAGE_SIZE};

use crate::provider::{
    Access, CmEvent, Completion, ProviderError, RecvBufId, RegId, Registration, Resources, SendOp,
    SendWr, WcKind, WcStatus,
};

use super::dma::{copy_pages, gather, DmaError};
use super::fault::WrFault;
use super::mr::RegTable;
use super::{SoftConfig, SoftStats};

/// Largest message or RDMA transfer (the RC maximum message size, 2 GiB).
const MAX_MESSAGE: u64 = 1 << 31;

/// Which end of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The first queue pair returned by [`pair`](super::pair).
    A,
    /// The second one.
    B,
}

/// A queued completion and the send-queue slots it frees when polled.
struct CqEntry {
    wc: Completion,
    sq_slots: u32,
}

/// Effects of injected faults on one work request.
#[derive(Debug, Default, Clone, Copy)]
struct Fx {
    drop: bool,
    corrupt: Option<(u32, u8)>,
}

/// One side of the connection, as the "NIC" sees it.
pub(crate) struct Side {
    pages: Arc<dyn PageProvider>,
    res: Resources,
    /// Receive buffers owned by the NIC: posted, or completed but not yet polled. The queue
    /// pair moves a buffer in when posting it and back out when polling its completion.
    nic_recv: Vec<Option<Vec<u8>>>,
    /// Posted receive buffers, oldest first.
    posted: VecDeque<RecvBufId>,
    cq: VecDeque<CqEntry>,
    events: VecDeque<CmEvent>,
    regs: RegTable,
    stats: SoftStats,
    /// Send-queue slots in use (see the queue-depth model in the module docs).
    sq_used: u32,
    /// Strict model: successful unsignaled requests not yet covered by a later completion.
    unsignaled: u32,
    strict_sq: bool,
    corrupt_next: Option<(u32, u8)>,
}

/// Reserve room for `n` more elements of a deque.
fn reserve<T>(q: &mut VecDeque<T>, n: usize) -> Result<(), ProviderError> {
    q.try_reserve_exact(n).map_err(|_| ProviderError::NoMemory)
}

impl Side {
    /// [`Side::new`] in its own allocation (a side is built on this function's stack only).
    #[inline(never)] // noinline_for_stack: the side is not on the caller's stack
    pub(crate) fn boxed(
        end: End,
        cfg: &SoftConfig,
        pages: Arc<dyn PageProvider>,
        peer_private_data: heapless::Vec<u8, 56>,
    ) -> Result<Box<[Side; 1]>, ProviderError> {
        try_box(Side::new(end, cfg, pages, peer_private_data)?)
    }

    /// A side for `cfg`; `peer_private_data` is what its `Established` event reports.
    pub(crate) fn new(
        end: End,
        cfg: &SoftConfig,
        pages: Arc<dyn PageProvider>,
        peer_private_data: heapless::Vec<u8, 56>,
    ) -> Result<Self, ProviderError> {
        let res = cfg.resources();
        let nrecv = usize::try_from(res.recv_bufs).map_err(|_| ProviderError::NoMemory)?;
        let nsq = usize::try_from(res.max_send_wr).map_err(|_| ProviderError::NoMemory)?;
        let mut nic_recv = Vec::new();
        nic_recv
            .try_reserve_exact(nrecv)
            .map_err(|_| ProviderError::NoMemory)?;
        nic_recv.resize_with(nrecv, || None);
        let mut posted = VecDeque::new();
        reserve(&mut posted, nrecv)?;
        // Every completion is either a receive (at most one per buffer) or a send-queue
        // completion (at most one per send-queue slot): the queue never grows past this.
        let mut cq = VecDeque::new();
        reserve(&mut cq, nrecv.saturating_add(nsq))?;
        let mut events = VecDeque::new();
        reserve(&mut events, 2)?;
        events.push_back(CmEvent::Established {
            private_data: peer_private_data,
        });
        Ok(Side {
            pages,
            res,
            nic_recv,
            posted,
            cq,
            events,
            regs: RegTable::new(
                res.max_registrations,
                match end {
                    End::A => 0x5a,
                    End::B => 0xc3,
                },
            )?,
            stats: SoftStats::default(),
            sq_used: 0,
            unsignaled: 0,
            strict_sq: false,
            corrupt_next: None,
        })
    }

    fn push_cqe(&mut self, wc: Completion, sq_slots: u32) {
        // Within the capacity reserved at creation, so this does not allocate; should the
        // bound ever be wrong, a failed reservation loses the entry and is counted.
        if self.cq.try_reserve(1).is_ok() {
            self.cq.push_back(CqEntry { wc, sq_slots });
        } else {
            self.stats.cq_overflows += 1;
        }
        match wc.status {
            WcStatus::Success => {}
            WcStatus::Flushed => self.stats.flushed += 1,
            _ => self.stats.error_completions += 1,
        }
    }

    fn push_recv(&mut self, buf: RecvBufId, status: WcStatus, len: u32, inv: Option<u32>) {
        if status == WcStatus::Success {
            self.stats.recvs += 1;
        }
        self.push_cqe(
            Completion {
                wr_id: u64::from(buf),
                status,
                kind: WcKind::Recv { buf },
                byte_len: len,
                invalidated: inv,
            },
            0,
        );
    }

    /// Queue the completion of a send-queue request (or account for its slot).
    fn complete_send(&mut self, wr: &SendWr<'_>, status: WcStatus) {
        let always = matches!(wr.op, SendOp::LocalInv { .. });
        if wr.signaled || always || status != WcStatus::Success {
            let covered = if self.strict_sq {
                core::mem::take(&mut self.unsignaled)
            } else {
                0
            };
            self.push_cqe(
                Completion {
                    wr_id: wr.wr_id,
                    status,
                    kind: WcKind::Send,
                    byte_len: 0,
                    invalidated: None,
                },
                covered.saturating_add(1),
            );
        } else if self.strict_sq {
            self.unsignaled = self.unsignaled.saturating_add(1);
        } else {
            self.sq_used = self.sq_used.saturating_sub(1);
        }
    }

    /// The queue pair went to the error state: flush posted receives, report the disconnect.
    fn flush(&mut self) {
        while let Some(buf) = self.posted.pop_front() {
            self.push_recv(buf, WcStatus::Flushed, 0, None);
        }
        if self.events.try_reserve(1).is_ok() {
            self.events.push_back(CmEvent::Disconnected);
        }
        self.sq_used = self.sq_used.saturating_sub(self.unsignaled);
        self.unsignaled = 0;
    }

    /// Check a work request before anything of its chain executes.
    fn validate(&self, wr: &SendWr<'_>, send_bufs: &[Vec<u8>]) -> Result<(), ProviderError> {
        let max_sge = usize::try_from(self.res.max_sge).unwrap_or(usize::MAX);
        match wr.op {
            SendOp::Send { buf, len, .. } => check_send_buf(send_bufs, buf, len),
            SendOp::SendGather {
                buf, len, pages, ..
            } => {
                check_send_buf(send_bufs, buf, len)?;
                let sges = pages.len().saturating_add(usize::from(len > 0));
                if sges > max_sge {
                    return Err(ProviderError::BadFragments);
                }
                let total = check_frags(pages)?.saturating_add(u64::from(len));
                if total > MAX_MESSAGE {
                    return Err(ProviderError::BadFragments);
                }
                Ok(())
            }
            SendOp::RdmaRead { local, .. } | SendOp::RdmaWrite { local, .. } => {
                if local.len() > max_sge {
                    return Err(ProviderError::BadFragments);
                }
                if check_frags(local)? > MAX_MESSAGE {
                    return Err(ProviderError::BadFragments);
                }
                Ok(())
            }
            SendOp::LocalInv { reg } => {
                if self.regs.contains(reg) {
                    Ok(())
                } else {
                    Err(ProviderError::BadId)
                }
            }
        }
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        // Safety net: the queue pair releases its registrations when dropped.
        self.regs.release_all(&*self.pages);
    }
}

/// A send buffer id and length must name bytes of one of our send buffers.
fn check_send_buf(send_bufs: &[Vec<u8>], buf: u32, len: u32) -> Result<(), ProviderError> {
    let b = usize::try_from(buf)
        .ok()
        .and_then(|i| send_bufs.get(i))
        .ok_or(ProviderError::BadId)?;
    let len = usize::try_from(len).map_err(|_| ProviderError::BadFragments)?;
    if len > b.len() {
        return Err(ProviderError::BadFragments);
    }
    Ok(())
}

/// Every local fragment must lie inside its page; returns their total length.
fn check_frags(frags: &[PageFragment]) -> Result<u64, ProviderError> {
    let mut total: u64 = 0;
    for f in frags {
        match f.offset.checked_add(f.len) {
            Some(end) if end <= PAGE_SIZE => total = total.saturating_add(f.len as u64),
            _ => return Err(ProviderError::BadFragments),
        }
    }
    Ok(total)
}

/// Total bytes of fragments already checked by [`check_frags`].
fn frag_total(frags: &[PageFragment]) -> u64 {
    frags.iter().map(|f| f.len as u64).sum()
}

/// Both sides of a connection and the NIC's bounce buffer.
pub(crate) struct Fabric {
    // Each side in its own allocation: the fabric (inside an `Arc`) stays small enough to
    // build on a kernel stack.
    a: Box<[Side; 1]>,
    b: Box<[Side; 1]>,
    connected: bool,
    bounce: Vec<u8>,
}

/// `Box::new` that reports an allocation failure instead of aborting.
fn try_box<T>(x: T) -> Result<Box<[T; 1]>, ProviderError> {
    let mut v = Vec::new();
    v.try_reserve_exact(1)
        .map_err(|_| ProviderError::NoMemory)?;
    v.push(x);
    // Length equals capacity: no reallocation.
    v.into_boxed_slice()
        .try_into()
        .map_err(|_| ProviderError::NoMemory)
}

fn first<T>(b: &[T; 1]) -> &T {
    let [x] = b;
    x
}

fn first_mut<T>(b: &mut [T; 1]) -> &mut T {
    let [x] = b;
    x
}

impl Fabric {
    /// A connected fabric.
    pub(crate) fn new(a: Box<[Side; 1]>, b: Box<[Side; 1]>) -> Result<Self, ProviderError> {
        let mut bounce = Vec::new();
        bounce
            .try_reserve_exact(PAGE_SIZE)
            .map_err(|_| ProviderError::NoMemory)?;
        bounce.resize(PAGE_SIZE, 0);
        Ok(Fabric {
            a,
            b,
            connected: true,
            bounce,
        })
    }

    /// Our side, the peer's side and the bounce buffer.
    fn ends(&mut self, me: End) -> (&mut Side, &mut Side, &mut [u8]) {
        let Fabric { a, b, bounce, .. } = self;
        let ([a], [b]) = (&mut **a, &mut **b);
        match me {
            End::A => (a, b, bounce),
            End::B => (b, a, bounce),
        }
    }

    pub(crate) fn side(&self, me: End) -> &Side {
        match me {
            End::A => first(&self.a),
            End::B => first(&self.b),
        }
    }

    pub(crate) fn side_mut(&mut self, me: End) -> &mut Side {
        match me {
            End::A => first_mut(&mut self.a),
            End::B => first_mut(&mut self.b),
        }
    }

    fn peer(&self, me: End) -> &Side {
        match me {
            End::A => first(&self.b),
            End::B => first(&self.a),
        }
    }

    /// Whether the connection is up.
    pub(crate) fn connected(&self) -> bool {
        self.connected
    }

    /// Break the connection (both queue pairs to the error state). Idempotent.
    pub(crate) fn break_connection(&mut self) {
        if !self.connected {
            return;
        }
        self.connected = false;
        first_mut(&mut self.a).flush();
        first_mut(&mut self.b).flush();
    }

    /// A side went away: break the connection and release its registrations.
    pub(crate) fn teardown(&mut self, me: End) {
        self.break_connection();
        let side = self.side_mut(me);
        side.regs.release_all(&*side.pages);
    }

    /// Post a chain of send-queue work requests with injected faults (`faults`: index into
    /// `wrs` and fault; index `wrs.len()` means after the last request).
    pub(crate) fn post_send(
        &mut self,
        me: End,
        wrs: &[SendWr<'_>],
        faults: &[(usize, WrFault)],
        send_bufs: &[Vec<u8>],
    ) -> Result<(), ProviderError> {
        if !self.connected {
            return Err(ProviderError::NotConnected);
        }
        {
            let local = self.side_mut(me);
            for wr in wrs {
                local.validate(wr, send_bufs)?;
            }
            let n = u32::try_from(wrs.len()).map_err(|_| ProviderError::Busy)?;
            match local.sq_used.checked_add(n) {
                Some(used) if used <= local.res.max_send_wr => local.sq_used = used,
                _ => return Err(ProviderError::Busy),
            }
        }
        for (i, wr) in wrs.iter().enumerate() {
            let mut fx = Fx::default();
            for &(at, fault) in faults {
                if at != i {
                    continue;
                }
                match fault {
                    WrFault::BreakBefore => self.break_connection(),
                    WrFault::Drop => fx.drop = true,
                    WrFault::Corrupt { offset, xor } => fx.corrupt = Some((offset, xor)),
                }
            }
            let status = if self.connected {
                self.execute(me, wr, send_bufs, fx)
            } else {
                WcStatus::Flushed
            };
            self.side_mut(me).complete_send(wr, status);
            if status != WcStatus::Success {
                self.break_connection();
            }
        }
        if faults
            .iter()
            .any(|&(at, f)| at >= wrs.len() && f == WrFault::BreakBefore)
        {
            self.break_connection();
        }
        Ok(())
    }

    /// Execute one work request; the status of its completion.
    fn execute(&mut self, me: End, wr: &SendWr<'_>, send_bufs: &[Vec<u8>], fx: Fx) -> WcStatus {
        if fx.drop {
            // RC retransmits a lost packet and finally gives up.
            self.side_mut(me).stats.dropped_sends += 1;
            return WcStatus::TransportRetryExceeded;
        }
        match wr.op {
            SendOp::Send {
                buf,
                len,
                invalidate,
            } => match buffer_prefix(send_bufs, buf, len) {
                Some(data) => self.deliver(me, data, &[], invalidate, fx),
                None => WcStatus::LocalError,
            },
            SendOp::SendGather {
                buf,
                len,
                pages,
                invalidate,
            } => match buffer_prefix(send_bufs, buf, len) {
                Some(data) => self.deliver(me, data, pages, invalidate, fx),
                None => WcStatus::LocalError,
            },
            SendOp::RdmaRead {
                local,
                handle,
                offset,
            } => self.rdma(me, local, handle, offset, false),
            SendOp::RdmaWrite {
                local,
                handle,
                offset,
            } => self.rdma(me, local, handle, offset, true),
            SendOp::LocalInv { reg } => {
                let side = self.side_mut(me);
                match side.regs.local_inv(reg) {
                    Ok(()) => {
                        side.stats.local_invs += 1;
                        WcStatus::Success
                    }
                    Err(_) => WcStatus::LocalError,
                }
            }
        }
    }

    /// Deliver a Send (With Invalidate): `data` then the gathered `pages` into the peer's
    /// oldest posted receive.
    fn deliver(
        &mut self,
        me: End,
        data: &[u8],
        pages: &[PageFragment],
        invalidate: Option<u32>,
        fx: Fx,
    ) -> WcStatus {
        let (local, peer, _) = self.ends(me);
        let gathered = usize::try_from(frag_total(pages)).unwrap_or(usize::MAX);
        let total = data.len().saturating_add(gathered);
        let Some(buf) = peer.posted.pop_front() else {
            return WcStatus::RnrRetryExceeded;
        };
        // The posted buffer, looked up once (its length is the receive's size).
        let mem = usize::try_from(buf)
            .ok()
            .and_then(|i| peer.nic_recv.get_mut(i))
            .and_then(Option::as_mut);
        let Some(mem) = mem else {
            return WcStatus::Other;
        };
        let slot_len = mem.len();
        // What a real responder checks: the message fits the receive (else a local length
        // error at the responder, remote invalid request at the requester), and the handle to
        // invalidate is a valid registration of the responder.
        if total > slot_len {
            peer.push_recv(buf, WcStatus::LocalError, 0, None);
            return WcStatus::Other;
        }
        if let Some(h) = invalidate {
            if !peer.regs.can_remote_invalidate(h) {
                peer.push_recv(buf, WcStatus::LocalError, 0, None);
                return WcStatus::RemoteAccess;
            }
        }
        let byte_len = u32::try_from(total).unwrap_or(u32::MAX);
        let (head, tail) = mem.split_at_mut(data.len().min(slot_len));
        // `data.len() <= total <= slot_len`: `head` is exactly `data.len()` bytes.
        if let Some(src) = data.get(..head.len()) {
            head.copy_from_slice(src);
        }
        let Some(tail) = tail.get_mut(..gathered) else {
            return WcStatus::Other;
        };
        // A plain Send has no gather list: nothing to read from the pages.
        if !pages.is_empty() && gather(&*local.pages, pages, tail).is_err() {
            // Local protection error while reading the gather list: the receive was not
            // consumed (it is flushed when the connection breaks).
            peer.posted.push_front(buf);
            return WcStatus::LocalError;
        }
        if let Some((off, xor)) = fx.corrupt.or_else(|| local.corrupt_next.take()) {
            let at = usize::try_from(off).ok().filter(|&o| o < total);
            if let Some(b) = at.and_then(|o| mem.get_mut(o)) {
                *b ^= xor;
                local.stats.corrupted_sends += 1;
            }
        }
        let inv = invalidate.filter(|&h| peer.regs.remote_invalidate(h));
        if inv.is_some() {
            peer.stats.remote_invs += 1;
        }
        peer.push_recv(buf, WcStatus::Success, byte_len, inv);
        local.stats.sends += 1;
        local.stats.send_bytes += total as u64;
        WcStatus::Success
    }

    /// RDMA Read (`write == false`) or Write of the local fragments at the peer's
    /// `handle`/`offset`.
    fn rdma(
        &mut self,
        me: End,
        frags: &[PageFragment],
        handle: u32,
        offset: u64,
        write: bool,
    ) -> WcStatus {
        let (local, peer, bounce) = self.ends(me);
        let total = frag_total(frags);
        let need = if write {
            Access::REMOTE_WRITE
        } else {
            Access::REMOTE_READ
        };
        let (entry, start) = match peer.regs.check_remote(handle, offset, total, need) {
            Ok(found) => found,
            Err(status) => return status,
        };
        let copied = if write {
            copy_pages(
                &*local.pages,
                frags,
                0,
                &*peer.pages,
                &entry.frags,
                start,
                total,
                bounce,
            )
        } else {
            copy_pages(
                &*peer.pages,
                &entry.frags,
                start,
                &*local.pages,
                frags,
                0,
                total,
                bounce,
            )
        };
        match (copied, write) {
            (Ok(()), true) => {
                local.stats.rdma_writes += 1;
                local.stats.rdma_write_bytes += total;
                WcStatus::Success
            }
            (Ok(()), false) => {
                local.stats.rdma_reads += 1;
                local.stats.rdma_read_bytes += total;
                WcStatus::Success
            }
            (Err(DmaError::Source), true) | (Err(DmaError::Sink), false) => WcStatus::LocalError,
            (Err(DmaError::Source), false) | (Err(DmaError::Sink), true) => WcStatus::RemoteAccess,
        }
    }

    /// Post receive buffers, moving them from `home` (the queue pair) to the NIC.
    pub(crate) fn post_recv(
        &mut self,
        me: End,
        bufs: &[RecvBufId],
        home: &mut [Option<Vec<u8>>],
    ) -> Result<(), ProviderError> {
        if !self.connected {
            return Err(ProviderError::NotConnected);
        }
        for (i, &buf) in bufs.iter().enumerate() {
            let here = usize::try_from(buf)
                .ok()
                .and_then(|b| home.get(b))
                .is_some_and(Option::is_some);
            let twice = bufs.get(..i).is_some_and(|before| before.contains(&buf));
            if !here || twice {
                return Err(ProviderError::BadId);
            }
        }
        let side = self.side_mut(me);
        for &buf in bufs {
            let Ok(b) = usize::try_from(buf) else {
                continue;
            };
            if let (Some(from), Some(to)) = (home.get_mut(b), side.nic_recv.get_mut(b)) {
                *to = from.take();
                // Capacity is one entry per buffer and each buffer is posted at most once.
                side.posted.push_back(buf);
            }
        }
        Ok(())
    }

    /// Poll completions, moving completed receive buffers back to `home`.
    pub(crate) fn poll_cq(
        &mut self,
        me: End,
        out: &mut [Completion],
        home: &mut [Option<Vec<u8>>],
    ) -> usize {
        let side = self.side_mut(me);
        let mut n = 0;
        for slot in out.iter_mut() {
            let Some(entry) = side.cq.pop_front() else {
                break;
            };
            side.sq_used = side.sq_used.saturating_sub(entry.sq_slots);
            if let WcKind::Recv { buf } = entry.wc.kind {
                let b = usize::try_from(buf).ok();
                let from = b.and_then(|b| side.nic_recv.get_mut(b));
                let to = b.and_then(|b| home.get_mut(b));
                if let (Some(from), Some(to)) = (from, to) {
                    if from.is_some() {
                        *to = from.take();
                    }
                }
            }
            *slot = entry.wc;
            n += 1;
        }
        n
    }

    /// Next connection event of a side.
    pub(crate) fn poll_event(&mut self, me: End) -> Option<CmEvent> {
        self.side_mut(me).events.pop_front()
    }

    /// Register fragments at a side.
    pub(crate) fn register(
        &mut self,
        me: End,
        frags: &[PageFragment],
        access: Access,
    ) -> Result<Registration, ProviderError> {
        let side = self.side_mut(me);
        let reg = side.regs.register(&*side.pages, frags, access)?;
        side.stats.registrations += 1;
        Ok(reg)
    }

    /// Release a registration of a side.
    pub(crate) fn release(&mut self, me: End, reg: RegId) -> Result<(), ProviderError> {
        let side = self.side_mut(me);
        side.regs.release(reg, &*side.pages)?;
        side.stats.releases += 1;
        Ok(())
    }

    /// The peer's access check, without side effects.
    pub(crate) fn probe(
        &self,
        me: End,
        handle: u32,
        offset: u64,
        len: u64,
        need: Access,
    ) -> Result<(), WcStatus> {
        self.peer(me)
            .regs
            .check_remote(handle, offset, len, need)
            .map(|_| ())
    }

    /// Revoke a registration of a side, its handle held until `release`.
    pub(crate) fn revoke(&mut self, me: End, reg: RegId) -> Result<(), ProviderError> {
        let side = self.side_mut(me);
        side.regs.revoke(reg, &*side.pages)?;
        side.stats.local_invs += 1;
        Ok(())
    }

    /// Statistics of a side.
    pub(crate) fn stats(&self, me: End) -> SoftStats {
        self.side(me).stats
    }

    /// Live registrations of a side.
    pub(crate) fn live_registrations(&self, me: End) -> u32 {
        self.side(me).regs.live()
    }

    /// Send-queue slots in use at a side.
    pub(crate) fn send_queue_used(&self, me: End) -> u32 {
        self.side(me).sq_used
    }

    /// Receives posted (not yet consumed or flushed) at a side.
    pub(crate) fn posted_recvs(&self, me: End) -> usize {
        self.side(me).posted.len()
    }

    /// Choose the send-queue accounting model of a side.
    pub(crate) fn set_strict_send_queue(&mut self, me: End, strict: bool) {
        let side = self.side_mut(me);
        if side.strict_sq && !strict {
            side.sq_used = side.sq_used.saturating_sub(side.unsignaled);
            side.unsignaled = 0;
        }
        side.strict_sq = strict;
    }

    /// Arm a one-shot corruption of the next Send a side executes.
    pub(crate) fn corrupt_next_send(&mut self, me: End, offset: u32, xor: u8) {
        self.side_mut(me).corrupt_next = Some((offset, xor));
    }
}

/// The first `len` bytes of send buffer `buf`.
fn buffer_prefix(send_bufs: &[Vec<u8>], buf: u32, len: u32) -> Option<&[u8]> {
    let b = send_bufs.get(usize::try_from(buf).ok()?)?;
    b.get(..usize::try_from(len).ok()?)
}
