//! The Linux kernel NFS client (xprtrdma) against our server, in the project's VM over
//! Soft-RoCE: `CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER=$PWD/xtask/vm/runner.sh cargo
//! test --release -p krpc-rdma-nfsd --test linux_client_rxe -- --nocapture`. Needs root (to
//! mount) and an RDMA device; without them it prints why and passes (unless
//! `KRPC_RDMA_REQUIRE_RDMA=1`).
//!
//! One server and one mount; every workload is checked against the backing directory. The
//! exports are tmpfs mounts: the server needs a file system that gives file handles (the
//! VM's `/tmp` is an overlay over 9p, which does not).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

mod vm;
use vm::{ip, ok, sh, tmpfs};

const BIN: &str = env!("CARGO_BIN_EXE_nfsd");
const PORT: u16 = 20249;
const MOUNT_PORT: u16 = 20248;

fn skip() -> bool {
    vm::skip(vm::missing())
}

struct Server {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Server {
    /// The server on `export`, for every client, root not squashed (as knfsd.sh exports
    /// /export to the tests), its handle key in `state` (kept across a restart).
    fn start(export: &Path, state: &Path) -> Server {
        Server::with_clients(export, state, "*(rw,no_root_squash)")
    }

    fn with_clients(export: &Path, state: &Path, clients: &str) -> Server {
        let mut child = Command::new(BIN)
            .args(["--listen", &format!("{}:{PORT}", ip())])
            .arg("--export")
            .arg(export)
            .args(["--mount-port", &MOUNT_PORT.to_string()])
            .args(["--clients", clients])
            .arg("--state-dir")
            .arg(state)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                println!("server: {l}");
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut s = Server {
            child,
            lines: rx,
            seen: Vec::new(),
        };
        let first = s.lines.recv_timeout(Duration::from_secs(120)).unwrap();
        assert!(first.starts_with("nfsd: serving "), "{first}");
        s.seen.push(first);
        s
    }

    /// SIGTERM; the lines printed until exit, and whether it exited with success.
    fn stop(mut self) -> (bool, Vec<String>) {
        ok(&format!("kill -TERM {}", self.child.id()));
        let st = self.child.wait().unwrap();
        self.seen.extend(self.lines.try_iter());
        while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(500)) {
            self.seen.push(l);
        }
        (st.success(), self.seen)
    }
}

struct Dirs {
    base: PathBuf,
    export: PathBuf,
    state: PathBuf,
    mnt: PathBuf,
    scratch: PathBuf,
}

fn dirs() -> Dirs {
    let base = PathBuf::from(format!("/tmp/nfsd-linux-{}", std::process::id()));
    let d = Dirs {
        export: base.join("export"),
        state: base.join("state"),
        mnt: base.join("mnt"),
        scratch: base.join("scratch"),
        base,
    };
    for p in [&d.mnt, &d.scratch] {
        std::fs::create_dir_all(p).unwrap();
    }
    tmpfs(&d.export, 1024);
    d
}

/// The command that mounts our server's export on `d.mnt` (NFSv3 over RDMA, MOUNT over TCP,
/// no locking), after `modprobe rpcrdma`.
fn mount_cmd(d: &Dirs) -> String {
    let opts =
        format!("vers=3,proto=rdma,port={PORT},mountport={MOUNT_PORT},mountproto=tcp,nolock");
    format!(
        "mount -t nfs -o {opts} {}:{} {}",
        ip(),
        d.export.display(),
        d.mnt.display()
    )
}

/// Unmount the export's tmpfs and remove the directories.
fn cleanup(d: &Dirs) {
    let _ = sh(&format!("umount {}", d.export.display()));
    let _ = std::fs::remove_dir_all(&d.base);
}

/// A random file of `len` bytes in scratch.
fn random_file(d: &Dirs, name: &str, len: u64) -> PathBuf {
    let p = d.scratch.join(name);
    ok(&format!("head -c {len} /dev/urandom > {}", p.display()));
    p
}

