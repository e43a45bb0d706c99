//! `cargo xtask fresh-check`: the README's two commands on a fresh machine, re-runnable.
//!
//! Builds a new Debian root with `mmdebstrap` (variant `minbase`; the host's release and apt
//! sources, or with `--suite` another release from Debian's mirror) holding only what a machine with Rust needs before it can run anything: gcc and
//! libc6-dev (rustc's linker; rustup itself asks for them), git and ca-certificates (to clone).
//! None of the project's system requirements is there: no libibverbs-dev, librdmacm-dev,
//! libclang-dev, pkg-config, binutils' tools beyond gcc's, qemu, rdma-core, perftest, NFS
//! packages, no VM kernel, no `x86_64-unknown-none` target, no clippy or rustfmt.
//!
//! The host's Rust toolchain comes in as an overlay (`$RUSTUP_HOME` read-only underneath, the
//! chroot's changes on top, thrown away after), with the kernel target and the clippy/rustfmt
//! components removed in the overlay so that their installation is part of the run; a fresh
//! `CARGO_HOME` holds only the rustup proxies (no registry cache, no cargo-fuzz). The repository
//! is cloned from the current commit (uncommitted changes are not part of the check). Then, in
//! the chroot, with `/proc`, `/sys` and `/dev` mounted:
//!
//! 1. as an unprivileged user without sudo, `cargo xtask demo` must stop before building
//!    anything with one line naming what is missing and how to install it (exit 1);
//! 2. as root, `cargo xtask demo`, then `cargo xtask test`: both must succeed with nothing else
//!    typed. Their times are printed at the end.
//!
//! With `--no-vm` (implied by a `--suite` other than the host's, e.g. `trixie`: the VM boots the
//! kernel of the root's release, and the rxe tests are only kept green on the host's), step 2 is
//! instead `KRPC_RDMA_SKIP_VM=1 cargo xtask test` (fmt, clippy, the workspace tests, the
//! kernel-target build, ofed-shim checks 1-3), then a plain `cargo build --workspace` without
//! xtask (so rdma-sys's bindgen runs with the libclang the release ships, unpinned).
//!
//! Needs root (mmdebstrap, mounts, chroot) and the network to Debian's archive, crates.io and
//! rustup's server. Everything lives under `--dir` (default `/var/tmp/krpc-rdma-fresh`),
//! which is removed at the end unless `--keep`.

use crate::requirements::{self, Task, KERNEL_TARGET};
use crate::vm::{is_root, run_quietly};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const HELP: &str = "\
usage: cargo xtask fresh-check [--suite SUITE] [--no-vm] [--dir DIR] [--keep]

