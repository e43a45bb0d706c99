//! An NFSv4.1 client (RFC 8881) over a [`Session`], with its back channel on the same
//! RPC-over-RDMA connection (RFC 8167) and DDP for file data (RFC 8267).
//!
//! * [`Nfs4Client::connect`]: EXCHANGE_ID (`SP4_NONE`), CREATE_SESSION with
//!   `CREATE_SESSION4_FLAG_CONN_BACK_CHAN` — the connection carrying it is also the session's
//!   back channel — and RECLAIM_COMPLETE. The back channel's sizes are those of an inline
//!   message (RFC 8167 carries reverse-direction messages inline only): the negotiated
//!   inline threshold less the transport header. Before CREATE_SESSION the session keeps a
//!   Receive posted for each back-channel slot asked for, and answers the server's
//!   reverse-direction calls with the callback service ([`CbService`]): the probe (CB_NULL),
//!   CB_SEQUENCE, CB_RECALL.
//! * Every later COMPOUND starts with SEQUENCE on a fore-channel slot of its own, so
//!   [`Nfs4Client::put`] / [`Nfs4Client::get`] keep several WRITEs / READs in flight.
//! * WRITE data travel as a read chunk (Macklem's chain layout through
//!   [`WriteDdpCompound::ddp_call`]), FILE_SYNC (no COMMIT); READ data land in a write chunk
//!   of fresh pages located by [`nfs_proto::nfs4::locate_read_data`].
//! * A delegation the server grants at OPEN is held; when the server recalls it (CB_RECALL
//!   on our connection) [`Nfs4Client::hold`] returns it with DELEGRETURN, and
//!   [`Nfs4Client::finish`] returns what is still held before DESTROY_SESSION and
//!   DESTROY_CLIENTID.
//! * `NFS4ERR_GRACE` and `NFS4ERR_DELAY` answers are sent again every second for up to
//!   [`Nfs4Opts::give_up`] (a server just started is in its grace period).
//!
//! Not done: reconnection. A new connection would need BIND_CONN_TO_SESSION to carry the
//! back channel again; the client runs without it and a lost connection ends the command.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use krpc_rdma::transport::{Counters, DdpReply, ReplySpec, TransportConfig};
use krpc_rdma::wire::MIN_HEADER_LEN;
use mbuf::Chain;
use nfs_proto::nfs4::{
    compound_encoder, locate_read_data, Attrs4, CallbackSecParms4, ChannelAttrs4, ClientOwner4,
    Close4Args, Component4, Compound4Args, Compound4Res, CreateSession4Args, Createhow4,
    Delegreturn4Args, DestroyClientid4Args, DestroySession4Args, ExchangeId4Args, Getattr4Args,
    Lookup4Args, NfsArgop4, NfsFh4, NfsFtype4, NfsResop4, Nfsstat4, Opaque4, Open4Args, OpenClaim4,
    OpenDelegation4, OpenOwner4, Openflag4, Putfh4Args, Read4Args, Readdir4Args,
    ReclaimComplete4Args, Res4, Sequence4Args, Sequence4Res, Sessionid4, StableHow4, StateProtect4,
    Stateid4, Utf8Str, Verifier4, Write4Head, WriteDdpCompound, Xdr,
    CREATE_SESSION4_FLAG_CONN_BACK_CHAN, NFS4_MINOR_VERSION, OPEN4_SHARE_ACCESS_READ,
    OPEN4_SHARE_ACCESS_WRITE, OPEN4_SHARE_DENY_NONE, OP_SEQUENCE, SEQ4_STATUS_CB_PATH_DOWN,
    SEQ4_STATUS_CB_PATH_DOWN_SESSION,
};
use onc_rpc::rpc::ReplyHeader;
use onc_rpc::xdr::{Decoder, Encoder, XdrError};
use onc_rpc_tcp::mount;

use crate::conn::{secs, DEFAULT_GIVE_UP};
use crate::dialer::Dialer;
use crate::error::RunError;
use crate::filedata::{self, Progress};
use crate::nfs4cb::CbService;
use crate::session::Session;

/// The callback program number the client names in CREATE_SESSION (Linux's client uses the
/// same, `NFS4_CALLBACK`).
pub const CB_PROGRAM: u32 = 0x4000_0000;
/// Back-channel slots asked for (the server may grant fewer).
pub const BACK_SLOTS: u32 = 2;
/// Most bytes per READ or WRITE.
pub const MAX_IO: u32 = 1 << 20;
/// Most calls in flight for `put` / `get` (fore-channel slots asked for).
pub const MAX_DEPTH: usize = 16;
/// Default calls in flight.
pub const DEFAULT_DEPTH: usize = 8;
/// Wait between sending again a call answered `NFS4ERR_GRACE` or `NFS4ERR_DELAY`.
pub const RETRY_DELAY: Duration = Duration::from_secs(1);
/// READDIR's `maxcount`: a reply chunk's worth of entries per call.
pub const READDIR_MAX: u32 = 32 * 1024;
/// Most entries `ls` lists.
pub const MAX_LS_ENTRIES: usize = 1 << 20;
/// Room for a compound's reply without bulk data (kept under the 4096-byte inline threshold
/// knfsd and we offer, so no reply chunk is registered).
const SMALL_REPLY: usize = 3000;
/// Room besides a READ's data for the RPC header and the results around it.
const REPLY_SLACK: usize = 512;
/// Room in a fore-channel request or response for everything but a READ's or WRITE's data
/// (RPC header, SEQUENCE, PUTFH, the operation's other fields), as Linux's client reserves.
const IO_OVERHEAD: u32 = 1024;
/// Bytes of a reply decoded as its head when only SEQUENCE's result is wanted.
const SEQ_HEAD_MAX: usize = 512;

/// The transport configuration of NFSv4.1 sessions: as NFSv3's (4096-byte inline sizes),
/// and [`BACK_SLOTS`] reverse-direction slots besides 62 forward calls (the 64 Receives of
/// the default resources).
pub fn nfs4_transport() -> TransportConfig {
    TransportConfig {
        max_requests: 62,
        max_reverse_requests: BACK_SLOTS,
        ..crate::nfs3::nfs_transport()
    }
}

/// How an NFSv4.1 client behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nfs4Opts {
    /// Calls in flight for `put` / `get` (1 ..= [`MAX_DEPTH`], and at most the fore-channel
    /// slots the server grants).
    pub depth: usize,
    /// Progress lines on stderr during long transfers.
    pub progress: bool,
    /// How long `NFS4ERR_GRACE` / `NFS4ERR_DELAY` answers are retried.
    pub give_up: Duration,
    /// The client owner id (`co_ownerid`); a default names the host and process.
    pub owner: Option<String>,
}

