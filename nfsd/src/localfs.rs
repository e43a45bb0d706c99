//! [`LocalFs`]: nfs-glue's [`Backend`] over a local directory, with `std::fs`.
//!
//! * Handles: [`crate::handle`] (valid across a server restart).
//! * Identity: the server runs as root and enforces the POSIX mode bits against the
//!   caller's `AUTH_SYS` credential itself ([`crate::attr`]); created objects are given
//!   the caller's uid and gid (`lchown` after the create). Root squash is the dispatcher's
//!   ([`nfs_glue::svc::Squash`]).
//! * WRITE and READ without a copy: when the pages are those of the registered arena the
//!   server runs on ([`LocalFs::with_file_pages`]), a WRITE's received pages go to the file
//!   with one `pwritev` over them, and a READ is one `preadv` straight into fresh pages
//!   ([`VerbsArena::write_pages_at`] / [`VerbsArena::read_pages_at`]: the system call with
//!   the page pointers is the verbs shim's, this crate has no `unsafe`). Pages of any other
//!   provider (tests over a heap arena) are copied once through a per-thread buffer, counted
//!   in [`LocalFs::bounced_bytes`].
//! * COMMIT is `fdatasync`; a FILE_SYNC WRITE `fsync`, DATA_SYNC `fdatasync`. The write
//!   verifier is the server instance's start time.
//! * READDIR cookies are a hash of the entry name (sorted by it), so they stay valid while
//!   entries are added or removed between calls (`rm -r` lists as it deletes); the cookie
//!   verifier is not used. FSSTAT has no `statvfs` in `std`: it reports fixed large values.

use std::cell::RefCell;
use std::ffi::OsStr;
use std::fs::{self, File, FileTimes, OpenOptions};
use std::io::ErrorKind;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use krpc_rdma_verbs::arena::VerbsArena;
use mbuf::{Chain, PageFragment, PageProvider};
use nfs_glue::nfs3::*;
use nfs_glue::nfsd::{
    Backend, DirEnd, DirEntry, DirSink, NfsError, NfsResult, ReadData, WriteIov, Written,
};
use nfs_glue::svc::Cred;

use crate::attr::{check, fattr, in_group, nfs_err, owns, perms, R, W, X};
use crate::handle::{self, ino_of, Ino, InodeMap};

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

thread_local! {
    /// The per-thread READ / WRITE buffer (grown to the largest transfer once).
    static BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The per-thread page-fragment list of a READ's `preadv` (grown once).
    static FRAGS: RefCell<Vec<PageFragment>> = const { RefCell::new(Vec::new()) };
}

/// A local directory served over NFSv3.
#[derive(Debug)]
pub struct LocalFs {
    map: InodeMap,
    root: Ino,
    verf: Writeverf3,
    /// The registered arena whose pages are moved by `pwritev` / `preadv`.
    file_pages: Option<Arc<VerbsArena>>,
    /// Bytes copied through the per-thread buffer (pages of another provider).
    bounced: AtomicU64,
}

fn name_ok(name: &[u8]) -> NfsResult<&OsStr> {
    if name.len() > NFS3_MAXNAMLEN {
        return Err(NfsError::NameTooLong);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(NfsError::Inval);
    }
    Ok(OsStr::from_bytes(name))
}

fn io<T>(r: std::io::Result<T>) -> NfsResult<T> {
    r.map_err(|e| nfs_err(&e))
}

fn systime(t: Nfstime3) -> SystemTime {
    UNIX_EPOCH + Duration::new(u64::from(t.seconds), t.nseconds.min(999_999_999))
}

/// The cookie of a directory entry: a hash of its name, above [`DOTDOT`] and below 2^62.
pub fn cookie_of(name: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h >> 2).max(DOTDOT + 1)
}

