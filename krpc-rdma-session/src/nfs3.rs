//! An NFSv3 client over RPC-over-RDMA, generic over the provider's [`Dialer`]: what the
//! harness's `nfs3` command (`put`, `get`, `ls`, `stat`, `mkdir`, `rm`, `ln -s`, `readlink`)
//! runs over libibverbs, and the host tests over the software provider.
//!
//! The root file handle comes from the caller (the harness mounts with MOUNT v3 over TCP,
//! `onc_rpc_tcp::mount`); NFS runs over a [`Session`] with `AUTH_SYS` uid 0 / gid 0
//! credentials.
//! File data moves by direct data placement (RFC 8267), decided by the eligibility table in
//! [`nfs_proto::ddp`] ([`nfs3_ddp_item`], [`nfs3_reply_hint`]): a WRITE's data (and a
//! SYMLINK's target) is a DDP region of page mbufs in Macklem's layout
//! ([`nfs_proto::chain::ddp_call`]) that the transport turns into a read chunk; a READ (and a
//! READLINK) is provisioned with a write chunk in our pages, located in the reply by
//! [`nfs_proto::nfs3::locate_read_data`]. READDIRPLUS replies that may exceed the inline
//! threshold get a reply chunk (the transport decides from the reply size).
//! WRITEs are UNSTABLE and followed by one COMMIT whose verifier must match every WRITE's.
//! `put` and `get` keep `depth` calls in flight, each at most the server's `wtmax` / `rtmax`
//! (FSINFO) and 1 MiB.
//!
//! A server answers `NFS3ERR_JUKEBOX` when it cannot serve a call yet (knfsd while its export
//! cache refills after a restart, an HSM recalling a file): it did not perform the operation,
//! and RFC 1813 (§2.6) says to wait and send the call again with a new XID. Every call of
//! this client does so, as the Linux client does (`NFS_JUKEBOX_RETRY_TIME`, 5 s): after
//! [`Nfs3Opts::jukebox_delay`] counted from when the answer arrived, from a kept copy of the
//! call (its data pages shared, not copied) under a new XID, so that a server's duplicate
//! request cache cannot replay the JUKEBOX answer; until the call has been answered
//! `NFS3ERR_JUKEBOX` for [`Nfs3Opts::give_up`], when the status is the caller's error. That
//! holds for the non-idempotent procedures too (CREATE, REMOVE, MKDIR, SYMLINK, WRITE):
//! JUKEBOX means not performed, so sending again cannot perform it twice. Retries are counted
//! ([`Nfs3Client::jukebox_retries`]) and the first of each call is a line through
//! [`Dialer::note`].

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use krpc_rdma::transport::{Counters, DdpReply, LocateFn, ReplySpec, TransportConfig};
use mbuf::Chain;
use nfs_proto::chain::{data_pages_from_bytes, ddp_call};
use nfs_proto::ddp::{nfs3_ddp_item, nfs3_reply_hint, Direction, ReplyHint};
use nfs_proto::nfs3::{
    locate_read_data, locate_readlink_data, proc_name, CommitArgs, CommitRes, CreateArgs,
    CreateRes, Createhow3, Diropargs3, Fattr3, Filename3, FsinfoArgs, FsinfoRes, Ftype3,
    GetattrArgs, GetattrRes, LookupArgs, LookupRes, MkdirArgs, MkdirRes, NfsFh3, Nfsstat3,
    ReadArgs, ReadRes, ReaddirplusArgs, ReaddirplusRes, ReadlinkArgs, ReadlinkRes, RemoveArgs,
    RemoveRes, Sattr3, StableHow, SymlinkHead, SymlinkRes, WriteHead, WriteRes, Writeverf3, Xdr,
    NFS3_MAXPATHLEN, NFSPROC3_COMMIT, NFSPROC3_CREATE, NFSPROC3_FSINFO, NFSPROC3_GETATTR,
    NFSPROC3_LOOKUP, NFSPROC3_MKDIR, NFSPROC3_NULL, NFSPROC3_READ, NFSPROC3_READDIRPLUS,
    NFSPROC3_READLINK, NFSPROC3_REMOVE, NFSPROC3_SYMLINK, NFSPROC3_WRITE, NFS_PROGRAM, NFS_V3,
};
use onc_rpc::rpc::{CallHeader, ReplyHeader};
use onc_rpc::xdr::{Decoder, Encoder, XdrError};

use onc_rpc_tcp::mount;

use crate::conn::{secs, DEFAULT_GIVE_UP};
use crate::dialer::Dialer;
use crate::error::RunError;
use crate::filedata::{self, Progress};
use crate::session::Session;

/// Most bytes per READ or WRITE, whatever the server offers.
pub const MAX_IO: u32 = 1 << 20;
/// Times `put` sends a file again after the server's write verifier changed.
pub const MAX_REWRITES: u32 = 3;

/// The transport configuration of NFS sessions: 4096-byte inline sizes offered (as Linux's
/// client, whose default inline thresholds are 4096; knfsd offers the same, so small WRITEs
/// and small replies need no chunk), everything else the core's defaults.
pub fn nfs_transport() -> TransportConfig {
    TransportConfig {
        inline_send: 4096,
        inline_recv: 4096,
        ..TransportConfig::default()
    }
}
/// Default calls in flight for `put` / `get`.
pub const DEFAULT_DEPTH: usize = 8;
/// Default wait before a call answered `NFS3ERR_JUKEBOX` is sent again: the Linux client's
/// `NFS_JUKEBOX_RETRY_TIME`.
pub const JUKEBOX_DELAY: Duration = Duration::from_secs(5);

