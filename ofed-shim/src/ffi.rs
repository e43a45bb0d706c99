//! The C boundary (`c/krpc_rdma_ofed.h`): our own `repr(C)` structs and the exported wrapper
//! functions of `c/krpc_rdma_ofed.c`. No kernel structure crosses; every layout here is
//! asserted against the C header's `_Static_assert`s.

use core::ffi::c_void;
use core::mem::{offset_of, size_of};

use static_assertions::const_assert_eq;

/// ABI version of `krpc_rdma_ofed.h` this crate was written against.
pub const ABI_VERSION: u32 = 2;

/// `struct krpc_sge`: a kernel page address plus offset, and a length.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KrpcSge {
    /// Page address (physical in the kernel) plus in-page offset.
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// Zero.
    pub reserved: u32,
}

/// `KRPC_OP_SEND`.
pub const OP_SEND: u32 = 0;
/// `KRPC_OP_SEND_INV`.
pub const OP_SEND_INV: u32 = 1;
/// `KRPC_OP_RDMA_WRITE`.
pub const OP_RDMA_WRITE: u32 = 2;
/// `KRPC_OP_RDMA_READ`.
pub const OP_RDMA_READ: u32 = 3;
/// `KRPC_OP_LOCAL_INV`.
pub const OP_LOCAL_INV: u32 = 4;
/// `KRPC_WR_SIGNALED`.
pub const WR_SIGNALED: u32 = 1;

/// `struct krpc_wr`: one send-queue work request.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KrpcWr {
    /// Hardware work-request id (the provider's sequence number).
    pub wr_id: u64,
    /// Remote address of an RDMA Read/Write.
    pub remote_addr: u64,
    /// `OP_*`.
    pub opcode: u32,
    /// `WR_SIGNALED` or 0.
    pub flags: u32,
    /// Remote key (RDMA), or the key to invalidate (`OP_SEND_INV`, `OP_LOCAL_INV`).
    pub rkey: u32,
    /// First SGE in the SGE array.
    pub sge_first: u32,
    /// Number of SGEs.
    pub num_sge: u32,
    /// Zero.
    pub reserved: u32,
}

/// `KRPC_WC_*` statuses.
pub mod wc {
    /// Success.
    pub const SUCCESS: u32 = 0;
    /// Flushed.
    pub const FLUSHED: u32 = 1;
    /// Remote access error.
    pub const REM_ACCESS: u32 = 2;
    /// RNR retries exceeded.
    pub const RNR_RETRY: u32 = 3;
    /// Local error.
    pub const LOCAL: u32 = 4;
    /// Transport retries exceeded.
    pub const RETRY: u32 = 5;
    /// Receive-queue completion flag.
    pub const F_RECV: u32 = 1;
    /// `IB_WC_WITH_INVALIDATE` flag.
    pub const F_INV: u32 = 2;
}

/// `struct krpc_wc`: one completion.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KrpcWc {
    /// Hardware work-request id.
    pub wr_id: u64,
    /// `wc::*` status.
    pub status: u32,
    /// `wc::F_*` flags.
    pub flags: u32,
    /// Bytes received.
    pub byte_len: u32,
    /// Key the peer invalidated (with `wc::F_INV`).
    pub invalidated_rkey: u32,
}

/// `struct krpc_ofed_params`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KrpcParams {
    /// Hardware send-queue depth.
    pub max_send_wr: u32,
    /// Receive-queue depth.
    pub max_recv_wr: u32,
    /// SGEs per work request.
    pub max_sge: u32,
    /// FRWR MRs in the pool.
    pub num_mrs: u32,
    /// Pages per MR.
    pub max_pages_per_mr: u32,
    /// Responder resources and initiator depth.
    pub rd_atomic: u32,
    /// Resolution timeout.
    pub timeout_ms: u32,
    /// Zero.
    pub reserved: u32,
}

/// `KRPC_CM_*` event kinds.
pub mod cm {
    /// Established.
    pub const ESTABLISHED: u32 = 1;
    /// Disconnected.
    pub const DISCONNECTED: u32 = 2;
    /// Rejected.
    pub const REJECTED: u32 = 3;
    /// Error.
    pub const ERROR: u32 = 4;
}

/// `struct krpc_cm_event`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KrpcCmEvent {
    /// `cm::*`.
    pub kind: u32,
    /// Status from rdma_cm.
    pub status: i32,
    /// Valid bytes of `private_data`.
    pub private_data_len: u32,
    /// The peer's private data.
    pub private_data: [u8; 56],
}

impl Default for KrpcCmEvent {
    fn default() -> Self {
        KrpcCmEvent {
            kind: 0,
            status: 0,
            private_data_len: 0,
            private_data: [0; 56],
        }
    }
}

