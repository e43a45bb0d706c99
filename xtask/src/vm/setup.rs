//! `cargo xtask vm-setup`: the host packages (through [`crate::requirements`], which lists
//! them), Debian's kernel, vmlinux and the initramfs.
//!
//! Idempotent: each step checks what is already there and says what it did. Progress goes to
//! stderr (setup also runs from `cargo xtask vm`, whose stdout is the command's).

use super::cpio::Cpio;
use super::{find_tool, run_quietly, Cache, STAGE1};
use crate::requirements::{self, apt_get, Task};
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The metapackage whose dependency names the current kernel package.
const KERNEL_META: &str = "linux-image-amd64";

/// Modules stage 1 loads to reach the host's root: virtio PCI, 9p over virtio, overlayfs.
const STAGE1_MODULES: &[&str] = &["virtio_pci", "9pnet_virtio", "9p", "overlay"];

macro_rules! progress {
    ($($arg:tt)*) => { eprintln!("vm-setup: {}", format_args!($($arg)*)) };
}

/// `cargo xtask vm-setup`.
pub(crate) fn vm_setup() -> Result<(), String> {
    let start = Instant::now();
    requirements::ensure(Task::Vm)?;
    let cache = Cache::from_env()?;
    let kver = ensure_cache(&cache)?;
    progress!(
        "ok: kernel {kver}, cache {} ({:.1} s)",
        cache.dir().display(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Brings the cache up to date (kernel, vmlinux, initramfs); returns the kernel version. The
/// host packages are [`requirements`]' business.
pub(crate) fn ensure_cache(cache: &Cache) -> Result<String, String> {
    fs::create_dir_all(cache.dir())
        .map_err(|e| format!("cannot create {}: {e}", cache.dir().display()))?;
    let kver = ensure_kernel(cache)?;
    ensure_vmlinux(cache, &kver)?;
    let stamp = cache.expected_stamp(&kver);
    let current = fs::read_to_string(cache.stamp()).unwrap_or_default();
    if current != stamp || !cache.initramfs().exists() {
        build_initramfs(cache, &kver)?;
        write_atomically(&cache.stamp(), stamp.as_bytes())?;
    } else {
        progress!("initramfs: up to date");
    }
    Ok(kver)
}

// ---- kernel -------------------------------------------------------------------------------

/// The kernel package named by `apt-cache depends linux-image-amd64`.
fn parse_kernel_dep(text: &str) -> Option<&str> {
    text.lines()
        .filter_map(|l| l.trim().trim_start_matches('|').strip_prefix("Depends:"))
        .map(str::trim)
        .find(|p| {
            p.strip_prefix("linux-image-")
                .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
        })
}

fn resolve_kernel_package() -> Result<String, String> {
    let query = || {
        let mut cmd = Command::new("apt-cache");
        cmd.args(["depends", KERNEL_META]).stderr(Stdio::null());
        cmd.output().ok().and_then(|out| {
            parse_kernel_dep(&String::from_utf8_lossy(&out.stdout)).map(str::to_string)
        })
    };
    if let Some(pkg) = query() {
        return Ok(pkg);
    }
    // No package lists yet (a fresh machine): fetch them once.
    progress!("apt-get update (to resolve {KERNEL_META})");
    run_quietly("apt-get update", apt_get(&["update", "-q"]))?;
    query().ok_or_else(|| {
        format!("cannot resolve the kernel package {KERNEL_META} depends on (apt-cache depends {KERNEL_META})")
    })
}

fn ensure_kernel(cache: &Cache) -> Result<String, String> {
    let pkg = resolve_kernel_package()?;
    let kver = pkg.trim_start_matches("linux-image-").to_string();
    let moddir = cache.moddir(&kver);
    if cache.kver().as_deref() == Some(&kver) && moddir.join("modules.dep").exists() {
        progress!("kernel {kver}: cached");
        return Ok(kver);
    }
    // Whatever was there is for another kernel (or incomplete): drop it first.
    for stale in [
        cache.stamp(),
        cache.kver_file(),
        cache.vmlinux(),
        cache.initramfs(),
    ] {
        remove_file_if_exists(&stale)?;
    }
    let dl = cache.dir().join("download");
    remove_dir_if_exists(&dl)?;
    fs::create_dir_all(&dl).map_err(|e| format!("cannot create {}: {e}", dl.display()))?;
    // apt downloads as the unprivileged _apt user: it must be able to write there.
    fs::set_permissions(&dl, fs::Permissions::from_mode(0o777))
        .map_err(|e| format!("chmod {}: {e}", dl.display()))?;
    progress!("kernel {kver}: apt-get download {pkg}");
    let mut download = Command::new("apt-get");
    download.args(["download", "-q", &pkg]).current_dir(&dl);
    run_quietly("apt-get download", download)?;
    let deb = fs::read_dir(&dl)
        .map_err(|e| format!("{}: {e}", dl.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or_else(|| format!("apt-get download {pkg} left no .deb in {}", dl.display()))?;

    progress!("kernel {kver}: dpkg-deb -x, depmod");
    let unpacked = cache.dir().join("kernel.new");
    remove_dir_if_exists(&unpacked)?;
    let mut extract = Command::new("dpkg-deb");
    extract.arg("-x").arg(&deb).arg(&unpacked);
    run_quietly("dpkg-deb -x", extract)?;
    if !unpacked.join("lib/modules").join(&kver).is_dir() {
        return Err(format!("{pkg} has no lib/modules/{kver}"));
    }
    remove_dir_if_exists(&cache.kernel_root())?;
    fs::rename(&unpacked, cache.kernel_root())
        .map_err(|e| format!("rename {}: {e}", unpacked.display()))?;
    // The package ships no modules.dep (its postinst runs depmod).
    let mut depmod = Command::new(find_tool("depmod").unwrap_or_else(|| "depmod".into()));
    depmod.arg("-b").arg(cache.kernel_root()).arg(&kver);
    run_quietly("depmod", depmod)?;
    remove_dir_if_exists(&dl)?;
    write_atomically(&cache.kver_file(), format!("{kver}\n").as_bytes())?;
    Ok(kver)
}

// ---- vmlinux ------------------------------------------------------------------------------

/// The xz stream header.
const XZ_MAGIC: &[u8] = b"\xfd7zXZ\x00";

/// Decompresses the first xz stream of `input` (anything after it is ignored) with `xz`.
fn xz_decompress(input: &[u8]) -> Result<Vec<u8>, String> {
    let mut child = Command::new("xz")
        .args(["-dc", "--single-stream"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("xz: could not start: {e}"))?;
    let stdin = child.stdin.take();
    let out = std::thread::scope(|s| {
        s.spawn(move || {
            if let Some(mut stdin) = stdin {
                // A write error means xz stopped early; its status says why.
                let _ = stdin.write_all(input);
            }
        });
        child.wait_with_output()
    })
    .map_err(|e| format!("xz: {e}"))?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(format!(
            "xz -d failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn ensure_vmlinux(cache: &Cache, kver: &str) -> Result<(), String> {
    let out = cache.vmlinux();
    if out.exists() {
        progress!("vmlinux: cached");
        return Ok(());
    }
    let vmlinuz = cache.kernel_root().join(format!("boot/vmlinuz-{kver}"));
    let image = fs::read(&vmlinuz).map_err(|e| format!("{}: {e}", vmlinuz.display()))?;
    let elf = image
        .windows(XZ_MAGIC.len())
        .position(|w| w == XZ_MAGIC)
        .and_then(|off| image.get(off..))
        .ok_or_else(|| format!("{}: no xz payload", vmlinuz.display()))
        .and_then(xz_decompress)?;
    if !elf.starts_with(b"\x7fELF") {
        return Err(format!(
            "{}: the xz payload is not an ELF vmlinux",
            vmlinuz.display()
        ));
    }
    write_atomically(&out, &elf)?;
    progress!(
        "vmlinux: extracted from vmlinuz ({} MiB ELF, booted via PVH)",
        elf.len() >> 20
    );
    Ok(())
}

// ---- initramfs ----------------------------------------------------------------------------

/// `virtio-pci` from `kernel/drivers/virtio/virtio_pci.ko.xz`: modprobe's name of a module.
fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split(".ko").next().unwrap_or(file);
    stem.replace('-', "_")
}

/// The modules to insmod, in order, so that `wanted` are loaded: paths relative to the
/// modules directory, each after everything it depends on. Built-in modules need nothing.
fn module_load_order(
    modules_dep: &str,
    modules_builtin: &str,
    wanted: &[&str],
) -> Result<Vec<String>, String> {
    let mut deps: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut by_name: HashMap<String, &str> = HashMap::new();
    for line in modules_dep.lines() {
        if let Some((path, rest)) = line.split_once(':') {
            deps.insert(path, rest.split_whitespace().collect());
            by_name.insert(module_name(path), path);
        }
    }
    let builtin: HashSet<String> = modules_builtin.lines().map(module_name).collect();

    fn visit<'a>(
        path: &'a str,
        deps: &HashMap<&'a str, Vec<&'a str>>,
        seen: &mut HashSet<&'a str>,
        order: &mut Vec<String>,
    ) {
        if !seen.insert(path) {
            return;
        }
        for dep in deps.get(path).into_iter().flatten() {
            visit(dep, deps, seen, order);
        }
        order.push(path.to_string());
    }

    let mut seen = HashSet::new();
    let mut order = Vec::new();
    for name in wanted {
        let name = name.replace('-', "_");
        if builtin.contains(&name) {
            continue;
        }
        let path = by_name
            .get(&name)
            .ok_or_else(|| format!("module {name} is neither in modules.dep nor built in"))?;
        visit(path, &deps, &mut seen, &mut order);
    }
    Ok(order)
}

fn build_initramfs(cache: &Cache, kver: &str) -> Result<(), String> {
    let moddir = cache.moddir(kver);
    let read_text = |name: &str| {
        let path = moddir.join(name);
        fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
    };
    let modules = module_load_order(
        &read_text("modules.dep")?,
        &read_text("modules.builtin").unwrap_or_default(),
        STAGE1_MODULES,
    )?;
    let busybox_path = Path::new("/bin/busybox");
    let busybox = fs::read(busybox_path)
        .map_err(|e| format!("{}: {e} (install busybox-static)", busybox_path.display()))?;

    let mut cpio = Cpio::new();
    for dir in [
        "bin", "dev", "etc", "lower", "modules", "newroot", "proc", "sys", "upper",
    ] {
        cpio.dir(dir, 0o755)?;
    }
    // The kernel opens /dev/console for init's stdin/stdout/stderr before init runs.
    cpio.char_dev("dev/console", 0o600, 5, 1)?;
    cpio.file("bin/busybox", 0o755, &busybox)?;
    cpio.symlink("bin/sh", "busybox")?;
    cpio.file("etc/krpcvm.conf", 0o644, cache.stage1_conf(kver).as_bytes())?;
    cpio.file("init", 0o755, STAGE1.as_bytes())?;
    let mut order = String::new();
    for rel in &modules {
        let path = moddir.join(rel);
        let data = fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let data = if rel.ends_with(".ko.xz") {
            xz_decompress(&data)?
        } else if rel.ends_with(".ko") {
            data
        } else {
            return Err(format!("{rel}: only .ko and .ko.xz modules are supported"));
        };
        let file = format!("{}.ko", module_name(rel));
        cpio.file(&format!("modules/{file}"), 0o644, &data)?;
        order.push_str(&file);
        order.push('\n');
    }
    cpio.file("modules/order", 0o644, order.as_bytes())?;
    let bytes = cpio.finish()?;
    write_atomically(&cache.initramfs(), &bytes)?;
    progress!(
        "initramfs: busybox + {} modules ({}), {} KiB",
        modules.len(),
        order.trim_end().replace('\n', " "),
        bytes.len() >> 10
    );
    Ok(())
}

// ---- files --------------------------------------------------------------------------------

/// Writes `path` through a temporary file and a rename: readers never see half a file.
fn write_atomically(path: &Path, data: &[u8]) -> Result<(), String> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    fs::write(&tmp, data).map_err(|e| format!("write {}: {e}", tmp.display()))?;
    fs::rename(&tmp, path).map_err(|e| format!("rename to {}: {e}", path.display()))
}

fn remove_file_if_exists(path: &Path) -> Result<(), String> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("rm {}: {e}", path.display()))
        }
        _ => Ok(()),
    }
}

fn remove_dir_if_exists(path: &Path) -> Result<(), String> {
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("rm -r {}: {e}", path.display()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_dep_is_found_among_other_depends() {
        let text = "linux-image-amd64\n  Depends: linux-image-6.1.0-37-amd64\n  \
                    Depends: linux-image-6.1.0-37-amd64-unsigned\n";
        assert_eq!(parse_kernel_dep(text), Some("linux-image-6.1.0-37-amd64"));
        let alt = "linux-image-amd64\n |Depends: linux-image-6.12.9-amd64\n";
        assert_eq!(parse_kernel_dep(alt), Some("linux-image-6.12.9-amd64"));
        assert_eq!(
            parse_kernel_dep("linux-image-amd64\n  Depends: linux-base\n"),
            None
        );
    }

    #[test]
    fn module_names_follow_modprobe() {
        assert_eq!(
            module_name("kernel/drivers/virtio/virtio_pci.ko"),
            "virtio_pci"
        );
        assert_eq!(
            module_name("kernel/net/9p/9pnet-virtio.ko.xz"),
            "9pnet_virtio"
        );
        assert_eq!(module_name("overlay.ko"), "overlay");
    }

    #[test]
    fn load_order_puts_dependencies_first_once_and_skips_builtins() {
        let dep = "\
kernel/fs/9p/9p.ko: kernel/fs/netfs/netfs.ko kernel/net/9p/9pnet.ko kernel/fs/fscache/fscache.ko
kernel/fs/netfs/netfs.ko: kernel/fs/fscache/fscache.ko
kernel/fs/fscache/fscache.ko:
kernel/net/9p/9pnet.ko:
kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_ring.ko
";
        let builtin = "kernel/fs/overlayfs/overlay.ko\n";
        let order = module_load_order(dep, builtin, STAGE1_MODULES).unwrap();
        let pos = |m: &str| order.iter().position(|p| p.ends_with(m)).unwrap();
        assert_eq!(order.len(), 7, "{order:?}");
        assert!(pos("/virtio_ring.ko") < pos("/virtio_pci.ko"));
        assert!(pos("/9pnet.ko") < pos("/9pnet_virtio.ko"));
        assert!(pos("/fscache.ko") < pos("/netfs.ko"));
        assert!(pos("/netfs.ko") < pos("/9p.ko"));
        assert!(!order.iter().any(|p| p.contains("overlay")));
        assert!(module_load_order(dep, builtin, &["nope"]).is_err());
    }
}
