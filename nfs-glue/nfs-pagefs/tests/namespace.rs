//! The namespace: handles, lookup, create modes, directories and their cookies, rename,
//! link, remove, rmdir, link counts, attributes and permissions.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use std::collections::BTreeSet;

use common::*;
use nfs_proto::nfs3::{
    Createhow3, Createverf3, Devicedata3, Ftype3, Mknoddata3, NfsFh3, Nfstime3, Sattr3, SetTime,
    Specdata3, ACCESS3_DELETE, ACCESS3_EXECUTE, ACCESS3_EXTEND, ACCESS3_LOOKUP, ACCESS3_MODIFY,
    ACCESS3_READ,
};
use nfs_service::nfsd::{Backend, NfsError};

fn mkdir(r: &Rig, dir: &NfsFh3, name: &[u8]) -> NfsFh3 {
    r.fs.mkdir(&root(), dir, name, &mode(0o755)).unwrap()
}

fn nlink(r: &Rig, fh: &NfsFh3) -> u32 {
    r.fs.getattr(&root(), fh).unwrap().nlink
}

#[test]
fn handles_of_another_shape_are_bad_and_of_another_instance_or_gone_are_stale() {
    let r = rig();
    let root_fh = r.fs.root_fh();
    assert_eq!(root_fh.data.len(), 16);
    let a = r.fs.getattr(&root(), &root_fh).unwrap();
    assert_eq!(
        (a.type_, a.mode, a.uid, a.gid, a.nlink),
        (Ftype3::Dir, 0o755, 0, 0, 2)
    );
    let bad = |d: Vec<u8>| r.fs.getattr(&root(), &NfsFh3 { data: d }).unwrap_err();
    assert_eq!(bad(vec![]), NfsError::BadHandle);
    assert_eq!(bad(root_fh.data[..15].to_vec()), NfsError::BadHandle);
    let mut long = root_fh.data.clone();
    long.push(0);
    assert_eq!(bad(long), NfsError::BadHandle);
    let mut magic = root_fh.data.clone();
    magic[0] ^= 1;
    assert_eq!(bad(magic), NfsError::BadHandle);
    let mut inst = root_fh.data.clone();
    inst[7] ^= 1;
    assert_eq!(bad(inst), NfsError::Stale);
    let mut unknown = root_fh.data.clone();
    unknown[15] = 99;
    assert_eq!(bad(unknown), NfsError::Stale);
    // Fileids are not reused: a removed file's handle stays stale after new creations.
    let f = create(&r.fs, &root(), &root_fh, b"f");
    r.fs.remove(&root(), &root_fh, b"f").unwrap();
    let g = create(&r.fs, &root(), &root_fh, b"f");
    assert_ne!(f, g);
    assert_eq!(r.fs.getattr(&root(), &f).unwrap_err(), NfsError::Stale);
    assert_eq!(
        r.fs.read(&root(), &f, 0, 1, &r.p).unwrap_err(),
        NfsError::Stale
    );
}

#[test]
fn lookup_finds_names_dot_and_dotdot() {
    let r = rig();
    let rt = r.fs.root_fh();
    let d = mkdir(&r, &rt, b"d");
    let f = create(&r.fs, &root(), &d, b"f");
    assert_eq!(r.fs.lookup(&root(), &rt, b"d").unwrap(), d);
    assert_eq!(r.fs.lookup(&root(), &d, b"f").unwrap(), f);
    assert_eq!(r.fs.lookup(&root(), &d, b".").unwrap(), d);
    assert_eq!(r.fs.lookup(&root(), &d, b"..").unwrap(), rt);
    assert_eq!(r.fs.lookup(&root(), &rt, b"..").unwrap(), rt);
    assert_eq!(
        r.fs.lookup(&root(), &rt, b"nope").unwrap_err(),
        NfsError::NoEnt
    );
    assert_eq!(
        r.fs.lookup(&root(), &f, b"x").unwrap_err(),
        NfsError::NotDir
    );
    assert_eq!(
        r.fs.lookup(&root(), &rt, &[b'a'; 256]).unwrap_err(),
        NfsError::NameTooLong
    );
}

