//! The NFSv3 server inside `krpc_rdma.ko` (Linux): nfs-service's NFSv3 service over the
//! in-kernel page file system (`nfs-pagefs`), on the core's Responder over the kernel's
//! verbs, one kernel thread per connection. The Linux client mounts it with
//! `mount -t nfs -o vers=3,proto=rdma,port=PORT,mountport=M,mountproto=tcp,nolock
//! IP:/kernel DIR`; MOUNT is answered in user space by `userspace-harness mountd`, which
//! hands out the root handle the module publishes (`nfsd_root_fh`).
//!
//! * WRITE data stays in the pages the RDMA Reads filled: the file system keeps them as the
//!   file's blocks (page-aligned, whole pages); READ data goes out as page mbufs over the
//!   file's own pages. The report's `write bytes adopted` / `copied` and the transport's
//!   `ddp_payload_copied_bytes` say how much was copied.
//! * While a connection is up the module holds a reference on itself: `rmmod` fails with
//!   "in use" instead of tearing the server down under a mounted client.
//! * Entry points: [`krpc_nfsd_start`], [`krpc_nfsd_stop`], [`krpc_nfsd_report`].
//!
//! Kernel code only (its glue is the Linux module's): on any other target the crate is empty.
#![cfg(target_os = "none")]
#![no_std]
#![deny(clippy::undocumented_unsafe_blocks)]

extern crate alloc;

pub mod server;
pub mod sys;

use alloc::string::String;
use alloc::sync::Arc;
use core::fmt::Write;
use core::sync::atomic::{AtomicBool, Ordering};

use krpc_rdma::provider::profile::StageProfile;
use krpc_rdma::transport::{Counters, SharedPages, COUNTER_NAMES};
use mbuf::PageProvider;
use nfs_pagefs::{PageFs, PageFsConfig};
use nfs_service::lock::Lock;
use nfs_service::nfsd::drc::ReplyCache;
use nfs_service::nfsd::{Nfs3Config, Nfs3Service};
use ofed_shim::wait::SockaddrIn;
use ofed_shim::{KernelPages, OfedConfig, OfedListener};
use onc_rpc::svc::{Access, Squash};

use server::{Acceptor, Figures, Shared};
use sys::{KMutex, KThread};

/// The reply cache's size.
pub const DRC_CAPACITY: usize = 1024;

/// What the module's parameters say (`nfsd_*`), from the C glue.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct KrpcNfsdConfig {
    /// IPv4 address to listen on (network order bytes).
    pub addr: [u8; 4],
    /// Port (20050 by default: knfsd's RDMA listener may hold 20049).
    pub port: u32,
    /// File system size in MiB.
    pub mib: u32,
    /// Connections served at once, at most.
    pub max_conns: u32,
    /// 0: root squashed to 65534 (knfsd's default); 1: `no_root_squash`.
    pub no_root_squash: u32,
    /// A number of this load (random): in every handle, so a reload's handles are new.
    pub instance: u32,
}

/// The running server: the accept thread and what it shares.
struct Running {
    /// Declared first: stopped (and waited for) before the acceptor is dropped.
    accept: KThread,
    acceptor: Arc<Acceptor>,
    shared: Arc<Shared>,
}

/// Held only by start, stop and report (module init, exit and a debugfs read: never
/// contended for long).
static SERVER: spin::Mutex<Option<Running>> = spin::Mutex::new(None);
static STARTED: AtomicBool = AtomicBool::new(false);

