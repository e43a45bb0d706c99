//! The results of every NFSv3 procedure (RFC 1813 section 3.3): each an [`Nfs3Res`] of the
//! procedure's `resok` and `resfail` arms, with the RFC 8267 head codecs of READ and
//! READLINK.

use alloc::vec::Vec;

use super::{
    get_list, put_len, put_list, to_vec, Cookieverf3, Fattr3, Filename3, Nfs3Res, Nfspath3,
    Nfsstat3, Nfstime3, PostOpAttr, PostOpFh3, StableHow, WccData, Writeverf3, Xdr,
    NFS3_MAXPATHLEN, NFS3_MAX_DATA, NFS3_MAX_DIR_ENTRIES,
};
use onc_rpc::xdr::{Decoder, Encoder, XdrError};

/// `NFSPROC3_NULL` results: `void`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NullRes;

impl Xdr for NullRes {
    fn encode(&self, _e: &mut Encoder) {}
    fn decode(_d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(NullRes)
    }
}

inherent_xdr!(NullRes);

// ---- GETATTR ----

xdr_struct! {
    /// `GETATTR3resok`.
    pub struct GetattrResOk {
        /// `obj_attributes`.
        pub obj_attributes: Fattr3,
    }
}

/// `GETATTR3res` (the failure arm is `void`).
pub type GetattrRes = Nfs3Res<GetattrResOk, ()>;

// ---- SETATTR ----

xdr_struct! {
    /// `SETATTR3resok`.
    pub struct SetattrResOk {
        /// `obj_wcc`.
        pub obj_wcc: WccData,
    }
}

xdr_struct! {
    /// `SETATTR3resfail`.
    pub struct SetattrResFail {
        /// `obj_wcc`.
        pub obj_wcc: WccData,
    }
}

/// `SETATTR3res`.
pub type SetattrRes = Nfs3Res<SetattrResOk, SetattrResFail>;

// ---- LOOKUP ----

xdr_struct! {
    /// `LOOKUP3resok`.
    pub struct LookupResOk {
        /// `object`: the handle found.
        pub object: super::NfsFh3,
        /// `obj_attributes`.
        pub obj_attributes: PostOpAttr,
        /// `dir_attributes`.
        pub dir_attributes: PostOpAttr,
    }
}

xdr_struct! {
    /// `LOOKUP3resfail`.
    pub struct LookupResFail {
        /// `dir_attributes`.
        pub dir_attributes: PostOpAttr,
    }
}

/// `LOOKUP3res`.
pub type LookupRes = Nfs3Res<LookupResOk, LookupResFail>;

// ---- ACCESS ----

xdr_struct! {
    /// `ACCESS3resok`.
    pub struct AccessResOk {
        /// `obj_attributes`.
        pub obj_attributes: PostOpAttr,
        /// `access`: the `ACCESS3_*` bits granted.
        pub access: u32,
    }
}

xdr_struct! {
    /// `ACCESS3resfail`.
    pub struct AccessResFail {
        /// `obj_attributes`.
        pub obj_attributes: PostOpAttr,
    }
}

/// `ACCESS3res`.
pub type AccessRes = Nfs3Res<AccessResOk, AccessResFail>;

// ---- READLINK ----

xdr_struct! {
    /// `READLINK3resok` with the target inline.
    pub struct ReadlinkResOk {
        /// `symlink_attributes`.
        pub symlink_attributes: PostOpAttr,
        /// `data`: the target (DDP-eligible, RFC 8267).
        pub data: Nfspath3,
    }
}

xdr_struct! {
    /// `READLINK3resfail`.
    pub struct ReadlinkResFail {
        /// `symlink_attributes`.
        pub symlink_attributes: PostOpAttr,
    }
}

/// `READLINK3res`.
pub type ReadlinkRes = Nfs3Res<ReadlinkResOk, ReadlinkResFail>;

/// `READLINK3res` up to, not including, the target path: what [`ReadlinkRes::decode_head`]
/// returns and [`ReadlinkHead::encode`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadlinkHead {
    /// `status`.
    pub status: Nfsstat3,
    /// `symlink_attributes` (present in both arms).
    pub symlink_attributes: PostOpAttr,
    /// The length of `data` (0 when the status is not `NFS3_OK`).
    pub data_len: u32,
}

