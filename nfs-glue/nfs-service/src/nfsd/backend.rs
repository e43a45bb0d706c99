//! The file system an NFSv3 server serves: a trait shaped like the VFS calls a kernel NFS
//! server makes (`VOP_LOOKUP`, `VOP_GETATTR`, `VOP_READ` into pages, `VOP_WRITE` from an
//! iovec over the received pages, …), and the errors it returns.
//!
//! The dispatcher ([`super::Nfs3Service`]) does everything NFS-specific around these calls:
//! it decodes the arguments, takes the attributes before and after a change for `wcc_data`
//! with [`Backend::getattr`] (as FreeBSD's and Linux's servers do around `VOP_*` calls), sizes
//! directory listings, and encodes the results. A backend only does file system work.

use alloc::sync::Arc;

use mbuf::{Chain, PageProvider};

use nfs_proto::chain::PageSlice;
use nfs_proto::nfs3::{
    Cookieverf3, Createhow3, Fattr3, FsinfoResOk, FsstatResOk, Mknoddata3, NfsFh3, Nfspath3,
    Nfsstat3, Nfstime3, PathconfResOk, Sattr3, StableHow, Writeverf3,
};
use onc_rpc::svc::Cred;

/// Why a backend call failed: the `nfsstat3` failure codes of RFC 1813.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NfsError {
    /// `NFS3ERR_PERM`: not the owner.
    Perm,
    /// `NFS3ERR_NOENT`: no such file or directory.
    NoEnt,
    /// `NFS3ERR_IO`.
    Io,
    /// `NFS3ERR_NXIO`: no such device.
    Nxio,
    /// `NFS3ERR_ACCES`: permission denied.
    Acces,
    /// `NFS3ERR_EXIST`: the name exists.
    Exist,
    /// `NFS3ERR_XDEV`: cross-device link.
    Xdev,
    /// `NFS3ERR_NOTDIR`.
    NotDir,
    /// `NFS3ERR_ISDIR`.
    IsDir,
    /// `NFS3ERR_INVAL`.
    Inval,
    /// `NFS3ERR_FBIG`: file too large.
    FBig,
    /// `NFS3ERR_NOSPC`.
    NoSpc,
    /// `NFS3ERR_ROFS`: read-only file system.
    RoFs,
    /// `NFS3ERR_MLINK`: too many hard links.
    MLink,
    /// `NFS3ERR_NAMETOOLONG`.
    NameTooLong,
    /// `NFS3ERR_NOTEMPTY`: directory not empty.
    NotEmpty,
    /// `NFS3ERR_DQUOT`: quota exceeded.
    DQuot,
    /// `NFS3ERR_STALE`: the handle names nothing (any more).
    Stale,
    /// `NFS3ERR_BADHANDLE`: the handle is not one of ours.
    BadHandle,
    /// `NFS3ERR_NOT_SYNC`: SETATTR's guard does not match.
    NotSync,
    /// `NFS3ERR_BAD_COOKIE`: READDIR's cookie or verifier is no longer valid.
    BadCookie,
    /// `NFS3ERR_NOTSUPP`.
    NotSupp,
    /// `NFS3ERR_TOOSMALL`.
    TooSmall,
    /// `NFS3ERR_SERVERFAULT`.
    ServerFault,
    /// `NFS3ERR_BADTYPE`: MKNOD of an unsupported type.
    BadType,
    /// `NFS3ERR_JUKEBOX`: try again later.
    Jukebox,
}

