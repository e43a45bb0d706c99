//! [`LocalFs`]: nfs-service's [`Backend`] over a local directory, on descriptors.
//!
//! * **Confinement.** No operation resolves a path a client can change. A handle
//!   ([`crate::handle`]) opens its object with `open_by_handle_at(2)`; a name in a directory
//!   is opened with `openat2(2)` from the directory's descriptor, one component, never
//!   following a symlink (`RESOLVE_NO_SYMLINKS`) nor crossing a mount (`RESOLVE_NO_XDEV`);
//!   `..` is refused above the export root; every change works on the descriptor (`*at`
//!   calls with `AT_EMPTY_PATH`, `ftruncate`, `futimens`, `linkat` of the descriptor,
//!   `chmod` of `/proc/self/fd/N`, which names the inode, not a path). A rename or a symlink
//!   swap racing an operation can make it fail, never reach outside the export.
//! * **Identity.** The server runs as root and enforces the POSIX mode bits against the
//!   caller's `AUTH_SYS` credential itself ([`crate::attr`]), the sticky bit of a directory
//!   included; created objects are given the caller's uid and gid (`fchownat` of the new
//!   object's descriptor). A directory, symlink, socket or FIFO is made with mode 0 and
//!   checked to be the server's fresh object before it is handed to the caller, so a rename
//!   racing the creation cannot get another object chowned. Root squash is the dispatcher's
//!   ([`onc_rpc::svc::Squash`]).
//! * **WRITE and READ without a copy**: when the pages are those of the registered arena the
//!   server runs on ([`LocalFs::with_file_pages`]), a WRITE's received pages go to the file
//!   with one `pwritev` over them, and a READ is one `preadv` straight into fresh pages
//!   ([`VerbsArena::write_pages_at`] / [`VerbsArena::read_pages_at`]: the system call with
//!   the page pointers is the verbs shim's). Pages of any other provider (tests over a heap
//!   arena) are copied once through a per-thread buffer, counted in
//!   [`LocalFs::bounced_bytes`].
//! * COMMIT is `fdatasync`; a FILE_SYNC WRITE `fsync`, DATA_SYNC `fdatasync`. The write
//!   verifier is the server instance's start time. FSSTAT is `fstatvfs` of the export.
//! * READDIR cookies are a hash of the entry name (sorted by it), so they stay valid while
//!   entries are added or removed between calls (`rm -r` lists as it deletes); the cookie
//!   verifier is not used.
//! * The export must be on a file system that gives file handles (ext4, xfs, btrfs, tmpfs;
//!   not 9p, nor overlayfs without `nfs_export=on`): [`LocalFs::new`] says so otherwise.

use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::fs::{self, File, FileTimes};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use krpc_rdma_verbs::arena::VerbsArena;
use mbuf::{Chain, PageFragment, PageProvider};
use nfs_proto::nfs3::*;
use nfs_service::nfsd::{
    access3_bits, Backend, DirEnd, DirEntry, DirSink, NfsError, NfsResult, ReadData, WriteIov,
    Written,
};
use onc_rpc::svc::Cred;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Timespec, Timestamps};

use crate::attr::{check, fattr, in_group, nfs_err, owns, perms, R, W, X};
use crate::fhandle::KernelFh;
use crate::handle::{HandleKey, Handles};

/// READ of `want` bytes at `offset` of `f` by one `preadv` (resumed only after a short
/// read) straight into fresh pages of `arena` (which `pages` is); the chain is trimmed to
/// the bytes read.
fn read_into_pages(
    arena: &VerbsArena,
    pages: &Arc<dyn PageProvider>,
    f: &File,
    offset: u64,
    want: usize,
) -> NfsResult<(Chain, usize)> {
    let mut data = Chain::alloc_pages(pages, want).map_err(|_| NfsError::Jukebox)?;
    let n = FRAGS.with(|v| {
        let mut frags = v.borrow_mut();
        frags.clear();
        let all = data
            .page_fragments_in(0..want)
            .map_err(|_| NfsError::ServerFault)?;
        frags.extend(all);
        io(arena.read_pages_at(f.as_fd(), offset, &frags))
    })?;
    let short = i64::try_from(want - n.min(want)).map_err(|_| NfsError::ServerFault)?;
    data.adj(-short).map_err(|_| NfsError::ServerFault)?;
    Ok((data, n.min(want)))
}

/// Cookies of "." and "..": entries' hashed cookies are above them.
const DOT: u64 = 1;
const DOTDOT: u64 = 2;

/// How many `..` steps a LOOKUP of `..` may take to find the export root above it.
const MAX_DEPTH: usize = 4096;

thread_local! {
    /// The per-thread READ / WRITE buffer (grown to the largest transfer once).
    static BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The per-thread page-fragment list of a READ's `preadv` (grown once).
    static FRAGS: RefCell<Vec<PageFragment>> = const { RefCell::new(Vec::new()) };
}

