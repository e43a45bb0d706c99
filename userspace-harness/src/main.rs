//! `userspace-harness`: runs the krpc-rdma core in userspace, over libibverbs (Soft-RoCE
//! `rxe0` in the project's VM: `cargo xtask vm -- target/release/userspace-harness ...`).
//!
//! Commands: `server`, `client`, `bench` (both in one process), `demo`, `decode` (the
//! RPC-over-RDMA header decoder), the NFS ones (`nfs3`, `mount-fh`, `nfsd`) and `mountd`
//! (MOUNT v3 alone, for a handle given as hex). The RPC workload is the harness's own
//! program, documented in [`userspace_harness::rpc`]. Errors are one line on stderr; exit
//! status 0 on success, 1 on errors (including data verification failures), 2 for bad
//! arguments, 3 when the connection was lost.
#![deny(clippy::undocumented_unsafe_blocks)]

use std::io::{self, BufRead, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use userspace_harness::rpc::Workload;
use userspace_harness::run::{self, ClientOpts, DemoOpts, Print, ServerOpts};
use userspace_harness::trace::Tracer;
use userspace_harness::verbs::accept::ConnLimits;
use userspace_harness::{decode, nfs3, nfs4, parse_secs, report, verbs};

/// Userspace harness for the krpc-rdma RPC-over-RDMA core.
#[derive(Parser)]
#[command(name = "userspace-harness", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the harness's RPC program (NULL / WRITE / READ / ECHO) over RPC-over-RDMA.
    ///
    /// One thread per connection, each with its own store (READ returns what WRITE wrote;
    /// WRITE data is checked against the pattern of its offset). Prints one line per
    /// connection and the totals and transport counters at exit (after --count connections,
    /// --duration, SIGINT or SIGTERM).
    Server {
        /// Address to listen on: IP[:PORT] (port 20049 by default).
        #[arg(long, value_name = "IP[:PORT]", value_parser = parse_addr)]
        listen: SocketAddr,
        /// Stop after serving N connections.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        /// Stop after SECS seconds.
        #[arg(long, value_name = "SECS", value_parser = parse_secs)]
        duration: Option<Duration>,
        /// Registered page arena shared by the connections, in MiB.
        #[arg(long, value_name = "MIB", default_value_t = 128,
              value_parser = clap::value_parser!(u32).range(4..=4096))]
        arena_mib: u32,
        #[command(flatten)]
        trace: TraceArg,
        /// Connection limit.
        #[command(flatten)]
        limits: ConnLimits,
    },
    /// Run a workload against a server and report ops/s, MB/s, latency and counters.
    Client {
        /// The server: IP[:PORT] (port 20049 by default).
        #[arg(long, value_name = "IP[:PORT]", value_parser = parse_addr)]
        server: SocketAddr,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// A server thread and a client in one process, over rxe loopback; same options and
    /// report as `client`.
    Bench {
        /// Address of the server thread: IP[:PORT] (default: $RXE_IP, port 20049).
        #[arg(long, value_name = "IP[:PORT]", value_parser = parse_addr)]
        addr: Option<SocketAddr>,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// Serve a local directory over NFSv3 on RPC-over-RDMA, MOUNT v3 over TCP (crate
    /// krpc-rdma-nfsd); one line per connection and the totals at SIGINT / SIGTERM.
    Nfsd(krpc_rdma_nfsd::NfsdArgs),
    /// Serve MOUNT v3 alone over TCP: one export PATH whose MNT answers a given root file
    /// handle (the kernel module's NFSv3 server has no MOUNT protocol of its own).
    ///
    /// The handle is --fh HEX, or the hex in --fh-file FILE read at every MNT (e.g.
    /// /sys/module/krpc_rdma/parameters/nfsd_root_fh). MNT of any other path:
    /// MNT3ERR_NOENT; a handle file unreadable or invalid at MNT time: MNT3ERR_SERVERFAULT.
    /// Prints one line when serving; runs until SIGINT / SIGTERM, then exits 0.
    Mountd(krpc_rdma_nfsd::fixed_export::MountdArgs),
    /// Server and client in one run: WRITE and READ with DDP at several sizes, NULL, a Long
    /// Call / Long Reply, throughput, and which chunk types were used.
    Demo {
        /// Address of the server thread: IP[:PORT] (default: $RXE_IP, port 20049).
        #[arg(long, value_name = "IP[:PORT]", value_parser = parse_addr)]
        addr: Option<SocketAddr>,
        #[command(flatten)]
        trace: TraceArg,
    },
    /// Decode RPC-over-RDMA v1 messages: hex on stdin, one message (the bytes of one Send,
    /// transport header then payload) per line; one JSON object per line on stdout.
    ///
    /// Blank lines and lines starting with '#' are skipped. Whitespace and ':' inside a
    /// line are ignored, an optional leading "0x" is accepted. Undecodable input gives
    /// {"error": "<reason>"} on its line; the tool exits 0 after reading all input.
    Decode,
    /// Open the RDMA device, register a page arena and print the device limits (a smoke
    /// check of the verbs provider).
    #[command(hide = true)]
    VerbsSmoke,
    /// An NFSv3 client over RPC-over-RDMA (e.g. to the Linux kernel's knfsd on port 20049).
    ///
    /// The root file handle comes from MOUNT v3 over TCP (rpcbind, mountd); NFS runs over
    /// RDMA with AUTH_SYS uid 0. File data moves by direct data placement (RFC 8267): WRITE
    /// data as read chunks, READ data through write chunks. NFS errors print as their names
    /// (NFS3ERR_NOENT ...) and exit 1.
    Nfs3 {
        #[command(flatten)]
        mount: MountArgs,
        /// The NFS/RDMA port.
        #[arg(long, value_name = "PORT", default_value_t = verbs::DEFAULT_PORT)]
        port: u16,
        /// READ / WRITE calls in flight for put and get.
        #[arg(long, value_name = "N", default_value_t = 8,
              value_parser = clap::value_parser!(u32).range(1..=64))]
        depth: u32,
        #[command(flatten)]
        run: RunArgs,
        /// A call the server answers NFS3ERR_JUKEBOX (busy, e.g. a restarted knfsd refilling
        /// its export cache; the call was not performed) is sent again with a new XID SECS
        /// after the answer (as the Linux client: 5 s), until --give-up.
        #[arg(long, value_name = "SECS", default_value = "5", value_parser = parse_secs)]
        jukebox_delay: Duration,
        #[command(subcommand)]
        op: Nfs3Op,
    },
    /// An NFSv4.1 client over RPC-over-RDMA (e.g. to knfsd on port 20049), its session's
    /// back channel on the same connection (RFC 8167).
    ///
    /// EXCHANGE_ID, CREATE_SESSION with the connection as back channel, RECLAIM_COMPLETE;
    /// callbacks (CB_NULL, CB_SEQUENCE, CB_RECALL) are answered on the connection. The export
    /// is a path from the server's root (no MOUNT protocol). File data move by direct data
    /// placement (RFC 8267). Delegations still held are returned at the end, then the session
    /// and client ID are destroyed. NFS errors print as their names (NFS4ERR_NOENT ...) and
    /// exit 1. No reconnection: a lost connection ends the command (exit 3).
    Nfs4 {
        /// The server's IP address.
        #[arg(long, value_name = "IP")]
        server: IpAddr,
        /// The export's path in the server's NFSv4 name space ("/": its root; knfsd in the
        /// project's VM exports /export as the root, fsid=0).
        #[arg(long, value_name = "PATH", default_value = "/")]
        export: String,
        /// The NFS/RDMA port.
        #[arg(long, value_name = "PORT", default_value_t = verbs::DEFAULT_PORT)]
        port: u16,
        /// READ / WRITE calls in flight for put and get (at most the fore-channel slots the
        /// server grants).
        #[arg(long, value_name = "N", default_value_t = 8,
              value_parser = clap::value_parser!(u32).range(1..=16))]
        depth: u32,
        /// No progress lines or summary on stderr.
        #[arg(long, short)]
        quiet: bool,
        #[command(flatten)]
        trace: TraceArg,
        /// Give up on a call the server answers NFS4ERR_GRACE or NFS4ERR_DELAY (sent again
        /// every second) after SECS.
        #[arg(long, value_name = "SECS", default_value = "120", value_parser = parse_secs)]
        give_up: Duration,
        #[command(subcommand)]
        op: nfs4::Nfs4Op,
    },
    /// MOUNT v3 over TCP (rpcbind, mountd) and print the export's root file handle in hex
    /// (for krpc_rdma.ko's `nfs_fh=`); then UMNT.
    MountFh {
        #[command(flatten)]
        mount: MountArgs,
    },
}

