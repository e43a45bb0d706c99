//! OPEN, CLOSE and DELEGRETURN (RFC 8881 sections 18.16, 18.2, 18.6), with the delegation
//! an OPEN may grant. DELEGRETURN's result is a status ([`Nfsstat4`](super::Nfsstat4)).

use onc_rpc::xdr::{Decoder, Encoder, XdrError};

use super::{
    Bitmap4, ChangeInfo4, Component4, Fattr4, Nfsace4, OpenOwner4, Res4, Stateid4, Verifier4, Xdr,
};

/// `OPEN4_SHARE_ACCESS_READ`.
pub const OPEN4_SHARE_ACCESS_READ: u32 = 0x0000_0001;
/// `OPEN4_SHARE_ACCESS_WRITE`.
pub const OPEN4_SHARE_ACCESS_WRITE: u32 = 0x0000_0002;
/// `OPEN4_SHARE_ACCESS_BOTH`.
pub const OPEN4_SHARE_ACCESS_BOTH: u32 = 0x0000_0003;
/// `OPEN4_SHARE_DENY_NONE`.
pub const OPEN4_SHARE_DENY_NONE: u32 = 0x0000_0000;
/// `OPEN4_SHARE_DENY_READ`.
pub const OPEN4_SHARE_DENY_READ: u32 = 0x0000_0001;
/// `OPEN4_SHARE_DENY_WRITE`.
pub const OPEN4_SHARE_DENY_WRITE: u32 = 0x0000_0002;
/// `OPEN4_SHARE_DENY_BOTH`.
pub const OPEN4_SHARE_DENY_BOTH: u32 = 0x0000_0003;
/// `OPEN4_SHARE_ACCESS_WANT_DELEG_MASK`: the delegation-wish field of `share_access`.
pub const OPEN4_SHARE_ACCESS_WANT_DELEG_MASK: u32 = 0xFF00;
/// `OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE`.
pub const OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE: u32 = 0x0000;
/// `OPEN4_SHARE_ACCESS_WANT_READ_DELEG`.
pub const OPEN4_SHARE_ACCESS_WANT_READ_DELEG: u32 = 0x0100;
/// `OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG`.
pub const OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG: u32 = 0x0200;
/// `OPEN4_SHARE_ACCESS_WANT_ANY_DELEG`.
pub const OPEN4_SHARE_ACCESS_WANT_ANY_DELEG: u32 = 0x0300;
/// `OPEN4_SHARE_ACCESS_WANT_NO_DELEG`.
pub const OPEN4_SHARE_ACCESS_WANT_NO_DELEG: u32 = 0x0400;
/// `OPEN4_SHARE_ACCESS_WANT_CANCEL`.
pub const OPEN4_SHARE_ACCESS_WANT_CANCEL: u32 = 0x0500;
/// `OPEN4_SHARE_ACCESS_WANT_SIGNAL_DELEG_WHEN_RESRC_AVAIL`.
pub const OPEN4_SHARE_ACCESS_WANT_SIGNAL_DELEG_WHEN_RESRC_AVAIL: u32 = 0x1_0000;
/// `OPEN4_SHARE_ACCESS_WANT_PUSH_DELEG_WHEN_UNCONTENDED`.
pub const OPEN4_SHARE_ACCESS_WANT_PUSH_DELEG_WHEN_UNCONTENDED: u32 = 0x2_0000;

/// `OPEN4_RESULT_CONFIRM` (NFSv4.0 only).
pub const OPEN4_RESULT_CONFIRM: u32 = 0x0000_0002;
/// `OPEN4_RESULT_LOCKTYPE_POSIX`.
pub const OPEN4_RESULT_LOCKTYPE_POSIX: u32 = 0x0000_0004;
/// `OPEN4_RESULT_PRESERVE_UNLINKED`.
pub const OPEN4_RESULT_PRESERVE_UNLINKED: u32 = 0x0000_0008;
/// `OPEN4_RESULT_MAY_NOTIFY_LOCK`.
pub const OPEN4_RESULT_MAY_NOTIFY_LOCK: u32 = 0x0000_0020;

