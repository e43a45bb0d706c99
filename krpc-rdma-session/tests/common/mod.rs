//! The host rig of the session and NFSv3 client tests: [`SoftDialer`], a [`Dialer`] over
//! krpc-rdma's software RC provider whose far end is [`NfsServer`], a minimal in-memory
//! NFSv3 server on the core's `Responder` (only the procedures the tests call, nfs-proto's
//! XDR). The server runs inside [`Dialer::wait`]: deterministic, one process, no threads.
//!
//! The server can misbehave on purpose ([`Hooks`]): drop a connection after a call was
//! handed up, restart (lose uncommitted data, new write verifier, every connection gone),
//! change its write verifier, answer `NFS3ERR_JUKEBOX` without executing, corrupt data; stay
//! unreachable for a while after it dropped its connections; and it logs every call it was
//! handed ([`Seen`]), so a test can check that a resent call kept its XID and got one reply.
//!
//! Time is virtual: the dialer's clock ([`Dialer::now`]) moves only when the client sleeps
//! ([`Dialer::sleep`]: a reconnection backoff, a JUKEBOX delay), so give-up times of minutes
//! are tested in microseconds and the tests assert the times the client chose, not how long
//! anything took.
#![allow(
    dead_code,
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krpc_rdma::provider::Resources;
use krpc_rdma::soft::{pair, FaultConfig, FaultInjector, SoftConfig, SoftQp};
use krpc_rdma::transport::{Responder, ResponderEvent, TransportConfig};
use krpc_rdma_session::nfs3::nfs_transport;
use krpc_rdma_session::{Dialer, RunError};
use mbuf::{Chain, HeapPageArena, PageProvider};
use nfs_proto::chain::{data_pages_from_bytes, ddp_data, ddp_reply};
use nfs_proto::nfs3::{
    CommitArgs, CommitResFail, CommitResOk, Cookieverf3, CreateArgs, CreateResFail, CreateResOk,
    Createhow3, Dirlistplus3, Entryplus3, Fattr3, FsinfoArgs, FsinfoResFail, FsinfoResOk, Ftype3,
    GetattrArgs, GetattrResOk, LookupArgs, LookupResFail, LookupResOk, Nfs3Res, NfsFh3, Nfsstat3,
    Nfstime3, ReadArgs, ReadHead, ReaddirplusArgs, ReaddirplusResFail, ReaddirplusResOk, Specdata3,
    WccData, WriteArgs, WriteResFail, WriteResOk, Writeverf3, NFSPROC3_COMMIT, NFSPROC3_CREATE,
    NFSPROC3_FSINFO, NFSPROC3_GETATTR, NFSPROC3_LOOKUP, NFSPROC3_NULL, NFSPROC3_READ,
    NFSPROC3_READDIRPLUS, NFSPROC3_WRITE, NFS_PROGRAM, NFS_V3,
};
use onc_rpc::rpc::{AcceptStat, Auth, CallHeader, ReplyHeader};
use onc_rpc::xdr::{Decoder, Encoder};

/// Base address of the server's arena (distinct from the client's).
pub const ARENA_B_BASE: u64 = 0x10_0000_0000;
/// Pages per arena (32 MiB): a few 1 MiB transfers in flight.
pub const ARENA_PAGES: usize = 8192;

/// What one connection's server side holds.
struct ServerConn {
    id: u32,
    resp: Responder,
    qp: SoftQp,
}

/// Connections to the in-process [`NfsServer`] over the software provider.
pub struct SoftDialer {
    pub client_arena: Arc<HeapPageArena>,
    pub server_arena: Arc<HeapPageArena>,
    pages: Arc<dyn PageProvider>,
    server_pages: Arc<dyn PageProvider>,
    pub server: NfsServer,
    conns: Vec<ServerConn>,
    /// Fault configurations of the client side of the next connections, in order; later
    /// connections have none.
    pub faults: VecDeque<FaultConfig>,
    /// Dials refused before one succeeds (the server is down).
    pub refuse: u32,
    /// Connections made.
    pub dials: u32,
    /// What [`Dialer::note`] was told.
    pub notes: RefCell<Vec<String>>,
    /// The virtual clock: time since `epoch`, moved by [`Dialer::sleep`] only.
    epoch: Instant,
    pub clock: Duration,
    /// Every sleep the client asked for.
    pub slept: Vec<Duration>,
    /// When (virtual) each dial was attempted, refused ones included.
    pub dial_times: Vec<Duration>,
    /// Dials are refused until this (virtual) time.
    pub down_until: Option<Duration>,
    /// After the server drops its connections (a disconnect or restart hook), it is
    /// unreachable for this long.
    pub down_after_loss: Duration,
    /// Reverse-direction slots of the next connections' responders (0: none, the
    /// responders' configuration as NFSv3's).
    pub reverse_slots: u32,
    /// Replies to the server's reverse-direction calls: (XID, the RPC reply's bytes).
    pub reverse_replies: Vec<(u32, Vec<u8>)>,
}

