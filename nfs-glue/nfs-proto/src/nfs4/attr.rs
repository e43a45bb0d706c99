//! File attributes (RFC 8881 section 5): the attribute numbers and a small typed set,
//! [`Attrs4`], converted to and from the raw [`Fattr4`].

use onc_rpc::xdr::{Decoder, Encoder, XdrError};

use super::{Bitmap4, Fattr4, NfsFtype4, Nfstime4, Utf8Str, NFS4_MAX_ATTRLIST};

/// `FATTR4_SUPPORTED_ATTRS` (bitmap4).
pub const FATTR4_SUPPORTED_ATTRS: u32 = 0;
/// `FATTR4_TYPE` (`nfs_ftype4`).
pub const FATTR4_TYPE: u32 = 1;
/// `FATTR4_FH_EXPIRE_TYPE` (uint32_t).
pub const FATTR4_FH_EXPIRE_TYPE: u32 = 2;
/// `FATTR4_CHANGE` (`changeid4`, uint64_t).
pub const FATTR4_CHANGE: u32 = 3;
/// `FATTR4_SIZE` (uint64_t).
pub const FATTR4_SIZE: u32 = 4;
/// `FATTR4_FSID` (`fsid4`).
pub const FATTR4_FSID: u32 = 8;
/// `FATTR4_LEASE_TIME` (uint32_t seconds).
pub const FATTR4_LEASE_TIME: u32 = 10;
/// `FATTR4_FILEHANDLE` (`nfs_fh4`).
pub const FATTR4_FILEHANDLE: u32 = 19;
/// `FATTR4_FILEID` (uint64_t).
pub const FATTR4_FILEID: u32 = 20;
/// `FATTR4_MODE` (`mode4`, uint32_t).
pub const FATTR4_MODE: u32 = 33;
/// `FATTR4_NUMLINKS` (uint32_t).
pub const FATTR4_NUMLINKS: u32 = 35;
/// `FATTR4_OWNER` (`utf8str_mixed`).
pub const FATTR4_OWNER: u32 = 36;
/// `FATTR4_OWNER_GROUP` (`utf8str_mixed`).
pub const FATTR4_OWNER_GROUP: u32 = 37;
/// `FATTR4_SPACE_USED` (uint64_t).
pub const FATTR4_SPACE_USED: u32 = 45;
/// `FATTR4_TIME_ACCESS` (`nfstime4`).
pub const FATTR4_TIME_ACCESS: u32 = 47;
/// `FATTR4_TIME_METADATA` (`nfstime4`).
pub const FATTR4_TIME_METADATA: u32 = 52;
/// `FATTR4_TIME_MODIFY` (`nfstime4`).
pub const FATTR4_TIME_MODIFY: u32 = 53;

/// The attributes [`Attrs4`] holds, in increasing number (the order of an `attrlist4`).
pub const ATTRS4_TYPED: [u32; 9] = [
    FATTR4_TYPE,
    FATTR4_CHANGE,
    FATTR4_SIZE,
    FATTR4_FILEID,
    FATTR4_MODE,
    FATTR4_NUMLINKS,
    FATTR4_OWNER,
    FATTR4_OWNER_GROUP,
    FATTR4_TIME_MODIFY,
];

/// A typed set of attributes: each `Some` is in the set. What a client asks GETATTR for
/// (with [`Attrs4::request`]) and what OPEN's `createattrs` usually holds (mode, size).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attrs4 {
    /// `type`.
    pub type_: Option<NfsFtype4>,
    /// `change`.
    pub change: Option<u64>,
    /// `size`.
    pub size: Option<u64>,
    /// `fileid`.
    pub fileid: Option<u64>,
    /// `mode`.
    pub mode: Option<u32>,
    /// `numlinks`.
    pub numlinks: Option<u32>,
    /// `owner`.
    pub owner: Option<Utf8Str>,
    /// `owner_group`.
    pub owner_group: Option<Utf8Str>,
    /// `time_modify`.
    pub time_modify: Option<Nfstime4>,
}