impl ReadlinkHead {
    /// Write the result up to and including the path's length word (for `NFS3_OK`), or the
    /// whole failure result. A length above [`NFS3_MAXPATHLEN`] marks `e` failed.
    pub fn encode(&self, e: &mut Encoder) {
        self.status.encode(e);
        self.symlink_attributes.encode(e);
        if self.status.is_ok() {
            if self.data_len as usize > NFS3_MAXPATHLEN {
                e.fail();
            }
            e.u32(self.data_len);
        }
    }
}

impl ReadlinkRes {
    /// Decode the result up to and including the path's length word (at most
    /// [`NFS3_MAXPATHLEN`]), leaving `d` at the path's first byte; for a failure status, the
    /// whole result (and `data_len` 0). The path need not be present: it may have been placed
    /// by RDMA (RFC 8267).
    ///
    /// # Errors
    /// Malformed or truncated input, [`XdrError::TooLong`].
    pub fn decode_head(d: &mut Decoder<'_>) -> Result<ReadlinkHead, XdrError> {
        let status = Nfsstat3::decode(d)?;
        let symlink_attributes = PostOpAttr::decode(d)?;
        let data_len = if status.is_ok() {
            // Bounded by NFS3_MAXPATHLEN.
            d.opaque_len("nfspath3", NFS3_MAXPATHLEN)? as u32
        } else {
            0
        };
        Ok(ReadlinkHead {
            status,
            symlink_attributes,
            data_len,
        })
    }
}

// ---- READ ----

/// `READ3resok` with the data inline (as after RDMA placement the reply chain holds it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResOk {
    /// `file_attributes`.
    pub file_attributes: PostOpAttr,
    /// `count`: bytes read.
    pub count: u32,
    /// `eof`: the read reached the end of the file.
    pub eof: bool,
    /// `data` (DDP-eligible, RFC 8267).
    pub data: Vec<u8>,
}

impl ReadResOk {
    /// Decode with the data bounded by `max_data` bytes.
    ///
    /// # Errors
    /// Malformed or truncated input, [`XdrError::TooLong`], [`XdrError::Alloc`].
    pub fn decode_with_max(d: &mut Decoder<'_>, max_data: usize) -> Result<Self, XdrError> {
        let file_attributes = PostOpAttr::decode(d)?;
        let count = d.u32()?;
        let eof = d.bool()?;
        let data = to_vec(d.opaque("READ3resok data", max_data)?)?;
        Ok(ReadResOk {
            file_attributes,
            count,
            eof,
            data,
        })
    }

    /// Write everything up to and including the data's length word (`data.len()`), not the
    /// data or its pad.
    pub fn encode_head(&self, e: &mut Encoder) {
        self.file_attributes.encode(e);
        e.u32(self.count);
        e.bool(self.eof);
        put_len(e, self.data.len());
    }
}

/// The data bounded by [`NFS3_MAX_DATA`].
impl Xdr for ReadResOk {
    fn encode(&self, e: &mut Encoder) {
        self.encode_head(e);
        e.opaque_fixed(&self.data);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Self::decode_with_max(d, NFS3_MAX_DATA)
    }
}

inherent_xdr!(ReadResOk);

xdr_struct! {
    /// `READ3resfail`.
    pub struct ReadResFail {
        /// `file_attributes`.
        pub file_attributes: PostOpAttr,
    }
}

/// `READ3res`.
pub type ReadRes = Nfs3Res<ReadResOk, ReadResFail>;

/// `READ3res` up to, not including, the data: what [`ReadRes::decode_head`] returns and
/// [`ReadHead::encode`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadHead {
    /// `status`.
    pub status: Nfsstat3,
    /// `file_attributes` (present in both arms).
    pub file_attributes: PostOpAttr,
    /// `count` (0 when the status is not `NFS3_OK`).
    pub count: u32,
    /// `eof` (false when the status is not `NFS3_OK`).
    pub eof: bool,
    /// The length of `data` (0 when the status is not `NFS3_OK`).
    pub data_len: u32,
}

impl ReadHead {
    /// Write the result up to and including the data's length word (for `NFS3_OK`), or the
    /// whole failure result: a server whose data travels as a write chunk (RFC 8267).
    pub fn encode(&self, e: &mut Encoder) {
        self.status.encode(e);
        self.file_attributes.encode(e);
        if self.status.is_ok() {
            e.u32(self.count);
            e.bool(self.eof);
            e.u32(self.data_len);
        }
    }
}

