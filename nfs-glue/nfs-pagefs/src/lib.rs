//! An in-memory file system for `no_std` + `alloc`, the [`Backend`] of an NFSv3 server that
//! runs in a kernel: file data lives in pages of an [`mbuf::PageProvider`], 4 KiB blocks in
//! a sparse map (a missing block is a hole and reads as zeros).
//!
//! **Zero copy.** A WRITE block that is exactly one received page (in-page offset 0, a whole
//! page, from the provider the file system was built with) is *adopted*: the file keeps a
//! reference on that page instead of copying it. Every other byte is copied into a fresh
//! page (copy-on-write: a page the file system stores is never written again, since a READ
//! reply or a received call may still hold it). A READ returns page mbufs over the file's
//! own pages (one more reference each); holes become fresh zero pages.
//!
//! **Locking.** Everything lives in an [`FsState`] under the embedding's
//! [`Lock`](nfs_service::lock::Lock), taken once per call for the closure of
//! [`Lock::with`](nfs_service::lock::Lock::with) only; a READ takes its page references under
//! the lock and builds its mbufs after. The traffic counters of [`Stats`] are atomics.
//!
//! Handles are 16 bytes: `b"kpfs"`, the instance (u32 BE), the fileid (u64 BE); fileids are
//! never reused, and a handle of another instance is STALE. Every number from a client is
//! checked (`FBig` / `Inval`, never a wrap), and memory is bounded by
//! [`PageFsConfig::capacity_bytes`] and [`PageFsConfig::max_nodes`] (`NoSpc`, checked
//! before anything changes). Access times are not updated by READ (like `noatime`).
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

mod file;
mod state;

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use mbuf::{PageProvider, PAGE_SIZE};
use nfs_proto::nfs3::{
    Cookieverf3, Createhow3, Fattr3, FsinfoResOk, FsstatResOk, Ftype3, Mknoddata3, NfsFh3,
    Nfspath3, Nfstime3, PathconfResOk, Sattr3, StableHow, Writeverf3, FSF3_CANSETTIME,
    FSF3_HOMOGENEOUS, FSF3_LINK, FSF3_SYMLINK, NFS3_MAXPATHLEN,
};
use nfs_service::lock::Lock;
use nfs_service::nfsd::{
    access3_bits, Backend, DirEnd, DirEntry, DirSink, NfsError, NfsResult, ReadData, WriteIov,
    Written,
};
use onc_rpc::svc::Cred;

pub use state::FsState;
use state::{
    apply_sattr, check_name, check_sattr, entry_charge, may, may_data, sticky_denies, Data, Dir,
    Node, COOKIE_DOT, COOKIE_DOTDOT, COOKIE_FIRST, LINK_MAX, NODE_CHARGE, R, W, X,
};

/// The block size: one page.
const BLOCK: u64 = PAGE_SIZE as u64;
/// The largest file (FSINFO `maxfilesize`): 16 TiB. Offsets and sizes past it are `FBig`.
pub const MAX_FILE_SIZE: u64 = 1 << 44;
/// The largest READ and WRITE (FSINFO `rtmax` / `wtmax`): 1 MiB. A READ asking more
/// gets at most this (a short read).
pub const MAX_IO: u64 = 1 << 20;
/// The `fsid` of every object.
const FSID: u64 = 0x6b70_6673;
/// Handle magic.
const MAGIC: [u8; 4] = *b"kpfs";
/// Handle length.
const FH_LEN: usize = 16;
/// The fileid of the root directory.
const ROOT: u64 = 1;

/// How a [`PageFs`] is made.
#[derive(Debug, Clone, Copy)]
pub struct PageFsConfig {
    /// File data pages (4096 bytes each) plus per-node and per-entry metadata charges; a
    /// change beyond it is [`NfsError::NoSpc`].
    pub capacity_bytes: u64,
    /// The most nodes (root included); beyond it [`NfsError::NoSpc`].
    pub max_nodes: u32,
    /// Written into every handle: handles of another instance are [`NfsError::Stale`].
    pub instance: u32,
    /// The wall clock (supplied by the embedding).
    pub clock: fn() -> Nfstime3,
}

