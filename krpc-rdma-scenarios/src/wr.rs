//! Work requests as the scenarios (and the soft provider's own tests) post them.

use krpc_rdma::provider::{RegId, SendOp, SendWr};
use mbuf::PageFragment;

/// A signaled Send of `len` bytes of send buffer `buf`.
pub fn send_wr(wr_id: u64, buf: u32, len: u32) -> SendWr<'static> {
    send_inv(wr_id, buf, len, None)
}

/// [`send_wr`], invalidating the peer's `invalidate` handle (Send With Invalidate).
pub fn send_inv(wr_id: u64, buf: u32, len: u32, invalidate: Option<u32>) -> SendWr<'static> {
    SendWr {
        wr_id,
        op: SendOp::Send {
            buf,
            len,
            invalidate,
        },
        signaled: true,
    }
}

/// A signaled RDMA Write (`write`) or Read between `local` and the peer's `handle`/`offset`.
pub fn rdma(
    wr_id: u64,
    write: bool,
    local: &[PageFragment],
    handle: u32,
    offset: u64,
) -> SendWr<'_> {
    let op = if write {
        SendOp::RdmaWrite {
            local,
            handle,
            offset,
        }
    } else {
        SendOp::RdmaRead {
            local,
            handle,
            offset,
        }
    };
    SendWr {
        wr_id,
        op,
        signaled: true,
    }
}

/// A signaled RDMA Read into `local`.
pub fn rdma_read(wr_id: u64, local: &[PageFragment], handle: u32, offset: u64) -> SendWr<'_> {
    rdma(wr_id, false, local, handle, offset)
}

/// A signaled RDMA Write from `local`.
pub fn rdma_write(wr_id: u64, local: &[PageFragment], handle: u32, offset: u64) -> SendWr<'_> {
    rdma(wr_id, true, local, handle, offset)
}

/// A Local Invalidate of `reg`.
pub fn local_inv(wr_id: u64, reg: RegId, signaled: bool) -> SendWr<'static> {
    SendWr {
        wr_id,
        op: SendOp::LocalInv { reg },
        signaled,
    }
}