/// A local directory served over NFSv3.
#[derive(Debug)]
pub struct LocalFs {
    /// The export root, open for reading: the file system's descriptor for
    /// `open_by_handle_at` as well.
    root_fd: OwnedFd,
    root_path: PathBuf,
    /// The export root's (`st_dev`, `st_ino`).
    root_id: (u64, u64),
    root_fh: KernelFh,
    handles: Handles,
    /// The server's effective uid: the owner of an object it just made.
    euid: u32,
    verf: Writeverf3,
    /// The registered arena whose pages are moved by `pwritev` / `preadv`.
    file_pages: Option<Arc<VerbsArena>>,
    /// Bytes copied through the per-thread buffer (pages of another provider).
    bounced: AtomicU64,
}

/// An object opened from a handle or a name: an `O_PATH` descriptor (it opens nothing: a
/// FIFO does not block, a device is not touched) and its metadata.
struct Obj {
    fd: OwnedFd,
    m: fs::Metadata,
}

/// What a new object is made as.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    Symlink,
    Socket,
    Fifo,
}

fn name_ok(name: &[u8]) -> NfsResult<CString> {
    if name.len() > NFS3_MAXNAMLEN {
        return Err(NfsError::NameTooLong);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
        return Err(NfsError::Inval);
    }
    CString::new(name).map_err(|_| NfsError::Inval)
}

fn io<T>(r: std::io::Result<T>) -> NfsResult<T> {
    r.map_err(|e| nfs_err(&e))
}

fn rx<T>(r: rustix::io::Result<T>) -> NfsResult<T> {
    r.map_err(|e| nfs_err(&e.into()))
}

fn systime(t: Nfstime3) -> SystemTime {
    UNIX_EPOCH + Duration::new(u64::from(t.seconds), t.nseconds.min(999_999_999))
}

fn timespec(t: SystemTime) -> Timespec {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    Timespec {
        tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: d.subsec_nanos().into(),
    }
}

/// `UTIME_OMIT`: leave this time as it is.
const OMIT: Timespec = Timespec {
    tv_sec: 0,
    tv_nsec: (1 << 30) - 2,
};

/// The metadata of a descriptor (`fstat`; an `O_PATH` one too).
fn meta(fd: OwnedFd) -> NfsResult<Obj> {
    let f = File::from(fd);
    let m = io(f.metadata())?;
    Ok(Obj { fd: f.into(), m })
}

/// `fchownat(fd, "", AT_EMPTY_PATH)`: the object itself, a symlink included.
fn chown_fd(fd: BorrowedFd<'_>, uid: Option<u32>, gid: Option<u32>) -> NfsResult<()> {
    // -1 means "unchanged" to the kernel: no peer-sent id may say it.
    if uid == Some(u32::MAX) || gid == Some(u32::MAX) {
        return Err(NfsError::Inval);
    }
    rx(rustix::fs::chownat(
        fd,
        c"",
        uid.map(rustix::fs::Uid::from_raw_unchecked),
        gid.map(rustix::fs::Gid::from_raw_unchecked),
        AtFlags::EMPTY_PATH,
    ))
}

/// `chmod` of the inode `fd` holds, through its `/proc/self/fd` link (no `fchmod` on an
/// `O_PATH` descriptor; the link names the inode, not a path). Not for symlinks.
fn chmod_fd(fd: BorrowedFd<'_>, mode: u32) -> NfsResult<()> {
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    io(fs::set_permissions(
        link,
        fs::Permissions::from_mode(mode & 0o7777),
    ))
}

/// The cookie of a directory entry: a hash of its name, above those of `.` and `..` (1, 2)
/// and below 2^62.
pub fn cookie_of(name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h >> 2).max(DOTDOT + 1)
}

impl LocalFs {
    /// Serve the directory `root`, with handles sealed by a fresh random key: they do not
    /// survive the process ([`LocalFs::with_key`] for a kept key).
    ///
    /// # Errors
    /// As [`LocalFs::with_key`], or no random key.
    pub fn new(root: &Path) -> std::io::Result<LocalFs> {
        LocalFs::with_key(root, HandleKey::random()?)
    }

