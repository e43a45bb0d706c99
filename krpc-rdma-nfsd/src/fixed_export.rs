//! MOUNT v3 for a server whose root handle is known from outside: `userspace-harness mountd`,
//! the MOUNT responder of the kernel module's NFSv3 server (which has no MOUNT protocol of
//! its own and publishes its root handle as hex, e.g.
//! `/sys/module/krpc_rdma/parameters/nfsd_root_fh`).
//!
//! [`FixedExport`]: exactly one export path; MNT of it answers the handle, given as hex on
//! the command line ([`HandleSource::Fixed`]) or read from a file at every MNT
//! ([`HandleSource::File`], so a module reload's new handle is picked up). MNT of any other
//! path is `MNT3ERR_NOENT`; a handle file that cannot be read or holds no valid handle at MNT
//! time is `MNT3ERR_SERVERFAULT` (the export exists, the server cannot say its handle now),
//! with one line on stderr. Mounts are recorded for DUMP; UMNT / UMNTALL forget them;
//! EXPORT lists the path with no groups (everyone).

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use nfs_proto::mount::{Mountstat3, MNTPATHLEN};
use nfs_proto::nfs3::{NfsFh3, NFS3_FHSIZE};
use nfs_service::mount::{ExportVisitor, Exports, MountService};
use onc_rpc::svc::{AuthPolicy, Cred};

use crate::exports::MountTable;
use crate::mountd::{MountLimits, Mountd};

/// A file handle as hex text: optional surrounding whitespace, an even number of hex digits
/// (either case), 1 to 64 bytes ([`NFS3_FHSIZE`]).
///
/// # Errors
/// One line saying what is wrong (empty, not hex, odd length, too long).
pub fn parse_handle(text: &str) -> Result<NfsFh3, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty file handle (want 1 to 64 bytes as hex)".into());
    }
    if let Some((i, c)) = t.char_indices().find(|(_, c)| !c.is_ascii_hexdigit()) {
        return Err(format!(
            "file handle {:?}: {c:?} at column {} is not a hex digit",
            short(t),
            i + 1
        ));
    }
    if t.len() % 2 != 0 {
        return Err(format!(
            "file handle {:?}: odd number of hex digits ({})",
            short(t),
            t.len()
        ));
    }
    if t.len() / 2 > NFS3_FHSIZE {
        return Err(format!(
            "file handle of {} bytes: an NFSv3 handle is at most {NFS3_FHSIZE}",
            t.len() / 2
        ));
    }
    let data = t
        .as_bytes()
        .chunks_exact(2)
        .map(|p| {
            let s = std::str::from_utf8(p).map_err(|e| e.to_string())?;
            u8::from_str_radix(s, 16).map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<u8>, String>>()?;
    Ok(NfsFh3 { data })
}

/// The first 40 characters of `t`, for messages.
fn short(t: &str) -> String {
    if t.chars().count() > 40 {
        let mut s: String = t.chars().take(40).collect();
        s.push('…');
        s
    } else {
        t.to_string()
    }
}

/// Where MNT's handle comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandleSource {
    /// Always this handle.
    Fixed(NfsFh3),
    /// The hex in this file, read (and trimmed) at every MNT.
    File(PathBuf),
}

impl HandleSource {
    /// The handle now.
    ///
    /// # Errors
    /// The file cannot be read or does not hold a handle (one line naming the file).
    pub fn handle(&self) -> Result<NfsFh3, String> {
        match self {
            HandleSource::Fixed(fh) => Ok(fh.clone()),
            HandleSource::File(p) => read_handle_file(p),
        }
    }
}

