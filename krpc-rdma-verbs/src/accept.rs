//! A server's accept loop, written once for the userspace servers (`userspace-harness
//! server` and `nfsd`): a [`Responder`] per attempt whose receives are posted before
//! `rdma_accept`, a bounded wait per attempt so the stop predicate is checked every
//! [`ServerConfig::accept_poll`], one thread per accepted connection running the caller's
//! closure, and the threads' results at [`Connections::join`].
//!
//! Bounded: at most [`ServerConfig::max_connections`] connections (and so threads) at once;
//! a connect request beyond them is rejected (`rdma_reject`: the client's connect fails at
//! once as refused), counted ([`Connections::refused`]) and reported as one line. The
//! connections of a server share its page arena: with [`ServerConfig::shared_pages`] every
//! Responder joins that server-wide page budget (`krpc_rdma::transport::shared_pages`), so
//! no connection can take the pages another one's calls need.
//!
//! [`ServerConfig::for_buffers`] sets the inline sizes advertised in the RFC 8797 private
//! data to what the receive and send buffers hold (4 KiB by default, as knfsd), not
//! `TransportConfig::default()`'s 1 KiB: a peer then sends calls up to 4 KiB inline instead
//! of moving everything above ~700 bytes by read chunk. The core still clamps the advertised
//! sizes to the queue pair's buffers (`TransportConfig::private_data_for`).

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use krpc_rdma::transport::{CallError, Responder, SharedPages, TransportConfig};
use mbuf::PageProvider;

use crate::cm::VerbsListener;
use crate::qp::VerbsQp;
use crate::{VerbsConfig, VerbsError};

/// How a server's connections are made.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Each accepted queue pair's resources.
    pub verbs: VerbsConfig,
    /// Each connection's transport configuration (advertised inline sizes, credits).
    pub transport: TransportConfig,
    /// How long one accept attempt waits for a connect request before the stop predicate is
    /// asked again, in ms.
    pub accept_poll_ms: u32,
    /// Most connections served at once (each has a thread); connect requests beyond them
    /// are rejected.
    pub max_connections: usize,
    /// The server-wide page budget every connection's Responder joins (the arena's size),
    /// or none (each connection bounded only by its own `max_ddp_bytes`).
    pub shared_pages: Option<Arc<SharedPages>>,
}

/// The default of `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 64;

/// The command-line options of the accept loop, shared by the commands that serve
/// RPC-over-RDMA (`userspace-harness server`, `nfsd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct ConnLimits {
    /// Most RPC-over-RDMA connections served at once (one thread each); further connect
    /// requests are rejected.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl ServerConfig {
    /// `verbs`' queue pairs, advertising inline sizes equal to their buffers (RFC 8797: the
    /// largest message we receive inline is what a receive buffer holds), the other
    /// transport settings at their defaults, a 1 s accept poll.
    pub fn for_buffers(verbs: VerbsConfig) -> ServerConfig {
        let transport = TransportConfig {
            inline_send: verbs.resources.send_buf_size,
            inline_recv: verbs.resources.recv_buf_size,
            ..TransportConfig::default()
        };
        ServerConfig {
            verbs,
            transport,
            accept_poll_ms: 1000,
            max_connections: DEFAULT_MAX_CONNECTIONS as usize,
            shared_pages: None,
        }
    }

    /// With `limits` from the command line.
    pub fn with_limits(self, limits: ConnLimits) -> ServerConfig {
        ServerConfig {
            max_connections: limits.max_connections as usize,
            ..self
        }
    }

    /// Every connection's Responder joins `shared` (see [`ServerConfig::shared_pages`]).
    pub fn sharing_pages(self, shared: Arc<SharedPages>) -> ServerConfig {
        ServerConfig {
            shared_pages: Some(shared),
            ..self
        }
    }

    /// The accept attempt's wait as a duration.
    pub fn accept_poll(&self) -> std::time::Duration {
        std::time::Duration::from_millis(u64::from(self.accept_poll_ms))
    }
}

impl Default for ServerConfig {
    /// [`ServerConfig::for_buffers`] of [`VerbsConfig::default`]: 4 KiB inline both ways.
    fn default() -> Self {
        ServerConfig::for_buffers(VerbsConfig::default())
    }
}

/// One accepted connection, handed to the per-connection closure on its own thread.
#[derive(Debug)]
pub struct Accepted {
    /// The queue pair, established, with the Responder's receives posted.
    pub qp: VerbsQp,
    /// The connection's Responder.
    pub responder: Responder,
    /// The peer's address, if the CM gave one.
    pub peer: Option<SocketAddr>,
}

impl Accepted {
    /// The peer's address as text (`?` when unknown).
    pub fn peer_name(&self) -> String {
        peer_name(self.peer)
    }
}

fn peer_name(peer: Option<SocketAddr>) -> String {
    peer.map_or_else(|| "?".to_string(), |a| a.to_string())
}

/// What [`accept_each`] reports as it goes, one line each.
#[derive(Debug)]
pub enum AcceptNote<'a> {
    /// An accept failed (other than the poll's timeout); accepting goes on.
    Failed(&'a VerbsError),
    /// A connect request was rejected: `open` connections, the limit, were being served.
    Refused {
        /// The peer, if the CM gave its address.
        peer: Option<SocketAddr>,
        /// Connections open.
        open: usize,
    },
}

impl fmt::Display for AcceptNote<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcceptNote::Failed(e) => write!(f, "{e}"),
            AcceptNote::Refused { peer, open } => write!(
                f,
                "refused a connection from {}: {open} connections open (--max-connections)",
                peer_name(*peer)
            ),
        }
    }
}