    /// Serve the directory `root`, sealing handles with `key`.
    ///
    /// # Errors
    /// The directory cannot be opened or is not a directory, or its file system gives no
    /// file handles, or the server may not open them (`CAP_DAC_READ_SEARCH`).
    pub fn with_key(root: &Path, key: HandleKey) -> std::io::Result<LocalFs> {
        use std::io::{Error, ErrorKind};
        let root_path = fs::canonicalize(root)?;
        let f = File::open(&root_path)?;
        let m = f.metadata()?;
        if !m.is_dir() {
            return Err(Error::new(ErrorKind::InvalidInput, "not a directory"));
        }
        let root_fd: OwnedFd = f.into();
        let root_fh = KernelFh::of(root_fd.as_fd(), c"").map_err(|e| {
            let why = match e.raw_os_error() {
                Some(libc::EOPNOTSUPP) => {
                    "its file system gives no file handles (name_to_handle_at: not supported): \
                     export a directory on ext4, xfs, btrfs or tmpfs"
                        .to_string()
                }
                Some(libc::EOVERFLOW) => {
                    "its file system's handles do not fit an NFSv3 handle".to_string()
                }
                _ => format!("name_to_handle_at: {e}"),
            };
            Error::new(ErrorKind::Unsupported, why)
        })?;
        root_fh.open(root_fd.as_fd(), libc::O_PATH).map_err(|e| {
            Error::new(
                e.kind(),
                format!(
                    "open_by_handle_at: {e} (the server needs CAP_DAC_READ_SEARCH: run it as root)"
                ),
            )
        })?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let verf = (now.as_secs() << 30 ^ u64::from(now.subsec_nanos())).to_be_bytes();
        Ok(LocalFs {
            root_fd,
            root_path,
            root_id: (m.dev(), m.ino()),
            handles: Handles::new(key, root_fh),
            root_fh,
            euid: rustix::process::geteuid().as_raw(),
            verf: Writeverf3(verf),
            file_pages: None,
            bounced: AtomicU64::new(0),
        })
    }

    /// Move WRITE and READ data of `arena`'s pages (the server's registered arena) between
    /// the pages and the files with `pwritev` / `preadv`, without a copy.
    #[must_use]
    pub fn with_file_pages(mut self, arena: Arc<VerbsArena>) -> LocalFs {
        self.file_pages = Some(arena);
        self
    }

    /// Bytes of WRITE and READ data copied through a buffer because their pages were not the
    /// [`LocalFs::with_file_pages`] arena's (0 on the server's data path).
    pub fn bounced_bytes(&self) -> u64 {
        self.bounced.load(Ordering::Relaxed)
    }

    /// The file-I/O arena, if `pages` is it.
    fn arena_for(&self, pages: &Arc<dyn PageProvider>) -> Option<&VerbsArena> {
        self.file_pages
            .as_deref()
            .filter(|a| std::ptr::addr_eq(Arc::as_ptr(pages), *a as *const VerbsArena))
    }

