//! What each task needs from the machine, listed once, and the one routine that brings a fresh
//! machine there.
//!
//! Every task that builds or runs something calls [`ensure`] first with what it is about to do
//! ([`Task`]). `ensure` looks before it installs (one `dpkg-query` for the packages, the
//! toolchain's sysroot for targets and components, `$CARGO_HOME/bin` for cargo tools, the VM
//! cache for the kernel), so pieces already present cost a few milliseconds and print nothing.
//! What is missing is installed one step at a time, each announced in one line saying what and
//! why: Debian packages with `apt-get` (through `sudo` when not root), the rustup target and
//! components with `rustup`, cargo tools with `cargo install`, Debian's kernel for the VM with
//! `apt-get download` (never installed on the host; see [`crate::vm::setup`]).
//!
//! When something is missing and cannot be installed here (no `apt-get`, not root and no
//! `sudo`, no `rustup`, or `KRPC_RDMA_SETUP=check`), [`ensure`] fails with one line that names
//! every missing piece and the commands that install them, before any build starts.
//!
//! `KRPC_RDMA_SETUP` (environment): `auto` (default) checks and installs; `check` only checks
//! and stops with that line when something is missing; `skip` checks nothing (for machines set
//! up by other means, e.g. a non-Debian host with the same libraries).
//!
//! This is the only list of system requirements in the repository: `.ci/run` installs nothing
//! itself, it runs `cargo xtask test` (and `cargo xtask fuzz`) like a newcomer.

use crate::vm::{is_root, run_quietly, which, Cache};
use std::collections::HashSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

/// A set of Debian packages that serve one purpose.
pub(crate) struct Packages {
    /// Why they are needed, said when they are installed.
    pub(crate) why: &'static str,
    pub(crate) names: &'static [&'static str],
}

/// To build the workspace: `rdma-sys` (the libibverbs/librdmacm provider of userspace-harness
/// and ofed-shim's KPI emulation) needs the libraries, clang for bindgen and pkg-config to find
/// them; gcc is rustc's linker and compiles ofed-shim's C wrappers.
pub(crate) static BUILD: Packages = Packages {
    why: "rdma-sys builds against libibverbs/librdmacm with bindgen (libclang), pkg-config; \
          gcc links and compiles ofed-shim's C wrappers",
    names: &[
        "libibverbs-dev",
        "librdmacm-dev",
        "libclang-dev",
        "pkg-config",
        "gcc",
        "libc6-dev",
    ],
};

/// `ofed-shim/check.sh` inspects the kernel staticlib with `ar`, `readelf` and `objdump`.
pub(crate) static INSPECT: Packages = Packages {
    why: "ofed-shim/check.sh inspects the kernel staticlib with ar, readelf, objdump",
    names: &["binutils"],
};

/// `cargo xtask kmod` runs kbuild (`make`); the compiler comes with the kernel headers
/// package ([`Need::KernelHeaders`]: `linux-headers-KVER` depends on the gcc its kernel was
/// built with).
pub(crate) static KBUILD: Packages = Packages {
    why: "cargo xtask kmod builds krpc_rdma.ko with kbuild (make)",
    names: &["make"],
};

/// The rxe VM. The guest runs on the host's root filesystem, so the tools the guest uses
/// (`modprobe`, `rdma`, `ip`, the verbs tools, perftest, knfsd) are host packages too.
/// `qemu-utils` is listed because installing bookworm's `qemu-system-x86` removes a newer
/// `qemu-img` (bookworm-backports on some images). The NFS packages run knfsd in the guest
/// (`xtask/vm/knfsd.sh`) for the interop tests, the demo and `bench-rxe` (which also mounts it
/// with the kernel client).
pub(crate) static VM: Packages = Packages {
    why: "the rxe VM: qemu boots Debian's kernel; the guest uses the host's kmod, iproute2, \
          rdma-core tools, perftest and knfsd",
    names: &[
        "qemu-system-x86",
        "qemu-utils",
        "busybox-static",
        "kmod",
        "iproute2",
        "xz-utils",
        "rdma-core",
        "ibverbs-utils",
        "ibverbs-providers",
        "rdmacm-utils",
        "perftest",
        "nfs-kernel-server",
        "nfs-common",
        "rpcbind",
    ],
};

