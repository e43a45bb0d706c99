//! Project tasks, run as `cargo xtask <task>`.
//!
//! Every task first brings the machine to what it needs ([`requirements::ensure`]: Debian
//! packages, the rustup target and components, cargo-fuzz, the VM's kernel), one announced line
//! per step, or stops with one line naming what is missing and the command that installs it.
//!
//! * `test`: everything CI checks (format, clippy, the workspace tests, the kernel-target
//!   build of the no_std crates, the transport over libibverbs on rxe0 in the VM, NFSv3 interop
//!   with knfsd, ofed-shim/check.sh, the Linux module's in-kernel self-test in the VM). This is
//!   the README's test command.
//! * `demo`: `userspace-harness demo` over rxe0 in the VM (WRITE/READ with DDP, verified),
//!   NFSv3 over RDMA to knfsd, then sample headers through `userspace-harness decode`.
//! * `kernel-build`: `cargo build --release --target x86_64-unknown-none` of the no_std crates.
//! * `kmod`: `krpc_rdma.ko` for the VM's Linux kernel with the in-kernel self-test (see
//!   [`kmod`](mod@kmod)).
//! * `bench-rxe [--out FILE]`: harness vs perftest vs the kernel NFS/RDMA client, one VM boot.
//! * `bench-kernel [--out FILE]`: the Linux NFS client against knfsd, our kernel server and our
//!   userspace server, one VM boot.
//! * `fuzz [SECONDS]`: runs each cargo-fuzz target (header decoder, nfs-proto decoders, the
//!   Responder and the Requester against a hostile peer) SECONDS.
//! * `vm-setup`: prepares the rxe VM (host packages, Debian's kernel, vmlinux, initramfs) in a
//!   cache outside the repository; idempotent.
//! * `vm -- CMD [ARGS...]`: runs CMD over Soft-RoCE: in a qemu VM running Debian's kernel with
//!   `rdma_rxe` and `rxe0` up (the host's root read-only, the cwd read-write), or on the host if
//!   it has an RDMA device; exits with CMD's status. Also a cargo runner (`xtask/vm/runner.sh`).
//!   See [`vm`] and `cargo xtask help` for the knobs.
//! * `fresh-check [--suite SUITE] [--no-vm] [--dir DIR] [--keep]`: the newcomer's path, proven:
//!   `demo` then `test` on a clean clone in a fresh Debian root (mmdebstrap) with none of the
//!   requirements present; on another release (`--suite trixie`) the host checks and a plain
//!   `cargo build --workspace`.
//! * `freebsd-setup`, `freebsd-kmod`, `freebsd-vm`: FreeBSD 14.2 built from source, the module
//!   built by its `bsd.kmod.mk` and loaded in its kernel under qemu (see [`freebsd`]).

mod bench_kernel;
mod bench_rxe;
mod freebsd;
mod fresh_check;
mod kmod;
mod kobj;
mod requirements;
mod vm;

use requirements::Task;

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use requirements::KERNEL_TARGET;
const KERNEL_CRATES: &[&str] = &[
    "mbuf",
    "krpc-rdma",
    "onc-rpc",
    "nfs-proto",
    "nfs-service",
    "nfs-pagefs",
    "harness-rpc",
];

const USAGE: &str = "\
usage: cargo xtask <task>

Each task installs what it needs first (apt through sudo when not root, rustup, cargo install),
one line per step, or stops with one line naming what is missing and how to install it
(KRPC_RDMA_SETUP, below).

tasks:
test                  everything CI checks: fmt, clippy, the workspace tests, kernel-target build,
                      the transport over rxe0 in the VM, NFSv3 interop with knfsd, ofed-shim checks,
                      krpc_rdma.ko's in-kernel self-test in the VM
demo                  harness server + client over rxe0 in the VM, NFSv3 to knfsd, header decoding
kernel-build          the kernel-target build of the no_std crates (x86_64-unknown-none)
kobj                  the Rust half of the kernel module as one relocation-clean object
                      (target/kmod/krpc_rdma_rs.o: GOT references rewritten, checked)
kmod                  krpc_rdma.ko for the VM's Linux kernel (kbuild, Debian's linux-headers),
                      with the in-kernel self-test: target/kmod/linux/krpc_rdma.ko; load it with
                      cargo xtask vm -- sh -c 'modprobe rdma_cm && insmod target/kmod/linux/krpc_rdma.ko selftest=1 rdma_addr=$RXE_IP'
