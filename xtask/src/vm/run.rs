//! `cargo xtask vm -- CMD [ARGS...]`: runs CMD where there is an RDMA device.
//!
//! On a host with an RDMA device (`/sys/class/infiniband/*`), CMD simply runs on the host.
//! Otherwise it runs in a throw-away qemu VM (see the [module docs](super)): the host writes
//! a control directory (stage 2, its config, the read-write shares, the command as a shell
//! script with the host's environment and cwd), shares it with the guest over 9p, and reads
//! CMD's exit status back from it. CMD's stdout and stderr arrive on our stdout through a
//! virtio console; the guest kernel's log goes to a file, shown when the VM fails.

use super::{is_root, sh_quote, Cache};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{IsTerminal, Read, Write};
use std::net::Ipv4Addr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Exit status when the VM failed around CMD (did not boot, setup failed, no result).
pub(crate) const EXIT_VM_FAILURE: u8 = 125;
/// Exit status when `KRPC_RDMA_VM_TIMEOUT` ran out.
pub(crate) const EXIT_TIMEOUT: u8 = 124;
/// Exit status for a bad command line or knob.
const EXIT_USAGE: u8 = 2;

/// The guest's address on eth0 (qemu's user-mode network; `restrict=on`: nothing leaves it).
const GUEST_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 15);
const GUEST_PREFIX: u8 = 24;
/// eth0's MAC address unless `KRPC_RDMA_VM_MAC` or `KRPC_RDMA_VM_IP` choose another.
const GUEST_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];

/// The help text of `cargo xtask vm`, also printed by `cargo xtask help`.
pub(crate) const HELP: &str = "\
vm -- CMD [ARGS...]   run CMD over Soft-RoCE: in a qemu VM (Debian's kernel, rdma_rxe) with
                      rxe0 up, the host's root read-only (tmpfs overlay), the current directory
                      shared read-write at the same path; or on the host if it has an RDMA
                      device. CMD runs in the same cwd with the host's environment, memlock
                      unlimited, RXE_DEV=rxe0, RXE_GID_INDEX (RoCE v2 GID of RXE_IP) and
                      RXE_IP (10.0.2.15, or KRPC_RDMA_VM_IP). Its stdout+stderr go to our
                      stdout. Exit status: CMD's; 125 if the VM failed; 124 on timeout. Runs
                      vm-setup first if the cache is missing or stale. As a cargo runner (each
                      test binary in a VM):
                      CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER=$PWD/xtask/vm/runner.sh
                      Check rxe: cargo xtask vm -- xtask/vm/rxe-selftest.sh (pingpong, perftest)
vm-setup              prepare the VM (idempotent): apt-get the host packages (qemu, busybox-static,
                      kmod, rdma-core tools, perftest, knfsd), download+unpack Debian's kernel
                      (not installed), extract an ELF vmlinux, build the initramfs

vm knobs (environment):
  KRPC_RDMA_VM=auto|force|host  auto: the host if /sys/class/infiniband has a device, else the
                                VM; force: always the VM; host: always the host
  KRPC_RDMA_VM_MEM=MiB          guest memory (2048)
  KRPC_RDMA_VM_CPUS=N           guest vCPUs (2)
  KRPC_RDMA_VM_TIMEOUT=SECONDS  kill the VM after this long, exit 124 (3600)
  KRPC_RDMA_VM_VERBOSE=1        guest kernel log (and boot progress) live on stderr
  KRPC_RDMA_VM_ACCEL=auto|kvm|tcg  auto: TCG if the host's KVM is kvm_pvm or /dev/kvm is not
                                usable, else KVM
  KRPC_RDMA_VM_MTU=BYTES        eth0 MTU (1500 -> rxe MTU 1024; 9000 -> 4096)
  KRPC_RDMA_VM_IP=A.B.C.D[/N]   eth0's IPv4 address and prefix length (10.0.2.15/24)
  KRPC_RDMA_VM_MAC=XX:..:XX     eth0's MAC (52:54:00:12:34:56; with KRPC_RDMA_VM_IP set:
                                52:54:00 and the address's last three bytes)
  KRPC_RDMA_VM_PEER=PORT:PEER   eth0 on a qemu UDP socket netdev, 127.0.0.1:PORT to
                                127.0.0.1:PEER, instead of the user-mode network: two VMs
                                started in parallel with the ports swapped and different
                                KRPC_RDMA_VM_IP are wired back to back, and rxe traffic
                                between them crosses eth0 (xtask/vm/two-vm-nfs4.sh)
  KRPC_RDMA_VM_PCAP=FILE        qemu's filter-dump writes every frame eth0 sends or receives
                                to FILE (pcap, on the host); rxe loopback inside one VM
                                never reaches eth0: use with KRPC_RDMA_VM_PEER
  KRPC_RDMA_VM_RW=DIR[:DIR...]  more host directories shared read-write at the same path
  KRPC_RDMA_VM_CACHE=DIR        kernel/initramfs cache (/var/tmp/krpc-rdma-vm)
  KRPC_RDMA_SETUP=auto|check|skip  every task: install what is missing (auto), only check and
                                stop with the install command (check), or check nothing (skip)";