#[test]
fn bad_names_are_refused() {
    let r = rig();
    let rt = r.fs.root_fh();
    let how = Createhow3::Unchecked(Sattr3::default());
    for n in [&b""[..], b".", b"..", b"a/b", b"a\0b"] {
        assert_eq!(
            r.fs.create(&root(), &rt, n, &how).unwrap_err(),
            NfsError::Inval,
            "{n:?}"
        );
        assert_eq!(
            r.fs.mkdir(&root(), &rt, n, &Sattr3::default()).unwrap_err(),
            NfsError::Inval
        );
    }
    assert_eq!(
        r.fs.create(&root(), &rt, &[b'x'; 256], &how).unwrap_err(),
        NfsError::NameTooLong
    );
    r.fs.create(&root(), &rt, &[b'x'; 255], &how).unwrap();
}

#[test]
fn create_unchecked_guarded_and_exclusive_retry() {
    let r = rig();
    let rt = r.fs.root_fh();
    let v = Createverf3(*b"verifier");
    let f =
        r.fs.create(&root(), &rt, b"x", &Createhow3::Exclusive(v))
            .unwrap();
    // A retry with the same verifier is the same file; another verifier is EXIST.
    assert_eq!(
        r.fs.create(&root(), &rt, b"x", &Createhow3::Exclusive(v))
            .unwrap(),
        f
    );
    assert_eq!(
        r.fs.create(
            &root(),
            &rt,
            b"x",
            &Createhow3::Exclusive(Createverf3(*b"other!!!"))
        )
        .unwrap_err(),
        NfsError::Exist
    );
    assert_eq!(
        r.fs.create(&root(), &rt, b"x", &Createhow3::Guarded(Sattr3::default()))
            .unwrap_err(),
        NfsError::Exist
    );
    // UNCHECKED on an existing file keeps it and applies the attributes (size 0 truncates).
    write_bytes(&r.fs, &root(), &f, 0, b"data").unwrap();
    let s = Sattr3 {
        size: Some(0),
        mode: Some(0o600),
        ..Sattr3::default()
    };
    assert_eq!(
        r.fs.create(&root(), &rt, b"x", &Createhow3::Unchecked(s))
            .unwrap(),
        f
    );
    let a = r.fs.getattr(&root(), &f).unwrap();
    assert_eq!(a.size, 0);
    // Guarded new file with a mode and a size.
    let g =
        r.fs.create(
            &user(5, 6),
            &mkdir_open(&r),
            b"g",
            &Createhow3::Guarded(Sattr3 {
                mode: Some(0o640),
                size: Some(10),
                ..Sattr3::default()
            }),
        )
        .unwrap();
    let a = r.fs.getattr(&root(), &g).unwrap();
    assert_eq!(
        (a.mode, a.uid, a.gid, a.size, a.nlink),
        (0o640, 5, 6, 10, 1)
    );
    // UNCHECKED on an existing directory is EXIST.
    mkdir(&r, &rt, b"dir");
    assert_eq!(
        r.fs.create(
            &root(),
            &rt,
            b"dir",
            &Createhow3::Unchecked(Sattr3::default())
        )
        .unwrap_err(),
        NfsError::Exist
    );
}

/// A world-writable directory.
fn mkdir_open(r: &Rig) -> NfsFh3 {
    match r.fs.lookup(&root(), &r.fs.root_fh(), b"open") {
        Ok(fh) => fh,
        Err(_) => {
            r.fs.mkdir(&root(), &r.fs.root_fh(), b"open", &mode(0o777))
                .unwrap()
        }
    }
}