/// A snapshot of a [`PageFs`]'s usage and traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Pages the file system holds a reference on.
    pub pages_held: u64,
    /// Bytes charged against the capacity (pages and metadata).
    pub bytes_used: u64,
    /// Nodes (root included).
    pub nodes: u64,
    /// WRITE payload bytes kept as the received pages themselves (no copy).
    pub write_bytes_adopted: u64,
    /// WRITE payload bytes copied (inline data, unaligned or partial blocks, another
    /// provider's pages).
    pub write_bytes_copied: u64,
    /// READ payload bytes handed out as references to the file's own pages.
    pub read_bytes_shared: u64,
    /// Bytes of zeros written into pages: READ bytes of holes, and the tail of a partly
    /// valid last block when a file grows.
    pub zero_fill_bytes: u64,
}

#[derive(Debug, Default)]
struct Counters {
    adopted: AtomicU64,
    copied: AtomicU64,
    shared: AtomicU64,
    zeroed: AtomicU64,
}

/// The file system: its state under the lock `L`, the page provider its pages come from.
pub struct PageFs<L: Lock<FsState>> {
    state: L,
    pages: Arc<dyn PageProvider>,
    instance: u32,
    clock: fn() -> Nfstime3,
    counters: Counters,
}

impl<L: Lock<FsState>> core::fmt::Debug for PageFs<L> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PageFs")
            .field("instance", &self.instance)
            .field("stats", &self.stats())
            .finish()
    }
}

/// The handle of `fileid` in `instance`.
fn make_fh(instance: u32, fileid: u64) -> [u8; FH_LEN] {
    let [m0, m1, m2, m3] = MAGIC;
    let [i0, i1, i2, i3] = instance.to_be_bytes();
    let [f0, f1, f2, f3, f4, f5, f6, f7] = fileid.to_be_bytes();
    [
        m0, m1, m2, m3, i0, i1, i2, i3, f0, f1, f2, f3, f4, f5, f6, f7,
    ]
}

impl<L: Lock<FsState>> PageFs<L> {
    /// A file system holding only its root directory (mode 0755, owner 0:0). Its pages
    /// come from `pages`; WRITE pages of that same provider are adopted.
    ///
    /// # Errors
    /// [`NfsError::NoSpc`] if the root does not fit the capacity or `max_nodes` is 0.
    pub fn new(pages: Arc<dyn PageProvider>, cfg: PageFsConfig) -> Result<Self, NfsError> {
        let now = (cfg.clock)();
        let mut st = FsState {
            nodes: alloc::collections::BTreeMap::new(),
            next_fileid: ROOT,
            pages_held: 0,
            meta_bytes: 0,
            capacity: cfg.capacity_bytes,
            max_nodes: u64::from(cfg.max_nodes),
        };
        st.room(NODE_CHARGE, 1)?;
        let root = Node::new(Ftype3::Dir, 0o755, 0, 0, now, Data::Dir(Dir::new(ROOT)));
        st.add_node(root)?;
        Ok(PageFs {
            // No memory for the lock (a kernel lock is allocated): try again later.
            state: L::new(st).ok_or(NfsError::Jukebox)?,
            pages,
            instance: cfg.instance,
            clock: cfg.clock,
            counters: Counters::default(),
        })
    }

    /// The root directory's handle.
    pub fn root_fh(&self) -> NfsFh3 {
        self.fh(ROOT)
    }

    /// Usage and traffic so far.
    pub fn stats(&self) -> Stats {
        let (pages_held, bytes_used, nodes) = self
            .state
            .with(|s| (s.pages_held, s.bytes_used(), s.nodes.len() as u64));
        Stats {
            pages_held,
            bytes_used,
            nodes,
            write_bytes_adopted: self.counters.adopted.load(Ordering::Relaxed),
            write_bytes_copied: self.counters.copied.load(Ordering::Relaxed),
            read_bytes_shared: self.counters.shared.load(Ordering::Relaxed),
            zero_fill_bytes: self.counters.zeroed.load(Ordering::Relaxed),
        }
    }

