//! Interop with Linux knfsd (svcrdma) in the project's VM:
//! `cargo xtask vm -- cargo test --release -p userspace-harness --test knfsd_rxe --
//! --test-threads=1 --nocapture`.
//!
//! Sets knfsd up with `xtask/vm/knfsd.sh` (a tmpfs `/export`, RDMA on port 20049), then
//! * MOUNT v3 over TCP (rpcbind GETPORT, MNT, UMNT) gives the export's root file handle, and
//!   the errors knfsd's `mountd` answers are the ones we name;
//! * our `Requester` over the libibverbs provider connects to knfsd's RPC-over-RDMA listener
//!   and NFSv3 NULL and GETATTR (of the root handle) come back accepted, NFS3_OK, a directory:
//!   our transport header, private data and credits interoperate with Linux svcrdma.
//!
//! Without an RDMA device every test prints "skipped: no RDMA device" and passes, unless
//! `KRPC_RDMA_REQUIRE_RDMA=1` (as verbs_rxe). Outside the project's VM (no
//! `/run/krpc-vm/cmd.sh`: a host with its own RDMA device) they print "skipped: not in the
//! krpc-rdma VM" and pass: knfsd.sh refuses to reconfigure a real machine's NFS server.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use krpc_rdma::provider::Resources;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use krpc_rdma::transport::{CallError, ReplySpec, Requester, RequesterEvent, TransportConfig};
use mbuf::{Chain, PageProvider};
use onc_rpc::rpc::{AcceptStat, Auth, CallHeader, ReplyHeader};
use onc_rpc::xdr::{Decoder, Encoder};
use userspace_harness::mount::{
    self, getport, MountClient, MountError, MountStat3, IPPROTO_TCP, MOUNT_PROG, MOUNT_V3,
};
use userspace_harness::verbs::arena::VerbsArena;
use userspace_harness::verbs::cm::connect;
use userspace_harness::verbs::device::Device;
use userspace_harness::verbs::qp::VerbsQp;
use userspace_harness::verbs::{self, VerbsConfig};

mod knfsd;
use knfsd::{knfsd, server_ip, skip};

const NFS_PROG: u32 = 100_003;
const NFS_V3: u32 = 3;
const NFSPROC3_NULL: u32 = 0;
const NFSPROC3_GETATTR: u32 = 1;
const NFS3_OK: u32 = 0;
const NF3DIR: u32 = 2;
const NFS_RDMA_PORT: u16 = 20049;
fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// knfsd up and /export mounted (MOUNT v3): the server's address and the export's root
/// file handle, XDR-encoded as an NFS3 argument.
fn mounted_export() -> (IpAddr, Vec<u8>) {
    knfsd();
    let ip = server_ip();
    let root = mount::mount(ip, "/export").unwrap().root_fh;
    let mut fh = Encoder::new();
    fh.opaque(&root);
    (ip, fh.finish().unwrap())
}

#[test]
fn mount_v3_over_tcp() {
    if skip() {
        return;
    }
    knfsd();
    let ip = server_ip();

    let port = getport(ip, MOUNT_PROG, MOUNT_V3, IPPROTO_TCP).unwrap();
    println!("rpcbind: mountd v3 on TCP port {port}");
    // A program nobody registered: port 0, named.
    let e = getport(ip, 0x2000_4b52, 1, IPPROTO_TCP).unwrap_err();
    assert!(matches!(e, MountError::NotRegistered { .. }), "{e}");
    println!("rpcbind, unregistered program: {e}");

    let r = mount::mount(ip, "/export").unwrap();
    println!(
        "MNT /export: root fh {} bytes {}, auth flavors {:?}",
        r.root_fh.len(),
        hex(&r.root_fh),
        r.auth_flavors
    );
    assert!((1..=64).contains(&r.root_fh.len()));
    assert!(r.auth_flavors.contains(&onc_rpc::rpc::AUTH_SYS));

    let mut c = MountClient::connect(ip).unwrap();
    let local = c.rpc().local_addr().unwrap();
    println!("mountd connection from {local}");
    // The VM's command runs as root: the client binds a reserved port.
    assert!(local.port() < 1024, "{local}");
    c.null().unwrap();
    // The same handle on a second MNT.
    assert_eq!(c.mnt("/export").unwrap().root_fh, r.root_fh);
    // Not exported at all: Linux mountd refuses before looking at the path (auth_authenticate
    // finds no export: "not exported") with MNT3ERR_ACCES.
    let e = c.mnt("/nonexistent").unwrap_err();
    println!("MNT /nonexistent: {e}");
    assert_eq!(e.mount_stat(), Some(MountStat3::Acces), "{e}");
    // Under the export but missing: stat() fails, MNT3ERR_NOENT.
    let e = c.mnt("/export/nonexistent").unwrap_err();
    println!("MNT /export/nonexistent: {e}");
    assert_eq!(e.mount_stat(), Some(MountStat3::NoEnt), "{e}");
    c.umnt("/export").unwrap();
    mount::umount(ip, "/export").unwrap();
}