/// How an NFSv3 client behaves ([`Nfs3Client::connect`], [`Nfs3Client::new`]). The default
/// is what users of NFS expect of a hard mount, bounded: reconnect after a lost connection
/// and retry `NFS3ERR_JUKEBOX`, for up to [`DEFAULT_GIVE_UP`] each time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nfs3Opts {
    /// Calls in flight for `put` / `get` (1 ..= [`MAX_DEPTH`]).
    pub depth: usize,
    /// Progress lines on stderr during long transfers.
    pub progress: bool,
    /// Reconnect after a lost connection and resend the calls owed a reply (used by
    /// [`Nfs3Client::connect`]; [`Nfs3Client::new`] takes a session already made). Off: a
    /// lost connection is [`RunError::Lost`].
    pub reconnect: bool,
    /// Give up reconnecting after this long without a connection, and give up on a call
    /// the server keeps answering `NFS3ERR_JUKEBOX` after this long.
    pub give_up: Duration,
    /// Wait this long (from the answer) before sending a call answered `NFS3ERR_JUKEBOX`
    /// again.
    pub jukebox_delay: Duration,
}

impl Default for Nfs3Opts {
    fn default() -> Self {
        Nfs3Opts {
            depth: DEFAULT_DEPTH,
            progress: false,
            reconnect: true,
            give_up: DEFAULT_GIVE_UP,
            jukebox_delay: JUKEBOX_DELAY,
        }
    }
}

/// What a call's reply needs: see [`Nfs3Client::reply_spec`].
#[derive(Debug, Clone, Copy)]
struct ReplyShape {
    data_max: usize,
    max_reply: usize,
}

impl ReplyShape {
    fn inline(max_reply: usize) -> ReplyShape {
        ReplyShape {
            data_max: 0,
            max_reply,
        }
    }
}

/// A call kept until its reply, to be sent again under a new XID if the server answers
/// `NFS3ERR_JUKEBOX`.
struct Kept {
    proc_: u32,
    /// A copy of the call as sent ([`Chain::copym`]: data pages shared).
    call: Chain,
    reply: ReplyShape,
    /// When the first `NFS3ERR_JUKEBOX` answer arrived.
    since: Option<Instant>,
}
/// READDIRPLUS `maxcount` (and `dircount`): large enough that a directory of hundreds of
/// entries needs few calls, so the reply is larger than the inline threshold (reply chunk).
const READDIR_MAX: u32 = 32 * 1024;
/// Bytes of a READ reply decoded as its head: RPC reply header (24 + a verifier of at most
/// 400) and READ3resok up to the data (status, post_op_attr, count, eof, length: 108).
const READ_HEAD_MAX: usize = 24 + 400 + 108;
/// Largest reply of the procedures without bulk results (LOOKUP, GETATTR, CREATE, MKDIR,
/// SYMLINK, REMOVE, WRITE, COMMIT, FSINFO): RPC header with a small verifier plus at most a
/// file handle, two post_op_attrs and wcc_data (~ 400 bytes). Kept under the 1024-byte default
/// inline threshold so no reply chunk is registered for them.
const SMALL_REPLY: usize = 640;
/// Room for the RPC reply header (with a verifier of up to ~100 bytes) and a READ or
/// READLINK result head (status, post_op_attr, count, eof, length: at most 108 bytes) besides
/// the data. It must fit the inline threshold (1024 bytes when the server sends no RFC 8797
/// private data, as knfsd does) for the transport to choose a write chunk over a reply chunk.
const REPLY_SLACK: usize = 256;

/// Why an `nfs3` command failed.
#[derive(Debug)]
pub enum NfsError {
    /// The transport or connection failed (exit status as [`RunError::exit_code`]).
    Run(RunError),
    /// The MOUNT protocol failed.
    Mount(mount::MountError),
    /// The server answered an NFS error status.
    Status {
        /// The operation (e.g. "LOOKUP").
        op: &'static str,
        /// What it was about.
        what: String,
        /// The status.
        status: Nfsstat3,
    },
    /// A malformed or unexpected reply, or a local problem (file I/O).
    Other(String),
}

impl NfsError {
    /// The process exit status: 3 for a lost connection, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            NfsError::Run(e) => e.exit_code(),
            _ => 1,
        }
    }

    /// The NFS status, when the server gave one.
    pub fn status(&self) -> Option<Nfsstat3> {
        match self {
            NfsError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

impl fmt::Display for NfsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NfsError::Run(e) => e.fmt(f),
            NfsError::Mount(e) => write!(f, "MOUNT: {e}"),
            NfsError::Status { op, what, status } => write!(f, "{op} {what}: {}", status.name()),
            NfsError::Other(m) => f.write_str(m),
        }
    }
}

impl From<RunError> for NfsError {
    fn from(e: RunError) -> Self {
        NfsError::Run(e)
    }
}

fn xdr(what: &str) -> impl Fn(XdrError) -> NfsError + '_ {
    move |e| NfsError::Other(format!("{what}: malformed reply: {e}"))
}

fn io(what: String) -> impl Fn(std::io::Error) -> NfsError {
    move |e| NfsError::Other(format!("{what}: {e}"))
}

/// What `put` / `get` measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Transfer {
    /// File bytes moved.
    pub bytes: u64,
    /// READ or WRITE calls.
    pub calls: u64,
    /// Seconds from the first data call to the last reply (COMMIT included for `put`).
    pub secs: f64,
    /// Times `put` sent the file again because the server's write verifier changed.
    pub rewrites: u64,
}

impl Transfer {
    /// MB/s (10^6 bytes).
    pub fn mb_per_s(&self) -> f64 {
        if self.secs > 0.0 {
            self.bytes as f64 / self.secs / 1e6
        } else {
            0.0
        }
    }
}

/// One directory entry from `ls`.
#[derive(Debug, Clone)]
pub struct DirEntry {
    /// The name (bytes, as the server sent them).
    pub name: Vec<u8>,
    /// The attributes, when the server sent them.
    pub attrs: Option<Fattr3>,
}

