//! The COMPOUND procedure (RFC 8881 sections 16.2, 18): operation numbers, the
//! `nfs_argop4` / `nfs_resop4` unions of the operations this codec implements, and
//! `COMPOUND4args` / `COMPOUND4res`.

use alloc::vec::Vec;

use onc_rpc::rpc::{Auth, CallHeader};
use onc_rpc::xdr::{Decoder, Encoder, XdrError};

use super::{
    get_array_with, put_array, Close4Args, Close4Res, CreateSession4Args, CreateSession4Res,
    Delegreturn4Args, DestroyClientid4Args, DestroySession4Args, ExchangeId4Args, ExchangeId4Res,
    Getattr4Args, Getattr4Res, Getfh4Res, Lookup4Args, Nfsstat4, Open4Args, Open4Res, Putfh4Args,
    Read4Args, Read4Res, Readdir4Args, Readdir4Res, ReclaimComplete4Args, Sequence4Args,
    Sequence4Res, Utf8Str, Write4Args, Write4Res, Xdr, NFS4_MAX_DATA, NFS4_MAX_OPS, NFS4_PROGRAM,
    NFSPROC4_COMPOUND, NFS_V4,
};

/// Define the `OP_*` constants and [`op_name`].
macro_rules! ops {
    ($( $c:ident = $n:literal => $s:literal, )*) => {
        $( #[doc = concat!("`", stringify!($c), "`: operation ", stringify!($n), ".")]
           pub const $c: u32 = $n; )*

        /// The name of NFSv4.1 operation `op` ("SEQUENCE", …), or `None` for a number RFC
        /// 8881 does not define.
        pub fn op_name(op: u32) -> Option<&'static str> {
            Some(match op {
                $( $n => $s, )*
                _ => return None,
            })
        }
    };
}

ops! {
    OP_ACCESS = 3 => "ACCESS",
    OP_CLOSE = 4 => "CLOSE",
    OP_COMMIT = 5 => "COMMIT",
    OP_CREATE = 6 => "CREATE",
    OP_DELEGPURGE = 7 => "DELEGPURGE",
    OP_DELEGRETURN = 8 => "DELEGRETURN",
    OP_GETATTR = 9 => "GETATTR",
    OP_GETFH = 10 => "GETFH",
    OP_LINK = 11 => "LINK",
    OP_LOCK = 12 => "LOCK",
    OP_LOCKT = 13 => "LOCKT",
    OP_LOCKU = 14 => "LOCKU",
    OP_LOOKUP = 15 => "LOOKUP",
    OP_LOOKUPP = 16 => "LOOKUPP",
    OP_NVERIFY = 17 => "NVERIFY",
    OP_OPEN = 18 => "OPEN",
    OP_OPENATTR = 19 => "OPENATTR",
    OP_OPEN_CONFIRM = 20 => "OPEN_CONFIRM",
    OP_OPEN_DOWNGRADE = 21 => "OPEN_DOWNGRADE",
    OP_PUTFH = 22 => "PUTFH",
    OP_PUTPUBFH = 23 => "PUTPUBFH",
    OP_PUTROOTFH = 24 => "PUTROOTFH",
    OP_READ = 25 => "READ",
    OP_READDIR = 26 => "READDIR",
    OP_READLINK = 27 => "READLINK",
    OP_REMOVE = 28 => "REMOVE",
    OP_RENAME = 29 => "RENAME",
    OP_RENEW = 30 => "RENEW",
    OP_RESTOREFH = 31 => "RESTOREFH",
    OP_SAVEFH = 32 => "SAVEFH",
    OP_SECINFO = 33 => "SECINFO",
    OP_SETATTR = 34 => "SETATTR",
    OP_SETCLIENTID = 35 => "SETCLIENTID",
    OP_SETCLIENTID_CONFIRM = 36 => "SETCLIENTID_CONFIRM",
    OP_VERIFY = 37 => "VERIFY",
    OP_WRITE = 38 => "WRITE",
    OP_RELEASE_LOCKOWNER = 39 => "RELEASE_LOCKOWNER",
    OP_BACKCHANNEL_CTL = 40 => "BACKCHANNEL_CTL",
    OP_BIND_CONN_TO_SESSION = 41 => "BIND_CONN_TO_SESSION",
    OP_EXCHANGE_ID = 42 => "EXCHANGE_ID",
    OP_CREATE_SESSION = 43 => "CREATE_SESSION",
    OP_DESTROY_SESSION = 44 => "DESTROY_SESSION",
    OP_FREE_STATEID = 45 => "FREE_STATEID",
    OP_GET_DIR_DELEGATION = 46 => "GET_DIR_DELEGATION",
    OP_GETDEVICEINFO = 47 => "GETDEVICEINFO",
    OP_GETDEVICELIST = 48 => "GETDEVICELIST",
    OP_LAYOUTCOMMIT = 49 => "LAYOUTCOMMIT",
    OP_LAYOUTGET = 50 => "LAYOUTGET",
    OP_LAYOUTRETURN = 51 => "LAYOUTRETURN",
    OP_SECINFO_NO_NAME = 52 => "SECINFO_NO_NAME",
    OP_SEQUENCE = 53 => "SEQUENCE",
    OP_SET_SSV = 54 => "SET_SSV",
    OP_TEST_STATEID = 55 => "TEST_STATEID",
    OP_WANT_DELEGATION = 56 => "WANT_DELEGATION",
    OP_DESTROY_CLIENTID = 57 => "DESTROY_CLIENTID",
    OP_RECLAIM_COMPLETE = 58 => "RECLAIM_COMPLETE",
    OP_ILLEGAL = 10044 => "ILLEGAL",
}

