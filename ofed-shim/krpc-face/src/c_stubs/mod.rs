//! The C halves the host unit tests do not link (`c/krpc_rdma_mbuf.c`): the paths the tests
//! run never build or free a FreeBSD chain; reaching one fails the test.

use crate::ffi::{FbsdMbuf, KrpcMdesc};

#[no_mangle]
extern "C" fn krpc_mbuf_freem(_: *mut FbsdMbuf) {
    panic!("krpc_mbuf_freem in a host unit test");
}

#[no_mangle]
extern "C" fn krpc_mbuf_build(
    _: *const KrpcMdesc,
    _: u32,
    _: *const u64,
    _: u32,
    _: i32,
    _: i32,
    _: *mut *mut FbsdMbuf,
) -> i32 {
    panic!("krpc_mbuf_build in a host unit test");
}