/// `cargo xtask freebsd-setup` / `freebsd-kmod`: FreeBSD's `tools/build/make.py` cross-builds
/// with Debian's LLVM 19 (clang, lld, the binutils replacements), bootstraps its tools with
/// flex, bison, libarchive and libbz2, reads the source from git, packs the image with zstd.
pub(crate) static FREEBSD_BUILD: Packages = Packages {
    why: "cargo xtask freebsd-setup cross-builds FreeBSD's kernel and loader with make.py and \
          Debian's LLVM 19",
    names: &[
        "clang-19",
        "lld-19",
        "llvm-19",
        "flex",
        "bison",
        "libarchive-dev",
        "libbz2-dev",
        "git",
        "zstd",
        "python3",
    ],
};

/// `cargo xtask freebsd-vm`: qemu with OVMF boots FreeBSD's EFI loader.
pub(crate) static FREEBSD_VM: Packages = Packages {
    why: "cargo xtask freebsd-vm boots FreeBSD's EFI loader under qemu with OVMF, the \
          load/unload boot from a FAT root image (mkfs.vfat, mtools)",
    names: &["qemu-system-x86", "ovmf", "zstd", "dosfstools", "mtools"],
};

/// `cargo fuzz` builds libFuzzer, which is C++.
pub(crate) static FUZZ: Packages = Packages {
    why: "cargo fuzz compiles libFuzzer (C++)",
    names: &["g++"],
};

/// `cargo xtask fresh-check` builds a Debian root with mmdebstrap.
pub(crate) static FRESH_CHECK: Packages = Packages {
    why: "cargo xtask fresh-check builds a fresh Debian root with mmdebstrap",
    names: &["mmdebstrap"],
};

/// The kernel target of the `no_std` crates.
pub(crate) const KERNEL_TARGET: &str = "x86_64-unknown-none";
const KERNEL_TARGET_WHY: &str = "the kernel-target build of the no_std crates and ofed-shim";

/// rustup components `cargo xtask test` runs.
const COMPONENTS: &[&str] = &["clippy", "rustfmt"];
const COMPONENTS_WHY: &str = "cargo xtask test checks formatting and lints";

/// Cargo tools: (binary, crate).
const CARGO_FUZZ: (&str, &str) = ("cargo-fuzz", "cargo-fuzz");
const CARGO_FUZZ_WHY: &str = "cargo xtask fuzz runs the cargo-fuzz targets";

/// What a task is about to do.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Task {
    /// `cargo xtask demo`: build the harness, run it in the VM.
    Demo,
    /// `cargo xtask test`; `vm` false under `KRPC_RDMA_SKIP_VM=1`.
    Test { vm: bool },
    /// `cargo xtask kernel-build`.
    KernelBuild,
    /// `cargo xtask kobj`.
    Kobj,
    /// `cargo xtask kmod`: the Linux module for the VM's kernel.
    Kmod,
    /// `cargo xtask fuzz`.
    Fuzz,
    /// `cargo xtask bench-rxe`: build the harness, perftest and knfsd in the VM.
    BenchRxe,
    /// `cargo xtask vm-setup` and `cargo xtask vm`.
    Vm,
    /// `cargo xtask fresh-check` (on the outer machine).
    FreshCheck,
    /// `cargo xtask freebsd-setup` and `freebsd-kmod`.
    FreebsdSetup,
    /// `cargo xtask freebsd-vm`.
    FreebsdVm,
}

/// One thing a task needs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Need {
    Packages(&'static Packages),
    Target(&'static str),
    Components(&'static [&'static str]),
    CargoTool((&'static str, &'static str)),
    /// Debian's kernel, vmlinux and the initramfs in the VM cache.
    VmKernel,
    /// Debian's `linux-headers-KVER` for the VM cache's kernel KVER (its kbuild tree).
    KernelHeaders,
}

