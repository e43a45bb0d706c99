//! What the krpc-face tests share: the emulation's `CLNT_*` entry points
//! (`emu/kpi_emu_rpc.h`), one `CLNT_CALL_MBUF` wrapper, an NFSv3 `CLIENT` and its reply
//! provisioning, the mbuf counters and the checks that nothing is left, the test data, and the
//! NFSv3 WRITE/READ arguments and READ results as FreeBSD's NFS builds them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use krpc_face::clnt::{KrpcClnt, ReplyHook};
use krpc_face::ffi::{FbsdClient, FbsdMbuf};
use krpc_face::mbuf_bridge::{self, MbufChain};
use krpc_rdma::transport::{Requester, TransportConfig};
use mbuf::PageProvider;
use nfs_proto::nfs3::{NfsFh3, Nfsstat3, ReadArgs, ReadHead, StableHow, WriteHead, NFS_PROGRAM};
use ofed_shim::{KernelPages, OfedQp};
use ofed_testkit::emu_mbuf::{self, Part};
use onc_rpc::xdr::{pad, Encoder};

pub use ofed_testkit::nfs_hook::{nfs_read_hook, peek_call, read_chunk, read_spec};

use super::emu_stats;

/// `struct krpc_emu_rpc_err` of `emu/kpi_emu_rpc.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RpcErr {
    pub status: i32,
    pub err: i32,
    pub low: u32,
    pub high: u32,
}

extern "C" {
    fn krpc_emu_clnt_call(
        cl: *mut FbsdClient,
        proc_: u32,
        args: *mut FbsdMbuf,
        rep: *mut *mut FbsdMbuf,
        timeout_ms: u32,
        ext_err: *mut RpcErr,
        cl_err: *mut RpcErr,
    ) -> i32;
    pub fn krpc_emu_clnt_control_u32(cl: *mut FbsdClient, req: u32, val: *mut u32) -> i32;
    pub fn krpc_emu_clnt_control_timeout(cl: *mut FbsdClient, req: u32, ms: *mut i64) -> i32;
    pub fn krpc_emu_clnt_close(cl: *mut FbsdClient);
    pub fn krpc_emu_clnt_destroy(cl: *mut FbsdClient);
    pub fn krpc_emu_clnt_set_authsys(cl: *mut FbsdClient, body: *const u8, len: u32) -> i32;
}

pub const RPC_SUCCESS: i32 = 0;
pub const RPC_TIMEDOUT: i32 = 5;
pub const RPC_PROCUNAVAIL: i32 = 10;
pub const CLSET_XID: u32 = 11;

/// CLNT_CALL_MBUF through the ops table: (status, ext's error, the CLIENT's error, results).
pub fn call(
    cl: *mut FbsdClient,
    proc_: u32,
    args: Option<&MbufChain>,
    timeout_ms: u32,
) -> (i32, RpcErr, RpcErr, Option<MbufChain>) {
    let (mut e1, mut e2) = (RpcErr::default(), RpcErr::default());
    let mut rep: *mut FbsdMbuf = std::ptr::null_mut();
    let a = args.map_or(std::ptr::null_mut(), MbufChain::as_ptr);
    // SAFETY: `cl` is a live CLIENT; `a` NULL or a live chain the caller keeps; the
    // out-pointers are valid.
    let st = unsafe { krpc_emu_clnt_call(cl, proc_, a, &mut rep, timeout_ms, &mut e1, &mut e2) };
    // SAFETY: the results chain is ours (cl_call's contract).
    (st, e1, e2, unsafe { MbufChain::from_raw(rep) })
}

/// The results of a successful call to a procedure without results (NULL): an empty chain,
/// never NULL (as clnt_vc; NFS `mtod()`s it).
#[track_caller]
pub fn assert_empty_results(rep: Option<MbufChain>, what: &str) {
    assert!(
        rep.is_some(),
        "{what}: RPC_SUCCESS with a NULL results chain"
    );
    let len = rep.as_ref().map_or(0, |r| emu_mbuf::bytes(r).len());
    assert_eq!(len, 0, "{what}: no result bytes");
}

/// [`call`] as XID `xid` ([`set_xid`]), and how long it took.
pub fn timed_call(
    cl: *mut FbsdClient,
    xid: u32,
    proc_: u32,
    args: Option<&MbufChain>,
    timeout_ms: u32,
) -> ((i32, RpcErr, RpcErr, Option<MbufChain>), Duration) {
    set_xid(cl, xid);
    let t = Instant::now();
    let out = call(cl, proc_, args, timeout_ms);
    (out, t.elapsed())
}

pub fn set_xid(cl: *mut FbsdClient, xid: u32) {
    let mut x = xid;
    // SAFETY: live CLIENT; CLSET_XID takes a uint32_t.
    assert_eq!(
        unsafe { krpc_emu_clnt_control_u32(cl, CLSET_XID, &mut x) },
        1
    );
}

/// The size of the tests' NFS data: 1 MiB + 3 (not a multiple of 4: XDR padding on both ways).
pub const N: usize = (1 << 20) + 3;
/// Procedure the tests' servers answer PROC_UNAVAIL.
pub const BAD_PROC: u32 = 99;

