//! Client ids and sessions (RFC 8881 sections 18.35, 18.36, 18.37, 18.46, 18.50, 18.51):
//! EXCHANGE_ID, CREATE_SESSION, DESTROY_SESSION, SEQUENCE, DESTROY_CLIENTID,
//! RECLAIM_COMPLETE.

use alloc::vec::Vec;

use onc_rpc::xdr::{Decoder, Encoder, XdrError};

use super::{
    get_array, put_array, CallbackSecParms4, ChannelAttrs4, ClientOwner4, NfsImplId4, Opaque4,
    Res4, ServerOwner4, Sessionid4, StateProtect4, Xdr, NFS4_MAX_SEC_PARMS,
};

/// `EXCHGID4_FLAG_SUPP_MOVED_REFER`.
pub const EXCHGID4_FLAG_SUPP_MOVED_REFER: u32 = 0x0000_0001;
/// `EXCHGID4_FLAG_SUPP_MOVED_MIGR`.
pub const EXCHGID4_FLAG_SUPP_MOVED_MIGR: u32 = 0x0000_0002;
/// `EXCHGID4_FLAG_BIND_PRINC_STATEID`.
pub const EXCHGID4_FLAG_BIND_PRINC_STATEID: u32 = 0x0000_0100;
/// `EXCHGID4_FLAG_USE_NON_PNFS`.
pub const EXCHGID4_FLAG_USE_NON_PNFS: u32 = 0x0001_0000;
/// `EXCHGID4_FLAG_USE_PNFS_MDS`.
pub const EXCHGID4_FLAG_USE_PNFS_MDS: u32 = 0x0002_0000;
/// `EXCHGID4_FLAG_USE_PNFS_DS`.
pub const EXCHGID4_FLAG_USE_PNFS_DS: u32 = 0x0004_0000;
/// `EXCHGID4_FLAG_MASK_PNFS`.
pub const EXCHGID4_FLAG_MASK_PNFS: u32 = 0x0007_0000;
/// `EXCHGID4_FLAG_UPD_CONFIRMED_REC_A`.
pub const EXCHGID4_FLAG_UPD_CONFIRMED_REC_A: u32 = 0x4000_0000;
/// `EXCHGID4_FLAG_CONFIRMED_R`.
pub const EXCHGID4_FLAG_CONFIRMED_R: u32 = 0x8000_0000;

/// `CREATE_SESSION4_FLAG_PERSIST`.
pub const CREATE_SESSION4_FLAG_PERSIST: u32 = 0x0000_0001;
/// `CREATE_SESSION4_FLAG_CONN_BACK_CHAN`: the connection carrying CREATE_SESSION is also the
/// session's back channel.
pub const CREATE_SESSION4_FLAG_CONN_BACK_CHAN: u32 = 0x0000_0002;
/// `CREATE_SESSION4_FLAG_CONN_RDMA`.
pub const CREATE_SESSION4_FLAG_CONN_RDMA: u32 = 0x0000_0004;

