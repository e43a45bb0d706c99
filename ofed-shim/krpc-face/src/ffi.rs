//! The krpc face's C boundary: the mbuf bridge (`c/krpc_rdma_mbuf.h`), the RPC client
//! transport (`c/krpc_rdma_clnt.h`) and the RPC server transport (`c/krpc_rdma_svc.h`), each
//! with its own ABI version. Only our own `repr(C)` structs, scalars and opaque handles cross;
//! every layout is asserted here and by the C headers' `_Static_assert`s. The verbs boundary
//! is `ofed_shim::ffi` (`c/krpc_rdma_ofed.h`); this crate uses only its `M_NOWAIT`.

use core::mem::{offset_of, size_of};

use static_assertions::const_assert_eq;

/// `KRPC_M_NOWAIT` (malloc(9)'s and the mbuf allocator's `M_NOWAIT`), from the verbs boundary.
pub use ofed_shim::ffi::M_NOWAIT;

// ---- the mbuf bridge (`c/krpc_rdma_mbuf.h`, `c/krpc_rdma_mbuf.c`) ---------------------------

/// ABI version of `krpc_rdma_mbuf.h` (`KRPC_MBUF_ABI_VERSION`).
pub const MBUF_ABI_VERSION: u32 = 2;
/// `KRPC_MB_PKTHDR`: `krpc_mbuf_build` makes the first mbuf an `M_PKTHDR` mbuf.
pub const MB_PKTHDR: i32 = 0x1;
/// `KRPC_MB_FLAT`: `krpc_mbuf_build` copies page bytes into ordinary mbufs and clusters and
/// leaves markers out (no M_EXTPG mbuf: the stock-NFS mode).
pub const MB_FLAT: i32 = 0x2;
/// `KRPC_MD_BYTES`: bytes of an ordinary mbuf or cluster (or of an M_EXTPG header/trailer).
pub const MD_BYTES: u32 = 1;
/// `KRPC_MD_PAGES`: an M_EXTPG page run.
pub const MD_PAGES: u32 = 2;
/// `KRPC_MD_MARKER`: the zero-length M_PROTO1 DDP marker.
pub const MD_MARKER: u32 = 3;
/// `KRPC_MF_PKTHDR` (`M_PKTHDR`).
pub const MF_PKTHDR: u32 = 0x2;
/// `KRPC_MF_EOR` (`M_EOR`).
pub const MF_EOR: u32 = 0x4;
/// `KRPC_MF_PROTO1` (`M_PROTO1`).
pub const MF_PROTO1: u32 = 0x2000;
/// `KRPC_MD_HDR_MAX`: header bytes a PAGES descriptor may carry.
pub const MD_HDR_MAX: u32 = 24;
/// `KRPC_MD_TRL_MAX`: trailer bytes a PAGES descriptor may carry.
pub const MD_TRL_MAX: u32 = 64;

/// `struct krpc_mdesc`: one mbuf of a chain, flat (see `c/krpc_rdma_mbuf.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KrpcMdesc {
    /// BYTES: address of the bytes; PAGES: of the header bytes.
    pub kva: u64,
    /// PAGES: address of the trailer bytes.
    pub trl_kva: u64,
    /// BYTES: bytes; PAGES: page bytes (no header/trailer).
    pub len: u32,
    /// `MD_*`.
    pub kind: u32,
    /// PAGES: index of the first page in the page array.
    pub pa_first: u32,
    /// `MF_*` of the mbuf.
    pub mflags: u32,
    /// PAGES: pages.
    pub npgs: u16,
    /// PAGES: offset of the first byte in the first page (`m_epg_1st_off`).
    pub first_off: u16,
    /// PAGES: bytes of the last page (`m_epg_last_len`).
    pub last_len: u16,
    /// PAGES: header bytes at `kva`.
    pub hdrlen: u8,
    /// PAGES: trailer bytes at `trl_kva`.
    pub trllen: u8,
}

/// `struct krpc_mbuf_counts`: the bridge's counters since load.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KrpcMbufCounts {
    /// Chains walked.
    pub walks: u64,
    /// Chains built.
    pub builds: u64,
    /// M_EXTPG mbufs built.
    pub extpg_built: u64,
    /// ... not yet freed.
    pub extpg_live: u64,
    /// Page wirings taken by built M_EXTPG mbufs.
    pub page_refs: u64,
    /// ... given back by their free routine.
    pub page_unrefs: u64,
}

const_assert_eq!(size_of::<KrpcMdesc>(), 40);
const_assert_eq!(offset_of!(KrpcMdesc, len), 16);
const_assert_eq!(offset_of!(KrpcMdesc, npgs), 32);
const_assert_eq!(offset_of!(KrpcMdesc, hdrlen), 38);
const_assert_eq!(size_of::<KrpcMbufCounts>(), 48);

/// Opaque `struct mbuf` (FreeBSD's, or the emulation's): only the C side reads it.
#[repr(C)]
pub struct FbsdMbuf {
    _private: [u8; 0],
}