#[test]
fn readdir_of_5000_entries_resumes_and_lists_each_once() {
    let r = rig();
    let rt = r.fs.root_fh();
    let d = mkdir(&r, &rt, b"big");
    let mut names = BTreeSet::new();
    for i in 0..5000 {
        let n = format!("file-{i:05}").into_bytes();
        create(&r.fs, &root(), &d, &n);
        names.insert(n);
    }
    // Remove some in the middle: cookies of the others stay valid.
    for i in (0..5000).step_by(7) {
        let n = format!("file-{i:05}").into_bytes();
        r.fs.remove(&root(), &d, &n).unwrap();
        names.remove(&n);
    }
    for plus in [false, true] {
        let mut cookie = 0;
        let mut verf = Default::default();
        let mut seen = Vec::new();
        let mut calls = 0;
        loop {
            let mut sink = Collect::new(plus, 37);
            let end = r.fs.readdir(&root(), &d, cookie, verf, &mut sink).unwrap();
            calls += 1;
            for (c, name, fileid, has_attr, has_fh) in &sink.got {
                assert!(*c > cookie);
                assert_eq!((*has_attr, *has_fh), (plus, plus));
                if plus {
                    let fh = r.fs.lookup(&root(), &d, name).unwrap();
                    assert_eq!(r.fs.getattr(&root(), &fh).unwrap().fileid, *fileid);
                }
                seen.push(name.clone());
            }
            if let Some(last) = sink.got.last() {
                cookie = last.0;
            }
            verf = end.verf;
            if end.eof {
                break;
            }
            assert!(calls < 1000);
        }
        assert_eq!(&seen[..2], &[b".".to_vec(), b"..".to_vec()]);
        let rest: Vec<Vec<u8>> = seen[2..].to_vec();
        let set: BTreeSet<Vec<u8>> = rest.iter().cloned().collect();
        assert_eq!(set.len(), rest.len(), "an entry listed twice");
        assert_eq!(set, names);
    }
    // A sink that takes nothing: not eof, no entries.
    let mut none = Collect::new(false, 0);
    assert!(
        !r.fs
            .readdir(&root(), &d, 0, Default::default(), &mut none)
            .unwrap()
            .eof
    );
    // A cookie never handed out is BAD_COOKIE.
    let mut s = Collect::new(false, 10);
    assert_eq!(
        r.fs.readdir(&root(), &d, 1 << 40, Default::default(), &mut s)
            .unwrap_err(),
        NfsError::BadCookie
    );
}

#[test]
fn readdir_after_dot_and_dotdot_cookies() {
    let r = rig();
    let rt = r.fs.root_fh();
    create(&r.fs, &root(), &rt, b"a");
    let list = |cookie| {
        let mut s = Collect::new(true, 100);
        let end =
            r.fs.readdir(&root(), &rt, cookie, Default::default(), &mut s)
                .unwrap();
        assert!(end.eof);
        s.got.into_iter().map(|e| (e.0, e.1)).collect::<Vec<_>>()
    };
    assert_eq!(
        list(0),
        vec![(1, b".".to_vec()), (2, b"..".to_vec()), (3, b"a".to_vec())]
    );
    assert_eq!(list(1), vec![(2, b"..".to_vec()), (3, b"a".to_vec())]);
    assert_eq!(list(2), vec![(3, b"a".to_vec())]);
    assert_eq!(list(3), vec![]);
}

