//! Export confinement under a racing client (issue 27): an unprivileged `AUTH_SYS` user who
//! may write in the export swaps a directory it owns for a symlink to a root-only directory
//! outside the export (with RENAME, SYMLINK and REMOVE through the same server), while it
//! runs every path-taking procedure on handles of objects inside that directory. Nothing may
//! reach outside: no byte of the root-owned 0600 file read, written or truncated, its mode
//! unchanged, nothing created, listed, found or removed there.
//!
//! On 75eb77b (`LocalFs` resolved a handle to a path, checked it, then opened the path
//! again) this test read and overwrote the outside file within the first rounds. Needs root
//! (a root-owned file and an unprivileged caller); skipped otherwise.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    missing_docs
)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use krpc_rdma_nfsd::handle::HandleKey;
use krpc_rdma_nfsd::LocalFs;
use mbuf::{HeapPageArena, PageProvider};
use nfs_proto::nfs3::*;
use nfs_service::nfsd::{Backend, DirEntry, DirSink, WriteIov};
use onc_rpc::svc::Cred;

mod host;
use host::{cred, is_root};

const SECRET: &[u8] = b"SECRET-OUTSIDE-THE-EXPORT";
const USER: u32 = 4242;

fn user() -> Cred<'static> {
    cred(USER, USER)
}

/// Every name a READDIR gives.
struct Names(Vec<Vec<u8>>);

impl DirSink for Names {
    fn wants_plus(&self) -> bool {
        true
    }
    fn entry(&mut self, e: &DirEntry<'_>) -> bool {
        self.0.push(e.name.to_vec());
        true
    }
}

