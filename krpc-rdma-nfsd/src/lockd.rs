//! File locking for the NFSv3 server: NLM v4 (program 100021) and NSM v1 (program 100024)
//! over TCP and UDP, on one port, around nfs-proto's [`LockTable`] and [`Monitor`].
//!
//! * Calls: RFC 5531 record marking over TCP (a thread per connection, at most
//!   [`MAX_CONNECTIONS`]) and datagrams over UDP (one thread). Both programs are served on
//!   both transports; the program number of the call picks the service.
//! * rpcbind: at start NLM v4 and NSM v1 are registered for `tcp` and `udp` (rpcbind v4
//!   SET, through the local socket `/run/rpcbind.sock` when it exists, as libtirpc and the
//!   kernel do, else TCP to 127.0.0.1:111); a registration held by another service is left
//!   alone (one warning line) unless listed in `--rpcbind-replace` (then UNSET + SET). At exit
//!   each registration we made is unset if it still points at our port (GETADDR).
//! * Locks are advisory state in memory, keyed by the file handle's bytes: the file system is
//!   not touched. A LOCK that conflicts with `block` set answers `NLM4_BLOCKED` and waits in
//!   the file's queue; when the holder unlocks, the queue is granted in order and each grant
//!   goes to the client's lock manager as an `NLM4_GRANTED` call (by UDP to the port its
//!   rpcbind gives for NLM v4 `udp`, a few tries). A client that does not answer keeps the
//!   lock and finds it granted when it polls (Linux polls every 30 s); one that answers
//!   "not waiting" has it released. The `_MSG` procedures are answered with an empty reply
//!   and their result sent as the matching `_RES` call, as Linux's lockd does.
//! * NSM and restarts: the state directory holds `state` (this server's NSM state number,
//!   odd, moved on at every start) and `sm/ADDR`, one file per client address that took a
//!   lock (written before the first lock is granted to it). At start the records move to
//!   `sm.bak/`, each client's statd gets `SM_NOTIFY` (our name, the new state) by UDP, and a
//!   record is deleted once notified. While records were found, the server is in its grace
//!   period (`--grace`): only reclaims (`reclaim` set) are served, everything else gets
//!   `NLM4_DENIED_GRACE_PERIOD` (Linux's client waits and retries). `SM_NOTIFY` received
//!   from a restarted client frees that client's locks and calls back the `SM_MON`
//!   registrations of that host.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nfs_proto::nlm::{self, Grant, LockTable, Nlm4Stat, Res, TestArgs, NLM_PROGRAM, NLM_V4};
use nfs_proto::nsm::{self, Callback, Mon, MonId, Monitor, MyId, StatChge, SM_PROG, SM_VERS};
use onc_rpc::rpc::{AcceptStat, Auth, CallHeader, ReplyHeader};
use onc_rpc::svc::Refusal;
use onc_rpc::svc::{accept_call, header_bytes, refusal, success_encoder, AuthPolicy, Program};
use onc_rpc::xdr::{Decoder, Encoder, XdrError};

use crate::mountd::{read_record, write_record};

/// Most TCP connections served at once (more are closed at once).
pub const MAX_CONNECTIONS: usize = 64;
/// Most client hosts recorded in the state directory.
pub const MAX_CLIENTS: usize = 4096;
/// Most threads sending SM_NOTIFY at once (one per start or SM_SIMU_CRASH).
pub const MAX_NOTIFIERS: usize = 4;
/// Most `SM_MON` registrations.
pub const MAX_MONITORS: usize = 1024;
/// Callbacks waiting to be sent (more are dropped, with a warning).
pub const CALLBACK_QUEUE: usize = 1024;
/// The rpcbind port.
pub const RPCBIND_PORT: u16 = 111;
/// rpcbind's local socket.
pub const RPCBIND_SOCK: &str = "/run/rpcbind.sock";

const RPCB_PROG: u32 = 100_000;
const RPCB_V4: u32 = 4;
const RPCBPROC_SET: u32 = 1;
const RPCBPROC_UNSET: u32 = 2;
const RPCBPROC_GETADDR: u32 = 3;
const PMAP_V2: u32 = 2;
const PMAPPROC_GETPORT: u32 = 3;
const IPPROTO_UDP: u32 = 17;

/// One rpcbind registration: which program over which transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reg {
    /// NLM v4 over TCP.
    NlmTcp,
    /// NLM v4 over UDP.
    NlmUdp,
    /// NSM v1 over TCP.
    NsmTcp,
    /// NSM v1 over UDP.
    NsmUdp,
}

impl Reg {
    /// All four.
    pub const ALL: [Reg; 4] = [Reg::NlmTcp, Reg::NlmUdp, Reg::NsmTcp, Reg::NsmUdp];

    fn prog_vers(self) -> (u32, u32) {
        match self {
            Reg::NlmTcp | Reg::NlmUdp => (NLM_PROGRAM, NLM_V4),
            Reg::NsmTcp | Reg::NsmUdp => (SM_PROG, SM_VERS),
        }
    }

    fn netid(self, v6: bool) -> &'static str {
        match (self, v6) {
            (Reg::NlmTcp | Reg::NsmTcp, false) => "tcp",
            (Reg::NlmUdp | Reg::NsmUdp, false) => "udp",
            (Reg::NlmTcp | Reg::NsmTcp, true) => "tcp6",
            (Reg::NlmUdp | Reg::NsmUdp, true) => "udp6",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Reg::NlmTcp => "nlm-tcp",
            Reg::NlmUdp => "nlm-udp",
            Reg::NsmTcp => "nsm-tcp",
            Reg::NsmUdp => "nsm-udp",
        }
    }
}

