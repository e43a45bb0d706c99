//! FreeBSD 14.2 itself, built from its public source and booted under qemu: the oracle for the
//! krpc face (see `xtask/freebsd/`, whose scripts do the work).
//!
//! * `freebsd-setup`: the KRPCRDMA kernel (MINIMAL + VIMAGE, INVARIANTS, WITNESS), the modules
//!   krpc_rdma.ko and NFS need, and FreeBSD's EFI loader, cross-built on this Linux machine by
//!   FreeBSD's `tools/build/make.py` with Debian's clang 19; packed as one image tarball in the
//!   cache, the build tree kept beside it. The source: `FREEBSD_SRC` (a tree), or
//!   `FREEBSD_KPI_MIRROR` (a git directory of one, the same the KPI check uses) at
//!   `FREEBSD_COMMIT` (default [`COMMIT`], 14.2-BETA1).
//! * `freebsd-kmod`: the kernel staticlib with the self-test and the face test, its object
//!   from the module's entry points ([`kobj::EXPORTS`] and `FREEBSD_TEST_EXPORTS`), then
//!   krpc_rdma.ko by FreeBSD's `bsd.kmod.mk` (`ofed-shim/kmod/Makefile`, `SELFTEST=1`) in
//!   that build tree: `target/kmod/freebsd/krpc_rdma.ko`.
//! * `freebsd-vm`: boots the image (qemu TCG, OVMF, FreeBSD's loader) twice. First with that
//!   krpc_rdma.ko preloaded and `krpc_rdma.selftest=1`: the kernel links the module, its
//!   MOD_LOAD runs, a kernel thread runs the scenario suite over the soft provider with
//!   FreeBSD's pages, then the face test against FreeBSD's own svc.c, and powers the VM off.
//!   Then from a FAT root disk with krpc_rdma_kldtest.ko preloaded: 20 load/unload cycles of
//!   krpc_rdma.ko, each with the face test. The serial consoles are checked (every test
//!   passed, no panic, no WITNESS lock-order reversal). An image built with
//!   freebsd/patches/ (`FREEBSD_PATCHES=1 cargo xtask freebsd-setup`, in its own cache,
//!   [`DEFAULT_NFS_CACHE`]) adds a third boot: FreeBSD's own NFS client and nfsd over the
//!   transport (`xtask/freebsd/nfstest.c`); `freebsd-vm` runs it after the stock image's
//!   boots whenever that image is there.
//!
//! The image is found in `KRPC_RDMA_FREEBSD_IMAGE`, the cache (`KRPC_RDMA_FREEBSD_CACHE`,
//! default [`DEFAULT_CACHE`]) or `../shared/freebsd-vm/*.tar.zst`. Without one, `cargo xtask
//! test` says so in one line and skips the step (CI has no FreeBSD source).

use crate::requirements::{self, Task};
use crate::{kobj, root, step};
use std::path::{Path, PathBuf};
use std::process::Command;

/// FreeBSD 14.2-BETA1's whole source tree in `github:kaizenwa/freebsd-14.2`.
pub(crate) const COMMIT: &str = "b66633d79ade";
/// Where the build tree and the image live unless `KRPC_RDMA_FREEBSD_CACHE` says otherwise.
const DEFAULT_CACHE: &str = "/var/tmp/krpc-rdma-freebsd";
/// Where `FREEBSD_PATCHES=1 cargo xtask freebsd-setup` builds the patched image (FreeBSD's
/// NFS over the transport) unless `KRPC_RDMA_FREEBSD_NFS_CACHE` says otherwise (or
/// `KRPC_RDMA_FREEBSD_CACHE` is set: then there).
const DEFAULT_NFS_CACHE: &str = "/var/tmp/krpc-rdma-freebsd-nfs";
/// The image's name in the cache.
const IMAGE: &str = "freebsd-image.tar.zst";

fn cache() -> PathBuf {
    env_path("KRPC_RDMA_FREEBSD_CACHE").unwrap_or_else(|| PathBuf::from(DEFAULT_CACHE))
}

/// The patched image's cache (see [`DEFAULT_NFS_CACHE`]).
fn nfs_cache() -> PathBuf {
    env_path("KRPC_RDMA_FREEBSD_NFS_CACHE").unwrap_or_else(|| PathBuf::from(DEFAULT_NFS_CACHE))
}