// The groups are statics: comparing by address is what identifies a group.
impl PartialEq for Packages {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}
impl std::fmt::Debug for Packages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.names.join(" "))
    }
}

fn needs(task: Task) -> Vec<Need> {
    use Need::*;
    match task {
        Task::Demo | Task::BenchRxe => vec![Packages(&BUILD), Packages(&VM), VmKernel],
        Task::Test { vm } => {
            let mut v = vec![
                Packages(&BUILD),
                Packages(&INSPECT),
                Target(KERNEL_TARGET),
                Components(COMPONENTS),
            ];
            if vm {
                // The VM, and kbuild of the module for its kernel (cargo xtask kmod).
                v.extend([Packages(&VM), VmKernel, Packages(&KBUILD), KernelHeaders]);
            }
            v
        }
        Task::KernelBuild => vec![Target(KERNEL_TARGET)],
        Task::Kobj => vec![Packages(&INSPECT), Target(KERNEL_TARGET)],
        Task::Kmod => vec![
            Packages(&INSPECT),
            Packages(&KBUILD),
            Target(KERNEL_TARGET),
            VmKernel,
            KernelHeaders,
        ],
        Task::Fuzz => vec![Packages(&FUZZ), CargoTool(CARGO_FUZZ)],
        Task::Vm => vec![Packages(&VM), VmKernel],
        Task::FreshCheck => vec![Packages(&FRESH_CHECK)],
        Task::FreebsdSetup => vec![
            Packages(&FREEBSD_BUILD),
            Packages(&INSPECT),
            Target(KERNEL_TARGET),
        ],
        Task::FreebsdVm => vec![Packages(&FREEBSD_VM)],
    }
}

/// How far [`ensure`] may go (`KRPC_RDMA_SETUP`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Auto,
    Check,
    Skip,
}

fn mode() -> Result<Mode, String> {
    match std::env::var("KRPC_RDMA_SETUP").as_deref() {
        Err(_) | Ok("") | Ok("auto") => Ok(Mode::Auto),
        Ok("check") => Ok(Mode::Check),
        Ok("skip") => Ok(Mode::Skip),
        Ok(other) => Err(format!(
            "KRPC_RDMA_SETUP={other:?}: expected auto, check or skip"
        )),
    }
}

macro_rules! say {
    ($($arg:tt)*) => { eprintln!("setup: {}", format_args!($($arg)*)) };
}

/// Brings the machine to what `task` needs (see the module docs). Prints nothing when
/// everything is present, one line per install step otherwise.
pub(crate) fn ensure(task: Task) -> Result<(), String> {
    let mode = mode()?;
    if mode == Mode::Skip {
        return Ok(());
    }
    let needs = needs(task);
    let missing = Missing::find(&needs)?;
    if missing.is_empty() {
        return Ok(());
    }
    if let Some(why_not) = missing.cannot_install(mode) {
        return Err(format!(
            "missing {}; {why_not}: install with `{}`, then run this again",
            missing.describe(),
            missing.install_commands()
        ));
    }
    let start = Instant::now();
    missing.install()?;
    say!("done ({:.1} s)", start.elapsed().as_secs_f64());
    Ok(())
}

/// What [`ensure`] found missing, in the order it installs it.
#[derive(Debug, Default, PartialEq)]
struct Missing {
    /// Per group, the names not installed.
    packages: Vec<(&'static Packages, Vec<&'static str>)>,
    targets: Vec<&'static str>,
    components: Vec<&'static str>,
    cargo_tools: Vec<(&'static str, &'static str)>,
    /// Why the VM cache is not ready, if it is not.
    vm_kernel: Option<String>,
    /// The kernel headers package to install, if missing.
    headers: Option<Headers>,
}

/// The VM kernel's headers package, when missing.
#[derive(Debug, PartialEq)]
enum Headers {
    /// `linux-headers-KVER`, KVER known.
    Package(String),
    /// KVER is known once the VM cache is made.
    AfterKernel,
}

