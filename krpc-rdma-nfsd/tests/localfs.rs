//! `LocalFs` on the host, through the `Backend` calls the NFSv3 service makes: ownership,
//! permissions, WRITE from page pieces and READ into pages, EXCLUSIVE create, handles across
//! a restart, READDIR cookies across deletions. Runs as root (the server does) or not: the
//! ownership checks need root and are skipped otherwise.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;

use krpc_rdma_nfsd::handle::HandleKey;
use krpc_rdma_nfsd::LocalFs;
use mbuf::{HeapPageArena, PageFragment, PageProvider, PAGE_SIZE};
use nfs_proto::nfs3::*;
use nfs_service::nfsd::{Backend, DirEntry, DirSink, NfsError, WriteIov};

mod host;
use host::{cred, is_root};

fn tmp(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("nfsd-localfs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn unchecked() -> Createhow3 {
    Createhow3::Unchecked(Sattr3::default())
}

#[test]
fn write_from_pages_read_into_pages_owned_by_the_caller() {
    let dir = tmp("rw");
    let fs = LocalFs::new(&dir).unwrap();
    let me = if is_root() {
        // The export root belongs to the caller, who may create in it.
        std::os::unix::fs::chown(&dir, Some(1000), Some(100)).unwrap();
        cred(1000, 100)
    } else {
        let m = std::fs::metadata(&dir).unwrap();
        cred(m.uid(), m.gid())
    };
    let f = fs.create(&me, &fs.root_fh(), b"f", &unchecked()).unwrap();
    if is_root() {
        let m = std::fs::metadata(dir.join("f")).unwrap();
        assert_eq!((m.uid(), m.gid()), (1000, 100));
    }
    // 3 pages' worth of data in pieces that start mid-page, as a read chunk lands.
    let arena: Arc<dyn PageProvider> = Arc::new(HeapPageArena::new(16).unwrap());
    let data: Vec<u8> = (0..3 * PAGE_SIZE + 5)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    let mut slices = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let addr = arena.alloc_page().unwrap();
        let offset = if at == 0 { 100 } else { 0 };
        let len = (PAGE_SIZE - offset).min(data.len() - at);
        arena.write_page(addr, offset, &data[at..at + len]).unwrap();
        slices.push(PageFragment { addr, offset, len });
        at += len;
    }
    let w = fs
        .write(
            &me,
            &f,
            10,
            StableHow::Unstable,
            WriteIov::Pages {
                provider: &arena,
                slices: &slices,
            },
        )
        .unwrap();
    assert_eq!(w.count as usize, data.len());
    // A heap arena is not the server's registered arena: LocalFs copies through its buffer.
    assert_eq!(fs.bounced_bytes(), data.len() as u64);
    let on_disk = std::fs::read(dir.join("f")).unwrap();
    assert_eq!(&on_disk[..10], &[0; 10]);
    assert_eq!(&on_disk[10..], &data[..]);
    assert_eq!(fs.commit(&me, &f, 0, 0).unwrap(), w.verf);

    let r = fs.read(&me, &f, 10, 1 << 20, &arena).unwrap();
    assert!(r.eof);
    assert_eq!(r.data.to_vec().unwrap(), data);
    let r = fs.read(&me, &f, 0, 10, &arena).unwrap();
    assert!(!r.eof);
    assert_eq!(r.data.to_vec().unwrap(), vec![0; 10]);
    let attr = fs.getattr(&me, &f).unwrap();
    assert_eq!(attr.size as usize, 10 + data.len());
    assert_eq!(attr.type_, Ftype3::Reg);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn mode_bits_are_enforced_for_other_users() {
    if !is_root() {
        println!("skipped: not root");
        return;
    }
    let dir = tmp("perm");
    let fs = LocalFs::new(&dir).unwrap();
    let root = cred(0, 0);
    let other = cred(2000, 2000);
    let d = fs
        .mkdir(
            &root,
            &fs.root_fh(),
            b"d",
            &Sattr3 {
                mode: Some(0o755),
                ..Sattr3::default()
            },
        )
        .unwrap();
    assert_eq!(
        fs.create(&other, &d, b"x", &unchecked()),
        Err(NfsError::Acces)
    );
    let f = fs.create(&root, &d, b"ro", &unchecked()).unwrap();
    let a = fs.access(&other, &f, 0x3f).unwrap();
    assert_eq!(a & ACCESS3_READ, ACCESS3_READ);
    assert_eq!(a & ACCESS3_MODIFY, 0);
    assert_eq!(
        fs.write(&other, &f, 0, StableHow::FileSync, WriteIov::Bytes(b"no")),
        Err(NfsError::Acces)
    );
    let chmod = Sattr3 {
        mode: Some(0o777),
        ..Sattr3::default()
    };
    assert_eq!(fs.setattr(&other, &f, &chmod, None), Err(NfsError::Perm));
    assert_eq!(fs.remove(&other, &d, b"ro"), Err(NfsError::Acces));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn handles_survive_a_restart_and_exclusive_create_is_idempotent() {
    let dir = tmp("restart");
    let me = cred(0, 0);
    let key = HandleKey::from_bytes(*b"a server's key!!");
    let fh = {
        let fs = LocalFs::with_key(&dir, key.clone()).unwrap();
        let a = fs
            .mkdir(&me, &fs.root_fh(), b"a", &Sattr3::default())
            .unwrap();
        let verf = Createverf3(*b"12345678");
        let f = fs
            .create(&me, &a, b"f", &Createhow3::Exclusive(verf))
            .unwrap();
        // A retransmitted EXCLUSIVE create with the same verifier succeeds, another fails.
        assert_eq!(
            fs.create(&me, &a, b"f", &Createhow3::Exclusive(verf))
                .unwrap(),
            f
        );
        let other = Createhow3::Exclusive(Createverf3(*b"87654321"));
        assert_eq!(fs.create(&me, &a, b"f", &other), Err(NfsError::Exist));
        f
    };
    // A new server over the same directory with the same key: the old handle still names
    // the file; with another key it is stale (it cannot be told from a forgery).
    let fs = LocalFs::with_key(&dir, key).unwrap();
    assert_eq!(fs.getattr(&me, &fh).unwrap().type_, Ftype3::Reg);
    let other = LocalFs::new(&dir).unwrap();
    assert_eq!(other.getattr(&me, &fh), Err(NfsError::Stale));
    std::fs::remove_file(dir.join("a/f")).unwrap();
    assert_eq!(fs.getattr(&me, &fh), Err(NfsError::Stale));
    assert_eq!(
        fs.getattr(
            &me,
            &NfsFh3 {
                data: vec![1, 2, 3]
            }
        ),
        Err(NfsError::BadHandle)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Takes `room` entries, then refuses.
struct Take {
    room: usize,
    names: Vec<(Vec<u8>, u64)>,
}

impl DirSink for Take {
    fn wants_plus(&self) -> bool {
        true
    }
    fn entry(&mut self, e: &DirEntry<'_>) -> bool {
        if self.names.len() == self.room {
            return false;
        }
        assert!(e.attr.is_some() && e.fh.is_some());
        self.names.push((e.name.to_vec(), e.cookie));
        true
    }
}

#[test]
fn readdir_cookies_stay_valid_while_entries_are_removed() {
    let dir = tmp("readdir");
    let fs = LocalFs::new(&dir).unwrap();
    let me = cred(0, 0);
    for i in 0..300 {
        std::fs::write(dir.join(format!("e{i:03}")), b"").unwrap();
    }
    let (mut cookie, mut seen, mut rounds) = (0, Vec::new(), 0);
    loop {
        let mut t = Take {
            room: 40,
            names: Vec::new(),
        };
        let end = fs
            .readdir(&me, &fs.root_fh(), cookie, Cookieverf3::default(), &mut t)
            .unwrap();
        for (n, c) in &t.names {
            // As `rm -r` does: remove what was listed before asking for more.
            if n.as_slice() != b"." && n.as_slice() != b".." {
                std::fs::remove_file(dir.join(std::str::from_utf8(n).unwrap())).unwrap();
            }
            seen.push(n.clone());
            cookie = *c;
        }
        rounds += 1;
        if end.eof {
            break;
        }
    }
    assert!(rounds > 5);
    let unique: BTreeSet<_> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "no entry twice");
    assert_eq!(seen.len(), 302, "every entry once, with . and ..");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}