/// `nlm-tcp`, `nlm-udp`, `nsm-tcp` or `nsm-udp`.
///
/// # Errors
/// Anything else.
pub fn parse_reg(s: &str) -> Result<Reg, String> {
    Reg::ALL
        .into_iter()
        .find(|r| r.name() == s)
        .ok_or_else(|| format!("not one of nlm-tcp, nlm-udp, nsm-tcp, nsm-udp: {s}"))
}

/// The locking options of `userspace-harness nfsd`.
#[derive(Debug, Clone, clap::Args)]
pub struct LockOpts {
    /// Serve no file locking (no NLM / NSM): clients must mount with `nolock`.
    #[arg(long)]
    pub no_lock: bool,
    /// Port of the NLM v4 and NSM v1 services, TCP and UDP (0: any free port).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub lock_port: u16,
    /// Grace period after a restart with clients to notify, in seconds: only reclaims.
    #[arg(long, value_name = "SECS", default_value_t = 90)]
    pub grace: u64,
    /// rpcbind registrations to take over when another service holds them (comma
    /// separated: nlm-tcp, nlm-udp, nsm-tcp, nsm-udp), e.g. nlm-tcp when a kernel NFS client
    /// on the same host runs its own lockd.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_reg)]
    pub rpcbind_replace: Vec<Reg>,
}

/// Where rpcbind is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcbindConfig {
    /// Register at all.
    pub register: bool,
    /// The local stream socket tried first for registrations.
    pub unix: Option<PathBuf>,
    /// rpcbind's port, on 127.0.0.1 for registrations and on a peer for its services.
    pub port: u16,
    /// Registrations taken over when held by someone else.
    pub replace: Vec<Reg>,
}

impl Default for RpcbindConfig {
    fn default() -> Self {
        RpcbindConfig {
            register: true,
            unix: Some(PathBuf::from(RPCBIND_SOCK)),
            port: RPCBIND_PORT,
            replace: Vec::new(),
        }
    }
}

/// How to run the lock services.
#[derive(Debug, Clone)]
pub struct LockdConfig {
    /// Address to bind (port [`LockdConfig::port`]).
    pub bind: IpAddr,
    /// Port, TCP and UDP (0: any).
    pub port: u16,
    /// State directory.
    pub state_dir: PathBuf,
    /// Grace period after a restart that found clients to notify.
    pub grace: Duration,
    /// Our name in `SM_NOTIFY` and GRANTED calls (the address clients mounted).
    pub name: Vec<u8>,
    /// rpcbind.
    pub rpcbind: RpcbindConfig,
}

impl LockdConfig {
    /// The configuration of `userspace-harness nfsd` serving on `ip`, its lock state in
    /// `state_dir` (nfsd's `--state-dir`: the NSM state number and the clients holding
    /// locks, beside the handle key).
    pub fn from_opts(o: &LockOpts, state_dir: &Path, ip: IpAddr) -> LockdConfig {
        LockdConfig {
            bind: ip,
            port: o.lock_port,
            state_dir: state_dir.to_path_buf(),
            grace: Duration::from_secs(o.grace),
            name: ip.to_string().into_bytes(),
            rpcbind: RpcbindConfig {
                replace: o.rpcbind_replace.clone(),
                ..RpcbindConfig::default()
            },
        }
    }
}

/// Counters, printed at exit.
#[derive(Debug, Default)]
pub struct LockdStats {
    /// Calls answered (or dropped as not calls).
    pub calls: AtomicU64,
    /// Locks granted on LOCK (not from the queue).
    pub granted: AtomicU64,
    /// Locks reclaimed in the grace period.
    pub reclaimed: AtomicU64,
    /// Requests that blocked.
    pub blocked: AtomicU64,
    /// GRANTED callbacks sent.
    pub callbacks: AtomicU64,
    /// GRANTED callbacks the client accepted.
    pub callbacks_accepted: AtomicU64,
    /// SM_NOTIFY calls that reached a client.
    pub notified: AtomicU64,
}

enum Job {
    /// GRANTED to a client's lock manager.
    Granted { to: IpAddr, args: TestArgs },
    /// A `_RES` call (the result of a `_MSG` call) to a client's lock manager.
    Res {
        to: IpAddr,
        proc_: u32,
        body: Vec<u8>,
    },
    /// An NSM callback to a local `SM_MON` registrant.
    Nsm(Callback),
}

struct State {
    table: LockTable<IpAddr>,
    nsm: Monitor,
    /// Client addresses with a record in `sm/`.
    recorded: HashSet<IpAddr>,
    /// caller_name → the address it last called from.
    hosts: HashMap<Vec<u8>, IpAddr>,
    grace_until: Option<Instant>,
}

struct Shared {
    cfg: LockdConfig,
    st: Mutex<State>,
    jobs: SyncSender<Job>,
    stop: &'static AtomicBool,
    conns: AtomicUsize,
    notifiers: AtomicUsize,
    stats: LockdStats,
}

/// The running lock services.
pub struct Lockd {
    sh: Arc<Shared>,
    tcp: SocketAddr,
    udp: SocketAddr,
    threads: Vec<JoinHandle<()>>,
    registered: Vec<Reg>,
}

impl std::fmt::Debug for Lockd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lockd")
            .field("tcp", &self.tcp)
            .field("udp", &self.udp)
            .finish_non_exhaustive()
    }
}

fn lock_st(sh: &Shared) -> MutexGuard<'_, State> {
    sh.st.lock().unwrap_or_else(|p| p.into_inner())
}

/// Start the services of `userspace-harness nfsd` (nothing with `--no-lock`), printing
/// what was bound and registered.
///
/// # Errors
/// As [`Lockd::start`].
pub fn start_for(
    o: &LockOpts,
    state_dir: &Path,
    ip: IpAddr,
    stop: &'static AtomicBool,
) -> Result<Option<Lockd>, String> {
    if o.no_lock {
        return Ok(None);
    }
    Lockd::start(LockdConfig::from_opts(o, state_dir, ip), stop).map(Some)
}