extern "C" {
    /// Walk a chain into descriptors and page addresses; `E2BIG` if they do not fit.
    pub fn krpc_mbuf_walk(
        m: *const FbsdMbuf,
        d: *mut KrpcMdesc,
        nd: u32,
        pa: *mut u64,
        npa: u32,
        nd_out: *mut u32,
        npa_out: *mut u32,
    ) -> i32;
    /// Build a chain from descriptors (bytes copied, one page wiring per page per M_EXTPG;
    /// `flags`: `MB_*`).
    pub fn krpc_mbuf_build(
        d: *const KrpcMdesc,
        nd: u32,
        pa: *const u64,
        npa: u32,
        how: i32,
        flags: i32,
        out: *mut *mut FbsdMbuf,
    ) -> i32;
    /// `m_freem`.
    pub fn krpc_mbuf_freem(m: *mut FbsdMbuf);
    /// The bridge's counters.
    pub fn krpc_mbuf_get_counts(out: *mut KrpcMbufCounts);
}

// ---- the RPC client transport (`c/krpc_rdma_clnt.h`, `c/krpc_rdma_clnt.c`) -----------------

/// ABI version of `krpc_rdma_clnt.h` (`KRPC_CLNT_ABI_VERSION`).
pub const CLNT_ABI_VERSION: u32 = 3;
/// `KRPC_CLNT_DONE`: `krpc_clnt_poll` found the call ended.
pub const CLNT_DONE: i32 = 0;
/// `KRPC_CLNT_PENDING`: still waiting for its reply.
pub const CLNT_PENDING: i32 = 1;
/// `KRPC_CLNT_SENT`: `krpc_clnt_send` sent the call.
pub const CLNT_SENT: i32 = 0;
/// `KRPC_CLNT_AGAIN`: no credit or send resource now (the caller waits).
pub const CLNT_AGAIN: i32 = 2;
/// `KRPC_CLNT_REFUSED`: refused; the result says how.
pub const CLNT_REFUSED: i32 = 3;
/// `KRPC_CLNT_UP`: `krpc_clnt_link` found the connection up.
pub const CLNT_UP: i32 = 0;
/// `KRPC_CLNT_CONNECTING`: a connection attempt is under way.
pub const CLNT_CONNECTING: i32 = 1;
/// `KRPC_CLNT_DOWN`: no connection (lost, or the last attempt failed).
pub const CLNT_DOWN: i32 = 2;

/// `struct krpc_clnt_res`: how a call ended, flat (an `enum clnt_stat` and its detail).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KrpcClntRes {
    /// `enum clnt_stat`.
    pub stat: i32,
    /// `re_errno` (FreeBSD numbers), or `re_why` for `RPC_AUTHERROR`.
    pub err: i32,
    /// `re_vers.low`.
    pub low: u32,
    /// `re_vers.high`.
    pub high: u32,
    /// The reply verifier's flavor.
    pub verf_flavor: u32,
    /// ... and length.
    pub verf_len: u32,
}

const_assert_eq!(size_of::<KrpcClntRes>(), 24);

/// `struct krpc_clnt_stats`: the client transport's counters.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KrpcClntStats {
    /// Results whose DDP pages were copied into plain mbufs (stock-NFS mode).
    pub stock_copies: u64,
    /// ... the page bytes copied.
    pub stock_bytes: u64,
}

const_assert_eq!(size_of::<KrpcClntStats>(), 16);

/// Opaque `struct krpc_clnt`: the Rust client state ([`crate::clnt::KrpcClnt`]).
#[repr(C)]
pub struct KrpcClntHandle {
    _private: [u8; 0],
}

/// Opaque `struct __rpc_client` (FreeBSD's `CLIENT`, or the emulation's): only C reads it.
#[repr(C)]
pub struct FbsdClient {
    _private: [u8; 0],
}

extern "C" {
    /// `clnt_rdma_create`: a `CLIENT` over `h` (it takes `h`: `cl_destroy` frees it); NULL
    /// without memory.
    pub fn krpc_clnt_create(h: *mut KrpcClntHandle, prog: u32, vers: u32) -> *mut FbsdClient;
}

// ---- the RPC server transport (`c/krpc_rdma_svc.h`, `c/krpc_rdma_svc.c`) -----------------

/// ABI version of `krpc_rdma_svc.h` (`KRPC_SVC_ABI_VERSION`).
pub const SVC_ABI_VERSION: u32 = 5;
/// `KRPC_SVC_CALL`: `krpc_svc_recv` hands up a call.
pub const SVC_CALL: i32 = 0;
/// `KRPC_SVC_NONE`: nothing queued.
pub const SVC_NONE: i32 = 1;
/// `KRPC_SVC_DIED`: the connection is gone.
pub const SVC_DIED: i32 = 2;
/// `KRPC_SVC_SENT`: `krpc_svc_reply` posted the reply (the chains are the transport's).
pub const SVC_SENT: i32 = 0;
/// `KRPC_SVC_AGAIN`: no send resource or reply slot now (nothing consumed).
pub const SVC_AGAIN: i32 = 2;
/// `KRPC_SVC_FAILED`: not sent (the chains were consumed); for `krpc_svc_drop`: no such call.
pub const SVC_FAILED: i32 = 3;
/// `KRPC_SVC_DROPPED`: `krpc_svc_drop` gave the call's context back.
pub const SVC_DROPPED: i32 = 0;
/// `KRPC_SVC_STAT_DIED` (`XPRT_DIED`).
pub const SVC_STAT_DIED: i32 = 0;
/// `KRPC_SVC_STAT_MOREREQS` (`XPRT_MOREREQS`).
pub const SVC_STAT_MOREREQS: i32 = 1;
/// `KRPC_SVC_STAT_IDLE` (`XPRT_IDLE`).
pub const SVC_STAT_IDLE: i32 = 2;