/// What `nfs3` does. Remote paths are relative to the export's root.
#[derive(Subcommand)]
enum Nfs3Op {
    /// Copy local file LOCAL to REMOTE (created or truncated).
    Put {
        /// The local file.
        local: PathBuf,
        /// The remote path.
        remote: String,
    },
    /// Copy REMOTE to local file LOCAL.
    Get {
        /// The remote path.
        remote: String,
        /// The local file.
        local: PathBuf,
    },
    /// List directory DIR (READDIRPLUS), one entry per line, sorted by name.
    Ls {
        /// The remote directory.
        #[arg(default_value = "/")]
        dir: String,
    },
    /// Print the attributes of PATH (GETATTR).
    Stat {
        /// The remote path.
        path: String,
    },
    /// Make directory PATH.
    Mkdir {
        /// The remote path.
        path: String,
    },
    /// Remove file PATH.
    Rm {
        /// The remote path.
        path: String,
    },
    /// Make a symbolic link: ln -s TARGET PATH.
    Ln {
        /// Symbolic (the only kind supported).
        #[arg(short = 's', required = true)]
        symbolic: bool,
        /// What the link points to.
        target: String,
        /// The link to create.
        path: String,
    },
    /// Print the target of symbolic link PATH.
    Readlink {
        /// The remote path.
        path: String,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum WorkloadArg {
    /// NULL calls.
    Null,
    /// WRITE calls (the data as a DDP region: a read chunk when large).
    Write,
    /// READ calls (the reply data through a write chunk when large).
    Read,
}

/// The workload options of `client` and `bench`.
/// `--trace FILE`, for every command that runs the transport.
#[derive(Args, Clone, Default)]
struct TraceArg {
    /// Write every transport header sent and received to FILE (JSON lines).
    #[arg(long = "trace", value_name = "FILE")]
    file: Option<PathBuf>,
}

/// `--server IP --export PATH`: where MOUNT v3 over TCP finds the export.
#[derive(Args, Clone)]
struct MountArgs {
    /// The server's IP address.
    #[arg(long, value_name = "IP")]
    server: IpAddr,
    /// The export to mount.
    #[arg(long, value_name = "PATH", default_value = "/export")]
    export: String,
}

#[derive(Args)]
struct LoadArgs {
    /// The RPCs to make.
    #[arg(long, value_enum, default_value = "null")]
    workload: WorkloadArg,
    /// Bytes per WRITE / READ (suffixes k and m: 4k, 64k, 1m; at most 2m).
    #[arg(long, value_name = "BYTES", default_value = "4k", value_parser = parse_size)]
    size: usize,
    /// Calls in flight (at most 64, the credits asked for).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(run::MAX_DEPTH)))]
    depth: u32,
    /// Make N calls (default 1000 when no --duration).
    #[arg(long, value_name = "N", conflicts_with = "duration",
          value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// Run for SECS seconds.
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    duration: Option<Duration>,
    /// Print the report as one JSON line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    run: RunArgs,
}

/// What every long-running client command takes: progress, tracing, reconnection.
#[derive(Args)]
struct RunArgs {
    /// No progress lines on stderr.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    trace: TraceArg,
    #[command(flatten)]
    persist: PersistArgs,
}

/// How a client rides out a lost connection (e.g. a server restart): the options of
/// `client`, `bench` and `nfs3`. By default it reconnects, as NFS users expect of a hard
/// mount, but gives up after a stated time.
#[derive(Args)]
struct PersistArgs {
    /// Give up after SECS without a connection. On a lost connection (e.g. the server
    /// restarted) the client says so on stderr, reconnects (backing off 100 ms doubling to
    /// 30 s), prints one line per reconnect and resends every call owed a reply with its
    /// XID; nfs3 also sends UNSTABLE WRITEs again when the server's write verifier changed,
    /// and gives up on a call the server answers NFS3ERR_JUKEBOX for SECS. (--reconnect SECS
    /// is the former spelling.)
    #[arg(long = "give-up", alias = "reconnect", value_name = "SECS",
          default_value = DEFAULT_GIVE_UP_SECS, value_parser = parse_secs)]
    give_up: Duration,
    /// Do not reconnect: a lost connection ends the command with exit status 3.
    #[arg(long)]
    no_reconnect: bool,
}