fn io_line(what: &str, p: &Path, e: io::Error) -> String {
    format!("lock state: {what} {}: {e}", p.display())
}

impl Lockd {
    /// Load the state directory (moving the NSM state on), bind TCP and UDP, register with
    /// rpcbind, start the threads, and notify the clients recorded by the previous run.
    ///
    /// # Errors
    /// The state directory cannot be created or written, a socket cannot be bound, a thread
    /// cannot be spawned.
    pub fn start(cfg: LockdConfig, stop: &'static AtomicBool) -> Result<Lockd, String> {
        let sm = cfg.state_dir.join("sm");
        let bak = cfg.state_dir.join("sm.bak");
        for d in [&cfg.state_dir, &sm, &bak] {
            std::fs::create_dir_all(d).map_err(|e| {
                format!(
                    "{} (choose one with --state-dir, or serve no locks with --no-lock)",
                    io_line("creating", d, e)
                )
            })?;
        }
        let state_file = cfg.state_dir.join("state");
        let prev = match std::fs::read_to_string(&state_file) {
            Ok(s) => s.trim().parse::<i32>().unwrap_or(0),
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(e) => return Err(io_line("reading", &state_file, e)),
        };
        let state = nsm::next_state(prev);
        write_state(&cfg.state_dir, state)?;
        // The previous run's clients: move them aside, to be notified.
        let entries = std::fs::read_dir(&sm).map_err(|e| io_line("reading", &sm, e))?;
        for e in entries.flatten() {
            let to = bak.join(e.file_name());
            std::fs::rename(e.path(), &to).map_err(|er| io_line("moving", &e.path(), er))?;
        }
        let mut to_notify = Vec::new();
        let entries = std::fs::read_dir(&bak).map_err(|e| io_line("reading", &bak, e))?;
        for e in entries.flatten() {
            match e
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<IpAddr>().ok())
            {
                Some(ip) => to_notify.push((ip, e.path())),
                None => {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        let mut table = LockTable::default();
        let grace_until = if to_notify.is_empty() || cfg.grace.is_zero() {
            None
        } else {
            table.set_grace(true);
            Some(Instant::now() + cfg.grace)
        };

        let tcp_l = TcpListener::bind((cfg.bind, cfg.port))
            .map_err(|e| format!("lockd: cannot bind tcp {}:{}: {e}", cfg.bind, cfg.port))?;
        let tcp = tcp_l.local_addr().map_err(|e| e.to_string())?;
        let udp_s = UdpSocket::bind((cfg.bind, tcp.port()))
            .map_err(|e| format!("lockd: cannot bind udp {}:{}: {e}", cfg.bind, tcp.port()))?;
        let udp = udp_s.local_addr().map_err(|e| e.to_string())?;
        tcp_l.set_nonblocking(true).map_err(|e| e.to_string())?;
        udp_s
            .set_read_timeout(Some(Duration::from_millis(500)))
            .map_err(|e| e.to_string())?;

        let (jobs, rx) = mpsc::sync_channel(CALLBACK_QUEUE);
        let sh = Arc::new(Shared {
            st: Mutex::new(State {
                table,
                nsm: Monitor::new(state, MAX_MONITORS),
                recorded: HashSet::new(),
                hosts: HashMap::new(),
                grace_until,
            }),
            cfg,
            jobs,
            stop,
            conns: AtomicUsize::new(0),
            notifiers: AtomicUsize::new(0),
            stats: LockdStats::default(),
        });
        println!(
            "lockd: NLM v4 and NSM v1 on tcp {tcp} and udp {udp}, NSM state {state}, state in {}{}",
            sh.cfg.state_dir.display(),
            match grace_until {
                Some(_) => format!(
                    ", {} client(s) to notify, grace period {} s",
                    to_notify.len(),
                    sh.cfg.grace.as_secs()
                ),
                None => String::new(),
            }
        );
        let registered = if sh.cfg.rpcbind.register {
            register(&sh.cfg.rpcbind, tcp)
        } else {
            Vec::new()
        };
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .map_err(|e| format!("lockd: spawning {name}: {e}"))
        };
        let mut threads = Vec::new();
        let s = sh.clone();
        threads.push(spawn("lockd tcp", Box::new(move || serve_tcp(&s, &tcp_l)))?);
        let s = sh.clone();
        threads.push(spawn("lockd udp", Box::new(move || serve_udp(&s, &udp_s)))?);
        let s = sh.clone();
        threads.push(spawn(
            "lockd callbacks",
            Box::new(move || callbacks(&s, &rx)),
        )?);
        if !to_notify.is_empty() {
            spawn_notify(&sh, state, to_notify);
        }
        Ok(Lockd {
            sh,
            tcp,
            udp,
            threads,
            registered,
        })
    }

    /// The TCP address served.
    pub fn tcp_addr(&self) -> SocketAddr {
        self.tcp
    }

    /// The UDP address served.
    pub fn udp_addr(&self) -> SocketAddr {
        self.udp
    }

    /// The counters.
    pub fn stats(&self) -> &LockdStats {
        &self.sh.stats
    }

    /// Locks held now.
    pub fn lock_count(&self) -> usize {
        lock_st(&self.sh).table.lock_count()
    }

    /// Whether in the grace period now.
    pub fn in_grace(&self) -> bool {
        let mut st = lock_st(&self.sh);
        refresh_grace(&mut st);
        st.table.in_grace()
    }

    /// After the stop flag is set: wait for the service threads, unregister from rpcbind,
    /// print the counters.
    pub fn shutdown(self) {
        for t in self.threads {
            let _ = t.join();
        }
        if !self.registered.is_empty() {
            unregister(&self.sh.cfg.rpcbind, self.tcp, &self.registered);
        }
        let s = &self.sh.stats;
        let held = lock_st(&self.sh).table.lock_count();
        println!(
            "lockd: {} calls, {} locks granted, {} reclaimed, {} blocked, {} GRANTED callbacks ({} accepted), {} clients notified, {held} locks held at exit",
            s.calls.load(Ordering::Relaxed),
            s.granted.load(Ordering::Relaxed),
            s.reclaimed.load(Ordering::Relaxed),
            s.blocked.load(Ordering::Relaxed),
            s.callbacks.load(Ordering::Relaxed),
            s.callbacks_accepted.load(Ordering::Relaxed),
            s.notified.load(Ordering::Relaxed),
        );
    }
}

fn write_state(dir: &Path, state: i32) -> Result<(), String> {
    let tmp = dir.join("state.new");
    let fin = dir.join("state");
    std::fs::write(&tmp, format!("{state}\n"))
        .and_then(|()| std::fs::File::open(&tmp).and_then(|f| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, &fin))
        .map_err(|e| io_line("writing", &fin, e))
}

fn refresh_grace(st: &mut State) {
    if let Some(t) = st.grace_until {
        if Instant::now() >= t {
            st.grace_until = None;
            st.table.set_grace(false);
            println!("lockd: grace period over");
        }
    }
}

fn serve_tcp(sh: &Arc<Shared>, l: &TcpListener) {
    while !sh.stop.load(Ordering::SeqCst) {
        match l.accept() {
            Ok((s, peer)) => {
                if sh.conns.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
                    continue; // dropped: closed
                }
                sh.conns.fetch_add(1, Ordering::SeqCst);
                let s2 = sh.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("lockd {peer}"))
                    .spawn(move || {
                        serve_stream(&s2, s, peer);
                        s2.conns.fetch_sub(1, Ordering::SeqCst);
                    });
                if spawned.is_err() {
                    sh.conns.fetch_sub(1, Ordering::SeqCst);
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn serve_stream(sh: &Arc<Shared>, mut s: TcpStream, peer: SocketAddr) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(600)));
    let _ = s.set_nodelay(true);
    while let Ok(Some(call)) = read_record(&mut s) {
        if sh.stop.load(Ordering::SeqCst) {
            return;
        }
        if let Some(reply) = dispatch(sh, &call, peer) {
            if write_record(&mut s, &reply).is_err() {
                return;
            }
        }
    }
}

fn serve_udp(sh: &Arc<Shared>, s: &UdpSocket) {
    let mut buf = vec![0u8; 65_536];
    while !sh.stop.load(Ordering::SeqCst) {
        let Ok((n, peer)) = s.recv_from(&mut buf) else {
            continue;
        };
        if let Some(reply) = dispatch(sh, buf.get(..n).unwrap_or_default(), peer) {
            let _ = s.send_to(&reply, peer);
        }
    }
}

/// Serve one call message from `peer`: the reply, or `None` (not a call).
fn dispatch(sh: &Arc<Shared>, call: &[u8], peer: SocketAddr) -> Option<Vec<u8>> {
    sh.stats.calls.fetch_add(1, Ordering::Relaxed);
    let prog = call
        .get(12..16)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_be_bytes);
    let p = if prog == Some(SM_PROG) {
        Program {
            prog: SM_PROG,
            low: SM_VERS,
            high: SM_VERS,
            nprocs: nsm::SM_NOTIFY + 1,
            auth: AuthPolicy::AllowNone,
        }
    } else {
        Program {
            prog: NLM_PROGRAM,
            low: NLM_V4,
            high: NLM_V4,
            nprocs: nlm::NLMPROC4_FREE_ALL + 1,
            auth: AuthPolicy::AllowNone,
        }
    };
    let acc = match accept_call(call, &p) {
        Ok(a) => a,
        Err(Refusal::Drop) => return None,
        Err(Refusal::Reply(h)) => return header_bytes(&h).ok(),
    };
    let xid = acc.header.xid;
    let mut d = acc.args;
    let mut e = success_encoder(xid);
    let ran = if p.prog == SM_PROG {
        nsm_proc(sh, acc.header.proc_, peer, &mut d, &mut e)
    } else {
        nlm_proc(sh, acc.header.proc_, peer, &mut d, &mut e)
    };
    let stat = match ran {
        Ok(true) => match e.finish() {
            Ok(b) => return Some(b),
            Err(_) => AcceptStat::SystemErr,
        },
        Ok(false) => AcceptStat::ProcUnavail,
        Err(_) => AcceptStat::GarbageArgs,
    };
    header_bytes(&refusal(xid, stat)).ok()
}

