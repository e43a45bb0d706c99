//! An ONC RPC v2 client over TCP (RFC 5531), for the side protocols NFS needs before it can
//! run over RDMA: rpcbind (the portmapper) and MOUNT ([`crate::mount`]).
//!
//! * Record marking (RFC 5531 §11): each message is a record of fragments, each behind a
//!   4-byte mark whose high bit says "last fragment" and whose low 31 bits are the fragment's
//!   length. Calls go out as one fragment; a reply may come in several, and a record longer
//!   than [`ClientOptions::max_record`] (default [`MAX_RECORD`], 1 MiB) is an error.
//! * Timeouts: connecting, and each call as a whole (send + reply), are bounded by
//!   [`ClientOptions::timeout`] (default [`DEFAULT_TIMEOUT`], 5 s).
//! * [`RpcClient::call`] matches the reply's XID, skipping stale replies (to calls that timed
//!   out earlier), decodes the reply header with [`onc_rpc::rpc::ReplyHeader::decode`] and
//!   turns everything but an accepted SUCCESS into a typed [`RpcError`].
//! * Reserved source port: Linux's `rpc.mountd` and knfsd default to the `secure` export
//!   option, which refuses requests from source ports ≥ 1024. So the client first tries to
//!   bind a reserved port, [`RESERVED_PORTS`] (665..=1023, like libtirpc's
//!   `bindresvport`, above the well-known services below 665), starting at a point that
//!   depends on the process id and the time so that consecutive clients do not collide with
//!   each other's TIME_WAIT. Binding one needs root (`CAP_NET_BIND_SERVICE`): when that is
//!   refused (`EACCES`/`EPERM`) or every port is taken, it connects from an ordinary
//!   ephemeral port instead, which servers exporting with `insecure` accept.
//!   [`RpcClient::local_addr`] says which one it got.
//!
//! A transport failure (I/O error, timeout, end of stream, oversized record) leaves the
//! byte stream at an unknown record boundary, so it poisons the client: later calls fail
//! with [`RpcError::Poisoned`]. RPC-level errors (PROG_UNAVAIL, AUTH_ERROR, …) do not.
#![deny(clippy::undocumented_unsafe_blocks)]

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use onc_rpc::rpc::{AcceptStat, Auth, CallHeader, Rejected, ReplyHeader};
use onc_rpc::xdr::{Decoder, Encoder, XdrError};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

pub mod mount;

/// Default connect and per-call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default cap on one reply record (all its fragments together).
pub const MAX_RECORD: usize = 1 << 20;
/// Source ports tried when binding a reserved port.
pub const RESERVED_PORTS: RangeInclusive<u16> = 665..=1023;
/// The "last fragment" bit of a record mark.
const LAST_FRAGMENT: u32 = 1 << 31;

/// How to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// Connect timeout, and the time one call may take (send and whole reply).
    pub timeout: Duration,
    /// Largest reply record accepted.
    pub max_record: usize,
    /// Try a reserved source port first (see the module documentation).
    pub reserved_port: bool,
}

impl Default for ClientOptions {
    /// 5 s, 1 MiB, reserved port tried.
    fn default() -> Self {
        ClientOptions {
            timeout: DEFAULT_TIMEOUT,
            max_record: MAX_RECORD,
            reserved_port: true,
        }
    }
}

/// Program, version and procedure of a call, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallId {
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure.
    pub proc_: u32,
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "program {} version {} procedure {}",
            self.prog, self.vers, self.proc_
        )
    }
}

