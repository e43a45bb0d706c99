//! The MOUNT protocol version 3 (RFC 1813 appendix I) and the rpcbind / portmapper version 2
//! GETPORT (RFC 1833) that finds it, over TCP with [`crate::RpcClient`]: how an NFSv3 client
//! gets the root file handle of an export before it talks NFS (over RDMA, port 20049).
//!
//! * [`getport`]: portmapper v2 GETPORT (program 100000, procedure 3) on TCP port 111.
//! * [`MountClient`]: a connection to `mountd` (found with GETPORT): NULL, MNT, UMNT.
//! * [`mount`] / [`umount`]: one-shot MNT / UMNT.
//!
//! Calls carry `AUTH_SYS` credentials for uid 0, gid 0 ([`auth_sys_root`]); the machine name
//! is the host name (or "krpc-rdma"). Reply data is decoded with checked XDR and never panics.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use onc_rpc::rpc::{Auth, AuthSys, MAX_MACHINE_NAME};
use onc_rpc::xdr::{Decoder, Encoder, XdrError};

use crate::{ClientOptions, RpcClient, RpcError};

/// rpcbind / portmapper program.
pub const PMAP_PROG: u32 = 100_000;
/// Portmapper version 2.
pub const PMAP_VERS: u32 = 2;
/// `PMAPPROC_GETPORT`.
pub const PMAPPROC_GETPORT: u32 = 3;
/// The portmapper's port.
pub const PMAP_PORT: u16 = 111;
/// `IPPROTO_TCP` as the portmapper spells it.
pub const IPPROTO_TCP: u32 = 6;
/// `IPPROTO_UDP`.
pub const IPPROTO_UDP: u32 = 17;

/// MOUNT program.
pub const MOUNT_PROG: u32 = 100_005;
/// MOUNT version 3.
pub const MOUNT_V3: u32 = 3;
/// `MOUNTPROC3_NULL`.
pub const MOUNTPROC3_NULL: u32 = 0;
/// `MOUNTPROC3_MNT`.
pub const MOUNTPROC3_MNT: u32 = 1;
/// `MOUNTPROC3_UMNT`.
pub const MOUNTPROC3_UMNT: u32 = 3;
/// `MNTPATHLEN`: longest `dirpath`.
pub const MNTPATHLEN: usize = 1024;
/// `FHSIZE3`: longest NFSv3 file handle.
pub const FHSIZE3: usize = 64;
/// Most auth flavors accepted in a MNT reply (the protocol sets no bound; real servers list
/// a handful).
pub const MAX_AUTH_FLAVORS: usize = 32;

/// `mountstat3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountStat3 {
    /// `MNT3_OK`.
    Ok,
    /// `MNT3ERR_PERM`: not owner.
    Perm,
    /// `MNT3ERR_NOENT`: no such file or directory.
    NoEnt,
    /// `MNT3ERR_IO`.
    Io,
    /// `MNT3ERR_ACCES`: permission denied (Linux `mountd` also says this for a path that is
    /// not exported).
    Acces,
    /// `MNT3ERR_NOTDIR`.
    NotDir,
    /// `MNT3ERR_INVAL`.
    Inval,
    /// `MNT3ERR_NAMETOOLONG`.
    NameTooLong,
    /// `MNT3ERR_NOTSUPP`.
    NotSupp,
    /// `MNT3ERR_SERVERFAULT`.
    ServerFault,
    /// A value outside RFC 1813's list.
    Other(u32),
}

impl MountStat3 {
    /// From the wire value.
    pub fn from_u32(v: u32) -> MountStat3 {
        match v {
            0 => MountStat3::Ok,
            1 => MountStat3::Perm,
            2 => MountStat3::NoEnt,
            5 => MountStat3::Io,
            13 => MountStat3::Acces,
            20 => MountStat3::NotDir,
            22 => MountStat3::Inval,
            63 => MountStat3::NameTooLong,
            10004 => MountStat3::NotSupp,
            10006 => MountStat3::ServerFault,
            v => MountStat3::Other(v),
        }
    }