fn queue(sh: &Shared, job: Job) {
    if let Err(TrySendError::Full(_)) = sh.jobs.try_send(job) {
        println!("lockd: callback queue full, a callback was dropped");
    }
}

/// CANCEL or UNLOCK: `op` on the lock table (grace period refreshed first), the grants it
/// frees queued as GRANTED callbacks once the table is unlocked; its status.
fn release(
    sh: &Shared,
    op: impl FnOnce(&mut LockTable<IpAddr>) -> (Nlm4Stat, Vec<Grant<IpAddr>>),
) -> Nlm4Stat {
    let mut st = lock_st(sh);
    refresh_grace(&mut st);
    let (stat, grants) = op(&mut st.table);
    drop(st);
    queue_grants(sh, grants);
    stat
}

fn queue_grants(sh: &Shared, grants: Vec<Grant<IpAddr>>) {
    for g in grants {
        queue(
            sh,
            Job::Granted {
                to: g.peer,
                args: g.args,
            },
        );
    }
}

fn encode_to_vec(f: impl FnOnce(&mut Encoder)) -> Vec<u8> {
    let mut e = Encoder::new();
    f(&mut e);
    e.finish().unwrap_or_default()
}

/// Record `ip` (calling as `name`) as a client to notify after a restart, before its first
/// lock: false when that cannot be done (the lock is then refused, `DENIED_NOLOCKS`).
fn monitor(sh: &Shared, st: &mut State, ip: IpAddr, name: &[u8]) -> bool {
    if st.hosts.get(name) != Some(&ip) {
        if st.hosts.len() >= MAX_CLIENTS && !st.hosts.contains_key(name) {
            return false;
        }
        st.hosts.insert(name.to_vec(), ip);
    }
    if st.recorded.contains(&ip) {
        return true;
    }
    if st.recorded.len() >= MAX_CLIENTS {
        return false;
    }
    let mut text = String::new();
    for b in name {
        let _ = write!(text, "{b:02x}");
    }
    text.push('\n');
    let path = sh.cfg.state_dir.join("sm").join(ip.to_string());
    let ok = std::fs::write(&path, text)
        .and_then(|()| std::fs::File::open(&path).and_then(|f| f.sync_all()))
        .is_ok();
    if ok {
        st.recorded.insert(ip);
    } else {
        println!("lockd: cannot record client {ip} in {}", path.display());
    }
    ok
}

