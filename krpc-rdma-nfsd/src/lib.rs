//! `nfsd`: an NFSv3 server over RPC-over-RDMA serving a local directory (issue 13 parts 2–3).
//!
//! * [`localfs`]: [`LocalFs`], nfs-service's `Backend` over a directory, on descriptors (no
//!   path a client can change is resolved); [`handle`]: its file handles, the kernel's own
//!   sealed with a MAC (valid across a restart); [`fhandle`]: the two system calls behind
//!   them, the crate's only `unsafe`; [`attr`]: attributes and permission checks.
//! * [`server`]: the verbs listener, one thread and one Responder per connection, the shared
//!   reply cache, nfs-service's `Nfs3Service`.
//! * [`mountd`] and [`exports`]: MOUNT v3 over TCP for the one export, and who may use it
//!   (the client list of an exports(5) line; root squashed by default).
//! * [`fixed_export`]: MOUNT v3 alone for one path and a root handle given as hex (the
//!   `userspace-harness mountd` command, for the kernel module's NFSv3 server).
//! * [`lockd`]: file locking, NLM v4 and NSM v1 over TCP and UDP, registered with rpcbind.
//! * [`run`]: the `userspace-harness nfsd` command.
#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_code)]

pub mod attr;
pub mod exports;
#[allow(unsafe_code)]
pub mod fhandle;
pub mod fixed_export;
pub mod handle;
pub mod localfs;
pub mod lockd;
pub mod mountd;
pub mod server;
pub mod service_time;

use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

use krpc_rdma::provider::Provider;
use krpc_rdma_verbs::accept::{ConnLimits, ServerConfig};
use krpc_rdma_verbs::arena::VerbsArena;
use krpc_rdma_verbs::cm::VerbsListener;
use krpc_rdma_verbs::device::Device;
use krpc_rdma_verbs::signals::{self, STOP};
use mbuf::{PageProvider, PAGE_SIZE};
use nfs_service::lock::Lock;
use nfs_service::mount::MountService;
use nfs_service::nfsd::drc::ReplyCache;
use nfs_service::nfsd::{Nfs3Config, Nfs3Service};
use onc_rpc::svc::AuthPolicy;

pub use localfs::LocalFs;
pub use server::{plain, QpWrap};

/// The default of `nfsd --state-dir`.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/krpc-rdma-nfsd";

/// The default RPC-over-RDMA port (RFC 8267).
pub const NFS_RDMA_PORT: u16 = 20049;

/// `IP[:PORT]`, port 20049 when left out.
///
/// # Errors
/// Not an address.
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    (s, NFS_RDMA_PORT)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("not an address: {s}"))
}

/// The options of `userspace-harness nfsd`.
#[derive(Debug, Clone, clap::Args)]
pub struct NfsdArgs {
    /// Address to listen on for RPC-over-RDMA: `IP[:PORT]` (port 20049 by default).
    #[arg(long, value_name = "IP[:PORT]", value_parser = parse_listen)]
    pub listen: SocketAddr,
    /// The directory to serve.
    #[arg(long, value_name = "DIR")]
    pub export: PathBuf,
    /// TCP port of the MOUNT v3 service (on the --listen address; 0: any free port).
    #[arg(long, value_name = "N", default_value_t = 20048)]
    pub mount_port: u16,
    /// Who may use the export and how: the client list of an exports(5) line,
    /// `CLIENT(OPTIONS) …` with CLIENT `*`, an address or a network (ADDR/LEN or
    /// ADDR/MASK) and OPTIONS of rw, ro, root_squash, no_root_squash, all_squash,
    /// no_all_squash, anonuid=N, anongid=N, insecure, no_subtree_check (exports(5)'s
    /// defaults: ro, root_squash). The first entry matching a client applies; others are
    /// refused.
    #[arg(long, value_name = "LIST", default_value = exports::Clients::DEFAULT)]
    pub clients: exports::Clients,
    /// Where the server keeps its state: `handle-key`, the secret that seals file handles
    /// (made on first start, mode 0600), so handles stay valid across a restart; and the lock
    /// state (`state`, the NSM state number; `sm/`, the clients holding locks).
    #[arg(long, value_name = "DIR", default_value = DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Registered page arena shared by the connections, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 256)]
    pub arena_mib: u32,
    /// Write every transport header sent and received to FILE (JSON lines).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// RPC-over-RDMA connection limit.
    #[command(flatten)]
    pub limits: ConnLimits,
    /// MOUNT connection limit.
    #[command(flatten)]
    pub mount_limits: mountd::MountLimits,
    /// File locking (NLM / NSM).
    #[command(flatten)]
    pub lock: lockd::LockOpts,
}