impl NfsError {
    /// The `nfsstat3` of this error.
    pub fn status(self) -> Nfsstat3 {
        match self {
            NfsError::Perm => Nfsstat3::ERR_PERM,
            NfsError::NoEnt => Nfsstat3::ERR_NOENT,
            NfsError::Io => Nfsstat3::ERR_IO,
            NfsError::Nxio => Nfsstat3::ERR_NXIO,
            NfsError::Acces => Nfsstat3::ERR_ACCES,
            NfsError::Exist => Nfsstat3::ERR_EXIST,
            NfsError::Xdev => Nfsstat3::ERR_XDEV,
            NfsError::NotDir => Nfsstat3::ERR_NOTDIR,
            NfsError::IsDir => Nfsstat3::ERR_ISDIR,
            NfsError::Inval => Nfsstat3::ERR_INVAL,
            NfsError::FBig => Nfsstat3::ERR_FBIG,
            NfsError::NoSpc => Nfsstat3::ERR_NOSPC,
            NfsError::RoFs => Nfsstat3::ERR_ROFS,
            NfsError::MLink => Nfsstat3::ERR_MLINK,
            NfsError::NameTooLong => Nfsstat3::ERR_NAMETOOLONG,
            NfsError::NotEmpty => Nfsstat3::ERR_NOTEMPTY,
            NfsError::DQuot => Nfsstat3::ERR_DQUOT,
            NfsError::Stale => Nfsstat3::ERR_STALE,
            NfsError::BadHandle => Nfsstat3::ERR_BADHANDLE,
            NfsError::NotSync => Nfsstat3::ERR_NOT_SYNC,
            NfsError::BadCookie => Nfsstat3::ERR_BAD_COOKIE,
            NfsError::NotSupp => Nfsstat3::ERR_NOTSUPP,
            NfsError::TooSmall => Nfsstat3::ERR_TOOSMALL,
            NfsError::ServerFault => Nfsstat3::ERR_SERVERFAULT,
            NfsError::BadType => Nfsstat3::ERR_BADTYPE,
            NfsError::Jukebox => Nfsstat3::ERR_JUKEBOX,
        }
    }
}

/// The `ACCESS3_*` bits that read, write and execute (search) permission on an object give
/// (RFC 1813 ACCESS): READ; MODIFY and EXTEND, and DELETE on a directory (it names deleting
/// an entry of it); LOOKUP on a directory, EXECUTE on anything else. A backend answers
/// [`Backend::access`] with this, masked by what was asked.
pub fn access3_bits(read: bool, write: bool, exec: bool, is_dir: bool) -> u32 {
    use nfs_proto::nfs3::{
        ACCESS3_DELETE, ACCESS3_EXECUTE, ACCESS3_EXTEND, ACCESS3_LOOKUP, ACCESS3_MODIFY,
        ACCESS3_READ,
    };
    let mut a = 0;
    if read {
        a |= ACCESS3_READ;
    }
    if write {
        a |= ACCESS3_MODIFY | ACCESS3_EXTEND;
        if is_dir {
            a |= ACCESS3_DELETE;
        }
    }
    if exec {
        a |= if is_dir {
            ACCESS3_LOOKUP
        } else {
            ACCESS3_EXECUTE
        };
    }
    a
}

/// A backend call's result.
pub type NfsResult<T> = Result<T, NfsError>;

/// The data of a WRITE as the backend receives it.
#[derive(Clone, Copy)]
pub enum WriteIov<'a> {
    /// The received pages themselves (the data came in a read chunk, or as a Long Call):
    /// `slices` name the pages of the call chain, in order, read through `provider`. No
    /// one copied them on the way; the backend's write into its file is the only copy.
    Pages {
        /// The provider of every page in `slices`.
        provider: &'a Arc<dyn PageProvider>,
        /// The pieces, in file order.
        slices: &'a [PageSlice],
    },
    /// The data came inline in the call's XDR (a small WRITE): a slice of it.
    Bytes(&'a [u8]),
}

impl WriteIov<'_> {
    /// Bytes of data.
    pub fn len(&self) -> usize {
        match self {
            WriteIov::Pages { slices, .. } => slices.iter().map(|s| s.len).sum(),
            WriteIov::Bytes(b) => b.len(),
        }
    }

    /// Whether there is no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl core::fmt::Debug for WriteIov<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WriteIov::Pages { slices, .. } => f.debug_tuple("Pages").field(slices).finish(),
            WriteIov::Bytes(b) => write!(f, "Bytes({} bytes)", b.len()),
        }
    }
}