Runs the README's two commands (cargo xtask demo, then cargo xtask test) on a clean clone of
the current commit in a fresh Debian root made with mmdebstrap (only gcc, libc6-dev, git and
ca-certificates installed; the host's Rust toolchain overlaid without the kernel target,
clippy or rustfmt), after checking that an unprivileged user without sudo gets a one-line
refusal naming what is missing. Prints the time each command took. Needs root.
  --suite S   Debian release of the fresh root (default: the host's, with its apt sources);
              another release (e.g. trixie) comes from deb.debian.org and implies --no-vm
  --no-vm     instead of demo and test: KRPC_RDMA_SKIP_VM=1 cargo xtask test (no VM), then a
              plain cargo build --workspace (no xtask, the release's own libclang)
  --dir DIR   work directory (default /var/tmp/krpc-rdma-fresh); emptied first
  --keep      leave DIR (the Debian root, the clone, its target/) for a look afterwards";

const DEFAULT_DIR: &str = "/var/tmp/krpc-rdma-fresh";
/// What the fresh root has besides `minbase`: a linker for rustc, git to clone.
const BASE_PACKAGES: &str = "ca-certificates,gcc,libc6-dev,git";
/// Where things go inside the fresh root.
const RUSTUP_IN: &str = "/opt/rustup";
const CARGO_IN: &str = "/opt/cargo";
const CLONE_IN: &str = "/srv/krpc-rdma";
/// Debian's mirror, for a release other than the host's.
const DEBIAN_MIRROR: &str = "http://deb.debian.org/debian";
const DEBIAN_SECURITY: &str = "http://deb.debian.org/debian-security";

/// What is checked in the fresh root, and where it comes from.
struct Options {
    /// Debian release (codename) of the fresh root.
    suite: String,
    /// Whether `suite` is the host's own (then the host's apt sources are used).
    host_suite: bool,
    /// No VM: the host tests and a plain `cargo build --workspace` instead of demo and test.
    no_vm: bool,
}

macro_rules! say {
    ($($arg:tt)*) => { println!("==> fresh-check: {}", format_args!($($arg)*)) };
}

/// `cargo xtask fresh-check [--suite SUITE] [--no-vm] [--dir DIR] [--keep]`.
pub(crate) fn fresh_check(args: &[String]) -> Result<(), String> {
    let mut dir = PathBuf::from(DEFAULT_DIR);
    let mut keep = false;
    let mut suite = None;
    let mut no_vm = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--dir" => {
                dir = PathBuf::from(it.next().ok_or("fresh-check: --dir needs a directory")?)
            }
            "--suite" => {
                let s = it
                    .next()
                    .ok_or("fresh-check: --suite needs a Debian codename")?;
                if s.is_empty() || !s.bytes().all(|b| b.is_ascii_lowercase() || b == b'-') {
                    return Err(format!(
                        "fresh-check: --suite {s:?} is not a Debian codename (e.g. trixie)"
                    ));
                }
                suite = Some(s.clone());
            }
            "--no-vm" => no_vm = true,
            "--keep" => keep = true,
            "-h" | "--help" => {
                println!("{HELP}");
                return Ok(());
            }
            other => return Err(format!("fresh-check: unknown argument {other:?} (--help)")),
        }
    }
    if !is_root() {
        return Err("fresh-check needs root (mmdebstrap, mounts, chroot)".into());
    }
    if !dir.is_absolute() {
        return Err(format!(
            "fresh-check: --dir {} must be absolute",
            dir.display()
        ));
    }
    let host = host_codename()?;
    let suite = suite.unwrap_or_else(|| host.clone());
    let host_suite = suite == host;
    let opts = Options {
        no_vm: no_vm || !host_suite,
        host_suite,
        suite,
    };
    requirements::ensure(Task::FreshCheck)?;
    let start = Instant::now();
    let result = run(&dir, &opts);
    // Whatever happened, nothing stays mounted.
    let unmounted = unmount_below(&dir);
    let result = result.and_then(|times| unmounted.map(|()| times));
    if result.is_ok() && !keep {
        fs::remove_dir_all(&dir).map_err(|e| format!("rm -r {}: {e}", dir.display()))?;
    }
    match &result {
        Ok((commit, times)) => {
            say!(
                "PASS in {:.0} s: {} (fresh Debian {} root, clean clone of {commit})",
                start.elapsed().as_secs_f64(),
                times.join(", "),
                opts.suite,
            );
        }
        Err(e) => say!("FAIL: {e} (left in {} for a look)", dir.display()),
    }
    result.map(|_| ())
}

