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

/// `struct sockaddr_storage` (128 bytes, 8-aligned, on FreeBSD and Linux): an address as
/// the platform lays it out (FreeBSD: `ss_len`, `ss_family` bytes; Linux: a 16-bit family).
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SockaddrStorage {
    /// The bytes.
    pub bytes: [u8; 128],
}

impl Default for SockaddrStorage {
    fn default() -> Self {
        SockaddrStorage { bytes: [0; 128] }
    }
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
    /// Register the listener's upcall (a request queued, the device gone).
    pub fn krpc_ofed_listener_set_upcall(
        l: *mut KrpcListener,
        f: extern "C" fn(*mut c_void),
        arg: *mut c_void,
    );
    /// Accept a pending connection.
    pub fn krpc_ofed_accept(c: *mut KrpcConn, pdata: *const u8, pdlen: u32) -> i32;
    /// Next CM event: 1 if one was written, 0 if none.
    pub fn krpc_ofed_poll_event(c: *mut KrpcConn, ev: *mut KrpcCmEvent) -> i32;
    /// `rdma_disconnect`.
    pub fn krpc_ofed_disconnect(c: *mut KrpcConn) -> i32;
    /// The cm id's local and remote addresses (`struct sockaddr_storage *` each, see
    /// [`SockaddrStorage`]); 0 or `ENOTCONN`.
    pub fn krpc_ofed_conn_addrs(c: *mut KrpcConn, local: *mut c_void, remote: *mut c_void) -> i32;
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
