//! Helpers of the nfs-pagefs tests: a rig over a heap arena, a provider whose fresh pages
//! hold garbage (as a kernel's do), credentials, a collecting directory sink.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use mbuf::{AllocError, Chain, HeapPageArena, PageError, PageFragment, PageProvider, PAGE_SIZE};
use nfs_pagefs::{FsState, PageFs, PageFsConfig};
use nfs_proto::nfs3::{Createhow3, NfsFh3, Nfstime3, Sattr3, StableHow};
use nfs_service::lock::SpinLock;
use nfs_service::nfsd::{Backend, DirEntry, DirSink, NfsResult, WriteIov, Written};
use onc_rpc::svc::Cred;

pub type Fs = PageFs<SpinLock<FsState>>;

/// A provider over a heap arena whose freshly allocated pages are full of 0xEE: a file
/// system that forgets to zero shows it.
pub struct Dirty(pub Arc<HeapPageArena>);

impl PageProvider for Dirty {
    fn alloc_page(&self) -> Result<u64, AllocError> {
        let a = self.0.alloc_page()?;
        self.0
            .write_page(a, 0, &[0xEE; PAGE_SIZE])
            .map_err(|_| AllocError)?;
        Ok(a)
    }
    fn page_ref(&self, addr: u64) -> Result<(), PageError> {
        self.0.page_ref(addr)
    }
    fn page_unref(&self, addr: u64) {
        self.0.page_unref(addr)
    }
    fn with_page(&self, addr: u64, f: &mut dyn FnMut(&[u8])) -> Result<(), PageError> {
        self.0.with_page(addr, f)
    }
    fn with_page_mut(&self, addr: u64, f: &mut dyn FnMut(&mut [u8])) -> Result<(), PageError> {
        self.0.with_page_mut(addr, f)
    }
}

static TICK: AtomicU32 = AtomicU32::new(1_000);

/// A clock that moves one second per call.
pub fn clock() -> Nfstime3 {
    Nfstime3 {
        seconds: TICK.fetch_add(1, Ordering::Relaxed),
        nseconds: 0,
    }
}

pub struct Rig {
    pub arena: Arc<HeapPageArena>,
    pub p: Arc<dyn PageProvider>,
    pub fs: Fs,
}

pub const INSTANCE: u32 = 7;

pub fn config(capacity_bytes: u64, max_nodes: u32) -> PageFsConfig {
    PageFsConfig {
        capacity_bytes,
        max_nodes,
        instance: INSTANCE,
        clock,
    }
}

/// A file system over a dirty arena of `npages` pages.
pub fn rig_with(npages: usize, capacity_bytes: u64, max_nodes: u32) -> Rig {
    let arena = Arc::new(HeapPageArena::new(npages).unwrap());
    let p: Arc<dyn PageProvider> = Arc::new(Dirty(arena.clone()));
    let fs = Fs::new(p.clone(), config(capacity_bytes, max_nodes)).unwrap();
    Rig { arena, p, fs }
}

pub fn rig() -> Rig {
    rig_with(4096, 64 << 20, 100_000)
}

pub fn root() -> Cred<'static> {
    user(0, 0)
}

pub fn user(uid: u32, gid: u32) -> Cred<'static> {
    Cred {
        flavor: onc_rpc::rpc::AUTH_SYS,
        uid,
        gid,
        gids: &[],
        machine_name: b"test",
    }
}

pub fn mode(m: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(m),
        ..Sattr3::default()
    }
}

pub fn create(fs: &Fs, cred: &Cred<'_>, dir: &NfsFh3, name: &[u8]) -> NfsFh3 {
    fs.create(cred, dir, name, &Createhow3::Guarded(mode(0o644)))
        .unwrap()
}

pub fn write_bytes(
    fs: &Fs,
    cred: &Cred<'_>,
    fh: &NfsFh3,
    off: u64,
    b: &[u8],
) -> NfsResult<Written> {
    fs.write(cred, fh, off, StableHow::Unstable, WriteIov::Bytes(b))
}

/// A fresh page of `p` holding `bytes` at `in_off` (the rest 0x55).
pub fn page_with(p: &Arc<dyn PageProvider>, in_off: usize, bytes: &[u8]) -> u64 {
    let a = p.alloc_page().unwrap();
    p.write_page(a, 0, &[0x55; PAGE_SIZE]).unwrap();
    p.write_page(a, in_off, bytes).unwrap();
    a
}

/// `data` as received pages of `p`: the first piece at in-page offset `first_off`, then
/// whole pages from offset 0. Returns the slices; the caller unrefs the pages.
pub fn received(p: &Arc<dyn PageProvider>, first_off: usize, data: &[u8]) -> Vec<PageFragment> {
    let mut out = Vec::new();
    let mut rest = data;
    let mut off = first_off;
    while !rest.is_empty() {
        let n = rest.len().min(PAGE_SIZE - off);
        let addr = page_with(p, off, &rest[..n]);
        out.push(PageFragment {
            addr,
            offset: off,
            len: n,
        });
        rest = &rest[n..];
        off = 0;
    }
    out
}

pub fn unref_all(p: &Arc<dyn PageProvider>, slices: &[PageFragment]) {
    for s in slices {
        p.page_unref(s.addr);
    }
}

pub fn write_pages(
    fs: &Fs,
    cred: &Cred<'_>,
    fh: &NfsFh3,
    off: u64,
    provider: &Arc<dyn PageProvider>,
    slices: &[PageFragment],
) -> NfsResult<Written> {
    fs.write(
        cred,
        fh,
        off,
        StableHow::FileSync,
        WriteIov::Pages { provider, slices },
    )
}

/// READ as bytes and eof (holes from the rig's provider).
pub fn read(
    r: &Rig,
    cred: &Cred<'_>,
    fh: &NfsFh3,
    off: u64,
    count: u32,
) -> NfsResult<(Vec<u8>, bool)> {
    let d = r.fs.read(cred, fh, off, count, &r.p)?;
    Ok((d.data.to_vec().unwrap(), d.eof))
}

/// The page addresses of a chain's page mbufs, in order.
pub fn page_addrs(c: &Chain) -> Vec<u64> {
    c.mbufs()
        .flat_map(|m| m.page_info().map(|i| i.pages.to_vec()).unwrap_or_default())
        .collect()
}

/// A sink that accepts `max` entries per call.
pub struct Collect {
    pub plus: bool,
    pub max: usize,
    pub taken: usize,
    pub got: Vec<(u64, Vec<u8>, u64, bool, bool)>,
}

impl Collect {
    pub fn new(plus: bool, max: usize) -> Self {
        Collect {
            plus,
            max,
            taken: 0,
            got: Vec::new(),
        }
    }
}

impl DirSink for Collect {
    fn wants_plus(&self) -> bool {
        self.plus
    }
    fn entry(&mut self, e: &DirEntry<'_>) -> bool {
        if self.taken >= self.max {
            return false;
        }
        self.taken += 1;
        self.got.push((
            e.cookie,
            e.name.to_vec(),
            e.fileid,
            e.attr.is_some(),
            e.fh.is_some(),
        ));
        true
    }
}