/// The error of an operation number the decoder cannot read past: `defined` (the RFC
/// defines it, this codec does not implement it) says which `what` to use.
pub(crate) fn unknown_op(
    op: u32,
    defined: bool,
    what_undefined: &'static str,
    what_unimplemented: &'static str,
) -> XdrError {
    XdrError::BadEnum {
        what: if defined {
            what_unimplemented
        } else {
            what_undefined
        },
        value: op,
    }
}

/// [`unknown_op`] for the COMPOUND's operations.
fn bad_op(op: u32) -> XdrError {
    unknown_op(
        op,
        op_name(op).is_some(),
        "nfs_opnum4",
        "nfs_opnum4 (operation not implemented by this codec)",
    )
}

/// `nfs_argop4`: one operation of a COMPOUND with its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NfsArgop4 {
    /// `OP_CLOSE`.
    Close(Close4Args),
    /// `OP_DELEGRETURN`.
    Delegreturn(Delegreturn4Args),
    /// `OP_GETATTR`.
    Getattr(Getattr4Args),
    /// `OP_GETFH` (no arguments).
    Getfh,
    /// `OP_LOOKUP`.
    Lookup(Lookup4Args),
    /// `OP_OPEN`.
    Open(Open4Args),
    /// `OP_PUTFH`.
    Putfh(Putfh4Args),
    /// `OP_PUTROOTFH` (no arguments).
    Putrootfh,
    /// `OP_READ`.
    Read(Read4Args),
    /// `OP_READDIR`.
    Readdir(Readdir4Args),
    /// `OP_WRITE`.
    Write(Write4Args),
    /// `OP_EXCHANGE_ID`.
    ExchangeId(ExchangeId4Args),
    /// `OP_CREATE_SESSION`.
    CreateSession(CreateSession4Args),
    /// `OP_DESTROY_SESSION`.
    DestroySession(DestroySession4Args),
    /// `OP_SEQUENCE`.
    Sequence(Sequence4Args),
    /// `OP_DESTROY_CLIENTID`.
    DestroyClientid(DestroyClientid4Args),
    /// `OP_RECLAIM_COMPLETE`.
    ReclaimComplete(ReclaimComplete4Args),
    /// `OP_ILLEGAL` (no arguments; what a server answers for an undefined operation).
    Illegal,
}