/// Bytes of pages a client with `depth` calls in flight needs from its dialer: each call's
/// DDP data (at most [`MAX_IO`] and two pages of slack) plus 4 MiB for the rest.
pub fn pages_needed(depth: usize) -> usize {
    depth.clamp(1, MAX_DEPTH) * (MAX_IO as usize + 2 * 4096) + (4 << 20)
}

/// Most calls in flight for `put` / `get`.
pub const MAX_DEPTH: usize = 64;

/// An NFSv3 client connection.
pub struct Nfs3Client<D: Dialer> {
    s: Session<D>,
    root: NfsFh3,
    rsize: u32,
    wsize: u32,
    depth: usize,
    progress: bool,
    give_up: Duration,
    jukebox_delay: Duration,
    /// Calls sent and not yet collected, by XID (not NULL: it has no status).
    kept: HashMap<u32, Kept>,
    jukebox_retries: u64,
}

impl<D: Dialer> Nfs3Client<D> {
    /// Connect through `dialer` (a [`Session`] with [`nfs_transport`], reconnecting as `o`
    /// says) and make a client of it ([`Nfs3Client::new`]).
    ///
    /// # Errors
    /// The connection failed, as [`Nfs3Client::new`].
    pub fn connect(
        dialer: D,
        root: NfsFh3,
        export: &str,
        o: &Nfs3Opts,
    ) -> Result<Nfs3Client<D>, NfsError> {
        let s = Session::connect(dialer, nfs_transport(), o.reconnect.then_some(o.give_up))?;
        Nfs3Client::new(s, root, export, o)
    }

    /// An NFSv3 client over `s` for the export whose root handle is `root` (`export` names it
    /// in errors): asks FSINFO for the transfer sizes. `o` gives the calls in flight for
    /// `put` / `get`, progress lines, and the `NFS3ERR_JUKEBOX` retry delay and give-up time
    /// (reconnection is the session's).
    ///
    /// # Errors
    /// The transport failed, an NFS error.
    pub fn new(
        s: Session<D>,
        root: NfsFh3,
        export: &str,
        o: &Nfs3Opts,
    ) -> Result<Nfs3Client<D>, NfsError> {
        let mut c = Nfs3Client {
            s,
            root,
            rsize: MAX_IO,
            wsize: MAX_IO,
            depth: o.depth.clamp(1, MAX_DEPTH),
            progress: o.progress,
            give_up: o.give_up,
            jukebox_delay: o.jukebox_delay,
            kept: HashMap::new(),
            jukebox_retries: 0,
        };
        let args = FsinfoArgs {
            fsroot: c.root.clone(),
        };
        let res: FsinfoRes = c.call(NFSPROC3_FSINFO, &encode(|e| args.encode(e))?, SMALL_REPLY)?;
        match res.ok() {
            Some(ok) => {
                c.rsize = ok.rtmax.clamp(4096, MAX_IO) & !4095;
                c.wsize = ok.wtmax.clamp(4096, MAX_IO) & !4095;
                Ok(c)
            }
            None => Err(NfsError::Status {
                op: "FSINFO",
                what: export.to_string(),
                status: res.status(),
            }),
        }
    }

    /// READ and WRITE sizes in use (from FSINFO, at most [`MAX_IO`]).
    pub fn io_sizes(&self) -> (u32, u32) {
        (self.rsize, self.wsize)
    }

    /// The transport's counters.
    pub fn counters(&self) -> Counters {
        self.s.counters()
    }

    /// Calls sent again because the server answered `NFS3ERR_JUKEBOX`.
    pub fn jukebox_retries(&self) -> u64 {
        self.jukebox_retries
    }

    /// The underlying session.
    pub fn session(&self) -> &Session<D> {
        &self.s
    }

    /// The underlying session, mutably.
    pub fn session_mut(&mut self) -> &mut Session<D> {
        &mut self.s
    }

    /// The NULL procedure: a round trip that does nothing.
    ///
    /// # Errors
    /// Transport errors, a malformed reply.
    pub fn null(&mut self) -> Result<(), NfsError> {
        self.call::<()>(NFSPROC3_NULL, &[], SMALL_REPLY)
    }

    fn header(&mut self, proc_: u32) -> (u32, Result<Vec<u8>, NfsError>) {
        let xid = self.s.next_xid();
        let h = CallHeader {
            xid,
            prog: NFS_PROGRAM,
            vers: NFS_V3,
            proc_,
            cred: mount::auth_sys_root(),
            verf: onc_rpc::rpc::Auth::None,
        };
        let mut e = Encoder::new();
        h.encode(&mut e);
        (xid, e.finish().map_err(xdr("call header")))
    }

    /// The results of an accepted, successful reply to `xid` (bytes after the RPC header).
    fn results(xid: u32, reply: &Chain) -> Result<Vec<u8>, NfsError> {
        let mut b = vec![0u8; reply.len()];
        reply
            .copydata(0, &mut b)
            .map_err(|e| NfsError::Other(format!("reply: {e}")))?;
        let mut d = Decoder::new(&b);
        let h = ReplyHeader::decode(&mut d).map_err(xdr("RPC reply header"))?;
        if h.xid() != xid {
            return Err(NfsError::Other(format!(
                "reply XID {:#x} for call {xid:#x}",
                h.xid()
            )));
        }
        if !h.is_success() {
            return Err(NfsError::Other(format!("RPC call not accepted: {h:?}")));
        }
        let at = d.pos();
        b.drain(..at);
        Ok(b)
    }