    fn bounced(&self, n: usize) {
        self.bounced.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// READ through the per-thread buffer: `pread`s into it, then a copy into fresh pages.
    fn read_bounced(
        &self,
        pages: &Arc<dyn PageProvider>,
        f: &File,
        offset: u64,
        want: usize,
    ) -> NfsResult<(Chain, usize)> {
        BUF.with(|b| {
            let mut buf = b.borrow_mut();
            if buf.len() < want {
                buf.resize(want, 0);
            }
            let dst = buf.get_mut(..want).ok_or(NfsError::ServerFault)?;
            let mut n = 0;
            while n < want {
                let at = offset.checked_add(n as u64).ok_or(NfsError::Inval)?;
                let got = io(f.read_at(dst.get_mut(n..).ok_or(NfsError::ServerFault)?, at))?;
                if got == 0 {
                    break;
                }
                n += got;
            }
            let mut data = Chain::alloc_pages(pages, n).map_err(|_| NfsError::Jukebox)?;
            let src = dst.get(..n).ok_or(NfsError::ServerFault)?;
            data.copyback(0, src).map_err(|_| NfsError::ServerFault)?;
            self.bounced(n);
            Ok((data, n))
        })
    }

    /// The export root's path.
    pub fn root_path(&self) -> &Path {
        &self.root_path
    }

    /// The export root's handle.
    pub fn root_fh(&self) -> NfsFh3 {
        self.handles.encode(&self.root_fh)
    }

    /// The write verifier of this server instance.
    pub fn verf(&self) -> Writeverf3 {
        self.verf
    }

    fn fsid(&self) -> u64 {
        self.root_id.0
    }

    fn is_root(&self, m: &fs::Metadata) -> bool {
        (m.dev(), m.ino()) == self.root_id
    }

    /// The object of a handle, opened `O_PATH` by its kernel handle.
    fn obj(&self, fh: &NfsFh3) -> NfsResult<Obj> {
        let k = self.handles.decode(fh)?;
        let fd =
            k.open(self.root_fd.as_fd(), libc::O_PATH)
                .map_err(|e| match e.raw_os_error() {
                    Some(libc::ESTALE) | Some(libc::ENOENT) => NfsError::Stale,
                    _ => nfs_err(&e),
                })?;
        let o = meta(fd)?;
        if o.m.dev() != self.root_id.0 {
            return Err(NfsError::Stale);
        }
        Ok(o)
    }

    /// The object of `fh` opened again with `flags` (for I/O: the `O_PATH` descriptor
    /// cannot read or write); the handle names the same inode, no path is resolved.
    fn reopen(&self, fh: &NfsFh3, flags: libc::c_int) -> NfsResult<File> {
        let k = self.handles.decode(fh)?;
        k.open(self.root_fd.as_fd(), flags)
            .map(File::from)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ESTALE) | Some(libc::ENOENT) => NfsError::Stale,
                _ => nfs_err(&e),
            })
    }

    /// A directory the caller may search and, with `want`, read or change.
    fn dir(&self, cred: &Cred<'_>, fh: &NfsFh3, want: u32) -> NfsResult<Obj> {
        let o = self.obj(fh)?;
        if !o.m.is_dir() {
            return Err(NfsError::NotDir);
        }
        check(cred, &o.m, want)?;
        Ok(o)
    }

    /// A regular file for reading (`R`) or writing (`W`); the owner may always (as knfsd's
    /// owner override: a client checks access at open).
    fn file(&self, cred: &Cred<'_>, fh: &NfsFh3, want: u32) -> NfsResult<Obj> {
        let o = self.obj(fh)?;
        if o.m.is_dir() {
            return Err(NfsError::IsDir);
        }
        if !o.m.is_file() {
            return Err(NfsError::Inval);
        }
        if !(owns(cred, &o.m) || perms(cred, &o.m) & want == want) {
            return Err(NfsError::Acces);
        }
        Ok(o)
    }

    /// Open `name` in the directory `dir`: one component, no symlink followed, no mount
    /// crossed.
    fn child(&self, dir: &Obj, name: &CStr) -> NfsResult<Obj> {
        let fd = rustix::fs::openat2(
            &dir.fd,
            name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH
                | ResolveFlags::NO_SYMLINKS
                | ResolveFlags::NO_MAGICLINKS
                | ResolveFlags::NO_XDEV,
        )
        .map_err(|e| match e {
            // A mount point inside the export: not served (no `crossmnt`).
            rustix::io::Errno::XDEV => NfsError::Acces,
            e => nfs_err(&e.into()),
        })?;
        meta(fd)
    }

    /// The handle of an opened object.
    fn fh_of(&self, o: &Obj) -> NfsResult<NfsFh3> {
        let k = KernelFh::of(o.fd.as_fd(), c"").map_err(|_| NfsError::ServerFault)?;
        Ok(self.handles.encode(&k))
    }

    /// The parent of the directory `d`, if it is still inside the export: found by walking
    /// `..` up to the export root (at most [`MAX_DEPTH`] steps).
    fn parent_in_export(&self, d: &Obj) -> NfsResult<Obj> {
        if self.is_root(&d.m) {
            return self.obj(&self.root_fh());
        }
        let up = |o: &Obj| -> NfsResult<Obj> {
            let fd = rx(rustix::fs::openat(
                &o.fd,
                c"..",
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            ))?;
            meta(fd)
        };
        let parent = up(d)?;
        let mut at = up(d)?;
        for _ in 0..MAX_DEPTH {
            if self.is_root(&at.m) {
                return Ok(parent);
            }
            let next = up(&at)?;
            if (next.m.dev(), next.m.ino()) == (at.m.dev(), at.m.ino()) {
                break; // the file system's root: the export is not above
            }
            at = next;
        }
        Err(NfsError::Stale)
    }

    /// Whether `cred` may remove or rename the entry `name` of `dir` under the sticky bit:
    /// only the entry's owner, the directory's owner, or root.
    fn sticky_ok(&self, cred: &Cred<'_>, dir: &Obj, name: &CStr) -> NfsResult<()> {
        if dir.m.mode() & 0o1000 == 0 || owns(cred, &dir.m) {
            return Ok(());
        }
        let st = rx(rustix::fs::statat(&dir.fd, name, AtFlags::SYMLINK_NOFOLLOW))?;
        if st.st_uid == cred.uid {
            Ok(())
        } else {
            Err(NfsError::Perm)
        }
    }

    /// SETATTR's work on the object `o` of handle `fh` (also after CREATE / MKDIR / MKNOD).
    fn apply(&self, cred: &Cred<'_>, fh: &NfsFh3, o: &Obj, a: &Sattr3) -> NfsResult<()> {
        let m = &o.m;
        let link = m.file_type().is_symlink();
        if let Some(size) = a.size {
            if m.is_dir() {
                return Err(NfsError::IsDir);
            }
            if !m.is_file() {
                return Err(NfsError::Inval);
            }
            if !owns(cred, m) {
                check(cred, m, W)?;
            }
            io(self.reopen(fh, libc::O_WRONLY)?.set_len(size))?;
        }
        if a.uid.is_some() || a.gid.is_some() {
            let uid = a.uid.filter(|u| *u != m.uid());
            let gid = a.gid.filter(|g| *g != m.gid());
            let may = cred.uid == 0
                || (uid.is_none() && cred.uid == m.uid() && gid.is_none_or(|g| in_group(cred, g)));
            if !may {
                return Err(NfsError::Perm);
            }
            if uid.is_some() || gid.is_some() {
                chown_fd(o.fd.as_fd(), uid, gid)?;
            }
        }
        if let Some(mode) = a.mode {
            if !owns(cred, m) {
                return Err(NfsError::Perm);
            }
            if !link {
                chmod_fd(o.fd.as_fd(), mode)?;
            }
        }
        let when = |t: SetTime| match t {
            SetTime::DontChange => None,
            SetTime::ServerTime => Some((SystemTime::now(), false)),
            SetTime::ClientTime(t) => Some((systime(t), true)),
        };
        let (at, mt) = (when(a.atime), when(a.mtime));
        if (at.is_some() || mt.is_some()) && !link {
            let explicit = at.is_some_and(|t| t.1) || mt.is_some_and(|t| t.1);
            if !owns(cred, m) && (explicit || check(cred, m, W).is_err()) {
                return Err(NfsError::Perm);
            }
            let ts = |t: Option<(SystemTime, bool)>| t.map_or(OMIT, |(t, _)| timespec(t));
            let times = Timestamps {
                last_access: ts(at),
                last_modification: ts(mt),
            };
            rx(rustix::fs::utimensat(
                &o.fd,
                c"",
                &times,
                AtFlags::EMPTY_PATH,
            ))?;
        }
        Ok(())
    }

    /// Give the new object `o` to the caller and apply `attrs` (the caller's uid and gid
    /// are not taken from them); its handle.
    fn hand_over(&self, cred: &Cred<'_>, o: &Obj, attrs: Option<&Sattr3>) -> NfsResult<NfsFh3> {
        if o.m.uid() != cred.uid || o.m.gid() != cred.gid {
            chown_fd(o.fd.as_fd(), Some(cred.uid), Some(cred.gid))?;
        }
        let fh = self.fh_of(o)?;
        if let Some(a) = attrs {
            let a = Sattr3 {
                uid: None,
                gid: None,
                ..a.clone()
            };
            self.apply(&Cred { uid: 0, ..*cred }, &fh, o, &a)?;
        }
        Ok(fh)
    }

    /// Make `name` in `dir` as `kind` with mode 0 (`mk`), open it, check it is the object
    /// just made (the server's, mode 0, one link, or two for a directory: a rename racing
    /// the creation finds nothing else to hand over), then give it to the caller with
    /// `attrs` (its mode by default 0755 for a directory, 0644 for a socket or FIFO; none
    /// for a symlink).
    fn make(
        &self,
        cred: &Cred<'_>,
        dir: &Obj,
        name: &CStr,
        kind: Kind,
        attrs: &Sattr3,
        mk: impl FnOnce() -> rustix::io::Result<()>,
    ) -> NfsResult<NfsFh3> {
        rx(mk())?;
        let o = self.child(dir, name)?;
        let ft = o.m.file_type();
        use std::os::unix::fs::FileTypeExt;
        let (is_kind, links) = match kind {
            Kind::Dir => (ft.is_dir(), 2),
            Kind::Symlink => (ft.is_symlink(), 1),
            Kind::Socket => (ft.is_socket(), 1),
            Kind::Fifo => (ft.is_fifo(), 1),
        };
        let fresh = is_kind
            && o.m.uid() == self.euid
            && o.m.nlink() == links
            && (kind == Kind::Symlink || o.m.mode() & 0o7777 == 0);
        if !fresh {
            return Err(NfsError::Exist);
        }
        if kind != Kind::Symlink {
            let default = if kind == Kind::Dir { 0o755 } else { 0o644 };
            chmod_fd(o.fd.as_fd(), attrs.mode.unwrap_or(default))?;
        }
        let rest = Sattr3 {
            mode: None,
            ..attrs.clone()
        };
        self.hand_over(cred, &o, Some(&rest))
    }

    /// The directory `dir` the caller may change, and a valid entry name.
    fn changing(&self, cred: &Cred<'_>, dir: &NfsFh3, name: &[u8]) -> NfsResult<(Obj, CString)> {
        let name = name_ok(name)?;
        // The kernel reads an id of -1 as "unchanged": a new object could not be handed over.
        if cred.uid == u32::MAX || cred.gid == u32::MAX {
            return Err(NfsError::Inval);
        }
        Ok((self.dir(cred, dir, W | X)?, name))
    }
}

