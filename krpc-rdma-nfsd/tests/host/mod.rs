//! Shared by the tests that call `LocalFs` directly on the host: whether they run as root,
//! and the credentials they call with.

use std::os::unix::fs::MetadataExt;

use onc_rpc::svc::Cred;

/// The caller `uid` / `gid`, no supplementary groups.
pub fn cred(uid: u32, gid: u32) -> Cred<'static> {
    Cred {
        uid,
        gid,
        ..Cred::none()
    }
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1)
        == 0
}
