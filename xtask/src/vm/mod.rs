//! The rxe VM: runs commands over Soft-RoCE (`rdma_rxe`) on machines whose kernel has no RDMA.
//!
//! `cargo xtask vm-setup` ([`setup`]) prepares a cache outside the repository: the host packages
//! (qemu, busybox-static, kmod, the rdma-core tools, perftest), Debian's own kernel (the package
//! `linux-image-amd64` depends on, downloaded and unpacked, never installed), an uncompressed
//! ELF `vmlinux` (qemu boots it through its PVH entry point, skipping the xz decompression that
//! is slow under TCG) and a busybox initramfs.
//!
//! `cargo xtask vm -- CMD [ARGS...]` ([`run`]) boots that kernel under qemu with the host's root
//! filesystem as the guest's root (9p, read-only, under a tmpfs overlay), so the guest runs the
//! host's binaries unchanged, shares the current directory read-write at the same path, creates
//! `rxe0` on the guest's `eth0`, runs CMD there and exits with CMD's status.
//!
//! The guest half is two small shell scripts under `xtask/vm/`, compiled into xtask:
//! `initramfs-init.sh` (stage 1, `/init` of the initramfs: builds the root and switch_roots)
//! and `guest-init.sh` (stage 2, PID 1 on that root: network, rxe0, CMD, power off). Beside
//! them: `runner.sh`, a cargo runner that runs each test binary through `cargo xtask vm`, and
//! `rxe-selftest.sh`, an in-guest check (ibv_rc_pingpong, ib_send_lat, ib_write_bw loopback).
//!
//! Cache layout (`$KRPC_RDMA_VM_CACHE`, default `/var/tmp/krpc-rdma-vm`):
//!
//! | path | what |
//! |---|---|
//! | `kernel/` | the kernel package unpacked (`boot/vmlinuz-KVER`, `lib/modules/KVER` + depmod) |
//! | `kver` | KVER, e.g. `6.1.0-37-amd64` |
//! | `vmlinux` | the ELF kernel extracted from `vmlinuz` |
//! | `initramfs.cpio` | busybox, the stage-1 init, the modules to reach the 9p root |
//! | `stamp` | written last by setup: what the initramfs was built from; a mismatch means stale |

mod cpio;
pub(crate) mod run;
pub(crate) mod setup;

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Stage 1: `/init` of the initramfs (busybox sh).
pub(crate) const STAGE1: &str = include_str!("../../vm/initramfs-init.sh");
/// Stage 2: PID 1 of the guest on the host's root (the host's `/bin/sh`).
pub(crate) const STAGE2: &str = include_str!("../../vm/guest-init.sh");

/// Bumped whenever the cache's layout or the initramfs's contents change in a way the stamp
/// would not otherwise show.
const CACHE_FORMAT: u32 = 1;

/// Default cache directory (outside the repository; survives reboots, unlike /tmp).
const DEFAULT_CACHE: &str = "/var/tmp/krpc-rdma-vm";