impl LocalFs {
    /// Serve the directory `root`.
    ///
    /// # Errors
    /// The directory cannot be resolved or is not a directory.
    pub fn new(root: &Path) -> std::io::Result<LocalFs> {
        let root = fs::canonicalize(root)?;
        let m = fs::metadata(&root)?;
        if !m.is_dir() {
            return Err(std::io::Error::new(
                ErrorKind::InvalidInput,
                "not a directory",
            ));
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let verf = (now.as_secs() << 30 ^ u64::from(now.subsec_nanos())).to_be_bytes();
        Ok(LocalFs {
            map: InodeMap::new(root, ino_of(&m)),
            root: ino_of(&m),
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
        self.map.root()
    }

    /// The export root's handle.
    pub fn root_fh(&self) -> NfsFh3 {
        handle::encode(self.root, self.root)
    }

    /// The write verifier of this server instance.
    pub fn verf(&self) -> Writeverf3 {
        self.verf
    }

    fn obj(&self, fh: &NfsFh3) -> NfsResult<(PathBuf, fs::Metadata)> {
        self.map.resolve(handle::decode(self.root, fh)?)
    }

    /// A directory the caller may search and, with `want`, read or change.
    fn dir(&self, cred: &Cred<'_>, fh: &NfsFh3, want: u32) -> NfsResult<PathBuf> {
        let (p, m) = self.obj(fh)?;
        if !m.is_dir() {
            return Err(NfsError::NotDir);
        }
        check(cred, &m, want)?;
        Ok(p)
    }

    /// A regular file for reading (`R`) or writing (`W`); the owner may always (as knfsd's
    /// owner override: a client checks access at open).
    fn file(&self, cred: &Cred<'_>, fh: &NfsFh3, want: u32) -> NfsResult<(PathBuf, fs::Metadata)> {
        let (p, m) = self.obj(fh)?;
        if m.is_dir() {
            return Err(NfsError::IsDir);
        }
        if !m.is_file() {
            return Err(NfsError::Inval);
        }
        if !(owns(cred, &m) || perms(cred, &m) & want == want) {
            return Err(NfsError::Acces);
        }
        Ok((p, m))
    }

    fn fsid(&self) -> u64 {
        self.root.0
    }

    /// Record and return the handle of `path`.
    fn handle_at(&self, path: PathBuf) -> NfsResult<NfsFh3> {
        let m = io(fs::symlink_metadata(&path))?;
        let ino = ino_of(&m);
        self.map.insert(ino, path);
        Ok(handle::encode(self.root, ino))
    }

    /// A new object at `path`, whose metadata is `m`, belongs to the caller.
    fn own(&self, cred: &Cred<'_>, path: &Path, m: &fs::Metadata) -> NfsResult<()> {
        if m.uid() == cred.uid && m.gid() == cred.gid {
            return Ok(());
        }
        io(std::os::unix::fs::lchown(
            path,
            Some(cred.uid),
            Some(cred.gid),
        ))
    }

    /// SETATTR's work on `path` (also after CREATE / MKDIR / MKNOD).
    fn apply(&self, cred: &Cred<'_>, path: &Path, m: &fs::Metadata, a: &Sattr3) -> NfsResult<()> {
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
            let f = io(OpenOptions::new().write(true).open(path))?;
            io(f.set_len(size))?;
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
                io(std::os::unix::fs::lchown(path, uid, gid))?;
            }
        }
        if let Some(mode) = a.mode {
            if !owns(cred, m) {
                return Err(NfsError::Perm);
            }
            if !link {
                io(fs::set_permissions(
                    path,
                    fs::Permissions::from_mode(mode & 0o7777),
                ))?;
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
            let mut times = FileTimes::new();
            if let Some((t, _)) = at {
                times = times.set_accessed(t);
            }
            if let Some((t, _)) = mt {
                times = times.set_modified(t);
            }
            let f = io(File::open(path))?;
            io(f.set_times(times))?;
        }
        Ok(())
    }

    /// Make the object `p` (a [`Self::child`] path) with `make`, owned by the caller,
    /// attributes `attrs` applied. One `lstat` of the new object serves the ownership, the
    /// attributes and the handle (its identity does not change).
    fn make(
        &self,
        cred: &Cred<'_>,
        p: PathBuf,
        attrs: Option<&Sattr3>,
        make: impl FnOnce(&Path) -> std::io::Result<()>,
    ) -> NfsResult<NfsFh3> {
        io(make(&p))?;
        let m = io(fs::symlink_metadata(&p))?;
        self.own(cred, &p, &m)?;
        if let Some(a) = attrs {
            let a = Sattr3 {
                uid: None,
                gid: None,
                ..a.clone()
            };
            self.apply(&Cred { uid: 0, ..*cred }, &p, &m, &a)?;
        }
        let ino = ino_of(&m);
        self.map.insert(ino, p);
        Ok(handle::encode(self.root, ino))
    }

    fn child(&self, cred: &Cred<'_>, dir: &NfsFh3, name: &[u8]) -> NfsResult<PathBuf> {
        let name = name_ok(name)?;
        Ok(self.dir(cred, dir, W | X)?.join(name))
    }
}

impl Backend for LocalFs {
    fn getattr(&self, _cred: &Cred<'_>, fh: &NfsFh3) -> NfsResult<Fattr3> {
        let (_, m) = self.obj(fh)?;
        Ok(fattr(&m, self.fsid()))
    }

    fn setattr(
        &self,
        cred: &Cred<'_>,
        fh: &NfsFh3,
        attrs: &Sattr3,
        guard: Option<Nfstime3>,
    ) -> NfsResult<()> {
        let (p, m) = self.obj(fh)?;
        if let Some(g) = guard {
            if fattr(&m, self.fsid()).ctime != g {
                return Err(NfsError::NotSync);
            }
        }
        self.apply(cred, &p, &m, attrs)
    }

    fn lookup(&self, cred: &Cred<'_>, dir: &NfsFh3, name: &[u8]) -> NfsResult<NfsFh3> {
        let d = self.dir(cred, dir, X)?;
        let p = match name {
            b"." => d,
            b".." if d == self.map.root() => d,
            b".." => d.parent().map(Path::to_path_buf).ok_or(NfsError::NoEnt)?,
            _ => d.join(name_ok(name)?),
        };
        self.handle_at(p)
    }

    fn access(&self, cred: &Cred<'_>, fh: &NfsFh3, mask: u32) -> NfsResult<u32> {
        let (_, m) = self.obj(fh)?;
        let p = perms(cred, &m);
        let mut a = 0;
        if p & R != 0 {
            a |= ACCESS3_READ;
        }
        if p & W != 0 {
            a |= ACCESS3_MODIFY | ACCESS3_EXTEND;
            if m.is_dir() {
                a |= ACCESS3_DELETE;
            }
        }
        if p & X != 0 {
            a |= if m.is_dir() {
                ACCESS3_LOOKUP
            } else {
                ACCESS3_EXECUTE
            };
        }
        Ok(a & mask)
    }

    fn readlink(&self, _cred: &Cred<'_>, fh: &NfsFh3) -> NfsResult<Nfspath3> {
        let (p, m) = self.obj(fh)?;
        if !m.file_type().is_symlink() {
            return Err(NfsError::Inval);
        }
        Ok(Nfspath3(
            io(fs::read_link(p))?.as_os_str().as_bytes().to_vec(),
        ))
    }

    fn read(
        &self,
        cred: &Cred<'_>,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
        pages: &Arc<dyn PageProvider>,
    ) -> NfsResult<ReadData> {
        let (p, m) = self.file(cred, fh, R)?;
        let f = io(File::open(p))?;
        let want = usize::try_from(count).map_err(|_| NfsError::Inval)?;
        let (data, n) = match self.arena_for(pages) {
            Some(arena) => read_into_pages(arena, pages, &f, offset, want)?,
            None => self.read_bounced(pages, &f, offset, want)?,
        };
        let end = offset.saturating_add(n as u64);
        Ok(ReadData {
            data,
            eof: end >= m.size(),
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
        let (p, _) = self.file(cred, fh, W)?;
        let len = data.len();
        offset.checked_add(len as u64).ok_or(NfsError::FBig)?;
        let f = io(OpenOptions::new().write(true).open(p))?;
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
        let path = self.child(cred, dir, name)?;
        let new = |p: &Path| OpenOptions::new().write(true).create_new(true).open(p);
        match how {
            Createhow3::Guarded(a) => self.make(cred, path, Some(a), |p| new(p).map(drop)),
            Createhow3::Unchecked(a) => match fs::symlink_metadata(&path) {
                Ok(m) if m.is_file() => {
                    self.apply(cred, &path, &m, a)?;
                    self.handle_at(path)
                }
                Ok(_) => Err(NfsError::Exist),
                Err(_) => self.make(cred, path, Some(a), |p| new(p).map(drop)),
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
                if let Ok(m) = fs::symlink_metadata(&path) {
                    let same = m.is_file()
                        && u32::try_from(m.atime()).ok() == Some(at)
                        && u32::try_from(m.mtime()).ok() == Some(mt);
                    return if same {
                        self.handle_at(path)
                    } else {
                        Err(NfsError::Exist)
                    };
                }
                self.make(cred, path, None, |p| {
                    let f = new(p)?;
                    f.set_permissions(fs::Permissions::from_mode(0o600))?;
                    f.set_times(
                        FileTimes::new()
                            .set_accessed(UNIX_EPOCH + Duration::from_secs(at.into()))
                            .set_modified(UNIX_EPOCH + Duration::from_secs(mt.into())),
                    )
                })
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
        let a = Sattr3 {
            mode: Some(attrs.mode.unwrap_or(0o755)),
            ..attrs.clone()
        };
        let p = self.child(cred, dir, name)?;
        self.make(cred, p, Some(&a), |p| fs::create_dir(p))
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
        let p = self.child(cred, dir, name)?;
        self.make(cred, p, None, |p| {
            std::os::unix::fs::symlink(OsStr::from_bytes(target), p)
        })
    }

    fn mknod(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        name: &[u8],
        what: &Mknoddata3,
    ) -> NfsResult<NfsFh3> {
        match what {
            // A socket file is what binding a Unix socket leaves behind.
            Mknoddata3::Sock(a) => self.make(cred, self.child(cred, dir, name)?, Some(a), |p| {
                std::os::unix::net::UnixListener::bind(p).map(drop)
            }),
            // FIFOs and devices need mknod(2), which std does not offer.
            Mknoddata3::Fifo(_) | Mknoddata3::Chr(_) | Mknoddata3::Blk(_) => Err(NfsError::NotSupp),
            Mknoddata3::Other(_) => Err(NfsError::BadType),
        }
    }

    fn remove(&self, cred: &Cred<'_>, dir: &NfsFh3, name: &[u8]) -> NfsResult<()> {
        let p = self.child(cred, dir, name)?;
        if io(fs::symlink_metadata(&p))?.is_dir() {
            return Err(NfsError::IsDir);
        }
        io(fs::remove_file(p))
    }

    fn rmdir(&self, cred: &Cred<'_>, dir: &NfsFh3, name: &[u8]) -> NfsResult<()> {
        let p = self.child(cred, dir, name)?;
        if !io(fs::symlink_metadata(&p))?.is_dir() {
            return Err(NfsError::NotDir);
        }
        io(fs::remove_dir(p))
    }

    fn rename(
        &self,
        cred: &Cred<'_>,
        from_dir: &NfsFh3,
        from: &[u8],
        to_dir: &NfsFh3,
        to: &[u8],
    ) -> NfsResult<()> {
        let a = self.child(cred, from_dir, from)?;
        let b = self.child(cred, to_dir, to)?;
        io(fs::rename(&a, &b))?;
        self.handle_at(b).map(drop)
    }

    fn link(&self, cred: &Cred<'_>, file: &NfsFh3, dir: &NfsFh3, name: &[u8]) -> NfsResult<()> {
        let (src, m) = self.obj(file)?;
        if m.is_dir() {
            return Err(NfsError::IsDir);
        }
        let p = self.child(cred, dir, name)?;
        io(fs::hard_link(src, p))
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
        let mut names: Vec<(u64, Vec<u8>)> = Vec::new();
        for e in io(fs::read_dir(&d))? {
            let e = io(e)?;
            let n = e.file_name().as_bytes().to_vec();
            names.push((cookie_of(&n), n));
        }
        names.push((DOT, b".".to_vec()));
        names.push((DOTDOT, b"..".to_vec()));
        names.sort_unstable();
        let end = |eof| DirEnd {
            verf: Cookieverf3::default(),
            eof,
        };
        for (c, n) in names.iter().filter(|(c, _)| *c > cookie) {
            let p = match n.as_slice() {
                b"." => d.clone(),
                b".." if d == self.map.root() => d.clone(),
                b".." => d.parent().map_or_else(|| d.clone(), Path::to_path_buf),
                _ => d.join(OsStr::from_bytes(n)),
            };
            let Ok(m) = fs::symlink_metadata(&p) else {
                continue; // removed since the listing
            };
            let (attr, fh) = if sink.wants_plus() {
                self.map.insert(ino_of(&m), p);
                (
                    Some(fattr(&m, self.fsid())),
                    Some(handle::encode(self.root, ino_of(&m))),
                )
            } else {
                (None, None)
            };
            let e = DirEntry {
                fileid: m.ino(),
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
        Ok(FsstatResOk {
            obj_attributes: None,
            tbytes: 1 << 40,
            fbytes: 1 << 39,
            abytes: 1 << 39,
            tfiles: 1 << 30,
            ffiles: 1 << 29,
            afiles: 1 << 29,
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
        let (p, m) = self.obj(fh)?;
        if m.is_file() {
            io(io(File::open(p))?.sync_data())?;
        }
        Ok(self.verf)
    }
}