/// Why a call failed.
#[derive(Debug)]
pub enum RpcError {
    /// The TCP connection could not be made.
    Connect {
        /// The server.
        peer: SocketAddr,
        /// Why.
        error: io::Error,
    },
    /// Sending or receiving failed (a timeout is an error of kind `TimedOut` or
    /// `WouldBlock`).
    Io {
        /// The server.
        peer: SocketAddr,
        /// What was being done.
        what: &'static str,
        /// Why.
        error: io::Error,
    },
    /// No whole reply within the timeout.
    Timeout {
        /// The server.
        peer: SocketAddr,
        /// The call.
        call: CallId,
        /// The timeout.
        after: Duration,
    },
    /// The server closed the connection.
    Closed {
        /// The server.
        peer: SocketAddr,
    },
    /// A reply record larger than the cap.
    RecordTooLong {
        /// Bytes announced so far.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// An earlier transport failure left the stream unusable.
    Poisoned,
    /// The call could not be encoded.
    Encode(XdrError),
    /// The reply header (of a reply with our XID) is malformed.
    BadReply(XdrError),
    /// PROG_UNAVAIL: the server does not run the program.
    ProgUnavail(CallId),
    /// PROG_MISMATCH: the program runs, not this version.
    ProgMismatch {
        /// The call.
        call: CallId,
        /// Lowest version supported.
        low: u32,
        /// Highest version supported.
        high: u32,
    },
    /// PROC_UNAVAIL.
    ProcUnavail(CallId),
    /// GARBAGE_ARGS: the server could not decode the arguments.
    GarbageArgs(CallId),
    /// SYSTEM_ERR.
    SystemErr(CallId),
    /// MSG_DENIED / RPC_MISMATCH.
    RpcMismatch {
        /// The call.
        call: CallId,
        /// Lowest RPC version supported.
        low: u32,
        /// Highest.
        high: u32,
    },
    /// MSG_DENIED / AUTH_ERROR with its `auth_stat`.
    AuthError {
        /// The call.
        call: CallId,
        /// The `auth_stat` ([`auth_stat_name`]).
        stat: u32,
    },
}

/// The RFC 5531 (and RFC 2203) name of an `auth_stat`.
pub fn auth_stat_name(stat: u32) -> &'static str {
    match stat {
        0 => "AUTH_OK",
        1 => "AUTH_BADCRED",
        2 => "AUTH_REJECTEDCRED",
        3 => "AUTH_BADVERF",
        4 => "AUTH_REJECTEDVERF",
        5 => "AUTH_TOOWEAK",
        6 => "AUTH_INVALIDRESP",
        7 => "AUTH_FAILED",
        8 => "AUTH_KERB_GENERIC",
        9 => "AUTH_TIMEEXPIRE",
        10 => "AUTH_TKT_FILE",
        11 => "AUTH_DECODE",
        12 => "AUTH_NET_ADDR",
        13 => "RPCSEC_GSS_CREDPROBLEM",
        14 => "RPCSEC_GSS_CTXPROBLEM",
        _ => "unknown auth_stat",
    }
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RpcError::Connect { peer, error } => write!(f, "cannot connect to {peer}: {error}"),
            RpcError::Io { peer, what, error } => write!(f, "{what} {peer}: {error}"),
            RpcError::Timeout { peer, call, after } => write!(
                f,
                "no reply from {peer} to {call} within {:.1} s",
                after.as_secs_f64()
            ),
            RpcError::Closed { peer } => write!(f, "{peer} closed the connection"),
            RpcError::RecordTooLong { len, max } => write!(
                f,
                "reply record of at least {len} bytes exceeds the cap of {max}"
            ),
            RpcError::Poisoned => write!(
                f,
                "connection unusable after an earlier transport error (reconnect)"
            ),
            RpcError::Encode(e) => write!(f, "encoding the call: {e}"),
            RpcError::BadReply(e) => write!(f, "malformed reply header: {e}"),
            RpcError::ProgUnavail(c) => {
                write!(
                    f,
                    "PROG_UNAVAIL: the server does not run program {}",
                    c.prog
                )
            }
            RpcError::ProgMismatch { call, low, high } => write!(
                f,
                "PROG_MISMATCH: program {} version {} not supported (versions {low}..={high})",
                call.prog, call.vers
            ),
            RpcError::ProcUnavail(c) => write!(f, "PROC_UNAVAIL: {c}"),
            RpcError::GarbageArgs(c) => {
                write!(
                    f,
                    "GARBAGE_ARGS: the server could not decode the arguments of {c}"
                )
            }
            RpcError::SystemErr(c) => write!(f, "SYSTEM_ERR: server error in {c}"),
            RpcError::RpcMismatch { call, low, high } => write!(
                f,
                "call denied (RPC_MISMATCH: RPC versions {low}..={high}) for {call}"
            ),
            RpcError::AuthError { call, stat } => write!(
                f,
                "call denied ({}, auth_stat {stat}) for {call}",
                auth_stat_name(*stat)
            ),
        }
    }
}