impl Backend for LocalFs {
    fn getattr(&self, _cred: &Cred<'_>, fh: &NfsFh3) -> NfsResult<Fattr3> {
        let o = self.obj(fh)?;
        Ok(fattr(&o.m, self.fsid()))
    }

    fn setattr(
        &self,
        cred: &Cred<'_>,
        fh: &NfsFh3,
        attrs: &Sattr3,
        guard: Option<Nfstime3>,
    ) -> NfsResult<()> {
        let o = self.obj(fh)?;
        if let Some(g) = guard {
            if fattr(&o.m, self.fsid()).ctime != g {
                return Err(NfsError::NotSync);
            }
        }
        self.apply(cred, fh, &o, attrs)
    }

    fn lookup(&self, cred: &Cred<'_>, dir: &NfsFh3, name: &[u8]) -> NfsResult<NfsFh3> {
        let d = self.dir(cred, dir, X)?;
        let o = match name {
            b"." => d,
            b".." => self.parent_in_export(&d)?,
            _ => self.child(&d, &name_ok(name)?)?,
        };
        self.fh_of(&o)
    }

    fn access(&self, cred: &Cred<'_>, fh: &NfsFh3, mask: u32) -> NfsResult<u32> {
        let o = self.obj(fh)?;
        let m = &o.m;
        let p = perms(cred, m);
        let a = access3_bits(p & R != 0, p & W != 0, p & X != 0, m.is_dir());
        Ok(a & mask)
    }

