//! The NFSv3 and MOUNT v3 services end to end on the host: calls encoded with the client-side
//! argument codecs (as mbuf chains shaped like the Responder hands them up: inline XDR, or
//! `[XDR][DDP marker][page mbufs]` for WRITE and SYMLINK, or a Long Call in pages),
//! dispatched to an in-memory backend ([`common::memfs`]), replies decoded with the result
//! codecs. Checks the DDP path (WRITE data reaches the backend as the call's own pages; READ
//! data leaves as page mbufs behind a marker), READDIR(PLUS) sizing, every error path, and
//! that no input panics the dispatchers.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use std::sync::Arc;

use common::memfs::{fh, MemFs, SeenWrite, ROOT, VERF};
use common::{nfs_header, sys};
use mbuf::{Chain, HeapPageArena, Mbuf, PageFragment, PageProvider};
use nfs_proto::chain::{data_pages_from_bytes, ddp_call, ddp_data, write_data_iovecs};
use nfs_proto::mount::*;
use nfs_proto::nfs3::*;
use nfs_service::mount::*;
use nfs_service::nfsd::drc::{Begin, CallKey, ReplyCache};
use nfs_service::nfsd::{DispatchError, Dispatched, Nfs3Config, Nfs3Service};
use onc_rpc::rpc::{AcceptStat, Auth, CallHeader, Rejected, ReplyHeader};
use onc_rpc::svc::{Access, AuthPolicy, Squash, AUTH_BADCRED, AUTH_TOOWEAK};
use onc_rpc::xdr::{Decoder, Encoder};
use proptest::prelude::*;

struct T {
    svc: Nfs3Service<MemFs>,
    arena: Arc<HeapPageArena>,
    pages: Arc<dyn PageProvider>,
}

fn header(prog: u32, vers: u32, proc_: u32, cred: Auth) -> Vec<u8> {
    CallHeader::new(0x5eed_0000 + proc_, prog, vers, proc_, cred)
        .to_bytes()
        .unwrap()
}

fn call_bytes<A: Xdr>(proc_: u32, args: &A) -> Vec<u8> {
    let mut b = header(NFS_PROGRAM, NFS_V3, proc_, sys(1000));
    b.extend(args.to_bytes().unwrap());
    b
}

/// The reply's RPC header and the bytes after it (DDP data not included).
fn split_reply(d: &Dispatched) -> (ReplyHeader, Vec<u8>) {
    let end = d
        .reply
        .ddp_regions()
        .next()
        .map_or(d.reply.len(), |r| r.offset);
    let mut b = vec![0; end];
    d.reply.copydata(0, &mut b).unwrap();
    let mut dec = Decoder::new(&b);
    let h = ReplyHeader::decode(&mut dec).unwrap();
    assert_eq!(h.xid(), d.xid);
    let rest = b[dec.pos()..].to_vec();
    (h, rest)
}

impl T {
    fn new(config: Nfs3Config) -> T {
        T::with_pages(config, 8192)
    }

    fn with_pages(config: Nfs3Config, npages: usize) -> T {
        let arena = Arc::new(HeapPageArena::new(npages).unwrap());
        let pages: Arc<dyn PageProvider> = arena.clone();
        let svc = Nfs3Service::new(MemFs::new(), pages.clone(), config);
        T { svc, arena, pages }
    }

    fn fs(&self) -> &MemFs {
        self.svc.backend()
    }

    fn raw(&self, call: &Chain) -> Dispatched {
        self.svc.dispatch(call).unwrap()
    }

    /// Dispatch and decode a successful RPC reply's results with `R`.
    fn rpc<A: Xdr, R: Xdr>(&self, proc_: u32, args: &A) -> R {
        let d = self.raw(&Chain::from_bytes(&call_bytes(proc_, args)).unwrap());
        assert_eq!(d.proc_, Some(proc_));
        let (h, rest) = split_reply(&d);
        assert!(h.is_success(), "{h:?}");
        let mut dec = Decoder::new(&rest);
        let r = R::decode(&mut dec).unwrap();
        assert_eq!(dec.remaining(), 0, "trailing bytes after the results");
        r
    }

    fn accept_stat(&self, call: &[u8]) -> ReplyHeader {
        let d = self.raw(&Chain::from_bytes(call).unwrap());
        let (h, rest) = split_reply(&d);
        assert!(rest.is_empty());
        h
    }

    fn create(&self, dir: &NfsFh3, name: &str) -> NfsFh3 {
        let r: CreateRes = self.rpc(
            NFSPROC3_CREATE,
            &CreateArgs {
                where_: dirop(dir, name),
                how: Createhow3::Unchecked(Sattr3::default()),
            },
        );
        let ok = r.ok().unwrap();
        assert!(ok.obj_attributes.is_some());
        assert!(ok.dir_wcc.before.is_some() && ok.dir_wcc.after.is_some());
        ok.obj.clone().unwrap()
    }

    /// WRITE `data` at `offset` as `[XDR][marker][pages]`; returns the reply and the page
    /// pieces the call carried.
    fn write_ddp(&self, file: &NfsFh3, offset: u64, data: &[u8]) -> (WriteRes, Vec<PageFragment>) {
        let head = WriteHead {
            file: file.clone(),
            offset,
            count: data.len() as u32,
            stable: StableHow::FileSync,
        };
        let mut e = nfs_header(0x5eed_0000 + NFSPROC3_WRITE, NFSPROC3_WRITE, 1000);
        head.encode_head(&mut e, data.len() as u32);
        let pages = data_pages_from_bytes(&self.pages, data).unwrap();
        let frags: Vec<_> = pages.page_fragments_in(0..data.len()).unwrap().collect();
        let call = ddp_call(&e.finish().unwrap(), pages, &[]).unwrap();
        let d = self.raw(&call);
        let (h, rest) = split_reply(&d);
        assert!(h.is_success());
        (WriteRes::decode(&mut Decoder::new(&rest)).unwrap(), frags)
    }

    /// READ: the head, and the data taken from the page mbufs behind the marker.
    fn read(&self, file: &NfsFh3, offset: u64, count: u32) -> (ReadHead, Vec<u8>) {
        let d = self.raw(
            &Chain::from_bytes(&call_bytes(
                NFSPROC3_READ,
                &ReadArgs {
                    file: file.clone(),
                    offset,
                    count,
                },
            ))
            .unwrap(),
        );
        let (h, rest) = split_reply(&d);
        assert!(h.is_success());
        let mut dec = Decoder::new(&rest);
        let head = ReadRes::decode_head(&mut dec).unwrap();
        assert_eq!(dec.remaining(), 0);
        let items = ddp_data(&d.reply).unwrap();
        let data = match items.as_slice() {
            [] => {
                assert_eq!(head.data_len, 0, "data without a marker");
                Vec::new()
            }
            [it] => {
                assert_eq!(it.len, head.data_len as usize);
                // The region is page data only (the Responder RDMA-Writes it from the pages).
                let frags = write_data_iovecs(&d.reply, it.offset, it.len).unwrap();
                assert_eq!(frags.iter().map(|f| f.len).sum::<usize>(), it.len);
                let mut v = vec![0; it.len];
                d.reply.copydata(it.offset, &mut v).unwrap();
                // The XDR pad follows in its own mbuf; nothing after it.
                assert_eq!(d.reply.len(), it.end_with_pad());
                v
            }
            _ => panic!("more than one DDP item in a READ reply"),
        };
        (head, data)
    }
}