    /// The wire value.
    pub fn to_u32(self) -> u32 {
        match self {
            MountStat3::Ok => 0,
            MountStat3::Perm => 1,
            MountStat3::NoEnt => 2,
            MountStat3::Io => 5,
            MountStat3::Acces => 13,
            MountStat3::NotDir => 20,
            MountStat3::Inval => 22,
            MountStat3::NameTooLong => 63,
            MountStat3::NotSupp => 10004,
            MountStat3::ServerFault => 10006,
            MountStat3::Other(v) => v,
        }
    }

    /// RFC 1813's name.
    pub fn name(self) -> &'static str {
        match self {
            MountStat3::Ok => "MNT3_OK",
            MountStat3::Perm => "MNT3ERR_PERM",
            MountStat3::NoEnt => "MNT3ERR_NOENT",
            MountStat3::Io => "MNT3ERR_IO",
            MountStat3::Acces => "MNT3ERR_ACCES",
            MountStat3::NotDir => "MNT3ERR_NOTDIR",
            MountStat3::Inval => "MNT3ERR_INVAL",
            MountStat3::NameTooLong => "MNT3ERR_NAMETOOLONG",
            MountStat3::NotSupp => "MNT3ERR_NOTSUPP",
            MountStat3::ServerFault => "MNT3ERR_SERVERFAULT",
            MountStat3::Other(_) => "unknown mountstat3",
        }
    }
}

impl fmt::Display for MountStat3 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.to_u32())
    }
}

/// What MNT returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountResult {
    /// The export's root file handle (`fhandle3`, 1..=64 bytes).
    pub root_fh: Vec<u8>,
    /// The auth flavors the server accepts for this export, its preferred first.
    pub auth_flavors: Vec<u32>,
}

/// Why a MOUNT step failed.
#[derive(Debug)]
pub enum MountError {
    /// The export path cannot be sent (empty or longer than [`MNTPATHLEN`]).
    BadPath {
        /// The path.
        export: String,
        /// Why.
        why: &'static str,
    },
    /// An RPC failed.
    Rpc {
        /// The step ("rpcbind GETPORT", "MOUNT MNT", …).
        step: &'static str,
        /// The server's address.
        server: SocketAddr,
        /// Why.
        error: RpcError,
    },
    /// rpcbind does not know the program (GETPORT answered port 0).
    NotRegistered {
        /// The server.
        server: IpAddr,
        /// Program.
        prog: u32,
        /// Version.
        vers: u32,
    },
    /// GETPORT answered something that is not a port.
    BadPort {
        /// The server.
        server: IpAddr,
        /// The value.
        port: u32,
    },
    /// The server refused the mount.
    Status {
        /// The path.
        export: String,
        /// The status.
        stat: MountStat3,
    },
    /// Results that do not decode.
    BadReply {
        /// The step.
        step: &'static str,
        /// Why.
        error: XdrError,
    },
}

impl MountError {
    /// The `mountstat3` of a refused MNT.
    pub fn mount_stat(&self) -> Option<MountStat3> {
        match self {
            MountError::Status { stat, .. } => Some(*stat),
            _ => None,
        }
    }
}

impl fmt::Display for MountError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MountError::BadPath { export, why } => write!(f, "export path {export:?}: {why}"),
            MountError::Rpc {
                step,
                server,
                error,
            } => write!(f, "{step} to {server}: {error}"),
            MountError::NotRegistered { server, prog, vers } => write!(
                f,
                "rpcbind on {server} has no TCP port for program {prog} version {vers} \
                 (is the service running?)"
            ),
            MountError::BadPort { server, port } => {
                write!(
                    f,
                    "rpcbind on {server} answered port {port}, not a TCP port"
                )
            }
            MountError::Status { export, stat } => {
                write!(f, "mount of {export:?} refused: {stat}")
            }
            MountError::BadReply { step, error } => write!(f, "{step}: malformed results: {error}"),
        }
    }
}

impl std::error::Error for MountError {}

/// The host name, or "krpc-rdma" (at most 255 bytes: `AUTH_SYS`'s bound).
pub fn machine_name() -> Vec<u8> {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is valid for `buf.len()` bytes; gethostname writes at most that many.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let name: &[u8] = if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        buf.get(..end.min(MAX_MACHINE_NAME)).unwrap_or_default()
    } else {
        &[]
    };
    if name.is_empty() {
        b"krpc-rdma".to_vec()
    } else {
        name.to_vec()
    }
}