/// The default of `--give-up`: `krpc_rdma_session::DEFAULT_GIVE_UP` (a test keeps them equal).
const DEFAULT_GIVE_UP_SECS: &str = "120";

impl PersistArgs {
    /// How long to reconnect for; `None` with `--no-reconnect`.
    fn reconnect(&self) -> Option<Duration> {
        (!self.no_reconnect).then_some(self.give_up)
    }
}

/// `IP` or `IP:PORT` (`[v6]:PORT`); the port defaults to 20049.
fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    s.trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, verbs::DEFAULT_PORT))
        .map_err(|_| format!("{s:?} is not an IP address or IP:PORT"))
}

/// A byte count with an optional k / m suffix (KiB / MiB).
fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("ib")
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(&t);
    let (num, mul) = if let Some(n) = t.strip_suffix('k') {
        (n, 1usize << 10)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 1 << 20)
    } else {
        (t, 1)
    };
    let n: usize = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (bytes, or with k / m: 4k, 64k, 1m)"))?;
    let bytes = n
        .checked_mul(mul)
        .filter(|&b| (1..=run::MAX_SIZE).contains(&b))
        .ok_or_else(|| format!("{s:?}: the size must be 1 byte to 2m"))?;
    Ok(bytes)
}

/// Seconds, possibly fractional, more than 0.
fn fail(e: &dyn std::fmt::Display, code: u8) -> ExitCode {
    eprintln!("userspace-harness: {e}");
    ExitCode::from(code)
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // clap's message, up to its usage block, as one line.
            let text = e.to_string();
            let head = text.split("\n\n").next().unwrap_or("bad arguments");
            let msg = head.split_whitespace().collect::<Vec<_>>().join(" ");
            let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
            eprintln!("userspace-harness: {msg} (try --help)");
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Command::Decode => run_decode(),
        Command::VerbsSmoke => run_verbs_smoke(),
        Command::Server {
            listen,
            count,
            duration,
            arena_mib,
            trace,
            limits,
        } => run_server(listen, count, duration, arena_mib, trace.file, limits),
        Command::Client { server, load } => run_client(server, &load, false),
        Command::Bench { addr, load } => match addr.map_or_else(default_addr, Ok) {
            Ok(a) => run_client(a, &load, true),
            Err(e) => fail(&e, 2),
        },
        Command::Nfs3 {
            mount: MountArgs { server, export },
            port,
            depth,
            run:
                RunArgs {
                    quiet,
                    trace,
                    persist,
                },
            jukebox_delay,
            op,
        } => {
            let trace = match open_trace(trace.file.as_ref()) {
                Ok(t) => t,
                Err(e) => return fail(&e, 1),
            };
            let o = nfs3::ConnectOpts {
                server,
                port,
                export,
                nfs: nfs3::Nfs3Opts {
                    depth: depth as usize,
                    progress: !quiet,
                    reconnect: !persist.no_reconnect,
                    give_up: persist.give_up,
                    jukebox_delay,
                },
            };
            match run_nfs3(&o, trace, op) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e, e.exit_code()),
            }
        }
        Command::Nfs4 {
            server,
            export,
            port,
            depth,
            quiet,
            trace,
            give_up,
            op,
        } => {
            let trace = match open_trace(trace.file.as_ref()) {
                Ok(t) => t,
                Err(e) => return fail(&e, 1),
            };
            let a = nfs4::Nfs4Args {
                server,
                port,
                export,
                nfs: krpc_rdma_session::nfs4::Nfs4Opts {
                    depth: depth as usize,
                    progress: !quiet,
                    give_up,
                    owner: None,
                },
                quiet,
            };
            match nfs4::run(&a, trace, op) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e, e.exit_code()),
            }
        }
        Command::MountFh {
            mount: MountArgs { server, export },
        } => match userspace_harness::mount::mount(server, &export) {
            Ok(m) => {
                println!("{}", userspace_harness::hex::encode(&m.root_fh));
                let _ = userspace_harness::mount::umount(server, &export);
                ExitCode::SUCCESS
            }
            Err(e) => fail(&format!("MOUNT {export}: {e}"), 1),
        },
        Command::Nfsd(a) => match open_trace(a.trace.as_ref()) {
            Ok(t) => {
                let wrap = userspace_harness::trace::Traced::new;
                let inner = userspace_harness::trace::Traced::inner_mut;
                let tw = t.clone();
                let qpw = krpc_rdma_nfsd::QpWrap {
                    wrap: Box::new(move |q, p| wrap(q, tw.clone(), p)),
                    inner,
                };
                let r = krpc_rdma_nfsd::run(&a, qpw);
                let _ = t.map(|t| t.flush());
                r.map_or_else(|e| fail(&e, 1), |()| ExitCode::SUCCESS)
            }
            Err(e) => fail(&e, 1),
        },
        Command::Mountd(a) => {
            verbs::signals::install();
            match krpc_rdma_nfsd::fixed_export::run_mountd(&a, &verbs::signals::STOP) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e, e.exit_code()),
            }
        }
        Command::Demo { addr, trace } => {
            let addr = match addr.map_or_else(default_addr, Ok) {
                Ok(a) => a,
                Err(e) => return fail(&e, 2),
            };
            let trace = match open_trace(trace.file.as_ref()) {
                Ok(t) => t,
                Err(e) => return fail(&e, 1),
            };
            match run::demo(&DemoOpts { addr, trace }) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e, e.exit_code()),
            }
        }
    }
}