impl ReadRes {
    /// Decode the result up to and including the data's length word, leaving `d` at the first
    /// data byte; for a failure status, the whole result (count, eof, `data_len` 0). The data
    /// need not be present (it was placed by RDMA); its length is not bounded here: the
    /// caller compares it with the buffer it gave.
    ///
    /// # Errors
    /// Malformed or truncated input.
    pub fn decode_head(d: &mut Decoder<'_>) -> Result<ReadHead, XdrError> {
        let status = Nfsstat3::decode(d)?;
        let file_attributes = PostOpAttr::decode(d)?;
        let (count, eof, data_len) = if status.is_ok() {
            (d.u32()?, d.bool()?, d.u32()?)
        } else {
            (0, false, 0)
        };
        Ok(ReadHead {
            status,
            file_attributes,
            count,
            eof,
            data_len,
        })
    }

    /// Decode with the data bounded by `max_data` bytes.
    ///
    /// # Errors
    /// Malformed or truncated input, [`XdrError::TooLong`], [`XdrError::Alloc`].
    pub fn decode_with_max(d: &mut Decoder<'_>, max_data: usize) -> Result<Self, XdrError> {
        let status = Nfsstat3::decode(d)?;
        if status.is_ok() {
            Ok(Nfs3Res::Ok(ReadResOk::decode_with_max(d, max_data)?))
        } else {
            Ok(Nfs3Res::Fail {
                status,
                resfail: ReadResFail::decode(d)?,
            })
        }
    }
}

// ---- WRITE ----

xdr_struct! {
    /// `WRITE3resok`.
    pub struct WriteResOk {
        /// `file_wcc`.
        pub file_wcc: WccData,
        /// `count`: bytes written.
        pub count: u32,
        /// `committed`: how far the data was committed.
        pub committed: StableHow,
        /// `verf`: the write verifier.
        pub verf: Writeverf3,
    }
}

xdr_struct! {
    /// `WRITE3resfail`.
    pub struct WriteResFail {
        /// `file_wcc`.
        pub file_wcc: WccData,
    }
}

/// `WRITE3res`.
pub type WriteRes = Nfs3Res<WriteResOk, WriteResFail>;

// ---- CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR: a directory's wcc_data on failure ----

/// `<P>3resok` with the given fields, `<P>3resfail` holding the directory's `dir_wcc`, and
/// `<P>3res`.
macro_rules! dir_res {
    ($ok:ident, $fail:ident, $res:ident, $p:literal, { $($ok_fields:tt)* }) => {
        xdr_struct! {
            #[doc = concat!("`", $p, "3resok`.")]
            pub struct $ok {
                $($ok_fields)*
            }
        }

        xdr_struct! {
            #[doc = concat!("`", $p, "3resfail`.")]
            pub struct $fail {
                /// `dir_wcc`.
                pub dir_wcc: WccData,
            }
        }

        #[doc = concat!("`", $p, "3res`.")]
        pub type $res = Nfs3Res<$ok, $fail>;
    };
}

/// CREATE, MKDIR, SYMLINK, MKNOD: the new object on success.
macro_rules! dirop_res {
    ($ok:ident, $fail:ident, $res:ident, $p:literal) => {
        dir_res!($ok, $fail, $res, $p, {
            /// `obj`: the new object's handle, if returned.
            pub obj: PostOpFh3,
            /// `obj_attributes`.
            pub obj_attributes: PostOpAttr,
            /// `dir_wcc`.
            pub dir_wcc: WccData,
        });
    };
}

dirop_res!(CreateResOk, CreateResFail, CreateRes, "CREATE");
dirop_res!(MkdirResOk, MkdirResFail, MkdirRes, "MKDIR");
dirop_res!(SymlinkResOk, SymlinkResFail, SymlinkRes, "SYMLINK");
dirop_res!(MknodResOk, MknodResFail, MknodRes, "MKNOD");

// REMOVE, RMDIR: only the directory's wcc_data either way.
dir_res!(RemoveResOk, RemoveResFail, RemoveRes, "REMOVE", {
    /// `dir_wcc`.
    pub dir_wcc: WccData,
});
dir_res!(RmdirResOk, RmdirResFail, RmdirRes, "RMDIR", {
    /// `dir_wcc`.
    pub dir_wcc: WccData,
});

