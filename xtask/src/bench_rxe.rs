//! `cargo xtask bench-rxe [--out FILE]`: the harness against perftest and the Linux kernel NFS
//! client, over Soft-RoCE `rxe0`, all in one boot of the rxe VM.
//!
//! Builds `userspace-harness` (release) on the host, then runs `xtask/vm/bench.sh` in the VM
//! (`cargo xtask vm`), which measures on rxe0 loopback: `ib_write_bw`/`ib_read_bw` at 64 KiB and
//! 1 MiB and `ib_send_lat` 2 B; `userspace-harness bench` (DDP WRITE and READ at 64 KiB and
//! 1 MiB, depth 4, and the null call at depth 1); and NFSv3 over RDMA to knfsd in the same
//! guest (a tmpfs export): the harness's `nfs3 put`/`get` of one file against the kernel's
//! client (dd O_DIRECT write and read of the same file); and the same kernel client against our
//! server (`userspace-harness nfsd` on its own tmpfs export) vs against knfsd: dd O_DIRECT
//! write and read of that file and `tar x` of one 2,000-file archive (files/s). The script
//! prints a line per step and a Markdown table (harness, reference, ratio, target, PASS/MISS); the raw
//! output of every tool goes to `target/bench-rxe/bench.log`, the table to
//! `target/bench-rxe/table.md` and, with `--out FILE`, to FILE too.
//!
//! The run always uses the VM (`KRPC_RDMA_VM=force` unless set otherwise: the NFS part sets up
//! an NFS server, which only happens in the VM) and gives up after 900 s
//! (`KRPC_RDMA_VM_TIMEOUT` unless set). A step that fails is FAILED in the table; the others
//! still run, and the task then fails naming the log. 1,200 s: the run took ~100 s before
//! the rows against our server; those add two 64 MiB dd runs and two `tar x` of 2,000 files
//! through the mount (the slowest part under TCG: ~40 s against our server in
//! linux_client_rxe), and the VM shares a loaded 2-core host.

