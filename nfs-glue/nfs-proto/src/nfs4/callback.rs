//! The callback program (RFC 8881 sections 16.2.2 ff., 20): CB_NULL (procedure [`CB_NULL`],
//! void arguments and results) and CB_COMPOUND with CB_SEQUENCE, CB_RECALL and
//! CB_ILLEGAL, which a client's callback service decodes and answers.
//!
//! [`CB_NULL`]: super::CB_NULL

use alloc::vec::Vec;

use onc_rpc::xdr::{Decoder, Encoder, XdrError};

use super::{
    get_array, put_array, unknown_op, NfsFh4, Nfsstat4, Res4, Sessionid4, Stateid4, Utf8Str, Xdr,
    NFS4_MAX_OPS, NFS4_MAX_REFERRING_CALLS, NFS4_MAX_REFERRING_LISTS,
};

/// Define the `OP_CB_*` constants and [`cb_op_name`].
macro_rules! cb_ops {
    ($( $c:ident = $n:literal => $s:literal, )*) => {
        $( #[doc = concat!("`", stringify!($c), "`: callback operation ", stringify!($n), ".")]
           pub const $c: u32 = $n; )*

        /// The name of NFSv4.1 callback operation `op` ("CB_SEQUENCE", …), or `None` for a
        /// number RFC 8881 does not define.
        pub fn cb_op_name(op: u32) -> Option<&'static str> {
            Some(match op {
                $( $n => $s, )*
                _ => return None,
            })
        }
    };
}

cb_ops! {
    OP_CB_GETATTR = 3 => "CB_GETATTR",
    OP_CB_RECALL = 4 => "CB_RECALL",
    OP_CB_LAYOUTRECALL = 5 => "CB_LAYOUTRECALL",
    OP_CB_NOTIFY = 6 => "CB_NOTIFY",
    OP_CB_PUSH_DELEG = 7 => "CB_PUSH_DELEG",
    OP_CB_RECALL_ANY = 8 => "CB_RECALL_ANY",
    OP_CB_RECALLABLE_OBJ_AVAIL = 9 => "CB_RECALLABLE_OBJ_AVAIL",
    OP_CB_RECALL_SLOT = 10 => "CB_RECALL_SLOT",
    OP_CB_SEQUENCE = 11 => "CB_SEQUENCE",
    OP_CB_WANTS_CANCELLED = 12 => "CB_WANTS_CANCELLED",
    OP_CB_NOTIFY_LOCK = 13 => "CB_NOTIFY_LOCK",
    OP_CB_NOTIFY_DEVICEID = 14 => "CB_NOTIFY_DEVICEID",
    OP_CB_ILLEGAL = 10044 => "CB_ILLEGAL",
}

/// [`unknown_op`] for the CB_COMPOUND's operations.
fn bad_cb_op(op: u32) -> XdrError {
    unknown_op(
        op,
        cb_op_name(op).is_some(),
        "nfs_cb_opnum4",
        "nfs_cb_opnum4 (operation not implemented by this codec)",
    )
}

xdr4_struct! {
    /// `referring_call4`: a fore-channel call that caused this callback.
    #[derive(Copy, Hash)]
    pub struct ReferringCall4 {
        /// `rc_sequenceid`.
        pub rc_sequenceid: u32,
        /// `rc_slotid`.
        pub rc_slotid: u32,
    }
}

/// `referring_call_list4`: the referring calls of one session.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReferringCallList4 {
    /// `rcl_sessionid`.
    pub rcl_sessionid: Sessionid4,
    /// `rcl_referring_calls<>` (at most [`NFS4_MAX_REFERRING_CALLS`]).
    pub rcl_referring_calls: Vec<ReferringCall4>,
}

impl Xdr for ReferringCallList4 {
    fn encode(&self, e: &mut Encoder) {
        self.rcl_sessionid.encode(e);
        put_array(e, &self.rcl_referring_calls, NFS4_MAX_REFERRING_CALLS);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(ReferringCallList4 {
            rcl_sessionid: Sessionid4::decode(d)?,
            rcl_referring_calls: get_array(d, "rcl_referring_calls", NFS4_MAX_REFERRING_CALLS)?,
        })
    }
}

