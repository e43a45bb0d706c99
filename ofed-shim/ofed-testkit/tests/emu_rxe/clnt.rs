//! What the krpc-face tests share: the emulation's `CLNT_*` entry points
//! (`emu/kpi_emu_rpc.h`), one `CLNT_CALL_MBUF` wrapper, the mbuf counters, and the NFSv3
//! WRITE/READ arguments and READ results as FreeBSD's NFS builds them.

use krpc_face::ffi::{FbsdClient, FbsdMbuf};
use krpc_face::mbuf_bridge::MbufChain;
use nfs_proto::nfs3::{NfsFh3, Nfsstat3, ReadArgs, ReadHead, StableHow, WriteHead};
use ofed_shim::KernelPages;
use ofed_testkit::emu_mbuf::{self, Part};
use onc_rpc::xdr::{pad, Encoder};

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

pub fn set_xid(cl: *mut FbsdClient, xid: u32) {
    let mut x = xid;
    // SAFETY: live CLIENT; CLSET_XID takes a uint32_t.
    assert_eq!(
        unsafe { krpc_emu_clnt_control_u32(cl, CLSET_XID, &mut x) },
        1
    );
}

/// Emulated mbufs, clusters and M_EXTPG mbufs alive now.
pub fn mbufs_live() -> (u64, u64, u64) {
    let s = emu_mbuf::mbuf_stats();
    (s.mbufs_live, s.clusters_live, s.extpg_live)
}

/// WRITE3args of `data` at offset 0 to a file handle of 28 `fh` bytes, FILE_SYNC, as NFS
/// builds them: the head in mbufs of 40 bytes, the marker, the data in M_EXTPG mbufs, the pad;
/// and the head's length (where the marker stands).
pub fn write_args(kp: &KernelPages, fh: u8, data: &[u8]) -> (MbufChain, usize) {
    let mut e = Encoder::new();
    WriteHead {
        file: NfsFh3 { data: vec![fh; 28] },
        offset: 0,
        count: data.len() as u32,
        stable: StableHow::FileSync,
    }
    .encode_head(&mut e, data.len() as u32);
    let head = e.finish().unwrap();
    (emu_mbuf::ddp_chain(kp, &head, 40, data), head.len())
}

/// READ3args for `count` bytes at offset 0 of a file handle of 28 `fh` bytes, in one mbuf.
pub fn read_args(kp: &KernelPages, fh: u8, count: usize) -> MbufChain {
    let mut e = Encoder::new();
    ReadArgs {
        file: NfsFh3 { data: vec![fh; 28] },
        offset: 0,
        count: count as u32,
    }
    .encode(&mut e);
    emu_mbuf::nfs_chain(kp, &[Part::Bytes(&e.finish().unwrap(), 0)])
}

/// The bytes of READ3res (OK, no attributes, EOF) carrying `data`, with its XDR pad.
pub fn read_results(data: &[u8]) -> Vec<u8> {
    let mut r = Encoder::new();
    ReadHead {
        status: Nfsstat3::OK,
        file_attributes: None,
        count: data.len() as u32,
        eof: true,
        data_len: data.len() as u32,
    }
    .encode(&mut r);
    let mut want = r.finish().unwrap();
    want.extend_from_slice(data);
    want.extend(std::iter::repeat_n(0u8, pad(data.len())));
    want
}