/// Run the server until SIGINT / SIGTERM: bind the RDMA listener and the MOUNT service,
/// serve, print one line per connection and the totals with the transport counters.
///
/// # Errors
/// No RDMA device, the export is not a directory, an address cannot be bound.
pub fn run<Q: Provider + Send + 'static>(a: &NfsdArgs, qpw: QpWrap<Q>) -> Result<(), String> {
    let dev = Device::open(None).map_err(|e| format!("RDMA device: {e}"))?;
    let pages = (a.arena_mib as usize) << 20;
    let arena = VerbsArena::new(&dev, pages.div_ceil(PAGE_SIZE))
        .map_err(|e| format!("registering a {} MiB arena: {e}", a.arena_mib))?;
    let key_file = a.state_dir.join("handle-key");
    let key = handle::HandleKey::load_or_create(&key_file)
        .map_err(|e| format!("handle key {}: {e} (see --state-dir)", key_file.display()))?;
    let fs = Arc::new(
        LocalFs::with_key(&a.export, key)
            .map_err(|e| format!("export {}: {e}", a.export.display()))?
            .with_file_pages(arena.clone()),
    );
    let mut listener = VerbsListener::bind(&arena, a.listen)
        .map_err(|e| format!("cannot listen on {}: {e}", a.listen))?;
    let maddr = SocketAddr::new(a.listen.ip(), a.mount_port);
    let mountd = mountd::Mountd::bind(maddr).map_err(|e| format!("mountd on {maddr}: {e}"))?;
    let maddr = mountd.local_addr().map_err(|e| e.to_string())?;
    let cfg = Nfs3Config::default();
    let provider: Arc<dyn PageProvider> = arena.clone();
    let sh = Arc::new(server::Shared {
        svc: Nfs3Service::new(fs.clone(), provider, cfg),
        drc: server::CacheLock::new(
            ReplyCache::new(server::DRC_CAPACITY).ok_or("reply cache: no memory")?,
        )
        .ok_or("reply cache lock")?,
        clients: a.clients.clone(),
        stop: &STOP,
    });
    let export = exports::OneExport::new(
        fs.clone(),
        a.export.as_os_str().as_bytes(),
        a.clients.clone(),
    );
    let msvc = Arc::new(MountService::new(export, AuthPolicy::AllowNone));
    signals::install();
    let mthread = mountd
        .spawn(msvc, a.mount_limits, &STOP)
        .map_err(|e| e.to_string())?;
    let clients: Vec<&str> = a.clients.rules().iter().map(|r| r.text.as_str()).collect();
    println!(
        "nfsd: serving {} on {} (RPC-over-RDMA), MOUNT v3 on tcp {maddr}, to {}",
        fs.root_path().display(),
        a.listen,
        clients.join(" ")
    );
    let lockd = lockd::start_for(&a.lock, &a.state_dir, a.listen.ip(), &STOP)?;
    let scfg = ServerConfig::default()
        .with_limits(a.limits)
        .sharing_pages(server::ddp_budget(pages));
    let totals = server::serve(&sh, &arena, &mut listener, &scfg, qpw)?;
    let _ = mthread.join();
    if let Some(l) = lockd {
        l.shutdown();
    }
    println!(
        "nfsd: {} connections ({} refused), {}, {} reply cache replays",
        totals.connections,
        totals.refused,
        totals.stats.summary(),
        sh.drc.with(|d| d.replays())
    );
    println!(
        "nfsd transport: {}",
        server::counters_line(&totals.counters)
    );
    println!(
        "nfsd service time per procedure (calls x (dispatch + reply) mean): {}; {} of the waits slept in poll(2)",
        totals.stats.time.summary(),
        krpc_rdma_verbs::wait::sleeps()
    );
    println!(
        "nfsd backend: {} bytes of READ/WRITE data copied (pwritev/preadv on the arena pages otherwise)",
        fs.bounced_bytes()
    );
    Ok(())
}
