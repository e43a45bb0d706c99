//! The `nfs3` command's client: MOUNT v3 over TCP ([`crate::mount`]) for the root handle,
//! then the NFSv3 client of `krpc-rdma-session` ([`Nfs3Client`], re-exported here with its
//! types) over a [`Session`](krpc_rdma_session::Session) of the libibverbs provider ([`VerbsDialer`], port 20049 by
//! default); and the command's output format.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

pub use krpc_rdma_session::nfs3::{
    nfs_transport, pages_needed, DirEntry, Nfs3Opts, NfsError, Transfer, DEFAULT_DEPTH,
    JUKEBOX_DELAY, MAX_DEPTH, MAX_IO, MAX_REWRITES,
};
pub use krpc_rdma_session::DEFAULT_GIVE_UP;
use nfs_proto::nfs3::{Fattr3, Ftype3, NfsFh3};

use crate::mount;
use crate::session::VerbsDialer;
use crate::trace::Tracer;

/// The NFSv3 client over the libibverbs provider.
pub type Nfs3Client = krpc_rdma_session::nfs3::Nfs3Client<VerbsDialer>;

/// Options of [`connect`].
#[derive(Debug, Clone)]
pub struct ConnectOpts {
    /// The server's address.
    pub server: IpAddr,
    /// The NFS/RDMA port (20049).
    pub port: u16,
    /// The export to mount.
    pub export: String,
    /// Calls in flight, progress lines, reconnection (UNSTABLE WRITEs are sent again when
    /// the write verifier changes), `NFS3ERR_JUKEBOX` retries, the give-up time.
    pub nfs: Nfs3Opts,
}

/// MOUNT the export over TCP, connect over RDMA, and ask FSINFO for the transfer sizes.
///
/// # Errors
/// MOUNT refused, no RDMA device, the connection refused, an NFS error.
pub fn connect(o: &ConnectOpts, trace: Option<Arc<Tracer>>) -> Result<Nfs3Client, NfsError> {
    let m = mount::mount(o.server, &o.export).map_err(NfsError::Mount)?;
    let dialer = VerbsDialer::new(
        SocketAddr::new(o.server, o.port),
        pages_needed(o.nfs.depth),
        trace,
    )?;
    Nfs3Client::connect(dialer, NfsFh3 { data: m.root_fh }, &o.export, &o.nfs)
}

/// `ls -l`-like one line for an entry.
pub fn format_entry(e: &DirEntry) -> String {
    let name = String::from_utf8_lossy(&e.name);
    match &e.attrs {
        Some(a) => format!(
            "{}{:04o} {:>3} {:>5} {:>5} {:>12} {name}",
            type_char(a.type_),
            a.mode & 0o7777,
            a.nlink,
            a.uid,
            a.gid,
            a.size
        ),
        None => format!("? {name}"),
    }
}

/// The attributes as `key=value` words.
pub fn format_attrs(a: &Fattr3) -> String {
    format!(
        "type={:?} mode={:04o} nlink={} uid={} gid={} size={} used={} fsid={:#x} fileid={} \
         atime={}.{:09} mtime={}.{:09} ctime={}.{:09}",
        a.type_,
        a.mode & 0o7777,
        a.nlink,
        a.uid,
        a.gid,
        a.size,
        a.used,
        a.fsid,
        a.fileid,
        a.atime.seconds,
        a.atime.nseconds,
        a.mtime.seconds,
        a.mtime.nseconds,
        a.ctime.seconds,
        a.ctime.nseconds
    )
}

fn type_char(t: Ftype3) -> char {
    match t {
        Ftype3::Reg => '-',
        Ftype3::Dir => 'd',
        Ftype3::Lnk => 'l',
        Ftype3::Blk => 'b',
        Ftype3::Chr => 'c',
        Ftype3::Sock => 's',
        Ftype3::Fifo => 'p',
    }
}