    fn fh(&self, fileid: u64) -> NfsFh3 {
        NfsFh3 {
            data: make_fh(self.instance, fileid).to_vec(),
        }
    }

    /// The fileid of a handle: [`NfsError::BadHandle`] if it is not one of ours,
    /// [`NfsError::Stale`] if of another instance (whether it names a node is checked by
    /// the caller, under the lock).
    fn fileid(&self, fh: &NfsFh3) -> NfsResult<u64> {
        let raw: &[u8; FH_LEN] = fh
            .data
            .as_slice()
            .try_into()
            .map_err(|_| NfsError::BadHandle)?;
        let (magic, rest) = raw.split_first_chunk::<4>().ok_or(NfsError::BadHandle)?;
        let (inst, id) = rest.split_first_chunk::<4>().ok_or(NfsError::BadHandle)?;
        let id: [u8; 8] = id.try_into().map_err(|_| NfsError::BadHandle)?;
        if *magic != MAGIC {
            return Err(NfsError::BadHandle);
        }
        if u32::from_be_bytes(*inst) != self.instance {
            return Err(NfsError::Stale);
        }
        Ok(u64::from_be_bytes(id))
    }

    fn now(&self) -> Nfstime3 {
        (self.clock)()
    }

    fn verf(&self) -> Writeverf3 {
        let [i0, i1, i2, i3] = self.instance.to_be_bytes();
        Writeverf3([b'k', b'p', b'f', b's', i0, i1, i2, i3])
    }

    fn cookieverf(&self) -> Cookieverf3 {
        Cookieverf3(self.verf().0)
    }

    /// Make a node named `name` in directory `dir` (checked: name, permission, existence,
    /// room); new objects take the directory's group when it is set-group-id.
    fn make(
        &self,
        st: &mut FsState,
        cred: &Cred<'_>,
        dir: u64,
        name: &[u8],
        mut node: Node,
        s: Option<&Sattr3>,
    ) -> NfsResult<u64> {
        check_name(name)?;
        let d = st.node(dir)?;
        let entries = &d.as_dir()?.names;
        if !may(cred, d, W | X) {
            return Err(NfsError::Acces);
        }
        if entries.contains_key(name) {
            return Err(NfsError::Exist);
        }
        if d.mode & 0o2000 != 0 {
            node.gid = d.gid;
            if node.is_dir() {
                node.mode |= 0o2000;
            }
        }
        let now = node.ctime;
        if let Some(s) = s {
            let s = Sattr3 {
                mode: None,
                size: None,
                ..s.clone()
            };
            check_sattr(cred, &node, &s)?;
            apply_sattr(cred, &mut node, &s, now);
        }
        st.room(node.charge.saturating_add(entry_charge(name)), 1)?;
        let is_dir = node.is_dir();
        let keys = state::name_keys(name)?;
        let id = st.add_node(node)?;
        if let Err(e) = st.add_entry(dir, keys, id) {
            st.free_node(&*self.pages, id);
            return Err(e);
        }
        if is_dir {
            if let Ok(d) = st.node_mut(dir) {
                d.nlink = d.nlink.saturating_add(1);
            }
        }
        st.touch(dir, now);
        Ok(id)
    }

    /// The checks of REMOVE / RMDIR / the source of RENAME on entry `name` of `dir`: the
    /// directory, write and search permission on it, the entry, the sticky bit.
    fn victim(&self, st: &FsState, cred: &Cred<'_>, dir: u64, name: &[u8]) -> NfsResult<u64> {
        let d = st.node(dir)?;
        let entries = &d.as_dir()?.names;
        if name == b"." || name == b".." {
            return Err(NfsError::Inval);
        }
        if name.len() > nfs_proto::nfs3::NFS3_MAXNAMLEN {
            return Err(NfsError::NameTooLong);
        }
        if !may(cred, d, W | X) {
            return Err(NfsError::Acces);
        }
        let id = entries.get(name).ok_or(NfsError::NoEnt)?.fileid;
        if sticky_denies(cred, d, st.node(id)?) {
            return Err(NfsError::Acces);
        }
        Ok(id)
    }