/// The handle in `path` (hex, trimmed).
///
/// # Errors
/// As [`HandleSource::handle`].
pub fn read_handle_file(path: &Path) -> Result<NfsFh3, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse_handle(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Whether `p` is an export path: absolute, at most `MNTPATHLEN` bytes.
///
/// # Errors
/// One line saying why not.
pub fn check_export_path(p: &str) -> Result<(), String> {
    if !p.starts_with('/') {
        return Err(format!(
            "export path {p:?}: must be absolute (start with /)"
        ));
    }
    if p.len() > MNTPATHLEN {
        return Err(format!(
            "export path of {} bytes: MOUNT allows at most {MNTPATHLEN}",
            p.len()
        ));
    }
    Ok(())
}

/// `p` without trailing slashes (but `/` stays `/`).
fn trim_slashes(p: &[u8]) -> &[u8] {
    let mut p = p;
    while p.len() > 1 && p.last() == Some(&b'/') {
        p = p.get(..p.len() - 1).unwrap_or_default();
    }
    p
}

/// One export path whose root handle comes from a [`HandleSource`]; the mounts recorded.
#[derive(Debug)]
pub struct FixedExport {
    path: Vec<u8>,
    source: HandleSource,
    mounts: MountTable,
}

impl FixedExport {
    /// Export `path` (compared without trailing slashes) with the handle from `source`.
    pub fn new(path: &[u8], source: HandleSource) -> FixedExport {
        FixedExport {
            path: trim_slashes(path).to_vec(),
            source,
            mounts: MountTable::default(),
        }
    }

    /// Where the handle comes from.
    pub fn source(&self) -> &HandleSource {
        &self.source
    }
}

impl Exports for FixedExport {
    fn mnt(&self, _cred: &Cred<'_>, client: &[u8], path: &[u8]) -> Result<NfsFh3, Mountstat3> {
        if trim_slashes(path) != self.path.as_slice() {
            return Err(Mountstat3::ERR_NOENT);
        }
        let fh = self.source.handle().map_err(|e| {
            eprintln!(
                "mountd: MNT {} from {}: MNT3ERR_SERVERFAULT: {e}",
                String::from_utf8_lossy(path),
                String::from_utf8_lossy(client)
            );
            Mountstat3::ERR_SERVERFAULT
        })?;
        self.mounts.record(client, path);
        Ok(fh)
    }

    fn umnt(&self, client: &[u8], path: &[u8]) {
        self.mounts.umnt(client, path);
    }

    fn umntall(&self, client: &[u8]) {
        self.mounts.umntall(client);
    }

    fn dump(&self, f: &mut dyn FnMut(&[u8], &[u8])) {
        self.mounts.dump(f);
    }

    fn exports(&self, f: &mut ExportVisitor<'_>) {
        f(&self.path, &[]);
    }
}

/// `userspace-harness mountd`'s options.
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("handle").required(true).args(["fh", "fh_file"])))]
pub struct MountdArgs {
    /// TCP address to serve MOUNT v3 on: IP:PORT (port 0: any free port, printed).
    #[arg(long, value_name = "IP:PORT")]
    pub listen: SocketAddr,
    /// The one export path clients mount (e.g. /kernel); MNT of any other is MNT3ERR_NOENT.
    #[arg(long, value_name = "PATH")]
    pub export: String,
    /// The export's root file handle as hex (1 to 64 bytes).
    #[arg(long, value_name = "HEX", value_parser = parse_handle)]
    pub fh: Option<NfsFh3>,
    /// Read the root handle's hex from FILE at every MNT instead (e.g.
    /// /sys/module/krpc_rdma/parameters/nfsd_root_fh; a reload's new handle is picked up).
    /// At MNT time an unreadable or invalid file is answered MNT3ERR_SERVERFAULT.
    #[arg(long, value_name = "FILE")]
    pub fh_file: Option<PathBuf>,
    /// MOUNT connection limit.
    #[command(flatten)]
    pub mount_limits: MountLimits,
}

/// Why `mountd` failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountdError {
    /// Bad input (exit status 2): the export path, the handle file at start.
    Usage(String),
    /// Anything else (exit status 1): the address cannot be bound, no thread.
    Run(String),
}

impl MountdError {
    /// The command's exit status for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            MountdError::Usage(_) => 2,
            MountdError::Run(_) => 1,
        }
    }
}

impl core::fmt::Display for MountdError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            MountdError::Usage(s) | MountdError::Run(s) => f.write_str(s),
        }
    }
}

