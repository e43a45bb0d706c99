//! `clnt_rdma` against Linux knfsd: a `CLIENT *` made by `clnt_rdma_create`
//! (`c/krpc_rdma_clnt.c` over the emulated KPI) on a connection to knfsd's RPC-over-RDMA
//! listener (port 20049 on rxe0, set up by `xtask/vm/knfsd.sh`), called through its
//! `struct clnt_ops` table (`CLNT_CALL_MBUF`) with AUTH_SYS (root; the export is
//! `no_root_squash`) as `cl_auth`: NFSv3 NULL, FSINFO and GETATTR of the root handle (from
//! MOUNT v3 over TCP, the `onc-rpc-tcp` crate), CREATE of a file, WRITE of 1 MiB + 3 bytes whose
//! data is in M_EXTPG mbufs behind the M_PROTO1 marker (read chunks), COMMIT, READ of it
//! back (the data comes back through write chunks as M_EXTPG mbufs), the bytes compared with
//! what was written and with the file as the VM's filesystem has it, then REMOVE.
//!
//! Runs in the project's VM only (knfsd.sh refuses to reconfigure a real host's NFS
//! server): elsewhere it prints one "skipped: ..." line and passes, unless
//! `KRPC_RDMA_REQUIRE_RDMA=1` (check 4 of `ofed-shim/check.sh`), where it fails.

use std::net::IpAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use krpc_face::ffi::FbsdClient;
use krpc_face::mbuf_bridge::MbufChain;
use krpc_rdma::transport::{ReplySpec, Requester, RequesterEvent, TransportConfig};
use mbuf::{Chain, PageProvider};
use nfs_proto::ddp::{reply_hint, ReplyHint};
use nfs_proto::nfs3::{
    CommitArgs, CommitRes, CreateArgs, CreateRes, Createhow3, Diropargs3, Filename3, FsinfoArgs,
    FsinfoRes, Ftype3, GetattrArgs, GetattrRes, Nfs3Res, NfsFh3, ReadArgs, ReadRes, RemoveArgs,
    RemoveRes, Sattr3, StableHow, WriteHead, WriteRes, NFSPROC3_COMMIT, NFSPROC3_CREATE,
    NFSPROC3_FSINFO, NFSPROC3_GETATTR, NFSPROC3_READ, NFSPROC3_REMOVE, NFSPROC3_WRITE,
};
use ofed_shim::OfedQp;
use ofed_testkit::emu_mbuf::{self, Part, M_EXTPG};
use ofed_testkit::loopback::{self, Sleep, SockaddrIn};
use onc_rpc::xdr::{pad, Decoder, Encoder};
use onc_rpc_tcp::mount;

use super::clnt::{
    self, assert_empty_results, assert_no_mbuf_left, assert_no_page_left, krpc_emu_clnt_destroy,
    krpc_emu_clnt_set_authsys, mbufs_live, nfs_client, pattern, peek_call, read_chunk, N,
};
use super::{emu, emu_stats, ocfg, CondSleep, KernelPages};

/// `xtask/vm/knfsd.sh`.
const KNFSD_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../xtask/vm/knfsd.sh");
const NFS_RDMA_PORT: u16 = 20049;
/// Replies without bulk data: under knfsd's 1024-byte inline threshold (it sends no RFC 8797
/// private data), as `krpc-rdma-session`'s and the kernel peer run's NFSv3 clients.
const SMALL_REPLY: usize = 640;
/// A reply chunk's size for the procedures whose replies have no bound (READDIR...).
const LONG_REPLY: usize = 64 << 10;
/// READ's result besides its data (the rest of the reply stays inline: a write chunk).
const REPLY_SLACK: usize = 256;
const TIMEOUT_MS: u32 = 30_000;
/// knfsd's inline threshold (RFC 8166's default: it sends no RFC 8797 private data).
const INLINE_THRESHOLD: usize = 1024;

/// Why this test cannot run here (one line), or `None`: knfsd is up.
fn knfsd_up() -> Option<String> {
    if !std::path::Path::new("/run/krpc-vm/cmd.sh").exists() {
        return Some(
            "not in the krpc-rdma VM (knfsd.sh would reconfigure this machine's NFS server)".into(),
        );
    }
    let t = Instant::now();
    match Command::new("sh").arg(KNFSD_SH).output() {
        Ok(o) if o.status.success() => {
            print!("{}", String::from_utf8_lossy(&o.stdout));
            println!("knfsd.sh: {:.1} s", t.elapsed().as_secs_f64());
            None
        }
        Ok(o) => Some(format!(
            "sh {KNFSD_SH}: {}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).replace('\n', " ")
        )),
        Err(e) => Some(format!("sh {KNFSD_SH}: {e}")),
    }
}