    fn unlink(&self, cred: &Cred<'_>, dir: &NfsFh3, name: &[u8], want_dir: bool) -> NfsResult<()> {
        let dir = self.fileid(dir)?;
        let now = self.now();
        self.state.with(|st| {
            let id = self.victim(st, cred, dir, name)?;
            let n = st.node(id)?;
            match (&n.data, want_dir) {
                (Data::Dir(d), true) if !d.names.is_empty() => return Err(NfsError::NotEmpty),
                (Data::Dir(_), true) => {}
                (Data::Dir(_), false) => return Err(NfsError::IsDir),
                (_, true) => return Err(NfsError::NotDir),
                (_, false) => {}
            }
            st.remove_entry(dir, name)?;
            if want_dir {
                if let Ok(d) = st.node_mut(dir) {
                    d.nlink = d.nlink.saturating_sub(1);
                }
            }
            st.drop_link(&*self.pages, id, now);
            st.touch(dir, now);
            Ok(())
        })
    }
}

impl<L: Lock<FsState>> Drop for PageFs<L> {
    fn drop(&mut self) {
        let pages = &*self.pages;
        self.state.with(|st| st.release_all(pages));
    }
}

impl<L: Lock<FsState>> Backend for PageFs<L> {
    fn getattr(&self, _: &Cred<'_>, fh: &NfsFh3) -> NfsResult<Fattr3> {
        let id = self.fileid(fh)?;
        self.state.with(|st| Ok(st.node(id)?.fattr(id)))
    }

    fn setattr(
        &self,
        cred: &Cred<'_>,
        fh: &NfsFh3,
        attrs: &Sattr3,
        guard: Option<Nfstime3>,
    ) -> NfsResult<()> {
        let id = self.fileid(fh)?;
        let now = self.now();
        let zeroed = self.state.with(|st| {
            let n = st.node(id)?;
            if guard.is_some_and(|t| t != n.ctime) {
                return Err(NfsError::NotSync);
            }
            check_sattr(cred, n, attrs)?;
            let zeroed = match attrs.size {
                Some(sz) => file::set_size(st, &*self.pages, id, sz)?,
                None => 0,
            };
            let n = st.node_mut(id)?;
            apply_sattr(cred, n, attrs, now);
            Ok(zeroed)
        })?;
        self.counters.zeroed.fetch_add(zeroed, Ordering::Relaxed);
        Ok(())
    }

    fn lookup(&self, cred: &Cred<'_>, dir: &NfsFh3, name: &[u8]) -> NfsResult<NfsFh3> {
        let dir = self.fileid(dir)?;
        let id = self.state.with(|st| {
            let d = st.node(dir)?;
            d.as_dir()?;
            if !may(cred, d, X) {
                return Err(NfsError::Acces);
            }
            st.find(dir, name)
        })?;
        Ok(self.fh(id))
    }

    fn access(&self, cred: &Cred<'_>, fh: &NfsFh3, mask: u32) -> NfsResult<u32> {
        let id = self.fileid(fh)?;
        self.state.with(|st| {
            let n = st.node(id)?;
            let ok = access3_bits(
                may(cred, n, R),
                may(cred, n, W),
                may(cred, n, X),
                n.is_dir(),
            );
            Ok(ok & mask)
        })
    }

    fn readlink(&self, _: &Cred<'_>, fh: &NfsFh3) -> NfsResult<Nfspath3> {
        let id = self.fileid(fh)?;
        self.state.with(|st| match &st.node(id)?.data {
            Data::Link(t) => {
                let mut v = Vec::new();
                v.try_reserve_exact(t.len())
                    .map_err(|_| NfsError::Jukebox)?;
                v.extend_from_slice(t);
                Ok(Nfspath3(v))
            }
            _ => Err(NfsError::Inval),
        })
    }

