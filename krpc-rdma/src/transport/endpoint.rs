//! The endpoint core: what a [`Requester`](super::Requester) and a
//! [`Responder`](super::Responder) both hold for one connection — configuration, the
//! provider's resources, the page provider, the pool of handed-up chains, our RFC 8797
//! private data and the thresholds negotiated from the peer's, the send contexts, the
//! fragment table used to build registrations and RDMA work requests, the counters — and the
//! connection-manager handling they share. Everything is allocated here, once.

use alloc::sync::Arc;
use alloc::vec::Vec;

use core::ops::Range;

use mbuf::{Chain, ChainPool, PageFragment, PageProvider};

use super::config::TransportConfig;
use super::counters::Counters;
use super::error::CallError;
use super::pullup::{gather, push_frag, Gathered};
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

/// The state both ends of a connection hold (see the module docs). Its fields are private:
/// the ends reach them through the methods below.
pub(crate) struct Endpoint {
    cfg: TransportConfig,
    res: Resources,
    pages: Arc<dyn PageProvider>,
    /// Storage of the chains handed up (it comes back when the caller drops them).
    chains: Arc<ChainPool>,
    ours: CmPrivateData,
    thresholds: InlineThresholds,
    /// The connection is gone (the endpoint is then useless: make a new one).
    lost: bool,
    send: SendContexts,
    /// Scratch fragment table (capacity `max_fragments`, never grown).
    frags: Vec<PageFragment>,
    counters: Counters,
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

    /// The configuration.
    pub(crate) fn cfg(&self) -> &TransportConfig {
        &self.cfg
    }

    /// The provider's fixed resources.
    pub(crate) fn res(&self) -> &Resources {
        &self.res
    }

    /// The page provider.
    pub(crate) fn pages(&self) -> &Arc<dyn PageProvider> {
        &self.pages
    }

    /// The pool the chains handed up are built from.
    pub(crate) fn chains(&self) -> &Arc<ChainPool> {
        &self.chains
    }

    /// The thresholds in force (defaults until the connection is established).
    pub(crate) fn thresholds(&self) -> InlineThresholds {
        self.thresholds
    }

    /// Whether the connection is gone.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost
    }

    /// The connection is gone: true the first time (counted in `connection_losses`), false
    /// when it already was.
    pub(crate) fn mark_lost(&mut self) -> bool {
        if self.lost {
            return false;
        }
        self.lost = true;
        self.counters.connection_losses += 1;
        true
    }

    /// The send contexts.
    pub(crate) fn send(&mut self) -> &mut SendContexts {
        &mut self.send
    }

    /// The counters.
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The counters, to count in.
    pub(crate) fn counters_mut(&mut self) -> &mut Counters {
        &mut self.counters
    }

    /// The fragment table, as last filled.
    pub(crate) fn frags(&self) -> &[PageFragment] {
        &self.frags
    }

    /// Fill the fragment table with the page fragments of `chain` in `range`, one entry per
    /// fragment, and return it.
    ///
    /// # Errors
    /// [`CallError::TooLarge`] past the table's capacity (`max_fragments`); the chain's
    /// error for a range it does not cover or a non-page mbuf in it.
    pub(crate) fn fill_frags(
        &mut self,
        chain: &Chain,
        range: Range<usize>,
    ) -> Result<&[PageFragment], CallError> {
        self.frags.clear();
        for f in chain.page_fragments_in(range)? {
            if self.frags.len() >= self.frags.capacity() {
                return Err(CallError::TooLarge);
            }
            self.frags.push(f);
        }
        Ok(&self.frags)
    }

    /// Fill the fragment table as [`fill_frags`](Self::fill_frags), a fragment that
    /// continues the previous one in the same page merged into it ([`push_frag`]).
    ///
    /// # Errors
    /// As [`fill_frags`](Self::fill_frags).
    pub(crate) fn fill_frags_merged(
        &mut self,
        chain: &Chain,
        range: Range<usize>,
    ) -> Result<(), CallError> {
        self.frags.clear();
        for f in chain.page_fragments_in(range)? {
            push_frag(&mut self.frags, f)?;
        }
        Ok(())
    }

    /// Fill the fragment table with `ranges` of `chain` by [`gather`]: page bytes as they
    /// are, other bytes copied into fresh pages kept in `hold`.
    ///
    /// # Errors
    /// As [`gather`].
    pub(crate) fn gather<I>(
        &mut self,
        chain: &Chain,
        ranges: I,
        hold: &mut Chain,
    ) -> Result<Gathered, CallError>
    where
        I: Iterator<Item = Range<usize>>,
    {
        self.frags.clear();
        gather(chain, ranges, &self.pages, &mut self.frags, hold)
    }

    /// [`gather`](Self::gather) into the pull-up pages of send context `buf`; `None` for a
    /// send buffer that does not exist.
    pub(crate) fn gather_for_send<I>(
        &mut self,
        chain: &Chain,
        ranges: I,
        buf: u32,
    ) -> Option<Result<Gathered, CallError>>
    where
        I: Iterator<Item = Range<usize>>,
    {
        self.frags.clear();
        let hold = self.send.pullup(buf)?;
        Some(gather(chain, ranges, &self.pages, &mut self.frags, hold))
    }
}