fn patches_wanted() -> bool {
    std::env::var("FREEBSD_PATCHES").is_ok_and(|v| v == "1")
}

/// Whether `freebsd-setup` left its build tree (its source path) in `cache`.
fn has_build_tree(cache: &Path) -> bool {
    cache.join("source").is_file()
}

fn script(name: &str) -> PathBuf {
    root().join("xtask").join("freebsd").join(name)
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// `cargo xtask freebsd-setup`.
pub(crate) fn setup() -> Result<(), String> {
    requirements::ensure(Task::FreebsdSetup)?;
    let cache = if patches_wanted() && env_path("KRPC_RDMA_FREEBSD_CACHE").is_none() {
        nfs_cache()
    } else {
        cache()
    };
    let mut cmd = Command::new("sh");
    cmd.arg(script("setup.sh")).env("CACHE", &cache);
    if let Some(src) = env_path("FREEBSD_SRC") {
        cmd.env("SRC", src);
    } else if let Some(mirror) = env_path("FREEBSD_KPI_MIRROR") {
        let commit = std::env::var("FREEBSD_COMMIT").unwrap_or_else(|_| COMMIT.into());
        cmd.env("MIRROR", mirror).env("COMMIT", commit);
    } else {
        return Err(format!(
            "freebsd-setup: no FreeBSD source: set FREEBSD_SRC to a source tree, or \
             FREEBSD_KPI_MIRROR to a git directory holding commit {COMMIT} \
             (e.g. a clone of github.com/kaizenwa/freebsd-14.2)"
        ));
    }
    step(
        &format!("FreeBSD image and build tree in {}", cache.display()),
        cmd,
    )
}

/// The test entry points of the FreeBSD module's Rust object, beside [`kobj::EXPORTS`]: the
/// self-test and the face test's pair (`ofed-testkit`'s `selftest` and `face`).
const FREEBSD_TEST_EXPORTS: &[&str] = &[
    "krpc_rdma_selftest",
    "krpc_rdma_face_open",
    "krpc_rdma_face_pair",
    "krpc_rdma_face_pair_cb",
    "krpc_rdma_face_close",
    "krpc_rdma_face_malformed",
    "krpc_rdma_soft_listen",
    "krpc_rdma_soft_dial",
];

/// `cargo xtask freebsd-kmod`: the module's path.
pub(crate) fn kmod() -> Result<PathBuf, String> {
    kmod_in(&cache(), "target/kmod/freebsd/krpc_rdma.ko")
}

/// krpc_rdma.ko built in the build tree of `cache`, to `out` (relative to the workspace).
fn kmod_in(cache: &Path, out: &str) -> Result<PathBuf, String> {
    requirements::ensure(Task::FreebsdSetup)?;
    if !has_build_tree(cache) {
        return Err(format!(
            "freebsd-kmod: no FreeBSD build tree in {}: run cargo xtask freebsd-setup",
            cache.display()
        ));
    }
    let lib = crate::kernel_staticlib(&["selftest", "face"])?;
    let exports: Vec<&str> = kobj::EXPORTS
        .iter()
        .copied()
        .chain(FREEBSD_TEST_EXPORTS.iter().copied())
        .collect();
    println!(
        "==> kernel object for FreeBSD (entry points {})",
        exports.join(", ")
    );
    let rs = kobj::build_named(
        &root(),
        &lib,
        kobj::Link::Entries,
        &exports,
        "krpc_rdma_rs_freebsd",
    )?;
    let out = root().join(out);
    let mut cmd = Command::new("sh");
    cmd.arg(script("kmod.sh"))
        .env("CACHE", cache)
        .env("ROOT", root())
        .env("RUST_OBJ", &rs)
        .env("OUT", &out);
    step(
        &format!(
            "krpc_rdma.ko for FreeBSD by bsd.kmod.mk (with {})",
            file_name(&rs)
        ),
        cmd,
    )?;
    Ok(out)
}

/// The image to boot, if there is one.
fn image() -> Option<PathBuf> {
    if let Some(p) = env_path("KRPC_RDMA_FREEBSD_IMAGE") {
        return Some(p);
    }
    let cached = cache().join(IMAGE);
    if cached.is_file() {
        return Some(cached);
    }
    let shared = root().parent()?.join("shared").join("freebsd-vm");
    let mut found: Vec<PathBuf> = std::fs::read_dir(shared)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".tar.zst"))
        .collect();
    found.sort();
    found.pop()
}

