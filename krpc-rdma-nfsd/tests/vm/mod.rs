//! What the VM tests of this crate share (`linux_client_rxe`, `linux_locks_rxe`): whether
//! they can run here, the rxe0 address, shell commands, a tmpfs for an export.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Why the test cannot run here (no RDMA device, not root), if it cannot.
pub fn missing() -> Option<&'static str> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n");
    if !krpc_rdma_verbs::rdma_present() {
        Some("no RDMA device")
    } else if !root.unwrap_or(false) {
        Some("not root")
    } else {
        None
    }
}

/// Skip (print why and return true) when `why` says the test cannot run; with
/// `KRPC_RDMA_REQUIRE_RDMA=1` (inside the VM) that is a failure instead.
pub fn skip(why: Option<&str>) -> bool {
    let Some(why) = why else { return false };
    if std::env::var_os("KRPC_RDMA_REQUIRE_RDMA").is_some_and(|v| v == "1") {
        panic!("{why}, and KRPC_RDMA_REQUIRE_RDMA=1");
    }
    println!("skipped: {why}");
    true
}

/// The address of rxe0.
pub fn ip() -> String {
    std::env::var("RXE_IP").unwrap_or_else(|_| "10.0.2.15".into())
}

/// Run `cmd` with sh (at most 600 s); its status and output. Slow commands are printed.
pub fn sh(cmd: &str) -> (bool, String) {
    let t = std::time::Instant::now();
    let o = Command::new("timeout")
        .args(["600", "sh", "-c", cmd])
        .output()
        .unwrap();
    if t.elapsed() > Duration::from_secs(5) {
        println!("{:.1} s: {cmd}", t.elapsed().as_secs_f64());
    }
    let mut s = String::from_utf8_lossy(&o.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&o.stderr));
    (o.status.success(), s)
}

/// `cmd` must succeed: its output, or a panic with it and the kernel log's tail.
pub fn ok(cmd: &str) -> String {
    let (good, out) = sh(cmd);
    if !good {
        let (_, dmesg) = sh("dmesg | tail -30");
        panic!("`{cmd}` failed:\n{out}\ndmesg:\n{dmesg}");
    }
    out
}

/// Mount a tmpfs of `mib` MiB on `dir` (made if missing): the server needs a file system
/// that gives file handles, and the VM's `/tmp` is an overlay over 9p, which does not.
pub fn tmpfs(dir: &Path, mib: u32) {
    std::fs::create_dir_all(dir).unwrap();
    ok(&format!(
        "mountpoint -q {0} || mount -t tmpfs -o size={mib}m tmpfs {0}",
        dir.display()
    ));
}