impl Default for Nfs4Opts {
    fn default() -> Self {
        Nfs4Opts {
            depth: DEFAULT_DEPTH,
            progress: false,
            give_up: DEFAULT_GIVE_UP,
            owner: None,
        }
    }
}

/// Why an NFSv4.1 operation failed.
#[derive(Debug)]
pub enum Nfs4Error {
    /// The transport or connection failed.
    Run(RunError),
    /// The server answered an error status.
    Status {
        /// The operation that failed (e.g. "OPEN").
        op: &'static str,
        /// What it was about.
        what: String,
        /// The status.
        status: Nfsstat4,
    },
    /// A malformed or unexpected reply, or a local problem.
    Other(String),
}

impl Nfs4Error {
    /// The process exit status: 3 for a lost connection, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Nfs4Error::Run(e) => e.exit_code(),
            _ => 1,
        }
    }
}

impl fmt::Display for Nfs4Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Nfs4Error::Run(e) => e.fmt(f),
            Nfs4Error::Status { op, what, status } => write!(f, "{op} {what}: {status}"),
            Nfs4Error::Other(m) => f.write_str(m),
        }
    }
}

impl From<RunError> for Nfs4Error {
    fn from(e: RunError) -> Self {
        Nfs4Error::Run(e)
    }
}

fn xdr(what: &str) -> impl Fn(XdrError) -> Nfs4Error + '_ {
    move |e| Nfs4Error::Other(format!("{what}: {e}"))
}

/// What `put` / `get` measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Transfer4 {
    /// File bytes moved.
    pub bytes: u64,
    /// READ or WRITE compounds.
    pub calls: u64,
    /// Seconds from OPEN to CLOSE.
    pub secs: f64,
    /// Whether the server granted a delegation at OPEN (`get`).
    pub delegation: bool,
}

/// An open file: its handle, the open stateid, and the delegation granted with it.
#[derive(Debug, Clone)]
pub struct Open4 {
    /// The file handle.
    pub fh: NfsFh4,
    /// The open stateid.
    pub stateid: Stateid4,
    /// The delegation granted at OPEN: its stateid and whether it is a write delegation.
    pub delegation: Option<(Stateid4, bool)>,
}

/// One directory entry from [`Nfs4Client::ls`].
#[derive(Debug, Clone)]
pub struct DirEntry4 {
    /// The name (bytes, as the server sent them).
    pub name: Vec<u8>,
    /// The attributes, when the server sent ones this client reads.
    pub attrs: Option<Attrs4>,
}

/// What [`Nfs4Client::hold`] saw.
#[derive(Debug, Clone, Copy)]
pub struct Held {
    /// The delegation granted at OPEN (`None`: none was granted, nothing to hold).
    pub delegation: Option<bool>,
    /// Seconds from OPEN to the server's CB_RECALL, if it recalled it.
    pub recalled_after: Option<f64>,
    /// Seconds from the CB_RECALL to DELEGRETURN's reply.
    pub returned_in: Option<f64>,
}

/// What the session's back channel carried.
#[derive(Debug, Clone, Copy, Default)]
pub struct CbStats {
    /// Back-channel slots the server agreed to (`ca_maxrequests`).
    pub slots: u32,
    /// Reverse calls received, answered, refused.
    pub calls: u64,
    /// Replies sent.
    pub replies: u64,
    /// Calls refused.
    pub refused: u64,
    /// Delegations recalled (CB_RECALL).
    pub recalls: u64,
    /// DELEGRETURNs sent.
    pub returned: u64,
}

/// A fore-channel slot: the sequence id its next request carries.
#[derive(Debug, Clone, Copy)]
struct Slot {
    seq: u32,
}

/// The slot of a compound in flight.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    slot: u32,
}

/// An NFSv4.1 client over one session (see the module documentation).
pub struct Nfs4Client<D: Dialer> {
    s: Session<D>,
    clientid: u64,
    sessionid: Sessionid4,
    slots: Vec<Slot>,
    free: Vec<u32>,
    inflight: HashMap<u32, InFlight>,
    cb: Arc<Mutex<CbService>>,
    cb_slots: u32,
    recalls: u64,
    returned: u64,
    /// The export's root (PUTROOTFH, then LOOKUP of the export path).
    root: NfsFh4,
    owner: Vec<u8>,
    depth: usize,
    progress: bool,
    give_up: Duration,
    /// Delegations held: (file handle, stateid).
    delegations: Vec<(NfsFh4, Stateid4)>,
    cb_path_down: bool,
    /// READ and WRITE sizes: the fore channel's largest response and request the server
    /// agreed to, less room for the rest of the compound, in whole pages, at most
    /// [`MAX_IO`] (knfsd's depend on its memory: 256 KiB in the project's 2 GiB VM).
    rsize: u32,
    wsize: u32,
}

impl<D: Dialer> Nfs4Client<D> {
    /// Connect through `dialer` ([`nfs4_transport`], no reconnection), create a client ID
    /// and a session with its back channel on this connection, and find `export` (a path
    /// from the server's root, e.g. `/export`).
    ///
    /// # Errors
    /// The connection failed; the server refused EXCHANGE_ID, CREATE_SESSION or the
    /// lookup of the export.
    pub fn connect(dialer: D, export: &str, o: &Nfs4Opts) -> Result<Nfs4Client<D>, Nfs4Error> {
        let mut s = Session::connect(dialer, nfs4_transport(), None)?;
        let cb = Arc::new(Mutex::new(CbService::new(
            CB_PROGRAM,
            Sessionid4::default(),
            BACK_SLOTS,
        )));
        let service = Arc::clone(&cb);
        s.serve_reverse(
            BACK_SLOTS,
            Box::new(move |msg| service.lock().ok()?.serve(msg)),
        )?;
        let owner = o.owner.clone().unwrap_or_else(|| {
            format!(
                "krpc-rdma-session {} pid {}",
                String::from_utf8_lossy(&mount::machine_name()),
                std::process::id()
            )
        });
        let mut c = Nfs4Client {
            s,
            clientid: 0,
            sessionid: Sessionid4::default(),
            slots: Vec::new(),
            free: Vec::new(),
            inflight: HashMap::new(),
            cb,
            cb_slots: 0,
            recalls: 0,
            returned: 0,
            root: NfsFh4::default(),
            owner: owner.clone().into_bytes(),
            depth: o.depth.clamp(1, MAX_DEPTH),
            progress: o.progress,
            give_up: o.give_up,
            delegations: Vec::new(),
            cb_path_down: false,
            rsize: MAX_IO,
            wsize: MAX_IO,
        };
        c.exchange_id(&owner)?;
        c.create_session()?;
        let rc = c.compound(
            "RECLAIM_COMPLETE",
            "",
            vec![NfsArgop4::ReclaimComplete(ReclaimComplete4Args {
                rca_one_fs: false,
            })],
        );
        match rc {
            Ok(_) => {}
            // A server that knows nothing to reclaim may say so; the session is still good.
            Err(Nfs4Error::Status {
                status: Nfsstat4::ERR_COMPLETE_ALREADY,
                ..
            }) => {}
            Err(e) => return Err(e),
        }
        c.root = c.lookup_from(None, export)?;
        Ok(c)
    }