/// An NLM procedure: `Ok(false)` for a procedure number not served.
fn nlm_proc(
    sh: &Shared,
    proc_: u32,
    peer: SocketAddr,
    d: &mut Decoder<'_>,
    e: &mut Encoder,
) -> Result<bool, XdrError> {
    use nlm::*;
    let ip = peer.ip();
    // The asynchronous variants: the result goes back as a `_RES` call, the reply is empty.
    let res_proc = match proc_ {
        NLMPROC4_TEST_MSG => Some(NLMPROC4_TEST_RES),
        NLMPROC4_LOCK_MSG => Some(NLMPROC4_LOCK_RES),
        NLMPROC4_CANCEL_MSG => Some(NLMPROC4_CANCEL_RES),
        NLMPROC4_UNLOCK_MSG => Some(NLMPROC4_UNLOCK_RES),
        NLMPROC4_GRANTED_MSG => Some(NLMPROC4_GRANTED_RES),
        _ => None,
    };
    let mut out = Encoder::new();
    let r = if res_proc.is_some() {
        &mut out
    } else {
        &mut *e
    };
    match proc_ {
        NLMPROC4_NULL => {}
        NLMPROC4_TEST | NLMPROC4_TEST_MSG => {
            let a = TestArgs::decode(d)?;
            let mut st = lock_st(sh);
            refresh_grace(&mut st);
            let (stat, holder) = st.table.test(&a);
            TestRes {
                cookie: a.cookie,
                stat: stat.0,
                holder,
            }
            .encode(r);
        }
        NLMPROC4_LOCK | NLMPROC4_LOCK_MSG | NLMPROC4_NM_LOCK => {
            let a = LockArgs::decode(d)?;
            let mut st = lock_st(sh);
            refresh_grace(&mut st);
            let stat =
                if proc_ != NLMPROC4_NM_LOCK && !monitor(sh, &mut st, ip, &a.alock.caller_name) {
                    Nlm4Stat::DENIED_NOLOCKS
                } else {
                    st.table.lock(&a, ip)
                };
            drop(st);
            match stat {
                Nlm4Stat::GRANTED if a.reclaim => {
                    sh.stats.reclaimed.fetch_add(1, Ordering::Relaxed);
                    println!(
                        "lockd: reclaim granted to {} ({ip}) svid {}",
                        String::from_utf8_lossy(&a.alock.caller_name),
                        a.alock.svid
                    );
                }
                Nlm4Stat::GRANTED => {
                    sh.stats.granted.fetch_add(1, Ordering::Relaxed);
                }
                // Counted every time; logged the first 100 times.
                Nlm4Stat::BLOCKED if sh.stats.blocked.fetch_add(1, Ordering::Relaxed) < 100 => {
                    println!(
                        "lockd: LOCK from {} ({ip}) svid {} blocked",
                        String::from_utf8_lossy(&a.alock.caller_name),
                        a.alock.svid
                    );
                }
                _ => {}
            }
            Res::new(a.cookie, stat).encode(r);
        }
        NLMPROC4_CANCEL | NLMPROC4_CANCEL_MSG => {
            let a = CancArgs::decode(d)?;
            let stat = release(sh, |t| t.cancel(&a));
            Res::new(a.cookie, stat).encode(r);
        }
        NLMPROC4_UNLOCK | NLMPROC4_UNLOCK_MSG => {
            let a = UnlockArgs::decode(d)?;
            let stat = release(sh, |t| t.unlock(&a));
            Res::new(a.cookie, stat).encode(r);
        }
        NLMPROC4_GRANTED | NLMPROC4_GRANTED_MSG => {
            // A server's callback to a client: we wait for no lock of anyone's.
            let a = TestArgs::decode(d)?;
            Res::new(a.cookie, Nlm4Stat::DENIED).encode(r);
        }
        NLMPROC4_TEST_RES..=NLMPROC4_GRANTED_RES => {
            // Results of our own calls: GRANTED goes synchronously, so there is nothing to
            // match; the call is acknowledged.
        }
        NLMPROC4_SHARE | NLMPROC4_UNSHARE => {
            let a = ShareArgs::decode(d)?;
            let mut st = lock_st(sh);
            refresh_grace(&mut st);
            let stat = if proc_ == NLMPROC4_UNSHARE {
                st.table.unshare(&a)
            } else if !monitor(sh, &mut st, ip, &a.share.caller_name) {
                Nlm4Stat::DENIED_NOLOCKS
            } else {
                st.table.share(&a)
            };
            ShareRes {
                cookie: a.cookie,
                stat: stat.0,
                sequence: 0,
            }
            .encode(r);
        }
        NLMPROC4_FREE_ALL => {
            let a = NotifyArgs::decode(d)?;
            let grants = lock_st(sh).table.free_host(&a.name);
            queue_grants(sh, grants);
        }
        _ => return Ok(false),
    }
    if let Some(proc_) = res_proc {
        let body = out.finish().map_err(|_| XdrError::Alloc)?;
        queue(
            sh,
            Job::Res {
                to: ip,
                proc_,
                body,
            },
        );
    }
    Ok(true)
}

