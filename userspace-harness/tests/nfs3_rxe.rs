//! Interoperability with the Linux kernel's NFS server over RDMA: the `nfs3` command (and
//! the library client behind it) against knfsd on rxe0 in the project's VM, exporting a
//! tmpfs at /export (`xtask/vm/knfsd.sh`):
//! `cargo xtask vm -- cargo test --release -p userspace-harness --test nfs3_rxe --
//! --test-threads=1 --nocapture`.
//!
//! The server's view is checked on the server's own filesystem (the VM's /export): sha256 of
//! what `put` wrote, files written by the shell for `get`, the directory for `ls`, the link
//! for `ln -s`. Outside the project VM, or without an RDMA device, every test prints
//! "skipped: ..." and passes (unless `KRPC_RDMA_REQUIRE_RDMA=1`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tests::file_data::content;
use userspace_harness::nfs3::{self, ConnectOpts};

mod knfsd;
use knfsd::{knfsd, server_ip, skip};

const BIN: &str = env!("CARGO_BIN_EXE_userspace-harness");

fn ip() -> String {
    server_ip().to_string()
}

/// knfsd up (once per test binary), and a fresh directory for `test` under /export; its
/// name within the export.
fn setup(test: &str) -> String {
    knfsd();
    let dir = format!("/t-{}-{test}", std::process::id());
    let local = Path::new("/export").join(dir.trim_start_matches('/'));
    let _ = std::fs::remove_dir_all(&local);
    std::fs::create_dir_all(&local).unwrap();
    dir
}