impl Attrs4 {
    /// The `bitmap4` asking for every attribute of the typed set (GETATTR's `attr_request`).
    pub fn request() -> Bitmap4 {
        Bitmap4::from_bits(&ATTRS4_TYPED)
    }

    /// The bitmap of the attributes present.
    pub fn bitmap(&self) -> Bitmap4 {
        let present = [
            self.type_.is_some(),
            self.change.is_some(),
            self.size.is_some(),
            self.fileid.is_some(),
            self.mode.is_some(),
            self.numlinks.is_some(),
            self.owner.is_some(),
            self.owner_group.is_some(),
            self.time_modify.is_some(),
        ];
        let mut b = Bitmap4::new();
        for (bit, p) in ATTRS4_TYPED.iter().zip(present) {
            if p {
                b.set(*bit);
            }
        }
        b
    }

    /// The raw form: the bitmap of the attributes present and their values in increasing
    /// attribute number.
    ///
    /// # Errors
    /// [`XdrError::Alloc`] when a value cannot be encoded (an owner longer than
    /// [`NFS4_MAX_UTF8`](super::NFS4_MAX_UTF8)) or memory runs out.
    pub fn to_fattr4(&self) -> Result<Fattr4, XdrError> {
        let mut e = Encoder::new();
        if let Some(v) = &self.type_ {
            v.encode(&mut e);
        }
        for v in [&self.change, &self.size, &self.fileid]
            .into_iter()
            .flatten()
        {
            e.u64(*v);
        }
        for v in [&self.mode, &self.numlinks].into_iter().flatten() {
            e.u32(*v);
        }
        for v in [&self.owner, &self.owner_group].into_iter().flatten() {
            v.encode(&mut e);
        }
        if let Some(v) = &self.time_modify {
            v.encode(&mut e);
        }
        let attr_vals = e.finish()?;
        if attr_vals.len() > NFS4_MAX_ATTRLIST {
            return Err(XdrError::Alloc);
        }
        Ok(Fattr4 {
            attrmask: self.bitmap(),
            attr_vals,
        })
    }

    /// The typed form of `f`: every attribute its bitmap names, decoded from `attr_vals` in
    /// increasing attribute number. An attribute outside [`ATTRS4_TYPED`] is refused, not
    /// skipped ([`XdrError::BadEnum`] with `what` "fattr4 attribute outside the typed set"
    /// and the attribute number): an `attrlist4` carries no lengths, so one attribute this
    /// code does not decode leaves the ones after it unreadable. (A client that asks only
    /// for the typed set, as [`Attrs4::request`] does, gets only those from a conforming
    /// server.) Bytes left over in `attr_vals` are [`XdrError::TooLong`].
    ///
    /// # Errors
    /// As above, and any malformed or truncated value.
    pub fn from_fattr4(f: &Fattr4) -> Result<Attrs4, XdrError> {
        let mut a = Attrs4::default();
        let mut d = Decoder::new(&f.attr_vals);
        for bit in f.attrmask.bits() {
            match bit {
                FATTR4_TYPE => a.type_ = Some(NfsFtype4::decode(&mut d)?),
                FATTR4_CHANGE => a.change = Some(d.u64()?),
                FATTR4_SIZE => a.size = Some(d.u64()?),
                FATTR4_FILEID => a.fileid = Some(d.u64()?),
                FATTR4_MODE => a.mode = Some(d.u32()?),
                FATTR4_NUMLINKS => a.numlinks = Some(d.u32()?),
                FATTR4_OWNER => a.owner = Some(Utf8Str::decode(&mut d)?),
                FATTR4_OWNER_GROUP => a.owner_group = Some(Utf8Str::decode(&mut d)?),
                FATTR4_TIME_MODIFY => a.time_modify = Some(Nfstime4::decode(&mut d)?),
                value => {
                    return Err(XdrError::BadEnum {
                        what: "fattr4 attribute outside the typed set",
                        value,
                    })
                }
            }
        }
        if d.remaining() != 0 {
            return Err(XdrError::TooLong {
                what: "fattr4 attr_vals (bytes after the last attribute)",
                len: f.attr_vals.len(),
                max: d.pos(),
            });
        }
        Ok(a)
    }
}