/// Start the server; write the root handle as hex (NUL-terminated) into `fh_hex` (`len`
/// bytes). 0, or a negative errno: `-EINVAL` (bad parameters), `-ENOMEM`, `-EADDRINUSE`
/// or `-EIO` (the listener), `-EAGAIN` (the thread); `-EBUSY` when already running.
///
/// # Safety
/// `cfg` is a valid config; `fh_hex` is valid for `len` bytes. Process context.
#[no_mangle]
pub unsafe extern "C" fn krpc_nfsd_start(
    cfg: *const KrpcNfsdConfig,
    fh_hex: *mut u8,
    len: usize,
) -> i32 {
    // SAFETY: the caller's.
    let (cfg, out) = unsafe { (*cfg, core::slice::from_raw_parts_mut(fh_hex, len)) };
    if STARTED.swap(true, Ordering::AcqRel) {
        return -16; // EBUSY
    }
    match start(&cfg, out) {
        Ok(r) => {
            *SERVER.lock() = Some(r);
            0
        }
        Err(e) => {
            STARTED.store(false, Ordering::Release);
            e
        }
    }
}

const EINVAL: i32 = -22;
const ENOMEM: i32 = -12;

#[inline(never)]
fn start(cfg: &KrpcNfsdConfig, fh_hex: &mut [u8]) -> Result<Running, i32> {
    let port = u16::try_from(cfg.port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or(EINVAL)?;
    if cfg.mib == 0 || cfg.max_conns == 0 {
        return Err(EINVAL);
    }
    let shared = make_shared(cfg)?;
    let hex = hex(&shared.svc.backend().root_fh().data);
    if hex.len() >= fh_hex.len() {
        return Err(EINVAL);
    }
    let sa = SockaddrIn::new(cfg.addr, port);
    // SAFETY: NULL net is &init_net in the Linux glue; `sa` is a valid sockaddr_in.
    let listener =
        unsafe { OfedListener::bind(core::ptr::null_mut(), sa.as_ptr(), &OfedConfig::default()) }
            .map_err(|_| -98)?; // EADDRINUSE (or no device at that address)
    let acceptor = Arc::new(Acceptor::new(shared.clone(), listener).ok_or(ENOMEM)?);
    let arg = Arc::as_ptr(&acceptor).cast_mut().cast();
    // SAFETY: `Running` keeps `acceptor` alive until the thread is stopped (the thread is
    // declared first and dropped first); the listener is owned by the acceptor.
    let accept = unsafe { KThread::spawn(server::accept_main, arg, b"krpc_nfsd\0") }.ok_or(-11)?; // EAGAIN
    if let Some(dst) = fh_hex.get_mut(..hex.len()) {
        dst.copy_from_slice(hex.as_bytes());
    }
    if let Some(z) = fh_hex.get_mut(hex.len()) {
        *z = 0;
    }
    Ok(Running {
        accept,
        acceptor,
        shared,
    })
}

/// The file system, the service and everything the threads share, on the heap.
#[inline(never)]
fn make_shared(cfg: &KrpcNfsdConfig) -> Result<Arc<Shared>, i32> {
    let pages: Arc<dyn PageProvider> = Arc::new(KernelPages::new());
    let fs = PageFs::new(
        pages.clone(),
        PageFsConfig {
            capacity_bytes: u64::from(cfg.mib) << 20,
            max_nodes: cfg.mib.saturating_mul(64).max(1024),
            instance: cfg.instance,
            clock: sys::now,
        },
    )
    .map_err(|_| ENOMEM)?;
    let squash = if cfg.no_root_squash != 0 {
        Squash::None
    } else {
        Squash::Root {
            uid: 65534,
            gid: 65534,
        }
    };
    let svc = Nfs3Service::new(fs, pages.clone(), Nfs3Config::default());
    let drc = ReplyCache::new(DRC_CAPACITY).ok_or(ENOMEM)?;
    // The page budget: the file system's size again for data in flight (RDMA Read
    // targets, READ reply pages), shared fairly by the connections.
    let budget = SharedPages::new(usize::try_from(u64::from(cfg.mib) << 20).map_err(|_| EINVAL)?);
    Ok(Arc::new(Shared {
        svc,
        drc: KMutex::try_new(drc).ok_or(ENOMEM)?,
        budget,
        pages,
        access: Access {
            squash,
            read_only: false,
        },
        max_conns: cfg.max_conns,
        stop: AtomicBool::new(false),
        figures: Figures::default(),
        ended: KMutex::try_new(Counters::default()).ok_or(ENOMEM)?,
        profile: KMutex::try_new(StageProfile::default()).ok_or(ENOMEM)?,
    }))
}

fn hex(b: &[u8]) -> String {
    let mut s = String::new();
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// Stop the server: every connection disconnected, every thread ended, the file system
/// freed. Process context (module exit; `rmmod` only gets here with no connection up).
#[no_mangle]
pub extern "C" fn krpc_nfsd_stop() {
    let r = SERVER.lock().take();
    if let Some(r) = r {
        r.shared.stop.store(true, Ordering::Release);
        let Running {
            accept,
            acceptor,
            shared,
        } = r;
        drop(accept);
        drop(acceptor);
        drop(shared);
    }
    STARTED.store(false, Ordering::Release);
}

/// One report line into `buf` (`len` bytes, NUL-terminated); its length.
///
/// # Safety
/// `buf` is valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn krpc_nfsd_report(buf: *mut u8, len: usize) -> usize {
    // SAFETY: the caller's.
    let out = unsafe { core::slice::from_raw_parts_mut(buf, len) };
    let line = match SERVER.try_lock() {
        Some(g) => match g.as_ref() {
            Some(r) => report(&r.shared),
            None => String::from("krpc_rdma nfsd: not running\n"),
        },
        None => String::from("krpc_rdma nfsd: busy\n"),
    };
    let n = line.len().min(len.saturating_sub(1));
    if let (Some(d), Some(s)) = (out.get_mut(..n), line.as_bytes().get(..n)) {
        d.copy_from_slice(s);
    }
    if let Some(z) = out.get_mut(n) {
        *z = 0;
    }
    n
}

/// The report line (pieces in frames of their own: `core::fmt` arguments are large).
#[inline(never)]
fn report(sh: &Shared) -> String {
    let mut s = String::new();
    connections_part(&mut s, &sh.figures);
    calls_part(&mut s, &sh.figures);
    fs_part(&mut s, &sh.svc.backend().stats());
    let c = sh.ended.with(|c| *c);
    counters_part(&mut s, &c);
    let p = sh.profile.with(|p| *p);
    profile_part(&mut s, &p);
    s.push('\n');
    s
}

fn load(a: &core::sync::atomic::AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

#[inline(never)]
fn connections_part(s: &mut String, f: &Figures) {
    let _ = write!(
        s,
        "krpc_rdma nfsd: connections {} accepted, {} refused, {} open;",
        load(&f.accepted),
        load(&f.refused),
        load(&f.open)
    );
}

#[inline(never)]
fn calls_part(s: &mut String, f: &Figures) {
    let _ = write!(
        s,
        " calls {}, replies {} ({} replays), dropped {}, NFS errors {}, reply errors {};",
        load(&f.calls),
        load(&f.replies),
        load(&f.replays),
        load(&f.dropped),
        load(&f.nfs_errors),
        load(&f.reply_errors)
    );
}

#[inline(never)]
fn fs_part(s: &mut String, fs: &nfs_pagefs::Stats) {
    let _ = write!(
        s,
        " file system: {} pages, {} nodes, write bytes adopted {}, copied {};",
        fs.pages_held, fs.nodes, fs.write_bytes_adopted, fs.write_bytes_copied
    );
    let _ = write!(
        s,
        " read bytes shared {}, zero fill {};",
        fs.read_bytes_shared, fs.zero_fill_bytes
    );
}

/// The stage profile as `name value` pairs, every figure always (scripts take differences
/// of two readings), then the human line.
#[inline(never)]
fn profile_part(s: &mut String, p: &StageProfile) {
    s.push_str("; stage profile:");
    for (k, v) in p.fields() {
        let _ = write!(s, " {k} {v}");
    }
    let _ = write!(s, " ({p})");
}

#[inline(never)]
fn counters_part(s: &mut String, c: &Counters) {
    s.push_str(" transport (ended connections):");
    for (k, v) in COUNTER_NAMES.iter().zip(c.values()) {
        if v != 0 {
            let _ = write!(s, " {k} {v}");
        }
    }
}
