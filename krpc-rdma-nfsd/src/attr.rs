//! Attributes and permissions: `stat` results as `fattr3`, POSIX mode checks against an
//! `AUTH_SYS` caller (the server runs as root, so it enforces them itself).

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};

use nfs_proto::nfs3::{Fattr3, Ftype3, Nfstime3, Specdata3};
use nfs_service::nfsd::NfsError;
use onc_rpc::svc::Cred;

/// Read permission bit (of `rwx`).
pub const R: u32 = 4;
/// Write permission bit.
pub const W: u32 = 2;
/// Execute / search permission bit.
pub const X: u32 = 1;

fn time(secs: i64, nsecs: i64) -> Nfstime3 {
    Nfstime3 {
        seconds: u32::try_from(secs).unwrap_or(0),
        nseconds: u32::try_from(nsecs).unwrap_or(0),
    }
}

/// The `fattr3` of `m`; `fsid` is the export's.
pub fn fattr(m: &fs::Metadata, fsid: u64) -> Fattr3 {
    let ft = m.file_type();
    let type_ = if ft.is_dir() {
        Ftype3::Dir
    } else if ft.is_symlink() {
        Ftype3::Lnk
    } else if ft.is_block_device() {
        Ftype3::Blk
    } else if ft.is_char_device() {
        Ftype3::Chr
    } else if ft.is_socket() {
        Ftype3::Sock
    } else if ft.is_fifo() {
        Ftype3::Fifo
    } else {
        Ftype3::Reg
    };
    let rdev = m.rdev();
    Fattr3 {
        type_,
        mode: m.mode() & 0o7777,
        nlink: u32::try_from(m.nlink()).unwrap_or(u32::MAX),
        uid: m.uid(),
        gid: m.gid(),
        size: m.size(),
        used: m.blocks().saturating_mul(512),
        rdev: Specdata3 {
            // Linux's dev_t encoding: major bits 8..20 and 32..44, minor 0..8 and 20..32.
            specdata1: (((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff)) as u32,
            specdata2: ((rdev & 0xff) | ((rdev >> 12) & !0xff)) as u32,
        },
        fsid,
        fileid: m.ino(),
        atime: time(m.atime(), m.atime_nsec()),
        mtime: time(m.mtime(), m.mtime_nsec()),
        ctime: time(m.ctime(), m.ctime_nsec()),
    }
}

/// Whether `cred` is in group `gid`.
pub fn in_group(cred: &Cred<'_>, gid: u32) -> bool {
    cred.gid == gid || cred.gids.contains(&gid)
}

/// The `rwx` bits `cred` has on an object of `m` (root has all but execute on a file no
/// one may execute, as POSIX says).
pub fn perms(cred: &Cred<'_>, m: &fs::Metadata) -> u32 {
    let mode = m.mode();
    if cred.uid == 0 {
        let x = if m.is_dir() || mode & 0o111 != 0 {
            X
        } else {
            0
        };
        return R | W | x;
    }
    let shift = if cred.uid == m.uid() {
        6
    } else if in_group(cred, m.gid()) {
        3
    } else {
        0
    };
    (mode >> shift) & 7
}

/// `Ok` if `cred` has every bit of `want` on `m`, else [`NfsError::Acces`].
pub fn check(cred: &Cred<'_>, m: &fs::Metadata, want: u32) -> Result<(), NfsError> {
    if perms(cred, m) & want == want {
        Ok(())
    } else {
        Err(NfsError::Acces)
    }
}

/// Whether `cred` owns `m` (or is root).
pub fn owns(cred: &Cred<'_>, m: &fs::Metadata) -> bool {
    cred.uid == 0 || cred.uid == m.uid()
}

/// The NFS error of an I/O error.
pub fn nfs_err(e: &io::Error) -> NfsError {
    match e.raw_os_error() {
        Some(libc::EPERM) => NfsError::Perm,
        Some(libc::ENOENT) => NfsError::NoEnt,
        Some(libc::ENXIO) => NfsError::Nxio,
        Some(libc::EACCES) => NfsError::Acces,
        Some(libc::EEXIST) => NfsError::Exist,
        Some(libc::EXDEV) => NfsError::Xdev,
        Some(libc::ENOTDIR) => NfsError::NotDir,
        Some(libc::EISDIR) => NfsError::IsDir,
        Some(libc::EINVAL) => NfsError::Inval,
        Some(libc::EFBIG) => NfsError::FBig,
        Some(libc::ENOSPC) => NfsError::NoSpc,
        Some(libc::EROFS) => NfsError::RoFs,
        Some(libc::EMLINK) => NfsError::MLink,
        Some(libc::ENAMETOOLONG) => NfsError::NameTooLong,
        Some(libc::ENOTEMPTY) => NfsError::NotEmpty,
        Some(libc::EDQUOT) => NfsError::DQuot,
        Some(libc::ESTALE) => NfsError::Stale,
        Some(libc::ELOOP) => NfsError::Inval,
        _ => NfsError::Io,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn mode_bits_by_owner_group_other() {
        let p = std::env::temp_dir().join(format!("nfsd-attr-{}", std::process::id()));
        fs::write(&p, b"").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o640)).unwrap();
        let m = fs::metadata(&p).unwrap();
        let mut c = Cred::none();
        c.uid = m.uid();
        c.gid = u32::MAX - 1;
        if m.uid() != 0 {
            assert_eq!(perms(&c, &m), R | W);
        }
        c.uid = u32::MAX - 1;
        c.gid = m.gid();
        assert_eq!(perms(&c, &m), R);
        c.gid = u32::MAX - 1;
        assert_eq!(perms(&c, &m), 0);
        assert!(check(&c, &m, R).is_err());
        c.uid = 0;
        assert_eq!(perms(&c, &m), R | W);
        fs::remove_file(&p).unwrap();
        assert_eq!(
            nfs_err(&io::Error::from_raw_os_error(libc::ENOTEMPTY)),
            NfsError::NotEmpty
        );
    }
}