/// `SEQ4_STATUS_CB_PATH_DOWN`.
pub const SEQ4_STATUS_CB_PATH_DOWN: u32 = 0x0000_0001;
/// `SEQ4_STATUS_CB_GSS_CONTEXTS_EXPIRING`.
pub const SEQ4_STATUS_CB_GSS_CONTEXTS_EXPIRING: u32 = 0x0000_0002;
/// `SEQ4_STATUS_CB_GSS_CONTEXTS_EXPIRED`.
pub const SEQ4_STATUS_CB_GSS_CONTEXTS_EXPIRED: u32 = 0x0000_0004;
/// `SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED`.
pub const SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED: u32 = 0x0000_0008;
/// `SEQ4_STATUS_EXPIRED_SOME_STATE_REVOKED`.
pub const SEQ4_STATUS_EXPIRED_SOME_STATE_REVOKED: u32 = 0x0000_0010;
/// `SEQ4_STATUS_ADMIN_STATE_REVOKED`.
pub const SEQ4_STATUS_ADMIN_STATE_REVOKED: u32 = 0x0000_0020;
/// `SEQ4_STATUS_RECALLABLE_STATE_REVOKED`.
pub const SEQ4_STATUS_RECALLABLE_STATE_REVOKED: u32 = 0x0000_0040;
/// `SEQ4_STATUS_LEASE_MOVED`.
pub const SEQ4_STATUS_LEASE_MOVED: u32 = 0x0000_0080;
/// `SEQ4_STATUS_RESTART_RECLAIM_NEEDED`.
pub const SEQ4_STATUS_RESTART_RECLAIM_NEEDED: u32 = 0x0000_0100;
/// `SEQ4_STATUS_CB_PATH_DOWN_SESSION`.
pub const SEQ4_STATUS_CB_PATH_DOWN_SESSION: u32 = 0x0000_0200;
/// `SEQ4_STATUS_BACKCHANNEL_FAULT`.
pub const SEQ4_STATUS_BACKCHANNEL_FAULT: u32 = 0x0000_0400;
/// `SEQ4_STATUS_DEVID_CHANGED`.
pub const SEQ4_STATUS_DEVID_CHANGED: u32 = 0x0000_0800;
/// `SEQ4_STATUS_DEVID_DELETED`.
pub const SEQ4_STATUS_DEVID_DELETED: u32 = 0x0000_1000;

// ---- EXCHANGE_ID ----

xdr4_struct! {
    /// `EXCHANGE_ID4args`.
    pub struct ExchangeId4Args {
        /// `eia_clientowner`.
        pub eia_clientowner: ClientOwner4,
        /// `eia_flags`: `EXCHGID4_FLAG_*`.
        pub eia_flags: u32,
        /// `eia_state_protect`.
        pub eia_state_protect: StateProtect4,
        /// `eia_client_impl_id<1>`.
        pub eia_client_impl_id: Option<NfsImplId4>,
    }
}

xdr4_struct! {
    /// `EXCHANGE_ID4resok`.
    pub struct ExchangeId4ResOk {
        /// `eir_clientid`.
        pub eir_clientid: u64,
        /// `eir_sequenceid`: the `csa_sequence` of the first CREATE_SESSION.
        pub eir_sequenceid: u32,
        /// `eir_flags`: `EXCHGID4_FLAG_*`.
        pub eir_flags: u32,
        /// `eir_state_protect`.
        pub eir_state_protect: StateProtect4,
        /// `eir_server_owner`.
        pub eir_server_owner: ServerOwner4,
        /// `eir_server_scope`.
        pub eir_server_scope: Opaque4,
        /// `eir_server_impl_id<1>`.
        pub eir_server_impl_id: Option<NfsImplId4>,
    }
}

/// `EXCHANGE_ID4res`.
pub type ExchangeId4Res = Res4<ExchangeId4ResOk>;

// ---- CREATE_SESSION ----

/// `CREATE_SESSION4args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSession4Args {
    /// `csa_clientid`.
    pub csa_clientid: u64,
    /// `csa_sequence`.
    pub csa_sequence: u32,
    /// `csa_flags`: `CREATE_SESSION4_FLAG_*`.
    pub csa_flags: u32,
    /// `csa_fore_chan_attrs`.
    pub csa_fore_chan_attrs: ChannelAttrs4,
    /// `csa_back_chan_attrs`.
    pub csa_back_chan_attrs: ChannelAttrs4,
    /// `csa_cb_program`: the callback program number.
    pub csa_cb_program: u32,
    /// `csa_sec_parms<>` (at most [`NFS4_MAX_SEC_PARMS`]).
    pub csa_sec_parms: Vec<CallbackSecParms4>,
}

