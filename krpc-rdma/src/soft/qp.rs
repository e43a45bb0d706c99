//! [`SoftQp`]: one side of a software RC connection, implementing [`Provider`].

use super::alloc::sync::Arc;
use super::alloc::vec::Vec;

use crate::provider::{
    Access, CmEvent, Completion, Provider, ProviderError, RecvBufId, RegId, Registration,
    Resources, Revoked, SendBufId, SendWr, WcStatus,
};

use super::fabric::{End, Fabric};
use super::fault::{FaultTarget, WrFault};
use super::lock::FabricLock;
use super::SoftStats;

/// One queue pair of a software RC connection made by [`pair`](super::pair).
///
/// It owns its send buffers and (while they are not posted) its receive buffers; the
/// connection state shared with the peer lives in a fabric behind a spin lock. Work executes
/// when it is posted (see the [module docs](super)). Dropping a `SoftQp` breaks the connection
/// (the peer sees `Disconnected` and flushes) and releases its remaining registrations, so
/// their page references return to the page provider.
pub struct SoftQp {
    fabric: Arc<FabricLock<Fabric>>,
    end: End,
    res: Resources,
    send_bufs: Vec<Vec<u8>>,
    /// `None` while the buffer belongs to the NIC (posted, or completed and not yet polled).
    recv_bufs: Vec<Option<Vec<u8>>>,
}

/// `count` zeroed buffers of `size` bytes, or `NoMemory`.
fn alloc_bufs(count: u32, size: u32) -> Result<Vec<Vec<u8>>, ProviderError> {
    let count = usize::try_from(count).map_err(|_| ProviderError::NoMemory)?;
    let size = usize::try_from(size).map_err(|_| ProviderError::NoMemory)?;
    let mut bufs = Vec::new();
    bufs.try_reserve_exact(count)
        .map_err(|_| ProviderError::NoMemory)?;
    for _ in 0..count {
        let mut b = Vec::new();
        b.try_reserve_exact(size)
            .map_err(|_| ProviderError::NoMemory)?;
        b.resize(size, 0);
        bufs.push(b);
    }
    Ok(bufs)
}

impl SoftQp {
    pub(crate) fn new(
        fabric: Arc<FabricLock<Fabric>>,
        end: End,
        res: Resources,
    ) -> Result<Self, ProviderError> {
        let send_bufs = alloc_bufs(res.send_bufs, res.send_buf_size)?;
        let recv = alloc_bufs(res.recv_bufs, res.recv_buf_size)?;
        let mut recv_bufs = Vec::new();
        recv_bufs
            .try_reserve_exact(recv.len())
            .map_err(|_| ProviderError::NoMemory)?;
        recv_bufs.extend(recv.into_iter().map(Some));
        Ok(SoftQp {
            fabric,
            end,
            res,
            send_bufs,
            recv_bufs,
        })
    }

    /// Break the connection on purpose (like `rdma_disconnect`): both queue pairs go to the
    /// error state, posted receives on both sides complete [`WcStatus::Flushed`], each side
    /// gets one [`CmEvent::Disconnected`], and later posts fail with
    /// [`ProviderError::NotConnected`]. Registrations stay until released. Idempotent.
    pub fn disconnect(&mut self) {
        self.fabric.lock().break_connection();
    }

    /// Whether the connection is still up.
    pub fn is_connected(&self) -> bool {
        self.fabric.lock().connected()
    }

    /// Counters of this side (see [`SoftStats`]).
    pub fn stats(&self) -> SoftStats {
        self.fabric.lock().stats(self.end)
    }

    /// Registrations of this side not yet released (valid or invalidated).
    pub fn live_registrations(&self) -> u32 {
        self.fabric.lock().live_registrations(self.end)
    }

    /// Send-queue slots in use (see the queue-depth model in the [module docs](super)).
    pub fn send_queue_used(&self) -> u32 {
        self.fabric.lock().send_queue_used(self.end)
    }

    /// Receives posted on this side and not yet consumed by a Send or flushed.
    pub fn posted_recvs(&self) -> usize {
        self.fabric.lock().posted_recvs(self.end)
    }

    /// Choose the send-queue accounting model. `false` (the default): only requests whose
    /// completion is queued and not yet polled occupy the send queue; a successful unsignaled
    /// request frees its slot at once. `true` (real hardware): a successful unsignaled
    /// request keeps its slot until the completion of a later request of the same send queue
    /// is polled, so a core that never signals eventually gets [`ProviderError::Busy`].
    pub fn set_strict_send_queue(&mut self, strict: bool) {
        self.fabric.lock().set_strict_send_queue(self.end, strict);
    }

