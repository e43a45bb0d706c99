//! `nfsd`: the server alone, as `userspace-harness nfsd` runs it (for this crate's VM tests;
//! `--trace` needs `userspace-harness nfsd`).

use std::process::ExitCode;

use clap::Parser;

/// Serve a local directory over NFSv3 on RPC-over-RDMA, MOUNT v3 over TCP.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: krpc_rdma_nfsd::NfsdArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.args.trace.is_some() {
        eprintln!("nfsd: --trace: use `userspace-harness nfsd`");
        return ExitCode::from(2);
    }
    match krpc_rdma_nfsd::run(&cli.args, krpc_rdma_nfsd::plain()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nfsd: {e}");
            ExitCode::FAILURE
        }
    }
}