/// An NFSv3 call as a chain: RPC header + `args`.
fn nfs_call(xid: u32, proc_: u32, cred: Auth, args: &[u8]) -> Chain {
    let mut e = Encoder::new();
    CallHeader {
        xid,
        prog: NFS_PROG,
        vers: NFS_V3,
        proc_,
        cred,
        verf: Auth::None,
    }
    .encode(&mut e);
    e.raw(args);
    Chain::from_bytes(&e.finish().unwrap()).unwrap()
}

/// Check an accepted-SUCCESS reply to `xid`; the results.
fn results(reply: &Chain, xid: u32) -> Vec<u8> {
    let b = reply.to_vec().unwrap();
    let mut d = Decoder::new(&b);
    let h = ReplyHeader::decode(&mut d).unwrap();
    assert_eq!(h.xid(), xid);
    match &h {
        ReplyHeader::Accepted {
            stat: AcceptStat::Success,
            ..
        } => {}
        h => panic!("reply {xid:#x}: {h:?}"),
    }
    b[d.pos()..].to_vec()
}

/// GETATTR3res: status NFS3_OK and the fattr3's type.
fn getattr_type(res: &[u8]) -> (u32, u32) {
    let mut d = Decoder::new(res);
    let status = d.u32().unwrap();
    let ftype = if status == NFS3_OK {
        d.u32().unwrap()
    } else {
        0
    };
    if status == NFS3_OK {
        // The rest of fattr3: mode nlink uid gid, size used, rdev, fsid fileid, 3 times.
        assert!(d.remaining() >= 80, "fattr3 short: {} bytes", d.remaining());
    }
    (status, ftype)
}

struct Nfs {
    req: Requester,
    qp: VerbsQp,
    arena: Arc<VerbsArena>,
    next_xid: u32,
}

impl Nfs {
    fn connect(addr: SocketAddr, tcfg: TransportConfig, vcfg: &VerbsConfig) -> Nfs {
        let dev = Device::open(None).unwrap();
        let arena = VerbsArena::new(&dev, 256).unwrap();
        let pages: Arc<dyn PageProvider> = arena.clone();
        let req = Requester::new(tcfg, vcfg.resources(), pages).unwrap();
        println!(
            "our private data {:02x?}: {:?}, {} credits requested",
            req.private_data(),
            tcfg.private_data_for(&vcfg.resources()).unwrap(),
            tcfg.max_requests
        );
        let t = Instant::now();
        let qp = connect(&arena, addr, &req.private_data(), vcfg)
            .unwrap_or_else(|e| panic!("connecting to knfsd at {addr}: {e}"));
        let mut n = Nfs {
            req,
            qp,
            arena,
            next_xid: 0x4b52_0000,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut up = None;
            let mut lost = false;
            n.req.poll(&mut n.qp, &mut |e| match e {
                RequesterEvent::Connected(th) => up = Some(th),
                RequesterEvent::ConnectionLost => lost = true,
                _ => {}
            });
            if let Some(th) = up {
                println!(
                    "connected to knfsd at {addr} in {:.1} ms: inline thresholds {th:?} \
                     (send = min(ours, knfsd's receive), recv = min(ours, knfsd's send)); \
                     credits before the first reply: {}",
                    t.elapsed().as_secs_f64() * 1e3,
                    n.req.credits_granted()
                );
                return n;
            }
            assert!(!lost, "knfsd dropped the connection");
            assert!(Instant::now() < deadline, "no Established from knfsd");
            verbs::wait::wait(&mut n.qp, Duration::from_millis(100));
        }
    }