impl std::error::Error for RpcError {}

/// One TCP connection to an RPC server.
#[derive(Debug)]
pub struct RpcClient {
    stream: TcpStream,
    peer: SocketAddr,
    opts: ClientOptions,
    next_xid: u32,
    poisoned: bool,
}

impl RpcClient {
    /// Connect with the default options.
    ///
    /// # Errors
    /// [`RpcError::Connect`].
    pub fn connect(peer: SocketAddr) -> Result<RpcClient, RpcError> {
        RpcClient::connect_with(peer, ClientOptions::default())
    }

    /// Connect with `opts`.
    ///
    /// # Errors
    /// [`RpcError::Connect`].
    pub fn connect_with(peer: SocketAddr, opts: ClientOptions) -> Result<RpcClient, RpcError> {
        let connect_err = |error| RpcError::Connect { peer, error };
        let stream = if opts.reserved_port {
            match connect_reserved(peer, opts.timeout) {
                Ok(Some(s)) => s,
                Ok(None) => TcpStream::connect_timeout(&peer, opts.timeout).map_err(connect_err)?,
                Err(e) => return Err(connect_err(e)),
            }
        } else {
            TcpStream::connect_timeout(&peer, opts.timeout).map_err(connect_err)?
        };
        stream.set_nodelay(true).map_err(connect_err)?;
        stream
            .set_write_timeout(Some(opts.timeout))
            .map_err(connect_err)?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.subsec_nanos());
        Ok(RpcClient {
            stream,
            peer,
            opts,
            next_xid: seed ^ std::process::id().rotate_left(16),
            poisoned: false,
        })
    }

    /// The server's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Our end of the connection (a port below 1024 when a reserved port was bound).
    ///
    /// # Errors
    /// `getsockname` failed.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.stream.local_addr()
    }

    /// Call `prog`/`vers`/`proc_` with credential `cred` (verifier `AUTH_NONE`) and the
    /// XDR-encoded `args`; the XDR-encoded results of an accepted SUCCESS reply.
    ///
    /// # Errors
    /// Transport failures (which poison the client), a malformed reply header, and every
    /// reply other than an accepted SUCCESS ([`RpcError`]).
    pub fn call(
        &mut self,
        prog: u32,
        vers: u32,
        proc_: u32,
        cred: Auth,
        args: &[u8],
    ) -> Result<Vec<u8>, RpcError> {
        if self.poisoned {
            return Err(RpcError::Poisoned);
        }
        let call = CallId { prog, vers, proc_ };
        let xid = self.next_xid;
        self.next_xid = self.next_xid.wrapping_add(1);
        let header = CallHeader::new(xid, prog, vers, proc_, cred);
        let mut e = Encoder::new();
        e.u32(0); // the record mark, filled in below
        header.encode(&mut e);
        e.raw(args);
        let mut msg = e.finish().map_err(RpcError::Encode)?;
        let body = msg.len().saturating_sub(4);
        let mark = match u32::try_from(body) {
            Ok(n) if n < LAST_FRAGMENT => LAST_FRAGMENT | n,
            _ => {
                return Err(RpcError::Encode(XdrError::TooLong {
                    what: "RPC call record",
                    len: body,
                    max: (LAST_FRAGMENT - 1) as usize,
                }))
            }
        };
        if let Some(m) = msg.get_mut(..4) {
            m.copy_from_slice(&mark.to_be_bytes());
        }
        let deadline = Instant::now() + self.opts.timeout;
        let sent = self
            .stream
            .write_all(&msg)
            .and_then(|()| self.stream.flush());
        if let Err(error) = sent {
            self.poisoned = true;
            return Err(self.io_err("sending to", call, error));
        }
        loop {
            let record = match self.read_record(deadline) {
                Ok(r) => r,
                Err(e) => {
                    self.poisoned = true;
                    return Err(match e {
                        RpcError::Io { error, .. } if is_timeout(&error) => RpcError::Timeout {
                            peer: self.peer,
                            call,
                            after: self.opts.timeout,
                        },
                        e => e,
                    });
                }
            };
            // A reply to an earlier call that timed out (or anything not addressed to this
            // call): skip it.
            let mut d = Decoder::new(&record);
            if d.u32().ok() != Some(xid) {
                continue;
            }
            let mut d = Decoder::new(&record);
            let reply = ReplyHeader::decode(&mut d).map_err(RpcError::BadReply)?;
            return match reply {
                ReplyHeader::Accepted { stat, .. } => match stat {
                    AcceptStat::Success => Ok(record.get(d.pos()..).unwrap_or_default().to_vec()),
                    AcceptStat::ProgUnavail => Err(RpcError::ProgUnavail(call)),
                    AcceptStat::ProgMismatch { low, high } => {
                        Err(RpcError::ProgMismatch { call, low, high })
                    }
                    AcceptStat::ProcUnavail => Err(RpcError::ProcUnavail(call)),
                    AcceptStat::GarbageArgs => Err(RpcError::GarbageArgs(call)),
                    AcceptStat::SystemErr => Err(RpcError::SystemErr(call)),
                },
                ReplyHeader::Denied { why, .. } => Err(match why {
                    Rejected::RpcMismatch { low, high } => {
                        RpcError::RpcMismatch { call, low, high }
                    }
                    Rejected::AuthError(stat) => RpcError::AuthError { call, stat },
                }),
            };
        }
    }

    fn io_err(&self, what: &'static str, call: CallId, error: io::Error) -> RpcError {
        if is_timeout(&error) {
            RpcError::Timeout {
                peer: self.peer,
                call,
                after: self.opts.timeout,
            }
        } else {
            RpcError::Io {
                peer: self.peer,
                what,
                error,
            }
        }
    }

    /// One whole record (all fragments), by `deadline`.
    fn read_record(&mut self, deadline: Instant) -> Result<Vec<u8>, RpcError> {
        let mut record = Vec::new();
        loop {
            let mut mark = [0u8; 4];
            self.read_exact_by(&mut mark, deadline)?;
            let mark = u32::from_be_bytes(mark);
            let len = (mark & !LAST_FRAGMENT) as usize;
            let total = record.len().saturating_add(len);
            if total > self.opts.max_record {
                return Err(RpcError::RecordTooLong {
                    len: total,
                    max: self.opts.max_record,
                });
            }
            let start = record.len();
            record.resize(total, 0);
            if let Some(frag) = record.get_mut(start..) {
                self.read_exact_by(frag, deadline)?;
            }
            if mark & LAST_FRAGMENT != 0 {
                return Ok(record);
            }
        }
    }

    /// `read_exact` with the socket's read timeout set to what is left until `deadline`.
    fn read_exact_by(&mut self, mut buf: &mut [u8], deadline: Instant) -> Result<(), RpcError> {
        let peer = self.peer;
        let io = |error| RpcError::Io {
            peer,
            what: "receiving from",
            error,
        };
        while !buf.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io(io::Error::from(io::ErrorKind::TimedOut)));
            }
            self.stream.set_read_timeout(Some(left)).map_err(io)?;
            match self.stream.read(buf) {
                Ok(0) => return Err(RpcError::Closed { peer }),
                Ok(n) => buf = std::mem::take(&mut buf).get_mut(n..).unwrap_or_default(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
        }
        Ok(())
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

// ---------------------------------------------------------------------------------------
// Connecting from a reserved port (std cannot bind before connecting: socket2).

/// Connect from a port in [`RESERVED_PORTS`]: `Ok(None)` when no reserved port can be had
/// (not permitted, or all taken), so the caller connects from any port.
fn connect_reserved(peer: SocketAddr, timeout: Duration) -> io::Result<Option<TcpStream>> {
    let n = u32::from(RESERVED_PORTS.end() - RESERVED_PORTS.start()) + 1;
    let seed = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    for i in 0..n {
        let port = RESERVED_PORTS.start() + ((seed.wrapping_add(i)) % n) as u16;
        let fd = socket_for(peer)?;
        match bind_port(&fd, peer, port) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Ok(None),
            Err(e) => return Err(e),
        }
        match connect_fd(&fd, peer, timeout) {
            Ok(()) => return Ok(Some(TcpStream::from(fd))),
            // The same (source port, server) pair is still in TIME_WAIT: another port.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::AddrInUse | io::ErrorKind::AddrNotAvailable
                ) =>
            {
                continue
            }
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

fn socket_for(peer: SocketAddr) -> io::Result<Socket> {
    Socket::new(Domain::for_address(peer), Type::STREAM, Some(Protocol::TCP))
}

/// Bind `s` to the wildcard address of `peer`'s family and `port`.
fn bind_port(s: &Socket, peer: SocketAddr, port: u16) -> io::Result<()> {
    let local: SocketAddr = match peer {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, port).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, port).into(),
    };
    s.bind(&SockAddr::from(local))
}