impl SoftDialer {
    pub fn new(server: NfsServer) -> SoftDialer {
        let client_arena = Arc::new(HeapPageArena::new(ARENA_PAGES).unwrap());
        let server_arena = Arc::new(HeapPageArena::with_base(ARENA_PAGES, ARENA_B_BASE).unwrap());
        SoftDialer {
            pages: client_arena.clone(),
            server_pages: server_arena.clone(),
            client_arena,
            server_arena,
            server,
            conns: Vec::new(),
            faults: VecDeque::new(),
            refuse: 0,
            dials: 0,
            notes: RefCell::new(Vec::new()),
            epoch: Instant::now(),
            clock: Duration::ZERO,
            slept: Vec::new(),
            dial_times: Vec::new(),
            down_until: None,
            down_after_loss: Duration::ZERO,
            reverse_slots: 0,
            reverse_replies: Vec::new(),
        }
    }

    /// Send `msg` (an RPC call) as a reverse-direction call on the newest connection.
    pub fn reverse_call(&mut self, msg: &[u8]) -> Result<(), String> {
        let c = self.conns.last_mut().ok_or("no connection")?;
        c.resp
            .reverse_call(
                &mut c.qp,
                Chain::from_bytes(msg).map_err(|e| e.to_string())?,
            )
            .map_err(|r| format!("reverse call refused: {}", r.error))
    }

    /// The sum of the client's sleeps.
    pub fn total_sleep(&self) -> Duration {
        self.slept.iter().sum()
    }

    /// The server drops its connections: unreachable for `down_after_loss` from now.
    fn went_down(&mut self) {
        if !self.down_after_loss.is_zero() {
            self.down_until = Some(self.clock + self.down_after_loss);
        }
    }

    /// Server connections still up.
    pub fn live_connections(&self) -> usize {
        self.conns.len()
    }

    /// One round of the server: every connection polled, every call handed up answered
    /// (or not, as the hooks say). Whether anything happened.
    pub fn serve(&mut self) -> bool {
        let mut progressed = false;
        let mut i = 0;
        while i < self.conns.len() {
            let mut calls = Vec::new();
            let mut lost = false;
            let c = &mut self.conns[i];
            let replies = &mut self.reverse_replies;
            let mut answered = false;
            c.resp.poll(&mut c.qp, &mut |e| match e {
                ResponderEvent::Call(inc) => calls.push(inc),
                ResponderEvent::ConnectionLost => lost = true,
                ResponderEvent::ReverseReply { xid, reply } => {
                    answered = true;
                    replies.push((xid, reply.to_vec().unwrap_or_default()));
                }
                ResponderEvent::Connected(_) | ResponderEvent::ReverseFailed { .. } => {}
            });
            progressed |= !calls.is_empty() || lost || answered;
            let id = c.id;
            let mut restart = false;
            for inc in calls {
                if restart {
                    // Crashed: the rest of the batch is never answered.
                    let c = &mut self.conns[i];
                    let _ = c.resp.drop_call(&mut c.qp, inc.ctx, &mut |_| {});
                    continue;
                }
                match self.server.handle(id, &inc.call, &self.server_pages) {
                    Action::Reply(reply) => {
                        let c = &mut self.conns[i];
                        // A refused reply (the connection just died) is the client's to
                        // resend; the log shows it was not answered.
                        if c.resp.reply(&mut c.qp, inc.ctx, reply).is_ok() {
                            self.server.answered(id, inc.xid);
                        }
                    }
                    Action::Disconnect => {
                        let c = &mut self.conns[i];
                        let _ = c.resp.drop_call(&mut c.qp, inc.ctx, &mut |_| {});
                        c.qp.disconnect();
                        self.went_down();
                    }
                    Action::Restart => {
                        let c = &mut self.conns[i];
                        let _ = c.resp.drop_call(&mut c.qp, inc.ctx, &mut |_| {});
                        restart = true;
                    }
                }
            }
            if restart {
                // Every connection goes with the server.
                for c in &mut self.conns {
                    c.qp.disconnect();
                }
                self.went_down();
            }
            if lost {
                let c = self.conns.remove(i);
                drop(c);
            } else {
                i += 1;
            }
        }
        progressed
    }
}