fuzz [SECONDS]        run each fuzz target: header decoder, nfs-proto decoders, the Responder
                      and the Requester against a hostile peer's script (60 s each)
bench-rxe [--out F]   harness vs perftest and the kernel NFS/RDMA client on rxe0, one VM boot
bench-kernel [--out F] the Linux NFS/RDMA client against knfsd, krpc_rdma.ko's NFSv3 server
                      and userspace-harness nfsd, side by side in one VM boot
fresh-check [--suite S] [--no-vm] [--dir D] [--keep]
                      root only: demo then test on a clean clone in a fresh Debian root
                      (--suite trixie: another release; host checks and a plain cargo build)
freebsd-setup         FreeBSD 14.2's kernel (INVARIANTS, WITNESS), modules and EFI loader, built
                      from source (FREEBSD_SRC, or FREEBSD_KPI_MIRROR at FREEBSD_COMMIT) with
                      make.py and clang 19: one image in /var/tmp/krpc-rdma-freebsd
                      (KRPC_RDMA_FREEBSD_CACHE); FREEBSD_PATCHES=1: freebsd/patches/ applied,
                      in /var/tmp/krpc-rdma-freebsd-nfs (KRPC_RDMA_FREEBSD_NFS_CACHE)
freebsd-kmod          krpc_rdma.ko (+ krpc_rdma_kldtest.ko) for that kernel by bsd.kmod.mk
                      (target/kmod/freebsd/krpc_rdma.ko)
freebsd-vm            boot the image under qemu: self-test + face test, then 20 load/unload
                      cycles; then, when the patched image exists, FreeBSD's NFS over the
                      transport in it; check the consoles (part of test when an image exists)";