    fn readlink(&self, _cred: &Cred<'_>, fh: &NfsFh3) -> NfsResult<Nfspath3> {
        let o = self.obj(fh)?;
        if !o.m.file_type().is_symlink() {
            return Err(NfsError::Inval);
        }
        let target = rx(rustix::fs::readlinkat(&o.fd, c"", Vec::new()))?;
        Ok(Nfspath3(target.into_bytes()))
    }

    fn read(
        &self,
        cred: &Cred<'_>,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
        pages: &Arc<dyn PageProvider>,
    ) -> NfsResult<ReadData> {
        let o = self.file(cred, fh, R)?;
        let f = self.reopen(fh, libc::O_RDONLY)?;
        let want = usize::try_from(count).map_err(|_| NfsError::Inval)?;
        let (data, n) = match self.arena_for(pages) {
            Some(arena) => read_into_pages(arena, pages, &f, offset, want)?,
            None => self.read_bounced(pages, &f, offset, want)?,
        };
        let end = offset.saturating_add(n as u64);
        Ok(ReadData {
            data,
            eof: end >= o.m.size(),
        })
    }

    fn write(
        &self,
        cred: &Cred<'_>,
        fh: &NfsFh3,
        offset: u64,
        stable: StableHow,
        data: WriteIov<'_>,
    ) -> NfsResult<Written> {
        self.file(cred, fh, W)?;
        let len = data.len();
        offset.checked_add(len as u64).ok_or(NfsError::FBig)?;
        let f = self.reopen(fh, libc::O_WRONLY)?;
        match data {
            WriteIov::Bytes(b) => io(f.write_all_at(b, offset))?,
            WriteIov::Pages { provider, slices } if self.arena_for(provider).is_some() => {
                let arena = self.arena_for(provider).ok_or(NfsError::ServerFault)?;
                let n = io(arena.write_pages_at(f.as_fd(), offset, slices))?;
                if n != len {
                    return Err(NfsError::Io);
                }
            }
            WriteIov::Pages { provider, slices } => BUF.with(|b| {
                self.bounced(len);
                let mut buf = b.borrow_mut();
                if buf.len() < len {
                    buf.resize(len, 0);
                }
                let mut at = 0usize;
                for s in slices {
                    let end = at.checked_add(s.len).ok_or(NfsError::Inval)?;
                    let dst = buf.get_mut(at..end).ok_or(NfsError::ServerFault)?;
                    provider
                        .read_page(s.addr, s.offset, dst)
                        .map_err(|_| NfsError::ServerFault)?;
                    at = end;
                }
                let src = buf.get(..len).ok_or(NfsError::ServerFault)?;
                io(f.write_all_at(src, offset))
            })?,
        }
        match stable {
            StableHow::FileSync => io(f.sync_all())?,
            StableHow::DataSync => io(f.sync_data())?,
            _ => {}
        }
        Ok(Written {
            count: u32::try_from(len).map_err(|_| NfsError::Inval)?,
            committed: stable,
            verf: self.verf,
        })
    }

