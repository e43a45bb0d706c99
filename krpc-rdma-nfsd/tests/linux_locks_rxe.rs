//! File locking from the Linux kernel NFS client (a default mount: no `nolock`) on our
//! server, in the project's VM over Soft-RoCE: `cargo xtask vm -- cargo test --release -p
//! krpc-rdma-nfsd --test linux_locks_rxe -- --nocapture`. Needs root and an RDMA device;
//! without them it prints why and passes (unless `KRPC_RDMA_REQUIRE_RDMA=1`).
//!
//! Client and server share the VM, and so its rpcbind: the client's rpc.statd holds NSM and
//! the kernel's lockd (started by the mount) registers NLM over UDP and TCP. The server is
//! started first with `--no-lock` for the mount, then restarted with locking and
//! `--rpcbind-replace nlm-tcp`: the client's NLM calls (TCP for an RDMA mount) reach our
//! server, our NLM_GRANTED callbacks (UDP) reach the kernel's lockd, our SM_NOTIFY reaches
//! rpc.statd.
//!
//! The export is mounted twice, the second time with `nosharecache`: the client settles a
//! conflict between two processes on one inode by itself (a blocked F_SETLKW waits on the
//! local lock and never reaches the server); on two mounts the inodes differ and every
//! request goes to the server (as from two client machines: two lock owners, one file
//! handle).
//!
//! Checked: two processes contend for a lock (fcntl through Python): the second blocks (the
//! server reports the request blocked) until the first releases, and gets the lock by the
//! GRANTED callback; F_GETLK reports the holder; a non-blocking attempt fails with EAGAIN;
//! after a server restart the client reclaims its lock (SM_NOTIFY → statd → lockd →
//! reclaim in the grace period), so another process still cannot take it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

mod vm;
use vm::{ip, ok, sh};

const BIN: &str = env!("CARGO_BIN_EXE_nfsd");
const PORT: u16 = 20259;
const MOUNT_PORT: u16 = 20258;
const LOCK_PORT: u16 = 20257;
/// Only a guard against a hang: every wait ends when its line arrives.
const GUARD: Duration = Duration::from_secs(300);
const PY: &str = "/usr/bin/python3";

/// fcntl locks on argv[2]: hold (lock, say so, wait for a line, unlock), wait (F_SETLKW),
/// try (F_SETLK), getlk (F_GETLK: type start len pid).
const SCRIPT: &str = r#"
import fcntl, os, struct, sys
mode, path = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
if mode == "hold" or mode == "wait":
    print("waiting", flush=True)
    fcntl.lockf(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    sys.stdin.readline()
    fcntl.lockf(fd, fcntl.LOCK_UN)
    print("released", flush=True)
elif mode == "try":
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print("ok", flush=True)
    except OSError as e:
        print("busy", e.errno, flush=True)
elif mode == "getlk":
    fl = struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0)
    t, w, s, l, p = struct.unpack("hhqqi4x", fcntl.fcntl(fd, fcntl.F_GETLK, fl))
    print(t, s, l, p, flush=True)
"#;

fn skip() -> bool {
    let no_python = (!Path::new(PY).exists()).then_some("no python3");
    vm::skip(vm::missing().or(no_python))
}

/// A child whose stdout lines arrive on a channel.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
    tag: String,
}

impl Proc {
    fn spawn(tag: &str, cmd: &mut Command) -> Proc {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let stdin = child.stdin.take();
        let (tx, rx) = mpsc::channel();
        let t = tag.to_string();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                println!("{t}: {l}");
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Proc {
            child,
            stdin,
            lines: rx,
            seen: Vec::new(),
            tag: tag.into(),
        }
    }

    /// Wait for a line containing `what`; the line.
    fn wait_for(&mut self, what: &str) -> String {
        loop {
            match self.lines.recv_timeout(GUARD) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.contains(what) {
                        return l;
                    }
                }
                Err(e) => panic!(
                    "{}: no line with {what:?} ({e}); saw {:?}",
                    self.tag, self.seen
                ),
            }
        }
    }

    /// Lines printed so far without waiting.
    fn so_far(&mut self) -> Vec<String> {
        self.seen.extend(self.lines.try_iter());
        self.seen.clone()
    }

    fn say(&mut self, line: &str) {
        let s = self.stdin.as_mut().unwrap();
        writeln!(s, "{line}").unwrap();
        s.flush().unwrap();
    }

    fn finish(mut self) -> (bool, Vec<String>) {
        drop(self.stdin.take());
        let st = self.child.wait().unwrap();
        self.seen.extend(self.lines.try_iter());
        while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(500)) {
            self.seen.push(l);
        }
        (st.success(), self.seen)
    }
}

fn py(tag: &str, mode: &str, file: &Path) -> Proc {
    Proc::spawn(tag, Command::new(PY).args(["-c", SCRIPT, mode]).arg(file))
}

/// Run a one-shot script mode; its output line.
fn py_once(mode: &str, file: &Path) -> String {
    let p = py(mode, mode, file);
    let (good, lines) = p.finish();
    assert!(good, "{mode}: {lines:?}");
    lines.last().cloned().unwrap_or_default()
}

fn server(export: &Path, state: &Path, extra: &[&str]) -> Proc {
    let mut s = Proc::spawn(
        "server",
        Command::new(BIN)
            .args(["--listen", &format!("{}:{PORT}", ip())])
            .arg("--export")
            .arg(export)
            .args(["--mount-port", &MOUNT_PORT.to_string()])
            .args(["--lock-port", &LOCK_PORT.to_string()])
            .arg("--state-dir")
            .arg(state)
            .args(["--clients", "*(rw,no_root_squash)"])
            .args(extra),
    );
    s.wait_for("nfsd: serving ");
    s
}