impl NfsArgop4 {
    /// The operation number.
    pub fn opnum(&self) -> u32 {
        match self {
            NfsArgop4::Close(_) => OP_CLOSE,
            NfsArgop4::Delegreturn(_) => OP_DELEGRETURN,
            NfsArgop4::Getattr(_) => OP_GETATTR,
            NfsArgop4::Getfh => OP_GETFH,
            NfsArgop4::Lookup(_) => OP_LOOKUP,
            NfsArgop4::Open(_) => OP_OPEN,
            NfsArgop4::Putfh(_) => OP_PUTFH,
            NfsArgop4::Putrootfh => OP_PUTROOTFH,
            NfsArgop4::Read(_) => OP_READ,
            NfsArgop4::Readdir(_) => OP_READDIR,
            NfsArgop4::Write(_) => OP_WRITE,
            NfsArgop4::ExchangeId(_) => OP_EXCHANGE_ID,
            NfsArgop4::CreateSession(_) => OP_CREATE_SESSION,
            NfsArgop4::DestroySession(_) => OP_DESTROY_SESSION,
            NfsArgop4::Sequence(_) => OP_SEQUENCE,
            NfsArgop4::DestroyClientid(_) => OP_DESTROY_CLIENTID,
            NfsArgop4::ReclaimComplete(_) => OP_RECLAIM_COMPLETE,
            NfsArgop4::Illegal => OP_ILLEGAL,
        }
    }

    /// Write the arguments without the operation number.
    pub fn encode_body(&self, e: &mut Encoder) {
        match self {
            NfsArgop4::Close(a) => a.encode(e),
            NfsArgop4::Delegreturn(a) => a.encode(e),
            NfsArgop4::Getattr(a) => a.encode(e),
            NfsArgop4::Lookup(a) => a.encode(e),
            NfsArgop4::Open(a) => a.encode(e),
            NfsArgop4::Putfh(a) => a.encode(e),
            NfsArgop4::Read(a) => a.encode(e),
            NfsArgop4::Readdir(a) => a.encode(e),
            NfsArgop4::Write(a) => a.encode(e),
            NfsArgop4::ExchangeId(a) => a.encode(e),
            NfsArgop4::CreateSession(a) => a.encode(e),
            NfsArgop4::DestroySession(a) => a.encode(e),
            NfsArgop4::Sequence(a) => a.encode(e),
            NfsArgop4::DestroyClientid(a) => a.encode(e),
            NfsArgop4::ReclaimComplete(a) => a.encode(e),
            NfsArgop4::Getfh | NfsArgop4::Putrootfh | NfsArgop4::Illegal => {}
        }
    }

    /// Decode the arguments of operation `op` (its number already read), WRITE data bounded
    /// by `max_data` bytes.
    ///
    /// # Errors
    /// [`XdrError::BadEnum`] for an operation this codec does not implement or RFC 8881
    /// does not define; malformed or truncated input.
    pub fn decode_body(op: u32, d: &mut Decoder<'_>, max_data: usize) -> Result<Self, XdrError> {
        Ok(match op {
            OP_CLOSE => NfsArgop4::Close(Close4Args::decode(d)?),
            OP_DELEGRETURN => NfsArgop4::Delegreturn(Delegreturn4Args::decode(d)?),
            OP_GETATTR => NfsArgop4::Getattr(Getattr4Args::decode(d)?),
            OP_GETFH => NfsArgop4::Getfh,
            OP_LOOKUP => NfsArgop4::Lookup(Lookup4Args::decode(d)?),
            OP_OPEN => NfsArgop4::Open(Open4Args::decode(d)?),
            OP_PUTFH => NfsArgop4::Putfh(Putfh4Args::decode(d)?),
            OP_PUTROOTFH => NfsArgop4::Putrootfh,
            OP_READ => NfsArgop4::Read(Read4Args::decode(d)?),
            OP_READDIR => NfsArgop4::Readdir(Readdir4Args::decode(d)?),
            OP_WRITE => NfsArgop4::Write(Write4Args::decode_with_max(d, max_data)?),
            OP_EXCHANGE_ID => NfsArgop4::ExchangeId(ExchangeId4Args::decode(d)?),
            OP_CREATE_SESSION => NfsArgop4::CreateSession(CreateSession4Args::decode(d)?),
            OP_DESTROY_SESSION => NfsArgop4::DestroySession(DestroySession4Args::decode(d)?),
            OP_SEQUENCE => NfsArgop4::Sequence(Sequence4Args::decode(d)?),
            OP_DESTROY_CLIENTID => NfsArgop4::DestroyClientid(DestroyClientid4Args::decode(d)?),
            OP_RECLAIM_COMPLETE => NfsArgop4::ReclaimComplete(ReclaimComplete4Args::decode(d)?),
            OP_ILLEGAL => NfsArgop4::Illegal,
            op => return Err(bad_op(op)),
        })
    }