impl Dialer for SoftDialer {
    type Qp = FaultInjector<SoftQp>;

    fn peer(&self) -> &str {
        "soft-nfs"
    }

    fn pages(&self) -> &Arc<dyn PageProvider> {
        &self.pages
    }

    fn resources(&self) -> Resources {
        SoftConfig::default().resources()
    }

    fn dial(&mut self, private_data: &[u8]) -> Result<Self::Qp, RunError> {
        self.dial_times.push(self.clock);
        if self.down_until.is_some_and(|t| self.clock < t) {
            return Err(RunError::Failed("soft-nfs: connection refused".into()));
        }
        if self.refuse > 0 {
            self.refuse -= 1;
            return Err(RunError::Failed("soft-nfs: connection refused".into()));
        }
        let tcfg = match self.reverse_slots {
            0 => nfs_transport(),
            n => TransportConfig {
                max_requests: 64 - n,
                max_reverse_requests: n,
                ..nfs_transport()
            },
        };
        let mut resp = Responder::new(
            tcfg,
            SoftConfig::default().resources(),
            self.server_pages.clone(),
        )
        .map_err(|e| RunError::Failed(format!("responder: {e}")))?;
        resp.set_reverse_slots(self.reverse_slots)
            .map_err(|e| RunError::Failed(format!("reverse slots: {e}")))?;
        let ca = SoftConfig {
            private_data: heapless::Vec::from_slice(private_data).unwrap(),
            ..SoftConfig::default()
        };
        let cb = SoftConfig {
            private_data: heapless::Vec::from_slice(&resp.private_data()).unwrap(),
            ..SoftConfig::default()
        };
        let (qa, mut qb) = pair(ca, self.pages.clone(), cb, self.server_pages.clone())
            .map_err(|e| RunError::Failed(format!("soft pair: {e:?}")))?;
        // The server takes the connection (and posts its receives) before the client can
        // send, as a listener accepts before the client's connect completes.
        let mut resp = resp;
        resp.poll(&mut qb, &mut |e| {
            assert!(matches!(e, ResponderEvent::Connected(_)), "{e:?}")
        });
        let id = self.dials;
        self.dials += 1;
        self.conns.push(ServerConn { id, resp, qp: qb });
        Ok(FaultInjector::new(
            qa,
            self.faults.pop_front().unwrap_or_default(),
        ))
    }

    fn wait(&mut self, _qp: &mut Self::Qp, _timeout: Duration) {
        self.serve();
    }

    fn note(&self, line: fmt::Arguments<'_>) {
        self.notes.borrow_mut().push(line.to_string());
    }

    fn now(&self) -> Instant {
        self.epoch + self.clock
    }

    fn sleep(&mut self, d: Duration) {
        self.slept.push(d);
        self.clock += d;
    }
}

/// What the server does with a call.
pub enum Action {
    /// Send this reply.
    Reply(Chain),
    /// Break this connection instead of replying (the call was executed, its reply lost).
    Disconnect,
    /// Crash before executing: uncommitted data lost, a new write verifier, every
    /// connection gone.
    Restart,
}

/// Ways the server misbehaves; counts are 1-based.
#[derive(Debug, Default, Clone)]
pub struct Hooks {
    /// Break the connection instead of answering the nth call handed up (any procedure).
    pub disconnect_at_call: Option<u64>,
    /// Restart at the nth WRITE handed up, before executing it.
    pub restart_at_write: Option<u64>,
    /// At the nth WRITE: lose the uncommitted data and take a new write verifier (a restart
    /// the connection survived), then execute it.
    pub new_verf_at_write: Option<u64>,
    /// Flip one byte of every READ's data.
    pub corrupt_read: bool,
    /// Flip one byte of every WRITE's data as it is stored.
    pub corrupt_write: bool,
    /// Answer `NFS3ERR_JUKEBOX`, without executing, to the next n calls of a procedure
    /// (procedure → n), on connections from `jukebox_from_conn` on.
    pub jukebox: BTreeMap<u32, u32>,
    pub jukebox_from_conn: u32,
}