/// The check itself; returns the commit it cloned and one "command time" entry per command.
fn run(dir: &Path, opts: &Options) -> Result<(String, Vec<String>), String> {
    unmount_below(dir)?;
    if dir.exists() {
        say!("emptying {}", dir.display());
        fs::remove_dir_all(dir).map_err(|e| format!("rm -r {}: {e}", dir.display()))?;
    }
    fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    let rootfs = dir.join("root");

    // 1. The Debian root.
    let suite = &opts.suite;
    let t = Instant::now();
    let mut mm = Command::new("mmdebstrap");
    mm.args(["--quiet", "--variant=minbase"])
        .arg(format!("--include={BASE_PACKAGES}"))
        .arg(suite)
        .arg(&rootfs);
    if opts.host_suite {
        say!("mmdebstrap --variant=minbase --include={BASE_PACKAGES} {suite} (the host's apt sources)");
        let sources = Path::new("/etc/apt/sources.list.d/debian.sources");
        if sources.is_file() {
            mm.arg(sources);
        } else if Path::new("/etc/apt/sources.list").is_file() {
            mm.arg("/etc/apt/sources.list");
        }
    } else {
        say!("mmdebstrap --variant=minbase --include={BASE_PACKAGES} {suite} ({DEBIAN_MIRROR})");
        mm.args(debian_sources(suite));
    }
    run_quietly("mmdebstrap", mm)?;
    trust_local_cas(&rootfs)?;
    say!("Debian root ready ({:.0} s)", t.elapsed().as_secs_f64());

    // 2. The toolchain: the host's rustup home under an overlay, a fresh CARGO_HOME.
    let rustup_home = std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".rustup")))
        .ok_or("no RUSTUP_HOME and no HOME: where is the toolchain?")?;
    let rustup_in = inside(&rootfs, RUSTUP_IN);
    for d in [
        dir.join("rustup-upper"),
        dir.join("rustup-work"),
        rustup_in.clone(),
    ] {
        fs::create_dir_all(&d).map_err(|e| format!("mkdir {}: {e}", d.display()))?;
    }
    mount(
        &[
            "-t",
            "overlay",
            "overlay",
            "-o",
            &format!(
                // redirect_dir: rustup removes a component by renaming its directories,
                // which a plain overlay refuses for lower directories (EXDEV).
                "lowerdir={},upperdir={},workdir={},redirect_dir=on",
                rustup_home.display(),
                dir.join("rustup-upper").display(),
                dir.join("rustup-work").display()
            ),
        ],
        &rustup_in,
    )?;
    copy_rustup_proxies(&inside(&rootfs, CARGO_IN).join("bin"))?;

    // 3. The clone.
    let clone = inside(&rootfs, CLONE_IN);
    let mut git = Command::new("git");
    git.args(["clone", "--quiet", "--no-local"])
        .arg(crate::root())
        .arg(&clone);
    run_quietly("git clone", git)?;
    // The clone's own HEAD: the repository's may move while the check runs.
    let commit = git_says(&[
        "-C",
        &clone.to_string_lossy(),
        "rev-parse",
        "--short",
        "HEAD",
    ])
    .filter(|s| !s.is_empty())
    .unwrap_or_else(head_commit);
    say!("cloned {commit} into {CLONE_IN}");
    if dirty() {
        say!("note: the working tree has uncommitted changes; they are not part of this check");
    }

    // 4. /proc, /sys, /dev for the chroot (qemu, apt, cargo need them).
    mount(&["-t", "proc", "proc"], &rootfs.join("proc"))?;
    mount(&["-t", "sysfs", "sysfs"], &rootfs.join("sys"))?;
    mount(&["--rbind", "/dev"], &rootfs.join("dev"))?;
    mount(&["--make-rslave"], &rootfs.join("dev")).ok();

    // 5. A rustup toolchain as a newcomer has it: no kernel target, no clippy or rustfmt.
    let mut strip = in_chroot(&rootfs, None);
    strip.args([
        "sh",
        "-c",
        &format!(
            "rustup target remove {KERNEL_TARGET} && \
             rustup component remove clippy rustfmt && \
             rustup target list --installed && rustup component list --installed"
        ),
    ]);
    let out = strip
        .output()
        .map_err(|e| format!("rustup (strip the overlay): {e}"))?;
    let listed = String::from_utf8_lossy(&out.stdout);
    if !out.status.success()
        || listed.lines().any(|l| {
            l.starts_with(KERNEL_TARGET) || l.starts_with("clippy") || l.starts_with("rustfmt")
        })
    {
        return Err(format!(
            "could not strip the toolchain overlay ({}): {}{}",
            out.status,
            listed.trim(),
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .next()
                .unwrap_or("")
        ));
    }
    say!("toolchain as a newcomer has it: no {KERNEL_TARGET} target, no clippy, no rustfmt");

    // 6. Unprivileged, no sudo: a one-line refusal before anything is built.
    refusal_check(&rootfs)?;

    // 7. The two commands (or the host checks and a plain build), as root.
    let mut times = Vec::new();
    for command in commands(opts.no_vm) {
        let t = Instant::now();
        say!("{command} (in the fresh root, {CLONE_IN})");
        let mut cmd = in_chroot(&rootfs, None);
        cmd.args(["sh", "-c", &format!("cd {CLONE_IN} && {command}")]);
        let status = cmd
            .status()
            .map_err(|e| format!("chroot: could not start: {e}"))?;
        let secs = t.elapsed().as_secs_f64();
        if !status.success() {
            return Err(format!("{command} failed ({status}) after {secs:.0} s"));
        }
        say!("{command}: ok in {secs:.0} s");
        times.push(format!("{command} {secs:.0} s"));
    }
    Ok((commit, times))
}