/// The Debian package of the kbuild tree of kernel `kver`.
pub(crate) fn headers_package(kver: &str) -> String {
    format!("linux-headers-{kver}")
}

impl Missing {
    fn find(needs: &[Need]) -> Result<Self, String> {
        let mut m = Missing::default();
        let all_packages: Vec<&str> = needs
            .iter()
            .filter_map(|n| match n {
                Need::Packages(p) => Some(p.names),
                _ => None,
            })
            .flatten()
            .copied()
            .collect();
        let installed = if all_packages.is_empty() {
            HashSet::new()
        } else {
            installed_packages(&all_packages)?
        };
        let sysroot = if needs
            .iter()
            .any(|n| matches!(n, Need::Target(_) | Need::Components(_)))
        {
            Some(sysroot()?)
        } else {
            None
        };
        for need in needs {
            match *need {
                Need::Packages(group) => {
                    let absent: Vec<&str> = group
                        .names
                        .iter()
                        .copied()
                        .filter(|p| !installed.contains(*p))
                        .collect();
                    if !absent.is_empty() {
                        m.packages.push((group, absent));
                    }
                }
                Need::Target(t) => {
                    if let Some(root) = &sysroot {
                        if !root.join("lib/rustlib").join(t).join("lib").is_dir() {
                            m.targets.push(t);
                        }
                    }
                }
                Need::Components(list) => {
                    if let Some(root) = &sysroot {
                        for c in list {
                            if !root.join("bin").join(component_binary(c)).is_file() {
                                m.components.push(c);
                            }
                        }
                    }
                }
                Need::CargoTool(tool) => {
                    if which(tool.0).is_none() && !cargo_bin_dir().join(tool.0).is_file() {
                        m.cargo_tools.push(tool);
                    }
                }
                Need::VmKernel => {
                    if let Err(why) = Cache::from_env()?.ready() {
                        m.vm_kernel = Some(why);
                    }
                }
                Need::KernelHeaders => {
                    m.headers = match Cache::from_env()?.kver() {
                        None => Some(Headers::AfterKernel),
                        Some(kver) => {
                            let pkg = headers_package(&kver);
                            let have = installed_packages(&[pkg.as_str()])?;
                            (!have.contains(&pkg)).then_some(Headers::Package(pkg))
                        }
                    };
                }
            }
        }
        Ok(m)
    }

    fn is_empty(&self) -> bool {
        *self == Missing::default()
    }