xdr4_enum! {
    /// `opentype4`: the discriminant of [`Openflag4`].
    pub enum Opentype4 ("opentype4") {
        /// `OPEN4_NOCREATE`.
        NoCreate = 0,
        /// `OPEN4_CREATE`.
        Create = 1,
    }
}

xdr4_enum! {
    /// `createmode4`: the discriminant of [`Createhow4`].
    pub enum Createmode4 ("createmode4") {
        /// `UNCHECKED4`.
        Unchecked = 0,
        /// `GUARDED4`.
        Guarded = 1,
        /// `EXCLUSIVE4` (NFSv4.0 style).
        Exclusive = 2,
        /// `EXCLUSIVE4_1`.
        Exclusive41 = 3,
    }
}

xdr4_struct! {
    /// `creatverfattr`: EXCLUSIVE4_1's verifier and attributes.
    #[derive(Hash)]
    pub struct Creatverfattr {
        /// `cva_verf`.
        pub cva_verf: Verifier4,
        /// `cva_attrs`.
        pub cva_attrs: Fattr4,
    }
}

/// `createhow4`: how OPEN creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Createhow4 {
    /// `UNCHECKED4` with `createattrs`.
    Unchecked(Fattr4),
    /// `GUARDED4` with `createattrs`.
    Guarded(Fattr4),
    /// `EXCLUSIVE4` with `createverf`.
    Exclusive(Verifier4),
    /// `EXCLUSIVE4_1` with `ch_createboth`.
    Exclusive41(Creatverfattr),
}

impl Xdr for Createhow4 {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Createhow4::Unchecked(a) => {
                Createmode4::Unchecked.encode(e);
                a.encode(e);
            }
            Createhow4::Guarded(a) => {
                Createmode4::Guarded.encode(e);
                a.encode(e);
            }
            Createhow4::Exclusive(v) => {
                Createmode4::Exclusive.encode(e);
                v.encode(e);
            }
            Createhow4::Exclusive41(c) => {
                Createmode4::Exclusive41.encode(e);
                c.encode(e);
            }
        }
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(match Createmode4::decode(d)? {
            Createmode4::Unchecked => Createhow4::Unchecked(Fattr4::decode(d)?),
            Createmode4::Guarded => Createhow4::Guarded(Fattr4::decode(d)?),
            Createmode4::Exclusive => Createhow4::Exclusive(Verifier4::decode(d)?),
            Createmode4::Exclusive41 => Createhow4::Exclusive41(Creatverfattr::decode(d)?),
        })
    }
}

/// `openflag4`: open an existing file, or create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Openflag4 {
    /// `OPEN4_NOCREATE`.
    NoCreate,
    /// `OPEN4_CREATE` with how.
    Create(Createhow4),
}

impl Xdr for Openflag4 {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Openflag4::NoCreate => Opentype4::NoCreate.encode(e),
            Openflag4::Create(how) => {
                Opentype4::Create.encode(e);
                how.encode(e);
            }
        }
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(match Opentype4::decode(d)? {
            Opentype4::NoCreate => Openflag4::NoCreate,
            Opentype4::Create => Openflag4::Create(Createhow4::decode(d)?),
        })
    }
}

xdr4_enum! {
    /// `open_delegation_type4`: the discriminant of [`OpenDelegation4`], and CLAIM_PREVIOUS's
    /// `delegate_type`.
    pub enum OpenDelegationType4 ("open_delegation_type4") {
        /// `OPEN_DELEGATE_NONE`.
        None = 0,
        /// `OPEN_DELEGATE_READ`.
        Read = 1,
        /// `OPEN_DELEGATE_WRITE`.
        Write = 2,
        /// `OPEN_DELEGATE_NONE_EXT`.
        NoneExt = 3,
    }
}

xdr4_enum! {
    /// `open_claim_type4`: the discriminant of [`OpenClaim4`].
    pub enum OpenClaimType4 ("open_claim_type4") {
        /// `CLAIM_NULL`.
        Null = 0,
        /// `CLAIM_PREVIOUS`.
        Previous = 1,
        /// `CLAIM_DELEGATE_CUR`.
        DelegateCur = 2,
        /// `CLAIM_DELEGATE_PREV`.
        DelegatePrev = 3,
        /// `CLAIM_FH`.
        Fh = 4,
        /// `CLAIM_DELEG_CUR_FH`.
        DelegCurFh = 5,
        /// `CLAIM_DELEG_PREV_FH`.
        DelegPrevFh = 6,
    }
}