/// What runs as root in the fresh root, in order. Without the VM, `cargo xtask test` first (it
/// installs the build requirements), then cargo alone: nothing of xtask's environment (such as
/// a `LIBCLANG_PATH`) helps that build.
fn commands(no_vm: bool) -> &'static [&'static str] {
    if no_vm {
        &[
            "KRPC_RDMA_SKIP_VM=1 cargo xtask test",
            "cargo build --workspace",
        ]
    } else {
        &["cargo xtask demo", "cargo xtask test"]
    }
}

/// mmdebstrap's mirror arguments (sources.list lines, one suite each) for `suite` from
/// Debian's archive: the release, its updates and its security updates (main, as the host's).
fn debian_sources(suite: &str) -> [String; 3] {
    [
        format!("deb {DEBIAN_MIRROR} {suite} main"),
        format!("deb {DEBIAN_MIRROR} {suite}-updates main"),
        format!("deb {DEBIAN_SECURITY} {suite}-security main"),
    ]
}

/// As `nobody` (no sudo in the fresh root), `cargo xtask demo` must fail with one line that
/// names the missing packages and the install command, and build nothing of the workspace.
fn refusal_check(rootfs: &Path) -> Result<(), String> {
    let home = "/tmp/nobody";
    let home_out = inside(rootfs, home);
    fs::create_dir_all(&home_out).map_err(|e| format!("mkdir {}: {e}", home_out.display()))?;
    let mut chown = Command::new("chown");
    chown.args(["65534:65534"]).arg(&home_out);
    run_quietly("chown", chown)?;
    say!("as nobody without sudo: cargo xtask demo must refuse in one line");
    let mut cmd = in_chroot(rootfs, Some(home));
    cmd.args([
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "sh",
        "-c",
        &format!("cd {CLONE_IN} && cargo xtask demo"),
    ]);
    let out = cmd
        .output()
        .map_err(|e| format!("chroot: could not start: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    // cargo's own lines ("Compiling xtask", warnings) are not ours; the refusal is the one
    // line xtask prints.
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("xtask:") || l.starts_with("setup:"))
        .collect();
    let line = ours.first().copied().unwrap_or("");
    let good = !out.status.success()
        && ours.len() == 1
        && line.contains("libibverbs-dev")
        && line.contains("not root and no sudo")
        && line.contains("apt-get install")
        && !stderr.contains("Compiling rdma-sys");
    println!("    {line}");
    if good {
        say!("refusal: ok (exit {})", out.status.code().unwrap_or(-1));
        Ok(())
    } else {
        Err(format!(
            "as nobody, cargo xtask demo did not refuse in one line (status {}); stderr:\n{stderr}",
            out.status
        ))
    }
}

/// The host's locally added CA certificates (`/usr/local/share/ca-certificates`, e.g. a site's
/// TLS-inspecting proxy) into the fresh root, as that site's machines have them: without them
/// crates.io and rustup's server are unreachable from the chroot where the host reaches them.
fn trust_local_cas(rootfs: &Path) -> Result<(), String> {
    let from = Path::new("/usr/local/share/ca-certificates");
    let Ok(entries) = fs::read_dir(from) else {
        return Ok(());
    };
    let to = inside(rootfs, "/usr/local/share/ca-certificates");
    fs::create_dir_all(&to).map_err(|e| format!("mkdir {}: {e}", to.display()))?;
    let mut n = 0;
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.extension().is_some_and(|x| x == "crt") {
            fs::copy(&path, to.join(entry.file_name()))
                .map_err(|e| format!("copy {}: {e}", path.display()))?;
            n += 1;
        }
    }
    if n > 0 {
        say!("the host's {n} local CA certificate(s) added to the fresh root's trust store");
        let mut update = in_chroot(rootfs, None);
        update.arg("update-ca-certificates");
        run_quietly("update-ca-certificates", update)?;
    }
    Ok(())
}