fn nfs3(args: &[&str]) -> Output {
    let out = Command::new(BIN)
        .args(["nfs3", "-q", "--server", &ip()])
        .args(args)
        .output()
        .unwrap();
    println!(
        "nfs3 {args:?}: exit {:?}\n  stdout: {}  stderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(out.status.success(), "sha256sum {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nfs3-rxe-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

#[test]
fn put_files_of_every_edge_size_and_check_them_on_the_server() {
    if skip() {
        return;
    }
    let dir = setup("put");
    for (i, len) in [0usize, 1, 4095, 4096, 1 << 20, (5 << 20) + 3]
        .into_iter()
        .enumerate()
    {
        let data = content(len, i as u64 + 1);
        let local = tmp(&format!("put-{len}"));
        std::fs::write(&local, &data).unwrap();
        let remote = format!("{dir}/f{len}");
        let out = nfs3(&["put", local.to_str().unwrap(), &remote]);
        assert!(out.status.success(), "put of {len} bytes failed");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(&format!(": {len} bytes")), "{stdout}");
        let on_server = Path::new("/export").join(remote.trim_start_matches('/'));
        assert_eq!(std::fs::metadata(&on_server).unwrap().len(), len as u64);
        assert_eq!(sha256(&on_server), sha256(&local), "{len} bytes");
        // Data past the inline threshold went as read chunks (DDP), not inline.
        if len >= 4096 {
            assert!(!stdout.contains("read chunks 0,"), "{stdout}");
        }
    }
}

#[test]
fn get_files_the_server_side_wrote() {
    if skip() {
        return;
    }
    let dir = setup("get");
    for (i, len) in [0usize, 1, 4095, 4096, 1 << 20, (5 << 20) + 3]
        .into_iter()
        .enumerate()
    {
        let data = content(len, 100 + i as u64);
        let on_server = Path::new("/export")
            .join(dir.trim_start_matches('/'))
            .join(format!("g{len}"));
        std::fs::write(&on_server, &data).unwrap();
        let local = tmp(&format!("get-{len}"));
        let out = nfs3(&["get", &format!("{dir}/g{len}"), local.to_str().unwrap()]);
        assert!(out.status.success(), "get of {len} bytes failed");
        assert_eq!(std::fs::read(&local).unwrap(), data, "{len} bytes differ");
        let stdout = String::from_utf8_lossy(&out.stdout);
        if len >= 4096 {
            assert!(!stdout.contains("write chunks 0,"), "{stdout}");
        }
    }
}

#[test]
fn ls_of_500_files_lists_exactly_them_through_reply_chunks() {
    if skip() {
        return;
    }
    let dir = setup("ls");
    let local = Path::new("/export").join(dir.trim_start_matches('/'));
    let mut want: Vec<String> = (0..500).map(|i| format!("file-{i:04}-abcdef")).collect();
    for n in &want {
        std::fs::write(local.join(n), n.as_bytes()).unwrap();
    }
    want.sort();
    // Through the CLI: exactly the names.
    let out = nfs3(&["ls", &dir]);
    assert!(out.status.success());
    let got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.rsplit(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(got, want);
    // Through the library: the READDIRPLUS replies needed reply chunks (Long Replies).
    let mut c = nfs3::connect(
        &ConnectOpts {
            server: ip().parse().unwrap(),
            port: 20049,
            export: "/export".into(),
            nfs: nfs3::Nfs3Opts {
                depth: 1,
                ..nfs3::Nfs3Opts::default()
            },
        },
        None,
    )
    .unwrap();
    let entries = c.ls(&dir).unwrap();
    assert_eq!(entries.len(), 500);
    let k = c.counters();
    println!("counters after ls: {k:?}");
    assert!(k.reply_chunks >= 1, "no reply chunk provisioned: {k:?}");
    assert!(k.long_replies >= 1, "no Long Reply received: {k:?}");
}

#[test]
fn symlink_and_readlink() {
    if skip() {
        return;
    }
    let dir = setup("ln");
    let target = "../some/where/else-".repeat(20);
    let out = nfs3(&["ln", "-s", &target, &format!("{dir}/link")]);
    assert!(out.status.success());
    let on_server = Path::new("/export")
        .join(dir.trim_start_matches('/'))
        .join("link");
    assert_eq!(
        std::fs::read_link(&on_server).unwrap().to_str().unwrap(),
        target
    );
    let out = nfs3(&["readlink", &format!("{dir}/link")]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim_end(), target);
    // A link the server side made.
    std::os::unix::fs::symlink("/made/by/the/shell", on_server.with_file_name("l2")).unwrap();
    let out = nfs3(&["readlink", &format!("{dir}/l2")]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        "/made/by/the/shell"
    );
    // mkdir, stat, rm round out the namespace operations.
    assert!(nfs3(&["mkdir", &format!("{dir}/sub")]).status.success());
    assert!(on_server.with_file_name("sub").is_dir());
    let out = nfs3(&["stat", &format!("{dir}/sub")]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("type=Dir"));
    assert!(nfs3(&["rm", &format!("{dir}/link")]).status.success());
    assert!(std::fs::symlink_metadata(&on_server).is_err());
}

#[test]
fn errors_print_their_nfs_names_and_exit_1() {
    if skip() {
        return;
    }
    let dir = setup("err");
    let local = tmp("err-out");
    for (args, name) in [
        (
            vec!["stat".to_string(), format!("{dir}/missing")],
            "NFS3ERR_NOENT",
        ),
        (
            vec![
                "get".to_string(),
                format!("{dir}/missing"),
                local.to_str().unwrap().to_string(),
            ],
            "NFS3ERR_NOENT",
        ),
        (
            vec!["rm".to_string(), format!("{dir}/missing")],
            "NFS3ERR_NOENT",
        ),
        (
            vec!["readlink".to_string(), format!("{dir}/missing")],
            "NFS3ERR_NOENT",
        ),
        (vec!["mkdir".to_string(), dir.clone()], "NFS3ERR_EXIST"),
        (
            vec!["ls".to_string(), format!("{dir}/missing")],
            "NFS3ERR_NOENT",
        ),
    ] {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = nfs3(&a);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(name), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    }
    // READLINK of a regular file: NFS3ERR_INVAL.
    std::fs::write(
        Path::new("/export")
            .join(dir.trim_start_matches('/'))
            .join("plain"),
        b"x",
    )
    .unwrap();
    let out = nfs3(&["readlink", &format!("{dir}/plain")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NFS3ERR_INVAL"));
}

/// `nfs3 put` of 96 MiB, default options, while knfsd is stopped and started again
/// (`rpc.nfsd 0`, then knfsd.sh): the client reconnects (by default), resends what was owed
/// with the same XIDs, sends the UNSTABLE WRITEs again if the server's write verifier
/// changed, and the file on the server is exactly the local one.
#[test]
fn put_survives_a_knfsd_restart() {
    if skip() {
        return;
    }
    let dir = setup("restart");
    let len = (96 << 20) + 5;
    let data = content(len, 77);
    let local = tmp("restart");
    std::fs::write(&local, &data).unwrap();
    drop(data);
    let remote = format!("{dir}/big");
    let on_server = Path::new("/export").join(remote.trim_start_matches('/'));
    let child = Command::new(BIN)
        .args(["nfs3", "-q", "--server", &ip()])
        .args(["put", local.to_str().unwrap(), &remote])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Restart once the transfer is under way.
    let t = std::time::Instant::now();
    while std::fs::metadata(&on_server).map_or(0, |m| m.len()) < 2 << 20 {
        assert!(t.elapsed().as_secs() < 60, "the put did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    restart_knfsd();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!(
        "nfs3 put exit {:?}\n  stdout: {}  stderr: {stderr}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(out.status.success(), "put across a restart");
    assert!(
        stderr.contains("reconnected to "),
        "the restart hit the transfer: {stderr}"
    );
    assert_eq!(std::fs::metadata(&on_server).unwrap().len(), len as u64);
    assert_eq!(sha256(&on_server), sha256(&local));
    let _ = std::fs::remove_file(&local);
    let _ = std::fs::remove_file(&on_server);
}

/// Stop knfsd (`rpc.nfsd 0`) and start it again (knfsd.sh) half a second later.
fn restart_knfsd() {
    let stop = Command::new("rpc.nfsd").arg("0").output().unwrap();
    assert!(stop.status.success(), "rpc.nfsd 0: {stop:?}");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let start = Command::new("sh").arg(knfsd::KNFSD_SH).output().unwrap();
    assert!(start.status.success(), "knfsd.sh: {start:?}");
}

/// `nfs3 get` of 96 MiB, default options, while knfsd is stopped and started again: the
/// client reconnects, resends the READs it was owed, sends again (new XIDs) what the
/// restarted knfsd answers NFS3ERR_JUKEBOX while its export cache refills (issue 27: the
/// command used to end "READ ... NFS3ERR_JUKEBOX"), and the copy is exactly the file.
#[test]
fn get_survives_a_knfsd_restart() {
    if skip() {
        return;
    }
    let dir = setup("restart-get");
    let len = (96 << 20) + 7;
    let remote = format!("{dir}/big");
    let on_server = Path::new("/export").join(remote.trim_start_matches('/'));
    std::fs::write(&on_server, content(len, 78)).unwrap();
    let local = tmp("restart-get");
    let _ = std::fs::remove_file(&local);
    let child = Command::new(BIN)
        .args(["nfs3", "-q", "--server", &ip()])
        .args(["get", &remote, local.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while std::fs::metadata(&local).map_or(0, |m| m.len()) < 2 << 20 {
        assert!(t.elapsed().as_secs() < 60, "the get did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    restart_knfsd();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!(
        "nfs3 get exit {:?}\n  stdout: {}  stderr: {stderr}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(out.status.success(), "get across a restart");
    assert!(
        stderr.contains("reconnected to "),
        "the restart hit the transfer: {stderr}"
    );
    assert_eq!(std::fs::metadata(&local).unwrap().len(), len as u64);
    assert_eq!(sha256(&local), sha256(&on_server));
    let _ = std::fs::remove_file(&local);
    let _ = std::fs::remove_file(&on_server);
}