/// What a WRITE did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Bytes written.
    pub count: u32,
    /// How far they were committed (at least what the call asked).
    pub committed: StableHow,
    /// The server's write verifier (changes when uncommitted data may have been lost).
    pub verf: Writeverf3,
}

/// What a READ produced.
#[derive(Debug)]
pub struct ReadData {
    /// The data as page mbufs only (no header/trailer bytes, no markers): fresh pages from
    /// the provider the backend was given ([`Chain::alloc_pages`] and
    /// [`Chain::copyback`]), or pages the backend already holds, shared with
    /// [`Chain::copym`]. At most the count asked; empty at end of file.
    pub data: Chain,
    /// The read reached the end of the file.
    pub eof: bool,
}

/// One directory entry offered to a [`DirSink`].
#[derive(Debug, Clone, Copy)]
pub struct DirEntry<'a> {
    /// File id.
    pub fileid: u64,
    /// Name.
    pub name: &'a [u8],
    /// Cookie to resume after this entry.
    pub cookie: u64,
    /// Attributes (READDIRPLUS; `None` when not asked for or not available).
    pub attr: Option<&'a Fattr3>,
    /// Handle (READDIRPLUS; `None` when not asked for or not available).
    pub fh: Option<&'a [u8]>,
}

/// Where a backend streams directory entries: each entry is encoded as it comes, so a huge
/// directory needs neither a list of entries nor an allocation per entry.
pub trait DirSink {
    /// Whether the backend should fill [`DirEntry::attr`] and [`DirEntry::fh`].
    fn wants_plus(&self) -> bool;
    /// Offer the next entry. `false`: it did not fit, stop (the entry is not in the reply;
    /// the client will ask again from the previous cookie).
    fn entry(&mut self, e: &DirEntry<'_>) -> bool;
}

/// What a READDIR(PLUS) walk ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirEnd {
    /// The directory's cookie verifier.
    pub verf: Cookieverf3,
    /// Every entry after the starting cookie was accepted by the sink.
    pub eof: bool,
}