    /// Decode with WRITE data bounded by `max_data` bytes.
    ///
    /// # Errors
    /// As [`NfsArgop4::decode_body`].
    pub fn decode_with_max(d: &mut Decoder<'_>, max_data: usize) -> Result<Self, XdrError> {
        let op = d.u32()?;
        Self::decode_body(op, d, max_data)
    }
}

/// WRITE data bounded by [`NFS4_MAX_DATA`].
impl Xdr for NfsArgop4 {
    fn encode(&self, e: &mut Encoder) {
        e.u32(self.opnum());
        self.encode_body(e);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Self::decode_with_max(d, NFS4_MAX_DATA)
    }
}

/// `nfs_resop4`: one operation's result in a COMPOUND reply. Operations whose result is a
/// status alone carry an [`Nfsstat4`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NfsResop4 {
    /// `OP_CLOSE`.
    Close(Close4Res),
    /// `OP_DELEGRETURN`.
    Delegreturn(Nfsstat4),
    /// `OP_GETATTR`.
    Getattr(Getattr4Res),
    /// `OP_GETFH`.
    Getfh(Getfh4Res),
    /// `OP_LOOKUP`.
    Lookup(Nfsstat4),
    /// `OP_OPEN`.
    Open(Open4Res),
    /// `OP_PUTFH`.
    Putfh(Nfsstat4),
    /// `OP_PUTROOTFH`.
    Putrootfh(Nfsstat4),
    /// `OP_READ`.
    Read(Read4Res),
    /// `OP_READDIR`.
    Readdir(Readdir4Res),
    /// `OP_WRITE`.
    Write(Write4Res),
    /// `OP_EXCHANGE_ID`.
    ExchangeId(ExchangeId4Res),
    /// `OP_CREATE_SESSION`.
    CreateSession(CreateSession4Res),
    /// `OP_DESTROY_SESSION`.
    DestroySession(Nfsstat4),
    /// `OP_SEQUENCE`.
    Sequence(Sequence4Res),
    /// `OP_DESTROY_CLIENTID`.
    DestroyClientid(Nfsstat4),
    /// `OP_RECLAIM_COMPLETE`.
    ReclaimComplete(Nfsstat4),
    /// `OP_ILLEGAL`: `ILLEGAL4res` (`NFS4ERR_OP_ILLEGAL`).
    Illegal(Nfsstat4),
}

impl NfsResop4 {
    /// The operation number.
    pub fn opnum(&self) -> u32 {
        match self {
            NfsResop4::Close(_) => OP_CLOSE,
            NfsResop4::Delegreturn(_) => OP_DELEGRETURN,
            NfsResop4::Getattr(_) => OP_GETATTR,
            NfsResop4::Getfh(_) => OP_GETFH,
            NfsResop4::Lookup(_) => OP_LOOKUP,
            NfsResop4::Open(_) => OP_OPEN,
            NfsResop4::Putfh(_) => OP_PUTFH,
            NfsResop4::Putrootfh(_) => OP_PUTROOTFH,
            NfsResop4::Read(_) => OP_READ,
            NfsResop4::Readdir(_) => OP_READDIR,
            NfsResop4::Write(_) => OP_WRITE,
            NfsResop4::ExchangeId(_) => OP_EXCHANGE_ID,
            NfsResop4::CreateSession(_) => OP_CREATE_SESSION,
            NfsResop4::DestroySession(_) => OP_DESTROY_SESSION,
            NfsResop4::Sequence(_) => OP_SEQUENCE,
            NfsResop4::DestroyClientid(_) => OP_DESTROY_CLIENTID,
            NfsResop4::ReclaimComplete(_) => OP_RECLAIM_COMPLETE,
            NfsResop4::Illegal(_) => OP_ILLEGAL,
        }
    }