fn dirop(dir: &NfsFh3, name: &str) -> Diropargs3 {
    Diropargs3 {
        dir: dir.clone(),
        name: Filename3(name.as_bytes().to_vec()),
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

#[test]
fn write_pages_reach_the_backend_and_read_leaves_in_pages() {
    let t = T::new(Nfs3Config::default());
    let root = fh(ROOT);
    for (k, n) in [0usize, 1, 4095, 4096, 4097, (1 << 20) + 3]
        .into_iter()
        .enumerate()
    {
        let f = t.create(&root, &format!("f{n}"));
        let data = pattern(n, k as u8);
        let (r, frags) = t.write_ddp(&f, 0, &data);
        let ok = r.ok().expect("WRITE ok");
        assert_eq!(
            (ok.count, ok.committed, ok.verf),
            (n as u32, StableHow::FileSync, VERF)
        );
        assert_eq!(ok.file_wcc.after.as_ref().unwrap().size, n as u64);
        // No copy on the way: the backend was handed the very page pieces the call carried
        // (an empty item has no pages: it arrives as no bytes).
        let want = if n == 0 {
            SeenWrite::Bytes(0)
        } else {
            SeenWrite::Pages(frags)
        };
        assert_eq!(t.fs().last_write(), Some(want), "size {n}");
        assert_eq!(t.fs().contents(&f).unwrap(), data);
        // READ it back: at most max_data (1 MiB) per READ, data as page mbufs behind a
        // marker.
        let mut got = Vec::new();
        loop {
            let (h, d) = t.read(&f, got.len() as u64, n as u32 + 1);
            assert_eq!(h.status, Nfsstat3::OK);
            assert_eq!(h.count as usize, d.len());
            assert!(d.len() <= 1 << 20);
            got.extend(d);
            if h.eof {
                break;
            }
        }
        assert_eq!(got, data, "size {n}");
    }
    // A backend that commits less than the call asked for is at fault: SERVERFAULT, with
    // the file's wcc_data.
    t.fs()
        .downgrade
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let f = t.create(&root, "sync");
    let (r, _) = t.write_ddp(&f, 0, b"data");
    assert_eq!(r.status(), Nfsstat3::ERR_SERVERFAULT);
    let Nfs3Res::Fail { resfail, .. } = r else {
        unreachable!()
    };
    assert!(resfail.file_wcc.after.is_some());
    t.fs()
        .downgrade
        .store(false, std::sync::atomic::Ordering::Relaxed);
    // A READ past the end: empty, eof, no marker.
    let f = t.create(&root, "f1");
    let (h, d) = t.read(&f, 100, 10);
    assert!(h.eof && d.is_empty());
    // Writes at an offset leave a hole of zeros.
    let g = t.create(&root, "holey");
    t.write_ddp(&g, 8192, b"xyz");
    let c = t.fs().contents(&g).unwrap();
    assert_eq!(c.len(), 8195);
    assert!(c[..8192].iter().all(|b| *b == 0));
    drop(t.svc);
    assert_eq!(t.arena.in_use(), 0, "pages leaked");
}

#[test]
fn inline_and_long_call_writes() {
    let t = T::new(Nfs3Config::default());
    let f = t.create(&fh(ROOT), "small");
    let args = WriteArgs {
        file: f.clone(),
        offset: 0,
        count: 5,
        stable: StableHow::Unstable,
        data: b"hello".to_vec(),
    };
    let r: WriteRes = t.rpc(NFSPROC3_WRITE, &args);
    assert_eq!(r.ok().unwrap().committed, StableHow::Unstable);
    assert_eq!(t.fs().last_write(), Some(SeenWrite::Bytes(5)));
    // A Long Call: the whole message in pages, no marker; the data still reaches the
    // backend as pages of the call.
    let data = pattern(10_000, 9);
    let args = WriteArgs {
        data: data.clone(),
        count: 10_000,
        offset: 5,
        ..args
    };
    let call = data_pages_from_bytes(&t.pages, &call_bytes(NFSPROC3_WRITE, &args)).unwrap();
    let d = t.raw(&call);
    assert_eq!(d.status, Some(Nfsstat3::OK));
    match t.fs().last_write() {
        Some(SeenWrite::Pages(p)) => {
            assert_eq!(p.iter().map(|f| f.len).sum::<usize>(), 10_000);
            let call_pages: Vec<_> = call
                .page_fragments_in(0..call.len())
                .unwrap()
                .map(|f| f.addr)
                .collect();
            assert!(p.iter().all(|f| call_pages.contains(&f.addr)));
        }
        w => panic!("{w:?}"),
    }
    let mut want = b"hello".to_vec();
    want.extend(&data);
    assert_eq!(t.fs().contents(&f).unwrap(), want);
    // A read chunk that carried the XDR pad too (RFC 8166 allows it): the backend gets the
    // data's pages, not the pad.
    let mut e = nfs_header(0x5eed_0000 + NFSPROC3_WRITE, NFSPROC3_WRITE, 1000);
    WriteHead {
        file: f.clone(),
        offset: 0,
        count: 3,
        stable: StableHow::Unstable,
    }
    .encode_head(&mut e, 3);
    let mut call = Chain::from_bytes(&e.finish().unwrap()).unwrap();
    call.append_mbuf(Mbuf::ddp_marker()).unwrap();
    call.cat(data_pages_from_bytes(&t.pages, b"XYZ\0").unwrap())
        .unwrap();
    assert_eq!(t.raw(&call).status, Some(Nfsstat3::OK));
    match t.fs().last_write() {
        Some(SeenWrite::Pages(p)) => assert_eq!(p.iter().map(|f| f.len).sum::<usize>(), 3),
        w => panic!("{w:?}"),
    }
    assert_eq!(&t.fs().contents(&f).unwrap()[..4], b"XYZl");
    // count differing from the data length: GARBAGE_ARGS.
    let bad = WriteArgs { count: 4, ..args };
    let h = t.accept_stat(&call_bytes(NFSPROC3_WRITE, &bad));
    assert!(matches!(
        h,
        ReplyHeader::Accepted {
            stat: AcceptStat::GarbageArgs,
            ..
        }
    ));
}

#[test]
fn every_procedure() {
    let t = T::new(Nfs3Config::default());
    let root = fh(ROOT);
    let _: NullRes = t.rpc(NFSPROC3_NULL, &NullArgs);
    let r: GetattrRes = t.rpc(
        NFSPROC3_GETATTR,
        &GetattrArgs {
            object: root.clone(),
        },
    );
    assert_eq!(r.ok().unwrap().obj_attributes.type_, Ftype3::Dir);

    // CREATE in its three modes.
    let f = t.create(&root, "a");
    let guarded = |name: &str| CreateArgs {
        where_: dirop(&root, name),
        how: Createhow3::Guarded(Sattr3 {
            mode: Some(0o600),
            ..Sattr3::default()
        }),
    };
    let r: CreateRes = t.rpc(NFSPROC3_CREATE, &guarded("a"));
    assert_eq!(r.status(), Nfsstat3::ERR_EXIST);
    let Nfs3Res::Fail { resfail, .. } = r else {
        unreachable!()
    };
    assert!(resfail.dir_wcc.after.is_some());
    let r: CreateRes = t.rpc(NFSPROC3_CREATE, &guarded("g"));
    assert_eq!(r.ok().unwrap().obj_attributes.as_ref().unwrap().mode, 0o600);
    let excl = |v: &[u8; 8]| CreateArgs {
        where_: dirop(&root, "x"),
        how: Createhow3::Exclusive(Createverf3(*v)),
    };
    let r1: CreateRes = t.rpc(NFSPROC3_CREATE, &excl(b"12345678"));
    let r2: CreateRes = t.rpc(NFSPROC3_CREATE, &excl(b"12345678"));
    assert_eq!(
        r1.ok().unwrap().obj,
        r2.ok().unwrap().obj,
        "an exclusive retry finds its file"
    );
    let r3: CreateRes = t.rpc(NFSPROC3_CREATE, &excl(b"87654321"));
    assert_eq!(r3.status(), Nfsstat3::ERR_EXIST);

    // SETATTR with and without a guard.
    let ctime = |h: &NfsFh3| {
        let r: GetattrRes = t.rpc(NFSPROC3_GETATTR, &GetattrArgs { object: h.clone() });
        r.ok().unwrap().obj_attributes.ctime
    };
    let c0 = ctime(&f);
    let set = |guard| SetattrArgs {
        object: f.clone(),
        new_attributes: Sattr3 {
            size: Some(10),
            mode: Some(0o640),
            ..Sattr3::default()
        },
        guard,
    };
    let r: SetattrRes = t.rpc(NFSPROC3_SETATTR, &set(Some(c0)));
    let ok = r.ok().unwrap();
    assert_eq!(ok.obj_wcc.before.as_ref().unwrap().ctime, c0);
    let after = ok.obj_wcc.after.as_ref().unwrap();
    assert_eq!((after.size, after.mode), (10, 0o640));
    let r: SetattrRes = t.rpc(NFSPROC3_SETATTR, &set(Some(c0)));
    assert_eq!(r.status(), Nfsstat3::ERR_NOT_SYNC);

    // LOOKUP, ACCESS.
    let r: LookupRes = t.rpc(
        NFSPROC3_LOOKUP,
        &LookupArgs {
            what: dirop(&root, "a"),
        },
    );
    let ok = r.ok().unwrap();
    assert_eq!(ok.object, f);
    assert!(ok.obj_attributes.is_some() && ok.dir_attributes.is_some());
    let r: LookupRes = t.rpc(
        NFSPROC3_LOOKUP,
        &LookupArgs {
            what: dirop(&root, "nope"),
        },
    );
    assert_eq!(r.status(), Nfsstat3::ERR_NOENT);
    let Nfs3Res::Fail { resfail, .. } = r else {
        unreachable!()
    };
    assert!(resfail.dir_attributes.is_some());
    let r: AccessRes = t.rpc(
        NFSPROC3_ACCESS,
        &AccessArgs {
            object: f.clone(),
            access: ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXECUTE,
        },
    );
    assert_eq!(r.ok().unwrap().access, ACCESS3_READ | ACCESS3_MODIFY);

    // MKDIR, SYMLINK (inline and as a DDP item), READLINK, MKNOD.
    let r: MkdirRes = t.rpc(
        NFSPROC3_MKDIR,
        &MkdirArgs {
            where_: dirop(&root, "d"),
            attributes: Sattr3::default(),
        },
    );
    let dir = r.ok().unwrap().obj.clone().unwrap();
    let sl = SymlinkArgs {
        where_: dirop(&root, "l"),
        symlink: Symlinkdata3 {
            symlink_attributes: Sattr3::default(),
            symlink_data: Nfspath3(b"a/target".to_vec()),
        },
    };
    let r: SymlinkRes = t.rpc(NFSPROC3_SYMLINK, &sl);
    let link = r.ok().unwrap().obj.clone().unwrap();
    let r: ReadlinkRes = t.rpc(NFSPROC3_READLINK, &ReadlinkArgs { symlink: link });
    assert_eq!(r.ok().unwrap().data.0, b"a/target");
    let mut e = nfs_header(0x5eed_0000 + NFSPROC3_SYMLINK, NFSPROC3_SYMLINK, 1000);
    let path = b"../a/much/longer/target".to_vec();
    SymlinkHead {
        where_: dirop(&root, "l2"),
        symlink_attributes: Sattr3::default(),
    }
    .encode_head(&mut e, path.len() as u32);
    let call = ddp_call(
        &e.finish().unwrap(),
        data_pages_from_bytes(&t.pages, &path).unwrap(),
        &[],
    )
    .unwrap();
    assert_eq!(t.raw(&call).status, Some(Nfsstat3::OK));
    let r: LookupRes = t.rpc(
        NFSPROC3_LOOKUP,
        &LookupArgs {
            what: dirop(&root, "l2"),
        },
    );
    let r: ReadlinkRes = t.rpc(
        NFSPROC3_READLINK,
        &ReadlinkArgs {
            symlink: r.ok().unwrap().object.clone(),
        },
    );
    assert_eq!(r.ok().unwrap().data.0, path);
    let r: ReadlinkRes = t.rpc(NFSPROC3_READLINK, &ReadlinkArgs { symlink: f.clone() });
    assert_eq!(r.status(), Nfsstat3::ERR_INVAL);
    let r: MknodRes = t.rpc(
        NFSPROC3_MKNOD,
        &MknodArgs {
            where_: dirop(&dir, "p"),
            what: Mknoddata3::Fifo(Sattr3::default()),
        },
    );
    assert_eq!(
        r.ok().unwrap().obj_attributes.as_ref().unwrap().type_,
        Ftype3::Fifo
    );
    let r: MknodRes = t.rpc(
        NFSPROC3_MKNOD,
        &MknodArgs {
            where_: dirop(&dir, "q"),
            what: Mknoddata3::Other(Ftype3::Reg),
        },
    );
    assert_eq!(r.status(), Nfsstat3::ERR_BADTYPE);

    // LINK, RENAME, REMOVE, RMDIR (NOTEMPTY first).
    let r: LinkRes = t.rpc(
        NFSPROC3_LINK,
        &LinkArgs {
            file: f.clone(),
            link: dirop(&dir, "hard"),
        },
    );
    assert_eq!(r.ok().unwrap().file_attributes.as_ref().unwrap().nlink, 2);
    let r: RenameRes = t.rpc(
        NFSPROC3_RENAME,
        &RenameArgs {
            from: dirop(&root, "g"),
            to: dirop(&dir, "g2"),
        },
    );
    let ok = r.ok().unwrap();
    assert!(ok.fromdir_wcc.after.is_some() && ok.todir_wcc.after.is_some());
    let r: RenameRes = t.rpc(
        NFSPROC3_RENAME,
        &RenameArgs {
            from: dirop(&root, "g"),
            to: dirop(&dir, "g3"),
        },
    );
    assert_eq!(r.status(), Nfsstat3::ERR_NOENT);
    let r: RmdirRes = t.rpc(
        NFSPROC3_RMDIR,
        &RmdirArgs {
            object: dirop(&root, "d"),
        },
    );
    assert_eq!(r.status(), Nfsstat3::ERR_NOTEMPTY);
    for n in ["p", "hard", "g2"] {
        let r: RemoveRes = t.rpc(
            NFSPROC3_REMOVE,
            &RemoveArgs {
                object: dirop(&dir, n),
            },
        );
        assert!(r.ok().unwrap().dir_wcc.after.is_some());
    }
    let r: RmdirRes = t.rpc(
        NFSPROC3_RMDIR,
        &RmdirArgs {
            object: dirop(&root, "d"),
        },
    );
    assert_eq!(r.status(), Nfsstat3::OK);
    // The removed directory's handle is stale now; a malformed handle is a bad one.
    let r: GetattrRes = t.rpc(
        NFSPROC3_GETATTR,
        &GetattrArgs {
            object: dir.clone(),
        },
    );
    assert_eq!(r.status(), Nfsstat3::ERR_STALE);
    let r: GetattrRes = t.rpc(
        NFSPROC3_GETATTR,
        &GetattrArgs {
            object: NfsFh3 {
                data: vec![1, 2, 3],
            },
        },
    );
    assert_eq!(r.status(), Nfsstat3::ERR_BADHANDLE);
    let r: RemoveRes = t.rpc(
        NFSPROC3_REMOVE,
        &RemoveArgs {
            object: dirop(&dir, "x"),
        },
    );
    assert_eq!(r.status(), Nfsstat3::ERR_STALE);
    let r: RemoveRes = t.rpc(
        NFSPROC3_REMOVE,
        &RemoveArgs {
            object: dirop(&root, "zzz"),
        },
    );
    assert_eq!(r.status(), Nfsstat3::ERR_NOENT);
    let (h, _) = t.read(&root, 0, 10);
    assert_eq!(h.status, Nfsstat3::ERR_ISDIR);
    assert!(h.file_attributes.is_some());

    // FSSTAT, FSINFO (rtmax / wtmax clamped to the 1 MiB data limit), PATHCONF, COMMIT.
    let r: FsstatRes = t.rpc(
        NFSPROC3_FSSTAT,
        &FsstatArgs {
            fsroot: root.clone(),
        },
    );
    let ok = r.ok().unwrap();
    assert!(ok.obj_attributes.is_some() && ok.tbytes == 1 << 30);
    let r: FsinfoRes = t.rpc(
        NFSPROC3_FSINFO,
        &FsinfoArgs {
            fsroot: root.clone(),
        },
    );
    let ok = r.ok().unwrap();
    assert_eq!((ok.rtmax, ok.wtmax, ok.rtmult), (1 << 20, 1 << 20, 4096));
    let r: PathconfRes = t.rpc(
        NFSPROC3_PATHCONF,
        &PathconfArgs {
            object: root.clone(),
        },
    );
    assert_eq!(r.ok().unwrap().name_max, 255);
    let r: CommitRes = t.rpc(
        NFSPROC3_COMMIT,
        &CommitArgs {
            file: f.clone(),
            offset: 0,
            count: 0,
        },
    );
    assert_eq!(r.ok().unwrap().verf, VERF);
    let r: CommitRes = t.rpc(
        NFSPROC3_COMMIT,
        &CommitArgs {
            file: dir,
            offset: 0,
            count: 0,
        },
    );
    assert_eq!(r.status(), Nfsstat3::ERR_STALE);
}

/// Decoded READDIRPLUS / READDIR replies with the size of their `resok`.
fn readdirplus(
    t: &T,
    dir: &NfsFh3,
    cookie: u64,
    verf: Cookieverf3,
    dircount: u32,
    maxcount: u32,
) -> (ReaddirplusRes, usize) {
    let d = t.raw(
        &Chain::from_bytes(&call_bytes(
            NFSPROC3_READDIRPLUS,
            &ReaddirplusArgs {
                dir: dir.clone(),
                cookie,
                cookieverf: verf,
                dircount,
                maxcount,
            },
        ))
        .unwrap(),
    );
    let (_, rest) = split_reply(&d);
    let mut dec = Decoder::new(&rest);
    let r = ReaddirplusRes::decode(&mut dec).unwrap();
    assert_eq!(dec.remaining(), 0);
    (r, rest.len() - 4)
}

#[test]
fn readdirplus_of_5000_entries_in_pieces() {
    let t = T::new(Nfs3Config::default());
    let r: MkdirRes = t.rpc(
        NFSPROC3_MKDIR,
        &MkdirArgs {
            where_: dirop(&fh(ROOT), "big"),
            attributes: Sattr3::default(),
        },
    );
    let dir = r.ok().unwrap().obj.clone().unwrap();
    let names: Vec<String> = (0..5000)
        .map(|i| format!("file-{i:05}-{}", "x".repeat(i % 13)))
        .collect();
    for n in &names {
        t.create(&dir, n);
    }
    let (dircount, maxcount) = (8192, 32768);
    let mut seen = std::collections::BTreeMap::new();
    let (mut cookie, mut verf, mut calls) = (0, Cookieverf3::default(), 0);
    loop {
        let (r, size) = readdirplus(&t, &dir, cookie, verf, dircount, maxcount);
        calls += 1;
        assert!(
            size <= maxcount as usize,
            "resok of {size} bytes > maxcount"
        );
        let ok = r.ok().unwrap().clone();
        assert!(!ok.reply.entries.is_empty() || ok.reply.eof);
        let dirinfo: usize = ok
            .reply
            .entries
            .iter()
            .map(|e| 24 + e.name.0.len().div_ceil(4) * 4)
            .sum();
        assert!(dirinfo <= dircount as usize);
        for e in &ok.reply.entries {
            assert!(e.name_attributes.is_some());
            let h = e.name_handle.as_ref().unwrap();
            assert_eq!(fh(e.fileid), *h);
            *seen
                .entry(String::from_utf8(e.name.0.clone()).unwrap())
                .or_insert(0) += 1;
            cookie = e.cookie;
        }
        verf = ok.cookieverf;
        if ok.reply.eof {
            break;
        }
    }
    assert_eq!(seen.len(), 5000);
    assert!(seen.values().all(|n| *n == 1), "every name exactly once");
    assert!(names.iter().all(|n| seen.contains_key(n)));
    assert!(calls > 20, "{calls} calls: the listing came in pieces");

    // READDIR with a small count: same names, resok within count.
    let (mut cookie, mut verf, mut n) = (0, Cookieverf3::default(), 0);
    loop {
        let d = t.raw(
            &Chain::from_bytes(&call_bytes(
                NFSPROC3_READDIR,
                &ReaddirArgs {
                    dir: dir.clone(),
                    cookie,
                    cookieverf: verf,
                    count: 4096,
                },
            ))
            .unwrap(),
        );
        let (_, rest) = split_reply(&d);
        assert!(rest.len() - 4 <= 4096);
        let r = ReaddirRes::decode(&mut Decoder::new(&rest)).unwrap();
        let ok = r.ok().unwrap();
        n += ok.reply.entries.len();
        cookie = ok.reply.entries.last().map_or(cookie, |e| e.cookie);
        verf = ok.cookieverf;
        if ok.reply.eof {
            break;
        }
    }
    assert_eq!(n, 5000);

    // Not even one entry fits: TOOSMALL (with the directory's attributes).
    let (r, _) = readdirplus(&t, &dir, 0, Cookieverf3::default(), 8192, 200);
    assert_eq!(r.status(), Nfsstat3::ERR_TOOSMALL);
    let Nfs3Res::Fail { resfail, .. } = r else {
        unreachable!()
    };
    assert!(resfail.dir_attributes.is_some());
    let (r, _) = readdirplus(&t, &dir, 0, Cookieverf3::default(), 8192, 50);
    assert_eq!(r.status(), Nfsstat3::ERR_TOOSMALL);
    // The directory changed since the verifier was handed out: BAD_COOKIE.
    t.create(&dir, "newcomer");
    let (r, _) = readdirplus(&t, &dir, 10, verf, 8192, 32768);
    assert_eq!(r.status(), Nfsstat3::ERR_BAD_COOKIE);
    // An empty directory: OK, no entries, eof.
    let r: MkdirRes = t.rpc(
        NFSPROC3_MKDIR,
        &MkdirArgs {
            where_: dirop(&fh(ROOT), "empty"),
            attributes: Sattr3::default(),
        },
    );
    let (r, _) = readdirplus(
        &t,
        r.ok().unwrap().obj.as_ref().unwrap(),
        0,
        Cookieverf3::default(),
        100,
        200,
    );
    let ok = r.ok().unwrap();
    assert!(ok.reply.entries.is_empty() && ok.reply.eof);
}

#[test]
fn rpc_level_refusals() {
    let t = T::new(Nfs3Config {
        auth: AuthPolicy::RequireSys,
        ..Nfs3Config::default()
    });
    let stat = |call: &[u8]| match t.accept_stat(call) {
        ReplyHeader::Accepted { stat, .. } => Ok(stat),
        ReplyHeader::Denied { why, .. } => Err(why),
    };
    assert_eq!(
        stat(&header(100_005, 3, 1, sys(0))),
        Ok(AcceptStat::ProgUnavail)
    );
    assert_eq!(
        stat(&header(NFS_PROGRAM, 2, 1, sys(0))),
        Ok(AcceptStat::ProgMismatch { low: 3, high: 3 })
    );
    assert_eq!(
        stat(&header(NFS_PROGRAM, 4, 0, sys(0))),
        Ok(AcceptStat::ProgMismatch { low: 3, high: 3 })
    );
    assert_eq!(
        stat(&header(NFS_PROGRAM, 3, 22, sys(0))),
        Ok(AcceptStat::ProcUnavail)
    );
    // GETATTR without its handle, and with a handle cut short.
    assert_eq!(
        stat(&header(NFS_PROGRAM, 3, 1, sys(0))),
        Ok(AcceptStat::GarbageArgs)
    );
    let c = call_bytes(NFSPROC3_GETATTR, &GetattrArgs { object: fh(ROOT) });
    assert_eq!(stat(&c[..c.len() - 4]), Ok(AcceptStat::GarbageArgs));
    assert_eq!(
        stat(&header(NFS_PROGRAM, 3, 1, Auth::None)),
        Err(Rejected::AuthError(AUTH_TOOWEAK))
    );
    assert_eq!(
        stat(&header(NFS_PROGRAM, 3, 0, Auth::None)),
        Ok(AcceptStat::Success)
    );
    assert_eq!(
        stat(&header(
            NFS_PROGRAM,
            3,
            1,
            Auth::Other {
                flavor: 6,
                body: vec![]
            }
        )),
        Err(Rejected::AuthError(AUTH_BADCRED))
    );
    let mut v1 = c.clone();
    v1[11] = 1;
    assert_eq!(stat(&v1), Err(Rejected::RpcMismatch { low: 2, high: 2 }));
    // A reply, or a fragment too short for an xid, is not answered.
    let mut reply = c.clone();
    reply[7] = 1;
    assert_eq!(
        t.svc
            .dispatch(&Chain::from_bytes(&reply).unwrap())
            .unwrap_err(),
        DispatchError::NotACall
    );
    assert_eq!(
        t.svc
            .dispatch(&Chain::from_bytes(&c[..6]).unwrap())
            .unwrap_err(),
        DispatchError::NotACall
    );
    // A read chunk on a procedure without a DDP-eligible argument: GARBAGE_ARGS.
    let data = data_pages_from_bytes(&t.pages, &[0; 8]).unwrap();
    let mut head = call_bytes(NFSPROC3_GETATTR, &GetattrArgs { object: fh(ROOT) });
    head.extend(8u32.to_be_bytes());
    let call = ddp_call(&head, data, &[]).unwrap();
    let (h, _) = split_reply(&t.raw(&call));
    assert!(matches!(
        h,
        ReplyHeader::Accepted {
            stat: AcceptStat::GarbageArgs,
            ..
        }
    ));
    // A WRITE whose read chunk is not where its data belongs (right after the header, where
    // the file handle should be).
    let mut w = header(NFS_PROGRAM, 3, NFSPROC3_WRITE, sys(0));
    w.extend(4u32.to_be_bytes());
    let call = ddp_call(&w, data_pages_from_bytes(&t.pages, &[1; 4]).unwrap(), &[]).unwrap();
    let (h, _) = split_reply(&t.raw(&call));
    assert!(matches!(
        h,
        ReplyHeader::Accepted {
            stat: AcceptStat::GarbageArgs,
            ..
        }
    ));
}

#[test]
fn callers_own_what_they_create_and_root_is_squashed() {
    let create = |t: &T, uid: u32, name: &str| {
        let mut c = header(NFS_PROGRAM, 3, NFSPROC3_CREATE, sys(uid));
        c.extend(
            CreateArgs {
                where_: dirop(&fh(ROOT), name),
                how: Createhow3::Unchecked(Sattr3::default()),
            }
            .to_bytes()
            .unwrap(),
        );
        let d = t.raw(&Chain::from_bytes(&c).unwrap());
        let (_, rest) = split_reply(&d);
        let r = CreateRes::decode(&mut Decoder::new(&rest)).unwrap();
        let a = r.ok().unwrap().obj_attributes.clone().unwrap();
        (a.uid, a.gid)
    };
    let plain = T::new(Nfs3Config::default());
    assert_eq!(create(&plain, 0, "r"), (0, 100));
    assert_eq!(create(&plain, 1234, "u"), (1234, 100));
    let squashed = T::new(Nfs3Config {
        squash: Squash::Root {
            uid: 65534,
            gid: 65533,
        },
        ..Nfs3Config::default()
    });
    assert_eq!(create(&squashed, 0, "r"), (65534, 100));
    assert_eq!(create(&squashed, 1234, "u"), (1234, 100));
}

fn mount_call(proc_: u32, args: &[u8]) -> Vec<u8> {
    let mut b = header(MOUNT_PROGRAM, MOUNT_V3, proc_, sys(0));
    b.extend(args);
    b
}

fn dirpath(p: &str) -> Vec<u8> {
    let mut e = Encoder::new();
    e.opaque(p.as_bytes());
    e.finish().unwrap()
}

fn mount_reply(m: &MountService<MemFs>, call: &[u8], client: &[u8]) -> (ReplyHeader, Vec<u8>) {
    let r = m.dispatch(call, client).unwrap();
    let mut d = Decoder::new(&r);
    let h = ReplyHeader::decode(&mut d).unwrap();
    (h, r[d.pos()..].to_vec())
}

#[test]
fn mount_v3() {
    let m = MountService::new(MemFs::new(), AuthPolicy::RequireSys);
    let (h, rest) = mount_reply(&m, &mount_call(MOUNTPROC3_NULL, &[]), b"10.0.0.1");
    assert!(h.is_success() && rest.is_empty());
    let (_, rest) = mount_reply(
        &m,
        &mount_call(MOUNTPROC3_MNT, &dirpath("/export")),
        b"10.0.0.1",
    );
    let r = MountRes3::decode(&mut Decoder::new(&rest)).unwrap();
    assert_eq!(
        r,
        MountRes3::Ok {
            fhandle: fh(ROOT),
            auth_flavors: vec![1]
        }
    );
    let (_, rest) = mount_reply(
        &m,
        &mount_call(MOUNTPROC3_MNT, &dirpath("/export")),
        b"10.0.0.2",
    );
    assert!(matches!(
        MountRes3::decode(&mut Decoder::new(&rest)).unwrap(),
        MountRes3::Ok { .. }
    ));
    let (_, rest) = mount_reply(
        &m,
        &mount_call(MOUNTPROC3_MNT, &dirpath("/nope")),
        b"10.0.0.1",
    );
    assert_eq!(
        MountRes3::decode(&mut Decoder::new(&rest)).unwrap(),
        MountRes3::Fail(Mountstat3::ERR_NOENT)
    );
    let dump = || {
        let (_, rest) = mount_reply(&m, &mount_call(MOUNTPROC3_DUMP, &[]), b"x");
        let mut d = Decoder::new(&rest);
        let l = decode_mountlist(&mut d).unwrap();
        assert_eq!(d.remaining(), 0);
        l
    };
    assert_eq!(
        dump(),
        vec![
            (b"10.0.0.1".to_vec(), b"/export".to_vec()),
            (b"10.0.0.2".to_vec(), b"/export".to_vec())
        ]
    );
    let (h, rest) = mount_reply(
        &m,
        &mount_call(MOUNTPROC3_UMNT, &dirpath("/export")),
        b"10.0.0.1",
    );
    assert!(h.is_success() && rest.is_empty());
    assert_eq!(dump(), vec![(b"10.0.0.2".to_vec(), b"/export".to_vec())]);
    mount_reply(&m, &mount_call(MOUNTPROC3_UMNTALL, &[]), b"10.0.0.2");
    assert_eq!(dump(), vec![]);
    let (_, rest) = mount_reply(&m, &mount_call(MOUNTPROC3_EXPORT, &[]), b"x");
    let ex = decode_exports(&mut Decoder::new(&rest)).unwrap();
    assert_eq!(
        ex,
        vec![(
            b"/export".to_vec(),
            vec![b"10.0.0.0/8".to_vec(), b"vm".to_vec()]
        )]
    );
    // Refusals: garbage dirpath, unknown procedure, wrong version, AUTH_NONE.
    let (h, _) = mount_reply(&m, &mount_call(MOUNTPROC3_MNT, &[0, 0, 0, 9, 1]), b"x");
    assert!(matches!(
        h,
        ReplyHeader::Accepted {
            stat: AcceptStat::GarbageArgs,
            ..
        }
    ));
    let (h, _) = mount_reply(
        &m,
        &mount_call(MOUNTPROC3_MNT, &dirpath(&"a".repeat(MNTPATHLEN + 1))),
        b"x",
    );
    assert!(matches!(
        h,
        ReplyHeader::Accepted {
            stat: AcceptStat::GarbageArgs,
            ..
        }
    ));
    let (h, _) = mount_reply(&m, &mount_call(6, &[]), b"x");
    assert!(matches!(
        h,
        ReplyHeader::Accepted {
            stat: AcceptStat::ProcUnavail,
            ..
        }
    ));
    let (h, _) = mount_reply(&m, &header(MOUNT_PROGRAM, 1, 1, sys(0)), b"x");
    assert!(matches!(
        h,
        ReplyHeader::Accepted {
            stat: AcceptStat::ProgMismatch { low: 3, high: 3 },
            ..
        }
    ));
    let (h, _) = mount_reply(&m, &header(MOUNT_PROGRAM, 3, 1, Auth::None), b"x");
    assert!(matches!(
        h,
        ReplyHeader::Denied {
            why: Rejected::AuthError(AUTH_TOOWEAK),
            ..
        }
    ));
    // Over a chain too.
    let c = m
        .dispatch_chain(
            &Chain::from_bytes(&mount_call(MOUNTPROC3_NULL, &[])).unwrap(),
            b"x",
        )
        .unwrap();
    assert!(ReplyHeader::decode(&mut Decoder::new(&c.to_vec().unwrap()))
        .unwrap()
        .is_success());
}

#[test]
fn services_can_be_shared_between_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Nfs3Service<Arc<MemFs>>>();
    shared::<MountService<Arc<MemFs>>>();
}

#[test]
fn one_file_system_behind_both_services() {
    // Arc<B> is a Backend and Arc<E> an Exports: MNT's root handle works on the NFS side.
    let fs = Arc::new(MemFs::new());
    let arena: Arc<dyn PageProvider> = Arc::new(HeapPageArena::new(16).unwrap());
    let nfs = Nfs3Service::new(fs.clone(), arena, Nfs3Config::default());
    let m = MountService::new(&*fs, AuthPolicy::AllowNone);
    let r = m
        .dispatch(&mount_call(MOUNTPROC3_MNT, &dirpath("/export")), b"c")
        .unwrap();
    let mut d = Decoder::new(&r);
    ReplyHeader::decode(&mut d).unwrap();
    let MountRes3::Ok { fhandle, .. } = MountRes3::decode(&mut d).unwrap() else {
        panic!()
    };
    let d = nfs
        .dispatch(
            &Chain::from_bytes(&call_bytes(
                NFSPROC3_GETATTR,
                &GetattrArgs { object: fhandle },
            ))
            .unwrap(),
        )
        .unwrap();
    assert_eq!(d.status, Some(Nfsstat3::OK));
    assert_eq!(fs.mounts.lock().unwrap().len(), 1);
}

#[test]
fn retransmitted_remove_is_answered_from_the_reply_cache() {
    let t = T::new(Nfs3Config::default());
    t.create(&fh(ROOT), "victim");
    let mut cache = ReplyCache::new(64).unwrap();
    let call = Chain::from_bytes(&call_bytes(
        NFSPROC3_REMOVE,
        &RemoveArgs {
            object: dirop(&fh(ROOT), "victim"),
        },
    ))
    .unwrap();
    // As a server loop does it: begin, dispatch, finish; the retransmission (same xid, same
    // bytes, after a reconnect) is replayed, not run again.
    let serve = |cache: &mut ReplyCache| -> Vec<u8> {
        let key = CallKey::of(42, &call).unwrap();
        match cache.begin(&key) {
            Begin::New => {
                let d = t.svc.dispatch(&call).unwrap();
                cache.finish(&key, &d.reply);
                d.reply.to_vec().unwrap()
            }
            Begin::Replay(r) => r.to_vec().unwrap(),
            Begin::InProgress => panic!("in progress"),
        }
    };
    let first = serve(&mut cache);
    let again = serve(&mut cache);
    assert_eq!(first, again);
    assert_eq!(cache.replays(), 1);
    let mut d = Decoder::new(&again);
    ReplyHeader::decode(&mut d).unwrap();
    assert_eq!(RemoveRes::decode(&mut d).unwrap().status(), Nfsstat3::OK);
    // Without the cache the same call now fails: the cache is what made the replay right.
    let d = t.raw(&call);
    assert_eq!(d.status, Some(Nfsstat3::ERR_NOENT));
}

/// Valid calls of every procedure, to be mutated.
fn seeds() -> Vec<Vec<u8>> {
    let f = fh(2);
    let d = dirop(&fh(ROOT), "a");
    vec![
        call_bytes(NFSPROC3_NULL, &NullArgs),
        call_bytes(NFSPROC3_GETATTR, &GetattrArgs { object: f.clone() }),
        call_bytes(
            NFSPROC3_SETATTR,
            &SetattrArgs {
                object: f.clone(),
                new_attributes: Sattr3 {
                    size: Some(3),
                    ..Sattr3::default()
                },
                guard: None,
            },
        ),
        call_bytes(NFSPROC3_LOOKUP, &LookupArgs { what: d.clone() }),
        call_bytes(
            NFSPROC3_READ,
            &ReadArgs {
                file: f.clone(),
                offset: 0,
                count: 100,
            },
        ),
        call_bytes(
            NFSPROC3_WRITE,
            &WriteArgs {
                file: f.clone(),
                offset: 1,
                count: 3,
                stable: StableHow::Unstable,
                data: vec![1, 2, 3],
            },
        ),
        call_bytes(
            NFSPROC3_CREATE,
            &CreateArgs {
                where_: d.clone(),
                how: Createhow3::Unchecked(Sattr3::default()),
            },
        ),
        call_bytes(
            NFSPROC3_SYMLINK,
            &SymlinkArgs {
                where_: dirop(&fh(ROOT), "s"),
                symlink: Symlinkdata3 {
                    symlink_attributes: Sattr3::default(),
                    symlink_data: Nfspath3(b"t".to_vec()),
                },
            },
        ),
        call_bytes(
            NFSPROC3_RENAME,
            &RenameArgs {
                from: d.clone(),
                to: dirop(&fh(ROOT), "b"),
            },
        ),
        call_bytes(
            NFSPROC3_READDIRPLUS,
            &ReaddirplusArgs {
                dir: fh(ROOT),
                cookie: 0,
                cookieverf: Cookieverf3::default(),
                dircount: 100,
                maxcount: 1000,
            },
        ),
        call_bytes(NFSPROC3_REMOVE, &RemoveArgs { object: d }),
    ]
}

fn check_reply(call: &[u8], r: Result<Dispatched, DispatchError>) {
    match r {
        Ok(d) => {
            let b = d.reply.to_vec().unwrap();
            let h = ReplyHeader::decode(&mut Decoder::new(&b)).unwrap();
            assert_eq!(h.xid().to_be_bytes(), call[..4]);
        }
        Err(e) => assert_eq!(e, DispatchError::NotACall),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_calls_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let t = T::with_pages(Nfs3Config::default(), 16);
        t.create(&fh(ROOT), "a");
        check_reply(&bytes, t.svc.dispatch(&Chain::from_bytes(&bytes).unwrap()));
        let m = MountService::new(MemFs::new(), AuthPolicy::AllowNone);
        if let Ok(r) = m.dispatch(&bytes, b"x") {
            ReplyHeader::decode(&mut Decoder::new(&r)).unwrap();
        }
    }

    #[test]
    fn mutated_calls_never_panic(
        which in 0usize..11,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<usize>(),
        pages in any::<bool>(),
    ) {
        let t = T::with_pages(Nfs3Config::default(), 16);
        t.create(&fh(ROOT), "a");
        let mut call = seeds().swap_remove(which);
        for (at, x) in flips {
            let at = 8 + at % (call.len() - 8);
            call[at] ^= x;
        }
        call.truncate(8 + cut % (call.len() - 7));
        let chain = if pages {
            data_pages_from_bytes(&t.pages, &call).unwrap()
        } else {
            Chain::from_bytes(&call).unwrap()
        };
        check_reply(&call, t.svc.dispatch(&chain));
        drop(chain);
        drop(t.svc);
        prop_assert_eq!(t.arena.in_use(), 0);
    }

    #[test]
    fn mutated_mount_calls_never_panic(
        which in 0u32..6,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<usize>(),
    ) {
        let m = MountService::new(MemFs::new(), AuthPolicy::AllowNone);
        let args = match which {
            MOUNTPROC3_MNT | MOUNTPROC3_UMNT => dirpath("/export"),
            _ => vec![],
        };
        let mut call = mount_call(which, &args);
        for (at, x) in flips {
            let at = 8 + at % (call.len() - 8);
            call[at] ^= x;
        }
        call.truncate(8 + cut % (call.len() - 7));
        match m.dispatch(&call, b"c") {
            Ok(r) => {
                let h = ReplyHeader::decode(&mut Decoder::new(&r)).unwrap();
                prop_assert_eq!(&h.xid().to_be_bytes()[..], &call[..4]);
            }
            Err(e) => prop_assert_eq!(e, DispatchError::NotACall),
        }
    }

    /// A hostile requester picks a read chunk's position and length: a marker and pages
    /// anywhere in a (mutated) call, any number of them.
    #[test]
    fn ddp_chains_never_panic(
        which in 0usize..11,
        flip in (any::<usize>(), any::<u8>()),
        cuts in proptest::collection::vec((any::<usize>(), 0usize..9000), 1..3),
    ) {
        let t = T::with_pages(Nfs3Config::default(), 16);
        let f = t.create(&fh(ROOT), "a");
        let mut call = seeds().swap_remove(which);
        let at = 8 + flip.0 % (call.len() - 8);
        call[at] ^= flip.1;
        let mut chain = Chain::new();
        let mut from = 0;
        let mut at_list: Vec<_> = cuts.iter().map(|(at, len)| (at % (call.len() + 1), *len)).collect();
        at_list.sort();
        for (at, len) in at_list {
            chain.append(&call[from..at.max(from)]).unwrap();
            from = at.max(from);
            chain.append_mbuf(Mbuf::ddp_marker()).unwrap();
            chain.cat(data_pages_from_bytes(&t.pages, &vec![7; len]).unwrap()).unwrap();
        }
        chain.append(&call[from..]).unwrap();
        check_reply(&call, t.svc.dispatch(&chain));
        // The file is intact unless a WRITE got through.
        prop_assert!(t.fs().contents(&f).is_some());
        drop(chain);
        drop(t.svc);
        prop_assert_eq!(t.arena.in_use(), 0);
    }
}

#[test]
fn a_read_only_export_refuses_every_change_before_the_backend() {
    let t = T::new(Nfs3Config::default());
    let root = fh(ROOT);
    let f = t.create(&root, "f");
    let ro = Access {
        squash: Squash::None,
        read_only: true,
    };
    let as_ro = |proc_: u32, args: Vec<u8>| {
        let mut c = header(NFS_PROGRAM, NFS_V3, proc_, sys(1000));
        c.extend(args);
        let d = t
            .svc
            .dispatch_as(&Chain::from_bytes(&c).unwrap(), ro)
            .unwrap();
        d.status
    };
    let rofs = Some(Nfsstat3::ERR_ROFS);
    let name = |n: &str| dirop(&root, n);
    let sattr = Sattr3 {
        mode: Some(0o600),
        ..Sattr3::default()
    };
    let write = WriteArgs {
        file: f.clone(),
        offset: 0,
        count: 3,
        stable: StableHow::FileSync,
        data: b"abc".to_vec(),
    }
    .to_bytes()
    .unwrap();
    let changes: Vec<(u32, Vec<u8>)> = vec![
        (
            NFSPROC3_SETATTR,
            SetattrArgs {
                object: f.clone(),
                new_attributes: sattr.clone(),
                guard: None,
            }
            .to_bytes()
            .unwrap(),
        ),
        (NFSPROC3_WRITE, write),
        (
            NFSPROC3_CREATE,
            CreateArgs {
                where_: name("new"),
                how: Createhow3::Unchecked(Sattr3::default()),
            }
            .to_bytes()
            .unwrap(),
        ),
        (
            NFSPROC3_MKDIR,
            MkdirArgs {
                where_: name("d"),
                attributes: Sattr3::default(),
            }
            .to_bytes()
            .unwrap(),
        ),
        (NFSPROC3_REMOVE, name("f").to_bytes().unwrap()),
        (NFSPROC3_RMDIR, name("f").to_bytes().unwrap()),
        (
            NFSPROC3_RENAME,
            RenameArgs {
                from: name("f"),
                to: name("g"),
            }
            .to_bytes()
            .unwrap(),
        ),
        (
            NFSPROC3_LINK,
            LinkArgs {
                file: f.clone(),
                link: name("h"),
            }
            .to_bytes()
            .unwrap(),
        ),
    ];
    for (p, args) in changes {
        assert_eq!(as_ro(p, args), rofs, "procedure {p}");
    }
    // Nothing changed: f is still there, empty, and alone with nothing new beside it.
    let r: LookupRes = t.rpc(NFSPROC3_LOOKUP, &LookupArgs { what: name("f") });
    assert_eq!(r.ok().unwrap().obj_attributes.as_ref().unwrap().size, 0);
    for n in ["new", "d", "g", "h"] {
        let r: LookupRes = t.rpc(NFSPROC3_LOOKUP, &LookupArgs { what: name(n) });
        assert_eq!(r.status(), Nfsstat3::ERR_NOENT, "{n}");
    }
    // ACCESS grants reading, never a change; the same service read-write grants MODIFY.
    let mut c = header(NFS_PROGRAM, NFS_V3, NFSPROC3_ACCESS, sys(1000));
    let all = ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE;
    c.extend(
        AccessArgs {
            object: f.clone(),
            access: all,
        }
        .to_bytes()
        .unwrap(),
    );
    let call = Chain::from_bytes(&c).unwrap();
    let access = |d: Dispatched| {
        let (_, rest) = split_reply(&d);
        let r = AccessRes::decode(&mut Decoder::new(&rest)).unwrap();
        r.ok().unwrap().access
    };
    assert_eq!(access(t.svc.dispatch_as(&call, ro).unwrap()), ACCESS3_READ);
    assert_ne!(
        access(t.svc.dispatch_as(&call, Access::default()).unwrap()) & ACCESS3_MODIFY,
        0
    );
}

#[test]
fn reply_data_bytes_covers_the_pages_a_read_reply_takes() {
    let t = T::new(Nfs3Config::default());
    let root = fh(ROOT);
    let f = t.create(&root, "big");
    let data = pattern((3 << 20) + 5, 9);
    t.write_ddp(&f, 0, &data);
    let max = Nfs3Config::default().max_data as usize;
    for (offset, count) in [
        (0u64, 0u32),
        (0, 1),
        (0, 4096),
        (1, 4097),
        (5000, 1 << 20),
        (0, u32::MAX),
        ((3 << 20) + 1, 1 << 20),
    ] {
        let args = ReadArgs {
            file: f.clone(),
            offset,
            count,
        };
        let call = Chain::from_bytes(&call_bytes(NFSPROC3_READ, &args)).unwrap();
        let need = t.svc.reply_data_bytes(&call);
        assert_eq!(need, (count as usize).min(max), "count {count}");
        // What the dispatched reply holds of the page provider is within it (whole pages).
        let before = t.arena.in_use();
        let d = t.svc.dispatch(&call).unwrap();
        let held = (t.arena.in_use() - before) * mbuf::PAGE_SIZE;
        assert!(
            held <= need.div_ceil(mbuf::PAGE_SIZE) * mbuf::PAGE_SIZE,
            "offset {offset} count {count}: {held} bytes held, {need} admitted"
        );
        if offset as usize + need <= data.len() {
            // Not cut short by the end of the file: the bound is met exactly.
            assert_eq!(held, need.div_ceil(mbuf::PAGE_SIZE) * mbuf::PAGE_SIZE);
        }
        drop(d);
        assert_eq!(t.arena.in_use(), before);
    }
    // Any other call, and a READ too short or malformed to tell: nothing.
    let read = call_bytes(
        NFSPROC3_READ,
        &ReadArgs {
            file: f.clone(),
            offset: 0,
            count: 4096,
        },
    );
    let get = call_bytes(NFSPROC3_GETATTR, &GetattrArgs { object: f.clone() });
    assert_eq!(t.svc.reply_data_bytes(&Chain::from_bytes(&get).unwrap()), 0);
    for cut in [0, 4, 20, 24, read.len() - 1] {
        let c = Chain::from_bytes(&read[..cut]).unwrap();
        assert_eq!(t.svc.reply_data_bytes(&c), 0, "cut at {cut}");
    }
    let mut v2 = read.clone();
    v2[16..20].copy_from_slice(&2u32.to_be_bytes());
    assert_eq!(t.svc.reply_data_bytes(&Chain::from_bytes(&v2).unwrap()), 0);
    // A credential body longer than RFC 5531 allows.
    let mut long = read.clone();
    long[28..32].copy_from_slice(&401u32.to_be_bytes());
    assert_eq!(
        t.svc.reply_data_bytes(&Chain::from_bytes(&long).unwrap()),
        0
    );
}
