//! The small-file workload of issue 13's `tar x` row on the host, without a transport: per
//! file the calls the Linux 6.1 client makes for `tar x` (counted in the VM with
//! `/proc/self/mountstats`: a CREATE, a WRITE and four SETATTRs per file), each through
//! [`serve_call`] (the reply cache, `Nfs3Service::dispatch`, `LocalFs`) as the server's
//! connection loop runs it. Checks every file's bytes and owner afterwards, and prints the
//! mean service time per procedure (`cargo test --release -p krpc-rdma-nfsd --test
//! small_files -- --nocapture`; under `valgrind --tool=callgrind` for instruction counts).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use std::os::unix::fs::MetadataExt;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use krpc_rdma_nfsd::exports::Clients;
use krpc_rdma_nfsd::server::{serve_call, CacheLock, ConnStats, Shared, DRC_CAPACITY};
use krpc_rdma_nfsd::LocalFs;
use mbuf::{Chain, HeapPageArena, PageProvider};
use nfs_proto::nfs3::*;
use nfs_service::lock::Lock;
use nfs_service::nfsd::drc::ReplyCache;
use nfs_service::nfsd::{Backend, Nfs3Config, Nfs3Service};
use onc_rpc::rpc::{Auth, AuthSys};
use onc_rpc::svc::{Access, Cred};
use onc_rpc::xdr::Encoder;

static STOP: AtomicBool = AtomicBool::new(false);

fn call(xid: u32, proc_: u32, uid: u32, gid: u32, args: impl FnOnce(&mut Encoder)) -> Chain {
    let cred = Auth::Sys(AuthSys::new(1, b"client", uid, gid, &[gid]));
    let mut e = call_encoder(xid, proc_, cred);
    args(&mut e);
    Chain::from_bytes(&e.finish().unwrap()).unwrap()
}

fn setattr(object: &NfsFh3, new_attributes: Sattr3) -> impl FnOnce(&mut Encoder) + '_ {
    move |e| {
        SetattrArgs {
            object: object.clone(),
            new_attributes,
            guard: None,
        }
        .encode(e)
    }
}

#[test]
fn tar_x_calls_through_the_reply_cache_and_localfs() {
    let dir = std::env::temp_dir().join(format!("nfsd-small-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let me = std::fs::metadata(&dir).unwrap();
    let (uid, gid) = (me.uid(), me.gid());
    let fs = LocalFs::new(&dir).unwrap();
    let root = fs.root_fh();
    let pages: Arc<dyn PageProvider> = Arc::new(HeapPageArena::new(64).unwrap());
    let sh = Shared {
        svc: Nfs3Service::new(fs, pages, Nfs3Config::default()),
        drc: CacheLock::new(ReplyCache::new(DRC_CAPACITY).unwrap()).unwrap(),
        clients: Clients::parse("*(rw,no_root_squash)").unwrap(),
        stop: &STOP,
    };
    let files: u32 = std::env::var("SMALL_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let mut st = ConnStats::default();
    let mut xid = 0u32;
    let mut run = |st: &mut ConnStats, proc_: u32, args: &dyn Fn(&mut Encoder)| {
        xid += 1;
        let c = call(xid, proc_, uid, gid, args);
        let t = Instant::now();
        let (reply, p) = serve_call(&sh, 1, Access::default(), &c, st);
        let built = Instant::now();
        assert!(reply.is_some(), "no reply to proc {proc_}");
        st.time.call(p, t, built, built);
    };
    let start = Instant::now();
    for i in 0..files {
        let name = format!("f{i}");
        let data: Vec<u8> = (0..700 + (i as usize * 13) % 3000)
            .map(|k| (k as u32 ^ i) as u8)
            .collect();
        let where_ = Diropargs3 {
            dir: root.clone(),
            name: Filename3(name.clone().into_bytes()),
        };
        // open(O_CREAT | O_EXCL): EXCLUSIVE create, then the attributes by SETATTR.
        run(&mut st, NFSPROC3_CREATE, &|e| {
            CreateArgs {
                where_: where_.clone(),
                how: Createhow3::Exclusive(Createverf3(
                    i.to_be_bytes().repeat(2).try_into().unwrap(),
                )),
            }
            .encode(e)
        });
        let me = Cred {
            uid,
            gid,
            ..Cred::none()
        };
        let fh = sh
            .svc
            .backend()
            .lookup(&me, &root, name.as_bytes())
            .unwrap();
        let mode = Sattr3 {
            mode: Some(0o644),
            ..Sattr3::default()
        };
        run(&mut st, NFSPROC3_SETATTR, &|e| {
            setattr(&fh, mode.clone())(e)
        });
        // close(): the one dirty page as a FILE_SYNC WRITE, inline.
        run(&mut st, NFSPROC3_WRITE, &|e| {
            WriteHead {
                file: fh.clone(),
                offset: 0,
                count: data.len() as u32,
                stable: StableHow::FileSync,
            }
            .encode_head(e, data.len() as u32);
            e.opaque_fixed(&data);
        });
        // fchown, fchmod, utimens.
        let own = Sattr3 {
            uid: Some(uid),
            gid: Some(gid),
            ..Sattr3::default()
        };
        run(&mut st, NFSPROC3_SETATTR, &|e| setattr(&fh, own.clone())(e));
        run(&mut st, NFSPROC3_SETATTR, &|e| {
            setattr(&fh, mode.clone())(e)
        });
        let t = Nfstime3 {
            seconds: 1_700_000_000 + i,
            nseconds: 0,
        };
        let times = Sattr3 {
            atime: SetTime::ClientTime(t),
            mtime: SetTime::ClientTime(t),
            ..Sattr3::default()
        };
        run(&mut st, NFSPROC3_SETATTR, &|e| {
            setattr(&fh, times.clone())(e)
        });
    }
    let took = start.elapsed();
    println!(
        "{files} files in {:.3} s: {}",
        took.as_secs_f64(),
        st.time.summary()
    );
    assert_eq!(st.nfs_errors, 0, "{}", st.summary());
    for i in 0..files {
        let p = dir.join(format!("f{i}"));
        let want: Vec<u8> = (0..700 + (i as usize * 13) % 3000)
            .map(|k| (k as u32 ^ i) as u8)
            .collect();
        assert_eq!(std::fs::read(&p).unwrap(), want);
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!((m.mode() & 0o7777, m.uid(), m.gid()), (0o644, uid, gid));
        assert_eq!(m.mtime(), 1_700_000_000 + i64::from(i));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