    /// The underlying session.
    pub fn session(&self) -> &Session<D> {
        &self.s
    }

    /// The transport's counters.
    pub fn counters(&self) -> Counters {
        self.s.counters()
    }

    /// The client ID and session ID the server gave.
    pub fn ids(&self) -> (u64, Sessionid4) {
        (self.clientid, self.sessionid)
    }

    /// READ and WRITE sizes in use (from the session's fore-channel sizes).
    pub fn io_sizes(&self) -> (u32, u32) {
        (self.rsize, self.wsize)
    }

    /// Fore-channel slots in use (the server's `ca_maxrequests`, at most [`MAX_DEPTH`]).
    pub fn fore_slots(&self) -> usize {
        self.slots.len()
    }

    /// What the back channel carried so far.
    pub fn cb_stats(&self) -> CbStats {
        let r = self.s.reverse_stats();
        CbStats {
            slots: self.cb_slots,
            calls: r.calls,
            replies: r.replies,
            refused: r.refused,
            recalls: self.recalls,
            returned: self.returned,
        }
    }

    fn exchange_id(&mut self, owner: &str) -> Result<(), Nfs4Error> {
        let boot = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let args = ExchangeId4Args {
            eia_clientowner: ClientOwner4 {
                co_verifier: Verifier4(boot.to_be_bytes()),
                co_ownerid: Opaque4::new(owner.as_bytes()),
            },
            eia_flags: 0,
            eia_state_protect: StateProtect4::None,
            eia_client_impl_id: None,
        };
        let res = self.unsequenced("EXCHANGE_ID", vec![NfsArgop4::ExchangeId(args)])?;
        let Some(NfsResop4::ExchangeId(r)) = res.resarray.first() else {
            return Err(Nfs4Error::Other("EXCHANGE_ID: no result".into()));
        };
        let ok = r.ok().ok_or_else(|| Nfs4Error::Status {
            op: "EXCHANGE_ID",
            what: String::new(),
            status: r.status(),
        })?;
        self.clientid = ok.eir_clientid;
        self.slots = vec![Slot {
            seq: ok.eir_sequenceid,
        }];
        Ok(())
    }

    fn create_session(&mut self) -> Result<(), Nfs4Error> {
        let t = self.s.thresholds();
        // Reverse-direction messages are inline only (RFC 8167 section 5): a callback and
        // its reply must fit an inline message less the transport header.
        let bc_max = t.send.min(t.recv).saturating_sub(MIN_HEADER_LEN as u32);
        let io = MAX_IO + 8192;
        let args = CreateSession4Args {
            csa_clientid: self.clientid,
            csa_sequence: self.slots.first().map_or(0, |s| s.seq),
            csa_flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            csa_fore_chan_attrs: ChannelAttrs4 {
                ca_headerpadsize: 0,
                ca_maxrequestsize: io,
                ca_maxresponsesize: io,
                ca_maxresponsesize_cached: 2048,
                ca_maxoperations: 16,
                ca_maxrequests: MAX_DEPTH as u32,
                ca_rdma_ird: None,
            },
            csa_back_chan_attrs: ChannelAttrs4 {
                ca_headerpadsize: 0,
                ca_maxrequestsize: bc_max,
                ca_maxresponsesize: bc_max,
                ca_maxresponsesize_cached: 0,
                ca_maxoperations: 2,
                ca_maxrequests: BACK_SLOTS,
                ca_rdma_ird: None,
            },
            csa_cb_program: CB_PROGRAM,
            csa_sec_parms: vec![CallbackSecParms4::None],
        };
        let res = self.unsequenced("CREATE_SESSION", vec![NfsArgop4::CreateSession(args)])?;
        let Some(NfsResop4::CreateSession(r)) = res.resarray.first() else {
            return Err(Nfs4Error::Other("CREATE_SESSION: no result".into()));
        };
        let ok = r.ok().ok_or_else(|| Nfs4Error::Status {
            op: "CREATE_SESSION",
            what: String::new(),
            status: r.status(),
        })?;
        if ok.csr_flags & CREATE_SESSION4_FLAG_CONN_BACK_CHAN == 0 {
            self.s.dialer().note(format_args!(
                "CREATE_SESSION: the server did not make this connection the back channel"
            ));
        }
        self.sessionid = ok.csr_sessionid;
        let fore = (ok.csr_fore_chan_attrs.ca_maxrequests as usize).clamp(1, MAX_DEPTH);
        self.slots = vec![Slot { seq: 1 }; fore];
        self.free = (0..fore as u32).rev().collect();
        self.depth = self.depth.min(fore);
        self.rsize = io_size(ok.csr_fore_chan_attrs.ca_maxresponsesize);
        self.wsize = io_size(ok.csr_fore_chan_attrs.ca_maxrequestsize);
        let back = ok.csr_back_chan_attrs.ca_maxrequests.clamp(1, BACK_SLOTS);
        self.cb_slots = back;
        self.s.set_reverse_slots(back)?;
        if let Ok(mut cb) = self.cb.lock() {
            cb.set_session(self.sessionid, back);
        }
        Ok(())
    }

    /// A COMPOUND without SEQUENCE (EXCHANGE_ID, CREATE_SESSION, DESTROY_*), waited for.
    fn unsequenced(
        &mut self,
        op: &'static str,
        ops: Vec<NfsArgop4>,
    ) -> Result<Compound4Res, Nfs4Error> {
        let xid = self.s.next_xid();
        let call = encode_compound(xid, ops)?;
        let reply = self.s.call(xid, call, ReplySpec::inline(SMALL_REPLY))?;
        let res = decode_res(xid, &reply, op)?;
        match res.status {
            s if s.is_ok() => Ok(res),
            status => Err(Nfs4Error::Status {
                op,
                what: String::new(),
                status,
            }),
        }
    }