/// Where CMD runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Place {
    Auto,
    Vm,
    Host,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Accel {
    Kvm,
    Tcg,
}

/// The knobs, read from the environment.
struct Knobs {
    place: Place,
    mem_mib: u32,
    cpus: u32,
    timeout: Duration,
    verbose: bool,
    accel: Option<Accel>,
    mtu: Option<u32>,
    rw: Vec<PathBuf>,
    net: Net,
}

/// eth0: its address, and what qemu connects it to (`KRPC_RDMA_VM_IP`, `_MAC`, `_PEER`,
/// `_PCAP`).
#[derive(Clone, Debug, PartialEq)]
struct Net {
    ip: Ipv4Addr,
    prefix: u8,
    mac: [u8; 6],
    /// Our UDP port and the peer VM's, both on 127.0.0.1; `None`: qemu's user-mode network.
    peer: Option<(u16, u16)>,
    /// Where qemu's filter-dump writes eth0's frames.
    pcap: Option<PathBuf>,
}

impl Default for Net {
    fn default() -> Self {
        Net {
            ip: GUEST_IP,
            prefix: GUEST_PREFIX,
            mac: GUEST_MAC,
            peer: None,
            pcap: None,
        }
    }
}

impl Net {
    /// The knobs' values (unset or empty: `None`).
    fn parse(
        ip: Option<&str>,
        mac: Option<&str>,
        peer: Option<&str>,
        pcap: Option<&str>,
    ) -> Result<Self, String> {
        let mut net = Net::default();
        if let Some(v) = ip {
            let (addr, prefix) = v.split_once('/').unwrap_or((v, "24"));
            net.ip = addr
                .parse()
                .map_err(|_| format!("KRPC_RDMA_VM_IP must be A.B.C.D[/N], got {v:?}"))?;
            net.prefix = prefix
                .parse()
                .ok()
                .filter(|p| (1..=30).contains(p))
                .ok_or_else(|| format!("KRPC_RDMA_VM_IP: prefix length 1..30, got {v:?}"))?;
            let [_, b, c, d] = net.ip.octets();
            net.mac = [0x52, 0x54, 0x00, b, c, d];
        }
        if let Some(v) = mac {
            let bytes: Vec<u8> = v
                .split(':')
                .map(|x| u8::from_str_radix(x, 16).ok().filter(|_| x.len() == 2))
                .collect::<Option<_>>()
                .unwrap_or_default();
            net.mac = <[u8; 6]>::try_from(bytes)
                .ok()
                // Unicast (the multicast bit clear).
                .filter(|m| m[0] & 1 == 0)
                .ok_or_else(|| {
                    format!("KRPC_RDMA_VM_MAC must be a unicast XX:XX:XX:XX:XX:XX, got {v:?}")
                })?;
        }
        if let Some(v) = peer {
            let port = |p: &str| p.parse::<u16>().ok().filter(|n| *n != 0);
            net.peer = v
                .split_once(':')
                .and_then(|(a, b)| Some((port(a)?, port(b)?)))
                .filter(|(a, b)| a != b)
                .map(Some)
                .ok_or_else(|| {
                    format!("KRPC_RDMA_VM_PEER must be PORT:PEERPORT (two UDP ports), got {v:?}")
                })?;
        }
        net.pcap = pcap.map(PathBuf::from);
        Ok(net)
    }

    fn mac_string(&self) -> String {
        self.mac
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    }

    /// qemu's `-netdev` value.
    fn netdev(&self) -> String {
        match self.peer {
            None => "user,id=n0,restrict=on".into(),
            Some((port, peer)) => {
                format!("socket,id=n0,udp=127.0.0.1:{peer},localaddr=127.0.0.1:{port}")
            }
        }
    }