/// `CB_SEQUENCE4args`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CbSequence4Args {
    /// `csa_sessionid`.
    pub csa_sessionid: Sessionid4,
    /// `csa_sequenceid`.
    pub csa_sequenceid: u32,
    /// `csa_slotid`.
    pub csa_slotid: u32,
    /// `csa_highest_slotid`.
    pub csa_highest_slotid: u32,
    /// `csa_cachethis`.
    pub csa_cachethis: bool,
    /// `csa_referring_call_lists<>` (at most [`NFS4_MAX_REFERRING_LISTS`]).
    pub csa_referring_call_lists: Vec<ReferringCallList4>,
}

impl Xdr for CbSequence4Args {
    fn encode(&self, e: &mut Encoder) {
        self.csa_sessionid.encode(e);
        e.u32(self.csa_sequenceid);
        e.u32(self.csa_slotid);
        e.u32(self.csa_highest_slotid);
        e.bool(self.csa_cachethis);
        put_array(e, &self.csa_referring_call_lists, NFS4_MAX_REFERRING_LISTS);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(CbSequence4Args {
            csa_sessionid: Sessionid4::decode(d)?,
            csa_sequenceid: d.u32()?,
            csa_slotid: d.u32()?,
            csa_highest_slotid: d.u32()?,
            csa_cachethis: d.bool()?,
            csa_referring_call_lists: get_array(
                d,
                "csa_referring_call_lists",
                NFS4_MAX_REFERRING_LISTS,
            )?,
        })
    }
}

inherent_xdr4!(ReferringCallList4, CbSequence4Args);

xdr4_struct! {
    /// `CB_SEQUENCE4resok`.
    #[derive(Copy, Hash)]
    pub struct CbSequence4ResOk {
        /// `csr_sessionid`.
        pub csr_sessionid: Sessionid4,
        /// `csr_sequenceid`.
        pub csr_sequenceid: u32,
        /// `csr_slotid`.
        pub csr_slotid: u32,
        /// `csr_highest_slotid`.
        pub csr_highest_slotid: u32,
        /// `csr_target_highest_slotid`.
        pub csr_target_highest_slotid: u32,
    }
}

/// `CB_SEQUENCE4res`.
pub type CbSequence4Res = Res4<CbSequence4ResOk>;

xdr4_struct! {
    /// `CB_RECALL4args` (result: `CB_RECALL4res`, a status).
    #[derive(Hash)]
    pub struct CbRecall4Args {
        /// `stateid`: the delegation recalled.
        pub stateid: Stateid4,
        /// `truncate`: the file is about to be truncated to zero.
        pub truncate: bool,
        /// `fh`: the file.
        pub fh: NfsFh4,
    }
}

/// `nfs_cb_argop4`: one operation of a CB_COMPOUND with its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NfsCbArgop4 {
    /// `OP_CB_SEQUENCE`.
    Sequence(CbSequence4Args),
    /// `OP_CB_RECALL`.
    Recall(CbRecall4Args),
    /// `OP_CB_ILLEGAL` (no arguments).
    Illegal,
}

impl NfsCbArgop4 {
    /// The operation number.
    pub fn opnum(&self) -> u32 {
        match self {
            NfsCbArgop4::Sequence(_) => OP_CB_SEQUENCE,
            NfsCbArgop4::Recall(_) => OP_CB_RECALL,
            NfsCbArgop4::Illegal => OP_CB_ILLEGAL,
        }
    }
}

impl Xdr for NfsCbArgop4 {
    fn encode(&self, e: &mut Encoder) {
        e.u32(self.opnum());
        match self {
            NfsCbArgop4::Sequence(a) => a.encode(e),
            NfsCbArgop4::Recall(a) => a.encode(e),
            NfsCbArgop4::Illegal => {}
        }
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(match d.u32()? {
            OP_CB_SEQUENCE => NfsCbArgop4::Sequence(CbSequence4Args::decode(d)?),
            OP_CB_RECALL => NfsCbArgop4::Recall(CbRecall4Args::decode(d)?),
            OP_CB_ILLEGAL => NfsCbArgop4::Illegal,
            op => return Err(bad_cb_op(op)),
        })
    }
}