/// Write `src` through the mount with dd (`flags`: extra dd flags) and compare the backing
/// file; put it in the backing directory and read it back through the mount.
fn both_ways(d: &Dirs, src: &Path, name: &str, flags: &str) {
    let (m, e) = (d.mnt.join(name), d.export.join(name));
    ok(&format!(
        "dd if={} of={} bs=1M {flags} conv=fsync status=none",
        src.display(),
        m.display()
    ));
    ok(&format!("cmp {} {}", src.display(), e.display()));
    let r = format!("r-{name}");
    let (mr, er) = (d.mnt.join(&r), d.export.join(&r));
    ok(&format!("cp {} {}", src.display(), er.display()));
    let back = d.scratch.join(format!("back-{name}"));
    let iflag = if flags.contains("direct") {
        "iflag=direct"
    } else {
        ""
    };
    ok(&format!(
        "dd if={} of={} bs=1M {iflag} status=none",
        mr.display(),
        back.display()
    ));
    ok(&format!("cmp {} {}", src.display(), back.display()));
}

#[test]
fn linux_client_over_rdma() {
    if skip() {
        return;
    }
    let d = dirs();
    let server = Server::start(&d.export, &d.state);
    ok("modprobe rpcrdma");
    ok(&mount_cmd(&d));
    std::fs::write(d.export.join("hello"), b"hi\n").unwrap();
    let ls = ok(&format!("ls -la {}", d.mnt.display()));
    println!("{ls}");
    assert!(ls.contains("hello"), "{ls}");

    // Files both ways, buffered then O_DIRECT.
    for (i, len) in [0u64, 1, 4095, 4096, (1 << 20) + 3, 64 << 20]
        .into_iter()
        .enumerate()
    {
        let src = random_file(&d, &format!("src{i}"), len);
        println!("dd {len} bytes both ways");
        both_ways(&d, &src, &format!("f{i}"), "");
        if len % 512 == 0 && len > 0 {
            both_ways(&d, &src, &format!("direct{i}"), "oflag=direct");
        }
    }

    trees_and_names(&d);
    directory_of_5000(&d);
    parallel_writers(&d);

    // The server is restarted under the mounted client: its handles stay valid.
    let (clean, mut lines) = server.stop();
    assert!(clean, "nfsd exit status");
    let server = Server::start(&d.export, &d.state);
    std::fs::write(d.export.join("after-restart"), b"again\n").unwrap();
    let cat = ok(&format!(
        "timeout 300 cat {}/hello {}/after-restart",
        d.mnt.display(),
        d.mnt.display()
    ));
    assert_eq!(cat, "hi\nagain\n");
    ok(&format!(
        "timeout 300 dd if=/dev/zero of={}/post bs=64k count=4 status=none",
        d.mnt.display()
    ));
    ok(&format!(
        "cmp -n 262144 /dev/zero {}/post",
        d.export.display()
    ));

    ok(&format!("umount {}", d.mnt.display()));
    let (clean, more) = server.stop();
    assert!(clean, "nfsd exit status");
    lines.extend(more);
    let all = lines.join("\n");
    assert!(all.contains("nfsd transport: "), "{all}");
    assert!(all.contains(" 0 reply errors"), "{all}");
    // No payload byte copied: not by the transport (zero counters are left out of the
    // line), not by LocalFs (pwritev / preadv on the arena pages), in either instance.
    assert!(!all.contains("ddp_payload_copied_bytes"), "{all}");
    let backend: Vec<&str> = lines
        .iter()
        .map(String::as_str)
        .filter(|l| l.starts_with("nfsd backend: "))
        .collect();
    assert_eq!(backend.len(), 2, "{all}");
    assert!(
        backend
            .iter()
            .all(|l| l.starts_with("nfsd backend: 0 bytes")),
        "{all}"
    );
    assert!(
        !all.contains("err_chunk_sent") && !all.contains("err_vers_sent"),
        "RDMA_ERROR sent: {all}"
    );
    cleanup(&d);
}

/// The workload script the in-kernel server's test runs too (`xtask/vm/nfs-workload.sh`,
/// the short list): one list, both servers. Every result is read back through the mount with
/// the client's cache dropped and compared with a local copy.
#[test]
fn shared_workload_script() {
    if skip() {
        return;
    }
    let d = dirs();
    let server = Server::start(&d.export, &d.state);
    ok("modprobe rpcrdma");
    ok(&mount_cmd(&d));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../xtask/vm/nfs-workload.sh");
    let out = ok(&format!(
        "sh {} {} {} short",
        script.display(),
        d.mnt.display(),
        d.scratch.display()
    ));
    println!("{out}");
    assert!(out.contains("nfs-workload: ok: "), "{out}");
    ok(&format!("umount {}", d.mnt.display()));
    let (clean, _) = server.stop();
    assert!(clean, "nfsd exit status");
    cleanup(&d);
}