/// Serve MOUNT v3 for `a` until `stop` is set: one line when serving, then block.
/// The caller installs the signal handlers that set `stop`.
///
/// # Errors
/// [`MountdError::Usage`]: bad export path, or the handle file unreadable or invalid at
/// start; [`MountdError::Run`]: the address cannot be bound.
pub fn run_mountd(a: &MountdArgs, stop: &'static AtomicBool) -> Result<(), MountdError> {
    check_export_path(&a.export).map_err(MountdError::Usage)?;
    let source = match (&a.fh, &a.fh_file) {
        (Some(fh), None) => HandleSource::Fixed(fh.clone()),
        (None, Some(p)) => HandleSource::File(p.clone()),
        _ => {
            return Err(MountdError::Usage(
                "give exactly one of --fh HEX and --fh-file FILE".into(),
            ))
        }
    };
    let now = source.handle().map_err(MountdError::Usage)?;
    let mountd = Mountd::bind(a.listen)
        .map_err(|e| MountdError::Run(format!("mountd on {}: {e}", a.listen)))?;
    let addr = mountd
        .local_addr()
        .map_err(|e| MountdError::Run(e.to_string()))?;
    let export = FixedExport::new(a.export.as_bytes(), source);
    let svc = Arc::new(MountService::new(export, AuthPolicy::AllowNone));
    let t = mountd
        .spawn(svc, a.mount_limits, stop)
        .map_err(|e: io::Error| MountdError::Run(format!("mountd thread: {e}")))?;
    println!(
        "mountd: serving {} on {addr}, handle {} bytes",
        a.export,
        now.data.len()
    );
    let _ = t.join();
    println!("mountd: stopped");
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("fixed-export-{}-{name}", std::process::id()))
    }

    #[test]
    fn hex_handles_parse_and_bad_ones_say_why_in_one_line() {
        assert_eq!(
            parse_handle(" 01abCD\n").unwrap().data,
            vec![0x01, 0xab, 0xcd]
        );
        let max = "ff".repeat(64);
        assert_eq!(parse_handle(&max).unwrap().data.len(), 64);
        for (text, says) in [
            ("", "empty"),
            (" \n", "empty"),
            ("0g", "'g' at column 2 is not a hex digit"),
            ("0x01", "'x' at column 2"),
            ("01 02", "' ' at column 3"),
            ("abc", "odd number of hex digits (3)"),
            (&"00".repeat(65), "65 bytes"),
        ] {
            let e = parse_handle(text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn mnt_answers_the_handle_for_the_path_only_and_records_mounts() {
        let fh = parse_handle("0102030405").unwrap();
        let e = FixedExport::new(b"/kernel/", HandleSource::Fixed(fh.clone()));
        let c = Cred::none();
        assert_eq!(e.mnt(&c, b"192.0.2.1", b"/kernel"), Ok(fh.clone()));
        assert_eq!(e.mnt(&c, b"192.0.2.2", b"/kernel/"), Ok(fh.clone()));
        // Again from the same client: recorded once.
        assert_eq!(e.mnt(&c, b"192.0.2.1", b"/kernel"), Ok(fh.clone()));
        for other in [&b"/"[..], b"/kern", b"/kernel/sub", b"kernel", b""] {
            assert_eq!(e.mnt(&c, b"192.0.2.1", other), Err(Mountstat3::ERR_NOENT));
        }
        let dump = |e: &FixedExport| {
            let mut v = Vec::new();
            e.dump(&mut |h, d| v.push((h.to_vec(), d.to_vec())));
            v
        };
        assert_eq!(
            dump(&e),
            vec![
                (b"192.0.2.1".to_vec(), b"/kernel".to_vec()),
                (b"192.0.2.2".to_vec(), b"/kernel/".to_vec())
            ]
        );
        e.umnt(b"192.0.2.2", b"/kernel/");
        assert_eq!(dump(&e).len(), 1);
        e.umntall(b"192.0.2.1");
        assert!(dump(&e).is_empty());
        let mut seen = Vec::new();
        e.exports(&mut |p, groups| seen.push((p.to_vec(), groups.len())));
        assert_eq!(seen, vec![(b"/kernel".to_vec(), 0)]);
    }

    #[test]
    fn a_handle_file_is_read_again_at_every_mnt() {
        let f = temp("fh");
        let e = FixedExport::new(b"/kernel", HandleSource::File(f.clone()));
        let c = Cred::none();
        // No file yet: the server cannot say its handle.
        let _ = std::fs::remove_file(&f);
        assert_eq!(
            e.mnt(&c, b"192.0.2.1", b"/kernel"),
            Err(Mountstat3::ERR_SERVERFAULT)
        );
        std::fs::write(&f, "aabbccdd\n").unwrap();
        assert_eq!(
            e.mnt(&c, b"192.0.2.1", b"/kernel").unwrap().data,
            vec![0xaa, 0xbb, 0xcc, 0xdd]
        );
        // A reload wrote a new handle.
        std::fs::write(&f, "  0011\n").unwrap();
        assert_eq!(
            e.mnt(&c, b"192.0.2.1", b"/kernel").unwrap().data,
            vec![0x00, 0x11]
        );
        // Garbage or an empty file: SERVERFAULT, and not recorded as a mount.
        e.umntall(b"192.0.2.1");
        for bad in ["xyz\n", "", "abc"] {
            std::fs::write(&f, bad).unwrap();
            assert_eq!(
                e.mnt(&c, b"192.0.2.1", b"/kernel"),
                Err(Mountstat3::ERR_SERVERFAULT),
                "{bad:?}"
            );
        }
        let mut n = 0;
        e.dump(&mut |_, _| n += 1);
        assert_eq!(n, 0);
        // The wrong path is NOENT whatever the file holds.
        assert_eq!(
            e.mnt(&c, b"192.0.2.1", b"/other"),
            Err(Mountstat3::ERR_NOENT)
        );
        let msg = read_handle_file(&f).unwrap_err();
        assert!(msg.contains(&*f.to_string_lossy()), "{msg}");
        std::fs::remove_file(&f).unwrap();
    }

    #[test]
    fn export_paths_must_be_absolute_and_short_enough() {
        assert!(check_export_path("/kernel").is_ok());
        assert!(check_export_path("/").is_ok());
        assert!(check_export_path("kernel")
            .unwrap_err()
            .contains("absolute"));
        assert!(check_export_path("").unwrap_err().contains("absolute"));
        let long = format!("/{}", "a".repeat(MNTPATHLEN));
        assert!(check_export_path(&long).unwrap_err().contains("1025 bytes"));
    }
}
