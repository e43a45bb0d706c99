//! Runs the real `userspace-harness mountd` on 127.0.0.1 (TCP only, no RDMA needed) and
//! mounts from it with the harness's MOUNT v3 client (`onc_rpc_tcp::mount`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use onc_rpc::xdr::Decoder;
use userspace_harness::mount::{auth_sys_root, MountClient, MountStat3, MOUNT_PROG, MOUNT_V3};
use userspace_harness::onc_rpc_tcp::RpcClient;

const BIN: &str = env!("CARGO_BIN_EXE_userspace-harness");
const MOUNTPROC3_DUMP: u32 = 2;
const MOUNTPROC3_EXPORT: u32 = 5;

struct Server {
    child: Child,
    addr: SocketAddr,
    lines: Receiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `mountd` on 127.0.0.1 port 0 and read the address it serves on from its line.
fn start(more: &[&str]) -> Server {
    let mut child = Command::new(BIN)
        .args(["mountd", "--listen", "127.0.0.1:0", "--export", "/kernel"])
        .args(more)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn mountd");
    let out = BufReader::new(child.stdout.take().unwrap());
    let (tx, lines) = channel();
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let first = lines
        .recv_timeout(Duration::from_secs(30))
        .expect("mountd printed its serving line");
    // "mountd: serving /kernel on 127.0.0.1:PORT, handle N bytes"
    let rest = first
        .strip_prefix("mountd: serving /kernel on ")
        .unwrap_or_else(|| panic!("unexpected first line: {first}"));
    let (addr, handle) = rest.split_once(", ").unwrap();
    assert!(
        handle.starts_with("handle ") && handle.ends_with(" bytes"),
        "{first}"
    );
    Server {
        child,
        addr: addr.parse().unwrap(),
        lines,
    }
}

/// SIGTERM, then the exit status (it must exit by itself, within 10 s).
fn terminate(mut s: Server) -> (Option<i32>, Vec<String>) {
    let pid = s.child.id().to_string();
    let st = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(st.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st.code();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "mountd did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut rest = Vec::new();
    while let Ok(l) = s.lines.recv_timeout(Duration::from_secs(2)) {
        rest.push(l);
    }
    (code, rest)
}

/// DUMP over its own connection: the (host, directory) pairs.
fn dump(addr: SocketAddr) -> Vec<(String, String)> {
    let mut c = RpcClient::connect(addr).unwrap();
    let res = c
        .call(MOUNT_PROG, MOUNT_V3, MOUNTPROC3_DUMP, auth_sys_root(), &[])
        .unwrap();
    let mut d = Decoder::new(&res);
    let mut v = Vec::new();
    while d.bool().unwrap() {
        let h = d.opaque("host", 255).unwrap().to_vec();
        let p = d.opaque("dir", 1024).unwrap().to_vec();
        v.push((String::from_utf8(h).unwrap(), String::from_utf8(p).unwrap()));
    }
    v
}

#[test]
fn mnt_over_tcp_returns_the_handle_given_on_the_command_line() {
    let fh = "0123456789abcdef0011223344556677";
    let s = start(&["--fh", fh]);
    let mut c = MountClient::connect_to(s.addr).unwrap();
    c.null().unwrap();
    let m = c.mnt("/kernel").unwrap();
    assert_eq!(userspace_harness::hex::encode(&m.root_fh), fh);
    assert_eq!(dump(s.addr), vec![("127.0.0.1".into(), "/kernel".into())]);
    let e = c.mnt("/elsewhere").unwrap_err();
    assert_eq!(e.mount_stat(), Some(MountStat3::NoEnt), "{e}");
    c.umnt("/kernel").unwrap();
    assert!(dump(s.addr).is_empty());
    // EXPORT: /kernel, no groups.
    let mut r = RpcClient::connect(s.addr).unwrap();
    let res = r
        .call(
            MOUNT_PROG,
            MOUNT_V3,
            MOUNTPROC3_EXPORT,
            auth_sys_root(),
            &[],
        )
        .unwrap();
    let mut d = Decoder::new(&res);
    assert!(d.bool().unwrap());
    assert_eq!(d.opaque("dir", 1024).unwrap(), b"/kernel");
    assert!(!d.bool().unwrap(), "no groups");
    assert!(!d.bool().unwrap(), "one export");
    drop(c);
    drop(r);
    let (code, rest) = terminate(s);
    assert_eq!(code, Some(0), "exit status after SIGTERM; stdout {rest:?}");
}

#[test]
fn an_fh_file_is_read_again_at_every_mnt() {
    let f = std::env::temp_dir().join(format!("mountd-cli-{}-fh", std::process::id()));
    std::fs::write(&f, "aabbccdd\n").unwrap();
    let s = start(&["--fh-file", f.to_str().unwrap()]);
    let mut c = MountClient::connect_to(s.addr).unwrap();
    assert_eq!(
        c.mnt("/kernel").unwrap().root_fh,
        vec![0xaa, 0xbb, 0xcc, 0xdd]
    );
    // A module reload published a new handle.
    std::fs::write(&f, "00112233445566\n").unwrap();
    assert_eq!(
        userspace_harness::hex::encode(&c.mnt("/kernel").unwrap().root_fh),
        "00112233445566"
    );
    // No handle now (the module is unloaded): the server cannot answer one.
    std::fs::remove_file(&f).unwrap();
    let e = c.mnt("/kernel").unwrap_err();
    assert_eq!(e.mount_stat(), Some(MountStat3::ServerFault), "{e}");
    drop(c);
    let (code, _) = terminate(s);
    assert_eq!(code, Some(0));
}

#[test]
fn bad_input_is_one_line_and_exit_status_2() {
    let missing = std::env::temp_dir().join(format!("mountd-cli-{}-none", std::process::id()));
    let missing = missing.to_str().unwrap();
    let long = "00".repeat(65);
    for (args, says) in [
        (vec!["--fh", "xyz"], "not a hex digit"),
        (vec!["--fh", "abc"], "odd number of hex digits"),
        (vec!["--fh", &long], "at most 64"),
        (vec!["--fh", ""], "empty"),
        (vec!["--fh-file", missing], missing),
        (vec![], "--fh"),
        (
            vec!["--fh", "00", "--fh-file", missing],
            "cannot be used with",
        ),
    ] {
        let out = Command::new(BIN)
            .args(["mountd", "--listen", "127.0.0.1:0", "--export", "/kernel"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let out = Command::new(BIN)
        .args(["mountd", "--listen", "127.0.0.1:0", "--export", "kernel"])
        .args(["--fh", "00"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("absolute"));
}
