//! The libibverbs side of a client session: [`VerbsDialer`], the [`Dialer`] that makes
//! rdma_cm connections over one registered page arena (traced with `--trace`). The session
//! itself ([`Session`], [`Conn`]: calls matched to replies by XID, reconnect and
//! retransmit) is generic over the dialer and lives in `krpc-rdma-session`, re-exported
//! here; the host tests run it over the software provider.

use std::fmt;
use std::fs::File;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use krpc_rdma::provider::Resources;
use mbuf::{PageFragment, PageProvider, PAGE_SIZE};

pub use krpc_rdma_session::{Conn, Dialer, RunError};

use crate::run::NO_DEVICE;
use crate::trace::{Traced, Tracer};
use crate::verbs::arena::VerbsArena;
use crate::verbs::cm::connect;
use crate::verbs::device::Device;
use crate::verbs::qp::VerbsQp;
use crate::verbs::{self, VerbsConfig, VerbsError};

/// A session over the libibverbs provider.
pub type Session = krpc_rdma_session::Session<VerbsDialer>;

/// Connections to one server over the RDMA device, all over one registered page arena (so
/// calls kept for retransmission keep their pages across a reconnect), each queue pair
/// traced when asked.
pub struct VerbsDialer {
    arena: Arc<VerbsArena>,
    pages: Arc<dyn PageProvider>,
    peer: SocketAddr,
    name: String,
    trace: Option<Arc<Tracer>>,
}

impl VerbsDialer {
    /// Open the RDMA device and register an arena of `arena_bytes` (the DDP pages of every
    /// call in flight must fit) for connections to `peer`.
    ///
    /// # Errors
    /// No RDMA device, registration failure.
    pub fn new(
        peer: SocketAddr,
        arena_bytes: usize,
        trace: Option<Arc<Tracer>>,
    ) -> Result<VerbsDialer, RunError> {
        let arena = open_arena(arena_bytes)?;
        Ok(VerbsDialer {
            pages: arena.clone(),
            arena,
            peer,
            name: peer.to_string(),
            trace,
        })
    }

    /// The registered arena behind [`Dialer::pages`].
    pub fn arena(&self) -> &Arc<VerbsArena> {
        &self.arena
    }

    /// The server.
    pub fn addr(&self) -> SocketAddr {
        self.peer
    }
}

impl Dialer for VerbsDialer {
    type Qp = Traced<VerbsQp>;

    fn peer(&self) -> &str {
        &self.name
    }

    fn pages(&self) -> &Arc<dyn PageProvider> {
        &self.pages
    }

    fn resources(&self) -> Resources {
        VerbsConfig::default().resources()
    }

    fn dial(&mut self, private_data: &[u8]) -> Result<Traced<VerbsQp>, RunError> {
        let qp = connect(
            &self.arena,
            self.peer,
            private_data,
            &VerbsConfig::default(),
        )
        .map_err(|e| match e {
            VerbsError::NoDevice => RunError::Failed(NO_DEVICE.into()),
            e => RunError::Failed(format!("cannot connect to {}: {e}", self.peer)),
        })?;
        Ok(Traced::new(qp, self.trace.clone(), self.name.clone()))
    }

    fn wait(&mut self, qp: &mut Traced<VerbsQp>, timeout: Duration) {
        verbs::wait::wait(qp.inner_mut(), timeout);
    }

    fn note(&self, line: fmt::Arguments<'_>) {
        eprintln!("userspace-harness: {line}");
    }

    /// `readv` straight into the arena (no copy in userspace).
    fn read_file(&self, f: &File, frags: &[PageFragment]) -> std::io::Result<usize> {
        self.arena.read_pages_from(f.as_fd(), frags)
    }

    /// `writev` straight from the arena (no copy in userspace).
    fn write_file(&self, f: &File, frags: &[PageFragment]) -> std::io::Result<usize> {
        self.arena.write_pages_to(f.as_fd(), frags)
    }
}

/// The RDMA device's registered page arena of `arena_bytes`.
///
/// # Errors
/// No RDMA device, registration failure.
fn open_arena(arena_bytes: usize) -> Result<Arc<VerbsArena>, RunError> {
    if !verbs::rdma_present() {
        return Err(RunError::Failed(NO_DEVICE.into()));
    }
    let dev = Device::open(None).map_err(|e| match e {
        VerbsError::NoDevice => RunError::Failed(NO_DEVICE.into()),
        e => RunError::Failed(e.to_string()),
    })?;
    VerbsArena::new(&dev, arena_bytes.div_ceil(PAGE_SIZE)).map_err(|e| {
        RunError::Failed(format!(
            "registering a {} MiB arena: {e}",
            arena_bytes >> 20
        ))
    })
}
