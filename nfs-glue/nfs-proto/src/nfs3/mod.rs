//! NFS version 3 XDR (RFC 1813): the protocol's data types and every procedure's arguments
//! and results, in both directions (a client encodes arguments and decodes results, a server
//! the reverse).
//!
//! Every type implements [`Xdr`] (and has inherent `encode` / `decode` methods doing the
//! same, so callers need not import the trait). Encoders never panic: an item that cannot be
//! encoded (a file handle longer than [`NFS3_FHSIZE`], a name longer than
//! [`NFS3_MAXNAMLEN`], a failure arm carrying `NFS3_OK`, …) marks the [`Encoder`] failed, as
//! allocation failure does, and [`Encoder::finish`] reports it. Decoders return [`XdrError`]
//! on any malformed input and never panic; every variable-length item is bounded
//! ([`NFS3_FHSIZE`], [`NFS3_MAXNAMLEN`], [`NFS3_MAXPATHLEN`], [`NFS3_MAX_DIR_ENTRIES`], and the
//! READ / WRITE data by a caller-given maximum, [`NFS3_MAX_DATA`] through [`Xdr::decode`]),
//! so a hostile length cannot make us allocate without bound; data buffers are allocated
//! fallibly ([`XdrError::Alloc`]).
//!
//! # Direct data placement (RFC 8267)
//!
//! The DDP-eligible items of NFSv3 are the data of WRITE and SYMLINK arguments and of READ
//! and READLINK results. Each is the last item of its message, so it is handled by "head"
//! codecs that stop after the item's length word:
//!
//! * [`WriteArgs::encode_head`] / [`WriteHead::encode_head`] and [`WriteArgs::decode_head`]
//!   (the data travels as a read chunk; a server finds it at the decoder's position);
//! * [`SymlinkArgs::encode_head`] / [`SymlinkHead::encode_head`] and
//!   [`SymlinkArgs::decode_head`];
//! * [`ReadRes::decode_head`] / [`ReadHead::encode`] and [`ReadlinkRes::decode_head`] /
//!   [`ReadlinkHead::encode`] (the data arrives in a write chunk);
//! * [`locate_read_data`] and [`locate_readlink_data`]: the requester's `LocateFn` for those
//!   replies.
//!
//! # Results
//!
//! Every result is an [`Nfs3Res`]: `NFS3_OK` with the procedure's `resok` arm, or a failure
//! [`Nfsstat3`] with its `resfail` arm (the attributes or `wcc_data` RFC 1813 returns on
//! failure). Unknown status codes are kept, not rejected.

use alloc::vec::Vec;

use onc_rpc::xdr::{Decoder, Encoder, XdrError};

/// Define a struct whose XDR is its fields in order, with the [`Xdr`] impl and inherent
/// `encode` / `decode`.
macro_rules! xdr_struct {
    (
        $(#[$m:meta])*
        pub struct $name:ident {
            $( $(#[$fm:meta])* pub $f:ident : $t:ty, )*
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$fm])* pub $f: $t, )*
        }

        impl $crate::nfs3::Xdr for $name {
            fn encode(&self, e: &mut ::onc_rpc::xdr::Encoder) {
                $( $crate::nfs3::Xdr::encode(&self.$f, e); )*
            }
            fn decode(
                d: &mut ::onc_rpc::xdr::Decoder<'_>,
            ) -> Result<Self, ::onc_rpc::xdr::XdrError> {
                Ok($name {
                    $( $f: $crate::nfs3::Xdr::decode(d)?, )*
                })
            }
        }

        inherent_xdr!($name);
    };
}

/// Inherent `encode` / `decode` / `to_bytes` forwarding to the [`Xdr`] impl.
macro_rules! inherent_xdr {
    ($($name:ty),* $(,)?) => {
        $(
            impl $name {
                /// Append the XDR encoding to `e` (see [`Xdr::encode`]).
                pub fn encode(&self, e: &mut ::onc_rpc::xdr::Encoder) {
                    <Self as $crate::nfs3::Xdr>::encode(self, e)
                }

                /// Decode from `d` (see [`Xdr::decode`]).
                ///
                /// # Errors
                /// Malformed or truncated input.
                pub fn decode(
                    d: &mut ::onc_rpc::xdr::Decoder<'_>,
                ) -> Result<Self, ::onc_rpc::xdr::XdrError> {
                    <Self as $crate::nfs3::Xdr>::decode(d)
                }

                /// The XDR encoding as bytes (see [`Xdr::to_bytes`]).
                ///
                /// # Errors
                /// [`XdrError::Alloc`] when the value cannot be encoded.
                pub fn to_bytes(&self) -> Result<alloc::vec::Vec<u8>, ::onc_rpc::xdr::XdrError> {
                    <Self as $crate::nfs3::Xdr>::to_bytes(self)
                }
            }
        )*
    };
}