/// `struct krpc_svc_call`: a received call's RPC header, flat.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KrpcSvcCall {
    /// `rm_xid`.
    pub xid: u32,
    /// `cb_rpcvers`.
    pub rpcvers: u32,
    /// `cb_prog`.
    pub prog: u32,
    /// `cb_vers`.
    pub vers: u32,
    /// `cb_proc`.
    pub proc_: u32,
    /// `cb_cred.oa_flavor`.
    pub cred_flavor: u32,
    /// `cb_cred.oa_length` (bytes copied to the credential buffer).
    pub cred_len: u32,
    /// `cb_verf.oa_flavor`.
    pub verf_flavor: u32,
    /// `cb_verf.oa_length`.
    pub verf_len: u32,
}

const_assert_eq!(size_of::<KrpcSvcCall>(), 36);

/// `struct krpc_svc_stats`: the server transport's counters.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KrpcSvcStats {
    /// Calls handed up by `xp_recv`.
    pub calls: u64,
    /// Malformed calls the transport answered itself.
    pub answered: u64,
    /// Replies posted by `xp_reply`.
    pub replies: u64,
    /// `xp_reply` calls that could not be sent.
    pub reply_failed: u64,
    /// Reply chains held now (until the Responder lets go of their pages).
    pub held: u64,
    /// Reply chains freed after their pages were released.
    pub released: u64,
    /// Calls the krpc said it will not answer (`svc_rdma_drop`): contexts given back.
    pub dropped: u64,
    /// REPLY-direction messages dropped (no backchannel): contexts given back, nothing sent.
    pub reverse_replies: u64,
    /// Stock-NFS mode: calls whose DDP pages were copied into plain mbufs.
    pub stock_arg_copies: u64,
    /// ... the page bytes copied.
    pub stock_arg_bytes: u64,
    /// Stock-NFS mode: replies without a DDP marker whose data the NFS reply hook found and
    /// sent by RDMA Write into the call's write chunk.
    pub stock_marked: u64,
    /// ... whose data was copied into pages first.
    pub stock_reply_copies: u64,
    /// ... the bytes copied.
    pub stock_reply_bytes: u64,
    /// The Responder's write chunks filled by RDMA Write.
    pub write_chunks: u64,
    /// The Responder's Long Replies (reply chunk, `RDMA_NOMSG`).
    pub long_replies: u64,
}

const_assert_eq!(size_of::<KrpcSvcStats>(), 120);

/// Opaque `struct krpc_svc`: the Rust server state ([`crate::svc::KrpcSvc`]).
#[repr(C)]
pub struct KrpcSvcHandle {
    _private: [u8; 0],
}

/// Opaque `struct __rpc_svcxprt` (FreeBSD's `SVCXPRT`, or the emulation's): only C reads it.
#[repr(C)]
pub struct FbsdSvcxprt {
    _private: [u8; 0],
}

/// Opaque `struct __rpc_svcpool` (FreeBSD's `SVCPOOL`, or the emulation's).
#[repr(C)]
pub struct FbsdSvcpool {
    _private: [u8; 0],
}

extern "C" {
    /// `svc_rdma_create`: an `SVCXPRT` over `h` registered with `pool` (it takes `h`:
    /// `xp_destroy` frees it); NULL without memory.
    pub fn krpc_svc_create(pool: *mut FbsdSvcpool, h: *mut KrpcSvcHandle) -> *mut FbsdSvcxprt;
}

// ---- the rendezvous transport (`c/krpc_rdma_svc.h`: svc_rdma_listen) ----------------------

/// `KRPC_LISTEN_NEW`: `krpc_listen_accept` returns a new connection's state.
pub const LISTEN_NEW: i32 = 0;
/// `KRPC_LISTEN_NONE`: no request pending.
pub const LISTEN_NONE: i32 = 1;
/// `KRPC_LISTEN_DIED`: the listener is dead (its device gone).
pub const LISTEN_DIED: i32 = 2;

/// Opaque `struct krpc_listen`: the Rust listener state ([`crate::listen::KrpcListen`]).
#[repr(C)]
pub struct KrpcListenHandle {
    _private: [u8; 0],
}

/// `struct krpc_listen_stats`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KrpcListenStats {
    /// Connections accepted (each became an `svc_rdma` transport).
    pub accepted: u64,
    /// Requests rejected (no memory for the connection's state, or the accept failed).
    pub refused: u64,
}

const_assert_eq!(size_of::<KrpcListenStats>(), 16);