// ---- RENAME ----

xdr_struct! {
    /// `RENAME3resok`.
    pub struct RenameResOk {
        /// `fromdir_wcc`.
        pub fromdir_wcc: WccData,
        /// `todir_wcc`.
        pub todir_wcc: WccData,
    }
}

xdr_struct! {
    /// `RENAME3resfail`.
    pub struct RenameResFail {
        /// `fromdir_wcc`.
        pub fromdir_wcc: WccData,
        /// `todir_wcc`.
        pub todir_wcc: WccData,
    }
}

/// `RENAME3res`.
pub type RenameRes = Nfs3Res<RenameResOk, RenameResFail>;

// ---- LINK ----

xdr_struct! {
    /// `LINK3resok`.
    pub struct LinkResOk {
        /// `file_attributes`.
        pub file_attributes: PostOpAttr,
        /// `linkdir_wcc`.
        pub linkdir_wcc: WccData,
    }
}

xdr_struct! {
    /// `LINK3resfail`.
    pub struct LinkResFail {
        /// `file_attributes`.
        pub file_attributes: PostOpAttr,
        /// `linkdir_wcc`.
        pub linkdir_wcc: WccData,
    }
}

/// `LINK3res`.
pub type LinkRes = Nfs3Res<LinkResOk, LinkResFail>;

// ---- READDIR ----

xdr_struct! {
    /// `entry3`: one READDIR entry (without the list link).
    pub struct Entry3 {
        /// `fileid`.
        pub fileid: u64,
        /// `name`.
        pub name: Filename3,
        /// `cookie`: where to resume after this entry.
        pub cookie: u64,
    }
}

/// Define `$name`, the directory list `$what` of `$entry`s, with its [`Xdr`] impl.
macro_rules! dirlist {
    ($name:ident, $entry:ty, $what:literal) => {
        #[doc = concat!("`", $what, "`: the entries (RFC 1813's `value_follows` linked list, ")]
        #[doc = "at most [`NFS3_MAX_DIR_ENTRIES`]) and `eof`."]
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $name {
            /// `entries`.
            pub entries: Vec<$entry>,
            /// `eof`: the last entry of the directory is in this list.
            pub eof: bool,
        }

        impl Xdr for $name {
            fn encode(&self, e: &mut Encoder) {
                put_list(e, &self.entries, NFS3_MAX_DIR_ENTRIES);
                e.bool(self.eof);
            }
            fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
                Ok($name {
                    entries: get_list(d, $what, NFS3_MAX_DIR_ENTRIES)?,
                    eof: d.bool()?,
                })
            }
        }
    };
}

dirlist!(Dirlist3, Entry3, "dirlist3");

xdr_struct! {
    /// `READDIR3resok`.
    pub struct ReaddirResOk {
        /// `dir_attributes`.
        pub dir_attributes: PostOpAttr,
        /// `cookieverf`.
        pub cookieverf: Cookieverf3,
        /// `reply`.
        pub reply: Dirlist3,
    }
}

xdr_struct! {
    /// `READDIR3resfail`.
    pub struct ReaddirResFail {
        /// `dir_attributes`.
        pub dir_attributes: PostOpAttr,
    }
}

/// `READDIR3res`.
pub type ReaddirRes = Nfs3Res<ReaddirResOk, ReaddirResFail>;

// ---- READDIRPLUS ----

xdr_struct! {
    /// `entryplus3`: one READDIRPLUS entry (without the list link).
    pub struct Entryplus3 {
        /// `fileid`.
        pub fileid: u64,
        /// `name`.
        pub name: Filename3,
        /// `cookie`.
        pub cookie: u64,
        /// `name_attributes`.
        pub name_attributes: PostOpAttr,
        /// `name_handle`.
        pub name_handle: PostOpFh3,
    }
}

dirlist!(Dirlistplus3, Entryplus3, "dirlistplus3");

inherent_xdr!(Dirlist3, Dirlistplus3);

xdr_struct! {
    /// `READDIRPLUS3resok`.
    pub struct ReaddirplusResOk {
        /// `dir_attributes`.
        pub dir_attributes: PostOpAttr,
        /// `cookieverf`.
        pub cookieverf: Cookieverf3,
        /// `reply`.
        pub reply: Dirlistplus3,
    }
}