    fn package_names(&self) -> Vec<&'static str> {
        self.packages
            .iter()
            .flat_map(|(_, names)| names.iter().copied())
            .collect()
    }

    /// Why this machine cannot install what is missing, if it cannot.
    fn cannot_install(&self, mode: Mode) -> Option<String> {
        if mode == Mode::Check {
            return Some("KRPC_RDMA_SETUP=check installs nothing".into());
        }
        let mut why = Vec::new();
        // The kernel is downloaded with apt too.
        if !self.packages.is_empty() || self.vm_kernel.is_some() || self.headers.is_some() {
            if which("apt-get").is_none() {
                why.push("no apt-get here (a Debian-like system is needed, or KRPC_RDMA_SETUP=skip with the same libraries and tools installed otherwise)");
            } else if (!self.packages.is_empty() || self.headers.is_some())
                && !is_root()
                && which("sudo").is_none()
            {
                why.push("not root and no sudo");
            }
        }
        if (!self.targets.is_empty() || !self.components.is_empty()) && which("rustup").is_none() {
            why.push("no rustup");
        }
        (!why.is_empty()).then(|| why.join(", "))
    }

    /// The missing pieces, for the one-line error.
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        let pkgs = self.package_names();
        if !pkgs.is_empty() {
            parts.push(format!("Debian packages {}", pkgs.join(" ")));
        }
        if !self.targets.is_empty() {
            parts.push(format!("rustup target {}", self.targets.join(" ")));
        }
        if !self.components.is_empty() {
            parts.push(format!("rustup components {}", self.components.join(" ")));
        }
        for (bin, _) in &self.cargo_tools {
            parts.push(format!("cargo tool {bin}"));
        }
        if let Some(why) = &self.vm_kernel {
            parts.push(format!("the VM's kernel ({why})"));
        }
        match &self.headers {
            Some(Headers::Package(p)) => parts.push(format!("Debian package {p} (kbuild)")),
            Some(Headers::AfterKernel) => {
                parts.push("the VM kernel's linux-headers package (kbuild)".into())
            }
            None => {}
        }
        parts.join(", ")
    }

    /// The commands a person would type to install what is missing.
    fn install_commands(&self) -> String {
        let sudo = if is_root() { "" } else { "sudo " };
        let mut cmds = Vec::new();
        let pkgs = self.package_names();
        if !pkgs.is_empty() {
            cmds.push(format!(
                "{sudo}apt-get update && {sudo}apt-get install -y --no-install-recommends {}",
                pkgs.join(" ")
            ));
        }
        if !self.targets.is_empty() {
            cmds.push(format!("rustup target add {}", self.targets.join(" ")));
        }
        if !self.components.is_empty() {
            cmds.push(format!(
                "rustup component add {}",
                self.components.join(" ")
            ));
        }
        for (_, krate) in &self.cargo_tools {
            cmds.push(format!("cargo install --locked {krate}"));
        }
        if self.vm_kernel.is_some() {
            cmds.push("cargo xtask vm-setup".into());
        }
        match &self.headers {
            Some(Headers::Package(p)) => cmds.push(format!(
                "{sudo}apt-get install -y --no-install-recommends {p}"
            )),
            Some(Headers::AfterKernel) => cmds.push(format!(
                "{sudo}apt-get install -y --no-install-recommends \
                 linux-headers-$(cat {}/kver)",
                Cache::from_env()
                    .map(|c| c.dir().display().to_string())
                    .unwrap_or_else(|_| "/var/tmp/krpc-rdma-vm".into())
            )),
            None => {}
        }
        cmds.join(" && ")
    }

    /// Installs everything, one announced step at a time.
    fn install(&self) -> Result<(), String> {
        if !self.packages.is_empty() {
            say!("apt-get update (package lists, to install what is missing)");
            run_quietly("apt-get update", apt_get(&["update", "-q"]))?;
            for (group, names) in &self.packages {
                say!("apt-get install {} ({})", names.join(" "), group.why);
                apt_install(names)?;
            }
            // Installing one package can remove another (bookworm's qemu-system-x86 replaces a
            // newer qemu-utils): check them all again and put back what went.
            let all = self.package_names();
            let installed = installed_packages(&all)?;
            let removed: Vec<&str> = all
                .iter()
                .copied()
                .filter(|p| !installed.contains(*p))
                .collect();
            if !removed.is_empty() {
                say!(
                    "apt-get install {} (removed by the installs above)",
                    removed.join(" ")
                );
                apt_install(&removed)?;
                let installed = installed_packages(&removed)?;
                let still: Vec<&str> = removed
                    .iter()
                    .copied()
                    .filter(|p| !installed.contains(*p))
                    .collect();
                if !still.is_empty() {
                    return Err(format!(
                        "packages still not installed after apt-get install: {}",
                        still.join(" ")
                    ));
                }
            }
        }
        if !self.targets.is_empty() {
            say!(
                "rustup target add {} ({KERNEL_TARGET_WHY})",
                self.targets.join(" ")
            );
            let mut cmd = Command::new("rustup");
            cmd.args(["target", "add"]).args(&self.targets);
            run_quietly("rustup target add", cmd)?;
        }
        if !self.components.is_empty() {
            say!(
                "rustup component add {} ({COMPONENTS_WHY})",
                self.components.join(" ")
            );
            let mut cmd = Command::new("rustup");
            cmd.args(["component", "add"]).args(&self.components);
            run_quietly("rustup component add", cmd)?;
        }
        for (bin, krate) in &self.cargo_tools {
            say!("cargo install --locked {krate} ({CARGO_FUZZ_WHY}; {bin} is not installed; a few minutes)");
            let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
            cmd.args(["install", "--locked", krate]);
            run_quietly("cargo install", cmd)?;
        }
        if let Some(why) = &self.vm_kernel {
            say!("the VM's kernel: {why}: download Debian's kernel package (not installed), extract vmlinux, build the initramfs");
            crate::vm::setup::ensure_cache(&Cache::from_env()?)?;
        }
        if let Some(h) = &self.headers {
            let pkg = match h {
                Headers::Package(p) => p.clone(),
                Headers::AfterKernel => headers_package(
                    &Cache::from_env()?
                        .kver()
                        .ok_or("the VM cache has no kernel version after vm-setup")?,
                ),
            };
            if !installed_packages(&[pkg.as_str()])?.contains(&pkg) {
                say!(
                    "apt-get install {pkg} (cargo xtask kmod: the kbuild tree of the VM's kernel)"
                );
                if self.packages.is_empty() {
                    run_quietly("apt-get update", apt_get(&["update", "-q"]))?;
                }
                apt_install(&[pkg.as_str()])?;
            }
        }
        Ok(())
    }
}

