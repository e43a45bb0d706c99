//! `cargo xtask bench-kernel [--out FILE]`: the Linux kernel NFS client against three
//! NFSv3/RDMA servers in one boot of the rxe VM: Linux's knfsd, our server inside
//! `krpc_rdma.ko` and our userspace `nfsd`; same client, same mount options, the servers
//! interleaved, medians of 3 runs (`xtask/vm/bench-kernel.sh` says what each row measures
//! and how each server makes a WRITE stable).
//!
//! Builds the module (`cargo xtask kmod`) and `userspace-harness` (release) on the host,
//! then runs the script in the VM; the table goes to `target/bench-kernel/table.md` and, with
//! `--out FILE`, to FILE; the raw output to `target/bench-kernel/bench.log`.

use std::ffi::OsString;
use std::time::Instant;

use crate::bench_rxe::{parse_args, run_in_vm, VmBench};
use crate::requirements::{self, Task};
use crate::{cargo, kmod, root, step};

const HELP: &str = "\
usage: cargo xtask bench-kernel [--out FILE]

Builds krpc_rdma.ko and userspace-harness (release), boots the rxe VM once and runs the Linux
NFS/RDMA client against knfsd (tmpfs, export sync), krpc_rdma.ko's in-kernel server and
userspace-harness nfsd (tmpfs), interleaved: dd O_DIRECT write and read, tar x of small
files, ls -l of a big directory, each with the guest's CPU seconds; then our kernel
Requester (krpc_rdma.ko peer=knfsd-bench-*) against the Linux client, both against knfsd:
READ and WRITE at 1, 8 and 32 in flight with CPU seconds per GiB, and NULL calls per second.
Prints Markdown tables of medians and ratios; raw output in target/bench-kernel/bench.log.
  --out FILE   also write the tables to FILE
Env: MB (256), FILES (300), ENTRIES (5000), RUNS (3), DEPTHS (\"1 8 32\"), NULLS (16384),
OPTS (rsize=262144,wsize=262144), and the vm knobs (cargo xtask help; KRPC_RDMA_VM_TIMEOUT
defaults to 3600 s here).";

/// `cargo xtask bench-kernel [--out FILE]`.
pub(crate) fn bench_kernel(args: &[String]) -> Result<(), String> {
    let Some(out) = parse_args("bench-kernel", args)? else {
        println!("{HELP}");
        return Ok(());
    };
    let start = Instant::now();
    requirements::ensure(Task::BenchRxe)?;
    kmod::kmod(&root())?;
    let mut build = cargo();
    build.args(["build", "--release", "-p", "userspace-harness"]);
    step("build userspace-harness (release)", build)?;
    let script: Vec<OsString> = [
        "sh",
        "xtask/vm/bench-kernel.sh",
        "--table",
        "target/bench-kernel/table.md",
        "--log",
        "target/bench-kernel/bench.log",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    run_in_vm(
        &VmBench {
            task: "bench-kernel",
            what: "NFS servers side by side in the VM",
            table: "target/bench-kernel/table.md",
            log: "target/bench-kernel/bench.log",
            timeout_secs: "3600",
        },
        &script,
        out.as_deref(),
        start,
    )
}