fn main() -> ExitCode {
    let args_os: Vec<OsString> = std::env::args_os().skip(1).collect();
    let args: Vec<String> = args_os
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let result = match args.first().map(String::as_str) {
        // `vm` exits with the command's own status.
        Some("vm") => return ExitCode::from(vm::run::vm(args_os.get(1..).unwrap_or_default())),
        Some("vm-setup") => vm::setup::vm_setup(),
        Some("test") => test(),
        Some("kernel-build") => kernel_build(),
        Some("kobj") => kobj().map(|_| ()),
        Some("kmod") => kmod::kmod(&root()).map(|_| ()),
        Some("demo") => demo(),
        Some("fuzz") => fuzz(args.get(1).map(String::as_str)),
        Some("bench-rxe") => bench_rxe::bench_rxe(args.get(1..).unwrap_or_default()),
        Some("bench-kernel") => bench_kernel::bench_kernel(args.get(1..).unwrap_or_default()),
        Some("fresh-check") => fresh_check::fresh_check(args.get(1..).unwrap_or_default()),
        Some("freebsd-setup") => freebsd::setup(),
        Some("freebsd-kmod") => freebsd::kmod().map(|_| ()),
        Some("freebsd-vm") => freebsd::vm(),
        Some("help") | Some("--help") | Some("-h") | None => {
            println!("{USAGE}\n{}", vm::run::HELP);
            Ok(())
        }
        Some(other) => Err(format!(
            "unknown task {other:?}; expected test, demo, kernel-build, kobj, kmod, fuzz, \
             bench-rxe, bench-kernel, vm-setup, vm, fresh-check, freebsd-setup, freebsd-kmod or freebsd-vm \
             (cargo xtask help)"
        )),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("xtask: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

/// Runs one step, printing its name and duration; a failure names the step.
fn step(name: &str, mut cmd: Command) -> Result<(), String> {
    println!("==> {name}");
    let _ = std::io::stdout().flush();
    let start = Instant::now();
    let status = cmd
        .status()
        .map_err(|e| format!("{name}: could not start: {e}"))?;
    let secs = start.elapsed().as_secs_f64();
    if status.success() {
        println!("==> {name}: ok ({secs:.1} s)");
        Ok(())
    } else {
        Err(format!("{name}: failed ({status}) after {secs:.1} s"))
    }
}

fn test() -> Result<(), String> {
    let start = Instant::now();
    requirements::ensure(Task::Test { vm: vm_enabled() })?;
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    step("cargo fmt --check", fmt)?;

    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    step("cargo clippy -D warnings", clippy)?;

    let mut tests = cargo();
    tests.args(["test", "--workspace", "--release"]);
    step("cargo test --workspace --release", tests)?;

    kernel_build()?;
    kobj()?;
    rxe_tests()?;
    ofed_shim_checks()?;
    kmod_selftest()?;
    kmod_peers()?;
    kmod_nfsd()?;
    freebsd::patch_check()?;
    if vm_enabled() {
        freebsd::vm()?;
    } else {
        println!("==> FreeBSD kernel under qemu: SKIPPED (KRPC_RDMA_SKIP_VM=1)");
    }
    println!(
        "==> all checks passed in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The end-to-end scenarios over real verbs: the transport over the libibverbs provider on
/// Soft-RoCE `rxe0`, inside the VM (or on the host when it has an RDMA device).
/// `KRPC_RDMA_SKIP_VM=1` skips them, loudly, for machines without qemu.
fn rxe_tests() -> Result<(), String> {
    // The test binaries that need rxe0: userspace-harness's (the last three also knfsd) and
    // krpc-rdma-nfsd's (the Linux kernel NFS client mounting our server, and locking on it),
    // krpc-rdma-verbs's (the listener's connection limit).
    const TESTS: &[&str] = &[
        "verbs_rxe",
        "cli_rxe",
        "knfsd_rxe",
        "nfs3_rxe",
        "nfs4_rxe",
        "linux_client_rxe",
        "linux_locks_rxe",
        "accept_limit_rxe",
    ];
    let mut test_args: Vec<&str> = vec![
        "test",
        "--release",
        "-p",
        "userspace-harness",
        "-p",
        "krpc-rdma-nfsd",
        "-p",
        "krpc-rdma-verbs",
    ];
    for t in TESTS {
        test_args.extend(["--test", t]);
    }
    let name = format!(
        "verbs over rxe0 and knfsd interop (cargo xtask vm -- cargo {})",
        test_args.join(" ")
    );
    if !vm_enabled() {
        println!("==> {name}: SKIPPED (KRPC_RDMA_SKIP_VM=1): nothing ran over RDMA");
        return Ok(());
    }
    // Build on the host (fast), so the VM only runs the test binaries.
    let mut build = cargo();
    build.args(&test_args).arg("--no-run");
    step(&format!("build {}", TESTS.join(", ")), build)?;
    let args: Vec<OsString> = std::iter::once("cargo")
        .chain(test_args.iter().copied())
        .chain(["--", "--test-threads=1"])
        .map(OsString::from)
        .collect();
    // Inside the VM a missing device must fail the tests, not skip them.
    std::env::set_var("KRPC_RDMA_REQUIRE_RDMA", "1");
    vm_step(&name, &args)
}

/// `ofed-shim/check.sh`: the kernel staticlib builds, its undefined symbols are all
/// allowlisted, it holds no floating-point/SIMD instruction, and (in the VM) the shim's C
/// wrappers run the core's end-to-end scenarios over rxe0 through the KPI emulation.
fn ofed_shim_checks() -> Result<(), String> {
    let vm = vm_enabled();
    let mut cmd = Command::new("sh");
    cmd.current_dir(root()).arg("ofed-shim/check.sh");
    if vm {
        cmd.env("OFED_SHIM_VM", "1");
    }
    let name = if vm {
        "ofed-shim checks 1-4 (staticlib, symbol allowlist, no FP/SIMD, shim over rxe0 in the VM)"
    } else {
        "ofed-shim checks 1-3 (KRPC_RDMA_SKIP_VM=1: the shim over rxe0 SKIPPED)"
    };
    step(name, cmd)
}

/// Cycles of insmod/self-test/rmmod `cargo xtask test` runs (`ofed-shim/linux/selftest-vm.sh`
/// runs 20 by default). Each self-test run takes ~45 s in a TCG guest (the suite over the soft
/// provider, then over the kernel's verbs on rxe0); 2 cycles are 3 runs (one through debugfs).
const KMOD_TEST_CYCLES: &str = "2";

/// `cargo xtask kmod`, then the module's in-kernel self-test in the VM: insmod with
/// `selftest=1 rdma_addr=$RXE_IP` (soft provider and kernel verbs on rxe0), a run through
/// debugfs, rmmod, [`KMOD_TEST_CYCLES`] times; `rdma resource show` unchanged after every
/// rmmod and the kernel log checked (`ofed-shim/linux/selftest-vm.sh`).
fn kmod_selftest() -> Result<(), String> {
    let name = format!(
        "krpc_rdma.ko in-kernel self-test, {KMOD_TEST_CYCLES} cycles \
         (cargo xtask vm -- sh ofed-shim/linux/selftest-vm.sh {KMOD_TEST_CYCLES})"
    );
    if !vm_enabled() {
        println!("==> kmod and {name}: SKIPPED (KRPC_RDMA_SKIP_VM=1: the module is built for the VM's kernel)");
        return Ok(());
    }
    kmod::kmod(&root())?;
    stack_frames()?;
    let args: Vec<OsString> = ["sh", "ofed-shim/linux/selftest-vm.sh", KMOD_TEST_CYCLES]
        .iter()
        .map(OsString::from)
        .collect();
    vm_step(&name, &args)
}

/// Run `args` in the VM from the repository's root as the step `name`.
fn vm_step(name: &str, args: &[OsString]) -> Result<(), String> {
    println!("==> {name}");
    let start = Instant::now();
    std::env::set_current_dir(root()).map_err(|e| format!("{name}: cd: {e}"))?;
    let code = vm::run::vm(args);
    let secs = start.elapsed().as_secs_f64();
    if code == 0 {
        println!("==> {name}: ok ({secs:.1} s)");
        Ok(())
    } else {
        Err(format!("{name}: failed (exit {code}) after {secs:.1} s"))
    }
}

/// The module against real peers in the VM (`ofed-shim/linux/peers-vm.sh`): the kernel
/// Requester against `userspace-harness server`, the kernel Responder serving `userspace-harness
/// client`, each one insmod, then `rdma resource show` and the kernel log checked. Runs after
/// [`kmod_selftest`] (which built the module).
fn kmod_peers() -> Result<(), String> {
    let name = "krpc_rdma.ko against real peers (cargo xtask vm -- sh ofed-shim/linux/peers-vm.sh)";
    harness_vm_step(name, &["ofed-shim/linux/peers-vm.sh"])
}

/// Workload runs of `ofed-shim/linux/nfsd-vm.sh` in `cargo xtask test` (CI's shorter list).
const KMOD_NFSD_RUNS: &str = "2";

/// The module's NFSv3 server mounted by the Linux client over RDMA
/// (`ofed-shim/linux/nfsd-vm.sh`): [`KMOD_NFSD_RUNS`] runs of the short workload list, each
/// result read back through the mount and compared; rmmod refused while mounted; a clean
/// unload. Runs after [`kmod_selftest`] (which built the module).
fn kmod_nfsd() -> Result<(), String> {
    let name = format!(
        "krpc_rdma.ko's NFSv3 server mounted by the Linux client \
         (cargo xtask vm -- sh ofed-shim/linux/nfsd-vm.sh {KMOD_NFSD_RUNS} short)"
    );
    harness_vm_step(
        &name,
        &["ofed-shim/linux/nfsd-vm.sh", KMOD_NFSD_RUNS, "short"],
    )
}

/// `cargo build --release -p userspace-harness`, then `sh SCRIPT ARGS…` in the VM with
/// `HARNESS=` naming that binary, as the step `name` (skipped under `KRPC_RDMA_SKIP_VM=1`).
fn harness_vm_step(name: &str, script: &[&str]) -> Result<(), String> {
    if !vm_enabled() {
        println!("==> {name}: SKIPPED (KRPC_RDMA_SKIP_VM=1)");
        return Ok(());
    }
    let mut build = cargo();
    build.args(["build", "--release", "-p", "userspace-harness"]);
    step("cargo build --release -p userspace-harness", build)?;
    let harness = cargo_target_dir().join("release").join("userspace-harness");
    let mut h = OsString::from("HARNESS=");
    h.push(harness.as_os_str());
    let mut args: Vec<OsString> = vec!["env".into(), h, "sh".into()];
    args.extend(script.iter().map(OsString::from));
    vm_step(name, &args)
}

/// The module's stack frames: no function of the .ko above 1 KiB, none exempt
/// (`krpc-rdma/benches/stack.sh` says what it measures).
fn stack_frames() -> Result<(), String> {
    let mut cmd = Command::new("sh");
    cmd.arg("krpc-rdma/benches/stack.sh")
        .arg(kmod::ko_path(&root()))
        .arg("1024")
        .current_dir(root());
    step(
        "stack frames of krpc_rdma.ko, none above 1 KiB (sh krpc-rdma/benches/stack.sh)",
        cmd,
    )
}

/// False under `KRPC_RDMA_SKIP_VM=1`: `cargo xtask test` then runs nothing in the VM.
fn vm_enabled() -> bool {
    std::env::var_os("KRPC_RDMA_SKIP_VM").is_none_or(|v| v != "1")
}

fn kernel_build() -> Result<(), String> {
    requirements::ensure(Task::KernelBuild)?;
    let mut build = cargo();
    build.args(["build", "--release", "--target", KERNEL_TARGET]);
    for krate in KERNEL_CRATES {
        build.args(["-p", krate]);
    }
    step(
        &format!(
            "kernel-target build ({KERNEL_TARGET}: {})",
            KERNEL_CRATES.join(", ")
        ),
        build,
    )?;
    // The kernel-only code (the self-test's kernel-verbs fixture and peer runs, the FreeBSD
    // face test's Rust side) is compiled only for the kernel target: lint it there, also
    // where no kernel module is built (no FreeBSD image, no VM).
    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--release",
        "--target",
        KERNEL_TARGET,
        "-p",
        "krpc-rdma-kmod",
        "--features",
        "selftest,face",
        "--",
        "-D",
        "warnings",
    ]);
    step(
        &format!(
            "cargo clippy -D warnings ({KERNEL_TARGET}: krpc-rdma-kmod, features selftest,face)"
        ),
        clippy,
    )
}

/// Build the kernel staticlib (`krpc-rdma-kmod`: the `ofed-shim` crates) for [`KERNEL_TARGET`] with `features`; its path.
///
/// # Errors
/// The build failed.
pub(crate) fn kernel_staticlib(features: &[&str]) -> Result<PathBuf, String> {
    let mut build = cargo();
    build.args([
        "build",
        "--release",
        "--target",
        KERNEL_TARGET,
        "-p",
        "krpc-rdma-kmod",
    ]);
    let what = if features.is_empty() {
        String::new()
    } else {
        let list = features.join(",");
        build.args(["--features", &list]);
        format!(", features {list}")
    };
    step(
        &format!("kernel staticlib ({KERNEL_TARGET}: krpc-rdma-kmod{what})"),
        build,
    )?;
    Ok(cargo_target_dir()
        .join(KERNEL_TARGET)
        .join("release")
        .join("libkrpc_rdma_kmod.a"))
}

/// Where cargo puts what it builds: `CARGO_TARGET_DIR` if set, else the workspace's `target/`.
fn cargo_target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// `cargo xtask kobj`: build the kernel staticlib and turn it into one relocatable object a
/// module loader accepts (see [`kobj`](mod@kobj)).
fn kobj() -> Result<PathBuf, String> {
    requirements::ensure(Task::Kobj)?;
    let lib = kernel_staticlib(&[])?;
    println!("==> kernel object, every archive member (proof of the rewrite)");
    kobj::build(&root(), &lib, kobj::Link::Whole)?;
    println!("==> kernel object (ld -r --gc-sections from the entry points)");
    let obj = kobj::build(&root(), &lib, kobj::Link::Entries)?;
    println!("==> kernel object: ok");
    Ok(obj)
}

/// Sample Sends for the demo: each is a transport header (and maybe payload), as hex.
const DEMO_MESSAGES: &[(&str, &str)] = &[
    (
        "RDMA_MSG, no chunks, 8 payload bytes",
        "00000001 00000001 00000080 00000000 00000000 00000000 00000000 deadbeef cafef00d",
    ),
    (
        "RDMA_MSG with a read chunk at position 132 (an NFS WRITE's data)",
        "0000000a 00000001 00000020 00000000 \
         00000001 00000084 11223344 00001000 00000000 7f001000 00000000 \
         00000000 00000000",
    ),
    (
        "RDMA_MSG with one write chunk of one segment (an NFS READ's reply data)",
        "0000000b 00000001 00000020 00000000 \
         00000000 \
         00000001 00000001 55667788 00100000 00000000 00200000 00000000 \
         00000000",
    ),
    (
        "RDMA_NOMSG with a reply chunk (Long Reply provisioned)",
        "0000000c 00000001 00000020 00000001 00000000 00000000 \
         00000001 00000001 99aabbcc 00002000 00000000 00300000",
    ),
    (
        "RDMA_ERROR ERR_VERS 1..1",
        "0000000d 00000001 00000001 00000004 00000001 00000001 00000001",
    ),
    (
        "RDMA_MSGP (proc 2): not to be used, rejected",
        "0000000e 00000001 00000001 00000002",
    ),
];

/// The demo: `userspace-harness demo` over rxe0 inside the VM (one boot; on the host when it
/// has an RDMA device), then the decoder on sample Sends.
fn demo() -> Result<(), String> {
    requirements::ensure(Task::Demo)?;
    let mut build = cargo();
    build.args(["build", "--quiet", "--release", "-p", "userspace-harness"]);
    step("build userspace-harness", build)?;
    let bin = root().join("target/release/userspace-harness");
    println!(
        "==> userspace-harness demo over rxe0, then nfs3 against knfsd \
         (cargo xtask vm -- sh xtask/vm/demo.sh)"
    );
    let _ = std::io::stdout().flush();
    std::env::set_current_dir(root()).map_err(|e| format!("demo: cd: {e}"))?;
    let args: Vec<OsString> = ["sh", "xtask/vm/demo.sh"]
        .iter()
        .map(OsString::from)
        .collect();
    let code = vm::run::vm(&args);
    if code != 0 {
        return Err(format!("the demo failed (exit {code})"));
    }
    println!("\n==> userspace-harness decode: RPC-over-RDMA headers, hex in, JSON out");
    let mut child = Command::new(&bin)
        .arg("decode")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not start {}: {e}", bin.display()))?;
    let input: String = DEMO_MESSAGES
        .iter()
        .map(|(_, hex)| format!("{hex}\n"))
        .collect();
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| format!("writing to decode: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("waiting for decode: {e}"))?;
    if !out.status.success() {
        return Err(format!("decode exited with {}", out.status));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    println!(
        "userspace-harness decode, {} sample Sends:",
        DEMO_MESSAGES.len()
    );
    for ((title, hex), json) in DEMO_MESSAGES.iter().zip(text.lines()) {
        println!(
            "\n# {title}\n< {}\n> {json}",
            hex.split_whitespace().collect::<Vec<_>>().join("")
        );
    }
    Ok(())
}

fn fuzz(seconds: Option<&str>) -> Result<(), String> {
    let secs: u64 = match seconds {
        None => 60,
        Some(s) => s
            .parse()
            .map_err(|_| format!("fuzz: SECONDS must be a whole number, got {s:?}"))?,
    };
    requirements::ensure(Task::Fuzz)?;
    // The RPC-over-RDMA header decoder, then nfs-proto's decoders of peer data (RPC headers,
    // every NFSv3 argument and result, the DDP head decoders, the locate functions; then the
    // NFSv4.1 COMPOUND and CB_COMPOUND arguments and results, typed attributes, and the v4
    // DDP head decoders and locate functions), then the Responder and the Requester
    // themselves, each driven by a hostile peer's script over the software provider.
    for (dir, target) in FUZZ_TARGETS {
        let mut cmd = Command::new("cargo");
        cmd.current_dir(root().join(dir))
            // cargo-fuzz needs nightly-only flags; the one toolchain here is stable.
            .env("RUSTC_BOOTSTRAP", "1")
            .args([
                "fuzz",
                "run",
                // `nfs-glue/` is no package of its own: name the fuzz project.
                "--fuzz-dir",
                "fuzz",
                target,
                "--",
                &format!("-max_total_time={secs}"),
            ]);
        step(&format!("cargo fuzz run {target} ({secs} s)"), cmd)?;
    }
    Ok(())
}

/// The cargo-fuzz targets, each with the directory holding its `fuzz/` project
/// (`krpc-rdma/fuzz`, `nfs-glue/fuzz`), run by `cargo xtask fuzz` in this order.
const FUZZ_TARGETS: &[(&str, &str)] = &[
    ("krpc-rdma", "decode_header"),
    ("nfs-glue", "decode_nfs3"),
    ("nfs-glue", "decode_nfs4"),
    ("krpc-rdma", "responder_peer"),
    ("krpc-rdma", "requester_peer"),
];