/// Where `vm-setup` keeps the kernel, vmlinux and initramfs.
pub(crate) struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// `$KRPC_RDMA_VM_CACHE`, or `/var/tmp/krpc-rdma-vm`; made absolute (the guest sees it
    /// through the host's root).
    pub(crate) fn from_env() -> Result<Self, String> {
        let dir = std::env::var_os("KRPC_RDMA_VM_CACHE")
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from(DEFAULT_CACHE), PathBuf::from);
        let dir = if dir.is_absolute() {
            dir
        } else {
            std::env::current_dir()
                .map_err(|e| format!("current directory: {e}"))?
                .join(dir)
        };
        let text = dir.to_string_lossy();
        if text.chars().any(char::is_whitespace) || dir.to_str().is_none() {
            return Err(format!(
                "cache directory {text:?} must be UTF-8 without whitespace (KRPC_RDMA_VM_CACHE)"
            ));
        }
        Ok(Cache { dir })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
    pub(crate) fn kernel_root(&self) -> PathBuf {
        self.dir.join("kernel")
    }
    pub(crate) fn kver_file(&self) -> PathBuf {
        self.dir.join("kver")
    }
    pub(crate) fn vmlinux(&self) -> PathBuf {
        self.dir.join("vmlinux")
    }
    pub(crate) fn initramfs(&self) -> PathBuf {
        self.dir.join("initramfs.cpio")
    }
    pub(crate) fn stamp(&self) -> PathBuf {
        self.dir.join("stamp")
    }
    pub(crate) fn moddir(&self, kver: &str) -> PathBuf {
        self.kernel_root().join("lib/modules").join(kver)
    }

    /// The cached kernel version, if any.
    pub(crate) fn kver(&self) -> Option<String> {
        let kver = std::fs::read_to_string(self.kver_file()).ok()?;
        let kver = kver.trim();
        (!kver.is_empty()).then(|| kver.to_string())
    }

    /// The configuration file stage 1 reads (`/etc/krpcvm.conf` in the initramfs).
    pub(crate) fn stage1_conf(&self, kver: &str) -> String {
        format!(
            "KVER={kver}\nMODDIR={}\n",
            self.moddir(kver).to_string_lossy()
        )
    }

    /// What a complete cache for `kver` has in its stamp file: everything the initramfs is
    /// built from that can change without the kernel changing.
    pub(crate) fn expected_stamp(&self, kver: &str) -> String {
        format!(
            "krpc-rdma-vm cache format {CACHE_FORMAT}\n{}--- stage 1\n{STAGE1}",
            self.stage1_conf(kver)
        )
    }

    /// `Ok(kver)` when the cache is complete and current, else why not.
    pub(crate) fn ready(&self) -> Result<String, String> {
        let kver = self.kver().ok_or("no kernel in the cache")?;
        let stamp = std::fs::read_to_string(self.stamp()).unwrap_or_default();
        if stamp != self.expected_stamp(&kver) {
            return Err("the initramfs is missing or out of date".into());
        }
        for file in [self.vmlinux(), self.initramfs(), self.moddir(&kver)] {
            if !file.exists() {
                return Err(format!("{} is missing", file.display()));
            }
        }
        Ok(kver)
    }
}

/// Is this process root? (`/proc/self` is owned by the process's effective uid.)
pub(crate) fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `PROG` looked up in `$PATH`.
pub(crate) fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path)
        .map(|dir| dir.join(prog))
        .find(|p| p.is_file())
}

/// `PROG` in `$PATH` or, as kmod's and iproute2's tools may live in sbin directories that are
/// not on a user's `$PATH`, in `/usr/sbin` or `/sbin`.
pub(crate) fn find_tool(prog: &str) -> Option<PathBuf> {
    which(prog).or_else(|| {
        ["/usr/sbin", "/sbin"]
            .iter()
            .map(|dir| Path::new(dir).join(prog))
            .find(|p| p.is_file())
    })
}

/// Our stderr, for a child's stdout: progress and tool chatter never mix with CMD's stdout.
pub(crate) fn to_stderr() -> Stdio {
    std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map_or_else(|_| Stdio::inherit(), Stdio::from)
}

/// Runs `cmd` to completion, its stdout sent to our stderr; `what` names it in the error.
pub(crate) fn run_quietly(what: &str, mut cmd: Command) -> Result<(), String> {
    let status = cmd
        .stdout(to_stderr())
        .status()
        .map_err(|e| format!("{what}: could not start: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status}); see its output above"))
    }
}

/// `s` quoted for a POSIX shell (single quotes; `'` becomes `'\''`).
pub(crate) fn sh_quote(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() + 2);
    out.push(b'\'');
    for &b in s {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sh_quote_survives_a_real_shell() {
        use std::os::unix::ffi::OsStrExt;
        let tricky = "it's a $HOME `x` \"q\" \\ \n end";
        let mut script = b"printf %s ".to_vec();
        script.extend(sh_quote(tricky.as_bytes()));
        let out = Command::new("sh")
            .arg("-c")
            .arg(std::ffi::OsStr::from_bytes(&script))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), tricky);
    }

    #[test]
    fn stamp_covers_stage1_and_the_cache_path() {
        let a = Cache {
            dir: PathBuf::from("/a"),
        };
        let b = Cache {
            dir: PathBuf::from("/b"),
        };
        let stamp = a.expected_stamp("6.1.0-1-amd64");
        assert!(stamp.contains("MODDIR=/a/kernel/lib/modules/6.1.0-1-amd64\n"));
        assert!(stamp.ends_with(STAGE1));
        assert_ne!(stamp, b.expected_stamp("6.1.0-1-amd64"));
        assert_ne!(stamp, a.expected_stamp("6.1.0-2-amd64"));
    }
}