#[test]
fn rename_semantics() {
    let r = rig();
    let rt = r.fs.root_fh();
    let a = mkdir(&r, &rt, b"a");
    let b = mkdir(&r, &a, b"b");
    let f = create(&r.fs, &root(), &rt, b"f");
    let g = create(&r.fs, &root(), &rt, b"g");
    write_bytes(&r.fs, &root(), &g, 0, b"gg").unwrap();
    // A directory into its own subtree.
    assert_eq!(
        r.fs.rename(&root(), &rt, b"a", &b, b"x").unwrap_err(),
        NfsError::Inval
    );
    assert_eq!(
        r.fs.rename(&root(), &rt, b"a", &a, b"x").unwrap_err(),
        NfsError::Inval
    );
    // Same name: nothing happens.
    r.fs.rename(&root(), &rt, b"f", &rt, b"f").unwrap();
    assert_eq!(r.fs.lookup(&root(), &rt, b"f").unwrap(), f);
    // A file over a file: the target is replaced (and freed).
    r.fs.rename(&root(), &rt, b"f", &rt, b"g").unwrap();
    assert_eq!(r.fs.lookup(&root(), &rt, b"g").unwrap(), f);
    assert_eq!(
        r.fs.lookup(&root(), &rt, b"f").unwrap_err(),
        NfsError::NoEnt
    );
    assert_eq!(r.fs.getattr(&root(), &g).unwrap_err(), NfsError::Stale);
    assert_eq!(r.fs.stats().pages_held, 0);
    // Kind mismatches.
    assert_eq!(
        r.fs.rename(&root(), &rt, b"g", &rt, b"a").unwrap_err(),
        NfsError::IsDir
    );
    assert_eq!(
        r.fs.rename(&root(), &a, b"b", &rt, b"g").unwrap_err(),
        NfsError::NotDir
    );
    // A directory over a non-empty directory; over an empty one.
    let c = mkdir(&r, &rt, b"c");
    create(&r.fs, &root(), &a, b"inside");
    assert_eq!(
        r.fs.rename(&root(), &rt, b"c", &rt, b"a").unwrap_err(),
        NfsError::NotEmpty
    );
    let e = mkdir(&r, &rt, b"e");
    assert_eq!(nlink(&r, &rt), 2 + 3);
    r.fs.rename(&root(), &rt, b"c", &rt, b"e").unwrap();
    assert_eq!(r.fs.lookup(&root(), &rt, b"e").unwrap(), c);
    assert_eq!(r.fs.getattr(&root(), &e).unwrap_err(), NfsError::Stale);
    assert_eq!(nlink(&r, &rt), 2 + 2);
    // A directory to another parent: link counts and "..".
    r.fs.rename(&root(), &a, b"b", &rt, b"b2").unwrap();
    assert_eq!(nlink(&r, &a), 2);
    assert_eq!(nlink(&r, &rt), 2 + 3);
    assert_eq!(r.fs.lookup(&root(), &b, b"..").unwrap(), rt);
    // Two links of one file: nothing happens, both stay.
    r.fs.link(&root(), &f, &rt, b"f2").unwrap();
    r.fs.rename(&root(), &rt, b"g", &rt, b"f2").unwrap();
    assert_eq!(r.fs.lookup(&root(), &rt, b"g").unwrap(), f);
    assert_eq!(r.fs.lookup(&root(), &rt, b"f2").unwrap(), f);
    assert_eq!(nlink(&r, &f), 2);
    // Missing source; "." and "..".
    assert_eq!(
        r.fs.rename(&root(), &rt, b"zz", &rt, b"y").unwrap_err(),
        NfsError::NoEnt
    );
    assert_eq!(
        r.fs.rename(&root(), &a, b"..", &rt, b"y").unwrap_err(),
        NfsError::Inval
    );
    assert_eq!(
        r.fs.rename(&root(), &rt, b"g", &rt, b".").unwrap_err(),
        NfsError::Inval
    );
}

#[test]
fn link_remove_rmdir_and_link_counts() {
    let r = rig();
    let rt = r.fs.root_fh();
    let d = mkdir(&r, &rt, b"d");
    assert_eq!(nlink(&r, &d), 2);
    assert_eq!(nlink(&r, &rt), 3);
    let f = create(&r.fs, &root(), &d, b"f");
    r.fs.link(&root(), &f, &rt, b"f-link").unwrap();
    assert_eq!(nlink(&r, &f), 2);
    assert_eq!(
        r.fs.link(&root(), &f, &rt, b"f-link").unwrap_err(),
        NfsError::Exist
    );
    assert_eq!(
        r.fs.link(&root(), &d, &rt, b"d-link").unwrap_err(),
        NfsError::IsDir
    );
    assert_eq!(
        r.fs.link(&root(), &f, &f, b"x").unwrap_err(),
        NfsError::NotDir
    );
    assert_eq!(
        r.fs.rmdir(&root(), &rt, b"d").unwrap_err(),
        NfsError::NotEmpty
    );
    assert_eq!(
        r.fs.remove(&root(), &rt, b"d").unwrap_err(),
        NfsError::IsDir
    );
    assert_eq!(
        r.fs.rmdir(&root(), &rt, b"f-link").unwrap_err(),
        NfsError::NotDir
    );
    assert_eq!(
        r.fs.remove(&root(), &rt, b"nope").unwrap_err(),
        NfsError::NoEnt
    );
    assert_eq!(r.fs.rmdir(&root(), &d, b".").unwrap_err(), NfsError::Inval);
    assert_eq!(r.fs.rmdir(&root(), &d, b"..").unwrap_err(), NfsError::Inval);
    r.fs.remove(&root(), &d, b"f").unwrap();
    assert_eq!(nlink(&r, &f), 1);
    r.fs.rmdir(&root(), &rt, b"d").unwrap();
    assert_eq!(nlink(&r, &rt), 2);
    assert_eq!(r.fs.getattr(&root(), &d).unwrap_err(), NfsError::Stale);
    r.fs.remove(&root(), &rt, b"f-link").unwrap();
    assert_eq!(r.fs.stats().nodes, 1);
    // Every entry charge came back.
    let fresh = rig();
    assert_eq!(r.fs.stats().bytes_used, fresh.fs.stats().bytes_used);
}