/// One call the server was handed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// Connection number (0 for the first).
    pub conn: u32,
    pub xid: u32,
    pub proc_: u32,
    /// DDP regions it came with (WRITE data in a read chunk: 1).
    pub ddp_regions: usize,
    /// A reply was sent.
    pub answered: bool,
    /// It was answered `NFS3ERR_JUKEBOX` (not executed).
    pub jukeboxed: bool,
}

#[derive(Debug, Clone)]
enum Node {
    Dir(BTreeMap<Vec<u8>, u64>),
    File {
        /// What WRITEs made of it.
        data: Vec<u8>,
        /// What the last COMMIT made stable (survives a restart).
        stable: Vec<u8>,
    },
}

/// A minimal in-memory NFSv3 server: NULL, GETATTR, LOOKUP, CREATE, READ, WRITE,
/// READDIRPLUS, FSINFO, COMMIT. File ids are handles (8 bytes, big-endian); the root is 1.
pub struct NfsServer {
    nodes: BTreeMap<u64, Node>,
    next_id: u64,
    /// The write verifier.
    pub verf: [u8; 8],
    /// FSINFO's rtmax / wtmax.
    pub rtmax: u32,
    pub wtmax: u32,
    pub hooks: Hooks,
    /// Every call handed up, in order.
    pub log: Vec<Seen>,
    calls: u64,
    writes: u64,
}

pub const ROOT: u64 = 1;

pub fn fh(id: u64) -> NfsFh3 {
    NfsFh3 {
        data: id.to_be_bytes().to_vec(),
    }
}

fn id_of(fh: &NfsFh3) -> Option<u64> {
    Some(u64::from_be_bytes(fh.data.as_slice().try_into().ok()?))
}

impl Default for NfsServer {
    fn default() -> Self {
        Self::new()
    }
}

impl NfsServer {
    pub fn new() -> NfsServer {
        let mut nodes = BTreeMap::new();
        nodes.insert(ROOT, Node::Dir(BTreeMap::new()));
        NfsServer {
            nodes,
            next_id: ROOT + 1,
            verf: *b"verf0001",
            rtmax: 1 << 20,
            wtmax: 1 << 20,
            hooks: Hooks::default(),
            log: Vec::new(),
            calls: 0,
            writes: 0,
        }
    }

