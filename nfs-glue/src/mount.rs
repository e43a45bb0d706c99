//! The MOUNT protocol version 3 service (RFC 1813 appendix I, program 100005): how an NFSv3
//! client gets the root handle of an export. Transport-independent: a call message in, a
//! reply message out ([`MountService::dispatch`]); it runs over TCP (oncrpc) next to NFS over
//! RDMA.
//!
//! Procedures: NULL, MNT (the root handle and the auth flavors, `[AUTH_SYS]`), DUMP (the
//! mounts recorded), UMNT, UMNTALL, EXPORT (the export list with their groups). What is
//! exported and who mounted what is the [`Exports`] implementation's business. RPC-level
//! refusals are [`crate::svc::accept_call`]'s; arguments that do not decode (a `dirpath` over
//! [`MNTPATHLEN`] bytes included) are GARBAGE_ARGS.
//!
//! The result codecs work in both directions ([`MountRes3::decode`], [`decode_mountlist`],
//! [`decode_exports`]) for clients and tests.

use alloc::vec::Vec;

use mbuf::Chain;

use crate::nfs3::{NfsFh3, NFS3_FHSIZE};
use crate::nfsd::DispatchError;
use crate::rpc::{AcceptStat, AUTH_SYS};
use crate::svc::{
    accept_call, header_bytes, refusal, success_encoder, AuthPolicy, Cred, Program, Refusal,
};
use crate::xdr::{Decoder, Encoder, XdrError};

/// The MOUNT program number.
pub const MOUNT_PROGRAM: u32 = 100_005;
/// The MOUNT version served.
pub const MOUNT_V3: u32 = 3;
/// `MOUNTPROC3_NULL`.
pub const MOUNTPROC3_NULL: u32 = 0;
/// `MOUNTPROC3_MNT`.
pub const MOUNTPROC3_MNT: u32 = 1;
/// `MOUNTPROC3_DUMP`.
pub const MOUNTPROC3_DUMP: u32 = 2;
/// `MOUNTPROC3_UMNT`.
pub const MOUNTPROC3_UMNT: u32 = 3;
/// `MOUNTPROC3_UMNTALL`.
pub const MOUNTPROC3_UMNTALL: u32 = 4;
/// `MOUNTPROC3_EXPORT`.
pub const MOUNTPROC3_EXPORT: u32 = 5;
/// `MNTPATHLEN`: the longest `dirpath`.
pub const MNTPATHLEN: usize = 1024;
/// `MNTNAMLEN`: the longest `name` (host or group).
pub const MNTNAMLEN: usize = 255;
/// Most entries decoded from a DUMP or EXPORT list (or groups of one export).
pub const MAX_LIST: usize = 65_536;

/// `mountstat3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mountstat3(pub u32);

impl Mountstat3 {
    /// `MNT3_OK`.
    pub const OK: Mountstat3 = Mountstat3(0);
    /// `MNT3ERR_PERM`.
    pub const ERR_PERM: Mountstat3 = Mountstat3(1);
    /// `MNT3ERR_NOENT`.
    pub const ERR_NOENT: Mountstat3 = Mountstat3(2);
    /// `MNT3ERR_IO`.
    pub const ERR_IO: Mountstat3 = Mountstat3(5);
    /// `MNT3ERR_ACCES` (also what Linux's mountd says for a path not exported).
    pub const ERR_ACCES: Mountstat3 = Mountstat3(13);
    /// `MNT3ERR_NOTDIR`.
    pub const ERR_NOTDIR: Mountstat3 = Mountstat3(20);
    /// `MNT3ERR_INVAL`.
    pub const ERR_INVAL: Mountstat3 = Mountstat3(22);
    /// `MNT3ERR_NAMETOOLONG`.
    pub const ERR_NAMETOOLONG: Mountstat3 = Mountstat3(63);
    /// `MNT3ERR_NOTSUPP`.
    pub const ERR_NOTSUPP: Mountstat3 = Mountstat3(10_004);
    /// `MNT3ERR_SERVERFAULT`.
    pub const ERR_SERVERFAULT: Mountstat3 = Mountstat3(10_006);
}

/// `mountres3`: MNT's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountRes3 {
    /// `MNT3_OK`: the export's root handle and the auth flavors the client may use.
    Ok {
        /// `fhandle`.
        fhandle: NfsFh3,
        /// `auth_flavors`.
        auth_flavors: Vec<u32>,
    },
    /// Any other status.
    Fail(Mountstat3),
}

impl MountRes3 {
    /// Append the XDR encoding; a handle over 64 bytes or an `OK` failure marks `e` failed.
    pub fn encode(&self, e: &mut Encoder) {
        match self {
            MountRes3::Ok {
                fhandle,
                auth_flavors,
            } => {
                e.u32(0);
                fhandle.encode(e);
                match u32::try_from(auth_flavors.len()) {
                    Ok(n) => e.u32(n),
                    Err(_) => e.fail(),
                }
                for f in auth_flavors {
                    e.u32(*f);
                }
            }
            MountRes3::Fail(Mountstat3::OK) => e.fail(),
            MountRes3::Fail(s) => e.u32(s.0),
        }
    }