fn run_nfs3(
    o: &nfs3::ConnectOpts,
    trace: Option<Arc<Tracer>>,
    op: Nfs3Op,
) -> Result<(), nfs3::NfsError> {
    let mut c = nfs3::connect(o, trace)?;
    let th = c.session().thresholds();
    let inline = format!(
        "inline {}/{} B, {} credits",
        th.send,
        th.recv,
        c.session().credits()
    );
    let r = nfs3_op(&mut c, &inline, op);
    let (reconnects, resent) = c.session().reconnect_stats();
    if reconnects > 0 || c.jukebox_retries() > 0 {
        eprintln!(
            "userspace-harness: {reconnects} reconnects, {resent} calls resent, {} calls sent \
             again after NFS3ERR_JUKEBOX",
            c.jukebox_retries()
        );
    }
    r
}

fn nfs3_op(c: &mut nfs3::Nfs3Client, inline: &str, op: Nfs3Op) -> Result<(), nfs3::NfsError> {
    let mut out = io::stdout().lock();
    let line = |out: &mut io::StdoutLock<'_>, s: &str| {
        writeln!(out, "{s}").map_err(|e| nfs3::NfsError::Other(format!("stdout: {e}")))
    };
    match op {
        Nfs3Op::Put { local, remote } => {
            let t = c.put(&local, &remote)?;
            let k = c.counters();
            let msg = format!(
                "put {} -> {remote}: {} bytes, {} WRITEs (wsize {}), {:.3} s, {:.2} MB/s; \
                 read chunks {}, bytes exposed to RDMA Read {}; {inline}",
                local.display(),
                t.bytes,
                t.calls,
                c.io_sizes().1,
                t.secs,
                t.mb_per_s(),
                k.read_chunks,
                k.rdma_read_bytes
            );
            line(&mut out, &msg)
        }
        Nfs3Op::Get { remote, local } => {
            let t = c.get(&remote, &local)?;
            let k = c.counters();
            let msg = format!(
                "get {remote} -> {}: {} bytes, {} READs (rsize {}), {:.3} s, {:.2} MB/s; \
                 write chunks {}, reply chunks {}, bytes the server RDMA-Wrote {}; {inline}",
                local.display(),
                t.bytes,
                t.calls,
                c.io_sizes().0,
                t.secs,
                t.mb_per_s(),
                k.write_chunks,
                k.reply_chunks,
                k.rdma_write_bytes
            );
            line(&mut out, &msg)
        }
        Nfs3Op::Ls { dir } => {
            for e in c.ls(&dir)? {
                line(&mut out, &nfs3::format_entry(&e))?;
            }
            Ok(())
        }
        Nfs3Op::Stat { path } => {
            let a = c.stat(&path)?;
            line(&mut out, &nfs3::format_attrs(&a))
        }
        Nfs3Op::Mkdir { path } => c.mkdir(&path),
        Nfs3Op::Rm { path } => c.remove(&path),
        Nfs3Op::Ln {
            symbolic: _,
            target,
            path,
        } => c.symlink(&target, &path),
        Nfs3Op::Readlink { path } => {
            let t = c.readlink(&path)?;
            line(&mut out, &String::from_utf8_lossy(&t))
        }
    }
}

