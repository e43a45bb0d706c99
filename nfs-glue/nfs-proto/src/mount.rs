//! The MOUNT protocol version 3 (RFC 1813 appendix I, program 100005): how an NFSv3 client
//! gets the root handle of an export. The program's numbers, `mountstat3` and the result
//! codecs, in both directions ([`MountRes3::encode`] / [`MountRes3::decode`],
//! [`decode_mountlist`], [`decode_exports`]) for the service (`nfs-service`'s `mount`),
//! clients and tests.

use alloc::vec::Vec;

use onc_rpc::xdr::{Decoder, Encoder, XdrError};

use crate::nfs3::NfsFh3;

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