use crate::requirements::{self, Task};
use crate::{cargo, root, step, vm};
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The guest script, relative to the repository (the VM's cwd).
const SCRIPT: &str = "xtask/vm/bench.sh";
/// Everything the tools print.
const LOG: &str = "target/bench-rxe/bench.log";
/// The table, as the script writes it.
const TABLE: &str = "target/bench-rxe/table.md";
/// The harness binary, built on the host.
const HARNESS: &str = "target/release/userspace-harness";
/// Kills the VM after this long unless `KRPC_RDMA_VM_TIMEOUT` says otherwise.
const DEFAULT_TIMEOUT_SECS: &str = "1200";

const HELP: &str = "\
usage: cargo xtask bench-rxe [--out FILE]

Builds userspace-harness (release), boots the rxe VM once and compares on rxe0 loopback:
userspace-harness bench (DDP WRITE/READ 64 KiB and 1 MiB, depth 4; null call, depth 1) with
ib_read_bw/ib_write_bw (same sizes), ib_send_lat (2 B), and, against knfsd, the harness's
nfs3 put/get with the kernel NFSv3/RDMA client (dd O_DIRECT, bs=1M) on the same file; and the
kernel client against our server (userspace-harness nfsd, tmpfs export) vs against knfsd: dd
O_DIRECT write/read of that file and tar x of a 2,000-file archive. Prints a Markdown table;
raw output in target/bench-rxe/bench.log.
  --out FILE   also write the table to FILE
Env: DURATION (harness seconds, 5), BW64_ITERS (3000), BW1M_ITERS (200), LAT_ITERS (20000),
NFS_MB (64), HARNESS_DEPTH (4), NFS_DEPTH (8), SMALL_FILES (2000), and the vm knobs (cargo
xtask help; KRPC_RDMA_VM_TIMEOUT defaults to 1200 s here).";

/// `cargo xtask bench-rxe [--out FILE]`.
pub(crate) fn bench_rxe(args: &[String]) -> Result<(), String> {
    let Some(out) = parse_args("bench-rxe", args)? else {
        println!("{HELP}");
        return Ok(());
    };
    let start = Instant::now();
    let root = root();
    // The build libraries, perftest and the NFS packages the guest runs, the VM's kernel.
    requirements::ensure(Task::BenchRxe)?;

    // The harness: a failed build still lets perftest and NFS run (the rows say why).
    let mut build = cargo();
    build.args(["build", "--release", "-p", "userspace-harness"]);
    let harness_error = match step("build userspace-harness (release)", build) {
        Ok(()) => None,
        Err(e) => {
            eprintln!("xtask bench-rxe: {e}; the harness rows will be FAILED");
            Some("the release build of userspace-harness failed".to_string())
        }
    };
    if harness_error.is_none() && !has_bench(&root.join(HARNESS)) {
        println!("==> note: {HARNESS} has no `bench` subcommand yet: the harness rows will be n/a");
    }

    let mut script: Vec<OsString> = [
        "sh",
        SCRIPT,
        "--log",
        LOG,
        "--table",
        TABLE,
        "--harness",
        HARNESS,
    ]
    .iter()
    .map(OsString::from)
    .collect();
    if let Some(why) = &harness_error {
        script.push("--harness-error".into());
        script.push(why.into());
    }
    run_in_vm(
        &VmBench {
            task: "bench-rxe",
            what: "bench over rxe0 in the VM",
            table: TABLE,
            log: LOG,
            timeout_secs: DEFAULT_TIMEOUT_SECS,
        },
        &script,
        out.as_deref(),
        start,
    )
}

/// A benchmark script run in one VM boot that writes a Markdown table.
pub(crate) struct VmBench {
    /// The task's name (`bench-rxe`).
    pub task: &'static str,
    /// What the run is, for its `==>` line.
    pub what: &'static str,
    /// The table the script writes, relative to the repository.
    pub table: &'static str,
    /// The raw output, relative to the repository.
    pub log: &'static str,
    /// `KRPC_RDMA_VM_TIMEOUT` unless set.
    pub timeout_secs: &'static str,
}

/// Run `script` in the VM (forced: the NFS steps set up servers, which only happens in the
/// VM), then print where the table is and copy it to `out`; fails when a step failed or no
/// table was written.
pub(crate) fn run_in_vm(
    b: &VmBench,
    script: &[OsString],
    out: Option<&Path>,
    start: Instant,
) -> Result<(), String> {
    let root = root();
    if std::env::var_os("KRPC_RDMA_VM").is_none() {
        std::env::set_var("KRPC_RDMA_VM", "force");
    }
    if std::env::var_os("KRPC_RDMA_VM_TIMEOUT").is_none() {
        std::env::set_var("KRPC_RDMA_VM_TIMEOUT", b.timeout_secs);
    }
    std::env::set_current_dir(&root).map_err(|e| format!("cd {}: {e}", root.display()))?;
    let table_path = root.join(b.table);
    if let Some(dir) = table_path.parent() {
        fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    // A table left from an earlier run must not pass for this one's.
    let _ = fs::remove_file(&table_path);
    let shown: Vec<String> = script
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    println!("==> {}: {}", b.what, shown.join(" "));
    let code = vm::run::vm(script);
    let secs = start.elapsed().as_secs_f64();
    let (task, log) = (b.task, b.log);

    let table = fs::read_to_string(&table_path).ok();
    if let (Some(table), Some(out)) = (&table, out) {
        if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        fs::write(out, table).map_err(|e| format!("--out {}: {e}", out.display()))?;
        println!("==> table written to {}", out.display());
    }
    match (code, table) {
        (0, Some(_)) => {
            println!("==> {task}: done in {secs:.1} s (raw output: {log})");
            Ok(())
        }
        (_, Some(_)) => Err(format!(
            "some steps FAILED (exit {code}) after {secs:.1} s; see the table above and {log}"
        )),
        (_, None) => Err(format!(
            "no table after {secs:.1} s (exit {code}{}); see the output above and {log}",
            match code {
                124 => ": the VM timed out (KRPC_RDMA_VM_TIMEOUT)",
                125 => ": the VM failed",
                _ => "",
            }
        )),
    }
}

/// `Ok(None)` for `--help`; else the `--out` file, made absolute against the current
/// directory (the VM runs in the repository root).
pub(crate) fn parse_args(task: &str, args: &[String]) -> Result<Option<Option<PathBuf>>, String> {
    let mut out = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let file = match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--out" => it
                .next()
                .ok_or(format!("{task}: --out needs a FILE"))?
                .to_string(),
            other => match other.strip_prefix("--out=") {
                Some(file) => file.to_string(),
                None => {
                    return Err(format!(
                        "{task}: unknown argument {other:?} (cargo xtask {task} --help)"
                    ))
                }
            },
        };
        if file.is_empty() {
            return Err(format!("{task}: --out needs a FILE"));
        }
        let path = Path::new(&file);
        out = Some(if path.is_absolute() {
            path.to_path_buf()
        } else {
            std::env::current_dir()
                .map_err(|e| format!("current directory: {e}"))?
                .join(path)
        });
    }
    Ok(Some(out))
}

/// Does `bin bench --help` succeed?
fn has_bench(bin: &Path) -> bool {
    Command::new(bin)
        .args(["bench", "--help"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn out_is_optional_and_made_absolute() {
        assert_eq!(parse_args("bench-rxe", &[]).unwrap(), Some(None));
        assert_eq!(
            parse_args("bench-rxe", &args(&["--out", "/tmp/t.md"])).unwrap(),
            Some(Some(PathBuf::from("/tmp/t.md")))
        );
        let rel = parse_args("bench-rxe", &args(&["--out=t.md"]))
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(rel.is_absolute() && rel.ends_with("t.md"), "{rel:?}");
        assert_eq!(parse_args("bench-rxe", &args(&["--help"])).unwrap(), None);
        assert!(parse_args("bench-rxe", &args(&["--out"])).is_err());
        assert!(parse_args("bench-rxe", &args(&["--out="])).is_err());
        assert!(parse_args("bench-rxe", &args(&["--bogus"])).is_err());
    }
}