impl Xdr for CreateSession4Args {
    fn encode(&self, e: &mut Encoder) {
        e.u64(self.csa_clientid);
        e.u32(self.csa_sequence);
        e.u32(self.csa_flags);
        self.csa_fore_chan_attrs.encode(e);
        self.csa_back_chan_attrs.encode(e);
        e.u32(self.csa_cb_program);
        put_array(e, &self.csa_sec_parms, NFS4_MAX_SEC_PARMS);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(CreateSession4Args {
            csa_clientid: d.u64()?,
            csa_sequence: d.u32()?,
            csa_flags: d.u32()?,
            csa_fore_chan_attrs: ChannelAttrs4::decode(d)?,
            csa_back_chan_attrs: ChannelAttrs4::decode(d)?,
            csa_cb_program: d.u32()?,
            csa_sec_parms: get_array(d, "csa_sec_parms", NFS4_MAX_SEC_PARMS)?,
        })
    }
}

inherent_xdr4!(CreateSession4Args);

xdr4_struct! {
    /// `CREATE_SESSION4resok`.
    pub struct CreateSession4ResOk {
        /// `csr_sessionid`.
        pub csr_sessionid: Sessionid4,
        /// `csr_sequence`.
        pub csr_sequence: u32,
        /// `csr_flags`.
        pub csr_flags: u32,
        /// `csr_fore_chan_attrs`.
        pub csr_fore_chan_attrs: ChannelAttrs4,
        /// `csr_back_chan_attrs`.
        pub csr_back_chan_attrs: ChannelAttrs4,
    }
}

/// `CREATE_SESSION4res`.
pub type CreateSession4Res = Res4<CreateSession4ResOk>;

// ---- SEQUENCE ----

xdr4_struct! {
    /// `SEQUENCE4args`.
    #[derive(Copy, Hash)]
    pub struct Sequence4Args {
        /// `sa_sessionid`.
        pub sa_sessionid: Sessionid4,
        /// `sa_sequenceid`.
        pub sa_sequenceid: u32,
        /// `sa_slotid`.
        pub sa_slotid: u32,
        /// `sa_highest_slotid`.
        pub sa_highest_slotid: u32,
        /// `sa_cachethis`.
        pub sa_cachethis: bool,
    }
}

xdr4_struct! {
    /// `SEQUENCE4resok`.
    #[derive(Copy, Hash)]
    pub struct Sequence4ResOk {
        /// `sr_sessionid`.
        pub sr_sessionid: Sessionid4,
        /// `sr_sequenceid`.
        pub sr_sequenceid: u32,
        /// `sr_slotid`.
        pub sr_slotid: u32,
        /// `sr_highest_slotid`.
        pub sr_highest_slotid: u32,
        /// `sr_target_highest_slotid`.
        pub sr_target_highest_slotid: u32,
        /// `sr_status_flags`: `SEQ4_STATUS_*`.
        pub sr_status_flags: u32,
    }
}

/// `SEQUENCE4res`.
pub type Sequence4Res = Res4<Sequence4ResOk>;

// ---- DESTROY_SESSION, DESTROY_CLIENTID, RECLAIM_COMPLETE (results: a status) ----

xdr4_struct! {
    /// `DESTROY_SESSION4args` (result: `DESTROY_SESSION4res`, a status).
    #[derive(Copy, Hash)]
    pub struct DestroySession4Args {
        /// `dsa_sessionid`.
        pub dsa_sessionid: Sessionid4,
    }
}

xdr4_struct! {
    /// `DESTROY_CLIENTID4args` (result: `DESTROY_CLIENTID4res`, a status).
    #[derive(Copy, Hash)]
    pub struct DestroyClientid4Args {
        /// `dca_clientid`.
        pub dca_clientid: u64,
    }
}

xdr4_struct! {
    /// `RECLAIM_COMPLETE4args` (result: `RECLAIM_COMPLETE4res`, a status).
    #[derive(Copy, Hash)]
    pub struct ReclaimComplete4Args {
        /// `rca_one_fs`: only the current file system's reclaims are complete.
        pub rca_one_fs: bool,
    }
}
