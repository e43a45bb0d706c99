//! The kernel's file handles, `name_to_handle_at(2)` and `open_by_handle_at(2)`: the only
//! `unsafe` of this crate (`std` and `rustix` offer neither call).
//!
//! A [`KernelFh`] names an inode of one file system by what its kernel export operations
//! encode (for ext4, xfs and tmpfs: the inode number and its generation; btrfs adds the
//! subvolume), so it goes stale when the inode is freed and reused, and opening it walks no
//! path: it is what knfsd puts in its NFS handles. Opening one needs `CAP_DAC_READ_SEARCH`
//! (the server runs as root).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The most handle bytes kept: what fits in an NFSv3 handle beside our header
/// ([`crate::handle`]). ext4 uses 8, tmpfs and xfs 12 to 16, btrfs 20.
pub const MAX_FH_BYTES: usize = 44;

/// `MAX_HANDLE_SZ` of `<fcntl.h>`: the kernel never encodes more.
const MAX_HANDLE_SZ: usize = 128;

/// `struct file_handle` with room for the largest handle.
///
/// # Invariants
/// `handle_bytes` ≤ `MAX_HANDLE_SZ` whenever it is passed to the kernel: the kernel reads or
/// writes at most `handle_bytes` bytes of `f_handle`.
#[repr(C)]
struct RawHandle {
    handle_bytes: libc::c_uint,
    handle_type: libc::c_int,
    f_handle: [u8; MAX_HANDLE_SZ],
}

/// A file handle of the kernel: its type and at most [`MAX_FH_BYTES`] bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct KernelFh {
    kind: i32,
    len: u8,
    bytes: [u8; MAX_FH_BYTES],
}

impl std::fmt::Debug for KernelFh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KernelFh(type {}, {:02x?})", self.kind, self.bytes())
    }
}

impl KernelFh {
    /// A handle from its type and bytes (as kept in an NFS handle); `None` when longer than
    /// [`MAX_FH_BYTES`].
    pub fn new(kind: i32, bytes: &[u8]) -> Option<KernelFh> {
        let len = u8::try_from(bytes.len())
            .ok()
            .filter(|l| usize::from(*l) <= MAX_FH_BYTES)?;
        let mut b = [0u8; MAX_FH_BYTES];
        b.get_mut(..bytes.len())?.copy_from_slice(bytes);
        Some(KernelFh {
            kind,
            len,
            bytes: b,
        })
    }

    /// The handle type (`FILEID_*` of the file system's export operations).
    pub fn kind(&self) -> i32 {
        self.kind
    }

    /// The handle bytes.
    pub fn bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or_default()
    }

    /// The handle of `name` in the directory `dir` (an empty `name`: of `dir` itself), never
    /// following a final symlink.
    ///
    /// # Errors
    /// As `name_to_handle_at(2)`: `EOPNOTSUPP` for a file system that cannot give handles
    /// (9p, overlayfs without `nfs_export`); `EOVERFLOW` for a handle over
    /// [`MAX_FH_BYTES`].
    pub fn of(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<KernelFh> {
        let mut raw = RawHandle {
            handle_bytes: MAX_HANDLE_SZ as libc::c_uint,
            handle_type: 0,
            f_handle: [0; MAX_HANDLE_SZ],
        };
        let mut mount_id: libc::c_int = 0;
        let flags = if name.is_empty() {
            libc::AT_EMPTY_PATH
        } else {
            0
        };
        // SAFETY: `name` is NUL-terminated; `raw` is a `struct file_handle` whose `f_handle`
        // holds the `handle_bytes` (MAX_HANDLE_SZ) bytes announced, and it and `mount_id`
        // live across the call; `dir` is an open descriptor for the call's duration.
        let rc = unsafe {
            libc::name_to_handle_at(
                dir.as_raw_fd(),
                name.as_ptr(),
                (&raw mut raw).cast::<libc::file_handle>(),
                &mut mount_id,
                flags,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let n = usize::try_from(raw.handle_bytes).unwrap_or(usize::MAX);
        let bytes = raw
            .f_handle
            .get(..n)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
        KernelFh::new(raw.handle_type, bytes)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EOVERFLOW))
    }

    /// Open the inode this handle names on the file system of `mount` (any descriptor of
    /// it), with `flags` (`O_CLOEXEC` is added). No path is resolved: a rename or a symlink
    /// swap anywhere cannot redirect it.
    ///
    /// # Errors
    /// As `open_by_handle_at(2)`: `ESTALE` when the inode is gone, `EPERM` without
    /// `CAP_DAC_READ_SEARCH`.
    pub fn open(&self, mount: BorrowedFd<'_>, flags: libc::c_int) -> io::Result<OwnedFd> {
        let mut raw = RawHandle {
            handle_bytes: libc::c_uint::from(self.len),
            handle_type: self.kind,
            f_handle: [0; MAX_HANDLE_SZ],
        };
        if let Some(dst) = raw.f_handle.get_mut(..usize::from(self.len)) {
            dst.copy_from_slice(self.bytes());
        }
        // SAFETY: `raw` is a `struct file_handle` whose `handle_bytes` (≤ MAX_FH_BYTES <
        // MAX_HANDLE_SZ) bytes of `f_handle` are initialised; `mount` is open for the call.
        let fd = unsafe {
            libc::open_by_handle_at(
                mount.as_raw_fd(),
                (&raw mut raw).cast::<libc::file_handle>(),
                flags | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by the kernel, open, and owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_handle_opens_the_same_inode_after_a_rename_and_goes_stale_after_removal() {
        let dir = std::env::temp_dir().join(format!("nfsd-fhandle-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a"), b"x").unwrap();
        let d = std::fs::File::open(&dir).unwrap();
        let fh = match KernelFh::of(d.as_fd(), c"a") {
            Ok(fh) => fh,
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                println!("skipped: the temporary directory's file system has no handles");
                return;
            }
            Err(e) => panic!("name_to_handle_at: {e}"),
        };
        assert!(KernelFh::new(fh.kind(), fh.bytes()) == Some(fh));
        assert!(KernelFh::new(0, &[0; MAX_FH_BYTES + 1]).is_none());
        std::fs::rename(dir.join("a"), dir.join("b")).unwrap();
        match fh.open(d.as_fd(), libc::O_RDONLY) {
            Ok(f) => {
                let f = std::fs::File::from(f);
                use std::os::unix::fs::MetadataExt;
                let b = std::fs::metadata(dir.join("b")).unwrap();
                assert_eq!(f.metadata().unwrap().ino(), b.ino());
                std::fs::remove_file(dir.join("b")).unwrap();
                drop(f);
                let e = fh.open(d.as_fd(), libc::O_PATH).unwrap_err();
                assert_eq!(e.raw_os_error(), Some(libc::ESTALE));
            }
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                println!("skipped: open_by_handle_at needs CAP_DAC_READ_SEARCH");
            }
            Err(e) => panic!("open_by_handle_at: {e}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