mod args;
mod call;
mod locate;
mod res;
mod types;

pub use args::*;
pub use call::*;
pub use locate::*;
pub use res::*;
pub use types::*;

/// The NFS program number.
pub const NFS_PROGRAM: u32 = 100_003;
/// The NFS version this module speaks.
pub const NFS_V3: u32 = 3;

/// Procedure 0: `NFSPROC3_NULL` (void arguments, void results).
pub const NFSPROC3_NULL: u32 = 0;
/// Procedure 1: `NFSPROC3_GETATTR`.
pub const NFSPROC3_GETATTR: u32 = 1;
/// Procedure 2: `NFSPROC3_SETATTR`.
pub const NFSPROC3_SETATTR: u32 = 2;
/// Procedure 3: `NFSPROC3_LOOKUP`.
pub const NFSPROC3_LOOKUP: u32 = 3;
/// Procedure 4: `NFSPROC3_ACCESS`.
pub const NFSPROC3_ACCESS: u32 = 4;
/// Procedure 5: `NFSPROC3_READLINK` (result data DDP-eligible).
pub const NFSPROC3_READLINK: u32 = 5;
/// Procedure 6: `NFSPROC3_READ` (result data DDP-eligible).
pub const NFSPROC3_READ: u32 = 6;
/// Procedure 7: `NFSPROC3_WRITE` (argument data DDP-eligible).
pub const NFSPROC3_WRITE: u32 = 7;
/// Procedure 8: `NFSPROC3_CREATE`.
pub const NFSPROC3_CREATE: u32 = 8;
/// Procedure 9: `NFSPROC3_MKDIR`.
pub const NFSPROC3_MKDIR: u32 = 9;
/// Procedure 10: `NFSPROC3_SYMLINK` (argument path DDP-eligible).
pub const NFSPROC3_SYMLINK: u32 = 10;
/// Procedure 11: `NFSPROC3_MKNOD`.
pub const NFSPROC3_MKNOD: u32 = 11;
/// Procedure 12: `NFSPROC3_REMOVE`.
pub const NFSPROC3_REMOVE: u32 = 12;
/// Procedure 13: `NFSPROC3_RMDIR`.
pub const NFSPROC3_RMDIR: u32 = 13;
/// Procedure 14: `NFSPROC3_RENAME`.
pub const NFSPROC3_RENAME: u32 = 14;
/// Procedure 15: `NFSPROC3_LINK`.
pub const NFSPROC3_LINK: u32 = 15;
/// Procedure 16: `NFSPROC3_READDIR`.
pub const NFSPROC3_READDIR: u32 = 16;
/// Procedure 17: `NFSPROC3_READDIRPLUS`.
pub const NFSPROC3_READDIRPLUS: u32 = 17;
/// Procedure 18: `NFSPROC3_FSSTAT`.
pub const NFSPROC3_FSSTAT: u32 = 18;
/// Procedure 19: `NFSPROC3_FSINFO`.
pub const NFSPROC3_FSINFO: u32 = 19;
/// Procedure 20: `NFSPROC3_PATHCONF`.
pub const NFSPROC3_PATHCONF: u32 = 20;
/// Procedure 21: `NFSPROC3_COMMIT`.
pub const NFSPROC3_COMMIT: u32 = 21;

/// The name of an NFSv3 procedure ("GETATTR", …), or `None` for a number RFC 1813 does not
/// define.
pub fn proc_name(proc_: u32) -> Option<&'static str> {
    Some(match proc_ {
        NFSPROC3_NULL => "NULL",
        NFSPROC3_GETATTR => "GETATTR",
        NFSPROC3_SETATTR => "SETATTR",
        NFSPROC3_LOOKUP => "LOOKUP",
        NFSPROC3_ACCESS => "ACCESS",
        NFSPROC3_READLINK => "READLINK",
        NFSPROC3_READ => "READ",
        NFSPROC3_WRITE => "WRITE",
        NFSPROC3_CREATE => "CREATE",
        NFSPROC3_MKDIR => "MKDIR",
        NFSPROC3_SYMLINK => "SYMLINK",
        NFSPROC3_MKNOD => "MKNOD",
        NFSPROC3_REMOVE => "REMOVE",
        NFSPROC3_RMDIR => "RMDIR",
        NFSPROC3_RENAME => "RENAME",
        NFSPROC3_LINK => "LINK",
        NFSPROC3_READDIR => "READDIR",
        NFSPROC3_READDIRPLUS => "READDIRPLUS",
        NFSPROC3_FSSTAT => "FSSTAT",
        NFSPROC3_FSINFO => "FSINFO",
        NFSPROC3_PATHCONF => "PATHCONF",
        NFSPROC3_COMMIT => "COMMIT",
        _ => return None,
    })
}