    /// The operation's status.
    pub fn status(&self) -> Nfsstat4 {
        match self {
            NfsResop4::Close(r) => r.status(),
            NfsResop4::Getattr(r) => r.status(),
            NfsResop4::Getfh(r) => r.status(),
            NfsResop4::Open(r) => r.status(),
            NfsResop4::Read(r) => r.status(),
            NfsResop4::Readdir(r) => r.status(),
            NfsResop4::Write(r) => r.status(),
            NfsResop4::ExchangeId(r) => r.status(),
            NfsResop4::CreateSession(r) => r.status(),
            NfsResop4::Sequence(r) => r.status(),
            NfsResop4::Delegreturn(s)
            | NfsResop4::Lookup(s)
            | NfsResop4::Putfh(s)
            | NfsResop4::Putrootfh(s)
            | NfsResop4::DestroySession(s)
            | NfsResop4::DestroyClientid(s)
            | NfsResop4::ReclaimComplete(s)
            | NfsResop4::Illegal(s) => *s,
        }
    }

    /// Write the result without the operation number.
    pub fn encode_body(&self, e: &mut Encoder) {
        match self {
            NfsResop4::Close(r) => r.encode(e),
            NfsResop4::Getattr(r) => r.encode(e),
            NfsResop4::Getfh(r) => r.encode(e),
            NfsResop4::Open(r) => r.encode(e),
            NfsResop4::Read(r) => r.encode(e),
            NfsResop4::Readdir(r) => r.encode(e),
            NfsResop4::Write(r) => r.encode(e),
            NfsResop4::ExchangeId(r) => r.encode(e),
            NfsResop4::CreateSession(r) => r.encode(e),
            NfsResop4::Sequence(r) => r.encode(e),
            NfsResop4::Delegreturn(s)
            | NfsResop4::Lookup(s)
            | NfsResop4::Putfh(s)
            | NfsResop4::Putrootfh(s)
            | NfsResop4::DestroySession(s)
            | NfsResop4::DestroyClientid(s)
            | NfsResop4::ReclaimComplete(s)
            | NfsResop4::Illegal(s) => s.encode(e),
        }
    }

    /// Decode the result of operation `op` (its number already read), READ data bounded by
    /// `max_data` bytes.
    ///
    /// # Errors
    /// [`XdrError::BadEnum`] for an operation this codec does not implement or RFC 8881
    /// does not define; malformed or truncated input.
    pub fn decode_body(op: u32, d: &mut Decoder<'_>, max_data: usize) -> Result<Self, XdrError> {
        Ok(match op {
            OP_CLOSE => NfsResop4::Close(Close4Res::decode(d)?),
            OP_DELEGRETURN => NfsResop4::Delegreturn(Nfsstat4::decode(d)?),
            OP_GETATTR => NfsResop4::Getattr(Getattr4Res::decode(d)?),
            OP_GETFH => NfsResop4::Getfh(Getfh4Res::decode(d)?),
            OP_LOOKUP => NfsResop4::Lookup(Nfsstat4::decode(d)?),
            OP_OPEN => NfsResop4::Open(Open4Res::decode(d)?),
            OP_PUTFH => NfsResop4::Putfh(Nfsstat4::decode(d)?),
            OP_PUTROOTFH => NfsResop4::Putrootfh(Nfsstat4::decode(d)?),
            OP_READ => NfsResop4::Read(Read4Res::decode_with_max(d, max_data)?),
            OP_READDIR => NfsResop4::Readdir(Readdir4Res::decode(d)?),
            OP_WRITE => NfsResop4::Write(Write4Res::decode(d)?),
            OP_EXCHANGE_ID => NfsResop4::ExchangeId(ExchangeId4Res::decode(d)?),
            OP_CREATE_SESSION => NfsResop4::CreateSession(CreateSession4Res::decode(d)?),
            OP_DESTROY_SESSION => NfsResop4::DestroySession(Nfsstat4::decode(d)?),
            OP_SEQUENCE => NfsResop4::Sequence(Sequence4Res::decode(d)?),
            OP_DESTROY_CLIENTID => NfsResop4::DestroyClientid(Nfsstat4::decode(d)?),
            OP_RECLAIM_COMPLETE => NfsResop4::ReclaimComplete(Nfsstat4::decode(d)?),
            OP_ILLEGAL => NfsResop4::Illegal(Nfsstat4::decode(d)?),
            op => return Err(bad_op(op)),
        })
    }

    /// Decode with READ data bounded by `max_data` bytes.
    ///
    /// # Errors
    /// As [`NfsResop4::decode_body`].
    pub fn decode_with_max(d: &mut Decoder<'_>, max_data: usize) -> Result<Self, XdrError> {
        let op = d.u32()?;
        Self::decode_body(op, d, max_data)
    }
}