    fn read(
        &self,
        cred: &Cred<'_>,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
        pages: &Arc<dyn PageProvider>,
    ) -> NfsResult<ReadData> {
        let id = self.fileid(fh)?;
        let plan = self.state.with(|st| {
            let n = st.node(id)?;
            n.file_kind_check()?;
            if !may_data(cred, n, R) {
                return Err(NfsError::Acces);
            }
            file::read_plan(st, &*self.pages, id, offset, count)
        })?;
        let eof = plan.eof;
        let (data, c) = file::read_chain(&self.pages, pages, plan)?;
        self.counters.shared.fetch_add(c.shared, Ordering::Relaxed);
        self.counters.zeroed.fetch_add(c.zeroed, Ordering::Relaxed);
        Ok(ReadData { data, eof })
    }

    fn write(
        &self,
        cred: &Cred<'_>,
        fh: &NfsFh3,
        offset: u64,
        _: StableHow,
        data: WriteIov<'_>,
    ) -> NfsResult<Written> {
        let id = self.fileid(fh)?;
        let now = self.now();
        let mut buf = file::scratch()?;
        let (count, c) = self.state.with(|st| {
            let n = st.node(id)?;
            n.file_kind_check()?;
            if !may_data(cred, n, W) {
                return Err(NfsError::Acces);
            }
            let r = file::write(st, &self.pages, id, offset, data, &mut buf)?;
            if r.0 > 0 {
                let n = st.node_mut(id)?;
                n.mtime = now;
                n.ctime = now;
                if cred.uid != 0 {
                    // A write by anyone but root clears set-user-id and set-group-id.
                    n.mode &= !0o6000;
                }
            }
            Ok(r)
        })?;
        self.counters
            .adopted
            .fetch_add(c.adopted, Ordering::Relaxed);
        self.counters.copied.fetch_add(c.copied, Ordering::Relaxed);
        self.counters.zeroed.fetch_add(c.zeroed, Ordering::Relaxed);
        Ok(Written {
            count,
            committed: StableHow::FileSync,
            verf: self.verf(),
        })
    }

    fn create(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        name: &[u8],
        how: &Createhow3,
    ) -> NfsResult<NfsFh3> {
        let dir = self.fileid(dir)?;
        let now = self.now();
        let id = self.state.with(|st| {
            check_name(name)?;
            let d = st.node(dir)?;
            let existing = d.as_dir()?.names.get(name).map(|e| e.fileid);
            if !may(cred, d, X) {
                return Err(NfsError::Acces);
            }
            match (how, existing) {
                (Createhow3::Unchecked(s), Some(id)) => {
                    let n = st.node(id)?;
                    if n.kind != Ftype3::Reg {
                        return Err(NfsError::Exist);
                    }
                    let s = Sattr3 {
                        mode: None,
                        ..s.clone()
                    };
                    check_sattr(cred, n, &s)?;
                    if let Some(sz) = s.size {
                        file::set_size(st, &*self.pages, id, sz)?;
                    }
                    if s != Sattr3::default() {
                        apply_sattr(cred, st.node_mut(id)?, &s, now);
                    }
                    Ok(id)
                }
                (Createhow3::Guarded(_), Some(_)) => Err(NfsError::Exist),
                (Createhow3::Exclusive(v), Some(id)) => match st.node(id)? {
                    n if n.excl == Some(*v) && n.kind == Ftype3::Reg => Ok(id),
                    _ => Err(NfsError::Exist),
                },
                (Createhow3::Unchecked(s) | Createhow3::Guarded(s), None) => {
                    if s.size.is_some_and(|sz| sz > MAX_FILE_SIZE) {
                        return Err(NfsError::FBig);
                    }
                    let mode = s.mode.unwrap_or(0o644);
                    let node = Node::new(
                        Ftype3::Reg,
                        mode,
                        cred.uid,
                        cred.gid,
                        now,
                        Data::File(alloc::collections::BTreeMap::new()),
                    );
                    let id = self.make(st, cred, dir, name, node, Some(s))?;
                    // A new file has no pages: growing it only sets the size.
                    if let Some(sz) = s.size {
                        file::set_size(st, &*self.pages, id, sz)?;
                    }
                    Ok(id)
                }
                (Createhow3::Exclusive(v), None) => {
                    let mut node = Node::new(
                        Ftype3::Reg,
                        0o600,
                        cred.uid,
                        cred.gid,
                        now,
                        Data::File(alloc::collections::BTreeMap::new()),
                    );
                    node.excl = Some(*v);
                    self.make(st, cred, dir, name, node, None)
                }
            }
        })?;
        Ok(self.fh(id))
    }