fn server_ip() -> [u8; 4] {
    std::env::var("RXE_IP")
        .ok()
        .and_then(|s| s.parse::<std::net::Ipv4Addr>().ok())
        .unwrap_or([10, 0, 2, 15].into())
        .octets()
}

/// The reply provisioning hook: nfs-proto's RFC 8267 table (`reply_hint`). A write chunk in
/// pages of the READ's `count` for READ; a reply chunk for the procedures without a bound;
/// inline otherwise.
fn hook(call: &Chain, pages: &Arc<dyn PageProvider>) -> ReplySpec {
    peek_call(call, |h, d| match reply_hint(h.prog, h.vers, h.proc_) {
        Some(ReplyHint::WriteChunk) if h.proc_ == NFSPROC3_READ => {
            let a = ReadArgs::decode(d).ok()?;
            read_chunk(pages, a.count as usize, REPLY_SLACK)
        }
        Some(ReplyHint::ReplyChunk) => Some(ReplySpec::inline(LONG_REPLY)),
        _ => None,
    })
    .unwrap_or_else(|| ReplySpec::inline(SMALL_REPLY))
}

/// The connection to knfsd and its `Requester`, `Connected`.
fn connect(pages: Arc<dyn PageProvider>) -> (OfedQp, Requester) {
    let cfg = ocfg(&Default::default());
    let req = Requester::new(TransportConfig::default(), cfg.resources(), pages).unwrap();
    let sa = SockaddrIn::new(server_ip(), NFS_RDMA_PORT);
    // SAFETY: NULL vnet (one stack in the emulation); `sa` is a valid sockaddr_in that
    // lives through the call (the C side copies it).
    let mut qp =
        unsafe { OfedQp::connect(std::ptr::null_mut(), sa.as_ptr(), &cfg, &req.private_data()) }
            .unwrap();
    // SAFETY: the upcall only touches statics (any thread, any time).
    unsafe { qp.set_upcall(CondSleep.upcall(), std::ptr::null_mut()) };
    let mut req = req;
    let t = Instant::now();
    loop {
        let mut up = false;
        let mut bad = None;
        req.poll(&mut qp, &mut |e| match e {
            RequesterEvent::Connected(_) => up = true,
            other => bad = Some(format!("{other:?}")),
        });
        assert!(bad.is_none(), "connecting to knfsd: {bad:?}");
        if up {
            return (qp, req);
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "not connected to knfsd in 60 s"
        );
        loopback::wait_any(&CondSleep, &mut [&mut qp], 100);
    }
}

/// The AUTH_SYS credential body (`authsys_parms`, RFC 5531 appendix A): root, as the export
/// allows (`no_root_squash`).
fn authsys_body() -> Vec<u8> {
    let mut e = Encoder::new();
    e.u32(0x4b52); // stamp
    e.opaque(b"krpc-rdma-emu"); // machinename
    e.u32(0); // uid
    e.u32(0); // gid
    e.u32(0); // no gids
    e.finish().unwrap()
}

/// CLNT_CALL_MBUF; the results (the bytes past the reply header, as mbufs), or the status
/// and errors.
fn call(cl: *mut FbsdClient, proc_: u32, args: Option<&MbufChain>) -> Option<MbufChain> {
    let (st, e1, e2, rep) = clnt::call(cl, proc_, args, TIMEOUT_MS);
    assert_eq!(st, 0, "procedure {proc_}: clnt_stat {st}, {e1:?} / {e2:?}");
    rep
}

/// A call whose arguments are XDR bytes in ordinary mbufs; the results' bytes.
fn xdr_call(
    cl: *mut FbsdClient,
    kp: &KernelPages,
    proc_: u32,
    enc: &dyn Fn(&mut Encoder),
) -> Vec<u8> {
    let mut e = Encoder::new();
    enc(&mut e);
    let b = e.finish().unwrap();
    let args = (!b.is_empty()).then(|| emu_mbuf::nfs_chain(kp, &[Part::Bytes(&b, 0)]));
    call(cl, proc_, args.as_ref()).map_or(Vec::new(), |r| emu_mbuf::bytes(&r))
}