    /// Send call `xid` of procedure `proc_` with its reply provisioned as `shape` says,
    /// keeping a copy for a retry after `NFS3ERR_JUKEBOX` ([`Nfs3Client::collect`]).
    fn send(
        &mut self,
        proc_: u32,
        xid: u32,
        call: Chain,
        shape: ReplyShape,
    ) -> Result<(), NfsError> {
        let copy = if proc_ == NFSPROC3_NULL {
            None
        } else {
            Some(call.copym(0, call.len()).map_err(|e| {
                NfsError::Other(format!(
                    "keeping a copy of the {} call: {e}",
                    op_name(proc_)
                ))
            })?)
        };
        let spec = self.reply_spec(proc_, shape.data_max, shape.max_reply)?;
        self.s.submit(xid, call, spec)?;
        if let Some(call) = copy {
            self.kept.insert(
                xid,
                Kept {
                    proc_,
                    call,
                    reply: shape,
                    since: None,
                },
            );
        }
        Ok(())
    }

    /// The reply to call `xid` (sent by [`Nfs3Client::send`]) and the XID it answers: while
    /// the server answers `NFS3ERR_JUKEBOX`, the call is sent again under a new XID
    /// [`Nfs3Opts::jukebox_delay`] after the answer arrived (answers that waited in the
    /// session while other calls were collected are not delayed again), for up to
    /// [`Nfs3Opts::give_up`] from the first such answer; then that answer is returned.
    fn collect(&mut self, xid: u32) -> Result<(u32, Chain), NfsError> {
        let mut xid = xid;
        loop {
            let got = self.s.wait_arrival(xid);
            let kept = self.kept.remove(&xid);
            let (reply, arrived) = got?;
            let Some(mut k) = kept else {
                return Ok((xid, reply));
            };
            if nfs_status(&reply) != Some(Nfsstat3::ERR_JUKEBOX) {
                return Ok((xid, reply));
            }
            let op = op_name(k.proc_);
            let first = k.since.is_none();
            let since = *k.since.get_or_insert(arrived);
            let retry_at = arrived + self.jukebox_delay;
            if retry_at.saturating_duration_since(since) > self.give_up {
                self.s.dialer().note(format_args!(
                    "{op}: the server answered NFS3ERR_JUKEBOX for {:.1} s; giving up",
                    arrived.saturating_duration_since(since).as_secs_f64()
                ));
                return Ok((xid, reply));
            }
            if first {
                self.s.dialer().note(format_args!(
                    "{op}: the server is busy (NFS3ERR_JUKEBOX); sending the call again every \
                     {} s with a new XID, for up to {} s",
                    secs(self.jukebox_delay),
                    secs(self.give_up)
                ));
            }
            drop(reply);
            let now = self.s.now();
            if retry_at > now {
                self.s.sleep(retry_at - now);
            }
            let new = self.s.next_xid();
            let again =
                |e: mbuf::MbufError| NfsError::Other(format!("sending the {op} call again: {e}"));
            k.call.copyback(0, &new.to_be_bytes()).map_err(again)?;
            let call = k.call.copym(0, k.call.len()).map_err(again)?;
            let spec = self.reply_spec(k.proc_, k.reply.data_max, k.reply.max_reply)?;
            self.s.submit(new, call, spec)?;
            self.jukebox_retries += 1;
            self.kept.insert(new, k);
            xid = new;
        }
    }

    /// One call, sent and collected (retried after `NFS3ERR_JUKEBOX`): the reply and the
    /// XID it answers.
    fn call_chain(
        &mut self,
        proc_: u32,
        xid: u32,
        call: Chain,
        shape: ReplyShape,
    ) -> Result<(u32, Chain), NfsError> {
        self.send(proc_, xid, call, shape)?;
        self.collect(xid)
    }

    /// One call with inline arguments; `T` decoded from the results.
    fn call<T: Xdr>(&mut self, proc_: u32, args: &[u8], max_reply: usize) -> Result<T, NfsError> {
        let (xid, head) = self.header(proc_);
        let mut msg = head?;
        msg.extend_from_slice(args);
        let call = Chain::from_bytes(&msg).map_err(|e| NfsError::Other(format!("{e}")))?;
        let (xid, reply) = self.call_chain(proc_, xid, call, ReplyShape::inline(max_reply))?;
        let r = Self::results(xid, &reply)?;
        <T as Xdr>::decode(&mut Decoder::new(&r))
            .map_err(xdr(nfs_proto::nfs3::proc_name(proc_).unwrap_or("NFS")))
    }