/// An NSM procedure.
fn nsm_proc(
    sh: &Arc<Shared>,
    proc_: u32,
    peer: SocketAddr,
    d: &mut Decoder<'_>,
    e: &mut Encoder,
) -> Result<bool, XdrError> {
    let local = peer.ip().is_loopback();
    match proc_ {
        nsm::SM_NULL => {}
        nsm::SM_STAT => {
            let name = d.opaque("mon_name", nsm::SM_MAXSTRLEN)?;
            let (res, state) = lock_st(sh).nsm.stat(name);
            e.u32(res);
            e.i32(state);
        }
        nsm::SM_MON => {
            let m = Mon::decode(d)?;
            let (res, state) = lock_st(sh).nsm.mon(&m, local);
            e.u32(res);
            e.i32(state);
        }
        nsm::SM_UNMON => {
            let id = MonId::decode(d)?;
            e.i32(lock_st(sh).nsm.unmon(&id, local));
        }
        nsm::SM_UNMON_ALL => {
            let id = MyId::decode(d)?;
            e.i32(lock_st(sh).nsm.unmon_all(&id, local));
        }
        nsm::SM_SIMU_CRASH => {
            if local {
                simu_crash(sh);
            }
        }
        nsm::SM_NOTIFY => {
            let c = StatChge::decode(d)?;
            let caller = peer.ip().to_string();
            let mut st = lock_st(sh);
            let callbacks = st.nsm.notify(&c, caller.as_bytes());
            // Our own lock manager: the restarted client's locks are gone.
            let names: Vec<Vec<u8>> = st
                .hosts
                .iter()
                .filter(|(n, ip)| n.as_slice() == c.mon_name || **ip == peer.ip())
                .map(|(n, _)| n.clone())
                .collect();
            let mut grants = Vec::new();
            for n in &names {
                grants.extend(st.table.free_host(n));
            }
            drop(st);
            println!(
                "lockd: SM_NOTIFY from {} ({caller}), state {}: its locks freed",
                String::from_utf8_lossy(&c.mon_name),
                c.state
            );
            queue_grants(sh, grants);
            for cb in callbacks {
                queue(sh, Job::Nsm(cb));
            }
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// SM_SIMU_CRASH: as after a restart: a new state number, every lock forgotten, the grace
/// period, the recorded clients notified.
fn simu_crash(sh: &Arc<Shared>) {
    let sm = sh.cfg.state_dir.join("sm");
    let bak = sh.cfg.state_dir.join("sm.bak");
    let mut st = lock_st(sh);
    let state = st.nsm.simu_crash();
    if let Err(e) = write_state(&sh.cfg.state_dir, state) {
        println!("lockd: {e}");
    }
    st.table.clear();
    let mut to_notify = Vec::new();
    for ip in st.recorded.drain() {
        let name = ip.to_string();
        let to = bak.join(&name);
        if std::fs::rename(sm.join(&name), &to).is_ok() {
            to_notify.push((ip, to));
        }
    }
    if !sh.cfg.grace.is_zero() {
        st.table.set_grace(true);
        st.grace_until = Some(Instant::now() + sh.cfg.grace);
    }
    drop(st);
    println!("lockd: SM_SIMU_CRASH: NSM state {state}, locks dropped");
    spawn_notify(sh, state, to_notify);
}

/// Notify `clients` on a thread of its own (not joined: it may still be retrying a silent
/// client at exit), unless [`MAX_NOTIFIERS`] already run: then the records wait in
/// `sm.bak/` for the next start.
fn spawn_notify(sh: &Arc<Shared>, state: i32, clients: Vec<(IpAddr, PathBuf)>) {
    if sh.notifiers.fetch_add(1, Ordering::SeqCst) >= MAX_NOTIFIERS {
        sh.notifiers.fetch_sub(1, Ordering::SeqCst);
        println!(
            "lockd: {MAX_NOTIFIERS} notifiers busy: clients left in sm.bak for the next start"
        );
        return;
    }
    let s = sh.clone();
    let spawned = std::thread::Builder::new()
        .name("sm-notify".into())
        .spawn(move || {
            notify_all(&s, state, clients);
            s.notifiers.fetch_sub(1, Ordering::SeqCst);
        });
    if let Err(e) = spawned {
        sh.notifiers.fetch_sub(1, Ordering::SeqCst);
        println!("lockd: cannot start sm-notify ({e}): clients left in sm.bak for the next start");
    }
}

/// Send SM_NOTIFY to each recorded client (retrying, for a couple of minutes, those that do
/// not answer); a record is deleted once its client heard.
fn notify_all(sh: &Shared, state: i32, clients: Vec<(IpAddr, PathBuf)>) {
    let args = encode_to_vec(|e| {
        StatChge {
            mon_name: sh.cfg.name.clone(),
            state,
        }
        .encode(e);
    });
    // Rounds over the clients still to notify, each waiting longer for an answer: a silent
    // client delays the others by one wait per round, not by all its retries.
    let mut left: Vec<(IpAddr, PathBuf, String)> = clients
        .into_iter()
        .map(|(ip, p)| (ip, p, String::new()))
        .collect();
    for wait in [1u64, 2, 4, 8, 15, 15, 15, 15, 30, 30] {
        if left.is_empty() || sh.stop.load(Ordering::SeqCst) {
            break;
        }
        let tries = [Duration::from_secs(wait)];
        left.retain_mut(|(ip, path, last)| {
            match call_peer(sh, *ip, SM_PROG, SM_VERS, nsm::SM_NOTIFY, &args, &tries) {
                Ok(_) => {
                    sh.stats.notified.fetch_add(1, Ordering::Relaxed);
                    let _ = std::fs::remove_file(&*path);
                    println!("lockd: SM_NOTIFY sent to {ip} (state {state})");
                    false
                }
                Err(e) => {
                    *last = e.to_string();
                    true
                }
            }
        });
    }
    for (ip, _, last) in left {
        println!("lockd: SM_NOTIFY to {ip} failed ({last}); kept for the next start");
    }
}

/// The callback thread: GRANTED, `_RES` and NSM callbacks, one at a time.
fn callbacks(sh: &Shared, rx: &Receiver<Job>) {
    while !sh.stop.load(Ordering::SeqCst) {
        let Ok(job) = rx.recv_timeout(Duration::from_millis(500)) else {
            continue;
        };
        let tries = [
            Duration::from_millis(500),
            Duration::from_secs(1),
            Duration::from_secs(2),
        ];
        match job {
            Job::Granted { to, args } => {
                sh.stats.callbacks.fetch_add(1, Ordering::Relaxed);
                let mut a = args;
                let body = encode_to_vec(|e| a.encode(e));
                let r = call_peer(
                    sh,
                    to,
                    NLM_PROGRAM,
                    NLM_V4,
                    nlm::NLMPROC4_GRANTED,
                    &body,
                    &tries,
                );
                let accepted = match &r {
                    Ok(res) => Res::decode(&mut Decoder::new(res))
                        .map(|r| r.stat == Nlm4Stat::GRANTED.0)
                        .ok(),
                    Err(_) => None,
                };
                match accepted {
                    Some(acc) => {
                        if acc {
                            sh.stats.callbacks_accepted.fetch_add(1, Ordering::Relaxed);
                        }
                        println!(
                            "lockd: GRANTED to {to} svid {}: {}",
                            a.alock.svid,
                            if acc { "accepted" } else { "refused, lock released" }
                        );
                        // Cookie does not matter to the table.
                        a.cookie.clear();
                        let grants = lock_st(sh).table.granted_reply(&a, acc);
                        queue_grants(sh, grants);
                    }
                    None => println!(
                        "lockd: GRANTED to {to} not answered ({}); the client finds the lock when it polls",
                        r.err().map(|e| e.to_string()).unwrap_or_default()
                    ),
                }
            }
            Job::Res { to, proc_, body } => {
                let _ = call_peer(sh, to, NLM_PROGRAM, NLM_V4, proc_, &body, &tries);
            }
            Job::Nsm(cb) => {
                let body = encode_to_vec(|e| cb.status.encode(e));
                let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
                let id = &cb.my_id;
                let _ = call_peer(sh, lo, id.my_prog, id.my_vers, id.my_proc, &body, &tries);
            }
        }
    }
}

/// Call `prog`/`vers`/`proc_` on host `ip` by UDP at the port its rpcbind gives.
fn call_peer(
    sh: &Shared,
    ip: IpAddr,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: &[u8],
    tries: &[Duration],
) -> io::Result<Vec<u8>> {
    let port = getport(ip, sh.cfg.rpcbind.port, prog, vers)?;
    udp_call(SocketAddr::new(ip, port), prog, vers, proc_, args, tries)
}

static XID: AtomicU32 = AtomicU32::new(0);

fn next_xid() -> u32 {
    if XID.load(Ordering::Relaxed) == 0 {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.subsec_nanos())
            ^ std::process::id().rotate_left(16);
        let _ = XID.compare_exchange(0, seed | 1, Ordering::Relaxed, Ordering::Relaxed);
    }
    XID.fetch_add(1, Ordering::Relaxed)
}

fn call_msg(xid: u32, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> io::Result<Vec<u8>> {
    let mut e = CallHeader::new(xid, prog, vers, proc_, Auth::None).encoder();
    e.raw(args);
    e.finish()
        .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, "encoding a call"))
}

/// The results of an accepted SUCCESS reply to `xid` in `msg`; `None` for another xid.
fn reply_results(msg: &[u8], xid: u32) -> Option<io::Result<Vec<u8>>> {
    let mut d = Decoder::new(msg);
    if d.u32().ok() != Some(xid) {
        return None;
    }
    let mut d = Decoder::new(msg);
    Some(match ReplyHeader::decode(&mut d) {
        Ok(h) if h.is_success() => Ok(msg.get(d.pos()..).unwrap_or_default().to_vec()),
        Ok(h) => Err(io::Error::other(format!("call refused: {h:?}"))),
        Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
    })
}

/// One RPC call by UDP: sent again after each wait in `tries` without an answer.
///
/// # Errors
/// No answer, a refusal, I/O errors.
pub fn udp_call(
    to: SocketAddr,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: &[u8],
    tries: &[Duration],
) -> io::Result<Vec<u8>> {
    let any: SocketAddr = if to.is_ipv6() {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let s = UdpSocket::bind(any)?;
    let xid = next_xid();
    let msg = call_msg(xid, prog, vers, proc_, args)?;
    let mut buf = vec![0u8; 65_536];
    for wait in tries {
        s.send_to(&msg, to)?;
        let deadline = Instant::now() + *wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            s.set_read_timeout(Some(left))?;
            match s.recv_from(&mut buf) {
                Ok((n, from)) if from == to => {
                    if let Some(r) = reply_results(buf.get(..n).unwrap_or_default(), xid) {
                        return r;
                    }
                }
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    break
                }
                Err(e) => return Err(e),
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("no answer from {to} (program {prog} version {vers} procedure {proc_})"),
    ))
}

/// One RPC call over a record-marked stream.
fn stream_call(
    s: &mut (impl Read + Write),
    prog: u32,
    vers: u32,
    proc_: u32,
    args: &[u8],
) -> io::Result<Vec<u8>> {
    let xid = next_xid();
    write_record(s, &call_msg(xid, prog, vers, proc_, args)?)?;
    loop {
        let rec = read_record(s)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"))?;
        if let Some(r) = reply_results(&rec, xid) {
            return r;
        }
    }
}

/// PMAP v2 GETPORT by UDP to `ip`'s rpcbind on `rpcbind_port`: the UDP port of
/// `prog`/`vers`.
///
/// # Errors
/// No answer, not registered (port 0).
pub fn getport(ip: IpAddr, rpcbind_port: u16, prog: u32, vers: u32) -> io::Result<u16> {
    let args = encode_to_vec(|e| {
        e.u32(prog);
        e.u32(vers);
        e.u32(IPPROTO_UDP);
        e.u32(0);
    });
    let tries = [
        Duration::from_millis(500),
        Duration::from_secs(1),
        Duration::from_secs(2),
    ];
    let r = udp_call(
        SocketAddr::new(ip, rpcbind_port),
        RPCB_PROG,
        PMAP_V2,
        PMAPPROC_GETPORT,
        &args,
        &tries,
    )?;
    match Decoder::new(&r).u32().map(u16::try_from) {
        Ok(Ok(p)) if p != 0 => Ok(p),
        _ => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("program {prog} version {vers} not registered for udp at {ip}"),
        )),
    }
}