/// `apt-get ARGS`, through sudo when we are not root, never asking questions.
pub(crate) fn apt_get(args: &[&str]) -> Command {
    let mut cmd = if is_root() {
        Command::new("apt-get")
    } else {
        let mut sudo = Command::new("sudo");
        sudo.args(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]);
        sudo
    };
    cmd.env("DEBIAN_FRONTEND", "noninteractive").args(args);
    cmd
}

fn apt_install(names: &[&str]) -> Result<(), String> {
    let mut args = vec!["install", "-y", "-q", "--no-install-recommends"];
    args.extend(names);
    run_quietly("apt-get install", apt_get(&args))
}

/// The names among `names` that dpkg reports installed.
fn installed_packages(names: &[&str]) -> Result<HashSet<String>, String> {
    if which("dpkg-query").is_none() {
        return Err(format!(
            "cannot check for the Debian packages {} (no dpkg-query: this needs a Debian-like \
             system; elsewhere install their equivalents and set KRPC_RDMA_SETUP=skip)",
            names.join(" ")
        ));
    }
    // Exits 1 when it knows none of some name; what it printed for the others still counts.
    let out = Command::new("dpkg-query")
        .args(["-W", "-f", "${Package}\t${Status}\n"])
        .args(names)
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("dpkg-query: {e}"))?;
    Ok(parse_dpkg_status(&String::from_utf8_lossy(&out.stdout)))
}

/// The installed packages in `dpkg-query -W -f '${Package}\t${Status}\n'` output. A package
/// name may carry an architecture (`g++:amd64`) when dpkg is multi-arch.
fn parse_dpkg_status(text: &str) -> HashSet<String> {
    text.lines()
        .filter_map(|l| l.split_once('\t'))
        .filter(|(_, status)| status.trim() == "install ok installed")
        .map(|(name, _)| name.split(':').next().unwrap_or(name).to_string())
        .collect()
}