/// READ data bounded by [`NFS4_MAX_DATA`].
impl Xdr for NfsResop4 {
    fn encode(&self, e: &mut Encoder) {
        e.u32(self.opnum());
        self.encode_body(e);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Self::decode_with_max(d, NFS4_MAX_DATA)
    }
}

inherent_xdr4!(NfsArgop4, NfsResop4);

/// `COMPOUND4args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compound4Args {
    /// `tag`: the client's label, echoed in the reply.
    pub tag: Utf8Str,
    /// `minorversion`: [`NFS4_MINOR_VERSION`](super::NFS4_MINOR_VERSION) here.
    pub minorversion: u32,
    /// `argarray` (at most [`NFS4_MAX_OPS`]).
    pub argarray: Vec<NfsArgop4>,
}

impl Compound4Args {
    /// Decode with every WRITE's data bounded by `max_data` bytes.
    ///
    /// # Errors
    /// Malformed or truncated input, more than [`NFS4_MAX_OPS`] operations, an operation
    /// this codec does not implement ([`XdrError::BadEnum`]), data above `max_data`.
    pub fn decode_with_max(d: &mut Decoder<'_>, max_data: usize) -> Result<Self, XdrError> {
        Ok(Compound4Args {
            tag: Utf8Str::decode(d)?,
            minorversion: d.u32()?,
            argarray: get_array_with(d, "COMPOUND4args argarray", NFS4_MAX_OPS, |d| {
                NfsArgop4::decode_with_max(d, max_data)
            })?,
        })
    }
}

/// WRITE data bounded by [`NFS4_MAX_DATA`].
impl Xdr for Compound4Args {
    fn encode(&self, e: &mut Encoder) {
        self.tag.encode(e);
        e.u32(self.minorversion);
        put_array(e, &self.argarray, NFS4_MAX_OPS);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Self::decode_with_max(d, NFS4_MAX_DATA)
    }
}

/// `COMPOUND4res`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compound4Res {
    /// `status`: the last evaluated operation's.
    pub status: Nfsstat4,
    /// `tag`: the call's.
    pub tag: Utf8Str,
    /// `resarray` (at most [`NFS4_MAX_OPS`]): one result per operation evaluated.
    pub resarray: Vec<NfsResop4>,
}

impl Compound4Res {
    /// Decode with every READ's data bounded by `max_data` bytes.
    ///
    /// # Errors
    /// Malformed or truncated input, more than [`NFS4_MAX_OPS`] results, an operation this
    /// codec does not implement ([`XdrError::BadEnum`]), data above `max_data`.
    pub fn decode_with_max(d: &mut Decoder<'_>, max_data: usize) -> Result<Self, XdrError> {
        Ok(Compound4Res {
            status: Nfsstat4::decode(d)?,
            tag: Utf8Str::decode(d)?,
            resarray: get_array_with(d, "COMPOUND4res resarray", NFS4_MAX_OPS, |d| {
                NfsResop4::decode_with_max(d, max_data)
            })?,
        })
    }
}

/// READ data bounded by [`NFS4_MAX_DATA`].
impl Xdr for Compound4Res {
    fn encode(&self, e: &mut Encoder) {
        self.status.encode(e);
        self.tag.encode(e);
        put_array(e, &self.resarray, NFS4_MAX_OPS);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Self::decode_with_max(d, NFS4_MAX_DATA)
    }
}

inherent_xdr4!(Compound4Args, Compound4Res);

/// An encoder holding the RPC header of an NFSv4 call of `proc_` ([`NFSPROC4_COMPOUND`] or
/// [`NFSPROC4_NULL`](super::NFSPROC4_NULL)) with credential `cred` (an `AUTH_NONE`
/// verifier), ready for the arguments.
pub fn call_encoder(xid: u32, proc_: u32, cred: Auth) -> Encoder {
    CallHeader::new(xid, NFS4_PROGRAM, NFS_V4, proc_, cred).encoder()
}

/// An encoder holding the RPC header of a COMPOUND call (see [`call_encoder`]).
pub fn compound_encoder(xid: u32, cred: Auth) -> Encoder {
    call_encoder(xid, NFSPROC4_COMPOUND, cred)
}
