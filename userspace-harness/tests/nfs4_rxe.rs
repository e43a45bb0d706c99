//! NFSv4.1 over RDMA against the Linux kernel's NFS server, with the session's back channel
//! on the same RDMA connection (RFC 8167): the `nfs4` command (and the library client behind
//! it) against knfsd on rxe0 in the project's VM (`xtask/vm/knfsd.sh`: /export, a tmpfs, is
//! the root of the NFSv4 name space):
//! `cargo xtask vm -- cargo test --release -p userspace-harness --test nfs4_rxe --
//! --test-threads=1 --nocapture`.
//!
//! * `put` / `get` of files of edge sizes, byte-exact, checked on the server's filesystem,
//!   the data through read and write chunks.
//! * The delegation recall: our client opens a file for reading and holds the READ
//!   delegation knfsd grants; the Linux kernel client, mounted over TCP in the same VM, opens
//!   the file for writing; knfsd sends CB_RECALL over our RDMA connection (a reverse-direction
//!   call), our client answers it and returns the delegation, and the kernel client's write
//!   completes within seconds (not after knfsd's 90 s lease).
//!
//! Outside the project VM, or without an RDMA device, every test prints "skipped: ..." and
//! passes (unless `KRPC_RDMA_REQUIRE_RDMA=1`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tests::file_data::content;

mod knfsd;
use knfsd::{knfsd, server_ip, skip};

const BIN: &str = env!("CARGO_BIN_EXE_userspace-harness");

fn ip() -> String {
    server_ip().to_string()
}

/// knfsd up (once per test binary), its NFSv4 grace period over, and a fresh directory for
/// `test` under /export; its name within the export.
fn setup(test: &str) -> String {
    knfsd();
    // knfsd.sh starts knfsd with 10 s grace periods; end the NFSv4 one now (lockd's runs
    // out by itself: delegations wait for it, see `hold_until_delegated`).
    let _ = std::fs::write("/proc/fs/nfsd/v4_end_grace", "Y");
    let dir = format!("/v4-{}-{test}", std::process::id());
    let local = Path::new("/export").join(dir.trim_start_matches('/'));
    let _ = std::fs::remove_dir_all(&local);
    std::fs::create_dir_all(&local).unwrap();
    dir
}

