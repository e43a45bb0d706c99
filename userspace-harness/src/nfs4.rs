//! The `nfs4` command: `krpc-rdma-session`'s NFSv4.1 client ([`Nfs4Client`]) over a
//! [`Session`](krpc_rdma_session::Session) of the libibverbs provider ([`VerbsDialer`], port
//! 20049 by default), with the session's back channel on the same RDMA connection (RFC
//! 8167); and the command's output.

use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use krpc_rdma_session::nfs4::{
    CbStats, DirEntry4, Held, Nfs4Error, Nfs4Opts, Open4, MAX_DEPTH, MAX_IO,
};
use nfs_proto::nfs4::{Attrs4, NfsFtype4};

use crate::session::VerbsDialer;
use crate::trace::Tracer;

/// The NFSv4.1 client over the libibverbs provider.
pub type Nfs4Client = krpc_rdma_session::nfs4::Nfs4Client<VerbsDialer>;

/// What `nfs4` does (its subcommands). Remote paths are relative to the export.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Nfs4Op {
    /// Copy local file LOCAL to REMOTE (created or truncated; FILE_SYNC WRITEs).
    Put {
        /// The local file.
        local: PathBuf,
        /// The remote path.
        remote: String,
    },
    /// Copy REMOTE to local file LOCAL.
    Get {
        /// The remote path.
        remote: String,
        /// The local file.
        local: PathBuf,
    },
    /// List directory DIR (READDIR), one entry per line, sorted by name.
    Ls {
        /// The remote directory.
        #[arg(default_value = "/")]
        dir: String,
    },
    /// Print the attributes of PATH (GETATTR).
    Stat {
        /// The remote path.
        path: String,
    },
    /// Open PATH for reading and hold it with the delegation the server grants ("open
    /// PATH: delegation read" on stdout once open) until the server recalls the delegation
    /// (it is returned at once) or SECS pass; then close it.
    Hold {
        /// The remote path.
        path: String,
        /// How long at most.
        #[arg(long, value_name = "SECS", default_value = "60", value_parser = crate::parse_secs)]
        secs: Duration,
    },
}

/// Options of [`run`].
#[derive(Debug, Clone)]
pub struct Nfs4Args {
    /// The server's address.
    pub server: IpAddr,
    /// The NFS/RDMA port (20049).
    pub port: u16,
    /// The export's path from the server's root (e.g. `/export`).
    pub export: String,
    /// Client options.
    pub nfs: Nfs4Opts,
    /// No summary line on stderr.
    pub quiet: bool,
}

/// Connect, do `op`, return the delegations held and end the session; one summary line of
/// the back channel on stderr (unless quiet; on stdout for `hold`).
///
/// # Errors
/// As the client's operations.
pub fn run(a: &Nfs4Args, trace: Option<Arc<Tracer>>, op: Nfs4Op) -> Result<(), Nfs4Error> {
    let dialer = VerbsDialer::new(
        SocketAddr::new(a.server, a.port),
        a.nfs.depth.clamp(1, MAX_DEPTH) * (MAX_IO as usize + 8192) + (4 << 20),
        trace,
    )?;
    let mut c = Nfs4Client::connect(dialer, &a.export, &a.nfs)?;
    let th = c.session().thresholds();
    let inline = format!(
        "inline {}/{} B, {} credits, {} fore-channel slots, rsize {} wsize {}",
        th.send,
        th.recv,
        c.session().credits(),
        c.fore_slots(),
        c.io_sizes().0,
        c.io_sizes().1
    );
    let hold = matches!(op, Nfs4Op::Hold { .. });
    let r = op_on(&mut c, &inline, op);
    let k = c.counters();
    let stats = match r {
        Ok(()) => c.finish()?,
        Err(e) => return Err(e),
    };
    let nonzero: Vec<String> = k
        .fields()
        .iter()
        .filter(|(_, v)| *v != 0)
        .map(|(n, v)| format!("{n} {v}"))
        .collect();
    let line = format!(
        "back channel: {}; transport counters: {}",
        format_cb(&stats),
        nonzero.join(", ")
    );
    if hold {
        println!("{line}");
    } else if !a.quiet {
        eprintln!("userspace-harness: {line}");
    }
    Ok(())
}