/// Why [`accept_each`] stopped before its stop predicate said so.
#[derive(Debug)]
pub enum AcceptError {
    /// A Responder could not be created (configuration, memory).
    Responder(CallError),
    /// A connection's thread could not be spawned.
    Thread(std::io::Error),
}

impl fmt::Display for AcceptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcceptError::Responder(e) => write!(f, "responder: {e}"),
            AcceptError::Thread(e) => write!(f, "spawning a thread: {e}"),
        }
    }
}

impl std::error::Error for AcceptError {}

/// The accepted connections: the threads still running, the results of those that ended.
#[derive(Debug)]
pub struct Connections<T> {
    threads: Vec<JoinHandle<T>>,
    done: Vec<T>,
    accepted: usize,
    refused: u64,
}

impl<T> Connections<T> {
    fn new() -> Self {
        Connections {
            threads: Vec::new(),
            done: Vec::new(),
            accepted: 0,
            refused: 0,
        }
    }

    /// How many connections were accepted.
    pub fn accepted(&self) -> usize {
        self.accepted
    }

    /// How many connect requests were rejected at the connection limit.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Join the threads whose closure returned (their results kept for
    /// [`join`](Self::join)); how many still run.
    fn reap(&mut self) -> usize {
        let mut i = 0;
        while let Some(t) = self.threads.get(i) {
            if t.is_finished() {
                let t = self.threads.swap_remove(i);
                self.done.extend(t.join().ok());
            } else {
                i += 1;
            }
        }
        self.threads.len()
    }

    /// Wait for every connection's closure to return; their results (a closure that
    /// panicked gives none).
    pub fn join(self) -> Vec<T> {
        let mut out = self.done;
        out.extend(self.threads.into_iter().filter_map(|t| t.join().ok()));
        out
    }
}

/// Accept connections on `listener` until `stopped(accepted so far)` is true (asked before
/// every attempt, so at least every [`ServerConfig::accept_poll`]), and run `serve` on each
/// on a thread of its own named `conn PEER`, at most [`ServerConfig::max_connections`] at
/// once: while that many run, connect requests are rejected. A failed accept other than the
/// poll's timeout, and each rejection, goes to `note` and accepting goes on.
///
/// # Errors
/// A Responder or a thread cannot be created; the connections accepted so far are detached
/// (their closures go on until their own stop conditions).
pub fn accept_each<T, F>(
    listener: &mut VerbsListener,
    cfg: &ServerConfig,
    pages: &Arc<dyn PageProvider>,
    mut stopped: impl FnMut(u64) -> bool,
    mut note: impl FnMut(&AcceptNote<'_>),
    serve: F,
) -> Result<Connections<T>, AcceptError>
where
    T: Send + 'static,
    F: Fn(Accepted) -> T + Send + Sync + 'static,
{
    let accept_cfg = VerbsConfig {
        timeout_ms: cfg.accept_poll_ms,
        ..cfg.verbs.clone()
    };
    let serve = Arc::new(serve);
    let mut conns = Connections::new();
    while !stopped(conns.accepted as u64) {
        let open = conns.reap();
        if open >= cfg.max_connections {
            match listener.reject_next(cfg.accept_poll()) {
                Ok(peer) => {
                    conns.refused += 1;
                    note(&AcceptNote::Refused { peer, open });
                }
                Err(VerbsError::Timeout { .. }) => {}
                Err(e) => note(&AcceptNote::Failed(&e)),
            }
            continue;
        }
        let mut responder = Responder::new(cfg.transport, cfg.verbs.resources(), pages.clone())
            .map_err(AcceptError::Responder)?;
        if let Some(shared) = &cfg.shared_pages {
            responder.set_page_share(shared.join());
        }
        let pd = responder.private_data();
        match listener.accept_with(&pd, &accept_cfg, |qp| responder.post_receives(qp)) {
            Ok(qp) => {
                let peer = qp.peer_addr();
                let serve = serve.clone();
                let t = std::thread::Builder::new()
                    .name(format!("conn {}", peer_name(peer)))
                    .spawn(move || {
                        serve(Accepted {
                            qp,
                            responder,
                            peer,
                        })
                    })
                    .map_err(AcceptError::Thread)?;
                conns.threads.push(t);
                conns.accepted += 1;
            }
            Err(VerbsError::Timeout { .. }) => {}
            Err(e) => note(&AcceptNote::Failed(&e)),
        }
    }
    Ok(conns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_advertise_what_their_buffers_hold() {
        let cfg = ServerConfig::default();
        assert_eq!(cfg.transport.inline_recv, 4096);
        assert_eq!(cfg.transport.inline_send, 4096);
        let pd = cfg
            .transport
            .private_data_for(&cfg.verbs.resources())
            .unwrap();
        assert_eq!((pd.send_size, pd.recv_size), (4096, 4096));
        // Larger buffers: larger inline sizes; the core's clamp to the buffers still holds
        // when the transport setting is raised past them.
        let big = ServerConfig::for_buffers(VerbsConfig {
            resources: krpc_rdma::provider::Resources {
                recv_buf_size: 8192,
                ..krpc_rdma::provider::Resources::default()
            },
            ..VerbsConfig::default()
        });
        assert_eq!(big.transport.inline_recv, 8192);
        let mut raised = ServerConfig::default();
        raised.transport.inline_recv = 65536;
        let pd = raised
            .transport
            .private_data_for(&raised.verbs.resources())
            .unwrap();
        assert_eq!(pd.recv_size, 4096);
    }
}