    /// Make `name` in directory `dir` (a file with `data`, committed, or a directory).
    pub fn add(&mut self, dir: u64, name: &str, data: Option<&[u8]>) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let node = match data {
            Some(d) => Node::File {
                data: d.to_vec(),
                stable: d.to_vec(),
            },
            None => Node::Dir(BTreeMap::new()),
        };
        self.nodes.insert(id, node);
        match self.nodes.get_mut(&dir) {
            Some(Node::Dir(e)) => {
                e.insert(name.as_bytes().to_vec(), id);
            }
            _ => panic!("{dir} is not a directory"),
        }
        id
    }

    /// The handle of `path` from the root.
    pub fn resolve(&self, path: &str) -> Option<u64> {
        let mut id = ROOT;
        for c in path.split('/').filter(|c| !c.is_empty()) {
            match self.nodes.get(&id)? {
                Node::Dir(e) => id = *e.get(c.as_bytes())?,
                Node::File { .. } => return None,
            }
        }
        Some(id)
    }

    /// (data, stable data) of the file at `path`.
    pub fn file(&self, path: &str) -> Option<(&[u8], &[u8])> {
        match self.nodes.get(&self.resolve(path)?)? {
            Node::File { data, stable } => Some((data, stable)),
            Node::Dir(_) => None,
        }
    }

    /// The calls handed up with `xid`.
    pub fn seen(&self, xid: u32) -> Vec<&Seen> {
        self.log.iter().filter(|s| s.xid == xid).collect()
    }

    fn answered(&mut self, conn: u32, xid: u32) {
        if let Some(s) = self
            .log
            .iter_mut()
            .rev()
            .find(|s| s.conn == conn && s.xid == xid)
        {
            s.answered = true;
        }
    }

    /// Lose every uncommitted byte and take a new write verifier.
    fn lose_unstable(&mut self) {
        for n in self.nodes.values_mut() {
            if let Node::File { data, stable } = n {
                *data = stable.clone();
            }
        }
        let v = u64::from_be_bytes(self.verf).wrapping_add(1);
        self.verf = v.to_be_bytes();
    }

    fn attrs(&self, id: u64) -> Option<Fattr3> {
        let t = Nfstime3 {
            seconds: 1_700_000_000,
            nseconds: 0,
        };
        let (type_, mode, nlink, size) = match self.nodes.get(&id)? {
            Node::Dir(e) => (Ftype3::Dir, 0o755, 2, 4096 + 64 * e.len() as u64),
            Node::File { data, .. } => (Ftype3::Reg, 0o644, 1, data.len() as u64),
        };
        Some(Fattr3 {
            type_,
            mode,
            nlink,
            uid: 0,
            gid: 0,
            size,
            used: size,
            rdev: Specdata3 {
                specdata1: 0,
                specdata2: 0,
            },
            fsid: 0x50f7,
            fileid: id,
            atime: t,
            mtime: t,
            ctime: t,
        })
    }

    fn wcc(&self, id: u64) -> WccData {
        WccData {
            before: None,
            after: self.attrs(id),
        }
    }

    /// Answer one call (the whole RPC message as the responder handed it up).
    pub fn handle(&mut self, conn: u32, call: &Chain, pages: &Arc<dyn PageProvider>) -> Action {
        let bytes = call.to_vec().unwrap();
        let mut d = Decoder::new(&bytes);
        let h = CallHeader::decode(&mut d).unwrap();
        assert_eq!((h.prog, h.vers), (NFS_PROGRAM, NFS_V3), "not an NFSv3 call");
        let ddp_regions = ddp_data(call).unwrap().len();
        self.calls += 1;
        self.log.push(Seen {
            conn,
            xid: h.xid,
            proc_: h.proc_,
            ddp_regions,
            answered: false,
            jukeboxed: false,
        });
        if conn >= self.hooks.jukebox_from_conn {
            if let Some(n) = self.hooks.jukebox.get_mut(&h.proc_).filter(|n| **n > 0) {
                *n -= 1;
                if let Some(s) = self.log.last_mut() {
                    s.jukeboxed = true;
                }
                return Action::Reply(jukebox(h.xid, h.proc_));
            }
        }
        if h.proc_ == NFSPROC3_WRITE {
            self.writes += 1;
            if self.hooks.restart_at_write == Some(self.writes) {
                self.lose_unstable();
                return Action::Restart;
            }
            if self.hooks.new_verf_at_write == Some(self.writes) {
                self.lose_unstable();
            }
        }
        let reply = self.execute(h.xid, h.proc_, &mut d, pages);
        if self.hooks.disconnect_at_call == Some(self.calls) {
            return Action::Disconnect;
        }
        Action::Reply(reply)
    }

    fn execute(
        &mut self,
        xid: u32,
        proc_: u32,
        d: &mut Decoder<'_>,
        pages: &Arc<dyn PageProvider>,
    ) -> Chain {
        let mut e = Encoder::new();
        ReplyHeader::success(xid).encode(&mut e);
        match proc_ {
            NFSPROC3_NULL => {}
            NFSPROC3_GETATTR => {
                let a = GetattrArgs::decode(d).unwrap();
                let res = match id_of(&a.object).and_then(|id| self.attrs(id)) {
                    Some(obj_attributes) => Nfs3Res::Ok(GetattrResOk { obj_attributes }),
                    None => Nfs3Res::Fail {
                        status: Nfsstat3::ERR_STALE,
                        resfail: (),
                    },
                };
                res.encode(&mut e);
            }
            NFSPROC3_LOOKUP => {
                let a = LookupArgs::decode(d).unwrap();
                let dir = id_of(&a.what.dir).unwrap();
                let found = match self.nodes.get(&dir) {
                    Some(Node::Dir(entries)) => entries.get(&a.what.name.0).copied(),
                    _ => None,
                };
                let res = match found {
                    Some(id) => Nfs3Res::Ok(LookupResOk {
                        object: fh(id),
                        obj_attributes: self.attrs(id),
                        dir_attributes: self.attrs(dir),
                    }),
                    None => Nfs3Res::Fail {
                        status: Nfsstat3::ERR_NOENT,
                        resfail: LookupResFail {
                            dir_attributes: self.attrs(dir),
                        },
                    },
                };
                res.encode(&mut e);
            }
            NFSPROC3_CREATE => {
                let a = CreateArgs::decode(d).unwrap();
                assert!(matches!(a.how, Createhow3::Unchecked(_)));
                let dir = id_of(&a.where_.dir).unwrap();
                let name = String::from_utf8(a.where_.name.0).unwrap();
                let id = match self.resolve_in(dir, &name) {
                    Some(id) => {
                        self.nodes.insert(
                            id,
                            Node::File {
                                data: Vec::new(),
                                stable: Vec::new(),
                            },
                        );
                        id
                    }
                    None => self.add(dir, &name, Some(&[])),
                };
                let res: Nfs3Res<CreateResOk, CreateResFail> = Nfs3Res::Ok(CreateResOk {
                    obj: Some(fh(id)),
                    obj_attributes: self.attrs(id),
                    dir_wcc: self.wcc(dir),
                });
                res.encode(&mut e);
            }
            NFSPROC3_WRITE => {
                let a = WriteArgs::decode_with_max(d, 2 << 20).unwrap();
                let id = id_of(&a.file).unwrap();
                let mut data = a.data;
                if self.hooks.corrupt_write {
                    if let Some(b) = data.last_mut() {
                        *b ^= 0x5a;
                    }
                }
                let Some(Node::File { data: f, .. }) = self.nodes.get_mut(&id) else {
                    panic!("WRITE to {id}: not a file");
                };
                let off = a.offset as usize;
                if f.len() < off + data.len() {
                    f.resize(off + data.len(), 0);
                }
                f[off..off + data.len()].copy_from_slice(&data);
                let res: Nfs3Res<WriteResOk, WriteResFail> = Nfs3Res::Ok(WriteResOk {
                    file_wcc: self.wcc(id),
                    count: data.len() as u32,
                    committed: nfs_proto::nfs3::StableHow::Unstable,
                    verf: Writeverf3(self.verf),
                });
                res.encode(&mut e);
            }
            NFSPROC3_READ => {
                let a = ReadArgs::decode(d).unwrap();
                let id = id_of(&a.file).unwrap();
                let Some(Node::File { data, .. }) = self.nodes.get(&id) else {
                    panic!("READ of {id}: not a file");
                };
                let start = (a.offset as usize).min(data.len());
                let end = (start + a.count as usize).min(data.len());
                let mut bytes = data[start..end].to_vec();
                if self.hooks.corrupt_read {
                    let mid = bytes.len() / 2;
                    if let Some(b) = bytes.get_mut(mid) {
                        *b ^= 0x01;
                    }
                }
                ReadHead {
                    status: Nfsstat3::OK,
                    file_attributes: self.attrs(id),
                    count: bytes.len() as u32,
                    eof: end == data.len(),
                    data_len: bytes.len() as u32,
                }
                .encode(&mut e);
                let head = e.finish().unwrap();
                let pages = data_pages_from_bytes(pages, &bytes).unwrap();
                return ddp_reply(&head, pages, &[]).unwrap();
            }
            NFSPROC3_READDIRPLUS => {
                let a = ReaddirplusArgs::decode(d).unwrap();
                let dir = id_of(&a.dir).unwrap();
                let Some(Node::Dir(entries)) = self.nodes.get(&dir) else {
                    let res: Nfs3Res<ReaddirplusResOk, ReaddirplusResFail> = Nfs3Res::Fail {
                        status: Nfsstat3::ERR_NOTDIR,
                        resfail: ReaddirplusResFail {
                            dir_attributes: self.attrs(dir),
                        },
                    };
                    res.encode(&mut e);
                    return Chain::from_bytes(&e.finish().unwrap()).unwrap();
                };
                // Cookie n: the n-th entry was the last one sent. About 200 bytes per entry.
                let budget = (a.maxcount as usize).saturating_sub(256) / 200;
                let all: Vec<(&Vec<u8>, &u64)> = entries.iter().collect();
                let from = a.cookie as usize;
                let upto = (from + budget.max(1)).min(all.len());
                let list = all[from.min(upto)..upto]
                    .iter()
                    .enumerate()
                    .map(|(k, (name, id))| Entryplus3 {
                        fileid: **id,
                        name: nfs_proto::nfs3::Filename3((*name).clone()),
                        cookie: (from + k + 1) as u64,
                        name_attributes: self.attrs(**id),
                        name_handle: Some(fh(**id)),
                    })
                    .collect();
                let res: Nfs3Res<ReaddirplusResOk, ReaddirplusResFail> =
                    Nfs3Res::Ok(ReaddirplusResOk {
                        dir_attributes: self.attrs(dir),
                        cookieverf: Cookieverf3(*b"cookies!"),
                        reply: Dirlistplus3 {
                            entries: list,
                            eof: upto == all.len(),
                        },
                    });
                res.encode(&mut e);
            }
            NFSPROC3_FSINFO => {
                let a = FsinfoArgs::decode(d).unwrap();
                let res: Nfs3Res<FsinfoResOk, FsinfoResFail> = Nfs3Res::Ok(FsinfoResOk {
                    obj_attributes: id_of(&a.fsroot).and_then(|id| self.attrs(id)),
                    rtmax: self.rtmax,
                    rtpref: self.rtmax,
                    rtmult: 4096,
                    wtmax: self.wtmax,
                    wtpref: self.wtmax,
                    wtmult: 4096,
                    dtpref: 32768,
                    maxfilesize: u64::MAX,
                    time_delta: Nfstime3 {
                        seconds: 0,
                        nseconds: 1,
                    },
                    properties: 0x1b,
                });
                res.encode(&mut e);
            }
            NFSPROC3_COMMIT => {
                let a = CommitArgs::decode(d).unwrap();
                let id = id_of(&a.file).unwrap();
                if let Some(Node::File { data, stable }) = self.nodes.get_mut(&id) {
                    *stable = data.clone();
                }
                let res: Nfs3Res<CommitResOk, CommitResFail> = Nfs3Res::Ok(CommitResOk {
                    file_wcc: self.wcc(id),
                    verf: Writeverf3(self.verf),
                });
                res.encode(&mut e);
            }
            _ => {
                let mut e = Encoder::new();
                ReplyHeader::Accepted {
                    xid,
                    verf: Auth::None,
                    stat: AcceptStat::ProcUnavail,
                }
                .encode(&mut e);
                return Chain::from_bytes(&e.finish().unwrap()).unwrap();
            }
        }
        Chain::from_bytes(&e.finish().unwrap()).unwrap()
    }

    fn resolve_in(&self, dir: u64, name: &str) -> Option<u64> {
        match self.nodes.get(&dir)? {
            Node::Dir(e) => e.get(name.as_bytes()).copied(),
            Node::File { .. } => None,
        }
    }
}