    /// What differs from the default, for the start line ("" when nothing does).
    fn describe(&self) -> String {
        if *self == Net::default() {
            return String::new();
        }
        let mut s = format!("; eth0 {}/{} {}", self.ip, self.prefix, self.mac_string());
        if let Some((port, peer)) = self.peer {
            s.push_str(&format!(" on UDP 127.0.0.1:{port} <-> 127.0.0.1:{peer}"));
        }
        if let Some(p) = &self.pcap {
            s.push_str(&format!(", frames to {}", p.display()));
        }
        s
    }
}

fn env_str(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn env_num(name: &str, default: u32, min: u32) -> Result<u32, String> {
    match env_str(name) {
        None => Ok(default),
        Some(v) => v
            .parse::<u32>()
            .ok()
            .filter(|n| *n >= min)
            .ok_or_else(|| format!("{name} must be a whole number >= {min}, got {v:?}")),
    }
}

impl Knobs {
    fn from_env() -> Result<Self, String> {
        let place = match env_str("KRPC_RDMA_VM").as_deref() {
            None | Some("auto") => Place::Auto,
            Some("force") | Some("vm") => Place::Vm,
            Some("host") => Place::Host,
            Some(other) => {
                return Err(format!(
                    "KRPC_RDMA_VM must be auto, force or host, got {other:?}"
                ))
            }
        };
        let accel = match env_str("KRPC_RDMA_VM_ACCEL").as_deref() {
            None | Some("auto") => None,
            Some("kvm") => Some(Accel::Kvm),
            Some("tcg") => Some(Accel::Tcg),
            Some(other) => {
                return Err(format!(
                    "KRPC_RDMA_VM_ACCEL must be auto, kvm or tcg, got {other:?}"
                ))
            }
        };
        let mtu = match env_str("KRPC_RDMA_VM_MTU") {
            None => None,
            Some(_) => Some(env_num("KRPC_RDMA_VM_MTU", 1500, 576)?),
        };
        let rw = std::env::var_os("KRPC_RDMA_VM_RW")
            .map(|v| {
                std::env::split_paths(&v)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        Ok(Knobs {
            place,
            mem_mib: env_num("KRPC_RDMA_VM_MEM", 2048, 256)?,
            cpus: env_num("KRPC_RDMA_VM_CPUS", 2, 1)?,
            timeout: Duration::from_secs(env_num("KRPC_RDMA_VM_TIMEOUT", 3600, 1)?.into()),
            verbose: env_str("KRPC_RDMA_VM_VERBOSE").is_some_and(|v| v != "0"),
            accel,
            mtu,
            rw,
            net: Net::parse(
                env_str("KRPC_RDMA_VM_IP").as_deref(),
                env_str("KRPC_RDMA_VM_MAC").as_deref(),
                env_str("KRPC_RDMA_VM_PEER").as_deref(),
                env_str("KRPC_RDMA_VM_PCAP").as_deref(),
            )?,
        })
    }
}

/// `cargo xtask vm [--] CMD [ARGS...]`: returns the exit status to exit with.
pub(crate) fn vm(args: &[OsString]) -> u8 {
    let cmd = match args.split_first() {
        Some((first, rest)) if first == "--" => rest,
        Some((first, _)) if first == "-h" || first == "--help" => {
            println!("usage: cargo xtask {HELP}");
            return 0;
        }
        _ => args,
    };
    if cmd.is_empty() {
        eprintln!("xtask vm: no command; usage: cargo xtask vm -- CMD [ARGS...]");
        return EXIT_USAGE;
    }
    let knobs = match Knobs::from_env() {
        Ok(k) => k,
        Err(msg) => {
            eprintln!("xtask vm: {msg}");
            return EXIT_USAGE;
        }
    };
    let sysfs = Path::new("/sys/class/infiniband");
    let devices = rdma_devices(sysfs);
    let on_host = match knobs.place {
        Place::Host => true,
        Place::Vm => false,
        Place::Auto => !devices.is_empty(),
    };
    let result = if on_host {
        run_on_host(cmd, sysfs, &devices, &knobs)
    } else {
        run_in_vm(cmd, &knobs)
    };
    result.unwrap_or_else(|msg| {
        eprintln!("xtask vm: {msg}");
        EXIT_VM_FAILURE
    })
}

// ---- on the host ----------------------------------------------------------------------------

/// The RDMA devices the host's kernel has, sorted.
fn rdma_devices(sysfs: &Path) -> Vec<String> {
    let mut devices: Vec<String> = fs::read_dir(sysfs)
        .map(|dir| {
            dir.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    devices.sort();
    devices
}

/// The lowest-numbered RoCE v2 GID of `port` (a `ports/N` directory) that carries an IPv4
/// address: its index and the address.
fn roce_v2_ipv4_gid(port: &Path) -> Option<(u32, Ipv4Addr)> {
    let mut found: Option<(u32, Ipv4Addr)> = None;
    for entry in fs::read_dir(port.join("gids")).ok()?.filter_map(Result::ok) {
        let Some(index) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if found.is_some_and(|(best, _)| best < index) {
            continue;
        }
        let Some(ip) = fs::read_to_string(entry.path())
            .ok()
            .and_then(|gid| ipv4_of_gid(gid.trim()))
        else {
            continue;
        };
        let kind = fs::read_to_string(port.join("gid_attrs/types").join(index.to_string()));
        if kind.is_ok_and(|k| k.trim() == "RoCE v2") {
            found = Some((index, ip));
        }
    }
    found
}

/// `0000:0000:0000:0000:0000:ffff:0a00:020f` -> 10.0.2.15 (an IPv4-mapped GID).
fn ipv4_of_gid(gid: &str) -> Option<Ipv4Addr> {
    let tail = gid.strip_prefix("0000:0000:0000:0000:0000:ffff:")?;
    let (hi, lo) = tail.split_once(':')?;
    let hi = u16::from_str_radix(hi, 16).ok()?;
    let lo = u16::from_str_radix(lo, 16).ok()?;
    Some(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)))
}

fn run_on_host(
    cmd: &[OsString],
    sysfs: &Path,
    devices: &[String],
    knobs: &Knobs,
) -> Result<u8, String> {
    let (prog, args) = cmd.split_first().ok_or("no command")?;
    let mut child = Command::new(prog);
    child.args(args);
    let mut chosen = String::new();
    if std::env::var_os("RXE_DEV").is_none() {
        // The first device with a RoCE v2 IPv4 GID on port 1, as the VM would export it.
        let gid = devices.iter().find_map(|dev| {
            roce_v2_ipv4_gid(&sysfs.join(dev).join("ports/1")).map(|(i, ip)| (dev, i, ip))
        });
        if let Some((dev, index, ip)) = gid {
            child
                .env("RXE_DEV", dev)
                .env("RXE_GID_INDEX", index.to_string())
                .env("RXE_IP", ip.to_string());
            chosen = format!("; RXE_DEV={dev} RXE_GID_INDEX={index} RXE_IP={ip}");
        }
    }
    if devices.is_empty() {
        eprintln!("xtask vm: KRPC_RDMA_VM=host: running on the host, which has no RDMA device");
    } else {
        eprintln!(
            "xtask vm: this host has RDMA devices ({}): running on the host{chosen} \
             (KRPC_RDMA_VM=force for the VM)",
            devices.join(", ")
        );
    }
    let mut child = child
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", prog.to_string_lossy()))?;
    match wait_until(&mut child, Instant::now() + knobs.timeout)? {
        Some(status) => Ok(status_code(status)),
        None => {
            eprintln!(
                "xtask vm: timed out after {} s (KRPC_RDMA_VM_TIMEOUT)",
                knobs.timeout.as_secs()
            );
            Ok(EXIT_TIMEOUT)
        }
    }
}

/// A shell-style exit status: the code, or 128 + the signal that killed it.
fn status_code(status: ExitStatus) -> u8 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .and_then(|c| u8::try_from(c & 0xff).ok())
        .unwrap_or(EXIT_VM_FAILURE)
}

/// Waits for `child` until `deadline`; kills it then and returns `None`.
fn wait_until(child: &mut Child, deadline: Instant) -> Result<Option<ExitStatus>, String> {
    loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("wait: {e}"))? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

// ---- in the VM ------------------------------------------------------------------------------

/// The per-run control directory, shared with the guest; removed when dropped.
struct ControlDir(PathBuf);

impl ControlDir {
    fn create() -> Result<Self, String> {
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = base.join(format!("krpc-rdma-vm.{}.{nanos}", std::process::id()));
        fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        Ok(ControlDir(dir))
    }

    fn write(&self, name: &str, data: &[u8]) -> Result<(), String> {
        let path = self.0.join(name);
        fs::write(&path, data).map_err(|e| format!("write {}: {e}", path.display()))
    }

    fn read(&self, name: &str) -> Option<String> {
        fs::read_to_string(self.0.join(name)).ok()
    }
}

impl Drop for ControlDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// TCG when the host's KVM cannot run Debian's kernel (`kvm_pvm`, a paravirtual nested
/// hypervisor that only runs PVM guests) or `/dev/kvm` cannot be opened; else KVM.
fn pick_accel() -> Accel {
    let kvm_usable = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    if Path::new("/sys/module/kvm_pvm").exists() || !kvm_usable {
        Accel::Tcg
    } else {
        Accel::Kvm
    }
}

/// A path as a qemu option value (`,` doubled).
fn qemu_path(path: &Path) -> Result<String, String> {
    path.to_str()
        .map(|s| s.replace(',', ",,"))
        .ok_or_else(|| format!("path {} is not UTF-8", path.display()))
}

/// Environment variables not carried into the guest: the guest's own, or ones that would lie.
const ENV_SKIP: &[&str] = &[
    "PWD",
    "OLDPWD",
    "SHLVL",
    "_",
    "HOSTNAME",
    "RXE_DEV",
    "RXE_GID_INDEX",
    "RXE_IP",
];

fn is_shell_name(name: &OsStr) -> bool {
    let b = name.as_bytes();
    b.first()
        .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// The guest's `cmd.sh`: the host's environment, its cwd, then `exec CMD`.
fn command_script(
    env: impl IntoIterator<Item = (OsString, OsString)>,
    cwd: &Path,
    tty: bool,
    cmd: &[OsString],
) -> Vec<u8> {
    let mut env: Vec<(OsString, OsString)> = env
        .into_iter()
        .filter(|(k, _)| is_shell_name(k))
        .filter(|(k, _)| !ENV_SKIP.iter().any(|s| k == s))
        // TERM describes our terminal; without one, CMD's output is a pipe as it would be here.
        .filter(|(k, _)| tty || k != "TERM")
        .collect();
    env.sort();
    let mut s = b"# written by cargo xtask vm: the host's environment and cwd, then CMD\n".to_vec();
    for (k, v) in &env {
        s.extend_from_slice(b"export ");
        s.extend_from_slice(k.as_bytes());
        s.push(b'=');
        s.extend(sh_quote(v.as_bytes()));
        s.push(b'\n');
    }
    s.extend_from_slice(b"cd ");
    s.extend(sh_quote(cwd.as_os_str().as_bytes()));
    s.extend_from_slice(b" || exit 125\nexec");
    for arg in cmd {
        s.push(b' ');
        s.extend(sh_quote(arg.as_bytes()));
    }
    s.push(b'\n');
    s
}

/// The read-write shares, parents before children, without duplicates or `/`.
fn shares(cwd: &Path, extra: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut dirs = vec![cwd.to_path_buf()];
    for dir in extra {
        dirs.push(
            fs::canonicalize(dir)
                .map_err(|e| format!("KRPC_RDMA_VM_RW: {}: {e}", dir.display()))?,
        );
    }
    dirs.retain(|d| d != Path::new("/"));
    for d in &dirs {
        if d.as_os_str().as_bytes().contains(&b'\n') {
            return Err(format!("cannot share {:?}: newline in the path", d));
        }
    }
    dirs.sort_by_key(|d| d.components().count());
    let mut unique: Vec<PathBuf> = Vec::new();
    for d in dirs {
        if !unique.contains(&d) {
            unique.push(d);
        }
    }
    Ok(unique)
}

fn run_in_vm(cmd: &[OsString], knobs: &Knobs) -> Result<u8, String> {
    // The host packages the guest uses and the kernel cache: present, or installed now.
    crate::requirements::ensure(crate::requirements::Task::Vm)?;
    let cache = Cache::from_env()?;
    let kver = match cache.ready() {
        Ok(kver) => kver,
        Err(why) => {
            eprintln!("xtask vm: {why}: running vm-setup");
            super::setup::ensure_cache(&cache).map_err(|e| format!("vm-setup failed: {e}"))?
        }
    };
    let accel = knobs.accel.unwrap_or_else(pick_accel);
    eprintln!(
        "xtask vm: no RDMA device on this host: running in a VM ({}, {} vCPUs, {} MiB, \
         kernel {kver}{})",
        match accel {
            Accel::Kvm => "KVM",
            Accel::Tcg => "TCG",
        },
        knobs.cpus,
        knobs.mem_mib,
        knobs.net.describe()
    );

    let start = Instant::now();
    let cwd = std::env::current_dir().map_err(|e| format!("current directory: {e}"))?;
    let tty = std::io::stdout().is_terminal();
    let ctl = ControlDir::create()?;
    ctl.write("guest-init.sh", super::STAGE2.as_bytes())?;
    ctl.write(
        "config",
        format!(
            "KRPCVM_IP={}\nKRPCVM_PREFIX={}\nKRPCVM_MTU={}\nKRPCVM_TTY={}\n",
            knobs.net.ip,
            knobs.net.prefix,
            knobs.mtu.map(|m| m.to_string()).unwrap_or_default(),
            u8::from(tty)
        )
        .as_bytes(),
    )?;
    ctl.write(
        "cmd.sh",
        &command_script(std::env::vars_os(), &cwd, tty, cmd),
    )?;

    // passthrough keeps the guest's (root's) ownership on created files, which needs root
    // here; "none" makes them ours.
    let model = if is_root() { "passthrough" } else { "none" };
    let mut qemu = Command::new("qemu-system-x86_64");
    match accel {
        Accel::Kvm => qemu.args(["-accel", "kvm", "-cpu", "host"]),
        Accel::Tcg => qemu.args(["-accel", "tcg,thread=multi", "-cpu", "max"]),
    };
    qemu.args(["-m", &knobs.mem_mib.to_string()])
        .args(["-smp", &knobs.cpus.to_string()])
        .args(["-nodefaults", "-no-user-config", "-display", "none"])
        .arg("-no-reboot")
        .arg("-kernel")
        .arg(cache.vmlinux())
        .arg("-initrd")
        .arg(cache.initramfs())
        .arg("-append")
        .arg(format!(
            "console=ttyS0 panic=-1 {}{}",
            if knobs.verbose { "loglevel=7" } else { "quiet" },
            // TCG's vCPUs have unsynchronised TSCs, so the guest falls back to the HPET: every
            // clock_gettime becomes an emulated MMIO read (~15 % of a small-call benchmark's
            // samples). The TSC is reliable enough for a test guest and keeps clock reads in
            // the vDSO, as on hardware (perftest reads the TSC directly either way).
            if accel == Accel::Tcg {
                " tsc=reliable"
            } else {
                ""
            }
        ))
        // ttyS0: the kernel's log and the init stages' progress, into a file.
        .arg("-chardev")
        .arg(format!(
            "file,id=log,path={}",
            qemu_path(&ctl.0.join("console.log"))?
        ))
        .args(["-serial", "chardev:log"])
        // hvc0: CMD's output, to our stdout.
        .args(["-device", "virtio-serial-pci"])
        .args(["-chardev", "stdio,id=out"])
        .args(["-device", "virtconsole,chardev=out"])
        .arg("-virtfs")
        .arg(format!(
            "local,path=/,mount_tag=hostroot,security_model={model},readonly=on,multidevs=remap"
        ))
        .arg("-virtfs")
        .arg(format!(
            "local,path={},mount_tag=krpcvmctl,security_model={model}",
            qemu_path(&ctl.0)?
        ));
    let mut mounts = String::new();
    for (i, dir) in shares(&cwd, &knobs.rw)?.iter().enumerate() {
        qemu.arg("-virtfs").arg(format!(
            "local,path={},mount_tag=rw{i},security_model={model},multidevs=remap",
            qemu_path(dir)?
        ));
        mounts.push_str(&format!("rw{i} {}\n", dir.to_string_lossy()));
    }
    ctl.write("mounts", mounts.as_bytes())?;
    qemu.args(["-netdev", &knobs.net.netdev()]).args([
        "-device",
        &format!(
            "virtio-net-pci,netdev=n0,mac={},romfile=",
            knobs.net.mac_string()
        ),
    ]);
    if let Some(pcap) = &knobs.net.pcap {
        // Relative to our cwd, as the user meant it (qemu's cwd is ours too, but say so).
        let pcap = cwd.join(pcap);
        qemu.arg("-object").arg(format!(
            "filter-dump,id=dump0,netdev=n0,file={},maxlen=65535",
            qemu_path(&pcap)?
        ));
    }
    qemu.args(["-device", "virtio-rng-pci"]);

    let qemu_err = ctl.0.join("qemu.err");
    let err_file =
        fs::File::create(&qemu_err).map_err(|e| format!("{}: {e}", qemu_err.display()))?;
    let mut child = qemu
        .stdin(Stdio::null())
        .stderr(err_file)
        .spawn()
        .map_err(|e| format!("cannot start qemu-system-x86_64: {e}"))?;

    let deadline = start + knobs.timeout;
    let stop = AtomicBool::new(false);
    let waited = std::thread::scope(|s| {
        if knobs.verbose {
            s.spawn(|| follow(&ctl.0.join("console.log"), &stop));
        }
        let waited = wait_until(&mut child, deadline);
        stop.store(true, Ordering::Relaxed);
        waited
    })?;
    let _ = std::io::stdout().flush();

    if let Some(rc) = ctl.read("rc").and_then(|s| s.trim().parse::<u8>().ok()) {
        if knobs.verbose {
            eprintln!(
                "xtask vm: CMD exited with status {rc}; boot to power-off {:.1} s",
                start.elapsed().as_secs_f64()
            );
        }
        return Ok(rc);
    }
    let rc = match waited {
        None => {
            eprintln!(
                "xtask vm: timed out after {} s (KRPC_RDMA_VM_TIMEOUT)",
                knobs.timeout.as_secs()
            );
            EXIT_TIMEOUT
        }
        Some(status) => {
            eprintln!("xtask vm: the VM ended without a result (qemu: {status})");
            EXIT_VM_FAILURE
        }
    };
    if let Some(err) = ctl.read("qemu.err").filter(|e| !e.trim().is_empty()) {
        eprintln!("---- qemu stderr ----\n{}", err.trim_end());
    }
    if let Some(err) = ctl.read("setup-error") {
        eprintln!("xtask vm: guest setup error: {}", err.trim());
    }
    if !knobs.verbose {
        let log = ctl.read("console.log").unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines
            .get(lines.len().saturating_sub(40)..)
            .unwrap_or_default();
        eprintln!("---- guest console (last {} lines) ----", tail.len());
        for line in tail {
            eprintln!("{line}");
        }
    }
    Ok(rc)
}

/// Copies what is appended to `path` to our stderr until `stop` (and then the rest).
fn follow(path: &Path, stop: &AtomicBool) {
    let mut file = None;
    let mut buf = [0u8; 8192];
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        if file.is_none() {
            file = fs::File::open(path).ok();
        }
        if let Some(f) = file.as_mut() {
            while let Ok(n) = f.read(&mut buf) {
                match buf.get(..n) {
                    Some(chunk) if n > 0 => {
                        let _ = std::io::stderr().write_all(chunk);
                    }
                    _ => break,
                }
            }
        }
        if stopping {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_script_carries_env_cwd_and_quoted_args() {
        let env = [
            ("PATH", "/usr/bin:/bin"),
            ("ODD", "it's"),
            ("PWD", "/elsewhere"),
            ("RXE_DEV", "mlx5_0"),
            ("TERM", "xterm"),
            ("not-a-name", "x"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let cmd = ["sh", "-c", "echo \"$ODD\" $0; exit 3"].map(OsString::from);
        let script = command_script(env, Path::new("/tmp"), false, &cmd);
        let text = String::from_utf8(script.clone()).unwrap();
        assert!(text.contains("export PATH='/usr/bin:/bin'\n"), "{text}");
        assert!(!text.contains("PWD") && !text.contains("RXE_DEV") && !text.contains("TERM"));
        assert!(!text.contains("not-a-name"));
        assert!(
            text.ends_with("cd '/tmp' || exit 125\nexec 'sh' '-c' 'echo \"$ODD\" $0; exit 3'\n")
        );
        // And a real shell runs it as meant.
        let out = Command::new("sh")
            .arg("-c")
            .arg(OsStr::from_bytes(&script))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(String::from_utf8(out.stdout).unwrap(), "it's sh\n");
    }

    #[test]
    fn ipv4_gids_parse() {
        assert_eq!(
            ipv4_of_gid("0000:0000:0000:0000:0000:ffff:0a00:020f"),
            Some(Ipv4Addr::new(10, 0, 2, 15))
        );
        assert_eq!(ipv4_of_gid("fe80:0000:0000:0000:5054:00ff:fe12:3456"), None);
    }

    #[test]
    fn host_gid_lookup_picks_roce_v2_ipv4() {
        let dir = std::env::temp_dir().join(format!("xtask-gid-test.{}", std::process::id()));
        let port = dir.join("mlx5_0/ports/1");
        fs::create_dir_all(port.join("gids")).unwrap();
        fs::create_dir_all(port.join("gid_attrs/types")).unwrap();
        let entries = [
            (0, "fe80:0000:0000:0000:5054:00ff:fe12:3456", "IB/RoCE v1"),
            (1, "fe80:0000:0000:0000:5054:00ff:fe12:3456", "RoCE v2"),
            (2, "0000:0000:0000:0000:0000:ffff:c0a8:0102", "IB/RoCE v1"),
            (3, "0000:0000:0000:0000:0000:ffff:c0a8:0102", "RoCE v2"),
            (4, "0000:0000:0000:0000:0000:0000:0000:0000", ""),
        ];
        for (i, gid, kind) in entries {
            fs::write(port.join("gids").join(i.to_string()), format!("{gid}\n")).unwrap();
            fs::write(
                port.join("gid_attrs/types").join(i.to_string()),
                format!("{kind}\n"),
            )
            .unwrap();
        }
        assert_eq!(rdma_devices(&dir), ["mlx5_0"]);
        assert_eq!(
            roce_v2_ipv4_gid(&port),
            Some((3, Ipv4Addr::new(192, 168, 1, 2)))
        );
        fs::remove_dir_all(&dir).unwrap();
        assert!(rdma_devices(&dir).is_empty());
    }

    #[test]
    fn shares_are_sorted_parents_first_without_root_or_duplicates() {
        let tmp = fs::canonicalize(std::env::temp_dir()).unwrap();
        let cwd = Path::new("/work/main/krpc-rdma");
        let got = shares(cwd, &[tmp.clone(), "/".into(), tmp.clone()]).unwrap();
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got.contains(&tmp) && got.contains(&cwd.to_path_buf()));
        assert!(got
            .windows(2)
            .all(|w| w[0].components().count() <= w[1].components().count()));
    }

    #[test]
    fn net_knobs_parse() {
        // Nothing set: qemu's user-mode network, 10.0.2.15/24, the usual MAC, no capture.
        let none = Net::parse(None, None, None, None).unwrap();
        assert_eq!(none, Net::default());
        assert_eq!(none.netdev(), "user,id=n0,restrict=on");
        assert_eq!(none.mac_string(), "52:54:00:12:34:56");
        assert_eq!(none.describe(), "");

        // One VM of a back-to-back pair: the MAC follows the address.
        let srv = Net::parse(
            Some("10.0.3.1"),
            None,
            Some("12050:12049"),
            Some("/tmp/x.pcap"),
        )
        .unwrap();
        assert_eq!(
            (srv.ip, srv.prefix, srv.mac_string().as_str()),
            (Ipv4Addr::new(10, 0, 3, 1), 24, "52:54:00:00:03:01")
        );
        assert_eq!(
            srv.netdev(),
            "socket,id=n0,udp=127.0.0.1:12049,localaddr=127.0.0.1:12050"
        );
        assert_eq!(srv.pcap.as_deref(), Some(Path::new("/tmp/x.pcap")));
        assert!(srv
            .describe()
            .contains("10.0.3.1/24 52:54:00:00:03:01 on UDP"));

        // A prefix, and a MAC of one's own.
        let cli = Net::parse(
            Some("192.168.7.2/16"),
            Some("02:00:00:AA:bb:0c"),
            None,
            None,
        )
        .unwrap();
        assert_eq!(
            (cli.prefix, cli.mac_string()),
            (16, "02:00:00:aa:bb:0c".into())
        );

        for (ip, mac, peer) in [
            (Some("10.0.3"), None, None),
            (Some("10.0.3.1/33"), None, None),
            (Some("10.0.3.1/"), None, None),
            (None, Some("52:54:00:00:03"), None),
            (None, Some("01:00:5e:00:00:01"), None), // multicast
            (None, Some("52:54:00:00:03:1"), None),
            (None, None, Some("12049")),
            (None, None, Some("12049:12049")),
            (None, None, Some("0:12049")),
            (None, None, Some("12049:70000")),
        ] {
            assert!(
                Net::parse(ip, mac, peer, None).is_err(),
                "{ip:?} {mac:?} {peer:?}"
            );
        }
    }

    #[test]
    fn status_codes_are_shell_like() {
        assert_eq!(status_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(status_code(ExitStatus::from_raw(9)), 137);
    }
}