#[test]
fn namespace_changes_update_parent_times() {
    let r = rig();
    let rt = r.fs.root_fh();
    let t0 = r.fs.getattr(&root(), &rt).unwrap();
    let f = create(&r.fs, &root(), &rt, b"f");
    let t1 = r.fs.getattr(&root(), &rt).unwrap();
    assert!(t1.mtime.seconds > t0.mtime.seconds);
    assert_eq!(t1.mtime, t1.ctime);
    let before = r.fs.getattr(&root(), &f).unwrap();
    write_bytes(&r.fs, &root(), &f, 0, b"x").unwrap();
    let after = r.fs.getattr(&root(), &f).unwrap();
    assert!(after.mtime.seconds > before.mtime.seconds);
    r.fs.remove(&root(), &rt, b"f").unwrap();
    assert!(r.fs.getattr(&root(), &rt).unwrap().mtime.seconds > t1.mtime.seconds);
}

#[test]
fn symlink_mknod_and_readlink() {
    let r = rig();
    let rt = r.fs.root_fh();
    let l =
        r.fs.symlink(&root(), &rt, b"l", &Sattr3::default(), b"/some/where")
            .unwrap();
    let a = r.fs.getattr(&root(), &l).unwrap();
    assert_eq!((a.type_, a.size), (Ftype3::Lnk, 11));
    assert_eq!(r.fs.readlink(&root(), &l).unwrap().0, b"/some/where");
    assert_eq!(r.fs.readlink(&root(), &rt).unwrap_err(), NfsError::Inval);
    assert_eq!(
        r.fs.symlink(&root(), &rt, b"l2", &Sattr3::default(), &[b'a'; 4097])
            .unwrap_err(),
        NfsError::NameTooLong
    );
    assert_eq!(
        r.fs.read(&root(), &l, 0, 1, &r.p).unwrap_err(),
        NfsError::Inval
    );
    assert_eq!(
        r.fs.read(&root(), &rt, 0, 1, &r.p).unwrap_err(),
        NfsError::IsDir
    );
    assert_eq!(
        write_bytes(&r.fs, &root(), &rt, 0, b"x").unwrap_err(),
        NfsError::IsDir
    );
    let p =
        r.fs.mknod(&root(), &rt, b"p", &Mknoddata3::Fifo(mode(0o600)))
            .unwrap();
    assert_eq!(r.fs.getattr(&root(), &p).unwrap().type_, Ftype3::Fifo);
    let dev = Mknoddata3::Chr(Devicedata3 {
        dev_attributes: mode(0o600),
        spec: Specdata3 {
            specdata1: 1,
            specdata2: 3,
        },
    });
    assert_eq!(
        r.fs.mknod(&user(1, 1), &mkdir_open(&r), b"c", &dev)
            .unwrap_err(),
        NfsError::Perm
    );
    let c = r.fs.mknod(&root(), &rt, b"c", &dev).unwrap();
    let a = r.fs.getattr(&root(), &c).unwrap();
    assert_eq!(
        (a.type_, a.rdev.specdata1, a.rdev.specdata2),
        (Ftype3::Chr, 1, 3)
    );
    assert_eq!(
        r.fs.mknod(&root(), &rt, b"o", &Mknoddata3::Other(Ftype3::Reg))
            .unwrap_err(),
        NfsError::BadType
    );
}