/// `AUTH_SYS` for uid 0, gid 0, no supplementary groups, this machine's name.
pub fn auth_sys_root() -> Auth {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32);
    Auth::Sys(AuthSys {
        stamp,
        machine_name: machine_name(),
        uid: 0,
        gid: 0,
        gids: Vec::new(),
    })
}

/// GETPORT's arguments (`struct mapping`: prog, vers, prot, port = 0).
pub fn encode_getport(prog: u32, vers: u32, prot: u32) -> Result<Vec<u8>, XdrError> {
    let mut e = Encoder::new();
    e.u32(prog);
    e.u32(vers);
    e.u32(prot);
    e.u32(0);
    e.finish()
}

/// A `dirpath` argument (MNT, UMNT).
///
/// # Errors
/// [`MountError::BadPath`].
pub fn encode_dirpath(export: &str) -> Result<Vec<u8>, MountError> {
    let bad = |why| MountError::BadPath {
        export: export.to_string(),
        why,
    };
    if export.is_empty() {
        return Err(bad("empty"));
    }
    if export.len() > MNTPATHLEN {
        return Err(bad("longer than MNTPATHLEN (1024 bytes)"));
    }
    let mut e = Encoder::new();
    e.opaque(export.as_bytes());
    e.finish().map_err(|_| bad("out of memory"))
}

/// Decode `mountres3`: the status, and on `MNT3_OK` the file handle and auth flavors.
///
/// # Errors
/// [`MountError::Status`] for a refusal, [`MountError::BadReply`] for malformed results.
pub fn decode_mountres3(export: &str, results: &[u8]) -> Result<MountResult, MountError> {
    let bad = |error| MountError::BadReply {
        step: "MOUNT MNT",
        error,
    };
    let mut d = Decoder::new(results);
    match MountStat3::from_u32(d.u32().map_err(bad)?) {
        MountStat3::Ok => {}
        stat => {
            return Err(MountError::Status {
                export: export.to_string(),
                stat,
            })
        }
    }
    let fh = d.opaque("fhandle3", FHSIZE3).map_err(bad)?;
    if fh.is_empty() {
        return Err(bad(XdrError::Short { at: 4, need: 1 }));
    }
    let n = d.u32().map_err(bad)? as usize;
    if n > MAX_AUTH_FLAVORS {
        return Err(bad(XdrError::TooManyEntries {
            what: "auth_flavors",
            max: MAX_AUTH_FLAVORS,
        }));
    }
    let mut auth_flavors = Vec::with_capacity(n);
    for _ in 0..n {
        auth_flavors.push(d.u32().map_err(bad)?);
    }
    Ok(MountResult {
        root_fh: fh.to_vec(),
        auth_flavors,
    })
}

/// Ask rpcbind on `server` (portmapper v2 over TCP port 111) for the port of `prog`/`vers`
/// over protocol `prot` ([`IPPROTO_TCP`]).
///
/// # Errors
/// RPC failures, [`MountError::NotRegistered`] (port 0), [`MountError::BadPort`].
pub fn getport(server: IpAddr, prog: u32, vers: u32, prot: u32) -> Result<u16, MountError> {
    const STEP: &str = "rpcbind GETPORT";
    let addr = SocketAddr::new(server, PMAP_PORT);
    let rpc = |error| MountError::Rpc {
        step: STEP,
        server: addr,
        error,
    };
    let args = encode_getport(prog, vers, prot)
        .map_err(|error| MountError::BadReply { step: STEP, error })?;
    // rpcbind needs no reserved port.
    let mut c = RpcClient::connect_with(
        addr,
        ClientOptions {
            reserved_port: false,
            ..ClientOptions::default()
        },
    )
    .map_err(rpc)?;
    let res = c
        .call(PMAP_PROG, PMAP_VERS, PMAPPROC_GETPORT, Auth::None, &args)
        .map_err(rpc)?;
    let port = Decoder::new(&res)
        .u32()
        .map_err(|error| MountError::BadReply { step: STEP, error })?;
    match u16::try_from(port) {
        Ok(0) => Err(MountError::NotRegistered { server, prog, vers }),
        Ok(p) => Ok(p),
        Err(_) => Err(MountError::BadPort { server, port }),
    }
}