/// `$RXE_IP`:20049.
fn default_addr() -> Result<SocketAddr, String> {
    match std::env::var("RXE_IP") {
        Ok(ip) if !ip.is_empty() => parse_addr(&ip),
        _ => Err("no address: pass --addr IP[:PORT] or set RXE_IP (cargo xtask vm sets it)".into()),
    }
}

fn open_trace(path: Option<&PathBuf>) -> Result<Option<Arc<Tracer>>, String> {
    path.map(|p| Tracer::create(p)).transpose()
}

fn run_server(
    listen: SocketAddr,
    count: Option<u64>,
    duration: Option<Duration>,
    arena_mib: u32,
    trace: Option<PathBuf>,
    limits: ConnLimits,
) -> ExitCode {
    let trace = match open_trace(trace.as_ref()) {
        Ok(t) => t,
        Err(e) => return fail(&e, 1),
    };
    let opts = ServerOpts {
        listen,
        count,
        duration,
        arena_bytes: (arena_mib as usize) << 20,
        trace,
        print: Print::Stdout,
        limits,
    };
    let bound = match run::bind_server(opts) {
        Ok(b) => b,
        Err(e) => return fail(&e, e.exit_code()),
    };
    println!("listening on {listen}");
    let _ = io::stdout().flush();
    match run::serve(bound, &Arc::new(AtomicBool::new(false)), true) {
        Ok(totals) => {
            print!("{}", totals.human());
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e, e.exit_code()),
    }
}