fn outside_listing(outside: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_symlink_swap_racing_every_procedure_never_reaches_outside_the_export() {
    if !is_root() {
        println!("skipped: not root");
        return;
    }
    let base = std::env::temp_dir().join(format!("nfsd-confine-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (export, outside) = (base.join("export"), base.join("outside"));
    let (pubdir, d) = (export.join("pub"), export.join("pub/d"));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o700)).unwrap();
    // Outside: a root-owned secret and a file only it has.
    std::fs::write(outside.join("secret"), SECRET).unwrap();
    std::fs::set_permissions(
        outside.join("secret"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::write(outside.join("only-outside"), b"x").unwrap();
    // Inside: the user's directory with a file of the same name.
    std::fs::write(d.join("secret"), b"inside").unwrap();
    for p in [&pubdir, &d, &d.join("secret")] {
        std::os::unix::fs::chown(p, Some(USER), Some(USER)).unwrap();
    }
    let before = outside_listing(&outside);

    let fs = Arc::new(LocalFs::new(&export).unwrap());
    let me = user();
    let root = fs.root_fh();
    let pub_fh = fs.lookup(&me, &root, b"pub").unwrap();
    let d_fh = fs.lookup(&me, &pub_fh, b"d").unwrap();
    let f_fh = fs.lookup(&me, &d_fh, b"secret").unwrap();

    // The swapper: d <-> a symlink to the outside directory, by renameat2(RENAME_EXCHANGE) (the
    // client could make the symlink with SYMLINK and swap with RENAME; done here directly, a
    // faster attacker than any client, to hit a check-then-open window if there is one).
    std::os::unix::fs::symlink(&outside, pubdir.join("d.link")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (stop, swaps, p) = (stop.clone(), swaps.clone(), pubdir.clone());
        std::thread::spawn(move || {
            let dir = std::fs::File::open(&p).unwrap();
            while !stop.load(Ordering::Relaxed) {
                // One atomic exchange per flip: `d` is the directory or the symlink, never
                // missing.
                let _ = rustix::fs::renameat_with(
                    &dir,
                    "d",
                    &dir,
                    "d.link",
                    rustix::fs::RenameFlags::EXCHANGE,
                );
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let pages: Arc<dyn PageProvider> = Arc::new(HeapPageArena::new(64).unwrap());
    let rounds: u32 = std::env::var("CONFINE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let mut escapes: Vec<String> = Vec::new();
    for i in 0..rounds {
        if let Ok(r) = fs.read(&me, &f_fh, 0, 64, &pages) {
            if r.data.to_vec().unwrap().starts_with(b"SECRET") {
                escapes.push(format!("round {i}: READ returned the outside file"));
            }
        }
        let _ = fs.write(
            &me,
            &f_fh,
            0,
            StableHow::Unstable,
            WriteIov::Bytes(b"PWNED"),
        );
        let _ = fs.setattr(
            &me,
            &f_fh,
            &Sattr3 {
                mode: Some(0o666),
                size: Some(3),
                ..Sattr3::default()
            },
            None,
        );
        let _ = fs.create(
            &me,
            &d_fh,
            b"new",
            &Createhow3::Unchecked(Sattr3::default()),
        );
        let _ = fs.mkdir(&me, &d_fh, b"dir", &Sattr3::default());
        let _ = fs.symlink(&me, &d_fh, b"ln", &Sattr3::default(), b"x");
        let _ = fs.remove(&me, &d_fh, b"only-outside");
        let _ = fs.link(&me, &f_fh, &d_fh, b"hard");
        let _ = fs.rename(&me, &d_fh, b"new", &d_fh, b"mv");
        // Tidy up (the directory stays small; a removal that escapes shows below).
        for n in [b"mv".as_slice(), b"new", b"ln", b"hard"] {
            let _ = fs.remove(&me, &d_fh, n);
        }
        let _ = fs.rmdir(&me, &d_fh, b"dir");
        if fs.lookup(&me, &d_fh, b"only-outside").is_ok() {
            escapes.push(format!("round {i}: LOOKUP found a name only outside has"));
        }
        let mut names = Names(Vec::new());
        if fs
            .readdir(&me, &d_fh, 0, Cookieverf3::default(), &mut names)
            .is_ok()
            && names.0.iter().any(|n| n == b"only-outside")
        {
            escapes.push(format!("round {i}: READDIR listed the outside directory"));
        }
        let s = std::fs::metadata(outside.join("secret"));
        let intact = s.as_ref().is_ok_and(|m| m.mode() & 0o777 == 0o600)
            && std::fs::read(outside.join("secret")).is_ok_and(|b| b == SECRET);
        if !intact {
            escapes.push(format!("round {i}: the outside file was changed"));
        }
        if outside_listing(&outside) != before {
            escapes.push(format!("round {i}: the outside directory was changed"));
        }
        if !escapes.is_empty() {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let after = outside_listing(&outside);
    if after != before {
        escapes.push(format!(
            "the outside directory changed: {before:?} -> {after:?}"
        ));
    }
    println!(
        "{rounds} rounds against {} swaps: {} escapes",
        swaps.load(Ordering::Relaxed),
        escapes.len()
    );
    let _ = std::fs::remove_dir_all(&base);
    assert!(escapes.is_empty(), "{escapes:#?}");
    assert!(swaps.load(Ordering::Relaxed) > 0);
}

/// `..` stops at the export root; a handle of an object outside the export, or a forged
/// one, opens nothing.
#[test]
fn dotdot_stops_at_the_root_and_foreign_handles_open_nothing() {
    let base: PathBuf =
        std::env::temp_dir().join(format!("nfsd-confine-dd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("export/a")).unwrap();
    std::fs::write(base.join("outside"), b"x").unwrap();
    let key = HandleKey::from_bytes([5; 16]);
    let fs = LocalFs::with_key(&base.join("export"), key.clone()).unwrap();
    let me = Cred {
        uid: 0,
        ..Cred::none()
    };
    let root = fs.root_fh();
    assert_eq!(fs.lookup(&me, &root, b"..").unwrap(), root);
    let a = fs.lookup(&me, &root, b"a").unwrap();
    assert_eq!(fs.lookup(&me, &a, b"..").unwrap(), root);
    assert!(fs.lookup(&me, &a, b"../..").is_err());
    assert!(fs.lookup(&me, &root, b"a/..").is_err());
    // A server with the same key over the parent directory hands out a handle of `outside`:
    // the export's server must not accept it (another export root: its MAC does not match).
    let parent = LocalFs::with_key(&base, key).unwrap();
    let out = parent.lookup(&me, &parent.root_fh(), b"outside").unwrap();
    assert!(fs.getattr(&me, &out).is_err());
    // Flipping a byte of a good handle: refused.
    let mut forged = a.clone();
    let last = forged.data.len() - 1;
    forged.data[last] ^= 0x40;
    assert!(fs.getattr(&me, &forged).is_err());
    // A symlink in the export is a symlink, not a door: LOOKUP through it gives the link.
    std::os::unix::fs::symlink(&base, base.join("export/door")).unwrap();
    let door = fs.lookup(&me, &root, b"door").unwrap();
    assert_eq!(fs.getattr(&me, &door).unwrap().type_, Ftype3::Lnk);
    assert!(fs.lookup(&me, &door, b"outside").is_err());
    std::fs::remove_dir_all(&base).unwrap();
}
