//! What a file handle costs to resolve in an export of 20,000 files (issue 27): GETATTR on a
//! handle the server gave out itself ("known"), on the same handle at a server that never saw
//! it ("unknown": a restart with the same key), and on a handle of a removed file ("stale").
//! A handle is opened by `open_by_handle_at(2)`, so the three should cost the same, whatever
//! the export's size. `cargo bench -p krpc-rdma-nfsd --bench handles` (as root: the server
//! opens handles with `CAP_DAC_READ_SEARCH`). Figures: docs/PERFORMANCE.md.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion};
use krpc_rdma_nfsd::handle::HandleKey;
use krpc_rdma_nfsd::LocalFs;
use nfs_service::nfsd::Backend;
use onc_rpc::svc::Cred;

const FILES: usize = 20_000;

fn export() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nfsd-bench-handles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // 100 directories of 200 files: a tree a walk would have to cover.
    for d in 0..100 {
        let sub = dir.join(format!("d{d:03}"));
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..FILES / 100 {
            std::fs::write(sub.join(format!("f{f:03}")), b"x").unwrap();
        }
    }
    dir
}

fn handles(c: &mut Criterion) {
    let dir = export();
    let key = HandleKey::from_bytes([1; 16]);
    let me = Cred {
        uid: 0,
        ..Cred::none()
    };
    let issuer = LocalFs::with_key(&dir, key.clone()).unwrap();
    let lookup = |fs: &LocalFs, d: &str, f: &str| {
        let d = fs.lookup(&me, &fs.root_fh(), d.as_bytes()).unwrap();
        fs.lookup(&me, &d, f.as_bytes()).unwrap()
    };
    // The last file of the last directory: the worst place for a walk.
    let known = lookup(&issuer, "d099", "f199");
    let stale = lookup(&issuer, "d050", "f100");
    std::fs::remove_file(dir.join("d050/f100")).unwrap();
    let restarted = LocalFs::with_key(&dir, key).unwrap();
    let mut g = c.benchmark_group(format!("getattr in an export of {FILES} files"));
    g.bench_function("known handle", |b| {
        b.iter(|| issuer.getattr(&me, black_box(&known)).unwrap())
    });
    g.bench_function("unknown handle (server restarted)", |b| {
        b.iter(|| restarted.getattr(&me, black_box(&known)).unwrap())
    });
    g.bench_function("stale handle (file removed)", |b| {
        b.iter(|| restarted.getattr(&me, black_box(&stale)).unwrap_err())
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, handles);
criterion_main!(benches);