/// An NFSv3 `CLIENT *` (`clnt_rdma_create`) over `qp` and its `Requester` (`Connected`), at
/// most `TransportConfig::default().max_requests` calls in flight.
pub fn nfs_client(
    qp: OfedQp,
    req: Requester,
    pages: Arc<dyn PageProvider>,
    hook: ReplyHook,
) -> *mut FbsdClient {
    let max = TransportConfig::default().max_requests as usize;
    KrpcClnt::new(Box::new(qp), Box::new(req), pages, hook, max)
        .unwrap()
        .into_client(NFS_PROGRAM, 3)
        .unwrap()
}

/// Emulated mbufs, clusters and M_EXTPG mbufs alive now.
pub fn mbufs_live() -> (u64, u64, u64) {
    let s = emu_mbuf::mbuf_stats();
    (s.mbufs_live, s.clusters_live, s.extpg_live)
}

/// No emulated mbuf, cluster or M_EXTPG mbuf left of those made since [`mbufs_live`] was
/// `before`, and no M_EXTPG mbuf of the bridge's.
#[track_caller]
pub fn assert_no_mbuf_left(before: (u64, u64, u64)) {
    assert_eq!(
        mbufs_live(),
        before,
        "no mbuf, cluster or M_EXTPG mbuf left"
    );
    assert_eq!(mbuf_bridge::counts().extpg_live, 0);
}

/// No arena page wired of those wired since `pages_in_use` was `before`, and no double
/// invalidation attempted.
#[track_caller]
pub fn assert_no_page_left(before: u64) {
    assert_eq!(emu_stats().pages_in_use, before, "no page left");
    assert_eq!(emu_stats().refused_double_inv, 0);
}

/// `n` bytes of test data: byte `i` is `i * mul + seed` xor `i >> shift` (to 8 bits).
pub fn pattern(n: usize, mul: u8, shift: u32, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(mul).wrapping_add(seed) ^ ((i >> shift) as u8))
        .collect()
}

/// WRITE3args' head for `n` bytes at offset 0 to a file handle of 28 `fh` bytes, FILE_SYNC,
/// behind what `e` holds.
pub fn encode_write_head(e: &mut Encoder, fh: u8, n: usize) {
    WriteHead {
        file: NfsFh3 { data: vec![fh; 28] },
        offset: 0,
        count: n as u32,
        stable: StableHow::FileSync,
    }
    .encode_head(e, n as u32);
}

/// [`write_args`] behind what `e` holds (an RPC call header), in the same mbufs as the head.
pub fn write_args_behind(
    kp: &KernelPages,
    mut e: Encoder,
    fh: u8,
    data: &[u8],
) -> (MbufChain, usize) {
    encode_write_head(&mut e, fh, data.len());
    let head = e.finish().unwrap();
    (emu_mbuf::ddp_chain(kp, &head, 40, data), head.len())
}

/// WRITE3args of `data` at offset 0 to a file handle of 28 `fh` bytes, FILE_SYNC, as NFS
/// builds them: the head in mbufs of 40 bytes, the marker, the data in M_EXTPG mbufs, the pad;
/// and the head's length (where the marker stands).
pub fn write_args(kp: &KernelPages, fh: u8, data: &[u8]) -> (MbufChain, usize) {
    write_args_behind(kp, Encoder::new(), fh, data)
}

/// READ3args for `count` bytes at offset 0 of a file handle of 28 `fh` bytes, behind what `e`
/// holds.
pub fn encode_read_args(e: &mut Encoder, fh: u8, count: usize) {
    ReadArgs {
        file: NfsFh3 { data: vec![fh; 28] },
        offset: 0,
        count: count as u32,
    }
    .encode(e);
}

/// READ3args for `count` bytes at offset 0 of a file handle of 28 `fh` bytes, in one mbuf.
pub fn read_args(kp: &KernelPages, fh: u8, count: usize) -> MbufChain {
    let mut e = Encoder::new();
    encode_read_args(&mut e, fh, count);
    emu_mbuf::nfs_chain(kp, &[Part::Bytes(&e.finish().unwrap(), 0)])
}

/// READ3res's head (OK, no attributes, EOF) for `n` bytes of data, behind what `e` holds.
pub fn encode_read_head(e: &mut Encoder, n: usize) {
    ReadHead {
        status: Nfsstat3::OK,
        file_attributes: None,
        count: n as u32,
        eof: true,
        data_len: n as u32,
    }
    .encode(e);
}

/// READ3res (OK, no attributes, EOF) carrying `data` behind what `e` holds (a reply header,
/// or nothing), as knfsd builds it: the head in mbufs of 64 bytes, the marker, the data in
/// M_EXTPG mbufs, the pad; and the length of the head (with what `e` held).
pub fn read_results_chain(kp: &KernelPages, mut e: Encoder, data: &[u8]) -> (MbufChain, usize) {
    encode_read_head(&mut e, data.len());
    let head = e.finish().unwrap();
    (emu_mbuf::ddp_chain(kp, &head, 64, data), head.len())
}

/// The bytes of READ3res (OK, no attributes, EOF) carrying `data`, with its XDR pad.
pub fn read_results(data: &[u8]) -> Vec<u8> {
    let mut r = Encoder::new();
    encode_read_head(&mut r, data.len());
    let mut want = r.finish().unwrap();
    want.extend_from_slice(data);
    want.extend(std::iter::repeat_n(0u8, pad(data.len())));
    want
}