xdr_struct! {
    /// `READDIRPLUS3resfail`.
    pub struct ReaddirplusResFail {
        /// `dir_attributes`.
        pub dir_attributes: PostOpAttr,
    }
}

/// `READDIRPLUS3res`.
pub type ReaddirplusRes = Nfs3Res<ReaddirplusResOk, ReaddirplusResFail>;

// ---- FSSTAT ----

xdr_struct! {
    /// `FSSTAT3resok`.
    pub struct FsstatResOk {
        /// `obj_attributes`.
        pub obj_attributes: PostOpAttr,
        /// `tbytes`: total bytes.
        pub tbytes: u64,
        /// `fbytes`: free bytes.
        pub fbytes: u64,
        /// `abytes`: bytes available to this user.
        pub abytes: u64,
        /// `tfiles`: total file slots.
        pub tfiles: u64,
        /// `ffiles`: free file slots.
        pub ffiles: u64,
        /// `afiles`: file slots available to this user.
        pub afiles: u64,
        /// `invarsec`: seconds for which these values are not expected to change.
        pub invarsec: u32,
    }
}

xdr_struct! {
    /// `FSSTAT3resfail`.
    pub struct FsstatResFail {
        /// `obj_attributes`.
        pub obj_attributes: PostOpAttr,
    }
}

/// `FSSTAT3res`.
pub type FsstatRes = Nfs3Res<FsstatResOk, FsstatResFail>;

// ---- FSINFO ----

xdr_struct! {
    /// `FSINFO3resok`: a client sizes its READs by `rtmax` and WRITEs by `wtmax`.
    pub struct FsinfoResOk {
        /// `obj_attributes`.
        pub obj_attributes: PostOpAttr,
        /// `rtmax`: largest READ supported.
        pub rtmax: u32,
        /// `rtpref`: preferred READ size.
        pub rtpref: u32,
        /// `rtmult`: suggested READ multiple.
        pub rtmult: u32,
        /// `wtmax`: largest WRITE supported.
        pub wtmax: u32,
        /// `wtpref`: preferred WRITE size.
        pub wtpref: u32,
        /// `wtmult`: suggested WRITE multiple.
        pub wtmult: u32,
        /// `dtpref`: preferred READDIR size.
        pub dtpref: u32,
        /// `maxfilesize`: largest file size.
        pub maxfilesize: u64,
        /// `time_delta`: server time granularity.
        pub time_delta: Nfstime3,
        /// `properties`: `FSF3_*` bits.
        pub properties: u32,
    }
}

xdr_struct! {
    /// `FSINFO3resfail`.
    pub struct FsinfoResFail {
        /// `obj_attributes`.
        pub obj_attributes: PostOpAttr,
    }
}

/// `FSINFO3res`.
pub type FsinfoRes = Nfs3Res<FsinfoResOk, FsinfoResFail>;

// ---- PATHCONF ----

xdr_struct! {
    /// `PATHCONF3resok`.
    pub struct PathconfResOk {
        /// `obj_attributes`.
        pub obj_attributes: PostOpAttr,
        /// `linkmax`: largest number of hard links.
        pub linkmax: u32,
        /// `name_max`: largest name length.
        pub name_max: u32,
        /// `no_trunc`: longer names are rejected, not truncated.
        pub no_trunc: bool,
        /// `chown_restricted`: only a privileged user may change ownership.
        pub chown_restricted: bool,
        /// `case_insensitive`.
        pub case_insensitive: bool,
        /// `case_preserving`.
        pub case_preserving: bool,
    }
}

xdr_struct! {
    /// `PATHCONF3resfail`.
    pub struct PathconfResFail {
        /// `obj_attributes`.
        pub obj_attributes: PostOpAttr,
    }
}

/// `PATHCONF3res`.
pub type PathconfRes = Nfs3Res<PathconfResOk, PathconfResFail>;

// ---- COMMIT ----

xdr_struct! {
    /// `COMMIT3resok`.
    pub struct CommitResOk {
        /// `file_wcc`.
        pub file_wcc: WccData,
        /// `verf`: the write verifier.
        pub verf: Writeverf3,
    }
}

xdr_struct! {
    /// `COMMIT3resfail`.
    pub struct CommitResFail {
        /// `file_wcc`.
        pub file_wcc: WccData,
    }
}

/// `COMMIT3res`.
pub type CommitRes = Nfs3Res<CommitResOk, CommitResFail>;