    /// The handle of `path` (absolute within the export; "" or "/" is the root).
    ///
    /// # Errors
    /// NFS errors (NFS3ERR_NOENT …), transport errors.
    pub fn lookup(&mut self, path: &str) -> Result<NfsFh3, NfsError> {
        let mut fh = self.root.clone();
        let mut walked = String::new();
        for comp in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
            walked.push('/');
            walked.push_str(comp);
            let args = LookupArgs {
                what: Diropargs3 {
                    dir: fh,
                    name: Filename3(comp.as_bytes().to_vec()),
                },
            };
            let res: LookupRes =
                self.call(NFSPROC3_LOOKUP, &encode(|e| args.encode(e))?, SMALL_REPLY)?;
            fh = match res {
                nfs_proto::nfs3::Nfs3Res::Ok(ok) => ok.object,
                nfs_proto::nfs3::Nfs3Res::Fail { status, .. } => {
                    return Err(NfsError::Status {
                        op: "LOOKUP",
                        what: walked,
                        status,
                    })
                }
            };
        }
        Ok(fh)
    }

    /// The directory handle and last name of `path`.
    fn parent(&mut self, path: &str) -> Result<(NfsFh3, Filename3), NfsError> {
        let trimmed = path.trim_end_matches('/');
        let (dir, name) = trimmed.rsplit_once('/').unwrap_or(("", trimmed));
        if name.is_empty() || name == "." || name == ".." {
            return Err(NfsError::Other(format!("{path:?}: not a file name")));
        }
        Ok((self.lookup(dir)?, Filename3(name.as_bytes().to_vec())))
    }

    /// GETATTR of `path`.
    ///
    /// # Errors
    /// NFS errors, transport errors.
    pub fn stat(&mut self, path: &str) -> Result<Fattr3, NfsError> {
        let fh = self.lookup(path)?;
        self.getattr(&fh, path)
    }

    fn getattr(&mut self, fh: &NfsFh3, what: &str) -> Result<Fattr3, NfsError> {
        let args = GetattrArgs { object: fh.clone() };
        let res: GetattrRes =
            self.call(NFSPROC3_GETATTR, &encode(|e| args.encode(e))?, SMALL_REPLY)?;
        match res {
            nfs_proto::nfs3::Nfs3Res::Ok(ok) => Ok(ok.obj_attributes),
            nfs_proto::nfs3::Nfs3Res::Fail { status, .. } => Err(NfsError::Status {
                op: "GETATTR",
                what: what.to_string(),
                status,
            }),
        }
    }

    /// MKDIR `path` (mode 0755).
    ///
    /// # Errors
    /// NFS errors (NFS3ERR_EXIST …), transport errors.
    pub fn mkdir(&mut self, path: &str) -> Result<(), NfsError> {
        let (dir, name) = self.parent(path)?;
        let args = MkdirArgs {
            where_: Diropargs3 { dir, name },
            attributes: Sattr3 {
                mode: Some(0o755),
                ..Sattr3::default()
            },
        };
        let res: MkdirRes = self.call(NFSPROC3_MKDIR, &encode(|e| args.encode(e))?, SMALL_REPLY)?;
        status_ok("MKDIR", path, res.status())
    }

    /// REMOVE `path` (not a directory).
    ///
    /// # Errors
    /// NFS errors, transport errors.
    pub fn remove(&mut self, path: &str) -> Result<(), NfsError> {
        let (dir, name) = self.parent(path)?;
        let args = RemoveArgs {
            object: Diropargs3 { dir, name },
        };
        let res: RemoveRes =
            self.call(NFSPROC3_REMOVE, &encode(|e| args.encode(e))?, SMALL_REPLY)?;
        status_ok("REMOVE", path, res.status())
    }

    /// SYMLINK `path` → `target`. The target path is the DDP-eligible item of SYMLINK
    /// (RFC 8267): it is handed to the transport as page mbufs behind the DDP marker, which
    /// sends it as a read chunk unless the whole call fits the inline threshold (then the
    /// bytes are copied inline, as for any small DDP region).
    ///
    /// # Errors
    /// NFS errors, transport errors, a target longer than `NFS3_MAXPATHLEN`.
    pub fn symlink(&mut self, target: &str, path: &str) -> Result<(), NfsError> {
        if target.len() > NFS3_MAXPATHLEN || target.is_empty() {
            return Err(NfsError::Other(format!(
                "symbolic link target of {} bytes (1..={NFS3_MAXPATHLEN})",
                target.len()
            )));
        }
        let (dir, name) = self.parent(path)?;
        let sh = SymlinkHead {
            where_: Diropargs3 { dir, name },
            symlink_attributes: Sattr3 {
                mode: Some(0o777),
                ..Sattr3::default()
            },
        };
        let (xid, head) = self.header(NFSPROC3_SYMLINK);
        let mut head = head?;
        let args = encode(|e| sh.encode_head(e, target.len() as u32))?;
        head.extend_from_slice(&args);
        let data = data_pages_from_bytes(self.s.pages(), target.as_bytes())
            .map_err(|e| NfsError::Other(format!("SYMLINK data: {e}")))?;
        let call = Self::call_with_data(NFSPROC3_SYMLINK, &head, data)?;
        let (xid, reply) =
            self.call_chain(NFSPROC3_SYMLINK, xid, call, ReplyShape::inline(SMALL_REPLY))?;
        let r = Self::results(xid, &reply)?;
        let res = SymlinkRes::decode(&mut Decoder::new(&r)).map_err(xdr("SYMLINK"))?;
        status_ok("SYMLINK", path, res.status())
    }

    /// READLINK `path`: the target, placed by the server into a write chunk (RFC 8267).
    ///
    /// # Errors
    /// NFS errors (NFS3ERR_INVAL for a non-link), transport errors.
    pub fn readlink(&mut self, path: &str) -> Result<Vec<u8>, NfsError> {
        let fh = self.lookup(path)?;
        let args = ReadlinkArgs { symlink: fh };
        let (xid, head) = self.header(NFSPROC3_READLINK);
        let mut msg = head?;
        msg.extend_from_slice(&encode(|e| args.encode(e))?);
        let call = Chain::from_bytes(&msg).map_err(|e| NfsError::Other(format!("{e}")))?;
        let shape = ReplyShape {
            data_max: NFS3_MAXPATHLEN,
            max_reply: SMALL_REPLY,
        };
        let (xid, reply) = self.call_chain(NFSPROC3_READLINK, xid, call, shape)?;
        let r = Self::results(xid, &reply)?;
        let res = ReadlinkRes::decode(&mut Decoder::new(&r)).map_err(xdr("READLINK"))?;
        match res {
            nfs_proto::nfs3::Nfs3Res::Ok(ok) => Ok(ok.data.0),
            nfs_proto::nfs3::Nfs3Res::Fail { status, .. } => Err(NfsError::Status {
                op: "READLINK",
                what: path.to_string(),
                status,
            }),
        }
    }

    /// The entries of directory `path` (READDIRPLUS until EOF; `.` and `..` left out), sorted
    /// by name.
    ///
    /// # Errors
    /// NFS errors (NFS3ERR_NOTDIR …), transport errors.
    pub fn ls(&mut self, path: &str) -> Result<Vec<DirEntry>, NfsError> {
        let dir = self.lookup(path)?;
        let mut out = Vec::new();
        let mut cookie = 0u64;
        let mut verf = nfs_proto::nfs3::Cookieverf3([0; 8]);
        loop {
            let args = ReaddirplusArgs {
                dir: dir.clone(),
                cookie,
                cookieverf: verf,
                dircount: READDIR_MAX,
                maxcount: READDIR_MAX,
            };
            let res: ReaddirplusRes = self.call(
                NFSPROC3_READDIRPLUS,
                &encode(|e| args.encode(e))?,
                READDIR_MAX as usize + REPLY_SLACK,
            )?;
            let ok = match res {
                nfs_proto::nfs3::Nfs3Res::Ok(ok) => ok,
                nfs_proto::nfs3::Nfs3Res::Fail { status, .. } => {
                    return Err(NfsError::Status {
                        op: "READDIRPLUS",
                        what: path.to_string(),
                        status,
                    })
                }
            };
            verf = ok.cookieverf;
            let n = ok.reply.entries.len();
            for e in ok.reply.entries {
                cookie = e.cookie;
                if e.name.0 != b"." && e.name.0 != b".." {
                    out.push(DirEntry {
                        name: e.name.0,
                        attrs: e.name_attributes,
                    });
                }
            }
            if ok.reply.eof {
                break;
            }
            if n == 0 {
                return Err(NfsError::Other(format!(
                    "READDIRPLUS {path}: no entries and no EOF"
                )));
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Copy local file `local` to `remote` (created or truncated, mode 0644).
    ///
    /// # Errors
    /// Local I/O errors, NFS errors, a short WRITE, a COMMIT verifier mismatch (the server
    /// restarted), transport errors.
    pub fn put(&mut self, local: &Path, remote: &str) -> Result<Transfer, NfsError> {
        let f = File::open(local).map_err(io(format!("{}", local.display())))?;
        let size = f
            .metadata()
            .map_err(io(format!("{}", local.display())))?
            .len();
        let (dir, name) = self.parent(remote)?;
        let args = CreateArgs {
            where_: Diropargs3 {
                dir: dir.clone(),
                name: name.clone(),
            },
            how: Createhow3::Unchecked(Sattr3 {
                mode: Some(0o644),
                size: Some(0),
                ..Sattr3::default()
            }),
        };
        let res: CreateRes =
            self.call(NFSPROC3_CREATE, &encode(|e| args.encode(e))?, SMALL_REPLY)?;
        let fh = match res {
            nfs_proto::nfs3::Nfs3Res::Ok(ok) => match ok.obj {
                Some(fh) => fh,
                None => self.lookup(remote)?,
            },
            nfs_proto::nfs3::Nfs3Res::Fail { status, .. } => {
                return Err(NfsError::Status {
                    op: "CREATE",
                    what: remote.to_string(),
                    status,
                })
            }
        };
        let start = Instant::now();
        let mut t = Transfer::default();
        let mut progress = Progress::new(self.progress, "put", size);
        // A server that restarts loses UNSTABLE data it had not committed, and says so by a
        // new write verifier (RFC 1813 §3.3.7): the client must send those WRITEs again.
        // Only a reconnecting client can see that; it sends the whole file again (nothing
        // of it was committed), up to `MAX_REWRITES` times.
        let mut rewrites = 0;
        loop {
            (&f).seek(SeekFrom::Start(0))
                .map_err(io(format!("{}", local.display())))?;
            let stable =
                self.put_pass(&f, local, remote, &fh, size, start, &mut t, &mut progress)?;
            if stable {
                break;
            }
            rewrites += 1;
            if !self.s.reconnects_enabled() || rewrites > MAX_REWRITES {
                return Err(NfsError::Other(format!(
                    "WRITE {remote}: write verifier changed (server restarted); data not stable"
                )));
            }
            self.s.dialer().note(format_args!(
                "{remote}: the server's write verifier changed (it restarted); sending the \
                 UNSTABLE WRITEs again"
            ));
            t.rewrites += 1;
        }
        t.secs = start.elapsed().as_secs_f64();
        progress.done();
        Ok(t)
    }

    /// One pass of `put`: every byte of `f` in UNSTABLE WRITEs, then one COMMIT. `Ok(false)`
    /// when the write verifier changed during the pass (the data is not stable and must be
    /// sent again).
    #[allow(clippy::too_many_arguments)]
    fn put_pass(
        &mut self,
        f: &File,
        local: &Path,
        remote: &str,
        fh: &NfsFh3,
        size: u64,
        start: Instant,
        t: &mut Transfer,
        progress: &mut Progress,
    ) -> Result<bool, NfsError> {
        let mut inflight: VecDeque<(u32, u64, u32)> = VecDeque::new();
        let mut verf: Option<Writeverf3> = None;
        let mut changed = false;
        let mut off = 0u64;
        while off < size || !inflight.is_empty() {
            if !changed && off < size && inflight.len() < self.depth {
                let n = (size - off).min(u64::from(self.wsize)) as usize;
                let pages = self.file_pages(f, n, local)?;
                let xid = self.submit_write(fh, off, pages)?;
                inflight.push_back((xid, off, n as u32));
                off += n as u64;
                t.calls += 1;
                continue;
            }
            let Some((xid, woff, n)) = inflight.pop_front() else {
                break;
            };
            let (xid, reply) = self.collect(xid)?;
            let r = Self::results(xid, &reply)?;
            let res = WriteRes::decode(&mut Decoder::new(&r)).map_err(xdr("WRITE"))?;
            let ok = match res {
                nfs_proto::nfs3::Nfs3Res::Ok(ok) => ok,
                nfs_proto::nfs3::Nfs3Res::Fail { status, .. } => {
                    return Err(NfsError::Status {
                        op: "WRITE",
                        what: format!("{remote} at {woff}"),
                        status,
                    })
                }
            };
            if ok.count != n {
                return Err(NfsError::Other(format!(
                    "WRITE {remote} at {woff}: server wrote {} of {n} bytes",
                    ok.count
                )));
            }
            if *verf.get_or_insert(ok.verf) != ok.verf {
                // Collect what is in flight, then start over.
                changed = true;
            }
            t.bytes += u64::from(n);
            progress.tick(t.bytes, start);
        }
        if changed {
            return Ok(false);
        }
        // One COMMIT of everything written unstable.
        let args = CommitArgs {
            file: fh.clone(),
            offset: 0,
            count: 0,
        };
        let res: CommitRes =
            self.call(NFSPROC3_COMMIT, &encode(|e| args.encode(e))?, SMALL_REPLY)?;
        match res {
            nfs_proto::nfs3::Nfs3Res::Ok(ok) => Ok(verf.is_none_or(|v| v == ok.verf)),
            nfs_proto::nfs3::Nfs3Res::Fail { status, .. } => Err(NfsError::Status {
                op: "COMMIT",
                what: remote.to_string(),
                status,
            }),
        }
    }

    /// The next `n` bytes of `f` in fresh pages of the dialer ([`filedata::file_pages`]).
    fn file_pages(&self, f: &File, n: usize, local: &Path) -> Result<Chain, NfsError> {
        filedata::file_pages(self.s.dialer(), f, n, &local.display().to_string())
            .map_err(NfsError::Other)
    }

    /// Send one UNSTABLE WRITE of `data` (page mbufs) at `off`: [RPC header + WRITE3args
    /// head][marker][page mbufs][pad] — the transport makes the pages a read chunk.
    fn submit_write(&mut self, fh: &NfsFh3, off: u64, data: Chain) -> Result<u32, NfsError> {
        let n = u32::try_from(data.len()).map_err(|_| NfsError::Other("WRITE size".into()))?;
        let (xid, head) = self.header(NFSPROC3_WRITE);
        let mut head = head?;
        let wh = WriteHead {
            file: fh.clone(),
            offset: off,
            count: n,
            stable: StableHow::Unstable,
        };
        head.extend_from_slice(&encode(|e| wh.encode_head(e, n))?);
        let call = Self::call_with_data(NFSPROC3_WRITE, &head, data)?;
        self.send(NFSPROC3_WRITE, xid, call, ReplyShape::inline(SMALL_REPLY))?;
        Ok(xid)
    }

    /// Copy `remote` to local file `local` (created or truncated).
    ///
    /// # Errors
    /// NFS errors, local I/O errors, transport errors, a READ that returns nothing before
    /// the size GETATTR gave.
    pub fn get(&mut self, remote: &str, local: &Path) -> Result<Transfer, NfsError> {
        let fh = self.lookup(remote)?;
        let attrs = self.getattr(&fh, remote)?;
        if attrs.type_ != Ftype3::Reg {
            return Err(NfsError::Other(format!(
                "{remote}: not a regular file ({:?})",
                attrs.type_
            )));
        }
        let size = attrs.size;
        let mut f = File::create(local).map_err(io(format!("{}", local.display())))?;
        let start = Instant::now();
        let mut t = Transfer::default();
        let mut progress = Progress::new(self.progress, "get", size);
        let mut inflight: VecDeque<(u32, u64, u32)> = VecDeque::new();
        let mut off = 0u64;
        while off < size || !inflight.is_empty() {
            if off < size && inflight.len() < self.depth {
                let n = (size - off).min(u64::from(self.rsize)) as u32;
                let xid = self.submit_read(&fh, off, n)?;
                inflight.push_back((xid, off, n));
                off += u64::from(n);
                t.calls += 1;
                continue;
            }
            let Some((xid, roff, n)) = inflight.pop_front() else {
                break;
            };
            let mut at = roff;
            let end = roff + u64::from(n);
            let mut xid = xid;
            loop {
                let (answered, reply) = self.collect(xid)?;
                xid = answered;
                let (got, eof) =
                    Self::read_reply(self.s.dialer(), xid, &reply, remote, at, &mut f)?;
                at += got;
                if at >= end || eof {
                    break;
                }
                if got == 0 {
                    return Err(NfsError::Other(format!(
                        "READ {remote} at {at}: no data and no EOF before the size GETATTR gave"
                    )));
                }
                // A short read: ask for the rest of this piece.
                xid = self.submit_read(&fh, at, (end - at) as u32)?;
                t.calls += 1;
            }
            t.bytes += at - roff;
            progress.tick(t.bytes, start);
        }
        f.flush()
            .map_err(io(format!("writing {}", local.display())))?;
        t.secs = start.elapsed().as_secs_f64();
        progress.done();
        Ok(t)
    }

    /// Check one READ reply and write its data at `at` in `f`: (bytes, eof). Only the head
    /// of the reply is decoded from a copy; the data goes from the reply's page mbufs (the
    /// write chunk's pages) to the file by [`Dialer::write_file`] (the libibverbs arena's
    /// `writev`: no copy in userspace, as the kernel client's O_DIRECT READ lands in the
    /// user's pages).
    fn read_reply(
        dialer: &D,
        xid: u32,
        reply: &Chain,
        remote: &str,
        at: u64,
        f: &mut File,
    ) -> Result<(u64, bool), NfsError> {
        let mut head = [0u8; READ_HEAD_MAX];
        let hn = reply.len().min(READ_HEAD_MAX);
        let hb = head
            .get_mut(..hn)
            .ok_or_else(|| NfsError::Other("READ head".into()))?;
        reply
            .copydata(0, hb)
            .map_err(|e| NfsError::Other(format!("READ reply: {e}")))?;
        let mut d = Decoder::new(hb);
        let h = ReplyHeader::decode(&mut d).map_err(xdr("RPC reply header"))?;
        if h.xid() != xid || !h.is_success() {
            return Err(NfsError::Other(format!(
                "READ {remote}: unexpected reply {h:?} to call {xid:#x}"
            )));
        }
        let rh = ReadRes::decode_head(&mut d).map_err(xdr("READ"))?;
        if !rh.status.is_ok() {
            return Err(NfsError::Status {
                op: "READ",
                what: format!("{remote} at {at}"),
                status: rh.status,
            });
        }
        let data_at = d.pos();
        let len = rh.data_len as usize;
        if data_at + len > reply.len() {
            return Err(NfsError::Other(format!(
                "READ {remote} at {at}: {len} data bytes announced, {} in the reply",
                reply.len() - data_at
            )));
        }
        f.seek(SeekFrom::Start(at))
            .map_err(io(format!("seeking in {remote}'s copy")))?;
        filedata::data_to_file(
            dialer,
            reply,
            data_at..data_at + len,
            f,
            &format!("{remote}'s copy"),
        )
        .map_err(NfsError::Other)?;
        Ok((len as u64, rh.eof))
    }

    /// Send one READ with a write chunk of `n` bytes in fresh pages.
    fn submit_read(&mut self, fh: &NfsFh3, off: u64, n: u32) -> Result<u32, NfsError> {
        let args = ReadArgs {
            file: fh.clone(),
            offset: off,
            count: n,
        };
        let (xid, head) = self.header(NFSPROC3_READ);
        let mut msg = head?;
        msg.extend_from_slice(&encode(|e| args.encode(e))?);
        let call = Chain::from_bytes(&msg).map_err(|e| NfsError::Other(format!("{e}")))?;
        let shape = ReplyShape {
            data_max: n as usize,
            max_reply: SMALL_REPLY,
        };
        self.send(NFSPROC3_READ, xid, call, shape)?;
        Ok(xid)
    }

    /// How to provision the reply of procedure `proc_`, from the RFC 8267 table
    /// ([`nfs3_reply_hint`]): for a DDP-eligible result (READ, READLINK) a write chunk of
    /// `data_max` bytes in fresh pages, located in the reply by the procedure's `locate`
    /// function; otherwise room for `max_reply` bytes, which the transport turns into a reply
    /// chunk when it exceeds the inline threshold (READDIRPLUS).
    fn reply_spec(
        &self,
        proc_: u32,
        data_max: usize,
        max_reply: usize,
    ) -> Result<ReplySpec, NfsError> {
        match nfs3_reply_hint(proc_) {
            ReplyHint::WriteChunk => {
                let locate: LocateFn = match proc_ {
                    NFSPROC3_READ => locate_read_data,
                    NFSPROC3_READLINK => locate_readlink_data,
                    _ => {
                        return Err(NfsError::Other(format!(
                            "no locate function for NFSv3 procedure {proc_}"
                        )))
                    }
                };
                let pages = Chain::alloc_pages(self.s.pages(), data_max)
                    .map_err(|e| NfsError::Other(format!("page allocation: {e}")))?;
                Ok(ReplySpec {
                    max_reply: data_max + REPLY_SLACK,
                    ddp: Some(DdpReply { pages, locate }),
                })
            }
            ReplyHint::Inline | ReplyHint::ReplyChunk => Ok(ReplySpec::inline(max_reply)),
        }
    }

    /// The call message: `head` (RPC header and arguments up to the data's length word),
    /// then `data` — behind a DDP marker (Macklem's layout: the transport makes it a read
    /// chunk) when RFC 8267 makes the procedure's argument DDP-eligible
    /// ([`nfs3_ddp_item`]: WRITE, SYMLINK), else inline.
    fn call_with_data(proc_: u32, head: &[u8], data: Chain) -> Result<Chain, NfsError> {
        let eligible = nfs3_ddp_item(proc_).is_some_and(|i| i.direction == Direction::Call);
        if eligible {
            return ddp_call(head, data, &[])
                .map_err(|e| NfsError::Other(format!("building the call: {e}")));
        }
        let mut bytes = head.to_vec();
        let n = data.len();
        let at = bytes.len();
        bytes.resize(at + n + onc_rpc::xdr::pad(n), 0);
        let dst = bytes
            .get_mut(at..at + n)
            .ok_or_else(|| NfsError::Other("call buffer".into()))?;
        data.copydata(0, dst)
            .map_err(|e| NfsError::Other(format!("call data: {e}")))?;
        Chain::from_bytes(&bytes).map_err(|e| NfsError::Other(format!("{e}")))
    }
}

/// The procedure's name for messages.
fn op_name(proc_: u32) -> &'static str {
    proc_name(proc_).unwrap_or("NFS")
}

/// The NFS status of an accepted, successful RPC reply (the first word of every NFSv3
/// procedure's results but NULL's); `None` for anything else.
fn nfs_status(reply: &Chain) -> Option<Nfsstat3> {
    let mut head = [0u8; READ_HEAD_MAX];
    let hb = head.get_mut(..reply.len().min(READ_HEAD_MAX))?;
    reply.copydata(0, hb).ok()?;
    let mut d = Decoder::new(hb);
    let h = ReplyHeader::decode(&mut d).ok()?;
    if !h.is_success() {
        return None;
    }
    d.u32().ok().map(Nfsstat3)
}

fn encode(f: impl FnOnce(&mut Encoder)) -> Result<Vec<u8>, NfsError> {
    let mut e = Encoder::new();
    f(&mut e);
    e.finish().map_err(xdr("encoding arguments"))
}

fn status_ok(op: &'static str, what: &str, status: Nfsstat3) -> Result<(), NfsError> {
    if status.is_ok() {
        Ok(())
    } else {
        Err(NfsError::Status {
            op,
            what: what.to_string(),
            status,
        })
    }
}