/// A TCP connection to `mountd` (MOUNT v3).
#[derive(Debug)]
pub struct MountClient {
    rpc: RpcClient,
    cred: Auth,
}

impl MountClient {
    /// Find `mountd` with rpcbind and connect to it (from a reserved port when root).
    ///
    /// # Errors
    /// What [`getport`] returns; the connection failing.
    pub fn connect(server: IpAddr) -> Result<MountClient, MountError> {
        let port = getport(server, MOUNT_PROG, MOUNT_V3, IPPROTO_TCP)?;
        MountClient::connect_to(SocketAddr::new(server, port))
    }

    /// Connect to `mountd` at a known address.
    ///
    /// # Errors
    /// The connection failing.
    pub fn connect_to(addr: SocketAddr) -> Result<MountClient, MountError> {
        let rpc = RpcClient::connect(addr).map_err(|error| MountError::Rpc {
            step: "connecting to mountd",
            server: addr,
            error,
        })?;
        Ok(MountClient {
            rpc,
            cred: auth_sys_root(),
        })
    }

    /// The RPC connection (its local address says whether a reserved port was bound).
    pub fn rpc(&self) -> &RpcClient {
        &self.rpc
    }

    fn call(&mut self, step: &'static str, proc_: u32, args: &[u8]) -> Result<Vec<u8>, MountError> {
        let server = self.rpc.peer();
        self.rpc
            .call(MOUNT_PROG, MOUNT_V3, proc_, self.cred.clone(), args)
            .map_err(|error| MountError::Rpc {
                step,
                server,
                error,
            })
    }

    /// `MOUNTPROC3_NULL`.
    ///
    /// # Errors
    /// RPC failures.
    pub fn null(&mut self) -> Result<(), MountError> {
        self.call("MOUNT NULL", MOUNTPROC3_NULL, &[]).map(|_| ())
    }

    /// `MOUNTPROC3_MNT`: the root file handle of `export`.
    ///
    /// # Errors
    /// [`MountError::Status`] with the server's `mountstat3`, RPC failures, bad results.
    pub fn mnt(&mut self, export: &str) -> Result<MountResult, MountError> {
        let args = encode_dirpath(export)?;
        let res = self.call("MOUNT MNT", MOUNTPROC3_MNT, &args)?;
        decode_mountres3(export, &res)
    }

    /// `MOUNTPROC3_UMNT` (void results).
    ///
    /// # Errors
    /// RPC failures.
    pub fn umnt(&mut self, export: &str) -> Result<(), MountError> {
        let args = encode_dirpath(export)?;
        self.call("MOUNT UMNT", MOUNTPROC3_UMNT, &args).map(|_| ())
    }
}

/// MNT `export` on `server`: rpcbind GETPORT for MOUNT v3 over TCP, then MNT over TCP.
///
/// # Errors
/// See [`MountError`]; a refusal carries the server's `mountstat3`.
pub fn mount(server: IpAddr, export: &str) -> Result<MountResult, MountError> {
    MountClient::connect(server)?.mnt(export)
}

