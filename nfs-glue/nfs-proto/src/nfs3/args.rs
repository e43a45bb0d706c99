//! The arguments of every NFSv3 procedure (RFC 1813 section 3.3), with the RFC 8267 head
//! codecs of WRITE and SYMLINK.

use alloc::vec::Vec;

use super::{
    put_len, to_vec, Cookieverf3, Createhow3, Diropargs3, Mknoddata3, NfsFh3, Sattr3, Sattrguard3,
    StableHow, Symlinkdata3, Xdr, NFS3_MAXPATHLEN, NFS3_MAX_DATA,
};
use onc_rpc::xdr::{Decoder, Encoder, XdrError};

/// `NFSPROC3_NULL` arguments: `void`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NullArgs;

impl Xdr for NullArgs {
    fn encode(&self, _e: &mut Encoder) {}
    fn decode(_d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(NullArgs)
    }
}

inherent_xdr!(NullArgs);

xdr_struct! {
    /// `GETATTR3args`.
    pub struct GetattrArgs {
        /// `object`.
        pub object: NfsFh3,
    }
}

xdr_struct! {
    /// `SETATTR3args`.
    pub struct SetattrArgs {
        /// `object`.
        pub object: NfsFh3,
        /// `new_attributes`.
        pub new_attributes: Sattr3,
        /// `guard`: the expected `ctime`, if checked.
        pub guard: Sattrguard3,
    }
}

xdr_struct! {
    /// `LOOKUP3args`.
    pub struct LookupArgs {
        /// `what`.
        pub what: Diropargs3,
    }
}

xdr_struct! {
    /// `ACCESS3args`.
    pub struct AccessArgs {
        /// `object`.
        pub object: NfsFh3,
        /// `access`: a mask of `ACCESS3_*` bits.
        pub access: u32,
    }
}

xdr_struct! {
    /// `READLINK3args`.
    pub struct ReadlinkArgs {
        /// `symlink`.
        pub symlink: NfsFh3,
    }
}

xdr_struct! {
    /// `READ3args`.
    pub struct ReadArgs {
        /// `file`.
        pub file: NfsFh3,
        /// `offset`.
        pub offset: u64,
        /// `count`: bytes wanted.
        pub count: u32,
    }
}

/// `WRITE3args` up to, not including, the data: what [`WriteArgs::decode_head`] returns and
/// [`WriteHead::encode_head`] writes (with the data's length word).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteHead {
    /// `file`.
    pub file: NfsFh3,
    /// `offset`.
    pub offset: u64,
    /// `count`: bytes to write (equal to the data's length in practice; not checked here).
    pub count: u32,
    /// `stable`.
    pub stable: StableHow,
}

impl WriteHead {
    /// Write `file`, `offset`, `count`, `stable` and the length word `data_len` of the data,
    /// not the data or its pad: for RFC 8267 DDP, where the data travels as a read chunk
    /// (page mbufs) behind this head.
    pub fn encode_head(&self, e: &mut Encoder, data_len: u32) {
        self.file.encode(e);
        e.u64(self.offset);
        e.u32(self.count);
        self.stable.encode(e);
        e.u32(data_len);
    }
}

/// `WRITE3args` with the data held in the struct.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteArgs {
    /// `file`.
    pub file: NfsFh3,
    /// `offset`.
    pub offset: u64,
    /// `count`: bytes to write (equal to `data.len()` in practice; not checked here).
    pub count: u32,
    /// `stable`.
    pub stable: StableHow,
    /// `data` (DDP-eligible, RFC 8267).
    pub data: Vec<u8>,
}

impl WriteArgs {
    /// Everything but the data.
    pub fn head(&self) -> WriteHead {
        WriteHead {
            file: self.file.clone(),
            offset: self.offset,
            count: self.count,
            stable: self.stable,
        }
    }

    /// Write everything up to and including the data's length word (`data.len()`), not the
    /// data or its pad (see [`WriteHead::encode_head`]).
    pub fn encode_head(&self, e: &mut Encoder) {
        self.file.encode(e);
        e.u64(self.offset);
        e.u32(self.count);
        self.stable.encode(e);
        put_len(e, self.data.len());
    }

    /// Decode everything up to and including the data's length word, leaving `d` at the
    /// first data byte (`d.pos()` is the data's offset in the buffer): a server finds the
    /// data without copying it. Returns the head and the data length; the data (and its pad)
    /// need not be present.
    ///
    /// # Errors
    /// Malformed or truncated input.
    pub fn decode_head(d: &mut Decoder<'_>) -> Result<(WriteHead, u32), XdrError> {
        let head = WriteHead {
            file: NfsFh3::decode(d)?,
            offset: d.u64()?,
            count: d.u32()?,
            stable: StableHow::decode(d)?,
        };
        let len = d.u32()?;
        Ok((head, len))
    }

    /// Decode with the data bounded by `max_data` bytes ([`XdrError::TooLong`] beyond).
    ///
    /// # Errors
    /// Malformed or truncated input, data longer than `max_data`, [`XdrError::Alloc`].
    pub fn decode_with_max(d: &mut Decoder<'_>, max_data: usize) -> Result<Self, XdrError> {
        let (h, len) = Self::decode_head(d)?;
        let len = len as usize;
        if len > max_data {
            return Err(XdrError::TooLong {
                what: "WRITE3args data",
                len,
                max: max_data,
            });
        }
        let data = to_vec(d.opaque_fixed(len)?)?;
        Ok(WriteArgs {
            file: h.file,
            offset: h.offset,
            count: h.count,
            stable: h.stable,
            data,
        })
    }
}

/// The data bounded by [`NFS3_MAX_DATA`].
impl Xdr for WriteArgs {
    fn encode(&self, e: &mut Encoder) {
        self.encode_head(e);
        e.opaque_fixed(&self.data);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Self::decode_with_max(d, NFS3_MAX_DATA)
    }
}