/// The FreeBSD NFS patch's check in `cargo xtask test` (`freebsd/patches/check.sh`): it
/// applies to 14.2 (`git apply --check` on a tree from `FREEBSD_KPI_MIRROR`), and with a
/// build tree every file it touches, and the module's registration, compile. Skipped, in
/// one line, without a mirror.
pub(crate) fn patch_check() -> Result<(), String> {
    let name = "FreeBSD NFS patch (freebsd/patches/check.sh)";
    let Some(mirror) = env_path("FREEBSD_KPI_MIRROR") else {
        println!(
            "==> {name}: skipped: no FreeBSD source (set FREEBSD_KPI_MIRROR to a git \
             directory holding commit {COMMIT})"
        );
        return Ok(());
    };
    let commit = std::env::var("FREEBSD_COMMIT").unwrap_or_else(|_| COMMIT.into());
    let mut cmd = Command::new("sh");
    cmd.arg(root().join("freebsd/patches/check.sh"))
        .env("FREEBSD_MIRROR", mirror)
        .env("FREEBSD_COMMIT", commit)
        .env("KRPC_RDMA_FREEBSD_CACHE", cache());
    step(name, cmd)
}

/// `cargo xtask freebsd-vm`, and its step in `cargo xtask test`: skipped, in one line, when
/// there is no image; the module is built and loaded when the build tree is there too. Then,
/// when the image booted was not the patched one and a patched image with its build tree is
/// in [`nfs_cache`], its NFS boot alone (vm.sh with `ONLY_NFS=1`, krpc_rdma.ko built against
/// that tree): the stock image proves the face against unmodified 14.2, the patched one
/// FreeBSD's own NFS over the transport.
pub(crate) fn vm() -> Result<(), String> {
    vm_main()?;
    let nfs = nfs_cache();
    let name = "FreeBSD's NFS over the transport (the patched image's NFS boot)";
    if env_path("KRPC_RDMA_FREEBSD_IMAGE").is_some() || nfs == cache() || patched(&cache()) {
        return Ok(());
    }
    if !nfs.join(IMAGE).is_file() || !has_build_tree(&nfs) {
        println!(
            "==> {name}: skipped: no patched image in {} (FREEBSD_PATCHES=1 cargo xtask \
             freebsd-setup builds one)",
            nfs.display()
        );
        return Ok(());
    }
    let ko = kmod_in(&nfs, "target/kmod/freebsd-nfs/krpc_rdma.ko")?;
    let log = root().join("target/freebsd-vm/serial.log");
    let mut cmd = Command::new("sh");
    cmd.arg(script("vm.sh"))
        .arg(nfs.join(IMAGE))
        .arg(&log)
        .arg(&ko)
        .env("ONLY_NFS", "1");
    step(&format!("{name}: {}", nfs.join(IMAGE).display()), cmd)
}

/// Whether the image in `cache` was built with freebsd/patches/ (its BUILD-INFO names them;
/// vm.sh then runs the NFS boot itself).
fn patched(cache: &Path) -> bool {
    std::fs::read_to_string(cache.join("image/BUILD-INFO")).is_ok_and(|b| {
        b.lines()
            .any(|l| l.starts_with("patches: ") && l.contains(".patch"))
    })
}

/// The main image's boots (see [`vm`]).
fn vm_main() -> Result<(), String> {
    let name = "FreeBSD 14.2 kernel under qemu (cargo xtask freebsd-vm)";
    let Some(image) = image() else {
        println!(
            "==> {name}: skipped: no FreeBSD image (cargo xtask freebsd-setup makes one; \
             or set KRPC_RDMA_FREEBSD_IMAGE)"
        );
        return Ok(());
    };
    requirements::ensure(Task::FreebsdVm)?;
    let ko = if has_build_tree(&cache()) {
        Some(kmod()?)
    } else {
        println!(
            "==> {name}: no FreeBSD build tree in {}: booting the image without krpc_rdma.ko",
            cache().display()
        );
        None
    };
    let log = root().join("target/freebsd-vm/serial.log");
    let mut cmd = Command::new("sh");
    cmd.arg(script("vm.sh")).arg(&image).arg(&log);
    if let Some(ko) = &ko {
        cmd.arg(ko);
    }
    step(&format!("{name}: {}", image.display()), cmd)
}

/// A path's last component, for step names.
fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}