/// UMNT `export` on `server`.
///
/// # Errors
/// See [`MountError`].
pub fn umount(server: IpAddr, export: &str) -> Result<(), MountError> {
    MountClient::connect(server)?.umnt(export)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountres3_decodes() {
        let mut e = Encoder::new();
        e.u32(0);
        e.opaque(&[7u8; 28]);
        e.u32(2);
        e.u32(1);
        e.u32(390_003);
        let ok = e.finish().unwrap();
        let r = decode_mountres3("/export", &ok).unwrap();
        assert_eq!(r.root_fh, vec![7u8; 28]);
        assert_eq!(r.auth_flavors, vec![1, 390_003]);
        // Every truncation is an error, never a panic.
        for n in 0..ok.len() {
            assert!(decode_mountres3("/export", &ok[..n]).is_err());
        }

        let e = decode_mountres3("/nope", &2u32.to_be_bytes()).unwrap_err();
        assert_eq!(e.mount_stat(), Some(MountStat3::NoEnt));
        assert_eq!(
            e.to_string(),
            "mount of \"/nope\" refused: MNT3ERR_NOENT (2)"
        );
        let e = decode_mountres3("/x", &10006u32.to_be_bytes()).unwrap_err();
        assert_eq!(e.mount_stat(), Some(MountStat3::ServerFault));

        // A 65-byte handle, an empty one, too many flavors.
        let mut e = Encoder::new();
        e.u32(0);
        e.opaque(&[1u8; 65]);
        assert!(decode_mountres3("/x", &e.finish().unwrap()).is_err());
        let mut e = Encoder::new();
        e.u32(0);
        e.opaque(&[]);
        e.u32(0);
        assert!(decode_mountres3("/x", &e.finish().unwrap()).is_err());
        let mut e = Encoder::new();
        e.u32(0);
        e.opaque(&[1u8; 8]);
        e.u32(1_000_000);
        assert!(matches!(
            decode_mountres3("/x", &e.finish().unwrap()),
            Err(MountError::BadReply { .. })
        ));
    }

    #[test]
    fn stat_names_round_trip() {
        for v in [0, 1, 2, 5, 13, 20, 22, 63, 10004, 10006, 99] {
            assert_eq!(MountStat3::from_u32(v).to_u32(), v);
        }
        assert_eq!(MountStat3::from_u32(13).name(), "MNT3ERR_ACCES");
    }

    #[test]
    fn arguments_encode() {
        assert_eq!(
            encode_getport(MOUNT_PROG, 3, IPPROTO_TCP).unwrap(),
            [0, 1, 0x86, 0xa5, 0, 0, 0, 3, 0, 0, 0, 6, 0, 0, 0, 0]
        );
        assert_eq!(encode_dirpath("/ab").unwrap(), b"\0\0\0\x03/ab\0");
        assert!(encode_dirpath("").is_err());
        assert!(encode_dirpath(&"a".repeat(1025)).is_err());
        assert!(encode_dirpath(&"a".repeat(1024)).is_ok());
        match auth_sys_root() {
            Auth::Sys(s) => {
                assert_eq!((s.uid, s.gid), (0, 0));
                assert!(!s.machine_name.is_empty() && s.machine_name.len() <= 255);
            }
            a => panic!("{a:?}"),
        }
    }

    /// GETPORT and MNT against small fake rpcbind / mountd servers on loopback.
    #[test]
    fn getport_and_mnt_against_fakes() {
        use std::io::{Read, Write};
        use std::net::TcpListener;
        fn serve_one(l: TcpListener, results: Vec<u8>) -> std::thread::JoinHandle<Vec<u8>> {
            std::thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                let mut m = [0u8; 4];
                s.read_exact(&mut m).unwrap();
                let mut b = vec![0u8; (u32::from_be_bytes(m) & 0x7fff_ffff) as usize];
                s.read_exact(&mut b).unwrap();
                let mut d = Decoder::new(&b);
                let h = onc_rpc::rpc::CallHeader::decode(&mut d).unwrap();
                let args = b[d.pos()..].to_vec();
                let mut e = Encoder::new();
                onc_rpc::rpc::ReplyHeader::success(h.xid).encode(&mut e);
                e.raw(&results);
                let r = e.finish().unwrap();
                s.write_all(&(0x8000_0000u32 | r.len() as u32).to_be_bytes())
                    .unwrap();
                s.write_all(&r).unwrap();
                args
            })
        }
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mut e = Encoder::new();
        e.u32(0);
        e.opaque(&[9u8; 16]);
        e.u32(1);
        e.u32(1);
        let t = serve_one(l, e.finish().unwrap());
        let mut c = MountClient::connect_to(addr).unwrap();
        let r = c.mnt("/export").unwrap();
        assert_eq!(r.root_fh, [9u8; 16]);
        assert_eq!(r.auth_flavors, [1]);
        assert_eq!(t.join().unwrap(), encode_dirpath("/export").unwrap());
    }
}