/// The file system behind an NFSv3 server. Every call gets the caller's credentials; handles
/// are the opaque bytes the backend made (at most 64): one it cannot parse is
/// [`NfsError::BadHandle`], one that names nothing (any more) [`NfsError::Stale`].
/// Calls may come from several threads (`&self`).
pub trait Backend {
    /// Attributes (`VOP_GETATTR`).
    fn getattr(&self, cred: &Cred<'_>, fh: &NfsFh3) -> NfsResult<Fattr3>;
    /// Set attributes (`VOP_SETATTR`); with a `guard`, only if the object's ctime equals it
    /// (else [`NfsError::NotSync`]).
    fn setattr(
        &self,
        cred: &Cred<'_>,
        fh: &NfsFh3,
        attrs: &Sattr3,
        guard: Option<Nfstime3>,
    ) -> NfsResult<()>;
    /// Find `name` in `dir` (`VOP_LOOKUP`; "." and ".." included).
    fn lookup(&self, cred: &Cred<'_>, dir: &NfsFh3, name: &[u8]) -> NfsResult<NfsFh3>;
    /// Which of the `ACCESS3_*` bits in `mask` the caller has (`VOP_ACCESS`).
    fn access(&self, cred: &Cred<'_>, fh: &NfsFh3, mask: u32) -> NfsResult<u32>;
    /// A symbolic link's target (`VOP_READLINK`).
    fn readlink(&self, cred: &Cred<'_>, fh: &NfsFh3) -> NfsResult<Nfspath3>;
    /// Read at most `count` bytes from `offset` into page mbufs of `pages` (`VOP_READ`).
    fn read(
        &self,
        cred: &Cred<'_>,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
        pages: &Arc<dyn PageProvider>,
    ) -> NfsResult<ReadData>;
    /// Write `data` at `offset` (`VOP_WRITE` with a uio over the received pages).
    fn write(
        &self,
        cred: &Cred<'_>,
        fh: &NfsFh3,
        offset: u64,
        stable: StableHow,
        data: WriteIov<'_>,
    ) -> NfsResult<Written>;
    /// Create a regular file (`VOP_CREATE`): UNCHECKED (an existing file is kept, its
    /// attributes set), GUARDED ([`NfsError::Exist`] if the name exists) or EXCLUSIVE (the
    /// verifier is stored; a retry with the same verifier succeeds). Returns the handle.
    fn create(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        name: &[u8],
        how: &Createhow3,
    ) -> NfsResult<NfsFh3>;
    /// Make a directory (`VOP_MKDIR`).
    fn mkdir(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        name: &[u8],
        attrs: &Sattr3,
    ) -> NfsResult<NfsFh3>;
    /// Make a symbolic link to `target` (`VOP_SYMLINK`).
    fn symlink(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        name: &[u8],
        attrs: &Sattr3,
        target: &[u8],
    ) -> NfsResult<NfsFh3>;
    /// Make a device, socket or FIFO (`VOP_MKNOD`); other types are [`NfsError::BadType`].
    fn mknod(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        name: &[u8],
        what: &Mknoddata3,
    ) -> NfsResult<NfsFh3>;
    /// Remove a non-directory (`VOP_REMOVE`).
    fn remove(&self, cred: &Cred<'_>, dir: &NfsFh3, name: &[u8]) -> NfsResult<()>;
    /// Remove an empty directory (`VOP_RMDIR`).
    fn rmdir(&self, cred: &Cred<'_>, dir: &NfsFh3, name: &[u8]) -> NfsResult<()>;
    /// Rename (`VOP_RENAME`).
    fn rename(
        &self,
        cred: &Cred<'_>,
        from_dir: &NfsFh3,
        from: &[u8],
        to_dir: &NfsFh3,
        to: &[u8],
    ) -> NfsResult<()>;
    /// Hard link `file` as `name` in `dir` (`VOP_LINK`).
    fn link(&self, cred: &Cred<'_>, file: &NfsFh3, dir: &NfsFh3, name: &[u8]) -> NfsResult<()>;
    /// Stream the entries of `dir` after `cookie` (0: from the start) into `sink` until it
    /// refuses one or the directory ends (`VOP_READDIR`). A non-zero `cookie` with a `verf`
    /// that no longer matches is [`NfsError::BadCookie`] (a backend whose cookies stay valid
    /// may ignore the verifier). List "." and ".." as a POSIX server does: the Linux client
    /// shows what the server lists.
    fn readdir(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        cookie: u64,
        verf: Cookieverf3,
        sink: &mut dyn DirSink,
    ) -> NfsResult<DirEnd>;
    /// File system statistics (`VFS_STATFS`); `obj_attributes` is filled by the dispatcher.
    fn fsstat(&self, cred: &Cred<'_>, fh: &NfsFh3) -> NfsResult<FsstatResOk>;
    /// File system properties; `obj_attributes` is filled by the dispatcher, and
    /// `rtmax` / `wtmax` are clamped to the dispatcher's data limit.
    fn fsinfo(&self, cred: &Cred<'_>, fh: &NfsFh3) -> NfsResult<FsinfoResOk>;
    /// POSIX properties (`VOP_PATHCONF`); `obj_attributes` is filled by the dispatcher.
    fn pathconf(&self, cred: &Cred<'_>, fh: &NfsFh3) -> NfsResult<PathconfResOk>;
    /// Commit `count` bytes from `offset` (0: to the end) to stable storage (`VOP_FSYNC`);
    /// returns the write verifier.
    fn commit(
        &self,
        cred: &Cred<'_>,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
    ) -> NfsResult<Writeverf3>;
}

/// A shared backend is a backend: `Arc<B>` (one file system behind several services or
/// connections) and `&B` forward every call.
macro_rules! forward_backend {
    ($($t:ty),*) => {$(
        impl<B: Backend + ?Sized> Backend for $t {
            fn getattr(&self, c: &Cred<'_>, fh: &NfsFh3) -> NfsResult<Fattr3> {
                (**self).getattr(c, fh)
            }
            fn setattr(
                &self,
                c: &Cred<'_>,
                fh: &NfsFh3,
                a: &Sattr3,
                g: Option<Nfstime3>,
            ) -> NfsResult<()> {
                (**self).setattr(c, fh, a, g)
            }
            fn lookup(&self, c: &Cred<'_>, d: &NfsFh3, n: &[u8]) -> NfsResult<NfsFh3> {
                (**self).lookup(c, d, n)
            }
            fn access(&self, c: &Cred<'_>, fh: &NfsFh3, m: u32) -> NfsResult<u32> {
                (**self).access(c, fh, m)
            }
            fn readlink(&self, c: &Cred<'_>, fh: &NfsFh3) -> NfsResult<Nfspath3> {
                (**self).readlink(c, fh)
            }
            fn read(
                &self,
                c: &Cred<'_>,
                fh: &NfsFh3,
                o: u64,
                n: u32,
                p: &Arc<dyn PageProvider>,
            ) -> NfsResult<ReadData> {
                (**self).read(c, fh, o, n, p)
            }
            fn write(
                &self,
                c: &Cred<'_>,
                fh: &NfsFh3,
                o: u64,
                s: StableHow,
                d: WriteIov<'_>,
            ) -> NfsResult<Written> {
                (**self).write(c, fh, o, s, d)
            }
            fn create(
                &self,
                c: &Cred<'_>,
                d: &NfsFh3,
                n: &[u8],
                h: &Createhow3,
            ) -> NfsResult<NfsFh3> {
                (**self).create(c, d, n, h)
            }
            fn mkdir(&self, c: &Cred<'_>, d: &NfsFh3, n: &[u8], a: &Sattr3) -> NfsResult<NfsFh3> {
                (**self).mkdir(c, d, n, a)
            }
            fn symlink(
                &self,
                c: &Cred<'_>,
                d: &NfsFh3,
                n: &[u8],
                a: &Sattr3,
                t: &[u8],
            ) -> NfsResult<NfsFh3> {
                (**self).symlink(c, d, n, a, t)
            }
            fn mknod(
                &self,
                c: &Cred<'_>,
                d: &NfsFh3,
                n: &[u8],
                w: &Mknoddata3,
            ) -> NfsResult<NfsFh3> {
                (**self).mknod(c, d, n, w)
            }
            fn remove(&self, c: &Cred<'_>, d: &NfsFh3, n: &[u8]) -> NfsResult<()> {
                (**self).remove(c, d, n)
            }
            fn rmdir(&self, c: &Cred<'_>, d: &NfsFh3, n: &[u8]) -> NfsResult<()> {
                (**self).rmdir(c, d, n)
            }
            fn rename(
                &self,
                c: &Cred<'_>,
                fd: &NfsFh3,
                f: &[u8],
                td: &NfsFh3,
                t: &[u8],
            ) -> NfsResult<()> {
                (**self).rename(c, fd, f, td, t)
            }
            fn link(&self, c: &Cred<'_>, f: &NfsFh3, d: &NfsFh3, n: &[u8]) -> NfsResult<()> {
                (**self).link(c, f, d, n)
            }
            fn readdir(
                &self,
                c: &Cred<'_>,
                d: &NfsFh3,
                k: u64,
                v: Cookieverf3,
                s: &mut dyn DirSink,
            ) -> NfsResult<DirEnd> {
                (**self).readdir(c, d, k, v, s)
            }
            fn fsstat(&self, c: &Cred<'_>, fh: &NfsFh3) -> NfsResult<FsstatResOk> {
                (**self).fsstat(c, fh)
            }
            fn fsinfo(&self, c: &Cred<'_>, fh: &NfsFh3) -> NfsResult<FsinfoResOk> {
                (**self).fsinfo(c, fh)
            }
            fn pathconf(&self, c: &Cred<'_>, fh: &NfsFh3) -> NfsResult<PathconfResOk> {
                (**self).pathconf(c, fh)
            }
            fn commit(&self, c: &Cred<'_>, fh: &NfsFh3, o: u64, n: u32) -> NfsResult<Writeverf3> {
                (**self).commit(c, fh, o, n)
            }
        }
    )*};
}

forward_backend!(Arc<B>, &B);
