//! What one NFSv3 dispatch allocates (the VersatusHPC lesson, DESIGN.md section 8: a server
//! that allocated a 1 MiB buffer per WRITE spent ~88 % of its CPU on it). A counting
//! `#[global_allocator]` counts the heap allocations made inside [`Nfs3Service::dispatch`]
//! only (a thread-local switch around the call), after a warm-up: for a 1 MiB WRITE whose data
//! came as page mbufs behind a DDP marker, a 1 MiB READ whose data leaves as page mbufs, and
//! a GETATTR. Counted: the dispatcher's XDR copies and encoders, decoded handles, the
//! WRITE's page-piece list, the reply chain's mbuf storage, and the backend's own work (the
//! in-memory backend's READ takes fresh pages from the arena: their page memory is the
//! arena's, preallocated, not the heap's). Asserted: no allocation anywhere near the data's
//! size (the data never passes through a heap buffer). The figures are printed
//! (`cargo test --release -p nfs-service --test nfsd_alloc -- --nocapture`).
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod common;

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::memfs::{fh, MemFs, ROOT};
use common::nfs_header;
use mbuf::{Chain, HeapPageArena, PageProvider};
use nfs_proto::chain::{data_pages_from_bytes, ddp_call};
use nfs_proto::nfs3::*;
use nfs_service::nfsd::{Nfs3Config, Nfs3Service};
use tests::counting_alloc::{installed, Counting, ALLOCS, BYTES, LARGEST, ON};

#[global_allocator]
static GLOBAL: Counting = Counting;

const MIB: usize = 1 << 20;
const ROUNDS: u64 = 100;

/// Root's NFSv3 call of `proc_` with `args`, as a chain.
fn call<A: Xdr>(proc_: u32, args: &A) -> Chain {
    let mut e = nfs_header(1, proc_, 0);
    args.encode(&mut e);
    Chain::from_bytes(&e.finish().unwrap()).unwrap()
}

/// Allocations, bytes and the largest allocation per dispatch of `call()`, averaged over
/// [`ROUNDS`] after one warm-up; the call is built outside the counted window.
fn measure(svc: &Nfs3Service<MemFs>, call: impl Fn() -> Chain) -> (u64, u64, u64) {
    drop(svc.dispatch(&call()).unwrap());
    assert!(
        installed(),
        "the counting allocator is not the global allocator"
    );
    let (a0, b0) = (ALLOCS.with(Cell::get), BYTES.with(Cell::get));
    LARGEST.with(|l| l.set(0));
    for _ in 0..ROUNDS {
        let c = call();
        ON.with(|on| on.set(true));
        let r = svc.dispatch(&c);
        ON.with(|on| on.set(false));
        assert_eq!(r.unwrap().status, Some(Nfsstat3::OK));
    }
    let (a1, b1) = (ALLOCS.with(Cell::get), BYTES.with(Cell::get));
    (
        (a1 - a0) / ROUNDS,
        (b1 - b0) / ROUNDS,
        LARGEST.with(Cell::get),
    )
}

#[test]
fn one_mib_write_and_read_allocate_no_data_buffer() {
    let arena = Arc::new(HeapPageArena::new(4096).unwrap());
    let pages: Arc<dyn PageProvider> = arena.clone();
    let svc = Nfs3Service::new(MemFs::new(), pages.clone(), Nfs3Config::default());
    svc.backend().quiet.store(true, Ordering::Relaxed);
    // A 1 MiB file, written once before measuring (the in-memory backend grows it then).
    let create = CreateArgs {
        where_: Diropargs3 {
            dir: fh(ROOT),
            name: Filename3(b"f".to_vec()),
        },
        how: Createhow3::Unchecked(Sattr3::default()),
    };
    let d = svc.dispatch(&call(NFSPROC3_CREATE, &create)).unwrap();
    assert_eq!(d.status, Some(Nfsstat3::OK));
    let file = fh(2);
    let data = vec![0x5a; MIB];
    let write = || {
        let mut e = nfs_header(1, NFSPROC3_WRITE, 0);
        WriteHead {
            file: file.clone(),
            offset: 0,
            count: MIB as u32,
            stable: StableHow::Unstable,
        }
        .encode_head(&mut e, MIB as u32);
        let body = data_pages_from_bytes(&pages, &data).unwrap();
        ddp_call(&e.finish().unwrap(), body, &[]).unwrap()
    };
    let read = || {
        let args = ReadArgs {
            file: file.clone(),
            offset: 0,
            count: MIB as u32,
        };
        call(NFSPROC3_READ, &args)
    };
    let getattr = || {
        let args = GetattrArgs {
            object: file.clone(),
        };
        call(NFSPROC3_GETATTR, &args)
    };
    let w = measure(&svc, write);
    let r = measure(&svc, read);
    let g = measure(&svc, getattr);
    for (what, (n, bytes, largest)) in [("1 MiB WRITE (DDP)", w), ("1 MiB READ", r), ("GETATTR", g)]
    {
        println!("{what}: {n} allocations, {bytes} bytes per dispatch, largest {largest} bytes");
    }
    assert_eq!(svc.backend().contents(&file).unwrap(), data);
    // No allocation anywhere near the data's size: the data never passes through the heap.
    for (_, _, largest) in [w, r, g] {
        assert!(largest < 16 * 1024, "an allocation of {largest} bytes");
    }
    drop(svc);
    assert_eq!(arena.in_use(), 0);
}