/// `struct krpc_reg_out`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KrpcRegOut {
    /// Offset the peer uses.
    pub iova: u64,
    /// Handle.
    pub rkey: u32,
    /// Bytes covered.
    pub length: u32,
    /// Fragments taken (a prefix).
    pub nmapped: u32,
    /// Zero.
    pub reserved: u32,
}

/// `struct krpc_ofed_counts`: the C wrappers' objects live now and their work since load.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KrpcCounts {
    /// rdma_cm ids owned.
    pub cm_ids_live: u64,
    /// Protection domains.
    pub pds_live: u64,
    /// Completion queues.
    pub cqs_live: u64,
    /// Queue pairs.
    pub qps_live: u64,
    /// FRWR MRs.
    pub mrs_live: u64,
    /// SGE DMA mappings of posted, not yet polled work requests.
    pub dma_maps_live: u64,
    /// `IB_WR_REG_MR` posted.
    pub reg_mrs: u64,
    /// `IB_WR_LOCAL_INV` posted.
    pub local_invs: u64,
    /// `IB_WR_SEND_WITH_INV` posted.
    pub send_invs: u64,
    /// Receive completions with `IB_WC_WITH_INVALIDATE`.
    pub recv_invs: u64,
    /// Sends of connecting sides.
    pub sends_active: u64,
    /// Sends of accepting sides.
    pub sends_passive: u64,
    /// Work completions polled.
    pub completions: u64,
    /// MRs deregistered and reallocated.
    pub mr_resets: u64,
}

/// `KRPC_ACC_REMOTE_READ`.
pub const ACC_REMOTE_READ: u32 = 1;
/// `KRPC_ACC_REMOTE_WRITE`.
pub const ACC_REMOTE_WRITE: u32 = 2;
/// `KRPC_ACC_LOCAL_WRITE`.
pub const ACC_LOCAL_WRITE: u32 = 4;
/// `KRPC_M_NOWAIT`.
pub const M_NOWAIT: i32 = 1;

const_assert_eq!(size_of::<KrpcSge>(), 16);
const_assert_eq!(offset_of!(KrpcSge, length), 8);
const_assert_eq!(size_of::<KrpcWr>(), 40);
const_assert_eq!(offset_of!(KrpcWr, remote_addr), 8);
const_assert_eq!(offset_of!(KrpcWr, opcode), 16);
const_assert_eq!(offset_of!(KrpcWr, rkey), 24);
const_assert_eq!(offset_of!(KrpcWr, sge_first), 28);
const_assert_eq!(offset_of!(KrpcWr, num_sge), 32);
const_assert_eq!(size_of::<KrpcWc>(), 24);
const_assert_eq!(offset_of!(KrpcWc, status), 8);
const_assert_eq!(offset_of!(KrpcWc, byte_len), 16);
const_assert_eq!(offset_of!(KrpcWc, invalidated_rkey), 20);
const_assert_eq!(size_of::<KrpcParams>(), 32);
const_assert_eq!(offset_of!(KrpcParams, timeout_ms), 24);
const_assert_eq!(size_of::<KrpcCmEvent>(), 68);
const_assert_eq!(offset_of!(KrpcCmEvent, private_data), 12);
const_assert_eq!(size_of::<KrpcRegOut>(), 24);
const_assert_eq!(offset_of!(KrpcRegOut, rkey), 8);
const_assert_eq!(offset_of!(KrpcRegOut, nmapped), 16);
const_assert_eq!(size_of::<KrpcCounts>(), 112);
const_assert_eq!(offset_of!(KrpcCounts, reg_mrs), 48);

/// Opaque `struct krpc_ofed_conn`.
#[repr(C)]
pub struct KrpcConn {
    _private: [u8; 0],
}

/// Opaque `struct krpc_ofed_listener`.
#[repr(C)]
pub struct KrpcListener {
    _private: [u8; 0],
}