/// An `NFS3ERR_JUKEBOX` reply to call `xid` of `proc_`: the status and the procedure's
/// failure results with every attribute absent (`post_op_attr` or `wcc_data`).
pub fn jukebox(xid: u32, proc_: u32) -> Chain {
    let mut e = Encoder::new();
    ReplyHeader::success(xid).encode(&mut e);
    e.u32(Nfsstat3::ERR_JUKEBOX.0);
    let absent_words = match proc_ {
        NFSPROC3_GETATTR => 0,
        NFSPROC3_LOOKUP | NFSPROC3_READ | NFSPROC3_READDIRPLUS | NFSPROC3_FSINFO => 1,
        NFSPROC3_CREATE | NFSPROC3_WRITE | NFSPROC3_COMMIT => 2,
        p => panic!("no JUKEBOX reply for procedure {p}"),
    };
    for _ in 0..absent_words {
        e.u32(0);
    }
    Chain::from_bytes(&e.finish().unwrap()).unwrap()
}

/// A fresh scratch directory for one test.
pub fn scratch(test: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("krpc-session-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Leak check once everything is dropped: no page of either arena still referenced.
pub fn assert_no_pages_held(client: &HeapPageArena, server: &HeapPageArena) {
    assert_eq!(client.in_use(), 0, "client pages still referenced");
    assert_eq!(server.in_use(), 0, "server pages still referenced");
}