/// Connect within `timeout` (non-blocking connect and poll, then back to blocking).
fn connect_fd(s: &Socket, peer: SocketAddr, timeout: Duration) -> io::Result<()> {
    s.connect_timeout(&SockAddr::from(peer), timeout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    /// Read one call record from `s`: (xid, prog, vers, proc, args).
    fn read_call(s: &mut TcpStream) -> (u32, u32, u32, u32, Vec<u8>) {
        let mut m = [0u8; 4];
        s.read_exact(&mut m).unwrap();
        let m = u32::from_be_bytes(m);
        assert!(m & LAST_FRAGMENT != 0);
        let mut b = vec![0u8; (m & !LAST_FRAGMENT) as usize];
        s.read_exact(&mut b).unwrap();
        let mut d = Decoder::new(&b);
        let h = CallHeader::decode(&mut d).unwrap();
        (h.xid, h.prog, h.vers, h.proc_, b[d.pos()..].to_vec())
    }

    /// Send `msg` as a record split into fragments of at most `frag` bytes.
    fn send_record(s: &mut TcpStream, msg: &[u8], frag: usize) {
        let chunks: Vec<&[u8]> = msg.chunks(frag).collect();
        for (i, c) in chunks.iter().enumerate() {
            let last = if i + 1 == chunks.len() {
                LAST_FRAGMENT
            } else {
                0
            };
            s.write_all(&(last | c.len() as u32).to_be_bytes()).unwrap();
            s.write_all(c).unwrap();
        }
    }

    fn reply(h: ReplyHeader, results: &[u8]) -> Vec<u8> {
        let mut e = Encoder::new();
        h.encode(&mut e);
        e.raw(results);
        e.finish().unwrap()
    }

    fn opts() -> ClientOptions {
        ClientOptions {
            timeout: Duration::from_secs(2),
            max_record: 4096,
            reserved_port: true,
        }
    }

    #[test]
    fn fragments_stale_xids_and_errors() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            // 1: a stale reply first, then the real one in 3-byte... 8-byte fragments.
            let (xid, prog, vers, proc_, args) = read_call(&mut s);
            assert_eq!((prog, vers, proc_), (100_005, 3, 1));
            assert_eq!(args, b"\0\0\0\x03abc\0");
            send_record(&mut s, &reply(ReplyHeader::success(xid ^ 1), b"old!"), 64);
            send_record(&mut s, &reply(ReplyHeader::success(xid), b"results!"), 8);
            // 2: PROG_MISMATCH.
            let (xid, ..) = read_call(&mut s);
            let h = ReplyHeader::Accepted {
                xid,
                verf: Auth::None,
                stat: AcceptStat::ProgMismatch { low: 1, high: 2 },
            };
            send_record(&mut s, &reply(h, &[]), 100);
            // 3: AUTH_ERROR (AUTH_TOOWEAK).
            let (xid, ..) = read_call(&mut s);
            let h = ReplyHeader::Denied {
                xid,
                why: Rejected::AuthError(5),
            };
            send_record(&mut s, &reply(h, &[]), 100);
            // 4: a record over the cap.
            let (xid, ..) = read_call(&mut s);
            send_record(&mut s, &reply(ReplyHeader::success(xid), &[0; 5000]), 3000);
            s
        });
        let mut c = RpcClient::connect_with(addr, opts()).unwrap();
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let port = c.local_addr().unwrap().port();
            assert!(RESERVED_PORTS.contains(&port), "root, yet port {port}");
        }
        let mut args = Encoder::new();
        args.opaque(b"abc");
        let args = args.finish().unwrap();
        assert_eq!(
            c.call(100_005, 3, 1, Auth::None, &args).unwrap(),
            b"results!"
        );
        let e = c.call(100_005, 3, 1, Auth::None, &[]).unwrap_err();
        assert!(
            matches!(
                e,
                RpcError::ProgMismatch {
                    low: 1,
                    high: 2,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("PROG_MISMATCH"));
        let e = c.call(100_005, 3, 1, Auth::None, &[]).unwrap_err();
        assert!(matches!(e, RpcError::AuthError { stat: 5, .. }), "{e}");
        assert!(e.to_string().contains("AUTH_TOOWEAK"), "{e}");
        let e = c.call(100_005, 3, 1, Auth::None, &[]).unwrap_err();
        assert!(
            matches!(e, RpcError::RecordTooLong { max: 4096, .. }),
            "{e}"
        );
        let e = c.call(100_005, 3, 1, Auth::None, &[]).unwrap_err();
        assert!(matches!(e, RpcError::Poisoned), "{e}");
        drop(server.join().unwrap());
    }

    #[test]
    fn timeout_and_closed() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let _ = read_call(&mut s);
            thread::sleep(Duration::from_millis(600));
            drop(s);
            let (mut s, _) = l.accept().unwrap();
            let _ = read_call(&mut s);
        });
        let o = ClientOptions {
            timeout: Duration::from_millis(300),
            ..opts()
        };
        let mut c = RpcClient::connect_with(addr, o.clone()).unwrap();
        let t = Instant::now();
        let e = c.call(1, 1, 0, Auth::None, &[]).unwrap_err();
        assert!(matches!(e, RpcError::Timeout { .. }), "{e}");
        assert!(t.elapsed() < Duration::from_secs(2));
        let mut c = RpcClient::connect_with(addr, o).unwrap();
        let e = c.call(1, 1, 0, Auth::None, &[]).unwrap_err();
        assert!(matches!(e, RpcError::Closed { .. }), "{e}");
        server.join().unwrap();
    }

    #[test]
    fn connect_refused_is_typed() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let e = RpcClient::connect_with(addr, opts()).unwrap_err();
        assert!(matches!(e, RpcError::Connect { .. }), "{e}");
        let e = RpcClient::connect_with(
            addr,
            ClientOptions {
                reserved_port: false,
                ..opts()
            },
        )
        .unwrap_err();
        assert!(matches!(e, RpcError::Connect { .. }), "{e}");
    }
}