fn stop(s: Proc) -> Vec<String> {
    ok(&format!("kill -TERM {}", s.child.id()));
    let (clean, lines) = s.finish();
    assert!(clean, "nfsd exit status: {lines:?}");
    lines
}

#[test]
fn linux_client_locks() {
    if skip() {
        return;
    }
    let base = PathBuf::from(format!("/tmp/nfsd-locks-{}", std::process::id()));
    let (export, mnt, mnt2) = (base.join("export"), base.join("mnt"), base.join("mnt2"));
    let state = base.join("state");
    for p in [&export, &mnt, &mnt2] {
        std::fs::create_dir_all(p).unwrap();
    }
    ok(&format!(
        "mount -t tmpfs -o size=64m tmpfs {}",
        export.display()
    ));
    // The client side: rpcbind, rpc.statd (the kernel's lockd is started by the mount).
    ok("modprobe rpcrdma lockd");
    ok("mkdir -p /run /var/lib/nfs/sm /var/lib/nfs/sm.bak");
    ok("rpcinfo -p 127.0.0.1 >/dev/null 2>&1 || rpcbind -w");
    ok("rpcinfo -T udp 127.0.0.1 status 1 >/dev/null 2>&1 || rpc.statd --no-notify");
    println!("{}", ok("rpcinfo -p 127.0.0.1"));

    // The mount, with locking, against a server without it; then the server with locking.
    let s0 = server(&export, &state, &["--no-lock"]);
    let opts = format!("vers=3,proto=rdma,port={PORT},mountport={MOUNT_PORT},mountproto=tcp");
    ok(&format!(
        "mount -t nfs -o {opts} {}:{} {}",
        ip(),
        export.display(),
        mnt.display()
    ));
    ok(&format!(
        "mount -t nfs -o {opts},nosharecache {}:{} {}",
        ip(),
        export.display(),
        mnt2.display()
    ));
    println!("{}", ok("grep ' nfs ' /proc/mounts"));
    stop(s0);
    let extra = ["--grace", "30", "--rpcbind-replace", "nlm-tcp"];
    let mut s1 = server(&export, &state, &extra);
    s1.wait_for("registered nlm-tcp with rpcbind");
    println!("{}", ok("rpcinfo -p 127.0.0.1"));

    // A locks through the first mount, the others go through the second.
    let f = mnt.join("lockfile");
    let f2 = mnt2.join("lockfile");
    // A holds the lock.
    let mut a = py("A", "hold", &f);
    a.wait_for("locked");
    // Another process cannot take it without waiting: EAGAIN (11) or EACCES (13).
    let t = py_once("try", &f2);
    assert!(t.starts_with("busy 11") || t.starts_with("busy 13"), "{t}");
    // F_GETLK reports A's write lock over the whole file, owned by someone else.
    let g = py_once("getlk", &f2);
    let v: Vec<i64> = g.split(' ').map(|x| x.parse().unwrap()).collect();
    assert_eq!((v[0], v[1], v[2]), (1, 0, 0), "F_WRLCK 0 0: {g}");
    // l_pid is the holder's svid as the server reports it (Linux numbers lock owners from
    // 0), not A's process id (which a local answer would give).
    assert_ne!(
        v[3],
        i64::from(a.child.id()),
        "answered locally, not by the server: {g}"
    );
    // B waits: the server reports its request blocked, and B has not got it.
    let mut b = py("B", "wait", &f2);
    b.wait_for("waiting");
    s1.wait_for("blocked");
    assert!(
        !b.so_far().iter().any(|l| l == "locked"),
        "B got a held lock"
    );
    // A releases: B is granted (by the GRANTED callback, or its 30 s poll).
    a.say("go");
    a.wait_for("released");
    b.wait_for("locked");
    let (good, _) = a.finish();
    assert!(good);
    // Now F_GETLK through the first mount sees B.
    let g = py_once("getlk", &f);
    assert!(g.starts_with("1 0 0 "), "{g}");
    b.say("go");
    b.wait_for("released");
    assert!(b.finish().0);
    assert_eq!(py_once("try", &f2), "ok");
    assert_eq!(py_once("getlk", &f2), "2 0 0 0", "F_UNLCK once free");

    // Recovery: C holds a lock across a server restart.
    let mut c = py("C", "hold", &f);
    c.wait_for("locked");
    let lines = stop(s1);
    let all = lines.join("\n");
    assert!(
        all.contains("(1 accepted)"),
        "the GRANTED callback was not accepted: {all}"
    );
    let mut s2 = server(&export, &state, &extra);
    s2.wait_for("client(s) to notify");
    s2.wait_for("SM_NOTIFY sent to");
    // The client's statd tells its lockd, which reclaims C's lock in the grace period.
    s2.wait_for("reclaim granted");
    // So another process still finds the file locked (after the grace period ends: the
    // client retries its request until then).
    let t = py_once("try", &f2);
    assert!(t.starts_with("busy 11") || t.starts_with("busy 13"), "{t}");
    c.say("go");
    c.wait_for("released");
    assert!(c.finish().0);
    assert_eq!(py_once("try", &f2), "ok");

    ok(&format!("umount {} {}", mnt.display(), mnt2.display()));
    let lines = stop(s2);
    let all = lines.join("\n");
    assert!(all.contains("1 reclaimed"), "{all}");
    let _ = sh(&format!("umount {}", export.display()));
    let _ = std::fs::remove_dir_all(&base);
}