/// A universal address (RFC 5665): `h1.h2.h3.h4.p1.p2`.
fn uaddr(a: SocketAddr) -> String {
    format!("{}.{}.{}", a.ip(), a.port() >> 8, a.port() & 0xff)
}

fn rpcb_args(prog: u32, vers: u32, netid: &str, addr: &str) -> Vec<u8> {
    encode_to_vec(|e| {
        e.u32(prog);
        e.u32(vers);
        e.opaque(netid.as_bytes());
        e.opaque(addr.as_bytes());
        e.opaque(b"krpc-rdma-nfsd");
    })
}

enum Local {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Local {
    fn connect(c: &RpcbindConfig) -> io::Result<Local> {
        if let Some(p) = &c.unix {
            if let Ok(s) = UnixStream::connect(p) {
                s.set_read_timeout(Some(Duration::from_secs(5)))?;
                return Ok(Local::Unix(s));
            }
        }
        let to = SocketAddr::from((Ipv4Addr::LOCALHOST, c.port));
        let s = TcpStream::connect_timeout(&to, Duration::from_secs(5))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(Local::Tcp(s))
    }

    fn call(&mut self, proc_: u32, args: &[u8]) -> io::Result<Vec<u8>> {
        match self {
            Local::Unix(s) => stream_call(s, RPCB_PROG, RPCB_V4, proc_, args),
            Local::Tcp(s) => stream_call(s, RPCB_PROG, RPCB_V4, proc_, args),
        }
    }