/// The calls of the module doc, through the clnt_ops table, against knfsd.
#[test]
fn clnt_ops_nfsv3_against_knfsd() {
    let Some(fx) = emu() else { return };
    if let Some(why) = knfsd_up() {
        assert!(
            std::env::var_os("KRPC_RDMA_REQUIRE_RDMA").is_none_or(|v| v != "1"),
            "knfsd cannot run, and KRPC_RDMA_REQUIRE_RDMA=1: {why}"
        );
        println!("skipped: {why}");
        return;
    }
    let ip = IpAddr::from(server_ip());
    let m = mount::mount(ip, "/export").unwrap();
    let root = NfsFh3 { data: m.root_fh };
    println!("MNT /export: root handle of {} bytes", root.data.len());

    let pages_before = emu_stats().pages_in_use;
    let mbufs_before = mbufs_live();
    let kp = KernelPages::new();
    let data = pattern(N, 31, 11, 7);
    let name = format!("clnt_knfsd.{}", std::process::id());
    let path = format!("/export/{name}");
    {
        let pages: Arc<dyn PageProvider> = Arc::new(KernelPages::new());
        let (qp, req) = connect(pages.clone());
        let cl = nfs_client(qp, req, pages, hook);
        let body = authsys_body();
        // SAFETY: live CLIENT; `body` is valid for `len` bytes (copied).
        assert_eq!(
            unsafe { krpc_emu_clnt_set_authsys(cl, body.as_ptr(), body.len() as u32) },
            1
        );

        // NULL.
        assert_empty_results(call(cl, 0, None), "NULL");

        // FSINFO: how much one READ / WRITE may carry.
        let r = xdr_call(cl, &kp, NFSPROC3_FSINFO, &|e| {
            FsinfoArgs {
                fsroot: root.clone(),
            }
            .encode(e)
        });
        let (rtmax, wtmax) = match FsinfoRes::decode(&mut Decoder::new(&r)).unwrap() {
            Nfs3Res::Ok(ok) => (ok.rtmax as usize, ok.wtmax as usize),
            Nfs3Res::Fail { status, .. } => panic!("FSINFO: {status:?}"),
        };
        println!("FSINFO: rtmax {rtmax}, wtmax {wtmax}");
        assert!(rtmax >= 4096 && wtmax >= 4096);

        // GETATTR of the root: a directory.
        let r = xdr_call(cl, &kp, NFSPROC3_GETATTR, &|e| {
            GetattrArgs {
                object: root.clone(),
            }
            .encode(e)
        });
        match GetattrRes::decode(&mut Decoder::new(&r)).unwrap() {
            Nfs3Res::Ok(ok) => assert_eq!(ok.obj_attributes.type_, Ftype3::Dir),
            Nfs3Res::Fail { status, .. } => panic!("GETATTR of the root: {status:?}"),
        }

        // CREATE.
        let r = xdr_call(cl, &kp, NFSPROC3_CREATE, &|e| {
            CreateArgs {
                where_: Diropargs3 {
                    dir: root.clone(),
                    name: Filename3(name.as_bytes().to_vec()),
                },
                how: Createhow3::Unchecked(Sattr3 {
                    mode: Some(0o644),
                    ..Sattr3::default()
                }),
            }
            .encode(e)
        });
        let fh = match CreateRes::decode(&mut Decoder::new(&r)).unwrap() {
            Nfs3Res::Ok(ok) => ok.obj.expect("CREATE returns the handle"),
            Nfs3Res::Fail { status, .. } => panic!("CREATE {name}: {status:?}"),
        };
        assert!(
            std::path::Path::new(&path).exists(),
            "{path} made by CREATE"
        );

        // WRITE, UNSTABLE, at most wtmax a call: the data in M_EXTPG mbufs behind the
        // marker, as NFS builds it (a read chunk).
        let t = Instant::now();
        let mut done = 0usize;
        let mut writes = 0;
        while done < N {
            let piece = &data[done..N.min(done + wtmax)];
            let mut e = Encoder::new();
            WriteHead {
                file: fh.clone(),
                offset: done as u64,
                count: piece.len() as u32,
                stable: StableHow::Unstable,
            }
            .encode_head(&mut e, piece.len() as u32);
            let whead = e.finish().unwrap();
            let wpad = vec![0u8; pad(piece.len())];
            let mut parts = vec![
                Part::Bytes(&whead, 0),
                Part::Marker,
                Part::Pages {
                    data: piece,
                    first_off: 0,
                    hdr: &[],
                    trl: &[],
                },
            ];
            if !wpad.is_empty() {
                parts.push(Part::Bytes(&wpad, 0));
            }
            let args = emu_mbuf::nfs_chain(&kp, &parts);
            let rep = call(cl, NFSPROC3_WRITE, Some(&args)).expect("WRITE3res");
            drop(args);
            match WriteRes::decode(&mut Decoder::new(&emu_mbuf::bytes(&rep))).unwrap() {
                Nfs3Res::Ok(ok) => {
                    assert!(ok.count > 0, "WRITE at {done}: count 0");
                    done += ok.count as usize;
                }
                Nfs3Res::Fail { status, .. } => panic!("WRITE at {done}: {status:?}"),
            }
            writes += 1;
        }
        println!("WRITE {N} bytes in {writes} calls: {:?}", t.elapsed());

        // COMMIT (the writes were UNSTABLE).
        let r = xdr_call(cl, &kp, NFSPROC3_COMMIT, &|e| {
            CommitArgs {
                file: fh.clone(),
                offset: 0,
                count: 0,
            }
            .encode(e)
        });
        assert!(
            matches!(
                CommitRes::decode(&mut Decoder::new(&r)).unwrap(),
                Nfs3Res::Ok(_)
            ),
            "COMMIT"
        );

        // READ it back, at most rtmax a call: the data comes back in M_EXTPG mbufs.
        let t = Instant::now();
        let mut back = Vec::with_capacity(N);
        let (mut reads, mut extpg_mbufs, mut inline_reads) = (0, 0, 0);
        while back.len() < N {
            let n = (N - back.len()).min(rtmax);
            let mut e = Encoder::new();
            ReadArgs {
                file: fh.clone(),
                offset: back.len() as u64,
                count: n as u32,
            }
            .encode(&mut e);
            let rargs = emu_mbuf::nfs_chain(&kp, &[Part::Bytes(&e.finish().unwrap(), 0)]);
            let rep = call(cl, NFSPROC3_READ, Some(&rargs)).expect("READ3res");
            drop(rargs);
            let got = emu_mbuf::bytes(&rep);
            let inf = emu_mbuf::info(&rep);
            let mut d = Decoder::new(&got);
            let h = ReadRes::decode_head(&mut d).unwrap();
            assert!(h.status.is_ok(), "READ at {}: {:?}", back.len(), h.status);
            let at = d.pos();
            let len = h.data_len as usize;
            assert!(len > 0 && len <= n, "READ at {}: {len} bytes", back.len());
            // The data: M_EXTPG mbufs over the write chunk's pages, the marker in front —
            // unless the whole reply fits inline (the Requester then provisions no write
            // chunk: the last 3 bytes), where it is plain XDR.
            let extpg: Vec<_> = inf.iter().filter(|x| x.flags & M_EXTPG != 0).collect();
            let extpg_bytes: usize = extpg.iter().map(|x| x.len as usize).sum();
            let mark = emu_mbuf::first_marker(&inf).map(|(_, at)| at);
            if n + REPLY_SLACK > INLINE_THRESHOLD {
                assert!(
                    extpg_bytes >= len,
                    "READ at {}: {extpg_bytes} of {len} data bytes in M_EXTPG mbufs",
                    back.len()
                );
                assert!(extpg.iter().all(|x| x.is_bridge == 1));
                assert_eq!(mark, Some(at), "the marker in front of the data");
            } else {
                inline_reads += 1;
            }
            extpg_mbufs += extpg.len();
            back.extend_from_slice(&got[at..at + len]);
            reads += 1;
        }
        println!(
            "READ {N} bytes in {reads} calls ({extpg_mbufs} M_EXTPG mbufs, {inline_reads} \
             reply inline): {:?}",
            t.elapsed()
        );
        assert!(back == data, "READ back differs from what was written");
        let on_disk = std::fs::read(&path).unwrap();
        assert!(
            on_disk == data,
            "{path} as the VM's filesystem has it differs ({} bytes)",
            on_disk.len()
        );
        println!(
            "{path}: {} bytes, equal to what was written and read back",
            on_disk.len()
        );

        // GETATTR of the file: its size.
        let r = xdr_call(cl, &kp, NFSPROC3_GETATTR, &|e| {
            GetattrArgs { object: fh.clone() }.encode(e)
        });
        match GetattrRes::decode(&mut Decoder::new(&r)).unwrap() {
            Nfs3Res::Ok(ok) => assert_eq!(ok.obj_attributes.size, N as u64),
            Nfs3Res::Fail { status, .. } => panic!("GETATTR: {status:?}"),
        }

        // REMOVE.
        let r = xdr_call(cl, &kp, NFSPROC3_REMOVE, &|e| {
            RemoveArgs {
                object: Diropargs3 {
                    dir: root.clone(),
                    name: Filename3(name.as_bytes().to_vec()),
                },
            }
            .encode(e)
        });
        assert!(
            matches!(
                RemoveRes::decode(&mut Decoder::new(&r)).unwrap(),
                Nfs3Res::Ok(_)
            ),
            "REMOVE"
        );
        assert!(!std::path::Path::new(&path).exists(), "{path} removed");
        // SAFETY: live CLIENT, not used afterwards.
        unsafe { krpc_emu_clnt_destroy(cl) };
    }
    mount::umount(ip, "/export").unwrap();
    drop(fx);
    assert_no_mbuf_left(mbufs_before);
    assert_no_page_left(pages_before);
}