#[test]
fn permissions_follow_the_mode_bits_and_root_bypasses_them() {
    let r = rig();
    let rt = r.fs.root_fh();
    let open = mkdir_open(&r);
    let (alice, bob) = (user(100, 100), user(200, 200));
    let f = create(&r.fs, &alice, &open, b"alice-file");
    assert_eq!(r.fs.getattr(&root(), &f).unwrap().mode, 0o644);
    write_bytes(&r.fs, &alice, &f, 0, b"mine").unwrap();
    // Bob reads, cannot write or truncate; root can.
    assert_eq!(read(&r, &bob, &f, 0, 10).unwrap().0, b"mine");
    assert_eq!(
        write_bytes(&r.fs, &bob, &f, 0, b"his").unwrap_err(),
        NfsError::Acces
    );
    let trunc = Sattr3 {
        size: Some(0),
        ..Sattr3::default()
    };
    assert_eq!(
        r.fs.setattr(&bob, &f, &trunc, None).unwrap_err(),
        NfsError::Acces
    );
    write_bytes(&r.fs, &root(), &f, 0, b"ROOT").unwrap();
    // Mode and owner changes.
    assert_eq!(
        r.fs.setattr(&bob, &f, &mode(0o666), None).unwrap_err(),
        NfsError::Perm
    );
    r.fs.setattr(&alice, &f, &mode(0o600), None).unwrap();
    assert_eq!(read(&r, &bob, &f, 0, 10).unwrap_err(), NfsError::Acces);
    assert_eq!(read(&r, &root(), &f, 0, 10).unwrap().0, b"ROOT");
    let chown = Sattr3 {
        uid: Some(200),
        ..Sattr3::default()
    };
    assert_eq!(
        r.fs.setattr(&alice, &f, &chown, None).unwrap_err(),
        NfsError::Perm
    );
    r.fs.setattr(&root(), &f, &chown, None).unwrap();
    assert_eq!(r.fs.getattr(&root(), &f).unwrap().uid, 200);
    // A group change to a group the owner is in.
    let groups = [300];
    let bob_in_300 = onc_rpc::svc::Cred {
        gids: &groups,
        ..user(200, 200)
    };
    let chgrp = Sattr3 {
        gid: Some(300),
        ..Sattr3::default()
    };
    assert_eq!(
        r.fs.setattr(&bob, &f, &chgrp, None).unwrap_err(),
        NfsError::Perm
    );
    r.fs.setattr(&bob_in_300, &f, &chgrp, None).unwrap();
    assert_eq!(r.fs.getattr(&root(), &f).unwrap().gid, 300);
    // Directory permissions: no write on the root for alice; no search on a 0700 dir.
    assert_eq!(
        r.fs.create(&alice, &rt, b"x", &Createhow3::Unchecked(Sattr3::default()))
            .unwrap_err(),
        NfsError::Acces
    );
    assert_eq!(
        r.fs.remove(&alice, &rt, b"open").unwrap_err(),
        NfsError::Acces
    );
    let private = r.fs.mkdir(&alice, &open, b"private", &mode(0o700)).unwrap();
    create(&r.fs, &alice, &private, b"secret");
    assert_eq!(
        r.fs.lookup(&bob, &private, b"secret").unwrap_err(),
        NfsError::Acces
    );
    let mut s = Collect::new(false, 10);
    assert_eq!(
        r.fs.readdir(&bob, &private, 0, Default::default(), &mut s)
            .unwrap_err(),
        NfsError::Acces
    );
    r.fs.lookup(&root(), &private, b"secret").unwrap();
    // ACCESS.
    let all = ACCESS3_READ
        | ACCESS3_LOOKUP
        | ACCESS3_MODIFY
        | ACCESS3_EXTEND
        | ACCESS3_DELETE
        | ACCESS3_EXECUTE;
    assert_eq!(
        r.fs.access(&alice, &private, all).unwrap(),
        all & !ACCESS3_EXECUTE
    );
    assert_eq!(r.fs.access(&bob, &private, all).unwrap(), 0);
    assert_eq!(
        r.fs.access(&root(), &private, all).unwrap(),
        all & !ACCESS3_EXECUTE
    );
    // DELETE (deleting an entry of a directory) is granted on directories only.
    let g = create(&r.fs, &alice, &open, b"g");
    assert_eq!(r.fs.access(&bob, &g, all).unwrap(), ACCESS3_READ);
    assert_eq!(
        r.fs.access(&alice, &g, all).unwrap(),
        ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND
    );
    assert_eq!(r.fs.access(&alice, &g, ACCESS3_READ).unwrap(), ACCESS3_READ);
    // Root executes only what has an execute bit.
    assert_eq!(r.fs.access(&root(), &g, ACCESS3_EXECUTE).unwrap(), 0);
    // Sticky directory: bob cannot remove alice's file from a 1777 directory.
    let tmp = r.fs.mkdir(&root(), &rt, b"tmp", &mode(0o1777)).unwrap();
    create(&r.fs, &alice, &tmp, b"a");
    assert_eq!(r.fs.remove(&bob, &tmp, b"a").unwrap_err(), NfsError::Acces);
    assert_eq!(
        r.fs.rename(&bob, &tmp, b"a", &tmp, b"b").unwrap_err(),
        NfsError::Acces
    );
    r.fs.remove(&alice, &tmp, b"a").unwrap();
}