xdr_struct! {
    /// `CREATE3args`.
    pub struct CreateArgs {
        /// `where`.
        pub where_: Diropargs3,
        /// `how`.
        pub how: Createhow3,
    }
}

xdr_struct! {
    /// `MKDIR3args`.
    pub struct MkdirArgs {
        /// `where`.
        pub where_: Diropargs3,
        /// `attributes`.
        pub attributes: Sattr3,
    }
}

/// `SYMLINK3args` up to, not including, the target path: what
/// [`SymlinkArgs::decode_head`] returns and [`SymlinkHead::encode_head`] writes (with the
/// path's length word).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymlinkHead {
    /// `where`.
    pub where_: Diropargs3,
    /// `symlink.symlink_attributes`.
    pub symlink_attributes: Sattr3,
}

impl SymlinkHead {
    /// Write `where`, `symlink_attributes` and the length word `data_len` of `symlink_data`,
    /// not the path or its pad (RFC 8267: the path travels as a read chunk). A length above
    /// [`NFS3_MAXPATHLEN`] marks `e` failed.
    pub fn encode_head(&self, e: &mut Encoder, data_len: u32) {
        self.where_.encode(e);
        self.symlink_attributes.encode(e);
        if data_len as usize > NFS3_MAXPATHLEN {
            e.fail();
        }
        e.u32(data_len);
    }
}

xdr_struct! {
    /// `SYMLINK3args`.
    pub struct SymlinkArgs {
        /// `where`.
        pub where_: Diropargs3,
        /// `symlink`: attributes and target.
        pub symlink: Symlinkdata3,
    }
}

impl SymlinkArgs {
    /// Write everything up to and including `symlink_data`'s length word, not the path or its
    /// pad (see [`SymlinkHead::encode_head`]).
    pub fn encode_head(&self, e: &mut Encoder) {
        self.where_.encode(e);
        self.symlink.symlink_attributes.encode(e);
        let p = &self.symlink.symlink_data.0;
        if p.len() > NFS3_MAXPATHLEN {
            e.fail();
        }
        put_len(e, p.len());
    }

    /// Decode everything up to and including `symlink_data`'s length word (at most
    /// [`NFS3_MAXPATHLEN`]), leaving `d` at the path's first byte. Returns the head and the
    /// path length.
    ///
    /// # Errors
    /// Malformed or truncated input, [`XdrError::TooLong`].
    pub fn decode_head(d: &mut Decoder<'_>) -> Result<(SymlinkHead, u32), XdrError> {
        let where_ = Diropargs3::decode(d)?;
        let symlink_attributes = Sattr3::decode(d)?;
        let len = d.opaque_len("nfspath3", NFS3_MAXPATHLEN)?;
        Ok((
            SymlinkHead {
                where_,
                symlink_attributes,
            },
            // Bounded by NFS3_MAXPATHLEN above.
            len as u32,
        ))
    }
}

xdr_struct! {
    /// `MKNOD3args`.
    pub struct MknodArgs {
        /// `where`.
        pub where_: Diropargs3,
        /// `what`.
        pub what: Mknoddata3,
    }
}

xdr_struct! {
    /// `REMOVE3args`.
    pub struct RemoveArgs {
        /// `object`.
        pub object: Diropargs3,
    }
}

xdr_struct! {
    /// `RMDIR3args`.
    pub struct RmdirArgs {
        /// `object`.
        pub object: Diropargs3,
    }
}

xdr_struct! {
    /// `RENAME3args`.
    pub struct RenameArgs {
        /// `from`.
        pub from: Diropargs3,
        /// `to`.
        pub to: Diropargs3,
    }
}

xdr_struct! {
    /// `LINK3args`.
    pub struct LinkArgs {
        /// `file`.
        pub file: NfsFh3,
        /// `link`: where the new name goes.
        pub link: Diropargs3,
    }
}

xdr_struct! {
    /// `READDIR3args`.
    pub struct ReaddirArgs {
        /// `dir`.
        pub dir: NfsFh3,
        /// `cookie`: 0 to start.
        pub cookie: u64,
        /// `cookieverf`.
        pub cookieverf: Cookieverf3,
        /// `count`: the most bytes of `READDIR3resok` wanted.
        pub count: u32,
    }
}

xdr_struct! {
    /// `READDIRPLUS3args`.
    pub struct ReaddirplusArgs {
        /// `dir`.
        pub dir: NfsFh3,
        /// `cookie`: 0 to start.
        pub cookie: u64,
        /// `cookieverf`.
        pub cookieverf: Cookieverf3,
        /// `dircount`: the most bytes of directory information (file ids, names, cookies).
        pub dircount: u32,
        /// `maxcount`: the most bytes of `READDIRPLUS3resok`.
        pub maxcount: u32,
    }
}

xdr_struct! {
    /// `FSSTAT3args`.
    pub struct FsstatArgs {
        /// `fsroot`.
        pub fsroot: NfsFh3,
    }
}

xdr_struct! {
    /// `FSINFO3args`.
    pub struct FsinfoArgs {
        /// `fsroot`.
        pub fsroot: NfsFh3,
    }
}

xdr_struct! {
    /// `PATHCONF3args`.
    pub struct PathconfArgs {
        /// `object`.
        pub object: NfsFh3,
    }
}

xdr_struct! {
    /// `COMMIT3args`.
    pub struct CommitArgs {
        /// `file`.
        pub file: NfsFh3,
        /// `offset`.
        pub offset: u64,
        /// `count`: bytes to commit, 0 for "to the end of the file".
        pub count: u32,
    }
}

inherent_xdr!(WriteArgs);