/// `NFS3_FHSIZE`: the largest file handle, in bytes.
pub const NFS3_FHSIZE: usize = 64;
/// `NFS3_COOKIEVERFSIZE`.
pub const NFS3_COOKIEVERFSIZE: usize = 8;
/// `NFS3_CREATEVERFSIZE`.
pub const NFS3_CREATEVERFSIZE: usize = 8;
/// `NFS3_WRITEVERFSIZE`.
pub const NFS3_WRITEVERFSIZE: usize = 8;
/// Largest `filename3` accepted or produced (RFC 1813 leaves `filename3<>` unbounded; 255 is
/// `NAME_MAX` on FreeBSD and Linux).
pub const NFS3_MAXNAMLEN: usize = 255;
/// Largest `nfspath3` accepted or produced (RFC 1813 leaves `nfspath3<>` unbounded; 4096 is
/// Linux's `PATH_MAX`: knfsd returns symbolic links up to 4095 bytes, FreeBSD's own limit
/// `MAXPATHLEN` is 1024).
pub const NFS3_MAXPATHLEN: usize = 4096;
/// Largest number of entries accepted or produced in one READDIR or READDIRPLUS result
/// (longer lists are [`XdrError::TooManyEntries`]).
pub const NFS3_MAX_DIR_ENTRIES: usize = 65_536;
/// Largest READ result / WRITE argument data accepted by [`Xdr::decode`] (1 MiB, the largest
/// `rtmax` / `wtmax` of Linux's and FreeBSD's servers). The `decode_with_max` functions take
/// the bound from the caller instead.
pub const NFS3_MAX_DATA: usize = 1 << 20;

/// `ACCESS3_READ`: read data from a file or read a directory.
pub const ACCESS3_READ: u32 = 0x0001;
/// `ACCESS3_LOOKUP`: look up a name in a directory.
pub const ACCESS3_LOOKUP: u32 = 0x0002;
/// `ACCESS3_MODIFY`: rewrite existing file data or modify existing directory entries.
pub const ACCESS3_MODIFY: u32 = 0x0004;
/// `ACCESS3_EXTEND`: write new data or add directory entries.
pub const ACCESS3_EXTEND: u32 = 0x0008;
/// `ACCESS3_DELETE`: delete an existing directory entry.
pub const ACCESS3_DELETE: u32 = 0x0010;
/// `ACCESS3_EXECUTE`: execute a file.
pub const ACCESS3_EXECUTE: u32 = 0x0020;

/// `FSF3_LINK`: the file system supports hard links.
pub const FSF3_LINK: u32 = 0x0001;
/// `FSF3_SYMLINK`: the file system supports symbolic links.
pub const FSF3_SYMLINK: u32 = 0x0002;
/// `FSF3_HOMOGENEOUS`: PATHCONF is the same for every file of the file system.
pub const FSF3_HOMOGENEOUS: u32 = 0x0008;
/// `FSF3_CANSETTIME`: the server can set times with SETATTR.
pub const FSF3_CANSETTIME: u32 = 0x0010;

/// An XDR-encodable and -decodable NFSv3 item.
pub trait Xdr: Sized {
    /// Append the XDR encoding to `e`. Never panics: what cannot be encoded marks `e`
    /// failed.
    fn encode(&self, e: &mut Encoder);

    /// Decode one item from `d`, leaving it just after the item.
    ///
    /// # Errors
    /// Malformed or truncated input, or a length above its bound.
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError>;

    /// The XDR encoding as bytes.
    ///
    /// # Errors
    /// [`XdrError::Alloc`] when the value cannot be encoded.
    fn to_bytes(&self) -> Result<Vec<u8>, XdrError> {
        let mut e = Encoder::new();
        self.encode(&mut e);
        e.finish()
    }
}

impl Xdr for u32 {
    fn encode(&self, e: &mut Encoder) {
        e.u32(*self);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        d.u32()
    }
}

impl Xdr for u64 {
    fn encode(&self, e: &mut Encoder) {
        e.u64(*self);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        d.u64()
    }
}

impl Xdr for bool {
    fn encode(&self, e: &mut Encoder) {
        e.bool(*self);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        d.bool()
    }
}

/// `void`.
impl Xdr for () {
    fn encode(&self, _e: &mut Encoder) {}
    fn decode(_d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(())
    }
}

/// A union switched on a boolean with `void` for FALSE: `post_op_attr`, `pre_op_attr`,
/// `post_op_fh3`, `sattrguard3`, `set_mode3`, `set_uid3`, `set_gid3`, `set_size3`.
impl<T: Xdr> Xdr for Option<T> {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Some(v) => {
                e.bool(true);
                v.encode(e);
            }
            None => e.bool(false),
        }
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        if d.bool()? {
            Ok(Some(T::decode(d)?))
        } else {
            Ok(None)
        }
    }
}

