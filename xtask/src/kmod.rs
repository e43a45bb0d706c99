//! `cargo xtask kmod`: `krpc_rdma.ko` for the Linux kernel the project's VM boots.
//!
//! 1. The kernel staticlib with the in-kernel self-test: `cargo build --release --target
//!    x86_64-unknown-none -p krpc-rdma-kmod --features selftest,nfsd`.
//! 2. Its relocation-clean object ([`kobj::build_named`]) from the module's entry points
//!    [`EXPORTS`]: `target/kmod/krpc_rdma_rs_linux.o`.
//! 3. A kbuild directory `target/kmod/linux/`: `ofed-shim/linux/` (the Linux glue, its KPI
//!    header and its `Kbuild`), the shared verbs wrapper `ofed-shim/c/krpc_rdma_ofed.c` with
//!    the C boundary header `krpc_rdma_ofed.h` and `krpc_ofed_kpi.h`, the object as
//!    `krpc_rdma_rs.o_shipped` and the `.krpc_rdma_rs.o.cmd` that kbuild 6.1's modpost reads
//!    beside every object of a module (symbol versions are looked up there).
//! 4. `make -C /usr/src/linux-headers-KVER M=target/kmod/linux modules`, KVER being the VM's
//!    kernel (`kver` of the VM cache); Debian's `linux-headers-KVER` is the kbuild tree, its
//!    gcc 12 the compiler that kernel was built with. Then the C files' DWARF is stripped
//!    from the `.ko` (`objcopy --strip-debug`, as `INSTALL_MOD_STRIP=1` does at install).
//!
//! The module runs nothing at load unless asked: `insmod krpc_rdma.ko selftest=1` runs the
//! self-test (report line in the kernel log, a failure fails the load), and reading
//! `/sys/kernel/debug/krpc_rdma/selftest` runs it again. See `ofed-shim/linux/` and
//! `ofed-shim/ofed-testkit/src/selftest.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::kobj;
use crate::requirements::{self, Task};
use crate::vm::Cache;

/// The Rust object's entry points in the Linux module.
pub const EXPORTS: &[&str] = &[
    "krpc_rdma_shim_abi_version",
    "krpc_rdma_selftest",
    "krpc_rdma_peer",
    "krpc_nfsd_start",
    "krpc_nfsd_stop",
    "krpc_nfsd_report",
];

/// What goes into the kbuild directory: (source in the repository, name there).
const FILES: &[(&str, &str)] = &[
    ("ofed-shim/linux/Kbuild", "Kbuild"),
    ("ofed-shim/linux/krpc_rdma_linux.c", "krpc_rdma_linux.c"),
    (
        "ofed-shim/linux/krpc_ofed_kpi_linux.h",
        "krpc_ofed_kpi_linux.h",
    ),
    ("ofed-shim/linux/compat/sys/types.h", "compat/sys/types.h"),
    ("ofed-shim/c/krpc_rdma_ofed.h", "krpc_rdma_ofed.h"),
    ("ofed-shim/c/krpc_rdma_ofed.c", "krpc_rdma_ofed.c"),
    ("ofed-shim/c/krpc_ofed_kpi.h", "krpc_ofed_kpi.h"),
];

/// The kbuild tree of `kver` (Debian's `linux-headers-KVER`).
pub fn headers_dir(kver: &str) -> PathBuf {
    PathBuf::from(format!("/usr/src/linux-headers-{kver}"))
}

/// The module's path.
pub fn ko_path(root: &Path) -> PathBuf {
    root.join("target/kmod/linux/krpc_rdma.ko")
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    // Copy only when the bytes differ, so make sees unchanged files as unchanged.
    let data = std::fs::read(from).map_err(|e| format!("{}: {e}", from.display()))?;
    if std::fs::read(to).ok().as_deref() != Some(&data[..]) {
        std::fs::write(to, &data).map_err(|e| format!("{}: {e}", to.display()))?;
    }
    Ok(())
}

/// `cargo xtask kmod`: build `target/kmod/linux/krpc_rdma.ko` (see the module docs); its path.
///
/// # Errors
/// A missing requirement or a failing step.
pub fn kmod(root: &Path) -> Result<PathBuf, String> {
    requirements::ensure(Task::Kmod)?;
    let kver = Cache::from_env()?
        .kver()
        .ok_or("no kernel in the VM cache (cargo xtask vm-setup)")?;
    let hdr = headers_dir(&kver);
    if !hdr.join("Makefile").is_file() {
        return Err(format!(
            "{} has no Makefile: install linux-headers-{kver}",
            hdr.display()
        ));
    }
    let lib = crate::kernel_staticlib(&["selftest", "nfsd"])?;
    println!("==> kernel object (entry points {})", EXPORTS.join(", "));
    let obj = kobj::build_named(
        root,
        &lib,
        kobj::Link::Entries,
        EXPORTS,
        "krpc_rdma_rs_linux",
    )?;
    let dir = root.join("target/kmod/linux");
    for (from, to) in FILES {
        copy(&root.join(from), &dir.join(to))?;
    }
    copy(&obj, &dir.join("krpc_rdma_rs.o_shipped"))?;
    // kbuild 6.1's modpost reads `.NAME.o.cmd` of every object of the module (for the
    // `#SYMVER` lines of genksyms); a shipped object has none, so it gets an empty one.
    let cmd = dir.join(".krpc_rdma_rs.o.cmd");
    let line = "cmd_krpc_rdma_rs.o := cat krpc_rdma_rs.o_shipped > krpc_rdma_rs.o\n";
    if std::fs::read_to_string(&cmd).ok().as_deref() != Some(line) {
        std::fs::write(&cmd, line).map_err(|e| format!("{}: {e}", cmd.display()))?;
    }
    let mut make = Command::new("make");
    make.arg("-C")
        .arg(&hdr)
        .arg(format!("M={}", dir.display()))
        .arg("modules");
    crate::step(&format!("kbuild krpc_rdma.ko for Linux {kver}"), make)?;
    let ko = ko_path(root);
    // The C files' DWARF (and its relocations: a quarter of the module) is not needed to
    // load or run it; stripped as `make modules_install INSTALL_MOD_STRIP=1` does.
    let mut strip = Command::new("objcopy");
    strip.arg("--strip-debug").arg(&ko);
    crate::step("strip the debug sections (objcopy --strip-debug)", strip)?;
    let size = std::fs::metadata(&ko)
        .map_err(|e| format!("{}: {e}", ko.display()))?
        .len();
    println!(
        "kernel module {}: {size} bytes (Linux {kver})",
        ko.display()
    );
    Ok(ko)
}