    fn mkdir(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        name: &[u8],
        attrs: &Sattr3,
    ) -> NfsResult<NfsFh3> {
        let dir = self.fileid(dir)?;
        let now = self.now();
        let id = self.state.with(|st| {
            let mode = attrs.mode.unwrap_or(0o755);
            let node = Node::new(
                Ftype3::Dir,
                mode,
                cred.uid,
                cred.gid,
                now,
                Data::Dir(Dir::new(dir)),
            );
            self.make(st, cred, dir, name, node, Some(attrs))
        })?;
        Ok(self.fh(id))
    }

    fn symlink(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        name: &[u8],
        attrs: &Sattr3,
        target: &[u8],
    ) -> NfsResult<NfsFh3> {
        let dir = self.fileid(dir)?;
        let now = self.now();
        if target.len() > NFS3_MAXPATHLEN {
            return Err(NfsError::NameTooLong);
        }
        if target.is_empty() {
            return Err(NfsError::Inval);
        }
        let mut t = Vec::new();
        t.try_reserve_exact(target.len())
            .map_err(|_| NfsError::Jukebox)?;
        t.extend_from_slice(target);
        let id = self.state.with(|st| {
            let node = Node::new(Ftype3::Lnk, 0o777, cred.uid, cred.gid, now, Data::Link(t));
            self.make(st, cred, dir, name, node, Some(attrs))
        })?;
        Ok(self.fh(id))
    }

    fn mknod(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        name: &[u8],
        what: &Mknoddata3,
    ) -> NfsResult<NfsFh3> {
        let dir = self.fileid(dir)?;
        let now = self.now();
        let (kind, attrs, rdev) = match what {
            Mknoddata3::Chr(d) => (Ftype3::Chr, &d.dev_attributes, d.spec),
            Mknoddata3::Blk(d) => (Ftype3::Blk, &d.dev_attributes, d.spec),
            Mknoddata3::Sock(a) => (Ftype3::Sock, a, Default::default()),
            Mknoddata3::Fifo(a) => (Ftype3::Fifo, a, Default::default()),
            Mknoddata3::Other(_) => return Err(NfsError::BadType),
        };
        if matches!(kind, Ftype3::Chr | Ftype3::Blk) && cred.uid != 0 {
            return Err(NfsError::Perm);
        }
        let id = self.state.with(|st| {
            let mut node = Node::new(
                kind,
                attrs.mode.unwrap_or(0o644),
                cred.uid,
                cred.gid,
                now,
                Data::Special,
            );
            node.rdev = rdev;
            self.make(st, cred, dir, name, node, Some(attrs))
        })?;
        Ok(self.fh(id))
    }

    fn remove(&self, cred: &Cred<'_>, dir: &NfsFh3, name: &[u8]) -> NfsResult<()> {
        self.unlink(cred, dir, name, false)
    }

    fn rmdir(&self, cred: &Cred<'_>, dir: &NfsFh3, name: &[u8]) -> NfsResult<()> {
        self.unlink(cred, dir, name, true)
    }