extern "C" {
    /// malloc(9) hook.
    pub fn krpc_ofed_malloc(size: usize, flags: i32) -> *mut c_void;
    /// free(9) hook.
    pub fn krpc_ofed_free(p: *mut c_void);
    /// panic(9) hook; does not return.
    pub fn krpc_ofed_panic(msg: *const u8, len: usize) -> !;
    /// Allocate one wired, zeroed page; its physical address in `*pa`.
    pub fn krpc_ofed_page_alloc(pa: *mut u64) -> i32;
    /// One more wiring of the page.
    pub fn krpc_ofed_page_ref(pa: u64) -> i32;
    /// Drop one wiring; freed at zero.
    pub fn krpc_ofed_page_unref(pa: u64);
    /// Kernel virtual address of the page (direct map), NULL if unknown.
    pub fn krpc_ofed_page_kva(pa: u64) -> *mut u8;

    /// Start an active connection.
    pub fn krpc_ofed_connect(
        vnet: *mut c_void,
        dst: *const c_void,
        params: *const KrpcParams,
        pdata: *const u8,
        pdlen: u32,
        out: *mut *mut KrpcConn,
    ) -> i32;
    /// Listen.
    pub fn krpc_ofed_listen(
        vnet: *mut c_void,
        addr: *const c_void,
        params: *const KrpcParams,
        backlog: i32,
        out: *mut *mut KrpcListener,
    ) -> i32;
    /// Next pending connection request (QP created, not accepted); `EAGAIN` if none.
    pub fn krpc_ofed_listener_next(l: *mut KrpcListener, out: *mut *mut KrpcConn) -> i32;
    /// Destroy a listener.
    pub fn krpc_ofed_listener_destroy(l: *mut KrpcListener);
    /// Accept a pending connection.
    pub fn krpc_ofed_accept(c: *mut KrpcConn, pdata: *const u8, pdlen: u32) -> i32;
    /// Next CM event: 1 if one was written, 0 if none.
    pub fn krpc_ofed_poll_event(c: *mut KrpcConn, ev: *mut KrpcCmEvent) -> i32;
    /// `rdma_disconnect`.
    pub fn krpc_ofed_disconnect(c: *mut KrpcConn) -> i32;
    /// Register the CQ completion upcall.
    pub fn krpc_ofed_set_upcall(c: *mut KrpcConn, f: extern "C" fn(*mut c_void), arg: *mut c_void);
    /// Tear down QP, CQ, MRs, PD, cm id.
    pub fn krpc_ofed_conn_destroy(c: *mut KrpcConn);
    /// Post a chain of send work requests.
    pub fn krpc_ofed_post_send(
        c: *mut KrpcConn,
        wrs: *const KrpcWr,
        n: u32,
        sges: *const KrpcSge,
        nsge: u32,
        posted: *mut u32,
    ) -> i32;
    /// Post receives (one SGE each).
    pub fn krpc_ofed_post_recv(
        c: *mut KrpcConn,
        wr_ids: *const u64,
        sges: *const KrpcSge,
        n: u32,
        posted: *mut u32,
    ) -> i32;
    /// Poll the CQ: completions written, or a negative errno.
    pub fn krpc_ofed_poll_cq(c: *mut KrpcConn, out: *mut KrpcWc, n: u32) -> i32;
    /// Arm the CQ notification.
    pub fn krpc_ofed_req_notify(c: *mut KrpcConn) -> i32;
    /// Map a prefix of `frags` into MR `mr` and post its REG_MR (unsignaled, `wr_id`).
    pub fn krpc_ofed_reg_mr(
        c: *mut KrpcConn,
        mr: u32,
        frags: *const KrpcSge,
        n: u32,
        access: u32,
        wr_id: u64,
        out: *mut KrpcRegOut,
    ) -> i32;
    /// DMA-unmap the pages of an invalidated MR.
    pub fn krpc_ofed_mr_unmap(c: *mut KrpcConn, mr: u32);
    /// Deregister and reallocate an MR that could not be invalidated (its rkey dies).
    pub fn krpc_ofed_mr_reset(c: *mut KrpcConn, mr: u32, rkey: *mut u32) -> i32;
    /// The wrappers' counts (live objects, work since load).
    pub fn krpc_ofed_get_counts(out: *mut KrpcCounts);
}

// ---- the mbuf bridge (`c/krpc_rdma_mbuf.h`, `c/krpc_rdma_mbuf.c`) ---------------------------

/// ABI version of `krpc_rdma_mbuf.h` (`KRPC_MBUF_ABI_VERSION`).
pub const MBUF_ABI_VERSION: u32 = 1;
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
    /// Build a chain from descriptors (bytes copied, one page wiring per page per M_EXTPG).
    pub fn krpc_mbuf_build(
        d: *const KrpcMdesc,
        nd: u32,
        pa: *const u64,
        npa: u32,
        how: i32,
        pkthdr: i32,
        out: *mut *mut FbsdMbuf,
    ) -> i32;
    /// `m_freem`.
    pub fn krpc_mbuf_freem(m: *mut FbsdMbuf);
    /// The bridge's counters.
    pub fn krpc_mbuf_get_counts(out: *mut KrpcMbufCounts);
}

// ---- the RPC client transport (`c/krpc_rdma_clnt.h`, `c/krpc_rdma_clnt.c`) -----------------

/// ABI version of `krpc_rdma_clnt.h` (`KRPC_CLNT_ABI_VERSION`).
pub const CLNT_ABI_VERSION: u32 = 1;
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

/// Opaque `struct krpc_clnt`: the Rust client state ([`crate::krpc_clnt::KrpcClnt`]).
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
pub const SVC_ABI_VERSION: u32 = 2;
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
}

const_assert_eq!(size_of::<KrpcSvcStats>(), 56);

/// Opaque `struct krpc_svc`: the Rust server state ([`crate::krpc_svc::KrpcSvc`]).
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
