//! `userspace-harness`: runs the krpc-rdma core in userspace.
//!
//! Today it offers one tool, `decode`, a decoder for RPC-over-RDMA Version 1 transport
//! headers (RFC 8166). The libibverbs/rxe provider, the server/client/bench commands and the
//! NFS client come with later work; they are not here and nothing pretends they are.

use std::io::{self, BufRead, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod decode;
mod hex;
// The libibverbs/librdmacm provider; used by the tests (which include it by path) and the
// hidden `verbs-smoke` command until the server/client commands arrive.
#[allow(dead_code)]
mod verbs;

/// Userspace harness for the krpc-rdma RPC-over-RDMA core.
#[derive(Parser)]
#[command(name = "userspace-harness", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Decode RPC-over-RDMA v1 messages: hex on stdin, one message (the bytes of one Send,
    /// transport header then payload) per line; one JSON object per line on stdout.
    ///
    /// Blank lines and lines starting with '#' are skipped. Whitespace and ':' inside a
    /// line are ignored, an optional leading "0x" is accepted. Undecodable input gives
    /// {"error": "<reason>"} on its line; the tool exits 0 after reading all input.
    Decode,
    /// Open the RDMA device, register a page arena and print the device limits (a smoke
    /// check of the verbs provider; the real server/client commands come later).
    #[command(hide = true)]
    VerbsSmoke,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Decode => run_decode(),
        Command::VerbsSmoke => run_verbs_smoke(),
    }
}

fn run_verbs_smoke() -> ExitCode {
    let run = || -> Result<(), verbs::VerbsError> {
        let dev = verbs::device::Device::open(None)?;
        let arena = verbs::arena::VerbsArena::new(&dev, 256)?;
        println!(
            "device {}: {:?}; arena of {} pages, lkey {:#x}",
            dev.name(),
            dev.limits(),
            arena.pages(),
            arena.lkey()
        );
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("userspace-harness verbs-smoke: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_decode() -> ExitCode {
    let stdin = io::stdin();
    let stdout = io::stdout();
    match decode_stream(stdin.lock(), stdout.lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("userspace-harness decode: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Reads hex lines from `input` and writes one JSON line per message to `output`.
fn decode_stream(mut input: impl BufRead, mut output: impl Write) -> io::Result<()> {
    let mut line = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        if let Some(value) = decode::decode_line(&line) {
            serde_json::to_writer(&mut output, &value)?;
            output.write_all(b"\n")?;
        }
    }
    output.flush()
}

#[cfg(test)]
mod tests {
    use super::decode_stream;

    #[test]
    fn stream_skips_blank_and_comment_lines_and_survives_garbage() {
        let input = b"# comment\n\n00000001000000010000002000000000000000000000000000000000\nzz\n\xff\xfe\n";
        let mut out = Vec::new();
        decode_stream(&input[..], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(first["xid"], 1);
        assert_eq!(first["credit"], 32);
        for l in &lines[1..] {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert!(v["error"].is_string(), "{l}");
        }
    }
}