fn run_client(server: SocketAddr, load: &LoadArgs, bench: bool) -> ExitCode {
    let trace = match open_trace(load.run.trace.file.as_ref()) {
        Ok(t) => t,
        Err(e) => return fail(&e, 1),
    };
    let opts = ClientOpts {
        server,
        workload: match load.workload {
            WorkloadArg::Null => Workload::Null,
            WorkloadArg::Write => Workload::Write,
            WorkloadArg::Read => Workload::Read,
        },
        size: load.size,
        depth: load.depth,
        count: load.count,
        duration: load.duration,
        progress: !load.run.quiet,
        trace,
        reconnect: load.run.persist.reconnect(),
    };
    let (report, server_totals) = if bench {
        let print = if load.json {
            Print::Quiet
        } else {
            Print::Stderr
        };
        match run::bench(&opts, print) {
            Ok(r) => (r.report, Some(r.server)),
            Err(e) => return fail(&e, e.exit_code()),
        }
    } else {
        match run::client(&opts) {
            Ok(r) => (r, None),
            Err(e) => return fail(&e, e.exit_code()),
        }
    };
    if load.json {
        let mut v = report.to_json();
        if let (Some(t), Some(o)) = (&server_totals, v.as_object_mut()) {
            // `bench`: where the in-process server's time went.
            o.insert("server_profile".into(), report::profile_json(&t.profile));
        }
        println!("{v}");
    } else {
        print!("{}", report.human());
        if let Some(t) = server_totals {
            print!("{}", t.human());
        }
    }
    if report.errors > 0 {
        return fail(
            &format!(
                "{} of {} calls failed or returned bad data",
                report.errors, report.ops
            ),
            1,
        );
    }
    ExitCode::SUCCESS
}