    /// Send the calls (as the credits allow), return each reply by xid.
    fn run(&mut self, calls: Vec<(u32, Chain, usize)>) -> HashMap<u32, Chain> {
        let want = calls.len();
        let mut queue: std::collections::VecDeque<_> = calls.into();
        let mut out = HashMap::new();
        let mut max_inflight = 0;
        let deadline = Instant::now() + Duration::from_secs(30);
        while out.len() < want {
            while self.req.outstanding() < self.req.credits_granted() {
                let Some((xid, call, max_reply)) = queue.pop_front() else {
                    break;
                };
                match self
                    .req
                    .call(&mut self.qp, call, ReplySpec::inline(max_reply))
                {
                    Ok(()) => max_inflight = max_inflight.max(self.req.outstanding()),
                    Err(rej)
                        if matches!(rej.error, CallError::NoCredit | CallError::WouldBlock) =>
                    {
                        queue.push_front((xid, rej.call, max_reply));
                        break;
                    }
                    Err(rej) => panic!("call {xid:#x} refused: {}", rej.error),
                }
            }
            let mut evs = Vec::new();
            self.req.poll(&mut self.qp, &mut |e| evs.push(e));
            for e in evs {
                match e {
                    RequesterEvent::Reply { xid, reply } => {
                        assert!(out.insert(xid, reply).is_none(), "two replies to {xid:#x}");
                    }
                    RequesterEvent::Failed { xid, error, .. } => {
                        panic!("call {xid:#x} failed: {error}")
                    }
                    RequesterEvent::ConnectionLost => panic!("knfsd dropped the connection"),
                    RequesterEvent::ReverseCall(rc) => {
                        panic!("reverse call {:#x} with no reverse slot enabled", rc.xid)
                    }
                    RequesterEvent::Connected(_) => {}
                }
            }
            assert!(
                Instant::now() < deadline,
                "timed out: {} of {want} replies",
                out.len()
            );
            if out.len() < want {
                verbs::wait::wait(&mut self.qp, Duration::from_millis(50));
            }
        }
        println!(
            "{want} calls, at most {max_inflight} in flight, credits granted now {}",
            self.req.credits_granted()
        );
        out
    }

    /// Disconnect; every arena page is back.
    fn close(self) {
        let Nfs {
            req, mut qp, arena, ..
        } = self;
        qp.disconnect();
        drop((req, qp));
        assert_eq!(arena.in_use(), 0, "arena pages leaked");
    }

    fn xid(&mut self) -> u32 {
        self.next_xid += 1;
        self.next_xid
    }
}