/// `nfs_cb_resop4`: one callback operation's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NfsCbResop4 {
    /// `OP_CB_SEQUENCE`.
    Sequence(CbSequence4Res),
    /// `OP_CB_RECALL`: `CB_RECALL4res`.
    Recall(Nfsstat4),
    /// `OP_CB_ILLEGAL`: `CB_ILLEGAL4res`.
    Illegal(Nfsstat4),
}

impl NfsCbResop4 {
    /// The operation number.
    pub fn opnum(&self) -> u32 {
        match self {
            NfsCbResop4::Sequence(_) => OP_CB_SEQUENCE,
            NfsCbResop4::Recall(_) => OP_CB_RECALL,
            NfsCbResop4::Illegal(_) => OP_CB_ILLEGAL,
        }
    }

    /// The operation's status.
    pub fn status(&self) -> Nfsstat4 {
        match self {
            NfsCbResop4::Sequence(r) => r.status(),
            NfsCbResop4::Recall(s) | NfsCbResop4::Illegal(s) => *s,
        }
    }
}

impl Xdr for NfsCbResop4 {
    fn encode(&self, e: &mut Encoder) {
        e.u32(self.opnum());
        match self {
            NfsCbResop4::Sequence(r) => r.encode(e),
            NfsCbResop4::Recall(s) | NfsCbResop4::Illegal(s) => s.encode(e),
        }
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(match d.u32()? {
            OP_CB_SEQUENCE => NfsCbResop4::Sequence(CbSequence4Res::decode(d)?),
            OP_CB_RECALL => NfsCbResop4::Recall(Nfsstat4::decode(d)?),
            OP_CB_ILLEGAL => NfsCbResop4::Illegal(Nfsstat4::decode(d)?),
            op => return Err(bad_cb_op(op)),
        })
    }
}

inherent_xdr4!(NfsCbArgop4, NfsCbResop4);

/// `CB_COMPOUND4args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbCompound4Args {
    /// `tag`.
    pub tag: Utf8Str,
    /// `minorversion`: 1 for an NFSv4.1 session's back channel.
    pub minorversion: u32,
    /// `callback_ident` (NFSv4.0's; ignored in NFSv4.1).
    pub callback_ident: u32,
    /// `argarray` (at most [`NFS4_MAX_OPS`]).
    pub argarray: Vec<NfsCbArgop4>,
}

impl Xdr for CbCompound4Args {
    fn encode(&self, e: &mut Encoder) {
        self.tag.encode(e);
        e.u32(self.minorversion);
        e.u32(self.callback_ident);
        put_array(e, &self.argarray, NFS4_MAX_OPS);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(CbCompound4Args {
            tag: Utf8Str::decode(d)?,
            minorversion: d.u32()?,
            callback_ident: d.u32()?,
            argarray: get_array(d, "CB_COMPOUND4args argarray", NFS4_MAX_OPS)?,
        })
    }
}

/// `CB_COMPOUND4res`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbCompound4Res {
    /// `status`: the last evaluated operation's.
    pub status: Nfsstat4,
    /// `tag`: the call's.
    pub tag: Utf8Str,
    /// `resarray` (at most [`NFS4_MAX_OPS`]).
    pub resarray: Vec<NfsCbResop4>,
}

impl Xdr for CbCompound4Res {
    fn encode(&self, e: &mut Encoder) {
        self.status.encode(e);
        self.tag.encode(e);
        put_array(e, &self.resarray, NFS4_MAX_OPS);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(CbCompound4Res {
            status: Nfsstat4::decode(d)?,
            tag: Utf8Str::decode(d)?,
            resarray: get_array(d, "CB_COMPOUND4res resarray", NFS4_MAX_OPS)?,
        })
    }
}

inherent_xdr4!(CbCompound4Args, CbCompound4Res);