fn run_verbs_smoke() -> ExitCode {
    let run = || -> Result<(), verbs::VerbsError> {
        let dev = verbs::device::Device::open(None)?;
        let arena = verbs::arena::VerbsArena::new(&dev, 256)?;
        println!(
            "device {}: {:?}; arena of {} pages, lkey {:#x}",
            dev.name(),
            dev.limits(),
            arena.pages(),
            arena.lkey()
        );
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("userspace-harness verbs-smoke: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_decode() -> ExitCode {
    let stdin = io::stdin();
    let stdout = io::stdout();
    match decode_stream(stdin.lock(), stdout.lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("userspace-harness decode: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Reads hex lines from `input` and writes one JSON line per message to `output`.
fn decode_stream(mut input: impl BufRead, mut output: impl Write) -> io::Result<()> {
    let mut line = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        if let Some(value) = decode::decode_line(&line) {
            serde_json::to_writer(&mut output, &value)?;
            output.write_all(b"\n")?;
        }
    }
    output.flush()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use super::{decode_stream, Cli, Command, DEFAULT_GIVE_UP_SECS};

    fn parse(args: &[&str]) -> Command {
        let mut all = vec!["userspace-harness"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).unwrap().command
    }

    /// `client`, `bench` and `nfs3` reconnect unless told `--no-reconnect`, giving up after
    /// the session's default (two minutes) or `--give-up` (`--reconnect`, its former
    /// spelling); `nfs3` retries NFS3ERR_JUKEBOX every 5 s unless told otherwise.
    #[test]
    fn clients_reconnect_by_default_and_give_up_at_the_stated_time() {
        assert_eq!(
            DEFAULT_GIVE_UP_SECS
                .parse::<u64>()
                .ok()
                .map(Duration::from_secs),
            Some(krpc_rdma_session::DEFAULT_GIVE_UP)
        );
        let two_minutes = Some(Duration::from_secs(120));
        let client = |extra: &[&str]| {
            let mut a = vec!["client", "--server", "10.0.2.15"];
            a.extend_from_slice(extra);
            match parse(&a) {
                Command::Client { load, .. } => load.run.persist.reconnect(),
                _ => unreachable!(),
            }
        };
        assert_eq!(client(&[]), two_minutes);
        assert_eq!(
            client(&["--give-up", "7.5"]),
            Some(Duration::from_millis(7500))
        );
        assert_eq!(
            client(&["--reconnect", "30"]),
            Some(Duration::from_secs(30))
        );
        assert_eq!(client(&["--no-reconnect"]), None);
        match parse(&["bench", "--duration", "1"]) {
            Command::Bench { load, .. } => assert_eq!(load.run.persist.reconnect(), two_minutes),
            _ => unreachable!(),
        }
        let nfs3 = |extra: &[&str]| {
            let mut a = vec!["nfs3", "--server", "10.0.2.15"];
            a.extend_from_slice(extra);
            a.push("ls");
            match parse(&a) {
                Command::Nfs3 {
                    run, jukebox_delay, ..
                } => (run.persist.reconnect(), run.persist.give_up, jukebox_delay),
                _ => unreachable!(),
            }
        };
        let five = Duration::from_secs(5);
        assert_eq!(nfs3(&[]), (two_minutes, Duration::from_secs(120), five));
        assert_eq!(
            nfs3(&["--no-reconnect", "--give-up", "9", "--jukebox-delay", "0.5"]),
            (None, Duration::from_secs(9), Duration::from_millis(500))
        );
        assert!(Cli::try_parse_from([
            "userspace-harness",
            "client",
            "--server",
            "10.0.2.15",
            "--give-up",
            "0"
        ])
        .is_err());
    }

    #[test]
    fn stream_skips_blank_and_comment_lines_and_survives_garbage() {
        let input = b"# comment\n\n00000001000000010000002000000000000000000000000000000000\nzz\n\xff\xfe\n";
        let mut out = Vec::new();
        decode_stream(&input[..], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(first["xid"], 1);
        assert_eq!(first["credit"], 32);
        for l in &lines[1..] {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert!(v["error"].is_string(), "{l}");
        }
    }
}
