// Upstream's `#![deny(warnings)]` is gone: as a path dependency this crate's lints are not
// capped, so a lint new in some rustc would have failed every build of the workspace.
#![allow(non_snake_case, non_camel_case_types, non_upper_case_globals)]
#![allow(deref_nullptr)] // TODO(fxbug.dev/74605): Remove once bindgen is fixed.
#![allow(clippy::missing_safety_doc, clippy::too_many_arguments)]

use libc::*;

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

mod opcode;
mod types;
mod verbs;

pub use self::opcode::*;
pub use self::types::*;
pub use self::verbs::*;

/// The hand-written types of `types.rs` against the headers: each must have C's size and
/// alignment (`c_layout.rs`: bindgen's opaque view of the C types), else the build fails.
/// Added for krpc-rdma (../../docs/rdma-sys.md).
mod c_layout {
    #![allow(dead_code)]
    mod c {
        include!(concat!(env!("OUT_DIR"), "/c_layout.rs"));
    }
    macro_rules! same_layout {
        ($($t:ident),* $(,)?) => {$(
            const _: () = assert!(
                core::mem::size_of::<crate::$t>() == core::mem::size_of::<c::$t>()
                    && core::mem::align_of::<crate::$t>() == core::mem::align_of::<c::$t>(),
                concat!("rdma-sys: the hand-written ", stringify!($t),
                    " differs in size or alignment from the C headers' one")
            );
        )*};
    }
    same_layout!(
        ibv_ah_attr,
        ibv_async_event,
        ibv_flow_spec,
        ibv_gid,
        ibv_global_route,
        ibv_mw_bind_info,
        ibv_ops_wr,
        ibv_send_wr,
        ibv_wc,
        rdma_addr,
        rdma_cm_event,
        rdma_ib_addr,
        rdma_ud_param,
    );
}