    /// Start COMPOUND `[SEQUENCE, ops…]` on a free fore-channel slot (waiting for one when
    /// all are in use); its XID.
    fn submit(&mut self, ops: Vec<NfsArgop4>, reply: ReplySpec) -> Result<u32, Nfs4Error> {
        let xid = self.s.next_xid();
        let (slot, seq) = self.take_slot()?;
        let mut all = Vec::with_capacity(ops.len() + 1);
        all.push(NfsArgop4::Sequence(self.sequence_args(slot, seq)));
        all.extend(ops);
        let call = match encode_compound(xid, all) {
            Ok(c) => c,
            Err(e) => {
                self.free.push(slot);
                return Err(e);
            }
        };
        self.send(xid, slot, call, reply)?;
        Ok(xid)
    }

    fn sequence_args(&self, slot: u32, seq: u32) -> Sequence4Args {
        Sequence4Args {
            sa_sessionid: self.sessionid,
            sa_sequenceid: seq,
            sa_slotid: slot,
            sa_highest_slotid: self.slots.len().saturating_sub(1) as u32,
            sa_cachethis: false,
        }
    }

    fn send(
        &mut self,
        xid: u32,
        slot: u32,
        call: Chain,
        reply: ReplySpec,
    ) -> Result<(), Nfs4Error> {
        if let Err(e) = self.s.submit(xid, call, reply) {
            self.free.push(slot);
            return Err(e.into());
        }
        self.inflight.insert(xid, InFlight { slot });
        Ok(())
    }

    /// A free fore-channel slot and its sequence id. Every slot in use: the caller keeps at
    /// most `depth` ≤ slots in flight, so this is a bug in the caller.
    fn take_slot(&mut self) -> Result<(u32, u32), Nfs4Error> {
        let slot = self
            .free
            .pop()
            .ok_or_else(|| Nfs4Error::Other("no free fore-channel slot".into()))?;
        let seq = self.slots.get(slot as usize).map_or(1, |s| s.seq);
        Ok((slot, seq))
    }

    /// The reply of compound `xid`, its slot given back (its sequence id advanced when the
    /// server's SEQUENCE succeeded).
    fn collect(&mut self, xid: u32) -> Result<Chain, Nfs4Error> {
        let got = self.s.wait(xid);
        let f = self.inflight.remove(&xid);
        let reply = got?;
        if let Some(f) = f {
            let seq = sequence_result(&reply);
            if let Some(Sequence4Res::Ok(ok)) = &seq {
                if let Some(s) = self.slots.get_mut(f.slot as usize) {
                    s.seq = s.seq.wrapping_add(1);
                }
                let down = SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION;
                if ok.sr_status_flags & down != 0 && !self.cb_path_down {
                    self.cb_path_down = true;
                    self.s.dialer().note(format_args!(
                        "the server says the back channel is down (SEQUENCE status flags \
                         {:#x})",
                        ok.sr_status_flags
                    ));
                }
            }
            self.free.push(f.slot);
        }
        Ok(reply)
    }

    /// `[SEQUENCE, ops…]` sent and its results decoded (SEQUENCE's first), retried while the
    /// server answers `NFS4ERR_GRACE` / `NFS4ERR_DELAY`; a failed status is an error naming
    /// `op` and `what`.
    fn compound(
        &mut self,
        op: &'static str,
        what: &str,
        ops: Vec<NfsArgop4>,
    ) -> Result<Compound4Res, Nfs4Error> {
        self.compound_sized(op, what, ops, SMALL_REPLY)
    }

    /// As [`compound`](Self::compound), with room for a reply of `max_reply` bytes (beyond
    /// the inline threshold the transport offers a reply chunk).
    fn compound_sized(
        &mut self,
        op: &'static str,
        what: &str,
        ops: Vec<NfsArgop4>,
        max_reply: usize,
    ) -> Result<Compound4Res, Nfs4Error> {
        let start = Instant::now();
        let mut noted = false;
        loop {
            let xid = self.submit(ops.clone(), ReplySpec::inline(max_reply))?;
            let reply = self.collect(xid)?;
            let res = decode_res(xid, &reply, op)?;
            let status = res.status;
            if status.is_ok() {
                return Ok(res);
            }
            let retry = status == Nfsstat4::ERR_GRACE || status == Nfsstat4::ERR_DELAY;
            let waited = start.elapsed();
            if !retry || waited + RETRY_DELAY > self.give_up {
                // The failing operation's name, when it is not the one named.
                let failed = res
                    .resarray
                    .last()
                    .map_or(op, |r| nfs_proto::nfs4::op_name(r.opnum()).unwrap_or(op));
                return Err(Nfs4Error::Status {
                    op: failed,
                    what: what.to_string(),
                    status,
                });
            }
            if !noted {
                noted = true;
                self.s.dialer().note(format_args!(
                    "{op} {what}: the server answered {status}; sending it again every {} s \
                     for up to {} s",
                    secs(RETRY_DELAY),
                    secs(self.give_up)
                ));
            }
            self.s.idle(RETRY_DELAY)?;
        }
    }