/// A command run in the fresh root with a clean environment; `home` for an unprivileged user.
fn in_chroot(rootfs: &Path, home: Option<&str>) -> Command {
    let mut cmd = Command::new("chroot");
    let home = home.unwrap_or("/root");
    cmd.arg(rootfs)
        .args(["/usr/bin/env", "-i"])
        .arg(format!("HOME={home}"))
        .arg(format!(
            "PATH={CARGO_IN}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        ))
        .arg(format!("RUSTUP_HOME={RUSTUP_IN}"))
        .arg("LANG=C.UTF-8")
        .arg("TERM=dumb");
    if home == "/root" {
        cmd.arg(format!("CARGO_HOME={CARGO_IN}"));
    } else {
        // Its own registry and build directory; the clone and the toolchain stay root's.
        cmd.arg(format!("CARGO_HOME={home}/cargo"))
            .arg(format!("CARGO_TARGET_DIR={home}/target"));
    }
    cmd
}

/// `path` (absolute, as seen inside) under `rootfs`.
fn inside(rootfs: &Path, path: &str) -> PathBuf {
    rootfs.join(path.trim_start_matches('/'))
}

/// `rustup` and the proxies that point at it (cargo, rustc, rustfmt, …), from the host's
/// `$CARGO_HOME/bin` into `to`. Nothing else: no `cargo install`ed tool comes along.
fn copy_rustup_proxies(to: &Path) -> Result<(), String> {
    let rustup = crate::vm::which("rustup").ok_or("no rustup on PATH")?;
    let rustup = fs::canonicalize(&rustup).map_err(|e| format!("{}: {e}", rustup.display()))?;
    let from = rustup.parent().ok_or("rustup has no directory")?;
    fs::create_dir_all(to).map_err(|e| format!("mkdir {}: {e}", to.display()))?;
    fs::copy(&rustup, to.join("rustup")).map_err(|e| format!("copy rustup: {e}"))?;
    let entries = fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))?;
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        let name = entry.file_name();
        if name == "rustup" {
            continue;
        }
        let is_proxy = fs::canonicalize(&path).is_ok_and(|p| p == rustup);
        if is_proxy {
            std::os::unix::fs::symlink("rustup", to.join(&name))
                .map_err(|e| format!("symlink {}: {e}", to.join(&name).display()))?;
        }
    }
    Ok(())
}

fn mount(args: &[&str], target: &Path) -> Result<(), String> {
    let mut cmd = Command::new("mount");
    cmd.args(args).arg(target);
    run_quietly(&format!("mount {}", args.join(" ")), cmd)
}

/// Unmounts everything mounted at or below `dir`, deepest first; fails if anything stays.
fn unmount_below(dir: &Path) -> Result<(), String> {
    let below = || -> Vec<String> {
        let table = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let prefix = dir.to_string_lossy().trim_end_matches('/').to_string();
        let mut points: Vec<String> = table
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .map(|p| p.replace("\\040", " "))
            .filter(|p| *p == prefix || p.starts_with(&format!("{prefix}/")))
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        points
    };
    for point in below() {
        let _ = Command::new("umount").arg("-l").arg(&point).status();
    }
    let left = below();
    if left.is_empty() {
        Ok(())
    } else {
        Err(format!("still mounted: {}", left.join(" ")))
    }
}

/// `VERSION_CODENAME` of the host (`/etc/os-release`), e.g. `bookworm`.
fn host_codename() -> Result<String, String> {
    let text =
        fs::read_to_string("/etc/os-release").map_err(|e| format!("/etc/os-release: {e}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| "no VERSION_CODENAME in /etc/os-release: not a Debian host?".into())
}

/// What `git ARGS` in the repository prints (trimmed), if it runs.
fn git_says(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .current_dir(crate::root())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

fn head_commit() -> String {
    git_says(&["rev-parse", "--short", "HEAD"])
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "HEAD".into())
}

fn dirty() -> bool {
    git_says(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_release_comes_from_debians_mirror_one_suite_a_line() {
        assert_eq!(
            debian_sources("trixie"),
            [
                "deb http://deb.debian.org/debian trixie main",
                "deb http://deb.debian.org/debian trixie-updates main",
                "deb http://deb.debian.org/debian-security trixie-security main",
            ]
        );
    }

    #[test]
    fn without_the_vm_the_plain_build_comes_after_xtask_installed_the_requirements() {
        assert_eq!(commands(false), ["cargo xtask demo", "cargo xtask test"]);
        assert_eq!(
            commands(true),
            [
                "KRPC_RDMA_SKIP_VM=1 cargo xtask test",
                "cargo build --workspace"
            ]
        );
    }
}