/// `open_claim4`: what OPEN opens and on what grounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenClaim4 {
    /// `CLAIM_NULL`: `file` in the current directory.
    Null(Component4),
    /// `CLAIM_PREVIOUS`: reclaim after a server restart (the delegation type held).
    Previous(OpenDelegationType4),
    /// `CLAIM_DELEGATE_CUR`: open under a delegation (`delegate_stateid`, `file`).
    DelegateCur(Stateid4, Component4),
    /// `CLAIM_DELEGATE_PREV`: `file_delegate_prev`, reclaim under a delegation.
    DelegatePrev(Component4),
    /// `CLAIM_FH`: the current file handle.
    Fh,
    /// `CLAIM_DELEG_CUR_FH`: the current file handle under a delegation
    /// (`oc_delegate_stateid`).
    DelegCurFh(Stateid4),
    /// `CLAIM_DELEG_PREV_FH`.
    DelegPrevFh,
}

impl Xdr for OpenClaim4 {
    fn encode(&self, e: &mut Encoder) {
        match self {
            OpenClaim4::Null(f) => {
                OpenClaimType4::Null.encode(e);
                f.encode(e);
            }
            OpenClaim4::Previous(t) => {
                OpenClaimType4::Previous.encode(e);
                t.encode(e);
            }
            OpenClaim4::DelegateCur(s, f) => {
                OpenClaimType4::DelegateCur.encode(e);
                s.encode(e);
                f.encode(e);
            }
            OpenClaim4::DelegatePrev(f) => {
                OpenClaimType4::DelegatePrev.encode(e);
                f.encode(e);
            }
            OpenClaim4::Fh => OpenClaimType4::Fh.encode(e),
            OpenClaim4::DelegCurFh(s) => {
                OpenClaimType4::DelegCurFh.encode(e);
                s.encode(e);
            }
            OpenClaim4::DelegPrevFh => OpenClaimType4::DelegPrevFh.encode(e),
        }
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(match OpenClaimType4::decode(d)? {
            OpenClaimType4::Null => OpenClaim4::Null(Component4::decode(d)?),
            OpenClaimType4::Previous => OpenClaim4::Previous(OpenDelegationType4::decode(d)?),
            OpenClaimType4::DelegateCur => {
                OpenClaim4::DelegateCur(Stateid4::decode(d)?, Component4::decode(d)?)
            }
            OpenClaimType4::DelegatePrev => OpenClaim4::DelegatePrev(Component4::decode(d)?),
            OpenClaimType4::Fh => OpenClaim4::Fh,
            OpenClaimType4::DelegCurFh => OpenClaim4::DelegCurFh(Stateid4::decode(d)?),
            OpenClaimType4::DelegPrevFh => OpenClaim4::DelegPrevFh,
        })
    }
}

inherent_xdr4!(Createhow4, Openflag4, OpenClaim4);

xdr4_struct! {
    /// `OPEN4args`.
    pub struct Open4Args {
        /// `seqid` (ignored in NFSv4.1; 0).
        pub seqid: u32,
        /// `share_access`: `OPEN4_SHARE_ACCESS_*`, with the `OPEN4_SHARE_ACCESS_WANT_*`
        /// delegation wishes or'ed in.
        pub share_access: u32,
        /// `share_deny`: `OPEN4_SHARE_DENY_*`.
        pub share_deny: u32,
        /// `owner`.
        pub owner: OpenOwner4,
        /// `openhow`.
        pub openhow: Openflag4,
        /// `claim`.
        pub claim: OpenClaim4,
    }
}

/// `limit_by4` NFS_LIMIT_SIZE.
pub const NFS_LIMIT_SIZE: u32 = 1;
/// `limit_by4` NFS_LIMIT_BLOCKS.
pub const NFS_LIMIT_BLOCKS: u32 = 2;