#[test]
fn nfs3_null_and_getattr_over_rdma_to_knfsd() {
    if skip() {
        return;
    }
    let (ip, fh) = mounted_export();

    let mut n = Nfs::connect(
        SocketAddr::new(ip, NFS_RDMA_PORT),
        TransportConfig::default(),
        &VerbsConfig::default(),
    );

    // NULL, AUTH_NONE.
    let xid = n.xid();
    let t = Instant::now();
    let mut r = n.run(vec![(
        xid,
        nfs_call(xid, NFSPROC3_NULL, Auth::None, &[]),
        256,
    )]);
    let res = results(&r.remove(&xid).unwrap(), xid);
    assert!(res.is_empty(), "NULL results: {res:?}");
    println!(
        "NFSv3 NULL over RDMA: accepted SUCCESS in {:.2} ms; knfsd grants {} credits",
        t.elapsed().as_secs_f64() * 1e3,
        n.req.credits_granted()
    );

    // GETATTR of the root, AUTH_SYS uid 0.
    let xid = n.xid();
    let call = nfs_call(xid, NFSPROC3_GETATTR, mount::auth_sys_root(), &fh);
    let mut r = n.run(vec![(xid, call, 512)]);
    let res = results(&r.remove(&xid).unwrap(), xid);
    let (status, ftype) = getattr_type(&res);
    println!(
        "NFSv3 GETATTR(root) over RDMA: status {status}, type {ftype}, {} bytes of results",
        res.len()
    );
    assert_eq!(status, NFS3_OK);
    assert_eq!(ftype, NF3DIR);

    // Many at once, as far as knfsd's credit grant lets us: every one answered, each to its
    // own XID.
    let calls: Vec<_> = (0..48)
        .map(|i| {
            let xid = n.xid();
            let c = if i % 3 == 0 {
                nfs_call(xid, NFSPROC3_NULL, Auth::None, &[])
            } else {
                nfs_call(xid, NFSPROC3_GETATTR, mount::auth_sys_root(), &fh)
            };
            (xid, c, 512)
        })
        .collect();
    let xids: Vec<(u32, bool)> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| (c.0, i % 3 != 0))
        .collect();
    let mut r = n.run(calls);
    for (xid, getattr) in xids {
        let res = results(&r.remove(&xid).unwrap(), xid);
        if getattr {
            assert_eq!(getattr_type(&res), (NFS3_OK, NF3DIR));
        } else {
            assert!(res.is_empty());
        }
    }
    let c = n.req.counters();
    println!(
        "requester counters: sent {}, received {}, inline bytes {} out / {} in, bad {}, \
         credit stalls {}, resource stalls {}, remote invalidations {}",
        c.messages_sent,
        c.messages_received,
        c.inline_bytes_sent,
        c.inline_bytes_received,
        c.bad_messages,
        c.credit_stalls,
        c.resource_stalls,
        c.remote_invalidations
    );
    assert_eq!(c.bad_messages, 0);
    n.close();
    mount::umount(ip, "/export").unwrap();
}

/// What knfsd offers when we ask for more: 16 KiB inline both ways and 128 credits. The
/// thresholds are min(ours, knfsd's), so they show knfsd's RFC 8797 private data (up to
/// 16 KiB); the grant in its replies shows its credit limit (up to 128).
#[test]
fn knfsd_inline_sizes_and_credit_limit() {
    if skip() {
        return;
    }
    let (ip, fh) = mounted_export();
    let tcfg = TransportConfig {
        max_requests: 128,
        inline_send: 16384,
        inline_recv: 16384,
        ..TransportConfig::default()
    };
    let vcfg = VerbsConfig::with(Resources {
        send_bufs: 128,
        recv_bufs: 128,
        send_buf_size: 16384,
        recv_buf_size: 16384,
        ..Resources::default()
    });
    let mut n = Nfs::connect(SocketAddr::new(ip, NFS_RDMA_PORT), tcfg, &vcfg);
    let th = n.req.thresholds();
    let calls: Vec<_> = (0..160)
        .map(|_| {
            let xid = n.xid();
            let call = nfs_call(xid, NFSPROC3_GETATTR, mount::auth_sys_root(), &fh);
            (xid, call, 512)
        })
        .collect();
    let xids: Vec<u32> = calls.iter().map(|c| c.0).collect();
    let mut r = n.run(calls);
    for xid in xids {
        let res = results(&r.remove(&xid).unwrap(), xid);
        assert_eq!(getattr_type(&res), (NFS3_OK, NF3DIR));
    }
    println!(
        "asking for 16384/16384 inline and 128 credits: thresholds {th:?}, knfsd grants {} credits",
        n.req.credits_granted()
    );
    // knfsd advertises at least the RFC 8166 default, and grants at least one credit.
    assert!(th.send >= 1024 && th.recv >= 1024, "{th:?}");
    assert!(n.req.credits_granted() >= 1);
    assert_eq!(n.req.counters().bad_messages, 0);
    n.close();
    mount::umount(ip, "/export").unwrap();
}