    fn rename(
        &self,
        cred: &Cred<'_>,
        from_dir: &NfsFh3,
        from: &[u8],
        to_dir: &NfsFh3,
        to: &[u8],
    ) -> NfsResult<()> {
        let (fd, td) = (self.fileid(from_dir)?, self.fileid(to_dir)?);
        let now = self.now();
        self.state.with(|st| {
            check_name(to)?;
            let id = self.victim(st, cred, fd, from)?;
            let t = st.node(td)?;
            let target = t.as_dir()?.names.get(to).map(|e| e.fileid);
            if !may(cred, t, W | X) {
                return Err(NfsError::Acces);
            }
            if fd == td && from == to {
                return Ok(());
            }
            let moving = st.node(id)?;
            let moving_dir = moving.is_dir();
            // A directory changing parent has its ".." rewritten: write permission on it.
            if moving_dir && fd != td && !may(cred, moving, W) {
                return Err(NfsError::Acces);
            }
            if let Some(old) = target {
                if old == id {
                    // Two links of one file: POSIX renames nothing.
                    return Ok(());
                }
                let o = st.node(old)?;
                if sticky_denies(cred, t, o) {
                    return Err(NfsError::Acces);
                }
                match (&o.data, moving_dir) {
                    (Data::Dir(d), true) if !d.names.is_empty() => return Err(NfsError::NotEmpty),
                    (Data::Dir(_), true) => {}
                    (Data::Dir(_), false) => return Err(NfsError::IsDir),
                    (_, true) => return Err(NfsError::NotDir),
                    (_, false) => {}
                }
            }
            if moving_dir && st.is_ancestor(id, td) {
                return Err(NfsError::Inval);
            }
            let freed = entry_charge(from)
                + match target {
                    Some(_) => entry_charge(to),
                    None => 0,
                };
            st.room(entry_charge(to).saturating_sub(freed), 0)?;
            let keys = state::name_keys(to)?;
            // Everything is checked: change.
            if let Some(old) = target {
                let old_is_dir = st.node(old)?.is_dir();
                st.remove_entry(td, to)?;
                if old_is_dir {
                    if let Ok(t) = st.node_mut(td) {
                        t.nlink = t.nlink.saturating_sub(1);
                    }
                }
                st.drop_link(&*self.pages, old, now);
            }
            st.remove_entry(fd, from)?;
            st.add_entry(td, keys, id)?;
            if moving_dir && fd != td {
                if let Ok(f) = st.node_mut(fd) {
                    f.nlink = f.nlink.saturating_sub(1);
                }
                if let Ok(t) = st.node_mut(td) {
                    t.nlink = t.nlink.saturating_add(1);
                }
                if let Ok(d) = st.dir_mut(id) {
                    d.parent = td;
                }
            }
            if let Ok(n) = st.node_mut(id) {
                n.ctime = now;
            }
            st.touch(fd, now);
            st.touch(td, now);
            Ok(())
        })
    }

    fn link(&self, cred: &Cred<'_>, file: &NfsFh3, dir: &NfsFh3, name: &[u8]) -> NfsResult<()> {
        let (id, dir) = (self.fileid(file)?, self.fileid(dir)?);
        let now = self.now();
        self.state.with(|st| {
            check_name(name)?;
            let n = st.node(id)?;
            if n.is_dir() {
                return Err(NfsError::IsDir);
            }
            if n.nlink >= LINK_MAX {
                return Err(NfsError::MLink);
            }
            let d = st.node(dir)?;
            let exists = d.as_dir()?.names.contains_key(name);
            if !may(cred, d, W | X) {
                return Err(NfsError::Acces);
            }
            if exists {
                return Err(NfsError::Exist);
            }
            st.room(entry_charge(name), 0)?;
            let keys = state::name_keys(name)?;
            st.add_entry(dir, keys, id)?;
            let n = st.node_mut(id)?;
            n.nlink = n.nlink.saturating_add(1);
            n.ctime = now;
            st.touch(dir, now);
            Ok(())
        })
    }