/// `nfs_space_limit4`: how far a client holding a write delegation may extend the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpaceLimit4 {
    /// `NFS_LIMIT_SIZE`: `filesize`.
    Size(u64),
    /// `NFS_LIMIT_BLOCKS`: `mod_blocks` (`num_blocks`, `bytes_per_block`).
    Blocks {
        /// `num_blocks`.
        num_blocks: u32,
        /// `bytes_per_block`.
        bytes_per_block: u32,
    },
}

impl Xdr for SpaceLimit4 {
    fn encode(&self, e: &mut Encoder) {
        match self {
            SpaceLimit4::Size(s) => {
                e.u32(NFS_LIMIT_SIZE);
                e.u64(*s);
            }
            SpaceLimit4::Blocks {
                num_blocks,
                bytes_per_block,
            } => {
                e.u32(NFS_LIMIT_BLOCKS);
                e.u32(*num_blocks);
                e.u32(*bytes_per_block);
            }
        }
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        match d.u32()? {
            NFS_LIMIT_SIZE => Ok(SpaceLimit4::Size(d.u64()?)),
            NFS_LIMIT_BLOCKS => Ok(SpaceLimit4::Blocks {
                num_blocks: d.u32()?,
                bytes_per_block: d.u32()?,
            }),
            value => Err(XdrError::BadEnum {
                what: "limit_by4",
                value,
            }),
        }
    }
}

xdr4_struct! {
    /// `open_read_delegation4`.
    #[derive(Hash)]
    pub struct OpenReadDelegation4 {
        /// `stateid`: the delegation's.
        pub stateid: Stateid4,
        /// `recall`: the delegation is being recalled already.
        pub recall: bool,
        /// `permissions`.
        pub permissions: Nfsace4,
    }
}

xdr4_struct! {
    /// `open_write_delegation4`.
    #[derive(Hash)]
    pub struct OpenWriteDelegation4 {
        /// `stateid`: the delegation's.
        pub stateid: Stateid4,
        /// `recall`.
        pub recall: bool,
        /// `space_limit`.
        pub space_limit: SpaceLimit4,
        /// `permissions`.
        pub permissions: Nfsace4,
    }
}

/// `why_no_delegation4` WND4_NOT_WANTED.
pub const WND4_NOT_WANTED: u32 = 0;
/// `why_no_delegation4` WND4_CONTENTION.
pub const WND4_CONTENTION: u32 = 1;
/// `why_no_delegation4` WND4_RESOURCE.
pub const WND4_RESOURCE: u32 = 2;
/// `why_no_delegation4` WND4_NOT_SUPP_FTYPE.
pub const WND4_NOT_SUPP_FTYPE: u32 = 3;
/// `why_no_delegation4` WND4_WRITE_DELEG_NOT_SUPP_FTYPE.
pub const WND4_WRITE_DELEG_NOT_SUPP_FTYPE: u32 = 4;
/// `why_no_delegation4` WND4_NOT_SUPP_UPGRADE.
pub const WND4_NOT_SUPP_UPGRADE: u32 = 5;
/// `why_no_delegation4` WND4_NOT_SUPP_DOWNGRADE.
pub const WND4_NOT_SUPP_DOWNGRADE: u32 = 6;
/// `why_no_delegation4` WND4_CANCELLED.
pub const WND4_CANCELLED: u32 = 7;
/// `why_no_delegation4` WND4_IS_DIR.
pub const WND4_IS_DIR: u32 = 8;

/// `open_none_delegation4`: why the server granted no delegation (OPEN_DELEGATE_NONE_EXT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpenNoneDelegation4 {
    /// `WND4_CONTENTION` with `ond_server_will_push_deleg`.
    Contention(bool),
    /// `WND4_RESOURCE` with `ond_server_will_signal_avail`.
    Resource(bool),
    /// Any other `WND4_*` reason (the `void` arms): one of the constants
    /// [`WND4_NOT_WANTED`] and [`WND4_NOT_SUPP_FTYPE`] to [`WND4_IS_DIR`]. Encoding
    /// [`WND4_CONTENTION`], [`WND4_RESOURCE`] or an undefined reason here marks the encoder
    /// failed; decoding an undefined reason is [`XdrError::BadEnum`].
    Other(u32),
}

