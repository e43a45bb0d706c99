//! The endpoint core: what a [`Requester`](super::Requester) and a
//! [`Responder`](super::Responder) both hold for one connection — configuration, the
//! provider's resources, the page provider, the pool of handed-up chains, our RFC 8797
//! private data and the thresholds negotiated from the peer's, the send contexts, the
//! fragment table used to build registrations and RDMA work requests, the counters — and the
//! connection-manager handling they share. Everything is allocated here, once.

use alloc::sync::Arc;
use alloc::vec::Vec;

use mbuf::{ChainPool, PageFragment, PageProvider};

use super::config::TransportConfig;
use super::counters::Counters;
use super::error::CallError;
use super::send_ctx::SendContexts;
use crate::provider::{CmEvent, Provider, Resources};
use crate::wire::{negotiate, CmPrivateData, InlineThresholds, CM_PRIVATE_LEN};

/// Spare handed-up chains kept beyond one per call (calls or replies the upper layer still
/// holds).
const SPARE_CHAINS: usize = 8;

/// A connection-manager event, as both ends act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cm {
    /// Established: these thresholds are now in force.
    Connected(InlineThresholds),
    /// The connection is gone.
    Disconnected,
}

/// The state both ends of a connection hold (see the module docs).
pub(crate) struct Endpoint {
    pub(crate) cfg: TransportConfig,
    pub(crate) res: Resources,
    pub(crate) pages: Arc<dyn PageProvider>,
    /// Storage of the chains handed up (it comes back when the caller drops them).
    pub(crate) chains: Arc<ChainPool>,
    ours: CmPrivateData,
    pub(crate) thresholds: InlineThresholds,
    /// The connection is gone (the endpoint is then useless: make a new one).
    pub(crate) lost: bool,
    pub(crate) send: SendContexts,
    /// Scratch fragment table (capacity `max_fragments`, never grown).
    pub(crate) frags: Vec<PageFragment>,
    pub(crate) counters: Counters,
}

impl Endpoint {
    /// The core of an endpoint for a provider with `res`, `max_requests` calls at a time.
    ///
    /// # Errors
    /// [`CallError::NoMemory`]; [`CallError::BadConfig`] from the private data.
    #[inline(never)] // noinline_for_stack: its locals stay out of the caller's frame
    pub(crate) fn new(
        cfg: TransportConfig,
        res: Resources,
        pages: Arc<dyn PageProvider>,
    ) -> Result<Self, CallError> {
        let mut frags = Vec::new();
        frags
            .try_reserve_exact(cfg.max_fragments as usize)
            .map_err(|_| CallError::NoMemory)?;
        Ok(Endpoint {
            ours: cfg.private_data_for(&res)?,
            chains: ChainPool::new(cfg.max_requests.max(1) as usize + SPARE_CHAINS)?,
            send: SendContexts::new(res.send_bufs).map_err(|_| CallError::NoMemory)?,
            cfg,
            res,
            pages,
            thresholds: InlineThresholds::default(),
            lost: false,
            frags,
            counters: Counters::default(),
        })
    }

    /// Our 8-byte RFC 8797 private data, for the CM connect request or accept.
    pub(crate) fn private_data(&self) -> [u8; CM_PRIVATE_LEN] {
        self.ours.to_bytes()
    }

    /// Largest inline Send: the negotiated send threshold, within our send buffers.
    pub(crate) fn max_send(&self) -> usize {
        (self.thresholds.send as usize).min(self.res.send_buf_size as usize)
    }

    /// The next connection-manager event, acted on: an `Established` sets the thresholds
    /// negotiated from the peer's private data (RFC 8797).
    pub(crate) fn next_cm_event<P: Provider>(&mut self, prov: &mut P) -> Option<Cm> {
        Some(match prov.poll_event()? {
            CmEvent::Established { private_data } => {
                let peer = CmPrivateData::from_peer(&private_data);
                self.thresholds = negotiate(&self.ours, &peer);
                Cm::Connected(self.thresholds)
            }
            CmEvent::Disconnected => Cm::Disconnected,
        })
    }
}