    /// Fault hook: the next Send (or Send With Invalidate, or gathered Send) this side
    /// executes is delivered with byte `offset` of the message XORed with `xor` (no effect if
    /// the message is shorter). One-shot; the sender's completion is a normal success.
    pub fn corrupt_next_send(&mut self, offset: u32, xor: u8) {
        self.fabric.lock().corrupt_next_send(self.end, offset, xor);
    }

    /// Test helper: would an RDMA Read of `len` bytes at `handle`/`offset` issued by this side
    /// pass the peer's access check now? Nothing is copied and, unlike a real RDMA Read, a
    /// refusal ([`WcStatus::RemoteAccess`]) does not break the connection. Works whether or
    /// not the connection is up (it only consults the peer's registration table).
    ///
    /// # Errors
    /// [`WcStatus::RemoteAccess`] if the handle is unknown, released, invalidated, lacks
    /// `REMOTE_READ`, or the range is not inside the registration.
    pub fn probe_remote_read(&self, handle: u32, offset: u64, len: u64) -> Result<(), WcStatus> {
        self.fabric
            .lock()
            .probe(self.end, handle, offset, len, Access::REMOTE_READ)
    }

    /// Test helper: like [`SoftQp::probe_remote_read`] for an RDMA Write (`REMOTE_WRITE`).
    ///
    /// # Errors
    /// [`WcStatus::RemoteAccess`] as for [`SoftQp::probe_remote_read`].
    pub fn probe_remote_write(&self, handle: u32, offset: u64, len: u64) -> Result<(), WcStatus> {
        self.fabric
            .lock()
            .probe(self.end, handle, offset, len, Access::REMOTE_WRITE)
    }
}

impl Provider for SoftQp {
    fn resources(&self) -> Resources {
        self.res
    }

    fn send_buf(&mut self, buf: SendBufId) -> Result<&mut [u8], ProviderError> {
        usize::try_from(buf)
            .ok()
            .and_then(|b| self.send_bufs.get_mut(b))
            .map(Vec::as_mut_slice)
            .ok_or(ProviderError::BadId)
    }

    /// The buffer's bytes ([`Resources::recv_buf_size`] of them). [`ProviderError::BadId`]
    /// also while the buffer is posted (it belongs to the NIC until its completion is
    /// polled).
    fn recv_buf(&self, buf: RecvBufId) -> Result<&[u8], ProviderError> {
        usize::try_from(buf)
            .ok()
            .and_then(|b| self.recv_bufs.get(b))
            .and_then(Option::as_deref)
            .ok_or(ProviderError::BadId)
    }

    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), ProviderError> {
        self.fabric
            .lock()
            .post_send(self.end, wrs, &[], &self.send_bufs)
    }

    fn post_recv(&mut self, bufs: &[RecvBufId]) -> Result<(), ProviderError> {
        self.fabric
            .lock()
            .post_recv(self.end, bufs, &mut self.recv_bufs)
    }

    fn poll_cq(&mut self, out: &mut [Completion]) -> usize {
        self.fabric
            .lock()
            .poll_cq(self.end, out, &mut self.recv_bufs)
    }

    fn register(
        &mut self,
        frags: &[mbuf::PageFragment],
        access: Access,
    ) -> Result<Registration, ProviderError> {
        self.fabric.lock().register(self.end, frags, access)
    }

    fn release(&mut self, reg: RegId) -> Result<(), ProviderError> {
        self.fabric.lock().release(self.end, reg)
    }

    fn revoke(&mut self, reg: RegId) -> Result<Revoked, ProviderError> {
        self.fabric
            .lock()
            .revoke(self.end, reg)
            .map(|()| Revoked::Held)
    }

    fn poll_event(&mut self) -> Option<CmEvent> {
        self.fabric.lock().poll_event(self.end)
    }

    fn disconnect(&mut self) {
        SoftQp::disconnect(self);
    }
}

impl FaultTarget for SoftQp {
    fn post_send_faulted(
        &mut self,
        wrs: &[SendWr<'_>],
        faults: &[(usize, WrFault)],
    ) -> Result<(), ProviderError> {
        self.fabric
            .lock()
            .post_send(self.end, wrs, faults, &self.send_bufs)
    }

    fn break_connection(&mut self) {
        self.disconnect();
    }
}

impl Drop for SoftQp {
    fn drop(&mut self) {
        self.fabric.lock().teardown(self.end);
    }
}

impl core::fmt::Debug for SoftQp {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SoftQp")
            .field("end", &self.end)
            .field("resources", &self.res)
            .finish_non_exhaustive()
    }
}