/// The active toolchain's sysroot (`rustc --print sysroot`).
fn sysroot() -> Result<PathBuf, String> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .current_dir(crate::root())
        .output()
        .map_err(|e| format!("{rustc} --print sysroot: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{rustc} --print sysroot failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    ))
}

/// The binary a rustup component puts in the toolchain's `bin/`.
fn component_binary(component: &str) -> &str {
    match component {
        "clippy" => "cargo-clippy",
        other => other,
    }
}

/// `$CARGO_HOME/bin` (default `~/.cargo/bin`), where `cargo install` puts tools.
fn cargo_bin_dir() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from(".cargo"))
        .join("bin")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpkg_status_counts_only_installed_and_drops_the_architecture() {
        let text = "gcc\tinstall ok installed\n\
                    g++:amd64\tinstall ok installed\n\
                    perftest\tdeinstall ok config-files\n\
                    qemu-utils\tunknown ok not-installed\n";
        let got = parse_dpkg_status(text);
        let want: HashSet<String> = ["gcc", "g++"].iter().map(|s| s.to_string()).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn each_task_needs_what_its_steps_use() {
        let has = |t: Task, n: Need| needs(t).contains(&n);
        // The README's two commands build rdma-sys and boot the VM.
        for t in [Task::Demo, Task::Test { vm: true }] {
            assert!(has(t, Need::Packages(&BUILD)), "{t:?}");
            assert!(has(t, Need::Packages(&VM)), "{t:?}");
            assert!(has(t, Need::VmKernel), "{t:?}");
        }
        let test = Task::Test { vm: true };
        assert!(has(test, Need::Target(KERNEL_TARGET)));
        assert!(has(test, Need::Packages(&INSPECT)));
        assert!(has(test, Need::Components(COMPONENTS)));
        assert!(has(test, Need::KernelHeaders));
        // Without the VM, no qemu and no kernel download (nor the module for its kernel).
        let no_vm = Task::Test { vm: false };
        assert!(!has(no_vm, Need::Packages(&VM)));
        assert!(!has(no_vm, Need::VmKernel));
        assert!(!has(no_vm, Need::KernelHeaders));
        assert!(has(no_vm, Need::Packages(&BUILD)));
        assert_eq!(needs(Task::KernelBuild), vec![Need::Target(KERNEL_TARGET)]);
        assert!(has(Task::Fuzz, Need::CargoTool(CARGO_FUZZ)));
        // The Linux module: kbuild of the VM kernel's headers, the kernel target, readelf.
        for n in [
            Need::Packages(&INSPECT),
            Need::Packages(&KBUILD),
            Need::Target(KERNEL_TARGET),
            Need::VmKernel,
            Need::KernelHeaders,
        ] {
            assert!(has(Task::Kmod, n), "{n:?}");
        }
        assert_eq!(
            headers_package("6.1.0-56-amd64"),
            "linux-headers-6.1.0-56-amd64"
        );
        // No package is listed in two groups.
        let mut seen = HashSet::new();
        for group in [&BUILD, &INSPECT, &KBUILD, &VM, &FUZZ, &FRESH_CHECK] {
            for name in group.names {
                assert!(seen.insert(*name), "{name} listed twice");
            }
        }
    }

    #[test]
    fn the_refusal_names_every_missing_piece_and_how_to_install_it() {
        let m = Missing {
            packages: vec![(&BUILD, vec!["libibverbs-dev", "librdmacm-dev"])],
            targets: vec![KERNEL_TARGET],
            components: vec!["clippy"],
            cargo_tools: vec![CARGO_FUZZ],
            vm_kernel: Some("no kernel in the cache".into()),
            headers: Some(Headers::Package("linux-headers-6.1.0-56-amd64".into())),
        };
        let what = m.describe();
        for piece in [
            "libibverbs-dev",
            "librdmacm-dev",
            KERNEL_TARGET,
            "clippy",
            "cargo-fuzz",
            "no kernel in the cache",
            "linux-headers-6.1.0-56-amd64",
        ] {
            assert!(what.contains(piece), "{piece} not in {what:?}");
        }
        let how = m.install_commands();
        assert!(
            how.contains("apt-get install -y --no-install-recommends libibverbs-dev librdmacm-dev"),
            "{how}"
        );
        assert!(
            how.contains("rustup target add x86_64-unknown-none"),
            "{how}"
        );
        assert!(how.contains("rustup component add clippy"), "{how}");
        assert!(how.contains("cargo install --locked cargo-fuzz"), "{how}");
        assert!(how.contains("cargo xtask vm-setup"), "{how}");
        assert!(!what.contains('\n') && !how.contains('\n'));
        assert_eq!(
            m.cannot_install(Mode::Check).as_deref(),
            Some("KRPC_RDMA_SETUP=check installs nothing")
        );
        assert!(Missing::default().is_empty());
        assert!(!m.is_empty());
    }
}