    fn create(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        name: &[u8],
        how: &Createhow3,
    ) -> NfsResult<NfsFh3> {
        let (d, name) = self.changing(cred, dir, name)?;
        // O_EXCL: the descriptor is the new file's, whatever races the name.
        let new = |mode: u32| {
            let fd = rustix::fs::openat(
                &d.fd,
                name.as_c_str(),
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(mode),
            )?;
            Ok::<File, rustix::io::Errno>(File::from(fd))
        };
        match how {
            Createhow3::Guarded(a) | Createhow3::Unchecked(a) => match new(0o666) {
                Ok(f) => {
                    let o = meta(f.into())?;
                    self.hand_over(cred, &o, Some(a))
                }
                Err(rustix::io::Errno::EXIST) if matches!(how, Createhow3::Unchecked(_)) => {
                    let o = self.child(&d, &name)?;
                    if !o.m.is_file() {
                        return Err(NfsError::Exist);
                    }
                    let fh = self.fh_of(&o)?;
                    self.apply(cred, &fh, &o, a)?;
                    Ok(fh)
                }
                Err(e) => rx(Err(e)),
            },
            Createhow3::Exclusive(v) => {
                // The verifier is kept in atime / mtime (as knfsd and FreeBSD do); the
                // client sets the real attributes with a SETATTR next.
                let (a, b) = v.0.split_at(4);
                let secs = |x: &[u8]| {
                    let w: [u8; 4] = x.try_into().unwrap_or_default();
                    u32::from_be_bytes(w)
                };
                let (at, mt) = (secs(a), secs(b));
                match new(0o600) {
                    Ok(f) => {
                        io(f.set_times(
                            FileTimes::new()
                                .set_accessed(UNIX_EPOCH + Duration::from_secs(at.into()))
                                .set_modified(UNIX_EPOCH + Duration::from_secs(mt.into())),
                        ))?;
                        let o = meta(f.into())?;
                        self.hand_over(cred, &o, None)
                    }
                    Err(rustix::io::Errno::EXIST) => {
                        let o = self.child(&d, &name)?;
                        let same = o.m.is_file()
                            && u32::try_from(o.m.atime()).ok() == Some(at)
                            && u32::try_from(o.m.mtime()).ok() == Some(mt);
                        if same {
                            self.fh_of(&o)
                        } else {
                            Err(NfsError::Exist)
                        }
                    }
                    Err(e) => rx(Err(e)),
                }
            }
        }
    }

    fn mkdir(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        name: &[u8],
        attrs: &Sattr3,
    ) -> NfsResult<NfsFh3> {
        let (d, name) = self.changing(cred, dir, name)?;
        self.make(cred, &d, &name, Kind::Dir, attrs, || {
            rustix::fs::mkdirat(&d.fd, name.as_c_str(), Mode::empty())
        })
    }

    fn symlink(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        name: &[u8],
        _attrs: &Sattr3,
        target: &[u8],
    ) -> NfsResult<NfsFh3> {
        if target.is_empty() || target.contains(&0) {
            return Err(NfsError::Inval);
        }
        let target = CString::new(target).map_err(|_| NfsError::Inval)?;
        let (d, name) = self.changing(cred, dir, name)?;
        self.make(cred, &d, &name, Kind::Symlink, &Sattr3::default(), || {
            rustix::fs::symlinkat(target.as_c_str(), &d.fd, name.as_c_str())
        })
    }

    fn mknod(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        name: &[u8],
        what: &Mknoddata3,
    ) -> NfsResult<NfsFh3> {
        let (kind, ft, a) = match what {
            Mknoddata3::Sock(a) => (Kind::Socket, FileType::Socket, a),
            Mknoddata3::Fifo(a) => (Kind::Fifo, FileType::Fifo, a),
            // Devices: only root may make them, and this server does not.
            Mknoddata3::Chr(_) | Mknoddata3::Blk(_) => return Err(NfsError::NotSupp),
            Mknoddata3::Other(_) => return Err(NfsError::BadType),
        };
        let (d, name) = self.changing(cred, dir, name)?;
        self.make(cred, &d, &name, kind, a, || {
            rustix::fs::mknodat(&d.fd, name.as_c_str(), ft, Mode::empty(), 0)
        })
    }

    fn remove(&self, cred: &Cred<'_>, dir: &NfsFh3, name: &[u8]) -> NfsResult<()> {
        let (d, name) = self.changing(cred, dir, name)?;
        self.sticky_ok(cred, &d, &name)?;
        // Linux's unlink of a directory is EISDIR.
        rx(rustix::fs::unlinkat(
            &d.fd,
            name.as_c_str(),
            AtFlags::empty(),
        ))
    }

    fn rmdir(&self, cred: &Cred<'_>, dir: &NfsFh3, name: &[u8]) -> NfsResult<()> {
        let (d, name) = self.changing(cred, dir, name)?;
        self.sticky_ok(cred, &d, &name)?;
        rx(rustix::fs::unlinkat(
            &d.fd,
            name.as_c_str(),
            AtFlags::REMOVEDIR,
        ))
    }

    fn rename(
        &self,
        cred: &Cred<'_>,
        from_dir: &NfsFh3,
        from: &[u8],
        to_dir: &NfsFh3,
        to: &[u8],
    ) -> NfsResult<()> {
        let (a, from) = self.changing(cred, from_dir, from)?;
        let (b, to) = self.changing(cred, to_dir, to)?;
        self.sticky_ok(cred, &a, &from)?;
        match self.sticky_ok(cred, &b, &to) {
            Ok(()) | Err(NfsError::NoEnt) => {}
            Err(e) => return Err(e),
        }
        rx(rustix::fs::renameat(
            &a.fd,
            from.as_c_str(),
            &b.fd,
            to.as_c_str(),
        ))
    }

