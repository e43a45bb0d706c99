//! Shared by the tests that talk to Linux knfsd in the project's VM (`knfsd_rxe.rs`,
//! `nfs3_rxe.rs`): when to skip, the server's address, and knfsd set up once per process.
#![allow(dead_code, clippy::panic)]

use std::net::IpAddr;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

use userspace_harness::verbs;

/// `xtask/vm/knfsd.sh`.
pub const KNFSD_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../xtask/vm/knfsd.sh");

/// Skip (pass) without an RDMA device, unless `KRPC_RDMA_REQUIRE_RDMA=1` (set by
/// `cargo xtask test` for its run in the VM), where a missing device is a failure, so a VM
/// whose rxe0 did not come up can never pass as "skipped". Outside the VM, skip: knfsd.sh
/// refuses to touch a real host's NFS server.
pub fn skip() -> bool {
    if !verbs::rdma_present() {
        if std::env::var_os("KRPC_RDMA_REQUIRE_RDMA").is_some_and(|v| v == "1") {
            panic!("no RDMA device, and KRPC_RDMA_REQUIRE_RDMA=1");
        }
        println!("skipped: no RDMA device");
        return true;
    }
    if !std::path::Path::new("/run/krpc-vm/cmd.sh").exists() {
        println!(
            "skipped: not in the krpc-rdma VM (knfsd.sh would reconfigure this machine's NFS \
             server)"
        );
        return true;
    }
    false
}

/// The server: `$RXE_IP` (the VM's address on rxe0).
pub fn server_ip() -> IpAddr {
    std::env::var("RXE_IP")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(IpAddr::from([10, 0, 2, 15]))
}

/// Run knfsd.sh once per process (it is idempotent anyway); panic if it fails.
pub fn knfsd() {
    static UP: OnceLock<Result<(), String>> = OnceLock::new();
    let r = UP.get_or_init(|| {
        let t = Instant::now();
        let out = Command::new("sh")
            .arg(KNFSD_SH)
            .output()
            .map_err(|e| format!("sh {KNFSD_SH}: {e}"))?;
        print!("{}", String::from_utf8_lossy(&out.stdout));
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        println!("knfsd.sh: {:.1} s", t.elapsed().as_secs_f64());
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("sh {KNFSD_SH}: {}", out.status))
        }
    });
    if let Err(e) = r {
        panic!("{e}");
    }
}