fn nfs4(args: &[&str]) -> Output {
    let out = Command::new(BIN)
        .args(["nfs4", "--server", &ip()])
        .args(args)
        .output()
        .unwrap();
    println!(
        "nfs4 {args:?}: exit {:?}\n  stdout: {}  stderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nfs4-rxe-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

/// The number after `word ` in `line` (e.g. "recalls" in "…, 1 recalls, …" is before).
fn count_before(line: &str, word: &str) -> Option<u64> {
    let at = line.find(&format!(" {word}"))?;
    line[..at].rsplit([' ', ',']).next()?.parse().ok()
}

#[test]
fn put_and_get_files_of_edge_sizes_byte_exact_through_chunks() {
    if skip() {
        return;
    }
    let dir = setup("io");
    for (i, len) in [0usize, 1, 4095, 4096, 300_001, (3 << 20) + 7]
        .into_iter()
        .enumerate()
    {
        let data = content(len, i as u64 + 11);
        let local = tmp(&format!("put-{len}"));
        std::fs::write(&local, &data).unwrap();
        let remote = format!("{dir}/f{len}");
        let out = nfs4(&["put", local.to_str().unwrap(), &remote]);
        assert!(out.status.success(), "put of {len} bytes failed");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(&format!(": {len} bytes")), "{stdout}");
        let on_server = Path::new("/export").join(remote.trim_start_matches('/'));
        assert_eq!(std::fs::read(&on_server).unwrap(), data, "put {len} bytes");
        if len >= 4096 {
            // The data went as read chunks (DDP), not inline.
            assert!(!stdout.contains("read chunks 0,"), "{stdout}");
        }
        let back = tmp(&format!("get-{len}"));
        let out = nfs4(&["get", &remote, back.to_str().unwrap()]);
        assert!(out.status.success(), "get of {len} bytes failed");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(std::fs::read(&back).unwrap(), data, "get {len} bytes");
        if len >= 4096 {
            assert!(!stdout.contains("write chunks 0,"), "{stdout}");
        }
    }
}

/// `ls` of a directory of 300 files (several READDIR replies, each through a reply chunk)
/// lists exactly them, sorted, with the sizes the server's shell gave them.
#[test]
fn ls_of_300_files_lists_exactly_them_through_reply_chunks() {
    if skip() {
        return;
    }
    let dir = setup("ls");
    let local = Path::new("/export").join(dir.trim_start_matches('/'));
    let mut want: Vec<String> = (0..300)
        .map(|i| format!("file-{i:04}-{}", "x".repeat(i % 40)))
        .collect();
    for (i, n) in want.iter().enumerate() {
        std::fs::write(local.join(n), vec![b'z'; i]).unwrap();
    }
    std::fs::create_dir(local.join("sub")).unwrap();
    want.push("sub".into());
    want.sort();
    let out = nfs4(&["ls", &dir]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let names: Vec<&str> = lines
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap())
        .collect();
    assert_eq!(names, want);
    for l in &lines {
        let name = l.rsplit(' ').next().unwrap();
        if name == "sub" {
            assert!(l.starts_with('d'), "{l}");
            continue;
        }
        let i: usize = name[5..9].parse().unwrap();
        let size: usize = l.split_whitespace().nth(4).unwrap().parse().unwrap();
        assert!(l.starts_with('-') && size == i, "{l}");
    }
    // More than one READDIR, each reply through a reply chunk.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("reply_chunks"), "{stderr}");
}

#[test]
fn stat_and_errors_name_their_status() {
    if skip() {
        return;
    }
    let dir = setup("stat");
    std::fs::write(Path::new("/export").join(&dir[1..]).join("s"), b"12345").unwrap();
    let out = nfs4(&["stat", &format!("{dir}/s")]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("type=Reg") && stdout.contains("size=5"),
        "{stdout}"
    );
    let out = nfs4(&["stat", &format!("{dir}/missing")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("NFS4ERR_NOENT"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
}

/// `nfs4 hold PATH` started, its stdout read until the open line; retried (knfsd grants no
/// delegation while lockd's grace period runs, 10 s after knfsd.sh started it) until a READ
/// delegation is held, for up to 60 s.
fn hold_until_delegated(
    remote: &str,
) -> (std::process::Child, BufReader<std::process::ChildStdout>) {
    let start = Instant::now();
    loop {
        let mut child = Command::new(BIN)
            .args(["nfs4", "--server", &ip(), "hold", remote, "--secs", "60"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        println!("hold: {line}");
        if line.contains("delegation read") {
            return (child, out);
        }
        let rest = child.wait_with_output().unwrap();
        assert!(
            line.contains("delegation none"),
            "hold: {line:?} {:?}",
            rest.status
        );
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "knfsd granted no delegation for 60 s"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

#[test]
fn a_delegation_is_recalled_over_the_rdma_back_channel_and_returned() {
    if skip() {
        return;
    }
    let dir = setup("deleg");
    let name = format!("{dir}/held");
    let on_server = Path::new("/export").join(name.trim_start_matches('/'));
    std::fs::write(&on_server, content(100_000, 7)).unwrap();

    let (mut child, mut out) = hold_until_delegated(&name);

    // The second client: the Linux kernel's, NFSv4.1 over TCP in the same VM.
    let mnt = tmp("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let m = Command::new("mount")
        .args(["-t", "nfs", "-o", "vers=4.1,proto=tcp"])
        .arg(format!("{}:/", ip()))
        .arg(&mnt)
        .output()
        .unwrap();
    assert!(m.status.success(), "mount: {m:?}");
    let file = mnt.join(name.trim_start_matches('/'));
    let t = Instant::now();
    let w = Command::new("sh")
        .arg("-c")
        .arg(format!("echo appended >> '{}'", file.display()))
        .output()
        .unwrap();
    let took = t.elapsed();
    let _ = Command::new("umount").arg(&mnt).status();
    assert!(w.status.success(), "append: {w:?}");
    println!(
        "the kernel client's open for writing took {:.3} s",
        took.as_secs_f64()
    );

    let mut rest = String::new();
    for line in (&mut out).lines() {
        let line = line.unwrap();
        println!("hold: {line}");
        rest.push_str(&line);
        rest.push('\n');
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "hold: {status:?}\n{rest}");
    assert!(
        rest.contains("delegation recalled (CB_RECALL)"),
        "no recall: {rest}"
    );
    let cb = rest
        .lines()
        .find(|l| l.starts_with("back channel:"))
        .unwrap();
    assert_eq!(count_before(cb, "recalls"), Some(1), "{cb}");
    assert_eq!(count_before(cb, "DELEGRETURNs"), Some(1), "{cb}");
    assert_eq!(count_before(cb, "refused"), Some(0), "{cb}");
    // The CB_RECALL (and any probe) came as reverse-direction calls on our connection, and
    // each was answered there.
    let calls = count_before(cb, "calls").unwrap();
    assert!(calls >= 1, "{cb}");
    assert_eq!(count_before(cb, "replies"), Some(calls), "{cb}");
    assert!(cb.contains(&format!("reverse_calls {calls}")), "{cb}");
    assert!(cb.contains(&format!("reverse_replies {calls}")), "{cb}");
    // Recalled and returned: the writer waited seconds, not knfsd's 90 s lease.
    assert!(took < Duration::from_secs(20), "the write waited {took:?}");
    assert!(std::fs::read(&on_server).unwrap().ends_with(b"appended\n"));
}