/// The server's defaults as knfsd's: root is squashed to nobody unless the export says
/// `no_root_squash`; a client the export's list does not name cannot mount.
#[test]
fn root_is_squashed_by_default_and_unlisted_clients_cannot_mount() {
    if skip() {
        return;
    }
    let d = dirs();
    ok(&format!("chmod 777 {}", d.export.display()));
    let server = Server::with_clients(
        &d.export,
        &d.state,
        krpc_rdma_nfsd::exports::Clients::DEFAULT,
    );
    ok("modprobe rpcrdma");
    let mount = mount_cmd(&d);
    ok(&mount);
    // root (this test) creates a file: it belongs to nobody on the server, and root cannot
    // give it back to itself.
    ok(&format!("echo x > {}/by-root", d.mnt.display()));
    assert_eq!(
        ok(&format!("stat -c %u:%g {}/by-root", d.export.display())),
        "65534:65534\n"
    );
    assert!(!sh(&format!("chown 0:0 {}/by-root", d.mnt.display())).0);
    ok(&format!("umount {}", d.mnt.display()));
    let (clean, _) = server.stop();
    assert!(clean, "nfsd exit status");

    // A list that names only another network: MOUNT refuses, the mount fails.
    let server = Server::with_clients(&d.export, &d.state, "192.0.2.0/24(rw)");
    let (mounted, out) = sh(&format!("timeout 60 {mount}"));
    assert!(!mounted, "an unlisted client mounted: {out}");
    let (clean, _) = server.stop();
    assert!(clean, "nfsd exit status");
    cleanup(&d);
}

/// A tree of 2,000 small files (some owned by uid 1000) by `cp -a` and by `tar x`, compared
/// with `diff -r`; rename, hard link, symlink, chmod, truncate; `rm -r`.
fn trees_and_names(d: &Dirs) {
    let (s, m, e) = (d.scratch.display(), d.mnt.display(), d.export.display());
    ok(&format!(
        "cd {s} && for i in $(seq 20); do mkdir -p tree/d$i; for j in $(seq 100); do \
         echo file $i $j > tree/d$i/f$j; done; done && chown -R 1000:1000 tree/d7 && \
         ln -s d1/f1 tree/link && tar cf tree.tar tree"
    ));
    ok(&format!("cp -a {s}/tree {m}/tree"));
    ok(&format!("diff -r {s}/tree {e}/tree"));
    ok(&format!("diff -r {s}/tree {m}/tree"));
    assert_eq!(ok(&format!("stat -c %u:%g {e}/tree/d7/f3")), "1000:1000\n");
    assert_eq!(ok(&format!("readlink {e}/tree/link")), "d1/f1\n");
    ok(&format!(
        "mkdir {m}/untar && tar xf {s}/tree.tar -C {m}/untar"
    ));
    ok(&format!("diff -r {s}/tree {e}/untar/tree"));

    ok(&format!("mv {m}/tree/d1/f1 {m}/tree/d2/moved"));
    assert!(!Path::new(&format!("{e}/tree/d1/f1")).exists());
    assert_eq!(ok(&format!("cat {e}/tree/d2/moved")), "file 1 1\n");
    ok(&format!("ln {m}/tree/d2/moved {m}/tree/hard"));
    assert_eq!(ok(&format!("stat -c %h {e}/tree/d2/moved")), "2\n");
    ok(&format!("ln -s ../d2/moved {m}/tree/d3/sym"));
    assert_eq!(ok(&format!("readlink {m}/tree/d3/sym")), "../d2/moved\n");
    assert_eq!(ok(&format!("readlink {e}/tree/d3/sym")), "../d2/moved\n");
    assert_eq!(ok(&format!("cat {m}/tree/d3/sym")), "file 1 1\n");
    ok(&format!("chmod 640 {m}/tree/hard"));
    assert_eq!(ok(&format!("stat -c %a {e}/tree/d2/moved")), "640\n");
    ok(&format!("truncate -s 3 {m}/tree/hard"));
    assert_eq!(ok(&format!("cat {e}/tree/d2/moved")), "fil");
    ok(&format!("rm -r {m}/tree {m}/untar"));
    assert!(!Path::new(&format!("{e}/tree")).exists());
    assert!(!Path::new(&format!("{e}/untar")).exists());
}