    fn readdir(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        cookie: u64,
        _: Cookieverf3,
        sink: &mut dyn DirSink,
    ) -> NfsResult<DirEnd> {
        let dir = self.fileid(dir)?;
        let verf = self.cookieverf();
        let plus = sink.wants_plus();
        self.state.with(|st| {
            let dn = st.node(dir)?;
            let d = dn.as_dir()?;
            if !may(cred, dn, R) {
                return Err(NfsError::Acces);
            }
            if cookie >= d.next_cookie {
                return Err(NfsError::BadCookie);
            }
            let mut offer = |fileid: u64, name: &[u8], cookie: u64| -> NfsResult<bool> {
                let attr = match plus {
                    true => Some(st.node(fileid)?.fattr(fileid)),
                    false => None,
                };
                let fh = make_fh(self.instance, fileid);
                Ok(sink.entry(&DirEntry {
                    fileid,
                    name,
                    cookie,
                    attr: attr.as_ref(),
                    fh: plus.then_some(&fh[..]),
                }))
            };
            let stop = DirEnd { verf, eof: false };
            if cookie < COOKIE_DOT && !offer(dir, b".", COOKIE_DOT)? {
                return Ok(stop);
            }
            if cookie < COOKIE_DOTDOT && !offer(d.parent, b"..", COOKIE_DOTDOT)? {
                return Ok(stop);
            }
            for (c, name, fileid) in FsState::entries_after(d, cookie.max(COOKIE_FIRST - 1)) {
                if !offer(fileid, name, c)? {
                    return Ok(stop);
                }
            }
            Ok(DirEnd { verf, eof: true })
        })
    }

    fn fsstat(&self, _: &Cred<'_>, fh: &NfsFh3) -> NfsResult<FsstatResOk> {
        let id = self.fileid(fh)?;
        self.state.with(|st| {
            st.node(id)?;
            let free = st.capacity.saturating_sub(st.bytes_used());
            let ffree = st.max_nodes.saturating_sub(st.nodes.len() as u64);
            Ok(FsstatResOk {
                obj_attributes: None,
                tbytes: st.capacity,
                fbytes: free,
                abytes: free,
                tfiles: st.max_nodes,
                ffiles: ffree,
                afiles: ffree,
                invarsec: 0,
            })
        })
    }

    fn fsinfo(&self, _: &Cred<'_>, fh: &NfsFh3) -> NfsResult<FsinfoResOk> {
        let id = self.fileid(fh)?;
        self.state.with(|st| st.node(id).map(|_| ()))?;
        Ok(FsinfoResOk {
            obj_attributes: None,
            rtmax: MAX_IO as u32,
            rtpref: MAX_IO as u32,
            rtmult: PAGE_SIZE as u32,
            wtmax: MAX_IO as u32,
            wtpref: MAX_IO as u32,
            wtmult: PAGE_SIZE as u32,
            dtpref: 64 * 1024,
            maxfilesize: MAX_FILE_SIZE,
            time_delta: Nfstime3 {
                seconds: 0,
                nseconds: 1,
            },
            properties: FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME,
        })
    }

    fn pathconf(&self, _: &Cred<'_>, fh: &NfsFh3) -> NfsResult<PathconfResOk> {
        let id = self.fileid(fh)?;
        self.state.with(|st| st.node(id).map(|_| ()))?;
        Ok(PathconfResOk {
            obj_attributes: None,
            linkmax: LINK_MAX,
            name_max: nfs_proto::nfs3::NFS3_MAXNAMLEN as u32,
            no_trunc: true,
            chown_restricted: true,
            case_insensitive: false,
            case_preserving: true,
        })
    }

    fn commit(&self, _: &Cred<'_>, fh: &NfsFh3, _: u64, _: u32) -> NfsResult<Writeverf3> {
        let id = self.fileid(fh)?;
        self.state.with(|st| st.node(id).map(|_| ()))?;
        Ok(self.verf())
    }
}