    fn bool_call(&mut self, proc_: u32, args: &[u8]) -> io::Result<bool> {
        let r = self.call(proc_, args)?;
        Decoder::new(&r)
            .bool()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
    }
}

/// Register NLM and NSM for `tcp`/`udp` at `addr`'s port; the registrations made.
fn register(c: &RpcbindConfig, addr: SocketAddr) -> Vec<Reg> {
    let mut rb = match Local::connect(c) {
        Ok(r) => r,
        Err(e) => {
            println!("lockd: rpcbind not reachable ({e}): not registered, clients cannot find the lock manager");
            return Vec::new();
        }
    };
    let ua = uaddr(addr);
    let mut done = Vec::new();
    for reg in Reg::ALL {
        let (prog, vers) = reg.prog_vers();
        let netid = reg.netid(addr.is_ipv6());
        let set = rpcb_args(prog, vers, netid, &ua);
        let r = match rb.bool_call(RPCBPROC_SET, &set) {
            Ok(false) if c.replace.contains(&reg) => {
                let unset = rpcb_args(prog, vers, netid, "");
                rb.bool_call(RPCBPROC_UNSET, &unset)
                    .and_then(|_| rb.bool_call(RPCBPROC_SET, &set))
                    .map(|ok| (ok, " (replaced)"))
            }
            r => r.map(|ok| (ok, "")),
        };
        match r {
            Ok((true, how)) => {
                println!("lockd: registered {} with rpcbind{how}", reg.name());
                done.push(reg);
            }
            Ok((false, _)) => println!(
                "lockd: rpcbind: {} is registered by another service; not replaced",
                reg.name()
            ),
            Err(e) => println!("lockd: rpcbind: registering {}: {e}", reg.name()),
        }
    }
    done
}

/// Unset the registrations in `regs` that still point at `addr`'s port.
fn unregister(c: &RpcbindConfig, addr: SocketAddr, regs: &[Reg]) {
    let Ok(mut rb) = Local::connect(c) else {
        println!("lockd: rpcbind not reachable at exit: registrations left");
        return;
    };
    let suffix = format!(".{}.{}", addr.port() >> 8, addr.port() & 0xff);
    for reg in regs {
        let (prog, vers) = reg.prog_vers();
        let netid = reg.netid(addr.is_ipv6());
        let q = rpcb_args(prog, vers, netid, "");
        let ours = rb.call(RPCBPROC_GETADDR, &q).ok().is_some_and(|r| {
            Decoder::new(&r)
                .opaque("uaddr", 256)
                .is_ok_and(|a| a.ends_with(suffix.as_bytes()))
        });
        if ours && rb.bool_call(RPCBPROC_UNSET, &q).unwrap_or(false) {
            println!("lockd: unregistered {}", reg.name());
        }
    }
}