fn op_on(c: &mut Nfs4Client, inline: &str, op: Nfs4Op) -> Result<(), Nfs4Error> {
    let mut out = io::stdout().lock();
    let stdout = |e: io::Error| Nfs4Error::Other(format!("stdout: {e}"));
    match op {
        Nfs4Op::Put { local, remote } => {
            let t = c.put(&local, &remote)?;
            let k = c.counters();
            writeln!(
                out,
                "put {} -> {remote}: {} bytes, {} WRITEs, {:.3} s, {:.2} MB/s; read chunks {}, \
                 bytes exposed to RDMA Read {}; {inline}",
                local.display(),
                t.bytes,
                t.calls,
                t.secs,
                mb_per_s(t.bytes, t.secs),
                k.read_chunks,
                k.rdma_read_bytes
            )
            .map_err(stdout)
        }
        Nfs4Op::Get { remote, local } => {
            let t = c.get(&remote, &local)?;
            let k = c.counters();
            writeln!(
                out,
                "get {remote} -> {}: {} bytes, {} READs, {:.3} s, {:.2} MB/s; write chunks {}, \
                 bytes the server RDMA-Wrote {}; delegation {}; {inline}",
                local.display(),
                t.bytes,
                t.calls,
                t.secs,
                mb_per_s(t.bytes, t.secs),
                k.write_chunks,
                k.rdma_write_bytes,
                if t.delegation { "granted" } else { "none" }
            )
            .map_err(stdout)
        }
        Nfs4Op::Ls { dir } => {
            for e in c.ls(&dir)? {
                writeln!(out, "{}", format_entry(&e)).map_err(stdout)?;
            }
            Ok(())
        }
        Nfs4Op::Stat { path } => {
            let a = c.stat(&path)?;
            writeln!(out, "{}", format_attrs(&a)).map_err(stdout)
        }
        Nfs4Op::Hold { path, secs } => {
            let mut ready = |o: &Open4| {
                let d = match o.delegation {
                    Some((_, true)) => "write",
                    Some((_, false)) => "read",
                    None => "none",
                };
                // The line a second client waits for: flushed at once.
                let _ = writeln!(out, "open {path}: delegation {d}");
                let _ = out.flush();
            };
            let h: Held = c.hold(&path, secs, &mut ready)?;
            let msg = match (h.delegation, h.recalled_after, h.returned_in) {
                (None, _, _) => "no delegation granted: nothing to hold".to_string(),
                (Some(_), Some(at), Some(ret)) => format!(
                    "delegation recalled (CB_RECALL) after {at:.3} s; returned (DELEGRETURN) in \
                     {ret:.3} s"
                ),
                (Some(_), _, _) => format!(
                    "delegation not recalled in {} s; returned at the end",
                    secs.as_secs_f64()
                ),
            };
            writeln!(out, "{msg}").map_err(stdout)
        }
    }
}

/// The back channel's traffic as words.
pub fn format_cb(s: &CbStats) -> String {
    format!(
        "{} slots, {} calls, {} replies, {} refused, {} recalls, {} DELEGRETURNs",
        s.slots, s.calls, s.replies, s.refused, s.recalls, s.returned
    )
}

/// `ls -l`-like one line for an entry: type and mode, links, owner, group, size, name.
pub fn format_entry(e: &DirEntry4) -> String {
    let name = String::from_utf8_lossy(&e.name);
    let Some(a) = &e.attrs else {
        return format!("? {name}");
    };
    let t = match a.type_ {
        Some(NfsFtype4::Reg) => '-',
        Some(NfsFtype4::Dir) => 'd',
        Some(NfsFtype4::Lnk) => 'l',
        Some(NfsFtype4::Blk) => 'b',
        Some(NfsFtype4::Chr) => 'c',
        Some(NfsFtype4::Sock) => 's',
        Some(NfsFtype4::Fifo) => 'p',
        Some(_) => 'o',
        None => '?',
    };
    let s = |o: &Option<nfs_proto::nfs4::Utf8Str>| {
        o.as_ref().map_or("?".into(), |u| {
            String::from_utf8_lossy(u.as_bytes()).into_owned()
        })
    };
    format!(
        "{t}{:04o} {:>3} {:>5} {:>5} {:>12} {name}",
        a.mode.unwrap_or(0) & 0o7777,
        a.numlinks.unwrap_or(0),
        s(&a.owner),
        s(&a.owner_group),
        a.size.unwrap_or(0)
    )
}

/// The attributes as `key=value` words (those the server gave).
pub fn format_attrs(a: &Attrs4) -> String {
    let mut w = Vec::new();
    if let Some(t) = a.type_ {
        w.push(format!("type={t:?}"));
    }
    if let Some(m) = a.mode {
        w.push(format!("mode={:04o}", m & 0o7777));
    }
    if let Some(n) = a.numlinks {
        w.push(format!("nlink={n}"));
    }
    if let Some(o) = &a.owner {
        w.push(format!("owner={}", String::from_utf8_lossy(o.as_bytes())));
    }
    if let Some(g) = &a.owner_group {
        w.push(format!("group={}", String::from_utf8_lossy(g.as_bytes())));
    }
    if let Some(s) = a.size {
        w.push(format!("size={s}"));
    }
    if let Some(f) = a.fileid {
        w.push(format!("fileid={f}"));
    }
    if let Some(c) = a.change {
        w.push(format!("change={c}"));
    }
    if let Some(t) = a.time_modify {
        w.push(format!("mtime={}.{:09}", t.seconds, t.nseconds));
    }
    w.join(" ")
}

fn mb_per_s(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / secs / 1e6
    } else {
        0.0
    }
}
