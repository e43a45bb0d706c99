//! What the face tests share (the host tests over rxe, `tests/emu_rxe`, and FreeBSD's
//! in-kernel face test, `selftest::face`): the reply provisioning of their NFSv3 clients
//! (krpc-face's `nfs_hook`: an NFSv3 READ's data lands in pages of its `count`, a write
//! chunk, every other reply inline), and the malformed calls a server transport must answer
//! itself.

pub use krpc_face::nfs_hook::{nfs_read_hook, peek_call, read_chunk, read_spec};
use nfs_proto::nfs3::NFS_PROGRAM;

/// Malformed RPC calls (raw XDR words, as a Requester sends them) that a server transport
/// must answer itself, never hand up, with the reply words it must send (RFC 5531): the
/// host tests over rxe (`tests/emu_rxe/svc_ops.rs`) and FreeBSD's face test send them.
pub const MALFORMED_CALLS: [(&str, &[u32], &[u32]); 3] = [
    (
        "RPC version 3",
        &[0xa1, 0, 3, NFS_PROGRAM, 3, 0, 0, 0, 0, 0],
        // MSG_DENIED, RPC_MISMATCH, low 2, high 2.
        &[0xa1, 1, 1, 0, 2, 2],
    ),
    (
        "credential of 1000 bytes",
        &[0xa2, 0, 2, NFS_PROGRAM, 3, 0, 1, 1000, 0, 0],
        // MSG_DENIED, AUTH_ERROR, AUTH_BADCRED.
        &[0xa2, 1, 1, 1, 1],
    ),
    (
        "truncated header",
        &[0xa3, 0, 2, NFS_PROGRAM],
        // MSG_ACCEPTED, AUTH_NONE verifier, GARBAGE_ARGS.
        &[0xa3, 1, 0, 0, 0, 4],
    ),
];

/// A good NULL call after [`MALFORMED_CALLS`], and its reply (SUCCESS, no results).
pub const NULL_AFTER_MALFORMED: (&[u32], &[u32]) = (
    &[0xb0, 0, 2, NFS_PROGRAM, 3, 0, 0, 0, 0, 0],
    &[0xb0, 1, 0, 0, 0, 0],
);