#[test]
fn setattr_times_guard_and_size_kinds() {
    let r = rig();
    let rt = r.fs.root_fh();
    let (alice, bob) = (user(100, 100), user(200, 200));
    let open = mkdir_open(&r);
    let f = create(&r.fs, &alice, &open, b"f");
    let t = Nfstime3 {
        seconds: 42,
        nseconds: 7,
    };
    let times = Sattr3 {
        atime: SetTime::ClientTime(t),
        mtime: SetTime::ClientTime(t),
        ..Sattr3::default()
    };
    assert_eq!(
        r.fs.setattr(&bob, &f, &times, None).unwrap_err(),
        NfsError::Perm
    );
    r.fs.setattr(&alice, &f, &times, None).unwrap();
    let a = r.fs.getattr(&root(), &f).unwrap();
    assert_eq!((a.atime, a.mtime), (t, t));
    assert_ne!(a.ctime, t);
    // Guard: the current ctime passes, another is NOT_SYNC and changes nothing.
    let stale = Nfstime3 {
        seconds: 1,
        nseconds: 0,
    };
    assert_eq!(
        r.fs.setattr(&alice, &f, &mode(0o600), Some(stale))
            .unwrap_err(),
        NfsError::NotSync
    );
    assert_eq!(r.fs.getattr(&root(), &f).unwrap().mode, 0o644);
    r.fs.setattr(&alice, &f, &mode(0o600), Some(a.ctime))
        .unwrap();
    assert_eq!(r.fs.getattr(&root(), &f).unwrap().mode, 0o600);
    let now = Sattr3 {
        mtime: SetTime::ServerTime,
        ..Sattr3::default()
    };
    r.fs.setattr(&alice, &f, &now, None).unwrap();
    assert!(r.fs.getattr(&root(), &f).unwrap().mtime.seconds > 1000);
    let sz = Sattr3 {
        size: Some(1),
        ..Sattr3::default()
    };
    assert_eq!(
        r.fs.setattr(&root(), &rt, &sz, None).unwrap_err(),
        NfsError::IsDir
    );
    let l =
        r.fs.symlink(&root(), &rt, b"l", &Sattr3::default(), b"t")
            .unwrap();
    assert_eq!(
        r.fs.setattr(&root(), &l, &sz, None).unwrap_err(),
        NfsError::Inval
    );
}

#[test]
fn fsinfo_and_pathconf() {
    let r = rig();
    let rt = r.fs.root_fh();
    let i = r.fs.fsinfo(&root(), &rt).unwrap();
    assert_eq!((i.rtmax, i.wtmax, i.dtpref), (1 << 20, 1 << 20, 65536));
    assert_eq!(i.maxfilesize, nfs_pagefs::MAX_FILE_SIZE);
    assert_eq!(
        i.time_delta,
        Nfstime3 {
            seconds: 0,
            nseconds: 1
        }
    );
    let p = r.fs.pathconf(&root(), &rt).unwrap();
    assert_eq!(p.name_max, 255);
    assert!(p.no_trunc && p.chown_restricted && p.case_preserving && !p.case_insensitive);
}

#[test]
fn concurrent_writers_and_readers_keep_files_intact() {
    let r = std::sync::Arc::new(rig());
    let rt = r.fs.root_fh();
    let handles: Vec<_> = (0..4u8)
        .map(|t| {
            let r = r.clone();
            let rt = rt.clone();
            std::thread::spawn(move || {
                let name = [b'f', b'0' + t];
                let f = create(&r.fs, &root(), &rt, &name);
                for i in 0..50u32 {
                    let b = vec![t.wrapping_add(i as u8); 5000];
                    let off = u64::from(i) * 3000;
                    write_bytes(&r.fs, &root(), &f, off, &b).unwrap();
                    let (got, _) = read(&r, &root(), &f, off, 5000).unwrap();
                    assert_eq!(got, b);
                }
                f
            })
        })
        .collect();
    for h in handles {
        let f = h.join().unwrap();
        let a = r.fs.getattr(&root(), &f).unwrap();
        assert_eq!(a.size, 49 * 3000 + 5000);
    }
}