/// A directory of 5,000 entries (made in the backing directory) listed exactly.
fn directory_of_5000(d: &Dirs) {
    let (s, m, e) = (d.scratch.display(), d.mnt.display(), d.export.display());
    ok(&format!(
        "mkdir {e}/big && cd {e}/big && for i in $(seq 5000); do : > entry-$i; done"
    ));
    assert_eq!(ok(&format!("ls {m}/big | wc -l")).trim(), "5000");
    ok(&format!(
        "ls {e}/big > {s}/want && ls {m}/big > {s}/got && cmp {s}/want {s}/got"
    ));
    ok(&format!("rm -r {m}/big"));
    assert!(!Path::new(&format!("{e}/big")).exists());
}

/// Four writers in parallel, each on its own file.
fn parallel_writers(d: &Dirs) {
    let src = random_file(d, "par", 8 << 20);
    let (m, e) = (d.mnt.display(), d.export.display());
    ok(&format!(
        "for i in 1 2 3 4; do dd if={} of={m}/par$i bs=1M conv=fsync status=none & done; wait",
        src.display()
    ));
    for i in 1..=4 {
        ok(&format!("cmp {} {e}/par{i}", src.display()));
    }
}

/// LocalFs on the server's registered arena copies no WRITE or READ byte: a 1 MiB+3 WRITE
/// from received-style pages (the first starting mid-page) goes to the file by `pwritev`
/// over those pages, and a READ fills fresh arena pages by `preadv`. The arena counts every
/// byte the CPU copies in or out of its pages (`read_page` / `write_page`, so also
/// `copydata` / `copyback`): it must not move during the backend calls, and LocalFs's own
/// bounce counter must stay 0. Reintroducing a copy on either path fails here.
#[test]
fn localfs_moves_arena_pages_without_a_copy() {
    use krpc_rdma_nfsd::LocalFs;
    use krpc_rdma_verbs::arena::VerbsArena;
    use krpc_rdma_verbs::device::Device;
    use mbuf::{PageFragment, PageProvider, PAGE_SIZE};
    use nfs_proto::nfs3::{Createhow3, Sattr3, StableHow};
    use nfs_service::nfsd::{Backend, WriteIov};
    use onc_rpc::svc::Cred;
    use std::sync::Arc;

    if skip() {
        return;
    }
    let dir = PathBuf::from(format!("/tmp/nfsd-localfs-arena-{}", std::process::id()));
    tmpfs(&dir, 64);
    let dev = Device::open(None).unwrap();
    let arena = VerbsArena::new(&dev, 1024).unwrap();
    let fs = LocalFs::new(&dir).unwrap().with_file_pages(arena.clone());
    let pages: Arc<dyn PageProvider> = arena.clone();
    let root = Cred {
        uid: 0,
        gid: 0,
        ..Cred::none()
    };
    let f = fs
        .create(
            &root,
            &fs.root_fh(),
            b"f",
            &Createhow3::Unchecked(Sattr3::default()),
        )
        .unwrap();

    let data: Vec<u8> = (0..(1 << 20) + 3).map(|i| (i * 7 % 251) as u8).collect();
    let mut slices = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let addr = pages.alloc_page().unwrap();
        let offset = if at == 0 { 100 } else { 0 };
        let len = (PAGE_SIZE - offset).min(data.len() - at);
        pages.write_page(addr, offset, &data[at..at + len]).unwrap();
        slices.push(PageFragment { addr, offset, len });
        at += len;
    }
    let copied = arena.copied_bytes();
    let w = fs
        .write(
            &root,
            &f,
            5,
            StableHow::Unstable,
            WriteIov::Pages {
                provider: &pages,
                slices: &slices,
            },
        )
        .unwrap();
    assert_eq!(w.count as usize, data.len());
    let r = fs.read(&root, &f, 5, 2 << 20, &pages).unwrap();
    assert_eq!(arena.copied_bytes(), copied, "a backend call copied bytes");
    assert_eq!(fs.bounced_bytes(), 0);
    assert!(r.eof);
    assert_eq!(r.data.len(), data.len());
    assert_eq!(r.data.to_vec().unwrap(), data);
    let on_disk = std::fs::read(dir.join("f")).unwrap();
    assert_eq!(&on_disk[..5], &[0; 5]);
    assert_eq!(&on_disk[5..], &data[..]);
    for s in &slices {
        pages.page_unref(s.addr);
    }
    drop(r);
    assert_eq!(arena.in_use(), 0, "pages leaked");
    let _ = sh(&format!("umount {}", dir.display()));
    let _ = std::fs::remove_dir_all(&dir);
}