impl Xdr for OpenNoneDelegation4 {
    fn encode(&self, e: &mut Encoder) {
        match self {
            OpenNoneDelegation4::Contention(b) => {
                e.u32(WND4_CONTENTION);
                e.bool(*b);
            }
            OpenNoneDelegation4::Resource(b) => {
                e.u32(WND4_RESOURCE);
                e.bool(*b);
            }
            OpenNoneDelegation4::Other(w) => {
                if matches!(*w, WND4_CONTENTION | WND4_RESOURCE) || *w > WND4_IS_DIR {
                    e.fail();
                }
                e.u32(*w);
            }
        }
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        match d.u32()? {
            WND4_CONTENTION => Ok(OpenNoneDelegation4::Contention(d.bool()?)),
            WND4_RESOURCE => Ok(OpenNoneDelegation4::Resource(d.bool()?)),
            w if w <= WND4_IS_DIR => Ok(OpenNoneDelegation4::Other(w)),
            value => Err(XdrError::BadEnum {
                what: "why_no_delegation4",
                value,
            }),
        }
    }
}

/// `open_delegation4`: the delegation OPEN granted, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenDelegation4 {
    /// `OPEN_DELEGATE_NONE`.
    None,
    /// `OPEN_DELEGATE_READ`.
    Read(OpenReadDelegation4),
    /// `OPEN_DELEGATE_WRITE`.
    Write(OpenWriteDelegation4),
    /// `OPEN_DELEGATE_NONE_EXT`: none, and why.
    NoneExt(OpenNoneDelegation4),
}

impl Xdr for OpenDelegation4 {
    fn encode(&self, e: &mut Encoder) {
        match self {
            OpenDelegation4::None => OpenDelegationType4::None.encode(e),
            OpenDelegation4::Read(r) => {
                OpenDelegationType4::Read.encode(e);
                r.encode(e);
            }
            OpenDelegation4::Write(w) => {
                OpenDelegationType4::Write.encode(e);
                w.encode(e);
            }
            OpenDelegation4::NoneExt(n) => {
                OpenDelegationType4::NoneExt.encode(e);
                n.encode(e);
            }
        }
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(match OpenDelegationType4::decode(d)? {
            OpenDelegationType4::None => OpenDelegation4::None,
            OpenDelegationType4::Read => OpenDelegation4::Read(OpenReadDelegation4::decode(d)?),
            OpenDelegationType4::Write => OpenDelegation4::Write(OpenWriteDelegation4::decode(d)?),
            OpenDelegationType4::NoneExt => {
                OpenDelegation4::NoneExt(OpenNoneDelegation4::decode(d)?)
            }
        })
    }
}

inherent_xdr4!(SpaceLimit4, OpenNoneDelegation4, OpenDelegation4);

xdr4_struct! {
    /// `OPEN4resok`.
    pub struct Open4ResOk {
        /// `stateid`: the open stateid.
        pub stateid: Stateid4,
        /// `cinfo`: the directory's change (CLAIM_NULL).
        pub cinfo: ChangeInfo4,
        /// `rflags`: `OPEN4_RESULT_*`.
        pub rflags: u32,
        /// `attrset`: the `createattrs` the server set.
        pub attrset: Bitmap4,
        /// `delegation`.
        pub delegation: OpenDelegation4,
    }
}

/// `OPEN4res`.
pub type Open4Res = Res4<Open4ResOk>;

xdr4_struct! {
    /// `CLOSE4args`.
    #[derive(Copy, Hash)]
    pub struct Close4Args {
        /// `seqid` (ignored in NFSv4.1; 0).
        pub seqid: u32,
        /// `open_stateid`.
        pub open_stateid: Stateid4,
    }
}

/// `CLOSE4res`: the (now invalid) open stateid on `NFS4_OK`.
pub type Close4Res = Res4<Stateid4>;

xdr4_struct! {
    /// `DELEGRETURN4args` (result: `DELEGRETURN4res`, a status).
    #[derive(Copy, Hash)]
    pub struct Delegreturn4Args {
        /// `deleg_stateid`.
        pub deleg_stateid: Stateid4,
    }
}