    fn link(&self, cred: &Cred<'_>, file: &NfsFh3, dir: &NfsFh3, name: &[u8]) -> NfsResult<()> {
        let src = self.obj(file)?;
        if src.m.is_dir() {
            return Err(NfsError::IsDir);
        }
        let (d, name) = self.changing(cred, dir, name)?;
        // The descriptor itself (AT_EMPTY_PATH, which needs CAP_DAC_READ_SEARCH).
        rx(rustix::fs::linkat(
            &src.fd,
            c"",
            &d.fd,
            name.as_c_str(),
            AtFlags::EMPTY_PATH,
        ))
    }

    fn readdir(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        cookie: u64,
        _verf: Cookieverf3,
        sink: &mut dyn DirSink,
    ) -> NfsResult<DirEnd> {
        let d = self.dir(cred, dir, R)?;
        let list = self.reopen(dir, libc::O_RDONLY | libc::O_DIRECTORY)?;
        let mut names: Vec<(u64, Vec<u8>, u64)> = Vec::new();
        for e in rx(rustix::fs::Dir::new(list))? {
            let e = rx(e)?;
            let n = e.file_name().to_bytes();
            if n == b"." || n == b".." {
                continue;
            }
            names.push((cookie_of(n), n.to_vec(), e.ino()));
        }
        names.push((DOT, b".".to_vec(), d.m.ino()));
        names.push((DOTDOT, b"..".to_vec(), 0));
        names.sort_unstable();
        let end = |eof| DirEnd {
            verf: Cookieverf3::default(),
            eof,
        };
        for (c, n, ino) in names.iter().filter(|(c, _, _)| *c > cookie) {
            let plus = sink.wants_plus();
            let o = match n.as_slice() {
                b"." if plus => Some(self.obj(dir)?),
                b"." => None,
                // Above the export root, `..` is the root itself.
                b".." => self.parent_in_export(&d).ok(),
                _ if plus => {
                    let c = CString::new(n.as_slice()).map_err(|_| NfsError::ServerFault)?;
                    match self.child(&d, &c) {
                        Ok(o) => Some(o),
                        Err(NfsError::NoEnt) => continue, // removed since the listing
                        Err(_) => None,                   // a mount point: no attributes
                    }
                }
                _ => None,
            };
            let (attr, fh) = match (&o, plus) {
                (Some(o), true) => (Some(fattr(&o.m, self.fsid())), self.fh_of(o).ok()),
                _ => (None, None),
            };
            let fileid = o.as_ref().map_or(*ino, |o| o.m.ino());
            let e = DirEntry {
                fileid,
                name: n,
                cookie: *c,
                attr: attr.as_ref(),
                fh: fh.as_ref().map(|f| f.data.as_slice()),
            };
            if !sink.entry(&e) {
                return Ok(end(false));
            }
        }
        Ok(end(true))
    }

    fn fsstat(&self, _cred: &Cred<'_>, fh: &NfsFh3) -> NfsResult<FsstatResOk> {
        self.obj(fh)?;
        let v = rx(rustix::fs::fstatvfs(&self.root_fd))?;
        let bytes = |blocks: u64| blocks.saturating_mul(v.f_frsize);
        Ok(FsstatResOk {
            obj_attributes: None,
            tbytes: bytes(v.f_blocks),
            fbytes: bytes(v.f_bfree),
            abytes: bytes(v.f_bavail),
            tfiles: v.f_files,
            ffiles: v.f_ffree,
            afiles: v.f_favail,
            invarsec: 0,
        })
    }

    fn fsinfo(&self, _cred: &Cred<'_>, fh: &NfsFh3) -> NfsResult<FsinfoResOk> {
        self.obj(fh)?;
        Ok(FsinfoResOk {
            obj_attributes: None,
            rtmax: 1 << 20,
            rtpref: 1 << 20,
            rtmult: 4096,
            wtmax: 1 << 20,
            wtpref: 1 << 20,
            wtmult: 4096,
            dtpref: 65536,
            maxfilesize: i64::MAX as u64,
            time_delta: Nfstime3 {
                seconds: 0,
                nseconds: 1,
            },
            properties: FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME,
        })
    }

    fn pathconf(&self, _cred: &Cred<'_>, fh: &NfsFh3) -> NfsResult<PathconfResOk> {
        self.obj(fh)?;
        Ok(PathconfResOk {
            obj_attributes: None,
            linkmax: 65_000,
            name_max: NFS3_MAXNAMLEN as u32,
            no_trunc: true,
            chown_restricted: true,
            case_insensitive: false,
            case_preserving: true,
        })
    }

    fn commit(
        &self,
        _cred: &Cred<'_>,
        fh: &NfsFh3,
        _offset: u64,
        _count: u32,
    ) -> NfsResult<Writeverf3> {
        let o = self.obj(fh)?;
        if o.m.is_file() {
            io(self.reopen(fh, libc::O_RDONLY)?.sync_data())?;
        }
        Ok(self.verf)
    }
}