    /// PUTFH of `dir` (the export's root when `None`: then PUTROOTFH) and a LOOKUP per
    /// component of `path`.
    fn walk(&self, dir: Option<&NfsFh4>, path: &str) -> Vec<NfsArgop4> {
        let mut ops = vec![match dir {
            Some(fh) => NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
            None => NfsArgop4::Putrootfh,
        }];
        for c in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
            ops.push(NfsArgop4::Lookup(Lookup4Args {
                objname: Component4::new(c.as_bytes()),
            }));
        }
        ops
    }

    /// The handle of `path` from `dir` (the server's root when `None`).
    fn lookup_from(&mut self, dir: Option<&NfsFh4>, path: &str) -> Result<NfsFh4, Nfs4Error> {
        let mut ops = self.walk(dir, path);
        ops.push(NfsArgop4::Getfh);
        let res = self.compound("LOOKUP", path, ops)?;
        match res.resarray.last() {
            Some(NfsResop4::Getfh(r)) => r
                .ok()
                .map(|ok| ok.object.clone())
                .ok_or_else(|| Nfs4Error::Other(format!("GETFH {path}: {}", r.status()))),
            _ => Err(Nfs4Error::Other(format!("LOOKUP {path}: no GETFH result"))),
        }
    }

    /// The attributes of `path` (relative to the export).
    ///
    /// # Errors
    /// NFS errors, transport errors.
    pub fn stat(&mut self, path: &str) -> Result<Attrs4, Nfs4Error> {
        let root = self.root.clone();
        let mut ops = self.walk(Some(&root), path);
        ops.push(NfsArgop4::Getattr(Getattr4Args {
            attr_request: Attrs4::request(),
        }));
        let res = self.compound("GETATTR", path, ops)?;
        match res.resarray.last() {
            Some(NfsResop4::Getattr(r)) => match r.ok() {
                Some(ok) => Attrs4::from_fattr4(&ok.obj_attributes).map_err(xdr("GETATTR")),
                None => Err(Nfs4Error::Other(format!("GETATTR {path}: {}", r.status()))),
            },
            _ => Err(Nfs4Error::Other(format!("GETATTR {path}: no result"))),
        }
    }

    /// The entries of directory `path` (relative to the export; "" or "/" is its root) with
    /// their attributes, sorted by name: READDIR from cookie 0 until `eof`, each reply up to
    /// [`READDIR_MAX`] bytes (through a reply chunk: it exceeds the inline threshold).
    ///
    /// # Errors
    /// NFS errors, transport errors, a server that returns no entry and no `eof`, or more
    /// than [`MAX_LS_ENTRIES`].
    pub fn ls(&mut self, path: &str) -> Result<Vec<DirEntry4>, Nfs4Error> {
        let root = self.root.clone();
        let dir = if path.split('/').all(|c| c.is_empty() || c == ".") {
            root
        } else {
            self.lookup_from(Some(&root), path)?
        };
        let mut out = Vec::new();
        let mut cookie = 0u64;
        let mut cookieverf = Verifier4::default();
        loop {
            let ops = vec![
                NfsArgop4::Putfh(Putfh4Args {
                    object: dir.clone(),
                }),
                NfsArgop4::Readdir(Readdir4Args {
                    cookie,
                    cookieverf,
                    dircount: READDIR_MAX / 4,
                    maxcount: READDIR_MAX,
                    attr_request: Attrs4::request(),
                }),
            ];
            let res = self.compound_sized("READDIR", path, ops, READDIR_MAX as usize + 1024)?;
            let Some(NfsResop4::Readdir(Res4::Ok(ok))) = res.resarray.into_iter().last() else {
                return Err(Nfs4Error::Other(format!("READDIR {path}: no result")));
            };
            let progressed = !ok.entries.is_empty();
            for e in ok.entries {
                cookie = e.cookie;
                out.push(DirEntry4 {
                    name: e.name.0,
                    attrs: Attrs4::from_fattr4(&e.attrs).ok(),
                });
            }
            if out.len() > MAX_LS_ENTRIES {
                return Err(Nfs4Error::Other(format!(
                    "READDIR {path}: more than {MAX_LS_ENTRIES} entries"
                )));
            }
            cookieverf = ok.cookieverf;
            if ok.eof {
                break;
            }
            if !progressed {
                return Err(Nfs4Error::Other(format!(
                    "READDIR {path}: no entries and no end of the directory"
                )));
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// OPEN `path` (relative to the export) for `access` (`OPEN4_SHARE_ACCESS_*`), creating
    /// it with `create` as its mode and size 0 when given; the file's handle, open stateid
    /// and any delegation granted.
    ///
    /// # Errors
    /// NFS errors, transport errors.
    pub fn open(
        &mut self,
        path: &str,
        access: u32,
        create: Option<u32>,
    ) -> Result<Open4, Nfs4Error> {
        let (dir, name) = match path.trim_end_matches('/').rsplit_once('/') {
            Some((d, n)) => (d, n),
            None => ("", path),
        };
        if name.is_empty() {
            return Err(Nfs4Error::Other(format!("OPEN {path}: no file name")));
        }
        let openhow = match create {
            Some(mode) => {
                let attrs = Attrs4 {
                    mode: Some(mode),
                    size: Some(0),
                    ..Attrs4::default()
                };
                Openflag4::Create(Createhow4::Unchecked(
                    attrs.to_fattr4().map_err(xdr("OPEN attributes"))?,
                ))
            }
            None => Openflag4::NoCreate,
        };
        let root = self.root.clone();
        let mut ops = self.walk(Some(&root), dir);
        ops.push(NfsArgop4::Open(Open4Args {
            seqid: 0,
            share_access: access,
            share_deny: OPEN4_SHARE_DENY_NONE,
            owner: OpenOwner4 {
                clientid: self.clientid,
                owner: Opaque4::new(&self.owner),
            },
            openhow,
            claim: OpenClaim4::Null(Component4::new(name.as_bytes())),
        }));
        ops.push(NfsArgop4::Getfh);
        let res = self.compound("OPEN", path, ops)?;
        let mut open = None;
        let mut fh = None;
        for r in &res.resarray {
            match r {
                NfsResop4::Open(r) => open = r.ok().cloned(),
                NfsResop4::Getfh(r) => fh = r.ok().map(|ok| ok.object.clone()),
                _ => {}
            }
        }
        let (Some(ok), Some(fh)) = (open, fh) else {
            return Err(Nfs4Error::Other(format!(
                "OPEN {path}: no OPEN or GETFH result"
            )));
        };
        let delegation = match ok.delegation {
            OpenDelegation4::Read(d) => Some((d.stateid, false)),
            OpenDelegation4::Write(d) => Some((d.stateid, true)),
            OpenDelegation4::None | OpenDelegation4::NoneExt(_) => None,
        };
        if let Some((st, _)) = delegation {
            self.delegations.push((fh.clone(), st));
        }
        Ok(Open4 {
            fh,
            stateid: ok.stateid,
            delegation,
        })
    }

    /// CLOSE an open file.
    ///
    /// # Errors
    /// NFS errors, transport errors.
    pub fn close(&mut self, o: &Open4) -> Result<(), Nfs4Error> {
        self.compound(
            "CLOSE",
            "",
            vec![
                NfsArgop4::Putfh(Putfh4Args {
                    object: o.fh.clone(),
                }),
                NfsArgop4::Close(Close4Args {
                    seqid: 0,
                    open_stateid: o.stateid,
                }),
            ],
        )
        .map(|_| ())
    }

    /// Return the delegation `stateid` on `fh` (DELEGRETURN).
    fn delegreturn(&mut self, fh: &NfsFh4, stateid: Stateid4) -> Result<(), Nfs4Error> {
        self.delegations.retain(|(_, s)| s.other != stateid.other);
        self.compound(
            "DELEGRETURN",
            "",
            vec![
                NfsArgop4::Putfh(Putfh4Args { object: fh.clone() }),
                NfsArgop4::Delegreturn(Delegreturn4Args {
                    deleg_stateid: stateid,
                }),
            ],
        )?;
        self.returned += 1;
        Ok(())
    }

    /// Return every delegation the server recalled (CB_RECALL) since the last look; how
    /// many.
    ///
    /// # Errors
    /// DELEGRETURN failed.
    pub fn return_recalled(&mut self) -> Result<u32, Nfs4Error> {
        let mut n = 0;
        loop {
            let next = self.cb.lock().ok().and_then(|mut cb| cb.take_recall());
            let Some(r) = next else {
                return Ok(n);
            };
            self.recalls += 1;
            self.delegreturn(&r.fh, r.stateid)?;
            n += 1;
        }
    }

    /// OPEN `path` for reading and hold it (and the delegation the server grants) for up
    /// to `limit`, answering callbacks meanwhile; when the server recalls the delegation,
    /// return it (DELEGRETURN), CLOSE, and stop. `ready` is called once the file is open.
    ///
    /// # Errors
    /// NFS errors, transport errors.
    pub fn hold(
        &mut self,
        path: &str,
        limit: Duration,
        ready: &mut dyn FnMut(&Open4),
    ) -> Result<Held, Nfs4Error> {
        let o = self.open(path, OPEN4_SHARE_ACCESS_READ, None)?;
        let opened = Instant::now();
        ready(&o);
        let mut held = Held {
            delegation: o.delegation.map(|(_, w)| w),
            recalled_after: None,
            returned_in: None,
        };
        if o.delegation.is_some() {
            while opened.elapsed() < limit {
                self.s.idle(Duration::from_millis(50))?;
                let recall = self.cb.lock().ok().and_then(|mut cb| cb.take_recall());
                if let Some(r) = recall {
                    let at = Instant::now();
                    held.recalled_after = Some(at.saturating_duration_since(opened).as_secs_f64());
                    self.recalls += 1;
                    self.delegreturn(&r.fh, r.stateid)?;
                    held.returned_in = Some(at.elapsed().as_secs_f64());
                    break;
                }
            }
        }
        self.close(&o)?;
        Ok(held)
    }

    /// Copy local file `local` to `remote` (created or truncated, mode 0644): FILE_SYNC
    /// WRITEs, their data as read chunks.
    ///
    /// # Errors
    /// Local I/O errors, NFS errors, a short WRITE, transport errors.
    pub fn put(&mut self, local: &Path, remote: &str) -> Result<Transfer4, Nfs4Error> {
        let what = local.display().to_string();
        let f = File::open(local).map_err(|e| Nfs4Error::Other(format!("{what}: {e}")))?;
        let size = f
            .metadata()
            .map_err(|e| Nfs4Error::Other(format!("{what}: {e}")))?
            .len();
        let start = Instant::now();
        let o = self.open(remote, OPEN4_SHARE_ACCESS_WRITE, Some(0o644))?;
        let mut t = Transfer4 {
            delegation: o.delegation.is_some(),
            ..Transfer4::default()
        };
        let mut inflight: VecDeque<(u32, u64, u32)> = VecDeque::new();
        let mut off = 0u64;
        let mut progress = Progress::new(self.progress, "put", size);
        while off < size || !inflight.is_empty() {
            if off < size && inflight.len() < self.depth {
                let n = (size - off).min(u64::from(self.wsize)) as usize;
                let pages = filedata::file_pages(self.s.dialer(), &f, n, &what)
                    .map_err(Nfs4Error::Other)?;
                let xid = self.submit_write(&o, off, pages)?;
                inflight.push_back((xid, off, n as u32));
                off += n as u64;
                t.calls += 1;
                continue;
            }
            let Some((xid, woff, n)) = inflight.pop_front() else {
                break;
            };
            let reply = self.collect(xid)?;
            let res = decode_res(xid, &reply, "WRITE")?;
            let written = match res.resarray.last() {
                Some(NfsResop4::Write(r)) => match r.ok() {
                    Some(ok) => ok.count,
                    None => {
                        return Err(Nfs4Error::Status {
                            op: "WRITE",
                            what: format!("{remote} at {woff}"),
                            status: r.status(),
                        })
                    }
                },
                _ => {
                    return Err(Nfs4Error::Status {
                        op: "WRITE",
                        what: format!("{remote} at {woff}"),
                        status: res.status,
                    })
                }
            };
            if written != n {
                return Err(Nfs4Error::Other(format!(
                    "WRITE {remote} at {woff}: server wrote {written} of {n} bytes"
                )));
            }
            t.bytes += u64::from(n);
            progress.tick(t.bytes, start);
        }
        self.close(&o)?;
        t.secs = start.elapsed().as_secs_f64();
        Ok(t)
    }

    /// Send `[SEQUENCE, PUTFH, WRITE]` with `data` (page mbufs) at `off`, FILE_SYNC, the
    /// data behind a DDP marker (the transport makes them a read chunk).
    fn submit_write(&mut self, o: &Open4, off: u64, data: Chain) -> Result<u32, Nfs4Error> {
        let xid = self.s.next_xid();
        let (slot, seq) = self.take_slot()?;
        let w = WriteDdpCompound {
            tag: Utf8Str::default(),
            minorversion: NFS4_MINOR_VERSION,
            before: vec![
                NfsArgop4::Sequence(self.sequence_args(slot, seq)),
                NfsArgop4::Putfh(Putfh4Args {
                    object: o.fh.clone(),
                }),
            ],
            write: Write4Head {
                stateid: o.stateid,
                offset: off,
                stable: StableHow4::FileSync,
            },
            after: Vec::new(),
        };
        let call = match w.ddp_call(compound_encoder(xid, mount::auth_sys_root()), data) {
            Ok(c) => c,
            Err(e) => {
                self.free.push(slot);
                return Err(Nfs4Error::Other(format!("building the WRITE: {e}")));
            }
        };
        self.send(xid, slot, call, ReplySpec::inline(SMALL_REPLY))?;
        Ok(xid)
    }

    /// Copy `remote` to local file `local` (created or truncated): READs whose data land in
    /// write chunks.
    ///
    /// # Errors
    /// NFS errors, local I/O errors, transport errors, a READ that returns nothing before
    /// the size GETATTR gave.
    pub fn get(&mut self, remote: &str, local: &Path) -> Result<Transfer4, Nfs4Error> {
        let start = Instant::now();
        let attrs = self.stat(remote)?;
        if attrs.type_ != Some(NfsFtype4::Reg) {
            return Err(Nfs4Error::Other(format!(
                "{remote}: not a regular file ({:?})",
                attrs.type_
            )));
        }
        let size = attrs.size.unwrap_or(0);
        let what = local.display().to_string();
        let mut f = File::create(local).map_err(|e| Nfs4Error::Other(format!("{what}: {e}")))?;
        let o = self.open(remote, OPEN4_SHARE_ACCESS_READ, None)?;
        let mut t = Transfer4 {
            delegation: o.delegation.is_some(),
            ..Transfer4::default()
        };
        let mut progress = Progress::new(self.progress, "get", size);
        let mut inflight: VecDeque<(u32, u64, u32)> = VecDeque::new();
        let mut off = 0u64;
        while off < size || !inflight.is_empty() {
            if off < size && inflight.len() < self.depth {
                let n = (size - off).min(u64::from(self.rsize)) as u32;
                let xid = self.submit_read(&o, off, n)?;
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
                let reply = self.collect(xid)?;
                let (got, eof) = self.read_reply(xid, &reply, remote, at, &mut f)?;
                at += got;
                if at >= end || eof {
                    break;
                }
                if got == 0 {
                    return Err(Nfs4Error::Other(format!(
                        "READ {remote} at {at}: no data and no EOF before the size GETATTR gave"
                    )));
                }
                xid = self.submit_read(&o, at, (end - at) as u32)?;
                t.calls += 1;
            }
            t.bytes += at - roff;
            progress.tick(t.bytes, start);
        }
        f.flush()
            .map_err(|e| Nfs4Error::Other(format!("writing {what}: {e}")))?;
        self.close(&o)?;
        t.secs = start.elapsed().as_secs_f64();
        Ok(t)
    }

    /// Send `[SEQUENCE, PUTFH, READ]` of `n` bytes at `off`, its data to a write chunk of
    /// fresh pages.
    fn submit_read(&mut self, o: &Open4, off: u64, n: u32) -> Result<u32, Nfs4Error> {
        let pages = Chain::alloc_pages(self.s.pages(), n as usize)
            .map_err(|e| Nfs4Error::Other(format!("page allocation: {e}")))?;
        let spec = ReplySpec {
            max_reply: n as usize + REPLY_SLACK,
            ddp: Some(DdpReply {
                pages,
                locate: locate_read_data,
            }),
        };
        self.submit(
            vec![
                NfsArgop4::Putfh(Putfh4Args {
                    object: o.fh.clone(),
                }),
                NfsArgop4::Read(Read4Args {
                    stateid: o.stateid,
                    offset: off,
                    count: n,
                }),
            ],
            spec,
        )
    }

    /// Check one READ reply and write its data at `at` in `f`: (bytes, eof).
    fn read_reply(
        &self,
        xid: u32,
        reply: &Chain,
        remote: &str,
        at: u64,
        f: &mut File,
    ) -> Result<(u64, bool), Nfs4Error> {
        let mut head = vec![0u8; reply.len().min(nfs_proto::nfs4::NFS4_LOCATE_PREFIX_MAX)];
        reply
            .copydata(0, &mut head)
            .map_err(|e| Nfs4Error::Other(format!("READ reply: {e}")))?;
        let mut d = Decoder::new(&head);
        let h = ReplyHeader::decode(&mut d).map_err(xdr("RPC reply header"))?;
        if h.xid() != xid || !h.is_success() {
            return Err(Nfs4Error::Other(format!(
                "READ {remote}: unexpected reply {h:?} to call {xid:#x}"
            )));
        }
        let rh = Compound4Res::decode_read_head(&mut d).map_err(xdr("READ"))?;
        let Some(rh) = rh else {
            let st = Compound4Res::decode(&mut Decoder::new(&head[..]))
                .map_or(Nfsstat4::ERR_SERVERFAULT, |r| r.status);
            return Err(Nfs4Error::Status {
                op: "READ",
                what: format!("{remote} at {at}"),
                status: st,
            });
        };
        if !rh.read.status.is_ok() {
            return Err(Nfs4Error::Status {
                op: "READ",
                what: format!("{remote} at {at}"),
                status: rh.read.status,
            });
        }
        let data_at = d.pos();
        let len = rh.read.data_len as usize;
        if data_at + len > reply.len() {
            return Err(Nfs4Error::Other(format!(
                "READ {remote} at {at}: {len} data bytes announced, {} in the reply",
                reply.len() - data_at
            )));
        }
        f.seek(SeekFrom::Start(at))
            .map_err(|e| Nfs4Error::Other(format!("seeking in {remote}'s copy: {e}")))?;
        filedata::data_to_file(
            self.s.dialer(),
            reply,
            data_at..data_at + len,
            f,
            &format!("{remote}'s copy"),
        )
        .map_err(Nfs4Error::Other)?;
        Ok((len as u64, rh.read.eof))
    }

    /// Return the delegations still held, then DESTROY_SESSION and DESTROY_CLIENTID: the
    /// server forgets the client at once instead of after its lease.
    ///
    /// # Errors
    /// The server refused one of them; transport errors.
    pub fn finish(mut self) -> Result<CbStats, Nfs4Error> {
        self.return_recalled()?;
        for (fh, st) in std::mem::take(&mut self.delegations) {
            self.delegreturn(&fh, st)?;
        }
        let stats = self.cb_stats();
        self.unsequenced(
            "DESTROY_SESSION",
            vec![NfsArgop4::DestroySession(DestroySession4Args {
                dsa_sessionid: self.sessionid,
            })],
        )?;
        self.unsequenced(
            "DESTROY_CLIENTID",
            vec![NfsArgop4::DestroyClientid(DestroyClientid4Args {
                dca_clientid: self.clientid,
            })],
        )?;
        Ok(stats)
    }
}

/// The READ or WRITE size a fore channel's largest response or request `max` allows: less
/// [`IO_OVERHEAD`], whole pages, 4 KiB ..= [`MAX_IO`].
fn io_size(max: u32) -> u32 {
    (max.saturating_sub(IO_OVERHEAD).min(MAX_IO) & !4095).max(4096)
}

/// A COMPOUND call (minor version 1, AUTH_SYS root) of `ops`, inline.
fn encode_compound(xid: u32, ops: Vec<NfsArgop4>) -> Result<Chain, Nfs4Error> {
    let mut e: Encoder = compound_encoder(xid, mount::auth_sys_root());
    Compound4Args {
        tag: Utf8Str::default(),
        minorversion: NFS4_MINOR_VERSION,
        argarray: ops,
    }
    .encode(&mut e);
    let b = e.finish().map_err(xdr("COMPOUND call"))?;
    Chain::from_bytes(&b).map_err(|e| Nfs4Error::Other(format!("call: {e}")))
}

/// The COMPOUND results of an accepted, successful reply to `xid`.
fn decode_res(xid: u32, reply: &Chain, op: &str) -> Result<Compound4Res, Nfs4Error> {
    let mut b = vec![0u8; reply.len()];
    reply
        .copydata(0, &mut b)
        .map_err(|e| Nfs4Error::Other(format!("{op} reply: {e}")))?;
    let mut d = Decoder::new(&b);
    let h = ReplyHeader::decode(&mut d).map_err(xdr("RPC reply header"))?;
    if h.xid() != xid {
        return Err(Nfs4Error::Other(format!(
            "reply XID {:#x} for call {xid:#x}",
            h.xid()
        )));
    }
    if !h.is_success() {
        return Err(Nfs4Error::Other(format!(
            "{op}: RPC call not accepted: {h:?}"
        )));
    }
    Compound4Res::decode(&mut d).map_err(xdr(op))
}

/// SEQUENCE's result in a reply whose first operation is SEQUENCE.
fn sequence_result(reply: &Chain) -> Option<Sequence4Res> {
    let mut b = vec![0u8; reply.len().min(SEQ_HEAD_MAX)];
    reply.copydata(0, &mut b).ok()?;
    let mut d = Decoder::new(&b);
    if !ReplyHeader::decode(&mut d).ok()?.is_success() {
        return None;
    }
    Nfsstat4::decode(&mut d).ok()?;
    Utf8Str::decode(&mut d).ok()?;
    if d.u32().ok()? == 0 || d.u32().ok()? != OP_SEQUENCE {
        return None;
    }
    Sequence4Res::decode(&mut d).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfs_proto::nfs4::{Sequence4ResOk, NFS4_PROGRAM, NFSPROC4_COMPOUND};
    use onc_rpc::rpc::CallHeader;

    /// An accepted, successful RPC reply of `xid` with `res` as its results.
    fn reply(xid: u32, res: &Compound4Res) -> Chain {
        let mut e = Encoder::new();
        for w in [xid, 1, 0, 0, 0, 0] {
            e.u32(w);
        }
        res.encode(&mut e);
        Chain::from_bytes(&e.finish().unwrap()).unwrap()
    }

    fn seq_ok() -> Sequence4ResOk {
        Sequence4ResOk {
            sr_sessionid: Sessionid4([7; 16]),
            sr_sequenceid: 3,
            sr_slotid: 1,
            sr_highest_slotid: 15,
            sr_target_highest_slotid: 15,
            sr_status_flags: SEQ4_STATUS_CB_PATH_DOWN,
        }
    }

    #[test]
    fn io_sizes_follow_the_fore_channel_in_whole_pages() {
        // knfsd in a 2 GiB VM: 256 KiB of payload plus a page.
        assert_eq!(io_size(262_144 + 4096), 262_144);
        assert_eq!(io_size(u32::MAX), MAX_IO);
        assert_eq!(io_size(100), 4096);
        assert_eq!(io_size(0), 4096);
    }

    #[test]
    fn a_compound_call_decodes_as_what_was_sent() {
        let ops = vec![
            NfsArgop4::Putrootfh,
            NfsArgop4::Lookup(Lookup4Args {
                objname: Component4::new(b"export"),
            }),
            NfsArgop4::Getfh,
        ];
        let call = encode_compound(0x1234, ops.clone()).unwrap();
        let b = call.to_vec().unwrap();
        let mut d = Decoder::new(&b);
        let h = CallHeader::decode(&mut d).unwrap();
        assert_eq!(
            (h.xid, h.prog, h.vers, h.proc_),
            (0x1234, NFS4_PROGRAM, 4, NFSPROC4_COMPOUND)
        );
        let args = Compound4Args::decode(&mut d).unwrap();
        assert_eq!(args.minorversion, 1);
        assert_eq!(args.argarray, ops);
    }

    #[test]
    fn sequence_results_are_read_from_the_head_of_a_reply() {
        let ok = Compound4Res {
            status: Nfsstat4::OK,
            tag: Utf8Str::default(),
            resarray: vec![
                NfsResop4::Sequence(Res4::Ok(seq_ok())),
                NfsResop4::Putrootfh(Nfsstat4::OK),
            ],
        };
        let r = reply(9, &ok);
        assert_eq!(sequence_result(&r), Some(Res4::Ok(seq_ok())));
        assert_eq!(decode_res(9, &r, "T").unwrap(), ok);
        // Another XID is an error naming both.
        let e = decode_res(10, &r, "T").unwrap_err().to_string();
        assert!(e.contains("0x9") && e.contains("0xa"), "{e}");
        // A failed SEQUENCE is read as such; a reply whose first result is not SEQUENCE
        // (EXCHANGE_ID's) or that is empty has none.
        let bad = Compound4Res {
            status: Nfsstat4::ERR_BADSESSION,
            tag: Utf8Str::default(),
            resarray: vec![NfsResop4::Sequence(Res4::Err(Nfsstat4::ERR_BADSESSION))],
        };
        assert_eq!(
            sequence_result(&reply(1, &bad)),
            Some(Res4::Err(Nfsstat4::ERR_BADSESSION))
        );
        let other = Compound4Res {
            status: Nfsstat4::OK,
            tag: Utf8Str::default(),
            resarray: vec![NfsResop4::Putrootfh(Nfsstat4::OK)],
        };
        assert_eq!(sequence_result(&reply(1, &other)), None);
        let empty = Compound4Res {
            status: Nfsstat4::OK,
            tag: Utf8Str::default(),
            resarray: vec![],
        };
        assert_eq!(sequence_result(&reply(1, &empty)), None);
        // Truncated and garbage replies: none, and an error, never a panic.
        let cut = Chain::from_bytes(&r.to_vec().unwrap()[..30]).unwrap();
        assert_eq!(sequence_result(&cut), None);
        assert!(decode_res(9, &cut, "T").is_err());
    }
}