    /// Decode (at most [`MAX_LIST`] flavors).
    ///
    /// # Errors
    /// Malformed or truncated input, [`XdrError::Alloc`].
    pub fn decode(d: &mut Decoder<'_>) -> Result<MountRes3, XdrError> {
        match d.u32()? {
            0 => {
                let fhandle = NfsFh3::decode(d)?;
                let n = d.opaque_len("auth_flavors", MAX_LIST)?;
                let mut auth_flavors = Vec::new();
                auth_flavors
                    .try_reserve_exact(n.min(d.remaining() / 4))
                    .map_err(|_| XdrError::Alloc)?;
                for _ in 0..n {
                    auth_flavors.push(d.u32()?);
                }
                Ok(MountRes3::Ok {
                    fhandle,
                    auth_flavors,
                })
            }
            s => Ok(MountRes3::Fail(Mountstat3(s))),
        }
    }
}

/// A `value_follows` list of at most [`MAX_LIST`] items decoded by `item`.
fn get_list<T>(
    d: &mut Decoder<'_>,
    what: &'static str,
    mut item: impl FnMut(&mut Decoder<'_>) -> Result<T, XdrError>,
) -> Result<Vec<T>, XdrError> {
    let mut v = Vec::new();
    while d.bool()? {
        if v.len() >= MAX_LIST {
            return Err(XdrError::TooManyEntries {
                what,
                max: MAX_LIST,
            });
        }
        let it = item(d)?;
        v.try_reserve(1).map_err(|_| XdrError::Alloc)?;
        v.push(it);
    }
    Ok(v)
}

fn bytes(d: &mut Decoder<'_>, what: &'static str, max: usize) -> Result<Vec<u8>, XdrError> {
    let b = d.opaque(what, max)?;
    let mut v = Vec::new();
    v.try_reserve_exact(b.len()).map_err(|_| XdrError::Alloc)?;
    v.extend_from_slice(b);
    Ok(v)
}

/// Decode DUMP's `mountlist`: (host name, directory) pairs.
///
/// # Errors
/// Malformed or truncated input, too many entries, [`XdrError::Alloc`].
#[allow(clippy::type_complexity)]
pub fn decode_mountlist(d: &mut Decoder<'_>) -> Result<Vec<(Vec<u8>, Vec<u8>)>, XdrError> {
    get_list(d, "mountlist", |d| {
        Ok((
            bytes(d, "ml_hostname", MNTNAMLEN)?,
            bytes(d, "ml_directory", MNTPATHLEN)?,
        ))
    })
}

/// Decode EXPORT's `exports`: (directory, groups) pairs.
///
/// # Errors
/// Malformed or truncated input, too many entries, [`XdrError::Alloc`].
#[allow(clippy::type_complexity)]
pub fn decode_exports(d: &mut Decoder<'_>) -> Result<Vec<(Vec<u8>, Vec<Vec<u8>>)>, XdrError> {
    get_list(d, "exports", |d| {
        let dir = bytes(d, "ex_dir", MNTPATHLEN)?;
        let groups = get_list(d, "groups", |d| bytes(d, "gr_name", MNTNAMLEN))?;
        Ok((dir, groups))
    })
}

/// EXPORT's visitor: called with each export's directory and groups.
pub type ExportVisitor<'a> = dyn FnMut(&[u8], &[&[u8]]) + 'a;

/// What is exported, and the record of who mounted what. `client` is the caller as the
/// transport names it (its address); calls may come from several threads (`&self`).
pub trait Exports {
    /// MNT: the root handle of the export `path` for `client` (and record the mount), or
    /// why not (`MNT3ERR_NOENT`, `MNT3ERR_ACCES`, …).
    fn mnt(&self, cred: &Cred<'_>, client: &[u8], path: &[u8]) -> Result<NfsFh3, Mountstat3>;
    /// UMNT: forget `client`'s mount of `path`.
    fn umnt(&self, client: &[u8], path: &[u8]);
    /// UMNTALL: forget every mount of `client`.
    fn umntall(&self, client: &[u8]);
    /// DUMP: `f(host, directory)` for each mount recorded.
    fn dump(&self, f: &mut dyn FnMut(&[u8], &[u8]));
    /// EXPORT: `f(directory, groups)` for each export (no groups: everyone).
    fn exports(&self, f: &mut ExportVisitor<'_>);
}

/// Shared exports are exports: `Arc<E>` and `&E` forward every call.
macro_rules! forward_exports {
    ($($t:ty),*) => {$(
        impl<E: Exports + ?Sized> Exports for $t {
            fn mnt(&self, c: &Cred<'_>, client: &[u8], path: &[u8]) -> Result<NfsFh3, Mountstat3> {
                (**self).mnt(c, client, path)
            }
            fn umnt(&self, client: &[u8], path: &[u8]) {
                (**self).umnt(client, path)
            }
            fn umntall(&self, client: &[u8]) {
                (**self).umntall(client)
            }
            fn dump(&self, f: &mut dyn FnMut(&[u8], &[u8])) {
                (**self).dump(f)
            }
            fn exports(&self, f: &mut ExportVisitor<'_>) {
                (**self).exports(f)
            }
        }
    )*};
}

forward_exports!(alloc::sync::Arc<E>, &E);

/// The MOUNT v3 program served by [`MountService`].
pub const fn mount_program(auth: AuthPolicy) -> Program {
    Program {
        prog: MOUNT_PROGRAM,
        low: MOUNT_V3,
        high: MOUNT_V3,
        nprocs: MOUNTPROC3_EXPORT + 1,
        auth,
    }
}

/// The MOUNT v3 service over an [`Exports`].
pub struct MountService<E> {
    exports: E,
    auth: AuthPolicy,
}

fn put_name(e: &mut Encoder, b: &[u8], max: usize) {
    if b.len() > max {
        e.fail();
    } else {
        e.opaque(b);
    }
}

impl<E: Exports> MountService<E> {
    /// A service over `exports` with credential policy `auth`.
    pub fn new(exports: E, auth: AuthPolicy) -> Self {
        MountService { exports, auth }
    }

    /// The exports.
    pub fn exports(&self) -> &E {
        &self.exports
    }

    /// Serve one call message from `client`; the reply message.
    ///
    /// # Errors
    /// [`DispatchError::NotACall`]: not answered; [`DispatchError::Alloc`].
    pub fn dispatch(&self, call: &[u8], client: &[u8]) -> Result<Vec<u8>, DispatchError> {
        let acc = match accept_call(call, &mount_program(self.auth)) {
            Ok(a) => a,
            Err(Refusal::Drop) => return Err(DispatchError::NotACall),
            Err(Refusal::Reply(h)) => return header_bytes(&h).map_err(|_| DispatchError::Alloc),
        };
        let xid = acc.header.xid;
        let mut d = acc.args;
        let cred = Cred::of(&acc.header);
        let mut e = success_encoder(xid);
        let ran = self.run(acc.header.proc_, &cred, client, &mut d, &mut e);
        let stat = match ran {
            Ok(()) => match e.finish() {
                Ok(b) => return Ok(b),
                Err(_) => AcceptStat::SystemErr,
            },
            Err(_) => AcceptStat::GarbageArgs,
        };
        header_bytes(&refusal(xid, stat)).map_err(|_| DispatchError::Alloc)
    }

    /// [`MountService::dispatch`] for a call that came as a chain (over RDMA).
    ///
    /// # Errors
    /// As [`MountService::dispatch`].
    pub fn dispatch_chain(&self, call: &Chain, client: &[u8]) -> Result<Chain, DispatchError> {
        let b = call.to_vec().map_err(|_| DispatchError::Alloc)?;
        let r = self.dispatch(&b, client)?;
        Chain::from_bytes(&r).map_err(|_| DispatchError::Alloc)
    }

    fn run(
        &self,
        proc_: u32,
        cred: &Cred<'_>,
        client: &[u8],
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> Result<(), XdrError> {
        match proc_ {
            MOUNTPROC3_MNT => {
                let path = d.opaque("dirpath", MNTPATHLEN)?;
                let r = match self.exports.mnt(cred, client, path) {
                    Ok(fhandle) if fhandle.data.len() <= NFS3_FHSIZE => MountRes3::Ok {
                        fhandle,
                        auth_flavors: alloc::vec![AUTH_SYS],
                    },
                    Ok(_) => MountRes3::Fail(Mountstat3::ERR_SERVERFAULT),
                    Err(Mountstat3::OK) => MountRes3::Fail(Mountstat3::ERR_SERVERFAULT),
                    Err(s) => MountRes3::Fail(s),
                };
                r.encode(e);
            }
            MOUNTPROC3_DUMP => {
                self.exports.dump(&mut |host, dir| {
                    e.bool(true);
                    put_name(e, host, MNTNAMLEN);
                    put_name(e, dir, MNTPATHLEN);
                });
                e.bool(false);
            }
            MOUNTPROC3_UMNT => {
                let path = d.opaque("dirpath", MNTPATHLEN)?;
                self.exports.umnt(client, path);
            }
            MOUNTPROC3_UMNTALL => self.exports.umntall(client),
            MOUNTPROC3_EXPORT => {
                self.exports.exports(&mut |dir, groups| {
                    e.bool(true);
                    put_name(e, dir, MNTPATHLEN);
                    for g in groups {
                        e.bool(true);
                        put_name(e, g, MNTNAMLEN);
                    }
                    e.bool(false);
                });
                e.bool(false);
            }
            // NULL; accept_call refused every other number with PROC_UNAVAIL.
            _ => {}
        }
        Ok(())
    }
}