/// A procedure's result: the union switched on `nfsstat3`, `NFS3_OK` carrying the `resok`
/// arm `T` and every other status the `resfail` arm `F` (`()` where RFC 1813 has `void`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nfs3Res<T, F> {
    /// `NFS3_OK`.
    Ok(T),
    /// Any other status (never [`Nfsstat3::OK`]: encoding that marks the encoder failed).
    Fail {
        /// The status.
        status: Nfsstat3,
        /// The failure arm.
        resfail: F,
    },
}

impl<T, F> Nfs3Res<T, F> {
    /// The status.
    pub fn status(&self) -> Nfsstat3 {
        match self {
            Nfs3Res::Ok(_) => Nfsstat3::OK,
            Nfs3Res::Fail { status, .. } => *status,
        }
    }

    /// The `resok` arm, if the status is `NFS3_OK`.
    pub fn ok(&self) -> Option<&T> {
        match self {
            Nfs3Res::Ok(v) => Some(v),
            Nfs3Res::Fail { .. } => None,
        }
    }
}

impl<T: Xdr, F: Xdr> Nfs3Res<T, F> {
    /// Append the XDR encoding to `e` (see [`Xdr::encode`]).
    pub fn encode(&self, e: &mut Encoder) {
        <Self as Xdr>::encode(self, e)
    }

    /// Decode from `d` (see [`Xdr::decode`]).
    ///
    /// # Errors
    /// Malformed or truncated input.
    pub fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        <Self as Xdr>::decode(d)
    }

    /// The XDR encoding as bytes.
    ///
    /// # Errors
    /// [`XdrError::Alloc`] when the value cannot be encoded.
    pub fn to_bytes(&self) -> Result<Vec<u8>, XdrError> {
        <Self as Xdr>::to_bytes(self)
    }
}

impl<T: Xdr, F: Xdr> Xdr for Nfs3Res<T, F> {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Nfs3Res::Ok(v) => {
                Nfsstat3::OK.encode(e);
                v.encode(e);
            }
            Nfs3Res::Fail { status, resfail } => {
                if *status == Nfsstat3::OK {
                    e.fail();
                    return;
                }
                status.encode(e);
                resfail.encode(e);
            }
        }
    }

    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        let status = Nfsstat3::decode(d)?;
        if status == Nfsstat3::OK {
            Ok(Nfs3Res::Ok(T::decode(d)?))
        } else {
            Ok(Nfs3Res::Fail {
                status,
                resfail: F::decode(d)?,
            })
        }
    }
}

/// Copy `b` into a new vector, reporting allocation failure as [`XdrError::Alloc`].
fn to_vec(b: &[u8]) -> Result<Vec<u8>, XdrError> {
    let mut v = Vec::new();
    v.try_reserve_exact(b.len()).map_err(|_| XdrError::Alloc)?;
    v.extend_from_slice(b);
    Ok(v)
}

/// Variable-length opaque data of at most `max` bytes; a longer one marks `e` failed.
fn put_bounded(e: &mut Encoder, b: &[u8], max: usize) {
    if b.len() > max {
        e.fail();
    } else {
        e.opaque(b);
    }
}

/// The length word of data of `len` bytes; a length beyond 32 bits marks `e` failed.
fn put_len(e: &mut Encoder, len: usize) {
    match u32::try_from(len) {
        Ok(n) => e.u32(n),
        Err(_) => e.fail(),
    }
}

/// Push onto `v`, reporting allocation failure as [`XdrError::Alloc`].
fn try_push<T>(v: &mut Vec<T>, item: T) -> Result<(), XdrError> {
    v.try_reserve(1).map_err(|_| XdrError::Alloc)?;
    v.push(item);
    Ok(())
}

/// RFC 1813's `value_follows` linked list (`entry3 *nextentry`) of at most `max` entries;
/// a longer one marks `e` failed.
fn put_list<T: Xdr>(e: &mut Encoder, items: &[T], max: usize) {
    if items.len() > max {
        e.fail();
        return;
    }
    for it in items {
        e.bool(true);
        it.encode(e);
    }
    e.bool(false);
}

/// Decode a `value_follows` linked list of at most `max` entries.
fn get_list<T: Xdr>(
    d: &mut Decoder<'_>,
    what: &'static str,
    max: usize,
) -> Result<Vec<T>, XdrError> {
    let mut v = Vec::new();
    while d.bool()? {
        if v.len() >= max {
            return Err(XdrError::TooManyEntries { what, max });
        }
        try_push(&mut v, T::decode(d)?)?;
    }
    Ok(v)
}
